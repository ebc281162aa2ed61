"""RequestAuthentication at the gateway with AuthorizationPolicy's JWT
fields: tokens minted here (keys and signatures by the openssl command,
so no Python JWT library is needed), a good token passes and its claims
reach the upstream, a request without a token is left to authorization,
a bad token is 401 with WWW-Authenticate and Envoy's details in the log,
the token header is removed unless forwardOriginalToken, key rotation by
reload, and a bad key set never replaces the running one."""
import base64
import json
import os
import subprocess
import time

from conftest import STRAIT, responder, wait_for
from test_gateway import get, start_with_up
from test_grpc import grpc_backend  # noqa: F401 (a fixture)

ISS = "https://idp.test"


def b64u(b):
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


def openssl(*args, data=None):
    return subprocess.run(["openssl", *args], input=data, capture_output=True,
                          check=True, timeout=60).stdout


class Key:
    """A private key in a PEM file and its public JWK."""

    def __init__(self, path, kind, kid):
        self.path, self.kind, self.kid = str(path), kind, kid
        if kind == "RSA":
            openssl("genpkey", "-algorithm", "RSA", "-pkeyopt",
                    "rsa_keygen_bits:2048", "-out", self.path)
            mod = openssl("rsa", "-in", self.path, "-noout", "-modulus")
            n = bytes.fromhex(mod.decode().strip().split("=", 1)[1])
            self.jwk = {"kty": "RSA", "kid": kid, "use": "sig", "n": b64u(n),
                        "e": "AQAB"}
        else:
            openssl("genpkey", "-algorithm", "EC", "-pkeyopt",
                    "ec_paramgen_curve:P-256", "-out", self.path)
            der = openssl("pkey", "-in", self.path, "-pubout", "-outform",
                          "DER")
            point = der[-65:]  # 04 || x || y
            assert point[0] == 4
            self.jwk = {"kty": "EC", "kid": kid, "crv": "P-256",
                        "x": b64u(point[1:33]), "y": b64u(point[33:])}

    def sign(self, data):
        sig = openssl("dgst", "-sha256", "-sign", self.path, data=data)
        if self.kind == "RSA":
            return sig
        return ecdsa_raw(sig, 32)


def ecdsa_raw(der, size):
    """An ASN.1 ECDSA-Sig-Value as JWS wants it: r and s side by side."""
    assert der[0] == 0x30
    i = 2 if der[1] < 0x80 else 2 + (der[1] & 0x7f)
    out = b""
    for _ in range(2):
        assert der[i] == 0x02
        n = der[i + 1]
        v = der[i + 2:i + 2 + n].lstrip(b"\0")
        out += v.rjust(size, b"\0")
        i += 2 + n
    return out


def mint(key, claims, alg=None):
    alg = alg or ("RS256" if key.kind == "RSA" else "ES256")
    head = b64u(json.dumps({"alg": alg, "typ": "JWT", "kid": key.kid}).encode())
    body = b64u(json.dumps(claims).encode())
    signed = f"{head}.{body}".encode()
    return f"{head}.{body}.{b64u(key.sign(signed))}"


def claims(**kw):
    c = {"iss": ISS, "sub": "alice", "aud": "api",
         "exp": int(time.time()) + 600}
    c.update(kw)
    return c


def jwks(*keys):
    return json.dumps({"keys": [k.jwk for k in keys]})


ROUTES = """apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: vs, namespace: default}
spec:
  hosts: ["*"]
  gateways: [gw]
  http:
  - route: [{destination: {host: up.example.com}}]
"""

POLICY = """---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: api, namespace: istio-system}
spec:
  rules:
  - to: [{operation: {paths: ["/public*"]}}]
  - from: [{source: {requestPrincipals: ["https://idp.test/*"]}}]
    to: [{operation: {paths: ["/api*"]}}]
  - to: [{operation: {paths: ["/admin*"]}}]
    when: [{key: "request.auth.claims[groups]", values: [admin]}]
"""


