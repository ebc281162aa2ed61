"""Port translation as istiod does it (docs/pods.md): a Gateway server
port that is a port of the gateway's own Service listens on that port's
targetPort. The Service is the one `istioctl install` writes for
istio-ingressgateway (80 and 443 to target ports; here free ports stand
for its 8080 and 8443, so no test binds a fixed port), found from the
node's labels or named by node.service; /config_dump and `strait check`
say so."""
import json
import socket
import subprocess

import pytest

from conftest import (STRAIT, Strait, Upstream, finish_strait, free_port,
                      responder, wait_for)

NODE_LABELS = "{app: istio-ingressgateway, istio: ingressgateway}"


def istioctl_service(http_target, https_target):
    """istio-ingressgateway's Service as `istioctl install` writes it,
    target ports aside."""
    return f"""apiVersion: v1
kind: Service
metadata:
  name: istio-ingressgateway
  namespace: istio-system
  labels: {{app: istio-ingressgateway, install.operator.istio.io/owning-resource: unknown, istio: ingressgateway, istio.io/rev: default, operator.istio.io/component: IngressGateways, release: istio}}
  annotations: {{}}
spec:
  type: LoadBalancer
  selector: {{app: istio-ingressgateway, istio: ingressgateway}}
  externalTrafficPolicy: Cluster
  internalTrafficPolicy: Cluster
  ipFamilies: [IPv4]
  ipFamilyPolicy: SingleStack
  sessionAffinity: None
  ports:
  - {{name: status-port, port: 15021, protocol: TCP, targetPort: 15021}}
  - {{name: http2, port: 80, protocol: TCP, targetPort: {http_target}}}
  - {{name: https, port: 443, protocol: TCP, targetPort: {https_target}}}
---
"""


def resources(http_target, https_target, up_port):
    return istioctl_service(http_target, https_target) + f"""apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {{name: gw, namespace: istio-system}}
spec:
  selector: {{istio: ingressgateway}}
  servers:
  - port: {{number: 80, name: http, protocol: HTTP}}
    bind: 127.0.0.1
    hosts: ["*"]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: web, namespace: istio-system}}
spec:
  hosts: [web.example.com]
  ports: [{{number: 80, name: http, protocol: HTTP}}]
  resolution: STATIC
  endpoints: [{{address: 127.0.0.1, ports: {{http: {up_port}}}}}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: web, namespace: istio-system}}
spec:
  hosts: ["*"]
  gateways: [gw]
  http:
  - match: [{{port: 80}}]
    route: [{{destination: {{host: web.example.com, port: {{number: 80}}}}}}]
"""


def node_yaml(service=None, labels=NODE_LABELS):
    extra = f", service: {service}" if service else ""
    return f"node: {{namespace: istio-system, labels: {labels}{extra}}}\n"


def get(port):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            s.sendall(b"GET / HTTP/1.1\r\nhost: web\r\nconnection: close\r\n\r\n")
            out = b""
            while True:
                d = s.recv(65536)
                if not d:
                    break
                out += d
            return out
    except OSError:
        return None


@pytest.fixture(scope="module")
def translated(tmp_path_factory):
    """One strait whose node has the labels the Service selects."""
    tmp = tmp_path_factory.mktemp("ports")
    up = Upstream(responder(lambda h: b"web"))
    http_t, https_t = free_port(), free_port()
    conf = tmp / "conf.d"
    conf.mkdir()
    (conf / "r.yaml").write_text(resources(http_t, https_t, up.port))
    st = Strait(tmp, extra=node_yaml() + f"config: {{dir: \"{conf}\"}}\n")
    st.start()
    yield st, http_t, conf
    finish_strait(st)
    up.stop()


def test_server_port_listens_on_the_service_target_port(translated):
    """Server port 80 is the Service's port 80: strait listens on its
    targetPort, and the route (match port 80) still takes the request."""
    st, http_t, _ = translated
    wait_for(lambda: (get(http_t) or b"").endswith(b"web"), 10,
             "the gateway on the targetPort")
    assert get(http_t).startswith(b"HTTP/1.1 200")


def test_config_dump_says_which_port_and_why(translated):
    st, http_t, _ = translated
    dump = json.loads(st.get("/config_dump")[1])
    assert dump["gatewayPorts"] == [{
        "gateway": "istio-system/gw", "server": 0, "port": 80,
        "listenPort": http_t, "service": "istio-system/istio-ingressgateway"}]


def test_check_says_the_port_is_translated(translated):
    """`strait check -c` with the node's labels: an Info per translated
    server (STR0012), no IST0162."""
    st, http_t, conf = translated
    r = subprocess.run([STRAIT, "check", "-c", str(st.config), str(conf)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Info [STR0012] (Gateway istio-system/gw " in r.stdout, r.stdout
    assert (f"Gateway server port 80 listens on {http_t}: the targetPort of "
            f"port 80 of the gateway's Service istio-system/istio-ingressgateway"
            in r.stdout), r.stdout
    assert "IST0162" not in r.stdout


def test_node_service_names_the_service(tmp_path, strait_factory,
                                        upstream_factory):
    """node.service names the Service when the node's labels are not its
    selector's."""
    up = upstream_factory(responder(lambda h: b"web"))
    http_t, https_t = free_port(), free_port()
    conf = tmp_path / "conf.d"
    conf.mkdir()
    text = resources(http_t, https_t, up.port)
    # The Gateway selects the node; the Service's selector does not.
    text = text.replace("selector: {istio: ingressgateway}",
                        "selector: {gw: mine}")
    (conf / "r.yaml").write_text(text)
    st = strait_factory(extra=node_yaml(
        service="istio-system/istio-ingressgateway", labels="{gw: mine}") +
        f"config: {{dir: \"{conf}\"}}\n").start()
    wait_for(lambda: (get(http_t) or b"").endswith(b"web"), 10,
             "the gateway on the named Service's targetPort")
    dump = json.loads(st.get("/config_dump")[1])
    assert dump["gatewayPorts"][0]["listenPort"] == http_t


def test_bad_node_service_is_refused(tmp_path):
    p = tmp_path / "strait.yaml"
    p.write_text("node: {service: Istio-System/x/y}\n")
    r = subprocess.run([STRAIT, "check", "-c", str(p)], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode != 0
    assert "node.service" in r.stdout + r.stderr
    assert "expected NAME or NAMESPACE/NAME" in r.stdout + r.stderr
