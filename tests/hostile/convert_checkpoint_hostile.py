#!/usr/bin/python3
"""analysis/convert_checkpoint.py on malformed safetensors checkpoints (issue 22, class 6; issue
38: non-finite weights, overlapping offsets, duplicate header keys), table-driven: each gives
exit 2 and one stderr line naming the tensor (no traceback), and leaves nothing behind (its
directory holds only the checkpoint afterwards: no output, no temporary). The output rules
(issue 38), table-driven: the checkpoint itself, a foreign file (without and with --force), a
link, a directory, a link planted at the old temporary name and a full disk (RLIMIT_FSIZE); each
asserts the exit status, the one line, and that every file not the converter's is bitwise
unchanged (SHA-256). And a checkpoint without an MLP whose LayerNorm gains and biases are
exported: the printed keys hold --norm.params=file, and `rcsim run` with those keys reads them.

    convert_checkpoint_hostile.py RCSIM WORKDIR
"""
import hashlib
import json
import os
import resource
import shutil
import struct
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
CONVERT = os.environ.get("RCSIM_CONVERT", os.path.join(HERE, "..", "..", "analysis", "convert_checkpoint.py"))
D, L = 4, 2


def raw_safetensors(path, header, data=b""):
    """header: an object (JSON-encoded here) or the header's JSON text itself."""
    h = (header if isinstance(header, str) else json.dumps(header)).encode()
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


def with_value(name, index, value):
    t = gpt2_tensors()
    t[name] = t[name].copy()
    t[name][index] = value
    return header_and_data(t)


def overlapping(name, onto):
    """`name`'s data offsets moved onto those of `onto` (same size: the bytes are shared)."""
    h, data = header_and_data(gpt2_tensors())
    h[name]["data_offsets"] = list(h[onto]["data_offsets"])
    return h, data


def duplicate_key(text_of):
    """The header's JSON text with a key given twice (text_of edits the text)."""
    h, data = header_and_data(gpt2_tensors())
    return text_of(json.dumps(h)), data


def without(prefixes, base=gpt2_tensors):
    """The checkpoint without the tensors whose names start with one of `prefixes` (issue 47: a layer's
    missing tensors named)."""
    return header_and_data({k: v for k, v in base().items() if not k.startswith(tuple(prefixes))})


