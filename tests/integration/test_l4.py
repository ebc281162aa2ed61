"""Gateway TCP and TLS servers: SNI passthrough by VirtualService tls
routes, tcp routes (plaintext and TLS terminated here), weights, and
client certificates (MUTUAL, OPTIONAL_MUTUAL) on TLS and HTTPS servers,
checked with Python's ssl, openssl s_client and curl against TLS and
plaintext upstreams on loopback."""
import os
import re
import socket
import ssl
import subprocess

import pytest

from conftest import free_port, recv_exact, wait_for
from httpd import make_cert, s_client

SAMPLES = "/work/shared/istio-samples/certs"
FOO = (f"{SAMPLES}/workload-foo-cert.pem", f"{SAMPLES}/workload-foo-key.pem")
BAR = (f"{SAMPLES}/workload-bar-cert.pem", f"{SAMPLES}/workload-bar-key.pem")
ROOT = f"{SAMPLES}/root-cert.pem"
FOO_ID = "spiffe://trust-domain-foo/ns/foo/sa/foo"
BAR_ID = "spiffe://trust-domain-bar/ns/bar/sa/bar"


# -- upstreams ----------------------------------------------------------------

def named_handler(name, ctx=None):
    """An upstream that answers each chunk with "<name>:<chunk>", and an
    HTTP GET with a 200 whose body is the name; over TLS when ctx is
    given."""
    def handler(c):
        if ctx is not None:
            try:
                c = ctx.wrap_socket(c, server_side=True)
            except (ssl.SSLError, OSError):
                return
        buf = b""
        while True:
            d = c.recv(65536)
            if not d:
                return
            buf += d
            if buf.startswith(b"GET "):
                if b"\r\n\r\n" in buf:
                    body = name.encode()
                    c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n"
                              b"Connection: close\r\n\r\n" % len(body) + body)
                    return
                continue
            c.sendall(name.encode() + b":" + d)
            buf = b""
    return handler


def tls_upstream(upstream_factory, tmp_path, name, host):
    crt, key = make_cert(str(tmp_path), name, host, [host])
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(crt, key)
    return upstream_factory(named_handler(name, ctx)), crt


# -- resources ------------------------------------------------------------------

def service(name, port):
    """A ServiceEntry <name>.svc.test with one endpoint on 127.0.0.1."""
    return f"""---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: {name}, namespace: default}}
spec:
  hosts: [{name}.svc.test]
  resolution: STATIC
  ports: [{{number: {port}, name: tcp, protocol: TCP}}]
  endpoints: [{{address: 127.0.0.1}}]
"""


def gateway(servers):
    return f"""apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {{name: gw, namespace: default}}
spec:
  selector: {{}}
  servers:
{servers}"""


def start(strait_factory, tmp_path, text, extra=""):
    conf = tmp_path / "conf.d"
    conf.mkdir(exist_ok=True)
    (conf / "r.yaml").write_text(text)
    return strait_factory(
        extra=f"config: {{dir: \"{conf}\"}}\n{extra}").start()


def stat(st, port, key):
    """A counter of the Gateway listener on port (bound to 127.0.0.1)."""
    return st.stats()[f"listener.gateway-127.0.0.1-{port}.{key}"]


def access_lines(st, needle):
    return [l for l in st.log().splitlines()
            if "tcp_session" in l and needle in l]


# -- clients --------------------------------------------------------------------

def tls_talk(port, sni, msg=b"hello", cafile=None, cert=None):
    """TLS through the gateway with SNI sni; sends msg and returns the
    reply (up to the first chunk's echo). cafile: verify the server's
    certificate (and name) against it; cert: (chain, key) to show."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    if cafile:
        ctx.load_verify_locations(cafile)
    else:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    if cert:
        ctx.load_cert_chain(*cert)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with ctx.wrap_socket(raw, server_hostname=sni) as s:
            s.sendall(msg)
            out = b""
            while b":" not in out or not out.endswith(msg):
                d = s.recv(65536)
                if not d:
                    break
                out += d
            return out


def refused(fn):
    """True when fn raises a connection or TLS error, or gets nothing."""
    try:
        return fn() == b""
    except (ssl.SSLError, OSError):
        return True


# -- TLS passthrough ------------------------------------------------------------

def passthrough_resources(port, a_port, b_port):
    return gateway(f"""  - port: {{number: {port}, name: tls, protocol: TLS}}
    bind: 127.0.0.1
    hosts: ["*.example.com"]
    tls: {{mode: PASSTHROUGH}}
