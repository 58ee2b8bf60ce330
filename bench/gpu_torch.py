#!/usr/bin/env python3
"""The PyTorch side of bench/gpu_figures.sh (docs/dev/platforms.md, "GPU figures"): the same two workloads
as rcsim's, written independently in torch, timed on CUDA (float64 and float32) when a GPU is present and on
the CPU (float64, all threads) otherwise or besides.

  flow     one RK4 step of the particle flow dx_i/dt = P_{x_i}(sum_j softmax_j(beta <x_i, x_j>) x_j) on the
           sphere (Q = K = V = I, beta = 1, dt = 0.1, then x / |x|), n tokens in d = 3, the attention in
           blocks of rows (no n x n matrix: n = 10^5 would be 80 GB in float64); seconds per step, best of 3
           after one warm-up step
  forward  8 layers of post-LayerNorm softmax attention, complete mask, fresh Gaussian W_Q, W_K, W_V
           (std 1/sqrt(d)) per layer and trial drawn on the device, N x d tokens, all trials as one batch,
           no measures; seconds for the 8 layers, best of 3 after one warm-up

Prints one line per figure: "torch WORKLOAD SIZE DEVICE DTYPE SECONDS". Stops starting new figures once
--budget seconds have passed (the caller's hard limit is `timeout`).

usage: gpu_torch.py [--small] [--budget SECONDS]
"""
import argparse
import math
import sys
import time

import torch


def sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize()


def field(x, beta, block):
    """P_x(softmax(beta x x^T) x), rows in blocks of `block`."""
    out = torch.empty_like(x)
    for i in range(0, x.shape[0], block):
        xi = x[i:i + block]
        a = torch.softmax(beta * (xi @ x.T), dim=1)
        y = a @ x
        out[i:i + block] = y - (y * xi).sum(dim=1, keepdim=True) * xi  # |x_i| = 1
    return out


def rk4_step(x, beta, dt, block):
    k1 = field(x, beta, block)
    k2 = field(x + 0.5 * dt * k1, beta, block)
    k3 = field(x + 0.5 * dt * k2, beta, block)
    k4 = field(x + dt * k3, beta, block)
    x = x + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
    return x / x.norm(dim=1, keepdim=True)


def forward(x, layers):
    trials, n, d = x.shape
    s = 1.0 / math.sqrt(d)
    for _ in range(layers):
        wq, wk, wv = (torch.randn(trials, d, d, dtype=x.dtype, device=x.device) * s for _ in range(3))
        logits = (x @ wq) @ (x @ wk).transpose(1, 2) / math.sqrt(d)
        y = torch.softmax(logits, dim=2) @ (x @ wv)
        x = torch.nn.functional.layer_norm(y, (d,), eps=1e-5)
    return x


def best_of(fn, dev, reps=3):
    fn()
    sync(dev)
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        sync(dev)
        best = min(best, time.perf_counter() - t0)
    return best


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--small", action="store_true", help="small sizes (a CPU check of the script)")
    ap.add_argument("--budget", type=float, default=120.0, help="seconds after which no new figure starts")
    a = ap.parse_args()
    start = time.perf_counter()
    targets = []
    if torch.cuda.is_available():
        dev = torch.device("cuda")
        print(f"# torch {torch.__version__}, CUDA {torch.version.cuda}, device {torch.cuda.get_device_name(0)}")
        targets += [(dev, torch.float64), (dev, torch.float32)]
    print(f"# torch {torch.__version__} on the CPU: {torch.get_num_threads()} threads")
    targets.append((torch.device("cpu"), torch.float64))
    flows = [1000, 2000] if a.small else [10_000, 100_000]
    fwd = (32, 8, 64) if a.small else (128, 64, 1024)
    for dev, dtype in targets:
        name = str(dtype).replace("torch.", "")
        for n in flows:
            if dev.type == "cpu" and n > 10_000:
                continue  # about 100 x the n = 10^4 step: minutes per step on the CPU
            if time.perf_counter() - start > a.budget:
                print(f"# torch flow n={n} {dev.type} {name}: skipped (budget spent)")
                continue
            gen = torch.Generator(device=dev).manual_seed(1)
            x = torch.randn(n, 3, dtype=dtype, device=dev, generator=gen)
            x = x / x.norm(dim=1, keepdim=True)
            block = max(1, min(n, (1 << 28) // (n * 8)))  # a block of logits about 256 MB
            sec = best_of(lambda: rk4_step(x, 1.0, 0.1, block), dev)
            print(f"torch flow n={n},d=3 {dev.type} {name} {sec:.4g} s/step")
        if time.perf_counter() - start > a.budget:
            print(f"# torch forward {dev.type} {name}: skipped (budget spent)")
            continue
        n, d, trials = fwd
        x = torch.randn(trials, n, d, dtype=dtype, device=dev)
        sec = best_of(lambda: forward(x, 8), dev)
        print(f"torch forward N={n},d={d},trials={trials},layers=8 {dev.type} {name} {sec:.4g} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
