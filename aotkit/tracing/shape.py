"""Trace stage, shape family: layout functions over StableHLO's static-shape ops.

Everything here moves, copies or selects elements by positions known at trace time:
broadcast, reshape, transpose, slice, reverse, concatenate and pad are the primitives,
and NumPy's layout functions (stack, split, tile, repeat, pad, roll, rot90, diag, tril,
eye, meshgrid, kron, ...) are built from them with NumPy 2's names, defaults and result
dtypes. The primitives are strict (the caller gives valid parameters); the NumPy-level
functions validate user input first and raise errors that name the user's call site.
"""

from __future__ import annotations

import math

import numpy as np
from jaxlib.mlir import ir
from jaxlib.mlir.dialects import stablehlo

from aotkit import _context, dtypes
from aotkit.symbolic import algebra
from aotkit.symbolic.algebra import Dim
from aotkit.tracing.core import (
    RuleContext,
    Tracer,
    bind1,
    export,
    full,
    register,
    register_direct,
    set_transposed,
    traced_size_error,
    where,
)
from aotkit.tracing.elementwise import asarray, multiply, remainder
from aotkit.tracing.hlo import (
    _is_int,
    broadcast_shapes,
    broadcast_to_shape,
    cast,
    concat,
    gather_along,
    insert_axes,
    no_out,
    normalize_axes,
    normalize_axis,
    ravel_or_axis,
    reshape_to,
    reverse,
    slice_static,
)

# --- primitives ------------------------------------------------------------------------------


@_context.cached
def _i64_array(values: tuple[int, ...]) -> ir.DenseI64ArrayAttr:
    return ir.DenseI64ArrayAttr.get(list(values))


register_direct(
    {"broadcast_in_dim": "stablehlo.broadcast_in_dim"},
    shape=lambda a, *, shape, dims: [(tuple(shape), a[1])],
    attributes=lambda *, shape, dims: {"broadcast_dimensions": _i64_array(tuple(dims))},
)
register_direct({"reshape": "stablehlo.reshape"}, shape=lambda a, *, shape: [(tuple(shape), a[1])])
register_direct(
    {"transpose": "stablehlo.transpose"},
    shape=lambda a, *, perm: [(tuple(a[0][p] for p in perm), a[1])],
    attributes=lambda *, perm: {"permutation": _i64_array(tuple(perm))},
)


