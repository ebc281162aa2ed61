"""VirtualService traffic mirroring, retries of requests with bodies and
retries.perTryTimeout, through a Gateway listener on loopback.

The upstreams are httpd.HttpUpstream: each records what it received (body
length and SHA-256 included) and can fail or stall the first requests for
a path (fail=N, failmode=close, stall=N)."""
import http.client
import socket
import threading

from conftest import free_port, http_gateway, wait_for
from httpd import MIB, HttpUpstream, pattern, sha256
from test_gateway import GATEWAY_AND_UP, get, request
from test_grpc import grpc_gateway

import pytest


@pytest.fixture
def ups():
    made = []

    def make():
        u = HttpUpstream()
        made.append(u)
        return u

    yield make
    for u in made:
        u.stop()


def service_entry(name, port):
    return f"""---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: {name}, namespace: default}}
spec:
  hosts: [{name}.example.com]
  resolution: STATIC
  ports: [{{number: {port}, name: http, protocol: HTTP}}]
  endpoints: [{{address: 127.0.0.1}}]
"""


def vs_text(http_rules):
    return f"""---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: vs, namespace: default}}
spec:
  hosts: ["*"]
  gateways: [gw]
  http:
{http_rules}"""


def start(strait_factory, tmp_path, up_port, http_rules, extra="", **kw):
    """strait with a Gateway, up.example.com on up_port, the resources in
    extra and a VirtualService whose http: list is http_rules."""
    conf = tmp_path / "conf.d"
    conf.mkdir()
    port = free_port()
    (conf / "r.yaml").write_text(
        GATEWAY_AND_UP.format(port=port, up_port=up_port).rstrip("-\n") + "\n"
        + extra + vs_text(http_rules))
    st = strait_factory(extra=f"config: {{dir: \"{conf}\", debounce: 50ms}}\n",
                        **kw).start()
    return st, port


def total(stats, suffix):
    return sum(v for k, v in stats.items() if k.endswith(suffix))


def post(port, path, body, chunked=False, headers=None):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    h = dict(headers or {})
    if chunked:
        # An iterable body with encode_chunked: Transfer-Encoding: chunked.
        step = 40000
        parts = (body[i:i + step] for i in range(0, len(body), step))
        c.request("POST", path, body=parts, headers=h, encode_chunked=True)
    else:
        c.request("POST", path, body=body, headers=h)
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, data


def for_path(up, path):
    return [r for r in up.requests if r["path"] == path]


RETRY = """  - retries: {{attempts: {attempts}, retryOn: {on}{extra}}}
{timeout}    route:
    - destination: {{host: up.example.com}}
"""


def retry_rules(attempts=2, on="5xx", per_try=None, timeout=None):
    return RETRY.format(attempts=attempts, on=on,
                        extra=f", perTryTimeout: {per_try}" if per_try else "",
                        timeout=f"    timeout: {timeout}\n" if timeout else "")


# -- retries of requests with bodies ---------------------------------------

@pytest.mark.parametrize("chunked", [False, True], ids=["length", "chunked"])
@pytest.mark.parametrize("mode", ["503", "close"])
def test_retry_replays_body(strait_factory, tmp_path, ups, chunked, mode):
    """A POST whose first attempt fails (a 503, or the upstream closing the
    connection after reading the body) is retried with the whole body: the
    upstream receives it twice, byte for byte, and the client sees 200."""
    up = ups()
    st, port = start(strait_factory, tmp_path, up.port, retry_rules())
    body = pattern(300 * 1024, seed=7)
    path = "/r?fail=1" + ("&failmode=close" if mode == "close" else "")
    status, data = post(port, path, body, chunked=chunked)
    assert status == 200, data
    got = for_path(up, path)
    assert len(got) == 2
    for r in got:
        assert (r["method"], r["body_len"], r["body_sha256"]) == \
            ("POST", len(body), sha256(body))
    wait_for(lambda: "retries=1" in st.log(), 10, "the retry in the log")
    stats = st.stats()
    assert total(stats, ".upstream_rq_retry") == 1
    assert total(stats, ".retry_or_shadow_abandoned") == 0


