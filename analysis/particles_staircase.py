#!/usr/bin/env python3
"""Energy staircase of the USA particle flow in the setting of Geshkovski, Koubbi, Polyanskiy, Rigollet,
"Dynamic metastability in the self-attention model" (arXiv 2410.06833; its figure of the energy against
rescaled time for beta = 500 .. 4000, as the authors' public script HugoKoubbi/2024-transformers-dotm,
staircase.py, draws it; docs/science/particles.md section 6).

usage: particles_staircase.py [--tiny] [--rcsim PATH] --data DIR --out PREFIX [--perturb KEY=VALUE ...]

n = 5 tokens on the circle (d = 2), Q = K = V = I, USA with the weights normalised by e^-beta
(`attention.usa_normalised = true`: A_ij = exp(beta(<x_i, x_j> - 1)) / n), the tangent projection and
the sphere. Rescaled time: the authors step theta <- theta + lr log(beta) g / |g|, g the USA velocity of
the angles, lr = 1e-5, and plot the energy against s = lr x step; rcsim runs the same Euler step at unit
speed (`dynamics.speed = unit`, residual.alpha = lr log(beta): /time is the arc length, s = /time /
log(beta)). The authors snap tokens less than 1e-3 apart onto one another once |g| < 1e-5 (without it a
fixed step chatters about a collapsed pair and the flow stalls); rcsim merges tokens closer than 1e-3
(`dynamics.merge_distance`). X(0): the angles (1/2)(0, 0.5, 2, 4, 7) log(beta_0)/sqrt(beta_0), beta_0 = 2000
for every beta (the script's theta0 is computed once, at its beta = 2000).

Writes PREFIX.png, PREFIX.pdf and PREFIX.txt (per beta: the plateaus in s, their levels against the
clusters' sum m_c^2 / n^2, the merge times against the authors' algorithm re-implemented here, and the
checks).

Checks (exit 1 when one fails), the paper's claims for this figure (a staircase: plateaus at the
metastable clustered states, one per merge, climbing):
- the energy (1/n^2) sum exp(beta(<x_i, x_j> - 1)) never decreases (smallest step >= -1e-11: a merge moves a
  token by up to 1e-3, which changes the far pairs' terms by ~1e-12);
- every plateau (analysis/metastability.py, rtol 5e-3, at least 0.003 in s; at beta = 500 the 2/1/1/1 state
  is a shoulder whose energy rises by 2.6e-3 across it, a trend for the detector at rtol 2e-3) lies at
  sum_c m_c^2 / n^2 of the clusters of the tokens at its midpoint (cos > 0.9999) within 1e-2;
- the staircase: the plateaus above the start are exactly the levels of the n - 1 = 4 merges of this X(0),
  0.28, 0.44, 0.52, 1 (clusters 2/1/1/1, 3/1/1, 3/2, 5), in that order, for every beta;
- the merge times in s (midpoint crossings) equal those of the authors' algorithm (their step, angles,
  their snap rule), re-implemented in NumPy here, within 1e-3 (threshold: this script's; the snap rules
  differ, rcsim's merges at 1e-3 on the approach, theirs once |g| < 1e-5: 2.2e-4 measured).
And an engine check, in the regime of the claims: rcsim's tokens equal a NumPy implementation of the documented
step (Cartesian, unit speed, the difference form, merge) at every stored layer (every 50 steps) of every beta's run
to 1e-9 (beta = 4000 included: there the fields between plateaus are ~1e-58, and a rounding residue of the order of
1e-16 in the step would carry it).
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
from rcsim.figures import atomic_writer, save_figure  # noqa: E402

N = 5
BETA0 = 2000.0             # the authors' theta0 is computed at their beta = 2000 and reused for every beta
LR = 1e-5                  # the authors' lr: s = LR x step
MERGE = 1e-3               # the authors' snap distance (radians; rcsim: Euclidean, the chord)
S_END = 0.15               # every beta has merged into one cluster by s ~ 0.12
TOKENS_EVERY = 50          # rcsim stores the tokens every 50 steps
LEVELS = (0.28, 0.44, 0.52, 1.0)  # sum m^2 / n^2 after each merge: 2/1/1/1, 3/1/1, 3/2, 5


def settings(tiny):
    """The betas: the paper's six, or two of them for CI."""
    return (500.0, 4000.0) if tiny else (500.0, 1000.0, 1500.0, 2000.0, 3000.0, 4000.0)