def _slice_shape(a, *, start, limit, strides):
    return [
        (
            tuple(
                algebra.dim_max(0, -(-(hi - lo) // st))
                for lo, hi, st in zip(start, limit, strides, strict=True)
            ),
            a[1],
        )
    ]


@register("slice", shape=_slice_shape)
def _lower_slice(ctx: RuleContext, x, *, start, limit, strides):
    return [stablehlo.slice(x, list(start), list(limit), list(strides))]


@register("reverse", shape=lambda a, *, dims: [a])
def _lower_reverse(ctx: RuleContext, x, *, dims):
    return [stablehlo.reverse(x, list(dims))]


def _concatenate_shape(*avals, dim):
    shape = list(avals[0][0])
    shape[dim] = sum(a[0][dim] for a in avals)
    return [(tuple(shape), avals[0][1])]


@register("concatenate", shape=_concatenate_shape)
def _lower_concatenate(ctx: RuleContext, *xs, dim):
    return [stablehlo.concatenate(list(xs), dim)]


def _pad_shape(a, v, *, low, high):
    return [(tuple(n + lo + hi for n, lo, hi in zip(a[0], low, high, strict=True)), a[1])]


@register("pad", shape=_pad_shape)
def _lower_pad(ctx: RuleContext, x, value, *, low, high):
    return [stablehlo.pad(x, value, list(low), list(high), [0] * len(low))]


def slice_axis(x: Tracer, axis: int, start: int, stop: int, step: int = 1) -> Tracer:
    """`x[..., start:stop:step, ...]` on one axis with Python slice semantics (any step)."""
    n = x.shape[axis]
    start, stop, step = slice(start, stop, step).indices(n)
    length = len(range(start, stop, step))
    lo = [0] * x.ndim
    hi = list(x.shape)
    st = [1] * x.ndim
    if step > 0:
        lo[axis], hi[axis], st[axis] = start, start + max(length - 1, 0) * step + 1, step
        if length == 0:
            hi[axis] = start
    else:
        # Select the same elements in increasing order, then reverse them.
        first = start + (length - 1) * step if length else 0
        lo[axis], hi[axis], st[axis] = first, (start + 1) if length else 0, -step
    out = slice_static(x, tuple(lo), tuple(hi), tuple(st))
    if step < 0 and length > 1:
        out = reverse(out, (axis,))
    return out


def take_static(x: Tracer, axis: int, idx: np.ndarray) -> Tracer:
    """`x` at the static in-range positions `idx` along `axis`, as slices where it can.

    Index patterns from pad, roll and repeat are a few runs of consecutive, reversed or
    repeated positions; each run becomes one slice (reverse, broadcast) and the runs are
    concatenated. Irregular patterns fall back to one gather.
    """
    idx = np.asarray(idx, np.int64).ravel()
    n = len(idx)
    if n == 0:
        return slice_axis(x, axis, 0, 0)
    if n == x.shape[axis] and (idx == np.arange(n)).all():
        return x
    runs = []
    i = 0
    while i < n:
        j = i + 1
        step = int(idx[j] - idx[i]) if j < n else 1
        if step not in (-1, 0, 1):
            step = 1
        else:
            while j < n and idx[j] - idx[j - 1] == step:
                j += 1
        runs.append((int(idx[i]), step, j - i))
        i = j
    if len(runs) > 16:
        return gather_along(x, axis, idx)
    parts = []
    for first, step, length in runs:
        if step == 1:
            parts.append(slice_axis(x, axis, first, first + length))
        elif step == -1:
            parts.append(
                slice_axis(x, axis, first, first - length if first >= length else None, -1)
            )
        else:
            one = slice_axis(x, axis, first, first + 1)
            shape = list(one.shape)
            shape[axis] = length
            parts.append(
                bind1("broadcast_in_dim", one, shape=tuple(shape), dims=tuple(range(x.ndim)))
            )
    return concat(parts, axis)


_MAX_DIM = 2**63 - 1


def _check_dims(op: str, shape: tuple[int, ...]) -> tuple[int, ...]:
    """Refuses result shapes MLIR cannot hold (sizes are signed 64-bit)."""
    if any(type(d) is int and d > _MAX_DIM for d in shape):
        raise ValueError(
            f"{where(op)}: the result shape {shape} has a dimension over 2**63 - 1; "
            "use smaller sizes"
        )
    return shape


def _asarray(a) -> Tracer:
    return asarray(a)


def _static_int(op: str, name: str, v, size: bool = False) -> int:
    """`v` as a Python int (or a symbolic dimension); `size`: it sets the shape of the
    result, which a traced value is refused for in aotkit's one wording."""
    if isinstance(v, Dim):  # a symbolic dimension: known at trace time as an expression
        return v
    if size and isinstance(v, Tracer):
        raise traced_size_error(op, name)
    if not _is_int(v):
        what = "traced" if isinstance(v, Tracer) else f"{v!r}"
        raise TypeError(
            f"{where(op)}: {name} must be a static Python int, got {what}; shapes are fixed at "
            "trace time"
        )
    return int(v)


def _static_ints(op: str, name: str, v, size: bool = False) -> tuple[int, ...]:
    if _is_int(v):
        return (int(v),)
    if isinstance(v, Tracer):
        _static_int(op, name, v, size)
    if isinstance(v, np.ndarray) and v.ndim == 0:
        return (_static_int(op, name, v[()], size),)
    try:
        seq = tuple(v)
    except TypeError:
        seq = (v,)
    return tuple(_static_int(op, name, e, size) for e in seq)


def _arrays(op: str, arrays) -> list[Tracer]:
    if isinstance(arrays, Tracer):
        return [arrays[i] for i in range(arrays.shape[0])] if arrays.ndim else [arrays]
    if isinstance(arrays, np.ndarray):
        return [_asarray(a) for a in arrays]
    try:
        items = list(arrays)
    except TypeError:
        raise TypeError(
            f"{where(op)}: expected a sequence of arrays, got {type(arrays).__name__}"
        ) from None
    return [_asarray(a) for a in items]


def _check_casting(op: str, xs: list[Tracer], dtype: np.dtype, casting: str) -> None:
    for x in xs:
        if casting != "unsafe" and not np.can_cast(x.dtype, dtype, casting):
            raise TypeError(
                f"{where(op)}: cannot cast array data from {x.dtype.name} to {dtype.name} "
                f"according to the rule {casting!r}; pass casting='unsafe' or cast first"
            )


def _common_dtype(op: str, xs: list[Tracer], dtype, casting: str) -> list[Tracer]:
    if casting not in ("no", "equiv", "safe", "same_kind", "unsafe"):
        raise ValueError(
            f"{where(op)}: casting must be one of 'no', 'equiv', 'safe', 'same_kind' or "
            f"'unsafe', got {casting!r}"
        )
    if dtype is None:
        target = dtypes.result_type(*(x.dtype for x in xs))
    else:
        target = dtypes.canonicalize(dtype, where=where(op))
        _check_casting(op, xs, target, casting)
    return [cast(x, target) for x in xs]


# --- reshaping -------------------------------------------------------------------------------


def _shape_text(shape: tuple) -> str:
    """`shape` as the user wrote it, a traced size shown as `<traced>`."""
    parts = ["<traced>" if isinstance(d, Tracer) else repr(d) for d in shape]
    return f"({', '.join(parts)}{',' if len(parts) == 1 else ''})"


def _resolve_newshape(op: str, size: int, shape) -> tuple[int, ...]:
    if isinstance(shape, int | Dim):
        shape = (shape,)
    shape = tuple(shape)
    if isinstance(size, Dim) or any(isinstance(d, Dim) for d in shape):
        return _resolve_symbolic(op, size, shape)
    for d in shape:
        if isinstance(d, Tracer):
            raise traced_size_error(op, f"a size in shape {_shape_text(shape)}")
        if not isinstance(d, int):
            raise TypeError(
                f"{where(op)}: shape {shape!r} must hold Python ints (static sizes); "
                "shapes are fixed at trace time"
            )
    unknown = [i for i, d in enumerate(shape) if d == -1]
    if len(unknown) > 1 or any(d < -1 for d in shape):
        raise ValueError(f"{where(op)}: bad shape {shape}; at most one -1, other sizes >= 0")
    if unknown:
        known = math.prod(d for d in shape if d != -1)
        if known == 0 or size % known:
            raise ValueError(f"{where(op)}: cannot reshape array of size {size} into shape {shape}")
        shape = tuple(size // known if d == -1 else d for d in shape)
    if math.prod(shape) != size:
        raise ValueError(f"{where(op)}: cannot reshape array of size {size} into shape {shape}")
    return shape


def _resolve_symbolic(op: str, size, shape: tuple) -> tuple:
    """`_resolve_newshape` where the size or the shape has symbolic dimensions: -1 is the
    exact quotient of the polynomials (issue 25)."""
    for d in shape:
        if isinstance(d, Tracer):
            raise traced_size_error(op, f"a size in shape {_shape_text(shape)}")
        if not isinstance(d, Dim) and not _is_int(d):
            raise TypeError(
                f"{where(op)}: shape {shape!r} must hold Python ints or symbolic dimensions "
                "(static sizes); shapes are fixed at trace time"
            )
    unknown = [i for i, d in enumerate(shape) if not isinstance(d, Dim) and d == -1]
    if len(unknown) > 1 or any(not isinstance(d, Dim) and d < -1 for d in shape):
        raise ValueError(f"{where(op)}: bad shape {shape}; at most one -1, other sizes >= 0")
    if unknown:
        known = math.prod(d for i, d in enumerate(shape) if i not in unknown)
        quotient = algebra.divide_exact(size, known)
        if quotient is None:
            hint = algebra.divisibility_hint(size, known)
            how = (
                algebra.HOW_TO_DECIDE.format(example=hint).replace(
                    "make the dimension static", "give the shape without -1"
                )
                if hint
                else "give the shape without -1"
            )
            raise ValueError(
                f"{where(op)}: cannot infer -1 of shape {shape} from size {size}: {known} does "
                f"not divide {size} for every value of the symbols; {how}"
            )
        shape = tuple(quotient if i in unknown else d for i, d in enumerate(shape))
    if math.prod(shape) != size:
        raise ValueError(
            f"{where(op)}: cannot reshape array of size {size} into shape {shape}; the sizes "
            "must be the same expression for every value of the symbols"
        )
    return shape


def _c_order(op: str, order) -> None:
    if order not in ("C", "A", "K"):
        raise NotImplementedError(f"{where(op)}: only order='C' is supported, got {order!r}")


@export("reshape")
def reshape(a, shape=None, order="C", *, newshape=None, copy=None):
    if shape is None:
        shape = newshape
    _c_order("reshape", order)
    a = _asarray(a)
    return reshape_to(a, _resolve_newshape("reshape", a.size, shape))


@export("ravel")
def ravel(a, order="C"):
    _c_order("ravel", order)
    a = _asarray(a)
    return reshape_to(a, (a.size,))


def _flatten(self, order="C"):
    _c_order("flatten", order)
    return reshape_to(self, (self.size,))


Tracer.flatten = _flatten


@export("transpose", "permute_dims")
def transpose(a, axes=None):
    a = _asarray(a)
    if axes is None:
        perm = tuple(reversed(range(a.ndim)))
    else:
        perm = tuple(normalize_axis("transpose", ax, a.ndim) for ax in axes)
        if sorted(perm) != list(range(a.ndim)):
            raise ValueError(
                f"{where('transpose')}: axes {tuple(axes)} are not a permutation of "
                f"{a.ndim} dimensions"
            )
    if perm == tuple(range(a.ndim)):
        return a
    r = bind1("transpose", a, perm=perm)
    set_transposed(r, (r.value, a, perm))  # a product of `r` contracts `a` itself (linalg.py)
    return r


@export("matrix_transpose")
def matrix_transpose(x, /):
    x = _asarray(x)
    if x.ndim < 2:
        raise ValueError(
            f"{where('matrix_transpose')}: input must be at least 2-dimensional, got shape "
            f"{x.shape}"
        )
    return swapaxes(x, -1, -2)


@export("swapaxes")
def swapaxes(a, axis1, axis2):
    a = _asarray(a)
    i = normalize_axis("swapaxes", axis1, a.ndim)
    j = normalize_axis("swapaxes", axis2, a.ndim)
    perm = list(range(a.ndim))
    perm[i], perm[j] = perm[j], perm[i]
    return transpose(a, perm)


@export("moveaxis")
def moveaxis(a, source, destination):
    a = _asarray(a)
    src = normalize_axes("moveaxis", source, a.ndim, "source")
    dst = normalize_axes("moveaxis", destination, a.ndim, "destination")
    if len(src) != len(dst):
        raise ValueError(
            f"{where('moveaxis')}: `source` and `destination` arguments must have the same "
            f"number of elements, got {len(src)} and {len(dst)}"
        )
    order = [n for n in range(a.ndim) if n not in src]
    for d, s in sorted(zip(dst, src, strict=True)):
        order.insert(d, s)
    return transpose(a, order)


@export("expand_dims")
def expand_dims(a, axis):
    a = _asarray(a)
    axes = normalize_axes(
        "expand_dims", axis, a.ndim + len(_static_ints("expand_dims", "axis", axis))
    )
    return insert_axes(a, axes)


@export("squeeze")
def squeeze(a, axis=None):
    a = _asarray(a)
    if axis is None:
        axes = tuple(i for i, d in enumerate(a.shape) if d == 1)
    else:
        axes = normalize_axes("squeeze", axis, a.ndim)
        for ax in axes:
            if a.shape[ax] != 1:
                raise ValueError(
                    f"{where('squeeze')}: cannot select an axis to squeeze out which has size "
                    f"not equal to one (axis {ax} of shape {a.shape})"
                )
    return reshape_to(a, tuple(d for i, d in enumerate(a.shape) if i not in axes))


@export("broadcast_to")
def broadcast_to(array, shape):
    array = _asarray(array)
    shape = _static_ints("broadcast_to", "shape", shape, size=True)
    if any(d < 0 for d in shape):
        raise ValueError(f"{where('broadcast_to')}: all elements of shape {shape} must be >= 0")
    _check_dims("broadcast_to", shape)
    out = broadcast_shapes("broadcast_to", array.shape, shape)
    if out != shape:
        raise ValueError(
            f"{where('broadcast_to')}: cannot broadcast shape {array.shape} to {shape}"
        )
    return broadcast_to_shape(array, shape)


@export("broadcast_arrays")
def broadcast_arrays(*args, subok=False):
    xs = [_asarray(a) for a in args]
    shape = broadcast_shapes("broadcast_arrays", *(x.shape for x in xs))
    return tuple(broadcast_to_shape(x, shape) for x in xs)


def _atleast(op: str, arys, fix):
    out = tuple(fix(_asarray(a)) for a in arys)
    return out[0] if len(out) == 1 else out


@export("atleast_1d")
def atleast_1d(*arys):
    return _atleast("atleast_1d", arys, lambda x: reshape_to(x, (1,)) if x.ndim == 0 else x)


def _to_2d(x: Tracer) -> Tracer:
    return reshape_to(x, (1,) * (2 - x.ndim) + x.shape) if x.ndim < 2 else x


def _to_3d(x: Tracer) -> Tracer:
    if x.ndim == 0:
        return reshape_to(x, (1, 1, 1))
    if x.ndim == 1:
        return reshape_to(x, (1, x.shape[0], 1))
    if x.ndim == 2:
        return reshape_to(x, x.shape + (1,))
    return x


@export("atleast_2d")
def atleast_2d(*arys):
    return _atleast("atleast_2d", arys, _to_2d)


@export("atleast_3d")
def atleast_3d(*arys):
    return _atleast("atleast_3d", arys, _to_3d)


# --- joining and splitting -------------------------------------------------------------------


def _concatenate(op: str, xs: list[Tracer], axis, dtype, casting) -> Tracer:
    if not xs:
        raise ValueError(f"{where(op)}: need at least one array to concatenate")
    if axis is None:
        xs = [reshape_to(x, (x.size,)) for x in xs]
        axis = 0
    if any(x.ndim == 0 for x in xs):
        raise ValueError(f"{where(op)}: zero-dimensional arrays cannot be concatenated")
    ndim = xs[0].ndim
    axis = normalize_axis(op, axis, ndim)
    for i, x in enumerate(xs[1:], 1):
        if x.ndim != ndim:
            raise ValueError(
                f"{where(op)}: all the input arrays must have the same number of dimensions, "
                f"but the array at index 0 has {ndim} dimension(s) and the array at index {i} "
                f"has {x.ndim} dimension(s)"
            )
        for d in range(ndim):
            if d != axis and x.shape[d] != xs[0].shape[d]:
                raise ValueError(
                    f"{where(op)}: all the input array dimensions except for the "
                    f"concatenation axis must match exactly, but along dimension {d}, the "
                    f"array at index 0 has size {xs[0].shape[d]} and the array at index {i} "
                    f"has size {x.shape[d]}"
                )
    xs = _common_dtype(op, xs, dtype, casting)
    return concat(xs, axis)


@export("concatenate", "concat")
def concatenate(arrays, /, axis=0, out=None, *, dtype=None, casting="same_kind"):
    no_out("concatenate", out)
    return _concatenate("concatenate", _arrays("concatenate", arrays), axis, dtype, casting)


@export("stack")
def stack(arrays, axis=0, out=None, *, dtype=None, casting="same_kind"):
    no_out("stack", out)
    xs = _arrays("stack", arrays)
    if not xs:
        raise ValueError(f"{where('stack')}: need at least one array to stack")
    for x in xs[1:]:
        if x.shape != xs[0].shape:
            raise ValueError(
                f"{where('stack')}: all input arrays must have the same shape, got "
                f"{xs[0].shape} and {x.shape}"
            )
    axis = normalize_axis("stack", axis, xs[0].ndim + 1)
    return _concatenate("stack", [insert_axes(x, (axis,)) for x in xs], axis, dtype, casting)


@export("unstack")
def unstack(x, /, *, axis=0):
    x = _asarray(x)
    if x.ndim == 0:
        raise ValueError(f"{where('unstack')}: input array must be at least 1-d")
    axis = normalize_axis("unstack", axis, x.ndim)
    rest = x.shape[:axis] + x.shape[axis + 1 :]
    return tuple(reshape_to(slice_axis(x, axis, i, i + 1), rest) for i in range(x.shape[axis]))


@export("hstack")
def hstack(tup, *, dtype=None, casting="same_kind"):
    xs = [atleast_1d(x) for x in _arrays("hstack", tup)]
    axis = 0 if xs and xs[0].ndim == 1 else 1
    return _concatenate("hstack", xs, axis, dtype, casting)


@export("vstack")
def vstack(tup, *, dtype=None, casting="same_kind"):
    xs = [_to_2d(x) for x in _arrays("vstack", tup)]
    return _concatenate("vstack", xs, 0, dtype, casting)


@export("dstack")
def dstack(tup):
    xs = [_to_3d(x) for x in _arrays("dstack", tup)]
    return _concatenate("dstack", xs, 2, None, "same_kind")


@export("column_stack")
def column_stack(tup):
    xs = [
        reshape_to(x, (x.shape[0], 1)) if x.ndim == 1 else _to_2d(x)
        for x in _arrays("column_stack", tup)
    ]
    return _concatenate("column_stack", xs, 1, None, "same_kind")


def _split(op: str, ary, indices_or_sections, axis, equal: bool) -> list[Tracer]:
    x = _asarray(ary)
    if x.ndim == 0:
        raise ValueError(f"{where(op)}: cannot split a 0-d array")
    axis = normalize_axis(op, axis, x.ndim)
    n = x.shape[axis]
    if _is_int(indices_or_sections) or isinstance(indices_or_sections, Tracer):
        sections = _static_int(op, "indices_or_sections", indices_or_sections, size=True)
        if sections <= 0:
            raise ValueError(f"{where(op)}: number sections must be larger than 0, got {sections}")
        if sections > max(n, 1) * 1024:
            raise ValueError(
                f"{where(op)}: {sections} sections of {n} elements would make mostly empty "
                "arrays; use fewer sections"
            )
        if equal and n % sections:
            raise ValueError(
                f"{where(op)}: array split does not result in an equal division ({n} elements "
                f"into {sections} sections); use array_split for unequal sections"
            )
        each, extra = divmod(n, sections)
        sizes = [each + 1] * extra + [each] * (sections - extra)
        points = [0, *np.cumsum(sizes).tolist()]
    else:
        points = [0, *_static_ints(op, "indices_or_sections", indices_or_sections, size=True), n]
    return [slice_axis(x, axis, lo, hi) for lo, hi in zip(points[:-1], points[1:], strict=True)]


@export("split")
def split(ary, indices_or_sections, axis=0):
    return _split("split", ary, indices_or_sections, axis, equal=True)


@export("array_split")
def array_split(ary, indices_or_sections, axis=0):
    return _split("array_split", ary, indices_or_sections, axis, equal=False)


for _name, _axis, _min in [("hsplit", 1, 1), ("vsplit", 0, 2), ("dsplit", 2, 3)]:

    def _directional(ary, indices_or_sections, _name=_name, _axis=_axis, _min=_min):
        x = _asarray(ary)
        if x.ndim < _min:
            raise ValueError(
                f"{where(_name)}: only works on arrays of {_min} or more dimensions, got "
                f"shape {x.shape}"
            )
        axis = 0 if (_name == "hsplit" and x.ndim == 1) else _axis
        return _split(_name, x, indices_or_sections, axis, equal=True)

    _directional.__name__ = _name
    export(_name)(_directional)


@export("append")
def append(arr, values, axis=None):
    x, v = _asarray(arr), _asarray(values)
    if axis is None:
        return _concatenate("append", [ravel(x), ravel(v)], 0, None, "same_kind")
    return _concatenate("append", [x, v], axis, None, "same_kind")


@export("delete")
def delete(arr, obj, axis=None):
    x, axis = ravel_or_axis("delete", _asarray(arr), axis)
    if isinstance(obj, Tracer) or (
        isinstance(obj, list | tuple) and any(isinstance(o, Tracer) for o in obj)
    ):
        raise traced_size_error("delete", "obj (the indices deleted)")
    try:
        kept = np.delete(np.arange(x.shape[axis]), obj)
    except (IndexError, ValueError, TypeError) as e:
        raise type(e)(f"{where('delete')}: {e}") from None
    return take_static(x, axis, kept)


# --- repeating and padding -------------------------------------------------------------------


@export("tile")
def tile(A, reps):
    x = _asarray(A)
    reps = _static_ints("tile", "reps", reps, size=True)
    if any(r < 0 for r in reps):
        raise ValueError(f"{where('tile')}: reps {reps} must be non-negative")
    ndim = max(len(reps), x.ndim)
    reps = (1,) * (ndim - len(reps)) + reps
    x = reshape_to(x, (1,) * (ndim - x.ndim) + x.shape)
    if all(r == 1 for r in reps):
        return x
    wide = tuple(v for r, d in zip(reps, x.shape, strict=True) for v in (r, d))
    out = _check_dims("tile", tuple(r * d for r, d in zip(reps, x.shape, strict=True)))
    b = bind1(
        "broadcast_in_dim", x, shape=_check_dims("tile", wide), dims=tuple(range(1, 2 * ndim, 2))
    )
    return reshape_to(b, out)


@export("repeat")
def repeat(a, repeats, axis=None):
    x, axis = ravel_or_axis("repeat", _asarray(a), axis)
    if isinstance(repeats, Tracer):
        raise traced_size_error("repeat", "repeats")
    reps = np.asarray(repeats)
    if reps.dtype.kind not in "iu":
        raise TypeError(f"{where('repeat')}: repeats must be integers, got {reps.dtype.name}")
    if (reps < 0).any():
        raise ValueError(f"{where('repeat')}: repeats may not contain negative values: {repeats!r}")
    n = x.shape[axis]
    if reps.ndim == 0 or reps.size == 1:
        r = int(reps.reshape(-1)[0]) if reps.size else 0
        if r == 1:
            return x
        wide = _check_dims("repeat", x.shape[: axis + 1] + (r,) + x.shape[axis + 1 :])
        _check_dims("repeat", (n * r,))
        dims = tuple(d if d <= axis else d + 1 for d in range(x.ndim))
        b = bind1("broadcast_in_dim", x, shape=wide, dims=dims)
        return reshape_to(b, x.shape[:axis] + (n * r,) + x.shape[axis + 1 :])
    if reps.ndim != 1 or reps.shape[0] != n:
        raise ValueError(
            f"{where('repeat')}: repeats of shape {reps.shape} cannot broadcast to the "
            f"{n} elements of axis {axis}"
        )
    _check_dims("repeat", (int(reps.astype(object).sum()),))
    return take_static(x, axis, np.repeat(np.arange(n), reps))


_PAD_KWARGS = {
    "constant": {"constant_values"},
    "edge": set(),
    "wrap": set(),
    "reflect": {"reflect_type"},
    "symmetric": {"reflect_type"},
    "empty": set(),
}


def _pad_pairs(op: str, widths, ndim: int) -> np.ndarray:
    if isinstance(widths, Tracer):
        raise TypeError(f"{where(op)}: pad_width is traced; pass static Python ints")
    arr = np.asarray(widths)
    if arr.dtype.kind not in "iu":
        raise TypeError(f"{where(op)}: pad_width must be of integral type, got {widths!r}")
    try:
        pairs = np.broadcast_to(arr, (ndim, 2))
    except ValueError:
        raise ValueError(
            f"{where(op)}: pad_width {widths!r} cannot broadcast to ({ndim}, 2) (one "
            "(before, after) pair per axis)"
        ) from None
    if (pairs < 0).any():
        raise ValueError(f"{where(op)}: index can't contain negative values: {widths!r}")
    return pairs.astype(np.int64)


@export("pad")
def pad(array, pad_width, mode="constant", **kwargs):
    x = _asarray(array)
    if not isinstance(mode, str) or mode not in _PAD_KWARGS:
        raise NotImplementedError(
            f"{where('pad')}: mode {mode!r} is not supported; supported modes: "
            f"{', '.join(_PAD_KWARGS)}"
        )
    unknown = set(kwargs) - _PAD_KWARGS[mode]
    if unknown:
        raise ValueError(
            f"{where('pad')}: unsupported keyword arguments for mode {mode!r}: {sorted(unknown)}"
        )
    pairs = _pad_pairs("pad", pad_width, x.ndim)
    _check_dims(
        "pad", tuple(n + lo + hi for n, (lo, hi) in zip(x.shape, pairs.tolist(), strict=True))
    )
    if x.ndim == 0 or not pairs.any():
        return x
    if mode in ("constant", "empty"):
        return _pad_constant(x, pairs, kwargs.get("constant_values", 0))
    if kwargs.get("reflect_type", "even") != "even":
        raise NotImplementedError(
            f"{where('pad')}: reflect_type={kwargs['reflect_type']!r} is not supported; only 'even'"
        )
    for axis, (before, after) in enumerate(pairs.tolist()):
        if before == after == 0:
            continue
        n = x.shape[axis]
        if n == 0:
            raise ValueError(
                f"{where('pad')}: can't extend empty axis {axis} using modes other than "
                "'constant' or 'empty'"
            )
        # NumPy's own pad of the positions gives the source position of every output.
        x = take_static(x, axis, np.pad(np.arange(n), (before, after), mode=mode))
    return x


def _pad_constant(x: Tracer, pairs: np.ndarray, values) -> Tracer:
    if isinstance(values, Tracer):
        if values.ndim:
            raise NotImplementedError(
                f"{where('pad')}: a traced constant_values must be a scalar, got {values!r}"
            )
        return bind1(
            "pad",
            x,
            cast(values, x.dtype),
            low=tuple(pairs[:, 0].tolist()),
            high=tuple(pairs[:, 1].tolist()),
        )
    vals = np.asarray(values)
    try:
        vals = np.broadcast_to(vals, (x.ndim, 2))
    except ValueError:
        raise ValueError(
            f"{where('pad')}: constant_values {values!r} cannot broadcast to ({x.ndim}, 2)"
        ) from None
    vals = vals.astype(x.dtype) if vals.dtype != object else vals
    if (vals == vals.flat[0]).all():
        v = full((), vals.flat[0], x.dtype)
        return bind1("pad", x, v, low=tuple(pairs[:, 0].tolist()), high=tuple(pairs[:, 1].tolist()))
    # Different values per side: NumPy pads one axis after the other, so corners take the
    # value of the last axis; concatenating in axis order does the same.
    for axis, ((before, after), (vb, va)) in enumerate(
        zip(pairs.tolist(), vals.tolist(), strict=True)
    ):
        parts = []
        for width, v in ((before, vb), (0, None), (after, va)):
            if v is None:
                parts.append(x)
            elif width:
                shape = list(x.shape)
                shape[axis] = width
                parts.append(full(tuple(shape), v, x.dtype))
        x = concat(parts, axis)
    return x


# --- reordering ------------------------------------------------------------------------------


@export("flip")
def flip(m, axis=None):
    x = _asarray(m)
    axes = tuple(range(x.ndim)) if axis is None else normalize_axes("flip", axis, x.ndim)
    return reverse(x, axes)


@export("fliplr")
def fliplr(m):
    x = _asarray(m)
    if x.ndim < 2:
        raise ValueError(f"{where('fliplr')}: input must be >= 2-d, got shape {x.shape}")
    return reverse(x, (1,))


@export("flipud")
def flipud(m):
    x = _asarray(m)
    if x.ndim < 1:
        raise ValueError(f"{where('flipud')}: input must be >= 1-d, got a 0-d array")
    return reverse(x, (0,))


@export("roll")
def roll(a, shift, axis=None):
    x = _asarray(a)
    if axis is None:
        return reshape_to(roll(reshape_to(x, (x.size,)), shift, 0), x.shape)
    if isinstance(shift, Tracer):
        return _roll_traced(x, shift, axis)
    axes = _static_ints("roll", "axis", axis)
    shifts = _static_ints("roll", "shift", shift)
    if len(axes) != len(shifts) and 1 not in (len(axes), len(shifts)):
        raise ValueError(
            f"{where('roll')}: 'shift' and 'axis' should be scalars or 1D sequences of the "
            f"same length, got {shift!r} and {axis!r}"
        )
    total = {}
    for ax, s in np.broadcast(np.array(axes), np.array(shifts)):
        ax = normalize_axis("roll", int(ax), x.ndim)
        total[ax] = total.get(ax, 0) + int(s)
    for ax, s in total.items():
        n = x.shape[ax]
        if n and s % n:
            x = take_static(x, ax, np.roll(np.arange(n), s))
    return x


def _roll_traced(x: Tracer, shift: Tracer, axis) -> Tracer:
    if shift.ndim or not dtypes.is_integer(shift.dtype):
        raise TypeError(
            f"{where('roll')}: a traced shift must be a 0-d integer array, got {shift!r}; "
            "pass a Python int (or a tuple of them) for several axes"
        )
    ax = normalize_axis("roll", _static_int("roll", "axis", axis), x.ndim)
    n = x.shape[ax]
    if n == 0:
        return x
    # Rolling by s reads the doubled array [x, x] from n - (s mod n), a window of size n.
    wide = shift.dtype.itemsize == 8 or (shift.dtype.kind == "u" and shift.dtype.itemsize == 4)
    index = np.dtype(np.int64 if wide else np.int32)
    s = remainder(cast(shift, index), n)
    start = bind1("subtract", full((), n, index), s)
    zero = full((), 0, index)
    starts = [start if d == ax else zero for d in range(x.ndim)]
    return bind1("dynamic_slice", concat([x, x], ax), *starts, sizes=x.shape)


@export("rot90")
def rot90(m, k=1, axes=(0, 1)):
    x = _asarray(m)
    axes = tuple(axes)
    if len(axes) != 2:
        raise ValueError(f"{where('rot90')}: len(axes) must be 2, got axes={axes}")
    if axes[0] == axes[1] or abs(axes[0] - axes[1]) == x.ndim:
        raise ValueError(f"{where('rot90')}: axes must be different, got axes={axes}")
    if not (-x.ndim <= axes[0] < x.ndim and -x.ndim <= axes[1] < x.ndim):
        raise ValueError(f"{where('rot90')}: axes={axes} out of range for array of ndim={x.ndim}")
    k = _static_int("rot90", "k", k) % 4
    a0, a1 = axes[0] % x.ndim, axes[1] % x.ndim
    if k == 0:
        return x
    if k == 2:
        return reverse(x, (a0, a1))
    perm = list(range(x.ndim))
    perm[a0], perm[a1] = perm[a1], perm[a0]
    if k == 1:
        return transpose(reverse(x, (a1,)), perm)
    return reverse(transpose(x, perm), (a1,))


# --- matrices --------------------------------------------------------------------------------


def _iota(shape: tuple[int, ...], dim: int) -> Tracer:
    return bind1("iota", shape=shape, dtype=np.dtype(np.int64), dim=dim)


def _diagonal_mask(rows: int, cols: int, k: int, direction: str) -> Tracer:
    """`col - row <direction> k` over a (rows, cols) grid."""
    diff = bind1("subtract", _iota((rows, cols), 1), _iota((rows, cols), 0))
    return bind1("compare", diff, full((rows, cols), k, diff.dtype), direction=direction)


def _triangle(op: str, m, k, direction: str) -> Tracer:
    x = _asarray(m)
    k = _static_int(op, "k", k)
    if x.ndim == 0:
        raise ValueError(f"{where(op)}: input must be at least 1-d, got a 0-d array")
    if x.ndim == 1:
        x = broadcast_to_shape(x, (x.shape[0], x.shape[0]))
    rows, cols = x.shape[-2:]
    keep = broadcast_to_shape(_diagonal_mask(rows, cols, k, direction), x.shape)
    return bind1("select", keep, x, full(x.shape, 0, x.dtype))


@export("tril")
def tril(m, k=0):
    return _triangle("tril", m, k, "LE")


@export("triu")
def triu(m, k=0):
    return _triangle("triu", m, k, "GE")


@export("eye")
def eye(N, M=None, k=0, dtype=float, order="C", *, device=None, like=None):
    n = _static_int("eye", "N", N, size=True)
    m = n if M is None else _static_int("eye", "M", M, size=True)
    k = _static_int("eye", "k", k)
    if n < 0 or m < 0:
        raise ValueError(f"{where('eye')}: negative dimensions are not allowed: N={n}, M={m}")
    dtype = dtypes.canonicalize(dtype, where=where("eye"))
    _check_dims("eye", (n, m))
    return cast(_diagonal_mask(n, m, k, "EQ"), dtype)


@export("identity")
def identity(n, dtype=None, *, like=None):
    return eye(n, dtype=float if dtype is None else dtype)


@export("diagonal")
def diagonal(a, offset=0, axis1=0, axis2=1):
    x = _asarray(a)
    if x.ndim < 2:
        raise ValueError(
            f"{where('diagonal')}: diag requires an array of at least two dimensions, got "
            f"shape {x.shape}"
        )
    offset = _static_int("diagonal", "offset", offset)
    i = normalize_axis("diagonal", axis1, x.ndim)
    j = normalize_axis("diagonal", axis2, x.ndim)
    if i == j:
        raise ValueError(f"{where('diagonal')}: axis1 and axis2 cannot be the same ({axis1})")
    x = transpose(x, [d for d in range(x.ndim) if d not in (i, j)] + [i, j])
    rows, cols = x.shape[-2:]
    r0, c0 = (0, offset) if offset >= 0 else (-offset, 0)
    n = max(0, min(rows - r0, cols - c0))
    batch = x.shape[:-2]
    x = slice_static(
        x,
        (0,) * len(batch) + (min(r0, rows), min(c0, cols)),
        batch + (min(r0 + n, rows), min(c0 + n, cols)),
    )
    # The diagonal of an n x n block is every (n+1)-th element of its flattening.
    flat = reshape_to(x, batch + (n * n,))
    return slice_static(flat, (0,) * (len(batch) + 1), flat.shape, (1,) * len(batch) + (n + 1,))


@export("diag")
def diag(v, k=0):
    x = _asarray(v)
    k = _static_int("diag", "k", k)
    if x.ndim == 2:
        return diagonal(x, k)
    if x.ndim != 1:
        raise ValueError(f"{where('diag')}: input must be 1- or 2-d, got shape {x.shape}")
    n = x.shape[0] + abs(k)
    padded = bind1("pad", x, full((), 0, x.dtype), low=(0,), high=(abs(k),))
    # Row i holds v[i] on the k >= 0 diagonals; column j holds v[j] below the main one.
    values = bind1("broadcast_in_dim", padded, shape=(n, n), dims=(0,) if k >= 0 else (1,))
    return bind1("select", _diagonal_mask(n, n, k, "EQ"), values, full((n, n), 0, x.dtype))


@export("meshgrid")
def meshgrid(*xi, copy=True, sparse=False, indexing="xy"):
    if indexing not in ("xy", "ij"):
        raise ValueError(
            f"{where('meshgrid')}: valid values for `indexing` are 'xy' and 'ij', got {indexing!r}"
        )
    xs = [ravel(x) for x in xi]
    ndim = len(xs)
    out = []
    for i, x in enumerate(xs):
        shape = [1] * ndim
        shape[i] = x.shape[0]
        if indexing == "xy" and ndim > 1 and i < 2:
            shape[0], shape[1] = shape[1], shape[0]
        out.append(reshape_to(x, tuple(shape)))
    if not sparse:
        out = list(broadcast_arrays(*out))
    return tuple(out)


@export("outer")
def outer(a, b, out=None):
    no_out("outer", out)
    x, y = ravel(a), ravel(b)
    return multiply(reshape_to(x, (x.shape[0], 1)), reshape_to(y, (1, y.shape[0])))


@export("kron")
def kron(a, b):
    x, y = _asarray(a), _asarray(b)
    if x.ndim == 0 or y.ndim == 0:
        return multiply(x, y)
    nd = max(x.ndim, y.ndim)
    xs = (1,) * (nd - x.ndim) + x.shape
    ys = (1,) * (nd - y.ndim) + y.shape
    x = reshape_to(x, tuple(v for d in xs for v in (d, 1)))
    y = reshape_to(y, tuple(v for d in ys for v in (1, d)))
    prod = multiply(x, y)
    return reshape_to(prod, tuple(p * q for p, q in zip(xs, ys, strict=True)))
