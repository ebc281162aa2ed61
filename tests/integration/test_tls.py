"""TLS termination on HTTP listeners: certificate selection by SNI and key
type, protocol versions, cipher suites, ALPN, resumption and certificate
hot reload, checked with openssl s_client, curl and Python's ssl."""
import json
import os
import re
import socket
import ssl
import subprocess
import time

from conftest import STRAIT, free_port, wait_for
from httpd import (clusters, http_listener, make_cert, peer_subject,
                   read_response, s_client)


def cert_entry(pair):
    return {"serverCertificate": pair[0], "privateKey": pair[1]}


def start(strait_factory, up, pairs, **tls):
    port = free_port()
    conf = {"certificates": [cert_entry(p) for p in pairs], **tls}
    st = strait_factory(http_listener("web", port, tls=conf),
                        extra=clusters(backend=[up.addr])).start()
    return st, port


def subject_for(port, *args, servername=None):
    rc, out = s_client(port, *args, servername=servername,
                       data=b"Q\n")
    assert "BEGIN CERTIFICATE" in out or "subject=" in out, out
    return peer_subject(out)


def org(subject):
    m = re.search(r"O\s*=\s*([\w.-]+)", subject)
    return m.group(1) if m else subject


def https_get(port, path, servername="example.com", alpn=None):
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    if alpn:
        ctx.set_alpn_protocols(alpn)
    s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", port),
                                                 timeout=10),
                        server_hostname=servername)
    return s


def test_sni_picks_certificate(strait_factory, httpd_factory, certs):
    up = httpd_factory()
    # other.test's certificate first: it is the default.
    st, port = start(strait_factory, up,
                     [certs["other"], certs["ec"], certs["rsa"]])
    assert org(subject_for(port, servername="example.com")) == "strait-test-ec"
    assert org(subject_for(port, servername="www.example.com")) == \
        "strait-test-ec"  # *.example.com
    assert org(subject_for(port, servername="other.test")) == \
        "strait-test-other"
    # A wildcard covers one label only; unknown names and no SNI get the
    # default (first) certificate.
    assert org(subject_for(port, servername="a.b.example.com")) == \
        "strait-test-other"
    assert org(subject_for(port, servername="unknown.test")) == \
        "strait-test-other"
    assert org(subject_for(port)) == "strait-test-other"
    # And a request through curl with SNI works end to end.
    p = subprocess.run(["curl", "-sS", "-k", "--resolve",
                        f"www.example.com:{port}:127.0.0.1",
                        f"https://www.example.com:{port}/sni"],
                       capture_output=True, timeout=30)
    assert p.returncode == 0, p.stderr
    rec = json.loads(p.stdout)
    assert rec["path"] == "/sni"
    assert st.stats()["listener.web.tls.handshakes"] >= 7


def test_ecdsa_or_rsa_by_client_capability(strait_factory, httpd_factory,
                                           certs):
    up = httpd_factory()
    st, port = start(strait_factory, up, [certs["rsa"], certs["ec"]])
    assert org(subject_for(port, servername="example.com")) == "strait-test-ec"
    assert org(subject_for(port, "-tls1_2", servername="example.com")) == \
        "strait-test-ec"
    rsa_only = ["-sigalgs", "RSA-PSS+SHA256:RSA+SHA256", "-tls1_2",
                "-cipher", "ECDHE-RSA-AES128-GCM-SHA256"]
    assert org(subject_for(port, *rsa_only, servername="example.com")) == \
        "strait-test-rsa"
    # TLS 1.3 client that only signs with RSA.
    assert org(subject_for(port, "-tls1_3", "-sigalgs", "RSA-PSS+SHA256",
                           servername="example.com")) == "strait-test-rsa"


