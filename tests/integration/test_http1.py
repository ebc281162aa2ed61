"""The HTTP/1.1 reverse proxy, end to end: real clients (curl, raw
sockets) through the real binary to a test upstream on loopback."""
import hashlib
import json
import re
import socket
import subprocess
import time

import pytest

from conftest import (connect, free_port, read_head, recv_all, recv_exact,
                      wait_for)
from httpd import (MIB, clusters, http_listener, pattern, read_response,
                   sha256)


def start(strait_factory, up_addrs, http=None, routes=None, workers=2,
          cluster_spec=None):
    """strait with one HTTP listener "web" routing everything to cluster
    "backend". Returns (strait, port)."""
    port = free_port()
    spec = cluster_spec or {"endpoints": list(up_addrs)}
    st = strait_factory(http_listener("web", port, routes=routes, http=http),
                        workers=workers,
                        extra=clusters(backend=spec)).start()
    return st, port


def curl(*args, timeout=60):
    p = subprocess.run(["curl", "-sS", "--max-time", str(timeout - 5), *args],
                       capture_output=True, timeout=timeout)
    return p


def request(port, data, method="GET"):
    """One raw request on a new connection; returns the response."""
    with connect(port) as c:
        c.sendall(data)
        return read_response(c.makefile("rb"), method)


def names(record):
    return [k.lower() for k, _ in record["headers"]]


def hval(record, name):
    vals = [v for k, v in record["headers"] if k.lower() == name.lower()]
    return vals[0] if len(vals) == 1 else (vals or None)


def assert_one_content_length(r):
    cls = [v for k, v in r.headers if k == "content-length"]
    assert len(cls) == 1 and int(cls[0]) == len(r.body), r.headers


def log_line(st, marker, timeout=10):
    """The http_request log line whose path contains marker."""
    def find():
        for line in st.log().splitlines():
            if "http_request" in line and marker in line:
                return line
        return None
    return wait_for(find, timeout, f"access log line for {marker}")


def closed_after(c, f, timeout=5):
    """True when the server closes c (EOF) within timeout."""
    c.settimeout(timeout)
    try:
        return f.read() == b""
    except (ConnectionResetError, BrokenPipeError):
        return True
    except socket.timeout:
        return False


# -- basic proxying ---------------------------------------------------------

def test_get_and_post_with_curl(strait_factory, httpd_factory):
    up = httpd_factory()
    st, port = start(strait_factory, [up.addr])
    p = curl(f"http://127.0.0.1:{port}/hello?a=b")
    assert p.returncode == 0, p.stderr
    rec = json.loads(p.stdout)
    assert rec["method"] == "GET" and rec["path"] == "/hello?a=b"
    assert hval(rec, "host") == f"127.0.0.1:{port}"

    p = curl("-X", "POST", "--data-binary", "payload-123",
             "-H", "Content-Type: text/plain", f"http://127.0.0.1:{port}/post")
    assert p.returncode == 0, p.stderr
    rec = json.loads(p.stdout)
    assert rec["method"] == "POST" and rec["body"] == "payload-123"
    assert hval(rec, "content-type") == "text/plain"
    line = log_line(st, "path=/post")
    assert "method=POST" in line and "protocol=HTTP/1.1" in line
    assert "status=200" in line and "cluster=backend" in line
    assert f"upstream={up.addr}" in line and "flags=-" in line


def test_get_and_post_with_raw_socket(strait_factory, httpd_factory):
    up = httpd_factory()
    st, port = start(strait_factory, [up.addr])
    r = request(port, b"GET /raw HTTP/1.1\r\nHost: a.test\r\n\r\n")
    assert r.status == 200 and r.version == "HTTP/1.1"
    rec = r.json()
    assert rec["path"] == "/raw" and hval(rec, "host") == "a.test"
    r = request(port, b"POST /raw HTTP/1.1\r\nHost: a.test\r\n"
                      b"Content-Length: 5\r\n\r\nhello", "POST")
    assert r.status == 200
    assert r.json()["body"] == "hello"
    r = request(port, b"HEAD /raw?size=1000 HTTP/1.1\r\nHost: a\r\n\r\n",
                "HEAD")
    assert r.status == 200 and r.header("content-length") == "1000"


def test_keepalive_reuses_client_and_upstream_connections(
        strait_factory, httpd_factory):
    up = httpd_factory()
    # One worker, so every request goes through the same upstream pool.
    st, port = start(strait_factory, [up.addr], workers=1)
    n = 6
    with connect(port) as c:
        f = c.makefile("rb")
        for i in range(n):
            c.sendall(b"GET /ka%d HTTP/1.1\r\nHost: a\r\n\r\n" % i)
            r = read_response(f)
            assert r.status == 200 and r.json()["path"] == f"/ka{i}"
    assert len(up.requests) == n
    assert up.conns < n, f"upstream saw {up.conns} connections for {n} requests"
    # The client side was one connection too.
    assert st.stats()["listener.web.downstream_cx_total"] == 1


