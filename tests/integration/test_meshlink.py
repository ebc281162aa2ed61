"""Site links (strait.io/v1alpha1 MeshLink): `strait link create` on site
B prints the MeshLink site A applies; A then holds exactly one catalog
stream to B's catalog API (links.address) for the life of the link,
verified with B's SPIFFE trust bundle (no shared root), and merges the
services B exports (label strait.io/export) as registry entries on B's
network behind B's east-west gateway. Each site here is its own strait
process with its own CA and trust domain, on loopback."""
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import time

import pytest

from conftest import STRAIT, Strait, finish_strait, free_port, rss_kib, \
    upstream_factory, wait_for
from test_dns import DNSServer
from test_l4 import named_handler

ASAN = "asan" in os.environ.get("STRAIT_BIN", "")


class Site:
    """A strait with its own CA (trust domain td), network and catalog
    API, its resources in DIR/conf.d."""

    def __init__(self, root, name, td, network, locality="", gw="127.0.0.1:15443",
                 retain="", links=True, extra="", links_extra="",
                 config_extra=""):
        self.dir = root / name
        self.dir.mkdir()
        self.conf = self.dir / "conf.d"
        self.conf.mkdir()
        self.name = name
        self.td = td
        self.catalog_port = free_port()
        links_yaml = (f"links: {{address: 127.0.0.1:{self.catalog_port}, "
                      f"gateway: \"{gw}\"{links_extra}}}\n") if links else ""
        extra = (f"node: {{name: {name}, namespace: istio-system, "
                 f"network: {network}, locality: \"{locality}\"}}\n"
                 f"trustDomain: {td}\n"
                 f"config: {{dir: {self.conf}, debounce: 10ms"
                 f"{config_extra}}}\n"
                 f"ca: {{enabled: true, dir: {self.dir / 'ca'}, "
                 f"address: 127.0.0.1:{free_port()}}}\n" + links_yaml + extra)
        self.s = Strait(self.dir, "", workers=1, extra=extra)

    def start(self, env=None):
        self.s.start(env=env)
        return self

    def cli(self, *args, check=True):
        p = subprocess.run([STRAIT, *args, "-c", str(self.s.config)],
                           capture_output=True, text=True, timeout=30)
        if check:
            assert p.returncode == 0, p.stderr
        return p

    def link_create(self, site):
        return self.cli("link", "create", "--name", site).stdout

    def apply(self, name, text):
        tmp = self.conf / f".{name}.tmp"
        tmp.write_text(text)
        os.replace(tmp, self.conf / f"{name}.yaml")

    def remove(self, name):
        os.unlink(self.conf / f"{name}.yaml")

    def links(self):
        code, body, _ = self.s.get("/links")
        assert code == 200, body
        return json.loads(body)

    def link(self, name):
        for l in self.links()["links"]:
            if l["name"] == name:
                return l
        return None

    def clusters(self):
        return self.s.get("/clusters")[1]

    def config_dump(self):
        return json.loads(self.s.get("/config_dump")[1])


def route(port, host, svc_port=9080):
    """A Gateway HTTP server on port and a VirtualService sending every
    request to host, with ISTIO_MUTUAL (remote endpoints need mTLS)."""
    return f"""apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {{name: mtls, namespace: default}}
spec:
  host: {host}
  trafficPolicy: {{tls: {{mode: ISTIO_MUTUAL}}}}
---
apiVersion: networking.istio.io/v1
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
kind: VirtualService
metadata: {{name: to-b, namespace: default}}
spec:
  hosts: ["*"]
  gateways: [gw]
  http:
  - route:
    - destination: {{host: {host}, port: {{number: {svc_port}}}}}
"""


def exported(host, port=9080, ns="default", name="reviews", export=True,
             eps=(("v1", "eu/west/b1"), ("v2", "eu/west/b2")), sa="reviews"):
    label = ', labels: {"strait.io/export": "true"}' if export else ""
    e = "".join(f"  - {{address: 10.0.0.{i + 1}, labels: {{version: {v}}}, "
                f"locality: {loc}, serviceAccount: {sa}}}\n"
                for i, (v, loc) in enumerate(eps))
    return f"""apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: {name}, namespace: {ns}{label}}}
spec:
  hosts: [{host}]
  location: MESH_INTERNAL
  resolution: STATIC
  ports: [{{number: {port}, name: http, protocol: HTTP}}]
  endpoints:
{e}"""


@pytest.fixture
def sites(tmp_path):
    made = []

    def make(*a, **kw):
        s = Site(tmp_path, *a, **kw)
        made.append(s)
        return s

    yield make
    for s in made:
        finish_strait(s.s)


def connected(site, name):
    l = site.link(name)
    return l is not None and l["connected"] and l


