#!/usr/bin/env bash
# Sets up and builds strait in the source tree: Debian packages, autoreconf,
# configure, make. Extra arguments go to configure.
set -euo pipefail
top="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$top"
bash scripts/deps.sh "${DEPS_FLAGS:-}"
if [ ! -x configure ] || [ configure.ac -nt configure ] || [ Makefile.am -nt Makefile.in ]; then
    autoreconf -fi
fi
if [ ! -f Makefile ] || [ "$#" -gt 0 ] || [ configure -nt Makefile ]; then
    ./configure "$@"
fi
make -j"$(nproc)"
