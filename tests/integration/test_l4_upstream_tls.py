"""DestinationRule tls on tcp and tls routes: the TCP relay originates
TLS (SIMPLE, MUTUAL, ISTIO_MUTUAL) to the destination with the cluster's
CA, SNI, subjectAltNames and client certificate, as the HTTP routes do.
The upstreams are python TLS servers on loopback that check what strait
shows them (SNI, ALPN, client certificate) and echo bytes back."""
import os
import selectors
import socket
import ssl
import subprocess
import threading

from conftest import SRCDIR, STRAIT, free_port, recv_exact, wait_for
from httpd import make_cert
from test_l4 import access_lines, gateway, start, terminating

SAMPLES = f"{SRCDIR}/tests/data/istio-samples/certs"
FOO = (f"{SAMPLES}/workload-foo-cert.pem", f"{SAMPLES}/workload-foo-key.pem")
FOO_ID = "spiffe://trust-domain-foo/ns/foo/sa/foo"


# -- upstreams ------------------------------------------------------------------

class TLSEcho:
    """A TLS server on 127.0.0.1 (through upstream_factory) that echoes
    what it reads and, after the client's end of stream, sends b"END" and
    closes. It records per handshake the SNI, the ALPN chosen from what
    the client offered (it offers "istio" and "http/1.1"), and the client
    certificate's URI SANs. client_ca: require a client certificate
    verified against it."""

    def __init__(self, upstream_factory, chain, key, client_ca=None):
        self.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.ctx.load_cert_chain(chain, key)
        if client_ca is not None:
            self.ctx.verify_mode = ssl.CERT_REQUIRED
            self.ctx.load_verify_locations(client_ca)
        self.ctx.set_alpn_protocols(["istio", "http/1.1"])
        self.sni = []
        self.ctx.sni_callback = lambda s, name, c: self.sni.append(name)
        self.alpn = []
        self.peers = []
        self.first = []  # the first bytes read after the handshake
        self.handshake_errors = []
        self.up = upstream_factory(self.serve)
        self.port = self.up.port

    def serve(self, c):
        try:
            s = self.ctx.wrap_socket(c, server_side=True)
        except (ssl.SSLError, OSError) as e:
            self.handshake_errors.append(repr(e))
            return
        self.alpn.append(s.selected_alpn_protocol())
        cert = s.getpeercert() or {}
        self.peers.append([v for k, v in cert.get("subjectAltName", ())
                           if k == "URI"])
        first = True
        while True:
            d = s.recv(1 << 16)
            if not d:
                break
            if first:
                self.first.append(d)
                first = False
            s.sendall(d)
        s.sendall(b"END")
        s.close()


def tcp_service(name, port, sa=None):
    """A ServiceEntry <name>.svc.test with one endpoint 127.0.0.1:port."""
    account = f", serviceAccount: {sa}" if sa else ""
    return f"""---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: {name}, namespace: default}}
spec:
  hosts: [{name}.svc.test]
  resolution: STATIC
  ports: [{{number: {port}, name: tcp, protocol: TCP}}]
  endpoints: [{{address: 127.0.0.1{account}}}]
"""


def dr(name, tls):
    return f"""---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {{name: {name}, namespace: default}}
spec:
  host: {name}.svc.test
  trafficPolicy:
    tls: {tls}
"""


def tcp_route(vs, port, host):
    return f"""---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: {vs}, namespace: default}}
spec:
  hosts: ["*"]
  gateways: [gw]
  tcp:
  - match: [{{port: {port}}}]
    route: [{{destination: {{host: {host}.svc.test}}}}]
"""


def tcp_server(port):
    return f"""  - port: {{number: {port}, name: tcp-{port}, protocol: TCP}}
    bind: 127.0.0.1
    hosts: ["*"]
"""


# -- clients ----------------------------------------------------------------------

def shut_write(s):
    """A FIN without close_notify, also on an SSLSocket (whose own
    shutdown() would drop the TLS layer)."""
    socket.socket.shutdown(s, socket.SHUT_WR)


