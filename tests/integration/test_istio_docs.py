"""The scenarios of Istio's documentation tasks, end to end (issue 13).

Each test plays one task: the resources the task applies, written here
in our own words (names, layout and the stand-in backends are ours; the
kinds, fields and values that make the scenario are the task's), or,
where the task applies one of Istio's samples that the project ships,
that file of tests/data/istio-samples unchanged. Beside them goes only
what a VM user adds, and the test checks the outcome the task page
describes:

- the node's labels (`istio: ingressgateway`, and `app:
  istio-ingressgateway` for the policies that select by it);
- a ServiceEntry for each Kubernetes Service the task deploys (httpbin,
  helloworld, nginx, tcp-echo), its endpoints on loopback;
- `kubectl create secret tls NAME` becomes credentials.dir/NAME/ files,
  `kubectl apply -n NS` a file in conf.d/NS/.

The backends are small Python servers standing in for the task's
deployments; the JWT tasks' key set and tokens are made by the test.
The Gateways listen on the ports the tasks use (80, 443, 31400): every
test runs in a network namespace of its own, so those ports never meet
another test's, and a test is skipped where one cannot be made.
"""
import ctypes
import http.server
import json
import os
import pathlib
import shutil
import socket
import ssl
import subprocess
import threading
import time

import pytest

from conftest import SRCDIR, STRAIT, wait_for
from test_jwt import Key, jwks, mint

SAMPLES = pathlib.Path(SRCDIR) / "tests" / "data" / "istio-samples"
BOOKINFO = SAMPLES / "bookinfo" / "networking"
CLONE_NEWNET = 0x40000000


@pytest.fixture
def netns():
    """A network namespace of the test's own, with loopback up; the test
    process and all it starts are in it until the teardown."""
    libc = ctypes.CDLL(None, use_errno=True)
    if shutil.which("ip") is None:
        pytest.skip("no ip(8) to bring loopback up in a network namespace")
    if shutil.which("curl") is None:
        pytest.skip("no curl(1), which the tasks' commands use")
    fd = os.open("/proc/self/ns/net", os.O_RDONLY)
    if libc.unshare(CLONE_NEWNET) != 0:
        os.close(fd)
        pytest.skip("cannot make a network namespace: "
                    + os.strerror(ctypes.get_errno()))
    try:
        subprocess.run(["ip", "link", "set", "lo", "up"], check=True,
                       capture_output=True, timeout=10)
        yield
    finally:
        libc.setns(fd, CLONE_NEWNET)
        os.close(fd)


class Httpbin(http.server.BaseHTTPRequestHandler):
    """What the tasks ask of httpbin: /status/CODE, /headers, /get, /ip,
    /post, /delay/SECONDS; helloworld's /hello; bookinfo's /productpage."""
    protocol_version = "HTTP/1.1"
    gate = None  # a threading.Event /get waits for, when set
    arrived = None  # a Semaphore released when /get arrives

    def answer(self, code, body, ctype="application/json"):
        self.wfile.write(b"HTTP/1.1 %d X\r\ncontent-type: %s\r\n"
                         b"content-length: %d\r\n\r\n%s"
                         % (code, ctype.encode(), len(body),
                            b"" if self.command == "HEAD" else body))

    def do_GET(self):
        parts = self.path.split("?")[0].strip("/").split("/")
        if parts[0] == "status" and len(parts) == 2:
            code = int(parts[1])
            self.answer(code, b"    -=[ teapot ]=-\n" if code == 418 else b"",
                        "text/plain")
        elif parts[0] == "headers":
            self.answer(200, json.dumps(
                {"headers": dict(self.headers.items())}).encode())
        elif parts[0] == "get":
            if self.arrived is not None:
                self.arrived.release()
            if self.gate is not None:
                self.gate.wait(20)
            self.answer(200, json.dumps({"url": self.path}).encode())
        elif parts[0] == "delay":
            time.sleep(float(parts[1]))
            self.answer(200, b"{}")
        elif parts[0] in ("ip", "post"):
            self.answer(200, json.dumps({"origin": self.client_address[0]})
                        .encode())
        elif parts[0] == "productpage":
            self.answer(200, b"<title>Simple Bookstore App</title>\n",
                        "text/html")
        elif parts[0] == "hello":
            self.answer(200, b"Hello version: v1, instance: helloworld-v1\n",
                        "text/plain")
        else:
            self.answer(404, b"", "text/plain")

    do_HEAD = do_GET
    do_POST = do_GET

    def log_message(self, *a):
        pass


@pytest.fixture
def backends():
    made = []

    def make(handler=Httpbin, tls=None):
        srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        if tls is not None:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(*tls)
            srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        made.append(srv)
        return srv.server_address[1]

    yield make
    for srv in made:
        srv.shutdown()
        srv.server_close()


def service_entry(name, ns, port, target, protocol="HTTP", labels=None):
    """What a VM user writes for a Kubernetes Service NAME.NS with one
    port: a ServiceEntry whose endpoint is the backend on loopback (each
    (labels, port) in target a WorkloadEntry-style endpoint)."""
    eps = "".join(
        f"  - {{address: 127.0.0.1, ports: {{{protocol.lower()}: {p}}}"
        + (f", labels: {json.dumps(lab)}" if lab else "") + "}\n"
        for lab, p in target)
    return f"""apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: {name}, namespace: {ns}}}
spec:
  hosts: [{name}.{ns}.svc.cluster.local]
  location: MESH_INTERNAL
  resolution: STATIC
  ports: [{{number: {port}, name: {protocol.lower()}, protocol: {protocol}}}]
  endpoints:
{eps}---
"""


class Node:
    """strait with conf.d and credentials.dir in tmp_path; the node
    (bootstrap node: keys) labelled as Istio's ingress gateway unless
    node says otherwise."""

    def __init__(self, strait_factory, tmp_path, workers=2,
                 node="labels: {istio: ingressgateway, app: istio-ingressgateway}",
                 extra=""):
        self.conf = tmp_path / "conf.d"
        self.creds = tmp_path / "credentials"
        self.conf.mkdir()
        self.creds.mkdir()
        self.st = strait_factory(workers=workers, extra=(
            f"node: {{{node}}}\n"
            f"config: {{dir: \"{self.conf}\", debounce: 20ms}}\n"
            f"credentials: {{dir: \"{self.creds}\"}}\n{extra}"))

    def apply(self, src, name=None, ns=None):
        """kubectl apply -f src [-n ns] for a file of tests/data/istio-samples:
        the file, unchanged, into conf.d (conf.d/NS)."""
        self.put(name or pathlib.Path(src).name,
                 pathlib.Path(src).read_text(), ns)

    def put(self, name, text, ns=None):
        """Writes conf.d/[NS/]NAME whole (write and rename), as kubectl
        apply replaces an object."""
        d = self.conf / ns if ns else self.conf
        d.mkdir(exist_ok=True)
        tmp = d / ("." + name)
        tmp.write_text(text)
        os.replace(tmp, d / name)

    def secret(self, name, crt, key, ca=None):
        """kubectl create secret tls|generic NAME as files."""
        d = self.creds / name
        tmp = self.creds / ("." + name)
        tmp.mkdir()
        shutil.copy(crt, tmp / "tls.crt")
        shutil.copy(key, tmp / "tls.key")
        if ca is not None:
            shutil.copy(ca, tmp / "ca.crt")
        if d.exists():
            old = self.creds / (".old-" + name)
            os.rename(d, old)
            os.rename(tmp, d)
            shutil.rmtree(old)
        else:
            os.rename(tmp, d)

    def start(self):
        self.st.start()
        return self

    def reloads(self):
        return self.st.stats()["resources.reloads_ok"]


