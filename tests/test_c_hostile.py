"""Hostile uses of aotkit's C part (aotkit/_speedups.c) and of what it trusts (issue 43):
objects that call themselves, objects never set up, arguments changed by another thread
while calls run, and traced arrays whose attributes a program sets.

Anything that could end the process runs in a child process, which must end without a
signal and with the expected message. Oracles: Python's own behaviour (RecursionError),
NumPy (`x.shape = ...`), and calls of the same function on values no thread changes.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import aotkit
import aotkit.numpy as anp
from aotkit import _native
from aotkit.backends import dispatch, host_inputs
from aotkit.errors import InPlaceWriteWarning
from aotkit.tracing import core

BUILT = _native.Front is not None
needs_c = pytest.mark.skipif(not BUILT, reason="aotkit._speedups is not built (no C compiler)")

# Run first in a child: the C part left out, as after an install without a C compiler.
WITHOUT_C = 'import sys\nsys.modules["aotkit._speedups"] = None\n'

# A C `Front` over stand-in callables that note what each call went to (children only).
FRONT_PARTS = """
import jax
import numpy as np
from aotkit import _native
from aotkit.errors import InPlaceWriteWarning
from aotkit.backends import dispatch, host_inputs
calls = []

def note(name):
    def record(*args):
        calls.append(name)
        return args[0] if args else None
    return record

def parts(**changes):
    made = dict(
        wide=note("wide"), narrow=note("narrow"), slow=note("slow"), failed=note("failed"),
        clear_cache=note("clear_cache"), settle=note("settle"),
        scalars_64=[None], unread=(), **dispatch.front_tables(host_inputs.JAXLIB_CPU),
    )
    return {**made, **changes}
