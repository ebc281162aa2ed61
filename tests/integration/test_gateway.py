"""Istio resources routing real traffic: a Gateway on loopback, a
VirtualService with matches, weights, rewrite, redirect, direct response
and faults, DestinationRule subsets over WorkloadEntries, hot reload."""
import http.client
import http.server
import json
import os
import socket
import threading

import pytest

from conftest import free_port, http_gateway, read_head, responder, wait_for


class Versioned(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    version = "?"

    def do_GET(self):
        body = json.dumps({"version": self.version, "path": self.path,
                           "host": self.headers.get("host"),
                           "x-added": self.headers.get("x-added")}).encode()
        # One write per response: a head and a body in two small writes
        # would wait on Nagle and the proxy's delayed ACK (40 ms each).
        self.wfile.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                         b"content-length: %d\r\n\r\n%s" % (len(body), body))

    def log_message(self, *a):
        pass


@pytest.fixture
def versions():
    servers, ports = [], {}
    for v in ("v1", "v2", "v3"):
        cls = type(f"H{v}", (Versioned,), {"version": v})
        srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), cls)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        servers.append(srv)
        ports[v] = srv.server_address[1]
    yield ports
    for srv in servers:
        srv.shutdown()
        srv.server_close()


def resources(gw_port, ports, weights=(90, 0, 10)):
    wes = "".join(f"""---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {{name: reviews-{v}, namespace: default}}
spec:
  address: 127.0.0.1
  ports: {{http: {p}}}
  labels: {{app: reviews, version: {v}}}
""" for v, p in ports.items())
    routes = "".join(f"""      - destination: {{host: reviews, subset: {v}}}
        weight: {w}
""" for v, w in zip(("v1", "v2", "v3"), weights) if w)
    return f"""apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {{name: gw, namespace: default}}
spec:
  selector: {{istio: ingressgateway}}
  servers:
  - port: {{number: {gw_port}, name: http, protocol: HTTP}}
    bind: 127.0.0.1
    hosts: ["*"]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: reviews, namespace: default}}
spec:
  hosts: [reviews.default.svc.cluster.local]
  location: MESH_INTERNAL
  resolution: STATIC
  ports: [{{number: 9080, name: http, protocol: HTTP}}]
  workloadSelector: {{labels: {{app: reviews}}}}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {{name: reviews, namespace: default}}
spec:
  host: reviews
  subsets:
  - {{name: v1, labels: {{version: v1}}}}
  - {{name: v2, labels: {{version: v2}}}}
  - {{name: v3, labels: {{version: v3}}}}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: front, namespace: default}}
spec:
  hosts: ["*"]
  gateways: [gw]
  http:
  - match: [{{uri: {{exact: /health}}}}]
    directResponse: {{status: 200, body: {{string: "ok"}}}}
  - match: [{{uri: {{prefix: /old}}}}]
    redirect: {{uri: /new}}
  - match: [{{uri: {{exact: /cors-direct}}}}]
    corsPolicy: {{allowOrigins: [{{exact: "https://app.example.com"}}]}}
    directResponse: {{status: 200, body: {{string: "direct"}}}}
  - match: [{{uri: {{prefix: /cors}}}}]
    corsPolicy:
      allowOrigins: [{{exact: "https://app.example.com"}}, {{regex: "https://.*[.]trusted[.]io"}}]
      allowMethods: [GET, POST]
      allowHeaders: [x-token, content-type]
      exposeHeaders: [x-version]
      maxAge: 24h
      allowCredentials: true
    route:
    - destination: {{host: reviews, subset: v1}}
  - match: [{{headers: {{x-fault: {{exact: abort}}}}}}]
    fault: {{abort: {{httpStatus: 418, percentage: {{value: 100}}}}}}
    route:
    - destination: {{host: reviews, subset: v1}}
  - match:
    - headers: {{end-user: {{exact: jason}}}}
      uri: {{prefix: /reviews}}
    rewrite: {{uri: /}}
    headers: {{request: {{set: {{x-added: "yes"}}}}}}
    route:
    - destination: {{host: reviews, subset: v2}}
  - match: [{{uri: {{prefix: /reviews}}}}]
    rewrite: {{uri: /}}
    route:
{routes}{wes}"""


