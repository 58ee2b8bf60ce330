#!/usr/bin/env python3
"""Wu et al.'s Figure 2 measure on a pretrained transformer, and the reverse pass through it:
mu(X(t)) (the paper's token similarity, log axis) and mu_rel = mu / ||X||_F against depth for
stories260K (configs/models/stories260K) on sequences it generated itself (BOS + 63 ids sampled
at temperature 1, seed 1: the sequences of figure4_pretrained.py), beside random blocks of the
same architecture on the same X(0), each with and without RMSNorm, and beside Figure 2's own
setting on the same X(0): random attention-only layers (rcsim's default layer, as
configs/figure2.ini: one head, Gaussian W_Q, W_K, W_V fresh per layer, causal mask, no residual,
no MLP), pure and followed by LayerNorm. Third column: the backward signal, the gradient norms
||dLoss/dX(t)||_F / ||dLoss/dX(depth)||_F of the cross-entropy of the next ids (Model.gradients),
for the Llama stacks. Top row: the trained depth (5 blocks); bottom row: a probe to depth 50 (the
5 blocks repeated cyclically; not the paper's setting; the stacks without RMSNorm overflow there
and are left out). Median and 10-90% band over sequences. Numbers in OUT.txt.

usage: /usr/bin/python3 analysis/figure2_pretrained.py [--tiny] [--out figures/figure2_pretrained]
"""
import os
import sys

