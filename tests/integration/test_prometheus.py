"""A real Prometheus (Debian's package) scrapes strait's metrics port, and
the PromQL of Istio's service and workload dashboards (reporter source)
gives back the traffic the test sent: request rate, success rate,
P50/P90/P99 latency, request and response sizes, TCP bytes, and the
panels split by connection_security_policy."""
import json
import shutil
import socket
import subprocess
import threading
import time
import urllib.parse
import urllib.request

import pytest

from conftest import echo_handler, wait_for
from test_istio_metrics import get, start_gateway

PROMETHEUS = shutil.which("prometheus")
SCRAPE_S = 2
SVC = "reviews.bookinfo.svc.cluster.local"
ECHO = "echo.default.svc.cluster.local"

pytestmark = pytest.mark.skipif(
    PROMETHEUS is None,
    reason="Debian's prometheus is not installed (scripts/deps.sh --test)")


class Prometheus:
    """prometheus on 127.0.0.1:<random port> with a temporary config and
    storage, scraping one target; stopped by PID."""

    def __init__(self, tmp_path, target):
        from conftest import free_port
        self.port = free_port()
        cfg = tmp_path / "prometheus.yml"
        cfg.write_text(
            f"global: {{scrape_interval: {SCRAPE_S}s, "
            f"evaluation_interval: {SCRAPE_S}s}}\n"
            "scrape_configs:\n"
            "  - job_name: strait\n"
            "    metrics_path: /stats/prometheus\n"
            f"    static_configs: [{{targets: ['{target}']}}]\n")
        self.log = open(tmp_path / "prometheus.log", "wb")
        self.proc = subprocess.Popen(
            [PROMETHEUS, f"--config.file={cfg}",
             f"--storage.tsdb.path={tmp_path / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
            stdout=self.log, stderr=self.log)
        wait_for(self.ready, 30, "prometheus to be ready")

    def api(self, path, **params):
        url = f"http://127.0.0.1:{self.port}{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        with urllib.request.urlopen(url, timeout=10) as r:
            return json.loads(r.read())

    def ready(self):
        assert self.proc.poll() is None, "prometheus exited"
        try:
            with urllib.request.urlopen(
                    f"http://127.0.0.1:{self.port}/-/ready", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    def last_scrape(self):
        """The time of the target's last successful scrape, or 0."""
        ts = self.api("/api/v1/targets")["data"]["activeTargets"]
        if not ts or ts[0]["health"] != "up":
            return 0.0
        return _parse_rfc3339(ts[0]["lastScrape"])

    def next_scrape_after(self, t):
        wait_for(lambda: self.last_scrape() > t, 5 * SCRAPE_S,
                 "a scrape")
        return self.last_scrape()

    def query(self, expr, at):
        r = self.api("/api/v1/query", query=expr, time=f"{at:.3f}")
        assert r["status"] == "success", r
        return r["data"]["result"]

    def scalar(self, expr, at):
        res = self.query(expr, at)
        assert len(res) == 1, (expr, res)
        return float(res[0]["value"][1])

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self.log.close()


def _parse_rfc3339(s):
    # e.g. 2026-12-01T22:58:01.123456789Z (or an offset); to epoch seconds.
    from datetime import datetime
    s = s.replace("Z", "+00:00")
    head, _, rest = s.partition(".")
    frac, tz = "0", ""
    if rest:
        i = next((k for k, ch in enumerate(rest) if ch in "+-"), len(rest))
        frac, tz = rest[:i], rest[i:]
    else:
        i = max(head.rfind("+"), head.rfind("-"))
        head, tz = head[:i], head[i:]
    base = datetime.fromisoformat(head + tz)
    return base.timestamp() + float("0." + frac)


@pytest.fixture
def prometheus_factory(tmp_path):
    made = []

    def make(target):
        p = Prometheus(tmp_path, target)
        made.append(p)
        return p

    yield make
    for p in made:
        p.stop()


def burst(gw, tcp_conn):
    """The measured traffic: 21 fast 200s (3000-byte bodies), 2 slow
    (300 ms) 200s, 5 500s, and 4000 bytes each way on a live TCP
    connection."""
    threads = []
    results = []

    def one(path):
        results.append(get(gw, path)[0])

    for _ in range(2):
        threads.append(threading.Thread(target=one, args=("/r?delay=0.3",)))
    for t in threads:
        t.start()
    for _ in range(21):
        one("/r?size=3000")
    for _ in range(5):
        one("/r?status=500")
    tcp_conn.sendall(b"y" * 4000)
    got = b""
    while len(got) < 4000:
        got += tcp_conn.recv(65536)
    for t in threads:
        t.join(10)
    assert sorted(results) == [200] * 23 + [500] * 5


def test_istio_dashboards_on_prometheus(strait_factory, httpd_factory,
                                        upstream_factory, prometheus_factory,
                                        tmp_path):
    up = httpd_factory()
    echo = upstream_factory(echo_handler)
    st, gw, tcp, mport, _ = start_gateway(strait_factory, tmp_path, up.port,
                                          echo.port)
    prom = prometheus_factory(f"127.0.0.1:{mport}")
    # Every series the burst moves exists before it (one request of each
    # kind, one TCP byte each way), so the burst is a difference between
    # two scrapes whatever irate's window holds.
    for path in ("/r?size=3000", "/r?status=500"):
        get(gw, path)
    conn = socket.create_connection(("127.0.0.1", tcp), timeout=10)
    conn.sendall(b"x")
    assert conn.recv(10) == b"x"
    base = "reporter=~\"source\",destination_service=~\"%s\"" % SVC
    wait_for(lambda: prom.query(f"sum(istio_requests_total{{{base}}})",
                                time.time())
             and prom.scalar(f"sum(istio_requests_total{{{base}}})",
                             time.time()) == 2, 10 * SCRAPE_S,
             "the first requests scraped")
    t0 = prom.next_scrape_after(prom.last_scrape())
    burst(gw, conn)
    sent = time.time()
    t1 = prom.next_scrape_after(max(t0, sent))
    wait_for(lambda: prom.scalar(f"sum(istio_requests_total{{{base}}})",
                                 time.time()) == 30, 5 * SCRAPE_S,
             "the burst scraped")
    samples = prom.query(f"istio_requests_total{{{base},"
                         "response_code=\"200\"}[%ds]" % (3 * SCRAPE_S), t1)
    vals = [(float(ts), float(v)) for ts, v in samples[0]["values"]]
    # The two samples irate uses: the one before the burst and the one
    # after it (no scrape fell inside it).
    assert len(vals) >= 2 and vals[-2][1] == 1 and vals[-1][1] == 24, vals
    assert vals[-2][0] <= sent
    dt = vals[-1][0] - vals[-2][0]
    at = vals[-1][0]
    w = "[%ds]" % (3 * SCRAPE_S)

    # Service dashboard: requests (per second).
    rate = prom.scalar(f"round(sum(irate(istio_requests_total{{{base}}}{w})),"
                       " 0.001)", at)
    assert rate == pytest.approx(28 / dt, abs=0.002)
    # Success rate (non-5xx share).
    ok = prom.scalar(
        f"sum(irate(istio_requests_total{{{base},response_code!~\"5.*\"}}{w}))"
        f" / (sum(irate(istio_requests_total{{{base}}}{w})) or on () "
        "vector(1))", at)
    assert ok == pytest.approx(23 / 28)
    # Latency: the 2 slow requests (0.3 s at the upstream) are the top 7%:
    # P50 and P90 fall below the 250 ms bucket, P99 above it. Only the
    # delay is a floor: how much a busy machine adds on top is not, so no
    # upper bound on the slow ones (a loaded ASan run put them in the
    # (500, 1000] bucket).
    q = {}
    for p in ("0.50", "0.90", "0.99"):
        q[p] = prom.scalar(
            f"(histogram_quantile({p}, sum(irate(istio_request_duration_"
            f"milliseconds_bucket{{{base}}}{w})) by (le)) / 1000) or "
            f"histogram_quantile({p}, sum(irate(istio_request_duration_"
            f"seconds_bucket{{{base}}}{w})) by (le))", at)
    assert q["0.50"] <= 0.25 and q["0.90"] <= 0.25, q
    assert q["0.99"] > 0.25, q
    # Sizes: requests are heads only (under 500 bytes); most responses
    # carry 3000 bytes of body, in the (2500, 5000] bucket.
    rq = prom.query(
        f"histogram_quantile(0.50, sum(irate(istio_request_bytes_bucket"
        f"{{{base}}}{w})) by (source_workload, source_workload_namespace, le))",
        at)
    assert [r["metric"]["source_workload"] for r in rq] == ["gw-1"]
    assert float(rq[0]["value"][1]) <= 500
    rs = prom.scalar(
        f"histogram_quantile(0.50, sum(irate(istio_response_bytes_bucket"
        f"{{{base}}}{w})) by (source_workload, source_workload_namespace, le))",
        at)
    assert 2500 < rs <= 5000
    # Split by connection_security_policy: a gateway reports "unknown",
    # so the mTLS panels are empty and the others hold everything.
    mtls = prom.query(
        f"round(sum(irate(istio_requests_total{{connection_security_policy="
        f"\"mutual_tls\",{base}}}{w})) by (source_workload, "
        "source_workload_namespace, response_code), 0.001)", at)
    assert mtls == []
    plain = prom.query(
        f"round(sum(irate(istio_requests_total{{connection_security_policy!="
        f"\"mutual_tls\",{base}}}{w})) by (source_workload, "
        "source_workload_namespace, response_code), 0.001)", at)
    by_code = {r["metric"]["response_code"]: float(r["value"][1])
               for r in plain}
    assert by_code == pytest.approx({"200": round(23 / dt, 3),
                                     "500": round(5 / dt, 3)}, abs=0.002)
    # Workload dashboard: by destination workload.
    wl = prom.scalar(
        "sum(irate(istio_requests_total{reporter=~\"source\","
        "destination_workload_namespace=~\"bookinfo\","
        f"destination_workload=~\"reviews-v1\"}}{w}))", at)
    assert wl == pytest.approx(28 / dt, abs=0.002)
    # TCP bytes, both directions, of the connection still open.
    tbase = "reporter=~\"source\",destination_service=~\"%s\"" % ECHO
    for name in ("istio_tcp_sent_bytes_total", "istio_tcp_received_bytes_total"):
        v = prom.scalar(f"sum(irate({name}{{{tbase}}}{w}))", at)
        assert v == pytest.approx(4000 / dt, rel=1e-6), name
        v = prom.scalar(
            f"sum(irate({name}{{connection_security_policy!=\"mutual_tls\","
            f"{tbase}}}{w}))", at)
        assert v == pytest.approx(4000 / dt, rel=1e-6), name
    conn.close()
