"""Egress: outboundTrafficPolicy (REGISTRY_ONLY, the default, and
ALLOW_ANY) for routes to hosts no ServiceEntry declares, and egress to an
external host a MESH_EXTERNAL ServiceEntry declares, with TLS origination.
Names are resolved by a DNS server the test runs on loopback."""
import json
import os
import socket
import ssl
import subprocess
import threading

from conftest import STRAIT, free_port, read_head, recv_all, responder, wait_for
from httpd import make_cert
from test_dns import DNSServer
from test_gateway import get


def write(path, text):
    """Writes and renames, so a reload never reads half a file."""
    tmp = path.with_name("." + path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def boot(conf, dns, mode=None):
    text = (f"config: {{dir: \"{conf}\", debounce: 10ms}}\n"
            f"dns: {{nameservers: [\"127.0.0.1:{dns.port}\"], "
            f"minRefresh: 100ms, timeout: 500ms}}\n")
    if mode is not None:
        text += f"outboundTrafficPolicy: {{mode: {mode}}}\n"
    return text


def set_mode(st, conf, dns, mode):
    st.write_config("", boot(conf, dns, mode))


def reload(st):
    code, _, _ = st.get("/reload", method="POST")
    assert code == 200


def http_gateway(gw):
    return f"""apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {{name: gw, namespace: default}}
spec:
  selector: {{}}
  servers:
  - port: {{number: {gw}, name: http, protocol: HTTP}}
    bind: 127.0.0.1
    hosts: ["*"]
"""


def tcp_gateway(port):
    return f"""---
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {{name: tcp, namespace: default}}
spec:
  selector: {{}}
  servers:
  - port: {{number: {port}, name: tcp, protocol: TCP}}
    bind: 127.0.0.1
    hosts: ["*"]
"""


def named(name):
    return responder(lambda head: name.encode())


def access_lines(st, event):
    out = []
    for line in st.log().splitlines():
        if event in line:
            out.append(line)
    return out


def check(*args):
    return subprocess.run([STRAIT, "check", *args], capture_output=True,
                          text=True, timeout=60)


# A host that a ServiceEntry declares for another namespace only: strait
# check (which sees the files, not the node) knows it, the gateway in
# istio-system does not, so the outboundTrafficPolicy decides at run time.
HIDDEN = """---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: hidden, namespace: elsewhere}}
spec:
  hosts: [api.hidden.test]
  exportTo: ["."]
  location: MESH_EXTERNAL
  resolution: DNS
  ports: [{{number: {up}, name: http, protocol: HTTP}}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: hidden, namespace: default}}
spec:
  hosts: ["*"]
  gateways: [gw]
  http:
  - route: [{{destination: {{host: api.hidden.test, port: {{number: {up}}}}}}}]
"""

HIDDEN_TCP = """---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: hidden-tcp, namespace: default}}
spec:
  hosts: ["*"]
  gateways: [tcp]
  tcp:
  - route: [{{destination: {{host: api.hidden.test, port: {{number: {up}}}}}}}]
"""

UNDECLARED = """---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: open, namespace: default}
spec:
  hosts: ["*"]
  gateways: [gw]
  http:
  - route: [{destination: {host: nowhere.undeclared.test}}]
"""


def test_registry_only_refuses_undeclared_hosts(strait_factory, tmp_path,
                                                upstream_factory):
    """strait check: an error that names the mode and the way out; at run
    time (a host the node does not see): 502 registry_only for HTTP, the
    connection closed for TCP, BlackHoleCluster in the logs and counted."""
    up = upstream_factory(named("up"))
    dns = DNSServer(ttl=1)
    try:
        dns.records = {"api.hidden.test": ["127.0.0.1"]}
        conf = tmp_path / "conf.d"
        conf.mkdir()
        gw, tcp = free_port(), free_port()
        # The check, without and with a bootstrap saying REGISTRY_ONLY.
        (tmp_path / "bad.yaml").write_text(http_gateway(gw) + UNDECLARED)
        r = check(str(tmp_path / "bad.yaml"))
        assert r.returncode == 1, r.stdout
        assert ("Error [IST0101] (VirtualService default/open" in r.stdout)
        assert ("Referenced host not found: \"nowhere.undeclared.test\" "
                "(outboundTrafficPolicy is REGISTRY_ONLY: declare the host "
                "in a ServiceEntry, or set outboundTrafficPolicy.mode "
                "ALLOW_ANY in the bootstrap to pass it through)") in r.stdout
        (tmp_path / "b.yaml").write_text(
            "outboundTrafficPolicy: {mode: REGISTRY_ONLY}\n")
        r = check("-c", str(tmp_path / "b.yaml"), str(tmp_path / "bad.yaml"))
        assert r.returncode == 1 and "REGISTRY_ONLY" in r.stdout
        # Such resources do not start strait.
        write(conf / "r.yaml", http_gateway(gw) + UNDECLARED)
        bad = strait_factory(extra=boot(conf, dns))
        bad.start(wait=False)
        assert bad.proc.wait(timeout=30) == 1
        assert "outboundTrafficPolicy is REGISTRY_ONLY" in bad.log()

        write(conf / "r.yaml", http_gateway(gw) + tcp_gateway(tcp)
              + HIDDEN.format(up=up.port) + HIDDEN_TCP.format(up=up.port))
        r = check(str(conf))
        assert r.returncode == 0, r.stdout
        st = strait_factory(extra=boot(conf, dns)).start()
        status, _, body = get(gw, "/")
        assert status == 502
        assert body == b"destination host is not in the registry\n"
        wait_for(lambda: any("details=registry_only" in l
                             for l in access_lines(st, "http_request")),
                 10, "the access log line")
        line = [l for l in access_lines(st, "http_request")
                if "details=registry_only" in l][0]
        assert "status=502" in line and "cluster=BlackHoleCluster" in line
        # TCP: closed without a byte, as Istio's BlackHoleCluster does (a
        # reset, when what was sent is still unread).
        with socket.create_connection(("127.0.0.1", tcp), timeout=10) as s:
            s.sendall(b"hello")
            try:
                assert recv_all(s) == b""
            except ConnectionResetError:
                pass
        wait_for(lambda: any("cluster=BlackHoleCluster" in l
                             for l in access_lines(st, "tcp_session")),
                 10, "the tcp_session line")
        line = [l for l in access_lines(st, "tcp_session")
                if "cluster=BlackHoleCluster" in l][0]
        assert "flags=UH" in line
        stats = st.stats()
        assert stats[f"listener.gateway-127.0.0.1-{gw}.registry_only_refused"] == 1
        assert stats[f"listener.gateway-127.0.0.1-{tcp}.registry_only_refused"] == 1
        prom = st.get("/stats/prometheus")[1]
        assert "strait_listener_registry_only_refused_total{" in prom
        clusters = st.get("/clusters")[1]
        assert "BlackHoleCluster::outbound_traffic_policy::REGISTRY_ONLY" \
            in clusters
        assert "BlackHoleCluster::endpoints::none" in clusters
        # The name was never looked up: nothing is sent its way.
        assert not [q for q in dns.queries if q[0] == "api.hidden.test"]
    finally:
        dns.stop()


def test_allow_any_passes_through_and_switches_live(strait_factory, tmp_path,
                                                    upstream_factory):
    """ALLOW_ANY: an undeclared host is resolved by DNS and reached on the
    destination port, or the Gateway's port when none is given; an IP
    destination needs no DNS. The mode switches on reload, both ways,
    and a switch to REGISTRY_ONLY is refused while routes need ALLOW_ANY."""
    gw = free_port()
    up = upstream_factory(named("by-port"))
    # The Gateway's port on another loopback address: a destination
    # without a port goes there.
    same = upstream_factory(named("gateway-port"), host="127.0.0.2", port=gw)
    ip = upstream_factory(named("by-ip"), host="127.0.0.3")
    dns = DNSServer(ttl=1)
    try:
        dns.records = {"api.hidden.test": ["127.0.0.1"],
                       "pass.example.test": ["127.0.0.1"],
                       "noport.example.test": ["127.0.0.2"]}
        conf = tmp_path / "conf.d"
        conf.mkdir()
        resources = http_gateway(gw) + HIDDEN.format(up=up.port) + f"""---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: open, namespace: default}}
spec:
  hosts: [pass.example.test, noport.example.test, ip.example.test]
  gateways: [gw]
  http:
  - match: [{{authority: {{exact: pass.example.test}}}}]
    route: [{{destination: {{host: pass.example.test, port: {{number: {up.port}}}}}}}]
  - match: [{{authority: {{exact: noport.example.test}}}}]
    route: [{{destination: {{host: noport.example.test}}}}]
  - match: [{{authority: {{exact: ip.example.test}}}}]
    route: [{{destination: {{host: 127.0.0.3, port: {{number: {ip.port}}}}}}}]
"""
        write(conf / "r.yaml", resources)
        # strait check with the bootstrap: warnings that name the mode,
        # with strait's own code (Istio's IST0101 is always an Error).
        (tmp_path / "b.yaml").write_text(
            "outboundTrafficPolicy: {mode: ALLOW_ANY}\n")
        r = check("-c", str(tmp_path / "b.yaml"), str(conf))
        assert r.returncode == 0, r.stdout
        assert "IST0101" not in r.stdout, r.stdout
        assert ("Warning [STR0005] (VirtualService default/open" in r.stdout)
        assert ("Host \"noport.example.test\" is in no ServiceEntry, "
                "Service or WorkloadEntry: passed through to "
                "noport.example.test, resolved by DNS, on the port of the "
                "Gateway server it comes through (outboundTrafficPolicy "
                "ALLOW_ANY)") in r.stdout
        assert f"on port {up.port} (outboundTrafficPolicy" in r.stdout
        # Without it (REGISTRY_ONLY), the same files are refused.
        assert check(str(conf)).returncode == 1

        st = strait_factory(extra=boot(conf, dns, "ALLOW_ANY")).start()
        wait_for(lambda: get(gw, "/", {"host": "pass.example.test"})[2]
                 == b"by-port", 15, "pass.example.test through DNS")
        wait_for(lambda: get(gw, "/", {"host": "noport.example.test"})[2]
                 == b"gateway-port", 15, "noport.example.test on the gw port")
        assert get(gw, "/", {"host": "ip.example.test"})[2] == b"by-ip"
        assert not [q for q in dns.queries if q[0] == "127.0.0.3"]
        # The hidden host (declared for another namespace only) passes too.
        wait_for(lambda: get(gw, "/")[2] == b"by-port", 15, "api.hidden.test")
        # /clusters and /config_dump say where these come from.
        clusters = st.get("/clusters")[1]
        assert (f"pass.example.test||{up.port}::outbound_traffic_policy::"
                "ALLOW_ANY") in clusters
        assert (f"noport.example.test||{gw}::outbound_traffic_policy::"
                "ALLOW_ANY") in clusters
        assert f"noport.example.test||{gw}::127.0.0.2:{gw}::" in clusters
        dump = json.loads(st.get("/config_dump")[1])
        assert dump["outboundTrafficPolicy"] == {"mode": "ALLOW_ANY"}
        out = {c["name"]: c for c in dump["outboundClusters"]}
        assert out[f"127.0.0.3||{ip.port}"]["outboundTrafficPolicy"] \
            == "ALLOW_ANY"
        assert out[f"127.0.0.3||{ip.port}"]["endpoints"] \
            == [f"127.0.0.3:{ip.port}"]

        # A switch to REGISTRY_ONLY is refused while routes need ALLOW_ANY:
        # nothing changes, and the error says why.
        failed = st.stats()["server.reloads_failed"]
        set_mode(st, conf, dns, "REGISTRY_ONLY")
        reload(st)
        stats = st.stats()
        assert stats["server.reloads_failed"] == failed + 1
        assert "outboundTrafficPolicy REGISTRY_ONLY: the resources in effect " \
            "have errors under it" in stats["server.last_reload_error"]
        assert "noport.example.test" in stats["server.last_reload_error"]
        assert get(gw, "/", {"host": "pass.example.test"})[2] == b"by-port"
        assert json.loads(st.get("/config_dump")[1])[
            "outboundTrafficPolicy"] == {"mode": "ALLOW_ANY"}

        # With only the hidden host left (declared, not visible here), the
        # switch is taken on the next reload (a resource change alone
        # never re-reads strait.yaml): the same route now goes to
        # BlackHoleCluster...
        write(conf / "r.yaml", http_gateway(gw) + HIDDEN.format(up=up.port))
        reload(st)
        wait_for(lambda: get(gw, "/", {"host": "pass.example.test"})[0]
                 == 502, 15, "REGISTRY_ONLY after the resources changed")
        assert json.loads(st.get("/config_dump")[1])[
            "outboundTrafficPolicy"] == {"mode": "REGISTRY_ONLY"}
        # The names passthroughs used are dropped with them.
        wait_for(lambda: st.stats()["dns.names"] == 0, 10, "names swept")
        # ... and back to ALLOW_ANY without a restart.
        pid = st.proc.pid
        set_mode(st, conf, dns, "ALLOW_ANY")
        reload(st)
        wait_for(lambda: get(gw, "/")[2] == b"by-port", 15, "ALLOW_ANY again")
        assert st.proc.pid == pid and st.proc.poll() is None
        assert st.stats()["dns.names"] == 1
    finally:
        dns.stop()


def test_tcp_route_to_undeclared_host_under_allow_any(strait_factory,
                                                      tmp_path,
                                                      upstream_factory):
    """A tcp route to an undeclared name reaches it through DNS, on the
    Gateway's port when the destination has none; the host's
    DestinationRule tls applies to it, with the host as SNI."""
    port, sport = free_port(), free_port()
    upstream_factory(host="127.0.0.2", port=port)
    d = tmp_path / "certs"
    d.mkdir()
    crt, key = make_cert(str(d), "sec", "secure.undeclared.test",
                         ["secure.undeclared.test"])
    secure = TLSServer(crt, key)
    dns = DNSServer(ttl=1)
    try:
        dns.records = {"db.undeclared.test": ["127.0.0.2"],
                       "secure.undeclared.test": ["127.0.0.1"]}
        conf = tmp_path / "conf.d"
        conf.mkdir()
        write(conf / "r.yaml", tcp_gateway(port)[4:] + f"""---
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {{name: stcp, namespace: default}}
spec:
  selector: {{}}
  servers:
  - port: {{number: {sport}, name: tcp, protocol: TCP}}
    bind: 127.0.0.1
    hosts: ["*"]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: db, namespace: default}}
spec:
  hosts: ["*"]
  gateways: [tcp]
  tcp:
  - route: [{{destination: {{host: db.undeclared.test}}}}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: secure, namespace: default}}
spec:
  hosts: ["*"]
  gateways: [stcp]
  tcp:
  - route: [{{destination: {{host: secure.undeclared.test, port: {{number: {secure.port}}}}}}}]
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {{name: secure, namespace: default}}
spec:
  host: secure.undeclared.test
  trafficPolicy: {{tls: {{mode: SIMPLE, caCertificates: "{crt}"}}}}
""")
        st = strait_factory(extra=boot(conf, dns, "ALLOW_ANY")).start()

        def echoed():
            try:
                with socket.create_connection(("127.0.0.1", port),
                                              timeout=10) as s:
                    s.sendall(b"ping")
                    s.shutdown(socket.SHUT_WR)
                    return recv_all(s) == b"ping"
            except OSError:
                return False
        wait_for(echoed, 15, "the echo through the passthrough")
        clusters = st.get("/clusters")[1]
        assert (f"db.undeclared.test||{port}::outbound_traffic_policy::"
                "ALLOW_ANY") in clusters
        assert ("db.undeclared.test", 1) in dns.queries

        def through_tls():
            try:
                with socket.create_connection(("127.0.0.1", sport),
                                              timeout=10) as s:
                    s.sendall(b"GET / HTTP/1.1\r\nhost: x\r\n"
                              b"connection: close\r\n\r\n")
                    return recv_all(s)
            except OSError:
                return b""
        wait_for(lambda: through_tls().endswith(
            b"tls sni=secure.undeclared.test host=x"), 15,
            "plaintext in, TLS out to the passthrough")
        assert set(secure.sni) == {"secure.undeclared.test"}
    finally:
        dns.stop()
        secure.stop()


class TLSServer:
    """HTTPS on 127.0.0.1 with the certificate given; records the SNI
    each handshake asked for; answers "tls sni=SNI host=HOST"."""

    def __init__(self, crt, key):
        self.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.ctx.load_cert_chain(crt, key)
        self.sni = []
        self.ctx.sni_callback = lambda s, name, c: self.sni.append(name)
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.stopped = threading.Event()
        self.t = threading.Thread(target=self.loop, daemon=True)
        self.t.start()

    def loop(self):
        while not self.stopped.is_set():
            try:
                c, _ = self.sock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            threading.Thread(target=self.serve, args=(c,), daemon=True).start()

    def serve(self, c):
        try:
            c.settimeout(10)
            s = self.ctx.wrap_socket(c, server_side=True)
        except (ssl.SSLError, OSError):
            c.close()
            return
        try:
            buf = b""
            while True:
                buf = read_head(s, buf)
                if buf is None:
                    return
                head, _, buf = buf.partition(b"\r\n\r\n")
                host = b""
                for line in head.split(b"\r\n")[1:]:
                    k, _, v = line.partition(b":")
                    if k.strip().lower() == b"host":
                        host = v.strip()
                body = b"tls sni=%s host=%s" % (
                    (self.sni[-1] or "").encode(), host)
                s.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s"
                          % (len(body), body))
                if b"\r\nconnection: close" in head.lower():
                    return
        except (ssl.SSLError, OSError):
            pass
        finally:
            s.close()

    def stop(self):
        self.stopped.set()
        self.t.join(5)
        self.sock.close()


