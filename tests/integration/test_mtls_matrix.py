"""Client certificates against every downstream TLS mode, with the three
clients people use to check a gateway: curl, nghttp (HTTP/2 by ALPN) and
openssl s_client. One strait serves a Gateway with a server per mode:

  simple      HTTPS SIMPLE
  mutual      HTTPS MUTUAL, trusting Istio's sample root
  optional    HTTPS OPTIONAL_MUTUAL, trusting Istio's sample root
  strict      HTTPS ISTIO_MUTUAL under PeerAuthentication STRICT
  permissive  HTTPS ISTIO_MUTUAL, its port PERMISSIVE
  disable     HTTPS ISTIO_MUTUAL, its port DISABLE

and each client connects with no certificate, a trusted one (Istio's
sample workload foo for MUTUAL and OPTIONAL_MUTUAL; a mesh certificate
issued by this strait's CA for ISTIO_MUTUAL) and a foreign one (the other
of the two). Plaintext requests are tried on the ISTIO_MUTUAL ports too.
Every case is its own test with its own path, so the upstream's record
and the access log tell which requests got through, and with which peer
identity; a refusal is checked by its reason in the log and the
listener's TLS failure counters. nghttp does not verify the server's
certificate (it warns); curl and s_client do, except that curl cannot
check a mesh server's SPIFFE-only certificate against a host name.
"""
import re
import socket
import ssl
import subprocess
import threading

import pytest

from conftest import SRCDIR, STRAIT, Strait, Upstream, finish_strait, \
    free_port, read_head, wait_for
from httpd import make_cert

SAMPLES = f"{SRCDIR}/tests/data/istio-samples/certs"
FOO = (f"{SAMPLES}/workload-foo-cert.pem", f"{SAMPLES}/workload-foo-key.pem")
FOO_ID = "spiffe://trust-domain-foo/ns/foo/sa/foo"
MESH_ID = "spiffe://example.org/ns/team/sa/client"
HOST = "gw.example.com"

MODES = ("simple", "mutual", "optional", "strict", "permissive", "disable")
MESH_MODES = ("strict", "permissive", "disable")

# What each (mode, certificate) gets:
#   ok        200 with the upstream's answer, no peer identity logged
#   peer      200, and the client's SPIFFE ID as peer_uri_san in the log
#   no-cert   refused at the handshake: "no certificate presented"
#   bad-cert  refused at the handshake: the certificate does not chain to
#             the trusted root (the reason is logged)
#   not-tls   plaintext on a TLS port: the handshake fails, no answer
#   not-http  TLS on a plaintext port: strait answers 400, the client's
#             handshake fails
# A SIMPLE server asks for no certificate, so a client never sends one.
EXPECT = {
    "simple": {"none": "ok", "trusted": "ok", "foreign": "ok"},
    "mutual": {"none": "no-cert", "trusted": "peer", "foreign": "bad-cert"},
    "optional": {"none": "ok", "trusted": "peer", "foreign": "bad-cert"},
    "strict": {"none": "no-cert", "trusted": "peer", "foreign": "bad-cert",
               "plaintext": "not-tls"},
    # PERMISSIVE takes plaintext beside mTLS; TLS still means mTLS.
    "permissive": {"none": "no-cert", "trusted": "peer", "foreign": "bad-cert",
                   "plaintext": "ok"},
    # DISABLE: the port is plaintext only.
    "disable": {"none": "not-http", "trusted": "not-http",
                "foreign": "not-http", "plaintext": "ok"},
}
# Why a foreign certificate is refused: Istio's sample certificate comes
# with its intermediate but not its root; a mesh certificate's chain ends
# in the strait CA's self-signed root.
BAD_CERT_WHY = {
    True: "unable to get local issuer certificate",
    False: "self signed certificate in certificate chain",
}

CASES = [pytest.param(m, c, k, id=f"{m}-{c}-{k}")
         for m in MODES for c in ("curl", "nghttp", "s_client")
         for k in EXPECT[m]
         # s_client speaks TLS only.
         if not (c == "s_client" and k == "plaintext")]


