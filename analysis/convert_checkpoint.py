#!/usr/bin/env python3
"""Convert the transformer blocks of a GPT-2 or BERT safetensors checkpoint into an rcsim weights.file.

The datasets written, unfolded (default):
  /W_Q, /W_K, /W_V [L, H, d, d_k]   per-head query, key and value maps (d_k = d_v = d / H)
  /W_O [L, H, d_k, d]               per-head rows of the output projection (model.value_dim = d_k)
  /W_in [L, d, m], /b_in [L, m], /W_out [L, m, d], /b_out [L, d]   the MLP (mlp.width = m)
  /norm_attn_gain, /norm_attn_bias [L, d]   the attention sub-block's LayerNorm
  /norm_mlp_gain, /norm_mlp_bias [L, d]     the MLP sub-block's LayerNorm (norm.params = file)
  /b_Q, /b_K, /b_V [L, H, d_k], /b_O [L, d]   the attention biases (attention.bias = true; written
                                            when the checkpoint has any: GPT-2's c_attn.bias split
                                            into q, k, v and c_proj.bias, BERT's query/key/value
                                            and attention.output.dense biases; a missing one is 0)
GPT-2 is pre-LN (ln_1 before attention, ln_2 before the MLP, residual weight 1, gelu_tanh);
BERT post-LN (attention.output.LayerNorm after attention + residual, output.LayerNorm after the
MLP + residual, exact gelu). With --fold the old attention-only file is written instead: /W_V
[L, H, d, d] = W_V,h W_O,h folded, no /W_O (with biases /b_V [L, H, d] = b_V,h W_O,h, exact too);
the MLP and LayerNorm datasets are written as well (a run may ignore them).
Not carried over (rcsim has no place for them): GPT-2's final ln_f, the embeddings.
Row convention as in rcsim (a token x maps to x W):
  GPT-2 (Conv1D, x W): h.{l}.attn.c_attn.weight [d, 3d] = [W_Q | W_K | W_V], h.{l}.attn.c_proj.weight
        [d, d], h.{l}.mlp.c_fc.weight [d, m] (+ .bias), h.{l}.mlp.c_proj.weight [m, d] (+ .bias),
        h.{l}.ln_1.{weight,bias}, h.{l}.ln_2.{weight,bias}
  BERT (Linear, x W^T, stored [out, in]): encoder.layer.{l}.attention.self.{query,key,value}.weight,
        layer.{l}.attention.output.dense.weight, layer.{l}.attention.output.LayerNorm.{weight,bias},
        layer.{l}.intermediate.dense.{weight,bias}, layer.{l}.output.dense.{weight,bias},
        layer.{l}.output.LayerNorm.{weight,bias}  (gamma/beta accepted for weight/bias)
Any prefix before these names (transformer., bert., ...) is accepted. Head h owns the columns
h d_k .. (h+1) d_k - 1 of W_Q, W_K, W_V and the same rows of W_O. The rcsim keys of the
architecture are printed and stored in the file's attribute `rcsim_keys`.

usage: convert_checkpoint.py CHECKPOINT.safetensors OUT.h5 --heads H [--kind gpt2|bert] [--fold] [--force]
Every tensor is checked before anything is written: header keys unique, data offsets inside the
data and disjoint, values finite (in the checkpoint and after conversion). OUT is written through
an exclusive temporary in its directory and renamed (rcsim.figures.atomic_writer): never the
checkpoint itself, never through a link or over anything that is not a regular file, and an
existing file that this converter did not write (no attribute rcsim_keys) only with --force.
Exit status 2 for bad input (one line naming the file or tensor), 1 for other failures (a full disk).
"""
import json
import os
import re
import struct
import sys

import numpy as np

import script_setup  # noqa: F401  (the package rcsim of this checkout: analysis/script_setup.py)
from rcsim.command import Parser, note_input, run

DTYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16}


class BadInput(Exception):
    pass