def test_link_create_apply_merges_exported_services(sites):
    b = sites("site-b", "b.example", "net-b", locality="eu/west/b1",
              gw="127.0.0.1:25443").start()
    a = sites("site-a", "a.example", "net-a", links=False).start()
    b.apply("svc", exported("reviews.default.svc.cluster.local")
            + "---\n" + exported("secret.default.svc.cluster.local",
                                 name="secret", export=False))
    ml = b.link_create("site-a")
    assert "kind: MeshLink" in ml and "slk1.site-a." in ml
    # The catalog API by name, resolved by A's resolver ("localhost" is
    # 127.0.0.1 without a query, RFC 6761).
    assert f'address: "127.0.0.1:{b.catalog_port}"' in ml
    a.apply("link", ml.replace(f'address: "127.0.0.1:{b.catalog_port}"',
                               f'address: "localhost:{b.catalog_port}"'))
    wait_for(lambda: connected(a, "site-b") and
             a.link("site-b")["services"] == 1, 15, "the link")
    l = a.link("site-b")
    assert l["trustDomain"] == "b.example" and l["network"] == "net-b"
    assert l["catalog"] == f"localhost:{b.catalog_port}"
    assert l["streams"] == 1
    # The exported service is in A's registry, on B's network through
    # B's gateway, with B's localities; the unexported one never left B.
    (se,) = l["entries"]
    assert se["kind"] == "ServiceEntry"
    assert se["metadata"]["namespace"] == "default"
    assert se["metadata"]["labels"] == {"strait.io/meshlink": "site-b"}
    spec = se["spec"]
    assert spec["hosts"] == ["reviews.default.svc.cluster.local"]
    assert spec["ports"] == [{"number": 9080, "name": "http",
                              "protocol": "HTTP"}]
    assert spec["subjectAltNames"] == [
        "spiffe://b.example/ns/default/sa/reviews"]
    assert spec["resolution"] == "STATIC"
    # No address: reached through B's gateway only.
    assert [e for e in spec["endpoints"]] == [
        {"network": "net-b", "locality": "eu/west/b1", "weight": 1,
         "labels": {"version": "v1"}},
        {"network": "net-b", "locality": "eu/west/b2", "weight": 1,
         "labels": {"version": "v2"}}]
    # B's addresses never leave B.
    assert "10.0.0." not in json.dumps(a.links())
    # The entry is a resource in effect on A, and a Gateway route to the
    # host goes to B's gateway.
    names = [r["name"] for r in a.config_dump()["resources"]["resources"]]
    assert se["metadata"]["name"] in names
    gw_port = free_port()
    a.apply("route", route(gw_port, "reviews.default.svc.cluster.local"))
    wait_for(lambda: "127.0.0.1:25443" in a.clusters(), 10,
             "the merged endpoints on /clusters")
    clusters = a.clusters()
    assert ("reviews.default.svc.cluster.local||9080::127.0.0.1:25443::"
            "reached::via gateway 127.0.0.1:25443 (MeshLink default/site-b)"
            in clusters)
    assert "::127.0.0.1:25443::network::net-b" in clusters
    assert "::127.0.0.1:25443::locality::eu/west/b2" in clusters
    assert "secret.default" not in json.dumps(a.config_dump())
    # The credential is never shown.
    token = ml[ml.index("slk1."):].split('"')[0]
    assert token not in a.s.get("/config_dump")[1]
    assert token not in json.dumps(a.links())
    # B serves one stream, to site-a.
    srv = b.links()["server"]
    assert srv["accepted"] == 1 and srv["active"] == 1
    assert srv["streams"][0]["site"] == "site-a"
    # B verified A's certificate with the bundle A sent (A's own root):
    # mutual TLS between two roots, no shared one.
    assert srv["streams"][0]["peerId"] == \
        "spiffe://a.example/ns/istio-system/sa/strait"
    assert "trust domain a.example" in b.s.log() and "pinned" in b.s.log()


def linked(sites, retain="10m", b_extra={}):
    """Sites A and B (different CAs and trust domains), B exporting
    reviews, A linked to B and synced."""
    b = sites("site-b", "b.example", "net-b", gw="127.0.0.1:25443",
              **b_extra).start()
    a = sites("site-a", "a.example", "net-a", links=False).start()
    b.apply("svc", exported("reviews.default.svc.cluster.local"))
    ml = b.link_create("site-a").replace("retainFor: 10m",
                                         f"retainFor: {retain}")
    a.apply("link", ml)
    wait_for(lambda: connected(a, "site-b") and
             a.link("site-b")["services"] == 1, 15, "the link")
    # The link holds B's entry at once; the snapshot has it after the
    # gathered load that follows, built on the builder thread.
    wait_for(lambda: merged_names(a), 15, "B's entry in A's snapshot")
    return a, b, ml


def merged_names(a):
    return [r["name"] for r in a.config_dump()["resources"]["resources"]
            if r["kind"] == "ServiceEntry"]


def test_one_stream_across_reloads(sites):
    a, b, _ = linked(sites)
    n = 200 if ASAN else 1000
    for i in range(n):
        before = a.s.stats()["server.reloads_ok"]
        code, body, _ = a.s.get("/reload", method="POST")
        assert code == 200 and body.startswith(("reloaded", "reload queued")),\
            body
        # Each one took effect (a queued one runs once the workers have
        # switched), so this is n reloads, not n requests coalesced.
        wait_for(lambda: a.s.stats()["server.reloads_ok"] > before, 10,
                 "the reload")
        if i % 100 == 0:
            # A resource change too: the directory reloads as well.
            a.apply("other", exported(f"x{i}.default.svc.cluster.local",
                                      name=f"x{i}", export=False))
    assert a.s.stats()["server.reloads_ok"] >= n
    l = a.link("site-b")
    assert l["connected"] and l["streams"] == 1 and l["attempts"] == 1
    srv = b.links()["server"]
    assert srv["accepted"] == 1 and srv["active"] == 1, srv
    prom = a.s.get("/stats/prometheus")[1]
    assert 'strait_link_connected{link="default/site-b"} 1\n' in prom
    assert 'strait_link_services{link="default/site-b"} 1\n' in prom
    assert 'strait_link_streams_total{link="default/site-b"} 1\n' in prom
    assert "# TYPE strait_link_reconnects_total counter\n" in prom
    prom = b.s.get("/stats/prometheus")[1]
    assert "strait_link_server_streams_accepted_total 1\n" in prom
    assert "strait_link_server_streams_active 1\n" in prom
    # B's catalog changes reach A on the same stream.
    b.apply("svc2", exported("ratings.default.svc.cluster.local",
                             name="ratings"))
    wait_for(lambda: a.link("site-b")["services"] == 2, 10, "the update")
    assert a.link("site-b")["streams"] == 1
    assert b.links()["server"]["accepted"] == 1


