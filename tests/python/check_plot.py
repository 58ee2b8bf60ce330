#!/usr/bin/env python3
"""python3 -m rcsim.plot (python/rcsim/plot.py): legends and titles in words, the formats, the
heat map's grid, and clear errors.

Usage: check_plot.py RCSIM WORK_DIR
A depth sweep (model.layers = 4, 8) crossed with two masks: the legend names the swept keys in
words ("L = 4, mask causal"), the title lists the shared settings and not L (which varies);
PNG, PDF and SVG files are written and are what their extension says; the heat map's cells are
the medians of the runs at their last layer; a bad extension, a missing measure and a heat-map
key that does not vary stop with a message naming them.
"""
import os
import subprocess
import sys

import numpy as np

rcsim_exe, work = sys.argv[1:3]
here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "..", "python"))
os.environ["MPLBACKEND"] = "Agg"
from rcsim import load_run, run_paths  # noqa: E402
from rcsim import plot  # noqa: E402

os.makedirs(work, exist_ok=True)
ini = os.path.join(work, "sweep.ini")
with open(ini, "w") as f:
    f.write("[model]\ntokens = 6\ndim = 4\n[run]\ntrials = 3\n[output]\nfile = %s/sweep.h5\n"
            "[sweep]\nmodel.layers = 4, 8\nmask.type = complete, causal\n" % work)
subprocess.run([rcsim_exe, "run", "--config", ini, "--quiet", "--force"], check=True)
sweep = os.path.join(work, "sweep")
failures = []


def check(cond, what):
    print("ok  " if cond else "FAIL", what)
    if not cond:
        failures.append(what)


runs = [load_run(p) for p in run_paths([sweep])]
fig = plot.plot_curves_figure(runs, ["mu", "rank"])
texts = [t.get_text() for t in fig.legends[0].get_texts() if "collapsed" not in t.get_text()]  # the marker's entry aside
# Two swept keys: colour bound to one, line style to the other, one legend entry per value.
check(sorted(texts) == sorted(["L = 4", "L = 8", "mask complete", "mask causal"]), f"legend in words: {texts}")
title = fig._suptitle.get_text()
check("N = 6" in title and "d = 4" in title and "L =" not in title and "mask" not in title,
      f"title lists the shared settings, not the swept ones: {title!r}")
check([ax.get_ylabel() for ax in fig.axes] == ["token similarity mu(X)", "numerical rank"], "axes in words")
# A measure without short words is labelled with words of the long_name its run file carries (the
# registry's): its head before ':', in lines of at most 28 characters.
other = sorted(m for m in runs[0]["metrics"] if m not in plot.MEASURE_WORDS)[0]
import h5py  # noqa: E402
with h5py.File(runs[0]["path"], "r") as f:
    stored = f["metrics"][other].attrs["long_name"]
    stored = stored.decode() if isinstance(stored, bytes) else str(stored)
label = plot.plot_curves_figure(runs, [other]).axes[0].get_ylabel()
check(label != other and stored.startswith(" ".join(label.split())) and max(map(len, label.split("\n"))) <= 28,
      f"{other} labelled from its stored long_name {stored!r}: {label!r}")

outs = [os.path.join(work, "c." + e) for e in ("png", "pdf", "svg")]
r = subprocess.run([sys.executable, "-m", "rcsim.plot", sweep] + sum([["-o", o] for o in outs], []),
                   env=dict(os.environ, PYTHONPATH=os.path.join(here, "..", "..", "python")),
                   capture_output=True, text=True)
magic = {"png": b"\x89PNG", "pdf": b"%PDF", "svg": b"<?xml"}
check(r.returncode == 0 and all(open(o, "rb").read(5).startswith(magic[o[-3:]]) for o in outs),
      "PNG, PDF and SVG written in their formats")
umask = os.umask(0)
os.umask(umask)
check(all(os.stat(o).st_mode & 0o777 == 0o666 & ~umask for o in outs), "figures get the umask's mode, not 0600")

