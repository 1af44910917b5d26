"""The tracer's two `bind`s: the C `Binder` (aotkit/_speedups.c), which makes the common op
without a Python frame, and the Python `bind` it stands in front of. They must make the same
module, op for op and location for location, and tell the pass runner the same facts."""

from __future__ import annotations

import contextlib
import sys
import types
import typing

import numpy as np
import pytest

import aotkit
import aotkit.numpy as anp
from aotkit import _native
from aotkit.tracing import core, linalg

needs_c = pytest.mark.skipif(
    _native.Binder is None, reason="aotkit._speedups is not built (no C compiler)"
)

V = aotkit.spec("f32[4]")
M = aotkit.spec("f32[4,4]")


@pytest.fixture
def python_bind():
    """Every op of the test made by the Python `bind` (the C one hands each call over)."""
    if _native.Binder is None:
        yield
        return
    core.bind.enabled = core.bind1.enabled = False
    try:
        yield
    finally:
        core.bind.enabled = core.bind1.enabled = True


def _helper(x):  # ops made a few aotkit and user frames down
    return anp.reshape(x, (2, 2)).T @ anp.ones((2, 2), np.float32)


def _layer(x, w, b):
    return anp.maximum(x @ w + b, 0.0)


PROGRAMS = {
    "chain": (lambda x, y: anp.tanh(anp.sin(x) * y + x), (V, V)),
    "mlp": (lambda x, w, b: _layer(_layer(x, w, b), w, b), (M, M, V)),
    "scalars and identities": (lambda x: (x * 1.0 + 0.0) - 0.0 * x, (V,)),
    "double negation": (lambda x: anp.negative(-x), (V,)),
    "equal ops": (lambda x: anp.sin(x) + anp.sin(x), (V,)),
    "same operand twice": (lambda x: x * x, (V,)),
    "unused op": (lambda x: (anp.cos(x), x + 1.0)[1], (V,)),
    "transposes": (lambda x: x.T.T @ x.T, (M,)),
    "helper frames": (_helper, (V,)),
    "converts and selects": (lambda x, y: anp.where(x > y, x.astype(np.int32), 2), (V, V)),
    "reductions and rules": (lambda x: anp.sum(anp.cumsum(x)) / anp.max(x), (V,)),
    "indexing": (lambda x: x[1:3] * x[::2] + x[0], (V,)),
    "chlo": (lambda x: anp.tan(x) + anp.sinh(x), (V,)),
    "branch": (lambda x: aotkit.cond(anp.sum(x) > 0, anp.sin, anp.cos, x), (V,)),
    "loop": (lambda x: aotkit.fori_loop(0, 3, lambda i, h: anp.sin(h) * 0.5 + i, x), (V,)),
    "gradient": (lambda w, x: aotkit.grad(lambda w: anp.sum(_layer(x, w, x[0])))(w), (M, M)),
    "batched": (lambda x: aotkit.vmap(lambda r: anp.dot(r, r) * r)(x), (M,)),
    "symbolic": (lambda x: anp.tanh(x.T @ x + 1.0), (aotkit.spec("f32[b,4]"),)),
}


def _lowered(fn, specs):
    traced = aotkit.jit(fn, autograph=False).trace(*specs)
    return traced.as_text(debug_info=True), traced.facts


@needs_c
@pytest.mark.parametrize("name", list(PROGRAMS))
def test_the_c_bind_makes_the_module_the_python_bind_makes(name, request):
    fn, specs = PROGRAMS[name]
    with_c = _lowered(fn, specs)
    request.getfixturevalue("python_bind")
    assert core.bind.enabled is False
    assert _lowered(fn, specs) == with_c
    # And again on a fresh lowering context, whose caches the first ops fill.
    core.bind.enabled = core.bind1.enabled = True
    assert _lowered(fn, specs) == with_c


# Functions that call `bind` as aotkit.numpy's do: compiled under a file name the location
# walk passes by, as it passes aotkit's own files, so the op is located at the user's line
# that called them.
AOTKIT_LIKE = "<aotkit.numpy-like helpers of tests/tracing/test_binder.py>"
HELPERS = """
def sine(x, bind=None):
    return (bind or core.bind)("sin", x)[0]

def sine1(x, bind1=None):
    return (bind1 or core.bind1)("sin", x)

def product(x, w):
    return core.bind(
        "dot_general", x, w, **linalg._MATRIX_PRODUCT, precision=("HIGHEST",) * 2, dtype=None
    )[0]

def reverse(x):
    return core.bind("reverse", x, dims=(0,))[0]

def times(x, y):
    return core.bind("multiply", x, y)[0]
"""


