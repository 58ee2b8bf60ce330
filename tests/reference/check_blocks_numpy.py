#!/usr/bin/env python3
"""Independent check of the block structures (norm.position = post | pre | peri, with and without
the residual) and of run.precision = float32 against a NumPy implementation.

Random inputs and weights are written to an HDF5 file, `rcsim run --output.tokens=all` is run on
them, and the stored token matrices X(t) are compared with NumPy's layer by layer:
  post: N(X + a A(X))   (a = 0: N(A(X)))
  pre:  X + a A(N(X))   (a = 0: A(N(X)))
  peri: X + a N(A(N(X)))  (a = 0: N(A(N(X))))
with A(X) = sum_h softmax_mask(X W_Q,h (X W_K,h)^T / sqrt(d_QK)) X W_V,h. Agreement: every layer's
max |difference| <= 1e-12 max |X(t)| (float64). For float32, NumPy rounds the tokens to float32 at
the input and after every layer; a different float64 summation order can move a value across a
float32 rounding boundary, so agreement is 1e-6 max |X(t)| there (float32 epsilon is 1.2e-7).

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


def attention(x, wq, wk, wv, mask, d_qk):
    y = np.zeros_like(x)
    for h in range(wq.shape[0]):
        s = (x @ wq[h]) @ (x @ wk[h]).T / np.sqrt(d_qk)
        s = np.where(mask, s, -np.inf)
        a = np.exp(s - s.max(axis=1, keepdims=True))
        a /= a.sum(axis=1, keepdims=True)
        y += a @ x @ wv[h]
    return y


def block(x, w, mask, d_qk, alpha, position, norm):
    wq, wk, wv = w
    if position == "post":
        y = attention(x, wq, wk, wv, mask, d_qk)
        return norm(x + alpha * y if alpha != 0 else y)
    y = attention(norm(x), wq, wk, wv, mask, d_qk)
    if position == "peri":
        y = norm(y)
    return x + alpha * y if alpha != 0 else y


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
    failures = 0
    for ci, case in enumerate(cases):
        H = case["heads"]
        path = os.path.join(work, f"inputs{ci}.h5")
        x0, wq, wk, wv = write_random_inputs(path, rng, (T, N, D, DK, L, H))
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
                f"--output.file={out}"]
        subprocess.run(args, check=True)
        with h5py.File(out, "r") as f:
            got = f["tokens"][()]
        mask = mask_matrix(case["mask"], N, 1)
        single = case["precision"] == "float32"
        rnd = (lambda m: m.astype(np.float32).astype(np.float64)) if single else (lambda m: m)
        tol = 1e-6 if single else 1e-12
        norm = lambda y: normalise(y, case["norm"], eps, gain, bias)  # noqa: E731
        worst = 0.0
        for trial in range(T):
            x = rnd(x0[trial].copy())
            for t in range(L + 1):
                err = np.abs(got[trial, t] - x).max() / np.abs(x).max()
                worst = max(worst, err)
                if t < L:
                    w = (wq[t], wk[t], wv[t])
                    x = rnd(block(x, w, mask, 2.5, case["alpha"], case["position"], norm))
        ok = worst <= tol
        failures += not ok
        print(f"{'ok      ' if ok else 'MISMATCH'} {case}: max relative token difference {worst:.2e} (tolerance {tol:g})")
    print(f"{len(cases) - failures} passed, {failures} failed")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
