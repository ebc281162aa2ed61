#!/usr/bin/env bash
# Builds strait's .deb (dpkg-buildpackage -us -uc on Debian 12) and .rpm
# (rpmbuild, --nodeps: this builder is Debian, so rpm cannot see the
# build dependencies, which dpkg has) from the committed files of this
# tree, and checks them with lintian and rpmlint. The package test suites
# are not run inside the builds (DEB_BUILD_OPTIONS=nocheck, rpmbuild
# --nocheck): the test command runs them on the same code already.
# Output: packages/ (the .deb, .rpm and the linters' reports).
# Usage: scripts/build-packages.sh [deb|rpm|all]   (default all)
set -euo pipefail
top="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
what="${1:-all}"
out="$top/packages"
jobs="${JOBS:-2}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$out"
cd "$top"
version="$(sed -n 's/^AC_INIT(\[strait\], \[\([^]]*\)\].*/\1/p' configure.ac)"

# A copy of the tree as git has it (with uncommitted edits, not build
# products); symlinks inside packaging/ are followed.
copy_tree() {
    local dest="$1"
    mkdir -p "$dest"
    git ls-files -z | tar --null -T - -cf - | tar -xf - -C "$dest"
}

build_deb() {
    local src="$work/strait-$version"
    copy_tree "$src"
    cp -rL packaging/debian "$src/debian"
    (cd "$src" && DEB_BUILD_OPTIONS="nocheck parallel=$jobs" \
        dpkg-buildpackage -us -uc >"$work/deb.log" 2>&1) || {
        tail -n 80 "$work/deb.log"
        echo "build-packages: dpkg-buildpackage failed" >&2
        exit 1
    }
    cp "$work"/strait_"$version"*.deb "$out/"
    # Errors and warnings fail the build; the one override is explained
    # in packaging/debian/strait.lintian-overrides.
    local lrc=0
    lintian --fail-on error,warning "$work"/strait_"$version"*.changes \
        >"$work/lintian.txt" 2>&1 || lrc=$?
    grep -v '^running with root privileges' "$work/lintian.txt" \
        >"$out/lintian.txt" || true
    cat "$out/lintian.txt"
    [ "$lrc" -eq 0 ] || {
        echo "build-packages: lintian reports errors or warnings" >&2
        exit 1
    }
    echo "build-packages: $(ls "$out"/strait_*.deb)"
}

build_rpm() {
    local top_rpm="$work/rpmbuild"
    mkdir -p "$top_rpm"/{SOURCES,SPECS,BUILD,RPMS,SRPMS}
    copy_tree "$work/strait-$version"
    tar -C "$work" -czf "$top_rpm/SOURCES/strait-$version.tar.gz" \
        "strait-$version"
    cp packaging/rpm/strait.spec "$top_rpm/SPECS/"
    rpmbuild -ba --nodeps --nocheck \
        --define "_topdir $top_rpm" \
        --define "_unitdir /usr/lib/systemd/system" \
        --define "_smp_mflags -j$jobs" \
        "$top_rpm/SPECS/strait.spec" >"$work/rpm.log" 2>&1 || {
        tail -n 80 "$work/rpm.log"
        echo "build-packages: rpmbuild failed" >&2
        exit 1
    }
    cp "$top_rpm"/RPMS/*/strait-"$version"*.rpm "$out/"
    # rpmlint's Debian build knows no Fedora distribution data; its
    # errors are reported, and fail the build when they are not the
    # ones packaging/rpm/rpmlintrc explains.
    rpmlint -r packaging/rpm/rpmlintrc "$top_rpm"/RPMS/*/strait-"$version"*.rpm \
        "$top_rpm/SPECS/strait.spec" | tee "$out/rpmlint.txt" || {
        echo "build-packages: rpmlint found errors" >&2
        exit 1
    }
    echo "build-packages: $(ls "$out"/strait-*.rpm)"
}

case "$what" in
deb) build_deb ;;
rpm) build_rpm ;;
all) build_deb; build_rpm ;;
*) echo "usage: $0 [deb|rpm|all]" >&2; exit 2 ;;
esac
