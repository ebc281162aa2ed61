"""Real etcd members (Debian's etcd-server 3.4) for the fleet tests: each on
loopback with random ports and a temp data dir, stopped by PID. Also a
client for the JSON gateway and a TCP relay that can cut strait off from a
member without stopping it."""
import base64
import http.client
import json
import os
import pathlib
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
import weakref

from conftest import free_port, wait_for

ETCD = shutil.which("etcd") or "/usr/bin/etcd"


def b64(s):
    if isinstance(s, str):
        s = s.encode()
    return base64.b64encode(s).decode()


class Member:
    def __init__(self, tmp, name):
        self.name = name
        # The data directory is on tmpfs where there is one: etcd syncs
        # its log to disk on every write, which is what makes a churn of
        # thousands of writes slow on a busy disk, and a test's data does
        # not need to outlive the machine. Removed when the member goes.
        shm = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
        self.dir = pathlib.Path(tempfile.mkdtemp(
            prefix=f"strait-etcd-{name}-", dir=shm or str(tmp)))
        weakref.finalize(self, shutil.rmtree, str(self.dir), True)
        self.client = free_port()
        self.peer = free_port()
        self.metrics_port = free_port()
        self.proc = None
        self.log_path = tmp / f"etcd-{name}.log"
        self.tls = None  # {"ca", "cert", "key", "client_cert", "client_key"}

    @property
    def url(self):
        scheme = "https" if self.tls else "http"
        return f"{scheme}://127.0.0.1:{self.client}"

    def context(self):
        if not self.tls:
            return None
        ctx = ssl.create_default_context(cafile=self.tls["ca"])
        ctx.load_cert_chain(self.tls["client_cert"], self.tls["client_key"])
        return ctx

    def start(self, cluster, state="new"):
        logf = open(self.log_path, "ab")
        extra = []
        if self.tls:
            extra = ["--cert-file", self.tls["cert"], "--key-file",
                     self.tls["key"], "--trusted-ca-file", self.tls["ca"],
                     "--client-cert-auth"]
        self.proc = subprocess.Popen([ETCD] + extra + [
            "--name", self.name, "--data-dir", str(self.dir),
            "--listen-client-urls", self.url,
            "--advertise-client-urls", self.url,
            "--listen-peer-urls", f"http://127.0.0.1:{self.peer}",
            "--initial-advertise-peer-urls", f"http://127.0.0.1:{self.peer}",
            "--listen-metrics-urls", f"http://127.0.0.1:{self.metrics_port}",
            "--initial-cluster", cluster, "--initial-cluster-state", state,
            "--initial-cluster-token", "strait-test",
            "--heartbeat-interval", "50", "--election-timeout", "500",
            "--experimental-watch-progress-notify-interval", "1s",
            "--log-outputs", "stderr", "--logger", "zap",
        ], stdout=logf, stderr=logf)
        logf.close()
        return self

    def healthy(self):
        if self.proc is None or self.proc.poll() is not None:
            return False
        try:
            with urllib.request.urlopen(self.url + "/health", timeout=2,
                                        context=self.context()) as r:
                return json.loads(r.read()).get("health") == "true"
        except (OSError, ValueError):
            return False

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def metrics(self):
        out = {}
        with urllib.request.urlopen(
                f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as r:
            for line in r.read().decode().splitlines():
                if line.startswith("etcd_debugging_mvcc_watch"):
                    k, _, v = line.partition(" ")
                    out[k] = float(v)
        return out

    def watchers(self):
        m = self.metrics()
        return (int(m.get("etcd_debugging_mvcc_watcher_total", -1)),
                int(m.get("etcd_debugging_mvcc_watch_stream_total", -1)))


class Cluster:
    def __init__(self, tmp, n=1):
        self.members = [Member(tmp, f"e{i}") for i in range(n)]
        self.spec = ",".join(f"{m.name}=http://127.0.0.1:{m.peer}"
                             for m in self.members)

    def start(self):
        for m in self.members:
            m.start(self.spec)
        self.wait_healthy()
        return self

    def wait_healthy(self, members=None):
        for m in members or self.members:
            wait_for(m.healthy, 30, f"etcd {m.name} healthy")

    def stop(self):
        for m in self.members:
            m.stop()

    def kill(self):
        for m in self.members:
            m.kill()

    @property
    def endpoints(self):
        return [m.url for m in self.members]

    def live(self):
        for m in self.members:
            if m.proc is not None and m.proc.poll() is None:
                return m
        raise AssertionError("no live member")

    def _conn(self, m):
        """This thread's keep-alive connection to member m (a new TCP and
        TLS handshake per write would cost more than the write)."""
        conns = self.__dict__.setdefault("_local", threading.local())
        cache = conns.__dict__.setdefault("c", {})
        c = cache.get(m.url)
        if c is None:
            if m.tls:
                c = http.client.HTTPSConnection("127.0.0.1", m.client,
                                                timeout=10,
                                                context=m.context())
            else:
                c = http.client.HTTPConnection("127.0.0.1", m.client,
                                               timeout=10)
            cache[m.url] = c
        return c

    def _drop(self, m):
        conns = self.__dict__.get("_local")
        c = conns and conns.__dict__.get("c", {}).pop(m.url, None)
        if c is not None:
            c.close()

    def call(self, path, body, member=None):
        data = json.dumps(body).encode()
        deadline = time.monotonic() + 20
        while True:
            m = member or self.live()
            try:
                c = self._conn(m)
                c.request("POST", path, body=data,
                          headers={"Content-Type": "application/json"})
                r = c.getresponse()
                payload = r.read()
                if r.status == 200:
                    return json.loads(payload)
                # A new leader is being elected after a kill: retry.
                if time.monotonic() > deadline:
                    raise AssertionError(f"{path}: {r.status} {payload}")
            except (OSError, http.client.HTTPException):
                self._drop(m)
                if time.monotonic() > deadline:
                    raise
            time.sleep(0.05)

    def put(self, key, value, member=None):
        return int(self.call("/v3/kv/put", {"key": b64(key), "value": b64(value)},
                             member)["header"]["revision"])

    def delete(self, key, member=None):
        return int(self.call("/v3/kv/deleterange", {"key": b64(key)},
                             member)["header"]["revision"])

    def compact(self, revision, member=None):
        return self.call("/v3/kv/compaction",
                         {"revision": str(revision), "physical": True}, member)

    def revision(self, member=None):
        return int(self.call("/v3/kv/range", {"key": b64("/")},
                             member)["header"]["revision"])


class Relay:
    """A TCP relay 127.0.0.1:port -> target. cut() closes every relayed
    connection and stops listening (connections are refused); resume()
    listens again on the same port."""

    def __init__(self, target_port):
        self.target = target_port
        self.port = free_port()
        self.lock = threading.Lock()
        self.conns = []
        self.lsock = None
        self.thread = None
        self.resume()

    def resume(self):
        ls = socket.socket()
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        ls.bind(("127.0.0.1", self.port))
        ls.listen(64)
        self.lsock = ls
        self.thread = threading.Thread(target=self._accept, args=(ls,),
                                       daemon=True)
        self.thread.start()

    def _accept(self, ls):
        while True:
            try:
                c, _ = ls.accept()
            except OSError:
                return
            try:
                u = socket.create_connection(("127.0.0.1", self.target), 5)
            except OSError:
                c.close()
                continue
            with self.lock:
                self.conns += [c, u]
            for a, b in ((c, u), (u, c)):
                threading.Thread(target=self._pipe, args=(a, b),
                                 daemon=True).start()

    def _pipe(self, a, b):
        try:
            while True:
                d = a.recv(65536)
                if not d:
                    break
                b.sendall(d)
        except OSError:
            pass
        for s in (a, b):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def cut(self):
        ls, self.lsock = self.lsock, None
        if ls is not None:
            try:
                ls.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            ls.close()
            self.thread.join(5)
        with self.lock:
            conns, self.conns = self.conns, []
        for s in conns:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def close(self):
        self.cut()
