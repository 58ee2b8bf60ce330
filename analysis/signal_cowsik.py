#!/usr/bin/env python3
"""Angle and gradient exponents over (alpha, sigma_w) (Cowsik, Nebabu, Qi, Ganguli 2024, "Geometric dynamics of
signal propagation predict trainability of transformers"; docs/science/gradients.md, "Reproductions").
lambda_a = log((1 - p'/q') / (1 - p/q)) from the Gram statistics `gram_p`, `gram_q` of consecutive layers
(docs/science/model-spec.md section 6, after an unofficial script), averaged over the L blocks and the trials; lambda_g =
`jacobian_log_fro2` at layer 0 divided by L, (1/L) log ||d(X(L) R)/dX(0)||_F^2 with R rcsim's Gaussian readout,
and lambda_g_rel, the same minus its value for the identity map, log(N ||R||^2) / L (`jacobian_log_fro2` at L).

Setting used (the paper's exact architecture is not reproduced; what rcsim offers): residual.mixing = cowsik,
X <- sqrt(1 - alpha_A^2) X + alpha_A A(LN(X)) for the attention sub-block and X <- sqrt(1 - alpha_M^2) X +
alpha_M M(LN(X)) for the MLP sub-block (pre-LN, layernorm with gain 1 and bias 0; alpha_A = residual.alpha = 0.1,
alpha_M = residual.mlp_alpha over the grid); one softmax head with W_Q, W_K entries N(0, sigma_A^2 / d),
sigma_A = 0.6 (weights.q_std = weights.k_std = 0.6 / sqrt(d)), beta = 1/sqrt(d); W_V entries N(0, sigma_w^2 / d),
the tanh MLP's W_in N(0, sigma_w^2 / d) and W_out N(0, sigma_w^2 / m), no biases; X(0) the permutation-symmetric
simplex of the paper's analysis: unit tokens with pairwise cosine 0.5 (init.type = equiangular, init.rho = 0.5,
which needs N <= d); complete mask; L = 8 blocks; N = 64 tokens, d = 64, m = 256, 5 seeds (trials). lambda_g costs
N reverse passes per trial, so it is measured with N = 32 tokens (same d, m, seeds).
Why this setting (docs/science/gradients.md, "Reproductions"): with one alpha for both sub-blocks, the near-uniform
attention at sigma_A = 0.6 averages the tokens and orders every cell; from i.i.d. Gaussian tokens (already nearly
orthogonal, 1 - p/q near 1) a chaotic phase cannot show as lambda_a > 0; relu and gelu MLPs contract correlations.

Checks, each printed with its measured value (exit status 1 naming the one that fails): (1) the ordered phase: lambda_a < 0 at the smallest alpha_M for
every sigma_w; (2) the chaotic phase: lambda_a > 0 at the largest alpha_M for every sigma_w >= 2 (the boundary lies
between); (3) lambda_a from rcsim's gram_p and gram_q equals lambda_a computed here from the stored tokens of one
grid point (relative 1e-9).

--authors: the setting of the authors' public script instead (the unofficial script of docs/science/model-spec.md section 6; in
the docs): X(0) Gaussian tokens with correlation rho = 0.99 (sqrt(rho) g + sqrt(1 - rho) z_i, through init.file),
alpha_A = alpha_M = alpha varied together with skip gains 1, the non-centred norm x sqrt(d)/|x| (rmsnorm, eps 0),
W_Q, W_K std 1/sqrt(d) (their sigma_A = 1), W_V 1/sqrt(d), tanh MLP of width d with W_in and W_out std
sigma_w/sqrt(d); N = 256, d = 64; lambda_a from the first block, lambda_g over 16 blocks from one Hutchinson probe
(jacobian_log_fro2_full, metrics.jacobian_probes = 1), as the script; sigma_w in 1..4. Its checks: ordered
(lambda_a < 0) at the smallest sigma_w and chaotic (> 0) at the largest, for every alpha, plus check (3).
rcsim's own in it: beta = 1/sqrt(d), the 5 x 4 grid, 5 seeds (the script: 50 x 50, one seed).

usage: signal_cowsik.py [--tiny] [--authors] [--rcsim PATH] --data DIR --out PREFIX [--seed S]
                        [--perturb KEY=VALUE ...]

Writes PREFIX.png, PREFIX.pdf and PREFIX.txt (lambda_a, its spread over seeds, lambda_g per grid point).
"""
import os
import sys

os.environ.setdefault("MPLBACKEND", "Agg")
import h5py  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

