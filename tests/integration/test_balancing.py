"""DestinationRule load balancing against several real upstreams: consistent
hashing on a header, a cookie (generated with Set-Cookie when a ttl is
given), the source address and a query parameter, with a ring and with
Maglev; outlier detection ejecting failing endpoints, bringing them
back after their ejection time, capping the share ejected and never
black-holing a cluster whose endpoints are all ejected; and WorkloadEntry
weights sharing traffic under every balancer, changed by hot reload."""
import http.client
import os
import re
import threading

import pytest

from conftest import free_port, http_gateway, wait_for

HOST = "svc.example.com"


def responder(name, status):
    """An HTTP/1.1 keep-alive upstream that answers every request with its
    name and the status status[name] (200 unless set)."""
    def handler(c):
        buf = b""
        while True:
            while b"\r\n\r\n" not in buf:
                d = c.recv(65536)
                if not d:
                    return
                buf += d
            buf = buf.split(b"\r\n\r\n", 1)[1]
            code = status.get(name, 200)
            body = name.encode()
            c.sendall(b"HTTP/1.1 %d X\r\ncontent-length: %d\r\n\r\n%s"
                      % (code, len(body), body))
    return handler


def resources(gw_port, ports, policy, extra_endpoints=()):
    eps = "".join(f"  - {{address: 127.0.0.1, ports: {{http: {p}}}}}\n"
                  for p in list(ports) + list(extra_endpoints))
    pol = "".join(f"    {line}\n" for line in policy.strip("\n").split("\n"))
    return f"""{http_gateway(gw_port)}apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: svc, namespace: default}}
spec:
  hosts: [{HOST}]
  resolution: STATIC
  ports: [{{number: 80, name: http, protocol: HTTP}}]
  endpoints:
{eps}---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {{name: svc, namespace: default}}
spec:
  host: {HOST}
  trafficPolicy:
{pol}---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: vs, namespace: default}}
spec:
  hosts: ["*"]
  gateways: [gw]
  http:
  - retries: {{attempts: 0}}
    route:
    - destination: {{host: {HOST}}}
"""


class Setup:
    def __init__(self, st, port, names, status):
        self.st, self.port, self.names, self.status = st, port, names, status

    def request(self, path="/", headers=None, source="127.0.0.1"):
        """One request on a new connection: (status, headers, body)."""
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10,
                                       source_address=(source, 0))
        c.request("GET", path, headers=headers or {})
        r = c.getresponse()
        body = r.read().decode()
        c.close()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, body

    def who(self, path="/", headers=None, source="127.0.0.1"):
        status, _, body = self.request(path, headers, source)
        assert status == 200, (status, body)
        assert body in self.names
        return body

    def cluster(self):
        for k in self.st.stats():
            if k.startswith(f"cluster.{HOST}|") and k.endswith(".upstream_rq_total"):
                return k[len("cluster."):-len(".upstream_rq_total")]
        raise AssertionError("no cluster in /stats")

    def stat(self, name):
        return self.st.stats()[f"cluster.{self.cluster()}.{name}"]

    def clusters(self):
        code, body, _ = self.st.get("/clusters")
        assert code == 200
        return body


@pytest.fixture
def balanced(strait_factory, upstream_factory, tmp_path):
    """Starts n named upstreams (u0, u1...) and strait with a
    DestinationRule trafficPolicy; returns a Setup."""
    def make(n, policy, dead_ports=(), workers=2):
        status = {}
        names, ports = [], []
        for i in range(n):
            name = f"u{i}"
            up = upstream_factory(responder(name, status))
            names.append(name)
            ports.append(up.port)
        conf = tmp_path / "conf.d"
        conf.mkdir()
        gw_port = free_port()
        (conf / "r.yaml").write_text(resources(gw_port, ports, policy, dead_ports))
        st = strait_factory(workers=workers,
                            extra=f"config: {{dir: \"{conf}\"}}\n").start()
        s = Setup(st, gw_port, names, status)
        s.ports = dict(zip(names, ports))
        return s
    return make


