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
if [ $# -eq 0 ]; then
    set -- "$here"
fi
exec "$PY" -m pytest -p no:cacheprovider -q -ra "$@"
