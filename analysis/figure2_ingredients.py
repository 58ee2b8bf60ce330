#!/usr/bin/env python3
"""Figure 2 explained: attention + LayerNorm (`layernorm`) in the paper's model (float64 and
float32 arithmetic) beside the ingredients that stop collapse: dropout (p = 0.1 on attention and
output, training mode), a post-LN and a pre-LN residual; four masks; mu (the paper's axes,
log-log) next to the scale-free mu_rel and rank_one_residual. configs/figure2_ingredients.ini.
Writes figures/figure2_ingredients.{png,pdf} and the numbers in figures/figure2_ingredients.txt.

usage: /usr/bin/python3 analysis/figure2_ingredients.py [--tiny] [--out figures/figure2_ingredients]
"""
import os
import sys

os.environ.setdefault("MPLBACKEND", "Agg")

import script_setup  # noqa: E402,F401  (the package rcsim of this checkout: analysis/script_setup.py)
from rcsim.figures import MEASURES, figure_arguments, measure_grid, run_config, save_figure, stored_config, write_summary  # noqa: E402

MASKS = ["complete", "causal", "sliding_window", "unidirectional_sliding_window"]
INGREDIENTS = ["paper's model (float64)", "paper's model, float32 arithmetic", "dropout p = 0.1 (training mode)",
               "post-LN residual", "pre-LN residual", "peri-LN residual"]


def ingredient(run):
    """The curve's name, from the run's stored configuration."""
    c = stored_config(run)
    if float(c.get("dropout", "attention")) > 0 or float(c.get("dropout", "output")) > 0:
        return f"dropout p = {c.get('dropout', 'attention')} (training mode)"
    if float(c.get("residual", "alpha")) != 0:
        return f"{c.get('norm', 'position')}-LN residual"
    if c.get("run", "precision") == "float32":
        return "paper's model, float32 arithmetic"
    return "paper's model (float64)"


def ingredient_grid(runs, masks, title):
    """Rows: mu, mu_rel, rank_one_residual; columns: masks; one curve per ingredient."""
    rows = [("", lambda r: True, m) for m in MEASURES]
    cols = [(m, lambda r, m=m: r["attrs"]["mask_type"] == m) for m in masks]
    return measure_grid(runs, rows, cols, ingredient, INGREDIENTS, title)


def label(run):
    return f"{run['attrs']['mask_type']:30s} {ingredient(run)}"


def main(argv=None):
    args = figure_arguments(__doc__, "figure2_ingredients").parse_args(argv)
    os.chdir(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    runs = run_config(args, "configs/figure2_ingredients.ini")
    a = runs[0]["attrs"]
    fig = ingredient_grid(runs, MASKS, f"Figure 2 explained: attention + layernorm, N = {a['tokens']}, d = {a['dim']}, "
                          f"L = {a['layers']}, {a['trials']} trials, Gaussian weights (std 1/sqrt(d), fresh per "
                          "layer), sliding windows w = 2; median and 10-90% band over trials")
    save_figure(fig, args.out)
    write_summary(runs, label, args.out + ".txt")


if __name__ == "__main__":
    from rcsim import command
    sys.exit(command.run(main))