def huge_value_and_output():
    """Finite weights whose folded W_V,h W_O,h overflows (1e200 * 1e200)."""
    t = gpt2_tensors()
    t["h.0.attn.c_attn.weight"] = np.full((D, 3 * D), 1e200)
    t["h.0.attn.c_proj.weight"] = np.full((D, D), 1e200)
    return header_and_data(t)


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
        # issue 38: every tensor validated before anything is written
        ("nan_weight", with_value(T0, (1, 2), np.nan), f"tensor {T0}: the non-finite value nan at index [1, 2]"),
        ("inf_ln_gain", with_value("h.1.ln_2.weight", 3, np.inf), "tensor h.1.ln_2.weight: the non-finite value inf"),
        ("minus_inf_mlp", with_value("h.0.mlp.c_fc.weight", (0, 0), -np.inf),
         "tensor h.0.mlp.c_fc.weight: the non-finite value -inf at index [0, 0]"),
        ("offsets_overlap", overlapping("h.1.attn.c_proj.weight", "h.0.attn.c_proj.weight"),
         "tensors h.0.attn.c_proj.weight (bytes"),
        ("offsets_partly_overlap", (lambda h: (h[0] | {T0: h[0][T0] | {"data_offsets": [h[0][T0]["data_offsets"][0] + 8,
                                                                                        h[0][T0]["data_offsets"][1] + 8]}},
                                               h[1]))(header_and_data(gpt2_tensors())), "overlap"),
        ("duplicate_tensor_key", duplicate_key(lambda t: t[:-1] + ', "h.0.ln_1.bias": ' + json.dumps(
            header_and_data(gpt2_tensors())[0]["h.0.ln_1.bias"]) + "}"), "the header has the key 'h.0.ln_1.bias' twice"),
        ("duplicate_dtype_key", duplicate_key(lambda t: t.replace('"dtype": "F64"', '"dtype": "F64", "dtype": "F32"', 1)),
         "the header has the key 'dtype' twice"),
        ("fold_overflow", huge_value_and_output(), "dataset /W_V after conversion: the non-finite value inf", "--fold"),
        # issue 47: the checkpoint and the missing tensors of a layer named (was: "no complete set of ... tensors",
        # or the MLP dropped without a word when layer 0 lacks it)
        ("missing_attention_layer_0", without(["h.0."]),
         "missing_attention_layer_0.safetensors': the GPT-2 attention tensors of layers 0 .. 1 (the checkpoint has some of layer 1) are "
         "incomplete: h.0.attn.c_attn.weight, h.0.attn.c_proj.weight missing"),
        ("missing_c_proj_layer_1", without(["h.1.attn.c_proj."]),
         "incomplete: h.1.attn.c_proj.weight missing"),
        ("missing_bert_key_layer_1", without([B1], bert_tensors), "incomplete: layer.1.attention.self.key.weight missing"),
        ("missing_mlp_layer_0", without(["h.0.mlp."]),
         "W_in: h.0.mlp.c_fc.weight missing (the checkpoint has layer 1 of it; the attention has layers 0 .. 1)"),
        ("missing_ln_2_gain_layer_1", without(["h.1.ln_2.weight"]), "norm_mlp_gain: h.1.ln_2.weight missing"),
        ("mlp_beyond_the_attention", (lambda t: header_and_data(dict(t, **{"h.2.mlp.c_fc.weight": t["h.1.mlp.c_fc.weight"]})))(
            gpt2_tensors()), "tensor h.2.mlp.c_fc.weight (W_in): layer 2, but the attention has layers 0 .. 1"),
    ]


