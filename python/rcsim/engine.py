"""rcsim.engine: runs in this process, through the compiled engine rcsim._engine (pybind11,
sim/python/engine_module.cpp). The configuration is parsed and validated by the same code as
`rcsim run` (a bad key raises ConfigError naming it); the engine writes the run file into memory
(an HDF5 file image, nothing on disk) and open_run reads it, so the Dataset equals open_run of
the file `rcsim run` writes for the same configuration, value for value (tests/python/check_simulate.py).
"""
import os
import shutil

from . import _validate as check
from .files import open_run


_ENGINE = []


def _engine():
    """The compiled module rcsim._engine, beside this package's files: put there by
    `pip install .` / `pip install -e .` (pyproject.toml), `cmake --install`, or the build tree's
    copy of the package (PYTHONPATH=build/python). Nothing else is searched."""
    if not _ENGINE:
        try:
            from . import _engine as engine
        except ImportError as e:
            raise ImportError(
                "rcsim.simulate needs the compiled engine rcsim._engine, which is not beside this package "
                f"({os.path.dirname(os.path.abspath(__file__))}): install the package with `pip install .` or "
                "`pip install -e .` from the repository, or use the build tree's package "
                "(`bash scripts/setup.sh`, then PYTHONPATH=build/python; Debian: pybind11-dev, python3-dev)") from e
        _ENGINE.append(engine)
    return _ENGINE[0]


def executable():
    """The rcsim executable: bin/rcsim inside this package (pip install, the build tree's package),
    else `rcsim` on PATH (cmake --install). Raises FileNotFoundError if neither exists."""
    inside = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "rcsim")
    if os.path.isfile(inside) and os.access(inside, os.X_OK):
        return inside
    on_path = shutil.which("rcsim")
    if on_path and not _is_entry_point(on_path):
        return on_path
    raise FileNotFoundError("the rcsim executable is neither in the package (rcsim/bin/rcsim) nor on PATH: "
                            "install with `pip install .` or `cmake --install build`")


def _is_entry_point(path):
    """True for the console script pip writes (a Python file that imports rcsim._cli), which
    must not be taken for the executable (it would call itself)."""
    try:
        with open(path, "rb") as f:
            return f.read(2) == b"#!" and b"rcsim._cli" in f.read(4096)
    except OSError:
        return False


