"""GeoIP from MaxMind databases built in the test run (Perl's
MaxMind::DB::Writer, reserved networks kept): AuthorizationPolicy on
source.geo.*, request headers that replace the client's and that a
VirtualService routes on, X-Forwarded-For behind trusted hops, access
logs, Envoy's geoip stats, reloading a database renamed into place,
rewritten in place or corrupt, and Lua: h:geo() and the deny-by-country
example."""
import http.client
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import STRAIT, free_port, responder, wait_for
from test_gateway import GATEWAY_AND_UP

MKMMDB = Path(__file__).with_name("mkmmdb.pl")

pytestmark = pytest.mark.skipif(
    subprocess.run(["perl", "-MMaxMind::DB::Writer::Tree", "-e", "1"],
                   capture_output=True).returncode != 0,
    reason="libmaxmind-db-writer-perl is not installed")

CITY = {"127.0.0.2/32": {"country": {"iso_code": "DE"},
                         "city": {"names": {"en": "Berlin"}},
                         "subdivisions": [{"iso_code": "BE"}]},
        "127.0.0.3/32": {"country": {"iso_code": "US"}}}
ASN = {"127.0.0.3/32": {"autonomous_system_number": 64500,
                        "autonomous_system_organization": "Example Net"}}


def mkmmdb(path, dbtype, spec):
    subprocess.run(["perl", str(MKMMDB), str(path), dbtype],
                   input=json.dumps(spec).encode(), check=True, timeout=60)


def dbs(tmp_path, city=CITY):
    d = tmp_path / "geo"
    d.mkdir(exist_ok=True)
    mkmmdb(d / "city.mmdb", "GeoIP2-City", city)
    mkmmdb(d / "asn.mmdb", "GeoLite2-ASN", ASN)
    return d


def geoip_yaml(d, headers=True):
    h = ("  headers: {country: x-geo-country, city: x-geo-city, "
         "region: x-geo-region, asn: x-geo-asn, asnOrg: x-geo-asn-org}\n"
         if headers else "")
    return (f"geoip:\n  databases: {{city: \"{d}/city.mmdb\", "
            f"asn: \"{d}/asn.mmdb\"}}\n" + h)


def heads(head):
    """The upstream answers with the request's geo headers as JSON."""
    out = {}
    for line in head.split(b"\r\n")[1:]:
        k, _, v = line.decode().partition(":")
        if k.lower().startswith("x-geo-"):
            out[k.lower()] = v.strip()
    return json.dumps(out).encode()


def req(port, path="/", src="127.0.0.1", headers=None, conn=None):
    c = conn or http.client.HTTPConnection("127.0.0.1", port, timeout=10,
                                           source_address=(src, 0))
    c.request("GET", path, headers=headers or {})
    r = c.getresponse()
    body = r.read()
    if conn is None:
        c.close()
    return r.status, body


ROUTE = """apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: vs, namespace: default}
spec:
  hosts: ["*"]
  gateways: [gw]
  http:
  - route: [{destination: {host: up.example.com}}]
"""

DENY_DE = """---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: vs, namespace: default}
spec:
  hosts: ["*"]
  gateways: [gw]
  http:
  - match: [{headers: {x-geo-country: {exact: US}}}]
    route: [{destination: {host: up.example.com}}]
    headers: {response: {add: {x-routed: us}}}
  - route: [{destination: {host: up.example.com}}]
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: no-de, namespace: istio-system}
spec:
  action: DENY
  rules:
  - when: [{key: source.geo.country, values: [DE]}]
"""


def gateway(strait_factory, tmp_path, up_port, rest, geo):
    conf = tmp_path / "conf.d"
    conf.mkdir()
    port = free_port()
    (conf / "r.yaml").write_text(GATEWAY_AND_UP.format(port=port, up_port=up_port)
                                 + rest)
    st = strait_factory(extra=f"config: {{dir: \"{conf}\"}}\n" + geo + (
        "log:\n  accessLog: true\n  accessLogEncoding: TEXT\n"
        "  accessLogFormat: \"geo=%REQ(X-GEO-COUNTRY)% asn=%REQ(X-GEO-ASN)%\\n\"\n"
    )).start()
    return st, port


