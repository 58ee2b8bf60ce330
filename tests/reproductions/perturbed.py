#!/usr/bin/env python3
"""Every reproduction must pass on rcsim and fail on a deliberately wrong engine (issue 37, item 1).

usage: perturbed.py [--rcsim PATH] [--work DIR] [--only NAME ...] [--jobs J] [--perturbed-only] [--list]

For each case below the script is run at --tiny size twice: as it is, where it must exit 0, and with
`--perturb KEY=VALUE ...` (analysis/particles_common.py: the keys are given to every rcsim the script
starts, while its predictions keep the paper's settings), where it must exit 1 with at least one
failed claim of the paper on stderr ("claim failed: ..."; a failed engine self-check alone, a crash
or a usage error does not count). Prints one line per run with its exit code, its time and the
claims that failed (--perturbed-only skips the runs as they are, which CI already makes through the
documented commands of docs/science/particles.md); exits 0 when every case behaves, 1 otherwise, 2 on a usage error.
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

# W_V = -I where W_Q = W_K = I: the value path reversed (attraction becomes repulsion).
V_MINUS_I = ("weights.v=tied_qk", "weights.v_sign=-1")

# (name, script, perturbation): the perturbation changes the physics that the script's claims are about.
CASES = [
    ("staircase V=-I", "analysis/particles_staircase.py", V_MINUS_I),
    ("staircase no merge", "analysis/particles_staircase.py", ("dynamics.merge_distance=0",)),
    ("staircase USA not normalised", "analysis/particles_staircase.py", ("attention.usa_normalised=false",)),
    ("phase V=-I", "analysis/particles_phase.py", V_MINUS_I),
    ("periodic beta x 1.3", "analysis/particles_periodic.py", ("model.beta=6.5",)),
    ("periodic V=-I", "analysis/particles_periodic.py", V_MINUS_I),
    ("causal V=-I", "analysis/particles_causal.py", V_MINUS_I),
    ("causal complete mask", "analysis/particles_causal.py", ("mask.type=complete",)),
    ("hardmax V=-I", "analysis/particles_hardmax.py", V_MINUS_I),
    ("staircase2000 V=-I", "analysis/particles_staircase2000.py", V_MINUS_I),
    ("equiangular V=-I", "analysis/particles_equiangular.py", V_MINUS_I),
    ("equiangular beta=1.3", "analysis/particles_equiangular.py", ("model.beta=1.3",)),
    ("equiangular Euler", "analysis/particles_equiangular.py", ("dynamics.integrator=euler",)),
    ("longcontext no log scaling", "analysis/particles_longcontext.py", ("model.beta_log_power=0",)),
    ("longcontext rho=0", "analysis/particles_longcontext.py", ("init.rho=0",)),
    ("lost_middle V=-I", "analysis/particles_lost_middle.py", V_MINUS_I),
]


def run(script, rcsim, work, tag, perturb):
    """Runs one script at --tiny size; (exit code, seconds, claim failures, last lines of stderr)."""
    out = os.path.join(work, tag)
    cmd = [sys.executable, os.path.join(REPO, script), "--tiny", "--rcsim", rcsim, "--data", out,
           "--out", os.path.join(out, "figure")]
    for kv in perturb:
        cmd += ["--perturb", kv]
    env = dict(os.environ, MPLBACKEND="Agg")
    t0 = time.perf_counter()
    p = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    sec = time.perf_counter() - t0
    claims = [line[len("claim failed: "):] for line in p.stderr.splitlines() if line.startswith("claim failed: ")]
    return p.returncode, sec, claims, p.stderr.strip().splitlines()[-3:]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rcsim", default=shutil.which("rcsim") or os.path.join(REPO, "build", "sim", "rcsim"))
    ap.add_argument("--work", help="directory for the runs (default: a temporary one, removed)")
    ap.add_argument("--only", nargs="+", metavar="NAME", help="the cases whose name starts with one of these")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="runs at once (default: the CPU count)")
    ap.add_argument("--perturbed-only", action="store_true", help="skip the runs as they are")
    ap.add_argument("--list", action="store_true", help="list the cases and exit")
    a = ap.parse_args()
    if a.list:
        for name, script, perturb in CASES:
            print(f"{name}: {script} --perturb " + " --perturb ".join(perturb))
        return 0
    cases = [c for c in CASES if not a.only or any(c[0].startswith(o) for o in a.only)]
    if not cases:
        ap.error(f"--only {' '.join(a.only)}: no such case (see --list)")
    if a.jobs < 1:
        ap.error(f"--jobs {a.jobs}: must be >= 1")
    if not os.access(a.rcsim, os.X_OK):
        ap.error(f"--rcsim {a.rcsim}: not an executable file")
    work = a.work or tempfile.mkdtemp(prefix="rcsim-perturbed-")
    # the normal run of each script once, and each perturbed case
    jobs = [] if a.perturbed_only else [(script, script, ()) for script in dict.fromkeys(s for _, s, _ in cases)]
    jobs += [(name, script, perturb) for name, script, perturb in cases]
    try:
        with ThreadPoolExecutor(max_workers=a.jobs) as pool:
            futures = [pool.submit(run, script, a.rcsim, work, f"{k}_{os.path.basename(script)[:-3]}", perturb)
                       for k, (_, script, perturb) in enumerate(jobs)]
            results = [f.result() for f in futures]
    finally:
        if not a.work:
            shutil.rmtree(work, ignore_errors=True)
    bad = 0
    for (name, script, perturb), (rc, sec, claims, tail) in zip(jobs, results):
        if not perturb:
            ok = rc == 0
            print(f"{'ok ' if ok else 'BAD'} {name} (as it is): exit {rc}, {sec:.1f} s; required exit 0")
        else:
            ok = rc == 1 and bool(claims)
            print(f"{'ok ' if ok else 'BAD'} {name}: exit {rc}, {sec:.1f} s; required exit 1 with a failed claim; "
                  f"failed claims: {'; '.join(c.split(':')[0] for c in claims) or 'none'}")
        if not ok:
            bad += 1
            for line in tail:
                print("      " + line)
    print(f"perturbed reproductions: {len(jobs) - bad} of {len(jobs)} as required")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
