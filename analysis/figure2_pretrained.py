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

Checks (docs/science/pretrained.md; the script exits 1 when one fails): Wu et al.'s Figure 2 claims
(pure attention collapses; in pretrained models the block prevents it) with the random-block
control, and the reverse pass's findings. A wrong engine must fail them (tests/CMakeLists.txt):
--perturb llama.weights=random, --perturb llama.norm=false (analysis/pretrained_checks.py), or an
rcsim key for the attention-only layers such as --perturb residual.alpha=1.

usage: /usr/bin/python3 analysis/figure2_pretrained.py [--tiny] [--out figures/figure2_pretrained]
                                                       [--perturb KEY=VALUE ...]
"""
import os
import sys
import warnings

os.environ.setdefault("MPLBACKEND", "Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

# The package rcsim with its compiled engine (Model.gradients, rcsim.layer run in-process): the build
# tree's (build/python), which analysis/script_setup.py puts first when it exists.
import script_setup  # noqa: E402,F401
import rcsim as rc  # noqa: E402
import pretrained_checks as pc  # noqa: E402  (analysis/pretrained_checks.py: the wrong engines, the bands)
from rcsim.figures import draw_curve, figure_arguments, log_panel, save_figure, write_text  # noqa: E402

MODEL = os.path.join("configs", "models", "stories260K", "stories260K.bin")
# name, weights, RMSNorm, colour, line; then the attention-only stacks (norm.type).
LLAMA = [("pretrained", "pretrained", True, "C0", "-"), ("pretrained, no RMSNorm", "pretrained", False, "C0", "--"),
         ("random blocks", "random", True, "C3", "-"), ("random blocks, no RMSNorm", "random", False, "C3", "--")]
ATTENTION = [("attention only (Fig. 2), pure", "none", "0.4", ":"),
             ("attention only (Fig. 2), + LayerNorm", "layernorm", "0.4", "-.")]


def llama_curves(model, ids, norm, depth):
    """mu, mu_rel [sequence, t] and the gradient-norm ratios [sequence, t] of one Llama stack; a sequence whose
    stream turns non-finite (without RMSNorm it overflows with depth) is NaN from there on, its ratios NaN,
    and counted in "nonfinite"."""
    mu, rel, grad, bad = [], [], [], 0
    for seq in ids:
        X = model.states(seq, norm=norm, depth=depth, nonfinite="keep")  # cut below at the first non-finite X(t)
        finite = np.isfinite(X).all(axis=(1, 2))
        k = depth + 1 if finite.all() else int(np.argmin(finite))
        m = rc.measures(X[:k])
        pad = np.full(depth + 1 - k, np.nan)
        mu.append(np.concatenate([m["mu"], pad]))
        rel.append(np.concatenate([m["mu_rel"], pad]))
        if k == depth + 1:
            g = np.linalg.norm(model.gradients(seq, norm=norm, depth=depth)["dX"], axis=(1, 2))
            grad.append(g / g[-1])
        else:
            grad.append(np.full(depth + 1, np.nan))
            bad += 1
    return {"mu": np.array(mu), "mu_rel": np.array(rel), "grad": np.array(grad), "nonfinite": bad}


def attention_curves(X0s, norm, depth, perturb):
    """mu, mu_rel [sequence, t] of Figure 2's random attention-only stack on each X(0) (one draw, seed 1), with
    the perturbation's rcsim keys replacing the script's own (NaN for a sequence that turns non-finite)."""
    sections = {"norm": {"type": norm}, "run": {"seed": 1}}
    mask = {"type": "causal"}
    for key, value in pc.layer_keys(perturb).items():
        section, name = key.split(".", 1)
        (mask if section == "mask" else sections.setdefault(section, {}))[name] = value
    mu, rel = [], []
    for X0 in X0s:
        try:
            m = rc.measures(rc.layer(X0, layers=depth, all_layers=True, mask=mask, **sections))
        except FloatingPointError:
            m = {"mu": np.full(depth + 1, np.nan), "mu_rel": np.full(depth + 1, np.nan)}
        mu.append(m["mu"])
        rel.append(m["mu_rel"])
    return {"mu": np.array(mu), "mu_rel": np.array(rel)}


def compute(sequences, tokens, depths, perturb):
    pretrained = rc.load_model(MODEL)
    models = {"pretrained": pretrained, "random": pretrained.with_random_blocks(seed=1)}
    ids = rc.generate(pretrained, steps=tokens - 1, sequences=sequences, temperature=1.0, seed=1)
    X0s = [pretrained.states(seq, depth=1)[0] for seq in ids]
    out = {}
    for depth in depths:
        for name, weights, norm, *_ in LLAMA:
            if norm or depth == depths[0]:
                weights, run_norm = pc.llama_setting(perturb, weights, norm)
                out[(name, depth)] = llama_curves(models[weights], ids, run_norm, depth)
        for name, norm, *_ in ATTENTION:
            out[(name, depth)] = attention_curves(X0s, norm, depth, perturb)
    return out


def quantiles(v, t):
    return pc.fmt(v[:, t]) if np.isfinite(v[:, t]).any() else "non-finite"


TRAINED = 5  # the checkpoint's blocks


def collapse_checks(c, r, depths):
    """Figure 2's mu_rel: the paper's attention-only setting collapses, the Llama blocks do not (random ones
    neither: the control), and the trained weights keep the tokens further apart than random ones."""
    L, D = depths
    pure, ln = (r[(ATTENTION[k][0], D)]["mu_rel"][:, D] for k in (0, 1))
    c.add(f"Wu et al. (Thm. 1, Fig. 2): pure attention (Fig. 2's random attention-only layers, causal mask) "
          f"collapses: mu_rel at layer {D} below 1e-5 in every sequence", pc.fmt(pure), "every one < 1e-5",
          bool(np.all(pure < 1e-5)))
    c.add(f"Fig. 2's attention-only layers followed by LayerNorm collapse too on this X(0) (the caption's 'as soon "
          f"as we solely add in LayerNorm, mu no longer converges to zero' is not seen): mu_rel at layer {D} below "
          "1e-5 in every sequence", pc.fmt(ln), "every one < 1e-5", bool(np.all(ln < 1e-5)))
    pre, rnd = r[("pretrained", D)], r[("random blocks", D)]
    low = {n: np.nanmin(r[(n, D)]["mu_rel"]) if not r[(n, D)]["nonfinite"] else np.nan
           for n in ("pretrained", "random blocks")}
    c.add(f"Wu Fig. 2, pretrained models 'together with other components': the Llama blocks with RMSNorm do not "
          f"collapse, pretrained and random ones (the control: the block, not the training, prevents it): mu_rel "
          f"above 0.2 at every layer to {D}, every sequence finite",
          ", ".join(f"{n}: lowest {v:.3g}, {r[(n, D)]['nonfinite']} non-finite" for n, v in low.items()),
          "both > 0.2, 0 non-finite", all(v > 0.2 for v in low.values()))
    overlap = [t for t in (L, D) if not pc.below(rnd["mu_rel"][:, t], pre["mu_rel"][:, t])]
    c.add(f"the trained weights keep the tokens further apart: the pretrained mu_rel band (10-90%) lies above the "
          f"random blocks' at layers {L} and {D}", f"overlap at {overlap}" if overlap else "apart at both",
          "apart at both", not overlap)


def gradient_checks(c, r, depths):
    """The reverse pass over the trained depth (rcsim's measurement; Wu et al. state no gradient result)."""
    L = depths[0]
    g = {n: r[(n, L)]["grad"][:, 0] for n, *_ in LLAMA}
    c.add(f"the gradient grows on its way back through the pretrained blocks: ||dLoss/dX(0)|| / ||dLoss/dX({L})|| "
          "above 10 in every sequence, its band (10-90%) above the random blocks'",
          f"pretrained {pc.fmt(g['pretrained'])}, random blocks {pc.fmt(g['random blocks'])}",
          "every pretrained one > 10; bands apart",
          bool(np.all(g["pretrained"] > 10) and pc.below(g["random blocks"], g["pretrained"])))
    med = {n: pc.band(v)[0] for n, v in g.items()}
    c.add("RMSNorm's 1/rms factor is not what makes the gradient grow: random blocks amplify as much without "
          "RMSNorm (median within a factor 2 of theirs with it), while the pretrained blocks without RMSNorm "
          "amplify less than 3 times in every sequence",
          f"random blocks {med['random blocks']:.3g} with, {med['random blocks, no RMSNorm']:.3g} without; "
          f"pretrained without {pc.fmt(g['pretrained, no RMSNorm'])}",
          "random ratio in [0.5, 2]; every pretrained one without < 3",
          0.5 <= med["random blocks, no RMSNorm"] / med["random blocks"] <= 2
          and bool(np.all(g["pretrained, no RMSNorm"] < 3)))


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
    # a stream about to overflow (a wrong engine without RMSNorm) reaches mu near 1e308, which a log axis
    # cannot tick: such values are left out of the plot (the table and the checks keep them)
    log_panel(axes[0], [{"x": x, "values": np.where(results[(n, depth)]["mu"] < 1e100, results[(n, depth)]["mu"],
                                                    np.nan), "colour": c, "label": n, "ls": ls} for n, c, ls in present])
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
    parser = figure_arguments(__doc__, "figure2_pretrained")
    parser.add_argument("--perturb", type=pc.perturbation, action="append", default=[], metavar="KEY=VALUE",
                        help="a deliberately wrong engine (llama.weights=random, llama.norm=false, or an rcsim key "
                             "for the attention-only layers; analysis/pretrained_checks.py): the checks must fail")
    args = parser.parse_args(argv)
    perturb = pc.perturbations(args.perturb, parser)
    os.chdir(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    sequences, tokens, depths = (6, 16, (TRAINED, 24)) if args.tiny else (64, 64, (TRAINED, 50))
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    results = compute(sequences, tokens, depths, perturb)
    checks = pc.Checks()
    collapse_checks(checks, results, depths)
    gradient_checks(checks, results, depths)
    fig, axes = plt.subplots(2, 3, figsize=(17, 9))
    with warnings.catch_warnings():  # the bands of layers where every sequence overflowed are NaN: left blank
        warnings.simplefilter("ignore", RuntimeWarning)
        for row, depth in zip(axes, depths):
            panel_row(row, results, depth)
    axes[0, 0].legend(fontsize=8)
    axes[1, 0].legend(fontsize=8)
    fig.suptitle(f"stories260K (pretrained, 5 blocks; bottom: blocks repeated to depth {depths[1]}, a probe) on "
                 f"{sequences} generated sequences of {tokens} tokens,\nbeside random blocks and Figure 2's random "
                 "attention-only layers on the same X(0); median and 10-90% band")
    fig.tight_layout()
    save_figure(fig, args.out)
    write_text(args.out + ".txt", table(results, depths, sequences, tokens) + "\n## checks"
               + (" (engine perturbed: " + ", ".join(f"{k}={v}" for k, v in perturb.items()) + ")" if perturb else "")
               + "\n" + checks.text())
    print("wrote " + args.out + ".txt")
    return checks.finish(args.out + ".txt")


if __name__ == "__main__":
    from rcsim import command
    sys.exit(command.run(main))
