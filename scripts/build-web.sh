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

# GLPK for sim/geometry/selectability.cpp: Debian's source of the libglpk-dev we link natively
# (glpk 5.0, from Debian's archive, checksum pinned), compiled once with emcc into
# build-web/libglpk.a (build-web/ is git-ignored; delete it to rebuild).
glpk_version=5.0
glpk_sha256=4a1013eebb50f728fc601bdd833b0b2870333c3b3e5a816eeba921d95bec6f15
glpk_url="http://deb.debian.org/debian/pool/main/g/glpk/glpk_${glpk_version}.orig.tar.gz"
cache="$root/build-web"
glpk_src="$cache/glpk-$glpk_version/src"
if [ ! -s "$cache/libglpk.a" ]; then
  command -v curl >/dev/null || { echo "build-web.sh: curl not found (apt-get install curl)" >&2; exit 2; }
  mkdir -p "$cache"
  if [ ! -d "$glpk_src" ]; then
    curl -fsS -m 300 -o "$cache/glpk.tar.gz.part" "$glpk_url" || { echo "build-web.sh: cannot download $glpk_url" >&2; exit 1; }
    echo "$glpk_sha256  $cache/glpk.tar.gz.part" | sha256sum -c --quiet - ||
      { echo "build-web.sh: $glpk_url: checksum differs from the pinned one" >&2; rm -f "$cache/glpk.tar.gz.part"; exit 1; }
    tar -xzf "$cache/glpk.tar.gz.part" -C "$cache"
    rm -f "$cache/glpk.tar.gz.part"
  fi
  rm -rf "$cache/glpk-obj" && mkdir -p "$cache/glpk-obj"
  glpk_inc=""
  for d in . amd api bflib colamd draft env intopt minisat misc mpl npp proxy simplex zlib; do glpk_inc+=" -I$glpk_src/$d"; done
  export glpk_inc glpk_src glpk_obj="$cache/glpk-obj"
  echo "build-web.sh: compiling GLPK $glpk_version with emcc (once, about 30 s)"
  # Every .c of src/ but proxy/main.c, a test driver that is not in libglpk_la_SOURCES.
  glpk_files() { (cd "$glpk_src" && find . -name '*.c' ! -path ./proxy/main.c | sort); }
  glpk_files |
    xargs -P 2 -n 1 bash -c 'emcc -O2 -w $glpk_inc -c "$glpk_src/$1" -o "$glpk_obj/$(echo "${1#./}" | tr / _).o"' bash
  [ "$(ls "$cache/glpk-obj" | wc -l)" -eq "$(glpk_files | wc -l)" ] ||
    { echo "build-web.sh: some GLPK sources failed to compile" >&2; exit 1; }
  emar rcs "$cache/libglpk.a.part" "$cache"/glpk-obj/*.o
  mv "$cache/libglpk.a.part" "$cache/libglpk.a"
fi

# The sim/ sources compiled as they are. Left out: sim/model/inputs.cpp (weight/input draws: HDF5
# files), sim/core/config.cpp (Boost.Program_options). sim/geometry/brody.cpp is linked for
# brody_example (its heat map, with threads, is never reached).
# sim/model/mask.cpp (custom masks read from HDF5) and sim/measure/metrics.cpp (singular values by
# LAPACK's dlasq1) reference code that is not here; the linker drops the functions the page never
# reaches (make_mask, singular_values, ...), and any unresolved symbol left is an error.
sources=(
  web/engine.cpp
  sim/core/random.cpp
  sim/model/attention.cpp
  sim/model/layer.cpp
  sim/model/tangent.cpp
  sim/model/unnormalised_attention.cpp
  sim/model/mask.cpp
  sim/model/normalization.cpp
  sim/measure/metrics.cpp
  sim/geometry/selectability.cpp
  sim/geometry/brody.cpp
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
emcc -O2 -std=c++17 -DNDEBUG -DRCSIM_WITH_GLPK -I/usr/include/eigen3 -I"$root/sim" -I"$hdf5_inc" -I"$glpk_src" \
  "${sources[@]}" "$cache/libglpk.a" -o "$tmp/engine.js" \
  -sMODULARIZE=1 -sSINGLE_FILE=1 -sENVIRONMENT=web,node -sEXPORT_NAME=createRcsimEngine -sALLOW_MEMORY_GROWTH=1 \
  -sDISABLE_EXCEPTION_CATCHING=0 \
  -sEXPORTED_FUNCTIONS=_rc_figure1,_rc_collapse,_rc_brody,_malloc,_free \
  -sEXPORTED_RUNTIME_METHODS=cwrap,HEAPF64
[ -s "$tmp/engine.js" ] || { echo "build-web.sh: emcc produced no output" >&2; exit 1; }
mv "$tmp/engine.js" "$out_dir/engine.js"
echo "build-web.sh: wrote web/engine.js"
