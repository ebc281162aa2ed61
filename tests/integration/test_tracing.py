"""Tracing: W3C traceparent continued, B3 propagated, one server span per
request and a client span per upstream attempt (a retry and a mirrored
copy included), exported as OTLP/HTTP JSON to a small receiver on
loopback; a collector that answers 503 is retried after Retry-After; a
collector that is down costs spans (dropped and counted), never
requests."""
import gzip
import http.client
import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from conftest import free_port, wait_for
from httpd import HttpUpstream
from test_gateway import GATEWAY_AND_UP
from test_mirror_retry import service_entry, vs_text

import pytest

TRACE = "0af7651916cd43dd8448eb211c80319c"
PARENT = "b7ad6b7169203331"


class Collector:
    """An OTLP/HTTP receiver: POST /v1/traces with JSON; answers the
    statuses in .script first (then 200), recording every body."""

    def __init__(self):
        outer = self
        self.lock = threading.Lock()
        self.bodies = []
        self.posts = 0
        self.script = []
        self.encodings = []
        self.times = []

        class H(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):
                n = int(self.headers.get("Content-Length", 0))
                data = self.rfile.read(n)
                enc = self.headers.get("Content-Encoding")
                if enc == "gzip":
                    data = gzip.decompress(data)
                with outer.lock:
                    outer.encodings.append(enc)
                    outer.posts += 1
                    outer.times.append(time.monotonic())
                    status = outer.script.pop(0) if outer.script else 200
                    # (status, Retry-After) or a status (503: "1").
                    retry_after = "1" if status == 503 else None
                    if isinstance(status, tuple):
                        status, retry_after = status
                    if status == 200:
                        assert self.path == "/v1/traces"
                        assert self.headers["Content-Type"] == \
                            "application/json"
                        outer.bodies.append(json.loads(data))
                self.send_response(status)
                if retry_after is not None:
                    self.send_header("Retry-After", retry_after)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

        self.srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.port = self.srv.server_address[1]
        self.t = threading.Thread(target=self.srv.serve_forever,
                                  kwargs={"poll_interval": 0.05}, daemon=True)
        self.t.start()

    def spans(self):
        with self.lock:
            out = []
            for b in self.bodies:
                for rs in b["resourceSpans"]:
                    res = {a["key"]: a["value"]["stringValue"]
                           for a in rs["resource"]["attributes"]}
                    for ss in rs["scopeSpans"]:
                        for sp in ss["spans"]:
                            sp["_resource"] = res
                            out.append(sp)
            return out

    def stop(self):
        self.srv.shutdown()
        self.srv.server_close()
        self.t.join(5)


@pytest.fixture
def collector():
    c = Collector()
    yield c
    c.stop()


@pytest.fixture
def ups():
    made = []

    def make():
        u = HttpUpstream()
        made.append(u)
        return u

    yield make
    for u in made:
        u.stop()


def start(strait_factory, tmp_path, up_port, http_rules, extra="",
          extra_bootstrap=""):
    conf = tmp_path / "conf.d"
    conf.mkdir()
    port = free_port()
    (conf / "r.yaml").write_text(
        GATEWAY_AND_UP.format(port=port, up_port=up_port).rstrip("-\n") + "\n"
        + extra + vs_text(http_rules))
    st = strait_factory(extra=f"config: {{dir: \"{conf}\", debounce: 50ms}}\n"
                        + extra_bootstrap).start()
    return st, port


def tracing_yaml(port, sampling=100, extra="", flush="50ms"):
    return (f"tracing: {{endpoint: \"http://127.0.0.1:{port}\", "
            f"sampling: {sampling}, flushInterval: {flush}{extra}}}\n")


def attrs(span):
    out = {}
    for a in span["attributes"]:
        v = a["value"]
        out[a["key"]] = next(iter(v.values()))
    return out


def get(port, path, headers=None):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request("GET", path, headers=headers or {})
    r = c.getresponse()
    body = r.read()
    c.close()
    return r.status, body


def header(rec, name):
    for k, v in rec["headers"]:
        if k.lower() == name:
            return v
    return None


RETRY_AND_MIRROR = """  - retries: {attempts: 2, retryOn: 5xx}
    route:
    - destination: {host: up.example.com}
    mirror: {host: shadow.example.com}
"""


