"""Shared by the figure scripts (analysis/figure*.py): command line, running rcsim, saving."""


import argparse
import contextlib
import errno
import os
import stat
import tempfile


class _FigureParser(argparse.ArgumentParser):
    """Fills the defaults of --data and --out after parsing: the full figure uses data/NAME and
    figures/NAME; --tiny uses data/NAME-tiny for both, so a tiny run never meets the full run's
    files nor overwrites the committed figures."""

    def __init__(self, default_name, **kw):
        super().__init__(**kw)
        self.default_name = default_name

    def parse_args(self, args=None, namespace=None):
        a = super().parse_args(args, namespace)
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))
        name = self.default_name + ("-tiny" if a.tiny else "")
        if a.data is None:
            a.data = os.path.join(root, "data", name)
        if a.out is None:
            a.out = os.path.join(root, "data", name, self.default_name) if a.tiny \
                else os.path.join(root, "figures", self.default_name)
        return a


def figure_arguments(description, default_name):
    """The command line every figure script takes."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))
    p = _FigureParser(default_name, description=description)
    p.add_argument("--rcsim", default=os.path.join(root, "build", "sim", "rcsim"), help="rcsim executable")
    p.add_argument("--data", default=None,
                   help=f"directory for run files (default data/{default_name}, with --tiny data/{default_name}-tiny)")
    p.add_argument("--out", default=None,
                   help=f"output image, without extension (PNG and PDF are written; default figures/{default_name}, "
                        f"with --tiny data/{default_name}-tiny/{default_name})")
    p.add_argument("--tiny", action="store_true", help="a tiny version (CI): few trials and layers")
    p.add_argument("--force", action="store_true", help="recompute runs that are already complete")
    return p


def rcsim(args, exe, *rest):
    """Run rcsim with arguments; stop with its message on failure."""
    import subprocess
    cmd = [exe, *rest] + (["--force"] if args.force else [])
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)}\nfailed ({r.returncode}): {r.stderr.strip()}")
    return r.stdout


@contextlib.contextmanager
def atomic_writer(path, binary=False):
    """The one writer of analysis/'s output files: `with atomic_writer(path) as f: f.write(...)`.
    Writes to an exclusive temporary in the same directory, flushes and fsyncs it, closes it (an
    error on close is raised), gives it the mode a plain open() would, and only then renames it
    over `path` (os.replace); on any error the temporary is removed and `path` is left as it was.
    It refuses to replace anything that is not a regular file (a directory, a symbolic link, a
    FIFO, a device): FileExistsError, an OSError, so that callers catching OSError report it."""
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        mode = None
    if mode is not None and not stat.S_ISREG(mode):
        raise FileExistsError(errno.EEXIST, "exists and is not a regular file: not replaced", path)
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=folder)
    try:
        f = os.fdopen(fd, "wb" if binary else "w", **({} if binary else {"encoding": "utf-8"}))
        try:
            yield f
            f.flush()
            os.fsync(f.fileno())
        finally:
            f.close()
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp's 0600 -> the mode a plain open() would give
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write_text(path, text):
    """`text` into `path` through atomic_writer."""
    with atomic_writer(path) as f:
        f.write(text)


def save_figure(fig, out, dpi=120, exts=("png", "pdf"), **savefig):
    """`fig` as out.png and out.pdf (or the extensions `exts`), each through atomic_writer."""
    for ext in exts:
        with atomic_writer(f"{out}.{ext}", binary=True) as f:
            fig.savefig(f, format=ext, dpi=dpi, **savefig)
    print("wrote " + " and ".join(f"{out}.{ext}" for ext in exts))


def run_config(args, config, tiny=("--run.trials=2", "--model.layers=6", "--model.tokens=8", "--model.dim=4")):
    """Run a figure's configuration (a sweep) into args.data; --tiny adds the `tiny` overrides.
    Returns every complete run of the sweep, loaded (load_run)."""
    from .files import sweep_runs
    out = os.path.join(args.data, "runs.h5")
    extra = list(tiny) if args.tiny else []
    rcsim(args, args.rcsim, "run", "--config", config, f"--output.file={out}", "--quiet", *extra)
    return sweep_runs(os.path.join(args.data, "runs"))


def stored_config(run):
    """The run's stored (resolved) configuration as a ConfigParser."""
    import configparser
    c = configparser.ConfigParser()
    c.read_string(run["config"])
    return c


