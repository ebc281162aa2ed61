"""Two (three) strait instances on loopback make a small mesh: one runs
the CA and serves a Gateway with tls mode ISTIO_MUTUAL behind an
AuthorizationPolicy on the caller's principal; the others join its CA
with a token and call it through DestinationRule ISTIO_MUTUAL. The
PeerAuthentication of the called node decides whether plaintext is
taken beside mTLS."""
import os
import socket
import ssl

from conftest import SRCDIR, free_port, responder, wait_for
from test_ca import Node, nodes, token  # noqa: F401 (nodes is a fixture)
from test_gateway import get


echo = responder(lambda head: b"echo " + head.split(b" ")[1])


CALLED = """apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {{name: mesh-in, namespace: istio-system}}
spec:
  selector: {{}}
  servers:
  - port: {{number: {port}, name: https-mesh, protocol: HTTPS}}
    bind: 127.0.0.1
    hosts: ["*"]
    tls: {{mode: ISTIO_MUTUAL}}
  - port: {{number: {tcp_port}, name: tls-mesh, protocol: TLS}}
    bind: 127.0.0.1
    hosts: ["*"]
    tls: {{mode: ISTIO_MUTUAL}}
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: echo-tcp, namespace: istio-system}}
spec:
  hosts: [echo-tcp.internal]
  resolution: STATIC
  ports: [{{number: {raw}, name: tcp, protocol: TCP}}]
  endpoints: [{{address: 127.0.0.1}}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: tcp-in, namespace: istio-system}}
spec:
  hosts: ["*"]
  gateways: [mesh-in]
  tcp:
  - match: [{{port: {tcp_port}}}]
    route: [{{destination: {{host: echo-tcp.internal}}}}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: echo, namespace: istio-system}}
spec:
  hosts: [echo.internal]
  resolution: STATIC
  ports: [{{number: {echo}, name: http, protocol: HTTP}}]
  endpoints: [{{address: 127.0.0.1}}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: in, namespace: istio-system}}
spec:
  hosts: ["*"]
  gateways: [mesh-in]
  http:
  - route: [{{destination: {{host: echo.internal}}}}]
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {{name: callers, namespace: istio-system}}
spec:
  rules:
  - from: [{{source: {{principals: [example.org/ns/team/sa/caller]}}}}]
    to: [{{operation: {{paths: ["/allowed*", "/denied*"]}}}}]
  - from: [{{source: {{principals: [example.org/ns/team/sa/caller]}}}}]
    to: [{{operation: {{ports: ["{tcp_port}"]}}}}]
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {{name: no-denied, namespace: istio-system}}
spec:
  action: DENY
  rules:
  - from: [{{source: {{namespaces: [team]}}}}]
    to: [{{operation: {{ports: ["{port}"], paths: ["/denied*"]}}}}]
"""

CALLER = """apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {{name: edge, namespace: team}}
spec:
  selector: {{}}
  servers:
  - port: {{number: {port}, name: http, protocol: HTTP}}
    bind: 127.0.0.1
    hosts: ["*"]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: called, namespace: team}}
spec:
  hosts: [called.mesh]
  resolution: STATIC
  ports: [{{number: {called}, name: https, protocol: HTTP}}]
  endpoints: [{{address: 127.0.0.1}}]
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {{name: called, namespace: team}}
spec:
  host: called.mesh
  trafficPolicy:
    tls:
      mode: ISTIO_MUTUAL
      subjectAltNames: [spiffe://example.org/ns/istio-system/sa/strait]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: out, namespace: team}}
spec:
  hosts: ["*"]
  gateways: [edge]
  http:
  - route: [{{destination: {{host: called.mesh}}}}]
"""


def plain_get(port, path="/allowed"):
    """A plaintext request straight to the called node: its answer's
    status line, or b"" when the connection ends without one."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(f"GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n"
                  .encode())
        data = b""
        try:
            while True:
                d = s.recv(4096)
                if not d:
                    break
                data += d
        except OSError:
            pass
    return data.split(b"\r\n")[0] if data.startswith(b"HTTP/") else b""


def tls_hello_ok(port):
    """Whether the called port speaks TLS: a TLS 1.3 handshake completes
    on the client side before the server looks at the (missing) client
    certificate, so it succeeds against an mTLS server and fails against a
    plaintext one."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            with ctx.wrap_socket(s):
                return True
    except (ssl.SSLError, OSError):
        return False


