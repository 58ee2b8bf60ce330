#!/usr/bin/env python3
"""Scale of the particle flow (docs/science/particles.md section 13): steps per second and peak memory of rcsim
against NumPy and PyTorch implementations of the same RK4 step (SA, Q = K = V = I, tangent projection, sphere),
at n = 10^4 tokens, d = 3 (the tiny mode: n = 500).

The references are run as a user would best run them here (docs/dev/performance.md, bench/run_bench.sh): float64,
on an optimised BLAS (OpenBLAS; Debian's libopenblas0-pthread), each at 1 and 2 threads (NumPy: OPENBLAS_NUM_THREADS
and OMP_NUM_THREADS; PyTorch: torch.set_num_threads and the same variables), and the best variant counts. Every
program's loaded BLAS/LAPACK libraries are printed (the references read /proc/self/maps after a matrix product;
rcsim's are the ones the dynamic loader resolves, ldd); a WARNING is printed when a reference is not on an
optimised BLAS (OpenBLAS, MKL or BLIS): the comparison is then not fair.

rcsim: the whole process is timed for L1 and L2 steps (/usr/bin/time -v: wall time and maximum resident set); the
time per step is (wall(L2) - wall(L1)) / (L2 - L1), each wall the best of the repetitions, which removes start-up
and file writing. References: the same RK4 step with the n x n attention computed in row blocks of 1000 (so that
it fits in memory), from rcsim's X(0), timed inside a child process (the loop only) whose maximum resident set is
read the same way; their final tokens are compared with rcsim's. Other jobs share this machine's cores, so the
programs are run interleaved (rcsim, NumPy, PyTorch, rcsim, ...) for several repetitions and the best of each
counts; `uptime` before and after goes into the output.

usage: particles_scale.py [--tiny] [--rcsim PATH] --data DIR --out PREFIX
"""
import importlib.util
import os
import platform
import re
import subprocess
import sys

import numpy as np

import script_setup  # noqa: E402,F401  (the package rcsim of this checkout: analysis/script_setup.py)
from particles_common import flow_args, script_args  # noqa: E402
from rcsim.figures import atomic_writer  # noqa: E402

# The reference children: argv = X(0) file, beta, dt, steps, threads, output .npy. Each prints its seconds (the
# RK4 loop only) and the BLAS/LAPACK libraries mapped into it after a matrix product.
CHILD_COMMON = r"""
import re, sys, time
import h5py
x0file, beta, dt, steps, threads, out = (sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]),
                                         int(sys.argv[5]), sys.argv[6])
with h5py.File(x0file, "r") as f:
    X0 = f["tokens"][0, 0].copy()
B = 1000
def loaded_blas():
    with open("/proc/self/maps") as f:
        return sorted({ln.split()[-1] for ln in f if re.search(r"blas|lapack|mkl|blis", ln.split()[-1], re.I)})
"""

NUMPY_CHILD = CHILD_COMMON + r"""
import numpy as np
def field(X):
    Y = np.empty_like(X)
    for s in range(0, len(X), B):
        S = beta * (X[s:s + B] @ X.T)
        S -= S.max(axis=1, keepdims=True)
        np.exp(S, out=S)
        S /= S.sum(axis=1, keepdims=True)
        Y[s:s + B] = S @ X
    return Y - np.sum(Y * X, axis=1, keepdims=True) / np.sum(X * X, axis=1, keepdims=True) * X
X = X0
t0 = time.perf_counter()
for _ in range(steps):
    k1 = field(X); k2 = field(X + 0.5 * dt * k1); k3 = field(X + 0.5 * dt * k2); k4 = field(X + dt * k3)
    X = X + dt / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4)
    X /= np.linalg.norm(X, axis=1, keepdims=True)
sec = time.perf_counter() - t0
np.save(out, X)
print(f"seconds {sec:.6f}")
print(f"version NumPy {np.__version__}")
print("blas " + ", ".join(loaded_blas()))
"""

