#!/usr/bin/env python3
"""rcsim against an independent PyTorch reference of the same workload (see docs/dev/performance.md).

Starts the rcsim worker (build/rcsim_bench) and PyTorch workers (bench/torch_reference.py), one
per thread count (1 and 2) and allocator (glibc; Debian's jemalloc preloaded when installed),
each with its BLAS pool fixed to that thread count (OPENBLAS_NUM_THREADS, OMP_NUM_THREADS), and
one with 2 torch threads over a 1-thread OpenBLAS (plain/2t-blas1).
Prints the BLAS/LAPACK libraries each program actually has loaded and warns when the reference
does not run on OpenBLAS. Then, for every point (N, d, mask, measures on/off, trials, layers,
schedule), times every contestant once per repetition, interleaved (the order rotates between
repetitions), and reports medians; the reference's best median is the one compared. Before
every timed call the benchmark waits --settle seconds (default 0.3): without it a contestant
timed right after another worker's call shared the cores with what that worker left running
(OpenMP and OpenBLAS threads busy-wait for a while after a call before they sleep), and rcsim's
samples of one point split into 8 ms and 15 ms groups (run D in docs/dev/performance-log.md).

Points: the (N, d) grid with about the same flops per run; researchers' trial counts (64 to 1024
trials at N = 128, d = 64); a deep run (10^4 layers, measures on a log schedule); the gradient
workload (group "grad", docs/science/gradients.md): the readout loss's gradient with respect to
X(0) and every layer's W_Q, W_K, W_V, rcsim's forward + reverse pass against PyTorch autograd on
the same workload, with rcsim's backward time over its own forward time.

The machine's float64 GEMM peak is measured between points in the same run, both ways: Eigen
as rcsim is built (two threads, each its own 1024^3 product) and the reference's BLAS (one
2048^3 torch.mm on two threads); "% of peak" divides by the larger median.

--smoke runs every point once through the rcsim worker only, at a reduced size (no timing): ctest's
bench_quick_points runs it on the --quick set, so a crash of the worker fails a test.

usage: run_bench.py [--quick] [--smoke] [--reps R] [--bench PATH] [--threads T] [--json FILE] [--shapes NxD,...]
                    [--settle SECONDS]
"""
import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
JEMALLOC = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"


class Worker:
    def __init__(self, argv, env=None):
        self.p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)

    def text(self, line):
        self.p.stdin.write(line + "\n")
        self.p.stdin.flush()
        answer = self.p.stdout.readline().split()
        if not answer or answer[0] == "error":
            raise RuntimeError(f"worker {self.p.args} failed on '{line}': {' '.join(answer)}")
        return answer[1:]

    def ask(self, line):
        return [float(v) for v in self.text(line)]

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
    return model, cores


def load():
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f} (1, 5, 15 min)"


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


def points(quick, base_layers):
    """Every timed point: dicts with N, d, mask, measures, trials, layers, schedule, group."""
    out = []
    target = 0.5e9 if quick else 0.8e9
    shapes = [(128, 64), (512, 128)] if quick else [(n, d) for n in (32, 128, 512) for d in (16, 64, 128)]
    for n, d in shapes:
        trials, layers = sizing(n, d, target, base_layers)
        for mask in ("complete", "causal"):
            for meas in (1, 0):
                out.append(dict(group="grid", N=n, d=d, mask=mask, measures=meas, trials=trials, layers=layers,
                                schedule="all"))
    for trials in ((64, 1024) if quick else (64, 256, 1024)):
        out.append(dict(group="trials", N=128, d=64, mask="complete", measures=1, trials=trials, layers=4,
                        schedule="all"))
    deep = [(32, 16, 16)] if quick else [(32, 16, 64), (128, 64, 4)]
    for n, d, trials in deep:
        out.append(dict(group="deep", N=n, d=d, mask="causal", measures=1, trials=trials, layers=10000,
                        schedule="log:10"))
    for n, d in shapes:  # 64 trials (the reference batches them) of base_layers blocks
        for mask in ("complete", "causal"):
            out.append(dict(group="grad", N=n, d=d, mask=mask, measures=0, trials=64, layers=base_layers,
                            schedule="all"))
    return out


