"""Header-list limits on HTTP/2 and HTTP/1 trailers and upstream heads, and
the HTTP/2 conformance checks h2spec makes (http2/5.1.1/2, http2/3.5/2),
written with python3-h2 and raw sockets."""
import socket
import subprocess
import threading

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import pytest

from conftest import free_port, wait_for
from httpd import clusters, http_listener
from test_http1 import log_line, request as h1_request
from test_http2 import H2Client, goaway_code, read_until_closed, start

# The listener defaults (README): maxRequestHeadersSize 60 KiB,
# maxRequestHeaders 100. A field costs name + value + 32 octets (HPACK's
# entry size), as for the head.
MAX_HEAD = 60 * 1024
MAX_FIELDS = 100


def vm_rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


def send_with_trailers(c, trailers, path="/t"):
    """A POST whose body ends with the given trailer section."""
    sid = c.conn.get_next_available_stream_id()
    c.conn.send_headers(sid, [(":method", "POST"), (":scheme", "http"),
                              (":path", path), (":authority", "example.com")])
    c.streams[sid] = {"headers": None, "data": bytearray(), "trailers": None,
                      "ended": False, "reset": None}
    c.conn.send_data(sid, b"body")
    c.conn.send_headers(sid, trailers, end_stream=True)
    c.flush()
    return sid


def fields_of_size(total, n):
    """n trailer fields whose sizes (name + value + 32) add up to total."""
    out, left = [], total
    for i in range(n):
        name = f"x-t{i:03d}"
        size = left // (n - i)
        out.append((name, "v" * (size - 32 - len(name))))
        left -= size
    assert sum(len(a) + len(b) + 32 for a, b in out) == total
    return out


def test_h2_trailers_at_the_limit_pass_one_byte_over_is_reset(
        strait_factory, httpd_factory):
    """A trailer section is a header list under the head's limits: one of
    exactly maxRequestHeadersSize passes, one octet more resets the stream
    (Envoy resets it too), and the connection goes on serving."""
    up = httpd_factory()
    st, port = start(strait_factory, up, workers=1)
    c = H2Client(port)
    ok = send_with_trailers(c, fields_of_size(MAX_HEAD, 16))
    c.wait(lambda: c.done(ok), what="the at-the-limit request")
    assert c.streams[ok]["reset"] is None
    assert c.streams[ok]["headers"][":status"] == "200"
    over = send_with_trailers(c, fields_of_size(MAX_HEAD + 1, 16))
    c.wait(lambda: c.done(over), what="the over-the-limit request")
    assert c.streams[over]["reset"] is not None
    # Count: 100 fields pass, 101 do not.
    many = [(f"x-n{i}", "1") for i in range(MAX_FIELDS)]
    ok2 = send_with_trailers(c, many)
    c.wait(lambda: c.done(ok2), what="100 trailers")
    assert c.streams[ok2]["reset"] is None
    over2 = send_with_trailers(c, many + [("x-last", "1")])
    c.wait(lambda: c.done(over2), what="101 trailers")
    assert c.streams[over2]["reset"] is not None
    after = c.request("/after")
    c.wait(lambda: c.done(after), what="a request after the resets")
    assert c.streams[after]["headers"][":status"] == "200"
    c.close()


def test_h2_hpack_indexed_trailer_bomb_is_refused_and_rss_bounded(
        strait_factory, httpd_factory):
    """Each 1-byte HPACK index in a trailer block can stand for a 4 KiB
    field. 1000 of them per stream on 2 connections, 40 streams each, were
    ~160 MiB decoded from ~300 KiB on the wire and stayed in RSS; now each
    stream is reset at the header-list limit and RSS stays bounded."""
    up = httpd_factory()
    st, port = start(strait_factory, up, workers=1)
    warm = H2Client(port)
    sid = warm.request("/warm")
    warm.wait(lambda: warm.done(sid), what="a warm-up request")
    warm.close()
    before = vm_rss_kib(st.proc.pid)
    # Fits the 4096-octet HPACK table (3 + 4000 + 32): indexed once, then
    # each repetition is one octet on the wire.
    bomb = [("x-a", "a" * 4000)] * 1000
    conns = [H2Client(port) for _ in range(2)]
    for c in conns:
        sids = [send_with_trailers(c, bomb) for _ in range(40)]
        c.wait(lambda: all(c.done(s) for s in sids), what="the bomb streams")
        assert all(c.streams[s]["reset"] is not None for s in sids)
    grown = vm_rss_kib(st.proc.pid) - before
    for c in conns:
        c.close()
    assert grown < 32 * 1024, f"RSS grew by {grown} KiB"
    assert st.stats()["listener.web.http.protocol_errors"] >= 80
    again = H2Client(port)
    sid = again.request("/again")
    again.wait(lambda: again.done(sid), what="a request after the bomb")
    assert again.streams[sid]["headers"][":status"] == "200"
    again.close()