def test_header_hash_sticks_and_spreads(balanced):
    s = balanced(3, """
loadBalancer:
  consistentHash: {httpHeaderName: x-user}
""")
    homes = {}
    for u in range(30):
        seen = {s.who(headers={"x-user": f"user-{u}"}) for _ in range(4)}
        assert len(seen) == 1, (u, seen)
        homes[u] = seen.pop()
    # 30 users all on one of 3 endpoints: probability 3 * 3**-30.
    assert len(set(homes.values())) >= 2
    # Without the header: random picks, not one endpoint.
    assert len({s.who() for _ in range(60)}) >= 2
    # Istio's default: a ring of at least 1024 points (342 for each of 3).
    assert "::lb::ring_hash\n" in s.clusters()
    assert "::lb_table_size::1026\n" in s.clusters()


def test_cookie_generated_with_ttl_sticks(balanced):
    s = balanced(3, """
loadBalancer:
  consistentHash:
    httpCookie: {name: sticky, path: /, ttl: 60s}
    ringHash: {minimumRingSize: 3000}
""")
    assert "::lb_table_size::3000\n" in s.clusters()
    status, headers, first = s.request()
    assert status == 200
    sc = headers.get("set-cookie")
    assert sc is not None
    m = re.fullmatch(r'sticky="([0-9a-f]{16})"; Max-Age=60; Path=/; HttpOnly', sc)
    assert m, sc
    cookie = f"sticky={m.group(1)}"
    # Every later request with the cookie (new connections) sticks to the
    # endpoint the first one went to, and gets no new cookie.
    for _ in range(20):
        status, headers, body = s.request(headers={"cookie": cookie})
        assert (status, body) == (200, first)
        assert "set-cookie" not in headers
    # Different cookies spread over the endpoints.
    seen = {s.who(headers={"cookie": f"a=b; sticky=client-{i}"}) for i in range(30)}
    assert len(seen) >= 2


def test_cookie_without_ttl_is_not_generated(balanced):
    s = balanced(3, """
loadBalancer:
  consistentHash:
    httpCookie: {name: sticky}
""")
    status, headers, _ = s.request()
    assert status == 200
    assert "set-cookie" not in headers
    one = s.who(headers={"cookie": "sticky=abc"})
    assert all(s.who(headers={"cookie": "sticky=abc"}) == one for _ in range(10))


def test_source_ip_hash(balanced):
    s = balanced(3, """
loadBalancer:
  consistentHash: {useSourceIp: true, minimumRingSize: 64}
""")
    # The deprecated minimumRingSize still sizes the ring: 22 points each.
    assert "::lb_table_size::66\n" in s.clusters()
    homes = {}
    for i in range(2, 32):
        src = f"127.0.0.{i}"
        seen = {s.who(source=src) for _ in range(3)}
        assert len(seen) == 1, (src, seen)
        homes[src] = seen.pop()
    assert len(set(homes.values())) >= 2


def test_query_parameter_hash_with_maglev(balanced):
    s = balanced(3, """
loadBalancer:
  consistentHash:
    httpQueryParameterName: session
    maglev: {tableSize: 65537}
""")
    homes = {}
    for u in range(30):
        seen = {s.who(path=f"/p{k}?x=1&session=s{u}") for k in range(4)}
        assert len(seen) == 1, (u, seen)
        homes[u] = seen.pop()
    assert len(set(homes.values())) >= 2
    assert "::lb::maglev\n" in s.clusters()
    assert "::lb_table_size::65537\n" in s.clusters()


def ejected(s, name):
    """Whether /clusters shows upstream name as ejected."""
    addr = f"127.0.0.1:{s.ports[name]}"
    return f"::{addr}::health_flags::/failed_outlier_check" in s.clusters()


