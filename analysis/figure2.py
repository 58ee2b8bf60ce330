#!/usr/bin/env python3
"""Figure 2 (random initialisation): mu against layer, log-log, four masks; pure attention
beside attention + LayerNorm (sphere and layernorm). configs/figure2.ini.

usage: /usr/bin/python3 analysis/figure2.py [--tiny] [--out figures/figure2]
"""
import os
import sys

os.environ.setdefault("MPLBACKEND", "Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

import script_setup  # noqa: E402,F401  (the package rcsim of this checkout: analysis/script_setup.py)
from rcsim.figures import figure_arguments, plot_curves, run_config, save_figure  # noqa: E402,F401 (figure3*, 4, 5 import them from here)

MASKS = ["complete", "causal", "sliding_window", "unidirectional_sliding_window"]


def draw(runs):
    """The figure of these runs (configs/figure2.ini's sweep), printing each curve's last median."""
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.8), sharey=False)
    for ax, norm in zip(axes, ["none", "sphere", "layernorm"]):
        sel = [r for r in runs if r["attrs"]["norm_type"] == norm]
        sel.sort(key=lambda r: MASKS.index(r["attrs"]["mask_type"]))
        plot_curves(ax, sel, "mu", lambda r: colours[MASKS.index(r["attrs"]["mask_type"])],
                    lambda r: r["attrs"]["mask_type"])
        ax.set_title({"none": "pure attention", "sphere": "attention + LayerNorm (sphere)",
                      "layernorm": "attention + LayerNorm (layernorm)"}[norm])
        ax.set_ylabel("mu(X)")
        for r in sel:
            final = np.nanmedian(r["metrics"]["mu_rel"][:, -1])
            print(f"{norm:9s} {r['attrs']['mask_type']:30s} median mu_rel at the last layer: {final:.3g}")
    a = runs[0]["attrs"]
    fig.suptitle(f"Figure 2: N = {a['tokens']}, d = {a['dim']}, L = {a['layers']}, {a['trials']} trials, Gaussian "
                 "W_Q, W_K, W_V (std 1/sqrt(d), fresh per layer); median and 10-90% band")
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    legend = {}  # one legend below the panels (the masks, and the collapse marker where a panel has it)
    for ax in axes:
        legend.update(zip(*reversed(ax.get_legend_handles_labels())))
    fig.legend(legend.values(), legend.keys(), loc="lower center", ncol=len(legend), frameon=False, fontsize=9)
    return fig


def main(argv=None):
    args = figure_arguments(__doc__, "figure2").parse_args(argv)
    os.chdir(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    save_figure(draw(run_config(args, "configs/figure2.ini")), args.out)

if __name__ == "__main__":
    from rcsim import command
    sys.exit(command.run(main))
