"""HTTP/2 downstream (h2c and h2 over TLS) through the real binary to an
HTTP/1.1 test upstream, with curl, nghttp, h2load and python3-h2."""
import json
import re
import signal
import socket
import ssl
import subprocess
import time

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.settings

from conftest import free_port, wait_for
from httpd import MIB, clusters, http_listener, pattern, sha256


def start(strait_factory, up, http=None, tls=None, routes=None, workers=2,
          extra=""):
    port = free_port()
    st = strait_factory(http_listener("web", port, routes=routes, http=http,
                                      tls=tls),
                        workers=workers,
                        extra=extra + clusters(backend=[up.addr])).start()
    return st, port


def run(cmd, timeout=60):
    return subprocess.run(cmd, capture_output=True, timeout=timeout)


def hval(record, name):
    vals = [v for k, v in record["headers"] if k.lower() == name.lower()]
    return vals[0] if len(vals) == 1 else (vals or None)


class H2Client:
    """A python3-h2 client on one connection (h2c, or h2 over TLS)."""

    def __init__(self, port, tls=False, settings=None, timeout=10):
        self.sock = socket.create_connection(("127.0.0.1", port),
                                             timeout=timeout)
        if tls:
            ctx = ssl.create_default_context()
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
            ctx.set_alpn_protocols(["h2"])
            self.sock = ctx.wrap_socket(self.sock, server_hostname="example.com")
        cfg = h2.config.H2Configuration(client_side=True,
                                        header_encoding="utf-8")
        self.conn = h2.connection.H2Connection(config=cfg)
        self.conn.initiate_connection()
        if settings:
            self.conn.update_settings(settings)
        self.flush()
        self.streams = {}   # id -> dict(headers, data, trailers, ended, reset)
        self.goaway = None
        self.closed = False

    def flush(self):
        data = self.conn.data_to_send()
        if data:
            self.sock.sendall(data)

    def request(self, path, method="GET", body=None, headers=(),
                authority="example.com", scheme="http"):
        sid = self.conn.get_next_available_stream_id()
        hdrs = [(":method", method), (":scheme", scheme), (":path", path),
                (":authority", authority), *headers]
        self.conn.send_headers(sid, hdrs, end_stream=body is None)
        self.streams[sid] = {"headers": None, "data": bytearray(),
                             "trailers": None, "ended": False, "reset": None}
        if body is not None:
            self.conn.send_data(sid, body, end_stream=True)
        self.flush()
        return sid

    def pump(self):
        """Reads once and handles what came; False at EOF."""
        try:
            data = self.sock.recv(1 << 20)
        except (ConnectionResetError, ssl.SSLError):
            data = b""
        if not data:
            self.closed = True
            return False
        for ev in self.conn.receive_data(data):
            st = self.streams.get(getattr(ev, "stream_id", 0))
            if isinstance(ev, h2.events.ResponseReceived):
                st["headers"] = dict(ev.headers)
            elif isinstance(ev, h2.events.DataReceived):
                st["data"] += ev.data
                self.conn.acknowledge_received_data(
                    ev.flow_controlled_length, ev.stream_id)
            elif isinstance(ev, h2.events.TrailersReceived):
                st["trailers"] = dict(ev.headers)
            elif isinstance(ev, h2.events.StreamEnded):
                st["ended"] = True
            elif isinstance(ev, h2.events.StreamReset):
                if st is not None:
                    st["reset"] = ev.error_code
            elif isinstance(ev, h2.events.ConnectionTerminated):
                self.goaway = ev
        self.flush()
        return True

    def wait(self, cond, timeout=20, what="h2 condition"):
        deadline = time.monotonic() + timeout
        while not cond():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}")
            if self.closed or not self.pump():
                if cond():
                    return
                raise AssertionError(f"connection closed waiting for {what}")

    def done(self, sid):
        s = self.streams[sid]
        return s["ended"] or s["reset"] is not None

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


