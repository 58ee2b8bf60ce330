"""Shared pieces of the pretrained-model figures (figure2_pretrained.py, figure4_pretrained.py;
docs/science/pretrained.md): the deliberately wrong engines they must fail on (--perturb), the
isotropic reference of the mean |cosine|, and the band comparisons their checks use.

A wrong engine (`--perturb KEY=VALUE`, repeatable; the checks must then fail, exit 1 with
"claim failed: ..." on stderr, tests/reproductions/perturbed_one.py):
  llama.weights=random   every Llama stack runs random blocks where the checkpoint's belong (an
                         engine that reads the checkpoint's blocks wrongly);
  llama.norm=false       every Llama stack runs with RMSNorm the identity (an engine that skips it);
  SECTION.NAME=VALUE     any other rcsim key goes to figure2_pretrained.py's attention-only stacks
                         (rcsim.layer), e.g. residual.alpha=1 (a residual connection where the
                         paper's pure attention has none).
The script's labels and claims keep their own settings: only what the engine runs changes."""
import math

import numpy as np

import particles_common
from particles_common import Checks, perturbation  # noqa: F401  (the checks' class, shared with the reproductions)

LLAMA_KEYS = {"llama.weights": ("pretrained", "random"), "llama.norm": ("true", "false")}


def perturbations(pairs, parser):
    """The --perturb pairs as a dict; a Llama key with a value it does not take is a usage error."""
    out = dict(pairs)
    if len(out) != len(pairs):
        parser.error("--perturb: a key is given twice")
    for key, allowed in LLAMA_KEYS.items():
        if key in out and out[key] not in allowed:
            parser.error(f"--perturb {key}={out[key]}: allowed values are {' | '.join(allowed)}")
    particles_common._PERTURB.clear()  # Checks.finish names the perturbation on stderr
    particles_common._PERTURB.update(out)
    return out


def llama_setting(perturb, weights, norm):
    """(weights, norm) that a Llama stack labelled (weights, norm: bool) runs under the perturbation."""
    weights = perturb.get("llama.weights", weights)
    norm = norm and perturb.get("llama.norm", "true") == "true"
    return weights, norm


def layer_keys(perturb):
    """The perturbation's rcsim keys for rcsim.layer (every key but the llama.* ones)."""
    return {k: v for k, v in perturb.items() if not k.startswith("llama.")}


def isotropic_abs_cos(d):
    """E |cos| of two independent isotropic vectors in R^d: Gamma(d/2) / (sqrt(pi) Gamma((d+1)/2))
    (2/pi for d = 2; 0.1001 for d = 64)."""
    return math.exp(math.lgamma(d / 2) - math.lgamma((d + 1) / 2)) / math.sqrt(math.pi)


def band(values):
    """(median, 10%, 90%) of the finite values (NaN when there are none)."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    return tuple(np.quantile(v, [0.5, 0.1, 0.9])) if v.size else (math.nan,) * 3


def below(low, high):
    """True when the 10-90% bands are apart, `low`'s under `high`'s: 90% quantile of low < 10% quantile of high."""
    return bool(band(low)[2] < band(high)[1])


def fmt(values):
    """'median [10%, 90%]' of the values."""
    return "{:.3g} [{:.3g}, {:.3g}]".format(*band(values))
