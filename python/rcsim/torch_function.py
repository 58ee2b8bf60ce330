"""rcsim.torch: a stack of rcsim blocks as a torch operation (issue 48, item 4).

    Y = rcsim.torch.stack(X, weights, layers=2, mask=None, keys=None, **sections)

is rcsim.layer(X, weights, ...) as a torch.autograd.Function: X(layers) as a tensor with a
grad_fn whose backward is rcsim's hand-written reverse pass (rcsim.gradients), so that
loss.backward() fills X.grad and the .grad of every weight tensor that requires grad, equal to
torch autograd of the same stack (tests/python/check_torch_function.py). `rcsim.torch` is this
module, imported (and torch with it) on first use; `import rcsim` does not import torch.

X: a float64 or float32 tensor [N, d], or [B, N, d] (each matrix through the same stack; the
  weight gradients summed over the batch). float32 runs rcsim in float32 (run.precision =
  float32); the output has X's dtype and device (rcsim computes on the CPU).
weights: a dict as rcsim.layer's: arrays named W_Q, W_K, W_V, W_O, W_in, W_gate, W_out, b_in,
  b_out, b_Q, b_K, b_V, b_O, norm_<attn|attn_out|mlp|mlp_out>_<gain|bias>, logit_bias, in the
  shapes of weights.file (docs/reference/file-formats.md): one array for every layer ([d, d_k],
  [H, d, d_k], ...) or a leading layer axis [L, ...]; other entries are keys of [weights]
  (redraw_every, shared). A torch tensor must have X's dtype; it gets a .grad of its own shape
  (a weight shared by the layers: the sum over the layers that use it). NumPy arrays are
  constants. logit_bias has no gradient in rcsim (a tensor that requires grad is refused).
mask, layers, keys, **sections: as rcsim.layer (mask.type = causal, norm={...}, mlp={...}).
Weights not given are rcsim's draws (constants). Double backward is not supported. Bad
arguments raise rcsim.ConfigError naming the argument, as the rest of the package does.
"""
import numpy as np
import torch
from torch.autograd.function import once_differentiable

from . import _validate as check
from . import engine

__all__ = ["stack", "StackFunction"]

WHO = "rcsim.torch.stack"
_NORM_SLOTS = {"attn": 0, "attn_out": 1, "mlp": 2, "mlp_out": 3}  # rcsim.gradients' norm_gain/norm_bias slots
_DTYPES = {torch.float64: "float64", torch.float32: "float32"}


def _gradient_of(name, g):
    """rcsim.gradients' array [layers, ...] for the weight `name`, or None where it has none."""
    if name.startswith("norm_"):
        stem, kind = name[5:].rsplit("_", 1)
        table = g.get(f"norm_{kind}")
        return None if table is None else table[:, _NORM_SLOTS[stem]]
    return g.get(name)


def _blocks(layers, redraw_every, shared):
    """The block of a per-layer array [L, ...] that layer t uses (weights.redraw_every, shared)."""
    if shared:
        return [0] * layers
    return [t - t % redraw_every for t in range(layers)]


def _fold(name, per_layer, shape, blocks):
    """The gradient of the array the user gave (`shape`) from the per-layer gradients [layers, ...]:
    summed over the layers for one shared array, else added into the block each layer uses."""
    each = int(np.prod(per_layer.shape[1:]))
    size = int(np.prod(shape))
    if size == each:
        return per_layer.sum(axis=0).reshape(shape)
    if len(shape) and size == shape[0] * each:
        out = np.zeros((shape[0], each))
        for t, b in enumerate(blocks):
            out[b] += per_layer[t].reshape(-1)
        return out.reshape(shape)
    raise RuntimeError(f"{WHO}: the gradient of weights['{name}'] has shape {per_layer.shape}, which does not "
                       f"fit the array's {tuple(shape)} (please report)")


def _key(keys, sections, section, key):
    """The value given for section.key in `keys` ({"section.key": v}) or the section dict, or None."""
    value = (keys or {}).get(f"{section}.{key}") if isinstance(keys, dict) else None
    part = sections.get(section)
    if isinstance(part, dict) and key in part:
        value = part[key]
    return value


def _rcsim_gradients(m, cotangent, weights, fixed):
    """rcsim.gradients of one matrix, its errors naming rcsim.torch.stack."""
    return engine._gradients(WHO, m, cotangent, weights, fixed["mask"], fixed["layers"], fixed["keys"],
                             fixed["sections"])


