#!/usr/bin/env python3
"""Figure 3 with one and four heads: mu_rel against layer for d_QK in {1/64, 1, 64} with the
complete, causal and sliding-window masks, pure attention; one head (top), four (bottom).
configs/figure3_heads.ini.

usage: /usr/bin/python3 analysis/figure3_heads.py [--tiny] [--out figures/figure3_heads]
"""
import os
import sys

os.environ.setdefault("MPLBACKEND", "Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from figure2 import plot_curves, run_config  # noqa: E402
from figure3 import DQK, MASKS  # noqa: E402
from rcsim import figure_arguments, save_figure  # noqa: E402


def main(argv=None):
    args = figure_arguments(__doc__.splitlines()[0], "figure3_heads").parse_args(argv)
    os.chdir(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    runs = run_config(args, "configs/figure3_heads.ini")
    colours = ["tab:red", "tab:green", "tab:blue"]
    fig, axes = plt.subplots(2, 3, figsize=(16, 9), sharey=True)
    for row, heads in enumerate([1, 4]):
        for col, mask in enumerate(MASKS):
            ax = axes[row, col]
            sel = [r for r in runs if r["attrs"]["mask_type"] == mask and int(r["attrs"]["heads"]) == heads]
            sel.sort(key=lambda r: r["attrs"]["d_qk"])
            plot_curves(ax, sel, "mu_rel", lambda r: colours[DQK.index(float(r["attrs"]["d_qk"]))],
                        lambda r: f"d_QK = {r['attrs']['d_qk']:g}")
            ax.set_title(f"{mask}, {heads} head{'s' if heads > 1 else ''}")
            ax.set_ylabel("mu_rel = mu / ||X||_F")
            ax.legend(fontsize=8)
            for r in sel:
                x = r["metrics"]["mu_rel"]
                t10 = min(int(np.searchsorted(r["layer"], 10)), len(r["layer"]) - 1)
                print(f"H = {heads} {mask:15s} d_QK {r['attrs']['d_qk']:8g}: median log10 mu_rel at layer "
                      f"{r['layer'][t10]}: {np.nanmedian(np.log10(np.maximum(x[:, t10], 1e-300))):.2f}, last: "
                      f"{np.nanmedian(np.log10(np.maximum(x[:, -1], 1e-300))):.2f}")
    a = runs[0]["attrs"]
    fig.suptitle(f"Figure 3, one and four heads: N = {a['tokens']}, d = {a['dim']}, L = {a['layers']}, "
                 f"{a['trials']} trials, Gaussian W_Q, W_K, orthogonal W_V per head; median and 10-90% band")
    fig.tight_layout()
    save_figure(fig, args.out)


if __name__ == "__main__":
    main()
