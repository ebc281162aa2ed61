#!/usr/bin/env bash
# Build every libFuzzer target in tests/fuzz and run each for a while.
#
#   tests/fuzz/run.sh [SECONDS] [TARGET ...]   (default 20 seconds per target)
#
# With TARGETs (fuzz_catalog, ...) only those are built and run.
#
# Every tests/fuzz/fuzz_*.c is a target. The sources under src/ (all but
# main.c) are compiled with clang-14 and -fsanitize=fuzzer-no-link,address,
# undefined into a scratch archive, and each target links against it with
# -fsanitize=fuzzer,address,undefined: like libstrait.a, the archive gives
# a target only the objects it uses, so a parser target needs none of the
# event or TLS libraries. Nothing is installed.
#
# config.h comes from the configured build directory, $BUILDDIR (default:
# the source tree); without one a minimal config.h is generated. Seeds are
# copied from tests/fuzz/corpus/<target>/ to a scratch directory so new
# inputs never land in git. Only when a target crashes are its reproducers
# copied to tests/fuzz/out/<target>/. Exits non-zero if any target fails to
# build or finds a crash.
set -euo pipefail

seconds="${1:-20}"
shift || true
case "$seconds" in
'' | *[!0-9]*)
    echo "usage: $0 [SECONDS]" >&2
    exit 2
    ;;
esac

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
top="$(cd "$here/../.." && pwd)"
builddir="${BUILDDIR:-$top}"
cc="${CC_FUZZ:-clang-14}"
out="$here/out"
jobs="$(nproc 2>/dev/null || echo 2)"

if ! command -v "$cc" >/dev/null 2>&1; then
    echo "$0: $cc not found (Debian package clang-14)" >&2
    exit 1
fi

work="$(mktemp -d "${TMPDIR:-/tmp}/strait-fuzz.XXXXXX")"
trap 'rm -rf "$work"' EXIT

# config.h: the configured one, or a stand-in with what the sources use.
if [ -f "$builddir/config.h" ]; then
    confdir="$builddir"
else
    echo "note: no config.h in $builddir, using a minimal one" >&2
    confdir="$work/conf"
    mkdir -p "$confdir"
    printf '#define PACKAGE_VERSION "fuzz"\n#define _GNU_SOURCE 1\n' \
        >"$confdir/config.h"
fi

# Dependencies, as configure finds them; a missing one only matters to a
# target that uses it (its build then fails and is reported).
dep_cflags=()
dep_libs=()
for pkg in yaml-0.1 libevent_core libevent_extra libevent_pthreads \
    libnghttp2 lua5.4 libmaxminddb libpcre2-8; do
    if pkg-config --exists "$pkg"; then
        read -r -a f <<<"$(pkg-config --cflags "$pkg")"
        dep_cflags+=("${f[@]}")
        read -r -a f <<<"$(pkg-config --libs "$pkg")"
        dep_libs+=("${f[@]}")
    fi
done
# BoringSSL: Debian ships it for Android tooling, outside the default paths.
multiarch="$("$cc" -print-multiarch 2>/dev/null || true)"
ssl_lib="/usr/lib/${multiarch:-x86_64-linux-gnu}/android"
if [ -d /usr/include/android/openssl ]; then
    dep_cflags+=(-I/usr/include/android)
fi
if [ -f "$ssl_lib/libssl.so" ]; then
    dep_libs+=("-Wl,-rpath,$ssl_lib" "$ssl_lib/libssl.so" "$ssl_lib/libcrypto.so")
fi

common=(-std=gnu11 -g -O1 -fno-omit-frame-pointer -fno-sanitize-recover=undefined
    -I "$top/src" -I "$confdir" "${dep_cflags[@]}")

# The library: every source but main.c, compiled in parallel. A file that
# does not compile here is skipped with a note; a target that needs it then
# fails to link.
echo "=== compile src/ for fuzzing"
mkdir -p "$work/obj"
export cc work top
printf '%s\n' "${common[@]}" >"$work/cflags"
# shellcheck disable=SC2016 # the script below expands in its own shell
find "$top/src" -name '*.c' ! -path "$top/src/main.c" -print0 |
    xargs -0 -r -n 1 -P "$jobs" bash -c '
        src="$1"
        obj="$work/obj/$(printf "%s" "${src#"$top"/src/}" | tr / _).o"
        mapfile -t flags <"$work/cflags"
        "$cc" "${flags[@]}" "-fsanitize=fuzzer-no-link,address,undefined" \
            -c "$src" -o "$obj" 2>"$obj.err" ||
            echo "note: skipped ${src#"$top"/} (does not compile: $(head -n 1 "$obj.err"))" >&2
    ' _
shopt -s nullglob
objs=("$work"/obj/*.o)
targets=("$here"/fuzz_*.c)
shopt -u nullglob
if [ "$#" -gt 0 ]; then
    targets=()
    for t in "$@"; do
        if [ ! -f "$here/$t.c" ]; then
            echo "$0: no target $t (tests/fuzz/$t.c)" >&2
            exit 2
        fi
        targets+=("$here/$t.c")
    done
fi
if [ "${#targets[@]}" -eq 0 ]; then
    echo "$0: no tests/fuzz/fuzz_*.c targets" >&2
    exit 1
fi
ar rcs "$work/libfuzz.a" "${objs[@]}"

failed=()
for src in "${targets[@]}"; do
    t="$(basename "$src" .c)"
    echo "=== build $t"
    if ! "$cc" "${common[@]}" "-fsanitize=fuzzer,address,undefined" \
        -o "$work/$t" "$src" "$work/libfuzz.a" "${dep_libs[@]}" -lpthread -lm; then
        failed+=("$t (build)")
        continue
    fi

    corpus="$work/corpus/$t"
    artifacts="$work/artifacts/$t"
    mkdir -p "$corpus" "$artifacts"
    if [ -d "$here/corpus/$t" ]; then
        cp -R "$here/corpus/$t/." "$corpus/"
    fi

    echo "=== run $t for ${seconds}s"
    # -rss_limit_mb: the parsers promise bounded memory on any input.
    if ! (cd "$artifacts" &&
        ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:symbolize=1" \
            UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1" \
            "$work/$t" -max_total_time="$seconds" -rss_limit_mb=2048 \
            -timeout=10 -print_final_stats=1 -artifact_prefix="$artifacts/" \
            "$corpus"); then
        mkdir -p "$out/$t"
        cp -R "$artifacts/." "$out/$t/"
        failed+=("$t")
    fi
done

if [ "${#failed[@]}" -gt 0 ]; then
    echo "FAILED: ${failed[*]}" >&2
    if [ -d "$out" ]; then
        echo "crash reproducers are in $out/" >&2
    fi
    exit 1
fi
echo "all fuzz targets ran ${seconds}s without a crash"
