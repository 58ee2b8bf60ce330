"""What rcsim.plot draws, from any of the forms a user holds: run files and sweep directories (paths),
a `simulate()` result (an xarray.Dataset of /metrics, or the dict of group="all"), an `open_run` or
`open_sweep` Dataset (its swept keys are dimensions, or coordinates of `point`), the dict of arrays
`rcsim.measures` returns (the last axis is the layer, every leading axis a trial), a list of any of
these, or a dict {label: any of these} (the label names the curve).

Each becomes one or more "runs" in load_run's form ({"layer", "attention_layer", "metrics" [trial,
layer], "metric_info", and "values": the configuration as {"section.key": text}}) so that one code
draws them all.
"""
import os

import numpy as np

# The dimensions of a run's measures; any other dimension of an open_sweep Dataset is a swept key.
MEASURE_DIMS = ("trial", "layer", "attention_layer", "token", "sigma_index", "head")


def config_values_of_text(text):
    """A run's resolved configuration (INI text, /config) as {"section.key": value}."""
    out, section = {}, ""
    for line in (text or "").splitlines():
        line = line.strip()
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
        elif "=" in line and not line.startswith(("#", ";")):
            k, v = line.split("=", 1)
            out[f"{section}.{k.strip()}"] = v.strip()
    return out


def _coordinate_text(value):
    """A swept value as the configuration writes it: 64.0 -> "64", 0.25 -> "0.25", "causal"."""
    value = value.item() if hasattr(value, "item") else value
    if isinstance(value, bytes):
        value = value.decode()
    if isinstance(value, float):
        return f"{value:.15g}"
    return str(value)


def _is_measures_dict(source):
    return isinstance(source, dict) and bool(source) and all(
        isinstance(v, np.ndarray) or hasattr(v, "__array__") and not hasattr(v, "data_vars") for v in source.values())


def _from_measures(measures):
    """rcsim.measures' dict: the entries of the shape of `mu` (the last axis the layer, leading axes
    trials); `sigma` (one more axis) is left out."""
    from ._validate import _as_numpy  # torch tensors detached (requires_grad), complex ones refused
    arrays = {k: np.asarray(_as_numpy("rcsim.plot", f"the measure {k!r}", v), dtype=float) for k, v in measures.items()}
    shape = arrays["mu"].shape if "mu" in arrays else max((a.shape for a in arrays.values()), key=len)
    if len(shape) < 1:
        raise ValueError("rcsim.plot: the measures are scalars (one token matrix); give the hidden states of several "
                         "layers, (..., layers, N, d), to rcsim.measures")
    metrics = {k: a.reshape(-1, shape[-1]) for k, a in arrays.items() if a.shape == shape}
    layers = np.arange(shape[-1])
    return {"layer": layers, "attention_layer": layers[:-1], "metrics": metrics, "metric_info": {}, "values": {},
            "config": ""}


def _metric_info(ds):
    return {k: {a: str(v.attrs[a]) for a in ("long_name", "units", "description") if a in v.attrs}
            for k, v in ds.data_vars.items()}


def _from_dataset(ds, values):
    """One run of a Dataset whose dimensions are trial, layer, attention_layer, ... only."""
    if "layer" not in ds.coords:
        raise ValueError("rcsim.plot: this Dataset has no layer coordinate; give the /metrics group "
                         "(rcsim.simulate(...) or rcsim.open_run(path), the default group)")
    metrics = {}
    for k, v in ds.data_vars.items():
        dims = [d for d in ("trial", "layer", "attention_layer") if d in v.dims]
        if "trial" not in v.dims:
            v = v.expand_dims("trial")
        metrics[k] = v.transpose("trial", *[d for d in v.dims if d != "trial"]).values if dims else v.values
    layer = ds["layer"].values
    attention = ds["attention_layer"].values if "attention_layer" in ds.coords else layer[:-1]
    return {"layer": layer, "attention_layer": attention, "metrics": metrics, "metric_info": _metric_info(ds),
            "values": values, "config": ""}


def _from_sweep_dataset(ds):
    """The points of an open_sweep Dataset (a product sweep: one dimension per swept key; else a
    `point` dimension with the keys as coordinates), each a run whose configuration is the first
    point's (attrs["config"]) with the swept keys' values."""
    base = config_values_of_text(ds.attrs.get("config", ""))
    if "point" in ds.dims:
        keys = [c for c in ds.coords if c != "point" and ds[c].dims == ("point",)]
        points = [({k: _coordinate_text(ds[k].values[i]) for k in keys}, ds.isel(point=i))
                  for i in range(ds.sizes["point"])]
    else:
        import itertools
        keys = [d for d in ds.dims if d not in MEASURE_DIMS]
        points = []
        for combo in itertools.product(*[ds[k].values for k in keys]):
            sel = dict(zip(keys, combo))
            points.append(({k: _coordinate_text(v) for k, v in sel.items()}, ds.sel(sel)))
    keys_of = {k: ds[k].attrs.get("key", k) for k in keys}  # open_sweep's dimension -> the swept key
    points = [({keys_of[k]: v for k, v in swept.items()}, part) for swept, part in points]
    runs = []
    for swept, part in points:
        if all(bool(np.all(np.isnan(part[v].values))) for v in part.data_vars if part[v].dtype.kind == "f"):
            continue  # a point missing from the sweep (outer join)
        part = part.drop_vars([c for c in part.coords if c not in part.dims and c not in ("layer", "attention_layer")])
        runs.append(_from_dataset(part, dict(base, **swept)))
    return runs


def as_runs(source):
    """A list of runs in load_run's form with "values" (see the module's docstring)."""
    from .files import load_run, run_paths
    if isinstance(source, (str, os.PathLike)):
        return [dict(r, values=config_values_of_text(r["config"])) for r in map(load_run, run_paths([source]))]
    if isinstance(source, (list, tuple)):
        return [r for s in source for r in as_runs(s)]
    if hasattr(source, "data_vars"):  # an xarray Dataset
        if any(d not in MEASURE_DIMS for d in source.dims):
            return _from_sweep_dataset(source)
        return [_from_dataset(source, config_values_of_text(source.attrs.get("config", "")))]
    if hasattr(source, "dims") and hasattr(source, "to_dataset"):  # one DataArray: one measure
        return as_runs(source.to_dataset(name=source.name or "value"))
    if _is_measures_dict(source):
        return [_from_measures(source)]
    if isinstance(source, dict) and "metrics" in source and hasattr(source["metrics"], "data_vars"):
        return as_runs(source["metrics"])  # simulate(group="all")
    if isinstance(source, dict) and "metrics" in source and "layer" in source:  # load_run's dict
        return [dict(source, values=config_values_of_text(source.get("config", "")))]
    if isinstance(source, dict):  # {label: source}
        out = []
        for label, part in source.items():
            out += [dict(r, label=str(label)) for r in as_runs(part)]
        return out
    raise TypeError(f"rcsim.plot: cannot plot a {type(source).__name__}: give run files or sweep directories "
                    "(paths), a simulate() or open_run/open_sweep Dataset, the dict rcsim.measures returns, a list "
                    "of these, or a dict {label: any of these}")
