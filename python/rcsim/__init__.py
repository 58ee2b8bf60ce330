"""rcsim's Python side (docs/user/python.md): runs in this process through the compiled engine
rcsim._engine (`simulate`, `sweep`, `layer`, `gradients`, `resolved_config`), the token measures of any
matrices (`measures`, `clusters`), and readers of run files, sweep indexes and analysis files
(h5py dicts with load_*, labelled xarray objects with open_run/open_sweep). `__all__` is this
public API, with `from_torch` and `capture` (a bridge from PyTorch, torch imported on use);
`rcsim.torch` (rcsim.torch.stack: a block stack as a torch.autograd.Function, torch imported on
use); `rcsim.plot` (python3 -m rcsim.plot; rcsim.plot.curves/final/heatmap) draws run files and what is
in memory (simulate() results, rcsim.measures' dict), and `rcsim.figures` holds what
the figure scripts of analysis/ share (imported from there, not part of the API). Installed with
`pip install .` or `pip install -e .` (pyproject.toml), the engine and the executable are inside
the package (`executable()`); from the build tree, PYTHONPATH=build/python. `from rcsim import
load_run` also works from the figure scripts (analysis/ is their directory; the engine is then
only there after `pip install -e .`)."""
import os as _os


def _read_version():
    """The version: VERSION beside this package (installed, build tree) or at the root of the
    source tree this package sits in (python/rcsim/../../VERSION): one file, also read by CMake."""
    here = _os.path.dirname(_os.path.abspath(__file__))
    for path in (_os.path.join(here, "VERSION"), _os.path.join(here, "..", "..", "VERSION")):
        if _os.path.isfile(path):
            with open(path, encoding="utf-8") as f:
                return f.read().strip()
    return "unknown"


__version__ = _read_version()
from .files import (RcsimFileError, load_analysis, load_run, load_sweep, open_run, open_sweep, run_paths,  # noqa: E402
                    sweep_runs, sweep_table)
from .engine import (clusters, executable, gradients, layer, measures, resolved_config, simulate,  # noqa: E402
                     simulate_image)
from .sweeps import sweep  # noqa: E402
from .torch_bridge import capture, from_torch  # noqa: E402  (torch imported only on use)
from .pretrained import Model, generate, load_model  # noqa: E402

__all__ = ["__version__", "ConfigError", "RcsimFileError",
           "simulate", "simulate_image", "sweep", "layer", "gradients", "measures", "clusters", "resolved_config", "executable",
           "open_run", "open_sweep", "load_run", "load_sweep", "load_analysis", "run_paths", "sweep_runs",
           "sweep_table", "from_torch", "capture", "load_model", "generate", "Model"]


def __getattr__(name):
    if name == "ConfigError":  # from the compiled engine, loaded on first use
        from .engine import _config_error
        return _config_error()
    if name == "plot":  # rcsim.plot.curves(...) after a plain `import rcsim` (matplotlib loaded on use)
        import importlib
        return importlib.import_module(".plot", __name__)
    if name == "torch":  # rcsim.torch.stack(...): rcsim's reverse pass as a torch operation (torch loaded on use)
        import importlib
        return importlib.import_module(".torch_function", __name__)
    raise AttributeError(f"module 'rcsim' has no attribute '{name}'")
