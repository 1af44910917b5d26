"""Trace stage, indexing family: `x[...]`, take, take_along_axis and functional updates.

`x[idx]` follows NumPy's indexing rules (basic slicing, None, Ellipsis, integer-array
indexing with broadcast index arrays, adjacent advanced indices keeping their place). Static
slices and integers lower to one `stablehlo.slice` (plus `reverse` for negative steps), a
traced scalar integer to `dynamic_slice`, and integer arrays to one `gather`.

Out-of-range indices: static ones raise IndexError as NumPy does. Traced ones cannot be
checked at trace time: negative values wrap once (as in NumPy), then reads clamp into range
(like JAX) and updates outside the array are dropped (XLA's scatter semantics, like JAX).

Updates are functional: `x.at[idx].set(v)` (and `.add`, `.multiply`, `.min`, `.max`) return
a new array; `x[idx] = v` and `x += v` rebind the Python tracer object to the updated value,
so NumPy code that writes into its own arrays traces. Views do not alias: `y = x[0]; y[0] = 1`
leaves `x` unchanged.
"""

from __future__ import annotations

import math
import operator
import re

import numpy as np
from jaxlib.mlir import ir
from jaxlib.mlir.dialects import stablehlo

from aotkit import dtypes
from aotkit.symbolic import algebra
from aotkit.symbolic.algebra import Dim
from aotkit.tracing.core import (
    NUMPY_FUNCTIONS,
    RuleContext,
    Tracer,
    _check_live,
    bind1,
    constant,
    current_scope,
    export,
    full,
    in_loop_body,
    noted_range,
    register,
    same_value,
    user_site,
    where,
)
from aotkit.tracing.elementwise import (
    _contains_tracer,
    add,
    asarray,
    clip,
    defer_ufuncs_to,
    maximum,
    minimum,
    multiply,
    remainder,
    shape_of,
    to_operand,
)
from aotkit.tracing.hlo import (
    broadcast_shapes,
    broadcast_to_shape,
    cast,
    concat,
    no_out,
    normalize_axis,
    ravel_or_axis,
    rebind,
    reshape_to,
    reverse,
    slice_static,
    symbolic_trace,
)

# --- primitives ------------------------------------------------------------------------------


@register("dynamic_slice", shape=lambda a, *starts, sizes: [(tuple(sizes), a[1])])
def _lower_dynamic_slice(ctx: RuleContext, x, *starts, sizes):
    return [stablehlo.dynamic_slice(x, list(starts), list(sizes))]


@register("dynamic_update_slice", shape=lambda a, u, *starts: [a])
def _lower_dynamic_update_slice(ctx: RuleContext, x, update, *starts):
    return [stablehlo.dynamic_update_slice(x, update, list(starts))]


def _gather_shape(a, idx, *, offset_dims, collapsed, slice_sizes):
    batch = iter(idx[0][:-1])
    window = iter(s for d, s in enumerate(slice_sizes) if d not in collapsed)
    rank = len(idx[0]) - 1 + len(slice_sizes) - len(collapsed)
    return [(tuple(next(window) if i in offset_dims else next(batch) for i in range(rank)), a[1])]


def gather_dimension_numbers(ctx: RuleContext, offset_dims, collapsed):
    """The dimension numbers of the `gather` op (static or dynamic): `collapsed` operand
    dimensions indexed by the last axis of the indices, the others kept at `offset_dims`."""
    return stablehlo.GatherDimensionNumbers.get(
        offset_dims=list(offset_dims),
        collapsed_slice_dims=list(collapsed),
        operand_batching_dims=[],
        start_indices_batching_dims=[],
        start_index_map=list(collapsed),
        index_vector_dim=len(ctx.avals_in[1][0]) - 1,
    )


@register("gather", shape=_gather_shape)
def _lower_gather(ctx: RuleContext, x, idx, *, offset_dims, collapsed, slice_sizes):
    dnums = gather_dimension_numbers(ctx, offset_dims, collapsed)
    return [
        stablehlo.gather(
            x, idx, dnums, list(slice_sizes), indices_are_sorted=False, results=[ctx.out_type()]
        )
    ]


_COMBINE = {
    "add": stablehlo.add,
    "multiply": stablehlo.multiply,
    "min": stablehlo.minimum,
    "max": stablehlo.maximum,
}
# StableHLO has no i1 add or multiply; NumPy's ufunc.at on booleans is logical or / and.
_COMBINE_BOOL = {
    "add": stablehlo.or_,
    "multiply": stablehlo.and_,
    "min": stablehlo.and_,
    "max": stablehlo.or_,
}


@register("scatter", shape=lambda a, idx, upd, **_: [a])
def _lower_scatter(ctx: RuleContext, x, idx, upd, *, window_dims, inserted, combine):
    dnums = stablehlo.ScatterDimensionNumbers.get(
        update_window_dims=list(window_dims),
        inserted_window_dims=list(inserted),
        input_batching_dims=[],
        scatter_indices_batching_dims=[],
        scattered_dims_to_operand_dims=list(inserted),
        index_vector_dim=len(ctx.avals_in[1][0]) - 1,
    )
    op = stablehlo.ScatterOp(
        [ctx.out_type()], [x], idx, [upd], dnums, indices_are_sorted=False, unique_indices=False
    )
    dtype = ctx.avals_in[0][1]
    scalar = dtypes.tensor_type((), dtype)
    block = op.update_computation.blocks.append(scalar, scalar)
    with ir.InsertionPoint(block):
        old, new = block.arguments
        if combine != "set":
            table = _COMBINE_BOOL if dtype == np.bool_ else _COMBINE
            new = table[combine](old, new)
        stablehlo.return_([new])
    return [op.results[0]]


# --- parsing an index ------------------------------------------------------------------------

_VALID = (
    "only integers, slices (`:`), ellipsis (`...`), numpy.newaxis (`None`) and integer or "
    "boolean arrays are valid indices"
)
_FULL = slice(None)


def _slice_bound(op: str, v, name: str):
    if v is None or isinstance(v, Dim):
        return v
    if isinstance(v, Tracer):
        raise IndexError(
            f"{where(op)}: slice {name} is traced, but slice bounds fix the result shape and "
            "must be static; index with a traced integer array instead (x[i + arange(n)]) "
            "or take(x, i + arange(n), axis)"
        )
    try:
        return operator.index(v)
    except TypeError:
        raise IndexError(
            f"{where(op)}: slice indices must be integers or None, got {name}={v!r}"
        ) from None


def _classify(op: str, e):
    if e is None:
        return "none", None
    if e is Ellipsis:
        return "ellipsis", None
    if isinstance(e, slice):
        s = slice(*(_slice_bound(op, v, n) for v, n in ((e.start, "start"), (e.stop, "stop"))),
                  _slice_bound(op, e.step, "step"))  # fmt: skip
        if s.step == 0:
            raise ValueError(f"{where(op)}: slice step cannot be zero")
        return "slice", s
    if isinstance(e, bool | np.bool_):
        raise IndexError(
            f"{where(op)}: a boolean scalar index ({e!r}) is not supported; use None "
            "(np.newaxis) to add an axis"
        )
    if isinstance(e, int | np.integer):
        return "int", int(e)
    if isinstance(e, Dim):  # a symbolic dimension (x[x.shape[0] // 2]): a traced index
        e = full((), e, np.dtype(np.int64))
    if isinstance(e, Tracer):
        if e.dtype == np.bool_:
            return "tmask", e
        if not dtypes.is_integer(e.dtype):
            raise IndexError(
                f"{where(op)}: {_VALID}; got a traced {e.dtype.name} array (cast it with "
                ".astype('int32'))"
            )
        return ("scalar" if e.ndim == 0 else "tarray"), e
    if isinstance(e, list | tuple) and _contains_tracer(e):
        return _classify(op, asarray(e))
    if isinstance(e, list | tuple | range | np.ndarray | np.generic):
        try:
            arr = np.asarray(e)
        except ValueError:
            arr = np.asarray(0.5)  # ragged: rejected below
        if arr.dtype == np.bool_:
            if arr.ndim == 0:
                return _classify(op, bool(arr))
            return "mask", arr
        if arr.size == 0 and not isinstance(e, np.ndarray):
            arr = arr.astype(np.intp)  # NumPy reads [] as an empty integer index
        if arr.dtype.kind in "iu":
            return ("int", int(arr)) if arr.ndim == 0 else ("array", arr)
    raise IndexError(f"{where(op)}: {_VALID}; got {type(e).__name__} {e!r:.60}")


def _out_of_bounds(op: str, i: int, axis: int, n: int) -> IndexError:
    return IndexError(f"{where(op)}: index {i} is out of bounds for axis {axis} with size {n}")


class _Parsed:
    """An index over `shape` (the operand with None axes inserted): one entry per dim.

    Entries: ("slice", start, length, step) with NumPy's normalized bounds, ("int", i) and
    ("array", ndarray) with in-range non-negative positions, ("scalar", tracer) and
    ("tarray", tracer) for traced integers (not yet wrapped).
    """

    __slots__ = ("shape", "entries", "advanced", "mask")

    def __init__(self, shape, entries, mask):
        self.shape = tuple(shape)
        self.entries = entries
        self.mask = mask
        arrays = any(e[0] in ("array", "tarray") for e in entries)
        # With any integer array present, integers count as 0-d advanced indices too.
        self.advanced = [d for d, e in enumerate(entries) if e[0] != "slice"] if arrays else []