def sha(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def foreign_hdf5(path):
    import h5py
    with h5py.File(path, "w") as f:
        f["data"] = np.arange(5.0)


def text_file(path):
    with open(path, "w") as f:
        f.write("a user's notes\n")


def ours(path):
    """A weights file an earlier conversion wrote (replaced without --force)."""
    ckpt = path + ".other.safetensors"
    raw_safetensors(ckpt, *header_and_data(gpt2_tensors(mlp=False)))
    subprocess.run([sys.executable, CONVERT, ckpt, path, "--heads=2"], check=True, capture_output=True)
    os.unlink(ckpt)


# The output rules: (name, setup(folder) -> (out, files the converter must leave bitwise unchanged,
# a file-size limit or None), extra arguments, exit status, text of the one stderr line ("" on success)).
def output_cases():
    def at(make, keep):
        """An existing file at the output, made by `make`; keep: it must stay unchanged."""
        def setup(folder):
            out = os.path.join(folder, "w.h5")
            make(out)
            return out, [out] if keep else [], None
        return setup

    def checkpoint_itself(folder):
        ckpt = os.path.join(folder, "model.safetensors")
        return ckpt, [ckpt], None

    def link_to(target_maker, link_name):
        def setup(folder):
            victim = os.path.join(folder, "victim.txt")
            target_maker(victim)
            out = os.path.join(folder, "w.h5")
            os.symlink(victim, out if link_name is None else out + link_name)
            return out, [victim], None
        return setup

    def link_to_checkpoint(folder):
        out = os.path.join(folder, "w.h5")
        os.symlink(os.path.join(folder, "model.safetensors"), out)
        return out, [os.path.join(folder, "model.safetensors")], None

    def directory(folder):
        out = os.path.join(folder, "w.h5")
        os.makedirs(out)
        return out, [], None

    def full_disk(folder):
        out = os.path.join(folder, "w.h5")
        ours(out)
        return out, [out], 4096

    return [
        ("is_the_checkpoint", checkpoint_itself, [], 2, "the output is the checkpoint itself"),
        ("is_the_checkpoint_force", checkpoint_itself, ["--force"], 2, "the output is the checkpoint itself"),
        ("link_to_the_checkpoint", link_to_checkpoint, ["--force"], 2, "the output is the checkpoint itself"),
        ("foreign_text", at(text_file, True), [], 2, "was not written by convert_checkpoint"),
        ("foreign_hdf5", at(foreign_hdf5, True), [], 2, "rerun with --force to replace it"),
        ("link", link_to(text_file, None), [], 2, "not a regular file"),
        ("link_force", link_to(text_file, None), ["--force"], 2, "not a regular file"),
        ("directory_force", directory, ["--force"], 2, "not a regular file"),
        ("link_at_old_temporary", link_to(text_file, ".tmp"), [], 0, ""),
        ("full_disk", full_disk, [], 1, "not written"),
        # controls: the refusals above are not blanket refusals
        ("foreign_force_replaced", at(foreign_hdf5, False), ["--force"], 0, ""),
        ("ours_replaced", at(ours, False), [], 0, ""),
    ]


def output_case(folder, setup, extra, status, text):
    """Problems of one output-rule case (an empty list: it passed)."""
    import h5py
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    ckpt = os.path.join(folder, "model.safetensors")
    raw_safetensors(ckpt, *header_and_data(gpt2_tensors()))
    out, kept, limit = setup(folder)
    before = {p: sha(p) for p in kept + [ckpt]}
    links = {p: os.readlink(p) for p in (os.path.join(folder, f) for f in os.listdir(folder)) if os.path.islink(p)}
    listing = set(os.listdir(folder))

    def limited():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    r = subprocess.run([sys.executable, CONVERT, ckpt, out, "--heads=2", *extra], capture_output=True, text=True,
                       preexec_fn=limited if limit else None)
    problems, lines = [], [ln for ln in r.stderr.splitlines() if ln.strip()]
    if r.returncode != status:
        problems.append(f"exit {r.returncode}, expected {status}: {r.stderr.strip()[-400:]}")
    if status and (len(lines) != 1 or text not in lines[0]):
        problems.append(f"expected one stderr line holding {text!r}, got {lines[-3:]}")
    problems += [f"{os.path.basename(p)} changed" for p, h in before.items() if not os.path.isfile(p) or sha(p) != h]
    problems += [f"the link {os.path.basename(p)} was replaced" for p, t in links.items()
                 if not os.path.islink(p) or os.readlink(p) != t]
    new = set(os.listdir(folder)) - listing - ({os.path.basename(out)} if status == 0 else set())
    if new:
        problems.append(f"left behind: {sorted(new)}")
    if status == 0:
        try:
            with h5py.File(out, "r") as f:
                if "rcsim_keys" not in f.attrs or "W_Q" not in f:
                    problems.append("the output is not a converted weights file")
        except OSError as e:
            problems.append(f"the output does not open: {e}")
    return problems


def main():
    rcsim, work = os.path.abspath(sys.argv[1]), sys.argv[2]
    os.makedirs(work, exist_ok=True)
    ok, n = True, 0
    for name, (header, data), text, *extra in cases():
        n += 1
        folder = os.path.join(work, name)
        shutil.rmtree(folder, ignore_errors=True)
        os.makedirs(folder)
        path = os.path.join(folder, name + ".safetensors")
        raw_safetensors(path, header, data)
        out = os.path.join(folder, name + ".h5")
        r = subprocess.run([sys.executable, CONVERT, path, out, "--heads=2", *extra], capture_output=True, text=True)
        lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
        problems = []
        left = sorted(set(os.listdir(folder)) - {name + ".safetensors"})
        if left:
            problems.append(f"left behind: {left}")
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
    for name, setup, extra, status, text in output_cases():
        n += 1
        problems = output_case(os.path.join(work, "out_" + name), setup, extra, status, text)
        ok &= not problems
        print(f"[{'ok' if not problems else 'FAIL'}] output_{name}" + "".join("\n    " + p for p in problems))
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
