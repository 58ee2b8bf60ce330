#!/usr/bin/python3
"""The Python array API (rcsim.simulate, layer, gradients, measures, clusters) on hostile
arguments (issue 38), table-driven: each row is (call, argument, bad value) and the phrases the
one-line error must hold. A refused argument raises rcsim.ConfigError naming the function and the
argument; a forward pass that turns non-finite raises FloatingPointError naming the layer. Every
row's call is also made with the bad value replaced by a good one (the control) and must succeed,
so a row cannot pass by an unrelated error.

    python_api.py BUILD_DIR
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(sys.argv[1], "python"))
import rcsim  # noqa: E402

N, d = 4, 3
rng = np.random.default_rng(38)
X = rng.standard_normal((N, d))
C = rng.standard_normal((N, d))
W = {"W_Q": rng.standard_normal((d, d)) / 2, "W_K": rng.standard_normal((d, d)) / 2,
     "W_V": rng.standard_normal((d, d)) / 2}
SIM = {"model.tokens": N, "model.dim": d, "model.layers": 2, "run.trials": 1}
NONE = {"norm": {"type": "none"}}
try:
    import torch
except ImportError:
    torch = None


def with_nan(a, where=(1, 2)):
    a = np.array(a, dtype=float)
    a[where] = np.nan
    return a


def huge_weights(scale):
    """Weights that make attention without normalisation blow up within two layers (the value map
    multiplies the tokens by ~scale per layer: 1e200 overflows at the second layer)."""
    return {"W_Q": np.zeros((d, d)), "W_K": np.zeros((d, d)), "W_V": np.eye(d) * scale}


# (name, call(value), bad value, good value, exception, phrases of the message). CE: rcsim.ConfigError;
# TE: a ConfigError that is also a TypeError (an argument of the wrong type); FE: FloatingPointError.
CE, TE, FE = "ConfigError", "ConfigTypeError", "FloatingPointError"
ROWS = [
    # simulate: X(0), weights and mask arrays
    ("simulate_x0_complex", lambda v: rcsim.simulate(keys=SIM, x0=v), X + 1j, X, TE, ["rcsim.simulate", "x0", "complex"]),
    ("simulate_x0_inf", lambda v: rcsim.simulate(keys=SIM, x0=v), np.full((N, d), np.inf), X, CE,
     ["x0", "non-finite value inf"]),
    ("simulate_x0_no_tokens", lambda v: rcsim.simulate(keys=SIM, x0=v), np.zeros((0, d)), X, CE,
     ["x0", "empty array of shape (0, 3)", "N >= 1 tokens"]),
    ("simulate_x0_strings", lambda v: rcsim.simulate(keys=SIM, x0=v), np.full((N, d), "a"), X, TE,
     ["x0", "dtype <U1", "real numbers"]),
    ("simulate_x0_ragged", lambda v: rcsim.simulate(keys=SIM, x0=v), [[1.0, 2.0], [3.0]], X, TE,
     ["x0", "not an array of numbers"]),
    ("simulate_x0_bool", lambda v: rcsim.simulate(keys=SIM, x0=v), np.ones((N, d), bool), X, TE, ["x0", "bool array"]),
    ("simulate_weight_complex", lambda v: rcsim.simulate(keys=SIM, weights=dict(W, W_Q=v)), W["W_Q"] * (1 + 1j),
     W["W_Q"], TE, ["weights['W_Q']", "complex"]),
    ("simulate_weight_nan", lambda v: rcsim.simulate(keys=SIM, weights=dict(W, W_V=v)), with_nan(W["W_V"]), W["W_V"],
     CE, ["weights['W_V']", "non-finite value nan at index (1, 2)"]),
    ("simulate_weight_empty", lambda v: rcsim.simulate(keys=SIM, weights=dict(W, W_K=v)), np.zeros((d, 0)), W["W_K"],
     CE, ["weights['W_K']", "empty array"]),
    ("simulate_mask_empty", lambda v: rcsim.simulate(keys=SIM, mask=v), np.zeros((0, 0), bool), np.ones((N, N)), CE,
     ["rcsim.simulate", "mask", "shape (0, 0)", "N >= 1 tokens"]),
    ("simulate_mask_complex", lambda v: rcsim.simulate(keys=SIM, mask=v), np.ones((N, N)) + 0j, np.ones((N, N)), TE,
     ["mask", "complex128"]),
    ("simulate_group", lambda v: rcsim.simulate(keys=SIM, group=v), "metric", "metrics", CE,
     ["group", "'metric'", "'diagnostics'"]),
    ("simulate_quiet", lambda v: rcsim.simulate(keys=SIM, quiet=v), "no", True, TE, ["quiet", "True or False"]),
    ("simulate_progress", lambda v: rcsim.simulate(keys=SIM, progress=v), 1, None, TE, ["progress", "callable"]),
    ("simulate_keys_list", lambda v: rcsim.simulate(keys=v), [("model.dim", 3)], SIM, TE, ["keys", "a list", "dict"]),
    # layer
    ("layer_X_complex", lambda v: rcsim.layer(v, W, **NONE), X * 1j, X, TE, ["rcsim.layer", "X", "complex"]),
    ("layer_X_no_tokens", lambda v: rcsim.layer(v, W, **NONE), np.zeros((0, d)), X, CE,
     ["rcsim.layer", "X", "empty array", "at least one token"]),
    ("layer_X_3d", lambda v: rcsim.layer(v, W, **NONE), X[None], X, CE, ["X", "shape (1, 4, 3)", "[N, d]"]),
    ("layer_layers_fraction", lambda v: rcsim.layer(X, W, layers=v, **NONE), 1.5, 1, TE,
     ["layers", "1.5 is not a whole number"]),
    ("layer_layers_zero", lambda v: rcsim.layer(X, W, layers=v, **NONE), 0, 1, CE, ["layers", "0 is out of range"]),
    ("layer_layers_bool", lambda v: rcsim.layer(X, W, layers=v, **NONE), True, 1, TE, ["layers", "is a bool"]),
    ("layer_mask_size", lambda v: rcsim.layer(X, W, mask=v, **NONE), np.ones((N + 1, N + 1)), np.ones((N, N)), CE,
     ["mask", "shape (5, 5)", "[4, 4] for the 4 tokens"]),
    ("layer_all_layers", lambda v: rcsim.layer(X, W, all_layers=v, **NONE), "yes", False, TE,
     ["all_layers", "True or False"]),
    ("layer_forward_overflow", lambda v: rcsim.layer(X, huge_weights(v), layers=3, **NONE), 1e200, 1.0,
     FE, ["rcsim.layer", "forward pass turned non-finite at layer 2"]),
    # gradients
    ("gradients_cotangent_nan", lambda v: rcsim.gradients(X, v, W, **NONE), with_nan(C, (0, 0)), C, CE,
     ["rcsim.gradients", "cotangent", "non-finite value nan at index (0, 0)"]),
    ("gradients_cotangent_inf", lambda v: rcsim.gradients(X, v, W, **NONE), np.full((N, d), -np.inf), C, CE,
     ["cotangent", "non-finite value -inf"]),
    ("gradients_cotangent_complex", lambda v: rcsim.gradients(X, v, W, **NONE), C + 2j, C, TE, ["cotangent", "complex"]),
    ("gradients_cotangent_shape", lambda v: rcsim.gradients(X, v, W, **NONE), C[:, :2], C, CE,
     ["cotangent", "shape (4, 2)", "(4, 3)"]),
    ("gradients_layers_fraction", lambda v: rcsim.gradients(X, C, W, layers=v, **NONE), 2.5, 2, TE,
     ["layers", "2.5 is not a whole number"]),
    ("gradients_X_no_tokens", lambda v: rcsim.gradients(v, C, W, **NONE), np.zeros((0, d)), X, CE,
     ["rcsim.gradients", "X", "empty array"]),
    ("gradients_forward_overflow", lambda v: rcsim.gradients(X, C, huge_weights(v), layers=3, **NONE), 1e200, 1.0,
     FE, ["rcsim.gradients", "forward pass turned non-finite at layer 2"]),
    ("gradients_reverse_overflow", lambda v: rcsim.gradients(X, C * v, dict(W, W_Q=np.zeros((d, d)), W_K=np.zeros((d, d)),
                                                                      W_V=np.eye(d) * 1e5), layers=2, **NONE), 1e300,
     1.0, FE, ["rcsim.gradients", "reverse pass turned non-finite at layer 1", "forward pass was finite"]),
    ("gradients_weight_overflow", lambda v: rcsim.gradients(X * 1e154, C * v, {k: np.zeros((d, d)) for k in W}, layers=2,
                                                           residual={"alpha": 1}, **NONE), 1e160, 1.0, FE,
     ["rcsim.gradients", "gradient with respect to W_V of layer 0"]),
    # measures
    ("measures_X_complex", lambda v: rcsim.measures(v), X + 1j, X, TE, ["rcsim.measures", "X", "complex"]),
    ("measures_X_no_tokens", lambda v: rcsim.measures(v), np.zeros((2, 0, d)), X, CE, ["X", "empty array"]),
    ("measures_X_no_batch", lambda v: rcsim.measures(v), np.zeros((0, N, d)), X, CE, ["X", "empty array"]),
    ("measures_X_nan", lambda v: rcsim.measures(v), with_nan(X), X, CE, ["X", "non-finite value nan"]),
    ("measures_X_vector", lambda v: rcsim.measures(v), X[0], X, CE, ["X", "shape (3,)", "(..., N, d)"]),
    ("measures_rank_rtol_nan", lambda v: rcsim.measures(X, rank_rtol=v), float("nan"), 1e-10, CE,
     ["rank_rtol", "nan", "finite real number >= 0.0 or None"]),
    ("measures_rank_rtol_negative", lambda v: rcsim.measures(X, rank_rtol=v), -1.0, 0.0, CE, ["rank_rtol", "-1.0"]),
    ("measures_rank_atol_inf", lambda v: rcsim.measures(X, rank_atol=v), float("inf"), 0.0, CE, ["rank_atol", "inf"]),
    ("measures_rank_atol_string", lambda v: rcsim.measures(X, rank_atol=v), "0", 0.0, TE,
     ["rank_atol", "a str", "finite real number"]),
    # clusters
    ("clusters_tau_nan", lambda v: rcsim.clusters(X, v), float("nan"), 0.9, CE, ["rcsim.clusters", "tau", "nan"]),
    ("clusters_tau_complex", lambda v: rcsim.clusters(X, v), 0.5 + 0j, 0.5, TE, ["tau", "a complex"]),
    ("clusters_tau_bool", lambda v: rcsim.clusters(X, v), True, 0.5, TE, ["tau", "a bool"]),
    ("clusters_X_no_tokens", lambda v: rcsim.clusters(v, 0.5), np.zeros((0, d)), X, CE,
     ["rcsim.clusters", "X", "empty array", "at least one token"]),
    ("clusters_X_inf", lambda v: rcsim.clusters(v, 0.5), np.full((N, d), np.inf), X, CE, ["X", "non-finite value inf"]),
    ("clusters_X_object", lambda v: rcsim.clusters(v, 0.5), np.array([[1.0, None, 2.0]] * N), X, TE,
     ["X", "dtype object"]),
]
if torch is not None:
    ROWS += [
        ("simulate_x0_torch_complex", lambda v: rcsim.simulate(keys=SIM, x0=v), torch.tensor(X) * (1 + 1j),
         torch.tensor(X), TE, ["x0", "complex tensor"]),
        ("layer_weight_torch_complex", lambda v: rcsim.layer(X, dict(W, W_V=v), **NONE),
         torch.tensor(W["W_V"], dtype=torch.complex64), torch.tensor(W["W_V"], dtype=torch.bfloat16), TE,
         ["rcsim.layer", "weights['W_V']", "complex tensor"]),
        ("measures_X_torch_nan", lambda v: rcsim.measures(v), torch.tensor(with_nan(X)),
         torch.tensor(X, requires_grad=True), CE, ["X", "non-finite value nan"]),
    ]


def outcome(fn, value):
    """The kind of exception `fn(value)` raises (CE, TE, FE, or another class's name; None: none) and its text."""
    try:
        fn(value)
    except rcsim.ConfigError as e:
        return TE if isinstance(e, TypeError) else CE, str(e)
    except Exception as e:  # noqa: BLE001 - every outcome is recorded and judged below
        return type(e).__name__, str(e)
    return None, ""


def main():
    failures = 0
    for name, fn, bad, good, kind, phrases in ROWS:
        problems = []
        got, message = outcome(fn, bad)
        if got != kind:
            problems.append(f"raised {got or 'nothing'}, expected {kind}" + (f": {message}" if message else ""))
        else:
            problems += [f"the message lacks {p!r}: {message}" for p in phrases if p not in message]
            if "\n" in message:
                problems.append("the message has more than one line")
        control, message = outcome(fn, good)
        if control is not None:
            problems.append(f"the control (a good value) raised {control}: {message}")
        failures += bool(problems)
        print(f"[{'ok' if not problems else 'FAIL'}] {name}" + "".join("\n    " + p for p in problems))
    print(f"python_api: {len(ROWS)} cases, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
