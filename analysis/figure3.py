#!/usr/bin/env python3
"""Figure 3: mu against layer for d_QK in {1/64, 1, 64} with the complete, causal and
sliding-window masks; pure attention (top) and sphere (bottom). configs/figure3.ini.

usage: /usr/bin/python3 analysis/figure3.py [--tiny] [--out figures/figure3]
"""
import os
import sys

os.environ.setdefault("MPLBACKEND", "Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

import script_setup  # noqa: E402,F401  (the package rcsim of this checkout: analysis/script_setup.py)
from figure2 import plot_curves, run_config  # noqa: E402
from rcsim.figures import figure_arguments, save_figure  # noqa: E402

MASKS = ["complete", "causal", "sliding_window"]
DQK = [0.015625, 1.0, 64.0]


def main(argv=None):
    args = figure_arguments(__doc__, "figure3").parse_args(argv)
    os.chdir(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    runs = run_config(args, "configs/figure3.ini")
    colours = ["tab:red", "tab:green", "tab:blue"]
    fig, axes = plt.subplots(2, 3, figsize=(16, 9))
    for row, norm in enumerate(["none", "sphere"]):
        for col, mask in enumerate(MASKS):
            ax = axes[row, col]
            sel = [r for r in runs if r["attrs"]["mask_type"] == mask and r["attrs"]["norm_type"] == norm]
            sel.sort(key=lambda r: r["attrs"]["d_qk"])
            plot_curves(ax, sel, "mu", lambda r: colours[DQK.index(float(r["attrs"]["d_qk"]))],
                        lambda r: f"d_QK = {r['attrs']['d_qk']:g}")
            ax.set_title(f"{mask}, {'pure attention' if norm == 'none' else 'sphere'}")
            ax.set_ylabel("mu(X)")
            ax.legend(fontsize=8)
            for r in sel:
                x = r["metrics"]["mu"]
                t10 = min(10, x.shape[1] - 1)
                print(f"{norm:6s} {mask:15s} d_QK {r['attrs']['d_qk']:8g}: median log10 mu at layer {t10}: "
                      f"{np.nanmedian(np.log10(np.maximum(x[:, t10], 1e-300))):.2f}, last: "
                      f"{np.nanmedian(np.log10(np.maximum(x[:, -1], 1e-300))):.2f}")
    a = runs[0]["attrs"]
    fig.suptitle(f"Figure 3: N = {a['tokens']}, d = {a['dim']}, L = {a['layers']}, {a['trials']} trials, "
                 "Gaussian W_Q, W_K, orthogonal W_V; median and 10-90% band")
    fig.tight_layout()
    save_figure(fig, args.out)


if __name__ == "__main__":
    from rcsim import command
    sys.exit(command.run(main))