"""


def _child(*parts: str, without_c: bool = False, timeout: int = 600):
    """Runs the code `parts` (each dedented) in a child process; fails the test if a signal
    ended it."""
    source = (WITHOUT_C if without_c else "") + "".join(textwrap.dedent(p) for p in parts)
    proc = subprocess.run(
        [sys.executable, "-c", source], capture_output=True, text=True, timeout=timeout
    )
    assert proc.returncode >= 0, f"killed by signal {-proc.returncode}:\n{proc.stderr[-3000:]}"
    return proc


def _last_error(proc) -> str:
    lines = proc.stderr.strip().splitlines()
    return lines[-1] if lines else ""


# --- 1. Objects whose call leads back to themselves -------------------------------------

CYCLES = {
    "a jit whose _dispatch is itself": """
        import aotkit
        j = aotkit.jit(lambda x: x + 1)
        calls = [j]
        j._dispatch, saved = j, j._dispatch
    """,
    "two jits whose _dispatch is the other": """
        import aotkit
        a, b = aotkit.jit(lambda x: x + 1), aotkit.jit(lambda x: x + 1)
        calls = [a, b]
        saved = a._dispatch
        a._dispatch, b._dispatch = b, a
        j = a
    """,
    "two instances of a subclass of Dispatching": """
        from aotkit import _native
        class Forwarding(_native.Dispatching):
            pass
        a, b = Forwarding(), Forwarding()
        calls = [a, b]
        a._dispatch, b._dispatch = b, a
        j, saved = a, lambda x: x + 1
    """,
}
RECURSION = {
    "c": "maximum recursion depth exceeded in a call of a jitted function whose _dispatch "
    "calls it again",
    "python": "maximum recursion depth exceeded while calling a Python object",
}


@pytest.mark.parametrize("part", ["c", "python"], ids=["C Dispatching", "Python stand-in"])
@pytest.mark.parametrize("cycle", list(CYCLES))
def test_a_dispatch_that_calls_itself_is_a_recursion_error(cycle, part):
    if part == "c" and not BUILT:
        pytest.skip("aotkit._speedups is not built (no C compiler)")
    calls = """
        for call in calls:
            try:
                call(1.0)
            except RecursionError as e:
                print("RecursionError:", e)
        j._dispatch = saved  # set right again, it works again
        print(float(j(1.0)))
    """
    proc = _child(CYCLES[cycle], calls, without_c=part == "python")
    assert proc.returncode == 0, proc.stderr[-3000:]
    *errors, last = proc.stdout.splitlines()
    n = 1 if cycle == "a jit whose _dispatch is itself" else 2
    assert errors == [f"RecursionError: {RECURSION[part]}"] * n
    assert last == "2.0"


@needs_c
def test_a_front_set_up_again_with_itself_behind_it_is_a_recursion_error():
    proc = _child(
        FRONT_PARTS,
        """
        front = _native.Front(**parts())
        front.__init__(**parts(slow=front))  # every call it does not take goes to itself
        print(front(np.ones(4, np.float32)) is not None, calls)
        front("a str: not taken")
        """,
    )
    assert proc.returncode == 1
    assert proc.stdout.splitlines() == ["True ['wide']"]
    assert _last_error(proc) == (
        "RecursionError: maximum recursion depth exceeded in a call through aotkit's C "
        "dispatch front"
    )


# --- 2. Objects never set up ------------------------------------------------------------

FRONT_UNSET = (
    r"TypeError: Front: this object was not initialised \(made by __new__ alone, or its "
    r"__init__ failed\); make one with Front\(wide=\.\.\., narrow=\.\.\., slow=\.\.\., \.\.\.\)$"
)
BINDER_UNSET = (
    r"TypeError: Binder: this object was not initialised \(made by __new__ alone, or its "
    r"__init__ failed\); make one with Binder\(fallback=\.\.\., rules=\.\.\., \.\.\.\)$"
)


def _dispatching_unset(name: str) -> str:
    return (
        rf"TypeError: {name}: this object was not initialised \(its _dispatch is not set\); "
        r"make one by calling its class, whose __init__ sets _dispatch$"
    )


NEW_FRONT = "unset = _native.Front.__new__(_native.Front)\n"
FAILED_FRONT = NEW_FRONT + (
    "try:\n    unset.__init__(**parts(exact_dtypes=()))\nexcept ValueError as e:\n    print(e)\n"
)
NEW_BINDER = "unset = _native.Binder.__new__(_native.Binder)\n"
FAILED_BINDER = NEW_BINDER + ("try:\n    unset.__init__()\nexcept TypeError as e:\n    print(e)\n")
UNSET = {
    "Front: a call": (NEW_FRONT + "unset(np.ones(3, np.float32))", FRONT_UNSET),
    "Front: a call without arguments": (NEW_FRONT + "unset()", FRONT_UNSET),
    "Front: a call with keywords": (NEW_FRONT + "unset(x=1)", FRONT_UNSET),
    "Front: a call with a list": (NEW_FRONT + "unset([1.0, 2.0])", FRONT_UNSET),
    "Front: slow": (NEW_FRONT + "unset.slow", FRONT_UNSET),
    "Front: clear_cache": (NEW_FRONT + "unset.clear_cache", FRONT_UNSET),
    "Front: a call after a failed __init__": (FAILED_FRONT + "unset(1.0)", FRONT_UNSET),
    "Binder: a call": (NEW_BINDER + "unset('sin')", BINDER_UNSET),
    "Binder: a call without arguments": (NEW_BINDER + "unset()", BINDER_UNSET),
    "Binder: a disabled one's call": (
        NEW_BINDER + "unset.enabled = False\nunset('sin')",
        BINDER_UNSET,
    ),
    "Binder: fallback": (NEW_BINDER + "unset.fallback", BINDER_UNSET),
    "Binder: fill": (NEW_BINDER + "unset.fill(*[None] * 7)", BINDER_UNSET),
    "Binder: a call after a failed __init__": (FAILED_BINDER + "unset('sin')", BINDER_UNSET),
    "Dispatching: a call": (
        "_native.Dispatching.__new__(_native.Dispatching)(1)",
        _dispatching_unset(r"aotkit\._speedups\.Dispatching"),
    ),
    "Dispatching: a jit made by __new__": (
        "import aotkit.api\naotkit.api.Jitted.__new__(aotkit.api.Jitted)(1.0)",
        _dispatching_unset("Jitted"),
    ),
    "Dispatching: a jit whose _dispatch was deleted": (
        "import aotkit\nj = aotkit.jit(lambda x: x)\ndel j._dispatch\nj(x=1.0)",
        _dispatching_unset("Jitted"),
    ),
}
PRINTED = {
    "Front: a call after a failed __init__": ["exact_dtypes: 1 to 32 dtypes, got 0"],
    "Binder: a call after a failed __init__": ["Binder: missing keyword argument fallback"],
}


@needs_c
@pytest.mark.parametrize("case", list(UNSET))
def test_an_object_never_set_up_refuses_every_entry(case):
    code, message = UNSET[case]
    proc = _child(FRONT_PARTS if case.startswith("Front") else "from aotkit import _native\n", code)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert re.match(message, _last_error(proc)), _last_error(proc)
    assert proc.stdout.splitlines() == PRINTED.get(case, [])


@needs_c
def test_a_front_whose_init_fails_again_keeps_what_it_had():
    # Each __init__ below fails at another step; the front keeps its first setup whole.
    proc = _child(
        FRONT_PARTS,
        """
        class Small:  # smaller than the array head the front reads
            def __init__(self, shape, dtype):
                pass

        class Frozen(frozenset):
            pass

        front = _native.Front(**parts())
        nine = frozenset((bool, int, float, complex, str, bytes, list, set, dict))
        failures = [
            parts(exact_dtypes=(np.dtype(np.int8),) * 33),
            parts(python_scalars=nine),
            parts(exact_scalars=Frozen(host_inputs.EXACT_NUMPY_SCALARS)),
            parts(exact_dtypes=(np.dtype(np.float32), object())),
            parts(ndarray_type=Small),
            parts(in_place_from=-1),
            parts(wide=1, narrow=2, slow=3, ndarray_type=Small),
        ]
        for bad in failures:
            try:
                front.__init__(**bad)
            except (TypeError, ValueError, RuntimeError, AttributeError) as e:
                print(type(e).__name__)
            calls.clear()
            small = np.ones(4, np.float32)
            assert front(small) is small and front("other") == "other" and front(1.5) == 1.5
            print(calls, front.slow.__name__)
        """,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert lines[0::2] == [
        "ValueError", "ValueError", "TypeError", "AttributeError", "RuntimeError", "ValueError",
        "RuntimeError",
    ]  # fmt: skip
    assert lines[1::2] == ["['wide', 'slow', 'narrow'] record"] * 7


@needs_c
@pytest.mark.parametrize(
    ("change", "error", "message"),
    [
        (
            {"exact_scalars": "subclass"},
            TypeError,
            r"^Front: exact_scalars, wide_scalars and python_scalars must be frozensets \(not of a "
            r"subclass\)$",
        ),
        ({"exact_dtypes": "itemsize 0"}, ValueError, r"^exact_dtypes: .* has item size 0$"),
    ],
    ids=["a frozenset subclass", "an item size of 0"],
)
def test_a_front_refuses_tables_it_cannot_read_safely(change, error, message):
    class Frozen(frozenset):
        def __iter__(self):  # would hand out types the set does not hold
            return iter([int])

    class NoSize:
        itemsize = 0

    parts = dict(
        wide=id, narrow=id, slow=id, failed=id, clear_cache=id, settle=id,
        scalars_64=[None], unread=(), **dispatch.front_tables(host_inputs.JAXLIB_CPU),
    )  # fmt: skip
    if "exact_scalars" in change:
        parts["exact_scalars"] = Frozen(host_inputs.EXACT_NUMPY_SCALARS)
    else:
        parts["exact_dtypes"] = (np.dtype(np.float32), NoSize())
    with pytest.raises(error, match=message):
        _native.Front(**parts)


def _binder_parts() -> dict:
    given = {}
    with pytest.MonkeyPatch.context() as patch:  # what `bind` is made with
        patch.setattr(_native, "Binder", lambda **kwargs: given.update(kwargs))
        core._binder(core.python_bind, False)
    return given


@needs_c
def test_a_binder_refuses_a_slot_of_another_class():
    class Wide:
        __slots__ = tuple(f"pad{i}" for i in range(40)) + ("value",)

    class Borrowing:  # `value` names an offset past the end of its own instances
        __slots__ = tuple(s for s in core.Tracer.__slots__ if s not in ("value", "__weakref__"))
        value = Wide.value

    with pytest.raises(TypeError, match=r"^Binder: <class '.*Borrowing'>\.value is not a slot$"):
        _native.Binder(**{**_binder_parts(), "tracer": Borrowing})


AOTKIT_LIKE = "<aotkit.numpy-like helper of tests/test_c_hostile.py>"


@needs_c
def test_a_binder_refuses_to_be_set_up_again_while_it_makes_an_op(monkeypatch):
    # Its callables run Python code after it read its classes' offsets: an __init__ there
    # (with other classes) would change them under it.
    monkeypatch.setitem(core._internal_files, AOTKIT_LIKE, True)
    namespace = {}
    exec(compile("def sine(x, bind):\n    return bind('sin', x)[0]\n", AOTKIT_LIKE, "exec"),
         namespace)  # fmt: skip
    given = _binder_parts()

    def set_up_again(op, values):
        bind.__init__(**given)
        return False

    bind = _native.Binder(**{**given, "has_equal_user": set_up_again})

    def f(x):
        for _ in range(2):  # the second uses `x` again: the C part asks for equal ops
            y = namespace["sine"](x, bind)
        return y

    with pytest.raises(
        RuntimeError,
        match=r"^Binder: cannot be set up again while it makes an op \(its callables called "
        r"__init__\); make another Binder instead$",
    ):
        aotkit.lower(f, aotkit.spec("f32[4]"))
    # Once the op is made it can be set up again, and it still makes ops.
    bind.__init__(**given)
    got = aotkit.lower(f, aotkit.spec("f32[4]")).compile()(np.float32([0, 1, 2, 3]))
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, np.sin(np.float32([0, 1, 2, 3])), rtol=1e-6)


# --- 3. Arguments another thread changes while calls run (issue 43, item 4) -----------

RACE = """
import json, sys, threading
import numpy as np
import aotkit
from aotkit import _native
from aotkit.errors import InPlaceWriteWarning
from aotkit.backends import dispatch