def initial_angles():
    return 0.5 * np.array([0.0, 0.5, 2.0, 4.0, 7.0]) * np.log(BETA0) / np.sqrt(BETA0)


def authors_algorithm(beta, steps):
    """The authors' figure loop (their staircase.py, time_rescale_3), written anew: angles theta, g_i =
    (1/n^2) sum_j -sin(theta_i - theta_j) exp(beta(cos(theta_i - theta_j) - 1)), theta <- theta + lr log(beta)
    g / |g|, and when |g| < 1e-5 every later token within 1e-3 of an earlier one snapped onto it. Returns the
    energy (1/n^2) sum exp(beta(cos - 1)) after each step (NaN once g = 0, as theirs)."""
    th = initial_angles()
    out = np.empty(steps)
    with np.errstate(invalid="ignore"):
        for k in range(steps):
            D = th[:, None] - th[None, :]
            g = np.sum(-np.sin(D) * np.exp(beta * (np.cos(D) - 1.0)), axis=1) / N ** 2
            gn = np.linalg.norm(g)
            th = th + LR * np.log(beta) * g / gn
            if gn < 1e-5:
                for a in range(N):
                    for b in range(a + 1, N):
                        if abs(th[a] - th[b]) < MERGE:
                            th[b] = th[a]
            D = th[:, None] - th[None, :]
            out[k] = np.sum(np.exp(beta * (np.cos(D) - 1.0))) / N ** 2
    return out


def rcsim_step_numpy(X, beta, dt, steps, every=None):
    """rcsim's step, written anew: F_i = (1/n) sum_j exp(beta(<x_i, x_j> - 1)) P_{x_i}(x_j - x_i) (the sum of
    differences, as rcsim forms it at unit speed: exactly 0 between coincident tokens), X <- normalise(X +
    dt F / |F|_F) (F = 0: X stays), then x_j <- x_i for i < j closer than MERGE. Returns X after `steps`, or
    with `every` the stack of X at steps 0, every, 2 every, ..., steps."""
    kept = [X.copy()]
    for step in range(1, steps + 1):
        A = np.exp(beta * (X @ X.T) - beta) / N
        D = X[None, :, :] - X[:, None, :]                      # D[i, j] = x_j - x_i
        Y = np.einsum("ij,ijk->ik", A, D)
        F = Y - np.sum(Y * X, axis=1, keepdims=True) / np.sum(X * X, axis=1, keepdims=True) * X
        nf = np.linalg.norm(F)
        if nf > 0:
            X = X + dt * F / nf
            X = X / np.linalg.norm(X, axis=1, keepdims=True)
        for i in range(N):
            for j in range(i + 1, N):
                if np.sum((X[j] - X[i]) ** 2) < MERGE ** 2:
                    X[j] = X[i]
        if every and step % every == 0:
            kept.append(X.copy())
    return np.stack(kept) if every else X


