"""`aotkit.numpy`: the NumPy-compatible namespace over tracers.

Every function is registered by its op family (`aotkit/tracing/*.py`) in one table; this
module exposes that table. Plain `np.*` calls on tracers reach the same functions through
NumPy's dispatch protocols.
"""

from __future__ import annotations

import math as _math

import numpy as _np

from aotkit import tracing as _tracing
from aotkit.dtypes import bfloat16
from aotkit.tracing.core import NUMPY_FUNCTIONS as _FUNCTIONS

_tracing.load_families()
globals().update(_FUNCTIONS)
from aotkit.numpy import linalg as linalg  # noqa: E402  (needs the families loaded above)
from aotkit.numpy._coverage import coverage  # noqa: E402

# Dtypes and constants, as NumPy spells them.
bool_ = _np.bool_
int8, int16, int32, int64 = _np.int8, _np.int16, _np.int32, _np.int64
uint8, uint16, uint32, uint64 = _np.uint8, _np.uint16, _np.uint32, _np.uint64
float16, float32, float64 = _np.float16, _np.float32, _np.float64
complex64, complex128 = _np.complex64, _np.complex128
dtype = _np.dtype
pi, e, inf, nan, euler_gamma = _math.pi, _math.e, _math.inf, _math.nan, _np.euler_gamma
newaxis = None


def __getattr__(name: str):
    raise AttributeError(
        f"aotkit.numpy has no {name!r}; print(aotkit.numpy.coverage()) lists what is supported"
    )


def __dir__():
    return sorted(set(globals()) | set(_FUNCTIONS))


__all__ = sorted(_FUNCTIONS) + ["bfloat16", "coverage"]
