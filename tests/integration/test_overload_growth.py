"""Issue 28, memory bounds: the memory limit is checked as buffers grow,
not only on the control loop's timer, and it bounds what a burst can make
strait hold; HBONE tunnels count against it too.

Every wait is on a counter, a frame or a socket; none is a sleep."""
import os
import selectors
import socket
import threading

import h2.config
import h2.connection
import h2.events
import h2.settings

from conftest import free_port, wait_for
from httpd import clusters, http_listener

MIB = 1024 * 1024
BODY = 128 * 1024


class BigUpstream:
    """An HTTP/1.1 upstream on one selector thread, for thousands of
    connections at once: every request head is answered 200 with BODY
    bytes, written as the socket takes them. .heads counts the request
    heads it read."""

    def __init__(self):
        self.ls = socket.socket()
        self.ls.bind(("127.0.0.1", 0))
        self.ls.listen(4096)
        self.ls.setblocking(False)
        self.addr = "127.0.0.1:%d" % self.ls.getsockname()[1]
        self.sel = selectors.DefaultSelector()
        self.sel.register(self.ls, selectors.EVENT_READ, "accept")
        self.wake_r, self.wake_w = socket.socketpair()
        self.sel.register(self.wake_r, selectors.EVENT_READ, "stop")
        self.lock = threading.Lock()
        self._heads = 0
        self.t = threading.Thread(target=self.loop, daemon=True)
        self.t.start()

    @property
    def heads(self):
        with self.lock:
            return self._heads

    def loop(self):
        resp = (b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % BODY +
                b"x" * BODY)
        conns = {}

        def drop(c):
            self.sel.unregister(c)
            c.close()
            del conns[c]

        while True:
            for key, ev in self.sel.select():
                if key.data == "stop":
                    for c in list(conns):
                        c.close()
                    return
                if key.data == "accept":
                    try:
                        c, _ = self.ls.accept()
                    except BlockingIOError:
                        continue
                    c.setblocking(False)
                    conns[c] = [b"", None]
                    self.sel.register(c, selectors.EVENT_READ, "conn")
                    continue
                c = key.fileobj
                st = conns[c]
                if ev & selectors.EVENT_READ:
                    try:
                        d = c.recv(65536)
                    except OSError:
                        d = b""
                    if not d:
                        drop(c)
                        continue
                    st[0] += d
                    if st[1] is None and b"\r\n\r\n" in st[0]:
                        with self.lock:
                            self._heads += 1
                        st[0] = b""
                        st[1] = memoryview(resp)
                        self.sel.modify(c, selectors.EVENT_READ |
                                        selectors.EVENT_WRITE, "conn")
                if ev & selectors.EVENT_WRITE and st[1] is not None:
                    try:
                        n = c.send(st[1])
                    except BlockingIOError:
                        n = 0
                    except OSError:
                        drop(c)
                        continue
                    st[1] = st[1][n:]
                    if not len(st[1]):
                        st[1] = None
                        self.sel.modify(c, selectors.EVENT_READ, "conn")

    def stop(self):
        self.wake_w.send(b"x")
        self.t.join(10)
        self.ls.close()


def vm_bytes(pid, key):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"no {key}")


class ZeroWindowClient:
    """One HTTP/2 connection that opens n GET streams with an initial
    stream window of 0: strait may send heads but no body byte. Records
    per stream whether a head or a reset came."""

    def __init__(self, port, n):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.sock.setblocking(False)
        cfg = h2.config.H2Configuration(client_side=True)
        self.conn = h2.connection.H2Connection(cfg)
        self.conn.initiate_connection()
        self.conn.update_settings(
            {h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 0})
        self.ids = [1 + 2 * k for k in range(n)]
        for sid in self.ids:
            self.conn.send_headers(sid, [(":method", "GET"),
                                         (":path", "/big"),
                                         (":scheme", "http"),
                                         (":authority", "x")],
                                   end_stream=True)
        self.out = self.conn.data_to_send()
        self.settled = {}  # stream id -> ":status" or "reset"
        self.closed = False

    def pump(self):
        if self.out:
            try:
                n = self.sock.send(self.out)
                self.out = self.out[n:]
            except BlockingIOError:
                pass
        try:
            data = self.sock.recv(1 << 20)
        except BlockingIOError:
            return
        except ConnectionResetError:
            data = b""
        if not data:
            self.closed = True
            return
        for ev in self.conn.receive_data(data):
            if isinstance(ev, h2.events.ResponseReceived):
                self.settled[ev.stream_id] = dict(ev.headers)[b":status"]
            elif isinstance(ev, h2.events.StreamReset):
                self.settled.setdefault(ev.stream_id, "reset")
        self.out += self.conn.data_to_send()

    def done(self):
        return self.closed or len(self.settled) == len(self.ids)


def test_zero_window_burst_stays_under_the_limit(strait_factory):
    """The attack run's burst: 30 HTTP/2 connections x 100 streams with a
    zero stream window, arriving within one check interval (10 s here),
    each answered upstream with 128 KiB that strait can pass on to no
    one. Checked only by the timer, every stream's response took a 64 KiB
    body buffer (and more) before any action started, and resident memory
    went to 3.5x the limit and beyond. Checked as buffers grow, the actions
    start at their thresholds, body buffers are refused past the last one
    (those streams are reset), and the peak stays under 1.5x the limit."""
    up = BigUpstream()
    port = free_port()
    lst = http_listener("web", port)
    extra = clusters(backend=[up.addr])
    clients = []
    try:
        st = strait_factory(lst, extra=extra, workers=2).start()
        base = vm_bytes(st.proc.pid, "VmRSS")
        # 64 MiB of room: a sixth of what the burst takes unbounded (3000
        # streams x a 64 KiB body buffer, and their read buffers).
        limit = base + 64 * MIB
        st.write_config(lst, extra +
                        "overload: {memoryLimit: %d, checkInterval: 10s}\n"
                        % limit)
        code, body, _ = st.get("/reload", method="POST")
        assert code == 200 and body.startswith("reloaded"), body
        clients += [ZeroWindowClient(port, 100) for _ in range(30)]
        sel = selectors.DefaultSelector()
        for c in clients:
            sel.register(c.sock, selectors.EVENT_READ, c)

        def settled():
            for key, _ in sel.select(timeout=0.05):
                key.data.pump()
            for c in clients:
                if c.out:
                    c.pump()
            return all(c.done() for c in clients)

        # Every stream gets its head (200 or 503) or a reset: by then
        # each has had its chance at a body buffer.
        wait_for(settled, 120, "every stream answered or reset")
        peak = vm_bytes(st.proc.pid, "VmHWM")
        got = [v for c in clients for v in c.settled.values()]
        ok, shed = got.count(b"200"), got.count(b"503") + got.count("reset")
        print(f"limit {limit >> 20} MiB, base {base >> 20} MiB, peak "
              f"{peak >> 20} MiB ({peak / limit:.2f}x); {ok} answered 200, "
              f"{shed} shed (503 OM or reset)")
        assert peak < 1.5 * limit, (peak, limit)
        # The streams past the limit were shed, not buffered.
        assert shed > 0 and ok + shed == 3000
        assert st.proc.poll() is None
    finally:
        for c in clients:
            c.sock.close()
        up.stop()