def chunked_with_trailers(section):
    return (b"POST /h1t HTTP/1.1\r\nHost: a\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n4\r\nbody\r\n0\r\n" +
            section + b"\r\n")


def trailer_section(total, n):
    """n trailer lines (each with its CRLF) of total bytes together."""
    out, left = b"", total
    for i in range(n):
        name = b"x-t%03d: " % i
        size = left // (n - i)
        out += name + b"v" * (size - len(name) - 2) + b"\r\n"
        left -= size
    assert len(out) == total
    return out


def test_h1_chunked_trailers_under_the_head_limits(strait_factory,
                                                    httpd_factory):
    """HTTP/1 chunked trailers count against maxRequestHeadersSize and
    maxRequestHeaders as the head does: at the limit they reach the
    upstream; one byte or one field more ends the request (400 / 431,
    closed) instead of dropping the trailers without a word."""
    up = httpd_factory()
    st, port = start(strait_factory, up, workers=1,
                     http={"maxRequestHeadersSize": 2048,
                           "maxRequestHeaders": 10})
    r = h1_request(port, chunked_with_trailers(trailer_section(2048, 4)),
                   "POST")
    assert r.status == 200
    assert len(r.json()["trailers"]) == 4
    r = h1_request(port, chunked_with_trailers(trailer_section(2049, 4)),
                   "POST")
    assert r.status == 400
    assert r.header("connection") == "close"
    r = h1_request(port, chunked_with_trailers(trailer_section(200, 10)),
                   "POST")
    assert r.status == 200
    assert len(r.json()["trailers"]) == 10
    r = h1_request(port, chunked_with_trailers(trailer_section(220, 11)),
                   "POST")
    assert r.status == 431
    assert r.header("connection") == "close"


# -- conformance (h2spec) --------------------------------------------------
def headers_frame(c, sid, end_stream=True):
    """A HEADERS frame for GET / on stream sid, framed by hand so that the
    identifier is not checked on our side."""
    block = c.conn.encoder.encode([(":method", "GET"), (":scheme", "http"),
                                   (":path", "/"),
                                   (":authority", "example.com")])
    flags = 0x4 | (0x1 if end_stream else 0)
    return (len(block).to_bytes(3, "big") + bytes([1, flags]) +
            sid.to_bytes(4, "big") + block)


def check_smaller_stream_id(port, tls):
    c = H2Client(port, tls=tls)
    c.sock.sendall(headers_frame(c, 5))
    c.sock.sendall(headers_frame(c, 3))
    closed, raw = read_until_closed(c.sock)
    assert closed
    # raw starts with the server's SETTINGS; the GOAWAY says PROTOCOL_ERROR.
    assert goaway_code(raw) == 1, raw
    c.close()


def test_h2c_headers_on_smaller_stream_id_is_protocol_error(strait_factory,
                                                           httpd_factory):
    """http2/5.1.1/2: HEADERS on stream 3 after stream 5 is a connection
    error PROTOCOL_ERROR (nghttp2 1.52 drops the frame silently)."""
    up = httpd_factory()
    st, port = start(strait_factory, up, workers=1)
    check_smaller_stream_id(port, tls=False)
    # A client that skips identifiers upwards is served as before.
    c = H2Client(port)
    for sid in (1, 7):
        c.conn.send_headers(sid, [(":method", "GET"), (":scheme", "http"),
                                  (":path", "/"),
                                  (":authority", "example.com")],
                            end_stream=True)
        c.streams[sid] = {"headers": None, "data": bytearray(),
                          "trailers": None, "ended": False, "reset": None}
    c.flush()
    c.wait(lambda: c.done(1) and c.done(7), what="both streams")
    assert c.streams[7]["headers"][":status"] == "200"
    assert c.goaway is None
    c.close()


def test_h2_tls_headers_on_smaller_stream_id_is_protocol_error(
        strait_factory, httpd_factory, certs):
    up = httpd_factory()
    crt, key = certs["ec"]
    st, port = start(strait_factory, up, workers=1, tls={
        "certificates": [{"serverCertificate": crt, "privateKey": key}]})
    check_smaller_stream_id(port, tls=True)


