"""The native dispatcher: jaxlib's C++ dispatch (the loop under JAX's own jit) in front of a
`Compiled`'s checked Python call, with aotkit's C `Front` (aotkit/_speedups.c) before it.

`native_dispatcher` builds it; `front_tables` are the types and dtypes the C `Front` passes
straight through; `live` is the check of a device argument. What a call's host leaves are
(`_host_leaves`) decides whether it may take the C++ path or must be prepared first
(aotkit/backends/host_inputs.py). PJRT backends (aotkit/backends/pjrt.py) give it their
executables' `run`.
"""

from __future__ import annotations

import functools
import threading
import warnings

import numpy as np
from jax import tree_util

from aotkit import _compat, _native
from aotkit._traceback import filter_exception
from aotkit.backends.base import ArgumentMismatch
from aotkit.backends.host_inputs import (
    CONTAINERS,
    EXACT_NUMPY,
    EXACT_NUMPY_SCALARS,
    NONE_KNOWN,
    PYTHON_SCALARS,
    STAGED_FROM,
    WIDE_NUMPY_SCALARS,
    CopiedInCall,
    aligned,
    host_inputs,
)

_Front = _native.Front  # None without aotkit._speedups: `call` then takes every call


def native_dispatcher(
    name: str, python_call, run, copied: CopiedInCall = NONE_KNOWN, unread: tuple = ()
):
    """jaxlib's C++ dispatch (the loop under JAX's own jit) in front of a Python call.

    `run(x64, args, kwargs) -> (out, fastpath or None)` handles every argument signature
    the C++ side has not cached: it checks and runs the call in Python and returns what
    to cache (`PjrtExecutable.fastpath`), after which calls with that signature (tree,
    dtypes, shapes, weak types, shardings) never enter Python. `python_call` runs when
    JAX's `disable_jit` is on, and words the error for an array donated to an earlier call.
    None if this jaxlib has no C++ dispatch.

    JAX's x64 mode changes what the C++ transfer does: with it off, 64-bit NumPy values
    are narrowed and a float64 array keys like a float32 one (so a cached float32 signature
    would take float64 arrays too); with it on, a Python float becomes a float64 buffer. So
    calls run in x64 mode, where NumPy dtypes key as themselves, except calls with a Python
    scalar anywhere in their arguments, which run with x64 off (a Python float then becomes
    the weakly typed float32 of a scalar argument); each mode has its own C++ cache. No
    NumPy leaf of a dtype narrowing changes (`EXACT_NUMPY` are the others) ever reaches the
    x64-off cache: such calls take the checked call, so a float32 signature cached there is
    only ever a float32 array's. A call switches only when the thread is not in its mode
    already, and calls whose leaves are device arrays and NumPy arrays and scalars of dtypes
    narrowing keeps never do. What runs in Python (a miss, which may trace with JAX) runs
    under the caller's own x64 setting. Arrays in big-endian byte order never reach the C++
    side (it would read their bytes as native ones). NumPy arrays the transfer may read after
    the call returns are prepared first (`HostInputs`): on jaxlib's CPU client (`copied` is
    `JAXLIB_CPU`: what it copies while the call runs), large ones are staged or read in place,
    and a call that hands the transfer any of the caller's own waits for its results; on
    other clients (`NONE_KNOWN`) every NumPy array is copied first, and nothing waits. A call
    of one array or scalar takes the fewest steps. `unread` are the positions (under 64) of
    positional arguments the executable does not read (leaves jax.jit pruned): a NumPy array
    of an exact dtype there is neither waited for, staged nor copied.
    """
    swap, restore = _compat.x64_switch()
    thread_x64 = _compat.x64_state()
    # The caller's own x64 setting, per thread (calls nest: a miss may trace code that calls
    # another compiled function): what runs in Python (tracing with JAX above all) sees it.
    callers = threading.local()

    def as_caller(fn, *args, **kwargs):
        forced = swap(False)
        stack = getattr(callers, "stack", None)
        # A call of device arrays only runs without switching (see `call`): the caller's
        # setting is then the one in force.
        restore(stack[-1] if stack else forced)
        try:
            return fn(*args, **kwargs)
        finally:
            restore(forced)

    # Whether this dispatcher's programs take a Python scalar as x64 mode's 64-bit value, as
    # a JAX function lowered in x64 mode does (aotkit's tracer takes a 32-bit one): learnt
    # from its first call in x64 mode with a float, int or complex; None until then.
    scalars_64 = [None]

    native = {}
    for x64 in (True, False):

        def cache_miss(*args, _x64=x64, **kwargs):
            if not _x64 and thread_x64.value:
                # The C front calls `narrow` with Python scalars without reading the mode
                # (a read costs as much as the rest of the front). In x64 mode the call runs
                # in `wide` where its programs take 64-bit scalars (the first such call tries
                # it); otherwise it switches x64 off here, and jaxlib forgets this signature
                # (x64 mode's) again.
                if scalars_64[0] is not False:
                    try:
                        return wide(*args, **kwargs), None, True
                    except (runtime_error, ValueError):
                        return _after_failure(args, kwargs), None, True
                return in_mode(False, narrow, args, kwargs), None, True
            out, fastpath = as_caller(run, _x64, args, kwargs)
            if _x64 and scalars_64[0] is None and _mode_scalars((args, kwargs)):
                scalars_64[0] = fastpath is not None
            return out, fastpath, False

        native[x64] = _compat.cpp_dispatcher(
            name, functools.partial(as_caller, python_call), cache_miss
        )
        if native[x64] is None:
            return None
    wide, narrow = native[True], native[False]
    python_scalars = PYTHON_SCALARS
    runtime_error = _compat.runtime_error_type()
    array_type, key_type = _compat.array_type(), _compat.key_array_type()

    exact, exact_scalars, wide_scalars = EXACT_NUMPY, EXACT_NUMPY_SCALARS, WIDE_NUMPY_SCALARS
    in_place_from, staged_from = copied.below, STAGED_FROM
    copied_in_call_below = copied.unaligned_below
    private = copied.nothing_known  # every NumPy array copied first, nothing waited for
    unread = tuple(i for i in unread if i < 64)
    skipped = frozenset(unread)

    def call(*args, **kwargs):
        # The entry point of every call (aotkit/_traceback.py): an error leaves it without
        # aotkit's frames. A try costs nothing until it catches; a wrapper would add a frame.
        try:
            if len(args) == 1 and not kwargs:
                # One array or scalar (`f(x)`, whatever the program's arguments): the
                # commonest call, in the fewest steps (`wide(arg)` passes it as it is).
                (arg,) = args
                t = type(arg)
                if (
                    t is array_type
                    or t in exact_scalars
                    or (t is np.ndarray and arg.dtype in exact and arg.nbytes < in_place_from)
                ):
                    try:
                        return wide(arg)
                    except (runtime_error, ValueError):
                        return _after_failure(args, kwargs)
                if t in python_scalars and thread_x64.value is False:
                    try:
                        return narrow(arg)
                    except (runtime_error, ValueError):
                        return _after_failure(args, kwargs)
            narrow_mode = wait = copy = wide_only = False
            for i, arg in enumerate(args):
                t = type(arg)
                if t is array_type or t is key_type:  # (a key: its data, a device array)
                    continue
                if t is np.ndarray:
                    exact_dtype = arg.dtype in exact
                    if exact_dtype and i in skipped:
                        continue  # nothing transfers it
                    if exact_dtype or (arg.dtype.isnative and thread_x64.value is True):
                        # In x64 mode a 64-bit array keys as itself, in `wide` only.
                        wide_only = wide_only or not exact_dtype
                        n = arg.nbytes
                        if n < in_place_from:
                            continue
                        if n < staged_from:  # the transfer may read it after the call
                            if private:  # (whatever its size or alignment: a copy)
                                copy = True
                            else:
                                wait = wait or n >= copied_in_call_below or aligned(arg)
                            continue
                    break
                if t in exact_scalars:
                    continue
                if t in wide_scalars and thread_x64.value is True:
                    wide_only = True  # as a 64-bit array
                    continue
                if t in python_scalars:
                    narrow_mode = True
                    continue
                break
            else:
                if not kwargs:
                    # Device arrays, NumPy values of dtypes x64 mode does not narrow (under
                    # `STAGED_FROM` bytes) and Python scalars: the common calls, in as few
                    # steps as jax.jit's; NumPy arrays as copies where the client may read
                    # them after the call (`private`).
                    if copy:
                        args = tuple(
                            a.copy() if type(a) is np.ndarray and i not in skipped else a
                            for i, a in enumerate(args)
                        )
                    if not narrow_mode or wide_only:
                        # These key and transfer alike in either x64 mode: no switch. With
                        # 64-bit arrays (`wide_only`) the thread is in x64 mode, where a
                        # Python scalar keys as jax.jit's do there (a float as a weak
                        # float64): a JAX function's signature, cached in `wide`.
                        try:
                            out = wide(*args)
                        except (runtime_error, ValueError):
                            return _after_failure(args, kwargs)
                        if wait:
                            _block(out, array_type)
                        return out
                    if thread_x64.value is False and not wait:  # x64 off, as it usually is
                        try:
                            return narrow(*args)
                        except (runtime_error, ValueError):
                            return _after_failure(args, kwargs)
            return other_call(args, kwargs)
        except Exception as e:
            filter_exception(e)
            raise

    def other_call(args: tuple, kwargs: dict):
        """Every call `call` does not finish itself: keyword arguments, containers, NumPy
        values of 64-bit dtypes, of non-native byte order or that the transfer may read after
        the call."""
        # The call's own lists and dicts: the C++ dispatch keys one structure, and a miss
        # traces and runs that same one, whatever another thread does to the caller's.
        args, kwargs = _native.snapshot(args), _native.snapshot(kwargs)
        try:
            found = _host_leaves(args, array_type, in_place_from)
            if kwargs:
                found |= _host_leaves(kwargs, array_type, in_place_from)
        except RecursionError:  # nested past the limit: the checked call says so
            return python_call(*args, **kwargs)
        both = found & _NARROWING and found & _PYTHON_SCALAR
        if found & _NON_NATIVE or both and thread_x64.value is not True:
            # Read as native bytes, or narrowed into an x64-off signature: the checked call.
            return python_call(*args, **kwargs)
        # A Python scalar anywhere runs the call with x64 off (see above), unless the thread
        # is in x64 mode and 64-bit NumPy values come with it or the programs take 64-bit
        # scalars (`scalars_64`; the first such call tries it): those run as under jax.jit
        # in that mode.
        wide_mode = thread_x64.value is True and (both or scalars_64[0] is not False)
        narrowed = found & _PYTHON_SCALAR and not wide_mode
        mode, dispatch = (False, narrow) if narrowed else (True, wide)
        # Leaves that key and transfer alike in either mode: no switch.
        exact_only = mode and not found & (_NARROWING | _OTHER)
        if found & _LARGE:
            return large_call(mode, dispatch, exact_only, args, kwargs)
        if exact_only or thread_x64.value is mode:  # or in that mode already
            try:
                return dispatch(*args, **kwargs)
            except (runtime_error, ValueError):
                return _after_failure(args, kwargs)
        return in_mode(mode, dispatch, args, kwargs)

    def in_mode(mode: bool, dispatch, args: tuple, kwargs: dict):
        previous = swap(mode)
        stack = getattr(callers, "stack", None)
        if stack is None:
            stack = callers.stack = []
        stack.append(previous)
        try:
            return dispatch(*args, **kwargs)
        except (runtime_error, ValueError):
            return _after_failure(args, kwargs)
        finally:
            stack.pop()
            restore(previous)

    def large_call(mode: bool, dispatch, exact_only: bool, args: tuple, kwargs: dict):
        # NumPy arrays the transfer may read after the call returns (see `HostInputs`): on
        # jaxlib's CPU client, those of `STAGED_FROM` bytes or more that are not aligned are
        # copied into staging buffers first, and if any of the caller's own arrays is left,
        # the call returns only once its results are ready, so that the caller may write to
        # them as soon as it returns; elsewhere all are copied first.
        if private:
            args, kwargs = host_inputs.private_copies(args, kwargs)
            in_place = False
        else:
            args, kwargs, in_place = host_inputs.prepare_tree(args, kwargs)
        if exact_only or thread_x64.value is mode:
            try:
                out = dispatch(*args, **kwargs)
            except (runtime_error, ValueError):
                out = _after_failure(args, kwargs)
        else:
            out = in_mode(mode, dispatch, args, kwargs)
        if in_place:
            if type(out) is array_type:
                out.block_until_ready()
            else:
                _block(out, array_type)
        return out

    def donated(args, kwargs) -> bool:
        # A donated array passes the C++ signature check and fails in PJRT (as a
        # ValueError); the checked call words that error, refusing before it runs.
        try:
            leaves = tree_util.tree_leaves((args, kwargs))
        except ValueError:  # a dict whose keys do not sort: the checked call names it
            return True
        return any(type(x) is array_type and x.is_deleted() for x in leaves)

    def _after_failure(args, kwargs):
        if donated(args, kwargs):
            return as_caller(python_call, *args, **kwargs)
        raise

    def failed(error: Exception, args: tuple):
        # What the C front (`_Front`) does when the C++ dispatch raises `error`: the
        # `except` clauses of `call`'s own fast path.
        try:
            if isinstance(error, (runtime_error, ValueError)) and donated(args, {}):
                return as_caller(python_call, *args)
            raise error
        except Exception as e:
            filter_exception(e)
            raise

    def clear_cache() -> None:
        """Forgets every cached signature (the executables they hold can then be freed)."""
        for dispatch in (wide, narrow):
            dispatch._clear_cache()

    call.clear_cache = clear_cache
    if _Front is None:
        return call
    # The C front takes `call`'s fast path without a Python frame (`call` takes the rest).
    try:
        return _Front(
            wide=wide,
            narrow=narrow,
            slow=call,
            failed=failed,
            clear_cache=clear_cache,
            settle=functools.partial(_block, array_type=array_type),
            scalars_64=scalars_64,
            unread=unread,
            **front_tables(copied),
        )
    except RuntimeError as e:  # it cannot read this NumPy's arrays
        warnings.warn(f"{e}; calls take the Python front", RuntimeWarning, stacklevel=2)
        return call


