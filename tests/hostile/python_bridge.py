#!/usr/bin/python3
"""The Python entry points beyond the array API (issue 47 items 3 and 4), table-driven: rcsim.from_torch,
rcsim.capture, rcsim.plot.curves/final/heatmap, rcsim.load_model and the pretrained Model's logits,
states and rcsim.generate. Each row is (call, bad value, good value, exception, phrases): the bad value
raises that exception with one line holding every phrase (rcsim.ConfigError naming the function and the
argument, never what torch, matplotlib or NumPy raise; FloatingPointError naming what turned non-finite,
never a NaN returned), and the call with the good value (the control) succeeds, so that a row cannot pass
by an unrelated error. Then the conversions (tensors that require grad detached, tuple and dict block
outputs read), each compared with the plain case. The overflowing model is stories260K with its MLP
scaled (w1, w3 by 1e10, w2 by 1e20): beyond float32's range in the first block, within float64's.

    python_bridge.py BUILD_DIR WORKDIR

Exit 0 iff every row passes; 77 (skipped) without torch. About 6 s.
"""
import os
import struct
import sys
import warnings

import numpy as np

sys.path.insert(0, os.path.join(sys.argv[1], "python"))
import rcsim  # noqa: E402

try:
    import torch
except ImportError:
    print("python_bridge: torch is not installed; skipped")
    sys.exit(77)
import matplotlib  # noqa: E402

matplotlib.use("Agg")
import rcsim.plot as plot  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
STORIES = os.path.join(HERE, "..", "..", "configs", "models", "stories260K", "stories260K.bin")
CE, TE, FE = "ConfigError", "ConfigTypeError", "FloatingPointError"
torch.manual_seed(47)
d = 8


def overflowing_checkpoint(path, scale=1e20):
    """stories260K (legacy llama2.c: 7 int32 then float32 arrays) with w1, w3 times sqrt(scale) and w2
    times scale: the MLP's output ~1e40 at the first block, beyond float32."""
    with open(STORIES, "rb") as f:
        raw = f.read()
    dim, hidden, layers, heads, kv_heads, vocab, _ = struct.unpack("<7i", raw[:28])
    kv = kv_heads * (dim // heads)
    w = np.frombuffer(raw[28:], dtype="<f4").copy()
    w1 = abs(vocab) * dim + layers * dim + 2 * layers * dim * dim + 2 * layers * dim * kv + layers * dim
    for start, factor in ((w1, scale ** 0.5), (w1 + layers * hidden * dim, scale),
                          (w1 + 2 * layers * hidden * dim, scale ** 0.5)):
        w[start:start + layers * hidden * dim] *= factor
    with open(path, "wb") as f:
        f.write(raw[:28] + w.astype("<f4").tobytes())
    return path


# Modules: a GPT-2-style block (nanoGPT's names), its plain-tensor twin, blocks returning other things.
class Linear(torch.nn.Module):  # HF Conv1D's layout [in, out], weights as plain attributes (not Parameters)
    def __init__(self, n_in, n_out, grad):
        super().__init__()
        self.weight = (torch.randn(n_in, n_out, dtype=torch.float32) * 0.3).requires_grad_(grad)
        self.bias = torch.zeros(n_out, dtype=torch.float32, requires_grad=grad)

    def forward(self, x):
        return x @ self.weight + self.bias


class LayerNorm(torch.nn.Module):  # nanoGPT's LayerNorm (no eps stored), gain and bias as plain float32 attributes
    def __init__(self, grad):
        super().__init__()
        self.weight = torch.ones(d, dtype=torch.float32, requires_grad=grad)
        self.bias = torch.zeros(d, dtype=torch.float32, requires_grad=grad)

    def forward(self, x):
        return torch.nn.functional.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)