def test_h2c_invalid_preface_is_closed_not_http1(strait_factory,
                                                 httpd_factory):
    """http2/3.5/2: a preface that starts like "PRI * HTTP/2.0" but is
    wrong, in one piece, ends the connection; it is no HTTP/1 request."""
    up = httpd_factory()
    st, port = start(strait_factory, up, workers=1)
    for bad in (b"PRI * HTTP/2.0\r\n\r\nSM\r\n\rQ",
                b"PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n"):
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        s.sendall(bad)
        assert read_until_closed(s) == (True, b"")
        s.close()
    # h2spec's own "INVALID CONNECTION PREFACE": an HTTP/1 error, closed.
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(b"INVALID CONNECTION PREFACE\r\n\r\n")
    closed, raw = read_until_closed(s)
    assert closed and (raw == b"" or raw.startswith(b"HTTP/1.1 400")), raw
    s.close()
    wait_for(lambda: st.stats()["listener.web.http.protocol_errors"] >= 2,
             10, "the protocol errors counted")


# -- upstream response heads -----------------------------------------------
class H2Upstream:
    """An h2c upstream written with python3-h2 on loopback. /huge answers
    with a head of 1000 HPACK-indexed 4 KiB fields (~4 MiB decoded from
    ~5 KiB on the wire); /hugetrailers with a normal head, a body and such
    trailers; anything else with 200 "ok". It counts the connections it
    accepted and those its peer closed."""

    BOMB = [("x-a", "a" * 4000)] * 1000

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.addr = "127.0.0.1:%d" % self.sock.getsockname()[1]
        self.accepted = 0
        self.closed = 0
        self.lock = threading.Lock()
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self):
        while True:
            try:
                s, _ = self.sock.accept()
            except OSError:
                return
            with self.lock:
                self.accepted += 1
            threading.Thread(target=self.conn, args=(s,), daemon=True).start()

    def conn(self, s):
        c = h2.connection.H2Connection(
            config=h2.config.H2Configuration(client_side=False,
                                             header_encoding="utf-8"))
        c.initiate_connection()
        s.sendall(c.data_to_send())
        try:
            while True:
                data = s.recv(65536)
                if not data:
                    break
                for ev in c.receive_data(data):
                    if isinstance(ev, h2.events.RequestReceived):
                        self.answer(c, ev.stream_id, dict(ev.headers))
                s.sendall(c.data_to_send())
        except (OSError, h2.exceptions.ProtocolError):
            pass
        with self.lock:
            self.closed += 1
        s.close()

    def answer(self, c, sid, req):
        path = req[":path"]
        if path.startswith("/huge") and not path.startswith("/hugetrailers"):
            c.send_headers(sid, [(":status", "200")] + self.BOMB,
                           end_stream=True)
        elif path.startswith("/hugetrailers"):
            c.send_headers(sid, [(":status", "200")])
            c.send_data(sid, b"body")
            c.send_headers(sid, self.BOMB, end_stream=True)
        else:
            c.send_headers(sid, [(":status", "200"),
                                 ("content-length", "2")])
            c.send_data(sid, b"ok", end_stream=True)

    def close(self):
        self.sock.close()


def h2_upstream_strait(strait_factory, up):
    port = free_port()
    st = strait_factory(
        http_listener("web", port), workers=1,
        extra=clusters(backend={"endpoints": [up.addr],
                                "protocol": "http2"})).start()
    return st, port


@pytest.mark.parametrize("path", ["/huge", "/hugetrailers"])
def test_h2_upstream_huge_header_block_is_502_upe_and_closed(
        strait_factory, path):
    """An h2 upstream's response head (or trailers) past the limits
    (60 KiB decoded, 100 fields: the listener defaults) fails the exchange
    with UPE, a 502 when nothing went downstream yet, and the upstream
    connection is closed; the next request gets a fresh connection."""
    up = H2Upstream()
    st, port = h2_upstream_strait(strait_factory, up)
    p = subprocess.run(["curl", "-sS", "-o", "/dev/null", "-w",
                        "%{http_code}", f"http://127.0.0.1:{port}{path}"],
                       capture_output=True, timeout=30)
    if path == "/huge":
        assert p.stdout == b"502", p.stderr
    else:
        # The head went downstream: the client sees the stream fail.
        assert p.returncode != 0 or p.stdout != b"200"
    line = log_line(st, path)
    assert "UPE" in line.split(" flags=")[1].split()[0], line
    if path == "/huge":
        assert "status=502" in line, line
    wait_for(lambda: up.closed == 1, 10, "the upstream connection closed")
    p = subprocess.run(["curl", "-sS", f"http://127.0.0.1:{port}/fine"],
                       capture_output=True, timeout=30)
    assert p.stdout == b"ok", p.stderr
    assert up.accepted == 2
    up.close()


