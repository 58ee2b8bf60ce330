"""Reading rcsim run files with h5py (shared by the analysis scripts)."""
import h5py
import numpy as np


def load_run(path):
    """Return a dict with the run's attributes, its layer coordinate and per-trial metrics."""
    with h5py.File(path, "r") as f:
        if f.attrs.get("filetype") != "rcsim-run":
            raise SystemExit(f"{path}: not an rcsim run file (filetype attribute missing)")
        if int(f.attrs.get("complete", 0)) != 1:
            raise SystemExit(f"{path}: incomplete run file (complete != 1)")
        run = {"path": path, "attrs": dict(f.attrs), "layer": f["layer"][()],
               "metrics": {k: f["metrics"][k][()] for k in f["metrics"]},
               "config": f["config"][()].decode() if isinstance(f["config"][()], bytes) else f["config"][()]}
    return run


def label(run):
    a = run["attrs"]
    return f"{a['mask_type']}, {a['norm_type']}"


def band(values, lo=10, hi=90):
    """Median and lo..hi percentile band across trials (axis 0), ignoring NaN."""
    with np.errstate(all="ignore"):
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
    import os
    path = os.path.join(directory, "index.h5")
    with h5py.File(path, "r") as f:
        if _text(f.attrs.get("filetype", "")) != "rcsim-sweep-index":
            raise SystemExit(f"{path}: not an rcsim sweep index (filetype attribute missing)")
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