def test_trust_domain_mismatch_is_refused_with_what_to_fix(sites):
    b = sites("site-b", "b.example", "net-b").start()
    a = sites("site-a", "a.example", "net-a", links=False).start()
    b.apply("svc", exported("reviews.default.svc.cluster.local"))
    ml = b.link_create("site-a")
    a.apply("link", ml.replace('trustDomain: "b.example"',
                               'trustDomain: "wrong.example"'))
    l = wait_for(lambda: (a.link("site-b") or {}).get("lastError"), 10,
                 "the refusal")
    assert "trust domain mismatch" in l and "spiffe://b.example/" in l
    assert "set spec.trustDomain" in l
    assert a.link("site-b")["services"] == 0
    assert not a.link("site-b")["connected"]
    assert "trust domain mismatch" in a.s.log()


def test_root_mismatch_is_refused_with_what_to_fix(sites):
    b = sites("site-b", "b.example", "net-b").start()
    c = sites("site-c", "b.example", "net-c").start()
    a = sites("site-a", "a.example", "net-a", links=False).start()
    ml_b = b.link_create("site-a")
    ml_c = c.link_create("site-a")
    bundle_c = ml_c[ml_c.index("  trustBundle: |"):]
    # B's link with C's roots (same trust domain, another CA).
    a.apply("link", ml_b[:ml_b.index("  trustBundle: |")] + bundle_c)
    l = wait_for(lambda: (a.link("site-b") or {}).get("lastError"), 10,
                 "the refusal")
    assert "not trusted by spec.trustBundle" in l, l
    assert "strait link create" in l
    assert b.links()["server"]["accepted"] == 0


