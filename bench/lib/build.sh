# shellcheck shell=bash
# Installing the tools and building an optimised strait for bench/run.
# Sourced by bench/run; needs log() and die() from common.sh.

# deps_install installs the Debian packages bench/run needs, only the
# missing ones, with sudo only when not root. The stream module is a
# separate package on Debian 12 (nginx-light does not carry it).
deps_install() {
    local want=(haproxy wrk nghttp2-client openssl python3 libnginx-mod-stream)
    local missing=() p
    if ! command -v nginx >/dev/null 2>&1; then
        want+=(nginx-light)
    fi
    for p in "${want[@]}"; do
        if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed"; then
            missing+=("$p")
        fi
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    local sudo=""
    [ "$(id -u)" -ne 0 ] && sudo="sudo"
    log "installing: ${missing[*]}"
    $sudo apt-get update -qq
    # libnginx-mod-stream is optional: without it the nginx TCP row is skipped.
    if ! DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq \
            --no-install-recommends "${missing[@]}"; then
        local rest=()
        for p in "${missing[@]}"; do
            [ "$p" = libnginx-mod-stream ] || rest+=("$p")
        done
        [ ${#rest[@]} -eq 0 ] || DEBIAN_FRONTEND=noninteractive $sudo apt-get \
            install -y -qq --no-install-recommends "${rest[@]}"
    fi
    # The build's own packages (BoringSSL, libevent, nghttp2, ...).
    bash "$TOP/scripts/deps.sh"
}

# strait_build builds strait with -O2 -g into bench/.build and sets
# STRAIT_BIN. An out-of-tree configure is refused when the source tree is
# configured in place (config.status at the top), and the in-tree build
# belongs to the people editing src/, so then the working tree (tracked and
# untracked files, as git sees them, without bench/) is copied into
# bench/.build/src and built there. tar keeps modification times, so a
# second run only recompiles what changed.
strait_build() {
    local b="$BENCH/.build" cflags="${BENCH_CFLAGS:--O2 -g}"
    mkdir -p "$b"
    if [ -n "${STRAIT_BIN:-}" ]; then
        log "using STRAIT_BIN=$STRAIT_BIN (no build)"
        return 0
    fi
    if [ ! -f "$TOP/config.status" ] && [ -x "$TOP/configure" ]; then
        mkdir -p "$b/obj"
        (
            cd "$b/obj"
            if [ ! -f Makefile ] || [ "$TOP/configure" -nt Makefile ]; then
                "$TOP/configure" CFLAGS="$cflags" >configure.log 2>&1
            fi
            make -j"$(nproc)" strait >make.log 2>&1
        ) || die "strait build failed; see $b/obj/make.log"
        STRAIT_BIN="$b/obj/strait"
    else
        local src="$b/src"
        log "source tree is configured in place: building a copy in $src"
        mkdir -p "$src"
        (cd "$TOP" && git ls-files -z -co --exclude-standard \
            | grep -zv '^bench/' | tar -c --null -T - -f -) | (cd "$src" && tar -x -f -)
        (
            cd "$src"
            if [ ! -x configure ] || [ configure.ac -nt configure ] \
                    || [ Makefile.am -nt Makefile.in ]; then
                autoreconf -fi >autoreconf.log 2>&1
            fi
            if [ ! -f Makefile ] || [ configure -nt Makefile ] \
                    || ! grep -q -- "CFLAGS='$cflags'" config.status 2>/dev/null; then
                ./configure CFLAGS="$cflags" >configure.log 2>&1
            fi
            make -j"$(nproc)" strait >make.log 2>&1
        ) || die "strait build failed; see $src/make.log (or configure.log)"
        STRAIT_BIN="$src/strait"
    fi
    log "built $STRAIT_BIN ($("$STRAIT_BIN" version 2>&1 | head -1))"
}