def read_safetensors(path):
    """name -> float64 array. Format: u64 little-endian header size, JSON header, raw data."""
    with open(path, "rb") as f:
        raw = f.read()
    note_input(path)
    if len(raw) < 8:
        raise BadInput(f"'{path}': too short for a safetensors file")
    (n,) = struct.unpack("<Q", raw[:8])
    if 8 + n > len(raw):
        raise BadInput(f"'{path}': header size {n} exceeds the file")
    def unique(pairs):  # json's object_pairs_hook: a key given twice would silently keep the last
        seen = set()
        for key, _ in pairs:
            if key in seen:
                raise BadInput(f"'{path}': the header has the key {key!r} twice in one object; keys must be unique")
            seen.add(key)
        return dict(pairs)
    try:
        header = json.loads(raw[8:8 + n], object_pairs_hook=unique)
    except ValueError as e:
        raise BadInput(f"'{path}': header is not JSON ({e})")
    data = raw[8 + n:]
    if not isinstance(header, dict):
        raise BadInput(f"'{path}': header is a JSON {type(header).__name__}, expected an object of tensors")
    entries = {name: tensor_entry(path, name, info) for name, info in header.items() if name != "__metadata__"}
    for name, (_, _, (b, e)) in entries.items():
        if e > len(data) or b > e:
            raise BadInput(f"'{path}': tensor {name} lies outside the data (bytes {b} .. {e}, the data has {len(data)})")
    spans = sorted((b, e, name) for name, (_, _, (b, e)) in entries.items() if e > b)
    for (b0, e0, n0), (b1, e1, n1) in zip(spans, spans[1:]):
        if b1 < e0:
            raise BadInput(f"'{path}': tensors {n0} (bytes {b0} .. {e0}) and {n1} (bytes {b1} .. {e1}) overlap; "
                           "data offsets must be disjoint")
    out = {}
    for name, (dtype, shape, (b, e)) in entries.items():
        buf = data[b:e]
        if dtype in DTYPES and len(buf) % np.dtype(DTYPES[dtype]).itemsize or dtype == "BF16" and len(buf) % 2:
            raise BadInput(f"'{path}': tensor {name} has {len(buf)} bytes, not a whole number of {dtype} values")
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


def tensor_entry(path, name, info):
    """(dtype, shape, (begin, end)) of one header entry, each checked: an object with a string
    dtype, a list of whole numbers >= 0 as shape and two whole numbers 0 <= begin <= end."""
    def whole(x):
        return isinstance(x, int) and not isinstance(x, bool) and x >= 0
    if not isinstance(info, dict):
        raise BadInput(f"'{path}': tensor {name}: header entry is a JSON {type(info).__name__}, expected an object "
                       "with dtype, shape and data_offsets")
    for key in ("dtype", "shape", "data_offsets"):
        if key not in info:
            raise BadInput(f"'{path}': tensor {name}: header entry has no '{key}'")
    dtype, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
    if not isinstance(dtype, str):
        raise BadInput(f"'{path}': tensor {name}: dtype {dtype!r}, expected a string such as F32")
    if not isinstance(shape, list) or not all(whole(x) for x in shape):
        raise BadInput(f"'{path}': tensor {name}: shape {shape!r}, expected a list of whole numbers >= 0")
    if not isinstance(offsets, list) or len(offsets) != 2 or not all(whole(x) for x in offsets):
        raise BadInput(f"'{path}': tensor {name}: data_offsets {offsets!r}, expected [begin, end], whole numbers >= 0")
    return dtype, shape, tuple(offsets)


def require_rank(name, a, rank):
    if a.ndim != rank:
        raise BadInput(f"tensor {name}: shape {list(a.shape)}, expected {rank} axes")
    return a