def test_retry_replays_body_across_endpoints(strait_factory, tmp_path, ups,
                                            upstream_factory):
    """With two endpoints, the retry goes to the other one, which gets the
    full body the client sent."""
    good = ups()
    seen = []

    def always_503(c):
        f = c.makefile("rb")
        while True:
            line = f.readline()
            if not line:
                return
            n = 0
            while True:
                h = f.readline()
                if h in (b"\r\n", b""):
                    break
                k, _, v = h.partition(b":")
                if k.strip().lower() == b"content-length":
                    n = int(v)
            seen.append((line.split(b" ")[1].decode(), sha256(f.read(n))))
            c.sendall(b"HTTP/1.1 503 Service Unavailable\r\n"
                      b"content-length: 4\r\n\r\nbusy")

    bad = upstream_factory(always_503)
    extra = f"""---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: two, namespace: default}}
spec:
  hosts: [two.example.com]
  resolution: STATIC
  ports: [{{number: 80, name: http, protocol: HTTP}}]
  endpoints:
  - {{address: 127.0.0.1, ports: {{http: {bad.port}}}}}
  - {{address: 127.0.0.1, ports: {{http: {good.port}}}}}
"""
    rules = retry_rules().replace("up.example.com", "two.example.com")
    st, port = start(strait_factory, tmp_path, bad.port, rules, extra)
    n = 6
    for i in range(n):
        body = pattern(100 * 1024 + i, seed=i)
        path = f"/two/{i}"
        status, data = post(port, path, body)
        assert status == 200, data
        ok = for_path(good, path)
        assert len(ok) == 1 and ok[0]["body_sha256"] == sha256(body)
    # Round robin starts a share of first attempts on the bad endpoint;
    # each got the whole body too and was retried on the good one.
    assert len(seen) >= 1
    assert all(h == sha256(pattern(100 * 1024 + int(p.split("/")[2]),
                                   seed=int(p.split("/")[2])))
               for p, h in seen)
    assert total(st.stats(), ".upstream_rq_retry") == len(seen)


def test_body_over_retry_buffer_is_not_retried(strait_factory, tmp_path, ups):
    """A body past the 1 MiB retry buffer is sent normally, but a failed
    attempt is not retried: the client gets the upstream's 503 and the
    abandoned retry is counted."""
    up = ups()
    st, port = start(strait_factory, tmp_path, up.port, retry_rules())
    for chunked in (False, True):
        body = pattern(MIB + 300 * 1024, seed=3)
        path = f"/big?fail=1&c={int(chunked)}"
        status, data = post(port, path, body, chunked=chunked)
        assert (status, data) == (503, b"busy")
        got = for_path(up, path)
        assert len(got) == 1 and got[0]["body_sha256"] == sha256(body)
    stats = st.stats()
    assert total(stats, ".retry_or_shadow_abandoned") == 2
    assert total(stats, ".upstream_rq_retry") == 0
    # A body under the limit on the same route is still retried.
    body = pattern(MIB - 1, seed=4)
    assert post(port, "/small?fail=1", body)[0] == 200
    assert [r["body_sha256"] for r in for_path(up, "/small?fail=1")] == \
        [sha256(body)] * 2


def test_retry_without_retries_configured_sends_body_once(strait_factory,
                                                          tmp_path, ups):
    """attempts: 0 keeps no body and retries nothing."""
    up = ups()
    st, port = start(strait_factory, tmp_path, up.port,
                     retry_rules(attempts=0))
    status, data = post(port, "/once?fail=1", b"x" * 1000)
    assert (status, data) == (503, b"busy")
    assert len(for_path(up, "/once?fail=1")) == 1


# -- perTryTimeout ----------------------------------------------------------

