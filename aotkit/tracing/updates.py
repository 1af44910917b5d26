"""Trace stage, updates family: ufunc.at, ufunc.reduceat, put, insert and select.

`np.add.at(a, idx, b)` and `np.put(a, ind, v)` write into `a` by rebinding the traced array
(as `a[idx] = v` does, see indexing.py) to one `stablehlo.scatter` whose combiner is the
ufunc: add, subtract (adding the negated values), multiply, maximum, minimum; repeated
indices accumulate as in NumPy. `ufunc.reduceat` reduces segments with one scatter of
segment ids (NumPy's rule for an index not below the next one included), `insert` is one
static gather from the array and the new values, `select` a chain of selects.
"""

from __future__ import annotations

import numpy as np

from aotkit import dtypes
from aotkit.tracing import outputs
from aotkit.tracing.core import Tracer, bind1, export, full, where
from aotkit.tracing.creation import iota
from aotkit.tracing.elementwise import asarray, shape_of
from aotkit.tracing.hlo import (
    broadcast_shapes,
    broadcast_to_shape,
    broadcasts_to,
    cast,
    concat,
    normalize_axis,
    ravel_or_axis,
    rebind,
    reshape_to,
    to_operand,
)
from aotkit.tracing.indexing import getitem, update
from aotkit.tracing.reduction import _identity, _sum_dtype, reduce_raw
from aotkit.tracing.shape import take_static
from aotkit.tracing.sorting import search

_BOOL = np.dtype(np.bool_)
_INT64 = np.dtype(np.int64)

# ufunc -> the scatter combiner that applies it (subtract adds the negated values).
_AT = {"add": "add", "subtract": "add", "multiply": "multiply", "maximum": "max", "minimum": "min"}
_REDUCEAT = {"add": "add", "multiply": "multiply", "maximum": "max", "minimum": "min"}


# --- ufunc.at ------------------------------------------------------------------------------------


def ufunc_at(name: str, a, indices, b=None) -> None:
    """`np.<name>.at(a, indices, b)`: unbuffered in-place `a[indices] = ufunc(a[indices], b)`."""
    op = f"{name}.at"
    mode = _AT.get(name)
    if mode is None:
        raise NotImplementedError(
            f"{where('numpy.' + op)}: numpy.{op} is not supported on traced arrays; "
            f"supported: {', '.join(f'{n}.at' for n in _AT)} (the scatter combiners)"
        )
    if not isinstance(a, Tracer):
        raise TypeError(
            f"{where('numpy.' + op)}: the array to update is a {type(a).__name__}, which cannot "
            "hold traced values; make it a traced array (np.zeros_like(x), "
            "aotkit.numpy.zeros(shape)) so the update is traced"
        )
    if b is None:
        raise TypeError(f"{where('numpy.' + op)}: {name} takes two operands; pass b")
    v = asarray(b)
    if dtypes.result_type(a.dtype, v.dtype) != a.dtype and v.dtype.kind != a.dtype.kind:
        raise TypeError(
            f"{where('numpy.' + op)}: {v.dtype.name} values into a {a.dtype.name} array: NumPy "
            "casts after every single update, which one scatter cannot repeat; cast the values "
            f"first (b.astype({a.dtype.name!r}))"
        )
    v = cast(v, a.dtype)
    if name == "subtract":
        if a.dtype == _BOOL:
            raise TypeError(
                f"{where('numpy.' + op)}: numpy boolean subtract is not supported; use logical_xor"
            )
        v = bind1("negate", v)
    rebind(op, a, update(a, indices, v, mode, op))


# --- ufunc.reduceat ------------------------------------------------------------------------------


def _static_indices(op: str, indices, n: int) -> np.ndarray | None:
    if isinstance(indices, Tracer):
        return None
    idx = np.asarray(indices)
    if idx.ndim != 1 or (idx.size and idx.dtype.kind not in "iu"):
        raise TypeError(f"{where(op)}: indices must be a 1-D integer array, got {indices!r:.60}")
    for i in idx.tolist():
        if not 0 <= i < n:
            raise IndexError(f"{where(op)}: index {i} out-of-bounds in {op} [0, {n})")
    return idx.astype(np.int64)