def test_pipelined_requests_answered_in_order(strait_factory, httpd_factory):
    up = httpd_factory()
    st, port = start(strait_factory, [up.addr])
    # The first is slow: the answers must still come in request order.
    reqs = (b"GET /p0?delay=0.3 HTTP/1.1\r\nHost: a\r\n\r\n"
            b"POST /p1 HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabc"
            b"GET /p2?size=10 HTTP/1.1\r\nHost: a\r\n\r\n"
            b"GET /p3 HTTP/1.1\r\nHost: a\r\n\r\n")
    with connect(port) as c:
        c.sendall(reqs)
        f = c.makefile("rb")
        got = [read_response(f) for _ in range(4)]
    assert [r.status for r in got] == [200] * 4
    assert got[0].json()["path"] == "/p0?delay=0.3"
    assert got[1].json()["body"] == "abc"
    assert got[2].body == pattern(10)
    assert got[3].json()["path"] == "/p3"


def test_chunked_request_body_forwarded_whole(strait_factory, httpd_factory):
    up = httpd_factory()
    st, port = start(strait_factory, [up.addr])
    body = pattern(300000, seed=7)
    wire = bytearray(b"POST /chunked HTTP/1.1\r\nHost: a\r\n"
                     b"Transfer-Encoding: chunked\r\n\r\n")
    for i in range(0, len(body), 70001):
        part = body[i:i + 70001]
        wire += b"%x;ext=1\r\n%s\r\n" % (len(part), part)
    wire += b"0\r\n\r\n"
    r = request(port, bytes(wire), "POST")
    assert r.status == 200
    rec = r.json()
    assert rec["body_len"] == len(body)
    assert rec["body_sha256"] == sha256(body)


def test_chunked_response_trailers_relayed(strait_factory, httpd_factory):
    up = httpd_factory()
    st, port = start(strait_factory, [up.addr])
    r = request(port, b"GET /t?size=50000&chunked=1&trailers=1 HTTP/1.1\r\n"
                      b"Host: a\r\nTE: trailers\r\n\r\n")
    assert r.status == 200
    assert "chunked" in (r.header("transfer-encoding") or "")
    assert r.body == pattern(50000)
    tr = dict(r.trailers)
    assert tr.get("x-checksum") == sha256(pattern(50000)), r.trailers
    assert tr.get("x-trailer-2") == "two"


def test_20mib_bodies_up_and_down(strait_factory, httpd_factory, tmp_path):
    up = httpd_factory()
    st, port = start(strait_factory, [up.addr])
    size = 20 * MIB
    src = tmp_path / "up.bin"
    src.write_bytes(pattern(size, seed=3))
    p = curl("--data-binary", f"@{src}", "-H", "Content-Type: application/x",
             f"http://127.0.0.1:{port}/upload")
    assert p.returncode == 0, p.stderr
    rec = json.loads(p.stdout)
    assert rec["body_len"] == size
    assert rec["body_sha256"] == hashlib.sha256(src.read_bytes()).hexdigest()

    p = curl(f"http://127.0.0.1:{port}/download?size={size}")
    assert p.returncode == 0, p.stderr
    assert len(p.stdout) == size and p.stdout == pattern(size)

    p = curl(f"http://127.0.0.1:{port}/download?size={size}&chunked=1")
    assert p.returncode == 0, p.stderr
    assert sha256(p.stdout) == sha256(pattern(size))


def test_expect_100_continue(strait_factory, httpd_factory):
    up = httpd_factory()
    st, port = start(strait_factory, [up.addr])
    body = b"x" * 4000
    p = curl("-v", "-H", "Expect: 100-continue", "--expect100-timeout", "30",
             "--data-binary", body.decode(), f"http://127.0.0.1:{port}/expect")
    assert p.returncode == 0, p.stderr
    assert b"< HTTP/1.1 100" in p.stderr, p.stderr.decode()
    assert json.loads(p.stdout)["body_len"] == 4000
    # Raw: the 100 comes before the body is sent, then the final answer.
    with connect(port) as c:
        c.sendall(b"POST /expect2 HTTP/1.1\r\nHost: a\r\n"
                  b"Expect: 100-continue\r\nContent-Length: 2000\r\n\r\n")
        f = c.makefile("rb")
        r = read_response(f)
        assert r.status == 100
        c.sendall(b"y" * 2000)
        r = read_response(f)
        assert r.status == 200 and r.json()["body_len"] == 2000


def test_http10_request_answered_then_closed(strait_factory, httpd_factory):
    up = httpd_factory()
    st, port = start(strait_factory, [up.addr])
    with connect(port) as c:
        c.sendall(b"GET /ten HTTP/1.0\r\nHost: a\r\n\r\n")
        f = c.makefile("rb")
        r = read_response(f)
        assert r.status == 200
        assert r.json()["path"] == "/ten"
        assert closed_after(c, f)
    # HTTP/1.0 without Host is fine too.
    with connect(port) as c:
        c.sendall(b"GET /ten2 HTTP/1.0\r\n\r\n")
        f = c.makefile("rb")
        assert read_response(f).status == 200
        assert closed_after(c, f)


# -- malformed requests -------------------------------------------------------