def request_authn(keys_json, forward=False):
    return f"""---
apiVersion: security.istio.io/v1
kind: RequestAuthentication
metadata: {{name: idp, namespace: istio-system}}
spec:
  jwtRules:
  - issuer: {ISS}
    audiences: [api]
    jwks: '{keys_json}'
    forwardOriginalToken: {"true" if forward else "false"}
    outputClaimToHeaders: [{{header: x-jwt-sub, claim: sub}}]
"""


def bearer(tok):
    return {"authorization": f"Bearer {tok}"}


def rewrite(conf, text):
    tmp = conf / ".r.tmp"
    tmp.write_text(text)
    os.replace(tmp, conf / "r.yaml")


def test_request_authentication(strait_factory, tmp_path, upstream_factory):
    k1 = Key(tmp_path / "k1.pem", "RSA", "k1")
    k2 = Key(tmp_path / "k2.pem", "RSA", "k2")
    ec = Key(tmp_path / "ec.pem", "EC", "e1")
    # The upstream answers with the request head it received.
    up = upstream_factory(responder(lambda head: head))
    st, port = start_with_up(strait_factory, tmp_path, up.port,
                             ROUTES + POLICY + request_authn(jwks(k1, ec)))
    conf = tmp_path / "conf.d"
    base = (conf / "r.yaml").read_text()
    good = mint(k1, claims())

    # No token: authorization decides.
    assert get(port, "/public")[0] == 200
    status, _, body = get(port, "/api")
    assert (status, body) == (403, b"RBAC: access denied")

    # A good token: the principal is allowed; the token header is gone
    # upstream and the claim is there.
    status, _, body = get(port, "/api", bearer(good))
    assert status == 200, body
    assert b"\r\nx-jwt-sub: alice" in body
    assert b"authorization" not in body.lower()
    # ?access_token is read too, and removed like the header.
    status, _, body = get(port, "/api?a=1&access_token=" + good)
    assert status == 200, body
    assert b"GET /api?a=1 " in body
    assert good.encode() not in body

    # Every token must verify: a valid one does not carry a forged one,
    # nor one of an unknown issuer, in another location.
    unsigned = (b64u(b'{"alg":"none"}') + "." +
                b64u(json.dumps(claims(sub="root")).encode()) + ".")
    status, _, body = get(port, "/api?access_token=" + unsigned,
                          bearer(good))
    assert status == 401, body
    other_iss = mint(k1, claims(iss="https://evil.test"))
    status, _, body = get(port, "/api?access_token=" + good,
                          bearer(other_iss))
    assert (status, body) == (401, b"Jwt issuer is not configured")
    # Headers a token would write are never the client's.
    status, _, body = get(port, "/public", {"x-jwt-sub": "root"})
    assert status == 200, body
    assert b"x-jwt-sub" not in body.lower()

    # A bad token is 401 wherever it goes, even where no policy needs one.
    expired = mint(k1, claims(exp=int(time.time()) - 3600))
    status, headers, body = get(port, "/api/x?q=1", bearer(expired))
    assert (status, body) == (401, b"Jwt is expired")
    assert headers["www-authenticate"] == (
        f'Bearer realm="http://127.0.0.1:{port}/api/x", '
        'error="invalid_token"')
    assert get(port, "/public", bearer(expired))[0] == 401
    # An audience not allowed is 403, as Envoy's JwtAudienceNotAllowed.
    wrong_aud = mint(k1, claims(aud="other"))
    assert get(port, "/api", bearer(wrong_aud))[:3:2] == \
        (403, b"Audiences in Jwt are not allowed")
    forged = good[:-4] + ("AAAA" if not good.endswith("AAAA") else "BBBB")
    assert get(port, "/api", bearer(forged))[2] == b"Jwt verification fails"
    other_iss = mint(k1, claims(iss="https://evil.test"))
    assert get(port, "/api", bearer(other_iss))[2] == \
        b"Jwt issuer is not configured"
    unknown_key = mint(k2, claims())
    assert get(port, "/api", bearer(unknown_key))[0] == 401
    wait_for(lambda: "jwt_authn_access_denied{Jwt_is_expired}" in st.log(),
             10, "the JWT failure in the access log")
    s = st.stats()
    assert sum(v for k, v in s.items()
               if k.endswith(".http.jwt_authn.denied")) == 8
    assert "strait_http_jwt_denied_total" in st.get("/stats/prometheus")[1]

    # Claims-based: /admin needs groups to hold "admin" (ES256 token).
    assert get(port, "/admin", bearer(mint(ec, claims(groups=["dev"]))))[0] \
        == 403
    assert get(port, "/admin",
               bearer(mint(ec, claims(groups=["dev", "admin"]))))[0] == 200

    # Rotation by reload: k2 replaces k1, and the token is forwarded.
    rewrite(conf, base.replace(request_authn(jwks(k1, ec)),
                               request_authn(jwks(k2), forward=True)))
    wait_for(lambda: get(port, "/api", bearer(unknown_key))[0] == 200, 15,
             "the rotated key set")
    assert get(port, "/api", bearer(good))[0] == 401
    status, _, body = get(port, "/api", bearer(unknown_key))
    assert f"authorization: Bearer {unknown_key}".encode() in body

    # A bad key set is refused by `strait check` and by the running
    # gateway, which keeps the keys it has.
    bad = base.replace(request_authn(jwks(k1, ec)),
                       request_authn('{"keys": [{"kty": "EC", "crv": "P-256"'
                                     ', "x": "AQ", "y": "AQ"}]}'))
    (tmp_path / "bad.yaml").write_text(bad)
    r = subprocess.run([STRAIT, "check", str(tmp_path / "bad.yaml")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
    assert "RequestAuthentication istio-system/idp" in r.stdout
    assert "spec.jwtRules[0]: jwks: EC key" in r.stdout
    rewrite(conf, bad)
    wait_for(lambda: "EC key: bad or missing x or y" in st.log(), 15,
             "the refused key set in the log")
    assert get(port, "/api", bearer(unknown_key))[0] == 200


class JwksServer:
    """An HTTP (or, with cert, HTTPS) server on loopback that serves a
    JWKS document the test can change, or fails with 503; counts GETs."""

    def __init__(self, cert=None, chunked=False):
        import http.server
        import ssl
        import threading
        outer = self
        self.doc, self.fail, self.gets = b"{}", False, 0

        class H(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1" if chunked else "HTTP/1.0"

            def do_GET(self):
                outer.gets += 1
                if chunked:
                    # Chunks of 100 bytes, and the connection kept open
                    # despite "Connection: close": the client must see
                    # the last chunk as the end.
                    self.close_connection = False
                    self.send_response(200)
                    self.send_header("transfer-encoding", "chunked")
                    self.end_headers()
                    d = outer.doc
                    for i in range(0, len(d), 100):
                        part = d[i:i + 100]
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
                    self.wfile.write(b"0\r\n\r\n")
                    self.wfile.flush()
                    return
                if outer.fail:
                    self.send_response(503)
                    self.send_header("content-length", "0")
                    self.end_headers()
                    return
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(outer.doc)))
                self.end_headers()
                self.wfile.write(outer.doc)

            def log_message(self, *a):
                pass

        self.srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        if cert is not None:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(*cert)
            self.srv.socket = ctx.wrap_socket(self.srv.socket, server_side=True)
        self.port = self.srv.server_address[1]
        self.thread = threading.Thread(target=self.srv.serve_forever,
                                       daemon=True)
        self.thread.start()

    def stop(self):
        self.srv.shutdown()
        self.srv.server_close()
        self.thread.join(10)


def self_signed_ip(tmp_path):
    """A self-signed certificate for IP 127.0.0.1: the server's and, as
    jwt.jwksCaFile, the trust."""
    cert, key = tmp_path / "jwks.crt", tmp_path / "jwks.key"
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt",
            "ec_paramgen_curve:P-256", "-nodes", "-days", "2", "-subj",
            "/CN=jwks-test", "-addext", "subjectAltName=IP:127.0.0.1",
            "-keyout", str(key), "-out", str(cert))
    return str(cert), str(key)