def ufunc_reduceat(name: str, array, indices, axis=0, dtype=None, out=None):
    """`np.<name>.reduceat`: reductions over `array[indices[i]:indices[i + 1]]` along `axis`
    (`array[indices[i]]` when `indices[i] >= indices[i + 1]`), the last to the end."""
    op = f"{name}.reduceat"
    monoid = _REDUCEAT.get(name)
    if monoid is None:
        raise NotImplementedError(
            f"{where('numpy.' + op)}: numpy.{op} is not supported on traced arrays; "
            f"supported: {', '.join(f'{n}.reduceat' for n in _REDUCEAT)}"
        )
    x = asarray(array)
    if x.ndim == 0:
        raise TypeError(f"{where('numpy.' + op)}: cannot reduceat a 0-d array")
    ax = normalize_axis(op, axis, x.ndim)
    if dtype is not None:
        acc = dtypes.canonicalize(dtype, where=where(op))
    elif outputs.given(out):
        acc = outputs.target(op, out).dtype
    else:
        acc = _sum_dtype(x.dtype) if monoid in ("add", "multiply") else x.dtype
    x = cast(x, acc)
    perm = (ax, *[i for i in range(x.ndim) if i != ax])
    rows = bind1("transpose", x, perm=perm) if ax else x
    n = rows.shape[0]
    static = _static_indices(op, indices, n)
    if static is not None:
        r = _reduceat_static(op, rows, static, monoid)
    else:
        idx = asarray(indices)
        if idx.ndim != 1 or not dtypes.is_integer(idx.dtype):
            raise TypeError(
                f"{where(op)}: indices must be a 1-D integer array, got {idx.dtype.name}"
                f"{list(idx.shape)}"
            )
        r = _reduceat_traced(op, rows, cast(idx, _INT64), monoid)
    if ax:
        back = list(range(1, x.ndim))
        back.insert(ax, 0)
        r = bind1("transpose", r, perm=tuple(back))
    if outputs.given(out):
        return outputs.store(op, out, r, casting="unsafe")
    return r


def _segment_reduce(op, rows: Tracer, seg: Tracer, k: int, monoid: str) -> Tracer:
    """`out[i] = monoid over rows[j] with seg[j] == i`; segment ids outside [0, k) dropped."""
    base = full((k,) + rows.shape[1:], _identity(monoid, rows.dtype), rows.dtype)
    return update(base, seg, rows, monoid, op)


def _reduceat_static(op, rows: Tracer, idx: np.ndarray, monoid: str) -> Tracer:
    n, k = rows.shape[0], len(idx)
    if k == 0:
        return full((0,) + rows.shape[1:], 0, rows.dtype)
    ends = np.append(idx[1:], n)
    ranged = idx < ends
    starts, stops = idx[ranged], ends[ranged]
    order = np.argsort(starts, kind="stable")
    if (starts[order][1:] >= stops[order][:-1]).all():
        # Disjoint ranges (increasing indices, the usual case): one scatter of segment ids.
        seg = np.full(n, k, np.int64)
        for i in np.flatnonzero(ranged):
            seg[idx[i] : ends[i]] = i
        reduced = _segment_reduce(op, rows, asarray(seg), k, monoid)
    else:
        parts = []
        for i in range(k):
            lo, hi = int(idx[i]), int(ends[i])
            part = take_static(rows, 0, np.arange(lo, hi if lo < hi else lo + 1))
            parts.append(_reduce_rows(part, monoid))
        return concat(parts, 0)
    if ranged.all():
        return reduced
    single = take_static(rows, 0, idx)
    keep = np.broadcast_to(ranged.reshape((k,) + (1,) * (rows.ndim - 1)), reduced.shape)
    return bind1("select", asarray(keep), reduced, single)


def _reduce_rows(part: Tracer, monoid: str) -> Tracer:
    return reshape_to(reduce_raw(part, (0,), monoid), (1,) + part.shape[1:])


def _reduceat_traced(op, rows: Tracer, idx: Tracer, monoid: str) -> Tracer:
    """Traced indices, taken to be non-decreasing (unchecked): row j belongs to the last
    segment starting at or before it."""
    n, k = rows.shape[0], idx.shape[0]
    if k == 0:
        return full((0,) + rows.shape[1:], 0, rows.dtype)
    # NumPy wraps negative indices once; out-of-range ones clamp (as traced reads do).
    idx = bind1(
        "select",
        bind1("compare", idx, full(idx.shape, 0, _INT64), direction="LT"),
        bind1("add", idx, full(idx.shape, n, _INT64)),
        idx,
    )
    seg = bind1("subtract", search(idx, iota((n,), _INT64), "right"), full((n,), 1, _INT64))
    before = bind1("compare", seg, full((n,), 0, _INT64), direction="LT")
    seg = bind1("select", before, full((n,), k, _INT64), seg)
    reduced = _segment_reduce(op, rows, seg, k, monoid)
    ends = concat([getitem(idx, slice(1, None)), full((1,), n, _INT64)], 0)
    ranged = bind1("compare", idx, ends, direction="LT")
    single = getitem(rows, idx)
    keep = bind1("broadcast_in_dim", ranged, shape=reduced.shape, dims=(0,))
    return bind1("select", keep, reduced, single)


