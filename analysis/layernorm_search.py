#!/usr/bin/env python3
"""When does LayerNorm stop mu from going to zero? Runs configs/layernorm_search.ini (a sweep
over norm, mask, shared/per-layer weights, d_QK and d; the scale of W_V does not matter
under sphere or layernorm, which are invariant to it up to layernorm's eps) and prints, per point, the median
over trials of mu_rel = mu / ||X||_F at the last layer, the fraction of trials with
mu_rel < 1e-6 there (collapsed), and the ensemble decay rate of mu from rcsim analyze.

usage: /usr/bin/python3 analysis/layernorm_search.py [--tiny]   (table also in DATA/table.txt)
"""
import os
import sys

import numpy as np

import script_setup  # noqa: E402,F401  (the package rcsim of this checkout: analysis/script_setup.py)
from figure2 import run_config  # noqa: E402
from rcsim import load_analysis  # noqa: E402
from rcsim.figures import figure_arguments, rcsim, write_text  # noqa: E402


def main(argv=None):
    args = figure_arguments(__doc__, "layernorm_search").parse_args(argv)
    os.chdir(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    runs = run_config(args, "configs/layernorm_search.ini", tiny=("--run.trials=2", "--model.layers=6"))
    lines = [f"{'norm':9s} {'mask':8s} {'shared':6s} {'d_QK':>6s} {'d':>3s} {'median mu_rel(L)':>16s} "
             f"{'collapsed':>9s} {'rate':>8s}"]
    for r in runs:
        rcsim(args, args.rcsim, "analyze", r["path"], "--window=fixed", "--quiet")  # as measured in docs/science/figures.md
        a = load_analysis(r["path"])
        cfg = dict(line.split(" = ", 1) for line in r["config"].splitlines() if " = " in line)
        rel = r["metrics"]["mu_rel"][:, -1]
        lines.append(f"{r['attrs']['norm_type']:9s} {r['attrs']['mask_type']:8s} {cfg['shared']:6s} "
                     f"{float(r['attrs']['d_qk']):6g} {int(r['attrs']['dim']):3d} {np.nanmedian(rel):16.3g} "
                     f"{np.mean(rel < 1e-6):9.2f} {a['mu']['ensemble_decay_rate']:8.3g}")
    text = "\n".join(lines)
    print(text)
    write_text(os.path.join(args.data, "table.txt"), text + "\n")


if __name__ == "__main__":
    from rcsim import command
    sys.exit(command.run(main))