sys.setswitchinterval(1e-5)  # threads switch often: the changes land inside calls
VALUES = [np.float32(2), np.int32(3), 1.5, np.ones(3, np.float32), np.float32(5), np.int32(-1)]

def f(xs):
    return [x * 2 for x in xs]

def leaf(out):
    a = np.asarray(out)
    return [a.dtype.str, list(a.shape), a.tolist()]

report = {}
for front in ("c", "python"):
    if front == "c" and _native.Front is None:
        continue
    dispatch._Front = _native.Front if front == "c" else None
    jitted = aotkit.jit(f)
    # The oracle: each value's result, from calls no thread changes.
    expected = [leaf(jitted([v])[0]) for v in VALUES]
    compiled = aotkit.lower(f, [aotkit.spec("f32[]"), aotkit.spec("f32[]")]).compile()
    for name, fn in (("jit", jitted), ("compiled", compiled)):
        xs = [np.float32(1), np.float32(2)]
        expected_here = expected + [leaf(fn([np.float32(1), np.float32(2)])[0]),
                                    leaf(fn([np.float32(2), np.float32(1)])[0])]
        stop = threading.Event()

        def change():
            i = 0
            while not stop.is_set():
                i += 1
                if i % 3 == 0 and len(xs) < 3:
                    xs.append(VALUES[i % len(VALUES)])
                elif i % 3 == 1 and len(xs) > 1:
                    xs.pop()
                elif xs:
                    xs[i % len(xs)] = VALUES[(i * 7) % len(VALUES)]

        thread = threading.Thread(target=change)
        thread.start()
        outcomes = {"right": 0, "wrong": [], "TypeError": [], "other": []}
        try:
            for _ in range(N_CALLS):
                try:
                    out = fn(xs)
                except TypeError as e:
                    outcomes["TypeError"].append(str(e))
                    continue
                except Exception as e:
                    outcomes["other"].append(f"{type(e).__name__}: {e}")
                    continue
                leaves = [leaf(o) for o in out]
                if 1 <= len(leaves) <= 3 and all(l in expected_here for l in leaves):
                    outcomes["right"] += 1
                else:
                    outcomes["wrong"].append(repr(leaves))
        finally:
            stop.set()
            thread.join()
        report[f"{front} {name}"] = outcomes
