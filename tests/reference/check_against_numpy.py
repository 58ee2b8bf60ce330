#!/usr/bin/env python3
"""Independent check of rcsim against a NumPy implementation of docs/science/model-spec.md sections 1 and 4.

Random inputs and weights are written to an HDF5 file, `rcsim run` is run on them for a grid of
masks, normalisations, head counts, temperatures and residuals, and every stored measure is
compared with NumPy's, layer by layer and trial by trial: relative agreement 1e-9 wherever the
measure is above 1e-12 of its scale (||X||_F for mu and singular values, 1 otherwise).
Singular values are computed to an absolute accuracy of about machine epsilon times sigma_max
(by LAPACK as by Eigen: backward stability and Weyl's inequality), so a small sigma_min is
compared absolutely at 1e-14 ||X||_F instead: two correct SVDs differ there by ~1e-17 ||X||_F
relative, i.e. by far more than 1e-9 of a sigma_min of 1e-11 ||X||_F.

usage: check_against_numpy.py PATH/TO/rcsim WORKDIR
"""
import os
import subprocess
import sys

import h5py
import numpy as np

N, D, DK, L, T = 7, 5, 4, 6, 3


def mask_matrix(kind, n, w):
    i, j = np.indices((n, n))
    return {"complete": np.ones((n, n), bool), "causal": j <= i,
            "sliding_window": np.abs(i - j) <= w,
            "unidirectional_sliding_window": (j <= i) & (i - w <= j)}[kind]


def normalise(y, kind, eps, gain, bias):
    if kind == "none":
        return y
    if kind == "sphere":
        return y / np.linalg.norm(y, axis=1, keepdims=True)
    if kind == "projection":
        return y - y.mean(axis=1, keepdims=True)
    if kind == "layernorm":
        c = y - y.mean(axis=1, keepdims=True)
        return gain * c / np.sqrt(c.var(axis=1, keepdims=True) + eps) + bias
    if kind == "rmsnorm":
        return gain * y / np.sqrt((y ** 2).mean(axis=1, keepdims=True) + eps)
    raise ValueError(kind)


def measures(x, rtol, max_rank):
    s = np.linalg.svd(x, compute_uv=False)
    fro = np.linalg.norm(x)
    mu = np.linalg.norm(x - x.mean(axis=0))
    u = x / np.linalg.norm(x, axis=1, keepdims=True)
    g = np.abs(u @ u.T)
    n = x.shape[0]
    return {"mu": mu, "mu_rel": mu / fro, "fro_norm": fro, "sigma_max": s[0], "sigma_min": s[-1],
            "rank": float(np.sum(s > rtol * s[0])),
            "rank_one_residual": np.sqrt(np.sum(s[1:] ** 2)) / fro,
            "stable_rank": fro ** 2 / s[0] ** 2,
            "cos_abs_mean": (g.sum() - np.trace(g)) / (n * (n - 1)),
            "sigma_at_max_rank": s[max_rank - 1]}


def write_random_inputs(path, rng, shape):
    """X0 ~ N(0, 1) [T, N, d] and W_Q, W_K [L, H, d, d_k], W_V [L, H, d, d] ~ N(0, 1/d), written to
    `path` as rcsim's init.file and weights.file; returns (x0, wq, wk, wv) with the head axis."""
    t, n, d, dk, layers, heads = shape
    x0 = rng.standard_normal((t, n, d))
    wq = rng.standard_normal((layers, heads, d, dk)) / np.sqrt(d)
    wk = rng.standard_normal((layers, heads, d, dk)) / np.sqrt(d)
    wv = rng.standard_normal((layers, heads, d, d)) / np.sqrt(d)
    with h5py.File(path, "w") as f:
        f["X0"] = x0
        # Files take [L, d, k] for one head and [L, H, d, k] for several.
        f["W_Q"] = wq[:, 0] if heads == 1 else wq
        f["W_K"] = wk[:, 0] if heads == 1 else wk
        f["W_V"] = wv[:, 0] if heads == 1 else wv
    return x0, wq, wk, wv


