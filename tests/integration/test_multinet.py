"""Two sites on loopback, two networks (issue 15 items 1 and 2): site A's
strait, on network net-a, routes to a service whose endpoint is on
net-b; its bootstrap's meshNetworks says net-b is reached through site
B's east-west gateway (a strait Gateway server with tls mode
AUTO_PASSTHROUGH), so A originates mTLS to that gateway with Istio's SNI
outbound_.PORT_.SUBSET_.HOST and ALPN, its own SPIFFE certificate, and
verifies the destination service's identity (B's mesh server behind the
gateway), never the gateway's. Also: the ClientHello checked byte for
byte by a recording listener, SAN verification failing closed, remote
endpoints of a non-mTLS cluster skipped and shown, a hostname gateway
resolved through strait's DNS cache with istiod's 30 s minimum TTL, and
/clusters showing network, locality and the gateway."""
import os
import signal
import socket
import struct
import subprocess
import threading

from conftest import STRAIT, free_port, responder, wait_for
from test_ca import Node, nodes, token  # noqa: F401 (nodes is a fixture)
from test_dns import DNSServer

B_ID = "spiffe://example.org/ns/istio-system/sa/strait"
SVC_PORT = 9080

backend = responder(lambda head: b"site-b backend " + head.split(b" ")[1])

# Site B: the east-west gateway (AUTO_PASSTHROUGH) and the destination
# workload (an ISTIO_MUTUAL HTTPS server in front of the backend), which
# is what every host below resolves to at B.
SITE_B = """apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {{name: cross-network-gateway, namespace: istio-system}}
spec:
  selector: {{}}
  servers:
  - port: {{number: {ew}, name: tls, protocol: TLS}}
    bind: 127.0.0.1
    tls: {{mode: AUTO_PASSTHROUGH}}
    hosts: ["*.example.test"]
  - port: {{number: {mesh}, name: https-mesh, protocol: HTTPS}}
    bind: 127.0.0.1
    tls: {{mode: ISTIO_MUTUAL}}
    hosts: ["*"]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: exported, namespace: istio-system}}
spec:
  hosts: [b.example.test, wrong.example.test, d.example.test]
  location: MESH_INTERNAL
  resolution: STATIC
  ports: [{{number: {svc}, name: http, protocol: HTTP}}]
  endpoints:
  - {{address: 127.0.0.1, ports: {{http: {mesh}}}}}
  # An endpoint of the same service on site A's network: B's east-west
  # gateway never sends there (its own network view).
  - {{address: 10.1.0.9, network: net-a}}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {{name: exported, namespace: istio-system}}
spec:
  host: b.example.test
  trafficPolicy: {{tls: {{mode: ISTIO_MUTUAL}}}}
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: backend, namespace: istio-system}}
spec:
  hosts: [backend.internal]
  resolution: STATIC
  ports: [{{number: {backend}, name: http, protocol: HTTP}}]
  endpoints: [{{address: 127.0.0.1}}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: in, namespace: istio-system}}
spec:
  hosts: ["*"]
  gateways: [cross-network-gateway]
  http:
  - route: [{{destination: {{host: backend.internal}}}}]
"""


def service(host, network, proto="HTTP", extra=""):
    return f"""---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: {host.split('.')[0]}, namespace: team}}
spec:
  hosts: [{host}]
  location: MESH_INTERNAL
  resolution: STATIC
  ports: [{{number: {SVC_PORT}, name: http, protocol: {proto}}}]
  endpoints:
  - {{address: 10.20.0.5, network: {network}, locality: us/east/b,
     labels: {{version: v1}}}}
{extra}"""


def mutual(host, sans=(B_ID,), subsets=""):
    return f"""---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {{name: {host.split('.')[0]}, namespace: team}}
spec:
  host: {host}
  trafficPolicy:
    tls: {{mode: ISTIO_MUTUAL, subjectAltNames: [{', '.join(sans)}]}}
{subsets}"""


