"""DestinationRule tls origination with client certificates: ISTIO_MUTUAL
(this node's mesh certificate from the embedded CA, the mesh root, the
server's SPIFFE identity checked, Istio's SNI) and MUTUAL (files). The
upstream is a python TLS server that requires a client certificate and
reports what it saw."""
import os
import socket
import ssl
import subprocess
import threading

from conftest import STRAIT, SRCDIR, free_port, http_gateway, wait_for
from test_gateway import get, read_head

SAMPLES = f"{SRCDIR}/tests/data/istio-samples/certs"


class TLSUpstream:
    """HTTPS on 127.0.0.1 requiring a client certificate from client_ca;
    answers with the client's URI SAN and the SNI it asked for."""

    def __init__(self, chain, key, client_ca):
        self.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.ctx.load_cert_chain(chain, key)
        self.ctx.verify_mode = ssl.CERT_REQUIRED
        self.ctx.load_verify_locations(client_ca)
        self.sni = []
        self.ctx.sni_callback = lambda s, name, c: self.sni.append(name)
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.handshakes = 0
        self.stopped = threading.Event()
        self.t = threading.Thread(target=self.loop, daemon=True)
        self.t.start()

    def loop(self):
        while not self.stopped.is_set():
            try:
                c, _ = self.sock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            threading.Thread(target=self.serve, args=(c,), daemon=True).start()

    def serve(self, c):
        try:
            c.settimeout(10)
            s = self.ctx.wrap_socket(c, server_side=True)
        except (ssl.SSLError, OSError):
            c.close()
            return
        self.handshakes += 1
        try:
            cert = s.getpeercert()
            uris = [v for k, v in cert.get("subjectAltName", ()) if k == "URI"]
            buf = b""
            while True:
                buf = read_head(s, buf)
                if buf is None:
                    return
                _, _, buf = buf.partition(b"\r\n\r\n")
                body = ("peer=" + ",".join(uris)).encode()
                s.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s"
                          % (len(body), body))
        except (ssl.SSLError, OSError):
            pass
        finally:
            s.close()

    def stop(self):
        self.stopped.set()
        self.t.join(5)
        self.sock.close()


