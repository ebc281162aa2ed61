"""config.kubernetes against the Kubernetes API stand-in (k8s_api.py):
resources applied through the API take effect, a bad object is named and
left out, one watch per (kind, namespace, selector) whatever the churn and
the reloads, 410 Expired relists and diffs, reconnects after an API
restart are spread by jitter, readiness is Istio's gateway pod's, and a
rotated token is used."""
import json
import os
import signal
import statistics
import subprocess
import time

import pytest

from conftest import free_port, responder, rss_kib, wait_for
from k8s_api import KubeAPI

ASAN = bool(os.environ.get("ASAN_OPTIONS"))
NODE = "node: {labels: {istio: ingressgateway}}\n"


@pytest.fixture
def api(tmp_path):
    a = KubeAPI(tmp_path)
    yield a
    a.stop()


def token_file(tmp_path, token="test-token"):
    p = tmp_path / "token"
    tmp = tmp_path / "token.tmp"
    tmp.write_text(token + "\n")
    os.replace(tmp, p)
    return p


def kube_conf(api, tmp_path, extra="", kinds=None, namespaces=None):
    tok = token_file(tmp_path) if not (tmp_path / "token").exists() else tmp_path / "token"
    out = (f"config:\n  debounce: 20ms\n  kubernetes:\n    enabled: true\n"
           f"    server: {api.url}\n    tokenFile: {tok}\n    caFile: {api.ca}\n")
    if kinds is not None:
        out += f"    kinds: [{', '.join(kinds)}]\n"
    if namespaces is not None:
        out += f"    namespaces: [{', '.join(namespaces)}]\n"
    return out + extra


def gateway(port, name="gw", ns="default"):
    return {"apiVersion": "networking.istio.io/v1", "kind": "Gateway",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"selector": {"istio": "ingressgateway"},
                     "servers": [{"port": {"number": port, "name": "http",
                                           "protocol": "HTTP"},
                                  "bind": "127.0.0.1", "hosts": ["*"]}]}}


def vservice(name="web", host="web", port=80, ns="default", gw="gw", prefix="/"):
    return {"apiVersion": "networking.istio.io/v1", "kind": "VirtualService",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"hosts": ["*"], "gateways": [gw],
                     "http": [{"match": [{"uri": {"prefix": prefix}}],
                               "route": [{"destination": {
                                   "host": host, "port": {"number": port}}}]}]}}


def service(name="web", ns="default", port=80):
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name, "namespace": ns, "labels": {"app": name}},
            "spec": {"ports": [{"name": "http", "port": port, "protocol": "TCP",
                                "targetPort": 8080}],
                     "selector": {"app": name}},
            "status": {"loadBalancer": {}}}


def eslice(name, svc, port, ns="default", ip="127.0.0.1", labels=None):
    lab = {"kubernetes.io/service-name": svc}
    lab.update(labels or {})
    return {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "addressType": "IPv4",
            "metadata": {"name": name, "namespace": ns, "labels": lab},
            "endpoints": [{"addresses": [ip], "conditions": {"ready": True}}],
            "ports": [{"name": "http", "port": port, "protocol": "TCP"}]}


def get(port, path="/"):
    p = subprocess.run(["curl", "-sS", "--max-time", "10", "-o", "-",
                        "-w", "\n%{http_code}", f"http://127.0.0.1:{port}{path}"],
                       capture_output=True, text=True, timeout=30)
    body, _, code = p.stdout.rpartition("\n")
    return (int(code) if code.isdigit() else None), body


def kstats(st):
    return st.stats()


def test_resources_from_the_api_take_effect(api, strait_factory, upstream_factory,
                                            tmp_path):
    """A Gateway, VirtualService, Service and EndpointSlice applied through
    the API route traffic; a change and a delete through the API follow."""
    up = upstream_factory(responder(lambda h: b"from-k8s"))
    up2 = upstream_factory(responder(lambda h: b"moved"))
    port = free_port()
    api.apply(gateway(port))
    api.apply(vservice())
    api.apply(service())
    api.apply(eslice("web-a", "web", up.port))
    st = strait_factory(extra=NODE + kube_conf(api, tmp_path)).start()
    wait_for(lambda: get(port) == (200, "from-k8s"), 10, "a route from the API")
    s = kstats(st)
    assert s["kubernetes.ready"] == 1
    assert s["kubernetes.Gateway.objects"] == 1
    assert s["kubernetes.EndpointSlice.synced"] == 1
    # An endpoint moves through a watch event.
    api.apply(eslice("web-a", "web", up2.port))
    wait_for(lambda: get(port) == (200, "moved"), 10, "the moved endpoint")
    # The VirtualService deleted: no route.
    api.delete("VirtualService", "default", "web")
    wait_for(lambda: get(port)[0] == 404, 10, "the route gone")
    # Every kind strait reads has its watch, and the Secrets' carries
    # Istio's filter.
    ws = api.watch_stats()
    plurals = {k[0] for k in ws}
    assert len(plurals) == 20, ws
    secret = [k for k in ws if k[0] == "secrets"]
    assert secret == [("secrets", "", "",
                       "type!=helm.sh/release.v1,type!=kubernetes.io/service-account-token")]
    prom = st.get("/stats/prometheus")[1]
    assert 'strait_kubernetes_synced{kind="Gateway"} 1' in prom
    assert 'strait_kubernetes_watches_opened_total{kind="Service"}' in prom


def test_bad_object_is_named_and_left_out(api, strait_factory, upstream_factory,
                                          tmp_path):
    """A VirtualService whose spec does not load is reported with its
    namespace/name and left out; the other objects still apply, and so do
    later changes."""
    up = upstream_factory(responder(lambda h: b"ok"))
    port = free_port()
    api.apply(gateway(port))
    api.apply(service())
    api.apply(eslice("web-a", "web", up.port))
    bad = vservice(name="broken", prefix="/b")
    bad["spec"]["http"][0]["timeout"] = "soon"
    api.apply(bad)
    api.apply(vservice())
    st = strait_factory(extra=NODE + kube_conf(api, tmp_path)).start()
    wait_for(lambda: get(port) == (200, "ok"), 10, "the good route")
    wait_for(lambda: "VirtualService team-b/broken" in st.log()
             or "VirtualService default/broken" in st.log(), 10, "the bad one named")
    s = kstats(st)
    assert s["kubernetes.VirtualService.left_out"] == 1
    assert s["kubernetes.VirtualService.objects"] == 2
    dump = json.loads(st.get("/config_dump")[1])
    left = dump["kubernetes"]["leftOut"]
    assert [(x["namespace"], x["name"]) for x in left] == [("default", "broken")]
    assert "timeout" in left[0]["error"]
    # Fixed through the API: it applies.
    bad["spec"]["http"][0]["timeout"] = "5s"
    api.apply(bad)
    wait_for(lambda: kstats(st)["kubernetes.VirtualService.left_out"] == 0, 10,
             "the fixed object taken")