def run_beta(a, beta, x0):
    """One rcsim run at this beta: (s, circle energy, tokens, token s)."""
    steps = int(round(S_END / LR))
    dt = LR * np.log(beta)
    out = os.path.join(a.data, f"particles_staircase_beta{beta:g}.h5")
    run_rcsim(a.rcsim, out, flow_args(N, 2, beta, dt, steps, kind="usa", integrator="euler"),
              ["--run.trials=1", "--init.type=file", f"--init.file={x0}", "--attention.usa_normalised=true",
               "--dynamics.speed=unit", f"--dynamics.merge_distance={MERGE!r}", "--output.schedule=every:10",
               "--output.tokens=" + ",".join(str(k) for k in range(0, steps + 1, TOKENS_EVERY)),
               "--output.measures=energy,clusters_999"])
    with h5py.File(out, "r") as f:
        t = f["time"][()]
        energy = f["metrics/energy"][0]
        X = f["tokens"][0]
        tok_s = f["tokens_layer"][()] * LR
    return t / np.log(beta), 2 * beta * energy, X, tok_s, dt, steps


def analyse(beta, s, circ, X, tok_s):
    """Plateaus (with the clusters' level at each midpoint) and merge times of one run."""
    found = plateaus(s, circ, rtol=5e-3, min_duration=0.003) if np.all(np.isfinite(circ)) else []
    merges = merge_times(s, circ, found)
    for p in found:
        k = int(np.argmin(np.abs(tok_s - 0.5 * (p["start"] + p["end"]))))
        sizes = np.bincount(components(X[k], 0.9999)) if np.all(np.isfinite(X[k])) else np.ones(N, int)
        p["level"] = float(np.sum(sizes ** 2)) / N ** 2
        p["sizes"] = "/".join(map(str, sorted(sizes.tolist(), reverse=True)))
    return found, merges


def authors_merges(beta):
    """Merge times (s) of the authors' algorithm: crossings of the midpoints between the LEVELS (and from
    the start to the first level)."""
    E = authors_algorithm(beta, int(round(S_END / LR)))
    s = LR * np.arange(1, len(E) + 1)
    E = np.where(np.isfinite(E), E, 1.0)  # NaN once all are one cluster: the energy is 1 there
    mids = [0.5 * (lo + hi) for lo, hi in zip(LEVELS, LEVELS[1:])]
    return [float(s[np.argmax(E >= m)]) if np.any(E >= m) else float("nan") for m in mids], s, E


