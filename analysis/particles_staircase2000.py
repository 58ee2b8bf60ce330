#!/usr/bin/env python3
"""Energy staircase at the issue's beta = 2000, n = 5 (Geshkovski, Koubbi, Polyanskiy, Rigollet, "Dynamic
metastability in the self-attention model"; docs/science/particles.md section 12). Random X(0) on the circle does
not merge within reach at beta = 2000 (a pair at angle g merges after a time of order exp(beta g^2 / 2) /
(beta g^2), astronomically long for g ~ 1), so the script starts from a hand-built X(0): five tokens on an arc
with growing gaps g_k = sqrt(2 s_k / beta), s_k chosen so that the merges fall at t ~ 10 .. 10^4. This is NOT
the paper's construction (which was not found); it shows rcsim resolving saddle-to-saddle plateaus at beta = 2000.

Each plateau's level of (1/n^2) sum_ij exp(beta(<x_i, x_j> - 1)) is compared with sum_c m_c^2 / n^2, m_c the
sizes of the clusters (cos > 0.9999) at the plateau's midpoint: the cross terms between clusters at angle ~0.1 are
exp(-beta 0.1^2 / 2) ~ 5e-5.

usage: particles_staircase2000.py [--tiny] [--rcsim PATH] --data DIR --out PREFIX [--perturb KEY=VALUE ...]

Checks (exit 1 when one fails), the paper's claims (abstract: a staircase energy profile, saddle to saddle):
- the energy never decreases (smallest step > -1e-12);
- every plateau at the level sum m_c^2 / n^2 of its clusters (cos > 0.9999) within 1e-2;
- the staircase climbs: the plateaus' cluster levels take at least 2 distinct values, non-decreasing.

Settings: the paper's: n = 5, beta = 2000 (the issue's; the paper runs 500 to 4000), Q = K = V = I, the
energy's form (1/n^2) sum exp(beta(<x_i, x_j> - 1)). rcsim's own choices: SA on S^2 (d = 3; the paper:
USA on the circle), the hand-built X(0) above (the paper's, per issue 37: angles (1/2)(0, 0.5, 2, 4, 7)
log(beta)/sqrt(beta)), plain time (the paper rescales it), RK4 dt = 0.02, T, the plateau tolerances.
"""
import os
import sys

os.environ.setdefault("MPLBACKEND", "Agg")
import h5py  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

import script_setup  # noqa: E402,F401  (the package rcsim of this checkout: analysis/script_setup.py)
from metastability import merge_times, plateaus  # noqa: E402
from particles_common import Checks, components, flow_args, run_rcsim, script_args  # noqa: E402
from rcsim.figures import atomic_writer, save_figure, write_hdf5  # noqa: E402

BETA, N = 2000.0, 5
S_FULL = (5.2, 8.3, 11.2, 14.0)   # distances sqrt(2 s / beta): merge k near t ~ exp(s) / (2 s (k + 1/k)), ~10 .. 10^4
S_TINY = (4.0, 6.5, 40.0, 60.0)   # the first two merges only (the last two tokens too far for the tiny T)


def settings(tiny):
    """(dt, steps, per_decade, s values)."""
    return (0.02, 20000, 40, S_TINY) if tiny else (0.02, 1500000, 60, S_FULL)


def initial_tokens(svals):
    """Token 0 at the north pole of S^2; token k (k = 1..4) in the tangent direction of azimuth (k - 1) 90 degrees, at
    distance sqrt(2 s_k / beta) from where the cluster of tokens 0..k-1 will be (its centre moves by 1/(m^2 + 1) of
    the distance when a singleton joins a cluster of m tokens: the singleton moves m^2 times faster). Tokens in
    different directions are sqrt(2) farther apart than from the centre: they merge only through the cluster."""
    centre = np.zeros(2)
    pts = [np.zeros(2)]
    for k, s in enumerate(svals, start=1):
        u = np.array([np.cos((k - 1) * np.pi / 2), np.sin((k - 1) * np.pi / 2)])
        p = centre + np.sqrt(2.0 * s / BETA) * u
        pts.append(p)
        centre = centre + (p - centre) / (k * k + 1)
    P = np.array(pts)
    r = np.linalg.norm(P, axis=1)
    phi = np.arctan2(P[:, 1], P[:, 0])
    return np.stack([np.sin(r) * np.cos(phi), np.sin(r) * np.sin(phi), np.cos(r)], axis=1)


