"""Every recipe of docs/lua-cookbook.md, run as the page writes it: the
YAML block of each recipe is taken from the page, one strait process
loads them all (each recipe is limited to a host of its own), and curl
checks what the recipe says it does. A recipe added to the page without
a test here fails test_every_recipe_is_tested."""
import re
import subprocess
import threading
from pathlib import Path

import pytest

from conftest import (Strait, Upstream, finish_strait, free_port, read_head,
                      responder)
from test_gateway import GATEWAY_AND_UP

DOC = Path(__file__).resolve().parents[2] / "docs" / "lua-cookbook.md"

TESTED = {"Rate limit", "API keys", "Geo-block", "Header and path rewrite",
          "External auth with caching", "Canary by cookie"}


def recipes():
    """{title: YAML text} of the page's "## Recipes" section: the first
    yaml block under each "### title"."""
    text = DOC.read_text()
    section = text.split("\n## Recipes\n", 1)[1].split("\n## ", 1)[0]
    out = {}
    for part in section.split("\n### ")[1:]:
        title, _, body = part.partition("\n")
        m = re.search(r"```yaml\n(.*?)```", body, re.S)
        assert m, f"recipe {title!r} has no yaml block"
        out[title.strip()] = m.group(1)
    return out


def geo_available():
    return subprocess.run(["perl", "-MMaxMind::DB::Writer::Tree", "-e", "1"],
                          capture_output=True).returncode == 0


REST = """apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: vs, namespace: default}}
spec:
  hosts: ["*"]
  gateways: [gw]
  http:
  - route: [{{destination: {{host: up.example.com}}}}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: canary, namespace: default}}
spec:
  hosts: [canary-svc.example.com]
  resolution: STATIC
  ports: [{{number: 80, name: http, protocol: HTTP, targetPort: {canary}}}]
  endpoints: [{{address: 127.0.0.1}}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: authz, namespace: default}}
spec:
  hosts: [authz.example.com]
  resolution: STATIC
  ports: [{{number: 80, name: http, protocol: HTTP, targetPort: {authz}}}]
  endpoints: [{{address: 127.0.0.1}}]
---
"""


class AuthService:
    """The external auth service: 200 with x-user: alice for "Bearer
    good", 403 otherwise; counts the calls per token."""

    def __init__(self):
        self.calls = {}
        self.lock = threading.Lock()
        self.up = Upstream(self.handler)

    def handler(self, c):
        buf = b""
        while True:
            buf = read_head(c, buf)
            if buf is None:
                return
            head, _, buf = buf.partition(b"\r\n\r\n")
            token = ""
            for line in head.split(b"\r\n")[1:]:
                k, _, v = line.decode().partition(":")
                if k.strip().lower() == "authorization":
                    token = v.strip()
            with self.lock:
                self.calls[token] = self.calls.get(token, 0) + 1
            if token == "Bearer good":
                c.sendall(b"HTTP/1.1 200 OK\r\nx-user: alice\r\n"
                          b"content-length: 0\r\n\r\n")
            else:
                c.sendall(b"HTTP/1.1 403 Forbidden\r\n"
                          b"content-length: 0\r\n\r\n")


class Kitchen:
    def __init__(self, tmp):
        self.heads = []
        self.up = Upstream(responder(lambda head: head))
        self.canary = Upstream(responder(lambda head: b"CANARY " + head))
        self.auth = AuthService()
        self.port = free_port()
        conf = tmp / "conf.d"
        conf.mkdir()
        docs = "---\n".join(recipes().values())
        (conf / "r.yaml").write_text(
            GATEWAY_AND_UP.format(port=self.port, up_port=self.up.port)
            + REST.format(canary=self.canary.port, authz=self.auth.up.port)
            + docs)
        extra = f"config: {{dir: \"{conf}\"}}\n"
        self.geo = geo_available()
        if self.geo:
            # test_geoip's city database only: 127.0.0.2 is DE, 127.0.0.3
            # US, 127.0.0.1 not known.
            from test_geoip import CITY, mkmmdb
            mkmmdb(tmp / "city.mmdb", "GeoIP2-City", CITY)
            extra += f"geoip:\n  databases: {{city: \"{tmp}/city.mmdb\"}}\n"
        self.st = Strait(tmp, workers=1, extra=extra).start()

    def stop(self):
        try:
            finish_strait(self.st)
        finally:
            for u in (self.up, self.canary, self.auth.up):
                u.stop()

    def curl(self, host, path="/", headers=(), source=None, http2=False):
        """(status, {lowercase header: value}, body) of a GET."""
        args = ["curl", "-sS", "-i", "--max-time", "10", "-H", f"host: {host}"]
        for h in headers:
            args += ["-H", h]
        if source:
            args += ["--interface", source]
        if http2:
            args.append("--http2-prior-knowledge")
        p = subprocess.run(args + [f"http://127.0.0.1:{self.port}{path}"],
                           capture_output=True, timeout=30)
        assert p.returncode == 0, p.stderr
        head, _, body = p.stdout.partition(b"\r\n\r\n")
        lines = head.decode().split("\r\n")
        status = int(lines[0].split()[1])
        hdrs = {}
        for ln in lines[1:]:
            k, _, v = ln.partition(":")
            hdrs.setdefault(k.strip().lower(), v.strip())
        return status, hdrs, body