def resources(ports, gw_crt, gw_key):
    def https(mode, tls):
        return f"""  - port: {{number: {ports[mode]}, name: https-{mode}, protocol: HTTPS}}
    bind: 127.0.0.1
    hosts: ["*"]
    tls: {tls}
"""
    files = f'serverCertificate: "{gw_crt}", privateKey: "{gw_key}"'
    trust = f'caCertificates: "{SAMPLES}/root-cert.pem"'
    return f"""apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {{name: gw, namespace: istio-system}}
spec:
  selector: {{istio: ingressgateway}}
  servers:
{https("simple", f"{{mode: SIMPLE, {files}}}")}\
{https("mutual", f"{{mode: MUTUAL, {files}, {trust}}}")}\
{https("optional", f"{{mode: OPTIONAL_MUTUAL, {files}, {trust}}}")}\
{https("strict", "{mode: ISTIO_MUTUAL}")}\
{https("permissive", "{mode: ISTIO_MUTUAL}")}\
{https("disable", "{mode: ISTIO_MUTUAL}")}\
---
apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {{name: default, namespace: istio-system}}
spec: {{mtls: {{mode: STRICT}}}}
---
apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {{name: ingress, namespace: istio-system}}
spec:
  selector: {{matchLabels: {{istio: ingressgateway}}}}
  mtls: {{mode: STRICT}}
  portLevelMtls:
    {ports["permissive"]}: {{mode: PERMISSIVE}}
    {ports["disable"]}: {{mode: DISABLE}}
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: up, namespace: istio-system}}
spec:
  hosts: [up.internal]
  resolution: STATIC
  ports: [{{number: {ports["up"]}, name: http, protocol: HTTP}}]
  endpoints: [{{address: 127.0.0.1}}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: web, namespace: istio-system}}
spec:
  hosts: ["*"]
  gateways: [gw]
  http:
  - route: [{{destination: {{host: up.internal}}}}]
"""


class Gateway:
    """The shared strait, its upstream (which records each request's
    path) and the client certificates."""

    def __init__(self, tmp):
        self.paths = []
        self.lock = threading.Lock()

        def handler(c):
            buf = b""
            while True:
                buf = read_head(c, buf)
                if buf is None:
                    return
                head, _, buf = buf.partition(b"\r\n\r\n")
                path = head.split(b" ")[1]
                with self.lock:
                    self.paths.append(path.decode())
                body = b"up " + path
                c.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s"
                          % (len(body), body))

        self.up = Upstream(handler)
        self.ports = {m: free_port() for m in MODES}
        self.ports["up"] = self.up.port
        conf = tmp / "conf.d"
        conf.mkdir()
        self.gw_crt, gw_key = make_cert(str(tmp), "gw", HOST, [HOST])
        self.st = Strait(tmp, workers=1, extra=(
            "trustDomain: example.org\n"
            "node: {labels: {istio: ingressgateway}}\n"
            f"config: {{dir: \"{conf}\"}}\n"
            f"ca: {{enabled: true, dir: \"{tmp / 'ca'}\", "
            f"address: \"127.0.0.1:{free_port()}\"}}\n"))
        run = lambda *a: subprocess.run([STRAIT, "ca", *a, "-c",
                                         str(self.st.config)],
                                        capture_output=True, text=True,
                                        timeout=30)
        r = run("init")
        assert r.returncode == 0, r.stderr
        mesh = tmp / "mesh-client"
        r = run("issue", "--namespace", "team", "--service-account", "client",
                "--ttl", "1h", "--out", str(mesh))
        assert r.returncode == 0, r.stderr
        self.mesh = (str(mesh / "cert-chain.pem"), str(mesh / "key.pem"))
        self.mesh_root = str(tmp / "ca" / "root-cert.pem")
        (conf / "r.yaml").write_text(resources(self.ports, self.gw_crt,
                                               gw_key))
        self.st.start()

    def cert(self, mode, kind):
        """The (chain, key) a client shows, or None."""
        mesh = mode in MESH_MODES
        if kind == "trusted":
            return self.mesh if mesh else FOO
        if kind == "foreign":
            return FOO if mesh else self.mesh
        return None

    def seen(self, path):
        with self.lock:
            return path in self.paths

    def request_line(self, path):
        for line in self.st.log().splitlines():
            if "http_request" in line and f" path={path} " in line:
                return line
        return None


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    g = Gateway(tmp_path_factory.mktemp("matrix"))
    yield g
    try:
        finish_strait(g.st)
    finally:
        g.up.stop()


