"""Kubernetes kinds in the configuration directory, as istiod reads them:
a v1 Service whose endpoints come from discovery.k8s.io/v1 EndpointSlices
(only ready ones), a v1 Secret that is a Gateway's credentialName, and
kinds strait does not read (ReplicaSet, Deployment) ignored with an Info. The
YAML is as `kubectl get -o yaml` writes it."""
import base64
import json
import subprocess

from conftest import STRAIT, free_port, responder, wait_for
from httpd import make_cert


def service(name="httpbin", port=8000, target=8080):
    return f"""apiVersion: v1
kind: Service
metadata:
  annotations:
    kubectl.kubernetes.io/last-applied-configuration: |
      {{"apiVersion":"v1","kind":"Service"}}
  creationTimestamp: "2026-11-30T10:00:00Z"
  labels:
    app: {name}
    service: {name}
  name: {name}
  namespace: default
  resourceVersion: "1234"
  uid: 0b5c0e2a-4f1e-4d8a-9a43-5f0c7d2e9b10
spec:
  clusterIP: 10.96.12.34
  clusterIPs:
  - 10.96.12.34
  internalTrafficPolicy: Cluster
  ipFamilies:
  - IPv4
  ipFamilyPolicy: SingleStack
  ports:
  - name: http
    port: {port}
    protocol: TCP
    targetPort: {target}
  selector:
    app: {name}
  sessionAffinity: None
  type: ClusterIP
status:
  loadBalancer: {{}}
---
"""


def slice_(suffix, port, endpoints, service_name="httpbin"):
    return f"""addressType: IPv4
apiVersion: discovery.k8s.io/v1
endpoints:
{endpoints}kind: EndpointSlice
metadata:
  annotations:
    endpoints.kubernetes.io/last-change-trigger-time: "2026-11-30T10:00:05Z"
  creationTimestamp: "2026-11-30T10:00:00Z"
  generateName: {service_name}-
  generation: 3
  labels:
    app: {service_name}
    endpointslice.kubernetes.io/managed-by: endpointslice-controller.k8s.io
    kubernetes.io/service-name: {service_name}
    service: {service_name}
  name: {service_name}-{suffix}
  namespace: default
  ownerReferences:
  - apiVersion: v1
    blockOwnerDeletion: true
    controller: true
    kind: Service
    name: {service_name}
    uid: 0b5c0e2a-4f1e-4d8a-9a43-5f0c7d2e9b10
  resourceVersion: "1240"
  uid: 7d1e4a3b-{suffix}
ports:
- name: http
  port: {port}
  protocol: TCP
---
"""


def endpoint(ip, conditions, pod):
    cond = "".join(f"    {k}: {v}\n" for k, v in conditions.items())
    return (f"- addresses:\n  - {ip}\n"
            + (f"  conditions:\n{cond}" if conditions else "")
            + f"""  nodeName: kind-worker
  targetRef:
    kind: Pod
    name: {pod}
    namespace: default
    uid: 1f2e3d4c-{pod}
  zone: zone-a
""")


IGNORED = """apiVersion: apps/v1
kind: ReplicaSet
metadata:
  labels:
    app: httpbin
  name: httpbin-7b5b5c9f6c
  namespace: default
spec:
  replicas: 1
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: httpbin
  namespace: default
spec:
  replicas: 1
  selector:
    matchLabels:
      app: httpbin
  template:
    metadata:
      labels:
        app: httpbin
    spec:
      containers:
      - image: docker.io/kong/httpbin:0.1.0
        name: httpbin
---
"""


def routing(port):
    return f"""apiVersion: networking.istio.io/v1
kind: Gateway
metadata:
  name: httpbin-gateway
  namespace: default
spec:
  selector:
    istio: ingressgateway
  servers:
  - port:
      number: {port}
      name: http
      protocol: HTTP
    bind: 127.0.0.1
    hosts:
    - "*"
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata:
  name: httpbin
  namespace: default
spec:
  hosts:
  - "*"
  gateways:
  - httpbin-gateway
  http:
  - route:
    - destination:
        host: httpbin
        port:
          number: 8000
"""


NODE = "node: {labels: {istio: ingressgateway}}\n"