def test_outlier_ejects_a_failing_endpoint(balanced):
    s = balanced(3, """
outlierDetection:
  consecutive5xxErrors: 3
  interval: 1s
  baseEjectionTime: 1h
  maxEjectionPercent: 50
""")
    s.status["u1"] = 503
    # Round robin reaches u1 every third request; its third 503 ejects it.
    wait_for(lambda: s.request()[0] and s.stat("outlier_detection.ejections_active") == 1,
             20, "u1 to be ejected")
    assert ejected(s, "u1")
    body = s.clusters()
    addr = f"127.0.0.1:{s.ports['u1']}"
    assert f"::{addr}::outlier_ejections::1" in body
    assert re.search(rf"::{re.escape(addr)}::outlier_ejected_until::\d{{4}}-\d\d-\d\dT", body)
    assert s.stat("outlier_detection.ejections_enforced_total") == 1
    assert s.stat("outlier_detection.ejections_enforced_consecutive_5xx") == 1
    wait_for(lambda: f"endpoint {addr} ejected by outlier detection for " in s.st.log(),
             10, "the ejection to be logged")
    # Both workers skip it: only the healthy ones answer, and both do.
    seen = set()
    for _ in range(60):
        status, _, body = s.request()
        assert status == 200 and body in ("u0", "u2"), (status, body)
        seen.add(body)
    assert seen == {"u0", "u2"}
    prom = s.st.get("/stats/prometheus")[1]
    assert re.search(r'strait_cluster_outlier_ejections_total\{cluster="[^"]+"\} 1\n', prom)
    assert re.search(r'strait_cluster_outlier_ejections_active\{cluster="[^"]+"\} 1\n', prom)
    assert "# TYPE strait_cluster_outlier_ejections_active gauge" in prom


def test_ejected_endpoint_returns_after_its_ejection_time(balanced):
    s = balanced(3, """
outlierDetection:
  consecutive5xxErrors: 3
  interval: 1s
  baseEjectionTime: 1s
  maxEjectionPercent: 50
""")
    s.status["u1"] = 503
    wait_for(lambda: s.request()[0] and s.stat("outlier_detection.ejections_enforced_total") == 1,
             20, "u1 to be ejected")
    s.status["u1"] = 200
    # Its ejection time is over: it is back, and gets traffic again.
    wait_for(lambda: s.who() == "u1", 20, "u1 to get traffic again")
    assert not ejected(s, "u1")
    assert s.stat("outlier_detection.ejections_active") == 0
    # (A slow run may see it ejected twice before it was made healthy.)
    assert s.stat("outlier_detection.ejections_enforced_total") >= 1
    assert re.search(rf"::127.0.0.1:{s.ports['u1']}::outlier_ejections::[1-9]\d*\n",
                     s.clusters())


def test_max_ejection_percent_limits_ejections(balanced):
    s = balanced(4, """
outlierDetection:
  consecutive5xxErrors: 2
  baseEjectionTime: 1h
  maxEjectionPercent: 25
""")
    s.status["u0"] = 503
    s.status["u2"] = 503
    # One of the two goes (25% of 4), the other is refused: overflow.
    wait_for(lambda: s.request()[0] and
             s.stat("outlier_detection.ejections_overflow") > 0 and
             s.stat("outlier_detection.ejections_active") == 1,
             20, "one ejection and an overflow")
    assert ejected(s, "u0") != ejected(s, "u2")
    still = "u2" if ejected(s, "u0") else "u0"
    # The one left in keeps getting its share (and keeps failing).
    seen = [s.request()[2] for _ in range(40)]
    assert still in seen
    assert s.stat("outlier_detection.ejections_active") == 1
    assert s.stat("outlier_detection.ejections_enforced_total") == 1


def test_connect_failures_are_gateway_errors(balanced):
    dead = free_port()
    s = balanced(2, """
outlierDetection:
  consecutive5xxErrors: 0
  consecutiveGatewayErrors: 2
  baseEjectionTime: 1h
  maxEjectionPercent: 50
""", dead_ports=[dead])
    # Requests to the dead endpoint fail over to the next one; its failed
    # connects eject it.
    wait_for(lambda: s.who() and s.stat("outlier_detection.ejections_active") == 1,
             20, "the dead endpoint to be ejected")
    assert f"::127.0.0.1:{dead}::health_flags::/failed_outlier_check" in s.clusters()
    assert s.stat("outlier_detection.ejections_enforced_consecutive_gateway_failure") == 1
    before = s.stat("upstream_cx_connect_fail")
    for _ in range(20):
        s.who()
    assert s.stat("upstream_cx_connect_fail") == before


