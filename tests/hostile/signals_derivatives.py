#!/usr/bin/python3
"""Issue 38: a stop request honoured inside long derivative work (Hutchinson probes, power
iterations, exact Jacobian passes, deep reverse passes), from the CLI and from Python.

    signals_derivatives.py RCSIM BUILD_DIR WORKDIR [-k SUBSTRING] [--limit 1.0]

CLI cases (`rcsim run`, run.threads = 1, 3 trials of several seconds of CPU each): signalled
(SIGTERM or SIGINT) 1 s in, inside trial 0's derivative measure, each must exit 130 within
--limit seconds of the signal with nothing checkpointed; and one case of shorter trials, whose
time is measured first, signalled at 1.5 trials: trial 0 is kept (OUTPUT.partial holds it), as an
interrupted run does (which a rerun resumes: tested elsewhere). Python cases (BUILD_DIR/python): rcsim.simulate with a Jacobian measure and
rcsim.gradients through many layers and Model.gradients of the pretrained blocks repeated to depth
3000, in a child sent SIGINT after 2 s: KeyboardInterrupt within --limit seconds. `rcsim generate
--measure` at depth 20000 sent SIGTERM after 2 s: exit 130 with one line, its file and lock gone. (The engine polls one flag per block: BlockParams::cancel, read by at_layer.)
Exit 0 iff every case passes.
"""
import argparse
import os
import shutil
import signal
import subprocess
import sys
import time

import h5py

BASE = ["--model.dim=8", "--run.threads=1", "--run.seed=3", "--quiet"]
# name -> (keys, signal, seconds): each trial spends nearly all its time in the named derivative
# loop, several seconds of CPU; the signal comes `seconds` after the start, inside trial 0 (a build
# that stops only between trials or layers exits seconds later), or with seconds = None at 1.5
# trials, inside trial 1, the first trial's time measured before (the completed trial is kept).
CLI_CASES = [
    ("hutchinson_probes_sigterm", ["--model.tokens=16", "--model.layers=40", "--output.measures=jacobian_log_fro2",
                                   "--metrics.jacobian_probes=20000"], signal.SIGTERM, 1.0),
    ("power_iterations_sigterm", ["--model.tokens=16", "--model.layers=40", "--output.measures=jacobian_log_spec2_full",
                                  "--metrics.power_iterations=2000", "--metrics.power_tolerance=1e-300"],
     signal.SIGTERM, 1.0),
    ("exact_jacobian_sigint", ["--model.tokens=96", "--model.layers=60", "--output.measures=jacobian_log_spec2,"
                               "jacobian_log_fro2_full"], signal.SIGINT, 1.0),
    ("deep_reverse_pass_sigterm", ["--model.tokens=16", "--model.layers=40000", "--output.schedule=log:4",
                                   "--output.measures=grad_x_norm,last_token_sensitivity"], signal.SIGTERM, 1.0),
    ("finished_trial_kept_sigterm", ["--model.tokens=16", "--model.layers=40", "--output.measures=jacobian_log_fro2",
                                     "--metrics.jacobian_probes=1500"], signal.SIGTERM, None),
]

PY_SIMULATE = """
import sys, time; sys.path.insert(0, sys.argv[1])
import rcsim
print("started", flush=True)
try:
    rcsim.simulate(keys={"model.tokens": 16, "model.dim": 8, "model.layers": 40, "run.trials": 50,
                         "run.threads": 1, "output.measures": "jacobian_log_spec2_full",
                         "metrics.power_iterations": 400, "metrics.power_tolerance": 1e-300})
except KeyboardInterrupt:
    print("KeyboardInterrupt", flush=True)
    sys.exit(0)
sys.exit(3)
"""
PY_GRADIENTS = """
import sys; sys.path.insert(0, sys.argv[1])
import numpy as np, rcsim
X = np.random.default_rng(1).standard_normal((64, 8))
print("started", flush=True)
try:
    for _ in range(100):  # 10^4 layers of N = 64 tokens: seconds of CPU per call, 55 MB
        rcsim.gradients(X, np.ones_like(X), layers=10000, norm={"type": "layernorm"})
except KeyboardInterrupt:
    print("KeyboardInterrupt", flush=True)
    sys.exit(0)
sys.exit(3)
"""
PY_LLAMA = """
import os, sys; sys.path.insert(0, sys.argv[1])
import rcsim
m = rcsim.load_model(os.environ["RCSIM_TEST_MODEL"])
ids = [1] * 256
print("started", flush=True)
try:
    for _ in range(100):  # the pretrained blocks repeated to depth 3000: seconds of CPU per call
        m.gradients(ids, depth=3000)
except KeyboardInterrupt:
    print("KeyboardInterrupt", flush=True)
    sys.exit(0)
sys.exit(3)
"""
PY_CASES = [("python_simulate_power_iterations", PY_SIMULATE), ("python_gradients_10000_layers", PY_GRADIENTS),
            ("python_llama_gradients_depth_3000", PY_LLAMA)]
MODEL = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "configs",
                     "models", "stories260K", "stories260K.bin")


