"""strait as Istio's east-west gateway: a Gateway server with tls mode
AUTO_PASSTHROUGH reads the ClientHello without terminating it, routes by
the SNI outbound_.<port>_.<subset>_.<host> (istiod's
BuildDNSSrvSubsetKey) to an endpoint of that registry service, port and
DestinationRule subset, requires one of Istio's ALPNs, and relays the
client's TLS untouched. Everything else is refused, counted by reason
and logged. Also what `strait check` says of such servers."""
import socket
import ssl
import subprocess

from conftest import STRAIT, free_port, wait_for
from test_l4 import access_lines, named_handler, refused, start, stat
from httpd import make_cert

HOST = "svc.example.test"
SVC_PORT = 9080
ISTIO_HTTP11 = ["istio-http/1.1", "istio", "http/1.1"]


def sni(subset=None, port=SVC_PORT, host=HOST):
    return f"outbound_.{port}_.{subset or ''}_.{host}"


def backend(upstream_factory, tmp_path, name):
    """A TLS backend answering "<name>:<chunk>", with its own certificate
    (subject O=strait-test-<name>)."""
    crt, key = make_cert(str(tmp_path), name, f"{name}.{HOST}", [HOST])
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(crt, key)
    return upstream_factory(named_handler(name, ctx)), crt


def resources(port, eps, dead_v1=None, hosts='["*.example.test"]'):
    """The Gateway, a ServiceEntry of HOST on SVC_PORT whose endpoints are
    eps {version: backend port} (each on 127.0.0.1, its own target port by
    the port name), and a DestinationRule with subsets v1, v2 and v3 (v3
    selects nothing). dead_v1: one more v1 endpoint on a closed port, and
    outlier detection that ejects it after one connect failure."""
    endpoints = "".join(
        f"  - {{address: 127.0.0.1, ports: {{tls: {p}}}, "
        f"labels: {{version: {v}}}}}\n" for v, p in eps.items())
    if dead_v1:
        endpoints = (f"  - {{address: 127.0.0.1, ports: {{tls: {dead_v1}}}, "
                     f"labels: {{version: v1}}}}\n") + endpoints
    od = ""
    if dead_v1:
        od = """  trafficPolicy:
    outlierDetection: {consecutiveGatewayErrors: 1, consecutive5xxErrors: 1,
                       interval: 1s, baseEjectionTime: 60s,
                       maxEjectionPercent: 100}
"""
    return f"""apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {{name: cross-network-gateway, namespace: istio-system}}
spec:
  selector: {{}}
  servers:
  - port: {{number: {port}, name: tls, protocol: TLS}}
    bind: 127.0.0.1
    tls: {{mode: AUTO_PASSTHROUGH}}
    hosts: {hosts}
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: svc, namespace: default}}
spec:
  hosts: [{HOST}]
  location: MESH_INTERNAL
  resolution: STATIC
  ports: [{{number: {SVC_PORT}, name: tls, protocol: TLS}}]
  endpoints:
{endpoints}---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {{name: svc, namespace: default}}
spec:
  host: {HOST}
{od}  subsets:
  - {{name: v1, labels: {{version: v1}}}}
  - {{name: v2, labels: {{version: v2}}}}
  - {{name: v3, labels: {{version: v3}}}}
"""


