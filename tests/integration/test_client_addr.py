"""Trusted client addresses on Gateway listeners, as Istio's
gatewayTopology sets them: numTrustedProxies (X-Forwarded-For) and
proxyProtocol (v1 and v2 headers written here and by curl
--haproxy-protocol), and the client address they give to remoteIpBlocks,
ipBlocks, X-Forwarded-For and the access log (%DOWNSTREAM_REMOTE_ADDRESS%
vs %DOWNSTREAM_DIRECT_REMOTE_ADDRESS%); forwardClientCertDetails in each
of its modes, with the X-Forwarded-Client-Cert element in Envoy's format
(Hash, Cert, Subject, URI). One strait per gatewayTopology."""
import hashlib
import socket
import ssl
import struct
import subprocess
import urllib.parse

import pytest

from conftest import SRCDIR, STRAIT, Strait, Upstream, echo_handler, finish_strait, \
    free_port, responder, wait_for
from httpd import make_cert
from test_gateway import GATEWAY_AND_UP

MAX_V2 = 256
SIG = b"\r\n\r\n\x00\r\nQUIT\n"
SAMPLES = f"{SRCDIR}/tests/data/istio-samples/certs"
FOO = (f"{SAMPLES}/workload-foo-cert.pem", f"{SAMPLES}/workload-foo-key.pem")
FOO_ID = "spiffe://trust-domain-foo/ns/foo/sa/foo"
HOST = "gw.example.com"

POLICY = """apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: deny-client, namespace: istio-system}
spec:
  action: DENY
  rules:
  - from: [{source: {remoteIpBlocks: [203.0.113.0/24]}}]
  - from: [{source: {ipBlocks: [127.0.0.9/32]}}]
"""


def xff_of(head):
    """The upstream answers with the X-Forwarded-For it was sent."""
    for line in head.split(b"\r\n")[1:]:
        k, _, v = line.partition(b":")
        if k.strip().lower() == b"x-forwarded-for":
            return v.strip()
    return b"-"


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    """One strait: a Gateway with an HTTP, an HTTPS and a TCP server, all
    behind numTrustedProxies 1 and a required PROXY header."""
    tmp = tmp_path_factory.mktemp("client_addr")
    up = Upstream(responder(xff_of))
    echo = Upstream(echo_handler)
    conf = tmp / "conf.d"
    conf.mkdir()
    ports = {"http": free_port(), "https": free_port(), "tcp": free_port()}
    crt, key = make_cert(str(tmp), "gw", HOST, [HOST])
    (conf / "r.yaml").write_text(f"""apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {{name: gw, namespace: default}}
spec:
  selector: {{}}
  servers:
  - port: {{number: {ports["http"]}, name: http, protocol: HTTP}}
    bind: 127.0.0.1
    hosts: ["*"]
  - port: {{number: {ports["https"]}, name: https, protocol: HTTPS}}
    bind: 127.0.0.1
    hosts: ["*"]
    tls: {{mode: SIMPLE, serverCertificate: "{crt}", privateKey: "{key}"}}
  - port: {{number: {ports["tcp"]}, name: tcp, protocol: TCP}}
    bind: 127.0.0.1
    hosts: ["*"]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: up, namespace: default}}
spec:
  hosts: [up.example.com]
  resolution: STATIC
  ports: [{{number: {up.port}, name: http, protocol: HTTP}}]
  endpoints: [{{address: 127.0.0.1}}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: echo, namespace: default}}
spec:
  hosts: [echo.example.com]
  resolution: STATIC
  ports: [{{number: {echo.port}, name: tcp, protocol: TCP}}]
  endpoints: [{{address: 127.0.0.1}}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: vs, namespace: default}}
spec:
  hosts: ["*"]
  gateways: [gw]
  http:
  - route: [{{destination: {{host: up.example.com}}}}]
  tcp:
  - route: [{{destination: {{host: echo.example.com}}}}]
---
""" + POLICY)
    st = Strait(tmp, workers=1, extra=(
        f"config: {{dir: \"{conf}\"}}\n"
        "gatewayTopology:\n  numTrustedProxies: 1\n"
        f"  proxyProtocol: {{maxHeaderBytes: {MAX_V2}}}\n"
        "log:\n  accessLog: true\n  accessLogEncoding: TEXT\n"
        "  accessLogFormat: \"id=%REQ(X-TEST-ID)% code=%RESPONSE_CODE% "
        "remote=%DOWNSTREAM_REMOTE_ADDRESS% "
        "direct=%DOWNSTREAM_DIRECT_REMOTE_ADDRESS%\\n\"\n"))
    st.start()
    yield st, ports["http"], ports, crt
    finish_strait(st)
    up.stop()
    echo.stop()


