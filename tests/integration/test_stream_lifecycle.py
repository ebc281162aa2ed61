"""How a proxied request ends when one side misbehaves: a client that
leaves while its response streams, an upstream that breaks its response
after the head, and streams on which nothing moves (Envoy's stream idle
timeout). Real clients and upstreams on loopback; every wait is a bounded
poll for a condition, and what is asserted is the access-log line (status
and flags), what the client received, connections seen closed and the
descriptors strait holds."""
import os
import socket
import threading

from conftest import connect, free_port, read_head, wait_for
from httpd import clusters, http_listener


def start(strait_factory, up_addr, http=None, workers=1, protocol=None):
    port = free_port()
    spec = {"endpoints": [up_addr]}
    if protocol:
        spec["protocol"] = protocol
    st = strait_factory(http_listener("web", port, http=http),
                        workers=workers,
                        extra=clusters(backend=spec)).start()
    return st, port


def fds(st):
    return len(os.listdir(f"/proc/{st.proc.pid}/fd"))


def log_line(st, marker, timeout=10):
    def find():
        for line in st.log().splitlines():
            if "http_request" in line and marker in line:
                return line
        return None
    return wait_for(find, timeout, f"access log line for {marker}")


class Stalling:
    """An upstream handler that reads one request head, sends `head`, then
    holds the connection until the peer closes it; `closed` is set then."""

    def __init__(self, head):
        self.head = head
        self.closed = threading.Event()
        self.got = threading.Event()

    def __call__(self, c):
        if read_head(c) is None:
            return
        self.got.set()
        c.sendall(self.head)
        c.settimeout(60)
        try:
            while c.recv(65536):
                pass
        except OSError:
            pass
        self.closed.set()


SSE_HEAD = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"transfer-encoding: chunked\r\n\r\n"
            b"d\r\ndata: hello\n\n\r\n")


def read_until(c, marker, limit=1 << 20):
    got = b""
    while marker not in got:
        d = c.recv(65536)
        assert d, f"closed before {marker!r}: {got!r}"
        got += d
        assert len(got) < limit
    return got


def eof_after(c, timeout=10):
    """True when the server ends c (EOF or reset) within timeout."""
    c.settimeout(timeout)
    try:
        while c.recv(65536):
            pass
        return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except socket.timeout:
        return False


# -- item 3: a client FIN while the response streams --------------------

def _client_fin_mid_response(strait_factory, upstream_factory, how):
    up_h = Stalling(SSE_HEAD)
    up = upstream_factory(up_h)
    st, port = start(strait_factory, up.addr)
    base = fds(st)
    c = connect(port)
    c.sendall(b"GET /sse-" + how.encode() + b" HTTP/1.1\r\nHost: a\r\n\r\n")
    got = read_until(c, b"data: hello")
    assert got.startswith(b"HTTP/1.1 200")
    if how == "shutdown":
        c.shutdown(socket.SHUT_WR)
        # The FIN ends the exchange: strait closes its side too.
        assert eof_after(c)
    c.close()
    # The upstream connection is let go, not left open on a stalled SSE.
    assert up_h.closed.wait(10), "the upstream connection stayed open"
    line = log_line(st, f"path=/sse-{how}")
    assert "status=200" in line and "flags=DC" in line, line
    # Nothing is left behind: client socket, upstream socket.
    wait_for(lambda: fds(st) <= base, 10,
             f"strait's descriptors back to {base}")
    assert st.stats()["listener.web.downstream_cx_active"] == 0


def test_h1_client_half_close_mid_response_ends_stream_as_dc(
        strait_factory, upstream_factory):
    _client_fin_mid_response(strait_factory, upstream_factory, "shutdown")


def test_h1_client_close_mid_response_ends_stream_as_dc(
        strait_factory, upstream_factory):
    _client_fin_mid_response(strait_factory, upstream_factory, "close")


