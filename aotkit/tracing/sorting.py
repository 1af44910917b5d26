"""Trace stage, sorting family: sort, argsort, partition, searchsorted, unique, quantiles.

Every sort is one `stablehlo.sort` (stable) whose comparator implements NumPy's total
order: integers and booleans by value; floats by value with every NaN after every number
(`-0.0` and `0.0` compare equal, so a stable sort keeps their input order, as NumPy's stable
sort does); complex numbers lexicographically by (real, imag) within NumPy's NaN classes
(`R + Rj < R + nanj < nan + Rj < nan + nanj`). Several keys sort lexicographically, which
gives `lexsort`, and `unique(axis=...)` on rows.

All sorts are stable whatever `kind=` says, so `argsort` equals NumPy's
`argsort(kind='stable')`; `partition`/`argpartition` sort fully (a valid partition for every
`kth`). `searchsorted` is a branch-free binary search (`ceil(log2(n + 1))` gathers, no
loop), in the same order. Shapes that depend on data need a static bound: `unique` takes
`size=` (and `fill_value=`), with JAX's padding rule.

Quantiles (`median`, `percentile`, `quantile` and their `nan*` forms) sort along the
reduced axes and interpolate with NumPy's formulas for all thirteen `method=` values; the
index arithmetic is written once with NumPy calls, which run at trace time when `q` and the
slice length are static and dispatch to aotkit when they are traced (`nan*` forms count
the valid values of each slice at run time).
"""

from __future__ import annotations

import math
import operator
from collections import namedtuple

import numpy as np
from jaxlib.mlir import ir
from jaxlib.mlir.dialects import stablehlo

from aotkit import dtypes
from aotkit.tracing.core import (
    RuleContext,
    Tracer,
    bind,
    bind1,
    constant,
    export,
    full,
    register,
    where,
)
from aotkit.tracing.creation import iota
from aotkit.tracing.elementwise import asarray
from aotkit.tracing.hlo import broadcast_to_shape, cast, concat, normalize_axis, rebind, reshape_to
from aotkit.tracing.indexing import getitem, take_along_axis, update
from aotkit.tracing.outputs import accepts_out
from aotkit.tracing.reduction import cumulative, mean, reduce_raw
from aotkit.tracing.reduction import reduction_axes as normalize_axes
from aotkit.tracing.shape import slice_axis

_BOOL = np.dtype(np.bool_)
_INT64 = np.dtype(np.int64)
_F64 = np.dtype(np.float64)

# --- NumPy's total order, on IR values (comparators) and on tracers ---------------------------


class _IrOps:
    """Comparison building blocks on scalar `ir.Value`s, for a sort comparator region."""

    @staticmethod
    def cmp(x, y, direction):
        return stablehlo.compare(x, y, stablehlo.ComparisonDirectionAttr.get(direction))

    and_ = staticmethod(stablehlo.and_)
    or_ = staticmethod(stablehlo.or_)
    not_ = staticmethod(stablehlo.not_)
    real = staticmethod(stablehlo.real)
    imag = staticmethod(stablehlo.imag)


class _TracerOps:
    """The same building blocks on tracers (for searchsorted and unique)."""

    @staticmethod
    def cmp(x, y, direction):
        return bind1("compare", x, y, direction=direction)

    @staticmethod
    def and_(x, y):
        return bind1("and", x, y)

    @staticmethod
    def or_(x, y):
        return bind1("or", x, y)

    @staticmethod
    def not_(x):
        return bind1("not", x)

    @staticmethod
    def real(x):
        return bind1("real", x)

    @staticmethod
    def imag(x):
        return bind1("imag", x)


def _real_less_equal(ops, kind: str, a, b):
    """(a < b, a == b) in NumPy's order for one real key of dtype kind `kind`."""
    if kind == "b":
        return ops.and_(ops.not_(a), b), ops.cmp(a, b, "EQ")
    if kind in "iu":
        return ops.cmp(a, b, "LT"), ops.cmp(a, b, "EQ")
    a_nan, b_nan = ops.cmp(a, a, "NE"), ops.cmp(b, b, "NE")
    less = ops.or_(ops.cmp(a, b, "LT"), ops.and_(b_nan, ops.not_(a_nan)))
    equal = ops.or_(ops.cmp(a, b, "EQ"), ops.and_(a_nan, b_nan))
    return less, equal


