"""Istio's documentation tasks, with the tasks' YAML unchanged (issue 13).

The YAML is in istio-docs/ (see its README.md: copied from istio/istio.io
content/en/docs/tasks and istio/istio samples, Apache-2.0). Each test
lays it in a config directory beside only what a VM user adds, and checks
the outcome the task page describes:

- the node's labels (`istio: ingressgateway`, and `app:
  istio-ingressgateway` for the policies that select by it);
- a ServiceEntry for each Kubernetes Service the task deploys (httpbin,
  helloworld, my-nginx, tcp-echo), its endpoints on loopback;
- `kubectl create secret tls NAME` becomes credentials.dir/NAME/ files,
  `kubectl apply -n NS` a file in conf.d/NS/.

The backends are small Python servers standing in for the task's
deployments. The Gateways listen on the ports the YAML names (80, 443,
31400): every test runs in a network namespace of its own, so those ports
never meet another test's, and a test is skipped where one cannot be made.
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

DOCS = pathlib.Path(__file__).resolve().parent / "istio-docs"
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

    def apply(self, src, name=None, ns=None, subst=None):
        """kubectl apply -f src [-n ns]: the file, unchanged but for the
        shell variables the task substitutes, into conf.d (conf.d/NS)."""
        text = pathlib.Path(src).read_text()
        for k, v in (subst or {}).items():
            text = text.replace(k, v)
        d = self.conf / ns if ns else self.conf
        d.mkdir(exist_ok=True)
        dst = d / (name or pathlib.Path(src).name)
        tmp = d / ("." + dst.name)
        tmp.write_text(text)
        os.replace(tmp, dst)

    def add(self, name, text):
        (self.conf / name).write_text(text)

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

def test_ingress_control(node, backends):
    """Only /status and /delay of httpbin.example.com are exposed; /headers
    is 404. The browser variant (hosts "*") exposes /headers to any Host."""
    node.add("vm-node.yaml", service_entry("httpbin", "default", 8000,
                                           [(None, backends())]))
    node.apply(DOCS / "ingress-control" / "gateway.yaml")
    node.apply(DOCS / "ingress-control" / "virtualservice.yaml")
    node.start()
    code, out = curl("-I", "-HHost:httpbin.example.com",
                     "http://127.0.0.1:80/status/200")
    assert code == 200, out
    assert curl("-I", "-HHost:httpbin.example.com",
                "http://127.0.0.1:80/headers")[0] == 404
    # A Host the Gateway does not list reaches no route.
    assert curl("-HHost:other.example.com",
                "http://127.0.0.1:80/status/200")[0] == 404
    # "Accessing ingress services using a browser": the same two names,
    # now in one file (kubectl apply replaces them).
    (node.conf / "gateway.yaml").unlink()
    (node.conf / "virtualservice.yaml").unlink()
    node.apply(DOCS / "ingress-control" / "browser.yaml")
    wait_code(200, "http://127.0.0.1:80/headers", what="/headers for any Host")
    code, out = curl("http://127.0.0.1:80/headers")
    headers = {k.lower(): v for k, v in json.loads(out)["headers"].items()}
    assert headers["host"] == "127.0.0.1"


def test_ingress_control_with_the_kubernetes_service(node, backends):
    """The same task with samples/httpbin/httpbin.yaml applied unchanged
    (its ServiceAccount and Deployment are ignored with an Info, its
    Service is the registry entry) and, from the VM user, an EndpointSlice
    saying where httpbin runs."""
    port = backends()
    node.apply(DOCS / "samples-httpbin" / "httpbin.yaml")
    node.add("vm-node.yaml", f"""apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: httpbin-vm
  labels: {{kubernetes.io/service-name: httpbin}}
