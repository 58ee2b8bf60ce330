"""Shared by the figure scripts (analysis/figure*.py): command line, running rcsim, saving."""


import contextlib
import os
import tempfile

from .command import Parser


class _FigureParser(Parser):
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


def doc_summary(doc):
    """A script's --help description: the first paragraph of its docstring `doc`, on one line (the
    first line alone may stop mid-sentence)."""
    return " ".join(doc.strip().split("\n\n")[0].split())


def figure_arguments(doc, default_name):
    """The command line every figure script takes; `doc`: the script's docstring (doc_summary)."""
    p = _FigureParser(default_name, description=doc_summary(doc))
    p.add_argument("--rcsim", default=None, help="rcsim executable (default: ./build/sim/rcsim, else the one "
                   "`pip install .` put on PATH; rcsim.command.rcsim_executable)")
    p.add_argument("--data", default=None,
                   help=f"directory for run files (default data/{default_name}, with --tiny data/{default_name}-tiny)")
    p.add_argument("--out", default=None,
                   help=f"output image: without extension, PNG and PDF are written; with .png, .pdf or .svg, that file "
                        f"alone (default figures/{default_name}, "
                        f"with --tiny data/{default_name}-tiny/{default_name})")
    p.add_argument("--tiny", action="store_true", help="a tiny version (CI): few trials and layers")
    p.add_argument("--force", action="store_true", help="recompute runs that are already complete")
    return p


def rcsim(args, exe, *rest):
    """Run rcsim (`exe`, the script's --rcsim; None: found by rcsim.command.rcsim_executable) with
    arguments; stop with its message on failure."""
    import subprocess
    from .command import rcsim_executable
    cmd = [rcsim_executable(exe), *rest] + (["--force"] if args.force else [])
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:  # one line: the command and rcsim's own (last) error line
        last = (r.stderr.strip().splitlines() or ["no message"])[-1]
        raise SystemExit(f"{' '.join(cmd)} failed (exit {r.returncode}): {last}")
    return r.stdout


@contextlib.contextmanager
def atomic_writer(path, binary=False):
    """The one writer of analysis/'s output files: `with atomic_writer(path) as f: f.write(...)`.
    Writes to an exclusive temporary in the same directory, flushes and fsyncs it, closes it (an
    error on close is raised), gives it the mode a plain open() would, and only then renames it
    over `path` (os.replace); on any error the temporary is removed and `path` is left as it was.
    It refuses to replace anything that is not a regular file (a directory, a symbolic link, a
    FIFO, a device), or a file this process read as input (command.note_input): OutputRefused, a
    FileExistsError, an OSError, so that callers catching OSError report it (command.run: exit 2)."""
    from .command import check_output
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    check_output(path)
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
    except OSError as e:  # named by the output, not the temporary: "cannot write 'out.png' (File too large)"
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if getattr(e, "exit_status", None):
            raise
        raise OSError(e.errno, f"cannot write ({e.strerror or e}); nothing was replaced", path) from None
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write_text(path, text):
    """`text` into `path` through atomic_writer."""
    with atomic_writer(path) as f:
        f.write(text)


def write_hdf5(path, datasets, attrs=None):
    """An HDF5 file of `datasets` ({name: array}) and root attributes `attrs`, made in memory
    (HDF5's core driver: a failing write cannot leave HDF5 half-closed on a Python stream), then
    written through atomic_writer."""
    import h5py
    with h5py.File(os.path.basename(path) or "image.h5", "w", driver="core", backing_store=False) as f:
        for name, a in datasets.items():
            f[name] = a
        for name, v in (attrs or {}).items():
            f.attrs[name] = v
        f.flush()
        image = f.id.get_file_image()
    with atomic_writer(path, binary=True) as stream:
        stream.write(image)


IMAGE_EXTENSIONS = ("png", "pdf", "svg")


def save_figure(fig, out, dpi=120, exts=("png", "pdf"), **savefig):
    """`fig` as out.png and out.pdf (or the extensions `exts`), each through atomic_writer; an `out`
    that names its format (x.png, x.pdf, x.svg) is that one file."""
    base, ext = os.path.splitext(os.fspath(out))
    if ext.lower()[1:] in IMAGE_EXTENSIONS:
        out, exts = base, (ext[1:],)
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


