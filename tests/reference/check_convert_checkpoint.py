#!/usr/bin/env python3
"""analysis/convert_checkpoint.py on synthetic safetensors checkpoints that this test writes
(GPT-2 names in float32 with a 'transformer.' prefix, BERT names in float64 with 'bert.'), with
attention (weights and biases: attention.bias), MLP (weights and biases) and both LayerNorms
(gains and biases) per layer:
rcsim run with the keys the converter prints (the file's attribute rcsim_keys) must give the
token matrices of an independent NumPy forward pass of the checkpoint's blocks to 1e-12 relative:
  GPT-2 (pre-LN):  h = x + Attn(LN_1(x)),  x' = h + MLP(LN_2(h)),  gelu with tanh, eps 1e-5, causal
  BERT (post-LN):  h = LN_a(x + Attn(x)),  x' = LN_o(h + MLP(h)),   exact gelu,   eps 1e-12
with Attn(x) = sum_h A_h (x W_V[:, h] + b_V[h]) W_O[h, :] + b_O, A_h = softmax((x W_Q,h + b_Q,h)
(x W_K,h + b_K,h)^T / sqrt(d_k)) (unfolded). --fold (the attention-only file with W_V,h W_O,h and
b_V,h W_O,h folded) against the attention-only post-LN forward without residual; a checkpoint with
only one attention bias gets zeros for the others; bad checkpoints exit 2.

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


def layernorm(y, eps=1e-5, g=1.0, b=0.0):
    c = y - y.mean(axis=1, keepdims=True)
    return g * c / np.sqrt(c.var(axis=1, keepdims=True) + eps) + b


def gelu(z, tanh):
    if tanh:
        return 0.5 * z * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (z + 0.044715 * z ** 3)))
    from math import erf
    return 0.5 * z * (1.0 + np.vectorize(erf)(z / np.sqrt(2.0)))


def attend(x, q, k, v, o, causal, b=None):
    """b = (b_q, b_k, b_v, b_o), each of length D (None: no biases)."""
    dk = D // H
    bq, bk, bv, bo = b if b is not None else (np.zeros(D),) * 4
    y = np.zeros_like(x) + bo
    for h in range(H):
        s = slice(h * dk, (h + 1) * dk)
        logits = (x @ q[:, s] + bq[s]) @ (x @ k[:, s] + bk[s]).T / np.sqrt(dk)
        if causal:
            logits = np.where(np.tril(np.ones((N, N), bool)), logits, -np.inf)
        a = np.exp(logits - logits.max(axis=1, keepdims=True))
        a /= a.sum(axis=1, keepdims=True)
        y += a @ (x @ v[:, s] + bv[s]) @ o[s, :]
    return y


def forward_attention_only(x, layers, causal):
    """layers: per layer (W_Q, W_K, W_V, W_O, ...) in the row convention; post-LN, no residual."""
    out = [x]
    for q, k, v, o, *rest in layers:
        x = layernorm(attend(x, q, k, v, o, causal, rest[-1]))
        out.append(x)
    return np.array(out)


def forward(x, layers, kind):
    """The checkpoint's blocks: GPT-2 pre-LN or BERT post-LN, residual weight 1, with the MLP."""
    out = [x]
    for q, k, v, o, w_in, b_in, w_out, b_out, g1, c1, g2, c2, b in layers:
        if kind == "gpt2":
            h = x + attend(layernorm(x, 1e-5, g1, c1), q, k, v, o, True, b)
            x = h + gelu(layernorm(h, 1e-5, g2, c2) @ w_in + b_in, True) @ w_out + b_out
        else:
            h = layernorm(x + attend(x, q, k, v, o, False, b), 1e-12, g1, c1)
            x = layernorm(h + gelu(h @ w_in + b_in, False) @ w_out + b_out, 1e-12, g2, c2)
        out.append(x)
    return np.array(out)


def run(rcsim, keys, work, name, out):
    subprocess.run([rcsim, "run", "--config", "/dev/null", "--quiet", "--force", f"--model.tokens={N}", *keys,
                    "--init.type=file", f"--init.file={os.path.join(work, 'x0.h5')}", f"--run.trials={T}",
                    "--output.tokens=all", f"--output.file={out}"], check=True)
    with h5py.File(out, "r") as f:
        return f["tokens"][()]