import script_setup  # noqa: E402,F401  (the package rcsim of this checkout: analysis/script_setup.py)
from particles_common import Checks, run_rcsim, script_args  # noqa: E402
from rcsim.figures import atomic_writer, save_figure, write_hdf5  # noqa: E402

SIGMA_A = 0.6
ALPHA_A = 0.1
RHO_AUTHORS = 0.99


def settings(tiny, authors):
    """(N, N for lambda_g, d, m, L, alphas, sigma_ws, seeds): tiny is for CI (seconds), the full run is the figure.
    authors: the public script's N = 256, d = m = 64, 16 blocks for lambda_g (lambda_a from the first block)."""
    alphas = (0.1, 0.5, 0.9) if tiny else (0.1, 0.3, 0.5, 0.7, 0.9)
    if authors:
        return (64, 64, 64, 64, 16, alphas, (1.0, 4.0), 3) if tiny else (256, 256, 64, 64, 16, alphas, (1, 2, 3, 4), 5)
    if tiny:
        return 16, 8, 16, 64, 8, alphas, (0.5, 2.0), 2
    return 64, 32, 64, 256, 8, alphas, (0.5, 1.0, 2.0, 4.0, 8.0), 5


def model_args(n, d, m, L, alpha, sw, trials, seed, x0=None):
    """rcsim's setting (x0 None: alpha_A = ALPHA_A, alpha_M = alpha, cowsik mixing, layernorm, sigma_A = SIGMA_A,
    W_V std sigma_w/sqrt(d), W_out sigma_w/sqrt(m), X(0) equiangular with cosine 0.5) or the authors' public
    script's (x0 the file of its X(0): alpha_A = alpha_M = alpha, skip gains 1, the non-centred rmsnorm with eps 0,
    W_Q, W_K std sqrt(sigma_A/d) with its sigma_A = 1, W_V std 1/sqrt(d), W_in and W_out std sigma_w/sqrt(d))."""
    common = [f"--model.tokens={n}", f"--model.dim={d}", f"--model.layers={L}", "--norm.position=pre",
              f"--mlp.width={m}", "--mlp.activation=tanh", f"--weights.mlp_in_std={sw / np.sqrt(d)!r}",
              f"--run.trials={trials}", f"--run.seed={seed}"]
    if x0 is not None:
        return common + ["--norm.type=rmsnorm", "--norm.eps=0", f"--residual.alpha={alpha!r}",
                         f"--weights.q_std={1 / np.sqrt(d)!r}", f"--weights.k_std={1 / np.sqrt(d)!r}",
                         f"--weights.v_std={1 / np.sqrt(d)!r}", f"--weights.mlp_out_std={sw / np.sqrt(d)!r}",
                         "--init.type=file", f"--init.file={x0}"]
    return common + ["--norm.type=layernorm", f"--residual.alpha={ALPHA_A!r}", f"--residual.mlp_alpha={alpha!r}",
                     "--residual.mixing=cowsik", f"--weights.q_std={SIGMA_A / np.sqrt(d)!r}",
                     f"--weights.k_std={SIGMA_A / np.sqrt(d)!r}", f"--weights.v_std={sw / np.sqrt(d)!r}",
                     f"--weights.mlp_out_std={sw / np.sqrt(m)!r}", "--init.type=equiangular", "--init.rho=0.5"]


def authors_x0(path, trials, n, d, seed):
    """The authors' X(0) per trial: sqrt(rho) g 1^T + sqrt(1 - rho) Z (g ~ N(0, I_d) shared by the tokens, Z i.i.d.
    N(0, 1); E[p/q] = rho = 0.99), written to `path` (/X0 [trials, N, d]) through a temporary and a rename."""
    rng = np.random.default_rng(seed)
    g = rng.standard_normal((trials, 1, d))
    X = np.sqrt(RHO_AUTHORS) * g + np.sqrt(1 - RHO_AUTHORS) * rng.standard_normal((trials, n, d))
    write_hdf5(path, {"X0": X})
    return path


def angle_exponents(p, q):
    """lambda_a per (trial, block) from p, q over (trial, layer)."""
    r = 1 - p / q
    return np.log(r[:, 1:] / r[:, :-1])


def gram_pq(X):
    """p, q of one token matrix (docs/science/model-spec.md section 6), independent of rcsim's measures."""
    n, d = X.shape
    G = X @ X.T / d
    q = np.trace(G) / n
    return (G.sum() - np.trace(G)) / (n * (n - 1)), q


