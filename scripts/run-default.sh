#!/usr/bin/env bash
# One command: install what is missing, build rcsim, run the default comparison sweep
# (configs/default.ini: four masks x pure attention / sphere) and plot its collapse curves to
# data/default/collapse.png. Extra arguments are passed to `rcsim run` (e.g. --run.trials=8).
# Without a build tree but with an `rcsim` on PATH (the one `pip install .` put there, or
# `cmake --install`'s) it runs that one and builds nothing; else it builds ./build/sim/rcsim.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x build/sim/rcsim ] && installed="$(command -v rcsim)"; then
  rcsim="$installed"
  echo "run-default: using $rcsim (no ./build/sim/rcsim; bash scripts/setup.sh builds one)"
else
  RCSIM_TARGETS=rcsim bash scripts/setup.sh
  rcsim=./build/sim/rcsim
fi
"$rcsim" run --config configs/default.ini "$@"
MPLBACKEND=Agg /usr/bin/python3 analysis/plot_collapse.py data/default -o data/default/collapse.png
echo "run-default: HDF5 files in data/default/, plot in data/default/collapse.png"
