#!/usr/bin/python3
"""Writes the CRL fixtures of tests/unit/tls/test_crl.c into this
directory (python3-cryptography). Dates are fixed, far from today in both
directions, so the fixtures neither expire nor depend on when they were
made; the unit tests pass their own "now" where it matters.

  root.crt        a root that may sign CRLs
  other.crt       a second root, with no CRL anywhere
  nosign.crt      a root whose keyUsage lacks cRLSign
  good.crt        root's leaf, not revoked
  bad.crt         root's leaf, revoked by root.crl
  other-leaf.crt  other's leaf
  root.crl        root's CRL revoking bad (2020 .. 2099)
  root-old.crl    root's CRL past its nextUpdate (2020 .. 2021)
  root-forged.crl root's name, other's signature
  nosign.crl      nosign's CRL
  two.crl         root-old.crl, a comment line, root.crl
"""
import datetime
import os

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

HERE = os.path.dirname(os.path.abspath(__file__))
T2020 = datetime.datetime(2020, 1, 1)
T2021 = datetime.datetime(2021, 1, 1)
T2099 = datetime.datetime(2099, 1, 1)


def usage(ca, crl_sign):
    return x509.KeyUsage(digital_signature=not ca, content_commitment=False,
                         key_encipherment=False, data_encipherment=False,
                         key_agreement=False, key_cert_sign=ca,
                         crl_sign=crl_sign, encipher_only=False,
                         decipher_only=False)


def name(cn):
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def write(fname, data):
    with open(os.path.join(HERE, fname), "wb") as f:
        f.write(data)


def pem(obj):
    return obj.public_bytes(serialization.Encoding.PEM)


def root(cn, crl_sign=True):
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder().subject_name(name(cn))
            .issuer_name(name(cn)).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(T2020).not_valid_after(T2099)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None),
                           critical=True)
            .add_extension(usage(True, crl_sign), critical=True)
            .sign(key, hashes.SHA256()))
    write(f"{cn}.crt", pem(cert))
    return key, cert


def leaf(cn, ca_key, ca_cert):
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder().subject_name(name(cn))
            .issuer_name(ca_cert.subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(T2020).not_valid_after(T2099)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None),
                           critical=True)
            .add_extension(usage(False, False), critical=True)
            .add_extension(x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    write(f"{cn}.crt", pem(cert))
    return cert


def crl(issuer, signer_key, revoked, last, nxt):
    b = (x509.CertificateRevocationListBuilder().issuer_name(issuer.subject)
         .last_update(last).next_update(nxt))
    for c in revoked:
        b = b.add_revoked_certificate(
            x509.RevokedCertificateBuilder().serial_number(c.serial_number)
            .revocation_date(last).build())
    return pem(b.sign(signer_key, hashes.SHA256()))


def main():
    rk, rc = root("root")
    ok, oc = root("other")
    nk, nc = root("nosign", crl_sign=False)
    leaf("good", rk, rc)
    bad = leaf("bad", rk, rc)
    leaf("other-leaf", ok, oc)
    current = crl(rc, rk, [bad], T2020, T2099)
    old = crl(rc, rk, [], T2020, T2021)
    write("root.crl", current)
    write("root-old.crl", old)
    write("root-forged.crl", crl(rc, ok, [bad], T2020, T2099))
    write("nosign.crl", crl(nc, nk, [], T2020, T2099))
    write("two.crl", old + b"an older CRL above, the current one below\n"
          + current)


if __name__ == "__main__":
    main()