def _parse(op: str, shape: tuple[int, ...], idx) -> _Parsed:
    items = [_classify(op, e) for e in (idx if isinstance(idx, tuple) else (idx,))]
    if sum(k == "ellipsis" for k, _ in items) > 1:
        raise IndexError(f"{where(op)}: an index can only have a single ellipsis ('...')")
    used = sum(
        v.ndim if k in ("mask", "tmask") else 1 for k, v in items if k not in ("none", "ellipsis")
    )
    if used > len(shape):
        raise IndexError(
            f"{where(op)}: too many indices for array: array is {len(shape)}-dimensional, "
            f"but {used} were indexed"
        )
    fill = [("slice", _FULL)] * (len(shape) - used)
    if any(k == "ellipsis" for k, _ in items):
        at = next(i for i, (k, _) in enumerate(items) if k == "ellipsis")
        items = items[:at] + fill + items[at + 1 :]
    else:
        items = items + fill
    new_shape, entries, mask = [], [], None
    d = 0
    for kind, v in items:
        if kind == "none":
            new_shape.append(1)
            entries.append(("slice", 0, 1, 1))
            continue
        if kind in ("mask", "tmask"):
            if tuple(v.shape) != shape[d : d + v.ndim]:
                bad = next(i for i in range(v.ndim) if v.shape[i] != shape[d + i])
                raise IndexError(
                    f"{where(op)}: boolean index did not match indexed array along axis "
                    f"{d + bad}; size of axis is {shape[d + bad]} but size of corresponding "
                    f"boolean axis is {v.shape[bad]}"
                )
            if kind == "tmask":
                mask = (len(entries), v)
                entries.extend(("mask",) for _ in range(v.ndim))
                new_shape.extend(shape[d : d + v.ndim])
                d += v.ndim
                continue
            for positions in np.nonzero(v):
                new_shape.append(shape[d])
                entries.append(("array", positions))
                d += 1
            continue
        n = shape[d]
        if kind == "slice" and (
            isinstance(n, Dim) or isinstance(v.start, Dim) or isinstance(v.stop, Dim)
        ):  # symbolic (issue 25)
            step = 1 if v.step is None else v.step
            entries.append(("slice", *algebra.slice_indices(v.start, v.stop, step, n), step))
        elif kind == "slice":
            start, stop, step = v.indices(n)
            entries.append(("slice", start, len(range(start, stop, step)), step))
        elif kind == "int":
            if not -n <= v < n:
                raise _out_of_bounds(op, v, d, n)
            entries.append(("int", v + n if isinstance(n, Dim) and v < 0 else v % n))
        elif kind == "array" and isinstance(n, Dim):  # a symbolic axis (issue 25)
            if v.size and v.min() < 0:
                raise IndexError(
                    f"{where(op)}: negative static indices into axis {d} of symbolic size {n} "
                    "are not supported; index from the end with n - k"
                )
            if v.size and not n > int(v.max()):
                raise _out_of_bounds(op, int(v.max()), d, n)
            entries.append(("array", v.astype(np.int64)))
        elif kind == "array":
            bad = (v < -n) | (v >= n)
            if bad.any():
                raise _out_of_bounds(op, int(v[bad].flat[0]), d, n)
            entries.append(("array", np.where(v < 0, v + n, v).astype(np.int64)))
        else:
            if isinstance(n, Dim) and not algebra.definitely(n, ">=", 1):
                raise algebra.InconclusiveDimensionError(
                    f"{where(op)}: axis {d} of symbolic size {n} may be empty, which a traced "
                    "index cannot read; " + algebra.HOW_TO_DECIDE.format(example=f"{n} >= 1")
                )
            if n == 0:
                raise IndexError(
                    f"{where(op)}: cannot index axis {d} of size 0 with a traced index"
                )
            entries.append((kind, v))
        new_shape.append(n)
        d += 1
    return _Parsed(new_shape, entries, mask)


def _traced_mask_error(op: str, selected_at: str | None = None) -> IndexError:
    at = f" (the x[mask] at {selected_at})" if selected_at is not None else ""
    return IndexError(
        f"{where(op)}: indexing with a traced boolean mask{at} gives a result whose shape "
        "depends on the data (the number of True values), which a compiled program cannot "
        "have; reduce it (x[mask].sum(), np.mean(x[mask]), .max(), ...), or use "
        "aotkit.numpy.where(mask, x, other) to keep the shape; writes by the mask work too "
        "(x[m] = value, y[m] = 2 * x[m] + 1), the mask the same value both sides or "
        "computed the same way from the same values (m = x > 0 bound once is surest)"
    )


class _Selection:
    """Elements of `x` that `mask` (of x's shape) selects, whose number depends on the data:
    what its reductions compute (`np.sum(x, where=mask)` and its kin). `axes` are the axes
    a reduction may name (the ones whose extent the selection changes, as the user numbers
    them) and `axis` the axis of x they are; a subclass says what the selection is."""

    __slots__ = ("_x", "_mask", "_axes", "_axis", "_site")
    _what = "a selection"

    def __init__(self, x: Tracer, mask: Tracer, axes: tuple[int, ...], axis, site: str):
        object.__setattr__(self, "_x", x)
        object.__setattr__(self, "_mask", mask)
        object.__setattr__(self, "_axes", axes)
        object.__setattr__(self, "_axis", axis)
        object.__setattr__(self, "_site", site)

    def _args(self, op: str, axis, keepdims, out, where_) -> tuple[Tracer, object, Tracer]:
        """(x, the reduction axis of x or None, the mask)."""
        no_out(op, out)
        if keepdims or where_ is not True:
            given = "keepdims=True" if keepdims else "where="
            raise TypeError(
                f"{where(op)}: {given} on {self._what} (at {self._site}) is not supported; "
                f"reduce with np.{op}(x, where=mask, ...) instead"
            )
        if axis is not None and axis not in self._axes:
            raise self.refusal(op)
        return self._x, (None if axis is None else self._axis), self._mask

    def _reduce(self, name: str, axis, keepdims, out, where_, **kw):
        x, axis, m = self._args(name, axis, keepdims, out, where_)
        return NUMPY_FUNCTIONS[name](x, axis=axis, where=m, **kw)

    def sum(self, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=True):  # noqa: A003
        return self._reduce("sum", axis, keepdims, out, where, dtype=dtype, initial=initial)

    def prod(self, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=True):
        return self._reduce("prod", axis, keepdims, out, where, dtype=dtype, initial=initial)

    def mean(self, axis=None, dtype=None, out=None, keepdims=False, *, where=True):
        return self._reduce("mean", axis, keepdims, out, where, dtype=dtype)

    def var(self, axis=None, dtype=None, out=None, ddof=0, keepdims=False, *, where=True):
        return self._reduce("var", axis, keepdims, out, where, dtype=dtype, ddof=ddof)

    def std(self, axis=None, dtype=None, out=None, ddof=0, keepdims=False, *, where=True):
        return self._reduce("std", axis, keepdims, out, where, dtype=dtype, ddof=ddof)

    def any(self, axis=None, out=None, keepdims=False, *, where=True):  # noqa: A003
        return self._reduce("any", axis, keepdims, out, where)

    def all(self, axis=None, out=None, keepdims=False, *, where=True):  # noqa: A003
        return self._reduce("all", axis, keepdims, out, where)

    def max(self, axis=None, out=None, keepdims=False, initial=None, where=True):  # noqa: A003
        return self._extreme("max", axis, keepdims, out, where, initial)

    def min(self, axis=None, out=None, keepdims=False, initial=None, where=True):  # noqa: A003
        return self._extreme("min", axis, keepdims, out, where, initial)

    def _extreme(self, name: str, axis, keepdims, out, where_, initial):
        x, axis, m = self._args(name, axis, keepdims, out, where_)
        reduce = NUMPY_FUNCTIONS[name]
        if initial is not None:
            return reduce(x, axis=axis, where=m, initial=initial)
        if not dtypes.is_inexact(x.dtype) or dtypes.is_complex(x.dtype):
            raise ValueError(
                f"{where(name)}: the {name}imum of {self._what} (at "
                f"{self._site}) has no value when nothing is selected, which NumPy reports "
                f"as an error a compiled program cannot raise; pass initial= (x[mask].{name}"
                f"(initial=...)), the value an empty selection gives"
            )
        bound = -np.inf if name == "max" else np.inf
        found = reduce(x, axis=axis, where=m, initial=bound)
        some = NUMPY_FUNCTIONS["any"](m, axis=axis)
        return NUMPY_FUNCTIONS["where"](some, found, np.array(np.nan, x.dtype))

    amax, amin = max, min

    # -- NumPy's functions and operators

    def __array_function__(self, func, types, args, kwargs):
        name = func.__name__
        method = getattr(type(self), name, None) if name in _SELECTION_REDUCTIONS else None
        if method is None or not args or args[0] is not self:
            raise self.refusal(f"np.{name}")
        return method(self, *args[1:], **kwargs)

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        raise self.refusal(f"np.{ufunc.__name__}")

    def __array__(self, dtype=None, copy=None):
        raise self.refusal("np.asarray")

    def __getattr__(self, name: str):
        raise self.refusal(f"x[mask].{name}")

    def __setattr__(self, name, value):
        raise self.refusal(f"x[mask].{name} = ...")

    def __len__(self):
        raise self.refusal("len")

    def __iter__(self):
        raise self.refusal("iter")

    def __bool__(self):
        raise self.refusal("bool")


