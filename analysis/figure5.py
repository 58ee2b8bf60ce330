#!/usr/bin/env python3
"""Figure 5 (ours): collapse rate of mu against mask radius, measured (rcsim analyze) beside
the theory bound's rate -ln(1 - eps^r)/r. Sliding windows of several widths, two token counts,
pure attention, orthogonal W_V. configs/figure5.ini.

usage: /usr/bin/python3 analysis/figure5.py [--tiny] [--out figures/figure5]
"""
import os
import sys

os.environ.setdefault("MPLBACKEND", "Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

import script_setup  # noqa: E402,F401  (the package rcsim of this checkout: analysis/script_setup.py)
from figure2 import run_config  # noqa: E402
from rcsim import load_analysis  # noqa: E402
from rcsim.figures import figure_arguments, rcsim, save_figure  # noqa: E402


def main(argv=None):
    args = figure_arguments(__doc__, "figure5").parse_args(argv)
    os.chdir(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    runs = run_config(args, "configs/figure5.ini", tiny=("--run.trials=2", "--model.layers=12", "--model.dim=4"))
    rows = []
    for r in runs:
        rcsim(args, args.rcsim, "analyze", r["path"], "--window=fixed", "--quiet")  # as measured in docs/science/figures.md
        a = load_analysis(r["path"])
        rows.append((int(r["attrs"]["tokens"]), int(a["theory"]["radius"]), a["mu"]["decay_rate_median"],
                     a["mu"]["decay_rate_q10"], a["mu"]["decay_rate_q90"], a["theory"]["bound_rate"],
                     a["theory"]["eps"], r["path"]))
    fig, axes = plt.subplots(1, 2, figsize=(13, 5))
    print(f"{'N':>4} {'r':>3} {'median rate':>14} {'[q10, q90]':>20} {'eps':>10} {'bound rate':>11} {'ratio':>9}")
    for n, marker, colour in ((16, "o", "tab:blue"), (32, "s", "tab:orange")):
        sel = sorted([x for x in rows if x[0] == n], key=lambda x: x[1])
        if not sel:
            continue
        r = np.array([x[1] for x in sel])
        rate = np.array([x[2] for x in sel])
        lo, hi = np.array([x[3] for x in sel]), np.array([x[4] for x in sel])
        bound = np.array([x[5] for x in sel])
        axes[0].errorbar(r, rate, yerr=[rate - lo, hi - rate], fmt=marker + "-", color=colour,
                         label=f"measured, N = {n} (median over trials; bars q10-q90)")
        axes[0].plot(r, np.maximum(bound, 1e-300), marker + "--", color=colour, mfc="none",
                     label=f"bound -ln(1 - eps^r)/r, N = {n}")
        axes[1].plot(r, rate / np.maximum(bound, 1e-300), marker + "-", color=colour, label=f"N = {n}")
        for x in sel:
            print(f"{x[0]:4d} {x[1]:3d} {x[2]:14.4g} [{x[3]:8.3g}, {x[4]:8.3g}] {x[6]:10.3g} {x[5]:11.3g} "
                  f"{x[2] / x[5] if x[5] > 0 else float('inf'):9.3g}")
    axes[0].set_yscale("log")
    axes[0].set_xlabel("mask radius r (sliding window, w = 1, 2, 4, 8)")
    axes[0].set_ylabel("decay rate of ln mu per layer")
    axes[0].legend(fontsize=8)
    axes[1].set_yscale("log")
    axes[1].set_xlabel("mask radius r")
    axes[1].set_ylabel("measured rate / bound rate")
    axes[1].legend(fontsize=8)
    for ax in axes:
        ax.grid(True, which="both", alpha=0.3)
    a = runs[0]["attrs"]
    fig.suptitle(f"Figure 5: collapse rate against mask radius; d = {a['dim']}, L = {a['layers']}, {a['trials']} "
                 "trials, pure attention, orthogonal W_V")
    fig.tight_layout()
    save_figure(fig, args.out)


if __name__ == "__main__":
    from rcsim import command
    sys.exit(command.run(main))
