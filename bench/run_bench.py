#!/usr/bin/env python3
"""rcsim against an independent PyTorch reference of the same workload (see docs/performance.md).

Starts the rcsim worker (build/rcsim_bench) and PyTorch workers (bench/torch_reference.py; one
plain, one with Debian's jemalloc preloaded when installed), then, for every grid point
(N, d, mask, measures on/off), times every contestant once per repetition, interleaved (the order
rotates between repetitions), and reports medians. The reference is run with 1 and 2 threads,
with and without jemalloc, and its best median is the one compared. The peak of a large float64
matrix product (Eigen, 2 threads, each its own 1024 x 1024 product) is measured between points.

usage: run_bench.py [--quick] [--reps R] [--bench PATH] [--threads T] [--json FILE]
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
JEMALLOC = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"


class Worker:
    def __init__(self, argv, env=None):
        self.p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)

    def ask(self, line):
        self.p.stdin.write(line + "\n")
        self.p.stdin.flush()
        answer = self.p.stdout.readline().split()
        if not answer or answer[0] == "error":
            raise RuntimeError(f"worker {self.p.args} failed on '{line}': {' '.join(answer)}")
        return [float(v) for v in answer[1:]]

    def close(self):
        try:
            self.p.stdin.write("quit\n")
            self.p.stdin.close()
        except BrokenPipeError:
            pass
        self.p.wait()


def machine():
    model, cores = "unknown", os.cpu_count()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return model, cores, load


def attention_flops(n, d):
    # Nominal dense count per layer step: X W_Q, X W_K, X W_V (3 x 2 N d^2), logits and A (XW_V)
    # (2 x 2 N^2 d). The same count is used for both masks and both programs.
    return 6 * n * d * d + 4 * n * n * d


def sizing(n, d, target_flops, layers):
    """(trials, layers) of one timed run: about target_flops; small problems get more layers
    (up to 4x) once the batch reaches 256 trials, so that no run is too short to time."""
    per_step = attention_flops(n, d) + 12 * n * d * d  # measures cost about an SVD more
    steps = target_flops / per_step
    layers = int(max(layers, min(4 * layers, steps / 256)))
    trials = int(round(steps / layers / 2)) * 2
    return max(2, min(256, trials)), layers


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="reduced grid: (N, d) = (128, 64) and (512, 128)")
    ap.add_argument("--reps", type=int, default=None, help="repetitions per contestant (default 3, quick 3)")
    ap.add_argument("--bench", default=os.path.join(HERE, "..", "build", "rcsim_bench"))
    ap.add_argument("--threads", type=int, default=2, help="rcsim worker threads (default 2)")
    ap.add_argument("--layers", type=int, default=8, help="layers per timed run (small problems: up to 4x)")
    ap.add_argument("--json", default=None, help="also write every timing to this file")
    args = ap.parse_args()
    reps = args.reps or 3
    target = 0.5e9 if args.quick else 0.8e9
    if args.quick:
        shapes = [(128, 64), (512, 128)]
    else:
        shapes = [(n, d) for n in (32, 128, 512) for d in (16, 64, 128)]
    grid = [(n, d, m, meas) for (n, d) in shapes for m in ("complete", "causal") for meas in (1, 0)]

    rc = Worker([args.bench])
    torch_workers = {"plain": Worker([sys.executable, os.path.join(HERE, "torch_reference.py")])}
    if os.path.exists(JEMALLOC):
        env = dict(os.environ, LD_PRELOAD=JEMALLOC)
        torch_workers["jemalloc"] = Worker([sys.executable, os.path.join(HERE, "torch_reference.py")], env)
    variants = [(alloc, th) for alloc in torch_workers for th in (1, 2)]
    model, cores, load0 = machine()
    import torch  # only for its version string

    print(f"machine: {model}, {cores} cores, {platform.machine()}, load average {load0:.2f} at start")
    print(f"rcsim: {args.bench}, {args.threads} worker threads (one trial per thread)")
    print(f"reference: PyTorch {torch.__version__} float64 CPU, batched over trials; variants "
          + ", ".join(f"{a}/{t}t" for a, t in variants))
    print(f"grid: {len(grid)} points, {reps} interleaved repetitions, {args.layers} layers per run (up to {4 * args.layers} for small N, d); medians")
    sys.stdout.flush()

    times = {}  # (point, contestant) -> list of seconds
    peaks = []
    # Warm-up: load libraries, fault in pages.
    rc.ask("run 32 16 complete 1 4 2 1")
    for w in torch_workers.values():
        w.ask("run 32 16 complete 1 4 2 1")
    t_start = time.time()
    for rep in range(reps):
        for pi, (n, d, mask, meas) in enumerate(grid):
            if pi % 6 == 0:
                peaks.append(rc.ask("peak 1024 2")[0])
            trials, layers = sizing(n, d, target, args.layers)
            contestants = [("rcsim", None)] + [("torch", v) for v in variants]
            k = (rep + pi) % len(contestants)
            for name, v in contestants[k:] + contestants[:k]:
                if name == "rcsim":
                    secs = rc.ask(f"run {n} {d} {mask} {meas} {trials} {layers} {args.threads}")[0]
                    key = "rcsim"
                else:
                    secs = torch_workers[v[0]].ask(f"run {n} {d} {mask} {meas} {trials} {layers} {v[1]}")[0]
                    key = f"torch {v[0]}/{v[1]}t"
                times.setdefault(((n, d, mask, meas), key), []).append(secs)
        print(f"  repetition {rep + 1}/{reps} done ({time.time() - t_start:.0f} s)", flush=True)
    peaks.append(rc.ask("peak 1024 2")[0])
    peak1 = rc.ask("peak 1024 1")[0]
    rc.close()
    for w in torch_workers.values():
        w.close()
    peak = statistics.median(peaks)

    rows = []
    print()
    print(f"peak float64 matrix product (Eigen, 1024^3, 2 threads): median {peak:.2f} GFLOP/s "
          f"(min {min(peaks):.2f}, max {max(peaks):.2f}, {len(peaks)} samples); 1 thread {peak1:.2f}")
    print()
    hdr = (f"{'N':>4} {'d':>4} {'mask':>8} {'meas':>4} {'steps':>6} | {'rcsim st/s':>11} {'torch st/s':>11} "
           f"{'best torch':>13} | {'ratio':>6} | {'rcsim GF/s':>10} {'%peak':>6} | {'torch GF/s':>10}")
    print(hdr)
    print("-" * len(hdr))
    for (n, d, mask, meas) in grid:
        trials, layers = sizing(n, d, target, args.layers)
        steps = trials * layers
        p = (n, d, mask, meas)
        rc_med = statistics.median(times[(p, "rcsim")])
        best_key, best_med = None, None
        for a, t in variants:
            key = f"torch {a}/{t}t"
            m = statistics.median(times[(p, key)])
            if best_med is None or m < best_med:
                best_key, best_med = key, m
        fl = attention_flops(n, d) * steps
        row = dict(N=n, d=d, mask=mask, measures=bool(meas), trials=trials, layers=layers,
                   rcsim_steps_per_s=steps / rc_med, torch_steps_per_s=steps / best_med,
                   torch_best=best_key[6:], ratio=best_med / rc_med, rcsim_gflops=fl / rc_med / 1e9,
                   torch_gflops=fl / best_med / 1e9, peak_gflops=peak,
                   all_medians={k: statistics.median(v) for (pp, k), v in times.items() if pp == p})
        rows.append(row)
        print(f"{n:>4} {d:>4} {mask:>8} {'on' if meas else 'off':>4} {steps:>6} | {row['rcsim_steps_per_s']:>11.1f} "
              f"{row['torch_steps_per_s']:>11.1f} {row['torch_best']:>13} | {row['ratio']:>6.2f} | "
              f"{row['rcsim_gflops']:>10.2f} {100 * row['rcsim_gflops'] / peak:>5.0f}% | {row['torch_gflops']:>10.2f}")
    print()
    # Targets of issue 3 item 5.
    on = [r for r in rows if r["measures"]]
    t1 = [r for r in on if r["N"] == 128 and r["d"] == 64]
    t3 = [r for r in rows if not r["measures"] and r["N"] == 512 and r["d"] == 128]
    print("targets:")
    for r in t1:
        print(f"  measures on, N=128 d=64 {r['mask']}: ratio {r['ratio']:.2f} (>= 3): {'MET' if r['ratio'] >= 3 else 'NOT MET'}")
    worst = min(on, key=lambda r: r["ratio"])
    print(f"  measures on, every point: smallest ratio {worst['ratio']:.2f} at N={worst['N']} d={worst['d']} "
          f"{worst['mask']} (>= 2): {'MET' if worst['ratio'] >= 2 else 'NOT MET'}")
    for r in t3:
        f = r["rcsim_gflops"] / peak
        print(f"  measures off, N=512 d=128 {r['mask']}: {r['rcsim_gflops']:.2f} GFLOP/s = {100 * f:.0f}% of peak "
              f"(>= 60%): {'MET' if f >= 0.6 else 'NOT MET'}")
    _, _, load1 = machine()
    print(f"load average at end {load1:.2f}; wall time {time.time() - t_start:.0f} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(machine=model, cores=cores, peak_gflops=peak, peak_samples=peaks, peak1=peak1,
                           reps=reps, rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
