"""rcsim's plotting entry: curves of any measure against depth for runs and sweeps, and heat maps
of two-axis sweeps, ready for a paper.

    python3 -m rcsim.plot RUN.h5|SWEEP_DIR [...] -o OUT.png [-o OUT.pdf] [--measure mu mu_rel]
        [--trials band|all|median] [--xscale auto|log|linear] [--yscale auto|log|linear] [--style paper|screen]
    python3 -m rcsim.plot SWEEP_DIR --heatmap KEY_X KEY_Y --measure mu_rel [--layer L] -o OUT.pdf
    python3 -m rcsim.plot SWEEP_DIR --final KEY --measure mu_rel [--layer L] -o OUT.pdf

From Python, the same figures of files or of what is in memory (a simulate() result, an
open_sweep Dataset, the dict rcsim.measures returns): rcsim.plot.curves(source, ...),
rcsim.plot.final(source, KEY, ...), rcsim.plot.heatmap(source, KEY_X, KEY_Y, ...) return a
matplotlib Figure (docs/user/plotting.md).

Curves are labelled by the keys whose values differ between the runs (in words: "mask",
"d_QK", "normalisation"), the title lists the settings every run shares (N, d, L, mask, ...),
and each curve is the median over trials with the 10-90% band (--trials band), every trial
(all) or the median alone. The output format follows the extension (PNG, PDF, SVG).
"""
import os
import sys
import textwrap

import numpy as np

from . import _validate as check
from .command import Parser, UsageError, check_output, run as run_command
from .files import band, load_run, run_paths
from .plot_sources import as_runs, config_values_of_text
from .plot_titles import PRETRAINED_TITLE_KEYS, no_residual_words, pretrained_words

# Configuration keys in words, for legends, titles and axes.
WORDS = {
    "model.tokens": "N", "model.dim": "d", "model.layers": "L", "model.heads": "heads", "model.d_qk": "d_QK",
    "model.beta": "beta", "model.key_dim": "d_k", "model.value_dim": "d_v", "mask.type": "mask",
    "mask.window": "window", "norm.type": "normalisation", "norm.position": "norm position",
    "norm.eps": "LayerNorm eps", "residual.alpha": "residual alpha", "attention.kind": "attention",
    "weights.v": "W_V", "weights.q": "W_Q", "weights.k": "W_K", "weights.std": "weight std", "init.type": "X(0)",
    "mlp.width": "MLP width", "run.trials": "trials", "run.precision": "precision", "run.seed": "seed",
    "pretrained.weights": "weights", "pretrained.norm": "norm", "pretrained.depth": "depth",
}
# The settings a title names when every run shares them (in this order).
TITLE_KEYS = ["model.tokens", "model.dim", "model.layers", "model.heads", "mask.type", "mask.window", "norm.type",
              "model.d_qk", "residual.alpha", "run.trials"]
# Short words for the common measures' axes; any other measure is labelled with the long_name its
# run file carries (from the engine's measure registry).
MEASURE_WORDS = {
    "mu": "token similarity mu(X)", "mu_rel": "relative similarity mu(X) / ||X||_F", "fro_norm": "||X||_F",
    "sigma_min": "smallest singular value", "sigma_max": "largest singular value", "rank": "numerical rank",
    "rank_one_residual": "distance to rank one (relative)", "stable_rank": "stable rank",
    "cos_abs_mean": "mean |cos| between tokens", "attn_min": "smallest attention weight",
    "attn_entropy": "attention entropy (nat)",
}


def config_values(run):
    """The run's resolved configuration as {"section.key": value} (from /config, or the "values"
    rcsim.plot_sources put there)."""
    if "values" in run:
        return run["values"]
    return config_values_of_text(run["config"])


def measure_words(measure, runs):
    """Short words for an axis: MEASURE_WORDS, else the head of the stored long_name (the text
    before its first ':' or ' (', as the registry writes "name: definition"), wrapped; else the
    name."""
    if measure in MEASURE_WORDS:
        return textwrap.fill(MEASURE_WORDS[measure], 28)  # two lines rather than a label cut off
    for run in runs:
        long_name = run.get("metric_info", {}).get(measure, {}).get("long_name", "")
        head = long_name.split(":", 1)[0].split(" (", 1)[0].strip()
        if head and len(head) <= 60:
            return textwrap.fill(head, 28)
    return measure