def test_h1_client_fin_mid_response_does_not_hold_drain(
        strait_factory, upstream_factory):
    """SIGTERM used to wait for the drain deadline while a client that had
    left still 'had' a streaming response; now nothing is in flight."""
    up_h = Stalling(SSE_HEAD)
    up = upstream_factory(up_h)
    port = free_port()
    st = strait_factory(http_listener("web", port), workers=1,
                        extra="drainTimeout: 600s\n" +
                        clusters(backend=[up.addr])).start()
    c = connect(port)
    c.sendall(b"GET /sse-drain HTTP/1.1\r\nHost: a\r\n\r\n")
    read_until(c, b"data: hello")
    c.shutdown(socket.SHUT_WR)
    assert eof_after(c)
    c.close()
    log_line(st, "path=/sse-drain")
    # With the 600 s drain deadline, a prompt exit proves nothing waited.
    assert st.stop(timeout=20) == 0


# -- item 12: an upstream that breaks its response after the head --------

class BreaksAfterHead:
    """An HTTP/1.1 upstream that sends a chunked head, optionally a good
    chunk (then waits for `go`), then a malformed chunk size."""

    def __init__(self, first_chunk=b""):
        self.first = first_chunk
        self.go = threading.Event()

    def __call__(self, c):
        if read_head(c) is None:
            return
        head = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
        if self.first:
            c.sendall(head + b"%x\r\n%s\r\n" % (len(self.first), self.first))
            if not self.go.wait(20):
                return
            c.sendall(b"zz-not-a-size\r\n")
        else:
            # Head and the bad chunk in one write: strait reads them in
            # one go, before any of the head can reach the client.
            c.sendall(head + b"zz-not-a-size\r\n")
        c.settimeout(20)
        try:
            while c.recv(65536):
                pass
        except OSError:
            pass


def test_h1_upstream_bad_chunk_before_anything_sent_is_502_upe(
        strait_factory, upstream_factory):
    up = upstream_factory(BreaksAfterHead())
    st, port = start(strait_factory, up.addr)
    with connect(port) as c:
        c.sendall(b"GET /bad-chunk HTTP/1.1\r\nHost: a\r\n\r\n")
        f = c.makefile("rb")
        from httpd import read_response
        r = read_response(f)
        assert r is not None, "an empty reply"
        assert r.status == 502, r.status
    line = log_line(st, "path=/bad-chunk")
    assert "status=502" in line and "flags=UPE" in line, line


def test_h1_upstream_bad_chunk_after_bytes_sent_truncates(
        strait_factory, upstream_factory):
    h = BreaksAfterHead(b"first-part")
    up = upstream_factory(h)
    st, port = start(strait_factory, up.addr)
    with connect(port) as c:
        c.sendall(b"GET /bad-later HTTP/1.1\r\nHost: a\r\n\r\n")
        got = read_until(c, b"first-part\r\n")
        assert got.startswith(b"HTTP/1.1 200")
        h.go.set()
        c.settimeout(10)
        rest = b""
        try:
            while True:
                d = c.recv(65536)
                if not d:
                    break
                rest += d
        except ConnectionResetError:
            pass
        # Closed without the last chunk: the client knows it is cut short.
        assert b"0\r\n\r\n" not in got + rest, got + rest
    line = log_line(st, "path=/bad-later")
    # The status that was sent, and the upstream's fault, not the client's.
    assert "status=200" in line and "flags=UPE" in line, line


def test_h2_client_upstream_bad_chunk_before_anything_sent_is_502(
        strait_factory, upstream_factory):
    from test_http2 import H2Client
    up = upstream_factory(BreaksAfterHead())
    st, port = start(strait_factory, up.addr)
    cl = H2Client(port)
    try:
        sid = cl.request("/h2-bad-chunk")
        cl.wait(lambda: cl.done(sid), what="the answer")
        assert cl.streams[sid]["headers"][":status"] == "502"
        assert cl.streams[sid]["ended"]
    finally:
        cl.close()
    line = log_line(st, "path=/h2-bad-chunk")
    assert "status=502" in line and "flags=UPE" in line, line