class MaskedSelection(_Selection):
    """`x[mask]` for a traced boolean mask over x's leading axes: the selected elements,
    whose number depends on the data.

    A compiled program cannot hold it as an array, but it can reduce it: `.sum()`,
    `.prod()`, `.mean()`, `.std()`, `.var()`, `.max()`, `.min()`, `.any()`, `.all()` and
    the NumPy functions of the same names (`np.sum(x[mask])`) compute the masked reduction
    over the whole selection (or over its rows, `axis=0`, for a mask of x's first axis),
    of fixed shape: `np.sum(x, where=mask)`. The maximum or minimum of an empty float
    selection is NaN (NumPy raises, which a compiled program cannot); integers need
    `initial=`. It can also be combined elementwise with scalars and with selections by the
    same mask of arrays of the same shape (the result is such a selection again), and be
    written into an array of that shape with that mask (`x[m] += 1`, `y[m] = 2 * v[m]`):
    fixed-shape work over the whole array, kept where the mask is true. "The same mask" is
    the same traced value (or one computed the same way from the same values). Anything
    else is the data-dependent-shape error, naming both lines.
    """

    __slots__ = ("_given",)
    _what = "a selection by a traced boolean mask"
    _label = "x[mask]"

    def __init__(self, x: Tracer, mask: Tracer, site: str):
        full = bind1("broadcast_in_dim", mask, shape=x.shape, dims=tuple(range(mask.ndim)))
        rows = (0, -(x.ndim - mask.ndim + 1)) if mask.ndim == 1 else ()
        super().__init__(x, full, rows, 0, site)
        object.__setattr__(self, "_given", mask)

    def refusal(self, op: str) -> IndexError:
        """The error for using the selection as `op` would (its shape depends on the data)."""
        return _traced_mask_error(op, self._site)

    def selects_like(self, x: Tracer, mask: Tracer) -> bool:
        """Whether this selects from an array of x's shape with the same mask as `x[mask]`."""
        given = self._given
        return (
            self._x.shape == x.shape
            and given.shape == mask.shape
            and _same_value(given.value, mask.value, 8)
        )

    def _same(self, other, op: str):
        """The full-array value of `other` combined elementwise with this selection."""
        if isinstance(other, MaskedSelection):
            if not other.selects_like(self._x, self._given):
                raise self.refusal(op)
            return other._x
        if isinstance(other, _Selection) or np.ndim(other) != 0:
            raise self.refusal(op)
        return other

    def _like(self, full: Tracer) -> MaskedSelection:
        return MaskedSelection(full, self._given, self._site)

    def __repr__(self) -> str:
        return f"<x[mask] of a traced {self._x.dtype.name}{list(self._x.shape)} (at {self._site})>"


_SELECTION_REDUCTIONS = frozenset(
    {"sum", "prod", "mean", "var", "std", "any", "all", "max", "min", "amax", "amin"}
)


def _refuse_on_selection(name: str):
    def refuse(self, *args, **kwargs):
        raise self.refusal(name)

    return refuse


class TracedSlice(_Selection):
    """`x[a:b]` inside a loop body, where a bound is traced (a loop index: `x[:i]`,
    `A[i, j:i]`): the elements of one axis from a to b, as many as the data says.

    It is held over the axis's full extent with a mask (`a <= iota < b`, after NumPy's
    normalization of the bounds), so every use that keeps a fixed shape computes exactly
    NumPy's value: its reductions (`.sum()`, `.max()`, ..., as `_Selection`; the reduction
    may name that axis), elementwise arithmetic and NumPy ufuncs with scalars and with
    slices of the same bounds (the result is such a slice again), `a[:i] @ b[:i]` and
    `np.dot` of two 1-D slices of the same bounds, and a write into the same extent
    (`y[:i] = ...`, `y[:i] += ...`). Slices "of the same bounds" are taken with the same
    bound values (the same traced index, or equal integers) over axes of the same length.
    Any other use is an error that names the slice's line.
    """

    __slots__ = ("_key",)
    _what = "a slice with a traced bound"
    _label = "x[a:b]"

    def __init__(self, full: Tracer, axis: int, mask: Tracer, key: tuple, site: str):
        super().__init__(full, mask, (axis, axis - full.ndim), axis, site)
        object.__setattr__(self, "_key", key)

    def refusal(self, op: str) -> IndexError:
        return IndexError(
            f"{where(op)}: the slice at {self._site} has a traced bound, so its length is "
            "known only when the program runs, which a compiled program's arrays cannot "
            "have; in a loop, reduce it (.sum(), .max(), ...), combine it with scalars or "
            "slices of the same bounds (x[:i] * y[:i]), dot two of them (x[:i] @ y[:i]), or "
            "write it into the same extent (y[:i] = ...); else index with a traced integer "
            "array (x[i + arange(n)]) or take(x, i + arange(n), axis)"
        )

    def _same(self, other, op: str) -> Tracer:
        """The full-extent value of `other` combined elementwise with this slice."""
        if isinstance(other, TracedSlice):
            if not _same_bounds(self._key, other._key) or other._x.shape != self._x.shape:
                raise self.refusal(op)
            return other._x
        if isinstance(other, _Selection):
            raise self.refusal(op)
        if np.ndim(other) != 0:  # an array of fixed shape cannot match a traced length
            raise self.refusal(op)
        return other

    def _like(self, full: Tracer) -> TracedSlice:
        return TracedSlice(full, self._axis, self._mask, self._key, self._site)

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        name = f"np.{ufunc.__name__}"
        if method != "__call__" or kwargs or ufunc.nout != 1:
            raise self.refusal(name)
        fulls = [self._same(v, name) if v is not self else self._x for v in inputs]
        return self._like(ufunc(*fulls))

    def __array_function__(self, func, types, args, kwargs):
        name = func.__name__
        if name in ("dot", "vdot", "inner", "matmul") and len(args) == 2 and not kwargs:
            return _slice_dot(*args, f"np.{name}")
        if name == "copy":
            return self
        if name == "flip" and args and args[0] is self:
            axis = kwargs.get("axis", args[1] if len(args) > 1 else None)
            if len(args) > 2 or set(kwargs) - {"axis"}:
                raise self.refusal("np.flip")
            return self._flipped("np.flip", axis)
        return super().__array_function__(func, types, args, kwargs)

    def __getitem__(self, idx):
        if idx == slice(None, None, -1):
            return self._flipped("x[a:b][::-1]", 0)
        raise self.refusal("x[a:b][...]")

    def _flipped(self, op: str, axis) -> TracedSlice:
        """The slice reversed along its axis, at the same positions (so it combines with
        slices of the same bounds): position p holds x[lo + hi - 1 - p], a gather."""
        if axis is None and self._x.ndim == 1:
            axis = 0
        if axis not in self._axes:
            raise self.refusal(op)
        start, stop, n = self._key
        if n == 0:
            return self
        lo, hi = _slice_end(start, 0, n), _slice_end(stop, n, n)
        last = bind1("subtract", bind1("add", lo, hi), full((), 1, lo.dtype))
        positions = bind1("iota", shape=(n,), dtype=lo.dtype, dim=0)
        source = clip(bind1("subtract", _splat(last, n), positions), 0, n - 1)
        return self._like(take(self._x, source, axis=self._axis))

    def __matmul__(self, other):
        return _slice_dot(self, other, "matmul")

    def __rmatmul__(self, other):
        return _slice_dot(other, self, "matmul")

    def copy(self):
        return self  # values do not alias

    def astype(self, dtype, *args, **kwargs):
        return self._like(self._x.astype(dtype, *args, **kwargs))

    def __neg__(self):
        return self._like(-self._x)

    def __abs__(self):
        return self._like(abs(self._x))

    def __invert__(self):
        return self._like(~self._x)

    def __repr__(self) -> str:
        return f"<x[a:b] with a traced bound over {self._x.dtype.name}{list(self._x.shape)}>"


defer_ufuncs_to(TracedSlice)  # `2.0 * A[:i, k]`, `t * x[:i]` with a tracer t
defer_ufuncs_to(MaskedSelection)  # `2.0 * x[m]`, `t * v[m]`


def _binary(name: str, reflected: bool):
    def method(self: TracedSlice | MaskedSelection, other):
        full = self._same(other, f"{self._label} {name}")
        a, b = (full, self._x) if reflected else (self._x, full)
        return self._like(getattr(operator, name)(a, b))

    return method


for _kind in (TracedSlice, MaskedSelection):
    for _name in "add sub mul truediv floordiv mod pow and_ or_ xor lt le gt ge eq ne".split():
        _plain = _name.rstrip("_")
        setattr(_kind, f"__{_plain}__", _binary(_name, False))
        if _name not in ("lt", "le", "gt", "ge", "eq", "ne"):
            setattr(_kind, f"__r{_plain}__", _binary(_name, True))
            setattr(_kind, f"__i{_plain}__", _binary(_name, False))
MaskedSelection.__array_ufunc__ = TracedSlice.__array_ufunc__
MaskedSelection.astype = TracedSlice.astype
MaskedSelection.__neg__ = TracedSlice.__neg__
MaskedSelection.__abs__ = TracedSlice.__abs__
MaskedSelection.__invert__ = TracedSlice.__invert__