def test_span_tree_of_retried_and_mirrored_request(strait_factory, tmp_path,
                                                   ups, collector):
    up, shadow = ups(), ups()
    st, port = start(strait_factory, tmp_path, up.port, RETRY_AND_MIRROR,
                     service_entry("shadow", shadow.port),
                     extra_bootstrap=tracing_yaml(collector.port))
    tp = f"00-{TRACE}-{PARENT}-01"
    status, _ = get(port, "/t?fail=1", {"traceparent": tp,
                                         "tracestate": "rojo=00f067aa0ba902b7",
                                         "x-request-id": "rid-7"})
    assert status == 200
    # Server span, two attempts, one mirrored attempt.
    wait_for(lambda: len(collector.spans()) == 4, 10, "four spans")
    spans = collector.spans()
    assert all(s["traceId"] == TRACE for s in spans)
    server = [s for s in spans if s["kind"] == 2]
    clients = [s for s in spans if s["kind"] == 3]
    assert len(server) == 1 and len(clients) == 3
    server = server[0]
    assert server["parentSpanId"] == PARENT
    sa = attrs(server)
    assert sa["http.status_code"] == "200"       # int64 as a string
    assert sa["http.method"] == "GET"
    assert sa["guid:x-request-id"] == "rid-7"
    assert server["_resource"]["service.name"].endswith(".istio-system")
    for c in clients:
        assert c["parentSpanId"] == server["spanId"]
        assert len(c["spanId"]) == 16 and len(c["traceId"]) == 32
        assert int(c["endTimeUnixNano"]) >= int(c["startTimeUnixNano"])
    primary = sorted((c for c in clients if "shadow" not in attrs(c)),
                     key=lambda c: int(attrs(c)["retry.attempt"]))
    mirrored = [c for c in clients if "shadow" in attrs(c)]
    assert [attrs(c)["http.status_code"] for c in primary] == ["503", "200"]
    assert primary[0]["status"] == {"code": 2}
    assert len(mirrored) == 1
    assert attrs(mirrored[0])["upstream_cluster"].find("shadow") >= 0
    # Each attempt told its upstream its own span as the parent; the
    # caller's tracestate went along.
    sent = [header(r, "traceparent") for r in up.requests]
    assert sent == [f"00-{TRACE}-{c['spanId']}-01" for c in primary]
    assert header(up.requests[0], "tracestate") == "rojo=00f067aa0ba902b7"
    wait_for(lambda: len(shadow.requests) == 1, 10, "the mirrored copy")
    assert header(shadow.requests[0], "traceparent") == \
        f"00-{TRACE}-{mirrored[0]['spanId']}-01"
    # Counted once strait has read the collector's answer, which the
    # collector sends after it has stored the spans.
    wait_for(lambda: st.stats()["tracing.spans_exported"] == 4, 10,
             "the export counted")
    s = st.stats()
    assert s["tracing.spans_dropped"] == 0


def test_invalid_traceparent_starts_a_new_trace(strait_factory, tmp_path,
                                                ups, collector):
    up = ups()
    st, port = start(strait_factory, tmp_path, up.port,
                     "  - route:\n    - destination: {host: up.example.com}\n",
                     extra_bootstrap=tracing_yaml(collector.port))
    bad = f"00-{'0' * 32}-{PARENT}-01"    # all-zero trace id: ignored
    assert get(port, "/n", {"traceparent": bad,
                            "tracestate": "a=1"})[0] == 200
    wait_for(lambda: len(collector.spans()) == 2, 10, "two spans")
    server = [s for s in collector.spans() if s["kind"] == 2][0]
    assert server["traceId"] != "0" * 32
    assert "parentSpanId" not in server
    # The tracestate of an invalid traceparent is not passed on.
    assert header(up.requests[0], "tracestate") is None
    assert header(up.requests[0], "traceparent").startswith(
        f"00-{server['traceId']}-")