""") + service("a", a_port) + service("b", b_port) + f"""---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: vs-a, namespace: default}}
spec:
  hosts: [a.example.com]
  gateways: [gw]
  tls:
  - match: [{{port: {port}, sniHosts: [a.example.com]}}]
    route: [{{destination: {{host: a.svc.test, port: {{number: {a_port}}}}}}}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: vs-wild, namespace: default}}
spec:
  hosts: ["*.wild.example.com"]
  gateways: [default/gw]
  tls:
  - match: [{{sniHosts: ["*.wild.example.com"]}}]
    route: [{{destination: {{host: b.svc.test, port: {{number: {b_port}}}}}}}]
"""


def test_passthrough_routes_by_sni_end_to_end(strait_factory, upstream_factory,
                                              tmp_path):
    a, a_crt = tls_upstream(upstream_factory, tmp_path, "a", "a.example.com")
    b, b_crt = tls_upstream(upstream_factory, tmp_path, "b", "x.wild.example.com")
    port = free_port()
    st = start(strait_factory, tmp_path,
               passthrough_resources(port, a.port, b.port))
    # Each client verifies the upstream's own certificate and name: the
    # gateway holds no certificate for them, so TLS went through intact.
    assert tls_talk(port, "a.example.com", cafile=a_crt) == b"a:hello"
    assert tls_talk(port, "x.wild.example.com", cafile=b_crt) == b"b:hello"
    # SNI is read without regard to case.
    assert tls_talk(port, "A.Example.COM") == b"a:hello"
    # curl, HTTP inside the untouched TLS stream.
    out = subprocess.run(
        ["curl", "-sS", "--max-time", "10", "--cacert", a_crt, "--resolve",
         f"a.example.com:{port}:127.0.0.1", f"https://a.example.com:{port}/"],
        capture_output=True, timeout=30)
    assert out.returncode == 0 and out.stdout == b"a", out
    # openssl s_client sees a's certificate.
    rc, text = s_client(port, "-CAfile", a_crt, "-verify_return_error",
                        servername="a.example.com")
    assert "O = strait-test-a" in text and "Verify return code: 0" in text, text
    line = wait_for(lambda: access_lines(st, "sni=x.wild.example.com"), 10,
                    "an access log line with the SNI")[0]
    assert "route=default/vs-wild" in line and f"upstream=127.0.0.1:{b.port}" in line
    assert "flags=-" in line, line


def test_passthrough_unknown_sni_closed_and_counted(strait_factory,
                                                    upstream_factory, tmp_path):
    a, _ = tls_upstream(upstream_factory, tmp_path, "a", "a.example.com")
    port = free_port()
    st = start(strait_factory, tmp_path,
               passthrough_resources(port, a.port, a.port))
    before = stat(st, port, "no_filter_chain_match")
    # Not a name any route has, and no SNI at all.
    assert refused(lambda: tls_talk(port, "nobody.example.com"))
    assert refused(lambda: tls_talk(port, None))
    # Not TLS at all.
    with socket.create_connection(("127.0.0.1", port), timeout=10) as c:
        c.sendall(b"GET / HTTP/1.1\r\nHost: a.example.com\r\n\r\n")
        try:
            assert c.recv(100) == b""
        except ConnectionResetError:
            pass
    wait_for(lambda: stat(st, port, "no_filter_chain_match")
             == before + 3, 10, "three connections counted without a route")
    line = wait_for(lambda: access_lines(st, "sni=nobody.example.com"), 10,
                    "the refused connection's log line")[0]
    assert "flags=NR" in line and "end=no_route" in line, line
    assert a.conns == 0
    assert stat(st, port, "tls_inspector.client_hello_errors") == 1


def test_passthrough_weights_split(strait_factory, upstream_factory, tmp_path):
    a, _ = tls_upstream(upstream_factory, tmp_path, "a", "a.example.com")
    b, _ = tls_upstream(upstream_factory, tmp_path, "b", "a.example.com")
    port = free_port()
    text = gateway(f"""  - port: {{number: {port}, name: https, protocol: HTTPS}}
    bind: 127.0.0.1
    hosts: ["a.example.com"]
    tls: {{mode: PASSTHROUGH}}
