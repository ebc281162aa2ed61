"""strait as an HBONE server (Istio ambient's port 15008): a Gateway
server of protocol HBONE with tls mode ISTIO_MUTUAL takes HTTP/2 CONNECT
over mTLS with the node's SPIFFE certificate (ALPN h2, no SNI, client
certificates verified against the mesh root). Each CONNECT stream is a
tunnel to a registry service (host:port) or one of its endpoints
(ip:port), answered 200 only after the upstream connect succeeded, then
relayed with HTTP/2 flow control. The client here is python3-h2 over ssl,
with certificates strait's CA issued."""
import hashlib
import socket
import ssl
import subprocess
import threading

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.settings
from hyperframe.frame import DataFrame, Frame, GoAwayFrame

from conftest import STRAIT, free_port, wait_for

SVC = "echo.example.test"
SVC_PORT = 9080


def ca_strait(strait_factory, tmp_path, hbone_yaml="", workers=2):
    """A strait with the embedded CA, a config directory, and
    certificates its CA issued for default/client and default/other."""
    conf = tmp_path / "conf.d"
    conf.mkdir()
    ca = tmp_path / "ca"
    st = strait_factory(extra=(
        f"config: {{dir: \"{conf}\", debounce: 10ms}}\n"
        f"ca: {{enabled: true, dir: \"{ca}\", "
        f"address: \"127.0.0.1:{free_port()}\"}}\n{hbone_yaml}"),
        workers=workers)
    r = subprocess.run([STRAIT, "ca", "init", "-c", str(st.config)],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    for sa in ("client", "other", "backend"):
        r = subprocess.run([STRAIT, "ca", "issue", "--namespace", "default",
                            "--service-account", sa, "--ttl", "1h", "--out",
                            str(tmp_path / sa), "-c", str(st.config)],
                           capture_output=True, text=True, timeout=30)
        assert r.returncode == 0, r.stderr
    return st, conf


def resources(port, echo_port, dead_port, extra=""):
    return f"""apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {{name: hbone, namespace: istio-system}}
spec:
  selector: {{}}
  servers:
  - port: {{number: {port}, name: hbone, protocol: HBONE}}
    bind: 127.0.0.1
    hosts: ["*/*.example.test"]
    tls: {{mode: ISTIO_MUTUAL}}
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: echo, namespace: default}}
spec:
  hosts: [{SVC}]
  location: MESH_INTERNAL
  resolution: STATIC
  ports: [{{number: {SVC_PORT}, name: tcp, protocol: TCP}}]
  endpoints: [{{address: 127.0.0.1, ports: {{tcp: {echo_port}}}}}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: dead, namespace: default}}
spec:
  hosts: [dead.example.test]
  location: MESH_INTERNAL
  resolution: STATIC
  ports: [{{number: 80, name: tcp, protocol: TCP}}]
  endpoints: [{{address: 127.0.0.1, ports: {{tcp: {dead_port}}}}}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: hidden, namespace: default}}
spec:
  hosts: [hidden.other.test]
  location: MESH_INTERNAL
  resolution: STATIC
  ports: [{{number: 80, name: tcp, protocol: TCP}}]
  endpoints: [{{address: 127.0.0.1, ports: {{tcp: {echo_port}}}}}]
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {{name: only-client, namespace: istio-system}}
spec:
  rules:
  - from: [{{source: {{principals: [cluster.local/ns/default/sa/client]}}}}]
{extra}"""


def closed_port():
    """A loopback port nothing listens on."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def full_listener():
    """A listener whose accept queue is full, so new SYNs go unanswered
    and a connect to it hangs; with the connections that fill it."""
    full = socket.socket()
    full.bind(("127.0.0.1", 0))
    full.listen(0)
    fillers = []
    for _ in range(2):
        f = socket.socket()
        f.setblocking(False)
        f.connect_ex(full.getsockname())
        fillers.append(f)
    return full, fillers


class Hbone:
    """An HBONE client connection: TLS with ALPN h2 and a client
    certificate, then HTTP/2 with python3-h2. Header validation is off on
    the way out (h2 wants :scheme and :path, which CONNECT must not
    carry) so requests go as written."""

    def __init__(self, port, tmp_path, identity="client", cert=True):
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False
        ctx.load_verify_locations(str(tmp_path / "ca" / "root-cert.pem"))
        if cert:
            ctx.load_cert_chain(str(tmp_path / identity / "cert-chain.pem"),
                                str(tmp_path / identity / "key.pem"))
        ctx.set_alpn_protocols(["h2"])
        raw = socket.create_connection(("127.0.0.1", port), timeout=20)
        # No SNI, as ztunnel sends none.
        self.s = ctx.wrap_socket(raw)
        self.peer = self.s.getpeercert()
        self.alpn = self.s.selected_alpn_protocol()
        self.h = h2.connection.H2Connection(h2.config.H2Configuration(
            client_side=True, header_encoding=None,
            validate_outbound_headers=False, normalize_outbound_headers=False))
        self.h.initiate_connection()
        self.flush()
        self.events = []
        self.data = {}
        self.ended = set()
        self.resets = {}
        self.responses = {}
        self.remote_settings = None
        self.closed = False

    def flush(self):
        out = self.h.data_to_send()
        if out:
            self.s.sendall(out)

    def connect(self, authority, extra=(), end=False):
        sid = self.h.get_next_available_stream_id()
        hdrs = [(b":method", b"CONNECT"), (b":authority", authority.encode())]
        hdrs += [(k.encode(), v.encode()) for k, v in extra]
        self.h.send_headers(sid, hdrs, end_stream=end)
        self.flush()
        self.data[sid] = bytearray()
        return sid

    def pump(self):
        """Reads once and handles what came; False at the end."""
        d = self.s.recv(65536)
        if not d:
            self.closed = True
            return False
        for ev in self.h.receive_data(d):
            self.events.append(ev)
            if isinstance(ev, h2.events.ResponseReceived):
                self.responses[ev.stream_id] = ev.headers
            elif isinstance(ev, h2.events.DataReceived):
                self.data.setdefault(ev.stream_id, bytearray()).extend(ev.data)
                self.h.acknowledge_received_data(ev.flow_controlled_length,
                                                 ev.stream_id)
            elif isinstance(ev, h2.events.StreamEnded):
                self.ended.add(ev.stream_id)
            elif isinstance(ev, h2.events.StreamReset):
                self.resets[ev.stream_id] = ev.error_code
            elif isinstance(ev, h2.events.RemoteSettingsChanged):
                self.remote_settings = {k: v.new_value for k, v in
                                        ev.changed_settings.items()}
            elif isinstance(ev, h2.events.ConnectionTerminated):
                self.closed = True
        self.flush()
        return True

    def until(self, cond, what):
        while not cond():
            if not self.pump():
                raise AssertionError(f"connection closed waiting for {what}")

    def status(self, sid):
        self.until(lambda: sid in self.responses or sid in self.resets,
                   f"the answer on stream {sid}")
        hdrs = self.responses.get(sid)
        return int(dict(hdrs)[b":status"]) if hdrs else None

    def send(self, sid, data, end=False):
        """Sends data as flow control allows, reading (and so taking
        window updates and echoed bytes) while the window is shut."""
        view = memoryview(data)
        while len(view) > 0:
            n = min(self.h.local_flow_control_window(sid), len(view),
                    self.h.max_outbound_frame_size)
            if n == 0:
                self.pump()
                continue
            self.h.send_data(sid, bytes(view[:n]))
            self.flush()
            view = view[n:]
        if end:
            self.h.end_stream(sid)
            self.flush()

    def close(self):
        try:
            self.s.close()
        except OSError:
            pass


class RawFrames:
    """HTTP/2 frames read straight off an Hbone connection's socket."""

    def __init__(self, c):
        self.s = c.s
        self.buf = b""

    def next(self):
        while True:
            if len(self.buf) >= 9:
                f, n = Frame.parse_frame_header(memoryview(self.buf[:9]))
                if len(self.buf) >= 9 + n:
                    f.parse_body(memoryview(self.buf[9:9 + n]))
                    self.buf = self.buf[9 + n:]
                    return f
            d = self.s.recv(65536)
            if not d:
                raise AssertionError("connection closed")
            self.buf += d

    def until(self, cond):
        while True:
            f = self.next()
            if cond(f):
                return f


def echo(c):
    """Echoes until the client's FIN, then closes."""
    while True:
        d = c.recv(65536)
        if not d:
            return
        c.sendall(d)


def start(strait_factory, upstream_factory, tmp_path, hbone_yaml="",
          extra=""):
    st, conf = ca_strait(strait_factory, tmp_path, hbone_yaml)
    up = upstream_factory(echo)
    port = free_port()
    (conf / "r.yaml").write_text(resources(port, up.port, closed_port(),
                                           extra))
    st.start()
    wait_for(lambda: "HBONE to" in st.log(), 10, "the HBONE listener")
    return st, port, up


def stat(st, port, key):
    return st.stats().get(f"listener.gateway-127.0.0.1-{port}.{key}", 0)


def tunnel_lines(st):
    return [l for l in st.log().splitlines() if "hbone_tunnel" in l]


def test_hbone_connect_to_workload_and_service(strait_factory,
                                               upstream_factory, tmp_path):
    """CONNECT to an endpoint address and to a service host:port: 200
    (exactly ":status: 200", nothing else), then bytes both ways; the
    server's identity is the node's SPIFFE ID, its ALPN h2, its SETTINGS
    the documented defaults; the access log has the request's Forwarded,
    baggage and traceparent as ztunnel reads them."""
    st, port, up = start(strait_factory, upstream_factory, tmp_path)
    c = Hbone(port, tmp_path)
    try:
        assert c.alpn == "h2"
        sans = [v for k, v in c.peer["subjectAltName"] if k == "URI"]
        assert sans == ["spiffe://cluster.local/ns/istio-system/sa/strait"]
        tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
        a = c.connect(f"127.0.0.1:{up.port}", [
            ("forwarded", "for=\"10.9.8.7:41234\""),
            ("baggage", "k8s.cluster.name=c1,k8s.namespace.name=team,"
                        "k8s.deployment.name=web,service.name=web,"
                        "service.version=v1"),
            ("traceparent", tp)])
        assert c.status(a) == 200
        assert c.responses[a] == [(b":status", b"200")]
        c.until(lambda: c.remote_settings is not None, "SETTINGS")
        assert c.remote_settings[h2.settings.SettingCodes
                                 .MAX_CONCURRENT_STREAMS] == 100
        assert c.remote_settings[h2.settings.SettingCodes
                                 .INITIAL_WINDOW_SIZE] == 256 * 1024
        # ztunnel's frame size.
        assert c.remote_settings[h2.settings.SettingCodes
                                 .MAX_FRAME_SIZE] == 1024 * 1024
        c.send(a, b"hello workload")
        c.until(lambda: bytes(c.data[a]) == b"hello workload", "the echo")
        b = c.connect(f"{SVC}:{SVC_PORT}", [
            ("forwarded", f"for=\"10.9.8.7:41235\";host={SVC}")])
        assert c.status(b) == 200
        c.send(b, b"hello service", end=True)
        c.until(lambda: b in c.ended, "the end of the service tunnel")
        assert bytes(c.data[b]) == b"hello service"
        c.send(a, b"", end=True)
        c.until(lambda: a in c.ended, "the end of the workload tunnel")
    finally:
        c.close()
    wait_for(lambda: len(tunnel_lines(st)) >= 2, 10, "two tunnel log lines")
    la = [l for l in tunnel_lines(st) if f"authority=127.0.0.1:{up.port}" in l][0]
    lb = [l for l in tunnel_lines(st) if f"authority={SVC}:" in l][0]
    for want in (f"authority=127.0.0.1:{up.port}", "status=200",
                 "forwarded_for=10.9.8.7:41234", "source_cluster=c1",
                 "source_namespace=team", "source_workload=web",
                 "source_service=web",
                 "trace_id=0af7651916cd43dd8448eb211c80319c",
                 "peer_uri_san=spiffe://cluster.local/ns/default/sa/client",
                 "bytes_in=14", "bytes_out=14"):
        assert want in la, la
    for want in (f"authority={SVC}:{SVC_PORT}", f"forwarded_host={SVC}",
                 f"upstream=127.0.0.1:{up.port}", f"cluster={SVC}||{SVC_PORT}"):
        assert want in lb, lb
    assert stat(st, port, "hbone.tunnels_opened") == 2
    wait_for(lambda: stat(st, port, "hbone.tunnels_active") == 0, 10,
             "no tunnel open")
    code, body, _ = st.get("/stats/prometheus")
    assert (f'strait_listener_hbone_tunnels_total{{listener="gateway-127.0.0.1-'
            f'{port}"}} 2') in body


def test_hbone_refusals(strait_factory, upstream_factory, tmp_path):
    """What ztunnel answers: 400 for a bad or unknown authority (a host
    the server's hosts do not cover, an address that is no endpoint),
    401 when AuthorizationPolicy denies the peer's principal, 503 when
    the upstream connect fails (never a 200 first); each counted by
    reason. A client without a certificate fails the handshake. A
    VirtualService bound to the server is logged as unused."""
    st, port, up = start(strait_factory, upstream_factory, tmp_path,
                         extra="""---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: unused, namespace: istio-system}
spec:
  hosts: ["*"]
  gateways: [hbone]
  tcp:
  - route: [{destination: {host: echo.example.test}}]
""")
    assert ("VirtualService istio-system/unused: bound to the HBONE server "
            "of Gateway istio-system/hbone") in st.log()
    c = Hbone(port, tmp_path)
    try:
        for auth in ("hidden.other.test:80", f"{SVC}:1", "127.0.0.2:80",
                     "no-port", "[::1:80"):
            assert c.status(c.connect(auth)) == 400, auth
        # A character HTTP/2 forbids in :authority: nghttp2 resets the
        # stream itself (PROTOCOL_ERROR) before it is a request.
        bad = c.connect("bad host:80")
        c.until(lambda: bad in c.resets, "the malformed authority reset")
        assert c.resets[bad] == h2.errors.ErrorCodes.PROTOCOL_ERROR
        sid = c.connect("dead.example.test:80")
        assert c.status(sid) == 503
        # No 200 came first: the only answer on the stream is the 503.
        heads = [e for e in c.events if isinstance(
            e, h2.events.ResponseReceived) and e.stream_id == sid]
        assert [h.headers for h in heads] == [[(b":status", b"503")]]
        c.until(lambda: sid in c.ended, "the end of the refused stream")
    finally:
        c.close()
    other = Hbone(port, tmp_path, identity="other")
    try:
        assert other.status(other.connect(f"{SVC}:{SVC_PORT}")) == 401
    finally:
        other.close()
    try:
        bare = Hbone(port, tmp_path, cert=False)
        got = bare.status(bare.connect(f"{SVC}:{SVC_PORT}"))
    except (ssl.SSLError, OSError, AssertionError):
        got = None
    assert got is None
    wait_for(lambda: stat(st, port, "hbone.refused_denied") == 1, 10,
             "the denial counted")
    assert stat(st, port, "hbone.refused_bad_request") == 2  # no-port, [::1
    assert stat(st, port, "hbone.refused_unknown_destination") == 3
    assert stat(st, port, "hbone.refused_connect_failed") == 1
    assert stat(st, port, "hbone.tunnels_opened") == 0
    wait_for(lambda: "RBAC_ACCESS_DENIED[none]" in st.log()
             and "end=connect_failed" in st.log(), 10, "the refusals logged")
    wait_for(lambda: "client_certificate_refused" in st.log()
             or "tls_handshake_" in st.log(), 10, "the refused handshake")
    code, body, _ = st.get("/stats/prometheus")
    assert (f'strait_listener_hbone_refused_total{{listener="gateway-127.0.0.1-'
            f'{port}",reason="unknown_destination"}} 3') in body


def test_hbone_many_tunnels_half_close_and_limit(strait_factory,
                                                 upstream_factory, tmp_path):
    """maxTunnelsPerConnection tunnels run at once on one connection,
    each independent. END_STREAM reaches the upstream as a FIN after the
    bytes, and the upstream's FIN comes back as END_STREAM. One tunnel
    past the limit, from a client that acknowledged the SETTINGS, is a
    connection error as nghttp2 treats it (GOAWAY PROTOCOL_ERROR), and
    counted."""
    st, port, up = start(strait_factory, upstream_factory, tmp_path,
                         "hbone: {maxTunnelsPerConnection: 4}\n")
    c = Hbone(port, tmp_path)
    try:
        c.until(lambda: c.remote_settings is not None, "SETTINGS")
        assert c.remote_settings[
            h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS] == 4
        sids = [c.connect(f"{SVC}:{SVC_PORT}") for _ in range(4)]
        for s in sids:
            assert c.status(s) == 200
        for i, s in enumerate(sids):
            c.send(s, f"tunnel {i} ".encode() * 100)
        for i, s in enumerate(reversed(sids)):
            c.send(s, b"", end=True)
        c.until(lambda: all(s in c.ended for s in sids), "every tunnel ended")
        for i, s in enumerate(sids):
            assert bytes(c.data[s]) == f"tunnel {i} ".encode() * 100
        assert up.conns == 4
    finally:
        c.close()
    c = Hbone(port, tmp_path)
    try:
        sids = [c.connect(f"{SVC}:{SVC_PORT}") for _ in range(4)]
        for s in sids:
            assert c.status(s) == 200
        # One past the limit: h2 keeps to the server's SETTINGS, so tell
        # it otherwise to send the fifth as a client that does not.
        c.h.remote_settings[h2.settings.SettingCodes
                            .MAX_CONCURRENT_STREAMS] = 100
        c.h.remote_settings.acknowledge()
        c.connect(f"{SVC}:{SVC_PORT}")
        c.until(lambda: any(isinstance(e, h2.events.ConnectionTerminated)
                            for e in c.events), "the GOAWAY")
        goaway = [e for e in c.events
                  if isinstance(e, h2.events.ConnectionTerminated)][0]
        assert goaway.error_code == h2.errors.ErrorCodes.PROTOCOL_ERROR
    finally:
        c.close()
    assert stat(st, port, "hbone.refused_too_many_tunnels") == 1


def test_hbone_upstream_fin_and_reset(strait_factory, upstream_factory,
                                      tmp_path):
    """An upstream that answers and closes ends the stream (END_STREAM
    after its bytes) while the client's side stays open; one that resets
    its connection makes strait reset the stream with CONNECT_ERROR."""
    def hello_close(c):
        c.sendall(b"bye")

    def reset(c):
        c.recv(10)
        c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                     b"\x01\x00\x00\x00\x00\x00\x00\x00")

    st, conf = ca_strait(strait_factory, tmp_path)
    hello = upstream_factory(hello_close)
    rst = upstream_factory(reset)
    port = free_port()
    (conf / "r.yaml").write_text(resources(port, hello.port, rst.port))
    st.start()
    wait_for(lambda: "HBONE to" in st.log(), 10, "the HBONE listener")
    c = Hbone(port, tmp_path)
    try:
        a = c.connect(f"127.0.0.1:{hello.port}")
        assert c.status(a) == 200
        c.until(lambda: a in c.ended, "the upstream's FIN")
        assert bytes(c.data[a]) == b"bye"
        assert a not in c.resets
        b = c.connect(f"127.0.0.1:{rst.port}")
        assert c.status(b) == 200
        c.send(b, b"x")
        c.until(lambda: b in c.resets, "the reset")
        assert c.resets[b] == h2.errors.ErrorCodes.CONNECT_ERROR
    finally:
        c.close()
    wait_for(lambda: "end=upstream_reset" in st.log(), 10, "the reset logged")