def _same_bounds(a: tuple, b: tuple) -> bool:
    """Whether two slices' bounds are the same values: each the same traced value (one
    computed the same way from the same values, as `i + 1` written twice is), or the same
    integer (or both left out), over axes of the same length."""

    def same(u, v):
        if isinstance(u, Tracer) and isinstance(v, Tracer):
            return u.shape == v.shape and _same_value(u.value, v.value, 8)
        if isinstance(u, Tracer) or isinstance(v, Tracer):
            return False
        return u == v

    return len(a) == len(b) and all(same(u, v) for u, v in zip(a, b, strict=True))


# The ops of an index expression (`2 * i + 1`, `n - i`, a cast) or of a mask that
# `_same_value` compares by their operands, and the attribute each one's result depends on.
_PURE_INDEX_OPS = {
    "stablehlo.add": None,
    "stablehlo.subtract": None,
    "stablehlo.multiply": None,
    "stablehlo.divide": None,
    "stablehlo.remainder": None,
    "stablehlo.power": None,
    "stablehlo.abs": None,
    "stablehlo.sign": None,
    "stablehlo.floor": None,
    "stablehlo.ceil": None,
    "stablehlo.sqrt": None,
    "stablehlo.exponential": None,
    "stablehlo.log": None,
    "stablehlo.negate": None,
    "stablehlo.convert": None,
    "stablehlo.maximum": None,
    "stablehlo.minimum": None,
    "stablehlo.clamp": None,
    "stablehlo.select": None,
    "stablehlo.constant": "value",
    "stablehlo.compare": "comparison_direction",
    # `row[i]` read twice: the same element of the same array.
    "stablehlo.dynamic_slice": "slice_sizes",
    "stablehlo.reshape": None,
    "stablehlo.slice": "start_indices",
    # Masks (`~m`, `(x > 0) & (x < 1)`) written twice.
    "stablehlo.not": None,
    "stablehlo.and": None,
    "stablehlo.or": None,
    "stablehlo.xor": None,
    "stablehlo.broadcast_in_dim": "broadcast_dimensions",
}


def _same_value(a: ir.Value, b: ir.Value, depth: int) -> bool:
    """Whether two SSA values are equal by construction: the same value, or results of
    the same pure op (same attribute) on values that are (looked at `depth` ops deep)."""
    if a == b:
        return True
    if depth == 0 or str(a.type) != str(b.type):
        return False
    oa, ob = a.owner, b.owner
    if isinstance(oa, ir.Block) or isinstance(ob, ir.Block):  # block arguments
        return False
    name = oa.operation.name
    if name != ob.operation.name or name not in _PURE_INDEX_OPS:
        return False
    attr = _PURE_INDEX_OPS[name]
    if attr is not None and str(oa.attributes[attr]) != str(ob.attributes[attr]):
        return False
    xs, ys = list(oa.operands), list(ob.operands)
    return len(xs) == len(ys) and all(_same_value(x, y, depth - 1) for x, y in zip(xs, ys))


def _slice_dot(a, b, op: str):
    """`a @ b` of two 1-D slices of the same bounds: the sum of their products there; or
    of a 2-D slice and an array, the slice's traced axis not the one summed over
    (`v @ A[:, i:]`, `A[i:, :] @ B`): the product over the full extent, a slice of the
    same bounds along the result's axis."""
    slices = [v for v in (a, b) if isinstance(v, TracedSlice)]
    first = slices[0]
    if len(slices) == 1 and first._x.ndim == 2:
        other = b if first is a else a
        free = 1 if first is b else 0  # the slice's axis that the product keeps
        if isinstance(other, _Selection) or first._axis != free or np.ndim(other) not in (1, 2):
            raise first.refusal(op)
        matmul = NUMPY_FUNCTIONS["matmul"]
        product = matmul(first._x, other) if first is a else matmul(other, first._x)
        axis = 0 if first is a else product.ndim - 1
        start, stop, n = first._key
        lo, hi = _slice_end(start, 0, n), _slice_end(stop, n, n)
        mask = bind1("broadcast_in_dim", _inside(lo, hi, n), shape=product.shape, dims=(axis,))
        return TracedSlice(product, axis, mask, first._key, first._site)
    if len(slices) != 2 or first._x.ndim != 1 or b._x.ndim != 1:
        raise first.refusal(op)
    other = first._same(b if first is a else a, op)
    if first._x.dtype == np.bool_:
        raise first.refusal(op)
    products = multiply(a._x, b._x) if first is a else multiply(a._x, other)
    return NUMPY_FUNCTIONS["sum"](products, where=first._mask)


def _traced_slice(op: str, x: Tracer, idx):
    """`x[idx]` as a `TracedSlice` when one slice of `idx` has a traced bound and this is a
    loop body; None when no slice bound is traced (the usual path). Other traced bounds
    keep the error of `_slice_bound`."""
    entries = idx if isinstance(idx, tuple) else (idx,)
    at = _traced_bounds(entries)
    if not at:
        return None
    window = _window(op, x, entries)
    if window is not None:
        return window
    if not in_loop_body():
        return None
    k = at[0]
    simple = all(
        isinstance(e, int | np.integer | slice) or (isinstance(e, Tracer) and e.ndim == 0)
        for e in entries
    )
    traced = entries[k]
    if len(at) > 1 or not simple or k >= x.ndim or traced.step not in (None, 1):
        return None  # the usual path raises its error
    n = x.shape[k]
    full = getitem(x, entries[:k] + (slice(None),) + entries[k + 1 :], op)
    axis = sum(isinstance(e, slice) for e in entries[:k])
    lo = _slice_end(traced.start, 0, n)
    hi = _slice_end(traced.stop, n, n)
    mask = bind1("broadcast_in_dim", _inside(lo, hi, n), shape=full.shape, dims=(axis,))
    key = (traced.start, traced.stop, n)
    return TracedSlice(full, axis, mask, key, user_site())


def _inside(lo: Tracer, hi: Tracer, n: int) -> Tracer:
    """`lo <= iota(n) < hi`: which positions of an axis of length n a slice keeps."""
    positions = bind1("iota", shape=(n,), dtype=lo.dtype, dim=0)
    return bind1("and", bind1("compare", positions, _splat(lo, n), direction="GE"),
                 bind1("compare", positions, _splat(hi, n), direction="LT"))  # fmt: skip


def _window(op: str, x: Tracer, entries: tuple) -> Tracer | None:
    """`x[i * s : i * s + k, ...]`: slices whose traced stop is their start plus a constant
    k are windows of size k, read with one `dynamic_slice` (as `lax.dynamic_slice` would);
    None when the index has another form. A start out of range is clamped, as every traced
    read is (a negative one wraps once first)."""
    box = _window_box(op, x, entries)
    if box is None:
        return None
    starts, sizes, kept = box
    y = bind1("dynamic_slice", x, *starts, sizes=sizes)
    return reshape_to(y, tuple(k for k, keep in zip(sizes, kept, strict=True) if keep))


def _window_update(op: str, x: Tracer, entries: tuple, v, mode: str) -> Tracer | None:
    """`x[i : i + k] = v` (or `+=`, ...) for the windows `_window` reads: one
    `dynamic_update_slice` (a start out of range is clamped: the window stays inside x)."""
    box = _window_box(op, x, entries)
    if box is None:
        return None
    starts, sizes, kept = box
    shape = tuple(k for k, keep in zip(sizes, kept, strict=True) if keep)
    value = reshape_to(_value(op, v, x.dtype, shape), sizes)
    if mode != "set":
        value = _combine(mode, bind1("dynamic_slice", x, *starts, sizes=sizes), value)
    return bind1("dynamic_update_slice", x, value, *starts)


def _window_box(op: str, x: Tracer, entries: tuple):
    """(starts, sizes, which axes the result keeps) of an index of windows, ints and
    static unit-step slices with at least one window; None for any other index."""
    if len(entries) > x.ndim or not all(
        isinstance(e, int | np.integer | slice) or (isinstance(e, Tracer) and e.ndim == 0)
        for e in entries
    ):
        return None
    entries = entries + (_FULL,) * (x.ndim - len(entries))
    dtype = np.dtype(np.int64)
    starts, sizes, kept = [], [], []
    for e, n in zip(entries, x.shape, strict=True):
        if isinstance(e, slice):
            if e.step not in (None, 1):
                return None
            if isinstance(e.start, Tracer) or isinstance(e.stop, Tracer):
                k = _constant_extent(e.start, e.stop)
                if k is None or k > n or not _stays_inside(e.start, k, n):
                    return None
                starts.append(_wrapped(e.start, n, dtype))
                sizes.append(k)
            else:
                lo, hi, _ = e.indices(n)
                starts.append(full((), lo, dtype))
                sizes.append(max(hi - lo, 0))
            kept.append(True)
        elif isinstance(e, Tracer):
            if not dtypes.is_integer(e.dtype):
                return None
            starts.append(_wrapped(e, n, dtype))
            sizes.append(1)
            kept.append(False)
        else:
            v = operator.index(e)
            if not -n <= v < n:
                raise _out_of_bounds(op, v, len(starts), n)
            starts.append(full((), v % n, dtype))
            sizes.append(1)
            kept.append(False)
    return starts, tuple(sizes), kept


def _stays_inside(start: Tracer, k: int, n: int) -> bool:
    """Whether a window `[start, start + k)` may be read as one `dynamic_slice`: outside a
    loop always (a start out of range is clamped, as documented); in a loop body when the
    start is known to keep the whole window inside the axis, where the slice is NumPy's.
    Otherwise the loop reads it as a slice with traced bounds (`TracedSlice`), which gives
    NumPy's shorter or empty slice at the ends."""
    if not in_loop_body():
        return True
    span = value_range(start.value)
    return span is not None and span[0] >= 0 and span[1] + k <= n