def v1(src="198.51.100.9", sport=4242):
    return f"PROXY TCP4 {src} 127.0.0.1 {sport} 80\r\n".encode()


def v2(src="198.51.100.9", sport=4242, tlv=b"", local=False):
    addrs = socket.inet_aton(src) + socket.inet_aton("127.0.0.1") + \
        struct.pack("!HH", sport, 80)
    if local:
        return SIG + bytes([0x20, 0x00]) + struct.pack("!H", 0)
    body = addrs + tlv
    return SIG + bytes([0x21, 0x11]) + struct.pack("!H", len(body)) + body


def noop_tlv(total):
    """A v2 header of exactly total bytes (padded with a NOOP TLV)."""
    pad = total - len(v2()) - 3
    return bytes([0x04]) + struct.pack("!H", pad) + b"\0" * pad


def exchange(port, header, rid, xff=None, src="127.0.0.1"):
    """Sends header and a request; returns (status, body), or None when
    strait closed the connection without an answer."""
    s = socket.socket()
    s.settimeout(10)
    s.bind((src, 0))
    s.connect(("127.0.0.1", port))
    extra = f"x-forwarded-for: {xff}\r\n" if xff else ""
    try:
        s.sendall(header + (f"GET / HTTP/1.1\r\nhost: a\r\nx-test-id: {rid}\r\n"
                            f"{extra}connection: close\r\n\r\n").encode())
        data = b""
        while True:
            d = s.recv(65536)
            if not d:
                break
            data += d
    except ConnectionResetError:
        data = b""
    finally:
        s.close()
    if not data:
        return None
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), body


def logged(st, rid):
    line = wait_for(lambda: [ln for ln in st.log().splitlines()
                             if f"id={rid} " in ln], 10, f"log of {rid}")[0]
    return dict(kv.split("=", 1) for kv in line.split()[-4:])


def proto_errors(st):
    return sum(v for k, v in st.stats().items()
               if k.endswith("downstream_cx_proxy_proto_error"))


def test_proxy_v2_source_is_the_client(gw):
    st, port = gw[:2]
    assert exchange(port, v2(), "v2") == (200, b"198.51.100.9")
    log = logged(st, "v2")
    assert log["remote"] == "198.51.100.9:4242"
    assert log["direct"].startswith("127.0.0.1:")


def test_proxy_v1_from_python_and_curl(gw):
    st, port = gw[:2]
    assert exchange(port, v1(src="198.51.100.10"), "v1") == (200, b"198.51.100.10")
    assert logged(st, "v1")["remote"] == "198.51.100.10:4242"
    out = subprocess.run(
        ["curl", "-sS", "--haproxy-protocol", "-H", "x-test-id: curl",
         f"http://127.0.0.1:{port}/"], capture_output=True, timeout=20)
    assert out.returncode == 0, out.stderr
    assert out.stdout == b"127.0.0.1"
    assert logged(st, "curl")["code"] == "200"


def test_proxy_v2_local_keeps_the_peer(gw):
    st, port = gw[:2]
    assert exchange(port, v2(local=True), "local") == (200, b"127.0.0.1")
    log = logged(st, "local")
    assert log["remote"] == log["direct"]


def test_num_trusted_proxies_picks_the_xff_entry(gw):
    st, port = gw[:2]
    # One trusted proxy: the first entry from the right is the client.
    r = exchange(port, v2(), "xff", xff="203.0.113.7, 192.0.2.44")
    assert r == (200, b"203.0.113.7, 192.0.2.44, 198.51.100.9")
    assert logged(st, "xff")["remote"] == "192.0.2.44:0"
    # That client is what remoteIpBlocks sees: 203.0.113.0/24 is denied.
    assert exchange(port, v2(), "xff-deny", xff="192.0.2.44, 203.0.113.7")[0] == 403
    # Without an X-Forwarded-For, the PROXY source is the client.
    assert exchange(port, v2(src="203.0.113.8"), "pp-deny")[0] == 403


def test_ip_blocks_see_the_direct_peer(gw):
    port = gw[1]
    # ipBlocks is the socket's peer (Envoy's direct_remote_ip), whatever
    # the PROXY header says: 127.0.0.9 is denied, its clients too.
    assert exchange(port, v2(), "direct-deny", src="127.0.0.9")[0] == 403
    assert exchange(port, v2(src="127.0.0.9"), "direct-ok")[0] == 200


def test_without_or_with_a_bad_header_closed(gw):
    st, port = gw[:2]
    before = proto_errors(st)
    assert exchange(port, b"", "none") is None
    assert exchange(port, b"PROXY TCP4 198.51.100.9 127.0.0.1 99999 80\r\n",
                    "badport") is None
    assert exchange(port, v2()[:12] + bytes([0x31]) + v2()[13:], "badver") is None
    wait_for(lambda: proto_errors(st) >= before + 3, 10, "proxy_proto_error")
    # Nothing good changed: the next client is served.
    assert exchange(port, v2(), "after")[0] == 200