@pytest.fixture(scope="module")
def kitchen(tmp_path_factory):
    k = Kitchen(tmp_path_factory.mktemp("cookbook"))
    yield k
    k.stop()


def upstream_header(body, name):
    """A header of the request the upstream echoed, or None."""
    for line in body.split(b"\r\n")[1:]:
        k, _, v = line.decode().partition(":")
        if k.strip().lower() == name:
            return v.strip()
    return None


def request_line(body):
    return body.split(b"\r\n")[0].decode()


def test_every_recipe_is_tested():
    assert set(recipes()) == TESTED


def test_rate_limit(kitchen):
    seen = []
    for _ in range(3):
        status, _, body = kitchen.curl("limited.example.com")
        assert status == 200, body
        seen.append(upstream_header(body, "x-ratelimit-remaining"))
    assert seen == ["2", "1", "0"]
    status, hdrs, body = kitchen.curl("limited.example.com")
    assert status == 429 and body == b"too many requests\n"
    assert int(hdrs["retry-after"]) > 0
    # Another key has a bucket of its own.
    status, _, _ = kitchen.curl("limited.example.com",
                                headers=["x-api-key: other"])
    assert status == 200
    # The other recipes' hosts are not limited.
    status, _, _ = kitchen.curl("rewrite.example.com")
    assert status == 200


def test_api_keys(kitchen):
    status, hdrs, _ = kitchen.curl("keys.example.com")
    assert status == 401 and hdrs["www-authenticate"] == "apikey"
    status, _, _ = kitchen.curl("keys.example.com",
                                headers=["x-api-key: wrong"])
    assert status == 401
    status, _, body = kitchen.curl("keys.example.com", "/orders",
                                   headers=["x-api-key: k-alice-1"])
    assert status == 200
    assert upstream_header(body, "x-consumer") == "alice"
    assert upstream_header(body, "x-api-key") is None
    # The key in the query is taken out before the upstream sees it.
    status, _, body = kitchen.curl("keys.example.com",
                                   "/orders?apikey=k-bob-2&page=2")
    assert status == 200
    assert request_line(body) == "GET /orders?page=2 HTTP/1.1"
    assert upstream_header(body, "x-consumer") == "bob"


def test_geo_block(kitchen):
    if not kitchen.geo:
        pytest.skip("libmaxmind-db-writer-perl is not installed")
    status, _, body = kitchen.curl("geo.example.com", source="127.0.0.2")
    assert (status, body) == (403, b"not available in your country\n")
    status, _, _ = kitchen.curl("geo.example.com", source="127.0.0.3")
    assert status == 200
    status, _, _ = kitchen.curl("geo.example.com")
    assert status == 200


@pytest.mark.parametrize("http2", [False, True], ids=["http1", "h2c"])
def test_header_and_path_rewrite(kitchen, http2):
    status, _, body = kitchen.curl(
        "rewrite.example.com", "/api/v1/users/7?debug=1&page=2",
        headers=["x-internal-user: root"], http2=http2)
    assert status == 200
    assert request_line(body) == "GET /v2/users/7?page=2 HTTP/1.1"
    assert upstream_header(body, "x-api-version") == "1"
    assert upstream_header(body, "x-internal-user") is None
    # A path outside the old prefix stays.
    status, _, body = kitchen.curl("rewrite.example.com", "/health",
                                   http2=http2)
    assert request_line(body) == "GET /health HTTP/1.1"


def test_external_auth_with_caching(kitchen):
    status, _, _ = kitchen.curl("auth.example.com")
    assert status == 401
    for _ in range(2):
        status, _, _ = kitchen.curl("auth.example.com",
                                    headers=["authorization: Bearer bad"])
        assert status == 403
    for _ in range(3):
        status, _, body = kitchen.curl("auth.example.com",
                                       headers=["authorization: Bearer good"])
        assert status == 200
        assert upstream_header(body, "x-user") == "alice"
    # A denial is asked again each time; an allowed token once.
    assert kitchen.auth.calls == {"Bearer bad": 2, "Bearer good": 1}


def test_canary_by_cookie(kitchen):
    status, _, body = kitchen.curl("canary.example.com",
                                   headers=["cookie: canary=always"])
    assert status == 200 and body.startswith(b"CANARY GET / ")
    status, hdrs, body = kitchen.curl("canary.example.com",
                                      headers=["cookie: canary=never"])
    assert status == 200 and body.startswith(b"GET / ")
    assert "set-cookie" not in hdrs
    # A new client gets a side and the cookie that keeps it there.
    for _ in range(5):
        status, hdrs, body = kitchen.curl("canary.example.com")
        assert status == 200
        side = re.match(r"canary=(always|never);", hdrs["set-cookie"])
        assert side, hdrs
        assert body.startswith(b"CANARY ") == (side.group(1) == "always")
