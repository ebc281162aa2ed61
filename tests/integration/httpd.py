"""A small threaded HTTP/1.1 upstream for the HTTP proxy tests, and the
helpers the HTTP and TLS tests share (configuration text, certificates,
deterministic bodies).

The upstream answers every request with JSON describing what it received
(method, path, headers in order with duplicates, body length, SHA-256 and,
when small, the body itself), unless query parameters ask otherwise:

  status=N      answer with status N
  size=N        answer with N deterministic bytes (pattern(N)) instead of JSON
  chunked=1     send the answer chunked
  trailers=1    with chunked=1: end with trailers x-checksum and x-trailer-2
  delay=S       sleep S seconds (float) before answering
  die=N         announce size (or 1 MiB) but send only N bytes, then close
  close=1       answer with Connection: close
  fail=N        the first N requests with this path (and query) are
                answered 503 after their body was read
  failmode=close  with fail=N: close the connection instead of answering
  stall=N       the first N requests with this path get no answer: the
                connection is held until the peer closes it

A request carrying Upgrade is answered 101 with the same Upgrade header,
after which every byte read is echoed back until EOF.
"""
import base64
import hashlib
import http.server
import json
import os
import socket
import subprocess
import threading
import time
import urllib.parse

MIB = 1024 * 1024
WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


def pattern(n, seed=0):
    """Deterministic bytes, cheap to produce and check."""
    block = hashlib.sha256(str(seed).encode()).digest() * 2048  # 64 KiB
    reps = n // len(block) + 1
    return (block * reps)[:n]


def sha256(b):
    return hashlib.sha256(b).hexdigest()


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "httpd-test"
    sys_version = ""
    timeout = 30  # a stuck connection ends its thread
    wbufsize = 1 << 16  # one write per response head and small body

    def log_message(self, fmt, *args):  # quiet: pytest shows stderr
        pass

    def setup(self):
        super().setup()
        with self.server.lock:
            self.server.conns += 1

    # -- request body -------------------------------------------------
    def _read_body(self):
        te = self.headers.get("Transfer-Encoding", "")
        trailers = []
        if "chunked" in te.lower():
            out = bytearray()
            while True:
                line = self.rfile.readline(65537)
                size = int(line.split(b";")[0].strip(), 16)
                if size == 0:
                    break
                out += self.rfile.read(size)
                self.rfile.readline()  # CRLF after data
            while True:  # trailers
                line = self.rfile.readline(65537)
                if line in (b"\r\n", b"\n", b""):
                    break
                k, _, v = line.decode("latin-1").partition(":")
                trailers.append([k.strip(), v.strip()])
            return bytes(out), trailers
        n = int(self.headers.get("Content-Length", "0") or 0)
        out = bytearray()
        while len(out) < n:
            d = self.rfile.read(min(n - len(out), 1 << 20))
            if not d:
                break
            out += d
        return bytes(out), trailers

    # -- dispatch -------------------------------------------------------
    def handle_one_request(self):
        # Same as the base class, with every method routed to _serve.
        try:
            self.raw_requestline = self.rfile.readline(65537)
            if not self.raw_requestline:
                self.close_connection = True
                return
            if not self.parse_request():
                return
            self._serve()
            self.wfile.flush()
        except (socket.timeout, ConnectionError, ValueError):
            self.close_connection = True

    def _serve(self):
        u = urllib.parse.urlsplit(self.path)
        q = dict(urllib.parse.parse_qsl(u.query))
        record = {"method": self.command, "path": self.path,
                  "headers": [[k, v] for k, v in self.headers.items()]}
        if self.headers.get("Upgrade"):
            return self._upgrade(record)
        body, req_trailers = self._read_body()
        record.update(body_len=len(body), body_sha256=sha256(body),
                      trailers=req_trailers)
        if len(body) <= 65536:
            record["body"] = body.decode("latin-1")
        with self.server.lock:
            self.server.requests.append(record)
            seen = self.server.seen.get(self.path, 0) + 1
            self.server.seen[self.path] = seen
        if seen <= int(q.get("stall", 0)):
            # Held until the proxy gives up on this attempt.
            self.connection.settimeout(30)
            try:
                while self.connection.recv(65536):
                    pass
            except OSError:
                pass
            with self.server.lock:
                self.server.stalls_ended += 1
            self.close_connection = True
            return
        if seen <= int(q.get("fail", 0)):
            if q.get("failmode") == "close":
                self.connection.shutdown(socket.SHUT_RDWR)
                self.close_connection = True
                return
            self.send_response(503)
            self.send_header("Content-Length", "4")
            self.end_headers()
            self.wfile.write(b"busy")
            return
        if "delay" in q:
            time.sleep(float(q["delay"]))
        status = int(q.get("status", 200))
        if "size" in q:
            payload = pattern(int(q["size"]))
            ctype = "application/octet-stream"
        else:
            payload = json.dumps(record).encode()
            ctype = "application/json"
        chunked = q.get("chunked") == "1"
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        if q.get("close") == "1":
            self.send_header("Connection", "close")
            self.close_connection = True
        if "die" in q:
            self.send_header("Content-Length", str(max(len(payload), MIB)))
            self.end_headers()
            self.wfile.write(payload[:int(q["die"])])
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_RDWR)
            self.close_connection = True
            return
        if chunked:
            self.send_header("Transfer-Encoding", "chunked")
            if q.get("trailers") == "1":
                self.send_header("Trailer", "x-checksum, x-trailer-2")
            self.end_headers()
            if self.command != "HEAD":
                step = 16384
                for i in range(0, len(payload), step):
                    part = payload[i:i + step]
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
                self.wfile.write(b"0\r\n")
                if q.get("trailers") == "1":
                    self.wfile.write(b"x-checksum: " + sha256(payload).encode()
                                     + b"\r\nx-trailer-2: two\r\n")
                self.wfile.write(b"\r\n")
            return
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        if self.command != "HEAD":
            for i in range(0, len(payload), MIB):
                self.wfile.write(payload[i:i + MIB])

    def _upgrade(self, record):
        with self.server.lock:
            self.server.requests.append(record)
        self.send_response(101)
        self.send_header("Connection", "Upgrade")
        self.send_header("Upgrade", self.headers["Upgrade"])
        key = self.headers.get("Sec-WebSocket-Key")
        if key is not None:
            # RFC 6455 4.2.2: strait checks it.
            self.send_header("Sec-WebSocket-Accept", base64.b64encode(
                hashlib.sha1((key + WS_GUID).encode()).digest()).decode())
        self.end_headers()
        self.wfile.flush()
        self.close_connection = True
        # read1 returns what rfile already buffered before reading again,
        # so bytes sent right behind the head are echoed too.
        while True:
            d = self.rfile.read1(65536)
            if not d:
                return
            self.connection.sendall(d)


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 512


