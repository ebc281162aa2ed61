"""The documentation runs: README.md and docs/ are checked against the
binary, so an example cannot go stale.

- Every relative link resolves: the file exists and, with a #fragment,
  the page has that heading.
- Every YAML block is checked with `strait check`: Istio and Kubernetes
  resources as they are, bootstrap blocks with `-c` (a block of several
  `---` documents is checked one document at a time). A block that is not
  strait's input (a pod's volumes) says so with a marker on the line
  above it: <!-- docs-test: skip REASON -->.
- The runnable examples run. In a page with such blocks, in order, in an
  empty directory: ```yaml file=PATH writes PATH; ```sh background
  [wait=PORT] starts a server (stopped by its PID at the end) and waits
  for PORT to accept; ```sh run [exit=N] [expect=TEXT]... runs the
  commands with bash -e and asserts the exit status and that each TEXT
  is in the output (servers a script starts itself are stopped by the
  PIDs it leaves in *.pid files). <!-- docs-test: ports P... --> on a page names the ports its
  examples use; each is replaced by a free one, so pages run in
  parallel with everything else.
"""
import os
import pathlib
import re
import shlex
import signal
import socket
import subprocess
import textwrap

import pytest

from conftest import SANITIZER_MARKERS, SRCDIR, STRAIT, free_port, wait_for

TOP = pathlib.Path(SRCDIR)
PAGES = sorted([TOP / "README.md"] + list((TOP / "docs").rglob("*.md")))

# Pages the index links to that are written separately and may not be in
# this tree yet; once present they are checked like any other.
OPTIONAL = {TOP / "docs" / n for n in (
    "gateway-api.md", "lua-cookbook.md", "client-addresses.md", "pods.md",
    "hardening-limits.md")}

FENCE = re.compile(r"^(\s*)```(.*)$")
MARK = re.compile(r"<!--\s*docs-test:\s*(\w+)\s*(.*?)\s*-->", re.S)


class Block:
    def __init__(self, page, line, lang, attrs, flags, text, skip):
        self.page, self.line, self.lang = page, line, lang
        self.attrs, self.flags, self.text, self.skip = attrs, flags, text, skip

    @property
    def id(self):
        return f"{self.page.relative_to(TOP)}:{self.line}"


def blocks(page):
    """The fenced blocks of page, with their info-string attributes and
    any skip marker on the line above the fence."""
    lines = page.read_text().split("\n")
    out = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, info = m.group(1), m.group(2).strip()
        j = i + 1
        while j < len(lines) and not re.match(r"^\s*```\s*$", lines[j]):
            j += 1
        words = shlex.split(info) if info else [""]
        attrs = dict(w.split("=", 1) for w in words[1:] if "=" in w)
        attrs["expect"] = [w[7:] for w in words[1:] if w.startswith("expect=")]
        flags = {w for w in words[1:] if "=" not in w}
        prev = next((lines[k] for k in range(i - 1, -1, -1)
                     if lines[k].strip()), "")
        skip = None
        sm = MARK.search(prev)
        if sm and sm.group(1) == "skip":
            skip = sm.group(2) or "marked skip"
        body = "\n".join(l[len(indent):] if l.startswith(indent) else l
                         for l in lines[i + 1:j])
        out.append(Block(page, i + 1, words[0], attrs, flags,
                         textwrap.dedent(body) + "\n", skip))
        i = j + 1
    return out


ALL = [b for p in PAGES for b in blocks(p)]


def slug(text):
    """GitHub's heading anchor."""
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return text.replace(" ", "-")


def anchors(page):
    out, inside = set(), False
    for line in page.read_text().split("\n"):
        if FENCE.match(line):
            inside = not inside
        elif not inside and re.match(r"^#+ ", line):
            out.add(slug(line.split(" ", 1)[1]))
    return out


def links(page):
    """(line, target) of every markdown link outside code blocks."""
    inside = False
    for n, line in enumerate(page.read_text().split("\n"), 1):
        if FENCE.match(line):
            inside = not inside
            continue
        if inside:
            continue
        for m in re.finditer(r"\]\(([^)\s]+)\)", re.sub(r"`[^`]*`", "",
                                                         line)):
            yield n, m.group(1)


