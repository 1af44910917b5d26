"""The two fronts of the native dispatch (aotkit/backends/dispatch.py, `native_dispatcher`): the
C front (aotkit/_speedups.c) and the Python `call` it stands in for must give the same
results, dtypes and errors on every call.

Oracle: each other, and the Python front is itself checked against NumPy and JAX across the
suite. Calls are made more than once, so that the later ones take jaxlib's cached fast path.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
import textwrap
import traceback

import jax
import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import aotkit
from aotkit import _native, backends
from aotkit.backends import dispatch, host_inputs
from tests.backends.test_host_inputs import host_array

AOTKIT_DIR = os.path.dirname(os.path.abspath(aotkit.__file__))
BUILT = _native.Front
needs_c = pytest.mark.skipif(BUILT is None, reason="aotkit._speedups is not built (no C compiler)")


@pytest.fixture(params=["c", "python"])
def front(request, monkeypatch):
    """Which front the jits and compiled functions made in the test get."""
    if request.param == "c" and BUILT is None:
        pytest.skip("aotkit._speedups is not built (no C compiler at install)")
    monkeypatch.setattr(dispatch, "_Front", BUILT if request.param == "c" else None)
    return request.param


def _aotkit_frames(error: BaseException) -> list[str]:
    frames = traceback.extract_tb(error.__traceback__)
    return [f.name for f in frames if os.path.abspath(f.filename).startswith(AOTKIT_DIR)]


def test_the_c_front_is_built_where_a_c_compiler_is():
    compiler = shutil.which(os.environ.get("CC", "cc"))
    header = os.path.join(sysconfig.get_paths()["include"], "Python.h")
    if compiler is None or not os.path.exists(header):
        pytest.skip("no C compiler or Python headers: the install leaves the C front out")
    assert BUILT is not None, "the install had a C compiler but did not build aotkit._speedups"


def test_without_the_c_part_aotkit_runs_on_its_python_stand_ins():
    # A child process, as after an install that found no C compiler.
    code = textwrap.dedent(
        """
        import sys
        sys.modules["aotkit._speedups"] = None  # its import now fails
        import numpy as np
        import aotkit
        from aotkit import _native
        assert _native.Front is None and _native.Dispatching.__module__ == "aotkit._native"
        from aotkit.tracing import core
        assert _native.Binder is None and core.bind is core.python_bind
        jitted = aotkit.jit(lambda x, y: x * y)
        compiled = aotkit.lower(lambda x: x + 1, aotkit.spec("f32[2]")).compile()
        for _ in range(2):
            out = jitted(np.arange(2, dtype=np.float32), 2.0)
            assert out.dtype == np.float32 and out.tolist() == [0.0, 2.0], out
            assert compiled(np.ones(2, np.float32)).tolist() == [2.0, 2.0]
        print(type(jitted._dispatch).__name__, type(compiled._call).__name__)
        compiled([1.0, 2.0])
        """
    )
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert child.returncode == 1, child.stderr  # the last call's error, not a signal
    assert child.stdout.split() == ["function", "function"]
    assert "TypeError: Compiled 'lambda': function compiled for" in child.stderr


def test_a_c_part_of_another_version_is_not_used():
    code = textwrap.dedent(
        """
        import sys, types, warnings
        stale = types.ModuleType("aotkit._speedups")
        stale.VERSION, stale.__file__ = 0, "_speedups.so"  # built from an older source
        sys.modules["aotkit._speedups"] = stale
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            import aotkit
            from aotkit import _native
        assert _native.Front is None
        print(aotkit.jit(lambda x: x + 1)(1.0))
        print(*[str(w.message) for w in caught if w.category is RuntimeWarning])
        """
    )
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert child.returncode == 0, child.stderr
    first, warning = child.stdout.splitlines()
    assert first == "2.0"
    assert "was built from another version of aotkit/_speedups.c" in warning
    assert "reinstall aotkit (pip install -e . in a checkout)" in warning


# A client that copies every NumPy argument under IN_PLACE_FROM bytes while the call runs.
_IN_PLACE_ONLY = host_inputs.CopiedInCall(host_inputs.IN_PLACE_FROM, 0)


def _front_parts(**changes) -> dict:
    """Keyword arguments of a C `Front` (stand-in callables), with `changes`."""
    parts = dict(
        wide=id, narrow=id, slow=id, failed=id, clear_cache=id, settle=id,
        scalars_64=[None], unread=(), **dispatch.front_tables(_IN_PLACE_ONLY),
    )  # fmt: skip
    return {**parts, **changes}


class _Reversed(np.ndarray):
    """An array type whose `(3, 5)` array is `(5, 3)`: not what the front reads back."""

    def __new__(cls, shape, dtype):
        return np.ndarray.__new__(cls, tuple(reversed(shape)), dtype)


class _Small:
    """Not an array, and smaller than the array head the C front reads."""

    def __init__(self, shape, dtype):
        pass


HEAD = r"^aotkit\._speedups: NumPy's array head is not the one this build reads$"
UNREAD = r"^unread: a tuple of positional argument indices, 0 to 63$"


class _NoTruth:
    def __bool__(self):
        raise ZeroDivisionError("no truth")


@needs_c
@pytest.mark.parametrize(
    ("changes", "error", "message"),
    [
        ({"exact_dtypes": ()}, ValueError, r"^exact_dtypes: 1 to 32 dtypes, got 0$"),
        (
            {"python_scalars": frozenset((bool, int, float, complex, str, bytes, list, dict, set))},
            ValueError,
            r"^python_scalars: at most 8 types, got 9$",
        ),
        (
            {"in_place_from": 4096, "staged_from": 2048},
            ValueError,
            r"^in_place_from and staged_from: 0 <= in_place_from <= staged_from, got 4096 and "
            r"2048$",
        ),
        (
            {"copied_below": -1},
            ValueError,
            rf"^copied_below: 0 <= copied_below <= staged_from, got -1 and "
            rf"{host_inputs.STAGED_FROM}$",
        ),
        (
            {"copied_below": host_inputs.STAGED_FROM + 1},
            ValueError,
            rf"^copied_below: 0 <= copied_below <= staged_from, got {host_inputs.STAGED_FROM + 1}"
            rf" and {host_inputs.STAGED_FROM}$",
        ),
        ({"ndarray_type": _Reversed}, RuntimeError, HEAD),
        ({"ndarray_type": _Small}, RuntimeError, HEAD),
        (
            {"wide_dtypes": (np.dtype(np.float64),) * 33},
            ValueError,
            r"^wide_dtypes: 0 to 32 dtypes, got 33$",
        ),
        (
            {"wide_scalars": type("Frozen", (frozenset,), {})()},
            TypeError,
            r"^Front: exact_scalars, wide_scalars and python_scalars must be frozensets \(not "
            r"of a subclass\)$",
        ),
        ({"scalars_64": (None,)}, TypeError, r"must be list, not tuple"),
        ({"copy_arrays": _NoTruth()}, ZeroDivisionError, r"^no truth$"),
        ({"unread": [1]}, TypeError, r"must be tuple, not list"),
        ({"unread": (64,)}, ValueError, UNREAD),
        ({"unread": (-1,)}, ValueError, UNREAD),
        ({"unread": (True,)}, ValueError, UNREAD),
        ({"unread": (2**70,)}, ValueError, UNREAD),
    ],
    ids=[
        "no dtypes", "too many scalar types", "bounds", "copied below 0", "copied above staged",
        "another array type", "a small object",
        "too many wide dtypes", "a frozenset subclass", "scalars_64 not a list",
        "copy_arrays without a truth value", "unread not a tuple", "unread past 63",
        "unread negative", "unread a bool", "unread past a C long",
    ],
)  # fmt: skip
def test_the_c_front_refuses_what_it_cannot_read(changes, error, message):
    with pytest.raises(error, match=message):
        BUILT(**_front_parts(**changes))


@needs_c
def test_a_front_that_cannot_read_numpys_arrays_leaves_calls_to_the_python_one(monkeypatch):
    monkeypatch.setattr(
        dispatch, "_Front", lambda **parts: BUILT(**{**parts, "ndarray_type": _Small})
    )
    with pytest.warns(RuntimeWarning, match=r"this build reads; calls take the Python front$"):
        compiled = aotkit.lower(lambda x: x * 2, aotkit.spec("f32[2]")).compile()
    assert compiled._call.__name__ == "call"
    for _ in range(2):
        np.testing.assert_array_equal(compiled(np.ones(2, np.float32)), [2.0, 2.0])


def _recording_front(calls: list, **changes):
    """A C `Front` whose callables note what each call went to (a call returns its first
    argument: a NumPy result is one `settle` waits for)."""

    def note(name):
        def record(*args):
            calls.append((name, len(args)))
            return args[0] if args else None

        return record

    noted = {name: note(name) for name in ("wide", "narrow", "slow", "settle")}
    return BUILT(**_front_parts(**{**noted, **changes}))


@needs_c
@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ((np.ones(4, np.float32),), ["wide"]),
        ((np.ones(600, np.float32),), ["wide", "settle"]),  # may be read in place
        ((np.ones(600, np.float32), np.ones(3, np.int32)), ["wide", "settle"]),
        ((np.ones(host_inputs.STAGED_FROM // 4 - 1, np.float32),), ["wide", "settle"]),
        ((np.ones(host_inputs.STAGED_FROM // 4, np.float32),), ["slow"]),  # may be staged
        ((np.ones(600, np.float64),), ["slow"]),  # x64 off narrows it: the checked call
        ((np.ones(600, np.float32), 0.5), ["slow"]),  # x64 switched around it
        ((np.ones(4, np.float32), 0.5), ["narrow"]),
        (([np.ones(600, np.float32)],), ["slow"]),  # in a container: prepared by `slow`
        (({"x": np.ones(4, np.float32)},), ["wide"]),
        ((np.ones(600, np.float32).astype(">f4"),), ["slow"]),
    ],
    ids=[
        "small", "in place", "in place and small", "largest in place", "staged",
        "f64", "in place with a scalar", "small with a scalar", "in place in a list",
        "small in a dict", "big-endian",
    ],
)  # fmt: skip
def test_what_the_c_front_takes_and_waits_for(args, expected):
    calls = []
    out = _recording_front(calls)(*args)
    assert [name for name, _ in calls] == expected
    # What the call gave, whether or not it was waited for: a list or dict as the call's own
    # copy (another thread may change the caller's while the call runs).
    if type(args[0]) in (list, dict):
        assert out == args[0] and out is not args[0]
    else:
        assert out is args[0]
    if "settle" in expected:
        assert calls[-1] == ("settle", 1)


@needs_c
@pytest.mark.parametrize(
    ("args", "expected", "copied"),
    [
        ((np.ones(4, np.float32),), ["wide"], [True]),
        ((np.ones(600, np.float32), jax.numpy.ones(2)), ["wide"], [True, False]),
        ((np.float32(1.0), np.ones(3, np.int32)), ["wide"], [False, True]),
        # x64 switched around it by the Python front, which copies the array itself
        ((np.ones(4, np.float32), 0.5), ["slow"], [False, False]),
        (([np.ones(4, np.float32)],), ["slow"], [False]),  # nested: `slow` copies it
        ((np.ones(host_inputs.STAGED_FROM // 4, np.float32),), ["slow"], [False]),
        (tuple(np.ones(2, np.float32) for _ in range(10)), ["wide"], [True] * 10),
    ],
    ids=[
        "one array", "array and device array", "numpy scalar and array", "with a scalar",
        "in a list", "staged size", "more than the stack holds",
    ],
)  # fmt: skip
def test_a_front_that_copies_arrays_hands_copies_on_and_waits_for_nothing(args, expected, copied):
    """With `copy_arrays` (a client that may read NumPy arguments after the call) the C front
    calls the dispatch with copies of the positional arrays it would otherwise wait for."""
    calls, given = [], []

    def wide(*a):
        calls.append(("wide", len(a)))
        given.append(a)
        return a[0]

    def narrow(*a):
        calls.append(("narrow", len(a)))
        given.append(a)
        return a[0]

    def slow(*a):
        calls.append(("slow", len(a)))
        given.append(a)
        return a[0]

    front = BUILT(**_front_parts(
        wide=wide, narrow=narrow, slow=slow, settle=lambda out: calls.append(("settle", 1)),
        in_place_from=0, copy_arrays=True,
    ))  # fmt: skip
    before = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    front(*args)
    assert [name for name, _ in calls] == expected  # never `settle`
    (got,) = given
    assert len(got) == len(args)
    for g, a, b, was_copied in zip(got, args, before, copied, strict=True):
        if type(a) is list:  # (the call's own list: its array as the caller's)
            assert g[0] is a[0]
            continue
        assert (g is not a) == was_copied
        if was_copied:
            assert type(g) is np.ndarray and not np.shares_memory(g, a)
            assert g.dtype == a.dtype and g.shape == a.shape
            np.testing.assert_array_equal(g, b)


COPIED = host_inputs.COPIED_IN_CALL_BELOW


@pytest.mark.parametrize(
    ("nbytes", "offset", "waits"),
    [
        (4096, 16, False),  # not aligned, under COPIED: the transfer copies it in the call
        (4096, 0, True),  # aligned: the transfer may read it in place
        (COPIED - 64, 48, False),
        (COPIED, 16, True),  # copied after the call returns
        (COPIED, 0, True),
    ],
    ids=["unaligned", "aligned", "largest unaligned", "unaligned at COPIED", "aligned at COPIED"],
)
def test_a_client_that_copies_in_the_call_is_not_waited_for_on_unaligned_arrays(
    front, monkeypatch, nbytes, offset, waits
):
    """jaxlib's CPU client copies a host array under COPIED_IN_CALL_BELOW bytes that it does
    not read in place while the call runs: such a call returns without waiting for its
    results (either front); any other array of IN_PLACE_FROM bytes or more is waited for."""
    waited = []
    real = dispatch._block

    def block(out, array_type):
        waited.append(out)
        real(out, array_type)

    monkeypatch.setattr(dispatch, "_block", block)
    call = backends.get("cpu").jit_dispatcher("f", None, lambda x64, args, kw: (args[0] + 1, None))
    x = host_array(nbytes, offset=offset)
    np.testing.assert_array_equal(np.asarray(call(x)), x + 1)
    assert bool(waited) == waits


@pytest.mark.parametrize(
    "args",
    [
        (np.ones(1, np.float32),),
        (host_array(4096, offset=16),),
        (host_array(4096),),
        (host_array(64, offset=16), np.ones(3, np.int32)),
        ([np.ones(4, np.float32), (np.zeros(2, np.int8),)],),
        ({"x": np.ones(4, np.float32)},),
        (np.ones(host_inputs.STAGED_FROM // 4, np.float32),),
        (np.float32(2.0), 2.0, jax.numpy.ones(4)),
    ],
    ids=[
        "one element", "4 KiB unaligned", "4 KiB aligned", "two small", "nested", "in a dict",
        "staged", "scalars and a device array",
    ],
)  # fmt: skip
def test_a_client_not_known_to_copy_in_the_call_gets_copies_of_numpy_arrays(
    front, monkeypatch, args
):
    """A plugin's transfer may read any NumPy argument after the call returns (a TPU's does):
    there every NumPy array is copied first (either front), so the call need not wait;
    scalars and device arrays go as they are."""
    waited = []
    monkeypatch.setattr(dispatch, "_block", lambda out, array_type: waited.append(out))
    monkeypatch.setattr(backends.get("cpu"), "copied_in_call", host_inputs.NONE_KNOWN)
    # A miss's `run` returns what the C++ dispatch was given.
    call = backends.get("cpu").jit_dispatcher("f", None, lambda x64, args, kw: (args, None))
    got = jax.tree_util.tree_leaves(call(*args), is_leaf=lambda x: x is None)
    want = jax.tree_util.tree_leaves(args)
    assert not waited
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        if type(w) is np.ndarray:
            assert type(g) is np.ndarray and g is not w and not np.shares_memory(g, w)
            np.testing.assert_array_equal(g, w)
            assert g.dtype == w.dtype and g.shape == w.shape
        else:
            assert g is w


@pytest.mark.parametrize("client", ["jaxlib's cpu", "none known"])
@pytest.mark.parametrize(
    "nbytes",
    [64, host_inputs.IN_PLACE_FROM, host_inputs.STAGED_FROM],
    ids=["small", "in place", "staged"],
)
def test_an_unread_argument_goes_to_the_dispatch_as_it_is(front, monkeypatch, client, nbytes):
    """A positional NumPy argument the executable does not read (a leaf jax.jit pruned) is
    neither copied, staged nor waited for, whatever its size; the others are handled as
    always (under a client not known to copy, copied)."""
    waited = []
    monkeypatch.setattr(dispatch, "_block", lambda out, array_type: waited.append(out))
    copied = host_inputs.JAXLIB_CPU if client == "jaxlib's cpu" else host_inputs.NONE_KNOWN
    call = dispatch.native_dispatcher(
        "f", None, lambda x64, args, kw: (args, None), copied, unread=(1,)
    )
    kept, unread = np.ones(4, np.float32), host_array(nbytes)  # aligned: readable in place
    got = call(kept, unread, np.float32(2))
    assert got[1] is unread
    assert (got[0] is kept) == (client == "jaxlib's cpu")
    np.testing.assert_array_equal(got[0], kept)
    assert not waited


@needs_c
@pytest.mark.parametrize(
    ("args", "x64", "scalars_64", "expected"),
    [
        ((np.ones(4, np.float64),), True, None, ["wide"]),
        ((np.ones(600, np.float64),), True, None, ["wide", "settle"]),  # read in place
        ((np.ones(4, np.float64),), False, None, ["slow"]),  # x64 switched around it
        ((np.float64(2.0),), True, None, ["wide"]),
        ((np.ones(4, np.float64), 0.5), True, None, ["wide"]),  # a scalar keys as x64's
        ((np.ones(4, np.float32), 0.5), True, True, ["wide"]),  # programs take x64 scalars
        ((np.ones(4, np.float32), 0.5), True, False, ["narrow"]),  # they take 32-bit ones
        ((np.ones(4, np.float32), 0.5), False, True, ["narrow"]),
        ((np.ones(600, np.float32), 0.5), True, True, ["wide", "settle"]),
        (([np.ones(4, np.float64)],), True, None, ["wide"]),
    ],
    ids=[
        "f64 x64", "f64 in place x64", "f64 x64 off", "f64 scalar x64", "f64 and a scalar",
        "scalar, 64-bit programs", "scalar, 32-bit programs", "scalar x64 off",
        "in place with a scalar, 64-bit programs", "f64 in a list",
    ],
)  # fmt: skip
def test_where_the_c_front_sends_64_bit_values_and_python_scalars(args, x64, scalars_64, expected):
    """A 64-bit NumPy value keys as itself in x64 mode only: there the call goes to `wide`
    (a Python scalar with it keyed as x64 mode's, as jax.jit's), else to the Python front,
    which switches the mode; a Python scalar alone goes to `wide` in x64 mode where the
    programs take x64 mode's scalars (`scalars_64`, learnt by the dispatcher)."""

    class Mode:
        value = x64

    calls = []
    out = _recording_front(calls, x64=Mode(), scalars_64=[scalars_64])(*args)
    assert [name for name, _ in calls] == expected
    assert out is args[0] or (type(args[0]) is list and out == args[0])