def get(port, path="/"):
    p = subprocess.run(["curl", "-sS", "--max-time", "10", "-o", "-",
                        "-w", "\n%{http_code}", f"http://127.0.0.1:{port}{path}"],
                       capture_output=True, text=True, timeout=30)
    body, _, code = p.stdout.rpartition("\n")
    return (int(code) if code.isdigit() else None), body


def test_service_endpoints_come_from_ready_endpointslice_addresses(
        strait_factory, upstream_factory, tmp_path):
    """The VirtualService routes to the Service httpbin (port 8000); its
    endpoints are the ready addresses of its EndpointSlices on the slice's
    port for the Service port's name: ready: true and ready unset are
    used, ready: false (terminating) never is."""
    ready = upstream_factory(responder(lambda h: b"ready"))
    unset = upstream_factory(responder(lambda h: b"unset"))
    notready = upstream_factory(responder(lambda h: b"notready"))
    conf = tmp_path / "conf.d"
    conf.mkdir()
    port = free_port()
    (conf / "httpbin.yaml").write_text(
        service()
        + slice_("a1", ready.port, endpoint(
            "127.0.0.1", {"ready": "true", "serving": "true",
                          "terminating": "false"}, "pod-a"))
        + slice_("b2", notready.port, endpoint(
            "127.0.0.1", {"ready": "false", "serving": "false",
                          "terminating": "true"}, "pod-b"))
        + slice_("c3", unset.port, endpoint("127.0.0.1", {}, "pod-c"))
        + IGNORED)
    (conf / "routing.yaml").write_text(routing(port))
    st = strait_factory(extra=NODE + f"config: {{dir: \"{conf}\"}}\n").start()
    wait_for(lambda: get(port)[0] == 200, 10, "a route to the Service")
    seen = set()
    for _ in range(20):
        code, body = get(port)
        assert code == 200, body
        seen.add(body)
    assert seen == {"ready", "unset"}, seen
    assert notready.conns == 0
    # The Service is shown with the registry entry it is.
    code, body, _ = st.get("/config_dump")
    assert code == 200
    dump = json.loads(body)
    text = json.dumps(dump)
    assert "httpbin.default.svc.cluster.local" in text
    # ReplicaSet and Deployment are ignored: not in effect, and no error.
    kinds = {r["kind"] for r in find_resources(dump)}
    assert "Service" in kinds and "EndpointSlice" in kinds
    assert "ReplicaSet" not in kinds and "Deployment" not in kinds
    # Istio's metrics name a Kubernetes Service as Istio does: the host,
    # the Service's name and namespace.
    code, prom, _ = st.get("/stats/prometheus")
    assert ('destination_service="httpbin.default.svc.cluster.local",'
            'destination_service_name="httpbin",'
            'destination_service_namespace="default"') in prom, prom


def find_resources(obj):
    """Every {"kind", "namespace", "name", ...} resource in a dump."""
    out = []
    if isinstance(obj, dict):
        if "kind" in obj and "name" in obj and "spec" in obj:
            out.append(obj)
        for v in obj.values():
            out += find_resources(v)
    elif isinstance(obj, list):
        for v in obj:
            out += find_resources(v)
    return out


def test_check_reports_ignored_kubernetes_kinds_as_info(tmp_path):
    """`strait check` on a directory with a ReplicaSet and a Deployment beside a
    Service says Info for each, at its file:line:col, and exits 0."""
    conf = tmp_path / "conf.d"
    conf.mkdir()
    (conf / "a.yaml").write_text(service() + slice_("a1", 8080, endpoint(
        "10.244.0.5", {"ready": "true"}, "pod-a")) + IGNORED)
    p = subprocess.run([STRAIT, "check", str(conf)], capture_output=True,
                       text=True, timeout=30)
    assert p.returncode == 0, p.stdout + p.stderr
    out = p.stdout + p.stderr
    assert "Info [STR0001] (ReplicaSet default/httpbin-7b5b5c9f6c " in out, out
    assert f"{conf}/a.yaml:" in out
    assert "Info [STR0001] (Deployment default/httpbin " in out, out
    assert "Error" not in out and "Warning" not in out, out


