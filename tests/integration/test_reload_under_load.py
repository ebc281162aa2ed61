"""Configuration changes under load lose no request: wrk (HTTP/1.1) and
h2load (HTTP/2) run against a Gateway while its VirtualService is
rewritten 100 times.

h2load cannot open a new connection after a GOAWAY, so streams it tries to
start on a draining connection count as its own errors; what must hold
for HTTP/2 is that every request strait accepted was answered."""
import os
import re
import subprocess

from conftest import free_port, http_gateway, wait_for
from test_regressions import one_write_handler

VS = """{gateway}apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: up, namespace: default}}
spec:
  hosts: [up.example.com]
  location: MESH_EXTERNAL
  resolution: STATIC
  ports: [{{number: {up_port}, name: http, protocol: HTTP}}]
  endpoints: [{{address: 127.0.0.1}}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: vs, namespace: default}}
spec:
  hosts: ["*"]
  gateways: [gw]
  http:
  - headers: {{response: {{set: {{x-generation: "{gen}"}}}}}}
    route:
    - destination: {{host: up.example.com, port: {{number: {up_port}}}}}
"""


def test_no_request_fails_while_resources_change(strait_factory, upstream_factory,
                                                 tmp_path):
    up = upstream_factory(one_write_handler(b"x" * 64))
    port = free_port()
    conf = tmp_path / "conf.d"
    conf.mkdir()

    def write(gen):
        tmp = conf / ".r.yaml"
        tmp.write_text(VS.format(gateway=http_gateway(port), port=port, up_port=up.port, gen=gen))
        os.replace(tmp, conf / "r.yaml")

    write(0)
    st = strait_factory(extra=f"config: {{dir: \"{conf}\", debounce: 20ms}}\n").start()
    url = f"http://127.0.0.1:{port}/"
    wrk = subprocess.Popen(["wrk", "-t", "1", "-c", "8", "-d", "30s",
                            "--timeout", "10s", url],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    h2 = subprocess.Popen(["h2load", "-c", "4", "-m", "4", "-D", "30", url],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        for gen in range(1, 101):
            before = st.stats()["resources.reloads_ok"]
            write(gen)
            wait_for(lambda: st.stats()["resources.reloads_ok"] > before, 10,
                     f"reload {gen}")
        # Every change landed while both clients were still running.
        assert wrk.poll() is None and h2.poll() is None, \
            "the load ended before the last change"
        wrk_out, _ = wrk.communicate(timeout=60)
        h2_out, _ = h2.communicate(timeout=60)
    finally:
        for p in (wrk, h2):
            if p.poll() is None:
                p.kill()
                p.wait(10)
    assert "Socket errors" not in wrk_out, wrk_out
    assert "Non-2xx" not in wrk_out, wrk_out
    assert " 0 timeout" in h2_out, h2_out
    assert re.search(r"\b[1-9][0-9]* succeeded", h2_out), h2_out
    assert st.stats()["resources.reloads_failed"] == 0
    assert st.stats()["resources.reloads_ok"] >= 101
    # Every request that reached strait, over either protocol, got a 200,
    # except those whose client left first (wrk and h2load stopping with
    # requests in flight: status 0, flag DC).
    lines = [l for l in st.log().splitlines() if "http_request" in l]
    assert any("protocol=HTTP/2" in l for l in lines)
    bad = [l for l in lines if "status=200" not in l
           and not ("status=0" in l and "flags=DC" in l)]
    assert not bad, bad[:5]