addressType: IPv4
ports: [{{name: http, port: {port}, protocol: TCP}}]
endpoints: [{{addresses: ["127.0.0.1"]}}]
""")
    node.apply(DOCS / "ingress-control" / "gateway.yaml")
    node.apply(DOCS / "ingress-control" / "virtualservice.yaml")
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


def test_secure_ingress_simple_and_rotation(node, backends, tmp_path):
    """SIMPLE TLS with credentialName httpbin-credential: 418 through
    HTTPS. The credential is then replaced by one from another CA: the
    new CA verifies, the old one no longer does (no restart)."""
    c1 = example_certs(tmp_path / "example_certs1", "httpbin.example.com")
    c2 = example_certs(tmp_path / "example_certs2", "httpbin.example.com")
    node.secret("httpbin-credential", *c1["httpbin.example.com"])
    node.add("vm-node.yaml", service_entry("httpbin", "default", 8000,
                                           [(None, backends())]))
    node.apply(DOCS / "secure-ingress" / "single-host-gateway.yaml")
    node.apply(DOCS / "secure-ingress" / "httpbin-virtualservice.yaml")
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
    """Two HTTPS servers on port 443, one credential each: helloworld
    answers /hello, httpbin /status/418, each with its own certificate."""
    c = example_certs(tmp_path / "example_certs1", "httpbin.example.com",
                      "helloworld.example.com")
    node.secret("httpbin-credential", *c["httpbin.example.com"])
    node.secret("helloworld-credential", *c["helloworld.example.com"])
    port = backends()
    node.add("vm-node.yaml",
             service_entry("httpbin", "default", 8000, [(None, port)])
             + service_entry("helloworld", "default", 5000, [(None, port)]))
    node.apply(DOCS / "secure-ingress" / "multiple-hosts-gateway.yaml")
    node.apply(DOCS / "secure-ingress" / "helloworld-virtualservice.yaml")
    node.apply(DOCS / "secure-ingress" / "httpbin-virtualservice.yaml")
    node.start()
    ca = c["example.com"][0]
    code, out = https("helloworld.example.com", "/hello", ca, "-v")
    assert code == 200, out
    assert "CN=helloworld.example.com" in out
    code, out = https("httpbin.example.com", "/status/418", ca, "-v")
    assert code == 418 and "-=[ teapot ]=-" in out, out
    assert "CN=httpbin.example.com" in out


def test_secure_ingress_mutual(node, backends, tmp_path):
    """MUTUAL with ca.crt in the credential: without a client certificate
    the handshake fails (certificate required); with the client's, 418."""
    c = example_certs(tmp_path / "example_certs1", "httpbin.example.com",
                      "client.example.com")
    node.secret("httpbin-credential", *c["httpbin.example.com"],
                ca=c["example.com"][0])
    node.add("vm-node.yaml", service_entry("httpbin", "default", 8000,
                                           [(None, backends())]))
    node.apply(DOCS / "secure-ingress" / "mutual-gateway.yaml")
    node.apply(DOCS / "secure-ingress" / "httpbin-virtualservice.yaml")
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


def test_ingress_sni_passthrough(node, backends, tmp_path):
    """PASSTHROUGH: the client sees nginx's own certificate (issued by
    example.com for nginx.example.com), the gateway only relays."""
    c = example_certs(tmp_path / "example_certs", "nginx.example.com")
    port = backends(Nginx, tls=c["nginx.example.com"])
    node.add("vm-node.yaml", service_entry("my-nginx", "default", 443,
                                           [(None, port)], protocol="TLS"))
    node.apply(DOCS / "ingress-sni-passthrough" / "gateway.yaml")
    node.apply(DOCS / "ingress-sni-passthrough" / "virtualservice.yaml")
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


def split_docs(src, dst_dir):
    """kubectl apply of a multi-document file makes one object of each
    document; on a VM each goes to a file of its own, so that a later
    apply of one of them replaces just that one. The documents are
    copied unchanged."""
    docs = pathlib.Path(src).read_text().split("\n---\n")
    names = []
    for i, doc in enumerate(docs):
        name = f"{pathlib.Path(src).stem}-{i}.yaml"
        (dst_dir / name).write_text(doc if doc.endswith("\n") else doc + "\n")
        names.append(name)
    return names


