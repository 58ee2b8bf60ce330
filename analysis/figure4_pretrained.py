#!/usr/bin/env python3
"""Wu et al.'s Figure 4 measures on a pretrained transformer: the share of sequences whose token
matrix X(t) has full rank, sigma at the largest allowed rank (sigma_min) and the mean |cosine|
between tokens, with mu_rel (Figure 2's token similarity, relative) against depth, for the
pretrained stories260K model (configs/models/stories260K) on sequences it generated itself
(sampled from BOS at temperature 1), against the same architecture with random blocks (the same
X(0)) and with every RMSNorm removed. Top row: the trained model (5 blocks); bottom row: a probe,
the blocks applied cyclically to depth 100 (not the paper's setting). Median and 10-90% band over
sequences. Numbers in OUT.txt.

Checks (docs/science/pretrained.md; the script exits 1 when one fails): Wu et al.'s Figure 4 claims
on the pretrained stack, each beside the random-block control that says whether it could hold
trivially, and what the data show where the model does not show the paper's effect. A wrong engine
(--perturb llama.weights=random, --perturb llama.norm=false: analysis/pretrained_checks.py) must
fail them (tests/CMakeLists.txt runs both).

usage: /usr/bin/python3 analysis/figure4_pretrained.py [--tiny] [--out figures/figure4_pretrained]
                                                       [--perturb KEY=VALUE ...]
"""
import os
import sys
import warnings

os.environ.setdefault("MPLBACKEND", "Agg")
import h5py  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

import script_setup  # noqa: E402,F401  (the package rcsim of this checkout: analysis/script_setup.py)
from rcsim.figures import draw_curve, figure_arguments, log_panel, rcsim, save_figure, write_text  # noqa: E402
import pretrained_checks as pc  # noqa: E402  (analysis/pretrained_checks.py: the wrong engines, the bands)

MODEL = os.path.join("configs", "models", "stories260K", "stories260K.bin")
VARIANTS = [("pretrained", "pretrained", "true", "C0", "-"),
            ("pretrained, no RMSNorm", "pretrained", "false", "C0", "--"),
            ("random blocks", "random", "true", "C3", "-"),
            ("random blocks, no RMSNorm", "random", "false", "C3", "--")]
MEASURES = ["full_rank", "sigma_rel", "cos_abs_mean", "mu_rel"]
TITLES = ["% of sequences at full rank (of those still finite)", "sigma_min / sigma_max (scale-free)",
          "mean |cosine| between tokens", "mu_rel = mu(X) / ||X||_F"]


def runs(args, data, sequences, tokens, depth, perturb):
    ids = os.path.join(data, "ids.txt")
    rcsim(args, args.rcsim, "generate", MODEL, f"--steps={tokens - 1}", f"--sequences={sequences}",
          "--temperature=1", "--seed=1", f"--ids-out={ids}", "--quiet")
    out = {}
    for name, weights, norm, _, _ in VARIANTS:
        path = os.path.join(data, name.replace(", ", "_").replace(" ", "_") + ".h5")
        weights, norm = pc.llama_setting(perturb, weights, norm == "true")
        rcsim(args, args.rcsim, "generate", MODEL, f"--ids-file={ids}", f"--measure={path}", f"--weights={weights}",
              f"--norm={'true' if norm else 'false'}", f"--depth={depth}", "--seed=1", "--quiet")
        with h5py.File(path, "r") as f:
            m = {k: f["metrics"][k][()] for k in ("rank", "sigma_at_max_rank", "sigma_max", "cos_abs_mean", "mu_rel",
                                                  "mu")}
            m["full_rank_fraction"] = f["summary/full_rank_fraction"][()]
            m["nonfinite_layer"] = f["diagnostics/nonfinite_layer"][()]
            m["max_rank"] = int(f.attrs["max_rank"])
        m["full_rank"] = np.where(np.isnan(m["rank"]), np.nan, 100.0 * (m["rank"] == m["max_rank"]))
        m["sigma_rel"] = m["sigma_at_max_rank"] / m["sigma_max"]
        out[name] = m
    return out


TRAINED, DIM = 5, 64  # the checkpoint's blocks and width (configs/models/stories260K/README.md)


def share(m, t):
    """% of the sequences still finite at layer t whose X(t) has full rank (NaN when none is finite)."""
    v = m["full_rank"][:, t]
    return float(np.mean(v[np.isfinite(v)])) if np.isfinite(v).any() else float("nan")


def first_rank_loss(m):
    """Per sequence: the first layer t >= 1 whose finite X(t) is below full rank (-1: none)."""
    return np.array([next((t for t in range(1, row.size) if row[t] == 0.0), -1) for row in m["full_rank"]])


def span(v):
    return f"{int(np.min(v))}..{int(np.max(v))}"


