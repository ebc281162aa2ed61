"""Certificate revocation lists (Istio's caCrl, a credential's ca.crl).

A CA of the test's own (python cryptography) issues client and server
certificates and CRLs. A client certificate its issuer's CRL revokes is
refused at the handshake by Gateway servers in MUTUAL and OPTIONAL_MUTUAL
mode, HTTPS and TLS (L4) alike, shown with curl, openssl s_client, nghttp
and Python's ssl; a good one passes. A new CRL applies to new handshakes
without a restart; a bad one is refused by `strait check` and on reload,
where the running context stays. DestinationRule SIMPLE and MUTUAL refuse
a revoked upstream certificate (503 UF, upstream_tls_refused), on tcp
routes too."""
import datetime
import os
import signal
import socket
import ssl
import subprocess

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from conftest import STRAIT, free_port, read_head, wait_for

HOST = "gw.example.com"
NOW = datetime.datetime.utcnow()
HOUR = datetime.timedelta(hours=1)
DAY = datetime.timedelta(days=1)


# -- a small PKI ------------------------------------------------------------------

def _pem_key(key):
    return key.private_bytes(serialization.Encoding.PEM,
                             serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _usage(cert_sign, crl_sign):
    return x509.KeyUsage(digital_signature=not cert_sign,
                         content_commitment=False, key_encipherment=False,
                         data_encipherment=False, key_agreement=False,
                         key_cert_sign=cert_sign, crl_sign=crl_sign,
                         encipher_only=False, decipher_only=False)


class CA:
    """A CA certificate (self-signed, or issued by parent) and its key,
    written to DIR/<name>.crt."""

    def __init__(self, d, name, parent=None, crl_sign=True):
        self.dir = d
        self.name = name
        self.parent = parent
        self.key = ec.generate_private_key(ec.SECP256R1())
        self.subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME,
                                                     name)])
        signer = parent or self
        b = (x509.CertificateBuilder()
             .subject_name(self.subject)
             .issuer_name(signer.subject)
             .public_key(self.key.public_key())
             .serial_number(x509.random_serial_number())
             .not_valid_before(NOW - HOUR)
             .not_valid_after(NOW + 2 * DAY)
             .add_extension(x509.BasicConstraints(ca=True, path_length=None),
                            critical=True)
             .add_extension(_usage(True, crl_sign), critical=True)
             .add_extension(x509.SubjectKeyIdentifier.from_public_key(
                 self.key.public_key()), critical=False)
             .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
                 signer.key.public_key()), critical=False))
        self.cert = b.sign(signer.key, hashes.SHA256())
        self.path = os.path.join(d, f"{name}.crt")
        with open(self.path, "wb") as f:
            f.write(self.cert.public_bytes(serialization.Encoding.PEM))

    def issue(self, stem, dns=(), client=True):
        """A leaf for stem: DIR/<stem>.crt (with this CA after it when it
        is an intermediate) and DIR/<stem>.key. Returns (crt, key,
        serial)."""
        key = ec.generate_private_key(ec.SECP256R1())
        serial = x509.random_serial_number()
        b = (x509.CertificateBuilder()
             .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME,
                                                         stem)]))
             .issuer_name(self.subject)
             .public_key(key.public_key())
             .serial_number(serial)
             .not_valid_before(NOW - HOUR)
             .not_valid_after(NOW + DAY)
             .add_extension(x509.BasicConstraints(ca=False, path_length=None),
                            critical=True)
             .add_extension(_usage(False, False), critical=True)
             .add_extension(x509.ExtendedKeyUsage(
                 [ExtendedKeyUsageOID.CLIENT_AUTH if client
                  else ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
             .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
                 self.key.public_key()), critical=False))
        if dns:
            b = b.add_extension(x509.SubjectAlternativeName(
                [x509.DNSName(n) for n in dns]), critical=False)
        cert = b.sign(self.key, hashes.SHA256())
        crt = os.path.join(self.dir, f"{stem}.crt")
        kp = os.path.join(self.dir, f"{stem}.key")
        with open(crt, "wb") as f:
            f.write(cert.public_bytes(serialization.Encoding.PEM))
            if self.parent is not None:
                f.write(self.cert.public_bytes(serialization.Encoding.PEM))
        with open(kp, "wb") as f:
            f.write(_pem_key(key))
        return crt, kp, serial

    def crl_pem(self, serials, next_update=DAY, last_update=-HOUR,
                signer=None):
        """PEM of a CRL of this CA revoking serials (signed by signer's
        key, to forge one)."""
        b = (x509.CertificateRevocationListBuilder()
             .issuer_name(self.subject)
             .last_update(NOW + last_update)
             .next_update(NOW + next_update)
             .add_extension(x509.CRLNumber(1), critical=False)
             .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
                 self.key.public_key()), critical=False))
        for s in serials:
            b = b.add_revoked_certificate(
                x509.RevokedCertificateBuilder().serial_number(s)
                .revocation_date(NOW - HOUR).build())
        crl = b.sign((signer or self).key, hashes.SHA256())
        return crl.public_bytes(serialization.Encoding.PEM)