def value_range(v: ir.Value, depth: int = 12) -> tuple[int, int] | None:
    """[lo, hi] that the integer scalar `v` lies in, when known: a loop index over known
    bounds (`note_range`), constants, and sums, differences, products, negations, maxima,
    minima, clamps and casts of such values that cannot overflow their type; else None."""
    noted = noted_range(v)
    if noted is not None:
        return noted
    owner = v.owner
    if depth == 0 or isinstance(owner, ir.Block):
        return None
    name = owner.operation.name
    if name == "stablehlo.constant":
        c = _constant_int(v)
        return None if c is None else (c, c)
    rule = _RANGE_RULES.get(name)
    if rule is None:
        return None
    spans = [value_range(x, depth - 1) for x in owner.operands]
    if None in spans:
        return None
    lo, hi = rule(*spans)
    kind = str(ir.RankedTensorType(v.type).element_type)  # i64, ui32, i1, f32, ...
    integer = re.fullmatch(r"u?i(\d+)", kind)
    if integer is None:
        return None
    width = int(integer.group(1))
    if kind.startswith("u"):
        least, most = 0, 2**width - 1
    else:
        least, most = -(2 ** (width - 1)), 2 ** (width - 1) - 1
    return (lo, hi) if least <= lo and hi <= most else None


def _product_range(a, b):
    ends = [x * y for x in a for y in b]
    return min(ends), max(ends)


_RANGE_RULES = {
    "stablehlo.add": lambda a, b: (a[0] + b[0], a[1] + b[1]),
    "stablehlo.subtract": lambda a, b: (a[0] - b[1], a[1] - b[0]),
    "stablehlo.multiply": _product_range,
    "stablehlo.negate": lambda a: (-a[1], -a[0]),
    "stablehlo.maximum": lambda a, b: (max(a[0], b[0]), max(a[1], b[1])),
    "stablehlo.minimum": lambda a, b: (min(a[0], b[0]), min(a[1], b[1])),
    "stablehlo.clamp": lambda m, x, M: (
        min(max(x[0], m[0]), M[0]),
        min(max(x[1], m[1]), M[1]),
    ),
    "stablehlo.convert": lambda a: a,
    "stablehlo.reshape": lambda a: a,
    "stablehlo.broadcast_in_dim": lambda a: a,
}


def _constant_extent(start, stop) -> int | None:
    """k when `stop` is `start + k` for a constant k >= 0, as the index arithmetic built
    them (`i * 2` and `i * 2 + 2`, `i + 1` and `i + 4`, `i * k` and `(i + 1) * k`), else
    None: both as sums of constant multiples of the same values, which cancel."""
    if not (isinstance(start, Tracer) and isinstance(stop, Tracer)) or start.ndim or stop.ndim:
        return None
    terms_a, a = _linear(start.value, 8)
    terms_b, b = _linear(stop.value, 8)
    left = list(terms_b)
    for value, c in terms_a:  # stop - start: each of start's terms cancels one of stop's
        match = next((k for k, (w, d) in enumerate(left) if _same_value(value, w, 8)), None)
        if match is None:
            return None
        w, d = left[match]
        left[match] = (w, d - c)
    if any(d for _, d in left) or b < a:
        return None
    return b - a


def _linear(v: ir.Value, depth: int) -> tuple[list[tuple[ir.Value, int]], int]:
    """(terms, c) with v = sum(k * value for value, k in terms) + c: the sums, differences,
    negations and products by constants that built v, down to values of any other kind."""
    c = _constant_int(v)
    if c is not None:
        return [], c
    owner = v.owner
    if depth == 0 or isinstance(owner, ir.Block):
        return [(v, 1)], 0
    name = owner.operation.name
    operands = list(owner.operands)
    if name in ("stablehlo.add", "stablehlo.subtract"):
        (ta, ca), (tb, cb) = (_linear(x, depth - 1) for x in operands)
        sign = 1 if name == "stablehlo.add" else -1
        return ta + [(w, sign * k) for w, k in tb], ca + sign * cb
    if name == "stablehlo.negate":
        t, c = _linear(operands[0], depth - 1)
        return [(w, -k) for w, k in t], -c
    if name == "stablehlo.multiply":
        for x, y in (operands, operands[::-1]):
            k = _constant_int(y)
            if k is not None:
                t, c = _linear(x, depth - 1)
                return [(w, k * d) for w, d in t], k * c
    return [(v, 1)], 0


def _constant_int(v: ir.Value) -> int | None:
    owner = v.owner
    if isinstance(owner, ir.Block) or owner.operation.name != "stablehlo.constant":
        return None
    dense = ir.DenseElementsAttr(owner.attributes["value"])
    if not dense.is_splat or not str(dense.type.element_type).startswith(("i", "ui")):
        return None
    return ir.IntegerAttr(dense.get_splat_value()).value


def _traced_bounds(entries: tuple) -> list[int]:
    """The positions of the slices in an index tuple with a traced start or stop."""
    return [
        k
        for k, e in enumerate(entries)
        if isinstance(e, slice) and (isinstance(e.start, Tracer) or isinstance(e.stop, Tracer))
    ]


def _slice_end(v, default: int, n: int) -> Tracer:
    """A slice bound as Python normalizes it for an axis of length n: negative wraps once,
    then it is clamped into [0, n] (a traced 0-d int64)."""
    dtype = np.dtype(np.int64)
    if v is None:
        return full((), default, dtype)
    t = cast(asarray(v), dtype)
    size = full((), n, dtype)
    zero = full((), 0, dtype)
    wrapped = bind1("select", bind1("compare", t, zero, direction="LT"), bind1("add", t, size), t)
    return clip(wrapped, 0, n)


def _splat(t: Tracer, n: int) -> Tracer:
    return bind1("broadcast_in_dim", t, shape=(n,), dims=())


# Arithmetic, comparisons and conversions of a selection: each is the refusal.
for _dunder in ("__matmul__", "__rmatmul__", "__getitem__", "__float__", "__int__"):
    setattr(MaskedSelection, _dunder, _refuse_on_selection(f"x[mask] {_dunder.strip('_')}"))


# --- index arrays ----------------------------------------------------------------------------


def _index_dtype(parts: list) -> np.dtype:
    for p in parts:
        if isinstance(p, Tracer) and (
            p.dtype.itemsize == 8 or (dtypes.is_unsigned_int(p.dtype) and p.dtype.itemsize == 4)
        ):
            return np.dtype(np.int64)
        if isinstance(p, np.ndarray) and p.size and p.max() >= 2**31:
            return np.dtype(np.int64)
    return np.dtype(np.int32)


def _wrapped(t: Tracer, n: int, dtype: np.dtype) -> Tracer:
    """A traced index in `dtype`, negative values wrapped once as NumPy does (none when the
    index is known not to be negative: a loop index, whose reads and writes then use one
    value, which XLA needs to see that a read after a write is the written box)."""
    t = cast(t, dtype)
    if dtypes.is_unsigned_int(t.dtype) or n == 0:
        return t
    if t.ndim == 0:
        span = value_range(t.value)
        if span is not None and span[0] >= 0:
            return t
    negative = bind1("compare", t, full(t.shape, 0, dtype), direction="LT")
    return bind1("select", negative, bind1("add", t, full(t.shape, n, dtype)), t)


def _index_tensor(parts: list, sizes: list[int], batch: tuple[int, ...], places: list) -> Tracer:
    """Stacks index components into one `batch + (k,)` index array for gather/scatter.

    `parts[i]` is a static array or a tracer (an index into a dim of size `sizes[i]`) whose
    dims go to the batch positions `places[i]`.
    """
    dtype = _index_dtype(parts)
    if not any(isinstance(p, Tracer) for p in parts):
        cols = []
        for p, at in zip(parts, places, strict=True):
            shape = [1] * len(batch)
            for i, axis in enumerate(at):
                shape[axis] = p.shape[i]
            cols.append(np.broadcast_to(np.reshape(p, shape), batch))
        return constant(np.stack(cols, axis=-1).astype(dtype))
    cols = []
    for p, n, at in zip(parts, sizes, places, strict=True):
        t = _wrapped(p, n, dtype) if isinstance(p, Tracer) else constant(p, dtype)
        t = bind1("broadcast_in_dim", t, shape=batch, dims=tuple(at))
        cols.append(reshape_to(t, batch + (1,)))
    return concat(cols, len(batch))


def _broadcast_index_shapes(op: str, arrays: list) -> tuple[int, ...]:
    if any(isinstance(d, Dim) for a in arrays for d in a.shape):  # symbolic (issue 25)
        return broadcast_shapes(op, *(tuple(a.shape) for a in arrays))
    try:
        return tuple(np.broadcast_shapes(*(tuple(a.shape) for a in arrays)))
    except ValueError:
        shapes = " ".join(str(tuple(a.shape)) for a in arrays)
        raise IndexError(
            f"{where(op)}: shape mismatch: indexing arrays could not be broadcast together "
            f"with shapes {shapes}"
        ) from None


