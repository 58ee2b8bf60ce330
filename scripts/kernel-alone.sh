#!/usr/bin/env bash
# Shows that rcsim's kernel (sim/kernel) compiles with Eigen alone: configures and builds it as a
# standalone CMake project in a private mount namespace where the headers of HDF5, Boost, spdlog
# (and its fmt) and GLPK are hidden (empty folders, and a glpk.h that stops the compiler).
# Nothing outside this process sees the hidden headers. Usage: bash scripts/kernel-alone.sh [BUILD_DIR]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$root/build-kernel-alone}"
command -v unshare >/dev/null || { echo "kernel-alone.sh: unshare not found (util-linux)" >&2; exit 2; }
empty="$(mktemp -d)"
poison="$(mktemp)"
trap 'rm -rf "$empty" "$poison"' EXIT
echo '#error "glpk.h is hidden: the kernel must not need GLPK"' >"$poison"
hidden=()
for d in /usr/include/hdf5 /usr/include/boost /usr/include/spdlog /usr/include/fmt; do
  [ -d "$d" ] && hidden+=("$d")
done
# shellcheck disable=SC2016
unshare -rm bash -euo pipefail -c '
  empty=$1; poison=$2; root=$3; build=$4; shift 4
  for d in "$@"; do mount --bind "$empty" "$d"; done
  [ -f /usr/include/glpk.h ] && mount --bind "$poison" /usr/include/glpk.h
  # The hiding works: each of these includes must now fail.
  for h in hdf5.h boost/program_options.hpp spdlog/spdlog.h glpk.h; do
    if echo "#include <$h>" | c++ -fsyntax-only -x c++ - -I/usr/include/hdf5/serial 2>/dev/null; then
      echo "kernel-alone.sh: <$h> is still visible" >&2; exit 1
    fi
  done
  # Debug: the point is what it includes, and -O0 compiles Eigen code faster.
  cmake -S "$root/sim/kernel" -B "$build" -DCMAKE_BUILD_TYPE=Debug >/dev/null
  cmake --build "$build" -j "$(nproc)"
' bash "$empty" "$poison" "$root" "$build" "${hidden[@]}"
echo "kernel-alone.sh: sim/kernel builds with Eigen alone (hidden: ${hidden[*]} /usr/include/glpk.h)"
