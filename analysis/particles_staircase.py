#!/usr/bin/env python3
"""Energy staircase of the self-attention particle flow (Geshkovski, Koubbi, Polyanskiy, Rigollet,
metastability; docs/science/particles.md): n = 5 tokens on the circle (d = 2), Q = K = V = I, the SA
flow dx_i/dt = P_{x_i}(sum_j softmax_j(beta <x_i, x_j>) x_j) integrated by rcsim's RK4
(dynamics.integrator = rk4, residual.project = tangent, norm.type = sphere). The energy climbs in
steps: long plateaus (metastable clusters) separated by fast merges.

usage: particles_staircase.py [--tiny] [--rcsim PATH] --data DIR --out PREFIX [--seed S] [--perturb KEY=VALUE ...]

Writes PREFIX.png, PREFIX.pdf and PREFIX.txt (the plateaus, merge times and cluster counts, a
steps-per-second comparison of rcsim against a NumPy implementation of the same RK4 step, with the
largest difference between their final tokens, and the checks).

Checks (exit 1 when one fails), the paper's claims for this flow:
- the energy never decreases (the flow climbs the interaction energy: smallest step >= -1e-12 x E);
- every plateau of the energy is at the level sum_c m_c^2 / n^2 of the clusters (cos > 0.999, an
  independent partition of the stored tokens) within 1e-2: the plateaus are clustered metastable states;
- the staircase climbs: the plateaus' cluster levels take at least 2 distinct values, non-decreasing;
- metastability: each merge (the time between two plateaus) is shorter than 1/5 of the plateau
  before it.
And rcsim's final tokens equal the NumPy RK4 from the same X(0) to 1e-10 (an engine check).

Settings, paper (Geshkovski, Koubbi, Polyanskiy, Rigollet, as the authors' public script
HugoKoubbi/2024-transformers-dotm runs it, per issue 37) against this script:
- the paper's: n = 5 tokens on the circle (d = 2), Q = K = V = I, the energy's circle form
  (1/n^2) sum exp(beta(<x_i, x_j> - 1)) (drawn; rcsim stores it / (2 beta));
- rcsim's own choices: SA (the paper's staircase is USA), beta = 9 (the paper: 500 to 4000, which
  random X(0) cannot reach and rcsim's USA overflows at), X(0) uniform on the circle, seed 3 (the
  paper: angles (1/2)(0, 0.5, 2, 4, 7) log(beta)/sqrt(beta)), plain time (the paper rescales it),
  RK4 dt = 0.05, the plateau detector's tolerances.
"""
import os
import sys
import time

os.environ.setdefault("MPLBACKEND", "Agg")
import h5py  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from metastability import merge_times, plateaus  # noqa: E402
from particles_common import Checks, components, flow_args, run_rcsim, script_args  # noqa: E402
from rcsim.figures import atomic_writer, save_figure  # noqa: E402

N = 5


def settings(tiny):
    """(beta, dt, steps, every): the tiny run is for CI (seconds); the full one is the figure."""
    return (9.0, 0.05, 8000, 4) if tiny else (9.0, 0.05, 400000, 100)


def numpy_field(X, beta):
    """F(X)_i = P_{x_i}(sum_j softmax_j(beta <x_i, x_j>) x_j), the SA flow with Q = K = V = I."""
    S = beta * (X @ X.T)
    A = np.exp(S - S.max(axis=1, keepdims=True))
    A /= A.sum(axis=1, keepdims=True)
    Y = A @ X
    return Y - np.sum(Y * X, axis=1, keepdims=True) / np.sum(X * X, axis=1, keepdims=True) * X


def numpy_rk4(X, beta, dt, steps):
    """The same RK4 step as rcsim's, followed by the normalisation onto the sphere."""
    for _ in range(steps):
        k1 = numpy_field(X, beta)
        k2 = numpy_field(X + 0.5 * dt * k1, beta)
        k3 = numpy_field(X + 0.5 * dt * k2, beta)
        k4 = numpy_field(X + dt * k3, beta)
        X = X + dt / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4)
        X /= np.linalg.norm(X, axis=1, keepdims=True)
    return X


