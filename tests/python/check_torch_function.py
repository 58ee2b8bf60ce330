#!/usr/bin/env python3
"""rcsim.torch.stack (issue 48, item 4): a stack of rcsim blocks as a torch.autograd.Function whose
backward is rcsim's reverse pass, against torch autograd of an independent torch implementation of
the same stack, written here from docs/science/model-spec.md (section 1.1), not from rcsim's code:
pre-LN blocks X <- X + A(LN1(X)), X <- X + M(LN2(X)); A: 2 softmax heads with attention biases
(Q = LN1(X) W_Q,h + b_Q,h, K, V likewise, logits Q K^T / sqrt(d_k) under a causal mask), each head's
output through W_O,h, summed, + b_O; M(Y) = gelu(Y W_in + b_in) W_out + b_out (exact gelu);
LayerNorm with per-layer gains and biases (eps 1e-5). N = 6, d = 4, H = 2, d_k = d_v = 2, m = 8,
3 layers; W_K, W_out and b_out shared by the layers ([H, d, d_k], [m, d], [d]), the others per layer.

Usage: check_torch_function.py BUILD_DIR. Exit 77 (skipped) without torch. Checks:
  float64: forward = the torch stack to 1e-12; after loss.backward() (loss = sum(C * X(3))),
    X.grad and every weight's .grad = torch autograd's to 1e-10 relative (Frobenius; b_K, whose
    gradient is exactly 0 by the softmax's shift invariance, to 1e-10 of the largest gradient);
  float32 (run.precision = float32): the same to 1e-4 relative;
  a batch [2, N, d]: each matrix's output, and weight gradients the sum over the batch;
  the forward equals rcsim.layer bit for bit;
  weights.redraw_every = 2 with per-layer W_Q: layer t uses block t - t mod 2 (block 1 unused: 0);
  torch.autograd.gradcheck (finite differences) of b_O through the stack;
  a weight of the wrong dtype: one ConfigError naming weights['W_Q']; `import rcsim` imports no torch.
Under 1 s after torch's import (1.6 to 2.9 s in all on a loaded 2-core machine).
"""
import math
import os
import subprocess
import sys
import time

try:
    import torch
except ImportError:
    print("check_torch_function: torch is not installed (Debian: python3-torch); skipped")
    sys.exit(77)

sys.path.insert(0, os.path.join(sys.argv[1], "python"))
import rcsim  # noqa: E402

START = time.time()
failures = []
N, D, H, DK, M, L = 6, 4, 2, 2, 8, 3
SHARED = ("W_K", "W_out", "b_out")
KEYS = dict(model={"heads": H, "key_dim": DK, "value_dim": DK}, mlp={"width": M, "bias": True, "activation": "gelu"},
            norm={"type": "layernorm", "position": "pre", "params": "file"}, residual={"alpha": 1.0},
            mask={"type": "causal"})


def check(cond, what):
    print("ok  " if cond else "FAIL", what)
    if not cond:
        failures.append(what)


def rel(a, b):
    return float((a - b).double().norm() / max(float(b.double().norm()), 1e-300))


def draw(gen):
    shapes = {"W_Q": (L, H, D, DK), "W_K": (H, D, DK), "W_V": (L, H, D, DK), "W_O": (L, H, DK, D),
              "b_Q": (L, H, DK), "b_K": (L, H, DK), "b_V": (L, H, DK), "b_O": (L, D),
              "W_in": (L, D, M), "b_in": (L, M), "W_out": (M, D), "b_out": (D,),
              "norm_attn_gain": (L, D), "norm_attn_bias": (L, D), "norm_mlp_gain": (L, D), "norm_mlp_bias": (L, D)}
    w = {k: torch.randn(s, generator=gen, dtype=torch.float64) / math.sqrt(s[-2] if len(s) > 1 and k[0] == "W" else 4)
         for k, s in shapes.items()}
    for k in ("norm_attn_gain", "norm_mlp_gain"):
        w[k] = 1 + 0.3 * w[k]
    return w


def layernorm(y, gain, bias):
    c = y - y.mean(dim=-1, keepdim=True)
    return gain * c / torch.sqrt((c * c).mean(dim=-1, keepdim=True) + 1e-5) + bias


def reference(X, w, blocks=None):
    """The stack in plain torch; layer t uses block blocks[t] of each per-layer weight."""
    blocks = blocks or list(range(L))
    causal = torch.tril(torch.ones(N, N, dtype=torch.bool))
    for t in range(L):
        p = {k: (v if k in SHARED else v[blocks[t]]) for k, v in w.items()}
        y = layernorm(X, p["norm_attn_gain"], p["norm_attn_bias"])
        out = p["b_O"]
        for h in range(H):
            q = y @ p["W_Q"][h] + p["b_Q"][h]
            k = y @ p["W_K"][h] + p["b_K"][h]
            v = y @ p["W_V"][h] + p["b_V"][h]
            s = (q @ k.T / math.sqrt(DK)).masked_fill(~causal, float("-inf"))
            out = out + torch.softmax(s, dim=-1) @ v @ p["W_O"][h]
        X = X + out
        y = layernorm(X, p["norm_mlp_gain"], p["norm_mlp_bias"])
        X = X + torch.nn.functional.gelu(y @ p["W_in"] + p["b_in"]) @ p["W_out"] + p["b_out"]
    return X