def test_tls11_refused_and_counted(strait_factory, httpd_factory, certs):
    up = httpd_factory()
    st, port = start(strait_factory, up, [certs["ec"]])
    rc, out = s_client(port, "-tls1_1", "-cipher", "DEFAULT@SECLEVEL=0",
                       servername="example.com", data=b"Q\n")
    assert rc != 0 and "subject=" not in out, out
    wait_for(lambda: st.stats()["listener.web.tls.fail_version"] >= 1, 5,
             "tls.fail_version")
    code, body, _ = st.get("/stats/prometheus")
    assert re.search(r'strait_tls_handshake_failures_total\{[^}]*'
                     r'listener="web"[^}]*reason="version"[^}]*\} [1-9]',
                     body), [l for l in body.splitlines() if "tls" in l]
    # TLS 1.2 and 1.3 are fine.
    for v in ("-tls1_2", "-tls1_3"):
        rc, out = s_client(port, v, servername="example.com", data=b"Q\n")
        assert "subject=" in out, out


def test_min_tls13_refuses_tls12(strait_factory, httpd_factory, certs):
    up = httpd_factory()
    st, port = start(strait_factory, up, [certs["ec"]],
                     minProtocolVersion="TLSV1_3")
    rc, out = s_client(port, "-tls1_2", servername="example.com", data=b"Q\n")
    assert rc != 0 and "subject=" not in out, out
    rc, out = s_client(port, "-tls1_3", servername="example.com", data=b"Q\n")
    assert "Protocol  : TLSv1.3" in out or "TLSv1.3" in out, out
    wait_for(lambda: st.stats()["listener.web.tls.fail_version"] >= 1, 5,
             "tls.fail_version")


def test_cipher_suites_restrict_tls12(strait_factory, httpd_factory, certs):
    up = httpd_factory()
    st, port = start(strait_factory, up, [certs["ec"]],
                     cipherSuites=["ECDHE-ECDSA-AES128-GCM-SHA256"])
    rc, out = s_client(port, "-tls1_2", "-cipher",
                       "ECDHE-ECDSA-AES256-GCM-SHA384",
                       servername="example.com", data=b"Q\n")
    assert rc != 0 and "subject=" not in out, out
    wait_for(lambda: st.stats()["listener.web.tls.fail_cipher"] >= 1, 5,
             "tls.fail_cipher")
    rc, out = s_client(port, "-tls1_2", "-cipher",
                       "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-SHA384",
                       servername="example.com", data=b"Q\n")
    assert "Cipher is ECDHE-ECDSA-AES128-GCM-SHA256" in out, out


def test_alpn_selection(strait_factory, httpd_factory, certs):
    up = httpd_factory()
    st, port = start(strait_factory, up, [certs["ec"]])
    for offer, want in (("h2", "h2"), ("http/1.1", "http/1.1"),
                        ("h2,http/1.1", "h2"), ("http/1.1,h2", "h2")):
        rc, out = s_client(port, "-alpn", offer, servername="example.com",
                           data=b"Q\n")
        assert f"ALPN protocol: {want}" in out, (offer, out)
    rc, out = s_client(port, servername="example.com", data=b"Q\n")
    assert "No ALPN negotiated" in out
    # HTTP/1.1 over TLS without ALPN still serves.
    s = https_get(port, "/")
    with s:
        s.sendall(b"GET /noalpn HTTP/1.1\r\nHost: example.com\r\n\r\n")
        r = read_response(s.makefile("rb"))
        assert r.status == 200
        rec = r.json()
        xfp = [v for k, v in rec["headers"] if k.lower() == "x-forwarded-proto"]
        assert xfp == ["https"]


def test_alpn_configured_http11_only(strait_factory, httpd_factory, certs):
    up = httpd_factory()
    st, port = start(strait_factory, up, [certs["ec"]], alpn=["http/1.1"])
    rc, out = s_client(port, "-alpn", "h2,http/1.1", servername="example.com",
                       data=b"Q\n")
    assert "ALPN protocol: http/1.1" in out, out