# --- put -----------------------------------------------------------------------------------------


@export("put")
def put(a, ind, v, mode="raise"):
    op = "put"
    if mode not in ("raise", "wrap", "clip"):
        raise ValueError(
            f"{where(op)}: clipmode must be one of 'clip', 'raise', or 'wrap', got {mode!r}"
        )
    if not isinstance(a, Tracer):
        raise TypeError(
            f"{where(op)}: the array to write into is a {type(a).__name__}, which cannot hold "
            "traced values; make it a traced array (np.zeros_like(x), aotkit.numpy.zeros(shape))"
        )
    n = a.size
    values = asarray(v)
    values = reshape_to(values, (values.size,))
    if isinstance(ind, Tracer):
        if mode == "raise":
            raise ValueError(
                f"{where(op)}: mode='raise' needs the traced indices' values to check them; "
                "pass mode='clip' or mode='wrap' (out-of-range indices are then moved into "
                "range)"
            )
        i = reshape_to(cast(ind, _INT64), (ind.size,))
        if mode == "wrap":
            size = full(i.shape, n, _INT64)
            i = bind1("rem", bind1("add", bind1("rem", i, size), size), size)
        else:
            lo, hi = full(i.shape, 0, _INT64), full(i.shape, n - 1, _INT64)
            i = bind1("min", bind1("max", i, lo), hi)
        count = i.shape[0]
    else:
        i = np.asarray(ind).ravel()
        if i.size and i.dtype.kind not in "iu":
            raise TypeError(f"{where(op)}: indices must be integers, got {i.dtype.name}")
        i = i.astype(np.int64)
        if n == 0 and i.size:
            raise IndexError(f"{where(op)}: cannot replace elements of an empty array")
        if mode == "raise":
            bad = (i < -n) | (i >= n)
            if bad.any():
                raise IndexError(
                    f"{where(op)}: index {int(i[bad][0])} is out of bounds for axis 0 with size {n}"
                )
            i = np.where(i < 0, i + n, i)
        elif mode == "wrap":
            i = np.mod(i, n)
        else:
            i = np.clip(i, 0, n - 1)
        count = i.size
    if count == 0:
        return None
    if values.size == 0:
        raise ValueError(f"{where(op)}: cannot put from an empty v into {count} positions")
    # NumPy repeats v cyclically over the indices; with static indices the last write to a
    # position wins, as in NumPy (traced duplicates: one of the writes wins).
    values = take_static(values, 0, np.arange(count) % values.size)
    if isinstance(i, np.ndarray):
        last = np.unique(i[::-1], return_index=True)[1]
        keep = np.sort(count - 1 - last)
        i, values = i[keep], take_static(values, 0, keep)
    flat = reshape_to(a, (n,))
    rebind(op, a, reshape_to(update(flat, i, values, "set", op), a.shape))
    return None


Tracer.put = lambda self, indices, values, mode="raise": put(self, indices, values, mode)


# --- insert --------------------------------------------------------------------------------------


