#!/usr/bin/env python3
"""Brody's heat map: unselectable keys over the number of keys n and the dimension d.

usage: plot_brody_map.py BRODY_MAP.h5 -o OUT.png
Rows: one per normalisation stored in the file (e.g. none, layernorm). Columns: the mean
fraction of unselectable keys per draw, and the fraction of draws with at least one
unselectable key (the paper's text and its code differ on which of the two it plotted).
"""
import os
import sys

os.environ.setdefault("MPLBACKEND", "Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

import script_setup  # noqa: E402,F401  (the package rcsim of this checkout: analysis/script_setup.py)
from rcsim.command import Parser, run  # noqa: E402
from rcsim.figures import save_figure  # noqa: E402
from rcsim.files import open_checked, reading  # noqa: E402


def main(argv=None):
    p = Parser(description=__doc__.splitlines()[0])
    p.add_argument("map", help="output of rcsim brody-map (HDF5)")
    p.add_argument("-o", "--output", required=True, help="output image (PNG or PDF)")
    args = p.parse_args(argv)
    with open_checked(args.map, "rcsim-brody-map", complete=True) as f, reading(args.map):
        counts, dims = f["count"][()], f["dim"][()]
        norms = str(f.attrs["norms"]).split(",")
        draws, eps = int(f.attrs["draws"]), float(f.attrs["norm_eps"])
        data = {g: (f[g]["unselectable_fraction"][()], f[g]["any_unselectable_fraction"][()]) for g in norms}

    fig, axes = plt.subplots(len(norms), 2, figsize=(12, 3.2 * len(norms) + 0.6), squeeze=False)
    extent = [counts[0] - 0.5, counts[-1] + 0.5, dims[0] - 0.5, dims[-1] + 0.5]
    titles = ["mean fraction of unselectable keys", "fraction of draws with >= 1 unselectable key"]
    for r, g in enumerate(norms):
        for c in range(2):
            ax = axes[r][c]
            im = ax.imshow(data[g][c], origin="lower", aspect="auto", extent=extent, vmin=0,
                           vmax=max(1e-12, 1.0 if c == 1 else float(np.max(data[norms[0]][0]))), cmap="viridis")
            ax.set_title(f"{g}: {titles[c]}\n(max {np.max(data[g][c]):.3g})", fontsize=10)
            ax.set_xlabel("number of keys n")
            ax.set_ylabel("dimension d")
            fig.colorbar(im, ax=ax)
    fig.suptitle(f"Unselectable keys of i.i.d. N(0,1) keys, {draws} draws per cell (norm eps = {eps:g})")
    fig.tight_layout()
    save_figure(fig, os.path.splitext(args.output)[0], dpi=120, exts=(os.path.splitext(args.output)[1][1:] or "png",))


if __name__ == "__main__":
    sys.exit(run(main))
