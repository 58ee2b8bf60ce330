"""Reading rcsim run files, sweep indexes and analysis files: with h5py (dicts of NumPy arrays:
load_run, load_sweep, load_analysis) or as labelled xarray objects (open_run, open_sweep)."""
import contextlib
import io
import os

import h5py
import numpy as np


class RcsimFileError(ValueError):
    """A file that is not what the reader expects (not an rcsim file, incomplete, wrong kind).
    A command-line entry point (rcsim.command.run) reports it in one line, exit 2."""
    exit_status = 2


@contextlib.contextmanager
def reading(path):
    """Turns what h5py and NumPy raise on a malformed file (a missing dataset or attribute, a
    dataset of the wrong type or shape) into RcsimFileError naming the file."""
    try:
        yield
    except RcsimFileError:
        raise
    except (KeyError, ValueError, TypeError, IndexError, AttributeError, OSError) as e:
        raise RcsimFileError(f"{_name(path)}: not a readable rcsim file ({type(e).__name__}: "
                             f"{' '.join(str(e).split())})") from None


def _is_coordinate(ds):
    return _text(ds.attrs.get("CLASS", b"")) == "DIMENSION_SCALE"


def _readable(path):
    """A path as h5py and xarray open it: bytes (an HDF5 file image, as rcsim.simulate_image
    returns) become a file object; a path stays a path."""
    return io.BytesIO(path) if isinstance(path, (bytes, bytearray, memoryview)) else path


def _name(path):
    return "(run file in memory)" if isinstance(path, (bytes, bytearray, memoryview)) else path


def open_checked(path, filetype, complete=None):
    """h5py.File of an rcsim file of this filetype, complete (attribute complete = 1; by default
    required of run files only), or RcsimFileError naming the file. The file is recorded as an
    input of this process (command.note_input): rcsim.figures.atomic_writer never replaces it."""
    from .command import note_input
    source, path = _readable(path), _name(path)
    if isinstance(source, (str, os.PathLike)) and not os.path.isfile(source):
        raise RcsimFileError(f"{path}: {'not a regular file' if os.path.exists(source) else 'no such file'}")
    try:
        f = h5py.File(source, "r")
    except OSError as e:
        raise RcsimFileError(f"{path}: cannot open as HDF5 ({e})") from None
    note_input(path)
    try:
        with reading(path):
            if _text(f.attrs.get("filetype", "")) != filetype:
                raise RcsimFileError(f"{path}: not an {filetype} file (filetype attribute missing or different)")
            if (filetype == "rcsim-run" if complete is None else complete) and \
                    not np.array_equal(f.attrs.get("complete", 0), 1):
                raise RcsimFileError(f"{path}: incomplete {filetype} file (complete != 1)")
    except RcsimFileError:
        f.close()
        raise
    return f


def load_run(path):
    """Return a dict with the run's attributes, its coordinates (`layer` for the token measures,
    `attention_layer` for the attention measures attn_*), per-trial metrics [trial, layer] and
    each measure's long_name (a short axis label), units and description (the sentence that
    defines it) (`metric_info`)."""
    with open_checked(path, "rcsim-run") as f, reading(path):
        run = {"path": path, "attrs": dict(f.attrs), "layer": f["layer"][()],
               "attention_layer": f["attention_layer"][()],
               "metrics": {k: v[()] for k, v in f["metrics"].items() if not _is_coordinate(v)},
               # Each measure's long_name, units and description, as the engine's measure registry wrote them.
               "metric_info": {k: {a: _text(v.attrs[a]) for a in ("long_name", "units", "description")
                                   if a in v.attrs}
                               for k, v in f["metrics"].items() if not _is_coordinate(v)},
               "config": _text(f["config"][()])}
    return run