def reduced(p):
    """Point p at a reduced size for --smoke: the same N, d, mask, measures, schedule and group (so the
    same platform and code path: the cpu platform from N = 512), at most 2 trials and 3 layers; the
    deep point 30 layers (its log schedule still skips layers)."""
    layers = 30 if p["group"] == "deep" else min(p["layers"], 3)
    return dict(p, trials=min(p["trials"], 2), layers=layers)


def smoke(bench, grid, threads):
    """Every point of the grid through the rcsim worker once, reduced (no reference, no timing):
    each answer must come back and be finite. Returns the number of failures."""
    import math
    rc = Worker([bench])
    failures = 0
    commands = ["info", "peak 64 1", "estimate 32 16 causal 2 3 2"]
    for p in map(reduced, grid):
        if p["schedule"] != "all":
            commands.append(f"schedule {p['schedule']} {p['layers']}")
        if p["group"] == "grad":
            commands.append(f"grad {p['N']} {p['d']} {p['mask']} {p['trials']} {p['layers']} {threads}")
        else:
            commands.append(f"run {p['N']} {p['d']} {p['mask']} {p['measures']} {p['trials']} {p['layers']} {threads} "
                            f"{p['schedule']}")
    for line in commands:
        try:
            answer = rc.text(line)
            numbers = [float(v) for v in answer] if line.split()[0] in ("peak", "estimate", "run", "grad") else []
            if not all(math.isfinite(v) for v in numbers):
                raise RuntimeError(f"non-finite answer {answer}")
            print(f"[ok] {line}", flush=True)
        except (RuntimeError, ValueError, BrokenPipeError) as e:
            failures += 1
            try:  # EOF: the worker is exiting (crashed); an "error" answer: it lives on
                code = rc.p.wait(timeout=2)
            except subprocess.TimeoutExpired:
                code = None
            print(f"[FAIL] {line}: {e}" + (f" (worker exited {code})" if code is not None else ""), flush=True)
            if code is not None:  # crashed: a fresh worker for the remaining commands
                rc = Worker([bench])
    rc.close()
    print(f"smoke: {len(commands)} commands, {failures} failed")
    return failures


def variant_name(variant):
    """plain/1t, jemalloc/2t (torch and OpenBLAS both at that count), plain/2t-blas1."""
    alloc, threads, blas = variant
    return f"{alloc}/{threads}t" + ("" if blas == threads else f"-blas{blas}")


