"""Upstream connection reuse and its failure modes."""
import socket
import threading
import urllib.request

from conftest import free_port


def read_head(c):
    data = b""
    while b"\r\n\r\n" not in data:
        d = c.recv(65536)
        if not d:
            return None
        data += d
    return data


def start(strait_factory, up_addr, extra_cluster=""):
    port = free_port()
    yaml = (f"  - name: p\n    address: \"127.0.0.1:{port}\"\n    protocol: http\n"
            f"    routes:\n      - {{host: \"*\", pathPrefix: /, cluster: u}}\n")
    extra = f"clusters:\n  - {{name: u, endpoints: [\"{up_addr}\"]{extra_cluster}}}\n"
    return strait_factory(yaml, workers=1, extra=extra).start(), port


def get(port, path="/"):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
        return r.status, r.read()


def test_keepalive_race_is_retried_on_a_new_connection(strait_factory, upstream_factory):
    """The upstream answers the first request on a connection and drops
    the connection when a second one arrives, as a server that just timed
    the idle connection out would: strait sends the request again."""
    def handler(c):
        if read_head(c) is None:
            return
        c.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
        read_head(c)  # the reuse: close without an answer

    up = upstream_factory(handler)
    st, port = start(strait_factory, up.addr)
    assert get(port) == (200, b"ok")
    assert get(port) == (200, b"ok")
    assert up.conns == 2
    assert "status=503" not in st.log()


def test_connections_are_reused(strait_factory, upstream_factory):
    def handler(c):
        while read_head(c) is not None:
            c.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")

    up = upstream_factory(handler)
    st, port = start(strait_factory, up.addr)
    for _ in range(20):
        assert get(port) == (200, b"ok")
    assert up.conns == 1
    s = st.stats()
    assert s["cluster.u.upstream_rq_total"] == 20
    assert s["cluster.u.upstream_cx_total"] == 1
    assert s["cluster.u.upstream_cx_reused"] == 19


def test_max_requests_per_connection(strait_factory, upstream_factory):
    def handler(c):
        while read_head(c) is not None:
            c.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")

    up = upstream_factory(handler)
    st, port = start(strait_factory, up.addr, ", maxRequestsPerConnection: 3")
    for _ in range(9):
        assert get(port) == (200, b"ok")
    assert up.conns == 3


def test_body_requests_are_not_replayed(strait_factory, upstream_factory):
    """A POST whose reused connection breaks is answered 503, never sent
    twice (its body may already be half gone)."""
    seen = []

    def handler(c):
        h = read_head(c)
        if h is None:
            return
        seen.append(h.split(b" ")[0])
        c.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
        h = read_head(c)
        if h is not None:
            seen.append(h.split(b" ")[0])

    up = upstream_factory(handler)
    st, port = start(strait_factory, up.addr)
    assert get(port) == (200, b"ok")
    req = urllib.request.Request(f"http://127.0.0.1:{port}/", data=b"x" * 10,
                                 method="POST")
    try:
        urllib.request.urlopen(req, timeout=10)
        raise AssertionError("expected an error")
    except urllib.error.HTTPError as e:
        assert e.code == 503
    assert seen.count(b"POST") == 1