@pytest.fixture
def helpers(monkeypatch):
    monkeypatch.setitem(core._internal_files, AOTKIT_LIKE, True)
    namespace = {"core": core, "linalg": linalg}
    exec(compile(HELPERS, AOTKIT_LIKE, "exec"), namespace)
    return types.SimpleNamespace(**namespace)


@contextlib.contextmanager
def handed_over(fallback):
    """The ops the calls inside hand to `fallback` (a Python bind), in order."""
    handed = []

    def count(frame, event, arg):
        if event == "call" and frame.f_code is fallback.__code__:
            handed.append(frame.f_locals["op"])

    sys.setprofile(count)
    try:
        yield handed
    finally:
        sys.setprofile(None)


@needs_c
def test_the_c_bind_takes_a_known_op_itself_and_hands_the_rest_over(helpers):
    def f(x, w):
        with handed_over(core.python_bind) as handed:
            for _ in range(4):
                x = helpers.sine(x)  # the first meets a line no op had: the rest are known
                x = helpers.product(x, w)
            x = helpers.reverse(x)  # an op with a lowering rule of its own
        assert handed == ["sin", "dot_general", "reverse"]
        return x

    text = aotkit.lower(f, M, M, autograph=False).as_text(debug_info=True)
    assert text.count("stablehlo.sine") == 4 and text.count("stablehlo.dot_general") == 4
    lines = {line.split("loc(")[-1] for line in text.splitlines() if "= stablehlo.sine " in line}
    assert len(lines) == 1  # every one at the user's line


@needs_c
def test_the_c_bind_takes_an_op_of_a_body_on_a_value_from_outside_it(helpers):
    # A loop's body multiplies its carry by a value of the enclosing function's scope.
    def f(x, w):
        def body(i, h):
            for _ in range(3):
                h = helpers.times(h, w)  # the C part makes the second and third
            return h

        with handed_over(core.python_bind) as handed:
            out = aotkit.fori_loop(0, 2, body, x)
        assert [op for op in handed if op == "multiply"] == ["multiply"]
        return out

    x, w = np.float32([1, 2, 3, 4]), np.float32([2, 3, 0.5, -1])
    got = aotkit.lower(f, V, V, autograph=False).compile()(x, w)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, x * w**6)


@needs_c
def test_a_tracer_the_c_bind_makes_is_the_one_tracer_init_makes(helpers):
    made = []

    def f(x):
        with handed_over(core.python_bind1) as handed:
            for _ in range(3):
                made.append(helpers.sine1(x))  # the Python bind makes the first
        assert handed == ["sin"]
        return made[0] + made[2]

    aotkit.lower(f, V)
    y, z = made[0], made[2]
    slots = [s for s in core.Tracer.__slots__ if s != "__weakref__"]
    assert [getattr(z, s) is getattr(y, s) for s in ("shape", "dtype", "_scope")] == [True] * 3
    like = core.Tracer(z.value, z.shape, z.dtype, z._scope, False, z.seq)
    assert [getattr(z, s) for s in slots] == [getattr(like, s) for s in slots]
    assert type(z) is core.Tracer and z.seq == y.seq + 2 and z.weak is False


def test_bind_is_the_c_binder_where_the_c_part_is_built():
    if _native.Binder is None:
        assert core.bind is core.python_bind and core.bind1 is core.python_bind1
    else:
        assert type(core.bind) is type(core.bind1) is _native.Binder
        assert core.bind.fallback is core.python_bind and core.bind.first is False
        assert core.bind1.fallback is core.python_bind1 and core.bind1.first is True


@needs_c
def test_a_binder_refuses_what_it_cannot_read():
    with pytest.raises(TypeError, match="^Binder: missing keyword argument fallback$"):
        _native.Binder()
    with pytest.raises(TypeError, match=r"^Binder: <class 'dict'>\.value is not a slot$"):
        core._binder(core.python_bind, False, tracer=dict)
    with pytest.raises(TypeError, match=r"^Binder: <class '.*Scope'>\.used is not a slot$"):
        core._binder(core.python_bind, False, emitted=core.TraceScope)


@needs_c
def test_a_binder_reads_op_rules_by_their_declared_field_names():
    # `core.OpRule` declares the layout; the C reads the fields it needs by name, so a
    # record without one of them, or a type that is not a named tuple, is refused up front.
    class Shuffled(typing.NamedTuple):  # the same fields in another order: read by name
        simplifiable: bool
        elementwise: bool
        chlo: bool
        attributes: object
        hlo: object

    core._binder(core.python_bind, False, rule=Shuffled)
    with pytest.raises(TypeError, match=r"^Binder: rule=<class '.*Partial'> has no field chlo$"):

        class Partial(typing.NamedTuple):
            hlo: object
            attributes: object

        core._binder(core.python_bind, False, rule=Partial)
    with pytest.raises(TypeError, match=r"^Binder: rule=<class 'tuple'> is not a named tuple "):
        core._binder(core.python_bind, False, rule=tuple)
    with pytest.raises(TypeError, match=r"^Binder: rule=<class 'dict'> is not a named tuple "):
        core._binder(core.python_bind, False, rule=dict)

    class BadFields(tuple):
        _fields = ("hlo", 2)

    with pytest.raises(TypeError, match=r"^Binder: rule=<class '.*BadFields'> is not a named "):
        core._binder(core.python_bind, False, rule=BadFields)


