"""The transforms of control flow: fori_loop, scan, while_loop (forward mode and batching with
a batched predicate; reverse mode of a static trip count), cond and switch (a batched
predicate or index under vmap; indices out of range), Python loops and ifs that autograph
converts, nested loops and branches; against JAX, central differences and the transpose
identity; the error of reverse mode on a loop whose trip count depends on the data.

One program per dtype for the whole family (tests/transforms/oracle.py), traced with
autograph on; each test checks one case, so a failure names it.
"""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import aotkit
import aotkit.numpy as anp
from tests.transforms.oracle import Case, Family, rule_tests

FLOATS = ["float32", "float64"]


def twin(fn, make, **options) -> Case:
    """A case written once for both libraries: `fn(xp, lax, *args)`."""
    return Case(lambda *a: fn(anp, aotkit, *a), lambda *a: fn(jnp, jax.lax, *a), make, **options)


def normal(*shapes, scale=0.5):
    return lambda rng, dt: tuple((rng.standard_normal(s) * scale).astype(dt) for s in shapes)


def signed(shape=(4,)):
    """x shifted so its sum is positive or negative: lanes take different branches."""

    def make(rng, dt):
        x = rng.standard_normal(shape) * 0.5 + rng.choice([-1.0, 1.0])
        return (x.astype(dt),)

    return make


def with_branch(high, low=0):
    def make(rng, dt):
        return (rng.standard_normal((4,)).astype(dt), np.int32(rng.integers(low, high)))

    return make


# --- Python control flow, converted by autograph (aotkit) and written out (JAX) -----------------


def python_loop(x):
    for _ in range(4):
        x = anp.cos(x) * 1.1 + 0.1 * x
    return x


def python_loop_jax(x):
    for _ in range(4):
        x = jnp.cos(x) * 1.1 + 0.1 * x
    return x


def python_if(x):
    if anp.sum(x) > 0:
        y = anp.sin(x) * 3
    else:
        y = x * x
    return y


def python_if_jax(x):
    return jnp.where(jnp.sum(x) > 0, jnp.sin(x) * 3, x * x)


def python_while(x):
    s = anp.zeros((), x.dtype)
    while s < 3:
        s = s + anp.sum(anp.abs(x)) + 0.5
        x = x * anp.cos(x)
    return x


def python_while_jax(x):
    def body(c):
        s, x = c
        return s + jnp.sum(jnp.abs(x)) + 0.5, x * jnp.cos(x)

    return jax.lax.while_loop(lambda c: c[0] < 3, body, (jnp.zeros((), x.dtype), x))[1]


def python_nested(x, w):
    for i in range(3):
        if anp.sum(x) > 0:
            x = anp.tanh(x * w) + i
        else:
            x = x * 0.5 - w
    return x


def python_nested_jax(x, w):
    for i in range(3):
        x = jnp.where(jnp.sum(x) > 0, jnp.tanh(x * w) + i, x * 0.5 - w)
    return x


def _while_counter(xp, lax, x):
    """A while loop a counter bounds: forward mode, batching and (static trip count)
    reverse mode."""

    def body(c):
        return c[0] + 1, c[1] * xp.cos(c[1]) + 0.1

    return lax.while_loop(lambda c: c[0] < 5, body, (0, x))[1]


def _fori_counter(xp, lax, x):
    """JAX's twin of `_while_counter` for reverse mode (JAX has no vjp of while_loop)."""
    return lax.fori_loop(0, 5, lambda i, c: c * xp.cos(c) + 0.1, x)


def _while_data(xp, lax, x):
    """A while loop its data bounds: the predicate is batched under vmap."""

    def body(c):
        return c[0] + xp.sum(xp.abs(c[1])) + 0.5, c[1] * 1.5

    return lax.while_loop(lambda c: c[0] < 4.0, body, (xp.zeros((), x.dtype), x))[1]


def _scan(xp, lax, init, xs, reverse=False):
    def step(c, x):
        return c * xp.sin(x) + x, c * x

    return lax.scan(step, init, xs, reverse=reverse)


def _branches(xp):
    return [lambda x: xp.sin(x), lambda x: x * x - 1, lambda x: xp.exp(x) * 0.5]