def test_one_watch_per_kind_across_churn_and_reloads(api, strait_factory,
                                                     upstream_factory, tmp_path):
    """10,000 object changes and 1,000 reloads (SIGHUP and POST /reload
    alternately; fewer under ASan) leave exactly one watch per (kind,
    namespace, selector) open, and no watch is ever made again: the watches
    belong to the source, not to a snapshot or a reload."""
    changes, reloads = (2000, 200) if ASAN else (10000, 1000)
    up = upstream_factory(responder(lambda h: b"ok"))
    port = free_port()
    api.apply(gateway(port))
    api.apply(vservice())
    api.apply(service())
    api.apply(eslice("web-a", "web", up.port))
    conf = NODE + kube_conf(api, tmp_path, namespaces=["default", "team-b"],
                            extra="    labelSelectors: {Secret: \"strait.io/credential=true\"}\n")
    st = strait_factory(extra=conf).start()
    wait_for(lambda: get(port) == (200, "ok"), 10, "a route from the API")
    wait_for(lambda: api.open_watches() == 37, 10, "37 watches")
    keys = set(api.watch_stats())
    # 17 namespaced kinds in 2 namespaces (Pod among them), Namespace, Node and
    # GatewayClass cluster-wide.
    assert len(keys) == 37, keys
    assert ("secrets", "team-b", "strait.io/credential=true",
            "type!=helm.sh/release.v1,type!=kubernetes.io/service-account-token") in keys
    for i in range(changes):
        sl = eslice(f"churn-{i % 50}", "web", up.port, labels={"round": str(i)})
        api.apply(sl)
    base = kstats(st)["server.reloads_ok"]
    for i in range(reloads):
        # One at a time: signals sent together would merge into one.
        if i % 2:
            st.signal(signal.SIGHUP)
        else:
            assert st.get("/reload", method="POST")[0] == 200
        wait_for(lambda: kstats(st)["server.reloads_ok"] >= base + i + 1, 10,
                 f"reload {i + 1}")
        if i % 100 == 0:
            assert api.open_watches() == 37
    want = api.rv
    # Every change was seen: the last one is held.
    wait_for(lambda: json.loads(st.get("/config_dump")[1])["kubernetes"]["objects"] >= 54,
             30, "the churned slices")
    ws = api.watch_stats()
    assert set(ws) == keys, ws
    for k, (open_now, most, total) in ws.items():
        assert (open_now, most, total) == (1, 1, 1), (k, ws[k])
    s = kstats(st)
    opened = sum(v for k, v in s.items() if k.endswith(".watches_opened"))
    assert opened == 37, s
    assert s["kubernetes.EndpointSlice.events"] >= changes
    assert get(port) == (200, "ok")
    assert api.rv == want


def service_names(st):
    dump = json.loads(st.get("/config_dump")[1])
    return sorted(r["name"] for r in dump["resources"]["resources"]
                  if r["kind"] == "Service")


def test_410_expired_relists_and_diffs(api, strait_factory, tmp_path):
    """Objects deleted and added while strait's watch fell behind the
    history the API keeps: the watch gets 410 Expired (as an ERROR event in
    a 200 stream, then as a plain 410 answer), strait lists again with
    resourceVersion="" and diffs: the deleted object is gone, the new one
    is there, nothing is duplicated."""
    for n in ("a", "b", "c"):
        api.apply(service(name=n))
    # Pages of 2: the lists come in two parts (a continue token).
    st = strait_factory(extra=kube_conf(api, tmp_path, kinds=["Service"],
                                        extra="    pageSize: 2\n"
                                              "    backoff: 100ms\n")).start()
    assert kstats(st)["kubernetes.Service.objects"] == 3
    assert any("continue=" in r[2] for r in api.requests)
    assert all("limit=2" in r[2] for r in api.requests if "watch=1" not in r[2])
    for rnd, as_status in enumerate((False, True)):
        api.expired_as_status = as_status
        lists_before = sum(1 for r in api.requests if "watch=1" not in r[2])
        api.paused = True
        gone, new = ("b", "d") if rnd == 0 else ("c", "e")
        api.delete("Service", "default", gone)
        api.apply(service(name=new))
        api.compact()
        api.cut_watches()
        api.paused = False
        wait_for(lambda: kstats(st)["kubernetes.Service.expired"] == rnd + 1, 10,
                 "410 Expired")
        wait_for(lambda: kstats(st)["kubernetes.Service.relists"] == rnd + 1, 10,
                 "the relist")
        want = ["a", "c", "d"] if rnd == 0 else ["a", "d", "e"]
        wait_for(lambda: service_names(st) == want, 10, f"the snapshot {want}")
        assert kstats(st)["kubernetes.Service.objects"] == 3
        relist = [r for r in api.requests if "watch=1" not in r[2]][lists_before:]
        assert relist and "resourceVersion" not in relist[0][2], relist
    ws = api.watch_stats()
    assert all(v[1] == 1 for v in ws.values()), ws


def test_reconnect_after_api_restart_is_spread(api, strait_factory, tmp_path):
    """54 watches (17 kinds in 3 namespaces, Namespace, Node and GatewayClass
    cluster-wide) cut at
    once by an API restart come back spread by their jittered backoff
    (client-go's: 0.8 s doubling, jitter 1.0), not in one burst."""
    conf = kube_conf(api, tmp_path, namespaces=["default", "team-b", "team-c"])
    st = strait_factory(extra=conf).start()
    wait_for(lambda: api.open_watches() == 54, 10, "54 watches")
    keys = set(api.watch_stats())
    assert len(keys) == 54
    t0 = time.monotonic()
    api.restart(down_for=0.3)
    wait_for(lambda: api.open_watches() == 54, 20, "every watch back")
    first = {}
    for t, k in api.watch_starts:
        if t > t0 and k not in first:
            first[k] = t
    times = sorted(first.values())
    assert len(times) == 54
    spread = times[-1] - times[0]
    # Far from a burst (all 54 at once): at most half within any 100 ms
    # (the stand-in accepts TLS on one thread, which bunches a little).
    most = max(sum(1 for u in times if t <= u < t + 0.1) for t in times)
    print(f"reconnect spread {spread:.3f}s, stdev "
          f"{statistics.pstdev(times):.3f}s, most in 100 ms: {most}/54")
    assert spread >= 0.4, times
    assert most <= 25, (most, times)
    assert all(v[0] == 1 for v in api.watch_stats().values())
    assert kstats(st)["kubernetes.ready"] == 1


