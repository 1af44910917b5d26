"""Transforms, the linear primitives: what tangents are made of, and their transposes.

A JVP rule computes its result's tangent from its operands' tangents with these
functions only (and primal values it computes with `_hlo`). Each function takes the
algebra `T` first (`core.Forward` emits at once, `core.Tape` records for reverse mode),
treats `None` as a zero tangent, and applies one primitive of the table below. Each
primitive has its transpose rule beside it: together they are what reverse mode needs,
as JAX's `deflinear` and `primitive_transposes` are.

In the transposes, `g` is the cotangent of the result; arguments in linear positions are
`LinVar`s (or `Zero`s), whose `.shape`/`.dtype` say what their cotangent must be.
"""

from __future__ import annotations

import functools

import numpy as np
from jaxlib.mlir import ir

from aotkit import _context, dtypes
from aotkit.transforms import _hlo as H
from aotkit.transforms import _ir
from aotkit.transforms.core import Algebra, Linear, instantiate

LINEAR: dict[str, Linear] = {}


def _prim(name, linear, emit, transpose, aval=None, results=0) -> Linear:
    prim = Linear(name, tuple(linear), emit, transpose, aval, results)
    LINEAR[name] = prim
    return prim


def _same(a, *_, **__):
    return a


# --- arithmetic ----------------------------------------------------------------------------------


def _negated(g, depth: int = 4):
    """-g; where g is a product one of whose factors is a negation, a few products deep
    (`(-x * a) * b`, the cotangent of a chain such as `1 / (1 + exp(-x))`), that product
    without the two negations: the same number (a negation is exact), and a chain XLA
    fuses like JAX's rather than into every reduction that reads it."""
    found = _unnegated(g, depth)
    return found if found is not None else H.neg(g)


def _unnegated(g, depth: int):
    """The product g with one negated factor taken positive (so -g), or None."""
    owner = g.value.owner
    if not isinstance(owner, ir.OpView | ir.Operation):
        return None
    o = owner.operation
    if o.name == "stablehlo.negate":
        return H.wrap(o.operands[0])
    if o.name != "stablehlo.multiply" or depth == 0:
        return None
    a, b = H.wrap(o.operands[0]), H.wrap(o.operands[1])
    found = _unnegated(a, depth - 1)
    if found is not None:
        return H.mul(found, b)
    found = _unnegated(b, depth - 1)
    return None if found is None else H.mul(a, found)


ADD = _prim("add", (0, 1), H.add, lambda g, a, b: [g, g], _same)
SUB = _prim("sub", (0, 1), H.sub, lambda g, a, b: [g, _negated(g)], _same)
NEG = _prim("neg", (0,), H.neg, lambda g, a: [_negated(g)], _same)
MUL = _prim("mul", (0,), H.mul, lambda g, t, p: [H.mul(g, p)], _same)
DIV = _prim("div", (0,), H.div, lambda g, t, p: [H.div(g, p)], _same)


def add(T: Algebra, a, b):
    if a is None:
        return b
    if b is None:
        return a
    return T.bind(ADD, [a, b])


def sub(T: Algebra, a, b):
    if b is None:
        return a
    if a is None:
        return neg(T, b)
    return T.bind(SUB, [a, b])


def neg(T: Algebra, a):
    return None if a is None else T.bind(NEG, [a])


def mul(T: Algebra, t, p):
    """t * p for a primal p of t's shape."""
    return None if t is None else T.bind(MUL, [t, p])


def div(T: Algebra, t, p):
    return None if t is None else T.bind(DIV, [t, p])


def scale(T: Algebra, t, c: float):
    """t * c for a Python constant c."""
    if t is None:
        return None
    return T.bind(MUL, [t, _const_like(t, c)])


def _const_like(t, c):
    return H.full_like_aval((t.shape, t.dtype), c)


# --- dtypes and complex parts -------------------------------------------------------------------


def _convert_aval(a, *, dtype):
    return (a[0], dtype)


CONVERT = _prim(
    "convert",
    (0,),
    lambda t, *, dtype: H.convert(t, dtype),
    lambda g, t, *, dtype: [H.convert(g, t.dtype)],
    _convert_aval,
)