def words(key):
    return WORDS.get(key, key)


def _setting(key, value):
    value = value.replace("_", " ") if isinstance(value, str) and not key.startswith("output.") else value
    try:  # a number with a long expansion (d_QK = 1/4096) in 4 significant digits
        if isinstance(value, str) and len(value) > 8 and "." in value:
            value = f"{float(value):.4g}"
    except ValueError:
        pass
    return f"{words(key)} = {value}" if len(words(key)) <= 2 or words(key) in ("d_QK", "beta") else \
        f"{words(key)} {value}"


def varying_keys(values):
    """The keys whose values differ between runs (the swept keys), output.file aside; in the order
    of TITLE_KEYS (N, d, L, ...), then alphabetical."""
    keys = {k for v in values for k in v if not k.startswith("output.") and len({w.get(k) for w in values}) > 1
            and k != "pretrained.checkpoint_sha256"}
    return sorted(keys, key=lambda k: (TITLE_KEYS.index(k) if k in TITLE_KEYS else len(TITLE_KEYS), k))


def curve_labels(runs):
    """One label per run: its own "label" (a dict {label: source} given to rcsim.plot), else the
    differing keys in words ("mask causal, d_QK = 1/64")."""
    if any("label" in r for r in runs):
        return [r.get("label", "") for r in runs]
    values = [config_values(r) for r in runs]
    keys = varying_keys(values)
    if not keys:
        return [""] * len(runs)
    return [", ".join(_setting(k, v.get(k)) for k in keys) for v in values]


def shared_settings(values, leave_out=()):
    """The TITLE_KEYS every run shares and that apply to them, in words: mask.window only when a
    sliding-window mask is among the runs (it means nothing to the complete or causal mask);
    residual.alpha 0 as "no residual". Runs of a pretrained checkpoint: its family and
    architecture (pretrained_words) and the shared N, L and trials."""
    pretrained = all("pretrained.checkpoint" in v for v in values)
    candidates = PRETRAINED_TITLE_KEYS if pretrained else TITLE_KEYS
    shared = [k for k in candidates if k not in leave_out and len({v.get(k) for v in values}) == 1
              and values[0].get(k) is not None]
    if not any("sliding" in v.get("mask.type", "") for v in values):
        shared = [k for k in shared if k != "mask.window"]
    words_of = [(no_residual_words(values[0]) if k == "residual.alpha" else None) or _setting(k, values[0][k])
                for k in shared]
    if pretrained:
        same = {k: values[0].get(k) for k in ("pretrained.checkpoint", "pretrained.architecture", "pretrained.norm",
                                              "pretrained.weights", "pretrained.depth")
                if len({v.get(k) for v in values}) == 1}
        words_of.insert(0, pretrained_words(same))
    return ", ".join(words_of)


def title(runs, extra=""):
    """The settings every run shares, in words; the layers plotted when L differs."""
    text = shared_settings([config_values(r) for r in runs])
    return text + (f" ({extra})" if extra else "")


def _style(name):
    import matplotlib as mpl
    if name == "paper":  # single-column journal figure: serif, 8-9 pt, thin lines, no top/right spines
        mpl.rcParams.update({"font.family": "serif", "font.size": 8, "axes.titlesize": 8, "axes.labelsize": 8,
                             "legend.fontsize": 7, "xtick.labelsize": 7, "ytick.labelsize": 7, "lines.linewidth": 1.0,
                             "axes.spines.top": False, "axes.spines.right": False, "savefig.bbox": "tight",
                             "pdf.fonttype": 42, "svg.fonttype": "none"})
        return 3.4  # inches per panel
    return 5.5


