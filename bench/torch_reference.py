#!/usr/bin/env python3
"""Independent PyTorch (CPU, float64) implementation of the benchmark workload, batched over trials.

Worker for bench/run_bench.py: reads lines on stdin and answers one line each on stdout:
  run N D MASK MEASURES TRIALS LAYERS THREADS [LAYER,LAYER,...]  -> "run SECONDS" (or "error ...")
  grad N D MASK TRIALS LAYERS THREADS -> "grad SECONDS FORWARD BACKWARD": the gradient of the readout
                         loss L = sum over trials of 1^T X(L) R (R Gaussian, d x 1, per trial) with
                         respect to X(0) and every layer's W_Q, W_K, W_V by autograd: the forward pass
                         recording the graph (no attention diagnostics), then loss.backward()
  peak SIZE THREADS   -> "peak GFLOPS SECONDS": one SIZE x SIZE float64 product (torch.mm, i.e.
                         the BLAS's dgemm), best of 3
  info                -> "info LIBS": the BLAS/LAPACK libraries mapped into the process after a
                         product and an SVD (from /proc/self/maps), comma-separated
  quit
The thread count is also fixed from outside (OPENBLAS_NUM_THREADS, OMP_NUM_THREADS) by
bench/run_bench.py, since the BLAS keeps its own pool. The workload is rcsim's (docs/science/model-spec.md
sections 1 and 4) for one head, d_k = d, d_QK = d, LayerNorm (eps 1e-5, no affine), Gaussian X(0)
and fresh Gaussian weights (std 1/sqrt(d)) at every layer, all TRIALS trials as one batch:
  S = (X W_Q)(X W_K)^T / sqrt(d), masked softmax, attention diagnostics (min weight, entropy),
  Y = A X W_V, X <- LayerNorm(Y), a non-finite check;
and with MEASURES = 1, at every layer 0..L (or at the listed layers, rcsim's output.schedule): singular values (LAPACK via torch.linalg.svdvals),
||X||_F, mu = ||X - 1 gamma||_F, numerical rank, rank-one residual, stable rank, mean |cos|,
sigma at the largest rank, all kept in a result tensor as rcsim keeps them.
"""
import math
import sys
import time

import torch
import torch.nn.functional as F

torch.set_grad_enabled(False)  # the forward workload; grad() enables autograd for itself
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


def run(n, d, mask, with_measures, trials, layers, schedule=None, seed=20240527):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(trials, n, d, dtype=F64, generator=gen)
    blocked = None if mask == "complete" else ~torch.ones(n, n, dtype=torch.bool).tril()
    std = 1.0 / math.sqrt(d)
    scale = 1.0 / math.sqrt(d)
    rtol = max(n, d) * torch.finfo(F64).eps
    schedule = list(range(layers + 1)) if schedule is None else schedule
    column = {t: k for k, t in enumerate(schedule)}
    token = torch.full((trials, len(schedule), 10), math.nan, dtype=F64)
    attn = torch.full((trials, layers, 2), math.nan, dtype=F64)
    for t in range(layers + 1):
        if with_measures and t in column:
            # After LayerNorm rows are centred: the largest rank is min(N, d - 1).
            measures(x, rtol, min(n, d) if t == 0 else min(n, d - 1), token[:, column[t]])
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


def grad(n, d, mask, trials, layers, seed=20240527):
    """The gradient workload (see the module docstring): (seconds of the forward, of the backward)."""
    gen = torch.Generator().manual_seed(seed)
    blocked = None if mask == "complete" else ~torch.ones(n, n, dtype=torch.bool).tril()
    std = 1.0 / math.sqrt(d)
    scale = 1.0 / math.sqrt(d)
    with torch.enable_grad():
        t0 = time.perf_counter()
        x0 = torch.randn(trials, n, d, dtype=F64, generator=gen).requires_grad_()
        x = x0
        weights = []
        for _ in range(layers):
            wq, wk, wv = (torch.randn(trials, d, d, dtype=F64, generator=gen).mul_(std).requires_grad_()
                          for _ in range(3))
            weights += [wq, wk, wv]
            s = torch.bmm(torch.bmm(x, wq), torch.bmm(x, wk).transpose(1, 2)).mul(scale)
            if blocked is not None:
                s = s.masked_fill(blocked, -math.inf)
            x = F.layer_norm(torch.bmm(torch.softmax(s, dim=-1), torch.bmm(x, wv)), (d,), eps=1e-5)
        readout = torch.randn(trials, d, 1, dtype=F64, generator=gen)
        loss = torch.bmm(x, readout).sum()
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
    if not all(bool(torch.isfinite(w.grad).all()) for w in weights + [x0]):
        raise RuntimeError("non-finite gradient")
    return t1 - t0, t2 - t1


def loaded_libraries():
    found = set()
    with open("/proc/self/maps") as f:
        for line in f:
            path = line[line.find("/"):].strip() if "/" in line else ""
            if "blas" in path or "lapack" in path or "mkl" in path:
                found.add(path)
    return ",".join(sorted(found)) or "none"


def peak(size, threads):
    torch.set_num_threads(threads)
    a = torch.rand(size, size, dtype=F64)
    b = torch.rand(size, size, dtype=F64)
    torch.mm(a, b)  # warm-up
    best = math.inf
    for _ in range(3):
        t0 = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - t0)
    return 2.0 * size**3 / best / 1e9, best


def main():
    for line in sys.stdin:
        f = line.split()
        if not f:
            continue
        if f[0] == "quit":
            break
        if f[0] == "info":
            torch.mm(torch.rand(64, 64, dtype=F64), torch.rand(64, 64, dtype=F64))
            torch.linalg.svdvals(torch.rand(8, 8, dtype=F64))
            print("info", loaded_libraries(), flush=True)
            continue
        if f[0] == "peak":
            g, secs = peak(int(f[1]), int(f[2]))
            print(f"peak {g} {secs}", flush=True)
            continue
        if f[0] == "grad":
            n, d, mask, trials, layers, threads = int(f[1]), int(f[2]), f[3], int(f[4]), int(f[5]), int(f[6])
            torch.set_num_threads(threads)
            t0 = time.perf_counter()
            fwd, bwd = grad(n, d, mask, trials, layers)
            print(f"grad {time.perf_counter() - t0} {fwd} {bwd}", flush=True)
            continue
        if f[0] != "run":
            print("error unknown command", f[0], flush=True)
            continue
        n, d, mask, meas, trials, layers, threads = int(f[1]), int(f[2]), f[3], int(f[4]), int(f[5]), int(f[6]), int(f[7])
        schedule = [int(t) for t in f[8].split(",")] if len(f) > 8 else None
        torch.set_num_threads(threads)
        t0 = time.perf_counter()
        token, _ = run(n, d, mask, meas == 1, trials, layers, schedule)
        secs = time.perf_counter() - t0
        if meas == 1 and not bool(torch.isfinite(token[:, :, 0]).all()):
            print("error non-finite measures", flush=True)
            continue
        print(f"run {secs}", flush=True)


if __name__ == "__main__":
    main()
