#!/usr/bin/env python3
"""Independent PyTorch (CPU, float64) implementation of the benchmark workload, batched over trials.

Worker for bench/run_bench.py: reads lines "run N D MASK MEASURES TRIALS LAYERS THREADS" on stdin
and answers "run SECONDS" (or "error ...") on stdout. The workload is rcsim's (SCIENCE.md
sections 1 and 4) for one head, d_k = d, d_QK = d, LayerNorm (eps 1e-5, no affine), Gaussian X(0)
and fresh Gaussian weights (std 1/sqrt(d)) at every layer, all TRIALS trials as one batch:
  S = (X W_Q)(X W_K)^T / sqrt(d), masked softmax, attention diagnostics (min weight, entropy),
  Y = A X W_V, X <- LayerNorm(Y), a non-finite check;
and with MEASURES = 1, at every layer 0..L: singular values (LAPACK via torch.linalg.svdvals),
||X||_F, mu = ||X - 1 gamma||_F, numerical rank, rank-one residual, stable rank, mean |cos|,
sigma at the largest rank, all kept in a result tensor as rcsim keeps them.
"""
import math
import sys
import time

import torch
import torch.nn.functional as F

torch.set_grad_enabled(False)
F64 = torch.float64


def measures(x, rtol, max_rank, out):
    n = x.shape[1]
    s = torch.linalg.svdvals(x)
    fro = torch.linalg.norm(x, dim=(1, 2))
    mu = torch.linalg.norm(x - x.mean(dim=1, keepdim=True), dim=(1, 2))
    smax = s[:, 0]
    u = x / torch.linalg.norm(x, dim=2, keepdim=True)
    g = (u @ u.transpose(1, 2)).abs_()
    cos = (g.sum(dim=(1, 2)) - g.diagonal(dim1=1, dim2=2).sum(dim=1)) / (n * (n - 1))
    out[:, 0] = mu
    out[:, 1] = mu / fro
    out[:, 2] = fro
    out[:, 3] = s[:, -1]
    out[:, 4] = smax
    out[:, 5] = (s > rtol * smax[:, None]).sum(dim=1)
    out[:, 6] = torch.linalg.norm(s[:, 1:], dim=1) / fro
    out[:, 7] = fro * fro / (smax * smax)
    out[:, 8] = cos
    out[:, 9] = s[:, max_rank - 1]


def run(n, d, mask, with_measures, trials, layers, seed=20240527):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(trials, n, d, dtype=F64, generator=gen)
    blocked = None if mask == "complete" else ~torch.ones(n, n, dtype=torch.bool).tril()
    std = 1.0 / math.sqrt(d)
    scale = 1.0 / math.sqrt(d)
    rtol = max(n, d) * torch.finfo(F64).eps
    token = torch.full((trials, layers + 1, 10), math.nan, dtype=F64)
    attn = torch.full((trials, layers, 2), math.nan, dtype=F64)
    for t in range(layers + 1):
        if with_measures:
            # After LayerNorm rows are centred: the largest rank is min(N, d - 1).
            measures(x, rtol, min(n, d) if t == 0 else min(n, d - 1), token[:, t])
        if t == layers:
            break
        wq = torch.randn(trials, d, d, dtype=F64, generator=gen).mul_(std)
        wk = torch.randn(trials, d, d, dtype=F64, generator=gen).mul_(std)
        wv = torch.randn(trials, d, d, dtype=F64, generator=gen).mul_(std)
        s = torch.bmm(torch.bmm(x, wq), torch.bmm(x, wk).transpose(1, 2)).mul_(scale)
        if blocked is not None:
            s.masked_fill_(blocked, -math.inf)
        a = torch.softmax(s, dim=-1)
        if blocked is None:
            attn[:, t, 0] = a.amin(dim=(1, 2))
        else:
            attn[:, t, 0] = a.masked_fill(blocked, math.inf).amin(dim=(1, 2))
        attn[:, t, 1] = -torch.special.xlogy(a, a).sum(dim=2).mean(dim=1)
        y = torch.bmm(a, torch.bmm(x, wv))
        x = F.layer_norm(y, (d,), eps=1e-5)
        if not bool(torch.isfinite(x).all()):
            break
    return token, attn


def main():
    for line in sys.stdin:
        f = line.split()
        if not f:
            continue
        if f[0] == "quit":
            break
        if f[0] != "run":
            print("error unknown command", f[0], flush=True)
            continue
        n, d, mask, meas, trials, layers, threads = int(f[1]), int(f[2]), f[3], int(f[4]), int(f[5]), int(f[6]), int(f[7])
        torch.set_num_threads(threads)
        t0 = time.perf_counter()
        token, _ = run(n, d, mask, meas == 1, trials, layers)
        secs = time.perf_counter() - t0
        if meas == 1 and not bool(torch.isfinite(token[:, :, 0]).all()):
            print("error non-finite measures", flush=True)
            continue
        print(f"run {secs}", flush=True)


if __name__ == "__main__":
    main()
