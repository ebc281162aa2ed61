"""TLS handshake deadlines are counted as timeouts, not as a peer's EOF."""
import socket
import ssl

from conftest import wait_for
from test_http2 import read_until_closed
from test_tls import start


def client_hello():
    """The bytes of a ClientHello for example.com, from an in-memory TLS
    client that will never see the answer."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    inc, out = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = ctx.wrap_bio(inc, out, server_hostname="example.com")
    try:
        obj.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return out.read()


def test_tls_handshake_timeout_counted_as_timeout(strait_factory,
                                                  httpd_factory, certs):
    """A client that sends its ClientHello and then goes quiet is closed at
    the 10 s handshake deadline and counted in tls.fail_timeout (it was
    counted as tls.fail_eof); the Prometheus reason is "timeout"."""
    up = httpd_factory()
    st, port = start(strait_factory, up, [certs["ec"]])
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    s.sendall(client_hello())
    closed, _ = read_until_closed(s, timeout=30)
    assert closed
    s.close()
    wait_for(lambda: st.stats()["listener.web.tls.fail_timeout"] == 1, 10,
             "tls.fail_timeout")
    assert st.stats()["listener.web.tls.fail_eof"] == 0
    code, body, _ = st.get("/stats/prometheus")
    assert 'reason="timeout"} 1' in body, \
        [l for l in body.splitlines() if "handshake_failures" in l]
