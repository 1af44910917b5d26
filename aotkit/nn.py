"""`aotkit.nn`: neural-network functions over traced arrays.

Names, signatures and defaults follow `jax.nn` (activations, softmax, one_hot),
`jax.lax` (`conv_general_dilated`, `conv`, `conv_transpose`) and Flax's functional layers
(`max_pool`, `avg_pool`, `dropout`, `layer_norm`, `rms_norm`). Everything is written with
`aotkit.numpy` and aotkit's primitives, so it traces into plain StableHLO: convolutions
are one `stablehlo.convolution` (at `precision=`, else the default in force:
`aotkit.default_matmul_precision`), pooling one `stablehlo.reduce_window`, and the rest
elementwise ops and reductions.

Result dtypes follow aotkit.numpy's (NumPy's) promotion of the operands: float inputs keep
their dtype; integer and boolean inputs of the float functions compute in float64 (where
JAX's default mode gives float32). Where a function makes a dtype out of nothing it takes
JAX's default-mode dtype: `one_hot` is float32 unless `dtype=` says otherwise.
float16/bfloat16 `layer_norm` and `rms_norm` compute their statistics in float32.
"""

from __future__ import annotations

import math

import numpy as np

import aotkit.numpy as anp
from aotkit import dtypes
from aotkit import random as _random
from aotkit.tracing.core import Tracer, bind1, full, where
from aotkit.tracing.creation import iota
from aotkit.tracing.hlo import cast, normalize_axis
from aotkit.tracing.nn import conv, conv_general_dilated, conv_transpose, window_reduce

__all__ = [
    "avg_pool",
    "conv",
    "conv_general_dilated",
    "conv_transpose",
    "dropout",
    "elu",
    "gelu",
    "layer_norm",
    "leaky_relu",
    "log_sigmoid",
    "log_softmax",
    "max_pool",
    "one_hot",
    "relu",
    "relu6",
    "rms_norm",
    "sigmoid",
    "silu",
    "softmax",
    "softplus",
    "swish",
]

_F32 = np.dtype(np.float32)
_LOW_PRECISION = (np.dtype(np.float16), dtypes.bfloat16)


def _array(x) -> Tracer:
    return x if isinstance(x, Tracer) else anp.asarray(x)


def _inexact(x) -> Tracer:
    """`x` as a float (or complex) tracer: integers and booleans become float64."""
    t = _array(x)
    return t if dtypes.is_inexact(t.dtype) else cast(t, dtypes.result_type(t.dtype, float))


# --- activations ------------------------------------------------------------------------------


def relu(x):
    """`max(x, 0)`; its derivative at 0 is 0, as `jax.nn.relu`'s (`maximum` splits it)."""
    t = _array(x)
    # max(t, 0) * 0 equals max(t, 0) wherever t > 0 is false (a zero, or NaN) and has
    # derivative 0 there.
    return anp.where(t > 0, t, anp.maximum(t, 0) * 0)


def relu6(x):
    """`min(max(x, 0), 6)`; its derivative at 0 and at 6 is 0, as `jax.nn.relu6`'s."""
    t = _array(x)
    return anp.where((t > 0) & (t < 6), t, anp.where(t >= 6, 6, anp.maximum(t, 0) * 0))


def leaky_relu(x, negative_slope=1e-2):
    """`x` where `x >= 0`, else `negative_slope * x`."""
    t = _array(x)
    return anp.where(t >= 0, t, negative_slope * t)


def elu(x, alpha=1.0):
    """`x` where `x > 0`, else `alpha * (exp(x) - 1)`."""
    t = _inexact(x)
    positive = t > 0
    return anp.where(positive, t, alpha * anp.expm1(anp.where(positive, 0, t)))


def sigmoid(x):
    """`1 / (1 + exp(-x))`, one `stablehlo.logistic`."""
    return bind1("logistic", _inexact(x))


def softplus(x):
    """`log(1 + exp(x))`, computed as `logaddexp(x, 0)`."""
    return anp.logaddexp(_inexact(x), 0)


def log_sigmoid(x):
    """`log(sigmoid(x)) = -softplus(-x)`."""
    return -softplus(-_inexact(x))


def silu(x):
    """`x * sigmoid(x)` (also `swish`)."""
    t = _inexact(x)
    return t * sigmoid(t)


swish = silu