def test_check_names_file_line_col_of_a_bad_service(tmp_path):
    conf = tmp_path / "conf.d"
    conf.mkdir()
    (conf / "a.yaml").write_text(
        service().replace("targetPort: 8080", "targetPort: Not_A_Name"))
    p = subprocess.run([STRAIT, "check", str(conf)], capture_output=True,
                       text=True, timeout=30)
    assert p.returncode != 0
    out = p.stdout + p.stderr
    line = next(i for i, l in enumerate(service().splitlines(), 1)
                if "targetPort" in l)
    assert f"{conf}/a.yaml:{line}:17" in out, out
    assert "IST0106" in out and "spec.ports[0].targetPort" in out, out


def b64(path):
    return base64.b64encode(open(path, "rb").read()).decode()


def secret_yaml(name, crt, key, ns="istio-system", type_="kubernetes.io/tls"):
    return f"""apiVersion: v1
data:
  tls.crt: {b64(crt)}
  tls.key: {b64(key)}
kind: Secret
metadata:
  creationTimestamp: "2026-11-30T10:00:00Z"
  name: {name}
  namespace: {ns}
  resourceVersion: "2001"
  uid: 9a8b7c6d-1111-2222-3333-444455556666
type: {type_}
---
"""


def tls_gateway(port, up, cred, mode="SIMPLE"):
    return f"""apiVersion: networking.istio.io/v1
kind: Gateway
metadata:
  name: mygateway
  namespace: default
spec:
  selector:
    istio: ingressgateway
  servers:
  - port:
      number: {port}
      name: https
      protocol: HTTPS
    bind: 127.0.0.1
    tls:
      mode: {mode}
      credentialName: {cred}
    hosts:
    - httpbin.example.com
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: up, namespace: default}}
spec:
  hosts: [up.internal]
  resolution: STATIC
  ports: [{{number: {up}, name: http, protocol: HTTP}}]
  endpoints: [{{address: 127.0.0.1}}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata:
  name: httpbin
  namespace: default
spec:
  hosts:
  - httpbin.example.com
  gateways:
  - mygateway
  http:
  - route:
    - destination:
        host: up.internal
"""


def curl_tls(port, ca, cert=None):
    extra = ["--cert", cert[0], "--key", cert[1]] if cert else []
    p = subprocess.run(["curl", "-sS", "--max-time", "10", "-o", "-",
                        "-w", "\n%{http_code}", "--cacert", ca, *extra,
                        "--resolve", f"httpbin.example.com:{port}:127.0.0.1",
                        f"https://httpbin.example.com:{port}/"],
                       capture_output=True, text=True, timeout=30)
    body, _, code = p.stdout.rpartition("\n")
    return (int(code) if p.returncode == 0 and code.isdigit() else None), \
        body + p.stderr


def test_secret_is_the_gateway_credential(strait_factory, upstream_factory,
                                          tmp_path):
    """A kubernetes.io/tls Secret in the gateway's namespace (the node's,
    istio-system, as istiod looks in the gateway workload's; the Gateway is
    in default, as in Istio's secure ingress task) is its credentialName
    without any file in credentials.dir: curl verifies the
    certificate against the Secret's own tls.crt. No part of the Secret's
    values is shown by /config_dump or written to the log."""
    d = tmp_path / "certs"
    d.mkdir()
    crt, key = make_cert(str(d), "httpbin", "httpbin.example.com",
                         ["httpbin.example.com"])
    up = upstream_factory(responder(lambda h: b"via-secret"))
    conf = tmp_path / "conf.d"
    conf.mkdir()
    port = free_port()
    (conf / "secret.yaml").write_text(secret_yaml("httpbin-credential", crt, key))
    (conf / "gw.yaml").write_text(tls_gateway(port, up.port, "httpbin-credential"))
    creds = tmp_path / "credentials"
    creds.mkdir()
    st = strait_factory(extra=NODE + f"config: {{dir: \"{conf}\"}}\n"
                        f"credentials: {{dir: \"{creds}\"}}\n").start()
    wait_for(lambda: curl_tls(port, crt)[0] == 200, 10, "TLS with the Secret")
    code, body = curl_tls(port, crt)
    assert (code, body) == (200, "via-secret"), body
    code, dump, _ = st.get("/config_dump")
    assert code == 200
    b64key = base64.b64encode(open(key, "rb").read()).decode()
    b64crt = base64.b64encode(open(crt, "rb").read()).decode()
    pem_key_line = open(key).read().splitlines()[1]
    for secret in (b64key, b64crt, b64key[:40], b64crt[:40], pem_key_line):
        assert secret not in dump
        assert secret not in st.log()
    assert '"tls.key":"<redacted>"' in dump