def test_readiness_latches_and_token_rotation(api, strait_factory,
                                             upstream_factory, tmp_path):
    """/healthz/ready (admin and readiness.address) is 503 until every kind
    was listed (here: the token file holds a stale token the API refuses),
    200 once the kubelet's rotated token is in the file (read again before
    each request), still 200 while the API is down (latched), and 503 from
    SIGTERM on."""
    token_file(tmp_path, "stale-token")
    rport = free_port()
    up = upstream_factory(responder(lambda h: b"ok"))
    port = free_port()
    api.apply(gateway(port))
    api.apply(vservice())
    api.apply(service())
    api.apply(eslice("web-a", "web", up.port))
    conf = (NODE + kube_conf(api, tmp_path) +
            f"readiness: {{address: 127.0.0.1:{rport}}}\n"
            "drainTimeout: 30s\ndrainWindow: 3s\n")
    st = strait_factory(extra=conf).start(wait=False)

    def ready(path_port=None):
        import urllib.request, urllib.error
        url = (f"http://127.0.0.1:{path_port}/healthz/ready" if path_port
               else st.url("/healthz/ready"))
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()
        except OSError:
            return None, ""

    wait_for(lambda: "401" in ready()[1], 10, "the refused token reported")
    code, body = ready()
    assert code == 503 and "not synced yet" in body, body
    assert ready(rport)[0] == 503
    # The kubelet rotates the token: the next attempt reads it.
    token_file(tmp_path, "test-token")
    wait_for(lambda: ready()[0] == 200, 15, "ready after the rotation")
    assert ready(rport)[0] == 200
    assert get(port) == (200, "ok")
    used = {r[3] for r in api.requests[-5:]}
    assert used == {"test-token"}, used
    # Rotated again while watching: the watches made after use it.
    api.tokens.add("rotated-token")
    token_file(tmp_path, "rotated-token")
    api.cut_watches()
    wait_for(lambda: any(r[3] == "rotated-token" and "watch=1" in r[2]
                         for r in api.requests), 10, "the rotated token used")
    # The API goes away: still ready (latched), the last snapshot serves.
    errors = sum(v for k, v in kstats(st).items() if k.endswith(".errors"))
    api.stop()
    wait_for(lambda: sum(v for k, v in kstats(st).items()
                         if k.endswith(".errors")) > errors, 10, "the outage seen")
    assert ready()[0] == 200 and ready(rport)[0] == 200
    assert get(port) == (200, "ok")
    api.start()
    st.signal(signal.SIGTERM)
    wait_for(lambda: ready(rport)[0] in (503, None), 10, "503 on SIGTERM")
    assert ready()[0] == 503


def test_missing_crd_is_empty_not_an_outage(api, strait_factory, tmp_path):
    """A kind whose CRD is not installed (404) is reported and held empty:
    strait is ready; once the CRD is there its objects are listed."""
    api.missing = {"luapolicies", "requestauthentications"}
    conf = kube_conf(api, tmp_path, extra="    backoff: 50ms\n    backoffMax: 500ms\n")
    st = strait_factory(extra=conf).start()
    s = kstats(st)
    assert s["kubernetes.ready"] == 1
    assert s["kubernetes.LuaPolicy.missing"] == 1
    assert s["kubernetes.LuaPolicy.synced"] == 1
    assert "not served by the API server" in st.log()
    api.missing = set()
    api.apply({"apiVersion": "security.istio.io/v1", "kind": "RequestAuthentication",
               "metadata": {"name": "jwt", "namespace": "default"},
               "spec": {"jwtRules": [{"issuer": "https://issuer.test",
                                      "jwks": "{\"keys\":[]}"}]}})
    wait_for(lambda: kstats(st)["kubernetes.RequestAuthentication.objects"] == 1,
             10, "the CRD's object listed")
    assert kstats(st)["kubernetes.RequestAuthentication.missing"] == 0


def test_in_cluster_defaults_and_kubeconfig(api, strait_factory, tmp_path):
    """In-cluster: KUBERNETES_SERVICE_HOST/PORT and the service-account
    files (paths overridden for the test). A kubeconfig's current-context:
    server, certificate-authority-data and token."""
    import base64
    api.apply(service(name="a"))
    tok = token_file(tmp_path)
    env = dict(os.environ, KUBERNETES_SERVICE_HOST="127.0.0.1",
               KUBERNETES_SERVICE_PORT=str(api.port))
    conf = (f"config:\n  kubernetes:\n    enabled: true\n    tokenFile: {tok}\n"
            f"    caFile: {api.ca}\n    kinds: [Service]\n")
    st = strait_factory(extra=conf).start(env=env)
    assert kstats(st)["kubernetes.Service.objects"] == 1
    assert "(in-cluster)" in st.log()
    st.stop()
    ca = base64.b64encode(open(api.ca, "rb").read()).decode()
    kc = tmp_path / "kubeconfig"
    kc.write_text(f"""apiVersion: v1
kind: Config
current-context: test
contexts:
- name: other
  context: {{cluster: nowhere, user: nobody}}
- name: test
  context: {{cluster: stand-in, user: strait, namespace: default}}
clusters:
- name: stand-in
  cluster:
    server: {api.url}
    certificate-authority-data: {ca}
users:
- name: strait
  user:
    token: test-token
""")
    conf2 = f"config:\n  kubernetes:\n    enabled: true\n    kubeconfig: {kc}\n    kinds: [Service]\n"
    st2 = strait_factory(extra=conf2)
    st2.admin_port = free_port()
    st2.write_config("", conf2)
    st2.start()
    assert kstats(st2)["kubernetes.Service.objects"] == 1
    assert "kubeconfig" in st2.log()


