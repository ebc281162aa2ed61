#!/usr/bin/env bash
# Installs the Debian packages strait needs to build (and, with --test, to
# run every test), only those missing; sudo only when not root.
set -euo pipefail

build_pkgs=(gcc make autoconf automake pkg-config
    libevent-dev android-libboringssl-dev libnghttp2-dev liblua5.4-dev
    libmaxminddb-dev libyaml-dev libpcre2-dev zlib1g-dev libcmocka-dev)
test_pkgs=(python3 python3-pytest python3-pytest-xdist python3-prometheus-client python3-grpcio
    python3-protobuf protobuf-compiler libprotobuf-dev
    libmaxmind-db-writer-perl
    python3-h2 python3-cryptography curl nghttp2-client wrk openssl clang-14
    libclang-rt-14-dev clang-format-14
    testssl.sh systemd
    dpkg-dev debhelper lintian rpm rpmlint buildah umoci python3-yaml
    python3-kubernetes
    etcd-server etcd-client prometheus)

pkgs=("${build_pkgs[@]}")
if [ "${1:-}" = "--test" ]; then
    pkgs+=("${test_pkgs[@]}")
fi

missing=()
for p in "${pkgs[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed"; then
        missing+=("$p")
    fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

sudo=""
if [ "$(id -u)" -ne 0 ]; then
    sudo="sudo"
fi
echo "installing: ${missing[*]}"
# Another apt-get or unattended-upgrades may hold the dpkg lock on a fresh
# machine: apt waits for it (DPkg::Lock::Timeout, bounded) instead of
# failing at once. `apt-get update` takes the lists lock, which that
# option does not cover on Debian 12's apt, so it is retried, also bounded.
lock_wait=600
apt_opts=(-o "DPkg::Lock::Timeout=$lock_wait")
for try in 1 2 3 4 5 6 7 8 9 10; do
    if $sudo apt-get "${apt_opts[@]}" update -qq; then
        break
    fi
    if [ "$try" -eq 10 ]; then
        echo "deps: apt-get update failed 10 times" >&2
        exit 1
    fi
    echo "deps: apt-get update failed (lock held?), try $try of 10" >&2
    sleep 30
done
DEBIAN_FRONTEND=noninteractive $sudo apt-get "${apt_opts[@]}" install -y -qq \
    --no-install-recommends "${missing[@]}"