def _per_layer(run, m):
    """The [trial, layer] values of measure m; a measure with a token axis ([trial, layer, token],
    e.g. last_token_sensitivity) has no single curve per trial and is refused with a pointer."""
    if m not in run["metrics"]:
        raise UsageError(f"--measure: measure '{m}' is not in {run.get('path', 'these results')} (it has: "
                         f"{', '.join(sorted(k for k in run['metrics'] if not k.endswith('layer')))})")
    values = np.asarray(run["metrics"][m], dtype=float)
    if values.ndim != 2:
        raise UsageError(f"--measure: measure '{m}' has shape {list(values.shape)} [trial, layer, token]: one value "
                         f"per token, not one curve per trial; select a token first, e.g. "
                         f"rcsim.open_run(path).{m}.sel(token=0)")
    return values


def _layers(run, values):
    """The layer coordinate of values[trial, layer]: /layer for the token measures, /attention_layer
    for those of the blocks t -> t + 1 (attn_*, update_size, grad_w*_norm)."""
    return run["layer"] if values.shape[1] == len(run["layer"]) else run["attention_layer"]


LINE_STYLES = ["-", "--", ":", "-."]


def curve_styles(runs):
    """Each run's colour and line style, and the legend entries [(colour, line style, text)].
    Two swept keys: colour bound to the one with more values (up to 10), line style to the other
    (up to 4), so that 4 masks x 2 normalisations is 6 legend entries, not 8 look-alike colours.
    Otherwise one colour per run, none reused (tab10, tab20, then viridis), one entry each."""
    import matplotlib.pyplot as plt
    values = [config_values(r) for r in runs]
    keys = varying_keys(values)
    levels = {k: list(dict.fromkeys(v.get(k) for v in values)) for k in keys}  # in the runs' (sweep's) order
    if len(keys) == 2 and not any("label" in r for r in runs):
        kc, ks = sorted(keys, key=lambda k: -len(levels[k]))
        if len(levels[kc]) <= 10 and len(levels[ks]) <= len(LINE_STYLES):
            palette = plt.get_cmap("tab10").colors
            styles = [(palette[levels[kc].index(v.get(kc))], LINE_STYLES[levels[ks].index(v.get(ks))])
                      for v in values]
            legend = [(palette[i], "-", _setting(kc, c)) for i, c in enumerate(levels[kc])] + \
                     [("0.3", LINE_STYLES[i], _setting(ks, c)) for i, c in enumerate(levels[ks])]
            return styles, legend
    n = len(runs)
    palette = plt.get_cmap("tab10").colors if n <= 10 else plt.get_cmap("tab20").colors if n <= 20 else \
        [plt.get_cmap("viridis")(i / (n - 1)) for i in range(n)]
    labels = curve_labels(runs)
    styles = [(palette[i], "-") for i in range(n)]
    return styles, [(c, ls, text) for (c, ls), text in zip(styles, labels) if text]


# A depth axis is logarithmic (layer t + 1) by default from this many layers on; a shorter stack
# is drawn against layer t on a linear axis, where a log axis would squeeze its last layers.
LOG_DEPTH_FROM = 20


def depth_scale(runs, xscale="auto"):
    """"log" or "linear" for the depth axis: xscale itself, or for "auto" log when the runs reach
    layer LOG_DEPTH_FROM."""
    if xscale != "auto":
        return xscale
    deepest = max((int(np.max(r["layer"])) for r in runs if len(r["layer"])), default=0)
    return "log" if deepest >= LOG_DEPTH_FROM else "linear"


def integer_valued(values):
    """True when every finite value is a whole number (the numerical rank): a linear axis."""
    values = np.asarray(values, dtype=float)
    finite = values[np.isfinite(values)]
    return finite.size > 0 and bool(np.all(finite == np.round(finite)))


