#!/usr/bin/env python3
"""Rank collapse and vanishing query/key gradients (Noci, Anagnostidis, Biggio, Orvieto, Singh, Lucchi,
"Signal propagation in transformers: theoretical perspectives and the role of rank collapse", NeurIPS 2022;
docs/science/gradients.md, "Reproductions"). At initialisation, the signed mean token cosine (`cos_mean`) and
the gradient norms of every block's W_Q, W_K, W_V (`grad_wq_norm`, `grad_wk_norm`, `grad_wv_norm`, rcsim's
reverse pass for the loss 1^T X(L) R with a Gaussian readout R) against depth, for residual branch weights
residual.alpha = 1 and 1/sqrt(L). Settings: the paper's figure's placement, post-LN (X <- LN(X + alpha F(X)) for
the attention and the MLP sub-blocks; the default), or with --pre-ln rcsim's first setting, pre-LN
(X <- X + alpha F(LN(X))); layernorm with gain 1, bias 0. rcsim's own choices (the paper's exact widths and token
count are not reproduced): one softmax head, Gaussian W_Q, W_K, W_V with std 1/sqrt(d), relu MLP of width 4d,
X(0) i.i.d. N(0, 1), complete mask, fresh weights per layer.

Claims checked, each printed with its measured value (exit status 1 naming the one that fails): (1) with
alpha = 1 the tokens align (mean cosine at layer L above 0.5); (2) with alpha = 1/sqrt(L) they do not (at least
0.3 lower); (3) with alpha = 1 the query/key gradients vanish relative to the value gradient in the deep blocks:
the median over trials and the last quarter of blocks of (|dW_Q| + |dW_K|) / (2 |dW_V|) is below half of its
alpha = 1/sqrt(L) value.

usage: signal_noci.py [--tiny] [--pre-ln] [--rcsim PATH] --data DIR --out PREFIX [--seed S]
                      [--perturb KEY=VALUE ...]
(--perturb: a deliberately wrong engine setting in every rcsim run, particles_common.)

Writes PREFIX.png, PREFIX.pdf and PREFIX.txt (per depth L and alpha: the mean cosine at layer L, the
first and deep blocks' gradient ratios; the per-layer profiles of the deepest run).
"""
import os
import sys

os.environ.setdefault("MPLBACKEND", "Agg")
import h5py  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

import script_setup  # noqa: E402,F401  (the package rcsim of this checkout: analysis/script_setup.py)
from particles_common import Checks, run_rcsim, script_args  # noqa: E402
from rcsim.figures import atomic_writer, save_figure  # noqa: E402

MEASURES = "cos_mean,grad_wq_norm,grad_wk_norm,grad_wv_norm"


def settings(tiny):
    """(N, d, depths, trials): tiny is for CI (seconds), the full run is the figure."""
    return (16, 16, (4, 16), 2) if tiny else (64, 64, (4, 8, 16, 32, 64), 8)


def run(a, n, d, L, alpha, trials, tag):
    path = os.path.join(a.data, f"signal_noci_{a.placement}_{tag}_L{L}.h5")
    secs = run_rcsim(a.rcsim, path,
                     [f"--model.tokens={n}", f"--model.dim={d}", f"--model.layers={L}",
                      "--norm.type=layernorm", f"--norm.position={a.placement}", f"--residual.alpha={alpha!r}",
                      f"--mlp.width={4 * d}", "--mlp.activation=relu", "--init.type=gaussian",
                      f"--run.trials={trials}", f"--run.seed={a.seed}", f"--output.measures={MEASURES}"])
    with h5py.File(path, "r") as f:
        m = {k: f["metrics/" + k][()] for k in MEASURES.split(",")}
    m["ratio"] = (m["grad_wq_norm"] + m["grad_wk_norm"]) / (2 * m["grad_wv_norm"])  # [trial, block]
    m["seconds"] = secs
    return m


