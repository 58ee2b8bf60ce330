#!/usr/bin/env python3
"""Figures that mean the same on every machine (issue 39): exact zeros, underflow and round-off on
log axes, signed measures, per-block heat maps, legends and titles.

Usage: check_figure_zeros.py WORK_DIR
Writes small run files in rcsim's format (docs/reference/file-formats.md) whose tokens became
bitwise equal: under the complete mask mu is exactly 0 from layer 5 in every trial (as on an AMD
EPYC with AVX2), under the unidirectional sliding window it underflows to 1e-308 and 5e-324, and
the causal mask sits at a round-off plateau. Then renders the main job's plot
(analysis/plot_collapse.py, scripts/run-default.sh's) and analysis/figure2.py's figure from them
and checks, panel by panel: the y axis' lower limit is not below the documented floor
(rcsim.figures.FLOOR_RATIO = 1e-13 x the largest value in the panel, computed here from the data),
the complete mask's curve ends with the collapse marker on the axis' lower edge at layer t = 5
(x = t + 1 = 6), and no line is drawn below the floor. Also: a signed measure (cos_mean) is not on
a log axis; a heat map of a measure of the blocks (attn_entropy, /attention_layer) is drawn; a
two-key sweep's legend binds colour to one key and line style to the other; a causal-only title
does not name the window. Needs no rcsim executable; runs in about 3 s.
"""
import os
import sys

import h5py
import numpy as np

work = sys.argv[1]
here = os.path.dirname(os.path.abspath(__file__))
analysis = os.path.join(here, "..", "..", "analysis")
sys.path.insert(0, analysis)
import script_setup  # noqa: E402,F401  (the package rcsim, as the figure scripts find it)
os.environ["MPLBACKEND"] = "Agg"
import matplotlib  # noqa: E402

matplotlib.use("Agg")
from rcsim import load_run  # noqa: E402
from rcsim import plot  # noqa: E402

RATIO = 1e-13  # the floor docs/user/plotting.md and rcsim.figures document
MASKS = ["complete", "causal", "sliding_window", "unidirectional_sliding_window"]
LAYERS, TRIALS, ZERO_FROM = 40, 5, 5
failures = []


def check(cond, what):
    print("ok  " if cond else "FAIL", what)
    if not cond:
        failures.append(what)


def curve(mask, rng):
    """mu [trial, layer] of a run whose tokens collapse: exact zeros, underflow, round-off or none."""
    t = np.arange(LAYERS + 1)
    rate = {"complete": 4.0, "causal": 0.8, "sliding_window": 0.05, "unidirectional_sliding_window": 0.5}[mask]
    mu = 20.0 * np.exp(-rate * t)[None, :] * rng.uniform(0.7, 1.3, (TRIALS, 1))
    if mask == "complete":
        mu[:, ZERO_FROM:] = 0.0  # bitwise equal tokens
    elif mask == "causal":
        mu = np.maximum(mu, 1e-15 * rng.uniform(0.5, 2, mu.shape))  # round-off plateau
    elif mask == "unidirectional_sliding_window":
        mu[:, 30:] = 1e-308
        mu[:, 35:] = 5e-324  # the smallest subnormal
    return mu


def write_run(path, mask, norm, window=1, rng=None, extra=None):
    mu = curve(mask, rng)
    fro = np.full_like(mu, 5.0)
    metrics = {"mu": mu, "mu_rel": mu / fro, "fro_norm": fro,
               "attn_entropy": rng.uniform(0.5, 2.0, (TRIALS, LAYERS))}  # a measure of the blocks t -> t+1
    metrics.update(extra or {})
    config = (f"[model]\ntokens = 8\ndim = 4\nlayers = {LAYERS}\nheads = 1\nd_qk = 1\n[mask]\ntype = {mask}\n"
              f"window = {window}\n[norm]\ntype = {norm}\n[run]\ntrials = {TRIALS}\nseed = 1\n"
              f"[output]\nfile = {path}\n")
    with h5py.File(path, "w") as f:
        f.attrs.update({"filetype": "rcsim-run", "format_version": 2, "mask_type": mask, "norm_type": norm,
                        "tokens": 8, "dim": 4, "layers": LAYERS, "heads": 1, "trials": TRIALS, "d_qk": 1.0})
        f["layer"] = np.arange(LAYERS + 1)
        f["attention_layer"] = np.arange(LAYERS)
        f["config"] = config
        for k, v in metrics.items():
            f[f"metrics/{k}"] = v
        f.attrs["complete"] = 1
    return path


