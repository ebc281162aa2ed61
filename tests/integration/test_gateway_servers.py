"""Gateway HTTPS servers on one port are told apart by their hosts, not
by the names in their certificates: two servers may share a wildcard
certificate and still ask different things of clients (one SIMPLE, one
MUTUAL), as Envoy's filter chains match the servers' hosts.

A request is served only by the server its TLS connection was made with:
a Host (or :authority) outside that server's hosts gets 421 Misdirected
Request, so a client cannot reach a MUTUAL server's routes over a SIMPLE
server's connection by naming one host in its SNI and another in its
Host (domain fronting), and an HTTP/2 client that coalesced two names on
one connection is told to open another."""
import subprocess

import pytest

from conftest import SRCDIR, free_port, responder, wait_for
from httpd import make_cert

SAMPLES = f"{SRCDIR}/tests/data/istio-samples/certs"
FOO = (f"{SAMPLES}/workload-foo-cert.pem", f"{SAMPLES}/workload-foo-key.pem")


def resources(port, up, crt, key):
    files = f'serverCertificate: "{crt}", privateKey: "{key}"'
    return f"""apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {{name: gw, namespace: default}}
spec:
  selector: {{}}
  servers:
  - port: {{number: {port}, name: https-open, protocol: HTTPS}}
    bind: 127.0.0.1
    hosts: [open.example.com, "*.open.example.com"]
    tls: {{mode: SIMPLE, {files}}}
  - port: {{number: {port}, name: https-secure, protocol: HTTPS}}
    bind: 127.0.0.1
    hosts: ["default/secure.example.com"]
    tls: {{mode: MUTUAL, {files}, caCertificates: "{SAMPLES}/root-cert.pem"}}
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: up, namespace: default}}
spec:
  hosts: [up.internal]
  resolution: STATIC
  ports: [{{number: {up}, name: http, protocol: HTTP}}]
  endpoints: [{{address: 127.0.0.1}}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: web, namespace: default}}
spec:
  hosts: ["*"]
  gateways: [gw]
  http:
  - route: [{{destination: {{host: up.internal}}}}]
"""


@pytest.fixture
def gw(strait_factory, upstream_factory, tmp_path):
    # One certificate for every name of both servers.
    d = tmp_path / "certs"
    d.mkdir()
    crt, key = make_cert(str(d), "wild", "example.com",
                         ["*.example.com", "*.open.example.com"])
    up = upstream_factory(responder(lambda head: b"up"))
    conf = tmp_path / "conf.d"
    conf.mkdir()
    port = free_port()
    (conf / "r.yaml").write_text(resources(port, up.port, crt, key))
    st = strait_factory(extra=f"config: {{dir: \"{conf}\"}}\n").start()
    wait_for(lambda: curl(port, crt, "open.example.com")[0] == 200, 10,
             "the Gateway listener")
    return st, port, crt


def curl(port, ca, sni, host=None, cert=None, http2=False):
    """One request with SNI sni (and Host host, when given). Returns
    (status or None when the handshake failed, stderr)."""
    args = ["curl", "-sS", "--max-time", "10", "-o", "/dev/null",
            "-w", "%{http_code}", "--cacert", ca,
            "--resolve", f"{sni}:{port}:127.0.0.1",
            "--http2" if http2 else "--http1.1"]
    if host is not None:
        args += ["-H", f"host: {host}"]
    if cert is not None:
        args += ["--cert", cert[0], "--key", cert[1]]
    p = subprocess.run(args + [f"https://{sni}:{port}/"],
                       capture_output=True, text=True, timeout=30)
    code = p.stdout.strip()
    return (int(code) if p.returncode == 0 and code != "000" else None,
            p.stderr)


@pytest.mark.parametrize("http2", [False, True], ids=["h1", "h2"])
def test_server_is_chosen_by_its_hosts(gw, http2):
    """secure.example.com is the MUTUAL server's even though the SIMPLE
    server, listed first, has a certificate for it too."""
    _, port, crt = gw
    assert curl(port, crt, "open.example.com", http2=http2)[0] == 200
    assert curl(port, crt, "a.open.example.com", http2=http2)[0] == 200
    status, err = curl(port, crt, "secure.example.com", http2=http2)
    assert status is None, "secure.example.com answered without a client " \
        "certificate"
    assert curl(port, crt, "secure.example.com", cert=FOO,
                http2=http2)[0] == 200


@pytest.mark.parametrize("http2", [False, True], ids=["h1", "h2"])
def test_host_outside_the_servers_hosts_is_misdirected(gw, http2):
    """SNI open.example.com with Host secure.example.com: 421, and the
    upstream is not reached; the access log says why."""
    st, port, crt = gw
    status, _ = curl(port, crt, "open.example.com", host="secure.example.com",
                     http2=http2)
    assert status == 421
    wait_for(lambda: "details=misdirected_request" in st.log(), 10,
             "the access log line")
    line = [l for l in st.log().splitlines()
            if "details=misdirected_request" in l][-1]
    assert "authority=secure.example.com" in line
    assert "cluster=-" in line
    # A name the connection's server does serve goes through.
    assert curl(port, crt, "open.example.com", host="b.open.example.com",
                http2=http2)[0] == 200
    assert curl(port, crt, "open.example.com",
                host=f"open.example.com:{port}", http2=http2)[0] == 200
