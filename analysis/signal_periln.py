#!/usr/bin/env python3
"""Hidden-state variance against depth by normalisation placement (Kim et al. 2025, "Peri-LN: Revisiting
Layer Normalization in the Transformer Architecture"; docs/science/gradients.md, "Reproductions").
At initialisation, the Gram statistic q = (1/N) sum_i <x_i, x_i> / d (`gram_q`, the hidden-state variance
of the residual stream for centred tokens) against the layer, for norm.position = pre (X + F(LN(X))),
post (LN(X + F(X))) and peri (X + LN(F(LN(X)))), each block an attention and an MLP sub-block. The paper
studies trained models; this is the initialisation only. Setting (the paper's models are not reproduced):
layernorm (gain 1, bias 0), residual.alpha = 1, one softmax head, gelu MLP of width 4d, Gaussian weights with
std 1/sqrt(fan-in) times a branch gain s (`weights.branch_gain`, multiplying W_V and the MLP's W_in, W_out;
s stands in for the weight growth of training), X(0) i.i.d. N(0, 1), complete mask.

Claims checked, each printed with its measured value (exit status 1 naming the one that fails): (1) post-LN's
variance stays bounded (q <= 2 at every layer, every s); (2) pre-LN's grows with depth (q(L) > 10 q(0) at s = 1)
and (3) with the branch scale (q(L) at the largest s over q(L) at s = 1 above s_max^2 / 2); (4) peri-LN's does
not depend on the branch scale (that ratio within [0.5, 2]): its output normalisation sets each branch's
contribution, so (5) it grows linearly, one unit of variance per sub-block ((q(L) - q(0)) / 2L within
[0.75, 1.25] at every s), as the paper argues. (The paper's pre-LN growth, exponential, is in training; here,
at initialisation, pre-LN's growth is linear too, its slope set by the weights' scale.)

usage: signal_periln.py [--tiny] [--rcsim PATH] --data DIR --out PREFIX [--seed S] [--perturb KEY=VALUE ...]

Writes PREFIX.png, PREFIX.pdf and PREFIX.txt (q at every layer, mean over trials, per placement and s).
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

PLACEMENTS = ("pre", "post", "peri")
GAINS = (1.0, 2.0, 4.0)


def settings(tiny):
    """(N, d, L, trials): tiny is for CI (seconds), the full run is the figure."""
    return (16, 16, 16, 2) if tiny else (64, 64, 128, 8)


def main():
    a = script_args(__doc__, seed=1)
    n, d, L, trials = settings(a.tiny)
    os.makedirs(a.data, exist_ok=True)
    q, cos, secs = {}, {}, {}
    for pos in PLACEMENTS:
        for s in GAINS:
            path = os.path.join(a.data, f"signal_periln_{pos}_s{s:g}.h5")
            secs[(pos, s)] = run_rcsim(a.rcsim, path,
                                       [f"--model.tokens={n}", f"--model.dim={d}", f"--model.layers={L}",
                                        "--norm.type=layernorm", f"--norm.position={pos}", "--residual.alpha=1",
                                        f"--mlp.width={4 * d}", "--mlp.activation=gelu", f"--weights.branch_gain={s!r}",
                                        "--init.type=gaussian", f"--run.trials={trials}", f"--run.seed={a.seed}",
                                        "--output.measures=gram_q,cos_mean"])
            with h5py.File(path, "r") as f:
                q[(pos, s)] = f["metrics/gram_q"][()]
                cos[(pos, s)] = f["metrics/cos_mean"][()]
    lay = np.arange(L + 1)
    col = {"pre": "C3", "post": "C2", "peri": "C0"}
    ls = {1.0: "-", 2.0: "--", 4.0: ":"}
    fig, ax = plt.subplots(1, 3, figsize=(15, 4.4))
    for pos in PLACEMENTS:
        for s in GAINS:
            ax[0].semilogy(lay, q[(pos, s)].mean(0), color=col[pos], ls=ls[s], label=f"{pos}, s = {s:g}")
            ax[1].plot(lay, q[(pos, s)].mean(0) / np.maximum(lay, 1), color=col[pos], ls=ls[s])
            ax[2].plot(lay, cos[(pos, s)].mean(0), color=col[pos], ls=ls[s])
    ax[0].set_xlabel("layer t")
    ax[0].set_ylabel("q = mean diag of X X^T / d")
    ax[0].set_title("hidden-state variance (mean over trials)")
    ax[0].legend(fontsize=7, ncol=3)
    ax[1].set_xlabel("layer t")
    ax[1].set_ylabel("q / t")
    ax[1].set_yscale("log")
    ax[1].set_title("growth per block (linear growth: flat)")
    ax[2].set_xlabel("layer t")
    ax[2].set_ylabel("signed mean cosine")
    ax[2].set_title("token alignment")
    fig.suptitle(f"Peri-LN comparison at initialisation: layernorm, alpha = 1, N = {n}, d = {d}, gelu MLP {4 * d}, "
                 f"branch gain s, {trials} trials" + (" (tiny)" if a.tiny else ""))
    fig.tight_layout()
    save_figure(fig, a.out, dpi=110)

    smax = GAINS[-1]
    qL = {k: float(v[:, -1].mean()) for k, v in q.items()}
    post_max = max(float(q[("post", s)].max()) for s in GAINS)
    pre_growth = qL[("pre", 1.0)] / float(q[("pre", 1.0)][:, 0].mean())
    pre_scale = qL[("pre", smax)] / qL[("pre", 1.0)]
    peri_scale = qL[("peri", smax)] / qL[("peri", 1.0)]
    peri_rate = [(qL[("peri", s)] - float(q[("peri", s)][:, 0].mean())) / (2 * L) for s in GAINS]
    checks = Checks()
    checks.add("post-LN variance bounded", f"max q {post_max:.4g}", "<= 2 at every layer and s", post_max <= 2.0)
    checks.add("pre-LN variance grows with depth", f"q(L)/q(0) = {pre_growth:.4g} at s = 1", "> 10", pre_growth > 10)
    checks.add("pre-LN variance grows with the branch scale", f"q(L) ratio s = {smax:g} : 1 = {pre_scale:.4g}",
               f"> s^2/2 = {smax ** 2 / 2:g}", pre_scale > smax ** 2 / 2)
    checks.add("peri-LN variance independent of the branch scale", f"q(L) ratio s = {smax:g} : 1 = {peri_scale:.4g}",
               "in [0.5, 2]", 0.5 <= peri_scale <= 2)
    checks.add("peri-LN variance grows linearly, one unit per sub-block",
               "(q(L) - q(0)) / 2L = " + ", ".join(f"{g:.4g}" for g in peri_rate) + f" at s = {GAINS}",
               "in [0.75, 1.25] at every s", all(0.75 <= g <= 1.25 for g in peri_rate))
    with atomic_writer(a.out + ".txt") as f:
        f.write(f"# Peri-LN comparison at initialisation: layernorm, residual.alpha = 1, N = {n}, d = {d}, L = {L}, "
                f"one softmax head, gelu MLP width {4 * d}, weights std 1/sqrt(fan-in) x branch gain s on W_V, W_in, "
                f"W_out, X(0) N(0,1), {trials} trials, seed {a.seed}{' (tiny)' if a.tiny else ''}\n")
        f.write("placement s q(0) q(L/4) q(L/2) q(L) q(L)/L cos(L) rcsim_seconds\n")
        for pos in PLACEMENTS:
            for s in GAINS:
                m = q[(pos, s)].mean(0)
                f.write(f"{pos} {s:g} {m[0]:.4g} {m[L // 4]:.4g} {m[L // 2]:.4g} {m[L]:.4g} {m[L] / L:.4g} "
                        f"{cos[(pos, s)][:, -1].mean():.4g} {secs[(pos, s)]:.2f}\n")
        f.write(f"post_max_q {post_max:.6g}\npre_growth_q(L)/q(0)_s1 {pre_growth:.4g}\n"
                f"pre_q(L)_ratio_s{smax:g}_to_s1 {pre_scale:.4g}\nperi_q(L)_ratio_s{smax:g}_to_s1 {peri_scale:.4g}\n")
        f.write("# q(t), mean over trials, columns " + " ".join(f"{p}_s{s:g}" for p in PLACEMENTS for s in GAINS) + "\n")
        for t in range(0, L + 1, max(1, L // 32)):
            f.write(f"{t} " + " ".join(f"{q[(p, s)][:, t].mean():.5g}" for p in PLACEMENTS for s in GAINS) + "\n")
        f.write(checks.text())
    return checks.finish(a.out + ".txt")


if __name__ == "__main__":
    from particles_common import command
    sys.exit(command.run(main))
