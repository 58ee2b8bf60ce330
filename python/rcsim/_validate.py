"""The one check of the array API's arguments (rcsim.simulate, layer, gradients, measures,
clusters; engine.py): nothing reaches the engine unchecked. Arrays (NumPy, torch tensors,
anything with __array__, nested lists) must hold real numbers (a float or integer dtype; a mask
bool or 0/1), be finite, have the expected number of axes and no empty axis; a complex array or
tensor is refused, never cut to its real part. Scalars have their type (a bool is not a number),
their range, and are finite. A bad argument raises rcsim.ConfigError (a ValueError) with one line:
the function, the argument (with its key: weights['W_Q']), what it is and what is allowed. An
argument of the wrong type (a str for a number, an int for a section dict, a complex array)
raises a ConfigError that is also a TypeError (class ConfigTypeError), as Python's own checks do.
"""
import functools
import math
import numbers
import operator

import numpy as np

INT_MAX = 2**31 - 1  # the engine's integer keys (model.layers, ...) are C ints


def usage_error(who, what, message, wrong_type=False):
    """rcsim.ConfigError 'WHO: WHAT: MESSAGE' (one line); a ConfigTypeError if `wrong_type`."""
    from .engine import _config_error
    kind = _type_error(_config_error()) if wrong_type else _config_error()
    return kind(f"{who}: {what}: {' '.join(str(message).split())}")


@functools.lru_cache(maxsize=None)
def _type_error(config_error):
    return type("ConfigTypeError", (config_error, TypeError), {"__module__": "rcsim"})


def _shown(value, limit=60):
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _as_numpy(who, what, value):
    """`value` as a NumPy array of its own dtype; a torch tensor detached, on the CPU, a floating one
    as float64 (bfloat16 has no NumPy dtype), a complex one refused."""
    if hasattr(value, "detach") and hasattr(value, "is_complex"):  # a torch tensor
        if value.is_complex():
            raise usage_error(who, what, f"a complex tensor ({value.dtype}); a real tensor is needed (the imaginary "
                                         "part is never dropped)", True)
        value = value.detach().cpu()
        if value.is_floating_point():
            value = value.double()
    try:
        return np.asarray(value)
    except (TypeError, ValueError, RuntimeError) as e:
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise usage_error(who, what, f"not an array of numbers ({reason})", True)


def _first_bad(a, bad):
    index = tuple(int(i) for i in np.argwhere(bad)[0])
    return index, a[index] if index else a[()]


def real_array(who, what, value, ndims, layout):
    """`value` as a C-contiguous float64 array: real numbers, `a.ndim in ndims`, no empty axis,
    finite. `layout` says what is allowed ("one token matrix [N, d]")."""
    a = _as_numpy(who, what, value)
    kind = a.dtype.kind
    if kind == "c":
        raise usage_error(who, what, f"a complex array ({a.dtype}); real numbers are needed (the imaginary part is "
                                     "never dropped)", True)
    if kind == "b":
        raise usage_error(who, what, f"a bool array; {layout} of real numbers is needed", True)
    if kind not in "fiu":
        raise usage_error(who, what, f"an array of dtype {a.dtype}, not numbers; {layout} of real numbers "
                                     "(float or integer dtype) is needed", True)
    if a.ndim not in ndims:
        raise usage_error(who, what, f"shape {a.shape}; {layout} is needed")
    if a.size == 0:
        raise usage_error(who, what, f"an empty array of shape {a.shape}; {layout} with no empty axis is needed")
    with np.errstate(over="ignore", invalid="ignore"):  # long double or huge integers beyond float64: inf
        a = np.ascontiguousarray(a, dtype=np.float64)
    bad = ~np.isfinite(a)
    if bad.any():
        index, v = _first_bad(a, bad)
        raise usage_error(who, what, f"the non-finite value {v} at index {index}; finite numbers are needed")
    return a


def mask_array(who, what, value, n=None):
    """A mask as uint8 [N, N] (1 = token i may attend to token j): bool, or real numbers 0 and 1."""
    a = _as_numpy(who, what, value)
    want = f"[{n}, {n}] for the {n} tokens" if n is not None else "[N, N] with N >= 1 tokens"
    allowed = f"a mask {want} of bool or 0/1 entries (1 = token i may attend to token j) is needed"
    if a.dtype.kind not in "biuf":
        raise usage_error(who, what, f"an array of dtype {a.dtype}; entries must be bool or 0/1: {allowed}", True)
    if a.ndim != 2 or a.shape[0] != a.shape[1] or a.size == 0 or n is not None and a.shape != (n, n):
        raise usage_error(who, what, f"shape {a.shape}; {allowed}")
    if a.dtype != bool:
        with np.errstate(invalid="ignore"):
            bad = ~np.isin(a, (0, 1))
        if bad.any():
            index, v = _first_bad(a, bad)
            raise usage_error(who, what, f"the entry {v} at index {index}; entries must be bool or 0/1: {allowed}")
    return np.ascontiguousarray(a.astype(np.uint8))


