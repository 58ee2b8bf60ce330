#!/usr/bin/env bash
# rcsim against a PyTorch reference on an optimised BLAS (docs/dev/performance.md). From the
# repository root:
#   bash bench/run_bench.sh            # full set (not timed on this branch: several times --quick)
#   bash bench/run_bench.sh --quick    # reduced set (3 min on a quiet machine, 5 with --reps 5)
# Extra arguments go to bench/run_bench.py (--reps R, --json FILE, --threads T).
# Installs python3-torch, libopenblas0-pthread (the reference's BLAS) and libjemalloc2 (Debian)
# if missing, prints which BLAS/LAPACK the system selects, builds build/ in Release (the default
# build: native instruction set unless RCSIM_CMAKE_ARGS says otherwise), then runs.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=/usr/bin/python3
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo
APT=(env DEBIAN_FRONTEND=noninteractive $SUDO apt-get -o DPkg::Lock::Timeout=900 install -y -qq)
missing=()
"$PY" -c "import torch" 2>/dev/null || missing+=(python3-torch)
dpkg-query -W -f='${Status}' libopenblas0-pthread 2>/dev/null | grep -q "install ok installed" || missing+=(libopenblas0-pthread)
[ -e /usr/lib/x86_64-linux-gnu/libjemalloc.so.2 ] || missing+=(libjemalloc2)
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing ${missing[*]} (Debian) for the reference ..." >&2
  "${APT[@]}" "${missing[@]}" >&2
fi
# Which BLAS/LAPACK the system links libblas.so.3 / liblapack.so.3 to (Debian alternatives;
# OpenBLAS has the higher priority once installed). The benchmark itself prints what is loaded.
for lib in libblas.so.3 liblapack.so.3; do
  echo "$lib -> $(readlink -f /usr/lib/x86_64-linux-gnu/$lib 2>/dev/null || echo missing)" \
    "($(update-alternatives --query $lib-x86_64-linux-gnu 2>/dev/null | sed -n 's/^Status: //p') mode)"
done
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release ${RCSIM_CMAKE_ARGS:-} >/dev/null
cmake --build build -j2 --target rcsim_bench >/dev/null
echo "uptime before: $(uptime)"
"$PY" bench/run_bench.py --bench build/rcsim_bench "$@"
echo "uptime after: $(uptime)"