def test_per_try_timeout_retries_a_stalled_attempt(strait_factory, tmp_path,
                                                   ups):
    """The first attempt stalls past perTryTimeout: it is abandoned (its
    connection closed, not reused) and the retry answers, body and all."""
    up = ups()
    st, port = start(strait_factory, tmp_path, up.port,
                     retry_rules(per_try="200ms", timeout="20s"))
    body = pattern(50 * 1024, seed=9)
    status, data = post(port, "/slow?stall=1", body)
    assert status == 200, data
    got = for_path(up, "/slow?stall=1")
    assert [r["body_sha256"] for r in got] == [sha256(body)] * 2
    # The stalled attempt's connection was closed by strait.
    wait_for(lambda: up.stalls_ended == 1, 10, "the stalled connection closed")
    assert up.conns == 2
    stats = st.stats()
    assert total(stats, ".upstream_rq_per_try_timeout") == 1
    assert total(stats, ".upstream_rq_retry") == 1
    wait_for(lambda: 'path="/slow?stall=1"' in st.log(), 10, "the log line")
    line = [l for l in st.log().splitlines() if 'path="/slow?stall=1"' in l][0]
    assert "status=200" in line and "retries=1" in line and "flags=-" in line


def test_per_try_timeout_spent_is_504_ut_urx(strait_factory, tmp_path, ups):
    """Every attempt stalls: after the last per-try timeout the client gets
    504 with flags UT and URX."""
    up = ups()
    st, port = start(strait_factory, tmp_path, up.port,
                     retry_rules(attempts=1, per_try="150ms", timeout="20s"))
    status, _, body = get(port, "/dead?stall=9")
    assert (status, body) == (504, b"upstream request timeout\n")
    assert len(for_path(up, "/dead?stall=9")) == 2
    wait_for(lambda: up.stalls_ended == 2, 10, "both stalled connections closed")
    assert total(st.stats(), ".upstream_rq_per_try_timeout") == 2
    wait_for(lambda: "flags=UT,URX" in st.log(), 10, "the UT,URX log line")


def test_per_try_timeout_not_retried_without_matching_retry_on(
        strait_factory, tmp_path, ups):
    """connect-failure does not cover a timeout (Envoy retries per-try
    timeouts under 5xx, gateway-error and reset): 504 UT, one attempt."""
    up = ups()
    st, port = start(strait_factory, tmp_path, up.port,
                     retry_rules(attempts=2, on="connect-failure",
                                 per_try="150ms", timeout="20s"))
    status, _, _ = get(port, "/once-slow?stall=9")
    assert status == 504
    assert len(for_path(up, "/once-slow?stall=9")) == 1
    wait_for(lambda: "flags=UT retries=0" in st.log(), 10, "the UT log line")


def test_route_timeout_bounds_all_attempts(strait_factory, tmp_path, ups):
    """The route timeout runs across attempts: with a per-try timeout
    longer than it, the route timeout answers 504 UT and no per-try
    timeout happens."""
    up = ups()
    st, port = start(strait_factory, tmp_path, up.port,
                     retry_rules(attempts=3, per_try="30s", timeout="300ms"))
    status, _, body = get(port, "/bounded?stall=9")
    assert (status, body) == (504, b"upstream request timeout\n")
    assert len(for_path(up, "/bounded?stall=9")) == 1
    stats = st.stats()
    assert total(stats, ".upstream_rq_per_try_timeout") == 0
    assert total(stats, ".upstream_rq_timeout") == 1


# -- mirroring --------------------------------------------------------------

def mirror_rules(mirror_port_name="shadow", pct=None, deprecated=None,
                 timeout=None):
    s = f"""  - route:
    - destination: {{host: up.example.com}}
    mirror: {{host: {mirror_port_name}.example.com}}
"""
    if pct is not None:
        s += f"    mirrorPercentage: {{value: {pct}}}\n"
    if deprecated is not None:
        s += f"    mirrorPercent: {deprecated}\n"
    if timeout is not None:
        s += f"    timeout: {timeout}\n"
    return s


