#!/usr/bin/env python3
"""Bruno, Pasqualotto, Agazzi's particle experiment ("Emergence of meta-stable clustering in mean-field
transformer models", ICLR 2025; docs/science/particles.md section 9): the USA flow on the circle, Q = K = V = I,
from i.i.d. uniform angles; the k-periodic state that emerges is k* = argmax_k lambda_k, lambda_k =
k^2 I_k(beta) / beta (the linearisation of section 9): 3 at beta = 5, 4 at beta = 7.

usage: particles_bruno.py [--tiny] [--authors] [--rcsim PATH] --data DIR --out PREFIX [--seed S]
                          [--perturb KEY=VALUE ...]

Writes PREFIX.png, PREFIX.pdf and PREFIX.txt. Per draw: the emerged mode k_e, the k in 1..8 of the largest
|c_k| = |mean_j exp(i k theta_j)| at t_e, the first stored time where the largest |c_k| exceeds 0.3; the
major clusters at 4 t_e (components of cos > 0.99 holding at least 5% of the tokens) and the largest
|gap - 2 pi / m| between their m mean angles (reported, not checked: the clusters are not equally spaced,
their masses differ).

Checks (exit 1 when one fails), per beta:
- a state emerges in every draw (t_e exists);
- k* major clusters at 4 t_e in more than half of the draws (3 at beta = 5, 4 at beta = 7: the paper's counts;
  the full run fails at beta = 7: 3 in 20 of 24 draws, docs/science/particles.md section 9).
The emerged mode k_e is reported, not checked: at finite N from i.i.d. uniform angles the random initial
amplitudes (~ N^(-1/2)) decide between modes whose rates differ by 6 - 12% (beta = 7: lambda_4 / lambda_3 = 1.06),
e.g. 18 of 48 draws emerged as 4 and 20 of 48 as 3 at beta = 7, N = 256 (a NumPy integration of this flow). The
tiny run has beta = 5 only.

Settings: the paper's (per issue 37): USA, Q = K = V = I, d = 2, i.i.d. uniform angles, beta = 5 and 7, the
predicted k. rcsim's: N = 1024 (tiny 256), 24 draws per beta (tiny 12), RK4 with dt = 0.002 to T = 0.6
(beta 5) and 0.001 to T = 0.12 (beta 7), the emergence threshold 0.3, a major cluster (cos > 0.99, 5% of the
tokens) and the time 4 t_e at which they are counted (the clusters have formed; later they merge, and sooner
at a larger beta), seed 9.

--authors: the authors' own particle run (gbruno16/transformers-metastability, experiments.ipynb, read
2026-11-29) at beta = 7: explicit Euler dt = 1e-4, i.i.d. uniform angles, no noise, the state read at
t = 0.045, the time of their histogram (their run: N = 2 x 10^4, one draw, T = 0.1). rcsim's: N = 2048 (tiny
512; their N costs about 10 s per step here), 12 draws (tiny 4), seed 9. Per draw: the mode
k_e that emerged (as above), the major clusters (cos > 0.99, 5%), and, where there are four, the
largest distance of their mean angles to the authors' predicted angles (2 pi m - arg mu_4) / 4, mu_4 =
mean_j exp(-4 i theta_j(0)), and the clusters of the angle histogram (100 bins as theirs; runs of bins above
1% of the tokens holding at least 5%: the component rule chains clusters through stragglers at this time).
Check: 4 histogram clusters at t = 0.045 in more than half of the draws (the rule was chosen after the
component count was seen to chain, docs/science/particles.md section 9). With --tiny (N = 512, 4 draws) the
draws emerge sooner and have merged to 3 clusters by t = 0.045: a smoke run whose check fails.
"""
import os
import sys

os.environ.setdefault("MPLBACKEND", "Agg")
import h5py  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

import script_setup  # noqa: E402,F401  (the package rcsim of this checkout: analysis/script_setup.py)
from particles_common import Checks, angles, components, flow_args, run_rcsim, script_args  # noqa: E402
from rcsim.figures import atomic_writer, save_figure  # noqa: E402

