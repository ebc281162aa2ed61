"""Shared fixtures: start strait on random loopback ports, stop it by PID.

Every process and thread a test starts is stopped at teardown; every wait
is a bounded poll for a condition, never a sleep standing in for one.
"""
import os
import pathlib
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request

import pytest

STRAIT = os.environ.get("STRAIT_BIN") or str(
    pathlib.Path(__file__).resolve().parents[2] / "strait")
SRCDIR = os.environ.get("STRAIT_SRCDIR") or str(
    pathlib.Path(__file__).resolve().parents[2])

SANITIZER_MARKERS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer",
                     "runtime error:", "WARNING: ThreadSanitizer")


def _ephemeral_range():
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            lo, hi = (int(x) for x in f.read().split())
            return lo, hi
    except (OSError, ValueError):
        return 32768, 60999


_ports = {"order": None, "next": 0}


def free_port(host="127.0.0.1"):
    """A free port to listen on, outside the kernel's ephemeral range: a
    port the kernel hands out for bind(0) may be taken a moment later as
    the local port of some outgoing connection, before the process under
    test binds it (seen as "Address already in use").

    Ports come from a shuffled list walked in order, so one test process
    never hands out the same port twice (a test that takes twenty ports
    before starting anything would otherwise draw one twice, by the
    birthday paradox, every few runs); under pytest-xdist each worker
    walks its own residue class, so two workers never share one either.
    A port found taken by another process is skipped. Bounded tries."""
    import random
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    if _ports["order"] is None:
        lo, hi = _ephemeral_range()
        candidates = [p for p in range(10000, 32000) if not lo <= p <= hi]
        worker = os.environ.get("PYTEST_XDIST_WORKER", "")
        count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
        if worker.startswith("gw") and count > 1:
            idx = int(worker[2:]) % count
            candidates = [p for p in candidates if p % count == idx]
        random.shuffle(candidates)
        _ports["order"] = candidates
    order = _ports["order"]
    for _ in range(200):
        port = order[_ports["next"] % len(order)]
        _ports["next"] += 1
        with socket.socket(fam, socket.SOCK_STREAM) as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
            return port
    with socket.socket(fam, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def http_gateway(port, protocol="HTTP", name="gw", namespace="default"):
    """The Gateway most tests route through: one server on 127.0.0.1:port
    for every host, protocol HTTP (or GRPC, HTTP2), selecting every node.
    A YAML document ending with its '---' separator."""
    return f"""apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {{name: {name}, namespace: {namespace}}}
spec:
  selector: {{}}
  servers:
  - port: {{number: {port}, name: {protocol.lower()}, protocol: {protocol}}}
    bind: 127.0.0.1
    hosts: ["*"]
---
"""


def wait_for(cond, timeout=10.0, what="condition", interval=0.02):
    """Polls cond() until it is truthy; fails the test after timeout."""
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


class Strait:
    """One strait process with a bootstrap file in tmp_path."""

    def __init__(self, tmp_path, listeners_yaml="", workers=2, extra=""):
        self.tmp = tmp_path
        self.admin_port = free_port()
        self.config = tmp_path / "strait.yaml"
        self.log_path = tmp_path / "strait.log"
        self.workers = workers
        self.write_config(listeners_yaml, extra)
        self.proc = None

    def write_config(self, listeners_yaml, extra="", raw=None):
        text = raw if raw is not None else (
            f"workers: {self.workers}\n"
            f"admin: {{address: 127.0.0.1:{self.admin_port}}}\n"
            f"{extra}"
            f"listeners:\n{listeners_yaml}\n")
        # Write and rename so a reload never reads half a file.
        tmp = self.config.with_suffix(".tmp")
        tmp.write_text(text)
        os.replace(tmp, self.config)

    def start(self, wait=True, env=None):
        self.logf = open(self.log_path, "ab")
        self.proc = subprocess.Popen([STRAIT, "run", "-c", str(self.config)],
                                     stdout=self.logf, stderr=self.logf,
                                     env=env)
        if wait:
            wait_for(self.ready_or_dead, 15, "strait to become ready")
            assert self.proc.poll() is None, self.log()
        return self

    def ready_or_dead(self):
        if self.proc.poll() is not None:
            raise AssertionError(f"strait exited with {self.proc.returncode}:\n{self.log()}")
        try:
            return self.get("/healthz/ready")[0] == 200
        except OSError:
            return False

    def log(self):
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def url(self, path):
        return f"http://127.0.0.1:{self.admin_port}{path}"

    def get(self, path, method="GET"):
        req = urllib.request.Request(self.url(path), method=method)
        try:
            with urllib.request.urlopen(req, timeout=5) as r:
                return r.status, r.read().decode(), dict(r.headers)
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode(), dict(e.headers)

    def stats(self):
        code, body, _ = self.get("/stats")
        assert code == 200
        out = {}
        for line in body.splitlines():
            k, _, v = line.partition(": ")
            try:
                out[k] = int(v)
            except ValueError:
                out[k] = v
        return out

    def signal(self, sig):
        self.proc.send_signal(sig)

    def stop(self, timeout=30):
        """SIGTERM and wait; returns the exit code."""
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else None
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=timeout)

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        if getattr(self, "logf", None):
            self.logf.close()

    def assert_clean_log(self):
        text = self.log()
        for marker in SANITIZER_MARKERS:
            assert marker not in text, text