def main():
    a = script_args(__doc__)
    dt, steps, per_decade, svals = settings(a.tiny)
    os.makedirs(a.data, exist_ok=True)
    X0 = initial_tokens(svals)
    x0 = os.path.join(a.data, "particles_staircase2000_x0.h5")
    write_hdf5(x0, {"X0": X0})
    run = os.path.join(a.data, "particles_staircase2000.h5")
    sec = run_rcsim(a.rcsim, run, flow_args(N, 3, BETA, dt, steps),
                    ["--run.trials=1", "--init.type=file", f"--init.file={x0}", f"--output.schedule=log:{per_decade}",
                     "--output.tokens=all", "--output.measures=energy,clusters_999"])
    with h5py.File(run, "r") as f:
        t = f["time"][()]
        energy = f["metrics/energy"][0]
        X = f["tokens"][0]
        tok_t = f["tokens_layer"][()] * dt
    circ = 2 * BETA * energy  # (1/n^2) sum exp(beta (<x_i, x_j> - 1))
    # plateaus on log time: the samples are log-spaced, so a plateau is a run of near-equal values
    found = plateaus(np.log10(np.maximum(t, dt)), circ, rtol=5e-3, min_duration=0.1)
    for p in found:
        p["t0"], p["t1"] = 10 ** p["start"], 10 ** p["end"]
    merges = [10 ** m for m in merge_times(np.log10(np.maximum(t, dt)), circ, found)]
    levels = []
    for p in found:
        k = (p["first"] + p["last"]) // 2
        s = int(np.argmin(np.abs(tok_t - t[k])))
        sizes = np.bincount(components(X[s], 0.9999))
        levels.append((float(np.sum(sizes ** 2)) / N ** 2, sorted(sizes.tolist(), reverse=True)))

    fig, ax = plt.subplots(1, 2, figsize=(12, 4.2))
    tp = np.maximum(t, dt)
    ax[0].semilogx(tp, circ, lw=1.3)
    for p, (lev, _) in zip(found, levels):
        ax[0].hlines(lev, p["t0"], p["t1"], color="C3", lw=3, alpha=0.4)
    for m in merges:
        ax[0].axvline(m, color="0.5", lw=0.6, ls="--")
    ax[0].set_xlabel("time t (t = 0 drawn at dt)")
    ax[0].set_ylabel("(1/n^2) sum_ij exp(beta(<x_i,x_j> - 1))")
    ax[0].set_title(f"energy, n = {N}, beta = {BETA:g}; red: sum m_c^2 / n^2 of the clusters", fontsize=9)
    dist0 = np.degrees(np.arccos(np.clip(X @ X[-1, 0], -1, 1)))  # angle to token 0's final position
    ax[1].semilogx(np.maximum(tok_t, dt), dist0, lw=1.0)
    ax[1].set_xlabel("time t")
    ax[1].set_ylabel("angle to token 0 at T (degrees)")
    ax[1].set_title("the five tokens (hand-built X(0) on S^2: distances sqrt(2 s_k / beta), s = "
                    + ", ".join(f"{s:g}" for s in svals) + ")", fontsize=9)
    fig.suptitle(f"SA flow on S^2 at beta = {BETA:g}, RK4 dt = {dt:g}, T = {dt * steps:g}"
                 + (" (tiny)" if a.tiny else ""))
    fig.tight_layout()
    save_figure(fig, a.out, dpi=110)

    with atomic_writer(a.out + ".txt") as f:
        f.write(f"# energy staircase at beta = {BETA:g}, n = {N}, d = 3, SA, Q = K = V = I, RK4 dt = {dt:g}, {steps} steps "
                f"(T = {dt * steps:g}); X(0) hand-built on S^2 (d = 3): "
                f"{np.array2string(X0, precision=6, separator=',').replace(chr(10), '')} "
                f"(distances sqrt(2 s / beta), s = {', '.join(f'{s:g}' for s in svals)}){' (tiny)' if a.tiny else ''}\n")
        f.write("plateau t_start t_end level(1/n^2 sum exp) predicted(sum m^2/n^2) cluster_sizes\n")
        for k, (p, (lev, sz)) in enumerate(zip(found, levels)):
            f.write(f"{k} {p['t0']:.4g} {p['t1']:.4g} {p['value']:.6f} {lev:.6f} {'/'.join(map(str, sz))}\n")
        f.write("merge_times " + " ".join(f"{m:.4g}" for m in merges) + "\n")
        f.write(f"energy_monotone_min_step {np.min(np.diff(energy)):.3e}\n")
        f.write(f"max_level_error {max([abs(p['value'] - lev) for p, (lev, _) in zip(found, levels)] or [0]):.2e}\n")
        f.write(f"rcsim_seconds {sec:.2f} ({steps / sec:.4g} steps/s)\n")
        # The plateau levels must be the clusters' sum m^2 / n^2 (cross terms ~ exp(-beta 0.1^2 / 2) ~ 5e-5, the
        # clusters' width ~ 1e-3), and the energy must not decrease (the SA flow is its gradient ascent up to Z_i).
        checks = Checks()
        min_step = float(np.min(np.diff(energy)))
        checks.add("energy_never_decreases", f"smallest step {min_step:.3e}", "> -1e-12", min_step > -1e-12)
        lev_err = max([abs(p["value"] - lev) for p, (lev, _) in zip(found, levels)] or [float("nan")])
        checks.add("plateaus_at_cluster_levels", f"{len(found)} plateaus; largest level error {lev_err:.2e}",
                   "every plateau within 1e-2 of sum m_c^2 / n^2", lev_err < 1e-2)
        cluster_levels = [lev for lev, _ in levels]
        checks.add("staircase_climbs", "cluster levels of the plateaus: " + ", ".join(f"{v:.4f}" for v in cluster_levels),
                   ">= 2 distinct, non-decreasing in time",
                   len(set(cluster_levels)) >= 2 and all(np.diff(cluster_levels) >= 0))
        f.write(checks.text())
    return checks.finish(a.out + ".txt")

if __name__ == "__main__":
    from particles_common import command
    sys.exit(command.run(main))