TORCH_CHILD = CHILD_COMMON + r"""
import numpy as np
import torch
torch.set_num_threads(threads)
def field(X):
    Y = torch.empty_like(X)
    for s in range(0, X.shape[0], B):
        S = torch.mm(X[s:s + B], X.T).mul_(beta)
        S = torch.softmax(S, dim=1)
        Y[s:s + B] = torch.mm(S, X)
    return Y - (Y * X).sum(dim=1, keepdim=True) / (X * X).sum(dim=1, keepdim=True) * X
with torch.no_grad():
    X = torch.from_numpy(X0).to(torch.float64)
    t0 = time.perf_counter()
    for _ in range(steps):
        k1 = field(X); k2 = field(X + 0.5 * dt * k1); k3 = field(X + 0.5 * dt * k2); k4 = field(X + dt * k3)
        X = X + dt / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4)
        X = X / torch.linalg.norm(X, dim=1, keepdim=True)
    sec = time.perf_counter() - t0
np.save(out, X.numpy())
print(f"seconds {sec:.6f}")
print(f"version PyTorch {torch.__version__}")
print("blas " + ", ".join(loaded_blas()))
"""

OPTIMISED = re.compile(r"openblas|mkl|blis", re.I)


def timed(cmd, check=True, env=None):
    """Run cmd under /usr/bin/time -v: (wall seconds, max RSS in MiB, stdout, exit status)."""
    p = subprocess.run(["/usr/bin/time", "-v", *cmd], check=False, capture_output=True, text=True, env=env)
    if check and p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stderr[-2000:]}")
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (\S+)", p.stderr).group(1)
    parts = [float(x) for x in wall.split(":")]
    sec = sum(v * 60 ** (len(parts) - 1 - k) for k, v in enumerate(parts))
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", p.stderr).group(1)) / 1024.0
    return sec, rss, p.stdout, p.returncode


def thread_env(threads):
    env = dict(os.environ)
    env["OPENBLAS_NUM_THREADS"] = env["OMP_NUM_THREADS"] = str(threads)
    return env


def linked_blas(exe):
    """The BLAS/LAPACK libraries the dynamic loader resolves for exe (ldd), as real paths."""
    out = subprocess.run(["ldd", exe], capture_output=True, text=True).stdout
    libs = {os.path.realpath(m.group(1)) for m in re.finditer(r"=> (\S+)", out) if OPTIMISED.search(m.group(1))
            or re.search(r"blas|lapack", m.group(1))}
    return ", ".join(sorted(libs)) or "none"


