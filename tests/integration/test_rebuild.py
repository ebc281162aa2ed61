"""Rebuilds from the inputs in effect: a DNS answer, a resource change or
a JWKS refresh compiles a new snapshot under the bootstrap in effect and
never re-reads strait.yaml; only SIGHUP and POST /reload do. A half-written
bootstrap on disk therefore never goes live by itself, and never blocks
what the resources and DNS say."""
import signal
import socket

from conftest import free_port, http_gateway, wait_for
from test_dns import DNSServer, RESOURCES, fetch, named

TCP_RESOURCES = """apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {{name: tgw, namespace: default}}
spec:
  selector: {{}}
  servers:
  - port: {{number: {tport}, name: tcp, protocol: TCP}}
    bind: 127.0.0.1
    hosts: ["*"]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: db, namespace: default}}
spec:
  hosts: [db.test]
  location: MESH_EXTERNAL
  resolution: DNS
  ports: [{{number: {port}, name: tcp, protocol: TCP}}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: db, namespace: default}}
spec:
  hosts: ["*"]
  gateways: [tgw]
  tcp:
  - route: [{{destination: {{host: db.test, port: {{number: {port}}}}}}}]
---
"""


def tcp_fetch(port):
    """(status, body) of one HTTP request relayed by the TCP listener on
    port (the upstream keeps the connection: read by content-length)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")
        data = b""
        while b"\r\n\r\n" not in data:
            d = s.recv(65536)
            if not d:
                return None
            data += d
        head, _, body = data.partition(b"\r\n\r\n")
        n = 0
        for line in head.split(b"\r\n")[1:]:
            k, _, v = line.partition(b":")
            if k.strip().lower() == b"content-length":
                n = int(v)
        while len(body) < n:
            d = s.recv(65536)
            if not d:
                return None
            body += d
        return int(head.split(b" ")[1]), body


def test_dns_change_applies_while_bootstrap_on_disk_is_invalid(
        strait_factory, tmp_path, upstream_factory):
    one = upstream_factory(named("one"))
    two = upstream_factory(named("two"), host="127.0.0.2", port=one.port)
    dns = DNSServer(ttl=1)
    try:
        dns.records = {"svc.test": ["127.0.0.1"], "ep.test": ["127.0.0.1"],
                       "db.test": ["127.0.0.1"]}
        conf = tmp_path / "conf.d"
        conf.mkdir()
        gw, tport = free_port(), free_port()
        (conf / "r.yaml").write_text(
            TCP_RESOURCES.format(tport=tport, port=one.port) +
            RESOURCES.format(gateway=http_gateway(gw), gw=gw, port=one.port))
        extra = (f"config: {{dir: \"{conf}\", debounce: 10ms}}\n"
                 f"dns: {{nameservers: [\"127.0.0.1:{dns.port}\"], "
                 f"minRefresh: 100ms, timeout: 500ms}}\n")
        st = strait_factory(extra=extra).start()
        wait_for(lambda: fetch(gw, "/") == (200, b"one"), 15, "svc.test")
        wait_for(lambda: tcp_fetch(tport) == (200, b"one"), 15, "db.test")
        before = st.stats()
        assert before["server.reloads_failed"] == 0

        # A half-finished edit of the bootstrap, not signalled.
        st.write_config("", raw="workers: 2\nadmin: {address: [broken\n")
        # New DNS answers: HTTP routes and the L4 relay follow them.
        dns.records["svc.test"] = ["127.0.0.2"]
        dns.records["db.test"] = ["127.0.0.2"]
        wait_for(lambda: st.stats()["dns.changes"] >= before["dns.changes"] + 2,
                 15, "the DNS changes")
        wait_for(lambda: fetch(gw, "/") == (200, b"two"), 15,
                 "the new svc.test answer applied")
        wait_for(lambda: tcp_fetch(tport) == (200, b"two"), 15,
                 "the new db.test answer applied")
        after = st.stats()
        # Nothing read the bad file: no bootstrap reload failed, no rebuild
        # failed, and the admin still listens where the running file says.
        assert after["server.reloads_failed"] == 0
        assert after["server.reloads_ok"] == 0
        assert "server.last_reload_error" not in after
        assert after["server.rebuilds_failed"] == 0
        assert after["server.rebuilds_ok"] > before["server.rebuilds_ok"]
        assert "reload failed" not in st.log()

        # SIGHUP does read it: refused, counted once, nothing changes.
        st.signal(signal.SIGHUP)
        wait_for(lambda: st.stats()["server.reloads_failed"] == 1, 10,
                 "the failed reload")
        assert "reload failed, keeping the running configuration" in st.log()
        assert fetch(gw, "/") == (200, b"two")
        assert tcp_fetch(tport) == (200, b"two")
        s = st.stats()
        assert s["server.reloads_ok"] == 0
        assert s["server.rebuilds_failed"] == 0

        # While it stays invalid, DNS changes still apply.
        dns.records["svc.test"] = ["127.0.0.1"]
        wait_for(lambda: fetch(gw, "/") == (200, b"one"), 15,
                 "svc.test back on the first address")
        assert st.stats()["server.reloads_failed"] == 1
    finally:
        dns.stop()