def read_until_closed(sock, timeout=10):
    """Reads and discards until EOF or reset; True if that came in time."""
    sock.settimeout(timeout)
    got = bytearray()
    try:
        while True:
            d = sock.recv(1 << 16)
            if not d:
                return True, bytes(got)
            got += d
    except (ConnectionResetError, BrokenPipeError):
        return True, bytes(got)
    except socket.timeout:
        return False, bytes(got)


def goaway_code(raw):
    """The error code of the first GOAWAY frame in raw server bytes (after
    the server's preface), or None."""
    i = 0
    while i + 9 <= len(raw):
        ln = int.from_bytes(raw[i:i + 3], "big")
        ftype = raw[i + 3]
        if ftype == 7 and i + 9 + 8 <= len(raw):
            return int.from_bytes(raw[i + 13:i + 17], "big")
        i += 9 + ln
    return None


# -- clients ---------------------------------------------------------------

def test_h2c_prior_knowledge_curl_and_nghttp(strait_factory, httpd_factory):
    up = httpd_factory()
    st, port = start(strait_factory, up)
    p = run(["curl", "-sS", "--http2-prior-knowledge", "-o", "-",
             "-w", "\n%{http_version}", f"http://127.0.0.1:{port}/h2c?x=1"])
    assert p.returncode == 0, p.stderr
    body, _, ver = p.stdout.rpartition(b"\n")
    assert ver == b"2"
    rec = json.loads(body)
    assert rec["path"] == "/h2c?x=1" and rec["method"] == "GET"
    assert hval(rec, "host") == f"127.0.0.1:{port}"
    assert "protocol=HTTP/2" in wait_for(
        lambda: [l for l in st.log().splitlines() if "path=\"/h2c?x=1\"" in l],
        5, "log line")[0]

    p = run(["nghttp", "-v", f"http://127.0.0.1:{port}/ng"], timeout=30)
    assert p.returncode == 0, p.stderr
    assert b":status: 200" in p.stdout
    assert b'"path": "/ng"' in p.stdout


def test_h2_over_tls_via_alpn(strait_factory, httpd_factory, certs):
    up = httpd_factory()
    crt, key = certs["ec"]
    st, port = start(strait_factory, up, tls={
        "certificates": [{"serverCertificate": crt, "privateKey": key}]})
    p = run(["curl", "-sS", "-k", "--http2", "-w", "\n%{http_version}",
             "--resolve", f"example.com:{port}:127.0.0.1",
             f"https://example.com:{port}/tls"])
    assert p.returncode == 0, p.stderr
    body, _, ver = p.stdout.rpartition(b"\n")
    assert ver == b"2"
    rec = json.loads(body)
    assert hval(rec, "x-forwarded-proto") == "https"
    assert hval(rec, "host") == f"example.com:{port}"
    # http/1.1 by ALPN on the same listener.
    p = run(["curl", "-sS", "-k", "--http1.1", "-w", "\n%{http_version}",
             "--resolve", f"example.com:{port}:127.0.0.1",
             f"https://example.com:{port}/tls1"])
    assert p.returncode == 0 and p.stdout.endswith(b"\n1.1"), p


def test_many_concurrent_streams(strait_factory, httpd_factory):
    up = httpd_factory()
    st, port = start(strait_factory, up)
    p = run(["h2load", "-n", "200", "-c", "2", "-m", "20",
             f"http://127.0.0.1:{port}/load"], timeout=120)
    out = p.stdout.decode()
    assert p.returncode == 0, out + p.stderr.decode()
    assert re.search(r"requests: 200 total, 200 started, 200 done, "
                     r"200 succeeded, 0 failed, 0 errored", out), out
    assert re.search(r"status codes: 200 2xx", out), out
    p = run(["nghttp", "-n", "-m", "50", f"http://127.0.0.1:{port}/ng50"],
            timeout=60)
    assert p.returncode == 0, p.stderr