# Log axes and values that are not positive. On some machines (and with some settings) the tokens
# become bitwise equal and mu is exactly 0; elsewhere it sits at a round-off plateau 1e-16 to 1e-14
# of its scale (the level depends on the machine's arithmetic), or underflows to ~1e-308. Drawn as
# it comes, a 0 (clipped to the smallest float) stretches a log axis to 1e-308 and squeezes every
# informative curve into its top sliver. So every log-scale panel of analysis/ has one floor:
# FLOOR_RATIO x the largest finite value drawn in the panel, 1e-13, as `rcsim analyze`'s round-off
# floor (docs/user/analysis.md), about 450 float64 epsilons: clear of every round-off plateau, so an
# exact 0 and round-off look the same. A median below the floor (collapsed as far as float64 can
# tell) ends its curve: a dotted drop to a "v" marker on the axis' lower edge, which is the floor
# when any curve reaches it and never lower; the 10-90% band is cut at the floor. The same data thus
# give the same picture whether a machine's arithmetic makes the zeros exact or not.
FLOOR_RATIO = 1e-13
COLLAPSED = "v"  # the marker of a curve that ends below the floor
COLLAPSED_LABEL = "below 1e-13 x max: collapsed (0 or round-off)"


def log_floor(arrays, ratio=FLOOR_RATIO):
    """The floor of a log-scale panel: `ratio` x the largest finite value of `arrays` (None when
    none is positive: nothing can be drawn on a log axis)."""
    import numpy as np
    top = max((float(np.nanmax(a)) for a in (np.asarray(a, dtype=float) for a in arrays)
               if np.isfinite(a).any()), default=0.0)
    return ratio * top if top > 0 else None


def signed(values):
    """True when `values` has a finite negative entry: such a measure (cos_mean, a log) belongs on a
    linear axis, never a log one."""
    import numpy as np
    values = np.asarray(values, dtype=float)
    return bool(np.any(values[np.isfinite(values)] < 0))


def draw_curve(ax, x, values, colour, label=None, trials="band", floor=None, **line):
    """One curve of values[trial, layer] against x: the median with the 10-90% band over trials
    (trials="band"), every trial ("all") or the median alone ("median"). With a `floor` (a log
    axis, see FLOOR_RATIO) a line is not drawn below the floor, and a dotted drop to a COLLAPSED
    marker at the floor shows where it first went there; returns True when it did."""
    import numpy as np
    from .files import band
    x = np.asarray(x)
    med, lo, hi = band(values)
    rows = [med] if trials != "all" else list(np.asarray(values, dtype=float))
    collapsed = False
    for j, row in enumerate(rows):
        thin = {"alpha": 0.35, "lw": 0.6} if trials == "all" else {}
        name = label if j == 0 else None
        if floor is None:
            ax.plot(x, row, color=colour, label=name, **thin, **line)
            continue
        with np.errstate(invalid="ignore"):
            below = row < floor  # NaN is neither: a gap, as matplotlib draws it
        ax.plot(x, np.where(below, np.nan, row), color=colour, label=name, **thin, **line)
        # The first layer below the floor gets the drop and the marker; a curve that hovers at the
        # floor later (a round-off plateau) shows gaps there, not a row of markers.
        first = np.flatnonzero(below)[:1]
        for i in first:
            if i > 0 and np.isfinite(row[i - 1]):
                ax.plot(x[i - 1:i + 1], [row[i - 1], floor], color=colour, **{"lw": 0.8, **thin, "ls": ":"})
            ax.plot([x[i]], [floor], COLLAPSED, color=colour, ms=5 if trials != "all" else 3, clip_on=False,
                    zorder=6)  # above a legend (5): the marker is the news
        collapsed = collapsed or bool(len(first))
    if trials == "band":
        if floor is not None:
            lo = np.maximum(lo, floor)
            hi = np.where(hi >= floor, hi, np.nan)
        ax.fill_between(x, lo, hi, color=colour, alpha=0.15, linewidth=0)
    return collapsed


def log_panel(ax, curves, trials="band", ratio=FLOOR_RATIO):
    """Draw `curves`, each a dict(x=, values=[trial, layer], colour=, label=, and line keywords such
    as ls=) with draw_curve on a log y axis whose floor is log_floor(all values, ratio): the axis
    never reaches below the floor. Returns the floor (None: no positive value)."""
    floor = log_floor([c["values"] for c in curves], ratio)
    ax.set_yscale("log")
    if floor is None:
        ax.text(0.5, 0.5, "no positive value to draw\n(every value 0 or missing)", transform=ax.transAxes,
                ha="center", va="center")
        return None
    collapsed = False
    for c in curves:
        c = dict(c)
        collapsed |= draw_curve(ax, c.pop("x"), c.pop("values"), c.pop("colour"), c.pop("label", None), trials,
                                floor, **c)
    bottom, top = ax.get_ylim()
    ax.set_ylim(floor if collapsed else max(bottom, floor), top)
    plain_log_ticks(ax.yaxis)
    if collapsed:  # one legend entry explains the markers
        ax.plot([], [], COLLAPSED, color="0.35", label=COLLAPSED_LABEL.replace("1e-13", f"{ratio:g}"))
    return floor