class StackFunction(torch.autograd.Function):
    """The autograd Function of rcsim.torch.stack: apply(spec, X, *tensors), spec = (names of the
    weight tensors, the constant arguments of rcsim.layer, blocks)."""

    @staticmethod
    def forward(ctx, spec, X, *tensors):
        names, fixed, blocks = spec
        weights = dict(fixed["weights"], **{n: t.detach().cpu().double().numpy() for n, t in zip(names, tensors)})
        x = X.detach().cpu().double().numpy()
        # X(layers) of the reverse pass's own forward (a zero cotangent): the same numbers as rcsim.layer,
        # without its run file (about 1 ms here, rcsim.layer about 50 ms).
        out = np.stack([_rcsim_gradients(m, np.zeros_like(m), weights, fixed)["X"]
                        for m in x.reshape((-1,) + x.shape[-2:])])
        ctx.spec, ctx.weights, ctx.x = spec, weights, x
        ctx.shapes = [tuple(t.shape) for t in tensors]
        ctx.like = [(t.dtype, t.device) for t in tensors]
        return torch.from_numpy(out.reshape(x.shape)).to(dtype=X.dtype, device=X.device)

    @staticmethod
    @once_differentiable
    def backward(ctx, dY):
        names, fixed, blocks = ctx.spec
        x, weights = ctx.x, ctx.weights
        c = dY.detach().cpu().double().numpy().reshape((-1,) + x.shape[-2:])
        dx = np.zeros_like(c)
        grads = [np.zeros(s) for s in ctx.shapes]
        for i, m in enumerate(x.reshape((-1,) + x.shape[-2:])):
            g = _rcsim_gradients(m, c[i], weights, fixed)
            dx[i] = g["dX"][0]
            for k, name in enumerate(names):
                if ctx.needs_input_grad[2 + k]:
                    per_layer = _gradient_of(name, g)
                    if per_layer is None:
                        raise RuntimeError(f"{WHO}: rcsim.gradients returned no gradient for weights['{name}'] "
                                           "(please report)")
                    grads[k] += _fold(name, per_layer, ctx.shapes[k], blocks)
        dX = torch.from_numpy(dx.reshape(x.shape)).to(dtype=dY.dtype, device=dY.device) \
            if ctx.needs_input_grad[1] else None
        out = [torch.from_numpy(a).to(dtype=dt, device=dev) if ctx.needs_input_grad[2 + k] else None
               for k, (a, (dt, dev)) in enumerate(zip(grads, ctx.like))]
        return (None, dX, *out)


def stack(X, weights=None, layers=None, mask=None, keys=None, **sections):
    """X(layers) of the rcsim stack (rcsim.layer's arguments) as a differentiable torch tensor;
    loss.backward() runs rcsim's reverse pass (rcsim.gradients). See the module's docstring.
    Example, two post-LN layers with a causal mask, gradients for W_Q and X:
        Wq = torch.randn(4, 4, dtype=torch.float64, requires_grad=True)
        Y = rcsim.torch.stack(X, {"W_Q": Wq, "W_K": Wk, "W_V": Wv}, layers=2,
                              mask={"type": "causal"}, norm={"type": "layernorm"})
        Y.square().sum().backward()   # Wq.grad, X.grad
    """
    if not isinstance(X, torch.Tensor):
        raise check.usage_error(WHO, "X", f"a {type(X).__name__}; a torch tensor [N, d] or [B, N, d] (float64 or "
                                "float32) is needed (rcsim.layer takes NumPy arrays)", True)
    if X.dtype not in _DTYPES:
        raise check.usage_error(WHO, "X", f"a tensor of dtype {X.dtype}; float64 or float32 is needed", True)
    if X.dim() not in (2, 3) or X.numel() == 0:
        raise check.usage_error(WHO, "X", f"shape {tuple(X.shape)}; a token matrix [N, d] or a batch [B, N, d] "
                                "with no empty axis is needed")
    precision = _DTYPES[X.dtype]
    given = _key(keys, sections, "run", "precision")
    if given is not None and str(given) != precision:
        raise check.usage_error(WHO, f"run.precision = {given}", f"X is {precision}, which sets the precision; "
                                "leave the key out or give X in the dtype wanted")
    if given is None:
        keys = dict(check.mapping(WHO, "keys", keys) or {}, **{"run.precision": precision})
    weights = dict(check.mapping(WHO, "weights", weights) or {})
    names, tensors, fixed_weights = [], [], {}
    for name, value in weights.items():
        if not isinstance(value, torch.Tensor):
            fixed_weights[name] = value
            continue
        if not engine._is_array_name(name):
            raise check.usage_error(WHO, f"weights['{name}']", "a tensor under a name that is not an array of "
                                    "rcsim.layer (W_Q, W_K, W_V, W_O, W_in, W_gate, W_out, b_in, b_out, b_Q, b_K, b_V, "
                                    "b_O, norm_<attn|attn_out|mlp|mlp_out>_<gain|bias>, logit_bias)")
        if value.dtype != X.dtype:
            raise check.usage_error(WHO, f"weights['{name}']", f"dtype {value.dtype}; X's dtype {X.dtype} is needed "
                                    "(convert it with .to(X.dtype))", True)
        if name == "logit_bias":
            if value.requires_grad:
                raise check.usage_error(WHO, "weights['logit_bias']", "requires grad, but rcsim's reverse pass has "
                                        "no gradient for it; pass it detached (.detach()) or as a NumPy array")
            fixed_weights[name] = value.detach().cpu().double().numpy()
            continue
        names.append(name)
        tensors.append(value)
    redraw = _key(keys, {"weights": weights}, "weights", "redraw_every")
    shared = _key(keys, {"weights": weights}, "weights", "shared")
    n_layers = layers if layers is not None else (keys or {}).get("model.layers",
                                                                   (sections.get("model") or {}).get("layers", 1)
                                                                   if isinstance(sections.get("model"), dict) else 1)
    n_layers = check.whole(WHO, "layers", int(n_layers) if str(n_layers).strip().isdigit() else n_layers)
    redraw = 1 if redraw is None else check.whole(WHO, "weights.redraw_every", int(redraw)
                                                  if str(redraw).strip().isdigit() else redraw)
    shared = shared in (True, "true", 1, "1")
    blocks = _blocks(n_layers, redraw, shared)
    fixed = {"weights": fixed_weights, "mask": mask, "layers": layers, "keys": keys, "sections": sections}
    return StackFunction.apply((tuple(names), fixed, blocks), X, *tensors)
