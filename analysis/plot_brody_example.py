#!/usr/bin/env python3
"""Brody's four-key example: attention weight of each key against the query angle.

usage: plot_brody_example.py BRODY_EXAMPLE.h5 -o OUT.png
Four panels (projection off/on x scaling off/on). Colour = key, line style = magnitude of key 3.
Each panel lists the keys that no query in the plane can select, per magnitude (the LP of
rcsim keys on the normalised keys).
"""
import os
import sys

os.environ.setdefault("MPLBACKEND", "Agg")
import matplotlib.pyplot as plt  # noqa: E402

import script_setup  # noqa: E402,F401  (the package rcsim of this checkout: analysis/script_setup.py)
from rcsim.command import Parser, run  # noqa: E402
from rcsim.figures import save_figure  # noqa: E402
from rcsim.files import open_checked, reading  # noqa: E402


def main(argv=None):
    p = Parser(description=__doc__.splitlines()[0])
    p.add_argument("example", help="output of rcsim brody-example (HDF5)")
    p.add_argument("-o", "--output", required=True, help="output image (PNG or PDF)")
    args = p.parse_args(argv)
    with open_checked(args.example, "rcsim-brody-example", complete=True) as f, reading(args.example):
        theta, mags = f["theta"][()], f["magnitude"][()]
        w, sel = f["weights"][()], f["selectable"][()]
        s = float(f.attrs["query_norm"])

    colours = ["tab:blue", "tab:orange", "tab:red", "tab:green"]
    styles = ["-", "--", "-.", ":", (0, (1, 3)), (0, (5, 5))]
    fig, axes = plt.subplots(2, 2, figsize=(12, 8), sharex=True, sharey=True)
    for p_ in range(2):
        for s_ in range(2):
            ax = axes[p_][s_]
            notes = []
            for k, m in enumerate(mags):
                for j in range(4):
                    ax.plot(theta, w[p_, s_, k, :, j], color=colours[j], ls=styles[k % len(styles)], lw=1.3,
                            label=f"key {j + 1}" if k == 0 else None)
                bad = [str(j + 1) for j in range(4) if not sel[p_, s_, k, j]]
                notes.append(f"{m:g}x: " + (",".join(bad) if bad else "none"))
            ax.set_title(f"projection {'on' if p_ else 'off'}, scaling {'on' if s_ else 'off'}")
            ax.text(0.62, 0.80, "unselectable keys\n" + "\n".join(notes), transform=ax.transAxes, va="top",
                    fontsize=8, bbox=dict(facecolor="white", alpha=0.8, lw=0))
            if p_ == 1:
                ax.set_xlabel("query angle theta (degrees, in the plane orthogonal to 1)")
            if s_ == 0:
                ax.set_ylabel("attention weight")
    handles = axes[0][0].get_legend_handles_labels()[0]
    for k, m in enumerate(mags):
        handles.append(plt.Line2D([], [], color="k", ls=styles[k % len(styles)], label=f"key 3 at {m:g}x"))
    fig.legend(handles=handles, loc="lower center", ncol=4 + len(mags), fontsize=9)
    fig.suptitle(f"Attention of a query of length {s:g} over four keys; key 3 of adjustable magnitude")
    fig.tight_layout(rect=(0, 0.05, 1, 0.97))
    save_figure(fig, os.path.splitext(args.output)[0], dpi=120, exts=(os.path.splitext(args.output)[1][1:] or "png",))


if __name__ == "__main__":
    sys.exit(run(main))