@needs_c
def test_an_x64_mode_that_cannot_be_read_is_the_calls_error():
    class Broken:
        @property
        def value(self):
            raise RuntimeError("no mode")

    with pytest.raises(RuntimeError, match="^no mode$"):
        _recording_front([], x64=Broken())(np.ones(4, np.float64))


@needs_c
def test_the_c_front_waits_for_a_device_array_result_by_its_own_method():
    class Result:
        waited = 0

        def block_until_ready(self):
            Result.waited += 1
            return self

    result = Result()
    calls = []
    front = _recording_front(calls, array_type=Result, wide=lambda *args: result)
    assert front(np.ones(600, np.float32)) is result
    assert Result.waited == 1 and not calls  # not `settle`
    assert front(np.ones(4, np.float32)) is result
    assert Result.waited == 1  # a small array is copied: nothing to wait for


@needs_c
def test_a_failed_wait_is_the_calls_error():
    def settle(out):
        raise RuntimeError("the execution failed")

    front = BUILT(**_front_parts(wide=lambda *a: [a[0]], settle=settle))
    with pytest.raises(RuntimeError, match=r"^the execution failed$"):
        front(np.ones(600, np.float32))


@needs_c
def test_a_dispatching_object_without_its_dispatch_says_so():
    class Bare(_native.Dispatching):
        pass

    with pytest.raises(TypeError, match=r"^Bare: this object was not initialised \(its _dispatch "):
        Bare()(1)