def _key_less_equal(ops, kind: str, a, b):
    if kind != "c":
        return _real_less_equal(ops, kind, a, b)
    # NumPy's classes R + Rj < R + nanj < nan + Rj < nan + nanj come first; within a class
    # values order by (real, imag), the NaN parts comparing equal.
    ar, ai, br, bi = ops.real(a), ops.imag(a), ops.real(b), ops.imag(b)
    ar_nan, ai_nan = ops.cmp(ar, ar, "NE"), ops.cmp(ai, ai, "NE")
    br_nan, bi_nan = ops.cmp(br, br, "NE"), ops.cmp(bi, bi, "NE")
    re_same, im_same = ops.cmp(ar_nan, br_nan, "EQ"), ops.cmp(ai_nan, bi_nan, "EQ")
    class_lt = ops.or_(
        ops.and_(ops.not_(ar_nan), br_nan),
        ops.and_(re_same, ops.and_(ops.not_(ai_nan), bi_nan)),
    )
    same_class = ops.and_(re_same, im_same)
    re_lt, re_eq = _real_less_equal(ops, "f", ar, br)
    im_lt, im_eq = _real_less_equal(ops, "f", ai, bi)
    within = ops.or_(re_lt, ops.and_(re_eq, im_lt))
    less = ops.or_(class_lt, ops.and_(same_class, within))
    return less, ops.and_(same_class, ops.and_(re_eq, im_eq))


def _lex_less(ops, kinds: tuple[str, ...], lhs: list, rhs: list):
    """`lhs < rhs` for tuples of keys, the first key most significant."""
    less, equal = _key_less_equal(ops, kinds[-1], lhs[-1], rhs[-1])
    for kind, a, b in zip(
        reversed(kinds[:-1]), reversed(lhs[:-1]), reversed(rhs[:-1]), strict=True
    ):
        k_less, k_equal = _key_less_equal(ops, kind, a, b)
        less = ops.or_(k_less, ops.and_(k_equal, less))
    return less


def less(a: Tracer, b: Tracer) -> Tracer:
    """Elementwise `a < b` in NumPy's sort order (operands of one dtype and shape)."""
    return _lex_less(_TracerOps, (a.dtype.kind,), [a], [b])


def _not_equal_adjacent(x: Tracer) -> Tracer:
    """`x[i] != x[i - 1]` along the last axis in NumPy's order (NaN equals NaN)."""
    n = x.shape[-1]
    hi, lo = slice_axis(x, x.ndim - 1, 1, n), slice_axis(x, x.ndim - 1, 0, n - 1)
    _, equal = _key_less_equal(_TracerOps, x.dtype.kind, hi, lo)
    return bind1("not", equal)


# --- primitive --------------------------------------------------------------------------------


def _sort_shape(*avals, dimension, num_keys):
    return list(avals)


@register("sort", shape=_sort_shape)
def _lower_sort(ctx: RuleContext, *operands, dimension, num_keys):
    op = stablehlo.SortOp(
        [ctx.out_type(i) for i in range(len(operands))],
        list(operands),
        dimension=dimension,
        is_stable=True,
    )
    scalars = []
    for _, dtype in ctx.avals_in:
        t = dtypes.tensor_type((), dtype)
        scalars += [t, t]
    block = op.comparator.blocks.append(*scalars)
    args = list(block.arguments)
    kinds = tuple(d.kind for _, d in ctx.avals_in[:num_keys])
    with ir.InsertionPoint(block):
        lhs, rhs = args[0 : 2 * num_keys : 2], args[1 : 2 * num_keys : 2]
        stablehlo.return_([_lex_less(_IrOps, kinds, lhs, rhs)])
    return list(op.results)


def sort_along(keys: list[Tracer], others: list[Tracer], axis: int) -> list[Tracer]:
    """Sorts `keys + others` (one shape) along `axis` by `keys`, stably; returns all."""
    if keys[0].shape[axis] <= 1:
        return keys + others
    return bind("sort", *keys, *others, dimension=axis, num_keys=len(keys))


def _index_iota(shape: tuple[int, ...], axis: int) -> Tracer:
    return iota(shape, _INT64, axis)


# --- argument checking ------------------------------------------------------------------------

_KINDS = ("quicksort", "mergesort", "heapsort", "stable")


