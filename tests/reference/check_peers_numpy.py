#!/usr/bin/env python3
"""Independent check of rcsim's peer dynamics and measures (docs/science/peers.md) against NumPy.

Written for this test from the formulas of docs/science/peers.md (not from rcsim's code): unnormalised
attention (attention.kind = usa), heads averaged (model.head_mix = mean), the tangent-projected
residual (residual.project = tangent), W_V tied to the bilinear form (weights.v = tied_qk),
weights redrawn every K layers (weights.redraw_every), and the measures pair_density, clusters,
dong_residual, dong_residual_rel, effective_rank, attn_rank, ergodicity, and the stored attention
matrices (output.attention). Inputs and weights come from an HDF5 file,
so both sides start from identical tokens and weights. Also runs the same trajectory two ways
where rcsim has two spellings: model.beta against model.d_qk, weights.qk = identity against
identity W_Q and W_K, weights.shared against weights.redraw_every = L (all bitwise), and
model.head_mix = mean against W_V,h / H (round-off).

Agreement: relative 1e-9 on real-valued measures (absolute 1e-11 of the scale below 1e-12);
integer-valued measures (clusters, attn_rank) exactly, except where a cosine or singular value
lies within 1e-9 of its threshold (then that value is skipped and counted).

usage: check_peers_numpy.py PATH/TO/rcsim WORKDIR
"""
import os
import subprocess
import sys

import h5py
import numpy as np

N, D, L, T = 7, 4, 12, 2


def mask_matrix(kind, n):
    i, j = np.indices((n, n))
    return {"complete": np.ones((n, n), bool), "causal": j <= i}[kind]


def cosines(x):
    u = x / np.linalg.norm(x, axis=1, keepdims=True)
    return u @ u.T


def components(adj):
    n = len(adj)
    seen, count = [False] * n, 0
    for s in range(n):
        if seen[s]:
            continue
        count += 1
        stack = [s]
        seen[s] = True
        while stack:
            i = stack.pop()
            for j in range(n):
                if adj[i, j] and not seen[j]:
                    seen[j] = True
                    stack.append(j)
    return count


def token_measures(x, thr, tau):
    c = cosines(x)
    n = len(x)
    off = ~np.eye(n, dtype=bool)
    r = x - x.mean(axis=0)
    s = np.linalg.svd(x, compute_uv=False)
    p = s / s.sum()
    p = p[p > 0]
    near = np.any(np.abs(c[off] - tau) < 1e-9)
    return {"pair_density": np.sum(c[off] > thr) / (n * (n - 1)),
            "clusters": np.nan if near else components((c > tau) & off),
            "dong_residual": np.sqrt(np.abs(r).sum(axis=0).max() * np.abs(r).sum(axis=1).max()),
            "dong_residual_rel": np.sqrt(np.abs(r).sum(axis=0).max() * np.abs(r).sum(axis=1).max()
                                         / (np.abs(x).sum(axis=0).max() * np.abs(x).sum(axis=1).max())),
            "effective_rank": np.exp(-np.sum(p * np.log(p))),
            "mu": np.linalg.norm(r)}


def simulate(x0, wq, wk, wv, mask, beta, kind, head_mix, alpha, project, norm, redraw, rtol, thr, tau):
    x = x0.copy()
    out = {k: [] for k in ["pair_density", "clusters", "dong_residual", "dong_residual_rel", "effective_rank", "mu",
                           "attn_rank", "ergodicity", "attn_min", "attention"]}
    prod = np.eye(N)
    H = wq.shape[1]
    for t in range(L + 1):
        for k, v in token_measures(x, thr, tau).items():
            out[k].append(v)
        if t == L:
            break
        lw = t - t % redraw  # the layer whose weights are in force
        y = np.zeros_like(x)
        abar = np.zeros((N, N))
        mins = []
        for h in range(H):
            s = beta * (x @ wq[lw, h]) @ (x @ wk[lw, h]).T
            if kind == "usa":
                a = np.where(mask, np.exp(s), 0.0) / N
            else:
                s = np.where(mask, s, -np.inf)
                a = np.exp(s - s.max(axis=1, keepdims=True))
                a /= a.sum(axis=1, keepdims=True)
            mins.append(a[mask].min())
            abar += a / H
            y += a @ x @ wv[lw, h]
        if head_mix == "mean":
            y /= H
        if project == "tangent":
            y = y - (np.sum(y * x, axis=1) / np.sum(x * x, axis=1))[:, None] * x
        if alpha != 0:
            y = x + alpha * y
        if norm == "sphere":
            y = y / np.linalg.norm(y, axis=1, keepdims=True)
        prod = abar @ prod
        sv = np.linalg.svd(abar, compute_uv=False)
        near = np.any(np.abs(sv - rtol * sv[0]) < 1e-9 * sv[0])
        out["attn_rank"].append(np.nan if near else float(np.sum(sv > rtol * sv[0])))
        out["ergodicity"].append(0.5 * max(np.abs(prod[i] - prod[j]).sum() for i in range(N) for j in range(N)))
        out["attn_min"].append(min(mins))
        out["attention"].append(abar)
        x = y
    return out


