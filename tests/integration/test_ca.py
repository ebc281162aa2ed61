"""The embedded CA: one strait runs it, others join with a token and renew
over mTLS. Two real processes on loopback; certificates are checked with
the openssl command line, not with strait's own code."""
import base64
import hashlib
import json
import os
import re
import subprocess
import time

import pytest

from conftest import STRAIT, SRCDIR, Strait, free_port, wait_for

SAMPLES = f"{SRCDIR}/tests/data/istio-samples/certs"


def run(*args, timeout=30):
    return subprocess.run([STRAIT, *args], capture_output=True, text=True,
                          timeout=timeout)


class Node(Strait):
    """A strait with a ca: section, in its own directory, started with
    extra command-line arguments (--join, --token)."""

    def __init__(self, tmp_path, name, ca_yaml, node_yaml="", args=()):
        d = tmp_path / name
        d.mkdir(exist_ok=True)
        self.dir = d
        self.args = list(args)
        super().__init__(d, "", workers=1,
                         extra=f"trustDomain: example.org\n{node_yaml}"
                               f"ca: {ca_yaml}\n")

    def start(self, wait=True):
        self.logf = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [STRAIT, "run", "-c", str(self.config), *self.args],
            stdout=self.logf, stderr=self.logf)
        if wait:
            wait_for(self.ready_or_dead, 20, "strait to become ready")
        return self

    def exit_code(self, timeout=30):
        code = self.proc.wait(timeout=timeout)
        self.logf.close()
        return code


@pytest.fixture
def nodes(tmp_path):
    made = []

    def make(*a, **kw):
        n = Node(tmp_path, *a, **kw)
        made.append(n)
        return n

    yield make
    for n in made:
        code = None
        if n.proc is not None and n.proc.poll() is None:
            code = n.stop(timeout=30)
        n.kill()
        n.assert_clean_log()
        if code is not None:
            assert code == 0, n.log()


def ca_node(nodes, tmp_path, cacerts="", extra="", node_yaml=""):
    port = free_port()
    d = tmp_path / "ca-state"
    ca = nodes("ca", f"{{enabled: true, dir: {d}, address: 127.0.0.1:{port}"
                     f"{', cacerts: ' + cacerts if cacerts else ''}{extra}}}",
               node_yaml=node_yaml)
    ca.ca_dir = d
    ca.ca_url = f"https://127.0.0.1:{port}"
    return ca


def token(ca, ns="foo", sa="bar", ttl="1h"):
    r = run("ca", "token", "create", "--namespace", ns, "--service-account",
            sa, "--ttl", ttl, "-c", str(ca.config))
    assert r.returncode == 0, r.stderr
    t = r.stdout.strip()
    assert re.fullmatch(r"sjt1\.[A-Za-z0-9_-]{86}", t), t
    return t


def joiner(nodes, ca, name, tok=None, ttl="1h", ns="foo", sa="bar",
           join=True):
    args = ["--join", ca.ca_url] if join else []
    if tok:
        args += ["--token", tok]
    return nodes(name, f"{{dir: {ca.dir.parent / (name + '-state')}, "
                       f"certTTL: {ttl}}}",
                 node_yaml=f"node: {{namespace: {ns}, serviceAccount: {sa}}}\n",
                 args=args)


def identity(n):
    return n.dir.parent / (n.dir.name + "-state") / "identity"


def split_chain(path, out_dir):
    pems = re.findall(r"-----BEGIN CERTIFICATE-----.*?-----END CERTIFICATE-----\n",
                      path.read_text(), re.S)
    files = []
    for i, p in enumerate(pems):
        f = out_dir / f"c{i}.pem"
        f.write_text(p)
        files.append(f)
    return files


def openssl(*args):
    r = subprocess.run(["openssl", *args], capture_output=True, text=True,
                       timeout=30)
    return r


def san_of(cert):
    r = openssl("x509", "-in", str(cert), "-noout", "-ext", "subjectAltName")
    assert r.returncode == 0, r.stderr
    return r.stdout


def serial_of(cert):
    r = openssl("x509", "-in", str(cert), "-noout", "-serial")
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def mode(p):
    return os.stat(p).st_mode & 0o777