def header(rec, name):
    for k, v in rec["headers"]:
        if k.lower() == name:
            return v
    return None


@pytest.mark.parametrize("chunked", [False, True], ids=["length", "chunked"])
def test_mirror_copies_request_and_body(strait_factory, tmp_path, ups, chunked):
    """Every request (mirror without a percentage) is copied to the mirror
    with its body; the copy's Host has the -shadow suffix."""
    up, shadow = ups(), ups()
    st, port = start(strait_factory, tmp_path, up.port, mirror_rules(),
                     service_entry("shadow", shadow.port))
    body = pattern(200 * 1024, seed=5)
    status, data = post(port, "/m/1?x=1", body, chunked=chunked,
                        headers={"Host": f"app.test:{port}", "x-k": "v"})
    assert status == 200
    wait_for(lambda: len(shadow.requests) == 1, 10, "the mirrored copy")
    orig, copy = up.requests[0], shadow.requests[0]
    assert header(orig, "host") == f"app.test:{port}"
    assert header(copy, "host") == f"app.test-shadow:{port}"
    assert (copy["method"], copy["path"]) == ("POST", "/m/1?x=1")
    assert copy["body_len"] == len(body)
    assert copy["body_sha256"] == orig["body_sha256"] == sha256(body)
    assert header(copy, "x-k") == "v"
    status, _, _ = get(port, "/m/get", {"Host": "plain.test"})
    assert status == 200
    wait_for(lambda: len(shadow.requests) == 2, 10, "the second copy")
    assert header(shadow.requests[1], "host") == "plain.test-shadow"
    wait_for(lambda: total(st.stats(), ".http.mirror_sent") == 2, 10,
             "mirror_sent")
    # A request is counted when its stream ends, which may be a moment
    # after the client has read the response.
    wait_for(lambda: total(st.stats(), ".http.rq_total") >= 2, 10,
             "both requests to be counted")
    stats = st.stats()
    assert total(stats, ".http.mirror_failed") == 0
    assert total(stats, ".http.mirror_skipped") == 0
    # Copies are not requests of the listener.
    assert total(stats, ".http.rq_total") == 2
    prom = st.get("/stats/prometheus")[1]
    assert "strait_http_mirror_sent_total{" in prom
    assert "strait_http_mirror_skipped_total{" in prom


def test_mirror_failure_and_slowness_do_not_touch_the_original(
        strait_factory, tmp_path, ups, upstream_factory):
    """A mirror that holds its request does not delay the original's answer,
    and the client's connection can close while the copy is in flight; a
    mirror that refuses connections does not change the answer either."""
    up = ups()
    arrived = threading.Event()
    release = threading.Event()

    def held(c):
        buf = b""
        while b"\r\n\r\n" not in buf:
            d = c.recv(65536)
            if not d:
                return
            buf += d
        arrived.set()
        release.wait(20)
        c.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")

    shadow = upstream_factory(held)
    dead_port = free_port()  # nothing listens there
    rules = f"""  - match: [{{uri: {{prefix: /dead}}}}]
    route:
    - destination: {{host: up.example.com}}
    mirror: {{host: dead.example.com}}
{mirror_rules()}"""
    st, port = start(strait_factory, tmp_path, up.port, rules,
                     service_entry("shadow", shadow.port)
                     + service_entry("dead", dead_port))
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        c.request("POST", "/held", body=b"payload")
        r = c.getresponse()
        assert (r.status, r.read()[:1]) == (200, b"{")
        # The copy is held at the mirror while the original is answered.
        assert arrived.wait(10), "the copy reached the mirror"
        c.close()
        stats_key = ".downstream_cx_active"
        wait_for(lambda: total({k: v for k, v in st.stats().items()
                                if k.startswith("listener.")}, stats_key) == 0,
                 10, "the client's connection to close")
        assert total(st.stats(), ".http.mirror_sent") == 1
    finally:
        release.set()
    for i in range(3):
        status, _, _ = get(port, f"/dead/{i}")
        assert status == 200
    wait_for(lambda: total(st.stats(), ".http.mirror_failed") == 3, 10,
             "three failed copies")
    assert total(st.stats(), ".http.rq_5xx") == 0
    assert len(for_path(up, "/held")) == 1


