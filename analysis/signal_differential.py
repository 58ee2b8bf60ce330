#!/usr/bin/env python3
"""Rank collapse at initialisation with differential attention (Ye et al. 2024, "Differential Transformer",
arXiv 2410.05258; docs/science/gradients.md, "Differential attention at initialisation"). Each head's queries
and keys are split in halves, A = softmax(Q1 K1^T / sqrt(d_k/2)) - lambda softmax(Q2 K2^T / sqrt(d_k/2))
(`attention.differential`; rows sum to 1 - lambda, weights may be negative). The paper trains; it does not
study rank collapse, and no paper we know of does: the claims below are rcsim's own, established here.

Setting (rcsim's): pure attention layers X <- A X W_V (no residual, no MLP; Dong et al.'s rank-collapse
setting), one head, N = 32 tokens, d = d_k = 32, Gaussian W_Q, W_K, W_V with std 1/sqrt(d) fresh per layer,
X(0) i.i.d. N(0, 1), complete mask, L = 16 layers, 32 trials; without normalisation and with post-LN
(layernorm after each layer, gain 1, bias 0). Arms: ordinary softmax attention (the same d_k), and differential
attention with lambda = lambda_init(l) = 0.8 - 0.6 exp(-0.3 (l - 1)) (the paper's value at initialisation, whose
learned part has mean 0 there), 0.5 and 0.8 (fixed over depth). Measures: mu_rel = ||X - 1 xbar^T||_F / ||X||_F
(the relative distance from rank one about the mean token) and the stable rank, per layer.

The mechanism (derived in the docs): near uniform attention A1 = U + E1, A2 = U + E2 with rows of E summing to 0
and E1, E2 independent (disjoint halves of W_Q, W_K); the mean token is carried by (1 - lambda) U, the deviations
by E1 - lambda E2, of size sqrt(1 + lambda^2) |E|: the differential layer shrinks mu_rel by a factor about
g(lambda) = sqrt(1 + lambda^2) / (1 - lambda) less than an ordinary layer (1.27 at lambda = 0.2, 2.24 at 0.5,
6.40 at 0.8).

Claims checked (rcsim's own; each printed with its measured value, exit status 1 naming the one that fails). The
arms share X(0) and the weights (the same draws, split or not), so each trial is a paired comparison. Per trial,
"depth-mean" is the mean over t = 1..L of log10 mu_rel(t) clipped to [-12, 0] (the rounding floor is 1e-16).
(1) Ordinary softmax attention collapses: mean log10 mu_rel(L) < -6 (both settings). (2) Differential attention
collapses more slowly: its depth-mean exceeds the softmax arm's by more than 4 standard errors of the paired
difference for lambda = 0.5 and 0.8 (both settings) and by more than 3 for lambda_init(l) with post-LN (without
normalisation that arm's small excess is reported, not checked). (3) Slower at lambda = 0.8 than at 0.5 (both).
(4) Without normalisation the tokens shrink: ||X(3)||_F (geometric mean over trials) at lambda = 0.5 and 0.8 is
less than half the softmax arm's (the common mode is carried by (1 - lambda) U, and the logits, quadratic in X,
shrink with it, which brings the attention back to uniform and cancels most of the gain). (5) In the first layer
(where the attention is not yet near uniform) the ratio mu_rel(1) (differential) / mu_rel(1) (softmax) lies
between 1 and g(lambda), for lambda = 0.5 and 0.8.

usage: signal_differential.py [--tiny] [--rcsim PATH] --data DIR --out PREFIX [--seed S] [--perturb KEY=VALUE ...]

Also run and reported, not checked: differential attention with the paper's head norm (1 - lambda_init(l)) RMSNorm(A X W_V)
(`attention.diff_head_norm`) and no other normalisation.

Writes PREFIX.png, PREFIX.pdf and PREFIX.txt (per arm: log10 mu_rel at layers 1 and L, the depth-mean, the collapse
depth, the stable rank at layer 4; ||X||_F without normalisation; mean log10 mu_rel per layer; the checks).
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

ARMS = ("softmax", "auto", "0.5", "0.8")  # ordinary attention; differential with lambda_init(l), 0.5, 0.8
LABEL = {"softmax": "softmax", "auto": "diff, lambda_init(l)", "0.5": "diff, lambda 0.5", "0.8": "diff, lambda 0.8"}
NORMS = ("none", "layernorm")
COLLAPSED = -6.0  # log10 mu_rel(L) of the softmax arm below this: collapse
SIGMAS = 4.0  # the differential arm's excess must be this many standard errors (lambda 0.5, 0.8)
SIGMAS_AUTO = 3.0  # the same for lambda_init(l), with layernorm
FLOOR = -12.0  # log10 mu_rel clipped here (below it the tokens are equal to rounding)
FRO_AT = 3  # the layer whose ||X||_F is compared (no normalisation)
COLLAPSE_AT = -6.0  # collapse depth: the first layer with log10 mu_rel below this


def settings(tiny):
    """(N, d, L, trials): tiny is for CI (seconds), the full run is the figure."""
    return (16, 16, 10, 48) if tiny else (32, 32, 16, 128)


def g(lam):
    """The predicted factor sqrt(1 + lambda^2) / (1 - lambda) of slower collapse per layer (near uniform)."""
    return float(np.sqrt(1.0 + lam * lam) / (1.0 - lam))


def arm_args(arm):
    """rcsim's keys of an arm: softmax, a lambda (auto or a number), or hn_LAMBDA (with the head norm)."""
    if arm == "softmax":
        return ["--attention.differential=false"]
    lam = arm.removeprefix("hn_")
    return ["--attention.differential=true", f"--attention.diff_lambda={lam}",
            f"--attention.diff_head_norm={'true' if arm.startswith('hn_') else 'false'}"]