def convert(T: Algebra, t, dtype):
    dtype = np.dtype(dtype)
    if t is None or t.dtype == dtype:
        return t
    if not dtypes.is_inexact(dtype):
        return None
    return T.bind(CONVERT, [t], {"dtype": dtype})


REAL = _prim(
    "real",
    (0,),
    H.real,
    lambda g, t: [H.complex_(g, H.like(g, 0))],
    lambda a: (a[0], dtypes.real_dtype(a[1])),
)
IMAG = _prim(
    "imag",
    (0,),
    H.imag,
    lambda g, t: [H.complex_(H.like(g, 0), H.neg(g))],
    lambda a: (a[0], dtypes.real_dtype(a[1])),
)
COMPLEX = _prim(
    "complex",
    (0, 1),
    H.complex_,
    lambda g, a, b: [H.real(g), H.imag(H.neg(g))],
    lambda a, b: (a[0], dtypes.complex_dtype(a[1])),
)
CONJ = _prim("conj", (0,), H.conj, lambda g, t: [H.conj(g)], _same)


def real(T, t):
    return None if t is None else T.bind(REAL, [t])


def imag(T, t):
    return None if t is None else T.bind(IMAG, [t])


def complex_(T, a, b, aval):
    if a is None and b is None:
        return None
    return T.bind(COMPLEX, [instantiate(T, a, aval), instantiate(T, b, aval)])


def conj(T, t):
    if t is None or not dtypes.is_complex(t.dtype):
        return t
    return T.bind(CONJ, [t])


def _reduce_precision_emit(t, *, attributes):
    op = H.create("stablehlo.reduce_precision", [t], [(t.shape, t.dtype)], attributes)
    return H.wrap(op.results[0])


# Rounding to a narrower format is linear as JAX defines it: the tangent and the cotangent
# are rounded alike (`deflinear`), so they carry the precision the primal has.
REDUCE_PRECISION = _prim(
    "reduce_precision",
    (0,),
    _reduce_precision_emit,
    lambda g, t, *, attributes: [_reduce_precision_emit(g, attributes=attributes)],
    _same,
)


def reduce_precision(T, t, attributes: dict):
    return None if t is None else T.bind(REDUCE_PRECISION, [t], {"attributes": attributes})


def _constraint_emit(t, *, sharding):
    op = H.create("sdy.sharding_constraint", [t], [(t.shape, t.dtype)], {"sharding": sharding})
    return H.wrap(op.results[0])


# A sharding constraint is the identity on values: its tangent and cotangent take the same
# layout (JAX's rule), so the partitioner lays out the backward pass as the forward one.
SHARDING_CONSTRAINT = _prim(
    "sharding_constraint",
    (0,),
    _constraint_emit,
    lambda g, t, *, sharding: [_constraint_emit(g, sharding=sharding)],
    _same,
)


def sharding_constraint(T, t, sharding):
    return None if t is None else T.bind(SHARDING_CONSTRAINT, [t], {"sharding": sharding})


# --- layout --------------------------------------------------------------------------------------


def _broadcast_transpose(g, t, *, shape, dims):
    summed = [d for d in range(len(shape)) if d not in dims]
    summed += [d for i, d in enumerate(dims) if t.shape[i] == 1 and shape[d] != 1]
    return [H.reshape(H.reduce_sum(g, summed), t.shape)]


BROADCAST = _prim(
    "broadcast_in_dim",
    (0,),
    lambda t, *, shape, dims: H.broadcast_in_dim(t, shape, dims),
    _broadcast_transpose,
    lambda a, *, shape, dims: (tuple(shape), a[1]),
)


def broadcast_in_dim(T, t, shape, dims):
    shape, dims = tuple(shape), tuple(dims)
    if t is None or (t.shape == shape and dims == tuple(range(len(shape)))):
        return t
    return T.bind(BROADCAST, [t], {"shape": shape, "dims": dims})


def broadcast_to(T, t, shape):
    if t is None:
        return None
    shape = tuple(shape)
    return broadcast_in_dim(T, t, shape, range(len(shape) - t.ndim, len(shape)))


RESHAPE = _prim(
    "reshape",
    (0,),
    lambda t, *, shape: H.reshape(t, shape),
    lambda g, t, *, shape: [H.reshape(g, t.shape)],
    lambda a, *, shape: (tuple(shape), a[1]),
)