def test_20mib_bodies_over_h2(strait_factory, httpd_factory, tmp_path):
    up = httpd_factory()
    st, port = start(strait_factory, up)
    size = 20 * MIB
    p = run(["curl", "-sS", "--http2-prior-knowledge", "--max-time", "60",
             f"http://127.0.0.1:{port}/down?size={size}"], timeout=90)
    assert p.returncode == 0, p.stderr
    assert len(p.stdout) == size and sha256(p.stdout) == sha256(pattern(size))

    src = tmp_path / "up.bin"
    src.write_bytes(pattern(size, seed=5))
    p = run(["curl", "-sS", "--http2-prior-knowledge", "--max-time", "60",
             "--data-binary", f"@{src}", f"http://127.0.0.1:{port}/up"],
            timeout=90)
    assert p.returncode == 0, p.stderr
    rec = json.loads(p.stdout)
    assert rec["body_len"] == size
    assert rec["body_sha256"] == sha256(pattern(size, seed=5))


def test_h2_request_translated_to_http11(strait_factory, httpd_factory):
    up = httpd_factory()
    st, port = start(strait_factory, up)
    c = H2Client(port)
    try:
        sid = c.request("/tr?q=1", authority="app.example.com:8443",
                        headers=[("cookie", "a=1"), ("cookie", "b=2"),
                                 ("x-custom", "v")])
        sid2 = c.request("/post", method="POST", body=b"h2-body")
        c.wait(lambda: c.done(sid) and c.done(sid2))
    finally:
        c.close()
    s = c.streams[sid]
    assert s["headers"][":status"] == "200"
    rec = json.loads(bytes(s["data"]))
    assert hval(rec, "host") == "app.example.com:8443"
    assert hval(rec, "cookie") == "a=1; b=2"
    assert hval(rec, "x-custom") == "v"
    assert not any(k.startswith(":") for k, _ in rec["headers"])
    rec2 = json.loads(bytes(c.streams[sid2]["data"]))
    assert rec2["method"] == "POST" and rec2["body"] == "h2-body"


def test_response_trailers_reach_h2_client(strait_factory, httpd_factory):
    up = httpd_factory()
    st, port = start(strait_factory, up)
    c = H2Client(port)
    try:
        sid = c.request("/t?size=30000&chunked=1&trailers=1",
                        headers=[("te", "trailers")])
        c.wait(lambda: c.done(sid))
    finally:
        c.close()
    s = c.streams[sid]
    assert s["reset"] is None and s["headers"][":status"] == "200"
    assert bytes(s["data"]) == pattern(30000)
    assert s["trailers"] is not None, "no trailers"
    assert s["trailers"].get("x-checksum") == sha256(pattern(30000))
    assert s["trailers"].get("x-trailer-2") == "two"


# -- abuse -------------------------------------------------------------------

def test_ping_burst_is_fine(strait_factory, httpd_factory):
    up = httpd_factory()
    st, port = start(strait_factory, up)
    c = H2Client(port)
    try:
        for i in range(100):
            c.conn.ping(i.to_bytes(8, "big"))
        c.flush()
        sid = c.request("/after-pings")
        c.wait(lambda: c.done(sid))
        assert c.streams[sid]["headers"][":status"] == "200"
        assert c.goaway is None
    finally:
        c.close()
    assert st.stats()["listener.web.http2.flood"] == 0


def test_settings_flood_closes_connection(strait_factory, httpd_factory):
    up = httpd_factory()
    st, port = start(strait_factory, up)
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
    settings = b"\x00\x00\x06\x04\x00\x00\x00\x00\x00\x00\x03\x00\x00\x00\x64"
    s.sendall(preface + settings)
    # Never read: every SETTINGS owes an ACK that piles up in strait.
    closed = False
    try:
        for _ in range(100):
            s.sendall(settings * 100)
    except (ConnectionResetError, BrokenPipeError):
        closed = True
    if not closed:
        closed, _ = read_until_closed(s, timeout=10)
    s.close()
    assert closed, "strait kept the flooding connection open"
    wait_for(lambda: st.stats()["listener.web.http2.flood"] >= 1, 5,
             "http2.flood to count")
    # strait still serves.
    p = run(["curl", "-sS", "--http2-prior-knowledge",
             f"http://127.0.0.1:{port}/ok"])
    assert p.returncode == 0, p.stderr


