"""Progress where work is long: `strait check` of a directory draws a
progress line on stderr when stderr is a terminal (a pseudo-terminal
here), erases it before the results, and prints nothing of it when
stderr is a pipe, so scripts get the messages alone."""
import os
import pty
import select
import subprocess

from conftest import STRAIT

VS = """apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: vs{i}, namespace: default}}
spec:
  hosts: [h{i}.example.com]
  http:
  - route: [{{destination: {{host: up.example.com}}}}]
"""


def resources(tmp_path, n=20):
    d = tmp_path / "res"
    d.mkdir()
    for i in range(n):
        (d / f"vs{i:03}.yaml").write_text(VS.format(i=i))
    # One error, so the results are not empty.
    (d / "zz-bad.yaml").write_text(VS.format(i=999).replace(
        "hosts: [h999.example.com]", "hosts: [\"bad host\"]"))
    return d


def run_on_tty(args):
    """Runs args with stderr on a pseudo-terminal: (code, stdout, what the
    terminal got)."""
    master, slave = pty.openpty()
    try:
        p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=slave)
        os.close(slave)
        slave = -1
        got = b""
        # Until the child closes its end (EIO on Linux), bounded.
        for _ in range(10000):
            r, _, _ = select.select([master], [], [], 30)
            if not r:
                break
            try:
                d = os.read(master, 65536)
            except OSError:
                break
            if not d:
                break
            got += d
        out, _ = p.communicate(timeout=30)
        return p.returncode, out.decode(), got.decode(errors="replace")
    finally:
        os.close(master)
        if slave >= 0:
            os.close(slave)


def test_check_shows_progress_on_a_terminal(tmp_path):
    d = resources(tmp_path)
    code, out, tty = run_on_tty([STRAIT, "check", str(d)])
    assert code == 1, (out, tty)
    assert "checking: 1 file(s)" in tty
    assert f"checking {d}: 21 file(s), 20 resource(s) read; analysing" in tty
    # Erased before the results: the line ends with erase-line.
    assert tty.endswith("\r\x1b[K"), repr(tty[-80:])
    assert "zz-bad.yaml" in out and "bad host" in out


def test_check_is_quiet_in_scripts(tmp_path):
    d = resources(tmp_path)
    p = subprocess.run([STRAIT, "check", str(d)], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 1
    assert p.stderr == ""
    assert "checking" not in p.stdout
    assert "zz-bad.yaml" in p.stdout
