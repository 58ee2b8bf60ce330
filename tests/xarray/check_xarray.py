#!/usr/bin/python3
"""Every kind of rcsim file opened with xarray: every group, every array labelled, and label-based
selection (`.sel(layer=t)`) equal to the raw h5py arrays at the position where /layer == t.

    check_xarray.py RCSIM WORKDIR

Makes one file of each kind with the binary (a run with a log-spaced schedule, a run with the
spectrum and token snapshots, a run with a [trial, layer, token] measure (last_token_sensitivity), a sweep index, a run annotated by `rcsim analyze`, an equilibria
file, the four geometry files), then for each group of each file:
  - xr.open_dataset(path, group=g, engine="h5netcdf") succeeds;
  - every axis of every array is a coordinate of that group (no positional dimension);
and for the run files, for several recorded layers t (not equal to their position under the log
schedule), ds[m].sel(layer=t) equals f["metrics/m"][:, k] with k where f["layer"] == t, for every
measure of /metrics and /summary, and likewise for attention measures and /attention_layer.
Exit 0 if all hold, 1 with one line per failure otherwise.
"""
import os
import subprocess
import sys

import h5py
import numpy as np
import xarray as xr

RUN_INI = """[model]
tokens = 8
dim = 4
layers = 60
[mask]
type = causal
[run]
trials = 3
seed = 5
[output]
schedule = log:8
"""

SWEEP_INI = RUN_INI + """[sweep]
mode = product
mask.type = complete, causal
model.d_qk = 1, 16
"""

failures = []


def fail(msg):
    failures.append(msg)
    print("FAIL:", msg)


def rcsim(exe, *args):
    r = subprocess.run([exe, *args, "--quiet"], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"check_xarray: rcsim {' '.join(args)} failed ({r.returncode}): {r.stderr.strip()}")


def groups(path):
    names = ["/"]
    with h5py.File(path, "r") as f:
        f.visititems(lambda name, obj: names.append("/" + name) if isinstance(obj, h5py.Group) else None)
    return names


def check_labelled(path):
    for g in groups(path):
        try:
            ds = xr.open_dataset(path, group=g, engine="h5netcdf")
        except Exception as e:  # noqa: BLE001 - any failure to open is what we test for
            fail(f"{os.path.basename(path)}:{g}: xarray cannot open the group: {e}")
            continue
        with ds:
            for name, var in ds.variables.items():
                for dim in var.dims:
                    if dim not in ds.coords:
                        fail(f"{os.path.basename(path)}:{g}/{name}: axis '{dim}' has no coordinate")


def check_selection(path):
    with h5py.File(path, "r") as f:
        layers = {"layer": f["layer"][()], "attention_layer": f["attention_layer"][()]}
        raw = {g: {k: f[g][k][()] for k in f[g]} for g in ("metrics", "summary")}
        # the name of the dimension scale attached to each axis (h5py: DimensionProxy.keys())
        dims = {g: {k: [(list(d.keys()) or [None])[0] for d in f[g][k].dims] for k in f[g]}
                for g in ("metrics", "summary")}
    checked = 0
    for g in ("metrics", "summary"):
        with xr.open_dataset(path, group=g, engine="h5netcdf") as ds:
            for name, values in raw[g].items():
                if name in layers or name in ("trial", "sigma_index"):
                    continue
                axis = next((a for a in ("layer", "attention_layer") if a in dims[g][name]), None)
                if axis is None:
                    continue
                pos = dims[g][name].index(axis)
                coord = layers[axis]
                # layers whose position differs from their value (the log schedule skips some)
                for t in [int(x) for k, x in enumerate(coord) if x != k][:4] + [int(coord[0])]:
                    k = int(np.flatnonzero(coord == t)[0])
                    got = ds[name].sel({axis: t}).values
                    want = np.take(values, k, axis=pos)
                    if not np.array_equal(got, want, equal_nan=True):
                        fail(f"{os.path.basename(path)}:{g}/{name}.sel({axis}={t}) differs from the raw array")
                    checked += 1
    if checked < 20:
        fail(f"{os.path.basename(path)}: only {checked} selections checked (expected a log schedule)")
    return checked


