"""Routing snapshots: a new VirtualService reaches a running Gateway
listener without closing its connections; a request in flight finishes on
the routes it started with; clusters that did not change keep their pooled
upstream connections and their counters."""
import os
import socket
import threading

from conftest import free_port, wait_for
from test_gateway import GATEWAY_AND_UP, read_head
from test_http2 import H2Client

OTHER = """apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: other, namespace: default}}
spec:
  hosts: [other.example.com]
  resolution: STATIC
  ports: [{{number: {port}, name: http, protocol: HTTP}}]
  endpoints: [{{address: 127.0.0.1}}]
---
"""

VS = """apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: front, namespace: default}}
spec:
  hosts: ["*"]
  gateways: [gw]
  http:
  - headers: {{response: {{set: {{x-gen: "{gen}"}}}}}}
    route:
    - destination: {{host: {host}}}
"""


class Named:
    """A keep-alive HTTP/1.1 upstream answering its name; a request for
    /hold waits until release is set."""

    def __init__(self, upstream_factory, name):
        self.name = name.encode()
        self.held = threading.Event()
        self.release = threading.Event()
        self.up = upstream_factory(self.handle)

    def handle(self, c):
        buf = b""
        while True:
            buf = read_head(c, buf)
            if buf is None:
                return
            head, _, buf = buf.partition(b"\r\n\r\n")
            if b" /hold " in head.split(b"\r\n")[0]:
                self.held.set()
                assert self.release.wait(30)
            c.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s"
                      % (len(self.name), self.name))


def start_two(strait_factory, tmp_path, a, b, workers=1):
    conf = tmp_path / "conf.d"
    conf.mkdir()
    port = free_port()
    base = (GATEWAY_AND_UP.format(port=port, up_port=a.up.port)
            + OTHER.format(port=b.up.port))
    (conf / "base.yaml").write_text(base)
    (conf / "vs.yaml").write_text(VS.format(gen=1, host="up.example.com"))
    st = strait_factory(workers=workers,
                        extra=f"config: {{dir: \"{conf}\", debounce: 20ms}}\n")
    return st.start(), port, conf


def set_vs(conf, gen, host):
    tmp = conf / ".vs.tmp"
    tmp.write_text(VS.format(gen=gen, host=host))
    os.replace(tmp, conf / "vs.yaml")


def raw_get(s, path="/"):
    """One request on the socket s; returns (head, body)."""
    s.sendall(f"GET {path} HTTP/1.1\r\nhost: example.com\r\n\r\n".encode())
    buf = read_head(s)
    assert buf is not None, "the gateway closed the connection"
    head, _, rest = buf.partition(b"\r\n\r\n")
    n = int([ln.split(b":")[1] for ln in head.split(b"\r\n")
             if ln.lower().startswith(b"content-length:")][0])
    while len(rest) < n:
        d = s.recv(65536)
        assert d, "the gateway closed the connection mid-body"
        rest += d
    return head.decode().lower(), rest[:n]


def fresh_get(port, path="/"):
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        return raw_get(s, path)


def wait_routes(port, gen, name):
    def new_routes():
        head, body = fresh_get(port)
        return f"x-gen: {gen}" in head and body == name
    wait_for(new_routes, 15, f"routes of generation {gen}")


def test_http1_connection_survives_route_changes(strait_factory, tmp_path,
                                                 upstream_factory):
    a = Named(upstream_factory, "a")
    b = Named(upstream_factory, "b")
    st, port, conf = start_two(strait_factory, tmp_path, a, b)
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    head, body = raw_get(s)
    assert body == b"a" and "x-gen: 1" in head

    # Same destination, new routes: the client's connection and the
    # upstream connection strait pooled both stay.
    set_vs(conf, 2, "up.example.com")
    wait_routes(port, 2, b"a")
    head, body = raw_get(s)
    assert body == b"a" and "x-gen: 2" in head
    assert "connection: close" not in head
    assert a.up.conns == 1, "the unchanged cluster lost its pooled connection"
    name = "up.example.com||0"
    # One request before the change, at least two after (the wait and the
    # client): the cluster's counters went on, they did not restart.
    assert st.stats()[f"cluster.{name}.upstream_rq_total"] >= 3

    # A new destination: the same client connection is routed by it.
    set_vs(conf, 3, "other.example.com")
    wait_routes(port, 3, b"b")
    head, body = raw_get(s)
    assert body == b"b" and "x-gen: 3" in head
    assert "connection: close" not in head
    s.close()
    # The listener itself was never rebuilt.
    assert ": changed, http" not in st.log()


def test_request_in_flight_finishes_on_its_routes(strait_factory, tmp_path,
                                                  upstream_factory):
    a = Named(upstream_factory, "a")
    b = Named(upstream_factory, "b")
    st, port, conf = start_two(strait_factory, tmp_path, a, b, workers=2)
    out = {}

    def held_request():
        with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
            out["r"] = raw_get(s, "/hold")

    t = threading.Thread(target=held_request)
    t.start()
    assert a.held.wait(15)
    set_vs(conf, 2, "other.example.com")
    wait_routes(port, 2, b"b")
    a.release.set()
    t.join(30)
    head, body = out["r"]
    assert body == b"a" and "x-gen: 1" in head


def test_http2_connection_survives_route_changes(strait_factory, tmp_path,
                                                 upstream_factory):
    a = Named(upstream_factory, "a")
    b = Named(upstream_factory, "b")
    st, port, conf = start_two(strait_factory, tmp_path, a, b)
    c = H2Client(port)
    sid = c.request("/")
    c.wait(lambda: c.streams[sid]["ended"], what="first response")
    assert bytes(c.streams[sid]["data"]) == b"a"
    set_vs(conf, 2, "other.example.com")
    wait_routes(port, 2, b"b")
    sid = c.request("/")
    c.wait(lambda: c.streams[sid]["ended"], what="second response")
    assert bytes(c.streams[sid]["data"]) == b"b"
    assert c.streams[sid]["headers"]["x-gen"] == "2"
    assert c.goaway is None, "the gateway sent GOAWAY on a routes change"
    c.sock.close()