def _advanced_layout(p: _Parsed, op: str):
    """The advanced indices: (their index arrays, broadcast shape, block position in the result)."""
    adv = p.advanced
    parts = [np.asarray(e[1]) if e[0] == "int" else e[1] for e in (p.entries[d] for d in adv)]
    batch = _broadcast_index_shapes(op, parts)
    adjacent = adv == list(range(adv[0], adv[-1] + 1))
    # Adjacent advanced indices keep their place; otherwise their dims come first.
    block_at = sum(1 for d in range(adv[0]) if p.entries[d][0] == "slice") if adjacent else 0
    return parts, batch, block_at


# --- x[idx] ----------------------------------------------------------------------------------


def _apply_slices(x: Tracer, p: _Parsed, keep_ints: bool) -> Tracer:
    """One slice (+ reverse) for every static slice, and for static ints when `keep_ints`."""
    if symbolic_trace():
        return _apply_symbolic_slices(x, p, keep_ints)
    lo, hi, st, rev = [], [], [], []
    for d, e in enumerate(p.entries):
        n = x.shape[d]
        if e[0] == "slice":
            _, start, length, step = e
            if step < 0:
                first = start + (length - 1) * step if length else 0
                lo.append(first)
                hi.append(start + 1 if length else 0)
                st.append(-step)
                rev.append(d)
            else:
                lo.append(start if length else 0)
                hi.append(start + (length - 1) * step + 1 if length else 0)
                st.append(step)
        elif e[0] == "int" and keep_ints:
            lo.append(e[1])
            hi.append(e[1] + 1)
            st.append(1)
        else:
            lo.append(0)
            hi.append(n)
            st.append(1)
    x = slice_static(x, tuple(lo), tuple(hi), tuple(st))
    return reverse(x, tuple(rev))


def _apply_symbolic_slices(x: Tracer, p: _Parsed, keep_ints: bool) -> Tracer:
    """`_apply_slices` where a length or a bound is symbolic: one `symbolic_slice` whose
    result shape is each slice's length as `algebra.slice_indices` gives it (issue 25)."""
    lo, hi, st, rev, out = [], [], [], [], []
    for d, e in enumerate(p.entries):
        n = x.shape[d]
        if e[0] == "slice":
            _, start, length, step = e
            k = abs(step)
            span = length if k == 1 else algebra.dim_max(length * k - k + 1, 0)
            if step < 0:
                # The elements start, start - k, ...: the slice from the last of them up.
                first = algebra.dim_min(start + 1, start - (length - 1) * k)
                lo.append(first)
                hi.append(start + 1)
                rev.append(d)
            else:
                lo.append(start)
                hi.append(start + span)
            st.append(k)
            out.append(length)
        elif e[0] == "int" and keep_ints:
            lo.append(e[1])
            hi.append(e[1] + 1)
            st.append(1)
            out.append(1)
        else:
            lo.append(0)
            hi.append(n)
            st.append(1)
            out.append(n)
    if not (lo == [0] * x.ndim and tuple(hi) == x.shape and st == [1] * x.ndim):
        x = bind1(
            "symbolic_slice",
            x,
            start=tuple(lo),
            limit=tuple(hi),
            strides=tuple(st),
            shape=tuple(out),
        )
    return reverse(x, tuple(rev))


def getitem(x: Tracer, idx, op: str = "getitem") -> Tracer | _Selection:
    """`x[idx]` with NumPy's indexing rules (see the module docstring); a traced boolean
    mask over the leading axes gives a `MaskedSelection`, which only reductions take, and a
    slice with a traced bound in a loop body a `TracedSlice`."""
    if type(idx) is not int:
        if isinstance(idx, TracedSlice):
            # `x[cols[a:b]]`: read where the slice's indices point, over its full extent.
            if idx._x.ndim != 1 or not dtypes.is_integer(idx._x.dtype):
                raise idx.refusal(op)
            picked = getitem(x, idx._x, op)
            mask = bind1("broadcast_in_dim", idx._mask, shape=picked.shape, dims=(0,))
            return TracedSlice(picked, 0, mask, idx._key, idx._site)
        sliced = _traced_slice(op, x, idx)
        if sliced is not None:
            return sliced
    p = _parse(op, x.shape, idx)
    if p.mask is not None:
        start, mask = p.mask
        if (
            start != 0
            or len(p.entries) != x.ndim
            or any(
                e != ("slice", 0, n, 1)
                for e, n in zip(p.entries[mask.ndim :], x.shape[mask.ndim :], strict=True)
            )
        ):
            raise _traced_mask_error(op)
        return MaskedSelection(x, mask, user_site())
    scalars = [d for d, e in enumerate(p.entries) if e[0] == "scalar"]
    if scalars and not p.advanced and not symbolic_trace() and _unit_box(p):
        # `a[i, 1:-1]`: one `dynamic_slice` of the box. Slicing first and then picking the
        # row reads as a copy of every sliced array in XLA's CPU code when the slice is used
        # more than once (three 60x58 copies per row of a 60x60 stencil, in a loop).
        dtype = _index_dtype([p.entries[d][1] for d in scalars])
        if max(p.shape) >= 2**31:  # static starts past int32
            dtype = np.dtype(np.int64)
        y = reshape_to(x, p.shape)
        starts = [
            _wrapped(e[1], n, dtype) if e[0] == "scalar" else full((), e[1], dtype)
            for e, n in zip(p.entries, y.shape, strict=True)
        ]
        sizes = tuple(e[2] if e[0] == "slice" else 1 for e in p.entries)
        y = bind1("dynamic_slice", y, *starts, sizes=sizes)
        return reshape_to(
            y, tuple(n for n, e in zip(sizes, p.entries, strict=True) if e[0] == "slice")
        )
    y = _apply_slices(reshape_to(x, p.shape), p, keep_ints=not p.advanced)
    if not p.advanced:
        if scalars:
            dtype = _index_dtype([p.entries[d][1] for d in scalars])
            starts = [
                _wrapped(p.entries[d][1], y.shape[d], dtype) if d in scalars else full((), 0, dtype)
                for d in range(y.ndim)
            ]
            sizes = tuple(1 if d in scalars else n for d, n in enumerate(y.shape))
            y = bind1("dynamic_slice", y, *starts, sizes=sizes)
        return reshape_to(
            y, tuple(n for n, e in zip(y.shape, p.entries, strict=True) if e[0] == "slice")
        )
    adv = p.advanced
    parts, batch, block_at = _advanced_layout(p, op)
    rest = [d for d in range(y.ndim) if d not in adv]
    rank = len(batch) + len(rest)
    out_shape = [y.shape[d] for d in rest]
    out_shape[block_at:block_at] = batch
    if math.prod(batch) == 0:
        return full(tuple(out_shape), 0, y.dtype)
    offset_dims = tuple(i for i in range(rank) if not block_at <= i < block_at + len(batch))
    places = [tuple(range(len(batch) - np.ndim(q), len(batch))) for q in parts]
    indices = _index_tensor(parts, [y.shape[d] for d in adv], batch, places)
    return bind1(
        "gather",
        y,
        indices,
        offset_dims=offset_dims,
        collapsed=tuple(adv),
        slice_sizes=tuple(1 if d in adv else n for d, n in enumerate(y.shape)),
    )


# --- functional updates ----------------------------------------------------------------------


def _value(op: str, v, dtype: np.dtype, shape: tuple[int, ...]) -> Tracer:
    """`v` cast to `dtype` (as NumPy's setitem casts) and broadcast to `shape`."""
    if isinstance(v, list | tuple) and _contains_tracer(v):
        v = asarray(v)
    vshape = shape_of(v)
    stripped = vshape
    while len(stripped) > len(shape) and stripped[0] == 1:
        stripped = stripped[1:]
    ok = len(stripped) <= len(shape) and all(
        a in (1, b) for a, b in zip(reversed(stripped), reversed(shape), strict=False)
    )
    if not ok:
        raise ValueError(
            f"{where(op)}: could not broadcast input array from shape {vshape} into shape {shape}"
        )
    if stripped != vshape:
        v = reshape_to(v, stripped) if isinstance(v, Tracer) else np.reshape(v, stripped)
    if isinstance(v, Tracer):
        return broadcast_to_shape(cast(v, dtype), shape)
    return to_operand(op, v, dtype, shape)


_COMBINERS = {"add": add, "multiply": multiply, "min": minimum, "max": maximum}


def _combine(mode: str, old: Tracer, new: Tracer) -> Tracer:
    if mode == "set":
        return new
    return _COMBINERS[mode](old, new)


def _masked_update(op: str, x: Tracer, p: _Parsed, v, mode: str) -> Tracer:
    start, mask = p.mask
    if isinstance(v, MaskedSelection):  # `x[m] += 1`, `y[m] = v[m] * 2`: the same mask
        if start != 0 or p.shape != x.shape or not v.selects_like(x, mask):
            raise v.refusal(op)
        new = _combine(mode, x, _value(op, v._x, x.dtype, x.shape))
        return bind1("select", v._mask, new, x)
    others = [e for d, e in enumerate(p.entries) if not start <= d < start + mask.ndim]
    if (
        start != 0
        or any(e != ("slice", 0, n, 1) for e, n in zip(others, p.shape[mask.ndim :], strict=True))
        or p.shape != x.shape
    ):
        raise IndexError(
            f"{where(op)}: a traced boolean mask can only be the whole index (x[mask] = v, "
            "mask covering the leading axes); for other forms use aotkit.numpy.where"
        )
    rest = x.shape[mask.ndim :]
    if len(shape_of(v)) > len(rest) and any(s != 1 for s in shape_of(v)[: -len(rest) or None]):
        raise ValueError(
            f"{where(op)}: with a traced boolean mask the value must broadcast to {rest} (it "
            f"is used for every selected element), got shape {shape_of(v)}"
        )
    value = _value(op, v, x.dtype, rest)
    new = _combine(mode, x, broadcast_to_shape(value, x.shape))
    keep = bind1("broadcast_in_dim", mask, shape=x.shape, dims=tuple(range(mask.ndim)))
    return bind1("select", keep, new, x)