@pytest.fixture
def node(netns, strait_factory, tmp_path):
    return Node(strait_factory, tmp_path)


def curl(*args):
    """curl as the task runs it; returns (http code or 0, stdout+stderr)."""
    r = subprocess.run(["curl", "-s", "-S", "--max-time", "10", "-o", "-",
                        "-w", "\n%{http_code}", *args], capture_output=True,
                       text=True, timeout=30)
    out, _, code = r.stdout.rpartition("\n")
    return int(code or 0), out + r.stderr


def example_certs(d, *names):
    """The task's openssl commands: a root example.com and leaves for
    names, signed by it; returns {name: (crt, key)}, "example.com" the
    root."""
    d.mkdir()

    def run(*cmd):
        subprocess.run(cmd, check=True, capture_output=True, timeout=60, cwd=d)

    run("openssl", "req", "-x509", "-sha256", "-nodes", "-days", "365",
        "-newkey", "rsa:2048", "-subj", "/O=example Inc./CN=example.com",
        "-keyout", "example.com.key", "-out", "example.com.crt")
    for i, n in enumerate(names):
        run("openssl", "req", "-out", f"{n}.csr", "-newkey", "rsa:2048",
            "-nodes", "-keyout", f"{n}.key", "-subj",
            f"/CN={n}/O={n.split('.')[0]} organization")
        run("openssl", "x509", "-req", "-sha256", "-days", "365", "-CA",
            "example.com.crt", "-CAkey", "example.com.key", "-set_serial",
            str(i), "-in", f"{n}.csr", "-out", f"{n}.crt")
    return {n: (str(d / f"{n}.crt"), str(d / f"{n}.key"))
            for n in ("example.com", *names)}


def wait_code(want, *args, what="the task's answer"):
    got = []

    def ok():
        got[:] = [curl(*args)]
        return got[0][0] == want
    try:
        wait_for(ok, 10, what)
    except AssertionError:
        raise AssertionError(f"{what}: wanted {want}, got {got}")


# -- traffic-management/ingress/ingress-control ---------------------------------

WEB_GATEWAY = """apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: web-gw}
spec:
  selector: {istio: ingressgateway}
  servers:
  - port: {number: 80, name: plain-http, protocol: HTTP}
    hosts: [httpbin.example.com]
"""

WEB_ROUTES = """apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: web-routes}
spec:
  hosts: [httpbin.example.com]
  gateways: [web-gw]
  http:
  - match: [{uri: {prefix: /status}}, {uri: {prefix: /delay}}]
    route: [{destination: {host: httpbin, port: {number: 8000}}}]
"""

# "Accessing ingress services using a browser": any Host, /headers only,
# both objects in one file.
WEB_ANY_HOST = """apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: web-gw}
spec:
  selector: {istio: ingressgateway}
  servers:
  - port: {number: 80, name: plain-http, protocol: HTTP}
    hosts: ["*"]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: web-routes}
spec:
  hosts: ["*"]
  gateways: [web-gw]
  http:
  - match: [{uri: {prefix: /headers}}]
    route: [{destination: {host: httpbin, port: {number: 8000}}}]
"""


def test_ingress_control(node, backends):
    """The scenario of Istio's task ingress-control: only /status and
    /delay of httpbin.example.com are exposed; /headers is 404. The
    browser variant (hosts "*") exposes /headers to any Host."""
    node.put("vm-node.yaml", service_entry("httpbin", "default", 8000,
                                           [(None, backends())]))
    node.put("gateway.yaml", WEB_GATEWAY)
    node.put("routes.yaml", WEB_ROUTES)
    node.start()
    code, out = curl("-I", "-HHost:httpbin.example.com",
                     "http://127.0.0.1:80/status/200")
    assert code == 200, out
    assert curl("-I", "-HHost:httpbin.example.com",
                "http://127.0.0.1:80/headers")[0] == 404
    # A Host the Gateway does not list reaches no route.
    assert curl("-HHost:other.example.com",
                "http://127.0.0.1:80/status/200")[0] == 404
    # The same two names, now in one file (kubectl apply replaces them).
    (node.conf / "gateway.yaml").unlink()
    (node.conf / "routes.yaml").unlink()
    node.put("any-host.yaml", WEB_ANY_HOST)
    wait_code(200, "http://127.0.0.1:80/headers", what="/headers for any Host")
    code, out = curl("http://127.0.0.1:80/headers")
    headers = {k.lower(): v for k, v in json.loads(out)["headers"].items()}
    assert headers["host"] == "127.0.0.1"


# What `kubectl apply -f` of an httpbin deployment holds: a
# ServiceAccount, a Service (port 8000 to the pods' 80) and a Deployment.
HTTPBIN_K8S = """apiVersion: v1
kind: ServiceAccount
metadata: {name: httpbin}
---
apiVersion: v1
kind: Service
metadata: {name: httpbin, labels: {app: httpbin}}
spec:
  selector: {app: httpbin}
  ports: [{name: http, port: 8000, targetPort: 80}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: httpbin, labels: {app: httpbin}}
spec:
  replicas: 1
  selector: {matchLabels: {app: httpbin}}
  template:
    metadata: {labels: {app: httpbin}}
    spec:
      serviceAccountName: httpbin
      containers:
      - {name: web, image: example.invalid/httpbin, ports: [{containerPort: 80}]}
"""


def test_ingress_control_with_the_kubernetes_service(node, backends):
    """The same scenario with httpbin deployed as Kubernetes objects (its
    ServiceAccount and Deployment are ignored, its Service is the registry
    entry) and, from the VM user, an EndpointSlice saying where httpbin
    runs."""
    port = backends()
    node.put("httpbin.yaml", HTTPBIN_K8S)
    node.put("vm-node.yaml", f"""apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: httpbin-vm
  labels: {{kubernetes.io/service-name: httpbin}}
addressType: IPv4
ports: [{{name: http, port: {port}, protocol: TCP}}]
endpoints: [{{addresses: ["127.0.0.1"]}}]
""")
    node.put("gateway.yaml", WEB_GATEWAY)
    node.put("routes.yaml", WEB_ROUTES)
    node.start()
    code, out = curl("-I", "-HHost:httpbin.example.com",
                     "http://127.0.0.1:80/status/200")
    assert code == 200, out
    assert curl("-I", "-HHost:httpbin.example.com",
                "http://127.0.0.1:80/headers")[0] == 404


