"""Istio's standard metrics on /stats/prometheus and the metrics port:
names, labels as Istio sets them at a gateway (reporter source, source_*
from the node, destination_* from the registry entry, BlackHoleCluster,
host fallback, unknown), Envoy's buckets, TCP bytes while a connection
lives, the label-set bound, extra labels, and the readiness port."""
import http.client
import socket
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from conftest import free_port, upstream_factory, echo_handler, wait_for  # noqa: F401
from httpd import http_listener, clusters

ENVOY_BUCKETS = ["0.5", "1", "5", "10", "25", "50", "100", "250", "500",
                 "1000", "2500", "5000", "10000", "30000", "60000", "300000",
                 "600000", "1800000", "3600000", "+Inf"]


def scrape(url):
    with urllib.request.urlopen(url, timeout=5) as r:
        assert r.status == 200
        return r.read().decode()


def settled(st, requests):
    """The exposition once the workers have recorded `requests` requests:
    a request is counted when its stream ends, which can be just after the
    client has read the response."""
    url = st.url("/stats/prometheus")
    box = {}

    def done():
        box["text"] = scrape(url)
        return value(box["text"], "istio_requests_total") == requests
    wait_for(done, 10, f"{requests} requests in istio_requests_total")
    return box["text"]


def samples(text, name):
    """[(labels, value)] of every sample called name."""
    out = []
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == name:
                out.append((s.labels, s.value))
    return out


def value(text, name, **want):
    got = [v for labels, v in samples(text, name)
           if all(labels.get(k) == w for k, w in want.items())]
    return sum(got) if got else None


def resources(gw_port, tcp_port, up_port, echo_port):
    return f"""apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {{name: gw, namespace: default}}
spec:
  selector: {{istio: ingressgateway}}
  servers:
  - port: {{number: {gw_port}, name: http, protocol: HTTP}}
    bind: 127.0.0.1
    hosts: ["*"]
  - port: {{number: {tcp_port}, name: tcp, protocol: TCP}}
    bind: 127.0.0.1
    hosts: ["*"]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: reviews, namespace: bookinfo}}
spec:
  hosts: [reviews.bookinfo.svc.cluster.local]
  location: MESH_INTERNAL
  resolution: STATIC
  ports: [{{number: 9080, name: http, protocol: HTTP}}]
  workloadSelector: {{labels: {{app: reviews}}}}
---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {{name: reviews-v1, namespace: bookinfo}}
spec:
  address: 127.0.0.1
  ports: {{http: {up_port}}}
  serviceAccount: bookinfo-reviews
  labels: {{app: reviews, version: v1}}
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: echo, namespace: default}}
spec:
  hosts: [echo.default.svc.cluster.local]
  location: MESH_INTERNAL
  resolution: STATIC
  ports: [{{number: {echo_port}, name: tcp, protocol: TCP}}]
  subjectAltNames: ["spiffe://cluster.local/ns/default/sa/echo"]
  endpoints: [{{address: 127.0.0.1}}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: hidden, namespace: elsewhere}}
spec:
  hosts: [api.hidden.test]
  exportTo: ["."]
  location: MESH_EXTERNAL
  resolution: STATIC
  ports: [{{number: 80, name: http, protocol: HTTP}}]
  endpoints: [{{address: 127.0.0.1}}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: front, namespace: default}}
spec:
  hosts: ["*"]
  gateways: [gw]
  http:
  - match: [{{uri: {{prefix: /nowhere}}}}]
    route:
    - destination: {{host: api.hidden.test}}
  - route:
    - destination: {{host: reviews.bookinfo.svc.cluster.local}}
  tcp:
  - match: [{{port: {tcp_port}}}]
    route:
    - destination: {{host: echo.default.svc.cluster.local, port: {{number: {echo_port}}}}}
"""


