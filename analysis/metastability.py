#!/usr/bin/env python3
"""Metastability of the particle flow (docs/science/particles.md): plateaus of a time series (the
interaction energy, a cluster count) and the merge times between them.

    metastability.py RUN.h5 [--measure energy] [--trial 0] [--rtol 0.002] [--min-duration auto]
    metastability.py --self-test

tol = rtol x (range of the series); D = min_duration (default: 2% of the span of t).
1. Flat samples: sample k is flat when the mean of the samples in [t_k - D/2, t_k] and the mean of those
   in [t_k, t_k + D/2] (each half holding sample k and at least its neighbour) differ by at most tol: the
   local slope over a window of D stays below about 2 tol / D. Noise bounded by a moves the difference by
   at most 2 a (a median by a), so a level with noise below 3 tol / 8 passes steps 1 - 3 whatever the sampling.
2. Each maximal run of flat samples (a core) is refined: trimmed at both ends to the samples within tol of
   its median and extended over the adjacent samples within tol of it (never into the previous plateau),
   the median recomputed, until the run no longer changes (at most 10 rounds).
3. The refined run is a plateau when it has at least two samples, lasts at least D, and is a level rather
   than a slow trend: the medians of its halves in t differ by at most 0.75 tol (a trend crossing the band
   of +-tol differs by about tol). So a ramp has none, nor has an exponential approach before it has
   come within about tol of its limit.
4. Consecutive plateaus whose values (the mean of their samples) differ by at most tol are one level (a
   blip between them): joined, the value the mean of both plateaus' samples.
The merge time between consecutive plateaus (values v1, v2) is where the series first crosses
(v1 + v2) / 2 after the first, linearly interpolated. For an integer series (cluster counts) use
rtol = 0: the plateaus are the runs of equal values (at D = 0 those of at least three samples).
docs/user/analysis.md ("Plateaus") explains the choices.

The same definition is in `rcsim analyze --plateaus=MEASURE` (sim/kernel/measures/plateaus.cpp,
for every trial, written to /analysis/plateaus); tests/python/check_plateaus.py holds the two equal.
This one reads the /time and /metrics datasets the run file already holds, needs no recompilation to
tune, and the figure scripts import it.
"""
import math
import sys

import numpy as np

import script_setup  # noqa: F401  (the package rcsim of this checkout: analysis/script_setup.py)


MIN_DURATION_FRACTION = 0.02  # the default minimum duration: 2% of the span of t
REFINE_ROUNDS = 10
TREND_FRACTION = 0.75


def default_min_duration(t):
    """MIN_DURATION_FRACTION x (the span of t)."""
    return MIN_DURATION_FRACTION * (float(t[-1]) - float(t[0])) if len(t) else 0.0


def plateaus(t, y, rtol=2e-3, min_duration=None):
    """Plateaus of y(t): a list of dicts start, end (times), value (mean), first, last (indices).
    min_duration None: default_min_duration(t). The arithmetic is rcsim's (sim/kernel/measures/plateaus.cpp),
    operation for operation, so that both give the same samples and values."""
    t = np.asarray(t, dtype=float)
    y = np.asarray(y, dtype=float)
    if t.shape != y.shape or t.ndim != 1 or len(t) == 0:
        raise ValueError("t and y must be 1-D arrays of the same length > 0")
    if not (np.all(np.isfinite(t)) and np.all(np.isfinite(y))):
        raise ValueError("t and y must be finite")
    if np.any(np.diff(t) < 0):
        raise ValueError("t must be non-decreasing")
    if min_duration is None:
        min_duration = default_min_duration(t)
    if not (math.isfinite(rtol) and rtol >= 0 and math.isfinite(min_duration) and min_duration >= 0):
        raise ValueError(f"rtol = {rtol} and min_duration = {min_duration}: each must be a finite number >= 0")
    tol = float(rtol * (np.max(y) - np.min(y)))
    s = _Series(t, y, tol)
    flat = _flat_samples(s, t, float(min_duration))
    n, pieces, floor, k = len(y), [], 0, 0
    while k < n:
        if not flat[k]:
            k += 1
            continue
        e = k
        while e + 1 < n and flat[e + 1]:
            e += 1  # the core k..e
        if e >= floor:
            p = _refine(s, max(k, floor), e, floor)
            if p is not None and _is_level(s, p[0], p[1], min_duration):
                pieces.append(p)
                floor = p[1] + 1
        k = e + 1
    return _join_equal(s, pieces)