def test_deny_by_country_headers_routing_log_and_stats(strait_factory, tmp_path,
                                                       upstream_factory):
    up = upstream_factory(responder(heads))
    st, port = gateway(strait_factory, tmp_path, up.port, DENY_DE,
                       geoip_yaml(dbs(tmp_path)))
    # DENY when source.geo.country == DE: 127.0.0.2 is DE, 127.0.0.3 US.
    status, body = req(port, src="127.0.0.2")
    assert (status, body) == (403, b"RBAC: access denied")
    status, body = req(port, src="127.0.0.3", headers={"x-geo-asn": "1"})
    assert status == 200
    assert json.loads(body) == {"x-geo-country": "US", "x-geo-asn": "64500",
                                "x-geo-asn-org": "Example Net"}
    # A client-sent header is replaced (US from 127.0.0.1 would route to
    # the first rule) or removed when nothing is known.
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request("GET", "/", headers={"x-geo-country": "US", "x-geo-city": "X"})
    r = c.getresponse()
    assert json.loads(r.read()) == {} and r.getheader("x-routed") is None
    c.close()
    # The VirtualService routes on the header strait set.
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10,
                                   source_address=("127.0.0.3", 0))
    c.request("GET", "/", headers={"x-geo-country": "DE"})
    r = c.getresponse()
    r.read()
    assert r.getheader("x-routed") == "us"
    c.close()
    wait_for(lambda: "geo=US asn=64500" in st.log(), 10, "geo in the access log")
    assert "geo=- asn=-" in st.log()
    s = st.stats()
    assert s["geoip.rq_total"] == 4
    assert s["geoip.maxmind.city_db.total"] == 4
    assert s["geoip.maxmind.city_db.hit"] == 3
    assert s["geoip.maxmind.asn_db.hit"] == 2
    assert s["geoip.maxmind.city_db.lookup_error"] == 0
    assert s["geoip.maxmind.city_db.db_build_epoch"] > 0
    from prometheus_client.parser import text_string_to_metric_families
    prom = {(smp.name, tuple(sorted(smp.labels.items()))): smp.value
            for fam in text_string_to_metric_families(st.get("/stats/prometheus")[1])
            for smp in fam.samples}
    assert prom[("strait_geoip_requests_total", ())] == 4
    assert prom[("strait_geoip_hits_total", (("db", "city"),))] == 3
    assert prom[("strait_geoip_db_reloads_total",
                 (("db", "asn"), ("result", "error")))] == 0


def test_one_lookup_per_connection_for_the_peer(strait_factory, tmp_path,
                                                upstream_factory):
    up = upstream_factory(responder(heads))
    st, port = gateway(strait_factory, tmp_path, up.port, DENY_DE,
                       geoip_yaml(dbs(tmp_path)))
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10,
                                   source_address=("127.0.0.3", 0))
    for _ in range(5):
        assert req(port, conn=c)[0] == 200
    c.close()
    s = st.stats()
    assert s["geoip.rq_total"] == 5
    assert s["geoip.maxmind.city_db.total"] == 1


