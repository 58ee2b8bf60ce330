#!/usr/bin/env python3
"""Scale of the particle flow (docs/science/particles.md section 13): time per RK4 step and peak memory of rcsim
against a NumPy implementation of the same step (SA, Q = K = V = I, tangent projection, sphere), at n = 10^4
tokens, d = 3 (the tiny mode: n = 500).

rcsim: the whole process is timed for L1 and L2 steps (/usr/bin/time -v: wall time and maximum resident set); the
time per step is (wall(L2) - wall(L1)) / (L2 - L1), which removes start-up and file writing. NumPy: the same RK4
step with the n x n attention computed in row blocks of 1000 (so that it fits in memory), run in a child process
whose maximum resident set is read the same way; its final tokens are compared with rcsim's.

usage: particles_scale.py [--tiny] [--rcsim PATH] --data DIR --out PREFIX
"""
import os
import platform
import re
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from particles_common import flow_args, script_args  # noqa: E402

NUMPY_CHILD = r"""
import sys, time, numpy as np, h5py
x0file, beta, dt, steps, out = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
with h5py.File(x0file, "r") as f:
    X = f["tokens"][0, 0].copy()
B = 1000
def field(X):
    Y = np.empty_like(X)
    for s in range(0, len(X), B):
        S = beta * (X[s:s + B] @ X.T)
        S -= S.max(axis=1, keepdims=True)
        np.exp(S, out=S)
        S /= S.sum(axis=1, keepdims=True)
        Y[s:s + B] = S @ X
    return Y - np.sum(Y * X, axis=1, keepdims=True) / np.sum(X * X, axis=1, keepdims=True) * X
t0 = time.perf_counter()
for _ in range(steps):
    k1 = field(X); k2 = field(X + 0.5 * dt * k1); k3 = field(X + 0.5 * dt * k2); k4 = field(X + dt * k3)
    X = X + dt / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4)
    X /= np.linalg.norm(X, axis=1, keepdims=True)
sec = time.perf_counter() - t0
np.save(out, X)
print(f"numpy_seconds {sec:.6f}")
"""


def timed(cmd, check=True):
    """Run cmd under /usr/bin/time -v: (wall seconds, max RSS in MiB, stdout, exit status)."""
    p = subprocess.run(["/usr/bin/time", "-v", *cmd], check=check, capture_output=True, text=True)
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (\S+)", p.stderr).group(1)
    parts = [float(x) for x in wall.split(":")]
    sec = sum(v * 60 ** (len(parts) - 1 - k) for k, v in enumerate(parts))
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", p.stderr).group(1)) / 1024.0
    return sec, rss, p.stdout, p.returncode


def numpy_blas():
    """The BLAS/LAPACK shared libraries this process has mapped after a NumPy matrix product (/proc/self/maps)."""
    np.ones((64, 64)) @ np.ones((64, 64))
    try:
        with open("/proc/self/maps") as f:
            libs = {ln.split()[-1] for ln in f if re.search(r"blas|lapack|mkl|blis", ln.split()[-1], re.I)}
    except OSError:
        libs = set()
    return ", ".join(sorted(libs)) or "unknown"


