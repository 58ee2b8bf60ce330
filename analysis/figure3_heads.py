#!/usr/bin/env python3
"""Figure 3 with one and four heads: d_QK in {1/64, 1, 64} for the complete, causal and
sliding-window masks, with pure attention, sphere and layernorm; mu_rel (figures/figure3_heads),
mu (the paper's axes, figures/figure3_heads_mu) and rank_one_residual
(figures/figure3_heads_rank_one_residual); numbers in figures/figure3_heads.txt.
configs/figure3_heads.ini.

usage: /usr/bin/python3 analysis/figure3_heads.py [--tiny] [--out figures/figure3_heads]
"""
import os
import sys

os.environ.setdefault("MPLBACKEND", "Agg")
import numpy as np  # noqa: E402

import script_setup  # noqa: E402,F401  (the package rcsim of this checkout: analysis/script_setup.py)
from figure3 import DQK, MASKS  # noqa: E402
from rcsim.figures import figure_arguments, measure_grid, run_config, save_figure, write_summary  # noqa: E402

NORMS = {"none": "pure attention", "sphere": "sphere", "layernorm": "layernorm"}
CURVES = [f"d_QK = {q:g}" for q in DQK]


def curve(run):
    return f"d_QK = {float(run['attrs']['d_qk']):g}"


def label(run):
    a = run["attrs"]
    return f"H = {int(a['heads'])} {a['norm_type']:9s} {a['mask_type']:15s} d_QK = {float(a['d_qk']):<9g}"


def first_layer_attention(run):
    """How sharp d_QK makes attention: median over trials of the mean row entropy of A (mean over
    rows and heads, as rcsim stores it) in the layer 1 -> 2, the first to see normalised tokens
    (X(0) is Gaussian under every norm.type), against ln N for uniform attention over all N."""
    e = run["metrics"]["attn_entropy"][:, list(run["attention_layer"]).index(1)]
    return (f"layer-1 attention entropy: median {np.nanmedian(e):.3g} (uniform over all N tokens: "
            f"ln N = {np.log(int(run['attrs']['tokens'])):.3g})")


def main(argv=None):
    args = figure_arguments(__doc__, "figure3_heads").parse_args(argv)
    os.chdir(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    runs = run_config(args, "configs/figure3_heads.ini")
    a = runs[0]["attrs"]
    cols = [(m, lambda r, m=m: r["attrs"]["mask_type"] == m) for m in MASKS]
    for measure, suffix in (("mu_rel", ""), ("mu", "_mu"), ("rank_one_residual", "_rank_one_residual")):
        rows = [(f"{heads} head{'s' if heads > 1 else ''}, {NORMS[n]}",
                 lambda r, h=heads, n=n: int(r["attrs"]["heads"]) == h and r["attrs"]["norm_type"] == n, measure)
                for heads in (1, 4) for n in NORMS]
        fig = measure_grid(runs, rows, cols, curve, CURVES,
                           f"Figure 3, one and four heads ({measure}): N = {a['tokens']}, d = {a['dim']}, "
                           f"L = {a['layers']}, {a['trials']} trials, Gaussian W_Q, W_K, orthogonal W_V per head, "
                           "sliding window w = 2; median and 10-90% band", panel_size=(4.2, 2.6))
        save_figure(fig, args.out + suffix)
    write_summary(runs, label, args.out + ".txt", at=(3, 10, 30), extra=first_layer_attention)


if __name__ == "__main__":
    from rcsim import command
    sys.exit(command.run(main))