def test_all_ejected_is_not_a_black_hole(balanced):
    """With every endpoint ejected, requests still go to them (Envoy's
    panic mode) rather than all being answered 503 no healthy upstream."""
    s = balanced(1, """
outlierDetection:
  consecutive5xxErrors: 1
  baseEjectionTime: 1h
  maxEjectionPercent: 100
""")
    s.status["u0"] = 500
    status, _, body = s.request()
    assert (status, body) == (500, "u0")
    wait_for(lambda: s.stat("outlier_detection.ejections_active") == 1, 10,
             "the only endpoint to be ejected")
    s.status["u0"] = 200
    for _ in range(5):
        assert s.who() == "u0"


def test_hash_key_moves_while_its_endpoint_is_ejected(balanced):
    s = balanced(3, """
loadBalancer:
  consistentHash: {httpHeaderName: x-user}
outlierDetection:
  consecutive5xxErrors: 2
  baseEjectionTime: 1h
  maxEjectionPercent: 50
""")
    home = s.who(headers={"x-user": "alice"})
    s.status[home] = 503
    for _ in range(2):
        assert s.request(headers={"x-user": "alice"})[0] == 503
    wait_for(lambda: s.stat("outlier_detection.ejections_active") == 1, 10,
             "alice's endpoint to be ejected")
    # alice now sticks to one healthy endpoint.
    seen = {s.who(headers={"x-user": "alice"}) for _ in range(10)}
    assert len(seen) == 1 and home not in seen