def test_mesh_external_tls_origination(strait_factory, tmp_path):
    """Istio's egress gateway TLS origination: HTTP in, HTTPS out to the
    external host a MESH_EXTERNAL ServiceEntry (resolution DNS) declares,
    by a DestinationRule with tls SIMPLE; the host is the SNI and the name
    the certificate must carry."""
    d = tmp_path / "certs"
    d.mkdir()
    good = make_cert(str(d), "api", "api.external.test", ["api.external.test"])
    wrong = make_cert(str(d), "wrong", "other.test", ["other.test"])
    api = TLSServer(*good)
    imposter = TLSServer(*wrong)
    dns = DNSServer(ttl=1)
    try:
        dns.records = {"api.external.test": ["127.0.0.1"],
                       "spoofed.external.test": ["127.0.0.1"]}
        conf = tmp_path / "conf.d"
        conf.mkdir()
        gw = free_port()
        text = http_gateway(gw)
        for name, srv, crt in (("api", api, good[0]),
                               ("spoofed", imposter, wrong[0])):
            text += f"""---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: {name}, namespace: default}}
spec:
  hosts: [{name}.external.test]
  location: MESH_EXTERNAL
  resolution: DNS
  ports:
  - {{number: 80, name: http, protocol: HTTP}}
  - {{number: {srv.port}, name: https, protocol: HTTPS}}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {{name: {name}, namespace: default}}
spec:
  host: {name}.external.test
  trafficPolicy:
    portLevelSettings:
    - port: {{number: {srv.port}}}
      tls: {{mode: SIMPLE, caCertificates: "{crt}"}}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: {name}, namespace: default}}
spec:
  hosts: [{name}.external.test]
  gateways: [gw]
  http:
  - route: [{{destination: {{host: {name}.external.test, port: {{number: {srv.port}}}}}}}]
"""
        write(conf / "r.yaml", text)
        r = check(str(conf))
        assert r.returncode == 0 and "IST0101" not in r.stdout, r.stdout
        st = strait_factory(extra=boot(conf, dns)).start()
        wait_for(lambda: get(gw, "/", {"host": "api.external.test"})[0] == 200,
                 15, "api.external.test over TLS")
        status, _, body = get(gw, "/get", {"host": "api.external.test"})
        assert status == 200
        assert body == b"tls sni=api.external.test host=api.external.test"
        assert api.sni and set(api.sni) == {"api.external.test"}
        clusters = st.get("/clusters")[1]
        assert f"api.external.test||{api.port}::tls::on" in clusters
        assert (f"api.external.test||{api.port}::sni::api.external.test"
                in clusters)
        assert "outbound_traffic_policy" not in clusters
        # A server at the resolved address whose certificate the CA
        # bundle trusts but which is not for the name is refused, before
        # any request is sent to it.
        wait_for(lambda: get(gw, "/", {"host": "spoofed.external.test"})[0]
                 == 503, 15, "spoofed.external.test refused")
        assert imposter.sni and set(imposter.sni) == {"spoofed.external.test"}
        # The access log line is written when the stream ends, which can
        # be after the client has its answer.
        wait_for(lambda: any("authority=spoofed.external.test" in l
                             for l in access_lines(st, "http_request")),
                 10, "access log line")
        refused = [l for l in access_lines(st, "http_request")
                   if "authority=spoofed.external.test" in l]
        assert refused and "upstream_tls_refused" in refused[-1]
        assert "hostname mismatch" in refused[-1].lower(), refused[-1]
    finally:
        dns.stop()
        api.stop()
        imposter.stop()