def test_compiled_and_jit_call_the_front_in_use(front):
    compiled = aotkit.lower(lambda x: x + 1, aotkit.spec("f32[]")).compile()
    jitted = aotkit.jit(lambda x: x + 1)
    assert float(jitted(1.0)) == float(compiled(1.0)) == 2.0
    assert (type(jitted._dispatch).__name__ == "Front") == (front == "c")
    assert (type(compiled._call).__name__ == "Front") == (front == "c")


def test_a_donated_array_is_refused_by_name(front):
    jitted = aotkit.jit(lambda x: x * 2, donate_argnums=0)
    for _ in range(2):  # the second call's signature is cached: the C++ side fails first
        x = jax.device_put(np.ones(3, np.float32))
        np.testing.assert_array_equal(jitted(x), np.full(3, 2, np.float32))
        with pytest.raises(ValueError, match=r"argument x was deleted or donated") as e:
            jitted(x)
        assert _aotkit_frames(e.value) == []


def test_a_masked_array_is_refused_not_stripped_of_its_mask(front):
    """A masked array passed for an array argument ran on its data, its mask dropped, with
    no word (NumPy's result is masked); refused by name, also once the signature of plain
    arrays is in the C++ dispatch's cache, and in a container."""
    jitted = aotkit.jit(lambda x: x * 2)
    compiled = aotkit.lower(lambda x: x * 2, aotkit.spec("f64[2]")).compile()
    masked = np.ma.array([1.0, 2.0], mask=[False, True])
    message = (
        "argument x is a NumPy masked array, whose mask a program would drop; pass "
        "x.filled(value), or the data (x.data) and the mask (np.ma.getmaskarray(x)) as two "
        "arguments"
    )
    for _ in range(2):
        for fn in (jitted, compiled):
            np.testing.assert_array_equal(fn(np.array([1.0, 2.0])), [2.0, 4.0])
            with pytest.raises(TypeError, match=re.escape(message) + "$"):
                fn(masked)
    with pytest.raises(TypeError, match=r"argument x\[0\] is a NumPy masked array"):
        aotkit.jit(lambda x: x[0] * 2)([masked])


