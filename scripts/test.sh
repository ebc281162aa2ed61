#!/usr/bin/env bash
# The one command that sets up a fresh Debian 12 machine and runs every
# test: unit and integration tests in a -Werror build, the same again under
# ASan+UBSan, a short fuzz run of every libFuzzer target, the packages and
# their install test, the container image, the Kubernetes manifests and
# make distcheck, and that docs/reference is what the binary produces.
# Exits non-zero on the first failure.
#
# Time: the integration tests run in parallel (pytest-xdist, see
# tests/integration/run-pytest.sh), and the fuzz run, which keeps one core
# busy for 20 s a target, runs in the background beside the test suites.
# At the end (also after a failure) it prints each step's wall time and
# the 20 slowest integration tests of each suite, so CI's own log shows
# where the time goes.
set -euo pipefail
top="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$top"
jobs="$(nproc)"
fuzz_seconds="${FUZZ_SECONDS:-20}"
logs="$(mktemp -d "${TMPDIR:-/tmp}/strait-test.XXXXXX")"

t_all="$(date +%s)"
rows=()
cur=""
cur_t0=0
bg_pids=()

step_end() {
    if [ -n "$cur" ]; then
        rows+=("$(($(date +%s) - cur_t0))|$cur")
        cur=""
    fi
}

step() {
    step_end
    cur="$*"
    cur_t0="$(date +%s)"
    printf '\n=== %s\n' "$*"
}

# bg_start NAME COMMAND...: runs a step in the background, its output in
# a log of its own; bg_wait NAME prints that log's summary and fails when
# the step failed.
declare -A bg_pid bg_t0
bg_start() {
    local name="$1"
    shift
    printf '\n=== %s (in the background)\n' "$name"
    bg_t0[$name]="$(date +%s)"
    # Its own process group, so a failure elsewhere stops all of it. It
    # notes when it ended, for the table (it may end long before it is
    # waited for).
    setsid bash -c '"${@:2}"; rc=$?; date +%s >"$1"; exit $rc' _ \
        "$logs/$name.end" "$@" >"$logs/$name.log" 2>&1 </dev/null &
    bg_pid[$name]=$!
    bg_pids+=($!)
}

bg_wait() {
    local name="$1" rc=0
    step_end
    printf '\n=== waiting for %s\n' "$name"
    wait "${bg_pid[$name]}" || rc=$?
    local end
    end="$(cat "$logs/$name.end" 2>/dev/null || date +%s)"
    rows+=("$((end - bg_t0[$name]))|$name (in the background)")
    if [ "$rc" -ne 0 ]; then
        cur="$name (background)"
        cur_t0="$(date +%s)"
        tail -n 150 "$logs/$name.log"
        echo "$name failed (exit $rc)" >&2
        return "$rc"
    fi
    grep -E '^(===|all |FAILED|note:|build-packages:|distcheck|strait-)' \
        "$logs/$name.log" || true
}

# durations SUITE BUILD_DIR: keeps the slowest-tests table pytest printed.
durations() {
    local log="$2/tests/integration/run-pytest.sh.log"
    [ -f "$log" ] || return 0
    sed -n '/slowest 20 durations/,/^=/p' "$log" >"$logs/durations-$1.txt"
}

summary() {
    local rc=$? failed_at="$cur"
    step_end
    for p in "${bg_pids[@]}"; do
        kill -- "-$p" 2>/dev/null || true
    done
    printf '\n=== step times (wall seconds, %s cores)\n' "$jobs"
    printf '%7s  %s\n' seconds step
    local r
    for r in "${rows[@]}"; do
        printf '%7s  %s\n' "${r%%|*}" "${r#*|}"
    done
    printf '%7s  %s\n' "$(($(date +%s) - t_all))" "total"
    local f
    for f in "$logs"/durations-*.txt; do
        [ -f "$f" ] || continue
        f_name="$(basename "$f" .txt)"
        printf '\n=== %s: the 20 slowest integration tests\n' \
            "${f_name#durations-}"
        cat "$f"
    done
    rm -rf "$logs"
    if [ "$rc" -ne 0 ]; then
        printf '\nFAILED at: %s\n' "${failed_at:-see above}" >&2
    fi
    exit "$rc"
}
trap summary EXIT

check() {
    local rc=0
    make -C "$2" -j"$jobs" check || rc=$?
    durations "$1" "$2"
    if [ "$rc" -ne 0 ]; then
        find "$2/tests" -name '*.log' -newer "$2/Makefile" -exec tail -n 60 {} +
        return "$rc"
    fi
}

step "dependencies and -Werror build"
DEPS_FLAGS=--test bash scripts/build.sh --enable-werror

step "source checks: clang-format, layer order"
bash scripts/check-format
python3 scripts/check-layers

# docs/reference/ is generated from the binary's own tables (a strait
# started on loopback for a moment): a page that differs is a table that
# changed without its page.
step "docs/reference matches the binary (scripts/gen-docs --check)"
python3 scripts/gen-docs build/strait --check

step "systemd unit: systemd-analyze verify, security exposure <= 2.0"
bash scripts/check-systemd build/strait

# Three lanes share the two cores. The integration suites spend most of
# their time waiting on sockets and processes, so the builds and the fuzz
# run fill the gaps beside them: the fuzz run (one target at a time, one
# core) and the ASan build start now, beside the plain suite; the
# packages, the image and distcheck (which need no test result) run
# beside the ASan suite. A lane's output is shown when it is waited for.
fuzz_step="fuzz targets, ${fuzz_seconds}s each"
bg_start "$fuzz_step" \
    env BUILDDIR="$top/build" bash tests/fuzz/run.sh "$fuzz_seconds"
bg_start "ASan+UBSan build" env BUILD_DIR="$top/build-asan" \
    DEPS_FLAGS=--test bash scripts/build.sh --enable-werror \
    --enable-sanitizers

step "unit and integration tests"
check plain build

bg_wait "ASan+UBSan build"

# The tarball's build and unit tests, and its integration tests as a
# smoke run (every module collects, a few files pass; the whole suite
# passes in two builds here on the same sources):
# tests/integration/run-pytest.sh.
bg_start "packages, install test, image, manifests, distcheck" bash -c '
    set -euo pipefail
    echo "=== packages: .deb (lintian) and its install test, .rpm (rpmlint)"
    JOBS="$1" bash scripts/build-packages.sh all
    bash scripts/test-deb-install.sh packages/strait_*.deb
    echo "=== container image (buildah, umoci + chroot test), manifests"
    bash packaging/container/build.sh build/strait
    bash packaging/container/test.sh
    /usr/bin/python3 scripts/check-kubernetes build/strait
    echo "=== make distcheck"
    STRAIT_TESTS_SMOKE=1 make -C build -j"$1" distcheck \
        DISTCHECK_CONFIGURE_FLAGS=--enable-werror
    echo "=== all packaging checks passed"
' _ "$jobs"

step "unit and integration tests under ASan+UBSan"
check asan build-asan

bg_wait "$fuzz_step"
bg_wait "packages, install test, image, manifests, distcheck"

step_end
printf '\n=== all tests passed\n'
