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

