"""The tracer's two `bind`s: the C `Binder` (aotkit/_speedups.c), which makes the common op
without a Python frame, and the Python `bind` it stands in front of. They must make the same
module, op for op and location for location, and tell the pass runner the same facts."""

from __future__ import annotations

import sys

import numpy as np
import pytest

import aotkit
import aotkit.numpy as anp
from aotkit import _native
from aotkit.lowering import core, linalg

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


def _sine(x):  # an aotkit.numpy function's call of bind, made from the user's line
    return core.bind("sin", x)[0]


def _product(x, w):
    return core.bind("dot_general", x, w, **linalg._MATRIX_PRODUCT)[0]


def _reverse(x):
    return core.bind("reverse", x, dims=(0,))[0]


@needs_c
def test_the_c_bind_takes_a_known_op_itself_and_hands_the_rest_over():
    handed = []

    def count(frame, event, arg):
        if event == "call" and frame.f_code is core.python_bind.__code__:
            handed.append(frame.f_locals["op"])

    def f(x, w):
        y = x
        for _ in range(4):
            y = _sine(y)  # the first meets a line no op had: the rest are known
            y = _product(y, w)
        return _reverse(y)  # an op with a lowering rule of its own

    def traced(x, w):
        sys.setprofile(count)
        try:
            return f(x, w)
        finally:
            sys.setprofile(None)

    text = aotkit.lower(traced, M, M, autograph=False).as_text(debug_info=True)
    assert handed == ["sin", "dot_general", "reverse"]
    assert text.count("stablehlo.sine") == 4 and text.count("stablehlo.dot_general") == 4
    assert len(set(_op_lines(text, "stablehlo.sine"))) == 1  # every one at the user's line


def _op_lines(text: str, name: str) -> list[str]:
    return [line.split("loc(")[-1] for line in text.splitlines() if f"= {name} " in line]


@needs_c
def test_a_tracer_the_c_bind_makes_is_the_one_tracer_init_makes():
    made = {}

    def f(x):
        y = core.bind1("sin", x)  # the first at this line: the Python bind makes it
        for _ in range(2):
            z = core.bind1("sin", x)
        made["python"], made["c"] = y, z
        return y + z

    aotkit.lower(f, V)
    y, z = made["python"], made["c"]
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
        core._binder(core.python_bind, False, emitted=core.Scope)


@needs_c
@pytest.mark.parametrize("rule", ["some", (0, (5,)), (0, 1)])
def test_a_binder_refuses_a_constant_rule_it_does_not_know(rule):
    # aotkit-simplify's table of what an op's constant operands must be (`"first"`, `"all"`,
    # or an identity's unit and positions): a rule of another form is an aotkit bug.
    bind = core._binder(core.python_bind, False, with_constants={"stablehlo.add": rule})

    def add(x, y):
        return bind("add", x, y)[0]

    def f(x):
        one = anp.ones(4, np.float32)  # a constant: the rule is read
        for _ in range(2):  # the second add at this line is the C bind's
            x = add(x, one)
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
    with pytest.raises(TypeError, match=r"^Binder: not set up; make one with Binder\("):
        unset("sin")
