"""Locality load balancing (DestinationRule localityLbSetting) against real
upstreams on loopback, each tagged with a locality through its ServiceEntry
endpoint or WorkloadEntry, and strait's node locality from its bootstrap:
traffic stays in the node's locality while it is healthy, moves down the
priorities Istio computes (zone, region, failover region, the rest) as
outlier detection ejects the local endpoints (connect errors or 5xx), with
Envoy's priority load (1.4 x the healthy share), and comes back when their
ejection ends; distribute's weights; failoverPriority by labels; enabled:
false; and Istio's validation messages in `strait check`.

The DestinationRules are those of Istio's tasks "Locality failover" and
"Locality weighted distribution" (the localityLbSetting unchanged), with
maxEjectionPercent: 100 added, as strait never ejects more than that share
of a cluster (Envoy's rule), and shorter ejection times where a test waits
for the ejection to end."""
import re
import ssl
import subprocess

import pytest

from conftest import STRAIT, free_port, http_gateway, wait_for
from test_balancing import Setup, responder

HOST = "helloworld.sample.svc.cluster.local"


def resources(gw_port, eps, dr, extra=""):
    """eps: (port, locality, labels) per endpoint, in a ServiceEntry of
    namespace sample; dr: the DestinationRule's spec.trafficPolicy."""
    lines = ""
    for port, loc, labels, *net in eps:
        lab = ", ".join(f"{k}: {v}" for k, v in (labels or {}).items())
        network = f"network: {net[0]}, " if net else ""
        lines += (f"  - {{address: 127.0.0.1, ports: {{http: {port}}}, "
                  f"{network}locality: \"{loc}\", labels: {{{lab}}}}}\n")
    pol = "".join(f"    {line}\n" for line in dr.strip("\n").split("\n"))
    return f"""{http_gateway(gw_port)}apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: helloworld, namespace: sample}}
spec:
  hosts: [{HOST}]
  location: MESH_INTERNAL
  resolution: STATIC
  ports: [{{number: 5000, name: http, protocol: HTTP}}]
  endpoints:
{lines}---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {{name: helloworld, namespace: sample}}
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
    - destination: {{host: {HOST}, port: {{number: 5000}}}}
{extra}"""


class Site(Setup):
    def cluster(self):
        for k in self.st.stats():
            if k.startswith(f"cluster.{HOST}|") and k.endswith(".upstream_rq_total"):
                return k[len("cluster."):-len(".upstream_rq_total")]
        raise AssertionError("no cluster in /stats")

    def loads(self):
        """The priority load per level, from /clusters."""
        out = {}
        for m in re.finditer(r"::priority_load::(\d+)::(\d+)\n", self.clusters()):
            out[int(m.group(1))] = int(m.group(2))
        return out

    def priority(self, name):
        m = re.search(rf"::127\.0\.0\.1:{self.ports[name]}::priority::(\d+)\n",
                      self.clusters())
        return int(m.group(1)) if m else None

    def tally(self, n):
        """n requests; the count per upstream name (and 'fail' for any
        answer not 200)."""
        out = {}
        for _ in range(n):
            status, _, body = self.request()
            key = body if status == 200 else "fail"
            out[key] = out.get(key, 0) + 1
        return out


@pytest.fixture
def site(strait_factory, upstream_factory, tmp_path):
    """Upstreams named by locality ((name, locality, labels) each), strait
    with node locality node_loc (and node_extra bootstrap keys)."""
    def make(eps, dr, node="locality: region1/zone1", workers=2, extra=""):
        status = {}
        names, ports, ups = [], [], {}
        for name, *rest in eps:
            up = upstream_factory(responder(name, status))
            names.append(name)
            ports.append((up.port, *rest))
            ups[name] = up
        conf = tmp_path / "conf.d"
        conf.mkdir()
        gw_port = free_port()
        (conf / "r.yaml").write_text(resources(gw_port, ports, dr, extra))
        st = strait_factory(workers=workers,
                            extra=f"node: {{{node}}}\n"
                                  f"config: {{dir: \"{conf}\"}}\n").start()
        s = Site(st, gw_port, names, status)
        s.ports = {n: p[0] for n, p in zip(names, ports)}
        s.ups = ups
        s.conf = conf
        return s
    return make


# Istio's task "Locality failover": one helloworld per locality.
TASK_EPS = [("z1", "region1/zone1", None), ("z2", "region1/zone2", None),
            ("z3", "region2/zone3", None), ("z4", "region3/zone4", None)]
