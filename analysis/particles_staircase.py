#!/usr/bin/env python3
"""Energy staircase of the self-attention particle flow (Geshkovski, Koubbi, Polyanskiy, Rigollet,
metastability; docs/science/particles.md): n = 5 tokens on the circle (d = 2), Q = K = V = I, the SA
flow dx_i/dt = P_{x_i}(sum_j softmax_j(beta <x_i, x_j>) x_j) integrated by rcsim's RK4
(dynamics.integrator = rk4, residual.project = tangent, norm.type = sphere). The energy climbs in
steps: long plateaus (metastable clusters) separated by fast merges.

usage: particles_staircase.py [--tiny] [--rcsim PATH] --data DIR --out PREFIX

Writes PREFIX.png, PREFIX.pdf and PREFIX.txt (the plateaus, merge times and cluster counts, and a
steps-per-second comparison of rcsim against a NumPy implementation of the same RK4 step, with the
largest difference between their final tokens).
"""
import argparse
import os
import shutil
import subprocess
import sys
import time

os.environ.setdefault("MPLBACKEND", "Agg")
import h5py  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from metastability import merge_times, plateaus  # noqa: E402
from rcsim.figures import atomic_writer, save_figure  # noqa: E402


def settings(tiny):
    """(beta, dt, steps, every): the tiny run is for CI (seconds); the full one is the figure."""
    return (9.0, 0.05, 8000, 4) if tiny else (9.0, 0.05, 400000, 100)


def run_rcsim(rcsim, out, beta, dt, steps, every, seed):
    args = [rcsim, "run", "--quiet", "--force", f"--output.file={out}", "--model.tokens=5", "--model.dim=2",
            f"--model.layers={steps}", "--run.trials=1", f"--run.seed={seed}", "--run.threads=1",
            "--weights.q=identity", "--weights.k=identity", "--weights.v=identity", "--weights.shared=true",
            f"--model.beta={beta!r}", "--norm.type=sphere", f"--residual.alpha={dt!r}",
            "--residual.project=tangent", "--dynamics.integrator=rk4", "--init.type=sphere",
            f"--output.schedule=every:{every}", f"--output.tokens=0,{steps}",
            "--output.measures=energy,clusters_99,clusters_999"]
    t0 = time.perf_counter()
    subprocess.run(args, check=True)
    return time.perf_counter() - t0


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
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--rcsim", default=shutil.which("rcsim") or "build/sim/rcsim")
    ap.add_argument("--data", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=3)
    a = ap.parse_args()
    beta, dt, steps, every = settings(a.tiny)
    os.makedirs(a.data, exist_ok=True)
    run = os.path.join(a.data, "particles_staircase.h5")
    seconds = run_rcsim(a.rcsim, run, beta, dt, steps, every, a.seed)
    with h5py.File(run, "r") as f:
        t = f["time"][()]
        energy = f["metrics/energy"][0]
        c99 = f["metrics/clusters_99"][0]
        c999 = f["metrics/clusters_999"][0]
        X0, XL = f["tokens"][0, 0], f["tokens"][0, -1]
    found = plateaus(t, energy, rtol=2e-2, min_duration=2.0)
    merges = merge_times(t, energy, found)
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

    with atomic_writer(a.out + ".txt") as f:
        f.write(f"# energy staircase: n = 5, d = 2, Q = K = V = I, SA, beta = {beta:g}, RK4 dt = {dt:g}, "
                f"{steps} steps (T = {dt * steps:g}), seed {a.seed}{' (tiny)' if a.tiny else ''}\n")
        f.write("# stored energy E = (1/(2 beta n^2)) sum exp(beta(<x_i,x_j> - 1)); 2 beta E is the circle form\n")
        f.write("plateau start end duration 2beta*E clusters_999_at_start\n")
        for k, p in enumerate(found):
            f.write(f"{k} {p['start']:.6g} {p['end']:.6g} {p['end'] - p['start']:.6g} {2 * beta * p['value']:.6f} "
                    f"{int(c999[p['first']])}\n")
        f.write("merge_times " + " ".join(f"{m:.6g}" for m in merges) + "\n")
        f.write(f"energy_monotone_min_step {np.min(np.diff(energy)):.3e}\n")
        f.write(f"rcsim_steps_per_second {steps / seconds:.4g} (whole run incl. start-up and file, {seconds:.3f} s)\n")
        f.write(f"numpy_steps_per_second {n_np / np_seconds:.4g} ({n_np} steps, {np_seconds:.3f} s)\n")
        f.write(f"max_abs_diff_final_tokens_rcsim_vs_numpy {diff:.3e}\n")
    print(open(a.out + ".txt").read(), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
