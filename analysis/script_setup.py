"""What every script in analysis/ imports first (`import script_setup`): the package rcsim of this checkout.

The package lives in python/rcsim/ (apart from these scripts). A script run as
`python3 analysis/NAME.py` finds this module beside itself (Python puts the script's folder first on
sys.path) and, through it, the checkout's package, so no script edits sys.path and none needs a
PYTHONPATH or an installed package:

1. build/python, when the build made it: the package's sources (links, so edits are live) beside the
   compiled engine (rcsim._engine) and bin/rcsim; the scripts that run the engine in-process need it;
2. else python/, the sources alone (everything but the in-process engine: the scripts that run the
   executable find it through rcsim.command.rcsim_executable).

Both go before an installed rcsim: a checkout's scripts use that checkout's package. A script that
wants the package of another build (signal_kedia.py: the build whose executable --rcsim names) calls
`use_build_of(executable)` before it first imports rcsim.
"""
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCES = os.path.join(REPO, "python")             # python/rcsim: the package's sources
BUILD = os.path.join(REPO, "build", "python")      # build/python/rcsim: the sources with the engine


def _has_package(folder):
    return os.path.isfile(os.path.join(folder, "rcsim", "__init__.py"))


def _put_first(folder):
    sys.path[:] = [folder] + [q for q in sys.path if os.path.abspath(q or ".") != folder]


def use_build_of(executable):
    """Put the package of the build whose executable is `executable` (BUILD/sim/rcsim -> BUILD/python) first
    on sys.path, when that build has one; call before the first `import rcsim`."""
    folder = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(executable))), "python")
    if _has_package(folder):
        _put_first(folder)


_put_first(SOURCES)
if _has_package(BUILD):
    _put_first(BUILD)