MALFORMED = [
    ("cl_and_te", b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n"
                  b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400),
    ("two_content_lengths", b"POST / HTTP/1.1\r\nHost: a\r\n"
                            b"Content-Length: 5\r\nContent-Length: 6\r\n\r\nhello!", 400),
    ("obs_fold", b"GET / HTTP/1.1\r\nHost: a\r\nX-A: b\r\n c\r\n\r\n", 400),
    ("bare_lf", b"GET / HTTP/1.1\nHost: a\n\n", 400),
    ("bare_cr", b"GET / HTTP/1.1\r\nHost: a\rX: y\r\n\r\n", 400),
    ("bad_header_name", b"GET / HTTP/1.1\r\nHost: a\r\nX(a): b\r\n\r\n", 400),
    ("space_before_colon", b"GET / HTTP/1.1\r\nHost: a\r\nX-A : b\r\n\r\n", 400),
    ("missing_host", b"GET / HTTP/1.1\r\nUser-Agent: t\r\n\r\n", 400),
    ("two_hosts", b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400),
    ("request_line_too_long",
     b"GET /" + b"a" * 70000 + b" HTTP/1.1\r\nHost: a\r\n\r\n", 414),
    ("headers_too_large",
     b"GET / HTTP/1.1\r\nHost: a\r\n" + b"X-Big: " + b"b" * 62000 + b"\r\n\r\n", 431),
    ("too_many_headers", b"GET / HTTP/1.1\r\nHost: a\r\n"
     + b"".join(b"X-H%d: v\r\n" % i for i in range(150)) + b"\r\n", 431),
    ("unknown_transfer_encoding", b"POST / HTTP/1.1\r\nHost: a\r\n"
                                  b"Transfer-Encoding: foo, chunked\r\n\r\n0\r\n\r\n", 501),
    ("http2_in_request_line", b"GET / HTTP/2.0\r\nHost: a\r\n\r\n", 505),
    ("bad_chunk_size", b"POST / HTTP/1.1\r\nHost: a\r\n"
                       b"Transfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n", 400),
    ("negative_content_length", b"POST / HTTP/1.1\r\nHost: a\r\n"
                                b"Content-Length: -1\r\n\r\n", 400),
]


@pytest.mark.parametrize("name,wire,status", MALFORMED,
                         ids=[m[0] for m in MALFORMED])
def test_malformed_request_rejected_and_closed(strait_factory, httpd_factory,
                                               name, wire, status):
    up = httpd_factory()
    st, port = start(strait_factory, [up.addr])
    with connect(port) as c:
        try:
            c.sendall(wire)
        except (ConnectionResetError, BrokenPipeError):
            pass  # strait may answer and close before reading it all
        f = c.makefile("rb")
        try:
            r = read_response(f)
        except ConnectionResetError:
            r = None
        assert r is not None, f"no response to {name}"
        assert r.status == status, (r.status, r.body)
        assert_one_content_length(r)
        assert (r.header("connection") or "").lower() == "close"
        assert closed_after(c, f), "connection left open"
    assert st.proc.poll() is None
    # Nothing reached the upstream, and strait keeps serving.
    if name != "bad_chunk_size":
        assert up.requests == []
    r = request(port, b"GET /after HTTP/1.1\r\nHost: a\r\n\r\n")
    assert r.status == 200
    stats = st.stats()
    assert stats.get("listener.web.http.protocol_errors", 0) >= 1 or \
        status not in (400,), stats


def test_transfer_coding_not_silently_dropped(strait_factory, httpd_factory):
    """A gzip transfer-coded body must not reach the upstream as if it were
    plain: strait either refuses the coding (501) or passes it on."""
    import gzip
    up = httpd_factory()
    st, port = start(strait_factory, [up.addr])
    coded = gzip.compress(b"plain text body")
    wire = (b"POST /gz HTTP/1.1\r\nHost: a\r\n"
            b"Transfer-Encoding: gzip, chunked\r\n\r\n"
            + b"%x\r\n%s\r\n0\r\n\r\n" % (len(coded), coded))
    r = request(port, wire, "POST")
    if r.status == 501:
        assert up.requests == []
        return
    assert r.status == 200
    rec = r.json()
    te = (hval(rec, "transfer-encoding") or "").lower()
    assert "gzip" in te, f"gzip coding dropped: upstream saw TE {te!r}"


@pytest.mark.parametrize("action", ["ALLOW", "DROP_HEADER", "REJECT_REQUEST"])
def test_headers_with_underscores(strait_factory, httpd_factory, action):
    up = httpd_factory()
    st, port = start(strait_factory, [up.addr],
                     http={"headersWithUnderscoresAction": action})
    r = request(port, b"GET /u HTTP/1.1\r\nHost: a\r\nX_Under: 1\r\n"
                      b"X-Dash: 2\r\n\r\n")
    if action == "REJECT_REQUEST":
        assert r.status == 400
        assert up.requests == []
        return
    assert r.status == 200
    rec = r.json()
    assert hval(rec, "x-dash") == "2"
    if action == "ALLOW":
        assert hval(rec, "x_under") == "1"
    else:
        assert "x_under" not in names(rec)


# -- headers added and removed ------------------------------------------------

