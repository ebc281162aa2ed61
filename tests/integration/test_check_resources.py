"""`strait check PATH`: Istio resources validated and analysed offline."""
import json
import pathlib
import shutil
import subprocess

import pytest

from conftest import SRCDIR, STRAIT

DATA = pathlib.Path(SRCDIR) / "tests" / "data"
BOOKINFO = DATA / "istio-samples" / "bookinfo" / "networking"

# Backends for bookinfo, as a host without Kubernetes declares them.
BACKENDS = """
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: bookinfo, namespace: default}
spec:
  hosts: [productpage.default.svc.cluster.local, reviews.default.svc.cluster.local,
          ratings.default.svc.cluster.local, details.default.svc.cluster.local]
  location: MESH_INTERNAL
  resolution: STATIC
  ports: [{number: 9080, name: http, protocol: HTTP}]
  workloadSelector: {labels: {bookinfo: "yes"}}
"""
for svc, versions in (("productpage", ["v1"]), ("reviews", ["v1", "v2", "v3"]),
                      ("ratings", ["v1", "v2", "v2-mysql", "v2-mysql-vm"]),
                      ("details", ["v1", "v2"])):
    for v in versions:
        BACKENDS += f"""---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {{name: {svc}-{v}, namespace: default}}
spec:
  address: 127.0.0.1
  labels: {{app: {svc}, version: {v}, bookinfo: "yes"}}
"""


def check(*args):
    return subprocess.run([STRAIT, "check", *args], capture_output=True,
                          text=True, timeout=60)


@pytest.mark.parametrize("name", sorted(p.name for p in (DATA / "bad-resources").iterdir()))
def test_every_bad_file_is_an_error_not_a_crash(name):
    r = check(str(DATA / "bad-resources" / name))
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert "Error [IST" in r.stdout
    assert name in r.stdout


def test_bookinfo_with_backends_is_clean(tmp_path):
    # virtual-service-reviews-90-10.yaml and -jason-v2-v3.yaml are two
    # versions of one VirtualService: together they are a duplicate.
    for f in ("bookinfo-gateway.yaml", "destination-rule-all.yaml",
              "virtual-service-reviews-jason-v2-v3.yaml"):
        shutil.copy(BOOKINFO / f, tmp_path / f)
    (tmp_path / "backends.yaml").write_text(BACKENDS)
    r = check(str(tmp_path))
    assert r.returncode == 0, r.stdout
    assert "Error" not in r.stdout


def test_missing_backend_is_ist0101_with_position(tmp_path):
    shutil.copy(BOOKINFO / "bookinfo-gateway.yaml", tmp_path / "gw.yaml")
    r = check(str(tmp_path / "gw.yaml"))
    assert r.returncode == 1
    assert "Error [IST0101] (VirtualService default/bookinfo " in r.stdout
    assert "gw.yaml:41:9) spec.http[0].route[0].destination.host" in r.stdout


def test_mesh_virtual_service_is_ignored_not_checked(tmp_path):
    """bookinfo's reviews VirtualService has no gateways: mesh only. A
    gateway never uses it, so its destinations are not checked."""
    shutil.copy(BOOKINFO / "virtual-service-reviews-90-10.yaml", tmp_path / "vs.yaml")
    r = check(str(tmp_path / "vs.yaml"))
    assert r.returncode == 0, r.stdout
    assert "IST0101" not in r.stdout
    assert "Info [STR0001] (VirtualService default/reviews " in r.stdout


def test_json_output(tmp_path):
    shutil.copy(BOOKINFO / "bookinfo-gateway.yaml", tmp_path / "gw.yaml")
    r = check("-o", "json", str(tmp_path / "gw.yaml"))
    assert r.returncode == 1
    msgs = [m for m in json.loads(r.stdout) if m["code"] == "IST0101"]
    assert msgs and msgs[0]["level"] == "Error"
    assert msgs[0]["name"] == "ReferencedResourceNotFound"
    assert msgs[0]["line"] == 41 and msgs[0]["origin"] == "VirtualService default/bookinfo"