# -- traffic-management/ingress/secure-ingress ----------------------------------

def https(host, path, ca, *extra):
    return curl("-HHost:" + host, "--resolve", f"{host}:443:127.0.0.1",
                "--cacert", ca, *extra, f"https://{host}:443{path}")


def tls_gateway(*servers, mode="SIMPLE"):
    """A Gateway tls-gw with one HTTPS server on 443 per (host,
    credential)."""
    out = """apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: tls-gw}
spec:
  selector: {istio: ingressgateway}
  servers:
"""
    for i, (host, cred) in enumerate(servers):
        out += (f"  - port: {{number: 443, name: tls-{i}, protocol: HTTPS}}\n"
                f"    tls: {{mode: {mode}, credentialName: {cred}}}\n"
                f"    hosts: [{host}]\n")
    return out


HTTPBIN_OVER_TLS = """apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: httpbin-tls}
spec:
  hosts: [httpbin.example.com]
  gateways: [tls-gw]
  http:
  - match: [{uri: {prefix: /status}}, {uri: {prefix: /delay}}]
    route: [{destination: {host: httpbin, port: {number: 8000}}}]
"""

HELLO_OVER_TLS = """apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: hello-tls}
spec:
  hosts: [helloworld.example.com]
  gateways: [tls-gw]
  http:
  - match: [{uri: {exact: /hello}}]
    route: [{destination: {host: helloworld, port: {number: 5000}}}]
"""


def test_secure_ingress_simple_and_rotation(node, backends, tmp_path):
    """The scenario of Istio's task secure-ingress, one host: SIMPLE TLS
    with credentialName httpbin-credential, 418 through HTTPS. The
    credential is then replaced by one from another CA: the new CA
    verifies, the old one no longer does (no restart)."""
    c1 = example_certs(tmp_path / "example_certs1", "httpbin.example.com")
    c2 = example_certs(tmp_path / "example_certs2", "httpbin.example.com")
    node.secret("httpbin-credential", *c1["httpbin.example.com"])
    node.put("vm-node.yaml", service_entry("httpbin", "default", 8000,
                                           [(None, backends())]))
    node.put("gateway.yaml", tls_gateway(("httpbin.example.com",
                                          "httpbin-credential")))
    node.put("routes.yaml", HTTPBIN_OVER_TLS)
    node.start()
    code, out = https("httpbin.example.com", "/status/418", c1["example.com"][0])
    assert code == 418 and "-=[ teapot ]=-" in out, out
    node.secret("httpbin-credential", *c2["httpbin.example.com"])
    wait_code(418, "-HHost:httpbin.example.com", "--resolve",
              "httpbin.example.com:443:127.0.0.1", "--cacert",
              c2["example.com"][0], "https://httpbin.example.com:443/status/418",
              what="the rotated credential")
    # The old CA does not verify the new certificate: the task shows the
    # handshake failing (curl: (35)).
    code, out = https("httpbin.example.com", "/status/418", c1["example.com"][0])
    assert code == 0 and "curl: (35)" in out, out


def test_secure_ingress_multiple_hosts(node, backends, tmp_path):
    """The scenario of secure-ingress with several hosts: two HTTPS
    servers on port 443, one credential each: helloworld answers /hello,
    httpbin /status/418, each with its own certificate."""
    c = example_certs(tmp_path / "example_certs1", "httpbin.example.com",
                      "helloworld.example.com")
    node.secret("httpbin-credential", *c["httpbin.example.com"])
    node.secret("helloworld-credential", *c["helloworld.example.com"])
    port = backends()
    node.put("vm-node.yaml",
             service_entry("httpbin", "default", 8000, [(None, port)])
             + service_entry("helloworld", "default", 5000, [(None, port)]))
    node.put("gateway.yaml", tls_gateway(
        ("httpbin.example.com", "httpbin-credential"),
        ("helloworld.example.com", "helloworld-credential")))
    node.put("hello-routes.yaml", HELLO_OVER_TLS)
    node.put("httpbin-routes.yaml", HTTPBIN_OVER_TLS)
    node.start()
    ca = c["example.com"][0]
    code, out = https("helloworld.example.com", "/hello", ca, "-v")
    assert code == 200, out
    assert "CN=helloworld.example.com" in out
    code, out = https("httpbin.example.com", "/status/418", ca, "-v")
    assert code == 418 and "-=[ teapot ]=-" in out, out
    assert "CN=httpbin.example.com" in out


def test_secure_ingress_mutual(node, backends, tmp_path):
    """The scenario of secure-ingress with MUTUAL TLS, ca.crt in the
    credential: without a client certificate the handshake fails
    (certificate required); with the client's, 418."""
    c = example_certs(tmp_path / "example_certs1", "httpbin.example.com",
                      "client.example.com")
    node.secret("httpbin-credential", *c["httpbin.example.com"],
                ca=c["example.com"][0])
    node.put("vm-node.yaml", service_entry("httpbin", "default", 8000,
                                           [(None, backends())]))
    node.put("gateway.yaml", tls_gateway(
        ("httpbin.example.com", "httpbin-credential"), mode="MUTUAL"))
    node.put("routes.yaml", HTTPBIN_OVER_TLS)
    node.start()
    ca = c["example.com"][0]
    code, out = https("httpbin.example.com", "/status/418", ca)
    assert code == 0, out
    code, out = https("httpbin.example.com", "/status/418", ca,
                      "--cert", c["client.example.com"][0],
                      "--key", c["client.example.com"][1])
    assert code == 418 and "-=[ teapot ]=-" in out, out


# -- traffic-management/ingress/ingress-sni-passthrough ------------------------