TASK_DR = """
connectionPool:
  http:
    maxRequestsPerConnection: 1
loadBalancer:
  simple: ROUND_ROBIN
  localityLbSetting:
    enabled: true
    failover:
      - from: region1
        to: region2
outlierDetection:
  consecutive5xxErrors: 1
  interval: 1s
  baseEjectionTime: 1m
  maxEjectionPercent: 100
"""


def test_failover_sequence_of_istios_task(site, upstream_factory):
    """The priorities of Istio's task (region1/zone1, region1/zone2, then
    region2 by the failover rule before region3), and traffic moving down
    them as each locality's only backend dies: its refused connects eject
    it (consecutive5xxErrors: 1) and the request that met the refusal is
    tried on the next endpoint, so no request fails."""
    s = site(TASK_EPS, TASK_DR)
    assert [s.priority(n) for n in ("z1", "z2", "z3", "z4")] == [0, 1, 2, 3]
    assert "::priority_levels::4\n" in s.clusters()
    assert "::127.0.0.1:%d::locality::region2/zone3\n" % s.ports["z3"] in s.clusters()
    assert s.loads() == {0: 100, 1: 0, 2: 0, 3: 0}
    assert s.tally(30) == {"z1": 30}
    assert s.stat("lb_priority_failover") == 0
    for dead, nxt, load in (("z1", "z2", {0: 0, 1: 100, 2: 0, 3: 0}),
                            ("z2", "z3", {0: 0, 1: 0, 2: 100, 3: 0}),
                            ("z3", "z4", {0: 0, 1: 0, 2: 0, 3: 100})):
        s.ups[dead].stop()
        got = s.tally(30)
        assert got == {nxt: 30}, (dead, got)
        assert s.loads() == load
        assert f"::127.0.0.1:{s.ports[dead]}::health_flags::/failed_outlier_check" \
            in s.clusters()
    # Every pick below the first level counts, the second try of a
    # request whose first met a dead backend in level 1 or 2 too.
    failovers = s.stat("lb_priority_failover")
    assert 90 <= failovers <= 92
    prom = s.st.get("/stats/prometheus")[1]
    assert re.search(r'strait_cluster_priority_failovers_total\{cluster="'
                     + re.escape(HOST) + r'[^"]*"\} %d\n' % failovers, prom), prom


def test_failback_when_the_ejection_ends(site, upstream_factory):
    """The local backend dies and comes back: traffic goes to the next
    zone while it is ejected and returns once its ejection time is over,
    with no request lost (the refused connect is retried elsewhere)."""
    dr = TASK_DR.replace("baseEjectionTime: 1m", "baseEjectionTime: 2s")
    s = site(TASK_EPS, dr)
    assert s.tally(10) == {"z1": 10}
    port = s.ports["z1"]
    s.ups["z1"].stop()
    assert s.tally(20) == {"z2": 20}
    assert s.loads()[1] == 100
    # Back on its port; its ejection ends within 2 s: then it takes all.
    upstream_factory(responder("z1", s.status), port=port)
    wait_for(lambda: s.who() == "z1", 20, "z1 to get traffic again")
    assert s.loads()[0] == 100
    assert s.tally(30) == {"z1": 30}


def test_partial_ejection_spills_by_envoys_factor(site):
    """Two endpoints in the node's zone, two in the next: with one of the
    local two ejected for 5xx, the zone is 50% healthy and keeps
    min(100, 1.4 x 50) = 70% of the traffic; 30% spills to the next zone.
    Requests lost: the consecutive5xxErrors answers before the ejection."""
    eps = [("a1", "region1/zone1", None), ("a2", "region1/zone1", None),
           ("b1", "region1/zone2", None), ("b2", "region1/zone2", None)]
    s = site(eps, """
loadBalancer:
  localityLbSetting: {enabled: true}
outlierDetection:
  consecutive5xxErrors: 2
  baseEjectionTime: 1h
  maxEjectionPercent: 100
""")
    assert s.tally(20) == {"a1": 10, "a2": 10}
    s.status["a1"] = 503
    fails = 0
    while s.stat("outlier_detection.ejections_active") == 0:
        status, _, _ = s.request()
        fails += status != 200
        assert fails <= 2
    assert fails == 2
    assert s.loads() == {0: 70, 1: 30}
    n = 2000
    got = s.tally(n)
    assert "a1" not in got and "fail" not in got, got
    local = got.get("a2", 0)
    assert abs(local - 0.7 * n) < 0.05 * n, got
    assert abs(got.get("b1", 0) - got.get("b2", 0)) < 0.06 * n, got
    assert s.stat("lb_priority_failover") == got["b1"] + got["b2"]


