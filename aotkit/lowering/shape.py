"""Trace stage, shape family: broadcast, reshape, transpose (StableHLO's static-shape ops).

The primitives are strict (the caller gives the result shape); the NumPy-level functions
validate user input first and raise errors that name the user's call site.
"""

from __future__ import annotations

import math

from jaxlib.mlir.dialects import stablehlo

from aotkit.lowering.core import RuleContext, Tracer, bind1, export, register, where

# --- primitives ------------------------------------------------------------------------------


@register("broadcast_in_dim", shape=lambda a, *, shape, dims: [(tuple(shape), a[1])])
def _lower_broadcast_in_dim(ctx: RuleContext, x, *, shape, dims):
    return [stablehlo.broadcast_in_dim(ctx.out_type(), x, list(dims))]


@register("reshape", shape=lambda a, *, shape: [(tuple(shape), a[1])])
def _lower_reshape(ctx: RuleContext, x, *, shape):
    return [stablehlo.reshape(ctx.out_type(), x)]


@register("transpose", shape=lambda a, *, perm: [(tuple(a[0][p] for p in perm), a[1])])
def _lower_transpose(ctx: RuleContext, x, *, perm):
    return [stablehlo.transpose(x, list(perm))]


# --- helpers used by every family ------------------------------------------------------------


def broadcast_shapes(op: str, *shapes: tuple[int, ...]) -> tuple[int, ...]:
    """NumPy broadcasting of shapes; ValueError naming the op and the shapes otherwise."""
    if len(shapes) == 1:
        return shapes[0]
    if all(s == shapes[0] for s in shapes):
        return shapes[0]
    ndim = max(len(s) for s in shapes)
    out = []
    for i in range(ndim):
        size = 1
        for s in shapes:
            d = s[i - ndim + len(s)] if i >= ndim - len(s) else 1
            if d != 1:
                if size not in (1, d):
                    listed = " and ".join(str(tuple(s)) for s in shapes)
                    raise ValueError(
                        f"{where(op)}: shapes {listed} cannot broadcast; NumPy broadcasting "
                        "aligns trailing dimensions, which must be equal or 1 (reshape or "
                        "expand_dims an operand first)"
                    )
                size = d
        out.append(size)
    return tuple(out)


def broadcast_to_shape(x: Tracer, shape: tuple[int, ...]) -> Tracer:
    """Broadcasts a tracer whose shape is known to broadcast to `shape`."""
    if x.shape == shape:
        return x
    dims = tuple(range(len(shape) - x.ndim, len(shape)))
    return bind1("broadcast_in_dim", x, shape=shape, dims=dims)


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


# --- NumPy-level functions -------------------------------------------------------------------


def _resolve_newshape(op: str, size: int, shape) -> tuple[int, ...]:
    if isinstance(shape, int):
        shape = (shape,)
    shape = tuple(shape)
    for d in shape:
        if isinstance(d, Tracer) or not isinstance(d, int):
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


@export("reshape")
def reshape(a, shape=None, order="C", *, newshape=None, copy=None):
    from aotkit.lowering.elementwise import asarray

    if shape is None:
        shape = newshape
    if order != "C":
        raise NotImplementedError(f"{where('reshape')}: only order='C' is supported")
    a = asarray(a)
    return reshape_to(a, _resolve_newshape("reshape", a.size, shape))


@export("transpose", "permute_dims")
def transpose(a, axes=None):
    from aotkit.lowering.elementwise import asarray

    a = asarray(a)
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
    return bind1("transpose", a, perm=perm)


@export("broadcast_to")
def broadcast_to(array, shape):
    from aotkit.lowering.elementwise import asarray

    array = asarray(array)
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    out = broadcast_shapes("broadcast_to", array.shape, shape)
    if out != shape:
        raise ValueError(
            f"{where('broadcast_to')}: cannot broadcast shape {array.shape} to {shape}"
        )
    return broadcast_to_shape(array, shape)