class HttpUpstream:
    """The test upstream on 127.0.0.1:<random port>, serving in a thread.

    .addr "127.0.0.1:PORT"; .conns connections accepted; .requests what
    each request carried (dicts as echoed)."""

    def __init__(self):
        self.httpd = _Server(("127.0.0.1", 0), _Handler)
        self.httpd.lock = threading.Lock()
        self.httpd.conns = 0
        self.httpd.requests = []
        self.httpd.seen = {}
        self.httpd.stalls_ended = 0
        self.port = self.httpd.server_address[1]
        self.addr = f"127.0.0.1:{self.port}"
        self.t = threading.Thread(target=self.httpd.serve_forever,
                                  kwargs={"poll_interval": 0.1}, daemon=True)
        self.t.start()

    @property
    def conns(self):
        return self.httpd.conns

    @property
    def stalls_ended(self):
        """Stalled requests whose connection the peer closed."""
        with self.httpd.lock:
            return self.httpd.stalls_ended

    @property
    def requests(self):
        with self.httpd.lock:
            return list(self.httpd.requests)

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()
        self.t.join(5)


# -- configuration text ---------------------------------------------------

def http_listener(name, port, routes=None, http=None, tls=None,
                  host="127.0.0.1"):
    """YAML for one HTTP listener. routes: list of dicts; http, tls: dicts
    of keys written as flow mappings (values written as given)."""
    routes = routes or [{"host": "*", "pathPrefix": "/", "cluster": "backend"}]
    out = (f"  - name: {name}\n    address: \"{host}:{port}\"\n"
           f"    protocol: http\n")
    if tls is not None:
        out += "    tls:\n"
        for k, v in tls.items():
            out += f"      {k}: {_yaml(v)}\n"
    if http:
        out += "    http:\n"
        for k, v in http.items():
            out += f"      {k}: {_yaml(v)}\n"
    out += "    routes:\n"
    for r in routes:
        out += "      - " + _yaml(r) + "\n"
    return out


