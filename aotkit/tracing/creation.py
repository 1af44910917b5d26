"""Trace stage, array creation: zeros/ones/full/empty (and `_like`), arange, linspace.

Sizes are static (shapes are fixed at trace time). Filled arrays are splat constants, one
op however large; ranges use `stablehlo.iota` instead of embedding every element.
"""

from __future__ import annotations

import math

import numpy as np
from jaxlib.mlir.dialects import stablehlo

from aotkit import dtypes
from aotkit.symbolic import algebra
from aotkit.symbolic.algebra import Dim
from aotkit.tracing.core import (
    RuleContext,
    Tracer,
    bind1,
    export,
    full,
    register,
    traced_size_error,
    where,
)
from aotkit.tracing.elementwise import asarray
from aotkit.tracing.hlo import broadcast_to_shape, cast


@register("iota", shape=lambda *, shape, dtype, dim: [(tuple(shape), dtype)])
def _lower_iota(ctx: RuleContext, *, shape, dtype, dim):
    return [stablehlo.iota(ctx.out_type(), dim)]


def iota(shape: tuple[int, ...], dtype: np.dtype, dim: int = 0) -> Tracer:
    return bind1("iota", shape=tuple(shape), dtype=dtype, dim=dim)


def _shape_arg(op: str, shape) -> tuple[int, ...]:
    if isinstance(shape, int | np.integer | Dim) and not isinstance(shape, bool):
        shape = (shape,)
    if isinstance(shape, Tracer):
        raise traced_size_error(op, "shape")
    try:
        shape = tuple(shape)
    except TypeError:
        shape = None
    if shape is not None and any(isinstance(d, Tracer) for d in shape):
        raise traced_size_error(op, "a size in the shape")
    if shape is None or any(
        not isinstance(d, Dim)
        and (isinstance(d, bool) or not isinstance(d, int | np.integer) or d < 0)
        for d in shape
    ):
        raise TypeError(
            f"{where(op)}: shape must be a non-negative int or a tuple of them (static); "
            "shapes are fixed at trace time"
        )
    return tuple(d if isinstance(d, Dim) else int(d) for d in shape)


def _dtype_arg(op: str, dtype, default) -> np.dtype:
    return dtypes.canonicalize(default if dtype is None else dtype, where=where(op))


def _fill(op: str, shape, value, dtype) -> Tracer:
    shape = _shape_arg(op, shape)
    if isinstance(value, Tracer):
        return broadcast_to_shape(cast(value, dtype), shape)
    return full(shape, value, dtype)


@export("zeros")
def zeros(shape, dtype=None, order="C", *, device=None):
    return _fill("zeros", shape, 0, _dtype_arg("zeros", dtype, np.float64))


@export("ones")
def ones(shape, dtype=None, order="C", *, device=None):
    return _fill("ones", shape, 1, _dtype_arg("ones", dtype, np.float64))


# Uninitialized memory has no meaning in a value semantics IR; empty is zeros.
export("empty")(zeros)


@export("full")
def full_(shape, fill_value, dtype=None, order="C", *, device=None):
    if dtype is None:
        dtype = asarray_dtype(fill_value)
    return _fill("full", shape, fill_value, _dtype_arg("full", dtype, None))


def asarray_dtype(value) -> np.dtype:
    if isinstance(value, Tracer):
        return value.dtype
    kind = dtypes.weak_kind(value)
    if kind is not None:
        return dtypes.result_type(kind)
    return dtypes.canonicalize(np.asarray(value).dtype, where="full")


def _like(op: str, a, dtype, shape) -> tuple[tuple[int, ...], np.dtype]:
    a_shape = a.shape if isinstance(a, Tracer) else np.shape(a)
    a_dtype = a.dtype if isinstance(a, Tracer) else asarray_dtype(a)
    return (
        tuple(a_shape) if shape is None else _shape_arg(op, shape),
        a_dtype if dtype is None else dtypes.canonicalize(dtype, where=where(op)),
    )


@export("zeros_like")
def zeros_like(a, dtype=None, order="K", subok=True, shape=None, *, device=None):
    shape, dtype = _like("zeros_like", a, dtype, shape)
    return full(shape, 0, dtype)


@export("ones_like")
def ones_like(a, dtype=None, order="K", subok=True, shape=None, *, device=None):
    shape, dtype = _like("ones_like", a, dtype, shape)
    return full(shape, 1, dtype)


export("empty_like")(zeros_like)


@export("full_like")
def full_like(a, fill_value, dtype=None, order="K", subok=True, shape=None, *, device=None):
    shape, dtype = _like("full_like", a, dtype, shape)
    return _fill("full_like", shape, fill_value, dtype)