def test_tcp_traffic_shifting(node):
    """All TCP traffic on port 31400 goes to v1; after tcp-echo-20-v2.yaml
    about 20% goes to v2. Applying that file beside the first one as a
    second definition of VirtualService tcp-echo is refused (STR0004) and
    v1 keeps all of it."""
    v1, v2 = echo_server(b"one"), echo_server(b"two")
    try:
        node.add("vm-node.yaml", service_entry(
            "tcp-echo", "default", 9000,
            [({"version": "v1"}, v1.getsockname()[1]),
             ({"version": "v2"}, v2.getsockname()[1])], protocol="TCP"))
        names = split_docs(DOCS / "tcp-traffic-shifting" / "tcp-echo-all-v1.yaml",
                           node.conf)
        node.start()

        def talk():
            with socket.create_connection(("127.0.0.1", 31400), timeout=10) as c:
                c.sendall(b"hello\n")
                return c.makefile("rb").readline()

        assert {talk() for _ in range(10)} == {b"one hello\n"}
        failed = node.st.stats()["resources.reloads_failed"]
        node.apply(DOCS / "tcp-traffic-shifting" / "tcp-echo-20-v2.yaml")
        wait_for(lambda: node.st.stats()["resources.reloads_failed"] == failed + 1,
                 10, "the duplicate refused")
        assert "STR0004" in node.st.get("/healthz/ready")[1]
        assert {talk() for _ in range(10)} == {b"one hello\n"}
        # kubectl apply replaces the VirtualService: its document's file
        # goes, the new one stays.
        vs = [n for n in names if "kind: VirtualService" in (node.conf / n).read_text()]
        before = node.reloads()
        (node.conf / vs[0]).unlink()
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

def test_circuit_breaking(netns, strait_factory, tmp_path, backends):
    """maxConnections 1, http1MaxPendingRequests 1: with one request on
    the connection and one waiting, the next is 503 at once and counted
    as upstream_rq_pending_overflow (the task's fortio run, made
    deterministic); the held ones then succeed."""
    node = Node(strait_factory, tmp_path, workers=1)
    arrived, gate = threading.Semaphore(0), threading.Event()
    handler = type("Held", (Httpbin,), {"arrived": arrived, "gate": gate})
    node.add("vm-node.yaml", service_entry("httpbin", "default", 8000,
                                           [(None, backends(handler))]))
    node.apply(SAMPLES / "httpbin" / "httpbin-gateway.yaml")
    node.apply(DOCS / "circuit-breaking" / "destinationrule.yaml")
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

def test_authz_ingress_ip_allow_and_deny(node, backends):
    """httpbin-gateway applied with -n foo (conf.d/foo/); the policies in
    istio-system select the gateway by app: istio-ingressgateway. An
    allow list without the client: 403; with it ($CLIENT_IP, here
    127.0.0.1): 200; a deny list with it: 403."""
    node.add("vm-node.yaml", service_entry("httpbin", "foo", 8000,
                                           [(None, backends())]))
    node.apply(SAMPLES / "httpbin" / "httpbin-gateway.yaml", ns="foo")
    node.start()
    url = "http://127.0.0.1:80/headers"
    assert curl(url)[0] == 200
    ip = {"$CLIENT_IP": "127.0.0.1"}
    node.apply(DOCS / "authz-ingress" / "allow-ip-blocks.yaml", "policy.yaml")
    wait_code(403, url, what="the allow list without the client")
    node.apply(DOCS / "authz-ingress" / "allow-client-ip.yaml", "policy.yaml",
               subst=ip)
    wait_code(200, url, what="the allow list with the client")
    node.apply(DOCS / "authz-ingress" / "deny-client-ip.yaml", "policy.yaml",
               subst=ip)
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
    """A remote host on 127.0.0.2, on the port the task's ServiceEntry
    names. strait's Gateway listens on 0.0.0.0 at the same port: both
    sockets share it by SO_REUSEPORT, and a connection to 127.0.0.2 goes
    to the socket bound to that address."""
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
    on 127.0.0.2."""
    from test_dns import DNSServer
    dns = DNSServer(ttl=60)
    dns.records["edition.cnn.com"] = ["127.0.0.2"]
    dns.records["www.wikipedia.org"] = ["127.0.0.2"]
    yield Node(strait_factory, tmp_path, node="labels: {istio: egressgateway}",
               extra=f"dns: {{nameservers: [\"127.0.0.1:{dns.port}\"]}}\n")
    dns.stop()


def test_egress_gateway_http(egress):
    """HTTP to edition.cnn.com through the egress gateway: the sidecar's
    rule (gateways: mesh) is not the gateway's and is ignored; the
    gateway's sends the request on to edition.cnn.com:80, whose 301 to
    https comes back, and the gateway's log and counters show it."""
    node = egress
    srv = remote(Cnn, 80)
    try:
        node.apply(DOCS / "egress-gateway" / "http-serviceentry.yaml")
        node.apply(DOCS / "egress-gateway" / "http-gateway.yaml")
        node.apply(DOCS / "egress-gateway" / "http-virtualservice.yaml")
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