def test_xff_with_trusted_hops(strait_factory, tmp_path, upstream_factory):
    up = upstream_factory(responder(heads))
    d = dbs(tmp_path)
    port = free_port()
    yaml = (f"  - name: f\n    address: \"127.0.0.1:{port}\"\n    protocol: http\n"
            f"    http: {{xffNumTrustedHops: 1}}\n"
            f"    routes:\n      - {{host: \"*\", pathPrefix: /, cluster: e}}\n")
    extra = (f"clusters:\n  - {{name: e, endpoints: [\"127.0.0.1:{up.port}\"]}}\n"
             + geoip_yaml(d))
    st = strait_factory(yaml, extra=extra).start()
    # One trusted hop: the rightmost X-Forwarded-For entry is the client.
    got = json.loads(req(port, headers={"x-forwarded-for": "127.0.0.3, 127.0.0.2"})[1])
    assert got["x-geo-country"] == "DE" and got["x-geo-city"] == "Berlin"
    assert got["x-geo-region"] == "BE"
    # Without one, the peer (127.0.0.1 is nowhere): the client's go.
    got = json.loads(req(port, headers={"x-geo-country": "DE"})[1])
    assert got == {}
    s = st.stats()
    assert s["geoip.maxmind.city_db.hit"] == 1


def test_reload_rename_rewrite_in_place_and_corrupt(strait_factory, tmp_path,
                                                    upstream_factory):
    up = upstream_factory(responder(heads))
    d = dbs(tmp_path)
    st, port = gateway(strait_factory, tmp_path, up.port, ROUTE, geoip_yaml(d))
    # A keep-alive connection whose result is cached.
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10,
                                   source_address=("127.0.0.2", 0))
    assert json.loads(req(port, conn=c)[1])["x-geo-country"] == "DE"

    # A new file renamed into place is opened and swapped in; the cached
    # result of the open connection goes with the old database.
    fr = dict(CITY)
    fr["127.0.0.2/32"] = {"country": {"iso_code": "FR"}}
    mkmmdb(d / ".city.new", "GeoIP2-City", fr)
    os.rename(d / ".city.new", d / "city.mmdb")
    wait_for(lambda: st.stats().get("geoip.maxmind.city_db.db_reload_success") == 1,
             10, "the renamed database reloaded")
    assert "geoip: city database reloaded" in st.log()
    assert json.loads(req(port, conn=c)[1])["x-geo-country"] == "FR"
    assert json.loads(req(port, src="127.0.0.2")[1])["x-geo-country"] == "FR"

    # A corrupt file renamed into place keeps the database in use and
    # says why.
    (d / ".bad").write_bytes(b"\0" * 4096)
    os.rename(d / ".bad", d / "city.mmdb")
    wait_for(lambda: st.stats().get("geoip.maxmind.city_db.db_reload_error") == 1,
             10, "the corrupt database refused")
    assert "geoip.maxmind.city_db.last_error" in st.get("/stats")[1]
    assert "city database not reloaded" in st.log()
    assert json.loads(req(port, src="127.0.0.2")[1])["x-geo-country"] == "FR"

    # Rewritten in place (truncated, then written slowly, as cp over a
    # live file): no SIGBUS, lookups go on, and the whole new file is
    # taken once it holds still.
    mkmmdb(tmp_path / "us.mmdb", "GeoIP2-City",
           {"127.0.0.2/32": {"country": {"iso_code": "US"}}})
    data = (tmp_path / "us.mmdb").read_bytes()
    with open(d / "city.mmdb", "r+b") as f:
        f.truncate(0)
        for i in range(0, len(data), 512):
            f.write(data[i:i + 512])
            f.flush()
            assert req(port, conn=c)[0] == 200
    wait_for(lambda: st.stats().get("geoip.maxmind.city_db.db_reload_success") == 2,
             10, "the rewritten database reloaded")
    assert json.loads(req(port, conn=c)[1])["x-geo-country"] == "US"
    assert st.proc.poll() is None
    c.close()


def test_bad_database_at_start_is_an_error(strait_factory, tmp_path):
    d = tmp_path / "geo"
    d.mkdir()
    (d / "city.mmdb").write_bytes(b"not a database")
    mkmmdb(d / "asn.mmdb", "GeoLite2-ASN", ASN)
    st = strait_factory(extra=geoip_yaml(d, headers=False))
    st.start(wait=False)
    assert st.proc.wait(timeout=15) != 0
    assert "geoip.databases.city" in st.log()
    # A database of the wrong kind in a slot is refused too.
    shutil.copy(d / "asn.mmdb", d / "city.mmdb")
    st2 = strait_factory(extra=geoip_yaml(d, headers=False))
    st2.start(wait=False)
    assert st2.proc.wait(timeout=15) != 0
    assert "is not a city database" in st2.log()