@pytest.mark.parametrize("conf, message", [
    ("config:\n  kubernetes: {enabled: true, server: \"https://127.0.0.1:1\", kinds: [ConfigMap]}\n",
     "'ConfigMap' is not a kind strait reads"),
    ("config:\n  kubernetes: {enabled: true, server: \"https://127.0.0.1:1\", "
     "labelSelectors: {Deployment: a=b}}\n", "'Deployment' is not a kind"),
    ("config:\n  etcd: {endpoints: [\"http://127.0.0.1:1\"]}\n  kubernetes: "
     "{enabled: true, server: \"https://127.0.0.1:1\"}\n", "cannot both be sources"),
    ("config:\n  kubernetes: {enabled: true, server: \"ftp://x:1\"}\n",
     "expected https://HOST:PORT"),
    ("config:\n  kubernetes: {enabled: true, server: \"https://127.0.0.1:1\", "
     "backoff: 2s, backoffMax: 1s}\n", "shorter than backoff"),
    ("config:\n  kubernetes: {enabled: true, server: \"https://127.0.0.1:1\", "
     "namespaces: [\"Bad_NS\"]}\n", "not a namespace name"),
    # 64 namespaces at most (64 watches per kind): one more is refused.
    ("config:\n  kubernetes: {enabled: true, server: \"https://127.0.0.1:1\", "
     "namespaces: [" + ", ".join(f"n{i}" for i in range(65)) + "]}\n",
     "config.kubernetes.namespaces"),
    ("config:\n  kubernetes: {enabled: true, server: \"https://127.0.0.1:1\", "
     "pageSize: 0}\n", "config.kubernetes.pageSize"),
    ("config:\n  kubernetes: {enabled: true, server: \"https://127.0.0.1:1\", "
     "maxResponseBytes: 4095}\n", "config.kubernetes.maxResponseBytes"),
])
def test_bootstrap_refuses_bad_kubernetes_settings(tmp_path, conf, message):
    b = tmp_path / "strait.yaml"
    b.write_text(conf)
    from conftest import STRAIT
    p = subprocess.run([STRAIT, "check", "-c", str(b)], capture_output=True,
                       text=True, timeout=30)
    assert p.returncode != 0
    assert message in p.stderr, p.stderr


@pytest.mark.parametrize("user, message", [
    ("    exec: {command: aws}\n", "exec is not supported"),
    ("    client-certificate-data: AAAA\n    client-key-data: AAAA\n",
     "client-certificate-data is not supported"),
    ("    username: admin\n    password: x\n", "username is not supported"),
])
def test_kubeconfig_refuses_what_strait_does_not_implement(tmp_path, user, message):
    kc = tmp_path / "kubeconfig"
    kc.write_text(f"""current-context: c
contexts:
- name: c
  context: {{cluster: k, user: u}}
clusters:
- name: k
  cluster: {{server: "https://127.0.0.1:1"}}
users:
- name: u
  user:
{user}""")
    from conftest import STRAIT
    b = tmp_path / "strait.yaml"
    b.write_text(f"admin: {{address: 127.0.0.1:{free_port()}}}\n"
                 f"config:\n  kubernetes: {{enabled: true, kubeconfig: \"{kc}\"}}\n")
    for cmd in ("run", "check"):
        p = subprocess.run([STRAIT, cmd, "-c", str(b)], capture_output=True,
                           text=True, timeout=30)
        assert p.returncode != 0
        assert message in p.stderr, p.stderr
        assert str(kc) in p.stderr


def test_endpointslice_relabel_churn_memory_flat(api, strait_factory,
                                                 upstream_factory, tmp_path):
    """100,000 EndpointSlice relabels through the API (1,000 slices moved
    between two Services each round, 100 rounds; fewer under ASan): traffic
    follows the labels every round, and the resident size after the
    warm-up does not grow (Istio 1.28.10's reverse-index leak: every index
    from a key to its dependants must drop what the old label built)."""
    n_slices, rounds, warmup = (1000, 20, 5) if ASAN else (1000, 100, 10)
    ups = [upstream_factory(responder(lambda h: b"a")),
           upstream_factory(responder(lambda h: b"b"))]
    port = free_port()
    api.apply(gateway(port))
    api.apply(service(name="svc-a"))
    api.apply(service(name="svc-b"))
    api.apply(vservice(name="a", host="svc-a", prefix="/a"))
    api.apply(vservice(name="b", host="svc-b", prefix="/b"))

    def round_(r):
        svc = "svc-a" if r % 2 == 0 else "svc-b"
        for i in range(n_slices):
            api.apply(eslice(f"s-{i}", svc, ups[r % 2].port,
                             labels={"round": str(r), "shard": f"x{i % 7}"}))

    round_(0)
    conf = NODE + kube_conf(api, tmp_path, kinds=["Gateway", "VirtualService",
                                                  "Service", "EndpointSlice"])
    st = strait_factory(workers=1, extra=conf)
    env = dict(os.environ)
    env["ASAN_OPTIONS"] = (env.get("ASAN_OPTIONS", "") +
                           ":quarantine_size_mb=1").lstrip(":")
    st.start(env=env)
    base = None
    t0 = time.monotonic()
    for r in range(rounds + 1):
        if r > 0:
            events = kstats(st)["kubernetes.EndpointSlice.events"]
            round_(r)
            wait_for(lambda: kstats(st)["kubernetes.EndpointSlice.events"]
                     >= events + n_slices, 60, f"round {r}'s events")
        live, dead = ("/a", "/b") if r % 2 == 0 else ("/b", "/a")
        want = "a" if r % 2 == 0 else "b"
        wait_for(lambda: get(port, live) == (200, want)
                 and get(port, dead)[0] == 503, 30, f"round {r}'s labels")
        if r == warmup:
            base = rss_kib(st.proc.pid)
    grown = rss_kib(st.proc.pid) - base
    took = time.monotonic() - t0
    print(f"{rounds * n_slices} relabels in {took:.1f}s; RSS after warm-up "
          f"{base} KiB, grown {grown} KiB")
    s = kstats(st)
    assert s["kubernetes.EndpointSlice.objects"] == n_slices
    assert s["kubernetes.EndpointSlice.watches_opened"] == 1
    assert grown < 8 * 1024, f"RSS grew {grown} KiB over {rounds - warmup} rounds"


