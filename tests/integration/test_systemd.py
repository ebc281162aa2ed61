"""systemd integration without systemd: strait's sd_notify messages to a
NOTIFY_SOCKET this test binds (abstract and path names), the watchdog
keep-alive, and `strait reload`, which ExecReload= runs and which must
fail when the new configuration is refused."""
import os
import signal
import socket
import subprocess

from conftest import STRAIT, free_port, wait_for


class NotifySocket:
    """A datagram socket standing in for systemd's notification socket."""

    def __init__(self, tmp_path, abstract=True):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        if abstract:
            name = f"strait-test-{os.getpid()}-{id(self)}"
            self.sock.bind("\0" + name)
            self.env = "@" + name
        else:
            path = str(tmp_path / "notify")
            self.sock.bind(path)
            self.env = path
        self.sock.settimeout(15)
        self.seen = []

    def next(self):
        data, _ = self.sock.recvfrom(4096)
        msg = dict(line.split("=", 1) for line in data.decode().split("\n"))
        self.seen.append(msg)
        return msg

    def until(self, key):
        """The next message that has key (the watchdog's may come between)."""
        while True:
            msg = self.next()
            if key in msg:
                return msg

    def close(self):
        self.sock.close()


def lst(port, up):
    return (f"  - name: l\n    address: \"127.0.0.1:{port}\"\n"
            f"    upstreams: [\"{up}\"]\n")


def reload_cmd(st):
    return subprocess.run([STRAIT, "reload", "-c", str(st.config)],
                          capture_output=True, text=True, timeout=60)


def env_with(**kw):
    env = dict(os.environ)
    env.update(kw)
    return env


def test_ready_reload_stopping(strait_factory, upstream_factory, tmp_path):
    up = upstream_factory()
    port = free_port()
    ns = NotifySocket(tmp_path)
    st = strait_factory(lst(port, f"127.0.0.1:{up.port}"))
    st.start(wait=False, env=env_with(NOTIFY_SOCKET=ns.env))
    ready = ns.until("READY")
    assert ready["READY"] == "1"
    assert ready["STATUS"].startswith("serving: 1 listener(s)")
    # READY=1 comes once the listeners are bound: the port answers now.
    socket.create_connection(("127.0.0.1", port), timeout=5).close()
    wait_for(st.ready_or_dead, 15, "admin")

    # A good reload: RELOADING=1 with the monotonic clock, then READY=1;
    # `strait reload` exits 0 only once it took effect.
    port2 = free_port()
    st.write_config(lst(port2, f"127.0.0.1:{up.port}"))
    r = reload_cmd(st)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "reloaded\n"
    rel = ns.until("RELOADING")
    assert rel["RELOADING"] == "1"
    assert int(rel["MONOTONIC_USEC"]) > 0
    done = ns.until("READY")
    assert done["STATUS"].startswith("reloaded")
    socket.create_connection(("127.0.0.1", port2), timeout=5).close()
    assert st.stats()["server.reloads_ok"] == 1

    # A refused reload (a valid file whose new listener's address is
    # taken): exit 1 with strait's reason, READY=1 again (the running
    # configuration stays) with a STATUS= that says it failed.
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    st.write_config(lst(port2, f"127.0.0.1:{up.port}") +
                    "  - name: m\n    address: "
                    f"\"127.0.0.1:{taken.getsockname()[1]}\"\n"
                    f"    upstreams: [\"127.0.0.1:{up.port}\"]\n")
    r = reload_cmd(st)
    taken.close()
    assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
    assert "reload failed" in r.stderr
    ns.until("RELOADING")
    failed = ns.until("READY")
    assert failed["STATUS"].startswith("reload failed"), failed
    assert st.stats()["server.reloads_failed"] == 1
    socket.create_connection(("127.0.0.1", port2), timeout=5).close()

    # Drain: STOPPING=1.
    st.signal(signal.SIGTERM)
    assert ns.until("STOPPING")["STOPPING"] == "1"
    assert st.proc.wait(timeout=30) == 0
    ns.close()


def test_watchdog_keepalive_while_workers_answer(strait_factory, tmp_path):
    ns = NotifySocket(tmp_path, abstract=False)
    st = strait_factory("  []\n")
    # 200 ms: a keep-alive every 100 ms.
    st.start(wait=False, env=env_with(NOTIFY_SOCKET=ns.env,
                                      WATCHDOG_USEC="200000"))
    ns.until("READY")
    for _ in range(3):
        assert ns.until("WATCHDOG")["WATCHDOG"] == "1"
    assert "keep-alive every 100 ms" in st.log()
    st.stop()
    ns.close()


def test_watchdog_for_another_pid_is_ignored(strait_factory, tmp_path):
    ns = NotifySocket(tmp_path)
    st = strait_factory("  []\n")
    st.start(wait=False, env=env_with(NOTIFY_SOCKET=ns.env,
                                      WATCHDOG_USEC="200000",
                                      WATCHDOG_PID="1"))
    ns.until("READY")
    wait_for(st.ready_or_dead, 15, "admin")
    assert "watchdog" not in st.log()
    st.stop()
    ns.close()


def test_reload_without_strait_running_exits_3(strait_factory):
    st = strait_factory("  []\n")
    r = reload_cmd(st)
    assert r.returncode == 3, (r.stdout, r.stderr)
    assert "cannot reach strait" in r.stderr


def test_reload_of_a_bad_file_is_refused(strait_factory):
    st = strait_factory("  []\n")
    st.write_config("", raw="workers: [\n")
    r = reload_cmd(st)
    assert r.returncode == 1
    assert "refused" in r.stderr
