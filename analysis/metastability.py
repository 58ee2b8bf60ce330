#!/usr/bin/env python3
"""Metastability of the particle flow (docs/science/particles.md): plateaus of a time series (the
interaction energy, a cluster count) and the merge times between them.

    metastability.py RUN.h5 [--measure energy] [--trial 0] [--rtol 0.002] [--min-duration 0]
    metastability.py --self-test

A plateau is a maximal run of samples k = s..e whose values all lie within rtol x (range of the
series) of the plateau's running mean, lasting at least `min_duration` in time; two consecutive
plateaus are one (joined: a blip or a slow drift does not make a merge) when their values differ by at
most rtol x (range), or when the second starts at the sample after the first ends, with a step of at
most rtol x (range) there, and their values differ by at most 2 rtol x (range). Between two
consecutive plateaus (values v1, v2) the merge time is where the series first crosses
(v1 + v2) / 2, linearly interpolated; the transition itself lasts from the end of the first
plateau to the start of the second. For an integer series (cluster counts) use rtol = 0: the
plateaus are the runs of equal values and the merge time is the midpoint of the jump.

The same definition is in `rcsim analyze --plateaus=MEASURE` (sim/kernel/measures/plateaus.cpp,
for every trial, written to /analysis/plateaus); tests/python/check_plateaus.py holds the two equal.
This one reads the /time and /metrics datasets the run file already holds, needs no recompilation to
tune, and the figure scripts import it.
"""
import math
import sys

import numpy as np

import script_setup  # noqa: F401  (the package rcsim of this checkout: analysis/script_setup.py)


def plateaus(t, y, rtol=2e-3, min_duration=0.0):
    """Plateaus of y(t): a list of dicts start, end (times), value (mean), first, last (indices)."""
    t = np.asarray(t, dtype=float)
    y = np.asarray(y, dtype=float)
    if t.shape != y.shape or t.ndim != 1 or len(t) == 0:
        raise ValueError("t and y must be 1-D arrays of the same length > 0")
    if not (np.all(np.isfinite(t)) and np.all(np.isfinite(y))):
        raise ValueError("t and y must be finite")
    if not (math.isfinite(rtol) and rtol >= 0 and math.isfinite(min_duration) and min_duration >= 0):
        raise ValueError(f"rtol = {rtol} and min_duration = {min_duration}: each must be a finite number >= 0")
    span = float(np.nanmax(y) - np.nanmin(y))
    tol = rtol * span
    out = []
    s, total = 0, y[0]
    for k in range(1, len(y) + 1):
        mean = total / (k - s)
        if k < len(y) and abs(y[k] - mean) <= tol:  # |y_k - mean of the plateau| <= rtol x range
            total += y[k]
            continue
        if t[k - 1] - t[s] >= min_duration and k - 1 > s:
            out.append({"start": float(t[s]), "end": float(t[k - 1]), "value": float(mean),
                        "first": s, "last": k - 1})
        if k < len(y):
            s, total = k, y[k]
    return join_equal(out, tol, y)


def join_equal(found, tol, y):
    """Consecutive plateaus that are one level are joined (issue 37: particles_staircase2000.py's first
    plateau was split in two, with a merge reported between them): their values differ by at most `tol`
    (a blip or a short excursion between them), or the second starts at the sample after the first ends,
    with a step of at most `tol` there, and their values differ by at most 2 tol (no transition between
    them: a drift moved the running mean out of the tolerance; a linear drift splits a level into pieces
    whose means differ by at most 2 tol). The value of the joined plateau is the duration-weighted mean of
    the two (the sample-weighted mean where both last no time)."""
    out = []
    for p in found:
        q = out[-1] if out else None
        gap = abs(p["value"] - q["value"]) if q is not None else math.inf
        drift = (q is not None and p["first"] == q["last"] + 1 and abs(y[p["first"]] - y[q["last"]]) <= tol
                 and gap <= 2 * tol)
        if gap <= tol or drift:
            wq, wp = q["end"] - q["start"], p["end"] - p["start"]
            if wq + wp <= 0:
                wq, wp = q["last"] - q["first"] + 1, p["last"] - p["first"] + 1
            q["value"] = float((wq * q["value"] + wp * p["value"]) / (wq + wp))
            q["end"], q["last"] = p["end"], p["last"]
        else:
            out.append(dict(p))
    return out