class Nginx(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        body = b"<title>Welcome to nginx!</title>\n"
        self.wfile.write(b"HTTP/1.1 200 OK\r\nserver: nginx\r\n"
                         b"content-length: %d\r\n\r\n%s" % (len(body), body))

    def log_message(self, *a):
        pass


PASSTHROUGH = """apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: sni-gw}
spec:
  selector: {istio: ingressgateway}
  servers:
  - port: {number: 443, name: tls-through, protocol: HTTPS}
    tls: {mode: PASSTHROUGH}
    hosts: [nginx.example.com]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: nginx-by-sni}
spec:
  hosts: [nginx.example.com]
  gateways: [sni-gw]
  tls:
  - match: [{port: 443, sniHosts: [nginx.example.com]}]
    route: [{destination: {host: nginx, port: {number: 443}}}]
"""


def test_ingress_sni_passthrough(node, backends, tmp_path):
    """The scenario of Istio's task ingress-sni-passthrough: the client
    sees nginx's own certificate (issued by example.com for
    nginx.example.com), the gateway only relays."""
    c = example_certs(tmp_path / "example_certs", "nginx.example.com")
    port = backends(Nginx, tls=c["nginx.example.com"])
    node.put("vm-node.yaml", service_entry("nginx", "default", 443,
                                           [(None, port)], protocol="TLS"))
    node.put("passthrough.yaml", PASSTHROUGH)
    node.start()
    code, out = curl("-v", "--resolve", "nginx.example.com:443:127.0.0.1",
                     "--cacert", c["example.com"][0],
                     "https://nginx.example.com:443")
    assert code == 200, out
    assert "Welcome to nginx!" in out
    assert "CN=nginx.example.com" in out and "SSL certificate verify ok" in out


# -- traffic-management/tcp-traffic-shifting ------------------------------------

def echo_server(prefix):
    """tcp-echo: answers each line with prefix and the line."""
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", 0))
    s.listen(64)

    def serve():
        while True:
            try:
                c, _ = s.accept()
            except OSError:
                return
            with c:
                data = b""
                while not data.endswith(b"\n"):
                    d = c.recv(4096)
                    if not d:
                        break
                    data += d
                c.sendall(prefix + b" " + data)
    threading.Thread(target=serve, daemon=True).start()
    return s


ECHO_GATEWAY = """apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: echo-gw}
spec:
  selector: {istio: ingressgateway}
  servers:
  - port: {number: 31400, name: raw-tcp, protocol: TCP}
    hosts: ["*"]
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: echo-versions}
spec:
  host: tcp-echo
  subsets:
  - {name: v1, labels: {version: v1}}
  - {name: v2, labels: {version: v2}}
"""


def echo_routes(weights):
    """VirtualService echo-split: port 31400 to tcp-echo's subsets by
    weight ({subset: weight})."""
    dests = "".join(
        f"    - {{destination: {{host: tcp-echo, subset: {s}, "
        f"port: {{number: 9000}}}}, weight: {w}}}\n"
        for s, w in weights.items())
    return f"""apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: echo-split}}
spec:
  hosts: ["*"]
  gateways: [echo-gw]
  tcp:
  - match: [{{port: 31400}}]
    route:
{dests}"""


def test_tcp_traffic_shifting(node):
    """The scenario of Istio's task tcp-traffic-shifting: all TCP traffic
    on port 31400 goes to v1; after the 80/20 version of the
    VirtualService about 20% goes to v2. Applying that version beside the
    first as a second definition of the same VirtualService is refused
    (STR0004) and v1 keeps all of it."""
    v1, v2 = echo_server(b"one"), echo_server(b"two")
    try:
        node.put("vm-node.yaml", service_entry(
            "tcp-echo", "default", 9000,
            [({"version": "v1"}, v1.getsockname()[1]),
             ({"version": "v2"}, v2.getsockname()[1])], protocol="TCP"))
        node.put("echo-gateway.yaml", ECHO_GATEWAY)
        node.put("echo-all-v1.yaml", echo_routes({"v1": 100}))
        node.start()

        def talk():
            with socket.create_connection(("127.0.0.1", 31400), timeout=10) as c:
                c.sendall(b"hello\n")
                return c.makefile("rb").readline()

        assert {talk() for _ in range(10)} == {b"one hello\n"}
        failed = node.st.stats()["resources.reloads_failed"]
        node.put("echo-80-20.yaml", echo_routes({"v1": 80, "v2": 20}))
        wait_for(lambda: node.st.stats()["resources.reloads_failed"] == failed + 1,
                 10, "the duplicate refused")
        assert "STR0004" in node.st.get("/healthz/ready")[1]
        assert {talk() for _ in range(10)} == {b"one hello\n"}
        # kubectl apply replaces the VirtualService: the first version's
        # file goes, the new one stays.
        before = node.reloads()
        (node.conf / "echo-all-v1.yaml").unlink()
        wait_for(lambda: node.reloads() > before, 10, "the 80/20 split")
        n = 200
        got = [talk() for _ in range(n)]
        two = got.count(b"two hello\n")
        assert got.count(b"one hello\n") + two == n
        # Binomial(200, 0.2): mean 40, sd 5.7; 6 sd either side.
        assert 40 - 34 <= two <= 40 + 34, two
    finally:
        v1.close()
        v2.close()


# -- traffic-management/circuit-breaking ----------------------------------------

BREAKER = """apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: httpbin-breaker}
spec:
  host: httpbin
  trafficPolicy:
    connectionPool:
      tcp: {maxConnections: 1}
      http: {http1MaxPendingRequests: 1, maxRequestsPerConnection: 1}
    outlierDetection:
      consecutive5xxErrors: 1
      interval: 1s
      baseEjectionTime: 3m
      maxEjectionPercent: 100
"""


def test_circuit_breaking(netns, strait_factory, tmp_path, backends):
    """The scenario of Istio's task circuit-breaking: maxConnections 1,
    http1MaxPendingRequests 1: with one request on the connection and one
    waiting, the next is 503 at once and counted as
    upstream_rq_pending_overflow (the task's fortio run, made
    deterministic); the held ones then succeed."""
    node = Node(strait_factory, tmp_path, workers=1)
    arrived, gate = threading.Semaphore(0), threading.Event()
    handler = type("Held", (Httpbin,), {"arrived": arrived, "gate": gate})
    node.put("vm-node.yaml", service_entry("httpbin", "default", 8000,
                                           [(None, backends(handler))]))
    node.apply(SAMPLES / "httpbin" / "httpbin-gateway.yaml")
    node.put("breaker.yaml", BREAKER)
    node.start()
    stat = "cluster.httpbin.default.svc.cluster.local||8000."
    results = {}

    def client(name):
        results[name] = curl("http://127.0.0.1:80/get")[0]

    a = threading.Thread(target=client, args=("a",))
    a.start()
    assert arrived.acquire(timeout=10)
    b = threading.Thread(target=client, args=("b",))
    b.start()
    wait_for(lambda: node.st.stats().get(stat + "upstream_rq_pending_total") == 1,
             10, "the second request waiting")
    code, out = curl("http://127.0.0.1:80/get")
    assert code == 503, out
    gate.set()
    a.join(20)
    b.join(20)
    assert results == {"a": 200, "b": 200}
    assert node.st.stats()[stat + "upstream_rq_pending_overflow"] == 1


# -- security/authorization/authz-ingress ---------------------------------------

def ip_policy(action, blocks):
    """AuthorizationPolicy by-client-ip in istio-system, selecting the
    ingress gateway by app: istio-ingressgateway."""
    return f"""apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {{name: by-client-ip, namespace: istio-system}}
spec:
  selector: {{matchLabels: {{app: istio-ingressgateway}}}}
  action: {action}
  rules: [{{from: [{{source: {{ipBlocks: {json.dumps(blocks)}}}}}]}}]
"""


def test_authz_ingress_ip_allow_and_deny(node, backends):
    """The scenario of Istio's task authz-ingress: httpbin-gateway
    applied with -n foo (conf.d/foo/); the policies in istio-system
    select the gateway by app: istio-ingressgateway. An allow list
    without the client: 403; with it (the client's address, here
    127.0.0.1): 200; a deny list with it: 403."""
    node.put("vm-node.yaml", service_entry("httpbin", "foo", 8000,
                                           [(None, backends())]))
    node.apply(SAMPLES / "httpbin" / "httpbin-gateway.yaml", ns="foo")
    node.start()
    url = "http://127.0.0.1:80/headers"
    assert curl(url)[0] == 200
    others = ["192.0.2.7", "198.51.100.0/24"]
    node.put("policy.yaml", ip_policy("ALLOW", others))
    wait_code(403, url, what="the allow list without the client")
    node.put("policy.yaml", ip_policy("ALLOW", others + ["127.0.0.1"]))
    wait_code(200, url, what="the allow list with the client")
    node.put("policy.yaml", ip_policy("DENY", ["127.0.0.1"]))
    wait_code(403, url, what="the deny list with the client")


# -- traffic-management/egress/egress-gateway ----------------------------------

class Cnn(http.server.BaseHTTPRequestHandler):
    """edition.cnn.com over plain HTTP: the redirect the task shows."""
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        self.wfile.write(b"HTTP/1.1 301 Moved Permanently\r\n"
                         b"location: https://edition.cnn.com" + self.path.encode()
                         + b"\r\ncontent-length: 0\r\n\r\n")

    def log_message(self, *a):
        pass


class Remote(http.server.ThreadingHTTPServer):
    """A remote host on 127.0.0.2, on the port its ServiceEntry names.
    strait's Gateway listens on 0.0.0.0 at the same port: both sockets
    share it by SO_REUSEPORT, and a connection to 127.0.0.2 goes to the
    socket bound to that address."""
    allow_reuse_port = True


def remote(handler, port, tls=None):
    srv = Remote(("127.0.0.2", port), handler)
    if tls is not None:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(*tls)
        srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


@pytest.fixture
def egress(netns, strait_factory, tmp_path):
    """The node is Istio's egress gateway (istio: egressgateway); names
    resolve through a DNS server on loopback that puts edition.cnn.com
    and www.wikipedia.org on 127.0.0.2."""
    from test_dns import DNSServer
    dns = DNSServer(ttl=60)
    dns.records["edition.cnn.com"] = ["127.0.0.2"]
    dns.records["www.wikipedia.org"] = ["127.0.0.2"]
    yield Node(strait_factory, tmp_path, node="labels: {istio: egressgateway}",
               extra=f"dns: {{nameservers: [\"127.0.0.1:{dns.port}\"]}}\n")
    dns.stop()


def external(name, host, *ports):
    """A ServiceEntry NAME for an external HOST resolved by DNS, each
    (number, protocol) a port."""
    plist = ", ".join(f"{{number: {n}, name: {p.lower()}-{n}, protocol: {p}}}"
                      for n, p in ports)
    return f"""apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: {name}}}
spec:
  hosts: [{host}]
  ports: [{plist}]
  resolution: DNS
"""


# The egress gateway's own DestinationRule for the sidecars' hop to it,
# which the tasks apply at every step.
TO_EGRESS = """---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: hop-to-egress}
spec:
  host: istio-egressgateway.istio-system.svc.cluster.local
  subsets: [{name: outbound}]
"""


def egress_http(port, target_port):
    """The egress tasks' HTTP pair: a Gateway out-gw for edition.cnn.com
    on port, and a VirtualService with the sidecars' rule (mesh, to the
    egress gateway) and the gateway's (out-gw, to edition.cnn.com at
    target_port)."""
    return f"""apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {{name: out-gw}}
spec:
  selector: {{istio: egressgateway}}
  servers:
  - port: {{number: {port}, name: http-out, protocol: HTTP}}
    hosts: [edition.cnn.com]
{TO_EGRESS}---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: cnn-via-egress}}
spec:
  hosts: [edition.cnn.com]
  gateways: [out-gw, mesh]
  http:
  - match: [{{gateways: [mesh], port: 80}}]
    route:
    - destination:
        host: istio-egressgateway.istio-system.svc.cluster.local
        subset: outbound
        port: {{number: {port}}}
  - match: [{{gateways: [out-gw], port: {port}}}]
    route: [{{destination: {{host: edition.cnn.com, port: {{number: {target_port}}}}}}}]
"""


def test_egress_gateway_http(egress):
    """The scenario of Istio's task egress-gateway, HTTP: edition.cnn.com
    through the egress gateway. The sidecar's rule (gateways: mesh) is not
    the gateway's and is ignored; the gateway's sends the request on to
    edition.cnn.com:80, whose 301 to https comes back, and the gateway's
    counters show it."""
    node = egress
    srv = remote(Cnn, 80)
    try:
        node.put("cnn.yaml", external("cnn", "edition.cnn.com", (80, "HTTP"),
                                      (443, "HTTPS")))
        node.put("egress.yaml", egress_http(80, 80))
        node.start()
        # What the sidecar sends to the egress gateway: the request for
        # edition.cnn.com, on the gateway's port 80.
        wait_code(301, "-D", "-", "-HHost:edition.cnn.com",
                  "http://127.0.0.1:80/politics", what="the 301 from cnn")
        code, out = curl("-D", "-", "-HHost:edition.cnn.com",
                         "http://127.0.0.1:80/politics")
        assert "location: https://edition.cnn.com/politics" in out, out
        stats = node.st.stats()
        assert stats["cluster.edition.cnn.com||80.upstream_rq_total"] >= 1
    finally:
        srv.shutdown()
        srv.server_close()


def sni_egress(hosts, target):
    """The egress tasks' TLS passthrough: a Gateway out-gw on 443 for
    hosts, and a VirtualService whose sidecar rule sends them to the egress
    gateway and whose gateway rule sends them, by SNI, to target:443."""
    h = json.dumps(hosts)
    return f"""apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {{name: out-gw}}
spec:
  selector: {{istio: egressgateway}}
  servers:
  - port: {{number: 443, name: tls-out, protocol: TLS}}
    hosts: {h}
    tls: {{mode: PASSTHROUGH}}
{TO_EGRESS}---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: sni-via-egress}}
spec:
  hosts: {h}
  gateways: [mesh, out-gw]
  tls:
  - match: [{{gateways: [mesh], port: 443, sniHosts: {h}}}]
    route:
    - destination:
        host: istio-egressgateway.istio-system.svc.cluster.local
        subset: outbound
        port: {{number: 443}}
  - match: [{{gateways: [out-gw], port: 443, sniHosts: {h}}}]
    route: [{{destination: {{host: {target}, port: {{number: 443}}}}}}]
"""


def test_egress_gateway_https_passthrough(egress, tmp_path):
    """The scenario of egress-gateway for HTTPS: edition.cnn.com passed
    through by SNI; the client sees edition.cnn.com's own certificate."""
    node = egress
    c = example_certs(tmp_path / "certs", "edition.cnn.com")
    srv = remote(Nginx, 443, tls=c["edition.cnn.com"])
    try:
        node.put("cnn.yaml", external("cnn", "edition.cnn.com", (443, "TLS")))
        node.put("egress.yaml", sni_egress(["edition.cnn.com"],
                                           "edition.cnn.com"))
        node.start()
        args = ("-v", "--resolve", "edition.cnn.com:443:127.0.0.1", "--cacert",
                c["example.com"][0], "https://edition.cnn.com:443/politics")
        wait_code(200, *args, what="edition.cnn.com through the gateway")
        code, out = curl(*args)
        assert "CN=edition.cnn.com" in out and "SSL certificate verify ok" in out
    finally:
        srv.shutdown()
        srv.server_close()


# -- traffic-management/egress/egress-gateway-tls-origination -----------------

def start_with_system_ca(node, ca):
    """Starts node's strait in a mount namespace of its own in which the
    system CA bundle (what a DestinationRule tls SIMPLE without
    caCertificates trusts) is ca: the stand-in for edition.cnn.com has no
    publicly trusted certificate. The shell execs strait, so the PID the
    test stops is strait's."""
    if shutil.which("unshare") is None:
        pytest.skip("no unshare(1) for a mount namespace")
    st = node.st
    st.logf = open(st.log_path, "ab")
    script = ('mount --bind "$1" /etc/ssl/certs/ca-certificates.crt && '
              'exec "$2" run -c "$3"')
    st.proc = subprocess.Popen(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", script,
         "sh", ca, STRAIT, str(st.config)], stdout=st.logf, stderr=st.logf)
    try:
        wait_for(st.ready_or_dead, 15, "strait to become ready")
    except AssertionError as e:
        if "mount" in st.log() or "unshare" in st.log():
            pytest.skip("cannot make a mount namespace: " + st.log())
        raise e