def site_a(edge, tcp):
    return f"""apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {{name: edge, namespace: team}}
spec:
  selector: {{}}
  servers:
  - port: {{number: {edge}, name: http, protocol: HTTP}}
    bind: 127.0.0.1
    hosts: ["*"]
  - port: {{number: {tcp}, name: tcp, protocol: TCP}}
    bind: 127.0.0.1
    hosts: ["*"]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: out, namespace: team}}
spec:
  hosts: ["*"]
  gateways: [edge]
  http:
  - match: [{{uri: {{prefix: /wrong}}}}]
    route: [{{destination: {{host: wrong.example.test}}}}]
  - match: [{{uri: {{prefix: /plain}}}}]
    route: [{{destination: {{host: plain.example.test}}}}]
  - match: [{{uri: {{prefix: /c-h2}}}}]
    route: [{{destination: {{host: c2.example.test}}}}]
  - match: [{{uri: {{prefix: /c}}}}]
    route: [{{destination: {{host: c.example.test, subset: v1}}}}]
  - match: [{{uri: {{prefix: /d}}}}]
    route: [{{destination: {{host: d.example.test}}}}]
  - match: [{{uri: {{prefix: /tick}}}}]
    route: [{{destination: {{host: tick.example.test}}}}]
  - route: [{{destination: {{host: b.example.test}}}}]
  tcp:
  - route: [{{destination: {{host: c.example.test, port: {{number: {SVC_PORT}}}}}}}]
""" + (service("b.example.test", "net-b") + mutual("b.example.test")
       + service("wrong.example.test", "net-b")
       + mutual("wrong.example.test",
                sans=("spiffe://example.org/ns/other/sa/nobody",))
       + service("plain.example.test", "net-b")
       + service("c.example.test", "net-c")
       + mutual("c.example.test",
                subsets="  subsets: [{name: v1, labels: {version: v1}}]\n")
       + service("c2.example.test", "net-c", proto="HTTP2")
       + mutual("c2.example.test")
       + service("d.example.test", "net-d") + mutual("d.example.test")
       + TICK)


# A name refreshed at its TTL, to tell time by.
TICK = """---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: tick, namespace: team}
spec:
  hosts: [tick.example.test]
  location: MESH_EXTERNAL
  resolution: DNS
  ports: [{number: 80, name: http, protocol: HTTP}]
  endpoints: [{address: tick.test}]
"""