def test_secret_mutual_with_cacert_secret(strait_factory, upstream_factory,
                                          tmp_path):
    """MUTUAL: the server certificate from Secret NAME, the client CA from
    Istio's NAME-cacert Secret (an Opaque one, key ca.crt); a client with
    a certificate from that CA gets 200, one without none is refused. A
    file credential of the same name in credentials.dir is not read."""
    d = tmp_path / "certs"
    d.mkdir()
    crt, key = make_cert(str(d), "srv", "httpbin.example.com",
                         ["httpbin.example.com"])
    client = make_cert(str(d), "client", "client.example.com",
                       ["client.example.com"])
    up = upstream_factory(responder(lambda h: b"mutual"))
    conf = tmp_path / "conf.d"
    conf.mkdir()
    port = free_port()
    (conf / "secret.yaml").write_text(
        secret_yaml("mtls-credential", crt, key)
        + f"""apiVersion: v1
data:
  ca.crt: {b64(client[0])}
kind: Secret
metadata:
  name: mtls-credential-cacert
  namespace: istio-system
type: Opaque
""")
    (conf / "gw.yaml").write_text(
        tls_gateway(port, up.port, "mtls-credential", mode="MUTUAL"))
    creds = tmp_path / "credentials"
    (creds / "mtls-credential").mkdir(parents=True)
    # A decoy of the same name: never read while the Secret exists.
    other = make_cert(str(d), "decoy", "decoy.test", ["decoy.test"])
    (creds / "mtls-credential" / "tls.crt").write_bytes(open(other[0], "rb").read())
    (creds / "mtls-credential" / "tls.key").write_bytes(open(other[1], "rb").read())
    strait_factory(extra=NODE + f"config: {{dir: \"{conf}\"}}\n"
                   f"credentials: {{dir: \"{creds}\"}}\n").start()
    wait_for(lambda: curl_tls(port, crt, client)[0] == 200, 10,
             "mutual TLS with the Secrets")
    assert curl_tls(port, crt, client) == (200, "mutual")
    code, err = curl_tls(port, crt)
    assert code is None, err


def test_changed_secret_is_served_and_namespace_labels_shown(
        strait_factory, upstream_factory, tmp_path):
    """Replacing the Secret's certificate (as `kubectl apply` of a new one
    would) is picked up on the directory's reload: clients then verify
    against the new one only. A Namespace is shown with its labels."""
    d = tmp_path / "certs"
    d.mkdir()
    old = make_cert(str(d), "old", "httpbin.example.com", ["httpbin.example.com"])
    new = make_cert(str(d), "new", "httpbin.example.com", ["httpbin.example.com"])
    up = upstream_factory(responder(lambda h: b"ok"))
    conf = tmp_path / "conf.d"
    conf.mkdir()
    port = free_port()
    ns = """apiVersion: v1
kind: Namespace
metadata:
  labels:
    istio-injection: enabled
    kubernetes.io/metadata.name: istio-system
  name: istio-system
spec:
  finalizers:
  - kubernetes
status:
  phase: Active
"""
    (conf / "ns.yaml").write_text(ns)
    (conf / "secret.yaml").write_text(secret_yaml("httpbin-credential", *old))
    (conf / "gw.yaml").write_text(tls_gateway(port, up.port, "httpbin-credential"))
    st = strait_factory(extra=NODE + f"config: {{dir: \"{conf}\"}}\n").start()
    wait_for(lambda: curl_tls(port, old[0])[0] == 200, 10, "the old certificate")
    assert curl_tls(port, new[0])[0] is None
    code, dump, _ = st.get("/config_dump")
    nsr = [r for r in find_resources(json.loads(dump))
           if r["kind"] == "Namespace"]
    assert nsr and nsr[0]["labels"]["istio-injection"] == "enabled", nsr
    tmp = conf / ".secret.tmp"
    tmp.write_text(secret_yaml("httpbin-credential", *new))
    tmp.rename(conf / "secret.yaml")
    wait_for(lambda: curl_tls(port, new[0])[0] == 200, 10, "the new certificate")
    assert curl_tls(port, old[0])[0] is None


