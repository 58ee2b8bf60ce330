"""rcsim's Python side: readers of run files, sweep indexes and analysis files (`files`), and
what the figure scripts share (`figures`). `from rcsim import load_run` works from the figure
scripts (analysis/ is their directory) and from the repository root (the `rcsim` link there)."""
from .files import (band, label, load_analysis, load_run, load_sweep, run_paths, sweep_runs,  # noqa: F401
                    sweep_table)
from .figures import figure_arguments, rcsim, save_figure  # noqa: F401