""") + service("a", a.port) + service("b", b.port) + f"""---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: split, namespace: default}}
spec:
  hosts: [a.example.com]
  gateways: [gw]
  tls:
  - match: [{{sniHosts: [a.example.com]}}]
    route:
    - {{destination: {{host: a.svc.test}}, weight: 75}}
    - {{destination: {{host: b.svc.test}}, weight: 25}}
"""
    start(strait_factory, tmp_path, text)
    n = 200
    got = {"a": 0, "b": 0}
    for _ in range(n):
        got[tls_talk(port, "a.example.com", b"x").split(b":")[0].decode()] += 1
    # Binomial(200, 0.25): mean 50, sd 6.1; 6 sd either side.
    assert got["a"] + got["b"] == n
    assert 50 - 37 <= got["b"] <= 50 + 37, got


# -- TCP ------------------------------------------------------------------------

def test_tcp_route_byte_exact_and_subnets(strait_factory, upstream_factory,
                                          tmp_path):
    echo = upstream_factory(named_handler("e"))
    never = upstream_factory(named_handler("never"))
    raw = upstream_factory()
    port, other = free_port(), free_port()
    text = gateway(f"""  - port: {{number: {port}, name: tcp, protocol: TCP}}
    bind: 127.0.0.1
    hosts: ["*"]
  - port: {{number: {other}, name: mongo, protocol: MONGO}}
    bind: 127.0.0.1
    hosts: ["*"]
""") + service("echo", echo.port) + service("never", never.port) \
        + service("raw", raw.port) + f"""---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: tcp, namespace: default}}
spec:
  hosts: ["*"]
  gateways: [gw]
  tcp:
  - match: [{{port: {port}, destinationSubnets: [10.0.0.0/8]}}]
    route: [{{destination: {{host: never.svc.test}}}}]
  - match: [{{port: {port}, destinationSubnets: [127.0.0.0/8]}}]
    route: [{{destination: {{host: echo.svc.test}}}}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: raw, namespace: default}}
spec:
  hosts: ["*"]
  gateways: [gw]
  tcp:
  - match: [{{port: {other}}}]
    route: [{{destination: {{host: raw.svc.test}}}}]
"""
    st = start(strait_factory, tmp_path, text)
    # The first rule whose destinationSubnets admit the connection.
    with socket.create_connection(("127.0.0.1", port), timeout=10) as c:
        c.sendall(b"ping")
        assert recv_exact(c, 6) == b"e:ping"
    # A megabyte both ways, byte for byte, with the client's FIN passed on.
    payload = os.urandom(1 << 20)
    with socket.create_connection(("127.0.0.1", other), timeout=30) as c:
        c.sendall(payload)
        c.shutdown(socket.SHUT_WR)
        got = bytearray()
        while True:
            d = c.recv(1 << 16)
            if not d:
                break
            got += d
    assert bytes(got) == payload
    assert never.conns == 0
    line = wait_for(lambda: access_lines(st, f"bytes_in={1 << 20}"), 10,
                    "the relay's log line")[0]
    assert "route=default/raw" in line and f"bytes_out={1 << 20}" in line


def test_tcp_without_route_closed(strait_factory, tmp_path):
    port = free_port()
    text = gateway(f"""  - port: {{number: {port}, name: tcp, protocol: TCP}}
    bind: 127.0.0.1
    hosts: ["*"]
""") + service("x", 9) + f"""---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: other-port, namespace: default}}
spec:
  hosts: ["*"]
  gateways: [gw]
  tcp:
  - match: [{{port: 1}}]
    route: [{{destination: {{host: x.svc.test}}}}]
"""
    st = start(strait_factory, tmp_path, text)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as c:
        assert c.recv(10) == b""
    assert stat(st, port, "no_filter_chain_match") == 1


# -- TLS terminated here, then TCP -----------------------------------------------

def terminating(port, mode, cert, key, extra_tls="", hosts='["*"]'):
    return f"""  - port: {{number: {port}, name: tls, protocol: TLS}}
    bind: 127.0.0.1
    hosts: {hosts}
    tls: {{mode: {mode}, serverCertificate: "{cert}", privateKey: "{key}"{extra_tls}}}
"""


def tcp_vs(host):
    return f"""---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: to-{host}, namespace: default}}
