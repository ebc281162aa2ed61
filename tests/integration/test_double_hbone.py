"""Double HBONE (issue 15 item 6): site A's strait, on network net-a,
sends TCP to a service whose endpoint is on net-b, whose meshNetworks
gateway is an ambient east-west gateway (port 15008, with its identity).
A opens an outer HBONE tunnel to that gateway (pooled, verified against
the gateway's identity, :authority the service's host:port), and inside
it a TLS session of its own to the service's identity carrying the
inner CONNECT (the same authority, baggage, Forwarded, traceparent and
x-forwarded-network). Site B's strait is both the east-west gateway,
which relays the inner bytes untouched to the workload's HBONE port, and
the workload's tunnel end, which ends the inner CONNECT and connects to
the workload's own port. All on loopback, each HBONE server on a
127.x.y.z:15008 of the test's own."""
import re
import socket
import ssl
import subprocess

import h2.config
import h2.connection
import h2.events

from conftest import STRAIT, free_port, responder, wait_for
from test_ca import nodes, token  # noqa: F401 (nodes is a fixture)
from test_hbone import echo
from test_hbone import ca_strait
from test_hbone_client import (PEER_RE, H2ConnectServer, gateway_to,
                               loopback_ip, talk)
from test_multinet import alpn_ext, hello_extensions

B_ID = "spiffe://example.org/ns/istio-system/sa/strait"
NOBODY = "spiffe://example.org/ns/istio-system/sa/nobody"

SITE_B = """apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {{name: eastwest, namespace: istio-system}}
spec:
  selector: {{}}
  servers:
  - port: {{number: 15008, name: hbone, protocol: HBONE}}
    bind: {ew}
    hosts: ["*/*.example.test"]
    tls: {{mode: ISTIO_MUTUAL}}
---
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {{name: ztunnel, namespace: istio-system}}
spec:
  selector: {{}}
  servers:
  - port: {{number: 15008, name: hbone, protocol: HBONE}}
    bind: {wl}
    hosts: ["*/*.example.test"]
    tls: {{mode: ISTIO_MUTUAL}}
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: svc, namespace: istio-system}}
spec:
  hosts: [svc.example.test, wrongsan.example.test]
  location: MESH_INTERNAL
  resolution: STATIC
  ports: [{{number: 80, name: tcp, protocol: TCP}}]
  endpoints:
  - address: {wl}
    ports: {{tcp: {backend}}}
    labels: {{istio.io/dataplane-mode: ambient}}
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: web, namespace: istio-system}}
spec:
  hosts: [web.example.test]
  location: MESH_INTERNAL
  resolution: STATIC
  ports: [{{number: 8080, name: http, protocol: HTTP}}]
  endpoints:
  - address: {wl}
    ports: {{http: {web}}}
    labels: {{istio.io/dataplane-mode: ambient}}
"""


def site_a(port, port2, port3, http):
    svc = """---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: {name}, namespace: team}}
spec:
  hosts: [{name}.example.test]
  location: MESH_INTERNAL
  resolution: STATIC
  ports: [{{number: 80, name: tcp, protocol: TCP}}]
  subjectAltNames: ["{sa}"]
  endpoints:
  - {{address: 10.20.0.5, network: {net}, locality: us/east/b}}
"""
    return f"""apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {{name: edge, namespace: team}}
spec:
  selector: {{}}
  servers:
  - port: {{number: {port}, name: tcp, protocol: TCP}}
    bind: 127.0.0.1
    hosts: ["*"]
  - port: {{number: {port2}, name: tcp2, protocol: TCP}}
    bind: 127.0.0.1
    hosts: ["*"]
  - port: {{number: {port3}, name: tcp3, protocol: TCP}}
    bind: 127.0.0.1
    hosts: ["*"]
  - port: {{number: {http}, name: http, protocol: HTTP}}
    bind: 127.0.0.1
    hosts: ["*"]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: out, namespace: team}}
spec:
  hosts: ["*"]
  gateways: [edge]
  tcp:
  - match: [{{port: {port}}}]
    route: [{{destination: {{host: svc.example.test, port: {{number: 80}}}}}}]
  - match: [{{port: {port2}}}]
    route: [{{destination: {{host: other.example.test,
                             port: {{number: 80}}}}}}]
  - match: [{{port: {port3}}}]
    route: [{{destination: {{host: wrongsan.example.test,
                             port: {{number: 80}}}}}}]
  http:
  - route: [{{destination: {{host: web.example.test}}}}]
""" + svc.format(name="svc", sa=B_ID, net="net-b") \
        + svc.format(name="other", sa=B_ID, net="net-c") \
        + svc.format(name="wrongsan", sa=NOBODY, net="net-b") \
        + svc.format(name="web", sa=B_ID, net="net-b").replace(
            "{number: 80, name: tcp, protocol: TCP}",
            "{number: 8080, name: http, protocol: HTTP}")