def talk(port, server_name, alpn=ISTIO_HTTP11, cafile=None, msg=b"hello"):
    """TLS through the gateway as an Istio sidecar sends it: SNI and ALPN.
    Returns (reply, the peer certificate's organisation). cafile: verify
    the backend's own certificate against it (not its name: the SNI is
    the cluster's)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    if cafile:
        ctx.load_verify_locations(cafile)
    else:
        ctx.verify_mode = ssl.CERT_NONE
    if alpn:
        ctx.set_alpn_protocols(alpn)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with ctx.wrap_socket(raw, server_hostname=server_name) as s:
            org = None
            if cafile:
                subject = dict(x[0] for x in s.getpeercert()["subject"])
                org = subject.get("organizationName")
            s.sendall(msg)
            out = b""
            while not out.endswith(msg):
                d = s.recv(65536)
                if not d:
                    break
                out += d
            return out, org


def ap(st, port, key):
    return stat(st, port, f"auto_passthrough.{key}")


def test_auto_passthrough_routes_by_istio_sni(strait_factory, upstream_factory,
                                              tmp_path):
    v1, v1_crt = backend(upstream_factory, tmp_path, "v1")
    v2, v2_crt = backend(upstream_factory, tmp_path, "v2")
    port = free_port()
    st = start(strait_factory, tmp_path,
               resources(port, {"v1": v1.port, "v2": v2.port}))
    # The backend's own certificate verifies: the gateway holds none and
    # relayed the client's TLS untouched.
    assert talk(port, sni("v1"), cafile=v1_crt) == (b"v1:hello",
                                                    "strait-test-v1")
    assert talk(port, sni("v2"), cafile=v2_crt) == (b"v2:hello",
                                                    "strait-test-v2")
    # Plain "istio" (TCP without metadata exchange) and HTTP/2's set.
    assert talk(port, sni("v1"), alpn=["istio"])[0] == b"v1:hello"
    assert talk(port, sni("v2"), alpn=["istio-h2", "istio", "h2"])[0] \
        == b"v2:hello"
    # SNI case does not matter (names are read lowercase).
    assert talk(port, sni("v1").upper().replace("OUTBOUND", "outbound"))[0] \
        == b"v1:hello"
    # No subset: every endpoint of the service, round robin.
    got = {talk(port, sni())[0] for _ in range(6)}
    assert got == {b"v1:hello", b"v2:hello"}, got
    assert v1.conns + v2.conns == 11
    wait_for(lambda: ap(st, port, "relayed") == 11, 10, "11 relayed")
    line = wait_for(lambda: access_lines(st, f"sni={sni('v2')}"), 10,
                    "the relayed session's access log line")[0]
    assert f"upstream=127.0.0.1:{v2.port}" in line, line
    assert f"cluster={HOST}|v2|{SVC_PORT}" in line, line
    assert "flags=-" in line, line
    # openssl s_client, as another client: it sees v1's certificate.
    p = subprocess.run(
        ["openssl", "s_client", "-connect", f"127.0.0.1:{port}",
         "-servername", sni("v1"), "-alpn", "istio-http/1.1,istio",
         "-CAfile", v1_crt, "-verify_return_error"],
        input=b"", capture_output=True, timeout=15)
    text = (p.stdout + p.stderr).decode(errors="replace")
    assert "O = strait-test-v1" in text and "Verify return code: 0" in text, \
        text
    assert ap(st, port, "refused_alpn") == 0


def test_auto_passthrough_refusals_counted_by_reason(strait_factory,
                                                     upstream_factory,
                                                     tmp_path):
    v1, _ = backend(upstream_factory, tmp_path, "v1")
    v2, _ = backend(upstream_factory, tmp_path, "v2")
    port = free_port()
    st = start(strait_factory, tmp_path,
               resources(port, {"v1": v1.port, "v2": v2.port}))
    cases = [
        # (server name, ALPN, counter, access-log end)
        (HOST, ISTIO_HTTP11, "refused_bad_sni", "auto_passthrough_bad_sni"),
        (None, ISTIO_HTTP11, "refused_bad_sni", "auto_passthrough_no_sni"),
        (f"outbound_.{SVC_PORT}_.v1_.other.example.test", ISTIO_HTTP11,
         "refused_unknown_host", "auto_passthrough_unknown_host"),
        (sni("v9"), ISTIO_HTTP11, "refused_unknown_subset",
         "auto_passthrough_unknown_subset"),
        (sni("v1", port=9999), ISTIO_HTTP11, "refused_unknown_port",
         "auto_passthrough_unknown_port"),
        (sni("v1"), None, "refused_alpn", "auto_passthrough_no_alpn"),
        (sni("v2"), ["h2", "http/1.1"], "refused_alpn",
         "auto_passthrough_alpn_not_istio"),
        (sni("v3"), ISTIO_HTTP11, "refused_no_endpoint",
         "no_healthy_upstream"),
    ]
    no_route = stat(st, port, "no_filter_chain_match")
    for name, alpn, counter, end in cases:
        before = ap(st, port, counter)
        assert refused(lambda: talk(port, name, alpn=alpn)[0]), name
        wait_for(lambda: ap(st, port, counter) == before + 1, 10,
                 f"{counter} counted for {name} {alpn}")
        needle = f"sni={name}" if name else "end=auto_passthrough_no_sni"
        line = wait_for(lambda: [l for l in access_lines(st, needle)
                                 if f"end={end}" in l], 10,
                        f"a log line with end={end}")[0]
        flags = "UH" if counter == "refused_no_endpoint" else "NR"
        assert f"flags={flags}" in line, line
    # Each refusal but the empty subset is Envoy's no filter chain match.
    assert stat(st, port, "no_filter_chain_match") == no_route + 7
    assert v1.conns == 0 and v2.conns == 0
    assert ap(st, port, "relayed") == 0
    # The same counters on /stats/prometheus, one family by reason.
    _, text, _ = st.get("/stats/prometheus")
    lst = f'listener="gateway-127.0.0.1-{port}"'
    for reason, n in (("bad_sni", 2), ("alpn", 2), ("unknown_host", 1),
                      ("unknown_port", 1), ("unknown_subset", 1),
                      ("no_endpoint", 1)):
        want = (f"strait_listener_auto_passthrough_refused_total{{{lst},"
                f"reason=\"{reason}\"}} {n}")
        assert want in text, (want, [l for l in text.splitlines()
                                     if "auto_passthrough" in l])
    assert f"strait_listener_auto_passthrough_relayed_total{{{lst}}} 0" in text


def test_auto_passthrough_server_hosts_limit_services(strait_factory,
                                                      upstream_factory,
                                                      tmp_path):
    """Only services the server's hosts cover are exposed, as istiod
    builds filter chains only for them: "*.local" does not cover
    svc.example.test."""
    v1, _ = backend(upstream_factory, tmp_path, "v1")
    port = free_port()
    st = start(strait_factory, tmp_path,
               resources(port, {"v1": v1.port}, hosts='["*.local"]'))
    assert refused(lambda: talk(port, sni("v1"))[0])
    wait_for(lambda: ap(st, port, "refused_unknown_host") == 1, 10,
             "an unexposed host refused")
    assert v1.conns == 0


def test_auto_passthrough_outlier_detection_ejects(strait_factory,
                                                   upstream_factory, tmp_path):
    """A v1 endpoint that refuses connections is ejected by the subset's
    cluster's outlier detection after its first connect failure; from
    then on every connection reaches the live one."""
    v1, _ = backend(upstream_factory, tmp_path, "v1")
    dead = free_port()
    port = free_port()
    st = start(strait_factory, tmp_path,
               resources(port, {"v1": v1.port}, dead_v1=dead))
    results = []
    for _ in range(8):
        try:
            results.append(talk(port, sni("v1"))[0])
        except (ssl.SSLError, OSError):
            results.append(b"")
    # Round robin reaches the dead endpoint within two connections of a
    # worker; its one failure ejects it for every worker (the outlier
    # state is the cluster's), so exactly one connection fails.
    assert results.count(b"") == 1, results
    assert results[-4:] == [b"v1:hello"] * 4, results
    _, text, _ = st.get("/stats/prometheus")
    want = (f'strait_cluster_outlier_ejections_total'
            f'{{cluster="{HOST}|v1|{SVC_PORT}"}} 1')
    assert want in text, [l for l in text.splitlines()
                          if "outlier_ejections_total" in l]
    line = wait_for(lambda: access_lines(st, f"upstream=127.0.0.1:{dead}"),
                    10, "the failed session's log line")[0]
    assert "flags=UF" in line, line


def test_auto_passthrough_follows_registry_changes(strait_factory,
                                                   upstream_factory, tmp_path):
    """A new endpoint and subset in the config directory are exposed by
    the next snapshot, without a VirtualService: the L4 listener is
    rebuilt when the registry it was built from changes."""
    v1, _ = backend(upstream_factory, tmp_path, "v1")
    v2, _ = backend(upstream_factory, tmp_path, "v2")
    port = free_port()
    st = start(strait_factory, tmp_path, resources(port, {"v1": v1.port}))
    assert talk(port, sni("v1"))[0] == b"v1:hello"
    assert refused(lambda: talk(port, sni("v2"))[0])
    assert ap(st, port, "refused_no_endpoint") == 1
    conf = tmp_path / "conf.d"
    (conf / "r.tmp").write_text(
        resources(port, {"v1": v1.port, "v2": v2.port}))
    (conf / "r.tmp").rename(conf / "r.yaml")

    def v2_reached():
        try:
            return talk(port, sni("v2"))[0] == b"v2:hello"
        except (ssl.SSLError, OSError):
            return False
    wait_for(v2_reached, 15, "the new v2 endpoint reached")
    assert talk(port, sni("v1"))[0] == b"v1:hello"


# -- strait check ---------------------------------------------------------------

def check(tmp_path, text):
    (tmp_path / "gw.yaml").write_text(text)
    return subprocess.run([STRAIT, "check", str(tmp_path / "gw.yaml")],
                          capture_output=True, text=True, timeout=60)


def ew_gateway(protocol="TLS", tls="{mode: AUTO_PASSTHROUGH}"):
    return f"""apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {{name: cross-network-gateway, namespace: istio-system}}
spec:
  selector: {{istio: eastwestgateway}}
  servers:
  - port: {{number: 15443, name: tls, protocol: {protocol}}}
    tls: {tls}
    hosts: ["*.local"]
"""


def test_check_accepts_istios_east_west_gateway(tmp_path):
    r = check(tmp_path, ew_gateway())
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Error" not in r.stdout and "Warning" not in r.stdout, r.stdout


def test_check_auto_passthrough_as_istio(tmp_path):
    # Certificates are ignored, with a warning (Istio's, for backwards
    # compatibility).
    r = check(tmp_path, ew_gateway(
        tls="{mode: AUTO_PASSTHROUGH, credentialName: ew-cert}"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "AUTO_PASSTHROUGH does not use certificates" in r.stdout, r.stdout
    # Only on TLS (or HTTPS) ports.
    r = check(tmp_path, ew_gateway(protocol="TCP"))
    assert r.returncode == 1, r.stdout + r.stderr
    assert "AUTO_PASSTHROUGH needs protocol TLS, not TCP" in r.stdout, r.stdout
    r = check(tmp_path, ew_gateway(protocol="HTTPS"))
    assert r.returncode == 0, r.stdout + r.stderr