def cli_case(rcsim, work, name, keys, sig, seconds, limit):
    d = os.path.join(work, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    trial = None
    if seconds is None:
        t0 = time.monotonic()
        subprocess.run([rcsim, "run", *BASE, *keys, "--run.trials=1", f"--output.file={d}/one.h5"], check=True)
        trial = time.monotonic() - t0
        seconds = 1.5 * trial
    out = os.path.join(d, "run.h5")
    child = subprocess.Popen([rcsim, "run", *BASE, *keys, "--run.trials=3", f"--output.file={out}"],
                             stderr=subprocess.PIPE, text=True)
    time.sleep(seconds)
    sent = time.monotonic()
    child.send_signal(sig)
    try:
        err = child.communicate(timeout=60)[1]
    except subprocess.TimeoutExpired:
        child.kill()
        return f"FAIL {name}: still running 60 s after the signal"
    took = time.monotonic() - sent
    problems = []
    if child.returncode != 130:
        problems.append(f"exit {child.returncode}, expected 130 ({err.strip()[-300:]})")
    if took > limit:
        problems.append(f"exited {took:.2f} s after the signal (limit {limit} s)")
    partial = out + ".partial"
    done = None
    if os.path.exists(partial):
        with h5py.File(partial, "r") as f:  # a trial's group is whole once its diagnostics are written
            done = sorted(int(g[6:]) for g in f if g.startswith("trial_") and "diagnostics" in f[g])
    expected = ([0], [0, 1]) if trial else (None, [])  # trial 0 done (trial 1 too, if the machine sped up)
    if done not in expected:
        problems.append(f"checkpointed trials {done}, expected {expected[0]}")
    line = f"{name}: signal at {seconds:.2f} s, exit {took:.2f} s after it, checkpointed trials {done}"
    if problems:
        return f"FAIL {line}: {'; '.join(problems)}"
    print("ok   " + line, flush=True)
    shutil.rmtree(d)
    return None


def generate_case(rcsim, work, limit):
    """rcsim generate --measure over the pretrained blocks repeated to depth 20000, SIGTERM 2 s in:
    exit 130 with one line within the limit, the run file and its lock gone."""
    d = os.path.join(work, "generate_measure_sigterm")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    out = os.path.join(d, "run.h5")
    child = subprocess.Popen([rcsim, "generate", MODEL, "--sequences=8", "--steps=255", f"--measure={out}",
                              "--depth=20000"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    time.sleep(2.0)
    sent = time.monotonic()
    child.send_signal(signal.SIGTERM)
    try:
        err = child.communicate(timeout=60)[1]
    except subprocess.TimeoutExpired:
        child.kill()
        return "FAIL generate_measure_sigterm: still running 60 s after the signal"
    took = time.monotonic() - sent
    left = sorted(os.listdir(d))
    if child.returncode != 130 or "interrupted" not in err or took > limit or left:
        return (f"FAIL generate_measure_sigterm: exit {child.returncode} {took:.2f} s after the signal (limit {limit} s), "
                f"files left {left}, stderr {err.strip()[-200:]!r}")
    print(f"ok   generate_measure_sigterm: exit 130 {took:.2f} s after SIGTERM, nothing left behind", flush=True)
    shutil.rmtree(d)
    return None


def python_case(build, name, code, limit):
    child = subprocess.Popen([sys.executable, "-c", code, os.path.join(build, "python")], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=dict(os.environ, RCSIM_TEST_MODEL=MODEL))
    first = child.stdout.readline()
    if "started" not in first:
        child.kill()
        return f"FAIL {name}: the child did not start ({child.stderr.read()[-300:]})"
    time.sleep(2.0)
    sent = time.monotonic()
    child.send_signal(signal.SIGINT)
    try:
        out, err = child.communicate(timeout=90)
    except subprocess.TimeoutExpired:
        child.kill()
        return f"FAIL {name}: still running 90 s after SIGINT"
    took = time.monotonic() - sent
    if child.returncode != 0 or "KeyboardInterrupt" not in out:
        return f"FAIL {name}: exit {child.returncode}, output {out.strip()!r} {err.strip()[-300:]}"
    if took > limit:
        return f"FAIL {name}: KeyboardInterrupt {took:.2f} s after SIGINT (limit {limit} s)"
    print(f"ok   {name}: KeyboardInterrupt {took:.2f} s after SIGINT", flush=True)
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("rcsim")
    ap.add_argument("build")
    ap.add_argument("work")
    ap.add_argument("-k", default="")
    ap.add_argument("--limit", type=float, default=1.0, help="seconds from the signal to the exit")
    a = ap.parse_args()
    work = os.path.abspath(a.work)
    os.makedirs(work, exist_ok=True)
    failures = []
    for name, keys, sig, seconds in CLI_CASES:
        if a.k in name:
            failures.append(cli_case(os.path.abspath(a.rcsim), work, name, keys, sig, seconds, a.limit))
    if a.k in "generate_measure_sigterm":
        failures.append(generate_case(os.path.abspath(a.rcsim), work, a.limit))
    # The compiled engine beside the build tree's package (a build without it, as the sanitizer
    # build, copies the package's Python files only): the Python cases need it.
    package = os.path.join(a.build, "python", "rcsim")
    have_engine = os.path.isdir(package) and any(f.startswith("_engine") for f in os.listdir(package))
    if not have_engine:
        print("skipped the Python cases: no compiled engine (rcsim._engine) in " + package)
    for name, code in PY_CASES:
        if a.k in name and have_engine:
            failures.append(python_case(a.build, name, code, a.limit))
    failures = [f for f in failures if f]
    for f in failures:
        print(f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