def write_atomic(path, data):
    """Write and rename, so strait never reads half a file."""
    tmp = str(path) + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, str(path))


class Pki:
    """root CA; the gateway's server certificate; clients good and bad;
    root.crl revoking bad."""

    def __init__(self, tmp_path):
        d = str(tmp_path / "pki")
        os.makedirs(d, exist_ok=True)
        self.dir = d
        self.root = CA(d, "root")
        self.server = self.root.issue("server", dns=[HOST], client=False)
        self.good = self.root.issue("good")
        self.bad = self.root.issue("bad")
        self.crl = os.path.join(d, "root.crl")
        write_atomic(self.crl, self.root.crl_pem([self.bad[2]]))


# -- resources --------------------------------------------------------------------

def gateway(port, protocol, mode, pki, tls_extra="", cred=None):
    """A Gateway with one server terminating TLS on port."""
    if cred is not None:
        files = f"credentialName: {cred}"
    else:
        files = (f'serverCertificate: "{pki.server[0]}", '
                 f'privateKey: "{pki.server[1]}", '
                 f'caCertificates: "{pki.root.path}", caCrl: "{pki.crl}"')
    return f"""apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {{name: gw, namespace: default}}
spec:
  selector: {{}}
  servers:
  - port: {{number: {port}, name: s, protocol: {protocol}}}
    bind: 127.0.0.1
    hosts: ["*"]
    tls: {{mode: {mode}, {files}{tls_extra}}}
"""


def backend(port, protocol, rest=""):
    """ServiceEntry up.svc.test on 127.0.0.1:port and the route to it (http
    or tcp)."""
    kind = "http" if protocol == "HTTP" else "tcp"
    return f"""---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: up, namespace: default}}
spec:
  hosts: [up.svc.test]
  resolution: STATIC
  ports: [{{number: {port}, name: p, protocol: {protocol}}}]
  endpoints: [{{address: 127.0.0.1}}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: up, namespace: default}}
spec:
  hosts: ["*"]
  gateways: [gw]
  {kind}:
  - route: [{{destination: {{host: up.svc.test}}}}]
{rest}"""


def start(strait_factory, tmp_path, text, extra=""):
    conf = tmp_path / "conf.d"
    conf.mkdir(exist_ok=True)
    (conf / "r.yaml").write_text(text)
    return strait_factory(
        extra=f"config: {{dir: \"{conf}\"}}\n{extra}").start()


def hello_handler(c):
    """An HTTP upstream answering every request with "hello"."""
    buf = b""
    while True:
        buf = read_head(c, buf)
        if buf is None:
            return
        _, _, buf = buf.partition(b"\r\n\r\n")
        c.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello")


def echo_handler(c):
    while True:
        d = c.recv(65536)
        if not d:
            return
        c.sendall(d)


# -- clients ----------------------------------------------------------------------

def curl(port, pki, cert=None):
    args = ["curl", "-sS", "--max-time", "10", "--cacert", pki.root.path,
            "--resolve", f"{HOST}:{port}:127.0.0.1"]
    if cert is not None:
        args += ["--cert", cert[0], "--key", cert[1]]
    p = subprocess.run(args + [f"https://{HOST}:{port}/"],
                       capture_output=True, timeout=30)
    return p.returncode, p.stdout, p.stderr.decode(errors="replace")


def s_client(port, pki, cert=None, data=b""):
    """openssl s_client with the HTTP request data; waits for the server
    to close (-ign_eof). Returns (returncode, output)."""
    args = ["openssl", "s_client", "-connect", f"127.0.0.1:{port}",
            "-servername", HOST, "-CAfile", pki.root.path,
            "-verify_return_error", "-ign_eof"]
    if cert is not None:
        args += ["-cert", cert[0], "-key", cert[1]]
    p = subprocess.run(args, input=data, capture_output=True, timeout=30)
    return p.returncode, (p.stdout + p.stderr).decode(errors="replace")