def full_rank_checks(c, r, depth):
    """Figure 4's full rank on the pretrained stack, the random-block control, the probe and RMSNorm's part."""
    low = {n: min(share(r[n], t) for t in range(1, TRAINED + 1)) for n in ("pretrained", "random blocks")}
    c.add("Wu Fig. 4, full rank: the pretrained token matrices are full rank at every trained layer",
          f"{low['pretrained']:.0f}% of sequences at the lowest of layers 1..{TRAINED}", "100%",
          low["pretrained"] == 100.0)
    c.add("control: random blocks are full rank at every trained layer too (full rank alone does not tell "
          "trained from random weights here)", f"{low['random blocks']:.0f}%", "100%", low["random blocks"] == 100.0)
    probe = {n: (min(share(r[n], t) for t in range(1, depth + 1)), int(np.sum(r[n]["nonfinite_layer"] >= 0)))
             for n in ("pretrained", "random blocks")}
    c.add(f"probe: with RMSNorm every sequence stays finite and full rank to depth {depth}",
          "; ".join(f"{n}: lowest share {v[0]:.0f}%, {v[1]} non-finite" for n, v in probe.items()),
          "100% and 0 non-finite in both", all(v == (100.0, 0) for v in probe.values()))
    nopre, norand = r["pretrained, no RMSNorm"], r["random blocks, no RMSNorm"]
    lost, over, over_r = first_rank_loss(nopre), nopre["nonfinite_layer"], norand["nonfinite_layer"]
    c.add(f"without RMSNorm the pretrained stack loses numerical full rank before it overflows, and both stacks "
          f"overflow, within depth {depth}",
          f"pretrained: full rank lost at layers {span(lost)}, non-finite at {span(over)}; random blocks: "
          f"non-finite at {span(over_r)}",
          f"every sequence: 1 <= rank lost < non-finite <= {depth}; random blocks non-finite <= {depth}",
          bool(np.all((lost >= 1) & (lost < over)) and np.all(over >= 0) and np.all(over_r >= 0)))


def geometry_checks(c, r):
    """Figure 4's anisotropy and sigma_min, Figure 2's mu_rel: pretrained against the random-block control."""
    L = TRAINED
    with warnings.catch_warnings():  # layers past an overflow are NaN in every sequence: their median is NaN
        warnings.simplefilter("ignore", RuntimeWarning)
        med = {n: {k: np.nanmedian(r[n][k], axis=0) for k in ("cos_abs_mean", "sigma_rel", "mu_rel")} for n in r}
    pre = med["pretrained"]
    iso = pc.isotropic_abs_cos(DIM)
    c.add("Wu Fig. 4, anisotropic (weakly): the pretrained mean |cos| at the trained depth is above that of "
          "isotropic vectors", f"{pre['cos_abs_mean'][L]:.3f} (isotropic {iso:.3f})", f"> {iso:.3f}",
          pre["cos_abs_mean"][L] > iso)
    rise = {n: med[n]["cos_abs_mean"][L] - med[n]["cos_abs_mean"][0] for n in ("pretrained", "random blocks")}
    c.add(f"Wu Fig. 4's rise of mean |cos| with depth is not seen: from X(0) to layer {L} the pretrained median "
          "moves by less than 0.05, while random blocks raise it by more than 0.2",
          f"pretrained {rise['pretrained']:+.3f}, random blocks {rise['random blocks']:+.3f}",
          "|pretrained| < 0.05, random blocks > 0.2", abs(rise["pretrained"]) < 0.05 and rise["random blocks"] > 0.2)
    apart = [t for t in range(1, L + 1)
             if not pc.below(r["pretrained"]["cos_abs_mean"][:, t], r["random blocks"]["cos_abs_mean"][:, t])]
    c.add(f"the trained blocks keep the tokens more spread than random blocks: the pretrained mean |cos| band "
          f"(10-90%) lies below the random blocks' at every layer 1..{L}",
          f"bands overlap at layers {apart}" if apart else "apart at every layer", "apart at every layer", not apart)
    grow = {n: med[n]["sigma_rel"][L] / med[n]["sigma_rel"][1] for n in ("pretrained", "random blocks")}
    c.add(f"Wu Fig. 4's fall of sigma_min with depth is not seen over the trained depth: the pretrained median "
          f"sigma_min / sigma_max at layer {L} is at least that at layer 1 (random blocks beside it)",
          f"pretrained x{grow['pretrained']:.2f}, random blocks x{grow['random blocks']:.2f}",
          "pretrained >= x1", grow["pretrained"] >= 1.0)
    drop = {n: med[n]["mu_rel"][0] - med[n]["mu_rel"][L] for n in med}
    c.add("Wu Fig. 2, 'LayerNorm helps prevent the issue together with other components': over the trained depth "
          f"the trained weights, not RMSNorm, keep mu_rel: from X(0) to layer {L} it falls by less than 0.1 in the "
          "pretrained stack with and without RMSNorm, by more than 0.15 with random blocks with and without",
          ", ".join(f"{n} {-v:+.3f}" for n, v in drop.items()), "pretrained ones < 0.1, random ones > 0.15",
          all(drop[n] < 0.1 for n in ("pretrained", "pretrained, no RMSNorm"))
          and all(drop[n] > 0.15 for n in ("random blocks", "random blocks, no RMSNorm")))


