"""Trace stage, statistics family: histogram, bincount, digitize, cov and corrcoef.

Histograms count with one scatter-add into a static number of bins: each value's bin is
found by binary search over the edges (sorting.search), which is exactly NumPy's rule (bin
`i` holds `edges[i] <= x < edges[i + 1]`, the last bin also holds `x == edges[-1]`, values
outside the edges and NaN are dropped). Edges come from NumPy at trace time when `bins` is
an int and `range=` is static, and are computed in the program (the same `linspace`) when
the range comes from the data.

`cov` and `corrcoef` follow NumPy's formulas step for step (mean through `average`,
normalisation by a multiplied reciprocal, clipping to [-1, 1]), including `fweights` and
`aweights`; checks NumPy makes on the data (integer, non-negative weights) are made only
on static weights.
"""

from __future__ import annotations

import operator

import numpy as np

from aotkit import dtypes
from aotkit.tracing.control import cond
from aotkit.tracing.core import (
    Tracer,
    bind1,
    constant,
    export,
    full,
    where,
)
from aotkit.tracing.creation import iota
from aotkit.tracing.elementwise import asarray
from aotkit.tracing.hlo import cast, concat, reshape_to, reverse
from aotkit.tracing.indexing import getitem, update
from aotkit.tracing.linalg import dot
from aotkit.tracing.reduction import average, max_, min_, sum_
from aotkit.tracing.shape import slice_axis
from aotkit.tracing.sorting import search

_BOOL = np.dtype(np.bool_)
_INT64 = np.dtype(np.int64)
_F64 = np.dtype(np.float64)

# --- bins -------------------------------------------------------------------------------------


def _raveled(op: str, a, weights) -> tuple[Tracer, Tracer | None]:
    x = asarray(a)
    if x.dtype == _BOOL:
        # NumPy converts (with a RuntimeWarning) so that values can be subtracted.
        x = cast(x, np.dtype(np.uint8))
    w = _shaped_weights(op, weights, x.shape, "a")
    if w is not None:
        w = reshape_to(w, (w.size,))
    return reshape_to(x, (x.size,)), w


def _shaped_weights(op: str, weights, shape: tuple, of: str) -> Tracer | None:
    """`weights` as an array of `shape`, the shape of the argument named `of`; or None."""
    if weights is None:
        return None
    w = asarray(weights)
    if w.shape != shape:
        raise ValueError(
            f"{where(op)}: weights should have the same shape as {of}, got {w.shape} and {shape}"
        )
    return w


def _static_range(op: str, rng) -> tuple:
    if isinstance(rng, Tracer) or any(isinstance(r, Tracer) for r in rng):
        raise TypeError(
            f"{where(op)}: range= must be static (Python or NumPy numbers): the number of "
            "bins and their edges fix the program; pass range=None to take it from the data"
        )
    first, last = rng
    if first > last:
        raise ValueError(f"{where(op)}: max must be larger than min in range parameter")
    if not (np.isfinite(first) and np.isfinite(last)):
        raise ValueError(f"{where(op)}: supplied range of [{first}, {last}] is not finite")
    if first == last:
        first, last = first - 0.5, last + 0.5
    return first, last


def _bin_type(*keys) -> np.dtype:
    dt = dtypes.result_type(*keys)
    return _F64 if dt == _BOOL or dtypes.is_integer(dt) else dt


def _edges(op: str, x: Tracer, bins, rng) -> Tracer | np.ndarray:
    """The bin edges: a static array, or a tracer when they depend on the data."""
    if isinstance(bins, str):
        raise NotImplementedError(
            f"{where(op)}: bins={bins!r} estimates the number of bins from the data, which "
            "fixes the result's shape; pass an int or an array of edges"
        )
    if isinstance(bins, Tracer) or np.ndim(bins) == 1:
        edges = asarray(bins) if isinstance(bins, Tracer) else np.asarray(bins)
        if edges.ndim != 1:
            raise ValueError(f"{where(op)}: `bins` must be 1d, when an array")
        if isinstance(edges, np.ndarray):
            if (edges[:-1] > edges[1:]).any():
                raise ValueError(f"{where(op)}: `bins` must increase monotonically, when an array")
            edges = edges.astype(dtypes.canonicalize(edges.dtype, where=where(op)))
        return edges
    if np.ndim(bins) != 0:
        raise ValueError(f"{where(op)}: `bins` must be 1d, when an array")
    try:
        n = operator.index(bins)
    except TypeError:
        raise TypeError(
            f"{where(op)}: `bins` must be an integer or an array of edges, got {bins!r}"
        ) from None
    if n < 1:
        raise ValueError(f"{where(op)}: `bins` must be positive, when an integer, got {n}")
    if rng is not None:
        first, last = _static_range(op, rng)
        keys = [dtypes.weak_kind(v) or np.asarray(v).dtype for v in (first, last)]
        bin_type = _bin_type(*keys, x.dtype)
        edges = np.linspace(first, last, n + 1, endpoint=True, dtype=bin_type)
        if (edges[:-1] >= edges[1:]).any():
            raise ValueError(
                f"{where(op)}: Too many bins for data range. Cannot create {n} finite-sized bins"
            )
        return edges
    bin_type = _bin_type(x.dtype)
    if x.size == 0:
        return np.linspace(0, 1, n + 1, dtype=bin_type)
    # From the data, as NumPy: [min, max], widened by 0.5 on each side when they are equal.
    lo, hi = min_(x), max_(x)
    if lo.dtype != bin_type:
        lo, hi = cast(lo, bin_type), cast(hi, bin_type)
    same = bind1("compare", lo, hi, direction="EQ")
    half = full((), 0.5, bin_type)
    lo = bind1("select", same, bind1("subtract", lo, half), lo)
    hi = bind1("select", same, bind1("add", hi, half), hi)
    return _linspace_as_numpy(lo, hi, n + 1)