def test_relative_links_resolve():
    bad = []
    for page in PAGES:
        for n, target in links(page):
            if re.match(r"^[a-z]+:", target):
                continue
            path, _, frag = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            where = f"{page.relative_to(TOP)}:{n}: {target}"
            if not dest.exists():
                if dest not in OPTIONAL:
                    bad.append(where + " (no such file)")
            elif frag and dest.suffix == ".md" and frag not in anchors(dest):
                bad.append(where + " (no such heading)")
    assert not bad, "\n".join(bad)


def test_every_page_is_in_an_index():
    """A page no index links to cannot be found: each page of docs/ is
    linked from docs/README.md or docs/reference/README.md."""
    linked = set()
    for index in (TOP / "docs" / "README.md",
                  TOP / "docs" / "reference" / "README.md"):
        linked |= {(index.parent / t.partition("#")[0]).resolve()
                   for _, t in links(index)}
    orphans = [str(p.relative_to(TOP)) for p in PAGES
               if p.parent != TOP and p.name != "README.md"
               and p not in linked]
    assert not orphans, orphans


def test_the_link_check_sees_a_broken_link(tmp_path):
    """The check above is not vacuous: it finds links and headings."""
    page = tmp_path / "p.md"
    page.write_text("# Title\n\n[a](#title) [b](#nope) [c](gone.md)\n"
                    "```\n[d](#not-a-link-in-code)\n```\n")
    found = [t for _, t in links(page)]
    assert found == ["#title", "#nope", "gone.md"]
    assert anchors(page) == {"title"}


def strait(*args, cwd, timeout=30):
    return subprocess.run([STRAIT, *args], capture_output=True, text=True,
                          cwd=cwd, timeout=timeout)


YAML = [b for b in ALL if b.lang == "yaml"]


@pytest.mark.parametrize("block", YAML, ids=[b.id for b in YAML])
def test_yaml_block_is_valid(block, tmp_path):
    if block.skip:
        pytest.skip(block.skip)
    # A block written by an example (file=broken/...) may be a mistake on
    # purpose; the example's own run asserts that it is refused.
    if block.attrs.get("file", "").startswith("broken/"):
        pytest.skip("a mistake on purpose; its page's example checks it")
    (tmp_path / "conf.d").mkdir()
    if "file" in block.attrs:
        return check_in_place(block, tmp_path)
    docs = [d for d in re.split(r"(?m)^---\s*$", block.text) if d.strip()]
    resources = [d for d in docs if re.search(r"(?m)^kind:", d)]
    assert not resources or len(resources) == len(docs), \
        "a block mixes resources and bootstrap keys"
    if resources:
        f = tmp_path / "r.yaml"
        f.write_text(block.text)
        r = strait("check", str(f), cwd=tmp_path)
        assert r.returncode == 0, f"{block.id}\n{block.text}\n{r.stdout}{r.stderr}"
        return
    for k, d in enumerate(docs):
        f = tmp_path / f"strait{k}.yaml"
        f.write_text(d)
        r = strait("check", "-c", str(f), cwd=tmp_path)
        assert r.returncode == 0, f"{block.id}\n{d}\n{r.stdout}{r.stderr}"


def check_in_place(block, tmp_path):
    """A file of a page's example is checked where the example puts it,
    beside the files the page wrote before it (a route names the Gateway
    of the block above): a resource file with its directory, a bootstrap
    file with -c."""
    for b in blocks(block.page):
        if "file" in b.attrs and not b.skip:
            f = tmp_path / b.attrs["file"]
            f.parent.mkdir(parents=True, exist_ok=True)
            f.write_text(b.text)
        if b is block or b.line == block.line:
            break
    name = block.attrs["file"]
    if re.search(r"(?m)^kind:", block.text):
        r = strait("check", str((tmp_path / name).parent), cwd=tmp_path)
    else:
        r = strait("check", "-c", name, cwd=tmp_path)
    assert r.returncode == 0, f"{block.id}\n{block.text}\n{r.stdout}{r.stderr}"


def page_ports(page):
    m = [sm for sm in MARK.finditer(page.read_text())
         if sm.group(1) == "ports"]
    return [int(p) for sm in m for p in sm.group(2).split()]