def plot_curves_figure(runs, measures, trials="band", xscale="auto", yscale="auto", style="paper"):
    """A figure with one panel per measure, one curve per run. The depth axis is layer t (linear)
    for stacks under LOG_DEPTH_FROM layers, layer t + 1 on a log axis for deeper ones (xscale="auto";
    or "log", "linear"). On a log y axis (figures.log_panel; yscale="auto" takes it unless the
    measure is signed, as cos_mean, or whole numbers, as the rank) a median below 1e-13 x the panel's
    largest value (exact zeros, underflow) ends its curve with a marker on the axis' lower edge."""
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.ticker import MaxNLocator
    from .figures import COLLAPSED, COLLAPSED_LABEL, draw_curve, legend_below, log_panel, plain_log_ticks, signed
    width = _style(style)
    xscale = depth_scale(runs, xscale)
    fig, axes = plt.subplots(1, len(measures), figsize=(width * len(measures), width * 0.8), squeeze=False)
    styles, legend = curve_styles(runs)
    names = curve_labels(runs)
    collapsed = False
    for ax, m in zip(axes[0], measures):
        curves = []
        for run, (colour, ls), name in zip(runs, styles, names):
            values = _per_layer(run, m)
            layers = _layers(run, values)
            curves.append({"x": layers + 1 if xscale == "log" else layers, "values": values, "colour": colour,
                           "label": name or None, "ls": ls})
        is_signed = any(signed(c["values"]) for c in curves)
        whole = all(integer_valued(c["values"]) for c in curves)
        if yscale == "log" and not is_signed or yscale == "auto" and not is_signed and not whole:
            log_panel(ax, curves, trials)
            collapsed |= COLLAPSED_LABEL in ax.get_legend_handles_labels()[1]
        else:  # linear, asked for, or because the measure is signed or whole numbers
            for c in curves:
                draw_curve(ax, c.pop("x"), c.pop("values"), c.pop("colour"), c.pop("label"), trials, **c)
            if is_signed:
                ax.axhline(0, color="0.6", lw=0.6)
            if whole:
                ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xscale(xscale)
        if xscale == "log":
            plain_log_ticks(ax.xaxis)
        else:
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("layer t + 1" if xscale == "log" else "layer t")
        ax.set_ylabel(measure_words(m, runs))
        ax.grid(True, which="major", alpha=0.3)
    statistic = {"band": "median and 10-90% band over trials", "all": "every trial",
                 "median": "median over trials"}[trials]
    fig.suptitle(textwrap.fill(title(runs, statistic), 60 * len(measures)), fontsize=plt.rcParams["axes.titlesize"])
    handles = [Line2D([], [], color=c, ls=ls, label=text) for c, ls, text in legend]
    if collapsed:
        handles.append(Line2D([], [], color="0.35", marker=COLLAPSED, ls="", label=COLLAPSED_LABEL))
    legend_below(fig, handles)  # below the panels, never over the curves, inside the figure
    return fig


def value_at(run, measure, layer=None):
    """The values [trial] of `measure` at `layer` (default: the last recorded): of /layer for the
    token measures, of /attention_layer for those of the blocks (attn_*, update_size), whose last
    is L - 1, so that "the last layer" is then the last block."""
    per_layer = _per_layer(run, measure)
    layers = list(_layers(run, per_layer))
    t = layers[-1] if layer is None else layer
    if t not in layers:
        shown = ", ".join(map(str, layers)) if len(layers) <= 12 else \
            f"{', '.join(map(str, layers[:6]))}, ..., {', '.join(map(str, layers[-3:]))} ({len(layers)} layers)"
        raise UsageError(f"--layer: measure '{measure}' has no value at layer {t} (output.schedule); "
                         f"recorded: {shown}")
    return per_layer[:, layers.index(t)]