def test_unknown_istio_kind_is_a_warning_not_a_schema_error(tmp_path):
    """istioctl analyze skips a kind it has no schema for without a
    message; strait skips it too, but a typo in kind: is said (STR0008,
    a Warning) and does not fail the check."""
    (tmp_path / "vs.yaml").write_text(
        "apiVersion: networking.istio.io/v1\n"
        "kind: VirtualSevice\n"
        "metadata: {name: typo}\n"
        "spec: {hosts: [a.example.com]}\n")
    r = check(str(tmp_path / "vs.yaml"))
    assert r.returncode == 0, r.stdout
    assert "IST0106" not in r.stdout, r.stdout
    assert "Warning [STR0008] (VirtualSevice default/typo " in r.stdout
    assert "vs.yaml:2:7) kind: unknown kind 'VirtualSevice' in " \
        "networking.istio.io (strait reads Gateway, VirtualService" in r.stdout
    r = check("-o", "json", str(tmp_path / "vs.yaml"))
    msgs = json.loads(r.stdout)
    assert [(m["code"], m["name"], m["level"]) for m in msgs] == \
        [("STR0008", "UnknownKind", "Warning")], msgs


# The scenario of Istio's task egress-gateway ("Egress gateway for HTTP
# traffic"), in resources written here (v1alpha3, as the task uses).
EGRESS_GATEWAY_TASK = """apiVersion: networking.istio.io/v1alpha3
kind: ServiceEntry
metadata: {name: news-site}
spec:
  hosts: [edition.cnn.com]
  ports:
  - {number: 80, name: web, protocol: HTTP}
  - {number: 443, name: web-tls, protocol: HTTPS}
  resolution: DNS
---
apiVersion: networking.istio.io/v1alpha3
kind: Gateway
metadata: {name: out-gw}
spec:
  selector: {istio: egressgateway}
  servers: [{port: {number: 80, name: web, protocol: HTTP}, hosts: [edition.cnn.com]}]
---
apiVersion: networking.istio.io/v1alpha3
kind: DestinationRule
metadata: {name: hop-to-egress}
spec:
  host: istio-egressgateway.istio-system.svc.cluster.local
  subsets: [{name: outbound}]
---
apiVersion: networking.istio.io/v1alpha3
kind: VirtualService
metadata: {name: news-via-egress}
spec:
  hosts: [edition.cnn.com]
  gateways: [out-gw, mesh]
  http:
  - match: [{gateways: [mesh], port: 80}]
    route:
    - destination:
        host: istio-egressgateway.istio-system.svc.cluster.local
        subset: outbound
        port: {number: 80}
      weight: 100
  - match: [{gateways: [out-gw], port: 80}]
    route: [{destination: {host: edition.cnn.com, port: {number: 80}}, weight: 100}]
"""


def test_egress_gateway_task_is_accepted_by_check_and_run(tmp_path, strait_factory):
    conf = tmp_path / "conf.d"
    conf.mkdir()
    (conf / "egress.yaml").write_text(EGRESS_GATEWAY_TASK)
    r = check(str(conf))
    assert r.returncode == 0, r.stdout
    assert "IST0101" not in r.stdout
    assert "Info [STR0001] (VirtualService default/news-via-egress" in r.stdout
    # The node is the egress gateway the task's Gateway selects.
    st = strait_factory(extra=f"config: {{dir: \"{conf}\"}}\n"
                              "node: {labels: {istio: egressgateway}}\n")
    st.start()
    assert st.proc.poll() is None


def test_bad_output_format_is_usage_error():
    r = check("-o", "yaml", str(BOOKINFO))
    assert r.returncode == 2