KMAX, EMERGED = 8, 0.3
SETTINGS = {5.0: (0.002, 300), 7.0: (0.001, 120)}  # beta: (dt, steps)
AUTHORS_BETA, AUTHORS_DT, AUTHORS_STEPS = 7.0, 1e-4, 450  # their Euler step; t = 0.045, their histogram


def bessel_i(k, beta, m=4096):
    """I_k(beta) = (1/2 pi) int exp(beta cos u) cos(k u) du (trapezoid on a periodic integrand: spectral)."""
    u = np.linspace(0.0, 2 * np.pi, m, endpoint=False)
    return float(np.mean(np.exp(beta * np.cos(u)) * np.cos(k * u)))


def predicted_k(beta):
    """k* = argmax_k k^2 I_k(beta) / beta (USA; docs/science/particles.md section 9)."""
    return 1 + int(np.argmax([k * k * bessel_i(k, beta) / beta for k in range(1, 20)]))


def modes(th):
    """c_k = mean_j exp(i k theta_j), k = 1..KMAX, for angles th[..., N]: [..., KMAX] complex."""
    k = np.arange(1, KMAX + 1)
    return np.mean(np.exp(1j * k[:, None] * th[..., None, :]), axis=-1)


def draw_result(t, X, tau=0.99, major=0.05):
    """(t_e, k_e, major clusters at 4 t_e, largest gap error) of one draw, X[snapshot, N, 2], or None when no
    mode emerges. Major clusters: components of cos > tau at 4 t_e (the last snapshot if earlier) holding at
    least `major` of the tokens; gap error: the largest |gap - 2 pi / m| between the m major clusters' mean
    angles, in order."""
    th = angles(X)
    c = np.abs(modes(th))
    hit = np.nonzero(c.max(axis=1) > EMERGED)[0]
    if len(hit) == 0:
        return None
    s = hit[0]
    k_e = 1 + int(np.argmax(c[s]))
    s4 = min(len(t) - 1, int(np.searchsorted(t, 4 * t[s] - 1e-12)))
    label = components(X[s4], tau)
    sizes = np.bincount(label)
    big = np.nonzero(sizes >= major * len(label))[0]
    centres = np.sort([np.mod(np.angle(np.mean(np.exp(1j * th[s4][label == m]))), 2 * np.pi) for m in big])
    gaps = np.diff(np.r_[centres, centres[:1] + 2 * np.pi]) if len(centres) else np.array([np.nan])
    return float(t[s]), k_e, len(big), float(np.max(np.abs(gaps - 2 * np.pi / max(len(big), 1))))


def circular_distance(a, b):
    """|a - b| on the circle, in [0, pi]."""
    return np.abs(np.angle(np.exp(1j * (np.asarray(a) - np.asarray(b)))))


def histogram_clusters(th, bins=100, floor=0.01, major=0.05):
    """Clusters read from a histogram as the authors' figure shows it: `bins` equal bins on the circle, runs
    of adjacent bins each holding more than `floor` of the tokens, counted when a run holds at least `major`
    of them (a sharp peak with a few stragglers between peaks stays one cluster each)."""
    h = np.histogram(np.mod(th, 2 * np.pi), bins=bins, range=(0, 2 * np.pi))[0] / len(th)
    on = h > floor
    if on.all():
        return 1
    start = int(np.argmin(on))  # a bin below the floor: runs do not wrap from there
    runs, mass = [], 0.0
    for is_on, v in zip(np.roll(on, -start), np.roll(h, -start)):
        if is_on:
            mass += v
        elif mass > 0:
            runs.append(mass)
            mass = 0.0
    runs.append(mass)
    return int(sum(r >= major for r in runs))


