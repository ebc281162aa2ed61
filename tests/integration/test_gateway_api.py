"""The Kubernetes Gateway API (issue 24, docs/gateway-api.md), in the style
of its conformance suite: one strait per module with a Gateway API Gateway
on loopback and two echo backends (httpd.HttpUpstream, which answer with
what they received), and one test per feature that writes an HTTPRoute
into the config directory, waits for the reload, and sends the request
and checks the answer the specification states. `strait check` cases
need no process."""
import http.client
import json
import os
import subprocess

import pytest

from conftest import STRAIT, Strait, finish_strait, free_port, wait_for
from httpd import HttpUpstream, make_cert

BASE = """apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {{name: strait}}
spec: {{controllerName: strait.io/gateway-controller}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: edge, namespace: default, generation: 3}}
spec:
  gatewayClassName: strait
  addresses: [{{type: IPAddress, value: 127.0.0.1}}]
  listeners:
  - name: web
    port: {port}
    protocol: HTTP
    allowedRoutes: {{namespaces: {{from: Same}}}}
  - name: wild
    port: {wport}
    protocol: HTTP
    hostname: "*.example.com"
    allowedRoutes: {{namespaces: {{from: All}}}}
  - name: secure
    port: {sport}
    protocol: HTTPS
    hostname: secure.example.com
    tls: {{certificateRefs: [{{name: edge-cert}}]}}
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: mirror, namespace: default}}
spec:
  hosts: [mirror.default.svc.cluster.local]
  resolution: STATIC
  ports: [{{number: {b}, name: http, protocol: HTTP}}]
  endpoints: [{{address: 127.0.0.1}}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: a, namespace: default}}
spec:
  hosts: [a.default.svc.cluster.local]
  resolution: STATIC
  ports: [{{number: {a}, name: http, protocol: HTTP}}]
  endpoints: [{{address: 127.0.0.1}}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: b, namespace: other}}
spec:
  hosts: [b.other.svc.cluster.local]
  resolution: STATIC
  ports: [{{number: {b}, name: http, protocol: HTTP}}]
  endpoints: [{{address: 127.0.0.1}}]
"""


class Env:
    pass


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("gwapi")
    e = Env()
    e.a, e.b = HttpUpstream(), HttpUpstream()
    e.port, e.wport, e.sport = free_port(), free_port(), free_port()
    e.conf = tmp / "conf.d"
    e.conf.mkdir()
    # The HTTPS listener's certificateRef: credentials.dir/edge-cert on a VM.
    creds = tmp / "creds"
    (creds / "edge-cert").mkdir(parents=True)
    e.crt, _ = make_cert(str(creds / "edge-cert"), "tls", "secure.example.com",
                         ["secure.example.com"])
    (e.conf / "base.yaml").write_text(BASE.format(
        port=e.port, wport=e.wport, sport=e.sport, a=e.a.port, b=e.b.port))
    e.st = Strait(tmp, extra=f"config: {{dir: \"{e.conf}\", debounce: 20ms}}\n"
                  f"credentials: {{dir: \"{creds}\"}}\n")
    e.st.start()
    wait_for(lambda: any(f"-{e.port}.downstream_cx_total" in k
                         for k in e.st.stats()), 10, "the web listener")
    yield e
    finish_strait(e.st)
    e.a.stop()
    e.b.stop()


def apply(env, text):
    """Replaces the test's routes with text and waits for the reload."""
    before = env.st.stats()["resources.reloads_ok"]
    path = env.conf / "route.yaml"
    tmp = env.conf / ".route.tmp"
    tmp.write_text(text)
    os.replace(tmp, path)
    wait_for(lambda: env.st.stats()["resources.reloads_ok"] > before, 10,
             "the reload:\n" + env.st.log()[-3000:])


def req(port, path, host="gw.test", method="GET", headers=None):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request(method, path, headers={"Host": host, **(headers or {})})
    r = c.getresponse()
    body = r.read()
    c.close()
    return r, body


def served(env, port, path, **kw):
    """(status, which backend got it or None, what it received)."""
    na, nb = len(env.a.requests), len(env.b.requests)
    r, body = req(port, path, **kw)
    who = "a" if len(env.a.requests) > na else \
        "b" if len(env.b.requests) > nb else None
    got = json.loads(body) if who else None
    return r, who, got