def duplex(s, payload, timeout=30):
    """Sends payload while reading, then half-closes; returns everything
    read until the end of stream. Works for plain and TLS sockets."""
    s.setblocking(False)
    sel = selectors.DefaultSelector()
    sel.register(s, selectors.EVENT_READ | selectors.EVENT_WRITE)
    view = memoryview(payload)
    sent, got, done = 0, bytearray(), False
    try:
        while not done:
            events = sel.select(timeout=timeout)
            assert events, f"stalled: sent {sent}, read {len(got)}"
            for _, mask in events:
                if mask & selectors.EVENT_READ:
                    try:
                        while True:
                            d = s.recv(1 << 16)
                            if not d:
                                done = True
                                break
                            got += d
                    except (ssl.SSLWantReadError, ssl.SSLWantWriteError,
                            BlockingIOError):
                        pass
                if mask & selectors.EVENT_WRITE and sent < len(payload):
                    try:
                        sent += s.send(view[sent:sent + (1 << 16)])
                    except (ssl.SSLWantReadError, ssl.SSLWantWriteError,
                            BlockingIOError):
                        pass
                    if sent == len(payload):
                        shut_write(s)
                        sel.modify(s, selectors.EVENT_READ)
    finally:
        sel.close()
    return bytes(got)


def plain_talk(port, payload=b"hello"):
    with socket.create_connection(("127.0.0.1", port), timeout=15) as c:
        return duplex(c, payload)


def tls_client(cafile, name):
    ctx = ssl.create_default_context(cafile=cafile)
    return lambda c: ctx.wrap_socket(c, server_hostname=name)


def closed_without_reply(port):
    """The gateway closes the connection without a byte for the client."""
    with socket.create_connection(("127.0.0.1", port), timeout=15) as c:
        c.sendall(b"hello")
        try:
            return c.recv(10) == b""
        except ConnectionResetError:
            return True


def cluster_stat(st, name, key):
    return st.stats().get(f"cluster.{name}||0.{key}", 0)


# -- tests ------------------------------------------------------------------------

def test_simple_origination_from_plain_tcp(strait_factory, upstream_factory,
                                           tmp_path):
    """Plaintext in, TLS out: the upstream sees the DestinationRule's SNI
    and no ALPN (a TCP stream is not HTTP), strait verifies the upstream
    against caCertificates and that name, and the bytes come back with the
    half-close passed on both ways."""
    crt, key = make_cert(str(tmp_path), "up", "up.example.com",
                         ["up.example.com"])
    up = TLSEcho(upstream_factory, crt, key)
    port = free_port()
    st = start(strait_factory, tmp_path,
               gateway(tcp_server(port)) + tcp_service("up", up.port)
               + dr("up", f'{{mode: SIMPLE, sni: up.example.com, '
                          f'caCertificates: "{crt}"}}')
               + tcp_route("vs", port, "up"))
    assert plain_talk(port, b"ping") == b"pingEND"
    assert up.sni == ["up.example.com"]
    assert up.alpn == [None]
    line = wait_for(lambda: access_lines(st, "upstream_tls=originated"), 10,
                    "the session's log line")[0]
    assert "end=closed" in line and "cluster=up.svc.test||0" in line
    assert cluster_stat(st, "up.svc.test", "upstream_cx_total") == 1


def test_simple_origination_checks_the_name(strait_factory, upstream_factory,
                                            tmp_path):
    """An SNI the upstream's certificate does not carry: the certificate
    is refused, the client's connection closed without a byte, and the
    refusal logged and counted on the cluster."""
    crt, key = make_cert(str(tmp_path), "up", "up.example.com",
                         ["up.example.com"])
    up = TLSEcho(upstream_factory, crt, key)
    port = free_port()
    st = start(strait_factory, tmp_path,
               gateway(tcp_server(port)) + tcp_service("up", up.port)
               + dr("up", f'{{mode: SIMPLE, sni: other.example.com, '
                          f'caCertificates: "{crt}"}}')
               + tcp_route("vs", port, "up"))
    assert closed_without_reply(port)
    line = wait_for(lambda: access_lines(st, "upstream_tls_refused"), 10,
                    "the refusal in the access log")[0]
    assert 'end="upstream_tls_refused:Hostname mismatch"' in line, line
    assert "flags=UF" in line
    assert up.first == []
    assert cluster_stat(st, "up.svc.test", "upstream_cx_connect_fail") == 1
    assert f"upstream 127.0.0.1:{up.port}: certificate refused: Hostname " \
        "mismatch" in st.log()