def test_check_knows_geo_keys_and_refuses_unknown(tmp_path):
    pol = """apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: p, namespace: default}
spec:
  action: DENY
  rules:
  - when: [{key: source.geo.%s, values: [DE]}]
"""
    (tmp_path / "ok.yaml").write_text(pol % "country")
    r = subprocess.run([STRAIT, "check", str(tmp_path / "ok.yaml")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout
    (tmp_path / "bad.yaml").write_text(pol % "planet")
    r = subprocess.run([STRAIT, "check", str(tmp_path / "bad.yaml")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
    assert "unknown condition key 'source.geo.planet'" in r.stdout


def test_header_without_its_database_is_refused(tmp_path):
    (tmp_path / "s.yaml").write_text(
        "geoip:\n  databases: {asn: /nonexistent.mmdb}\n"
        "  headers: {country: x-geo-country, isp: X-Bad}\n")
    r = subprocess.run([STRAIT, "check", "-c", str(tmp_path / "s.yaml")],
                       capture_output=True, text=True, timeout=60)
    out = r.stdout + r.stderr
    assert r.returncode != 0
    assert "geoip.headers.country: no configured database gives country" in out
    assert "'X-Bad' is not a lowercase header name" in out


LUA_GEO = """---
apiVersion: strait.io/v1alpha1
kind: LuaPolicy
metadata: {name: geo, namespace: default}
spec:
  targetRefs: [{kind: Gateway, name: gw}]
  source:
    inline: |
      function on_request(h)
        local g = h:geo()
        if g.country == "DE" then
          h:respond(451, {}, "no " .. g.city)
          return
        end
        h:headers():set("x-geo-lua", (g.country or "-") .. " " ..
                        tostring(g.asn) .. " " .. math.type(g.asn or 0))
      end
"""


def test_lua_geo(strait_factory, tmp_path, upstream_factory):
    up = upstream_factory(responder(heads))
    st, port = gateway(strait_factory, tmp_path, up.port, ROUTE + LUA_GEO,
                       geoip_yaml(dbs(tmp_path), headers=False))
    assert req(port, src="127.0.0.2") == (451, b"no Berlin")
    status, body = req(port, src="127.0.0.3")
    assert status == 200
    assert json.loads(body) == {"x-geo-lua": "US 64500 integer"}


def test_deny_country_example_from_lua_path(strait_factory, tmp_path,
                                            upstream_factory):
    """lua/examples/deny_country.lua, loaded from lua.path: a client of a
    listed country gets 403 and the upstream never sees it; one of a
    country not listed, and one whose country is not known, pass."""
    from conftest import SRCDIR
    seen = []

    def answer(head):
        seen.append(head.split(b" ")[1].decode())
        return b"ok"

    up = upstream_factory(responder(answer))
    st, port = gateway(strait_factory, tmp_path, up.port, ROUTE + """---
apiVersion: strait.io/v1alpha1
kind: LuaPolicy
metadata: {name: deny-country, namespace: default}
spec:
  config: {countries: "fr, DE"}
  source: {file: examples/deny_country.lua}
""", geoip_yaml(dbs(tmp_path), headers=False)
        + f"lua: {{path: [\"{SRCDIR}/lua\"]}}\n")
    assert req(port, "/de", src="127.0.0.2") == (403, b"forbidden\n")
    assert req(port, "/us", src="127.0.0.3") == (200, b"ok")
    assert req(port, "/unknown", src="127.0.0.1") == (200, b"ok")
    assert seen == ["/us", "/unknown"]