def test_mesh_external_tls_passthrough_by_sni(strait_factory, tmp_path):
    """Istio's egress SNI passthrough: a TLS server in PASSTHROUGH mode
    relays the client's own TLS, by its SNI, to the external host a
    MESH_EXTERNAL ServiceEntry (protocol TLS, resolution DNS) declares;
    the client verifies the host's certificate end to end."""
    d = tmp_path / "certs"
    d.mkdir()
    crt, key = make_cert(str(d), "api", "api.external.test",
                         ["api.external.test"])
    api = TLSServer(crt, key)
    dns = DNSServer(ttl=1)
    try:
        dns.records = {"api.external.test": ["127.0.0.1"]}
        conf = tmp_path / "conf.d"
        conf.mkdir()
        port = free_port()
        write(conf / "r.yaml", f"""apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {{name: tls, namespace: default}}
spec:
  selector: {{}}
  servers:
  - port: {{number: {port}, name: tls, protocol: TLS}}
    bind: 127.0.0.1
    hosts: [api.external.test]
    tls: {{mode: PASSTHROUGH}}
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: api, namespace: default}}
spec:
  hosts: [api.external.test]
  location: MESH_EXTERNAL
  resolution: DNS
  ports: [{{number: {api.port}, name: tls, protocol: TLS}}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: api, namespace: default}}
spec:
  hosts: [api.external.test]
  gateways: [tls]
  tls:
  - match: [{{sniHosts: [api.external.test]}}]
    route: [{{destination: {{host: api.external.test, port: {{number: {api.port}}}}}}}]
""")
        st = strait_factory(extra=boot(conf, dns)).start()
        ctx = ssl.create_default_context(cafile=crt)

        def fetched():
            try:
                with socket.create_connection(("127.0.0.1", port),
                                              timeout=10) as raw:
                    with ctx.wrap_socket(
                            raw, server_hostname="api.external.test") as s:
                        s.sendall(b"GET / HTTP/1.1\r\nhost: api.external.test"
                                  b"\r\nconnection: close\r\n\r\n")
                        return recv_all(s)
            except (OSError, ssl.SSLError):
                return b""
        wait_for(lambda: fetched().endswith(
            b"tls sni=api.external.test host=api.external.test"), 15,
            "the client's TLS relayed to api.external.test")
        wait_for(lambda: "cluster=api.external.test||%d" % api.port
                 in st.log(), 10, "the tcp_session line")
    finally:
        dns.stop()
        api.stop()
