#!/usr/bin/env python3
"""rcsim's platforms side by side (docs/dev/platforms.md): the seconds per step of one workload on each
run.platform given, in one run on one machine, with the peak memory and the largest token difference to the
first platform.

Workloads (whole `rcsim run` processes):
  flow     the particle flow of docs/science/particles.md: Q = K = V = I shared, beta = 1, RK4 dt = 0.1, tangent
           projection, sphere, one trial (analysis/particles_common.py's flow_args)
  forward  the forward benchmark: Gaussian weights drawn per layer, post-LayerNorm, complete mask, --trials
           trials, the measures at layers 0 and L only
Each platform runs L1 and L2 steps (layers), --reps times interleaved, the best wall of each counts (the peak
resident set from os.wait4); seconds per step = (wall(L2) - wall(L1)) / (L2 - L1), which removes start-up, the
opencl platform's program build (pocl: 1-4 s) and file writing. `uptime` before and after is printed: other jobs on the
machine slow every platform. Needs Python 3.9 alone (no NumPy); with h5py it also prints the largest token
difference.

usage: platforms.py [--rcsim PATH] [--workload flow|forward] [--tokens N] [--dim D] [--trials T]
                    [--steps L1,L2] [--platforms reference,cpu,opencl] [--threads T] [--precision float64|float32]
                    [--reps R] [--data DIR]
"""
import argparse
import os
import shutil
import subprocess
import sys

import time



def flow_args(n, d, steps):
    """analysis/particles_common.py's flow_args(n, d, 1.0, 0.1, steps), written out: this script needs no NumPy."""
    return [f"--model.tokens={n}", f"--model.dim={d}", f"--model.layers={steps}",
            "--weights.q=identity", "--weights.k=identity", "--weights.v=identity", "--weights.shared=true",
            "--model.beta=1.0", "--attention.kind=softmax", "--mask.type=complete",
            "--norm.type=sphere", "--residual.alpha=0.1", "--residual.project=tangent", "--dynamics.integrator=rk4"]


def uptime():
    """`uptime`'s line, or the load averages from /proc/loadavg where uptime is not installed (a bare GPU image)."""
    if shutil.which("uptime"):
        return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    try:
        with open("/proc/loadavg") as f:
            return "load average " + " ".join(f.read().split()[:3])
    except OSError:
        return "n/a"


def timed(cmd):
    """Run cmd: (wall seconds, its max RSS in MiB from os.wait4); exits with its message if it fails."""
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    err = p.stderr.read()
    _, status, usage = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({os.waitstatus_to_exitcode(status)}):\n{err[-2000:]}")
    return wall, usage.ru_maxrss / 1024.0


def final_tokens(path):
    """The final tokens of a run file, or None without h5py (a GPU machine's bare Python)."""
    try:
        import h5py
    except ImportError:
        return None
    with h5py.File(path, "r") as f:
        return f["tokens"][...]


def workload_args(a, steps):
    if a.workload == "flow":
        return [*flow_args(a.tokens, a.dim, steps), "--run.trials=1", "--init.type=sphere"]
    return [f"--model.tokens={a.tokens}", f"--model.dim={a.dim}", f"--model.layers={steps}",
            f"--run.trials={a.trials}", "--norm.type=layernorm", "--norm.position=post", "--mask.type=complete"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rcsim", default="build/sim/rcsim")
    ap.add_argument("--workload", choices=("flow", "forward"), default="flow")
    ap.add_argument("--tokens", type=int, default=10000)
    ap.add_argument("--dim", type=int, default=3)
    ap.add_argument("--trials", type=int, default=1, help="trials of the forward workload")
    ap.add_argument("--steps", default="1,3", help="L1,L2: the two run lengths (steps or layers)")
    ap.add_argument("--platforms", default="cpu,opencl", help="comma list of run.platform values; the first is "
                    "the one the others' tokens are compared with")
    ap.add_argument("--threads", type=int, default=0, help="run.threads (0 = all cores)")
    ap.add_argument("--precision", choices=("float64", "float32"), default="float64")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--data", default="data/bench_platforms")
    a = ap.parse_args()
    l1, l2 = (int(x) for x in a.steps.split(","))
    if not 0 < l1 < l2:
        ap.error(f"--steps {a.steps}: want L1,L2 with 0 < L1 < L2")
    platforms = a.platforms.split(",")
    os.makedirs(a.data, exist_ok=True)
    print(f"# uptime before: {uptime()}")
    if "opencl" in platforms and shutil.which("clinfo"):
        devices = subprocess.run(["clinfo", "-l"], capture_output=True, text=True).stdout.strip()
        print("# OpenCL devices (clinfo -l; rcsim takes the first GPU, else the first device, or "
              f"RCSIM_OPENCL_DEVICE={os.environ.get('RCSIM_OPENCL_DEVICE', 'unset')}):\n#   "
              + devices.replace("\n", "\n#   "))
    walls = {}  # (platform, L) -> list of (wall, rss)
    for _ in range(a.reps):
        for p in platforms:
            for L in (l1, l2):
                out = os.path.join(a.data, f"{a.workload}_{p}_L{L}.h5")
                cmd = [a.rcsim, "run", "--quiet", "--force", f"--output.file={out}", f"--run.threads={a.threads}",
                       f"--run.platform={p}", f"--run.precision={a.precision}", "--run.seed=1",
                       *workload_args(a, L), "--output.tokens=final", f"--output.schedule=list:0 {L}"]
                walls.setdefault((p, L), []).append(timed(cmd))
    print(f"# uptime after:  {uptime()}")
    print(f"# {a.workload}: N = {a.tokens}, d = {a.dim}, trials {a.trials if a.workload == 'forward' else 1}, "
          f"{a.precision}, run.threads = {a.threads}, steps {l1} and {l2}, best of {a.reps}")
    first = final_tokens(os.path.join(a.data, f"{a.workload}_{platforms[0]}_L{l2}.h5"))
    print("platform seconds_per_step wall_L1_s wall_L2_s max_rss_MiB max_abs_token_diff_to_" + platforms[0])
    for p in platforms:
        best = {L: min(w for w, _ in walls[(p, L)]) for L in (l1, l2)}
        rss = max(r for _, r in walls[(p, l2)])
        tokens = final_tokens(os.path.join(a.data, f"{a.workload}_{p}_L{l2}.h5"))
        diff = "n/a" if first is None else f"{float(abs(tokens - first).max()):.2e}"
        print(f"{p} {(best[l2] - best[l1]) / (l2 - l1):.4g} {best[l1]:.3f} {best[l2]:.3f} {rss:.0f} {diff}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
