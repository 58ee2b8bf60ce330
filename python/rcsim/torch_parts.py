"""The parts of a torch block as rcsim reads them (rcsim.from_torch, torch_bridge.py): a projection in
either layout (nn.Linear's weight [out, in], HF GPT-2's Conv1D [in, out]), a LayerNorm's eps (read,
or measured when the module does not store it, as nanoGPT's LayerNorm), and an MLP's activation
(read from its module, or identified by running the MLP once when it calls a function).

Each refuses what it cannot read with one ValueError naming the module and what is supported.
"""
import numpy as np

# rcsim's mlp.activation of the activation modules rcsim reads (torch's and HF transformers').
TANH_GELU_CLASSES = ("NewGELUActivation", "GELUTanh", "PytorchGELUTanh", "FastGELUActivation", "GELUPytorchTanh")
EXACT_GELU_CLASSES = ("GELUActivation",)
SUPPORTED_ACTIVATIONS = ("nn.GELU (approximate 'none': gelu, 'tanh': gelu_tanh), nn.ReLU, nn.Tanh, HF's "
                         "NewGELUActivation/GELUActivation, or the same called as a function in the MLP's forward")


def array(t):
    """A tensor or parameter as float64 NumPy (None stays None)."""
    if t is None:
        return None
    if hasattr(t, "detach"):
        import torch
        return t.detach().cpu().to(dtype=torch.float64).numpy()
    return np.asarray(t, dtype=float)


def projection(module, name, n_in, n_out=None):
    """The weight [in, out] and bias [out] (or None) of a projection called `name`: nn.Linear
    (weight [out, in], transposed here) or a Conv1D-style module (weight [in, out], as HF GPT-2's).
    n_in: its input width; n_out: its output width when known (checked)."""
    import torch
    weight = getattr(module, "weight", None)
    if not hasattr(weight, "shape") or len(weight.shape) != 2:
        raise ValueError(f"rcsim.from_torch: {name} is a {type(module).__name__} without a 2-d weight; supported: "
                         "nn.Linear (weight [out, in]) or a Conv1D as HF GPT-2's (weight [in, out])")
    w = array(weight)
    w = w.T if isinstance(module, torch.nn.Linear) else w
    if w.shape[0] != n_in or (n_out is not None and w.shape[1] != n_out):
        layout = "nn.Linear [out, in]" if isinstance(module, torch.nn.Linear) else "Conv1D [in, out]"
        want = f"[{n_in}, {n_out if n_out is not None else 'any'}]"
        raise ValueError(f"rcsim.from_torch: {name} ({type(module).__name__}, read as {layout}) maps "
                         f"{w.shape[0]} -> {w.shape[1]}; expected {want} (in -> out)")
    return w, array(getattr(module, "bias", None))


def _eval_call(module, *args):
    """module(*args) under no_grad in eval mode (no dropout), the modules' modes restored after."""
    import torch
    modes = {m: m.training for m in module.modules()}
    try:
        module.eval()
        with torch.no_grad():
            return module(*args)
    finally:
        for m, mode in modes.items():
            m.training = mode


def _reference(module):
    """dtype, device and the relative tolerance of a check run in the module's own precision."""
    import torch
    p = next(module.parameters(), None)
    if p is None:  # plain tensors held as attributes (not registered as parameters)
        p = next((v for m in module.modules() for v in vars(m).values()
                  if isinstance(v, torch.Tensor) and v.is_floating_point()), None)
    dtype = p.dtype if p is not None else torch.float64
    return dtype, (p.device if p is not None else "cpu"), (1e-9 if dtype == torch.float64 else 1e-4)


def layernorm(ln, name, d):
    """A LayerNorm's gain and bias (ones and zeros without affine parameters) and eps: nn.LayerNorm's
    eps, else measured (nanoGPT's LayerNorm(ndim, bias) calls F.layer_norm with 1e-5 and stores no
    eps): on tokens of variance s^2 = 1e-6 the output's scale is s / sqrt(s^2 + eps); the eps found
    is then checked on ordinary tokens, so that a module that is no LayerNorm is refused."""
    import torch
    weight, bias = getattr(ln, "weight", None), getattr(ln, "bias", None)
    gain = array(weight) if weight is not None else np.ones(d)
    shift = array(bias) if bias is not None else np.zeros(d)
    if gain.shape != (d,) or shift.shape != (d,):
        raise ValueError(f"rcsim.from_torch: {name} ({type(ln).__name__}) has weight/bias of shape {gain.shape}/"
                         f"{shift.shape}; a LayerNorm over the last axis of width {d} is supported")
    eps = getattr(ln, "eps", None)
    if isinstance(eps, (int, float)) and isinstance(ln, torch.nn.LayerNorm):
        return gain, shift, float(eps)
    dtype, device, tol = _reference(ln)
    rng = np.random.default_rng(48)
    z = rng.standard_normal((4, d))
    z = (z - z.mean(-1, keepdims=True)) / z.std(-1, keepdims=True)  # mean 0, (population) variance 1

    def run(x):
        try:
            out = _eval_call(ln, torch.as_tensor(x, dtype=dtype, device=device))
        except Exception as e:  # noqa: BLE001 (a module that cannot run on [4, d] tokens: one message)
            raise ValueError(f"rcsim.from_torch: {name} ({type(ln).__name__}) cannot be run on [4, {d}] tokens "
                             f"to read its eps ({type(e).__name__}: {' '.join(str(e).split())}); supported: "
                             "nn.LayerNorm or a module that computes it (nanoGPT's LayerNorm)") from None
        return array(out)

    s = 1e-3
    keep = np.abs(gain) > 1e-3 * max(np.abs(gain).max(), 1e-300)
    ratio = np.median(((run(s * z) - shift) / np.where(keep, gain, 1))[:, keep] / z[:, keep])
    measured = (s / ratio) ** 2 - s ** 2 if np.isfinite(ratio) and ratio > 0 else None
    if measured is not None and not isinstance(eps, (int, float)):
        eps = float(f"{max(measured, 0.0):.6g}")
    x = 3.0 * rng.standard_normal((4, d)) + 1.0
    if eps is not None:
        centred = x - x.mean(-1, keepdims=True)
        want = centred / np.sqrt((centred ** 2).mean(-1, keepdims=True) + eps) * gain + shift
        got = run(x)
        if np.max(np.abs(got - want)) <= tol * max(np.max(np.abs(want)), 1.0):
            return gain, shift, float(eps)
    raise ValueError(f"rcsim.from_torch: {name} ({type(ln).__name__}) does not compute a LayerNorm "
                     "(x - mean) / sqrt(var + eps) * weight + bias over the last axis; supported: nn.LayerNorm or a "
                     "module that computes it (nanoGPT's LayerNorm)")