class HelloRecorder:
    """A TCP listener standing for net-c's gateway: it keeps the first
    bytes of each connection (a TLS ClientHello) and closes it."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.hellos = []
        self.stopped = threading.Event()
        self.t = threading.Thread(target=self.loop, daemon=True)
        self.t.start()

    def loop(self):
        while not self.stopped.is_set():
            try:
                c, _ = self.sock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            with c:
                c.settimeout(5)
                data = b""
                try:
                    while len(data) < 5 or len(data) < 5 + struct.unpack(
                            "!H", data[3:5])[0]:
                        d = c.recv(65536)
                        if not d:
                            break
                        data += d
                except OSError:
                    pass
                self.hellos.append(data)

    def stop(self):
        self.stopped.set()
        self.t.join(5)
        self.sock.close()


def hello_extensions(rec):
    """The extensions of the ClientHello in one TLS record: {type: data}."""
    assert rec[0] == 0x16, rec[:8]  # handshake
    body = rec[5:]
    assert body[0] == 1  # ClientHello
    i = 4 + 2 + 32
    i += 1 + body[i]  # session id
    i += 2 + struct.unpack("!H", body[i:i + 2])[0]  # cipher suites
    i += 1 + body[i]  # compression methods
    end = i + 2 + struct.unpack("!H", body[i:i + 2])[0]
    i += 2
    out = {}
    while i < end:
        t, n = struct.unpack("!HH", body[i:i + 4])
        out[t] = body[i + 4:i + 4 + n]
        i += 4 + n
    return out


def sni_ext(name):
    n = name.encode()
    return struct.pack("!HBH", len(n) + 3, 0, len(n)) + n


def alpn_ext(names):
    lst = b"".join(bytes([len(x)]) + x.encode() for x in names)
    return struct.pack("!H", len(lst)) + lst


def fetch(port, path):
    with socket.create_connection(("127.0.0.1", port), timeout=15) as s:
        s.sendall(f"GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n"
                  .encode())
        data = b""
        while True:
            d = s.recv(65536)
            if not d:
                break
            data += d
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split(b" ")[1]), body


def clusters(node):
    code, body, _ = node.get("/clusters")
    assert code == 200
    return body


def test_two_sites_through_the_east_west_gateway(nodes, tmp_path,
                                                 upstream_factory):
    up = upstream_factory(backend)
    ew, mesh, ca_port = free_port(), free_port(), free_port()
    edge, tcp = free_port(), free_port()
    rec = HelloRecorder()
    dns = DNSServer(ttl=1)
    try:
        dns.records = {"gw.d.test": ["127.0.0.1"], "tick.test": ["127.0.0.1"]}
        conf_b = tmp_path / "b-conf"
        conf_b.mkdir()
        (conf_b / "r.yaml").write_text(SITE_B.format(
            ew=ew, mesh=mesh, svc=SVC_PORT, backend=up.port))
        b = nodes("site-b", f"{{enabled: true, dir: {tmp_path / 'b-ca'}, "
                            f"address: 127.0.0.1:{ca_port}}}",
                  node_yaml=(f"node: {{network: net-b}}\n"
                             f"config: {{dir: \"{conf_b}\"}}\n"
                             "meshNetworks:\n  networks:\n"
                             f"    net-a: {{gateways: [{{address: 127.0.0.1, "
                             f"port: {free_port()}}}]}}\n")).start()
        b.ca_url = f"https://127.0.0.1:{ca_port}"

        conf_a = tmp_path / "a-conf"
        conf_a.mkdir()
        (conf_a / "r.yaml").write_text(site_a(edge, tcp))
        tok = token(b, ns="team", sa="caller")
        a = nodes("site-a", f"{{dir: {tmp_path / 'a-ca'}}}",
                  node_yaml=(
                      "node: {namespace: team, serviceAccount: caller, "
                      "network: net-a, locality: eu/west/a}\n"
                      f"config: {{dir: \"{conf_a}\"}}\n"
                      f"dns: {{nameservers: [\"127.0.0.1:{dns.port}\"], "
                      f"minRefresh: 100ms, timeout: 500ms}}\n"
                      "meshNetworks:\n  networks:\n"
                      f"    net-b: {{gateways: [{{address: 127.0.0.1, "
                      f"port: {ew}}}]}}\n"
                      f"    net-c: {{gateways: [{{address: 127.0.0.1, "
                      f"port: {rec.port}}}]}}\n"
                      f"    net-d: {{gateways: [{{address: gw.d.test, "
                      f"port: {ew}}}]}}\n"),
                  args=["--join", b.ca_url, "--token", tok]).start()

        # curl through A's Gateway reaches B's backend, through B's
        # east-west gateway and B's mesh server.
        p = subprocess.run(["curl", "-sS", "--max-time", "15",
                            f"http://127.0.0.1:{edge}/hello"],
                           capture_output=True, timeout=30)
        assert p.stdout == b"site-b backend /hello", (p, a.log(), b.log())
        # B's gateway relayed it by the SNI, without terminating.
        st = b.stats()
        assert any(k.endswith("auto_passthrough.relayed") and v >= 1
                   for k, v in st.items()), st
        # B's gateway sees only its own network's endpoint of the service
        # (Istio's REQUESTED_NETWORK_VIEW), never A's gateway: several
        # requests all reach the backend.
        for i in range(4):
            assert fetch(edge, f"/again{i}") == (200, b"site-b backend /again%d"
                                                 % i)
        cl = clusters(b)
        assert (f"b.example.test||{SVC_PORT}::remote_endpoints_skipped::1 "
                "(east-west gateway: not on this network)") in cl, cl
        assert f"b.example.test||{SVC_PORT}::127.0.0.1:{mesh}::reached::direct" \
            in cl, cl
        assert "via gateway" not in cl, cl
        # B's mesh server saw A's own SPIFFE identity (end-to-end mTLS).
        wait_for(lambda: "peer_uri_san=spiffe://example.org/ns/team/sa/caller"
                 in b.log(), 10, "A's identity at B")
        # /clusters: the remote endpoint is the gateway, with network,
        # locality and how it is reached.
        cl = clusters(a)
        name = "b.example.test||0"
        assert f"{name}::127.0.0.1:{ew}::network::net-b" in cl, cl
        assert f"{name}::127.0.0.1:{ew}::locality::us/east/b" in cl, cl
        assert (f"{name}::127.0.0.1:{ew}::reached::via gateway "
                f"127.0.0.1:{ew} (meshNetworks)") in cl, cl
        assert "10.20.0.5" not in cl, cl
        assert f"{name}::sni::outbound_.{SVC_PORT}_._.b.example.test" in cl

        # SAN verification fails closed: B's workload is not the identity
        # the DestinationRule asks for (the gateway's is never used).
        before = up.conns
        assert fetch(edge, "/wrong")[0] == 503
        assert up.conns == before

        # A cluster without mTLS: its remote endpoint is left out, and
        # strait says so.
        assert fetch(edge, "/plain")[0] == 503
        cl = clusters(a)
        assert ("plain.example.test||0::remote_endpoints_skipped::1"
                " (cross-network needs ISTIO_MUTUAL)") in cl, cl
        assert "plain.example.test||0::endpoints::none" in cl, cl
        assert "cross-network traffic needs mTLS" in a.log()

        # The ClientHello A sends to a remote gateway, byte for byte:
        # HTTP/1.1 with a subset...
        fetch(edge, "/c")
        wait_for(lambda: len(rec.hellos) >= 1, 10, "a ClientHello")
        ext = hello_extensions(rec.hellos[-1])
        assert ext[0] == sni_ext(f"outbound_.{SVC_PORT}_.v1_.c.example.test")
        assert ext[16] == alpn_ext(["istio-http/1.1", "istio", "http/1.1"])
        # ...HTTP/2 without one...
        n = len(rec.hellos)
        fetch(edge, "/c-h2")
        wait_for(lambda: len(rec.hellos) > n, 10, "an HTTP/2 ClientHello")
        ext = hello_extensions(rec.hellos[-1])
        assert ext[0] == sni_ext(f"outbound_.{SVC_PORT}_._.c2.example.test")
        assert ext[16] == alpn_ext(["istio-h2", "istio", "h2"])
        # ...and TCP: "istio" only (no istio-peer-exchange).
        n = len(rec.hellos)
        with socket.create_connection(("127.0.0.1", tcp), timeout=10) as s:
            s.sendall(b"x")
            wait_for(lambda: len(rec.hellos) > n, 10, "a TCP ClientHello")
        ext = hello_extensions(rec.hellos[-1])
        assert ext[0] == sni_ext(f"outbound_.{SVC_PORT}_._.c.example.test")
        assert ext[16] == alpn_ext(["istio"])

        # A hostname gateway, resolved through the DNS cache.
        wait_for(lambda: fetch(edge, "/d/x") == (200, b"site-b backend /d/x"),
                 15, "the hostname gateway")
        cl = clusters(a)
        assert (f"d.example.test||0::127.0.0.1:{ew}::reached::via "
                f"gateway 127.0.0.1:{ew} (meshNetworks)") in cl, cl
        # Its answers are kept 30 s at least, whatever their TTL (1 s):
        # while tick.test (a DNS ServiceEntry, same TTL) is asked again
        # three times, gw.d.test is not.
        def asked(name):
            return sum(1 for q in dns.queries if q[0] == name)
        gw_asked, ticks = asked("gw.d.test"), asked("tick.test")
        assert ticks >= 1
        wait_for(lambda: asked("tick.test") >= ticks + 3, 15,
                 "three refreshes of tick.test")
        assert asked("gw.d.test") == gw_asked, dns.queries

        # meshNetworks follows a reload of the bootstrap (SIGHUP): net-b's
        # gateway moved to a closed port, then back.
        closed = free_port()
        text = a.config.read_text()
        new = text.replace(f"net-b: {{gateways: [{{address: 127.0.0.1, "
                           f"port: {ew}}}]}}",
                           f"net-b: {{gateways: [{{address: 127.0.0.1, "
                           f"port: {closed}}}]}}")
        assert new != text
        tmp = a.config.with_suffix(".tmp")
        tmp.write_text(new)
        os.replace(tmp, a.config)
        a.signal(signal.SIGHUP)
        wait_for(lambda: f"{name}::127.0.0.1:{closed}::reached::via gateway "
                 f"127.0.0.1:{closed} (meshNetworks)" in clusters(a), 15,
                 "the moved gateway")
        assert fetch(edge, "/again")[0] == 503
        tmp.write_text(text)
        os.replace(tmp, a.config)
        a.signal(signal.SIGHUP)
        wait_for(lambda: fetch(edge, "/again") == (200,
                                                   b"site-b backend /again"),
                 15, "the gateway back")
    finally:
        rec.stop()
        dns.stop()


CHECKED = """apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: svc, namespace: default}
spec:
  hosts: [svc.example.test]
  location: MESH_INTERNAL
  resolution: STATIC
  ports: [{number: 80, name: http, protocol: HTTP}]
  endpoints:
  - {address: 10.0.0.1}
  - {address: 10.2.0.1, network: net-b}
  - {address: 10.3.0.1, network: net-x}
  - {network: net-y}
