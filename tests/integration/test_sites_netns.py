"""Multi-site tests across network namespaces this test creates (issue 15
item 7): each site is a namespace with its own strait (its own CA and
trust domain, as a separate cluster would have) and its backends; the
sites reach each other only through a "WAN" namespace routing between
10.X.I.0/24 subnets, and the test reaches them over a management link
(see netns.py). Covered: a Gateway route to another site through its
east-west gateway (AUTO_PASSTHROUGH, learnt by a MeshLink) and through
its HBONE server; locality failover to the other site when the local
backends die and failback when they return, with no request lost;
a WAN partition and its healing with 50 links coming back spread by
jitter; links between two roots and the refusals of a wrong trust
domain or root; and the bytes on the WAN: the ClientHello to a remote
gateway and the HBONE CONNECT headers.

Needs root and `ip netns` (CI runs as root): without them each test
fails, it never skips."""
import json
import os
import shutil
import socket
import ssl
import struct
import threading
import time

import pytest

from conftest import Upstream, finish_strait, wait_for
from netns import Net, NsStrait, inside, port
from test_hbone import echo
from test_hbone_client import H2ConnectServer, ambient_service, gateway_to
from test_l4 import named_handler
from test_meshlink import Site, connected, exported, route
from test_multinet import HelloRecorder, alpn_ext, hello_extensions, sni_ext

ASAN = "asan" in os.environ.get("STRAIT_BIN", "")
HOST = "reviews.default.svc.cluster.local"


class NsSite(Site):
    """test_meshlink's Site, in a namespace: admin API on the management
    address, catalog API and east-west gateway on the WAN address."""

    def __init__(self, root, net_site, name, td, network, locality="",
                 links=True, gw_port=15443, extra="", links_extra=""):
        self.net = net_site
        self.ns = net_site["ns"]
        self.wan = net_site["wan"]
        self.mgmt = net_site["mgmt"]
        self.dir = root / name
        self.dir.mkdir()
        self.conf = self.dir / "conf.d"
        self.conf.mkdir()
        self.name = name
        self.td = td
        self.catalog_port = 15016
        self.gw_port = gw_port
        links_yaml = (f"links: {{address: {self.wan}:{self.catalog_port}, "
                      f"gateway: \"{self.wan}:{gw_port}\"{links_extra}}}\n"
                      ) if links else ""
        extra = (f"node: {{name: {name}, namespace: istio-system, "
                 f"network: {network}, locality: \"{locality}\"}}\n"
                 f"trustDomain: {td}\n"
                 f"config: {{dir: {self.conf}, debounce: 10ms}}\n"
                 f"ca: {{enabled: true, dir: {self.dir / 'ca'}, "
                 f"address: 127.0.0.1:{port()}}}\n" + links_yaml + extra)
        self.s = NsStrait(self.dir, self.ns, self.mgmt, extra=extra)

    def issue(self, sa, ns="default"):
        out = self.dir / f"wl-{ns}-{sa}"
        self.cli("ca", "issue", "--namespace", ns, "--service-account", sa,
                 "--out", str(out))
        return out

    def root_pem(self):
        return self.dir / "ca" / "root-cert.pem"


@pytest.fixture
def net(request):
    made = []

    def make(n):
        n = Net(n)
        made.append(n)
        return n

    yield make
    for n in made:
        n.close()


@pytest.fixture
def world(tmp_path, net):
    """make(n) -> (Net, [NsSite factory per site]); sites, servers and
    namespaces all stopped and removed at teardown, in that order."""
    sites, servers = [], []
    state = {}

    def make(n):
        state["net"] = net(n)
        return state["net"]

    def site(i, *a, **kw):
        s = NsSite(tmp_path, state["net"].sites[i - 1], *a, **kw)
        sites.append(s)
        return s

    def serve(i, factory):
        with inside(state["net"].sites[i - 1]["ns"]):
            srv = factory()
        servers.append(srv)
        return srv

    yield make, site, serve
    errors = []
    for s in sites:
        try:
            finish_strait(s.s)
        except AssertionError as e:
            errors.append(str(e))
    for srv in servers:
        srv.stop()
    assert not errors, errors


