#!/usr/bin/env python3
"""rcsim.plot from memory (issue 39): the Python entry rcsim.plot.curves / final / heatmap takes a
simulate() result, the dict of group="all", an open_sweep Dataset, the dict rcsim.measures returns,
lists and {label: ...} dicts, as well as files; the "value at the last layer against the swept
key" view (rcsim.plot.final, `--final KEY`); a heat map of a measure of the blocks.

Usage: check_plot_memory.py RCSIM BUILD_DIR WORK_DIR
Checks, each against numbers computed here from the data (never from what the plot returned):
the curve of a simulate() result is the median over trials of its mu at every layer; the curves
of rcsim.measures' dict are those of its arrays (leading axes as trials, the last as the layer);
an open_sweep Dataset's curves are labelled by its swept keys in words and its title names the
settings every point shares (from the configuration open_run now keeps in attrs["config"]); the
final view's points are the medians at the last layer, one curve per value of the other key, on
a log axis with the collapse marker for an exact zero; --final on the command line writes a PNG;
a bad source or key raises ValueError (not SystemExit) naming it. About 5 s.
"""
import os
import subprocess
import sys

import numpy as np

rcsim_exe, build, work = sys.argv[1:4]
sys.path.insert(0, os.path.join(build, "python"))
os.environ["MPLBACKEND"] = "Agg"
import matplotlib  # noqa: E402

matplotlib.use("Agg")
import rcsim  # noqa: E402
from rcsim.plot_sources import as_runs  # noqa: E402

failures = []


def check(cond, what):
    print("ok  " if cond else "FAIL", what)
    if not cond:
        failures.append(what)


def median_line(ax):
    """The y data of the first solid line with more than one point (a curve's median)."""
    return next(np.asarray(line.get_ydata(), float) for line in ax.get_lines()
                if line.get_linestyle() == "-" and len(line.get_xdata()) > 1)


# 1. A simulate() result (a Dataset without a file): the median over trials, every layer.
keys = {"model.tokens": 6, "model.dim": 4, "model.layers": 5, "run.trials": 4, "mask.type": "causal",
        "mask.window": 1}
ds = rcsim.simulate(keys=keys)
fig = rcsim.plot.curves(ds, "mu", yscale="linear", xscale="linear")
want = np.median(ds.mu.values, axis=0)
check(np.allclose(median_line(fig.axes[0]), want, rtol=1e-12), "simulate() result: the curve is the median of mu")
title = fig._suptitle.get_text()
check("N = 6" in title and "d = 4" in title and "window" not in title,
      f"simulate() result: title from its configuration, no window under a causal mask: {title!r}")
fig = rcsim.plot.curves(rcsim.simulate(keys=keys, group="all"), ["mu", "rank"])
check(len(fig.axes) == 2, "simulate(group='all') result: one panel per measure")

# 2. rcsim.measures' dict of hidden states [batch, layer, N, d]: leading axes are trials.
hidden = rcsim.simulate(keys=dict(keys, **{"output.tokens": "all"}), group="/").tokens.values  # [trial, L+1, N, d]
m = rcsim.measures(hidden)
fig = rcsim.plot.curves(m, "mu_rel", yscale="linear", xscale="linear")
check(np.allclose(median_line(fig.axes[0]), np.median(m["mu_rel"], axis=0), rtol=1e-12),
      "rcsim.measures dict: the curve is the median over the batch axis")
one = rcsim.measures(hidden[0])  # [layer]
fig = rcsim.plot.curves({"trial 0": one, "trial 1": rcsim.measures(hidden[1])}, "mu", yscale="linear",
                        xscale="linear")
texts = [t.get_text() for t in fig.legends[0].get_texts()]
check(texts == ["trial 0", "trial 1"] and np.allclose(median_line(fig.axes[0]), one["mu"], rtol=1e-12),
      f"{{label: measures}}: the labels name the curves, [layer] arrays are one trial: {texts}")

# 3. A sweep from files, as an open_sweep Dataset and a list of simulate() results.
ini = os.path.join(work, "sweep.ini")
os.makedirs(work, exist_ok=True)
with open(ini, "w") as f:
    f.write("[model]\ntokens = 6\ndim = 4\nlayers = 6\n[run]\ntrials = 3\n[output]\nfile = %s/sweep.h5\n"
            "[sweep]\nmask.type = complete, causal\nmodel.d_qk = 0.25, 1, 64\n" % work)
subprocess.run([rcsim_exe, "run", "--config", ini, "--quiet", "--force"], check=True)
sweep = rcsim.open_sweep(os.path.join(work, "sweep"))
fig = rcsim.plot.curves(sweep, "mu")
texts = sorted(t.get_text() for t in fig.legends[0].get_texts() if "collapsed" not in t.get_text())
check(texts == sorted(["d_QK = 0.25", "d_QK = 1", "d_QK = 64", "mask complete", "mask causal"]),
      f"open_sweep Dataset: legend from the swept keys in words: {texts}")