def test_h2_client_upstream_bad_chunk_after_bytes_sent_is_reset(
        strait_factory, upstream_factory):
    from test_http2 import H2Client
    h = BreaksAfterHead(b"first-part")
    up = upstream_factory(h)
    st, port = start(strait_factory, up.addr)
    cl = H2Client(port)
    try:
        sid = cl.request("/h2-bad-later")
        cl.wait(lambda: b"first-part" in cl.streams[sid]["data"],
                what="the first part")
        assert cl.streams[sid]["headers"][":status"] == "200"
        h.go.set()
        cl.wait(lambda: cl.done(sid), what="the end of the stream")
        assert cl.streams[sid]["reset"] is not None
        assert not cl.streams[sid]["ended"]
    finally:
        cl.close()
    line = log_line(st, "path=/h2-bad-later")
    assert "status=200" in line and "flags=UPE" in line, line


def h2_upstream(answer):
    """An HTTP/2 (h2c) upstream handler: answer(conn, stream_id) is called
    for each request; what it queued is sent in one write."""
    import h2.config
    import h2.connection
    import h2.events

    def handler(c):
        conn = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=False))
        conn.initiate_connection()
        c.sendall(conn.data_to_send())
        while True:
            try:
                data = c.recv(65536)
            except OSError:
                return
            if not data:
                return
            for ev in conn.receive_data(data):
                if isinstance(ev, h2.events.RequestReceived):
                    answer(conn, ev.stream_id)
            out = conn.data_to_send()
            if out:
                c.sendall(out)
    return handler


def test_h2_upstream_reset_right_after_head_is_502_upe(
        strait_factory, upstream_factory):
    import h2.errors

    def refuse_after_head(conn, sid):
        conn.send_headers(sid, [(":status", "200"),
                                ("content-type", "text/plain")])
        conn.reset_stream(sid, h2.errors.ErrorCodes.REFUSED_STREAM)

    up = upstream_factory(h2_upstream(refuse_after_head))
    st, port = start(strait_factory, up.addr, protocol="http2")
    with connect(port) as c:
        c.sendall(b"GET /h2-refused HTTP/1.1\r\nHost: a\r\n\r\n")
        from httpd import read_response
        r = read_response(c.makefile("rb"))
        assert r is not None, "an empty reply"
        assert r.status == 502, r.status
    line = log_line(st, "path=/h2-refused")
    assert "status=502" in line and "flags=UPE" in line, line


# -- item 7: the stream idle timeout and the request head timeout -------

IDLE = {"streamIdleTimeout": "200ms"}


def test_stream_idle_timeout_before_answer_is_504_si(
        strait_factory, upstream_factory):
    """Istio's routes have no timeout: an upstream that never answers used
    to hold the request for good."""
    up_h = Stalling(b"")
    up = upstream_factory(up_h)
    st, port = start(strait_factory, up.addr, http=IDLE)
    with connect(port) as c:
        c.sendall(b"GET /idle-wait HTTP/1.1\r\nHost: a\r\n\r\n")
        from httpd import read_response
        r = read_response(c.makefile("rb"))
        assert r is not None and r.status == 504, r and r.status
    line = log_line(st, "path=/idle-wait")
    assert "status=504" in line and "flags=SI" in line, line
    assert "details=stream_idle_timeout" in line, line
    assert up_h.closed.wait(10), "the upstream connection stayed open"


def test_stream_idle_timeout_with_body_unfinished_is_408(
        strait_factory, upstream_factory):
    up_h = Stalling(b"")
    up = upstream_factory(up_h)
    st, port = start(strait_factory, up.addr, http=IDLE)
    with connect(port) as c:
        c.sendall(b"POST /idle-body HTTP/1.1\r\nHost: a\r\n"
                  b"Content-Length: 10\r\n\r\nhalf-")
        from httpd import read_response
        r = read_response(c.makefile("rb"), "POST")
        assert r is not None and r.status == 408, r and r.status
    line = log_line(st, "path=/idle-body")
    assert "status=408" in line and "flags=SI" in line, line