def merge_times(t, y, found):
    """Times where y crosses the midpoint between consecutive plateaus (linear interpolation)."""
    t = np.asarray(t, dtype=float)
    y = np.asarray(y, dtype=float)
    out = []
    for a, b in zip(found, found[1:]):
        mid = 0.5 * (a["value"] + b["value"])
        sign = np.sign(b["value"] - a["value"])
        k = a["last"]
        while k < b["first"] and sign * (y[k + 1] - mid) < 0:
            k += 1
        k = min(k, b["first"] - 1) if b["first"] > a["last"] else a["last"]
        y0, y1 = y[k], y[k + 1]
        frac = 0.5 if y1 == y0 else min(max((mid - y0) / (y1 - y0), 0.0), 1.0)
        out.append(float(t[k] + frac * (t[k + 1] - t[k])))
    return out


def staircase(t, levels, jumps, width):
    """A smooth staircase: levels[0] + sum_k (levels[k+1] - levels[k]) (1 + tanh((t - jumps[k]) / width)) / 2."""
    y = np.full_like(t, levels[0], dtype=float)
    for k, tj in enumerate(jumps):
        y += (levels[k + 1] - levels[k]) * 0.5 * (1.0 + np.tanh((t - tj) / width))
    return y


def self_test():
    """Constructed staircases with known plateaus and merge times; exit 1 on a failed check."""
    failures = []

    def check(cond, what):
        if not cond:
            failures.append(what)

    t = np.linspace(0.0, 100.0, 20001)
    levels, jumps, width = [0.1, 0.4, 0.45, 1.0], [20.0, 50.0, 80.0], 0.5
    rng = np.random.default_rng(1)
    y = staircase(t, levels, jumps, width) + 1e-5 * rng.standard_normal(t.size)
    found = plateaus(t, y, rtol=2e-3, min_duration=2.0)
    check(len(found) == 4, f"4 plateaus, found {len(found)}")
    if len(found) == 4:
        for p, v in zip(found, levels):
            check(abs(p["value"] - v) < 2e-3, f"plateau value {p['value']} vs {v}")
        bounds = [0.0] + jumps + [100.0]
        for k, p in enumerate(found):  # each plateau lies between its two jumps, within 5 widths
            check(p["start"] >= bounds[k] - 1e-9 and p["start"] <= bounds[k] + 5 * width + 1e-9 or k == 0,
                  f"plateau {k} starts at {p['start']}")
            check(p["end"] <= bounds[k + 1] and p["end"] >= bounds[k + 1] - 5 * width or k == 3,
                  f"plateau {k} ends at {p['end']}")
        for m, j in zip(merge_times(t, y, found), jumps):
            check(abs(m - j) < 0.05, f"merge time {m} vs {j}")
    # An integer series (cluster count 5 -> 3 -> 2 -> 1) with rtol = 0.
    ti = np.arange(0, 40, dtype=float)
    yi = np.array([5] * 10 + [3] * 12 + [2] * 8 + [1] * 10, dtype=float)
    fi = plateaus(ti, yi, rtol=0.0)
    check([p["value"] for p in fi] == [5, 3, 2, 1], f"integer plateaus {[p['value'] for p in fi]}")
    check(merge_times(ti, yi, fi) == [9.5, 21.5, 29.5], f"integer merge times {merge_times(ti, yi, fi)}")
    # One level interrupted by a blip (and drifting slowly): one plateau, no merge between its halves.
    yb = np.where(t < 50.0, 0.3, 0.8) + 1e-4 * (t % 50.0) / 50.0
    yb[(t > 20.0) & (t < 20.05)] = 0.31  # a blip of 2 % of the range, shorter than min_duration
    fb = plateaus(t, yb, rtol=2e-3, min_duration=2.0)
    check([round(p["value"], 3) for p in fb] == [0.3, 0.8], f"blip: plateaus {[p['value'] for p in fb]}")
    check(len(merge_times(t, yb, fb)) == 1, f"blip: merges {merge_times(t, yb, fb)}")
    # One level drifting (quadratically, 2.4 x rtol x range over 50 samples) before a jump, as the energy before
    # a merge: one plateau and one merge (the running mean left the tolerance at sample 40; the detector had
    # split the level there and reported a merge at t = 39: issue 37, particles_staircase2000.py at t = 1.88).
    td = np.arange(100.0)
    yd = np.where(td < 50, 0.2 + 1.2e-3 * (td / 50) ** 2, 0.3)
    fd = plateaus(td, yd, rtol=5e-3, min_duration=5.0)
    check([(p["first"], p["last"]) for p in fd] == [(0, 49), (50, 99)], f"drift: plateaus {fd}")
    md = merge_times(td, yd, fd)
    check(len(md) == 1 and abs(md[0] - 49.5) < 0.01, f"drift: merges {md}")
    # No plateau in a ramp.
    check(plateaus(t, t, rtol=1e-4, min_duration=1.0) == [], "a ramp has no plateau")
    for f in failures:
        print("FAIL:", f)
    print(f"metastability self-test: {'ok' if not failures else str(len(failures)) + ' failures'}")
    return 1 if failures else 0


