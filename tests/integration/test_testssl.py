"""testssl.sh --nodns none against a Gateway HTTPS server (RSA and ECDSA
certificates, strait's defaults): nothing below TLS 1.2, no NULL,
anonymous, export, low, 3DES/IDEA or CBC-average cipher, only strong
ones."""
import json
import subprocess

from conftest import free_port


def make_cert(d, kind):
    key, crt = d / f"{kind}.key", d / f"{kind}.crt"
    algo = (["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256"]
            if kind == "ecdsa" else ["-newkey", "rsa:2048"])
    subprocess.run(["openssl", "req", "-x509", *algo, "-nodes", "-keyout",
                    str(key), "-out", str(crt), "-days", "2", "-subj",
                    "/CN=gw.example.com", "-addext",
                    "subjectAltName=DNS:gw.example.com"],
                   check=True, capture_output=True, timeout=60)
    return crt, key


def test_testssl_finds_nothing_weak(strait_factory, tmp_path):
    conf = tmp_path / "conf.d"
    conf.mkdir()
    port = free_port()
    ecdsa = make_cert(tmp_path, "ecdsa")
    rsa = make_cert(tmp_path, "rsa")
    servers = "".join(f"""  - port: {{number: {port}, name: https-{kind}, protocol: HTTPS}}
    bind: 127.0.0.1
    hosts: ["*"]
    tls: {{mode: SIMPLE, serverCertificate: "{crt}", privateKey: "{key}"}}
""" for kind, (crt, key) in (("ecdsa", ecdsa), ("rsa", rsa)))
    (conf / "gw.yaml").write_text(f"""apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {{name: gw, namespace: default}}
spec:
  selector: {{}}
  servers:
{servers}---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: vs, namespace: default}}
spec:
  hosts: ["*"]
  gateways: [gw]
  http:
  - directResponse: {{status: 200, body: {{string: ok}}}}
""")
    st = strait_factory(workers=1, extra=f"config: {{dir: \"{conf}\"}}\n").start()
    out = tmp_path / "testssl.json"
    r = subprocess.run(["testssl", "--nodns", "none", "--quiet", "--color", "0",
                        "--warnings", "off", "--jsonfile", str(out), "-p", "-s",
                        f"127.0.0.1:{port}"],
                       capture_output=True, text=True, timeout=600)
    assert out.exists(), r.stdout + r.stderr
    found = {f["id"]: f["finding"] for f in json.loads(out.read_text())}
    for proto in ("SSLv2", "SSLv3", "TLS1", "TLS1_1"):
        assert found[proto] == "not offered", (proto, found[proto])
    assert found["TLS1_2"] == "offered"
    assert found["TLS1_3"].startswith("offered")
    for weak in ("cipherlist_NULL", "cipherlist_aNULL", "cipherlist_EXPORT",
                 "cipherlist_LOW", "cipherlist_3DES_IDEA",
                 "cipherlist_AVERAGE"):
        assert found[weak] == "not offered", (weak, found[weak])
    assert found["cipherlist_STRONG"] == "offered"
    # The scan really talked to strait: handshakes were counted, and the
    # failed ones (old versions, weak ciphers) by reason.
    s = st.stats()
    assert sum(v for k, v in s.items() if k.endswith(".tls.handshakes")) > 0
    assert sum(v for k, v in s.items()
               if k.endswith((".tls.fail_version", ".tls.fail_cipher"))) > 0