def route(name, rules, ns="default", parent="{name: edge}", hostnames=None,
          created=None):
    meta = f"{{name: {name}, namespace: {ns}" + \
        (f", creationTimestamp: '{created}'" if created else "") + "}"
    hn = f"  hostnames: {json.dumps(hostnames)}\n" if hostnames else ""
    return f"""---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {meta}
spec:
  parentRefs: [{parent}]
{hn}  rules:
{rules}
"""


TO_A = "    backendRefs: [{name: a, port: %d}]"


def to_a(env):
    """backendRefs to a, as a key of the rule above it."""
    return TO_A % env.a.port


def rule_a(env):
    """A rule of its own: everything to a."""
    return "  - " + (TO_A % env.a.port).lstrip()


def dump_status(env, kind, name):
    dump = json.loads(env.st.get("/config_dump")[1])
    for r in dump["resources"]["resources"]:
        if r["kind"] == kind and r["name"] == name and "status" in r:
            return r["status"]
    raise AssertionError(f"no status for {kind} {name}")


def conds(c):
    return {x["type"]: (x["status"], x["reason"]) for x in c["conditions"]}


def test_httproute_routes_to_a_service_and_reports_status(env):
    apply(env, route("basic", f"  - matches: [{{path: {{type: PathPrefix, value: /}}}}]\n{to_a(env)}"))
    r, who, got = served(env, env.port, "/hello?x=1")
    assert r.status == 200 and who == "a" and got["path"] == "/hello?x=1"
    st = dump_status(env, "HTTPRoute", "basic")
    p = st["parents"][0]
    assert p["parentRef"]["name"] == "edge"
    assert p["controllerName"] == "strait.io/gateway-controller"
    assert conds(p) == {"Accepted": ("True", "Accepted"),
                        "ResolvedRefs": ("True", "ResolvedRefs")}
    gw = dump_status(env, "Gateway", "edge")
    assert conds(gw)["Programmed"] == ("True", "Programmed")
    assert all(c["observedGeneration"] == 3 for c in gw["conditions"])
    web = next(x for x in gw["listeners"] if x["name"] == "web")
    assert web["attachedRoutes"] == 1
    assert web["supportedKinds"] == [{"group": "gateway.networking.k8s.io",
                                      "kind": "HTTPRoute"}]
    assert conds(dump_status(env, "GatewayClass", "strait"))["Accepted"][0] == "True"


def test_path_prefix_matches_whole_path_elements(env):
    apply(env, route("prefix", f"  - matches: [{{path: {{type: PathPrefix, value: /foo/}}}}]\n{to_a(env)}"))
    assert served(env, env.port, "/foo")[1] == "a"
    assert served(env, env.port, "/foo/bar")[1] == "a"
    r, who, _ = served(env, env.port, "/foobar")
    assert r.status == 404 and who is None


def test_precedence_exact_then_longest_prefix_then_headers(env):
    b = env.b.port
    rules_a = f"""  - matches: [{{path: {{type: PathPrefix, value: /p}}}}]
{to_a(env)}
  - matches: [{{path: {{type: PathPrefix, value: /p/q}}, headers: [{{name: x-v, value: "1"}}]}}]
{to_a(env)}"""
    rules_b = f"""  - matches: [{{path: {{type: Exact, value: /p/x}}}}, {{path: {{type: PathPrefix, value: /p/q}}}}]
    backendRefs: [{{name: b, namespace: other, port: {b}}}]"""
    grant = """---
apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata: {name: routes-to-b, namespace: other}
spec:
  from: [{group: gateway.networking.k8s.io, kind: HTTPRoute, namespace: default}]
  to: [{group: "", kind: Service}]
"""
    apply(env, route("r-a", rules_a, created="2026-01-01T00:00:00Z") +
          route("r-b", rules_b, created="2026-02-01T00:00:00Z") + grant)
    assert served(env, env.port, "/p/x")[1] == "b"        # exact beats /p
    assert served(env, env.port, "/p/q/z")[1] == "b"      # longer prefix
    assert served(env, env.port, "/p/q/z", headers={"X-V": "1"})[1] == "a"
    assert served(env, env.port, "/p/other")[1] == "a"


