#!/usr/bin/env python3
"""Critical attention scaling for long contexts (Chen, Lin, Polyanskiy, Rigollet, "Critical attention scaling in
long-context transformers", ICLR 2026, arXiv 2510.05554; Rigollet, "The mean-field dynamics of transformers",
2025; docs/science/particles.md section 16): one softmax attention layer, Q = K = V = I, on n unit tokens with
pairwise cosine rho (init.type = equiangular), at the inverse temperature beta_n = c (log n)^p (rcsim's key
model.beta_log_power = p with model.beta = c). The paper's claim: a phase transition at beta_n ~ log n, with
the critical constant gamma_c = 1/(1 - rho) for p = 1: below it the attention spreads over all tokens and the
output tokens collapse to one direction as n grows; above it the attention tends to the identity and the
output keeps the input's geometry.

On equiangular tokens everything is in closed form (derived here, not copied): every row has the self weight
a = 1 / (1 + (n - 1) e^(-beta (1 - rho))) and the others b = (1 - a)/(n - 1); the row entropy is
H = -a log a - (1 - a) log b; the output Y = A X has Gram matrix A G A with G = (1 - rho) I + rho 1 1^T, whose
off-diagonal over diagonal is the output cosine. At p = 1, beta = gamma log n: (n - 1) e^(-beta (1 - rho)) ~
n^(1 - gamma (1 - rho)), which goes to infinity (a -> 0, H/log n -> 1, cosine -> 1) for gamma < gamma_c and to
0 (a -> 1, H -> 0, cosine -> rho) for gamma > gamma_c; at gamma_c, a -> 1/2.

usage: particles_longcontext.py [--tiny] [--rcsim PATH] --data DIR --out PREFIX [--seed S] [--perturb KEY=VALUE ...]

Checks (exit 1 when one fails), on rcsim's stored attention and output tokens (thresholds: this script's):
- below the critical scaling (p = 1, gamma = gamma_c / 2): the self weight falls with n, to < 0.1 at the
  largest n; H / log n rises with n; the output cosine rises with n, above 0.9 at the largest n;
- above it (gamma = 2 gamma_c): the self weight rises with n, to > 0.9; H / log n falls with n, below 0.1;
  the output cosine falls toward rho (within 0.05 at the largest n);
- at it (gamma = gamma_c): the self weight stays in [0.45, 0.55] at every n;
- other powers at c = gamma_c: p = 1/2 spreads (self weight falling, < 0.2 at the largest n), p = 2
  concentrates (> 0.9);
and an engine check: rcsim's attention and output cosine equal the closed forms (1e-10).

Settings: the paper's: one attention layer, Q = K = V = I (their simplified model), tokens with common
correlation rho, beta_n = gamma log n, the critical gamma_c = 1/(1 - rho) (as the paper's summaries state it;
the text was not read). rcsim's own choices: exactly equiangular tokens (n <= d, here d = the largest n),
rho = 0.5 (gamma_c = 2), no normalisation before the layer (the tokens are unit already; the paper's figure
has a pre-LN), n = 16, 64, 256, 1024 (tiny: 16, 64, 256), gamma / gamma_c = 0.25, 0.5, 1, 2, 4, p = 1/2 and
2 at c = gamma_c, one trial, seed 4, the thresholds.
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

RHO = 0.5
GAMMA_C = 1.0 / (1.0 - RHO)
RATIOS = (0.25, 0.5, 1.0, 2.0, 4.0)  # gamma / gamma_c at p = 1
POWERS = (0.5, 2.0)  # p at c = gamma_c


def settings(tiny):
    """(sizes n, dimension d)."""
    return ([16, 64, 256], 256) if tiny else ([16, 64, 256, 1024], 1024)


def closed_form(n, c, p, rho=RHO):
    """(self weight a, row entropy H, output cosine) of one SA layer, Q = K = V = I, on equiangular tokens."""
    beta = c * np.log(n) ** p
    a = 1.0 / (1.0 + (n - 1) * np.exp(-beta * (1.0 - rho)))
    b = (1.0 - a) / (n - 1)
    H = -a * np.log(a) - (1.0 - a) * np.log(b) if b > 0 else -a * np.log(a)

    def times(x, y):  # (xI, xJ)(yI, yJ) with J = 1 1^T, J^2 = n J
        return (x[0] * y[0], x[0] * y[1] + x[1] * y[0] + n * x[1] * y[1])

    A = (a - b, b)
    gram = times(times(A, (1.0 - rho, rho)), A)
    return a, H, gram[1] / (gram[0] + gram[1])


def measured(path):
    """(self weight, off-diagonal weight spread, row entropy, output cosine) from an rcsim run file."""
    with h5py.File(path, "r") as f:
        A = f["attention"][()].reshape(-1, *f["attention"].shape[-2:])[-1]  # the one layer's (trial 0)
        Y = f["tokens"][()][0, -1]
    n = len(A)
    diag = np.diag(A)
    off = A[~np.eye(n, dtype=bool)]
    with np.errstate(divide="ignore", invalid="ignore"):
        H = -np.sum(np.where(A > 0, A * np.log(A), 0.0), axis=1)
    U = Y / np.linalg.norm(Y, axis=1, keepdims=True)
    cos = (U @ U.T)[~np.eye(n, dtype=bool)]
    return float(diag.mean()), float(off.max() - off.min()), float(H.mean()), float(cos.mean())


def monotone(x, sign):
    """x never moves against `sign` (+1 rising, -1 falling) and ends beyond where it starts."""
    return bool(np.all(sign * np.diff(x) >= 0) and sign * (x[-1] - x[0]) > 0)


def main():
    a = script_args(__doc__, seed=4)
    sizes, d = settings(a.tiny)
    os.makedirs(a.data, exist_ok=True)
    cases = [(f"p=1 gamma={r:g}gamma_c", GAMMA_C * r, 1.0) for r in RATIOS] + \
            [(f"p={p:g} c=gamma_c", GAMMA_C, p) for p in POWERS]
    res, seconds = {}, 0.0
    for name, c, p in cases:
        for n in sizes:
            path = os.path.join(a.data, f"longcontext_c{c:g}_p{p:g}_n{n}.h5")
            seconds += run_rcsim(a.rcsim, path, [
                f"--model.tokens={n}", f"--model.dim={d}", "--model.layers=1", "--weights.q=identity",
                "--weights.k=identity", "--weights.v=identity", f"--model.beta={c!r}", f"--model.beta_log_power={p!r}",
                "--init.type=equiangular", f"--init.rho={RHO!r}", "--run.trials=1", f"--run.seed={a.seed}",
                "--output.attention=true", "--output.tokens=all"])
            res[(name, n)] = (measured(path), closed_form(n, c, p))

    def series(name, k):
        return np.array([res[(name, n)][0][k] for n in sizes])

    logn = np.log(np.array(sizes, dtype=float))
    checks = Checks()
    worst = max(max(abs(m[0] - f[0]), abs(m[2] - f[1]) / np.log(n), abs(m[3] - f[2])) for (_, n), (m, f) in res.items())
    spread = max(m[1] for m, _ in res.values())
    checks.add("attention_equals_closed_form", f"largest |rcsim - closed form| of the self weight, H / log n and the "
               f"output cosine: {worst:.2e}; off-diagonal weight spread {spread:.1e}", "< 1e-10",
               worst < 1e-10 and spread < 1e-10, engine=True)
    below, above, crit = "p=1 gamma=0.5gamma_c", "p=1 gamma=2gamma_c", "p=1 gamma=1gamma_c"
    w, h, cs = series(below, 0), series(below, 2) / logn, series(below, 3)
    checks.add("below_critical_spreads_and_collapses", f"self weight {np.round(w, 4).tolist()}, H/log n "
               f"{np.round(h, 3).tolist()}, output cosine {np.round(cs, 4).tolist()}",
               "self weight falling to < 0.1, H/log n rising, cosine rising to > 0.9",
               monotone(w, -1) and w[-1] < 0.1 and monotone(h, 1) and monotone(cs, 1) and cs[-1] > 0.9)
    w, h, cs = series(above, 0), series(above, 2) / logn, series(above, 3)
    checks.add("above_critical_tends_to_identity", f"self weight {np.round(w, 4).tolist()}, H/log n "
               f"{np.round(h, 3).tolist()}, output cosine {np.round(cs, 4).tolist()}",
               f"self weight rising to > 0.9, H/log n falling to < 0.1, cosine falling to within 0.05 of rho = {RHO:g}",
               monotone(w, 1) and w[-1] > 0.9 and monotone(h, -1) and h[-1] < 0.1 and monotone(cs, -1)
               and abs(cs[-1] - RHO) < 0.05)
    w = series(crit, 0)
    checks.add("critical_self_weight_half", f"self weight at gamma_c: {np.round(w, 4).tolist()}", "in [0.45, 0.55]",
               np.all((w >= 0.45) & (w <= 0.55)))
    w_half, w_two = series("p=0.5 c=gamma_c", 0), series("p=2 c=gamma_c", 0)
    checks.add("other_powers", f"self weight p = 1/2: {np.round(w_half, 4).tolist()}; p = 2: "
               f"{np.round(w_two, 4).tolist()}", "p = 1/2 falling to < 0.2; p = 2 rising to > 0.9",
               monotone(w_half, -1) and w_half[-1] < 0.2 and monotone(w_two, 1) and w_two[-1] > 0.9)

    fig, ax = plt.subplots(1, 3, figsize=(15, 4.4))
    for k, (name, c, p) in enumerate(cases):
        ls = "-" if p == 1.0 else ":"
        for j, (col, scale) in enumerate(((0, 1.0), (2, logn), (3, 1.0))):
            ax[j].plot(sizes, series(name, col) / scale, "o" + ls, color=f"C{k}", ms=4, label=name)
            nn = np.geomspace(sizes[0], sizes[-1], 60)
            ax[j].plot(nn, [closed_form(m, c, p)[j if j < 2 else 2] / (np.log(m) if j == 1 else 1.0) for m in nn],
                       color=f"C{k}", lw=0.5, alpha=0.6)
    for j, label in enumerate(("self weight A_ii", "row entropy H / log n", "output cosine <y_i, y_j>/|y|^2")):
        ax[j].set_xscale("log", base=2)
        ax[j].set_xlabel("n (tokens)")
        ax[j].set_ylabel(label)
    ax[2].axhline(RHO, color="0.5", lw=0.6, ls="--")
    ax[0].legend(fontsize=7)
    fig.suptitle(f"one SA layer, Q = K = V = I, equiangular tokens rho = {RHO:g} (gamma_c = {GAMMA_C:g}), "
                 f"beta = c (log n)^p; dots rcsim, lines closed form" + (" (tiny)" if a.tiny else ""))
    fig.tight_layout()
    save_figure(fig, a.out, dpi=110)

    with atomic_writer(a.out + ".txt") as f:
        f.write(f"# critical attention scaling: one SA layer, Q = K = V = I, equiangular tokens rho = {RHO:g}, "
                f"d = {d}, beta = c (log n)^p (model.beta = c, model.beta_log_power = p), gamma_c = 1/(1 - rho) = "
                f"{GAMMA_C:g}, seed {a.seed}{' (tiny)' if a.tiny else ''}\n")
        f.write("case n beta self_weight H H/log(n) output_cosine closed_self_weight closed_H closed_cosine\n")
        for name, c, p in cases:
            for n in sizes:
                m, cf = res[(name, n)]
                f.write(f"{name.replace(' ', '_')} {n} {c * np.log(n) ** p:.6g} {m[0]:.10f} {m[2]:.8f} "
                        f"{m[2] / np.log(n):.6f} {m[3]:.10f} {cf[0]:.10f} {cf[1]:.8f} {cf[2]:.10f}\n")
        f.write(f"rcsim_seconds {seconds:.2f}\n")
        f.write(checks.text())
    return checks.finish(a.out + ".txt")


if __name__ == "__main__":
    from particles_common import command
    sys.exit(command.run(main))