def whole(who, what, value, low=1, high=INT_MAX):
    """An integer (Python or NumPy, not a bool, not a float) in [low, high]."""
    if isinstance(value, (bool, np.bool_)):
        raise usage_error(who, what, f"{_shown(value)} is a bool; a whole number {low} .. {high} is needed", True)
    try:
        v = operator.index(value)
    except TypeError:
        raise usage_error(who, what, f"{_shown(value)} is not a whole number (a {type(value).__name__}); a whole "
                                     f"number {low} .. {high} is needed", True) from None
    if not low <= v <= high:
        raise usage_error(who, what, f"{v} is out of range; a whole number {low} .. {high} is needed")
    return v


def real(who, what, value, low=None, none=False):
    """A finite real number (Python or NumPy, not a bool, not complex) >= low if low is given;
    None passes through when `none`."""
    if value is None and none:
        return None
    allowed = "a finite real number" + ("" if low is None else f" >= {low}") + (" or None" if none else "")
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise usage_error(who, what, f"{_shown(value)} (a {type(value).__name__}); {allowed} is needed", True)
    v = float(value)
    if not math.isfinite(v) or low is not None and v < low:
        raise usage_error(who, what, f"{_shown(value)}; {allowed} is needed")
    return v


def flag(who, what, value):
    """A bool (Python or NumPy)."""
    if not isinstance(value, (bool, np.bool_)):
        raise usage_error(who, what, f"{_shown(value)} (a {type(value).__name__}); True or False is needed", True)
    return bool(value)


def one_of(who, what, value, allowed):
    """One of the strings `allowed`."""
    if not isinstance(value, str) or value not in allowed:
        raise usage_error(who, what, f"{_shown(value)}; one of {', '.join(map(repr, allowed))} is needed",
                          not isinstance(value, str))
    return value


def mapping(who, what, value, none=True):
    """A dict (or None when `none`)."""
    if value is None and none or isinstance(value, dict):
        return value
    allowed = "a dict or None" if none else "a dict"
    raise usage_error(who, what, f"a {type(value).__name__}; {allowed} is needed", True)


def path(who, what, value, none=False):
    """A file or directory name (a str or os.PathLike, not empty) as a str; None passes through when
    `none`."""
    import os
    if value is None and none:
        return None
    allowed = "a path (str or os.PathLike)" + (" or None" if none else "")
    if not isinstance(value, (str, os.PathLike)):
        raise usage_error(who, what, f"{_shown(value)} (a {type(value).__name__}); {allowed} is needed", True)
    text = os.fspath(value)
    if not isinstance(text, str) or not text.strip():
        raise usage_error(who, what, f"{_shown(value)}; {allowed}, not empty, is needed", not isinstance(text, str))
    return text


def value_list(who, what, value):
    """The values of a swept key: a list, tuple or 1-d array of at least one number, bool or string."""
    if isinstance(value, (str, bytes, dict)) or not hasattr(value, "__len__") or getattr(value, "ndim", 1) != 1:
        raise usage_error(who, what, f"{_shown(value)} (a {type(value).__name__}); a list of one or more values "
                                     "(numbers, bools or strings) is needed", True)
    values = list(value)
    if not values:
        raise usage_error(who, what, "an empty list; one or more values are needed")
    for v in values:
        if isinstance(v, (list, tuple, dict, set)) or hasattr(v, "ndim") and v.ndim > 0:
            raise usage_error(who, what, f"the entry {_shown(v)} is not a single value; a list of numbers, bools "
                                         "or strings is needed", True)
    return values


def token_ids(who, what, value, vocab, longest):
    """A 1-D sequence of token ids (integers 0 .. vocab-1, 1 .. longest of them) as a list of ints."""
    a = _as_numpy(who, what, value)
    allowed = f"a 1-D sequence of 1 .. {longest} integer token ids 0 .. {vocab - 1}"
    if a.dtype.kind not in "iu":
        raise usage_error(who, what, f"an array of dtype {a.dtype}; {allowed} is needed", True)
    if a.ndim != 1 or not 1 <= a.size <= longest:
        raise usage_error(who, what, f"shape {a.shape}; {allowed} is needed")
    bad = (a < 0) | (a >= vocab)
    if bad.any():
        index, v = _first_bad(a, bad)
        raise usage_error(who, what, f"the id {v} at index {index}; {allowed} is needed")
    return [int(i) for i in a]