def test_oldest_route_wins_a_tie(env):
    b = env.b.port
    grant = """---
apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata: {name: routes-to-b, namespace: other}
spec:
  from: [{group: gateway.networking.k8s.io, kind: HTTPRoute, namespace: default}]
  to: [{group: "", kind: Service, name: b}]
"""
    # The younger route first in the file and first by name: age decides.
    apply(env, route("a-new", f"  - matches: [{{path: {{type: Exact, value: /tie}}}}]\n{to_a(env)}",
                     created="2026-01-01T00:00:00Z") +
          route("z-old", f"  - matches: [{{path: {{type: Exact, value: /tie}}}}]\n    backendRefs: [{{name: b, namespace: other, port: {b}}}]",
                created="2025-01-01T00:00:00Z") + grant)
    assert served(env, env.port, "/tie")[1] == "b"


def test_header_query_and_method_matches(env):
    apply(env, route("m", f"""  - matches:
    - path: {{type: Exact, value: /m}}
      method: POST
      headers: [{{name: X-Env, value: canary}}, {{type: RegularExpression, name: x-id, value: "[0-9]+"}}]
      queryParams: [{{name: q, value: "1"}}]
{to_a(env)}"""))
    h = {"X-Env": "canary", "X-Id": "42"}
    assert served(env, env.port, "/m?q=1", method="POST", headers=h)[1] == "a"
    assert served(env, env.port, "/m?q=1", method="GET", headers=h)[0].status == 404
    assert served(env, env.port, "/m?q=2", method="POST", headers=h)[0].status == 404
    assert served(env, env.port, "/m?q=1", method="POST",
                  headers={"X-Env": "prod", "X-Id": "42"})[0].status == 404


def test_header_modifiers(env):
    apply(env, route("hm", f"""  - filters:
    - type: RequestHeaderModifier
      requestHeaderModifier:
        set: [{{name: x-set, value: s}}]
        add: [{{name: x-add, value: a2}}]
        remove: [x-gone]
    - type: ResponseHeaderModifier
      responseHeaderModifier:
        set: [{{name: x-resp, value: r}}]
{to_a(env)}"""))
    r, who, got = served(env, env.port, "/h",
                         headers={"X-Set": "old", "X-Add": "a1", "X-Gone": "1"})
    assert who == "a", r.status
    hs = [(k.lower(), v) for k, v in got["headers"]]
    assert ("x-set", "s") in hs and ("x-set", "old") not in hs
    assert ("x-add", "a1") in hs and ("x-add", "a2") in hs
    assert not any(k == "x-gone" for k, _ in hs)
    assert r.getheader("x-resp") == "r"


def test_request_redirect(env):
    apply(env, route("rd", """  - matches: [{path: {type: Exact, value: /old}}]
    filters:
    - type: RequestRedirect
      requestRedirect: {scheme: https, hostname: new.example.org, statusCode: 301, path: {type: ReplaceFullPath, replaceFullPath: /new}}
  - matches: [{path: {type: Exact, value: /host}}]
    filters:
    - type: RequestRedirect
      requestRedirect: {hostname: h.example.org}"""))
    r, who, _ = served(env, env.port, "/old")
    assert r.status == 301 and who is None
    assert r.getheader("location") == "https://new.example.org/new"
    r, _, _ = served(env, env.port, "/host")
    assert r.status == 302
    assert r.getheader("location") == f"http://h.example.org:{env.port}/host"


def test_url_rewrite_prefix_and_hostname(env):
    apply(env, route("rw", f"""  - matches: [{{path: {{type: PathPrefix, value: /prefix/one}}}}]
    filters:
    - type: URLRewrite
      urlRewrite: {{hostname: rewritten.example.org, path: {{type: ReplacePrefixMatch, replacePrefixMatch: /one}}}}
{to_a(env)}
  - matches: [{{path: {{type: PathPrefix, value: /full}}}}]
    filters:
    - type: URLRewrite
      urlRewrite: {{path: {{type: ReplaceFullPath, replaceFullPath: /replaced}}}}
{to_a(env)}"""))
    _, who, got = served(env, env.port, "/prefix/one/two")
    assert who == "a" and got["path"] == "/one/two"
    assert dict((k.lower(), v) for k, v in got["headers"])["host"] == \
        "rewritten.example.org"
    assert served(env, env.port, "/prefix/one")[2]["path"] == "/one"
    assert served(env, env.port, "/full/x/y")[2]["path"] == "/replaced"