def test_credential_secret_and_namespace_from_the_api(api, strait_factory,
                                                      upstream_factory, tmp_path):
    """A Gateway's credentialName is a kubernetes.io/tls Secret read from
    the API (through Istio's field selector: a service-account token is
    never fetched), and a Namespace object loads too."""
    import base64
    from httpd import make_cert
    crt, key = make_cert(str(tmp_path), "web", "web.example.com",
                         ["web.example.com"])
    b64 = lambda p: base64.b64encode(open(p, "rb").read()).decode()
    up = upstream_factory(responder(lambda h: b"tls-ok"))
    port = free_port()
    gw = gateway(port)
    gw["spec"]["servers"][0].update(
        {"port": {"number": port, "name": "https", "protocol": "HTTPS"},
         "tls": {"mode": "SIMPLE", "credentialName": "web-cert"}})
    api.apply(gw)
    api.apply(vservice())
    api.apply(service())
    api.apply(eslice("web-a", "web", up.port))
    # In the gateway's namespace (the node's, istio-system), as istiod
    # looks for it.
    api.apply({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
               "metadata": {"name": "web-cert", "namespace": "istio-system"},
               "data": {"tls.crt": b64(crt), "tls.key": b64(key)}})
    api.apply({"apiVersion": "v1", "kind": "Secret",
               "type": "kubernetes.io/service-account-token",
               "metadata": {"name": "default-token", "namespace": "default"},
               "data": {"token": "c2VjcmV0"}})
    api.apply({"apiVersion": "v1", "kind": "Namespace",
               "metadata": {"name": "default", "labels": {"team": "a"}}})
    creds = tmp_path / "credentials"
    creds.mkdir()
    st = strait_factory(extra=NODE + kube_conf(api, tmp_path) +
                        f"credentials: {{dir: \"{creds}\"}}\n").start()

    def tls_get():
        p = subprocess.run(["curl", "-sS", "--max-time", "10", "--cacert", crt,
                            "--resolve", f"web.example.com:{port}:127.0.0.1",
                            f"https://web.example.com:{port}/"],
                           capture_output=True, text=True, timeout=30)
        return p.stdout
    wait_for(lambda: tls_get() == "tls-ok", 10, "HTTPS with the API's Secret")
    s = kstats(st)
    assert s["kubernetes.Secret.objects"] == 1
    assert s["kubernetes.Namespace.objects"] == 1
    assert s["kubernetes.Namespace.left_out"] == 0
    assert s["kubernetes.Secret.left_out"] == 0


def nested(depth):
    v = "leaf"
    for _ in range(depth):
        v = {"a": v}
    return v


def left_out(st):
    return json.loads(st.get("/config_dump")[1])["kubernetes"]["leftOut"]


def test_deep_object_is_left_out_and_the_watch_goes_on(api, strait_factory,
                                                       upstream_factory,
                                                       tmp_path):
    """An object nested deeper than strait reads (70 levels, past 64) is
    named and left out, in the list and in the watch; the kind's watch goes
    on and a later normal object applies."""
    up = upstream_factory(responder(lambda h: b"ok"))
    port = free_port()
    api.apply(gateway(port))
    api.apply(service())
    api.apply(eslice("web-a", "web", up.port))
    deep = vservice(name="deep", prefix="/deep")
    deep["spec"]["extra"] = nested(70)
    api.apply(deep)
    st = strait_factory(extra=NODE + kube_conf(api, tmp_path)).start()
    wait_for(lambda: kstats(st)["kubernetes.ready"] == 1, 10,
             "ready with the deep object listed")
    wait_for(lambda: "VirtualService default/deep is left out" in st.log(), 10,
             "the listed one named")
    # The same through the watch, then a normal object that must apply.
    deep2 = vservice(name="deep2", prefix="/deep2")
    deep2["spec"]["extra"] = nested(200)
    api.apply(deep2)
    # (The log is rate-limited per site: the dump names every one.)
    wait_for(lambda: len(left_out(st)) == 2, 10, "the watched one left out")
    api.apply(vservice())
    wait_for(lambda: get(port) == (200, "ok"), 10, "the later object applied")
    left = left_out(st)
    assert sorted((x["namespace"], x["name"]) for x in left) == [
        ("default", "deep"), ("default", "deep2")]
    assert all("nested more than 64 levels deep" in x["error"] for x in left)
    # Fixed through the API: taken.
    deep["spec"].pop("extra")
    api.apply(deep)
    wait_for(lambda: kstats(st)["kubernetes.VirtualService.left_out"] == 1, 10,
             "the fixed object taken")


def test_limits_one_past(api, strait_factory, tmp_path):
    """maxObjects: the object one past it is left out and logged, the
    others apply; maxResponseBytes: a watch event past it is reported by
    namespace/name (log, /config_dump leftOut, the errors counter) and
    left out, and the watch goes on: a later change applies. (It used to
    be retried from the same resourceVersion for ever.)"""
    for n in ("a", "b", "c", "d"):
        api.apply(service(name=n))
    conf = kube_conf(api, tmp_path, kinds=["Service"],
                     extra="    maxObjects: 3\n    maxResponseBytes: 4096\n")
    st = strait_factory(extra=conf).start()
    assert kstats(st)["kubernetes.Service.objects"] == 3
    wait_for(lambda: "maxObjects (3) objects are held" in st.log(), 10,
             "the fourth reported")
    wait_for(lambda: service_names(st) == ["a", "b", "c"], 10, "three applied")
    # One deleted: room for one, the next change takes it.
    api.delete("Service", "default", "a")
    api.apply(service(name="e"))
    wait_for(lambda: service_names(st) == ["b", "c", "e"], 10, "e in a's place")
    big = service(name="b")
    big["metadata"]["annotations"] = {"x": "y" * 4096}
    errors = kstats(st)["kubernetes.Service.errors"]
    watches = kstats(st)["kubernetes.Service.watches_opened"]
    api.apply(big)
    wait_for(lambda: service_names(st) == ["c", "e"], 10,
             "the big one left out")
    assert kstats(st)["kubernetes.Service.errors"] == errors + 1
    assert kstats(st)["kubernetes.Service.left_out"] == 1
    left = left_out(st)
    assert [(x["namespace"], x["name"]) for x in left] == [("default", "b")]
    assert "larger than config.kubernetes.maxResponseBytes" in \
        left[0]["error"], left
    assert "Service default/b is left out" in st.log()
    # The watch went on (not re-opened), and takes the next change.
    assert kstats(st)["kubernetes.Service.watches_opened"] == watches
    api.apply(service(name="b"))
    wait_for(lambda: service_names(st) == ["b", "c", "e"], 10,
             "b back once it fits")
    assert kstats(st)["kubernetes.ready"] == 1


