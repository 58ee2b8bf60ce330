#!/usr/bin/python3
"""The derivative regression (issue 34, item 0): every gradient and Jacobian measure in several
settings, float64 and float32, stored as values and checked at a tight bound, so that a change that
keeps the forward pass (tests/golden/golden.py) is also held to its derivatives, not only to the
finite-difference tolerance of the unit tests.

    derivatives.py record RCSIM [FILE]   # run the cases, write the values (tests/golden/derivatives.json)
    derivatives.py check  RCSIM [FILE]   # run them again, compare (exit 1 if any value moved)

Bound, per measure and case: max |new - stored| <= tol * max(1, max |stored|) with tol = 1e-12 in
float64 and 1e-5 in float32. Not bitwise: the stored values come from one build, and a build with
another instruction set (a native -march build and the portable one; FMA contraction) differs in the
last bits, which deep reverse passes amplify to about 1e-14 in float64 and 1e-7 in float32.
"""
import json
import os
import subprocess
import sys
import tempfile

import h5py
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_FILE = os.path.join(HERE, "derivatives.json")

REVERSE = ("grad_x_norm,grad_wq_norm,grad_wk_norm,grad_wv_norm,grad_wo_norm,grad_mlp_in_norm,grad_mlp_out_norm,"
           "jacobian_log_fro2,jacobian_log_spec2,jacobian_log_fro2_full")
ALL = REVERSE + ",jacobian_log_spec2_full"  # the forward-mode pass: float64, not rk4, tangent, noise, random_markov
COMMON = ["--run.trials=2", "--run.threads=1", "--model.tokens=6", "--model.dim=4", "--model.layers=4", "--quiet"]

# name: keys. Each a setting the reverse and forward-mode passes cover (docs/science/gradients.md).
CASES = {
    "post_layernorm_causal_mlp": ["--mask.type=causal", "--norm.type=layernorm", "--residual.alpha=1",
                                  "--mlp.width=8", f"--output.measures={ALL}"],
    "pre_layernorm_complete_heads_wo": ["--norm.type=layernorm", "--norm.position=pre", "--residual.alpha=1",
                                        "--model.heads=2", "--model.value_dim=3", "--weights.o=gaussian",
                                        "--mlp.width=8", f"--output.measures={ALL}"],
    "peri_rmsnorm_window": ["--mask.type=sliding_window", "--mask.window=1", "--norm.type=rmsnorm",
                            "--norm.position=peri", "--residual.alpha=1", "--mlp.width=8", f"--output.measures={ALL}"],
    "ngpt_alibi_qknorm": ["--mask.type=causal", "--norm.type=sphere", "--norm.position=ngpt", "--residual.alpha=0.5",
                          "--attention.logit_bias=alibi", "--attention.qk_norm=true", f"--output.measures={ALL}"],
    "particles_rk4_tangent_noise": ["--norm.type=sphere", "--residual.alpha=0.1", "--residual.project=tangent",
                                    "--dynamics.integrator=rk4", "--dynamics.noise=0.05", "--model.beta=2",
                                    f"--output.measures={REVERSE}"],
    "random_markov_sphere": ["--attention.kind=random_markov", "--norm.type=sphere", "--mask.type=causal",
                             f"--output.measures={REVERSE}"],
    "last_token_readout": ["--mask.type=causal", "--norm.type=layernorm", "--residual.alpha=1",
                           "--metrics.readout=last_token", "--output.measures=grad_x_norm,grad_wq_norm,"
                           "jacobian_log_fro2,jacobian_log_spec2"],
    "float32_pre_layernorm_mlp": ["--run.precision=float32", "--norm.type=layernorm", "--norm.position=pre",
                                  "--residual.alpha=1", "--mlp.width=8", "--mask.type=causal",
                                  f"--output.measures={REVERSE}"],
}


def run_case(rcsim, name, keys, work):
    out = os.path.join(work, name + ".h5")
    cmd = [rcsim, "run", *COMMON, *keys, f"--output.file={out}"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"derivatives: case {name}: {' '.join(cmd)} failed ({r.returncode}): {r.stderr.strip()}")
    values = {}
    with h5py.File(out, "r") as f:
        for m in f["metrics"]:
            if m.startswith(("grad_", "jacobian_")):
                values[m] = np.asarray(f["metrics"][m], dtype=float).ravel().tolist()
    if not values:
        sys.exit(f"derivatives: case {name}: no gradient or Jacobian measure in the output")
    return values


def run_all(rcsim):
    with tempfile.TemporaryDirectory() as work:
        return {name: run_case(rcsim, name, keys, work) for name, keys in CASES.items()}


def compare(stored, new):
    """Lines describing every measure that moved beyond its bound (empty: all agree)."""
    bad = []
    for name, measures in stored.items():
        tol = 1e-5 if "float32" in name else 1e-12
        if name not in new:
            bad.append(f"{name}: case missing")
            continue
        for m, old in measures.items():
            if m not in new[name]:
                bad.append(f"{name}/{m}: measure missing")
                continue
            a, b = np.array(new[name][m]), np.array(old)
            if a.shape != b.shape:
                bad.append(f"{name}/{m}: {a.size} values, stored {b.size}")
                continue
            finite = np.isfinite(b)
            if not np.array_equal(finite, np.isfinite(a)) or not np.array_equal(a[~finite], b[~finite]):
                bad.append(f"{name}/{m}: non-finite values differ")
                continue
            scale = max(1.0, float(np.max(np.abs(b[finite]), initial=0.0)))
            err = float(np.max(np.abs(a[finite] - b[finite]), initial=0.0)) / scale
            if err > tol:
                bad.append(f"{name}/{m}: moved by {err:.3g} (bound {tol:g})")
    return bad


def main(argv):
    if len(argv) < 3 or argv[1] not in ("record", "check"):
        sys.exit(__doc__)
    path = argv[3] if len(argv) > 3 else DEFAULT_FILE
    new = run_all(argv[2])
    if argv[1] == "record":
        tmp = path + ".tmp"
        with open(tmp, "x") as f:
            json.dump({"cases": {k: CASES[k] for k in new}, "common": COMMON, "values": new}, f, indent=1)
        os.replace(tmp, path)
        print(f"derivatives: recorded {sum(len(v) for v in new.values())} measures in {len(new)} cases to {path}")
        return 0
    try:
        with open(path) as f:
            stored = json.load(f)["values"]
    except (OSError, ValueError, KeyError) as e:
        sys.exit(f"derivatives: cannot read the stored values {path}: {e}")
    bad = compare(stored, new)
    for line in bad:
        print("derivatives: " + line)
    n = sum(len(v) for v in stored.values())
    print(f"{n - len(bad)} passed, {len(bad)} failed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