def run(rcsim, args, out):
    subprocess.run([rcsim, "run", "--config", "/dev/null", "--quiet", "--force", f"--output.file={out}"] + args,
                   check=True)
    with h5py.File(out, "r") as f:
        got = {k: f["metrics"][k][()] for k in f["metrics"]}
        if "attention" in f:
            got["attention"] = f["attention"][()]
        return got, f["metrics/rank"].attrs["rtol"]


def main():
    rcsim, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    rng = np.random.default_rng(20261123)
    failures, checked, skipped = 0, 0, 0
    thr, tau = 0.99, 0.9
    cases = [
        dict(kind="usa", mask="complete", heads=1, head_mix="sum", beta=2.0, alpha=0.5, project="none",
             norm="sphere", v="file", redraw=1),
        dict(kind="usa", mask="causal", heads=2, head_mix="mean", beta=0.7, alpha=1.0, project="tangent",
             norm="sphere", v="file", redraw=1),
        dict(kind="softmax", mask="complete", heads=3, head_mix="mean", beta=3.0, alpha=0.3, project="tangent",
             norm="sphere", v="tied_qk+", redraw=4),
        dict(kind="softmax", mask="causal", heads=1, head_mix="sum", beta=1.5, alpha=0.0, project="none",
             norm="none", v="tied_qk-", redraw=3),
        dict(kind="softmax", mask="complete", heads=2, head_mix="sum", beta=4.0, alpha=0.2, project="tangent",
             norm="sphere", v="file", redraw=1),
    ]
    for ci, case in enumerate(cases):
        H = case["heads"]
        x0 = rng.standard_normal((T, N, D))
        x0 /= np.linalg.norm(x0, axis=2, keepdims=True)
        wq = rng.standard_normal((L, H, D, D)) / np.sqrt(D)
        wk = rng.standard_normal((L, H, D, D)) / np.sqrt(D)
        wv = rng.standard_normal((L, H, D, D)) / np.sqrt(D)
        args = []
        if case["v"].startswith("tied_qk"):
            sign = 1.0 if case["v"].endswith("+") else -1.0
            wv = sign * np.einsum("lhij,lhkj->lhik", wq, wk)
            args += ["--weights.v=tied_qk", f"--weights.v_sign={int(sign)}"]
        else:
            args += ["--weights.v=file"]
        path = os.path.join(work, f"peer_inputs{ci}.h5")
        with h5py.File(path, "w") as f:
            f["X0"] = x0
            f["W_Q"] = wq[:, 0] if H == 1 else wq
            f["W_K"] = wk[:, 0] if H == 1 else wk
            f["W_V"] = wv[:, 0] if H == 1 else wv
        args += [f"--model.tokens={N}", f"--model.dim={D}", f"--model.layers={L}", f"--model.heads={H}",
                 f"--model.beta={case['beta']!r}", f"--attention.kind={case['kind']}", f"--mask.type={case['mask']}",
                 f"--model.head_mix={case['head_mix']}", f"--residual.alpha={case['alpha']}",
                 f"--residual.project={case['project']}", f"--norm.type={case['norm']}",
                 f"--weights.redraw_every={case['redraw']}", "--init.type=file", f"--init.file={path}",
                 "--weights.q=file", "--weights.k=file", f"--weights.file={path}", f"--run.trials={T}",
                 f"--metrics.pair_threshold={thr}", f"--metrics.cluster_tau={tau}",
                 "--output.attention=true", "--output.measures=pair_density,clusters,dong_residual,dong_residual_rel,effective_rank,attn_rank,ergodicity"]
        got, rtol = run(rcsim, args, os.path.join(work, f"peer_run{ci}.h5"))
        mask = mask_matrix(case["mask"], N)
        for trial in range(T):
            ref = simulate(x0[trial], wq, wk, wv, mask, case["beta"], case["kind"], case["head_mix"], case["alpha"],
                           case["project"], case["norm"], case["redraw"], rtol, thr, tau)
            for key, values in ref.items():
                values = np.array(values, dtype=float)
                g = got[key][trial]
                if key == "attention":  # matrices: compare entry by entry
                    g, values = g.ravel(), values.ravel()
                known = ~np.isnan(values)
                skipped += np.sum(~known)
                rel = np.abs(g - values) / np.maximum(np.abs(values), 1e-300)
                small = np.abs(values) <= 1e-12
                bad = known & ~small & ~(rel <= 1e-9)
                bad |= known & small & ~(np.abs(g - values) <= 1e-11)
                checked += np.sum(known)
                if bad.any():
                    failures += 1
                    print(f"MISMATCH case {ci} {case} trial {trial} {key}: rcsim {g[bad]} numpy {values[bad]}")
        # Some values must be non-trivial for the test to mean something.
        if ci == 0 and not (np.nanmax(got["pair_density"]) > 0 and np.nanmin(got["clusters"]) < N):
            failures += 1
            print("case 0 never clusters: the pair_density / clusters comparison would be vacuous")

    # The same trajectory two ways: model.beta = b against model.d_qk = 1/b^2.
    common = [f"--model.tokens={N}", f"--model.dim={D}", f"--model.layers={L}", "--run.trials=3", "--norm.type=sphere",
              "--residual.alpha=0.5", "--residual.project=tangent", "--model.heads=2", "--model.head_mix=mean"]
    for beta, exact in ((0.5, True), (3.0, False)):
        a, _ = run(rcsim, common + [f"--model.beta={beta!r}"], os.path.join(work, "beta.h5"))
        b, _ = run(rcsim, common + [f"--model.d_qk={1 / beta**2!r}"], os.path.join(work, "dqk.h5"))
        for key in ("mu", "sigma_max", "sigma_min", "attn_entropy"):
            diff = np.max(np.abs(a[key] - b[key]) / np.maximum(np.abs(b[key]), 1e-300))
            checked += a[key].size
            if (exact and diff != 0) or diff > 1e-12:
                failures += 1
                print(f"MISMATCH model.beta={beta} against model.d_qk={1 / beta**2}: {key} relative {diff:.3g}")
    # More pairs of spellings of the same run (weights drawn by rcsim from the same stream).
    base = [f"--model.tokens={N}", f"--model.dim={D}", f"--model.layers={L}", "--run.trials=3", "--norm.type=sphere"]
    pairs = [
        # W_Q = W_K = I as a bilinear form or as two identity matrices (bitwise).
        (["--weights.qk=identity"], ["--weights.q=identity", "--weights.k=identity"], True),
        # one draw for all layers: weights.shared, or a redraw period as long as the run (bitwise).
        (["--weights.shared=true"], [f"--weights.redraw_every={L}"], True),
    ]
    # Averaged heads: model.head_mix = mean, or the sum with every W_V,h divided by H (round-off).
    H = 3
    x0 = rng.standard_normal((3, N, D))
    wq, wk, wv = (rng.standard_normal((L, H, D, D)) / np.sqrt(D) for _ in range(3))
    path = os.path.join(work, "heads.h5")
    with h5py.File(path, "w") as f:
        f["X0"], f["W_Q"], f["W_K"], f["W_V"], f["W_V_over_H"] = x0, wq, wk, wv, wv / H
    with h5py.File(os.path.join(work, "heads_scaled.h5"), "w") as f:
        f["W_Q"], f["W_K"], f["W_V"] = wq, wk, wv / H
    files = ["--init.type=file", f"--init.file={path}", "--weights.q=file", "--weights.k=file", "--weights.v=file",
             f"--model.heads={H}", "--residual.alpha=0.7"]
    pairs.append((files + [f"--weights.file={path}", "--model.head_mix=mean"],
                  files + [f"--weights.file={os.path.join(work, 'heads_scaled.h5')}"], False))
    for one, other, exact in pairs:
        a, _ = run(rcsim, base + one, os.path.join(work, "one.h5"))
        b, _ = run(rcsim, base + other, os.path.join(work, "other.h5"))
        for key in ("mu", "sigma_max", "sigma_min", "attn_entropy"):
            diff = np.max(np.abs(a[key] - b[key]) / np.maximum(np.abs(b[key]), 1e-300))
            checked += a[key].size
            if (exact and diff != 0) or diff > 1e-12:
                failures += 1
                print(f"MISMATCH {one} against {other}: {key} relative {diff:.3g}")
    print(f"{checked} values compared ({skipped} skipped at a threshold), {failures} mismatching rows")
    print(f"{0 if failures else 1} passed, {1 if failures else 0} failed")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