def panels_ok(fig, name, data_of):
    """Every log panel of `fig`: the lower limit >= RATIO x the largest value of its data
    (data_of(ax) -> list of [trial, layer] arrays), no line point below that floor, and the complete
    mask's curve ending at x = ZERO_FROM + 1 with a 'v' marker on the lower edge."""
    for ax in fig.axes:
        if ax.get_yscale() != "log":
            continue
        data = data_of(ax)
        floor = RATIO * max(float(np.nanmax(d)) for d in data)
        bottom = ax.get_ylim()[0]
        check(bottom >= floor * (1 - 1e-9), f"{name} {ax.get_title() or ax.get_ylabel()!r}: lower limit "
                                            f"{bottom:.3g} not below the floor {floor:.3g}")
        points = [y for line in ax.get_lines() if line.get_linestyle() not in ("None", ":")
                  for y in np.asarray(line.get_ydata(), dtype=float) if np.isfinite(y)]
        check(min(points) >= floor * (1 - 1e-9), f"{name}: no line drawn below the floor (lowest {min(points):.3g})")
        marks = [line for line in ax.get_lines() if line.get_marker() == "v" and len(line.get_xdata()) == 1]
        check(any(float(m.get_xdata()[0]) == ZERO_FROM + 1 and abs(float(m.get_ydata()[0]) / bottom - 1) < 1e-9
                  for m in marks), f"{name}: the exact zero from layer {ZERO_FROM} is marked on the lower edge "
                                   f"({len(marks)} markers)")


rng = np.random.default_rng(7)
os.makedirs(work, exist_ok=True)
default = [write_run(os.path.join(work, f"default_{m}_{n}.h5"), m, n, 2, rng) for m in MASKS for n in ("none", "sphere")]
runs = [load_run(p) for p in default]

# The main job's plot, through analysis/plot_collapse.py's own path (rcsim.plot.main); the figure is
# caught on its way to the file.
import plot_collapse  # noqa: E402

saved = []
save = plot._save
plot._save = lambda fig, out: (saved.append(fig), save(fig, out))
png = os.path.join(work, "collapse.png")
check(plot_collapse.main(default + ["-o", png]) == 0 and open(png, "rb").read(4) == b"\x89PNG", "collapse.png written")
plot._save = save
measure_of = {plot.measure_words(m, runs): m for m in ("mu", "mu_rel")}
panels_ok(saved[0], "collapse.png", lambda ax: [r["metrics"][measure_of[ax.get_ylabel()]] for r in runs])
texts = [t.get_text() for t in saved[0].legends[0].get_texts()]
check(any("collapsed" in t for t in texts), f"the collapse marker is in the legend: {texts}")
# Colour bound to the mask, line style to the normalisation: 4 + 2 legend entries, not 8.
check(len([t for t in texts if "collapsed" not in t]) == 6, f"legend: 4 masks + 2 norms, not 8 curves: {texts}")
lines = {}
for line in saved[0].axes[0].get_lines():
    if line.get_label() and not line.get_label().startswith("_") and line.get_marker() != "v":
        lines[line.get_label()] = (matplotlib.colors.to_hex(line.get_color()), line.get_linestyle())
by_mask = {m: {lines[k][0] for k in lines if f"mask {m.replace('_', ' ')}," in k} for m in ("complete", "causal")}
by_norm = {n: {lines[k][1] for k in lines if k.endswith(f"normalisation {n}")} for n in ("none", "sphere")}
check(all(len(v) == 1 for v in by_mask.values()) and by_mask["complete"] != by_mask["causal"] and
      all(len(v) == 1 for v in by_norm.values()) and by_norm["none"] != by_norm["sphere"],
      f"one colour per mask, one line style per normalisation: {by_mask}, {by_norm}")

