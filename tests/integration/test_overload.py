"""Issue 17 item 6: overload protection. Connection limits (global, per
listener, per Gateway port) with the close and pause actions, counted
across workers and across reloads; the memory limit's actions (stop
accepting, disable keep-alive, shed requests with 503 OM) under a flood
of connections, shown on /stats and /healthz/ready, and their recovery.

Every wait is on a counter, a log line or a socket; none is a sleep."""
import os
import re
import select
import socket
import struct
import subprocess

from conftest import (STRAIT, connect, free_port, recv_exact, responder,
                      wait_for)
from httpd import clusters, http_listener


def tcp_listener(name, port, upstream, extra=""):
    return (f"  - name: {name}\n    address: \"127.0.0.1:{port}\"\n"
            f"    upstreams: [\"{upstream}\"]\n{extra}")


def echoed(c, data=b"ping"):
    c.sendall(data)
    return recv_exact(c, len(data)) == data


def closed_by_peer(c, timeout=10):
    """True once the peer closed c (EOF or reset), within timeout."""
    c.settimeout(timeout)
    try:
        return c.recv(1) == b""
    except ConnectionResetError:
        return True


def nothing_to_read(c):
    r, _, _ = select.select([c], [], [], 0)
    return not r


def active(st, name):
    return st.stats()[f"listener.{name}.downstream_cx_active"]


def test_listener_limit_close_action(strait_factory, upstream_factory):
    """maxConnections 2 over two workers: the third connection is
    accepted and closed at once (downstream_cx_overflow), and a new one
    is served once one of the first two has closed."""
    up = upstream_factory()
    port = free_port()
    st = strait_factory(
        tcp_listener("lim", port, up.addr, "    maxConnections: 2\n"),
        extra="limits: {action: close}\n").start()
    a, b = connect(port), connect(port)
    assert echoed(a) and echoed(b)
    c = connect(port)
    assert closed_by_peer(c)
    c.close()
    wait_for(lambda: st.stats()["listener.lim.downstream_cx_overflow"] == 1,
             5, "the overflow to be counted")
    s = st.stats()
    assert s["listener.lim.downstream_cx_total"] == 2
    assert s["server.downstream_cx_active"] == 2
    a.close()
    wait_for(lambda: st.stats()["server.downstream_cx_active"] == 1, 5,
             "the closed connection to give its slot back")
    d = connect(port)
    assert echoed(d)
    assert st.stats()["listener.lim.downstream_cx_overflow"] == 1
    b.close()
    d.close()
    assert "listener connection limit reached; closing new connections" \
        in st.log()


def test_listener_limit_pause_action(strait_factory, upstream_factory):
    """With the pause action the connection over the limit waits in the
    backlog, unserved, and is served once a slot is free."""
    up = upstream_factory()
    port = free_port()
    st = strait_factory(
        tcp_listener("lim", port, up.addr, "    maxConnections: 1\n"),
        workers=1).start()
    a = connect(port)
    assert echoed(a)
    b = connect(port)  # the kernel completes the handshake: backlog
    b.sendall(b"waiting")
    wait_for(lambda: st.stats()["listener.lim.downstream_cx_limit_paused"]
             >= 1, 5, "accepting to pause at the limit")
    assert nothing_to_read(b)
    s = st.stats()
    assert s["listener.lim.downstream_cx_total"] == 1
    assert s["listener.lim.downstream_cx_overflow"] == 0
    a.close()
    assert recv_exact(b, 7) == b"waiting"
    assert st.stats()["listener.lim.downstream_cx_total"] == 2
    b.close()
    assert "listener connection limit reached; not accepting until a " \
        "connection closes" in st.log()


def test_global_limit_spans_listeners(strait_factory, upstream_factory):
    """limits.maxConnections counts every listener together."""
    up = upstream_factory()
    p1, p2 = free_port(), free_port()
    st = strait_factory(
        tcp_listener("one", p1, up.addr) + tcp_listener("two", p2, up.addr),
        extra="limits: {maxConnections: 2, action: close}\n").start()
    a, b = connect(p1), connect(p2)
    assert echoed(a) and echoed(b)
    c = connect(p2)
    assert closed_by_peer(c)
    wait_for(lambda: st.stats()["listener.two.downstream_global_cx_overflow"]
             == 1, 5, "the global overflow to be counted")
    assert st.stats()["server.max_connections"] == 2
    for x in (a, b, c):
        x.close()