def quantiles(v, t):
    col = v[:, t]
    col = col[np.isfinite(col)]
    if col.size == 0:
        return "stopped (non-finite)"
    q = np.quantile(col, [0.5, 0.1, 0.9])
    return f"{q[0]:.3g} [{q[1]:.3g}, {q[2]:.3g}]"


def table(results, layers, sequences, tokens):
    lines = [f"# Wu et al. Figure 4 measures on stories260K: {sequences} sequences of N = {tokens} tokens (BOS + "
             "sampled at temperature 1, seed 1), d = 64; median [10%, 90%] over sequences; blocks beyond 5 repeat "
             "cyclically (a probe)"]
    for name, *_ in VARIANTS:
        m = results[name]
        stopped = int(np.sum(m["nonfinite_layer"] >= 0))
        lines.append(f"\n## {name}" + (f" ({stopped} sequences became non-finite, first at layer "
                                        f"{int(m['nonfinite_layer'][m['nonfinite_layer'] >= 0].min())})" if stopped else ""))
        lines.append("layer  full_rank_% (finite ones)  sigma_at_max_rank  sigma_min/sigma_max  cos_abs_mean  mu_rel  mu")
        for t in layers:
            if t >= m["rank"].shape[1]:
                continue
            share = m["full_rank"][:, t]
            share = f"{np.mean(share[np.isfinite(share)]):5.1f}" if np.isfinite(share).any() else "  -  "
            lines.append(f"{t:5d}  {share}  {quantiles(m['sigma_at_max_rank'], t)}  {quantiles(m['sigma_rel'], t)}  "
                         f"{quantiles(m['cos_abs_mean'], t)}  {quantiles(m['mu_rel'], t)}  {quantiles(m['mu'], t)}")
    return "\n".join(lines) + "\n"


def panel_row(axes, results, last):
    for name, _, _, colour, ls in VARIANTS:
        m = results[name]
        x = np.arange(last + 1)
        for col, key in enumerate(MEASURES):
            if key == "sigma_rel":
                continue
            values = m[key][:, :last + 1]
            if key == "full_rank":
                with np.errstate(invalid="ignore"):
                    share = np.array([np.nanmean(v) if np.isfinite(v).any() else np.nan for v in values.T])
                axes[col].plot(x, share, color=colour, ls=ls, label=name)
            else:
                draw_curve(axes[col], x, values, colour, name, ls=ls)
    log_panel(axes[1], [{"x": np.arange(last + 1), "values": results[n]["sigma_rel"][:, :last + 1],
                         "colour": c, "label": n, "ls": ls} for n, _, _, c, ls in VARIANTS])
    for ax, title in zip(axes, TITLES):
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("layer t (X(0) = embeddings)")
        ax.grid(True, alpha=0.3)


def main(argv=None):
    parser = figure_arguments(__doc__, "figure4_pretrained")
    parser.add_argument("--perturb", type=pc.perturbation, action="append", default=[], metavar="KEY=VALUE",
                        help="a deliberately wrong engine (llama.weights=random, llama.norm=false; "
                             "analysis/pretrained_checks.py): the checks must fail")
    args = parser.parse_args(argv)
    perturb = pc.perturbations(args.perturb, parser)
    os.chdir(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    # tiny: the probe reaches depth 24, past the layers (14-19) where the stacks without RMSNorm overflow
    sequences, tokens, depth = (6, 16, 24) if args.tiny else (64, 64, 100)
    data = args.data or os.path.join("data", "figure4_pretrained" + ("-tiny" if args.tiny else ""))
    out = args.out or (os.path.join(data, "figure4_pretrained") if args.tiny else "figures/figure4_pretrained")
    os.makedirs(data, exist_ok=True)
    results = runs(args, data, sequences, tokens, depth, perturb)
    checks = pc.Checks()
    full_rank_checks(checks, results, depth)
    geometry_checks(checks, results)
    fig, axes = plt.subplots(2, 4, figsize=(20, 9))
    panel_row(axes[0], results, 5)
    panel_row(axes[1], results, depth)
    axes[0, 0].legend(fontsize=8)
    fig.suptitle(f"stories260K (pretrained, 5 blocks; bottom: blocks repeated to depth {depth}, a probe) on "
                 f"{sequences} generated sequences of {tokens} tokens\n(X(0) repeats the rows of repeated ids: not full "
                 "rank); median and 10-90% band; without RMSNorm the stream overflows (curves end)")
    fig.tight_layout()
    save_figure(fig, out)
    write_text(out + ".txt", table(results, [0, 1, 2, 3, 4, 5, 10, 15, 16, 20, 24, 50, 100], sequences, tokens)
               + "\n## checks" + (" (engine perturbed: " + ", ".join(f"{k}={v}" for k, v in perturb.items()) + ")"
                                   if perturb else "") + "\n" + checks.text())
    print("wrote " + out + ".txt")
    return checks.finish(out + ".txt")


if __name__ == "__main__":
    from rcsim import command
    sys.exit(command.run(main))
