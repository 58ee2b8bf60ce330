#!/usr/bin/env python3
"""rcsim.simulate (the pybind11 engine) against the file `rcsim run` writes, value for value.

Usage: check_simulate.py RCSIM BUILD_DIR WORK_DIR

For several configurations (the key defaults; keys as a dict and as section dicts; a
configuration file with spectrum and token snapshots; a log schedule with attention matrices;
two threads): every dataset of the CLI's file equals the same dataset of the in-memory image
bitwise (NaN where NaN), and for every group the Dataset of simulate() equals open_run() of the
file (np.array_equal on every variable and coordinate, same dims). Also: the same result for
run.threads 1 and 2; a bad key raises rcsim.ConfigError naming it (with the did-you-mean hint);
a bad value names the key; a [sweep] is refused; the GIL is released while the engine runs (a
Python thread keeps running); Ctrl-C (SIGINT) stops a run with KeyboardInterrupt.
"""
import os
import signal
import subprocess
import sys
import threading
import time

import h5py
import numpy as np

rcsim_exe, build, work = sys.argv[1:4]
here = os.path.dirname(os.path.abspath(__file__))
repo = os.path.normpath(os.path.join(here, "..", ".."))
# The build tree's package (build/python/rcsim: the sources linked beside the engine), as in
# `PYTHONPATH=build/python`; the package searches nowhere else for its engine.
sys.path.insert(0, os.path.join(build, "python"))
import rcsim  # noqa: E402
if not os.path.samefile(os.path.dirname(rcsim.__file__), os.path.join(build, "python", "rcsim")):
    sys.exit(f"check_simulate: imported {rcsim.__file__}, expected the build tree's package")
from rcsim.engine import configuration_arguments  # noqa: E402

os.makedirs(work, exist_ok=True)
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def same(a, b):
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype.kind == "f":
        return np.array_equal(a, b, equal_nan=True)
    return np.array_equal(a, b)


def datasets(f):
    out = {}
    f.visititems(lambda name, obj: out.__setitem__(name, obj[()]) if isinstance(obj, h5py.Dataset) else None)
    return out


def groups(f):
    names = ["/"]
    f.visititems(lambda name, obj: names.append(name) if isinstance(obj, h5py.Group) else None)
    return names


def cli_args(config_file, keys, sections):
    args = configuration_arguments(keys, **sections)
    return ([rcsim_exe, "run"] + (["--config", config_file] if config_file else []) + args)


CASES = [
    ("key defaults", None, {}, {}),
    ("keys dict", None, {"model.dim": 16, "model.tokens": 12, "mask.type": "causal", "norm.type": "layernorm",
                         "run.trials": 3, "model.d_qk": "1/64"}, {}),
    ("section dicts", None, None, {"model": {"tokens": 10, "dim": 6, "layers": 12, "heads": 2},
                                   "mask": {"type": "sliding_window", "window": 2},
                                   "weights": {"v": "orthogonal"}, "run": {"trials": 4, "seed": 7}}),
    ("config file", os.path.join(repo, "configs", "example.ini"),
     {"model.layers": 6, "run.trials": 3, "model.tokens": 16}, {}),
    ("log schedule, attention, 2 threads", None,
     {"output.schedule": "log:3", "model.layers": 40, "mask.type": "unidirectional_sliding_window",
      "mask.window": 2, "output.attention": True, "run.threads": 2, "run.trials": 5, "norm.type": "sphere"}, {}),
    ("full Jacobian spectral norm (forward mode)", None,
     {"model.tokens": 6, "model.dim": 4, "model.layers": 4, "norm.type": "layernorm", "norm.position": "pre",
      "residual.alpha": 1, "mlp.width": 5, "run.trials": 2, "metrics.power_iterations": 30,
      "output.measures": "jacobian_log_spec2,jacobian_log_spec2_full"}, {}),
]

