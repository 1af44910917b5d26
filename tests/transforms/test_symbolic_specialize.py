"""`Lowered.specialize(**sizes)` (issue 44, item 3): a program with symbolic shapes made
static, so that the transforms' refusal of dynamic shapes can be followed: the refusal names
it, and the specialized program's gradient and batching agree with JAX's (the oracle), its
results with the symbolic program's at those sizes.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import export

import aotkit
import aotkit.numpy as anp
from tests import lane

RNG = np.random.default_rng(3)


def f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def loss(w, x):
    return jnp.sum(jnp.tanh(x @ w) ** 2)


@pytest.fixture(scope="module")
def exported():
    """A jax.export of `loss` with a symbolic batch `b`, loaded."""
    (b,) = export.symbolic_shape("b")
    exp = export.export(jax.jit(loss), platforms=lane.EXPORT_PLATFORMS)(
        jax.ShapeDtypeStruct((3, 2), jnp.float32), jax.ShapeDtypeStruct((b, 3), jnp.float32)
    )
    return aotkit.load_module(bytes(exp.serialize()))


def close(got, want):
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6 * float(np.max(np.abs(want))))


def test_transform_refusal_names_specialize():
    # A transform inside a symbolic trace; `exported.grad()` transforms per shape
    # (tests/symbolic/test_symbolic_transforms.py).
    with pytest.raises(
        NotImplementedError,
        match=r"has a dynamic shape; aotkit's transform rules run on static shapes: transform "
        r"the symbolic program as a stage instead, which transforms it per shape as it "
        r"compiles \(aotkit\.jit\(f\)\.lower\(aotkit\.spec\('f32\[b,784\]'\)\)\.grad\(\)\), "
        r"or specialize it to concrete sizes first \(Lowered\.specialize, one size per "
        r"symbol: lowered\.specialize\(b=8\)\.grad\(\)\)$",
    ):
        aotkit.jit(aotkit.grad(lambda x: anp.sum(x * x))).lower(aotkit.spec("f32[b]"))


def test_specialized_is_static_and_runs_as_the_symbolic_program(exported):
    lowered = exported.specialize(b=4)
    assert [s.shape for s in lowered.in_specs[0]] == [(3, 2), (4, 3)]
    assert "?" not in lowered.as_text()
    w, x = f32(3, 2), f32(4, 3)
    got = lowered.compile()(w, x)
    np.testing.assert_array_equal(got, exported.compile()(w, x))
    assert got.dtype == np.float32


def test_grad_of_specialized_matches_jax_grad(exported):
    w, x = f32(3, 2), f32(5, 3)
    grads = exported.specialize(b=5).grad(argnums=(0, 1)).compile()(w, x)
    want = jax.grad(loss, argnums=(0, 1))(w, x)
    close(grads[0], want[0])
    close(grads[1], want[1])


def test_vmap_of_specialized_matches_jax_vmap(exported):
    w, xs = f32(3, 2), f32(6, 2, 3)
    got = exported.specialize(b=2).vmap(in_axes=(None, 0), axis_size=6).compile()(w, xs)
    close(got, jax.vmap(loss, in_axes=(None, 0))(w, xs))


def test_specialize_a_traced_symbolic_program():
    lowered = aotkit.lower(lambda x: anp.sum(anp.sin(x) ** 2), aotkit.spec("f32[n,3]"))
    x = f32(7, 3)
    static = lowered.specialize(n=7)
    np.testing.assert_array_equal(static.compile()(x), lowered.compile()(x))
    close(static.grad().compile()(x), jax.grad(lambda x: jnp.sum(jnp.sin(x) ** 2))(x))


@pytest.mark.parametrize(
    "sizes, message",
    [
        ({}, r"^Lowered 'loss': specialize: no size for b; give one size per symbol: b=\.\.\.$"),
        (
            {"b": 4, "c": 2},
            r"^Lowered 'loss': specialize: 'c' is not a symbol of this program \(its symbols: "
            r"b\)$",
        ),
        (
            {"b": True},
            r"^Lowered 'loss': specialize: b = True is a bool, not a size; give ints \(such as "
            r"1\)$",
        ),
        ({"b": -1}, r"^Lowered 'loss': specialize: b = -1; give every symbol \(b\) a size >= 0$"),
    ],
)
def test_specialize_errors(exported, sizes, message):
    with pytest.raises(ValueError, match=message):
        exported.specialize(**sizes)


def test_specialize_checks_the_programs_constraints(exported):
    # jax.export states b >= 1.
    with pytest.raises(
        ValueError,
        match=r"^Lowered 'loss': specialize: b = 0 breaks the constraint b >= 1; give sizes "
        r"for which it holds$",
    ):
        exported.specialize(b=0)


def test_specialize_a_static_program_is_refused(exported):
    with pytest.raises(
        ValueError,
        match=r"^Lowered 'loss': specialize: the program has static shapes, so it has nothing "
        r"to specialize; lower it with symbolic dimensions \(aotkit\.spec\('f32\[b,784\]'\)\) "
        r"to specialize it$",
    ):
        exported.specialize(b=2).specialize(b=2)