def plot_final_figure(runs, key, measure="mu_rel", layer=None, style="paper"):
    """The value at the last layer (or `layer`) against one swept key: the median over trials with
    the 10-90% band, one curve per value of the other swept keys (in words in the legend). A
    numeric key gets a numeric x axis (log when its values are positive and span over a decade), a
    text key one tick per value. Log y as in plot_curves_figure: values below 1e-13 x the largest
    (exact zeros) end at the floor with the collapse marker; a signed measure is on a linear axis."""
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.ticker import NullLocator
    from .figures import COLLAPSED, COLLAPSED_LABEL, legend_below, log_floor, plain_log_ticks, signed
    width = _style(style)
    values = [config_values(r) for r in runs]
    swept = varying_keys(values)
    if key not in swept:
        raise SystemExit(f"rcsim.plot --final: key '{key}' takes fewer than two values in these runs "
                         f"(the keys that vary: {', '.join(swept) or 'none'})")
    others = [k for k in swept if k != key]
    xs = sorted({v[key] for v in values}, key=_number_or_text)
    numeric = all(_number_or_text(x)[0] == 0 for x in xs)
    position = {x: (_number_or_text(x)[1] if numeric else i) for i, x in enumerate(xs)}
    groups = {}  # the other keys' values -> {x: trial values}
    for run, v in zip(runs, values):
        groups.setdefault(tuple(v.get(k) for k in others), {})[v[key]] = value_at(run, measure, layer)
    palette = plt.get_cmap("tab10").colors if len(groups) <= 10 else \
        [plt.get_cmap("viridis")(i / (len(groups) - 1)) for i in range(len(groups))]
    curves = []
    for (group, points), colour in zip(groups.items(), palette):
        here = [x for x in xs if x in points]
        trials = max(len(points[x]) for x in here)
        grid = np.full((trials, len(here)), np.nan)
        for j, x in enumerate(here):
            grid[:len(points[x]), j] = points[x]
        label = ", ".join(_setting(k, g) for k, g in zip(others, group)) or None
        curves.append({"x": np.array([position[x] for x in here]), "values": grid, "colour": colour, "label": label})
    fig, ax = plt.subplots(figsize=(width * 1.2, width * 0.85))
    log = not any(signed(c["values"]) for c in curves)
    floor = log_floor([c["values"] for c in curves]) if log else None
    collapsed = False
    for c in curves:  # the median at each value, the 10-90% band as a bar; below the floor: the marker
        med, lo, hi = band(c["values"])
        below = med < floor if floor is not None else np.zeros(len(med), bool)
        ax.plot(c["x"], np.where(below, np.nan, med), color=c["colour"], marker="o", ms=3)
        ax.vlines(c["x"][~below], lo[~below] if floor is None else np.maximum(lo[~below], floor), hi[~below],
                  color=c["colour"], alpha=0.4, lw=2)
        if below.any():
            ax.plot(c["x"][below], np.full(below.sum(), floor), COLLAPSED, color=c["colour"], ms=5, clip_on=False,
                    zorder=6)
            collapsed = True
    if log and floor is not None:
        ax.set_yscale("log")
        bottom, top = ax.get_ylim()
        ax.set_ylim(floor if collapsed else max(bottom, floor), top)
        plain_log_ticks(ax.yaxis)
    positive = numeric and min(position.values()) > 0
    if positive and max(position.values()) / min(position.values()) > 10:
        ax.set_xscale("log")
        plain_log_ticks(ax.xaxis)
    if numeric and len(xs) <= 12:  # a tick at each swept value (L = 2, 4, 8, ...), no others
        ax.set_xticks([position[x] for x in xs], _tick_texts(xs))
        ax.xaxis.set_minor_locator(NullLocator())
    if not numeric:
        ax.set_xticks(range(len(xs)), _tick_texts(xs))
    ax.set_xlabel(words(key))
    t = "the last layer" if layer is None else f"layer {layer}"
    ax.set_ylabel(f"{measure_words(measure, runs)}\nat {t}")
    ax.grid(True, which="major", alpha=0.3)
    ax.set_title(textwrap.fill(shared_settings(values, (key,) + tuple(others)) +
                               " (median and 10-90% band over trials)", 60))
    handles = [Line2D([], [], color=c["colour"], marker="o", ms=3, label=c["label"]) for c in curves if c["label"]]
    if collapsed:
        handles.append(Line2D([], [], color="0.35", marker=COLLAPSED, ls="", label=COLLAPSED_LABEL))
    legend_below(fig, handles)
    return fig


