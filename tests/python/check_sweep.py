#!/usr/bin/env python3
"""rcsim.sweep (the command line's sweep runner through the pybind11 engine) against `rcsim run`
with a [sweep] section, value for value, and its arguments checked by rcsim._validate.

Usage: check_sweep.py RCSIM BUILD_DIR WORK_DIR

A 2 x 2 product sweep (model.tokens x mask.type) and a zip sweep: every dataset of every point's
file equals the CLI's bitwise (the stored configuration differs only in output.file); the index
lists the same points; the Dataset has the swept keys as dimensions; a rerun skips the complete
points (files untouched) and returns the index's path. Progress: a callable gets the runner's
state (the fraction by work: a 2-layer point is 180/864 of a 2 + 8 layer sweep), progress=True (the
default) writes the line on stderr, False nothing. Bad arguments raise rcsim.ConfigError
naming the argument (a TypeError too for a wrong type); a bad key or value names the key (and
the point) before anything runs. About 5 s.
"""
import contextlib
import io
import os
import shutil
import subprocess
import sys

import h5py
import numpy as np

rcsim_exe, build, work = (os.path.abspath(a) for a in sys.argv[1:4])
sys.path.insert(0, os.path.join(build, "python"))
import rcsim  # noqa: E402

shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def datasets(path):
    out = {}
    with h5py.File(path, "r") as f:
        f.visititems(lambda name, obj: out.__setitem__(name, obj[()]) if isinstance(obj, h5py.Dataset) else None)
    out.pop("config", None)  # holds output.file, which differs by design
    return out


def same_files(a, b):
    da, db = datasets(a), datasets(b)
    if sorted(da) != sorted(db):
        return False
    return all(np.asarray(da[k]).dtype == np.asarray(db[k]).dtype and
               np.array_equal(da[k], db[k], equal_nan=np.asarray(da[k]).dtype.kind == "f") for k in da)


def raises(f, *words, kind=None):
    try:
        f()
    except Exception as e:  # noqa: BLE001
        ok = isinstance(e, rcsim.ConfigError) and all(w in str(e) for w in words)
        if kind is not None:
            ok = ok and isinstance(e, kind)
        if not ok:
            print(f"  got {type(e).__name__}: {e}")
        return ok
    return False


BASE = {"model": {"dim": 2, "layers": 3}, "run": {"trials": 2}}
AXES = {"model.tokens": [3, 4], "mask.type": ["complete", "causal"]}

# 1. The product sweep against the command line's.
py_dir = os.path.join(work, "py")
ds = rcsim.sweep(py_dir, AXES, **BASE)
ini = os.path.join(work, "cli.ini")
with open(ini, "w") as f:
    f.write("[model]\ndim = 2\nlayers = 3\n[run]\ntrials = 2\n[output]\nfile = cli.h5\n"
            "[sweep]\nmodel.tokens = 3, 4\nmask.type = complete, causal\n")
r = subprocess.run([rcsim_exe, "run", "--config", "cli.ini", "--quiet"], cwd=work, capture_output=True, text=True)
check(r.returncode == 0, f"rcsim run of the sweep: {r.stderr}")
py_points, cli_points = rcsim.load_sweep(py_dir), rcsim.load_sweep(os.path.join(work, "cli"))
check([p["name"] for p in py_points] == [p["name"] for p in cli_points], "the same points in the index")
check(all(p["status"] == "complete" for p in py_points), "every point complete")
for p, q in zip(py_points, cli_points):
    check(same_files(p["file"], q["file"]), f"point {p['name']}: the files are equal dataset by dataset")
check({"model_tokens", "mask_type"} <= set(ds.dims), f"the swept keys are dimensions named as identifiers: "
      f"{dict(ds.sizes)}")
check(not any("." in str(d) for d in ds.dims), f"no dotted dimension name: {list(ds.dims)}")
check({d: ds[d].attrs.get("key") for d in ("model_tokens", "mask_type")} ==
      {"model_tokens": "model.tokens", "mask_type": "mask.type"}, "each swept dimension keeps its key in attrs['key']")
check(ds.mu.sel(model_tokens=4, mask_type="causal").shape == (2, 4), "mu of one point: [trial, layer]")
check(ds.model_tokens.values.tolist() == [3, 4], f"attribute access ds.model_tokens: {ds.model_tokens.values}")
with h5py.File(py_points[0]["file"], "r") as f:
    check(str(f.attrs["command_line"]).startswith("rcsim.sweep("), "the call is recorded in the files")

# 2. A rerun skips the complete points and returns the index.
stamps = [os.stat(p["file"]).st_mtime_ns for p in py_points]
index = rcsim.sweep(py_dir, AXES, returns="index", **BASE)
check(index == os.path.join(py_dir, "index.h5"), f"returns='index': the index's path ({index})")
check([os.stat(p["file"]).st_mtime_ns for p in py_points] == stamps, "a rerun leaves complete points untouched")

# 3. A zip sweep from a configuration file's [sweep] section plus an axis.
zip_dir = os.path.join(work, "zip")
with open(os.path.join(work, "zip.ini"), "w") as f:
    f.write("[model]\ndim = 2\nlayers = 2\n[run]\ntrials = 1\n[sweep]\nmodel.tokens = 3, 5\n")
