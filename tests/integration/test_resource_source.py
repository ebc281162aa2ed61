"""The config directory of Istio resources: loaded at start, reloaded on
change (inotify), SIGHUP and POST /reload; a bad snapshot never replaces
the running one."""
import json
import os
import signal
import subprocess

from conftest import STRAIT, free_port, wait_for

GOOD = """apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: backend, namespace: default}
spec:
  hosts: [backend.example.com]
  location: MESH_EXTERNAL
  resolution: STATIC
  ports: [{number: 80, name: http, protocol: HTTP}]
  endpoints: [{address: 127.0.0.1}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: vs, namespace: default}
spec:
  hosts: [backend.example.com]
  http:
  - route:
    - destination: {host: backend.example.com}
"""

BAD = """apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: broken, namespace: default}
spec:
  hosts: [x.example.com]
  gateways: [edge]  # bound to a gateway: one bound only to mesh is ignored
  http:
  - route:
    - destination: {host: nowhere.example.com}
"""


def names(st):
    dump = json.loads(st.get("/config_dump")[1])
    return sorted(r["name"] for r in dump["resources"]["resources"])


def write(path, text):
    tmp = path.with_name("." + path.name)
    tmp.write_text(text)
    os.replace(tmp, path)  # what editors and config tools do


def start(strait_factory, tmp_path):
    conf = tmp_path / "conf.d"
    conf.mkdir()
    write(conf / "good.yaml", GOOD)
    st = strait_factory(extra=f"config: {{dir: \"{conf}\", debounce: 50ms}}\n")
    return st.start(), conf


def test_resources_loaded_at_start(strait_factory, tmp_path):
    st, _ = start(strait_factory, tmp_path)
    assert names(st) == ["backend", "vs"]
    assert st.stats()["resources.count"] == 2


def test_change_in_directory_is_picked_up(strait_factory, tmp_path):
    st, conf = start(strait_factory, tmp_path)
    write(conf / "more.yaml", GOOD.replace("name: vs", "name: vs2")
          .replace("name: backend", "name: backend2"))
    wait_for(lambda: names(st) == ["backend", "backend2", "vs", "vs2"], 10,
             "the new resources")
    assert st.stats()["resources.reloads_ok"] >= 2


def test_bad_snapshot_keeps_the_running_one(strait_factory, tmp_path):
    st, conf = start(strait_factory, tmp_path)
    write(conf / "bad.yaml", BAD)
    wait_for(lambda: st.stats()["resources.reloads_failed"] == 1, 10, "refused reload")
    assert names(st) == ["backend", "vs"]
    code, body, _ = st.get("/healthz/ready")
    assert code == 200
    assert "IST0101" in body and "nowhere.example.com" in body
    assert "bad.yaml" in st.log()
    # Fixing it clears the error.
    (conf / "bad.yaml").unlink()
    wait_for(lambda: "resources.last_error" not in st.get("/stats")[1], 10,
             "the error to clear")
    assert names(st) == ["backend", "vs"]


def test_reload_on_sighup_and_admin(strait_factory, tmp_path):
    st, conf = start(strait_factory, tmp_path)
    before = st.stats()["resources.reloads_ok"]
    st.signal(signal.SIGHUP)
    wait_for(lambda: st.stats()["resources.reloads_ok"] == before + 1, 10, "SIGHUP")
    assert st.get("/reload", method="POST")[0] == 200
    wait_for(lambda: st.stats()["resources.reloads_ok"] == before + 2, 10, "POST /reload")