def test_hop_by_hop_headers_not_forwarded(strait_factory, httpd_factory):
    up = httpd_factory()
    st, port = start(strait_factory, [up.addr])
    r = request(port, b"GET /hop HTTP/1.1\r\nHost: a\r\n"
                      b"Connection: keep-alive, foo\r\nFoo: bar\r\n"
                      b"Keep-Alive: timeout=5\r\nProxy-Connection: keep-alive\r\n"
                      b"Upgrade-Insecure-Requests: 1\r\nTE: trailers\r\n"
                      b"X-End-To-End: yes\r\n\r\n")
    assert r.status == 200
    got = names(r.json())
    for h in ("foo", "keep-alive", "proxy-connection"):
        assert h not in got, got
    assert "connection" not in got or \
        "foo" not in (hval(r.json(), "connection") or "").lower()
    assert "x-end-to-end" in got and "upgrade-insecure-requests" in got


def test_forwarded_headers_and_request_id(strait_factory, httpd_factory):
    up = httpd_factory()
    st, port = start(strait_factory, [up.addr])
    rec = request(port, b"GET /x HTTP/1.1\r\nHost: a\r\n\r\n").json()
    assert hval(rec, "x-forwarded-for") == "127.0.0.1"
    assert hval(rec, "x-forwarded-proto") == "http"
    rid = hval(rec, "x-request-id")
    assert rid and re.fullmatch(r"[0-9a-f-]{16,64}", rid), rid
    rid2 = request(port, b"GET /x HTTP/1.1\r\nHost: a\r\n\r\n").json()
    assert hval(rid2, "x-request-id") != rid
    assert f"request_id={rid}" in log_line(st, f"request_id={rid}")

    tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    rec = request(port, b"GET /y HTTP/1.1\r\nHost: a\r\n"
                        b"X-Forwarded-For: 203.0.113.9\r\n"
                        b"X-Request-Id: my-id-42\r\n"
                        b"traceparent: " + tp.encode() + b"\r\n\r\n").json()
    assert hval(rec, "x-forwarded-for") == "203.0.113.9, 127.0.0.1"
    assert hval(rec, "x-request-id") == "my-id-42"
    assert hval(rec, "traceparent") == tp
    assert "request_id=my-id-42" in log_line(st, "path=/y")


# -- errors strait answers itself -------------------------------------------

def test_no_route_is_404_nr(strait_factory, httpd_factory):
    up = httpd_factory()
    st, port = start(strait_factory, [up.addr], routes=[
        {"host": "app.test", "pathPrefix": "/api", "cluster": "backend"}])
    r = request(port, b"GET /api/ok HTTP/1.1\r\nHost: app.test\r\n\r\n")
    assert r.status == 200
    r = request(port, b"GET /nowhere HTTP/1.1\r\nHost: app.test\r\n\r\n")
    assert r.status == 404
    assert_one_content_length(r)
    assert "flags=NR" in log_line(st, "path=/nowhere")
    r = request(port, b"GET /api/x HTTP/1.1\r\nHost: other.test\r\n\r\n")
    assert r.status == 404
    assert len(up.requests) == 1


def test_upstream_down_is_503_uf(strait_factory):
    dead = f"127.0.0.1:{free_port()}"
    st, port = start(strait_factory, [dead])
    r = request(port, b"GET /down HTTP/1.1\r\nHost: a\r\n\r\n")
    assert r.status == 503
    assert_one_content_length(r)
    line = log_line(st, "path=/down")
    assert "flags=UF" in line and "status=503" in line


def test_route_timeout_is_504_ut(strait_factory, httpd_factory):
    up = httpd_factory()
    st, port = start(strait_factory, [up.addr], routes=[
        {"host": "*", "pathPrefix": "/", "cluster": "backend",
         "timeout": "200ms"}])
    t0 = time.monotonic()
    r = request(port, b"GET /slow?delay=2 HTTP/1.1\r\nHost: a\r\n\r\n")
    took = time.monotonic() - t0
    assert r.status == 504
    assert_one_content_length(r)
    assert took < 1.5, took
    line = log_line(st, "path=\"/slow?delay=2\"")
    assert "flags=UT" in line and "status=504" in line
    # A fast request on the same route is fine.
    assert request(port, b"GET /fast HTTP/1.1\r\nHost: a\r\n\r\n").status == 200


