#!/usr/bin/env bash
# Installs the .deb into a clean root and checks what it put there: this
# machine has no systemd as PID 1, so the root is a throw-away overlay of
# this Debian system (its libraries satisfy the package's Depends) in which
# systemctl is absent, and dpkg runs chrooted into it. Checks the files,
# their owners and modes, the conffile, the system user made by postinst,
# the unit enabled, an upgrade (reinstall) and a purge (user and state
# gone). Nothing outside the overlay changes.
# Usage: scripts/test-deb-install.sh packages/strait_*.deb
set -euo pipefail
deb="$(realpath "$1")"
tmp="$(mktemp -d)"
root="$tmp/root"
mkdir -p "$tmp/upper" "$tmp/work" "$root"
cleanup() {
    umount "$root/proc" 2>/dev/null || true
    umount "$root" 2>/dev/null || true
    rm -rf "$tmp"
}
trap cleanup EXIT
mount -t overlay overlay \
    -o "lowerdir=/,upperdir=$tmp/upper,workdir=$tmp/work" "$root"
mount -t proc proc "$root/proc"
in_root() { chroot "$root" "$@"; }
fail() { echo "test-deb-install: $*" >&2; exit 1; }
# mode owner:group path
expect() {
    local got
    got="$(in_root stat -c '%a %U:%G' "$3")" || fail "$3 is missing"
    [ "$got" = "$1 $2" ] || fail "$3: $got, want $1 $2"
}

if in_root getent passwd strait >/dev/null; then
    fail "the root already has a user strait"
fi
# No systemd: the maintainer scripts must cope, as debhelper's do.
rm -f "$root/usr/bin/systemctl" "$root/bin/systemctl"
rm -rf "$root/run/systemd/system"
cp "$deb" "$root/tmp/strait.deb"

in_root dpkg -i /tmp/strait.deb
in_root dpkg-query -W -f='${Status}\n' strait | grep -qx 'install ok installed' ||
    fail "strait is not installed"

# The system user: a system uid, its own group, no login, home the state.
IFS=: read -r _ _ uid gid _ home shell < <(in_root getent passwd strait)
[ "$uid" -ge 100 ] && [ "$uid" -lt 1000 ] || fail "uid $uid is not a system uid"
[ "$(in_root getent group strait | cut -d: -f3)" = "$gid" ] || fail "no group strait"
[ "$home" = /var/lib/strait ] || fail "home is $home"
case "$shell" in */nologin | */false) ;; *) fail "login shell $shell" ;; esac

expect 755 root:root /usr/sbin/strait
expect 644 root:root /etc/strait/strait.yaml
expect 755 root:root /etc/strait/conf.d
expect 750 root:strait /etc/strait/credentials
expect 750 strait:strait /var/lib/strait
expect 750 strait:strait /var/log/strait
expect 644 root:root /lib/systemd/system/strait.service
expect 644 root:root /usr/share/man/man8/strait.8.gz
expect 644 root:root /usr/share/man/man5/strait.yaml.5.gz
in_root dpkg-query --showformat='${Conffiles}\n' --show strait |
    grep -q '/etc/strait/strait.yaml' || fail "strait.yaml is not a conffile"
[ -L "$root/etc/systemd/system/multi-user.target.wants/strait.service" ] ||
    fail "the unit is not enabled"
# The installed configuration is valid and the binary finds its libraries.
in_root /usr/sbin/strait check -c /etc/strait/strait.yaml
in_root /usr/sbin/strait version >/dev/null
# The user strait can read the configuration it will run with.
in_root sh -c 'cd /var/lib/strait && exec setpriv --reuid=strait --regid=strait \
    --init-groups /usr/sbin/strait check -c /etc/strait/strait.yaml' ||
    fail "strait cannot read its configuration as user strait"

# An upgrade (the same version again) configures with the old version set;
# without systemd nothing is reloaded and nothing fails. A changed
# conffile is kept.
echo "# local change" >>"$root/etc/strait/strait.yaml"
in_root dpkg -i --force-confold /tmp/strait.deb
grep -q '^# local change' "$root/etc/strait/strait.yaml" || fail "conffile replaced"

# remove keeps the conffiles and the user; purge takes them and the state.
in_root dpkg -r strait
[ -f "$root/etc/strait/strait.yaml" ] || fail "remove took the conffile"
in_root getent passwd strait >/dev/null || fail "remove took the user"
in_root dpkg -P strait
in_root getent passwd strait >/dev/null && fail "purge left the user"
in_root getent group strait >/dev/null && fail "purge left the group"
[ ! -e "$root/var/lib/strait" ] || fail "purge left /var/lib/strait"
[ ! -e "$root/etc/strait/strait.yaml" ] || fail "purge left strait.yaml"
[ ! -L "$root/etc/systemd/system/multi-user.target.wants/strait.service" ] ||
    fail "purge left the unit enabled"
echo "test-deb-install: 1 passed, 0 failed"