def start(strait_factory, tmp_path, versions, **kw):
    conf = tmp_path / "conf.d"
    conf.mkdir()
    gw_port = free_port()
    (conf / "bookinfo.yaml").write_text(resources(gw_port, versions, **kw))
    st = strait_factory(extra=(f"node: {{labels: {{istio: ingressgateway}}}}\n"
                               f"config: {{dir: \"{conf}\", debounce: 50ms}}\n"))
    return st.start(), gw_port, conf


def request(port, method, path, headers, timeout=10):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    c.request(method, path, headers=headers)
    r = c.getresponse()
    body = r.read()
    c.close()
    return r.status, {k.lower(): v for k, v in r.getheaders()}, body


def get(port, path, headers=None, timeout=10):
    return request(port, "GET", path, headers or {}, timeout)


GATEWAY_AND_UP = """apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {{name: gw, namespace: default}}
spec:
  selector: {{}}
  servers:
  - port: {{number: {port}, name: http, protocol: HTTP}}
    bind: 127.0.0.1
    hosts: ["*"]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: up, namespace: default}}
spec:
  hosts: [up.example.com]
  resolution: STATIC
  ports: [{{number: {up_port}, name: http, protocol: HTTP}}]
  endpoints: [{{address: 127.0.0.1}}]
---
"""


def start_with_up(strait_factory, tmp_path, up_port, rest, **kw):
    """strait with a Gateway on a free port, the ServiceEntry
    up.example.com for up_port, and the resources in rest (kw: for
    strait_factory, such as workers)."""
    conf = tmp_path / "conf.d"
    conf.mkdir()
    port = free_port()
    (conf / "r.yaml").write_text(GATEWAY_AND_UP.format(port=port, up_port=up_port)
                                 + rest)
    st = strait_factory(extra=f"config: {{dir: \"{conf}\"}}\n", **kw).start()
    return st, port


def test_weights_match_and_rewrite(strait_factory, tmp_path, versions):
    st, port, _ = start(strait_factory, tmp_path, versions)
    counts = {"v1": 0, "v2": 0, "v3": 0}
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    n = 2000
    for _ in range(n):
        c.request("GET", "/reviews/1")
        r = c.getresponse()
        body = json.loads(r.read())
        assert r.status == 200
        assert body["path"] == "/1"  # prefix /reviews rewritten to /
        counts[body["version"]] += 1
    c.close()
    # 90/10 within 6 standard deviations of a binomial over n requests.
    sd = (0.9 * 0.1 / n) ** 0.5
    assert abs(counts["v1"] / n - 0.9) < 6 * sd, counts
    assert counts["v2"] == 0


def test_header_match_routes_jason_to_v2(strait_factory, tmp_path, versions):
    st, port, _ = start(strait_factory, tmp_path, versions)
    for _ in range(50):
        status, _, body = get(port, "/reviews/7", {"end-user": "jason"})
        b = json.loads(body)
        assert status == 200 and b["version"] == "v2" and b["x-added"] == "yes"


def test_direct_response_redirect_fault_and_no_route(strait_factory, tmp_path, versions):
    st, port, _ = start(strait_factory, tmp_path, versions)
    assert get(port, "/health")[::2] == (200, b"ok")
    status, hdrs, _ = get(port, "/old/page?q=1", {"host": "example.com"})
    assert status == 301
    assert hdrs["location"] == "http://example.com/new?q=1"
    assert get(port, "/reviews", {"x-fault": "abort"})[0] == 418
    assert get(port, "/elsewhere")[0] == 404
    # Each line is written when its stream ends, on whichever worker took
    # the connection: wait for both.
    wait_for(lambda: "flags=NR" in st.log() and "flags=FI" in st.log(), 10,
             "the 404's and the fault's log lines")
    assert "route=default/front" in st.log()