# Figure 2 (analysis/figure2.py) from the same kind of runs: 4 masks x 3 normalisations.
import figure2  # noqa: E402
from rcsim.figures import save_figure  # noqa: E402

runs2 = [load_run(write_run(os.path.join(work, f"figure2_{m}_{n}.h5"), m, n, 2, rng))
         for m in MASKS for n in ("none", "sphere", "layernorm")]
fig = figure2.draw(runs2)
save_figure(fig, os.path.join(work, "figure2"), exts=("png",))
norm_of = {"pure attention": "none", "attention + LayerNorm (sphere)": "sphere",
           "attention + LayerNorm (layernorm)": "layernorm"}
panels_ok(fig, "figure2", lambda ax: [r["metrics"]["mu"] for r in runs2
                                      if r["attrs"]["norm_type"] == norm_of[ax.get_title()]])

# A signed measure is never drawn on a log axis.
signed = [load_run(write_run(os.path.join(work, f"signed_{m}.h5"), m, "none", 1, rng,
                             {"cos_mean": rng.uniform(-0.3, 1.0, (TRIALS, LAYERS + 1))})) for m in MASKS[:2]]
fig = plot.plot_curves_figure(signed, ["cos_mean", "mu"])
check([ax.get_yscale() for ax in fig.axes] == ["linear", "log"], "cos_mean (signed) on a linear axis, mu on log")

# A heat map of a measure of the blocks (/attention_layer, one value fewer than /layer).
sweep = [load_run(write_run(os.path.join(work, f"heat_{m}_{n}.h5"), m, n, 2, rng)) for m in MASKS[:2]
         for n in ("none", "sphere")]
try:
    fig = plot.plot_heatmap_figure(sweep, "mask.type", "norm.type", "attn_entropy")
    grid = fig.axes[0].images[0].get_array()
    want = {(plot.config_values(r)["norm.type"], plot.config_values(r)["mask.type"]):
            np.nanmedian(r["metrics"]["attn_entropy"][:, -1]) for r in sweep}
    check(np.allclose(grid, [[want[("none", "causal")], want[("none", "complete")]],
                             [want[("sphere", "causal")], want[("sphere", "complete")]]]),
          "heat map of attn_entropy: the medians at the last block")
except IndexError as e:
    check(False, f"heat map of attn_entropy: IndexError {e}")
# A heat map of mu with exact zeros: log colours from the positive values, the zero cell reads 0.
sweep3 = sweep + [load_run(write_run(os.path.join(work, f"heat_sliding_{n}.h5"), "sliding_window", n, 2, rng))
                  for n in ("none", "sphere")]
fig = plot.plot_heatmap_figure(sweep3, "mask.type", "norm.type", "mu", layer=10)
cells = [t.get_text() for t in fig.axes[0].texts]
norm = fig.axes[0].images[0].norm
check(norm.vmin >= RATIO * np.nanmax(norm.vmax) and isinstance(norm, matplotlib.colors.LogNorm) and "0" in cells,
      f"heat map of mu with zeros: log colours from {norm.vmin:.3g}, cells {cells}")

# Titles name only the settings that apply: no window under causal and complete masks.
title = plot.plot_curves_figure(signed, ["mu"])._suptitle.get_text()
check("window" not in title and "N = 8" in title, f"no window in a title without a sliding mask: {title!r}")
title = plot.plot_heatmap_figure(signed + [load_run(write_run(os.path.join(work, "heat_c_s.h5"), m, "sphere", 1, rng))
                                           for m in MASKS[:2]], "mask.type", "norm.type", "mu").axes[0].get_title()
check("window" not in title, f"no window in the heat map's title: {title!r}")

if failures:
    sys.exit(f"check_figure_zeros: {len(failures)} failure(s)")
print("check_figure_zeros: all passed")