@pytest.fixture
def strait_factory(tmp_path):
    made = []

    def make(listeners_yaml="", **kw):
        s = Strait(tmp_path, listeners_yaml, **kw)
        made.append(s)
        return s

    yield make
    for s in made:
        finish_strait(s)


def finish_strait(s):
    """Stops s (SIGTERM) if it runs; fails on a hang, a non-zero exit or a
    sanitizer report in its log. For fixtures that start Strait directly
    (e.g. one process shared by a module's tests)."""
    code = None
    if s.proc is not None and s.proc.poll() is None:
        try:
            code = s.stop(timeout=30)
        except subprocess.TimeoutExpired:
            s.kill()
            raise AssertionError("strait did not exit on SIGTERM")
    s.kill()
    s.assert_clean_log()
    if code is not None:
        assert code == 0, s.log()


class Upstream:
    """A threaded TCP server on loopback (or unix) with a handler per
    connection; stopped at teardown."""

    def __init__(self, handler, family=socket.AF_INET, host="127.0.0.1", path=None,
                 port=0):
        self.sock = socket.socket(family, socket.SOCK_STREAM)
        if family == socket.AF_UNIX:
            self.sock.bind(path)
            self.addr = f"unix:{path}"
        else:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self.sock.bind((host, port))
            port = self.sock.getsockname()[1]
            self.port = port
            self.addr = f"[{host}]:{port}" if family == socket.AF_INET6 else f"{host}:{port}"
        self.sock.listen(512)
        self.sock.settimeout(0.2)
        self.handler = handler
        self.stopped = threading.Event()
        self.conns = 0
        self.threads = []
        self.socks = []
        self.errors = []
        self.t = threading.Thread(target=self.loop, daemon=True)
        self.t.start()

    def loop(self):
        while not self.stopped.is_set():
            try:
                c, _ = self.sock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            self.conns += 1
            self.socks.append(c)
            c.settimeout(30)
            t = threading.Thread(target=self.run_handler, args=(c,), daemon=True)
            self.threads.append(t)
            t.start()

    def run_handler(self, c):
        try:
            self.handler(c)
        except Exception as e:  # reported at stop()
            self.errors.append(repr(e))
        finally:
            c.close()

    def stop(self):
        self.stopped.set()
        self.t.join(5)
        self.sock.close()
        # Wake handlers blocked on connections a proxy still keeps open.
        for c in self.socks:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        for t in self.threads:
            t.join(5)


def read_head(c, buf=b""):
    """Reads from c until a request head is in buf; returns buf, or None
    if the peer closed first."""
    while b"\r\n\r\n" not in buf:
        d = c.recv(65536)
        if not d:
            return None
        buf += d
    return buf


def responder(answer):
    """A keep-alive HTTP/1.1 upstream handler (for upstream_factory): each
    request (bodies are not read) is answered 200 with answer(head), the
    request head as bytes, for body."""
    def handler(c):
        buf = b""
        while True:
            buf = read_head(c, buf)
            if buf is None:
                return
            head, _, buf = buf.partition(b"\r\n\r\n")
            body = answer(head)
            c.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s"
                      % (len(body), body))
    return handler


def echo_handler(c):
    while True:
        d = c.recv(65536)
        if not d:
            return
        c.sendall(d)


@pytest.fixture
def upstream_factory():
    made = []

    def make(handler=echo_handler, **kw):
        u = Upstream(handler, **kw)
        made.append(u)
        return u

    yield make
    for u in made:
        u.stop()


def connect(port, host="127.0.0.1", timeout=10):
    s = socket.create_connection((host, port), timeout=timeout)
    return s


def recv_exact(s, n):
    out = bytearray()
    while len(out) < n:
        d = s.recv(n - len(out))
        if not d:
            break
        out += d
    return bytes(out)


def recv_all(s):
    out = bytearray()
    while True:
        d = s.recv(65536)
        if not d:
            return bytes(out)
        out += d


@pytest.fixture
def httpd_factory():
    """Test HTTP/1.1 upstreams (httpd.HttpUpstream), stopped at teardown."""
    from httpd import HttpUpstream
    made = []

    def make():
        u = HttpUpstream()
        made.append(u)
        return u

    yield make
    for u in made:
        u.stop()


@pytest.fixture
def certs(tmp_path):
    """Test certificates made with openssl into tmp_path: "ec" (P-256,
    example.com and *.example.com), "rsa" (2048, the same names), "other"
    (P-256, other.test only). Each a (cert_path, key_path); the subject's
    O is strait-test-<name>."""
    from httpd import make_cert
    d = tmp_path / "certs"
    d.mkdir()
    names = ["example.com", "*.example.com"]
    return {
        "ec": make_cert(str(d), "ec", "example.com", names, "ec"),
        "rsa": make_cert(str(d), "rsa", "example.com", names, "rsa"),
        "other": make_cert(str(d), "other", "other.test", ["other.test"], "ec"),
    }
