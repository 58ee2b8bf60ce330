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