def _indexed_shape(p: _Parsed, op: str) -> tuple[list, tuple[int, ...]]:
    """The dims of `x[idx]`: ("slice", d) or ("block", i), and its shape."""
    dims = [("slice", d) for d, e in enumerate(p.entries) if e[0] == "slice"]
    if p.advanced:
        _, batch, block_at = _advanced_layout(p, op)
        dims[block_at:block_at] = [("block", i) for i in range(len(batch))]
    else:
        batch = ()
    shape = tuple(p.entries[d][2] if kind == "slice" else batch[d] for kind, d in dims)
    return dims, shape


def update(x: Tracer, idx, v, mode: str, op: str) -> Tracer:
    """`x` with `x[idx]` replaced by (or combined through `mode` with) `v`."""
    entries = idx if isinstance(idx, tuple) else (idx,)
    target = None
    if type(idx) is not int and _traced_bounds(entries):
        window = _window_update(op, x, entries, v, mode)
        if window is not None:
            return window
        target = _traced_slice(op, x, idx)
    if target is not None:
        # The write into a slice with a traced bound: over the full extent, where the mask
        # says, with `v` of the same bounds or a scalar.
        k = _traced_bounds(entries)[0]
        whole = entries[:k] + (_FULL,) + entries[k + 1 :]
        value = target._same(v, op)
        if mode != "set":
            value = _combine(mode, target._x, _value(op, value, x.dtype, target._x.shape))
        value = _value(op, value, x.dtype, target._x.shape)
        kept = bind1("select", target._mask, value, target._x)
        return update(x, whole, kept, "set", op)
    p = _parse(op, x.shape, idx)
    if p.mask is not None:
        return _masked_update(op, x, p, v, mode)
    y = reshape_to(x, p.shape)
    dims, shape = _indexed_shape(p, op)
    value = _value(op, v, x.dtype, shape)
    window = [d for kind, d in dims if kind == "slice" and p.entries[d][1:] == (0, y.shape[d], 1)]
    indexed = [d for d in range(y.ndim) if d not in window]
    if not indexed:
        return reshape_to(_combine(mode, y, value), x.shape)
    basic = all(e[0] == "int" or (e[0] == "slice" and e[3] in (1, -1)) for e in p.entries)
    if basic and not p.advanced:
        new = _update_window(y, p, value, mode)
    elif _scalar_window(p, y):
        new = _update_scalar_window(y, p, value, mode)
    else:
        new = _scatter(y, p, dims, value, mode, window, indexed, op)
    return reshape_to(new, x.shape)


def _update_window(y: Tracer, p: _Parsed, value: Tracer, mode: str) -> Tracer:
    """An update of one static box (unit-step slices and ints): `dynamic_update_slice`."""
    starts, sizes, rev = [], [], []
    for d, e in enumerate(p.entries):
        if e[0] == "int":
            starts.append(e[1])
            sizes.append(1)
        else:
            _, start, length, step = e
            if isinstance(start, Dim) or isinstance(length, Dim):  # symbolic (issue 25)
                starts.append(start if step > 0 else algebra.dim_min(start + 1, start - length + 1))
            else:
                starts.append(
                    start - length + 1 if step < 0 and length else (start if length else 0)
                )
            sizes.append(length)
            if step < 0:
                rev.append(d)
    if 0 in sizes:
        return y
    value = reverse(reshape_to(value, tuple(sizes)), tuple(rev))
    if mode != "set":
        limit = tuple(s + n for s, n in zip(starts, sizes, strict=True))
        value = _combine(mode, slice_static(y, tuple(starts), limit), value)
    return bind1(
        "dynamic_update_slice", y, value, *(full((), s, np.dtype(np.int64)) for s in starts)
    )


def _unit_box(p: _Parsed) -> bool:
    """Whether every entry of an index is an int, a traced scalar or a static unit-step
    slice that is not empty: one box."""
    return all(e[0] in ("int", "scalar") or (e[0] == "slice" and e[3] == 1 and e[2] > 0)
               for e in p.entries)  # fmt: skip


def _scalar_window(p: _Parsed, y: Tracer) -> bool:
    """Whether an index is one box with traced scalar starts (`a[i, j] = v`, `a[i, 1:-1] +=
    v`: traced scalars, ints and static unit-step slices, no arrays) in an array of static
    shape."""
    return not p.advanced and _unit_box(p) and all(isinstance(n, int) for n in y.shape)


def _update_scalar_window(y: Tracer, p: _Parsed, value: Tracer, mode: str) -> Tracer:
    """`a[i, j] = v` with traced scalars: one `dynamic_update_slice` of the box, rather than
    a scatter, which XLA's CPU backend turns into a select over the whole array (a full copy
    per update, in a loop per iteration). A traced index out of range after wrapping drops
    the update, as a scatter does: the box then writes back what the clamped box holds. An
    index known to be in range (a loop index over the axis) needs neither."""
    dtype = np.dtype(np.int64)
    starts, sizes, inside = [], [], None
    for e, n in zip(p.entries, y.shape, strict=True):
        if e[0] == "scalar":
            start = _wrapped(e[1], n, dtype)
            span = value_range(start.value)
            if span is None or span[0] < 0 or span[1] >= n:
                ok = bind1(
                    "and",
                    bind1("compare", start, full((), 0, dtype), direction="GE"),
                    bind1("compare", start, full((), n, dtype), direction="LT"),
                )
                inside = ok if inside is None else bind1("and", inside, ok)
            starts.append(start)
            sizes.append(1)
        elif e[0] == "int":
            starts.append(full((), e[1], dtype))
            sizes.append(1)
        else:
            starts.append(full((), e[1], dtype))
            sizes.append(e[2])
    sizes = tuple(sizes)
    new = reshape_to(value, sizes)
    if mode == "set" and inside is None:
        return bind1("dynamic_update_slice", y, new, *starts)
    old = bind1("dynamic_slice", y, *starts, sizes=sizes)
    new = _combine(mode, old, new)
    if inside is not None:
        keep = bind1("broadcast_in_dim", inside, shape=sizes, dims=())
        new = bind1("select", keep, new, old)
    return bind1("dynamic_update_slice", y, new, *starts)


def _scatter(y, p, dims, value, mode, window, indexed, op) -> Tracer:
    batch_dims = [i for i, (kind, d) in enumerate(dims) if not (kind == "slice" and d in window)]
    batch = tuple(value.shape[i] for i in batch_dims)
    if math.prod(batch) == 0:
        return y
    place_of = {dims[i]: b for b, i in enumerate(batch_dims)}
    parts, places = [], []
    if p.advanced:
        adv_parts, adv_batch, _ = _advanced_layout(p, op)
        first = place_of[("block", 0)]
        adv_of = dict(zip(p.advanced, adv_parts, strict=True))
    for d in indexed:
        e = p.entries[d]
        if e[0] == "slice":
            _, start, length, step = e
            parts.append(start + step * np.arange(length))
            places.append((place_of[("slice", d)],))
        elif p.advanced:
            q = adv_of[d]
            parts.append(q)
            nd = np.ndim(q) if not isinstance(q, Tracer) else q.ndim
            places.append(tuple(range(first + len(adv_batch) - nd, first + len(adv_batch))))
        else:
            parts.append(np.asarray(e[1]) if e[0] == "int" else e[1])
            places.append(())
    indices = _index_tensor(parts, [y.shape[d] for d in indexed], batch, places)
    window_dims = tuple(i for i, (kind, d) in enumerate(dims) if kind == "slice" and d in window)
    return bind1(
        "scatter", y, indices, value, window_dims=window_dims, inserted=tuple(indexed), combine=mode
    )


class _IndexUpdateRef:
    """`x.at[idx]`: functional updates of the elements `x[idx]`."""

    __slots__ = ("_x", "_idx")

    def __init__(self, x: Tracer, idx):
        self._x = x
        self._idx = idx

    def get(self) -> Tracer:
        return getitem(self._x, self._idx, "at[].get")

    def set(self, values) -> Tracer:
        return update(self._x, self._idx, values, "set", "at[].set")

    def add(self, values) -> Tracer:
        return update(self._x, self._idx, values, "add", "at[].add")

    def multiply(self, values) -> Tracer:
        return update(self._x, self._idx, values, "multiply", "at[].multiply")

    def min(self, values) -> Tracer:
        return update(self._x, self._idx, values, "min", "at[].min")

    def max(self, values) -> Tracer:
        return update(self._x, self._idx, values, "max", "at[].max")


class _IndexUpdateHelper:
    __slots__ = ("_x",)

    def __init__(self, x: Tracer):
        self._x = x

    def __getitem__(self, idx) -> _IndexUpdateRef:
        return _IndexUpdateRef(self._x, idx)


def _setitem(self: Tracer, idx, value) -> None:
    rebind("setitem", self, update(self, idx, value, "set", "setitem"))


Tracer.__getitem__ = getitem
Tracer.__setitem__ = _setitem
Tracer.at = property(_IndexUpdateHelper)