def require_finite(what, a):
    """`a`, or BadInput naming `what` and the first NaN or inf entry."""
    bad = ~np.isfinite(a)
    if bad.any():
        index = tuple(int(i) for i in np.argwhere(bad)[0])
        raise BadInput(f"{what}: the non-finite value {a[index]} at index {list(index)}; weights must be finite")
    return a


def layer_map(tensors, pattern):
    """{layer: tensor} for names ending in `pattern` (a regex with one group: the layer); every
    tensor the conversion uses comes through here and is checked finite."""
    found = {}
    for name, a in tensors.items():
        m = re.search(pattern + "$", name)
        if m:
            found[int(m.group(1))] = require_finite(f"tensor {name}", a)
    return found


def find(tensors, pattern):
    """The tensors of layers 0, 1, ... for `pattern` as a list; None unless they are exactly those."""
    found = layer_map(tensors, pattern)
    return [found[i] for i in sorted(found)] if found and sorted(found) == list(range(len(found))) else None


def tensor_name(pattern, layer):
    """The tensor name `pattern` matches at `layer` (the first of alternatives: weight for weight|gamma)."""
    name = re.sub(r"\(\?:([^|)]*)[^)]*\)", r"\1", pattern.replace("(\\d+)", str(layer)))
    return name.replace("\\.", ".")


def missing_tensors(tensors, patterns, layers):
    """The names of the tensors of `patterns` that layers 0 .. layers - 1 lack, as one text (None: none)."""
    maps = [layer_map(tensors, p) for p in patterns]
    missing = [tensor_name(p, layer) for layer in range(layers) for p, m in zip(patterns, maps) if layer not in m]
    if not missing:
        return None
    return ", ".join(missing[:6]) + (f" and {len(missing) - 6} more" if len(missing) > 6 else "")


GPT2_ATTENTION = (r"h\.(\d+)\.attn\.c_attn\.weight", r"h\.(\d+)\.attn\.c_proj\.weight")
BERT_ATTENTION = tuple(r"layer\.(\d+)\.attention\.%s\.weight" % n
                       for n in ("self\.query", "self\.key", "self\.value", "output\.dense"))


def incomplete_attention(tensors, kind):
    """A BadInput naming the missing tensors and their layers of the family (GPT-2 or BERT) whose
    attention tensors are present in part, or None."""
    for family, patterns in (("gpt2", GPT2_ATTENTION), ("bert", BERT_ATTENTION)):
        if kind not in (family, "auto"):
            continue
        seen = set().union(*(layer_map(tensors, p) for p in patterns))
        if seen:
            layers = max(seen) + 1
            missing = missing_tensors(tensors, patterns, layers)
            if missing:
                return BadInput(f"the {'GPT-2' if family == 'gpt2' else 'BERT'} attention tensors of layers 0 .. "
                                f"{layers - 1} (the checkpoint has some of layer{'s' if len(seen) > 1 else ''} "
                                f"{', '.join(map(str, sorted(seen)))}) are incomplete: {missing} missing")
    return None


def find_any(tensors, patterns):
    for pattern in patterns:
        found = find(tensors, pattern)
        if found:
            return found
    return None