def test_5xx_failover_to_another_region_and_back(site):
    """Both local endpoints answer 503: each is ejected after
    consecutive5xxErrors answers (the requests lost), traffic goes to the
    other region; once they answer 200 and their ejection ends, it comes
    back."""
    eps = [("a1", "eu/west/a", None), ("a2", "eu/west/a", None),
           ("r1", "us/east/a", None)]
    s = site(eps, """
loadBalancer:
  simple: LEAST_REQUEST
  localityLbSetting: {enabled: true}
outlierDetection:
  consecutive5xxErrors: 3
  baseEjectionTime: 2s
  maxEjectionPercent: 100
""", node="locality: eu/west/a")
    assert set(s.tally(20)) == {"a1", "a2"}
    s.status["a1"] = s.status["a2"] = 503
    lost = 0
    while s.stat("outlier_detection.ejections_active") < 2:
        status, _, _ = s.request()
        lost += status != 200
        assert lost <= 6
    assert s.tally(20) == {"r1": 20}
    s.status["a1"] = s.status["a2"] = 200
    wait_for(lambda: s.loads().get(0) == 100, 20, "the local level back")
    got = s.tally(20)
    assert set(got) == {"a1", "a2"}, got


def test_distribute_of_istios_task(site):
    """Istio's "Locality weighted distribution": from region1/zone1, 70% to
    region1/zone1, 20% to region1/zone2, 10% to region3/zone4; region2 is
    named by no `to` and gets nothing. The localities are weighted as
    Envoy's locality weighted balancing (shown on /clusters)."""
    eps = [("z1", "region1/zone1", None), ("z2", "region1/zone2", None),
           ("z3", "region2/zone3", None), ("z4", "region3/zone4", None)]
    s = site(eps, """
loadBalancer:
  localityLbSetting:
    enabled: true
    distribute:
    - from: region1/zone1/*
      to:
        "region1/zone1/*": 70
        "region1/zone2/*": 20
        "region3/zone4/*": 10
outlierDetection:
  consecutive5xxErrors: 100
  interval: 1s
  baseEjectionTime: 1m
""")
    n = 1000
    got = s.tally(n)
    assert "z3" not in got and "fail" not in got, got
    for name, share in (("z1", 0.7), ("z2", 0.2), ("z4", 0.1)):
        # Envoy picks localities by an EDF schedule: per worker exact.
        assert abs(got.get(name, 0) - share * n) <= 0.01 * n, got
    body = s.clusters()
    assert f"127.0.0.1:{s.ports['z3']}" not in body
    # Localities of one priority, Envoy's locality weights.
    for loc, w in (("region1/zone1", 70), ("region1/zone2", 20),
                   ("region3/zone4", 10)):
        assert f"::locality_weight::{loc}::{w}\n" in body, body
        assert f"::locality_load::{loc}::{w}\n" in body, body
    assert "::priority_levels::" not in body


def test_failover_priority_by_labels(site, tmp_path):
    """failoverPriority [topology.istio.io/network, version]: endpoints on
    the node's network with its version first, then its network, then the
    rest; "version=v2" puts v2 first instead (after a reload). The labels
    and networks are the ServiceEntry endpoints'."""
    eps = [("v1", "r/z", {"version": "v1"}, "net1"),
           ("v2", "r/z", {"version": "v2"}, "net1"),
           ("other", "r/z", {"version": "v1"}, "net2")]
    s = site(eps, """
loadBalancer:
  localityLbSetting:
    failoverPriority:
    - topology.istio.io/network
    - version
outlierDetection:
  consecutive5xxErrors: 1
  baseEjectionTime: 1h
  maxEjectionPercent: 100
""", node="network: net1, labels: {version: v1}, locality: r/z")
    text = (s.conf / "r.yaml").read_text()
    assert [s.priority(n) for n in ("v1", "v2", "other")] == [0, 1, 2]
    assert s.tally(20) == {"v1": 20}
    s.status["v1"] = 503
    s.request()  # ejects v1
    assert s.tally(20) == {"v2": 20}
    # "version=v2": v2 is what the node wants now.
    (s.conf / "r.yaml").write_text(text.replace("    - version\n",
                                                "    - version=v2\n"))
    wait_for(lambda: s.priority("v2") == 0, 20, "the reload")
    assert s.priority("v1") == 1
    s.status["v1"] = 200
    assert s.tally(20) == {"v2": 20}


