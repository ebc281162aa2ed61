"""strait's CA serves Istio's gRPC certificate API beside its JSON API on
the same address (ALPN h2): a grpcio client built from
tests/integration/proto/ca.proto gets SPIFFE certificates for the
identity a Kubernetes service-account token or a join token proves, and
is refused, with the gRPC status and message, when the CSR asks for
another identity, the token is for another audience or expired, there is
no credential, the request carries impersonation metadata, or the
message is over the size limit."""
import subprocess

import grpc
import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec

from conftest import STRAIT, Strait, finish_strait, free_port, wait_for
from istiod_ca import METHOD, Issuer, ca_pb2, csr_pem

TD = "example.org"


@pytest.fixture
def ca(tmp_path):
    issuer = Issuer()
    jwks = tmp_path / "jwks.json"
    jwks.write_text(issuer.jwks())
    port = free_port()
    s = Strait(tmp_path, "", workers=1, extra=(
        f"trustDomain: {TD}\n"
        f"ca:\n  enabled: true\n  dir: {tmp_path / 'ca'}\n"
        f"  address: 127.0.0.1:{port}\n"
        "  serviceAccountTokens:\n"
        f"    issuer: {issuer.iss}\n"
        f"    jwksFile: {jwks}\n"))
    s.start()
    s.port = port
    s.issuer = issuer
    s.root = (tmp_path / "ca" / "root-cert.pem").read_bytes()
    yield s
    finish_strait(s)


def stub(ca):
    pb = ca_pb2()
    ch = grpc.secure_channel(
        f"127.0.0.1:{ca.port}", grpc.ssl_channel_credentials(ca.root),
        options=[("grpc.ssl_target_name_override",
                  "istiod.istio-system.svc")])
    call = ch.unary_unary(
        METHOD, request_serializer=pb.IstioCertificateRequest.SerializeToString,
        response_deserializer=pb.IstioCertificateResponse.FromString)
    return ch, call, pb


def create(ca, token=None, uris=(), validity=3600, metadata=None, csr=None):
    ch, call, pb = stub(ca)
    key = ec.generate_private_key(ec.SECP256R1())
    req = pb.IstioCertificateRequest(
        csr=csr if csr is not None else csr_pem(key, uris),
        validity_duration=validity)
    if metadata is not None:
        req.metadata.update(metadata)
    md = [("authorization", "Bearer " + token)] if token else []
    try:
        return call(req, metadata=md, timeout=10)
    finally:
        ch.close()


def refused(ca, **kw):
    with pytest.raises(grpc.RpcError) as e:
        create(ca, **kw)
    return e.value.code(), e.value.details()


def openssl_text(pem_text):
    return subprocess.run(["openssl", "x509", "-noout", "-text"],
                          input=pem_text.encode(), capture_output=True,
                          check=True).stdout.decode()


def test_service_account_token_gets_its_spiffe_certificate(ca, tmp_path):
    tok = ca.issuer.token("web", "frontend")
    want = f"spiffe://{TD}/ns/web/sa/frontend"
    resp = create(ca, token=tok, uris=[want], validity=600)
    chain = list(resp.cert_chain)
    assert len(chain) == 2
    text = openssl_text(chain[0])
    assert f"URI:{want}" in text
    leaf = x509.load_pem_x509_certificate(chain[0].encode())
    assert (leaf.not_valid_after - leaf.not_valid_before).total_seconds() == 600
    # The chain verifies against the CA's root, checked by openssl.
    (tmp_path / "leaf.pem").write_text(chain[0])
    (tmp_path / "root.pem").write_bytes(ca.root)
    v = subprocess.run(["openssl", "verify", "-CAfile", str(tmp_path / "root.pem"),
                        str(tmp_path / "leaf.pem")], capture_output=True,
                       text=True)
    assert v.returncode == 0, v.stderr
    # A CSR that names no identity gets the token's.
    resp = create(ca, token=tok)
    assert f"URI:{want}" in openssl_text(resp.cert_chain[0])
    assert "authenticated by service-account token, gRPC API" in ca.log()
    assert "strait_ca" not in ca.log()  # no stray metric names in the log


