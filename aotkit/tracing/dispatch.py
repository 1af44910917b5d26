"""Trace stage: NumPy's dispatch protocols on `Tracer`, so plain `np.*` code traces.

`Tracer.__array_ufunc__` routes `np.sin(x)`, `np.add(a, x)` and the ufunc methods `reduce`,
`accumulate`, `outer`, `at` and `reduceat` to `aotkit.numpy` (`out=` included);
`Tracer.__array_function__` routes every other NumPy function (`np.sum`, `np.where`,
`np.einsum`, `np.linalg.norm`, ...) by name. A NumPy function, ufunc method or keyword
aotkit does not lower raises NotImplementedError naming it, at the user's line. Like
operators.py this module only fills in `Tracer`; the core does not depend on it.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

import numpy as np

from aotkit import dtypes
from aotkit.tracing import outputs, updates
from aotkit.tracing.core import NUMPY_FUNCTIONS, Tracer, export, where
from aotkit.tracing.elementwise import asarray
from aotkit.tracing.hlo import cast, normalize_axis, reshape_to
from aotkit.tracing.linalg import LINALG_FUNCTIONS
from aotkit.tracing.reduction import cumulative, reduce_raw, reduction_axes

_BOOL = np.dtype(np.bool_)

# --- keyword checking ------------------------------------------------------------------------

_signatures: dict[Callable, tuple[frozenset[str], bool]] = {}


def _accepted(fn: Callable) -> tuple[frozenset[str], bool]:
    """The keyword names `fn` takes, and whether it takes any (**kwargs)."""
    got = _signatures.get(fn)
    if got is None:
        params = inspect.signature(fn).parameters.values()
        names = frozenset(
            p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
        )
        got = _signatures[fn] = (names, any(p.kind == p.VAR_KEYWORD for p in params))
    return got


def _check_keywords(qualname: str, fn: Callable, kwargs: dict) -> None:
    names, var_kw = _accepted(fn)
    if var_kw:
        return
    for k in kwargs:
        if k not in names:
            raise NotImplementedError(
                f"{where('numpy.' + qualname)}: keyword {k}= of numpy.{qualname} is not "
                f"supported by aotkit.numpy.{qualname}; accepted: {', '.join(sorted(names))}"
            )


def _missing(qualname: str) -> NotImplementedError:
    return NotImplementedError(
        f"{where('numpy.' + qualname)}: aotkit.numpy has no {qualname!r}, so numpy.{qualname} "
        "cannot run on a traced array; print(aotkit.numpy.coverage()) lists what is supported"
    )


# --- __array_function__ ----------------------------------------------------------------------

_HANDLED_TYPES = (Tracer, np.ndarray, np.generic)


def _array_function(self, func, types, args, kwargs):
    if not all(issubclass(t, _HANDLED_TYPES) for t in types):
        return NotImplemented
    module = getattr(func, "__module__", "") or ""
    name = func.__name__
    if module == "numpy.linalg":
        table, qualname = LINALG_FUNCTIONS, f"linalg.{name}"
    elif module == "numpy":
        table, qualname = NUMPY_FUNCTIONS, name
    else:
        raise _missing(f"{module.removeprefix('numpy.')}.{name}")
    fn = table.get(name)
    if fn is None:
        raise _missing(qualname)
    _check_keywords(qualname, fn, kwargs)
    return fn(*args, **kwargs)


# --- __array_ufunc__ -------------------------------------------------------------------------

# ufunc -> the aotkit.numpy reduction with NumPy's `ufunc.reduce` semantics (dtype widening
# for add and multiply included), or a monoid reduced in the operand's own dtype.
_REDUCE_FUNCTIONS = {
    "add": "sum",
    "multiply": "prod",
    "maximum": "max",
    "minimum": "min",
    "fmax": "nanmax",
    "fmin": "nanmin",
    "logical_and": "all",
    "logical_or": "any",
}
_REDUCE_MONOIDS = {"bitwise_and": "and", "bitwise_or": "or", "bitwise_xor": "xor"}
_ACCUMULATE = {
    "add": ("cumsum", None),
    "multiply": ("cumprod", None),
    "maximum": (None, "max"),
    "minimum": (None, "min"),
    "logical_and": (None, "and"),
    "logical_or": (None, "or"),
    "bitwise_and": (None, "and"),
    "bitwise_or": (None, "or"),
    "bitwise_xor": (None, "xor"),
}


def _ufunc_reduce(name: str, array, axis=0, dtype=None, keepdims=False, **kwargs):
    qualname = f"{name}.reduce"
    fname = _REDUCE_FUNCTIONS.get(name)
    if fname is not None:
        fn = NUMPY_FUNCTIONS[fname]
        if dtype is not None:
            kwargs["dtype"] = dtype
        _check_keywords(qualname, fn, kwargs)
        return fn(array, axis=axis, keepdims=keepdims, **kwargs)
    monoid = _REDUCE_MONOIDS.get(name)
    if monoid is None:
        raise _missing(qualname)
    out = kwargs.pop("out", None)
    if outputs.given(out):
        r = _ufunc_reduce(name, array, axis, dtype, keepdims, **kwargs)
        return outputs.store(qualname, out, r, casting="unsafe")
    if kwargs:
        raise NotImplementedError(
            f"{where('numpy.' + qualname)}: keyword {next(iter(kwargs))}= is not supported "
            f"by numpy.{qualname} on traced arrays"
        )
    x = asarray(array)
    if dtype is not None:
        x = cast(x, dtypes.canonicalize(dtype, where=where(qualname)))
    if dtypes.is_inexact(x.dtype):
        raise TypeError(f"{where('numpy.' + qualname)}: {name} is not defined for {x.dtype}")
    axes = reduction_axes(qualname, axis, x.ndim)
    r = reduce_raw(x, axes, monoid)
    if keepdims:
        r = reshape_to(r, tuple(1 if i in axes else d for i, d in enumerate(x.shape)))
    return r


def _ufunc_accumulate(name: str, array, axis=0, dtype=None, out=None):
    qualname = f"{name}.accumulate"
    entry = _ACCUMULATE.get(name)
    if entry is None:
        raise _missing(qualname)
    fname, monoid = entry
    if fname is not None:
        return NUMPY_FUNCTIONS[fname](array, axis=axis, dtype=dtype, out=out)
    if outputs.given(out):
        r = _ufunc_accumulate(name, array, axis, dtype)
        return outputs.store(qualname, out, r, casting="unsafe")
    x = asarray(array)
    if dtype is not None:
        x = cast(x, dtypes.canonicalize(dtype, where=where(qualname)))
    elif name.startswith("logical"):
        x = cast(x, _BOOL)
    if x.ndim == 0:
        raise TypeError(f"{where('numpy.' + qualname)}: cannot accumulate on a scalar")
    if name.startswith("bitwise") and dtypes.is_inexact(x.dtype):
        raise TypeError(f"{where('numpy.' + qualname)}: {name} is not defined for {x.dtype}")
    if dtypes.is_complex(x.dtype):
        raise NotImplementedError(
            f"{where('numpy.' + qualname)}: running {name} of complex values is not supported; "
            "accumulate the real and imaginary parts"
        )
    return cumulative(x, normalize_axis(qualname, axis, x.ndim), monoid)


def _ufunc_outer(name: str, a, b, **kwargs):
    fn = NUMPY_FUNCTIONS.get(name)
    if fn is None:
        raise _missing(f"{name}.outer")
    # NumPy makes arrays of both operands first, so Python scalars are not weak here.
    x, y = asarray(a), asarray(b)
    return fn(reshape_to(x, x.shape + (1,) * y.ndim), y, **kwargs)


def _array_ufunc(self, ufunc, method, *inputs, **kwargs):
    name = ufunc.__name__
    if method == "__call__":
        fn = NUMPY_FUNCTIONS.get(name)
        if fn is None:
            raise _missing(name)
        _check_keywords(name, fn, kwargs)
        return fn(*inputs, **kwargs)
    if method == "reduce":
        return _ufunc_reduce(name, *inputs, **kwargs)
    if method == "accumulate":
        return _ufunc_accumulate(name, *inputs, **kwargs)
    if method == "outer":
        return _ufunc_outer(name, *inputs, **kwargs)
    if method == "at":
        return updates.ufunc_at(name, *inputs, **kwargs)
    if method == "reduceat":
        return updates.ufunc_reduceat(name, *inputs, **kwargs)
    raise _missing(f"{name}.{method}")


Tracer.__array_ufunc__ = _array_ufunc
Tracer.__array_function__ = _array_function


# --- static array metadata, as NumPy functions ---------------------------------------------


def _static(name: str):
    def decorate(fn):
        if name not in NUMPY_FUNCTIONS:
            export(name)(fn)
        return fn

    return decorate


@_static("shape")
def shape(a):
    return a.shape if isinstance(a, Tracer) else np.shape(a)


@_static("ndim")
def ndim(a):
    return a.ndim if isinstance(a, Tracer) else np.ndim(a)


@_static("size")
def size(a, axis=None):
    if not isinstance(a, Tracer):
        return np.size(a, axis)
    return a.size if axis is None else a.shape[normalize_axis("size", axis, a.ndim)]


@_static("result_type")
def result_type(*arrays_and_dtypes):
    keys = []
    for a in arrays_and_dtypes:
        if isinstance(a, Tracer):
            keys.append(a.dtype)
        elif dtypes.weak_kind(a) is not None:
            keys.append(dtypes.weak_kind(a))
        elif isinstance(a, np.ndarray | np.generic):
            keys.append(a.dtype)
        else:
            keys.append(dtypes.canonicalize(a, where=where("result_type")))
    return dtypes.result_type(*keys)