def test_workload_entries_with_localities(site, strait_factory, upstream_factory,
                                          tmp_path):
    """Endpoints from WorkloadEntries selected by a ServiceEntry, one with
    its locality, one with Kubernetes' topology labels instead; the
    default failover (no rules, the mesh's enabled: true) with outlier
    detection keeps traffic in the node's zone."""
    status = {}
    near = upstream_factory(responder("near", status))
    far = upstream_factory(responder("far", status))
    conf = tmp_path / "we.d"
    conf.mkdir()
    gw = free_port()
    (conf / "r.yaml").write_text(f"""{http_gateway(gw)}apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: svc, namespace: default}}
spec:
  hosts: [svc.example.com]
  location: MESH_INTERNAL
  resolution: STATIC
  ports: [{{number: 80, name: http, protocol: HTTP}}]
  workloadSelector: {{labels: {{app: svc}}}}
---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {{name: near, namespace: default}}
spec: {{address: 127.0.0.1, ports: {{http: {near.port}}}, labels: {{app: svc}}, locality: eu/west/a}}
---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {{name: far, namespace: default}}
spec:
  address: 127.0.0.1
  ports: {{http: {far.port}}}
  labels: {{app: svc, topology.kubernetes.io/region: us, topology.kubernetes.io/zone: east}}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {{name: svc, namespace: default}}
spec:
  host: svc.example.com
  trafficPolicy:
    outlierDetection: {{consecutive5xxErrors: 2, baseEjectionTime: 1h, maxEjectionPercent: 100}}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: vs, namespace: default}}
spec:
  hosts: ["*"]
  gateways: [gw]
  http:
  - route:
    - destination: {{host: svc.example.com}}
""")
    st = strait_factory(extra=f"node: {{locality: eu/west/a}}\n"
                              f"config: {{dir: \"{conf}\"}}\n").start()
    s = Site(st, gw, ["near", "far"], status)
    s.ports = {"near": near.port, "far": far.port}
    s.cluster = lambda: next(k[len("cluster."):-len(".upstream_rq_total")]
                             for k in st.stats()
                             if k.startswith("cluster.svc.example.com|")
                             and k.endswith(".upstream_rq_total"))
    assert s.tally(20) == {"near": 20}
    body = s.clusters()
    assert f"::127.0.0.1:{near.port}::locality::eu/west/a\n" in body
    assert f"::127.0.0.1:{far.port}::priority::1\n" in body
    assert f"::127.0.0.1:{far.port}::locality::us/east\n" in body


def test_enabled_false_balances_over_all(site):
    """enabled: false: no priorities, round robin over every locality."""
    s = site(TASK_EPS, TASK_DR.replace("enabled: true", "enabled: false"),
             workers=1)
    assert s.tally(40) == {"z1": 10, "z2": 10, "z3": 10, "z4": 10}
    assert "::priority_levels::" not in s.clusters()


def test_without_outlier_detection_no_failover(site):
    """Istio applies failover only with outlierDetection (else Envoy would
    never leave a level): without it, round robin over all."""
    s = site(TASK_EPS, """
loadBalancer:
  localityLbSetting:
    enabled: true
    failover: [{from: region1, to: region2}]
""", workers=1)
    assert s.tally(40) == {"z1": 10, "z2": 10, "z3": 10, "z4": 10}


def check(*args):
    return subprocess.run([STRAIT, "check", *args], capture_output=True,
                          text=True, timeout=30)