def test_not_ready_while_the_first_snapshot_is_refused(api, strait_factory,
                                                       upstream_factory, tmp_path):
    """Every kind listed, but the snapshot they make is refused (a route to
    a host nothing declares, under REGISTRY_ONLY): not ready, as Istio's
    proxy with rejected config; ready once a change makes it valid."""
    up = upstream_factory(responder(lambda h: b"ok"))
    port = free_port()
    api.apply(gateway(port))
    api.apply(vservice())
    st = strait_factory(extra=NODE + kube_conf(api, tmp_path) +
                        "outboundTrafficPolicy: {mode: REGISTRY_ONLY}\n").start(wait=False)
    wait_for(lambda: "Referenced host not found" in st.log(), 10, "the refusal")
    code, body, _ = st.get("/healthz/ready")
    assert code == 503, body
    assert kstats(st)["kubernetes.ready"] == 0
    api.apply(service())
    api.apply(eslice("web-a", "web", up.port))
    wait_for(lambda: st.get("/healthz/ready")[0] == 200, 10, "ready")
    assert get(port) == (200, "ok")


def query(path):
    import urllib.parse
    return dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(path).query,
                                       keep_blank_values=True))


def test_watch_requests_timeouts_and_bookmarks(api, strait_factory, tmp_path):
    """The watch asks allowWatchBookmarks and a timeoutSeconds drawn in
    [minWatchTimeout, 2 x minWatchTimeout) (client-go's 5-10 minutes by
    default); a watch the server ends at its timeout is made again at once
    from the last resourceVersion, with no list and no error; bookmarks
    advance the resourceVersion held."""
    api.apply(service(name="a"))
    st = strait_factory(extra=kube_conf(api, tmp_path, kinds=["Service"])).start()
    wait_for(lambda: api.open_watches() == 1, 10, "the watch")
    q = query([r[2] for r in api.requests if "watch=1" in r[2]][0])
    assert 300 <= int(q["timeoutSeconds"]) < 600, q
    assert q["allowWatchBookmarks"] == "true"
    assert q["resourceVersion"] == str(api.rv)
    lists = [query(r[2]) for r in api.requests if "watch=1" not in r[2]]
    assert lists == [{"limit": "500", "resourceVersion": "0"}], lists
    api.bookmark_every = 0.3
    st.stop()
    st.kill()
    # The stand-in sees the closed watch at its next write (a bookmark).
    wait_for(lambda: api.open_watches() == 0, 10, "the first process's watch gone")
    api.requests.clear()
    api.watches.clear()
    short = kube_conf(api, tmp_path, kinds=["Service"],
                      extra="    minWatchTimeout: 2s\n")
    st2 = strait_factory(extra=short)
    st2.admin_port = free_port()
    st2.write_config("", short)
    st2.start()
    # A change to another kind: the Service watch's bookmarks carry the
    # newer resourceVersion.
    api.apply(gateway(free_port()))
    wait_for(lambda: json.loads(st2.get("/config_dump")[1])["kubernetes"]
             ["watchers"][0]["resourceVersion"] == str(api.rv), 10,
             "the bookmark's resourceVersion held")
    wait_for(lambda: kstats(st2)["kubernetes.Service.watches_opened"] >= 3, 20,
             "watches ended by their timeout and made again")
    watches = [query(r[2]) for r in api.requests if "watch=1" in r[2]]
    assert all(2 <= int(w["timeoutSeconds"]) < 4 for w in watches), watches
    assert watches[-1]["resourceVersion"] == str(api.rv)
    s = kstats(st2)
    assert s["kubernetes.Service.errors"] == 0
    assert s["kubernetes.Service.relists"] == 0
    assert sum(1 for r in api.requests if "watch=1" not in r[2]) == 1
    assert all(v[1] == 1 for v in api.watch_stats().values())


def test_backoff_doubles_with_jitter_and_resets(api, strait_factory, tmp_path):
    """Failures back off as client-go does: each delay in [d, 2d), d
    doubling from backoff, at most backoffMax/2 (so no delay is past
    backoffMax); after backoffReset of health the next delay starts from
    backoff again."""
    api.apply(service(name="a"))
    api.fail_with = 503
    conf = kube_conf(api, tmp_path, kinds=["Service"],
                     extra="    backoff: 100ms\n    backoffMax: 1600ms\n"
                           "    backoffReset: 1s\n")
    st = strait_factory(extra=conf).start(wait=False)
    wait_for(lambda: len(api.requests) >= 7, 30, "7 attempts")
    t = [r[0] for r in api.requests[:7]]
    gaps = [b - a for a, b in zip(t, t[1:])]
    print("backoff gaps", [round(g, 3) for g in gaps])

    def drawn():
        w = json.loads(st.get("/config_dump")[1])["kubernetes"]["watchers"][0]
        assert w["retriesDrawn"] == len(w["retryDelaysMs"]) <= 16, w
        return w["retryDelaysMs"]

    # The delays as strait drew them, each in [d, 2d): exact, whatever
    # the machine's load. The gaps the API saw can only be longer (each
    # delay starts after the failed answer was read), never shorter.
    delays = drawn()
    assert len(delays) >= 6, delays
    for ms, gap, d in zip(delays, gaps, (0.1, 0.2, 0.4, 0.8, 0.8, 0.8)):
        assert d * 1000 <= ms < 2 * d * 1000, (delays, d)
        assert gap >= ms / 1000 * 0.95, (gaps, delays)
    api.fail_with = None
    wait_for(lambda: api.open_watches() == 1, 10, "the watch")
    # Ready once the load after the list has ended, on the builder
    # thread: later than the watch opens.
    wait_for(lambda: kstats(st)["kubernetes.ready"] == 1, 10, "ready")
    # Healthy for longer than backoffReset: from 100 ms again. The wait is
    # the healthy period under test, not a synchronisation.
    time.sleep(1.2)
    start = len(api.requests)
    before = len(drawn())
    api.fail_with = 503
    api.cut_watches()
    wait_for(lambda: len(api.requests) - start >= 3, 10, "3 attempts")
    t = [r[0] for r in api.requests[start:start + 3]]
    gaps = [b - a for a, b in zip(t, t[1:])]
    after = drawn()[before:]
    # From 100 ms again, then 200 ms; a gap the API saw is at least the
    # shorter of the two.
    assert len(after) >= 2, after
    assert 100 <= after[0] < 200 and 200 <= after[1] < 400, after
    assert gaps[0] >= after[0] / 1000 * 0.95, (gaps, after)
    api.fail_with = None