print(json.dumps(report))
"""


def test_a_list_another_thread_changes_is_one_snapshot_per_call():
    proc = _child(RACE.replace("N_CALLS", "1500"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.splitlines()[-1])
    assert set(report) == {"c jit", "c compiled", "python jit", "python compiled"} - (
        set() if BUILT else {"c jit", "c compiled"}
    )
    for name, outcomes in report.items():
        assert outcomes["other"] == [], (name, outcomes["other"][:3])  # SystemError, PJRT
        assert outcomes["wrong"] == [], (name, outcomes["wrong"][:3])
        if name.endswith("jit"):  # each call's own structure: traced, compiled and run
            assert outcomes["TypeError"] == [], (name, outcomes["TypeError"][:3])
            assert outcomes["right"] == 1500
        else:  # compiled for two f32 scalars: the call is refused by what it saw
            for message in outcomes["TypeError"]:
                assert re.match(r"^Compiled 'f': (argument \S+|function compiled for)", message)
            assert outcomes["right"] + len(outcomes["TypeError"]) == 1500


class _Key:
    """A dict key whose comparison (the flattening sorts dict keys) changes a list: a
    change that lands between two flattenings of one call, every time."""

    def __init__(self, name, changing: list):
        self.name, self.changing = name, changing

    def __hash__(self):
        return hash(self.name)

    def __eq__(self, other):
        return type(other) is _Key and other.name == self.name

    def __lt__(self, other):
        if len(self.changing) > 1:
            self.changing.pop()
        else:
            self.changing.append(np.float32(4))
        return self.name < other.name


@pytest.fixture(params=["c", "python"])
def front(request, monkeypatch):
    """Which front the jits and compiled functions made in the test get."""
    if request.param == "c" and not BUILT:
        pytest.skip("aotkit._speedups is not built (no C compiler at install)")
    monkeypatch.setattr(dispatch, "_Front", _native.Front if request.param == "c" else None)
    return request.param


def test_a_list_changed_between_two_flattenings_of_a_call_is_not_seen(front):
    def f(d, xs):
        return [x * d[_Key("a", [])] for x in xs]

    xs = [np.float32(1), np.float32(2)]
    d = {_Key("a", xs): np.float32(2), _Key("b", xs): np.float32(0)}
    jitted = aotkit.jit(f)
    for _ in range(4):
        seen = list(xs)
        out = jitted(d, xs)  # keyed, traced and run on `seen`: the changes come after
        assert [o.dtype for o in out] == [np.float32] * len(seen)
        np.testing.assert_array_equal(out, np.float32(seen) * 2)
    compiled = jitted.lower(d, [np.float32(0)] * 2).compile()
    for _ in range(4):
        seen = list(xs)
        if len(seen) == 2:
            np.testing.assert_array_equal(compiled(d, xs), np.float32(seen) * 2)
        else:
            with pytest.raises(TypeError, match=r"^Compiled 'f': function compiled for "):
                compiled(d, xs)


# --- 4. Attributes of traced arrays (issue 43, item 7) ---------------------------------

V6 = aotkit.spec("f32[6]")


@pytest.mark.parametrize(
    "shape", [(2, 3), (3, -1), 6, (-1,), (1, 6, 1)], ids=["2x3", "3x-1", "int", "-1", "1x6x1"]
)
def test_setting_shape_reshapes_in_place_as_numpy_does(shape):
    def f(x):
        y = x + 1
        x.shape = shape
        return x, x * 2, y

    x = np.arange(6, dtype=np.float32)
    expected = x.copy()
    expected.shape = shape  # NumPy, the oracle
    got, doubled, y = aotkit.jit(f)(x)
    assert got.dtype == doubled.dtype == np.float32
    assert got.shape == doubled.shape == expected.shape
    np.testing.assert_array_equal(got, expected)
    np.testing.assert_array_equal(doubled, expected * 2)
    np.testing.assert_array_equal(y, x + 1)


def test_an_argument_reshaped_and_not_returned_is_a_write_the_caller_does_not_see():
    def f(x):
        x.shape = (2, 3)
        return x.sum(axis=0)

    line = f.__code__.co_firstlineno + 1
    with pytest.warns(
        InPlaceWriteWarning,
        match=rf"^f: argument \S+ is written in place at .*test_c_hostile\.py:{line} but not "
        r"returned; ",
    ):
        got = aotkit.lower(f, V6).compile()(np.arange(6, dtype=np.float32))
    np.testing.assert_array_equal(got, np.arange(6, dtype=np.float32).reshape(2, 3).sum(0))


@pytest.mark.parametrize("bind", ["C bind", "Python bind"])
def test_a_reshaped_tracer_takes_ops_in_either_bind(bind, monkeypatch):
    if bind == "Python bind" and BUILT:
        monkeypatch.setattr(core.bind, "enabled", False)
        monkeypatch.setattr(core.bind1, "enabled", False)

    def f(x):
        x.shape = (2, 3)
        y = x
        for _ in range(3):  # (the C bind makes the ops at a line after its first time)
            y = anp.sin(y) + y
        y.shape = (6,)
        return x, y

    x = np.linspace(-1, 1, 6, dtype=np.float32)
    expected = x.reshape(2, 3)
    for _ in range(3):
        expected = np.sin(expected) + expected
    same, got = aotkit.lower(f, V6).compile()(x)
    assert same.shape == (2, 3) and got.shape == (6,)
    assert same.dtype == got.dtype == np.float32
    np.testing.assert_array_equal(same, x.reshape(2, 3))
    np.testing.assert_allclose(got, expected.reshape(6), rtol=1e-6)


def test_a_shape_of_another_size_is_numpys_error_with_the_line():
    def f(x):
        x.shape = (4,)
        return x

    line = f.__code__.co_firstlineno + 1
    with pytest.raises(
        ValueError,
        match=rf"^reshape \(at .*test_c_hostile\.py:{line}\): cannot reshape array of size 6 "
        r"into shape \(4,\)$",
    ):
        aotkit.lower(f, V6)


def test_a_value_from_outside_a_loop_body_is_not_reshaped_in_it():
    def f(x):
        def body(i, h):
            x.shape = (3, 2)
            return h

        return aotkit.fori_loop(0, 2, body, x)

    with pytest.raises(
        TypeError,
        match=r"^x\.shape = \.\.\. \(at .*test_c_hostile\.py:\d+\): cannot update "
        r"Tracer<f32\[6\]> in place: it was traced outside the body being traced now "
        r"\('.*'\); carry it through the body and return the new value instead$",
    ):
        aotkit.lower(f, V6)


def _refused(stmt: str) -> str:
    """The message of running `stmt` (on `x`, a traced f32[6] array, and `np`)."""

    def f(x):
        exec(stmt, {"np": np, "x": x})
        return x

    with pytest.raises(AttributeError) as e:
        aotkit.lower(f, V6)
    return str(e.value)


OWN = (
    "'{0}' is aotkit's own record of a traced f32[6] array and cannot be set; make a new "
    "array instead (only x.shape = ... reshapes in place)"
)


@pytest.mark.parametrize(
    ("stmt", "where", "message"),
    [
        (
            "x.dtype = np.int32",
            "x.dtype = ...",
            "cannot set 'dtype' of a traced f32[6] array; use x = x.astype('int32') for a "
            "converted copy (a traced array's dtype is fixed)",
        ),
        (
            "x.dtype = 'no such dtype'",
            "x.dtype = ...",
            "cannot set 'dtype' of a traced f32[6] array; use x = x.astype(...) for a "
            "converted copy (a traced array's dtype is fixed)",
        ),
        (
            "x.real = 1.0",
            "x.real = ...",
            "cannot set 'real' of a traced f32[6] array; build the new array instead: "
            "x = ... + 1j * x.imag",
        ),
        (
            "x.imag = 1.0",
            "x.imag = ...",
            "cannot set 'imag' of a traced f32[6] array; build the new array instead: "
            "x = x.real + 1j * ...",
        ),
        (
            "x.ndim = 3",
            "x.ndim = ...",
            "cannot set 'ndim' of a traced f32[6] array; traced arrays are values: make a new "
            "array instead (only x.shape = ... reshapes in place)",
        ),
        (
            "x.__class__ = int",
            "x.__class__ = ...",
            "cannot set '__class__' of a traced f32[6] array; traced arrays are values: make a "
            "new array instead (only x.shape = ... reshapes in place)",
        ),
        (
            "x.label = 'weights'",
            "x.label = ...",
            "a traced f32[6] array takes no attributes of its own; keep 'label' in a variable "
            "(or a container) of your own",
        ),
        *[
            (f"x.{slot} = None", f"x.{slot} = ...", OWN.format(slot))
            for slot in ("value", "weak", "_scope", "seq", "transposed")
        ],
        ("setattr(x, 'seq', 10**6)", "x.seq = ...", OWN.format("seq")),
        (
            "del x.shape",
            "del x.shape",
            "cannot delete attributes of a traced f32[6] array; traced arrays are values: make "
            "a new array instead",
        ),
        (
            "del x.seq",
            "del x.seq",
            "cannot delete attributes of a traced f32[6] array; traced arrays are values: make "
            "a new array instead",
        ),
    ],
    ids=lambda v: v if isinstance(v, str) and v.startswith(("x.", "del", "setattr")) else "",
)
def test_other_attributes_of_a_traced_array_are_refused(stmt, where, message):
    assert re.fullmatch(re.escape(where) + r" \(at <string>:1\): " + re.escape(message),
                        _refused(stmt))  # fmt: skip


def test_the_slots_the_c_bind_reads_are_what_tracers_made_by_either_bind_hold():
    made = []

    def f(x):
        for _ in range(3):  # the C bind makes the second and third
            made.append(anp.sin(x))
        for t in made:
            for slot in ("value", "dtype", "seq", "_scope"):
                with pytest.raises(AttributeError, match=rf"^x\.{slot} = \.\.\. \(at "):
                    setattr(t, slot, getattr(t, slot))
        return made[-1]

    aotkit.lower(f, V6)
    assert [t.shape for t in made] == [(6,)] * 3
    assert [t.dtype for t in made] == [np.dtype(np.float32)] * 3


@needs_c
@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((object(), *[None] * 6), r"^Binder\.fill: object is not a Tracer$"),
        ((None,), r"^Binder\.fill: takes \(tracer, value, shape, dtype, weak, scope, seq\), got 1 "
         r"arguments$"),
    ],
    ids=["not a tracer", "one argument"],
)  # fmt: skip
def test_the_c_fill_of_tracer_slots_refuses_what_it_cannot_set(args, message):
    with pytest.raises(TypeError, match=message):
        core.bind1.fill(*args)


def test_a_tracer_made_by_either_fill_is_the_same(monkeypatch):
    made = {}

    def f(x):
        for name, fill in (("C", core._fill), ("Python", core._python_fill)):
            monkeypatch.setattr(core, "_fill", fill)
            made[name] = core.Tracer(x.value, x.shape, x.dtype, x._scope, True, x.seq)
        return x

    aotkit.lower(f, V6)
    slots = [s for s in core.Tracer.__slots__ if s != "__weakref__"]
    c, python = made["C"], made["Python"]
    assert [getattr(c, s) for s in slots] == [getattr(python, s) for s in slots]
    assert c.weak is True and c.transposed is None and c.shape == (6,)


def test_without_the_c_part_traced_arrays_take_shape_and_refuse_the_rest():
    proc = _child(
        """
        import numpy as np
        import aotkit
        from aotkit import _native
        from aotkit.tracing import core
        assert _native.Binder is None and core._fill is core._python_fill

        def f(x):
            x.shape = (2, -1)
            try:
                x.dtype = np.int32
            except AttributeError as e:
                print(e)
            return x

        print(aotkit.jit(f)(np.arange(4, dtype=np.float32)).tolist())
        """,
        without_c=True,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    refusal, result = proc.stdout.splitlines()
    assert re.fullmatch(
        r"x\.dtype = \.\.\. \(at <string>:\d+\): cannot set 'dtype' of a traced f32\[2,2\] "
        r"array; use x = x\.astype\('int32'\) for a converted copy \(a traced array's dtype "
        r"is fixed\)",
        refusal,
    )
    assert result == "[[0.0, 1.0], [2.0, 3.0]]"


def test_a_snapshot_copies_lists_and_dicts_and_keeps_the_rest():
    leaf, inner = np.ones(2), [1.0]

    class Listed(list):
        pass

    plain = (leaf, 2.0, None)
    tree = ([inner, {"a": inner}], plain, Listed([inner]), {"k": (inner,)})
    copy = _native.snapshot(tree)
    assert copy == tree and copy is not tree
    assert copy[0] is not tree[0] and copy[0][0] is not inner and copy[0][1]["a"] is not inner
    assert copy[1] is plain and copy[0][0] == inner  # no list or dict in it: itself
    assert copy[2] is tree[2]  # a subclass: left as it is
    assert copy[3]["k"][0] is not inner
    assert _native.snapshot(plain) is plain
    assert _native.snapshot((plain, (plain,))) == (plain, (plain,))
    nested = (plain, (plain, ()))
    assert _native.snapshot(nested) is nested  # tuples all the way down: itself
    inner.append(2.0)  # the caller's list changes: the snapshot does not
    assert copy[0][0] == [1.0] and copy[3]["k"][0] == [1.0]
    deep = [1.0]
    for _ in range(150):
        deep = [deep]
    assert _native.snapshot(deep) == deep  # past its depth, left as it is
