#!/usr/bin/env bash
# rcsim against a PyTorch reference (docs/performance.md). From the repository root:
#   bash bench/run_bench.sh            # full grid (a few minutes)
#   bash bench/run_bench.sh --quick    # two (N, d) points (about a minute)
# Extra arguments go to bench/run_bench.py (--reps R, --json FILE, --threads T).
# Installs python3-torch and libjemalloc2 (Debian) if missing; builds build/ in Release.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=/usr/bin/python3
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo
if ! "$PY" -c "import torch" 2>/dev/null; then
  echo "installing python3-torch (Debian) for the reference ..." >&2
  $SUDO apt-get install -y python3-torch >&2
fi
if [ ! -e /usr/lib/x86_64-linux-gnu/libjemalloc.so.2 ]; then
  $SUDO apt-get install -y libjemalloc2 >&2 || echo "libjemalloc2 not installed: reference runs without it" >&2
fi
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release ${RCSIM_CMAKE_ARGS:-} >/dev/null
cmake --build build -j2 --target rcsim_bench >/dev/null
exec "$PY" bench/run_bench.py --bench build/rcsim_bench "$@"