def uptime():
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def main():
    a = script_args(__doc__)
    n, d, beta, dt = (500, 3, 1.0, 0.1) if a.tiny else (10000, 3, 1.0, 0.1)
    l1, l2 = (20, 60) if a.tiny else (1, 3)
    ref_steps = 20 if a.tiny else 1
    reps = 2 if a.tiny else 3
    os.makedirs(a.data, exist_ok=True)
    load_before = uptime()
    rc = {}      # (threads, L) -> list of (wall, rss)
    ref = {}     # (name, threads) -> list of (seconds, rss)
    info = {}    # name -> (version, blas)
    diffs = {}   # (name, threads) -> max abs diff to rcsim
    causal = {}  # L -> list of (wall, rss)
    x0 = os.path.join(a.data, f"particles_scale_cpu_t1_L{l2}.h5")
    # PyTorch is not in scripts/deps.txt (CI runs --tiny): without it the NumPy reference alone is run, with a WARNING
    refs = [("numpy", NUMPY_CHILD)] + ([("torch", TORCH_CHILD)] if importlib.util.find_spec("torch") else [])
    names = [name for name, _ in refs]
    for rep in range(reps):
        # rcsim's reference platform (the n x n matrix; one trial is one thread, so 1 thread only), then the cpu
        # platform (run.platform = cpu: fused attention, the trial's rows on every thread) at 1 and 2 threads.
        for platform_name, threads in (("reference", 1), ("cpu", 1), ("cpu", 2)):
            for L in (l1, l2):
                path = os.path.join(a.data, f"particles_scale_{platform_name}_t{threads}_L{L}.h5")
                cmd = [a.rcsim, "run", "--quiet", "--force", f"--output.file={path}", f"--run.threads={threads}",
                       *flow_args(n, d, beta, dt, L), "--run.trials=1", "--run.seed=1", "--init.type=sphere",
                       f"--run.platform={platform_name}",
                       f"--output.tokens=0,{ref_steps}", f"--output.schedule=list:0 {ref_steps} {L}"]
                rc.setdefault((platform_name, threads, L), []).append(timed(cmd)[:2])
        for threads in (1, 2):
            for name, child in refs:
                npout = os.path.join(a.data, f"particles_scale_{name}_t{threads}.npy")
                wall, rss, out, _ = timed([sys.executable, "-c", child, x0, repr(beta), repr(dt), str(ref_steps),
                                           str(threads), npout], env=thread_env(threads))
                sec = float(re.search(r"^seconds (\S+)", out, re.M).group(1))
                ref.setdefault((name, threads), []).append((sec, rss))
                info[name] = (re.search(r"^version (.*)$", out, re.M).group(1),
                              re.search(r"^blas ?(.*)$", out, re.M).group(1) or "none")
                if rep == 0:
                    import h5py
                    with h5py.File(x0, "r") as f:
                        x_rc = f["tokens"][0, 1]
                    diffs[(name, threads)] = float(np.max(np.abs(np.load(npout) - x_rc)))
        # the causal mask, one thread (rcsim only): the step at the same n
        for L in (l1, l2):
            path = os.path.join(a.data, f"particles_scale_causal_L{L}.h5")
            causal.setdefault(L, []).append(timed(
                [a.rcsim, "run", "--quiet", "--force", f"--output.file={path}", "--run.threads=1",
                 *flow_args(n, d, beta, dt, L, mask="causal"), "--run.trials=1", "--run.seed=1", "--run.platform=cpu",
                 "--init.type=sphere", f"--output.schedule=list:0 {L}"])[:2])
    load_after = uptime()
    import h5py
    with h5py.File(os.path.join(a.data, f"particles_scale_reference_t1_L{l2}.h5"), "r") as f_ref, \
            h5py.File(x0, "r") as f_cpu:
        platform_diff = float(np.max(np.abs(f_ref["tokens"][0, 1] - f_cpu["tokens"][0, 1])))

    def per_step(runs):
        best = {L: min(w for w, _ in runs[L]) for L in (l1, l2)}
        return (best[l2] - best[l1]) / (l2 - l1), best, max(r for _, r in runs[l2])

    rows = []  # (label, threads, steps/s, seconds/step, rss, note)
    for label, platform_name, threads in (("rcsim_reference", "reference", 1), ("rcsim", "cpu", 1), ("rcsim", "cpu", 2)):
        sps, best, rss = per_step({L: rc[(platform_name, threads, L)] for L in (l1, l2)})
        rows.append((label, threads, 1.0 / sps, sps, rss,
                     f"run.platform = {platform_name}; best wall {best[l1]:.2f} s for {l1} steps, {best[l2]:.2f} s for {l2}"))
    for name in names:
        for threads in (1, 2):
            runs = ref[(name, threads)]
            sec = min(s for s, _ in runs) / ref_steps
            rows.append((name, threads, 1.0 / sec, sec, max(r for _, r in runs),
                         f"{ref_steps} steps, best of {len(runs)}: " + ", ".join(f"{s:.3f}" for s, _ in runs) + " s"))
    c_sps, c_best, c_rss = per_step(causal)
    best_of = {name: max((r for r in rows if r[0] == name), key=lambda r: r[2]) for name in ["rcsim", *names]}
    best_ref = max((best_of[name] for name in names), key=lambda r: r[2])

    lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines()
    cpu = next((ln.split(":", 1)[1].strip() for ln in lscpu if ln.startswith("Model name")), platform.processor())
    warnings = [f"WARNING: the {name} reference does not run on an optimised BLAS (loaded: {info[name][1]}): "
                "its timings and the ratios are not fair" for name in names
                if not OPTIMISED.search(info[name][1])]
    if "torch" not in names:
        warnings.append("WARNING: PyTorch is not installed (apt-get install python3-torch): the PyTorch reference "
                        "was not run")
    with atomic_writer(a.out + ".txt") as f:
        f.write(f"# scale: SA flow, Q = K = V = I, tangent, sphere, RK4 dt = {dt:g}, n = {n}, d = {d}, beta = {beta:g}"
                f"{' (tiny)' if a.tiny else ''}; complete mask unless said\n")
        f.write(f"# machine: {cpu}, {os.cpu_count()} logical CPUs, shared with other jobs: {reps} interleaved "
                "repetitions (rcsim, NumPy, PyTorch per thread count), the best of each counts\n")
        f.write(f"# uptime before: {load_before}\n# uptime after:  {load_after}\n")
        f.write(f"# rcsim {a.rcsim}: BLAS/LAPACK linked (ldd): {linked_blas(a.rcsim)}; "
                f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', 'unset')}, "
                f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')} for rcsim\n")
        for name in names:
            f.write(f"# {name}: {info[name][0]}; BLAS/LAPACK loaded (/proc/self/maps): {info[name][1]}; "
                    "float64, row blocks of 1000; threads = OPENBLAS_NUM_THREADS = OMP_NUM_THREADS"
                    f"{' = torch.set_num_threads' if name == 'torch' else ''}\n")
        for w in warnings:
            f.write(w + "\n")
        f.write("program threads steps_per_second seconds_per_step max_rss_MiB detail\n")
        for label, threads, sps, sec, rss, note in rows:
            f.write(f"{label} {threads} {sps:.4g} {sec:.4g} {rss:.0f} ({note})\n")
        c_txt = f"{1.0 / c_sps:.4g} {c_sps:.4g}" if c_sps > 0 else "nan nan"
        f.write(f"rcsim_causal 1 {c_txt} {c_rss:.0f} (causal mask; best wall {c_best[l1]:.2f} s for {l1} steps, "
                f"{c_best[l2]:.2f} s for {l2}{'' if c_sps > 0 else '; the longer run was faster: load noise, no value'})\n")
        for (name, threads), diff in sorted(diffs.items()):
            f.write(f"max_abs_diff_tokens_after_{ref_steps}_steps_rcsim_vs_{name}_threads_{threads} {diff:.2e}\n")
        rc_ref = next(r for r in rows if r[0] == "rcsim_reference")
        f.write(f"cpu platform: {best_of['rcsim'][2] / rc_ref[2]:.2f}x rcsim's reference platform "
                f"({best_of['rcsim'][1]} threads against 1; peak memory {best_of['rcsim'][4]:.0f} MiB against "
                f"{rc_ref[4]:.0f} MiB); tokens after {ref_steps} steps differ by {platform_diff:.2e} (max abs)\n")
        f.write(f"best: rcsim {best_of['rcsim'][2]:.4g} steps/s ({best_of['rcsim'][1]} threads); best reference "
                f"{best_ref[0]} {best_ref[2]:.4g} steps/s ({best_ref[1]} threads); ratio "
                f"{best_of['rcsim'][2] / best_ref[2]:.2f}\n")
    for w in warnings:
        print(w, file=sys.stderr)
    print(open(a.out + ".txt").read(), end="")
    return 0 if max(diffs.values()) < 1e-10 and platform_diff < 1e-10 else 1


if __name__ == "__main__":
    from particles_common import command
    sys.exit(command.run(main))