def test_mirror_body_over_limit_is_skipped(strait_factory, tmp_path, ups):
    """A body past the 1 MiB buffer is not mirrored; the original gets it
    whole."""
    up, shadow = ups(), ups()
    st, port = start(strait_factory, tmp_path, up.port, mirror_rules(),
                     service_entry("shadow", shadow.port))
    for chunked in (False, True):
        body = pattern(MIB + 4096, seed=11)
        status, _ = post(port, f"/huge/{int(chunked)}", body, chunked=chunked)
        assert status == 200
        assert for_path(up, f"/huge/{int(chunked)}")[0]["body_sha256"] == \
            sha256(body)
    # A small one after them is mirrored: the mirror works, it skipped.
    post(port, "/small", b"tiny")
    wait_for(lambda: len(shadow.requests) == 1, 10, "the small copy")
    assert shadow.requests[0]["path"] == "/small"
    stats = st.stats()
    assert total(stats, ".http.mirror_skipped") == 2
    assert total(stats, ".http.mirror_sent") == 1


def mirrored_share(strait_factory, tmp_path, ups, n, **kw):
    up, shadow = ups(), ups()
    st, port = start(strait_factory, tmp_path, up.port, mirror_rules(**kw),
                     service_entry("shadow", shadow.port))
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    for i in range(n):
        c.request("GET", f"/p/{i}")
        r = c.getresponse()
        r.read()
        assert r.status == 200
    c.close()
    sent = total(st.stats(), ".http.mirror_sent")
    wait_for(lambda: len(shadow.requests) == sent, 10, "every copy to arrive")
    assert total(st.stats(), ".http.mirror_skipped") == 0
    return sent


def test_mirror_percentage(strait_factory, tmp_path, ups):
    """mirrorPercentage 25: the share of mirrored requests is within 6
    standard deviations of 25%."""
    n, p = 800, 0.25
    sent = mirrored_share(strait_factory, tmp_path, ups, n, pct=25)
    sd = (p * (1 - p) / n) ** 0.5
    assert abs(sent / n - p) < 6 * sd, sent


def test_mirror_percent_deprecated(strait_factory, tmp_path, ups):
    """The deprecated integer mirrorPercent still applies (60%)."""
    n, p = 600, 0.6
    sent = mirrored_share(strait_factory, tmp_path, ups, n, deprecated=60)
    sd = (p * (1 - p) / n) ** 0.5
    assert abs(sent / n - p) < 6 * sd, sent


def test_mirror_in_flight_at_shutdown_exits_clean(strait_factory, tmp_path,
                                                   ups, upstream_factory):
    """strait stops cleanly (exit 0, no sanitizer report) with a copy still
    held by the mirror."""
    up = ups()
    arrived = threading.Event()
    done = threading.Event()

    def held(c):
        while True:
            try:
                d = c.recv(65536)
            except OSError:
                break
            if not d:
                break
            arrived.set()
        done.set()

    shadow = upstream_factory(held)
    st, port = start(strait_factory, tmp_path, up.port, mirror_rules(),
                     service_entry("shadow", shadow.port))
    assert post(port, "/bye", b"x" * 100)[0] == 200
    assert arrived.wait(10)
    assert st.stop() == 0
    st.assert_clean_log()
    # strait closed the mirror's connection on its way out.
    assert done.wait(10)


# -- HTTP/2 and gRPC -------------------------------------------------------