def test_errors_leave_either_front_without_aotkits_frames(front):
    def broken(x):
        return x + np.ones(5, np.float32)

    jitted = aotkit.jit(broken)
    with pytest.raises(ValueError, match=r"shapes \(4,\) and \(5,\)") as e:
        jitted(np.ones(4, np.float32))
    assert _aotkit_frames(e.value) == []
    assert traceback.extract_tb(e.value.__traceback__)[-1].name == "broken"
    compiled = aotkit.lower(lambda x: x, aotkit.spec("f32[4]")).compile()
    for arg in (np.ones(3, np.float32), 1.5, np.float64(1.5)):
        with pytest.raises(TypeError, match=r"argument x expected f32\[4\]") as e:
            compiled(arg)
        assert _aotkit_frames(e.value) == []


def test_a_cleared_cache_is_filled_again(front):
    jitted = aotkit.jit(lambda x: x * 3)
    x = np.arange(4, dtype=np.int32)
    for _ in range(2):
        np.testing.assert_array_equal(jitted(x), x * 3)
        jitted.clear_cache()
    np.testing.assert_array_equal(jitted(x), x * 3)


WRAPS = {"top level": lambda a: a, "in a list": lambda a: [a], "keyword": lambda a: a}


@pytest.mark.parametrize("where", WRAPS)
@pytest.mark.parametrize(
    ("narrow", "wide"),
    [
        (np.array([1.5, 2.0], np.float32), np.array([1.0 + 2.0**-40, 2.0])),
        (np.float32(1.5), np.float64(1.0 + 2.0**-40)),
        (np.array([7, 8], np.int32), np.array([2**40 + 1, 8])),
    ],
    ids=["float arrays", "float scalars", "int arrays"],
)
def test_a_64_bit_value_never_takes_a_cached_32_bit_signature(front, where, narrow, wide):
    # With x64 off, jaxlib keys a float64 NumPy value like a float32 one and narrows it;
    # with a Python scalar in the call, the call runs in that mode. The float32 signature
    # cached first must not take the float64 value, in the call's tree or in a keyword.
    wrap = WRAPS[where]

    def f(x, s):
        return [v * s for v in x] if type(x) is list else x * s

    jitted = aotkit.jit(f)
    for value in (narrow, wide, narrow, wide):
        for _ in range(3):
            out = jitted(x=wrap(value), s=2) if where == "keyword" else jitted(wrap(value), 2)
            (leaf,) = jax.tree_util.tree_leaves(out)
            assert leaf.dtype == value.dtype
            np.testing.assert_array_equal(leaf, value * 2)
    spec = aotkit.spec(f"{np.dtype(narrow.dtype).name}[{','.join(map(str, np.shape(narrow)))}]")
    compiled = aotkit.lower(f, wrap(spec), aotkit.spec("f32[]")).compile()
    for _ in range(3):
        (leaf,) = jax.tree_util.tree_leaves(compiled(wrap(narrow), 2.0))
        np.testing.assert_array_equal(leaf, narrow * 2)
    with pytest.raises(TypeError, match=r"expected (f32|i32)\[.*\], got (f64|i64)"):
        compiled(wrap(wide), 2.0)