def _check_kind(op: str, kind, stable, order) -> None:
    if order is not None:
        raise NotImplementedError(
            f"{where(op)}: order={order!r} sorts structured arrays, which aotkit does not "
            "have; sort by a key array instead (lexsort for several keys)"
        )
    if kind is not None and stable is not None:
        raise ValueError(
            f"{where(op)}: `kind` and `stable` parameters can't be provided at the same time; "
            "use only one of them"
        )
    if kind is not None and kind not in _KINDS:
        raise ValueError(
            f"{where(op)}: sort kind must be one of {', '.join(map(repr, _KINDS))}, got {kind!r}"
        )


def _axis_or_flat(op: str, x: Tracer, axis) -> tuple[Tracer, int]:
    if axis is None:
        return reshape_to(x, (x.size,)), 0
    if x.ndim == 0:
        raise ValueError(
            f"{where(op)}: a 0-d array cannot be sorted along axis {axis!r}; pass axis=None"
        )
    return x, normalize_axis(op, axis, x.ndim)


# --- sort, argsort, lexsort, partition --------------------------------------------------------


@export("sort")
def sort(a, axis=-1, kind=None, order=None, *, stable=None):
    _check_kind("sort", kind, stable, order)
    x, ax = _axis_or_flat("sort", asarray(a), axis)
    return sort_along([x], [], ax)[0]


@export("argsort")
def argsort(a, axis=-1, kind=None, order=None, *, stable=None):
    _check_kind("argsort", kind, stable, order)
    x, ax = _axis_or_flat("argsort", asarray(a), axis)
    return sort_along([x], [_index_iota(x.shape, ax)], ax)[1]


@export("lexsort")
def lexsort(keys, axis=-1):
    if isinstance(keys, Tracer):
        if keys.ndim == 0:
            raise TypeError(f"{where('lexsort')}: need sequence of keys with len > 0 in lexsort")
        ks = [keys[i] for i in range(keys.shape[0])]
    else:
        ks = [asarray(k) for k in keys]
    if not ks:
        raise TypeError(f"{where('lexsort')}: need sequence of keys with len > 0 in lexsort")
    shapes = {k.shape for k in ks}
    if len(shapes) != 1:
        raise ValueError(
            f"{where('lexsort')}: all keys need to be the same shape, got {sorted(shapes, key=len)}"
        )
    if ks[0].ndim == 0:
        return full((), 0, _INT64)
    ax = normalize_axis("lexsort", axis, ks[0].ndim)
    # NumPy's last key is the primary one.
    return sort_along(ks[::-1], [_index_iota(ks[0].shape, ax)], ax)[-1]


def _check_kth(op: str, kth, n: int) -> None:
    if isinstance(kth, Tracer):
        return
    values = np.atleast_1d(np.asarray(kth))
    if values.dtype.kind not in "iu":
        raise TypeError(f"{where(op)}: kth must be an integer or a sequence of them, got {kth!r}")
    for k in values.tolist():
        if not -n <= k < n:
            raise ValueError(f"{where(op)}: kth(={k}) out of bounds ({n})")


@export("partition")
def partition(a, kth, axis=-1, kind="introselect", order=None):
    _check_kind("partition", None, None, order)
    x, ax = _axis_or_flat("partition", asarray(a), axis)
    _check_kth("partition", kth, x.shape[ax])
    return sort_along([x], [], ax)[0]


@export("argpartition")
def argpartition(a, kth, axis=-1, kind="introselect", order=None):
    _check_kind("argpartition", None, None, order)
    x, ax = _axis_or_flat("argpartition", asarray(a), axis)
    _check_kth("argpartition", kth, x.shape[ax])
    return sort_along([x], [_index_iota(x.shape, ax)], ax)[1]


def _sort_in_place(self: Tracer, axis=-1, kind=None, order=None, *, stable=None) -> None:
    rebind("sort", self, sort(self, axis, kind, order, stable=stable))


def _partition_in_place(self: Tracer, kth, axis=-1, kind="introselect", order=None) -> None:
    rebind("partition", self, partition(self, kth, axis, kind, order))


Tracer.sort = _sort_in_place
Tracer.partition = _partition_in_place
Tracer.argsort = lambda self, axis=-1, kind=None, order=None, *, stable=None: argsort(
    self, axis, kind, order, stable=stable
)
Tracer.argpartition = lambda self, kth, axis=-1, kind="introselect", order=None: argpartition(
    self, kth, axis, kind, order
)


# --- searchsorted -----------------------------------------------------------------------------