def tls_workload(site, sa, trust):
    """A server context for a workload of site with service account sa,
    requiring a client certificate under trust (a root PEM path)."""
    d = site.issue(sa)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(str(d / "cert-chain.pem"), str(d / "key.pem"))
    ctx.load_verify_locations(str(trust))
    ctx.verify_mode = ssl.CERT_REQUIRED
    ctx.set_alpn_protocols(["http/1.1"])
    return ctx


def get(ip_, port_, host="reviews"):
    """One GET with Connection: close; (status, body), or (None, error)."""
    try:
        with socket.create_connection((ip_, port_), timeout=10) as c:
            c.sendall(f"GET / HTTP/1.1\r\nHost: {host}\r\n"
                      "Connection: close\r\n\r\n".encode())
            out = b""
            while True:
                d = c.recv(65536)
                if not d:
                    break
                out += d
    except OSError as e:
        return None, repr(e)
    if not out:
        return None, "empty answer"
    head, _, body = out.partition(b"\r\n\r\n")
    return int(head.split(b" ")[1]), body.decode(errors="replace")


def ew_gateway(site, hosts='"*.local"'):
    return f"""apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {{name: cross-network-gateway, namespace: istio-system}}
spec:
  selector: {{}}
  servers:
  - port: {{number: {site.gw_port}, name: tls, protocol: TLS}}
    bind: {site.wan}
    tls: {{mode: AUTO_PASSTHROUGH}}
    hosts: [{hosts}]
"""


def workload_entry(site, wl_port, export=True, locality="eu/west/b1"):
    label = ', labels: {"strait.io/export": "true"}' if export else ""
    return f"""apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: reviews, namespace: default{label}}}
spec:
  hosts: [{HOST}]
  location: MESH_INTERNAL
  resolution: STATIC
  ports: [{{number: 9080, name: http, protocol: HTTP}}]
  endpoints:
  - {{address: {site.wan}, ports: {{http: {wl_port}}},
     serviceAccount: reviews, locality: {locality}}}
"""


def link(a, b):
    a.apply("link", b.link_create(a.name))
    wait_for(lambda: connected(a, b.name), 20, f"{a.name}'s link to {b.name}")


def test_route_to_the_other_site_through_its_east_west_gateway(world):
    """A's Gateway -> the service B exports: mTLS from A's namespace to
    B's AUTO_PASSTHROUGH gateway on B's WAN address, relayed by SNI to
    B's workload, which answers; A's certificate (A's root) and B's (B's
    root) verified each by the other side."""
    make, site, serve = world
    net = make(2)
    a = site(1, "site-a", "a.example", "net-a", links=False).start()
    b = site(2, "site-b", "b.example", "net-b").start()
    ctx = tls_workload(b, "reviews", a.root_pem())
    wl = serve(2, lambda: Upstream(named_handler("reviews@b", ctx),
                                   host=b.wan))
    b.apply("svc", ew_gateway(b) + "---\n" + workload_entry(b, wl.port))
    link(a, b)
    wait_for(lambda: a.link("site-b")["services"] == 1, 15, "the catalog")
    edge = port()
    a.apply("route", route(edge, HOST).replace("bind: 127.0.0.1",
                                               f"bind: {a.mgmt}"))
    wait_for(lambda: get(a.mgmt, edge)[0] == 200, 15, "a 200 through B")
    assert get(a.mgmt, edge) == (200, "reviews@b")
    assert (f"via gateway {b.wan}:15443 (MeshLink default/site-b)"
            in a.clusters())
    # The TLS stream crossed the WAN: B's gateway saw it from A's WAN
    # address, and relayed it by Istio's SNI.
    stats = b.s.stats()
    assert any("auto_passthrough" in k and v for k, v in stats.items()
               if isinstance(v, int)), stats
    assert wl.conns >= 2
    assert net.sites[0]["wan"] != net.sites[1]["wan"]


