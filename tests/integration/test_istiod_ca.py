"""strait's mesh certificate from istiod (ca.istiod): a grpcio stand-in
for istiod's CA (istiod_ca.py) checks the CreateCertificate call strait
makes, strait serves an ISTIO_MUTUAL Gateway with the certificate (checked
with openssl), renews it at half life with the token re-read, and says
clearly what is wrong when istiod refuses the token, its certificate does
not verify, the token has expired, or istiod is not there."""
import signal
import socket
import ssl
import subprocess

import grpc
import pytest

from conftest import STRAIT, Strait, free_port, responder, wait_for
from istiod_ca import IstiodCA, sa_token

SPIFFE = "spiffe://cluster.local/ns/istio-system/sa/strait"

GATEWAY = """apiVersion: networking.istio.io/v1
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
"""


@pytest.fixture
def istiod(tmp_path):
    d = tmp_path / "istiod"
    d.mkdir()
    s = IstiodCA(str(d))
    yield s
    s.stop()


class Pod(Strait):
    """A strait that gets its certificate from the stand-in."""

    def __init__(self, tmp_path, istiod, cert_ttl="1h", gw_port=None,
                 echo_port=None, root=None, address=None, start_timeout="0s"):
        self.token_file = tmp_path / "istio-token"
        conf = tmp_path / "conf"
        conf.mkdir(exist_ok=True)
        if gw_port is not None:
            (conf / "gw.yaml").write_text(
                GATEWAY.format(port=gw_port, echo=echo_port))
        extra = (
            "trustDomain: cluster.local\n"
            "node: {namespace: istio-system, serviceAccount: strait}\n"
            f"config: {{dir: {conf}}}\n"
            f"ca:\n  dir: {tmp_path / 'ca'}\n  certTTL: {cert_ttl}\n"
            "  istiod:\n"
            f"    address: {address or istiod.address()}\n"
            f"    rootCert: {root or istiod.root_file}\n"
            f"    token: {self.token_file}\n"
            "    clusterID: cluster-a\n"
            "    serverName: istiod.istio-system.svc\n"
            f"    startTimeout: {start_timeout}\n")
        super().__init__(tmp_path, "", workers=1, extra=extra)

    def set_token(self, text):
        """Replaces the token file in one rename, as the kubelet's atomic
        writer swaps it: strait never reads half a token."""
        tmp = self.token_file.with_suffix(".tmp")
        tmp.write_text(text)
        tmp.replace(self.token_file)

    def start_and_exit_code(self):
        """Starts strait expecting it to stop at start-up; its exit code."""
        self.logf = open(self.log_path, "ab")
        self.proc = subprocess.Popen([STRAIT, "run", "-c", str(self.config)],
                                     stdout=self.logf, stderr=self.logf)
        code = self.proc.wait(timeout=60)
        self.logf.close()
        return code


@pytest.fixture
def pods(tmp_path):
    made = []

    def make(istiod, name="pod", **kw):
        d = tmp_path / name
        d.mkdir()
        p = Pod(d, istiod, **kw)
        made.append(p)
        return p

    yield make
    for p in made:
        code = None
        if p.proc is not None and p.proc.poll() is None:
            code = p.stop(timeout=30)
        p.kill()
        p.assert_clean_log()
        if code is not None:
            assert code == 0, p.log()


