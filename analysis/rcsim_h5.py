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
            raise SystemExit(f"{path}: no /analysis group (run `rcsim analyze {path}` first)")
        g = f["analysis"]

        def group(h):
            d = {k: h[k][()] for k in h if isinstance(h[k], h5py.Dataset)}
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
