"""`aotkit.random`: JAX's default PRNG (Threefry-2x32) with explicit keys.

A key is a `uint32[2]` array, JAX's raw ("legacy") key: `aotkit.random.key(0)` and
`PRNGKey(0)` return the NumPy array `[0, 0]`, which a traced function takes as an
argument or embeds as a constant. Every function computes what `jax.random` computes for
the same key (JAX's default `jax_threefry_partitionable` scheme: value `i` of a result
hashes the counter `(0, i)`), with integer operations only, so the bits are the same on
every backend; floats then follow JAX's formulas, within float rounding of JAX's.

`key`, `split` and `fold_in` also run on concrete keys outside a trace (in NumPy, the same
hash), so a training loop can split keys in Python; the samplers build StableHLO and need
a traced function (`aotkit.jit`, `aotkit.lower`).

Defaults follow `jax.random` in JAX's default 32-bit mode: float32 for `uniform`,
`normal` and `gumbel`, int32 for `randint`, `categorical` and `permutation(n)`.
Divergences: seeds are read as 64-bit integers (the high word is kept, as JAX does with
`jax_enable_x64`; JAX's 32-bit mode keeps only the low word, so seeds outside
[0, 2**32) match JAX only with x64 on); `categorical(replace=False)` and
`gumbel(mode="highest")` are not supported.
"""

from __future__ import annotations

import math

import jax
import ml_dtypes
import numpy as np

import aotkit.numpy as anp
from aotkit import dtypes
from aotkit.arguments import key_dtype, key_impl_name, spec_text
from aotkit.tracing.core import Tracer, bind1, full, is_tracing, where
from aotkit.tracing.creation import iota
from aotkit.tracing.hlo import broadcast_to_shape, broadcasts_to, cast, normalize_axis
from aotkit.tracing.keys import KeyTracer, is_key
from aotkit.tracing.nn import erf_inv, sort_key_val

__all__ = [
    "PRNGKey",
    "bernoulli",
    "bits",
    "categorical",
    "fold_in",
    "gumbel",
    "key",
    "key_data",
    "normal",
    "permutation",
    "randint",
    "split",
    "uniform",
]

_U32 = np.dtype(np.uint32)
_U64 = np.dtype(np.uint64)
_F32 = np.dtype(np.float32)
_I32 = np.dtype(np.int32)
_UINT = {8: np.dtype(np.uint8), 16: np.dtype(np.uint16), 32: _U32, 64: _U64}

# --- Threefry-2x32 ----------------------------------------------------------------------------
# One code path for NumPy arrays (concrete keys) and tracers: both wrap uint32 arithmetic.

_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
_PARITY = 0x1BD11BDA


def _rotl(x, r: int):
    return (x << r) | (x >> (32 - r))


def _threefry(k1, k2, x1, x2):
    """The Threefry-2x32 block cipher (20 rounds) of counters (x1, x2) under key (k1, k2)."""
    ks = (k1, k2, k1 ^ k2 ^ _PARITY)
    a, b = x1 + ks[0], x2 + ks[1]
    for i in range(5):
        for r in _ROTATIONS[i % 2]:
            a = a + b
            b = _rotl(b, r) ^ a
        a = a + ks[(i + 1) % 3]
        b = b + ks[(i + 2) % 3] + (i + 1)
    return a, b


def _hash(k1, k2, shape: tuple[int, ...], traced: bool):
    """Threefry of the counters (0, i) for i = 0 .. size-1, laid out in `shape`."""
    size = math.prod(shape)
    if traced:
        lo = anp.reshape(iota((size,), _U32), shape)
        return _threefry(k1, k2, full(shape, 0, _U32), lo)
    with np.errstate(over="ignore"):
        lo = np.arange(size, dtype=_U32).reshape(shape)
        return _threefry(k1, k2, np.zeros(shape, _U32), lo)


# --- keys -------------------------------------------------------------------------------------


def _check_traced_call(op: str) -> None:
    if not is_tracing():
        raise RuntimeError(
            f"aotkit.random.{op}: sampling builds StableHLO, so it runs inside a traced "
            "function (aotkit.jit or aotkit.lower); outside a trace only key, split and "
            "fold_in run, on concrete keys"
        )


