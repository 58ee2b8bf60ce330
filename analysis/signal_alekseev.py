#!/usr/bin/env python3
"""Gradient amplification against depth without normalisation: pre-LN against DyT and Derf (Alekseev 2026,
"Normalization-free transformers are subcritical", blog post; docs/science/gradients.md, "Reproductions").
The width-normalised partial Jacobian norm (APJN) J(L, t) = ||dX(L)/dX(t)||_F^2 / (N d), from
`jacobian_log_fro2_full` (exact: N d reverse passes), its logarithm averaged over trials, against the layer t, for a pre-norm
block X + A(N(X)) followed by X + MLP(N(X)) with N = layernorm (pre-LN), dyt (g tanh(a y) + b) or derf
(g erf(a y) + b), a = norm.alpha. The post's claim (its mean-field argument, section 2.1; its ViT figure 3):
pre-LN is critical, J(L, t) grows as a power law from the last block to the first, J ~ ((L + c)/(t + c))^zeta;
the tanh-like maps are subcritical, J grows stretched-exponentially, log J ~ sqrt(L) - sqrt(t), faster.

Setting (rcsim's; the post's ViT, 128 blocks of width 1024 on CIFAR-100 patches, is not reproduced): one softmax
head, residual.alpha = 1, gelu MLP of width 4d, Gaussian weights with std 1/sqrt(fan-in) times a branch gain
s = 2 (`weights.branch_gain`, on W_V, W_in and W_out; the post's sigma_w), X(0) i.i.d. N(0, 1), complete mask,
gain 1 and bias 0, norm.alpha = 1 (the post compares alpha from 0.1 to 1.9 and argues for alpha near 1, where
DyT's residual updates match pre-LN's).

Claims checked, each printed with its measured value (exit status 1 naming the one that fails): for each map,
log J(L, t) is fitted on t = 1..L-1 by a line in log(t + 1) (power law) and by a line in sqrt(t) (stretched
exponential); (1) pre-LN: the power law fits better (RMS residual ratio stretched / power > 1.2); (2) DyT and
(3) Derf: the stretched exponential fits better (ratio power / stretched > 1.2); (4) DyT and (5) Derf amplify
more than pre-LN (log J(L, 0) larger).

usage: signal_alekseev.py [--tiny] [--rcsim PATH] --data DIR --out PREFIX [--seed S] [--perturb KEY=VALUE ...]

Writes PREFIX.png, PREFIX.pdf and PREFIX.txt (log J(L, t) at every layer, the fits, the checks).
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

MAPS = ("layernorm", "dyt", "derf")
LABEL = {"layernorm": "pre-LN", "dyt": "DyT", "derf": "Derf"}
ALPHA = 1.0  # norm.alpha of dyt and derf
GAIN = 2.0  # weights.branch_gain
RATIO = 1.2  # the better fit's RMS residual must be this much smaller


def settings(tiny):
    """(N, d, L, trials): tiny is for CI (seconds), the full run is the figure."""
    return (4, 32, 32, 2) if tiny else (8, 32, 64, 4)


def fit_rms(x, y):
    """RMS residual of the least-squares line y = a + b x, and its slope b."""
    A = np.stack([np.ones_like(x), x], axis=1)
    coef, *_ = np.linalg.lstsq(A, y, rcond=None)
    return float(np.sqrt(np.mean((A @ coef - y) ** 2))), float(coef[1])


def ratio(a, b):
    """a / b, NaN when both are 0 (a flat curve: neither fit is better)."""
    return float(np.float64(a) / np.float64(b)) if b != 0 or a != 0 else float("nan")


def log_apjn(path, n, d):
    """The trial mean of log(||dX(L)/dX(t)||_F^2 / (N d)), at every layer t (the mean of the logarithm, not the
    logarithm of the mean: with a few trials one trial's large value would dominate the other)."""
    with h5py.File(path, "r") as f:
        lj = f["metrics/jacobian_log_fro2_full"][()]
    return lj.mean(axis=0) - np.log(n * d)


def main():
    a = script_args(__doc__, seed=1)
    n, d, L, trials = settings(a.tiny)
    os.makedirs(a.data, exist_ok=True)
    y, secs = {}, {}
    for norm in MAPS:
        path = os.path.join(a.data, f"signal_alekseev_{norm}.h5")
        secs[norm] = run_rcsim(a.rcsim, path,
                               [f"--model.tokens={n}", f"--model.dim={d}", f"--model.layers={L}",
                                f"--norm.type={norm}", "--norm.position=pre", f"--norm.alpha={ALPHA!r}",
                                "--norm.eps=0", "--residual.alpha=1", f"--mlp.width={4 * d}", "--mlp.activation=gelu",
                                f"--weights.branch_gain={GAIN!r}", "--init.type=gaussian", f"--run.trials={trials}",
                                f"--run.seed={a.seed}", "--output.measures=jacobian_log_fro2_full"])
        y[norm] = log_apjn(path, n, d)
    t = np.arange(L + 1, dtype=float)
    inner = slice(1, L)
    fits = {}
    for norm in MAPS:
        rp, zeta = fit_rms(np.log(t[inner] + 1.0), y[norm][inner])
        rs, b = fit_rms(np.sqrt(t[inner]), y[norm][inner])
        fits[norm] = (rp, -zeta, rs, -b)

    fig, ax = plt.subplots(1, 3, figsize=(15, 4.4))
    col = {"layernorm": "k", "dyt": "C3", "derf": "C0"}
    for norm in MAPS:
        ax[0].plot(t, y[norm], color=col[norm], label=LABEL[norm])
        ax[1].plot(np.log(t + 1.0), y[norm], color=col[norm])
        ax[2].plot(np.sqrt(t), y[norm], color=col[norm])
    ax[0].set_xlabel("layer t")
    ax[0].set_ylabel("log J(L, t), J = |dX(L)/dX(t)|_F^2 / (N d)")
    ax[0].legend()
    ax[1].set_xlabel("log(t + 1)  (power law: straight)")
    ax[2].set_xlabel("sqrt(t)  (stretched exponential: straight)")
    fig.suptitle(f"APJN at initialisation, pre-norm blocks: N = {n}, d = {d}, L = {L}, gelu MLP {4 * d}, branch gain "
                 f"{GAIN:g}, alpha = {ALPHA:g}, {trials} trials" + (" (tiny)" if a.tiny else ""))
    fig.tight_layout()
    save_figure(fig, a.out, dpi=110)

    checks = Checks()
    rp, _, rs, _ = fits["layernorm"]
    checks.add("pre-LN: power law", f"RMS residual stretched / power = {ratio(rs, rp):.4g}", f"> {RATIO:g}",
               rs > RATIO * rp)
    for norm in ("dyt", "derf"):
        rp, _, rs, _ = fits[norm]
        checks.add(f"{LABEL[norm]}: stretched exponential", f"RMS residual power / stretched = {ratio(rp, rs):.4g}",
                   f"> {RATIO:g}", rp > RATIO * rs)
    for norm in ("dyt", "derf"):
        checks.add(f"{LABEL[norm]} amplifies more than pre-LN",
                   f"log J(L, 0) = {y[norm][0]:.4g} against {y['layernorm'][0]:.4g}", "larger",
                   y[norm][0] > y["layernorm"][0])
    with atomic_writer(a.out + ".txt") as f:
        f.write(f"# APJN J(L, t) = |dX(L)/dX(t)|_F^2 / (N d) (jacobian_log_fro2_full, exact), pre-norm blocks, "
                f"N = {n}, d = {d}, L = {L}, one softmax head, residual.alpha = 1, gelu MLP width {4 * d}, weights "
                f"std 1/sqrt(fan-in) x branch gain {GAIN:g}, norm.alpha = {ALPHA:g}, norm.eps = 0, X(0) N(0,1), "
                f"{trials} trials, seed {a.seed}{' (tiny)' if a.tiny else ''}\n")
        f.write("map rms_power zeta rms_stretched b log_J(L,0) rcsim_seconds\n")
        for norm in MAPS:
            rp, zeta, rs, b = fits[norm]
            f.write(f"{norm} {rp:.4g} {zeta:.4g} {rs:.4g} {b:.4g} {y[norm][0]:.4g} {secs[norm]:.2f}\n")
        f.write("# log J(L, t), columns t " + " ".join(MAPS) + "\n")
        for k in range(0, L + 1, max(1, L // 32)):
            f.write(f"{k} " + " ".join(f"{y[m][k]:.5g}" for m in MAPS) + "\n")
        f.write(checks.text())
    return checks.finish(a.out + ".txt")


if __name__ == "__main__":
    from particles_common import command
    sys.exit(command.run(main))