def _activation_of_module(m):
    """rcsim's mlp.activation of an activation module, None for a module that is none, or a text
    naming an activation module rcsim has no counterpart of."""
    import torch
    kind = type(m).__name__
    if isinstance(m, torch.nn.GELU):
        return {"none": "gelu", "tanh": "gelu_tanh"}.get(m.approximate, f"nn.GELU(approximate={m.approximate!r})")
    if isinstance(m, torch.nn.ReLU):
        return "relu"
    if isinstance(m, torch.nn.Tanh):
        return "tanh"
    if kind in TANH_GELU_CLASSES:
        return "gelu_tanh"
    if kind in EXACT_GELU_CLASSES:
        return "gelu"  # F.gelu, or its erf formula in Python (use_gelu_python)
    if isinstance(m, (torch.nn.Linear, torch.nn.Dropout, torch.nn.LayerNorm)) or hasattr(m, "weight"):
        return None
    if "activation" in kind.lower() or kind in ("SiLU", "Sigmoid", "Mish", "ELU", "LeakyReLU", "Softplus", "GLU",
                                                "QuickGELUActivation", "SiLUActivation"):
        return f"{kind}()"
    return None


ACTIVATIONS = ("relu", "gelu", "gelu_tanh", "tanh")


def _apply(name, h):
    import math
    from scipy.special import erf
    if name == "relu":
        return np.maximum(h, 0.0)
    if name == "gelu":
        return 0.5 * h * (1.0 + erf(h / math.sqrt(2.0)))
    if name == "gelu_tanh":
        return 0.5 * h * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (h + 0.044715 * h ** 3)))
    return np.tanh(h)


def mlp_activation(mlp, c_fc, c_proj, name):
    """rcsim's mlp.activation of a GPT-2-style MLP: read from an activation module among its children
    (nanoGPT's mlp.gelu = nn.GELU(), HF's mlp.act); without one (an activation called as a function in
    forward), the MLP runs once on random tokens (eval mode, no_grad) and the activation whose
    c_proj(act(c_fc(x))) it equals is the one; none or several: ValueError (give activation=)."""
    import torch
    found = [(n, _activation_of_module(m)) for n, m in mlp.named_children() if m is not c_fc and m is not c_proj]
    found = [(n, a) for n, a in found if a is not None]
    if len(found) == 1:
        child, act = found[0]
        if act not in ACTIVATIONS:
            raise ValueError(f"rcsim.from_torch: {name}.{child} is {act}, which rcsim has no counterpart of; supported: "
                             f"{SUPPORTED_ACTIVATIONS}")
        return act
    if len(found) > 1:
        raise ValueError(f"rcsim.from_torch: {name} has several activation modules ({', '.join(n for n, _ in found)}); "
                         "give activation='relu' | 'gelu' | 'gelu_tanh' | 'tanh'")
    dtype, device, tol = _reference(mlp)
    d = (c_fc.in_features if isinstance(c_fc, torch.nn.Linear) else c_fc.weight.shape[0])
    x = np.random.default_rng(48).standard_normal((1, 16, d))
    try:
        t = torch.as_tensor(x, dtype=dtype, device=device)
        out = array(_eval_call(mlp, t))
        hidden = array(_eval_call(c_fc, t))
    except Exception as e:  # noqa: BLE001 (a forward that needs other arguments: one message, not a traceback)
        raise ValueError(f"rcsim.from_torch: {name} ({type(mlp).__name__}) has no activation module and cannot be run "
                         f"on [1, 16, {d}] tokens to identify it ({type(e).__name__}: {e}); give activation=") from None
    errors = {}
    for act in ACTIVATIONS:
        try:
            want = array(_eval_call(c_proj, torch.as_tensor(_apply(act, hidden), dtype=dtype, device=device)))
        except Exception:  # noqa: BLE001
            continue
        errors[act] = float(np.max(np.abs(out - want)) / max(np.max(np.abs(out)), 1e-300)) \
            if out.shape == want.shape else np.inf
    best = sorted(errors, key=errors.get)
    if best and errors[best[0]] <= tol and all(errors[a] > 10 * errors[best[0]] for a in best[1:]):
        return best[0]
    raise ValueError(f"rcsim.from_torch: the activation of {name} ({type(mlp).__name__}) is not one of "
                     f"{', '.join(ACTIVATIONS)} (running it once matched none alone; relative errors "
                     f"{', '.join(f'{a} {e:.1e}' for a, e in errors.items())}); supported: {SUPPORTED_ACTIVATIONS}")
