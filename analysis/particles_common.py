"""Shared pieces of the particle-flow reproduction scripts (docs/science/particles.md, sections 8-12):
the rcsim command line of the papers' flow, a timed run, the token angles on the circle, and the
checks of a paper's claims.

Perturbing the engine: every script that reads its command line with `script_args` takes
`--perturb KEY=VALUE` (repeatable). Each KEY=VALUE is given to every rcsim the script starts through
`run_rcsim` or `perturbed` (replacing the script's own value of KEY), while the script's predictions
keep its own settings: a reproduction run with, e.g., `--perturb weights.v=tied_qk --perturb
weights.v_sign=-1` (W_V = -I when W_Q = W_K = I) must fail its checks (tests/reproductions/perturbed.py)."""
import argparse
import re
import subprocess
import sys
import time

import numpy as np


def _load_command():
    """rcsim/command.py (the wrapper of every entry point: one line, exit 2 for usage and 1 for
    runtime errors), loaded by its path: signal_kedia.py imports the package rcsim of a build only
    after reading its command line, so this module must not import the package."""
    import importlib.util
    import os
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "python", "rcsim", "command.py")
    spec = importlib.util.spec_from_file_location("rcsim_command", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


command = _load_command()


def default_rcsim():
    """./build/sim/rcsim, else the rcsim `pip install .` put on PATH; else exit 2 with one line saying how to get it."""
    return command.rcsim_executable()


_PERTURB = {}  # rcsim key -> value, set by script_args from --perturb; applied by `perturbed`


def perturbation(text):
    """One --perturb argument, KEY=VALUE with KEY an rcsim key (section.name): (KEY, VALUE)."""
    key, eq, value = text.partition("=")
    if not eq or not re.fullmatch(r"[a-z][a-z0-9_]*(\.[a-z0-9_]+)+", key) or not value:
        raise argparse.ArgumentTypeError(f"'{text}' is not KEY=VALUE with KEY an rcsim key such as model.beta "
                                         "and a non-empty VALUE (rcsim --help-keys lists the keys)")
    return key, value


def perturbed(args):
    """`args` (rcsim arguments, keys as --KEY=VALUE) with the --perturb keys of the command line: a key the
    arguments already set gets the perturbed value, the others are appended."""
    out, done = [], set()
    for arg in args:
        key = arg[2:].partition("=")[0] if arg.startswith("--") else None
        if key in _PERTURB:
            arg = f"--{key}={_PERTURB[key]}"
            done.add(key)
        out.append(arg)
    return out + [f"--{k}={v}" for k, v in _PERTURB.items() if k not in done]


def doc_summary(doc):
    """A script's --help description: the first paragraph of its docstring on one line. (The rule of
    rcsim.figures.doc_summary; not imported from there: signal_kedia.py must import the package rcsim
    itself, from the build tree, after reading its command line.)"""
    return " ".join(doc.strip().split("\n\n")[0].split())


def script_args(doc, seed=None, outputs_required=True, extra=()):
    """The figure scripts' command line: --tiny --rcsim PATH --data DIR --out PREFIX [--seed S]
    [--perturb KEY=VALUE ...], and `extra` flags (store_true) such as --self-test."""
    ap = command.Parser(description=doc_summary(doc))
    ap.add_argument("--tiny", action="store_true")
    for flag in extra:
        ap.add_argument(flag, action="store_true")
    ap.add_argument("--rcsim", default=None)  # None: default_rcsim() after parsing (so --help needs no engine)
    ap.add_argument("--data", required=outputs_required)
    ap.add_argument("--out", required=outputs_required)
    if seed is not None:
        ap.add_argument("--seed", type=int, default=seed)
    ap.add_argument("--perturb", type=perturbation, action="append", default=[], metavar="KEY=VALUE",
                    help="give rcsim KEY=VALUE in every run (a deliberately wrong engine: the checks must fail)")
    a = ap.parse_args()
    a.rcsim = command.rcsim_executable(a.rcsim)
    keys = [k for k, _ in a.perturb]
    if len(set(keys)) != len(keys):
        ap.error("--perturb: a key is given twice: " + ", ".join(sorted({k for k in keys if keys.count(k) > 1})))
    _PERTURB.clear()
    _PERTURB.update(a.perturb)
    return a


def flow_args(n, d, beta, dt, steps, kind="softmax", integrator="rk4", mask="complete"):
    """The papers' flow dx_i/dt = P_{x_i}(sum_j A_ij x_j), Q = K = V = I shared by all layers, on the sphere."""
    return [f"--model.tokens={n}", f"--model.dim={d}", f"--model.layers={steps}",
            "--weights.q=identity", "--weights.k=identity", "--weights.v=identity", "--weights.shared=true",
            f"--model.beta={beta!r}", f"--attention.kind={kind}", f"--mask.type={mask}",
            "--norm.type=sphere", f"--residual.alpha={dt!r}", "--residual.project=tangent",
            f"--dynamics.integrator={integrator}"]


def run_rcsim(rcsim, out, args, extra=()):
    """Run `rcsim run` into `out` (with the --perturb keys); returns the wall time in seconds (the whole process)."""
    cmd = [rcsim, "run", *perturbed(["--quiet", "--force", f"--output.file={out}", "--run.threads=1", *args, *extra])]
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True)
    return time.perf_counter() - t0


