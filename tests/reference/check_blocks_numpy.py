#!/usr/bin/env python3
"""Independent check of the block structures (norm.position = post | pre | peri, with and without
the residual) and of run.precision = float32 against a NumPy implementation.

Random inputs and weights are written to an HDF5 file, `rcsim run --output.tokens=all` is run on
them, and the stored token matrices X(t) are compared with NumPy's layer by layer:
  post: N(X + a A(X))   (a = 0: N(A(X)))
  pre:  X + a A(N(X))   (a = 0: A(N(X)))
  peri: X + a N(A(N(X)))  (a = 0: N(A(N(X))))
with A(X) = sum_h softmax_mask(X W_Q,h (X W_K,h)^T / sqrt(d_QK)) X W_V,h (X W_V,h W_O,h with
model.value_dim = d_v: W_V,h d x d_v, W_O,h d_v x d), then, with mlp.width = m > 0, the MLP
sub-block M(X) = act(X W_in + b_in) W_out + b_out placed the same way with its own normalisations:
  post: N2(X + a M(X)); pre: X + a M(N2(X)); peri: X + a N2_out(M(N2(X)))  (a = 0: M replaces X)
Every weight, bias and (norm.params = file) every normalisation's per-layer gain and bias is read by
rcsim from the HDF5 file this script writes. Agreement: every layer's
max |difference| <= 1e-12 max |X(t)| (float64). For run.precision = float32 NumPy computes the
whole forward pass in float32 (tokens, weights, gains and biases rounded to float32; products,
softmax, normalisation and MLP in float32) starting from the rounded input; different summation
orders differ by a few float32 epsilons (1.2e-7) per layer, so agreement is 1e-5 max |X(t)|.

usage: check_blocks_numpy.py PATH/TO/rcsim WORKDIR
"""
import os
import subprocess
import sys

import h5py
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_against_numpy import mask_matrix, normalise, write_random_inputs  # noqa: E402  (the same N, masks, files)

N, D, DK, L, T = 6, 5, 3, 5, 2


def attention(x, wq, wk, wv, mask, d_qk, wo=None):
    y = np.zeros_like(x)
    for h in range(wq.shape[0]):
        s = (x @ wq[h]) @ (x @ wk[h]).T / np.sqrt(d_qk)
        s = np.where(mask, s, -np.inf)
        a = np.exp(s - s.max(axis=1, keepdims=True))
        a /= a.sum(axis=1, keepdims=True)
        y += a @ x @ wv[h] if wo is None else a @ x @ wv[h] @ wo[h]
    return y


def activation(z, kind):
    if kind == "relu":
        return np.maximum(z, 0.0)
    if kind == "gelu":  # exact: z Phi(z), Phi the standard normal CDF
        from math import erf
        return 0.5 * z * (1.0 + np.vectorize(erf, otypes=[z.dtype])(z / np.sqrt(z.dtype.type(2.0))))
    if kind == "gelu_tanh":
        return 0.5 * z * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (z + 0.044715 * z ** 3)))
    if kind == "tanh":
        return np.tanh(z)
    raise ValueError(kind)


def mlp(x, m, kind):
    w_in, b_in, w_out, b_out = m
    return activation(x @ w_in + b_in, kind) @ w_out + b_out


def sublayer(x, f, alpha, position, n_in, n_out):
    """One sub-block f (attention or MLP) with its normalisations n_in (post: after) and n_out (peri)."""
    if position == "post":
        y = f(x)
        return n_in(x + alpha * y if alpha != 0 else y)
    if position == "ngpt":  # nGPT: N(x + a (N_out(f(x)) - x))
        return n_in(x + alpha * (n_out(f(x)) - x))
    y = f(n_in(x))
    if position == "peri":
        y = n_out(y)
    return x + alpha * y if alpha != 0 else y


def block(x, w, mask, d_qk, alpha, position, norm, wo=None, m=None, act=None, norms=None, mlp_alpha=None):
    """norms: None (every normalisation is `norm`) or four functions attn, attn_out, mlp, mlp_out;
    mlp_alpha: the MLP sub-block's branch weight (residual.mlp_alpha; None = alpha)."""
    wq, wk, wv = w
    n = norms or [norm] * 4
    x = sublayer(x, lambda z: attention(z, wq, wk, wv, mask, d_qk, wo), alpha, position, n[0], n[1])
    if m is not None:
        x = sublayer(x, lambda z: mlp(z, m, act), alpha if mlp_alpha is None else mlp_alpha, position, n[2], n[3])
    return x