class CnnHttps(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        body = b"<title>CNN</title>\n"
        self.wfile.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/html\r\n"
                         b"content-length: %d\r\n\r\n%s" % (len(body), body))

    def log_message(self, *a):
        pass


ORIGINATE = """---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: cnn-over-tls}
spec:
  host: edition.cnn.com
  trafficPolicy:
    loadBalancer: {simple: ROUND_ROBIN}
    portLevelSettings:
    - port: {number: 443}
      tls: {mode: SIMPLE}
"""


def test_egress_gateway_tls_origination(egress, tmp_path):
    """The scenario of Istio's task egress-gateway-tls-origination: plain
    HTTP for edition.cnn.com reaches the egress gateway on port 80, which
    sends it to edition.cnn.com:443 over TLS it originates (the
    DestinationRule's portLevelSettings SIMPLE, verified against the
    system CA bundle): 200 instead of the 301 to https."""
    node = egress
    c = example_certs(tmp_path / "certs", "edition.cnn.com")
    srv = remote(CnnHttps, 443, tls=c["edition.cnn.com"])
    try:
        node.put("cnn.yaml", external("cnn", "edition.cnn.com", (80, "HTTP"),
                                      (443, "HTTPS")))
        node.put("egress.yaml", egress_http(80, 443) + ORIGINATE)
        start_with_system_ca(node, c["example.com"][0])
        wait_code(200, "-HHost:edition.cnn.com", "http://127.0.0.1:80/politics",
                  what="the page over originated TLS")
        assert node.st.stats()["cluster.edition.cnn.com||443.upstream_rq_total"] >= 1
    finally:
        srv.shutdown()
        srv.server_close()


