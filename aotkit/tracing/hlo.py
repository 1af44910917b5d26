"""Trace stage, the StableHLO-level layer: helpers over the primitives, below the NumPy API.

The op families (`elementwise`, `shape`, `indexing`, `reduction`, ...) implement NumPy's
functions; what they share at the level of StableHLO ops lives here: broadcasting shapes
and tracers, reshapes, static slices, reversal, concatenation, conversion with NumPy's
`astype` semantics, axis normalization. It binds primitives by their registered names
and imports nothing from the families, so the families import it (and each other, in one
direction: elementwise <- shape <- reduction <- linalg) without cycles.
"""

from __future__ import annotations

import functools

import numpy as np

from aotkit import dtypes
from aotkit.symbolic import algebra
from aotkit.tracing.core import (
    IN_PLACE_CHECKS,
    Tracer,
    bind,
    bind1,
    constant,
    current_scope,
    full,
    repoint,
    where,
)
from aotkit.tracing.keys import KeyTracer


def _is_int(v) -> bool:
    return isinstance(v, int | np.integer) and not isinstance(v, bool | np.bool_)


def symbolic_trace() -> bool:
    """Whether the trace in progress has symbolic dimensions (issue 25): one flag per trace,
    so static traces pay one lookup where a rule would otherwise inspect its shapes."""
    return current_scope().emitted.symbolic is not None


def no_out(op: str, out) -> None:
    """Refuses `out=`: traced arrays are values, not buffers to write into."""
    if out is not None:
        raise NotImplementedError(
            f"{where(op)}: out= is not supported; traced arrays are immutable, use the "
            "returned array"
        )


def broadcasts_to(shape: tuple[int, ...], target: tuple[int, ...]) -> bool:
    """Whether NumPy broadcasting takes `shape` to exactly `target` (a value written into,
    or laid over, an array of shape `target`)."""
    try:
        return np.broadcast_shapes(shape, target) == target
    except ValueError:
        return False


def broadcast_shapes(op: str, *shapes: tuple[int, ...]) -> tuple[int, ...]:
    """NumPy broadcasting of shapes; ValueError naming the op and the shapes otherwise."""
    first = shapes[0]
    if len(shapes) == 2 and shapes[1] == first:
        return first
    out = _broadcast(shapes)
    if out is None and not all(map(algebra.is_static, shapes)):  # symbolic (issue 25)
        out = _broadcast_symbolic(op, shapes)
    if out is None:
        listed = " and ".join(str(tuple(s)) for s in shapes)
        raise ValueError(
            f"{where(op)}: shapes {listed} cannot broadcast; NumPy broadcasting "
            "aligns trailing dimensions, which must be equal or 1 (reshape or "
            "expand_dims an operand first)"
        )
    return out


@functools.lru_cache(maxsize=4096)
def _broadcast(shapes: tuple[tuple[int, ...], ...]) -> tuple[int, ...] | None:
    # Programs broadcast the same few shape pairs over and over: remember the answers.
    ndim = max(len(s) for s in shapes)
    out = []
    for i in range(ndim):
        size = 1
        for s in shapes:
            d = s[i - ndim + len(s)] if i >= ndim - len(s) else 1
            if d != 1:
                if size not in (1, d):
                    return None
                size = d
        out.append(size)
    return tuple(out)


def _broadcast_symbolic(op: str, shapes: tuple) -> tuple | None:
    """NumPy broadcasting of shapes with symbolic dimensions: a dimension against 1 is the
    dimension; two others must be equal (or one of them 1) by the constraints, else an
    `InconclusiveDimensionError` (None: they cannot broadcast)."""
    ndim = max(len(s) for s in shapes)
    out = []
    for i in range(ndim):
        size = 1
        for s in shapes:
            d = s[i - ndim + len(s)] if i >= ndim - len(s) else 1
            if algebra.same(d, 1) or algebra.same(d, size):
                continue
            if algebra.same(size, 1):
                size = d
                continue
            scope = (size if isinstance(size, algebra.Dim) else d).scope
            equal = scope.try_eq(size, d)
            if equal:
                continue
            size_one = scope.try_eq(size, 1)
            d_one = scope.try_eq(d, 1)
            if equal is False and size_one is False and d_one is False:
                return None
            if equal is False and size_one is True:
                size = d
                continue
            if equal is False and d_one is True:
                continue
            x, y = (size, d) if isinstance(size, algebra.Dim) else (d, size)
            raise algebra.InconclusiveDimensionError(
                f"{where(op)}: cannot broadcast dimension {x} against {y}: the constraints "
                f"({scope.describe()}) do not decide whether they are equal or one of them "
                "is 1; " + algebra.HOW_TO_DECIDE.format(example=f"{x} == {y}")
            )
        out.append(size)
    return tuple(out)