def attention_weights(tensors, kind):
    """('gpt2' | 'bert', per layer (W_Q, W_K, W_V, W_O) in the row convention x W, per layer the
    attention biases (b_Q, b_K, b_V, b_O) as length-d vectors (None for a bias the checkpoint lacks),
    or None if it has no attention bias at all)."""
    if kind in ("gpt2", "auto"):
        qkv = find(tensors, r"h\.(\d+)\.attn\.c_attn\.weight")
        proj = find(tensors, r"h\.(\d+)\.attn\.c_proj\.weight")
        if qkv and proj and len(qkv) == len(proj):
            out = []
            for layer, (w, o) in enumerate(zip(qkv, proj)):
                require_rank(f"h.{layer}.attn.c_attn.weight", w, 2)
                require_rank(f"h.{layer}.attn.c_proj.weight", o, 2)
                d = w.shape[0]
                if w.shape != (d, 3 * d) or o.shape != (d, d) or d != qkv[0].shape[0]:
                    raise BadInput(f"tensors h.{layer}.attn.c_attn.weight and c_proj.weight: shapes {list(w.shape)} and "
                                   f"{list(o.shape)}, expected [d, 3d] and [d, d] (d = {qkv[0].shape[0]} as in layer 0)")
                out.append((w[:, :d], w[:, d:2 * d], w[:, 2 * d:], o))
            qkv_b = find(tensors, r"h\.(\d+)\.attn\.c_attn\.bias")
            proj_b = find(tensors, r"h\.(\d+)\.attn\.c_proj\.bias")
            biases = None
            if qkv_b or proj_b:
                d = qkv[0].shape[0]
                biases = []
                for layer in range(len(qkv)):
                    b = bias_at(qkv_b, layer, f"h.{layer}.attn.c_attn.bias", 3 * d)
                    o = bias_at(proj_b, layer, f"h.{layer}.attn.c_proj.bias", d)
                    biases.append((None, None, None, o) if b is None else (b[:d], b[d:2 * d], b[2 * d:], o))
            return "gpt2", out, biases
    if kind in ("bert", "auto"):
        parts = [find(tensors, r"layer\.(\d+)\.attention\.self\.%s\.weight" % n) for n in ("query", "key", "value")]
        dense = find(tensors, r"layer\.(\d+)\.attention\.output\.dense\.weight")
        if all(parts) and dense and len({len(p) for p in parts} | {len(dense)}) == 1:
            d = require_rank("layer.0.attention.self.query.weight", parts[0][0], 2).shape[0]
            names = ["attention.self.query", "attention.self.key", "attention.self.value", "attention.output.dense"]
            found = [find(tensors, r"layer\.(\d+)\." + n.replace(".", r"\.") + r"\.bias") for n in names]
            biases = None
            if any(found):
                biases = [tuple(bias_at(f, layer, f"layer.{layer}.{n}.bias", d) for f, n in zip(found, names))
                          for layer in range(len(dense))]
            for layer, group in enumerate(zip(*parts, dense)):
                for what, a in zip(("attention.self.query", "attention.self.key", "attention.self.value",
                                    "attention.output.dense"), group):
                    if require_rank(f"layer.{layer}.{what}.weight", a, 2).shape != (d, d):
                        raise BadInput(f"tensor layer.{layer}.{what}.weight: shape {list(a.shape)}, expected "
                                       f"[{d}, {d}] (d as in layer 0's query)")
            return "bert", [(q.T, k.T, v.T, o.T) for q, k, v, o in zip(*parts, dense)], biases
    raise incomplete_attention(tensors, kind) or BadInput(
        f"no complete set of {'GPT-2 or BERT' if kind == 'auto' else kind} attention tensors "
                   "(h.L.attn.c_attn/c_proj.weight or layer.L.attention.self.query/key/value.weight and "
                   "layer.L.attention.output.dense.weight, for layers 0, 1, ...)")


def bias_at(found, layer, name, size):
    """Layer `layer`'s bias from find()'s list (None if the checkpoint has none), checked: [size]."""
    if not found:
        return None
    if layer >= len(found):
        raise BadInput(f"tensor {name}: missing (the attention has more layers than its biases)")
    if found[layer].shape != (size,):
        raise BadInput(f"tensor {name}: shape {list(found[layer].shape)}, expected [{size}]")
    return found[layer]