# -- traffic-management/egress/wildcard-egress-hosts ---------------------------

class Wikipedia(http.server.BaseHTTPRequestHandler):
    """www.wikipedia.org, serving every language by its Host."""
    protocol_version = "HTTP/1.1"
    titles = {"en.wikipedia.org": "Wikipedia, the free encyclopedia",
              "de.wikipedia.org": "Wikipedia \u2013 Die freie Enzyklop\u00e4die"}

    def do_GET(self):
        title = self.titles.get(self.headers.get("host"), "?")
        body = f"<title>{title}</title>\n".encode()
        self.wfile.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s"
                         % (len(body), body))

    def log_message(self, *a):
        pass


def test_wildcard_egress_hosts(egress, tmp_path):
    """The scenario of Istio's task wildcard-egress-hosts: *.wikipedia.org
    through the egress gateway by SNI, every name to the one host
    www.wikipedia.org: en. and de. both answer, over two connections to
    www.wikipedia.org's cluster."""
    node = egress
    c = example_certs(tmp_path / "certs", "*.wikipedia.org")
    srv = remote(Wikipedia, 443, tls=c["*.wikipedia.org"])
    try:
        node.put("egress.yaml", sni_egress(["*.wikipedia.org"],
                                           "www.wikipedia.org"))
        node.put("wikipedia.yaml", external("wikipedia", "www.wikipedia.org",
                                            (443, "HTTPS")))
        node.start()
        ca = c["example.com"][0]
        en = ("--resolve", "en.wikipedia.org:443:127.0.0.1", "--cacert", ca,
              "https://en.wikipedia.org:443/wiki/Main_Page")
        wait_code(200, *en, what="en.wikipedia.org through the gateway")
        before = node.st.stats()["cluster.www.wikipedia.org||443.upstream_cx_total"]
        code, out = curl(*en)
        assert "<title>Wikipedia, the free encyclopedia</title>" in out
        code, out = curl("--resolve", "de.wikipedia.org:443:127.0.0.1",
                         "--cacert", ca,
                         "https://de.wikipedia.org:443/wiki/Wikipedia:Hauptseite")
        assert "<title>Wikipedia \u2013 Die freie Enzyklop\u00e4die</title>" in out
        assert node.st.stats()["cluster.www.wikipedia.org||443.upstream_cx_total"] \
            == before + 2
    finally:
        srv.shutdown()
        srv.server_close()


# -- security/authorization/authz-deny ------------------------------------------

def workload_policy(name, ns, app, action, rules):
    """AuthorizationPolicy NAME in NS for the workload app: APP; rules in
    flow style."""
    return f"""apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {{name: {name}, namespace: {ns}}}
spec:
  selector: {{matchLabels: {{app: {app}}}}}
  action: {action}
  rules: {rules}
"""


NO_GET = "[{to: [{operation: {methods: [GET]}}]}]"
NO_GET_UNLESS_ADMIN = ("[{to: [{operation: {methods: [GET]}}], "
                       "when: [{key: 'request.headers[x-token]', "
                       "notValues: [admin]}]}]")


