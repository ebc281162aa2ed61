"""A stand-in for istiod's CA, for strait's tests: a grpcio server of
istio.v1.auth.IstioCertificateService/CreateCertificate over TLS, with
classes generated at run time by protoc from tests/integration/proto/
ca.proto. It checks each request the way istiod would (a Bearer JWT whose
audience names istio-ca and that has not expired, a CSR whose signature
verifies) and records what it saw (token, ClusterID, CSR SANs, validity)
for the test to assert on; it answers with a chain from its own test CA.

Also the helpers the CA tests share: a small test CA (cryptography), JWTs
(unsigned for the stand-in, RS256 for strait's CA), and the generated
message classes."""
import atexit
import base64
import datetime
import importlib.util
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
from concurrent import futures

import grpc
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from conftest import free_port

PROTO_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "proto")
SERVICE = "istio.v1.auth.IstioCertificateService"
METHOD = f"/{SERVICE}/CreateCertificate"

_pb2 = None


def ca_pb2():
    """The message classes of proto/ca.proto, generated once per process
    (protobuf's descriptor pool takes a file name once)."""
    global _pb2
    if _pb2 is None:
        out = tempfile.mkdtemp(prefix="strait-ca-proto.")
        atexit.register(shutil.rmtree, out, True)
        subprocess.run(["protoc", "-I", PROTO_DIR, "-I", "/usr/include",
                        f"--python_out={out}", "ca.proto"], check=True)
        spec = importlib.util.spec_from_file_location(
            "ca_pb2", os.path.join(out, "ca_pb2.py"))
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        _pb2 = mod
    return _pb2


def pem(cert):
    return cert.public_bytes(serialization.Encoding.PEM).decode()


def key_pem(key):
    return key.private_bytes(serialization.Encoding.PEM,
                             serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption()).decode()