def test_cors_policy(strait_factory, tmp_path, versions):
    """corsPolicy as Envoy applies it: an allowed preflight is answered by
    the gateway, an allowed request gets the origin echoed and the exposed
    headers, a foreign origin gets no CORS headers at all."""
    st, port, _ = start(strait_factory, tmp_path, versions)
    pre = {"origin": "https://app.example.com",
           "access-control-request-method": "POST"}
    status, hdrs, body = request(port, "OPTIONS", "/cors", pre)
    assert (status, body) == (200, b"")
    assert hdrs["access-control-allow-origin"] == "https://app.example.com"
    assert hdrs["access-control-allow-methods"] == "GET,POST"
    assert hdrs["access-control-allow-headers"] == "x-token,content-type"
    assert hdrs["access-control-max-age"] == "86400"
    assert hdrs["access-control-allow-credentials"] == "true"
    assert "access-control-expose-headers" not in hdrs

    status, hdrs, body = request(port, "GET", "/cors",
                                 {"origin": "https://a.trusted.io"})
    assert status == 200 and json.loads(body)["version"] == "v1"
    assert hdrs["access-control-allow-origin"] == "https://a.trusted.io"
    assert hdrs["access-control-expose-headers"] == "x-version"
    assert "access-control-allow-methods" not in hdrs

    # A foreign origin: the preflight goes on to the upstream (which does
    # not implement OPTIONS) and nothing grants access.
    status, hdrs, _ = request(port, "OPTIONS", "/cors",
                              dict(pre, origin="https://evil.example.com"))
    assert status == 501
    assert not any(k.startswith("access-control-") for k in hdrs)
    status, hdrs, _ = request(port, "GET", "/cors",
                              {"origin": "https://evil.example.com"})
    assert status == 200
    assert not any(k.startswith("access-control-") for k in hdrs)
    # No Origin: not a CORS request.
    status, hdrs, _ = request(port, "GET", "/cors", {})
    assert status == 200 and "access-control-allow-origin" not in hdrs
    # The route's own answers carry the headers too, as Envoy's local replies.
    status, hdrs, body = request(port, "GET", "/cors-direct",
                                 {"origin": "https://app.example.com"})
    assert (status, body) == (200, b"direct")
    assert hdrs["access-control-allow-origin"] == "https://app.example.com"


def test_new_resources_take_effect_without_restart(strait_factory, tmp_path, versions):
    st, port, conf = start(strait_factory, tmp_path, versions)
    new = conf / ".tmp"
    new.write_text(resources(port, versions, weights=(0, 0, 100)))
    os.replace(new, conf / "bookinfo.yaml")

    def all_v3():
        try:
            return all(json.loads(get(port, "/reviews")[2])["version"] == "v3"
                       for _ in range(20))
        except (OSError, ValueError):
            return False
    wait_for(all_v3, 15, "the new weights")
    assert st.stats()["resources.reloads_ok"] >= 2


def test_unknown_subset_is_refused_at_start(strait_factory, tmp_path, versions):
    conf_text = resources(free_port(), versions).replace("subset: v2}", "subset: v9}")
    conf = tmp_path / "conf.d"
    conf.mkdir()
    gw_port = free_port()
    (conf / "b.yaml").write_text(conf_text.replace(
        conf_text.split("number: ")[1].split(",")[0], str(gw_port), 1))
    st = strait_factory(extra=(f"node: {{labels: {{istio: ingressgateway}}}}\n"
                               f"config: {{dir: \"{conf}\"}}\n"))
    # The analyzer refuses a subset that does not exist: strait does not start.
    st.start(wait=False)
    assert st.proc.wait(timeout=30) == 1
    assert "IST0101" in st.log()


def test_clusters_endpoint_lists_gateway_clusters(strait_factory, tmp_path, versions):
    st, port, _ = start(strait_factory, tmp_path, versions)
    assert get(port, "/reviews/1", {"end-user": "jason"})[0] == 200
    code, body, _ = st.get("/clusters")
    assert code == 200
    name = "reviews.default.svc.cluster.local|v2|0"
    assert f"{name}::127.0.0.1:{versions['v2']}::health_flags::healthy" in body
    assert f"{name}::rq_total::1" in body
    # The same counters reach /stats and /stats/prometheus.
    assert st.stats()[f"cluster.{name}.upstream_rq_total"] == 1
    assert f'strait_cluster_requests_total{{cluster="{name}"}} 1' in st.get("/stats/prometheus")[1]