def test_csr_for_another_identity_is_permission_denied(ca):
    tok = ca.issuer.token("web", "frontend")
    code, msg = refused(ca, token=tok,
                        uris=[f"spiffe://{TD}/ns/web/sa/admin"])
    assert code == grpc.StatusCode.PERMISSION_DENIED
    assert msg == (f"the CSR asks for spiffe://{TD}/ns/web/sa/admin, but the "
                   f"caller is authenticated as spiffe://{TD}/ns/web/sa/frontend")


def test_token_refusals_are_unauthenticated(ca):
    code, msg = refused(ca, token=ca.issuer.token("web", "f",
                                                  aud=["kubernetes"]))
    assert code == grpc.StatusCode.UNAUTHENTICATED
    assert "Audiences in Jwt are not allowed" in msg, msg
    code, msg = refused(ca, token=ca.issuer.token("web", "f", exp_in=-600))
    assert code == grpc.StatusCode.UNAUTHENTICATED
    assert "Jwt is expired" in msg, msg
    other = Issuer()  # same issuer name, another key
    code, msg = refused(ca, token=other.token("web", "f"))
    assert code == grpc.StatusCode.UNAUTHENTICATED
    assert "request authenticate failure" in msg, msg
    code, msg = refused(ca)
    assert code == grpc.StatusCode.UNAUTHENTICATED
    assert msg.startswith("no credentials"), msg


def test_join_token_over_grpc_is_single_use(ca, tmp_path):
    out = subprocess.run([STRAIT, "ca", "token", "create", "-c",
                          str(ca.config), "--namespace", "edge",
                          "--service-account", "gw"],
                         capture_output=True, text=True, check=True)
    token = out.stdout.strip().splitlines()[-1]
    want = f"spiffe://{TD}/ns/edge/sa/gw"
    # Asking for another identity is refused before the token is spent.
    code, msg = refused(ca, token=token, uris=[f"spiffe://{TD}/ns/edge/sa/x"])
    assert code == grpc.StatusCode.PERMISSION_DENIED
    resp = create(ca, token=token, uris=[want])
    assert f"URI:{want}" in openssl_text(resp.cert_chain[0])
    code, msg = refused(ca, token=token, uris=[want])
    assert code == grpc.StatusCode.UNAUTHENTICATED
    assert "already used" in msg, msg


def test_impersonation_metadata_is_refused(ca):
    tok = ca.issuer.token("web", "frontend")
    code, msg = refused(ca, token=tok,
                        metadata={"ImpersonatedIdentity": "spiffe://x/ns/a/sa/b"})
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert "impersonation" in msg


def test_message_one_past_the_limit(ca):
    # A 64 KiB message is the limit (as the JSON API's body); the csr
    # field's tag and length take 4 bytes of it (validity 0 takes none).
    tok = ca.issuer.token("web", "frontend")
    code, msg = refused(ca, token=tok, csr="A" * (65536 - 3), validity=0)
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED, msg
    assert msg.startswith("request over the CA's limits (message 65536")
    code, msg = refused(ca, token=tok, csr="A" * (65536 - 4), validity=0)
    assert code == grpc.StatusCode.INVALID_ARGUMENT, msg  # read, not a CSR


