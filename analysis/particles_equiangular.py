#!/usr/bin/env python3
"""Equiangular tokens (Geshkovski, Letrouit, Polyanskiy, Rigollet, "A mathematical perspective on Transformers",
section 6.2; docs/science/particles.md section 15): when the n tokens start unit and pairwise equiangular,
<x_i(0), x_j(0)> = rho_0 for every i != j (rcsim: init.type = equiangular, which needs n <= d), the flow
dx_i/dt = P_{x_i}(sum_j A_ij x_j) with Q = K = V = I keeps them equiangular, and their common cosine rho(t) solves
the scalar equation

    rho' = 2 a(rho) (1 - rho) (1 + (n - 1) rho),
    a(rho) = e^(beta rho) / (e^beta + (n - 1) e^(beta rho))   (SA: the off-diagonal attention weight)
    a(rho) = e^(beta rho) / n                                  (USA),

(<x_i', x_k> = a [(1 - rho^2) + (n - 2)(rho - rho^2)] by symmetry: the j = k term, the n - 2 others, and the
j = i term vanishes). At beta = 0 both read rho' = (2/n)(1 - rho)(1 + (n - 1) rho), solved in closed form by
(1 + (n - 1) rho)/(1 - rho) = K e^(2t), K = (1 + (n - 1) rho_0)/(1 - rho_0).

usage: particles_equiangular.py [--tiny] [--rcsim PATH] --data DIR --out PREFIX [--seed S] [--perturb KEY=VALUE ...]

The script runs rcsim (RK4 on the sphere) for SA and USA at several beta and rho_0, reads rho(t) from the stored
tokens, and integrates the scalar equation itself (RK4 with a step 16 times smaller).

Checks (exit 1 when one fails), the paper's claims for this flow:
- equiangularity is kept: the spread max - min of the off-diagonal cosines is below 1e-12 at every stored time,
  in every run;
- rho(t) follows the scalar equation: max_t |rho_rcsim - rho_ode| < 1e-8 in every run (RK4's error at this
  step is about 1e-11; the 1e-8 is this script's);
- at beta = 0 rho(t) equals the closed form (1e-8; run at beta = 1e-12, rcsim takes beta > 0);
- the tokens cluster: rho increases monotonically in every run and ends above 0.99 in the SA runs with
  beta <= 1 (the single-cluster limit rho -> 1; the 0.99 at this T is this script's).
And an engine-free check of the script itself: its scalar integrator equals the beta = 0 closed form (1e-12).

Settings: the paper's: the flow with Q = K = V = I on the sphere, SA and USA, equiangular X(0) (n <= d).
rcsim's own choices: n = d = 8 (tiny: 6), beta = 1e-12, 1, 4, 9 (tiny: 1e-12, 1, 4), rho_0 = 0.3 and -0.1 (> -1/(n-1)),
RK4 dt = 0.01 to T = 20 for SA and dt = 0.001 to T = 2 for USA (tiny: T = 12 and 1.2), USA only at
beta <= 4 (its rate near rho = 1 is 2 e^beta: stiff for this step beyond), 2 trials (X(0) = G^(1/2) O with
O Haar, seed 3), the tolerances.
"""
import os
import sys

os.environ.setdefault("MPLBACKEND", "Agg")
import h5py  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

import script_setup  # noqa: E402,F401  (the package rcsim of this checkout: analysis/script_setup.py)
from particles_common import Checks, flow_args, run_rcsim, script_args  # noqa: E402
from rcsim.figures import atomic_writer, save_figure  # noqa: E402

KINDS = ("softmax", "usa")
STEP_SCALE = {"softmax": 1.0, "usa": 0.1}  # USA's field is e^beta / (e^beta / n + ...) times faster: a 10x smaller step
RHO0 = (0.3, -0.1)
BETA0 = 1e-12  # the beta = 0 case (rcsim takes beta > 0); its effect on rho over T <= 20 is below 1e-10


def settings(tiny):
    """(n, betas, dt, steps, every, trials)."""
    return (6, [BETA0, 1.0, 4.0], 0.01, 1200, 20, 2) if tiny else (8, [BETA0, 1.0, 4.0, 9.0], 0.01, 2000, 10, 2)