def front_tables(copied: CopiedInCall) -> dict:
    """The C `Front`'s keyword arguments other than its callables: which types and dtypes it
    passes straight to the C++ dispatch (as `native_dispatcher`'s `call` does), the x64 mode
    it reads for 64-bit NumPy values, and the sizes it hands to the Python front or waits
    for (as `native_dispatcher`'s)."""
    return dict(
        array_type=_compat.array_type(),
        key_type=_compat.key_array_type(),
        ndarray_type=np.ndarray,
        exact_scalars=EXACT_NUMPY_SCALARS,
        # NumPy's own instances of these dtypes, which its arrays hold (compared by identity).
        exact_dtypes=tuple(np.dtype(d.type) for d in EXACT_NUMPY),
        python_scalars=PYTHON_SCALARS,
        wide_dtypes=tuple(np.dtype(t) for t in WIDE_NUMPY_SCALARS),
        wide_scalars=WIDE_NUMPY_SCALARS,
        x64=_compat.x64_state(),
        in_place_from=copied.below,
        staged_from=STAGED_FROM,
        copied_below=copied.unaligned_below,
        copy_arrays=copied.nothing_known,
    )


def live(index: int, x):
    """`x`, a device array passed as argument `index`, unless it was deleted or donated."""
    if x.is_deleted():
        raise ArgumentMismatch(
            index, "was deleted or donated to an earlier call; pass a live array", ValueError
        )
    return x