def angles(X):
    """Angles atan2(x_2, x_1) of the rows of X[..., 2], in [-pi, pi)."""
    return np.arctan2(X[..., 1], X[..., 0])


def renyi_centres(X, delta):
    """Renyi-parking centres (docs/science/model-spec.md section 6): tokens in causal order, each a
    centre when its Euclidean distance to every earlier centre is >= delta. Returns the list of token indices. An independent
    implementation of rcsim's `renyi_centres` measure, used to check it."""
    centres = []
    for i, x in enumerate(X):
        if all(np.linalg.norm(x - X[c]) >= delta for c in centres):
            centres.append(i)
    return centres


def components(X, tau):
    """Connected components of the graph cos(x_i, x_j) > tau: a label per token (0..k-1, in order of first token)."""
    U = X / np.linalg.norm(X, axis=1, keepdims=True)
    adj = (U @ U.T) > tau
    n = len(X)
    label = -np.ones(n, dtype=int)
    k = 0
    for s in range(n):
        if label[s] >= 0:
            continue
        stack = [s]
        label[s] = k
        while stack:
            i = stack.pop()
            for j in np.nonzero(adj[i] & (label < 0))[0]:
                label[j] = k
                stack.append(j)
        k += 1
    return label


def report_checks(text_path, fails, what="prediction"):
    """Prints the numbers file and each failed check ("<what> failed: ...", on stderr); the exit code:
    1 if a check failed, else 0 (the signal_*.py reproductions end with it)."""
    with open(text_path) as f:
        print(f.read(), end="")
    for msg in fails:
        print(f"{what} failed: " + msg, file=sys.stderr)
    return 1 if fails else 0


class Checks:
    """A reproduction's checks of a paper's claims: each with its measured value and what is required.
    `add` records one (a NaN measurement fails: `ok` is then False); `text` is their lines for the .txt;
    `finish` prints them (failures also on stderr) and gives the exit code, 1 if any failed."""

    def __init__(self):
        self.rows = []

    def add(self, name, measured, required, ok, engine=False):
        """One check; engine=True marks a check of rcsim against an independent computation of the same
        model (not a claim of the paper): its failure reads "engine check failed" instead of "claim failed"."""
        self.rows.append((name, measured, required, bool(ok), engine))
        return bool(ok)

    def text(self):
        return "".join(f"{'engine check' if engine else 'check'} {name}: measured {measured}; required {required}: "
                       f"{'ok' if ok else 'FAILED'}\n" for name, measured, required, ok, engine in self.rows)

    def finish(self, text_path):
        """Prints the numbers file (which holds `text()`), then each failed check on stderr; the exit code."""
        with open(text_path) as f:
            print(f.read(), end="")
        failed = [r for r in self.rows if not r[3]]
        for name, measured, required, _, engine in failed:
            print(f"{'engine check' if engine else 'claim'} failed: {name}: measured {measured}; required {required}",
                  file=sys.stderr)
        if _PERTURB:
            print("(engine perturbed: " + " ".join(f"{k}={v}" for k, v in _PERTURB.items()) + ")", file=sys.stderr)
        return 1 if failed else 0
