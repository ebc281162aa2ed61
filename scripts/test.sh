#!/usr/bin/env bash
# The one command that sets up a fresh Debian 12 machine and runs every
# test: unit and integration tests in a -Werror build, the same again under
# ASan+UBSan, a short fuzz run of every libFuzzer target, and make
# distcheck. Exits non-zero on the first failure.
set -euo pipefail
top="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$top"
jobs="$(nproc)"
fuzz_seconds="${FUZZ_SECONDS:-20}"

step() { printf '\n=== %s\n' "$*"; }

step "dependencies and -Werror build"
DEPS_FLAGS=--test bash scripts/build.sh --enable-werror

check() {
    make -C "$1" -j"$jobs" check || {
        find "$1/tests" -name '*.log' -newer "$1/Makefile" -exec tail -n 60 {} +
        exit 1
    }
}

step "source checks: clang-format, layer order"
bash scripts/check-format
python3 scripts/check-layers

step "systemd unit: systemd-analyze verify, security exposure <= 2.0"
bash scripts/check-systemd build/strait

step "unit and integration tests"
check build

step "unit and integration tests under ASan+UBSan"
BUILD_DIR="$top/build-asan" bash scripts/build.sh --enable-werror --enable-sanitizers
check build-asan

step "fuzz targets, ${fuzz_seconds}s each"
BUILDDIR="$top/build" bash tests/fuzz/run.sh "$fuzz_seconds"

step "packages: .deb (lintian) and its install test, .rpm (rpmlint)"
JOBS="$jobs" bash scripts/build-packages.sh all
bash scripts/test-deb-install.sh packages/strait_*.deb

step "container image (buildah, umoci + chroot test), Kubernetes manifests"
bash packaging/container/build.sh build/strait
bash packaging/container/test.sh
/usr/bin/python3 scripts/check-kubernetes build/strait

# The tarball's build and unit tests, and its integration tests as a
# smoke run (every module collects, a few files pass; the whole suite has
# passed twice above on the same sources): tests/integration/run-pytest.sh.
step "make distcheck"
STRAIT_TESTS_SMOKE=1 make -C build -j"$jobs" distcheck \
    DISTCHECK_CONFIGURE_FLAGS=--enable-werror

step "all tests passed"
