"""The bootstrap's top-level http section: the stream idle timeout and the
request head timeout of every Gateway listener (issue 12 item 7), their
counters in /stats and /stats/prometheus, and a reload that changes them.
Real clients and upstreams on loopback; every wait is a bounded poll for a
condition."""
import signal
import socket
import struct
import subprocess

from conftest import STRAIT, connect, free_port, wait_for
from test_gateway import GATEWAY_AND_UP
from test_stream_lifecycle import Stalling, eof_after, log_line

ROUTE = """apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: vs, namespace: default}
spec:
  hosts: ["*"]
  gateways: [gw]
  http:
  - route:
    - destination: {host: up.example.com}
"""


def start(strait_factory, tmp_path, up_port, http):
    """strait with one Gateway (HTTP, a free port) routing everything to
    up_port, and `http` (YAML flow text) as the bootstrap's http section.
    Returns the process, the port, the listener's stats name and a
    function that rewrites the bootstrap with another http section."""
    conf = tmp_path / "conf.d"
    conf.mkdir()
    port = free_port()
    (conf / "r.yaml").write_text(
        GATEWAY_AND_UP.format(port=port, up_port=up_port) + ROUTE)
    base = f"config: {{dir: \"{conf}\"}}\n"
    st = strait_factory(extra=base + f"http: {http}\n").start()
    name = f"gateway-127.0.0.1-{port}"
    wait_for(lambda: f"listener.{name}.downstream_cx_total" in st.stats(),
             10, "the Gateway listener")

    def rewrite(new_http):
        st.write_config("", extra=base + f"http: {new_http}\n")
    return st, port, name, rewrite


def prom(st, family, listener):
    text = st.get("/stats/prometheus")[1]
    for line in text.splitlines():
        if line.startswith(f'{family}{{listener="{listener}"}} '):
            return int(line.split()[-1])
    raise AssertionError(f"no {family} for {listener}:\n{text}")


def test_gateway_stream_idle_timeout_is_504_si_and_counted(
        strait_factory, upstream_factory, tmp_path):
    """Istio routes have no timeout: with http.streamIdleTimeout: 1s, a
    request to an upstream that never answers ends with 504 SI after a
    second, not after the 5 min default."""
    up_h = Stalling(b"")
    up = upstream_factory(up_h)
    st, port, name, _ = start(strait_factory, tmp_path, up.port,
                              "{streamIdleTimeout: 1s}")
    with connect(port, timeout=8) as c:
        c.sendall(b"GET /gw-idle HTTP/1.1\r\nHost: a\r\n\r\n")
        from httpd import read_response
        r = read_response(c.makefile("rb"))
        assert r is not None and r.status == 504, r and r.status
    line = log_line(st, "path=/gw-idle")
    assert "status=504" in line and "flags=SI" in line, line
    assert "details=stream_idle_timeout" in line, line
    assert up_h.closed.wait(10), "the upstream connection stayed open"
    assert st.stats()[f"listener.{name}.http.rq_idle_timeout"] == 1
    assert st.stats()[f"listener.{name}.http.rq_header_timeout"] == 0
    assert prom(st, "strait_http_stream_idle_timeouts_total", name) == 1


