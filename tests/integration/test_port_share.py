"""HTTPS and TLS servers of Gateways on one port, told apart by the SNI of
the ClientHello as Envoy's filter chains on one listener are: HTTPS
servers are served by the HTTP proxy (their certificates, h2 and
http/1.1, VirtualService http routes), PASSTHROUGH servers relay the
client's TLS untouched, TLS servers terminated here relay to tcp routes.
Plaintext HTTP and TCP servers cannot share a port (no SNI): the later
one is skipped, and `strait check` says so."""
import http.client
import json
import os
import socket
import ssl
import subprocess
import threading

from conftest import STRAIT, free_port, wait_for
from httpd import make_cert, s_client
from test_ca import nodes  # noqa: F401 (a fixture)
from test_l4 import FOO, ROOT, access_lines, named_handler, refused, \
    tls_talk, tls_upstream


def service(name, port, protocol="TCP"):
    return f"""---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: {name}, namespace: default}}
spec:
  hosts: [{name}.svc.test]
  resolution: STATIC
  ports: [{{number: {port}, name: p, protocol: {protocol}}}]
  endpoints: [{{address: 127.0.0.1}}]
"""


def app_vs(dest, port):
    return f"""---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: web, namespace: default}}
spec:
  hosts: [app.example.test, "*.web.example.test", "*"]
  gateways: [gw]
  http:
  - route: [{{destination: {{host: {dest}.svc.test, port: {{number: {port}}}}}}}]
"""


def shared_resources(port, app_crt, app_key, tcp_crt, tcp_key, ups,
                     https_hosts='[app.example.test, "*.web.example.test"]'):
    """One port: an HTTPS server, a PASSTHROUGH server for *.example.test
    (db.example.test to db, every other name to wild), a TLS server
    terminated here for tcp.example.test (tcp route to plain)."""
    return f"""apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {{name: gw, namespace: default}}
spec:
  selector: {{}}
  servers:
  - port: {{number: {port}, name: https, protocol: HTTPS}}
    bind: 127.0.0.1
    hosts: {https_hosts}
    tls: {{mode: SIMPLE, serverCertificate: "{app_crt}", privateKey: "{app_key}"}}
  - port: {{number: {port}, name: tls-pass, protocol: TLS}}
    bind: 127.0.0.1
    hosts: ["*.example.test"]
    tls: {{mode: PASSTHROUGH}}
  - port: {{number: {port}, name: tls-term, protocol: TLS}}
    bind: 127.0.0.1
    hosts: [tcp.example.test]
    tls: {{mode: SIMPLE, serverCertificate: "{tcp_crt}", privateKey: "{tcp_key}"}}
""" + service("app", ups["app"], "HTTP") + service("app2", ups["app2"], "HTTP") \
        + service("db", ups["db"]) + service("wild", ups["wild"]) \
        + service("plain", ups["plain"]) + app_vs("app", ups["app"]) + """---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: db, namespace: default}
spec:
  hosts: [db.example.test, "*.example.test"]
  gateways: [gw]
  tls:
  - match: [{sniHosts: [db.example.test]}]
    route: [{destination: {host: db.svc.test}}]
  - match: [{sniHosts: ["*.example.test"]}]
    route: [{destination: {host: wild.svc.test}}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: tcp, namespace: default}
spec:
  hosts: [tcp.example.test]
  gateways: [gw]
  tcp:
  - route: [{destination: {host: plain.svc.test}}]
"""


def body_handler(text, gate=None, seen=None):
    """A keep-alive HTTP/1.1 upstream answering text to every request;
    with gate, each request is held until gate is set (seen is set once
    one has arrived)."""
    def handler(c):
        buf = b""
        while True:
            while b"\r\n\r\n" not in buf:
                d = c.recv(65536)
                if not d:
                    return
                buf += d
            _, _, buf = buf.partition(b"\r\n\r\n")
            if gate is not None:
                seen.set()
                gate.wait(30)
            body = text.encode()
            c.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s"
                      % (len(body), body))
    return handler


class Env:
    pass