def mlp_and_norms(tensors, kind, layers, d):
    """The datasets of the MLP and of the two LayerNorms per layer (those the checkpoint has)."""
    w, b = r"\.(?:weight|gamma)", r"\.(?:bias|beta)"
    if kind == "gpt2":
        names = {"W_in": (r"h\.(\d+)\.mlp\.c_fc\.weight", False), "b_in": (r"h\.(\d+)\.mlp\.c_fc\.bias", False),
                 "W_out": (r"h\.(\d+)\.mlp\.c_proj\.weight", False), "b_out": (r"h\.(\d+)\.mlp\.c_proj\.bias", False),
                 "norm_attn_gain": (r"h\.(\d+)\.ln_1" + w, False), "norm_attn_bias": (r"h\.(\d+)\.ln_1" + b, False),
                 "norm_mlp_gain": (r"h\.(\d+)\.ln_2" + w, False), "norm_mlp_bias": (r"h\.(\d+)\.ln_2" + b, False)}
    else:
        names = {"W_in": (r"layer\.(\d+)\.intermediate\.dense\.weight", True),
                 "b_in": (r"layer\.(\d+)\.intermediate\.dense\.bias", False),
                 "W_out": (r"layer\.(\d+)\.output\.dense\.weight", True),
                 "b_out": (r"layer\.(\d+)\.output\.dense\.bias", False),
                 "norm_attn_gain": (r"layer\.(\d+)\.attention\.output\.LayerNorm" + w, False),
                 "norm_attn_bias": (r"layer\.(\d+)\.attention\.output\.LayerNorm" + b, False),
                 "norm_mlp_gain": (r"layer\.(\d+)\.output\.LayerNorm" + w, False),
                 "norm_mlp_bias": (r"layer\.(\d+)\.output\.LayerNorm" + b, False)}
    out = {}
    for key, (pattern, transpose) in names.items():
        present = layer_map(tensors, pattern)
        if not present:
            continue
        extra = sorted(set(present) - set(range(layers)))
        if extra:
            raise BadInput(f"tensor {tensor_name(pattern, extra[0])} ({key}): layer {extra[0]}, but the attention "
                           f"has layers 0 .. {layers - 1}")
        missing = missing_tensors(tensors, (pattern,), layers)
        if missing:
            raise BadInput(f"{key}: {missing} missing (the checkpoint has layer{'s' if len(present) > 1 else ''} "
                           f"{', '.join(map(str, sorted(present)))} of it; the attention has layers 0 .. {layers - 1})")
        found = [present[i] for i in range(layers)]
        rank = 2 if key in ("W_in", "W_out") else 1
        for layer, a in enumerate(found):
            if a.ndim != rank or a.shape != found[0].shape:
                readable = pattern.replace("\\.", ".").replace("(\\d+)", str(layer))
                raise BadInput(f"tensor {readable} ({key}): shape {list(a.shape)}, expected "
                               f"{rank} axes and the shape of layer 0, {list(found[0].shape)}")
        out[key] = np.array([a.T if transpose else a for a in found])
    if ("W_in" in out) != ("W_out" in out):
        raise BadInput("the MLP needs both its input and output weights (c_fc and c_proj, or intermediate.dense "
                       "and output.dense)")
    if "W_in" in out:
        m = out["W_in"].shape[2]
        want = {"W_in": (layers, d, m), "W_out": (layers, m, d), "b_in": (layers, m), "b_out": (layers, d)}
        for key, shape in want.items():
            if key in out and out[key].shape != shape:
                raise BadInput(f"{key}: shape {out[key].shape}, expected {shape} (d = {d}, m = {m})")
    for key in [k for k in out if k.startswith("norm_")]:
        if out[key].shape != (layers, d):
            raise BadInput(f"{key}: shape {out[key].shape}, expected {(layers, d)}")
    return out


