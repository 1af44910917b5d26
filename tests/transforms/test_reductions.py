"""The transforms of reductions and products: sum, mean, prod (with zeros), max/min (ties
split as JAX splits them), argmax, var/std, logsumexp, softmax, and matmul, dot, einsum,
tensordot (dot_general with batch and contracting dimensions); against JAX, central
differences and the transpose identity.

One program per dtype for the whole family (tests/transforms/oracle.py); each test checks
one op, so a failure names it.
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
    """A case written once for both namespaces: `fn(xp, *args)`."""
    return Case(lambda *a: fn(anp, *a), lambda *a: fn(jnp, *a), make, **options)


def normal(*shapes):
    return lambda rng, dt: tuple(rng.standard_normal(s).astype(dt) for s in shapes)


def with_zeros(rng, dt):
    """Rows with no zero, one zero and two zeros: the product's derivative at each."""
    x = rng.uniform(0.5, 1.5, (3, 4)).astype(dt) * rng.choice([-1, 1], (3, 4)).astype(dt)
    x[1, 2] = 0
    x[2, 0] = x[2, 3] = 0
    return (x,)


def with_ties(rng, dt):
    """Rows whose maximum (and minimum) is taken twice or three times."""
    x = rng.uniform(-1, 1, (3, 5)).astype(dt)
    x[0, 1] = x[0, 3] = 2
    x[1, 0] = x[1, 2] = x[1, 4] = 2
    x[0, 0] = x[0, 4] = -2
    return (x,)


def _logsumexp(xp, x):
    m = xp.max(x, axis=1, keepdims=True)
    return xp.log(xp.sum(xp.exp(x - m), axis=1)) + m[:, 0]


REDUCTIONS = {
    "sum": twin(lambda xp, x: xp.sum(x), normal((3, 4))),
    "sum_axis": twin(lambda xp, x: xp.sum(x, axis=1), normal((3, 4))),
    "sum_axes_keepdims": twin(
        lambda xp, x: xp.sum(x, axis=(0, 2), keepdims=True), normal((2, 3, 4))
    ),
    "mean": twin(lambda xp, x: xp.mean(x, axis=0), normal((3, 4))),
    "prod": twin(lambda xp, x: xp.prod(x, axis=1), normal((3, 4))),
    "prod_zeros": twin(lambda xp, x: xp.prod(x, axis=1), with_zeros),
    "prod_all_zeros": twin(lambda xp, x: xp.prod(x), with_zeros, fd=False),
    "prod_axis0_zeros": twin(lambda xp, x: xp.prod(x, axis=0), with_zeros),
    "max": twin(lambda xp, x: xp.max(x, axis=1), normal((3, 5))),
    "max_ties": twin(lambda xp, x: xp.max(x, axis=1), with_ties, fd=False),
    "min_ties": twin(lambda xp, x: xp.min(x, axis=1), with_ties, fd=False),
    "max_all": twin(lambda xp, x: xp.max(x), normal((3, 5))),
    "amax_axes": twin(lambda xp, x: xp.amax(x, axis=(0, 2)), normal((2, 3, 4))),
    "argmax": twin(
        lambda xp, x: xp.take_along_axis(x, xp.argmax(x, axis=1)[:, None], axis=1) * x,
        normal((3, 5)),
    ),
    "argmin": twin(lambda xp, x: x[xp.argmin(x[:, 0])] * 2, normal((4, 3))),
    "var": twin(lambda xp, x: xp.var(x, axis=1), normal((3, 5))),
    "std": twin(lambda xp, x: xp.std(x), normal((3, 5))),
    "logsumexp": twin(_logsumexp, normal((3, 5))),
    "softmax": Case(lambda x: aotkit.nn.softmax(x, axis=-1), jax.nn.softmax, normal((3, 5))),
    "norm": twin(lambda xp, x: xp.sqrt(xp.sum(x * x, axis=0)), normal((3, 4))),
    "matmul": twin(lambda xp, a, b: a @ b, normal((3, 4), (4, 2))),
    "matvec": twin(lambda xp, a, v: a @ v, normal((3, 4), (4,))),
    "vecmat": twin(lambda xp, v, a: v @ a, normal((3,), (3, 4))),
    "batched_matmul": twin(lambda xp, a, b: xp.matmul(a, b), normal((2, 3, 4), (2, 4, 5))),
    "broadcast_matmul": twin(lambda xp, a, b: a @ b, normal((2, 3, 4), (4, 5))),
    "dot": twin(lambda xp, a, b: xp.dot(a, b), normal((4,), (4,))),
    "inner": twin(lambda xp, a, b: xp.inner(a, b), normal((3, 4), (2, 4))),
    "outer": twin(lambda xp, a, b: xp.outer(a, b), normal((3,), (4,))),
    "einsum_batch": twin(
        lambda xp, a, b: xp.einsum("bij,bkj->bik", a, b), normal((2, 3, 4), (2, 5, 4))
    ),
    "einsum_contract_two": twin(
        lambda xp, a, b: xp.einsum("ijk,kjl->il", a, b), normal((2, 3, 4), (4, 3, 5))
    ),
    "einsum_trace_free": twin(
        lambda xp, a, b: xp.einsum("ij,jk,k->i", a, b, b[0]), normal((3, 4), (4, 4))
    ),
    "tensordot": twin(
        lambda xp, a, b: xp.tensordot(a, b, axes=([1, 2], [0, 1])), normal((2, 3, 4), (3, 4, 5))
    ),
    "tensordot_int": twin(lambda xp, a, b: xp.tensordot(a, b, axes=1), normal((2, 3), (3, 4))),
}

