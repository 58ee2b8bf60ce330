#!/usr/bin/env python3
"""Wu et al.'s Figure 4 measures on a pretrained transformer: the share of sequences whose token
matrix X(t) has full rank, sigma at the largest allowed rank (sigma_min) and the mean |cosine|
between tokens, with mu_rel (Figure 2's token similarity, relative) against depth, for the
pretrained stories260K model (configs/models/stories260K) on sequences it generated itself
(sampled from BOS at temperature 1), against the same architecture with random blocks (the same
X(0)) and with every RMSNorm removed. Top row: the trained model (5 blocks); bottom row: a probe,
the blocks applied cyclically to depth 100 (not the paper's setting). Median and 10-90% band over
sequences. Numbers in OUT.txt.

usage: /usr/bin/python3 analysis/figure4_pretrained.py [--tiny] [--out figures/figure4_pretrained]
"""
import os
import sys

os.environ.setdefault("MPLBACKEND", "Agg")
import h5py  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

import script_setup  # noqa: E402,F401  (the package rcsim of this checkout: analysis/script_setup.py)
from rcsim.figures import draw_curve, figure_arguments, log_panel, rcsim, save_figure, write_text  # noqa: E402

MODEL = os.path.join("configs", "models", "stories260K", "stories260K.bin")
VARIANTS = [("pretrained", "pretrained", "true", "C0", "-"),
            ("pretrained, no RMSNorm", "pretrained", "false", "C0", "--"),
            ("random blocks", "random", "true", "C3", "-"),
            ("random blocks, no RMSNorm", "random", "false", "C3", "--")]
MEASURES = ["full_rank", "sigma_rel", "cos_abs_mean", "mu_rel"]
TITLES = ["% of sequences at full rank (of those still finite)", "sigma_min / sigma_max (scale-free)",
          "mean |cosine| between tokens", "mu_rel = mu(X) / ||X||_F"]


def runs(args, data, sequences, tokens, depth):
    ids = os.path.join(data, "ids.txt")
    rcsim(args, args.rcsim, "generate", MODEL, f"--steps={tokens - 1}", f"--sequences={sequences}",
          "--temperature=1", "--seed=1", f"--ids-out={ids}", "--quiet")
    out = {}
    for name, weights, norm, _, _ in VARIANTS:
        path = os.path.join(data, name.replace(", ", "_").replace(" ", "_") + ".h5")
        rcsim(args, args.rcsim, "generate", MODEL, f"--ids-file={ids}", f"--measure={path}", f"--weights={weights}",
              f"--norm={norm}", f"--depth={depth}", "--seed=1", "--quiet")
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
    args = figure_arguments(__doc__, "figure4_pretrained").parse_args(argv)
    os.chdir(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    sequences, tokens, depth = (6, 16, 12) if args.tiny else (64, 64, 100)
    data = args.data or os.path.join("data", "figure4_pretrained" + ("-tiny" if args.tiny else ""))
    out = args.out or (os.path.join(data, "figure4_pretrained") if args.tiny else "figures/figure4_pretrained")
    os.makedirs(data, exist_ok=True)
    results = runs(args, data, sequences, tokens, depth)
    fig, axes = plt.subplots(2, 4, figsize=(20, 9))
    panel_row(axes[0], results, 5)
    panel_row(axes[1], results, depth)
    axes[0, 0].legend(fontsize=8)
    fig.suptitle(f"stories260K (pretrained, 5 blocks; bottom: blocks repeated to depth {depth}, a probe) on "
                 f"{sequences} generated sequences of {tokens} tokens\n(X(0) repeats the rows of repeated ids: not full "
                 "rank); median and 10-90% band; without RMSNorm the stream overflows (curves end)")
    fig.tight_layout()
    save_figure(fig, out)
    write_text(out + ".txt", table(results, [0, 1, 2, 3, 4, 5, 10, 20, 50, 100], sequences, tokens))
    print("wrote " + out + ".txt")


if __name__ == "__main__":
    from rcsim import command
    sys.exit(command.run(main))