def check_token_axis(path):
    """A measure with a token axis (last_token_sensitivity, [trial, layer, token]): xarray labels it
    (trial, layer, token) with the group's own `token` coordinate 0..N-1, .sel(layer=t, token=i) is the
    raw value, /summary/<m>_mean is [layer, token] and equals the NaN-ignoring mean over trials, and
    the package's readers (open_run, load_run) give the same arrays."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
    import rcsim
    name = "last_token_sensitivity"
    checked = 0
    with h5py.File(path, "r") as f:
        layer, raw, mean = f["layer"][()], f["metrics"][name][()], f["summary"][name + "_mean"][()]
        n, trials = int(f.attrs["tokens"]), int(f.attrs["trials"])
    if raw.shape != (trials, len(layer), n) or mean.shape != (len(layer), n):
        fail(f"{name}: shapes {raw.shape}, {mean.shape}, expected (trials, {len(layer)}, {n}) and ({len(layer)}, {n})")
        return 0
    for g, want_dims in (("metrics", ("trial", "layer", "token")), ("summary", ("layer", "token"))):
        with xr.open_dataset(path, group=g, engine="h5netcdf") as ds:
            var = ds[name if g == "metrics" else name + "_mean"]
            if var.dims != want_dims:
                fail(f"{g}/{name}: xarray dims {var.dims}, expected {want_dims}")
            if not np.array_equal(ds["token"].values, np.arange(n)):
                fail(f"{g}: the token coordinate is not 0..N-1")
            checked += 1
    ds = rcsim.open_run(path)
    for t in [int(layer[1]), int(layer[-1])]:
        k = int(np.flatnonzero(layer == t)[0])
        for i in (0, n - 1):
            if ds[name].sel(layer=t, token=i).values.tolist() != raw[:, k, i].tolist():
                fail(f"open_run: {name}.sel(layer={t}, token={i}) differs from the raw array")
            checked += 1
    if not np.allclose(np.nanmean(raw, axis=0), mean, rtol=1e-14, atol=0):
        fail(f"summary/{name}_mean is not the mean over trials")
    # At layer L the last token's output selects itself: S_{N-1}(L) = sqrt(d), the others 0.
    d = int(ds.attrs["dim"])
    if not (np.all(raw[:, -1, n - 1] == np.sqrt(d)) and np.all(raw[:, -1, : n - 1] == 0)):
        fail(f"{name} at layer L is not sqrt(d) e_(N-1)")
    if not np.array_equal(rcsim.load_run(path)["metrics"][name], raw):
        fail(f"load_run: {name} differs from the raw array")
    return checked + 3


def check_package(run, sweep):
    """The package's labelled readers: open_run and open_sweep (swept keys as dimensions) give the
    raw arrays of the right file at the right layer; loaders raise RcsimFileError, not SystemExit."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
    import rcsim
    checked = 0
    with h5py.File(run, "r") as f:
        layer, mu = f["layer"][()], f["metrics/mu"][()]
    ds = rcsim.open_run(run)
    for k in (5, len(layer) - 1):
        if not np.array_equal(ds.mu.sel(layer=int(layer[k])).values, mu[:, k]):
            fail(f"open_run: mu.sel(layer={layer[k]}) differs from the raw column {k}")
        checked += 1
    if ds.attrs.get("mask_type") != "causal":
        fail("open_run: root attributes (mask_type) missing")
    # Issue 39: every measure's long_name is a short axis label, its sentence the description;
    # open_run and load_run keep both (the registry's texts, as the file stores them).
    info = rcsim.load_run(run)["metric_info"]
    with h5py.File(run, "r") as f:
        for name, var in ds.data_vars.items():
            stored = {a: f["metrics"][name].attrs[a] for a in ("long_name", "description")}
            stored = {a: v.decode() if isinstance(v, bytes) else str(v) for a, v in stored.items()}
            if not (0 < len(var.attrs.get("long_name", "")) <= 40 and var.attrs.get("description")):
                fail(f"open_run: {name}: long_name {var.attrs.get('long_name')!r} (at most 40 characters) "
                     f"and a description are needed")
            if {a: var.attrs.get(a) for a in stored} != stored or {a: info[name].get(a) for a in stored} != stored:
                fail(f"open_run/load_run: {name}: long_name and description differ from the file's {stored}")
            checked += 1
    sw = rcsim.open_sweep(sweep)
    if set(sw.mu.dims) != {"mask_type", "model_d_qk", "trial", "layer"}:
        fail(f"open_sweep: dims {sw.mu.dims}, expected the swept keys, trial and layer")
    for p in rcsim.load_sweep(sweep):
        with h5py.File(p["file"], "r") as f:
            layer, mu = f["layer"][()], f["metrics/mu"][()]
        got = sw.mu.sel(mask_type=p["mask.type"], model_d_qk=p["model.d_qk"], layer=int(layer[6]))
        if not np.array_equal(got.values, mu[:, 6]):
            fail(f"open_sweep: mu at {p['name']}, layer {layer[6]} differs from its file")
        checked += 1
    for bad, reader in ((os.path.join(sweep, "index.h5"), rcsim.load_run), (run, rcsim.load_analysis),
                        (os.path.join(sweep, "index.h5"), rcsim.open_run)):
        try:
            reader(bad)
            fail(f"{reader.__name__}({os.path.basename(bad)}) did not refuse a file of the wrong kind")
        except rcsim.RcsimFileError:
            checked += 1
    return checked