# -- clients: each returns (status or None, body, output) ---------------------

def curl(gw, port, path, cert, mesh, plaintext):
    if plaintext:
        args = [f"http://127.0.0.1:{port}{path}"]
    else:
        # A mesh server's certificate names a SPIFFE ID, no host name.
        args = (["-k"] if mesh else ["--cacert", gw.gw_crt]) + [
            "--resolve", f"{HOST}:{port}:127.0.0.1",
            f"https://{HOST}:{port}{path}"]
    if cert:
        args = ["--cert", cert[0], "--key", cert[1]] + args
    p = subprocess.run(["curl", "-sS", "--max-time", "10", "-w",
                        "\\n%{http_code} %{http_version}", *args],
                       capture_output=True, timeout=30)
    body, _, tail = p.stdout.rpartition(b"\n")
    code, _, version = tail.decode().partition(" ")
    out = p.stderr.decode(errors="replace")
    if p.returncode != 0 or code == "000":
        return None, b"", out
    return int(code), body, out + f" http_version={version}"


def nghttp(gw, port, path, cert, mesh, plaintext):
    # https: TLS with ALPN h2; http: HTTP/2 with prior knowledge (h2c).
    scheme = "http" if plaintext else "https"
    args = ["nghttp", "-v", "-t", "10"]
    if cert:
        args += ["--cert", cert[0], "--key", cert[1]]
    p = subprocess.run(args + [f"{scheme}://127.0.0.1:{port}{path}"],
                       capture_output=True, timeout=30)
    out = (p.stdout + p.stderr).decode(errors="replace")
    # nghttp sends its priority tree first: the request is not stream 1.
    m = re.search(r"recv \(stream_id=\d+\) :status: (\d+)", out)
    if m is None:
        return None, b"", out
    # -v interleaves frame lines with the body on stdout; the body (no
    # newline at its end) runs into the line of the DATA frame that
    # brought it.
    b = re.search(rb"(?m)^(.*?)\[ *[\d.]+\] recv DATA frame", p.stdout)
    return int(m.group(1)), b.group(1) if b else b"", out


def s_client(gw, port, path, cert, mesh, plaintext):
    assert not plaintext
    args = ["openssl", "s_client", "-connect", f"127.0.0.1:{port}",
            "-servername", HOST, "-ign_eof"]
    # The server's chain is verified (s_client checks no host name).
    args += ["-CAfile", gw.mesh_root if mesh else gw.gw_crt,
             "-verify_return_error"]
    if cert:
        # -cert sends the leaf alone; -cert_chain adds the intermediate
        # the sample certificate needs.
        args += ["-cert", cert[0], "-key", cert[1], "-cert_chain", cert[0]]
    req = (f"GET {path} HTTP/1.1\r\nHost: {HOST}\r\n"
           "Connection: close\r\n\r\n").encode()
    p = subprocess.run(args, input=req, capture_output=True, timeout=30)
    out = p.stdout.decode(errors="replace")
    text = out + p.stderr.decode(errors="replace")
    at = out.find("HTTP/1.1 ")
    if at < 0:
        return None, b"", text
    head, _, rest = out[at:].partition("\r\n\r\n")
    # s_client prints more of the session after the body: take
    # content-length's worth.
    m = re.search(r"(?im)^content-length: *(\d+)", head)
    body = rest[:int(m.group(1))] if m else ""
    return int(head[9:12]), body.encode(), text


CLIENTS = {"curl": curl, "nghttp": nghttp, "s_client": s_client}


def listener(gw, mode):
    return f"gateway-127.0.0.1-{gw.ports[mode]}"


