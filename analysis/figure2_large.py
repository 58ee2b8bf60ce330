#!/usr/bin/env python3
"""Figure 2 explained at GPT-2 size: d = 768, 12 heads (d_QK = 64), N = 128, weights
N(0, 0.02^2), value maps of width 64 with an output projection, attention + layernorm, depth
300 on log-log axes; the paper's model (float64, float32 arithmetic), dropout, post-LN and pre-LN
residuals; mu next to mu_rel and rank_one_residual.
configs/figure2_large.ini. Writes figures/figure2_large.{png,pdf,txt}. About 9 s of CPU per
trial and point, 15 min in all (docs/science/figures.md); --tiny is a seconds-long version for CI.

usage: /usr/bin/python3 analysis/figure2_large.py [--tiny] [--out figures/figure2_large]
"""
import os
import sys

os.environ.setdefault("MPLBACKEND", "Agg")

import script_setup  # noqa: E402,F401  (the package rcsim of this checkout: analysis/script_setup.py)
from figure2_ingredients import ingredient_grid, label  # noqa: E402
from rcsim.figures import figure_arguments, run_config, save_figure, stored_config, write_summary  # noqa: E402

# --tiny keeps the block structure (heads, key_dim) at a toy width.
TINY = ("--run.trials=2", "--model.layers=6", "--model.tokens=8", "--model.dim=24", "--model.key_dim=2",
        "--model.value_dim=2")


def main(argv=None):
    args = figure_arguments(__doc__, "figure2_large").parse_args(argv)
    os.chdir(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    runs = run_config(args, "configs/figure2_large.ini", TINY)
    a = runs[0]["attrs"]
    dv = stored_config(runs[0]).get("model", "value_dim")
    fig = ingredient_grid(runs, ["complete", "causal"],
                          f"Figure 2 explained, GPT-2 size: attention + layernorm, N = {a['tokens']}, d = {a['dim']}, "
                          f"{a['heads']} heads, d_QK = {a['d_qk']:g}, L = {a['layers']}, {a['trials']} trials,\n"
                          f"weights N(0, 0.02^2) fresh per layer, W_V,h d x {dv} and W_O,h {dv} x d; "
                          "median and 10-90% band over trials")
    save_figure(fig, args.out)
    write_summary(runs, label, args.out + ".txt")


if __name__ == "__main__":
    from rcsim import command
    sys.exit(command.run(main))