def _key_parts(op: str, key):
    """(k1, k2, traced) of a uint32[2] key (or a typed Threefry key's data); a concrete key
    in a trace stays concrete."""
    if is_key(key):
        if key.shape != () or key_impl_name(key.dtype) != "threefry2x32":
            raise TypeError(
                f"{where('aotkit.random.' + op)}: a typed key must be one Threefry key "
                f"(key<fry>[]), got {spec_text(key.spec)}; split a batch of keys with "
                "aotkit.vmap, or let JAX lower the function (frontend='jax')"
            )
        key = key.data
    if isinstance(key, Tracer):
        if key.shape == (2,) and key.dtype == _U32:
            return key[0], key[1], True
        desc = f"{dtypes.short_name(key.dtype)}{list(key.shape)}"
    else:
        try:
            arr = np.asarray(key)
        except Exception:  # a typed JAX key array refuses np.asarray
            arr = None
        if arr is not None and arr.shape == (2,) and arr.dtype == _U32:
            return arr[0], arr[1], False
        desc = f"{arr.dtype}{list(arr.shape)}" if arr is not None else type(key).__name__
    raise TypeError(
        f"{where('aotkit.random.' + op)}: key must be a uint32[2] array (from "
        f"aotkit.random.key, split or fold_in), got {desc}; a typed JAX key converts with "
        "jax.random.key_data(key)"
    )


def _as_traced(k1, k2, traced: bool):
    if traced:
        return k1, k2
    return full((), k1, _U32), full((), k2, _U32)


def _from_parts(b1, b2, traced: bool):
    if traced:
        return anp.stack([b1, b2], axis=-1)
    return np.stack([b1, b2], axis=-1).astype(_U32)


def key(seed):
    """A key from an integer seed: `[seed >> 32, seed & 0xFFFFFFFF]` as uint32[2].

    Python ints are read as int64 (as JAX does); NumPy and traced integers by their dtype
    (32-bit and narrower ones have a zero high word). A traced seed gives a
    traced key; otherwise the key is a NumPy array.
    """
    if isinstance(seed, Tracer):
        if seed.shape != () or not dtypes.is_integer(seed.dtype):
            raise TypeError(
                f"{where('aotkit.random.key')}: seed must be a scalar integer, got a traced "
                f"{dtypes.short_name(seed.dtype)}{list(seed.shape)}"
            )
        if seed.dtype.itemsize == 8:
            u = cast(seed, _U64)
            return anp.stack([cast(u >> 32, _U32), cast(u, _U32)])
        return anp.stack([full((), 0, _U32), cast(seed, _U32)])
    if isinstance(seed, int) and not isinstance(seed, bool):
        if not -(2**63) <= seed < 2**63:
            raise ValueError(
                f"{where('aotkit.random.key')}: seed {seed} does not fit in int64; pass an int "
                "in [-2**63, 2**63) (or a np.uint64)"
            )
        u = seed % 2**64
        return np.array([u >> 32, u & 0xFFFFFFFF], _U32)
    arr = np.asarray(seed)
    if arr.shape != () or arr.dtype.kind not in "iu":
        raise TypeError(
            f"{where('aotkit.random.key')}: seed must be a scalar integer, got {seed!r:.60}"
        )
    u = int(arr) % 2 ** (64 if arr.dtype.itemsize == 8 else 32)
    return np.array([u >> 32, u & 0xFFFFFFFF], _U32)


PRNGKey = key


def _shape(op: str, shape) -> tuple[int, ...]:
    if isinstance(shape, int | np.integer) and not isinstance(shape, bool):
        shape = (shape,)
    try:
        out = tuple(shape)
    except TypeError:
        out = None
    if out is None or any(
        isinstance(d, bool) or not isinstance(d, int | np.integer) or d < 0 for d in out
    ):
        raise TypeError(
            f"{where('aotkit.random.' + op)}: shape must be a tuple of non-negative ints "
            f"(static), got {shape!r}"
        )
    return tuple(int(d) for d in out)


