"""`aotkit.numpy.linalg`: NumPy's linalg namespace over tracers (what aotkit lowers so far).

Plain `np.linalg.norm(x)` on a tracer reaches the same functions through NumPy's dispatch.
"""

from __future__ import annotations

from aotkit import tracing as _tracing
from aotkit.tracing.linalg import LINALG_FUNCTIONS as _FUNCTIONS

_tracing.load_families()
globals().update(_FUNCTIONS)


def __getattr__(name: str):
    raise AttributeError(
        f"aotkit.numpy.linalg has no {name!r}; supported: {', '.join(sorted(_FUNCTIONS))} "
        "(print(aotkit.numpy.coverage()) lists every supported function)"
    )


def __dir__():
    return sorted(set(globals()) | set(_FUNCTIONS))


__all__ = sorted(_FUNCTIONS)
