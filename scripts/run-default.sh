#!/usr/bin/env bash
# One command: install what is missing, build, run the built-in default configuration
# (configs/default.ini) and plot its collapse curves to data/default/collapse.png.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
./build/sim/rcsim run "$@"
MPLBACKEND=Agg /usr/bin/python3 analysis/plot_collapse.py data/default -o data/default/collapse.png
echo "run-default: HDF5 files in data/default/, plot in data/default/collapse.png"