def test_retired_generation_still_counts(strait_factory, upstream_factory):
    """A reload that replaces the listener leaves its open connections on
    the old generation: they keep their slots, so the new generation
    still refuses the connection over the limit until they close."""
    up = upstream_factory()
    port = free_port()
    extra = "limits: {action: close}\n"
    st = strait_factory(
        tcp_listener("lim", port, up.addr, "    maxConnections: 2\n"),
        extra=extra).start()
    a, b = connect(port), connect(port)
    assert echoed(a) and echoed(b)
    # A changed listener (new idle timeout): a new generation on the same
    # sockets, the old one retired with a and b.
    st.write_config(tcp_listener("lim", port, up.addr,
                                 "    maxConnections: 2\n"
                                 "    idleTimeout: 2h\n"), extra)
    code, body, _ = st.get("/reload", method="POST")
    assert code == 200, body
    assert "listener lim: changed" in st.log()
    c = connect(port)
    assert closed_by_peer(c)
    wait_for(lambda: st.stats()["listener.lim.downstream_cx_overflow"] == 1,
             5, "the overflow to be counted")
    assert echoed(a) and echoed(b)
    a.close()
    wait_for(lambda: st.stats()["server.downstream_cx_active"] == 1, 5,
             "the old generation's connection to give its slot back")
    d = connect(port)
    assert echoed(d)
    for x in (b, c, d):
        x.close()