def ca_issue(cfg, out, ns, sa):
    r = subprocess.run([STRAIT, "ca", "issue", "--namespace", ns,
                        "--service-account", sa, "--ttl", "1h", "--out",
                        str(out), "-c", str(cfg)],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr


RESOURCES = """{gateway}apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: mesh, namespace: default}}
spec:
  hosts: [mesh.example.com]
  resolution: STATIC
  ports: [{{number: {up}, name: http, protocol: HTTP}}]
  endpoints: [{{address: 127.0.0.1, serviceAccount: backend}}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: wrong, namespace: default}}
spec:
  hosts: [wrong.example.com]
  resolution: STATIC
  ports: [{{number: {up}, name: http, protocol: HTTP}}]
  endpoints: [{{address: 127.0.0.1, serviceAccount: someone-else}}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: files, namespace: default}}
spec:
  hosts: [files.example.com]
  resolution: STATIC
  ports: [{{number: {up2}, name: http, protocol: HTTP}}]
  endpoints: [{{address: 127.0.0.1}}]
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {{name: mesh, namespace: default}}
spec:
  host: mesh.example.com
  trafficPolicy: {{tls: {{mode: ISTIO_MUTUAL}}}}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {{name: wrong, namespace: default}}
spec:
  host: wrong.example.com
  trafficPolicy: {{tls: {{mode: ISTIO_MUTUAL}}}}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {{name: files, namespace: default}}
spec:
  host: files.example.com
  trafficPolicy:
    tls:
      mode: MUTUAL
      clientCertificate: {samples}/workload-foo-cert.pem
      privateKey: {samples}/workload-foo-key.pem
      caCertificates: {ca}/root-cert.pem
      subjectAltNames: [spiffe://cluster.local/ns/default/sa/files]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: vs, namespace: default}}
spec:
  hosts: ["*"]
  gateways: [gw]
  http:
  - match: [{{uri: {{prefix: /wrong}}}}]
    route: [{{destination: {{host: wrong.example.com}}}}]
  - match: [{{uri: {{prefix: /files}}}}]
    route: [{{destination: {{host: files.example.com}}}}]
  - route: [{{destination: {{host: mesh.example.com}}}}]
"""


def test_istio_mutual_and_mutual_origination(strait_factory, tmp_path):
    ca = tmp_path / "ca"
    conf = tmp_path / "conf.d"
    conf.mkdir()
    gw = free_port()
    st = strait_factory(extra=(
        f"config: {{dir: \"{conf}\", debounce: 10ms}}\n"
        f"ca: {{enabled: true, dir: \"{ca}\", "
        f"address: \"127.0.0.1:{free_port()}\"}}\n"))
    r = subprocess.run([STRAIT, "ca", "init", "-c", str(st.config)],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    ca_issue(st.config, tmp_path / "backend", "default", "backend")
    ca_issue(st.config, tmp_path / "files", "default", "files")
    # The mesh upstream trusts the mesh root for clients; the files one
    # trusts Istio's sample CA (the client certificate strait sends).
    mesh = TLSUpstream(str(tmp_path / "backend" / "cert-chain.pem"),
                       str(tmp_path / "backend" / "key.pem"),
                       str(ca / "root-cert.pem"))
    files = TLSUpstream(str(tmp_path / "files" / "cert-chain.pem"),
                        str(tmp_path / "files" / "key.pem"),
                        f"{SAMPLES}/root-cert.pem")
    try:
        (conf / "r.yaml").write_text(RESOURCES.format(
            gateway=http_gateway(gw), gw=gw, up=mesh.port, up2=files.port, samples=SAMPLES, ca=ca))
        st.start()
        # ISTIO_MUTUAL: the upstream saw this node's SPIFFE identity, and
        # Istio's SNI.
        status, _, body = get(gw, "/")
        assert status == 200, body
        assert body == b"peer=spiffe://cluster.local/ns/istio-system/sa/strait"
        assert mesh.sni[-1] == f"outbound_.{mesh.port}_._.mesh.example.com"
        # The server's identity is checked: an endpoint whose service
        # account is another is refused before any request is sent.
        before = mesh.handshakes
        status, _, _ = get(gw, "/wrong")
        assert status == 503
        wait_for(lambda: "flags=UF" in st.log(), 10, "UF in the access log")
        assert mesh.handshakes == before
        # MUTUAL from files, with subjectAltNames instead of the host name.
        status, _, body = get(gw, "/files")
        assert status == 200, body
        assert body == b"peer=spiffe://trust-domain-foo/ns/foo/sa/foo"
        # A subjectAltNames list the server's certificate does not carry.
        text = (conf / "r.yaml").read_text().replace(
            "spiffe://cluster.local/ns/default/sa/files",
            "spiffe://cluster.local/ns/default/sa/nobody")
        tmp = conf / ".r.tmp"
        tmp.write_text(text)
        os.replace(tmp, conf / "r.yaml")
        wait_for(lambda: get(gw, "/files")[0] == 503, 15,
                 "the new subjectAltNames refusing the server")
    finally:
        mesh.stop()
        files.stop()


def test_istio_mutual_without_a_mesh_certificate_refuses(strait_factory,
                                                         tmp_path):
    """Without a CA there is no mesh certificate: the cluster refuses
    requests (503) instead of sending them in the clear."""
    conf = tmp_path / "conf.d"
    conf.mkdir()
    gw = free_port()
    plain = socket.socket()
    plain.bind(("127.0.0.1", 0))
    plain.listen(8)
    try:
        (conf / "r.yaml").write_text(RESOURCES.format(
            gateway=http_gateway(gw), gw=gw, up=plain.getsockname()[1], up2=plain.getsockname()[1],
            samples=SAMPLES, ca=tmp_path))
        st = strait_factory(extra=f"config: {{dir: \"{conf}\"}}\n").start()
        status, _, body = get(gw, "/")
        assert (status, body) == (503, b"upstream TLS is not available\n")
        assert "needs this node's mesh certificate" in st.log()
    finally:
        plain.close()


class SerialUpstream(TLSUpstream):
    """Records the serial of every client certificate it sees."""

    def __init__(self, *a):
        self.serials = set()
        super().__init__(*a)

    def serve(self, c):
        try:
            c.settimeout(10)
            s = self.ctx.wrap_socket(c, server_side=True)
        except (ssl.SSLError, OSError):
            c.close()
            return
        der = s.getpeercert(binary_form=True)
        self.serials.add(hash(der))
        try:
            buf = b""
            while True:
                buf = read_head(s, buf)
                if buf is None:
                    return
                _, _, buf = buf.partition(b"\r\n\r\n")
                s.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
        except (ssl.SSLError, OSError):
            pass
        finally:
            s.close()


def test_mesh_certificate_rotates_under_load(strait_factory, tmp_path):
    """certTTL 2s: the node's mesh certificate rotates about every second
    while wrk runs through the gateway to an ISTIO_MUTUAL upstream; new
    connections present the new certificates (the upstream sees several)
    and no request fails."""
    ca = tmp_path / "ca"
    conf = tmp_path / "conf.d"
    conf.mkdir()
    gw = free_port()
    st = strait_factory(extra=(
        f"config: {{dir: \"{conf}\", debounce: 10ms}}\n"
        f"ca: {{enabled: true, dir: \"{ca}\", certTTL: 2s, "
        f"address: \"127.0.0.1:{free_port()}\"}}\n"))
    r = subprocess.run([STRAIT, "ca", "init", "-c", str(st.config)],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    ca_issue(st.config, tmp_path / "backend", "default", "backend")
    up = SerialUpstream(str(tmp_path / "backend" / "cert-chain.pem"),
                        str(tmp_path / "backend" / "key.pem"),
                        str(ca / "root-cert.pem"))
    try:
        text = RESOURCES.format(gateway=http_gateway(gw), gw=gw, up=up.port, up2=up.port,
                                samples=SAMPLES, ca=ca)
        # New upstream connections keep coming: each carries the
        # certificate current at its handshake.
        text = text.replace(
            "trafficPolicy: {tls: {mode: ISTIO_MUTUAL}}\n---\napiVersion: "
            "networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: "
            "wrong",
            "trafficPolicy:\n    tls: {mode: ISTIO_MUTUAL}\n    connectionPool: "
            "{http: {maxRequestsPerConnection: 20}}\n---\napiVersion: "
            "networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: "
            "wrong", 1)
        assert "maxRequestsPerConnection: 20" in text
        (conf / "r.yaml").write_text(text)
        st.start()
        assert get(gw, "/")[0] == 200
        wrk = subprocess.run(["wrk", "-t", "1", "-c", "4", "-d", "6s",
                              "--timeout", "10s",
                              f"http://127.0.0.1:{gw}/"],
                             capture_output=True, text=True, timeout=60)
        out = wrk.stdout
        assert wrk.returncode == 0, out + wrk.stderr
        assert "Socket errors" not in out, out
        assert "Non-2xx" not in out, out
        requests = int(out.split(" requests in ")[0].split()[-1])
        assert requests > 100, out
        # About six rotations in six seconds; allow for a slow machine.
        assert len(up.serials) >= 3, len(up.serials)
        assert "rotated" in st.log()
    finally:
        up.stop()


REFUSED = "{gateway}" + "".join(f"""apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{{{name: {n}, namespace: default}}}}
spec:
  hosts: [{n}.example.com]
  resolution: STATIC
  ports: [{{{{number: {{{n}}}, name: http, protocol: HTTP}}}}]
  endpoints: [{{{{address: 127.0.0.1, serviceAccount: backend}}}}]
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {{{{name: {n}, namespace: default}}}}
spec:
  host: {n}.example.com
  trafficPolicy: {{{{tls: {{{{mode: ISTIO_MUTUAL}}}}}}}}
---
""" for n in ("root", "expired", "san")) + """apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: vs, namespace: default}}
spec:
  hosts: ["*"]
  gateways: [gw]
  http:
  - match: [{{uri: {{prefix: /root}}}}]
    route: [{{destination: {{host: root.example.com}}}}]
  - match: [{{uri: {{prefix: /expired}}}}]
    route: [{{destination: {{host: expired.example.com}}}}]
  - route: [{{destination: {{host: san.example.com}}}}]
"""


def test_refused_upstream_certificates_are_logged(strait_factory, tmp_path):
    """A server certificate from another root, an expired one and one with
    another identity are each refused (503 UF) with the reason in a log
    line and in the access log's details."""
    ca = tmp_path / "ca"
    conf = tmp_path / "conf.d"
    conf.mkdir()
    gw = free_port()
    st = strait_factory(extra=(
        f"config: {{dir: \"{conf}\"}}\n"
        f"ca: {{enabled: true, dir: \"{ca}\", "
        f"address: \"127.0.0.1:{free_port()}\"}}\n"))
    r = subprocess.run([STRAIT, "ca", "init", "-c", str(st.config)],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    ca_issue(st.config, tmp_path / "other", "default", "someone-else")
    r = subprocess.run([STRAIT, "ca", "issue", "--namespace", "default",
                        "--service-account", "backend", "--ttl", "1s",
                        "--out", str(tmp_path / "short"), "-c",
                        str(st.config)],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    short = tmp_path / "short" / "cert-chain.pem"
    wait_for(lambda: subprocess.run(
        ["openssl", "x509", "-checkend", "0", "-noout", "-in", str(short)],
        capture_output=True).returncode != 0, 10, "the short certificate to expire")
    root = str(ca / "root-cert.pem")
    ups = {
        # Istio's sample CA signed it, not this mesh's root.
        "root": TLSUpstream(f"{SAMPLES}/workload-foo-cert.pem",
                            f"{SAMPLES}/workload-foo-key.pem", root),
        "expired": TLSUpstream(str(short), str(tmp_path / "short" / "key.pem"),
                               root),
        "san": TLSUpstream(str(tmp_path / "other" / "cert-chain.pem"),
                           str(tmp_path / "other" / "key.pem"), root),
    }
    try:
        (conf / "r.yaml").write_text(REFUSED.format(
            gateway=http_gateway(gw), **{n: u.port for n, u in ups.items()}))
        st.start()
        for path in ("/root", "/expired", "/san"):
            assert get(gw, path)[0] == 503
        wait_for(lambda: "path=/san" in st.log(), 10, "the access log")
        log = st.log()
        assert ("cluster root.example.com||0: upstream 127.0.0.1:"
                f"{ups['root'].port}: certificate refused: unable to get "
                "local issuer certificate") in log
        assert ("expired.example.com||0: upstream 127.0.0.1:"
                f"{ups['expired'].port}: certificate refused: certificate "
                "has expired") in log
        assert ("san.example.com||0: upstream 127.0.0.1:"
                f"{ups['san'].port}: certificate refused: certificate "
                "identity not among the expected subjectAltNames") in log
        assert 'details="upstream_tls_refused:certificate has expired"' in log
    finally:
        for u in ups.values():
            u.stop()