def test_check_refuses_a_maglev_size_that_is_not_prime(tmp_path):
    import subprocess
    from conftest import STRAIT
    f = tmp_path / "dr.yaml"
    f.write_text(resources(8080, [9000, 9001], """
loadBalancer:
  consistentHash:
    useSourceIp: true
    maglev: {tableSize: 1000}
"""))
    r = subprocess.run([STRAIT, "check", str(f)], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode != 0
    assert ("maglev tableSize 1000 is not a prime number; Envoy needs a prime "
            "(the next one is 1009") in r.stdout + r.stderr, r


def weighted_resources(gw_port, ports, weights, policy, inline=False):
    """Endpoints with weights: WorkloadEntries selected by the
    ServiceEntry, or (inline) the ServiceEntry's own endpoints; and a
    DestinationRule with a loadBalancer policy."""
    if inline:
        eps = "".join(f"  - {{address: 127.0.0.1, ports: {{http: {p}}}, weight: {w}}}\n"
                      for p, w in zip(ports, weights))
        return resources(gw_port, [], policy).replace(
            "  endpoints:\n", "  endpoints:\n" + eps)
    wes = "".join(f"""---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {{name: we{i}, namespace: default}}
spec:
  address: 127.0.0.1
  ports: {{http: {p}}}
  labels: {{app: weighted}}
  weight: {w}
""" for i, (p, w) in enumerate(zip(ports, weights)))
    pol = "".join(f"    {line}\n" for line in policy.strip("\n").split("\n"))
    return f"""{http_gateway(gw_port)}apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: svc, namespace: default}}
spec:
  hosts: [{HOST}]
  resolution: STATIC
  ports: [{{number: 80, name: http, protocol: HTTP}}]
  workloadSelector: {{labels: {{app: weighted}}}}
{wes}---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {{name: svc, namespace: default}}
spec:
  host: {HOST}
  trafficPolicy:
{pol}---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: vs, namespace: default}}
spec:
  hosts: ["*"]
  gateways: [gw]
  http:
  - retries: {{attempts: 0}}
    route:
    - destination: {{host: {HOST}}}
"""


WEIGHTED_PICKS = 1000


def shares(port, n, keyed):
    """n requests on one keep-alive connection; counts per upstream name.
    keyed: each request carries its own x-user value (hash policies)."""
    hits = {}
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        for i in range(n):
            c.request("GET", "/", headers={"x-user": f"user-{i}"} if keyed else {})
            r = c.getresponse()
            body = r.read().decode()
            assert r.status == 200, (r.status, body)
            hits[body] = hits.get(body, 0) + 1
    finally:
        c.close()
    return hits


def assert_shares(hits, names, weights, n):
    """Each upstream's count is within 6 standard deviations (binomial over
    n requests) of its weight's share; round robin and least request are
    closer than that, random and hashing need the room."""
    total = sum(weights)
    for name, w in zip(names, weights):
        p = w / total
        sd = (n * p * (1 - p)) ** 0.5
        assert abs(hits.get(name, 0) - n * p) <= 6 * sd, (hits, weights)


@pytest.mark.parametrize("policy,keyed", [
    ("loadBalancer: {simple: ROUND_ROBIN}", False),
    ("loadBalancer: {simple: RANDOM}", False),
    ("loadBalancer: {simple: LEAST_REQUEST}", False),
    ("loadBalancer: {consistentHash: {httpHeaderName: x-user, "
     "maglev: {tableSize: 65537}}}", True),
], ids=["round_robin", "random", "least_request", "maglev"])
def test_endpoint_weights_share_traffic(strait_factory, upstream_factory,
                                        tmp_path, policy, keyed):
    """WorkloadEntry weights 1/2/7: each upstream gets its weight's share of
    the requests. A hot reload that reverses the weights (7/2/1) builds a
    new cluster and the shares follow; /clusters shows the weights."""
    status = {}
    names = ["u0", "u1", "u2"]
    ports = [upstream_factory(responder(n, status)).port for n in names]
    conf = tmp_path / "conf.d"
    conf.mkdir()
    gw_port = free_port()
    (conf / "r.yaml").write_text(weighted_resources(gw_port, ports, (1, 2, 7),
                                                    policy))
    st = strait_factory(workers=2,
                        extra=f"config: {{dir: \"{conf}\"}}\n").start()
    s = Setup(st, gw_port, names, status)
    hits = shares(gw_port, WEIGHTED_PICKS, keyed)
    assert_shares(hits, names, (1, 2, 7), WEIGHTED_PICKS)
    body = s.clusters()
    for p, w in zip(ports, (1, 2, 7)):
        assert f"::127.0.0.1:{p}::weight::{w}\n" in body, body

    new = conf / ".tmp"
    new.write_text(weighted_resources(gw_port, ports, (7, 2, 1), policy))
    os.replace(new, conf / "r.yaml")
    wait_for(lambda: f"::127.0.0.1:{ports[0]}::weight::7\n" in s.clusters(),
             15, "the new weights in /clusters")
    hits = shares(gw_port, WEIGHTED_PICKS, keyed)
    assert_shares(hits, names, (7, 2, 1), WEIGHTED_PICKS)


def test_inline_endpoint_weights(strait_factory, upstream_factory, tmp_path):
    """A ServiceEntry's inline endpoints carry weights too (they are
    WorkloadEntry specs); an absent weight counts as 1."""
    status = {}
    names = ["u0", "u1", "u2"]
    ports = [upstream_factory(responder(n, status)).port for n in names]
    conf = tmp_path / "conf.d"
    conf.mkdir()
    gw_port = free_port()
    text = weighted_resources(gw_port, ports, (1, 2, 7),
                              "loadBalancer: {simple: RANDOM}", inline=True)
    text = text.replace(f"ports: {{http: {ports[0]}}}, weight: 1}}",
                        f"ports: {{http: {ports[0]}}}}}")
    assert "weight: 1}" not in text and "weight: 7}" in text
    (conf / "r.yaml").write_text(text)
    st = strait_factory(workers=2,
                        extra=f"config: {{dir: \"{conf}\"}}\n").start()
    hits = shares(gw_port, WEIGHTED_PICKS, False)
    assert_shares(hits, names, (1, 2, 7), WEIGHTED_PICKS)
    body = Setup(st, gw_port, names, status).clusters()
    assert f"::127.0.0.1:{ports[0]}::weight::1\n" in body, body
    assert f"::127.0.0.1:{ports[2]}::weight::7\n" in body, body
