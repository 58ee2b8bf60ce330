#!/usr/bin/env python3
"""analysis/convert_checkpoint.py on synthetic safetensors checkpoints that this test writes
(GPT-2 names in float32 with a 'transformer.' prefix, BERT names in float64 with 'bert.'):
rcsim run on the converted file must give the token matrices of an independent NumPy forward
pass with the unfolded per-head value and output projections, A_h X W_V[:, h] W_O[h, :], to
1e-12 relative; bad checkpoints exit 2.

usage: check_convert_checkpoint.py PATH/TO/rcsim WORKDIR
"""
import json
import os
import struct
import subprocess
import sys

import h5py
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
CONVERT = os.path.join(HERE, "..", "..", "analysis", "convert_checkpoint.py")
N, D, H, L, T = 7, 8, 2, 3, 2


def write_safetensors(path, tensors, dtype):
    """The format by hand: u64 little-endian header size, JSON header, raw little-endian data."""
    header, blobs, offset = {}, [], 0
    for name, a in tensors.items():
        b = np.ascontiguousarray(a, dtype={"F32": "<f4", "F64": "<f8"}[dtype]).tobytes()
        header[name] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [offset, offset + len(b)]}
        blobs.append(b)
        offset += len(b)
    header["__metadata__"] = {"format": "pt"}
    h = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def layernorm(y, eps=1e-5):
    c = y - y.mean(axis=1, keepdims=True)
    return c / np.sqrt(c.var(axis=1, keepdims=True) + eps)


def forward(x, layers, causal):
    """layers: per layer (W_Q, W_K, W_V, W_O) in the row convention; post-LN, no residual."""
    dk = D // H
    out = [x]
    for q, k, v, o in layers:
        y = np.zeros_like(x)
        for h in range(H):
            s = slice(h * dk, (h + 1) * dk)
            logits = (x @ q[:, s]) @ (x @ k[:, s]).T / np.sqrt(dk)
            if causal:
                logits = np.where(np.tril(np.ones((N, N), bool)), logits, -np.inf)
            a = np.exp(logits - logits.max(axis=1, keepdims=True))
            a /= a.sum(axis=1, keepdims=True)
            y += a @ x @ v[:, s] @ o[s, :]
        x = layernorm(y)
        out.append(x)
    return np.array(out)


def main():
    rcsim, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    rng = np.random.default_rng(7)
    failures = 0
    x0 = rng.standard_normal((T, N, D))
    with h5py.File(os.path.join(work, "x0.h5"), "w") as f:
        f["X0"] = x0
    for kind in ("gpt2", "bert"):
        layers, tensors = [], {}
        for t in range(L):
            q, k, v, o = (rng.standard_normal((D, D)) * 0.3 for _ in range(4))
            if kind == "gpt2":  # float32 weights: the reference uses the same rounded values
                q, k, v, o = (m.astype(np.float32).astype(np.float64) for m in (q, k, v, o))
                tensors[f"transformer.h.{t}.attn.c_attn.weight"] = np.hstack([q, k, v])
                tensors[f"transformer.h.{t}.attn.c_attn.bias"] = np.zeros(3 * D)
                tensors[f"transformer.h.{t}.attn.c_proj.weight"] = o
            else:  # torch Linear stores [out, in]
                for name, m in (("self.query", q), ("self.key", k), ("self.value", v), ("output.dense", o)):
                    tensors[f"bert.encoder.layer.{t}.attention.{name}.weight"] = m.T
            layers.append((q, k, v, o))
        ckpt = os.path.join(work, f"{kind}.safetensors")
        write_safetensors(ckpt, tensors, "F32" if kind == "gpt2" else "F64")
        weights = os.path.join(work, f"{kind}_weights.h5")
        subprocess.run([sys.executable, CONVERT, ckpt, weights, f"--heads={H}"], check=True)
        out = os.path.join(work, f"{kind}_run.h5")
        causal = kind == "gpt2"
        subprocess.run([rcsim, "run", "--config", "/dev/null", "--quiet", "--force", f"--model.tokens={N}",
                        f"--model.dim={D}", f"--model.heads={H}", f"--model.key_dim={D // H}", f"--model.layers={L}",
                        f"--mask.type={'causal' if causal else 'complete'}", "--norm.type=layernorm",
                        "--init.type=file", f"--init.file={os.path.join(work, 'x0.h5')}", "--weights.q=file",
                        "--weights.k=file", "--weights.v=file", f"--weights.file={weights}", f"--run.trials={T}",
                        "--output.tokens=all", f"--output.file={out}"], check=True)
        with h5py.File(out, "r") as f:
            got = f["tokens"][()]
        worst = max(np.abs(got[i] - ref).max() / np.abs(ref).max()
                    for i in range(T) for ref in [forward(x0[i], layers, causal)])
        ok = worst <= 1e-12
        failures += not ok
        print(f"{'ok' if ok else 'MISMATCH'} {kind}: max relative token difference {worst:.2e} (tolerance 1e-12)")
    # Bad input: a checkpoint without attention tensors, and heads that do not divide d.
    bad = os.path.join(work, "bad.safetensors")
    write_safetensors(bad, {"wte.weight": np.ones((3, D))}, "F32")
    for args, what in (([bad, os.path.join(work, "x.h5"), "--heads=2"], "no attention tensors"),
                       ([os.path.join(work, "gpt2.safetensors"), os.path.join(work, "x.h5"), "--heads=3"], "H = 3, d = 8"),
                       ([os.path.join(work, "missing.safetensors"), os.path.join(work, "x.h5"), "--heads=2"], "missing file")):
        r = subprocess.run([sys.executable, CONVERT, *args], capture_output=True, text=True)
        ok = r.returncode == 2 and "convert_checkpoint:" in r.stderr and not os.path.exists(os.path.join(work, "x.h5"))
        failures += not ok
        print(f"{'ok' if ok else 'MISMATCH'} bad input ({what}): exit {r.returncode}, {r.stderr.strip()}")
    print(f"{'0 failed' if not failures else f'{failures} failed'}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