def plot_curves(ax, runs, key, colour_of, label_of, floor=None):
    """Median and 10-90% band across trials of metrics[key] against layer t + 1, log-log; values
    below `floor` (default the smallest normal float; exact zeros) are drawn at the floor."""
    import numpy as np
    from .files import band
    floor = np.finfo(float).tiny if floor is None else floor
    for run in runs:
        x = run["layer"] + 1
        med, lo, hi = band(np.maximum(run["metrics"][key], floor))
        c = colour_of(run)
        ax.plot(x, med, color=c, label=label_of(run))
        ax.fill_between(x, lo, hi, color=c, alpha=0.15, linewidth=0)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("layer t + 1")
    ax.grid(True, which="both", alpha=0.3)


# The measures shown side by side: Wu et al.'s mu and the two scale-free ones.
MEASURES = {"mu": "mu = ||X - 1 mean||_F", "mu_rel": "mu_rel = mu / ||X||_F",
            "rank_one_residual": "rank_one_residual"}


def measure_grid(runs, rows, cols, curve_of, curves, title, floor=1e-18, panel_size=(4.0, 3.2)):
    """A grid of log-log panels: rows and cols are lists of (label, predicate(run)); in each
    panel the runs satisfying both predicates, one curve per name (curve_of(run) in `curves`,
    drawn in that order and colour), each the median and 10-90% band over trials of the
    measure. Each row's predicate may carry the measure as row[2] (default mu_rel).
    Exact zeros (bitwise identical tokens) are drawn at `floor`."""
    import matplotlib.pyplot as plt
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    fig, axes = plt.subplots(len(rows), len(cols), squeeze=False,
                             figsize=(panel_size[0] * len(cols), panel_size[1] * len(rows)))
    for i, row in enumerate(rows):
        measure = row[2] if len(row) > 2 else "mu_rel"
        for j, (clabel, cpred) in enumerate(cols):
            ax = axes[i, j]
            sel = sorted((r for r in runs if row[1](r) and cpred(r) and curve_of(r) in curves),
                         key=lambda r: curves.index(curve_of(r)))
            plot_curves(ax, sel, measure, lambda r: colours[curves.index(curve_of(r)) % len(colours)], curve_of,
                        floor)
            ax.set_title(f"{clabel}, {row[0]}" if row[0] else clabel, fontsize=9)
            if j == 0:
                ax.set_ylabel(f"{MEASURES.get(measure, measure)}\n(0 drawn at {floor:g})", fontsize=8)
            if i == 0:
                ax.legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def first_layer_below(layers, median, threshold):
    """The first recorded layer whose median is below threshold (None if never)."""
    import numpy as np
    idx = np.flatnonzero(median < threshold)
    return int(layers[idx[0]]) if len(idx) else None


def write_summary(runs, label_of, path, at=(10, 100), measures=("mu", "mu_rel", "rank_one_residual"),
                  roundoff=1e-12, extra=None):
    """A plain-text table, one line per run: median and 10-90% across trials of each measure at
    the layers `at` (the nearest recorded layer at or after) and at the last layer, the first
    layer where the median mu_rel is below `roundoff`, and the fraction of trials with mu_rel
    below it at the last layer; `extra(run)` may add a line. docs/science/figures.md quotes these files."""
    import numpy as np
    from .files import band
    lines = [f"# {len(runs)} runs; each entry: median [10%, 90%] over trials; mu_rel < {roundoff:g} = round-off"]
    for r in sorted(runs, key=label_of):
        layer = r["layer"]
        picks = [min(int(np.searchsorted(layer, t)), len(layer) - 1) for t in at] + [len(layer) - 1]
        trials = r["metrics"]["mu"].shape[0]
        parts = [f"{label_of(r)} ({trials} trials)"]
        for m in measures:
            med, lo, hi = band(r["metrics"][m])
            parts.append("  " + m + ": " + "; ".join(f"t={layer[k]} {med[k]:.3g} [{lo[k]:.2g}, {hi[k]:.2g}]"
                                                     for k in picks))
        med_rel = band(r["metrics"]["mu_rel"])[0]
        below = first_layer_below(layer, med_rel, roundoff)
        frac = float(np.mean(r["metrics"]["mu_rel"][:, -1] < roundoff))
        parts.append(f"  median mu_rel below {roundoff:g} from layer: {below if below is not None else 'never'}; "
                     f"trials below at t={layer[-1]}: {100 * frac:.0f}%")
        if extra is not None:
            parts.append("  " + extra(r))
        lines.append("\n".join(parts))
    text = "\n".join(lines) + "\n"
    write_text(path, text)
    print(text, end="")
    print(f"wrote {path}")