def search(a: Tracer, v: Tracer, side: str) -> Tracer:
    """Insertion points of `v` in the sorted 1-D `a` (same dtype), as int64 of v's shape.

    A branch-free binary search: each of the `ceil(log2(n + 1))` steps gathers `a` at the
    midpoints and halves every interval still open.
    """
    n = a.shape[0]
    lo = full(v.shape, 0, _INT64)
    if n == 0:
        return lo
    hi = full(v.shape, n, _INT64)
    one = full(v.shape, 1, _INT64)
    last = full(v.shape, n - 1, _INT64)
    for _ in range(n.bit_length()):
        mid = bind1("shift_right_logical", bind1("add", lo, hi), one)
        at_mid = getitem(a, bind1("min", mid, last))
        if side == "left":
            go_right = less(at_mid, v)
        else:
            go_right = bind1("not", less(v, at_mid))
        open_ = bind1("compare", lo, hi, direction="LT")
        right = bind1("and", open_, go_right)
        left = bind1("and", open_, bind1("not", go_right))
        lo = bind1("select", right, bind1("add", mid, one), lo)
        hi = bind1("select", left, mid, hi)
    return lo


@export("searchsorted")
def searchsorted(a, v, side="left", sorter=None):
    if side not in ("left", "right"):
        raise ValueError(f"{where('searchsorted')}: side must be 'left' or 'right', got {side!r}")
    x = asarray(a)
    if x.ndim != 1:
        raise ValueError(
            f"{where('searchsorted')}: a must be 1-D, got shape {x.shape}; searchsorted "
            "searches one sorted sequence"
        )
    if sorter is not None:
        s = asarray(sorter)
        if s.shape != x.shape or not dtypes.is_integer(s.dtype):
            raise ValueError(
                f"{where('searchsorted')}: sorter must be an integer array of a's shape "
                f"{x.shape}, got {s.dtype.name}{list(s.shape)}"
            )
        x = getitem(x, s)
    y = asarray(v)
    common = dtypes.result_type(x.dtype, y.dtype)
    return search(cast(x, common), cast(y, common), side)


Tracer.searchsorted = lambda self, v, side="left", sorter=None: searchsorted(self, v, side, sorter)


# --- unique -----------------------------------------------------------------------------------

UniqueAllResult = namedtuple("UniqueAllResult", "values indices inverse_indices counts")
UniqueCountsResult = namedtuple("UniqueCountsResult", "values counts")
UniqueInverseResult = namedtuple("UniqueInverseResult", "values inverse_indices")


def _static_size(op: str, size) -> int:
    if size is None:
        raise TypeError(
            f"{where(op)}: the number of unique values depends on the data, so the result "
            "shape is unknown when the program is traced; pass size=N (a static upper bound: "
            "results are padded with fill_value, or truncated to N)"
        )
    try:
        n = operator.index(size)
    except TypeError:
        raise TypeError(f"{where(op)}: size must be a static Python int, got {size!r}") from None
    if n < 0:
        raise ValueError(f"{where(op)}: size must be non-negative, got {n}")
    return n


def _unique_sorted_rows(x: Tracer, equal_nan: bool):
    """(sorted rows, sort permutation, first-occurrence mask) of the rows of 2-D `x`."""
    n, width = x.shape
    perm = _index_iota((n,), 0)
    if width == 0:
        return x, perm, concat([full((1,), True, _BOOL), full((n - 1,), False, _BOOL)], 0)
    cols = [reshape_to(slice_axis(x, 1, j, j + 1), (n,)) for j in range(width)]
    *cols, perm = sort_along(cols, [perm], 0)
    new = None
    for c in cols:
        ne = _not_equal_adjacent(c)
        if not equal_nan and dtypes.is_inexact(c.dtype):
            # Every NaN is its own value.
            ne = bind1("or", ne, _is_nan(slice_axis(c, 0, 1, n)))
        new = ne if new is None else bind1("or", new, ne)
    first = concat([full((1,), True, _BOOL), new], 0)
    rows = concat([reshape_to(c, (n, 1)) for c in cols], 1)
    return rows, perm, first


def _is_nan(x: Tracer) -> Tracer:
    if dtypes.is_complex(x.dtype):
        return bind1(
            "or",
            bind1("compare", bind1("real", x), bind1("real", x), direction="NE"),
            bind1("compare", bind1("imag", x), bind1("imag", x), direction="NE"),
        )
    return bind1("compare", x, x, direction="NE")


