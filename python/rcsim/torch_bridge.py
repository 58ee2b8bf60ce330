"""A bridge from PyTorch: rcsim.from_torch(module) gives rcsim's keys and weight arrays of a torch
attention layer or block stack, and rcsim.capture(model, inputs) a torch model's hidden states
after each block, ready for rcsim.measures (hooks, in the spirit of TransformerLens's
run_with_cache). torch is imported only by the caller's objects: this module needs it only for
isinstance checks, imported on use.

Supported (docs/user/python.md, "From PyTorch"):
  torch.nn.MultiheadAttention (embed_dim = kdim = vdim, with or without biases; no bias_k/bias_v,
    no add_zero_attn): pure attention, X(1) = MHA(X, X, X);
  torch.nn.TransformerEncoderLayer (relu or gelu, norm_first False: post-LN, True: pre-LN);
  a GPT-2-style block (HF GPT2Block: ln_1, attn.c_attn, attn.c_proj, ln_2, mlp.c_fc, mlp.c_proj;
    Conv1D weights [in, out]; or the same names directly on the block): pre-LN, causal, gelu_tanh;
  a stack of any one of these: a list, nn.ModuleList, nn.Sequential, nn.TransformerEncoder, or a
    model holding its blocks as .transformer.h or .h (HF GPT-2).
Dropout is not translated: the bridge describes the module in eval mode.
"""
import numpy as np


def _array(t):
    """A tensor or parameter as float64 NumPy (None stays None)."""
    if t is None:
        return None
    return t.detach().cpu().to(dtype=__import__("torch").float64).numpy() if hasattr(t, "detach") else \
        np.asarray(t, dtype=float)


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


