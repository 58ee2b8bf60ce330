#!/usr/bin/env bash
# The figures of docs/user/geometry.md: Brody's heat map and four-key example, Riechers' LayerNorm
# ellipse, and a `rcsim keys` example. Runs ./build/sim/rcsim (scripts/setup.sh), else the rcsim on
# PATH (pip install .); without either it says so in one line (exit 2).
# usage: bash scripts/geometry-figures.sh [OUTDIR] [full|tiny]   (default: data/geometry full)
# `tiny` runs every command and plot script at a toy size (CI); `full` is the documented run
# (the heat map is n = 3..60, d = 3..15, 100 draws: about 90 s of CPU).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-data/geometry}
size=${2:-full}
if [ -x build/sim/rcsim ]; then
  rcsim=./build/sim/rcsim
elif ! rcsim="$(command -v rcsim)"; then
  echo "geometry-figures: no rcsim executable: neither ./build/sim/rcsim (\`bash scripts/setup.sh\` builds it) nor \`rcsim\` on PATH (\`pip install .\` puts it there)" >&2
  exit 2
fi
py=/usr/bin/python3
export MPLBACKEND=Agg
case "$size" in
  full) map=(); ex=(); ln=() ;;
  tiny) map=(--map.count_max=8 --map.dim_max=4 --map.draws=3)
        ex=(--example.angles=36)
        ln=(--ln.samples=300 --ln.store=100) ;;
  *) echo "usage: $0 [OUTDIR] [full|tiny]" >&2; exit 2 ;;
esac
mkdir -p "$out"
q=(--quiet)

"$rcsim" keys --keys.count=30 --keys.dim=3 --norm.type=none --output.file="$out/keys_none.h5" "${q[@]}"
"$rcsim" keys --keys.count=30 --keys.dim=3 --norm.type=layernorm --output.file="$out/keys_layernorm.h5" "${q[@]}"

"$rcsim" brody-map "${map[@]}" --output.file="$out/brody_map.h5" "${q[@]}"
"$py" analysis/plot_brody_map.py "$out/brody_map.h5" -o "$out/brody_map.png"

"$rcsim" brody-example "${ex[@]}" --output.file="$out/brody_example.h5" "${q[@]}"
"$py" analysis/plot_brody_example.py "$out/brody_example.h5" -o "$out/brody_example.png"

"$rcsim" ln-geometry --ln.dim=3 --norm.gain="1 2 0.5" --norm.bias="0.5 0 -0.5" "${ln[@]}" \
  --output.file="$out/ln_geometry.h5" "${q[@]}"
"$py" analysis/plot_ln_ellipse.py "$out/ln_geometry.h5" -o "$out/ln_ellipse.png"