class _Series:
    """y with its prefix sums of y - y[0] (exact for a constant or integer series), as Python floats."""

    def __init__(self, t, y, tol):
        self.t, self.y, self.tol = [float(v) for v in t], [float(v) for v in y], tol
        self.sum = np.concatenate(([0.0], np.cumsum(y - y[0])))  # sequential, as rcsim's loop
        self.sums = [float(v) for v in self.sum]

    def part(self, a, b):
        return self.sums[b + 1] - self.sums[a]

    def mean(self, a, b):
        return self.y[0] + self.part(a, b) / (b - a + 1)

    def near(self, j, level):
        return abs(self.y[j] - level) <= self.tol

    def median(self, a, b):
        v = sorted(self.y[a:b + 1])
        m = len(v)
        return v[m // 2] if m % 2 else 0.5 * (v[m // 2 - 1] + v[m // 2])


def _flat_samples(s, t, min_duration):
    """Sample k is flat when the mean over [t_k - D/2, t_k] and the mean over [t_k, t_k + D/2] (both with
    sample k, each with at least its neighbour) differ by at most tol."""
    n = len(t)
    if n < 2:
        return [False] * n
    k = np.arange(n)
    lo = np.searchsorted(t, t - 0.5 * min_duration, side="left")
    hi = np.searchsorted(t, t + 0.5 * min_duration, side="right") - 1
    a = np.where(k > 0, np.minimum(lo, k - 1), 0)
    b = np.where(k + 1 < n, np.maximum(hi, k + 1), n - 1)
    step = (s.sum[b + 1] - s.sum[k]) / (b - k + 1).astype(float) - (s.sum[k + 1] - s.sum[a]) / (k - a + 1).astype(float)
    return list(np.abs(step) <= s.tol)


def _refine(s, a, b, floor):
    """A core a..b refined into a plateau (a, b): trimmed to the samples within tol of its median (a blip inside
    the core does not move it), extended over the adjacent ones (not before `floor`), until it no longer
    changes; None when no sample is within tol."""
    n = len(s.y)
    for _ in range(REFINE_ROUNDS):
        level = s.median(a, b)
        a1, b1 = a, b
        while a1 <= b1 and not s.near(a1, level):
            a1 += 1
        while b1 > a1 and not s.near(b1, level):
            b1 -= 1
        if a1 > b1 or not s.near(b1, level):
            return None
        while a1 > floor and s.near(a1 - 1, level):
            a1 -= 1
        while b1 + 1 < n and s.near(b1 + 1, level):
            b1 += 1
        if (a1, b1) == (a, b):
            break
        a, b = a1, b1
    return a, b


def _is_level(s, first, last, min_duration):
    """The plateau first..last is a level, not a slow trend across its band: at least two samples, lasting at
    least D, and the medians of its halves in t (samples with t <= the middle, and with t >= it) differ by at
    most TREND_FRACTION x tol (a trend that traverses the band differs by about tol)."""
    if last <= first or s.t[last] - s.t[first] < min_duration:
        return False
    middle = 0.5 * (s.t[first] + s.t[last])
    i, j = first, last
    while i < last and s.t[i + 1] <= middle:
        i += 1
    while j > first and s.t[j - 1] >= middle:
        j -= 1
    return abs(s.median(j, last) - s.median(first, i)) <= TREND_FRACTION * s.tol


def _join_equal(s, pieces):
    """Consecutive plateaus whose values differ by at most tol joined (a blip between them, issue 37): the
    value is the mean of both plateaus' samples."""
    out, sums = [], []
    for first, last in pieces:
        value = s.mean(first, last)
        if out and abs(value - out[-1]["value"]) <= s.tol:
            q = out[-1]
            sums[-1][0] += s.part(first, last)
            sums[-1][1] += last - first + 1
            q["value"] = s.y[0] + sums[-1][0] / sums[-1][1]
            q["end"], q["last"] = s.t[last], last
            continue
        out.append({"start": s.t[first], "end": s.t[last], "value": value, "first": first, "last": last})
        sums.append([s.part(first, last), last - first + 1])
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
    """Constructed series with known plateaus and merge times (as tests/test_plateaus_staircases.cpp; the
    expected positions solved from the curves); exit 1 on a failed check."""
    failures = []

    def check(cond, what):
        if not cond:
            failures.append(what)

    levels, jumps, w, rtol = [0.0, 0.3, 0.5, 1.0], [25.0, 50.0, 75.0], 0.5, 2e-3
    rng = np.random.default_rng(46)
    for n in (101, 801, 20001):
        t = np.linspace(0.0, 100.0, n)
        dt = t[1] - t[0]
        # Sharp steps: the runs between the jumps (samples i (n - 1) / 4), merges mid-step.
        q = (n - 1) // 4
        ys = np.array(levels)[np.minimum(np.arange(n) // q, 3)]
        fs = plateaus(t, ys)
        check([(p["first"], p["last"]) for p in fs] == [(0, q - 1), (q, 2 * q - 1), (2 * q, 3 * q - 1), (3 * q, n - 1)],
              f"n {n} sharp: plateaus {[(p['first'], p['last']) for p in fs]}")
        check(np.allclose(merge_times(t, ys, fs), np.array(jumps) - dt / 2, atol=1e-9, rtol=0), f"n {n} sharp: merges")
        # Smooth steps, clean and with noise bounded by tol / 3: each end where the step is between tol - 2a
        # and tol + 2a from the level (a step of height J is c away at |t - jump| = (w/2) ln(J/c - 1)).
        for a in (0.0, rtol / 3):
            y = staircase(t, levels, jumps, w) + a * rng.uniform(-1, 1, n)
            tol = rtol * (y.max() - y.min())
            f = plateaus(t, y)
            what = f"n {n} tanh noise {a:g}"
            check(len(f) == 4, f"{what}: {len(f)} plateaus, 4 expected")
            if len(f) != 4:
                continue
            check(all(abs(p["value"] - v) <= tol for p, v in zip(f, levels)),
                  f"{what}: values {[p['value'] for p in f]}")
            for i, (tj, J) in enumerate(zip(jumps, np.diff(levels))):
                near, far = 0.5 * w * np.log(J / (tol - 2 * a) - 1), 0.5 * w * np.log(J / (tol + 2 * a) - 1)
                check(tj - near - dt - 1e-9 <= f[i]["end"] <= tj - far + 1e-9,
                      f"{what}: plateau {i} ends at {f[i]['end']}")
                check(tj + far - 1e-9 <= f[i + 1]["start"] <= tj + near + dt + 1e-9,
                      f"{what}: plateau {i + 1} starts at {f[i + 1]['start']}")
            for m, tj, J in zip(merge_times(t, y, f), jumps, np.diff(levels)):
                check(abs(m - tj) <= w * np.arctanh(2 * (tol + a) / J) + dt * dt / w, f"{what}: merge {m} vs {tj}")
        # A ramp: no plateau at any rtol up to 0.02. Exponential approaches: none before the limit is reached.
        check(all(plateaus(t, t, r) == [] for r in (1e-3, 2e-3, 5e-3, 1e-2, 2e-2)), f"n {n}: a ramp has plateaus")
        for tau in (100.0 / 3, 50.0):
            check(plateaus(t, 1 - np.exp(-t / tau)) == [], f"n {n}: exponential approach tau {tau:g} has a plateau")
        ye = 1 - np.exp(-t / 10)
        tol, d_end = rtol * (ye[-1] - ye[0]), np.exp(-10.0)
        fe = plateaus(t, ye)
        check(len(fe) == 1 and fe[0]["last"] == n - 1
              and 10 * np.log(1 / (2 * tol + d_end)) - 1e-9 <= fe[0]["start"] <= 10 * np.log(1 / tol) + dt + 1e-9,
              f"n {n}: converged exponential approach: {fe}")
        # The staircase ending in an exponential approach to its top level: four plateaus, three merges.
        yx = np.where(t < 75, staircase(t, levels[:3], jumps[:2], w), 1 - 0.5 * np.exp(-(t - 75) / 3))
        tol, d_end = rtol * (yx[-1] - yx[0]), 0.5 * np.exp(-25 / 3)
        fx = plateaus(t, yx)
        mx = merge_times(t, yx, fx)
        check(len(fx) == 4 and 75 + 3 * np.log(0.5 / (2 * tol + d_end)) - 1e-9 <= fx[3]["start"]
              <= 75 + 3 * np.log(0.5 / tol) + dt + 1e-9, f"n {n}: staircase with an exponential approach: {fx}")
        e = 1.5 * tol + 0.5 * d_end
        bound = 3 * np.log((0.25 + e) / (0.25 - e)) + 0.12 * dt * dt
        check(len(mx) == 3 and abs(mx[2] - (75 + 3 * np.log(2))) <= bound, f"n {n}: merges {mx}")
    # An integer series (cluster count 5 -> 3 -> 2 -> 1) with rtol = 0 and D = 0: its runs.
    ti = np.arange(0, 40, dtype=float)
    yi = np.array([5] * 10 + [3] * 12 + [2] * 8 + [1] * 10, dtype=float)
    fi = plateaus(ti, yi, rtol=0.0, min_duration=0.0)
    check([p["value"] for p in fi] == [5, 3, 2, 1], f"integer plateaus {[p['value'] for p in fi]}")
    check(merge_times(ti, yi, fi) == [9.5, 21.5, 29.5], f"integer merge times {merge_times(ti, yi, fi)}")
    # One level interrupted by a blip: one plateau, no merge inside it (tests/test_plateaus.cpp works it by hand).
    yb = np.array([0.3, 0.3, 0.3, 0.31, 0.3, 0.3, 0.3, 0.8, 0.8, 0.8])
    fb = plateaus(np.arange(10.0), yb, rtol=2e-3, min_duration=0.0)
    check([(p["first"], p["last"], p["value"]) for p in fb] == [(0, 6, 0.3), (7, 9, 0.8)], f"blip: plateaus {fb}")
    # One level drifting (quadratically, 2.4 x rtol x range over 50 samples) before a jump, as the energy before
    # a merge: one plateau (0..37, worked by hand in tests/test_plateaus.cpp) and one merge (issue 37).
    td = np.arange(100.0)
    yd = np.where(td < 50, 0.2 + 1.2e-3 * (td / 50) ** 2, 0.3)
    fd = plateaus(td, yd, rtol=5e-3, min_duration=5.0)
    check([(p["first"], p["last"]) for p in fd] == [(0, 37), (50, 99)], f"drift: plateaus {fd}")
    md = merge_times(td, yd, fd)
    check(len(md) == 1 and 49 < md[0] < 50, f"drift: merges {md}")
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
    ap.add_argument("--min-duration", default="auto", type=lambda x: x if x == "auto" else finite_float(0)(x),
                    help="shortest plateau and the window of the flatness test, in time units (finite, >= 0); "
                    "auto: 2%% of the span of the time axis")
    ap.add_argument("--self-test", action="store_true")
    a = ap.parse_args()
    if a.self_test:
        return self_test()
    if not a.run:
        ap.error("give a run file or --self-test")
    min_duration = None if a.min_duration == "auto" else a.min_duration
    t, y = read_series(a.run, a.measure, a.trial)
    found = plateaus(t, y, a.rtol, min_duration)
    merges = merge_times(t, y, found)
    print("plateau  start  end  duration  value")
    for k, p in enumerate(found):
        print(f"{k} {p['start']:.6g} {p['end']:.6g} {p['end'] - p['start']:.6g} {p['value']:.9g}")
    print("merge times:", " ".join(f"{m:.6g}" for m in merges))
    return 0


if __name__ == "__main__":
    from rcsim.command import run
    sys.exit(run(main))