def test_rapid_reset_gets_enhance_your_calm(strait_factory, httpd_factory):
    up = httpd_factory()
    st, port = start(strait_factory, up)
    cfg = h2.config.H2Configuration(client_side=True)
    conn = h2.connection.H2Connection(config=cfg)
    conn.initiate_connection()
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(conn.data_to_send())
    hdrs = [(":method", "GET"), (":scheme", "http"),
            (":path", "/slow?delay=1"), (":authority", "a")]
    # A normal client on another connection, in flight during the attack.
    good = H2Client(port)
    gsid = good.request("/good?delay=0.3")
    sent_ok = True
    try:
        for i in range(1000):
            sid = 1 + 2 * i
            conn.send_headers(sid, hdrs, end_stream=True)
            conn.reset_stream(sid, h2.errors.ErrorCodes.CANCEL)
            if i % 50 == 49:
                s.sendall(conn.data_to_send())
        s.sendall(conn.data_to_send())
    except (ConnectionResetError, BrokenPipeError):
        sent_ok = False
    closed, raw = read_until_closed(s, timeout=10)
    s.close()
    assert closed or not sent_ok, "connection not closed"
    code = goaway_code(raw)
    assert code == h2.errors.ErrorCodes.ENHANCE_YOUR_CALM, (code, raw[:200])
    wait_for(lambda: st.stats()["listener.web.http2.rapid_reset"] >= 1, 5,
             "http2.rapid_reset to count")
    try:
        good.wait(lambda: good.done(gsid))
        assert good.streams[gsid]["headers"][":status"] == "200"
        sid = good.request("/good2")
        good.wait(lambda: good.done(sid))
        assert good.streams[sid]["headers"][":status"] == "200"
    finally:
        good.close()


def test_upstream_dying_resets_only_its_stream(strait_factory, httpd_factory):
    up = httpd_factory()
    st, port = start(strait_factory, up)
    c = H2Client(port)
    try:
        ok1 = c.request("/ok1?size=100000&delay=0.2")
        bad = c.request("/bad?size=500000&die=100000")
        ok2 = c.request("/ok2?size=200000&delay=0.2")
        c.wait(lambda: all(c.done(x) for x in (ok1, bad, ok2)))
        assert c.streams[bad]["reset"] is not None, \
            "the broken response was not reset"
        assert len(c.streams[bad]["data"]) <= 100000
        for sid, n in ((ok1, 100000), (ok2, 200000)):
            assert c.streams[sid]["reset"] is None
            assert bytes(c.streams[sid]["data"]) == pattern(n)
        # The connection itself is still usable.
        sid = c.request("/after")
        c.wait(lambda: c.done(sid))
        assert c.streams[sid]["headers"][":status"] == "200"
        assert c.goaway is None
    finally:
        c.close()


