"""strait as an HBONE client for HTTP routes: requests an HTTP route sends
to an endpoint of Istio's ambient mesh (label istio.io/dataplane-mode:
ambient) go over an HTTP/2 CONNECT tunnel to the endpoint's port 15008
(one tunnel per upstream connection, the tunnels pooled on one mTLS
connection), HTTP/1.1 and HTTP/2 alike. strait's own HBONE server (on a
127.x.y.z:15008 of the test's) is the far end and counts the tunnels."""
import socket
import subprocess
import threading

import h2.config
import h2.connection
import h2.events
import pytest

from conftest import free_port, responder, wait_for
from test_hbone import ca_strait
from test_hbone_client import loopback_ip

NS = "istio-system"


def resources(port, ip, up_port, protocol, sa="strait"):
    """An HTTP Gateway server on 127.0.0.1:port routing to amb.example.test
    (one ambient endpoint ip:up_port of service account sa, port
    protocol), and an HBONE server on ip:15008."""
    return f"""apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {{name: edge, namespace: {NS}}}
spec:
  selector: {{}}
  servers:
  - port: {{number: {port}, name: http, protocol: HTTP}}
    bind: 127.0.0.1
    hosts: ["*"]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: to-ambient, namespace: {NS}}}
spec:
  hosts: ["*"]
  gateways: [edge]
  http:
  - route: [{{destination: {{host: amb.example.test, port: {{number: 80}}}}}}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: ambient, namespace: {NS}}}
spec:
  hosts: [amb.example.test]
  location: MESH_INTERNAL
  resolution: STATIC
  ports: [{{number: 80, name: web, protocol: {protocol}}}]
  endpoints:
  - address: {ip}
    ports: {{web: {up_port}}}
    serviceAccount: {sa}
    labels: {{istio.io/dataplane-mode: ambient}}
---
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {{name: hbone, namespace: {NS}}}
spec:
  selector: {{}}
  servers:
  - port: {{number: 15008, name: hbone, protocol: HBONE}}
    bind: {ip}
    hosts: ["*/*.example.test"]
    tls: {{mode: ISTIO_MUTUAL}}
"""


def curl(port, path, *extra):
    p = subprocess.run(["curl", "-sS", "--max-time", "20", *extra,
                        f"http://127.0.0.1:{port}{path}"],
                       capture_output=True, timeout=30)
    return p.returncode, p.stdout, p.stderr