@needs_c
def test_a_binder_hands_entries_of_another_record_type_to_python(helpers):
    # An entry that is a plain tuple (or another record) is not read by position: the call
    # goes to the Python bind, which makes the same module.
    plain = {name: tuple(entry) for name, entry in core._rules.items()}
    bind1 = core._binder(core.python_bind1, True, rules=plain)

    def f(x):
        with handed_over(core.python_bind1) as handed:
            for _ in range(3):
                x = helpers.sine1(x, bind1)
        assert len(handed) == 3  # every call went to Python
        return x

    text = str(aotkit.lower(f, V).module)
    assert text.count("stablehlo.sine") == 3


@needs_c
@pytest.mark.parametrize("rule", ["some", (0, (5,)), (0, 1)])
def test_a_binder_refuses_a_constant_rule_it_does_not_know(rule):
    # aotkit-simplify's table of what an op's constant operands must be (`"first"`, `"all"`,
    # or an identity's unit and positions): a rule of another form is an aotkit bug.
    bind = core._binder(core.python_bind, False, with_constants={"stablehlo.add": rule})

    def f(x):
        one = anp.ones(4, np.float32)  # a constant: the rule is read
        for _ in range(2):  # the second add at this line is the C bind's
            x = bind("add", x, one)[0]
        return x

    with pytest.raises(TypeError, match=r"^Binder: unexpected constant rule "):
        aotkit.lower(f, V)


def test_every_constant_rule_is_one_the_c_bind_knows():
    for rule in core._SIMPLIFY_WITH_CONSTANTS.values():
        assert rule in ("first", "all") or (
            isinstance(rule, tuple)
            and len(rule) == 2
            and isinstance(rule[1], tuple)
            and all(type(i) is int and 0 <= i < 2 for i in rule[1])
        ), rule


@needs_c
def test_a_binder_not_set_up_refuses_calls():
    unset = _native.Binder.__new__(_native.Binder)
    unset.enabled = True
    with pytest.raises(TypeError, match=r"^Binder: this object was not initialised \(made by "):
        unset("sin")


@needs_c
def test_a_binder_given_other_classes_again_keeps_its_own(helpers):
    # Its classes and their slots' offsets change together or not at all.
    given = {}
    with pytest.MonkeyPatch.context() as patch:  # what `bind1` is made with
        patch.setattr(_native, "Binder", lambda **kwargs: given.update(kwargs))
        core._binder(core.python_bind1, True)
    bind1 = _native.Binder(**given)

    class Shifted:  # a tracer's slots, each at another offset
        __slots__ = ("pad", *(s for s in core.Tracer.__slots__ if s != "__weakref__"))

    with pytest.raises(TypeError, match=r"^Binder: <class '.*Scope'>\.used is not a slot$"):
        bind1.__init__(**{**given, "tracer": Shifted, "emitted": core.TraceScope})

    def f(x):
        with handed_over(core.python_bind1) as handed:
            for _ in range(3):  # the C part makes the second and third
                x = helpers.sine1(x, bind1)
        assert handed == ["sin"]
        return x

    x = np.linspace(-1, 1, 4, dtype=np.float32)
    got = aotkit.lower(f, V).compile()(x)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, np.sin(np.sin(np.sin(x))), rtol=1e-6)


@needs_c
def test_a_slot_emptied_while_python_code_ran_reads_as_python_reads_it(helpers):
    # The C part reads the trace's record after calling back into Python: a slot emptied
    # there is Python's AttributeError, as the Python bind would raise it.
    def emptying_check(op, values):
        del core._tls.scopes[-1].emitted.simplify
        return False

    bind = core._binder(core.python_bind, False, has_equal_user=emptying_check)

    def f(x):
        for _ in range(2):  # the second uses `x` again: the C part asks for equal ops
            y = helpers.sine(x, bind)
        return y

    no_slot = r"'(aotkit\.tracing\.core\.)?Emitted' object has no attribute 'simplify'"
    with pytest.raises(AttributeError, match=no_slot):
        aotkit.lower(f, V)
