"""A bridge from PyTorch: rcsim.from_torch(module) gives rcsim's keys and weight arrays of a torch
attention layer or block stack, and rcsim.capture(model, inputs) a torch model's hidden states
after each block, ready for rcsim.measures (hooks, in the spirit of TransformerLens's
run_with_cache). torch is imported only by the caller's objects: this module needs it only for
isinstance checks, imported on use.

Supported (docs/dev/python-package.md, "The torch bridge"):
  torch.nn.MultiheadAttention (embed_dim = kdim = vdim, with or without biases; no bias_k/bias_v,
    no add_zero_attn): pure attention, X(1) = MHA(X, X, X);
  torch.nn.TransformerEncoderLayer (relu or gelu, norm_first False: post-LN, True: pre-LN);
  a GPT-2-style block (HF GPT2Block and nanoGPT's Block: ln_1, attn.c_attn, attn.c_proj, ln_2,
    mlp.c_fc, mlp.c_proj; nn.Linear weights [out, in] or HF Conv1D [in, out]; with or without
    biases; or the same names directly on the block): pre-LN, causal, the MLP's activation read
    from its module (nn.GELU's approximate, nn.ReLU, nn.Tanh, HF's GELU classes) or, for an
    activation called as a function, identified by running the MLP once;
  a stack of any one of these: a list, nn.ModuleList, nn.Sequential, nn.TransformerEncoder, or a
    model holding its blocks as .transformer.h or .h (HF GPT-2).
Dropout is not translated: the bridge describes the module in eval mode. What it cannot read is
one ValueError or TypeError naming the module and what is supported.
"""
import numpy as np

from . import _validate as check
from .torch_parts import array as _array, layernorm, mlp_activation, projection


def _attr_path(obj, path):
    for part in path.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj


def blocks_of(model):
    """The blocks of a stack (list, ModuleList, Sequential, TransformerEncoder, HF GPT-2 model or
    Llama-style model), or None for one block."""
    import torch
    if isinstance(model, (list, tuple, torch.nn.ModuleList, torch.nn.Sequential)):
        return list(model)
    for path in ("transformer.h", "h", "model.layers", "layers", "encoder.layers", "encoder.layer", "blocks"):
        found = _attr_path(model, path)
        if isinstance(found, (torch.nn.ModuleList, torch.nn.Sequential, list, tuple)) and len(found):
            return list(found)
    return None


def _blocks_checked(module):
    """The blocks from_torch converts: a stack's blocks or the module itself; an empty stack is refused,
    and so is a module whose tensors are on the meta device (shapes without data)."""
    import torch
    if isinstance(module, (list, tuple, torch.nn.ModuleList, torch.nn.Sequential)) and len(module) == 0:
        raise check.usage_error("rcsim.from_torch", "module", f"an empty {type(module).__name__}; a block or a "
                                "stack of one or more blocks is needed")
    blocks = blocks_of(module) or [module]
    for i, b in enumerate(blocks):
        if not isinstance(b, torch.nn.Module):
            continue  # _one_block names it
        meta = next((n for n, t in list(b.named_parameters()) + list(b.named_buffers()) if t.is_meta), None)
        if meta is not None:
            where = f"block {i}'s " if len(blocks) > 1 else ""
            raise check.usage_error("rcsim.from_torch", "module", f"{where}{meta} is on the meta device (a shape "
                                    "without data); materialise the weights first (module.to_empty(device='cpu') "
                                    "and load_state_dict)")
    return blocks


def _heads_given(who_heads, found, heads):
    """The module's own number of heads `found`; a `heads` given that disagrees is refused."""
    if heads is not None and heads != found:
        raise check.usage_error("rcsim.from_torch", "heads", f"{heads}, but {who_heads} = {found}; leave heads out "
                                "(the module says it) or give the same number")
    return found