fig = plot.plot_heatmap_figure(runs, "model.layers", "mask.type", "mu_rel")
grid = fig.axes[0].images[0].get_array()
want = {}
for run in runs:
    v = plot.config_values(run)
    want[(v["mask.type"], v["model.layers"])] = np.nanmedian(run["metrics"]["mu_rel"][:, -1])
check(np.allclose(grid[0], [want[("causal", "4")], want[("causal", "8")]]) and
      np.allclose(grid[1], [want[("complete", "4")], want[("complete", "8")]]),
      "heat map cells are the medians at the last layer (rows: mask sorted, columns: L ascending)")


def fails(args, *needles):
    r = subprocess.run([sys.executable, "-m", "rcsim.plot"] + args, capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=os.path.join(here, "..", "..", "python")))
    return r.returncode != 0 and all(n in r.stderr for n in needles) or print("    stderr:", r.stderr.strip())


check(fails([sweep, "-o", os.path.join(work, "x.jpg")], "x.jpg", ".png, .pdf or .svg"), "bad extension named")
check(fails([sweep, "--measure", "mu_typo", "-o", os.path.join(work, "x.png")], "mu_typo", "mu_rel"),
      "unknown measure named, with the ones available")
check(fails([sweep, "--heatmap", "model.layers", "model.dim", "-o", os.path.join(work, "x.png")],
            "model.dim", "model.layers"), "heat-map key that does not vary is named")
# A write that fails part-way (file size limit of 2 kB, SIGXFSZ ignored: the write returns EFBIG)
# leaves the figure that was there untouched and no temporary behind.
import resource  # noqa: E402
import signal  # noqa: E402
keep = os.path.join(work, "keep.png")
with open(keep, "wb") as f:
    f.write(b"the figure that was here\n")


def small_files():
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (2048, 2048))


r = subprocess.run([sys.executable, "-m", "rcsim.plot", sweep, "-o", keep], capture_output=True, text=True,
                   env=dict(os.environ, PYTHONPATH=os.path.join(here, "..", "..", "python")), preexec_fn=small_files)
check(r.returncode == 1 and "cannot write" in r.stderr and "keep.png" in r.stderr and open(keep, "rb").read() == b"the figure that was here\n"
      and not [n for n in os.listdir(work) if n.startswith(".keep.png.")],
      f"a failed write keeps the old figure and leaves no temporary (exit {r.returncode})")

# rcsim.figures.atomic_writer, the one writer of analysis/'s text and figure files (rcsim.plot's too).
from rcsim.figures import atomic_writer, write_text  # noqa: E402

txt = os.path.join(work, "atomic.txt")
write_text(txt, "one\n")
write_text(txt, "two\n")
umask = os.umask(0)
os.umask(umask)
check(open(txt).read() == "two\n" and os.stat(txt).st_mode & 0o777 == 0o666 & ~umask,
      "write_text replaces the file, with the mode a plain open() gives")
try:
    with atomic_writer(txt) as f:
        f.write("half")
        raise RuntimeError("stop")
except RuntimeError:
    pass
check(open(txt).read() == "two\n" and not [n for n in os.listdir(work) if n.startswith(".atomic.txt.")],
      "an error inside atomic_writer keeps the old file and leaves no temporary")
os.makedirs(os.path.join(work, "adir"), exist_ok=True)
link = os.path.join(work, "alink.txt")
if not os.path.lexists(link):
    os.symlink(txt, link)
refused = []
for target in (os.path.join(work, "adir"), link):
    try:
        write_text(target, "x\n")
    except FileExistsError:
        refused.append(target)
check(len(refused) == 2 and os.path.isdir(os.path.join(work, "adir")) and os.path.islink(link)
      and open(txt).read() == "two\n", "atomic_writer refuses to replace a directory or a symbolic link")

if failures:
    sys.exit(f"check_plot: {len(failures)} failure(s)")
print("check_plot: all passed")