class GPT2Block(torch.nn.Module):
    def __init__(self, plain=False, grad=False):
        super().__init__()
        make = (lambda i, o: Linear(i, o, grad)) if plain else torch.nn.Linear
        self.ln_1, self.ln_2 = (LayerNorm(grad), LayerNorm(grad)) if plain else (torch.nn.LayerNorm(d),
                                                                                 torch.nn.LayerNorm(d))
        self.attn = torch.nn.Module()
        self.attn.c_attn, self.attn.c_proj = make(d, 3 * d), make(d, d)
        self.mlp = torch.nn.Module()
        self.mlp.c_fc, self.mlp.gelu, self.mlp.c_proj = make(d, 4 * d), torch.nn.GELU(), make(4 * d, d)


class Wrap(torch.nn.Module):
    """Block i is blocks[i]; unwrap(output) gives the next block's input."""
    def __init__(self, blocks, unwrap=lambda y: y):
        super().__init__()
        self.h = torch.nn.ModuleList(blocks)
        self.unwrap = unwrap

    def forward(self, x):
        for b in self.h:
            x = self.unwrap(b(x))
        return x


class Returns(torch.nn.Module):
    def __init__(self, make):
        super().__init__()
        self.make = make

    def forward(self, x):
        return self.make(x)


def linear_model():
    return Wrap([torch.nn.Linear(d, d), torch.nn.Linear(d, d)])


def on_meta(make):
    return make().to("meta")


X = torch.randn(2, 5, d)
MHA = torch.nn.MultiheadAttention(d, 2)
GPT2 = GPT2Block()
M = rcsim.measures(np.random.default_rng(47).standard_normal((3, 5, 4)))


def sweep_source():
    keys = {"model.layers": 3, "run.trials": 2}
    return [rcsim.simulate(keys=dict(keys, **{"model.dim": k, "model.tokens": n})) for k in (2, 3) for n in (4, 5)]


def small_machine(call, memory=4e6):
    """call() with rcsim.pretrained's physical memory taken as `memory` bytes."""
    import rcsim.pretrained as pretrained
    saved = getattr(pretrained, "_physical_memory", None)
    pretrained._physical_memory = lambda: memory
    try:
        return call()
    finally:
        if saved is None:
            del pretrained._physical_memory
        else:
            pretrained._physical_memory = saved


