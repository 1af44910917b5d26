"""Trace stage: NumPy's `out=` arguments, written by rebinding a traced array.

A traced array is an immutable value, but the Python object that holds it can be pointed at
a new value, which is how `x[i] = v` and `x += v` trace (hlo.rebind). `out=` works the
same way: the result is cast to `out`'s dtype under NumPy's casting rule, broadcast to its
shape (which must be the result's broadcast shape), merged through `where=` when given,
and `out` is rebound to it and returned, as NumPy returns `out`.

A NumPy array passed as `out=` cannot hold a value the program computes at run time, so it
is refused with a TypeError that says how to make the buffer a traced one instead.
"""

from __future__ import annotations

import functools
import inspect

import numpy as np

from aotkit import dtypes
from aotkit.tracing.core import Tracer, bind1, where
from aotkit.tracing.hlo import broadcast_to_shape, cast, rebind, to_operand

_BOOL = np.dtype(np.bool_)


def given(out) -> bool:
    """Whether an `out=` argument asks for an output (NumPy passes `(None,)` for none)."""
    if out is None:
        return False
    return not (isinstance(out, tuple) and all(o is None for o in out))


def target(op: str, out) -> Tracer:
    """The traced array `out=` names (unwrapping NumPy's one-element tuple)."""
    if isinstance(out, tuple):
        if len(out) != 1:
            raise ValueError(
                f"{where(op)}: out= holds {len(out)} arrays; this function has one output"
            )
        out = out[0]
    if isinstance(out, Tracer):
        return out
    if isinstance(out, np.ndarray | np.generic):
        raise TypeError(
            f"{where(op)}: out= is a NumPy array of shape {np.shape(out)}, which cannot hold a "
            "value computed when the program runs; make the buffer from a traced array "
            "(np.empty_like(x), np.zeros_like(x), aotkit.numpy.zeros(shape)) so that writes "
            "into it are traced, or use the return value"
        )
    raise TypeError(
        f"{where(op)}: out= must be a traced array, got {type(out).__name__}; use the return value"
    )


def store(op: str, out, result: Tracer, *, casting: str = "same_kind", mask=True) -> Tracer:
    """Writes `result` into the traced array `out` (rebinding it) and returns `out`."""
    dst = target(op, out)
    if result.shape != dst.shape:
        try:
            shape = np.broadcast_shapes(result.shape, dst.shape)
        except ValueError:
            shape = result.shape
        if shape != dst.shape:
            raise ValueError(
                f"{where(op)}: non-broadcastable output operand with shape {dst.shape} doesn't "
                f"match the broadcast shape {shape}"
            )
        result = broadcast_to_shape(result, dst.shape)
    if result.dtype != dst.dtype:
        if casting != "unsafe" and not _can_cast(result.dtype, dst.dtype, casting):
            raise TypeError(
                f"{where(op)}: Cannot cast ufunc {op!r} output from {result.dtype.name} to "
                f"{dst.dtype.name} with casting rule {casting!r}; pass casting='unsafe' or an "
                f"out= array of dtype {result.dtype.name}"
            )
        result = cast(result, dst.dtype)
    if mask is not True:
        keep = to_operand(op, mask, _BOOL, dst.shape)
        result = bind1("select", keep, result, dst)
    rebind(op, dst, result)
    return dst


def _can_cast(src: np.dtype, dst: np.dtype, casting: str) -> bool:
    try:
        return bool(np.can_cast(src, dst, casting))
    except TypeError:  # ml_dtypes' bfloat16 against some NumPy dtypes
        return dtypes.result_type(src, dst) == dst


def accepts_out(op: str, *, computes_in_out_dtype: bool = False):
    """Lets a reduction write its result into a traced `out=` array, as NumPy's do.

    NumPy casts a reduction's result into `out` without checking the casting rule, and the
    functions that take `dtype=` (sum, prod, cumsum, ...) compute in `out`'s dtype when no
    dtype is given (`computes_in_out_dtype`).
    """

    def decorate(fn):
        sig = inspect.signature(fn)
        names = list(sig.parameters)
        position = names.index("out")
        positional_only = [p.name for p in sig.parameters.values() if p.kind is p.POSITIONAL_ONLY]

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            if len(args) > position:
                # `out` given by position: rebuild the call with it taken out.
                arguments = dict(sig.bind(*args, **kwargs).arguments)
                out = arguments.pop("out")
                args = tuple(arguments.pop(n) for n in positional_only if n in arguments)
                kwargs = arguments
            else:
                out = kwargs.pop("out", None)
            if not given(out):
                return fn(*args, **kwargs)
            dst = target(op, out)
            if computes_in_out_dtype and kwargs.get("dtype") is None:
                kwargs["dtype"] = dst.dtype
            return store(op, dst, fn(*args, **kwargs), casting="unsafe")

        return wrapper

    return decorate