def _fill(op: str, fill, dtype: np.dtype, shape: tuple[int, ...]) -> Tracer:
    if isinstance(fill, Tracer):
        if fill.size != 1:
            raise ValueError(
                f"{where(op)}: fill_value must be a scalar, got a traced array of shape "
                f"{fill.shape}"
            )
        return broadcast_to_shape(cast(reshape_to(fill, ()), dtype), shape)
    if np.ndim(fill) != 0:
        raise ValueError(f"{where(op)}: fill_value must be a scalar, got shape {np.shape(fill)}")
    return full(shape, np.asarray(fill).astype(dtype)[()], dtype)


def _unique(op, ar, return_index, return_inverse, return_counts, axis, equal_nan, size, fill):
    x = asarray(ar)
    if axis is None:
        rows = reshape_to(x, (x.size, 1))
    else:
        ax = normalize_axis(op, axis, x.ndim)
        moved = bind1("transpose", x, perm=(ax, *[i for i in range(x.ndim) if i != ax]))
        rows = reshape_to(moved, (x.shape[ax], math.prod(moved.shape[1:])))
    n, width = rows.shape
    if n == 0:
        raise ValueError(
            f"{where(op)}: the input has no elements, so there is no value to pad size={size} "
            "with; check the input's shape"
        )
    sorted_rows, perm, first = _unique_sorted_rows(rows, equal_nan)
    # The unique value each sorted element belongs to, and where a first occurrence goes
    # (index `size`, out of range, drops it).
    group = bind1("subtract", cumulative(cast(first, _INT64), 0, "add"), full((n,), 1, _INT64))
    slot = bind1("select", first, group, full((n,), size, _INT64))
    if fill is None:
        base = broadcast_to_shape(slice_axis(sorted_rows, 0, 0, 1), (size, width))
    else:
        base = _fill(op, fill, rows.dtype, (size, width))
    values = update(base, slot, sorted_rows, "set", op)
    if axis is None:
        values = reshape_to(values, (size,))
    else:
        rest = moved.shape[1:]
        values = reshape_to(values, (size, *rest))
        back = list(range(1, x.ndim))
        back.insert(ax, 0)
        values = bind1("transpose", values, perm=tuple(back))
    out = [values]
    if return_index:
        base = broadcast_to_shape(slice_axis(perm, 0, 0, 1), (size,))
        out.append(update(base, slot, perm, "set", op))
    if return_inverse:
        inverse = update(full((n,), 0, _INT64), perm, group, "set", op)
        out.append(reshape_to(inverse, x.shape) if axis is None else inverse)
    if return_counts:
        ones = full((n,), 1, _INT64)
        out.append(update(full((size,), 0, _INT64), group, ones, "add", op))
    return out


def _host_unique(ar, **kwargs):
    """A NumPy (not traced) input: NumPy answers at trace time, and size= pads as traced."""
    return np.unique(np.asarray(ar), **kwargs)


@export("unique")
def unique(
    ar,
    return_index=False,
    return_inverse=False,
    return_counts=False,
    axis=None,
    *,
    equal_nan=True,
    sorted=True,
    size=None,
    fill_value=None,
):
    """NumPy's `unique`; traced input needs a static `size=` (padded with `fill_value`,
    by default the smallest unique value, as JAX pads)."""
    if not sorted:
        raise NotImplementedError(
            f"{where('unique')}: sorted=False is not supported; the result is always sorted"
        )
    if not isinstance(ar, Tracer) and size is None:
        res = _host_unique(
            ar,
            return_index=return_index,
            return_inverse=return_inverse,
            return_counts=return_counts,
            axis=axis,
            equal_nan=equal_nan,
        )
        res = res if isinstance(res, tuple) else (res,)
        out = [constant(r) for r in res]
        return tuple(out) if len(out) > 1 else out[0]
    n = _static_size("unique", size)
    out = _unique(
        "unique",
        ar,
        return_index,
        return_inverse,
        return_counts,
        axis,
        equal_nan,
        n,
        fill_value,
    )
    return tuple(out) if len(out) > 1 else out[0]


@export("unique_values")
def unique_values(x, /, *, size=None, fill_value=None):
    return unique(x, size=size, fill_value=fill_value)


@export("unique_counts")
def unique_counts(x, /, *, size=None, fill_value=None):
    values, counts = unique(x, return_counts=True, size=size, fill_value=fill_value)
    return UniqueCountsResult(values, counts)


@export("unique_inverse")
def unique_inverse(x, /, *, size=None, fill_value=None):
    values, inverse = unique(x, return_inverse=True, size=size, fill_value=fill_value)
    return UniqueInverseResult(values, inverse)