spec:
  hosts: ["*"]
  gateways: [gw]
  tcp:
  - route: [{{destination: {{host: {host}.svc.test}}}}]
"""


def test_tls_terminated_tcp_route(strait_factory, upstream_factory, tmp_path):
    echo = upstream_factory(named_handler("plain"))
    gw_crt, gw_key = make_cert(str(tmp_path), "gw", "gw.example.com",
                               ["gw.example.com"])
    port = free_port()
    st = start(strait_factory, tmp_path,
               gateway(terminating(port, "SIMPLE", gw_crt, gw_key))
               + service("echo", echo.port) + tcp_vs("echo"))
    # The gateway's certificate, and the plaintext upstream behind it.
    assert tls_talk(port, "gw.example.com", cafile=gw_crt) == b"plain:hello"
    line = wait_for(lambda: access_lines(st, "tls=terminated"), 10,
                    "the terminated session's log line")[0]
    assert "sni=gw.example.com" in line
    # No ALPN is offered back on a TCP server.
    rc, text = s_client(port, "-alpn", "h2", servername="gw.example.com")
    assert "No ALPN negotiated" in text, text


# -- client certificates ----------------------------------------------------------

def other_ca_client(tmp_path):
    """A client certificate with a SPIFFE ID from a CA the gateway does
    not trust."""
    d = str(tmp_path)
    key, crt = os.path.join(d, "rogue.key"), os.path.join(d, "rogue.crt")
    subprocess.run(["openssl", "req", "-x509", "-nodes", "-newkey", "ec",
                    "-pkeyopt", "ec_paramgen_curve:prime256v1", "-keyout", key,
                    "-out", crt, "-days", "2", "-subj", "/O=rogue",
                    "-addext", f"subjectAltName=URI:{FOO_ID}"],
                   check=True, capture_output=True, timeout=60)
    return crt, key


def test_mutual_tls_server(strait_factory, upstream_factory, tmp_path):
    echo = upstream_factory(named_handler("m"))
    gw_crt, gw_key = make_cert(str(tmp_path), "gw", "gw.example.com",
                               ["gw.example.com"])
    port = free_port()
    st = start(strait_factory, tmp_path,
               gateway(terminating(port, "MUTUAL", gw_crt, gw_key,
                                   f', caCertificates: "{ROOT}"'))
               + service("echo", echo.port) + tcp_vs("echo"))
    talk = lambda cert=None: tls_talk(port, "gw.example.com", cafile=gw_crt,
                                      cert=cert)
    assert refused(talk)
    assert refused(lambda: talk(other_ca_client(tmp_path)))
    assert talk(FOO) == b"m:hello"
    line = wait_for(lambda: access_lines(st, "peer_uri_san="), 10,
                    "the verified peer in the access log")[0]
    assert f"peer_uri_san={FOO_ID}" in line, line
    assert echo.conns == 1
    wait_for(lambda: stat(st, port, "tls.fail_certificate")
             >= 1, 10, "a refused certificate counted")


def test_mutual_subject_alt_names_from_credential(strait_factory,
                                                  upstream_factory, tmp_path):
    """credentialName with the CA in NAME-cacert/ca.crt, and
    subjectAltNames admitting bar only."""
    echo = upstream_factory(named_handler("s"))
    creds = tmp_path / "creds"
    (creds / "gwcred").mkdir(parents=True)
    (creds / "gwcred-cacert").mkdir()
    make_cert(str(creds / "gwcred"), "tls", "gw.example.com", ["gw.example.com"])
    with open(ROOT) as f:
        (creds / "gwcred-cacert" / "ca.crt").write_text(f.read())
    port = free_port()
    text = gateway(f"""  - port: {{number: {port}, name: tls, protocol: TLS}}
    bind: 127.0.0.1
    hosts: ["*"]
    tls:
      mode: MUTUAL
      credentialName: gwcred
      subjectAltNames: ["{BAR_ID}"]