for i, (name, config_file, keys, sections) in enumerate(CASES):
    out = os.path.join(work, f"case{i}.h5")
    if os.path.exists(out):
        os.remove(out)
    # The same keys for both, output.file included (it is part of the stored /config; in memory it
    # only names the image).
    keys = dict(keys or {}, **{"output.file": out})
    args = cli_args(config_file, keys, sections) + ["--quiet", "--force"]
    r = subprocess.run(args, capture_output=True, text=True)
    check(r.returncode == 0, f"{name}: rcsim run failed: {r.stderr.strip()}")
    if r.returncode != 0:
        continue
    image = rcsim.simulate_image(config_file, keys, **sections)
    import io
    with h5py.File(out, "r") as a, h5py.File(io.BytesIO(image), "r") as b:
        da, db = datasets(a), datasets(b)
        check(sorted(da) == sorted(db), f"{name}: datasets differ: {sorted(set(da) ^ set(db))}")
        for k in da:
            if k in db:
                check(same(da[k], db[k]), f"{name}: dataset /{k} differs")
        skip = {"created_utc", "command_line"}
        for k, v in a.attrs.items():
            if k not in skip:
                check(k in b.attrs and same(v, b.attrs[k]), f"{name}: root attribute {k} differs")
        group_names = [g for g in groups(a) if g == "/" or any(isinstance(x, h5py.Dataset) for x in a[g].values())]
    n_vars = 0
    for g in group_names:
        ds_file = rcsim.open_run(out, g)
        ds_mem = rcsim.simulate(config_file, keys, group=g, **sections)
        check(sorted(ds_file.variables) == sorted(ds_mem.variables), f"{name}: group {g}: variables differ")
        check(dict(ds_file.sizes) == dict(ds_mem.sizes), f"{name}: group {g}: dims differ")
        for v in ds_file.variables:
            if v in ds_mem.variables:
                n_vars += 1
                check(ds_file[v].dims == ds_mem[v].dims and same(ds_file[v].values, ds_mem[v].values),
                      f"{name}: group {g}: variable {v} differs")
    print(f"{name}: {len(da)} datasets bitwise equal, {n_vars} xarray variables in {len(group_names)} groups equal")

# run.threads does not change the result.
# The forward-mode measure comes through simulate() as a (trial, layer) variable with its attributes.
full = rcsim.simulate(keys=CASES[-1][2])
check("jacobian_log_spec2_full" in full.data_vars and full["jacobian_log_spec2_full"].dims == ("trial", "layer"),
      "simulate: jacobian_log_spec2_full missing or not (trial, layer)")
check(bool(np.all(np.isfinite(full["jacobian_log_spec2_full"].values))), "simulate: jacobian_log_spec2_full not finite")

one = rcsim.simulate(keys={"run.trials": 6, "run.threads": 1, "model.layers": 20})
two = rcsim.simulate(keys={"run.trials": 6, "run.threads": 2, "model.layers": 20})
check(all(same(one[v].values, two[v].values) for v in one.data_vars), "run.threads 1 and 2 differ")

# Configuration errors: a Python exception naming the key.
for keys, words in [({"model.dims": 3}, ["model.dims", "model.dim"]),
                    ({"mask.type": "bogus"}, ["mask.type", "bogus"]),
                    ({"model.tokens": 0}, ["model.tokens"])]:
    try:
        rcsim.simulate(keys=keys)
        check(False, f"{keys}: no exception")
    except rcsim.ConfigError as e:
        check(isinstance(e, ValueError) and all(w in str(e) for w in words), f"{keys}: message {e!r} lacks {words}")
try:
    rcsim.simulate(os.path.join(repo, "configs", "default.ini"))
    check(False, "a [sweep] configuration was run")
except rcsim.ConfigError as e:
    check("sweep" in str(e), f"sweep refusal: {e}")
try:
    rcsim.simulate(model=16)
    check(False, "model=16 accepted")
except TypeError:
    pass

# The GIL is released: a Python thread runs while the engine computes.
ticks = [0]
done = threading.Event()


def count():
    while not done.is_set():
        ticks[0] += 1
        time.sleep(0.001)


t = threading.Thread(target=count)
t.start()
start = time.time()
rcsim.simulate(keys={"model.tokens": 64, "model.dim": 32, "model.layers": 150, "run.trials": 4, "run.threads": 1})
elapsed = time.time() - start
done.set()
t.join()
print(f"GIL: {ticks[0]} ticks of a Python thread during a {elapsed:.2f} s simulate()")
check(elapsed < 0.05 or ticks[0] >= 10, f"the Python thread ran only {ticks[0]} times in {elapsed:.2f} s")

# Ctrl-C: SIGINT during a long run raises KeyboardInterrupt (the run stops between layers).
timer = threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGINT))
timer.start()
start = time.time()
try:
    rcsim.simulate(keys={"model.tokens": 64, "model.dim": 32, "model.layers": 100000, "run.trials": 1})
    check(False, "SIGINT did not stop simulate()")
except KeyboardInterrupt:
    check(time.time() - start < 30, "SIGINT took too long")
timer.cancel()

if failures:
    print(f"{len(failures)} failures")
    sys.exit(1)
print("rcsim.simulate equals the CLI's file for every case")