def test_h2_client_body_retry(strait_factory, tmp_path, ups):
    """An HTTP/2 client's POST (h2c, prior knowledge) whose first attempt
    fails is replayed whole to the HTTP/1 upstream."""
    import subprocess
    up = ups()
    st, port = start(strait_factory, tmp_path, up.port, retry_rules())
    body = pattern(400 * 1024, seed=21)
    f = tmp_path / "body.bin"
    f.write_bytes(body)
    p = subprocess.run(["curl", "-sS", "--http2-prior-knowledge", "--max-time",
                        "30", "-o", "/dev/null", "-w", "%{http_code} %{http_version}",
                        "--data-binary", f"@{f}",
                        f"http://127.0.0.1:{port}/h2?fail=1"],
                       capture_output=True, timeout=60)
    assert p.stdout.decode() == "200 2", p.stderr
    got = for_path(up, "/h2?fail=1")
    assert [r["body_sha256"] for r in got] == [sha256(body)] * 2


@pytest.fixture
def flaky_grpc():
    """A gRPC server whose method t.S/Hash answers the SHA-256 of the
    request; the first call with a given request fails as the request's
    first byte asks: 'u' UNAVAILABLE, 's' stalls until cancelled."""
    grpc = pytest.importorskip("grpc")
    from concurrent import futures
    calls = []
    lock = threading.Lock()
    cancelled = threading.Event()

    def hash_(req, ctx):
        with lock:
            calls.append(sha256(req))
            first = calls.count(sha256(req)) == 1
        if first and req[:1] == b"u":
            ctx.abort(grpc.StatusCode.UNAVAILABLE, "try again")
        if first and req[:1] == b"s":
            ctx.add_callback(cancelled.set)
            cancelled.wait(20)
            return b""
        return sha256(req).encode()

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
        "t.S", {"Hash": grpc.unary_unary_rpc_method_handler(hash_)}),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield grpc, port, calls, cancelled
    server.stop(0).wait(5)


def test_grpc_unavailable_is_retried_with_its_message(strait_factory, tmp_path,
                                                      flaky_grpc):
    """gRPC over HTTP/2 both sides: a trailers-only UNAVAILABLE answer is
    retried (retryOn unavailable) and the HTTP/2 upstream gets the whole
    message again."""
    grpc, bport, calls, _ = flaky_grpc
    st, port = grpc_gateway(strait_factory, tmp_path, bport,
                            "retries: {attempts: 2, retryOn: unavailable}")
    msg = b"u" + pattern(200 * 1024, seed=31)
    with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
        rpc = ch.unary_unary("/t.S/Hash")
        assert rpc(msg, timeout=20) == sha256(msg).encode()
    assert calls == [sha256(msg)] * 2
    assert total(st.stats(), ".upstream_rq_retry") == 1


def test_grpc_per_try_timeout_resets_and_retries(strait_factory, tmp_path,
                                                 flaky_grpc):
    """An HTTP/2 attempt past perTryTimeout is reset (the server sees the
    cancellation) and retried with its message."""
    grpc, bport, calls, cancelled = flaky_grpc
    st, port = grpc_gateway(
        strait_factory, tmp_path, bport,
        "retries: {attempts: 2, retryOn: reset, perTryTimeout: 200ms}\n"
        "    timeout: 20s")
    msg = b"s" + pattern(64 * 1024, seed=32)
    with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
        rpc = ch.unary_unary("/t.S/Hash")
        assert rpc(msg, timeout=20) == sha256(msg).encode()
    assert cancelled.wait(10), "the stalled attempt was cancelled"
    assert calls == [sha256(msg)] * 2
    assert total(st.stats(), ".upstream_rq_per_try_timeout") == 1