def broadcast_to_shape(x: Tracer, shape: tuple[int, ...]) -> Tracer:
    """Broadcasts a tracer whose shape is known to broadcast to `shape`."""
    if x.shape == shape:
        return x
    dims = tuple(range(len(shape) - len(x.shape), len(shape)))
    return bind("broadcast_in_dim", x, shape=shape, dims=dims)[0]


def reshape_to(x: Tracer, shape: tuple[int, ...]) -> Tracer:
    if x.shape == shape:
        return x
    return bind1("reshape", x, shape=shape)


def normalize_axis(op: str, axis, ndim: int) -> int:
    if isinstance(axis, bool) or not isinstance(axis, int):
        try:
            axis = axis.__index__()
        except (AttributeError, TypeError):
            raise TypeError(
                f"{where(op)}: axis {axis!r} must be a Python int; pass a static axis"
            ) from None
    if not -ndim <= axis < ndim:
        raise ValueError(
            f"{where(op)}: axis {axis} is out of bounds for an array of dimension {ndim}"
        )
    return axis % ndim if ndim else 0


def ravel_or_axis(op: str, x: Tracer, axis) -> tuple[Tracer, int]:
    """NumPy's `axis=None`: `x` flattened and its axis 0; else `x` and `axis` normalized."""
    if axis is None:
        return reshape_to(x, (x.size,)), 0
    return x, normalize_axis(op, axis, x.ndim)


def normalize_axes(op: str, axis, ndim: int, name: str = "axis") -> tuple[int, ...]:
    """None (every axis), an int or a sequence of ints as distinct non-negative axes, in the
    order given (ValueError on repeats)."""
    if axis is None:
        return tuple(range(ndim))
    axes = (axis,) if _is_int(axis) or isinstance(axis, Tracer) else tuple(axis)
    out = tuple(normalize_axis(op, a, ndim) for a in axes)
    if len(set(out)) != len(out):
        raise ValueError(f"{where(op)}: repeated axis in `{name}` argument: {axis!r}")
    return out


def slice_static(
    x: Tracer,
    start: tuple[int, ...],
    limit: tuple[int, ...],
    strides: tuple[int, ...] | None = None,
) -> Tracer:
    """`x[start:limit:strides]` per dimension, positive strides, in-range bounds."""
    strides = strides or (1,) * x.ndim
    if start == (0,) * x.ndim and limit == x.shape and strides == (1,) * x.ndim:
        return x
    return bind1("slice", x, start=tuple(start), limit=tuple(limit), strides=tuple(strides))


def reverse(x: Tracer, dims: tuple[int, ...]) -> Tracer:
    dims = tuple(d for d in dims if algebra.may_exceed(x.shape[d], 1))
    return bind1("reverse", x, dims=dims) if dims else x


def concat(xs: list[Tracer], axis: int) -> Tracer:
    """Concatenates tracers of one dtype and matching shapes along `axis`."""
    xs = [x for x in xs if not algebra.same(x.shape[axis], 0)] or xs[:1]
    return xs[0] if len(xs) == 1 else bind1("concatenate", *xs, dim=axis)


def insert_axes(x: Tracer, axes: tuple[int, ...]) -> Tracer:
    """Inserts size-1 axes at the (result) positions `axes`."""
    shape = list(x.shape)
    for a in sorted(axes):
        shape.insert(a, 1)
    return reshape_to(x, tuple(shape))