def presented_cert(port, client):
    """The certificate the ISTIO_MUTUAL server presents to a client with
    the mesh certificate client = (cert, key, root): openssl's reading of
    it (serial, SAN) and the HTTP status line of one request."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.load_verify_locations(client[2])
    ctx.load_cert_chain(client[0], client[1])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        with ctx.wrap_socket(s) as t:
            der = t.getpeercert(binary_form=True)
            t.sendall(b"GET /x HTTP/1.1\r\nhost: a\r\nconnection: close\r\n\r\n")
            data = b""
            while True:
                d = t.recv(4096)
                if not d:
                    break
                data += d
    out = subprocess.run(
        ["openssl", "x509", "-inform", "DER", "-noout", "-serial", "-ext",
         "subjectAltName"], input=der, capture_output=True, check=True).stdout
    text = out.decode()
    serial = int(text.split("serial=")[1].split()[0], 16)
    return serial, text, data.split(b"\r\n")[0]


def test_certificate_from_istiod_serves_istio_mutual_and_renews(
        tmp_path, istiod, pods, upstream_factory):
    up = upstream_factory(responder(lambda head: b"echo"))
    gw = free_port()
    pod = pods(istiod, cert_ttl="4s", gw_port=gw, echo_port=up.port)
    first = sa_token()
    pod.set_token(first + "\n")
    pod.start()

    # What strait sent: the token as read, ClusterID, the SPIFFE SAN in
    # a CSR whose signature verifies, the validity asked for (certTTL).
    r0 = istiod.requests[0]
    assert r0["authorization"] == "Bearer " + first
    assert r0["clusterid"] == "cluster-a"
    assert r0["sans"] == [SPIFFE]
    assert r0["csr_ok"]
    assert r0["validity"] == 4
    assert not r0["has_metadata"]

    # The kubelet rotates the token: the next call reads the new one.
    second = sa_token(extra={"jti": "rotated"})
    pod.set_token(second)

    client = (*istiod.root.leaf_files(
        str(tmp_path), "caller",
        uris=["spiffe://cluster.local/ns/team/sa/caller"]), istiod.root_file)
    serial, text, status = presented_cert(gw, client)
    assert SPIFFE in text, text
    assert serial in [r["serial"] for r in istiod.requests]
    assert status == b"HTTP/1.1 200 OK"

    # Renewal at half life (4 s: within 1.6-2 s of issue), a new key and
    # certificate each time; the server presents the new one.
    # (A renewal may have started before the rotation on a slow machine:
    # wait for one that carries the new token.)
    wait_for(lambda: any(r["authorization"] == "Bearer " + second
                         for r in istiod.requests[1:]), 15,
             "a renewal with the rotated token")
    assert {r["authorization"] for r in istiod.requests} == \
        {"Bearer " + first, "Bearer " + second}
    assert all(r["sans"] == [SPIFFE] for r in istiod.requests)
    # istiod has the request; strait logs once it has the answer.
    wait_for(lambda: "renewed by istiod" in pod.log(), 15,
             "the renewal logged")

    def presents_renewed():
        s, _, _ = presented_cert(gw, client)
        return s in [r["serial"] for r in istiod.requests[1:]]
    wait_for(presents_renewed, 15, "the renewed certificate in use")
    assert pod.stats()["ca.identity_renew_failures"] == 0


def test_root_sent_apart_in_root_cert(istiod, pods):
    # Newer istiod sends [leaf] in cert_chain and the roots in root_cert.
    istiod.roots_apart = True
    pod = pods(istiod)
    pod.set_token(sa_token())
    pod.start()
    assert "issued by istiod" in pod.log()


def test_wrong_audience_is_refused_by_istiod_with_its_message(istiod, pods):
    pod = pods(istiod)
    pod.set_token(sa_token(aud=["kubernetes"]))
    assert pod.start_and_exit_code() == 3
    log = pod.log()
    assert ("istiod refused the certificate request: UNAUTHENTICATED: "
            "request authenticate failure (the token's audience does not "
            "include istio-ca") in log, log
    assert istiod.requests[0]["refused"] == "request authenticate failure"


def test_untrusted_istiod_names_the_root_file(tmp_path, istiod, pods):
    other = IstiodCA(str(tmp_path))  # another root, same name
    try:
        pod = pods(istiod, root=other.root_file)
        pod.set_token(sa_token())
        assert pod.start_and_exit_code() == 3
    finally:
        other.stop()
    log = pod.log()
    assert (f"is not trusted: its certificate does not verify against the "
            f"roots in {other.root_file} for istiod.istio-system.svc") in log
    assert istiod.count() == 0


def test_expired_token_is_not_sent(istiod, pods):
    pod = pods(istiod)
    pod.set_token(sa_token(exp_in=-120))
    assert pod.start_and_exit_code() == 3
    log = pod.log()
    assert f"the token in {pod.token_file} expired 12" in log, log
    assert "not sent to istiod" in log
    assert istiod.count() == 0


def test_istiod_unavailable(istiod, pods):
    # startTimeout 0s: not waited for at all.
    pod = pods(istiod, address=f"127.0.0.1:{free_port()}")
    pod.set_token(sa_token())
    assert pod.start_and_exit_code() == 3
    assert "is unavailable: connect: Connection refused (waited for it up " \
        "to ca.istiod.startTimeout)" in pod.log()
    assert "trying again" not in pod.log()


def test_start_waits_for_istiod_within_start_timeout(tmp_path, pods):
    """istiod comes up after strait: the start waits (1 s, 2 s, ...) and
    takes the certificate; with a start timeout shorter than the first
    wait it gives up at once."""
    d = tmp_path / "late"
    d.mkdir()
    late = IstiodCA(str(d), serve=False)
    pod = pods(late, start_timeout="20s")
    pod.set_token(sa_token())
    try:
        pod.start(wait=False)
        wait_for(lambda: "trying again in 1000 ms" in pod.log(), 15,
                 "strait to wait for istiod")
        assert "is unavailable: connect: Connection refused" in pod.log()
        late.serve()
        wait_for(pod.ready_or_dead, 20, "strait to become ready")
        assert "issued by istiod" in pod.log()
        assert late.count() >= 1
    finally:
        late.stop()
    # One past: a start timeout shorter than the first wait (1 s).
    quick = pods(late, name="quick", address=f"127.0.0.1:{free_port()}",
                 start_timeout="999ms")
    quick.set_token(sa_token())
    assert quick.start_and_exit_code() == 3
    assert "(waited for it up to ca.istiod.startTimeout)" in quick.log()
    assert "trying again" not in quick.log()


def test_failing_renewal_on_stats_and_readiness_then_recovery(istiod, pods):
    pod = pods(istiod, cert_ttl="3s")
    pod.set_token(sa_token())
    pod.start()
    istiod.refuse = (grpc.StatusCode.UNAUTHENTICATED,
                     "request authenticate failure")
    wait_for(lambda: pod.stats().get("ca.identity_renew_failures", 0) >= 1,
             15, "a failed renewal on /stats")
    st = pod.stats()
    assert "UNAUTHENTICATED: request authenticate failure" in \
        st["ca.identity_renew_error"]
    code, body, _ = pod.get("/healthz/ready")
    assert "IDENTITY RENEWAL FAILING: istiod refused the certificate " \
        "request: UNAUTHENTICATED" in body or "IDENTITY EXPIRED" in body, body
    # Past notAfter: not ready.
    wait_for(lambda: pod.get("/healthz/ready")[0] == 503, 15,
             "readiness 503 once the certificate expired")
    assert "IDENTITY EXPIRED" in pod.get("/healthz/ready")[1]
    _, prom, _ = pod.get("/stats/prometheus")
    assert "strait_ca_identity_expired 1" in prom
    istiod.refuse = None
    wait_for(lambda: pod.get("/healthz/ready")[0] == 200, 30,
             "ready again after a successful renewal")
    assert pod.stats()["ca.identity_renew_failures"] == 0


def test_expired_token_at_renewal_is_reported_not_sent(istiod, pods):
    pod = pods(istiod, cert_ttl="3s")
    pod.set_token(sa_token())
    pod.start()
    n = istiod.count()
    pod.set_token(sa_token(exp_in=-30))
    wait_for(lambda: pod.stats().get("ca.identity_renew_failures", 0) >= 1,
             15, "a failed renewal on /stats")
    err = pod.stats()["ca.identity_renew_error"]
    assert f"the token in {pod.token_file} expired" in err, err
    assert istiod.count() == n  # never sent
    code, body, _ = pod.get("/healthz/ready")
    assert "expired" in body and "not sent to istiod" in body, body


def test_sigterm_ends_the_wait_for_istiod(istiod, pods):
    pod = pods(istiod, address=f"127.0.0.1:{free_port()}",
               start_timeout="1h")
    pod.set_token(sa_token())
    pod.start(wait=False)
    wait_for(lambda: "trying again" in pod.log(), 15,
             "strait to wait for istiod")
    pod.signal(signal.SIGTERM)
    assert pod.proc.wait(timeout=20) == 3
    assert "stopped by a signal while waiting for istiod" in pod.log()


def test_token_file_one_past_its_limit(istiod, pods):
    # 64 KiB of token is read (and then judged); one byte more is refused
    # before anything is sent.
    pod = pods(istiod)
    pod.set_token("a." + "b" * (65536 - 4) + ".c")
    assert pod.start_and_exit_code() == 3
    assert f"the token in {pod.token_file} is not a JWT" in pod.log()
    big = pods(istiod, name="big")
    big.set_token("a." + "b" * (65536 - 3) + ".c")
    assert big.start_and_exit_code() == 3
    assert f"the token in {big.token_file} is larger than 65536 bytes" in \
        big.log()
    assert istiod.count() == 0


UPSTREAM = """apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {{name: plain-in, namespace: istio-system}}
spec:
  selector: {{}}
  servers:
  - port: {{number: {port}, name: http, protocol: HTTP}}
    bind: 127.0.0.1
    hosts: ["*"]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: meshsvc, namespace: istio-system}}
