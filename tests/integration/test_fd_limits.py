"""Issue 12 item 5: the open-file limit. strait raises its soft
RLIMIT_NOFILE to the hard limit at start and says so, and at the limit
its admin and CA listeners pause accepting instead of spinning on
accept(EMFILE), with one warning per interval instead of one per
attempt."""
import resource
import socket
import subprocess

from conftest import STRAIT, Strait, free_port, wait_for


class LimitedStrait(Strait):
    """A strait started with a given RLIMIT_NOFILE (soft, hard)."""

    def __init__(self, tmp_path, nofile, extra=""):
        super().__init__(tmp_path, "", workers=1, extra=extra)
        self.nofile = nofile

    def start(self, wait=True, env=None):
        soft, hard = self.nofile

        def limit():
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

        self.logf = open(self.log_path, "ab")
        self.proc = subprocess.Popen([STRAIT, "run", "-c", str(self.config)],
                                     stdout=self.logf, stderr=self.logf,
                                     preexec_fn=limit)
        if wait:
            wait_for(self.ready_or_dead, 15, "strait to become ready")
        return self


def limits_of(pid):
    with open(f"/proc/{pid}/limits") as f:
        for line in f:
            if line.startswith("Max open files"):
                parts = line.split()
                return int(parts[3]), int(parts[4])
    raise AssertionError("no open-file limit in /proc")


def test_soft_limit_is_raised_to_the_hard_limit(tmp_path):
    s = LimitedStrait(tmp_path, (128, 256)).start()
    try:
        assert limits_of(s.proc.pid) == (256, 256)
        assert "open-file limit (RLIMIT_NOFILE) raised from 128 to 256" \
            in s.log()
    finally:
        assert s.stop() == 0


def test_limit_already_at_hard_is_logged(tmp_path):
    s = LimitedStrait(tmp_path, (200, 200)).start()
    try:
        assert "open-file limit (RLIMIT_NOFILE): 200" in s.log()
    finally:
        assert s.stop() == 0


def fill(port, n, source="127.0.0.1"):
    out = []
    for _ in range(n):
        c = socket.create_connection(("127.0.0.1", port), timeout=5,
                                     source_address=(source, 0))
        out.append(c)
    return out


def test_admin_pauses_at_the_descriptor_limit(tmp_path):
    """Idle admin connections use up the descriptors: accept fails with
    EMFILE, the admin pauses (one warning, not one per attempt), and
    answers again once the connections are gone."""
    s = LimitedStrait(tmp_path, (64, 64)).start()
    held = []
    try:
        held = fill(s.admin_port, 120)
        wait_for(lambda: "admin: accept: Too many open files; pausing 100 ms"
                 in s.log(), 10, "the admin listener to pause")
        # While the connections are held the admin retries every 100 ms
        # and fails again: the next warning comes 10 s after the first and
        # sums up the pauses in between.
        wait_for(lambda: "more like this suppressed" in s.log(), 20,
                 "the second, summed-up warning")
        lines = [l for l in s.log().splitlines() if "admin: accept:" in l]
        assert len(lines) == 2, lines
        assert int(lines[1].split("(")[-1].split()[0]) >= 1
        assert "Error from accept() call" not in s.log()
    finally:
        for c in held:
            c.close()
    # Everything is served again.
    wait_for(lambda: s.get("/stats")[0] == 200, 10, "the admin API to answer")
    assert s.stop() == 0


def test_ca_pauses_at_the_descriptor_limit(tmp_path):
    port = free_port()
    s = LimitedStrait(
        tmp_path, (64, 64),
        extra=f"ca: {{enabled: true, dir: {tmp_path / 'ca'}, "
              f"address: 127.0.0.1:{port}}}\n").start()
    held = []
    try:
        # Below the CA's per-source limit of 16 from each source.
        for i in range(8):
            held += fill(port, 15, source=f"127.0.0.{20 + i}")
        wait_for(lambda: "CA: accept: Too many open files; pausing 100 ms"
                 in s.log(), 10, "the CA listener to pause")
        assert s.log().count("CA: accept:") == 1
    finally:
        for c in held:
            c.close()
    wait_for(lambda: s.get("/stats")[0] == 200, 10, "the admin API to answer")
    assert s.stop() == 0
