"""Shared pieces of the particle-flow reproduction scripts (docs/science/particles.md, sections 8-12):
the rcsim command line of the papers' flow, a timed run, and the token angles on the circle."""
import argparse
import re
import shutil
import subprocess
import sys
import time

import numpy as np


def default_rcsim():
    return shutil.which("rcsim") or "build/sim/rcsim"


def perturbation(text):
    """One --perturb argument, KEY=VALUE (an rcsim key such as model.beta, any value): the pair (KEY, VALUE)."""
    key, sep, value = text.partition("=")
    if not sep or not re.fullmatch(r"[a-z][a-z0-9_]*(\.[a-z0-9_]+)+", key):
        raise argparse.ArgumentTypeError(f"'{text}': expected KEY=VALUE with KEY an rcsim key such as "
                                         "model.beta (e.g. --perturb model.beta=0.5)")
    return key, value


def script_args(doc, seed=None, outputs_required=True, extra=(), options=None):
    """The figure scripts' command line: --tiny --rcsim PATH --data DIR --out PREFIX [--seed S]
    [--perturb KEY=VALUE ...], `extra` flags (store_true) such as --self-test, and `options(parser)` adding a
    script's own. --perturb (repeatable) deliberately changes the engine's setting: each KEY=VALUE goes into every
    rcsim run of the script (run_rcsim's `perturb`), in place of the script's own value of KEY, so that a
    reproduction can be seen to fail (tests/reproductions/perturbed.py); the last value of a KEY given twice wins."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--tiny", action="store_true")
    for flag in extra:
        ap.add_argument(flag, action="store_true")
    ap.add_argument("--rcsim", default=default_rcsim())
    ap.add_argument("--data", required=outputs_required)
    ap.add_argument("--out", required=outputs_required)
    if seed is not None:
        ap.add_argument("--seed", type=int, default=seed)
    ap.add_argument("--perturb", action="append", default=[], type=perturbation, metavar="KEY=VALUE",
                    help="run every rcsim invocation with --KEY=VALUE instead of the script's own KEY (repeatable)")
    if options is not None:
        options(ap)
    a = ap.parse_args()
    a.perturb = dict(a.perturb)
    if a.perturb:
        print("perturbed engine: " + " ".join(perturbed_args([], a.perturb)), file=sys.stderr)
    return a


def perturbed_args(args, perturb):
    """The rcsim arguments `args` (--key=value) with each KEY of `perturb` (dict KEY -> VALUE) set to VALUE: the
    script's own --KEY=... dropped (rcsim refuses a key given twice) and --KEY=VALUE appended."""
    kept = [x for x in args if x.partition("=")[0][2:] not in perturb]
    return kept + [f"--{k}={v}" for k, v in perturb.items()]


def flow_args(n, d, beta, dt, steps, kind="softmax", integrator="rk4", mask="complete"):
    """The papers' flow dx_i/dt = P_{x_i}(sum_j A_ij x_j), Q = K = V = I shared by all layers, on the sphere."""
    return [f"--model.tokens={n}", f"--model.dim={d}", f"--model.layers={steps}",
            "--weights.q=identity", "--weights.k=identity", "--weights.v=identity", "--weights.shared=true",
            f"--model.beta={beta!r}", f"--attention.kind={kind}", f"--mask.type={mask}",
            "--norm.type=sphere", f"--residual.alpha={dt!r}", "--residual.project=tangent",
            f"--dynamics.integrator={integrator}"]


def run_rcsim(rcsim, out, args, extra=(), perturb=None):
    """Run `rcsim run` into `out` (with the keys of `perturb`, script_args's --perturb, in place of the
    script's own); returns the wall time in seconds (the whole process)."""
    cmd = [rcsim, "run", "--quiet", "--force", f"--output.file={out}", "--run.threads=1",
           *perturbed_args([*args, *extra], perturb or {})]
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True)
    return time.perf_counter() - t0


def angles(X):
    """Angles atan2(x_2, x_1) of the rows of X[..., 2], in [-pi, pi)."""
    return np.arctan2(X[..., 1], X[..., 0])


def renyi_centres(X, delta):
    """Renyi-parking centres (SCIENCE.md's definition): tokens in causal order, each a centre when its Euclidean
    distance to every earlier centre is >= delta. Returns the list of token indices. An independent
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


def check_lines(checks):
    """The lines of the numbers file for `checks`, a list of (claim, ok, measured): one per claim, "check holds:"
    or "check FAILED:", the claim and the measured values it was decided on."""
    return "".join(f"check {'holds' if ok else 'FAILED'}: {claim}: {measured}\n" for claim, ok, measured in checks)


def report_checks(text_path, checks, what="prediction"):
    """Prints the numbers file (with its check_lines) and each failed check ("<what> failed: claim: measured",
    on stderr); the exit code: 1 if a check failed, else 0 (the signal_*.py reproductions end with it)."""
    with open(text_path) as f:
        print(f.read(), end="")
    failed = [(claim, measured) for claim, ok, measured in checks if not ok]
    for claim, measured in failed:
        print(f"{what} failed: {claim}: {measured}", file=sys.stderr)
    return 1 if failed else 0
