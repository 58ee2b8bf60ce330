#!/usr/bin/python3
"""Issue 38: the Python command-line entry points of analysis/ (python3 -m rcsim.plot,
metastability.py, the brody/ln-geometry plots, the figure and reproduction scripts) on bad input,
table-driven.

    python_entry_points.py RCSIM WORKDIR [-k SUBSTRING]

Inputs: missing, text, truncated and incomplete files (attribute complete = 0, a dataset
missing), a run of another kind, a missing measure, a measure with a token axis, an out of
range or negative trial or layer, a NaN or infinite tolerance, a series with a NaN, an output
pointed at the command's own input (also through a symbolic link), an unknown option. Each case
gets an empty directory and asserts: the exit status (2 for usage, 1 for runtime); stderr is
exactly one line, holding the expected text, never a traceback; every file that existed before
is bitwise unchanged (SHA-256); nothing is left behind but the expected outputs (no
temporaries). The good cases write their outputs. Every entry point of analysis/ runs through
rcsim.command.run (checked: each script's __main__ block). RCSIM_ANALYSIS=DIR runs the cases
against another analysis/ folder (main's, to see them fail before the fix). Exit 0 iff every case
passes.
"""
import argparse
import concurrent.futures
import glob
import hashlib
import os
import re
import shutil
import subprocess
import sys

import h5py
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ANALYSIS = os.path.abspath(os.environ.get("RCSIM_ANALYSIS", os.path.join(HERE, "..", "..", "analysis")))
PACKAGE = os.path.join(os.path.dirname(ANALYSIS), "python")   # the package rcsim beside analysis/
PY = sys.executable
PLOT = [PY, "-m", "rcsim.plot"]
META = [PY, os.path.join(ANALYSIS, "metastability.py")]
RUN_KEYS = ["--model.tokens=5", "--model.dim=3", "--model.layers=8", "--run.trials=3", "--run.seed=4",
            "--norm.type=sphere", "--output.measures=energy,last_token_sensitivity", "--quiet"]


