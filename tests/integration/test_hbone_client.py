"""strait as an HBONE client: TCP routes to endpoints of Istio's ambient
mesh (label istio.io/dataplane-mode: ambient) go as HTTP/2 CONNECT tunnels
to the endpoint's address, port 15008, over mTLS with the node's SPIFFE
certificate, verified against the endpoint's identity; one pooled HTTP/2
connection per (address, identity) carries many tunnels. The HBONE
servers here listen on 127.x.y.z:15008 addresses of their own, on
loopback."""
import errno
import random
import re
import socket
import ssl
import threading

import h2.config
import h2.connection
import h2.events

from conftest import free_port, wait_for
from test_hbone import ca_strait

PEER_RE = re.compile(rb"00-[0-9a-f]{32}-[0-9a-f]{16}-00")


def loopback_ip():
    """A 127.x.y.z address of this test's own, with 15008 free on it."""
    for _ in range(50):
        ip = f"127.{random.randint(20, 250)}.{random.randint(1, 250)}." \
             f"{random.randint(1, 250)}"
        s = socket.socket()
        try:
            s.bind((ip, 15008))
            return ip
        except OSError:
            continue
        finally:
            s.close()
    raise AssertionError("no free 127.x.y.z:15008")


class H2ConnectServer:
    """A python3-h2 HBONE server: TLS with a certificate strait's CA
    issued, client certificates required, ALPN h2. Records each TLS
    connection and each CONNECT's header block as sent, answers 200 and
    echoes each stream."""

    def __init__(self, ip, tmp_path, identity="backend", status=200):
        self.status = status
        self.closed = 0
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(str(tmp_path / identity / "cert-chain.pem"),
                            str(tmp_path / identity / "key.pem"))
        ctx.load_verify_locations(str(tmp_path / "ca" / "root-cert.pem"))
        ctx.verify_mode = ssl.CERT_REQUIRED
        ctx.set_alpn_protocols(["h2"])
        self.ctx = ctx
        self.sock = socket.socket()
        self.sock.bind((ip, 15008))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.conns = 0
        self.peers = []
        self.requests = []
        self.data = []  # the first DATA of each stream
        self.stop_ev = threading.Event()
        self.threads = []
        self.t = threading.Thread(target=self.loop, daemon=True)
        self.t.start()

    def loop(self):
        while not self.stop_ev.is_set():
            try:
                c, _ = self.sock.accept()
            except (socket.timeout, OSError):
                continue
            t = threading.Thread(target=self.serve, args=(c,), daemon=True)
            self.threads.append(t)
            t.start()

    def serve(self, raw):
        try:
            s = self.ctx.wrap_socket(raw, server_side=True)
        except (ssl.SSLError, OSError):
            raw.close()
            return
        self.conns += 1
        self.peers.append([v for k, v in s.getpeercert()["subjectAltName"]
                           if k == "URI"])
        h = h2.connection.H2Connection(h2.config.H2Configuration(
            client_side=False, header_encoding=None,
            validate_inbound_headers=False))
        h.initiate_connection()
        s.sendall(h.data_to_send())
        s.settimeout(0.5)
        try:
            while not self.stop_ev.is_set():
                try:
                    d = s.recv(65536)
                except socket.timeout:
                    continue
                if not d:
                    return
                for ev in h.receive_data(d):
                    if isinstance(ev, h2.events.RequestReceived):
                        self.requests.append(ev.headers)
                        h.send_headers(ev.stream_id, [
                            (b":status", str(self.status).encode())],
                            end_stream=self.status != 200)
                    elif isinstance(ev, h2.events.DataReceived):
                        h.acknowledge_received_data(ev.flow_controlled_length,
                                                    ev.stream_id)
                        if ev.data:
                            if not any(i == ev.stream_id
                                       for i, _ in self.data):
                                self.data.append((ev.stream_id, ev.data))
                            h.send_data(ev.stream_id, ev.data)
                    elif isinstance(ev, h2.events.StreamEnded):
                        h.end_stream(ev.stream_id)
                out = h.data_to_send()
                if out:
                    s.sendall(out)
        except (ssl.SSLError, OSError):
            pass
        finally:
            self.closed += 1
            s.close()

    def stop(self):
        self.stop_ev.set()
        self.t.join(5)
        self.sock.close()
        for t in self.threads:
            t.join(5)


