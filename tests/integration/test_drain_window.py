"""Issue 12 item 14: with drainWindow, SIGTERM keeps the listeners
accepting for the window (readiness says DRAINING); every request, on a
connection opened before or during the window, is answered with
Connection: close, and an HTTP/2 connection gets GOAWAY; then the
listeners close and strait exits once the connections are gone. Without
it (the default) new connections are refused at once, as before."""
import signal
import socket
import subprocess

from conftest import free_port, responder, wait_for


def resources(port, up):
    return f"""apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {{name: gw, namespace: default}}
spec:
  selector: {{}}
  servers:
  - port: {{number: {port}, name: http, protocol: HTTP}}
    bind: 127.0.0.1
    hosts: ["*"]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: up, namespace: default}}
spec:
  hosts: [up.internal]
  resolution: STATIC
  ports: [{{number: {up}, name: http, protocol: HTTP}}]
  endpoints: [{{address: 127.0.0.1}}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: web, namespace: default}}
spec:
  hosts: ["*"]
  gateways: [gw]
  http:
  - route: [{{destination: {{host: up.internal}}}}]
"""


def start(strait_factory, upstream_factory, tmp_path, extra):
    up = upstream_factory(responder(lambda head: b"up"))
    conf = tmp_path / "conf.d"
    conf.mkdir()
    port = free_port()
    (conf / "r.yaml").write_text(resources(port, up.port))
    st = strait_factory(
        extra=f"config: {{dir: \"{conf}\"}}\n{extra}").start()
    return st, port


def request(sock):
    """One keep-alive GET on sock; (status line, headers lowercased)."""
    sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(4096)
        assert chunk, data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = {}
    for l in lines[1:]:
        k, _, v = l.partition(":")
        headers[k.strip().lower()] = v.strip().lower()
    n = int(headers.get("content-length", "0"))
    while len(body) < n:
        body += sock.recv(4096)
    return lines[0], headers


def refused(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
        return False
    except (ConnectionRefusedError, ConnectionResetError):
        # A SYN that lands in the accept queue while the listener closes is
        # answered with a reset: it was never accepted either.
        return True


def test_drain_window_keeps_accepting_and_says_close(strait_factory,
                                                     upstream_factory,
                                                     tmp_path):
    st, port = start(strait_factory, upstream_factory, tmp_path,
                     "drainTimeout: 30s\ndrainWindow: 5s\n")
    wait_for(lambda: not refused(port), 10, "the Gateway listener")
    old = socket.create_connection(("127.0.0.1", port), timeout=10)
    status, hdrs = request(old)
    assert status.endswith("200 OK") and hdrs.get("connection") != "close"
    # An HTTP/2 (h2c prior knowledge) connection opened before the drain.
    import h2.connection
    import h2.events
    h2s = socket.create_connection(("127.0.0.1", port), timeout=10)
    h2c = h2.connection.H2Connection()
    h2c.initiate_connection()
    h2s.sendall(h2c.data_to_send())
    st.signal(signal.SIGTERM)
    wait_for(lambda: "drain: accepting for 5000 ms more" in st.log(), 10,
             "the drain window to start")
    assert st.get("/healthz/ready")[0] == 503
    # A connection made during the window is served, and told to close.
    new = socket.create_connection(("127.0.0.1", port), timeout=10)
    status, hdrs = request(new)
    assert status.endswith("200 OK") and hdrs.get("connection") == "close"
    new.close()
    # The connection from before: its next response says close too.
    status, hdrs = request(old)
    assert status.endswith("200 OK") and hdrs.get("connection") == "close"
    old.close()
    # HTTP/2: a GOAWAY arrives.
    goaway = False
    while not goaway:
        data = h2s.recv(65535)
        assert data, "the HTTP/2 connection closed without GOAWAY"
        for ev in h2c.receive_data(data):
            goaway = goaway or isinstance(ev, h2.events.ConnectionTerminated)
    h2s.close()
    # The window ends: listeners close, strait exits.
    wait_for(lambda: "drain: window over" in st.log(), 15,
             "the window to end")
    wait_for(lambda: refused(port), 10, "new connections refused")
    assert st.proc.wait(timeout=30) == 0


def test_without_window_new_connections_are_refused_at_once(
        strait_factory, upstream_factory, tmp_path):
    st, port = start(strait_factory, upstream_factory, tmp_path,
                     "drainTimeout: 30s\n")
    wait_for(lambda: not refused(port), 10, "the Gateway listener")
    held = socket.create_connection(("127.0.0.1", port), timeout=10)
    request(held)
    st.signal(signal.SIGTERM)
    wait_for(lambda: refused(port), 10, "new connections refused")
    assert "drain: accepting for" not in st.log()
    held.close()
    assert st.proc.wait(timeout=30) == 0


def test_window_must_be_shorter_than_the_deadline(tmp_path):
    from conftest import STRAIT
    f = tmp_path / "s.yaml"
    f.write_text("drainTimeout: 5s\ndrainWindow: 5s\n")
    r = subprocess.run([STRAIT, "check", "-c", str(f)], capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 1
    assert "drainWindow: must be shorter than drainTimeout" in r.stderr
