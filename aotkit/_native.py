"""The optional C parts of aotkit (aotkit/_speedups.c) and what stands in without them.

The install builds `aotkit._speedups` where it finds a C compiler and goes on without it
where it does not; the results are the same either way, only calls take longer:

- `Front`: the C front of a native dispatch (`aotkit.backends.pjrt.native_dispatcher`), or
  None, and the dispatcher's Python front takes every call;
- `Dispatching`: the base class of `jit(f)` objects, whose call is their `_dispatch`
  attribute: in C, the call goes straight to it; in Python, through a property;
- `Binder`: the tracer's `bind` for the common op (`aotkit.lowering.core`), or None, and
  the Python `bind` takes every op.
"""

from __future__ import annotations

import operator
import warnings

# What aotkit/_speedups.c says its `VERSION` is; raised with every change of its interface.
VERSION = 4

try:
    from aotkit import _speedups
except ImportError:
    _speedups = None
if _speedups is not None and getattr(_speedups, "VERSION", None) != VERSION:
    warnings.warn(
        f"aotkit._speedups ({_speedups.__file__}) was built from another version of "
        "aotkit/_speedups.c; aotkit runs without it (calls take longer) until it is built "
        "again: reinstall aotkit (pip install -e . in a checkout)",
        RuntimeWarning,
        stacklevel=2,
    )
    _speedups = None

if _speedups is not None:
    Front = _speedups.Front
    Dispatching = _speedups.Dispatching
    Binder = _speedups.Binder
else:
    Front = Binder = None

    class Dispatching:
        """A base class whose instances' call is their `_dispatch` attribute."""

        __slots__ = ()

        # A property whose getter is C code hands out the callable itself: Python calls
        # it with no forwarding frame (nor a getter frame).
        __call__ = property(operator.attrgetter("_dispatch"))
