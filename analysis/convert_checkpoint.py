#!/usr/bin/env python3
"""Convert the attention weights of a pretrained checkpoint (safetensors, GPT-2 or BERT tensor
names) into an rcsim `weights.file`: /W_Q, /W_K [L, H, d, d_k] and /W_V [L, H, d, d].

rcsim's value map of head h is d x d (Y = sum_h A_h X W_V,h), so the converter folds each head's
value and output projections, W_V,h W_O,h (d x d_v times d_v x d), which is exact for attention
without biases. Not carried over (rcsim has no place for them yet): the biases of
Q, K, V and the output projection, the LayerNorm gains and biases, the MLP, the embeddings.
Row convention as in rcsim (a token x maps to x W):
  GPT-2 (Conv1D, x W): h.{l}.attn.c_attn.weight [d, 3d] = [W_Q | W_K | W_V], h.{l}.attn.c_proj.weight [d, d]
  BERT (Linear, x W^T): encoder.layer.{l}.attention.self.{query,key,value}.weight [d, d] and
                        encoder.layer.{l}.attention.output.dense.weight [d, d] (stored [out, in])
Any prefix before these names (transformer., bert., ...) is accepted. Head h owns the columns
h d_k .. (h+1) d_k - 1 of W_Q, W_K, W_V and the same rows of W_O, d_k = d / H. Then run e.g.
  rcsim run --model.dim=768 --model.heads=12 --model.key_dim=64 --model.layers=12 --mask.type=causal
            --weights.q=file --weights.k=file --weights.v=file --weights.file=OUT.h5 --norm.type=layernorm

usage: convert_checkpoint.py CHECKPOINT.safetensors OUT.h5 --heads H [--kind gpt2|bert]
Exit status 2 for bad input (message names the file or tensor), 1 for other failures.
"""
import argparse
import json
import os
import re
import struct
import sys

import numpy as np

DTYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16}


class BadInput(Exception):
    pass


def read_safetensors(path):
    """name -> float64 array. Format: u64 little-endian header size, JSON header, raw data."""
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise BadInput(f"'{path}': too short for a safetensors file")
    (n,) = struct.unpack("<Q", raw[:8])
    if 8 + n > len(raw):
        raise BadInput(f"'{path}': header size {n} exceeds the file")
    try:
        header = json.loads(raw[8:8 + n])
    except ValueError as e:
        raise BadInput(f"'{path}': header is not JSON ({e})")
    data = raw[8 + n:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype, shape, (b, e) = info["dtype"], info["shape"], info["data_offsets"]
        if e > len(data) or b > e:
            raise BadInput(f"'{path}': tensor {name} lies outside the data")
        buf = data[b:e]
        if dtype == "BF16":  # the upper half of a float32
            a = (np.frombuffer(buf, "<u2").astype(np.uint32) << 16).view(np.float32)
        elif dtype in DTYPES:
            a = np.frombuffer(buf, np.dtype(DTYPES[dtype]).newbyteorder("<"))
        else:
            continue  # integer tensors (position ids, ...) are not weights we read
        if a.size != int(np.prod(shape)):
            raise BadInput(f"'{path}': tensor {name} has {a.size} values for shape {shape}")
        out[name] = a.reshape(shape).astype(np.float64)
    return out


def find(tensors, pattern):
    """layer -> tensor for names ending in `pattern` (a regex with one group: the layer)."""
    found = {}
    for name, a in tensors.items():
        m = re.search(pattern + "$", name)
        if m:
            found[int(m.group(1))] = a
    return [found[i] for i in sorted(found)] if found and sorted(found) == list(range(len(found))) else None


def attention_weights(tensors, kind):
    """Per layer (W_Q, W_K, W_V, W_O), each in the row convention x W, from GPT-2 or BERT names."""
    if kind in ("gpt2", "auto"):
        qkv = find(tensors, r"h\.(\d+)\.attn\.c_attn\.weight")
        proj = find(tensors, r"h\.(\d+)\.attn\.c_proj\.weight")
        if qkv and proj and len(qkv) == len(proj):
            out = []
            for w, o in zip(qkv, proj):
                d = w.shape[0]
                if w.shape != (d, 3 * d) or o.shape != (d, d):
                    raise BadInput(f"GPT-2 c_attn must be [d, 3d] and c_proj [d, d], got {w.shape} and {o.shape}")
                out.append((w[:, :d], w[:, d:2 * d], w[:, 2 * d:], o))
            return out
    if kind in ("bert", "auto"):
        parts = [find(tensors, r"layer\.(\d+)\.attention\.self\.%s\.weight" % n) for n in ("query", "key", "value")]
        dense = find(tensors, r"layer\.(\d+)\.attention\.output\.dense\.weight")
        if all(parts) and dense and len({len(p) for p in parts} | {len(dense)}) == 1:
            return [(q.T, k.T, v.T, o.T) for q, k, v, o in zip(*parts, dense)]
    raise BadInput(f"no complete set of {'GPT-2 or BERT' if kind == 'auto' else kind} attention tensors "
                   "(h.L.attn.c_attn/c_proj.weight or layer.L.attention.self.query/key/value.weight and "
                   "layer.L.attention.output.dense.weight, for layers 0, 1, ...)")


def convert(tensors, heads, kind="auto"):
    """Arrays W_Q, W_K [L, H, d, d_k] and W_V [L, H, d, d] (W_V,h W_O,h folded)."""
    layers = attention_weights(tensors, kind)
    d = layers[0][0].shape[0]
    if heads < 1 or d % heads:
        raise BadInput(f"--heads {heads} must be >= 1 and divide d = {d}")
    dk = d // heads
    WQ, WK, WV = (np.empty((len(layers), heads, d, n)) for n in (dk, dk, d))
    for t, (q, k, v, o) in enumerate(layers):
        for h in range(heads):
            s = slice(h * dk, (h + 1) * dk)
            WQ[t, h], WK[t, h], WV[t, h] = q[:, s], k[:, s], v[:, s] @ o[s, :]
    return WQ, WK, WV


def write(out, WQ, WK, WV, source):
    import h5py
    tmp = out + ".tmp"
    with h5py.File(tmp, "w") as f:
        f["W_Q"], f["W_K"], f["W_V"] = WQ, WK, WV
        f.attrs["source"] = os.path.abspath(source)
        f.attrs["note"] = "W_V[l, h] = W_V,h W_O,h folded; biases, LayerNorm parameters and MLP not converted"
    with h5py.File(tmp, "r") as f:  # verify what was written before it replaces anything
        if not all(np.array_equal(f[k][()], a) for k, a in (("W_Q", WQ), ("W_K", WK), ("W_V", WV))):
            raise OSError(f"'{tmp}': read-back differs from what was written")
    os.replace(tmp, out)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("checkpoint")
    p.add_argument("out")
    p.add_argument("--heads", type=int, required=True, help="number of attention heads (config.json: n_head)")
    p.add_argument("--kind", choices=["auto", "gpt2", "bert"], default="auto")
    a = p.parse_args(argv)
    try:
        WQ, WK, WV = convert(read_safetensors(a.checkpoint), a.heads, a.kind)
    except (BadInput, OSError) as e:
        print(f"convert_checkpoint: {e}", file=sys.stderr)
        return 2
    write(a.out, WQ, WK, WV, a.checkpoint)
    L, H, d, dk = WQ.shape
    print(f"wrote {a.out}: L = {L}, H = {H}, d = {d}, d_k = {dk}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