def test_check_reports_istios_messages(tmp_path):
    """strait check says what Istio's validation says: failover without
    outlierDetection is a Warning (IST0133, SchemaWarning); distribute with
    failover, weights that do not sum to 100 and a failover to the same
    region are errors."""
    f = tmp_path / "dr.yaml"
    f.write_text(resources(8080, [(9000, "a/b", None)], """
loadBalancer:
  localityLbSetting:
    failover: [{from: us-east, to: eu-west}]
"""))
    r = check(str(f))
    assert r.returncode == 0, r.stdout + r.stderr
    assert re.search(r"Warning \[IST0133\] \(DestinationRule sample/helloworld "
                     r"[^)]*dr\.yaml:\d+:\d+\) .*outlier detection policy must "
                     r"be provided for failover", r.stdout), r.stdout
    for bad, msg in (
            ("""
loadBalancer:
  localityLbSetting:
    distribute: [{from: "a/*", to: {"a/*": 100}}]
    failover: [{from: a, to: b}]
outlierDetection: {}
""", "can not simultaneously specify 'distribute' and 'failover'"),
            ("""
loadBalancer:
  localityLbSetting:
    distribute: [{from: "a/*", to: {"a/*": 60, "b/*": 30}}]
""", "total locality weight 90 != 100"),
            ("""
loadBalancer:
  localityLbSetting:
    failover: [{from: a, to: a}]
outlierDetection: {}
""", "locality lb failover settings must specify different regions")):
        f.write_text(resources(8080, [(9000, "a/b", None)], bad))
        r = check(str(f))
        assert r.returncode != 0, bad
        assert "Error [IST0106]" in r.stdout and msg in r.stdout, r.stdout


def test_auto_passthrough_keeps_to_the_nodes_zone(strait_factory,
                                                  upstream_factory, tmp_path):
    """strait as the east-west gateway (AUTO_PASSTHROUGH): the endpoint
    for a relayed stream is picked by the same levels, so streams stay in
    the gateway's zone, and go to the other zone once the local endpoint's
    refused connect has ejected it."""
    from test_east_west import SVC_PORT, backend, sni, talk
    from test_east_west import HOST as EW_HOST
    from test_l4 import start
    near, _ = backend(upstream_factory, tmp_path, "near")
    far, _ = backend(upstream_factory, tmp_path, "far")
    port = free_port()
    text = f"""apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {{name: cross-network-gateway, namespace: istio-system}}
spec:
  selector: {{}}
  servers:
  - port: {{number: {port}, name: tls, protocol: TLS}}
    bind: 127.0.0.1
    tls: {{mode: AUTO_PASSTHROUGH}}
    hosts: ["*.example.test"]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: svc, namespace: default}}
spec:
  hosts: [{EW_HOST}]
  location: MESH_INTERNAL
  resolution: STATIC
  ports: [{{number: {SVC_PORT}, name: tls, protocol: TLS}}]
  endpoints:
  - {{address: 127.0.0.1, ports: {{tls: {far.port}}}, locality: eu/east/a}}
  - {{address: 127.0.0.1, ports: {{tls: {near.port}}}, locality: eu/west/a}}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {{name: svc, namespace: default}}
spec:
  host: {EW_HOST}
  trafficPolicy:
    outlierDetection: {{consecutiveGatewayErrors: 1, consecutive5xxErrors: 1,
                       baseEjectionTime: 60s, maxEjectionPercent: 100}}
"""
    st = start(strait_factory, tmp_path, text,
               extra="node: {locality: eu/west/a}\n")
    got = [talk(port, sni())[0] for _ in range(8)]
    assert got == [b"near:hello"] * 8, got
    near.stop()
    results = []
    for _ in range(8):
        try:
            results.append(talk(port, sni())[0])
        except (ssl.SSLError, OSError):
            results.append(b"")
    # The first stream meets the refusal (the relay's next try takes the
    # next endpoint); the ejection sends every later one to the far zone.
    assert results[1:] == [b"far:hello"] * 7, results
    assert results[0] in (b"", b"far:hello"), results
    body = st.get("/clusters")[1]
    assert f"{EW_HOST}||{SVC_PORT}::priority_load::1::100\n" in body, body


def test_node_locality_change_on_reload(site):
    """The levels are the node's: a reload with another node.locality
    builds the cluster anew (its levels are part of what it is), and the
    traffic follows to the new local zone."""
    s = site(TASK_EPS, TASK_DR)
    assert s.tally(10) == {"z1": 10}
    s.st.write_config("", extra=f"node: {{locality: region1/zone2}}\n"
                                f"config: {{dir: \"{s.conf}\"}}\n")
    code, body, _ = s.st.get("/reload", method="POST")
    assert code == 200 and body.startswith("reloaded"), body
    wait_for(lambda: s.priority("z2") == 0, 20, "z2 to be the local level")
    assert s.priority("z1") == 1
    assert s.tally(10) == {"z2": 10}