def test_upgrade_relayed_as_tunnel(strait_factory, httpd_factory):
    up = httpd_factory()
    st, port = start(strait_factory, [up.addr])
    with connect(port) as c:
        c.sendall(b"GET /ws HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\n"
                  b"Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\n"
                  b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n")
        f = c.makefile("rb", buffering=0)
        r = read_response(f)
        assert r.status == 101
        assert (r.header("upgrade") or "").lower() == "websocket"
        rec = up.requests[-1]
        assert (hval(rec, "upgrade") or "").lower() == "websocket"
        assert "upgrade" in (hval(rec, "connection") or "").lower()
        for msg in (b"\x81\x05hello", bytes(range(256)) * 100, b"\x00end"):
            c.sendall(msg)
            got = bytearray()
            c.settimeout(10)
            while len(got) < len(msg):
                d = c.recv(65536)
                assert d, "tunnel closed"
                got += d
            assert bytes(got) == msg
        c.shutdown(socket.SHUT_WR)
        c.settimeout(10)
        assert recv_all(c) == b""


def test_request_head_timeout_is_408(strait_factory, httpd_factory):
    up = httpd_factory()
    st, port = start(strait_factory, [up.addr],
                     http={"requestHeadersTimeout": "300ms"})
    t0 = time.monotonic()
    with connect(port) as c:
        c.sendall(b"GET /half HTTP/1.1\r\nHost: a\r\nX-A: ")
        f = c.makefile("rb")
        r = read_response(f)
        assert r is not None and r.status == 408
        assert closed_after(c, f)
    assert time.monotonic() - t0 < 3
    assert up.requests == []


def test_stats_count_responses_by_class(strait_factory, httpd_factory):
    up = httpd_factory()
    st, port = start(strait_factory, [up.addr])
    for q in ("", "?status=201", "?status=404", "?status=404", "?status=503"):
        assert request(port, b"GET /s%s HTTP/1.1\r\nHost: a\r\n\r\n"
                       % q.encode()).status == int(q[8:] or 200)
    request(port, b"GET / HTTP/1.1\r\n\r\n")  # 400 from strait itself

    def counts():
        s = st.stats()
        return {c: s.get(f"listener.web.http.rq_{c}", 0)
                for c in ("2xx", "4xx", "5xx")}
    # Two 2xx and two 404s and a 503 from the upstream; the 400 strait
    # answered itself is a 4xx response too.
    want = {"2xx": 2, "4xx": 3, "5xx": 1}
    try:
        wait_for(lambda: counts() == want, 5, "rq_ counters")
    except AssertionError:
        raise AssertionError(f"counters {counts()}, want {want}")
    assert st.stats()["listener.web.http.protocol_errors"] == 1
    code, body, _ = st.get("/stats/prometheus")
    assert re.search(r'strait_http_responses_total\{[^}]*listener="web"[^}]*'
                     r'class="2xx"[^}]*\} 2\b', body), body


def test_idle_timeout_closes_a_connection_after_its_requests(
        strait_factory, httpd_factory):
    """The idle timeout is armed again after each response (timer.c then
    only moves its due time, and the loop is asked again when the old one
    comes): a connection that served three requests is still closed once
    it has been idle for idleTimeout, and the requests in between were
    not cut by the earlier due times."""
    up = httpd_factory()
    st, port = start(strait_factory, [up.addr],
                     http={"idleTimeout": "400ms"})
    with connect(port) as c:
        f = c.makefile("rb")
        for i in range(3):
            c.sendall(b"GET /n%d HTTP/1.1\r\nHost: a\r\n\r\n" % i)
            r = read_response(f, "GET")
            assert r.status == 200 and r.json()["path"] == "/n%d" % i
        # Closed by strait, not by this liveness bound.
        c.settimeout(30)
        assert f.read() == b""
    wait_for(lambda: st.stats()["listener.web.downstream_cx_active"] == 0,
             10, "the idle connection to be closed")
    assert st.stats()["listener.web.http.rq_total"] == 3


def test_idle_keepalive_connections_hold_no_buffers(strait_factory,
                                                    httpd_factory):
    """An idle keep-alive connection gives its read and write buffers back
    and takes them again only when bytes come (nginx's lazy buffers): the
    buffers gauge returns to its baseline with 40 idle connections open,
    and counts the connections that hold part of a request head."""
    up = httpd_factory()
    st, port = start(strait_factory, [up.addr])
    key = "listener.web.http.downstream_buffers_active"
    assert st.stats()[key] == 0
    conns = []
    try:
        for _ in range(40):
            c = connect(port)
            f = c.makefile("rb")
            c.sendall(b"GET /one HTTP/1.1\r\nHost: a\r\n\r\n")
            assert read_response(f, "GET").status == 200
            conns.append((c, f))
        wait_for(lambda: st.stats()[key] == 0, 10,
                 "idle connections to give their buffers back")
        s = st.stats()
        assert s["listener.web.downstream_cx_active"] == 40
        assert s["listener.web.http.rq_total"] == 40

        # Part of a head waits in a read buffer until the rest comes.
        for c, _ in conns[:5]:
            c.sendall(b"GET /two HTTP/1.1\r\nHo")
        wait_for(lambda: st.stats()[key] == 5, 10,
                 "five connections holding a partial head")
        for c, f in conns[:5]:
            c.sendall(b"st: a\r\n\r\n")
            r = read_response(f, "GET")
            assert r.status == 200 and r.json()["path"] == "/two"
        wait_for(lambda: st.stats()[key] == 0, 10,
                 "the buffers to come back after the second requests")
        assert st.stats()["listener.web.downstream_cx_active"] == 40
    finally:
        for c, f in conns:
            f.close()
            c.close()


# -- smuggling and request forms (issue 12) -----------------------------------

def plain_upstream(upstream_factory):
    """A keep-alive HTTP/1.1 upstream that never switches protocols: it
    reads each request (Content-Length or chunked body), records (request
    line, headers, body, trailers) in .seen, and answers 200 "ok"."""
    seen = []

    def handler(c):
        f = c.makefile("rb")
        while True:
            line = f.readline()
            if not line:
                return
            if line == b"\r\n":
                continue
            hdrs = []
            while True:
                h = f.readline()
                if h in (b"\r\n", b""):
                    break
                k, _, v = h.decode("latin-1").partition(":")
                hdrs.append((k.strip().lower(), v.strip()))
            d = dict(hdrs)
            body = b""
            trailers = []
            if "chunked" in d.get("transfer-encoding", "").lower():
                while True:
                    n = int(f.readline().split(b";")[0], 16)
                    if n == 0:
                        while True:
                            t = f.readline()
                            if t in (b"\r\n", b""):
                                break
                            k, _, v = t.decode("latin-1").partition(":")
                            trailers.append((k.strip().lower(), v.strip()))
                        break
                    body += f.read(n)
                    f.readline()
            elif "content-length" in d:
                body = f.read(int(d["content-length"]))
            seen.append((line.rstrip(b"\r\n").decode("latin-1"), hdrs, body,
                         trailers))
            c.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")

    up = upstream_factory(handler)
    up.seen = seen
    return up


SMUGGLED = b"GET /smuggled HTTP/1.1\r\nHost: a\r\n\r\n"


@pytest.mark.parametrize("proto", [b"websocket", b"h2c", b"foo"])
@pytest.mark.parametrize("framing", ["length", "chunked"])
def test_upgrade_with_body_is_not_smuggled(strait_factory, upstream_factory,
                                           proto, framing):
    """Issue 12 item 17: a request with Connection: Upgrade and a body went
    upstream without its framing, the body following raw; an upstream that
    does not switch protocols ran the body as a second request."""
    up = plain_upstream(upstream_factory)
    st, port = start(strait_factory, [up.addr])
    if framing == "length":
        frame = b"Content-Length: %d\r\n\r\n%s" % (len(SMUGGLED), SMUGGLED)
    else:
        frame = (b"Transfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n"
                 % (len(SMUGGLED), SMUGGLED))
    with connect(port) as c:
        c.sendall(b"POST /up HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\n"
                  b"Upgrade: " + proto + b"\r\n" + frame)
        f = c.makefile("rb")
        r = read_response(f, "POST")
        assert r.status == 200, (r.status, r.body)
        # The connection stays HTTP: a next request is answered too.
        c.sendall(b"GET /next HTTP/1.1\r\nHost: a\r\n\r\n")
        assert read_response(f).status == 200
    lines = [s[0] for s in up.seen]
    assert lines == ["POST /up HTTP/1.1", "GET /next HTTP/1.1"], lines
    assert up.seen[0][2] == SMUGGLED
    assert "upgrade" not in [k for k, _ in up.seen[0][1]]


def test_h2c_upgrade_forwarded_as_plain_request(strait_factory,
                                                upstream_factory):
    """An h2c upgrade is not tunnelled: Upgrade and HTTP2-Settings are
    dropped and the request goes upstream as plain HTTP/1.1."""
    up = plain_upstream(upstream_factory)
    st, port = start(strait_factory, [up.addr])
    r = request(port, b"GET /h2c HTTP/1.1\r\nHost: a\r\n"
                      b"Connection: Upgrade, HTTP2-Settings\r\n"
                      b"Upgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n"
                      b"\r\n")
    assert r.status == 200
    assert [s[0] for s in up.seen] == ["GET /h2c HTTP/1.1"]
    got = [k for k, _ in up.seen[0][1]]
    assert "upgrade" not in got and "http2-settings" not in got, got


def test_upgrade_bytes_wait_for_the_101(strait_factory, upstream_factory):
    """Bytes a client sends after a WebSocket upgrade head go upstream only
    after the upstream's 101; an upstream that declines sees them as the
    next request, never as part of the first."""
    up = plain_upstream(upstream_factory)
    st, port = start(strait_factory, [up.addr])
    with connect(port) as c:
        c.sendall(b"GET /ws HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\n"
                  b"Upgrade: websocket\r\n\r\n" + SMUGGLED)
        f = c.makefile("rb")
        r = read_response(f)
        assert r.status == 200
        r = read_response(f)
        assert r.status == 200
    lines = [s[0] for s in up.seen]
    assert lines == ["GET /ws HTTP/1.1", "GET /smuggled HTTP/1.1"], lines


def test_chunk_size_with_many_leading_zeros(strait_factory, upstream_factory):
    """Issue 12 item 19: a chunk size with leading zeros is valid
    (RFC 9112 7.1) and was refused past 16 digits."""
    up = plain_upstream(upstream_factory)
    st, port = start(strait_factory, [up.addr])
    r = request(port, b"POST /z HTTP/1.1\r\nHost: a\r\n"
                      b"Transfer-Encoding: chunked\r\n\r\n"
                      b"0000000000000000005\r\nhello\r\n"
                      b"00000000000000000000000000000\r\n\r\n", "POST")
    assert r.status == 200, (r.status, r.body)
    assert [(s[0], s[2]) for s in up.seen] == [("POST /z HTTP/1.1", b"hello")]


def test_options_asterisk_forwarded(strait_factory, upstream_factory):
    """OPTIONS * (RFC 9112 3.2.4) was a 400."""
    up = plain_upstream(upstream_factory)
    st, port = start(strait_factory, [up.addr])
    r = request(port, b"OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n", "OPTIONS")
    assert r.status == 200, (r.status, r.body)
    assert [s[0] for s in up.seen] == ["OPTIONS * HTTP/1.1"]
    # '*' is only the asterisk form of OPTIONS.
    r = request(port, b"GET * HTTP/1.1\r\nHost: a\r\n\r\n")
    assert r.status == 400


def test_higher_minor_version_is_http11(strait_factory, upstream_factory):
    """HTTP/1.2 is handled as HTTP/1.1 (RFC 9112 2.3), not a 505."""
    up = plain_upstream(upstream_factory)
    st, port = start(strait_factory, [up.addr])
    with connect(port) as c:
        c.sendall(b"GET /v12 HTTP/1.2\r\nHost: a\r\n\r\n")
        f = c.makefile("rb")
        r = read_response(f)
        assert r.status == 200 and r.version == "HTTP/1.1", (r.status,
                                                             r.version)
        # Kept alive, as HTTP/1.1 is.
        c.sendall(b"GET /again HTTP/1.2\r\nHost: a\r\n\r\n")
        assert read_response(f).status == 200
    assert [s[0] for s in up.seen] == ["GET /v12 HTTP/1.1",
                                       "GET /again HTTP/1.1"]


def test_framing_fields_in_trailers_dropped(strait_factory, upstream_factory):
    """Content-Length and Transfer-Encoding in chunked trailers were
    forwarded; other trailers still are."""
    up = plain_upstream(upstream_factory)
    st, port = start(strait_factory, [up.addr])
    r = request(port, b"POST /tr HTTP/1.1\r\nHost: a\r\nTE: trailers\r\n"
                      b"Transfer-Encoding: chunked\r\n\r\n"
                      b"5\r\nhello\r\n0\r\nContent-Length: 99\r\n"
                      b"Transfer-Encoding: chunked\r\nHost: evil\r\n"
                      b"X-Sum: 42\r\n\r\n", "POST")
    assert r.status == 200, (r.status, r.body)
    (line, _, body, trailers), = up.seen
    assert body == b"hello"
    assert trailers == [("x-sum", "42")], trailers


def test_underscore_framing_alias_dropped(strait_factory, upstream_factory):
    """Transfer_Encoding (read as Transfer-Encoding by CGI-style back ends)
    was forwarded under the default ALLOW underscore policy."""
    up = plain_upstream(upstream_factory)
    st, port = start(strait_factory, [up.addr])
    r = request(port, b"POST /us HTTP/1.1\r\nHost: a\r\n"
                      b"Transfer_Encoding: chunked\r\nContent_Length: 1\r\n"
                      b"X_Other: 1\r\nContent-Length: 5\r\n\r\nhello", "POST")
    assert r.status == 200, (r.status, r.body)
    (line, hdrs, body, _), = up.seen
    got = [k for k, _ in hdrs]
    assert "transfer_encoding" not in got and "content_length" not in got, got
    assert "x_other" in got and body == b"hello"


@pytest.mark.parametrize("target", [b"/a#frag", b"/a?x=1#/admin",
                                    b"http://a/b#c"])
def test_fragment_in_target_is_400(strait_factory, upstream_factory, target):
    """A #fragment was forwarded in the request target; Envoy refuses it."""
    up = plain_upstream(upstream_factory)
    st, port = start(strait_factory, [up.addr])
    r = request(port, b"GET " + target + b" HTTP/1.1\r\nHost: a\r\n\r\n")
    assert r.status == 400
    assert up.seen == []


@pytest.mark.parametrize("target", [b"http://a@other.example/",
                                    b"http://user:pw@a/x", b"https://a@b"])
def test_absolute_form_with_userinfo_is_400(strait_factory, upstream_factory,
                                            target):
    """Issue 12 item 18: GET http://a@other.example/ went upstream as
    Host: a@other.example."""
    up = plain_upstream(upstream_factory)
    st, port = start(strait_factory, [up.addr])
    r = request(port, b"GET " + target + b" HTTP/1.1\r\nHost: a\r\n\r\n")
    assert r.status == 400
    assert up.seen == []
    r = request(port, b"GET http://other.example/?q=a@b HTTP/1.1\r\n"
                      b"Host: other.example\r\n\r\n")
    assert r.status == 200


def ws_upgrade(port, proto=b"websocket"):
    """Sends an Upgrade request; returns the status strait answered."""
    with connect(port) as c:
        c.sendall(b"GET /ws HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\n"
                  b"Upgrade: " + proto + b"\r\n\r\n")
        return read_response(c.makefile("rb")).status


def test_upgrade_types_are_configured(strait_factory, httpd_factory):
    """Only the listener's upgradeTypes are tunnelled (websocket by
    default); another Upgrade goes upstream as a plain request."""
    up = httpd_factory()  # answers 101 to any Upgrade it sees
    st, port = start(strait_factory, [up.addr])
    assert ws_upgrade(port) == 101
    assert ws_upgrade(port, b"foo") == 200
    assert "upgrade" not in names(up.requests[-1])
    st2, port2 = start(strait_factory, [up.addr],
                       http={"upgradeTypes": "websocket,foo"})
    assert ws_upgrade(port2, b"FOO") == 101
    assert ws_upgrade(port2) == 101
    st3, port3 = start(strait_factory, [up.addr], http={"upgradeTypes": ""})
    assert ws_upgrade(port3) == 200
    assert "upgrade" not in names(up.requests[-1])


@pytest.mark.parametrize("value", ["h2c", "websocket,,foo", "web socket"])
def test_upgrade_types_refused_by_check(tmp_path, value):
    """strait check refuses an upgradeTypes it could not honour."""
    import os
    from httpd import http_listener as hl
    conf = tmp_path / "strait.yaml"
    conf.write_text("listeners:\n" + hl("web", free_port(),
                                          http={"upgradeTypes": value}) +
                    clusters(backend=["127.0.0.1:1"]))
    p = subprocess.run([os.environ["STRAIT_BIN"], "check", "-c", str(conf)],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode != 0, p.stdout + p.stderr
    assert "upgradeTypes" in p.stdout + p.stderr


def test_upgrade_with_body_is_not_smuggled_over_tls(strait_factory,
                                                    upstream_factory, certs):
    """The Upgrade smuggling vector, reproduced over TLS by the attack run:
    the same single request reaches the upstream."""
    import ssl
    up = plain_upstream(upstream_factory)
    crt, key = certs["ec"]
    port = free_port()
    strait_factory(http_listener("web", port, tls={
        "certificates": [{"serverCertificate": crt, "privateKey": key}],
        "alpn": ["http/1.1"]}),
        workers=2, extra=clusters(backend=[up.addr])).start()
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    with ctx.wrap_socket(connect(port), server_hostname="example.com") as c:
        c.sendall(b"POST /up HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\n"
                  b"Upgrade: websocket\r\nContent-Length: %d\r\n\r\n%s"
                  % (len(SMUGGLED), SMUGGLED))
        r = read_response(c.makefile("rb"), "POST")
        assert r.status == 200, (r.status, r.body)
    assert [s[0] for s in up.seen] == ["POST /up HTTP/1.1"]
    assert up.seen[0][2] == SMUGGLED


def test_underscore_twins_of_set_headers_dropped(strait_factory,
                                                 upstream_factory):
    """Issue 28: X_Forwarded_For and Proxy_Connection were forwarded under
    the default ALLOW policy; a back end that folds '_' into '-' would
    read a client address strait never vouched for. Twins of every field
    strait sets or strips go; other underscored names still pass."""
    up = plain_upstream(upstream_factory)
    st, port = start(strait_factory, [up.addr])
    twins = [b"X_Forwarded_For", b"x_forwarded_proto", b"X-Forwarded_Host",
             b"Proxy_Connection", b"x_request_id", b"X_Envoy_Original_Path",
             b"x_b3_traceid"]
    r = request(port, b"GET /tw HTTP/1.1\r\nHost: a\r\n" +
                b"".join(t + b": 6.6.6.6\r\n" for t in twins) +
                b"X_Other: 1\r\n\r\n")
    assert r.status == 200, (r.status, r.body)
    (line, hdrs, body, _), = up.seen
    got = [k for k, _ in hdrs]
    for t in twins:
        assert t.decode().lower() not in got, got
    assert "x_other" in got
    assert "6.6.6.6" not in [v for _, v in hdrs]


def switching_upstream(upstream_factory, answer):
    """An upstream that answers any request with the 101 head answer(head)
    returns (bytes of header lines), then echoes what follows."""
    def handler(c):
        head = read_head(c)
        if head is None:
            return
        c.sendall(b"HTTP/1.1 101 Switching Protocols\r\n"
                  b"Connection: Upgrade\r\n" + answer(head) + b"\r\n")
        c.settimeout(10)
        try:
            while True:
                d = c.recv(65536)
                if not d:
                    return
                c.sendall(d)
        except OSError:
            return
    return upstream_factory(handler)


WS_KEY = b"dGhlIHNhbXBsZSBub25jZQ=="
WS_ACCEPT = b"s3pPLMBiTxaQ9kYGzzhZRbK+xOo="  # RFC 6455 1.3's example


@pytest.mark.parametrize("answer,status", [
    (b"Upgrade: websocket\r\nSec-WebSocket-Accept: " + WS_ACCEPT + b"\r\n",
     101),
    (b"Upgrade: WebSocket\r\nSec-WebSocket-Accept: " + WS_ACCEPT + b"\r\n",
     101),
    (b"Upgrade: h2c\r\nSec-WebSocket-Accept: " + WS_ACCEPT + b"\r\n", 502),
    (b"Upgrade: foo\r\n", 502),
    (b"Sec-WebSocket-Accept: " + WS_ACCEPT + b"\r\n", 502),
    (b"Upgrade: websocket\r\n", 502),
    (b"Upgrade: websocket\r\nSec-WebSocket-Accept: "
     b"AAAAAAAAAAAAAAAAAAAAAAAAAAA=\r\n", 502),
])
def test_101_is_checked_against_the_requested_upgrade(
        strait_factory, upstream_factory, answer, status):
    """Issue 28: a 101 naming another protocol than the one requested was
    passed to the client. The 101's Upgrade must name the requested
    protocol and, for WebSocket, Sec-WebSocket-Accept must be
    base64(SHA-1(key + GUID)); else the client gets a 502."""
    up = switching_upstream(upstream_factory, lambda head: answer)
    st, port = start(strait_factory, [up.addr])
    with connect(port) as c:
        c.sendall(b"GET /ws HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\n"
                  b"Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\n"
                  b"Sec-WebSocket-Key: " + WS_KEY + b"\r\n\r\n")
        r = read_response(c.makefile("rb", buffering=0))
        assert r.status == status
        if status == 101:
            c.sendall(b"\x81\x02hi")
            c.settimeout(10)
            assert recv_exact(c, 4) == b"\x81\x02hi"