def _static_scalar(op: str, name: str, v):
    if isinstance(v, Tracer):
        raise TypeError(
            f"{where(op)}: {name} is traced, but the length of the result must be known at "
            f"trace time; pass a Python number for {name}"
        )
    return v


@export("arange")
def arange(start, stop=None, step=None, dtype=None, *, device=None):
    start = _static_scalar("arange", "start", start)
    stop = _static_scalar("arange", "stop", stop)
    step = _static_scalar("arange", "step", step)
    if any(isinstance(v, Dim) for v in (start, stop, step)):
        return _symbolic_arange(start, stop, step, dtype)
    # NumPy decides the length and dtype; aotkit builds the values with iota.
    host = (
        np.arange(start, stop, step)
        if dtype is None
        else np.arange(start, stop, step, dtype=dtypes.canonicalize(dtype, where=where("arange")))
    )
    out_dtype = dtypes.canonicalize(host.dtype, where=where("arange"))
    n = host.shape[0]
    if stop is None:
        start, stop = 0, start
    step = 1 if step is None else step
    compute = out_dtype if dtypes.is_inexact(out_dtype) or out_dtype == np.bool_ else out_dtype
    if out_dtype == np.bool_:
        return asarray(host)
    idx = iota((n,), compute)
    if step != 1:
        idx = bind1("multiply", idx, full((n,), step, compute))
    if start != 0:
        idx = bind1("add", idx, full((n,), start, compute))
    return idx


def _symbolic_arange(start, stop, step, dtype) -> Tracer:
    """`arange` with a symbolic bound (`arange(x.shape[0])`): integer bounds and step, the
    length `max(0, ceil((stop - start) / step))` as a dimension (issue 25)."""
    if stop is None:
        start, stop = 0, start
    step = 1 if step is None else step
    for name, v in (("start", start), ("stop", stop), ("step", step)):
        if not isinstance(v, Dim) and not (isinstance(v, int | np.integer) and v is not True):
            raise TypeError(
                f"{where('arange')}: with a symbolic bound, {name} must be an int or a symbolic "
                f"dimension, got {v!r}"
            )
    if isinstance(step, Dim) or step == 0:
        raise ValueError(
            f"{where('arange')}: with a symbolic bound, step must be a nonzero int, got {step}"
        )
    if step > 0:
        n = algebra.dim_max(0, (stop - start + step - 1) // step)
    else:
        n = algebra.dim_max(0, (start - stop - step - 1) // -step)
    out_dtype = dtypes.canonicalize(
        np.arange(0, 1, 1).dtype if dtype is None else dtype, where=where("arange")
    )
    idx = iota((n,), out_dtype)
    if step != 1:
        idx = bind1("multiply", idx, full((n,), step, out_dtype))
    if not (isinstance(start, int) and start == 0):
        idx = bind1("add", idx, full((n,), start, out_dtype))
    return idx


@export("linspace")
def linspace(start, stop, num=50, endpoint=True, retstep=False, dtype=None, axis=0, *, device=None):
    num = _static_scalar("linspace", "num", num)
    if not isinstance(num, int) or num < 0:
        raise ValueError(f"{where('linspace')}: num must be a non-negative int, got {num!r}")
    if axis != 0:
        raise NotImplementedError(f"{where('linspace')}: only axis=0 is supported")
    start_a, stop_a = asarray(start), asarray(stop)
    compute = dtypes.result_type(start_a.dtype, stop_a.dtype, float)
    out_dtype = compute if dtype is None else dtypes.canonicalize(dtype, where=where("linspace"))
    div = (num - 1) if endpoint else num
    # `step` (returned with retstep) has the shape of start and stop broadcast, as NumPy's.
    ends = tuple(np.broadcast_shapes(start_a.shape, stop_a.shape))
    shape = (num,) + ends
    start_e = broadcast_to_shape(cast(start_a, compute), ends)
    stop_e = broadcast_to_shape(cast(stop_a, compute), ends)
    delta = bind1("subtract", stop_e, start_e)
    idx = iota(shape, compute, 0)
    start_b = broadcast_to_shape(start_e, shape)
    if div > 0:
        step = bind1("divide", delta, full(ends, div, compute))
        values = bind1("add", start_b, bind1("multiply", idx, broadcast_to_shape(step, shape)))
        if endpoint and num > 1:
            last = bind1("compare", idx, full(shape, num - 1, compute), direction="EQ")
            values = bind1("select", last, broadcast_to_shape(stop_e, shape), values)
    else:
        step = full(ends, math.nan, compute)
        values = bind1("add", start_b, bind1("multiply", idx, broadcast_to_shape(delta, shape)))
    result = (
        cast(values, out_dtype)
        if not dtypes.is_integer(out_dtype)
        else cast(bind1("floor", values), out_dtype)
    )
    if retstep:
        return result, step
    return result