def test_egress_gateway_https_passthrough(egress, tmp_path):
    """HTTPS to edition.cnn.com through the egress gateway, passed through
    by SNI: the client sees edition.cnn.com's own certificate."""
    node = egress
    c = example_certs(tmp_path / "certs", "edition.cnn.com")
    srv = remote(Nginx, 443, tls=c["edition.cnn.com"])
    try:
        node.apply(DOCS / "egress-gateway" / "https-serviceentry.yaml")
        node.apply(DOCS / "egress-gateway" / "https-gateway.yaml")
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


def test_egress_gateway_tls_origination(egress, tmp_path):
    """Plain HTTP for edition.cnn.com reaches the egress gateway on port
    80, which sends it to edition.cnn.com:443 over TLS it originates (the
    DestinationRule's portLevelSettings SIMPLE, verified against the
    system CA bundle): 200 instead of the 301 to https."""
    node = egress
    c = example_certs(tmp_path / "certs", "edition.cnn.com")
    srv = remote(CnnHttps, 443, tls=c["edition.cnn.com"])
    try:
        d = DOCS / "egress-gateway-tls-origination"
        node.apply(d / "serviceentry.yaml")
        node.apply(d / "gateway.yaml")
        node.apply(d / "virtualservice-destinationrule.yaml")
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
    """*.wikipedia.org through the egress gateway by SNI, every name to
    the one host www.wikipedia.org: en. and de. both answer, over two
    connections to www.wikipedia.org's cluster."""
    node = egress
    c = example_certs(tmp_path / "certs", "*.wikipedia.org")
    srv = remote(Wikipedia, 443, tls=c["*.wikipedia.org"])
    try:
        node.apply(DOCS / "wildcard-egress-hosts" / "egress-gateway.yaml")
        node.apply(DOCS / "wildcard-egress-hosts" / "www-wikipedia-serviceentry.yaml")
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

