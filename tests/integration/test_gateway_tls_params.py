"""Issue 12 item 20: a Gateway server's tls.minProtocolVersion,
maxProtocolVersion and cipherSuites are applied, per server: two HTTPS
servers on one port, told apart by SNI, each get their own. Checked with
openssl s_client, not with strait's code. Versions strait cannot offer
(TLS 1.0 and 1.1) are refused by `strait check`, never accepted silently."""
import subprocess

from conftest import STRAIT, free_port, responder, wait_for
from httpd import make_cert


def resources(port, up, crt, key):
    files = f'serverCertificate: "{crt}", privateKey: "{key}"'
    return f"""apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {{name: gw, namespace: default}}
spec:
  selector: {{}}
  servers:
  - port: {{number: {port}, name: https-modern, protocol: HTTPS}}
    bind: 127.0.0.1
    hosts: [modern.example.com]
    tls: {{mode: SIMPLE, {files}, minProtocolVersion: TLSV1_3}}
  - port: {{number: {port}, name: https-legacy, protocol: HTTPS}}
    bind: 127.0.0.1
    hosts: [legacy.example.com]
    tls:
      mode: SIMPLE
      {files.replace(", ", chr(10) + "      ")}
      maxProtocolVersion: TLSV1_2
      cipherSuites: [ECDHE-ECDSA-AES256-GCM-SHA384]
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


def handshake(port, sni, *opts):
    """openssl s_client -brief with opts; (ok, protocol, cipher)."""
    p = subprocess.run(
        ["openssl", "s_client", "-brief", "-connect", f"127.0.0.1:{port}",
         "-servername", sni, *opts],
        input="\n", capture_output=True, text=True, timeout=30)
    proto = cipher = None
    for line in (p.stdout + p.stderr).splitlines():
        if line.startswith("Protocol version:"):
            proto = line.split(":", 1)[1].strip()
        if line.startswith("Ciphersuite:"):
            cipher = line.split(":", 1)[1].strip()
    return cipher is not None, proto, cipher


def start(strait_factory, upstream_factory, tmp_path):
    d = tmp_path / "certs"
    d.mkdir()
    crt, key = make_cert(str(d), "ec", "example.com", ["*.example.com"], "ec")
    up = upstream_factory(responder(lambda head: b"up"))
    conf = tmp_path / "conf.d"
    conf.mkdir()
    port = free_port()
    (conf / "r.yaml").write_text(resources(port, up.port, crt, key))
    st = strait_factory(extra=f"config: {{dir: \"{conf}\"}}\n").start()
    wait_for(lambda: handshake(port, "modern.example.com", "-tls1_3")[0], 10,
             "the Gateway listener")
    return st, port, conf


def test_versions_and_suites_apply_per_server(strait_factory,
                                              upstream_factory, tmp_path):
    st, port, _ = start(strait_factory, upstream_factory, tmp_path)
    # modern: TLS 1.3 only.
    assert handshake(port, "modern.example.com", "-tls1_3")[0]
    assert not handshake(port, "modern.example.com", "-tls1_2")[0]
    # legacy: TLS 1.2 at most, one suite.
    ok, proto, cipher = handshake(port, "legacy.example.com")
    assert ok and proto == "TLSv1.2", (proto, cipher)
    assert cipher == "ECDHE-ECDSA-AES256-GCM-SHA384"
    assert not handshake(port, "legacy.example.com", "-tls1_3")[0]
    assert not handshake(port, "legacy.example.com", "-tls1_2", "-cipher",
                         "ECDHE-ECDSA-AES128-GCM-SHA256")[0]
    assert handshake(port, "legacy.example.com", "-tls1_2", "-cipher",
                     "ECDHE-ECDSA-AES256-GCM-SHA384")[0]


def check(path):
    return subprocess.run([STRAIT, "check", str(path)], capture_output=True,
                          text=True, timeout=30)


def test_check_refuses_versions_it_cannot_offer(tmp_path):
    for field in ("minProtocolVersion: TLSV1_0", "maxProtocolVersion: TLSV1_1",
                  "cipherSuites: [NOT-A-SUITE]"):
        f = tmp_path / "gw.yaml"
        f.write_text(f"""apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {{name: gw, namespace: default}}
spec:
  selector: {{}}
  servers:
  - port: {{number: 8443, name: https, protocol: HTTPS}}
    hosts: [a.example.com]
    tls: {{mode: SIMPLE, serverCertificate: /c.pem, privateKey: /k.pem,
          {field}}}
""")
        r = check(f)
        assert r.returncode == 1, (field, r.stdout, r.stderr)
        out = r.stdout + r.stderr
        if "Suite" in field or "SUITE" in field:
            assert "cipherSuites: a name is not a cipher suite" in out, out
        else:
            assert "TLS 1.0 and 1.1 are not offered" in out, out
