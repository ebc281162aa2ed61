"""Sites in network namespaces a test creates (issue 15 item 7).

Net() builds, for one test: a "WAN" namespace routing between the sites,
and per site a namespace with two veth links: wan0 (10.X.I.2/24, default
route through the WAN namespace at 10.X.I.1) and mgmt0 (10.X.100+I.2/24,
its peer 10.X.100+I.1 in the test's own namespace, so the test reaches a
site's admin API and edge listeners while the sites only reach each other
through the WAN). X is picked per run among 10.X.0.0/16 ranges this host
does not use; every name has a random suffix. close() removes every
namespace and veth, whatever state the test left.

strait runs in a site as `ip netns exec NS strait run` (that execs, so the
PID is strait's and it is stopped by it); the test's own servers are
sockets opened inside a namespace (inside(ns): setns for the calling
thread only, then back), so an Upstream or recorder listens there.
"""
import ctypes
import fcntl
import os
import random
import subprocess

import pytest

from conftest import STRAIT, Strait, free_port

CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


def ip(*args, ns=None, check=True):
    cmd = ["ip", "netns", "exec", ns, "ip", *args] if ns else ["ip", *args]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    if check and p.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)}: {p.stderr.strip()}")
    return p


def in_ns(ns, *cmd, check=True):
    p = subprocess.run(["ip", "netns", "exec", ns, *cmd], capture_output=True,
                       text=True, timeout=30)
    if check and p.returncode != 0:
        raise AssertionError(f"{ns}: {' '.join(cmd)}: {p.stderr.strip()}")
    return p


class inside:
    """with inside(ns): sockets made in the block belong to ns (this
    thread only; threads started in the block inherit it)."""

    def __init__(self, ns):
        self.ns = ns

    def __enter__(self):
        self.home = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
        fd = os.open(f"/run/netns/{self.ns}", os.O_RDONLY)
        try:
            if _libc.setns(fd, CLONE_NEWNET) != 0:
                e = ctypes.get_errno()
                raise OSError(e, f"setns {self.ns}: {os.strerror(e)}")
        finally:
            os.close(fd)

    def __exit__(self, *exc):
        try:
            if _libc.setns(self.home, CLONE_NEWNET) != 0:
                e = ctypes.get_errno()
                raise OSError(e, f"setns back: {os.strerror(e)}")
        finally:
            os.close(self.home)


def _used_prefixes():
    out = ip("-4", "route", "show", "table", "all").stdout + \
        ip("-4", "addr").stdout
    return out


class Net:
    """The namespaces and links of one test: sites 1..n and the WAN."""

    def __init__(self, n_sites):
        self.sfx = "%06x" % random.getrandbits(24)
        self.namespaces = []
        self.root_links = []
        try:
            # Held while a range is picked and its host-side addresses
            # added, so two runs at once (plain and ASan) never share one.
            with open("/run/strait-test-netns.lock", "w") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                used = _used_prefixes()
                for _ in range(100):
                    x = random.randint(64, 250)
                    if f"10.{x}." not in used:
                        break
                else:
                    raise AssertionError("no free 10.X.0.0/16 range on "
                                         "this host")
                self.x = x
                self.wan = self._ns("wan")
                in_ns(self.wan, "sysctl", "-q", "-w",
                      "net.ipv4.ip_forward=1")
                self.sites = [self._site(i) for i in range(1, n_sites + 1)]
        except BaseException:
            # Whatever was made so far goes too.
            self.close()
            raise

    def _ns(self, role):
        name = f"st-{role}-{self.sfx}"
        p = subprocess.run(["ip", "netns", "add", name], capture_output=True,
                           text=True, timeout=30)
        if p.returncode != 0:
            # CI runs these as root: a missing `ip netns` is a failure of
            # the machine, never a skip.
            pytest.fail(f"`ip netns add {name}` failed ({p.stderr.strip()}): "
                        "these tests need root and iproute2 network "
                        "namespaces")
        self.namespaces.append(name)
        ip("link", "set", "lo", "up", ns=name)
        return name

    def _site(self, i):
        ns = self._ns(f"s{i}")
        x = self.x
        # WAN link: wan0 in the site, w<i> in the WAN namespace.
        ip("link", "add", "wan0", "netns", ns, "type", "veth", "peer",
           "name", f"w{i}", "netns", self.wan)
        ip("addr", "add", f"10.{x}.{i}.1/24", "dev", f"w{i}", ns=self.wan)
        ip("link", "set", f"w{i}", "up", ns=self.wan)
        ip("addr", "add", f"10.{x}.{i}.2/24", "dev", "wan0", ns=ns)
        ip("link", "set", "wan0", "up", ns=ns)
        ip("route", "add", "default", "via", f"10.{x}.{i}.1", ns=ns)
        # Management link to the test's namespace.
        root = f"stm{self.sfx}{i}"
        ip("link", "add", root, "type", "veth", "peer", "name", "mgmt0",
           "netns", ns)
        self.root_links.append(root)
        ip("addr", "add", f"10.{x}.{100 + i}.1/24", "dev", root)
        ip("link", "set", root, "up")
        ip("addr", "add", f"10.{x}.{100 + i}.2/24", "dev", "mgmt0", ns=ns)
        ip("link", "set", "mgmt0", "up", ns=ns)
        return {"ns": ns, "wan": f"10.{x}.{i}.2", "mgmt": f"10.{x}.{100 + i}.2",
                "peer": f"10.{x}.{100 + i}.1", "wan_dev": f"w{i}"}

    def partition(self, i, up=False):
        """Site i's WAN link down (its routes go, so the others' packets
        to it meet "no route" at the WAN), or back up."""
        ip("link", "set", self.sites[i - 1]["wan_dev"], "up" if up else "down",
           ns=self.wan)

    def close(self):
        errors = []
        for ns in self.namespaces:
            p = subprocess.run(["ip", "netns", "del", ns], capture_output=True,
                               text=True, timeout=30)
            if p.returncode != 0:
                errors.append(p.stderr.strip())
        for link in self.root_links:
            # Gone with its peer's namespace; removed here if not.
            if ip("link", "show", link, check=False).returncode == 0:
                ip("link", "del", link, check=False)
        left = ip("netns", "list").stdout
        assert not any(ns in left for ns in self.namespaces), left
        assert not errors, errors


class NsStrait(Strait):
    """A strait run in namespace ns, its admin API on host (the site's
    management address)."""

    def __init__(self, tmp_path, ns, host, workers=1, extra=""):
        self.ns = ns
        self.host = host
        super().__init__(tmp_path, "", workers=workers, extra=extra)

    def write_config(self, listeners_yaml, extra="", raw=None):
        text = raw if raw is not None else (
            f"workers: {self.workers}\n"
            f"admin: {{address: {self.host}:{self.admin_port}}}\n"
            f"{extra}listeners:\n{listeners_yaml}\n")
        tmp = self.config.with_suffix(".tmp")
        tmp.write_text(text)
        os.replace(tmp, self.config)

    def url(self, path):
        return f"http://{self.host}:{self.admin_port}{path}"

    def start(self, wait=True, env=None):
        from conftest import wait_for
        self.logf = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            ["ip", "netns", "exec", self.ns, STRAIT, "run", "-c",
             str(self.config)], stdout=self.logf, stderr=self.logf, env=env)
        if wait:
            wait_for(self.ready_or_dead, 30, "strait to become ready")
            assert self.proc.poll() is None, self.log()
        return self


def port():
    """A port for a listener in a site: every port is free in a namespace
    of this test's own; this keeps them out of the ephemeral range."""
    return free_port()