def _like(key, data):
    """New key data as `key` is: typed keys of its dtype for a typed key, else the data."""
    return KeyTracer(data, key.dtype) if is_key(key) else data


def key_data(key):
    """The uint32 data of a typed key (`jax.random.key`, traced or concrete); a raw
    uint32 key as it is."""
    if is_key(key):
        return key.data
    if key_dtype(key) is not None:
        return jax.random.key_data(key)
    return key


def split(key, num=2):
    """`num` new keys (an int or a shape) from `key`: an array of shape (*num, 2) (typed
    keys of shape `num` from a typed key)."""
    k1, k2, traced = _key_parts("split", key)
    shape = _shape("split", num)
    b1, b2 = _hash(k1, k2, shape, traced)
    return _like(key, _from_parts(b1, b2, traced))


def fold_in(key, data):
    """A new key from `key` and a 32-bit integer `data` (a Python int or a scalar array)."""
    k1, k2, traced = _key_parts("fold_in", key)
    if isinstance(data, Tracer):
        if data.shape != () or not dtypes.is_integer(data.dtype):
            raise TypeError(
                f"{where('aotkit.random.fold_in')}: data must be a scalar integer, got a traced "
                f"{dtypes.short_name(data.dtype)}{list(data.shape)}"
            )
        k1, k2 = _as_traced(k1, k2, traced)
        b1, b2 = _threefry(k1, k2, full((), 0, _U32), cast(data, _U32))
        return _like(key, _from_parts(b1, b2, True))
    arr = np.asarray(data)
    if arr.shape != () or arr.dtype.kind not in "iu" or not 0 <= int(arr) < 2**32:
        raise ValueError(
            f"{where('aotkit.random.fold_in')}: data must be a scalar integer in [0, 2**32), "
            f"got {data!r:.60}"
        )
    d = np.uint32(int(arr))
    if traced:
        b1, b2 = _threefry(k1, k2, full((), 0, _U32), full((), d, _U32))
    else:
        with np.errstate(over="ignore"):
            b1, b2 = _threefry(k1, k2, np.uint32(0), d)
    return _like(key, _from_parts(b1, b2, traced))


# --- bits and samplers ------------------------------------------------------------------------


def _random_bits(op: str, key, bit_width: int, shape: tuple[int, ...]) -> Tracer:
    _check_traced_call(op)
    if math.prod(shape) >= 2**32:
        raise ValueError(
            f"{where('aotkit.random.' + op)}: shape {shape} holds 2**32 or more values; draw "
            "fewer at a time"
        )
    k1, k2, traced = _key_parts(op, key)
    k1, k2 = _as_traced(k1, k2, traced)
    b1, b2 = _hash(k1, k2, shape, True)
    if bit_width == 64:
        return (cast(b1, _U64) << 32) | cast(b2, _U64)
    bits = b1 ^ b2
    return bits if bit_width == 32 else cast(bits, _UINT[bit_width])


def _dtype(op: str, dtype, default: np.dtype, kinds: str, what: str) -> np.dtype:
    dt = default if dtype is None else dtypes.canonicalize(dtype, where=where(op))
    kind = "f" if dtypes.is_float(dt) else dt.kind
    if kind not in kinds:
        raise ValueError(f"{where(op)}: dtype must be {what}, got {dt.name}")
    return dt


def bits(key, shape=(), dtype=None):
    """Uniform random bits as unsigned integers (default uint32)."""
    op = "aotkit.random.bits"
    dt = _dtype(op, dtype, _U32, "u", "an unsigned integer dtype")
    return _random_bits("bits", key, 8 * dt.itemsize, _shape("bits", shape))


def _bound(op: str, v, dtype: np.dtype, shape: tuple[int, ...], name: str) -> Tracer:
    """A minval/maxval operand cast to `dtype` and broadcast to the result shape."""
    t = anp.asarray(v) if not isinstance(v, Tracer) else v
    _check_broadcast(op, name, t.shape, shape)
    return broadcast_to_shape(cast(t, dtype), shape)