def shared_port(strait_factory, upstream_factory, tmp_path, gate=None, seen=None,
          **kw):
    e = Env()
    e.app = upstream_factory(body_handler("app-v1", gate, seen))
    e.app2 = upstream_factory(body_handler("app-v2"))
    e.db, e.db_crt = tls_upstream(upstream_factory, tmp_path, "db",
                                  "db.example.test")
    e.wild, e.wild_crt = tls_upstream(upstream_factory, tmp_path, "wild",
                                      "other.example.test")
    e.plain = upstream_factory(named_handler("plain"))
    e.app_crt, e.app_key = make_cert(
        str(tmp_path), "app", "app.example.test",
        ["app.example.test", "*.web.example.test"])
    e.tcp_crt, e.tcp_key = make_cert(str(tmp_path), "tcp", "tcp.example.test",
                                     ["tcp.example.test"])
    e.port = free_port()
    e.ups = {"app": e.app.port, "app2": e.app2.port, "db": e.db.port,
             "wild": e.wild.port, "plain": e.plain.port}
    e.text = shared_resources(e.port, e.app_crt, e.app_key, e.tcp_crt,
                              e.tcp_key, e.ups, **kw)
    conf = tmp_path / "conf.d"
    conf.mkdir(exist_ok=True)
    (conf / "r.yaml").write_text(e.text)
    e.conf = conf / "r.yaml"
    e.st = strait_factory(extra=f"config: {{dir: \"{conf}\"}}\n").start()
    return e


def curl(e, host, *args):
    """curl https://host:port/ through the shared port; returns
    (returncode, body, http_version)."""
    out = subprocess.run(
        ["curl", "-sS", "--max-time", "10", "--cacert", e.app_crt,
         "--resolve", f"{host}:{e.port}:127.0.0.1", "-w", "\n%{http_version}",
         *args, f"https://{host}:{e.port}/"],
        capture_output=True, timeout=30)
    body, _, version = out.stdout.decode().rpartition("\n")
    return out.returncode, body, version


def stat(st, port, key):
    return st.stats()[f"listener.gateway-127.0.0.1-{port}.{key}"]


def test_https_passthrough_and_terminated_tls_share_a_port(
        strait_factory, upstream_factory, tmp_path):
    e = shared_port(strait_factory, upstream_factory, tmp_path)
    # HTTPS: the gateway's certificate for the name, then the http route,
    # over h2 and over http/1.1 (ALPN).
    assert curl(e, "app.example.test", "--http2") == (0, "app-v1", "2")
    assert curl(e, "app.example.test", "--http1.1") == (0, "app-v1", "1.1")
    # PASSTHROUGH: the upstream's own certificate, verified by name.
    assert tls_talk(e.port, "db.example.test", cafile=e.db_crt) == b"db:hello"
    rc, text = s_client(e.port, "-CAfile", e.db_crt, "-verify_return_error",
                        servername="db.example.test")
    assert "O = strait-test-db" in text and "Verify return code: 0" in text, \
        text
    # TLS terminated here with the TLS server's certificate, then tcp.
    assert tls_talk(e.port, "tcp.example.test", cafile=e.tcp_crt) \
        == b"plain:hello"
    rc, text = s_client(e.port, servername="tcp.example.test")
    assert "O = strait-test-tcp" in text, text
    line = wait_for(lambda: access_lines(e.st, "sni=db.example.test"), 10,
                    "the passthrough session's log line")[0]
    assert f"listener=gateway-127.0.0.1-{e.port}" in line, line
    # One listener name for all of it: requests, connections, handshakes.
    assert stat(e.st, e.port, "http.rq_total") == 2
    assert stat(e.st, e.port, "http.rq_2xx") == 2
    # Every connection counted once, and closed once.
    wait_for(lambda: stat(e.st, e.port, "downstream_cx_active") == 0, 10,
             "every connection closed")
    assert stat(e.st, e.port, "downstream_cx_total") == 6
    # The HTTPS part's routes are shown with the other Gateway routes.
    code, body, _ = e.st.get("/config_dump")
    assert code == 200
    [lst] = json.loads(body)["gatewayRoutes"]
    assert lst["listener"] == f"gateway-127.0.0.1-{e.port}"
    [dest] = lst["routes"]["virtualHosts"][0]["rules"][0]["action"][
        "destinations"]
    assert dest["cluster"].startswith("app.svc.test|"), dest


