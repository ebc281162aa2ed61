#!/usr/bin/env bash
# Builds strait's container image with buildah, no daemon: FROM scratch
# plus the strait binary, the shared libraries it loads (ldd), a passwd
# and group with the user strait (uid/gid 1337, as Istio's proxy) and the
# default /etc/strait. It runs as that user, needs no writable root
# filesystem (state goes to a /var/lib/strait volume when the CA is on),
# and its entrypoint is `strait run -c /etc/strait/strait.yaml`.
# Output: an OCI layout (for umoci and skopeo) in OUT, tag TAG.
# Usage: packaging/container/build.sh [STRAIT_BINARY [OUT [TAG]]]
#        (default build/strait, packages/image, the package version)
set -euo pipefail
top="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
bin="$(realpath "${1:-$top/build/strait}")"
out="${2:-$top/packages/image}"
tag="${3:-$(sed -n 's/^AC_INIT(\[strait\], \[\([^]]*\)\].*/\1/p' "$top/configure.ac")}"
uid=1337
tmp="$(mktemp -d)"
root="$tmp/rootfs"
# buildah keeps its own storage under tmp: nothing of the host's changes.
bh=(buildah --storage-driver vfs --root "$tmp/storage" --runroot "$tmp/run")
ctr=""
cleanup() {
    [ -n "$ctr" ] && "${bh[@]}" rm "$ctr" >/dev/null 2>&1 || true
    rm -rf "$tmp"
}
trap cleanup EXIT

# The root filesystem: the binary at the path the packages use, each
# library at the path ldd resolved (BoringSSL's RUNPATH stays valid).
mkdir -p "$root"/{usr/sbin,etc/strait/conf.d,etc/strait/credentials,var/lib/strait,tmp}
install -m 0755 "$bin" "$root/usr/sbin/strait"
# strait's Lua modules and example policies (lua.path in strait.yaml).
mkdir -p "$root/usr/share/strait"
cp -r "$top/lua" "$root/usr/share/strait/lua"
ldd "$bin" | awk '/=> \// { print $3 } /^\t\/lib/ { print $1 }' | sort -u |
    while read -r lib; do
        mkdir -p "$root$(dirname "$lib")"
        cp -L "$lib" "$root$lib"
    done
# The loader is also where the ELF interpreter says (/lib64 on amd64).
interp="$(readelf -l "$bin" | sed -n 's/.*interpreter: \(.*\)]/\1/p')"
mkdir -p "$root$(dirname "$interp")"
[ -e "$root$interp" ] || cp -L "$interp" "$root$interp"
cat >"$root/etc/passwd" <<PASSWD
root:x:0:0:root:/:/sbin/nologin
strait:x:$uid:$uid:strait:/var/lib/strait:/sbin/nologin
PASSWD
cat >"$root/etc/group" <<GROUP
root:x:0:
strait:x:$uid:
GROUP
printf 'hosts: files dns\n' >"$root/etc/nsswitch.conf"
# Container runtimes mount the pod's resolv.conf and hosts over these.
: >"$root/etc/resolv.conf"
printf '127.0.0.1 localhost\n::1 localhost\n' >"$root/etc/hosts"
install -m 0644 "$top/packaging/container/strait.yaml" "$root/etc/strait/strait.yaml"
chown -R "$uid:$uid" "$root/var/lib/strait"
chmod 0750 "$root/var/lib/strait"
chmod 1777 "$root/tmp"

ctr="$("${bh[@]}" from --isolation chroot scratch)"
"${bh[@]}" copy "$ctr" "$root/" /
"${bh[@]}" config \
    --user "$uid:$uid" \
    --workingdir /var/lib/strait \
    --entrypoint '["/usr/sbin/strait", "run", "-c", "/etc/strait/strait.yaml"]' \
    --cmd '[]' \
    --port 15021/tcp \
    --port 15090/tcp \
    --stop-signal SIGTERM \
    --volume /var/lib/strait \
    --label org.opencontainers.image.title=strait \
    --label "org.opencontainers.image.version=$tag" \
    "$ctr"
rm -rf "$out"
mkdir -p "$(dirname "$out")"
"${bh[@]}" commit --format oci "$ctr" "oci:$out:$tag" >/dev/null
echo "container: oci:$out:$tag ($(du -sh "$out" | cut -f1))"
