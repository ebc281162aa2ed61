"""Issue 25 item 7 (the version part): GET /server_info on the admin API in
Envoy's name and JSON shape (version, state, uptimes, hot_restart_version,
command_line_options with the restart epoch, which a binary upgrade
raises), and Istio's istio_build{component="proxy",tag=...} gauge on the
stats endpoints."""
import json
import re
import subprocess
import urllib.request

from conftest import STRAIT, free_port
from test_upgrade import alive, stop_pid, upgrade


def version():
    out = subprocess.run([STRAIT, "--version"], capture_output=True, text=True,
                         timeout=10)
    return out.stdout.split()[1]


def server_info(st):
    code, body, headers = st.get("/server_info")
    assert code == 200, body
    assert headers["Content-Type"] == "application/json"
    return json.loads(body)


def test_server_info_and_istio_build(strait_factory):
    metrics = free_port()
    st = strait_factory(workers=2, extra=(
        f"metrics: {{address: 127.0.0.1:{metrics}}}\n")).start()
    info = server_info(st)
    # Envoy's version string: the version is its second field.
    assert info["version"].split("/")[1] == version()
    assert info["state"] == "LIVE"
    assert info["hot_restart_version"] == "disabled"
    opts = info["command_line_options"]
    assert opts["concurrency"] == 2
    assert opts["config_path"] == str(st.config)
    assert opts["restart_epoch"] == 0
    assert opts["log_level"] == "info"
    assert opts["drain_time"] == "30s"
    assert opts["mode"] == "Serve"
    for k in ("uptime_current_epoch", "uptime_all_epochs"):
        assert re.fullmatch(r"[0-9]+s", info[k]), info[k]
    # Only GET.
    assert st.get("/server_info", method="POST")[0] == 405
    # istio_build on the admin API's and the metrics port's scrape.
    for url in (st.url("/stats/prometheus"),
                f"http://127.0.0.1:{metrics}/stats/prometheus"):
        with urllib.request.urlopen(url, timeout=10) as r:
            prom = r.read().decode()
        assert f'istio_build{{component="proxy",tag="{version()}"}} 1' in \
            prom.splitlines()
        assert "# TYPE istio_build gauge" in prom
    assert st.stats()["server.restart_epoch"] == 0


def test_restart_epoch_counts_binary_upgrades(strait_factory):
    st = strait_factory(workers=1).start()
    old = st.proc.pid
    before = server_info(st)
    r = upgrade(st)
    assert r.returncode == 0, r.stderr + st.log()
    new = st.stats()["server.pid"]
    assert new != old
    try:
        info = server_info(st)
        assert info["command_line_options"]["restart_epoch"] == 1
        assert info["state"] == "LIVE"
        # All epochs count from the first process's start.
        cur = int(info["uptime_current_epoch"][:-1])
        allep = int(info["uptime_all_epochs"][:-1])
        assert allep >= cur
        assert allep >= int(before["uptime_all_epochs"][:-1])
    finally:
        stop_pid(new)
        assert not alive(new)