def test_sampled_flag_and_b3(strait_factory, tmp_path, ups, collector):
    """sampling 100, but a caller that says 'not sampled' is not traced
    (still propagated, flag 00); B3 headers are rewritten with the client
    span."""
    up = ups()
    st, port = start(strait_factory, tmp_path, up.port,
                     "  - route:\n    - destination: {host: up.example.com}\n",
                     extra_bootstrap=tracing_yaml(collector.port))
    assert get(port, "/u", {"traceparent": f"00-{TRACE}-{PARENT}-00"})[0] \
        == 200
    assert header(up.requests[0], "traceparent").endswith("-00")
    assert header(up.requests[0], "traceparent").startswith(f"00-{TRACE}-")
    assert get(port, "/b3", {"x-b3-traceid": "463ac35c9f6413ad",
                             "x-b3-spanid": "a2fb4a1d1a96d312",
                             "x-b3-sampled": "1"})[0] == 200
    wait_for(lambda: len(collector.spans()) == 2, 10, "the B3 request's")
    spans = collector.spans()
    client = [s for s in spans if s["kind"] == 3][0]
    server = [s for s in spans if s["kind"] == 2][0]
    assert server["traceId"] == "0" * 16 + "463ac35c9f6413ad"
    assert server["parentSpanId"] == "a2fb4a1d1a96d312"
    rec = up.requests[1]
    assert header(rec, "x-b3-traceid") == "463ac35c9f6413ad"
    assert header(rec, "x-b3-spanid") == client["spanId"]
    assert header(rec, "x-b3-parentspanid") == server["spanId"]
    assert header(rec, "x-b3-sampled") == "1"
    # Nothing of the unsampled request was exported.
    assert st.stats()["tracing.spans_queued"] == 2


def test_sampling_zero(strait_factory, tmp_path, ups, collector):
    up = ups()
    st, port = start(strait_factory, tmp_path, up.port,
                     "  - route:\n    - destination: {host: up.example.com}\n",
                     extra_bootstrap=tracing_yaml(collector.port, sampling=0))
    for i in range(5):
        assert get(port, f"/z{i}")[0] == 200
    assert get(port, "/yes", {"traceparent": f"00-{TRACE}-{PARENT}-01"})[0] \
        == 200
    wait_for(lambda: len(collector.spans()) == 2, 10, "the sampled request")
    assert st.stats()["tracing.spans_queued"] == 2
    assert header(up.requests[0], "traceparent").endswith("-00")


@pytest.mark.parametrize("status", [429, 502, 503, 504])
def test_collector_busy_is_retried(strait_factory, tmp_path, ups, collector,
                                   status):
    """429, 502, 503 and 504 are retried (OTLP/HTTP's retryable codes)."""
    up = ups()
    collector.script = [status]
    st, port = start(strait_factory, tmp_path, up.port,
                     "  - route:\n    - destination: {host: up.example.com}\n",
                     extra_bootstrap=tracing_yaml(collector.port))
    assert get(port, "/r")[0] == 200
    wait_for(lambda: len(collector.spans()) == 2, 10, "the retried batch")
    s = st.stats()
    assert s["tracing.export_retries"] == 1
    assert s["tracing.export_requests"] == 2
    assert collector.posts == 2


def test_retry_waits_for_retry_after(strait_factory, tmp_path, ups,
                                     collector):
    """A 429 with Retry-After: 3 is sent again no sooner than 3 s later
    (without the header the first retry comes after 1 s)."""
    up = ups()
    collector.script = [(429, "3")]
    st, port = start(strait_factory, tmp_path, up.port,
                     "  - route:\n    - destination: {host: up.example.com}\n",
                     extra_bootstrap=tracing_yaml(collector.port))
    assert get(port, "/r")[0] == 200
    wait_for(lambda: len(collector.spans()) == 2, 20, "the retried batch")
    assert collector.times[1] - collector.times[0] >= 2.9, collector.times
    assert st.stats()["tracing.export_retries"] == 1


def test_collector_400_not_retried(strait_factory, tmp_path, ups, collector):
    up = ups()
    collector.script = [400]
    st, port = start(strait_factory, tmp_path, up.port,
                     "  - route:\n    - destination: {host: up.example.com}\n",
                     extra_bootstrap=tracing_yaml(collector.port))
    assert get(port, "/r")[0] == 200
    wait_for(lambda: st.stats()["tracing.export_failures"] == 1, 10,
             "the refused batch")
    s = st.stats()
    assert s["tracing.export_retries"] == 0
    assert s["tracing.spans_dropped"] == 2