@export("insert")
def insert(arr, obj, values, axis=None):
    op = "insert"
    x, ax = ravel_or_axis(op, asarray(arr), axis)
    n = x.shape[ax]
    if isinstance(obj, Tracer):
        raise TypeError(
            f"{where(op)}: obj (the positions) must be static: they fix the result's shape; "
            "pass a Python int, slice or sequence"
        )
    if isinstance(obj, slice):
        indices = np.arange(*obj.indices(n), dtype=np.int64)
    else:
        indices = np.array(obj)
        if indices.dtype == np.bool_:
            if indices.ndim != 1:
                raise ValueError(
                    f"{where(op)}: boolean array argument obj to insert must be one dimensional"
                )
            indices = np.flatnonzero(indices)
        elif indices.ndim > 1:
            raise ValueError(
                f"{where(op)}: index array argument obj to insert must be one dimensional or scalar"
            )
        if indices.size and indices.dtype.kind not in "iu":
            raise IndexError(
                f"{where(op)}: index arrays must be of integer type, got {indices.dtype.name}"
            )
    v = asarray(values) if isinstance(values, Tracer) else values
    if indices.size == 1:
        index = int(indices.item())
        if not -n <= index <= n:
            raise IndexError(
                f"{where(op)}: index {obj} is out of bounds for axis {ax} with size {n}"
            )
        index = index + n if index < 0 else index
        block = _as_block(op, v, x, ax, scalar_index=indices.ndim == 0)
        before = take_static(x, ax, np.arange(index))
        after = take_static(x, ax, np.arange(index, n))
        return concat([before, block, after], ax)
    indices = indices.astype(np.int64)
    bad = (indices < -n) | (indices > n)
    if bad.any():
        raise IndexError(
            f"{where(op)}: index {int(indices[bad][0])} is out of bounds for axis {ax} with "
            f"size {n}"
        )
    indices = np.where(indices < 0, indices + n, indices)
    k = len(indices)
    order = np.argsort(indices, kind="stable")
    indices[order] += np.arange(k)
    slot = list(x.shape)
    slot[ax] = k
    new_values = _values(op, v, x.dtype, tuple(slot))
    # new position p takes old element j or new value i: one gather from [x, values].
    source = np.empty(n + k, np.int64)
    old = np.ones(n + k, bool)
    old[indices] = False
    source[old] = np.arange(n)
    source[indices] = n + np.arange(k)
    return take_static(concat([x, new_values], ax), ax, source)


def _values(op: str, v, dtype: np.dtype, shape: tuple[int, ...]) -> Tracer:
    """`v` cast to `dtype` (as NumPy's setitem casts) and broadcast to `shape`."""
    vv = v if isinstance(v, Tracer) else np.asarray(v)
    vshape = tuple(vv.shape)
    if not broadcasts_to(vshape, shape):
        raise ValueError(
            f"{where(op)}: could not broadcast input array from shape {vshape} into shape {shape}"
        )
    if isinstance(vv, Tracer):
        return broadcast_to_shape(cast(vv, dtype), shape)
    return to_operand(op, vv.astype(dtype), dtype, shape)


def _as_block(op: str, v, x: Tracer, ax: int, scalar_index: bool) -> Tracer:
    """NumPy's values for one insertion point: at least x.ndim dims, in x's dtype; a scalar
    index moves their first axis to `ax` (a[:, 0] = v broadcasts unlike a[:, [0]] = v)."""
    vv = asarray(v) if not isinstance(v, Tracer) else v
    vv = cast(vv, x.dtype)
    if vv.ndim < x.ndim:
        vv = reshape_to(vv, (1,) * (x.ndim - vv.ndim) + vv.shape)
    if scalar_index and ax != 0:
        perm = list(range(1, vv.ndim))
        perm.insert(ax, 0)
        vv = bind1("transpose", vv, perm=tuple(perm))
    shape = list(x.shape)
    shape[ax] = vv.shape[ax]
    return _values(op, vv, x.dtype, tuple(shape))


# --- select --------------------------------------------------------------------------------------


@export("select")
def select(condlist, choicelist, default=0):
    op = "select"
    if len(condlist) != len(choicelist):
        raise ValueError(
            f"{where(op)}: list of cases must be same length as list of conditions, got "
            f"{len(choicelist)} and {len(condlist)}"
        )
    if len(condlist) == 0:
        raise ValueError(f"{where(op)}: select with an empty condition list is not possible")
    choices = list(choicelist) + [default]
    keys = []
    for c in choices:
        kind = dtypes.weak_kind(c)
        if kind is not None:
            keys.append(kind)
        else:
            keys.append(asarray(c).dtype)
    try:
        dt = dtypes.result_type(*keys)
    except TypeError as e:
        raise TypeError(
            f"{where(op)}: Choicelist and default value do not have a common dtype: {e}"
        ) from None
    conds = [asarray(c) for c in condlist]
    for i, c in enumerate(conds):
        if c.dtype != _BOOL:
            raise TypeError(
                f"{where(op)}: invalid entry {i} in condlist: should be boolean ndarray, got "
                f"{c.dtype.name}"
            )
    shape = broadcast_shapes(op, *[c.shape for c in conds], *[shape_of(c) for c in choices])
    result = to_operand(op, default, dt, shape)
    for cond, choice in zip(reversed(conds), reversed(choices[:-1]), strict=True):
        value = to_operand(op, choice, dt, shape)
        result = bind1("select", broadcast_to_shape(cond, shape), value, result)
    return result