def test_invalid_backend_is_500_and_unresolved(env):
    apply(env, route("bad", """  - matches: [{path: {type: Exact, value: /missing}}]
    backendRefs: [{name: nosuch, port: 80}]
  - matches: [{path: {type: Exact, value: /kind}}]
    backendRefs: [{group: example.com, kind: Bucket, name: x}]"""))
    assert served(env, env.port, "/missing")[0].status == 500
    assert served(env, env.port, "/kind")[0].status == 500
    assert served(env, env.port, "/nothing-matches")[0].status == 404
    p = dump_status(env, "HTTPRoute", "bad")["parents"][0]
    assert conds(p)["ResolvedRefs"][0] == "False"
    assert conds(p)["ResolvedRefs"][1] in ("BackendNotFound", "InvalidKind")


def test_cross_namespace_backend_needs_a_reference_grant(env):
    apply(env, route("xns", f"  - backendRefs: [{{name: b, namespace: other, port: {env.b.port}}}]"))
    assert served(env, env.port, "/x")[0].status == 500
    p = dump_status(env, "HTTPRoute", "xns")["parents"][0]
    assert conds(p)["ResolvedRefs"] == ("False", "RefNotPermitted")


def test_allowed_routes_same_namespace(env):
    apply(env, route("elsewhere", rule_a(env).replace("a, port", "a, namespace: default, port"), ns="team",
                     parent="{name: edge, namespace: default, sectionName: web}"))
    assert served(env, env.port, "/e")[0].status == 404
    p = dump_status(env, "HTTPRoute", "elsewhere")["parents"][0]
    assert conds(p)["Accepted"] == ("False", "NotAllowedByListeners")


def test_hostname_intersection_and_section_name(env):
    apply(env, route("hosts", rule_a(env), parent="{name: edge, sectionName: wild}",
                     hostnames=["a.example.com", "other.org"]))
    assert served(env, env.wport, "/", host="a.example.com")[1] == "a"
    assert served(env, env.wport, "/", host="b.example.com")[0].status == 404
    assert served(env, env.wport, "/", host="other.org")[0].status == 404
    # sectionName: wild, so nothing on the web listener.
    assert served(env, env.port, "/", host="a.example.com")[0].status == 404
    apply(env, route("nohost", rule_a(env), parent="{name: edge, sectionName: wild}",
                     hostnames=["other.org"]))
    p = dump_status(env, "HTTPRoute", "nohost")["parents"][0]
    assert conds(p)["Accepted"] == ("False", "NoMatchingListenerHostname")


def test_weights_zero_takes_nothing(env):
    apply(env, route("w", f"""  - backendRefs:
    - {{name: a, port: {env.a.port}, weight: 1}}
    - {{name: nosuch, port: 80, weight: 0}}"""))
    for _ in range(5):
        assert served(env, env.port, "/w")[1] == "a"


def test_https_listener_terminates_with_its_certificate_ref(env):
    apply(env, route("tls", rule_a(env), parent="{name: edge, sectionName: secure}"))
    p = subprocess.run(
        ["curl", "-sS", "--max-time", "10", "--cacert", env.crt, "--resolve",
         f"secure.example.com:{env.sport}:127.0.0.1", "-o", "/dev/null",
         "-w", "%{http_code}", f"https://secure.example.com:{env.sport}/tls"],
        capture_output=True, text=True, timeout=30)
    assert p.stdout == "200", p.stdout + p.stderr
    assert env.a.requests[-1]["path"] == "/tls"


def test_request_mirror_copies_to_its_backend(env):
    apply(env, route("mir", f"""  - filters:
    - type: RequestMirror
      requestMirror: {{backendRef: {{name: mirror, port: {env.b.port}}}}}
{to_a(env)}"""))
    assert served(env, env.port, "/mir")[1] == "a"
    wait_for(lambda: any(r["path"] == "/mir" for r in env.b.requests), 10,
             "the mirrored copy")


