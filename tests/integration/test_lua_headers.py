"""What Lua and GeoIP may put into headers, on the real binary: a policy
that copies client headers cannot set content-length (request smuggling:
the upstream would take the next client's request on the pooled
connection as the body), and a GeoIP value with CR/LF is left out of its
header instead of failing the request."""
import http.client
import json
import os
import subprocess

import pytest

from conftest import connect, read_head, recv_exact, responder, wait_for
from test_gateway import start_with_up

ROUTES = """apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: vs, namespace: default}
spec:
  hosts: ["*"]
  gateways: [gw]
  http:
  - route: [{destination: {host: up.example.com}}]
"""

# The common pattern: headers a client asks for by prefix are copied.
COPY_POLICY = """---
apiVersion: strait.io/v1alpha1
kind: LuaPolicy
metadata: {name: copy, namespace: default}
spec:
  targetRefs: [{kind: Gateway, name: gw}]
  source:
    inline: |
      function on_request(h)
        local hd = h:headers()
        local copy = {}
        for k, v in hd:iter() do
          if k:sub(1, 7) == "x-copy-" then copy[k:sub(8)] = v end
        end
        for k, v in pairs(copy) do
          local ok, err = pcall(hd.set, hd, k, v)
          if not ok then h:log("warn", "copy refused: " .. err) end
        end
      end
"""


def framed_upstream(seen):
    """A keep-alive HTTP/1.1 upstream that keeps the framing as a server
    must: it answers each request at once, then reads and drops the body
    its content-length announces before the next request. A request line
    it cannot parse is answered 400. seen gets each request head."""
    def handler(c):
        buf = b""
        while True:
            buf = read_head(c, buf)
            if buf is None:
                return
            head, _, buf = buf.partition(b"\r\n\r\n")
            seen.append(head)
            lines = head.split(b"\r\n")
            parts = lines[0].split(b" ")
            cl = 0
            for ln in lines[1:]:
                k, _, v = ln.partition(b":")
                if k.strip().lower() == b"content-length":
                    cl = int(v.strip())
            if len(parts) != 3 or parts[0] not in (b"GET", b"POST"):
                body = b"bad request line"
                c.sendall(b"HTTP/1.1 400 Bad Request\r\ncontent-length: %d"
                          b"\r\n\r\n%s" % (len(body), body))
            else:
                body = parts[1]
                c.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s"
                          % (len(body), body))
            # The body, as announced: bytes that may already be here, and
            # the rest from the connection.
            take = min(cl, len(buf))
            buf = buf[take:]
            if cl > take:
                recv_exact(c, cl - take)
    return handler


def one_get(port, path, extra=b""):
    """A GET on a connection of its own: (status, body)."""
    s = connect(port)
    try:
        s.sendall(b"GET " + path.encode() + b" HTTP/1.1\r\nhost: a.test\r\n"
                  + extra + b"connection: close\r\n\r\n")
        r = http.client.HTTPResponse(s)
        r.begin()
        return r.status, r.read()
    finally:
        s.close()


def test_lua_copy_cannot_set_content_length_desync(strait_factory, tmp_path,
                                                    upstream_factory):
    seen = []
    up = upstream_factory(framed_upstream(seen))
    st, port = start_with_up(strait_factory, tmp_path, up.port,
                             ROUTES + COPY_POLICY, workers=1)
    # The attacker: a GET whose copied header announces a body of 3 bytes
    # that strait never sends. The upstream would take the first 3 bytes of
    # the next request on the pooled connection ("GET") as that body.
    status, body = one_get(port, "/attacker",
                           b"x-copy-content-length: 3\r\n"
                           b"x-copy-x-note: kept\r\n")
    assert (status, body) == (200, b"/attacker")
    wait_for(lambda: "copy refused" in st.log() and
             "content-length is a framing or hop-by-hop header" in st.log(),
             10, "the refusal logged with the field's name")
    # The victim, on another client connection: strait reuses its pooled
    # upstream connection (one worker), and the request must arrive whole.
    status, body = one_get(port, "/victim")
    assert (status, body) == (200, b"/victim")
    assert up.conns == 1, "the victim went over the pooled connection"
    heads = [h.lower() for h in seen]
    assert heads[0].startswith(b"get /attacker ")
    assert b"\r\ncontent-length:" not in heads[0]
    assert b"x-note: kept" in heads[0]
    assert heads[1].startswith(b"get /victim ")