def test_goaway_on_drain_lets_inflight_stream_finish(strait_factory,
                                                     httpd_factory):
    # python3-h2 treats any frame after a GOAWAY as a protocol error, so
    # nghttp is the client here: it prints the frames it receives.
    up = httpd_factory()
    st, port = start(strait_factory, up)
    ng = subprocess.Popen(["nghttp", "-v", "-t", "20",
                           f"http://127.0.0.1:{port}/inflight?delay=1&size=5000"],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        wait_for(lambda: any(r["path"].startswith("/inflight")
                             for r in up.requests), 10, "request upstream")
        st.signal(signal.SIGTERM)
        out, err = ng.communicate(timeout=20)
    finally:
        if ng.poll() is None:
            ng.kill()
            ng.wait(5)
    text = out.decode(errors="replace")
    assert ng.returncode == 0, text + err.decode()
    m = re.search(r"recv GOAWAY frame.*?last_stream_id=(\d+), "
                  r"error_code=(\w+)", text, re.S)
    assert m, text
    assert int(m.group(1)) >= 1 and m.group(2).startswith("NO_ERROR"), m.group(0)
    assert ":status: 200" in text
    # The whole body arrived after the GOAWAY.
    assert re.search(r"recv DATA frame <length=\d+, flags=0x01", text), text
    assert text.index("recv GOAWAY") < text.rindex("recv DATA frame")
    assert st.proc.wait(timeout=15) == 0


def cpu_ticks(pid):
    """User + system CPU time of a process, in clock ticks."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def server_rx_queue(port, client):
    """Bytes waiting unread in strait's socket of the loopback connection
    from client (a connected socket) to port (/proc/net/tcp)."""
    peer = client.getsockname()[1]
    with open("/proc/net/tcp") as f:
        for line in f.readlines()[1:]:
            cols = line.split()
            local, remote = cols[1], cols[2]
            if (int(local.split(":")[1], 16) == port and
                    int(remote.split(":")[1], 16) == peer):
                return int(cols[4].split(":")[1], 16)
    return None


def test_h2c_preface_in_pieces(strait_factory, httpd_factory):
    """A prior-knowledge client whose preface arrives in pieces is served
    once the rest comes; while it waits, the worker does not spin on the
    piece it has (left in the socket, it kept the socket readable and woke
    the loop on every turn until the 10 s detection deadline)."""
    up = httpd_factory()
    st, port = start(strait_factory, up, workers=1)
    c = H2Client.__new__(H2Client)
    c.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    c.conn = h2.connection.H2Connection(
        config=h2.config.H2Configuration(client_side=True,
                                         header_encoding="utf-8"))
    c.conn.initiate_connection()
    c.streams, c.goaway, c.closed = {}, None, False
    hello = c.conn.data_to_send()
    c.sock.sendall(hello[:5])  # "PRI *"
    # strait takes the piece off its socket (a piece left there keeps it
    # readable).
    wait_for(lambda: server_rx_queue(port, c.sock) == 0, 10,
             "the first piece taken")
    # Not a synchronisation: the CPU strait uses over a quiet second and a
    # half, while it holds a piece of a preface. A spinning worker burns
    # most of it; a waiting one next to none.
    before = cpu_ticks(st.proc.pid)
    time.sleep(1.5)
    spent = cpu_ticks(st.proc.pid) - before
    assert spent < 50, f"{spent} ticks of CPU while waiting for the preface"
    c.sock.sendall(hello[5:17])
    c.sock.sendall(hello[17:])
    sid = c.request("/pieces")
    c.wait(lambda: c.done(sid), what="the response")
    assert c.streams[sid]["headers"][":status"] == "200"
    assert json.loads(bytes(c.streams[sid]["data"]))["path"] == "/pieces"
    c.close()


def test_h2c_preface_gone_astray_is_closed(strait_factory, httpd_factory):
    """A preface that goes astray is neither HTTP/2 nor an HTTP/1 request:
    once its first piece was taken on its own, the connection is closed
    and counted as a protocol error, and the listener goes on serving."""
    up = httpd_factory()
    st, port = start(strait_factory, up, workers=1)
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(b"PRI * HTTP/2.0\r\n")
    wait_for(lambda: server_rx_queue(port, s) == 0, 10,
             "the first piece taken")
    s.sendall(b"\r\nXX\r\n\r\n")
    assert read_until_closed(s) == (True, b"")
    wait_for(lambda: st.stats()["listener.web.http.protocol_errors"] == 1,
             10, "the protocol error counted")
    p = run(["curl", "-sS", "--http2-prior-knowledge", "-o", "/dev/null",
             "-w", "%{http_code}", f"http://127.0.0.1:{port}/after"])
    assert p.stdout == b"200", p.stderr


# -- issue 12 items 16 and 18 ---------------------------------------------------

def head_upstream(upstream_factory):
    """An HTTP/1.1 upstream answering HEAD with content-length: 1234 and no
    body, GET with 4 bytes; it records each request head in .heads."""
    heads = []

    def handler(c):
        buf = b""
        while True:
            while b"\r\n\r\n" not in buf:
                d = c.recv(65536)
                if not d:
                    return
                buf += d
            head, _, buf = buf.partition(b"\r\n\r\n")
            heads.append(head.decode("latin-1"))
            if head.startswith(b"HEAD /empty"):
                c.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
            elif head.startswith(b"HEAD "):
                c.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: 1234\r\n\r\n")
            else:
                c.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\n\r\nbody")

    up = upstream_factory(handler)
    up.heads = heads
    return up


def test_head_response_keeps_content_length(strait_factory, upstream_factory):
    """Item 16: HEAD responses lost their content-length on the way
    through (RFC 9110 9.3.2 says it is the GET's length); h1 and h2."""
    from conftest import connect
    from httpd import read_response
    up = head_upstream(upstream_factory)
    st, port = start(strait_factory, up)
    with connect(port) as s:
        s.sendall(b"HEAD /h HTTP/1.1\r\nHost: a\r\n\r\n")
        f = s.makefile("rb")
        r = read_response(f, "HEAD")
        assert r.status == 200
        assert r.header("content-length") == "1234", r.headers
        assert r.body == b""
        # The connection is still in step: no body bytes were sent.
        s.sendall(b"GET /g HTTP/1.1\r\nHost: a\r\n\r\n")
        r = read_response(f)
        assert r.status == 200 and r.body == b"body"
        # An empty resource says so: content-length: 0.
        s.sendall(b"HEAD /empty HTTP/1.1\r\nHost: a\r\n\r\n")
        r = read_response(f, "HEAD")
        assert r.header("content-length") == "0", r.headers
    c = H2Client(port)
    try:
        sid = c.request("/h2", method="HEAD")
        sid0 = c.request("/empty", method="HEAD")
        c.wait(lambda: c.done(sid) and c.done(sid0))
    finally:
        c.close()
    h = c.streams[sid]["headers"]
    assert h[":status"] == "200"
    assert h.get("content-length") == "1234", h
    assert bytes(c.streams[sid]["data"]) == b""
    assert c.streams[sid0]["headers"].get("content-length") == "0", \
        c.streams[sid0]["headers"]


def test_head_content_length_through_h2_cluster(strait_factory,
                                                upstream_factory):
    """The same across an HTTP/2 hop: front (h1) -> h2 cluster -> back."""
    from conftest import connect
    from httpd import read_response
    from test_regressions import chain
    up = head_upstream(upstream_factory)
    st, front = chain(strait_factory, up.addr)
    for path, want in ((b"/h", "1234"), (b"/empty", "0")):
        with connect(front) as s:
            s.sendall(b"HEAD " + path + b" HTTP/1.1\r\nHost: a\r\n\r\n")
            r = read_response(s.makefile("rb"), "HEAD")
            assert r.status == 200
            assert r.header("content-length") == want, (path, r.headers)


def forwarded_proto(up, path):
    for head in up.heads:
        if head.split(" ")[1] == path:
            for line in head.split("\r\n")[1:]:
                k, _, v = line.partition(":")
                if k.strip().lower() == "x-forwarded-proto":
                    return v.strip()
            return None
    raise AssertionError(f"{path} never reached the upstream")


def test_h2c_scheme_is_not_forwarded_proto(strait_factory, upstream_factory):
    """Item 18: on h2c, a client's :scheme https became x-forwarded-proto:
    https upstream. It comes from the connection; an unknown scheme is a
    400."""
    up = head_upstream(upstream_factory)
    st, port = start(strait_factory, up)
    c = H2Client(port)
    try:
        a = c.request("/https", scheme="https")
        b = c.request("/gopher", scheme="gopher")
        d = c.request("/http", scheme="http")
        c.wait(lambda: c.done(a) and c.done(b) and c.done(d))
    finally:
        c.close()
    assert c.streams[a]["headers"][":status"] == "200"
    assert c.streams[b]["headers"][":status"] == "400"
    assert c.streams[d]["headers"][":status"] == "200"
    assert forwarded_proto(up, "/https") == "http"
    assert forwarded_proto(up, "/http") == "http"
    assert not any(h.split(" ")[1] == "/gopher" for h in up.heads)


def test_h2_underscore_framing_alias_dropped(strait_factory, upstream_factory):
    """Item 19 on HTTP/2: transfer_encoding and content_length from an h2
    client reached the HTTP/1.1 upstream under the default ALLOW policy."""
    up = head_upstream(upstream_factory)
    st, port = start(strait_factory, up)
    c = H2Client(port)
    try:
        sid = c.request("/us", headers=[("transfer_encoding", "chunked"),
                                        ("content_length", "5"),
                                        ("x_other", "1")])
        c.wait(lambda: c.done(sid))
    finally:
        c.close()
    assert c.streams[sid]["headers"][":status"] == "200"
    head, = [h for h in up.heads if h.split(" ")[1] == "/us"]
    names = [line.partition(":")[0].lower() for line in head.split("\r\n")[1:]]
    assert "transfer_encoding" not in names and "content_length" not in names
    assert "x_other" in names, names


def test_h2_underscore_twins_of_set_headers_dropped(strait_factory,
                                                    upstream_factory):
    """Issue 28 on HTTP/2: x_forwarded_for and proxy_connection twins
    reached the upstream under the default ALLOW policy."""
    up = head_upstream(upstream_factory)
    st, port = start(strait_factory, up)
    c = H2Client(port)
    try:
        sid = c.request("/tw", headers=[("x_forwarded_for", "6.6.6.6"),
                                        ("proxy_connection", "6.6.6.6"),
                                        ("x_envoy_internal", "6.6.6.6"),
                                        ("x_request_id", "6.6.6.6"),
                                        ("x_other", "1")])
        c.wait(lambda: c.done(sid))
    finally:
        c.close()
    assert c.streams[sid]["headers"][":status"] == "200"
    head, = [h for h in up.heads if h.split(" ")[1] == "/tw"]
    names = [line.partition(":")[0].lower() for line in head.split("\r\n")[1:]]
    for n in ("x_forwarded_for", "proxy_connection", "x_envoy_internal",
              "x_request_id"):
        assert n not in names, names
    assert "6.6.6.6" not in head
    assert "x_other" in names, names


def test_h2_path_fragment_and_authority_userinfo_are_400(strait_factory,
                                                         upstream_factory):
    """Issue 28: an HTTP/2 :path with a #fragment and an :authority with
    userinfo were forwarded where HTTP/1.1 answers 400; now both are 400
    on the stream (the connection goes on), and nothing goes upstream."""
    up = head_upstream(upstream_factory)
    st, port = start(strait_factory, up)
    c = H2Client(port)
    try:
        frag = c.request("/a?x=1#/admin")
        user = c.request("/u", authority="evil@example.com")
        ok = c.request("/fine")
        c.wait(lambda: all(c.done(s) for s in (frag, user, ok)))
    finally:
        c.close()
    assert c.streams[frag]["headers"][":status"] == "400"
    assert c.streams[user]["headers"][":status"] == "400"
    assert c.streams[ok]["headers"][":status"] == "200"
    assert c.goaway is None
    assert [h.split(" ")[1] for h in up.heads] == ["/fine"]