def _linspace_as_numpy(lo: Tracer, hi: Tracer, num: int) -> Tracer:
    """NumPy's `linspace(lo, hi, num)` for traced 0-d ends, rounded as NumPy rounds it.

    Edges decide which bin a value on them falls in, so they must equal NumPy's bit for bit:
    `i * step` is rounded before `lo` is added. XLA's CPU code generator contracts a
    multiply feeding an add in one fusion into an FMA (one rounding), so the products come
    out of a `stablehlo.if` on a run-time condition (always true: `lo <= hi`, and NaN ends
    give NaN edges either way), whose result XLA must materialize; and XLA's simplifier
    turns a division by a constant into a multiplication by its rounded reciprocal, so the
    divisor is selected by that condition too.
    """
    dt = lo.dtype
    shape = (num,)

    def spread(v):
        return bind1("broadcast_in_dim", v, shape=shape, dims=())

    ordered = bind1("compare", lo, hi, direction="LE")
    # A divisor XLA cannot see as a constant: it would multiply by a rounded reciprocal.
    div = bind1("select", ordered, full((), num - 1, dt), full((), 1, dt))
    step = bind1("divide", bind1("subtract", hi, lo), div)
    product = cond(
        ordered,
        lambda s: bind1("multiply", iota(shape, dt), spread(s)),
        lambda s: full(shape, 0, dt),
        step,
    )
    y = bind1("add", product, spread(lo))
    i32 = np.dtype(np.int32)
    last = bind1("compare", iota(shape, i32), full(shape, num - 1, i32), direction="EQ")
    return bind1("select", last, spread(hi), y)


def _bin_of(x: Tracer, edges: Tracer) -> Tracer:
    """Each value's bin under NumPy's rule, or len(edges) - 1 (dropped) outside the edges."""
    nb = edges.shape[0] - 1
    common = dtypes.result_type(x.dtype, edges.dtype)
    xc, edges = cast(x, common), cast(edges, common)
    lo = reshape_to(slice_axis(edges, 0, 0, 1), ())
    hi = reshape_to(slice_axis(edges, 0, nb, nb + 1), ())
    j = bind1("subtract", search(edges, xc, "right"), full(x.shape, 1, _INT64))
    at_end = bind1(
        "compare", xc, bind1("broadcast_in_dim", hi, shape=x.shape, dims=()), direction="EQ"
    )
    j = bind1("select", at_end, full(x.shape, nb - 1, _INT64), j)
    inside = bind1(
        "and",
        bind1("compare", xc, bind1("broadcast_in_dim", lo, shape=x.shape, dims=()), direction="GE"),
        bind1("compare", xc, bind1("broadcast_in_dim", hi, shape=x.shape, dims=()), direction="LE"),
    )
    return bind1("select", inside, j, full(x.shape, nb, _INT64))


def _scatter_counts(op: str, idx: Tracer, n: int, w: Tracer | None, dtype: np.dtype) -> Tracer:
    """bincount: `out[idx[i]] += w[i]` (or 1), indices outside [0, n) dropped."""
    base = full((n,), 0, dtype)
    if idx.size == 0:
        return base
    if w is None:
        ones = full(idx.shape, True if dtype == _BOOL else 1, dtype)
        return update(base, idx, ones, "add", op)
    return update(base, idx, cast(w, dtype), "add", op)


# --- histogram --------------------------------------------------------------------------------


@export("histogram_bin_edges")
def histogram_bin_edges(a, bins=10, range=None, weights=None):
    x, _ = _raveled("histogram_bin_edges", a, weights)
    edges = _edges("histogram_bin_edges", x, bins, range)
    return constant(edges) if isinstance(edges, np.ndarray) else edges


