#!/usr/bin/env python3
"""Figures as a file keeps them (issue 48): rcsim.plot.curves and rcsim.plot.final saved with a plain
fig.savefig keep their legend inside the figure; the depth axis is linear for short stacks and log
from 20 layers; a whole-number measure (rank) is on a linear axis; log ticks never read "x 10^0";
titles say what the file ran (a pretrained checkpoint's family and architecture, "no residual");
ordinary data print no warning; bad arguments raise one ValueError naming the argument; a figure
script's --out x.png writes x.png.

Usage: check_plot_saved.py RCSIM WORK_DIR (RCSIM writes a small pretrained run file with
`rcsim generate --measure`). About 3 s.
"""
import io
import os
import subprocess
import sys
import warnings

import numpy as np

rcsim_exe, work = sys.argv[1:3]
here = os.path.dirname(os.path.abspath(__file__))
root = os.path.join(here, "..", "..")
sys.path.insert(0, os.path.join(root, "python"))
os.environ["MPLBACKEND"] = "Agg"
import matplotlib  # noqa: E402
from rcsim import plot  # noqa: E402
from rcsim.figures import save_figure  # noqa: E402

os.makedirs(work, exist_ok=True)
failures = []
warnings.simplefilter("always")


def check(cond, what):
    print("ok  " if cond else "FAIL", what)
    if not cond:
        failures.append(what)


rng = np.random.default_rng(48)