def convert(tensors, heads, kind="auto", fold=False):
    """(datasets name -> array, architecture 'gpt2' | 'bert')."""
    arch, layers, biases = attention_weights(tensors, kind)
    d = layers[0][0].shape[0]
    if heads < 1 or d % heads:
        raise BadInput(f"--heads {heads} must be >= 1 and divide d = {d}")
    dk = d // heads
    L = len(layers)
    WQ, WK = np.empty((L, heads, d, dk)), np.empty((L, heads, d, dk))
    WV = np.empty((L, heads, d, d if fold else dk))
    WO = np.empty((L, heads, dk, d))
    for t, (q, k, v, o) in enumerate(layers):
        for h in range(heads):
            s = slice(h * dk, (h + 1) * dk)
            WQ[t, h], WK[t, h] = q[:, s], k[:, s]
            if fold:
                WV[t, h] = v[:, s] @ o[s, :]
            else:
                WV[t, h], WO[t, h] = v[:, s], o[s, :]
    out = {"W_Q": WQ, "W_K": WK, "W_V": WV}
    if not fold:
        out["W_O"] = WO
    if biases is not None:  # attention.bias: head h owns entries h d_k .. (h+1) d_k - 1 of b_q, b_k, b_v
        zero = np.zeros(d)
        bq, bk, bv, bo = (np.array([zero if b[i] is None else b[i] for b in biases]) for i in range(4))
        out["b_Q"], out["b_K"] = bq.reshape(L, heads, dk), bk.reshape(L, heads, dk)
        if fold:  # V_h W_O,h = (x W_v,h + b_v,h) W_o,h: b_V[l, h] = b_v,h W_o,h
            out["b_V"] = np.array([[bv[t, h * dk:(h + 1) * dk] @ layers[t][3][h * dk:(h + 1) * dk, :]
                                    for h in range(heads)] for t in range(L)])
        else:
            out["b_V"] = bv.reshape(L, heads, dk)
        out["b_O"] = bo
    out.update(mlp_and_norms(tensors, arch, L, d))
    for name, a in out.items():  # finite inputs can still overflow (the folded W_V,h W_O,h)
        require_finite(f"dataset /{name} after conversion", a)
    return out, arch


def rcsim_keys(data, arch, fold, out):
    """The rcsim keys that run the converted blocks (weights.file = out) as the architecture does."""
    L, H, d, dk = data["W_Q"].shape
    keys = [f"--weights.file={os.path.abspath(out)}", f"--model.dim={d}", f"--model.heads={H}", f"--model.key_dim={dk}", f"--model.layers={L}",
            "--weights.q=file", "--weights.k=file", "--weights.v=file", "--norm.type=layernorm"]
    if "b_Q" in data:
        keys += ["--attention.bias=true"]
    if fold:
        return keys + ["--mask.type=" + ("causal" if arch == "gpt2" else "complete")]
    keys += [f"--model.value_dim={dk}", "--weights.o=file", "--residual.alpha=1",
             "--norm.position=" + ("pre" if arch == "gpt2" else "post"),
             "--norm.eps=" + ("1e-05" if arch == "gpt2" else "1e-12"),
             "--mask.type=" + ("causal" if arch == "gpt2" else "complete")]
    if "W_in" in data:
        keys += [f"--mlp.width={data['W_in'].shape[2]}", "--weights.mlp=file",
                 "--mlp.activation=" + ("gelu_tanh" if arch == "gpt2" else "gelu"),
                 "--mlp.bias=" + ("true" if "b_in" in data and "b_out" in data else "false")]
    # norm.params = file reads the attention sub-block's LayerNorm, and the MLP's if there is an MLP.
    sub_blocks = ("attn", "mlp") if "W_in" in data else ("attn",)
    if all(f"norm_{s}_{p}" in data for s in sub_blocks for p in ("gain", "bias")):
        keys += ["--norm.params=file"]
    return keys