def weight(rho, beta, n, kind):
    """a(rho): the attention weight of one other token when all pairwise cosines are rho."""
    if kind == "usa":
        return np.exp(beta * rho) / n
    return 1.0 / (np.exp(beta * (1.0 - rho)) + (n - 1))  # e^(beta rho) / (e^beta + (n-1) e^(beta rho))


def rho_dot(rho, beta, n, kind):
    return 2.0 * weight(rho, beta, n, kind) * (1.0 - rho) * (1.0 + (n - 1) * rho)


def rho_ode(rho0, beta, n, kind, times, substeps_per_unit):
    """rho at `times` (increasing, from 0) by classical RK4 on the scalar equation, h = 1/substeps_per_unit."""
    h = 1.0 / substeps_per_unit
    out, rho, t = [], rho0, 0.0
    for target in times:
        while t < target - 1e-12:
            step = min(h, target - t)
            k1 = rho_dot(rho, beta, n, kind)
            k2 = rho_dot(rho + 0.5 * step * k1, beta, n, kind)
            k3 = rho_dot(rho + 0.5 * step * k2, beta, n, kind)
            k4 = rho_dot(rho + step * k3, beta, n, kind)
            rho += step / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4)
            t += step
        out.append(rho)
    return np.array(out)


def rho_closed_form_beta0(rho0, n, t):
    """beta = 0: (1 + (n-1) rho)/(1 - rho) = K e^(2t)."""
    K = (1.0 + (n - 1) * rho0) / (1.0 - rho0)
    e = K * np.exp(2.0 * np.asarray(t))
    return (e - 1.0) / (e + n - 1.0)


def cosines(X):
    """Off-diagonal cosines of the rows of X[..., n, d]: (mean, max - min) over the pairs, per leading index."""
    U = X / np.linalg.norm(X, axis=-1, keepdims=True)
    G = U @ np.swapaxes(U, -1, -2)
    n = X.shape[-2]
    off = G[..., ~np.eye(n, dtype=bool)]
    return off.mean(axis=-1), off.max(axis=-1) - off.min(axis=-1)