def test_gateway_request_head_timeout_closes_and_counts(
        strait_factory, upstream_factory, tmp_path):
    """http.requestHeadersTimeout: 1s: an HTTP/1 client that sends half a
    head is answered 408 and closed; an HTTP/2 client whose header block
    never ends is closed; each counts once."""
    import hpack
    up = upstream_factory(Stalling(b""))
    st, port, name, _ = start(strait_factory, tmp_path, up.port,
                              "{requestHeadersTimeout: 1s}")
    with connect(port, timeout=8) as c:
        c.sendall(b"GET /gw-half HTTP/1.1\r\nHost: a\r\nX-A: ")
        from httpd import read_response
        r = read_response(c.makefile("rb"))
        assert r is not None and r.status == 408, r and r.status
        assert eof_after(c, 8), "the connection stayed open after the 408"
    line = wait_for(lambda: next((x for x in st.log().splitlines()
                                  if "http_request" in x and "status=408" in x),
                                 None), 10, "the 408 line")
    assert "details=request_header_timeout" in line, line
    wait_for(lambda: st.stats()[f"listener.{name}.http.rq_header_timeout"]
             == 1, 10, "the HTTP/1 head timeout counted")
    assert st.stats()[f"listener.{name}.http.protocol_errors"] == 0

    block = hpack.Encoder().encode([(":method", "GET"), (":scheme", "http"),
                                    (":path", "/gw-h2-half"),
                                    (":authority", "a")])
    frame = struct.pack(">I", len(block))[1:] + bytes([1, 0]) + \
        struct.pack(">I", 1) + block  # HEADERS without END_HEADERS
    c = connect(port)
    c.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" +
              b"\x00\x00\x00\x04\x00\x00\x00\x00\x00" + frame)
    assert eof_after(c, 8), "the HTTP/2 connection stayed open"
    c.close()
    wait_for(lambda: st.stats()[f"listener.{name}.http.rq_header_timeout"]
             == 2, 10, "the HTTP/2 head timeout counted")
    assert prom(st, "strait_http_request_header_timeouts_total", name) == 2
    assert up.conns == 0


def test_reload_changes_the_gateway_stream_idle_timeout(
        strait_factory, upstream_factory, tmp_path):
    """Started with streamIdleTimeout: 1h, reloaded with 1s: a request on
    a connection accepted after the reload ends 504 SI after a second,
    while one that started before it keeps its hour (it is still waiting
    when the later one has been answered)."""
    up = upstream_factory(Stalling(b""))
    st, port, name, rewrite = start(strait_factory, tmp_path, up.port,
                                    "{streamIdleTimeout: 1h}")
    before = connect(port)
    before.sendall(b"GET /before-reload HTTP/1.1\r\nHost: a\r\n\r\n")
    wait_for(lambda: up.conns == 1, 10, "the first request upstream")
    rewrite("{streamIdleTimeout: 1s}")
    st.signal(signal.SIGHUP)
    wait_for(lambda: st.stats()["server.reloads_ok"] == 1, 10, "the reload")
    with connect(port, timeout=8) as c:
        c.sendall(b"GET /after-reload HTTP/1.1\r\nHost: a\r\n\r\n")
        from httpd import read_response
        r = read_response(c.makefile("rb"))
        assert r is not None and r.status == 504, r and r.status
    line = log_line(st, "path=/after-reload")
    assert "flags=SI" in line, line
    before.setblocking(False)
    try:
        got = before.recv(65536)
    except BlockingIOError:
        got = None
    assert got is None, f"the request from before the reload ended: {got!r}"
    assert "path=/before-reload" not in st.log()
    assert st.stats()[f"listener.{name}.http.rq_idle_timeout"] == 1
    before.close()


def test_check_refuses_bad_gateway_http_values(tmp_path):
    """strait check names file:line:col and the key for a value out of
    range and for a key the section does not have."""
    bad = tmp_path / "strait.yaml"
    bad.write_text("admin: {address: 127.0.0.1:1}\n"
                   "http:\n"
                   "  streamIdleTimeout: 25h\n"
                   "  requestHeadersTimeout: 0s\n"
                   "  idleTimeout: 1h\n")
    p = subprocess.run([STRAIT, "check", "-c", str(bad)],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode != 0, p
    assert (f"{bad}:3:22: http.streamIdleTimeout: value '25h' out of range "
            "0ms-86400000ms") in p.stderr, p.stderr
    assert (f"{bad}:4:26: http.requestHeadersTimeout: value '0s' out of "
            "range 1ms-3600000ms") in p.stderr, p.stderr
    assert f"{bad}:5:3: http.idleTimeout: unknown key" in p.stderr, p.stderr