@export("unique_all")
def unique_all(x, /, *, size=None, fill_value=None):
    values, index, inverse, counts = unique(
        x,
        return_index=True,
        return_inverse=True,
        return_counts=True,
        size=size,
        fill_value=fill_value,
    )
    return UniqueAllResult(values, index, inverse, counts)


# --- quantiles --------------------------------------------------------------------------------


def _lerp(a, b, t, rest):
    """NumPy's `_lerp`: a + (b - a) t, computed as b - (b - a) (1 - t) when t >= 0.5;
    `rest` is 1 - t, computed before any rounding to the result dtype, as NumPy does."""
    diff = b - a
    low = a + diff * t
    high = b - diff * rest
    return np.where(t >= 0.5, high, low)


def _h_and_f(alpha: float, beta: float):
    return lambda n, q: n * q + (alpha + q * (1 - alpha - beta)) - 1


def _to_boundaries(index, condition):
    previous = np.floor(index)
    gamma = index - previous
    return np.where(condition(gamma, index), previous, previous + 1)


# method -> (virtual index of each q in a slice of n values, gamma fix or None when the
# virtual index is already a position), as in NumPy's table of quantile methods.
_METHODS = {
    "inverted_cdf": (
        lambda n, q: _to_boundaries(n * q - 1, lambda g, i: g == 0),
        None,
    ),
    "averaged_inverted_cdf": (lambda n, q: n * q - 1, lambda g, i: np.where(g == 0, 0.5, 1.0)),
    "closest_observation": (
        lambda n, q: _to_boundaries(
            n * q - 1 - 0.5, lambda g, i: (g == 0) & (np.floor(i) % 2 == 1)
        ),
        None,
    ),
    "interpolated_inverted_cdf": (_h_and_f(0, 1), lambda g, i: g),
    "hazen": (_h_and_f(0.5, 0.5), lambda g, i: g),
    "weibull": (_h_and_f(0, 0), lambda g, i: g),
    "linear": (lambda n, q: (n - 1) * q, lambda g, i: g),
    "median_unbiased": (_h_and_f(1 / 3.0, 1 / 3.0), lambda g, i: g),
    "normal_unbiased": (_h_and_f(3 / 8.0, 3 / 8.0), lambda g, i: g),
    "lower": (lambda n, q: np.floor((n - 1) * q), None),
    "higher": (lambda n, q: np.ceil((n - 1) * q), None),
    "midpoint": (
        lambda n, q: 0.5 * (np.floor((n - 1) * q) + np.ceil((n - 1) * q)),
        lambda g, i: np.where(i % 1 == 0, 0.0, 0.5),
    ),
    "nearest": (lambda n, q: np.around((n - 1) * q), None),
}


def _move_to_end(op: str, x: Tracer, axis) -> tuple[Tracer, tuple[int, ...], tuple[int, ...]]:
    """`x` with the reduced axes flattened into one last axis; (x, kept shape, axes)."""
    axes = normalize_axes(op, axis, x.ndim)
    kept = [i for i in range(x.ndim) if i not in axes]
    perm = tuple(kept) + axes
    if perm != tuple(range(x.ndim)):
        x = bind1("transpose", x, perm=perm)
    kept_shape = tuple(x.shape[: len(kept)])
    return reshape_to(x, kept_shape + (math.prod(x.shape[len(kept) :]),)), kept_shape, axes


def _keepdims_shape(in_shape, axes, lead=()) -> tuple[int, ...]:
    return tuple(lead) + tuple(1 if i in axes else d for i, d in enumerate(in_shape))


def _valid_count(xs: Tracer) -> Tracer:
    """The number of non-NaN values of each slice (NaN sorts last), as float64."""
    ok = bind1("compare", xs, xs, direction="EQ")
    return reduce_raw(cast(ok, _F64), (xs.ndim - 1,), "add")


def _slice_has_nan(xs: Tracer) -> Tracer:
    last = slice_axis(xs, xs.ndim - 1, xs.shape[-1] - 1, xs.shape[-1])
    return reshape_to(_is_nan(last), xs.shape[:-1])