def test_service_selector_picks_workload_entries(strait_factory,
                                                 upstream_factory, tmp_path):
    """A Service with no EndpointSlice: its endpoints are the
    WorkloadEntries of its namespace its selector matches (a VM behind a
    Kubernetes Service, as istiod adds them), on the WorkloadEntry's port
    for the Service port's name; a DestinationRule subset picks among
    them by label."""
    v1 = upstream_factory(responder(lambda h: b"v1"))
    v2 = upstream_factory(responder(lambda h: b"v2"))
    other = upstream_factory(responder(lambda h: b"other"))
    conf = tmp_path / "conf.d"
    conf.mkdir()
    port = free_port()
    wes = "".join(f"""apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata:
  name: {name}
  namespace: default
spec:
  address: 127.0.0.1
  labels:
    app: {app}
    version: {version}
  ports:
    http: {up.port}
---
""" for name, app, version, up in (("vm-1", "httpbin", "v1", v1),
                                   ("vm-2", "httpbin", "v2", v2),
                                   ("vm-3", "other", "v1", other)))
    (conf / "httpbin.yaml").write_text(service() + wes + """apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata:
  name: httpbin
  namespace: default
spec:
  host: httpbin
  subsets:
  - name: v2
    labels:
      version: v2
""")
    (conf / "routing.yaml").write_text(routing(port).replace(
        "          number: 8000\n",
        "          number: 8000\n        subset: v2\n"))
    strait_factory(extra=NODE + f"config: {{dir: \"{conf}\"}}\n").start()
    wait_for(lambda: get(port)[0] == 200, 10, "a route to the Service")
    assert {get(port)[1] for _ in range(6)} == {"v2"}
    assert v1.conns == 0 and other.conns == 0


def test_destination_rule_credential_from_secret(strait_factory, tmp_path):
    """DestinationRule tls MUTUAL credentialName: the client certificate,
    key and CA from a generic Secret of the gateway's namespace (what
    `kubectl create secret generic client-credential --from-file=tls.key
    --from-file=tls.crt --from-file=ca.crt -n istio-system` makes, as in
    Istio's egress TLS origination task): the upstream sees the client
    certificate and strait verifies the upstream by the Secret's CA."""
    from test_upstream_mtls import TLSUpstream
    d = tmp_path / "certs"
    d.mkdir()
    srv = make_cert(str(d), "up", "up.internal", ["up.internal"])
    client = make_cert(str(d), "client", "client.example.com",
                       ["client.example.com"])
    up = TLSUpstream(srv[0], srv[1], client[0])
    try:
        conf = tmp_path / "conf.d"
        conf.mkdir()
        port = free_port()
        (conf / "r.yaml").write_text(f"""apiVersion: v1
data:
  ca.crt: {b64(srv[0])}
  tls.crt: {b64(client[0])}
  tls.key: {b64(client[1])}
kind: Secret
metadata:
  name: client-credential
  namespace: istio-system
type: Opaque
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: up, namespace: default}}
spec:
  hosts: [up.internal]
  location: MESH_EXTERNAL
  resolution: STATIC
  ports: [{{number: {up.port}, name: http, protocol: HTTP}}]
  endpoints: [{{address: 127.0.0.1}}]
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {{name: up, namespace: default}}
spec:
  host: up.internal
  trafficPolicy:
    tls:
      mode: MUTUAL
      credentialName: client-credential
      sni: up.internal
---
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {{name: gw, namespace: default}}
spec:
  selector: {{istio: ingressgateway}}
  servers:
  - port: {{number: {port}, name: http, protocol: HTTP}}
    bind: 127.0.0.1
    hosts: ["*"]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: vs, namespace: default}}
spec:
  hosts: ["*"]
  gateways: [gw]
  http:
  - route: [{{destination: {{host: up.internal}}}}]
""")
        strait_factory(extra=NODE + f"config: {{dir: \"{conf}\"}}\n").start()
        wait_for(lambda: get(port)[0] == 200, 10, "mTLS origination")
        assert up.handshakes >= 1
        # A new client certificate in the Secret, which the upstream does
        # not trust: the cluster is rebuilt with it, and refused.
        other = make_cert(str(d), "other", "other.example.com",
                          ["other.example.com"])
        text = (conf / "r.yaml").read_text().replace(
            b64(client[0]), b64(other[0])).replace(b64(client[1]),
                                                   b64(other[1]))
        tmp = conf / ".r.tmp"
        tmp.write_text(text)
        tmp.rename(conf / "r.yaml")
        wait_for(lambda: get(port)[0] == 503, 10,
                 "the new client certificate in use")
    finally:
        up.stop()