def read_series(path, measure, trial):
    """(t, y): the time (or layer) coordinate and measure[trial, :] of a complete run file, each
    checked; a file, measure or trial that does not fit raises an error naming it (exit 2)."""
    from rcsim.command import UsageError
    from rcsim.files import RcsimFileError, open_checked, reading
    with open_checked(path, "rcsim-run") as f, reading(path):
        metrics = f["metrics"]
        names = sorted(k for k in metrics if k not in ("layer", "attention_layer"))
        if measure not in names:
            raise UsageError(f"--measure {measure}: not in {path} (it has: {', '.join(names) or 'no measure'})")
        ds = metrics[measure]
        if ds.ndim != 2:
            raise UsageError(f"--measure {measure}: shape {list(ds.shape)} in {path}; a series [trial, layer] "
                             "is needed (one value per layer and trial)")
        if not 0 <= trial < ds.shape[0]:
            raise UsageError(f"--trial {trial}: {path} has trials 0 .. {ds.shape[0] - 1}")
        y = np.asarray(ds[trial], dtype=float)
        axis = "layer" if len(y) == len(f["layer"]) else "attention_layer"
        t = f["time"][()] if "time" in f and len(f["time"]) == len(y) else f[axis][()]
        t = np.asarray(t, dtype=float)
    if t.shape != y.shape:
        raise RcsimFileError(f"{path}: /metrics/{measure} has {len(y)} values per trial, its coordinate "
                             f"{t.shape[0] if t.ndim else 0}")
    bad = np.flatnonzero(~(np.isfinite(y) & np.isfinite(t)))
    if bad.size:
        raise RcsimFileError(f"{path}: {measure} of trial {trial} is not finite at sample {bad[0]} "
                             f"({y[bad[0]]}); the plateaus need a finite series")
    return t, y


def main():
    from particles_common import doc_summary
    from rcsim.command import Parser, finite_float, whole_number
    ap = Parser(description=doc_summary(__doc__))
    ap.add_argument("run", nargs="?", help="a complete rcsim run file")
    ap.add_argument("--measure", default="energy", help="the series (default energy)")
    ap.add_argument("--trial", type=whole_number(0), default=0, help="the trial (0 .. trials - 1)")
    ap.add_argument("--rtol", type=finite_float(0), default=2e-3,
                    help="plateau tolerance, a fraction of the series' range (finite, >= 0)")
    ap.add_argument("--min-duration", type=finite_float(0), default=0.0,
                    help="shortest plateau, in time units (finite, >= 0)")
    ap.add_argument("--self-test", action="store_true")
    a = ap.parse_args()
    if a.self_test:
        return self_test()
    if not a.run:
        ap.error("give a run file or --self-test")
    t, y = read_series(a.run, a.measure, a.trial)
    found = plateaus(t, y, a.rtol, a.min_duration)
    merges = merge_times(t, y, found)
    print("plateau  start  end  duration  value")
    for k, p in enumerate(found):
        print(f"{k} {p['start']:.6g} {p['end']:.6g} {p['end'] - p['start']:.6g} {p['value']:.9g}")
    print("merge times:", " ".join(f"{m:.6g}" for m in merges))
    return 0


if __name__ == "__main__":
    from rcsim.command import run
    sys.exit(run(main))
