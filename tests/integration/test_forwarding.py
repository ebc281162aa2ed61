"""X-Forwarded-* and the originating client behind trusted proxies."""
import http.server
import json
import re
import threading
import urllib.request

import pytest

from conftest import free_port, wait_for


class EchoHeaders(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        body = json.dumps({k.lower(): v for k, v in self.headers.items()}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


@pytest.fixture
def echo():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), EchoHeaders)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield srv.server_address[1]
    srv.shutdown()
    srv.server_close()
    t.join(5)


def start(strait_factory, echo_port, hops):
    port = free_port()
    yaml = (f"  - name: f\n    address: \"127.0.0.1:{port}\"\n    protocol: http\n"
            f"    http: {{xffNumTrustedHops: {hops}}}\n"
            f"    routes:\n      - {{host: \"*\", pathPrefix: /, cluster: e}}\n")
    extra = f"clusters:\n  - {{name: e, endpoints: [\"127.0.0.1:{echo_port}\"]}}\n"
    return strait_factory(yaml, extra=extra).start(), port


def get(port, headers):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/", headers=headers)
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())


def logged_client(st):
    line = wait_for(lambda: [l for l in st.log().splitlines() if "http_request" in l],
                    10, "access log")[-1]
    return re.search(r" client=(\S+)", line).group(1)


def test_no_trusted_hops(strait_factory, echo):
    st, port = start(strait_factory, echo, 0)
    h = get(port, {"X-Forwarded-For": "9.9.9.9", "X-Forwarded-Proto": "https"})
    assert h["x-forwarded-for"] == "9.9.9.9, 127.0.0.1"
    # Nobody in front is trusted: the client cannot claim https.
    assert h["x-forwarded-proto"] == "http"
    assert re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}",
                        h["x-request-id"])
    assert logged_client(st) == "127.0.0.1"


def test_one_trusted_hop(strait_factory, echo):
    st, port = start(strait_factory, echo, 1)
    h = get(port, {"X-Forwarded-For": "1.2.3.4, 5.6.7.8", "X-Forwarded-Proto": "https",
                   "X-Request-Id": "given-id", "traceparent": "00-abc-def-01"})
    assert h["x-forwarded-for"] == "1.2.3.4, 5.6.7.8, 127.0.0.1"
    assert h["x-forwarded-proto"] == "https"
    assert h["x-request-id"] == "given-id"
    assert h["traceparent"] == "00-abc-def-01"
    assert logged_client(st) == "5.6.7.8"


def test_two_trusted_hops(strait_factory, echo):
    st, port = start(strait_factory, echo, 2)
    get(port, {"X-Forwarded-For": "1.2.3.4,5.6.7.8"})
    assert logged_client(st) == "1.2.3.4"