def test_endpoint_turning_not_ready_leaves_the_service(strait_factory,
                                                       upstream_factory,
                                                       tmp_path):
    """An EndpointSlice rewritten with the endpoint not ready (a pod going
    away) takes it out on the directory's reload: 503 once it is the
    last; ready again, it is back."""
    up = upstream_factory(responder(lambda h: b"up"))
    conf = tmp_path / "conf.d"
    conf.mkdir()
    port = free_port()

    def write(ready):
        tmp = conf / ".slice.tmp"
        tmp.write_text(slice_("a1", up.port, endpoint(
            "127.0.0.1", {"ready": ready}, "pod-a")))
        tmp.rename(conf / "slice.yaml")

    (conf / "svc.yaml").write_text(service())
    write("true")
    (conf / "routing.yaml").write_text(routing(port))
    strait_factory(extra=NODE + f"config: {{dir: \"{conf}\"}}\n").start()
    wait_for(lambda: get(port)[0] == 200, 10, "the ready endpoint")
    write("false")
    wait_for(lambda: get(port)[0] == 503, 10, "no endpoint left")
    before = up.conns
    assert get(port)[0] == 503
    assert up.conns == before
    write("true")
    wait_for(lambda: get(port)[0] == 200, 10, "the endpoint back")


def test_check_reports_gateway_port_not_on_service(tmp_path):
    """`strait check -c` with the ingress gateway's own Service (as Istio
    installs it) in node.namespace: a Gateway port its targetPorts do not
    reach is IST0162, a Warning at the server's port, exit code 0."""
    conf = tmp_path / "conf.d"
    conf.mkdir()
    (conf / "gw.yaml").write_text("""apiVersion: v1
kind: Service
metadata:
  labels:
    app: istio-ingressgateway
    istio: ingressgateway
  name: istio-ingressgateway
  namespace: istio-system
spec:
  ports:
  - name: status-port
    nodePort: 31441
    port: 15021
    protocol: TCP
    targetPort: 15021
  - name: http2
    nodePort: 30080
    port: 80
    protocol: TCP
    targetPort: 8080
  - name: https
    nodePort: 30443
    port: 443
    protocol: TCP
    targetPort: 8443
  selector:
    app: istio-ingressgateway
    istio: ingressgateway
  type: LoadBalancer
status:
  loadBalancer: {}
---
apiVersion: networking.istio.io/v1
kind: Gateway
metadata:
  name: httpbin-gateway
spec:
  selector:
    istio: ingressgateway
  servers:
  - port:
      number: 8080
      name: http
      protocol: HTTP
    hosts:
    - "httpbin.example.com"
  - port:
      number: 9090
      name: http-other
      protocol: HTTP
    hosts:
    - "httpbin.example.com"
""")
    boot = tmp_path / "strait.yaml"
    boot.write_text("node: {namespace: istio-system, labels: "
                    "{istio: ingressgateway, app: istio-ingressgateway}}\n")
    p = subprocess.run([STRAIT, "check", "-c", str(boot), str(conf)],
                       capture_output=True, text=True, timeout=30)
    out = p.stdout + p.stderr
    assert p.returncode == 0, out
    assert out.count("IST0162") == 1, out
    assert (f"Warning [IST0162] (Gateway default/httpbin-gateway "
            f"{conf}/gw.yaml:48:7) spec.servers[1].port: The gateway is "
            "listening on a target port (port 9090) that is not defined in "
            "the Service associated with its workload instances (Pod "
            "selector istio=ingressgateway). If you need to access the "
            "gateway port through the gateway Service, it will not be "
            "available.") in out, out