def test_h1_upstream_huge_head_is_502_upe(strait_factory):
    """The same limits hold for an HTTP/1 upstream: a head past 60 KiB or
    with more than 100 fields is a 502 UPE, and that connection closes."""
    lsock = socket.socket()
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(8)
    addr = "127.0.0.1:%d" % lsock.getsockname()[1]
    closed = []

    def serve():
        while True:
            try:
                s, _ = lsock.accept()
            except OSError:
                return
            req = b""
            while b"\r\n\r\n" not in req:
                d = s.recv(65536)
                if not d:
                    break
                req += d
            path = req.split(b" ")[1] if req else b""
            if path == b"/big":
                head = b"HTTP/1.1 200 OK\r\n" + \
                    b"x-a: " + b"a" * (70 * 1024) + b"\r\n\r\n"
            elif path == b"/many":
                head = b"HTTP/1.1 200 OK\r\n" + b"".join(
                    b"x-%d: 1\r\n" % i for i in range(101)) + b"\r\n"
            else:
                head = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"
            try:
                s.sendall(head)
                s.settimeout(10)
                while s.recv(65536):
                    pass
            except OSError:
                pass
            closed.append(path)
            s.close()

    threading.Thread(target=serve, daemon=True).start()
    port = free_port()
    st = strait_factory(http_listener("web", port), workers=1,
                        extra=clusters(backend=[addr])).start()
    for path in ("/big", "/many"):
        p = subprocess.run(["curl", "-sS", "-o", "/dev/null", "-w",
                            "%{http_code}", f"http://127.0.0.1:{port}{path}"],
                           capture_output=True, timeout=30)
        line = log_line(st, path)
        assert p.stdout == b"502", (path, p.stderr, line)
        assert "flags=UPE" in line and "status=502" in line, line
        wait_for(lambda: path.encode() in closed, 10, "upstream closed")
    lsock.close()


def test_h2c_headers_on_any_skipped_or_closed_id_is_protocol_error(
        strait_factory, httpd_factory):
    """Issue 28: the check remembered only the last 8 skipped ranges, so
    HEADERS on an older gap was dropped without a GOAWAY; and a HEADERS
    on a stream the client had opened and finished was dropped too. Any
    HEADERS below the highest identifier, on a stream that is not open,
    is now a connection error PROTOCOL_ERROR (RFC 9113 5.1.1)."""
    up = httpd_factory()
    st, port = start(strait_factory, up, workers=1)
    # Twelve gaps: 3..19 is the oldest, older than any ring of 8.
    c = H2Client(port)
    for sid in range(21, 21 + 12 * 20, 20):
        c.sock.sendall(headers_frame(c, sid))
    c.sock.sendall(headers_frame(c, 3))
    closed, raw = read_until_closed(c.sock)
    assert closed
    assert goaway_code(raw) == 1, raw
    c.close()
    # A stream the client opened and that is over is no new stream either.
    c = H2Client(port)
    sid = c.request("/")
    c.wait(lambda: c.done(sid), what="the first answer")
    c.sock.sendall(headers_frame(c, sid))
    closed, raw = read_until_closed(c.sock)
    assert closed
    # nghttp2 answers STREAM_CLOSED for a closed stream it still keeps,
    # strait PROTOCOL_ERROR for one it has let go: a connection error.
    assert goaway_code(raw) in (1, 5), raw
    c.close()
    wait_for(lambda: st.stats()["listener.web.http.protocol_errors"] >= 1,
             10, "the protocol error counted")


def test_h2c_trailers_on_a_stream_we_answered_early_are_no_error(
        strait_factory, httpd_factory):
    """The other side of the rule: a client whose request we answered (and
    reset) before its body ended may still send its trailers, in flight
    before our RST_STREAM reached it (RFC 9113 5.1); they are ignored and
    the connection goes on."""
    up = httpd_factory()
    st, port = start(strait_factory, up, workers=1)
    c = H2Client(port)
    sid = c.conn.get_next_available_stream_id()
    c.conn.send_headers(sid, [(":method", "POST"), (":scheme", "http"),
                              (":path", "/early#frag"),
                              (":authority", "example.com")])
    c.streams[sid] = {"headers": None, "data": bytearray(), "trailers": None,
                      "ended": False, "reset": None}
    c.flush()
    c.wait(lambda: c.done(sid), what="the early answer")
    assert c.streams[sid]["headers"][":status"] == "400"
    block = c.conn.encoder.encode([("x-t", "1")])
    c.sock.sendall(len(block).to_bytes(3, "big") + bytes([1, 0x5]) +
                   sid.to_bytes(4, "big") + block)
    nxt = c.conn.get_next_available_stream_id()
    c.conn.send_headers(nxt, [(":method", "GET"), (":scheme", "http"),
                              (":path", "/"), (":authority", "example.com")],
                        end_stream=True)
    c.streams[nxt] = {"headers": None, "data": bytearray(), "trailers": None,
                      "ended": False, "reset": None}
    c.flush()
    c.wait(lambda: c.done(nxt), what="the next answer")
    assert c.streams[nxt]["headers"][":status"] == "200"
    assert c.goaway is None
    c.close()