def test_mutual_origination_with_client_certificate(strait_factory,
                                                    upstream_factory,
                                                    tmp_path):
    """MUTUAL: strait shows the DestinationRule's client certificate, which
    the upstream verifies against its CA, and checks subjectAltNames
    instead of the host name."""
    crt, key = make_cert(str(tmp_path), "up", "up.example.com",
                         ["up.example.com"])
    up = TLSEcho(upstream_factory, crt, key,
                 client_ca=f"{SAMPLES}/root-cert.pem")
    port = free_port()
    st = start(strait_factory, tmp_path,
               gateway(tcp_server(port)) + tcp_service("up", up.port)
               + dr("up", f'{{mode: MUTUAL, clientCertificate: "{FOO[0]}", '
                          f'privateKey: "{FOO[1]}", caCertificates: "{crt}", '
                          f'subjectAltNames: [up.example.com]}}')
               + tcp_route("vs", port, "up"))
    assert plain_talk(port, b"mutual") == b"mutualEND"
    assert up.peers == [[FOO_ID]]
    assert up.handshake_errors == []
    wait_for(lambda: access_lines(st, "upstream_tls=originated"), 10,
             "the session's log line")


def test_wrong_subject_alt_names_refused(strait_factory, upstream_factory,
                                         tmp_path):
    crt, key = make_cert(str(tmp_path), "up", "up.example.com",
                         ["up.example.com"])
    up = TLSEcho(upstream_factory, crt, key)
    port = free_port()
    st = start(strait_factory, tmp_path,
               gateway(tcp_server(port)) + tcp_service("up", up.port)
               + dr("up", f'{{mode: SIMPLE, caCertificates: "{crt}", '
                          f'subjectAltNames: [spiffe://x/ns/a/sa/nobody]}}')
               + tcp_route("vs", port, "up"))
    assert closed_without_reply(port)
    line = wait_for(lambda: access_lines(st, "upstream_tls_refused"), 10,
                    "the refusal in the access log")[0]
    assert "upstream_tls_refused:certificate identity not among the " \
        "expected subjectAltNames" in line, line
    assert "flags=UF" in line
    assert up.first == []
    assert cluster_stat(st, "up.svc.test", "upstream_cx_connect_fail") == 1