def check_output(out, checkpoint, force):
    """BadInput unless `out` may be written: not the checkpoint itself (even with --force), and
    an existing regular file only if this converter wrote it (attribute rcsim_keys) or with --force.
    Anything that is not a regular file is refused by atomic_writer, --force or not."""
    import h5py
    if not os.path.lexists(out):
        return
    if os.path.exists(out) and os.path.exists(checkpoint) and os.path.samefile(out, checkpoint):
        raise BadInput(f"'{out}': the output is the checkpoint itself; choose another output file")
    if not os.path.isfile(out) or os.path.islink(out) or force:
        return
    try:
        with h5py.File(out, "r") as f:
            ours = "rcsim_keys" in f.attrs
    except (OSError, ValueError):
        ours = False
    if not ours:
        raise BadInput(f"'{out}': exists and was not written by convert_checkpoint (no attribute rcsim_keys); "
                       "rerun with --force to replace it, or choose another output file")


def write(out, data, source, keys, note):
    """The weights file, written through rcsim's one writer (rcsim.figures.write_hdf5: made in
    memory, then an exclusive temporary in out's directory, flushed, fsynced, closed with its
    errors checked, renamed)."""
    from rcsim.figures import write_hdf5
    write_hdf5(out, data, {"source": os.path.abspath(source), "rcsim_keys": " ".join(keys), "note": note})


def main(argv=None):
    p = Parser(description=__doc__.splitlines()[0],
                                epilog="The datasets written and the tensor names read: the docstring of "
                                       "analysis/convert_checkpoint.py; its use: docs/user/running.md, "
                                       "\"Pretrained checkpoints\".")
    p.add_argument("checkpoint", help="the checkpoint (CHECKPOINT.safetensors)")
    p.add_argument("out", help="the rcsim weights.file to write (HDF5)")
    p.add_argument("--heads", type=int, required=True, help="number of attention heads (config.json: n_head)")
    p.add_argument("--kind", choices=["auto", "gpt2", "bert"], default="auto",
                   help="the tensor names: gpt2, bert, or auto (found from the names)")
    p.add_argument("--fold", action="store_true",
                   help="write W_V,h W_O,h folded into /W_V [L, H, d, d] and no /W_O (attention-only rcsim runs)")
    p.add_argument("--force", action="store_true",
                   help="replace an existing OUT that this converter did not write (never the checkpoint, never a link)")
    a = p.parse_args(argv)
    try:
        check_output(a.out, a.checkpoint, a.force)
        with np.errstate(over="ignore", invalid="ignore"):  # an overflow is reported by convert's finite check
            data, arch = convert(read_safetensors(a.checkpoint), a.heads, a.kind, a.fold)
    except BadInput as e:  # the checkpoint's content: its file named
        print(f"convert_checkpoint: '{a.checkpoint}': {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"convert_checkpoint: {e}", file=sys.stderr)
        return 2
    except (ValueError, IndexError, KeyError, TypeError) as e:  # a malformation the checks above missed
        print(f"convert_checkpoint: '{a.checkpoint}': malformed checkpoint ({type(e).__name__}: {e})", file=sys.stderr)
        return 2
    keys = rcsim_keys(data, arch, a.fold, a.out)
    note = ("W_V[l, h] = W_V,h W_O,h folded" if a.fold else "unfolded W_V, W_O") + \
        ("; attention biases kept (attention.bias = true)" if "b_Q" in data else "") + \
        "; the final LayerNorm not converted"
    try:
        write(a.out, data, a.checkpoint, keys, note)
    except FileExistsError as e:  # atomic_writer: a directory, link, FIFO or device at OUT
        print(f"convert_checkpoint: '{a.out}': {e.strerror}; choose another output file", file=sys.stderr)
        return 2
    except OSError as e:  # atomic_writer's "cannot write (...); nothing was replaced"
        print(f"convert_checkpoint: '{a.out}': not written: {e.strerror or e}", file=sys.stderr)
        return 1
    L, H, d, dk = data["W_Q"].shape
    print(f"wrote {a.out} ({arch}): L = {L}, H = {H}, d = {d}, d_k = {dk}, datasets {', '.join(sorted(data))}")
    print("run with: rcsim run " + " ".join(keys))
    return 0


if __name__ == "__main__":
    sys.exit(run(main, "convert_checkpoint"))
