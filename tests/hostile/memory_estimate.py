#!/usr/bin/python3
"""The memory estimate of `rcsim run --dry-run` against the measured peak RSS (issue 22).

    memory_estimate.py RCSIM WORKDIR [--tolerance 0.25] [-k SUBSTRING] [--case NAME=KEY=V,KEY=V ...]

For every case: `rcsim run --dry-run` prints the estimate ("memory: about X MB", what a run is
refused on), then the same run is started as a child and reaped with os.wait4, whose rusage is
that child's alone (ru_maxrss in KiB: its peak resident set). The table prints estimate / peak
per case; the script fails (exit 1) if any ratio is outside [1 - tol, 1 + tol] or a run fails.

The cases cover what dominates a run's memory: the program alone (tiny runs and the
configs/*.ini that run in seconds), the per-layer measures and spectrum, token snapshots
(output.tokens = all), attention matrices (output.attention = true), the N x N working storage
of long sequences, and the checkpoint of a run whose trials outlast its flush interval; a run
whose token snapshots are six times the checkpoint's cap must also stay below a bound near the
program + the cap (MAX_PEAK: they leave memory once checkpointed).
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))

UNITS = {"bytes": 1.0, "kB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12}

# name -> (config file or None, keys). Sizes chosen so that each run takes a few seconds on one
# core and the interesting part (named) is most of the memory.
CASES = [
    ("tiny", None, {"model.tokens": 8, "model.dim": 4, "model.layers": 3, "run.trials": 2}),
    ("example.ini", "configs/example.ini", {}),
    ("deep_log_schedule.ini", "configs/deep_log_schedule.ini", {}),
    ("peers_usa_sphere.ini", "configs/peers_usa_sphere.ini", {}),
    ("measures+spectrum", None, {"model.tokens": 32, "model.dim": 32, "model.layers": 400, "run.trials": 100,
                                  "output.spectrum": "true"}),
    ("tokens-all 70MB", None, {"model.tokens": 64, "model.dim": 32, "model.layers": 64, "run.trials": 64,
                               "output.tokens": "all"}),
    ("tokens-all 200MB", None, {"model.tokens": 64, "model.dim": 64, "model.layers": 64, "run.trials": 96,
                                "output.tokens": "all"}),
    ("attention 135MB", None, {"model.tokens": 128, "model.dim": 16, "model.layers": 32, "run.trials": 32,
                               "output.attention": "true"}),
    ("attention+tokens 200MB", None, {"model.tokens": 96, "model.dim": 32, "model.layers": 40, "run.trials": 64,
                                      "output.attention": "true", "output.tokens": "all"}),
    ("long sequence N=1024", None, {"model.tokens": 1024, "model.dim": 32, "model.layers": 4, "run.trials": 2}),
    # Issue 38, the new features: a deep particle flow (RK4 and noise, every layer recorded), the
    # gradient measures with token snapshots, and a depth of 10^6.
    ("particles rk4+noise deep", None, {"model.tokens": 32, "model.dim": 3, "model.layers": 100000, "run.trials": 2,
                                        "norm.type": "sphere", "weights.q": "identity", "weights.k": "identity",
                                        "weights.v": "identity", "weights.shared": "true", "residual.alpha": 0.01,
                                        "residual.project": "tangent", "dynamics.integrator": "rk4",
                                        "dynamics.noise": 0.01}),
    ("gradients+tokens", None, {"model.tokens": 32, "model.dim": 32, "model.layers": 300, "run.trials": 8,
                                "output.tokens": "all", "output.measures": "grad_x_norm,jacobian_log_fro2",
                                "metrics.jacobian_probes": 4}),
    ("depth 10^6", None, {"model.tokens": 4, "model.dim": 2, "model.layers": 1000000, "run.trials": 2}),
    # 405 MB of /tokens (2.1 MB per trial): more than six times the checkpoint's cap, so the peak
    # is the program, the work, the cap and a few trials, not the output (MAX_PEAK).
    ("tokens-all 400MB", None, {"model.tokens": 64, "model.dim": 64, "model.layers": 64, "run.trials": 190,
                                "output.tokens": "all"}),
]

# Cases whose peak RSS must also stay below a bound, whatever the estimate says: the large
# per-trial data leave memory once checkpointed (kPendingLargeBytes = 64 MB; docs/dev/memory.md),
# so 405 MB of /tokens must fit in the program (23 MB) + the cap (64 MB) + a few trials (2.1 MB
# each) + the work, with room for the allocator (the bound is 160 MB; all held would be 430 MB).
MAX_PEAK = {"tokens-all 400MB": 160e6}


def parse_case(text):
    name, _, rest = text.partition("=")
    keys = dict(kv.split("=", 1) for kv in rest.split(",") if kv)
    return (name, keys.pop("config", None), keys)


def args_of(rcsim, config, keys, out):
    a = [rcsim, "run", "--quiet"]
    if config:
        a += ["--config", os.path.join(REPO, config)]
    a += [f"--{k}={v}" for k, v in keys.items()]
    a += [f"--output.file={out}"]
    return a


def estimate(rcsim, config, keys, out):
    p = subprocess.run(args_of(rcsim, config, keys, out) + ["--dry-run"], capture_output=True, text=True, cwd=REPO)
    if p.returncode != 0:
        raise RuntimeError(f"dry run failed ({p.returncode}): {p.stderr.strip()}")
    m = re.search(r"memory: about ([0-9.e+]+) (bytes|kB|MB|GB|TB)", p.stdout)
    if not m:
        raise RuntimeError("no 'memory: about' in the dry run's output:\n" + p.stdout)
    return float(m.group(1)) * UNITS[m.group(2)]


def peak(rcsim, config, keys, out):
    """Run the case as a child of its own; its peak RSS in bytes (os.wait4: this child only)."""
    child = subprocess.Popen(args_of(rcsim, config, keys, out), cwd=REPO, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE)
    t0 = time.monotonic()
    _, status, usage = os.wait4(child.pid, 0)
    seconds = time.monotonic() - t0
    child.returncode = os.waitstatus_to_exitcode(status)  # reaped here: tell Popen
    err = child.stderr.read().decode(errors="replace")
    child.stderr.close()
    if child.returncode != 0:
        raise RuntimeError(f"run failed ({child.returncode}): {err.strip()}")
    return usage.ru_maxrss * 1024.0, seconds


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("rcsim")
    ap.add_argument("workdir")
    ap.add_argument("--tolerance", type=float, default=0.25)
    ap.add_argument("-k", default="", help="only the cases whose name contains this")
    ap.add_argument("--case", action="append", default=[], help="NAME=key=v,key=v (config=FILE for a config)")
    ap.add_argument("--no-check", action="store_true", help="print the table only")
    a = ap.parse_args()
    rcsim = os.path.abspath(a.rcsim)
    cases = [parse_case(c) for c in a.case] or [c for c in CASES if a.k in c[0]]
    os.makedirs(a.workdir, exist_ok=True)
    failures = []
    print(f"{'case':<26} {'estimate':>10} {'peak RSS':>10} {'est/peak':>9} {'file':>10} {'time':>6}")
    for name, config, keys in cases:
        d = os.path.join(os.path.abspath(a.workdir), re.sub(r"[^A-Za-z0-9_.+-]", "_", name))
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        out = os.path.join(d, "run.h5")
        try:
            est = estimate(rcsim, config, keys, out)
            rss, seconds = peak(rcsim, config, keys, out)
        except RuntimeError as e:
            failures.append(f"{name}: {e}")
            print(f"{name:<26} FAILED: {e}")
            continue
        size = os.path.getsize(out)
        ratio = est / rss
        print(f"{name:<26} {est / 1e6:>8.1f}MB {rss / 1e6:>8.1f}MB {ratio:>9.2f} {size / 1e6:>8.1f}MB {seconds:>5.1f}s",
              flush=True)
        if abs(ratio - 1.0) > a.tolerance:
            failures.append(f"{name}: estimate {est / 1e6:.1f} MB vs peak RSS {rss / 1e6:.1f} MB (ratio {ratio:.2f}, "
                            f"allowed 1 +- {a.tolerance})")
        if name in MAX_PEAK and rss > MAX_PEAK[name]:
            failures.append(f"{name}: peak RSS {rss / 1e6:.1f} MB, more than {MAX_PEAK[name] / 1e6:.0f} MB (the large "
                            "per-trial data must leave memory once checkpointed)")
        shutil.rmtree(d, ignore_errors=True)
    if failures and not a.no_check:
        print("\n".join(["FAIL:"] + failures), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
