"""The TCP proxy data path, end to end through the real binary."""
import hashlib
import os
import re
import select
import socket
import threading

import pytest

from conftest import (connect, free_port, recv_all, recv_exact, rss_kib,
                      wait_for)

MIB = 1024 * 1024


def listener(name, port, upstreams, extra="", host="127.0.0.1"):
    # YAML reads a bare [::1]:80 as a list: addresses are quoted.
    ups = ", ".join(f'"{u}"' for u in upstreams)
    return (f"  - name: {name}\n    address: \"{host}:{port}\"\n"
            f"    upstreams: [{ups}]\n{extra}")


def pattern(n, seed=0):
    """Deterministic bytes, cheap to produce and check."""
    block = hashlib.sha256(str(seed).encode()).digest() * 2048  # 64 KiB
    out = bytearray()
    while len(out) < n:
        out += block
    return bytes(out[:n])


def sha_sink_handler(c):
    """Reads to EOF, then answers with the SHA-256 of what it read."""
    h = hashlib.sha256()
    n = 0
    while True:
        d = c.recv(1 << 20)
        if not d:
            break
        h.update(d)
        n += len(d)
    c.sendall(f"{n} {h.hexdigest()}".encode())


class RssSampler(threading.Thread):
    def __init__(self, pid):
        super().__init__(daemon=True)
        self.pid = pid
        self.max = 0
        self.stop_ev = threading.Event()

    def run(self):
        while not self.stop_ev.is_set():
            self.max = max(self.max, rss_kib(self.pid))
            self.stop_ev.wait(0.01)

    def stop(self):
        self.stop_ev.set()
        self.join(5)
        return self.max