def test_bad_secret_is_named_when_the_gateway_cannot_start(tmp_path):
    """A Secret whose tls.crt is not PEM stops the start with a message
    that names the Secret and the key (never its value), not the path of
    the in-memory file strait made of it."""
    conf = tmp_path / "conf.d"
    conf.mkdir()
    (conf / "a.yaml").write_text(f"""apiVersion: v1
kind: Secret
metadata: {{name: cred, namespace: istio-system}}
type: kubernetes.io/tls
stringData: {{tls.crt: not-a-certificate-xyzzy, tls.key: not-a-key-plugh}}
---
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {{name: gw}}
spec:
  selector: {{}}
  servers:
  - port: {{number: {free_port()}, name: https, protocol: HTTPS}}
    bind: 127.0.0.1
    hosts: ["*"]
    tls: {{mode: SIMPLE, credentialName: cred}}
""")
    boot = tmp_path / "strait.yaml"
    boot.write_text(f"admin: {{address: 127.0.0.1:{free_port()}}}\n"
                    f"config: {{dir: \"{conf}\"}}\n")
    p = subprocess.run([STRAIT, "run", "-c", str(boot)], capture_output=True,
                       text=True, timeout=30)
    out = p.stdout + p.stderr
    assert p.returncode != 0, out
    assert ("Gateway default/gw: port" in out and
            "Secret istio-system/cred: tls.crt is not a PEM certificate"
            in out), out
    assert "xyzzy" not in out and "plugh" not in out and "/proc/self" not in out


def test_kubernetes_service_wins_over_a_service_entry_of_its_host(
        strait_factory, upstream_factory, tmp_path):
    """A ServiceEntry for httpbin.default.svc.cluster.local beside the
    Service httpbin: as in istiod, the Kubernetes Service owns its host,
    so no request goes to the ServiceEntry's endpoints."""
    svc = upstream_factory(responder(lambda h: b"service"))
    squat = upstream_factory(responder(lambda h: b"serviceentry"))
    conf = tmp_path / "conf.d"
    conf.mkdir()
    port = free_port()
    (conf / "httpbin.yaml").write_text(
        service() + slice_("a1", svc.port, endpoint(
            "127.0.0.1", {"ready": "true"}, "pod-a"))
        + f"""apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: squat, namespace: other}}
spec:
  hosts: [httpbin.default.svc.cluster.local]
  location: MESH_INTERNAL
  resolution: STATIC
  ports: [{{number: 8000, name: http, protocol: HTTP}}]
  endpoints: [{{address: 127.0.0.1, ports: {{http: {squat.port}}}}}]
""")
    (conf / "routing.yaml").write_text(routing(port))
    strait_factory(extra=NODE + f"config: {{dir: \"{conf}\"}}\n").start()
    wait_for(lambda: get(port)[0] == 200, 10, "a route to the Service")
    assert {get(port)[1] for _ in range(8)} == {"service"}
    assert squat.conns == 0


def test_secret_key_of_another_certificate_is_named(tmp_path):
    """tls.key from another certificate: the start fails naming the
    Secret, not the in-memory file."""
    d = tmp_path / "certs"
    d.mkdir()
    a = make_cert(str(d), "a", "a.example.com", ["a.example.com"])
    b = make_cert(str(d), "b", "b.example.com", ["b.example.com"])
    conf = tmp_path / "conf.d"
    conf.mkdir()
    (conf / "a.yaml").write_text(secret_yaml("cred", a[0], b[1])
                                 + tls_gateway(free_port(), 1, "cred"))
    boot = tmp_path / "strait.yaml"
    boot.write_text(NODE + f"admin: {{address: 127.0.0.1:{free_port()}}}\n"
                    f"config: {{dir: \"{conf}\"}}\n")
    p = subprocess.run([STRAIT, "run", "-c", str(boot)], capture_output=True,
                       text=True, timeout=30)
    out = p.stdout + p.stderr
    assert p.returncode != 0, out
    assert "Secret istio-system/cred: tls.key is not the key of tls.crt" in out, out
    assert "/proc/self" not in out