def test_sni_precedence_exact_then_longest_wildcard(strait_factory,
                                                    upstream_factory, tmp_path):
    e = shared_port(strait_factory, upstream_factory, tmp_path)
    # *.web.example.test (HTTPS) is longer than *.example.test (PASSTHROUGH).
    assert curl(e, "x.web.example.test", "--http2") == (0, "app-v1", "2")
    # app.example.test (exact, HTTPS) beats *.example.test.
    assert curl(e, "app.example.test") == (0, "app-v1", "2")
    # db.example.test (exact, PASSTHROUGH) beats *.example.test's route.
    assert tls_talk(e.port, "db.example.test", cafile=e.db_crt) == b"db:hello"
    # Another name only *.example.test takes: the passthrough "wild".
    assert tls_talk(e.port, "other.example.test", cafile=e.wild_crt) \
        == b"wild:hello"
    # A name no server has, and no SNI at all: closed, counted.
    before = stat(e.st, e.port, "no_filter_chain_match")
    assert refused(lambda: tls_talk(e.port, "nobody.other.test"))
    assert refused(lambda: tls_talk(e.port, None))
    wait_for(lambda: stat(e.st, e.port, "no_filter_chain_match")
             == before + 2, 10, "two connections without a filter chain")
    assert stat(e.st, e.port, "http.rq_total") == 2


def test_without_sni_a_star_https_server_serves(strait_factory,
                                                upstream_factory, tmp_path):
    e = shared_port(strait_factory, upstream_factory, tmp_path,
              https_hosts='["*"]')
    ctx = ssl.create_default_context(cafile=e.app_crt)
    ctx.check_hostname = False
    ctx.set_alpn_protocols(["http/1.1"])
    # No SNI: the HTTPS server of hosts "*".
    c = http.client.HTTPSConnection("127.0.0.1", e.port, context=ctx,
                                    timeout=10)
    try:
        c.sock = ctx.wrap_socket(
            socket.create_connection(("127.0.0.1", e.port), timeout=10),
            server_hostname=None)
        c.request("GET", "/", headers={"Host": "anything.test"})
        r = c.getresponse()
        assert (r.status, r.read()) == (200, b"app-v1")
    finally:
        c.close()
    # Names still go to their own servers first.
    assert tls_talk(e.port, "db.example.test", cafile=e.db_crt) == b"db:hello"
    assert tls_talk(e.port, "tcp.example.test", cafile=e.tcp_crt) \
        == b"plain:hello"
    # "*" (HTTPS) loses to the PASSTHROUGH server's *.example.test.
    assert tls_talk(e.port, "other.example.test", cafile=e.wild_crt) \
        == b"wild:hello"
    # Any other name: the HTTPS server of hosts "*" (with its certificate,
    # which does not name it: not verified).
    assert curl(e, "unknown.test", "--insecure") == (0, "app-v1", "2")


def https_conn(e, timeout=30):
    """A keep-alive HTTP/1.1 connection to app.example.test."""
    ctx = ssl.create_default_context(cafile=e.app_crt)
    c = http.client.HTTPSConnection("app.example.test", e.port, context=ctx,
                                    timeout=timeout)
    c.sock = ctx.wrap_socket(
        socket.create_connection(("127.0.0.1", e.port), timeout=timeout),
        server_hostname="app.example.test")
    return c


def get(c, path="/"):
    c.request("GET", path)
    r = c.getresponse()
    return r.status, r.read()


def test_route_change_keeps_https_connections(strait_factory,
                                              upstream_factory, tmp_path):
    """A changed VirtualService rebuilds the shared port's listener (its
    tls and tcp rules are compiled in) but keeps its HTTPS part: new
    requests, on new connections and on open keep-alive ones, take the
    new route; a request in flight finishes on its own; a passthrough
    session goes on."""
    gate, seen = threading.Event(), threading.Event()
    e = shared_port(strait_factory, upstream_factory, tmp_path, gate=gate,
                    seen=seen)
    result = {}
    keep = https_conn(e)
    gate.set()
    assert get(keep) == (200, b"app-v1")
    gate.clear()
    seen.clear()
    db = socket.create_connection(("127.0.0.1", e.port), timeout=10)
    db_ctx = ssl.create_default_context(cafile=e.db_crt)
    db = db_ctx.wrap_socket(db, server_hostname="db.example.test")

    def in_flight():
        c = https_conn(e)
        try:
            result["got"] = get(c, "/slow")
        finally:
            c.close()

    t = threading.Thread(target=in_flight)
    t.start()
    try:
        db.sendall(b"1")
        assert db.recv(100) == b"db:1"
        assert seen.wait(15), "the request never reached the upstream"
        tmp = tmp_path / "r.tmp"
        tmp.write_text(e.text.replace(app_vs("app", e.app.port),
                                      app_vs("app2", e.app2.port)))
        os.replace(tmp, e.conf)
        wait_for(lambda: curl(e, "app.example.test")[1] == "app-v2", 15,
                 "new requests on the shared port routed by the new route")
        assert curl(e, "app.example.test", "--http1.1") == \
            (0, "app-v2", "1.1")
        # The keep-alive connection opened before the change is still
        # served, by the new routes.
        assert get(keep) == (200, b"app-v2")
        # Passthrough and terminated TLS: new connections, and the
        # session opened before the change.
        assert tls_talk(e.port, "db.example.test", cafile=e.db_crt) \
            == b"db:hello"
        db.sendall(b"2")
        assert db.recv(100) == b"db:2"
    finally:
        gate.set()
        t.join(30)
        keep.close()
        db.close()
    # The request that started before the change finished on its route.
    assert result.get("got") == (200, b"app-v1"), result
    assert f"listener gateway-127.0.0.1-{e.port}: changed" in e.st.log()


