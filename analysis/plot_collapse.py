#!/usr/bin/env python3
"""Collapse curves: mu and mu_rel against layer (log y), median and 10-90% band over trials.

usage: plot_collapse.py RUN.h5|SWEEP_DIR [...] -o OUT.png
The collapse plot of `python3 -m rcsim.plot` (python/rcsim/plot.py, which has every option:
measures, every trial, formats, heat maps) with --measure mu mu_rel --style screen. Several runs
are overlaid, labelled by the keys that differ between them, in words. The depth axis is layer t
(linear) for stacks under 20 layers; from 20 on, layer t + 1 on a log axis, so that the input
(t = 0) sits at 1.
"""
import sys

import script_setup  # noqa: E402,F401  (the package rcsim of this checkout: analysis/script_setup.py)
from rcsim import plot  # noqa: E402


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    return plot.main(argv + ["--measure", "mu", "mu_rel", "--style", "screen"])


if __name__ == "__main__":
    from rcsim import command
    sys.exit(command.run(main))