RUNNABLE = [p for p in PAGES if any(
    "run" in b.flags or "background" in b.flags or "file" in b.attrs
    for b in blocks(p))]


def test_runnable_pages_are_found():
    """The page a newcomer follows is among the runnable ones."""
    assert TOP / "docs" / "first-gateway.md" in RUNNABLE


def port_open(port):
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.mark.parametrize("page", RUNNABLE,
                         ids=[str(p.relative_to(TOP)) for p in RUNNABLE])
def test_page_example_runs(page, tmp_path):
    ports = {p: free_port() for p in page_ports(page)}

    def sub(text):
        for old, new in ports.items():
            text = re.sub(rf"(?<![\d.]){old}(?!\d)", str(new), text)
        return text

    bindir = tmp_path / ".bin"
    bindir.mkdir()
    (bindir / "strait").symlink_to(STRAIT)
    work = tmp_path / "work"
    work.mkdir()
    env = dict(os.environ, PATH=f"{bindir}:{os.environ['PATH']}")
    servers = []
    try:
        for b in blocks(page):
            if b.skip:
                continue
            if "file" in b.attrs:
                f = work / b.attrs["file"]
                f.parent.mkdir(parents=True, exist_ok=True)
                f.write_text(sub(b.text))
            elif "background" in b.flags:
                log = open(tmp_path / f"bg{b.line}.log", "w")
                p = subprocess.Popen(["bash", "-c", sub(b.text)], cwd=work,
                                     env=env, stdout=log, stderr=log,
                                     start_new_session=True)
                servers.append((p, log, b))
                if "wait" in b.attrs:
                    port = int(sub(b.attrs["wait"]))
                    wait_for(lambda: port_open(port) or p.poll() is not None,
                             timeout=15, what=f"{b.id}: port {port}")
                    assert p.poll() is None, \
                        f"{b.id} exited:\n" + (tmp_path / f"bg{b.line}.log").read_text()
            elif "run" in b.flags:
                r = subprocess.run(["bash", "-e", "-o", "pipefail", "-c",
                                    sub(b.text)], cwd=work, env=env,
                                   capture_output=True, text=True, timeout=30)
                out = r.stdout + r.stderr
                assert r.returncode == int(b.attrs.get("exit", "0")), \
                    f"{b.id}: exit {r.returncode}\n{out}"
                for text in b.attrs["expect"]:
                    assert text in out, f"{b.id}: no {text!r} in:\n{out}"
    finally:
        # A script that starts servers of its own says so by leaving
        # their PIDs in *.pid (as the page tells its reader to kill them).
        left = []
        for f in work.rglob("*.pid"):
            try:
                pid = int(f.read_text().split()[0])
                os.kill(pid, signal.SIGTERM)
                left.append(pid)
            except (ValueError, IndexError, ProcessLookupError):
                pass
        for pid in left:
            # They are not our children (their shell is gone): wait for
            # /proc to drop them, then make sure (the last etcd member of
            # a cluster takes seconds to give up on its peers).
            try:
                wait_for(lambda: not os.path.exists(f"/proc/{pid}") or
                         open(f"/proc/{pid}/stat").read().split()[2] == "Z",
                         timeout=3, what=f"pid {pid} to exit")
            except AssertionError:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        for p, log, b in servers:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
            log.close()
    for p, log, b in servers:
        text = pathlib.Path(log.name).read_text()
        for marker in SANITIZER_MARKERS:
            assert marker not in text, f"{b.id}:\n{text}"


def test_man_pages_come_from_the_docs_and_the_binary(tmp_path):
    """strait(8) is docs/reference/command-line.md, strait.yaml(5) the key
    table of `strait reference`, as the packages make them."""
    r = subprocess.run(["/usr/bin/python3", str(TOP / "scripts" / "gen-man"),
                        STRAIT, str(TOP / "docs" / "reference" /
                                    "command-line.md"), str(tmp_path)],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    page = (tmp_path / "strait.8").read_text()
    assert ".SH SYNOPSIS" in page
    assert "strait reference codes" in page
    assert "Exit codes: 0 ok" in page
    keys = (tmp_path / "strait.yaml.5").read_text()
    assert ".B admin.address" in keys
