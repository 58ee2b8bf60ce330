#!/usr/bin/env python3
"""Rank collapse in width and spectral-gap removal ("Mind the Gap: a spectral analysis of rank collapse and
signal propagation in attention layers", 2025; docs/science/gradients.md, "Reproductions"). The stable rank
||X||_F^2 / sigma_max(X)^2 (`stable_rank`; equal to tr(X X^T) / ||X X^T||_2, the stable rank of X X^T in the
trace form) after L = 10 pure attention layers X <- A X W_V (no residual, W_V Gaussian with std 1/sqrt(d),
fresh per layer, X(0) i.i.d. N(0, 1)), against the token count T = gamma d, for attention A:
  random-Markov A = softmax(G), G i.i.d. N(0, 1) (the paper's model; attention.kind = random_markov), and
  softmax attention (Gaussian W_Q, W_K with std 1/sqrt(d), beta = 1/sqrt(d); layernorm after each layer,
  post, which keeps the scale without changing the question),
each as it is and with the spectral gap removed, A - 1 1^T / T (attention.shape_a = 1, shape_b = 0,
shape_c = 1). The paper's exact widths, value weights and depth profile are not reproduced; gamma = 1 and 4.

Claims checked for the random-Markov model, each printed with its measured value (exit status 1 naming the one
that fails): (1) with the gap the stable rank at layer 10 is within 1% of 1 at every T (bounded, while the
input's grows like T); (2) removing the gap keeps it higher: at layer 10 the gap-removed stable rank exceeds 1.1
at the largest T and grows from the smallest T to the largest. The softmax rows are reported, not checked (see
the docs: removal does not rescue them here).

usage: signal_gap.py [--tiny] [--rcsim PATH] --data DIR --out PREFIX [--seed S] [--perturb KEY=VALUE ...]

Writes PREFIX.png, PREFIX.pdf and PREFIX.txt (mean stable rank over trials at layers 0, 1, 2, 10 per T, gamma,
attention, gap).
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

L = 10
GAMMAS = (1, 4)
KINDS = ("random_markov", "softmax")


def settings(tiny):
    """(token counts T, trials): tiny is for CI (seconds), the full run is the figure."""
    return ((16, 64), 2) if tiny else ((16, 32, 64, 128, 256, 512), 4)


def main():
    a = script_args(__doc__, seed=1)
    Ts, trials = settings(a.tiny)
    os.makedirs(a.data, exist_ok=True)
    sr, secs = {}, {}
    for kind in KINDS:
        for g in GAMMAS:
            for T in Ts:
                d = max(1, T // g)
                for c in (0, 1):
                    path = os.path.join(a.data, f"signal_gap_{kind}_g{g}_T{T}_c{c}.h5")
                    extra = ["--norm.type=layernorm", "--norm.position=post"] if kind == "softmax" else []
                    secs[(kind, g, T, c)] = run_rcsim(a.rcsim, path,
                                                      [f"--model.tokens={T}", f"--model.dim={d}", f"--model.layers={L}",
                                                       f"--attention.kind={kind}", "--attention.shape_a=1",
                                                       "--attention.shape_b=0", f"--attention.shape_c={c}",
                                                       "--residual.alpha=0", "--init.type=gaussian",
                                                       f"--run.trials={trials}", f"--run.seed={a.seed}", *extra])
                    with h5py.File(path, "r") as f:
                        sr[(kind, g, T, c)] = f["metrics/stable_rank"][()]  # [trial, layer 0..L]
    mean = {k: v.mean(0) for k, v in sr.items()}

    fig, ax = plt.subplots(1, 3, figsize=(16, 4.6))
    mk = {1: "o", 4: "s"}
    for i, kind in enumerate(KINDS):
        for g in GAMMAS:
            for c, col in ((0, "C3"), (1, "C0")):
                lab = f"{'gap removed' if c else 'softmax(.) as is' if kind == 'softmax' else 'A as is'}, gamma = {g}"
                ax[i].loglog(Ts, [mean[(kind, g, T, c)][L] for T in Ts], marker=mk[g], color=col,
                             ls="-" if g == 1 else "--", label=lab)
        ax[i].loglog(Ts, [mean[(kind, 1, T, 0)][0] for T in Ts], "k:", label="layer 0, gamma = 1")
        ax[i].axhline(1, color="0.6", lw=0.7)
        ax[i].set_xlabel("tokens T = gamma d")
        ax[i].set_ylabel(f"stable rank at layer {L}")
        ax[i].set_title("random-Markov A = softmax(G)" if kind == "random_markov"
                        else "softmax attention, post-layernorm")
        ax[i].legend(fontsize=7)
    Tm = Ts[-1]
    for c, col in ((0, "C3"), (1, "C0")):
        ax[2].semilogy(np.arange(L + 1), mean[("random_markov", 1, Tm, c)], color=col, marker=".",
                       label=f"random-Markov, {'gap removed' if c else 'as is'}")
        ax[2].semilogy(np.arange(L + 1), mean[("softmax", 1, Tm, c)], color=col, ls="--",
                       label=f"softmax + LN, {'gap removed' if c else 'as is'}")
    ax[2].set_xlabel("layer")
    ax[2].set_ylabel("stable rank")
    ax[2].set_title(f"against depth, T = d = {Tm}")
    ax[2].legend(fontsize=7)
    fig.suptitle(f"Mind the Gap setting: X <- A X W_V, L = {L}, {trials} trials" + (" (tiny)" if a.tiny else ""))
    fig.tight_layout()
    save_figure(fig, a.out, dpi=110)

    rm = {k[1:]: v for k, v in mean.items() if k[0] == "random_markov"}
    T0 = Ts[0]
    checks = Checks()
    for g in GAMMAS:
        worst = max(abs(rm[(g, T, 0)][L] - 1) for T in Ts)
        checks.add(f"random-Markov stable rank at layer {L} is 1 at every T (gamma {g})",
                   f"largest |sr - 1| {worst:.3g}", "< 0.01", worst < 0.01)
        s_gap0, s_gap = rm[(g, T0, 1)][L], rm[(g, Tm, 1)][L]
        checks.add(f"gap removal keeps the stable rank at layer {L} above 1 and growing with T (gamma {g})",
                   f"{s_gap0:.4g} at T {T0}, {s_gap:.4g} at T {Tm}", f"> 1.1 at T {Tm} and > the value at T {T0}",
                   s_gap > 1.1 and s_gap > s_gap0)
    with atomic_writer(a.out + ".txt") as f:
        f.write(f"# Mind the Gap setting: X <- A X W_V, no residual, W_V N(0, 1/d) fresh per layer, X(0) N(0,1), "
                f"L = {L}, {trials} trials, seed {a.seed}; softmax: W_Q, W_K N(0, 1/d), beta = 1/sqrt(d), post "
                f"layernorm{' (tiny)' if a.tiny else ''}\n")
        f.write("# stable rank ||X||_F^2 / sigma_max^2, mean over trials; gap = 1: A - 1 1^T / T\n")
        f.write("attention gamma T d gap sr0 sr1 sr2 sr10 rcsim_seconds\n")
        for kind in KINDS:
            for g in GAMMAS:
                for T in Ts:
                    for c in (0, 1):
                        m = mean[(kind, g, T, c)]
                        f.write(f"{kind} {g} {T} {max(1, T // g)} {c} {m[0]:.4g} {m[1]:.4g} {m[2]:.4g} {m[L]:.6g} "
                                f"{secs[(kind, g, T, c)]:.2f}\n")
        f.write(checks.text())
    return checks.finish(a.out + ".txt")


if __name__ == "__main__":
    from particles_common import command
    sys.exit(command.run(main))