def test_gateway_change_drains_https_connections(strait_factory,
                                                 upstream_factory, tmp_path):
    """A change of the HTTPS servers themselves (here a new host) builds a
    new HTTPS part: the old one finishes its requests and closes idle
    keep-alive connections; new connections get the new servers."""
    e = shared_port(strait_factory, upstream_factory, tmp_path)
    keep = https_conn(e)
    assert get(keep) == (200, b"app-v1")
    tmp = tmp_path / "r.tmp"
    tmp.write_text(e.text.replace(
        '[app.example.test, "*.web.example.test"]',
        '[app.example.test, "*.web.example.test", new.example.test]'))
    os.replace(tmp, e.conf)
    wait_for(lambda: curl(e, "new.example.test", "--insecure")[1] == "app-v1",
             15, "the new HTTPS host served")

    def closed():
        try:
            return keep.sock.recv(1) == b""
        except (ssl.SSLError, OSError):
            return True
    wait_for(closed, 15, "the idle keep-alive connection closed")
    keep.close()


def test_connection_inspected_across_two_reloads_is_served(
        strait_factory, upstream_factory, tmp_path):
    """A connection still waiting for its ClientHello on a listener two
    rebuilds old (a route change kept the HTTPS part, then a change of the
    HTTPS servers replaced it) is handed to that old HTTPS part when its
    ClientHello comes, and is served there once, not closed mid-handshake
    as the old listener and its part go away."""
    e = shared_port(strait_factory, upstream_factory, tmp_path)
    before = stat(e.st, e.port, "downstream_cx_total")
    pending = socket.create_connection(("127.0.0.1", e.port), timeout=30)
    wait_for(lambda: stat(e.st, e.port, "downstream_cx_total") > before, 10,
             "the connection accepted")
    try:
        tmp = tmp_path / "r.tmp"
        # 1: a route change; the rebuilt listener keeps the HTTPS part.
        text = e.text.replace(app_vs("app", e.app.port),
                              app_vs("app2", e.app2.port))
        tmp.write_text(text)
        os.replace(tmp, e.conf)
        wait_for(lambda: curl(e, "app.example.test")[1] == "app-v2", 15,
                 "the first change applied")
        # 2: new HTTPS servers; the kept HTTPS part stops and its owner
        # goes once it is idle.
        tmp.write_text(text.replace(
            '[app.example.test, "*.web.example.test"]',
            '[app.example.test, "*.web.example.test", new.example.test]'))
        os.replace(tmp, e.conf)
        wait_for(lambda: curl(e, "new.example.test",
                              "--insecure")[1] == "app-v2",
                 15, "the second change applied")
        ctx = ssl.create_default_context(cafile=e.app_crt)
        c = http.client.HTTPSConnection("app.example.test", e.port,
                                        context=ctx, timeout=30)
        c.sock = ctx.wrap_socket(pending, server_hostname="app.example.test")
        status, body = get(c)
        assert (status, body) == (200, b"app-v2")
        c.close()
    finally:
        pending.close()