def _take_last(xs: Tracer, idx, per_slice: bool) -> Tracer:
    """`xs[..., idx]`: `idx` (static or traced, shape Q) picks the same positions of every
    slice, or with `per_slice` (traced, shape kept + Q) its own positions in each slice;
    the result has shape kept + Q."""
    if not per_slice:
        if isinstance(idx, Tracer):
            idx = cast(idx, _INT64)
        else:
            idx = np.asarray(idx).astype(np.int64)
        return getitem(xs, (Ellipsis, idx))
    kept = xs.shape[:-1]
    q_shape = idx.shape[len(kept) :]
    flat = reshape_to(cast(idx, _INT64), kept + (math.prod(q_shape),))
    return reshape_to(take_along_axis(xs, flat, axis=-1), kept + q_shape)


def _quantile_values(xs: Tracer, n, q, method: str, weak_q: bool, out_dtype: np.dtype):
    """Quantiles of the sorted last axis of `xs` holding `n` values per slice (a static int,
    or a float64 tracer of the kept shape); the result has shape kept + q.shape."""
    virtual, fix = _METHODS[method]
    per_slice = isinstance(n, Tracer)
    if per_slice:
        # Append q's dims, so that the index arithmetic broadcasts per slice.
        q_dims = q.ndim if isinstance(q, Tracer) else np.ndim(q)
        n = reshape_to(n, n.shape + (1,) * q_dims)
    vi = virtual(n, q)
    last = n - 1
    int_q = (
        np.asarray(q).dtype.kind in "iub" if not isinstance(q, Tracer) else q.dtype.kind in "iub"
    )
    if fix is None or (method == "linear" and int_q):
        return _take_last(xs, np.clip(vi, 0, last), per_slice)
    prev = np.floor(vi)
    above, below = vi >= last, vi < 0
    # NumPy points both neighbours at the last value above the range, at the first below.
    prev = np.where(above, last, np.where(below, 0, prev))
    nxt = np.where(above, last, np.where(below, 0, prev + 1))
    gamma = fix(vi - prev, vi)
    if not isinstance(gamma, Tracer):
        gamma = np.asarray(gamma, dtype=np.asarray(vi).dtype)
        if weak_q:
            gamma = float(gamma)
        rest = 1 - gamma
    else:
        rest = 1 - gamma
        if weak_q:
            # NumPy's gamma is then a Python float: weak, rounded to the result dtype.
            gamma, rest = cast(gamma, out_dtype), cast(rest, out_dtype)
    lo = _take_last(xs, prev, per_slice)
    hi = _take_last(xs, nxt, per_slice)
    return _lerp(lo, hi, gamma, rest)


def _q_array(op: str, q, scale: float):
    """q as (a static ndarray or a tracer, weak), divided by `scale` as NumPy does."""
    weak = type(q) in (int, float)
    if isinstance(q, Tracer):
        if dtypes.is_complex(q.dtype):
            raise TypeError(f"{where(op)}: q must be real, got {q.dtype.name}")
        if scale != 1:
            q = q / scale
        return q, weak
    arr = np.true_divide(q, scale) if scale != 1 else np.asanyarray(q)
    if arr.ndim > 1:
        raise ValueError(f"{where(op)}: q must be a scalar or 1d, got shape {arr.shape}")
    bound = "[0, 100]" if scale == 100 else "[0, 1]"
    if arr.size and not ((arr >= 0).all() and (arr <= 1).all()):
        what = "Percentiles" if scale == 100 else "Quantiles"
        raise ValueError(f"{where(op)}: {what} must be in the range {bound}, got {q!r}")
    return arr, weak