def start_gateway(strait_factory, tmp_path, up_port, echo_port, extra=""):
    conf = tmp_path / "conf.d"
    conf.mkdir()
    gw_port, tcp_port, mport, rport = (free_port() for _ in range(4))
    (conf / "r.yaml").write_text(resources(gw_port, tcp_port, up_port,
                                           echo_port))
    st = strait_factory(extra=(
        "node: {name: gw-1, namespace: istio-system, "
        "labels: {istio: ingressgateway, app: istio-ingressgateway, "
        "version: \"1.0\"}}\n"
        f"metrics: {{address: 127.0.0.1:{mport}}}\n"
        f"readiness: {{address: 127.0.0.1:{rport}}}\n"
        f"config: {{dir: \"{conf}\", debounce: 50ms}}\n" + extra))
    st.start()
    wait_for(lambda: _port_open(gw_port) and _port_open(tcp_port), 10,
             "gateway ports")
    return st, gw_port, tcp_port, mport, rport


def _port_open(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


def get(port, path, host="reviews.example.com"):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request("GET", path, headers={"Host": host})
    r = c.getresponse()
    body = r.read()
    c.close()
    return r.status, body


def test_http_labels_buckets_and_metrics_port(strait_factory, httpd_factory,
                                              upstream_factory, tmp_path):
    up = httpd_factory()
    echo = upstream_factory(echo_handler)
    st, gw, _, mport, _ = start_gateway(strait_factory, tmp_path, up.port,
                                        echo.port)
    for _ in range(5):
        assert get(gw, "/r")[0] == 200
    for _ in range(2):
        assert get(gw, "/r?status=500")[0] == 500
    assert get(gw, "/nowhere")[0] == 502

    text = settled(st, 8)
    # The dedicated port serves the same families, and nothing else.
    port_text = scrape(f"http://127.0.0.1:{mport}/stats/prometheus")
    assert "istio_requests_total" in port_text
    try:
        urllib.request.urlopen(f"http://127.0.0.1:{mport}/config_dump",
                               timeout=5)
        raise AssertionError("config_dump served on the metrics port")
    except urllib.error.HTTPError as e:
        assert e.code == 404

    ok = dict(reporter="source", source_workload="gw-1",
              source_workload_namespace="istio-system",
              source_app="istio-ingressgateway", source_version="1.0",
              source_canonical_service="istio-ingressgateway",
              source_canonical_revision="1.0", source_principal="unknown",
              source_cluster="unknown",
              destination_service="reviews.bookinfo.svc.cluster.local",
              destination_service_name="reviews.bookinfo.svc.cluster.local",
              destination_service_namespace="bookinfo",
              destination_workload="reviews-v1",
              destination_workload_namespace="bookinfo",
              destination_app="reviews", destination_version="v1",
              destination_canonical_service="reviews",
              destination_canonical_revision="v1",
              destination_principal=(
                  "spiffe://cluster.local/ns/bookinfo/sa/bookinfo-reviews"),
              destination_cluster="unknown",
              request_protocol="http", grpc_response_status="",
              response_flags="-", connection_security_policy="unknown")
    assert value(text, "istio_requests_total", response_code="200",
                 **ok) == 5, text
    assert value(text, "istio_requests_total", response_code="500",
                 **ok) == 2, [l for l in text.splitlines() if l.startswith("istio_requests_total")]
    # Every sample carries exactly Istio's labels.
    labels, _ = samples(text, "istio_requests_total")[0]
    assert set(labels) == set(ok) | {"response_code"}
    bh = value(text, "istio_requests_total", response_code="502",
               destination_service="BlackHoleCluster",
               destination_service_name="BlackHoleCluster",
               destination_workload="unknown", destination_app="unknown")
    assert bh == 1
    # Histograms: Envoy's default buckets, cumulative, count = requests.
    for name in ("istio_request_duration_milliseconds", "istio_request_bytes",
                 "istio_response_bytes"):
        les = [l["le"] for l, _ in samples(text, name + "_bucket")
               if l.get("response_code") == "200"]
        assert les == ENVOY_BUCKETS, (name, les)
        assert value(text, name + "_count", response_code="200", **ok) == 5
    # Sizes count head and body: the JSON echo is a few hundred bytes.
    rsum = value(text, "istio_response_bytes_sum", response_code="200", **ok)
    assert 5 * 100 < rsum < 5 * 4000
    qsum = value(text, "istio_request_bytes_sum", response_code="200", **ok)
    assert qsum >= 5 * len("GET/rreviews.example.comhttp")


def test_tcp_bytes_counted_while_the_connection_lives(
        strait_factory, httpd_factory, upstream_factory, tmp_path):
    up = httpd_factory()
    echo = upstream_factory(echo_handler)
    st, _, tcp, _, _ = start_gateway(strait_factory, tmp_path, up.port,
                                     echo.port)
    # destination_principal: the ServiceEntry's one subjectAltName.
    base = dict(reporter="source", request_protocol="tcp",
                destination_service="echo.default.svc.cluster.local",
                destination_principal="spiffe://cluster.local/ns/default/sa/echo",
                response_flags="-", connection_security_policy="unknown")

    def metric(name):
        return value(scrape(st.url("/stats/prometheus")), name, **base) or 0

    # start_gateway's probe of the port was a connection too.
    wait_for(lambda: metric("istio_tcp_connections_closed_total") ==
             metric("istio_tcp_connections_opened_total") == 1, 10,
             "the probe's connection closed")
    c = socket.create_connection(("127.0.0.1", tcp), timeout=10)
    c.sendall(b"x" * 1000)
    got = b""
    while len(got) < 1000:
        got += c.recv(65536)
    # The connection is still open: its bytes show already.
    wait_for(lambda: metric("istio_tcp_received_bytes_total") == 1000, 10,
             "received bytes of a live connection")
    wait_for(lambda: metric("istio_tcp_sent_bytes_total") == 1000, 10,
             "sent bytes of a live connection")
    assert metric("istio_tcp_connections_opened_total") == 2
    assert metric("istio_tcp_connections_closed_total") == 1
    c.close()
    wait_for(lambda: metric("istio_tcp_connections_closed_total") == 2, 10,
             "closed connection")


def test_series_bound_counts_overflow(strait_factory, httpd_factory):
    """metrics.maxSeries 2, one worker: a third label set (a new Host on a
    cluster without registry entry) is not recorded but counted."""
    up = httpd_factory()
    port = free_port()
    st = strait_factory(http_listener("web", port), workers=1,
                        extra=("metrics: {maxSeries: 2}\n"
                               + clusters(backend=[up.addr])))
    st.start()
    for host in ("a.example.com", "b.example.com", "c.example.com"):
        assert get(port, "/", host=host)[0] == 200
    text = settled(st, 2)
    rows = samples(text, "istio_requests_total")
    assert sorted(l["destination_service"] for l, _ in rows) == [
        "a.example.com", "b.example.com"]
    # Istio's host fallback: first DNS label as the service name.
    assert {l["destination_service_name"] for l, _ in rows} == {"a", "b"}
    wait_for(lambda: value(scrape(st.url("/stats/prometheus")),
                           "strait_istio_series_overflow_total") == 1,
             10, "the third label set counted as overflow")
    # A label set already there is still recorded past the bound.
    assert get(port, "/", host="a.example.com")[0] == 200
    text = settled(st, 3)
    assert value(text, "istio_requests_total",
                 destination_service="a.example.com") == 2


def test_extra_labels_escaped(strait_factory, httpd_factory):
    up = httpd_factory()
    port = free_port()
    st = strait_factory(http_listener("web", port),
                        extra=("metrics: {extraLabels: {env: prod, "
                               "note: 'say \"hi\" \\o/'}}\n"
                               + clusters(backend=[up.addr])))
    st.start()
    assert get(port, "/", host="www.example.com:8080")[0] == 200
    text = settled(st, 1)  # parses: values escaped
    assert value(text, "istio_requests_total", env="prod",
                 note='say "hi" \\o/', destination_service="www.example.com:8080",
                 destination_service_name="www") == 1


def test_metrics_off(strait_factory, httpd_factory):
    up = httpd_factory()
    port = free_port()
    st = strait_factory(http_listener("web", port),
                        extra=("metrics: {enabled: false}\n"
                               + clusters(backend=[up.addr])))
    st.start()
    assert get(port, "/")[0] == 200
    text = scrape(st.url("/stats/prometheus"))
    assert "istio_requests_total" not in text
    assert "strait_http_requests_total" in text


def test_bad_extra_label_refused(strait_factory):
    st = strait_factory(extra="metrics: {extraLabels: {response_code: x}}\n")
    st.start(wait=False)
    assert st.proc.wait(timeout=10) != 0
    assert "metrics.extraLabels" in st.log()


def test_extra_labels_bound(tmp_path):
    """16 extra labels are accepted, 17 refused."""
    import subprocess
    from conftest import STRAIT
    for n, ok in ((16, True), (17, False)):
        f = tmp_path / f"b{n}.yaml"
        f.write_text("metrics: {extraLabels: {" +
                     ", ".join(f"l{i}: v" for i in range(n)) + "}}\n")
        r = subprocess.run([STRAIT, "check", "-c", str(f)],
                           capture_output=True, text=True, timeout=30)
        assert (r.returncode == 0) == ok, r.stdout + r.stderr
        if not ok:
            assert "17 labels; at most 16" in r.stdout + r.stderr


def test_readiness_port(strait_factory, httpd_factory, upstream_factory,
                        tmp_path):
    up = httpd_factory()
    echo = upstream_factory(echo_handler)
    st, _, _, _, rport = start_gateway(strait_factory, tmp_path, up.port,
                                       echo.port)
    c = http.client.HTTPConnection("127.0.0.1", rport, timeout=5)
    # Any Host: a kubelet probes by pod IP.
    c.request("GET", "/healthz/ready", headers={"Host": "10.1.2.3:15021"})
    r = c.getresponse()
    assert (r.status, r.read()) == (200, b"LIVE\n")
    c.request("POST", "/quitquitquit", headers={"Host": "10.1.2.3:15021"})
    r = c.getresponse()
    r.read()
    assert r.status == 404
    c.close()
    assert st.proc.poll() is None


def test_series_survive_reloads_and_follow_relabels(
        strait_factory, httpd_factory, upstream_factory, tmp_path):
    """A resource change that rebuilds the cluster keeps counting in the
    same series; a bootstrap reload that relabels the node (or changes
    metrics.extraLabels) records under the new labels from then on."""
    up = httpd_factory()
    echo = upstream_factory(echo_handler)
    st, gw, tcp, _, _ = start_gateway(strait_factory, tmp_path, up.port,
                                      echo.port)
    conf = tmp_path / "conf.d"

    def count(**want):
        return value(scrape(st.url("/stats/prometheus")),
                     "istio_requests_total", response_code="200",
                     destination_service="reviews.bookinfo.svc.cluster.local",
                     **want) or 0

    for _ in range(3):
        assert get(gw, "/r")[0] == 200
    # A new endpoint weight rebuilds the cluster (same labels).
    before = st.stats()["resources.reloads_ok"]
    text = (conf / "r.yaml").read_text().replace(
        "  serviceAccount: bookinfo-reviews\n",
        "  serviceAccount: bookinfo-reviews\n  weight: 7\n")
    tmp = conf / "r.tmp"
    tmp.write_text(text)
    tmp.rename(conf / "r.yaml")
    wait_for(lambda: st.stats()["resources.reloads_ok"] > before, 10,
             "the resources reloaded")
    for _ in range(2):
        assert get(gw, "/r")[0] == 200
    rows = [l for l, _ in samples(scrape(st.url("/stats/prometheus")),
                                  "istio_requests_total")
            if l.get("response_code") == "200"]
    assert len(rows) == 1, rows
    assert count() == 5
    # The node relabelled and an extra label, by a bootstrap reload.
    cfg = st.config.read_text().replace(
        "version: \"1.0\"", "version: \"2.0\"").replace(
        "metrics: {address: ", "metrics: {extraLabels: {zone: b}, address: ")
    st.config.write_text(cfg)
    r = st.get("/reload", method="POST")
    assert r[0] == 200 and r[1].startswith("reloaded"), r
    wait_for(lambda: (get(gw, "/r")[0] == 200 and
                      count(source_version="2.0", zone="b") >= 1), 10,
             "requests under the new source labels")
    assert count(source_version="1.0") == 5


def test_passthrough_cluster(strait_factory, httpd_factory, tmp_path):
    """ALLOW_ANY: a route to an undeclared host (an IP here, no DNS) is
    reported as destination_service PassthroughCluster, as Istio."""
    up = httpd_factory()
    conf = tmp_path / "conf.d"
    conf.mkdir()
    gw = free_port()
    (conf / "r.yaml").write_text(f"""apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {{name: gw, namespace: default}}
spec:
  selector: {{istio: ingressgateway}}
  servers:
  - port: {{number: {gw}, name: http, protocol: HTTP}}
    bind: 127.0.0.1
    hosts: ["*"]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: out, namespace: default}}
spec:
  hosts: ["*"]
  gateways: [gw]
  http:
  - route: [{{destination: {{host: 127.0.0.1, port: {{number: {up.port}}}}}}}]
""")
    st = strait_factory(extra=(
        "node: {labels: {istio: ingressgateway}}\n"
        "outboundTrafficPolicy: {mode: ALLOW_ANY}\n"
        f"config: {{dir: \"{conf}\", debounce: 50ms}}\n")).start()
    wait_for(lambda: _port_open(gw), 10, "gateway port")
    assert get(gw, "/")[0] == 200
    text = scrape(st.url("/stats/prometheus"))
    assert value(text, "istio_requests_total", response_code="200",
                 destination_service="PassthroughCluster",
                 destination_service_name="PassthroughCluster",
                 destination_service_namespace="unknown") == 1, text


# /stats keys of the process (not per listener or cluster) and the sample
# of /stats/prometheus that carries each (issue 16 item 6). Per-listener
# and per-cluster keys come from the same tables in both renderings; the
# unit test test_every_stats_value_has_a_family maps those, and etcd's.
PROCESS_KEYS = {
    "server.workers": ("strait_workers", {}),
    "server.draining": ("strait_draining", {}),
    "server.uptime_ms": ("strait_uptime_seconds", {}),
    "server.reloads_ok": ("strait_config_reloads_total", {"result": "ok"}),
    "server.reloads_failed": ("strait_config_reloads_total",
                              {"result": "error"}),
    "server.rebuilds_ok": ("strait_config_rebuilds_total", {"result": "ok"}),
    "server.rebuilds_failed": ("strait_config_rebuilds_total",
                               {"result": "error"}),
    "server.pid": ("strait_pid", {}),
    "server.serving": ("strait_serving", {}),
    "server.upgrades_ok": ("strait_upgrades_total", {"result": "ok"}),
    "server.upgrades_failed": ("strait_upgrades_total", {"result": "error"}),
    "server.upgrade_running": ("strait_upgrade_running", {}),
    "server.upgrade_pid": ("strait_upgrade_pid", {}),
    "server.restart_epoch": ("strait_restart_epoch", {}),
    "server.downstream_cx_active": ("strait_downstream_connections_active",
                                    {}),
    "server.max_connections": ("strait_downstream_connections_limit", {}),
    "server.memory_allocated_bytes": ("strait_memory_allocated_bytes", {}),
    "access_log.written": ("strait_access_log_written_total", {}),
    "access_log.dropped": ("strait_access_log_dropped_total", {}),
    "access_log.write_errors": ("strait_access_log_write_errors_total", {}),
    "access_log.reopens": ("strait_access_log_reopens_total", {}),
    "overload.memory_limit_bytes": ("strait_overload_memory_limit_bytes", {}),
    "overload.memory_used_bytes": ("strait_overload_memory_used_bytes", {}),
    "tracing.spans_queued": ("strait_tracing_spans_queued_total", {}),
    "tracing.spans_dropped": ("strait_tracing_spans_dropped_total", {}),
    "tracing.spans_pending": ("strait_tracing_spans_pending", {}),
    "tracing.spans_exported": ("strait_tracing_spans_exported_total", {}),
    "tracing.export_requests": ("strait_tracing_export_requests_total", {}),
    "tracing.export_failures": ("strait_tracing_export_failures_total", {}),
    "tracing.export_retries": ("strait_tracing_export_retries_total", {}),
    "resources.count": ("strait_resources", {}),
    "resources.loading": ("strait_resources_loading", {}),
    "resources.reloads_ok": ("strait_resource_reloads_total",
                             {"result": "ok"}),
    "resources.reloads_failed": ("strait_resource_reloads_total",
                                 {"result": "error"}),
    "dns.names": ("strait_dns_names", {}),
    "dns.queries": ("strait_dns_queries_total", {"result": "sent"}),
    "dns.failures": ("strait_dns_queries_total", {"result": "failed"}),
    "dns.changes": ("strait_dns_changes_total", {}),
    "jwks.uris": ("strait_jwks_uris", {}),
    "jwks.fetches": ("strait_jwks_fetches_total", {"result": "sent"}),
    "jwks.failures": ("strait_jwks_fetches_total", {"result": "failed"}),
    "jwks.changes": ("strait_jwks_changes_total", {}),
}
# Values that move between the two reads.
MOVING = {"server.uptime_ms", "server.memory_allocated_bytes",
          "overload.memory_used_bytes"}


def test_process_stats_have_strait_names(strait_factory, tmp_path):
    """Every numeric process value of /stats, from a running strait with a
    config.dir and tracing on (etcd off), has its strait_* sample on
    /stats/prometheus with the same value; the overload actions are
    checked by label."""
    conf = tmp_path / "conf.d"
    conf.mkdir()
    st = strait_factory(extra=(
        f"config: {{dir: \"{conf}\", debounce: 10ms}}\n"
        f"tracing: {{endpoint: \"http://127.0.0.1:{free_port()}\"}}\n"
    )).start()
    stats = st.stats()
    text = scrape(st.url("/stats/prometheus"))
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    prom = {}
    for f in fams.values():
        for s in f.samples:
            prom[(s.name, tuple(sorted(s.labels.items())))] = s.value
    checked = 0
    for key, v in stats.items():
        if not isinstance(v, int) or key.split(".")[0] in (
                "listener", "cluster", "lua", "geoip"):
            continue
        parts = key.split(".")
        if parts[0] == "overload" and len(parts) == 3:
            name = ("strait_overload_action_active" if parts[2] == "active"
                    else "strait_overload_action_activations_total")
            sample = (name, (("action", parts[1]),))
        else:
            assert key in PROCESS_KEYS, \
                f"/stats {key} has no strait_* sample in PROCESS_KEYS"
            name, labels = PROCESS_KEYS[key]
            sample = (name, tuple(sorted(labels.items())))
        assert sample in prom, f"/stats {key}: no {sample} in /stats/prometheus"
        if key == "server.uptime_ms":
            assert abs(prom[sample] - v / 1000) <= 2
        elif key not in MOVING:
            assert prom[sample] == v, key
        checked += 1
    # tracing, resources, DNS and JWKS were all there to be checked.
    assert {"tracing.spans_queued", "dns.names", "jwks.uris",
            "access_log.written", "server.upgrade_pid"} <= set(stats)
    assert checked >= len(PROCESS_KEYS)
    assert fams["strait_access_log_written"].type == "counter"
    assert fams["strait_tracing_spans_pending"].type == "gauge"
    assert fams["strait_pid"].type == "gauge"
    assert prom[("strait_pid", ())] == st.proc.pid