def open_run(path, group="metrics"):
    """One group of a run file as a labelled xarray.Dataset (default /metrics: every measure
    [trial, layer] or [trial, attention_layer]); select by value: `open_run(p).mu.sel(layer=10)`.
    The root's attributes (mask_type, norm_type, seed, ...) are added to the Dataset's attrs, and
    the resolved configuration (the INI text of /config) as attrs["config"] (rcsim.plot's titles
    and legends read it). Each measure keeps its attributes: long_name (a short axis label, which
    xarray's plots use), units, description (the sentence that defines it). `path` may also be the
    bytes of a run file (rcsim.simulate_image)."""
    import xarray as xr
    with open_checked(path, "rcsim-run") as f:
        root = {k: _attr(v) for k, v in f.attrs.items()}
        root["config"] = _text(f["config"][()])
    ds = xr.open_dataset(_readable(path), group=group, engine="h5netcdf").load()
    ds.close()
    ds.attrs.update(root)
    return ds


def open_sweep(directory, group="metrics"):
    """Every complete point of a sweep as one xarray.Dataset whose dimensions include the swept
    keys, named as identifiers (`mask.type` -> `mask_type`, `model.d_qk` -> `model_d_qk`; each
    coordinate's attrs["key"] is the key): `open_sweep(d).mu.sel(mask_type="causal")`.
    A product sweep gets one dimension per key; any other sweep (or one with missing points) keeps
    a `point` dimension with the swept keys as its coordinates. Points that are not complete are
    left out (open_sweep(...).attrs["points_missing"] counts them). attrs["config"] is the first
    complete point's configuration (the others differ from it in the swept keys and output.file)."""
    import xarray as xr
    points = load_sweep(directory)
    keys = [k for k in points[0] if k not in ("point", "name", "file", "status")] if points else []
    done = [p for p in points if p["status"] == "complete"]
    if not done:
        raise RcsimFileError(f"{directory}: no complete point in the sweep")
    parts = []
    for p in done:
        ds = open_run(p["file"], group)
        ds = ds.expand_dims(point=[p["point"]]).assign_coords({k: ("point", [p[k]]) for k in keys})
        parts.append(ds)
    out = xr.concat(parts, dim="point", join="outer", combine_attrs="drop_conflicts")
    full = len(done) == len(points)
    combos = {tuple(p[k] for k in keys) for p in done}
    product = full and len(combos) == np.prod([len({p[k] for p in done}) for k in keys])
    if keys and product:
        if len(keys) == 1:
            out = out.swap_dims(point=keys[0]).drop_vars("point")
        else:
            out = out.drop_vars("point").set_index(point=keys).unstack("point")
    out = out.rename({k: sweep_dimension(k) for k in keys})
    for k in keys:  # the swept key itself, as [sweep] and rcsim.sweep's axes spell it
        out[sweep_dimension(k)].attrs["key"] = k
    out.attrs["points_missing"] = len(points) - len(done)
    out.attrs["config"] = parts[0].attrs["config"]
    return out


def sweep_dimension(key):
    """The name open_sweep gives the dimension (or `point` coordinate) of a swept key: the key
    with its dots as underscores, an identifier (`attention.beta` -> `attention_beta`, usable as
    ds.attention_beta and in ds.sel(attention_beta=...)); the coordinate's attrs["key"] keeps the key."""
    return key.replace(".", "_")


def label(run):
    a = run["attrs"]
    return f"{a['mask_type']}, {a['norm_type']}"


def band(values, lo=10, hi=90):
    """Median and lo..hi percentile band across trials (axis 0), ignoring NaN (a layer with no
    value at all is NaN, without numpy's All-NaN warning)."""
    import warnings
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return (np.nanmedian(values, axis=0), np.nanpercentile(values, lo, axis=0),
                np.nanpercentile(values, hi, axis=0))