def both(w0, X0, C, dtype, extra=None, blocks=None):
    """(forward error, {name: relative gradient error}) of rcsim.torch.stack against the reference."""
    def leaves():
        return ({k: v.to(dtype).clone().requires_grad_() for k, v in w0.items()},
                X0.to(dtype).clone().requires_grad_())
    wr, Xr = leaves()
    Yr = torch.stack([reference(x, wr, blocks) for x in Xr]) if Xr.dim() == 3 else reference(Xr, wr, blocks)
    (Yr * C.to(dtype)).sum().backward()
    ws, Xs = leaves()
    Ys = rcsim.torch.stack(Xs, dict(ws, **(extra or {})), layers=L, **KEYS)
    (Ys * C.to(dtype)).sum().backward()
    errors = {"X": rel(Xs.grad, Xr.grad)}
    errors.update({k: rel(ws[k].grad, wr[k].grad) for k in w0 if k != "b_K"})
    # b_K adds q.b_K to a whole row of logits, which the softmax ignores: its gradient is 0 and both
    # sides hold rounding only, so it is checked against the largest gradient G (as autograd_check.py).
    G = max(float(wr[k].grad.double().norm()) for k in w0)
    errors["b_K (abs, / G)"] = max(float(ws["b_K"].grad.double().norm()), float(wr["b_K"].grad.double().norm())) / G
    ok_type = Ys.dtype == dtype and Ys.grad_fn is not None and all(
        ws[k].grad.shape == w0[k].shape and ws[k].grad.dtype == dtype for k in w0)
    return float((Ys - Yr).abs().max()), errors, ok_type


gen = torch.Generator().manual_seed(48)
w0 = draw(gen)
X0 = torch.randn(N, D, generator=gen, dtype=torch.float64)
C = torch.randn(N, D, generator=gen, dtype=torch.float64)

fwd, errs, ok_type = both(w0, X0, C, torch.float64)
worst = max(errs, key=errs.get)
check(fwd <= 1e-12, f"float64 forward = torch to {fwd:.1e} (<= 1e-12)")
check(errs[worst] <= 1e-10, f"float64 X.grad and the {len(errs) - 1} weights' .grad = torch autograd to "
                            f"{errs[worst]:.1e} relative (largest: {worst}; X.grad {errs['X']:.1e}; <= 1e-10)")
print("    float64 errors: " + ", ".join(f"{k} {v:.1e}" for k, v in errs.items()))
check(ok_type, "float64: a float64 tensor with a grad_fn; each .grad in its weight's shape (shared ones summed)")

same = rcsim.layer(X0, w0, layers=L, **KEYS)
Y = rcsim.torch.stack(X0, w0, layers=L, **KEYS)
check(bool((Y.numpy() == same).all()), "rcsim.torch.stack's forward = rcsim.layer, bit for bit")

fwd, errs, ok_type = both(w0, X0, C, torch.float32)
worst = max(errs, key=errs.get)
check(fwd <= 1e-5, f"float32 forward = torch float32 to {fwd:.1e} (<= 1e-5)")
check(errs[worst] <= 1e-4, f"float32 (run.precision = float32) gradients = torch float32 autograd to "
                           f"{errs[worst]:.1e} relative (largest: {worst}; <= 1e-4)")
print("    float32 errors: " + ", ".join(f"{k} {v:.1e}" for k, v in errs.items()))
check(ok_type, "float32: a float32 tensor, .grad float32 in each weight's shape")

XB = torch.randn(2, N, D, generator=gen, dtype=torch.float64)
CB = torch.randn(2, N, D, generator=gen, dtype=torch.float64)
fwd, errs, _ = both(w0, XB, CB, torch.float64)
worst = max(errs, key=errs.get)
check(fwd <= 1e-12 and errs[worst] <= 1e-10, f"a batch [2, N, d]: forward to {fwd:.1e}, gradients (summed over "
                                              f"the batch) to {errs[worst]:.1e} relative")

fwd, errs, _ = both(w0, X0, C, torch.float64, {"redraw_every": 2}, blocks=[0, 0, 2])
worst = max(errs, key=errs.get)
check(fwd <= 1e-12 and errs[worst] <= 1e-10, f"weights.redraw_every = 2 (layers use blocks 0, 0, 2): forward to "
                                              f"{fwd:.1e}, gradients to {errs[worst]:.1e} relative")

fixed = {k: v for k, v in w0.items() if k != "b_O"}
b_O = w0["b_O"].clone().requires_grad_()
ok = torch.autograd.gradcheck(lambda b: rcsim.torch.stack(X0, dict(fixed, b_O=b), layers=L, **KEYS),
                              (b_O,), eps=1e-6, atol=1e-7, rtol=1e-6, raise_exception=False)
check(ok, "torch.autograd.gradcheck of b_O [3, 4] through rcsim.torch.stack (finite differences, eps 1e-6)")

try:
    rcsim.torch.stack(X0, dict(w0, W_Q=w0["W_Q"].float()), layers=L, **KEYS)
    check(False, "a float32 W_Q with a float64 X raises ConfigError")
except rcsim.ConfigError as e:
    check("weights['W_Q']" in str(e) and "\n" not in str(e), f"a float32 W_Q with a float64 X: one ConfigError ({e})")

probe = subprocess.run([sys.executable, "-c", "import sys; sys.path.insert(0, sys.argv[1]); import rcsim; "
                        "print('torch' in sys.modules)", os.path.join(sys.argv[1], "python")],
                       capture_output=True, text=True)
check(probe.stdout.strip() == "False", f"`import rcsim` does not import torch ({probe.stdout.strip()} "
                                       f"{probe.stderr.strip()[-200:]})")

print(f"check_torch_function: {time.time() - START:.1f} s")
if failures:
    print(f"check_torch_function: {len(failures)} failure(s)")
    sys.exit(1)
print("check_torch_function: all passed")
