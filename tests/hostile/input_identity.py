#!/usr/bin/python3
"""Issue 22: a run's identity includes the content of every file it reads, table-driven.

    input_identity.py RCSIM WORKDIR [-k SUBSTRING]

For each input key (init.file, weights.file, mask.file) a complete run, then the file's content
changed in place (same path, same shapes): a rerun is refused (exit 2, as for a changed
configuration, one line naming the key and the file) and leaves the output as it was; with
--force it recomputes and the new output records the new SHA-256; an unchanged input is still
skipped (the output untouched); a sweep point whose input changed is a changed point; a killed
run's checkpoint is not resumed after the input changed (the result equals a fresh run's on the
new input, bit for bit). Exit 0 iff every case passes.
"""
import argparse
import hashlib
import os
import shutil
import subprocess
import sys

import h5py
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fuzz_files import make_checkpoint  # noqa: E402

N, D = 6, 4
BASE = ["--model.tokens=6", "--model.dim=4", "--model.layers=10", "--run.trials=3", "--run.threads=1"]


def x0(path, variant, n=N, d=D):
    with h5py.File(path, "w") as f:
        f["X0"] = np.linspace(0.1, 1.0, n * d).reshape(n, d) * (1.0 if variant == 1 else -2.0)


def wq(path, variant, n=N, d=D):
    with h5py.File(path, "w") as f:
        f["W_Q"] = np.eye(d) * (1.0 if variant == 1 else 3.0)


def mask(path, variant, n=N, d=D):
    with h5py.File(path, "w") as f:
        f["mask"] = np.ones((n, n), "u1") if variant == 1 else np.tril(np.ones((n, n), "u1"))


# (key, the keys that make a run read it, the writer of its two contents)
INPUTS = [
    ("init.file", ["--init.type=file", "--init.file=in.h5"], x0),
    ("weights.file", ["--weights.q=file", "--weights.file=in.h5"], wq),
    ("mask.file", ["--mask.type=custom", "--mask.file=in.h5"], mask),
]