def test_v2_header_limit_and_one_more(gw):
    st, port = gw[:2]
    h = v2(tlv=noop_tlv(MAX_V2))
    assert len(h) == MAX_V2
    assert exchange(port, h, "at-limit") == (200, b"198.51.100.9")
    before = proto_errors(st)
    h = v2(tlv=noop_tlv(MAX_V2 + 1))
    assert len(h) == MAX_V2 + 1
    assert exchange(port, h, "over-limit") is None
    wait_for(lambda: proto_errors(st) == before + 1, 10, "proxy_proto_error")


# -- X-Forwarded-Client-Cert --------------------------------------------------

FORGED = "Hash=forged;URI=spiffe://evil/ns/x/sa/y"


def xfcc_of(head):
    for line in head.split(b"\r\n")[1:]:
        k, _, v = line.partition(b":")
        if k.strip().lower() == b"x-forwarded-client-cert":
            return v.strip()
    return b"-"


@pytest.fixture(scope="module", params=[
    "UNDEFINED", "SANITIZE_SET", "APPEND_FORWARD", "SANITIZE", "FORWARD_ONLY",
    "ALWAYS_FORWARD_ONLY"])
def xfcc_gw(request, tmp_path_factory):
    mode = request.param
    tmp = tmp_path_factory.mktemp("xfcc")
    up = Upstream(responder(xfcc_of))
    conf = tmp / "conf.d"
    conf.mkdir()
    port = free_port()
    crt, key = make_cert(str(tmp), "gw", HOST, [HOST])
    (conf / "r.yaml").write_text(f"""apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {{name: gw, namespace: default}}
spec:
  selector: {{}}
  servers:
  - port: {{number: {port}, name: https, protocol: HTTPS}}
    bind: 127.0.0.1
    hosts: ["*"]
    tls: {{mode: OPTIONAL_MUTUAL, serverCertificate: "{crt}",
          privateKey: "{key}", caCertificates: "{SAMPLES}/root-cert.pem"}}
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: up, namespace: default}}
spec:
  hosts: [up.example.com]
  resolution: STATIC
  ports: [{{number: {up.port}, name: http, protocol: HTTP}}]
  endpoints: [{{address: 127.0.0.1}}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: vs, namespace: default}}
spec:
  hosts: ["*"]
  gateways: [gw]
  http:
  - route: [{{destination: {{host: up.example.com}}}}]
""")
    st = Strait(tmp, workers=1, extra=(
        f"config: {{dir: \"{conf}\"}}\n"
        f"gatewayTopology: {{forwardClientCertDetails: {mode}}}\n"))
    st.start()
    yield mode, port, crt
    finish_strait(st)
    up.stop()


def curl_xfcc(port, crt, cert=None, sent=FORGED):
    args = ["curl", "-sS", "--max-time", "10", "--cacert", crt,
            "--resolve", f"{HOST}:{port}:127.0.0.1",
            "-H", f"x-forwarded-client-cert: {sent}"]
    if cert:
        args += ["--cert", cert[0], "--key", cert[1]]
    p = subprocess.run(args + [f"https://{HOST}:{port}/"],
                       capture_output=True, timeout=30)
    assert p.returncode == 0, p.stderr
    return p.stdout.decode()


def foo_element():
    """This hop's element for the sample workload foo, as Envoy writes it
    with Istio's fields (no By=: the gateway's certificate has no URI)."""
    pem = open(FOO[0]).read()
    leaf = pem[:pem.index("-----END CERTIFICATE-----")] + \
        "-----END CERTIFICATE-----\n"
    der = ssl.PEM_cert_to_DER_cert(leaf)
    return (f"Hash={hashlib.sha256(der).hexdigest()};"
            f"Cert=\"{urllib.parse.quote(leaf, safe='-._~')}\";"
            f"Subject=\"\";URI={FOO_ID}")


def test_forward_client_cert_details(xfcc_gw):
    mode, port, crt = xfcc_gw
    mtls = curl_xfcc(port, crt, cert=FOO)
    plain = curl_xfcc(port, crt)
    mine = foo_element()
    want = {
        # Istio's gateway default: this hop's element replaces the
        # client's; without a client certificate, none.
        "UNDEFINED": (mine, "-"),
        "SANITIZE_SET": (mine, "-"),
        "APPEND_FORWARD": (FORGED + "," + mine, "-"),
        "SANITIZE": ("-", "-"),
        "FORWARD_ONLY": (FORGED, "-"),
        "ALWAYS_FORWARD_ONLY": (FORGED, FORGED),
    }[mode]
    assert (mtls, plain) == want