def test_kubeconfig_client_certificate_files(api, strait_factory, tmp_path):
    """A kubeconfig whose user is a client certificate and key (files,
    paths relative to the kubeconfig, as kubectl reads them) and whose CA
    is certificate-authority (a file): x509 client authentication, no
    token."""
    import shutil
    from k8s_api import make_client_cert
    kdir = tmp_path / "kube"
    kdir.mkdir()
    pki = os.path.dirname(api.ca)
    crt, key = make_client_cert(pki, "strait-gw")
    for f in (crt, key, api.ca):
        shutil.copy(f, kdir)
    api.tokens.add("x509:strait-gw")
    api.apply(service(name="a"))
    kc = kdir / "config"
    kc.write_text(f"""apiVersion: v1
kind: Config
current-context: gw
contexts:
- {{name: gw, context: {{cluster: c, user: gw}}}}
clusters:
- {{name: c, cluster: {{server: "{api.url}", certificate-authority: ca.crt}}}}
users:
- {{name: gw, user: {{client-certificate: strait-gw.crt, client-key: strait-gw.key}}}}
""")
    conf = f"config:\n  kubernetes:\n    enabled: true\n    kubeconfig: {kc}\n    kinds: [Service]\n"
    st = strait_factory(extra=conf).start()
    assert kstats(st)["kubernetes.Service.objects"] == 1
    assert {r[3] for r in api.requests} == {"x509:strait-gw"}


def test_reload_keeps_the_watches_of_a_changed_section(api, strait_factory,
                                                       tmp_path):
    """config.kubernetes changed in the bootstrap and reloaded: the
    watches stay the process's (a warning says it takes a restart), no
    watch is made again."""
    api.apply(service(name="a"))
    conf = kube_conf(api, tmp_path, kinds=["Service"])
    st = strait_factory(extra=conf).start()
    wait_for(lambda: api.open_watches() == 1, 10, "the watch")
    st.write_config("", kube_conf(api, tmp_path, kinds=["Service", "Secret"],
                                  namespaces=["other"]))
    st.signal(signal.SIGHUP)
    wait_for(lambda: "config.kubernetes stays as it is until restart" in st.log(),
             10, "the warning")
    assert kstats(st)["server.reloads_ok"] == 1
    assert list(api.watch_stats().values()) == [[1, 1, 1]]
    assert "kubernetes.Secret.objects" not in kstats(st)


def test_a_watch_never_ended_by_the_server_is_ended(api, strait_factory,
                                                    tmp_path):
    """A server (or a proxy before it) that holds a watch open past its
    timeoutSeconds: strait ends it requestTimeout later and watches again,
    still one at a time."""
    api.ignore_timeout = True
    # Bookmarks are how the stand-in notices a watch strait closed.
    api.bookmark_every = 0.2
    api.apply(service(name="a"))
    conf = kube_conf(api, tmp_path, kinds=["Service"],
                     extra="    minWatchTimeout: 1s\n    requestTimeout: 500ms\n"
                           "    backoff: 50ms\n")
    st = strait_factory(extra=conf).start()
    wait_for(lambda: kstats(st)["kubernetes.Service.watches_opened"] >= 3, 15,
             "watches ended by strait and made again")
    assert "not ended by the server at its timeoutSeconds" in st.log()
    api.apply(service(name="b"))
    wait_for(lambda: kstats(st)["kubernetes.Service.objects"] == 2, 10,
             "events still arrive")
    wait_for(lambda: api.open_watches() == 1, 10, "one open watch")
    # strait closes one before making the next; the stand-in sees the
    # close at its next bookmark, so it may count the two together once.
    assert max(v[1] for v in api.watch_stats().values()) <= 2


def get_headers(port, path="/"):
    """(status, body, headers) of GET path; headers lower-cased."""
    import http.client
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        c.request("GET", path)
        r = c.getresponse()
        return r.status, r.read().decode(), {k.lower(): v for k, v in r.getheaders()}
    except OSError:
        return None, "", {}
    finally:
        c.close()


def test_luapolicy_from_the_api_runs(api, strait_factory, upstream_factory,
                                     tmp_path):
    """strait's own LuaPolicy (strait.io/v1alpha1), applied through the
    API, runs on the Gateway's requests; a change through the API follows,
    and a delete stops it."""
    up = upstream_factory(responder(lambda h: b"ok"))
    port = free_port()
    api.apply(gateway(port))
    api.apply(vservice())
    api.apply(service())
    api.apply(eslice("web-a", "web", up.port))

    def policy(tag):
        return {"apiVersion": "strait.io/v1alpha1", "kind": "LuaPolicy",
                "metadata": {"name": "tag", "namespace": "default"},
                "spec": {"targetRefs": [{"kind": "Gateway", "name": "gw"}],
                         "source": {"inline":
                                    "function on_response(h) h:headers()"
                                    f":set('x-lua', '{tag}') end"}}}
    api.apply(policy("from-k8s"))
    st = strait_factory(extra=NODE + kube_conf(api, tmp_path)).start()
    wait_for(lambda: get_headers(port)[2].get("x-lua") == "from-k8s", 10,
             "the LuaPolicy from the API")
    assert kstats(st)["kubernetes.LuaPolicy.objects"] == 1
    wait_for(lambda: api.watch_stats().get(("luapolicies", "", "", ""), [0])[0] == 1,
                 10, "its watch")
    api.apply(policy("changed"))
    wait_for(lambda: get_headers(port)[2].get("x-lua") == "changed", 10,
             "the changed LuaPolicy")
    api.delete("LuaPolicy", "default", "tag")
    wait_for(lambda: get_headers(port)[0] == 200 and
             "x-lua" not in get_headers(port)[2], 10, "the LuaPolicy gone")