@pytest.mark.parametrize("x64", [False, True])
def test_python_ints_take_the_fast_path_and_get_aotkits_range_error(front, x64):
    # An int32 signature is cached; an int outside int32's range after it still gets
    # aotkit's own message (jaxlib's signature of such an int fails, and the call falls back).
    jitted = aotkit.jit(lambda x, n: x + n)
    x = np.arange(2, dtype=np.int32)
    with jax.enable_x64(x64):
        for n in (3, 3, 3, -(2**31), 2**31 - 2):
            out = jitted(x, n)
            assert out.dtype == np.int32
            np.testing.assert_array_equal(out, x + np.int32(n))
        for n in (2**31, -(2**31) - 1, 2**40):
            with pytest.raises(ValueError, match=rf"argument n is Python int {n}, out of range"):
                jitted(x, n)
    assert jitted.cache_info().traces == 1


# --- Both fronts, call by call, over argument kinds, dtypes, sizes and x64 modes.

DTYPES = [
    np.float32, np.float64, np.int32, np.int64, np.uint8, np.bool_, np.float16,
    ml_dtypes.bfloat16, np.complex64,
]  # fmt: skip
# () and (3,) broadcast with each other; (600,) float32 and wider reach `IN_PLACE_FROM`
# bytes (a call with such an array returns once its results are ready).
SHAPES = [(), (3,), (600,)]
KINDS = ["device", "numpy", "numpy scalar", "python", "swapped", "list", "dict", "nested"]
PYTHON_SCALARS = [True, 3, -2, 1.5, 2.0 - 1.0j]