def test_proxy_header_before_tls(gw):
    st, _, ports, crt = gw
    ctx = ssl.create_default_context(cafile=crt)
    raw = socket.create_connection(("127.0.0.1", ports["https"]), timeout=10)
    raw.sendall(v1(src="198.51.100.11"))
    with ctx.wrap_socket(raw, server_hostname=HOST) as s:
        s.sendall(b"GET / HTTP/1.1\r\nhost: gw.example.com\r\n"
                  b"x-test-id: tls\r\nconnection: close\r\n\r\n")
        data = b""
        while True:
            d = s.recv(65536)
            if not d:
                break
            data += d
    assert data.startswith(b"HTTP/1.1 200") and data.endswith(b"198.51.100.11")
    assert logged(st, "tls")["remote"] == "198.51.100.11:4242"


def tcp_exchange(port, header, payload=b"ping"):
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        data = b""
        try:
            s.sendall(header + payload)
            s.shutdown(socket.SHUT_WR)
            while True:
                d = s.recv(65536)
                if not d:
                    break
                data += d
        except OSError:
            # Refused: closed, perhaps before the bytes were all sent.
            pass
    return data


def test_proxy_header_on_tcp(gw):
    st, _, ports, _ = gw
    # The header is taken off; the bytes after it reach the upstream.
    assert tcp_exchange(ports["tcp"], v2(src="198.51.100.77")) == b"ping"
    # The relay's log: the PROXY source, and the socket's peer as direct.
    line = wait_for(lambda: [ln for ln in st.log().splitlines()
                             if "remote=198.51.100.77:4242 " in ln], 10,
                    "the TCP access log line")[0]
    assert " direct=127.0.0.1:" in line
    assert tcp_exchange(ports["tcp"], v1()) == b"ping"
    # remoteIpBlocks sees the PROXY source on TCP as well.
    assert tcp_exchange(ports["tcp"], v2(src="203.0.113.9")) == b""
    # Required: without a header, or with a bad one, closed.
    before = proto_errors(st)
    assert tcp_exchange(ports["tcp"], b"") == b""
    assert tcp_exchange(ports["tcp"], b"PROXY TCP9 a b c d\r\n") == b""
    wait_for(lambda: proto_errors(st) >= before + 2, 10, "proxy_proto_error")


def test_pod_annotation_overrides_gateway_topology(tmp_path):
    """proxy.istio.io/config (node.annotations) wins over the top-level
    gatewayTopology for the keys it names, as Istio's pod annotation wins
    over meshConfig.defaultConfig; a bad one is refused with its name."""
    up = Upstream(responder(xff_of))
    conf = tmp_path / "conf.d"
    conf.mkdir()
    port = free_port()
    (conf / "r.yaml").write_text(
        GATEWAY_AND_UP.format(port=port, up_port=up.port) + """apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: vs, namespace: default}
spec:
  hosts: ["*"]
  gateways: [gw]
  http:
  - route: [{destination: {host: up.example.com}}]
""")
    base = (f"config: {{dir: \"{conf}\"}}\n"
            "gatewayTopology: {numTrustedProxies: 1, "
            "forwardClientCertDetails: SANITIZE}\n"
            "log:\n  accessLog: true\n  accessLogEncoding: TEXT\n"
            "  accessLogFormat: \"id=%REQ(X-TEST-ID)% "
            "remote=%DOWNSTREAM_REMOTE_ADDRESS%\\n\"\n")
    bad = Strait(tmp_path, workers=1, extra=base + (
        "node:\n  annotations:\n    proxy.istio.io/config: "
        "'{\"gatewayTopology\": {\"numTrustedProxies\": 65}}'\n"))
    r = subprocess.run([STRAIT, "run", "-c", str(bad.config)],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode != 0
    assert "node.annotations[proxy.istio.io/config]" in r.stderr, r.stderr
    assert "numTrustedProxies" in r.stderr
    st = Strait(tmp_path, workers=1, extra=base + (
        "node:\n  annotations:\n    proxy.istio.io/config: |\n"
        "      gatewayTopology:\n        numTrustedProxies: 2\n"))
    try:
        st.start()
        r = exchange(port, b"", "annot", xff="192.0.2.1, 192.0.2.2, 192.0.2.3")
        assert r == (200, b"192.0.2.1, 192.0.2.2, 192.0.2.3, 127.0.0.1")
        line = wait_for(lambda: [ln for ln in st.log().splitlines()
                                 if "id=annot " in ln], 10, "log")[0]
        assert line.endswith("remote=192.0.2.2:0")
    finally:
        finish_strait(st)
        up.stop()