""") + service("echo", echo.port) + tcp_vs("echo")
    start(strait_factory, tmp_path, text,
          extra=f"credentials: {{dir: \"{creds}\"}}\n")
    talk = lambda cert: tls_talk(port, "gw.example.com",
                                 cafile=str(creds / "gwcred" / "tls.crt"),
                                 cert=cert)
    assert refused(lambda: talk(FOO))
    assert talk(BAR) == b"s:hello"


def test_optional_mutual_https(strait_factory, upstream_factory, tmp_path):
    """OPTIONAL_MUTUAL on an HTTPS server: no certificate is fine, a good
    one is fine, a bad one is refused."""
    up = upstream_factory(named_handler("h"))
    gw_crt, gw_key = make_cert(str(tmp_path), "gw", "gw.example.com",
                               ["gw.example.com"])
    port = free_port()
    text = gateway(f"""  - port: {{number: {port}, name: https, protocol: HTTPS}}
    bind: 127.0.0.1
    hosts: ["*"]
    tls: {{mode: OPTIONAL_MUTUAL, serverCertificate: "{gw_crt}", privateKey: "{gw_key}", caCertificates: "{ROOT}"}}
""") + service("up", up.port) + """---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: web, namespace: default}
spec:
  hosts: ["*"]
  gateways: [gw]
  http:
  - route: [{destination: {host: up.svc.test}}]
"""
    st = start(strait_factory, tmp_path, text)

    def curl(*args):
        return subprocess.run(
            ["curl", "-sS", "--max-time", "10", "--cacert", gw_crt,
             "--resolve", f"gw.example.com:{port}:127.0.0.1", *args,
             f"https://gw.example.com:{port}/"],
            capture_output=True, timeout=30)
    assert curl().stdout == b"h"
    assert curl("--cert", FOO[0], "--key", FOO[1]).stdout == b"h"
    def request_lines():
        ls = [l for l in st.log().splitlines() if "http_request" in l]
        return ls if len(ls) >= 2 else None
    lines = wait_for(request_lines, 10, "two request log lines")
    # The request without a certificate has no peer; the other has foo's.
    assert "peer_uri_san" not in lines[0], lines
    assert f"peer_uri_san={FOO_ID}" in lines[1], lines
    rogue = other_ca_client(tmp_path)
    bad = curl("--cert", rogue[0], "--key", rogue[1])
    assert bad.returncode != 0 and bad.stdout == b"", bad


def test_mutual_https_refuses_without_certificate(strait_factory,
                                                  upstream_factory, tmp_path):
    up = upstream_factory(named_handler("h"))
    gw_crt, gw_key = make_cert(str(tmp_path), "gw", "gw.example.com",
                               ["gw.example.com"])
    port = free_port()
    text = gateway(f"""  - port: {{number: {port}, name: https, protocol: HTTPS}}
    bind: 127.0.0.1
    hosts: ["*"]
    tls: {{mode: MUTUAL, serverCertificate: "{gw_crt}", privateKey: "{gw_key}", caCertificates: "{ROOT}"}}
""") + service("up", up.port) + """---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: web, namespace: default}
spec:
  hosts: ["*"]
  gateways: [gw]
  http:
  - route: [{destination: {host: up.svc.test}}]
"""
    start(strait_factory, tmp_path, text)

    def curl(*args):
        return subprocess.run(
            ["curl", "-sS", "--max-time", "10", "--cacert", gw_crt,
             "--resolve", f"gw.example.com:{port}:127.0.0.1", *args,
             f"https://gw.example.com:{port}/"],
            capture_output=True, timeout=30)
    assert curl().stdout == b""
    assert curl("--cert", FOO[0], "--key", FOO[1]).stdout == b"h"


def test_new_snapshot_reroutes_new_connections_only(strait_factory,
                                                    upstream_factory, tmp_path):
    """A changed VirtualService rebuilds the TCP listener: new connections
    take the new route, an open session goes on with its upstream."""
    a = upstream_factory(named_handler("a"))
    b = upstream_factory(named_handler("b"))
    port = free_port()
    base = gateway(f"""  - port: {{number: {port}, name: tcp, protocol: TCP}}
    bind: 127.0.0.1
    hosts: ["*"]