def simulate(x0, wq, wk, wv, mask, norm, d_qk, alpha, eps, gain, bias, rtol, max_rank):
    """Return per-layer measures and attention diagnostics of one trial."""
    x = x0.copy()
    out = {k: [] for k in ["mu", "mu_rel", "fro_norm", "sigma_max", "sigma_min", "rank", "rank_one_residual",
                           "stable_rank", "cos_abs_mean", "sigma_at_max_rank", "attn_min", "attn_entropy"]}
    for t in range(L + 1):
        for k, v in measures(x, rtol, min(N, D) if t == 0 else max_rank).items():
            out[k].append(v)
        if t == L:
            break
        y = np.zeros_like(x)
        mins, ents = [], []
        for h in range(wq.shape[1]):
            s = (x @ wq[t, h]) @ (x @ wk[t, h]).T / np.sqrt(d_qk)
            s = np.where(mask, s, -np.inf)
            a = np.exp(s - s.max(axis=1, keepdims=True))
            a /= a.sum(axis=1, keepdims=True)
            mins.append(a[mask].min())
            with np.errstate(divide="ignore", invalid="ignore"):
                ents.append(np.mean(-np.sum(np.where(a > 0, a * np.log(a), 0.0), axis=1)))
            y += a @ x @ wv[t, h]
        out["attn_min"].append(min(mins))
        out["attn_entropy"].append(np.mean(ents))
        if alpha != 0:
            y = x + alpha * y
        x = normalise(y, norm, eps, gain, bias)
    return out


def main():
    rcsim, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    rng = np.random.default_rng(12345)
    failures, checked = 0, 0
    cases = [
        dict(mask="complete", norm="none", heads=1, d_qk=4.0, alpha=0.0),
        dict(mask="causal", norm="sphere", heads=1, d_qk=1.0 / 64, alpha=0.0),
        dict(mask="sliding_window", norm="layernorm", heads=2, d_qk=64.0, alpha=0.0),
        dict(mask="unidirectional_sliding_window", norm="rmsnorm", heads=1, d_qk=0.7, alpha=0.5),
        dict(mask="complete", norm="projection", heads=3, d_qk=2.0, alpha=1.0),
    ]
    for ci, case in enumerate(cases):
        H = case["heads"]
        path = os.path.join(work, f"inputs{ci}.h5")
        x0, wq, wk, wv = write_random_inputs(path, rng, (T, N, D, DK, L, H))
        gain = np.linspace(0.5, 1.5, D)
        bias = np.zeros(D)
        eps = 1e-5
        out = os.path.join(work, f"run{ci}.h5")
        args = [rcsim, "run", "--config", "/dev/null", "--quiet", "--force",
                f"--model.tokens={N}", f"--model.dim={D}", f"--model.key_dim={DK}", f"--model.layers={L}",
                f"--model.heads={H}", f"--model.d_qk={case['d_qk']!r}", f"--mask.type={case['mask']}",
                "--mask.window=2", f"--norm.type={case['norm']}", f"--norm.eps={eps}",
                "--norm.gain=" + ",".join(repr(g) for g in gain), f"--residual.alpha={case['alpha']}",
                "--init.type=file", f"--init.file={path}", "--weights.q=file", "--weights.k=file",
                "--weights.v=file", f"--weights.file={path}", f"--run.trials={T}", f"--output.file={out}"]
        subprocess.run(args, check=True)
        mask = mask_matrix(case["mask"], N, 2)
        with h5py.File(out, "r") as f:
            rtol = f["metrics/rank"].attrs["rtol"]
            max_rank = int(f.attrs["max_rank"])
            got = {k: f["metrics"][k][()] for k in f["metrics"]}
        for trial in range(T):
            ref = simulate(x0[trial], wq, wk, wv, mask, case["norm"], case["d_qk"], case["alpha"], eps,
                           gain, bias, rtol, max_rank)
            scale = np.array(ref["fro_norm"])
            for key, values in ref.items():
                values = np.array(values)
                g = got[key][trial]
                sc = scale[: len(values)] if key in ("mu", "sigma_max", "sigma_min", "sigma_at_max_rank") else 1.0
                mask_ok = np.abs(values) > 1e-12 * sc
                rel = np.abs(g - values) / np.maximum(np.abs(values), 1e-300)
                bad = mask_ok & ~(rel <= 1e-9)
                if key.startswith("sigma"):
                    bad &= ~(np.abs(g - values) <= 1e-14 * sc)
                # Below the threshold, agreement is absolute at 1e-12 of the scale.
                bad |= ~mask_ok & ~(np.abs(g - values) <= 1e-11 * sc)
                checked += values.size
                if bad.any():
                    failures += 1
                    print(f"MISMATCH case {case} trial {trial} {key}: rcsim {g[bad]} numpy {values[bad]}")
    print(f"{checked} values compared, {failures} mismatching measure rows")
    print(f"{0 if failures else 1} passed, {1 if failures else 0} failed")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