---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: we, namespace: default}
spec: {address: 10.4.0.1, labels: {topology.istio.io/network: net-z}}
"""


def test_check_says_what_a_network_without_gateway_means(tmp_path):
    res = tmp_path / "r.yaml"
    res.write_text(CHECKED)
    cfg = tmp_path / "strait.yaml"
    cfg.write_text("node: {network: net-a}\n"
                   "meshNetworks:\n  networks:\n"
                   "    net-b: {gateways: [{address: 192.0.2.1}]}\n"
                   "    net-q:\n"
                   "      gateways:\n"
                   "      - {registryServiceName: svc.example.test}\n"
                   "      - {registryServiceName: nope.example.test}\n")
    r = subprocess.run([STRAIT, "check", "-c", str(cfg), str(res)],
                       capture_output=True, text=True, timeout=30)
    # Warnings only: the exit status is 0.
    assert r.returncode == 0, r.stdout + r.stderr
    lines = [x for x in r.stdout.splitlines() if "STR0009" in x]
    assert len(lines) == 4, r.stdout
    assert (f"Warning [STR0009] (bootstrap {cfg}:8:9) "
            "meshNetworks.networks.net-q.gateways[1]: registryServiceName "
            "nope.example.test is no service of the registry: network net-q "
            "gets no gateway from it") in lines, lines
    assert (f"Warning [STR0009] (ServiceEntry default/svc {res}:12:5) "
            "spec.endpoints[2]: endpoint on network net-x, which has no "
            "gateway (meshNetworks, or a Service labelled "
            "topology.istio.io/network): it is reached directly at "
            "10.3.0.1, as if on this node's network net-a (Istio's rule)"
            ) in lines, lines
    assert any("spec.endpoints[3]: endpoint on network net-y" in x
               and "no address of its own and is left out" in x
               for x in lines), lines
    assert any("WorkloadEntry default/we" in x and "net-z" in x
               for x in lines), lines
    # A bad meshNetworks is refused with its place.
    cfg.write_text("meshNetworks:\n  networks:\n"
                   "    net-b: {gateways: [{port: 15443}]}\n")
    r = subprocess.run([STRAIT, "check", "-c", str(cfg)],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode != 0
    assert f"{cfg}:3:" in r.stderr and \
        "needs one of: address, registryServiceName" in r.stderr, r.stderr
