#!/usr/bin/env bash
# One command: install what is missing, build rcsim, run the default comparison sweep
# (configs/default.ini: four masks x pure attention / sphere) and plot its collapse curves to
# data/default/collapse.png. Extra arguments are passed to `rcsim run` (e.g. --run.trials=8).
set -euo pipefail
cd "$(dirname "$0")/.."
RCSIM_TARGETS=rcsim bash scripts/setup.sh
./build/sim/rcsim run --config configs/default.ini "$@"
MPLBACKEND=Agg /usr/bin/python3 analysis/plot_collapse.py data/default -o data/default/collapse.png
echo "run-default: HDF5 files in data/default/, plot in data/default/collapse.png"