def test_stream_idle_timeout_cuts_a_stalled_answer(
        strait_factory, upstream_factory):
    up_h = Stalling(SSE_HEAD)
    up = upstream_factory(up_h)
    st, port = start(strait_factory, up.addr, http=IDLE)
    c = connect(port)
    c.sendall(b"GET /idle-sse HTTP/1.1\r\nHost: a\r\n\r\n")
    got = read_until(c, b"data: hello")
    assert got.startswith(b"HTTP/1.1 200")
    # Nothing moves any more: strait ends the message unfinished.
    assert eof_after(c)
    c.close()
    line = log_line(st, "path=/idle-sse")
    assert "status=200" in line and "flags=SI" in line, line
    assert up_h.closed.wait(10), "the upstream connection stayed open"


def test_stream_idle_timeout_over_h2_is_504(strait_factory, upstream_factory):
    from test_http2 import H2Client
    up = upstream_factory(Stalling(b""))
    st, port = start(strait_factory, up.addr, http=IDLE)
    cl = H2Client(port)
    try:
        sid = cl.request("/h2-idle")
        cl.wait(lambda: cl.done(sid), what="the answer")
        assert cl.streams[sid]["headers"][":status"] == "504"
    finally:
        cl.close()
    line = log_line(st, "path=/h2-idle")
    assert "status=504" in line and "flags=SI" in line, line


def test_request_head_timeout_is_logged_as_envoy_does(strait_factory,
                                                      upstream_factory):
    up = upstream_factory(Stalling(b""))
    st, port = start(strait_factory, up.addr,
                     http={"requestHeadersTimeout": "200ms"})
    with connect(port) as c:
        c.sendall(b"GET /slow-head HTTP/1.1\r\nHost: a\r\nX-A: ")
        from httpd import read_response
        r = read_response(c.makefile("rb"))
        assert r is not None and r.status == 408
    line = wait_for(lambda: next((x for x in st.log().splitlines()
                                  if "http_request" in x and "status=408" in x),
                                 None), 10, "the 408 line")
    assert "flags=-" in line and "details=request_header_timeout" in line, line
    assert st.stats().get("listener.web.http.protocol_errors", 0) == 0


def test_gateway_listener_has_the_request_head_timeout(strait_factory,
                                                       tmp_path):
    """Gateway listeners take the http defaults: a head that never ends is
    answered 408 at requestHeadersTimeout (10 s), as on bootstrap
    listeners. Waits the default out once."""
    from test_gateway import start_with_up
    st, port = start_with_up(strait_factory, tmp_path, free_port(), "")
    with connect(port, timeout=30) as c:
        c.sendall(b"GET /gw-slow-head HTTP/1.1\r\nHost: a\r\nX-A: ")
        from httpd import read_response
        r = read_response(c.makefile("rb"))
        assert r is not None and r.status == 408
    line = wait_for(lambda: next((x for x in st.log().splitlines()
                                  if "http_request" in x and "status=408" in x),
                                 None), 10, "the 408 line")
    assert "details=request_header_timeout" in line, line


def test_h2_request_head_that_never_ends_closes_the_connection(
        strait_factory, upstream_factory):
    """HEADERS without END_HEADERS, and no CONTINUATION: the connection
    used to be held for good (its idle timer stopped at the stream's
    first frame). requestHeadersTimeout applies to HTTP/2 too."""
    import struct

    import hpack
    up = upstream_factory(Stalling(b""))
    st, port = start(strait_factory, up.addr,
                     http={"requestHeadersTimeout": "200ms"})
    block = hpack.Encoder().encode([(":method", "GET"), (":scheme", "http"),
                                    (":path", "/h2-half-head"),
                                    (":authority", "a")])
    frame = struct.pack(">I", len(block))[1:] + bytes([1, 0]) + \
        struct.pack(">I", 1) + block  # HEADERS, no END_HEADERS, stream 1
    c = connect(port)
    c.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" +
              b"\x00\x00\x00\x04\x00\x00\x00\x00\x00" + frame)
    assert eof_after(c), "the connection stayed open"
    c.close()
    wait_for(lambda: st.stats()["listener.web.downstream_cx_active"] == 0,
             10, "the connection to be freed")
    assert up.conns == 0