class H2cBackend:
    """A plaintext HTTP/2 (prior knowledge) backend on ip: each request is
    answered 200 with "h2 PATH". Counts the connections it accepted."""

    def __init__(self, ip):
        self.sock = socket.socket()
        self.sock.bind((ip, 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
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
            self.accepted += 1
            t = threading.Thread(target=self.serve, args=(c,), daemon=True)
            self.threads.append(t)
            t.start()

    def serve(self, s):
        h = h2.connection.H2Connection(h2.config.H2Configuration(
            client_side=False, header_encoding="utf-8"))
        h.initiate_connection()
        s.sendall(h.data_to_send())
        s.settimeout(0.5)
        paths = {}
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
                        paths[ev.stream_id] = dict(ev.headers)[":path"]
                    elif isinstance(ev, h2.events.DataReceived):
                        h.acknowledge_received_data(ev.flow_controlled_length,
                                                    ev.stream_id)
                    elif isinstance(ev, h2.events.StreamEnded):
                        body = f"h2 {paths.pop(ev.stream_id)}".encode()
                        h.send_headers(ev.stream_id, [
                            (":status", "200"),
                            ("content-length", str(len(body)))])
                        h.send_data(ev.stream_id, body, end_stream=True)
                out = h.data_to_send()
                if out:
                    s.sendall(out)
        except OSError:
            pass
        finally:
            s.close()

    def stop(self):
        self.stop_ev.set()
        self.t.join(5)
        self.sock.close()
        for t in self.threads:
            t.join(5)


def test_http1_route_to_ambient_endpoint_goes_over_hbone(
        strait_factory, upstream_factory, tmp_path):
    """HTTP/1.1 requests to an ambient endpoint: each upstream connection
    is one tunnel through strait's HBONE server, all on one HBONE
    connection; keep-alive reuses a tunnel; the backend sees the request
    as sent."""
    st, conf = ca_strait(strait_factory, tmp_path, workers=1)
    ip = loopback_ip()
    # /held/ requests are answered once three are in: they must come on
    # three upstream connections at once.
    held_in = threading.Barrier(3, timeout=20)

    def answer(head):
        line = head.split(b"\r\n")[0]
        if line.startswith(b"GET /held/"):
            held_in.wait()
        return line
    up = upstream_factory(responder(answer), host=ip)
    port = free_port()
    (conf / "r.yaml").write_text(resources(port, ip, up.port, "HTTP"))
    st.start()
    hb = f"gateway-{ip}-15008"
    wait_for(lambda: "HBONE to" in st.log(), 10, "the HBONE listener")
    # One at a time: one upstream connection, one tunnel, reused.
    for i in range(3):
        rc, out, err = curl(port, f"/one/{i}")
        assert rc == 0, err
        assert out == f"GET /one/{i} HTTP/1.1".encode()
    stats = st.stats()
    assert stats[f"listener.{hb}.hbone.tunnels_opened"] == 1
    assert stats[f"listener.{hb}.downstream_cx_total"] == 1
    assert up.conns == 1
    # Three at once (each waits for its answer): three upstream
    # connections, three tunnels, still one HBONE connection.
    held = []
    for i in range(3):
        s = socket.create_connection(("127.0.0.1", port), timeout=20)
        held.append(s)
    for i, s in enumerate(held):
        s.sendall(f"GET /held/{i} HTTP/1.1\r\nhost: a\r\n"
                  "connection: close\r\n\r\n".encode())
    for i, s in enumerate(held):
        got = b""
        while True:
            d = s.recv(65536)
            if not d:
                break
            got += d
        s.close()
        assert got.startswith(b"HTTP/1.1 200"), got
        assert got.endswith(f"GET /held/{i} HTTP/1.1".encode()), got
    # The idle tunnel took one, two more were opened.
    stats = st.stats()
    assert stats[f"listener.{hb}.hbone.tunnels_opened"] == 3
    assert stats[f"listener.{hb}.downstream_cx_total"] == 1
    assert up.conns == 3


def test_http2_route_to_ambient_endpoint_goes_over_hbone(strait_factory,
                                                         tmp_path):
    """A port of protocol HTTP2: HTTP/2 with prior knowledge inside the
    tunnel; curl's requests (HTTP/1.1 and HTTP/2 downstream) share one
    upstream connection, so one tunnel."""
    st, conf = ca_strait(strait_factory, tmp_path, workers=1)
    ip = loopback_ip()
    up = H2cBackend(ip)
    port = free_port()
    try:
        (conf / "r.yaml").write_text(resources(port, ip, up.port, "HTTP2"))
        st.start()
        hb = f"gateway-{ip}-15008"
        wait_for(lambda: "HBONE to" in st.log(), 10, "the HBONE listener")
        for i in range(3):
            rc, out, err = curl(port, f"/p/{i}")
            assert rc == 0, err
            assert out == f"h2 /p/{i}".encode()
        rc, out, err = curl(port, "/p/prior", "--http2-prior-knowledge")
        assert rc == 0, err
        assert out == b"h2 /p/prior"
        stats = st.stats()
        assert stats[f"listener.{hb}.hbone.tunnels_opened"] == 1
        assert stats[f"listener.{hb}.downstream_cx_total"] == 1
        assert up.accepted == 1
    finally:
        up.stop()


@pytest.mark.parametrize("protocol", ["HTTP", "HTTP2"])
def test_http_route_to_ambient_endpoint_of_other_identity_is_refused(
        strait_factory, upstream_factory, tmp_path, protocol):
    """An ambient endpoint whose server presents another identity than the
    endpoint's service account: 503 with flag UF, nothing reaches the
    backend, and no request ever goes in the clear (HTTP/1.1 and HTTP/2
    upstreams)."""
    st, conf = ca_strait(strait_factory, tmp_path, workers=1)
    ip = loopback_ip()
    seen = []
    up = upstream_factory(responder(lambda head: seen.append(head) or b"x"),
                          host=ip)
    port = free_port()
    (conf / "r.yaml").write_text(resources(port, ip, up.port, protocol,
                                           sa="someone-else"))
    st.start()
    wait_for(lambda: "HBONE to" in st.log(), 10, "the HBONE listener")
    rc, out, err = curl(port, "/never", "-o", "/dev/null", "-w",
                        "%{http_code}")
    assert rc == 0, err
    assert out == b"503"
    wait_for(lambda: "/never" in st.log(), 10, "the request logged")
    line = [l for l in st.log().splitlines() if "/never" in l][-1]
    assert "UF" in line.split(" flags=")[1].split()[0], line
    if protocol == "HTTP":
        assert "details=upstream_hbone_tls_failed" in line, line
    assert seen == [] and up.conns == 0


def test_http_route_to_ambient_endpoint_without_mesh_certificate_is_refused(
        strait_factory, upstream_factory, tmp_path):
    """Without a mesh certificate (no CA) requests to an ambient endpoint
    are 503 UF: never sent to the workload in the clear."""
    conf = tmp_path / "conf.d"
    conf.mkdir()
    st = strait_factory(extra=f"config: {{dir: \"{conf}\", debounce: 10ms}}\n",
                        workers=1)
    seen = []
    up = upstream_factory(responder(lambda head: seen.append(head) or b"x"))
    port = free_port()
    res = resources(port, "127.0.0.1", up.port, "HTTP")
    # Only the HTTP side: an HBONE server needs the mesh certificate.
    (conf / "r.yaml").write_text(res.split("---\napiVersion: networking."
                                           "istio.io/v1\nkind: Gateway\n"
                                           "metadata: {name: hbone")[0])
    st.start()
    wait_for(lambda: "need this node's mesh certificate" in st.log(), 10,
             "the cluster's refusal logged")
    rc, out, err = curl(port, "/clear", "-o", "/dev/null", "-w",
                        "%{http_code}")
    assert rc == 0, err
    assert out == b"503"
    wait_for(lambda: "/clear" in st.log(), 10, "the request logged")
    line = [l for l in st.log().splitlines() if "/clear" in l][-1]
    assert "UF" in line.split(" flags=")[1].split()[0], line
    assert seen == [] and up.conns == 0
