#!/usr/bin/env python3
"""Figure 2 explained: attention + LayerNorm (`layernorm`) in the paper's model beside the
ingredients that stop mu_rel from falling: float32 tokens, dropout (p = 0.1 on attention and
output, training mode), a post-LN and a pre-LN residual. configs/figure2_ingredients.ini.

usage: /usr/bin/python3 analysis/figure2_ingredients.py [--tiny] [--out figures/figure2_ingredients]
"""
import configparser
import os
import sys

os.environ.setdefault("MPLBACKEND", "Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from figure2 import run_config  # noqa: E402
from rcsim import band, figure_arguments, save_figure  # noqa: E402

MASKS = ["complete", "causal"]
FLOOR = 1e-18  # exact zeros (bitwise identical tokens) are drawn here


def ingredient(run):
    """The curve's name, from the run's stored configuration."""
    c = configparser.ConfigParser()
    c.read_string(run["config"])
    if c.get("run", "precision") == "float32":
        return "float32 tokens"
    if float(c.get("dropout", "attention")) > 0 or float(c.get("dropout", "output")) > 0:
        return f"dropout p = {c.get('dropout', 'attention')} (training mode)"
    if float(c.get("residual", "alpha")) != 0:
        return f"{c.get('norm', 'position')}-LN residual"
    return "paper's model (float64)"


def main(argv=None):
    args = figure_arguments(__doc__.splitlines()[0], "figure2_ingredients").parse_args(argv)
    os.chdir(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    runs = run_config(args, "configs/figure2_ingredients.ini")
    names = ["paper's model (float64)", "float32 tokens", "dropout p = 0.1 (training mode)",
             "post-LN residual", "pre-LN residual"]
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.8), sharey=True)
    for ax, mask in zip(axes, MASKS):
        sel = sorted((r for r in runs if r["attrs"]["mask_type"] == mask), key=lambda r: names.index(ingredient(r)))
        for r in sel:
            name = ingredient(r)
            med, lo, hi = band(np.maximum(r["metrics"]["mu_rel"], FLOOR))
            c = colours[names.index(name)]
            x = r["layer"] + 1
            ax.plot(x, med, color=c, label=name)
            ax.fill_between(x, lo, hi, color=c, alpha=0.15, linewidth=0)
            final = np.nanmedian(r["metrics"]["mu_rel"][:, -1])
            print(f"{mask:9s} {name:32s} median mu_rel at layer {r['layer'][-1]}: {final:.3g}")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("layer t + 1")
        ax.set_title(f"{mask} mask, attention + layernorm")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    axes[0].set_ylabel(f"mu_rel = mu / ||X||_F (0 drawn at {FLOOR:g})")
    a = runs[0]["attrs"]
    fig.suptitle(f"Figure 2 explained: N = {a['tokens']}, d = {a['dim']}, L = {a['layers']}, {a['trials']} trials, "
                 "Gaussian weights (std 1/sqrt(d), fresh per layer); median and 10-90% band")
    fig.tight_layout()
    save_figure(fig, args.out)


if __name__ == "__main__":
    main()