check("N = 6" in fig._suptitle.get_text() and "mask" not in fig._suptitle.get_text(),
      f"open_sweep Dataset: the title names the shared settings: {fig._suptitle.get_text()!r}")

# 4. The final view: medians at the last layer against model.d_qk, one curve per mask.
fig = rcsim.plot.final(sweep, "model.d_qk", "mu_rel")
ax = fig.axes[0]
ok = True
for mask in ("complete", "causal"):
    want = np.array([np.median(sweep.mu_rel.sel(mask_type=mask, model_d_qk=q).values[:, -1])
                     for q in (0.25, 1.0, 64.0)])
    lines = [line for line in ax.get_lines() if line.get_marker() == "o" and len(line.get_xdata()) == 3]
    got = [np.asarray(line.get_ydata(), float) for line in lines]
    floor = 1e-13 * max(np.nanmax(sweep.mu_rel.values[..., -1]), 0)
    ok &= any(np.allclose(np.where(want < floor, np.nan, want), g, rtol=1e-12, equal_nan=True) for g in got)
check(ok, "final view: one curve per mask, the points are the medians at the last layer")
check(ax.get_xscale() == "log" and [float(x) for x in lines[0].get_xdata()] == [0.25, 1.0, 64.0],
      "final view: numeric key on a log x axis at its values")
texts = [t.get_text() for t in fig.legends[0].get_texts()]
check({"mask complete", "mask causal"} <= set(texts), f"final view: legend names the other key: {texts}")
# Two runs of measures dicts, one with an exact zero at its last layer.
zero = {"mu": np.array([[1.0, 0.5, 0.0], [1.0, 0.4, 0.0]])}
runs = [dict(r, values={"mask.type": mask}) for r, mask in
        zip(as_runs([zero, {"mu": np.array([[1.0, 0.5, 0.2]])}]), ("complete", "causal"))]
fig = rcsim.plot.plot_final_figure(runs, "mask.type", "mu")
ax = fig.axes[0]
marks = [line for line in ax.get_lines() if line.get_marker() == "v"]
check(ax.get_yscale() == "log" and len(marks) == 1 and float(marks[0].get_xdata()[0]) == 1.0
      and abs(float(marks[0].get_ydata()[0]) / (1e-13 * 0.2) - 1) < 1e-9 and ax.get_ylim()[0] >= 1e-13 * 0.2 * 0.999,
      "final view: an exact zero is the collapse marker at the floor (1e-13 x the largest value drawn, 0.2), "
      "the axis not below it")

# 4b. A heat map of a measure of the blocks (attn_entropy on /attention_layer, one value fewer than
# /layer) from the open_sweep Dataset: no IndexError, the cells are the medians at the last block.
try:
    grid = rcsim.plot.heatmap(sweep, "model.d_qk", "mask.type", "attn_entropy").axes[0].images[0].get_array()
    want = np.array([[np.median(sweep.attn_entropy.sel(mask_type=m, model_d_qk=q).values[:, -1])
                      for q in (0.25, 1.0, 64.0)] for m in ("causal", "complete")])
    check(np.allclose(grid, want, rtol=1e-12), "heat map of attn_entropy (per block): the medians at the last block")
except IndexError as e:
    check(False, f"heat map of attn_entropy: IndexError {e}")

# 5. The command line: --final writes the figure; a bad key is named.
env = dict(os.environ, PYTHONPATH=os.path.join(build, "python"))
out = os.path.join(work, "final.png")
r = subprocess.run([sys.executable, "-m", "rcsim.plot", os.path.join(work, "sweep"), "--final", "model.d_qk",
                    "-o", out], capture_output=True, text=True, env=env)
check(r.returncode == 0 and open(out, "rb").read(4) == b"\x89PNG", f"--final writes a PNG ({r.stderr.strip()})")
r = subprocess.run([sys.executable, "-m", "rcsim.plot", os.path.join(work, "sweep"), "--final", "model.dim",
                    "-o", out], capture_output=True, text=True, env=env)
check(r.returncode != 0 and "model.dim" in r.stderr and "model.d_qk" in r.stderr, "--final on a key that does not vary")

# 6. Errors from Python: ValueError or TypeError naming the problem, never SystemExit.
for call, needle in ((lambda: rcsim.plot.final(sweep, "model.dim"), "model.dim"),
                     (lambda: rcsim.plot.curves(ds, "mu_typo"), "mu_typo"),
                     (lambda: rcsim.plot.curves(42), "int")):
    try:
        call()
        check(False, f"error naming {needle}: nothing raised")
    except (ValueError, TypeError) as e:
        check(needle in str(e), f"error naming {needle}: {e}")

if failures:
    sys.exit(f"check_plot_memory: {len(failures)} failure(s)")
print("check_plot_memory: all passed")