def test_collector_down(strait_factory, tmp_path, ups):
    """Nothing listens at the endpoint: requests answer as ever, spans are
    dropped and counted; past maxQueueSize they are dropped at once."""
    up = ups()
    dead = free_port()
    st, port = start(strait_factory, tmp_path, up.port,
                     "  - route:\n    - destination: {host: up.example.com}\n",
                     extra_bootstrap=tracing_yaml(
                         dead, extra=", maxQueueSize: 4", flush="1h"))
    for i in range(5):
        assert get(port, f"/d{i}")[0] == 200
    # Ten spans, a queue of four: two requests' spans fit, the rest is
    # dropped by the queue's bound (flushInterval 1h: nothing taken yet).
    wait_for(lambda: st.stats()["tracing.spans_dropped"] == 6, 10,
             "spans dropped past maxQueueSize")
    assert st.stats()["tracing.spans_pending"] == 4


def test_collector_down_export_fails(strait_factory, tmp_path, ups):
    up = ups()
    dead = free_port()
    st, port = start(strait_factory, tmp_path, up.port,
                     "  - route:\n    - destination: {host: up.example.com}\n",
                     extra_bootstrap=tracing_yaml(dead))
    assert get(port, "/d")[0] == 200
    wait_for(lambda: st.stats()["tracing.export_failures"] >= 1, 10,
             "a failed export")
    assert st.stats()["tracing.spans_dropped"] == 2
    assert get(port, "/d2")[0] == 200


def test_bad_endpoint_refused(tmp_path):
    import subprocess
    from conftest import STRAIT
    cfg = tmp_path / "s.yaml"
    cfg.write_text("tracing: {endpoint: \"https://collector:4318\"}\n")
    r = subprocess.run([STRAIT, "check", "-c", str(cfg)], capture_output=True,
                       text=True, timeout=20)
    assert r.returncode == 1
    assert "tracing.endpoint: https:// is not supported" in r.stderr
    cfg.write_text("tracing: {sampling: 101}\n")
    r = subprocess.run([STRAIT, "check", "-c", str(cfg)], capture_output=True,
                       text=True, timeout=20)
    assert r.returncode == 1
    assert "tracing.sampling: value '101' out of range 0-100" in r.stderr


def test_max_retries(strait_factory, tmp_path, ups, collector):
    """maxRetries 1: a batch answered 503 twice is given up."""
    up = ups()
    collector.script = [503, 503]
    st, port = start(strait_factory, tmp_path, up.port,
                     "  - route:\n    - destination: {host: up.example.com}\n",
                     extra_bootstrap=tracing_yaml(collector.port,
                                                  extra=", maxRetries: 1"))
    assert get(port, "/r")[0] == 200
    wait_for(lambda: st.stats()["tracing.export_failures"] == 1, 10,
             "the batch given up")
    s = st.stats()
    assert s["tracing.export_retries"] == 1
    assert s["tracing.spans_dropped"] == 2
    assert collector.posts == 2 and collector.spans() == []


def test_max_batch_size(strait_factory, tmp_path, ups, collector):
    """maxBatchSize 2: three requests' six spans go in three requests."""
    up = ups()
    st, port = start(strait_factory, tmp_path, up.port,
                     "  - route:\n    - destination: {host: up.example.com}\n",
                     extra_bootstrap=tracing_yaml(collector.port, flush="300ms",
                                                  extra=", maxBatchSize: 2"))
    for i in range(3):
        assert get(port, f"/b{i}")[0] == 200
    wait_for(lambda: len(collector.spans()) == 6, 10, "six spans")
    with collector.lock:
        sizes = [sum(len(ss["spans"]) for rs in b["resourceSpans"]
                     for ss in rs["scopeSpans"]) for b in collector.bodies]
    assert sizes == [2, 2, 2]


def test_gzip(strait_factory, tmp_path, ups, collector):
    """compression gzip: bodies go with Content-Encoding: gzip."""
    up = ups()
    st, port = start(strait_factory, tmp_path, up.port,
                     "  - route:\n    - destination: {host: up.example.com}\n",
                     extra_bootstrap=tracing_yaml(
                         collector.port, extra=", compression: gzip"))
    assert get(port, "/g", {"traceparent": f"00-{TRACE}-{PARENT}-01"})[0] \
        == 200
    wait_for(lambda: len(collector.spans()) == 2, 10, "the gzipped batch")
    assert collector.encodings == ["gzip"]
    assert all(s["traceId"] == TRACE for s in collector.spans())
