"""ServiceEntries with resolution DNS: names resolved on the control
thread through evdns against a DNS server the test runs on loopback,
refreshed at the TTL, the last answer kept when a refresh fails, names no
longer used dropped."""
import os
import socket
import struct
import threading

from conftest import free_port, responder, http_gateway, wait_for


class DNSServer:
    """A UDP DNS server on 127.0.0.1 answering A queries from records
    (name -> list of IPv4 addresses) with ttl; names it does not know get
    NXDOMAIN; when failing is set it answers SERVFAIL."""

    def __init__(self, ttl=1):
        self.records = {}
        self.ttl = ttl
        self.failing = False
        self.queries = []
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.stopped = threading.Event()
        self.t = threading.Thread(target=self.loop, daemon=True)
        self.t.start()

    def loop(self):
        while not self.stopped.is_set():
            try:
                q, peer = self.sock.recvfrom(4096)
            except socket.timeout:
                continue
            except OSError:
                return
            reply = self.answer(q)
            if reply is not None:
                self.sock.sendto(reply, peer)

    def answer(self, q):
        if len(q) < 12:
            return None
        qid, = struct.unpack("!H", q[:2])
        labels, i = [], 12
        while i < len(q) and q[i] != 0:
            n = q[i]
            labels.append(q[i + 1:i + 1 + n].decode().lower())
            i += 1 + n
        qtype, = struct.unpack("!H", q[i + 1:i + 3])
        question = q[12:i + 5]
        name = ".".join(labels)
        self.queries.append((name, qtype))
        if self.failing:
            return struct.pack("!HHHHHH", qid, 0x8182, 1, 0, 0, 0) + question
        if name not in self.records:
            return struct.pack("!HHHHHH", qid, 0x8183, 1, 0, 0, 0) + question
        ips = self.records[name] if qtype == 1 else []
        out = struct.pack("!HHHHHH", qid, 0x8180, 1, len(ips), 0, 0) + question
        for ip in ips:
            out += struct.pack("!HHHIH", 0xC00C, 1, 1, self.ttl, 4)
            out += socket.inet_aton(ip)
        return out

    def stop(self):
        self.stopped.set()
        self.t.join(5)
        self.sock.close()


def named(name):
    return responder(lambda head: name.encode())


def fetch(port, path):
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(f"GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n"
                  .encode())
        data = b""
        while True:
            d = s.recv(65536)
            if not d:
                break
            data += d
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split(b" ")[1]), body


RESOURCES = """{gateway}apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: svc, namespace: default}}
spec:
  hosts: [svc.test]
  location: MESH_EXTERNAL
  resolution: DNS
  ports: [{{number: {port}, name: http, protocol: HTTP}}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: named, namespace: default}}
spec:
  hosts: [api.named.example]
  resolution: DNS
  ports: [{{number: {port}, name: http, protocol: HTTP}}]
  endpoints: [{{address: ep.test}}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: vs, namespace: default}}
spec:
  hosts: ["*"]
  gateways: [gw]
  http:
  - match: [{{uri: {{prefix: /ep}}}}]
    route: [{{destination: {{host: api.named.example}}}}]
  - route: [{{destination: {{host: svc.test}}}}]
"""