def test_gateway_port_limit(strait_factory, tmp_path):
    """A Gateway listener takes its port's limit from limits.ports."""
    conf = tmp_path / "conf.d"
    conf.mkdir()
    port = free_port()
    (conf / "gw.yaml").write_text(f"""apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {{name: gw, namespace: default}}
spec:
  selector: {{}}
  servers:
  - port: {{number: {port}, name: http, protocol: HTTP}}
    bind: 127.0.0.1
    hosts: ["*"]
""")
    st = strait_factory(
        "", extra=(f"config: {{dir: {conf}}}\n"
                   "limits:\n  action: close\n"
                   "  maxConnectionsPerListener: 100\n"
                   f"  ports: [{{port: {port}, maxConnections: 1}}]\n"))
    st.start()
    suffix = ".downstream_cx_overflow"
    wait_for(lambda: any(k.endswith(suffix) for k in st.stats()), 10,
             "the Gateway listener")
    names = [k[len("listener."):-len(suffix)] for k in st.stats()
             if k.endswith(suffix)]
    assert len(names) == 1, names
    name = names[0]
    a = connect(port)
    a.sendall(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")
    assert a.recv(12).startswith(b"HTTP/1.1 404")
    b = connect(port)
    assert closed_by_peer(b)
    wait_for(lambda: st.stats()[f"listener.{name}.downstream_cx_overflow"]
             == 1, 5, "the Gateway listener's overflow")
    a.close()
    b.close()


def check(tmp_path, text):
    f = tmp_path / "s.yaml"
    f.write_text(text)
    return subprocess.run([STRAIT, "check", "-c", str(f)],
                          capture_output=True, text=True, timeout=20)


def test_check_refuses_bad_limits(tmp_path):
    r = check(tmp_path, "overload: {memoryLimit: 64MiB, "
              "stopAcceptingConnections: 96, disableKeepalive: 95}\n")
    assert r.returncode == 1
    assert "overload: thresholds must not decrease: " \
        "stopAcceptingConnections (96) <= disableKeepalive (95)" in r.stderr
    r = check(tmp_path, "overload: {memoryLimit: 1000}\n")
    assert r.returncode == 1
    assert "overload.memoryLimit: 1000 bytes is below 1MiB" in r.stderr
    r = check(tmp_path, "overload: {hysteresis: 20, "
              "stopAcceptingConnections: 20}\n")
    assert r.returncode == 1
    assert "overload.hysteresis: must be below stopAcceptingConnections" \
        in r.stderr
    r = check(tmp_path, "limits: {action: drop}\n")
    assert r.returncode == 1
    assert "limits.action: unknown value 'drop' (one of: pause, close)" \
        in r.stderr
    r = check(tmp_path, "limits: {ports: [{port: 80, maxConnections: 1}, "
              "{port: 80, maxConnections: 2}]}\n")
    assert r.returncode == 1
    assert "port 80 is already limited by limits.ports[0]" in r.stderr
    r = check(tmp_path, "limits: {maxConnections: -1}\n")
    assert r.returncode == 1
    assert "limits.maxConnections" in r.stderr
    r = check(tmp_path, "limits: {maxConnections: 1000, action: close}\n"
              "overload: {memoryLimit: 512MiB}\n")
    assert r.returncode == 0, r.stderr


# -- the memory limit --------------------------------------------------------

# Bytes of a request head that never ends: a held read buffer. Large, so
# that few connections reach the limit: what the allocator keeps of a
# closed connection's small objects (a few KiB each, more under ASan) then
# stays well inside the hysteresis margin.
PAD = 256 * 1024


def rss_bytes(pid):
    with open(f"/proc/{pid}/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def http_get(c, path="/"):
    c.sendall(f"GET {path} HTTP/1.1\r\nhost: x\r\n\r\n".encode())
    head = b""
    while b"\r\n\r\n" not in head:
        d = c.recv(65536)
        if not d:
            return None, head
        head += d
    head, _, rest = head.partition(b"\r\n\r\n")
    n = int(re.search(rb"(?i)content-length: (\d+)", head).group(1))
    body = rest + recv_exact(c, n - len(rest))
    return head.decode(), body


def overloaded(st):
    code, body, _ = st.get("/healthz/ready")
    assert code == 200, body
    return "OVERLOADED:" in body and body


def test_memory_limit_sheds_and_recovers(strait_factory, upstream_factory):
    """A memory limit set just above what strait uses, then a flood of
    connections that each hold a read buffer (a request head that never
    ends): strait stops accepting, closes keep-alive connections after
    their request and answers new requests 503 with flag OM, says so on
    /healthz/ready and /stats, stays up and keeps the connections it
    accepted; once the flood is gone the actions end, the client that
    waited in the backlog is served, and so are new ones."""
    up = upstream_factory(responder(lambda head: b"ok"))
    port = free_port()
    # Read buffers of 512 KiB: above the allocators' mmap thresholds, so
    # what a closed connection held goes back to the kernel at once, with
    # glibc's malloc and with AddressSanitizer's (its quarantine off).
    lst = http_listener("web", port,
                        http={"requestHeadersTimeout": "120s",
                              "maxRequestHeadersSize": "512KiB"})
    extra = clusters(backend=[up.addr])
    env = dict(os.environ)
    env["ASAN_OPTIONS"] = ":".join(
        x for x in (os.environ.get("ASAN_OPTIONS"), "quarantine_size_mb=0")
        if x)
    st = strait_factory(lst, extra=extra).start(env=env)
    kept = [connect(port) for _ in range(4)]
    for c in kept:
        head, body = http_get(c)
        assert head.startswith("HTTP/1.1 200") and body == b"ok"
    # The limit: the actions start 6 MiB above what strait holds now and
    # end once it is back under 4 MiB above (hysteresis in points of the
    # limit: the same 2 MiB margin whatever the base, sanitizers or not).
    mib = 1024 * 1024
    base = rss_bytes(st.proc.pid)
    trigger = base + 6 * mib
    limit = trigger * 100 // 90
    hyst = max(1, 90 * 2 * mib // trigger)
    overload = ("overload: {memoryLimit: %d, checkInterval: 20ms, "
                "stopAcceptingConnections: 90, disableKeepalive: 90, "
                "stopAcceptingRequests: 90, hysteresis: %d}\n"
                % (limit, hyst))
    st.write_config(lst, extra + overload)
    code, body, _ = st.get("/reload", method="POST")
    assert code == 200 and body.startswith("reloaded"), body
    assert st.stats()["overload.memory_limit_bytes"] == limit
    assert not overloaded(st)
    flood = []
    pad = b"GET / HTTP/1.1\r\nhost: x\r\nx-pad: " + b"a" * PAD
    try:
        while not overloaded(st):
            assert len(flood) < 400, "no overload after 400 connections"
            for _ in range(5):
                c = connect(port)
                c.sendall(pad)
                flood.append(c)
            # One batch at a time: accepted and read, and measured by a
            # memory check, before the next. Only the batch that sets the
            # actions off can be left in the backlog, to be read once
            # strait accepts again.
            wait_for(lambda: overloaded(st) or st.stats()
                     ["listener.web.downstream_cx_active"]
                     >= len(kept) + len(flood), 10, "the batch accepted")
            held = rss_bytes(st.proc.pid)
            wait_for(lambda: overloaded(st) or st.stats()
                     ["overload.memory_used_bytes"] >= held - PAD, 10,
                     "a memory check after the batch")
        body = overloaded(st)
        assert ("OVERLOADED: stop_accepting_connections "
                "disable_http_keepalive stop_accepting_requests") in body
        assert st.proc.poll() is None
        # A new client waits in the backlog: it is not accepted.
        waiting = connect(port)
        waiting.sendall(b"GET /late HTTP/1.1\r\nhost: x\r\n\r\n")
        wait_for(lambda: st.stats()
                 ["listener.web.downstream_cx_overload_paused"] >= 1, 10,
                 "accepting to pause")
        assert nothing_to_read(waiting)
        # A connection accepted before is answered: 503 OM, then closed.
        head, body = http_get(kept[0], "/shed")
        assert head.startswith("HTTP/1.1 503"), head
        assert "connection: close" in head.lower(), head
        assert body == b"overloaded\n"
        assert closed_by_peer(kept[0])
        wait_for(lambda: re.search(r"http_request .*path=/shed .*flags=OM",
                                   st.log())
                 or re.search(r"http_request .*flags=OM.*path=/shed",
                              st.log()), 10, "the OM access log line")
        s = st.stats()
        assert s["listener.web.http.downstream_rq_overload_close"] >= 1
        assert s["listener.web.http.downstream_cx_overload_disable_keepalive"] \
            >= 1
        for a in ("stop_accepting_connections", "disable_http_keepalive",
                  "stop_accepting_requests"):
            assert s[f"overload.{a}.active"] == 1
            assert s[f"overload.{a}.activations"] == 1
        prom = st.get("/stats/prometheus")[1]
        assert 'strait_overload_action_active{action=' \
            '"stop_accepting_requests"} 1' in prom
        # The other accepted connections are still open.
        for c in kept[1:]:
            assert nothing_to_read(c)
    finally:
        # The attacker leaves with resets: the connections still waiting
        # in the backlog then carry no bytes for strait to read once it
        # accepts again (with FINs their heads would be read, and might
        # set the actions off again, as they should).
        for c in flood:
            c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                         struct.pack("ii", 1, 0))
            c.close()
    wait_for(lambda: not overloaded(st), 30, "the overload to end")
    s = st.stats()
    for a in ("stop_accepting_connections", "disable_http_keepalive",
              "stop_accepting_requests"):
        assert s[f"overload.{a}.active"] == 0
        assert s[f"overload.{a}.activations"] == 1
    assert "overload: stop_accepting_requests off" in st.log()
    # The client that waited is accepted and served now.
    waiting.settimeout(10)
    head = waiting.recv(65536)
    assert head.startswith(b"HTTP/1.1 200"), head
    waiting.close()
    for c in kept[1:]:
        head, body = http_get(c)
        assert head.startswith("HTTP/1.1 200") and body == b"ok"
        c.close()
    kept[0].close()
    assert st.proc.poll() is None


def test_every_kind_of_connection_gives_its_slot_back(
        strait_factory, upstream_factory, tmp_path):
    """On a port shared by HTTPS, PASSTHROUGH and terminated TLS servers
    the L4 listener takes the slot, and the connection gives it back
    wherever it ends: handed to the HTTP proxy (h2 and http/1.1),
    relayed untouched, or terminated and relayed. With a limit of 2,
    twelve connections one after another all succeed, the count returns
    to 0, and two held connections still make the third overflow."""
    from test_l4 import tls_talk
    from test_port_share import curl, shared_port

    def limited(listeners_yaml="", **kw):
        kw["extra"] = kw.get("extra", "") + (
            "limits: {maxConnectionsPerListener: 2, action: close}\n")
        return strait_factory(listeners_yaml, **kw)

    e = shared_port(limited, upstream_factory, tmp_path)
    for _ in range(3):
        assert curl(e, "app.example.test", "--http2") == (0, "app-v1", "2")
        assert curl(e, "app.example.test", "--http1.1") == \
            (0, "app-v1", "1.1")
        assert tls_talk(e.port, "db.example.test", cafile=e.db_crt) == \
            b"db:hello"
        assert tls_talk(e.port, "tcp.example.test", cafile=e.tcp_crt) == \
            b"plain:hello"
    wait_for(lambda: e.st.stats()["server.downstream_cx_active"] == 0, 10,
             "every slot given back")
    name = f"gateway-127.0.0.1-{e.port}"
    assert e.st.stats()[f"listener.{name}.downstream_cx_overflow"] == 0
    held = [connect(e.port), connect(e.port)]
    wait_for(lambda: e.st.stats()["server.downstream_cx_active"] == 2, 10,
             "two connections held")
    c = connect(e.port)
    assert closed_by_peer(c)
    wait_for(lambda: e.st.stats()[f"listener.{name}.downstream_cx_overflow"]
             == 1, 5, "the overflow")
    for x in held + [c]:
        x.close()


def test_http2_under_memory_actions(strait_factory, upstream_factory):
    """A memory limit below what strait uses turns every action on at the
    next check (a reload): an HTTP/2 connection accepted before gets 503
    with flag OM and a GOAWAY; a reload without the limit turns them off
    and a new connection is served."""
    import h2.connection

    up = upstream_factory(responder(lambda head: b"ok"))
    port = free_port()
    lst = http_listener("web", port)
    extra = clusters(backend=[up.addr])
    st = strait_factory(lst, extra=extra).start()
    s = connect(port)
    h2c = h2.connection.H2Connection()
    h2c.initiate_connection()
    s.sendall(h2c.data_to_send())
    # Accepted before the actions start (else it waits in the backlog).
    wait_for(lambda: st.stats()["listener.web.downstream_cx_active"] == 1,
             10, "the HTTP/2 connection to be accepted")
    st.write_config(lst, extra + "overload: {memoryLimit: 1MiB}\n")
    assert st.get("/reload", method="POST")[0] == 200
    assert overloaded(st)
    h2c.send_headers(1, [(":method", "GET"), (":path", "/h2"),
                         (":scheme", "http"), (":authority", "x")],
                     end_stream=True)
    s.sendall(h2c.data_to_send())
    # The GOAWAY (open no more streams) may come before the answer,
    # which the h2 library refuses: frames are read as they come.
    import hpack
    from hyperframe.frame import Frame, GoAwayFrame, HeadersFrame
    dec = hpack.Decoder()
    buf = b""
    status = goaway = None
    while status is None or goaway is None:
        data = s.recv(65535)
        assert data, "closed before the answer and GOAWAY"
        buf += data
        while len(buf) >= 9:
            f, n = Frame.parse_frame_header(memoryview(buf[:9]))
            if len(buf) < 9 + n:
                break
            f.parse_body(memoryview(buf[9:9 + n]))
            buf = buf[9 + n:]
            if isinstance(f, HeadersFrame) and f.stream_id == 1:
                status = dict(dec.decode(f.data))[":status"]
            if isinstance(f, GoAwayFrame):
                goaway = f
    status = status.encode() if isinstance(status, str) else status
    assert status == b"503"
    s.close()
    wait_for(lambda: re.search(r"http_request .*path=/h2 .*flags=OM",
                               st.log()), 10, "the OM access log line")
    st.write_config(lst, extra)
    assert st.get("/reload", method="POST")[0] == 200
    assert not overloaded(st)
    assert st.stats()["overload.memory_limit_bytes"] == 0
    c = connect(port)
    head, body = http_get(c)
    assert head.startswith("HTTP/1.1 200") and body == b"ok"
    c.close()


def test_changing_a_limit_keeps_the_listener(strait_factory,
                                             upstream_factory):
    """A reload that changes only a listener's maxConnections applies the
    new limit to the running listener: it is not replaced, so its open
    connections are not drained."""
    up = upstream_factory()
    port = free_port()
    extra = "limits: {action: close}\n"
    st = strait_factory(
        tcp_listener("lim", port, up.addr, "    maxConnections: 3\n"),
        extra=extra).start()
    a, b = connect(port), connect(port)
    assert echoed(a) and echoed(b)
    st.write_config(tcp_listener("lim", port, up.addr,
                                 "    maxConnections: 2\n"), extra)
    code, body, _ = st.get("/reload", method="POST")
    assert code == 200, body
    assert "listener lim: changed" not in st.log()
    c = connect(port)
    assert closed_by_peer(c)
    wait_for(lambda: st.stats()["listener.lim.downstream_cx_overflow"] == 1,
             5, "the lowered limit to refuse the third connection")
    st.write_config(tcp_listener("lim", port, up.addr,
                                 "    maxConnections: 0\n"), extra)
    assert st.get("/reload", method="POST")[0] == 200
    d = connect(port)
    assert echoed(d) and echoed(a) and echoed(b)
    for x in (a, b, c, d):
        x.close()