os.environ.setdefault("MPLBACKEND", "Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

# The package rcsim with its compiled engine (Model.gradients, rcsim.layer run in-process): the build
# tree's (build/python), which analysis/script_setup.py puts first when it exists.
import script_setup  # noqa: E402,F401
import rcsim as rc  # noqa: E402
from rcsim.figures import draw_curve, figure_arguments, log_panel, save_figure, write_text  # noqa: E402

MODEL = os.path.join("configs", "models", "stories260K", "stories260K.bin")
# name, weights, RMSNorm, colour, line; then the attention-only stacks (norm.type).
LLAMA = [("pretrained", "pretrained", True, "C0", "-"), ("pretrained, no RMSNorm", "pretrained", False, "C0", "--"),
         ("random blocks", "random", True, "C3", "-"), ("random blocks, no RMSNorm", "random", False, "C3", "--")]
ATTENTION = [("attention only (Fig. 2), pure", "none", "0.4", ":"),
             ("attention only (Fig. 2), + LayerNorm", "layernorm", "0.4", "-.")]


def llama_curves(model, ids, norm, depth):
    """mu, mu_rel [sequence, t] and the gradient-norm ratios [sequence, t] of one Llama stack."""
    mu, rel, grad = [], [], []
    for seq in ids:
        m = rc.measures(model.states(seq, norm=norm, depth=depth))
        mu.append(m["mu"])
        rel.append(m["mu_rel"])
        g = np.linalg.norm(model.gradients(seq, norm=norm, depth=depth)["dX"], axis=(1, 2))
        grad.append(g / g[-1])
    return {"mu": np.array(mu), "mu_rel": np.array(rel), "grad": np.array(grad)}


def attention_curves(X0s, norm, depth):
    """mu, mu_rel [sequence, t] of Figure 2's random attention-only stack on each X(0) (one draw, seed 1)."""
    mu, rel = [], []
    for X0 in X0s:
        m = rc.measures(rc.layer(X0, layers=depth, all_layers=True, mask={"type": "causal"}, norm={"type": norm},
                                 run={"seed": 1}))
        mu.append(m["mu"])
        rel.append(m["mu_rel"])
    return {"mu": np.array(mu), "mu_rel": np.array(rel)}


def compute(sequences, tokens, depths):
    pretrained = rc.load_model(MODEL)
    models = {"pretrained": pretrained, "random": pretrained.with_random_blocks(seed=1)}
    ids = rc.generate(pretrained, steps=tokens - 1, sequences=sequences, temperature=1.0, seed=1)
    X0s = [pretrained.states(seq, depth=1)[0] for seq in ids]
    out = {}
    for depth in depths:
        for name, weights, norm, *_ in LLAMA:
            if norm or depth == depths[0]:
                out[(name, depth)] = llama_curves(models[weights], ids, norm, depth)
        for name, norm, *_ in ATTENTION:
            out[(name, depth)] = attention_curves(X0s, norm, depth)
    return out


def quantiles(v, t):
    q = np.nanquantile(v[:, t], [0.5, 0.1, 0.9])
    return f"{q[0]:.3g} [{q[1]:.3g}, {q[2]:.3g}]"


def table(results, depths, sequences, tokens):
    lines = [f"# Wu et al. Figure 2's mu on stories260K and the reverse pass: {sequences} sequences of N = {tokens} "
             "tokens (BOS + sampled at temperature 1, seed 1), d = 64; median [10%, 90%] over sequences; grad = "
             "||dLoss/dX(t)||_F / ||dLoss/dX(depth)||_F, Loss the cross-entropy of the next ids; blocks beyond 5 "
             "repeat cyclically (a probe)"]
    for (name, depth), c in results.items():
        lines.append(f"\n## {name}, depth {depth}")
        lines.append("layer  mu  mu_rel" + ("  grad" if "grad" in c else ""))
        for t in sorted({0, 1, 2, 3, 4, 5, 10, 20, depth} & set(range(depth + 1))):
            row = f"{t:5d}  {quantiles(c['mu'], t)}  {quantiles(c['mu_rel'], t)}"
            lines.append(row + (f"  {quantiles(c['grad'], t)}" if "grad" in c else ""))
    return "\n".join(lines) + "\n"


def panel_row(axes, results, depth):
    x = np.arange(depth + 1)
    styles = [(n, c, ls) for n, _, _, c, ls in LLAMA] + [(n, c, ls) for n, _, c, ls in ATTENTION]
    present = [(n, c, ls) for n, c, ls in styles if (n, depth) in results]
    log_panel(axes[0], [{"x": x, "values": results[(n, depth)]["mu"], "colour": c, "label": n, "ls": ls}
                        for n, c, ls in present])
    for n, c, ls in present:
        draw_curve(axes[1], x, results[(n, depth)]["mu_rel"], c, n, ls=ls)
    log_panel(axes[2], [{"x": x, "values": results[(n, depth)]["grad"], "colour": c, "label": n, "ls": ls}
                        for n, c, ls in present if "grad" in results[(n, depth)]])
    titles = ["mu(X(t)) (Wu et al. Figure 2)", "mu_rel = mu / ||X||_F",
              "||dLoss/dX(t)|| / ||dLoss/dX(depth)|| (cross-entropy)"]
    for ax, title in zip(axes, titles):
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("layer t (X(0) = embeddings)")
        ax.grid(True, alpha=0.3)


def main(argv=None):
    args = figure_arguments(__doc__, "figure2_pretrained").parse_args(argv)
    os.chdir(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    sequences, tokens, depths = (4, 16, (5, 10)) if args.tiny else (64, 64, (5, 50))
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    results = compute(sequences, tokens, depths)
    fig, axes = plt.subplots(2, 3, figsize=(17, 9))
    for row, depth in zip(axes, depths):
        panel_row(row, results, depth)
    axes[0, 0].legend(fontsize=8)
    axes[1, 0].legend(fontsize=8)
    fig.suptitle(f"stories260K (pretrained, 5 blocks; bottom: blocks repeated to depth {depths[1]}, a probe) on "
                 f"{sequences} generated sequences of {tokens} tokens,\nbeside random blocks and Figure 2's random "
                 "attention-only layers on the same X(0); median and 10-90% band")
    fig.tight_layout()
    save_figure(fig, args.out)
    write_text(args.out + ".txt", table(results, depths, sequences, tokens))
    print("wrote " + args.out + ".txt")


if __name__ == "__main__":
    from rcsim import command
    sys.exit(command.run(main))
