#!/usr/bin/env bash
# The .deb as a node's administrator meets it: built by `cpack -G DEB` in the build directory,
# installed with apt-get (which must find every dependency it declares among Debian's
# packages), `eacgm doctor` run from the installed path, then removed with nothing left behind.
# Root only: it installs a package. Exit 77 (CTest: skipped) when not root, or when an eacgm
# package that this test did not install is already there (it is not ours to remove).
# Usage: test_deb.sh BUILD_DIR
set -euo pipefail
build=$(cd "$1" && pwd)
skip() { echo "skipped: $*" >&2; exit 77; }
fail() { echo "FAIL: $*" >&2; exit 1; }

[ "$(id -u)" -eq 0 ] || skip "installing a package needs root"
if dpkg-query -W -f='${Status}' eacgm 2>/dev/null | grep -q "install ok installed"; then
  skip "a package named eacgm is already installed on this machine"
fi

work=$(mktemp -d)
trap 'apt-get remove -y -qq --purge eacgm >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
(cd "$build" && cpack -G DEB -B "$work" >"$work/cpack.log" 2>&1) ||
  { cat "$work/cpack.log"; fail "cpack -G DEB failed"; }
debs=("$work"/eacgm_*.deb)
[ -f "${debs[0]}" ] || fail "cpack wrote no eacgm_*.deb into $work: $(ls "$work")"
deb=${debs[0]}
echo "package: $(basename "$deb")"

# What it declares: the binary's shared libraries, through dpkg-shlibdeps.
depends=$(dpkg-deb -f "$deb" Depends)
echo "Depends: $depends"
for lib in libbpf libelf libsqlite3 libprotobuf libfmt; do
  grep -q "$lib" <<<"$depends" || fail "Depends lacks $lib: $depends"
done
contents=$(dpkg-deb -c "$deb")
for f in ./usr/bin/eacgm ./usr/lib/systemd/system/eacgm-serve.service \
         ./usr/share/doc/eacgm/README.md ./usr/share/doc/eacgm/SERVE.md \
         ./usr/share/eacgm/deploy/prometheus/prometheus.yml; do
  grep -q " $f\$" <<<"$contents" || fail "$f is not in the package"
done

DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$deb" >"$work/install.log" 2>&1 ||
  { cat "$work/install.log"; fail "apt-get install $deb failed"; }
[ -x /usr/bin/eacgm ] || fail "/usr/bin/eacgm not installed"
version=$(/usr/bin/eacgm --version)
grep -q "$(dpkg-deb -f "$deb" Version)" <<<"$version" ||
  fail "installed eacgm says '$version', the package is $(dpkg-deb -f "$deb" Version)"
# doctor from the installed path: as root on a machine with BTF it can trace (exit 0), and says
# so for the layers that need no GPU.
/usr/bin/eacgm doctor >"$work/doctor.txt" 2>&1 || { cat "$work/doctor.txt"; fail "eacgm doctor failed"; }
grep -q "BTF" "$work/doctor.txt" || { cat "$work/doctor.txt"; fail "doctor said nothing of BTF"; }

DEBIAN_FRONTEND=noninteractive apt-get remove -y -qq --purge eacgm >"$work/remove.log" 2>&1 ||
  { cat "$work/remove.log"; fail "apt-get remove eacgm failed"; }
for f in /usr/bin/eacgm /usr/lib/systemd/system/eacgm-serve.service /usr/share/doc/eacgm \
         /usr/share/eacgm; do
  [ ! -e "$f" ] || fail "$f is still there after the package was removed"
done
echo "installed, ran doctor, removed cleanly"