def test_mirror_in_flight_keeps_its_routes_across_a_change(
        strait_factory, tmp_path, ups, upstream_factory):
    """A copy held at the mirror while the routes change (the mirror's
    cluster leaves them) finishes on the routes it started with: its pool
    stays until it ends, and strait exits clean afterwards."""
    up, other = ups(), ups()
    arrived = threading.Event()
    release = threading.Event()
    answered = []

    def held(c):
        buf = b""
        while b"\r\n\r\n" not in buf:
            d = c.recv(65536)
            if not d:
                return
            buf += d
        arrived.set()
        release.wait(20)
        c.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
        answered.append(1)
        try:
            c.recv(1)
        except OSError:
            pass

    shadow = upstream_factory(held)
    extra = service_entry("shadow", shadow.port) + service_entry("other",
                                                                 other.port)
    st, port = start(strait_factory, tmp_path, up.port, mirror_rules(), extra,
                     workers=1)
    assert post(port, "/before", b"body")[0] == 200
    assert arrived.wait(10), "the copy reached the mirror"
    conf = tmp_path / "conf.d" / "r.yaml"
    text = conf.read_text()
    head = text[:text.index("---\napiVersion: networking.istio.io/v1\n"
                            "kind: VirtualService")]
    head = head.replace(service_entry("shadow", shadow.port), "")
    tmp = conf.with_suffix(".tmp")
    tmp.write_text(head + vs_text("""  - route:
    - destination: {host: other.example.com}
"""))
    tmp.rename(conf)
    wait_for(lambda: get(port, "/after")[0] == 200 and
             for_path(other, "/after"), 15, "the new routes")
    # Copies of requests the old routes still served are held too.
    sent = total(st.stats(), ".http.mirror_sent")
    assert sent >= 1
    release.set()
    wait_for(lambda: len(answered) == sent, 10, "every copy answered")
    assert total(st.stats(), ".http.mirror_sent") == sent
    assert total(st.stats(), ".http.mirror_failed") == 0
    assert st.stop() == 0
    st.assert_clean_log()


def test_client_gone_mid_body_leaves_no_copy(strait_factory, tmp_path, ups):
    """A client that sends half its body and goes away: the original is
    abandoned, no copy is sent (counted skipped), and the next request is
    mirrored as usual."""
    up, shadow = ups(), ups()
    st, port = start(strait_factory, tmp_path, up.port, mirror_rules(),
                     service_entry("shadow", shadow.port))
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(b"POST /half HTTP/1.1\r\nhost: a\r\ncontent-length: 100000\r\n\r\n"
              + b"x" * 30000)
    wait_for(lambda: total(st.stats(), ".http.rq_total") == 0 and
             total({k: v for k, v in st.stats().items()
                    if k.startswith("listener.")}, ".downstream_cx_active") == 1,
             10, "the connection to be up")
    s.close()
    wait_for(lambda: total(st.stats(), ".http.mirror_skipped") == 1, 10,
             "the skipped copy")
    assert post(port, "/whole", b"y" * 1000)[0] == 200
    wait_for(lambda: len(shadow.requests) == 1, 10, "the next copy")
    assert shadow.requests[0]["path"] == "/whole"
    assert total(st.stats(), ".http.mirror_sent") == 1


def probe_per_try(port, up, name):
    """A request whose first attempt stalls past the per-try timeout and is
    retried: when it is answered, a per-try deadline armed before it
    started (same length, same single worker) has passed too."""
    status, _, _ = get(port, f"/probe-{name}?stall=1")
    assert status == 200
    assert len(for_path(up, f"/probe-{name}?stall=1")) == 2


def test_per_try_timeout_starts_when_the_request_is_whole(strait_factory,
                                                         tmp_path, ups):
    """A slow upload is not the upstream's fault: the attempt's deadline
    starts once the whole body has arrived (Envoy's rule)."""
    up = ups()
    st, port = start(strait_factory, tmp_path, up.port,
                     retry_rules(attempts=1, per_try="200ms", timeout="30s"),
                     workers=1)
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    body = b"0123456789"
    s.sendall(b"POST /upload HTTP/1.1\r\nhost: a\r\ncontent-length: 10\r\n\r\n"
              + body[:5])
    # The attempt is under way: the upstream has its connection.
    wait_for(lambda: up.conns == 1, 10, "the attempt to connect")
    probe_per_try(port, up, "a")
    # Only the probe's attempt timed out; the upload's deadline waits.
    assert total(st.stats(), ".upstream_rq_per_try_timeout") == 1
    s.sendall(body[5:])
    f = s.makefile("rb")
    line = f.readline()
    assert line.startswith(b"HTTP/1.1 200"), line
    s.close()
    got = for_path(up, "/upload")
    assert len(got) == 1 and got[0]["body_sha256"] == sha256(body)
    assert total(st.stats(), ".upstream_rq_per_try_timeout") == 1