def test_meshlink_from_the_api_links_the_site(api, strait_factory, tmp_path):
    """A MeshLink (strait.io/v1alpha1) applied through the API links this
    strait to the site that printed it: one catalog stream, the exported
    service merged; deleted through the API, the link and its entries
    go."""
    import yaml
    from test_meshlink import Site, exported
    from conftest import finish_strait
    b = Site(tmp_path, "site-b", "b.example", "net-b", gw="127.0.0.1:25443")
    try:
        b.start()
        b.apply("svc", exported("reviews.default.svc.cluster.local"))
        ml = yaml.safe_load(b.link_create("site-a"))
        ml["metadata"]["namespace"] = "istio-system"
        api.apply(ml)
        conf = (f"node: {{name: site-a, namespace: istio-system, network: net-a}}\n"
                f"trustDomain: a.example\n"
                f"ca: {{enabled: true, dir: {tmp_path / 'ca-a'}, "
                f"address: 127.0.0.1:{free_port()}}}\n" + kube_conf(api, tmp_path))
        st = strait_factory(extra=conf).start()

        def link():
            for l in json.loads(st.get("/links")[1])["links"]:
                if l["name"] == "site-b":
                    return l
            return None
        wait_for(lambda: link() is not None and link()["connected"] and
                 link()["services"] == 1, 15, "the link from the API")
        assert link()["namespace"] == "istio-system"
        assert kstats(st)["kubernetes.MeshLink.objects"] == 1
        wait_for(lambda: api.watch_stats().get(("meshlinks", "", "", ""), [0])[0] == 1,
                 10, "its watch")
        def names():
            return [r["name"] for r in json.loads(st.get("/config_dump")[1])
                    ["resources"]["resources"] if r["kind"] == "ServiceEntry"]
        # The link's entries are loaded with the next gathered reload
        # (config.debounce after the catalog came).
        wait_for(lambda: names() != [], 10, "the link's entries loaded")
        assert len(names()) == 1 and names()[0].startswith("site-b-"), names()
        assert b.links()["server"]["active"] == 1
        # The credential never shows, from the API as from a file.
        token = ml["spec"]["credential"]["token"]
        assert token.startswith("slk1.site-a.")
        assert token not in st.get("/config_dump")[1]
        assert token not in st.get("/links")[1]
        # Deleted through the API: the link and what it added are gone,
        # and site B sees the stream close.
        api.delete("MeshLink", "istio-system", "site-b")
        wait_for(lambda: link() is None, 10, "the link removed")
        wait_for(lambda: not any(
            r["kind"] == "ServiceEntry" for r in json.loads(
                st.get("/config_dump")[1])["resources"]["resources"]), 10,
            "its entries removed")
        wait_for(lambda: b.links()["server"]["active"] == 0, 10,
                 "B's stream closed")
    finally:
        finish_strait(b.s)


def node(name, region=None, zone=None, subzone=None):
    labels = {"kubernetes.io/hostname": name,
              "node-role.kubernetes.io/worker": ""}
    for k, v in (("topology.kubernetes.io/region", region),
                 ("topology.kubernetes.io/zone", zone),
                 ("topology.istio.io/subzone", subzone)):
        if v is not None:
            labels[k] = v
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": labels},
            "spec": {"podCIDR": "10.244.0.0/24", "providerID": "test://" + name},
            "status": {"capacity": {"cpu": "4"},
                       "images": [{"names": ["busybox"], "sizeBytes": 1}]}}


def test_endpointslice_locality_from_watched_nodes(api, strait_factory,
                                                   upstream_factory, tmp_path):
    """EndpointSlice endpoints take the locality of their nodeName's Node
    (its topology labels, watched through the API), so locality failover
    keeps traffic on the gateway's subzone, fails over to the next one
    when its endpoint is ejected, and follows a Node relabelled through
    the API."""
    ups = {n: upstream_factory(responder(lambda h, n=n: n.encode()))
           for n in ("near", "mid", "far")}
    port = free_port()
    api.apply(gateway(port))
    api.apply(vservice())
    api.apply(service())
    api.apply({"apiVersion": "networking.istio.io/v1", "kind": "DestinationRule",
               "metadata": {"name": "web", "namespace": "default"},
               "spec": {"host": "web", "trafficPolicy": {"outlierDetection": {
                   "consecutive5xxErrors": 1, "interval": "1s",
                   "baseEjectionTime": "1m", "maxEjectionPercent": 100}}}})
    for name, nodename in (("near", "n1"), ("mid", "n2"), ("far", "n3")):
        sl = eslice(f"web-{name}", "web", ups[name].port)
        sl["endpoints"][0]["nodeName"] = nodename
        sl["endpoints"][0]["zone"] = "not-used"
        api.apply(sl)
    api.apply(node("n1", "eu", "west", "a"))
    api.apply(node("n2", "eu", "west", "b"))
    api.apply(node("n3", "us", "east"))
    conf = ("node: {labels: {istio: ingressgateway}, locality: eu/west/a}\n"
            + kube_conf(api, tmp_path))
    st = strait_factory(extra=conf).start()
    wait_for(lambda: get(port) == (200, "near"), 10, "the route")

    def clusters():
        return st.get("/clusters")[1]
    body = clusters()
    for name, loc, prio in (("near", "eu/west/a", 0), ("mid", "eu/west/b", 1),
                            ("far", "us/east", 2)):
        assert f"::127.0.0.1:{ups[name].port}::locality::{loc}\n" in body, body
        assert f"::127.0.0.1:{ups[name].port}::priority::{prio}\n" in body, body
    assert kstats(st)["kubernetes.Node.objects"] == 3
    assert [get(port)[1] for _ in range(20)] == ["near"] * 20
    # The subzone's endpoint dies: ejected, traffic goes to the zone's
    # other subzone, not to the other region.
    ups["near"].stop()
    wait_for(lambda: get(port) == (200, "mid"), 10, "failover to n2's subzone")
    assert [get(port)[1] for _ in range(20)] == ["mid"] * 20
    # Through the API, n1 (whose endpoint is dead) moves to us/east and n3
    # to the gateway's subzone: far alone is level 0 and takes all.
    api.apply(node("n1", "us", "east"))
    api.apply(node("n3", "eu", "west", "a"))
    wait_for(lambda: f"::127.0.0.1:{ups['far'].port}::locality::eu/west/a\n"
             in clusters(), 10, "n3's new locality")
    wait_for(lambda: get(port) == (200, "far"), 10, "traffic to n3")
    got = [get(port)[1] for _ in range(20)]
    assert got == ["far"] * 20, (got, clusters())