def test_permissive_mesh_https_beside_passthrough(nodes, upstream_factory,
                                                  tmp_path):
    """An ISTIO_MUTUAL HTTPS server under PeerAuthentication PERMISSIVE
    shares its port with a PASSTHROUGH server: plaintext (no ClientHello)
    is HTTP for the mesh server, TLS goes by SNI, and the mesh server
    still wants a mesh client certificate."""
    app = upstream_factory(body_handler("mesh-app"))
    db, db_crt = tls_upstream(upstream_factory, tmp_path, "db",
                              "db.example.test")
    port, ca_port = free_port(), free_port()
    conf = tmp_path / "mesh-conf"
    conf.mkdir()
    (conf / "r.yaml").write_text(f"""apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {{name: gw, namespace: istio-system}}
spec:
  selector: {{}}
  servers:
  - port: {{number: {port}, name: https-mesh, protocol: HTTPS}}
    bind: 127.0.0.1
    hosts: ["*"]
    tls: {{mode: ISTIO_MUTUAL}}
  - port: {{number: {port}, name: tls, protocol: TLS}}
    bind: 127.0.0.1
    hosts: [db.example.test]
    tls: {{mode: PASSTHROUGH}}
---
apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {{name: default, namespace: istio-system}}
spec: {{mtls: {{mode: PERMISSIVE}}}}
""" + service("app", app.port, "HTTP").replace("namespace: default",
                                               "namespace: istio-system")
        + service("db", db.port).replace("namespace: default",
                                         "namespace: istio-system") + f"""---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: web, namespace: istio-system}}
spec:
  hosts: ["*"]
  gateways: [gw]
  http:
  - route: [{{destination: {{host: app.svc.test, port: {{number: {app.port}}}}}}}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: db, namespace: istio-system}}
spec:
  hosts: [db.example.test]
  gateways: [gw]
  tls:
  - match: [{{sniHosts: [db.example.test]}}]
    route: [{{destination: {{host: db.svc.test}}}}]
""")
    nodes("mesh", f"{{enabled: true, dir: {tmp_path / 'mesh-ca'}, "
                  f"address: 127.0.0.1:{ca_port}}}",
          node_yaml=f"config: {{dir: \"{conf}\"}}\n").start()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        assert get(c) == (200, b"mesh-app")
    finally:
        c.close()
    assert tls_talk(port, "db.example.test", cafile=db_crt) == b"db:hello"
    # TLS for the mesh server without a client certificate: refused.
    assert refused(lambda: tls_talk(port, "app.example.test"))


def test_client_certificates_and_policy_per_https_server(
        strait_factory, upstream_factory, tmp_path):
    """Two HTTPS servers beside a PASSTHROUGH one: each keeps its own
    client-certificate settings (by SNI), and AuthorizationPolicy applies
    to the HTTP requests of the shared port."""
    app = upstream_factory(body_handler("app"))
    db, db_crt = tls_upstream(upstream_factory, tmp_path, "db",
                              "db.example.test")
    crt, key = make_cert(str(tmp_path), "gw", "app.example.test",
                         ["app.example.test"])
    mcrt, mkey = make_cert(str(tmp_path), "mtls", "mtls.example.test",
                           ["mtls.example.test"])
    port = free_port()
    tls = f'serverCertificate: "{crt}", privateKey: "{key}"'
    mtls = f'serverCertificate: "{mcrt}", privateKey: "{mkey}"'
    conf = tmp_path / "conf.d"
    conf.mkdir()
    (conf / "r.yaml").write_text(f"""apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {{name: gw, namespace: default}}
spec:
  selector: {{}}
  servers:
  - port: {{number: {port}, name: https, protocol: HTTPS}}
    bind: 127.0.0.1
    hosts: [app.example.test]
    tls: {{mode: SIMPLE, {tls}}}
  - port: {{number: {port}, name: https-mtls, protocol: HTTPS}}
    bind: 127.0.0.1
    hosts: [mtls.example.test]
    tls: {{mode: MUTUAL, {mtls}, caCertificates: "{ROOT}"}}
  - port: {{number: {port}, name: tls, protocol: TLS}}
    bind: 127.0.0.1
    hosts: [db.example.test]
    tls: {{mode: PASSTHROUGH}}
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {{name: no-admin, namespace: istio-system}}
spec:
  action: DENY
  rules:
  - to: [{{operation: {{paths: ["/admin*"]}}}}]
""" + service("app", app.port, "HTTP") + service("db", db.port) + f"""---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: web, namespace: default}}
spec:
  hosts: [app.example.test, mtls.example.test]
  gateways: [gw]
  http:
  - route: [{{destination: {{host: app.svc.test, port: {{number: {app.port}}}}}}}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: db, namespace: default}}
spec:
  hosts: [db.example.test]
  gateways: [gw]
  tls:
  - match: [{{sniHosts: [db.example.test]}}]
    route: [{{destination: {{host: db.svc.test}}}}]
""")
    st = strait_factory(extra=f"config: {{dir: \"{conf}\"}}\n").start()

    def curl(host, path="/", *args):
        ca = mcrt if host.startswith("mtls") else crt
        out = subprocess.run(
            ["curl", "-sS", "--max-time", "10", "--cacert", ca, "--resolve",
             f"{host}:{port}:127.0.0.1", "-w", " %{http_code}", *args,
             f"https://{host}:{port}{path}"], capture_output=True, timeout=30)
        return out.stdout.decode()
    assert curl("app.example.test") == "app 200"
    assert curl("app.example.test", "/admin").endswith(" 403")
    # MUTUAL on its own server only: no certificate, no handshake.
    assert curl("mtls.example.test") == " 000"
    assert curl("mtls.example.test", "/", "--cert", FOO[0], "--key",
                FOO[1]) == "app 200"
    # The passthrough part is authorised per connection, as Istio does on
    # TCP: a DENY rule's HTTP-only fields do not narrow it there, so the
    # connection is refused.
    assert refused(lambda: tls_talk(port, "db.example.test", cafile=db_crt))
    wait_for(lambda: access_lines(st, "RBAC_ACCESS_DENIED[istio-system/"
                                      "no-admin]"), 10,
             "the refused passthrough session in the access log")
    assert db.conns == 0