def test_authz_deny_at_a_node_fronting_httpbin(netns, strait_factory, tmp_path,
                                               backends):
    """The scenario of Istio's task authz-deny: the policies select the
    httpbin workload (app: httpbin in foo). A node that stands in front
    of httpbin takes them on by wearing its namespace and labels; then,
    as the task shows: GET is denied, POST is not; with the x-token
    condition only a non-admin GET is denied; with an ALLOW of /ip, /ip
    is allowed to admin only (the DENY comes first) and every other path
    is denied."""
    node = Node(strait_factory, tmp_path,
                node="namespace: foo, labels: {app: httpbin, istio: ingressgateway}")
    node.put("vm-node.yaml", service_entry("httpbin", "foo", 8000,
                                           [(None, backends())]))
    node.apply(SAMPLES / "httpbin" / "httpbin-gateway.yaml", ns="foo")
    node.start()
    base = "http://127.0.0.1:80"

    def code(path, method="GET", token=None):
        args = ["-X", method, base + path]
        if token is not None:
            args += ["-H", f"x-token: {token}"]
        return curl(*args)[0]

    assert code("/ip") == 200
    node.put("deny.yaml", workload_policy("no-get", "foo", "httpbin", "DENY",
                                          NO_GET))
    wait_code(403, base + "/get", what="GET denied")
    assert code("/post", "POST") == 200
    node.put("deny.yaml", workload_policy("no-get", "foo", "httpbin", "DENY",
                                          NO_GET_UNLESS_ADMIN))
    wait_code(200, "-H", "x-token: admin", base + "/get", what="admin's GET")
    assert code("/get", token="guest") == 403
    node.put("allow.yaml", workload_policy(
        "only-ip", "foo", "httpbin", "ALLOW",
        "[{to: [{operation: {paths: [/ip]}}]}]"))
    wait_code(403, "-H", "x-token: admin", base + "/get",
              what="only /ip allowed")
    assert code("/ip", token="guest") == 403
    assert code("/ip", token="admin") == 200


# -- security/authorization/authz-http ------------------------------------------

def test_authz_http_at_a_node_fronting_productpage(netns, strait_factory,
                                                   tmp_path, backends):
    """The scenario of Istio's task authz-http: bookinfo's gateway on a
    node that fronts productpage (namespace default, app: productpage):
    an empty policy (allow nothing) denies every request (403); a GET
    viewer policy for productpage then allows GET, not POST. The policy
    for details selects another workload and changes nothing here, which
    strait check -c says (IST0127)."""
    node = Node(strait_factory, tmp_path, node=(
        "namespace: default, labels: {app: productpage, istio: ingressgateway}"))
    node.put("vm-node.yaml", service_entry("productpage", "default", 9080,
                                           [(None, backends())]))
    node.apply(BOOKINFO / "bookinfo-gateway.yaml")
    node.start()
    url = "http://127.0.0.1:8080/productpage"
    assert curl(url)[0] == 200
    node.put("deny-all.yaml", """apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: deny-all, namespace: default}
spec: {}
""")
    wait_code(403, url, what="allow nothing")
    node.put("pp-get.yaml", workload_policy(
        "pp-get", "default", "productpage", "ALLOW",
        "[{to: [{operation: {methods: [GET]}}]}]"))
    wait_code(200, url, what="GET allowed")
    assert curl("-X", "POST", url)[0] == 403
    before = node.reloads()
    node.put("details-get.yaml", workload_policy(
        "details-get", "default", "details", "ALLOW",
        "[{from: [{source: {principals: "
        "['cluster.local/ns/default/sa/bookinfo-productpage']}}], "
        "to: [{operation: {methods: [GET]}}]}]"))
    wait_for(lambda: node.reloads() > before, 10, "the details policy loaded")
    assert curl(url)[0] == 200
    r = subprocess.run([STRAIT, "check", "-c", str(node.st.config),
                        str(node.conf)], capture_output=True, text=True,
                       timeout=60)
    assert "Warning [IST0127] (AuthorizationPolicy default/details-get " \
        in r.stdout, r.stdout


# -- security/authentication/authn-policy: end-user authentication ------------

ISSUER = "tester@idp.example.org"
JWKS_HOST = "keys.example.org"
JWKS_PATH = "/signing/jwks.json"


class KeyHost(http.server.BaseHTTPRequestHandler):
    """The identity provider's key host: serves body (set per test) at
    JWKS_PATH."""
    protocol_version = "HTTP/1.1"
    body = b""

    def do_GET(self):
        if self.path == JWKS_PATH:
            body = self.body
            head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
        else:
            body, head = b"", b"HTTP/1.1 404 Not Found\r\n"
        self.wfile.write(head + b"content-length: %d\r\n\r\n%s"
                         % (len(body), body))

    def log_message(self, *a):
        pass


@pytest.fixture
def jwks_node(netns, strait_factory, tmp_path):
    """(make, tokens): make(node=...) is a Node whose jwksUri host
    keys.example.org is a server on 127.0.0.2 (found through a DNS server
    on loopback, its certificate trusted by jwt.jwksCaFile) serving a key
    set made here; tokens["plain"] is signed by it with iss = sub =
    ISSUER, tokens["groups"] also has the claims groups [group1, group2]
    and scope."""
    from test_dns import DNSServer
    c = example_certs(tmp_path / "certs", JWKS_HOST)
    key = Key(tmp_path / "signer.pem", "RSA", "signer-1")
    exp = int(time.time()) + 3600
    tokens = {
        "plain": mint(key, {"iss": ISSUER, "sub": ISSUER, "exp": exp}),
        "groups": mint(key, {"iss": ISSUER, "sub": ISSUER, "exp": exp,
                             "groups": ["group1", "group2"],
                             "scope": ["scope1", "scope2"]}),
    }
    handler = type("Keys", (KeyHost,), {"body": jwks(key).encode()})
    dns = DNSServer(ttl=60)
    dns.records[JWKS_HOST] = ["127.0.0.2"]
    srv = remote(handler, 443, tls=c[JWKS_HOST])

    def make(**kw):
        return Node(strait_factory, tmp_path, extra=(
            f"dns: {{nameservers: [\"127.0.0.1:{dns.port}\"]}}\n"
            f"jwt: {{jwksCaFile: \"{c['example.com'][0]}\"}}\n"), **kw)
    yield make, tokens
    srv.shutdown()
    srv.server_close()
    dns.stop()


def bearer(token):
    return ("--header", f"Authorization: Bearer {token}")


def request_authentication(ns, selector):
    return f"""apiVersion: security.istio.io/v1
kind: RequestAuthentication
metadata: {{name: idp-tokens, namespace: {ns}}}
spec:
  selector: {{matchLabels: {selector}}}
  jwtRules:
  - {{issuer: "{ISSUER}", jwksUri: "https://{JWKS_HOST}{JWKS_PATH}"}}
"""