def run(layers, config, trials=5, nan_from=None):
    """A run in load_run's form: mu decaying from 1, mu_rel in [0.2, 1], an integer rank."""
    t = np.arange(layers + 1)
    mu = np.exp(-0.3 * t)[None] * (1 + 0.05 * rng.random((trials, layers + 1)))
    mu_rel = 0.2 + 0.8 * mu
    if nan_from is not None:
        mu_rel[nan_from:] = np.nan
    rank = np.maximum(4 - t // 3, 1)[None].repeat(trials, 0).astype(float)
    return {"layer": t, "attention_layer": t[:-1], "metrics": {"mu": mu, "mu_rel": mu_rel, "rank": rank},
            "metric_info": {}, "config": config}


def saved_inside(fig, what):
    """Save as a user would (no bbox_inches) and check every legend lies inside the figure."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    renderer = fig.canvas.get_renderer()
    box = fig.bbox
    legends = fig.legends + [a.get_legend() for a in fig.axes if a.get_legend() is not None]
    inside = [lg.get_window_extent(renderer) for lg in legends]
    ok = bool(legends) and all(b.x0 >= box.x0 - 1 and b.y0 >= box.y0 - 1 and b.x1 <= box.x1 + 1
                               and b.y1 <= box.y1 + 1 for b in inside)
    check(ok, f"{what}: the legend is inside the saved figure ({[tuple(np.round(b.extents)) for b in inside]} in "
              f"{tuple(np.round(box.extents))})")


def tick_texts(ax):
    ax.figure.canvas.draw()
    return [t.get_text() for t in ax.get_xticklabels(which="both") + ax.get_yticklabels(which="both")]


short = [run(6, f"[model]\nlayers = 6\n[mask]\ntype = {m}\n[residual]\nalpha = 0\n") for m in ("complete", "causal")]
with warnings.catch_warnings(record=True) as caught:
    fig = plot.curves(short, ["mu", "mu_rel", "rank"])
saved_inside(fig, "curves of two runs")
mu_ax, rel_ax, rank_ax = fig.axes[:3]
check(mu_ax.get_xscale() == "linear" and mu_ax.get_xlabel() == "layer t",
      f"6 layers: a linear depth axis, 'layer t' ({mu_ax.get_xscale()}, {mu_ax.get_xlabel()!r})")
check(rank_ax.get_yscale() == "linear" and mu_ax.get_yscale() == "log",
      f"rank (whole numbers) on a linear axis, mu on a log one ({rank_ax.get_yscale()}, {mu_ax.get_yscale()})")
texts = tick_texts(rel_ax)
check(not any("times" in t or "\u00d7" in t for t in texts), f"no 'x 10^k' tick labels on mu_rel's log axis {texts}")
title = fig._suptitle.get_text()
check("no residual" in title and "residual alpha 0" not in title, f"title says 'no residual': {title!r}")
check(not caught, f"no warning for ordinary data: {[str(w.message) for w in caught]}")

deep = [run(40, f"[model]\nlayers = 40\n[mask]\ntype = {m}\n") for m in ("complete", "causal")]
fig = plot.curves(deep, "mu")
ax = fig.axes[0]
texts = tick_texts(ax)
check(ax.get_xscale() == "log" and ax.get_xlabel() == "layer t + 1" and not any("times" in t for t in texts),
      f"40 layers: a log depth axis 'layer t + 1', plain ticks ({ax.get_xscale()}, {texts})")
check(plot.curves(short, "mu", xscale="log").axes[0].get_xscale() == "log", "xscale='log' is kept for 6 layers")

# final: a depth sweep crossed with two masks, one point missing and one all-NaN (no warnings).
sweep = [run(L, f"[model]\nlayers = {L}\n[mask]\ntype = {m}\n", nan_from=0 if (L, m) == (8, "causal") else None)
         for L in (2, 4, 8, 16) for m in ("complete", "causal") if (L, m) != (16, "causal")]
with warnings.catch_warnings(record=True) as caught:
    fig = plot.final(sweep, "model.layers", "mu_rel")
    saved_inside(fig, "final against model.layers")
check(not caught, f"final with a missing and an all-NaN point: no warning {[str(w.message) for w in caught]}")
texts = tick_texts(fig.axes[0])
check(not any("times" in t for t in texts), f"final: no 'x 10^k' tick labels {texts}")

# A pretrained run file: its title names the family and the architecture it stores.
stories = os.path.join(work, "stories.h5")
subprocess.run([rcsim_exe, "generate", os.path.join(root, "configs/models/stories260K/stories260K.bin"), "--steps=7",
                "--sequences=2", "--temperature=1", f"--measure={stories}", "--force"], check=True,
               stdout=subprocess.DEVNULL)
with warnings.catch_warnings(record=True) as caught:
    fig = plot.curves(stories, ["mu_rel", "rank"])
title = fig._suptitle.get_text().replace("\n", " ")
check(all(w in title for w in ("stories260K.bin", "Llama", "RMSNorm", "heads of size 8", "4 key/value", "pretrained weights"))
      and not any(w in title for w in ("normalisation none", "d_QK", "residual alpha")),
      f"pretrained title from the [pretrained] section: {title!r}")
check(not caught, f"pretrained run file: no warning {[str(w.message) for w in caught]}")

# Arguments: one ValueError naming the argument and what is allowed.
for kwargs, words in (({"trials": "mean"}, ["trials", "band", "median"]), ({"xscale": "symlog"}, ["xscale", "auto"]),
                      ({"yscale": "ln"}, ["yscale", "linear"]), ({"style": "poster"}, ["style", "paper"]),
                      ({"source": []}, ["source", "empty list"]), ({"source": {}}, ["source", "empty dict"]),
                      ({"measures": []}, ["measures", "empty"])):
    args = dict({"source": short}, **kwargs)
    try:
        plot.curves(**args)
        check(False, f"curves({kwargs}): nothing raised")
    except ValueError as e:
        check(all(w in str(e) for w in words), f"curves({kwargs}): {e}")

# A figure script's --out with an extension writes that file alone (figures.save_figure).
fig = plot.curves(short, "mu")
save_figure(fig, os.path.join(work, "x.png"))
save_figure(fig, os.path.join(work, "y"))
check(os.path.exists(os.path.join(work, "x.png")) and not os.path.exists(os.path.join(work, "x.png.png"))
      and not os.path.exists(os.path.join(work, "x.png.pdf")), "--out x.png writes x.png (not x.png.png)")
check(all(os.path.exists(os.path.join(work, "y." + e)) for e in ("png", "pdf")), "--out y writes y.png and y.pdf")
check(matplotlib.rcParams["savefig.bbox"] is None, "the paper style does not leak savefig.bbox")

if failures:
    sys.exit(f"check_plot_saved: {len(failures)} failure(s)")
print("check_plot_saved: all passed")