def test_request_timeout_is_504(env):
    apply(env, route("t", f"""  - timeouts: {{request: 300ms}}
{to_a(env)}"""))
    r, _ = req(env.port, "/slow?delay=5")
    assert r.status == 504


# ---- strait check: refused fields and kinds -------------------------------


def check(path, *args):
    return subprocess.run([STRAIT, "check", *args, str(path)],
                          capture_output=True, text=True, timeout=60)


REFUSED = """apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: r, namespace: default}
spec:
  parentRefs: [{name: edge}]
  rules:
  - retry: {attempts: 2}
    backendRefs: [{name: a, port: 80}]
"""


def test_unsupported_field_is_refused_with_its_name(tmp_path):
    f = tmp_path / "r.yaml"
    f.write_text(REFUSED)
    r = check(f)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "r.yaml:7:" in r.stdout and "spec.rules[0].retry" in r.stdout, r.stdout
    assert "not supported by strait yet" in r.stdout


def test_unimplemented_kind_is_refused(tmp_path):
    f = tmp_path / "g.yaml"
    f.write_text("""apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: {name: g, namespace: default}
spec: {}
""")
    r = check(f)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "GRPCRoute is not supported by strait yet" in r.stdout, r.stdout


def test_check_reports_unhappy_conditions_and_json_status(tmp_path):
    f = tmp_path / "x.yaml"
    f.write_text("""apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: edge, namespace: default}
spec:
  gatewayClassName: istio
  listeners: [{name: web, port: 8080, protocol: HTTP}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: r, namespace: default}
spec:
  parentRefs: [{name: nosuch}]
  rules: [{backendRefs: [{name: a, port: 80}]}]
""")
    r = check(f)
    assert "x.yaml:12:" in r.stdout, r.stdout
    assert "Accepted=False reason NoMatchingParent" in r.stdout, r.stdout


# ---- from the Kubernetes API ----------------------------------------------


def test_gateway_api_objects_from_the_kubernetes_api(tmp_path):
    """The same kinds read by config.kubernetes (the API stand-in): a
    Gateway of class istio (no GatewayClass object needed, as istiod makes
    it), an HTTPRoute, a Service and its EndpointSlice route traffic, and
    a route deleted through the API is gone."""
    from k8s_api import KubeAPI
    from test_k8s_source import eslice, kube_conf, service
    api = KubeAPI(tmp_path)
    up = HttpUpstream()
    st = None
    try:
        port = free_port()
        api.apply({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
                   "metadata": {"name": "edge", "namespace": "default"},
                   "spec": {"gatewayClassName": "istio",
                            "addresses": [{"value": "127.0.0.1"}],
                            "listeners": [{"name": "web", "port": port,
                                           "protocol": "HTTP"}]}})
        api.apply({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
                   "metadata": {"name": "r", "namespace": "default",
                                "creationTimestamp": "2026-01-01T00:00:00Z"},
                   "spec": {"parentRefs": [{"name": "edge"}],
                            "rules": [{"backendRefs": [{"name": "web", "port": 80}]}]}})
        api.apply(service())
        api.apply(eslice("web-a", "web", up.port))
        st = Strait(tmp_path, extra=kube_conf(api, tmp_path)).start()
        wait_for(lambda: served_plain(port, "/k") == 200, 10,
                 "a route from the API:\n" + st.log()[-2000:])
        assert up.requests[-1]["path"] == "/k"
        assert st.stats()["kubernetes.HTTPRoute.objects"] == 1
        api.delete("HTTPRoute", "default", "r")
        wait_for(lambda: served_plain(port, "/k") == 404, 10, "the route gone")
    finally:
        if st is not None:
            finish_strait(st)
        up.stop()
        api.stop()


def served_plain(port, path):
    try:
        return req(port, path)[0].status
    except OSError:
        return None


