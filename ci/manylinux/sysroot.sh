#!/usr/bin/env bash
# sysroot.sh DEST: a sysroot for building manylinux_2_28 wheels with this machine's GCC 12, at DEST/root, and the
# compatibility archive DEST/libccl_manylinux_compat.a; prints the compiler and linker flags that use them (a line
# of CXXFLAGS, then a line of LDFLAGS). Idempotent.
#
# The root holds Debian bullseye's glibc 2.31 (headers, crt files, libraries to link against) and GCC 10's
# libstdc++.so.6, fetched with apt under a private state directory. Compiling against glibc 2.31's headers and
# linking against these libraries binds every symbol to the oldest version that provides it; no_glibc_2_30.h keeps
# the three 2.30 functions out, and libstdcxx_compat.cpp supplies what GCC 12's headers expect from a newer
# libstdc++. GCC 12's C++ headers and libgcc stay the build machine's (libgcc's helpers are linked statically where
# GCC 10's libgcc_s lacks them). bullseye is the oldest Debian release the archive here still serves.
set -euo pipefail

DEST="$1"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PACKAGES=(libc6 libc6-dev linux-libc-dev libstdc++6 libgcc-s1)
root="$DEST/root"
compat="$DEST/libccl_manylinux_compat.a"
want="$(cat "$HERE"/sysroot.sh "$HERE"/libstdcxx_compat.cpp "$HERE"/no_glibc_2_30.h | sha256sum | cut -c1-16)"

if [ "$(cat "$DEST/stamp" 2>/dev/null)" != "$want" ]; then
  rm -rf "$DEST"
  work="$DEST/apt"
  mkdir -p "$work/lists/partial" "$work/cache/archives/partial" "$root"
  echo "deb http://deb.debian.org/debian bullseye main" > "$work/sources.list"
  touch "$work/status"  # an empty package database: apt picks bullseye's versions, not what this machine has
  apt_private=(-o "Dir::Etc::SourceList=$work/sources.list" -o Dir::Etc::SourceParts=/dev/null
               -o "Dir::State::Lists=$work/lists" -o "Dir::State::status=$work/status" -o "Dir::Cache=$work/cache"
               -o APT::Sandbox::User=root -o Debug::NoLocking=1)
  apt-get "${apt_private[@]}" -qq update
  (cd "$work" && apt-get "${apt_private[@]}" -qq download "${PACKAGES[@]}")
  for deb in "$work"/*.deb; do dpkg-deb -x "$deb" "$root"; done
  rm -rf "$work"
  # links that point at absolute paths (/lib/...) are made relative, so that they resolve inside the root
  find "$root" -type l -lname '/*' | while read -r link; do
    ln -sfn "$(realpath -m --relative-to="$(dirname "$link")" "$root$(readlink "$link")")" "$link"
  done
  ln -sfn libstdc++.so.6 "$root/usr/lib/x86_64-linux-gnu/libstdc++.so"
  g++ -std=c++17 -O2 -fPIC --sysroot="$root" -include "$HERE/no_glibc_2_30.h" \
    -c "$HERE/libstdcxx_compat.cpp" -o "$DEST/libstdcxx_compat.o"
  ar rcs "$compat" "$DEST/libstdcxx_compat.o"
  echo "$want" > "$DEST/stamp"
fi

echo "--sysroot=$root -include $HERE/no_glibc_2_30.h"
# the root's libraries before GCC's own directory (which has the build machine's libstdc++.so); the archive's symbols
# stay local to each library that takes them
echo "--sysroot=$root -L$root/usr/lib/x86_64-linux-gnu -L$root/lib/x86_64-linux-gnu $compat" \
  "-Wl,--exclude-libs,$(basename "$compat") -ldl"