_NON_NATIVE, _LARGE, _NARROWING, _PYTHON_SCALAR, _OTHER = 1, 2, 4, 8, 16


_KEY_ARRAY = _compat.key_array_type()


def _host_leaves(tree, array_type, in_place_from: int) -> int:
    """What the leaves of a call's arguments (`tree`: its tuple of positional arguments, its
    dict of keywords, or a list, tuple or dict in them) are, as far as the C++ transfer and
    its x64 mode go: `_NON_NATIVE`, a NumPy array in non-native (big-endian) byte order,
    whose bytes jaxlib would read as native ones (such calls take the checked path, which
    converts them); `_LARGE`, a NumPy array of `in_place_from` bytes or more, which the
    transfer may read after the call returns (`HostInputs`); `_NARROWING`, a NumPy value of a
    dtype x64-off mode narrows (not in `EXACT_NUMPY`); `_PYTHON_SCALAR`, a Python scalar;
    `_OTHER`, any other leaf or pytree node (device arrays, None and NumPy values of
    `EXACT_NUMPY` dtypes key alike in either mode)."""
    found = 0
    for x in tree.values() if type(tree) is dict else tree:
        t = type(x)
        if t is array_type or t in EXACT_NUMPY_SCALARS or x is None or t is _KEY_ARRAY:
            continue
        if t is np.ndarray:
            if not x.dtype.isnative:
                return _NON_NATIVE
            if x.nbytes >= in_place_from:
                found |= _LARGE
            if x.dtype not in EXACT_NUMPY:
                found |= _NARROWING
        elif t in CONTAINERS:
            inner = _host_leaves(x, array_type, in_place_from)
            if inner & _NON_NATIVE:
                return _NON_NATIVE
            found |= inner
        elif t in PYTHON_SCALARS:
            found |= _PYTHON_SCALAR
        elif isinstance(x, np.generic):
            found |= _NARROWING
        elif isinstance(x, np.ma.MaskedArray):
            return _NON_NATIVE  # (the checked call refuses it: the transfer drops the mask)
        else:
            found |= _OTHER
    return found


def _mode_scalars(tree) -> bool:
    """Whether a call's arguments hold a Python scalar whose dtype x64 mode sets (a float,
    an int or a complex: not a bool)."""
    try:
        return any(type(x) in (float, int, complex) for x in tree_util.tree_leaves(tree))
    except ValueError:  # a dict whose keys do not sort: nothing learnt
        return False


def _block(out, array_type) -> None:
    """Waits until every result in `out` (an array or a pytree of them) is computed."""
    if type(out) is array_type:
        out.block_until_ready()
        return
    for leaf in tree_util.tree_leaves(out):
        if type(leaf) is array_type:
            leaf.block_until_ready()
