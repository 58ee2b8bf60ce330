#!/usr/bin/python3
"""analysis/convert_checkpoint.py on malformed safetensors checkpoints (issue 22, class 6),
table-driven: each gives exit 2 and one stderr line naming the tensor (no traceback). And a
checkpoint without an MLP whose LayerNorm gains and biases are exported: the printed keys hold
--norm.params=file, and `rcsim run` with those keys reads them.

    convert_checkpoint_hostile.py RCSIM WORKDIR
"""
import json
import os
import struct
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
CONVERT = os.environ.get("RCSIM_CONVERT", os.path.join(HERE, "..", "..", "analysis", "convert_checkpoint.py"))
D, L = 4, 2


def raw_safetensors(path, header, data=b""):
    h = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + data)


def gpt2_tensors(mlp=True, norms=True):
    rng = np.random.default_rng(5)
    t = {}
    for layer in range(L):
        t[f"h.{layer}.attn.c_attn.weight"] = rng.standard_normal((D, 3 * D)) * 0.3
        t[f"h.{layer}.attn.c_proj.weight"] = rng.standard_normal((D, D)) * 0.3
        if mlp:
            t[f"h.{layer}.mlp.c_fc.weight"] = rng.standard_normal((D, 6)) * 0.3
            t[f"h.{layer}.mlp.c_proj.weight"] = rng.standard_normal((6, D)) * 0.3
        if norms:
            t[f"h.{layer}.ln_1.weight"] = 1 + 0.1 * rng.standard_normal(D)
            t[f"h.{layer}.ln_1.bias"] = 0.1 * rng.standard_normal(D)
            if mlp:
                t[f"h.{layer}.ln_2.weight"] = 1 + 0.1 * rng.standard_normal(D)
                t[f"h.{layer}.ln_2.bias"] = 0.1 * rng.standard_normal(D)
    return t


def bert_tensors():
    rng = np.random.default_rng(6)
    t = {}
    for layer in range(L):
        for n in ("query", "key", "value"):
            t[f"layer.{layer}.attention.self.{n}.weight"] = rng.standard_normal((D, D))
        t[f"layer.{layer}.attention.output.dense.weight"] = rng.standard_normal((D, D))
    return t


def header_and_data(tensors, override=None):
    """Header and data of a float64 checkpoint; override: name -> dict merged into its entry."""
    header, blobs, offset = {}, [], 0
    for name, a in tensors.items():
        b = np.ascontiguousarray(a, "<f8").tobytes()
        header[name] = {"dtype": "F64", "shape": list(np.shape(a)), "data_offsets": [offset, offset + len(b)]}
        blobs.append(b)
        offset += len(b)
    for name, entry in (override or {}).items():
        if entry is None:
            header[name] = None
        elif isinstance(entry, dict):
            header[name] = {**header.get(name, {}), **entry}
        else:
            header[name] = entry
    return header, b"".join(blobs)


def entry(name, **fields):
    t = gpt2_tensors()
    h, data = header_and_data(t, {name: fields})
    return h, data


def replaced(name, value, base=gpt2_tensors):
    t = base()
    t[name] = value
    return header_and_data(t)


T0 = "h.0.attn.c_attn.weight"
B1 = "layer.1.attention.self.key.weight"


