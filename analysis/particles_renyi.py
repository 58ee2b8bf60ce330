#!/usr/bin/env python3
"""Strong Renyi centres of i.i.d. uniform tokens on the circle against Lemma C.1 (Karagodin, Polyanskiy,
Rigollet, "Clustering in causal attention masking", NeurIPS 2024, section 5 and appendix C;
docs/science/particles.md section 8): rcsim's measure `strong_renyi_centres` (a token farther than
delta = 4 beta^(-1/2) from every earlier token, strict) at X(0), averaged over many draws, against the
lemma's expected count 1 / mu(B_delta): pi / delta with the geodesic distance, pi / (2 arcsin(delta / 2))
with the Euclidean one (the arc within chord delta).

usage: particles_renyi.py [--tiny] [--rcsim PATH] --data DIR --out PREFIX [--seed S] [--perturb KEY=VALUE ...]

Writes PREFIX.png, PREFIX.pdf and PREFIX.txt (per delta and distance: the mean count, its standard error,
the lemma's value; the checks).

Checks (exit 1 when one fails):
- Lemma C.1, geodesic (the paper's appendix): |mean - pi / delta| < 4 standard errors of the mean, for
  every delta;
- Lemma C.1, Euclidean (the paper's section 5): |mean - 1 / mu(B_delta)| < 4 standard errors, every delta;
- engine check: rcsim's measure equals an independent Python implementation on the stored X(0) of every
  trial.
The finite-n correction (1 - mu(B_delta))^n of the expectation sum_{k<n} (1 - mu)^k is below 1e-7 at the
smallest delta, far below the noise. A wrong delta (`--perturb model.beta=64`: delta = 0.5 in every run)
or the wrong distance (`--perturb metrics.renyi_distance=euclidean`) fails the lemma's checks.

Settings: the paper's: delta = 4 beta^(-1/2) (Fig. 2 caption), the strict rule, tokens i.i.d. uniform on the
circle (the lemma's hypothesis), both distances. rcsim's: n = 400 (tiny 150), 2000 draws (tiny 200) per
delta, delta in {0.25, 0.5, 1, 1.5, 2} (beta = 16 / delta^2), seed 3, the 4-standard-error tolerance.
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

DELTAS = (0.25, 0.5, 1.0, 1.5, 2.0)
DISTANCES = ("geodesic", "euclidean")


def strong_centres(X, delta, distance):
    """Strong Renyi centres, written apart from rcsim: token k counts when min over i < k of its distance
    to x_i is > delta (geodesic: the angle between the directions)."""
    if distance == "geodesic":
        U = X / np.linalg.norm(X, axis=1, keepdims=True)
        dist = np.arccos(np.clip(U @ U.T, -1.0, 1.0))
    else:
        dist = np.linalg.norm(X[:, None, :] - X[None, :, :], axis=-1)
    dist[np.triu_indices(len(X))] = np.inf  # row k keeps the earlier tokens i < k
    return int(np.sum(np.min(dist, axis=1) > delta))


def lemma(delta, distance):
    """Lemma C.1's expected count 1 / mu(B_delta) on the circle: the arc within delta is 2 theta of 2 pi,
    theta = delta (geodesic) or 2 arcsin(delta / 2) (Euclidean chord delta); 1 when B_delta is everything."""
    theta = delta if distance == "geodesic" else 2.0 * np.arcsin(min(delta / 2.0, 1.0))
    return np.pi / min(theta, np.pi)


def z_score(mean, se, lem):
    """(mean - lem) / se as text; 'exact' or 'off' where se = 0 (every draw the same count: Euclidean delta = 2,
    the chord's largest value, leaves token 0 the only centre)."""
    if se > 0:
        return f"{(mean - lem) / se:+.2f}"
    return "exact" if abs(mean - lem) <= 1e-12 else "off"


def measure(a, n, trials, delta, distance):
    """(counts per trial, the stored X(0) per trial, the delta attribute) of one rcsim run."""
    run = os.path.join(a.data, f"renyi_{distance}_{delta:g}.h5")
    beta = 16.0 / delta ** 2
    run_rcsim(a.rcsim, run, [f"--model.tokens={n}", "--model.dim=2", "--model.layers=1", f"--model.beta={beta!r}",
                             "--weights.q=identity", "--weights.k=identity", "--weights.v=identity",
                             "--norm.type=sphere", "--init.type=sphere", f"--run.trials={trials}",
                             f"--run.seed={a.seed}", "--output.tokens=0", "--output.measures=strong_renyi_centres",
                             f"--metrics.renyi_distance={distance}"])
    with h5py.File(run, "r") as f:
        counts = f["metrics/strong_renyi_centres"][:, 0]
        X0 = f["tokens"][:, 0]
        attr = float(f["metrics/strong_renyi_centres"].attrs.get("delta", np.nan))
    return counts, X0, attr


def main():
    a = script_args(__doc__, seed=3)
    n, trials = (150, 200) if a.tiny else (400, 2000)
    os.makedirs(a.data, exist_ok=True)
    checks = Checks()
    rows, mismatch, total = {}, 0, 0
    for distance in DISTANCES:
        for delta in DELTAS:
            counts, X0, attr = measure(a, n, trials, delta, distance)
            py = np.array([strong_centres(X, delta, distance) for X in X0])
            mismatch += int(np.sum(py != counts))
            total += len(py)
            mean, se = float(np.mean(counts)), float(np.std(counts, ddof=1) / np.sqrt(len(counts)))
            rows[distance, delta] = (mean, se, lemma(delta, distance), attr)
        ok = [abs(rows[distance, d][0] - rows[distance, d][2]) <= 4 * rows[distance, d][1] + 1e-12 for d in DELTAS]
        checks.add(f"lemma_C1_{distance}", "mean - lemma in standard errors: " + ", ".join(
            f"delta {d:g}: {z_score(*rows[distance, d][:3])}" for d in DELTAS),
            "within +-4 at every delta (equal where every draw gives the same count)", all(ok))
    checks.add("measure_equals_python", f"{mismatch} of {total} draws differ", "0", mismatch == 0, engine=True)

    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    fine = np.linspace(0.2, 2.1, 200)
    for distance, colour in zip(DISTANCES, ("C0", "C1")):
        ax.plot(fine, [lemma(d, distance) for d in fine], color=colour,
                label=f"Lemma C.1, {distance}: "
                + ("pi / delta" if distance == "geodesic" else "pi / (2 arcsin(delta/2))"))
        m = np.array([rows[distance, d][0] for d in DELTAS])
        e = np.array([rows[distance, d][1] for d in DELTAS])
        ax.errorbar(DELTAS, m, yerr=2 * e, fmt="o", color=colour, ms=4, capsize=3,
                    label=f"rcsim strong_renyi_centres, {distance} (mean +- 2 s.e.)")
    ax.set_xlabel("delta = 4 beta^(-1/2)")
    ax.set_ylabel("strong Renyi centres")
    ax.set_yscale("log")
    ax.set_title(f"i.i.d. uniform tokens on the circle, n = {n}, {trials} draws per point"
                 + (" (tiny)" if a.tiny else ""))
    ax.legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, a.out, dpi=110)

    with atomic_writer(a.out + ".txt") as f:
        f.write("# strong Renyi centres of i.i.d. uniform tokens on the circle against Lemma C.1 "
                f"(Karagodin et al. 2024): "
                f"n = {n}, {trials} draws per delta, seed {a.seed}\n")
        f.write("# distance delta beta mean std_error lemma (mean-lemma)/se delta_attribute\n")
        for (distance, delta), (mean, se, lem, attr) in rows.items():
            f.write(f"{distance} {delta:g} {16 / delta ** 2:.6g} {mean:.4f} {se:.4f} {lem:.4f} "
                    f"{z_score(mean, se, lem)} "
                    f"{attr:.6g}\n")
        f.write(checks.text())
    return checks.finish(a.out + ".txt")


if __name__ == "__main__":
    from particles_common import command
    sys.exit(command.run(main))