@export("histogram")
def histogram(a, bins=10, range=None, density=None, weights=None):
    op = "histogram"
    x, w = _raveled(op, a, weights)
    edges = _edges(op, x, bins, range)
    edges_t = constant(edges) if isinstance(edges, np.ndarray) else edges
    nb = edges_t.shape[0] - 1
    ntype = _INT64 if w is None else w.dtype
    if nb < 1:
        raise ValueError(f"{where(op)}: `bins` needs at least two edges, got {edges_t.shape[0]}")
    counts = _scatter_counts(op, _bin_of(x, edges_t), nb, w, ntype)
    if density:
        widths = cast(
            bind1("subtract", slice_axis(edges_t, 0, 1, nb + 1), slice_axis(edges_t, 0, 0, nb)),
            _F64,
        )
        total = sum_(counts)
        rdt = dtypes.result_type(counts.dtype, _F64)
        n = cast(counts, rdt)
        n = bind1("divide", n, cast(widths, rdt))
        n = bind1("divide", n, bind1("broadcast_in_dim", cast(total, rdt), shape=(nb,), dims=()))
        return n, edges_t
    return counts, edges_t


@export("bincount")
def bincount(x, weights=None, minlength=0, *, length=None):
    """NumPy's `bincount`; traced input needs a static `length=` (as JAX's `bincount`):
    values at or above it, and negative ones, are dropped."""
    op = "bincount"
    if not isinstance(x, Tracer) and not isinstance(weights, Tracer) and length is None:
        return constant(np.bincount(np.asarray(x), weights=weights, minlength=minlength))
    i = asarray(x)
    if i.ndim != 1:
        raise ValueError(f"{where(op)}: x must be 1-D, got shape {i.shape}")
    if not (dtypes.is_integer(i.dtype) or i.dtype == _BOOL):
        raise TypeError(
            f"{where(op)}: x must hold non-negative integers, got {i.dtype.name}; cast with "
            ".astype('int64')"
        )
    if length is None:
        raise TypeError(
            f"{where(op)}: the result's length (max(x) + 1) depends on the data; pass "
            "length=N (static: values >= N are dropped), as JAX's bincount takes"
        )
    try:
        n = max(operator.index(length), operator.index(minlength))
    except TypeError:
        raise TypeError(
            f"{where(op)}: length and minlength must be static ints, got {length!r}, {minlength!r}"
        ) from None
    i = cast(i, _INT64)
    negative = bind1("compare", i, full(i.shape, 0, _INT64), direction="LT")
    i = bind1("select", negative, full(i.shape, n, _INT64), i)
    w = _shaped_weights(op, weights, i.shape, "x")
    if w is not None and dtypes.is_complex(w.dtype):
        raise TypeError(f"{where(op)}: weights must be real, got {w.dtype.name}")
    return _scatter_counts(op, i, n, w, _INT64 if w is None else _F64)


@export("digitize")
def digitize(x, bins, right=False):
    op = "digitize"
    v = asarray(x)
    if dtypes.is_complex(v.dtype):
        raise TypeError(f"{where(op)}: x may not be complex")
    if isinstance(bins, Tracer):
        b = bins
        increasing = None
    else:
        arr = np.asarray(bins)
        if arr.ndim != 1:
            raise ValueError(f"{where(op)}: object of too small depth for desired array")
        inc = bool((arr[1:] >= arr[:-1]).all())
        dec = bool((arr[1:] <= arr[:-1]).all())
        if not (inc or dec):
            raise ValueError(f"{where(op)}: bins must be monotonically increasing or decreasing")
        b = asarray(arr)
        increasing = inc
    if b.ndim != 1:
        raise ValueError(f"{where(op)}: bins must be 1-D, got shape {b.shape}")
    common = dtypes.result_type(v.dtype, b.dtype)
    b, v = cast(b, common), cast(v, common)
    side = "left" if right else "right"
    up = search(b, v, side)
    if increasing is True:
        return up
    down = bind1("subtract", full(v.shape, b.shape[0], _INT64), search(reverse(b, (0,)), v, side))
    if increasing is False or b.shape[0] == 0:
        return down
    # Traced bins: which way they run is known only at run time.
    first = getitem(b, 0)
    last = getitem(b, -1)
    rising = bind1("compare", first, last, direction="LE")
    return bind1("select", bind1("broadcast_in_dim", rising, shape=v.shape, dims=()), up, down)


# --- cov, corrcoef ----------------------------------------------------------------------------