def test_retries_on_5xx(strait_factory, tmp_path, upstream_factory):
    """A VirtualService's retries: the upstream fails twice, the third try
    succeeds; the client sees only the 200."""
    lock = threading.Lock()
    count = [0]

    def flaky(c):
        buf = b""
        while True:
            buf = read_head(c, buf)
            if buf is None:
                return
            buf = buf.split(b"\r\n\r\n", 1)[1]
            with lock:
                count[0] += 1
                n = count[0]
            if n % 3:
                c.sendall(b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 4\r\n\r\nbusy")
            else:
                c.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")

    up = upstream_factory(flaky)
    st, port = start_with_up(strait_factory, tmp_path, up.port, """apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: vs, namespace: default}
spec:
  hosts: ["*"]
  gateways: [gw]
  http:
  - retries: {attempts: 3, retryOn: 5xx}
    route:
    - destination: {host: up.example.com}
""")
    for _ in range(3):
        status, _, body = get(port, "/")
        assert (status, body) == (200, b"ok")
    wait_for(lambda: st.log().count("retries=2") == 3, 10, "three logged retries")
    assert count[0] == 9


def test_circuit_breaker_max_requests(strait_factory, tmp_path, upstream_factory):
    """DestinationRule http2MaxRequests caps the requests in flight to a
    cluster across workers: with two held by the upstream, a third is a
    503 with flag UO and a counter; the slots come back when they end."""
    arrived = threading.Semaphore(0)
    release = threading.Event()

    def held(c):
        buf = read_head(c)
        if buf is None:
            return
        arrived.release()
        release.wait(20)
        c.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok")

    up = upstream_factory(held)
    st, port = start_with_up(strait_factory, tmp_path, up.port, """apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: up, namespace: default}
spec:
  host: up.example.com
  trafficPolicy:
    connectionPool: {http: {http2MaxRequests: 2}}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: vs, namespace: default}
spec:
  hosts: ["*"]
  gateways: [gw]
  http:
  - retries: {attempts: 0}
    route:
    - destination: {host: up.example.com}
""")
    code, body, _ = st.get("/clusters")
    assert "::max_requests::2\n" in body
    results = []

    def client():
        results.append(get(port, "/held")[0])

    threads = [threading.Thread(target=client) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        for _ in range(2):
            assert arrived.acquire(timeout=10), "a held request reached the upstream"
        status, _, body = get(port, "/third")
        assert (status, body) == (503, b"upstream overflow\n")
    finally:
        release.set()
        for t in threads:
            t.join(20)
    assert results == [200, 200]
    assert get(port, "/after")[0] == 200
    wait_for(lambda: "flags=UO" in st.log(), 10, "the overflow's log line")
    stats = st.stats()
    assert sum(v for k, v in stats.items()
               if k.endswith(".upstream_rq_pending_overflow")) == 1
    # A request's slot is given back when its stream ends, which can be
    # just after its client has the answer.
    wait_for(lambda: "::rq_active::0\n" in st.get("/clusters")[1], 10,
             "the slots given back")
    code, body, _ = st.get("/clusters")
    assert "::rq_overflow::1\n" in body


def test_circuit_breaker_max_retries(strait_factory, tmp_path, upstream_factory):
    """DestinationRule maxRetries caps the retries outstanding to a cluster:
    while one request's retry is held by the upstream, another request's
    failure is not retried (the client sees the upstream's 503) and the
    refusal is counted; once the first ends, retries are allowed again."""
    lock = threading.Lock()
    seen = {}
    retry_arrived = threading.Event()
    release = threading.Event()

    def handler(c):
        buf = read_head(c)
        if buf is None:
            return
        path = buf.split(b" ", 2)[1].decode()
        with lock:
            seen[path] = n = seen.get(path, 0) + 1
        if path == "/a" and n == 2:
            retry_arrived.set()
            release.wait(20)
        ok = path in ("/a", "/c") and n == 2
        c.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok"
                  if ok else
                  b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 4\r\n"
                  b"connection: close\r\n\r\nbusy")

    up = upstream_factory(handler)
    st, port = start_with_up(strait_factory, tmp_path, up.port, """apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: up, namespace: default}
spec:
  host: up.example.com
  trafficPolicy:
    connectionPool: {http: {maxRetries: 1}}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: vs, namespace: default}
spec:
  hosts: ["*"]
  gateways: [gw]
  http:
  - retries: {attempts: 2, retryOn: 5xx}
    route:
    - destination: {host: up.example.com}
""")
    result = []
    t = threading.Thread(target=lambda: result.append(get(port, "/a")[::2]))
    t.start()
    try:
        assert retry_arrived.wait(10), "the first request's retry reached the upstream"
        assert get(port, "/b")[::2] == (503, b"busy")
    finally:
        release.set()
        t.join(20)
    assert result == [(200, b"ok")]
    assert seen["/b"] == 1
    assert get(port, "/c")[::2] == (200, b"ok")
    stats = st.stats()
    assert sum(v for k, v in stats.items()
               if k.endswith(".upstream_rq_retry_overflow")) == 1


def test_port_level_and_subset_policies(strait_factory, tmp_path, upstream_factory):
    """DestinationRule policies merge as Istio's MergeTrafficPolicy: the
    rule's, its portLevelSettings for the port, the subset's, the subset's
    portLevelSettings; each section replaced whole by a more specific one."""
    def ok(c):
        buf = read_head(c)
        if buf is None:
            return
        c.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok")

    up = upstream_factory(ok)
    conf = tmp_path / "conf.d"
    conf.mkdir()
    port = free_port()
    (conf / "pl.yaml").write_text(f"""{http_gateway(port)}apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: svc, namespace: default}}
spec:
  hosts: [svc.example.com]
  resolution: STATIC
  ports:
  - {{number: 8000, name: http-a, protocol: HTTP, targetPort: {up.port}}}
  - {{number: 9000, name: http-b, protocol: HTTP, targetPort: {up.port}}}
  endpoints: [{{address: 127.0.0.1, labels: {{version: v2}}}}]
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {{name: svc, namespace: default}}
spec:
  host: svc.example.com
  trafficPolicy:
    connectionPool: {{http: {{http2MaxRequests: 5, maxRetries: 4}}}}
    portLevelSettings:
    - port: {{number: 8000}}
      connectionPool: {{http: {{http2MaxRequests: 7}}}}
  subsets:
  - name: v2
    labels: {{version: v2}}
    trafficPolicy:
      portLevelSettings:
      - port: {{number: 9000}}
        connectionPool: {{http: {{maxRetries: 3}}}}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: vs, namespace: default}}
spec:
  hosts: ["*"]
  gateways: [gw]
  http:
  - match: [{{uri: {{prefix: /a}}}}]
    route: [{{destination: {{host: svc.example.com, port: {{number: 8000}}}}}}]
  - match: [{{uri: {{prefix: /b}}}}]
    route: [{{destination: {{host: svc.example.com, port: {{number: 9000}}}}}}]
  - match: [{{uri: {{prefix: /c}}}}]
    route: [{{destination: {{host: svc.example.com, subset: v2, port: {{number: 9000}}}}}}]
""")
    st = strait_factory(extra=f"config: {{dir: \"{conf}\"}}\n").start()
    code, body, _ = st.get("/clusters")
    assert code == 200
    facts = dict(line.rsplit("::", 1) for line in body.splitlines())
    host = "svc.example.com"
    # Port 8000: the port-level connectionPool replaces the rule's whole.
    assert facts[f"{host}||8000::max_requests"] == "7"
    assert facts[f"{host}||8000::max_retries"] == "4294967295"
    # Port 9000: the rule's own.
    assert facts[f"{host}||9000::max_requests"] == "5"
    assert facts[f"{host}||9000::max_retries"] == "4"
    # Subset v2 on 9000: the subset's port-level connectionPool wins whole.
    assert facts[f"{host}|v2|9000::max_requests"] == "4294967295"
    assert facts[f"{host}|v2|9000::max_retries"] == "3"
    for path in ("/a", "/b", "/c"):
        assert get(port, path)[0] == 200


def test_config_dump_shows_effective_resources_and_routes(strait_factory, tmp_path, versions):
    st, port, _ = start(strait_factory, tmp_path, versions)
    code, body, _ = st.get("/config_dump")
    assert code == 200
    dump = json.loads(body)
    res = {(r["kind"], r["name"]): r for r in dump["resources"]["resources"]}
    # Each resource as strait runs it: its spec with Istio's defaults.
    vs = res[("VirtualService", "front")]["spec"]
    assert vs["gateways"] == ["gw"]
    assert vs["http"][0]["directResponse"]["status"] == 200
    se = res[("ServiceEntry", "reviews")]["spec"]
    assert se["resolution"] == "STATIC"
    # The routes compiled from them, per Gateway listener.
    [lst] = dump["gatewayRoutes"]
    [vhost] = lst["routes"]["virtualHosts"]
    assert vhost["domain"] == "*"
    rules = vhost["rules"]
    assert rules[0]["match"] == [[{"what": "uri", "exact": "/health"}]]
    assert rules[0]["action"]["kind"] == "directResponse"
    jason = [r for r in rules if r["match"] and any(
        c.get("name") == "end-user" for c in r["match"][0])][0]
    [dest] = jason["action"]["destinations"]
    assert dest["cluster"] == "reviews.default.svc.cluster.local|v2|0"
    assert dest["subset"] == "v2"
    last = rules[-1]["action"]["destinations"]
    assert [d["weight"] for d in last] == [90, 10]


DELEGATE_AND_EXPORT = """apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: root, namespace: default}
spec:
  hosts: ["*"]
  gateways: [gw]
  http:
  - match: [{uri: {prefix: /shop}}]
    delegate: {name: shop, namespace: team}
  - match: [{uri: {prefix: /hidden-se}}]
    route: [{destination: {host: hidden.example.com}}]
  - match: [{uri: {prefix: /hidden-dr}}]
    route: [{destination: {host: up.example.com, subset: v1}}]
  - match: [{uri: {prefix: /visible-dr}}]
    route: [{destination: {host: vis.example.com, subset: v1}}]
  - directResponse: {status: 404, body: {string: "root fallback"}}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: shop, namespace: team}
spec:
  http:
  - match: [{uri: {prefix: /shop/cart}}]
    headers: {request: {set: {x-delegate: "cart"}}}
    route: [{destination: {host: up.example.com}}]
  - match: [{uri: {prefix: /elsewhere}}]
    route: [{destination: {host: up.example.com}}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: hidden, namespace: default}
spec:
  hosts: [hidden.example.com]
  exportTo: [somewhere-else]
  resolution: STATIC
  ports: [{number: UP, name: http, protocol: HTTP}]
  endpoints: [{address: 127.0.0.1}]
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: up, namespace: default}
spec:
  host: up.example.com
  exportTo: ["."]
  subsets: [{name: v1, labels: {}}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: vis, namespace: default}
spec:
  hosts: [vis.example.com]
  resolution: STATIC
  ports: [{number: UP, name: http, protocol: HTTP}]
  endpoints: [{address: 127.0.0.1}]
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: vis, namespace: default}
spec:
  host: vis.example.com
  exportTo: [istio-system]
  subsets: [{name: v1, labels: {}}]
"""


def test_delegate_and_export_to(strait_factory, tmp_path, upstream_factory):
    """A delegate VirtualService's rules answer within the root rule's
    match; ServiceEntries and DestinationRules not exported to the
    gateway's namespace (istio-system) do not apply to it."""
    seen = []

    def ok(c):
        buf = b""
        while True:
            buf = read_head(c, buf)
            if buf is None:
                return
            head, _, buf = buf.partition(b"\r\n\r\n")
            seen.append(head.decode().lower())
            c.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nup")
    up = upstream_factory(ok)
    st, port = start_with_up(strait_factory, tmp_path, up.port,
                             DELEGATE_AND_EXPORT.replace("UP", str(up.port)))
    assert get(port, "/shop/cart/1")[0] == 200
    assert "x-delegate: cart" in seen[-1]
    # The delegate cannot route outside its root rule's match.
    status, _, body = get(port, "/elsewhere")
    assert (status, body) == (404, b"root fallback")
    # A ServiceEntry exported elsewhere is unknown here: under the default
    # outboundTrafficPolicy (REGISTRY_ONLY) the host goes to
    # BlackHoleCluster, 502.
    assert get(port, "/hidden-se")[0] == 502
    # A DestinationRule exported only to its own namespace (default) does
    # not give this gateway (istio-system) its subset: 503 UH; exported to
    # istio-system, it does.
    assert get(port, "/hidden-dr")[0] == 503
    assert get(port, "/visible-dr")[0] == 200
    wait_for(lambda: st.log().count("flags=UH") >= 1
             and "cluster=BlackHoleCluster" in st.log(), 10,
             "UH and BlackHoleCluster in the access log")
    assert "route=team/shop" in st.log()


def test_circuit_breaker_max_connections_and_pending(strait_factory, tmp_path,
                                                      upstream_factory):
    """tcp.maxConnections: 1 and http1MaxPendingRequests: 1 on one worker.
    The first request holds the only connection; the second waits for it
    (pending) and is then served on that same connection; the third finds
    the queue full: 503 UO. A client that leaves while waiting leaves the
    queue."""
    arrived = threading.Semaphore(0)
    release = threading.Event()

    def held(c):
        buf = b""
        while True:
            buf = read_head(c, buf)
            if buf is None:
                return
            head, _, buf = buf.partition(b"\r\n\r\n")
            if b" /held" in head.split(b"\r\n")[0]:
                arrived.release()
                release.wait(20)
            c.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")

    up = upstream_factory(held)
    conf = tmp_path / "conf.d"
    conf.mkdir()
    port = free_port()
    (conf / "r.yaml").write_text(GATEWAY_AND_UP.format(port=port, up_port=up.port)
                                 + """apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: up, namespace: default}
spec:
  host: up.example.com
  trafficPolicy:
    connectionPool:
      tcp: {maxConnections: 1}
      http: {http1MaxPendingRequests: 1}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: vs, namespace: default}
spec:
  hosts: ["*"]
  gateways: [gw]
  http:
  - route: [{destination: {host: up.example.com}}]
""")
    st = strait_factory(workers=1, extra=f"config: {{dir: \"{conf}\"}}\n").start()

    def cluster_line(name):
        body = st.get("/clusters")[1]
        for line in body.splitlines():
            if line.startswith("up.example.com||0::" + name + "::"):
                return line.rsplit("::", 1)[1]
        return None

    assert cluster_line("max_connections") == "1"
    assert cluster_line("max_pending_requests") == "1"
    results = {}

    def client(name, path):
        results[name] = get(port, path)[0]

    a = threading.Thread(target=client, args=("a", "/held"))
    a.start()
    assert arrived.acquire(timeout=10), "the first request reached the upstream"
    b = threading.Thread(target=client, args=("b", "/waits"))
    b.start()
    wait_for(lambda: cluster_line("rq_pending_active") == "1", 10,
             "the second request waiting")
    assert cluster_line("cx_active") == "1"
    status, _, body = get(port, "/third")
    assert (status, body) == (503, b"upstream overflow\n")
    release.set()
    a.join(20)
    b.join(20)
    assert results == {"a": 200, "b": 200}
    # The waiting request took the first one's connection when it was free.
    assert up.conns == 1
    stats = st.stats()
    assert stats["cluster.up.example.com||0.upstream_rq_pending_total"] == 1
    assert stats["cluster.up.example.com||0.upstream_rq_pending_overflow"] == 1
    assert stats["cluster.up.example.com||0.upstream_cx_overflow"] >= 2
    wait_for(lambda: "flags=UO" in st.log(), 10, "the overflow's log line")

    # A client gone while its request waits takes it out of the queue.
    release.clear()
    a = threading.Thread(target=client, args=("a", "/held"))
    a.start()
    assert arrived.acquire(timeout=10)
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(b"GET /gone HTTP/1.1\r\nhost: x\r\n\r\n")
    wait_for(lambda: cluster_line("rq_pending_active") == "1", 10,
             "the request waiting")
    s.close()
    wait_for(lambda: cluster_line("rq_pending_active") == "0", 10,
             "the queue empty again")
    release.set()
    a.join(20)
    assert results["a"] == 200
    assert get(port, "/after")[0] == 200
    assert cluster_line("cx_active") == "1"


EMPTY_SE = """apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: empty, namespace: default}}
spec:
  hosts: [empty.example.com]
  resolution: STATIC
  ports: [{{number: {up_port}, name: http, protocol: HTTP}}]
{endpoints}---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: vs, namespace: default}}
spec:
  hosts: ["*"]
  gateways: [gw]
  http:
  - route:
    - destination: {{host: empty.example.com}}
"""


def test_static_service_entry_without_endpoints(strait_factory, tmp_path,
                                                upstream_factory):
    """A STATIC ServiceEntry with no endpoints loads, as in Istio: strait
    warns, answers 503 UH for the service, and serves it once a reload
    gives it an endpoint."""
    up = upstream_factory(responder(lambda head: b"up"))
    st, port = start_with_up(strait_factory, tmp_path, up.port,
                             EMPTY_SE.format(up_port=up.port, endpoints=""))
    assert "resolution STATIC with no endpoints" in st.log()
    assert get(port, "/")[0] == 503
    wait_for(lambda: "flags=UH" in st.log(), 10, "UH in the access log")
    conf = tmp_path / "conf.d"
    reloads = st.stats()["resources.reloads_ok"]
    new = conf / ".tmp"
    new.write_text(GATEWAY_AND_UP.format(port=port, up_port=up.port)
                   + EMPTY_SE.format(up_port=up.port,
                                     endpoints="  endpoints: [{address: 127.0.0.1}]\n"))
    os.replace(new, conf / "r.yaml")
    wait_for(lambda: st.stats()["resources.reloads_ok"] > reloads, 15,
             "the reload")
    assert get(port, "/")[0] == 200