spec:
  hosts: [meshsvc.internal]
  location: MESH_INTERNAL
  resolution: STATIC
  ports: [{{number: {up}, name: http, protocol: HTTP}}]
  endpoints: [{{address: 127.0.0.1}}]
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {{name: meshsvc, namespace: istio-system}}
spec:
  host: meshsvc.internal
  trafficPolicy:
    tls:
      mode: ISTIO_MUTUAL
      subjectAltNames: [spiffe://cluster.local/ns/team/sa/meshsvc]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: to-meshsvc, namespace: istio-system}}
spec:
  hosts: ["*"]
  gateways: [plain-in]
  http:
  - route: [{{destination: {{host: meshsvc.internal}}}}]
"""


def tls_responder(cert, key, body):
    """An upstream handler: TLS with cert (no client certificate asked),
    then HTTP/1.1 answered 200 with body."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    inner = responder(lambda head: body)

    def handler(c):
        try:
            t = ctx.wrap_socket(c, server_side=True)
        except (ssl.SSLError, OSError):
            return
        inner(t)
    return handler


def mesh_status(port, client):
    """The status line from the ISTIO_MUTUAL server for a client with
    client = (cert, key, roots), or the TLS error's class name."""
    try:
        return presented_cert(port, client)[2]
    except (ssl.SSLError, OSError) as e:
        return type(e).__name__


def http_status(port):
    p = subprocess.run(["curl", "-sS", "--max-time", "10", "-o", "/dev/null",
                        "-w", "%{http_code}", f"http://127.0.0.1:{port}/"],
                       capture_output=True, text=True, timeout=30)
    return p.stdout


def test_root_rotation_is_trusted_without_a_reload(tmp_path, istiod, pods,
                                                    upstream_factory):
    """The mesh root rotates (the istio-ca-root-cert ConfigMap, mounted as
    ca.istiod.rootCert, gets the old and the new root, then the new one
    only): the ISTIO_MUTUAL Gateway server accepts a client under the new
    root, and an ISTIO_MUTUAL upstream under the new root verifies, at
    once and without a reload; a file that does not load keeps the roots
    in effect; the old root, once gone from the file, is no longer
    trusted."""
    from istiod_ca import TestCA, pem
    new = TestCA("istiod rotated root")
    echo = upstream_factory(responder(lambda head: b"echo"))
    ucert, ukey = new.leaf_files(
        str(tmp_path), "meshsvc",
        uris=["spiffe://cluster.local/ns/team/sa/meshsvc"])
    up = upstream_factory(tls_responder(ucert, ukey, b"from-new-root"))
    gw, plain = free_port(), free_port()
    # Files a ConfigMap mount would hold: the root file in its own
    # directory, replaced in one rename.
    rdir = tmp_path / "istio-ca-root-cert"
    rdir.mkdir()
    root_file = rdir / "root-cert.pem"
    old_pem = pem(istiod.root.cert)

    def write_roots(text):
        tmp = rdir / ".root-cert.pem.tmp"
        tmp.write_text(text)
        tmp.replace(root_file)
    write_roots(old_pem)
    pod = pods(istiod, gw_port=gw, echo_port=echo.port, root=root_file)
    (tmp_path / "pod" / "conf" / "up.yaml").write_text(
        UPSTREAM.format(port=plain, up=up.port))
    pod.set_token(sa_token())
    pod.start()
    both = tmp_path / "both.pem"
    both.write_text(old_pem + pem(new.cert))
    old_client = (*istiod.root.leaf_files(
        str(tmp_path), "old-caller",
        uris=["spiffe://cluster.local/ns/team/sa/caller"]), str(both))
    new_client = (*new.leaf_files(
        str(tmp_path), "new-caller",
        uris=["spiffe://cluster.local/ns/team/sa/caller"]), str(both))
    assert mesh_status(gw, old_client) == b"HTTP/1.1 200 OK"
    assert mesh_status(gw, new_client) != b"HTTP/1.1 200 OK"
    assert http_status(plain) == "503"
    reloads = pod.stats()["server.reloads_ok"]

    # The ConfigMap gets the new root beside the old one.
    write_roots(old_pem + pem(new.cert))
    wait_for(lambda: "(2 root(s)" in pod.log(), 10, "the new roots taken")
    wait_for(lambda: mesh_status(gw, new_client) == b"HTTP/1.1 200 OK", 10,
             "a client under the new root accepted")
    assert mesh_status(gw, old_client) == b"HTTP/1.1 200 OK"
    wait_for(lambda: http_status(plain) == "200", 10,
             "the upstream under the new root verified")

    # A damaged file: logged, the roots in effect stay.
    write_roots("-----BEGIN CERTIFICATE-----\nnot base64\n")
    wait_for(lambda: "do not load, keeping the 2 root(s) in effect"
             in pod.log(), 10, "the damaged file refused")
    assert mesh_status(gw, new_client) == b"HTTP/1.1 200 OK"
    assert http_status(plain) == "200"
    # One byte over the file limit (256 KiB): refused the same way.
    text = pem(new.cert)
    write_roots(text + "#" * (256 * 1024 + 1 - len(text.encode())))
    wait_for(lambda: pod.log().count("do not load, keeping the 2 root(s)")
             == 2, 10, "the file over the limit refused")
    assert "not a regular file of at most 256 KiB" in pod.log()
    assert mesh_status(gw, old_client) == b"HTTP/1.1 200 OK"

    # The old root leaves the bundle: its clients are refused.
    write_roots(pem(new.cert))
    wait_for(lambda: "(1 root(s)" in pod.log(), 10, "the old root dropped")
    wait_for(lambda: mesh_status(gw, old_client) != b"HTTP/1.1 200 OK", 10,
             "a client under the old root refused")
    assert mesh_status(gw, new_client) == b"HTTP/1.1 200 OK"
    assert http_status(plain) == "200"
    # None of it was a reload.
    assert pod.stats()["server.reloads_ok"] == reloads
