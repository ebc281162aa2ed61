"""LuaPolicy budgets that an attack run escaped (issue 28), on the real
binary with one worker, driven by curl: string.rep of empty strings,
table.move over a huge range, a pattern of 'a?' (2^n backtracking), a
<close> handler that loops, and a loop of coroutines under pcall each
end with the policy's failurePolicy answer (500) while another client is
served by the same worker; timer callbacks that loop or re-arm
themselves are deferred past their policy's share and the worker goes
on serving; top-level code that loops is refused by `strait check` and
by a reload (the control thread keeps answering); and SIGTERM ends the
process while a hook runs under a long burst."""
import signal
import subprocess

import pytest

from conftest import STRAIT, free_port, responder, wait_for
from test_gateway import GATEWAY_AND_UP
from test_lua import ROUTES, head_echo, lua_stat

ESCAPES = {
    "rep": "string.rep('', math.maxinteger, '')",
    "move": "table.move({}, 1, math.maxinteger, 1)",
    "find": "string.find(string.rep('a', 40), string.rep('a?', 40) .. "
            "string.rep('a', 40))",
    "close": "local x <close> = setmetatable({}, {__close = function() "
             "while true do end end}) while true do end",
    "coroutine": "while true do pcall(coroutine.wrap(function() "
                 "while true do end end)) end",
}

REASONS = {"rep": "error", "move": "error", "find": "error",
           "close": "timeout", "coroutine": "timeout"}


def escape_policy():
    branches = "\n".join(
        f"        {'if' if i == 0 else 'elseif'} p == '/{k}' then {v}"
        for i, (k, v) in enumerate(ESCAPES.items()))
    # instructionSlice is large, as an attacker may set it: a coroutine
    # made by a loop ran a whole slice before its first budget check.
    return f"""---
apiVersion: strait.io/v1alpha1
kind: LuaPolicy
metadata: {{name: esc, namespace: default}}
spec:
  targetRefs: [{{kind: Gateway, name: gw}}]
  source:
    inline: |
      function on_request(h)
        local p = h:path()
        if p == '/ok' then h:respond(200, {{}}, 'ok') return end
        h:log('info', 'escape starts ' .. p)
{branches}
        end
        h:respond(200, {{}}, 'escaped')
      end
  limits: {{burst: 200ms, requestTime: 1s, instructionSlice: 1000000}}
"""


def start(strait_factory, tmp_path, up_port, rest, extra=""):
    conf = tmp_path / "conf.d"
    conf.mkdir()
    port = free_port()
    (conf / "r.yaml").write_text(
        GATEWAY_AND_UP.format(port=port, up_port=up_port) + rest)
    st = strait_factory(extra=f"config: {{dir: \"{conf}\"}}\n" + extra,
                        workers=1).start()
    return st, port, conf


def curl(port, path, wait=True):
    """curl GET path; the status code as text (the process when not
    waiting). --max-time only ends a hung test."""
    cmd = ["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}",
           "--max-time", "60", f"http://127.0.0.1:{port}{path}"]
    if not wait:
        return subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    return subprocess.run(cmd, capture_output=True, text=True,
                          timeout=90).stdout


@pytest.mark.parametrize("escape", sorted(ESCAPES))
def test_escape_ends_with_failure_policy_and_worker_serves(
        strait_factory, tmp_path, upstream_factory, escape):
    up = upstream_factory(responder(head_echo))
    st, port, _ = start(strait_factory, tmp_path, up.port,
                        ROUTES + escape_policy())
    assert curl(port, "/ok") == "200"
    bad = curl(port, f"/{escape}", wait=False)
    try:
        wait_for(lambda: f"escape starts /{escape}" in st.log(), 15,
                 "the escape to start")
        # The only worker serves another client meanwhile.
        assert curl(port, "/ok") == "200"
        out, _ = bad.communicate(timeout=90)
    finally:
        if bad.poll() is None:
            bad.kill()
            bad.wait()
    assert out == "500", out
    wait_for(lambda: lua_stat(st, "default/esc", "on_request",
                              REASONS[escape]) == 1, 10,
             f"the {REASONS[escape]} counted")
    assert curl(port, "/ok") == "200"


TIMERS = """---
apiVersion: strait.io/v1alpha1
kind: LuaPolicy
metadata: {name: tick, namespace: default}
spec:
  targetRefs: [{kind: Gateway, name: gw}]
  source:
    inline: |
      local function again() strait.timer.at(0, again) end
      function init_worker()
        strait.timer.at(0, again)
        strait.timer.every(0.001, function() while true do end end)
      end
      function on_request(h) h:respond(200, {}, 'ok') end
  limits: {burst: 100ms}
"""