def reshape(T, t, shape):
    shape = tuple(shape)
    if t is None or t.shape == shape:
        return t
    return T.bind(RESHAPE, [t], {"shape": shape})


TRANSPOSE = _prim(
    "transpose",
    (0,),
    lambda t, *, perm: H.transpose(t, perm),
    lambda g, t, *, perm: [H.transpose(g, np.argsort(perm))],
    lambda a, *, perm: (tuple(a[0][p] for p in perm), a[1]),
)


def transpose(T, t, perm):
    perm = tuple(int(p) for p in perm)
    if t is None or perm == tuple(range(len(perm))):
        return t
    return T.bind(TRANSPOSE, [t], {"perm": perm})


def _reduce_sum_aval(a, *, dims):
    return (tuple(n for d, n in enumerate(a[0]) if d not in dims), a[1])


REDUCE_SUM = _prim(
    "reduce_sum",
    (0,),
    lambda t, *, dims: H.reduce_sum(t, dims),
    lambda g, t, *, dims: [
        H.broadcast_in_dim(g, t.shape, [d for d in range(t.ndim) if d not in dims])
    ],
    _reduce_sum_aval,
)


def reduce_sum(T, t, dims):
    dims = tuple(sorted(dims))
    if t is None or not dims:
        return t
    return T.bind(REDUCE_SUM, [t], {"dims": dims})


def _slice_transpose(g, t, *, start, limit, strides):
    high = [
        n - (lo + (m - 1) * s + 1) if m else n - lo
        for n, lo, m, s in zip(t.shape, start, g.shape, strides, strict=True)
    ]
    interior = [s - 1 if m > 1 else 0 for s, m in zip(strides, g.shape, strict=True)]
    low = list(start)
    # An empty slice takes nothing: its cotangent is zeros of the operand.
    if any(m == 0 for m in g.shape):
        return [H.zeros(t.shape, g.dtype)]
    return [H.pad(g, H.scalar(0, g.dtype), low, high, interior)]