def ca_setup(strait_factory, tmp_path, conf):
    """A strait with the embedded CA, and a certificate it issued for the
    upstream's service account default/backend."""
    ca = tmp_path / "ca"
    st = strait_factory(extra=(
        f"config: {{dir: \"{conf}\"}}\n"
        f"ca: {{enabled: true, dir: \"{ca}\", "
        f"address: \"127.0.0.1:{free_port()}\"}}\n"))
    r = subprocess.run([STRAIT, "ca", "init", "-c", str(st.config)],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    for sa in ("backend", "other"):
        r = subprocess.run([STRAIT, "ca", "issue", "--namespace", "default",
                            "--service-account", sa, "--ttl", "1h", "--out",
                            str(tmp_path / sa), "-c", str(st.config)],
                           capture_output=True, text=True, timeout=30)
        assert r.returncode == 0, r.stderr
    return st, ca


def test_istio_mutual_origination(strait_factory, upstream_factory, tmp_path):
    """ISTIO_MUTUAL on a tcp route: the upstream verifies this node's
    SPIFFE certificate against the mesh root and sees Istio's SNI and
    ALPN "istio"; strait checks the upstream's identity against the
    endpoint's service account, so another identity is refused."""
    conf = tmp_path / "conf.d"
    conf.mkdir()
    st, ca = ca_setup(strait_factory, tmp_path, conf)
    root = str(ca / "root-cert.pem")
    good = TLSEcho(upstream_factory, str(tmp_path / "backend/cert-chain.pem"),
                   str(tmp_path / "backend/key.pem"), client_ca=root)
    bad = TLSEcho(upstream_factory, str(tmp_path / "other/cert-chain.pem"),
                  str(tmp_path / "other/key.pem"), client_ca=root)
    port, port2 = free_port(), free_port()
    (conf / "r.yaml").write_text(
        gateway(tcp_server(port) + tcp_server(port2))
        + tcp_service("mesh", good.port, sa="backend")
        + tcp_service("bad", bad.port, sa="backend")
        + dr("mesh", "{mode: ISTIO_MUTUAL}") + dr("bad", "{mode: ISTIO_MUTUAL}")
        + tcp_route("vs", port, "mesh") + tcp_route("vs2", port2, "bad"))
    st.start()
    assert plain_talk(port, b"mesh") == b"meshEND"
    assert good.peers == [["spiffe://cluster.local/ns/istio-system/sa/strait"]]
    assert good.sni == [f"outbound_.{good.port}_._.mesh.svc.test"]
    assert good.alpn == ["istio"]
    assert closed_without_reply(port2)
    line = wait_for(lambda: access_lines(st, "upstream_tls_refused"), 10,
                    "the refusal in the access log")[0]
    assert "certificate identity not among the expected subjectAltNames" \
        in line
    assert bad.first == []


def test_istio_mutual_without_mesh_certificate_refuses(strait_factory,
                                                       upstream_factory,
                                                       tmp_path):
    """No CA, so no mesh certificate: sessions are refused (UF) and never
    reach the upstream in the clear."""
    plain = upstream_factory()
    port = free_port()
    st = start(strait_factory, tmp_path,
               gateway(tcp_server(port)) + tcp_service("m", plain.port)
               + dr("m", "{mode: ISTIO_MUTUAL}") + tcp_route("vs", port, "m"))
    assert closed_without_reply(port)
    line = wait_for(lambda: access_lines(st, "upstream_tls_unavailable"), 10,
                    "the refusal in the access log")[0]
    assert "flags=UF" in line
    assert plain.conns == 0


def test_tls_terminated_then_originated_large_transfers(strait_factory,
                                                        upstream_factory,
                                                        tmp_path):
    """TLS on both sides (a SIMPLE Gateway server, a SIMPLE DestinationRule):
    1 MiB and 4 MiB each way byte for byte, and the client's half-close
    still gets the upstream's reply after it."""
    crt, key = make_cert(str(tmp_path), "up", "up.example.com",
                         ["up.example.com"])
    gw_crt, gw_key = make_cert(str(tmp_path), "gw", "gw.example.com",
                               ["gw.example.com"])
    up = TLSEcho(upstream_factory, crt, key)
    port, pport = free_port(), free_port()
    st = start(strait_factory, tmp_path,
               gateway(terminating(port, "SIMPLE", gw_crt, gw_key)
                       + tcp_server(pport))
               + tcp_service("up", up.port)
               + dr("up", f'{{mode: SIMPLE, sni: up.example.com, '
                          f'caCertificates: "{crt}"}}')
               + tcp_route("vs", port, "up") + tcp_route("vs2", pport, "up"))
    wrap = tls_client(gw_crt, "gw.example.com")
    for size in (1 << 20, 4 << 20):
        payload = os.urandom(size)
        with socket.create_connection(("127.0.0.1", port), timeout=30) as c:
            with wrap(c) as s:
                assert duplex(s, payload) == payload + b"END"
        # Plaintext in, TLS out, the same sizes.
        with socket.create_connection(("127.0.0.1", pport), timeout=30) as c:
            assert duplex(c, payload) == payload + b"END"
    lines = wait_for(lambda: access_lines(st, f"bytes_in={4 << 20}"), 10,
                     "the big sessions' log lines")
    assert any("tls=terminated" in l and "upstream_tls=originated" in l
               for l in lines), lines
    assert all(f"upstream_bytes_in={(4 << 20) + 3}" in l for l in lines)


def test_half_close_over_originated_tls(strait_factory, upstream_factory,
                                        tmp_path):
    """The client shuts its sending side first: the upstream reads the
    end of stream (strait's close_notify) and its reply still arrives."""
    crt, key = make_cert(str(tmp_path), "up", "up.example.com",
                         ["up.example.com"])
    seen_eof = threading.Event()

    def reply_after_eof(c):
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(crt, key)
        s = ctx.wrap_socket(c, server_side=True)
        got = b""
        while True:
            d = s.recv(4096)
            if not d:
                break
            got += d
        seen_eof.set()
        s.sendall(b"after-eof:" + got)
        s.close()

    up = upstream_factory(reply_after_eof)
    port = free_port()
    start(strait_factory, tmp_path,
          gateway(tcp_server(port)) + tcp_service("up", up.port)
          + dr("up", f'{{mode: SIMPLE, sni: up.example.com, '
                     f'caCertificates: "{crt}"}}')
          + tcp_route("vs", port, "up"))
    with socket.create_connection(("127.0.0.1", port), timeout=15) as c:
        c.sendall(b"question")
        c.shutdown(socket.SHUT_WR)
        assert recv_exact(c, 18) == b"after-eof:question"
        assert c.recv(10) == b""
    assert seen_eof.is_set()


def test_passthrough_wrapped_in_originated_tls(strait_factory,
                                               upstream_factory, tmp_path):
    """A tls route through a PASSTHROUGH server to a destination whose
    DestinationRule asks for TLS: as Istio does, the client's TLS stream
    is sent untouched inside the TLS strait originates, so the upstream
    reads the client's own ClientHello (with its SNI) after its handshake
    with strait."""
    crt, key = make_cert(str(tmp_path), "up", "up.example.com",
                         ["up.example.com"])
    up = TLSEcho(upstream_factory, crt, key)
    port = free_port()
    st = start(strait_factory, tmp_path,
               gateway(f"""  - port: {{number: {port}, name: tls, protocol: TLS}}
    bind: 127.0.0.1
    hosts: ["*"]
    tls: {{mode: PASSTHROUGH}}
""") + tcp_service("up", up.port)
               + dr("up", f'{{mode: SIMPLE, sni: up.example.com, '
                          f'caCertificates: "{crt}"}}') + f"""---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: pt, namespace: default}}
spec:
  hosts: [inner.example.com]
  gateways: [gw]
  tls:
  - match: [{{sniHosts: [inner.example.com]}}]
    route: [{{destination: {{host: up.svc.test}}}}]
""")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    with socket.create_connection(("127.0.0.1", port), timeout=15) as c:
        incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        inner = ctx.wrap_bio(incoming, outgoing,
                             server_hostname="inner.example.com")
        try:
            inner.do_handshake()
        except ssl.SSLWantReadError:
            pass
        hello = outgoing.read()
        c.sendall(hello)
        # The upstream echoes the ClientHello back through both layers.
        assert recv_exact(c, len(hello)) == hello
    wait_for(lambda: up.first, 10, "the upstream's first bytes")
    assert up.sni == ["up.example.com"]
    first = b"".join(up.first)
    assert first[:1] == b"\x16" and b"inner.example.com" in first
    wait_for(lambda: access_lines(st, "upstream_tls=originated"), 10,
             "the session's log line")


def test_check_warns_about_wrapped_passthrough(tmp_path):
    """strait check says when a tls route's destination has DestinationRule
    tls (the client's stream will be wrapped), per subset and port, and
    stays quiet for DISABLE; warnings do not fail the check."""
    text = gateway("""  - port: {number: 443, name: tls, protocol: TLS}
    hosts: ["*"]
    tls: {mode: PASSTHROUGH}
""") + tcp_service("up", 443) + tcp_service("plain", 443) + """---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: up, namespace: default}
spec:
  host: up.svc.test
  trafficPolicy:
    portLevelSettings:
    - port: {number: 443}
      tls: {mode: DISABLE}
  subsets:
  - name: v1
    labels: {}
    trafficPolicy: {tls: {mode: ISTIO_MUTUAL}}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: pt, namespace: default}
spec:
  hosts: [a.example.com, b.example.com]
  gateways: [gw]
  tls:
  - match: [{sniHosts: [a.example.com]}]
    route: [{destination: {host: up.svc.test, subset: v1, port: {number: 443}}}]
  - match: [{sniHosts: [b.example.com]}]
    route: [{destination: {host: up.svc.test, port: {number: 443}}}]
"""
    path = tmp_path / "r.yaml"
    path.write_text(text)
    r = subprocess.run([STRAIT, "check", str(path)], capture_output=True,
                       text=True, timeout=30)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    warnings = [l for l in out.splitlines() if "sent inside TLS" in l]
    assert len(warnings) == 1, out
    assert "spec.tls[0].route[0].destination" in warnings[0]
    assert "tls mode ISTIO_MUTUAL" in warnings[0]
