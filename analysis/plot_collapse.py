#!/usr/bin/env python3
"""Collapse curves: mu and mu_rel against layer (log-log), median and 10-90% band over trials.

usage: plot_collapse.py RUN.h5|SWEEP_DIR [...] -o OUT.png
Several runs are overlaid, labelled by mask and normalisation. The x axis is layer t + 1, so the
input (t = 0) sits at 1 on the logarithmic axis.
"""
import argparse
import os
import sys

os.environ.setdefault("MPLBACKEND", "Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rcsim import band, label, load_run, run_paths  # noqa: E402


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("runs", nargs="+", help="rcsim run files (HDF5), or sweep directories (their complete points)")
    p.add_argument("-o", "--output", required=True, help="output image (PNG or PDF)")
    args = p.parse_args(argv)
    for path in args.runs:
        if not os.path.exists(path):
            p.error(f"no such file: {path}")

    runs = [load_run(path) for path in run_paths(args.runs)]
    if not runs:
        p.error("no complete run files in " + " ".join(args.runs))
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.8))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    masks = sorted({r["attrs"]["mask_type"] for r in runs})
    for run in runs:
        colour = colours[masks.index(run["attrs"]["mask_type"]) % len(colours)]
        style = "-" if run["attrs"]["norm_type"] == "none" else "--"
        x = run["layer"] + 1
        for ax, key in zip(axes, ["mu", "mu_rel"]):
            values = run["metrics"][key]
            floor = np.finfo(float).tiny  # log axes: show exact zeros at the smallest double
            med, lo, hi = band(np.maximum(values, floor))
            ax.plot(x, med, style, color=colour, label=label(run))
            ax.fill_between(x, lo, hi, color=colour, alpha=0.15, linewidth=0)
    for ax, key, title in zip(axes, ["mu", "mu_rel"],
                              ["token similarity mu(X)", "relative mu(X) / ||X||_F"]):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("layer t + 1")
        ax.set_ylabel(key)
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=8)
    a = runs[0]["attrs"]
    fig.suptitle(f"N = {a['tokens']}, d = {a['dim']}, L = {a['layers']}, {a['trials']} trials "
                 f"(median, 10-90% band)")
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
    fig.savefig(args.output, dpi=120)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
