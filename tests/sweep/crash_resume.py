#!/usr/bin/python3
"""Kill a sweep with SIGKILL (or SIGINT) at random moments, rerun it until it finishes, and compare the
result value by value with an uninterrupted run of the same sweep.

    crash_resume.py RCSIM WORKDIR [--kills K] [--seed S] [--launcher "mpirun -np 2 ..."]

The sweep (configs in this script) has 6 points of a few tenths of a second each. The
process is killed K times (default 8) after a random delay of 0.05 to 0.8 s, each time
restarting the same command; then it runs to the end. Exit 0 iff the final directory equals
the uninterrupted one (tests/sweep/compare_sweeps.py) and the index says every point complete.
"""
import argparse
import os
import random
import shlex
import shutil
import signal
import subprocess
import sys
import time

import h5py

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import compare_sweeps  # noqa: E402

SWEEP = """[model]
tokens = 24
dim = 8
layers = 60
[norm]
type = layernorm
[run]
trials = 48
threads = 1
[output]
file = {out}
schedule = every:4
[sweep]
mask.type = complete, causal, sliding_window
model.d_qk = 1, 8
"""


def run(cmd, **kw):
    return subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, **kw)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("rcsim")
    ap.add_argument("work")
    ap.add_argument("--kills", type=int, default=8)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--launcher", default="", help="prefix for the killed runs, e.g. 'mpirun -np 2'")
    a = ap.parse_args()
    seed = a.seed if a.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    print(f"crash_resume: seed {seed} (rerun with --seed {seed} to repeat the kill times)")
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    launcher = shlex.split(a.launcher)

    def sweep_cmd(name):
        ini = os.path.join(a.work, name + ".ini")
        with open(ini, "w") as f:
            f.write(SWEEP.format(out=os.path.join(a.work, name + ".h5")))
        return [a.rcsim, "sweep", "--config", ini, "--quiet"]

    t0 = time.time()
    ref = run(sweep_cmd("reference"))
    if ref.returncode != 0:
        raise SystemExit(f"crash_resume: uninterrupted sweep failed: {ref.stderr}")
    print(f"crash_resume: uninterrupted sweep {time.time() - t0:.2f} s")

    cmd = launcher + sweep_cmd("killed")
    kills = 0
    counts = {}
    for _ in range(a.kills):
        # A new session, so that the kill reaches mpirun's children as well.
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        time.sleep(rng.uniform(0.05, 0.8))
        if p.poll() is not None:
            break  # finished before the kill
        # Mostly SIGKILL (power cut); sometimes SIGINT (Ctrl-C: the trials done so far go to
        # the checkpoint NAME.h5.partial and the rerun resumes from it).
        sig = signal.SIGINT if rng.random() < 0.3 else signal.SIGKILL
        os.killpg(p.pid, sig)
        p.wait()
        kills += 1
        counts[sig.name] = counts.get(sig.name, 0) + 1
    final = run(cmd)
    if final.returncode != 0:
        raise SystemExit(f"crash_resume: final rerun failed ({final.returncode}): {final.stderr}")
    print(f"crash_resume: killed {kills} times ({counts}), then finished")
    with h5py.File(os.path.join(a.work, "killed", "index.h5"), "r") as f:
        status = [s.decode() if isinstance(s, bytes) else s for s in f["status"][()]]
    rc = compare_sweeps.main_dirs(os.path.join(a.work, "reference"), os.path.join(a.work, "killed"))
    # The Python reader: one call loads the whole sweep as a table.
    sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
    import rcsim
    points = rcsim.load_sweep(os.path.join(a.work, "killed"), runs=True)
    table = rcsim.sweep_table(points)
    expected = [(m, q) for m in ("complete", "causal", "sliding_window") for q in (1, 8)]
    if [(p["mask.type"], p["model.d_qk"]) for p in points] != expected or len(table) != 6 \
            or list(points[0]["run"]["layer"]) != list(range(0, 61, 4)):
        print("crash_resume: load_sweep() does not return the expected table")
        rc = 1
    if set(status) != {"complete"}:
        print(f"crash_resume: index status {status}")
        rc = 1
    if rc == 0:
        shutil.rmtree(a.work, ignore_errors=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