def test_dns_service_entry_follows_the_records(strait_factory, tmp_path,
                                               upstream_factory):
    one = upstream_factory(named("one"))
    two = upstream_factory(named("two"), host="127.0.0.2", port=one.port)
    dns = DNSServer(ttl=1)
    try:
        dns.records = {"svc.test": ["127.0.0.1"], "ep.test": ["127.0.0.2"]}
        conf = tmp_path / "conf.d"
        conf.mkdir()
        gw = free_port()
        (conf / "r.yaml").write_text(RESOURCES.format(gateway=http_gateway(gw), gw=gw, port=one.port))
        st = strait_factory(extra=(
            f"config: {{dir: \"{conf}\", debounce: 10ms}}\n"
            f"dns: {{nameservers: [\"127.0.0.1:{dns.port}\"], "
            f"minRefresh: 100ms, timeout: 500ms}}\n")).start()
        # The host itself is resolved when the entry has no endpoints; a
        # named endpoint is resolved too.
        wait_for(lambda: fetch(gw, "/") == (200, b"one"), 15, "svc.test")
        wait_for(lambda: fetch(gw, "/ep") == (200, b"two"), 15, "ep.test")
        # A new answer is picked up once the TTL (1 s) runs out.
        dns.records["svc.test"] = ["127.0.0.2"]
        wait_for(lambda: fetch(gw, "/") == (200, b"two"), 15, "the new record")
        s = st.stats()
        assert s["dns.changes"] >= 3 and s["dns.names"] == 2
        # Refreshes that fail keep the last addresses.
        dns.failing = True
        before = st.stats()["dns.failures"]
        wait_for(lambda: st.stats()["dns.failures"] >= before + 2, 15,
                 "failed refreshes")
        assert fetch(gw, "/") == (200, b"two")
        assert "dns: svc.test" in st.log()
        dns.failing = False
        # A name the resources no longer use leaves the cache.
        text = RESOURCES.format(gateway=http_gateway(gw), gw=gw, port=one.port)
        text = text.replace("[{address: ep.test}]", "[{address: 127.0.0.1}]")
        tmp = conf / ".r.tmp"
        tmp.write_text(text)
        os.replace(tmp, conf / "r.yaml")
        wait_for(lambda: fetch(gw, "/ep") == (200, b"one"), 15, "the IP endpoint")
        wait_for(lambda: st.stats()["dns.names"] == 1, 15, "ep.test dropped")
        prom = st.get("/stats/prometheus")[1]
        assert 'strait_dns_queries_total{result="sent"}' in prom
    finally:
        dns.stop()


def _resolv_strait(strait_factory, tmp_path, resolv, port):
    conf = tmp_path / "conf.d"
    conf.mkdir(exist_ok=True)
    gw = free_port()
    (conf / "r.yaml").write_text(RESOURCES.format(gateway=http_gateway(gw),
                                                  gw=gw, port=port))
    st = strait_factory(extra=(
        f"config: {{dir: \"{conf}\", debounce: 10ms}}\n"
        f"dns: {{resolvConf: \"{resolv}\", minRefresh: 100ms, "
        f"timeout: 500ms}}\n"))
    return st, gw


def test_resolv_conf_nameserver_is_used(strait_factory, tmp_path,
                                        upstream_factory):
    """dns.resolvConf is read when dns.nameservers is empty: its
    nameserver (evdns takes IP:port there) answers for the DNS entries."""
    one = upstream_factory(named("one"))
    dns = DNSServer(ttl=1)
    try:
        dns.records = {"svc.test": ["127.0.0.1"], "ep.test": ["127.0.0.1"]}
        resolv = tmp_path / "resolv.conf"
        resolv.write_text(f"nameserver 127.0.0.1:{dns.port}\n")
        st, gw = _resolv_strait(strait_factory, tmp_path, resolv, one.port)
        st.start()
        wait_for(lambda: fetch(gw, "/") == (200, b"one"), 15, "svc.test")
        assert ("svc.test", 1) in dns.queries
    finally:
        dns.stopped.set()
        dns.sock.close()


def test_empty_or_missing_resolv_conf_warns_and_starts(strait_factory,
                                                       tmp_path,
                                                       upstream_factory):
    """A container image often ships an empty /etc/resolv.conf: strait
    starts, says what it uses instead (127.0.0.1:53, as glibc does), and
    serves what needs no name; it used to stop with `dns: out of
    memory`. The same for a file that does not exist."""
    one = upstream_factory(named("one"))
    for name, text in (("empty", ""), ("missing", None)):
        d = tmp_path / name
        d.mkdir()
        resolv = d / "resolv.conf"
        if text is not None:
            resolv.write_text(text)
        st, gw = _resolv_strait(strait_factory, d, resolv, one.port)
        st.start()
        why = "names no nameserver" if text is not None else "does not exist"
        wait_for(lambda: f"dns: {resolv} {why}; using the nameserver at "
                 "127.0.0.1:53" in st.log(), 10, "the warning")
        assert st.get("/healthz/ready")[0] == 200
        st.stop()


def test_unreadable_resolv_conf_is_an_error(strait_factory, tmp_path):
    """A resolvConf that cannot be read (here a directory) stops the start
    with a message naming it, not `out of memory`."""
    st, _ = _resolv_strait(strait_factory, tmp_path, tmp_path, 80)
    st.start(wait=False)
    assert st.proc.wait(timeout=20) != 0
    wait_for(lambda: f"dns: cannot read {tmp_path}" in st.log(), 10,
             "the error")