def plaintext_conflict(port):
    return f"""apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {{name: gw, namespace: default}}
spec:
  selector: {{}}
  servers:
  - port: {{number: {port}, name: http, protocol: HTTP}}
    bind: 127.0.0.1
    hosts: ["*"]
  - port: {{number: {port}, name: tcp, protocol: TCP}}
    bind: 127.0.0.1
    hosts: ["*"]
"""


def test_http_and_tcp_on_one_port_refused_with_a_clear_message(
        strait_factory, upstream_factory, tmp_path):
    port = free_port()
    d = tmp_path / "check"
    d.mkdir()
    (d / "gw.yaml").write_text(plaintext_conflict(port))
    r = subprocess.run([STRAIT, "check", str(d)], capture_output=True,
                       text=True, timeout=60)
    assert "Warning [STR0006]" in r.stdout, r.stdout
    assert "IST0145" not in r.stdout, r.stdout
    assert "spec.servers[1]" in r.stdout
    assert ("plaintext TCP server cannot share the port with the plaintext "
            "HTTP servers before it") in r.stdout, r.stdout
    assert "no SNI" in r.stdout
    # Running it: the HTTP server is served, the TCP server skipped, said.
    up = upstream_factory(body_handler("plain-http"))
    conf = tmp_path / "conf.d"
    conf.mkdir()
    (conf / "r.yaml").write_text(plaintext_conflict(port)
                                 + service("up", up.port, "HTTP") + f"""---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: up, namespace: default}}
spec:
  hosts: ["*"]
  gateways: [gw]
  http:
  - route: [{{destination: {{host: up.svc.test, port: {{number: {up.port}}}}}}}]
""")
    st = strait_factory(extra=f"config: {{dir: \"{conf}\"}}\n").start()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        c.request("GET", "/")
        r = c.getresponse()
        assert (r.status, r.read()) == (200, b"plain-http")
    finally:
        c.close()
    assert "a TCP server cannot share the port with HTTP servers" in st.log()


def test_plaintext_beside_tls_is_an_error_in_check(tmp_path):
    d = tmp_path / "check"
    d.mkdir()
    (d / "gw.yaml").write_text("""apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: gw, namespace: default}
spec:
  selector: {}
  servers:
  - port: {number: 8443, name: https, protocol: HTTPS}
    hosts: ["*"]
    tls: {mode: SIMPLE, credentialName: c}
  - port: {number: 8443, name: http, protocol: HTTP}
    hosts: ["*"]
  - port: {number: 8443, name: tls, protocol: TLS}
    hosts: [db.example.test]
    tls: {mode: PASSTHROUGH}
""")
    r = subprocess.run([STRAIT, "check", str(d)], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 1, r.stdout
    lines = [l for l in r.stdout.splitlines() if "STR0007" in l]
    # The HTTP server beside the HTTPS one; the TLS server shares.
    assert len(lines) == 1, r.stdout
    assert lines[0].startswith("Error [STR0007]") and "spec.servers[1]" in \
        lines[0], lines
    assert "IST0145" not in r.stdout, r.stdout