def plot_heatmap_figure(runs, key_x, key_y, measure, layer=None, style="paper"):
    """The median of `measure` at `layer` (default: the last recorded) over a two-key sweep."""
    import matplotlib.pyplot as plt
    width = _style(style)
    values = [config_values(r) for r in runs]
    for k in (key_x, key_y):
        if len({v.get(k) for v in values}) < 2:
            raise UsageError(f"--heatmap: key '{k}' takes fewer than two values in these runs "
                             f"(the keys that vary: {', '.join(varying_keys(values)) or 'none'})")

    def order(k):
        vals = sorted({v[k] for v in values}, key=_number_or_text)
        return vals, {v: i for i, v in enumerate(vals)}
    xs, xi = order(key_x)
    ys, yi = order(key_y)
    grid = np.full((len(ys), len(xs)), np.nan)
    for run, v in zip(runs, values):
        grid[yi[v[key_y]], xi[v[key_x]]] = band(value_at(run, measure, layer)[:, None])[0][0]
    import textwrap
    from matplotlib.colors import LogNorm
    from .figures import log_floor
    fig, ax = plt.subplots(figsize=(width * 1.2, width))
    finite = grid[np.isfinite(grid)]
    positive = finite[finite > 0]
    # Log colours for non-negative values spanning over two decades; a 0 (or underflow) is coloured
    # as the floor, 1e-13 x the largest value (figures.FLOOR_RATIO), and its cell reads "0".
    floor = log_floor([finite])
    log = positive.size > 0 and np.all(finite >= 0) and positive.max() / max(positive.min(), floor) > 100
    norm = LogNorm(vmin=max(positive.min(), floor), vmax=positive.max(), clip=True) if log else None
    im = ax.imshow(grid, origin="lower", aspect="auto", cmap="viridis", norm=norm)
    for (i, j), value in np.ndenumerate(grid):  # the value in each cell, in the colour's contrast
        if np.isfinite(value):
            dark = im.norm(value) < 0.5
            ax.text(j, i, f"{value:.2g}", ha="center", va="center", fontsize=6, color="white" if dark else "black")
    ax.set_xticks(range(len(xs)), _tick_texts(xs))
    ax.set_yticks(range(len(ys)), _tick_texts(ys))
    ax.set_xlabel(words(key_x))
    ax.set_ylabel(words(key_y))
    t = "the last layer" if layer is None else f"layer {layer}"
    fig.colorbar(im, ax=ax, label=f"{measure}, median over trials")
    text = f"{measure_words(measure, runs)} at {t}; " + shared_settings(values, (key_x, key_y))
    ax.set_title("\n".join(textwrap.wrap(text, 60)))
    fig.tight_layout()
    return fig


def _tick_texts(values):
    """Swept values as tick labels: underscores as spaces, wrapped at 14 characters."""
    return ["\n".join(textwrap.wrap(str(v).replace("_", " "), 14, break_long_words=False)) for v in values]


def _number_or_text(text):
    from fractions import Fraction
    try:
        return (0, float(Fraction(text)), text)
    except (ValueError, ZeroDivisionError):
        return (1, 0.0, text)


def _save(fig, out):
    """Write the figure through figures.atomic_writer: an interrupted or failed write never leaves a
    truncated figure under the name asked for."""
    from .figures import atomic_writer
    ext = os.path.splitext(out)[1].lower()[1:]
    with atomic_writer(out, binary=True) as f:
        fig.savefig(f, format=ext, dpi=200, bbox_inches="tight")


# The Python entry: figures of what a session holds in memory (or of files), for Jupyter and scripts.
# The command line's option names in its messages, as the Python functions' argument names.
_OPTION_ARGUMENTS = (("rcsim.plot --final: ", ""), ("rcsim.plot --heatmap: ", ""), ("--measure: ", "measures: "),
                     ("--layer: ", "layer: "), ("--heatmap: ", "key_x/key_y: "), ("--final: ", "key: "))


def _api(function, make):
    """A figure made under a saved-and-restored rcParams (the paper style changes them), with the
    command line's SystemExit and UsageError messages raised as one ValueError
    'rcsim.plot.FUNCTION: ARGUMENT: ...' (the option names as the function's arguments)."""
    import matplotlib as mpl
    try:
        with mpl.rc_context():
            return make()
    except SystemExit as e:
        if not isinstance(e.code, str):
            raise
        text = e.code
    except UsageError as e:
        text = str(e)
    for option, argument in _OPTION_ARGUMENTS:
        text = text.replace(option, argument)
    raise ValueError(f"rcsim.plot.{function}: {text}") from None


