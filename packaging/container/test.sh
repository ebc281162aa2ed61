#!/usr/bin/env bash
# Shows that the image starts and serves without a container engine:
# umoci unpacks it into a bundle, its config must name the non-root user
# and the entrypoint, and the rootfs, bind-mounted read-only, runs strait
# in a chroot as that user with a ConfigMap-like /etc/strait mounted over
# it; /healthz/ready answers and a TCP listener relays to an upstream on
# loopback. SIGTERM drains and exits 0.
# Usage: packaging/container/test.sh [OCI_LAYOUT:TAG]
set -euo pipefail
top="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
version="$(sed -n 's/^AC_INIT(\[strait\], \[\([^]]*\)\].*/\1/p' "$top/configure.ac")"
image="${1:-$top/packages/image:$version}"
tmp="$(mktemp -d)"
bundle="$tmp/bundle"
pid="" up=""
fail() { echo "container-test: $*" >&2; [ -f "$tmp/strait.log" ] && tail -n 30 "$tmp/strait.log" >&2; exit 1; }
cleanup() {
    [ -n "$pid" ] && { kill -KILL "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; } || true
    [ -n "$up" ] && { kill "$up" 2>/dev/null; wait "$up" 2>/dev/null; } || true
    for m in etc/resolv.conf etc/strait proc ""; do
        mountpoint -q "$bundle/rootfs/$m" 2>/dev/null &&
            { umount "$bundle/rootfs/$m" || umount -l "$bundle/rootfs/$m"; }
    done
    rm -rf "$tmp"
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

umoci unpack --image "$image" "$bundle" >/dev/null
python3 - "$bundle/config.json" <<'PY' || fail "the image config is not what the manifests expect"
import json, sys
c = json.load(open(sys.argv[1]))
p = c["process"]
assert p["user"]["uid"] == 1337 and p["user"]["gid"] == 1337, p["user"]
assert p["args"] == ["/usr/sbin/strait", "run", "-c", "/etc/strait/strait.yaml"], p["args"]
PY
[ -x "$bundle/rootfs/usr/sbin/strait" ] || fail "no /usr/sbin/strait in the image"

# A ConfigMap stand-in: its own strait.yaml on free loopback ports.
admin="$(free_port)" port="$(free_port)" upport="$(free_port)"
mkdir -p "$tmp/etc/conf.d" "$tmp/etc/credentials"
cat >"$tmp/etc/strait.yaml" <<YAML
workers: 1
admin: {address: 127.0.0.1:$admin}
config: {dir: /etc/strait/conf.d}
credentials: {dir: /etc/strait/credentials}
listeners:
  - {name: relay, address: "127.0.0.1:$port", upstreams: ["127.0.0.1:$upport"]}
YAML
chmod -R a+rX "$tmp/etc"
mkdir -p "$tmp/www" && echo "hello from upstream" >"$tmp/www/index.html"
python3 -m http.server "$upport" --bind 127.0.0.1 --directory "$tmp/www" \
    >/dev/null 2>&1 &
up=$!
for _ in $(seq 1 100); do
    curl -fsS "http://127.0.0.1:$upport/" >/dev/null 2>&1 && break
    sleep 0.1
done

# Read-only root filesystem, as readOnlyRootFilesystem: true makes it.
mount --bind "$bundle/rootfs" "$bundle/rootfs"
mount -o remount,bind,ro "$bundle/rootfs"
mount --bind "$tmp/etc" "$bundle/rootfs/etc/strait"
# The runtime's resolv.conf, as the kubelet's (DNS for ServiceEntries).
mount --bind /etc/resolv.conf "$bundle/rootfs/etc/resolv.conf"
mount -t proc proc "$bundle/rootfs/proc" 2>/dev/null || true
touch "$bundle/rootfs/probe" 2>/dev/null && fail "the rootfs is writable"

chroot --userspec=1337:1337 "$bundle/rootfs" \
    /usr/sbin/strait run -c /etc/strait/strait.yaml >"$tmp/strait.log" 2>&1 &
pid=$!
for _ in $(seq 1 150); do
    curl -fsS "http://127.0.0.1:$admin/healthz/ready" >/dev/null 2>&1 && break
    kill -0 "$pid" 2>/dev/null || fail "strait exited"
    sleep 0.1
done
curl -fsS "http://127.0.0.1:$admin/healthz/ready" | grep -q LIVE || fail "not ready"
[ "$(awk '/^Uid:/ { print $2 }' "/proc/$pid/status")" = 1337 ] || fail "not uid 1337"
curl -fsS --max-time 10 "http://127.0.0.1:$port/" | grep -q "hello from upstream" ||
    fail "the listener does not relay"
kill -TERM "$pid"
wait "$pid" || fail "exit code $? after SIGTERM"
pid=""
echo "container-test: 1 passed, 0 failed"