def _uniform(op: str, key, shape, dtype, minval, maxval) -> Tracer:
    info = _finfo(dtype)
    nbits, nmant = info.bits, info.nmant
    rng_bits = 8 if nmant < 8 else nbits
    raw = _random_bits(op.rsplit(".", 1)[-1], key, rng_bits, shape)
    uint = _UINT[nbits]
    raw = cast(raw, uint)
    one = np.array(1.0, dtype).view(uint)
    mantissa = (raw >> (rng_bits - nmant)) | full(shape, one, uint)
    floats = bind1("bitcast_convert", mantissa, dtype=dtype)
    floats = bind1("subtract", floats, full(shape, 1, dtype))
    lo = _bound(op, minval, dtype, shape, "minval")
    hi = _bound(op, maxval, dtype, shape, "maxval")
    scaled = bind1("add", bind1("multiply", floats, bind1("subtract", hi, lo)), lo)
    return bind1("max", lo, scaled)


def _finfo(dtype: np.dtype):
    return ml_dtypes.finfo(dtype)  # np.finfo knows no bfloat16


def uniform(key, shape=(), dtype=None, minval=0.0, maxval=1.0):
    """Floats uniform in [minval, maxval) (default float32), as `jax.random.uniform`."""
    op = "aotkit.random.uniform"
    dt = _dtype(op, dtype, _F32, "f", "a float dtype")
    return _uniform(op, key, _shape("uniform", shape), dt, minval, maxval)


def _normal_real(op: str, key, shape, dtype) -> Tracer:
    lo = np.nextafter(np.array(-1.0, dtype), np.array(0.0, dtype))
    u = _uniform(op, key, shape, dtype, lo, 1.0)
    return bind1("multiply", full(shape, np.sqrt(2), dtype), erf_inv(u))


def normal(key, shape=(), dtype=None):
    """Standard normal floats (default float32; complex dtypes too), as `jax.random.normal`:
    `sqrt(2) * erf_inv(u)` of a uniform `u` in (-1, 1)."""
    op = "aotkit.random.normal"
    dt = _dtype(op, dtype, _F32, "fc", "a float or complex dtype")
    shape = _shape("normal", shape)
    if not dtypes.is_complex(dt):
        return _normal_real(op, key, shape, dt)
    k_re, k_im = split(key)
    real = dtypes.real_dtype(dt)
    re = _normal_real(op, k_re, shape, real)
    im = _normal_real(op, k_im, shape, real)
    z = bind1("complex", re, im)
    return bind1("divide", z, full(shape, np.sqrt(2), dt))


def _float_param(op: str, p) -> Tracer:
    if isinstance(p, Tracer) or isinstance(p, np.ndarray | np.generic):
        t = anp.asarray(p)
        if not dtypes.is_float(t.dtype):
            raise TypeError(
                f"{where(op)}: p must be a float or a float array, got dtype {t.dtype.name}"
            )
        return t
    # A Python number is float32, as JAX's weakly typed scalar would become.
    return anp.asarray(p, dtype=_F32)


def bernoulli(key, p=0.5, shape=None, mode="low"):
    """Booleans that are True with probability `p` (`uniform < p`, as `jax.random`).

    `mode="high"` draws two uniforms per value for small `p`, as JAX does."""
    op = "aotkit.random.bernoulli"
    if mode not in ("low", "high"):
        raise ValueError(f"{where(op)}: mode must be 'low' or 'high', got {mode!r}")
    pt = _float_param(op, p)
    if shape is None:
        shape = pt.shape
    else:
        shape = _shape("bernoulli", shape)
        _check_broadcast(op, "p", pt.shape, shape)
    p_full = broadcast_to_shape(pt, shape)
    if mode == "low":
        return anp.less(uniform(key, shape, pt.dtype), p_full)
    u = uniform(key, (2, *shape), pt.dtype)
    u1, u2 = u[0], u[1] * (2.0 ** -_finfo(pt.dtype).nmant)
    return anp.less(u2, p_full - u1)