def test_authz_deny_at_a_node_fronting_httpbin(netns, strait_factory, tmp_path,
                                               backends):
    """The task's policies select the httpbin workload (app: httpbin in
    foo). A node that stands in front of httpbin takes them on by wearing
    its namespace and labels; then, as the task shows: GET is denied, POST
    is not; with the x-token condition only a non-admin GET is denied;
    with allow-path-ip, /ip is allowed to admin only (the DENY comes
    first) and every other path is denied."""
    node = Node(strait_factory, tmp_path,
                node="namespace: foo, labels: {app: httpbin, istio: ingressgateway}")
    node.add("vm-node.yaml", service_entry("httpbin", "foo", 8000,
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
    node.apply(DOCS / "authz-deny" / "deny-method-get.yaml", "deny.yaml")
    wait_code(403, base + "/get", what="GET denied")
    assert code("/post", "POST") == 200
    node.apply(DOCS / "authz-deny" / "deny-method-get-not-admin.yaml", "deny.yaml")
    wait_code(200, "-H", "x-token: admin", base + "/get", what="admin's GET")
    assert code("/get", token="guest") == 403
    node.apply(DOCS / "authz-deny" / "allow-path-ip.yaml")
    wait_code(403, "-H", "x-token: admin", base + "/get",
              what="only /ip allowed")
    assert code("/ip", token="guest") == 403
    assert code("/ip", token="admin") == 200


# -- security/authorization/authz-http ------------------------------------------

def test_authz_http_at_a_node_fronting_productpage(netns, strait_factory,
                                                   tmp_path, backends):
    """bookinfo's gateway on a node that fronts productpage (namespace
    default, app: productpage): allow-nothing denies every request (403);
    productpage-viewer then allows GET, not POST. details-viewer selects
    another workload and changes nothing here, which strait check -c
    says (IST0127)."""
    node = Node(strait_factory, tmp_path, node=(
        "namespace: default, labels: {app: productpage, istio: ingressgateway}"))
    node.add("vm-node.yaml", service_entry("productpage", "default", 9080,
                                           [(None, backends())]))
    node.apply(BOOKINFO / "bookinfo-gateway.yaml")
    node.start()
    url = "http://127.0.0.1:8080/productpage"
    assert curl(url)[0] == 200
    node.apply(DOCS / "authz-http" / "allow-nothing.yaml")
    wait_code(403, url, what="allow-nothing")
    node.apply(DOCS / "authz-http" / "productpage-viewer.yaml")
    wait_code(200, url, what="GET allowed")
    assert curl("-X", "POST", url)[0] == 403
    before = node.reloads()
    node.apply(DOCS / "authz-http" / "details-viewer.yaml")
    wait_for(lambda: node.reloads() > before, 10, "details-viewer loaded")
    assert curl(url)[0] == 200
    r = subprocess.run([STRAIT, "check", "-c", str(node.st.config),
                        str(node.conf)], capture_output=True, text=True,
                       timeout=60)
    assert "Warning [IST0127] (AuthorizationPolicy default/details-viewer " \
        in r.stdout, r.stdout


# -- security/authentication/authn-policy: end-user authentication ------------

class RawGithub(http.server.BaseHTTPRequestHandler):
    """raw.githubusercontent.com serving Istio's sample JWKS."""
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        # Any branch: the tasks name master and release-1.8.
        if self.path.startswith("/istio/istio/") and self.path.endswith(
                "/security/tools/jwt/samples/jwks.json"):
            body = (DOCS / "jwt-samples" / "jwks.json").read_bytes()
            head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
        else:
            body, head = b"", b"HTTP/1.1 404 Not Found\r\n"
        self.wfile.write(head + b"content-length: %d\r\n\r\n%s"
                         % (len(body), body))

    def log_message(self, *a):
        pass


@pytest.fixture
def jwks_node(netns, strait_factory, tmp_path):
    """make(node=...): a Node whose jwksUri host raw.githubusercontent.com
    is a server on 127.0.0.2 (found through a DNS server on loopback, its
    certificate trusted by jwt.jwksCaFile) serving Istio's sample JWKS."""
    from test_dns import DNSServer
    c = example_certs(tmp_path / "certs", "raw.githubusercontent.com")
    dns = DNSServer(ttl=60)
    dns.records["raw.githubusercontent.com"] = ["127.0.0.2"]
    srv = remote(RawGithub, 443, tls=c["raw.githubusercontent.com"])

    def make(**kw):
        return Node(strait_factory, tmp_path, extra=(
            f"dns: {{nameservers: [\"127.0.0.1:{dns.port}\"]}}\n"
            f"jwt: {{jwksCaFile: \"{c['example.com'][0]}\"}}\n"), **kw)
    yield make
    srv.shutdown()
    srv.server_close()
    dns.stop()


def bearer(name):
    token = (DOCS / "jwt-samples" / name).read_text().strip()
    return ("--header", f"Authorization: Bearer {token}")


def test_authz_jwt_at_a_node_fronting_httpbin(jwks_node, backends):
    """authz-jwt's policies select httpbin in foo: on a node wearing its
    namespace and labels, an invalid token is 401 and none 200; with
    require-jwt, none is 403 and the demo token 200; requiring the claim
    groups=group1, the groups token is 200 and the demo token 403."""
    node = jwks_node(
        node="namespace: foo, labels: {app: httpbin, istio: ingressgateway}")
    node.add("vm-node.yaml", service_entry("httpbin", "foo", 8000,
                                           [(None, backends())]))
    node.apply(SAMPLES / "httpbin" / "httpbin-gateway.yaml", ns="foo")
    node.start()
    url = "http://127.0.0.1:80/headers"
    node.apply(DOCS / "authz-jwt" / "requestauthentication.yaml")
    wait_code(401, "-H", "Authorization: Bearer invalidToken", url,
              what="an invalid token refused")
    assert curl(url)[0] == 200
    node.apply(DOCS / "authz-jwt" / "require-jwt.yaml", "require.yaml")
    wait_code(403, url, what="a token required")
    assert curl(*bearer("demo.jwt"), url)[0] == 200
    node.apply(DOCS / "authz-jwt" / "require-jwt-group1.yaml", "require.yaml")
    wait_code(403, *bearer("demo.jwt"), url, what="group1 required")
    assert curl(*bearer("groups-scope.jwt"), url)[0] == 200


def test_enduser_authentication_at_ingress(jwks_node, backends):
    """RequestAuthentication at the ingress gateway, the jwksUri on
    raw.githubusercontent.com: no token passes, a bad one is 401, Istio's
    demo token 200; with frontend-ingress a request without a token is
    403, and with the per-path version only /headers needs one."""
    node = jwks_node()
    node.add("vm-node.yaml", service_entry("httpbin", "foo", 8000,
                                           [(None, backends())]))
    node.apply(DOCS / "authn-policy" / "gateway.yaml")
    node.apply(DOCS / "authn-policy" / "virtualservice.yaml")
    node.start()
    url = "http://127.0.0.1:80/headers"
    assert curl(url)[0] == 200
    node.apply(DOCS / "authn-policy" / "requestauthentication.yaml")
    wait_code(401, "--header", "Authorization: Bearer deadbeef", url,
              what="a bad token refused")
    good = (*bearer("demo.jwt"), url)
    wait_code(200, *good, what="the demo token accepted")
    assert curl(url)[0] == 200
    node.apply(DOCS / "authn-policy" / "require-token.yaml", "frontend.yaml")
    wait_code(403, url, what="a token required")
    assert curl(*good)[0] == 200
    node.apply(DOCS / "authn-policy" / "require-token-per-path.yaml",
               "frontend.yaml")
    wait_code(200, "http://127.0.0.1:80/ip", what="/ip without a token")
    assert curl(url)[0] == 403


# -- tasks whose rules are for sidecars -----------------------------------------

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
    (BOOKINFO / "destination-rule-all.yaml",
     DOCS / "request-timeouts" / "ratings-delay.yaml",
     DOCS / "request-timeouts" / "reviews-timeout.yaml"),
    # mirroring (mirrorPercent: Istio's deprecated spelling, IST0002)
    (DOCS / "mirroring" / "default-routing.yaml",),
    (DOCS / "mirroring" / "mirror-v2.yaml",),
], ids=["routing-all-v1", "routing-jason", "shifting-50-v3", "fault-delay",
        "fault-abort", "timeouts", "mirroring-default", "mirroring-v2"])
def test_sidecar_tasks_load_and_say_so(tmp_path, files):
    """The request-routing, traffic-shifting, fault-injection, request
    timeouts and mirroring tasks route between services: their
    VirtualServices have no gateways (mesh), which a gateway never uses.
    strait check loads them unchanged, says so (STR0001) and finds no
    error."""
    for f in files:
        shutil.copy(f, tmp_path / f.name)
    r = subprocess.run([STRAIT, "check", str(tmp_path)], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stdout
    assert "Error" not in r.stdout
    assert "Info [STR0001] (VirtualService default/" in r.stdout
