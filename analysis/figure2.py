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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rcsim import band, figure_arguments, rcsim, save_figure, sweep_runs  # noqa: E402

MASKS = ["complete", "causal", "sliding_window", "unidirectional_sliding_window"]


def plot_curves(ax, runs, key, colour_of, label_of):
    floor = np.finfo(float).tiny
    for run in runs:
        x = run["layer"] + 1
        med, lo, hi = band(np.maximum(run["metrics"][key], floor))
        c = colour_of(run)
        ax.plot(x, med, color=c, label=label_of(run))
        ax.fill_between(x, lo, hi, color=c, alpha=0.15, linewidth=0)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("layer t + 1")
    ax.grid(True, which="both", alpha=0.3)


def run_config(args, config, tiny=("--run.trials=2", "--model.layers=6", "--model.tokens=8", "--model.dim=4")):
    """Run a figure's configuration (a sweep) into args.data; --tiny adds the `tiny` overrides."""
    out = os.path.join(args.data, "runs.h5")
    extra = list(tiny) if args.tiny else []
    rcsim(args, args.rcsim, "run", "--config", config, f"--output.file={out}", "--quiet", *extra)
    return sweep_runs(os.path.join(args.data, "runs"))


def main(argv=None):
    args = figure_arguments(__doc__.splitlines()[0], "figure2").parse_args(argv)
    os.chdir(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    runs = run_config(args, "configs/figure2.ini")
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
        ax.legend(fontsize=8)
        for r in sel:
            final = np.nanmedian(r["metrics"]["mu_rel"][:, -1])
            print(f"{norm:9s} {r['attrs']['mask_type']:30s} median mu_rel at the last layer: {final:.3g}")
    a = runs[0]["attrs"]
    fig.suptitle(f"Figure 2: N = {a['tokens']}, d = {a['dim']}, L = {a['layers']}, {a['trials']} trials, Gaussian "
                 "W_Q, W_K, W_V (std 1/sqrt(d), fresh per layer); median and 10-90% band")
    fig.tight_layout()
    save_figure(fig, args.out)


if __name__ == "__main__":
    main()