def test_hbone_large_transfer_flow_control(strait_factory, upstream_factory,
                                           tmp_path):
    """64 MiB each way through one tunnel, checked by hash: flow control
    carries it without strait holding more than the tunnel buffer."""
    st, port, up = start(strait_factory, upstream_factory, tmp_path)
    c = Hbone(port, tmp_path)
    # The client's own receive window (64 KiB by default) would pace the
    # echo at one window per round of this single-threaded client, which
    # reads only while its send window is shut; 4 MiB, a sixteenth of the
    # transfer, keeps both directions flow controlled.
    c.h.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 1 << 22})
    c.h.increment_flow_control_window(1 << 22)
    c.flush()
    size = 64 << 20
    blob = hashlib.sha256(b"seed").digest() * (size // 32)
    try:
        sid = c.connect(f"{SVC}:{SVC_PORT}")
        assert c.status(sid) == 200
        c.send(sid, blob, end=True)
        c.until(lambda: sid in c.ended, "the whole echo")
        got = bytes(c.data[sid])
    finally:
        c.close()
    assert len(got) == size
    assert hashlib.sha256(got).hexdigest() == hashlib.sha256(blob).hexdigest()
    wait_for(lambda: stat(st, port, "upstream_cx_tx_bytes_total") == size, 10,
             "every byte counted upstream")


def test_hbone_tunnel_buffer_one_past(strait_factory, upstream_factory,
                                      tmp_path):
    """The stream window is tunnelBuffer: a client may send exactly that
    much before strait gives window back, and one byte more is a flow
    control error (RST_STREAM FLOW_CONTROL_ERROR); the connection and its
    other tunnels go on."""
    full, fillers = full_listener()
    st, conf = ca_strait(strait_factory, tmp_path,
                         "hbone: {tunnelBuffer: 16KiB}\n")
    up = upstream_factory(echo)
    port = free_port()
    (conf / "r.yaml").write_text(resources(port, up.port,
                                           full.getsockname()[1]))
    st.start()
    wait_for(lambda: "HBONE to" in st.log(), 10, "the HBONE listener")
    c = Hbone(port, tmp_path)
    try:
        c.until(lambda: c.remote_settings is not None, "SETTINGS")
        assert c.remote_settings[
            h2.settings.SettingCodes.INITIAL_WINDOW_SIZE] == 16384
        ok = c.connect(f"{SVC}:{SVC_PORT}")
        assert c.status(ok) == 200
        # A tunnel whose upstream connect hangs (the SYN is dropped), so
        # nothing it holds can leave and no window comes back: exactly
        # the window is taken, one byte more is refused (raw frames: h2
        # itself would not send past the window).
        sid = c.connect("dead.example.test:80")
        c.s.sendall(DataFrame(sid, data=b"a" * 16384).serialize())
        c.s.sendall(DataFrame(sid, data=b"b").serialize())
        c.until(lambda: sid in c.resets, "the flow control error")
        assert c.resets[sid] == h2.errors.ErrorCodes.FLOW_CONTROL_ERROR
        # The other tunnel is untouched.
        c.send(ok, b"still here", end=True)
        c.until(lambda: ok in c.ended, "the other tunnel's echo")
        assert bytes(c.data[ok]) == b"still here"
    finally:
        c.close()
        for f in fillers:
            f.close()
        full.close()


def test_hbone_connect_timeout_and_idle_timeout(strait_factory,
                                                upstream_factory, tmp_path):
    """connectTimeout: an upstream that never completes the handshake (a
    full accept queue drops the SYN) is answered 503 once it is past;
    idleTimeout: a tunnel with no bytes that long is reset (CANCEL)."""
    full, fillers = full_listener()
    st, conf = ca_strait(strait_factory, tmp_path,
                         "hbone: {connectTimeout: 300ms, idleTimeout: 500ms}\n")
    up = upstream_factory(echo)
    port = free_port()
    (conf / "r.yaml").write_text(resources(port, up.port,
                                           full.getsockname()[1]))
    st.start()
    wait_for(lambda: "HBONE to" in st.log(), 10, "the HBONE listener")
    c = Hbone(port, tmp_path)
    try:
        slow = c.connect("dead.example.test:80")
        assert c.status(slow) == 503
        idle = c.connect(f"{SVC}:{SVC_PORT}")
        assert c.status(idle) == 200
        c.until(lambda: idle in c.resets, "the idle reset")
        assert c.resets[idle] == h2.errors.ErrorCodes.CANCEL
    finally:
        c.close()
        for f in fillers:
            f.close()
        full.close()
    wait_for(lambda: "end=connect_timeout" in st.log()
             and "end=idle_timeout" in st.log(), 10, "both ends logged")
    assert stat(st, port, "upstream_cx_connect_timeout") == 1


def test_hbone_check_refuses_other_tls_modes(tmp_path):
    """An HBONE server is the mesh's mTLS and nothing else: strait check
    refuses another tls mode, certificates, and an HBONE server sharing
    its port."""
    bad = tmp_path / "bad.yaml"
    bad.write_text("""apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: g, namespace: istio-system}
spec:
  selector: {}
  servers:
  - port: {number: 15008, name: hbone, protocol: HBONE}
    hosts: ["*/*"]
    tls: {mode: SIMPLE, credentialName: x}
  - port: {number: 15009, name: hbone2, protocol: HBONE}
    hosts: ["*/*"]
""")
    r = subprocess.run([STRAIT, "check", str(bad)], capture_output=True,
                       text=True, timeout=30)
    assert r.returncode != 0
    out = r.stdout + r.stderr
    assert out.count("an HBONE server needs tls mode ISTIO_MUTUAL") == 2, out


def test_hbone_reload_drains_old_connections(strait_factory, upstream_factory,
                                             tmp_path):
    """A new snapshot rebuilds the listener: its old connections get
    GOAWAY (NO_ERROR, naming the last stream), their open tunnels carry
    on to their end, and a new connection reaches what the new resources
    add."""
    go = threading.Event()

    def late(c):
        c.recv(10)
        go.wait(20)
        c.sendall(b"late")

    st, conf = ca_strait(strait_factory, tmp_path)
    up = upstream_factory(late)
    port = free_port()
    (conf / "r.yaml").write_text(resources(port, up.port, closed_port()))
    st.start()
    wait_for(lambda: "HBONE to" in st.log(), 10, "the HBONE listener")
    c = Hbone(port, tmp_path)
    try:
        sid = c.connect(f"{SVC}:{SVC_PORT}")
        assert c.status(sid) == 200
        c.send(sid, b"x")
        (conf / "more.yaml").write_text(f"""apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: more, namespace: default}}
spec:
  hosts: [more.example.test]
  location: MESH_INTERNAL
  resolution: STATIC
  ports: [{{number: 81, name: tcp, protocol: TCP}}]
  endpoints: [{{address: 127.0.0.1, ports: {{tcp: {up.port}}}}}]
""")
        # python3-h2 closes its side on GOAWAY, so the frames after it
        # are read raw.
        frames = RawFrames(c)
        goaway = frames.until(lambda f: isinstance(f, GoAwayFrame))
        assert goaway.error_code == 0  # NO_ERROR
        assert goaway.last_stream_id == sid
        # The tunnel opened before goes on: the upstream's bytes and FIN
        # still come through.
        go.set()
        data = b""
        while True:
            f = frames.until(lambda f: isinstance(f, DataFrame)
                             and f.stream_id == sid)
            data += f.data
            if "END_STREAM" in f.flags:
                break
        assert data == b"late"
    finally:
        go.set()
        c.close()
    n = Hbone(port, tmp_path)
    try:
        s2 = n.connect("more.example.test:81")
        assert n.status(s2) == 200
        n.send(s2, b"new")
        n.until(lambda: s2 in n.ended, "the new service's answer")
        assert bytes(n.data[s2]) == b"late"
    finally:
        n.close()


def test_hbone_access_log_file(strait_factory, upstream_factory, tmp_path):
    """With log.accessLogFile, tunnel lines go where TCP sessions go."""
    path = tmp_path / "access.log"
    st, port, up = start(strait_factory, upstream_factory, tmp_path,
                         f"log: {{accessLogFile: \"{path}\"}}\n")
    c = Hbone(port, tmp_path)
    try:
        sid = c.connect(f"{SVC}:{SVC_PORT}")
        assert c.status(sid) == 200
        c.send(sid, b"x", end=True)
        c.until(lambda: sid in c.ended, "the echo")
    finally:
        c.close()
    wait_for(lambda: path.exists() and "hbone_tunnel" in path.read_text(), 10,
             "the tunnel line in the access log file")
    assert "hbone_tunnel" not in st.log()


def test_hbone_service_to_ambient_endpoint_uses_its_hbone_port(
        strait_factory, upstream_factory, tmp_path):
    """strait as the east-west gateway of double HBONE: a CONNECT to a
    service host:port whose endpoint is in the ambient mesh (label
    istio.io/dataplane-mode: ambient) goes to that endpoint's port 15008,
    where its ztunnel takes the inner tunnel; the bytes go untouched. An
    address authority still goes to the port it names."""
    from test_hbone_client import loopback_ip
    st, conf = ca_strait(strait_factory, tmp_path)
    ip = loopback_ip()
    ztunnel = upstream_factory(echo, host=ip, port=15008)
    app = upstream_factory(echo, host=ip)
    port = free_port()
    (conf / "r.yaml").write_text(resources(port, app.port, closed_port())
                                 + f"""---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: amb, namespace: default}}
spec:
  hosts: [amb.example.test]
  location: MESH_INTERNAL
  resolution: STATIC
  ports: [{{number: 80, name: tcp, protocol: TCP}}]
  endpoints:
  - address: {ip}
    ports: {{tcp: {app.port}}}
    labels: {{istio.io/dataplane-mode: ambient}}
""")
    st.start()
    wait_for(lambda: "HBONE to" in st.log(), 10, "the HBONE listener")
    c = Hbone(port, tmp_path)
    try:
        sid = c.connect("amb.example.test:80")
        assert c.status(sid) == 200
        c.send(sid, b"inner tls bytes", end=True)
        c.until(lambda: sid in c.ended, "the echo")
        assert bytes(c.data[sid]) == b"inner tls bytes"
        assert ztunnel.conns == 1 and app.conns == 0
        direct = c.connect(f"{ip}:{app.port}")
        assert c.status(direct) == 200
        c.send(direct, b"x", end=True)
        c.until(lambda: direct in c.ended, "the direct echo")
        assert app.conns == 1
    finally:
        c.close()
    wait_for(lambda: f"upstream={ip}:15008" in st.log(), 10,
             "the tunnel to the HBONE port logged")


def test_hbone_tunnel_memory_budget_one_past(strait_factory, upstream_factory,
                                             tmp_path):
    """Issue 28: tunnels held up to two tunnelBuffers each with no bound
    for the process. hbone.tunnelMemory is that bound: with 1 MiB and
    256 KiB buffers two tunnels fit, the third CONNECT is answered 503
    (counted in hbone.refused_overload), and once one closes its bytes
    are free for the next."""
    st, port, up = start(strait_factory, upstream_factory, tmp_path,
                         "hbone: {tunnelBuffer: 256KiB, tunnelMemory: 1MiB}\n")
    c = Hbone(port, tmp_path)
    try:
        a, b = c.connect(f"{SVC}:{SVC_PORT}"), c.connect(f"{SVC}:{SVC_PORT}")
        assert c.status(a) == 200 and c.status(b) == 200
        assert c.status(c.connect(f"{SVC}:{SVC_PORT}")) == 503
        assert stat(st, port, "hbone.refused_overload") == 1
        c.send(a, b"bye", end=True)
        c.until(lambda: a in c.ended, "the first tunnel's end")
        # The tunnel's bytes go back once strait has freed it.
        wait_for(lambda: stat(st, port, "hbone.tunnels_active") == 1, 10,
                 "the first tunnel freed")
        d = c.connect(f"{SVC}:{SVC_PORT}")
        assert c.status(d) == 200
        c.send(d, b"ping")
        c.until(lambda: bytes(c.data[d]) == b"ping", "the echo")
    finally:
        c.close()


def test_hbone_refused_while_memory_actions_are_on(strait_factory,
                                                   upstream_factory,
                                                   tmp_path):
    """Issue 28: new tunnels kept being accepted while the overload
    memory actions were on. On a connection accepted before, a CONNECT
    is now answered 503 while they are on (a limit below what strait
    uses turns them all on at the reload), and served again once a
    reload without the limit turns them off."""
    st, port, up = start(strait_factory, upstream_factory, tmp_path)
    c = Hbone(port, tmp_path)
    try:
        first = c.connect(f"{SVC}:{SVC_PORT}")
        assert c.status(first) == 200
        text = st.config.read_text()
        st.write_config("", raw="overload: {memoryLimit: 1MiB}\n" + text)
        assert st.get("/reload", method="POST")[0] == 200
        code, body, _ = st.get("/healthz/ready")
        assert "OVERLOADED:" in body, body
        assert c.status(c.connect(f"{SVC}:{SVC_PORT}")) == 503
        assert stat(st, port, "hbone.refused_overload") == 1
        # The tunnel opened before still carries bytes.
        c.send(first, b"still here")
        c.until(lambda: bytes(c.data[first]) == b"still here", "the echo")
        st.write_config("", raw=text)
        assert st.get("/reload", method="POST")[0] == 200
        assert "OVERLOADED:" not in st.get("/healthz/ready")[1]
        assert c.status(c.connect(f"{SVC}:{SVC_PORT}")) == 200
    finally:
        c.close()