def gelu(x, approximate: bool = True):
    """The Gaussian error linear unit: `x * Phi(x)`, with JAX's default tanh approximation
    `0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x**3)))`, or the exact
    `0.5 * x * erfc(-x / sqrt(2))` with `approximate=False`."""
    t = _inexact(x)
    if approximate:
        cdf = 0.5 * (1.0 + anp.tanh(math.sqrt(2 / math.pi) * (t + 0.044715 * (t * t * t))))
        return t * cdf
    return 0.5 * t * bind1("erfc", -t * math.sqrt(0.5))


# --- softmax ----------------------------------------------------------------------------------


def _mask(op: str, mask) -> Tracer | None:
    if mask is None:
        return None
    m = _array(mask)
    if m.dtype != np.bool_:
        raise TypeError(
            f"{where(op)}: where= must be a boolean mask, got dtype {m.dtype.name}; compare "
            "first (e.g. where=x > 0)"
        )
    return m


def _shifted(op: str, x, axis, mask):
    t = _inexact(x)
    m = _mask(op, mask)
    wh = True if m is None else m
    x_max = anp.max(t, axis=axis, where=wh, initial=-np.inf, keepdims=True)
    safe = t if m is None else anp.where(m, t, -np.inf)
    return safe - x_max, m, wh


def softmax(x, axis=-1, where=None):
    """`exp(x) / sum(exp(x))` along `axis` (an int, a tuple or None), computed after
    subtracting the maximum; masked-out entries (`where=False`) are 0."""
    shifted, m, wh = _shifted("softmax", x, axis, where)
    unnormalized = anp.exp(shifted)
    result = unnormalized / anp.sum(unnormalized, axis=axis, where=wh, keepdims=True)
    return result if m is None else anp.where(m, result, 0)


def log_softmax(x, axis=-1, where=None):
    """`x - logsumexp(x)` along `axis`, computed after subtracting the maximum; masked-out
    entries (`where=False`) are -inf."""
    shifted, m, wh = _shifted("log_softmax", x, axis, where)
    result = shifted - anp.log(anp.sum(anp.exp(shifted), axis=axis, where=wh, keepdims=True))
    return result if m is None else anp.where(m, result, -np.inf)


def one_hot(x, num_classes, *, dtype=None, axis=-1):
    """`x == arange(num_classes)` along a new axis `axis`, as `dtype` (default float32);
    indices outside [0, num_classes) give all zeros."""
    op = "one_hot"
    if isinstance(num_classes, bool) or not isinstance(num_classes, int | np.integer):
        raise TypeError(
            f"{where(op)}: num_classes must be a static int, got {num_classes!r:.60}; the number "
            "of classes fixes the result's shape"
        )
    dt = _F32 if dtype is None else dtypes.canonicalize(dtype, where=where(op))
    t = _array(x)
    if t.dtype == np.bool_:
        t = cast(t, np.dtype(np.uint8))  # True is class 1; iota has no boolean form
    out_axis = normalize_axis(op, axis, t.ndim + 1)
    classes_shape = [1] * (t.ndim + 1)
    classes_shape[out_axis] = int(num_classes)
    classes = iota(tuple(classes_shape), t.dtype, out_axis)
    return cast(anp.expand_dims(t, out_axis) == classes, dt)


# --- normalization ----------------------------------------------------------------------------


def _stats_input(x) -> tuple[Tracer, np.dtype]:
    t = _inexact(x)
    return (cast(t, _F32), t.dtype) if t.dtype in _LOW_PRECISION else (t, t.dtype)


def _affine(y: Tracer, out: np.dtype, scale, bias) -> Tracer:
    """`y * scale + bias` cast to the promoted dtype of x, scale and bias (Python scalars
    weak, as everywhere in aotkit.numpy)."""
    for p in (scale, bias):
        if p is not None:
            kind = dtypes.weak_kind(p)
            out = dtypes.result_type(out, kind if kind is not None else _array(p).dtype)
    if scale is not None:
        y = y * scale
    if bias is not None:
        y = y + bias
    return cast(y, out)