def _measure_names(function, measures, many=True):
    """measures as a list of names: one str, or (curves) a non-empty list/tuple of str."""
    if isinstance(measures, str):
        return [measures]
    if many and isinstance(measures, (list, tuple)) and all(isinstance(m, str) for m in measures):
        return list(measures)
    allowed = "a measure name (e.g. 'mu')" + (" or a list of them (e.g. ['mu', 'mu_rel'])" if many else "")
    raise TypeError(f"rcsim.plot.{function}: {'measures' if many else 'measure'}={measures!r} (a "
                    f"{type(measures).__name__}); {allowed} is needed")


CHOICES = {"trials": ("band", "all", "median"), "xscale": ("auto", "log", "linear"),
           "yscale": ("auto", "log", "linear"), "style": ("screen", "paper")}


def _checked(function, source, **arguments):
    """One ValueError naming the argument and what is allowed: an unknown choice (CHOICES), an
    empty source or an empty measure list."""
    for name, value in arguments.items():
        if name in CHOICES and value not in CHOICES[name]:
            raise ValueError(f"rcsim.plot.{function}: {name}={value!r}; allowed: {', '.join(CHOICES[name])}")
    if isinstance(source, (list, tuple, dict)) and len(source) == 0:
        raise ValueError(f"rcsim.plot.{function}: source is an empty {type(source).__name__}; give a run file or sweep "
                         "directory, a simulate() or open_run/open_sweep Dataset, the dict rcsim.measures returns, "
                         "or a non-empty list or dict {label: ...} of these")
    for name in ("key", "key_x", "key_y"):
        if name in arguments and not (isinstance(arguments[name], str) and arguments[name]):
            raise TypeError(f"rcsim.plot.{function}: {name}={arguments[name]!r}; a swept key's name (a str, e.g. "
                            "'model.dim') is needed")
    if arguments.get("layer") is not None:
        check.whole(f"rcsim.plot.{function}", "layer", arguments["layer"], low=0)
    if "measures" in arguments and not arguments["measures"]:
        raise ValueError(f"rcsim.plot.{function}: measures is empty; give a measure name or a list of them "
                         "(e.g. 'mu', ['mu', 'mu_rel'])")


def curves(source, measures=("mu", "mu_rel"), trials="band", xscale="auto", yscale="auto", style="screen"):
    """A matplotlib Figure: each measure against depth, one panel per measure, one curve per run.
    source: a run file or sweep directory (path), a `rcsim.simulate()` result (a Dataset, or the dict
    of group="all"), an `open_run`/`open_sweep` Dataset, the dict `rcsim.measures` returns (the last
    axis is the layer, leading axes are trials), a list of these, or {label: any of these}.
    trials: "band" (median and 10-90% band), "all", "median"; xscale: "auto" (linear under 20
    layers, else log of layer t + 1), "log", "linear"; yscale: "auto" (log; linear for signed or
    whole-number measures such as rank), "log", "linear"; style: "screen" or "paper". The legend
    sits under the panels inside the figure, so fig.savefig keeps it.
    Example: rcsim.plot.curves(rcsim.simulate(keys={"mask.type": "causal"}), "mu")."""
    names = _measure_names("curves", measures)
    _checked("curves", source, measures=names, trials=trials, xscale=xscale, yscale=yscale, style=style)
    return _api("curves", lambda: plot_curves_figure(as_runs(source), names, trials, xscale, yscale, style))


def final(source, key, measure="mu_rel", layer=None, style="screen"):
    """A matplotlib Figure: `measure` at the last layer (or `layer`) against the swept `key`, one
    curve per value of the other swept keys (source as for curves(): a sweep directory, an
    open_sweep Dataset, a list or dict of simulate() results, ...)."""
    _checked("final", source, style=style, key=key, measure=_measure_names("final", measure, False)[0], layer=layer)
    return _api("final", lambda: plot_final_figure(as_runs(source), key, measure, layer, style))