def clusters(**named):
    """Top-level YAML for clusters: clusters(backend=[addr, ...]) or
    clusters(backend={"endpoints": [...], "maxRequestsPerConnection": 1})."""
    out = "clusters:\n"
    for name, spec in named.items():
        if isinstance(spec, (list, tuple)):
            spec = {"endpoints": list(spec)}
        out += f"  - name: {name}\n"
        for k, v in spec.items():
            out += f"    {k}: {_yaml(v)}\n"
    return out


def _yaml(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k}: {_yaml(x)}" for k, x in v.items()) + "}"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_yaml(x) for x in v) + "]"
    if isinstance(v, int):
        return str(v)
    return json.dumps(str(v))


# -- certificates ---------------------------------------------------------

def make_cert(dirpath, stem, cn, sans, kind="ec"):
    """Self-signed certificate and key made by openssl into dirpath.
    kind: "ec" (P-256) or "rsa" (2048). Returns (cert_path, key_path)."""
    crt = os.path.join(dirpath, f"{stem}.crt")
    key = os.path.join(dirpath, f"{stem}.key")
    newkey = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"] \
        if kind == "ec" else ["-newkey", "rsa:2048"]
    san = ",".join(f"DNS:{s}" for s in sans)
    subprocess.run(["openssl", "req", "-x509", "-nodes", *newkey,
                    "-keyout", key, "-out", crt, "-days", "2",
                    "-subj", f"/CN={cn}/O=strait-test-{stem}",
                    "-addext", f"subjectAltName={san}"],
                   check=True, capture_output=True, timeout=60)
    return crt, key


def s_client(port, *args, servername=None, data=b"", timeout=15):
    """Runs openssl s_client against 127.0.0.1:port; returns
    (returncode, stdout+stderr as text)."""
    cmd = ["openssl", "s_client", "-connect", f"127.0.0.1:{port}"]
    if servername is not None:
        cmd += ["-servername", servername]
    else:
        cmd += ["-noservername"]
    cmd += list(args)
    p = subprocess.run(cmd, input=data, capture_output=True, timeout=timeout)
    return p.returncode, (p.stdout + p.stderr).decode(errors="replace")


def peer_subject(s_client_out):
    """The leaf's subject line from s_client output ("subject=...")."""
    for line in s_client_out.splitlines():
        if line.startswith("subject="):
            return line
    return ""


# -- a raw HTTP/1.1 client ------------------------------------------------

class Response:
    def __init__(self, status, reason, headers, body, trailers, version):
        self.status = status
        self.reason = reason
        self.headers = headers      # [(name lowercased, value)]
        self.body = body
        self.trailers = trailers    # [(name lowercased, value)]
        self.version = version

    def header(self, name):
        name = name.lower()
        for k, v in self.headers:
            if k == name:
                return v
        return None

    def json(self):
        return json.loads(self.body)


def read_response(f, method="GET"):
    """Reads one response from f (a binary file from socket.makefile).
    1xx responses are returned like any other. Returns a Response, or None
    at EOF before a status line."""
    line = f.readline(65537)
    if not line:
        return None
    version, _, rest = line.decode("latin-1").rstrip("\r\n").partition(" ")
    code, _, reason = rest.partition(" ")
    headers = _read_fields(f)
    status = int(code)
    r = Response(status, reason, headers, b"", [], version)
    if status < 200 or status in (204, 304) or method == "HEAD":
        return r
    te = (r.header("transfer-encoding") or "").lower()
    if "chunked" in te:
        body = bytearray()
        while True:
            size = int(f.readline(65537).split(b";")[0].strip(), 16)
            if size == 0:
                break
            body += f.read(size)
            f.readline()
        r.trailers = _read_fields(f)
        r.body = bytes(body)
    elif r.header("content-length") is not None:
        r.body = f.read(int(r.header("content-length")))
    else:
        r.body = f.read()  # to EOF
    return r


def _read_fields(f):
    out = []
    while True:
        line = f.readline(65537)
        if line in (b"\r\n", b"\n", b""):
            return out
        k, _, v = line.decode("latin-1").partition(":")
        out.append((k.strip().lower(), v.strip()))