def authors_draw(X, k=4, tau=0.99, major=0.05):
    """(k_e, major clusters, largest distance of the clusters to the predicted angles or nan, histogram
    clusters) of one draw:
    X [snapshot, N, 2], the first at t = 0 and the last at the histogram time; k_e the emerged mode (the
    largest |c_k| where one first exceeds 0.3; 0 if none does); predicted angles (2 pi m - arg mu_k) / k,
    m = 0..k-1, mu_k = mean_j exp(-i k theta_j(0)) (the authors' notebook)."""
    th0, th = angles(X[0]), angles(X[-1])
    c = np.abs(modes(angles(X)))
    hit = np.nonzero(c.max(axis=1) > EMERGED)[0]
    k_e = 1 + int(np.argmax(c[hit[0]])) if len(hit) else 0
    Xh = X[-1]
    label = components(Xh, tau)
    big = np.nonzero(np.bincount(label) >= major * len(label))[0]
    peaks = histogram_clusters(th)
    if len(big) != k:
        return k_e, len(big), float("nan"), peaks
    mu = np.mean(np.exp(-1j * k * th0))
    predicted = (2 * np.pi * np.arange(k) - np.angle(mu)) / k
    centres = [np.angle(np.mean(np.exp(1j * th[label == m]))) for m in big]
    return k_e, len(big), float(max(np.min(circular_distance(c, predicted)) for c in centres)), peaks