def heatmap(source, key_x, key_y, measure="mu_rel", layer=None, style="screen"):
    """A matplotlib Figure: the median of `measure` at `layer` (default: the last) over two swept keys."""
    _checked("heatmap", source, style=style, key_x=key_x, key_y=key_y,
             measure=_measure_names("heatmap", measure, False)[0], layer=layer)
    return _api("heatmap", lambda: plot_heatmap_figure(as_runs(source), key_x, key_y, measure, layer, style))


def main(argv=None):
    p = Parser(prog="python3 -m rcsim.plot", description=__doc__.splitlines()[0],
                                epilog="Examples: python3 -m rcsim.plot data/run.h5 -o mu.pdf; "
                                       "python3 -m rcsim.plot data/default --measure mu_rel rank -o sweep.png")
    p.add_argument("runs", nargs="+", help="rcsim run files (HDF5), or sweep directories (their complete points)")
    p.add_argument("-o", "--output", action="append", required=True,
                   help="output image; the extension chooses the format (.png, .pdf, .svg); repeat for several")
    p.add_argument("--measure", nargs="+", default=None, help="measures to plot (default: mu mu_rel)")
    p.add_argument("--trials", choices=["band", "all", "median"], default="band",
                   help="median with the 10-90%% band (default), every trial, or the median alone")
    p.add_argument("--xscale", choices=["auto", "log", "linear"], default="auto",
                   help="the depth axis: auto (default): linear under %d layers, log (layer t + 1) from there" %
                        LOG_DEPTH_FROM)
    p.add_argument("--yscale", choices=["auto", "log", "linear"], default="auto",
                   help="auto (default): log, linear for a signed measure or whole numbers (rank)")
    p.add_argument("--style", choices=["paper", "screen"], default="paper",
                   help="paper: serif 8 pt, 3.4 in per panel, embedded TrueType fonts (default); screen: larger")
    p.add_argument("--heatmap", nargs=2, metavar=("KEY_X", "KEY_Y"),
                   help="a heat map of the median of one measure over a two-key sweep")
    p.add_argument("--final", metavar="KEY",
                   help="the value at the last layer (or --layer) against one swept key, a curve per other value")
    p.add_argument("--layer", type=int, default=None,
                   help="--heatmap, --final: the layer (default: the last recorded)")
    a = p.parse_args(argv)
    for out in a.output:
        if os.path.splitext(out)[1].lower() not in (".png", ".pdf", ".svg"):
            p.error(f"output '{out}': the extension must be .png, .pdf or .svg")
    for path in a.runs:
        if not os.path.exists(path):
            p.error(f"no such file or directory: {path}")
    os.environ.setdefault("MPLBACKEND", "Agg")
    runs = [load_run(path) for path in run_paths(a.runs)]  # a file that is not a complete run: exit 2
    if not runs:
        p.error("no complete run files in " + " ".join(a.runs))
    for out in a.output:  # never an input, a link or a directory; checked before anything is drawn
        check_output(out)
    if a.heatmap and a.final:
        p.error("--heatmap and --final are two kinds of figure; give one")
    if a.final:
        measures = a.measure or ["mu_rel"]
        if len(measures) != 1:
            p.error("--final plots one measure (--measure NAME)")
        fig = plot_final_figure(runs, a.final, measures[0], a.layer, a.style)
    elif a.heatmap:
        measures = a.measure or ["mu_rel"]
        if len(measures) != 1:
            p.error("--heatmap plots one measure (--measure NAME)")
        fig = plot_heatmap_figure(runs, *a.heatmap, measures[0], a.layer, a.style)
    else:
        fig = plot_curves_figure(runs, a.measure or ["mu", "mu_rel"], a.trials, a.xscale, a.yscale, a.style)
    for out in a.output:
        _save(fig, out)  # an OSError (a full disk): one line naming the file, exit 1 (command.run)
        print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(run_command(main, "python3 -m rcsim.plot"))