def counts(gw, mode):
    """What a refusal changes: the listener's TLS failure counters, its
    refused-certificate log lines by reason, its access log lines."""
    name = listener(gw, mode)
    stats = gw.st.stats()
    log = gw.st.log().splitlines()
    refused = f"listener {name}: 127.0.0.1: client certificate refused: "
    return {
        "tls_fail": sum(v for k, v in stats.items()
                        if k.startswith(f"listener.{name}.tls.fail_")),
        "cert_fail": stats[f"listener.{name}.tls.fail_certificate"],
        "eof": stats[f"listener.{name}.tls.fail_eof"],
        "no_cert": sum(1 for l in log
                       if refused + "no certificate presented" in l),
        "bad_cert": sum(1 for l in log
                        if refused + BAD_CERT_WHY[mode in MESH_MODES] in l),
        "status_400": sum(1 for l in log
                          if f"http_request listener={name} " in l
                          and " status=400 " in l),
    }


@pytest.mark.parametrize("mode,client,kind", CASES)
def test_client_certificate_matrix(gw, mode, client, kind):
    path = f"/{mode}/{client}/{kind}"
    want = EXPECT[mode][kind]
    before = counts(gw, mode)
    status, body, out = CLIENTS[client](
        gw, gw.ports[mode], path, gw.cert(mode, kind), mode in MESH_MODES,
        kind == "plaintext")
    if want not in ("ok", "peer"):
        # No HTTP answer, and the request never went anywhere.
        assert status is None, out
        assert not gw.seen(path)
        assert gw.request_line(path) is None
        grew = {"no-cert": ("cert_fail", "no_cert"),
                "bad-cert": ("cert_fail", "bad_cert"),
                "not-tls": ("tls_fail",),
                "not-http": ("status_400",)}[want]

        def counted():
            now = counts(gw, mode)
            return all(now[k] > before[k] for k in grew)
        wait_for(counted, 10, f"{want} counted for {path}: {grew}")
        return
    assert (status, body) == (200, b"up " + path.encode()), out
    if client == "nghttp":
        # HTTP/2 by ALPN over TLS, by prior knowledge in the clear.
        assert kind == "plaintext" or "The negotiated protocol: h2" in out, out
    line = wait_for(lambda: gw.request_line(path), 10,
                    f"the access log line for {path}")
    if client == "nghttp":
        assert "protocol=HTTP/2" in line, line
    if want == "peer":
        peer = MESH_ID if mode in MESH_MODES else FOO_ID
        assert f"peer_uri_san={peer}" in line, line
    else:
        assert "peer_uri_san" not in line, line
    assert counts(gw, mode)["tls_fail"] == before["tls_fail"]


@pytest.mark.parametrize("mode", ["mutual", "strict"])
def test_abandoned_handshake_is_not_a_refused_certificate(gw, mode):
    """A client that leaves once the server asked for its certificate
    (before sending one) ended the handshake, and is counted as such; it
    was not refused for having no certificate. (It used to be logged as
    "client certificate refused: no certificate presented", which under
    load made every client closing mid-handshake look like a refusal.)"""
    before = counts(gw, mode)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    inc, out = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = ctx.wrap_bio(inc, out, server_hostname=HOST)
    with socket.create_connection(("127.0.0.1", gw.ports[mode]),
                                  timeout=10) as s:
        try:
            tls.do_handshake()
        except ssl.SSLWantReadError:
            pass
        s.sendall(out.read())  # the ClientHello
        # The server's whole first flight, up to its CertificateRequest
        # and Finished: it now waits for the client's certificate.
        while True:
            inc.write(s.recv(65536))
            try:
                tls.do_handshake()
            except ssl.SSLWantReadError:
                continue
            break
        # The client's handshake is complete (TLS 1.3); its certificate
        # message is in out, never sent.
    wait_for(lambda: counts(gw, mode)["eof"] > before["eof"], 10,
             "the abandoned handshake counted")
    # A request after it on the same (only) worker: its log line comes
    # after whatever the abandoned handshake logged.
    path = f"/{mode}/after-abandoned"
    status, body, out_text = curl(gw, gw.ports[mode], path,
                                  gw.cert(mode, "trusted"),
                                  mode in MESH_MODES, False)
    assert status == 200, out_text
    wait_for(lambda: gw.request_line(path), 10, "the request after it")
    now = counts(gw, mode)
    assert now["no_cert"] == before["no_cert"]
    assert now["cert_fail"] == before["cert_fail"]