def main():
    exe, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    for name in os.listdir(work):
        p = os.path.join(work, name)
        if os.path.isfile(p):
            os.remove(p)
    ini = os.path.join(work, "run.ini")
    with open(ini, "w") as f:
        f.write(RUN_INI)
    with open(os.path.join(work, "sweep.ini"), "w") as f:
        f.write(SWEEP_INI)
    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    run = os.path.join(work, "run.h5")
    rcsim(exe, "run", "--config", ini, f"--output.file={run}", "--force")
    example = os.path.join(work, "example.h5")
    rcsim(exe, "run", "--config", os.path.join(src, "configs", "example.ini"), "--run.trials=2",
          "--model.layers=12", "--output.schedule=log:4", f"--output.file={example}", "--force")
    sensitivity = os.path.join(work, "sensitivity.h5")  # a measure with a token axis, log schedule
    rcsim(exe, "run", "--config", ini, f"--output.file={sensitivity}", "--force", "--model.layers=20",
          "--mask.type=sliding_window", "--output.measures=last_token_sensitivity,jacobian_log_spec2,grad_x_norm")
    last = os.path.join(work, "last_token.h5")  # issue 34: the gradient measures' long_name follows metrics.readout
    rcsim(exe, "run", "--config", ini, f"--output.file={last}", "--force", "--model.layers=4",
          "--metrics.readout=last_token", "--output.measures=grad_x_norm,jacobian_log_fro2")
    with h5py.File(last, "r") as f:
        for m in ("grad_x_norm", "jacobian_log_fro2"):  # the loss is in the description (issue 39)
            text = f["metrics"][m].attrs["description"]
            text = text.decode() if isinstance(text, bytes) else str(text)
            if "1^T X(L) R" in text or "x_N(L) R" not in text:
                fail(f"{last}: /metrics/{m} description {text!r} does not state the last-token loss")
        label = f["metrics"]["jacobian_log_fro2"].attrs["long_name"]
        label = label.decode() if isinstance(label, bytes) else str(label)
        if "d(x_N(L) R)" not in label:
            fail(f"{last}: /metrics/jacobian_log_fro2 long_name {label!r} does not name the last-token output")
    analysed = os.path.join(work, "analysed.h5")
    rcsim(exe, "run", "--config", ini, f"--output.file={analysed}", "--force")
    rcsim(exe, "analyze", analysed)
    sweep = os.path.join(work, "sweep")
    rcsim(exe, "run", "--config", os.path.join(work, "sweep.ini"), f"--output.file={sweep}.h5", "--force")
    equilibria = os.path.join(work, "equilibria.h5")
    rcsim(exe, "equilibria", "--config", os.path.join(src, "configs", "equilibria_2x2.ini"), "--run.trials=8",
          f"--output.file={equilibria}", "--force")
    geometry = {
        "keys.h5": ["keys", "--keys.count=12", "--keys.dim=3"],
        "brody_map.h5": ["brody-map", "--map.count_max=6", "--map.dim_max=3", "--map.draws=2"],
        "brody_example.h5": ["brody-example", "--example.angles=12"],
        "ln_geometry.h5": ["ln-geometry", "--ln.dim=3", "--ln.samples=50", "--ln.store=10"],
    }
    if os.environ.get("RCSIM_GLPK") == "0":  # built without GLPK: no selectability LP (tests/CMakeLists.txt)
        geometry = {k: v for k, v in geometry.items() if v[0] not in ("keys", "brody-map", "brody-example")}
    for name, args in geometry.items():
        rcsim(exe, *args, f"--output.file={os.path.join(work, name)}", "--force")

    files = [run, example, analysed, sensitivity, os.path.join(sweep, "index.h5"), equilibria] + \
        [os.path.join(work, n) for n in geometry] + \
        [os.path.join(sweep, n) for n in sorted(os.listdir(sweep)) if n != "index.h5" and n.endswith(".h5")]
    for path in files:
        check_labelled(path)
    checked = sum(check_selection(p) for p in (run, example, analysed, sensitivity)) + check_package(run, sweep) + \
        check_token_axis(sensitivity)
    print(f"check_xarray: {len(files)} files opened group by group; {checked} label selections compared; "
          f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