CONTROL = {
    "fori_loop": twin(
        lambda xp, lax, x: lax.fori_loop(0, 5, lambda i, c: c * xp.sin(c) + x, x), normal((4,))
    ),
    "fori_loop_index": twin(
        lambda xp, lax, x: lax.fori_loop(1, 4, lambda i, c: c + xp.sin(i * c), x), normal((4,))
    ),
    "fori_loop_captured": twin(
        lambda xp, lax, x, w: lax.fori_loop(0, 3, lambda i, c: xp.tanh(c @ w) + c, x),
        normal((4,), (4, 4)),
    ),
    "fori_loop_pair": twin(
        lambda xp, lax, x, y: lax.fori_loop(0, 3, lambda i, c: (c[0] * c[1], c[0] + c[1]), (x, y)),
        normal((3,), (3,)),
    ),
    "scan": twin(lambda xp, lax, c, xs: _scan(xp, lax, c, xs), normal((3,), (5, 3))),
    "scan_reverse": twin(
        lambda xp, lax, c, xs: _scan(xp, lax, c, xs, reverse=True), normal((3,), (5, 3))
    ),
    "while_counter": Case(
        lambda x: _while_counter(anp, aotkit, x),
        lambda x: _fori_counter(jnp, jax.lax, x),
        normal((4,)),
    ),
    "while_counter_jax": twin(_while_counter, normal((4,)), vjp=False),
    "while_data": twin(_while_data, normal((4,)), vjp=False),
    "cond": twin(
        lambda xp, lax, x: lax.cond(xp.sum(x) > 0, lambda: xp.sin(x) * 3, lambda: xp.cos(x)),
        signed(),
    ),
    "cond_operands": twin(
        lambda xp, lax, x, y: lax.cond(
            xp.sum(x) > 0, lambda a, b: a * b, lambda a, b: a - xp.exp(b), x, y
        ),
        lambda rng, dt: signed()(rng, dt) + normal((4,))(rng, dt),
    ),
    "cond_fixed_predicate": twin(
        lambda xp, lax, x, y: lax.cond(xp.sum(y) > 0, lambda: xp.sin(x), lambda: x * y),
        lambda rng, dt: normal((4,))(rng, dt) + signed()(rng, dt),
        in_axes=(0, None),
    ),
    "switch": twin(lambda xp, lax, x, i: lax.switch(i, _branches(xp), x), with_branch(3)),
    "switch_out_of_range": twin(
        lambda xp, lax, x, i: lax.switch(i, _branches(xp), x), with_branch(6, -2)
    ),
    "switch_fixed_index": twin(
        lambda xp, lax, x, i: lax.switch(i, _branches(xp), x), with_branch(3), in_axes=(0, None)
    ),
    "python_loop": Case(python_loop, python_loop_jax, normal((4,))),
    "python_if": Case(python_if, python_if_jax, signed()),
    "python_while": Case(python_while, python_while_jax, normal((4,)), vjp=False),
    "python_nested": Case(python_nested, python_nested_jax, normal((4,), (4,))),
    "nested_fori": twin(
        lambda xp, lax, x: lax.fori_loop(
            0, 3, lambda i, c: lax.fori_loop(0, 2, lambda j, d: xp.sin(d) * c + d, c), x
        ),
        normal((4,)),
    ),
    "cond_in_fori": twin(
        lambda xp, lax, x: lax.fori_loop(
            0, 4, lambda i, c: lax.cond(xp.sum(c) > 0, lambda: c * 0.5 - 1, lambda: c * c), x
        ),
        signed(),
    ),
    "fori_in_cond": twin(
        lambda xp, lax, x: lax.cond(
            xp.sum(x) > 0,
            lambda: lax.fori_loop(0, 3, lambda i, c: xp.sin(c) + x, x),
            lambda: x * 2,
        ),
        signed(),
    ),
}

FAMILY = Family(CONTROL, autograph=True)
CASES = [pytest.param(name, dtype, id=f"{name}-{dtype}") for name in CONTROL for dtype in FLOATS]
REVERSE = [p for p in CASES if CONTROL[p.values[0]].vjp]


test_jvp, test_vjp, test_vmap, test_transpose, test_central_differences = rule_tests(
    FAMILY, CASES, [(n, "float64") for n in CONTROL], reverse=REVERSE
)


def test_batched_lanes_take_both_branches_and_run_different_trip_counts():
    """The inputs the vmap checks use exercise what they claim to: lanes on both sides of
    each batched predicate, and loops whose lanes finish at different iterations."""
    inp, _, _ = FAMILY.result("cond", "float32")
    signs = np.sign(inp.batched["cond"][0].sum(axis=1))
    assert set(signs) == {-1.0, 1.0}
    inp, got, _ = FAMILY.result("while_data", "float32")
    (x,) = inp.batched["while_data"]
    trips = [
        int(np.ceil(np.log(got["vm"]["while_data"][k][0] / x[k][0]) / np.log(1.5)))
        for k in range(len(x))
    ]
    assert len(set(trips)) > 1, trips


_WHILE_ERROR = (
    r"{t}: stablehlo\.while at .*test_control\.py:\d+ is a while loop whose trip count "
    r"depends on the data, and reverse-mode differentiation stores one carry per iteration; "
    r"write it as a loop with a static trip count \(aotkit\.lax\.fori_loop or scan with "
    r"constant bounds, `for i in range\(n\)` with a static n\), give a bound with "
    r"max_trip_count=N \(the gradient is NaN if the loop runs longer\), or differentiate it "
    r"in forward mode \(aotkit\.jvp, aotkit\.jacfwd\)"
)


@pytest.mark.parametrize(
    ("transform", "label"),
    [
        (lambda f, x: aotkit.grad(lambda x: f(x).sum())(x), "grad"),
        (lambda f, x: aotkit.vjp(f, x), "vjp"),
        (lambda f, x: aotkit.jacrev(f)(x), "vjp"),
    ],
    ids=["grad", "vjp", "jacrev"],
)
def test_reverse_mode_of_a_data_dependent_loop_says_what_to_do(transform, label):
    x = np.ones(3, np.float32)
    with pytest.raises(NotImplementedError, match=_WHILE_ERROR.format(t=label)):
        transform(lambda x: _while_data(anp, aotkit, x), x)


def test_forward_mode_of_a_data_dependent_loop_needs_no_bound():
    x = np.full(3, 0.5, np.float32)
    got = aotkit.jacfwd(lambda x: _while_data(anp, aotkit, x))(x)
    want = jax.jacfwd(lambda x: _while_data(jnp, jax.lax, x))(x)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-6)


def test_the_error_names_the_loop_s_line():
    """The site in the message is the line of the while_loop call, in this file."""
    x = np.ones(3, np.float32)
    with pytest.raises(NotImplementedError) as info:
        aotkit.grad(lambda x: _while_data(anp, aotkit, x).sum())(x)
    (line,) = re.findall(r"test_control\.py:(\d+)", str(info.value))
    source = open(__file__).read().splitlines()[int(line) - 1]
    assert "lax.while_loop" in source, source