def cast(x: Tracer, dtype: np.dtype) -> Tracer:
    """Converts with NumPy's `astype` semantics (to bool: != 0; complex to real: real part)."""
    if x.dtype == dtype:
        return x
    if dtype == np.bool_:
        return bind1("compare", x, full(x.shape, 0, x.dtype), direction="NE")
    if dtypes.is_complex(x.dtype) and not dtypes.is_complex(dtype):
        x = bind1("real", x)
        if x.dtype == dtype:
            return x
    if x.dtype == np.bool_ and dtypes.is_inexact(dtype):
        # XLA rewrites `convert(pred) / y` and `convert(pred) * y` into selects that give 0
        # where IEEE gives NaN (0 / 0, 0 * inf); a select of 1 and 0 keeps the arithmetic.
        return bind1("select", x, full(x.shape, 1, dtype), full(x.shape, 0, dtype))
    return bind1("convert", x, dtype=dtype)


def stack(op: str, xs: list[Tracer]) -> Tracer:
    """Tracers of one shape stacked along a new leading axis, in their promoted dtype."""
    for x in xs[1:]:
        if x.shape != xs[0].shape:
            raise ValueError(
                f"{where(op)}: all input arrays must have the same shape, got "
                f"{xs[0].shape} and {x.shape}"
            )
    dtype = functools.reduce(dtypes.promote_types, [x.dtype for x in xs])
    return concat([reshape_to(cast(x, dtype), (1,) + x.shape) for x in xs], 0)


def gather_along(x: Tracer, axis: int, idx: np.ndarray) -> Tracer:
    """`x` at the static in-range positions `idx` (1-d) along `axis`, as one gather."""
    idx = np.asarray(idx, np.int32 if x.shape[axis] < 2**31 else np.int64).reshape(-1, 1)
    offset_dims = tuple(d for d in range(x.ndim) if d != axis)
    sizes = tuple(1 if d == axis else n for d, n in enumerate(x.shape))
    return bind1(
        "gather", x, constant(idx), offset_dims=offset_dims, collapsed=(axis,), slice_sizes=sizes
    )


def _host_array(op: str, x) -> np.ndarray:
    try:
        arr = np.asarray(x)
    except Exception as e:  # ragged lists, tracers inside lists, ...
        if isinstance(x, KeyTracer):  # its own message: what to do with a key
            raise TypeError(f"{where(op)}: {e}") from None
        raise TypeError(
            f"{where(op)}: cannot make an array of {type(x).__name__} {x!r:.80}; "
            "use aotkit.numpy.stack for lists of traced arrays"
        ) from e
    if arr.dtype == object:
        if any(isinstance(e, Tracer) for e in np.ravel(arr)):
            return _stack_tracers(op, x)
        raise TypeError(f"{where(op)}: cannot make a numeric array of {x!r:.80}")
    return arr


def _stack_tracers(op: str, x):
    raise TypeError(
        f"{where(op)}: a list that holds traced arrays is not an array; use "
        "aotkit.numpy.stack([...]) (or np.stack) to build one"
    )


def to_operand(op: str, x, dtype: np.dtype, shape: tuple[int, ...]) -> Tracer:
    """Makes `x` a tracer of `dtype` broadcast to `shape` (constants are built in place)."""
    if isinstance(x, Tracer):
        return broadcast_to_shape(cast(x, dtype), shape)
    if dtypes.weak_kind(x) is not None:
        try:
            return full(shape, x, dtype)
        except OverflowError as e:  # NumPy 2 refuses out-of-range Python ints too
            raise OverflowError(f"{where(op)}: {e}; cast the array to a wider dtype") from None
    arr = _host_array(op, x)
    if arr.ndim == 0:
        return full(shape, arr.astype(dtype), dtype)
    return broadcast_to_shape(constant(arr, dtype), shape)


def rebind(op: str, x: Tracer, new: Tracer) -> None:
    """Points the Python tracer `x` at `new` (same shape and dtype): NumPy's in-place writes."""
    assert new.shape == x.shape and new.dtype == x.dtype, (x, new)
    for check in IN_PLACE_CHECKS:
        check(op, x)
    repoint(op, x, new)
