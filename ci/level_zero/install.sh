#!/usr/bin/env bash
# install.sh DEST: puts a Level Zero loader that exports zesInit (>= 1.9) at DEST/libze_loader.so.1, for the Intel GPU
# stage on machines whose own loader is older (Debian 12: libze1 1.8.12) or absent. The system's is never touched:
# tests point ccl-xpu at this one with CCL_XPU_ZE_LOADER.
#
# The loader is Debian trixie's libze1, fetched with apt under a private state directory. That binary was built with
# GCC 14 and asks for one symbol of GLIBCXX_3.4.32 (std::ios_base_library_init); where the system's libstdc++ is older,
# the need is marked weak and the symbol comes from a small library built here. (Building the loader from Debian's
# source package would avoid that, but the archive this machine reaches serves trixie's binaries, not its sources.)
set -euo pipefail

DEST="$1"
VERSION="1.20.6-1"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

mkdir -p "$WORK/lists/partial" "$WORK/cache/archives/partial" "$DEST"
echo "deb http://deb.debian.org/debian trixie main" > "$WORK/sources.list"
apt_private=(-o "Dir::Etc::SourceList=$WORK/sources.list" -o Dir::Etc::SourceParts=/dev/null
             -o "Dir::State::Lists=$WORK/lists" -o "Dir::Cache=$WORK/cache" -o APT::Sandbox::User=root
             -o Debug::NoLocking=1)
apt-get "${apt_private[@]}" -qq update
(cd "$WORK" && apt-get "${apt_private[@]}" -qq download "libze1=$VERSION")
dpkg-deb -x "$WORK"/libze1_*.deb "$WORK/root"
loader="$DEST/libze_loader.so.1"
cp "$(find "$WORK/root" -name 'libze_loader.so.1.*' | head -1)" "$loader"

# (whole outputs into files: grep -q ending a pipe early would fail it under pipefail)
objdump -T "$loader" > "$WORK/needs"
strings "$(g++ -print-file-name=libstdc++.so.6)" > "$WORK/has"
if grep -q 'GLIBCXX_3.4.32' "$WORK/needs" && ! grep -qx GLIBCXX_3.4.32 "$WORK/has"; then
  g++ -O2 -shared -fPIC -o "$DEST/libccl_xpu_ios_init.so" "$HERE/ios_base_library_init.cpp"
  patchelf --clear-symbol-version _ZSt21ios_base_library_initv "$loader"
  python3 "$HERE/weaken_version_need.py" "$loader" GLIBCXX_3.4.32
  patchelf --add-needed libccl_xpu_ios_init.so --set-rpath '$ORIGIN' "$loader"
fi
# it must load here and export the entry point oneCCL looks up
python3 -c "import ctypes, sys; ctypes.CDLL(sys.argv[1]).zesInit" "$loader"
echo "Level Zero loader $VERSION with zesInit at $loader"