def main():
    a = script_args(__doc__, seed=1)
    n, d, L, trials = settings(a.tiny)
    os.makedirs(a.data, exist_ok=True)
    lmu, sr, fro, secs = {}, {}, {}, {}
    runs = [(nm, arm) for nm in NORMS for arm in ARMS] + [("none", "hn_" + arm) for arm in ARMS[1:]]
    for norm, arm in runs:
        path = os.path.join(a.data, f"signal_differential_{norm}_{arm}.h5")
        secs[(norm, arm)] = run_rcsim(a.rcsim, path,
                                      [f"--model.tokens={n}", f"--model.dim={d}", f"--model.layers={L}",
                                       f"--norm.type={norm}", "--norm.position=post", "--residual.alpha=0",
                                       "--init.type=gaussian", f"--run.trials={trials}", f"--run.seed={a.seed}",
                                       *arm_args(arm)])
        with h5py.File(path, "r") as f:
            mu = f["metrics/mu_rel"][()]  # [trial, layer 0..L]
            lmu[(norm, arm)] = np.log10(np.maximum(mu, 1e-300))
            sr[(norm, arm)] = f["metrics/stable_rank"][()]
            fro[(norm, arm)] = np.exp(np.log(f["metrics/fro_norm"][()]).mean(0))  # geometric mean over trials
    mean = {k: v.mean(0) for k, v in lmu.items()}
    sem = {k: v.std(0, ddof=1) / np.sqrt(v.shape[0]) for k, v in lmu.items()}

    fig, ax = plt.subplots(1, 3, figsize=(15, 4.4))
    t = np.arange(L + 1)
    col = {"softmax": "k", "auto": "C2", "0.5": "C0", "0.8": "C3"}
    for i, norm in enumerate(NORMS):
        for arm in ARMS:
            ax[i].errorbar(t, mean[(norm, arm)], yerr=sem[(norm, arm)], color=col[arm], label=LABEL[arm], capsize=2)
        ax[i].set_xlabel("layer t")
        ax[i].set_ylabel("log10 mu_rel(X(t))")
        ax[i].set_title("no normalisation" if norm == "none" else "post-LN (layernorm)")
        ax[i].legend(fontsize=7)
    for arm in ARMS:
        ax[2].semilogy(t, sr[("layernorm", arm)].mean(0), color=col[arm], label=LABEL[arm])
    ax[2].set_xlabel("layer t")
    ax[2].set_ylabel("stable rank (post-LN)")
    fig.suptitle(f"Differential vs softmax attention at initialisation: X <- A X W_V, N = {n}, d = d_k = {d}, "
                 f"L = {L}, {trials} trials" + (" (tiny)" if a.tiny else ""))
    fig.tight_layout()
    save_figure(fig, a.out, dpi=110)

    # Per trial (the arms share X(0) and the weights: the same draws, split or not): the depth-mean of
    # log10 mu_rel clipped to [FLOOR, 0] (the rounding floor is 1e-16 with layernorm, exact 0 without), and the
    # first layer with mu_rel below 10^COLLAPSE_AT (L + 1 if none).
    area = {k: np.clip(v[:, 1:], FLOOR, 0.0).mean(axis=1) for k, v in lmu.items()}
    depth = {k: np.where((v < COLLAPSE_AT).any(axis=1), (v < COLLAPSE_AT).argmax(axis=1), L + 1)
             for k, v in lmu.items()}
    checks = Checks()
    reported = []
    for norm in NORMS:
        soft = lmu[(norm, "softmax")][:, L]
        checks.add(f"softmax attention collapses ({norm})", f"mean log10 mu_rel(L) = {soft.mean():.4g}",
                   f"< {COLLAPSED:g}", soft.mean() < COLLAPSED)
        for arm in ARMS[1:]:
            diff = area[(norm, arm)] - area[(norm, "softmax")]  # paired by trial
            se = diff.std(ddof=1) / np.sqrt(diff.size)
            z = diff.mean() / se if se > 0 else float("nan")
            measured = (f"depth-mean clipped log10 mu_rel {area[(norm, arm)].mean():.4g} against "
                        f"{area[(norm, 'softmax')].mean():.4g}, paired difference {z:.3g} standard errors")
            if arm == "auto" and norm == "none":  # reported, not checked (a small effect without normalisation)
                reported.append(f"differential ({LABEL[arm]}) against softmax ({norm}): {measured}")
                continue
            need = SIGMAS if arm != "auto" else SIGMAS_AUTO
            checks.add(f"differential ({LABEL[arm]}) collapses more slowly ({norm})", measured,
                       f"> {need:g} standard errors above", z > need)
        hi, lo = area[(norm, "0.8")].mean(), area[(norm, "0.5")].mean()
        checks.add(f"slower with larger lambda ({norm})", f"depth-mean clipped log10 mu_rel {lo:.4g} at lambda 0.5, "
                   f"{hi:.4g} at 0.8", "larger at 0.8", hi > lo)
        if norm == "none":  # the mechanism: the common mode shrinks by (1 - lambda), the logits with it
            for arm in ("0.5", "0.8"):
                f3, s3 = fro[(norm, arm)][FRO_AT], fro[(norm, "softmax")][FRO_AT]
                checks.add(f"without normalisation the tokens shrink (lambda {arm})",
                           f"||X({FRO_AT})||_F {f3:.4g} against {s3:.4g} (softmax)", "less than half", f3 < 0.5 * s3)
        for arm in ("0.5", "0.8"):
            r = 10.0 ** (mean[(norm, arm)][1] - mean[(norm, "softmax")][1])
            checks.add(f"first-layer factor within (1, g(lambda)) (lambda {arm}, {norm})",
                       f"mu_rel(1) ratio {r:.4g}, g = {g(float(arm)):.4g}", "between 1 and g",
                       1.0 < r < g(float(arm)))
    with atomic_writer(a.out + ".txt") as f:
        f.write(f"# Differential vs softmax attention at initialisation: X <- A X W_V, no residual, one head, N = {n}, "
                f"d = d_k = {d}, L = {L}, W_Q, W_K, W_V N(0, 1/d) fresh per layer, X(0) N(0,1), complete mask, post, "
                f"{trials} trials, seed {a.seed}{' (tiny)' if a.tiny else ''}\n")
        f.write("norm arm log10_mu_rel(1) log10_mu_rel(L) depth_mean_clipped collapse_depth stable_rank(4) "
                "rcsim_seconds\n")
        for norm in NORMS:
            for arm in ARMS:
                k = (norm, arm)
                f.write(f"{norm} {arm} {mean[k][1]:.4g} {mean[k][L]:.4g} {area[k].mean():.4g} {depth[k].mean():.3g} "
                        f"{sr[k].mean(0)[min(4, L)]:.4g} {secs[k]:.2f}\n")
        f.write("# reported, not checked: the head norm (1 - lambda_init(l)) RMSNorm(A X W_V) without other normalisation\n")
        for arm in ARMS[1:]:
            k = ("none", "hn_" + arm)
            f.write(f"none hn_{arm} {mean[k][1]:.4g} {mean[k][L]:.4g} {area[k].mean():.4g} {depth[k].mean():.3g} "
                    f"{sr[k].mean(0)[min(4, L)]:.4g} {secs[k]:.2f}\n")
        f.write("# geometric mean ||X(t)||_F, t = 0..4, no normalisation\n")
        for arm in ARMS:
            f.write(f"none {arm} " + " ".join(f"{v:.4g}" for v in fro[("none", arm)][:5]) + "\n")
        f.write("# mean log10 mu_rel(t), columns t " + " ".join(f"{nm}/{arm}" for nm in NORMS for arm in ARMS) + "\n")
        for k in range(L + 1):
            f.write(f"{k} " + " ".join(f"{mean[(nm, arm)][k]:.4g}" for nm in NORMS for arm in ARMS) + "\n")
        f.write("".join(f"reported {r}\n" for r in reported))
        f.write(checks.text())
    return checks.finish(a.out + ".txt")


if __name__ == "__main__":
    from particles_common import command
    sys.exit(command.run(main))