def test_bad_meshlink_is_refused_at_load(sites):
    a = sites("site-a", "a.example", "net-a", links=False).start()
    a.apply("link", """apiVersion: strait.io/v1alpha1
kind: MeshLink
metadata: {name: bad}
spec:
  network: net-b
  trustDomain: b.example
  trustBundle: '{"keys":[]}'
  gateway: {address: 127.0.0.1}
  catalog: {address: somewhere}
  credential: {token: nope}
""")
    wait_for(lambda: "trust bundle holds no x509-svid authority" in a.s.log(),
             10, "the load error")
    log = a.s.log()
    assert "link.yaml" in log and "spec.catalog.address" in log
    assert "spec.credential.token" in log
    assert a.links()["links"] == []
    p = subprocess.run([STRAIT, "check", str(a.conf / "link.yaml")],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 1 and "spec.trustBundle" in p.stderr + p.stdout


def test_link_delete_cuts_off_and_retain_for_then_drops(sites):
    a, b, _ = linked(sites, retain="3s")
    name = merged_names(a)
    assert len(name) == 1
    b.cli("link", "delete", "--name", "site-a")
    wait_for(lambda: not a.link("site-b")["connected"], 10, "the cut")
    assert b.links()["server"]["closedDeleted"] == 1
    # Retained: the last catalog stays while reconnects are refused.
    l = wait_for(lambda: "no link for this site" in
                 (a.link("site-b")["lastError"] or "") and a.link("site-b"),
                 10, "the refusal")
    assert l["retained"] and l["services"] == 1
    assert merged_names(a) == name
    t0 = time.monotonic()
    wait_for(lambda: a.link("site-b")["services"] == 0, 10, "the drop")
    assert time.monotonic() - t0 > 1.0
    wait_for(lambda: merged_names(a) == [], 10, "the entries removed")


def test_removing_the_meshlink_removes_every_entry(sites):
    a, b, _ = linked(sites)
    b.apply("svc2", exported("ratings.default.svc.cluster.local",
                             name="ratings"))
    wait_for(lambda: len(merged_names(a)) == 2, 10, "two entries")
    gw_port = free_port()
    a.apply("route", route(gw_port, "reviews.default.svc.cluster.local"))
    wait_for(lambda: "127.0.0.1:25443" in a.clusters(), 10, "the cluster")
    # A route to a linked host keeps the host needed: removing the link
    # first would be refused (IST0101, REGISTRY_ONLY) and change nothing.
    a.remove("route")
    wait_for(lambda: "127.0.0.1:25443" not in a.clusters(), 10,
             "the route gone")
    a.remove("link")
    wait_for(lambda: a.links()["links"] == [], 10, "the link gone")
    wait_for(lambda: merged_names(a) == [], 10, "the entries gone")
    wait_for(lambda: b.links()["server"]["active"] == 0, 10,
             "B's stream closed")


def test_relink_soak_memory_flat(sites):
    """create on B, apply on A, wait for the merge, remove on A, wait for
    the entries to go: many times, with A's RSS back to where it was."""
    b = sites("site-b", "b.example", "net-b").start()
    # An address sanitizer build keeps freed memory in quarantine; keep it
    # small so the resident size shows what is still referenced.
    env = dict(os.environ)
    env["ASAN_OPTIONS"] = (env.get("ASAN_OPTIONS", "") +
                           ":quarantine_size_mb=1").lstrip(":")
    # Each cycle is two loads (the link's entries in, then out): at the
    # default of 4 loads a second the soak would spend most of its time
    # waiting for its turn, which is not what it measures.
    a = sites("site-a", "a.example", "net-a", links=False,
              config_extra=", maxRebuildsPerSecond: 1000").start(env=env)
    b.apply("svc", exported("reviews.default.svc.cluster.local"))
    n = 200 if ASAN else 1000

    def cycle():
        a.apply("link", b.link_create("site-a"))
        wait_for(lambda: merged_names(a) != [], 10, "the merge")
        a.remove("link")
        wait_for(lambda: a.links()["links"] == [] and merged_names(a) == [],
                 10, "the removal")

    for _ in range(n // 10):
        cycle()
    base = rss_kib(a.s.proc.pid)
    for _ in range(n - n // 10):
        cycle()
    grown = rss_kib(a.s.proc.pid) - base
    print(f"relink soak: {n} cycles, RSS {base} KiB -> +{grown} KiB")
    assert grown < 4096, f"RSS grew by {grown} KiB over {n} relinks"
    srv = b.links()["server"]
    assert srv["accepted"] == n and srv["active"] == 0, srv


def test_reconnect_backoff_is_jittered_over_50_links(sites):
    """50 MeshLinks on A to B; B restarts: the links come back spread over
    time by full jitter, not in one burst."""
    # The 50 "sites" share one source address here, which the per-source
    # limit (default 16) is for; real sites each have their own.
    b = sites("site-b", "b.example", "net-b",
              links_extra=", maxConnectionsPerSource: 64").start()
    a = sites("site-a", "a.example", "net-a", links=False).start()
    b.apply("svc", exported("reviews.default.svc.cluster.local"))
    docs = []
    for i in range(50):
        ml = b.link_create(f"site-a{i}").replace(
            "name: site-b", f"name: site-b-{i}")
        docs.append(ml)
    a.apply("links", "---\n".join(docs))
    wait_for(lambda: sum(l["connected"] for l in a.links()["links"]) == 50,
             30, "50 links up")
    b.s.stop()
    b.s.kill()
    wait_for(lambda: not any(l["connected"] for l in a.links()["links"]),
             15, "every link down")
    t_down = time.time() * 1000
    b.s.start()
    wait_for(lambda: sum(l["connected"] for l in a.links()["links"]) == 50,
             120, "50 links back")
    back = sorted(l["connectedSinceMs"] - t_down for l in a.links()["links"])
    spread = back[-1] - back[0]
    gaps = [y - x for x, y in zip(back, back[1:])]
    print(f"reconnects of 50 links after B restarted: first {back[0]:.0f} ms,"
          f" last {back[-1]:.0f} ms, spread {spread:.0f} ms, median "
          f"{back[25]:.0f} ms, largest gap {max(gaps):.0f} ms")
    # Full jitter over at least the first 1 s window: not one burst.
    assert spread > 500, back
    within_50ms = max(sum(1 for t in back if s <= t < s + 50) for s in back)
    assert within_50ms < 25, back
    # Each came back with at most a handful of attempts, every one
    # counted, and the stream count per link is now 2.
    assert all(l["streams"] == 2 for l in a.links()["links"])
    assert b.links()["server"]["active"] == 50


def test_link_cli_and_bootstrap_errors(tmp_path):
    cfg = tmp_path / "s.yaml"
    cfg.write_text('links: {gateway: "nope", advertise: "x"}\n')
    p = subprocess.run([STRAIT, "check", "-c", str(cfg)], capture_output=True,
                       text=True, timeout=30)
    assert p.returncode == 1
    assert "links.advertise: 'x' is not IP:port" in p.stderr
    assert "links.gateway: 'nope' is not HOST:PORT" in p.stderr
    cadir = tmp_path / "ca"
    base = f"trustDomain: b.example\nca: {{enabled: true, dir: {cadir}}}\n"
    subprocess.run([STRAIT, "ca", "init", "-c", str(cfg)], check=False,
                   capture_output=True, timeout=30)

    def link(body, *args):
        cfg.write_text(base + body)
        return subprocess.run([STRAIT, "link", *args, "-c", str(cfg)],
                              capture_output=True, text=True, timeout=30)

    p = link("", "create", "--name", "a")
    assert p.returncode == 1 and "node.network is empty" in p.stderr
    p = link("node: {network: n}\n", "create", "--name", "a")
    assert p.returncode == 1 and "links.gateway must be HOST:PORT" in p.stderr
    p = link("node: {network: n}\nlinks: {gateway: \"gw:15443\", "
             "address: 0.0.0.0:15016}\n", "create", "--name", "a")
    assert p.returncode == 1 and "links.advertise" in p.stderr
    p = link("node: {network: n}\nlinks: {gateway: \"gw:15443\", "
             "address: 0.0.0.0:15016}\n", "create", "--name", "Bad_Name")
    assert p.returncode == 2 and "DNS-1123" in p.stderr
    p = link("node: {network: n}\nlinks: {gateway: \"gw.example:15443\", "
             "address: 0.0.0.0:15016, advertise: \"192.0.2.1:15016\"}\n",
             "create", "--name", "a")
    assert p.returncode == 3 and "strait ca init" in p.stderr
    cfg.write_text(base)
    assert subprocess.run([STRAIT, "ca", "init", "-c", str(cfg)],
                          capture_output=True, timeout=30).returncode == 0
    p = link("node: {network: n}\nlinks: {gateway: \"gw.example:15443\", "
             "address: 0.0.0.0:15016, advertise: \"192.0.2.1:15016\"}\n",
             "create", "--name", "a")
    assert p.returncode == 0, p.stderr
    assert 'address: "gw.example"' in p.stdout
    assert 'address: "192.0.2.1:15016"' in p.stdout
    assert (cadir / "links" / "a").exists()
    assert link("", "delete", "--name", "a").returncode == 0
    p = link("", "delete", "--name", "a")
    assert p.returncode == 3 and "no such link" in p.stderr
    assert link("", "frob").returncode == 2
    assert link("", "create").returncode == 2


def test_the_linking_site_is_pinned_to_its_first_trust(sites):
    """B pins A's trust domain and roots on the first stream; A with a
    new CA (another root) is refused with what to do."""
    a, b, _ = linked(sites)
    a.s.stop()
    a.s.kill()
    shutil.rmtree(a.dir / "ca")
    a.start()
    l = wait_for(lambda: "trust changed" in
                 ((a.link("site-b") or {}).get("lastError") or "") and
                 a.link("site-b"), 15, "the refusal")
    assert "(403)" in l["lastError"]
    assert "strait link create --name site-a" in l["lastError"]
    assert not l["connected"]
    assert b.links()["server"]["accepted"] == 1


def catalog_request(port, head, body=b""):
    """One request to a catalog API without a client certificate; the
    status and the JSON error."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with ctx.wrap_socket(raw) as s:
            s.sendall(head + body)
            out = b""
            while True:
                d = s.recv(65536)
                if not d:
                    break
                out += d
    status = int(out.split(b" ", 2)[1])
    return status, json.loads(out.split(b"\r\n\r\n", 1)[1])["error"]


def test_catalog_api_refusals(sites):
    b = sites("site-b", "b.example", "net-b").start()
    ml = b.link_create("site-x")
    token = ml[ml.index("slk1."):].split('"')[0]
    port = b.catalog_port
    ok = (f"POST /v1/catalog HTTP/1.1\r\nHost: b\r\nAuthorization: Bearer "
          f"{token}\r\nContent-Length: 2\r\n\r\n").encode()
    assert catalog_request(port, ok, b"{}") == (
        403, "present this site's SPIFFE certificate (the node's: "
        "ca.enabled or a join) with the link")
    st, err = catalog_request(port, ok.replace(token.encode(),
                                               b"slk1.site-x." + b"A" * 43),
                              b"{}")
    assert st == 401 and "does not match" in err
    st, err = catalog_request(port, ok.replace(b"site-x", b"site-y"), b"{}")
    assert st == 401 and "no link for this site" in err
    st, err = catalog_request(port, b"POST /v1/catalog HTTP/1.1\r\nHost: b"
                              b"\r\nContent-Length: 0\r\n\r\n")
    assert st == 401 and "Authorization: Bearer" in err
    st, err = catalog_request(port, ok.replace(b"POST", b"GET"), b"{}")
    assert st == 405
    st, err = catalog_request(port, ok.replace(b"/v1/catalog", b"/x"), b"{}")
    assert st == 404
    srv = b.links()["server"]
    assert srv["refused"] == 6 and srv["accepted"] == 0


@pytest.mark.parametrize("gw_host", ["127.0.0.1", "gw.b.example"])
def test_route_to_the_other_site_through_its_east_west_gateway(
        sites, upstream_factory, gw_host):
    """A's Gateway -> a service B exports: ISTIO_MUTUAL from A with the
    SNI outbound_.9080_._.HOST to B's AUTO_PASSTHROUGH gateway, relayed
    untouched to B's workload, whose certificate (B's root) A verifies
    with B's bundle and which verifies A's certificate (A's root): two
    roots, two trust domains, no shared one. The gateway by address, and
    by name (resolved by A, as istiod resolves hostname gateways)."""
    b_gw = free_port()
    b = sites("site-b", "b.example", "net-b",
              gw=f"{gw_host}:{b_gw}").start()
    dns = DNSServer()
    dns.records["gw.b.example"] = ["127.0.0.1"]
    try:
        a = sites("site-a", "a.example", "net-a", links=False,
                  extra=f"dns: {{nameservers: [\"127.0.0.1:{dns.port}\"]}}\n"
                  ).start()
        route_through_b(a, b, b_gw, upstream_factory)
        if gw_host != "127.0.0.1":
            assert ("gw.b.example", 1) in dns.queries
            assert (f"via gateway 127.0.0.1:{b_gw} (MeshLink default/site-b)"
                    in a.clusters())
    finally:
        dns.stop()


def route_through_b(a, b, b_gw, upstream_factory):
    # The workload on B: B's certificate for default/reviews, and it
    # requires a client certificate under A's root.
    wl = b.dir / "wl"
    b.cli("ca", "issue", "--namespace", "default", "--service-account",
          "reviews", "--out", str(wl))
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(str(wl / "cert-chain.pem"), str(wl / "key.pem"))
    ctx.load_verify_locations(str(a.dir / "ca" / "root-cert.pem"))
    ctx.verify_mode = ssl.CERT_REQUIRED
    ctx.set_alpn_protocols(["http/1.1"])
    up = upstream_factory(named_handler("reviews@b", ctx))
    b.apply("svc", f"""apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {{name: cross-network-gateway, namespace: istio-system}}
spec:
  selector: {{}}
  servers:
  - port: {{number: {b_gw}, name: tls, protocol: TLS}}
    bind: 127.0.0.1
    tls: {{mode: AUTO_PASSTHROUGH}}
    hosts: ["*.local"]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: reviews, namespace: default,
           labels: {{"strait.io/export": "true"}}}}
spec:
  hosts: [reviews.default.svc.cluster.local]
  location: MESH_INTERNAL
  resolution: STATIC
  ports: [{{number: 9080, name: http, protocol: HTTP}}]
  endpoints:
  - {{address: 127.0.0.1, ports: {{http: {up.port}}},
     serviceAccount: reviews, locality: eu/west/b1}}
""")
    a.apply("link", b.link_create("site-a"))
    wait_for(lambda: connected(a, "site-b") and
             a.link("site-b")["services"] == 1, 15, "the link")
    port = free_port()
    a.apply("route", route(port, "reviews.default.svc.cluster.local"))

    def get():
        try:
            with socket.create_connection(("127.0.0.1", port),
                                          timeout=5) as c:
                c.sendall(b"GET / HTTP/1.1\r\nHost: reviews\r\n"
                          b"Connection: close\r\n\r\n")
                out = b""
                while True:
                    d = c.recv(65536)
                    if not d:
                        return out
                    out += d
        except OSError:
            return b""

    out = wait_for(lambda: (lambda r: r if b" 200 " in r.split(b"\r\n")[0]
                            else None)(get()), 15, "a 200 through B")
    assert out.endswith(b"reviews@b"), out
    # B's gateway relayed one TLS stream by Istio's SNI.
    prom = b.s.get("/stats")[1]
    assert "auto_passthrough" in prom


def test_binary_upgrade_of_the_linked_site_keeps_the_link(sites):
    """B upgrades its binary: the catalog API's socket moves to the new
    process (no address in use), A's link reconnects to it and keeps its
    services."""
    a, b, _ = linked(sites)
    old = b.s.stats()["server.pid"]
    p = subprocess.run([STRAIT, "upgrade", "-c", str(b.s.config)],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr + b.s.log()
    new = b.s.stats()["server.pid"]
    assert new != old
    wait_for(lambda: b.s.proc.poll() is not None, 40, "the old one to exit")
    assert b.s.proc.returncode == 0
    # The old process's stream ended with it; A is back on the new one.
    wait_for(lambda: connected(a, "site-b") and
             a.link("site-b")["streams"] == 2, 30, "the reconnect")
    assert a.link("site-b")["services"] == 1
    assert b.links()["server"]["active"] == 1
    os.kill(new, signal.SIGTERM)
    wait_for(lambda: not os.path.exists(f"/proc/{new}"), 40, "the new one")


def raw_connect(port, source, timeout=10):
    return socket.create_connection(("127.0.0.1", port), timeout=timeout,
                                    source_address=(source, 0))


def closed_by_peer(sock):
    """Blocks until the peer closes (EOF or reset); False on our timeout."""
    try:
        while True:
            if not sock.recv(4096):
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except socket.timeout:
        return False


def still_open(sock):
    sock.setblocking(False)
    try:
        return sock.recv(1) not in (b"",)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        sock.setblocking(True)


def test_catalog_api_per_source_limit_leaves_the_links_alone(sites):
    """Issue 28: one source holding idle connections to the catalog API
    gets at most links.maxConnectionsPerSource (default 16): the 17th is
    closed at accept, counted and logged, and a linked site from another
    source still connects and syncs while the 16 are held."""
    b = sites("site-b", "b.example", "net-b",
              links_extra=", handshakeTimeout: 60s").start()
    a = sites("site-a", "a.example", "net-a", links=False).start()
    b.apply("svc", exported("reviews.default.svc.cluster.local"))
    port = b.catalog_port
    held = [raw_connect(port, "127.0.0.2") for _ in range(16)]
    try:
        wait_for(lambda: b.links()["server"]["connections"] == 16, 10,
                 "the 16 connections to be accepted")
        assert b.links()["server"]["refusedPerSource"] == 0
        held.append(raw_connect(port, "127.0.0.2"))
        wait_for(lambda: b.links()["server"]["refusedPerSource"] == 1, 10,
                 "the 17th connection from one source to be refused")
        assert closed_by_peer(held[-1])
        assert "per-source connection limit" in b.s.log()
        assert all(still_open(x) for x in held[:16])
        # Another source (A, from 127.0.0.1) links and syncs meanwhile.
        a.apply("link", b.link_create("site-a"))
        wait_for(lambda: connected(a, "site-b") and
                 a.link("site-b")["services"] == 1, 15, "the link")
        srv = b.links()["server"]
        assert srv["active"] == 1 and srv["refusedPerSource"] == 1
        assert all(still_open(x) for x in held[:16])
        metrics = b.s.get("/stats/prometheus")[1]
        assert "strait_link_server_refused_connections_total{reason=" \
            "\"per_source\"} 1" in metrics
    finally:
        for x in held:
            x.close()
    # Once its connections are gone the source may connect again.
    wait_for(lambda: b.links()["server"]["connections"] == 1, 10,
             "the idle connections to be gone")
    ml = b.link_create("site-x")
    token = ml[ml.index("slk1."):].split('"')[0]
    st, err = catalog_request(
        port, (f"POST /v1/catalog HTTP/1.1\r\nHost: b\r\nAuthorization: "
               f"Bearer {token}\r\nContent-Length: 2\r\n\r\n").encode(),
        b"{}")
    assert st == 403


def test_catalog_api_closes_a_connection_that_never_handshakes(sites):
    """Issue 28: a connection to the catalog API that never completes its
    TLS handshake is closed at links.handshakeTimeout (here 300ms), and
    counted; the test waits for the close, not for a time."""
    b = sites("site-b", "b.example", "net-b",
              links_extra=", handshakeTimeout: 300ms",
              extra="log: {level: debug}\n").start()
    silent = raw_connect(b.catalog_port, "127.0.0.4", timeout=30)
    half = raw_connect(b.catalog_port, "127.0.0.4", timeout=30)
    try:
        # A ClientHello's first bytes only: a handshake begun, never done.
        half.sendall(b"\x16\x03\x01\x00\xc8\x01\x00")
        assert closed_by_peer(silent)
        assert closed_by_peer(half)
    finally:
        silent.close()
        half.close()
    wait_for(lambda: b.links()["server"]["timedOut"] == 2, 10,
             "both to be counted")
    assert b.s.log().count("timed out (handshake or request)") == 2
    assert b.links()["server"]["connections"] == 0


def local_entry(host, port, name="api", ns="default"):
    """A ServiceEntry of this site's own for host, one local endpoint."""
    return f"""apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: {name}, namespace: {ns}}}
spec:
  hosts: [{host}]
  location: MESH_INTERNAL
  resolution: STATIC
  ports: [{{number: 9080, name: http, protocol: HTTP}}]
  endpoints:
  - address: 127.0.0.1
    ports: {{http: {port}}}
"""


def conflicts(site, name):
    l = site.link(name)
    return l is not None and [(c["host"], c["owner"]) for c in l["conflicts"]]


def linked_hosts(a):
    return sorted(h for r in a.config_dump()["resources"]["resources"]
                  if r["kind"] == "ServiceEntry"
                  and r.get("labels", {}).get("strait.io/meshlink")
                  for h in [r["name"]])


def test_a_linked_site_cannot_take_over_a_host_this_site_defines(sites):
    """Issue 28: B announces api.internal, which A defines with its own
    ServiceEntry. A leaves B's entry out (its own endpoint stays the only
    one, its traffic stays home), reports the conflict on /links, in the
    log and as strait_link_conflicts, and still merges B's other host.
    Only spec.import (hosts, or the owner's namespace) lets it merge."""
    b = sites("site-b", "b.example", "net-b", gw="127.0.0.1:25443").start()
    a = sites("site-a", "a.example", "net-a", links=False).start()
    b.apply("svc", exported("api.internal", name="api") + "---\n"
            + exported("reviews.default.svc.cluster.local"))
    local_port = free_port()
    gw_port = free_port()
    a.apply("api", local_entry("api.internal", local_port))
    a.apply("route", route(gw_port, "api.internal"))
    wait_for(lambda: f"127.0.0.1:{local_port}" in a.clusters(), 10,
             "the local endpoint")
    ml = b.link_create("site-a")
    a.apply("link", ml)
    wait_for(lambda: connected(a, "site-b") and
             a.link("site-b")["services"] == 2 and
             conflicts(a, "site-b"), 15, "the link and its conflict")
    assert conflicts(a, "site-b") == [("api.internal",
                                      "ServiceEntry default/api")]
    # Only reviews was merged; api.internal keeps its one local endpoint.
    hosts = [r["spec"]["hosts"][0] for r in a.link("site-b")["entries"]]
    assert sorted(hosts) == ["api.internal",
                             "reviews.default.svc.cluster.local"]
    dump = json.dumps(a.config_dump())
    assert "reviews.default.svc.cluster.local" in dump
    api = [l for l in a.clusters().splitlines()
           if l.startswith("api.internal|")]
    assert any(f"127.0.0.1:{local_port}" in l for l in api), api
    assert not any("25443" in l for l in api), api
    assert ("which ServiceEntry default/api owns here; left out"
            in a.s.log())
    metrics = a.s.get("/stats/prometheus")[1]
    assert 'strait_link_conflicts{link="default/site-b"} 1' in metrics
    # A namespace rule for another namespace changes nothing ...
    a.apply("link", ml + "  import: {namespaces: [other]}\n")
    wait_for(lambda: "namespaces" in json.dumps(a.config_dump()), 10,
             "the MeshLink with the import")
    assert conflicts(a, "site-b") == [("api.internal",
                                      "ServiceEntry default/api")]
    # ... the owner's namespace merges it, on the same stream.
    a.apply("link", ml + "  import: {namespaces: [default]}\n")
    wait_for(lambda: any("25443" in l for l in a.clusters().splitlines()
                         if l.startswith("api.internal|")), 10,
             "B's endpoints joining api.internal")
    assert conflicts(a, "site-b") == []
    assert a.link("site-b")["streams"] == 1
    metrics = a.s.get("/stats/prometheus")[1]
    assert 'strait_link_conflicts{link="default/site-b"} 0' in metrics
    # And so does naming the host; without an import it is left out again.
    a.apply("link", ml + "  import: {hosts: [\"*.internal\"]}\n")
    wait_for(lambda: "*.internal" in json.dumps(a.config_dump()), 10,
             "the host import")
    assert conflicts(a, "site-b") == []
    a.apply("link", ml)
    wait_for(lambda: conflicts(a, "site-b") == [
        ("api.internal", "ServiceEntry default/api")], 10,
        "the conflict again")
    wait_for(lambda: not any("25443" in l
                             for l in a.clusters().splitlines()
                             if l.startswith("api.internal|")), 10,
             "B's endpoints to leave api.internal")


def test_a_linked_site_cannot_take_over_another_links_host(sites):
    """Issue 28: B announces reviews first; C, linked later, announces it
    too. C's entry is left out (reviews stays B's) and reported with its
    owner, until C's MeshLink imports it."""
    b = sites("site-b", "b.example", "net-b", gw="127.0.0.1:25443").start()
    c = sites("site-c", "c.example", "net-c", gw="127.0.0.1:26443").start()
    a = sites("site-a", "a.example", "net-a", links=False).start()
    b.apply("svc", exported("reviews.default.svc.cluster.local"))
    c.apply("svc", exported("reviews.default.svc.cluster.local") + "---\n"
            + exported("ratings.default.svc.cluster.local", name="ratings"))
    a.apply("link-b", b.link_create("site-a"))
    wait_for(lambda: connected(a, "site-b") and
             a.link("site-b")["services"] == 1, 15, "the link to B")
    mlc = c.link_create("site-a")
    a.apply("link-c", mlc)
    wait_for(lambda: connected(a, "site-c") and
             a.link("site-c")["services"] == 2 and
             conflicts(a, "site-c"), 15, "the link to C and its conflict")
    assert conflicts(a, "site-c") == [("reviews.default.svc.cluster.local",
                                      "MeshLink default/site-b")]
    assert conflicts(a, "site-b") == []
    gw_port = free_port()
    a.apply("route", route(gw_port, "reviews.default.svc.cluster.local"))
    wait_for(lambda: "25443" in a.clusters(), 10, "B's endpoints")
    assert "26443" not in a.clusters()
    assert "ratings.default.svc.cluster.local" in json.dumps(a.config_dump())
    metrics = a.s.get("/stats/prometheus")[1]
    assert 'strait_link_conflicts{link="default/site-c"} 1' in metrics
    # Imported, both sites serve it (failover across sites).
    a.apply("link-c", mlc + "  import: {hosts: "
            "[reviews.default.svc.cluster.local]}\n")
    wait_for(lambda: "26443" in a.clusters(), 10, "C's endpoints too")
    assert "25443" in a.clusters() and conflicts(a, "site-c") == []


def test_strait_check_reports_a_link_entry_for_a_host_this_site_owns(sites,
                                                                      tmp_path):
    """Issue 28: what `strait check` can know offline: a MeshLink's entry
    kept in the configuration (as /config_dump shows it) for a host a
    ServiceEntry of this site defines is reported (STR0011, naming the
    owner and the fix), and an import makes it go."""
    b = sites("site-b", "b.example", "net-b").start()
    ml = b.link_create("site-a")
    entry = """apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata:
  name: site-b-0123456789
  namespace: default
  labels: {"strait.io/meshlink": site-b}
spec:
  hosts: [api.internal]
  location: MESH_INTERNAL
  resolution: STATIC
  ports: [{number: 9080, name: http, protocol: HTTP}]
  endpoints: [{network: net-b, weight: 1}]
"""
    d = tmp_path / "check"
    d.mkdir()
    (d / "local.yaml").write_text(local_entry("api.internal", 8080))
    (d / "entry.yaml").write_text(entry)
    (d / "link.yaml").write_text(ml)
    r = subprocess.run([STRAIT, "check", str(d)], capture_output=True,
                       text=True, timeout=30)
    assert "STR0011" in (r.stdout + r.stderr), (r.stdout + r.stderr)
    assert "ServiceEntry default/api owns it here" in (r.stdout + r.stderr), (r.stdout + r.stderr)
    (d / "link.yaml").write_text(ml + "  import: {hosts: [api.internal]}\n")
    r = subprocess.run([STRAIT, "check", str(d)], capture_output=True,
                       text=True, timeout=30)
    assert "STR0011" not in (r.stdout + r.stderr), (r.stdout + r.stderr)
    # A bad import is refused with where and why.
    (d / "link.yaml").write_text(ml + "  import: {hosts: [\"*\"], "
                                 "namespaces: [\"Not_A_Ns\"]}\n")
    r = subprocess.run([STRAIT, "check", str(d)], capture_output=True,
                       text=True, timeout=30)
    assert r.returncode != 0
    assert "spec.import.hosts[0]" in (r.stdout + r.stderr) and "take over" in (r.stdout + r.stderr)
    assert "spec.import.namespaces[0]" in (r.stdout + r.stderr), (r.stdout + r.stderr)