def test_check_json_has_each_objects_status(tmp_path):
    f = tmp_path / "x.yaml"
    f.write_text("""apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: edge, namespace: default}
spec:
  gatewayClassName: istio
  listeners: [{name: web, port: 8080, protocol: HTTP}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: r, namespace: default, generation: 7}
spec:
  parentRefs: [{name: edge, sectionName: nosuch}]
""")
    r = check(f, "-o", "json")
    out = json.loads(r.stdout)
    st = {x["origin"]: x["status"] for x in out if x["code"] == "STR0014"}
    p = st["HTTPRoute default/r"]["parents"][0]
    assert p["parentRef"]["sectionName"] == "nosuch"
    assert conds(p)["Accepted"] == ("False", "NoMatchingParent")
    assert all(c["observedGeneration"] == 7 for c in p["conditions"])
    web = st["Gateway default/edge"]["listeners"][0]
    assert web["attachedRoutes"] == 0
    assert any(x["code"] == "STR0013" and x["line"] == 12 for x in out), out


def many_rules(n_rules, n_matches):
    rules = "".join(
        "  - matches: [" + ", ".join(
            f"{{path: {{type: Exact, value: /r{i}m{k}}}}}" for k in range(n_matches))
        + "]\n    backendRefs: [{name: a, port: 80}]\n" for i in range(n_rules))
    return f"""apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: big, namespace: default}}
spec:
  parentRefs: [{{name: edge}}]
  rules:
{rules}"""


@pytest.mark.parametrize("rules,matches,error", [
    (16, 1, None),
    (17, 1, "spec.rules"),                 # 16 rules a route
    (1, 64, None),
    (1, 65, "spec.rules[0].matches"),      # 64 matches a rule
    (2, 64, None),
    (3, 43, "129 matches in all"),         # 128 matches a route
])
def test_route_limits_are_the_apis(tmp_path, rules, matches, error):
    f = tmp_path / "big.yaml"
    f.write_text(many_rules(rules, matches))
    r = check(f)
    if error is None:
        assert "Error" not in r.stdout, r.stdout
    else:
        assert r.returncode == 1 and error in r.stdout, r.stdout


def test_listener_limit_is_64(tmp_path):
    def gw(n):
        ls = ", ".join(f"{{name: l{i}, port: {10000 + i}, protocol: HTTP}}"
                       for i in range(n))
        return f"""apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: edge, namespace: default}}
spec: {{gatewayClassName: istio, listeners: [{ls}]}}
"""
    f = tmp_path / "gw.yaml"
    f.write_text(gw(64))
    assert "Error" not in check(f).stdout
    f.write_text(gw(65))
    r = check(f)
    assert r.returncode == 1 and "spec.listeners" in r.stdout, r.stdout


# ---- from etcd --------------------------------------------------------------


def test_gateway_api_objects_from_etcd(tmp_path):
    """`strait apply` of a Gateway, an HTTPRoute and a ServiceEntry into
    etcd (config.etcd) routes traffic; the keys are KIND/NS/NAME as for
    Istio's kinds."""
    from etcd_util import Cluster
    cluster = Cluster(tmp_path, 1).start()
    up = HttpUpstream()
    st = None
    try:
        port = free_port()
        f = tmp_path / "gwapi.yaml"
        f.write_text(f"""apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: edge-etcd, namespace: default}}
spec:
  gatewayClassName: strait
  addresses: [{{value: 127.0.0.1}}]
  listeners: [{{name: web, port: {port}, protocol: HTTP}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: r, namespace: default}}
spec:
  parentRefs: [{{name: edge-etcd}}]
  rules: [{{backendRefs: [{{name: a, port: {up.port}}}]}}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: a, namespace: default}}
spec:
  hosts: [a.default.svc.cluster.local]
  resolution: STATIC
  ports: [{{number: {up.port}, name: http, protocol: HTTP}}]
  endpoints: [{{address: 127.0.0.1}}]
""")
        r = subprocess.run([STRAIT, "apply", "-f", str(f), "--endpoints",
                            ",".join(cluster.endpoints), "--prefix", "/gwapi"],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "HTTPRoute default/r created" in r.stdout, r.stdout
        st = Strait(tmp_path, extra=(
            f"config:\n  etcd:\n    endpoints: [{', '.join(cluster.endpoints)}]\n"
            f"    prefix: /gwapi\n")).start()
        wait_for(lambda: served_plain(port, "/etcd") == 200, 15,
                 "a route from etcd:\n" + st.log()[-2000:])
        assert up.requests[-1]["path"] == "/etcd"
    finally:
        if st is not None:
            finish_strait(st)
        up.stop()
        cluster.kill()