def authors_main(a):
    """--authors: the authors' Euler run at beta = 7, read at t = 0.045 (the docstring)."""
    n, draws = (512, 4) if a.tiny else (2048, 12)
    os.makedirs(a.data, exist_ok=True)
    run = os.path.join(a.data, f"bruno_authors_beta{AUTHORS_BETA:g}.h5")
    run_rcsim(a.rcsim, run, flow_args(n, 2, AUTHORS_BETA, AUTHORS_DT, AUTHORS_STEPS, kind="usa", integrator="euler"),
              [f"--run.trials={draws}", f"--run.seed={a.seed}", "--init.type=sphere",
               "--output.tokens=" + ",".join(str(k) for k in range(0, AUTHORS_STEPS + 1, 25)),
               f"--output.schedule=list:0 {AUTHORS_STEPS}"])
    with h5py.File(run, "r") as f:
        tokens = f["tokens"][()]
    res = [authors_draw(tokens[r]) for r in range(draws)]
    emerged = np.bincount([r[0] for r in res], minlength=KMAX + 1)
    kstar, th_h = predicted_k(AUTHORS_BETA), AUTHORS_STEPS * AUTHORS_DT
    clusters = np.bincount([r[1] for r in res], minlength=KMAX + 1)
    peaks = np.bincount([r[3] for r in res], minlength=KMAX + 1)
    checks = Checks()
    checks.add(f"authors_clusters_beta{AUTHORS_BETA:g}", f"histogram clusters at t = {th_h:g} (count of draws with "
               f"0..8): {peaks[:9].tolist()} (major components, reported: {clusters[:9].tolist()})",
               f"{kstar} in more than half of the draws", peaks[kstar] > draws / 2)
    fig, ax = plt.subplots(1, min(draws, 4), figsize=(3.4 * min(draws, 4), 3.0), squeeze=False)
    for r in range(min(draws, 4)):
        th0 = angles(tokens[r, 0])
        ax[0, r].hist(np.mod(angles(tokens[r, -1]), 2 * np.pi), bins=100, density=True)
        mu = np.mean(np.exp(-1j * kstar * th0))
        for m in range(kstar):
            ax[0, r].axvline(np.mod((2 * np.pi * m - np.angle(mu)) / kstar, 2 * np.pi), color="C3", ls="--", lw=0.8)
        ax[0, r].set_title(f"draw {r}: {res[r][3]} histogram clusters", fontsize=9)
        ax[0, r].set_xlabel(f"theta at t = {th_h:g}")
    fig.suptitle(f"USA, beta = {AUTHORS_BETA:g}, N = {n}, Euler dt = {AUTHORS_DT:g} (the authors' run); dashed: "
                 f"their predicted angles", fontsize=9)
    fig.tight_layout()
    save_figure(fig, a.out, dpi=110)
    with atomic_writer(a.out + ".txt") as f:
        f.write(f"# Bruno et al.'s particle run in their setting: USA on the circle, beta = {AUTHORS_BETA:g}, "
                f"N = {n}, Euler dt = {AUTHORS_DT:g}, read at t = {th_h:g}, {draws} draws, seed {a.seed}\n"
                "# draw k_e major_clusters largest_distance_to_predicted_angle histogram_clusters\n")
        for r, (k_e, m, dist, p) in enumerate(res):
            f.write(f"{r} {k_e} {m} {dist:.3g} {p}\n")
        f.write(f"# emerged mode k = 0..8 over the draws (reported, not checked): {emerged[:9].tolist()}\n")
        for i in range(tokens.shape[1] // 2, tokens.shape[1]):
            counts = np.bincount([len(np.nonzero(np.bincount(components(tokens[r, i], 0.99)) >= 0.05 * n)[0])
                                  for r in range(draws)], minlength=KMAX + 1)
            f.write(f"# t = {i * 25 * AUTHORS_DT:.4f}: draws with 0..8 major clusters {counts[:9].tolist()} "
                    "(reported, not checked)\n")
        f.write(checks.text())
    return checks.finish(a.out + ".txt")


def main():
    a = script_args(__doc__, seed=9, extra=("--authors",))
    if a.authors:
        return authors_main(a)
    n, draws = (256, 12) if a.tiny else (1024, 24)
    betas = (5.0,) if a.tiny else (5.0, 7.0)
    os.makedirs(a.data, exist_ok=True)
    checks, results, emerged_modes = Checks(), {}, {}
    for beta in betas:
        dt, steps = SETTINGS[beta]
        run = os.path.join(a.data, f"bruno_beta{beta:g}.h5")
        run_rcsim(a.rcsim, run, flow_args(n, 2, beta, dt, steps, kind="usa"),
                  [f"--run.trials={draws}", f"--run.seed={a.seed}", "--init.type=sphere",
                   "--output.tokens=" + ",".join(str(k) for k in range(0, steps + 1, 2)),
                   "--output.measures=fourier_k"])
        with h5py.File(run, "r") as f:
            tokens = f["tokens"][()]
            t = f["tokens_layer"][()] * dt
        res = [draw_result(t, tokens[r]) for r in range(draws)]
        results[beta] = res
        kstar = predicted_k(beta)
        emerged = [r for r in res if r is not None]
        ks = np.bincount([r[1] for r in emerged], minlength=KMAX + 1)[1:]
        checks.add(f"emerges_beta{beta:g}", f"{len(emerged)} of {draws} draws", "every draw", len(emerged) == draws)
        emerged_modes[beta] = ks
        clusters = np.bincount([r[2] for r in emerged], minlength=KMAX + 1)
        checks.add(f"clusters_beta{beta:g}",
                   "major clusters at 4 t_e (count of draws with 0..8): " + str(clusters[:9].tolist()),
                   f"{kstar} in more than half of the draws", clusters[kstar] > draws / 2)

    fig, ax = plt.subplots(1, len(betas), figsize=(5.2 * len(betas), 3.8), squeeze=False)
    for i, beta in enumerate(betas):
        ks = [r[1] for r in results[beta] if r is not None]
        ax[0, i].hist(ks, bins=np.arange(0.5, KMAX + 1.5), rwidth=0.8)
        ax[0, i].axvline(predicted_k(beta), color="C3", ls="--", label=f"predicted k* = {predicted_k(beta)}")
        ax[0, i].set_xlabel("emerged mode k_e")
        ax[0, i].set_ylabel("draws")
        ax[0, i].set_title(f"USA, beta = {beta:g}, N = {n}, i.i.d. uniform start")
        ax[0, i].legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, a.out, dpi=110)
    with atomic_writer(a.out + ".txt") as f:
        f.write(f"# Bruno et al.'s particle experiment: USA on the circle, Q = K = V = I, i.i.d. uniform angles, "
                f"N = {n}, {draws} draws per beta, seed {a.seed}\n"
                "# beta draw t_e k_e major_clusters_at_4t_e largest_gap_error\n")
        for beta in betas:
            for r, res in enumerate(results[beta]):
                f.write(f"{beta:g} {r} " + ("none" if res is None else f"{res[0]:.4g} {res[1]} {res[2]} {res[3]:.3g}")
                        + "\n")
        for beta in betas:
            f.write(f"# beta {beta:g}: predicted k* = {predicted_k(beta)}; emerged mode k = 1..8 over the draws "
                    f"(reported, not checked): {emerged_modes[beta].tolist()}\n")
        f.write(checks.text())
    return checks.finish(a.out + ".txt")


if __name__ == "__main__":
    from particles_common import command
    sys.exit(command.run(main))
