"""rcsim's Python side: readers of run files, sweep indexes and analysis files (`files`: h5py
dicts with load_*, labelled xarray objects with open_run/open_sweep), and
what the figure scripts share (`figures`), and runs in this process (`simulate`: the compiled
engine rcsim._engine, docs/user/python.md). Installed with `pip install .` or `pip install -e .`
(pyproject.toml), the engine and the executable are inside the package (`executable()`); from the
build tree, PYTHONPATH=build/python. `from rcsim import load_run` also works from the figure
scripts (analysis/ is their directory; the engine is then only there after `pip install -e .`)."""
import os as _os


def _read_version():
    """The version: VERSION beside this package (installed, build tree) or at the root of the
    source tree this package sits in (analysis/rcsim/../../VERSION): one file, also read by CMake."""
    here = _os.path.dirname(_os.path.abspath(__file__))
    for path in (_os.path.join(here, "VERSION"), _os.path.join(here, "..", "..", "VERSION")):
        if _os.path.isfile(path):
            with open(path, encoding="utf-8") as f:
                return f.read().strip()
    return "unknown"


__version__ = _read_version()
from .files import (RcsimFileError, band, label, load_analysis, load_run, load_sweep, open_run,  # noqa: F401
                    open_sweep, run_paths, sweep_runs, sweep_table)
from .figures import (MEASURES, atomic_writer, figure_arguments, first_layer_below, measure_grid, plot_curves, rcsim,  # noqa: F401
                      run_config, save_figure, stored_config, write_summary, write_text)
from .engine import (clusters, executable, gradients, layer, measures, resolved_config, simulate,  # noqa: F401,E402
                     simulate_image)


def __getattr__(name):
    if name == "ConfigError":  # from the compiled engine, loaded on first use
        from .engine import _config_error
        return _config_error()
    raise AttributeError(f"module 'rcsim' has no attribute '{name}'")
