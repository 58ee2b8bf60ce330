#!/usr/bin/env python3
"""Figure 4: LayerNorm models: percentage of trials at full rank, sigma_min (at the largest
rank the layer allows) and mean absolute cosine similarity against layer. configs/figure4.ini.

usage: /usr/bin/python3 analysis/figure4.py [--tiny] [--out figures/figure4]
"""
import os
import sys

os.environ.setdefault("MPLBACKEND", "Agg")
import h5py  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

import script_setup  # noqa: E402,F401  (the package rcsim of this checkout: analysis/script_setup.py)
from figure2 import MASKS, run_config  # noqa: E402
from rcsim.figures import draw_curve, figure_arguments, log_panel, save_figure  # noqa: E402


def main(argv=None):
    args = figure_arguments(__doc__, "figure4").parse_args(argv)
    os.chdir(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    runs = run_config(args, "configs/figure4.ini")
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    fig, axes = plt.subplots(2, 3, figsize=(16, 9))
    for row, norm in enumerate(["sphere", "layernorm"]):
        sel = sorted([r for r in runs if r["attrs"]["norm_type"] == norm],
                     key=lambda r: MASKS.index(r["attrs"]["mask_type"]))
        for r in sel:
            c = colours[MASKS.index(r["attrs"]["mask_type"])]
            x = r["layer"] + 1
            with h5py.File(r["path"], "r") as f:
                frac = f["summary/full_rank_fraction"][()]
            axes[row, 0].plot(x, 100 * frac, color=c, label=r["attrs"]["mask_type"])
            draw_curve(axes[row, 2], x, r["metrics"]["cos_abs_mean"], c, r["attrs"]["mask_type"])
            print(f"{norm:9s} {r['attrs']['mask_type']:30s} full rank at the last layer: {100 * frac[-1]:.0f}%, "
                  f"median sigma_at_max_rank {np.nanmedian(r['metrics']['sigma_at_max_rank'][:, -1]):.3g}, "
                  f"median cos_abs_mean {np.nanmedian(r['metrics']['cos_abs_mean'][:, -1]):.3g}")
        for col, title in enumerate(["% of trials at full rank", "sigma at the largest allowed rank",
                                     "mean |cosine similarity|"]):
            ax = axes[row, col]
            ax.set_xscale("log")
            ax.set_title(f"{norm}: {title}")
            ax.set_xlabel("layer t + 1")
            ax.grid(True, which="both", alpha=0.3)
        # sigma on a log axis: a median below 1e-13 x the largest (exact zeros) ends with a marker.
        log_panel(axes[row, 1], [{"x": r["layer"] + 1, "values": r["metrics"]["sigma_at_max_rank"],
                                  "colour": colours[MASKS.index(r["attrs"]["mask_type"])],
                                  "label": r["attrs"]["mask_type"]} for r in sel])
        axes[row, 0].legend(fontsize=8)
    a = runs[0]["attrs"]
    fig.suptitle(f"Figure 4: N = {a['tokens']}, d = {a['dim']}, L = {a['layers']}, {a['trials']} trials, Gaussian "
                 "weights (std 1/sqrt(d), fresh per layer); median and 10-90% band")
    fig.tight_layout()
    save_figure(fig, args.out)


if __name__ == "__main__":
    from rcsim import command
    sys.exit(command.run(main))