def _value_text(key, value, who="rcsim.simulate"):
    """A Python value as the text the configuration parser reads."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)  # shortest text that reads back to the same double
    if isinstance(value, (list, tuple)):
        return ", ".join(_value_text(key, v, who) for v in value)
    if isinstance(value, (str, int)) or type(value).__name__ == "Fraction":
        return str(value)
    if hasattr(value, "item"):  # NumPy scalar
        return _value_text(key, value.item(), who)
    raise check.usage_error(who, f"key '{key}'", f"a {type(value).__name__} cannot be a value; a number, "
                            "bool, string or a list of them is needed", True)


def configuration_arguments(keys=None, who="rcsim.simulate", **sections):
    """The keys of simulate() as command-line arguments ['--model.dim=16', ...]."""
    flat = dict(check.mapping(who, "keys", keys) or {})
    for section, values in sections.items():
        if not isinstance(values, dict):
            raise check.usage_error(who, f"{section}={check._shown(values)}",
                                    f"give a section as a dict ({section}={{'key': value}}) or dotted keys as "
                                    f"keys={{'{section}.key': value}}", True)
        for k, v in values.items():
            flat[f"{section}.{k}"] = v
    return [f"--{k}={_value_text(k, v, who)}" for k, v in flat.items()]


# The arrays simulate() takes, by argument: the dataset name the engine expects (as in the HDF5
# files of init.file and weights.file) and the key whose type `file` makes the model take it.
_WEIGHT_KEYS = {"W_Q": "weights.q", "W_K": "weights.k", "W_V": "weights.v", "W_O": "weights.o",
                "W_in": "weights.mlp", "W_out": "weights.mlp", "b_in": "weights.mlp", "b_out": "weights.mlp",
                "W_gate": "weights.mlp",
                "b_Q": "weights.q", "b_K": "weights.k", "b_V": "weights.v", "b_O": "attention.bias",
                "logit_bias": "attention.logit_bias"}
# The attention biases imply attention.bias = true (b_O goes with W_O, or with W_V without model.value_dim).
_ATTENTION_BIASES = ("b_Q", "b_K", "b_V", "b_O")
_NORM_STEMS = ("norm_attn", "norm_attn_out", "norm_mlp", "norm_mlp_out")


def _is_array_name(name):
    return name in _WEIGHT_KEYS or any(name in (f"{s}_gain", f"{s}_bias") for s in _NORM_STEMS)


def _split_sections(who, sections):
    """The section dicts, the weight arrays and the mask array of simulate()'s keywords: in
    weights={...} the entries named like arrays (W_Q, ..., b_out, norm_attn_gain, ...) are arrays
    and the others keys of [weights] (weights={"v": "orthogonal"}); mask= is the [mask] section
    when it is a dict, else the mask array."""
    sections = dict(sections)
    arrays, mask = None, None
    w = sections.get("weights")
    for k, v in (w.items() if isinstance(w, dict) else ()):
        if not _is_array_name(k) and (hasattr(v, "__array__") or hasattr(v, "detach")) and getattr(v, "ndim", 0) > 0:
            allowed = ", ".join(list(_WEIGHT_KEYS) + [f"{s}_gain/_bias" for s in _NORM_STEMS])
            raise check.usage_error(who, "weights", f"unknown array 'weights.{k}' (arrays: {allowed}; other entries "
                                    "are keys of [weights])")
    if isinstance(w, dict) and any(_is_array_name(k) for k in w):
        arrays = {k: v for k, v in w.items() if _is_array_name(k)}
        rest = {k: v for k, v in w.items() if not _is_array_name(k)}
        if rest:
            sections["weights"] = rest
        else:
            del sections["weights"]
    if "mask" in sections and not isinstance(sections["mask"], dict):
        mask = sections.pop("mask")
    return sections, arrays, mask


def _host_inputs(who, x0, weights, mask, flat):
    """The arrays by dataset name (each checked: real, finite, no empty axis; the engine checks the
    shapes against the configuration), the mask as uint8, and the keys their presence implies
    (unless given)."""
    arrays, implied = {}, {}
    if x0 is not None:
        arrays["X0"] = check.real_array(who, "x0 (X0)", x0, (2, 3), "X(0) as [N, d] or [trials, N, d] (N >= 1 tokens)")
        implied.update({"init.type": "file", "init.file": "<array x0>"})
    for name, value in (weights or {}).items():
        arrays[name] = check.real_array(who, f"weights['{name}']", value, (1, 2, 3, 4),
                                        "an array with the shapes of weights.file (docs/reference/file-formats.md)")
        implied["weights.file"] = "<arrays>"
        if name in _ATTENTION_BIASES:
            implied["attention.bias"] = "true"
            if name != "b_O":
                implied[_WEIGHT_KEYS[name]] = "file"
        else:
            implied[_WEIGHT_KEYS.get(name, "norm.params")] = "file"
    if mask is not None:
        implied.update({"mask.type": "custom", "mask.file": "<array mask>"})
    keys = [f"--{k}={v}" for k, v in implied.items() if k not in flat]
    n = arrays["X0"].shape[-2] if "X0" in arrays else None
    return arrays, (None if mask is None else check.mask_array(who, "mask", mask, n)), keys


def _progress_callback(progress):
    """(trial callback, layer callback, bars) for progress: None; a callable (done, total) of
    trials; or True: a tqdm bar of layers (trials x (L + 1), the trials done as its postfix), the
    widget bar only where ipywidgets is installed (else tqdm's text bar, which prints no "IProgress
    not found"), or without tqdm a line on stderr."""
    if progress is None or progress is False:
        return None, None, None
    if callable(progress):
        return progress, None, None
    if progress is not True:
        raise check.usage_error("rcsim.simulate", "progress", f"{check._shown(progress)}; None, True, False or a "
                                "callable (done, total) is needed", True)
    trials = [0, 0]

    def count_trials(done, total):
        trials[:] = [done, total]
    try:
        try:
            import ipywidgets  # noqa: F401
            from tqdm.auto import tqdm
        except ImportError:
            from tqdm import tqdm
    except ImportError:
        import sys

        def line(done, total):
            print(f"\rrcsim: layer {done}/{total} ({trials[0]}/{trials[1]} trials)", end="\n" if done == total else "",
                  file=sys.stderr, flush=True)
        return count_trials, line, None
    bars = []  # made at the first report, when the total is known

    def update(done, total):
        if not bars:
            bars.append(tqdm(total=total, unit="layer", desc="rcsim"))
        if trials[1]:
            bars[0].set_postfix_str(f"{trials[0]}/{trials[1]} trials", refresh=False)
        bars[0].update(done - bars[0].n)
    return count_trials, update, bars


def simulate_image(config_file=None, keys=None, quiet=True, x0=None, progress=None, **sections):
    """The bytes of the run file (HDF5) of one configuration, computed in this process."""
    return _image("rcsim.simulate", config_file, keys, quiet, x0, progress, sections)


def _image(who, config_file, keys, quiet, x0, progress, sections):
    quiet = check.flag(who, "quiet", quiet)
    sections, weights, mask = _split_sections(who, sections)
    args = configuration_arguments(keys, **sections)
    flat = {a[2:].split("=", 1)[0] for a in args}
    arrays, mask_array, implied = _host_inputs(who, x0, weights, mask, flat)
    call = f"{who}(" + ", ".join(([repr(config_file)] if config_file else []) + args +
                                         [f"{k}=<array>" for k, v in (("x0", x0), ("mask", mask)) if v is not None] +
                                         [f"weights[{n!r}]=<array>" for n in (weights or {})]) + ")"
    callback, layer_callback, bars = _progress_callback(progress)
    try:
        return _engine().run_image(implied + args, None if config_file is None else os.fspath(config_file), call,
                                   quiet, arrays, mask_array, callback, who, layer_callback)
    finally:
        for bar in bars or []:
            bar.close()


GROUPS = ("metrics", "summary", "diagnostics", "/")


def simulate(config_file=None, keys=None, group="metrics", quiet=True, x0=None, progress=None, **sections):
    """Run one configuration in this process and return it as open_run would read its file.

    config_file: an INI file as for `rcsim run --config` (optional); keys: dotted keys
    {"model.dim": 16, "mask.type": "causal"}; sections as keyword dicts: model={"tokens": 32}.
    Precedence as on the command line: keys and sections > config_file > key defaults.
    Arrays in place of files (NumPy, torch tensors, anything with __array__):
      x0: X(0) as [N, d] (every trial) or [trials, N, d] (sets init.type = file);
      weights={"W_Q": ..., "W_K": ..., "W_V": ..., "W_O": ..., "W_in", "b_in", "W_out", "b_out",
        "W_gate" (mlp.activation = swiglu), "norm_attn_gain", ...}: the entries named like arrays are arrays, with the shapes of
        weights.file (docs/reference/file-formats.md): [d, d_k] or [L, d, d_k], [H, ...] with heads;
        each sets its key (weights.q = file, ...); other entries are keys of [weights] as usual;
        the attention biases "b_Q", "b_K", "b_V" ([d_k] / [d_v], [H, ..], [L, ..]) and "b_O" ([d]
        or [L, d]) set attention.bias = true (b_O goes with W_O, or with W_V without value_dim);
      mask=: a bool or 0/1 array [N, N] (sets mask.type = custom); a dict is the [mask] section.
      A wrong shape raises ConfigError naming the array and the shapes allowed.
    group: the run file's group ("metrics", "summary", "diagnostics", or "/" for the root:
    mask, tokens, attention), as for open_run; group="all": a dict of every group's Dataset.
    progress: True for a progress bar of layers (trials x (L + 1); tqdm if installed, its text bar
    unless ipywidgets is installed), or a callable (done, total) of trials.
    quiet=False logs the run's information.
    The GIL is released while the engine computes (run.threads worker threads); Ctrl-C stops it.
    Raises rcsim.ConfigError (a ValueError) naming the key for a bad configuration.
    """
    group = check.one_of("rcsim.simulate", "group", group, GROUPS + ("all",))
    image = simulate_image(config_file, keys, quiet, x0, progress, **sections)
    if group == "all":
        return {g: open_run(image, g) for g in GROUPS}
    return open_run(image, group)


def _one_matrix_keys(who, X, weights, mask, layers, keys, sections):
    """X as float64 [N, d], and the keys and sections of the model applied to it (N, d, one trial,
    `layers`, from X; the rest from keys and sections as in simulate(), weights and mask added).
    The keys simulate() needs (model.tokens, model.dim, model.layers, run.trials) may be given
    too, as rcsim.from_torch gives them, when they agree with X and `layers`; layers=None takes
    model.layers from the keys (else 1)."""
    x = check.real_array(who, "X", X, (2,), "one token matrix [N, d] (rows are tokens, at least one token)")
    given = dict(a[2:].split("=", 1) for a in configuration_arguments(keys, **sections))
    if layers is None:
        layers = given.get("model.layers", 1)
        try:
            layers = int(layers) if str(layers).strip().isdigit() else layers
        except ValueError:
            pass
    fixed = {"model.tokens": x.shape[0], "model.dim": x.shape[1], "model.layers": check.whole(who, "layers", layers),
             "run.trials": 1}
    if "output.tokens" in given:
        raise check.usage_error(who, "output.tokens", "set by the function (the tokens of every layer); do not give it")
    for k in sorted(set(given) & set(fixed)):
        if not _same_number(given[k], fixed[k]):
            source = {"model.tokens": "X's rows", "model.dim": "X's columns", "model.layers": "`layers`",
                      "run.trials": "one matrix: one trial"}[k]
            raise check.usage_error(who, f"{k} = {given[k]}", f"it is {fixed[k]} here ({source}); give that value "
                                    "or leave the key out")
    sections = {sec: ({k: v for k, v in d.items() if f"{sec}.{k}" not in fixed} if isinstance(d, dict) else d)
                for sec, d in sections.items()}
    sections = {sec: d for sec, d in sections.items() if not isinstance(d, dict) or d}
    if weights is not None:
        sections["weights"] = dict(sections.get("weights", {}), **check.mapping(who, "weights", weights))
    if mask is not None:
        sections["mask"] = mask
    return x, dict(keys or {}, **fixed), sections


def _same_number(text, value):
    try:
        return float(text) == float(value)
    except ValueError:
        return False


def layer(X, weights=None, mask=None, layers=None, all_layers=False, keys=None, **sections):
    """The model of the keys applied to one token matrix X [N, d] (rows are tokens): X(layers), or
    every X(t), t = 0..layers, as [layers + 1, N, d] with all_layers=True (layers=None: the keys'
    model.layers, else 1). N, d, the trial count and the snapshots are set from X (the keys may
    repeat them when they agree: rcsim.layer(X, **rcsim.from_torch(block))); everything else (mask.type, norm.type, residual.alpha,
    model.heads, model.d_qk, ...) comes from `keys` and `sections` as in simulate(), and the
    weights from `weights` (arrays as in simulate) or the random draws of the keys.
    Example, one attention layer with given weights:
        rcsim.layer(X, {"W_Q": Wq, "W_K": Wk, "W_V": Wv}, norm={"type": "none"})
    Arguments are checked by rcsim._validate (ConfigError naming the argument); a forward pass that
    turns non-finite raises FloatingPointError naming the layer.
    """
    return _forward("rcsim.layer", X, weights, mask, layers, check.flag("rcsim.layer", "all_layers", all_layers),
                    keys, sections)


def _forward(who, X, weights, mask, layers, all_layers, keys, sections):
    """rcsim.layer's tokens; FloatingPointError naming the layer where they turned non-finite (the
    engine's /diagnostics/nonfinite_layer: the first X(t) with a NaN or inf entry)."""
    x, all_keys, sections = _one_matrix_keys(who, X, weights, mask, layers, keys, sections)
    all_keys["output.tokens"] = "all"
    image = _image(who, None, all_keys, True, x, None, sections)
    t = int(open_run(image, "diagnostics").nonfinite_layer.values[0])
    if t >= 0:
        raise FloatingPointError(f"{who}: the forward pass turned non-finite at layer {t}: X({t}) has a NaN or inf "
                                 f"entry (X({t - 1}) was finite); smaller weights or inputs, or a normalisation "
                                 "(norm.type), keep it finite")
    tokens = open_run(image, "/").tokens.values[0]
    return tokens if all_layers else tokens[-1]


def gradients(X, cotangent, weights=None, mask=None, layers=None, keys=None, **sections):
    """The reverse pass of the model of rcsim.layer (same arguments) for a scalar loss of its output:
    given the cotangent dLoss/dX(layers) [N, d], a dict of NumPy arrays
      "X": the output X(layers) [N, d] (as rcsim.layer returns it);
      "dX": dLoss/dX(t) for t = 0 .. layers, [layers + 1, N, d];
      "W_Q", "W_K", "W_V" (and "W_O" with model.value_dim): [layers, H, rows, cols];
      with model.kv_heads, W_K, W_V, b_K, b_V have H_kv for H (summed over the heads sharing them);
      "W_in", "W_out", "b_in", "b_out" with an MLP: [layers, 1, rows, cols] ([.., 1, n] for biases);
      "W_gate" [layers, 1, d, m] with mlp.activation = swiglu;
      "b_Q", "b_K", "b_V" [layers, H, 1, n] and "b_O" [layers, 1, 1, d] with attention biases;
      "norm_gain", "norm_bias": [layers, 4, 1, d], slots attn, attn_out, mlp, mlp_out.
    Each weight gradient is with respect to the block's weights as used (drawn, or given in
    `weights`: a weight shared by all layers gets the sum over layers). Hand-written adjoints
    (docs/science/gradients.md) in the run's precision (run.precision = float32: the float reverse
    pass; float64 arrays returned); dropout, dynamics.noise and random_markov logits with the run's
    draws (trial 0's streams); residual.project = tangent and dynamics.integrator = rk4 as well. A
    configuration rcsim.layer refuses raises the same ConfigError. Never returns NaN or inf: a
    forward pass that turns non-finite raises FloatingPointError naming the layer, as rcsim.layer
    does, and so does a reverse pass (the layer t of dLoss/dX(t)) or a weight gradient (its name
    and layer).
    Example, the gradient of Loss = sum(X(2) * C) with respect to W_Q of both layers:
        g = rcsim.gradients(X, C, {"W_Q": Wq, "W_K": Wk, "W_V": Wv}, layers=2, norm={"type": "none"})
        g["W_Q"].sum(axis=0)[0]
    """
    return _gradients("rcsim.gradients", X, cotangent, weights, mask, layers, keys, sections)


def _gradients(who, X, cotangent, weights, mask, layers, keys, sections):
    """rcsim.gradients, its errors naming `who` (rcsim.torch.stack calls it too)."""
    x, all_keys, merged = _one_matrix_keys(who, X, weights, mask, layers, keys, sections)
    c = check.real_array(who, "cotangent", cotangent, (2,), f"dLoss/dX(layers) with X's shape [N, d] = {list(x.shape)}")
    if c.shape != x.shape:
        raise check.usage_error(who, "cotangent", f"shape {c.shape}; dLoss/dX(layers) with X's shape {x.shape} is "
                                "needed")
    split, weight_arrays, mask_value = _split_sections(who, merged)
    args = configuration_arguments(all_keys, **split)
    flat = {a[2:].split("=", 1)[0] for a in args}
    arrays, mask_array, implied = _host_inputs(who, x, weight_arrays, mask_value, flat)
    g = _engine().gradients(implied + args, None, arrays, mask_array, c)
    _check_gradients(who, g, lambda: _forward(who, X, weights, mask, layers, False, keys, sections))
    return g


def _check_gradients(who, g, forward):
    """FloatingPointError where the gradients are not finite: at the forward pass's layer (`forward`
    runs it and raises naming the layer) when X(layers) is not finite, else at the last dX(t) of the
    reverse pass (t = layers down to 0) or the first weight gradient with a NaN or inf entry."""
    import numpy as np
    if not np.isfinite(g["X"]).all():
        forward()
        raise FloatingPointError(f"{who}: the forward pass turned non-finite (X(layers) has a NaN or inf entry)")
    bad = [t for t in range(len(g["dX"])) if not np.isfinite(g["dX"][t]).all()]
    if bad:
        raise FloatingPointError(f"{who}: the reverse pass turned non-finite at layer {bad[-1]}: dLoss/dX({bad[-1]}) "
                                 "has a NaN or inf entry (the forward pass was finite)")
    for name, a in g.items():
        if not np.isfinite(a).all():
            layer_index = next(t for t in range(len(a)) if not np.isfinite(a[t]).all())
            raise FloatingPointError(f"{who}: the gradient with respect to {name} of layer {layer_index} has a NaN or "
                                     "inf entry (the forward pass and dLoss/dX were finite)")


def measures(X, rank_rtol=None, rank_atol=0.0):
    """rcsim's token measures (docs/science/model-spec.md section 4, the run file's /metrics) of token matrices X
    of shape (..., N, d): rows are tokens, e.g. a real model's hidden states [batch, tokens, width].

    Returns a dict of NumPy arrays of shape (...): mu, mu_rel, fro_norm, sigma_min, sigma_max, rank,
    rank_one_residual, stable_rank, cos_abs_mean, sigma_at_max_rank (at rank min(N, d)), and
    "sigma" (..., min(N, d)), the singular values in descending order. The same functions as the
    engine's, value for value. rank_rtol: relative rank tolerance (default max(N, d) * machine
    epsilon, as metrics.rank_rtol = auto); rank_atol: absolute tolerance (both finite, >= 0).
    X must be finite (a stopped trial's snapshots of the layers it never reached are NaN).
    """
    import numpy as np
    who = "rcsim.measures"
    a = check.real_array(who, "X", X, range(2, 64), "token matrices (..., N, d) (rows are tokens, at least one token)")
    rtol = check.real(who, "rank_rtol", rank_rtol, low=0.0, none=True)
    atol = check.real(who, "rank_atol", rank_atol, low=0.0)
    lead, (n, d) = a.shape[:-2], a.shape[-2:]
    out = _engine().token_measures(a.reshape((-1, n, d)), -1.0 if rtol is None else rtol, atol)
    return {k: np.asarray(v).reshape(lead + np.asarray(v).shape[1:]) for k, v in out.items()}


def clusters(X, tau):
    """The clusters of the tokens X (N, d) at cosine threshold tau: the connected components of the
    graph with an edge i - j iff cos(x_i, x_j) > tau (a zero token is a cluster of its own), the
    partition that the measures clusters, clusters_90/99/999 and largest_cluster count.

    Returns a dict: "label" (N,), each token's cluster 0, ..., k-1 in the order of each cluster's
    first token; "size" (k,); "centre" (k, d), the mean of the cluster's unit vectors
    x_i / ||x_i|| normalised to length 1 (zero where they cancel or for a zero token). For the
    clusters of a run through time, apply it to the token snapshots (output.tokens), e.g.
    [rcsim.clusters(X, 0.99) for X in run.tokens.values[trial]].
    """
    a = check.real_array("rcsim.clusters", "X", X, (2,), "tokens (N, d) (rows are tokens, at least one token)")
    return dict(_engine().cluster_partition(a, check.real("rcsim.clusters", "tau", tau)))


def resolved_config(config_file=None, keys=None, **sections):
    """The fully resolved configuration (INI text) simulate() would run (like --dry-run)."""
    args = configuration_arguments(keys, **sections)
    return _engine().resolved_config(args, None if config_file is None else os.fspath(config_file))


def _config_error():
    try:
        return _engine().ConfigError
    except ImportError:
        return ValueError