def plain_log_ticks(axis):
    """Tick labels of a log `axis` (ax.xaxis, ax.yaxis): plain numbers ("0.3", "2", "50") when the
    whole axis lies between 0.001 and 10^4, else 10^k; never "2 x 10^0". Minor ticks are labelled,
    as matplotlib does, only where the axis spans too few decades to have enough major ones."""
    from matplotlib.ticker import LogFormatterSciNotation

    class Plain(LogFormatterSciNotation):
        def __call__(self, x, pos=None):
            text = super().__call__(x, pos)
            low, high = sorted(self.axis.get_view_interval()) if self.axis is not None else (x, x)
            return f"{x:g}" if text and 1e-3 <= low and high < 1e4 else text

    axis.set_major_formatter(Plain())
    axis.set_minor_formatter(Plain(labelOnlyBase=False, minor_thresholds=(2, 0.5)))


def legend_below(fig, handles, ncol=3, pad=0.08):
    """Lay out `fig` (tight_layout) with a legend of `handles` under its panels and inside the
    figure: the figure grows by the legend's height (the panels keep their size), so that savefig
    with or without bbox_inches="tight", and Jupyter's inline view, show the same picture."""
    fig.tight_layout()
    if not handles:
        return None
    renderer = fig.canvas.get_renderer() if hasattr(fig.canvas, "get_renderer") else fig._get_renderer()
    for columns in range(min(ncol, len(handles)), 0, -1):  # as many columns as the figure's width holds
        legend = fig.legend(handles=handles, loc="lower center", ncol=columns, frameon=False,
                            bbox_to_anchor=(0.5, 0.0))
        if columns == 1 or legend.get_window_extent(renderer).width <= 0.98 * fig.bbox.width:
            break
        legend.remove()
    height = legend.get_window_extent(renderer).height / fig.dpi + pad  # inches
    old = fig.get_figheight()
    fig.set_figheight(old + height)
    fig.tight_layout(rect=(0, height / (old + height), 1, 1))
    return legend


def plot_curves(ax, runs, key, colour_of, label_of, ratio=FLOOR_RATIO):
    """Median and 10-90% band across trials of metrics[key] against layer t + 1, log-log, through
    log_panel: a median below `ratio` x the panel's largest value (exact zeros, underflow,
    round-off) ends its curve with a marker on the axis' lower edge."""
    log_panel(ax, [{"x": run["layer"] + 1, "values": run["metrics"][key], "colour": colour_of(run),
                    "label": label_of(run)} for run in runs], ratio=ratio)
    ax.set_xscale("log")
    plain_log_ticks(ax.xaxis)
    ax.set_xlabel("layer t + 1")
    ax.grid(True, which="both", alpha=0.3)


# The measures shown side by side: Wu et al.'s mu and the two scale-free ones.
MEASURES = {"mu": "mu = ||X - 1 mean||_F", "mu_rel": "mu_rel = mu / ||X||_F",
            "rank_one_residual": "rank_one_residual"}


def measure_grid(runs, rows, cols, curve_of, curves, title, ratio=FLOOR_RATIO, panel_size=(4.0, 3.2)):
    """A grid of log-log panels: rows and cols are lists of (label, predicate(run)); in each
    panel the runs satisfying both predicates, one curve per name (curve_of(run) in `curves`,
    drawn in that order and colour), each the median and 10-90% band over trials of the
    measure. Each row's predicate may carry the measure as row[2] (default mu_rel).
    A median below `ratio` x a panel's largest value (exact zeros: bitwise identical tokens) ends
    its curve with a marker on the panel's lower edge (log_panel)."""
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
                        ratio)
            ax.set_title(f"{clabel}, {row[0]}" if row[0] else clabel, fontsize=9)
            if j == 0:
                ax.set_ylabel(MEASURES.get(measure, measure), fontsize=8)
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