zds = rcsim.sweep(zip_dir, {"norm.type": ["none", "layernorm"]}, config_file=os.path.join(work, "zip.ini"),
                  mode="zip")
check("point" in zds.dims and zds.sizes["point"] == 2, f"zip: a point dimension of 2 ({dict(zds.sizes)})")
check(zds["norm_type"].dims == ("point",) and zds["norm_type"].attrs.get("key") == "norm.type",
      f"zip: the swept keys are coordinates of point, named as identifiers, with their key: {list(zds.coords)}")

# 3b. Progress: a callable gets the runner's state (work-weighted fraction and ETA); the default
# progress=True writes the command line's line on stderr; progress=False writes nothing there.
states = []
rcsim.sweep(os.path.join(work, "progress"), {"model.layers": [2, 8]}, model={"dim": 2, "tokens": 3},
            run={"trials": 2}, progress=states.append)
last = states[-1] if states else {}
check(states and set(last) >= {"trials_done", "trials", "point", "points", "name", "fraction", "elapsed", "eta",
                              "line"}, f"progress=callable: dicts with the runner's state ({last})")
check(last.get("trials_done") == 4 and last.get("trials") == 4 and last.get("points") == 2 and
      last.get("fraction") == 1.0 and last.get("eta") == 0.0, f"the last state: all done ({last})")
fractions = [s["fraction"] for s in states]
check(fractions == sorted(fractions), f"the fraction never decreases: {fractions}")
# Work, not trials: a trial costs L blocks (N = 3, d = d_k = 2: 2 N d d_k + N^2 d_k + N d^2 + N^2 d
# = 72) and L + 1 measures (N d min(N, d) = 12): 2 x 72 + 3 x 12 = 180 at 2 layers, 8 x 72 + 9 x 12
# = 684 at 8, so the shallow point is 180 / 864 of the work, not half of it.
after_first = [s["fraction"] for s in states if s["trials_done"] == 2]
check(after_first and abs(after_first[-1] - 180 / 864) < 1e-12,
      f"after the shallow point: 180/864 of the work ({after_first})")
for flag in (True, False):  # the line is printed by the package (sys.stderr), so redirect_stderr sees it
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        rcsim.sweep(os.path.join(work, f"show_{flag}"), {"model.layers": [2, 3]}, model={"dim": 2, "tokens": 3},
                    run={"trials": 2}, **({} if flag else {"progress": False}))
    text = err.getvalue()
    shown = "4/4 trials, point 2/2" in text and "ETA" in text and "100%" in text
    check(shown == flag and (flag or text == ""), f"progress={flag}: the line on stderr is "
          f"{'shown' if flag else 'absent'}: {text[-300:]!r}")

# 4. Arguments checked by rcsim._validate, keys by the configuration parser.
d = os.path.join(work, "bad")
check(raises(lambda: rcsim.sweep(d, "model.tokens"), "rcsim.sweep", "axes", kind=TypeError), "axes not a dict")
check(raises(lambda: rcsim.sweep(d, {"model.tokens": []}), "axes['model.tokens']", "empty"), "an empty axis")
check(raises(lambda: rcsim.sweep(d, {"model.tokens": 4}), "axes['model.tokens']", kind=TypeError), "a scalar axis")
check(raises(lambda: rcsim.sweep(d, AXES, mode="cartesian"), "mode", "'product', 'zip'"), "a bad mode")
check(raises(lambda: rcsim.sweep(d, AXES, returns="table"), "returns", "'dataset', 'index'"), "a bad returns")
check(raises(lambda: rcsim.sweep(3, AXES), "directory", kind=TypeError), "a directory that is not a path")
check(raises(lambda: rcsim.sweep(d, AXES, force="yes"), "force", kind=TypeError), "force not a bool")
check(raises(lambda: rcsim.sweep(d, AXES, progress="bar"), "progress", "callable", kind=TypeError),
      "progress neither a bool nor a callable")
check(raises(lambda: rcsim.sweep(d, {"model.tokenz": [3, 4]}), "unknown key", "model.tokenz"), "an unknown key")
check(raises(lambda: rcsim.sweep(d), "no key to sweep"), "no axis")
check(raises(lambda: rcsim.sweep(d, AXES, output={"file": "x.h5"}), "output.file", "directory"), "output.file given")
check(raises(lambda: rcsim.sweep(d, {"model.tokens": [3, 4, 5], "mask.type": ["causal"]}, mode="zip"), "zip"),
      "zip lists of different lengths")
check(not os.path.exists(d), "nothing written for a refused sweep")
# A point whose value is out of range refuses the whole sweep before anything runs, naming it.
bad_point = os.path.join(work, "bad_point")
check(raises(lambda: rcsim.sweep(bad_point, {"mask.window": [-1, 2]}, mask={"type": "sliding_window"}),
             "mask.window=-1", "integer >= 1"), "a bad value of one point names the point and the key")
check(not os.path.exists(os.path.join(bad_point, "index.h5")), "no index for a refused sweep")

print("check_sweep:", "FAILED" if failures else "ok", f"({len(failures)} failures)" if failures else "")
sys.exit(1 if failures else 0)
