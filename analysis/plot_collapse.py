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


def config_values(run):
    """The run's resolved configuration as {"section.key": value} (from /config)."""
    out, section = {}, ""
    for line in run["config"].splitlines():
        line = line.strip()
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
        elif "=" in line and not line.startswith(("#", ";")):
            k, v = line.split("=", 1)
            out[f"{section}.{k.strip()}"] = v.strip()
    return out


def curve_labels(runs):
    """One label per run: the configuration keys whose values differ between the runs (the swept
    keys of a sweep), else mask and normalisation."""
    values = [config_values(r) for r in runs]
    keys = sorted({k for v in values for k in v if k != "output.file"
                   and len({w.get(k) for w in values}) > 1})
    if not keys:
        return [label(r) for r in runs]
    return [", ".join(f"{k}={v.get(k)}" for k in keys) for v in values]


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
    fig, axes = plt.subplots(1, 2, figsize=(12, 5.4))
    names = curve_labels(runs)
    colours = plt.get_cmap("tab10" if len(runs) <= 10 else "tab20").colors
    for i, run in enumerate(runs):
        colour = colours[i % len(colours)]
        style = "-" if run["attrs"]["norm_type"] == "none" else "--"
        x = run["layer"] + 1
        for ax, key in zip(axes, ["mu", "mu_rel"]):
            values = run["metrics"][key]
            floor = np.finfo(float).tiny  # log axes: show exact zeros at the smallest double
            med, lo, hi = band(np.maximum(values, floor))
            ax.plot(x, med, style, color=colour, label=names[i])
            ax.fill_between(x, lo, hi, color=colour, alpha=0.15, linewidth=0)
    for ax, key, title in zip(axes, ["mu", "mu_rel"],
                              ["token similarity mu(X)", "relative mu(X) / ||X||_F"]):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("layer t + 1")
        ax.set_ylabel(key)
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
    # the legend below the plots, never over the curves
    handles, texts = axes[0].get_legend_handles_labels()
    ncol = min(2 if max(len(t) for t in texts) > 40 else 4, len(texts))
    fig.legend(handles, texts, loc="lower center", ncol=ncol, fontsize=8, frameon=False)
    a = runs[0]["attrs"]
    fig.suptitle(f"N = {a['tokens']}, d = {a['dim']}, L = {a['layers']}, {a['trials']} trials "
                 f"(median, 10-90% band)")
    rows = -(-len(texts) // ncol)
    fig.tight_layout(rect=(0, min(0.45, 0.03 + 0.04 * rows), 1, 1))
    os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
    fig.savefig(args.output, dpi=120)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
