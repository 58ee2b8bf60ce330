#!/usr/bin/python3
"""Issue 39 ("one build"): the analysis scripts find the rcsim executable without a build tree.

    engine_lookup.py RCSIM WORKDIR

A copy of analysis/ and python/rcsim/ (the figure scripts, particles_common.py and the package's .py files, no
build/ beside it) with configs/ linked in is run three ways (rcsim.command.rcsim_executable):

1. Only a pip-installed engine on PATH: a folder holding `rcsim`, a wrapper that logs its
   arguments and execs RCSIM (as pip's console script execs the package's executable), and
   nothing else on PATH. figure2.py --tiny must run through it (the log shows its runs) and write
   its figure; particles_causal.py --help must not need an engine.
   scripts/run-default.sh must run the sweep through it and plot it, building nothing.
2. Neither a build tree nor rcsim on PATH: figure2.py --tiny, particles_causal.py --tiny and
   scripts/geometry-figures.sh exit 2 with exactly one line on stderr that says how to get rcsim
   (`bash scripts/setup.sh`, `pip install .`), no traceback, no FileNotFoundError.
3. --rcsim naming a missing file: exit 2, one line naming it.

Skipped (77) where /usr/bin holds an rcsim (an installed one would be found beside the Python).
Takes about 10 s. Exit 0 iff every case passes.
"""
import os
import shutil
import stat
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
PY = "/usr/bin/python3"


def copy_tree(work):
    """WORK/root: analysis/*.py, python/rcsim/*.py (plain copies: no bin/ and no engine) and a link to configs/."""
    root = os.path.join(work, "root")
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(os.path.join(root, "analysis"))
    os.makedirs(os.path.join(root, "python", "rcsim"))
    for sub in ("analysis", os.path.join("python", "rcsim")):
        for name in os.listdir(os.path.join(REPO, sub)):
            if name.endswith(".py"):
                shutil.copy(os.path.join(REPO, sub, name), os.path.join(root, sub, name))
    shutil.copy(os.path.join(REPO, "VERSION"), os.path.join(root, "VERSION"))
    os.makedirs(os.path.join(root, "scripts"))
    for name in ("run-default.sh", "geometry-figures.sh"):
        shutil.copy(os.path.join(REPO, "scripts", name), os.path.join(root, "scripts", name))
    os.symlink(os.path.join(REPO, "configs"), os.path.join(root, "configs"))
    return root


def fake_bin(work, rcsim):
    """WORK/bin/rcsim: logs its arguments to WORK/bin/calls.log, then execs the real executable."""
    folder = os.path.join(work, "bin")
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "rcsim")
    with open(path, "w") as f:
        f.write(f"#!/bin/sh\necho \"$*\" >> '{folder}/calls.log'\nexec '{rcsim}' \"$@\"\n")
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return folder


def run(root, path, *argv):
    """argv[0] a Python script (run by /usr/bin/python3) or a bash script (by /bin/bash, with
    /usr/bin:/bin after `path` for its tools), with PATH = `path`."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(PATH=path, MPLBACKEND="Agg")
    if argv[0].endswith(".sh"):
        env["PATH"] = os.pathsep.join([path, "/usr/bin", "/bin"])
        return subprocess.run(["/bin/bash", *argv], cwd=root, env=env, capture_output=True, text=True, timeout=120)
    return subprocess.run([PY, *argv], cwd=root, env=env, capture_output=True, text=True, timeout=120)


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: engine_lookup.py RCSIM WORKDIR")
    rcsim, work = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    if os.path.exists("/usr/bin/rcsim"):
        print("engine_lookup: /usr/bin/rcsim exists (an installed rcsim beside the Python): skipped")
        return 77
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    root = copy_tree(work)
    empty = os.path.join(work, "empty")
    os.makedirs(empty)
    failures = []

    def check(ok, what, r=None):
        print("ok  " if ok else "FAIL", what)
        if not ok:
            failures.append(what)
            if r is not None:
                print(f"     exit {r.returncode}; stderr: {r.stderr[-1500:]!r}")

    # 1. Only the pip-installed engine on PATH.
    folder = fake_bin(work, rcsim)
    data = os.path.join(work, "data-path")
    r = run(root, folder, "analysis/figure2.py", "--tiny", "--data", data, "--out", os.path.join(data, "figure2"))
    log = os.path.join(folder, "calls.log")
    calls = open(log).read().splitlines() if os.path.exists(log) else []
    check(r.returncode == 0, "figure2.py --tiny runs with only rcsim on PATH (no build tree)", r)
    check(any(c.startswith("run ") for c in calls), f"its runs went through the rcsim on PATH ({len(calls)} calls)")
    check(os.path.isfile(os.path.join(data, "figure2.png")), "it wrote its figure")
    r = run(root, empty, "analysis/particles_causal.py", "--help")
    check(r.returncode == 0 and "--rcsim" in r.stdout, "particles_causal.py --help needs no engine", r)

    # run-default.sh: the rcsim on PATH, no build (setup.sh would install packages and compile).
    open(log, "w").close()
    r = run(root, folder, "scripts/run-default.sh", "--run.trials=2", "--model.layers=4")
    calls = open(log).read().splitlines()
    check(r.returncode == 0 and "using " + os.path.join(folder, "rcsim") in r.stdout
          and calls and calls[0].startswith("run --config configs/default.ini")
          and os.path.isfile(os.path.join(root, "data", "default", "collapse.png")) and "setup:" not in r.stdout,
          "run-default.sh runs the rcsim on PATH and builds nothing", r)

    # 2. Neither: one line saying how to get rcsim, exit 2.
    r = run(root, empty, "scripts/geometry-figures.sh", os.path.join(work, "geometry"), "tiny")
    check(r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "no rcsim executable" in r.stderr
          and "pip install ." in r.stderr, "geometry-figures.sh without any rcsim: exit 2, one line", r)
    data = os.path.join(work, "data-none")
    for argv in (["analysis/figure2.py", "--tiny", "--data", data, "--out", os.path.join(data, "figure2")],
                 ["analysis/particles_causal.py", "--tiny", "--data", data, "--out", os.path.join(data, "causal")]):
        r = run(root, empty, *argv)
        lines = r.stderr.strip().splitlines()
        check(r.returncode == 2 and len(lines) == 1 and "no rcsim executable" in r.stderr
              and "scripts/setup.sh" in r.stderr and "pip install ." in r.stderr
              and "Traceback" not in r.stderr and "FileNotFoundError" not in r.stderr,
              f"{argv[0]} without any rcsim: exit 2, one line saying how to get it", r)

    # 3. --rcsim naming a file that is not there.
    missing = os.path.join(work, "no-such-rcsim")
    r = run(root, folder, "analysis/figure2.py", "--tiny", "--rcsim", missing, "--data", data,
            "--out", os.path.join(data, "figure2"))
    check(r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and missing in r.stderr,
          "--rcsim naming a missing file: exit 2, one line naming it", r)

    if failures:
        print(f"engine_lookup: {len(failures)} failure(s)")
        return 1
    print("engine_lookup: all passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