def _slice_aval(a, *, start, limit, strides):
    return (
        tuple(max(0, -(-(hi - lo) // s)) for lo, hi, s in zip(start, limit, strides)),
        a[1],
    )


SLICE = _prim(
    "slice",
    (0,),
    lambda t, *, start, limit, strides: H.slice_(t, start, limit, strides),
    _slice_transpose,
    _slice_aval,
)


def slice_(T, t, start, limit, strides=None):
    if t is None:
        return None
    strides = tuple(strides) if strides is not None else (1,) * t.ndim
    start, limit = tuple(start), tuple(limit)
    if start == (0,) * t.ndim and limit == t.shape and strides == (1,) * t.ndim:
        return t
    return T.bind(SLICE, [t], {"start": start, "limit": limit, "strides": strides})


def _pad_emit(t, tv, *, low, high, interior):
    return H.pad(t, tv, low, high, interior)


def _pad_transpose(g, t, tv, *, low, high, interior):
    unpadded = H.pad(g, H.scalar(0, g.dtype), [-x for x in low], [-x for x in high])
    ct_operand = H.slice_(unpadded, [0] * g.ndim, unpadded.shape, [i + 1 for i in interior])
    ct_value = H.sub(
        H.reduce_sum(g, range(g.ndim)), H.reduce_sum(ct_operand, range(ct_operand.ndim))
    )
    return [ct_operand, ct_value]


def _pad_aval(a, v, *, low, high, interior):
    shape = tuple(
        lo + hi + n + max(0, n - 1) * i for n, lo, hi, i in zip(a[0], low, high, interior)
    )
    return (shape, a[1])


PAD = _prim("pad", (0, 1), _pad_emit, _pad_transpose, _pad_aval)


def pad(T, t, tv, low, high, interior, operand_aval):
    if t is None and tv is None:
        return None
    t = instantiate(T, t, operand_aval)
    tv = instantiate(T, tv, ((), operand_aval[1]))
    return T.bind(
        PAD, [t, tv], {"low": tuple(low), "high": tuple(high), "interior": tuple(interior)}
    )


def _concat_transpose(g, *ts, dim):
    out, start = [], 0
    for t in ts:
        lo = [0] * g.ndim
        hi = list(g.shape)
        lo[dim], hi[dim] = start, start + t.shape[dim]
        out.append(H.slice_(g, lo, hi))
        start += t.shape[dim]
    return out


def _concat_aval(*avals, dim):
    shape = list(avals[0][0])
    shape[dim] = sum(a[0][dim] for a in avals)
    return (tuple(shape), avals[0][1])


def concatenate(T, ts, dim, avals):
    if all(t is None for t in ts):
        return None
    ts = [instantiate(T, t, a) for t, a in zip(ts, avals, strict=True)]
    prim = LINEAR.get(f"concatenate{len(ts)}")
    if prim is None:
        prim = _prim(
            f"concatenate{len(ts)}",
            tuple(range(len(ts))),
            lambda *xs, dim: H.concatenate(list(xs), dim),
            _concat_transpose,
            _concat_aval,
        )
    return T.bind(prim, ts, {"dim": dim})


REVERSE = _prim(
    "reverse",
    (0,),
    lambda t, *, dims: H.reverse(t, dims),
    lambda g, t, *, dims: [H.reverse(g, dims)],
    _same,
)


def reverse(T, t, dims):
    return None if t is None or not dims else T.bind(REVERSE, [t], {"dims": tuple(dims)})


def _select_emit(pred, a, b):
    return H.select(pred, a, b)


def _select_transpose(g, pred, a, b):
    zero = H.like(g, 0)
    return [H.select(pred, g, zero), H.select(pred, zero, g)]


SELECT = _prim("select", (1, 2), _select_emit, _select_transpose, lambda p, a, b: a)


def select(T, pred, a, b, aval):
    """select(pred, a, b) of tangents a and b (pred primal)."""
    if a is None and b is None:
        return None
    return T.bind(SELECT, [pred, instantiate(T, a, aval), instantiate(T, b, aval)])


# --- dynamic slices ------------------------------------------------------------------------------


def _dynamic_slice_transpose(g, t, *starts, sizes):
    return [H.dynamic_update_slice(H.zeros(t.shape, g.dtype), g, list(starts))]


DYNAMIC_SLICE = _prim(
    "dynamic_slice",
    (0,),
    lambda t, *starts, sizes: H.dynamic_slice(t, list(starts), sizes),
    _dynamic_slice_transpose,
    lambda a, *starts, sizes: (tuple(sizes), a[1]),
)


def dynamic_slice(T, t, starts, sizes):
    if t is None:
        return None
    return T.bind(DYNAMIC_SLICE, [t, *starts], {"sizes": tuple(sizes)})


def _dus_transpose(g, t, u, *starts):
    starts = list(starts)
    return [
        H.dynamic_update_slice(g, H.zeros(u.shape, g.dtype), starts),
        H.dynamic_slice(g, starts, u.shape),
    ]


DYNAMIC_UPDATE_SLICE = _prim(
    "dynamic_update_slice",
    (0, 1),
    lambda t, u, *starts: H.dynamic_update_slice(t, u, list(starts)),
    _dus_transpose,
    lambda a, u, *starts: a,
)


def dynamic_update_slice(T, t, u, starts, operand_aval, update_aval):
    if t is None and u is None:
        return None
    return T.bind(
        DYNAMIC_UPDATE_SLICE,
        [instantiate(T, t, operand_aval), instantiate(T, u, update_aval), *starts],
    )


# --- gathers and scatters ------------------------------------------------------------------------


def clamp_gather_indices(idx, dims: _ir.GatherDims, operand_shape, slice_sizes):
    """The start indices a gather actually reads from: StableHLO clamps each start so the
    slice lies in the operand. (A scatter skips out-of-bounds windows instead, so the
    transpose of a gather scatters at the clamped starts.)"""
    k = dims.index_vector_dim
    n = len(dims.start_index_map)
    if k == idx.ndim:
        idx = H.reshape(idx, idx.shape + (1,))
    parts = []
    for j, d in enumerate(dims.start_index_map):
        lo = [0] * idx.ndim
        hi = list(idx.shape)
        lo[k], hi[k] = j, j + 1
        part = H.slice_(idx, lo, hi)
        top = operand_shape[d] - slice_sizes[d]
        part = H.minimum(H.maximum(part, H.like(part, 0)), H.like(part, max(top, 0)))
        parts.append(part)
    out = H.concatenate(parts, k) if n > 1 else parts[0]
    return out


def _gather_transpose(g, t, idx, *, dims, slice_sizes):
    clamped = clamp_gather_indices(idx, dims, t.shape, slice_sizes)
    sdims = H.scatter_dims_of_gather(dims)
    if dims.index_vector_dim == idx.ndim:
        sdims = _with_index_vector_dim(sdims, idx.ndim)
    return [H.scatter(H.zeros(t.shape, g.dtype), clamped, g, sdims, "add")]


def _with_index_vector_dim(d: _ir.ScatterDims, k: int) -> _ir.ScatterDims:
    return _ir.ScatterDims(
        d.update_window_dims,
        d.inserted_window_dims,
        d.input_batching_dims,
        d.scatter_indices_batching_dims,
        d.scatter_dims_to_operand_dims,
        k,
    )


GATHER = _prim(
    "gather",
    (0,),
    lambda t, idx, *, dims, slice_sizes: H.gather(t, idx, dims, slice_sizes),
    _gather_transpose,
)


def gather(T, t, idx, dims, slice_sizes, aval):
    if t is None:
        return None
    return T.bind(GATHER, [t, idx], {"dims": dims, "slice_sizes": tuple(slice_sizes)}, aval=aval)


def scatter_in_bounds(idx, dims: _ir.ScatterDims, operand_shape, updates_shape):
    """Per update element, whether XLA's scatter applies it: a window that does not lie
    wholly inside the operand is skipped."""
    window = H.scatter_slice_sizes(operand_shape, updates_shape, dims)
    k = dims.index_vector_dim
    if k == idx.ndim:
        idx = H.reshape(idx, idx.shape + (1,))
    ok = None
    for j, d in enumerate(dims.scatter_dims_to_operand_dims):
        lo = [0] * idx.ndim
        hi = list(idx.shape)
        lo[k], hi[k] = j, j + 1
        part = H.slice_(idx, lo, hi)
        inside = H.logical_and(
            H.compare(part, 0, "GE"), H.compare(part, operand_shape[d] - window[d], "LE")
        )
        ok = inside if ok is None else H.logical_and(ok, inside)
    batch_shape = tuple(n for i, n in enumerate(idx.shape) if i != k)
    ok = H.reshape(ok, batch_shape)
    scatter_dims = [i for i in range(len(updates_shape)) if i not in dims.update_window_dims]
    return H.broadcast_in_dim(ok, updates_shape, scatter_dims)


def _scatter_add_transpose(g, t, idx, u, *, dims):
    gdims = H.gather_dims_of_scatter(dims)
    sizes = H.scatter_slice_sizes(g.shape, u.shape, dims)
    gathered = H.gather(g, idx, gdims, sizes)
    mask = scatter_in_bounds(idx, dims, g.shape, u.shape)
    return [g, H.select(mask, gathered, H.like(gathered, 0))]


SCATTER_ADD = _prim(
    "scatter_add",
    (0, 2),
    lambda t, idx, u, *, dims: H.scatter(t, idx, u, dims, "add"),
    _scatter_add_transpose,
    lambda a, idx, u, *, dims: a,
)


def scatter_add(T, t, idx, u, dims, operand_aval, update_aval):
    if t is None and u is None:
        return None
    return T.bind(
        SCATTER_ADD,
        [instantiate(T, t, operand_aval), idx, instantiate(T, u, update_aval)],
        {"dims": dims},
    )


# --- products ------------------------------------------------------------------------------------


def _argsort(values) -> list[int]:
    return sorted(range(len(values)), key=values.__getitem__)


def _ranges_like(*xs):
    start = 0
    for x in xs:
        yield tuple(range(start, start + len(x)))
        start += len(x)


def _remaining(n, *taken):
    used = {d for t in taken for d in t}
    return [d for d in range(n) if d not in used]


def dot_transpose_lhs(g, x_aval, y, dims: _ir.DotDims, precision, swap=False):
    """The cotangent of the lhs x of `dot_general(x, y)` from the result's cotangent g
    (JAX's rule: a dot of g with y, then a transpose into x's layout)."""
    y_first, contract, batch, out_axes = _lhs_transpose_plan(len(x_aval[0]), y.ndim, dims, swap)
    g = H.convert(g, y.dtype) if g.dtype != y.dtype else g
    if y_first:
        return H.dot_general(y, g, contract, batch, precision=_swapped(precision), dtype=x_aval[1])
    gy = H.dot_general(g, y, contract, batch, precision=precision, dtype=x_aval[1])
    return H.transpose(gy, out_axes)


@functools.lru_cache(maxsize=1024)
def _lhs_transpose_plan(x_ndim: int, y_ndim: int, dims: _ir.DotDims, swap: bool):
    """How `dot_transpose_lhs` makes x's cotangent: (y first?, the dot's contracting and
    batch dimensions, the permutation into x's layout after it)."""
    x_contract, y_contract = dims.lhs_contract, dims.rhs_contract
    x_batch, y_batch = dims.lhs_batch, dims.rhs_batch
    x_kept = _remaining(x_ndim, x_contract, x_batch)
    y_kept = tuple(_remaining(y_ndim, y_contract, y_batch))
    if swap:
        ans_batch, ans_y, _ = _ranges_like(x_batch, y_kept, x_kept)
    else:
        ans_batch, _, ans_y = _ranges_like(x_batch, x_kept, y_kept)
    y_contract_order = _argsort(y_contract)
    x_contract_sorted_by_y = [x_contract[i] for i in y_contract_order]
    out_axes = tuple(_argsort(list(x_batch) + x_kept + x_contract_sorted_by_y))
    identity = tuple(range(x_ndim))
    if out_axes != identity and (*x_batch, *x_contract_sorted_by_y, *x_kept) == identity:
        # y first, the dot's result is already in x's layout: (batch, y's free dims, which
        # pair with x's contracted ones, g's free dims, x's kept ones), and no transpose
        # follows (the weight's cotangent of `x @ w`).
        return True, (y_kept, ans_y), (y_batch, ans_batch), identity
    return False, (ans_y, y_kept), (ans_batch, y_batch), out_axes


@_context.cached
def _swapped(precision):
    """A dot's precision config for its operands swapped."""
    if precision is None:
        return None
    pair = list(ir.ArrayAttr(precision))
    return ir.ArrayAttr.get(pair[::-1]) if len(pair) == 2 else precision


def _swap(dims: _ir.DotDims) -> _ir.DotDims:
    return _ir.DotDims(dims.rhs_contract, dims.lhs_contract, dims.rhs_batch, dims.lhs_batch)


def _dot_emit(a, b, *, dims, precision, dtype):
    return H.dot_general(
        a,
        b,
        (dims.lhs_contract, dims.rhs_contract),
        (dims.lhs_batch, dims.rhs_batch),
        precision=precision,
        dtype=dtype,
    )


def _dot_aval(a, b, *, dims, precision, dtype):
    contract = (dims.lhs_contract, dims.rhs_contract)
    return (H.dot_shape(a[0], b[0], contract, (dims.lhs_batch, dims.rhs_batch)), dtype)


DOT_LHS = _prim(
    "dot_general_lhs",
    (0,),
    _dot_emit,
    lambda g, t, y, *, dims, precision, dtype: [
        dot_transpose_lhs(g, (t.shape, t.dtype), y, dims, precision)
    ],
    _dot_aval,
)
DOT_RHS = _prim(
    "dot_general_rhs",
    (1,),
    _dot_emit,
    lambda g, x, t, *, dims, precision, dtype: [
        dot_transpose_lhs(g, (t.shape, t.dtype), x, _swap(dims), precision, swap=True)
    ],
    _dot_aval,
)


def dot_general(T, a, b, *, dims, precision, dtype, linear: str):
    """dot_general(a, b) with the tangent in `linear` ("lhs" or "rhs"), the other primal."""
    t = a if linear == "lhs" else b
    if t is None:
        return None
    prim = DOT_LHS if linear == "lhs" else DOT_RHS
    return T.bind(prim, [a, b], {"dims": dims, "precision": precision, "dtype": np.dtype(dtype)})