def test_hbone_route_to_an_ambient_endpoint_in_the_other_site(world):
    """A's TCP route to an ambient endpoint in B: an HTTP/2 CONNECT
    tunnel from A's namespace to B's HBONE server (B's WAN address, port
    15008), which relays to B's backend. The sites share one root here
    (one mesh, two networks): B's CA is A's. B's HBONE server relays to
    what B's own registry has at the CONNECT's authority."""
    make, site, serve = world
    make(2)
    a = site(1, "site-a", "a.example", "net-a", links=False)
    a.cli("ca", "init")
    b = site(2, "site-b", "a.example", "net-b", links=False)
    shutil.copytree(a.dir / "ca", b.dir / "ca")
    a.start()
    b.start()
    up = serve(2, lambda: Upstream(echo, host=b.wan))
    ns = "istio-system"
    b.apply("hbone", f"""apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {{name: hbone, namespace: {ns}}}
spec:
  selector: {{}}
  servers:
  - port: {{number: 15008, name: hbone, protocol: HBONE}}
    bind: {b.wan}
    hosts: ["*/*.example.test"]
    tls: {{mode: ISTIO_MUTUAL}}
""" + ambient_service("amb.example.test", b.wan, up.port, "strait", ns))
    edge = port()
    a.apply("r", gateway_to(edge, "amb.example.test", ns).replace(
        "bind: 127.0.0.1", f"bind: {a.mgmt}")
        + ambient_service("amb.example.test", b.wan, up.port, "strait", ns))
    hb = f"gateway-{b.wan}-15008"
    wait_for(lambda: f"listener {hb}" in b.s.log(), 10, "B's HBONE listener")
    wait_for(lambda: f"listener gateway-{a.mgmt}-{edge}" in a.s.log(), 10,
             "A's TCP listener")
    n = 5
    socks = []
    for i in range(n):
        s = socket.create_connection((a.mgmt, edge), timeout=20)
        s.sendall(f"ping {i}".encode())
        socks.append(s)
    for i, s in enumerate(socks):
        want = f"ping {i}".encode()
        got = b""
        while len(got) < len(want):
            d = s.recv(100)
            if not d:
                break
            got += d
        assert got == want, (i, got, a.s.log()[-2000:])
    for s in socks:
        s.close()
    stats = b.s.stats()
    assert stats[f"listener.{hb}.hbone.tunnels_opened"] == n
    # One pooled HTTP/2 connection from A over the WAN.
    assert stats[f"listener.{hb}.downstream_cx_total"] == 1
    assert up.conns == n


def test_links_between_two_roots_and_refusals(world):
    """Three sites, three CAs: A links to B across the WAN (two roots,
    two trust domains, each side verifying the other with the other's
    bundle); A's link to C announced as b.example is refused for the
    trust domain, and B's MeshLink with C's roots for the root, each
    with what to fix, and neither changes what A has."""
    make, site, _ = world
    make(3)
    a = site(1, "site-a", "a.example", "net-a", links=False).start()
    b = site(2, "site-b", "b.example", "net-b").start()
    c = site(3, "site-c", "b.example", "net-c").start()
    assert a.root_pem().read_bytes() != b.root_pem().read_bytes()
    assert b.root_pem().read_bytes() != c.root_pem().read_bytes()
    b.apply("svc", exported(HOST))
    link(a, b)
    wait_for(lambda: a.link("site-b")["services"] == 1, 15, "the catalog")
    l = a.link("site-b")
    assert l["trustDomain"] == "b.example" and l["network"] == "net-b"
    assert l["catalog"] == f"{b.wan}:15016"
    (srv,) = b.links()["server"]["streams"]
    assert srv["site"] == "site-a"
    assert srv["peerId"] == "spiffe://a.example/ns/istio-system/sa/strait"
    # C (trust domain b.example, its own root) with B's trust domain
    # replaced: the catalog server is b.example's, not wrong.example's.
    ml_c = c.link_create("site-a").replace("name: site-c", "name: to-c")
    a.apply("link-c", ml_c.replace('trustDomain: "b.example"',
                                   'trustDomain: "wrong.example"'))
    err = wait_for(lambda: (a.link("to-c") or {}).get("lastError"), 15,
                   "the trust domain refusal")
    assert "trust domain mismatch" in err, err
    assert f"the catalog server at {c.wan}:15016" in err, err
    assert "spiffe://b.example/" in err and "set spec.trustDomain" in err
    # B's link with C's bundle: same trust domain, another root.
    ml_b = b.link_create("site-a2").replace("name: site-b", "name: b-by-c")
    bundle_c = ml_c[ml_c.index("  trustBundle: |"):]
    a.apply("link-bc", ml_b[:ml_b.index("  trustBundle: |")] + bundle_c)
    err = wait_for(lambda: (a.link("b-by-c") or {}).get("lastError"), 15,
                   "the root refusal")
    assert "not trusted by spec.trustBundle" in err, err
    assert "strait link create" in err
    for name in ("to-c", "b-by-c"):
        assert not a.link(name)["connected"]
        assert a.link(name)["services"] == 0
    # What was good stays: the link to B, its one stream and service.
    l = a.link("site-b")
    assert l["connected"] and l["streams"] == 1 and l["services"] == 1
    assert c.links()["server"]["accepted"] == 0
    assert b.links()["server"]["accepted"] == 1