def layer_norm(x, scale=None, bias=None, *, axis=-1, eps=1e-6):
    """`(x - mean) / sqrt(var + eps) * scale + bias` over `axis` (an int or a tuple), with
    Flax's default `eps=1e-6`; `scale` and `bias` broadcast against `x` (for the last axis,
    shape `(features,)`). The variance is the two-pass `mean((x - mean)**2)`."""
    t, out = _stats_input(x)
    mean = anp.mean(t, axis=axis, keepdims=True)
    centered = t - mean
    var = anp.mean(centered * centered, axis=axis, keepdims=True)
    y = centered * bind1("rsqrt", var + eps)
    return _affine(y, out, scale, bias)


def rms_norm(x, scale=None, *, axis=-1, eps=1e-6):
    """`x / sqrt(mean(x**2) + eps) * scale` over `axis`, with Flax's default `eps=1e-6`."""
    t, out = _stats_input(x)
    ms = anp.mean(t * t, axis=axis, keepdims=True)
    return _affine(t * bind1("rsqrt", ms + eps), out, scale, None)


# --- dropout ----------------------------------------------------------------------------------


def dropout(key, rate, x, *, deterministic=False):
    """Zeroes each entry of `x` with probability `rate` and scales the rest by
    `1 / (1 - rate)` (Flax's Dropout); the mask is `aotkit.random.bernoulli(key, 1 - rate,
    x.shape)`, the same as JAX's for the same key. `deterministic=True` returns `x`."""
    op = "dropout"
    if isinstance(rate, Tracer) or not isinstance(rate, int | float) or not 0 <= rate <= 1:
        raise ValueError(
            f"{where(op)}: rate must be a static Python number in [0, 1], got {rate!r:.60}"
        )
    t = _array(x)
    if deterministic or rate == 0:
        return t
    if rate == 1:
        return anp.zeros_like(t)
    keep = 1.0 - rate
    mask = _random.bernoulli(key, keep, t.shape)
    return anp.where(mask, t / keep, 0)


# --- convolution and pooling ------------------------------------------------------------------


def _pool_dims(op: str, x: Tracer, window_shape, strides, padding):
    """Flax's layout: (*batch, *window dims, features); the window covers the middle dims."""
    try:
        window = tuple(window_shape)
    except TypeError:
        window = None
    if window is None or x.ndim < len(window) + 1:
        raise ValueError(
            f"{where(op)}: window_shape {window_shape!r} needs an input of shape (*batch, "
            f"*spatial, features) with one spatial dimension per window dimension, got an "
            f"input of shape {x.shape}"
        )
    n_batch = x.ndim - len(window) - 1
    strides = (1,) * len(window) if strides is None else tuple(strides)
    if len(strides) != len(window):
        raise ValueError(
            f"{where(op)}: strides {strides!r} must have one entry per window dimension "
            f"({len(window)})"
        )
    dims = (1,) * n_batch + window + (1,)
    steps = (1,) * n_batch + strides + (1,)
    if not isinstance(padding, str):
        padding = ((0, 0),) * n_batch + tuple(tuple(p) for p in padding) + ((0, 0),)
    return dims, steps, padding


def max_pool(inputs, window_shape, strides=None, padding="VALID"):
    """Maximum over windows of the spatial dims of `inputs` shaped (*batch, *spatial,
    features), as `flax.linen.max_pool`; padding counts as -inf (the dtype's minimum for
    integers), so a window never picks it."""
    x = _array(inputs)
    dims, steps, pads = _pool_dims("max_pool", x, window_shape, strides, padding)
    if dtypes.is_integer(x.dtype):
        init = int(np.iinfo(x.dtype).min)
    else:
        init = False if x.dtype == np.bool_ else -np.inf
    return window_reduce(x, init, "max", dims, steps, pads, op="max_pool")


def avg_pool(inputs, window_shape, strides=None, padding="VALID", count_include_pad=True):
    """Mean over windows of the spatial dims of `inputs` shaped (*batch, *spatial,
    features), as `flax.linen.avg_pool`: with `count_include_pad=True` every window divides
    by its full size (padding counts as zeros), otherwise by the number of real entries."""
    op = "avg_pool"
    x = _array(inputs)
    dims, steps, pads = _pool_dims(op, x, window_shape, strides, padding)
    total = window_reduce(x, 0, "add", dims, steps, pads, op=op)
    if count_include_pad:
        return total / int(np.prod(window_shape))
    ones = full(x.shape, 1, _F32 if not dtypes.is_inexact(total.dtype) else total.dtype)
    counts = window_reduce(ones, 0, "add", dims, steps, pads, op=op)
    return total / counts