def test_timers_share_the_policy_budget(strait_factory, tmp_path,
                                        upstream_factory):
    up = upstream_factory(responder(head_echo))
    st, port, _ = start(strait_factory, tmp_path, up.port, ROUTES + TIMERS)
    # The first request makes the worker's state; init_worker starts both.
    assert curl(port, "/x") == "200"
    wait_for(lambda: (lua_stat(st, "default/tick", "timer", "deferred")
                      or 0) >= 2, 30, "the timers deferred past their share")
    assert lua_stat(st, "default/tick", "timer", "timeout") >= 1
    for _ in range(20):
        assert curl(port, "/x") == "200"


LOOP_AT_LOAD = """apiVersion: strait.io/v1alpha1
kind: LuaPolicy
metadata: {name: load, namespace: default}
spec:
  targetRefs: [{kind: Gateway, name: gw}]
  limits: {burst: 100ms}
  source:
    inline: |
      BODY
      function on_request(h) h:respond(200, {}, 'new') end
"""


def test_check_reports_top_level_over_budget(tmp_path):
    f = tmp_path / "p.yaml"
    f.write_text(LOOP_AT_LOAD.replace("BODY", "while true do end"))
    r = subprocess.run([STRAIT, "check", str(f)], capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "burst timeout" in r.stdout + r.stderr
    f.write_text(LOOP_AT_LOAD.replace("BODY", "local n = 0 "
                                      "for i = 1, 1000 do n = n + i end"))
    r = subprocess.run([STRAIT, "check", str(f)], capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 0, r.stdout + r.stderr


def test_top_level_escape_fails_the_reload_control_thread_answers(
        strait_factory, tmp_path, upstream_factory):
    up = upstream_factory(responder(head_echo))
    st, port, conf = start(strait_factory, tmp_path, up.port,
                           ROUTES + escape_policy())
    assert curl(port, "/ok") == "200"
    (conf / "load.yaml").write_text(LOOP_AT_LOAD.replace(
        "BODY", "string.rep('', math.maxinteger, '')"))
    st.signal(signal.SIGHUP)
    wait_for(lambda: "over 1048576 copies" in st.log(), 30,
             "the reload refused")
    # The control thread answers, and the old configuration serves.
    assert st.get("/healthz/ready")[0] == 200
    assert curl(port, "/ok") == "200"


def test_sigterm_ends_a_hook_under_a_long_burst(strait_factory, tmp_path,
                                                upstream_factory):
    up = upstream_factory(responder(head_echo))
    st, port, _ = start(strait_factory, tmp_path, up.port, ROUTES + """---
apiVersion: strait.io/v1alpha1
kind: LuaPolicy
metadata: {name: slow, namespace: default}
spec:
  targetRefs: [{kind: Gateway, name: gw}]
  source:
    inline: |
      function on_log(h)
        h:log('info', 'on_log loops')
        while true do end
      end
  limits: {burst: 60s, requestTime: 600s}
""", extra="drainTimeout: 1s\n")
    assert curl(port, "/x") == "200"
    wait_for(lambda: "on_log loops" in st.log(), 15, "on_log to run")
    st.signal(signal.SIGTERM)
    # on_log may run 60 s under its burst; the drain deadline ends it.
    assert st.proc.wait(timeout=30) == 0, st.log()
    assert "drain deadline reached" in st.log()
    assert "process exiting" in st.log()


def test_sigterm_ends_top_level_code_that_loops_on_the_control_thread(
        strait_factory, tmp_path, upstream_factory):
    """A policy whose top-level code loops under a long burst runs on the
    control thread when a reload checks and builds it. SIGTERM ends that
    code ("process exiting") and the loop drains its own way: the process
    exits 0 within drainTimeout, not by the stop guard's last resort."""
    up = upstream_factory(responder(head_echo))
    st, port, conf = start(strait_factory, tmp_path, up.port, ROUTES,
                           extra="drainTimeout: 2s\n")
    assert curl(port, "/ok") == "200"
    (conf / "load.yaml").write_text(
        LOOP_AT_LOAD.replace("burst: 100ms", "burst: 60s, requestTime: 600s")
        .replace("BODY", "strait.log('info', 'top level loops') "
                         "while true do end"))
    st.signal(signal.SIGHUP)
    wait_for(lambda: "top level loops" in st.log(), 30,
             "the top-level code to run")
    st.signal(signal.SIGTERM)
    assert st.proc.wait(timeout=30) == 0, st.log()[-3000:]
    log = st.log()
    assert "process exiting" in log, log[-3000:]
    assert "drained; exiting" in log, log[-3000:]
    assert "drainTimeout passed while the control thread was busy" \
        not in log, log[-3000:]