def _heads_split(w, heads, axis):
    """A [d, H d_h] projection (axis=1: columns of head h) as [H, d, d_h], or a [H d_h, d] one
    (axis=0: rows) as [H, d_h, d]."""
    if axis == 1:
        d, hd = w.shape
        return w.reshape(d, heads, hd // heads).transpose(1, 0, 2)
    hd, d = w.shape
    return w.reshape(heads, hd // heads, d)


def _mha(m):
    """nn.MultiheadAttention: W_Q, W_K, W_V [H, d, d_h] (the heads' column blocks of
    in_proj_weight's transpose), W_O [H, d_h, d] (out_proj.weight's transpose split by rows), the
    biases b_Q, b_K, b_V [H, d_h] and b_O [d] when the layer has them."""
    if not getattr(m, "_qkv_same_embed_dim", True) or m.bias_k is not None or m.add_zero_attn:
        raise ValueError("rcsim.from_torch: nn.MultiheadAttention with kdim/vdim other than embed_dim, bias_k/bias_v "
                         "or add_zero_attn has no rcsim counterpart (self-attention X -> MHA(X, X, X) is supported)")
    d, H = m.embed_dim, m.num_heads
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


def _layernorm(ln, stem):
    """A LayerNorm's gain and bias as rcsim's norm arrays (ones and zeros without affine parameters)."""
    d = ln.normalized_shape[-1]
    gain = _array(ln.weight) if ln.weight is not None else np.ones(d)
    bias = _array(ln.bias) if getattr(ln, "bias", None) is not None else np.zeros(d)
    return {stem + "_gain": gain, stem + "_bias": bias}


def _encoder_layer(m):
    """nn.TransformerEncoderLayer: post-LN (norm_first False) or pre-LN, residual weight 1, MLP
    linear1 -> relu/gelu -> linear2 (W_in = linear1.weight^T [d, m], W_out = linear2.weight^T)."""
    keys, arrays = _mha(m.self_attn)
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
    arrays.update(_layernorm(m.norm1, "norm_attn"))
    arrays.update(_layernorm(m.norm2, "norm_mlp"))
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


def _gpt2_block(m, heads):
    """A GPT-2 block: pre-LN, causal, residual 1, Conv1D weights [in, out] (c_attn [d, 3d] = Q | K | V,
    head h owning columns h d_h .. (h+1) d_h - 1), gelu_tanh MLP of width c_fc's."""
    p = _gpt2_parts(m)
    w, b = _array(p["c_attn"].weight), _array(p["c_attn"].bias)
    d = w.shape[0]
    H = heads or next((getattr(o, a) for o in (getattr(m, "attn", None), m) if o is not None
                       for a in ("num_heads", "n_head", "heads") if isinstance(getattr(o, a, None), int)), None)
    if not H:
        raise ValueError("rcsim.from_torch: the GPT-2 block does not say its number of heads (attn.num_heads); "
                         "give heads=H")
    arrays = {}
    for i, name in enumerate("QKV"):
        arrays["W_" + name] = _heads_split(w[:, i * d:(i + 1) * d], H, 1)
        arrays["b_" + name] = b[i * d:(i + 1) * d].reshape(H, d // H)
    arrays["W_O"] = _heads_split(_array(p["c_proj"].weight), H, 0)
    arrays["b_O"] = _array(p["c_proj"].bias)
    arrays.update({"W_in": _array(p["c_fc"].weight), "b_in": _array(p["c_fc"].bias),
                   "W_out": _array(p["mlp_proj"].weight), "b_out": _array(p["mlp_proj"].bias)})
    arrays.update(_layernorm(p["ln_1"], "norm_attn"))
    arrays.update(_layernorm(p["ln_2"], "norm_mlp"))
    keys = {"model.dim": d, "model.heads": H, "model.key_dim": d // H, "model.value_dim": d // H,
            "mask.type": "causal", "norm.type": "layernorm", "norm.position": "pre", "norm.eps": p["ln_1"].eps,
            "residual.alpha": 1, "mlp.width": arrays["W_in"].shape[1], "mlp.activation": "gelu_tanh", "mlp.bias": True}
    return keys, arrays


def _one_block(m, heads):
    import torch
    if isinstance(m, torch.nn.MultiheadAttention):
        keys, arrays = _mha(m)
        return dict(keys, **{"norm.type": "none", "residual.alpha": 0}), arrays
    if isinstance(m, torch.nn.TransformerEncoderLayer):
        return _encoder_layer(m)
    if _gpt2_parts(m) is not None:
        return _gpt2_block(m, heads)
    raise TypeError(f"rcsim.from_torch: a {type(m).__name__} is not a block rcsim knows: nn.MultiheadAttention, "
                    "nn.TransformerEncoderLayer, a GPT-2-style block (ln_1, attn.c_attn, attn.c_proj, ln_2, mlp.c_fc, "
                    "mlp.c_proj), or a stack of one of these")


def from_torch(module, heads=None, tokens=None):
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
    tokens: adds model.tokens. The arrays are float64 copies (run the module in eval mode: dropout
    is not translated)."""
    blocks = blocks_of(module) or [module]
    converted = [_one_block(b, heads) for b in blocks]
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


def capture(model, *inputs, blocks=None, batch_first=None, **kwargs):
    """The hidden states of a torch model, [batch, layers + 1, N, d] float64 NumPy: the input of its
    first block and the output of each block (forward hooks; the model runs once under
    torch.no_grad() as model(*inputs, **kwargs)), ready for rcsim.measures:
        m = rcsim.measures(rcsim.capture(model, input_ids))     # m["mu"]: [batch, layers + 1]
    blocks: the modules to hook (default: rcsim's search, as from_torch: .transformer.h, .h,
    .model.layers (Llama), .layers (nn.TransformerEncoder), a ModuleList or Sequential). A block's
    output that is a tuple (HF blocks) gives its first element. batch_first: whether the hidden
    states are [batch, N, d] (default, and HF) or [N, batch, d] (False; default for an
    nn.TransformerEncoder whose layers are not batch_first). An unbatched [N, d] is batch 1."""
    import torch
    found = list(blocks) if blocks is not None else blocks_of(model)
    if not found:
        raise TypeError(f"rcsim.capture: no blocks found in a {type(model).__name__} (looked for .transformer.h, .h, "
                        ".model.layers, .layers, a ModuleList or Sequential); give blocks=[...]")
    if batch_first is None:
        attn = getattr(found[0], "self_attn", None)
        batch_first = getattr(attn, "batch_first", True) if isinstance(found[0], torch.nn.TransformerEncoderLayer) \
            else True
    states = [None] * (len(found) + 1)

    def first(value):
        return value[0] if isinstance(value, (tuple, list)) else value

    def keep(index):
        def hook(_module, _inputs, output):
            states[index] = first(output).detach()
        return hook

    def keep_input(_module, args):
        if args:
            states[0] = first(args).detach()

    handles = [found[0].register_forward_pre_hook(keep_input)]
    handles += [b.register_forward_hook(keep(i + 1)) for i, b in enumerate(found)]
    try:
        with torch.no_grad():
            model(*inputs, **kwargs)
    finally:
        for h in handles:
            h.remove()
    missing = [i for i, s in enumerate(states) if s is None]
    if missing:
        raise RuntimeError(f"rcsim.capture: no hidden state for {'the first block input' if missing[0] == 0 else ''}"
                           f"{', '.join(f'block {i - 1}' for i in missing if i)} (the model did not call them with "
                           "positional hidden states)")
    out = []
    for s in states:
        a = s.to(torch.float64).cpu().numpy()
        if a.ndim == 2:
            a = a[None]
        elif not batch_first:
            a = a.transpose(1, 0, 2)
        out.append(a)
    return np.stack(out, axis=1)