def test_jwks_uri_fetched_refreshed_and_kept(strait_factory, tmp_path,
                                             upstream_factory):
    k1 = Key(tmp_path / "k1.pem", "RSA", "k1")
    k2 = Key(tmp_path / "k2.pem", "RSA", "k2")
    ec = Key(tmp_path / "ec.pem", "EC", "e1")
    cert = self_signed_ip(tmp_path)
    plain, tls = JwksServer(), JwksServer(cert)
    try:
        plain.doc = jwks(k1).encode()
        tls.doc = jwks(ec).encode()
        up = upstream_factory(responder(lambda head: b"ok"))
        conf = tmp_path / "conf.d"
        conf.mkdir()
        from conftest import free_port, http_gateway
        port = free_port()
        (conf / "r.yaml").write_text(
            http_gateway(port) + f"""apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: up, namespace: default}}
spec:
  hosts: [up.example.com]
  resolution: STATIC
  ports: [{{number: {up.port}, name: http, protocol: HTTP}}]
  endpoints: [{{address: 127.0.0.1}}]
---
""" + ROUTES + f"""---
apiVersion: security.istio.io/v1
kind: RequestAuthentication
metadata: {{name: remote, namespace: istio-system}}
spec:
  jwtRules:
  - issuer: {ISS}
    jwksUri: http://127.0.0.1:{plain.port}/jwks.json
  - issuer: https://tls.test
    jwksUri: https://127.0.0.1:{tls.port}/keys?v=1
    timeout: 2s
""")
        st = strait_factory(extra=(
            f"config: {{dir: \"{conf}\"}}\n"
            f"jwt: {{jwksRefresh: 1s, jwksCaFile: \"{cert[0]}\"}}\n")).start()
        t1, t2 = mint(k1, claims()), mint(k2, claims())
        t_tls = mint(ec, claims(iss="https://tls.test"))
        # Fetched in the background: tokens verify once the keys are in.
        wait_for(lambda: get(port, "/", bearer(t1))[0] == 200, 15,
                 "the http jwksUri fetched")
        wait_for(lambda: get(port, "/", bearer(t_tls))[0] == 200, 15,
                 "the https jwksUri fetched (verified with jwksCaFile)")
        assert get(port, "/", bearer(t2))[0] == 401
        # Refreshed: the document changes, the keys follow; a key strait
        # cannot use (P-521) is skipped, not fatal to the others.
        plain.doc = json.dumps({"keys": [
            {"kty": "EC", "crv": "P-521", "x": "AQ", "y": "AQ"},
            k2.jwk]}).encode()
        wait_for(lambda: get(port, "/", bearer(t2))[0] == 200, 15,
                 "the refreshed keys")
        assert "1 unusable key(s) skipped" in st.log()
        assert get(port, "/", bearer(t1))[0] == 401
        # A failing server and a broken document keep the last good keys.
        plain.fail = True
        seen = plain.gets
        wait_for(lambda: plain.gets >= seen + 2, 15, "failed refreshes")
        assert get(port, "/", bearer(t2))[0] == 200
        plain.fail = False
        plain.doc = b'{"keys": []}'
        seen = plain.gets
        wait_for(lambda: plain.gets >= seen + 2, 15, "refreshes")
        assert get(port, "/", bearer(t2))[0] == 200
        wait_for(lambda: "unusable JWKS" in st.log(), 10, "the bad JWKS logged")
        assert "answered HTTP 503" in st.log()
        # The server counts a GET as it answers; strait counts the
        # failure once it has read the answer: wait for that.
        wait_for(lambda: st.stats()["jwks.failures"] >= 4, 10,
                 "the four failures counted")
        s = st.stats()
        assert s["jwks.uris"] == 2
        # k1 and ec arrived, then k2.
        assert s["jwks.changes"] == 3
        wait_for(lambda: st.stats()["jwks.fetches"] >= plain.gets, 10,
                 "every answered fetch counted")
        # strait check warns about the plain http jwksUri, and only it.
        r = subprocess.run([STRAIT, "check", str(conf / "r.yaml")],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stdout + r.stderr
        out = r.stdout + r.stderr
        assert f"jwksUri 'http://127.0.0.1:{plain.port}/jwks.json' is " \
            "plain http" in out
        assert out.count("is plain http") == 1
    finally:
        plain.stop()
        tls.stop()


def test_jwks_uri_https_untrusted_is_refused(strait_factory, tmp_path,
                                             upstream_factory):
    """Without jwksCaFile the system bundle is the trust: a self-signed
    server gives no keys, and its tokens fail."""
    ec = Key(tmp_path / "ec.pem", "EC", "e1")
    tls = JwksServer(self_signed_ip(tmp_path))
    try:
        tls.doc = jwks(ec).encode()
        up = upstream_factory(responder(lambda head: b"ok"))
        st, port = start_with_up(strait_factory, tmp_path, up.port,
                                 ROUTES + f"""---
apiVersion: security.istio.io/v1
kind: RequestAuthentication
metadata: {{name: remote, namespace: istio-system}}
spec:
  jwtRules:
  - issuer: {ISS}
    jwksUri: https://127.0.0.1:{tls.port}/keys
""")
        wait_for(lambda: "TLS handshake with 127.0.0.1 failed" in st.log(),
                 15, "the refused handshake in the log")
        status, _, body = get(port, "/", bearer(mint(ec, claims())))
        assert (status, body) == (401, b"Jwks remote fetch is failed")
    finally:
        tls.stop()


def test_grpc_bad_token_is_unauthenticated(strait_factory, tmp_path,
                                           grpc_backend):
    """gRPC clients get the 401 as grpc-status 16 (UNAUTHENTICATED)."""
    import grpc
    from test_grpc import grpc_gateway

    k1 = Key(tmp_path / "k1.pem", "RSA", "k1")
    _, port = grpc_gateway(strait_factory, tmp_path, grpc_backend,
                           extra=request_authn(jwks(k1)))
    good = mint(k1, claims())
    bad = mint(k1, claims(exp=int(time.time()) - 3600))
    with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
        call = ch.unary_unary("/t.S/Unary")
        assert call(b"x", timeout=10,
                    metadata=(("authorization", f"Bearer {good}"),)) \
            == b"echo:x"
        try:
            call(b"x", timeout=10,
                 metadata=(("authorization", f"Bearer {bad}"),))
            raise AssertionError("an expired token was accepted")
        except grpc.RpcError as e:
            assert e.code() == grpc.StatusCode.UNAUTHENTICATED
            assert e.details() == "Jwt is expired"


def test_jwks_uri_chunked_answer(strait_factory, tmp_path, upstream_factory):
    """A chunked JWKS answer is complete at its last chunk, even when the
    server keeps the connection open."""
    k1 = Key(tmp_path / "k1.pem", "RSA", "k1")
    srv = JwksServer(chunked=True)
    try:
        srv.doc = jwks(k1).encode()
        up = upstream_factory(responder(lambda head: b"ok"))
        st, port = start_with_up(strait_factory, tmp_path, up.port,
                                 ROUTES + f"""---
apiVersion: security.istio.io/v1
kind: RequestAuthentication
metadata: {{name: remote, namespace: istio-system}}
spec:
  jwtRules:
  - issuer: {ISS}
    jwksUri: http://127.0.0.1:{srv.port}/jwks
    timeout: 30s
""")
        wait_for(lambda: get(port, "/", bearer(mint(k1, claims())))[0] == 200,
                 15, "the chunked JWKS")
        assert "no answer in time" not in st.log()
    finally:
        srv.stop()