def main():
    rcsim, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    rng = np.random.default_rng(7)
    failures = 0
    x0 = rng.standard_normal((T, N, D))
    with h5py.File(os.path.join(work, "x0.h5"), "w") as f:
        f["X0"] = x0
    M = 3 * D  # MLP width
    for kind in ("gpt2", "bert"):
        layers, tensors = [], {}
        pre = "transformer.h" if kind == "gpt2" else "bert.encoder.layer"
        for t in range(L):
            q, k, v, o = (rng.standard_normal((D, D)) * 0.3 for _ in range(4))
            w_in, w_out = rng.standard_normal((D, M)) / np.sqrt(D), rng.standard_normal((M, D)) / np.sqrt(M)
            b_in, b_out = rng.standard_normal(M) * 0.2, rng.standard_normal(D) * 0.2
            g1, g2 = 1 + 0.2 * rng.standard_normal(D), 1 + 0.2 * rng.standard_normal(D)
            c1, c2 = 0.1 * rng.standard_normal(D), 0.1 * rng.standard_normal(D)
            bq, bk, bv, bo = (0.3 * rng.standard_normal(D) for _ in range(4))  # attention biases
            params = [q, k, v, o, w_in, b_in, w_out, b_out, g1, c1, g2, c2, bq, bk, bv, bo]
            if kind == "gpt2":  # float32 weights: the reference uses the same rounded values
                params = [m.astype(np.float32).astype(np.float64) for m in params]
            q, k, v, o, w_in, b_in, w_out, b_out, g1, c1, g2, c2, bq, bk, bv, bo = params
            params = params[:12] + [(bq, bk, bv, bo)]
            if kind == "gpt2":
                tensors[f"{pre}.{t}.attn.c_attn.weight"] = np.hstack([q, k, v])
                tensors[f"{pre}.{t}.attn.c_attn.bias"] = np.concatenate([bq, bk, bv])
                tensors[f"{pre}.{t}.attn.c_proj.weight"] = o
                tensors[f"{pre}.{t}.attn.c_proj.bias"] = bo
                tensors[f"{pre}.{t}.mlp.c_fc.weight"], tensors[f"{pre}.{t}.mlp.c_fc.bias"] = w_in, b_in
                tensors[f"{pre}.{t}.mlp.c_proj.weight"], tensors[f"{pre}.{t}.mlp.c_proj.bias"] = w_out, b_out
                tensors[f"{pre}.{t}.ln_1.weight"], tensors[f"{pre}.{t}.ln_1.bias"] = g1, c1
                tensors[f"{pre}.{t}.ln_2.weight"], tensors[f"{pre}.{t}.ln_2.bias"] = g2, c2
            else:  # torch Linear stores [out, in]
                for name, m in (("attention.self.query", q), ("attention.self.key", k), ("attention.self.value", v),
                                ("attention.output.dense", o), ("intermediate.dense", w_in), ("output.dense", w_out)):
                    tensors[f"{pre}.{t}.{name}.weight"] = m.T
                for name, b in (("attention.self.query", bq), ("attention.self.key", bk), ("attention.self.value", bv),
                                ("attention.output.dense", bo)):
                    tensors[f"{pre}.{t}.{name}.bias"] = b
                tensors[f"{pre}.{t}.intermediate.dense.bias"], tensors[f"{pre}.{t}.output.dense.bias"] = b_in, b_out
                tensors[f"{pre}.{t}.attention.output.LayerNorm.weight"] = g1
                tensors[f"{pre}.{t}.attention.output.LayerNorm.bias"] = c1
                tensors[f"{pre}.{t}.output.LayerNorm.gamma"], tensors[f"{pre}.{t}.output.LayerNorm.beta"] = g2, c2
            layers.append(params)
        ckpt = os.path.join(work, f"{kind}.safetensors")
        write_safetensors(ckpt, tensors, "F32" if kind == "gpt2" else "F64")
        for fold in (False, True):
            weights = os.path.join(work, f"{kind}_weights{'_folded' if fold else ''}.h5")
            subprocess.run([sys.executable, CONVERT, ckpt, weights, f"--heads={H}"] + (["--fold"] if fold else []),
                           check=True, stdout=subprocess.DEVNULL)
            with h5py.File(weights, "r") as f:
                keys = f.attrs["rcsim_keys"].split()
            if fold:  # the attention-only model of the old converter: post-LN, no residual, no MLP
                keys = [k for k in keys if not k.startswith("--mask.type")]
                keys += ["--mask.type=" + ("causal" if kind == "gpt2" else "complete")]
            got = run(rcsim, keys, work, kind, os.path.join(work, f"{kind}_run{'_folded' if fold else ''}.h5"))
            ref = [forward_attention_only(x0[i], layers, kind == "gpt2") if fold else forward(x0[i], layers, kind)
                   for i in range(T)]
            worst = max(np.abs(got[i] - ref[i]).max() / np.abs(ref[i]).max() for i in range(T))
            ok = worst <= 1e-12 and "--attention.bias=true" in keys
            failures += not ok
            print(f"{'ok' if ok else 'MISMATCH'} {kind}{' --fold' if fold else ''}: max relative token difference "
                  f"{worst:.2e} (tolerance 1e-12); keys {' '.join(keys)}")
    # Only the query biases in the checkpoint: /b_Q holds them, /b_K, /b_V, /b_O are zero; without any
    # attention bias no /b_* and no attention.bias key (the files of before).
    only_q = {n: a for n, a in tensors.items()
              if not (n.endswith(".bias") and (".attention.self." in n or ".attention.output.dense." in n))}
    for t in range(L):
        only_q[f"bert.encoder.layer.{t}.attention.self.query.bias"] = np.full(D, 0.5)
    for name, ckpt_tensors in (("one bias", only_q),
                               ("no bias", {n: a for n, a in only_q.items() if "query.bias" not in n})):
        path = os.path.join(work, "biased.safetensors")
        write_safetensors(path, ckpt_tensors, "F64")
        r = subprocess.run([sys.executable, CONVERT, path, os.path.join(work, "biased.h5"), f"--heads={H}"],
                           capture_output=True, text=True)
        with h5py.File(os.path.join(work, "biased.h5"), "r") as f:
            names, keys = sorted(f), f.attrs["rcsim_keys"]
            if name == "one bias":
                ok = (r.returncode == 0 and (f["b_Q"][()] == 0.5).all()
                      and not any(f[b][()].any() for b in ("b_K", "b_V", "b_O")) and "--attention.bias=true" in keys)
            else:
                ok = r.returncode == 0 and not any(n.startswith("b_") and n[2].isupper() for n in names) \
                    and "attention.bias" not in keys
        failures += not ok
        print(f"{'ok' if ok else 'MISMATCH'} {name}: exit {r.returncode}, datasets {names}")
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
