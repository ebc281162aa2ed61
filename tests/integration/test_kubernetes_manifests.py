"""scripts/check-kubernetes, the offline check of packaging/kubernetes/:
the manifests as shipped pass; a misspelled field, a value of the wrong
type and a missing required field are each refused with the path of the
field (what `kubectl apply --dry-run=client` would catch with an API
server to fetch the schema from)."""
import os
import shutil
import subprocess

import pytest

from conftest import STRAIT

SRC = os.environ.get("STRAIT_SRCDIR",
                     os.path.join(os.path.dirname(__file__), "..", ".."))
CHECK = os.path.join(SRC, "scripts", "check-kubernetes")
MANIFESTS = os.path.join(SRC, "packaging", "kubernetes")


def run(d):
    return subprocess.run(["/usr/bin/python3", CHECK, STRAIT, str(d)],
                          capture_output=True, text=True, timeout=120)


@pytest.fixture
def copy(tmp_path):
    d = tmp_path / "k8s"
    shutil.copytree(MANIFESTS, d)
    return d


def edit(d, old, new):
    p = d / "strait-ingress.yaml"
    text = p.read_text()
    assert old in text
    p.write_text(text.replace(old, new, 1))


def test_shipped_manifests_pass(copy):
    r = run(copy)
    assert r.returncode == 0, r.stderr
    assert "documents" in r.stdout


@pytest.mark.parametrize("old,new,said", [
    ("readOnlyRootFilesystem: true", "readOnlyRootFilesytem: true",
     "unknown field 'readOnlyRootFilesytem' in V1SecurityContext"),
    ("terminationGracePeriodSeconds: 30",
     "terminationGracePeriodSeconds: \"30\"",
     "spec.template.spec.terminationGracePeriodSeconds: not an integer"),
    ("        - name: strait\n", "        - nme: strait\n",
     "unknown field 'nme' in V1Container"),
    # A container without its required name (the field removed).
    ("        - name: strait\n          image:", "        - image:",
     "Invalid value for `name`, must not be `None`"),
])
def test_faults_are_refused_with_their_path(copy, old, new, said):
    edit(copy, old, new)
    r = run(copy)
    assert r.returncode == 1, r.stdout + r.stderr
    assert said in r.stderr, r.stderr


@pytest.mark.parametrize("old,new,said", [
    # A write verb: strait only reads.
    ("    verbs: [get, list, watch]\n  - apiGroups: [strait.io]",
     "    verbs: [get, list, watch, update]\n  - apiGroups: [strait.io]",
     "verbs ['get', 'list', 'watch', 'update'] (want get, list, watch)"),
    # ConfigMaps are not read: granting them is refused, so is leaving
    # one out.
    ("resources: [services, secrets, namespaces, nodes, pods]",
     "resources: [services, secrets, namespaces, nodes, pods, configmaps]",
     "grants [('', 'configmaps')] unlike what strait reads"),
    ("resources: [luapolicies, meshlinks]", "resources: [luapolicies]",
     "grants [('strait.io', 'meshlinks')] unlike what strait reads"),
    ("    name: strait-ingressgateway\n    namespace: istio-system",
     "    name: someone-else\n    namespace: istio-system",
     "not the Deployment's ServiceAccount"),
])
def test_rbac_grants_exactly_what_the_kubernetes_source_reads(copy, old, new,
                                                              said):
    p = copy / "rbac.yaml"
    text = p.read_text()
    assert old in text
    p.write_text(text.replace(old, new, 1))
    r = run(copy)
    assert r.returncode == 1, r.stdout + r.stderr
    assert said in r.stderr, r.stderr


def test_check_knows_every_kind_the_source_watches():
    """The exact-RBAC check's list (KUBE_READS) is the kinds table of
    src/control/source_kube.c, group and plural: a kind added to the
    source without its ClusterRole rule fails here."""
    import ast
    import re
    with open(CHECK) as f:
        tree = ast.parse(f.read())
    (reads,) = [ast.literal_eval(n.value) for n in tree.body
                if isinstance(n, ast.Assign) and
                getattr(n.targets[0], "id", "") == "KUBE_READS"]
    with open(os.path.join(SRC, "src", "control", "source_kube.c")) as f:
        text = f.read()
    table = text[text.index("kinds[] = {"):text.index("#define NKINDS")]
    watched = set()
    # Each row: {"name", "Kind", "/api/v1" or "/apis/GROUP/VERSION", ...}.
    for m in re.finditer(r'\{"[\w.]+",\s*"(\w+)",\s*"(/api/v1|/apis/([\w.]+)/\w+)",\s*'
                         r'"[\w./]+",\s*"(\w+)"', table):
        watched.add((m.group(3) or "", m.group(4)))
    assert ("strait.io", "meshlinks") in watched
    assert ("gateway.networking.k8s.io", "httproutes") in watched
    assert watched == reads
