"""rcsim.engine: runs in this process, through the compiled engine rcsim._engine (pybind11,
sim/python/engine_module.cpp). The configuration is parsed and validated by the same code as
`rcsim run` (a bad key raises ConfigError naming it); the engine writes the run file into memory
(an HDF5 file image, nothing on disk) and open_run reads it, so the Dataset equals open_run of
the file `rcsim run` writes for the same configuration, value for value (tests/python/check_simulate.py).
"""
import os
import shutil

from .files import open_run


_ENGINE = []


def _engine():
    """The compiled module rcsim._engine, beside this package's files: put there by
    `pip install .` / `pip install -e .` (pyproject.toml), `cmake --install`, or the build tree's
    copy of the package (PYTHONPATH=build/python). Nothing else is searched."""
    if not _ENGINE:
        try:
            from . import _engine as engine
        except ImportError as e:
            raise ImportError(
                "rcsim.simulate needs the compiled engine rcsim._engine, which is not beside this package "
                f"({os.path.dirname(os.path.abspath(__file__))}): install the package with `pip install .` or "
                "`pip install -e .` from the repository, or use the build tree's package "
                "(`bash scripts/setup.sh`, then PYTHONPATH=build/python; Debian: pybind11-dev, python3-dev)") from e
        _ENGINE.append(engine)
    return _ENGINE[0]


def executable():
    """The rcsim executable: bin/rcsim inside this package (pip install, the build tree's package),
    else `rcsim` on PATH (cmake --install). Raises FileNotFoundError if neither exists."""
    inside = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "rcsim")
    if os.path.isfile(inside) and os.access(inside, os.X_OK):
        return inside
    on_path = shutil.which("rcsim")
    if on_path and not _is_entry_point(on_path):
        return on_path
    raise FileNotFoundError("the rcsim executable is neither in the package (rcsim/bin/rcsim) nor on PATH: "
                            "install with `pip install .` or `cmake --install build`")


def _is_entry_point(path):
    """True for the console script pip writes (a Python file that imports rcsim._cli), which
    must not be taken for the executable (it would call itself)."""
    try:
        with open(path, "rb") as f:
            return f.read(2) == b"#!" and b"rcsim._cli" in f.read(4096)
    except OSError:
        return False


def _value_text(key, value):
    """A Python value as the text the configuration parser reads."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)  # shortest text that reads back to the same double
    if isinstance(value, (list, tuple)):
        return ", ".join(_value_text(key, v) for v in value)
    if isinstance(value, (str, int)) or type(value).__name__ == "Fraction":
        return str(value)
    if hasattr(value, "item"):  # NumPy scalar
        return _value_text(key, value.item())
    raise TypeError(f"rcsim.simulate: key '{key}': cannot use a {type(value).__name__} as a value")


def configuration_arguments(keys=None, **sections):
    """The keys of simulate() as command-line arguments ['--model.dim=16', ...]."""
    flat = dict(keys or {})
    for section, values in sections.items():
        if not isinstance(values, dict):
            raise TypeError(f"rcsim.simulate: {section}={values!r}: give a section as a dict "
                            f"({section}={{'key': value}}) or dotted keys as keys={{'{section}.key': value}}")
        for k, v in values.items():
            flat[f"{section}.{k}"] = v
    return [f"--{k}={_value_text(k, v)}" for k, v in flat.items()]


def simulate_image(config_file=None, keys=None, quiet=True, **sections):
    """The bytes of the run file (HDF5) of one configuration, computed in this process."""
    args = configuration_arguments(keys, **sections)
    call = "rcsim.simulate(" + ", ".join(([repr(config_file)] if config_file else []) + args) + ")"
    return _engine().run_image(args, None if config_file is None else os.fspath(config_file), call, quiet)


def simulate(config_file=None, keys=None, group="metrics", quiet=True, **sections):
    """Run one configuration in this process and return it as open_run would read its file.

    config_file: an INI file as for `rcsim run --config` (optional); keys: dotted keys
    {"model.dim": 16, "mask.type": "causal"}; sections as keyword dicts: model={"tokens": 32}.
    Precedence as on the command line: keys and sections > config_file > key defaults.
    group: the run file's group ("metrics", "summary", "diagnostics", or "/" for the root:
    mask, tokens, attention), as for open_run; quiet=False logs the run's information.
    The GIL is released while the engine computes (run.threads worker threads); Ctrl-C stops it.
    Raises rcsim.ConfigError (a ValueError) naming the key for a bad configuration.
    """
    return open_run(simulate_image(config_file, keys, quiet, **sections), group)


def resolved_config(config_file=None, keys=None, **sections):
    """The fully resolved configuration (INI text) simulate() would run (like --dry-run)."""
    args = configuration_arguments(keys, **sections)
    return _engine().resolved_config(args, None if config_file is None else os.fspath(config_file))


def _config_error():
    try:
        return _engine().ConfigError
    except ImportError:
        return ValueError