def argument(kind: str, dtype, shape: tuple, scalar=1.5):
    """An argument of `kind`; NumPy and device values count 1, 2, 3, 1, ..."""
    if kind == "python":
        return scalar
    value = (np.arange(int(np.prod(shape))) % 3 + 1).reshape(shape).astype(dtype)
    if kind == "device":
        return jax.device_put(value)
    if kind == "numpy scalar":
        return value.reshape(-1)[0]
    if kind == "swapped":  # non-native byte order
        return value.astype(value.dtype.newbyteorder())
    if kind == "list":
        return [value]
    if kind == "dict":
        return {"value": value, "nothing": None}
    if kind == "nested":  # a Python scalar inside: the call runs with x64 off
        return ({"value": [value]}, scalar)
    return value


@st.composite
def calls(draw):
    """Up to three arguments of one shape or scalars (so that most calls broadcast)."""
    shape = draw(st.sampled_from(SHAPES))
    n = draw(st.integers(1, 3))
    return [
        argument(
            draw(st.sampled_from(KINDS)),
            draw(st.sampled_from(DTYPES)),
            draw(st.sampled_from([shape, ()])),
            draw(st.sampled_from(PYTHON_SCALARS)),
        )
        for _ in range(n)
    ]


@pytest.mark.parametrize("x64", [False, True])
def test_calls_with_containers_and_python_scalars_in_them_stay_on_the_fast_path(front, x64):
    # `f(params, x)`: a dict of lists of tuples of arrays, with a Python scalar in it.
    def f(params, x):
        for w, b in params["layers"]:
            x = x @ w + b
        return x * params["scale"]

    rng = np.random.default_rng(0)
    layers = [
        (rng.standard_normal((4, 4), np.float32), rng.standard_normal(4, np.float32))
        for _ in range(3)
    ]
    params = {"layers": [(jax.device_put(w), b) for w, b in layers], "scale": 0.5}
    x = rng.standard_normal((2, 4), np.float32)
    expected = x
    for w, b in layers:
        expected = expected @ w + b
    jitted = aotkit.jit(f)
    with jax.enable_x64(x64):
        for _ in range(3):
            out = jitted(params, x)
            assert out.dtype == np.float32
            np.testing.assert_allclose(out, expected * np.float32(0.5), rtol=1e-5)
        before = jitted.cache_info()
        for _ in range(3):
            jitted(params, x)
        assert jitted.cache_info() == before  # no call took the checked Python path


