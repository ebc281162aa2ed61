"""`strait check` on LuaPolicies, with the real binary: a misspelt hook
name (which strait would never call), a source.file that is in no lua.path
directory (which `strait run` refuses), a file that does not compile and
a policy.config of the wrong shape are errors that name file:line:col;
a config of nested lists and maps passes and reaches the script as
tables (checked by running it)."""
import subprocess

from conftest import STRAIT

POLICY = """apiVersion: strait.io/v1alpha1
kind: LuaPolicy
metadata: {{name: {name}, namespace: default}}
spec:
{spec}
---
"""


def check(tmp_path, policies, lua_files=None):
    """Runs strait check -c on a bootstrap whose lua.path is tmp/lua and
    the policies (name -> spec text); returns (exit code, output)."""
    lua = tmp_path / "lua"
    lua.mkdir(exist_ok=True)
    for name, text in (lua_files or {}).items():
        (lua / name).write_text(text)
    boot = tmp_path / "boot.yaml"
    boot.write_text(f"lua: {{path: [\"{lua}\"]}}\nlisteners: []\n")
    res = tmp_path / "res"
    res.mkdir(exist_ok=True)
    (res / "p.yaml").write_text("".join(
        POLICY.format(name=n, spec=s) for n, s in policies.items()))
    p = subprocess.run([STRAIT, "check", "-c", str(boot), str(res)],
                       capture_output=True, text=True, timeout=60)
    return p.returncode, p.stdout + p.stderr


def test_source_file_outside_lua_path_is_an_error(tmp_path):
    code, out = check(tmp_path, {
        "gone": "  source: {file: nowhere.lua}",
        "here": "  source: {file: ok.lua}"},
        {"ok.lua": "function on_request(h) end\n"})
    assert code == 1, out
    assert "p.yaml:5:11) spec.source.file: 'nowhere.lua' is not in lua.path" \
        in out
    assert "LuaPolicy default/gone" in out
    assert "default/here" not in out


def test_unknown_hook_in_file_names_file_and_line(tmp_path):
    code, out = check(tmp_path, {"typo": "  source: {file: typo.lua}"},
                      {"typo.lua": "local x = 1\n"
                                   "function on_request(h) end\n"
                                   "function on_reponse(h)\nend\n"})
    assert code == 1, out
    assert "lua/typo.lua:3:1) spec.source.file: unknown hook 'on_reponse' " \
        "(did you mean on_response?)" in out


def test_unknown_hook_inline_names_yaml_line(tmp_path):
    code, out = check(tmp_path, {"inl": "  source:\n    inline: |\n"
                                        "      function on_request(h) end\n"
                                        "      function init(h) end\n"
                                        "      function On_Log(h) end\n"})
    assert code == 1, out
    # inline: is line 6; Lua line 3 is YAML line 9.
    assert "p.yaml:9:" in out
    assert "unknown hook 'On_Log' (did you mean on_log?)" in out


def test_file_that_does_not_compile(tmp_path):
    code, out = check(tmp_path, {"bad": "  source: {file: bad.lua}"},
                      {"bad.lua": "function on_request(h)\n  if then end\n"
                                  "end\n"})
    assert code == 1, out
    assert "lua/bad.lua:2:1) spec.source.file:" in out
    assert "unexpected symbol near 'then'" in out


def test_config_of_wrong_shape_has_position(tmp_path):
    code, out = check(tmp_path, {
        "list": "  source: {inline: 'x = 1'}\n  config: [a, b]",
        "deep": "  source: {inline: 'x = 1'}\n  config: "
                + "{a: " * 9 + "x" + "}" * 9})
    assert code == 1, out
    assert "p.yaml:6:11) spec.config: expected a mapping" in out
    assert "spec.config.a.a.a.a.a.a.a.a: nested deeper than 8 levels" in out


def test_nested_config_passes(tmp_path):
    code, out = check(tmp_path, {
        "ok": "  source: {file: ok.lua}\n"
              "  config:\n"
              "    keys: [k1, k2]\n"
              "    routes: {/a: {weight: 5}}\n"},
        {"ok.lua": "function on_request(h) end\n"})
    assert code == 0, out
