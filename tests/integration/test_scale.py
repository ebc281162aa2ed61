"""Scale (issue 27): a gateway of 10,000 tenants, each a VirtualService
(one host; a path prefix, a header match and a default route), a
ServiceEntry (2 STATIC endpoints) and a DestinationRule (2 subsets),
loads and routes the last tenant's requests. Before, strait spent minutes
of CPU on quadratic validation and compilation and then stopped with
'cannot start: out of memory'. The figures (CPU time, memory) are in
bench/README.md (bench/scale.sh); this test asserts only that it loads
and serves."""
import http.client

import pytest

from conftest import free_port, http_gateway, responder, wait_for

N = 10000


def tenant(i, p1, p2):
    dest = "{{destination: {{host: t{i}.svc.internal, subset: {s}, port: {{number: 80}}}}}}"
    v1 = dest.format(i=i, s="v1")
    v2 = dest.format(i=i, s="v2")
    return f"""apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: t{i}, namespace: tenants}}
spec:
  hosts: [t{i}.example.com]
  gateways: [default/gw]
  http:
  - match: [{{uri: {{prefix: /api/}}}}]
    route: [{v2}]
  - match: [{{headers: {{x-canary: {{exact: "1"}}}}}}]
    route: [{v2}]
  - route: [{v1}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: t{i}, namespace: tenants}}
spec:
  hosts: [t{i}.svc.internal]
  location: MESH_INTERNAL
  resolution: STATIC
  ports: [{{number: 80, name: http, protocol: HTTP}}]
  endpoints:
  - {{address: 127.0.0.1, ports: {{http: {p1}}}, labels: {{version: v1}}}}
  - {{address: 127.0.0.1, ports: {{http: {p2}}}, labels: {{version: v2}}}}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {{name: t{i}, namespace: tenants}}
spec:
  host: t{i}.svc.internal
  subsets:
  - {{name: v1, labels: {{version: v1}}}}
  - {{name: v2, labels: {{version: v2}}}}
---
"""


def get(port, host, path="/", headers=None):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        c.request("GET", path, headers={"host": host, **(headers or {})})
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


@pytest.mark.parametrize("one_file", [False, True], ids=["files", "one-file"])
def test_ten_thousand_tenants_load_and_serve_the_last(strait_factory, tmp_path,
                                                     upstream_factory, one_file):
    """10,000 tenants load (from ten files, and from one file of 30,000
    documents, over the 1,000,000 YAML nodes a file was once bounded by)
    and the last tenant's three routes each reach their subset."""
    up1 = upstream_factory(responder(lambda head: b"v1"))
    up2 = upstream_factory(responder(lambda head: b"v2"))
    port = free_port()
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "gateway.yaml").write_text(http_gateway(port))
    per = N if one_file else 1000
    for start in range(0, N, per):
        (conf / f"tenants-{start:05d}.yaml").write_text(
            "".join(tenant(i, up1.port, up2.port) for i in range(start, start + per)))
    s = strait_factory(workers=1, extra=f"config: {{dir: {conf}}}\n")
    s.start(wait=False)
    # Loading 10,000 tenants on a loaded 2-core machine: a generous bound,
    # no timing claim (the figures are bench/scale.sh's).
    wait_for(s.ready_or_dead, 300, "strait to load 10,000 tenants")
    last = f"t{N - 1}.example.com"
    assert get(port, last) == (200, b"v1")
    assert get(port, last, "/api/x") == (200, b"v2")
    assert get(port, last, headers={"x-canary": "1"}) == (200, b"v2")
    # A host no tenant has is not routed.
    assert get(port, f"t{N}.example.com")[0] == 404