def test_join_gets_a_spiffe_chain_that_openssl_verifies(nodes, tmp_path):
    ca = ca_node(nodes, tmp_path).start()
    j = joiner(nodes, ca, "j1", token(ca)).start()
    idir = identity(j)
    for f in ("key.pem", "cert-chain.pem", "root-cert.pem"):
        assert mode(idir / f) == 0o600, f
    assert mode(ca.ca_dir / "ca-key.pem") == 0o600
    leaf, *rest = split_chain(idir / "cert-chain.pem", tmp_path)
    assert len(rest) == 1  # the self-signed root
    r = openssl("verify", "-CAfile", str(ca.ca_dir / "root-cert.pem"), str(leaf))
    assert r.returncode == 0 and ": OK" in r.stdout, r.stdout + r.stderr
    assert "URI:spiffe://example.org/ns/foo/sa/bar" in san_of(leaf)
    # The key is the leaf's key, and never appears in a log.
    r1 = openssl("x509", "-in", str(leaf), "-noout", "-pubkey")
    r2 = openssl("pkey", "-in", str(idir / "key.pem"), "-pubout")
    assert r1.stdout == r2.stdout
    key_body = "".join((idir / "key.pem").read_text().splitlines()[1:-1])
    assert key_body[:40] not in j.log() and key_body[:40] not in ca.log()
    assert "issued spiffe://example.org/ns/foo/sa/bar" in ca.log()
    assert "authenticated by join token" in ca.log()
    # The CA's own identity (the gateway's) is stored too.
    (tmp_path / "ca-id").mkdir()
    ca_leaf = split_chain(ca.ca_dir / "identity" / "cert-chain.pem",
                          tmp_path / "ca-id")[0]
    assert "URI:spiffe://example.org/ns/istio-system/sa/strait" in san_of(ca_leaf)


def test_reused_token_is_refused_on_both_sides(nodes, tmp_path):
    ca = ca_node(nodes, tmp_path).start()
    tok = token(ca)
    joiner(nodes, ca, "j1", tok).start()
    again = joiner(nodes, ca, "j2", tok).start(wait=False)
    assert again.exit_code() == 3
    assert "join token already used" in again.log()
    assert "CA refused the request (HTTP 401)" in again.log()
    wait_for(lambda: "join token already used" in ca.log(), 10,
             "the CA to log the refusal")
    assert not (identity(again) / "cert-chain.pem").exists()


def token_record(ca, tok):
    raw = base64.urlsafe_b64decode(tok[5:] + "==")
    return ca.ca_dir / "tokens" / hashlib.sha256(raw[32:]).hexdigest()


def test_expired_and_unknown_tokens_are_refused(nodes, tmp_path):
    ca = ca_node(nodes, tmp_path).start()
    tok = token(ca)
    # Expire the record (deterministic; no waiting for a clock).
    rec = token_record(ca, tok)
    text = rec.read_text()
    rec.write_text(re.sub(r"expires \d+", "expires 1000000000", text))
    j = joiner(nodes, ca, "j1", tok).start(wait=False)
    assert j.exit_code() == 3
    assert "join token expired at 2001-09-09T01:46:40Z" in j.log()
    wait_for(lambda: "join token expired" in ca.log(), 10, "CA log")
    # A well-formed token the CA never made.
    forged = tok[:60] + ("A" if tok[60] != "A" else "B") + tok[61:]
    j2 = joiner(nodes, ca, "j2", forged).start(wait=False)
    assert j2.exit_code() == 3
    log = j2.log()
    assert "unknown join token" in log or "damaged join token" in log, log
    # A token that is not a token at all is refused before connecting.
    j3 = joiner(nodes, ca, "j3", "not-a-token").start(wait=False)
    assert j3.exit_code() == 3
    assert "not a strait join token" in j3.log()


def test_token_for_another_ca_is_refused_by_the_pin(nodes, tmp_path):
    ca = ca_node(nodes, tmp_path).start()
    other = tmp_path / "other.yaml"
    other.write_text(f"trustDomain: example.org\n"
                     f"ca: {{dir: {tmp_path / 'other-ca'}}}\n")
    r = run("ca", "init", "-c", str(other))
    assert r.returncode == 0, r.stderr
    r = run("ca", "token", "create", "--namespace", "foo",
            "--service-account", "bar", "-c", str(other))
    assert r.returncode == 0
    j = joiner(nodes, ca, "j1", r.stdout.strip()).start(wait=False)
    assert j.exit_code() == 3
    assert "does not end in the pinned root" in j.log()
    assert "issued spiffe" not in ca.log()


