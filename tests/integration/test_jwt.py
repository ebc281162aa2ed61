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
    # ?access_token is read too.
    assert get(port, "/api?access_token=" + good)[0] == 200

    # A bad token is 401 wherever it goes, even where no policy needs one.
    expired = mint(k1, claims(exp=int(time.time()) - 3600))
    status, headers, body = get(port, "/api/x?q=1", bearer(expired))
    assert (status, body) == (401, b"Jwt is expired")
    assert headers["www-authenticate"] == (
        f'Bearer realm="http://127.0.0.1:{port}/api/x", '
        'error="invalid_token"')
    assert get(port, "/public", bearer(expired))[0] == 401
    wrong_aud = mint(k1, claims(aud="other"))
    assert get(port, "/api", bearer(wrong_aud))[2] == \
        b"Audiences in Jwt are not allowed"
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
               if k.endswith(".http.jwt_authn.denied")) == 6
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