def _heads_split(w, heads, axis):
    """A [d, H d_h] projection (axis=1: columns of head h) as [H, d, d_h], or a [H d_h, d] one
    (axis=0: rows) as [H, d_h, d]."""
    if axis == 1:
        d, hd = w.shape
        return w.reshape(d, heads, hd // heads).transpose(1, 0, 2)
    hd, d = w.shape
    return w.reshape(heads, hd // heads, d)


def _mha(m, heads=None):
    """nn.MultiheadAttention: W_Q, W_K, W_V [H, d, d_h] (the heads' column blocks of
    in_proj_weight's transpose), W_O [H, d_h, d] (out_proj.weight's transpose split by rows), the
    biases b_Q, b_K, b_V [H, d_h] and b_O [d] when the layer has them."""
    if not getattr(m, "_qkv_same_embed_dim", True) or m.bias_k is not None or m.add_zero_attn:
        raise ValueError("rcsim.from_torch: nn.MultiheadAttention with kdim/vdim other than embed_dim, bias_k/bias_v "
                         "or add_zero_attn has no rcsim counterpart (self-attention X -> MHA(X, X, X) is supported)")
    d, H = m.embed_dim, _heads_given("its num_heads", m.num_heads, heads)
    w, b = _array(m.in_proj_weight), _array(m.in_proj_bias)
    arrays = {}
    for i, name in enumerate("QKV"):
        arrays["W_" + name] = _heads_split(w[i * d:(i + 1) * d].T, H, 1)
        if b is not None:
            arrays["b_" + name] = b[i * d:(i + 1) * d].reshape(H, d // H)
    arrays["W_O"] = _heads_split(_array(m.out_proj.weight).T, H, 0)
    if m.out_proj.bias is not None:
        arrays["b_O"] = _array(m.out_proj.bias)
    keys = {"model.dim": d, "model.heads": H, "model.key_dim": d // H, "model.value_dim": d // H}
    return keys, arrays


def _layernorm(ln, stem, name):
    """A LayerNorm's gain and bias as rcsim's norm arrays (ones and zeros without affine parameters)."""
    gain, bias, _ = layernorm(ln, name, ln.normalized_shape[-1])
    return {stem + "_gain": gain, stem + "_bias": bias}


def _encoder_layer(m, heads=None):
    """nn.TransformerEncoderLayer: post-LN (norm_first False) or pre-LN, residual weight 1, MLP
    linear1 -> relu/gelu -> linear2 (W_in = linear1.weight^T [d, m], W_out = linear2.weight^T)."""
    keys, arrays = _mha(m.self_attn, heads)
    act = m.activation
    name = getattr(act, "__name__", type(act).__name__).lower()
    if name not in ("relu", "gelu") or (name == "gelu" and getattr(act, "approximate", "none") != "none"):
        raise ValueError(f"rcsim.from_torch: TransformerEncoderLayer activation {act!r}; relu or gelu (exact) has "
                         "an rcsim counterpart (mlp.activation)")
    if m.norm1.eps != m.norm2.eps:
        raise ValueError(f"rcsim.from_torch: norm1.eps = {m.norm1.eps} and norm2.eps = {m.norm2.eps} differ; rcsim has "
                         "one norm.eps")
    arrays.update({"W_in": _array(m.linear1.weight).T, "W_out": _array(m.linear2.weight).T})
    bias = m.linear1.bias is not None
    if bias:
        arrays.update({"b_in": _array(m.linear1.bias), "b_out": _array(m.linear2.bias)})
    arrays.update(_layernorm(m.norm1, "norm_attn", "norm1"))
    arrays.update(_layernorm(m.norm2, "norm_mlp", "norm2"))
    keys.update({"norm.type": "layernorm", "norm.position": "pre" if m.norm_first else "post", "norm.eps": m.norm1.eps,
                 "residual.alpha": 1, "mlp.width": m.linear1.out_features, "mlp.activation": name,
                 "mlp.bias": bias})
    return keys, arrays


def _gpt2_parts(m):
    """The GPT-2 block's modules (HF GPT2Block names, or the same directly on the block), or None."""
    import torch
    attn, mlp = (getattr(m, name, None) for name in ("attn", "mlp"))
    attn = attn if isinstance(attn, torch.nn.Module) else m  # a block whose attn() is a method
    mlp = mlp if isinstance(mlp, torch.nn.Module) else m
    parts = {"ln_1": getattr(m, "ln_1", None), "ln_2": getattr(m, "ln_2", None),
             "c_attn": getattr(attn, "c_attn", None), "c_proj": getattr(attn, "c_proj", None),
             "c_fc": getattr(mlp, "c_fc", None), "mlp_proj": getattr(mlp, "c_proj", None) if mlp is not m else
             getattr(m, "mlp_proj", None)}
    return parts if all(v is not None for v in parts.values()) else None


def _gpt2_heads(m, heads):
    found = next(((f"{'attn.' if o is not m else ''}{a}", getattr(o, a)) for o in (getattr(m, "attn", None), m)
                  if o is not None for a in ("num_heads", "n_head", "heads")
                  if isinstance(getattr(o, a, None), int) and not isinstance(getattr(o, a), bool)
                  and getattr(o, a) > 0), None)
    H = _heads_given(found[0], found[1], heads) if found else heads
    if not H:
        raise check.usage_error("rcsim.from_torch", "heads", "not given, and the GPT-2 block does not say its number "
                                "of heads (attn.num_heads or attn.n_head); heads=H is needed")
    return H


def _bias_pair(first, second, widths):
    """Two biases of one sub-block: both None (no bias), or both arrays (a missing one as zeros)."""
    if first is None and second is None:
        return None, None
    return tuple(b if b is not None else np.zeros(n) for b, n in zip((first, second), widths))


def _gpt2_block(m, heads, activation=None):
    """A GPT-2 block (HF GPT2Block, nanoGPT's Block): pre-LN, causal, residual 1; c_attn maps d to
    3d = Q | K | V (nn.Linear or Conv1D, torch_parts.projection), head h owning columns
    h d_h .. (h+1) d_h - 1; the MLP c_fc -> activation (its module, or identified by running it) ->
    c_proj; biases where the block has them."""
    import torch
    p = _gpt2_parts(m)
    c_attn = p["c_attn"]
    d = c_attn.in_features if hasattr(c_attn, "in_features") else getattr(c_attn, "weight", np.zeros((0, 0))).shape[0]
    w, b = projection(c_attn, "attn.c_attn", d, 3 * d)
    H = _gpt2_heads(m, heads)
    if d % H:
        divisors = ", ".join(str(k) for k in range(1, d + 1) if d % k == 0)
        raise check.usage_error("rcsim.from_torch", "heads", f"{H} heads do not divide the width {d} of attn.c_attn; "
                                f"one of {divisors} is needed")
    w_o, b_o = projection(p["c_proj"], "attn.c_proj", d, d)
    b, b_o = _bias_pair(b, b_o, (3 * d, d))
    arrays = {}
    for i, name in enumerate("QKV"):
        arrays["W_" + name] = _heads_split(w[:, i * d:(i + 1) * d], H, 1)
        if b is not None:
            arrays["b_" + name] = b[i * d:(i + 1) * d].reshape(H, d // H)
    arrays["W_O"] = _heads_split(w_o, H, 0)
    if b_o is not None:
        arrays["b_O"] = b_o
    w_in, b_in = projection(p["c_fc"], "mlp.c_fc", d)
    w_out, b_out = projection(p["mlp_proj"], "mlp.c_proj", w_in.shape[1], d)
    b_in, b_out = _bias_pair(b_in, b_out, (w_in.shape[1], d))
    arrays.update({"W_in": w_in, "W_out": w_out})
    if b_in is not None:
        arrays.update({"b_in": b_in, "b_out": b_out})
    g1, s1, eps = layernorm(p["ln_1"], "ln_1", d)
    g2, s2, eps2 = layernorm(p["ln_2"], "ln_2", d)
    if eps != eps2:
        raise ValueError(f"rcsim.from_torch: ln_1's eps {eps} and ln_2's {eps2} differ; rcsim has one norm.eps")
    arrays.update({"norm_attn_gain": g1, "norm_attn_bias": s1, "norm_mlp_gain": g2, "norm_mlp_bias": s2})
    mlp = getattr(m, "mlp", None)
    act = activation or mlp_activation(mlp if isinstance(mlp, torch.nn.Module) else m, p["c_fc"], p["mlp_proj"], "mlp")
    keys = {"model.dim": d, "model.heads": H, "model.key_dim": d // H, "model.value_dim": d // H,
            "mask.type": "causal", "norm.type": "layernorm", "norm.position": "pre", "norm.eps": eps,
            "residual.alpha": 1, "mlp.width": w_in.shape[1], "mlp.activation": act, "mlp.bias": b_in is not None}
    return keys, arrays


def _one_block(m, heads, activation=None):
    import torch
    if isinstance(m, torch.nn.MultiheadAttention):
        keys, arrays = _mha(m, heads)
        return dict(keys, **{"norm.type": "none", "residual.alpha": 0}), arrays
    if isinstance(m, torch.nn.TransformerEncoderLayer):
        return _encoder_layer(m, heads)
    if _gpt2_parts(m) is not None:
        return _gpt2_block(m, heads, activation)
    raise check.usage_error("rcsim.from_torch", "module", f"a {type(m).__name__} is not a block rcsim knows; "
                            "nn.MultiheadAttention, nn.TransformerEncoderLayer, a GPT-2-style block (ln_1, attn.c_attn, "
                            "attn.c_proj, ln_2, mlp.c_fc, mlp.c_proj), or a stack of one of these is needed", True)


def from_torch(module, heads=None, tokens=None, activation=None):
    """rcsim's keys and weight arrays of a torch attention layer, block or stack of blocks, as a
    dict {"keys": {...}, "weights": {...}} that simulate, layer and gradients take as they are:
        bridge = rcsim.from_torch(block)                   # or a ModuleList, a GPT-2 model's .h, ...
        rcsim.layer(X, **bridge)                           # X(L) of the stack, X [N, d]
        rcsim.gradients(X, C, **bridge)                    # and its reverse pass
        rcsim.simulate(x0=X, keys=dict(bridge["keys"], **{"model.tokens": N}), weights=bridge["weights"])
    keys: model.dim, model.layers (the number of blocks), model.heads, model.key_dim/value_dim
    (d / H), and the block's normalisation, residual, MLP and mask keys; weights: W_Q, W_K, W_V
    [L, H, d, d_h], W_O [L, H, d_h, d], the biases, W_in/W_out, the LayerNorms' gains and biases
    (the head axis dropped for one head). heads: for a GPT-2 block that does not record it;
    tokens: adds model.tokens; activation: a GPT-2-style MLP's activation ('relu', 'gelu',
    'gelu_tanh', 'tanh') where the module does not say it (read from its activation module, e.g.
    nanoGPT's nn.GELU(), or identified by running the MLP once). The arrays are float64 copies
    (run the module in eval mode: dropout is not translated; tensors that require grad are read
    detached). What it cannot read raises one ValueError or TypeError naming the module and what is
    supported; heads, tokens and activation are checked (rcsim.ConfigError naming the argument: heads a
    whole number >= 1 that divides the width and agrees with the module's own count), and a module on
    the meta device or an empty stack is refused."""
    from .torch_parts import ACTIVATIONS
    who = "rcsim.from_torch"
    heads = None if heads is None else check.whole(who, "heads", heads)
    tokens = None if tokens is None else check.whole(who, "tokens", tokens)
    if activation is not None:
        check.one_of(who, "activation", activation, ACTIVATIONS)
    blocks = _blocks_checked(module)
    converted = [_one_block(b, heads, activation) for b in blocks]
    keys = converted[0][0]
    for i, (k, _) in enumerate(converted[1:], 1):
        if k != keys:
            diff = sorted(n for n in set(k) | set(keys) if k.get(n) != keys.get(n))
            raise ValueError(f"rcsim.from_torch: block {i} differs from block 0 in {', '.join(diff)}; rcsim's layers "
                             "share their keys")
    names = sorted({n for _, a in converted for n in a})
    for i, (_, a) in enumerate(converted):
        if set(a) != set(names):
            raise ValueError(f"rcsim.from_torch: block {i} lacks {', '.join(sorted(set(names) - set(a)))}")
    weights = {n: np.stack([a[n] for _, a in converted]) for n in names}
    if keys["model.heads"] == 1:  # rcsim's arrays have a head axis only with model.heads > 1
        weights = {n: (w[:, 0] if n in ("W_Q", "W_K", "W_V", "W_O", "b_Q", "b_K", "b_V") else w)
                   for n, w in weights.items()}
    keys = dict(keys, **{"model.layers": len(blocks)})
    if tokens is not None:
        keys["model.tokens"] = tokens
    return {"keys": keys, "weights": weights}


def _warn_training(model):
    """A RuntimeWarning when the model runs in training mode with dropout that acts (p > 0)."""
    import warnings
    import torch
    if not isinstance(model, torch.nn.Module):
        return
    active = [name or type(model).__name__ for name, m in model.named_modules()
              if m.training and (isinstance(m, torch.nn.modules.dropout._DropoutNd) and m.p > 0
                                 or isinstance(m, torch.nn.MultiheadAttention) and m.dropout > 0)]
    if active:
        shown = ", ".join(active[:3]) + (f" and {len(active) - 3} more" if len(active) > 3 else "")
        warnings.warn(f"rcsim.capture: the model is in training mode, so dropout acts ({shown}) and the hidden "
                      "states are random; call model.eval() first for the model's deterministic forward",
                      RuntimeWarning, stacklevel=3)


def capture(model, *inputs, blocks=None, batch_first=None, **kwargs):
    """The hidden states of a torch model, [batch, layers + 1, N, d] float64 NumPy: the input of its
    first block and the output of each block (forward hooks; the model runs once under
    torch.no_grad() as model(*inputs, **kwargs)), ready for rcsim.measures:
        m = rcsim.measures(rcsim.capture(model, input_ids))     # m["mu"]: [batch, layers + 1]
    blocks: the modules to hook (default: rcsim's search, as from_torch: .transformer.h, .h,
    .model.layers (Llama), .layers (nn.TransformerEncoder), a ModuleList or Sequential). A block's
    output that is a tuple (HF blocks) gives its first element. batch_first: whether the hidden
    states are [batch, N, d] (default, and HF) or [N, batch, d] (False; default for an
    nn.TransformerEncoder whose layers are not batch_first). An unbatched [N, d] is batch 1. A model in
    training mode with dropout (p > 0) runs as it is, with a RuntimeWarning (call model.eval()). A
    block output that is a dict (HF ModelOutput) gives its 'hidden_states' or 'last_hidden_state'; any
    other output, a block that changes the width or the tokens, a bad blocks= or inputs the model
    raises on: one rcsim.ConfigError naming the argument (blocks, inputs), never torch's own error."""
    import torch
    _warn_training(model)
    if not callable(model):
        raise check.usage_error("rcsim.capture", "model", f"a {type(model).__name__}; a torch model (callable as "
                                "model(*inputs)) is needed", True)
    if batch_first is not None:
        batch_first = check.flag("rcsim.capture", "batch_first", batch_first)
    found = _blocks_given(blocks) if blocks is not None else blocks_of(model)
    if not found:
        raise TypeError(f"rcsim.capture: no blocks found in a {type(model).__name__} (looked for .transformer.h, .h, "
                        ".model.layers, .layers, a ModuleList or Sequential); give blocks=[...]")
    if batch_first is None:
        attn = getattr(found[0], "self_attn", None)
        batch_first = getattr(attn, "batch_first", True) if isinstance(found[0], torch.nn.TransformerEncoderLayer) \
            else True
    states = [None] * (len(found) + 1)
    errors = []

    def keep(index):
        def hook(_module, _inputs, output):
            states[index] = _hidden(output, f"block {index - 1}'s output", errors)
        return hook

    def keep_input(_module, args):
        if args:
            states[0] = _hidden(args, "the first block's input", errors)

    handles = [found[0].register_forward_pre_hook(keep_input)]
    handles += [b.register_forward_hook(keep(i + 1)) for i, b in enumerate(found)]
    try:
        with torch.no_grad():
            model(*inputs, **kwargs)
    except Exception as e:  # noqa: BLE001 - what the model raises on these inputs: one line naming them
        if errors:
            raise errors[0] from None
        reason = " ".join(str(e).split()) or type(e).__name__
        raise check.usage_error("rcsim.capture", "inputs", f"the model raised {type(e).__name__} on them ({reason}); "
                                "inputs the model's forward takes are needed") from None
    finally:
        for h in handles:
            h.remove()
    if errors:
        raise errors[0]
    missing = [i for i, s in enumerate(states) if s is None]
    if missing:
        raise RuntimeError(f"rcsim.capture: no hidden state for {'the first block input' if missing[0] == 0 else ''}"
                           f"{', '.join(f'block {i - 1}' for i in missing if i)} (the model did not call them with "
                           "positional hidden states)")
    return _stacked(states, batch_first)


def _blocks_given(blocks):
    """The modules of capture's blocks=: a non-empty sequence of torch modules."""
    import torch
    if isinstance(blocks, torch.nn.Module) and not isinstance(blocks, (torch.nn.ModuleList, torch.nn.Sequential)):
        blocks = [blocks]
    if isinstance(blocks, (str, bytes, dict)) or not hasattr(blocks, "__iter__"):
        raise check.usage_error("rcsim.capture", "blocks", f"a {type(blocks).__name__}; a list of the model's block "
                                "modules (nn.Module) is needed", True)
    found = list(blocks)
    if not found:
        raise check.usage_error("rcsim.capture", "blocks", "an empty list; one or more of the model's block modules "
                                "are needed")
    for i, b in enumerate(found):
        if not isinstance(b, torch.nn.Module):
            raise check.usage_error("rcsim.capture", f"blocks[{i}]", f"a {type(b).__name__}; a torch nn.Module (a "
                                    "block of the model) is needed", True)
    return found


_HIDDEN_KEYS = ("hidden_states", "last_hidden_state")


def _hidden(value, where, errors):
    """The hidden-state tensor of a block's output or input, detached: a tensor, the first element of a
    tuple or list (HF blocks), or a dict's (HF ModelOutput's) 'hidden_states' / 'last_hidden_state'.
    Anything else: None, with one ConfigError naming the block appended to `errors` (raised after the
    forward, never from inside the model)."""
    import torch
    if isinstance(value, (tuple, list)) and value:
        value = value[0]
    elif isinstance(value, dict):
        value = next((value[k] for k in _HIDDEN_KEYS if k in value), value)
    if isinstance(value, torch.Tensor):
        if value.is_complex():
            errors.append(check.usage_error("rcsim.capture", "blocks", f"{where} is a complex tensor; real hidden "
                                            "states are needed", True))
            return None
        return value.detach()
    shown = (f"a dict with keys {', '.join(map(repr, list(value)[:6]))}" if isinstance(value, dict)
             else f"an empty {type(value).__name__}" if isinstance(value, (tuple, list)) else f"a {type(value).__name__}")
    errors.append(check.usage_error("rcsim.capture", "blocks", f"{where} is {shown}; a tensor [batch, N, d], a tuple "
                                    f"or list whose first element is one, or a dict with {' or '.join(_HIDDEN_KEYS)} "
                                    "is needed (give blocks= the modules that return the hidden states)", True))
    return None


def _stacked(states, batch_first):
    """The hidden states as one float64 array [batch, layers + 1, N, d]; every state [N, d] or
    [batch, N, d] of one shape (a block that changes the width or the tokens is refused, named)."""
    import torch
    out = []
    for i, s in enumerate(states):
        where = "the first block's input" if i == 0 else f"block {i - 1}'s output"
        if s.ndim not in (2, 3):
            raise check.usage_error("rcsim.capture", "blocks", f"{where} has shape {list(s.shape)}; hidden states "
                                    "[N, d] or [batch, N, d] are needed")
        a = s.to(torch.float64).cpu().numpy()
        if a.ndim == 2:
            a = a[None]
        elif not batch_first:
            a = a.transpose(1, 0, 2)
        if out and a.shape != out[0].shape:
            raise check.usage_error("rcsim.capture", "blocks", f"{where} has shape [batch, N, d] = {list(a.shape)}, "
                                    f"the first block's input {list(out[0].shape)}: a block changes the width or the "
                                    "tokens; blocks that keep [batch, N, d] are needed (give blocks= of those)")
        out.append(a)
    return np.stack(out, axis=1)