# (name, (header, data), text the one stderr line holds)
def cases():
    return [
        ("header_is_a_list", ([1, 2], b""), "header is a JSON list, expected an object of tensors"),
        ("entry_is_a_string", header_and_data(gpt2_tensors(), {T0: "F32"}), f"tensor {T0}: header entry is a JSON str"),
        ("entry_is_null", header_and_data(gpt2_tensors(), {T0: None}), f"tensor {T0}: header entry is a JSON NoneType"),
        ("entry_without_dtype", (lambda h: (h[0] | {T0: {k: v for k, v in h[0][T0].items() if k != "dtype"}}, h[1]))(
            header_and_data(gpt2_tensors())), f"tensor {T0}: header entry has no 'dtype'"),
        ("shape_of_strings", entry(T0, shape=["4", "12"]), f"tensor {T0}: shape ['4', '12'], expected a list of whole"),
        ("shape_negative", entry(T0, shape=[-4, -12]), f"tensor {T0}: shape [-4, -12]"),
        ("shape_not_a_list", entry(T0, shape=48), f"tensor {T0}: shape 48"),
        ("offsets_three", entry(T0, data_offsets=[0, 8, 16]), f"tensor {T0}: data_offsets [0, 8, 16]"),
        ("offsets_float", entry(T0, data_offsets=[0.5, 8]), f"tensor {T0}: data_offsets [0.5, 8]"),
        ("offsets_negative", entry(T0, data_offsets=[-8, 8]), f"tensor {T0}: data_offsets [-8, 8]"),
        ("dtype_number", entry(T0, dtype=32), f"tensor {T0}: dtype 32"),
        ("bytes_not_whole_values", entry(T0, data_offsets=[0, 13]), f"tensor {T0} has 13 bytes, not a whole number"),
        ("c_attn_one_axis", replaced(T0, np.ones(3 * D * D)), f"tensor {T0}: shape [{3 * D * D}], expected 2 axes"),
        ("c_attn_zero_axes", replaced(T0, np.float64(1.0)), f"tensor {T0}: shape [], expected 2 axes"),
        ("c_attn_other_d", replaced("h.1.attn.c_attn.weight", np.ones((2, 6))),
         "tensors h.1.attn.c_attn.weight and c_proj.weight: shapes [2, 6] and [4, 4]"),
        ("bert_key_wrong_shape", replaced(B1, np.ones((D, D + 1)), bert_tensors),
         f"tensor {B1}: shape [4, 5], expected [4, 4]"),
        ("bert_key_one_axis", replaced(B1, np.ones(D), bert_tensors), f"tensor {B1}: shape [4], expected 2 axes"),
        ("mlp_layer_shapes_differ", replaced("h.1.mlp.c_fc.weight", np.ones((D, 5))),
         "tensor h.1.mlp.c_fc.weight (W_in): shape [4, 5], expected 2 axes and the shape of layer 0, [4, 6]"),
        ("ln_gain_two_axes", replaced("h.1.ln_1.weight", np.ones((D, 1))), "h.1.ln_1"),
    ]


def main():
    rcsim, work = os.path.abspath(sys.argv[1]), sys.argv[2]
    os.makedirs(work, exist_ok=True)
    ok, n = True, 0
    for name, (header, data), text in cases():
        n += 1
        path = os.path.join(work, name + ".safetensors")
        raw_safetensors(path, header, data)
        out = os.path.join(work, name + ".h5")
        r = subprocess.run([sys.executable, CONVERT, path, out, "--heads=2"], capture_output=True, text=True)
        lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
        problems = []
        if r.returncode != 2:
            problems.append(f"exit {r.returncode}, expected 2")
        if len(lines) != 1 or "Traceback" in r.stderr:
            problems.append(f"stderr has {len(lines)} lines (a traceback?)")
        if not any(text in ln for ln in lines):
            problems.append(f"no stderr line contains {text!r}")
        if os.path.exists(out):
            problems.append("an output was written")
        ok &= not problems
        print(f"[{'ok' if not problems else 'FAIL'}] {name}" + ("" if not problems else "\n    " + "\n    ".join(problems)
                                                             + "\n    stderr: " + r.stderr.strip()[-600:]))
    # No MLP, LayerNorm gains and biases exported: --norm.params=file among the keys, and they work.
    n += 1
    path = os.path.join(work, "no_mlp.safetensors")
    raw_safetensors(path, *header_and_data(gpt2_tensors(mlp=False)))
    out = os.path.join(work, "no_mlp.h5")
    r = subprocess.run([sys.executable, CONVERT, path, out, "--heads=2"], capture_output=True, text=True)
    problems = []
    keys = next((ln.split("rcsim run ", 1)[1].split() for ln in r.stdout.splitlines() if "rcsim run " in ln), [])
    if r.returncode != 0:
        problems.append(f"exit {r.returncode}: {r.stderr.strip()}")
    elif "--norm.params=file" not in keys:
        problems.append(f"--norm.params=file missing from the keys: {' '.join(keys)}")
    else:
        run = subprocess.run([rcsim, "run", "--config", "/dev/null", "--quiet", "--force", "--model.tokens=5",
                              "--run.trials=1", f"--output.file={os.path.join(work, 'no_mlp_run.h5')}"] + keys,
                             capture_output=True, text=True)
        if run.returncode != 0:
            problems.append(f"rcsim run with the printed keys: exit {run.returncode}: {run.stderr.strip()}")
    ok &= not problems
    print(f"[{'ok' if not problems else 'FAIL'}] no_mlp_prints_norm_params" + ("" if not problems else "\n    " +
                                                                              "\n    ".join(problems)))
    print(f"convert_checkpoint_hostile: {n} cases, {'all passed' if ok else 'FAILURES'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
