"""Reverse mode through loops: stored carries, checkpoints, bounded data-dependent loops, and
`aotkit.checkpoint`; the oracle is jax.grad of the same loop (or central differences where
JAX cannot reverse the loop)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import aotkit
import aotkit.numpy as anp

RNG = np.random.default_rng(0)
W = (RNG.standard_normal((16, 16)) / 4).astype(np.float32)
X = RNG.standard_normal((2, 16)).astype(np.float32)


def counted(xp, fori_loop, n):
    def loss(w, x):
        return xp.sum(fori_loop(0, n, lambda i, h: xp.tanh(h @ w) * 0.9 + h * 0.1, x))

    return loss


@pytest.mark.parametrize("n", [0, 1, 2, 37])
@pytest.mark.parametrize("policy", [None, "sqrt", 1, 5, 100])
def test_every_checkpoint_policy_gives_jax_gradient(n, policy):
    got = aotkit.grad(counted(anp, aotkit.fori_loop, n), (0, 1), checkpoint_loops=policy)(W, X)
    want = jax.grad(counted(jnp, jax.lax.fori_loop, n), (0, 1))(W, X)
    for g, w in zip(got, want, strict=True):
        assert np.asarray(g).dtype == np.float32
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-4, atol=1e-5)


def test_sqrt_checkpoints_store_fewer_carries():
    loss = counted(anp, aotkit.fori_loop, 400)
    every = aotkit.jit(aotkit.grad(loss)).lower(W, X).compile()
    sqrt = aotkit.jit(aotkit.grad(loss, checkpoint_loops="sqrt")).lower(W, X).compile()
    # 400 stored (2, 16) carries against 20 (plus one segment's 20 recomputed).
    assert sqrt.memory_analysis().temp_size_in_bytes < every.memory_analysis().temp_size_in_bytes
    np.testing.assert_allclose(np.asarray(sqrt(W, X)), np.asarray(every(W, X)), rtol=1e-5)


def _until(x):
    return anp.sum(aotkit.while_loop(lambda c: anp.sum(c) < 50.0, lambda c: c * 1.3 + 0.1, x))


def test_a_data_dependent_loop_with_a_bound_matches_central_differences():
    x = np.ones(3, np.float64)
    f = aotkit.jit(_until)
    eps = 1e-6
    want = [(float(f(x + eps * e)) - float(f(x - eps * e))) / (2 * eps) for e in np.eye(3)]
    for policy in (None, "sqrt"):
        got = aotkit.grad(_until, max_trip_count=64, checkpoint_loops=policy)(x)
        assert np.asarray(got).dtype == np.float64
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6)


def test_a_loop_past_its_bound_has_a_nan_gradient():
    got = aotkit.grad(_until, max_trip_count=3)(np.ones(3, np.float32))
    assert np.isnan(np.asarray(got)).all()


def test_a_data_dependent_loop_without_a_bound_says_what_to_do():
    with pytest.raises(
        NotImplementedError,
        match=r"grad: stablehlo\.while at .*test_loops\.py:\d+ is a while loop whose trip "
        r"count depends on the data, and reverse-mode differentiation stores one carry per "
        r"iteration; write it as a loop with a static trip count \(aotkit\.lax\.fori_loop or "
        r"scan with constant bounds, `for i in range\(n\)` with a static n\), give a bound "
        r"with max_trip_count=N \(the gradient is NaN if the loop runs longer\), or "
        r"differentiate it in forward mode \(aotkit\.jvp, aotkit\.jacfwd\)",
    ):
        aotkit.grad(_until)(np.ones(3, np.float32))


def _stops_early(x):
    s = 0.0
    for i in range(5):
        s = s + anp.sin(x[i]) * x[i]
        if s > 1.5:
            break
    return s


def _returns_early(x):
    for i in range(4):
        if x[i] > 2.0:
            return x[i] * x[0]
    return x.sum()


@pytest.mark.parametrize("fn", [_stops_early, _returns_early])
@pytest.mark.parametrize("scale", [1.0, 3.0, 0.1])
def test_a_range_loop_with_break_or_return_is_reversed_without_a_bound(fn, scale):
    """`for i in range(n)` with a traced `break` or `return` becomes a while loop whose form
    does not show n: grad refused it unless given max_trip_count. The converted loop
    records n, which reverse mode takes as the bound (with checkpoints too)."""
    x = np.array([0.5, 0.7, 0.9, 1.2, 0.3], np.float64) * scale
    f = aotkit.jit(fn)
    eps = 1e-6
    want = [(float(f(x + eps * e)) - float(f(x - eps * e))) / (2 * eps) for e in np.eye(5)]
    for policy in (None, "sqrt"):
        got = aotkit.grad(fn, checkpoint_loops=policy)(x)
        assert np.asarray(got).dtype == np.float64
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            {"checkpoint_loops": "half"},
            r"grad\(_until\): checkpoint_loops must be None \(store every carry\), 'sqrt' or "
            r"an int >= 1 \(store every k-th carry\), got 'half'",
        ),
        (
            {"checkpoint_loops": 0},
            r"grad\(_until\): checkpoint_loops must be None .*, got 0",
        ),
        (
            {"max_trip_count": -1},
            r"grad\(_until\): max_trip_count must be None or an int >= 1, got -1",
        ),
    ],
)
def test_loop_options_are_checked_when_the_function_is_made(options, message):
    with pytest.raises(ValueError, match=message):
        aotkit.grad(_until, **options)


def test_nested_loops_are_reversed():
    def nested(xp, fori_loop):
        def loss(w, x):
            def outer(i, h):
                return fori_loop(0, 3, lambda j, g: xp.sin(g @ w) + g, h) * 0.5

            return xp.sum(fori_loop(0, 4, outer, x))

        return loss

    got = aotkit.grad(nested(anp, aotkit.fori_loop), checkpoint_loops="sqrt")(W, X)
    want = jax.grad(nested(jnp, jax.lax.fori_loop))(W, X)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-4, atol=1e-5)


def _block(h, w):
    for _ in range(3):
        h = anp.tanh(h @ w)
    return h


def test_checkpoint_recomputes_behind_a_barrier_and_gives_the_same_gradient():
    def loss(w, x, wrap):
        h = x
        for _ in range(4):
            h = wrap(_block)(h, w)
        return anp.sum(h**2)

    plain = aotkit.grad(lambda w, x: loss(w, x, lambda f: f))(W, X)
    lowered = aotkit.jit(
        aotkit.grad(lambda w, x: loss(w, x, aotkit.checkpoint)), autograph=False
    ).lower(W, X)
    text = lowered.as_text()
    assert text.count("stablehlo.optimization_barrier") == 4  # one per recomputed block
    np.testing.assert_allclose(np.asarray(lowered.compile()(W, X)), np.asarray(plain), rtol=1e-5)


def test_checkpoint_outside_reverse_mode_is_the_function():
    got = aotkit.checkpoint(_block)(X, W)
    want = aotkit.jit(_block)(X, W)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-6)
    tangent = np.ones_like(X)
    out, t = aotkit.jvp(aotkit.checkpoint(_block), (X, W), (tangent, np.zeros_like(W)))
    want_out, want_t = aotkit.jvp(_block, (X, W), (tangent, np.zeros_like(W)))
    np.testing.assert_allclose(np.asarray(t), np.asarray(want_t), rtol=1e-5)