def digest(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def snapshot(d):
    return {os.path.relpath(p, d): digest(p) for p in glob.glob(os.path.join(d, "**"), recursive=True)
            if os.path.isfile(p) and not os.path.islink(p)}


def edit(rel, fn):
    """A setup step: h5py.File(rel, 'a') given to fn."""
    def step(c):
        with h5py.File(os.path.join(c.dir, rel), "a") as f:
            fn(f)
    return step


def write(rel, data):
    def step(c):
        with open(os.path.join(c.dir, rel), "wb") as f:
            f.write(data)
    return step


def truncate(rel, size):
    def step(c):
        with open(os.path.join(c.dir, rel), "r+b") as f:
            f.truncate(size)
    return step


def symlink(target, rel):
    def step(c):
        os.symlink(target, os.path.join(c.dir, rel))
    return step


def set_attr(name, value):
    def fn(f):
        f.attrs[name] = value
    return fn


def delete(name):
    def fn(f):
        del f[name]
    return fn


def nan_at(measure, trial, layer):
    def fn(f):
        ds = f["metrics/" + measure]
        v = ds[()]
        v[trial, layer] = np.nan
        ds[...] = v
    return fn


class Ctx:
    def __init__(self, directory, rcsim_run):
        self.dir = directory
        self.rcsim_run = rcsim_run

    def copy_run(self, rel="run.h5"):
        shutil.copy(self.rcsim_run, os.path.join(self.dir, rel))


def with_run(*steps, rel="run.h5"):
    def setup(c):
        c.copy_run(rel)
        for s in steps:
            s(c)
    return setup


def two_runs(c):
    """run.h5 and b.h5, whose stored configurations differ in run.seed and model.tokens (a 2 x 2 key pair)."""
    c.copy_run("run.h5")
    c.copy_run("b.h5")
    with h5py.File(os.path.join(c.dir, "b.h5"), "a") as f:
        text = f["config"][()].decode()
        del f["config"]
        f["config"] = re.sub(r"(?m)^(seed\s*=\s*)\d+", r"\g<1>5", re.sub(r"(?m)^(tokens\s*=\s*)\d+", r"\g<1>6", text))


HEAT = ["run.h5", "b.h5", "--heatmap", "model.tokens", "run.seed"]

# (name, setup, command (a list; WORK/ is the case's directory), exit status, text on stderr,
#  outputs expected (relative paths))
CASES = [
    # rcsim.plot
    ("plot_good", with_run(), PLOT + ["run.h5", "-o", "mu.png"], 0, None, ["mu.png"]),
    ("plot_missing_file", None, PLOT + ["none.h5", "-o", "mu.png"], 2, "none.h5", []),
    ("plot_text_file", write("run.h5", b"mu = 1\n" * 50), PLOT + ["run.h5", "-o", "mu.png"], 2, "run.h5", []),
    ("plot_truncated_file", with_run(truncate("run.h5", 3000)), PLOT + ["run.h5", "-o", "mu.png"], 2, "run.h5", []),
    ("plot_incomplete_file", with_run(edit("run.h5", set_attr("complete", 0))), PLOT + ["run.h5", "-o", "mu.png"], 2,
     "incomplete", []),
    ("plot_complete_attribute_text", with_run(edit("run.h5", set_attr("complete", "yes"))),
     PLOT + ["run.h5", "-o", "mu.png"], 2, "run.h5", []),
    ("plot_no_layer_dataset", with_run(edit("run.h5", delete("layer"))), PLOT + ["run.h5", "-o", "mu.png"], 2,
     "layer", []),
    ("plot_no_metrics_group", with_run(edit("run.h5", delete("metrics"))), PLOT + ["run.h5", "-o", "mu.png"], 2,
     "metrics", []),
    ("plot_missing_measure", with_run(), PLOT + ["run.h5", "--measure", "nope", "-o", "mu.png"], 2, "nope", []),
    ("plot_token_axis_measure", with_run(), PLOT + ["run.h5", "--measure", "last_token_sensitivity", "-o", "x.png"],
     2, "last_token_sensitivity", []),
    ("plot_heatmap_good", two_runs, PLOT + HEAT + ["-o", "h.png"], 0, None, ["h.png"]),
    ("plot_heatmap_missing_measure", two_runs, PLOT + HEAT + ["--measure", "nope", "-o", "h.png"], 2, "nope", []),
    ("plot_heatmap_layer_out_of_range", two_runs, PLOT + HEAT + ["--layer", "99", "-o", "h.png"], 2, "--layer", []),
    ("plot_heatmap_negative_layer", two_runs, PLOT + HEAT + ["--layer", "-1", "-o", "h.png"], 2, "--layer", []),
    ("plot_output_is_its_input", with_run(rel="run.png"), PLOT + ["run.png", "-o", "run.png"], 2, "input", []),
    ("plot_output_links_to_input", with_run(symlink("run.h5", "out.png")), PLOT + ["run.h5", "-o", "out.png"], 2,
     "out.png", []),
    ("plot_second_output_is_input", with_run(rel="run.svg"), PLOT + ["run.svg", "-o", "a.png", "-o", "run.svg"], 2,
     "input", []),
    ("plot_directory_without_index", lambda c: os.mkdir(os.path.join(c.dir, "d")), PLOT + ["d", "-o", "a.png"], 2,
     "index.h5", []),
    ("plot_unknown_option", with_run(), PLOT + ["run.h5", "-o", "a.png", "--colour", "red"], 2, "--colour", []),
    # metastability.py
    ("meta_good", with_run(), META + ["run.h5", "--rtol", "0.5"], 0, None, []),
    ("meta_missing_file", None, META + ["none.h5"], 2, "none.h5", []),
    ("meta_text_file", write("run.h5", b"energy 1 2 3\n"), META + ["run.h5"], 2, "run.h5", []),
    ("meta_truncated_file", with_run(truncate("run.h5", 3000)), META + ["run.h5"], 2, "run.h5", []),
    ("meta_incomplete_file", with_run(edit("run.h5", set_attr("complete", 0))), META + ["run.h5"], 2,
     "incomplete", []),
    ("meta_no_layer_dataset", with_run(edit("run.h5", delete("layer"))), META + ["run.h5"], 2, "layer", []),
    ("meta_missing_measure", with_run(), META + ["run.h5", "--measure", "clusters_99"], 2, "clusters_99", []),
    ("meta_token_axis_measure", with_run(), META + ["run.h5", "--measure", "last_token_sensitivity"], 2,
     "last_token_sensitivity", []),
    ("meta_trial_out_of_range", with_run(), META + ["run.h5", "--trial", "3"], 2, "--trial", []),
    ("meta_negative_trial", with_run(), META + ["run.h5", "--trial", "-1"], 2, "--trial", []),
    ("meta_fractional_trial", with_run(), META + ["run.h5", "--trial", "0.5"], 2, "--trial", []),
    ("meta_nan_rtol", with_run(), META + ["run.h5", "--rtol", "nan"], 2, "--rtol", []),
    ("meta_negative_rtol", with_run(), META + ["run.h5", "--rtol", "-0.1"], 2, "--rtol", []),
    ("meta_inf_min_duration", with_run(), META + ["run.h5", "--min-duration", "inf"], 2, "--min-duration", []),
    ("meta_nan_in_series", with_run(edit("run.h5", nan_at("energy", 1, 4))), META + ["run.h5", "--trial", "1"], 2,
     "sample 4", []),
    ("meta_other_kind_of_file", with_run(edit("run.h5", set_attr("filetype", "rcsim-sweep-index"))),
     META + ["run.h5"], 2, "rcsim-run", []),
    # the plots of the geometry commands' files
    ("brody_map_text_file", write("map.h5", b"not hdf5"),
     [PY, os.path.join(ANALYSIS, "plot_brody_map.py"), "map.h5", "-o", "m.png"], 2, "map.h5", []),
    ("brody_example_run_file", with_run(),
     [PY, os.path.join(ANALYSIS, "plot_brody_example.py"), "run.h5", "-o", "m.png"], 2, "rcsim-brody-example", []),
    ("ln_ellipse_missing_file", None,
     [PY, os.path.join(ANALYSIS, "plot_ln_ellipse.py"), "g.h5", "-o", "m.png"], 2, "g.h5", []),
    # the figure and reproduction scripts' command lines
    ("figure2_unknown_option", None, [PY, os.path.join(ANALYSIS, "figure2.py"), "--nonsense"], 2, "--nonsense", []),
    ("particles_staircase_bad_perturb", None,
     [PY, os.path.join(ANALYSIS, "particles_staircase.py"), "--data", "d", "--out", "o", "--perturb", "x"], 2,
     "--perturb", []),
    ("figure2_missing_rcsim", None, [PY, os.path.join(ANALYSIS, "figure2.py"), "--tiny", "--rcsim", "no-rcsim",
                                     "--data", "d", "--out", "d/f"], 2, "no-rcsim", []),  # a usage error (issue 39: the engine lookup)
]


def run_case(case, work, rcsim_run):
    name, setup, cmd, status, text, outputs = case
    d = os.path.join(work, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    c = Ctx(d, rcsim_run)
    if setup:
        setup(c)
    before = snapshot(d)
    links = {p: os.readlink(os.path.join(d, p)) for p in os.listdir(d) if os.path.islink(os.path.join(d, p))}
    env = dict(os.environ, PYTHONPATH=PACKAGE, MPLBACKEND="Agg")
    env.pop("RCSIM_TRACEBACK", None)
    r = subprocess.run(cmd, cwd=d, capture_output=True, text=True, env=env, timeout=300)
    err = r.stderr.strip().splitlines()
    problems = []
    if r.returncode != status:
        problems.append(f"exit {r.returncode}, expected {status}")
    if "Traceback" in r.stderr:
        problems.append("a traceback")
    if status != 0 and len(err) != 1:
        problems.append(f"{len(err)} stderr lines, expected 1")
    if text and not any(text in line for line in err):
        problems.append(f"no stderr line holds '{text}'")
    after = snapshot(d)
    changed = [p for p in before if after.get(p) != before[p]]
    if changed:
        problems.append(f"changed or removed: {changed}")
    new = sorted(set(after) - set(before) - set(outputs))
    if new:
        problems.append(f"left behind: {new}")
    missing = [p for p in outputs if p not in after]
    if missing:
        problems.append(f"not written: {missing}")
    for p, target in links.items():
        if not os.path.islink(os.path.join(d, p)) or os.readlink(os.path.join(d, p)) != target:
            problems.append(f"the link {p} was replaced")
    if problems:
        return f"FAIL {name}: {'; '.join(problems)}\n    stderr: {r.stderr.strip()[-600:]}"
    shutil.rmtree(d)
    return None


def wrapped_entry_points():
    """Every script of analysis/ with a __main__ block (and rcsim/plot.py) ends it through command.run."""
    out = []
    for path in sorted(glob.glob(os.path.join(ANALYSIS, "*.py")) + [os.path.join(PACKAGE, "rcsim", "plot.py")]):
        with open(path, encoding="utf-8") as f:
            text = f.read()
        if 'if __name__ == "__main__":' in text:
            block = text.split('if __name__ == "__main__":', 1)[1]
            if "run(main" not in block and "run_command(main" not in block:
                out.append(f"FAIL {os.path.basename(path)}: its __main__ block does not go through command.run")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("rcsim")
    ap.add_argument("work")
    ap.add_argument("-k", default="", help="only the cases whose name holds this text")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    rcsim_run = os.path.join(os.path.abspath(a.work), "reference_run.h5")
    subprocess.run([a.rcsim, "run", *RUN_KEYS, f"--output.file={rcsim_run}", "--force"], check=True)
    failures = wrapped_entry_points()
    cases = [c for c in CASES if a.k in c[0]]
    # One Python per case, most of its time spent importing: the cases run side by side.
    with concurrent.futures.ThreadPoolExecutor(max_workers=min(4, os.cpu_count() or 1)) as pool:
        results = list(pool.map(lambda case: run_case(case, os.path.abspath(a.work), rcsim_run), cases))
    failures += [r for r in results if r]
    for f in failures:
        print(f)
    print(f"python entry points: {len(cases) - len([f for f in failures if 'block' not in f])} of {len(cases)} "
          f"cases pass; {'every' if not wrapped_entry_points() else 'not every'} entry point wrapped")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