def _check_broadcast(op: str, name: str, shape, target) -> None:
    if not broadcasts_to(tuple(shape), target):
        raise ValueError(
            f"{where(op)}: {name} of shape {tuple(shape)} does not broadcast to the shape {target}"
        )


def _int_bound(op: str, v, name: str) -> Tracer:
    """minval/maxval as an integer tracer; Python ints are int64 (uint64 beyond)."""
    if isinstance(v, Tracer):
        t = v
    else:
        arr = np.asarray(v)
        if arr.dtype.kind not in "iuf":
            raise TypeError(f"{where(op)}: {name} must be an integer, got {v!r:.60}")
        t = anp.asarray(arr)
    if not dtypes.is_integer(t.dtype):
        if not dtypes.is_float(t.dtype):
            raise TypeError(f"{where(op)}: {name} must be an integer, got dtype {t.dtype.name}")
        t = cast(t, np.dtype(np.int64))
    return t


def _clip_cast(x: Tracer, dtype: np.dtype) -> Tracer:
    """`x` cast to `dtype`, clipped to the values both dtypes hold (not wrapped)."""
    src, dst = np.iinfo(x.dtype), np.iinfo(dtype)
    lo, hi = max(src.min, dst.min), min(src.max, dst.max)
    return cast(anp.clip(x, lo, hi), dtype)


def randint(key, shape, minval, maxval, dtype=None):
    """Integers uniform in [minval, maxval) (default int32), as `jax.random.randint`:
    two draws of the dtype's width reduced modulo the span (biased like JAX's when the
    span is not a power of two); narrow dtypes are drawn as int32."""
    op = "aotkit.random.randint"
    dt = _dtype(op, dtype, _I32, "iu", "an integer dtype")
    shape = _shape("randint", shape)
    lo, hi = _int_bound(op, minval, "minval"), _int_bound(op, maxval, "maxval")
    _check_broadcast(op, "minval", lo.shape, shape)
    _check_broadcast(op, "maxval", hi.shape, shape)
    info = np.iinfo(dt)
    if info.bits < 32:
        lo = anp.clip(cast(lo, _I32), int(info.min), int(info.max))
        hi = anp.clip(cast(hi, _I32), int(info.min), int(info.max) + 1)
        return cast(_randint(key, lo, hi, shape, _I32), dt)
    return _randint(key, lo, hi, shape, dt)