class _SourceRecorder:
    """A listening socket that notes each accepted peer's address."""

    def __init__(self, sock, out):
        self.s = sock
        self.out = out

    def accept(self):
        c, addr = self.s.accept()
        self.out.append(addr[0])
        return c, addr

    def close(self):
        self.s.close()


class WanHelloRecorder(HelloRecorder):
    """test_multinet's recorder on a given address (a site's WAN
    address), also keeping each connection's source address."""

    def __init__(self, host):
        self.sock = socket.socket()
        self.sock.bind((host, 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.hellos = []
        self.sources = []
        self.stopped = threading.Event()
        self.sock = _SourceRecorder(self.sock, self.sources)
        self.t = threading.Thread(target=self.loop, daemon=True)
        self.t.start()


def test_the_bytes_on_the_wan(world, tmp_path):
    """What A sends across the WAN, seen in B's namespace: the ClientHello
    to a meshNetworks gateway (a recording listener on B's WAN address)
    with SNI outbound_.9080_._.HOST and Istio's ALPN byte for byte; and
    the CONNECT of an HBONE tunnel, header block as sent, recorded by a
    python3-h2 server on B's WAN address port 15008."""
    make, site, serve = world
    net = make(2)
    b_site = net.sites[1]
    rec = serve(2, lambda: WanHelloRecorder(b_site["wan"]))
    a = site(1, "site-a", "a.example", "net-a", links=False, extra=(
        f"meshNetworks: {{networks: {{net-b: {{gateways: [{{address: "
        f"{b_site['wan']}, port: {rec.port}}}]}}}}}}\n"))
    a.cli("ca", "init")
    # The h2 server: A's root for the client, a certificate A's CA
    # issued for the endpoint's identity (default/backend).
    h2dir = tmp_path / "h2"
    (h2dir / "ca").mkdir(parents=True)
    shutil.copy(a.root_pem(), h2dir / "ca" / "root-cert.pem")
    a.cli("ca", "issue", "--namespace", "default", "--service-account",
          "backend", "--out", str(h2dir / "backend"))
    h2srv = serve(2, lambda: H2ConnectServer(b_site["wan"], h2dir))
    a.start()
    edge, tcp = port(), port()
    a.apply("r", route(edge, "svc.example.test").replace(
        "bind: 127.0.0.1", f"bind: {a.mgmt}") + f"""---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: svc, namespace: default}}
spec:
  hosts: [svc.example.test]
  location: MESH_INTERNAL
  resolution: STATIC
  ports: [{{number: 9080, name: http, protocol: HTTP}}]
  endpoints:
  - {{address: 10.250.0.9, network: net-b, locality: eu/west/b1}}
---
""" + gateway_to(tcp, "amb.example.test").replace(
        "name: edge,", "name: edge-tcp,").replace(
        "bind: 127.0.0.1", f"bind: {a.mgmt}").replace(
        "gateways: [edge]", "gateways: [edge-tcp]")
        + ambient_service("amb.example.test", b_site["wan"], 9999, "backend"))
    wait_for(lambda: f"via gateway {b_site['wan']}:{rec.port}" in a.clusters(),
             10, "the meshNetworks gateway on /clusters")
    assert get(a.mgmt, edge)[0] in (502, 503)
    wait_for(lambda: rec.hellos, 10, "the ClientHello")
    assert rec.sources[0] == net.sites[0]["wan"]
    ext = hello_extensions(rec.hellos[0])
    assert ext[0] == sni_ext("outbound_.9080_._.svc.example.test")
    assert ext[16] == alpn_ext(["istio-http/1.1", "istio", "http/1.1"])
    # HBONE: A's CONNECT as B's side reads it.
    with socket.create_connection((a.mgmt, tcp), timeout=20) as s:
        s.sendall(b"over the wan")
        got = b""
        while len(got) < len(b"over the wan"):
            d = s.recv(100)
            if not d:
                break
            got += d
        src = s.getsockname()
    assert got == b"over the wan"
    assert h2srv.peers == [["spiffe://a.example/ns/istio-system/sa/strait"]]
    (hdrs,) = h2srv.requests
    assert [k for k, _ in hdrs] == [b":method", b":authority", b"baggage",
                                    b"forwarded", b"traceparent"], hdrs
    d = dict(hdrs)
    assert d[b":method"] == b"CONNECT"
    assert d[b":authority"] == f"{b_site['wan']}:9999".encode()
    assert d[b"baggage"] == b"k8s.namespace.name=istio-system"
    assert d[b"forwarded"] == \
        f'for="{src[0]}:{src[1]}";host=amb.example.test'.encode(), d[b"forwarded"]


FAILOVER_DR = """apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: reviews, namespace: default}
spec:
  host: reviews.default.svc.cluster.local
  trafficPolicy:
    tls:
      mode: ISTIO_MUTUAL
      subjectAltNames: [spiffe://a.example/ns/default/sa/reviews,
                        spiffe://b.example/ns/default/sa/reviews]
    loadBalancer:
      simple: ROUND_ROBIN
      localityLbSetting: {enabled: true}
    outlierDetection:
      consecutive5xxErrors: 1
      interval: 1s
      baseEjectionTime: 2s
      maxEjectionPercent: 100
"""


def test_locality_failover_to_the_other_site_and_back(world):
    """A prefers its two local backends (its zone); both die: their
    refused connects eject them and are retried on the next endpoint,
    B's gateway (B's network and region, level 1), so traffic moves to B
    with no request lost, as the README's Locality section says for
    refused connects; they come back on their ports: once their ejection
    (2 s) is over traffic returns to them, again with none lost."""
    make, site, serve = world
    net = make(2)
    a = site(1, "site-a", "a.example", "net-a", locality="region-a/zone-a",
             links=False).start()
    b = site(2, "site-b", "b.example", "net-b",
             locality="region-b/zone-b").start()
    ctx_b = tls_workload(b, "reviews", a.root_pem())
    wl_b = serve(2, lambda: Upstream(named_handler("b", ctx_b), host=b.wan))
    b.apply("svc", ew_gateway(b) + "---\n"
            + workload_entry(b, wl_b.port, export=False,
                             locality="region-b/zone-b"))
    ctx_a = tls_workload(a, "reviews", a.root_pem())
    local = {}

    def start_local(name, p=0):
        local[name] = serve(1, lambda: Upstream(named_handler(name, ctx_a),
                                                host=a.wan, port=p))
        return local[name].port

    ports = {n: start_local(n) for n in ("a1", "a2")}
    # B's roots and B's network's gateway come from the link.
    link(a, b)
    edge = port()
    a.apply("svc", route(edge, HOST).replace(
        "bind: 127.0.0.1", f"bind: {a.mgmt}").replace(
        "apiVersion: networking.istio.io/v1\nkind: DestinationRule\n"
        "metadata: {name: mtls, namespace: default}\nspec:\n"
        "  host: reviews.default.svc.cluster.local\n"
        "  trafficPolicy: {tls: {mode: ISTIO_MUTUAL}}\n---\n", "")
        + "---\n" + FAILOVER_DR + f"""---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: reviews, namespace: default}}
spec:
  hosts: [{HOST}]
  location: MESH_INTERNAL
  resolution: STATIC
  ports: [{{number: 9080, name: http, protocol: HTTP}}]
  endpoints:
  - {{address: {a.wan}, ports: {{http: {ports['a1']}}},
     locality: region-a/zone-a}}
  - {{address: {a.wan}, ports: {{http: {ports['a2']}}},
     locality: region-a/zone-a}}
  - {{address: 10.250.0.7, network: net-b, locality: region-b/zone-b}}
""")
    wait_for(lambda: f"via gateway {b.wan}:15443" in a.clusters(), 15,
             "B's gateway in A's cluster")
    failures = []

    def tally(n):
        got = {}
        for _ in range(n):
            code, body = get(a.mgmt, edge)
            if code != 200:
                failures.append((code, body))
                continue
            got[body] = got.get(body, 0) + 1
        return got

    wait_for(lambda: get(a.mgmt, edge)[0] == 200, 15, "the route")
    assert tally(20) == {"a1": 10, "a2": 10}
    assert failures == []
    for u in local.values():
        u.stop()
    t0 = time.monotonic()
    assert tally(30) == {"b": 30}, failures
    moved_s = time.monotonic() - t0
    assert failures == []
    assert f"::{a.wan}:{ports['a1']}::health_flags::/failed_outlier_check" \
        in a.clusters()
    (failovers,) = [v for k, v in a.s.stats().items()
                    if k.startswith("cluster.") and HOST in k
                    and k.endswith(".lb_priority_failover")]
    assert failovers >= 30
    # Back on their ports: traffic returns once the ejections end.
    for n in ("a1", "a2"):
        start_local(n, ports[n])
    t1 = time.monotonic()
    back = wait_for(lambda: (lambda r: r if r and r != {"b": 1} else None)(
        tally(1)), 20, "traffic back in A's zone")
    back_s = time.monotonic() - t1
    assert set(back) <= {"a1", "a2"}
    assert set(tally(20)) == {"a1", "a2"}
    assert failures == []
    print(f"failover across sites: 30 requests to B in {moved_s:.2f} s, "
          f"failback {back_s:.2f} s after the restart (ejection 2 s), "
          f"0 requests lost")


def test_partition_and_heal_with_jittered_reconnects(world):
    """50 MeshLinks from A to B (25 under ASan); B's WAN link goes down:
    each of A's streams, silent, is given up after 30 s (the README's
    "says nothing for 30 s") and retried with full jitter, its connects
    meeting "no route" meanwhile; the link comes back up: the 50 links
    reconnect spread over time, not in one burst, and B keeps one stream
    per site (each reconnect replaces the stale one)."""
    make, site, _ = world
    net = make(2)
    a = site(1, "site-a", "a.example", "net-a", links=False).start()
    # The n "sites" share A's one address here, which the per-source limit
    # (default 16) is for: stale streams and their reconnects both count.
    b = site(2, "site-b", "b.example", "net-b",
             links_extra=", maxConnectionsPerSource: 1024").start()
    b.apply("svc", exported(HOST))
    n = 25 if ASAN else 50
    a.apply("links", "---\n".join(
        b.link_create(f"site-a{i}").replace("name: site-b",
                                            f"name: site-b-{i}")
        for i in range(n)))

    def up():
        return sum(l["connected"] for l in a.links()["links"])

    wait_for(lambda: up() == n, 60, f"{n} links up")
    assert b.links()["server"]["active"] == n
    t_part = time.monotonic()
    net.partition(2)
    # Nothing breaks at once: the streams only go silent.
    wait_for(lambda: up() < n, 45, "the first stream given up")
    first_s = time.monotonic() - t_part
    wait_for(lambda: up() == 0, 45, "every stream given up")
    all_s = time.monotonic() - t_part
    assert 15 < first_s and all_s < 41, (first_s, all_s)
    # Retried meanwhile, against a WAN with no route to B: its ICMP
    # "unreachable" (rate limited by the WAN's kernel) or nothing at all
    # (the connect's 10 s deadline).
    errors = wait_for(lambda: {l["lastError"] for l in a.links()["links"]
                               if "said nothing" not in l["lastError"]},
                      20, "a reconnect meeting the partition")
    for e in errors:
        assert b.wan in e, e
        assert ("unreachable" in e.lower() or "no route" in e.lower()
                or "within 10 s" in e), e
    net.partition(2, up=True)
    t_heal = time.time() * 1000
    wait_for(lambda: up() == n, 120, f"{n} links back")
    back = sorted(l["connectedSinceMs"] - t_heal for l in a.links()["links"])
    spread = back[-1] - back[0]
    within_50ms = max(sum(1 for t in back if s <= t < s + 50) for s in back)
    print(f"partition: first stream given up after {first_s:.1f} s, all "
          f"after {all_s:.1f} s; after the heal {n} links back from "
          f"{back[0]:.0f} ms to {back[-1]:.0f} ms (spread {spread:.0f} ms, "
          f"median {back[n // 2]:.0f} ms, at most {within_50ms} within "
          f"50 ms); while cut off: {sorted(errors)}")
    assert spread > 500, back
    assert within_50ms < n // 2, back
    assert all(l["streams"] == 2 for l in a.links()["links"])
    wait_for(lambda: b.links()["server"]["active"] == n, 30,
             "one stream per site on B")
    assert all(l["services"] == 1 for l in a.links()["links"])