def main():
    a = script_args(__doc__, seed=1, extra=("--authors",))
    n, ng, d, m, L, alphas, sws, seeds = settings(a.tiny, a.authors)
    os.makedirs(a.data, exist_ok=True)
    tag = "authors_" if a.authors else ""
    x0 = authors_x0(os.path.join(a.data, "signal_cowsik_authors_x0.h5"), seeds, n, d, a.seed) if a.authors else None
    jac = "jacobian_log_fro2_full" if a.authors else "jacobian_log_fro2"
    la = np.zeros((len(sws), len(alphas), seeds))
    lg = np.zeros((len(sws), len(alphas), seeds))
    lgr = np.zeros((len(sws), len(alphas), seeds))
    secs = 0.0
    check_point = (len(sws) // 2, len(alphas) // 2)
    mismatch = None
    for i, sw in enumerate(sws):
        for j, al in enumerate(alphas):
            path = os.path.join(a.data, f"signal_cowsik_{tag}a{al:g}_s{sw:g}.h5")
            tok = ["--output.tokens=all"] if (i, j) == check_point else []
            secs += run_rcsim(a.rcsim, path, model_args(n, d, m, L, al, sw, seeds, a.seed, x0),
                              ["--output.measures=gram_p,gram_q", *tok])
            with h5py.File(path, "r") as f:
                p, q = f["metrics/gram_p"][()], f["metrics/gram_q"][()]
                lam = angle_exponents(p, q)
                la[i, j] = lam[:, 0] if a.authors else lam.mean(1)
                if tok:
                    X = f["tokens"][()]  # [trial, layer, N, d]
                    pq = np.array([[gram_pq(X[r, t]) for t in range(X.shape[1])] for r in range(X.shape[0])])
                    lam_py = angle_exponents(pq[..., 0], pq[..., 1])
                    mismatch = float(np.max(np.abs(lam_py - lam)) / max(1e-300, np.max(np.abs(lam_py))))
            path = os.path.join(a.data, f"signal_cowsik_{tag}grad_a{al:g}_s{sw:g}.h5")
            probes = ["--metrics.jacobian_probes=1"] if a.authors else []
            secs += run_rcsim(a.rcsim, path, model_args(ng, d, m, L, al, sw, seeds, a.seed, x0),
                              [f"--output.measures={jac}", "--output.schedule=list:0", *probes])
            with h5py.File(path, "r") as f:
                lay = list(f["layer"][()])
                jv = f["metrics/" + jac][()]
                lg[i, j] = jv[:, lay.index(0)] / L
                lgr[i, j] = (jv[:, lay.index(0)] - jv[:, lay.index(L)]) / L

    if a.authors:
        title = (f"Cowsik et al. 2024, the authors' public script's setting: pre-RMSNorm, skip 1, alpha_A = alpha_M, "
                 f"tanh MLP {m}, X(0) Gaussian with rho {RHO_AUTHORS}, d = {d}")
        long_title = (title + ", W_Q, W_K std 1/sqrt(d), W_V 1/sqrt(d), W_in and W_out sigma_w/sqrt(d); "
                      f"rcsim's: beta = 1/sqrt(d), the grid, L = {L} for lambda_g")
    else:
        title = (f"Cowsik et al. 2024 in rcsim's setting: pre-LN, cowsik mixing, alpha_A = {ALPHA_A}, "
                 f"sigma_A = {SIGMA_A}, d = {d}, tanh MLP {m}, X(0) simplex cos 0.5, L = {L}")
        long_title = (title + ", W_Q, W_K std sigma_A/sqrt(d), W_V and W_in std sigma_w/sqrt(d), W_out "
                      "sigma_w/sqrt(m), alpha_M = residual.mlp_alpha, skip sqrt(1 - alpha^2) per sub-block")
    xlab = "alpha = alpha_A = alpha_M" if a.authors else "alpha_M"
    fig, ax = plt.subplots(1, 3, figsize=(16, 4.4))
    lam_mean = np.nanmean(la, 2)
    vmax = np.nanmax(np.abs(lam_mean))
    im = ax[0].imshow(lam_mean, origin="lower", cmap="RdBu_r", vmin=-vmax, vmax=vmax, aspect="auto")
    ax[0].set_xticks(range(len(alphas)), [f"{x:g}" for x in alphas])
    ax[0].set_yticks(range(len(sws)), [f"{x:g}" for x in sws])
    ax[0].set_xlabel(xlab if a.authors else "alpha_M (MLP branch weight; skip sqrt(1 - alpha_M^2))")
    ax[0].set_ylabel("sigma_w")
    blocks = "block 0" if a.authors else f"mean over {L} blocks"
    ax[0].set_title(f"lambda_a ({blocks}, {seeds} seeds), N = {n}\nred: chaotic (> 0), blue: ordered")
    for i in range(len(sws)):
        for j in range(len(alphas)):
            ax[0].text(j, i, f"{lam_mean[i, j]:.2f}", ha="center", va="center", fontsize=7)
    fig.colorbar(im, ax=ax[0])
    for i, sw in enumerate(sws):
        ax[1].errorbar(alphas, lam_mean[i], yerr=np.nanstd(la[i], 1), marker="o", capsize=2, label=f"sigma_w = {sw:g}")
        ax[2].errorbar(alphas, lg[i].mean(1), yerr=lg[i].std(1), marker="s", capsize=2, label=f"sigma_w = {sw:g}")
        ax[2].plot(alphas, lgr[i].mean(1), ls=":", marker="^", color=f"C{i}")
    ax[1].axhline(0, color="k", lw=0.6)
    ax[1].set_xlabel(xlab)
    ax[1].set_ylabel("lambda_a")
    ax[1].set_title("angle exponent (bars: std over seeds)")
    ax[1].legend(fontsize=8)
    ax[2].set_xlabel(xlab)
    ax[2].set_ylabel("gradient exponent")
    ax[2].axhline(0, color="k", lw=0.6)
    ax[2].set_title(f"lambda_g (squares), lambda_g_rel (dotted), N = {ng}")
    ax[2].legend(fontsize=8)
    fig.suptitle(title + (" (tiny)" if a.tiny else ""))
    fig.tight_layout()
    save_figure(fig, a.out, dpi=110)

    checks = Checks()
    if a.authors:  # the authors' phase diagram: the edge of chaos in sigma_w, between 2 and 3 for every alpha
        checks.add(f"ordered phase at sigma_w = {sws[0]:g} for every alpha",
                   "lambda_a " + ", ".join(f"{x:.3g}" for x in lam_mean[0]), "< 0", np.all(lam_mean[0] < 0))
        checks.add(f"chaotic phase at sigma_w = {sws[-1]:g} for every alpha",
                   "lambda_a " + ", ".join(f"{x:.3g}" for x in lam_mean[-1]), "> 0", np.all(lam_mean[-1] > 0))
    else:  # rcsim's setting: the edge in alpha_M
        chaotic = [i for i, sw in enumerate(sws) if sw >= 2]
        checks.add(f"ordered phase at alpha_M = {alphas[0]:g} for every sigma_w",
                   "lambda_a " + ", ".join(f"{x:.3g}" for x in lam_mean[:, 0]), "< 0", np.all(lam_mean[:, 0] < 0))
        checks.add(f"chaotic phase at alpha_M = {alphas[-1]:g} for every sigma_w >= 2",
                   "lambda_a " + ", ".join(f"{x:.3g}" for x in lam_mean[chaotic, -1]), "> 0",
                   np.all(lam_mean[chaotic, -1] > 0))
    checks.add("lambda_a from gram_p/gram_q equals lambda_a from the stored tokens", f"relative difference {mismatch}",
               "< 1e-9", mismatch is not None and mismatch < 1e-9, engine=True)
    with atomic_writer(a.out + ".txt") as f:
        f.write(f"# {long_title}, {seeds} seeds (trials, seed {a.seed}){' (tiny)' if a.tiny else ''}\n")
        f.write(f"# lambda_a: N = {n}, {blocks}, then mean over "
                f"seeds (sd over seeds); lambda_g: N = {ng}, {jac} at layer 0 / L"
                f"{' (one Hutchinson probe, as the authors)' if a.authors else ''}; "
                f"lambda_g_rel = ({jac} at 0 - at L) / L, "
                f"the identity map's value removed\n")
        f.write("sigma_w alpha_M lambda_a lambda_a_sd lambda_g lambda_g_sd lambda_g_rel lambda_g_rel_sd\n")
        for i, sw in enumerate(sws):
            for j, al in enumerate(alphas):
                f.write(f"{sw:g} {al:g} {lam_mean[i, j]:.5g} {np.nanstd(la[i, j]):.3g} {lg[i, j].mean():.5g} "
                        f"{lg[i, j].std():.3g} {lgr[i, j].mean():.5g} {lgr[i, j].std():.3g}\n")
        f.write(f"lambda_a_gram_vs_tokens_relative_difference {mismatch:.3g} (sigma_w = {sws[check_point[0]]:g}, "
                f"alpha_M = {alphas[check_point[1]]:g})\n")
        f.write(f"positive_lambda_a_cells {int(np.sum(lam_mean > 0))} of {lam_mean.size}\n")
        f.write(f"rcsim_seconds {secs:.2f}\n")
        f.write(checks.text())
    return checks.finish(a.out + ".txt")


if __name__ == "__main__":
    from particles_common import command
    sys.exit(command.run(main))