def main():
    a = script_args(__doc__, seed=3)
    n, betas, dt, steps, every, trials = settings(a.tiny)
    os.makedirs(a.data, exist_ok=True)
    layers = ",".join(str(k) for k in range(0, steps + 1, every))
    runs = {}
    seconds = 0.0
    for kind in KINDS:
        for beta in [b for b in betas if kind == "softmax" or b <= 4.0]:
            for r, rho0 in enumerate(RHO0):
                path = os.path.join(a.data, f"equiangular_{kind}_b{beta:g}_r{r}.h5")
                h = dt * STEP_SCALE[kind]
                seconds += run_rcsim(a.rcsim, path, flow_args(n, n, beta, h, steps, kind=kind),
                                     [f"--run.trials={trials}", f"--run.seed={a.seed}", "--init.type=equiangular",
                                      f"--init.rho={rho0!r}", f"--output.tokens={layers}", f"--output.schedule=every:{every}"])
                with h5py.File(path, "r") as f:
                    X = f["tokens"][()]  # [trial, snapshot, n, d]
                    t = f["tokens_layer"][()] * h
                mean, spread = cosines(X)
                ode = rho_ode(rho0, beta, n, kind, t, 16 / h)
                runs[(kind, beta, rho0)] = (t, mean, spread, ode)

    checks = Checks()
    t_ref = runs[(KINDS[0], betas[0], RHO0[0])][0]
    own = max(float(np.max(np.abs(rho_ode(r0, 0.0, n, "softmax", t_ref, 16 / dt) - rho_closed_form_beta0(r0, n, t_ref))))
              for r0 in RHO0)
    checks.add("scalar_integrator_equals_closed_form", f"max |rho_rk4 - rho_closed| at beta = 0: {own:.2e}", "< 1e-12",
               own < 1e-12, engine=True)
    rows, worst_spread, worst_ode, worst_closed, clustered = [], 0.0, 0.0, 0.0, []
    for (kind, beta, rho0), (t, mean, spread, ode) in runs.items():
        err = float(np.max(np.abs(mean - ode)))
        sp = float(np.max(spread))
        worst_spread, worst_ode = max(worst_spread, sp), max(worst_ode, err)
        if beta == BETA0:
            worst_closed = max(worst_closed, float(np.max(np.abs(mean - rho_closed_form_beta0(rho0, n, t)))))
        mono = bool(np.all(np.diff(mean, axis=-1) > -1e-14))
        clustered.append((kind, beta, rho0, mono, float(np.min(mean[:, -1]))))
        rows.append((kind, beta, rho0, float(mean[0, -1]), float(ode[-1]), err, sp))
    if not np.isfinite(worst_ode):
        worst_ode = np.nan
    checks.add("equiangularity_kept", f"largest spread of the off-diagonal cosines: {worst_spread:.2e}", "< 1e-12",
               worst_spread < 1e-12)
    checks.add("rho_follows_scalar_equation", f"max_t |rho_rcsim - rho_ode| over all runs: {worst_ode:.2e}", "< 1e-8",
               worst_ode < 1e-8)
    checks.add("beta0_closed_form", f"max_t |rho_rcsim - closed form| at beta = 0: {worst_closed:.2e}", "< 1e-8",
               worst_closed < 1e-8)
    checks.add("tokens_cluster", "; ".join(f"{k} beta {b:g} rho0 {r:g}: monotone {m}, rho(T) {e:.6f}"
                                           for k, b, r, m, e in clustered),
               "rho increasing in every run; rho(T) > 0.99 for SA with beta <= 1",
               all(m for *_, m, _ in clustered) and all(e > 0.99 for k, b, _, _, e in clustered
                                                         if k == "softmax" and b <= 1.0))

    fig, ax = plt.subplots(1, 2, figsize=(12, 4.4))
    for (kind, beta, rho0), (t, mean, _, ode) in runs.items():
        ls = "-" if kind == "softmax" else "--"
        color = f"C{betas.index(beta)}"
        ax[0].plot(t[1:], ode[1:], ls, color=color, lw=0.9,
                   label=f"{kind}, beta = {beta:g}" if rho0 == RHO0[0] else None)
        ax[0].plot(t[1::5], mean[0, 1::5], ".", color=color, ms=3)
        ax[1].semilogy(t[1:], np.maximum(np.abs(mean[0, 1:] - ode[1:]), 1e-17), ls,
                       color=color, lw=0.8)
    ax[0].set_xscale("log")
    ax[1].set_xscale("log")
    ax[0].set_xlabel("time t (log; from the first stored step)")
    ax[0].set_ylabel("rho(t) = <x_i, x_j>")
    ax[0].set_title("lines: the scalar equation; dots: rcsim (RK4), rho_0 = 0.3 and -0.1", fontsize=9)
    ax[0].legend(fontsize=7, ncol=2)
    ax[1].set_xlabel("time t")
    ax[1].set_ylabel("|rho_rcsim - rho_ode| (trial 0)")
    ax[1].set_title("solid: SA, dashed: USA", fontsize=9)
    fig.suptitle(f"equiangular tokens, n = d = {n}, RK4 dt = {dt:g} (USA {dt * STEP_SCALE['usa']:g})" + (" (tiny)" if a.tiny else ""))
    fig.tight_layout()
    save_figure(fig, a.out, dpi=110)

    with atomic_writer(a.out + ".txt") as f:
        f.write(f"# equiangular tokens (GLPR section 6.2): Q = K = V = I on the sphere, n = d = {n}, RK4 dt = {dt:g} "
                f"(USA {dt * STEP_SCALE['usa']:g}), {steps} steps (T = {steps * dt:g}, USA {steps * dt * STEP_SCALE['usa']:g}), {trials} trials, seed {a.seed}, tokens every {every} steps"
                f"{' (tiny)' if a.tiny else ''}\n")
        f.write("kind beta rho0 rho_rcsim(T) rho_ode(T) max_t|rcsim-ode| max_t_spread\n")
        for kind, beta, rho0, last, ode_last, err, sp in rows:
            f.write(f"{kind} {beta:g} {rho0:g} {last:.12f} {ode_last:.12f} {err:.2e} {sp:.2e}\n")
        f.write(f"rcsim_seconds {seconds:.2f}\n")
        f.write(checks.text())
    return checks.finish(a.out + ".txt")


if __name__ == "__main__":
    from particles_common import command
    sys.exit(command.run(main))