def test_session_resumption(strait_factory, httpd_factory, certs, tmp_path):
    up = httpd_factory()
    st, port = start(strait_factory, up, [certs["ec"]])
    req = b"GET /r HTTP/1.1\r\nHost: example.com\r\nConnection: close\r\n\r\n"
    for ver in ("-tls1_2", "-tls1_3"):
        sess = str(tmp_path / f"sess{ver}")
        rc, out = s_client(port, ver, "-ign_eof", "-sess_out", sess,
                           servername="example.com", data=req)
        assert "subject=" in out and os.path.getsize(sess) > 0, out
        rc, out = s_client(port, ver, "-ign_eof", "-sess_in", sess,
                           servername="example.com", data=req)
        assert re.search(r"^Reused, ", out, re.M), (ver, out)
        assert "HTTP/1.1 200" in out


def test_certificate_hot_reload(strait_factory, httpd_factory, certs,
                                tmp_path):
    up = httpd_factory()
    live = tmp_path / "live"
    live.mkdir()
    crt, key = str(live / "tls.crt"), str(live / "tls.key")
    src_crt, src_key = certs["ec"]
    for a, b in ((src_crt, crt), (src_key, key)):
        with open(a, "rb") as f, open(b, "wb") as g:
            g.write(f.read())
    st, port = start(strait_factory, up, [(crt, key)], reloadInterval="200ms")
    assert org(subject_for(port, servername="example.com")) == "strait-test-ec"

    # A connection opened before the change.
    old = https_get(port, "/")
    old.sendall(b"GET /before HTTP/1.1\r\nHost: example.com\r\n\r\n")
    f = old.makefile("rb")
    assert read_response(f).status == 200

    new_dir = tmp_path / "new"
    new_dir.mkdir()
    ncrt, nkey = make_cert(str(new_dir), "renewed", "example.com",
                           ["example.com", "*.example.com"], "ec")
    # Write beside, then rename over: each file changes atomically.
    for a, b in ((nkey, key), (ncrt, crt)):
        tmp = b + ".tmp"
        with open(a, "rb") as fa, open(tmp, "wb") as fb:
            fb.write(fa.read())
        os.replace(tmp, b)
    wait_for(lambda: org(subject_for(port, servername="example.com"))
             == "strait-test-renewed", 10, "the new certificate")
    # The old connection keeps working.
    old.sendall(b"GET /after HTTP/1.1\r\nHost: example.com\r\n\r\n")
    r = read_response(f)
    assert r.status == 200 and r.json()["path"] == "/after"
    old.close()

    # A garbage certificate is logged and the last good one stays.
    tmp = crt + ".tmp"
    with open(tmp, "wb") as fb:
        fb.write(b"-----BEGIN CERTIFICATE-----\ngarbage\n"
                 b"-----END CERTIFICATE-----\n")
    os.replace(tmp, crt)
    wait_for(lambda: crt in st.log() and re.search(
        r"(warn|error).*" + re.escape(crt), st.log()), 10,
        "a log line naming the bad file")
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:  # several reload intervals
        assert org(subject_for(port, servername="example.com")) == \
            "strait-test-renewed"
    assert st.proc.poll() is None


def test_run_with_missing_certificate_exits_3(tmp_path, httpd_factory):
    up = httpd_factory()
    port, admin = free_port(), free_port()
    missing = str(tmp_path / "nope" / "missing.crt")
    key = str(tmp_path / "missing.key")
    cfg = tmp_path / "s.yaml"
    cfg.write_text(
        f"workers: 1\nadmin: {{address: 127.0.0.1:{admin}}}\n"
        + clusters(backend=[up.addr]) + "listeners:\n"
        + http_listener("web", port, tls={"certificates": [
            {"serverCertificate": missing, "privateKey": key}]}))
    p = subprocess.run([STRAIT, "check", "-c", str(cfg)], capture_output=True,
                       timeout=30)
    assert p.returncode == 0, p.stderr  # check validates the YAML only
    p = subprocess.run([STRAIT, "run", "-c", str(cfg)], capture_output=True,
                       timeout=30)
    assert p.returncode == 3, p.stderr
    assert missing.encode() in p.stderr, p.stderr