def test_100mib_upstream_direction_unchanged_with_flat_memory(
        strait_factory, upstream_factory):
    up = upstream_factory(sha_sink_handler)
    port = free_port()
    st = strait_factory(listener("big", port, [up.addr])).start()
    base = rss_kib(st.proc.pid)
    sampler = RssSampler(st.proc.pid)
    sampler.start()
    total = 100 * MIB
    h = hashlib.sha256()
    chunk = pattern(MIB)
    with connect(port) as c:
        for _ in range(total // MIB):
            c.sendall(chunk)
            h.update(chunk)
        c.shutdown(socket.SHUT_WR)
        answer = recv_all(c).decode()
    peak = sampler.stop()
    assert answer == f"{total} {h.hexdigest()}"
    # Two 64 KiB buffers per session; allow allocator and sanitizer slack,
    # far below the 100 MiB that went through.
    assert peak - base < 16 * 1024, (base, peak)
    s = st.stats()
    assert s["listener.big.downstream_cx_rx_bytes_total"] == total
    assert s["listener.big.upstream_cx_tx_bytes_total"] == total


def test_100mib_downstream_direction_unchanged(strait_factory, upstream_factory):
    total = 100 * MIB
    chunk = pattern(MIB, seed=7)

    def source(c):
        for _ in range(total // MIB):
            c.sendall(chunk)
        c.shutdown(socket.SHUT_WR)
        recv_all(c)

    up = upstream_factory(source)
    port = free_port()
    st = strait_factory(listener("down", port, [up.addr])).start()
    base = rss_kib(st.proc.pid)
    sampler = RssSampler(st.proc.pid)
    sampler.start()
    h = hashlib.sha256()
    n = 0
    with connect(port) as c:
        while True:
            d = c.recv(1 << 20)
            if not d:
                break
            h.update(d)
            n += len(d)
    peak = sampler.stop()
    expect = hashlib.sha256(chunk * (total // MIB)).hexdigest()
    assert n == total and h.hexdigest() == expect
    assert peak - base < 16 * 1024, (base, peak)


def test_slow_reader_bounds_buffered_bytes(strait_factory, upstream_factory):
    """The upstream floods, the client reads nothing: strait stops reading
    the upstream once its buffer is full; RSS stays near the bound."""
    blocked = threading.Event()
    release = threading.Event()
    sent = [0]
    bufsize = 64 * 1024

    def flood(c):
        c.setblocking(False)
        chunk = b"x" * 65536
        while not release.is_set():
            try:
                sent[0] += c.send(chunk)
                continue
            except BlockingIOError:
                pass
            # Not writable for a whole second: strait has stopped reading.
            _, w, _ = select.select([], [c], [], 1.0)
            if not w:
                blocked.set()
                release.wait(30)
                return

    up = upstream_factory(flood)
    port = free_port()
    st = strait_factory(listener("slow", port, [up.addr],
                                 f"    bufferSize: {bufsize}\n")).start()
    base = rss_kib(st.proc.pid)
    c = connect(port)
    c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    try:
        assert blocked.wait(60), "the upstream never blocked"
        s = st.stats()
        buffered = (s["listener.slow.upstream_cx_rx_bytes_total"]
                    - s["listener.slow.downstream_cx_tx_bytes_total"])
        assert 0 <= buffered <= bufsize, s
        grown = rss_kib(st.proc.pid) - base
        assert grown < 4 * 1024, (base, grown, sent[0])
        # Kernel buffers hold the rest: much more was sent than strait holds.
        assert sent[0] > bufsize
    finally:
        release.set()
        c.close()


def test_half_close_is_passed_through(strait_factory, upstream_factory):
    got_eof = threading.Event()

    def half(c):
        data = recv_all(c)  # ends at the client's FIN, relayed by strait
        got_eof.set()
        c.sendall(b"after-eof:" + data)

    up = upstream_factory(half)
    port = free_port()
    strait_factory(listener("half", port, [up.addr])).start()
    with connect(port) as c:
        c.sendall(b"ping")
        c.shutdown(socket.SHUT_WR)
        assert recv_all(c) == b"after-eof:ping"
    assert got_eof.is_set()


def test_round_robin_over_upstreams(strait_factory, upstream_factory):
    ups = [upstream_factory() for _ in range(3)]
    port = free_port()
    strait_factory(listener("rr", port, [u.addr for u in ups]), workers=1).start()
    for i in range(30):
        with connect(port) as c:
            c.sendall(b"x")
            assert recv_exact(c, 1) == b"x"
    assert [u.conns for u in ups] == [10, 10, 10]


def test_connect_failure_retries_next_endpoint(strait_factory, upstream_factory):
    good = upstream_factory()
    dead = f"127.0.0.1:{free_port()}"
    port = free_port()
    st = strait_factory(listener("retry", port, [dead, good.addr],
                                 "    connectAttempts: 2\n"), workers=1).start()
    for _ in range(4):
        with connect(port) as c:
            c.sendall(b"hello")
            assert recv_exact(c, 5) == b"hello"
    assert st.stats()["listener.retry.upstream_cx_connect_fail"] == 2


def test_all_endpoints_down_closes_client(strait_factory):
    port = free_port()
    dead = [f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"]
    st = strait_factory(listener("down", port, dead,
                                 "    connectAttempts: 3\n"), workers=1).start()
    with connect(port) as c:
        assert recv_all(c) == b""
    wait_for(lambda: "end=upstream_connect_failed" in st.log(), 10, "access log")
    assert st.stats()["listener.down.upstream_cx_connect_fail"] == 3


def test_idle_timeout_closes_quiet_sessions(strait_factory, upstream_factory):
    up = upstream_factory()
    port = free_port()
    st = strait_factory(listener("idle", port, [up.addr],
                                 "    idleTimeout: 200ms\n")).start()
    with connect(port) as c:
        c.sendall(b"a")
        assert recv_exact(c, 1) == b"a"
        c.settimeout(10)
        assert c.recv(1) == b""  # strait closed it
    wait_for(lambda: st.stats()["listener.idle.idle_timeout"] == 1, 5, "counter")
    # The access log line is written once the session is freed, after the
    # close is counted and seen by the client.
    wait_for(lambda: "end=idle_timeout" in st.log(), 10, "access log")


def test_unix_listener_to_ipv6_upstream(strait_factory, upstream_factory, tmp_path):
    up = upstream_factory(family=socket.AF_INET6, host="::1")
    path = tmp_path / "in.sock"
    yaml = (f"  - name: ux\n    address: unix:{path}\n    upstreams: [\"{up.addr}\"]\n")
    strait_factory(yaml).start()
    c = socket.socket(socket.AF_UNIX)
    c.settimeout(10)
    c.connect(str(path))
    with c:
        c.sendall(b"over unix")
        assert recv_exact(c, 9) == b"over unix"


def test_ipv6_listener_to_unix_upstream(strait_factory, upstream_factory, tmp_path):
    up = upstream_factory(family=socket.AF_UNIX, path=str(tmp_path / "up.sock"))
    port = free_port("::1")
    strait_factory(listener("v6", port, [up.addr], host="[::1]")).start()
    with socket.create_connection(("::1", port), timeout=10) as c:
        c.sendall(b"over v6")
        assert recv_exact(c, 7) == b"over v6"


def test_access_log_line_per_session(strait_factory, upstream_factory):
    up = upstream_factory()
    port = free_port()
    st = strait_factory(listener("al", port, [up.addr])).start()
    with connect(port) as c:
        c.sendall(b"12345")
        assert recv_exact(c, 5) == b"12345"
    line = wait_for(lambda: [l for l in st.log().splitlines() if "tcp_session" in l],
                    10, "access log line")[0]
    assert re.search(r"listener=al downstream=127\.0\.0\.1:\d+ "
                     rf"upstream={re.escape(up.addr)} bytes_in=5 bytes_out=5 "
                     r"upstream_bytes_in=5 upstream_bytes_out=5 duration_ms=\d+ "
                     r"end=closed", line), line


def test_json_access_log(strait_factory, upstream_factory):
    import json
    up = upstream_factory()
    port = free_port()
    st = strait_factory(listener("js", port, [up.addr]),
                        extra="log: {format: json}\n").start()
    with connect(port) as c:
        c.sendall(b"abc")
        assert recv_exact(c, 3) == b"abc"
    lines = wait_for(lambda: [l for l in st.log().splitlines() if "tcp_session" in l],
                     10, "access log line")
    rec = json.loads(lines[0])
    assert rec["msg"] == "tcp_session" and rec["listener"] == "js"
    assert rec["bytes_in"] == 3 and rec["end"] == "closed"
    # Every line strait wrote is one JSON object.
    for l in st.log().splitlines():
        json.loads(l)


def test_connections_spread_over_all_workers(strait_factory, upstream_factory):
    up = upstream_factory()
    port = free_port()
    st = strait_factory(listener("spread", port, [up.addr]), workers=2).start()
    for _ in range(200):
        with connect(port) as c:
            c.sendall(b"x")
            assert recv_exact(c, 1) == b"x"
    s = st.stats()
    per = [s[f"listener.spread.worker_{w}.downstream_cx_total"] for w in range(2)]
    assert sum(per) == 200
    assert all(n > 0 for n in per), per