def test_check_with_node_says_what_selects_nothing_here(tmp_path):
    """With -c, the node's namespace and labels: a copied DENY whose
    selector is another workload's, and a policy of another namespace,
    select nothing on this node (IST0127, Istio's text)."""
    conf = tmp_path / "conf.d"
    conf.mkdir()
    (conf / "authz.yaml").write_text("""apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata:
  name: deny-get
  namespace: foo
spec:
  selector:
    matchLabels:
      app: httpbin
  action: DENY
  rules:
  - to:
    - operation:
        methods: ["GET"]
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata:
  name: deny-here
  namespace: istio-system
spec:
  selector:
    matchLabels:
      istio: ingressgateway
  action: DENY
  rules:
  - to:
    - operation:
        paths: ["/admin"]
""")
    boot = tmp_path / "strait.yaml"
    boot.write_text("node: {namespace: istio-system, labels: {istio: ingressgateway}}\n")
    r = check("-c", str(boot), str(conf))
    assert r.returncode == 0, r.stdout
    lines = [l for l in r.stdout.splitlines() if "IST0127" in l]
    assert len(lines) == 1, r.stdout
    assert lines[0].startswith("Warning [IST0127] (AuthorizationPolicy foo/deny-get ")
    assert lines[0].endswith("metadata.namespace: No matching workloads for this "
                             "resource with the following labels: app=httpbin")
    # Without -c nothing is known of the node.
    assert "IST0127" not in check(str(conf)).stdout


def test_resource_in_two_files_is_an_error_naming_both(tmp_path):
    """Issue 13 item 6: `strait check` reports a resource defined twice."""
    shutil.copy(BOOKINFO / "destination-rule-all.yaml", tmp_path / "a.yaml")
    shutil.copy(BOOKINFO / "destination-rule-all-mtls.yaml", tmp_path / "b.yaml")
    r = check(str(tmp_path))
    assert r.returncode == 1
    lines = [x for x in r.stdout.splitlines() if "[STR0004]" in x and
             "DestinationRule default/reviews" in x]
    assert len(lines) == 2, r.stdout
    assert any(f"b.yaml:15:1)" in x and f"{tmp_path}/a.yaml:12:1" in x for x in lines), lines
    assert any(f"a.yaml:12:1)" in x and f"{tmp_path}/b.yaml:15:1" in x for x in lines), lines


def test_subdirectory_and_default_namespace(tmp_path):
    """Issue 13 item 5: with -c, config.defaultNamespace is the namespace of
    files that give none; a subdirectory's name that of its files."""
    conf = tmp_path / "conf.d"
    (conf / "shop").mkdir(parents=True)
    vs = """apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: vs}
spec:
  hosts: [x.example.com]
  gateways: [gw]
  http:
  - route:
    - destination: {host: nowhere.example.com}
"""
    (conf / "vs.yaml").write_text(vs)
    (conf / "shop" / "vs.yaml").write_text(vs)
    boot = tmp_path / "strait.yaml"
    boot.write_text(f"config: {{dir: \"{conf}\", defaultNamespace: edge}}\n")
    r = check("-c", str(boot), str(conf))
    assert "(VirtualService edge/vs " in r.stdout, r.stdout
    assert "(VirtualService shop/vs " in r.stdout, r.stdout
    boot.write_text(f"config: {{dir: \"{conf}\", defaultNamespace: Bad_NS}}\n")
    r = check("-c", str(boot), str(conf))
    assert r.returncode != 0 and "defaultNamespace" in r.stderr, (r.stdout, r.stderr)


def test_tcp_service_entry_without_addresses_is_ist0134(tmp_path):
    """IST0134 ServiceEntryAddressesRequired, Istio's text and level: a
    port whose protocol is TCP or unset, and no addresses."""
    (tmp_path / "se.yaml").write_text("""apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata:
  name: service-entry
  namespace: default
spec:
  hosts:
  - 'istio.io'
  exportTo:
  - "."
  ports:
  - number: 443
    name: https
  resolution: DNS
""")
    r = check("-o", "json", str(tmp_path / "se.yaml"))
    assert r.returncode == 0, r.stdout
    msgs = [m for m in json.loads(r.stdout) if m["code"] == "IST0134"]
    assert len(msgs) == 1, r.stdout
    assert msgs[0]["name"] == "ServiceEntryAddressesRequired"
    assert msgs[0]["level"] == "Warning"
    assert msgs[0]["message"] == "ServiceEntry addresses are required for this protocol."
    assert msgs[0]["line"] == 12 and msgs[0]["path"] == "spec.ports[0]"