def main():
    a = script_args(__doc__)
    betas = settings(a.tiny)
    os.makedirs(a.data, exist_ok=True)
    th0 = initial_angles()
    x0 = os.path.join(a.data, "particles_staircase_x0.h5")
    with h5py.File(x0, "w") as f:
        f["X0"] = np.stack([np.cos(th0), np.sin(th0)], axis=1)
    checks = Checks()
    rows, curves = [], []
    min_step, worst_level, engine_diff = np.inf, 0.0, 0.0
    staircase_ok, merge_ok, merge_err = True, True, 0.0
    for beta in betas:
        s, circ, X, tok_s, dt, steps = run_beta(a, beta, x0)
        found, merges = analyse(beta, s, circ, X, tok_s)
        ref, s_ref, E_ref = authors_merges(beta)
        curves.append((beta, s, circ, s_ref, E_ref, found))
        steps_e = np.diff(circ)
        min_step = min(min_step, float(np.min(steps_e)) if np.all(np.isfinite(steps_e)) else -np.inf)
        for p in found:
            worst_level = max(worst_level, abs(p["value"] - p["level"]))
        upper = [p for p in found if p["value"] > 0.5 * (0.2 + LEVELS[0])]
        got = [round(p["level"], 4) for p in upper]
        staircase_ok &= got == list(LEVELS) and all(abs(p["value"] - lv) < 1e-2 for p, lv in zip(upper, LEVELS))
        # rcsim's crossings between the four upper levels against the authors' algorithm's
        mine = merges[-3:] if len(upper) == 4 else []
        if len(mine) == 3 and all(np.isfinite(ref)):
            err = max(abs(m - r) for m, r in zip(mine, ref))
            merge_err = max(merge_err, err)
            merge_ok &= err < 1e-3
        else:
            merge_ok = False
            merge_err = float("inf")  # the four upper plateaus are missing
        if np.all(np.isfinite(X)):  # every stored layer (every 50 steps) of every beta against the NumPy step
            Xn = rcsim_step_numpy(X[0].copy(), beta, dt, steps, every=TOKENS_EVERY)
            engine_diff = max(engine_diff, float(np.abs(Xn - X).max())) if Xn.shape == X.shape else np.inf
        else:
            engine_diff = np.inf
        rows.append((beta, found, merges, ref))

    fig, ax = plt.subplots(figsize=(7, 4))
    for k, (beta, s, circ, s_ref, E_ref, found) in enumerate(curves):
        ax.plot(s, circ, lw=1.3, color=f"C{k}", label=f"beta = {beta:g}")
        ax.plot(s_ref, E_ref, lw=0.8, ls=":", color="k")
    for lv in LEVELS:
        ax.axhline(lv, color="0.8", lw=0.5)
    ax.set_xlim(0, S_END)
    ax.set_xlabel("rescaled time s (arc length / log beta)")
    ax.set_ylabel("(1/n^2) sum exp(beta(<x_i,x_j> - 1))")
    ax.set_title("USA, n = 5, e^-beta-normalised; dotted: the authors' algorithm" + (" (tiny)" if a.tiny else ""),
                 fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, a.out, dpi=120)

    checks.add("energy_never_decreases", f"smallest step {min_step:.3e}", ">= -1e-11", min_step >= -1e-11)
    n_plateaus = sum(len(r[1]) for r in rows)
    checks.add("plateaus_at_cluster_levels", f"{n_plateaus} plateaus over {len(betas)} betas; largest |level - "
               f"sum m^2/n^2| {worst_level:.2e}", "< 1e-2, and >= 1 plateau", n_plateaus > 0 and worst_level < 1e-2)
    checks.add("staircase_four_merges", "upper plateaus' cluster levels per beta: " + "; ".join(
        f"{b:g}: " + ",".join(f"{p['level']:.2f}" for p in f if p["value"] > 0.24) for b, f, _, _ in rows),
        "0.28, 0.44, 0.52, 1 in order for every beta", staircase_ok)
    checks.add("merge_times_as_authors", f"largest |s_rcsim - s_authors| {merge_err:.2e}",
               "< 1e-3 at the three upper merges of every beta", merge_ok)
    checks.add("rcsim_equals_numpy_step", f"max |X_rcsim - X_numpy| at every {TOKENS_EVERY}th step to s = {S_END:g}, "
               f"beta = {', '.join(f'{b:g}' for b in betas)}: {engine_diff:.3e}", "< 1e-9", engine_diff < 1e-9,
               engine=True)
    with atomic_writer(a.out + ".txt") as f:
        f.write(f"# energy staircase, USA normalised by e^-beta, n = 5, d = 2, Q = K = V = I, unit-speed Euler, "
                f"lr = {LR:g}, s up to {S_END:g}, merge distance {MERGE:g}{' (tiny)' if a.tiny else ''}\n")
        f.write("# X(0) angles (1/2)(0, 0.5, 2, 4, 7) log(2000)/sqrt(2000) = "
                + ", ".join(f"{v:.6f}" for v in th0) + "\n")
        f.write("beta plateau s_start s_end energy clusters_level sizes\n")
        for beta, found, merges, ref in rows:
            for k, p in enumerate(found):
                f.write(f"{beta:g} {k} {p['start']:.5f} {p['end']:.5f} {p['value']:.5f} {p['level']:.4f} {p['sizes']}\n")
            f.write(f"{beta:g} merge_times_s " + " ".join(f"{m:.5f}" for m in merges)
                    + " ; authors' algorithm (upper three) " + " ".join(f"{m:.5f}" for m in ref) + "\n")
        f.write(checks.text())
    return checks.finish(a.out + ".txt")


if __name__ == "__main__":
    from particles_common import command
    sys.exit(command.run(main))