def test_renewal_over_mtls_without_token_and_after_restart(nodes, tmp_path):
    ca = ca_node(nodes, tmp_path).start()
    j = joiner(nodes, ca, "j1", token(ca), ttl="6s").start()
    chain = identity(j) / "cert-chain.pem"
    first = serial_of(chain)
    # Renewed at about half of the 6 s life, with the current certificate
    # (the token is spent: a renewal cannot have used it).
    wait_for(lambda: serial_of(chain) != first, 15, "a renewal")
    wait_for(lambda: "renewed over mTLS" in j.log(), 10, "the renewal log")
    wait_for(lambda: "authenticated by client certificate" in ca.log(), 10,
             "the CA to log a renewal")
    assert "URI:spiffe://example.org/ns/foo/sa/bar" in san_of(chain)
    r = openssl("x509", "-in", str(chain), "-noout", "-startdate", "-enddate")
    assert r.returncode == 0
    assert j.stop() == 0
    j.logf.close()

    # Restarted without a token: it uses the stored certificate and renews.
    again = joiner(nodes, ca, "j1", None, ttl="6s")
    again.log_path = tmp_path / "j1-restart.log"
    again.start()
    assert "using the stored certificate" in again.log()
    before = serial_of(chain)
    wait_for(lambda: serial_of(chain) != before, 15, "a renewal after restart")
    # The certificate is stored before the renewal is logged.
    wait_for(lambda: "renewed over mTLS" in again.log(), 10,
             "the renewal log after restart")
    for f in ("key.pem", "cert-chain.pem", "root-cert.pem"):
        assert mode(identity(j) / f) == 0o600


def test_no_stored_certificate_and_no_token_is_a_clear_error(nodes, tmp_path):
    ca = ca_node(nodes, tmp_path).start()
    j = joiner(nodes, ca, "j1", None).start(wait=False)
    assert j.exit_code() == 3
    assert "no join token was given" in j.log()


def test_requested_ttl_is_capped_by_the_ca(nodes, tmp_path):
    ca = ca_node(nodes, tmp_path, extra=", maxCertTTL: 1h").start()
    j = joiner(nodes, ca, "j1", token(ca), ttl="48h").start()
    chain = identity(j) / "cert-chain.pem"
    r = openssl("x509", "-in", str(chain), "-noout", "-checkend", "3601")
    assert r.returncode == 1  # expires within the hour
    r = openssl("x509", "-in", str(chain), "-noout", "-checkend", "3500")
    assert r.returncode == 0


def test_istio_sample_ca_as_intermediate(nodes, tmp_path):
    ca = ca_node(nodes, tmp_path, cacerts=SAMPLES).start()
    assert "intermediate under" in ca.log()
    j = joiner(nodes, ca, "j1", token(ca)).start()
    leaf, inter, root = split_chain(identity(j) / "cert-chain.pem", tmp_path)
    r = openssl("verify", "-CAfile", f"{SAMPLES}/root-cert.pem",
                "-untrusted", f"{SAMPLES}/ca-cert.pem", str(leaf))
    assert r.returncode == 0 and ": OK" in r.stdout, r.stdout + r.stderr
    assert inter.read_text() == open(f"{SAMPLES}/ca-cert.pem").read()
    assert "URI:spiffe://example.org/ns/foo/sa/bar" in san_of(leaf)
    # Nothing of the root was written to the CA's own directory.
    assert not (ca.ca_dir / "ca-key.pem").exists()


def test_ca_cli(tmp_path):
    r = run("ca", "--help")
    assert r.returncode == 0
    for word in ("init", "show", "token create", "issue", "--join"):
        assert word in r.stdout
    cfg = tmp_path / "s.yaml"
    cfg.write_text(f"trustDomain: example.org\nca: {{dir: {tmp_path / 'ca'}}}\n")
    # Before init there is no CA.
    r = run("ca", "show", "-c", str(cfg))
    assert r.returncode == 3 and "run 'strait ca init'" in r.stderr
    r = run("ca", "init", "-c", str(cfg))
    assert r.returncode == 0 and "root pin:   sha256:" in r.stdout
    r = run("ca", "token", "create", "--namespace", "foo", "-c", str(cfg))
    assert r.returncode == 2 and "--service-account" in r.stderr
    r = run("ca", "token", "create", "--namespace", "Foo",
            "--service-account", "bar", "-c", str(cfg))
    assert r.returncode == 2
    r = run("ca", "frob", "-c", str(cfg))
    assert r.returncode == 2
    r = run("ca", "issue", "--namespace", "ns1", "--service-account", "sa1",
            "--ttl", "10m", "--out", str(tmp_path / "out"), "-c", str(cfg))
    assert r.returncode == 0, r.stderr
    assert mode(tmp_path / "out" / "key.pem") == 0o600
    leaf = split_chain(tmp_path / "out" / "cert-chain.pem", tmp_path)[0]
    assert "URI:spiffe://example.org/ns/ns1/sa/sa1" in san_of(leaf)
    r = openssl("verify", "-CAfile", str(tmp_path / "ca" / "root-cert.pem"),
                str(leaf))
    assert r.returncode == 0
    run("ca", "token", "create", "--namespace", "a", "--service-account", "b",
        "-c", str(cfg))
    r = run("ca", "show", "-c", str(cfg))
    assert r.returncode == 0 and "tokens:     1 outstanding" in r.stdout
    # A key that does not match is a clear error, exit 3.
    (tmp_path / "ca" / "ca-key.pem").write_text(
        open(f"{SAMPLES}/ca-key.pem").read())
    r = run("ca", "show", "-c", str(cfg))
    assert r.returncode == 3
    assert "ca-key.pem does not match" in r.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text("ca: {keyType: DSA}\n")
    r = run("ca", "init", "-c", str(bad))
    assert r.returncode == 1 and "keyType" in r.stderr