""") + service("a", a.port) + service("b", b.port)
    st = start(strait_factory, tmp_path, base + tcp_vs("a"))
    old = socket.create_connection(("127.0.0.1", port), timeout=10)
    try:
        old.sendall(b"1")
        assert recv_exact(old, 3) == b"a:1"
        conf = tmp_path / "conf.d" / "r.yaml"
        tmp = tmp_path / "r.tmp"
        tmp.write_text(base + tcp_vs("b").replace("to-b", "to-a"))
        os.replace(tmp, conf)

        def reaches_b():
            with socket.create_connection(("127.0.0.1", port), timeout=10) as c:
                c.sendall(b"2")
                return recv_exact(c, 3) == b"b:2"
        wait_for(reaches_b, 15, "new connections routed to b")
        old.sendall(b"3")
        assert recv_exact(old, 3) == b"a:3"
    finally:
        old.close()
    assert "listener gateway-127.0.0.1-%d: changed" % port in st.log()


def leaf_pins(chain):
    """(hex SHA-256 of the leaf certificate with colons, base64 SHA-256
    of its SubjectPublicKeyInfo) of the first certificate in chain."""
    pem = open(chain).read()
    first = pem[:pem.index("-----END CERTIFICATE-----") + 25]
    der = ssl.PEM_cert_to_DER_cert(first)
    import hashlib
    import base64
    digest = hashlib.sha256(der).hexdigest().upper()
    cert_hash = ":".join(digest[i:i + 2] for i in range(0, 64, 2))
    pub = subprocess.run(["openssl", "x509", "-pubkey", "-noout"],
                         input=first.encode(), capture_output=True,
                         check=True, timeout=30).stdout
    spki_der = subprocess.run(["openssl", "pkey", "-pubin", "-outform", "DER"],
                              input=pub, capture_output=True, check=True,
                              timeout=30).stdout
    spki = base64.b64encode(hashlib.sha256(spki_der).digest()).decode()
    return cert_hash, spki


@pytest.mark.parametrize("pin", ["verifyCertificateHash",
                                 "verifyCertificateSpki"])
def test_mutual_certificate_pins(strait_factory, upstream_factory, tmp_path,
                                 pin):
    """A pinned certificate (by hash, or by public key) gets through; a
    certificate of the same CA that is not pinned does not."""
    echo = upstream_factory(named_handler("p"))
    gw_crt, gw_key = make_cert(str(tmp_path), "gw", "gw.example.com",
                               ["gw.example.com"])
    cert_hash, spki = leaf_pins(BAR[0])
    value = cert_hash if pin == "verifyCertificateHash" else spki
    port = free_port()
    start(strait_factory, tmp_path,
          gateway(terminating(port, "MUTUAL", gw_crt, gw_key,
                              f', caCertificates: "{ROOT}", {pin}: ["{value}"]'))
          + service("echo", echo.port) + tcp_vs("echo"))
    talk = lambda cert: tls_talk(port, "gw.example.com", cafile=gw_crt,
                                 cert=cert)
    assert talk(BAR) == b"p:hello"
    assert refused(lambda: talk(FOO))


def test_tls_terminated_large_transfer(strait_factory, upstream_factory,
                                       tmp_path):
    """Megabytes each way through a terminating TLS server: decrypted
    bytes the TLS layer holds past a full relay buffer are not left
    behind."""
    raw = upstream_factory()
    gw_crt, gw_key = make_cert(str(tmp_path), "gw", "gw.example.com",
                               ["gw.example.com"])
    port = free_port()
    start(strait_factory, tmp_path,
          gateway(terminating(port, "SIMPLE", gw_crt, gw_key))
          + service("raw", raw.port) + tcp_vs("raw"))
    payload = os.urandom(4 << 20)
    ctx = ssl.create_default_context(cafile=gw_crt)
    got = bytearray()
    with socket.create_connection(("127.0.0.1", port), timeout=30) as c:
        with ctx.wrap_socket(c, server_hostname="gw.example.com") as s:
            view = memoryview(payload)
            sent = 0
            s.setblocking(False)
            import selectors
            sel = selectors.DefaultSelector()
            sel.register(s, selectors.EVENT_READ | selectors.EVENT_WRITE)
            while len(got) < len(payload):
                events = sel.select(timeout=30)
                assert events, f"stalled at {len(got)} of {len(payload)}"
                for _, mask in events:
                    if mask & selectors.EVENT_READ:
                        try:
                            while True:
                                d = s.recv(1 << 16)
                                # An early end is a failure, not a spin.
                                assert d, f"closed at {len(got)} bytes"
                                got += d
                        except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
                            pass
                    if mask & selectors.EVENT_WRITE and sent < len(payload):
                        try:
                            sent += s.send(view[sent:sent + (1 << 16)])
                        except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
                            pass
                    if sent == len(payload):
                        sel.modify(s, selectors.EVENT_READ)
    assert bytes(got) == payload