def write_json(path, data):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(data, f, indent=1)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true",
                    help="reduced set: (N, d) = (128, 64) and (512, 128), 64 and 1024 trials, one deep run")
    ap.add_argument("--reps", type=int, default=3, help="interleaved repetitions per contestant (default 3)")
    ap.add_argument("--bench", default=os.path.join(HERE, "..", "build", "rcsim_bench"))
    ap.add_argument("--threads", type=int, default=2, help="rcsim worker threads (default 2)")
    ap.add_argument("--layers", type=int, default=8, help="layers per timed grid run (small problems: up to 4x)")
    ap.add_argument("--json", default=None, help="also write every timing to this file")
    ap.add_argument("--settle", type=float, default=0.3,
                    help="seconds to wait before every timed call, so that no worker's spinning threads "
                         "remain from the previous call (default 0.3)")
    ap.add_argument("--smoke", action="store_true",
                    help="no timing and no reference: every point once through the rcsim worker at a reduced "
                         "size (at most 2 trials, 3 layers), checking that each answers (ctest bench_quick_points)")
    ap.add_argument("--shapes", default=None,
                    help="only the points of these shapes, e.g. 128x64 or 128x64,512x128 (default: all)")
    args = ap.parse_args()
    reps = args.reps
    grid = points(args.quick, args.layers)
    if args.shapes:
        try:
            wanted = {tuple(int(v) for v in s.lower().split("x")) for s in args.shapes.split(",")}
        except ValueError:
            ap.error(f"--shapes '{args.shapes}': expected NxD[,NxD...], e.g. 128x64")
        grid = [p for p in grid if (p["N"], p["d"]) in wanted]
        if not grid:
            ap.error(f"--shapes '{args.shapes}': no point of the {'quick' if args.quick else 'full'} set has these shapes")

    if not os.access(args.bench, os.X_OK):  # not in the default target; bench/run_bench.sh builds it
        sys.exit(f"run_bench.py: no benchmark worker {args.bench}: build it with `cmake --build build --target rcsim_bench`")
    if args.smoke:
        sys.exit(1 if smoke(args.bench, grid, args.threads) else 0)
    rc = Worker([args.bench])
    allocators = {"plain": {}}
    if os.path.exists(JEMALLOC):
        allocators["jemalloc"] = {"LD_PRELOAD": JEMALLOC}
    # Reference variants: (allocator, torch threads, OpenBLAS threads). Both pools at 1 or at 2
    # threads, and torch's 2 OpenMP threads over a 1-thread OpenBLAS (no nested 2 x 2 threads).
    torch_workers = {}
    variants = [(alloc, th, th) for alloc in allocators for th in (1, 2)] + [("plain", 2, 1)]
    for alloc, th, blas in variants:
        env = dict(os.environ, OPENBLAS_NUM_THREADS=str(blas), OMP_NUM_THREADS=str(th), **allocators[alloc])
        torch_workers[(alloc, th, blas)] = Worker([sys.executable, os.path.join(HERE, "torch_reference.py")], env)
    model, cores = machine()
    import torch  # only for its version and build configuration

    rc_simd, rc_libs = rc.text("info")
    torch_libs = torch_workers[("plain", 1, 1)].text("info")[0]
    blas_lines = re.findall(r"\b(?:BLAS_INFO|LAPACK_INFO|USE_OPENMP)=[^,\s]*", torch.__config__.show())
    start_load = load()
    print(f"machine: {model}, {cores} cores, {platform.machine()}")
    print(f"load average at start: {start_load}")
    print(f"rcsim: {args.bench}, {args.threads} worker threads (one trial per thread); Eigen instruction sets: "
          f"{rc_simd.replace('+', ' ')}; LAPACK loaded: {rc_libs}")
    print(f"reference: PyTorch {torch.__version__} float64 CPU, batched over trials; variants "
          + ", ".join(variant_name(v) for v in torch_workers))
    print(f"reference BLAS/LAPACK loaded: {torch_libs}")
    print(f"  torch.__config__.show(): {', '.join(blas_lines)} (generic: whatever libblas.so.3 is)")
    if "openblas" not in torch_libs.lower() and "mkl" not in torch_libs.lower():
        print("WARNING: the reference does not run on an optimised BLAS (OpenBLAS or MKL): its timings and "
              "the ratios are NOT fair (apt-get install libopenblas0-pthread)")
    print(f"points: {len(grid)}, {reps} interleaved repetitions; medians; {args.settle:g} s pause before each timed call")
    sys.stdout.flush()

    schedules = {}
    for p in grid:
        if p["schedule"] != "all":
            layers = [int(t) for t in rc.text(f"schedule {p['schedule']} {p['layers']}")]
            schedules[(p["schedule"], p["layers"])] = layers

    times = {}  # (point index, contestant) -> list of seconds
    phases = {}  # grad points: (point index, contestant) -> list of [forward, backward] seconds
    peaks = {"eigen": [], "blas": []}

    def measure_peaks():
        peaks["eigen"].append(rc.ask("peak 1024 2")[0])
        peaks["blas"].append(torch_workers[("plain", 2, 2)].ask("peak 2048 2")[0])

    # Warm-up: load libraries, fault in pages.
    rc.ask("run 32 16 complete 1 4 2 1")
    for w in torch_workers.values():
        w.ask("run 32 16 complete 1 4 2 1")
    t_start = time.time()
    for rep in range(reps):
        for pi, p in enumerate(grid):
            if pi % 6 == 0:
                measure_peaks()
            base = f"run {p['N']} {p['d']} {p['mask']} {p['measures']} {p['trials']} {p['layers']}"
            if p["group"] == "grad":
                base = f"grad {p['N']} {p['d']} {p['mask']} {p['trials']} {p['layers']}"
            sched = schedules.get((p["schedule"], p["layers"]))
            contestants = ["rcsim"] + list(torch_workers)
            k = (rep + pi) % len(contestants)
            for c in contestants[k:] + contestants[:k]:
                time.sleep(args.settle)
                if c == "rcsim":
                    tail = "" if p["group"] == "grad" else f" {p['schedule']}"
                    answer = rc.ask(f"{base} {args.threads}{tail}")
                    key = "rcsim"
                else:
                    tail = f" {','.join(map(str, sched))}" if sched else ""
                    answer = torch_workers[c].ask(f"{base} {c[1]}{tail}")
                    key = variant_name(c)
                times.setdefault((pi, key), []).append(answer[0])
                if len(answer) == 3:  # grad: seconds of the forward and of the backward phase
                    phases.setdefault((pi, key), []).append(answer[1:])
        print(f"  repetition {rep + 1}/{reps} done ({time.time() - t_start:.0f} s)", flush=True)
    measure_peaks()
    peak1_eigen = rc.ask("peak 1024 1")[0]
    peak1_blas = torch_workers[("plain", 1, 1)].ask("peak 2048 1")[0]
    rc.close()
    for w in torch_workers.values():
        w.close()
    peak_eigen = statistics.median(peaks["eigen"])
    peak_blas = statistics.median(peaks["blas"])
    peak = max(peak_eigen, peak_blas)

    print()
    print("float64 GEMM peak of this machine, measured in this run (medians of "
          f"{len(peaks['eigen'])} samples):")
    print(f"  Eigen (rcsim's build), 2 threads x 1024^3: {peak_eigen:.1f} GFLOP/s "
          f"(min {min(peaks['eigen']):.1f}, max {max(peaks['eigen']):.1f}); 1 thread {peak1_eigen:.1f}")
    print(f"  reference BLAS (torch.mm), 2048^3 on 2 threads: {peak_blas:.1f} GFLOP/s "
          f"(min {min(peaks['blas']):.1f}, max {max(peaks['blas']):.1f}); 1 thread {peak1_blas:.1f}")
    print(f"  peak used for %peak: {peak:.1f} GFLOP/s")
    print()
    hdr = (f"{'group':>6} {'N':>4} {'d':>4} {'mask':>8} {'meas':>4} {'trials':>6} {'layers':>6} {'sched':>6} | "
           f"{'rcsim st/s':>11} {'torch st/s':>11} {'best torch':>14} | {'ratio':>6} | "
           f"{'rcsim GF/s':>10} {'%peak':>6} | {'torch GF/s':>10}")
    print(hdr)
    print("-" * len(hdr))
    rows = []
    for pi, p in enumerate(grid):
        steps = p["trials"] * p["layers"]
        rc_med = statistics.median(times[(pi, "rcsim")])
        meds = {k: statistics.median(v) for (q, k), v in times.items() if q == pi and k != "rcsim"}
        best_key = min(meds, key=meds.get)
        best_med = meds[best_key]
        fl = attention_flops(p["N"], p["d"]) * steps
        if p["group"] == "grad":  # nominal: a gradient counted as 3 forward passes
            fl *= 3
            # phase medians; rcsim's backward over its own forward
            med = {k: [statistics.median(x) for x in zip(*v)] for (q, k), v in phases.items() if q == pi}
            p = dict(p, phases=med, rcsim_backward_over_forward=med["rcsim"][1] / med["rcsim"][0])
        row = dict(p, rcsim_steps_per_s=steps / rc_med, torch_steps_per_s=steps / best_med, torch_best=best_key,
                   ratio=best_med / rc_med, rcsim_gflops=fl / rc_med / 1e9, torch_gflops=fl / best_med / 1e9,
                   peak_gflops=peak, rcsim_seconds=times[(pi, "rcsim")], torch_medians=meds)
        rows.append(row)
        print(f"{p['group']:>6} {p['N']:>4} {p['d']:>4} {p['mask']:>8} {'on' if p['measures'] else 'off':>4} "
              f"{p['trials']:>6} {p['layers']:>6} {p['schedule']:>6} | {row['rcsim_steps_per_s']:>11.1f} "
              f"{row['torch_steps_per_s']:>11.1f} {best_key:>14} | {row['ratio']:>6.2f} | "
              f"{row['rcsim_gflops']:>10.2f} {100 * row['rcsim_gflops'] / peak:>5.0f}% | {row['torch_gflops']:>10.2f}")
    grads = [r for r in rows if r["group"] == "grad"]
    if grads:
        print()
        print("gradient workload: forward / backward phase medians (seconds; rcsim's summed over its threads)")
        for r in grads:
            best = r["torch_best"]
            (rf, rb), (tf, tb) = r["phases"]["rcsim"], r["phases"][best]
            print(f"  N={r['N']} d={r['d']} {r['mask']:>8}: rcsim {rf:.4f} + {rb:.4f} (backward = "
                  f"{r['rcsim_backward_over_forward']:.2f} x forward); torch {best} {tf:.4f} + {tb:.4f}")
    print()
    # Targets of the benchmark (docs/dev/performance.md).
    print("targets:")
    for r in rows:
        if r["group"] == "grid" and r["measures"] and r["N"] == 128 and r["d"] == 64:
            print(f"  measures on, N=128 d=64 {r['mask']}: ratio {r['ratio']:.2f} (>= 3): "
                  f"{'MET' if r['ratio'] >= 3 else 'MISSED'}")
    for r in grads:
        if r["N"] == 128 and r["d"] == 64:
            print(f"  gradient, N=128 d=64 {r['mask']}: ratio {r['ratio']:.2f} (>= 2): "
                  f"{'MET' if r['ratio'] >= 2 else 'MISSED'}; rcsim's backward {r['rcsim_backward_over_forward']:.2f} "
                  f"x its forward (<= 3): {'MET' if r['rcsim_backward_over_forward'] <= 3 else 'MISSED'}")
    rows_fwd = [r for r in rows if r["group"] != "grad"]
    worst = min(rows_fwd, key=lambda r: r["ratio"])  # of the points run (--shapes may leave some out)
    print(f"  every point, measures on or off: smallest ratio {worst['ratio']:.2f} at {worst['group']} "
          f"N={worst['N']} d={worst['d']} {worst['mask']} measures {'on' if worst['measures'] else 'off'} "
          f"(>= 2): {'MET' if worst['ratio'] >= 2 else 'MISSED'}")
    for r in rows_fwd:
        if r["group"] == "grid" and not r["measures"] and r["N"] == 512 and r["d"] == 128 and r["mask"] == "complete":
            f = r["rcsim_gflops"] / peak
            print(f"  measures off, N=512 d=128 complete: {r['rcsim_gflops']:.1f} GFLOP/s = {100 * f:.0f}% of the "
                  f"machine's peak {peak:.1f} (>= 50%): {'MET' if f >= 0.5 else 'MISSED'}")
    end_load = load()
    print(f"load average at end: {end_load}; wall time {time.time() - t_start:.0f} s")
    if args.json:
        write_json(args.json, dict(machine=model, cores=cores, load_start=start_load, load_end=end_load,
                                   rcsim_simd=rc_simd, rcsim_libs=rc_libs, torch_libs=torch_libs,
                                   torch_blas=blas_lines, peak_gflops=peak, peak_eigen=peaks["eigen"],
                                   peak_blas=peaks["blas"], peak1_eigen=peak1_eigen, peak1_blas=peak1_blas,
                                   reps=reps, settle=args.settle, rows=rows))


if __name__ == "__main__":
    main()