def gateway_to(port, host, ns="default"):
    return f"""apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {{name: edge, namespace: {ns}}}
spec:
  selector: {{}}
  servers:
  - port: {{number: {port}, name: tcp, protocol: TCP}}
    bind: 127.0.0.1
    hosts: ["*"]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: to-ambient, namespace: {ns}}}
spec:
  hosts: ["*"]
  gateways: [edge]
  tcp:
  - route: [{{destination: {{host: {host}, port: {{number: 80}}}}}}]
"""


def ambient_service(host, ip, target, sa, ns="default"):
    return f"""---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: ambient, namespace: {ns}}}
spec:
  hosts: [{host}]
  location: MESH_INTERNAL
  resolution: STATIC
  ports: [{{number: 80, name: tcp, protocol: TCP}}]
  endpoints:
  - address: {ip}
    ports: {{tcp: {target}}}
    serviceAccount: {sa}
    labels: {{istio.io/dataplane-mode: ambient}}
"""


def talk(port, msg):
    """msg sent and the write side closed; what comes back until strait
    closes, and the client's own address. A session strait refuses may be
    closed (or reset) before the client's shutdown or read: that is the
    end of what came back, not an error of the test."""
    with socket.create_connection(("127.0.0.1", port), timeout=20) as s:
        name = s.getsockname()
        out = b""
        try:
            s.sendall(msg)
            s.shutdown(socket.SHUT_WR)
            while True:
                d = s.recv(65536)
                if not d:
                    break
                out += d
        except (ConnectionResetError, BrokenPipeError) as e:
            del e
        except OSError as e:
            if e.errno != errno.ENOTCONN:
                raise
        return out, name


def test_hbone_client_headers_and_pooling(strait_factory, tmp_path):
    """The CONNECTs strait sends, byte for byte as ztunnel sends them
    (:authority podIP:port; baggage, forwarded, traceparent in that
    order), with its SPIFFE certificate; three sessions at once share one
    TLS connection."""
    st, conf = ca_strait(strait_factory, tmp_path, workers=1)
    ip = loopback_ip()
    srv = H2ConnectServer(ip, tmp_path)
    port = free_port()
    try:
        (conf / "r.yaml").write_text(
            gateway_to(port, "amb.example.test")
            + ambient_service("amb.example.test", ip, 9999, "backend"))
        st.start()
        wait_for(lambda: "listener gateway-127.0.0.1-" in st.log(), 10,
                 "the TCP listener")
        results = [None] * 3
        socks = []
        # Three sessions open at once: one pooled connection.
        for i in range(3):
            s = socket.create_connection(("127.0.0.1", port), timeout=20)
            s.sendall(f"hello {i}".encode())
            socks.append(s)
        for i, s in enumerate(socks):
            got = b""
            while len(got) < len(f"hello {i}"):
                d = s.recv(100)
                if not d:
                    break
                got += d
            results[i] = (got, s.getsockname())
        for s in socks:
            s.close()
        assert [r[0] for r in results] == [f"hello {i}".encode()
                                           for i in range(3)]
        assert srv.conns == 1
        assert srv.peers == [
            ["spiffe://cluster.local/ns/istio-system/sa/strait"]]
        assert len(srv.requests) == 3
        srcs = {f"{a}:{p}" for _, (a, p) in results}
        for hdrs in srv.requests:
            names = [k for k, _ in hdrs]
            assert names == [b":method", b":authority", b"baggage",
                             b"forwarded", b"traceparent"], hdrs
            d = dict(hdrs)
            assert d[b":method"] == b"CONNECT"
            assert d[b":authority"] == f"{ip}:9999".encode()
            assert d[b"baggage"] == b"k8s.namespace.name=istio-system"
            m = re.fullmatch(rb'for="([0-9.:]+)";host=amb\.example\.test',
                             d[b"forwarded"])
            assert m and m.group(1).decode() in srcs, d[b"forwarded"]
            assert PEER_RE.fullmatch(d[b"traceparent"]), d[b"traceparent"]
        # Each tunnel has a trace of its own.
        assert len({dict(h)[b"traceparent"] for h in srv.requests}) == 3
        wait_for(lambda: st.log().count("upstream_tls=hbone") >= 3, 10,
                 "three relayed sessions logged")
    finally:
        srv.stop()