def test_bad_jwks_file_stops_the_start(tmp_path):
    jwks = tmp_path / "jwks.json"
    jwks.write_text("{}")
    s = Strait(tmp_path, "", workers=1, extra=(
        f"ca:\n  enabled: true\n  dir: {tmp_path / 'ca'}\n"
        f"  address: 127.0.0.1:{free_port()}\n"
        "  serviceAccountTokens: {issuer: https://k8s, "
        f"jwksFile: {jwks}}}\n"))
    p = subprocess.run([STRAIT, "run", "-c", str(s.config)],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 3
    assert f"ca.serviceAccountTokens.jwksFile {jwks}:" in p.stderr, p.stderr


def test_calls_per_connection_and_streams_limits(ca):
    """32 calls on one HTTP/2 connection, 4 at once (the server's
    SETTINGS); GOAWAY right after the 32nd, so a 33rd needs a new
    connection. grpcio reconnects on its own,
    so a channel making 40 calls sees none fail."""
    import socket
    import ssl

    import h2.config
    import h2.connection
    import h2.events

    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.set_alpn_protocols(["h2"])
    body = b"\x00\x00\x00\x00\x03\x0a\x01A"  # csr "A": not a CSR
    with socket.create_connection(("127.0.0.1", ca.port), timeout=10) as raw:
        with ctx.wrap_socket(raw) as s:
            assert s.selected_alpn_protocol() == "h2"
            c = h2.connection.H2Connection(
                h2.config.H2Configuration(client_side=True))
            c.initiate_connection()
            s.sendall(c.data_to_send())
            statuses, goaway, max_streams = {}, None, None
            for i in range(32):
                sid = c.get_next_available_stream_id()
                c.send_headers(sid, [
                    (":method", "POST"), (":scheme", "https"),
                    (":path", METHOD), (":authority", "ca"),
                    ("content-type", "application/grpc"), ("te", "trailers")])
                c.send_data(sid, body, end_stream=True)
                s.sendall(c.data_to_send())
                while sid not in statuses or (i == 31 and goaway is None):
                    data = s.recv(65536)
                    if not data:
                        break
                    for ev in c.receive_data(data):
                        if isinstance(ev, h2.events.RemoteSettingsChanged):
                            m = ev.changed_settings.get(
                                h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS)
                            if m is not None:
                                max_streams = m.new_value
                        elif isinstance(ev, h2.events.ResponseReceived):
                            hs = dict(ev.headers)
                            statuses[ev.stream_id] = hs.get(b"grpc-status")
                        elif isinstance(ev, h2.events.ConnectionTerminated):
                            goaway = ev.last_stream_id
                    s.sendall(c.data_to_send())
                # GOAWAY only after the 32nd call.
                assert goaway is None or i == 31
    assert max_streams == 4
    assert len(statuses) == 32
    assert set(statuses.values()) == {b"3"}  # INVALID_ARGUMENT, answered
    assert goaway == 63  # the 32nd stream
    # grpcio: 40 calls on one channel, none lost to the GOAWAYs.
    ch, call, pb = stub(ca)
    tok = ca.issuer.token("web", "frontend")
    key = ec.generate_private_key(ec.SECP256R1())
    req = pb.IstioCertificateRequest(csr=csr_pem(key))
    try:
        for _ in range(40):
            call(req, metadata=[("authorization", "Bearer " + tok)], timeout=10)
    finally:
        ch.close()


def test_strait_pod_gets_its_certificate_from_a_strait_ca(ca, tmp_path):
    """Both ends are strait: a node with ca.istiod pointed at a strait CA
    (the CA's root as rootCert, a service-account token of the CA's
    issuer) gets spiffe://example.org/ns/istio-system/sa/strait and renews
    it over the gRPC API."""
    d = tmp_path / "pod"
    d.mkdir()
    token = d / "istio-token"
    token.write_text(ca.issuer.token("istio-system", "strait"))
    root = d / "root-cert.pem"
    root.write_bytes(ca.root)
    pod = Strait(d, "", workers=1, extra=(
        f"trustDomain: {TD}\n"
        "node: {namespace: istio-system, serviceAccount: strait}\n"
        f"ca:\n  dir: {d / 'ca'}\n  certTTL: 3s\n"
        "  istiod:\n"
        f"    address: 127.0.0.1:{ca.port}\n"
        f"    rootCert: {root}\n"
        f"    token: {token}\n"
        "    serverName: istiod.istio-system.svc\n"))
    try:
        pod.start()
        assert f"certificate for spiffe://{TD}/ns/istio-system/sa/strait " \
            "issued by istiod" in pod.log()
        wait_for(lambda: "renewed by istiod" in pod.log(), 15, "a renewal")
        assert pod.stats()["ca.identity_renew_failures"] == 0
        assert ca.log().count("authenticated by service-account token, "
                              "gRPC API") >= 2
    finally:
        finish_strait(pod)


def test_authorization_one_past_its_limit(ca):
    # The authorization value is kept up to 32 KiB ("Bearer " included).
    code, msg = refused(ca, token="x" * (32768 - 7))
    assert code == grpc.StatusCode.UNAUTHENTICATED, msg
    code, msg = refused(ca, token="x" * (32768 - 6))
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED, msg
    assert "authorization 32768 bytes" in msg


def h2_exchange(ca, headers, body):
    """One request on a fresh h2 connection: the response headers (the
    trailers-only block included) as a dict of bytes."""
    import socket
    import ssl

    import h2.config
    import h2.connection
    import h2.events

    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.set_alpn_protocols(["h2"])
    got = {}
    with socket.create_connection(("127.0.0.1", ca.port), timeout=10) as raw:
        with ctx.wrap_socket(raw) as s:
            c = h2.connection.H2Connection(
                h2.config.H2Configuration(client_side=True))
            c.initiate_connection()
            c.send_headers(1, headers)
            c.send_data(1, body, end_stream=True)
            s.sendall(c.data_to_send())
            done = False
            while not done:
                data = s.recv(65536)
                if not data:
                    break
                for ev in c.receive_data(data):
                    if isinstance(ev, (h2.events.ResponseReceived,
                                       h2.events.TrailersReceived)):
                        got.update(dict(ev.headers))
                    if isinstance(ev, h2.events.StreamEnded):
                        done = True
                s.sendall(c.data_to_send())
    return got


def test_not_grpc_and_unknown_method(ca):
    base = [(":method", "POST"), (":scheme", "https"), (":authority", "ca")]
    body = b"\x00\x00\x00\x00\x03\x0a\x01A"
    got = h2_exchange(ca, base + [(":path", METHOD),
                                  ("content-type", "application/json")], body)
    assert got[b":status"] == b"415"
    got = h2_exchange(ca, base + [
        (":path", "/istio.v1.auth.IstioCertificateService/Other"),
        ("content-type", "application/grpc"), ("te", "trailers")], body)
    assert got[b":status"] == b"200"
    assert got[b"grpc-status"] == b"12"
    assert got[b"grpc-message"].startswith(b"unknown method")
    # A compressed message: no grpc-encoding was agreed.
    got = h2_exchange(ca, base + [(":path", METHOD),
                                  ("content-type", "application/grpc")],
                      b"\x01" + body[1:])
    assert got[b"grpc-status"] == b"12"
    assert b"compressed" in got[b"grpc-message"]
    assert "content-type is not application/grpc (415)" in ca.log()


def test_busy_grpc_connections_get_a_goaway(ca):
    """The join slots (128 connections without a client certificate of
    this CA) are shared with the JSON API; an HTTP/2 connection past them
    gets the server preface and GOAWAY ENHANCE_YOUR_CALM "CA busy", not an
    HTTP/1.1 answer, and is closed. Each source stays under its 16."""
    import socket
    import ssl

    from test_ca import _raw_connect

    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.set_alpn_protocols(["h2"])
    held, busy = [], 0
    try:
        for i in range(9):
            for _ in range(15):
                t = ctx.wrap_socket(_raw_connect(ca.port, f"127.0.0.{30 + i}"))
                held.append(t)
        for t in held:
            data = b""
            t.settimeout(5)
            try:
                while True:
                    d = t.recv(4096)
                    if not d:
                        break
                    data += d
                    # A held connection only gets the server's SETTINGS.
                    if b"CA busy" not in data and len(data) >= 9:
                        break
            except (socket.timeout, ssl.SSLError, OSError):
                pass
            if b"CA busy" in data:
                # SETTINGS (type 4), then GOAWAY (type 7) with code 0xb.
                assert data[3] == 4 and data[12] == 7, data
                assert data[18 + 4:18 + 8] == b"\x00\x00\x00\x0b", data
                busy += 1
    finally:
        for t in held:
            t.close()
    assert busy == 135 - 128
    assert "join slots full" in ca.log()