def _randint(key, lo: Tracer, hi: Tracer, shape, dtype: np.dtype) -> Tracer:
    nbits = np.iinfo(dtype).bits
    out_of_range = anp.greater(hi, min(np.iinfo(dtype).max, np.iinfo(hi.dtype).max))
    out_of_range = broadcast_to_shape(out_of_range, shape)
    lo = broadcast_to_shape(_clip_cast(lo, dtype), shape)
    hi = broadcast_to_shape(_clip_cast(hi, dtype), shape)
    k1, k2 = split(key)
    higher = _random_bits("randint", k1, nbits, shape)
    lower = _random_bits("randint", k2, nbits, shape)
    unsigned = _UINT[nbits]
    span = cast(bind1("subtract", hi, lo), unsigned)
    one = full(shape, 1, unsigned)
    # An empty range returns minval; a range one past the dtype's top needs a span one
    # larger, which wraps to 0 for the full range (then every remainder below is a no-op).
    span = bind1("select", anp.less_equal(hi, lo), one, span)
    span = bind1("select", anp.logical_and(out_of_range, anp.greater(hi, lo)), span + 1, span)

    zero_span = anp.equal(span, 0)
    safe_span = bind1("select", zero_span, one, span)

    def mod_span(a):
        # XLA's x % 0 is x, which the full range relies on; spelled out, because the
        # reference interpreter dies of SIGFPE on an integer remainder by zero.
        return bind1("select", zero_span, a, bind1("rem", a, safe_span))

    multiplier = mod_span(full(shape, 2 ** (nbits // 2), unsigned))
    multiplier = mod_span(bind1("multiply", multiplier, multiplier))
    offset = bind1("add", bind1("multiply", mod_span(higher), multiplier), mod_span(lower))
    offset = mod_span(offset)
    return bind1("add", lo, cast(offset, dtype))


def _shuffle(key, x: Tracer, axis: int) -> Tracer:
    """JAX's shuffle: stable sorts by fresh random 32-bit keys, enough rounds that key
    collisions are unlikely (3 * ln(size) / ln(2**32 - 1) rounds)."""
    rounds = int(np.ceil(3 * np.log(max(1, x.size)) / np.log(2**32 - 1)))
    for _ in range(rounds):
        key, sub = split(key)
        sort_keys = _random_bits("permutation", sub, 32, x.shape)
        _, x = sort_key_val(sort_keys, x, axis)
    return x


def permutation(key, x, axis=0, independent=False):
    """A random permutation of `range(x)` (int32) for an int `x`, or of an array's entries
    along `axis` (each slice on its own with `independent=True`), as `jax.random`."""
    op = "aotkit.random.permutation"
    _check_traced_call("permutation")
    if isinstance(x, int | np.integer) and not isinstance(x, bool):
        if x < 0:
            raise ValueError(f"{where(op)}: x must be a non-negative int, got {x}")
        return _shuffle(key, iota((int(x),), _I32), 0)
    t = x if isinstance(x, Tracer) else anp.asarray(x)
    if t.ndim == 0:
        raise TypeError(
            f"{where(op)}: x must be a static int or an array of at least one dimension, got a "
            f"0-d array; pass a Python int to permute range(x)"
        )
    ax = normalize_axis(op, axis, t.ndim)
    if independent or t.ndim == 1:
        return _shuffle(key, t, ax)
    order = _shuffle(key, iota((t.shape[ax],), _I32), 0)
    return anp.take(t, order, axis=ax)


def gumbel(key, shape=(), dtype=None, mode=None):
    """Standard Gumbel floats (default float32), `-log(-log(u))`, as `jax.random.gumbel`."""
    op = "aotkit.random.gumbel"
    dt = _dtype(op, dtype, _F32, "f", "a float dtype")
    shape = _shape("gumbel", shape)
    mode = "low" if mode is None else mode
    if mode not in ("low", "high"):
        raise ValueError(
            f"{where(op)}: mode must be 'low' or 'high' ('highest' is not supported), got {mode!r}"
        )
    info = _finfo(dt)
    if mode == "low":
        u = _uniform(op, key, shape, dt, info.tiny, 1.0)
        return -anp.log(-anp.log(u))
    both = _uniform(op, key, (2, *shape), dt, 0.0, 1.0)
    high, low = both[0], both[1]
    x = anp.where(high >= 0.5, high, high + (2.0**-info.nmant) * low + info.tiny)
    return -anp.log(-anp.log1p(-x))


def categorical(key, logits, axis=-1, shape=None, replace=True, mode=None):
    """Indices (int32) drawn from `softmax(logits, axis)` by the Gumbel-max trick, as
    `jax.random.categorical`; `shape` may add leading sample dimensions."""
    op = "aotkit.random.categorical"
    _check_traced_call("categorical")
    lg = logits if isinstance(logits, Tracer) else anp.asarray(logits)
    if not dtypes.is_float(lg.dtype):
        raise TypeError(f"{where(op)}: logits must be floats, got dtype {lg.dtype.name}")
    if not replace:
        raise NotImplementedError(
            f"{where(op)}: replace=False is not supported (it needs top_k); sample with "
            "replacement, or use permutation for a full draw without replacement"
        )
    ax = normalize_axis(op, axis, lg.ndim)
    batch = lg.shape[:ax] + lg.shape[ax + 1 :]
    if shape is None:
        shape = batch
    else:
        shape = _shape("categorical", shape)
        _check_broadcast(op, "the logits' batch", batch, shape)
    prefix = shape[: len(shape) - len(batch)]
    draws = list(shape[len(prefix) :])
    draws.insert(ax, lg.shape[ax])
    g = gumbel(key, (*prefix, *draws), lg.dtype, mode=mode)
    scores = g + anp.reshape(lg, (1,) * len(prefix) + lg.shape)
    return cast(anp.argmax(scores, axis=len(prefix) + ax), _I32)