GEO_MISSING = subprocess.run(
    ["perl", "-MMaxMind::DB::Writer::Tree", "-e", "1"],
    capture_output=True).returncode != 0


@pytest.mark.skipif(GEO_MISSING,
                    reason="libmaxmind-db-writer-perl is not installed")
def test_geoip_value_with_crlf_is_left_out(strait_factory, tmp_path,
                                           upstream_factory):
    from test_geoip import ASN, ROUTE, dbs, gateway, heads, req
    city = {"127.0.0.2/32": {"country": {"iso_code": "DE"},
                             "city": {"names": {"en": "Ber\r\nx-evil: 1"}}},
            "127.0.0.3/32": {"country": {"iso_code": "US"},
                             "city": {"names": {"en": "Nul\u0000l"}}}}
    assert ASN
    up = upstream_factory(responder(heads))
    st, port = gateway(strait_factory, tmp_path, up.port, ROUTE,
                       f"geoip:\n  databases: {{city: \"{dbs(tmp_path, city)}"
                       "/city.mmdb\"}\n  headers: {country: x-geo-country, "
                       "city: x-geo-city}\n")
    for src, country in (("127.0.0.2", "DE"), ("127.0.0.3", "US")):
        # The client's own x-geo-city goes too: the header is strait's.
        status, body = req(port, src=src, headers={"x-geo-city": "forged"})
        assert status == 200, body
        assert json.loads(body) == {"x-geo-country": country}


DICT_POLICY = """---
apiVersion: strait.io/v1alpha1
kind: LuaPolicy
metadata: {{name: count, namespace: default}}
spec:
  targetRefs: [{{kind: Gateway, name: gw}}]
  sharedDicts: [{{name: {dict}, size: 1Mi}}]
  source:
    inline: |
      function on_request(h)
        local n = strait.shared["{dict}"]:incr("n", 1, 0)
        h:respond(200, {{["x-n"] = string.format("%d", n), ["x-gen"] = "{gen}"}}, "")
      end
"""


def test_renamed_dict_freed_at_next_snapshot(strait_factory, tmp_path,
                                             upstream_factory):
    up = upstream_factory(responder(lambda head: b""))
    st, port = start_with_up(strait_factory, tmp_path, up.port,
                             ROUTES + DICT_POLICY.format(dict="a", gen=1),
                             workers=1)
    conf = tmp_path / "conf.d" / "r.yaml"
    base = conf.read_text().split("---\napiVersion: strait.io")[0]

    def count():
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        try:
            c.request("GET", "/")
            r = c.getresponse()
            r.read()
            return r.getheader("x-gen"), r.getheader("x-n")
        finally:
            c.close()

    def publish(dict_name, gen):
        tmp = conf.with_name(".r.tmp")
        tmp.write_text(base + DICT_POLICY.format(dict=dict_name, gen=gen))
        os.replace(tmp, conf)
        wait_for(lambda: count()[0] == str(gen), 15, f"snapshot {gen}")

    assert count() == ("1", "1")
    assert count() == ("1", "2")
    # The same name in a new snapshot: the same dict, nothing freed.
    publish("a", 2)
    assert int(count()[1]) >= 4
    assert "shared dict default/a freed" not in st.log()
    # Renamed: a new dict, and the old one is freed once the snapshots
    # that named it are gone.
    publish("b", 3)
    wait_for(lambda: "shared dict default/a freed" in st.log(), 15,
             "the renamed dict freed")
    before = int(count()[1])
    assert before <= 3, "b is new"
    # Back to a: a new, empty a (the old one is gone), and b is freed.
    publish("a", 4)
    wait_for(lambda: "shared dict default/b freed" in st.log(), 15,
             "b freed in turn")
    assert int(count()[1]) <= 3
    assert st.log().count("shared dict default/a freed") == 1