def _weights(op: str, name: str, wt, n: int) -> Tracer:
    if isinstance(wt, Tracer):
        w = cast(wt, _F64)
    else:
        arr = np.asarray(wt, dtype=float)
        if name == "fweights" and not (arr == np.around(arr)).all():
            raise TypeError(f"{where(op)}: fweights must be integer")
        if arr.ndim <= 1 and arr.shape and (arr < 0).any():
            raise ValueError(f"{where(op)}: {name} cannot be negative")
        w = constant(arr)
    if w.ndim > 1:
        raise RuntimeError(f"{where(op)}: cannot handle multidimensional {name}")
    if w.ndim == 0 or w.shape[0] != n:
        raise RuntimeError(
            f"{where(op)}: incompatible numbers of samples ({n}) and {name} ({w.shape})"
        )
    return w


def _as_rows(op: str, m, dtype: np.dtype, what: str) -> tuple[Tracer, int]:
    """`m` as a 2-D array of `dtype` (NumPy's `array(m, ndmin=2)`) and its own ndim."""
    x = asarray(m)
    if x.ndim > 2:
        raise ValueError(f"{where(op)}: {what} has more than 2 dimensions, got shape {x.shape}")
    x = cast(x, dtype)
    if x.ndim < 2:
        x = reshape_to(x, (1,) * (2 - x.ndim) + x.shape)
    return x, asarray(m).ndim


@export("cov")
def cov(m, y=None, rowvar=True, bias=False, ddof=None, fweights=None, aweights=None, *, dtype=None):
    op = "cov"
    if ddof is not None and ddof != int(ddof):
        raise ValueError(f"{where(op)}: ddof must be integer, got {ddof!r}")
    keys = [asarray(m).dtype] + ([asarray(y).dtype] if y is not None else [])
    if dtype is None:
        dt = dtypes.result_type(*keys, _F64)
    else:
        dt = dtypes.canonicalize(dtype, where=where(op))
    X, m_ndim = _as_rows(op, m, dt, "m")
    if not rowvar and m_ndim != 1:
        X = bind1("transpose", X, perm=(1, 0))
    if X.shape[0] == 0:
        return full((0, 0), 0, _F64)
    if y is not None:
        Y, _ = _as_rows(op, y, dt, "y")
        if not rowvar and Y.shape[0] != 1:
            Y = bind1("transpose", Y, perm=(1, 0))
        if Y.shape[1] != X.shape[1]:
            raise ValueError(
                f"{where(op)}: m and y have {X.shape[1]} and {Y.shape[1]} observations; they "
                "must have the same number"
            )
        X = concat([X, Y], 0)
    if ddof is None:
        ddof = 0 if bias else 1
    n = X.shape[1]
    w = None
    fw = _weights(op, "fweights", fweights, n) if fweights is not None else None
    aw = _weights(op, "aweights", aweights, n) if aweights is not None else None
    if fw is not None:
        w = fw
    if aw is not None:
        w = aw if w is None else w * aw
    avg, w_sum = average(X, axis=1, weights=w, returned=True)
    w_sum = w_sum[0]
    if w is None:
        fact = n - ddof
        with np.errstate(divide="ignore"):
            scale = constant(np.true_divide(1, fact if fact > 0 else 0.0))
    else:
        if ddof == 0:
            fact = w_sum
        elif aw is None:
            fact = w_sum - ddof
        else:
            fact = w_sum - ddof * sum_(w * aw) / w_sum
        # NumPy warns and divides by 0.0 when the degrees of freedom are not positive.
        fact = bind1("select", fact <= 0, full(fact.shape, 0.0, fact.dtype), fact)
        scale = 1 / fact
    # NumPy updates X and c in place, so both keep their dtype through these steps.
    X = cast(X - avg[:, None], X.dtype)
    X_T = X.T if w is None else (X * w).T
    c = dot(X, _conj(X_T))
    c = cast(c * scale, c.dtype)
    return reshape_to(c, tuple(d for d in c.shape if d != 1))


def _conj(x: Tracer) -> Tracer:
    if not dtypes.is_complex(x.dtype):
        return x
    return bind1("complex", bind1("real", x), bind1("negate", bind1("imag", x)))


@export("corrcoef")
def corrcoef(x, y=None, rowvar=True, *, dtype=None):
    c = cov(x, y, rowvar, dtype=dtype)
    if c.ndim == 0:
        return c / c
    d = getitem(c, (np.arange(c.shape[0]), np.arange(c.shape[0])))
    std = bind1("sqrt", bind1("real", d) if dtypes.is_complex(d.dtype) else d)
    c = c / std[:, None]
    c = c / std[None, :]
    if dtypes.is_complex(c.dtype):
        re = _clip(bind1("real", c))
        im = _clip(bind1("imag", c))
        return bind1("complex", re, im)
    return _clip(c)


def _clip(x: Tracer) -> Tracer:
    lo, hi = full(x.shape, -1, x.dtype), full(x.shape, 1, x.dtype)
    return bind1("min", bind1("max", x, lo), hi)