def _quantile(op, a, q, axis, method, keepdims, interpolation, nan_aware, scale):
    if interpolation is not None:
        raise TypeError(
            f"{where(op)}: the interpolation= argument was removed in NumPy 2; use method="
        )
    if method not in _METHODS:
        raise ValueError(
            f"{where(op)}: {method!r} is not a valid method. Use one of: {', '.join(_METHODS)}"
        )
    x = asarray(a)
    if dtypes.is_complex(x.dtype):
        raise TypeError(f"{where(op)}: a must be an array of real numbers, got {x.dtype.name}")
    qv, weak = _q_array(op, q, scale)
    q_dtype = qv.dtype if not weak else None
    discrete = _METHODS[method][1] is None or (
        method == "linear" and q_dtype is not None and q_dtype.kind in "iub"
    )
    if discrete:
        out_dtype = x.dtype
    elif weak:
        out_dtype = dtypes.result_type(x.dtype, float)
    else:
        out_dtype = dtypes.result_type(x.dtype, q_dtype)
    in_shape = x.shape
    xf, kept, axes = _move_to_end(op, x, axis)
    n = xf.shape[-1]
    if n == 0:
        raise IndexError(
            f"{where(op)}: cannot take a quantile of an empty slice (shape {in_shape}, axis "
            f"{axis!r})"
        )
    xs = sort_along([xf], [], xf.ndim - 1)[0]
    inexact = dtypes.is_inexact(x.dtype)
    count = _valid_count(xs) if nan_aware and inexact else n
    r = _quantile_values(xs, count, qv, method, weak, out_dtype)
    r = cast(r, out_dtype) if r.dtype != out_dtype else r
    if inexact:
        bad = (
            _slice_has_nan(xs)
            if not nan_aware
            else bind1("compare", count, full(count.shape, 0, _F64), direction="EQ")
        )
        q_dims = r.ndim - len(kept)
        bad = reshape_to(bad, kept + (1,) * q_dims)
        r = bind1("select", broadcast_to_shape(bad, r.shape), full(r.shape, np.nan, r.dtype), r)
    q_nd = r.ndim - len(kept)
    if q_nd:
        perm = tuple(range(len(kept), r.ndim)) + tuple(range(len(kept)))
        r = bind1("transpose", r, perm=perm)
    if keepdims:
        r = reshape_to(r, _keepdims_shape(in_shape, axes, r.shape[:q_nd]))
    return r


def _quantile_function(name: str, nan: bool, scale: int):
    """NumPy's `name` (quantile, percentile and their nan forms), with NumPy's signature:
    q is in [0, 1] times `scale`; `nan` skips NaNs."""

    def fn(
        a,
        q,
        axis=None,
        out=None,
        overwrite_input=False,
        method="linear",
        keepdims=False,
        *,
        weights=None,
        interpolation=None,
    ):
        _no_weights(name, weights)
        return _quantile(name, a, q, axis, method, keepdims, interpolation, nan, scale)

    fn.__name__ = fn.__qualname__ = name
    return export(name)(accepts_out(name)(fn))


quantile = _quantile_function("quantile", False, 1)
percentile = _quantile_function("percentile", False, 100)
nanquantile = _quantile_function("nanquantile", True, 1)
nanpercentile = _quantile_function("nanpercentile", True, 100)


def _no_weights(op: str, weights) -> None:
    if weights is not None:
        raise NotImplementedError(
            f"{where(op)}: weights= is not supported; weighted quantiles (method="
            "'inverted_cdf') are not lowered yet"
        )


def _median(op: str, a, axis, keepdims, nan_aware) -> Tracer:
    x = asarray(a)
    in_shape = x.shape
    xf, kept, axes = _move_to_end(op, x, axis)
    n = xf.shape[-1]
    if n == 0:
        r = mean(xf, axis=-1)
        return reshape_to(r, _keepdims_shape(in_shape, axes)) if keepdims else r
    xs = sort_along([xf], [], xf.ndim - 1)[0]
    inexact = dtypes.is_inexact(x.dtype)
    if nan_aware and inexact and not dtypes.is_complex(x.dtype):
        count = cast(_valid_count(xs), _INT64)
        zero, two = full(count.shape, 0, _INT64), full(count.shape, 2, _INT64)
        # The middle one or two of the `count` valid values (an empty slice reads index 0).
        lo_i = bind1(
            "max",
            bind1("divide", bind1("subtract", count, full(count.shape, 1, _INT64)), two),
            zero,
        )
        hi_i = bind1("divide", count, two)
        pair = concat([reshape_to(lo_i, kept + (1,)), reshape_to(hi_i, kept + (1,))], len(kept))
        r = mean(_take_last(xs, pair, True), axis=-1)
        empty = bind1("compare", count, zero, direction="EQ")
        r = bind1("select", empty, full(r.shape, np.nan, r.dtype), r)
    else:
        mid = n // 2
        picks = [mid - 1, mid] if n % 2 == 0 else [mid]
        r = mean(_take_last(xs, picks, False), axis=-1)
        if inexact:
            r = bind1("select", _slice_has_nan(xs), full(r.shape, np.nan, r.dtype), r)
    return reshape_to(r, _keepdims_shape(in_shape, axes)) if keepdims else r


@export("median")
@accepts_out("median")
def median(a, axis=None, out=None, overwrite_input=False, keepdims=False):
    return _median("median", a, axis, keepdims, False)


@export("nanmedian")
@accepts_out("nanmedian")
def nanmedian(a, axis=None, out=None, overwrite_input=False, keepdims=False):
    return _median("nanmedian", a, axis, keepdims, True)
