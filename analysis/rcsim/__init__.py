"""rcsim's Python side: readers of run files, sweep indexes and analysis files (`files`: h5py
dicts with load_*, labelled xarray objects with open_run/open_sweep), and
what the figure scripts share (`figures`), and runs in this process (`simulate`: the compiled
engine rcsim._engine, docs/python.md). `from rcsim import load_run` works from the figure
scripts (analysis/ is their directory) and from the repository root (the `rcsim` link there)."""
from .files import (RcsimFileError, band, label, load_analysis, load_run, load_sweep, open_run,  # noqa: F401
                    open_sweep, run_paths, sweep_runs, sweep_table)
from .figures import (MEASURES, figure_arguments, first_layer_below, measure_grid, plot_curves, rcsim,  # noqa: F401
                      run_config, save_figure, stored_config, write_summary)
from .engine import resolved_config, simulate, simulate_image  # noqa: F401,E402


def __getattr__(name):
    if name == "ConfigError":  # from the compiled engine, loaded on first use
        from .engine import _config_error
        return _config_error()
    raise AttributeError(f"module 'rcsim' has no attribute '{name}'")
