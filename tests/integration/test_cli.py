"""The command line: version, help, check, and start-up errors."""
import socket
import subprocess

import pytest

from conftest import STRAIT, SRCDIR, free_port


def run(*args, timeout=20):
    return subprocess.run([STRAIT, *args], capture_output=True, text=True,
                          timeout=timeout)


def test_version_names_every_library():
    r = run("version")
    assert r.returncode == 0
    for lib in ("strait ", "boringssl", "BoringSSL", "libevent", "nghttp2",
                "lua", "maxminddb", "libyaml"):
        assert lib in r.stdout, r.stdout


@pytest.mark.parametrize("cmd", [[], ["run"], ["check"], ["version"], ["reference"]])
def test_help_on_each_command(cmd):
    r = run(*cmd, "--help")
    assert r.returncode == 0
    assert "usage: strait" in r.stdout


def test_no_command_and_unknown_command_are_usage_errors():
    r = run()
    assert r.returncode == 2 and "usage: strait" in r.stderr
    r = run("frobnicate")
    assert r.returncode == 2 and "unknown command 'frobnicate'" in r.stderr
    r = run("run", "--bogus")
    assert r.returncode == 2


def test_check_accepts_the_shipped_config():
    r = run("check", "-c", f"{SRCDIR}/etc/strait/strait.yaml")
    assert r.returncode == 0, r.stderr
    assert "valid" in r.stdout


def test_check_missing_file(tmp_path):
    r = run("check", "-c", str(tmp_path / "nope.yaml"))
    assert r.returncode == 1
    assert "nope.yaml: cannot open" in r.stderr


BAD = {
    "unknown key": ("workers: 1\nlistenres: []\n",
                    ":2:1: listenres: unknown key"),
    "wrong type": ("workers: 1\nadmin: [1, 2]\n",
                   ":2:8: admin: expected a mapping, got a list"),
    "out of range": ("workers: 1000\n",
                     ":1:10: workers: bad value '1000': out of range 1-256"),
    "bad duration": ("drainTimeout: 30\n",
                     ":1:15: drainTimeout: bad duration '30': duration needs a unit"),
    "bad address": ("listeners:\n  - name: a\n    address: localhost:80\n"
                    "    upstreams: [127.0.0.1:1]\n",
                    ":3:14: listeners[0].address: bad address 'localhost:80'"),
    "bad ipv6": ("listeners:\n  - name: a\n    address: ::1:80\n"
                 "    upstreams: [127.0.0.1:1]\n",
                 "IPv6 addresses need brackets"),
    "missing upstreams": ("listeners:\n  - name: a\n    address: 127.0.0.1:1\n",
                          ":2:5: listeners[0]: missing key 'upstreams'"),
    "duplicate name": ("listeners:\n"
                       "  - {name: a, address: 127.0.0.1:1, upstreams: [127.0.0.1:3]}\n"
                       "  - {name: a, address: 127.0.0.1:2, upstreams: [127.0.0.1:3]}\n",
                       "duplicate listener name 'a'"),
    "yaml syntax": ("workers: [1\n", "YAML syntax error"),
    "bad log level": ("log: {level: loud}\n",
                      "log.level: unknown value 'loud' (one of: debug, info, warn, error)"),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_bootstrap_files_give_clear_errors(tmp_path, name):
    text, expect = BAD[name]
    f = tmp_path / "bad.yaml"
    f.write_text(text)
    for cmd in ("check", "run"):
        r = run(cmd, "-c", str(f))
        assert r.returncode == 1, (cmd, r.stdout, r.stderr)
        assert expect in r.stderr, r.stderr
        assert str(f) in r.stderr


def test_several_errors_are_reported_together(tmp_path):
    f = tmp_path / "bad.yaml"
    f.write_text("workers: x\nfoo: 1\nlog: {format: xml}\n")
    r = run("check", "-c", str(f))
    assert r.returncode == 1
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 3, r.stderr


def test_port_already_in_use_is_a_clear_start_error(tmp_path):
    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    held.listen(1)
    port = held.getsockname()[1]
    try:
        f = tmp_path / "s.yaml"
        f.write_text(f"workers: 1\nadmin: {{address: 127.0.0.1:{free_port()}}}\n"
                     f"listeners:\n  - {{name: a, address: 127.0.0.1:{port}, "
                     f"upstreams: [127.0.0.1:1]}}\n")
        r = run("run", "-c", str(f))
        assert r.returncode == 3, r.stderr
        assert f"listener a: cannot bind 127.0.0.1:{port}: Address already in use" in r.stderr
        # The same file is valid: check does not bind.
        assert run("check", "-c", str(f)).returncode == 0
    finally:
        held.close()


def test_admin_port_in_use_is_a_clear_start_error(tmp_path):
    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    held.listen(1)
    port = held.getsockname()[1]
    try:
        f = tmp_path / "s.yaml"
        f.write_text(f"workers: 1\nadmin: {{address: 127.0.0.1:{port}}}\n")
        r = run("run", "-c", str(f))
        assert r.returncode == 3
        assert "admin API: cannot bind" in r.stderr
    finally:
        held.close()


def test_reference_lists_every_key():
    r = run("reference")
    assert r.returncode == 0
    keys = [line.split("\t")[0] for line in r.stdout.splitlines()]
    for k in ("node.name", "workers", "admin.address", "log.format",
              "drainTimeout", "listeners[].upstreams", "listeners[].bufferSize"):
        assert k in keys
