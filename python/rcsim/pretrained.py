"""A pretrained transformer in rcsim (docs/user/pretrained.md): llama2.c checkpoints read by the
engine's reader (rcsim.load_model), decoded from BOS (rcsim.generate), their logits and the
residual stream X(0) .. X(L) of a token sequence (Model.logits, Model.states) for rcsim.measures,
and the reverse pass of a scalar loss of a sequence (Model.gradients).
Every argument is checked by rcsim._validate (ConfigError naming it) before the engine sees it.
"""
import os

import numpy as np

from . import _validate as check
from .engine import _engine

_PRECISIONS = ("float64", "float32")
_CACHE_LIMIT = 4 * 2**30  # bytes of activations Model.gradients keeps


class Model:
    """A llama2.c checkpoint in memory (from rcsim.load_model)."""

    def __init__(self, handle, path):
        self._m = handle
        self.path = path
        self.config = dict(handle.config)  # dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len, ...
        self.sha256 = handle.sha256
        self.version = handle.version  # 0 legacy, 1
        self.weights_kind = "pretrained"

    def __repr__(self):
        c = self.config
        return (f"rcsim.Model({self.path!r}: dim {c['dim']}, {c['n_layers']} layers, {c['n_heads']} heads, "
                f"{c['n_kv_heads']} kv heads, vocab {c['vocab_size']})")

    def with_random_blocks(self, seed=0):
        """The same architecture with random blocks (matrix entries N(0, 1/fan_in), RMSNorm gains 1,
        drawn from `seed`) and this model's token embedding and classifier: the random-weight
        baseline on the same X(0). Its `path` and `sha256` are this model's; `weights_kind` says random."""
        seed = check.whole("Model.with_random_blocks", "seed", seed, low=0)
        r = Model(_engine().llama_random_blocks(self._m, seed), self.path)
        r.weights_kind = f"random blocks (seed {seed})"
        return r

    def weights(self):
        """Every array as float64 NumPy, matrices [out, in], per-layer ones stacked [L, ...]."""
        return {k: np.asarray(v) for k, v in self._m.weights().items()}

    def _ids(self, who, ids):
        return check.token_ids(who, "ids", ids, self.config["vocab_size"], self.config["seq_len"])

    def logits(self, ids, precision="float64"):
        """Logits [T, vocab] of the sequence `ids` (row t predicts the id after ids[t]). Never NaN or inf:
        activations that overflow (float32's range is the narrower) raise FloatingPointError naming the position."""
        who = "Model.logits"
        seq = self._ids(who, ids)
        single = check.one_of(who, "precision", precision, _PRECISIONS) == "float32"
        out = np.asarray(self._m.logits(seq, single))
        _require_finite_rows(who, "the logits", out, precision)
        return out

    def states(self, ids, precision="float64", norm=True, depth=0, nonfinite="raise"):
        """X(0) .. X(depth) of the sequence `ids`: an array [depth + 1, T, dim] (X(0) the embedding
        rows; depth 0 means the model's layers; beyond them the blocks repeat cyclically; norm=False
        makes every RMSNorm the identity). Measure them with rcsim.measures(states). A stream that
        overflows (without RMSNorm, with depth; float32 sooner) raises FloatingPointError naming the
        first non-finite X(t) (nonfinite="raise"); nonfinite="keep" returns it as it is, NaN or inf
        from that X(t) on, for a caller that cuts it there itself."""
        who = "Model.states"
        seq = self._ids(who, ids)
        single = check.one_of(who, "precision", precision, _PRECISIONS) == "float32"
        norm = check.flag(who, "norm", norm)
        depth = check.whole(who, "depth", depth, low=0, high=100000)
        keep = check.one_of(who, "nonfinite", nonfinite, ("raise", "keep")) == "keep"
        self._states_fit(who, len(seq), depth or self.config["n_layers"])
        states = np.stack([np.asarray(x) for x in self._m.states(seq, single, norm, depth)])
        if not keep:
            _require_finite_states(who, states, precision, norm)
        return states

    def gradients(self, ids, targets=None, cotangent=None, norm=True, depth=0, precision="float64"):
        """The reverse pass through the model for one sequence `ids` (hand-written adjoints at the
        forward's activations: docs/science/pretrained.md; in float64, or with precision="float32"
        forward and reverse in float, the arrays returned as float64). The loss is the cross-entropy
        Loss = -sum_t log softmax(logits(t))[targets[t]] over the positions with targets[t] >= 0
        (targets: T integers -1 .. vocab-1, -1 not scored; default the next ids, ids[1:] then -1),
        or with `cotangent` C [T, dim] instead Loss = sum(C * X(depth)) (no final norm, no classifier).
        Returns a dict of float64 arrays: "loss" (a float), "X" (X(depth) [T, dim]), "dX"
        (dLoss/dX(t) for t = 0 .. depth, [depth + 1, T, dim]) and the gradient of every weight under
        the keys and shapes of Model.weights() (a block repeated beyond n_layers: summed over its
        repeats; "token_embedding": the rows of dX[0] added at their ids, plus "classifier" when the
        classifier is the embedding; "classifier" and "rms_final_weight" zero for a cotangent loss).
        The gradient norms with depth, how the signal travels backwards:
            np.linalg.norm(g["dX"], axis=(1, 2))
        Never returns NaN or inf: a forward or reverse pass that turns non-finite (without RMSNorm
        the stream can overflow with depth) raises FloatingPointError saying where."""
        who = "Model.gradients"
        seq = self._ids(who, ids)
        norm = check.flag(who, "norm", norm)
        depth = check.whole(who, "depth", depth, low=0, high=100000)
        single = check.one_of(who, "precision", precision, _PRECISIONS) == "float32"
        shape = [len(seq), self.config["dim"]]
        self._cache_fits(who, len(seq), depth or self.config["n_layers"])
        if cotangent is not None:
            if targets is not None:
                raise check.usage_error(who, "targets", "given with a cotangent; give one of the two losses")
            c = check.real_array(who, "cotangent", cotangent, (2,), f"dLoss/dX(depth) [T, dim] = {shape}")
            if list(c.shape) != shape:
                raise check.usage_error(who, "cotangent", f"shape {list(c.shape)}; [T, dim] = {shape} is needed")
            out = self._m.gradients(seq, [], c, norm, depth, single)
        else:
            out = self._m.gradients(seq, self._targets(who, targets, seq), None, norm, depth, single)
        g = {k: (v if k == "loss" else np.asarray(v)) for k, v in out.items()}
        g["dX"] = np.stack([np.asarray(x) for x in out["dX"]])
        _require_finite(who, g)
        return g

    def _cache_fits(self, who, tokens, depth):
        """ConfigError when what the reverse pass keeps exceeds 4 GiB: the input X(t) [T, dim] of every
        applied block, and the activations of the one block being differentiated (the attention
        weights of every head [T, T], about 10 [T, dim] and 3 [T, hidden_dim] matrices)."""
        c = self.config
        per_block = 8 * tokens * c["dim"]
        one_block = 8 * (c["n_heads"] * tokens * tokens + tokens * (10 * c["dim"] + 3 * c["hidden_dim"]))
        if depth * per_block + one_block > _CACHE_LIMIT:
            fit = max(0, (_CACHE_LIMIT - one_block) // per_block)
            raise check.usage_error(who, "depth", f"{depth} blocks on {tokens} tokens: the reverse pass would keep "
                                    f"{(depth * per_block + one_block) / 2**30:.1f} GiB of activations; at most "
                                    f"{fit} blocks fit in {_CACHE_LIMIT // 2**30} GiB")

    def _states_fit(self, who, tokens, depth):
        """ConfigError before any work when X(0) .. X(depth) (float64 [T, dim] each, held twice: the
        engine's list and the stacked array) exceed this machine's physical memory."""
        per_state = 2 * 8 * tokens * self.config["dim"]
        need, have = (depth + 1) * per_state, _physical_memory()
        if need > have:
            raise check.usage_error(who, "depth", f"{depth}: X(0) .. X({depth}) of {tokens} tokens would need about "
                                    f"{_bytes_text(need)} of memory, more than this machine's {_bytes_text(have)}; "
                                    f"at most depth {max(int(have // per_state) - 1, 0)} fits")

    def _targets(self, who, targets, seq):
        if targets is None:
            return seq[1:] + [-1]
        a = check._as_numpy(who, "targets", targets)
        vocab = self.config["vocab_size"]
        allowed = f"{len(seq)} integers -1 .. {vocab - 1}, one per position of ids (-1: not scored)"
        if a.dtype.kind not in "iu":
            raise check.usage_error(who, "targets", f"an array of dtype {a.dtype}; {allowed} are needed", True)
        if a.shape != (len(seq),):
            raise check.usage_error(who, "targets", f"shape {a.shape}; {allowed} are needed")
        bad = (a < -1) | (a >= vocab)
        if bad.any():
            index, v = check._first_bad(a, bad)
            raise check.usage_error(who, "targets", f"the id {v} at index {index}; {allowed} are needed")
        return [int(i) for i in a]


def _require_finite(who, g):
    """FloatingPointError naming where the gradients of Model.gradients turned non-finite."""
    if not (np.isfinite(g["loss"]) and np.isfinite(g["X"]).all()):
        raise FloatingPointError(f"{who}: the forward pass turned non-finite (X(depth) or the loss has a NaN or inf "
                                 "entry); RMSNorm (norm=True) or a smaller depth keeps it finite")
    bad = [t for t in range(len(g["dX"])) if not np.isfinite(g["dX"][t]).all()]
    if bad:
        raise FloatingPointError(f"{who}: the reverse pass turned non-finite: dLoss/dX({bad[-1]}) has a NaN or inf "
                                 f"entry (dLoss/dX({bad[-1] + 1}) was finite)")
    for key, value in g.items():
        if not np.isfinite(value).all():
            raise FloatingPointError(f"{who}: the gradient of {key} has a NaN or inf entry")


def _bytes_text(n):
    return f"{n / 1e9:.3g} GB" if n >= 1e9 else f"{n / 1e6:.3g} MB"


def _physical_memory():
    """This machine's physical memory in bytes (as the engine's require_memory); inf if unknown."""
    try:
        return float(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return float("inf")


def _require_finite_rows(who, what, a, precision):
    """FloatingPointError naming the first position whose row of `a` [T, ...] has a NaN or inf entry."""
    bad = ~np.isfinite(a.reshape(len(a), -1)).all(axis=1)
    if bad.any():
        t = int(np.argmax(bad))
        raise FloatingPointError(f"{who}: {what} turned non-finite in {precision}: position {t} (of {len(a)}) has a "
                                 "NaN or inf entry (the activations overflowed"
                                 + ("; precision='float64' has more range)" if precision == "float32" else ")"))


def _require_finite_states(who, states, precision, norm):
    """FloatingPointError naming the first X(t) of Model.states with a NaN or inf entry."""
    bad = ~np.isfinite(states.reshape(len(states), -1)).all(axis=1)
    if bad.any():
        t = int(np.argmax(bad))
        remedies = ([] if norm else ["RMSNorm (norm=True)"]) + ([f"depth={t - 1}"] if t > 1 else []) + \
            (["precision='float64'"] if precision == "float32" else [])
        raise FloatingPointError(f"{who}: X({t}) turned non-finite in {precision} (it has a NaN or inf entry"
                                 + (f"; X({t - 1}) was finite" if t else "") + ")"
                                 + (f"; {', '.join(remedies)} keeps it finite" if remedies else ""))


def load_model(path):
    """Read a llama2.c checkpoint (legacy or version-1 format, float32), e.g.
    configs/models/stories260K/stories260K.bin; a file that is not one raises ConfigError naming it."""
    path = check.path("rcsim.load_model", "path", path)
    if "\0" in path:
        raise check.usage_error("rcsim.load_model", "path", f"{path!r} holds a NUL byte; a path without one is needed")
    return Model(_engine().load_llama(path), path)


def generate(model, steps=40, sequences=1, temperature=0.0, seed=0, precision="float64"):
    """Decode `sequences` sequences of `steps` ids from the BOS id 1: greedy for temperature 0, else
    sampled from softmax(logits / temperature) with rcsim's random stream (seed, sequence index).
    Returns an int64 array [sequences, steps + 1], BOS first (the same ids as `rcsim generate`). The
    logits the ids were drawn from are checked (one forward pass of each sequence): non-finite ones
    (overflowing activations) raise FloatingPointError, never ids drawn from NaN."""
    who = "rcsim.generate"
    if not isinstance(model, Model):
        raise check.usage_error(who, "model", f"a {type(model).__name__}; a model from rcsim.load_model is needed", True)
    steps = check.whole(who, "steps", steps, low=0, high=model.config["seq_len"] - 1)
    count = check.whole(who, "sequences", sequences, low=1, high=1000000)
    temperature = check.real(who, "temperature", temperature, low=0.0)
    seed = check.whole(who, "seed", seed, low=0)
    single = check.one_of(who, "precision", precision, _PRECISIONS) == "float32"
    out = np.empty((count, steps + 1), dtype=np.int64)
    for s in range(count):
        out[s, 0] = 1
        out[s, 1:] = _engine().llama_generate(model._m, steps, temperature, seed, s, single)
        if steps:  # the logits each id was drawn from, checked: one forward pass of the sequence
            _require_finite_rows(who, f"the logits of sequence {s}", np.asarray(model._m.logits(
            [int(i) for i in out[s, :max(steps, 1)]], single)), precision)
    return out