def test_authz_jwt_at_a_node_fronting_httpbin(jwks_node, backends):
    """The scenario of Istio's task authz-jwt: the policies select httpbin
    in foo; on a node wearing its namespace and labels, an invalid token
    is 401 and none 200; requiring the principal ISSUER/ISSUER, none is
    403 and the plain token 200; requiring also the claim groups=group1,
    the groups token is 200 and the plain token 403."""
    make, tokens = jwks_node
    node = make(
        node="namespace: foo, labels: {app: httpbin, istio: ingressgateway}")
    node.put("vm-node.yaml", service_entry("httpbin", "foo", 8000,
                                           [(None, backends())]))
    node.apply(SAMPLES / "httpbin" / "httpbin-gateway.yaml", ns="foo")
    node.start()
    url = "http://127.0.0.1:80/headers"
    node.put("authn.yaml", request_authentication("foo", "{app: httpbin}"))
    wait_code(401, "-H", "Authorization: Bearer invalidToken", url,
              what="an invalid token refused")
    assert curl(url)[0] == 200
    principal = f"[{{from: [{{source: {{requestPrincipals: ['{ISSUER}/{ISSUER}']}}}}]"
    node.put("require.yaml", workload_policy(
        "need-token", "foo", "httpbin", "ALLOW", principal + "}]"))
    wait_code(403, url, what="a token required")
    assert curl(*bearer(tokens["plain"]), url)[0] == 200
    node.put("require.yaml", workload_policy(
        "need-token", "foo", "httpbin", "ALLOW", principal
        + ", when: [{key: 'request.auth.claims[groups]', values: [group1]}]}]"))
    wait_code(403, *bearer(tokens["plain"]), url, what="group1 required")
    assert curl(*bearer(tokens["groups"]), url)[0] == 200


def need_a_token(paths=None):
    """A DENY at the ingress gateway of requests without a principal
    (only to paths, when given)."""
    to = f", to: [{{operation: {{paths: {json.dumps(paths)}}}}}]" if paths else ""
    return f"""apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {{name: token-at-ingress, namespace: istio-system}}
spec:
  selector: {{matchLabels: {{istio: ingressgateway}}}}
  action: DENY
  rules: [{{from: [{{source: {{notRequestPrincipals: ["*"]}}}}]{to}}}]
"""


def test_enduser_authentication_at_ingress(jwks_node, backends):
    """The scenario of end-user authentication in Istio's task
    authn-policy: a RequestAuthentication at the ingress gateway, its
    jwksUri on a remote HTTPS host: no token passes, a bad one is 401,
    a good one 200; with a DENY of requests without a principal, a
    request without a token is 403, and with the per-path version only
    /headers needs one."""
    make, tokens = jwks_node
    node = make()
    node.put("vm-node.yaml", service_entry("httpbin", "foo", 8000,
                                           [(None, backends())]))
    node.put("edge.yaml", """apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: edge, namespace: foo}
spec:
  selector: {istio: ingressgateway}
  servers: [{port: {number: 80, name: web, protocol: HTTP}, hosts: ["*"]}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: edge-routes, namespace: foo}
spec:
  hosts: ["*"]
  gateways: [edge]
  http:
  - route: [{destination: {host: httpbin.foo.svc.cluster.local, port: {number: 8000}}}]
""", ns="foo")
    node.start()
    url = "http://127.0.0.1:80/headers"
    assert curl(url)[0] == 200
    node.put("authn.yaml", request_authentication("istio-system",
                                                  "{istio: ingressgateway}"))
    wait_code(401, "--header", "Authorization: Bearer deadbeef", url,
              what="a bad token refused")
    good = (*bearer(tokens["plain"]), url)
    wait_code(200, *good, what="the good token accepted")
    assert curl(url)[0] == 200
    node.put("frontend.yaml", need_a_token())
    wait_code(403, url, what="a token required")
    assert curl(*good)[0] == 200
    node.put("frontend.yaml", need_a_token(["/headers"]))
    wait_code(200, "http://127.0.0.1:80/ip", what="/ip without a token")
    assert curl(url)[0] == 403


# -- tasks whose rules are for sidecars -----------------------------------------

# request-timeouts: a 2s delay on ratings, a 0.5s timeout on reviews v2.
TIMEOUTS = """apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: ratings}
spec:
  hosts: [ratings]
  http:
  - fault: {delay: {percentage: {value: 100}, fixedDelay: 2s}}
    route: [{destination: {host: ratings, subset: v1}}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: reviews}
spec:
  hosts: [reviews]
  http:
  - route: [{destination: {host: reviews, subset: v2}}]
    timeout: 0.5s
"""

# mirroring: httpbin v1 and v2 subsets, all traffic to v1 ...
MIRROR_DEFAULT = """apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: httpbin}
spec:
  host: httpbin
  subsets:
  - {name: v1, labels: {version: v1}}
  - {name: v2, labels: {version: v2}}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: httpbin}
spec:
  hosts: [httpbin]
  http:
  - route: [{destination: {host: httpbin, subset: v1}, weight: 100}]
"""

# ... then mirrored to v2 (mirrorPercent: the deprecated spelling the task
# uses, IST0002).
MIRROR_V2 = """apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: httpbin}
spec:
  hosts: [httpbin]
  http:
  - route: [{destination: {host: httpbin, subset: v1}, weight: 100}]
    mirror: {host: httpbin, subset: v2}
    mirrorPercent: 100
"""


@pytest.mark.parametrize("files", [
    # request-routing
    (BOOKINFO / "destination-rule-all.yaml",
     BOOKINFO / "virtual-service-all-v1.yaml"),
    (BOOKINFO / "destination-rule-all.yaml",
     BOOKINFO / "virtual-service-reviews-test-v2.yaml"),
    # traffic-shifting
    (BOOKINFO / "destination-rule-all.yaml",
     BOOKINFO / "virtual-service-reviews-50-v3.yaml"),
    # fault-injection
    (BOOKINFO / "destination-rule-all.yaml",
     BOOKINFO / "virtual-service-ratings-test-delay.yaml"),
    (BOOKINFO / "destination-rule-all.yaml",
     BOOKINFO / "virtual-service-ratings-test-abort.yaml"),
    # request-timeouts
    (BOOKINFO / "destination-rule-all.yaml", ("timeouts.yaml", TIMEOUTS)),
    # mirroring
    (("mirror-default.yaml", MIRROR_DEFAULT),),
    (("mirror-v2.yaml", MIRROR_V2),),
], ids=["routing-all-v1", "routing-jason", "shifting-50-v3", "fault-delay",
        "fault-abort", "timeouts", "mirroring-default", "mirroring-v2"])
def test_sidecar_tasks_load_and_say_so(tmp_path, files):
    """The scenarios of the request-routing, traffic-shifting,
    fault-injection, request-timeouts and mirroring tasks route between
    services: their VirtualServices have no gateways (mesh), which a
    gateway never uses. strait check loads them (bookinfo's files
    unchanged), says so (STR0001) and finds no error."""
    for f in files:
        if isinstance(f, tuple):
            (tmp_path / f[0]).write_text(f[1])
        else:
            shutil.copy(f, tmp_path / f.name)
    r = subprocess.run([STRAIT, "check", str(tmp_path)], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stdout
    assert "Error" not in r.stdout
    assert "Info [STR0001] (VirtualService default/" in r.stdout