def test_hbone_client_through_strait_server(strait_factory, upstream_factory,
                                            tmp_path):
    """strait to strait: TCP sessions to an ambient endpoint go through
    the HBONE server (the same node here, on its own 127.x.y.z:15008) to
    the backend; N sessions, one HBONE connection, N tunnels. An endpoint
    whose identity is another refuses the session (flag UF)."""
    from test_hbone import echo
    st, conf = ca_strait(strait_factory, tmp_path, workers=1)
    ip = loopback_ip()
    up = upstream_factory(echo, host=ip)
    port, port2 = free_port(), free_port()
    ns = "istio-system"
    (conf / "r.yaml").write_text(
        gateway_to(port, "amb.example.test", ns)
        + ambient_service("amb.example.test", ip, up.port, "strait", ns)
        + f"""---
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {{name: hbone, namespace: {ns}}}
spec:
  selector: {{}}
  servers:
  - port: {{number: 15008, name: hbone, protocol: HBONE}}
    bind: {ip}
    hosts: ["*/*.example.test"]
    tls: {{mode: ISTIO_MUTUAL}}
---
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {{name: edge2, namespace: {ns}}}
spec:
  selector: {{}}
  servers:
  - port: {{number: {port2}, name: tcp2, protocol: TCP}}
    bind: 127.0.0.1
    hosts: ["*"]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: to-wrong, namespace: {ns}}}
spec:
  hosts: ["*"]
  gateways: [edge2]
  tcp:
  - route: [{{destination: {{host: wrong.example.test, port: {{number: 80}}}}}}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: wrong, namespace: {ns}}}
spec:
  hosts: [wrong.example.test]
  location: MESH_INTERNAL
  resolution: STATIC
  ports: [{{number: 80, name: tcp, protocol: TCP}}]
  endpoints:
  - address: {ip}
    ports: {{tcp: {up.port}}}
    serviceAccount: someone-else
    labels: {{istio.io/dataplane-mode: ambient}}
""")
    st.start()
    hb = f"gateway-{ip}-15008"
    wait_for(lambda: "HBONE to" in st.log(), 10, "the HBONE listener")
    n = 5
    socks = []
    for i in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=20)
        s.sendall(f"ping {i}".encode())
        socks.append(s)
    for i, s in enumerate(socks):
        want = f"ping {i}".encode()
        got = b""
        while len(got) < len(want):
            d = s.recv(100)
            if not d:
                break
            got += d
        assert got == want
    stats = st.stats()
    assert stats[f"listener.{hb}.hbone.tunnels_opened"] == n
    assert stats[f"listener.{hb}.downstream_cx_total"] == 1
    for s in socks:
        s.close()
    # Another identity than the endpoint's: refused, never relayed.
    got, _ = talk(port2, b"x")
    assert got == b""
    wait_for(lambda: "end=upstream_hbone_tls_failed" in st.log()
             or "end=upstream_hbone_wrong_identity" in st.log(), 10,
             "the refused identity")


def test_hbone_client_refused_and_idle_release(strait_factory, tmp_path):
    """A CONNECT answered 503 ends the session before a byte is relayed
    (flag UF, end=upstream_hbone_status_503); a pooled connection with no
    tunnel left is closed after hbone.idleTimeout."""
    st, conf = ca_strait(strait_factory, tmp_path,
                         "hbone: {idleTimeout: 300ms}\n", workers=1)
    ip = loopback_ip()
    srv = H2ConnectServer(ip, tmp_path, status=503)
    port = free_port()
    try:
        (conf / "r.yaml").write_text(
            gateway_to(port, "amb.example.test")
            + ambient_service("amb.example.test", ip, 9999, "backend"))
        st.start()
        wait_for(lambda: "listener gateway-127.0.0.1-" in st.log(), 10,
                 "the TCP listener")
        got, _ = talk(port, b"never relayed")
        assert got == b""
        wait_for(lambda: "end=upstream_hbone_status_503" in st.log(), 10,
                 "the refusal logged")
        line = [l for l in st.log().splitlines()
                if "end=upstream_hbone_status_503" in l][0]
        assert "flags=UF" in line, line
        assert len(srv.requests) == 1
        # The connection it came over is released once idle.
        wait_for(lambda: srv.closed == 1, 10, "the idle connection closed")
        assert srv.conns == 1
    finally:
        srv.stop()