def rows(good_model, huge_model):
    sweep = sweep_source()
    return [
        # rcsim.from_torch: the module and heads, tokens, activation
        ("from_torch_meta_mha", lambda v: rcsim.from_torch(v), on_meta(lambda: torch.nn.MultiheadAttention(d, 2)), MHA,
         CE, ["rcsim.from_torch", "module", "in_proj_weight is on the meta device"]),
        ("from_torch_meta_gpt2_stack", lambda v: rcsim.from_torch(v, heads=2), on_meta(lambda: torch.nn.ModuleList(
            [GPT2Block(), GPT2Block()])), torch.nn.ModuleList([GPT2, GPT2]), CE, ["block 0's", "meta device"]),
        ("from_torch_empty_stack", lambda v: rcsim.from_torch(v), torch.nn.ModuleList(), torch.nn.ModuleList([MHA]), CE,
         ["rcsim.from_torch", "module", "an empty ModuleList"]),
        ("from_torch_not_a_block", lambda v: rcsim.from_torch(v), 3, MHA, TE, ["module", "a int is not a block"]),
        ("from_torch_heads_negative", lambda v: rcsim.from_torch(MHA, heads=v), -1, 2, CE,
         ["rcsim.from_torch", "heads", "-1 is out of range"]),
        ("from_torch_heads_string", lambda v: rcsim.from_torch(MHA, heads=v), "2", None, TE, ["heads", "'2'", "a str"]),
        ("from_torch_heads_not_the_modules", lambda v: rcsim.from_torch(MHA, heads=v), 4, 2, CE,
         ["heads", "4, but its num_heads = 2"]),
        ("from_torch_gpt2_heads_not_dividing", lambda v: rcsim.from_torch(GPT2, heads=v), 3, 2, CE,
         ["heads", "3 heads do not divide the width 8", "one of 1, 2, 4, 8"]),
        ("from_torch_gpt2_heads_negative", lambda v: rcsim.from_torch(GPT2, heads=v), -2, 4, CE, ["heads", "-2"]),
        ("from_torch_gpt2_heads_float", lambda v: rcsim.from_torch(GPT2, heads=v), 2.0, 2, TE,
         ["heads", "2.0 is not a whole number"]),
        ("from_torch_gpt2_heads_missing", lambda v: rcsim.from_torch(GPT2, heads=v), None, 2, CE,
         ["heads", "heads=H is needed"]),
        ("from_torch_tokens_string", lambda v: rcsim.from_torch(MHA, tokens=v), "5", 5, TE, ["tokens", "'5'"]),
        ("from_torch_activation_unknown", lambda v: rcsim.from_torch(GPT2, heads=2, activation=v), "swish", "gelu", CE,
         ["activation", "'swish'", "'gelu_tanh'"]),
        # rcsim.capture: blocks' outputs, widths, the blocks and the model's own errors
        ("capture_block_returns_dict", lambda v: rcsim.capture(v, X),
         Wrap([Returns(lambda x: {"h": x}), Returns(lambda x: {"h": x})], lambda y: y["h"]), linear_model(), TE,
         ["rcsim.capture", "blocks", "block 0's output is a dict with keys 'h'", "hidden_states"]),
        ("capture_block_returns_empty_tuple", lambda v: rcsim.capture(v, X),
         Wrap([Returns(lambda x: ())], lambda y: X), linear_model(), TE, ["block 0's output is an empty tuple"]),
        ("capture_block_returns_a_number", lambda v: rcsim.capture(v, X),
         Wrap([Returns(lambda x: 1.0)], lambda y: X), linear_model(), TE, ["block 0's output is a float"]),
        ("capture_block_changes_width", lambda v: rcsim.capture(v, X),
         Wrap([torch.nn.Linear(d, 6), torch.nn.Linear(6, 6)]), linear_model(), CE,
         ["blocks", "block 0's output has shape [batch, N, d] = [2, 5, 6]", "[2, 5, 8]", "changes the width"]),
        ("capture_model_raises", lambda v: rcsim.capture(linear_model(), v), torch.randn(2, 5, d + 1), X, CE,
         ["rcsim.capture", "inputs", "the model raised RuntimeError"]),
        ("capture_blocks_empty", lambda v: rcsim.capture(linear_model(), X, blocks=v), [], None, CE,
         ["blocks", "an empty list"]),
        ("capture_blocks_not_modules", lambda v: rcsim.capture(linear_model(), X, blocks=v), [1, 2], None, TE,
         ["blocks[0]", "a int"]),
        ("capture_batch_first_string", lambda v: rcsim.capture(linear_model(), X, batch_first=v), "yes", True, TE,
         ["batch_first", "True or False"]),
        ("capture_model_not_callable", lambda v: rcsim.capture(v, X), 3, linear_model(), TE, ["model", "a int"]),
        # rcsim.plot: each argument checked, the command line's option names never shown
        ("plot_curves_trials", lambda v: plot.curves(M, "mu", trials=v), "mean", "all", "ValueError",
         ["rcsim.plot.curves", "trials='mean'", "band, all, median"]),
        ("plot_curves_xscale", lambda v: plot.curves(M, "mu", xscale=v), "symlog", "log", "ValueError",
         ["xscale='symlog'", "auto, log, linear"]),
        ("plot_curves_style", lambda v: plot.curves(M, "mu", style=v), "poster", "paper", "ValueError",
         ["style='poster'", "screen, paper"]),
        ("plot_curves_empty_list", lambda v: plot.curves(v, "mu"), [], [M], "ValueError", ["source is an empty list"]),
        ("plot_curves_empty_dict", lambda v: plot.curves(v, "mu"), {}, {"a": M}, "ValueError",
         ["source is an empty dict"]),
        ("plot_curves_measures_number", lambda v: plot.curves(M, v), 3, "mu", "TypeError",
         ["rcsim.plot.curves", "measures=3", "a measure name"]),
        ("plot_curves_measure_unknown", lambda v: plot.curves(M, v), "mu_typo", "mu_rel", "ValueError",
         ["rcsim.plot.curves: measures: measure 'mu_typo' is not in"]),
        ("plot_final_key_number", lambda v: plot.final(sweep, v), 5, "model.dim", "TypeError",
         ["rcsim.plot.final", "key=5", "a swept key's name"]),
        ("plot_final_key_not_swept", lambda v: plot.final(sweep, v), "model.layers", "model.dim", "ValueError",
         ["rcsim.plot.final: key 'model.layers' takes fewer than two values"]),
        ("plot_final_layer_string", lambda v: plot.final(sweep, "model.dim", layer=v), "last", 3, TE,
         ["rcsim.plot.final", "layer", "'last' is not a whole number"]),
        ("plot_final_layer_not_recorded", lambda v: plot.final(sweep, "model.dim", layer=v), 9, 2, "ValueError",
         ["rcsim.plot.final: layer: measure 'mu_rel' has no value at layer 9"]),
        ("plot_heatmap_key_not_swept", lambda v: plot.heatmap(sweep, "model.dim", v), "run.seed", "model.tokens",
         "ValueError",
         ["rcsim.plot.heatmap: key_x/key_y: key 'run.seed' takes fewer than two values"]),
        # rcsim.load_model's path
        ("load_model_nul", lambda v: rcsim.load_model(v), STORIES + "\0.txt", STORIES, CE,
         ["rcsim.load_model", "path", "holds a NUL byte"]),
        ("load_model_empty_path", lambda v: rcsim.load_model(v), "", STORIES, CE, ["rcsim.load_model", "path", "not empty"]),
        ("load_model_bytes_path", lambda v: rcsim.load_model(v), STORIES.encode(), STORIES, TE, ["path", "a bytes"]),
        # non-finite results of the pretrained model: never returned
        ("logits_float32_overflow", lambda m: m.logits([1, 2, 3], precision="float32"), huge_model, good_model, FE,
         ["Model.logits", "the logits turned non-finite in float32", "position 0 (of 3)", "precision='float64'"]),
        ("states_float32_overflow", lambda m: m.states([1, 2, 3], precision="float32"), huge_model, good_model, FE,
         ["Model.states", "X(1) turned non-finite in float32", "X(0) was finite", "precision='float64'"]),
        ("generate_float32_overflow", lambda m: rcsim.generate(m, steps=4, precision="float32"), huge_model, good_model,
         FE, ["rcsim.generate", "the logits of sequence 0 turned non-finite in float32"]),
        ("generate_float32_overflow_sampled", lambda m: rcsim.generate(m, steps=3, sequences=2, temperature=1.0,
                                                                       precision="float32"), huge_model, good_model,
         FE, ["rcsim.generate", "non-finite in float32"]),
        ("states_deep_without_norm", lambda v: good_model.states([1, 2, 3], norm=False, depth=v), 400, 8, FE,
         ["Model.states", "turned non-finite in float64", "was finite", "RMSNorm (norm=True)", "depth="]),
        # X(0) .. X(depth) beyond the machine refused before any work (a machine of 4 MB: pretrained's
        # _physical_memory replaced; 512 tokens x 64 x 8 bytes x 2 copies = 0.52 MB a state)
        ("states_beyond_memory", lambda v: small_machine(lambda: good_model.states(list(range(512)), depth=v)), 10,
         4, CE, ["Model.states", "depth", "10: X(0) .. X(10) of 512 tokens would need about 5.77 MB",
                 "more than this machine's 4 MB", "at most depth 6 fits"]),
        ("states_nonfinite_unknown", lambda v: good_model.states([1, 2, 3], nonfinite=v), "ignore", "keep", CE,
         ["Model.states", "nonfinite", "'raise', 'keep'"]),
    ]