def main():
    rcsim, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    rng = np.random.default_rng(20261123)
    cases = []
    for position in ("post", "pre", "peri"):
        for alpha in (0.0, 0.7):
            cases.append(dict(position=position, alpha=alpha, norm="layernorm", mask="causal", heads=2,
                              precision="float64"))
    cases += [dict(position="pre", alpha=1.0, norm="rmsnorm", mask="complete", heads=1, precision="float64"),
              dict(position="peri", alpha=1.0, norm="sphere", mask="sliding_window", heads=3, precision="float64"),
              dict(position="post", alpha=0.0, norm="layernorm", mask="complete", heads=1, precision="float32"),
              dict(position="pre", alpha=1.0, norm="layernorm", mask="causal", heads=2, precision="float32")]
    # Output projection, MLP sub-block and per-layer normalisation parameters (norm.params = file).
    cases += [dict(position="post", alpha=0.0, norm="layernorm", mask="causal", heads=2, precision="float64", dv=3),
              dict(position="pre", alpha=1.0, norm="layernorm", mask="complete", heads=2, precision="float64", dv=3,
                   mlp=7, act="gelu", bias=True, params="file"),
              dict(position="peri", alpha=0.7, norm="layernorm", mask="sliding_window", heads=1, precision="float64",
                   dv=5, mlp=4, act="relu", bias=False, params="file"),
              dict(position="post", alpha=1.0, norm="layernorm", mask="causal", heads=3, precision="float64",
                   mlp=9, act="gelu_tanh", bias=True),
              dict(position="post", alpha=0.0, norm="layernorm", mask="complete", heads=2, precision="float64",
                   dv=2, mlp=6, act="relu", bias=True, params="file"),
              dict(position="pre", alpha=0.0, norm="rmsnorm", mask="causal", heads=2, precision="float64",
                   mlp=5, act="gelu", bias=False, params="file"),
              dict(position="peri", alpha=1.0, norm="layernorm", mask="causal", heads=2, precision="float64",
                   dv=4, mlp=8, act="gelu", bias=True),
              dict(position="ngpt", alpha=0.3, norm="sphere", mask="causal", heads=2, precision="float64"),
              dict(position="ngpt", alpha=0.5, norm="rmsnorm", mask="complete", heads=2, precision="float64",
                   dv=3, mlp=6, act="gelu", bias=True, params="file"),
              dict(position="pre", alpha=1.0, norm="layernorm", mask="causal", heads=2, precision="float32",
                   dv=3, mlp=7, act="gelu", bias=True, params="file"),
              dict(position="post", alpha=0.0, norm="rmsnorm", mask="sliding_window", heads=1, precision="float32",
                   mlp=6, act="gelu_tanh", bias=True),
              dict(position="pre", alpha=1.0, norm="layernorm", mask="causal", heads=2, precision="float64",
                   mlp=6, act="tanh", bias=True),
              dict(position="peri", alpha=0.6, norm="rmsnorm", mask="complete", heads=1, precision="float32",
                   dv=3, mlp=5, act="tanh", bias=False),
              # residual.mlp_alpha: the MLP's own branch weight (0 = no residual around the MLP)
              dict(position="pre", alpha=0.4, norm="layernorm", mask="causal", heads=2, precision="float64",
                   mlp=6, act="gelu", bias=True, mlp_alpha=1.3),
              dict(position="post", alpha=1.0, norm="layernorm", mask="complete", heads=1, precision="float64",
                   dv=3, mlp=4, act="relu", bias=False, mlp_alpha=0.0),
              dict(position="ngpt", alpha=0.3, norm="rmsnorm", mask="causal", heads=2, precision="float64",
                   mlp=5, act="tanh", bias=True, mlp_alpha=0.7)]
    failures = 0
    for ci, case in enumerate(cases):
        H = case["heads"]
        path = os.path.join(work, f"inputs{ci}.h5")
        x0, wq, wk, wv = write_random_inputs(path, rng, (T, N, D, DK, L, H))
        dv, width, params = case.get("dv", 0), case.get("mlp", 0), case.get("params", "config")
        extra_args, wo, mlps, slot_norms = [], None, None, None
        with h5py.File(path, "a") as f:
            if dv:
                wv = rng.standard_normal((L, H, D, dv)) / np.sqrt(D)
                wo = rng.standard_normal((L, H, dv, D)) / np.sqrt(dv)
                del f["W_V"]
                f["W_V"] = wv[:, 0] if H == 1 else wv
                f["W_O"] = wo[:, 0] if H == 1 else wo
                extra_args += [f"--model.value_dim={dv}", "--weights.o=file"]
            if width:
                w_in = rng.standard_normal((L, D, width)) / np.sqrt(D)
                w_out = rng.standard_normal((L, width, D)) / np.sqrt(width)
                b_in = rng.standard_normal((L, width)) * 0.3 if case["bias"] else np.zeros((L, width))
                b_out = rng.standard_normal((L, D)) * 0.3 if case["bias"] else np.zeros((L, D))
                f["W_in"], f["W_out"] = w_in, w_out
                if case["bias"]:
                    f["b_in"], f["b_out"] = b_in, b_out
                mlps = [(w_in[t], b_in[t], w_out[t], b_out[t]) for t in range(L)]
                extra_args += [f"--mlp.width={width}", f"--mlp.activation={case['act']}",
                               f"--mlp.bias={'true' if case['bias'] else 'false'}", "--weights.mlp=file"]
            if params == "file":
                slot_norms = {}
                for slot in ("attn", "attn_out", "mlp", "mlp_out"):
                    g = 1.0 + 0.3 * rng.standard_normal((L, D))
                    b = 0.2 * rng.standard_normal((L, D)) if case["norm"] == "layernorm" else np.zeros((L, D))
                    f[f"norm_{slot}_gain"] = g
                    if case["norm"] == "layernorm":
                        f[f"norm_{slot}_bias"] = b
                    slot_norms[slot] = (g, b)
                extra_args += ["--norm.params=file"]
        gain = np.linspace(0.5, 1.5, D)
        bias = np.linspace(-0.2, 0.3, D) if case["norm"] == "layernorm" else np.zeros(D)
        eps = 1e-5
        out = os.path.join(work, f"run{ci}.h5")
        args = [rcsim, "run", "--config", "/dev/null", "--quiet", "--force",
                f"--model.tokens={N}", f"--model.dim={D}", f"--model.key_dim={DK}", f"--model.layers={L}",
                f"--model.heads={H}", "--model.d_qk=2.5", f"--mask.type={case['mask']}", "--mask.window=1",
                f"--norm.type={case['norm']}", f"--norm.eps={eps}", f"--norm.position={case['position']}",
                "--norm.gain=" + ",".join(repr(g) for g in gain),
                "--norm.bias=" + ",".join(repr(b) for b in bias), f"--residual.alpha={case['alpha']}",
                f"--run.precision={case['precision']}",
                "--init.type=file", f"--init.file={path}", "--weights.q=file", "--weights.k=file",
                "--weights.v=file", f"--weights.file={path}", f"--run.trials={T}", "--output.tokens=all",
                f"--output.file={out}"] + extra_args
        if "mlp_alpha" in case:
            args.append(f"--residual.mlp_alpha={case['mlp_alpha']}")
        subprocess.run(args, check=True)
        with h5py.File(out, "r") as f:
            got = f["tokens"][()]
        mask = mask_matrix(case["mask"], N, 1)
        single = case["precision"] == "float32"
        ft = np.float32 if single else np.float64
        cast = lambda m: None if m is None else np.asarray(m, dtype=ft)  # noqa: E731
        x0, wq, wk, wv, wo, gain, bias = (cast(m) for m in (x0, wq, wk, wv, wo, gain, bias))
        if mlps is not None:
            mlps = [tuple(cast(m) for m in layer) for layer in mlps]
        if slot_norms is not None:
            slot_norms = {k: (cast(g), cast(b)) for k, (g, b) in slot_norms.items()}
        rnd = lambda m: m  # noqa: E731
        tol = 1e-5 if single else 1e-12
        norm = lambda y: normalise(y, case["norm"], ft(eps), gain, bias)  # noqa: E731
        worst = 0.0
        d_qk = ft(2.5)
        for trial in range(T):
            x = rnd(x0[trial].copy())
            for t in range(L + 1):
                err = float(np.abs(got[trial, t] - x).max() / np.abs(x).max())
                worst = max(worst, err)
                if t < L:
                    w = (wq[t], wk[t], wv[t])
                    norms = None
                    if slot_norms:
                        norms = [(lambda y, gb=slot_norms[s]: normalise(y, case["norm"], eps, gb[0][t], gb[1][t]))
                                 for s in ("attn", "attn_out", "mlp", "mlp_out")]
                    x = rnd(block(x, w, mask, d_qk, ft(case["alpha"]), case["position"], norm,
                                  wo=None if wo is None else wo[t], m=None if mlps is None else mlps[t],
                                  act=case.get("act"), norms=norms,
                                  mlp_alpha=None if "mlp_alpha" not in case else ft(case["mlp_alpha"])))
        ok = worst <= tol
        failures += not ok
        print(f"{'ok      ' if ok else 'MISMATCH'} {case}: max relative token difference {worst:.2e} (tolerance {tol:g})")
    print(f"{len(cases) - failures} passed, {failures} failed")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