GET = (f"GET / HTTP/1.1\r\nHost: {HOST}\r\nConnection: close\r\n\r\n"
       .encode())


def nghttp(port, cert):
    """nghttp (HTTP/2) with a client certificate; (returncode, body,
    stderr)."""
    p = subprocess.run(["nghttp", "-t", "10", "--cert", cert[0], "--key",
                        cert[1], f"https://127.0.0.1:{port}/"],
                       capture_output=True, timeout=30)
    return p.returncode, p.stdout, p.stderr.decode(errors="replace")


def tls_talk(port, pki, cert=None, msg=b"ping"):
    """Python's ssl through a TLS (L4) server to the echo upstream."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_verify_locations(pki.root.path)
    if cert is not None:
        ctx.load_cert_chain(cert[0], cert[1])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with ctx.wrap_socket(raw, server_hostname=HOST) as s:
            s.sendall(msg)
            out = b""
            while len(out) < len(msg):
                d = s.recv(65536)
                if not d:
                    break
                out += d
            return out


def refused_tls(port, pki, cert):
    try:
        return tls_talk(port, pki, cert) == b""
    except (ssl.SSLError, OSError):
        return True


def refusals(st):
    """The log lines of refused revoked client certificates (HTTP
    listeners say it in words, TLS servers in their session line)."""
    return [l for l in st.log().splitlines()
            if "client certificate refused: certificate revoked" in l
            or 'end="client_certificate_refused:certificate revoked"' in l]


def assert_https_clients(st, port, pki):
    """good passes and bad is refused, with curl, s_client and nghttp."""
    rc, body, err = curl(port, pki, pki.good[:2])
    assert rc == 0 and body == b"hello", err
    rc, body, err = curl(port, pki, pki.bad[:2])
    # In TLS 1.3 the refusal comes after the client's Finished: curl sees
    # the alert or a reset, depending on who is faster; the log says why.
    assert rc != 0 and body == b"", (rc, body)
    wait_for(lambda: len(refusals(st)) >= 1, 10, "the refusal logged")

    rc, out = s_client(port, pki, pki.good[:2], GET)
    assert "HTTP/1.1 200" in out and "hello" in out, out
    rc, out = s_client(port, pki, pki.bad[:2], GET)
    assert "HTTP/1.1 200" not in out, out
    assert "certificate revoked" in out, out

    rc, body, err = nghttp(port, pki.good[:2])
    assert rc == 0 and body == b"hello", (rc, body, err)
    rc, body, err = nghttp(port, pki.bad[:2])
    # nghttp exits 0 when the connection fails; it says so on stderr.
    assert body == b"" and "processed=0" in err, (rc, body, err)

    # Each refusal is said once, with the reason (curl, s_client, nghttp).
    wait_for(lambda: len(refusals(st)) >= 3, 10, "three refusals logged")


# -- Gateway: HTTPS and TLS servers -------------------------------------------------

def test_https_mutual_refuses_revoked_client(strait_factory, upstream_factory,
                                             tmp_path):
    pki = Pki(tmp_path)
    up = upstream_factory(hello_handler)
    port = free_port()
    st = start(strait_factory, tmp_path,
               gateway(port, "HTTPS", "MUTUAL", pki) + backend(up.port, "HTTP"))
    assert_https_clients(st, port, pki)
    line = refusals(st)[0]
    assert f"listener gateway-127.0.0.1-{port}: 127.0.0.1" in line, line
    assert st.stats()[
        f"listener.gateway-127.0.0.1-{port}.tls.fail_certificate"] >= 3


def test_optional_mutual_refuses_a_presented_revoked_certificate(
        strait_factory, upstream_factory, tmp_path):
    """OPTIONAL_MUTUAL: no certificate is fine, a revoked one is refused
    rather than taken as none."""
    pki = Pki(tmp_path)
    up = upstream_factory(hello_handler)
    port = free_port()
    st = start(strait_factory, tmp_path,
               gateway(port, "HTTPS", "OPTIONAL_MUTUAL", pki)
               + backend(up.port, "HTTP"))
    rc, body, err = curl(port, pki)
    assert rc == 0 and body == b"hello", err
    assert_https_clients(st, port, pki)


def test_tls_server_mutual_refuses_revoked_client(strait_factory,
                                                  upstream_factory, tmp_path):
    """A TLS server (l4 proxy) terminating with MUTUAL and a tcp route."""
    pki = Pki(tmp_path)
    echo = upstream_factory(echo_handler)
    port = free_port()
    st = start(strait_factory, tmp_path,
               gateway(port, "TLS", "MUTUAL", pki) + backend(echo.port, "TCP"))
    assert tls_talk(port, pki, pki.good[:2]) == b"ping"
    assert refused_tls(port, pki, pki.bad[:2])
    # s_client waits (-ign_eof) for the gateway to close: it does at once.
    rc, out = s_client(port, pki, pki.bad[:2], b"ping")
    assert "certificate revoked" in out, out
    wait_for(lambda: len(refusals(st)) >= 2, 10, "two refusals logged")
    # Only the good client reached the upstream.
    assert echo.conns == 1
    # A new CRL revoking good too applies to new TLS sessions.
    write_atomic(pki.crl, pki.root.crl_pem([pki.bad[2], pki.good[2]]))
    wait_for(lambda: refused_tls(port, pki, pki.good[:2]), 20,
             "the new CRL applied")
    # (Until then good was let through.) Refused, it reaches nobody.
    conns = echo.conns
    assert refused_tls(port, pki, pki.good[:2])
    assert echo.conns == conns


def test_credential_ca_crl_and_issuers_without_crl(strait_factory,
                                                   upstream_factory, tmp_path):
    """credentialName: ca.crl beside the credential's ca.crt. The bundle
    also trusts a second root with no CRL: its clients still pass. An
    intermediate revoked by the root's CRL takes its clients down with it
    (the whole chain is checked)."""
    pki = Pki(tmp_path)
    other = CA(pki.dir, "other")
    other_client = other.issue("other-client")
    inter = CA(pki.dir, "inter", parent=pki.root)
    inter_client = inter.issue("inter-client")
    creds = tmp_path / "creds"
    cred = creds / "gwcred"
    cred.mkdir(parents=True)
    for src, dst in ((pki.server[0], "tls.crt"), (pki.server[1], "tls.key")):
        with open(src, "rb") as f:
            (cred / dst).write_bytes(f.read())
    with open(pki.root.path, "rb") as a, open(other.path, "rb") as b:
        (cred / "ca.crt").write_bytes(a.read() + b.read())
    # The root revokes bad; the intermediate has a CRL of its own, empty.
    write_atomic(cred / "ca.crl", pki.root.crl_pem([pki.bad[2]])
                 + inter.crl_pem([]))
    up = upstream_factory(hello_handler)
    port = free_port()
    st = start(strait_factory, tmp_path,
               gateway(port, "HTTPS", "MUTUAL", pki, cred="gwcred")
               + backend(up.port, "HTTP"),
               extra=f"credentials: {{dir: \"{creds}\"}}\n")
    assert curl(port, pki, pki.good[:2])[1] == b"hello"
    assert curl(port, pki, pki.bad[:2])[1] == b""
    assert curl(port, pki, other_client[:2])[1] == b"hello"
    assert curl(port, pki, inter_client[:2])[1] == b"hello"
    # Now the root revokes the intermediate.
    write_atomic(cred / "ca.crl",
                 pki.root.crl_pem([pki.bad[2], x509.load_pem_x509_certificate(
                     open(inter.path, "rb").read()).serial_number])
                 + inter.crl_pem([]))
    wait_for(lambda: curl(port, pki, inter_client[:2])[1] == b"", 20,
             "the intermediate's client refused")
    assert curl(port, pki, pki.good[:2])[1] == b"hello"
    assert curl(port, pki, other_client[:2])[1] == b"hello"
    assert "certificates reloaded" in st.log()


def test_credential_ca_crl_appearing_later_is_picked_up(
        strait_factory, upstream_factory, tmp_path):
    """Istio's split layout: the CA (and so the CRL) in NAME-cacert. A
    ca.crl that appears is used from then on; one that goes away turns
    checking off again (it is optional, unlike caCrl)."""
    pki = Pki(tmp_path)
    creds = tmp_path / "creds"
    cred = creds / "gwcred"
    cacert = creds / "gwcred-cacert"
    cred.mkdir(parents=True)
    cacert.mkdir()
    for src, dst in ((pki.server[0], cred / "tls.crt"),
                     (pki.server[1], cred / "tls.key"),
                     (pki.root.path, cacert / "ca.crt")):
        with open(src, "rb") as f:
            dst.write_bytes(f.read())
    up = upstream_factory(hello_handler)
    port = free_port()
    start(strait_factory, tmp_path,
          gateway(port, "HTTPS", "MUTUAL", pki, cred="gwcred")
          + backend(up.port, "HTTP"),
          extra=f"credentials: {{dir: \"{creds}\"}}\n")
    assert curl(port, pki, pki.bad[:2])[1] == b"hello"
    # Beside the certificate, not the CA: not this credential's CRL.
    write_atomic(cred / "ca.crl", pki.root.crl_pem([pki.good[2]]))
    write_atomic(cacert / "ca.crl", pki.root.crl_pem([pki.bad[2]]))
    wait_for(lambda: curl(port, pki, pki.bad[:2])[1] == b"", 20,
             "the new ca.crl applied")
    assert curl(port, pki, pki.good[:2])[1] == b"hello"
    os.unlink(cacert / "ca.crl")
    wait_for(lambda: curl(port, pki, pki.bad[:2])[1] == b"hello", 20,
             "checking off with the ca.crl gone")


# -- reload -------------------------------------------------------------------------

def test_new_crl_applies_without_restart_and_bad_one_keeps_the_old(
        strait_factory, upstream_factory, tmp_path):
    pki = Pki(tmp_path)
    up = upstream_factory(hello_handler)
    port = free_port()
    st = start(strait_factory, tmp_path,
               gateway(port, "HTTPS", "MUTUAL", pki) + backend(up.port, "HTTP"))
    pid = st.proc.pid
    assert curl(port, pki, pki.good[:2])[1] == b"hello"
    assert curl(port, pki, pki.bad[:2])[1] == b""

    # A session good made before the new CRL does not outlive it.
    sess = str(tmp_path / "good.sess")
    p = subprocess.run(["openssl", "s_client", "-connect", f"127.0.0.1:{port}",
                        "-servername", HOST, "-CAfile", pki.root.path,
                        "-cert", pki.good[0], "-key", pki.good[1],
                        "-sess_out", sess, "-ign_eof"],
                       input=GET, capture_output=True, timeout=30)
    assert b"hello" in p.stdout, p.stdout
    assert os.path.getsize(sess) > 0

    # Now good is revoked too.
    write_atomic(pki.crl, pki.root.crl_pem([pki.bad[2], pki.good[2]]))
    wait_for(lambda: curl(port, pki, pki.good[:2])[1] == b"", 20,
             "the new CRL applied")
    assert st.proc.pid == pid and st.proc.poll() is None
    assert "certificates reloaded" in st.log()
    p = subprocess.run(["openssl", "s_client", "-connect", f"127.0.0.1:{port}",
                        "-servername", HOST, "-CAfile", pki.root.path,
                        "-cert", pki.good[0], "-key", pki.good[1],
                        "-sess_in", sess, "-ign_eof"],
                       input=GET, capture_output=True, timeout=30)
    out = (p.stdout + p.stderr).decode(errors="replace")
    assert "hello" not in out and "certificate revoked" in out, out

    # A third client, and CRLs that must not replace the running one.
    third = pki.root.issue("third")
    assert curl(port, pki, third[:2])[1] == b"hello"
    other = CA(pki.dir, "forger")
    fails = 0
    for bad_crl, why in (
            (b"not a CRL\n", "no CRL in the file"),
            (open(pki.good[0], "rb").read(), "not an X509 CRL"),
            (pki.root.crl_pem([third[2]], next_update=-HOUR,
                              last_update=-2 * HOUR), "expired"),
            (pki.root.crl_pem([third[2]], signer=other),
             "is not signed by the CA certificate")):
        write_atomic(pki.crl, bad_crl)
        fails += 1
        wait_for(lambda: st.log().count("certificate reload failed") >= fails,
                 20, "the reload failure")
        last = [l for l in st.log().splitlines()
                if "certificate reload failed" in l][-1]
        assert pki.crl in last and why in last, last
        # The running CRL stays: good and bad refused, third admitted.
        assert curl(port, pki, third[:2])[1] == b"hello"
        assert curl(port, pki, pki.good[:2])[1] == b""
        assert curl(port, pki, pki.bad[:2])[1] == b""
    # Deleting the file is a failed reload too, not "no CRL any more".
    os.unlink(pki.crl)
    wait_for(lambda: st.log().count("certificate reload failed") > fails, 20,
             "the reload failure")
    assert curl(port, pki, pki.good[:2])[1] == b""


def test_crl_past_its_next_update_refuses_its_issuers_clients(
        strait_factory, upstream_factory, tmp_path):
    """A running CRL whose nextUpdate passes is no longer trusted: the
    clients of its issuer are refused (fail closed) until a current one
    is in place."""
    pki = Pki(tmp_path)
    soon = datetime.datetime.utcnow() - NOW + datetime.timedelta(seconds=20)
    write_atomic(pki.crl, pki.root.crl_pem([pki.bad[2]], next_update=soon))
    up = upstream_factory(hello_handler)
    port = free_port()
    st = start(strait_factory, tmp_path,
               gateway(port, "HTTPS", "MUTUAL", pki) + backend(up.port, "HTTP"))
    assert curl(port, pki, pki.good[:2])[1] == b"hello"
    wait_for(lambda: curl(port, pki, pki.good[:2])[1] == b"", 40,
             "the CRL to expire")
    assert "client certificate refused: CRL has expired" in st.log()
    write_atomic(pki.crl, pki.root.crl_pem([pki.bad[2]]))
    wait_for(lambda: curl(port, pki, pki.good[:2])[1] == b"hello", 20,
             "the current CRL applied")


def test_bad_crl_is_refused_by_check_and_at_start(strait_factory, tmp_path):
    pki = Pki(tmp_path)
    conf = tmp_path / "conf.d"
    conf.mkdir()
    port = free_port()
    (conf / "r.yaml").write_text(gateway(port, "HTTPS", "MUTUAL", pki)
                                 + backend(free_port(), "HTTP"))
    r = subprocess.run([STRAIT, "check", str(conf)], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr

    write_atomic(pki.crl, pki.root.crl_pem([], next_update=-HOUR,
                                           last_update=-2 * HOUR))
    r = subprocess.run([STRAIT, "check", str(conf)], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 1, r.stdout
    assert f"caCrl {pki.crl}: the CRL of /CN=root expired at" in r.stdout, \
        r.stdout
    assert "spec.servers[0].tls.caCrl" in r.stdout, r.stdout

    write_atomic(pki.crl, b"-----BEGIN X509 CRL-----\nAAAA\n"
                 b"-----END X509 CRL-----\n")
    r = subprocess.run([STRAIT, "check", str(conf)], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 1 and f"caCrl {pki.crl}: CRL 1 cannot be parsed" \
        in r.stdout, r.stdout

    # strait run refuses the configuration, naming the file.
    st = strait_factory(extra=f"config: {{dir: \"{conf}\"}}\n")
    st.start(wait=False)
    assert st.proc.wait(timeout=30) != 0
    assert pki.crl in st.log(), st.log()


# -- DestinationRule ----------------------------------------------------------------

def tls_backend(upstream_factory, pki, cert, client_ca=None):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert[0], cert[1])
    if client_ca is not None:
        ctx.verify_mode = ssl.CERT_REQUIRED
        ctx.load_verify_locations(client_ca)

    def handler(c):
        try:
            s = ctx.wrap_socket(c, server_side=True)
        except (ssl.SSLError, OSError):
            return
        hello_handler(s)
    return upstream_factory(handler)


def dr_resources(gw, ups, tls):
    text = f"""apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {{name: gw, namespace: default}}
