"""Control flow (aotkit.cond/switch/while_loop/fori_loop/scan) against plain Python loops
and NumPy, on the cpu and interpreter backends, plus the TypeErrors of mismatched types."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jax import tree_util

import aotkit
import aotkit.numpy as anp
from aotkit import lax
from tests import lane
from tests.helpers import BACKENDS, run_lowered, run_on

run = run_on


def assert_same(got, want, rtol=1e-6):
    got_leaves, got_tree = tree_util.tree_flatten(got)
    want_leaves, want_tree = tree_util.tree_flatten(want)
    assert got_tree == want_tree
    for g, w in zip(got_leaves, want_leaves, strict=True):
        w = np.asarray(w)
        assert np.asarray(g).dtype == w.dtype, (np.asarray(g).dtype, w.dtype)
        np.testing.assert_allclose(g, w, rtol=rtol)


def message(text: str) -> str:
    """A regex for an error whose `<where>` is `op (at file:line)`."""
    op, rest = text.split(": ", 1)
    return re.escape(op) + r" \(at [^)]+\): " + re.escape(rest)


# --- numerics -----------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", ["float32", "float64", "int32"])
def test_scan_cumulative_product(backend, dtype):
    xs = np.array([1, 2, 3, -1, 2, 5], dtype)

    def f(xs):
        return lax.scan(lambda c, x: (c * x, c * x), np.ones((), dtype), xs)

    carry, ys = run(backend, f, xs)
    # a carry keeps its dtype, so the oracle accumulates in it too (NumPy widens i32)
    assert_same((carry, ys), (np.prod(xs, dtype=dtype), np.cumprod(xs, dtype=dtype)))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("unroll", [1, 2, 3, 7, True])
def test_reverse_scan_matches_python_loop(backend, unroll):
    xs = np.linspace(-1, 2, 7, dtype=np.float32)

    def f(xs):
        return lax.scan(
            lambda c, x: (c * 0.5 + x, c), np.float32(0), xs, reverse=True, unroll=unroll
        )

    want_ys = np.zeros_like(xs)
    c = np.float32(0)
    for t in reversed(range(len(xs))):
        want_ys[t] = c
        c = c * np.float32(0.5) + xs[t]
    assert_same(run(backend, f, xs), (c, want_ys))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("a", [2.0, 10.0, 0.25])
def test_newton_sqrt_with_while_loop(backend, a):
    def newton(a):
        def body(s):
            x, n = s
            return (x + a / x) * 0.5, n + 1

        return lax.while_loop(lambda s: (abs(s[0] * s[0] - a) > 1e-12) & (s[1] < 50), body, (a, 0))

    x, n = np.float64(a), 0
    while abs(x * x - a) > 1e-12 and n < 50:
        x, n = (x + a / x) * 0.5, n + 1
    got = run(backend, newton, np.float64(a))
    # An emulated float64 (tests/lane.py) is some 2**-50 off: measured 6.3e-16.
    assert_same(got, (x, np.int64(n)), rtol=4e-15 if lane.float64_emulated(backend) else 0)
    np.testing.assert_allclose(got[0], math.sqrt(a), rtol=1e-12)


def piecewise(x):
    return lax.cond(x < 0, lambda v: v * v, lambda v: anp.sqrt(v) + 1, x)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("x", [-3.0, -0.5, 0.0, 4.0])
def test_piecewise_cond(backend, x):
    want = x * x if x < 0 else math.sqrt(x) + 1
    assert_same(run(backend, piecewise, np.float32(x)), np.float32(want))


def piecewise_switch(x):
    i = anp.floor(x).astype("int32")
    return lax.switch(i, [lambda v: -v, lambda v: v * 10, lambda v: anp.sin(v)], x)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("x", [-5.0, 0.5, 1.5, 2.5, 9.0])
def test_piecewise_switch_clamps_the_index(backend, x):
    i = min(max(math.floor(x), 0), 2)
    want = [-x, x * 10, math.sin(x)][i]
    assert_same(run(backend, piecewise_switch, np.float32(x)), np.float32(want), rtol=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
def test_nested_fori_loop_inside_scan(backend):
    xs = {"base": np.array([1, 3, 0, 2], np.int32), "count": np.array([2, 1, 4, 0], np.int32)}

    def f(xs, n):
        def step(c, row):
            # sum of base ** k for k < count: loops over traced bounds, nested
            def power(k, acc):
                return acc + lax.fori_loop(0, k, lambda _, p: p * row["base"], np.int32(1))

            total = lax.fori_loop(0, row["count"], power, np.int32(0))
            return c + total * n, total

        return lax.scan(step, np.int32(0), xs)

    ys = [sum(int(b) ** k for k in range(int(m))) for b, m in zip(xs["base"], xs["count"])]
    got = run(backend, f, xs, np.int32(3))
    assert_same(got, (np.int32(3 * sum(ys)), np.array(ys, np.int32)))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(("lo", "hi"), [(0, 5), (3, 3), (4, 1), (-2, 2)])
def test_fori_loop_static_and_traced_bounds(backend, lo, hi):
    def static(x):
        return lax.fori_loop(lo, hi, lambda i, c: c * 2 + i, x)

    def traced(x, lo, hi):
        return lax.fori_loop(lo, hi, lambda i, c: c * 2 + i, x)

    c = np.int64(1)
    for i in range(lo, hi):
        c = c * 2 + i
    assert_same(run(backend, static, np.int64(1)), c)
    assert_same(run(backend, traced, np.int64(1), np.int64(lo), np.int64(hi)), c)


@settings(max_examples=10, deadline=None)
@given(
    length=st.integers(0, 9),
    unroll=st.one_of(st.integers(1, 5), st.booleans()),
    reverse=st.booleans(),
    width=st.integers(1, 3),
)
def test_scan_matches_a_python_loop_for_any_length_unroll_and_direction(
    length, unroll, reverse, width
):
    # Exercises the unrolled body and the steps left after the loop (length % unroll).
    rng = np.random.default_rng(length * 31 + width)
    xs = rng.standard_normal((length, width)).astype(np.float32)

    def f(xs):
        return lax.scan(
            lambda c, x: (c * 0.5 + x, c - x),
            np.zeros(width, np.float32),
            xs,
            reverse=reverse,
            unroll=unroll,
        )

    c, ys = np.zeros(width, np.float32), np.zeros((length, width), np.float32)
    for t in reversed(range(length)) if reverse else range(length):
        c, ys[t] = c * np.float32(0.5) + xs[t], c - xs[t]
    assert_same(run("cpu", f, xs), (c, ys))


@pytest.mark.parametrize("backend", BACKENDS)
def test_scan_over_pytrees_with_closure(backend):
    xs = {"a": np.arange(4, dtype=np.float32), "b": np.arange(8, dtype=np.int32).reshape(4, 2)}

    def f(xs, w):
        def step(c, x):
            s = c["s"] + x["a"] * w
            return {"s": s, "n": c["n"] + x["b"]}, (s, x["b"] * 2)

        return lax.scan(step, {"s": np.float32(0), "n": np.zeros(2, np.int32)}, xs)

    w = np.float32(0.5)
    s, n, ys0, ys1 = np.float32(0), np.zeros(2, np.int32), [], []
    for t in range(4):
        s = s + xs["a"][t] * w
        n = n + xs["b"][t]
        ys0.append(s)
        ys1.append(xs["b"][t] * 2)
    want = ({"n": n, "s": s}, (np.array(ys0, np.float32), np.array(ys1, np.int32)))
    assert_same(run(backend, f, xs, w), want)


@pytest.mark.parametrize("backend", BACKENDS)
def test_scan_without_xs_and_empty_scan(backend):
    def f(x):
        return lax.scan(lambda c, _: (c + 1, c * x), np.float32(0), None, length=4)

    assert_same(run(backend, f, np.float32(2)), (np.float32(4), np.array([0, 2, 4, 6], np.float32)))

    def empty(xs):
        return lax.scan(lambda c, x: (c + x, x * 2), np.ones(3, np.float32), xs)

    assert_same(
        run(backend, empty, np.zeros((0, 3), np.float32)),
        (np.ones(3, np.float32), np.zeros((0, 3), np.float32)),
    )


@pytest.mark.parametrize("backend", BACKENDS)
def test_while_loop_with_nested_cond_and_dict_carry(backend):
    def collatz(n):
        def body(s):
            m = lax.cond(s["n"] % 2 == 0, lambda v: v // 2, lambda v: 3 * v + 1, s["n"])
            return {"n": m, "steps": s["steps"] + 1}

        return lax.while_loop(lambda s: s["n"] != 1, body, {"n": n, "steps": np.int32(0)})

    n, steps = 27, 0
    while n != 1:
        n, steps = (n // 2 if n % 2 == 0 else 3 * n + 1), steps + 1
    assert_same(run(backend, collatz, np.int32(27)), {"n": np.int32(1), "steps": np.int32(steps)})


@pytest.mark.parametrize("backend", BACKENDS)
def test_branch_python_scalars_take_the_other_branch_dtype(backend):
    def f(p, x):
        a = lax.cond(p, lambda: x, lambda: 0.5)
        b = lax.switch(p.astype("int8"), [lambda: 1, lambda: 2])
        c = lax.cond(p, lambda s: x * s, lambda s: x, 2.0)
        return a, b, c

    x = np.float32(3)
    assert_same(run(backend, f, np.bool_(True), x), (x, np.int64(2), np.float32(6)))
    assert_same(run(backend, f, np.bool_(False), x), (np.float32(0.5), np.int64(1), x))


@pytest.mark.parametrize("backend", BACKENDS)
def test_python_scalar_init_is_promoted_as_numpy_would(backend):
    def f(x):
        # 0 and 1 start as int64 and are promoted to the float32 the body returns,
        # as `c = 0; c = c + x` is float32 in NumPy (NEP 50).
        return lax.fori_loop(0, 3, lambda i, c: (c[0] + x, c[1] * x), (0, 1))

    assert_same(run(backend, f, np.float32(2)), (np.float32(6), np.float32(8)))


# --- structure of the IR ------------------------------------------------------------------------


def test_fori_loop_text_does_not_grow_with_trip_count():
    def loop(n):
        return lambda x: lax.fori_loop(0, n, lambda i, c: c * 0.5 + anp.sin(c), x)

    short = aotkit.lower(loop(10), aotkit.spec("f32[4]")).as_text()
    long = aotkit.lower(loop(1000), aotkit.spec("f32[4]")).as_text()
    assert long.count("stablehlo.while") == 1
    assert len(long) - len(short) == len("1000") - len("10")
    assert long.replace("dense<1000>", "dense<10>") == short


@pytest.mark.parametrize(
    ("fn", "op"),
    [
        (lambda x: lax.cond(x > 0, lambda: x, lambda: -x), '"stablehlo.if"'),
        (
            lambda x: lax.switch((x > 0).astype("int32"), [lambda: x, lambda: -x, lambda: x * 2]),
            '"stablehlo.case"',
        ),
        (lambda x: lax.scan(lambda c, _: (c + x, c), x, None, length=100), "stablehlo.while"),
    ],
    ids=["cond", "switch", "scan"],
)
def test_each_call_is_one_region_op(fn, op):
    text = aotkit.lower(fn, aotkit.spec("f32[]")).as_text()
    assert text.count(op) == 1


# --- errors ---------------------------------------------------------------------------------


def lower_f32(fn):
    """Lowers `fn(x, s)` for `x: f32[3]` and `s: f32[]`."""
    return aotkit.lower(fn, aotkit.spec("f32[3]"), aotkit.spec("f32[]"))


@pytest.mark.parametrize(
    ("fn", "kind", "text"),
    [
        (
            lambda x, s: lax.cond(s > 0, lambda: x, lambda: x.astype("float64")),
            TypeError,
            "cond: true_fn returns f32[3] for output but false_fn returns f64[3]; every branch "
            "must return the same shapes and dtypes (cast with .astype)",
        ),
        (
            lambda x, s: lax.cond(s > 0, lambda: (x, x), lambda: [x, x]),
            TypeError,
            "cond: true_fn returns the pytree PyTreeDef((*, *)) but false_fn returns "
            "PyTreeDef([*, *]); every branch must return the same structure",
        ),
        (
            lambda x, s: lax.switch(0, [lambda: x, lambda: x, lambda: s]),
            TypeError,
            "switch: branches[0] returns f32[3] for output but branches[2] returns f32[]; every "
            "branch must return the same shapes and dtypes (cast with .astype)",
        ),
        (
            lambda x, s: lax.cond(s > 0, lambda: s.astype("int32"), lambda: 1.5),
            TypeError,
            "cond: true_fn returns i32[] for output but false_fn returns a Python float; NumPy "
            "(NEP 50) would not give a Python float the dtype i32; every branch must return "
            "the same shapes and dtypes (cast with .astype)",
        ),
        (
            lambda x, s: lax.cond(x, lambda: x, lambda: x),
            TypeError,
            "cond: pred must be a scalar, got f32[3]",
        ),
        (
            lambda x, s: lax.cond(s > 0, x, lambda: x),
            TypeError,
            "cond: true_fn must be callable, got Tracer",
        ),
        (
            lambda x, s: lax.cond(s > 0, lambda: "yes", lambda: x),
            TypeError,
            "cond: true_fn returns a str for output, which is not an array; return arrays, "
            "Python scalars or pytrees (tuples, lists, dicts, None) of them",
        ),
        (
            lambda x, s: lax.switch(s, [lambda: x]),
            TypeError,
            "switch: index must be an integer scalar, got f32[]",
        ),
        (
            lambda x, s: lax.switch(0, []),
            ValueError,
            "switch: branches must be a non-empty sequence of functions",
        ),
        (
            lambda x, s: lax.while_loop(lambda c: s < 3, lambda c: c.astype("float64"), x),
            TypeError,
            "while_loop: body_fn returns f64[3] for carry, whose init is f32[3]; a loop carry "
            "keeps its shape and dtype across iterations (cast the result with .astype, or "
            "start from an init of the type the body returns)",
        ),
        (
            lambda x, s: lax.while_loop(lambda c: c[1] < 3, lambda c: (s, c[1] + 1), (x, 0)),
            TypeError,
            "while_loop: body_fn returns f32[] for carry[0], whose init is f32[3]; a loop carry "
            "keeps its shape and dtype across iterations (cast the result with .astype, or "
            "start from an init of the type the body returns)",
        ),
        (
            lambda x, s: lax.while_loop(lambda c: c < 3, lambda c: c > 1, 0),
            TypeError,
            "while_loop: body_fn returns bool[] for carry, whose init is a Python int (traced "
            "as i64[]); NumPy (NEP 50) does not turn a Python int into bool[], so the carry "
            "cannot change type; a loop carry keeps its shape and dtype across iterations "
            "(cast the result with .astype, or start from an init of the type the body returns)",
        ),
        (
            lambda x, s: lax.while_loop(lambda c: s < 3, lambda c: (2, c[1]), (x, 1)),
            TypeError,
            "while_loop: body_fn returns a Python int for carry[0], whose init is f32[3]; a loop "
            "carry keeps its shape and dtype across iterations (cast the result with .astype, "
            "or start from an init of the type the body returns)",
        ),
        (
            lambda x, s: lax.while_loop(lambda c: True, lambda c: {"a": c}, x),
            TypeError,
            "while_loop: body_fn must return the carry's pytree PyTreeDef(*), got "
            "PyTreeDef({'a': *}); a loop carry keeps its structure across iterations",
        ),
        (
            lambda x, s: lax.while_loop(lambda c: c, lambda c: c, x),
            TypeError,
            "while_loop: cond_fn must return a boolean scalar, got f32[3]",
        ),
        (
            lambda x, s: lax.while_loop(lambda c: s < 1, lambda c: c, (x, "s")),
            TypeError,
            "while_loop: carry[1] is a str, not an array; a loop carry is a pytree (tuples, "
            "lists, dicts, None) of arrays and Python scalars",
        ),
        (
            lambda x, s: lax.fori_loop(0.0, 3, lambda i, c: c, x),
            TypeError,
            "fori_loop: lower must be an integer scalar, got f64[]",
        ),
        (
            lambda x, s: lax.fori_loop(0, x, lambda i, c: c, x),
            TypeError,
            "fori_loop: upper must be an integer scalar, got f32[3]",
        ),
        (
            lambda x, s: lax.fori_loop(np.int8(0), 300, lambda i, c: c, x),
            OverflowError,
            "fori_loop: upper bound 300 does not fit the loop index dtype i8",
        ),
        (
            lambda x, s: lax.fori_loop(np.uint64(0), np.int64(3), lambda i, c: c, x),
            TypeError,
            "fori_loop: the bounds promote to f64 (NumPy mixes uint64 and signed ints as "
            "floats); give both bounds one integer dtype",
        ),
        (
            lambda x, s: lax.fori_loop(2**70, 3, lambda i, c: c, x),
            OverflowError,
            "fori_loop: lower bound 1180591620717411303424 does not fit the loop index dtype i64",
        ),
        (
            lambda x, s: lax.scan(lambda c, e: c + e, s, x),
            TypeError,
            "scan: f must return a pair (carry, y), got f32[]",
        ),
        (
            lambda x, s: lax.scan(lambda c, e: (c, e), 0, {"a": x, "b": anp.ones((2, 2))}),
            ValueError,
            "scan: the leading axes of xs differ (xs['a']: 3, xs['b']: 2); every xs leaf must "
            "have the same leading size",
        ),
        (
            lambda x, s: lax.scan(lambda c, e: (c, e), 0, x, length=4),
            ValueError,
            "scan: the leading axes of xs differ (xs: 3) and length=4; every xs leaf must have "
            "the same leading size",
        ),
        (
            lambda x, s: lax.scan(lambda c, e: (c, e), 0, None),
            ValueError,
            "scan: xs holds no arrays, so the trip count is unknown; pass length=",
        ),
        (
            lambda x, s: lax.scan(lambda c, e: (c, e), 0, s),
            ValueError,
            "scan: xs is a 0-d array; xs leaves need a leading axis to scan over",
        ),
        (
            lambda x, s: lax.scan(lambda c, e: (c, e), 0, [1.0, 2.0]),
            TypeError,
            "scan: xs[0] is a float; xs must be a pytree of arrays with a leading axis to scan "
            "over",
        ),
        (
            lambda x, s: lax.scan(lambda c, e: (c, e), 0, x, unroll=0),
            ValueError,
            "scan: unroll must be a positive int or a bool, got 0",
        ),
        (
            lambda x, s: lax.cond(s > 0, lambda: np.uint8(1), lambda: 300),
            OverflowError,
            "cond: the Python scalar 300 does not fit u8; use a wider dtype",
        ),
    ],
    ids=lambda v: v if isinstance(v, str) and len(v) < 30 else None,
)
def test_mismatches_are_clear_errors(fn, kind, text):
    with pytest.raises(kind, match=message(text)):
        lower_f32(fn)


def test_scan_y_must_keep_its_type_across_unrolled_steps():
    def f(x, s):
        state = {"n": 0}

        def step(c, e):
            state["n"] += 1
            return c, (e if state["n"] == 1 else e.astype("float64"))

        return lax.scan(step, np.float32(0), x, unroll=2)

    with pytest.raises(
        TypeError,
        match=message(
            "scan: f returns y as PyTreeDef(*) of (f64[]) at one step and PyTreeDef(*) of "
            "(f32[]) at another; y must keep its structure and types"
        ),
    ):
        lower_f32(f)


def test_outside_a_trace():
    with pytest.raises(
        RuntimeError,
        match=message(
            "cond: no function is being traced; call aotkit.cond inside a function given to "
            "aotkit.lower or aotkit.jit"
        ),
    ):
        lax.cond(True, lambda: 1, lambda: 2)


@pytest.mark.parametrize("statement", ["if", "while"])
def test_python_control_flow_on_a_tracer_suggests_cond_and_while_loop(statement):
    def f(x):
        if statement == "if":
            if x > 0:
                return x
            return -x
        while x > 0:
            x = x - 1
        return x

    with pytest.raises(TypeError, match="aotkit.cond") as info:
        aotkit.lower(f, aotkit.spec("f32[]"), autograph=False)  # with autograph: a cond/while
    assert "aotkit.while_loop" in str(info.value)
    assert str(info.value).startswith("bool() of a traced bool[] array (at ")


def test_tracer_leaked_from_a_branch_is_refused():
    leaked = []

    def keep(x):
        leaked.append(x + 1)
        return x

    def use_later(x):
        lax.cond(x > 0, keep, lambda v: v, x)
        return leaked[-1] * 2

    def return_it(x):
        lax.cond(x > 0, keep, lambda v: v, x)
        return leaked[-1]

    for fn, op in ((use_later, "multiply"), (return_it, "return")):
        with pytest.raises(TypeError, match=re.escape(f"{op} (at ") + ".*closed control-flow body"):
            aotkit.lower(fn, aotkit.spec("f32[]"))


@pytest.mark.parametrize("backend", BACKENDS)
def test_trace_continues_after_a_caught_error(backend):
    # A failed cond/while leaves nothing behind: the module still verifies and runs.
    def f(x):
        for bad in (
            lambda: lax.cond(x > 0, lambda: x, lambda: x.astype("int32")),
            lambda: lax.while_loop(lambda c: c < 2, lambda c: c.astype("int8"), x),
        ):
            try:
                bad()
            except TypeError:
                pass
        return lax.cond(x > 0, lambda: x, lambda: -x)

    assert_same(run(backend, f, np.float32(-2)), np.float32(2))


CARRY_DTYPES = ["bool", "int8", "uint32", "int64", "float16", "bfloat16", "float64", "complex64"]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", CARRY_DTYPES)
def test_every_dtype_travels_through_branches_and_carries(backend, dtype):
    xs = np.array([1, 0, 3, 2], dtype=np.float32).astype(aotkit.numpy.dtype(dtype))

    def f(xs, p):
        def step(c, x):
            a, b = c
            picked = lax.cond(p, lambda: x, lambda: a)
            return (b, picked), a

        return lax.scan(step, (xs[0:1].reshape(()), xs[1:2].reshape(())), xs)

    a, b = xs[0], xs[1]
    ys = []
    for x in xs:
        ys.append(a)
        a, b = b, x
    got = run(backend, f, xs, np.bool_(True))
    want = ((a, b), np.array(ys, xs.dtype))
    for g, w in zip(tree_util.tree_leaves(got), tree_util.tree_leaves(want), strict=True):
        assert g.dtype == np.asarray(w).dtype
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize(
    ("lo", "hi", "index_dtype"),
    [
        (0, 3, "int64"),
        (np.int32(0), 3, "int32"),
        (np.uint8(0), np.uint8(3), "uint8"),
        (np.int8(0), np.int16(3), "int16"),
    ],
)
def test_fori_loop_index_has_the_bounds_dtype(lo, hi, index_dtype):
    def f(x):
        return lax.fori_loop(lo, hi, lambda i, c: c + i, np.zeros((), index_dtype))

    c = np.zeros((), index_dtype)
    for i in range(int(lo), int(hi)):
        c = c + np.asarray(i, index_dtype)
    assert_same(run("cpu", f, np.float32(0)), c)


@pytest.mark.parametrize("backend", BACKENDS)
def test_wide_and_unsigned_switch_indices_clamp_without_wrapping(backend):
    def f(i, u, x):
        branches = [lambda: x, lambda: x * 2, lambda: x * 3]
        return lax.switch(i, branches), lax.switch(u, branches)

    got = run(backend, f, np.int64(2**32), np.uint16(1), np.float32(1))
    assert_same(got, (np.float32(3), np.float32(2)))


@pytest.mark.parametrize("backend", BACKENDS)
def test_loop_in_branch_closing_over_the_enclosing_body(backend):
    def f(x, n):
        def body(i, acc):
            # The branch and the inner loop close over `i` and `acc` of the outer body.
            return lax.cond(
                i % 2 == 0,
                lambda: lax.while_loop(lambda c: c < acc + i, lambda c: c + 1, acc),
                lambda: acc * 2,
            )

        return lax.fori_loop(0, n, body, x)

    acc = 1
    for i in range(5):
        acc = acc + i if i % 2 == 0 else acc * 2
    assert_same(run(backend, f, np.int64(1), np.int64(5)), np.int64(acc))


def test_promotion_retraced_when_the_body_rejects_python_scalars():
    # `c.reshape` fails on the Python int the probe passes, so the carry starts as int64
    # and is promoted (traced again) to the float64 the body returns: NumPy's 0 + 0.5.
    def f(x):
        return lax.while_loop(lambda c: c < x, lambda c: c.reshape(()) + 0.5, 0)

    assert_same(run("cpu", f, np.float64(2)), np.float64(2))


@pytest.mark.parametrize("backend", BACKENDS)
def test_scan_python_scalar_init_follows_nep50(backend):
    def f(xs):
        return lax.scan(lambda c, x: (c + x, c * 1), 0, xs, unroll=2)

    xs = np.array([1, 2, 3], np.float32)
    assert_same(run(backend, f, xs), (np.float32(6), np.array([0, 1, 3], np.float32)))


def test_carry_dtype_that_never_settles():
    cycle = {"int8": "int16", "int16": "int32", "int32": "int64", "int64": "int8"}

    def f(x, s):
        body = lambda c: anp.asarray(c).astype(cycle[str(anp.asarray(c).dtype)])  # noqa: E731
        return lax.while_loop(lambda c: s < 0, body, 0)

    with pytest.raises(
        TypeError,
        match=message(
            "while_loop: the dtype of carry, whose init is a Python int, does not settle: "
            "after 4 promotions the body still returns a new dtype (i8); give the init an "
            "explicit dtype (np.int32(0), ...)"
        ),
    ):
        lower_f32(f)


def test_a_carry_whose_first_iteration_overflows_is_refused_not_widened():
    # `s = 0` with `s + x[i]` (uint8) in one branch and `s - 1` in the other: NumPy's dtype
    # is uint8 if the first iteration takes the first branch, an OverflowError if the
    # other. The probe's OverflowError was swallowed and the carry became int64 (310 where
    # NumPy gives uint8 54).
    def f(x):
        def body(i, s):
            return lax.cond(x[i] > 0, lambda: s + x[i], lambda: s - 1)

        return lax.fori_loop(0, 6, body, 0)

    site = r" \(at [^)]+\)"
    with pytest.raises(TypeError) as e:
        aotkit.lower(f, np.zeros(6, np.uint8))
    assert re.fullmatch(
        f"fori_loop{site}: "
        + re.escape(
            "the dtype of carry, started as a Python scalar, is NumPy's dtype after the first "
            "iteration, but that iteration fails on it (cond"
        )
        + site
        + re.escape(
            ": the Python scalar -1 does not fit u8; use a wider dtype): NumPy's dtype here "
            "depends on the values the body sees first; give the init an explicit dtype "
            "(np.uint8(0), np.int64(0), ...)"
        ),
        str(e.value),
    ), str(e.value)
    # With an explicit dtype it runs, wrapping as NumPy's uint8 does.
    g = lambda x: lax.fori_loop(  # noqa: E731
        0, 6, lambda i, s: lax.cond(x[i] > 0, lambda: s + x[i], lambda: s - 1), np.uint8(0)
    )
    x = np.array([100, 100, 100, 0, 5, 6], np.uint8)
    assert_same(run("cpu", g, x), np.uint8(54))


def test_scan_remainder_step_must_return_the_loop_types():
    calls = []

    def f(x, s):
        def step(c, e):
            calls.append(1)
            # The probe and the two unrolled loop steps see int carries; the remainder a float.
            return (c + 0.5 if len(calls) == 4 else c), e

        return lax.scan(step, 0, anp.ones(3), unroll=2)

    with pytest.raises(
        TypeError,
        match=message(
            "scan: f returns f64[] for carry at a later step than the first, whose init is a "
            "Python int (traced as i64[]); f must return the same carry types at every step"
        ),
    ):
        lower_f32(f)


@pytest.mark.parametrize(
    ("fn", "kind", "text"),
    [
        (
            lambda x, s: lax.cond(np.array("a"), lambda: x, lambda: x),
            TypeError,
            "cond: pred must be a scalar, got dtype <U1",
        ),
        (
            lambda x, s: lax.cond([True], lambda: x, lambda: x),
            TypeError,
            "cond: pred must be a scalar, got a list",
        ),
        (
            lambda x, s: lax.switch(1, [lambda: x, None]),
            TypeError,
            "switch: branches[1] must be callable, got NoneType",
        ),
        (
            lambda x, s: lax.while_loop(lambda c: 1, lambda c: c, x),
            TypeError,
            "while_loop: cond_fn must return a boolean scalar, got a Python int",
        ),
        (
            lambda x, s: lax.while_loop(lambda c: "go", lambda c: c, x),
            TypeError,
            "while_loop: cond_fn must return a boolean scalar, got a str",
        ),
        (
            lambda x, s: lax.while_loop(lambda c: True, 3, x),
            TypeError,
            "while_loop: body_fn must be callable, got int",
        ),
        (
            lambda x, s: lax.scan(lambda c, e: (c, e), 0, None, length=-1),
            TypeError,
            "scan: length must be a non-negative Python int, got -1",
        ),
        (
            lambda x, s: lax.scan(lambda c, e: (c, e), 0, x, unroll="all"),
            ValueError,
            "scan: unroll must be a positive int or a bool, got 'all'",
        ),
        (
            lambda x, s: lax.fori_loop(0, 2, lambda i, c: c, (x, object())),
            TypeError,
            "fori_loop: carry[1] is a object, not an array; a loop carry is a pytree (tuples, "
            "lists, dicts, None) of arrays and Python scalars",
        ),
    ],
    ids=lambda v: v if isinstance(v, str) and len(v) < 30 else None,
)
def test_more_bad_input(fn, kind, text):
    with pytest.raises(kind, match=message(text)):
        lower_f32(fn)


def test_tracers_of_a_finished_trace_are_refused():
    kept = []
    aotkit.lower(lambda x: kept.append(x) or x, aotkit.spec("f32[]"))
    for fn in (
        lambda x: lax.cond(kept[0] > 0, lambda: x, lambda: x),
        lambda x: lax.while_loop(lambda c: c < 1, lambda c: c, kept[0]),
        lambda x: lax.scan(lambda c, e: (c, e), x, kept[0]),
    ):
        with pytest.raises(TypeError, match="a tracer from a finished trace"):
            aotkit.lower(fn, aotkit.spec("f32[]"))


@pytest.mark.parametrize("name", ["cond", "switch", "while_loop", "fori_loop", "scan"])
def test_public_names(name):
    assert getattr(aotkit, name) is getattr(aotkit.lax, name)
    assert name in aotkit.__all__ and name in aotkit.lax.__all__


@pytest.mark.parametrize("backend", BACKENDS)
def test_empty_outputs_and_carries(backend):
    def f(x):
        return (
            lax.cond(x > 0, lambda: None, lambda: None),
            lax.while_loop(lambda c: False, lambda c: c, ()),
            lax.fori_loop(0, 3, lambda i, c: None, None),
            x,
        )

    assert_same(run(backend, f, np.float32(1)), (None, (), None, np.float32(1)))


@pytest.mark.parametrize("pipeline", ["none", "default"])
def test_pass_pipelines_keep_control_flow_results(pipeline):
    def f(xs, n):
        def step(c, x):
            i = (x > 1).astype("int32") + (x > 2).astype("int32")
            y = lax.switch(i, [lambda: x, lambda: x * x, lambda: -x])
            return lax.fori_loop(0, n, lambda _, a: a * 0.5 + y, c), y

        return lax.scan(step, np.float32(0), xs, reverse=True)

    xs = np.array([0.5, 1.5, 2.5, 3.5], np.float32)
    lowered = aotkit.lower(f, xs, np.int64(3), pipeline=pipeline)
    assert lowered.as_text().count("stablehlo.while") == 2
    c, ys = np.float32(0), np.zeros(4, np.float32)
    for t in reversed(range(4)):
        x = xs[t]
        ys[t] = [x, x * x, -x][int(x > 1) + int(x > 2)]
        for _ in range(3):
            c = c * np.float32(0.5) + ys[t]
    assert_same(run_lowered("cpu", lowered, xs, np.int64(3)), (c, ys))