def test_invalid_resources_at_start_exit_1(tmp_path):
    conf = tmp_path / "conf.d"
    conf.mkdir()
    (conf / "bad.yaml").write_text(BAD)
    cfg = tmp_path / "s.yaml"
    cfg.write_text(f"workers: 1\nadmin: {{address: 127.0.0.1:{free_port()}}}\n"
                   f"config: {{dir: \"{conf}\"}}\n")
    r = subprocess.run([STRAIT, "run", "-c", str(cfg)], capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 1
    assert "Error [IST0101]" in r.stderr and "bad.yaml" in r.stderr


def kube_volume(d, version, files):
    """Lays out d as the kubelet does a ConfigMap or Secret volume:
    ..<version>/ holds the files, ..data points at it, and each name is a
    symlink through ..data. A later call swaps ..data atomically to the
    new version and removes the old one, exactly as the kubelet updates."""
    d.mkdir(exist_ok=True)
    new = d / f"..{version}"
    new.mkdir()
    for name, text in files.items():
        (new / name).write_text(text)
    old = (d / "..data").resolve() if (d / "..data").exists() else None
    tmp = d / "..data_tmp"
    os.symlink(new.name, tmp)
    os.replace(tmp, d / "..data")
    for name in files:
        if not (d / name).is_symlink():
            os.symlink(f"..data/{name}", d / name)
    if old is not None:
        for f in old.iterdir():
            f.unlink()
        old.rmdir()


def test_configmap_volume_update_is_picked_up(strait_factory, tmp_path):
    """Issue 12 item 4: the kubelet's ..data swap is a change (names
    starting with a dot used to be ignored as editors' temporaries)."""
    conf = tmp_path / "conf.d"
    kube_volume(conf, "2026_12_01_00_00_00.1", {"good.yaml": GOOD})
    st = strait_factory(
        extra=f"config: {{dir: \"{conf}\", debounce: 50ms}}\n").start()
    assert names(st) == ["backend", "vs"]
    kube_volume(conf, "2026_12_01_00_00_01.2",
                {"good.yaml": GOOD.replace("name: vs", "name: vs-v2")})
    wait_for(lambda: names(st) == ["backend", "vs-v2"], 10,
             "the ConfigMap's new version")


def test_file_written_in_two_steps_is_read_whole(strait_factory, tmp_path):
    """Issue 12 item 11: a file written in two steps, kept open, with a
    pause of several debounce periods at a document boundary, is loaded
    once, whole: no snapshot with only its first half is applied."""
    import time
    st, conf = start(strait_factory, tmp_path)
    before = st.stats()["resources.reloads_ok"]
    first, second = GOOD.split("---\n")
    more = conf / "more.yaml"
    with open(more, "w") as f:
        f.write(first.replace("name: backend", "name: backend2")
                .replace("hosts: [backend.example.com]",
                         "hosts: [backend2.example.com]"))
        f.write("---\n")
        f.flush()
        time.sleep(0.5)  # the writer's pause (ten debounce periods)
        f.write(second.replace("name: vs", "name: vs2")
                .replace("backend.example.com", "backend2.example.com"))
    wait_for(lambda: names(st) == ["backend", "backend2", "vs", "vs2"], 10,
             "the whole file")
    assert st.stats()["resources.reloads_ok"] == before + 1
    assert st.stats()["resources.reloads_failed"] == 0


def resources(st):
    dump = json.loads(st.get("/config_dump")[1])
    return {(r["kind"], r["namespace"], r["name"]): r
            for r in dump["resources"]["resources"]}


def test_resource_in_two_files_keeps_the_one_in_effect(strait_factory, tmp_path):
    """Issue 13 item 6: a second definition of default/vs in a file named
    after the first used to replace it by file-name order. It is an error
    naming both places; the running definition stays."""
    st, conf = start(strait_factory, tmp_path)
    write(conf / "zz.yaml", """apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: vs, namespace: default}
spec:
  hosts: [other.example.com]
  http:
  - route:
    - destination: {host: backend.example.com}
""")
    wait_for(lambda: st.stats()["resources.reloads_failed"] == 1, 10,
             "refused reload")
    vs = resources(st)[("VirtualService", "default", "vs")]
    assert vs["file"].endswith("good.yaml")
    assert vs["spec"]["hosts"] == ["backend.example.com"]
    err = st.get("/healthz/ready")[1]
    assert "STR0004" in err
    assert f"{conf}/zz.yaml:1:1" in err and f"{conf}/good.yaml:11:1" in err


def test_subdirectory_is_the_namespace_of_its_files(strait_factory, tmp_path):
    """Issue 13 item 5: conf.d/foo/x.yaml without metadata.namespace is in
    foo (kubectl apply -n foo); config.defaultNamespace is that of the top
    directory's files; an edit in the subdirectory is a change."""
    conf = tmp_path / "conf.d"
    (conf / "shop").mkdir(parents=True)
    se = GOOD.split("---\n")[0].replace("namespace: default", "namespace: ns1")
    write(conf / "se.yaml", se.replace("metadata: {name: backend, namespace: ns1}",
                                       "metadata: {name: backend}"))
    write(conf / "shop" / "vs.yaml", """apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: vs}
spec:
  hosts: [backend.example.com]
  http:
  - route:
    - destination: {host: backend.example.com}
""")
    st = strait_factory(extra=f"config: {{dir: \"{conf}\", debounce: 50ms, "
                        f"defaultNamespace: edge}}\n").start()
    assert set(resources(st)) == {("ServiceEntry", "edge", "backend"),
                                  ("VirtualService", "shop", "vs")}
    write(conf / "shop" / "vs2.yaml",
          (conf / "shop" / "vs.yaml").read_text().replace("name: vs", "name: vs2"))
    wait_for(lambda: ("VirtualService", "shop", "vs2") in resources(st), 10,
             "the subdirectory's new file")
    # A new namespace directory is watched too.
    (conf / "late").mkdir()
    write(conf / "late" / "vs.yaml", (conf / "shop" / "vs.yaml").read_text())
    wait_for(lambda: ("VirtualService", "late", "vs") in resources(st), 10,
             "the new subdirectory's file")
