#!/usr/bin/env python3
"""Independent check of `rcsim keys` and `rcsim brody-map` with SciPy's LP solver (HiGHS).

rcsim decides selectability with GLPK on the margin LP (max t s.t. q.(k_i - k_j) >= t,
|q|_inf <= 1). Here every key is decided by a different formulation and a different solver:
convex-hull membership, i.e. feasibility of lambda >= 0, sum lambda = 1, sum_j lambda_j k_j = k_i
over the other keys (scipy.optimize.linprog, method "highs"): feasible = unselectable. Every key
of several (n, d) pairs, raw and after LayerNorm, is compared; then a few heat-map cells are
recomputed from the same draws (rcsim keys --keys.draw=t reproduces draw t of a cell). Last,
`rcsim ln-geometry` for random gains against numpy.linalg.eigh of P2 G^-2 P2.

usage: check_keys_scipy.py PATH/TO/rcsim WORKDIR
"""
import os
import subprocess
import sys

import h5py
import numpy as np
from scipy.optimize import linprog


def in_hull_of_others(K, i):
    others = np.delete(K, i, axis=0)
    if len(others) == 0:
        return False
    A_eq = np.vstack([others.T, np.ones(len(others))])
    b_eq = np.concatenate([K[i], [1.0]])
    r = linprog(np.zeros(len(others)), A_eq=A_eq, b_eq=b_eq, bounds=(0, None), method="highs")
    if r.status not in (0, 2):
        raise SystemExit(f"linprog failed: {r.message}")
    return r.status == 0


def rcsim_keys(exe, work, n, d, draw, norm, seed=20240527):
    out = os.path.join(work, f"keys_{n}_{d}_{draw}_{norm}.h5")
    subprocess.run([exe, "keys", f"--keys.count={n}", f"--keys.dim={d}", f"--keys.draw={draw}",
                    f"--keys.seed={seed}", f"--norm.type={norm}", f"--output.file={out}", "--quiet"],
                   check=True, stdout=subprocess.DEVNULL)
    with h5py.File(out, "r") as f:
        return f["keys"][()], f["selectable"][()].astype(bool), f["margin"][()]


def main():
    exe, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    compared = unselectable = 0
    failures = []
    for n, d in [(4, 2), (12, 2), (25, 3), (60, 3), (30, 5), (60, 8), (10, 12), (40, 15)]:
        for norm in ["none", "layernorm"]:
            for draw in range(2):
                K, sel, margin = rcsim_keys(exe, work, n, d, draw, norm)
                for i in range(n):
                    ref = not in_hull_of_others(K, i)
                    compared += 1
                    unselectable += not sel[i]
                    if ref != sel[i]:
                        failures.append(f"n={n} d={d} {norm} draw {draw} key {i}: rcsim {sel[i]}, "
                                        f"scipy {ref} (margin {margin[i]:.3g})")
    # Heat-map cells: rcsim brody-map against scipy decisions on the same draws.
    draws = 6
    for n, d in [(20, 3), (45, 4), (60, 6)]:
        out = os.path.join(work, f"map_{n}_{d}.h5")
        subprocess.run([exe, "brody-map", f"--map.count_min={n}", f"--map.count_max={n}", f"--map.dim_min={d}",
                        f"--map.dim_max={d}", f"--map.draws={draws}", f"--output.file={out}", "--quiet"],
                       check=True, stdout=subprocess.DEVNULL)
        with h5py.File(out, "r") as f:
            got = {g: (f[g]["unselectable_fraction"][0, 0], f[g]["any_unselectable_fraction"][0, 0])
                   for g in ("none", "layernorm")}
        for norm in ("none", "layernorm"):
            counts = []
            for t in range(draws):
                K, _, _ = rcsim_keys(exe, work, n, d, t, norm)
                counts.append(sum(in_hull_of_others(K, i) for i in range(n)))
            frac = np.mean(np.array(counts) / n)
            anyf = np.mean(np.array(counts) > 0)
            if abs(frac - got[norm][0]) > 1e-12 or abs(anyf - got[norm][1]) > 1e-12:
                failures.append(f"map cell n={n} d={d} {norm}: rcsim {got[norm]}, scipy ({frac}, {anyf})")
            print(f"cell n={n} d={d} {norm:9s}: unselectable fraction {frac:.4f}, draws with >= 1: {anyf:.3f}")
    # rcsim ln-geometry against numpy.linalg.eigh of P2 G^-2 P2 for random gains (docs/science/model-spec.md 5.7).
    rng = np.random.default_rng(5)
    for d in (3, 5, 8):
        g = rng.uniform(0.2, 3.0, d) * rng.choice([-1, 1], d)
        out = os.path.join(work, f"ln_{d}.h5")
        subprocess.run([exe, "ln-geometry", f"--ln.dim={d}", "--norm.gain=" + " ".join(repr(x) for x in g),
                        "--ln.samples=10", f"--output.file={out}", "--quiet"], check=True, stdout=subprocess.DEVNULL)
        alpha = 1 / g
        P2 = np.eye(d) - np.outer(alpha, alpha) / alpha.dot(alpha)
        lam, vec = np.linalg.eigh(P2 @ np.diag(g ** -2.0) @ P2)
        keep = np.argsort(np.abs(vec.T @ alpha))[:-1]          # drop the eigenvector along alpha
        order = keep[np.argsort(lam[keep])]                     # increasing lambda = decreasing axis
        with h5py.File(out, "r") as f:
            semi, axes, normal = f["semi_axes"][()], f["axes"][()], f["normal"][()]
        ok = (np.allclose(semi, np.sqrt(d / lam[order]), rtol=1e-10)
              and np.allclose(np.abs(axes.T @ vec[:, order]), np.eye(d - 1), atol=1e-8)
              and np.allclose(np.abs(normal), np.abs(alpha) / np.linalg.norm(alpha), rtol=1e-12))
        print(f"ln-geometry d={d}: semi-axes {np.round(semi, 4)} {'agree' if ok else 'DISAGREE'} with numpy.linalg.eigh")
        if not ok:
            failures.append(f"ln-geometry d={d}: rcsim {semi}, numpy {np.sqrt(d / lam[order])}")
    print(f"{compared} keys compared with scipy/HiGHS ({unselectable} unselectable); {len(failures)} disagreements")
    for line in failures:
        print("  " + line)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
