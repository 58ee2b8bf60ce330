#!/usr/bin/env python3
"""Figure 1: N = d = 2 phase portraits (docs/science/model-spec.md 5.5; configs/equilibria_2x2.ini).

Left: pure attention (norm none): both tokens meet. Middle: `sphere`: trajectories of both
tokens from random starts on the circle; token 0 goes to (0, +-1), token 1 to A or B. Right:
with token 0 at (0, 1), where token 1 ends from each starting angle (rcsim equilibria): B's
basin (the open third-quadrant arc) highlighted, A, B and the unstable boundary (-1, 0) marked.

usage: /usr/bin/python3 analysis/figure1.py [--tiny] [--out figures/figure1]
"""
import os
import sys

os.environ.setdefault("MPLBACKEND", "Agg")
import h5py  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

import script_setup  # noqa: E402,F401  (the package rcsim of this checkout: analysis/script_setup.py)
from rcsim.figures import figure_arguments, rcsim, save_figure, write_hdf5  # noqa: E402

CONFIG = "configs/equilibria_2x2.ini"


def tokens(path):
    with h5py.File(path, "r") as f:
        return f["tokens"][()]  # [trial, layer, N, d]


def main(argv=None):
    args = figure_arguments(__doc__, "figure1").parse_args(argv)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    os.chdir(root)
    os.makedirs(args.data, exist_ok=True)
    trials, layers, angles = (3, 20, 24) if args.tiny else (16, 60, 720)
    common = ["--config", CONFIG, "--init.type=sphere", f"--run.trials={trials}", "--output.tokens=all", "--quiet"]
    none_h5, sphere_h5 = os.path.join(args.data, "none.h5"), os.path.join(args.data, "sphere.h5")
    rcsim(args, args.rcsim, "run", *common, "--norm.type=none", f"--model.layers={layers}",
          f"--output.file={none_h5}")
    rcsim(args, args.rcsim, "run", *common, "--norm.type=sphere", f"--model.layers={layers}",
          f"--output.file={sphere_h5}")
    # Basin of token 1 with token 0 at (0, 1): one start per angle, through rcsim equilibria.
    theta = (np.arange(angles) + 0.5) * 2 * np.pi / angles
    starts = np.zeros((angles, 2, 2))
    starts[:, 0, 1] = 1.0
    starts[:, 1, 0], starts[:, 1, 1] = np.cos(theta), np.sin(theta)
    starts_h5, eq_h5 = os.path.join(args.data, "starts.h5"), os.path.join(args.data, "basins.h5")
    write_hdf5(starts_h5, {"X0": starts})
    rcsim(args, args.rcsim, "equilibria", "--config", CONFIG, "--init.type=file", f"--init.file={starts_h5}",
          f"--run.trials={angles}", "--model.layers=5000", f"--output.file={eq_h5}", "--quiet", "--force")
    with h5py.File(eq_h5, "r") as f:
        end = f["end_states"][()]
        converged = f["converged"][()]

    fig, axes = plt.subplots(1, 3, figsize=(15, 5))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    ax = axes[0]
    for k, X in enumerate(tokens(none_h5)):
        c = colours[k % len(colours)]
        for i, marker in ((0, "o"), (1, "s")):
            ax.plot(X[:, i, 0], X[:, i, 1], "-", color=c, lw=0.8, alpha=0.8)
            ax.plot(X[0, i, 0], X[0, i, 1], marker, color=c, mfc="none")
        ax.plot(X[-1, 0, 0], X[-1, 0, 1], "*", color=c, ms=12)
    ax.set_title("pure attention: both tokens meet\n(o token 0, s token 1, * end)")
    circle = np.linspace(0, 2 * np.pi, 400)
    ax = axes[1]
    ax.plot(np.cos(circle), np.sin(circle), color="0.8")
    for k, X in enumerate(tokens(sphere_h5)):
        c = colours[k % len(colours)]
        for i, marker in ((0, "o"), (1, "s")):
            ax.plot(X[:, i, 0], X[:, i, 1], ".-", color=c, lw=0.6, ms=2, alpha=0.8)
            ax.plot(X[0, i, 0], X[0, i, 1], marker, color=c, mfc="none")
            ax.plot(X[-1, i, 0], X[-1, i, 1], marker, color=c, ms=9)
    ax.set_title("sphere: token 0 -> (0, +-1), token 1 -> A or B\n(open: start, filled: end)")
    ax = axes[2]
    ax.plot(np.cos(circle), np.sin(circle), color="0.8", lw=6)
    to_b = converged.astype(bool) & (np.abs(end[:, 1, 0] + 0.6) < 1e-6)
    ax.plot(np.cos(theta[to_b]), np.sin(theta[to_b]), ".", color="tab:red", label="start -> B (basin of B)")
    ax.plot(np.cos(theta[~to_b]), np.sin(theta[~to_b]), ".", color="tab:blue", label="start -> A or the boundary")
    ax.plot([0], [1], "o", color="tab:blue", ms=12, label="A = (0, 1) (also token 0)")
    ax.plot([-0.6], [-0.8], "o", color="tab:red", ms=12, label="B = (-0.6, -0.8)")
    ax.plot([-1], [0], "x", color="k", ms=12, mew=2, label="unstable boundary (-1, 0)")
    frac = to_b.mean()
    ax.set_title(f"token 0 at (0, 1): end of token 1 by start angle\nB's basin: {100 * frac:.1f}% of the circle")
    ax.legend(fontsize=8, loc="upper right")
    for ax in axes:
        ax.set_aspect("equal")
        ax.grid(True, alpha=0.3)
        ax.set_xlabel("x_1")
        ax.set_ylabel("x_2")
    fig.suptitle("N = d = 2, causal mask, uniform attention, W_V = [[0.5, 1], [0, 1]] (docs/science/model-spec.md 5.5)")
    fig.tight_layout()
    save_figure(fig, args.out)
    lo, hi = np.degrees(theta[to_b]).min(), np.degrees(theta[to_b]).max()
    print(f"B's basin: {to_b.sum()} of {angles} start angles, from {lo:.2f} to {hi:.2f} degrees")


if __name__ == "__main__":
    from rcsim import command
    sys.exit(command.run(main))
