#!/usr/bin/env bash
# Builds web/engine.js (the WebAssembly embedded, SINGLE_FILE, so that web/index.html also works
# opened as a file:// page, where browsers refuse to fetch a separate .wasm): web/engine.cpp (the C interface for the page) and the
# sim/ sources the views need, compiled by Debian's emscripten (emcc), outside the CMake build.
# Usage: bash scripts/build-web.sh    (needs emcc and Eigen's headers in /usr/include/eigen3)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
command -v emcc >/dev/null || { echo "build-web.sh: emcc not found (apt-get install emscripten)" >&2; exit 2; }
[ -d /usr/include/eigen3 ] || { echo "build-web.sh: /usr/include/eigen3 missing (apt-get install libeigen3-dev)" >&2; exit 2; }

# The sim/ sources compiled as they are. Left out: sim/model/inputs.cpp (weight/input draws: HDF5
# files), sim/core/config.cpp (Boost.Program_options), sim/geometry/selectability.cpp (GLPK).
# sim/model/mask.cpp (custom masks read from HDF5) and sim/measure/metrics.cpp (singular values by
# LAPACK's dlasq1) reference code that is not here; the linker drops the functions the page never
# reaches (make_mask, singular_values, ...), and any unresolved symbol left is an error.
sources=(
  web/engine.cpp
  sim/core/random.cpp
  sim/model/attention.cpp
  sim/model/layer.cpp
  sim/model/mask.cpp
  sim/model/normalization.cpp
  sim/measure/metrics.cpp
)
# hdf5.h is only read for declarations (sim/model/inputs.hpp -> sim/hdf5/hdf5_file.hpp, for the
# LayerWeights type); no HDF5 code is compiled or linked.
hdf5_inc=/usr/include/hdf5/serial
out_dir="$root/web"
# Debian packages emcc's JavaScript helpers (acorn) under /usr/share/nodejs; a node that does not
# search there by default (e.g. NodeSource's) needs to be told.
export NODE_PATH="${NODE_PATH:+$NODE_PATH:}/usr/share/nodejs"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
emcc -O2 -std=c++17 -DNDEBUG -I/usr/include/eigen3 -I"$root/sim" -I"$hdf5_inc" \
  "${sources[@]}" -o "$tmp/engine.js" \
  -sMODULARIZE=1 -sSINGLE_FILE=1 -sENVIRONMENT=web,node -sEXPORT_NAME=createRcsimEngine -sALLOW_MEMORY_GROWTH=1 \
  -sDISABLE_EXCEPTION_CATCHING=0 \
  -sEXPORTED_FUNCTIONS=_rc_figure1,_rc_collapse,_malloc,_free \
  -sEXPORTED_RUNTIME_METHODS=cwrap,HEAPF64
[ -s "$tmp/engine.js" ] || { echo "build-web.sh: emcc produced no output" >&2; exit 1; }
mv "$tmp/engine.js" "$out_dir/engine.js"
echo "build-web.sh: wrote web/engine.js"