def main():
    a = script_args(__doc__)
    # n = 10^4 with the complete mask stops at the file (rcsim writes the mask's centres, all n tokens, as one HDF5
    # attribute, whose limit is 64 KiB: n <= ~8190); the complete-mask comparison runs at n = 8000, and the causal
    # mask (one centre) at n = 10^4 shows the step itself at that size.
    n, d, beta, dt = (500, 3, 1.0, 0.1) if a.tiny else (8000, 3, 1.0, 0.1)
    n_causal = 600 if a.tiny else 10000
    l1, l2 = (5, 105) if a.tiny else (1, 3)
    np_steps = 2 if a.tiny else 1
    os.makedirs(a.data, exist_ok=True)
    res = {}
    for threads in (1, 2):
        for L in (l1, l2):
            path = os.path.join(a.data, f"particles_scale_t{threads}_L{L}.h5")
            cmd = [a.rcsim, "run", "--quiet", "--force", f"--output.file={path}", f"--run.threads={threads}",
                   *flow_args(n, d, beta, dt, L), "--run.trials=1", "--run.seed=1", "--init.type=sphere",
                   f"--output.tokens=0,{np_steps}", f"--output.schedule=list:0 {np_steps} {L}"]
            res[(threads, L)] = timed(cmd)[:2]
    per_step = {th: (res[(th, l2)][0] - res[(th, l1)][0]) / (l2 - l1) for th in (1, 2)}
    causal = {}
    for L in (l1, l2):
        path = os.path.join(a.data, f"particles_scale_causal_L{L}.h5")
        causal[L] = timed([a.rcsim, "run", "--quiet", "--force", f"--output.file={path}", "--run.threads=1",
                           *flow_args(n_causal, d, beta, dt, L, mask="causal"), "--run.trials=1", "--run.seed=1",
                           "--init.type=sphere", f"--output.schedule=list:0 {L}"])[:2]
    causal_step = (causal[l2][0] - causal[l1][0]) / (l2 - l1)
    # The complete mask at n = 10^4: the run computes every step and then fails writing /mask (the attribute
    # 'centres' of 10^4 int64 exceeds HDF5's 64 KiB); timed up to that failure, the difference of two lengths is
    # still the time per step, and the peak memory is the run's.
    big = {}
    for L in (l1, l2):
        path = os.path.join(a.data, f"particles_scale_big_L{L}.h5")
        big[L] = timed([a.rcsim, "run", "--quiet", "--force", f"--output.file={path}", "--run.threads=1",
                        *flow_args(n_causal, d, beta, dt, L), "--run.trials=1", "--run.seed=1",
                        "--init.type=sphere", f"--output.schedule=list:0 {L}"], check=False)
    big_step = (big[l2][0] - big[l1][0]) / (l2 - l1)
    x0 = os.path.join(a.data, f"particles_scale_t1_L{l2}.h5")
    npout = os.path.join(a.data, "particles_scale_numpy.npy")
    np_wall, np_rss, out, _ = timed([sys.executable, "-c", NUMPY_CHILD, x0, repr(beta), repr(dt), str(np_steps), npout])
    np_sec = float(re.search(r"numpy_seconds (\S+)", out).group(1))
    import h5py
    with h5py.File(x0, "r") as f:
        x_rc = f["tokens"][0, 1]
    diff = float(np.max(np.abs(np.load(npout) - x_rc)))
    blas = numpy_blas()
    lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines()
    cpu = next((ln.split(":", 1)[1].strip() for ln in lscpu if ln.startswith("Model name")), platform.processor())
    with open(a.out + ".txt", "w") as f:
        f.write(f"# scale: SA flow, Q = K = V = I, tangent, sphere, RK4 dt = {dt:g}, n = {n}, d = {d}, beta = {beta:g}"
                f"{' (tiny)' if a.tiny else ''}\n")
        f.write(f"# machine: {cpu}, {os.cpu_count()} logical CPUs (shared with other jobs); NumPy {np.__version__}, "
                f"BLAS: {blas}; OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}, "
                f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', 'unset')}\n")
        for th in (1, 2):
            f.write(f"rcsim_threads_{th} seconds_per_step {per_step[th]:.4g} (wall {res[(th, l1)][0]:.2f} s for {l1} steps, "
                    f"{res[(th, l2)][0]:.2f} s for {l2}) max_rss_MiB {res[(th, l2)][1]:.0f}\n")
        f.write(f"numpy seconds_per_step {np_sec / np_steps:.4g} ({np_steps} steps in {np_sec:.2f} s; process wall "
                f"{np_wall:.2f} s) max_rss_MiB {np_rss:.0f} (row blocks of 1000)\n")
        f.write(f"max_abs_diff_tokens_after_{np_steps}_steps_rcsim_vs_numpy {diff:.2e}\n")
        f.write(f"rcsim_causal_n_{n_causal}_threads_1 seconds_per_step {causal_step:.4g} (wall {causal[l1][0]:.2f} s for "
                f"{l1} steps, {causal[l2][0]:.2f} s for {l2}) max_rss_MiB {causal[l2][1]:.0f}\n")
        f.write(f"rcsim_complete_n_{n_causal}_threads_1 seconds_per_step {big_step:.4g} (wall {big[l1][0]:.2f} s for "
                f"{l1} steps, {big[l2][0]:.2f} s for {l2}; exit status {big[l1][3]}, {big[l2][3]}: "
                f"{'the file write failed' if big[l2][3] else 'written'}) max_rss_MiB {big[l2][1]:.0f}\n")
    print(open(a.out + ".txt").read(), end="")
    return 0 if diff < 1e-10 else 1


if __name__ == "__main__":
    sys.exit(main())