def _outcome(fn, args):
    """What a call gives: each output's type, dtype and values, or the error's type and
    text."""
    try:
        out = fn(*args)
    except Exception as e:  # noqa: BLE001 - the error is the outcome compared
        return ("error", type(e).__name__, str(e))
    leaves = jax.tree_util.tree_leaves(out)
    return ("ok", [(type(o).__name__, o.dtype.str, np.asarray(o).tolist()) for o in leaves])


def _both_fronts(args: list, x64: bool) -> None:
    def f(*xs):
        out = xs[0]
        for x in xs[1:]:
            out = out * x
        return out + out

    outcomes = {}
    for name, front in [("c", BUILT), ("python", None)]:
        dispatch._Front, saved = front, dispatch._Front
        try:
            with jax.enable_x64(x64):
                jitted = aotkit.jit(f)
                outcomes[name] = [_outcome(jitted, args) for _ in range(3)]
                compiled = jitted.lower(*args).compile() if outcomes[name][0][0] == "ok" else None
                if compiled is not None:
                    outcomes[name] += [_outcome(compiled, args) for _ in range(3)]
        finally:
            dispatch._Front = saved
        assert (type(jitted._dispatch).__name__ == "Front") == (name == "c")
    assert outcomes["c"] == outcomes["python"]


@needs_c
@pytest.mark.parametrize("x64", [False, True])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("kind", [k for k in KINDS if k != "python"])
def test_both_fronts_agree_on_one_argument(kind, dtype, shape, x64):
    _both_fronts([argument(kind, dtype, shape)], x64)


@needs_c
@pytest.mark.parametrize("x64", [False, True])
@pytest.mark.parametrize("scalar", PYTHON_SCALARS, ids=repr)
def test_both_fronts_agree_on_python_scalars(scalar, x64):
    _both_fronts([scalar], x64)
    _both_fronts([argument("numpy", np.float32, (3,)), scalar], x64)
    _both_fronts([argument("device", np.int32, (3,)), scalar], x64)


@needs_c
@settings(max_examples=60, deadline=None)
@given(args=calls(), x64=st.booleans())
def test_both_fronts_agree_on_every_call(args, x64):
    _both_fronts(args, x64)
