#!/usr/bin/env python3
"""Time and peak memory per layer of rcsim for large N (docs/dev/performance-log.md, "Scale").

For every (N, d) runs one fresh build/rcsim_bench process under /usr/bin/time: one trial of L
and one of 2L layers (complete mask, LayerNorm, every measure at every layer) on one thread,
REPS times each after a one-layer warm-up, and reports the seconds per layer (the difference of
the medians over L: the marginal cost of a layer and its measures), the fixed cost of a trial
(allocating and first touching its work storage, initial tokens) and the process's peak
resident memory (which includes the mask and its analysis), next to rcsim's own estimate of the
run (run_memory_bytes: what `rcsim run --dry-run` prints and what a run is refused on).

--precision float32 times run.precision = float32 (the layer in float, the measures in float64).

usage: scale.py [--bench PATH] [--sizes 128,256,...] [--dims 64,128] [--reps R] [--precision float64|float32]
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bench", default=os.path.join(HERE, "..", "build", "rcsim_bench"))
    ap.add_argument("--sizes", default="128,256,512,1024,2048,4096")
    ap.add_argument("--dims", default="64,128")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--mask", default="complete")
    ap.add_argument("--precision", default="float64", choices=["float64", "float32"])
    args = ap.parse_args()
    if not os.access(args.bench, os.X_OK):  # not in the default target
        sys.exit(f"scale.py: no benchmark worker {args.bench}: build it with `cmake --build build --target rcsim_bench`")
    print(f"{'N':>5} {'d':>4} {'layers':>6} | {'s/layer':>9} {'GFLOP/s':>8} {'s/trial':>8} | {'peak RSS MB':>11} {'estimate MB':>11}")
    for d in (int(v) for v in args.dims.split(",")):
        for n in (int(v) for v in args.sizes.split(",")):
            layers = max(2, min(32, int(2e9 / (4 * n * n * d + 6 * n * d * d))))
            tail = f"all {args.precision}"
            lines = [f"estimate {n} {d} {args.mask} 1 {2 * layers} 1", f"run {n} {d} {args.mask} 1 1 1 1 {tail}"]
            for _ in range(args.reps):
                lines += [f"run {n} {d} {args.mask} 1 1 {layers} 1 {tail}",
                          f"run {n} {d} {args.mask} 1 1 {2 * layers} 1 {tail}"]
            with tempfile.NamedTemporaryFile("r", suffix=".time") as tf:
                out = subprocess.run(["/usr/bin/time", "-f", "%M", "-o", tf.name, args.bench],
                                     input="\n".join(lines + ["quit"]) + "\n", capture_output=True, text=True,
                                     check=True).stdout.split("\n")
                rss_kb = int(tf.read().split()[-1])
            estimate = [float(line.split()[1]) for line in out if line.startswith("estimate")][0]
            secs = [float(line.split()[1]) for line in out if line.startswith("run")][1:]
            short, long = statistics.median(secs[0::2]), statistics.median(secs[1::2])
            per_layer = (long - short) / layers
            fixed = short - layers * per_layer
            flops = 6 * n * d * d + 4 * n * n * d
            print(f"{n:>5} {d:>4} {layers:>6} | {per_layer:>9.4f} {flops / per_layer / 1e9:>8.1f} "
                  f"{fixed:>8.3f} | {rss_kb / 1024:>11.0f} {estimate / 2**20:>11.0f}", flush=True)


if __name__ == "__main__":
    main()
