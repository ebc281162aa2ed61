#!/usr/bin/env bash
# Runs the integration tests: the real strait binary against real clients
# and servers on loopback. Called by `make check` with STRAIT_BIN and
# STRAIT_SRCDIR set; runnable by hand from any directory.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
: "${STRAIT_SRCDIR:=$(cd "$here/../.." && pwd)}"
if [ -z "${STRAIT_BIN:-}" ]; then
    STRAIT_BIN="$STRAIT_SRCDIR/build/strait"
    [ -x "$STRAIT_BIN" ] || STRAIT_BIN="$STRAIT_SRCDIR/strait"
fi
export STRAIT_BIN STRAIT_SRCDIR
# Debian's python3-pytest belongs to /usr/bin/python3, which may not be the
# python3 first on PATH.
PY=/usr/bin/python3
# Nothing is written into the source tree (make distcheck makes it
# read-only).
export PYTHONDONTWRITEBYTECODE=1
cd "$here"
# STRAIT_TESTS_SMOKE=1 (make distcheck, from scripts/test.sh): the suite
# has already passed on the same sources in two builds; from the release
# tarball it is enough that every test module collects (its imports and
# helpers are in the tarball) and that a few files of real traffic pass.
if [ $# -eq 0 ] && [ "${STRAIT_TESTS_SMOKE:-0}" = 1 ]; then
    "$PY" -m pytest -p no:cacheprovider -q --collect-only "$here" >/dev/null
    set -- test_cli.py test_gateway.py test_http2.py test_tls.py test_hbone.py
fi
if [ $# -eq 0 ]; then
    set -- "$here"
fi
# Tests run in parallel (pytest-xdist): each test has its own ports (a
# residue class of free_port() per worker), temporary directory and
# processes. Most of a test's time is spent waiting on sockets and
# processes, so twice as many workers as cores keeps both cores busy.
# STRAIT_TEST_JOBS=1 runs them one after another; 0 picks the default.
jobs="${STRAIT_TEST_JOBS:-0}"
if [ "$jobs" = 0 ]; then
    jobs=$(($(nproc 2>/dev/null || echo 2) * 2))
fi
par=()
if [ "$jobs" -gt 1 ] && "$PY" -c 'import xdist' 2>/dev/null; then
    par=(-n "$jobs")
fi
# The 20 slowest tests are listed at the end, so CI's own log shows where
# the time goes.
exec "$PY" -m pytest -p no:cacheprovider -q -ra --durations=20 \
    ${par[@]+"${par[@]}"} "$@"