def sha(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def rcsim(exe, d, args):
    return subprocess.run([exe] + args, cwd=d, capture_output=True, text=True, errors="surrogateescape", timeout=600)


def stored_digests(path):
    with h5py.File(path, "r") as f:
        v = f["config"].attrs.get("input_sha256")
    return v.decode() if isinstance(v, bytes) else v


def fresh(work, name):
    d = os.path.join(work, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    return d


def rerun_case(exe, work, key, keys, writer, mode):
    """mode: 'refused' (content changed, no --force), 'force' (changed, --force), 'unchanged'."""
    d = fresh(work, f"{key}_{mode}")
    writer(os.path.join(d, "in.h5"), 1)
    args = ["run", "--output.file=run.h5"] + BASE + keys
    r = rcsim(exe, d, args + ["--quiet"])
    if r.returncode != 0:
        return [f"setup run failed: {r.stderr.strip()}"]
    before, mtime = sha(os.path.join(d, "run.h5")), os.stat(os.path.join(d, "run.h5")).st_mtime_ns
    if mode != "unchanged":
        writer(os.path.join(d, "in.h5"), 2)
    r = rcsim(exe, d, args + (["--force"] if mode == "force" else []))
    problems, lines = [], [ln for ln in r.stderr.splitlines() if ln.strip()]
    after = sha(os.path.join(d, "run.h5"))
    if mode == "refused":
        if r.returncode != 2:
            problems.append(f"exit {r.returncode}, expected 2 (as for a changed configuration)")
        want = f"the content of key '{key}' ('in.h5') changed"
        if len(lines) != 1 or want not in lines[0] or "--force" not in lines[0]:
            problems.append(f"expected one line naming {want!r} and --force, got {r.stderr.strip()!r}")
        if after != before:
            problems.append("the output was changed")
    elif mode == "force":
        if r.returncode != 0:
            problems.append(f"exit {r.returncode}, expected 0")
        if after == before:
            problems.append("not recomputed")
        got = stored_digests(os.path.join(d, "run.h5"))
        if got != f"{key} = {sha(os.path.join(d, 'in.h5'))}\n":
            problems.append(f"/config@input_sha256 = {got!r}, expected the new file's digest")
    else:
        if r.returncode != 0:
            problems.append(f"exit {r.returncode}, expected 0: {r.stderr.strip()}")
        if after != before or os.stat(os.path.join(d, "run.h5")).st_mtime_ns != mtime:
            problems.append("an unchanged input's complete output was recomputed (not skipped)")
    return problems


def sweep_case(exe, work, key, keys, writer):
    """A complete sweep of two points reading the file; the content changed: refused naming it."""
    d = fresh(work, f"{key}_sweep_point")
    writer(os.path.join(d, "in.h5"), 1)
    with open(os.path.join(d, "sweep.ini"), "w") as f:
        f.write("[output]\nfile = sw/p.h5\n[sweep]\nrun.seed = 1, 2\n")
    args = ["run", "--config", "sweep.ini"] + BASE + keys
    r = rcsim(exe, d, args + ["--quiet"])
    if r.returncode != 0:
        return [f"setup sweep failed: {r.stderr.strip()}"]
    before = {n: sha(os.path.join(d, "sw", "p", n)) for n in os.listdir(os.path.join(d, "sw", "p"))}
    writer(os.path.join(d, "in.h5"), 2)
    r = rcsim(exe, d, args)
    problems = []
    if r.returncode != 2:
        problems.append(f"exit {r.returncode}, expected 2")
    if f"the content of key '{key}' ('in.h5') changed" not in r.stderr:
        problems.append(f"no message naming {key}: {r.stderr.strip()!r}")
    after = {n: sha(os.path.join(d, "sw", "p", n)) for n in os.listdir(os.path.join(d, "sw", "p"))}
    if after != before:
        problems.append("sweep files changed")
    return problems


def checkpoint_case(exe, work, key, keys, writer):
    """A killed run leaves a checkpoint; the input changes; the rerun does not resume the old
    trials: its result equals a fresh run's on the new content, bit for bit."""
    d = fresh(work, f"{key}_checkpoint")
    n, dim = 12, 6
    writer(os.path.join(d, "in.h5"), 1, n, dim)
    sections = {}  # the keys as INI sections: "--init.type=file" -> [init] type = file
    for k in keys:
        name, value = k[2:].split("=")
        sections.setdefault(name.split(".")[0], []).append(f"{name.split('.')[1]} = {value}\n")
    ini = (f"[model]\ntokens = {n}\ndim = {dim}\nlayers = 300\n"
           "[run]\ntrials = 100\nthreads = 1\n[output]\nfile = cp.h5\n")
    ini += "".join(f"[{s}]\n" + "".join(v) for s, v in sections.items())
    with open(os.path.join(d, "ck.ini"), "w") as f:
        f.write(ini)
    make_checkpoint(exe, d, "ck.ini", "cp.h5")
    writer(os.path.join(d, "in.h5"), 2, n, dim)
    problems = []
    r = rcsim(exe, d, ["run", "--config", "ck.ini"])
    if r.returncode != 0:
        return [f"rerun exit {r.returncode}: {r.stderr.strip()}"]
    if "resuming" in r.stderr:
        problems.append(f"resumed the old trials: {r.stderr.strip()!r}")
    if f"checkpoint of other input files (the content of key '{key}' ('in.h5') changed" not in r.stderr:
        problems.append(f"no warning naming {key} that the checkpoint was discarded: {r.stderr.strip()!r}")
    r = rcsim(exe, d, ["run", "-q", "--config", "ck.ini", "--output.file=fresh.h5"])
    if r.returncode != 0:
        return problems + [f"fresh run exit {r.returncode}: {r.stderr.strip()}"]
    with h5py.File(os.path.join(d, "cp.h5"), "r") as a, h5py.File(os.path.join(d, "fresh.h5"), "r") as b:
        if not np.array_equal(a["metrics/mu"][()], b["metrics/mu"][()], equal_nan=True):
            problems.append("/metrics/mu differs from a fresh run on the new content (old trials mixed in)")
    return problems


EQ_INI = ("[model]\ntokens = 3\ndim = 2\nlayers = 200\n[norm]\ntype = sphere\n[weights]\nq = zero\nk = zero\n"
          "v = identity\n[init]\ntype = sphere\n[mask]\ntype = custom\nfile = in.h5\n[run]\ntrials = 4\n"
          "[output]\nfile = eq.h5\n")


def equilibria_case(exe, work, changed):
    """`rcsim equilibria` with a custom mask: an unchanged mask.file skips the complete file; a
    changed one recomputes it (as a changed configuration does for equilibria) and records the
    new digest."""
    d = fresh(work, f"equilibria_mask_{'changed' if changed else 'unchanged'}")
    mask(os.path.join(d, "in.h5"), 1, 3)
    with open(os.path.join(d, "eq.ini"), "w") as f:
        f.write(EQ_INI)
    r = rcsim(exe, d, ["equilibria", "-q", "--config", "eq.ini"])
    if r.returncode != 0:
        return [f"setup failed: {r.stderr.strip()}"]
    before = sha(os.path.join(d, "eq.h5"))
    if changed:
        mask(os.path.join(d, "in.h5"), 2, 3)
    r = rcsim(exe, d, ["equilibria", "--config", "eq.ini"])
    problems = [] if r.returncode == 0 else [f"exit {r.returncode}: {r.stderr.strip()}"]
    skipped = "complete with the same configuration: skipped" in r.stderr
    if changed and (skipped or sha(os.path.join(d, "eq.h5")) == before):
        problems.append("a complete file of the old mask.file content was kept (skipped)")
    if not changed and (not skipped or sha(os.path.join(d, "eq.h5")) != before):
        problems.append("an unchanged input's complete file was not skipped")
    got = stored_digests(os.path.join(d, "eq.h5"))
    if got != f"mask.file = {sha(os.path.join(d, 'in.h5'))}\n":
        problems.append(f"/config@input_sha256 = {got!r}, expected the mask file's digest")
    return problems


def cases():
    out = []
    for key, keys, writer in INPUTS:
        for mode in ("refused", "force", "unchanged"):
            out.append((f"{key}_{mode}",
                        lambda e, w, k=key, ks=keys, wr=writer, m=mode: rerun_case(e, w, k, ks, wr, m)))
        out.append((f"{key}_sweep_point", lambda e, w, k=key, ks=keys, wr=writer: sweep_case(e, w, k, ks, wr)))
        out.append((f"{key}_checkpoint", lambda e, w, k=key, ks=keys, wr=writer: checkpoint_case(e, w, k, ks, wr)))
    out.append(("equilibria_mask_changed", lambda e, w: equilibria_case(e, w, True)))
    out.append(("equilibria_mask_unchanged", lambda e, w: equilibria_case(e, w, False)))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("rcsim")
    ap.add_argument("work")
    ap.add_argument("-k", default="", help="run only cases whose name contains this")
    a = ap.parse_args()
    exe = os.path.abspath(a.rcsim)
    os.makedirs(a.work, exist_ok=True)
    ok, n = True, 0
    for name, case in cases():
        if a.k not in name:
            continue
        n += 1
        problems = case(exe, a.work)
        print(f"[{'ok' if not problems else 'FAIL'}] {name}" + "".join("\n    " + p for p in problems))
        ok &= not problems
    print(f"input_identity: {n} cases, {'all passed' if ok else 'FAILURES'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