def log_lines(node, listener):
    return [ln for ln in node.log().splitlines()
            if f"listener={listener} " in ln and "authority=" in ln]


def test_double_hbone_through_an_east_west_gateway(nodes, tmp_path,
                                                   upstream_factory):
    ew, wl = loopback_ip(), loopback_ip()
    while wl == ew:
        wl = loopback_ip()
    up = upstream_factory(echo, host=wl)
    web = upstream_factory(responder(lambda head: b"web " + head.split(b" ")[1]),
                           host=wl)
    ca_port = free_port()
    conf_b = tmp_path / "b-conf"
    conf_b.mkdir()
    (conf_b / "r.yaml").write_text(SITE_B.format(ew=ew, wl=wl,
                                                 backend=up.port,
                                                 web=web.port))
    b = nodes("site-b", f"{{enabled: true, dir: {tmp_path / 'b-ca'}, "
                        f"address: 127.0.0.1:{ca_port}}}",
              node_yaml=(f"node: {{network: net-b}}\n"
                         f"config: {{dir: \"{conf_b}\"}}\n")).start()
    b.ca_url = f"https://127.0.0.1:{ca_port}"

    port, port2, port3, http = (free_port(), free_port(), free_port(),
                                free_port())
    conf_a = tmp_path / "a-conf"
    conf_a.mkdir()
    (conf_a / "r.yaml").write_text(site_a(port, port2, port3, http))
    tok = token(b, ns="team", sa="caller")
    a = nodes("site-a", f"{{dir: {tmp_path / 'a-ca'}}}",
              node_yaml=(
                  "node: {namespace: team, serviceAccount: caller, "
                  "network: net-a, labels: {app: caller}}\n"
                  f"config: {{dir: \"{conf_a}\"}}\n"
                  "meshNetworks:\n  networks:\n"
                  f"    net-b: {{gateways: [{{address: {ew}, port: 15008, "
                  f"identity: \"{B_ID}\"}}]}}\n"
                  f"    net-c: {{gateways: [{{address: {ew}, port: 15008, "
                  f"identity: \"{NOBODY}\"}}]}}\n"),
              args=["--join", b.ca_url, "--token", tok]).start()

    # Bytes both ways through both tunnels: B's backend echoes them.
    got, client = talk(port, b"ping through two tunnels")
    assert got == b"ping through two tunnels", (a.log(), b.log())

    # /clusters says the endpoint is the gateway, by double HBONE.
    code, body, _ = a.get("/clusters")
    assert code == 200
    assert f"{ew}:15008 (meshNetworks, double HBONE)" in body, body

    # The outer tunnel, at B's east-west gateway: the service's host and
    # port, nothing but a traceparent, relayed to the workload's 15008.
    ew_l = f"gateway-{ew}-15008"
    wl_l = f"gateway-{wl}-15008"
    wait_for(lambda: log_lines(b, ew_l) and log_lines(b, wl_l), 10,
             "both tunnels in B's log")
    outer = log_lines(b, ew_l)[0]
    assert "authority=svc.example.test:80 " in outer, outer
    assert f"upstream={wl}:15008 " in outer, outer
    assert "peer_uri_san=spiffe://example.org/ns/team/sa/caller" in outer
    assert "trace_id=" in outer, outer
    for absent in ("forwarded_network=", "forwarded_for=", "source_namespace="):
        assert absent not in outer, outer
    # The inner tunnel, at the workload's tunnel end: the same authority,
    # the client's address in Forwarded, A's baggage and network, and the
    # workload's own port.
    inner = log_lines(b, wl_l)[0]
    assert "authority=svc.example.test:80 " in inner, inner
    assert f"upstream={wl}:{up.port} " in inner, inner
    assert "forwarded_network=net-a " in inner, inner
    assert f"forwarded_for={client[0]}:{client[1]} " in inner, inner
    assert "forwarded_host=svc.example.test " in inner, inner
    assert "source_namespace=team " in inner, inner
    assert "peer_uri_san=spiffe://example.org/ns/team/sa/caller" in inner
    trace = re.search(r"trace_id=([0-9a-f]+)", inner).group(1)
    assert f"trace_id={trace}" not in outer  # a trace per tunnel

    # The outer tunnels share one pooled connection to the gateway; each
    # session has its own inner TLS (a connection of its own at the
    # workload's tunnel end).
    for i in range(3):
        assert talk(port, b"again %d" % i)[0] == b"again %d" % i
    # Each outer tunnel ended (TLS close_notify, END_STREAM both ways),
    # not reset.
    wait_for(lambda: sum("authority=svc.example.test:80 " in ln
                         and " end=closed" in ln
                         for ln in log_lines(b, ew_l)) == 4, 10,
             "four outer tunnels ended cleanly")
    st = b.stats()
    assert st[f"listener.{ew_l}.downstream_cx_total"] == 1, st
    assert st[f"listener.{ew_l}.hbone.tunnels_opened"] == 4, st
    assert st[f"listener.{wl_l}.downstream_cx_total"] == 4, st
    assert st[f"listener.{wl_l}.hbone.tunnels_opened"] == 4, st

    # A gateway presenting another identity than meshNetworks says: the
    # outer tunnel is refused, nothing reaches B's workload.
    got, _ = talk(port2, b"x")
    assert got == b""
    wait_for(lambda: "end=upstream_hbone_tls_failed" in a.log(), 10,
             "the refused gateway identity")
    assert f"HBONE: TLS to {ew}:15008 failed: certificate identity not " \
           "among the expected subjectAltNames" in a.log()
    assert b.stats()[f"listener.{wl_l}.hbone.tunnels_opened"] == 4

    # The inner TLS is verified against the service's identities, not the
    # gateway's: B's workload end presents B_ID, the service says NOBODY.
    got, _ = talk(port3, b"y")
    assert got == b""
    wait_for(lambda: "(inner, to the service through the east-west "
             "gateway) failed: certificate identity not among the expected "
             "subjectAltNames" in a.log(), 10, "the refused service identity")
    assert b.stats()[f"listener.{wl_l}.hbone.tunnels_opened"] == 4

    # An HTTP route: its upstream connections are double HBONE tunnels too
    # (the pools' tunnel hook), with keep-alive inside them.
    for i in range(3):
        r = subprocess.run(["curl", "-sS", "--max-time", "15",
                            f"http://127.0.0.1:{http}/page{i}"],
                           capture_output=True, timeout=30)
        assert r.stdout == b"web /page%d" % i, (r, a.log())
    # One upstream connection for the three (keep-alive): one more tunnel
    # at the workload's end (logged when it closes).
    assert b.stats()[f"listener.{wl_l}.hbone.tunnels_opened"] == 5

    # The east-west gateway's choice is made by addresses, never by a
    # header: an outer CONNECT carrying x-forwarded-network (as only an
    # inner one should) still goes to the workload's 15008, not around
    # the workload's tunnel end to its plain port.
    spoof = tmp_path / "spoof"
    r = subprocess.run([STRAIT, "ca", "issue", "--namespace", "team",
                        "--service-account", "spoof", "--ttl", "1h", "--out",
                        str(spoof), "-c", str(b.config)],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    status = connect_once(ew, spoof, tmp_path / "b-ca" / "root-cert.pem",
                          [(b":method", b"CONNECT"),
                           (b":authority", b"svc.example.test:80"),
                           (b"x-forwarded-network", b"net-evil")])
    assert status == b"200"
    wait_for(lambda: any("forwarded_network=net-evil " in ln
                         for ln in log_lines(b, ew_l)), 10,
             "the spoofed CONNECT's log line")
    line = [ln for ln in log_lines(b, ew_l) if "net-evil" in ln][0]
    assert f"upstream={wl}:15008 " in line, line


def connect_once(ip, cred, root, headers):
    """One CONNECT over mTLS (cred's certificate, ALPN h2) to ip:15008 with
    python3-h2; the :status answered. The tunnel is then closed."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_cert_chain(str(cred / "cert-chain.pem"), str(cred / "key.pem"))
    ctx.load_verify_locations(str(root))
    ctx.check_hostname = False
    ctx.set_alpn_protocols(["h2"])
    with socket.create_connection((ip, 15008), timeout=10) as raw, \
            ctx.wrap_socket(raw) as s:
        h = h2.connection.H2Connection(h2.config.H2Configuration(
            client_side=True, header_encoding=None,
            validate_outbound_headers=False,
            normalize_outbound_headers=False))
        h.initiate_connection()
        sid = h.get_next_available_stream_id()
        h.send_headers(sid, headers)
        s.sendall(h.data_to_send())
        while True:
            d = s.recv(65536)
            if not d:
                return None
            for ev in h.receive_data(d):
                if isinstance(ev, h2.events.ResponseReceived):
                    status = dict(ev.headers)[b":status"]
                    h.reset_stream(sid)
                    s.sendall(h.data_to_send())
                    return status
            s.sendall(h.data_to_send())


def test_hbone_gateway_needs_its_identity(tmp_path):
    """meshNetworks: an HBONE gateway (port 15008) without identity, and an
    identity on an AUTO_PASSTHROUGH gateway, are refused with file:line."""
    cfg = tmp_path / "strait.yaml"
    cfg.write_text("meshNetworks:\n  networks:\n"
                   "    net-b: {gateways: [{address: 192.0.2.1, port: 15008}]}\n"
                   "    net-c: {gateways: [{address: 192.0.2.2, port: 15443,"
                   " identity: \"spiffe://a/ns/b/sa/c\"}]}\n")
    r = subprocess.run([STRAIT, "check", "-c", str(cfg)], capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 1
    assert "port 15008 is an HBONE (ambient east-west) gateway, reached by " \
           "double HBONE: give its SPIFFE ID as identity" in r.stderr
    assert "gateways[0].identity: only an HBONE gateway (port 15008) has " \
           "one" in r.stderr
    assert f"{cfg}:3:" in r.stderr and f"{cfg}:4:" in r.stderr, r.stderr


def test_double_hbone_outer_connect_byte_for_byte(strait_factory, tmp_path):
    """The outer CONNECT as a python3-h2 east-west gateway receives it:
    :method, :authority (the service's host:port) and traceparent only,
    from strait's SPIFFE certificate; the first bytes in the stream are
    the inner TLS ClientHello: no SNI, ALPN h2 alone."""
    ip = loopback_ip()
    gw_id = "spiffe://cluster.local/ns/default/sa/backend"
    st, conf = ca_strait(
        strait_factory, tmp_path, workers=1,
        hbone_yaml=("node: {network: net-a}\n"
                    "meshNetworks:\n  networks:\n"
                    f"    net-b: {{gateways: [{{address: {ip}, port: 15008, "
                    f"identity: \"{gw_id}\"}}]}}\n"))
    srv = H2ConnectServer(ip, tmp_path)
    port = free_port()
    try:
        (conf / "r.yaml").write_text(gateway_to(port, "svc.example.test") + """---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: svc, namespace: default}
spec:
  hosts: [svc.example.test]
  location: MESH_INTERNAL
  resolution: STATIC
  ports: [{number: 80, name: tcp, protocol: TCP}]
  subjectAltNames: ["spiffe://cluster.local/ns/default/sa/client"]
  endpoints:
  - {address: 10.20.0.5, network: net-b}
""")
        st.start()
        # The gateway echoes the inner ClientHello: the inner TLS fails,
        # and the session with it.
        got, _ = talk(port, b"x")
        assert got == b""
        wait_for(lambda: srv.requests and srv.data, 10, "the outer CONNECT")
        assert srv.peers[0] == [
            "spiffe://cluster.local/ns/istio-system/sa/strait"]
        hdrs = srv.requests[0]
        assert [k for k, _ in hdrs] == [b":method", b":authority",
                                        b"traceparent"], hdrs
        d = dict(hdrs)
        assert d[b":method"] == b"CONNECT"
        assert d[b":authority"] == b"svc.example.test:80"
        assert PEER_RE.fullmatch(d[b"traceparent"]), d[b"traceparent"]
        ext = hello_extensions(srv.data[0][1])
        assert 0 not in ext  # no SNI
        assert ext[16] == alpn_ext(["h2"])
    finally:
        srv.stop()