FAMILY = Family(REDUCTIONS)
CASES = [pytest.param(name, dtype, id=f"{name}-{dtype}") for name in REDUCTIONS for dtype in FLOATS]


test_jvp, test_vjp, test_vmap, test_transpose, test_central_differences = rule_tests(
    FAMILY, CASES, [(n, "float64") for n, c in REDUCTIONS.items() if c.fd]
)


def test_max_ties_split_the_gradient_evenly():
    """JAX's rule, spelled out: each of k tied maxima gets 1/k of the cotangent."""
    x = np.array([[2.0, 1.0, 2.0], [3.0, 3.0, 3.0]], np.float32)
    got = aotkit.grad(lambda x: anp.max(x, axis=1).sum())(x)
    np.testing.assert_array_equal(np.asarray(got), np.float32([[0.5, 0, 0.5], [1 / 3] * 3]))


def test_prod_gradient_with_zeros_is_the_product_of_the_others():
    x = np.array([2.0, 0.0, 3.0, 4.0])
    got = aotkit.grad(lambda x: anp.prod(x))(x)
    np.testing.assert_array_equal(np.asarray(got), [0.0, 24.0, 0.0, 0.0])


def _reduce_lines(lowered) -> list[tuple[int, set[int]]]:
    """For each stablehlo.reduce of @main: its source line and its combiner ops' lines."""

    def line(op):
        found = re.search(r":(\d+):\d+\)$", str(op.location))
        return int(found.group(1)) if found else -1

    module = lowered.module  # a copy: held while its ops are read
    main = module.body.operations[0]
    found = []
    for op in main.regions[0].blocks[0].operations:
        if op.operation.name == "stablehlo.reduce":
            body = op.operation.regions[0].blocks[0].operations
            found.append((line(op), {line(inner) for inner in body}))
    return found


def test_equal_reductions_of_a_gradient_keep_their_own_lines():
    # A bias's cotangent is a sum over the batch: equal reductions, copied from one built
    # per source line; each keeps the line of the bias it comes from, combiner included.
    def loss(b1, b2, x):
        h = anp.tanh(x + b1)
        h = anp.tanh(h + b2)
        return anp.sum(h * h)

    first = loss.__code__.co_firstlineno
    b, x = np.ones(3, np.float32), np.ones((5, 3), np.float32)
    lowered = aotkit.jit(aotkit.grad(loss, argnums=(0, 1)), pipeline="none").lower(b, b, x)
    reductions = _reduce_lines(lowered)
    bias_lines = {first + 1, first + 2}
    assert {ln for ln, _ in reductions} == bias_lines | {first + 3}
    assert all(inner == {ln} for ln, inner in reductions)
    g1, g2 = aotkit.jit(aotkit.grad(loss, argnums=(0, 1)))(b, b, x)

    def loss_j(b1, b2, x):
        h = jnp.tanh(jnp.tanh(x + b1) + b2)
        return jnp.sum(h * h)

    w1, w2 = jax.grad(loss_j, argnums=(0, 1))(b, b, x)
    np.testing.assert_allclose(g1, w1, rtol=1e-6)
    np.testing.assert_allclose(g2, w2, rtol=1e-6)
