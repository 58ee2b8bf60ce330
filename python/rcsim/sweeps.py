"""rcsim.sweep: a sweep over key values, run in this process by the command line's sweep runner
(sim/app/sweep_runner.hpp, through rcsim._engine): one run file per point in a directory with its
index (index.h5), points already complete with the same configuration skipped on a rerun; the
files are those `rcsim run` writes for the same configuration with a [sweep] section
(docs/user/sweeps.md; tests/python/check_sweep.py)."""
import os
import sys
import time

from . import _validate as check
from .engine import _engine, _value_text, configuration_arguments
from .files import open_sweep

WHO = "rcsim.sweep"
MODES = ("product", "zip")
RETURNS = ("dataset", "index")


def _axis_arguments(axes):
    """The swept keys as command-line arguments ['--sweep.model.tokens=4, 8', ...]."""
    args = []
    for key, values in check.mapping(WHO, "axes", axes, none=False).items():
        if not isinstance(key, str):
            raise check.usage_error(WHO, "axes", f"the key {check._shown(key)} is not a string; dotted keys "
                                    "{'model.tokens': [4, 8]} are needed", True)
        texts = [_value_text(key, v, WHO) for v in check.value_list(WHO, f"axes['{key}']", values)]
        for t in texts:
            if "," in t:
                raise check.usage_error(WHO, f"axes['{key}']", f"the value {t!r} holds a ',', which separates the "
                                        "values of a swept key; sweep a key whose values have no ','")
        args.append(f"--sweep.{key}={', '.join(texts)}")
    return args


def _progress_reporter(progress, in_place):
    """(callback for the engine, finish) for progress: False/None: none; a callable: called with
    the engine's dict; True: the command line's progress line on stderr, rewritten in place (or,
    when the engine logs too, `in_place` False, a line every 10 s as the command line's log)."""
    if progress is None or progress is False:
        return None, lambda: None
    if callable(progress):
        return progress, lambda: None
    if progress is not True:
        raise check.usage_error(WHO, "progress", f"{check._shown(progress)}; True, False or a callable (dict) "
                                "is needed", True)
    shown = {"width": 0, "at": None}

    def line(state):
        text, now, last = state["line"], time.monotonic(), state["fraction"] >= 1
        if in_place:  # at most 10 times a second, and the end; spaces over the rest of a longer line
            if last or shown["at"] is None or now - shown["at"] >= 0.1:  # (no terminal escapes: Jupyter too)
                print("\r" + text.ljust(shown["width"]), end="", file=sys.stderr, flush=True)
                shown["width"], shown["at"] = max(shown["width"], len(text)), now
        elif last or shown["at"] is None or now - shown["at"] >= 10:
            print("rcsim: progress: " + text.split("] ", 1)[-1], file=sys.stderr, flush=True)
            shown["at"] = now

    def finish():
        if shown["width"]:
            print(file=sys.stderr, flush=True)
    return line, finish


def sweep(directory, axes=None, config_file=None, keys=None, mode="product", returns="dataset", group="metrics",
          force=False, quiet=True, progress=True, **sections):
    """Run every point of a sweep in this process and return it as open_sweep reads it.

    directory: where the points go, one run file each, with the sweep's index (DIRECTORY/index.h5);
    it sets output.file = DIRECTORY.h5, as `rcsim run` does for a [sweep] section.
    axes: the swept keys and their values, {"model.tokens": [8, 16], "mask.type": ["complete",
    "causal"]}, combined by `mode`: "product" (every combination) or "zip" (element by element,
    lists of one length). A swept key given in keys/sections is not swept (the command line's rule).
    config_file, keys, sections: the rest of the configuration, as for simulate(); a [sweep]
    section of config_file is swept too (axes add to it).
    returns: "dataset" (open_sweep(directory, group): the swept keys as dimensions of a product
    sweep) or "index" (the path of DIRECTORY/index.h5, for load_sweep, sweep_table, ...).
    force: recompute complete points and replace outputs of another configuration; without it a
    rerun skips the points already complete and refuses files made with another configuration.
    progress: True (the default) rewrites one line on stderr as the points run, the command line's
    "[####....]  40% 16/40 trials, point 2/5, 3.1 trials/s, elapsed 0:05, ETA 0:12" (the percentage
    and the ETA by work: trials x layers x the cost of a layer, so a deep point is not estimated
    at a shallow one's rate); False: nothing; a callable: called with a dict (trials_done, trials,
    point, points, name, fraction of the work done, elapsed and eta in seconds (NaN until known),
    line) at every trial and every point's start and end. With quiet=False the line is logged every
    10 s instead.
    quiet=False logs each point. The GIL is released while the engine computes; Ctrl-C stops the
    sweep after the index is written (a rerun resumes it).
    Raises rcsim.ConfigError (a ValueError) naming the argument or key; a point that failed
    raises after the others ran (the index marks it failed).
    """
    directory = check.path(WHO, "directory", directory).rstrip(os.sep) or os.sep
    config_file = check.path(WHO, "config_file", config_file, none=True)
    mode = check.one_of(WHO, "mode", mode, MODES)
    returns = check.one_of(WHO, "returns", returns, RETURNS)
    force, quiet = check.flag(WHO, "force", force), check.flag(WHO, "quiet", quiet)
    report, finish = _progress_reporter(progress, quiet)
    args = configuration_arguments(keys, WHO, **sections)
    given = {a[2:].split("=", 1)[0] for a in args}
    if given & {"output.file", "sweep.mode"}:
        raise check.usage_error(WHO, ", ".join(sorted(given & {"output.file", "sweep.mode"})),
                                "set by `directory` and `mode`; do not give them as keys")
    swept = _axis_arguments(axes) if axes is not None else []
    args += swept + [f"--sweep.mode={mode}", f"--output.file={directory}.h5"]
    call = f"{WHO}(" + ", ".join([repr(directory)] + ([repr(config_file)] if config_file else []) + args) + ")"
    try:
        index = _engine().sweep(args, config_file, force, quiet, call, WHO, report)["index"]
    finally:
        finish()
    return open_sweep(directory, group) if returns == "dataset" else index
