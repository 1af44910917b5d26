"""The optional C parts of aotkit (aotkit/_speedups.c) and what stands in without them.

The install builds `aotkit._speedups` where it finds a C compiler and goes on without it
where it does not; the results are the same either way, only calls take longer:

- `Front`: the C front of a native dispatch (`aotkit.backends.dispatch.native_dispatcher`),
  or None, and the dispatcher's Python front takes every call;
- `Dispatching`: the base class of `jit(f)` objects, whose call is their `_dispatch`
  attribute: in C, the call goes straight to it; in Python, through a property;
- `Binder`: the tracer's `bind` for the common op (`aotkit.tracing.core`), or None, and
  the Python `bind` takes every op.

`snapshot` is what the C front does first with a call's containers, for the Python paths.
"""

from __future__ import annotations

import operator
import warnings

# What aotkit/_speedups.c says its `VERSION` is; raised with every change of its interface.
VERSION = 8

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


_CONTAINERS = (list, tuple, dict)
# Deeper than this, containers are left as they are (the recursion stays far from Python's
# limit, which the flattening after it needs too).
_SNAPSHOT_DEPTH = 100


def snapshot(tree, _depth: int = 0):
    """`tree` (a call's tuple of arguments or dict of keywords) with each list and dict in it
    copied, and each tuple holding one rebuilt: the call's own structure, which another
    thread changing the caller's lists and dicts cannot change between the steps that read
    it (the key of a cache, the check of the arguments, the execution; issue 43). Each
    container is copied whole at once (`list.copy` and `dict.copy` run no Python code
    between items), then its copy's items; `tree` itself where it holds no list or dict.
    Subclasses of these and other pytree nodes are left as they are."""
    t = type(tree)
    if _depth >= _SNAPSHOT_DEPTH:
        return tree
    if t is list:
        return [snapshot(x, _depth + 1) if type(x) in _CONTAINERS else x for x in tree.copy()]
    if t is dict:
        return {
            k: snapshot(v, _depth + 1) if type(v) in _CONTAINERS else v
            for k, v in tree.copy().items()
        }
    if t is tuple:
        for x in tree:
            if type(x) in _CONTAINERS:
                items = [snapshot(y, _depth + 1) if type(y) in _CONTAINERS else y for y in tree]
                if any(a is not b for a, b in zip(items, tree, strict=True)):
                    return tuple(items)
                break
    return tree
