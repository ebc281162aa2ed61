"""Path and query from Lua, on the real binary with curl over HTTP/1.1 and
HTTP/2 (h2c): h:set_path() and the query helpers rewrite the request
target in on_request, which runs before routing, so the VirtualService
route chosen is the one of the new path and the upstream gets the new
target; headers:set(":path") does the same with the same checks; a bad
path is refused with a message that says why, and nothing of it reaches
the upstream. One strait process serves every test of the module."""
import subprocess

import pytest

from conftest import (Strait, Upstream, finish_strait, free_port, responder,
                      wait_for)
from test_gateway import GATEWAY_AND_UP

# Two routes: /v2/ adds x-route: v2, everything else x-route: default,
# so the upstream's echo says which route the request took.
ROUTES = """apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: vs, namespace: default}
spec:
  hosts: ["*"]
  gateways: [gw]
  http:
  - match: [{uri: {prefix: /v2/}}]
    headers: {request: {set: {x-route: v2}}}
    route: [{destination: {host: up.example.com}}]
  - headers: {request: {set: {x-route: default}}}
    route: [{destination: {host: up.example.com}}]
---
apiVersion: strait.io/v1alpha1
kind: LuaPolicy
metadata: {name: paths, namespace: default}
spec:
  targetRefs: [{kind: Gateway, name: gw}]
  source:
    inline: |
      function on_request(h)
        local p = h:path()
        if p:sub(1, 4) == "/v1/" then
          h:set_path("/v2/" .. p:sub(5))
        end
        if h:query_arg("api_key") ~= nil then
          h:set_query_arg("api_key", nil)
          h:set_query_arg("user", "key owner")
        end
        if p == "/pseudo" then
          h:headers():set(":path", "/v2/pseudo?via=header")
        elseif p == "/caught" then
          local ok, err = pcall(h.set_path, h, "/a b")
          h:respond(400, nil, err)
        elseif p == "/raw-bad" then
          h:set_path("/x\\r\\nx-evil: 1")
        elseif p == "/caught-pseudo" then
          local hd = h:headers()
          local ok, err = pcall(hd.set, hd, ":path", "nope")
          h:respond(400, nil, err)
        end
      end
"""


class Gateway:
    def __init__(self, tmp):
        self.heads = []

        def answer(head):
            self.heads.append(head)
            return head
        self.up = Upstream(responder(answer))
        self.port = free_port()
        conf = tmp / "conf.d"
        conf.mkdir()
        (conf / "r.yaml").write_text(
            GATEWAY_AND_UP.format(port=self.port, up_port=self.up.port)
            + ROUTES)
        self.st = Strait(tmp, workers=1,
                         extra=f"config: {{dir: \"{conf}\"}}\n").start()

    def curl(self, path, http2=False):
        """(status, body) of a GET of path with curl."""
        args = ["curl", "-sS", "--max-time", "10", "--path-as-is",
                "-o", "-", "-w", "\n%{http_code}"]
        if http2:
            args.append("--http2-prior-knowledge")
        p = subprocess.run(args + [f"http://127.0.0.1:{self.port}{path}"],
                           capture_output=True, timeout=30)
        assert p.returncode == 0, p.stderr
        body, _, code = p.stdout.rpartition(b"\n")
        return int(code), body


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    g = Gateway(tmp_path_factory.mktemp("luapath"))
    yield g
    try:
        finish_strait(g.st)
    finally:
        g.up.stop()


def request_line(body):
    return body.split(b"\r\n")[0]


@pytest.mark.parametrize("http2", [False, True], ids=["http1", "h2c"])
def test_set_path_routes_by_the_new_path(gw, http2):
    code, body = gw.curl("/v1/items?x=1&y=%41", http2)
    assert code == 200, body
    # The query stays as the client sent it; the route is /v2/'s.
    assert request_line(body) == b"GET /v2/items?x=1&y=%41 HTTP/1.1"
    assert b"\r\nx-route: v2" in body.lower()


@pytest.mark.parametrize("http2", [False, True], ids=["http1", "h2c"])
def test_query_arg_removed_and_added_encoded(gw, http2):
    code, body = gw.curl("/v1/a?keep=1&api_key=s3cret&keep=2", http2)
    assert code == 200, body
    assert request_line(body) == \
        b"GET /v2/a?keep=1&keep=2&user=key%20owner HTTP/1.1"
    assert b"s3cret" not in body


def test_untouched_request_keeps_its_route(gw):
    code, body = gw.curl("/other?api=1")
    assert code == 200
    assert request_line(body) == b"GET /other?api=1 HTTP/1.1"
    assert b"\r\nx-route: default" in body.lower()


@pytest.mark.parametrize("http2", [False, True], ids=["http1", "h2c"])
def test_headers_set_pseudo_path_rewrites_target(gw, http2):
    # What answered 500 "bad header name" before.
    code, body = gw.curl("/pseudo", http2)
    assert code == 200, body
    assert request_line(body) == b"GET /v2/pseudo?via=header HTTP/1.1"
    assert b"\r\nx-route: v2" in body.lower()


@pytest.mark.parametrize("path,message", [
    ("/caught", b"set_path: bad path: a space, control character"),
    ("/caught-pseudo",
     b'headers:set(":path"): bad path: a path must start with \'/\''),
])
def test_bad_path_caught_says_why(gw, path, message):
    n = len(gw.heads)
    code, body = gw.curl(path)
    assert code == 400
    assert message in body
    # Setting :path answered 500 "bad header name" before.
    assert b"bad header name" not in body
    assert len(gw.heads) == n


def test_bad_path_uncaught_fails_closed_and_logs_reason(gw):
    n = len(gw.heads)
    code, body = gw.curl("/raw-bad")
    assert code == 500, body
    assert body == b"lua policy failed\n"
    wait_for(lambda: "set_path: bad path: a space, control character"
             in gw.st.log(), 10, "the reason logged")
    assert len(gw.heads) == n, "nothing reached the upstream"