def mtls_echo(port, identity, data=b"ping"):
    """Sends data over mTLS with the identity directory's certificate;
    returns what came back before the connection ended."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.load_verify_locations(str(identity / "root-cert.pem"))
    ctx.load_cert_chain(str(identity / "cert-chain.pem"),
                        str(identity / "key.pem"))
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        with ctx.wrap_socket(s) as t:
            t.sendall(data)
            got = b""
            try:
                while len(got) < len(data):
                    d = t.recv(4096)
                    if not d:
                        break
                    got += d
            except (ssl.SSLError, OSError):
                pass
            return got


def test_two_nodes_istio_mutual_with_authorization(nodes, tmp_path,
                                                   upstream_factory):
    up = upstream_factory(echo)
    raw = upstream_factory()  # echoes bytes
    tcp_port = free_port()
    called_port, caller_port, other_port = free_port(), free_port(), free_port()
    ca_port = free_port()

    called_conf = tmp_path / "called-conf"
    called_conf.mkdir()
    (called_conf / "r.yaml").write_text(
        CALLED.format(port=called_port, echo=up.port, tcp_port=tcp_port,
                      raw=raw.port))
    called = nodes("called", f"{{enabled: true, dir: {tmp_path / 'called-ca'}, "
                             f"address: 127.0.0.1:{ca_port}}}",
                   node_yaml=f"config: {{dir: \"{called_conf}\", "
                             f"debounce: 10ms}}\n").start()
    called.ca_url = f"https://127.0.0.1:{ca_port}"

    def caller_node(name, sa, port):
        conf = tmp_path / f"{name}-conf"
        conf.mkdir()
        (conf / "r.yaml").write_text(CALLER.format(port=port,
                                                   called=called_port))
        tok = token(called, ns="team", sa=sa)
        return nodes(name, f"{{dir: {tmp_path / (name + '-ca')}}}",
                     node_yaml=(f"node: {{namespace: team, serviceAccount: "
                                f"{sa}}}\nconfig: {{dir: \"{conf}\"}}\n"),
                     args=["--join", called.ca_url, "--token", tok]).start()

    caller = caller_node("caller", "caller", caller_port)
    other = caller_node("other", "other", other_port)

    # The caller's principal is allowed on /allowed...
    status, _, body = get(caller_port, "/allowed/x")
    assert (status, body) == (200, b"echo /allowed/x")
    wait_for(lambda: "peer_uri_san=spiffe://example.org/ns/team/sa/caller"
             in called.log(), 10, "the caller's identity in the access log")
    # ...denied on /denied by the DENY policy on its namespace...
    assert get(caller_port, "/denied/x")[0] == 403
    # ...and another identity of the same mesh is not allowed at all.
    assert get(other_port, "/allowed/x")[0] == 403
    wait_for(lambda: "RBAC_ACCESS_DENIED[istio-system/no-denied]" in called.log()
             and "RBAC_ACCESS_DENIED[none]" in called.log(), 10,
             "both denials in the access log")

    # The TLS (L4) server: authorised when the connection opens, by the
    # peer's SPIFFE ID and the port.
    assert mtls_echo(tcp_port, tmp_path / "caller-ca" / "identity") == b"ping"
    assert mtls_echo(tcp_port, tmp_path / "other-ca" / "identity") == b""
    # A client certificate from another root (Istio's sample CA) is refused
    # at the handshake, with the reason in the log.
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    samples = f"{SRCDIR}/tests/data/istio-samples/certs"
    (foreign / "cert-chain.pem").write_text(
        open(f"{samples}/workload-foo-cert.pem").read())
    (foreign / "key.pem").write_text(open(f"{samples}/workload-foo-key.pem").read())
    (foreign / "root-cert.pem").write_text(
        open(tmp_path / "called-ca" / "identity" / "root-cert.pem").read())
    try:
        got = mtls_echo(tcp_port, foreign)
    except (ssl.SSLError, OSError):
        got = b""
    assert got == b""
    wait_for(lambda: "end=\"client_certificate_refused:unable to get local "
             "issuer certificate\"" in called.log(), 10,
             "the refused client certificate in the log")
    wait_for(lambda: called.log().count("RBAC_ACCESS_DENIED") >= 3, 10,
             "the TCP denial in the access log")
    assert sum(v for k, v in called.stats().items()
               if k.endswith(".http.rbac_denied")) >= 3

    # STRICT (no PeerAuthentication: ISTIO_MUTUAL's own meaning):
    # plaintext gets no HTTP answer.
    assert plain_get(called_port) == b""
    assert tls_hello_ok(called_port)

    def set_peer_auth(mode):
        (called_conf / "pa.yaml").write_text(f"""apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {{name: default, namespace: istio-system}}
spec: {{mtls: {{mode: {mode}}}}}
""")

    # PERMISSIVE: plaintext is taken beside mTLS (and then authorised:
    # no principal, so the ALLOW policy refuses it).
    set_peer_auth("PERMISSIVE")
    wait_for(lambda: plain_get(called_port) == b"HTTP/1.1 403 Forbidden", 15,
             "plaintext served under PERMISSIVE")
    assert get(caller_port, "/allowed/y")[0] == 200
    # DISABLE: plaintext only.
    set_peer_auth("DISABLE")
    wait_for(lambda: not tls_hello_ok(called_port), 15, "TLS off under DISABLE")
    assert plain_get(called_port) == b"HTTP/1.1 403 Forbidden"
    # STRICT again: mTLS only.
    set_peer_auth("STRICT")
    wait_for(lambda: plain_get(called_port) == b"", 15, "plaintext refused")
    assert get(caller_port, "/allowed/z")[0] == 200
    os.remove(called_conf / "pa.yaml")