def outcome(fn, value):
    """The kind of exception `fn(value)` raises (CE, TE, or the class's name; None: none) and its text."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # e.g. matplotlib's on an empty axis; judged by the outcome alone
            fn(value)
    except rcsim.ConfigError as e:
        return TE if isinstance(e, TypeError) else CE, str(e)
    except Exception as e:  # noqa: BLE001 - every outcome is recorded and judged below
        return type(e).__name__, str(e)
    return None, ""


def conversions(good_model, huge_model):
    """(name, problem or None): what is converted, compared with the plain case."""
    out = []
    twin = GPT2Block(plain=True, grad=True)
    plain = GPT2Block()
    with torch.no_grad():
        for mine, theirs in ((plain.attn.c_attn, twin.attn.c_attn), (plain.attn.c_proj, twin.attn.c_proj),
                             (plain.mlp.c_fc, twin.mlp.c_fc), (plain.mlp.c_proj, twin.mlp.c_proj)):
            mine.weight.copy_(theirs.weight.T)
            mine.bias.copy_(theirs.bias)
    try:
        a, b = rcsim.from_torch(twin, heads=2)["weights"], rcsim.from_torch(plain, heads=2)["weights"]
        bad = [k for k in b if not np.allclose(a[k], b[k], rtol=1e-6, atol=1e-7)]
        out.append(("from_torch_requires_grad_plain_tensors", f"differs in {bad}" if bad else None))
    except Exception as e:  # noqa: BLE001
        out.append(("from_torch_requires_grad_plain_tensors", f"{type(e).__name__}: {e}"))
    reference = linear_model()
    want = rcsim.capture(reference, X)
    for name, unwrap, make in (("capture_tuple_outputs", lambda y: y[0], lambda x: (x, None)),
                               ("capture_dict_hidden_states", lambda y: y["hidden_states"],
                                lambda x: {"attentions": None, "hidden_states": x})):
        blocks = [Returns(lambda x, lin=lin: make(lin(x))) for lin in reference.h]
        try:
            got = rcsim.capture(Wrap(blocks, unwrap), X, blocks=blocks)
            out.append((name, None if np.array_equal(got, want) else "differs from the tensor outputs' capture"))
        except Exception as e:  # noqa: BLE001
            out.append((name, f"{type(e).__name__}: {e}"))
    try:
        fig = plot.curves({k: torch.tensor(v, requires_grad=True) for k, v in M.items() if v.dtype.kind == "f"}, "mu")
        out.append(("plot_measures_requiring_grad", None if fig.axes else "no axes"))
    except Exception as e:  # noqa: BLE001
        out.append(("plot_measures_requiring_grad", f"{type(e).__name__}: {e}"))
    try:
        kept = huge_model.states([1, 2, 3], precision="float32", nonfinite="keep")  # asked for: returned as it is
        out.append(("states_nonfinite_keep", None if np.isfinite(kept[0]).all() and not np.isfinite(kept[1]).all()
                    else "X(0) not finite or X(1) finite"))
    except Exception as e:  # noqa: BLE001
        out.append(("states_nonfinite_keep", f"{type(e).__name__}: {e}"))
    logits = huge_model.logits([1, 2, 3])  # float64 holds the overflowing model: the float32 rows are float32's
    out.append(("overflowing_model_finite_in_float64", None if np.isfinite(logits).all() else "non-finite"))
    return out


def main():
    work = sys.argv[2]
    os.makedirs(work, exist_ok=True)
    good_model = rcsim.load_model(STORIES)
    huge_model = rcsim.load_model(overflowing_checkpoint(os.path.join(work, "overflowing.bin")))
    failures, table = 0, rows(good_model, huge_model)
    for name, fn, bad, good, kind, phrases in table:
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
    converted = conversions(good_model, huge_model)
    for name, problem in converted:
        failures += problem is not None
        print(f"[{'ok' if problem is None else 'FAIL'}] {name}" + (f"\n    {problem}" if problem else ""))
    print(f"python_bridge: {len(table) + len(converted)} cases, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