def _number_or_text(text):
    """'3' -> 3, '0.5' -> 0.5, 'causal' -> 'causal' (swept values are stored as text)."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def _text(v):
    return v.decode() if isinstance(v, bytes) else str(v)


def load_sweep(directory, runs=False):
    """Load a whole sweep from its index (DIRECTORY/index.h5) in one call.

    Returns a list of dicts, one per point in expansion order, with the keys `point`, `name`,
    `file` (full path), `status` ('pending' | 'complete' | 'failed') and one key per swept
    configuration key ('mask.type', 'model.d_qk', ...; numbers converted from text). With
    `runs=True`, each complete point also has `run`: its load_run() dict (layer coordinate,
    metrics), so `[(p['model.d_qk'], p['run']['metrics']['mu']) for p in load_sweep(d, True)]`
    is the whole sweep. `sweep_table()` turns the list into a NumPy structured array.
    """
    path = os.path.join(directory, "index.h5")
    with open_checked(path, "rcsim-sweep-index") as f, reading(path):
        names = [_text(x) for x in f["name"][()]]
        files = [_text(x) for x in f["file"][()]]
        status = [_text(x) for x in f["status"][()]]
        keys = [_text(x) for x in f["keys"][()]]
        params = {k: [_number_or_text(_text(x)) for x in f["parameters"][k][()]] for k in keys}
    points = []
    for i, name in enumerate(names):
        p = {"point": i, "name": name, "file": os.path.join(directory, files[i]), "status": status[i]}
        for k in keys:
            p[k] = params[k][i]
        if runs and status[i] == "complete":
            p["run"] = load_run(p["file"])
        points.append(p)
    return points


def sweep_table(points):
    """The scalar columns of load_sweep()'s list as a NumPy structured array (one row per point)."""
    columns = [k for k in points[0] if k != "run"] if points else []
    dtypes = []
    for k in columns:
        values = [p[k] for p in points]
        if all(isinstance(v, int) for v in values):
            dtypes.append((k, np.int64))
        elif all(isinstance(v, (int, float)) for v in values):
            dtypes.append((k, np.float64))
        else:
            dtypes.append((k, "U%d" % max(len(str(v)) for v in values)))
    return np.array([tuple(p[k] for k in columns) for p in points], dtype=dtypes)


def load_analysis(path):
    """Return the /analysis group that `rcsim analyze` wrote into a run file, as a dict.

    Keys: "layer" (the run's /layer coordinate: the layers actually recorded), "attrs",
    "mu" and "rank_one_residual" (each a dict of per-trial arrays decay_rate, decay_rate_stderr,
    r2, window_first, window_last, window_points, median_curve [layer], and the ensemble
    attributes ensemble_decay_rate, decay_rate_mean/std/sem/median/q10/q90, trials_fitted),
    "collapse_depth" [trial] (-1 = never), and "theory" (radius, eps, bound_rate, rate_ratio,
    per-trial eps and C, bound [trial, layer], bound_median [layer]).
    """
    with h5py.File(path, "r") as f:
        if "analysis" not in f:
            raise RcsimFileError(f"{path}: no /analysis group (run `rcsim analyze {path}` first)")
        g = f["analysis"]

        def group(h):
            d = {k: h[k][()] for k in h if isinstance(h[k], h5py.Dataset) and not _is_coordinate(h[k])}
            d.update({k: _attr(v) for k, v in h.attrs.items()})
            return d

        out = {"layer": f["layer"][()], "attrs": {k: _attr(v) for k, v in g.attrs.items()},
               "mu": group(g["mu"]), "rank_one_residual": group(g["rank_one_residual"]),
               "collapse_depth": g["collapse_depth"][()], "theory": group(g["theory"])}
    return out


def _attr(v):
    if isinstance(v, bytes):
        return v.decode()
    if isinstance(v, np.ndarray) and v.shape == ():
        return v.item()
    return v


def run_paths(paths):
    """Expand command-line paths into run files: a sweep directory or its index.h5 stands for
    the complete points of the sweep (in index order); a run file stands for itself."""
    out = []
    for path in paths:
        index = os.path.join(path, "index.h5") if os.path.isdir(path) else path
        is_index = False
        if os.path.isfile(index) and h5py.is_hdf5(index):  # anything else is left to load_run to refuse
            with reading(index), h5py.File(index, "r") as f:
                is_index = _text(f.attrs.get("filetype", "")) == "rcsim-sweep-index"
        if is_index:
            out += [p["file"] for p in load_sweep(os.path.dirname(os.path.abspath(index)))
                    if p["status"] == "complete"]
        elif os.path.isdir(path):
            raise RcsimFileError(f"{path}: a directory without a sweep index (index.h5)")
        else:
            out.append(path)
    return out


def sweep_runs(directory):
    """Every complete run file of a sweep directory (from its index), loaded."""
    return [load_run(p) for p in run_paths([directory])]