def main():
    a = script_args(__doc__, seed=3)
    beta, dt, steps, every = settings(a.tiny)
    os.makedirs(a.data, exist_ok=True)
    run = os.path.join(a.data, "particles_staircase.h5")
    seconds = run_rcsim(a.rcsim, run, flow_args(N, 2, beta, dt, steps),
                        ["--run.trials=1", f"--run.seed={a.seed}", "--init.type=sphere",
                         f"--output.schedule=every:{every}", "--output.tokens=all",
                         "--output.measures=energy,clusters_99,clusters_999"])
    with h5py.File(run, "r") as f:
        t = f["time"][()]
        energy = f["metrics/energy"][0]
        c99 = f["metrics/clusters_99"][0]
        c999 = f["metrics/clusters_999"][0]
        X = f["tokens"][0]
        tok_t = f["tokens_layer"][()] * dt
    X0, XL = X[0], X[-1]
    found = plateaus(t, energy, rtol=2e-2, min_duration=2.0)
    merges = merge_times(t, energy, found)
    # each plateau's level against the clusters of the tokens at its midpoint: sum_c m_c^2 / n^2
    levels = []
    for p in found:
        s = int(np.argmin(np.abs(tok_t - t[(p["first"] + p["last"]) // 2])))
        sizes = np.bincount(components(X[s], 0.999))
        levels.append((float(np.sum(sizes ** 2)) / N ** 2, sorted(sizes.tolist(), reverse=True)))
    # The same RK4 in NumPy from the same X(0): agreement and steps per second.
    n_np = min(steps, 2000)
    t0 = time.perf_counter()
    X_np = numpy_rk4(X0.copy(), beta, dt, n_np)
    np_seconds = time.perf_counter() - t0
    # Same trajectory: continue the NumPy run to the last step (only when that is cheap).
    diff = float("nan")
    if steps <= 20000:
        diff = float(np.abs(numpy_rk4(X_np, beta, dt, steps - n_np) - XL).max())

    fig, ax = plt.subplots(1, 2, figsize=(10, 3.6))
    ax[0].plot(t, 2 * beta * energy, lw=1.2)  # (1/N^2) sum exp(beta (<x_i, x_j> - 1)), the circle form
    for p in found:
        ax[0].axhline(2 * beta * p["value"], color="0.7", lw=0.6, ls=":")
    for m in merges:
        ax[0].axvline(m, color="C3", lw=0.6, ls="--")
    ax[0].set_xscale("symlog", linthresh=1.0)
    ax[0].set_xlim(0, t[-1])
    ax[0].set_xlabel("time t")
    ax[0].set_ylabel("(1/n^2) sum_ij exp(beta(<x_i,x_j> - 1))")
    ax[0].set_title(f"energy staircase, n = 5, d = 2, beta = {beta:g}")
    ax[1].step(t, c999, where="post", label="clusters cos > 0.999")
    ax[1].step(t, c99, where="post", label="clusters cos > 0.99", ls="--")
    ax[1].set_xscale("symlog", linthresh=1.0)
    ax[1].set_xlim(0, t[-1])
    ax[1].set_xlabel("time t")
    ax[1].legend()
    fig.tight_layout()
    save_figure(fig, a.out, dpi=120)

    checks = Checks()
    min_step = float(np.min(np.diff(energy)))
    checks.add("energy_never_decreases", f"smallest step {min_step:.3e} (E up to {np.max(energy):.4g})",
               ">= -1e-12 x max E", min_step >= -1e-12 * np.max(energy))
    lev_err = max([abs(2 * beta * p["value"] - lev) for p, (lev, _) in zip(found, levels)] or [float("nan")])
    checks.add("plateaus_at_cluster_levels", f"{len(found)} plateaus at 2 beta E = "
               + ", ".join(f"{2 * beta * p['value']:.4f} (clusters {'/'.join(map(str, sz))}: {lev:.4f})"
                           for p, (lev, sz) in zip(found, levels)) + f"; largest difference {lev_err:.2e}",
               "every plateau within 1e-2 of sum m_c^2 / n^2", lev_err < 1e-2)
    cluster_levels = [lev for lev, _ in levels]
    checks.add("staircase_climbs", "cluster levels of the plateaus: " + ", ".join(f"{v:.4f}" for v in cluster_levels),
               ">= 2 distinct, non-decreasing in time",
               len(set(cluster_levels)) >= 2 and all(np.diff(cluster_levels) >= 0))
    ratios = [(b["start"] - p["end"]) / (p["end"] - p["start"]) for p, b in zip(found, found[1:])]
    checks.add("merges_fast_against_plateaus", "merge / preceding plateau duration: "
               + (", ".join(f"{r:.3g}" for r in ratios) or "no merge"), "every one < 0.2 (and >= 1 merge)",
               len(ratios) >= 1 and max(ratios) < 0.2)
    if steps <= 20000:
        checks.add("rcsim_equals_numpy_rk4", f"max |X_rcsim(T) - X_numpy(T)| = {diff:.3e}", "< 1e-10", diff < 1e-10,
                   engine=True)
    with atomic_writer(a.out + ".txt") as f:
        f.write(f"# energy staircase: n = 5, d = 2, Q = K = V = I, SA, beta = {beta:g}, RK4 dt = {dt:g}, "
                f"{steps} steps (T = {dt * steps:g}), seed {a.seed}{' (tiny)' if a.tiny else ''}\n")
        f.write("# stored energy E = (1/(2 beta n^2)) sum exp(beta(<x_i,x_j> - 1)); 2 beta E is the circle form\n")
        f.write("plateau start end duration 2beta*E clusters_999_at_start sum_m^2/n^2_at_midpoint sizes\n")
        for k, (p, (lev, sz)) in enumerate(zip(found, levels)):
            f.write(f"{k} {p['start']:.6g} {p['end']:.6g} {p['end'] - p['start']:.6g} {2 * beta * p['value']:.6f} "
                    f"{int(c999[p['first']])} {lev:.6f} {'/'.join(map(str, sz))}\n")
        f.write("merge_times " + " ".join(f"{m:.6g}" for m in merges) + "\n")
        f.write(f"energy_monotone_min_step {min_step:.3e}\n")
        f.write(f"rcsim_steps_per_second {steps / seconds:.4g} (whole run incl. start-up and file, {seconds:.3f} s)\n")
        f.write(f"numpy_steps_per_second {n_np / np_seconds:.4g} ({n_np} steps, {np_seconds:.3f} s)\n")
        f.write(f"max_abs_diff_final_tokens_rcsim_vs_numpy {diff:.3e}\n")
        f.write(checks.text())
    return checks.finish(a.out + ".txt")


if __name__ == "__main__":
    from particles_common import command
    sys.exit(command.run(main))
