#!/usr/bin/env bash
# Sets up and builds strait: Debian packages, autoreconf, configure, make.
# The build goes to build/ (BUILD_DIR overrides), so the source tree stays
# clean for other out-of-tree builds (the sanitizer build, distcheck).
# Extra arguments go to configure.
set -euo pipefail
top="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$top"
bash scripts/deps.sh "${DEPS_FLAGS:-}"
if [ ! -x configure ] || [ configure.ac -nt configure ] || [ Makefile.am -nt Makefile.in ]; then
    autoreconf -fi
fi
if [ -f config.status ]; then
    echo "the source tree is configured in place; run 'make distclean' here first" >&2
    exit 1
fi
build="${BUILD_DIR:-$top/build}"
mkdir -p "$build"
cd "$build"
if [ ! -f Makefile ] || [ "$#" -gt 0 ] || [ "$top/configure" -nt Makefile ]; then
    "$top/configure" "$@"
fi
make -j"$(nproc)"