def peer_serial(sock):
    der = sock.getpeercert(binary_form=True)
    r = subprocess.run(["openssl", "x509", "-inform", "DER", "-noout",
                        "-serial"], input=der, capture_output=True,
                       timeout=30)
    assert r.returncode == 0
    return r.stdout.decode().strip()


def test_rotation_keeps_open_connections(nodes, tmp_path):
    """The CA rotates its certificates at half life (certTTL 2s here); a
    connection opened before a rotation still completes its request, and
    new handshakes get the new certificate."""
    import socket
    import ssl

    ca = ca_node(nodes, tmp_path, extra=", certTTL: 2s").start()
    port = int(ca.ca_url.rsplit(":", 1)[1])
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE

    def connect():
        return ctx.wrap_socket(socket.create_connection(("127.0.0.1", port),
                                                        timeout=10))

    held = connect()
    first = peer_serial(held)
    held.sendall(b"POST /v1/certificate HTTP/1.1\r\nHost: x\r\n")

    def rotated():
        s = connect()
        try:
            return peer_serial(s) != first
        finally:
            s.close()

    wait_for(rotated, 15, "a new server certificate for new handshakes")
    # The node's own identity rotated too.
    wait_for(lambda: ca.log().count(
        "spiffe://example.org/ns/istio-system/sa/strait rotated") >= 1, 15,
        "the node certificate to rotate")
    # The connection from before the rotation is still served.
    body = b'{"csr": "x"}'
    held.sendall(b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    answer = b""
    while True:
        chunk = held.recv(4096)
        if not chunk:
            break
        answer += chunk
    held.close()
    assert answer.startswith(b"HTTP/1.1 400 "), answer
    assert b"not a PEM certificate request" in answer


def test_unreachable_ca_is_a_clear_error(nodes, tmp_path):
    port = free_port()  # nothing listens there
    j = nodes("j1", f"{{dir: {tmp_path / 'j1-state'}}}",
              args=["--join", f"https://127.0.0.1:{port}", "--token",
                    "sjt1." + "A" * 86])
    j.start(wait=False)
    assert j.exit_code() == 3
    assert "cannot join the CA at https://127.0.0.1:" in j.log()
    assert "cannot connect to the CA" in j.log()


def block_identity_writes(n):
    """Makes every write of n's identity set fail the way a full or broken
    disk does, deterministically and also as root: the journal directory
    the writes go through is taken by a plain file."""
    d = identity(n)
    d.mkdir(parents=True, exist_ok=True)
    (d / ".pending").write_text("in the way\n")
    return d / ".pending"


def test_unstorable_certificate_is_used_from_memory_and_stored_later(
        nodes, tmp_path):
    """Issue 12 item 9: a certificate that cannot be written is still the
    one in use, and is written once the disk takes it again."""
    ca = ca_node(nodes, tmp_path).start()
    tok = token(ca)
    j = joiner(nodes, ca, "j", tok)
    blocker = block_identity_writes(j)
    j.start()
    wait_for(lambda: "it is in use from memory" in j.log(), 10,
             "the store failure to be logged")
    idir = identity(j)
    assert not (idir / "cert-chain.pem").exists()
    # The key the token was spent for is kept until the set is stored.
    assert (idir / "join-key.pem").exists()
    assert mode(idir / "join-key.pem") == 0o600
    blocker.unlink()
    wait_for(lambda: "is stored in" in j.log(), 30,
             "the retried store to succeed")
    assert (idir / "cert-chain.pem").exists()
    assert not (idir / "join-key.pem").exists()
    assert not (idir / ".pending").exists()
    r1 = openssl("x509", "-in", str(idir / "cert-chain.pem"), "-noout",
                 "-pubkey")
    r2 = openssl("pkey", "-in", str(idir / "key.pem"), "-pubout")
    assert r1.stdout == r2.stdout


def ready_lines(n):
    code, body, _ = n.get("/healthz/ready")
    return code, body.splitlines()


def prometheus(n):
    code, body, _ = n.get("/stats/prometheus")
    assert code == 200
    return body.splitlines()


def test_unstored_certificate_shows_on_stats_and_ready(nodes, tmp_path):
    """Issue 12 item 9: while the certificate in use could not be written,
    /stats and /stats/prometheus count the failed writes and say it is in
    memory only, and /healthz/ready says why (still 200: the node serves
    with it); all of it clears once the write succeeds."""
    ca = ca_node(nodes, tmp_path).start()
    tok = token(ca)
    j = joiner(nodes, ca, "j", tok)
    blocker = block_identity_writes(j)
    j.start()
    # The first write failed at the join; wait for a retry to fail too.
    wait_for(lambda: j.stats().get("ca.identity_store_failures", 0) >= 2, 10,
             "a retried store to fail")
    st = j.stats()
    assert st["ca.identity_unstored"] == 1
    why = json.loads(st["ca.identity_store_error"])
    assert why and str(identity(j)) in why, why
    prom = prometheus(j)
    assert "strait_ca_identity_unstored 1" in prom
    assert "# TYPE strait_ca_identity_store_failures_total counter" in prom
    assert any(l.startswith("strait_ca_identity_store_failures_total ")
               and int(l.split()[1]) >= 2 for l in prom), prom
    code, lines = ready_lines(j)
    assert code == 200, lines
    assert f"IDENTITY NOT STORED: {why} (retrying)" in lines, lines
    # The CA's own node stored its certificate: nothing to show.
    cs = ca.stats()
    assert cs["ca.identity_unstored"] == 0
    assert cs["ca.identity_store_failures"] == 0
    assert "ca.identity_store_error" not in cs
    assert not any(l.startswith("IDENTITY") for l in ready_lines(ca)[1])

    blocker.unlink()
    wait_for(lambda: j.stats()["ca.identity_unstored"] == 0, 30,
             "the retried store to succeed")
    st = j.stats()
    assert st["ca.identity_store_failures"] >= 2
    assert "ca.identity_store_error" not in st
    assert "strait_ca_identity_unstored 0" in prometheus(j)
    code, lines = ready_lines(j)
    assert code == 200 and lines == ["LIVE"], lines
    assert (identity(j) / "cert-chain.pem").exists()
    assert "is stored in" in j.log()


def _der_serial(der):
    r = subprocess.run(["openssl", "x509", "-inform", "DER", "-noout",
                        "-serial"], input=der, capture_output=True,
                       timeout=30)
    assert r.returncode == 0
    return int(r.stdout.decode().strip().split("=", 1)[1], 16)


class ClientCertEcho:
    """A TLS upstream that requires a client certificate of client_ca and
    records each handshake's client certificate serial (no session
    tickets, so every handshake shows one), then echoes and ends with
    b"END"."""

    def __init__(self, upstream_factory, chain, key, client_ca):
        import ssl
        self.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.ctx.load_cert_chain(chain, key)
        self.ctx.verify_mode = ssl.CERT_REQUIRED
        self.ctx.load_verify_locations(client_ca)
        self.ctx.options |= ssl.OP_NO_TICKET
        self.ctx.set_alpn_protocols(["istio"])
        self.serials = []
        self.errors = []
        self.port = upstream_factory(self.serve).port

    def serve(self, c):
        import ssl
        try:
            s = self.ctx.wrap_socket(c, server_side=True)
        except (ssl.SSLError, OSError) as e:
            self.errors.append(repr(e))
            return
        self.serials.append(_der_serial(s.getpeercert(binary_form=True)))
        while True:
            d = s.recv(1 << 16)
            if not d:
                break
            s.sendall(d)
        s.sendall(b"END")
        s.close()


def test_renewal_that_cannot_be_stored_is_served_from_memory(
        strait_factory, upstream_factory, tmp_path):
    """Issue 12 item 9: with ca.dir/identity unwritable from the start and
    2 s certificates, the node still rotates, in memory, past the first
    certificate's expiry: an ISTIO_MUTUAL upstream sees each new client
    certificate (by serial), while nothing reaches the disk and /stats
    says so; once the disk takes writes again the next one is stored."""
    from test_l4 import gateway
    from test_l4_upstream_tls import (dr, plain_talk, tcp_route, tcp_server,
                                      tcp_service)

    conf = tmp_path / "conf.d"
    conf.mkdir()
    cadir = tmp_path / "ca"
    st = strait_factory(extra=(
        f"config: {{dir: \"{conf}\"}}\n"
        f"ca: {{enabled: true, dir: \"{cadir}\", certTTL: 2s, "
        f"address: \"127.0.0.1:{free_port()}\"}}\n"))
    r = run("ca", "init", "-c", str(st.config))
    assert r.returncode == 0, r.stderr
    r = run("ca", "issue", "--namespace", "default", "--service-account",
            "backend", "--ttl", "1h", "--out", str(tmp_path / "backend"),
            "-c", str(st.config))
    assert r.returncode == 0, r.stderr
    idir = cadir / "identity"
    idir.mkdir(parents=True, exist_ok=True)
    blocker = idir / ".pending"
    blocker.write_text("in the way\n")
    up = ClientCertEcho(upstream_factory,
                        str(tmp_path / "backend/cert-chain.pem"),
                        str(tmp_path / "backend/key.pem"),
                        str(cadir / "root-cert.pem"))
    port = free_port()
    (conf / "r.yaml").write_text(
        gateway(tcp_server(port)) + tcp_service("mesh", up.port, sa="backend")
        + dr("mesh", "{mode: ISTIO_MUTUAL}") + tcp_route("vs", port, "mesh"))
    st.start()
    node_id = "spiffe://cluster.local/ns/istio-system/sa/strait"

    def taken():
        """Serials of the node certificates the log says were taken."""
        return [int(x, 16) for x in re.findall(
            r"CA: certificate for " + re.escape(node_id)
            + r" [a-z ]+ \(serial ([0-9a-f]+),", st.log())]

    def talk():
        assert plain_talk(port, b"x") == b"xEND"
        return up.serials[-1]

    # Two rotations (the third certificate) outlive the first one's 2 s.
    def third_served():
        seen = talk()
        return seen in taken()[2:]

    wait_for(third_served, 20, "a certificate two rotations on to be served")
    assert up.errors == []
    assert not (idir / "cert-chain.pem").exists()
    s = st.stats()
    assert s["ca.identity_unstored"] == 1
    assert s["ca.identity_store_failures"] >= 3
    code, lines = ready_lines(st)
    assert code == 200
    assert any(l.startswith("IDENTITY NOT STORED: ")
               and l.endswith(" (retrying)") for l in lines), lines

    blocker.unlink()
    wait_for(lambda: st.stats()["ca.identity_unstored"] == 0, 15,
             "a rotation or retry to store the certificate")
    assert (idir / "cert-chain.pem").exists()
    assert not any(l.startswith("IDENTITY") for l in ready_lines(st)[1])


MESH_GATEWAY = """apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {{name: mesh-in, namespace: istio-system}}
spec:
  selector: {{}}
  servers:
  - port: {{number: {port}, name: https-mesh, protocol: HTTPS}}
    bind: 127.0.0.1
    hosts: ["*"]
    tls: {{mode: ISTIO_MUTUAL}}
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: up, namespace: istio-system}}
spec:
  hosts: [up.internal]
  resolution: STATIC
  ports: [{{number: {up}, name: http, protocol: HTTP}}]
  endpoints: [{{address: 127.0.0.1}}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: in, namespace: istio-system}}
spec:
  hosts: ["*"]
  gateways: [mesh-in]
  http:
  - route: [{{destination: {{host: up.internal}}}}]
"""


def test_mesh_gateway_serves_a_renewal_that_cannot_be_stored(
        strait_factory, upstream_factory, tmp_path):
    """Issue 12 item 9, the server side: with ca.dir/identity unwritable
    from the start and 2 s certificates, an ISTIO_MUTUAL Gateway server
    presents the node's certificate from memory, each rotation from the
    next handshake on: a mesh client sees the serial change past the
    first certificate's expiry, and every handshake (verified against the
    mesh root, expiry included) and request succeeds."""
    import socket
    import ssl
    from conftest import responder

    conf = tmp_path / "conf.d"
    conf.mkdir()
    cadir = tmp_path / "ca"
    st = strait_factory(extra=(
        f"config: {{dir: \"{conf}\"}}\n"
        f"ca: {{enabled: true, dir: \"{cadir}\", certTTL: 2s, "
        f"address: \"127.0.0.1:{free_port()}\"}}\n"))
    r = run("ca", "init", "-c", str(st.config))
    assert r.returncode == 0, r.stderr
    r = run("ca", "issue", "--namespace", "default", "--service-account",
            "client", "--ttl", "1h", "--out", str(tmp_path / "client"),
            "-c", str(st.config))
    assert r.returncode == 0, r.stderr
    idir = cadir / "identity"
    idir.mkdir(parents=True, exist_ok=True)
    blocker = idir / ".pending"
    blocker.write_text("in the way\n")
    up = upstream_factory(responder(lambda head: b"ok"))
    port = free_port()
    (conf / "r.yaml").write_text(MESH_GATEWAY.format(port=port, up=up.port))
    st.start()
    node_id = "spiffe://cluster.local/ns/istio-system/sa/strait"

    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False  # a SPIFFE ID, no host name
    ctx.load_verify_locations(str(cadir / "root-cert.pem"))
    ctx.load_cert_chain(str(tmp_path / "client/cert-chain.pem"),
                        str(tmp_path / "client/key.pem"))

    def taken():
        """Serials of the node certificates the log says were taken."""
        return [int(x, 16) for x in re.findall(
            r"CA: certificate for " + re.escape(node_id)
            + r" [a-z ]+ \(serial ([0-9a-f]+),", st.log())]

    def handshake():
        """One connection and request; any failure fails the test. The
        served certificate's serial and expiry (seconds since the epoch)."""
        with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
            with ctx.wrap_socket(raw) as s:
                cert = s.getpeercert()
                s.sendall(b"GET / HTTP/1.1\r\nHost: mesh\r\n"
                          b"Connection: close\r\n\r\n")
                resp = b""
                while True:
                    d = s.recv(1 << 16)
                    if not d:
                        break
                    resp += d
        assert resp.startswith(b"HTTP/1.1 200") and resp.endswith(b"ok"), resp
        return (int(cert["serialNumber"], 16),
                ssl.cert_time_to_seconds(cert["notAfter"]))

    first, first_expiry = handshake()
    assert first in taken()
    served = [first]

    # Two rotations on (the third certificate) is past the first one's
    # 2 s, and the handshake that shows it comes after the first expired.
    def third_served_after_first_expired():
        serial, _ = handshake()
        served.append(serial)
        return serial in taken()[2:] and time.time() > first_expiry

    wait_for(third_served_after_first_expired, 20,
             "a certificate two rotations on to be served past the first "
             "one's expiry")
    assert all(x in taken() for x in served), (served, taken())
    assert not (idir / "cert-chain.pem").exists()
    s = st.stats()
    assert s["ca.identity_unstored"] == 1
    assert s["ca.identity_store_failures"] >= 3
    # Nothing was read from ca.dir: the listener never reloaded.
    assert "certificates reloaded" not in st.log()


def test_join_interrupted_after_the_spend_retries_with_its_key(
        nodes, tmp_path):
    """Issue 12 item 10: a join that spent its token and died before its
    certificate reached the disk is retried with the same token and the
    key it kept; the token stays refused to any other key."""
    ca = ca_node(nodes, tmp_path).start()
    tok = token(ca)
    j = joiner(nodes, ca, "j", tok)
    blocker = block_identity_writes(j)
    j.start()
    wait_for(lambda: "it is in use from memory" in j.log(), 10,
             "the store failure to be logged")
    j.kill()  # SIGKILL: nothing was stored
    blocker.unlink()
    assert not (identity(j) / "cert-chain.pem").exists()
    # The same host starts again, with the same token.
    again = joiner(nodes, ca, "j", tok).start()
    assert "retrying an interrupted join with the key kept" in again.log()
    assert (identity(j) / "cert-chain.pem").exists()
    assert not (identity(j) / "join-key.pem").exists()
    leaf = split_chain(identity(j) / "cert-chain.pem", tmp_path)[0]
    assert "URI:spiffe://example.org/ns/foo/sa/bar" in san_of(leaf)
    # Another host with the same token has another key: refused.
    other = joiner(nodes, ca, "k", tok).start(wait=False)
    assert other.exit_code() == 3
    assert "join token already used" in other.log()
    assert "create a new one with 'strait ca token create'" in other.log()


def test_interrupted_root_creation_is_undone(nodes, tmp_path):
    """Issue 12 item 10: a first start killed while it wrote the CA's
    files leaves a journal that the next start undoes (or finishes), never
    a partial layout that stops every later start."""
    ca = ca_node(nodes, tmp_path)
    d = ca.ca_dir
    # What a SIGKILL after two of the four files leaves: .pending without
    # its completion marker.
    (d / ".pending").mkdir(parents=True)
    (d / ".pending" / "ca-cert.pem").write_text("half\n")
    (d / ".pending" / "ca-key.pem").write_text("half\n")
    ca.start()
    assert not (d / ".pending").exists()
    for f in ("ca-cert.pem", "ca-key.pem", "root-cert.pem", "cert-chain.pem"):
        assert (d / f).exists(), f
    r = openssl("x509", "-in", str(d / "ca-cert.pem"), "-noout", "-subject")
    assert r.returncode == 0, r.stderr


def _raw_connect(port, source, timeout=10):
    import socket
    return socket.create_connection(("127.0.0.1", port), timeout=timeout,
                                    source_address=(source, 0))


def _closed_by_peer(sock):
    """Blocks until the peer closes (EOF or reset); False on our timeout."""
    import socket
    try:
        while True:
            if not sock.recv(4096):
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except socket.timeout:
        return False


def _ca_request_from(port, source):
    """One TLS request without credentials from source: the CA answers
    401. Connections queued before it have been accepted by then."""
    import ssl
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    with ctx.wrap_socket(_raw_connect(port, source)) as t:
        body = b'{"csr": "x"}'
        t.sendall(b"POST /v1/certificate HTTP/1.1\r\nHost: x\r\n"
                  b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        answer = b""
        while True:
            chunk = t.recv(4096)
            if not chunk:
                break
            answer += chunk
    return answer


def test_ca_api_per_source_limit_and_handshake_deadline(nodes, tmp_path):
    """Issue 12 item 6: one source holds at most 16 connections (the 17th
    is refused), and a connection that never starts its handshake is
    closed at the handshake deadline, which the CA names in its (debug)
    log."""
    ca = ca_node(nodes, tmp_path, node_yaml="log: {level: debug}\n").start()
    port = int(ca.ca_url.rsplit(":", 1)[1])
    socks = [_raw_connect(port, "127.0.0.2") for _ in range(16)]
    try:
        # Once a later connection is answered, the 16 were accepted.
        assert _ca_request_from(port, "127.0.0.3").startswith(
            b"HTTP/1.1 400 ")
        assert "per-source connection limit" not in ca.log()
        socks.append(_raw_connect(port, "127.0.0.2"))
        wait_for(lambda: "per-source connection limit" in ca.log(), 10,
                 "the 17th connection from one source to be refused")
        assert ca.log().count("refused a connection from 127.0.0.2") == 1
        # Every one is closed by the CA: the 17th at once, the others at
        # the handshake deadline.
        assert all(_closed_by_peer(s) for s in socks)
    finally:
        for s in socks:
            s.close()
    wait_for(lambda: ca.log().count("timed out (handshake or first byte)")
             >= 16, 10, "the handshake deadline to close the 16")
    # The source may connect again once its connections are gone.
    assert _ca_request_from(port, "127.0.0.2").startswith(b"HTTP/1.1 400 ")


def test_ca_api_renewals_are_served_while_join_slots_are_full(nodes,
                                                              tmp_path):
    """Issue 12 item 6: clients that finish a handshake without a client
    certificate and then idle (sending one byte) fill the join slots; a
    further join is answered 503 busy, and renewals, which present a client
    certificate, still get their certificates."""
    import ssl

    ca = ca_node(nodes, tmp_path).start()
    port = int(ca.ca_url.rsplit(":", 1)[1])
    j = joiner(nodes, ca, "j", token(ca), ttl="2s").start()
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    held = []
    try:
        # 9 sources x 15 = 135 > the 128 join slots; each below the
        # per-source limit.
        busy = 0
        for i in range(9):
            for _ in range(15):
                t = ctx.wrap_socket(_raw_connect(port, f"127.0.0.{10 + i}"))
                t.sendall(b"P")  # the first byte: the slot is held 10 s
                held.append(t)
        wait_for(lambda: "join slots full" in ca.log(), 10,
                 "the join slots to fill")
        for t in held:
            t.settimeout(0.001)
            try:
                data = t.recv(4096)
            except (ssl.SSLWantReadError, TimeoutError, OSError):
                continue
            if data.startswith(b"HTTP/1.1 503 "):
                assert b"CA busy" in data
                busy += 1
        assert busy >= 1
        # The joiner renews over mTLS every second or so (certTTL 2s).
        before = j.log().count("renewed over mTLS")
        wait_for(lambda: j.log().count("renewed over mTLS") > before, 8,
                 "a renewal while the join slots are full")
    finally:
        for t in held:
            t.close()


def test_join_and_renew_by_name_through_dns_nameservers(nodes, tmp_path):
    """A CA address given by name (ca.test, which no system resolver
    knows) is resolved through dns.nameservers, for the join at start and
    for renewals on the control loop alike (issue 13 item 3)."""
    from test_dns import DNSServer
    dns = DNSServer(ttl=30)
    try:
        dns.records["ca.test"] = ["127.0.0.1"]
        ca = ca_node(nodes, tmp_path).start()
        url = ca.ca_url.replace("127.0.0.1", "ca.test")
        j = nodes("j1", f"{{dir: {tmp_path / 'j1-state'}, certTTL: 6s}}",
                  node_yaml=("node: {namespace: foo, serviceAccount: bar}\n"
                             f"dns: {{nameservers: [\"127.0.0.1:{dns.port}\"]}}\n"),
                  args=["--join", url, "--token", token(ca)]).start()
        assert "issued by joining" in j.log(), j.log()
        joined = len(dns.queries)
        assert ("ca.test", 1) in dns.queries
        wait_for(lambda: "renewed over mTLS" in j.log(), 15, "a renewal")
        assert len(dns.queries) > joined, "the renewal did not ask the " \
            "configured nameserver"
    finally:
        dns.stop()