class TestCA:
    """A self-signed P-256 root that issues leaf certificates."""

    def __init__(self, name="istiod test root"):
        self.key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME,
                                                name)])
        now = datetime.datetime.utcnow()
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(subject).issuer_name(subject)
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=30))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None),
                           critical=True)
            .add_extension(x509.KeyUsage(
                digital_signature=True, content_commitment=False,
                key_encipherment=False, data_encipherment=False,
                key_agreement=False, key_cert_sign=True, crl_sign=True,
                encipher_only=False, decipher_only=False), critical=True)
            .sign(self.key, hashes.SHA256()))

    def issue(self, public_key, uris=(), dns=(), ttl_s=3600):
        now = datetime.datetime.utcnow().replace(microsecond=0)
        names = [x509.UniformResourceIdentifier(u) for u in uris] + \
            [x509.DNSName(d) for d in dns]
        b = (x509.CertificateBuilder()
             .subject_name(x509.Name([]))
             .issuer_name(self.cert.subject)
             .public_key(public_key)
             .serial_number(x509.random_serial_number())
             .not_valid_before(now)
             .not_valid_after(now + datetime.timedelta(seconds=ttl_s))
             .add_extension(x509.BasicConstraints(ca=False, path_length=None),
                            critical=True)
             .add_extension(x509.ExtendedKeyUsage(
                 [ExtendedKeyUsageOID.SERVER_AUTH,
                  ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False))
        if names:
            b = b.add_extension(x509.SubjectAlternativeName(names),
                                critical=True)
        return b.sign(self.key, hashes.SHA256())

    def leaf_files(self, d, name, uris=(), dns=(), ttl_s=3600):
        """A new key and certificate in d: (cert_path, key_path)."""
        k = ec.generate_private_key(ec.SECP256R1())
        c = self.issue(k.public_key(), uris, dns, ttl_s)
        cp, kp = os.path.join(d, f"{name}.crt"), os.path.join(d, f"{name}.key")
        with open(cp, "w") as f:
            f.write(pem(c))
        with open(kp, "w") as f:
            f.write(key_pem(k))
        return cp, kp


def b64u(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unb64u(s):
    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))


def sa_token(aud=("istio-ca",), exp_in=3600, ns="istio-system", sa="strait",
             iss="https://kubernetes.default.svc.cluster.local", extra=None):
    """A projected service-account token's shape, unsigned (the stand-in,
    like a test of strait's client, never checks the signature)."""
    claims = {"aud": list(aud), "iss": iss,
              "sub": f"system:serviceaccount:{ns}:{sa}",
              "exp": int(time.time()) + exp_in, "iat": int(time.time())}
    claims.update(extra or {})
    head = {"alg": "RS256", "kid": "k1"}
    return ".".join([b64u(json.dumps(head).encode()),
                     b64u(json.dumps(claims).encode()), b64u(os.urandom(32))])


class Issuer:
    """An RS256 token issuer with a JWKS, as a Kubernetes API server's
    service-account signer is (/openid/v1/jwks)."""

    def __init__(self, iss="https://kubernetes.default.svc.cluster.local"):
        self.iss = iss
        self.key = rsa.generate_private_key(public_exponent=65537,
                                            key_size=2048)

    def jwks(self):
        n = self.key.public_key().public_numbers()
        return json.dumps({"keys": [{
            "kty": "RSA", "alg": "RS256", "use": "sig", "kid": "k1",
            "n": b64u(n.n.to_bytes((n.n.bit_length() + 7) // 8, "big")),
            "e": b64u(n.e.to_bytes(3, "big"))}]})

    def token(self, ns, sa, aud=("istio-ca",), exp_in=3600):
        claims = {"aud": list(aud), "iss": self.iss,
                  "sub": f"system:serviceaccount:{ns}:{sa}",
                  "exp": int(time.time()) + exp_in, "iat": int(time.time())}
        signed = ".".join([b64u(json.dumps({"alg": "RS256", "kid": "k1",
                                            "typ": "JWT"}).encode()),
                           b64u(json.dumps(claims).encode())])
        sig = self.key.sign(signed.encode(), padding.PKCS1v15(),
                            hashes.SHA256())
        return signed + "." + b64u(sig)


def csr_pem(key, uris=()):
    b = x509.CertificateSigningRequestBuilder().subject_name(x509.Name([]))
    if uris:
        b = b.add_extension(x509.SubjectAlternativeName(
            [x509.UniformResourceIdentifier(u) for u in uris]), critical=True)
    return b.sign(key, hashes.SHA256()).public_bytes(
        serialization.Encoding.PEM).decode()


class IstiodCA:
    """The stand-in server. requests: one dict per call that reached the
    handler (authorization, clusterid, validity, has_metadata, sans,
    csr_ok, serial, refused). refuse: a (grpc.StatusCode, message) to
    answer every call with instead; roots_apart: send the root in
    root_cert instead of cert_chain, as newer istiod does."""

    def __init__(self, tmp, server_name="istiod.istio-system.svc", port=None,
                 serve=True):
        self.dir = tmp
        self.root = TestCA()
        self.root_file = os.path.join(tmp, "root-cert.pem")
        with open(self.root_file, "w") as f:
            f.write(pem(self.root.cert))
        self.server_key = ec.generate_private_key(ec.SECP256R1())
        self.server_cert = self.root.issue(self.server_key.public_key(),
                                           dns=[server_name])
        self.requests = []
        self.refuse = None
        self.roots_apart = False
        self.lock = threading.Lock()
        self.pb = ca_pb2()
        self.port = port or free_port()
        self.server = None
        if serve:
            self.serve()

    def serve(self):
        """Starts answering on self.port."""
        pb = self.pb
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        handler = grpc.method_handlers_generic_handler(SERVICE, {
            "CreateCertificate": grpc.unary_unary_rpc_method_handler(
                self._create,
                request_deserializer=pb.IstioCertificateRequest.FromString,
                response_serializer=pb.IstioCertificateResponse
                .SerializeToString)})
        self.server.add_generic_rpc_handlers((handler,))
        creds = grpc.ssl_server_credentials(
            [(key_pem(self.server_key).encode(),
              pem(self.server_cert).encode())])
        self.server.add_secure_port(f"127.0.0.1:{self.port}", creds)
        self.server.start()

    def address(self):
        return f"127.0.0.1:{self.port}"

    def stop(self):
        if self.server is not None:
            self.server.stop(None).wait(10)

    def count(self):
        with self.lock:
            return len(self.requests)

    def _create(self, req, ctx):
        md = dict(ctx.invocation_metadata())
        rec = {"authorization": md.get("authorization"),
               "clusterid": md.get("clusterid"),
               "validity": req.validity_duration,
               "has_metadata": req.HasField("metadata"),
               "sans": [], "csr_ok": False, "serial": None, "refused": None}
        # The record shows once it is whole (the answer, or the refusal,
        # is decided), and before strait can have that answer: a test
        # never sees a request half read.
        try:
            return self._answer(req, ctx, rec)
        finally:
            with self.lock:
                self.requests.append(rec)

    def _answer(self, req, ctx, rec):
        if self.refuse is not None:
            rec["refused"] = self.refuse[1]
            ctx.abort(*self.refuse)
        auth = rec["authorization"] or ""
        claims = {}
        try:
            claims = json.loads(unb64u(auth[len("Bearer "):].split(".")[1]))
        except (IndexError, ValueError):
            pass
        aud = claims.get("aud", [])
        aud = [aud] if isinstance(aud, str) else aud
        # istiod's authenticators answer every failure with this message.
        if not auth.startswith("Bearer ") or "istio-ca" not in aud or \
                claims.get("exp", 0) <= time.time():
            rec["refused"] = "request authenticate failure"
            ctx.abort(grpc.StatusCode.UNAUTHENTICATED,
                      "request authenticate failure")
        csr = x509.load_pem_x509_csr(req.csr.encode())
        rec["csr_ok"] = csr.is_signature_valid
        try:
            san = csr.extensions.get_extension_for_class(
                x509.SubjectAlternativeName).value
            rec["sans"] = san.get_values_for_type(
                x509.UniformResourceIdentifier)
        except x509.ExtensionNotFound:
            pass
        leaf = self.root.issue(csr.public_key(), uris=rec["sans"],
                               ttl_s=req.validity_duration or 86400)
        rec["serial"] = leaf.serial_number
        if self.roots_apart:
            return self.pb.IstioCertificateResponse(
                cert_chain=[pem(leaf)],
                root_cert=self.pb.Roots(ca_cert=[pem(self.root.cert)]))
        return self.pb.IstioCertificateResponse(
            cert_chain=[pem(leaf), pem(self.root.cert)])