spec:
  selector: {{}}
  servers:
  - port: {{number: {gw}, name: http, protocol: HTTP}}
    bind: 127.0.0.1
    hosts: ["*"]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: vs, namespace: default}}
spec:
  hosts: ["*"]
  gateways: [gw]
  http:
"""
    for name in ups:
        text += f"""  - match: [{{uri: {{prefix: /{name}}}}}]
    route: [{{destination: {{host: {name}.example.com}}}}]
"""
    for name, port in ups.items():
        text += f"""---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: {name}, namespace: default}}
spec:
  hosts: [{name}.example.com]
  resolution: STATIC
  ports: [{{number: {port}, name: http, protocol: HTTP}}]
  endpoints: [{{address: 127.0.0.1}}]
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {{name: {name}, namespace: default}}
spec:
  host: {name}.example.com
  trafficPolicy: {{tls: {{{tls[name]}}}}}
"""
    return text


def http_get(port, path):
    with socket.create_connection(("127.0.0.1", port), timeout=10) as c:
        c.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close"
                  f"\r\n\r\n".encode())
        out = b""
        while True:
            d = c.recv(65536)
            if not d:
                return out
            out += d


def test_destination_rule_refuses_revoked_upstream(strait_factory,
                                                   upstream_factory,
                                                   tmp_path):
    """SIMPLE and MUTUAL with caCrl, and MUTUAL with a credential's
    ca.crl: a revoked server certificate is refused (503 UF, the reason
    logged and in the access log), a good one serves; a new CRL applies
    at the next reload (SIGHUP)."""
    pki = Pki(tmp_path)
    good_srv = pki.root.issue("good-srv", dns=["good.example.com"],
                              client=False)
    bad_srv = pki.root.issue("bad-srv", dns=["bad.example.com"], client=False)
    mtls_srv = pki.root.issue("mtls-srv", dns=["mtls.example.com"],
                              client=False)
    cred_srv = pki.root.issue("cred-srv", dns=["cred.example.com"],
                              client=False)
    write_atomic(pki.crl, pki.root.crl_pem([bad_srv[2], mtls_srv[2]]))
    # credentialName: the client certificate, the CA and its ca.crl.
    creds = tmp_path / "creds"
    cred = creds / "drcred"
    cred.mkdir(parents=True)
    for src, dst in ((pki.good[0], "tls.crt"), (pki.good[1], "tls.key"),
                     (pki.root.path, "ca.crt")):
        with open(src, "rb") as f:
            (cred / dst).write_bytes(f.read())
    write_atomic(cred / "ca.crl", pki.root.crl_pem([cred_srv[2]]))
    ups = {"good": tls_backend(upstream_factory, pki, good_srv),
           "bad": tls_backend(upstream_factory, pki, bad_srv),
           "mtls": tls_backend(upstream_factory, pki, mtls_srv,
                               client_ca=pki.root.path),
           "cred": tls_backend(upstream_factory, pki, cred_srv,
                               client_ca=pki.root.path)}
    simple = (f'mode: SIMPLE, caCertificates: "{pki.root.path}", '
              f'caCrl: "{pki.crl}"')
    tls = {"good": simple, "bad": simple,
           "mtls": (f'mode: MUTUAL, clientCertificate: "{pki.good[0]}", '
                    f'privateKey: "{pki.good[1]}", '
                    f'caCertificates: "{pki.root.path}", caCrl: "{pki.crl}"'),
           "cred": "mode: MUTUAL, credentialName: drcred"}
    conf = tmp_path / "conf.d"
    conf.mkdir()
    gw = free_port()
    (conf / "r.yaml").write_text(dr_resources(
        gw, {n: u.port for n, u in ups.items()}, tls))
    st = strait_factory(extra=f"config: {{dir: \"{conf}\"}}\n"
                        f"credentials: {{dir: \"{creds}\"}}\n").start()
    assert http_get(gw, "/good").endswith(b"hello")
    for path in ("/bad", "/mtls", "/cred"):
        assert http_get(gw, path).startswith(b"HTTP/1.1 503"), path
    wait_for(lambda: "path=/cred" in st.log(), 10, "the access log")
    log = st.log()
    for n in ("bad", "mtls", "cred"):
        assert (f"cluster {n}.example.com||0: upstream 127.0.0.1:"
                f"{ups[n].port}: certificate refused: certificate revoked"
                in log), log
    line = [l for l in log.splitlines() if "path=/bad" in l][0]
    assert "status=503" in line and "flags=UF" in line, line
    assert 'details="upstream_tls_refused:certificate revoked"' in line, line
    assert ups["mtls"].conns >= 1

    # good is revoked too; the clusters pick the new CRL up at a reload.
    write_atomic(pki.crl, pki.root.crl_pem([bad_srv[2], mtls_srv[2],
                                            good_srv[2]]))
    st.signal(signal.SIGHUP)
    wait_for(lambda: http_get(gw, "/good").startswith(b"HTTP/1.1 503"), 20,
             "the new CRL applied to the cluster")


def test_destination_rule_crl_on_a_tcp_route(strait_factory, upstream_factory,
                                             tmp_path):
    """DestinationRule tls on a tcp route (the TCP relay originates TLS
    with the cluster's context): a revoked upstream is refused, the
    client's connection closed without a byte."""
    pki = Pki(tmp_path)
    good_srv = pki.root.issue("good-srv", dns=["good.example.com"],
                              client=False)
    bad_srv = pki.root.issue("bad-srv", dns=["bad.example.com"], client=False)
    write_atomic(pki.crl, pki.root.crl_pem([bad_srv[2]]))
    ups = {}
    for name, srv in (("good", good_srv), ("bad", bad_srv)):
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(srv[0], srv[1])

        def handler(c, ctx=ctx):
            try:
                s = ctx.wrap_socket(c, server_side=True)
            except (ssl.SSLError, OSError):
                return
            echo_handler(s)
        ups[name] = upstream_factory(handler)
    ports = {"good": free_port(), "bad": free_port()}
    text = """apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: gw, namespace: default}
spec:
  selector: {}
  servers:
"""
    for name, port in ports.items():
        text += f"""  - port: {{number: {port}, name: tcp-{name}, protocol: TCP}}
    bind: 127.0.0.1
    hosts: ["*"]
"""
    for name, port in ports.items():
        text += f"""---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: {name}, namespace: default}}
spec:
  hosts: [{name}.svc.test]
  resolution: STATIC
  ports: [{{number: {ups[name].port}, name: tcp, protocol: TCP}}]
  endpoints: [{{address: 127.0.0.1}}]
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {{name: {name}, namespace: default}}
spec:
  host: {name}.svc.test
  trafficPolicy:
    tls: {{mode: SIMPLE, sni: {name}.example.com, caCertificates: "{pki.root.path}", caCrl: "{pki.crl}"}}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: {name}, namespace: default}}
spec:
  hosts: ["*"]
  gateways: [gw]
  tcp:
  - match: [{{port: {port}}}]
    route: [{{destination: {{host: {name}.svc.test}}}}]
"""
    st = start(strait_factory, tmp_path, text)

    def talk(port):
        with socket.create_connection(("127.0.0.1", port), timeout=10) as c:
            c.sendall(b"ping")
            out = b""
            try:
                while len(out) < 4:
                    d = c.recv(100)
                    if not d:
                        break
                    out += d
            except ConnectionResetError:
                pass
            return out
    assert talk(ports["good"]) == b"ping"
    assert talk(ports["bad"]) == b""
    wait_for(lambda: "certificate refused: certificate revoked" in st.log(),
             10, "the refusal logged")
    assert (f"cluster bad.svc.test||0: upstream 127.0.0.1:{ups['bad'].port}: "
            "certificate refused: certificate revoked") in st.log()


def _kube_volume(d, version, files):
    """d as the kubelet lays out a Secret volume: ..<version>/ holds the
    files, ..data points at it, each name links through ..data; a later
    call swaps ..data to a new version and removes the old one."""
    d.mkdir(parents=True, exist_ok=True)
    new = d / f"..{version}"
    new.mkdir()
    for name, data in files.items():
        (new / name).write_bytes(data)
    old = (d / "..data").resolve() if (d / "..data").exists() else None
    os.symlink(new.name, d / "..data_tmp")
    os.replace(d / "..data_tmp", d / "..data")
    for name in files:
        if not (d / name).is_symlink():
            os.symlink(f"..data/{name}", d / name)
    if old is not None:
        for f in old.iterdir():
            f.unlink()
        old.rmdir()


def test_secret_volume_update_in_credentials_dir_is_picked_up(
        strait_factory, upstream_factory, tmp_path):
    """Issue 12 item 4, credentials.dir: a credential mounted as a
    Kubernetes Secret volume is reloaded when the kubelet swaps ..data
    (here: a new ca.crl that revokes a client)."""
    pki = Pki(tmp_path)

    def read(p):
        with open(p, "rb") as f:
            return f.read()

    files = {"tls.crt": read(pki.server[0]), "tls.key": read(pki.server[1]),
             "ca.crt": read(pki.root.path),
             "ca.crl": pki.root.crl_pem([])}
    creds = tmp_path / "creds"
    _kube_volume(creds / "gwcred", "2026_12_01_00_00_00.1", files)
    up = upstream_factory(hello_handler)
    port = free_port()
    st = start(strait_factory, tmp_path,
               gateway(port, "HTTPS", "MUTUAL", pki, cred="gwcred")
               + backend(up.port, "HTTP"),
               extra=f"credentials: {{dir: \"{creds}\"}}\n")
    assert curl(port, pki, pki.bad[:2])[1] == b"hello"
    files["ca.crl"] = pki.root.crl_pem([pki.bad[2]])
    _kube_volume(creds / "gwcred", "2026_12_01_00_00_01.2", files)
    wait_for(lambda: curl(port, pki, pki.bad[:2])[1] == b"", 20,
             "the swapped ca.crl applied")
    assert curl(port, pki, pki.good[:2])[1] == b"hello"
    assert "certificates reloaded" in st.log()