def test_per_try_timeout_ignored_once_the_answer_started(
        strait_factory, tmp_path, ups, upstream_factory):
    """Once the response head is passed on, the per-try deadline no longer
    applies (Envoy): a slow body finishes under the route timeout."""
    up = ups()
    release = threading.Event()

    def slow_body(c):
        buf = b""
        while b"\r\n\r\n" not in buf:
            d = c.recv(65536)
            if not d:
                return
            buf += d
        c.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\n01234")
        release.wait(20)
        c.sendall(b"56789")

    slow = upstream_factory(slow_body)
    extra = service_entry("slow", slow.port)
    rules = f"""  - match: [{{uri: {{prefix: /slow-body}}}}]
    retries: {{attempts: 1, retryOn: 5xx, perTryTimeout: 200ms}}
    timeout: 30s
    route:
    - destination: {{host: slow.example.com}}
{retry_rules(attempts=1, per_try="200ms", timeout="30s")}"""
    st, port = start(strait_factory, tmp_path, up.port, rules, extra,
                     workers=1)
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request("GET", "/slow-body")
    r = c.getresponse()
    assert r.status == 200
    probe_per_try(port, up, "b")
    release.set()
    assert r.read() == b"0123456789"
    c.close()
    assert total(st.stats(), ".upstream_rq_per_try_timeout") == 1
    assert slow.conns == 1


def test_retries_spent_on_status_pass_it_on_with_urx(strait_factory, tmp_path,
                                                     ups):
    """Every attempt answers 503: the last 503 is passed on, with URX."""
    up = ups()
    st, port = start(strait_factory, tmp_path, up.port, retry_rules(attempts=2))
    status, data = post(port, "/spent?fail=9", b"abc")
    assert (status, data) == (503, b"busy")
    assert [r["body"] for r in for_path(up, "/spent?fail=9")] == ["abc"] * 3
    wait_for(lambda: 'path="/spent?fail=9"' in st.log(), 10, "the log line")
    line = [l for l in st.log().splitlines() if 'path="/spent?fail=9"' in l][0]
    assert "flags=URX" in line and "retries=2" in line


def test_grpc_request_mirrored_to_an_http2_cluster(strait_factory, tmp_path,
                                                    flaky_grpc):
    """A gRPC call is answered by its backend while an HTTP/2 copy, message
    and all, reaches the mirror's gRPC server."""
    grpc, bport, calls, _ = flaky_grpc
    from concurrent import futures
    seen = []

    def record(req, ctx):
        seen.append(sha256(req))
        return b"mirror"

    mirror = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    mirror.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
        "t.S", {"Hash": grpc.unary_unary_rpc_method_handler(record)}),))
    mport = mirror.add_insecure_port("127.0.0.1:0")
    mirror.start()
    try:
        st, port = grpc_gateway(strait_factory, tmp_path, bport,
                                "mirror: {host: gm.example.com}", f"""---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: gm, namespace: default}}
spec:
  hosts: [gm.example.com]
  resolution: STATIC
  ports: [{{number: {mport}, name: grpc, protocol: GRPC}}]
  endpoints: [{{address: 127.0.0.1}}]
""")
        msg = b"ok" + pattern(100 * 1024, seed=41)
        with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
            rpc = ch.unary_unary("/t.S/Hash")
            assert rpc(msg, timeout=20) == sha256(msg).encode()
        wait_for(lambda: seen, 10, "the mirrored call")
        assert calls == [sha256(msg)]
        assert seen == [sha256(msg)]
        assert total(st.stats(), ".http.mirror_failed") == 0
    finally:
        mirror.stop(0).wait(5)