def _inplace(name: str):
    def method(self: Tracer, other):
        fn = NUMPY_FUNCTIONS.get(name)
        if fn is None:
            raise NotImplementedError(f"{where(name)}: aotkit.numpy has no {name!r} yet")
        r = fn(self, other)
        if r.shape != self.shape:
            raise ValueError(
                f"{where(name)}: non-broadcastable output operand with shape {self.shape} "
                f"doesn't match the broadcast shape {r.shape}"
            )
        if r.dtype != self.dtype:
            try:
                ok = np.can_cast(r.dtype, self.dtype, "same_kind")
            except TypeError:
                ok = True
            if not ok:
                raise TypeError(
                    f"{where(name)}: cannot cast ufunc {name!r} output from {r.dtype.name} to "
                    f"{self.dtype.name} with casting rule 'same_kind'; write x = x "
                    f"<op> y to get a new {r.dtype.name} array instead"
                )
            r = cast(r, self.dtype)
        rebind(name, self, r)
        return self

    method.__name__ = name
    return method


for _dunder, _name in [
    ("iadd", "add"),
    ("isub", "subtract"),
    ("imul", "multiply"),
    ("itruediv", "true_divide"),
    ("ifloordiv", "floor_divide"),
    ("imod", "remainder"),
    ("ipow", "power"),
    ("iand", "bitwise_and"),
    ("ior", "bitwise_or"),
    ("ixor", "bitwise_xor"),
    ("ilshift", "left_shift"),
    ("irshift", "right_shift"),
    ("imatmul", "matmul"),
]:
    setattr(Tracer, f"__{_dunder}__", _inplace(_name))


@export("copy")
def copy(a, order="K", subok=False):
    """A new tracer object with `a`'s value, so in-place updates of it leave `a` alone."""
    x = asarray(a)
    if not x._scope.open:
        _check_live(x, "copy")
    return same_value(x, current_scope())


Tracer.copy = lambda self, order="C": copy(self)


def _fill(self: Tracer, value) -> None:
    shape = shape_of(value)
    if math.prod(shape) != 1:
        raise ValueError(f"{where('fill')}: the fill value must be a scalar, got shape {shape}")
    if isinstance(value, Tracer):
        value = reshape_to(value, ())
    elif dtypes.weak_kind(value) is None:
        value = np.reshape(np.asarray(value), ())
    rebind("fill", self, _value("fill", value, self.dtype, self.shape))


Tracer.fill = _fill


def _in_place_target(op: str, dst) -> Tracer:
    if not isinstance(dst, Tracer):
        raise TypeError(
            f"{where(op)}: the array to write into must be a traced array, got "
            f"{type(dst).__name__}; aotkit can only rebind tracers in place"
        )
    return dst


@export("copyto")
def copyto(dst, src, casting="same_kind", **kwargs):
    # NumPy's keyword is `where`, which would hide the error-prefix helper here.
    mask = kwargs.pop("where", True)
    if kwargs:
        raise TypeError(f"{where('copyto')}: unexpected keyword arguments {sorted(kwargs)}")
    dst = _in_place_target("copyto", dst)
    if casting not in ("no", "equiv", "safe", "same_kind", "unsafe"):
        raise ValueError(
            f"{where('copyto')}: casting must be one of 'no', 'equiv', 'safe', 'same_kind' "
            f"or 'unsafe', got {casting!r}"
        )
    kind = dtypes.weak_kind(src)
    if isinstance(src, Tracer):
        src_dtype = src.dtype
    elif kind is not None:
        src_dtype = dtypes.result_type(dst.dtype, kind)
    else:
        src_dtype = np.asarray(src).dtype
    if casting != "unsafe" and not np.can_cast(src_dtype, dst.dtype, casting):
        raise TypeError(
            f"{where('copyto')}: cannot cast array data from {src_dtype.name} to "
            f"{dst.dtype.name} according to the rule {casting!r}; pass casting='unsafe'"
        )
    value = _value("copyto", src, dst.dtype, dst.shape)
    if mask is not True:
        keep = _value("copyto", mask, np.dtype(np.bool_), dst.shape)
        value = bind1("select", keep, value, dst)
    rebind("copyto", dst, value)


@export("fill_diagonal")
def fill_diagonal(a, val, wrap=False):
    a = _in_place_target("fill_diagonal", a)
    if a.ndim < 2:
        raise ValueError(f"{where('fill_diagonal')}: array must be at least 2-d, got {a!r}")
    if a.ndim == 2:
        step = a.shape[1] + 1
        end = a.size if wrap else min(a.size, a.shape[1] * a.shape[1])
    else:
        if len(set(a.shape)) != 1:
            raise ValueError(
                f"{where('fill_diagonal')}: all dimensions of input must be of equal length, "
                f"got shape {a.shape}"
            )
        step = 1 + int(np.cumprod(a.shape[:-1]).sum())
        end = a.size
    positions = np.arange(0, end, step)
    if isinstance(val, Tracer) or np.ndim(val):
        # NumPy cycles through the values along the diagonal.
        v = asarray(val)
        v = reshape_to(v, (v.size,))
        if v.size == 0:
            raise ValueError(f"{where('fill_diagonal')}: val is empty; pass at least one value")
        v = take(v, np.arange(len(positions)) % v.size)
    else:
        v = val
    flat = reshape_to(a, (a.size,))
    rebind(
        "fill_diagonal", a, reshape_to(update(flat, positions, v, "set", "fill_diagonal"), a.shape)
    )


# --- take ------------------------------------------------------------------------------------


@export("take")
def take(a, indices, axis=None, out=None, mode=None):
    """NumPy's `take`. Static indices out of range raise IndexError as in NumPy (the default
    mode). Traced indices cannot raise when the program runs: by default they follow the
    rule of `x[i]` (a negative index wraps once, then reads clamp into range); an explicit
    `mode='raise'` is refused, since it cannot be honoured."""
    no_out("take", out)
    explicit_raise = mode == "raise"
    mode = "raise" if mode is None else mode
    if mode not in ("raise", "wrap", "clip"):
        raise ValueError(
            f"{where('take')}: clipmode must be one of 'clip', 'raise', or 'wrap', got {mode!r}"
        )
    x, axis = ravel_or_axis("take", asarray(a), axis)
    n = x.shape[axis]
    kind, ind = _classify("take", indices)
    if kind in ("none", "ellipsis", "slice", "mask", "tmask"):
        raise IndexError(f"{where('take')}: indices must be an integer array, got {indices!r:.60}")
    if mode != "raise" and n == 0:
        raise IndexError(f"{where('take')}: cannot do a non-empty take from an empty axis")
    if kind in ("int", "array"):
        if mode == "wrap":
            ind = np.mod(ind, n)
        elif mode == "clip":
            ind = np.clip(ind, 0, n - 1)
    elif mode == "wrap":
        ind = remainder(ind, n)
    elif mode == "clip":
        ind = clip(ind, 0, n - 1)
    elif explicit_raise:
        raise ValueError(
            f"{where('take')}: mode='raise' cannot check traced indices (a program cannot "
            "raise when it runs); pass mode='clip' or mode='wrap', or leave mode out to get "
            "the rule of x[i] (a negative index wraps once, then indices clamp into range)"
        )
    return getitem(x, (_FULL,) * axis + (ind,), "take")


Tracer.take = lambda self, indices, axis=None, out=None, mode=None: take(
    self, indices, axis, out, mode
)


@export("ix_")
def ix_(*args):
    """Open-mesh index arrays: `x[ix_(rows, cols)]` selects the rows x cols block."""
    out = []
    for i, a in enumerate(args):
        kind, v = _classify("ix_", a)
        if kind == "tmask":
            raise _traced_mask_error("ix_")
        if kind == "mask" and v.ndim == 1:
            v = np.nonzero(v)[0]
        elif kind not in ("array", "tarray") or np.ndim(v) != 1:
            raise ValueError(f"{where('ix_')}: cross index must be 1 dimensional, got {a!r:.60}")
        shape = (1,) * i + (-1,) + (1,) * (len(args) - i - 1)
        out.append(
            v.reshape(shape)
            if isinstance(v, np.ndarray)
            else reshape_to(v, tuple(v.size if d == -1 else d for d in shape))
        )
    return tuple(out)


@export("take_along_axis")
def take_along_axis(arr, indices, axis=-1):
    x = asarray(arr)
    kind, ind = _classify("take_along_axis", indices)
    if kind not in ("int", "array", "scalar", "tarray"):
        raise IndexError(
            f"{where('take_along_axis')}: `indices` must be an integer array, got {indices!r:.60}"
        )
    ind_ndim = np.ndim(ind) if not isinstance(ind, Tracer) else ind.ndim
    if axis is None:
        if ind_ndim != 1:
            raise ValueError(
                f"{where('take_along_axis')}: when axis=None, `indices` must have a single "
                f"dimension, got {ind_ndim}"
            )
        x = reshape_to(x, (x.size,))
        axis = 0
    if ind_ndim != x.ndim:
        raise ValueError(
            f"{where('take_along_axis')}: `indices` and `arr` must have the same number of "
            f"dimensions, got {ind_ndim} and {x.ndim}"
        )
    axis = normalize_axis("take_along_axis", axis, x.ndim)
    fancy = tuple(
        ind if d == axis else np.arange(n).reshape([n if i == d else 1 for i in range(x.ndim)])
        for d, n in enumerate(x.shape)
    )
    return getitem(x, fancy, "take_along_axis")
