#!/usr/bin/env python3
"""Riechers' picture for d = 3: the LayerNorm image is an ellipse in a plane; samples approach it.

usage: plot_ln_ellipse.py LN_GEOMETRY.h5 -o OUT.png
Left: the ellipse (boundary of the image, from the principal axes and semi-axes) in R^3 with the
sampled LayerNorm outputs of every epsilon. Right: one panel per epsilon in the plane's own
coordinates (along the two principal axes) with the histogram of the normalised radius inset.
"""
import os
import sys

os.environ.setdefault("MPLBACKEND", "Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

import script_setup  # noqa: E402,F401  (the package rcsim of this checkout: analysis/script_setup.py)
from rcsim.command import Parser, UsageError, run  # noqa: E402
from rcsim.figures import save_figure  # noqa: E402
from rcsim.files import open_checked, reading  # noqa: E402


def main(argv=None):
    p = Parser(description=__doc__.splitlines()[0])
    p.add_argument("geometry", help="output of rcsim ln-geometry with ln.dim = 3 (HDF5)")
    p.add_argument("-o", "--output", required=True, help="output image (PNG or PDF)")
    args = p.parse_args(argv)
    with open_checked(args.geometry, "rcsim-ln-geometry", complete=True) as f, reading(args.geometry):
        if int(f.attrs["dim"]) != 3:
            raise UsageError(f"{args.geometry}: this figure needs ln.dim = 3 (the file has {int(f.attrs['dim'])})")
        g, b, axes, semi = f["gain"][()], f["bias"][()], f["axes"][()], f["semi_axes"][()]
        normal, eps, pts = f["normal"][()], f["eps"][()], f["points"][()]

    t = np.linspace(0, 2 * np.pi, 400)
    ellipse = b[None, :] + np.outer(semi[0] * np.cos(t), axes[:, 0]) + np.outer(semi[1] * np.sin(t), axes[:, 1])
    colours = plt.cm.plasma(np.linspace(0.1, 0.8, len(eps)))

    fig = plt.figure(figsize=(4.5 * (len(eps) + 1.2), 4.8))
    ax3 = fig.add_subplot(1, len(eps) + 1, 1, projection="3d")
    ax3.plot(*ellipse.T, color="k", lw=1.5, label="image boundary")
    for k, e in enumerate(eps):
        ax3.scatter(*pts[k].T, s=2, color=colours[k], alpha=0.5, label=f"eps = {e:g}")
    ax3.set_box_aspect(np.ptp(ellipse, axis=0))  # equal scales on the three axes
    # Look at the plane obliquely: 35 degrees away from its normal.
    ax3.view_init(elev=np.degrees(np.arcsin(np.clip(normal[2], -1, 1))) - 35,
                  azim=np.degrees(np.arctan2(normal[1], normal[0])))
    ax3.set_title(f"g = {np.array2string(g, precision=2)}, b = {np.array2string(b, precision=2)}", fontsize=9)
    ax3.legend(fontsize=7, loc="upper left")
    for k, e in enumerate(eps):
        ax = fig.add_subplot(1, len(eps) + 1, k + 2)
        c = (pts[k] - b[None, :]) @ axes  # coordinates along the principal axes
        ax.plot(semi[0] * np.cos(t), semi[1] * np.sin(t), color="k", lw=1.2)
        ax.scatter(c[:, 0], c[:, 1], s=2, color=colours[k], alpha=0.6)
        ax.set_aspect("equal")
        ax.set_title(f"eps = {e:g}: in-plane coordinates", fontsize=10)
        ax.set_xlabel(f"axis 1 (semi-axis {semi[0]:.3g})")
        ax.set_ylabel(f"axis 2 (semi-axis {semi[1]:.3g})")
        rho = np.sqrt((c[:, 0] / semi[0]) ** 2 + (c[:, 1] / semi[1]) ** 2)
        inset = ax.inset_axes([0.36, 0.36, 0.3, 0.28])
        inset.hist(rho, bins=40, range=(0, 1), color=colours[k])
        inset.set_xlabel("rho", fontsize=7)
        inset.tick_params(labelsize=6)
        inset.set_yticks([])
    fig.suptitle(f"LayerNorm image for d = 3: the plane normal to alpha = 1/g "
                 f"(n = {np.array2string(normal, precision=3)}), inside the ellipse")
    fig.tight_layout()
    save_figure(fig, os.path.splitext(args.output)[0], dpi=120, exts=(os.path.splitext(args.output)[1][1:] or "png",))


if __name__ == "__main__":
    sys.exit(run(main))
