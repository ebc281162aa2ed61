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

step "unit and integration tests"
make -j"$jobs" check || { cat test-suite.log 2>/dev/null | tail -200; exit 1; }

step "unit and integration tests under ASan+UBSan"
mkdir -p build-asan
( cd build-asan && "$top/configure" --enable-werror --enable-sanitizers -q \
    && make -j"$jobs" \
    && { make -j"$jobs" check || { tail -200 test-suite.log; exit 1; }; } )

step "fuzz targets, ${fuzz_seconds}s each"
BUILDDIR="$top" bash tests/fuzz/run.sh "$fuzz_seconds"

step "make distcheck"
make -j"$jobs" distcheck DISTCHECK_CONFIGURE_FLAGS=--enable-werror

step "all tests passed"
