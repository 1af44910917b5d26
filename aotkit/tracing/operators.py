"""Trace stage: Python operators and array methods on `Tracer`, routed to aotkit.numpy.

Kept apart from `core.py` so the core does not depend on any op family: the operators
are looked up by name in the `aotkit.numpy` table, which every family fills at import.
"""

from __future__ import annotations

import types

from aotkit.tracing.core import NUMPY_FUNCTIONS, Tracer, bind, where


def _lookup(name: str):
    fn = NUMPY_FUNCTIONS.get(name)
    if fn is None:
        raise NotImplementedError(f"{where(name)}: aotkit.numpy has no {name!r} yet")
    return fn


def _binary(name: str):
    # Operators are hot: resolve the function once, on first use (families load later).
    fn = None
    loops = {}

    def op(self, other):
        nonlocal fn, loops
        if fn is None:
            fn = _lookup(name)
            loops = getattr(fn, "same_dtype_loops", loops)
        # Two tracers alike, not both weak, whose dtype the ufunc's own loop keeps (what its
        # fast path does, without the call): its primitive on them.
        if (
            type(other) is Tracer
            and other.dtype is self.dtype
            and other.shape == self.shape
            and not (self.weak and other.weak)
        ):
            loop = loops.get(self.dtype)
            if loop is not None and loop[1] is not None:
                return bind(loop[1], self, other)[0]
        return fn(self, other)

    def rop(self, other):
        nonlocal fn
        if fn is None:
            fn = _lookup(name)
        return fn(other, self)

    return op, rop


_BINARY_OPERATORS = [
    ("add", "add"),
    ("sub", "subtract"),
    ("mul", "multiply"),
    ("truediv", "true_divide"),
    ("floordiv", "floor_divide"),
    ("mod", "remainder"),
    ("pow", "power"),
    ("and", "bitwise_and"),
    ("or", "bitwise_or"),
    ("xor", "bitwise_xor"),
    ("lshift", "left_shift"),
    ("rshift", "right_shift"),
    ("matmul", "matmul"),
]
_COMPARISONS = [
    ("lt", "less"),
    ("le", "less_equal"),
    ("gt", "greater"),
    ("ge", "greater_equal"),
    ("eq", "equal"),
    ("ne", "not_equal"),
]
for _dunder, _name in _BINARY_OPERATORS:
    _op, _rop = _binary(_name)
    setattr(Tracer, f"__{_dunder}__", _op)
    setattr(Tracer, f"__r{_dunder}__", _rop)
for _dunder, _name in _COMPARISONS:
    setattr(Tracer, f"__{_dunder}__", _binary(_name)[0])


def bind_directly() -> None:
    """Makes `x + y` call `aotkit.numpy.add` itself, once every family has exported.

    Operators are the hot path of traced programs, and the lookup wrapper above is one more
    call per op (and one more frame for the walk to the user's line).
    """
    for dunder, name in _BINARY_OPERATORS + _COMPARISONS:
        fn = NUMPY_FUNCTIONS.get(name)
        if isinstance(fn, types.FunctionType):  # a plain function binds as a method
            setattr(Tracer, f"__{dunder}__", fn)


for _dunder, _name in [
    ("neg", "negative"),
    ("pos", "positive"),
    ("abs", "abs"),
    ("invert", "invert"),
]:
    setattr(Tracer, f"__{_dunder}__", lambda self, _n=_name: _lookup(_n)(self))


def _round(self, ndigits=None):
    """`round(x)`: NumPy's `round` (half to even, as Python's; the result keeps the array's
    dtype, since a traced value cannot become a Python int)."""
    return _lookup("round")(self, 0 if ndigits is None else ndigits)


def _divmod(self, other):
    return _lookup("floor_divide")(self, other), _lookup("remainder")(self, other)


def _rdivmod(self, other):
    return _lookup("floor_divide")(other, self), _lookup("remainder")(other, self)


Tracer.__round__ = _round
Tracer.__divmod__ = _divmod
Tracer.__rdivmod__ = _rdivmod


def _method(name: str):
    def method(self, *args, **kwargs):
        return _lookup(name)(self, *args, **kwargs)

    method.__name__ = name
    return method


for _name in [
    "astype",
    "clip",
    "conj",
    "conjugate",
    "round",
    # Methods below come from later op families; a missing one raises AttributeError.
    "sum",
    "prod",
    "mean",
    "var",
    "std",
    "max",
    "min",
    "argmax",
    "argmin",
    "any",
    "all",
    "cumsum",
    "cumprod",
    "ptp",
    "squeeze",
    "swapaxes",
    "flatten",
    "ravel",
    "take",
    "diagonal",
    "trace",
    "repeat",
    "dot",
    "nonzero",
    "transpose",
]:
    if not hasattr(Tracer, _name):
        setattr(Tracer, _name, _method(_name))


def _reshape(self, *shape, order="C"):
    if len(shape) == 1 and not isinstance(shape[0], int):
        shape = shape[0]
    return _lookup("reshape")(self, shape, order=order)


def _transpose(self, *axes):
    if len(axes) == 1 and not isinstance(axes[0], int):
        axes = axes[0]
    return _lookup("transpose")(self, axes if axes else None)


Tracer.reshape = _reshape
Tracer.transpose = _transpose
Tracer.T = property(lambda self: _lookup("transpose")(self))
Tracer.mT = property(lambda self: _lookup("swapaxes")(self, -1, -2))
Tracer.real = property(lambda self: _lookup("real")(self))
Tracer.imag = property(lambda self: _lookup("imag")(self))