def deep(ratio):
    """Median over trials and the last quarter of blocks."""
    L = ratio.shape[1]
    return float(np.median(ratio[:, L - max(1, L // 4):]))


def main():
    a = script_args(__doc__, seed=1, extra=("--pre-ln",))
    a.placement = "pre" if a.pre_ln else "post"
    n, d, depths, trials = settings(a.tiny)
    os.makedirs(a.data, exist_ok=True)
    res = {}
    for L in depths:
        res[(L, "1")] = run(a, n, d, L, 1.0, trials, "alpha1")
        res[(L, "s")] = run(a, n, d, L, 1.0 / np.sqrt(L), trials, "sqrtL")
    Lmax = depths[-1]
    lab = {"1": "alpha = 1", "s": "alpha = 1/sqrt(L)"}
    col = {"1": "C3", "s": "C0"}

    fig, ax = plt.subplots(1, 4, figsize=(18, 4.2))
    for k in ("1", "s"):
        m = res[(Lmax, k)]
        lay = np.arange(m["cos_mean"].shape[1])
        ax[0].plot(lay, m["cos_mean"].T, color=col[k], lw=0.5, alpha=0.4)
        ax[0].plot(lay, m["cos_mean"].mean(0), color=col[k], lw=2, label=lab[k])
        blk = np.arange(m["ratio"].shape[1])
        ax[1].semilogy(blk, np.median(m["grad_wq_norm"], 0), color=col[k], ls="-", label=f"|dW_Q|, {lab[k]}")
        ax[1].semilogy(blk, np.median(m["grad_wk_norm"], 0), color=col[k], ls=":", label=f"|dW_K|, {lab[k]}")
        ax[1].semilogy(blk, np.median(m["grad_wv_norm"], 0), color=col[k], ls="--", label=f"|dW_V|, {lab[k]}")
        ax[2].semilogy(blk, np.median(m["ratio"], 0), color=col[k], lw=2, label=lab[k])
        ax[2].semilogy(blk, m["ratio"].T, color=col[k], lw=0.4, alpha=0.4)
        ax[3].plot(depths, [res[(L, k)]["cos_mean"][:, -1].mean() for L in depths], "o-", color=col[k],
                   label=f"mean cosine at layer L, {lab[k]}")
        ax[3].plot(depths, [deep(res[(L, k)]["ratio"]) for L in depths], "s--", color=col[k],
                   label=f"deep-block Q/K : V gradient ratio, {lab[k]}")
    ax[0].set_xlabel("layer t")
    ax[0].set_ylabel("signed mean cosine")
    ax[0].set_title(f"token alignment, L = {Lmax} (thin: trials)")
    ax[0].legend(fontsize=8)
    ax[1].set_xlabel("block t")
    ax[1].set_ylabel("gradient norm (median over trials)")
    ax[1].set_title(f"weight gradients, L = {Lmax}")
    ax[1].legend(fontsize=6)
    ax[2].set_xlabel("block t")
    ax[2].set_ylabel("(|dW_Q| + |dW_K|) / (2 |dW_V|)")
    ax[2].set_title(f"query/key vs value gradients, L = {Lmax}")
    ax[2].legend(fontsize=8)
    ax[3].set_xscale("log", base=2)
    ax[3].set_xlabel("depth L")
    ax[3].set_title("against depth")
    ax[3].legend(fontsize=7)
    fig.suptitle(f"Noci et al. 2022 setting: {a.placement}-LN, N = {n}, d = {d}, relu MLP width {4 * d}, "
                 f"{trials} trials"
                 + (" (tiny)" if a.tiny else ""))
    fig.tight_layout()
    save_figure(fig, a.out, dpi=110)

    c1 = res[(Lmax, "1")]["cos_mean"][:, -1].mean()
    cs = res[(Lmax, "s")]["cos_mean"][:, -1].mean()
    r1, rs = deep(res[(Lmax, "1")]["ratio"]), deep(res[(Lmax, "s")]["ratio"])
    checks = Checks()
    checks.add("tokens align with alpha = 1", f"mean cosine at layer L = {Lmax}: {c1:.4g}", "> 0.5", c1 > 0.5)
    checks.add("alpha = 1/sqrt(L) prevents the alignment", f"mean cosine {cs:.4g} against {c1:.4g} with alpha = 1",
               "at least 0.3 lower", c1 > cs + 0.3)
    checks.add("Q/K gradients vanish relative to V's with alpha = 1", f"deep-block ratio {r1:.4g} against "
               f"{rs:.4g} with 1/sqrt(L)", "below half of 1/sqrt(L)'s", r1 < 0.5 * rs)
    with atomic_writer(a.out + ".txt") as f:
        f.write(f"# Noci et al. 2022 setting: {a.placement}-LN (layernorm), N = {n}, d = {d}, one softmax head, "
                f"relu MLP width {4 * d}, W std 1/sqrt(d), X(0) N(0,1), {trials} trials, seed {a.seed}"
                f"{' (tiny)' if a.tiny else ''}\n")
        f.write("# ratio = (|dW_Q| + |dW_K|) / (2 |dW_V|), median over trials; first = block 0, deep = last quarter "
                "of blocks; cos_L = mean over trials of cos_mean at layer L\n")
        f.write("L alpha cos_L cos_L_sd ratio_first ratio_deep rcsim_seconds\n")
        for L in depths:
            for k in ("1", "s"):
                m = res[(L, k)]
                f.write(f"{L} {1.0 if k == '1' else 1 / np.sqrt(L):.6g} {m['cos_mean'][:, -1].mean():.4g} "
                        f"{m['cos_mean'][:, -1].std():.3g} {np.median(m['ratio'][:, 0]):.4g} {deep(m['ratio']):.4g} "
                        f"{m['seconds']:.2f}\n")
        f.write(f"# per-layer profile at L = {Lmax}: layer cos(alpha=1) cos(1/sqrt(L)) ratio(alpha=1) ratio(1/sqrt(L)) "
                f"|dW_Q| |dW_V| (alpha=1) |dW_Q| |dW_V| (1/sqrt(L)), medians over trials\n")
        m1, ms = res[(Lmax, "1")], res[(Lmax, "s")]
        for t in range(Lmax + 1):
            row = f"{t} {m1['cos_mean'][:, t].mean():.4g} {ms['cos_mean'][:, t].mean():.4g}"
            if t < Lmax:
                row += (f" {np.median(m1['ratio'][:, t]):.4g} {np.median(ms['ratio'][:, t]):.4g}"
                        f" {np.median(m1['grad_wq_norm'][:, t]):.4g} {np.median(m1['grad_wv_norm'][:, t]):.4g}"
                        f" {np.median(ms['grad_wq_norm'][:, t]):.4g} {np.median(ms['grad_wv_norm'][:, t]):.4g}")
            f.write(row + "\n")
        f.write(checks.text())
    return checks.finish(a.out + ".txt")


if __name__ == "__main__":
    from particles_common import command
    sys.exit(command.run(main))
