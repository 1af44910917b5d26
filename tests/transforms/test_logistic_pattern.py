"""A sigmoid differentiates as one op: JAX lowers `lax.logistic` (`jax.nn.sigmoid`, Flax's and
Equinox's gates) to `1 / (1 + exp(-x))`, and aotkit's JVP rules give that chain the
logistic's derivative `y (1 - y)` of its result y, as JAX's rule does, instead of the exp's
and the quotient's: reverse mode through a loop then stores one row per sigmoid per step,
not two. Chains that are not exactly a sigmoid (a value between used elsewhere, other
constants, another dtype on the way) keep the op-by-op derivative. The oracle is jax.grad
(jax.jvp) of the same program; the structure is checked on the gradient's module."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import aotkit
import aotkit.numpy as anp
from tests.transforms.test_loop_grad_speed_rules import loops, op_names

STEPS, BATCH, HIDDEN = 6, 3, 5
RNG = np.random.default_rng(11)
TOL = {
    np.dtype(np.float32): (1e-5, 1e-6),
    np.dtype(np.float64): (1e-12, 1e-14),
    np.dtype(np.float16): (2e-3, 1e-3),
    np.dtype(ml_dtypes.bfloat16): (2e-2, 1e-2),
    np.dtype(np.complex64): (1e-5, 1e-6),
}


def sample(*shape, dtype=np.float32, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(dtype)


def assert_matches_jax(loss, args, argnums=0, *, computed_in=None, **options):
    """aotkit's gradient of the JAX function `loss` against jax.grad's, to the tolerance of
    the result's dtype, or of `computed_in` where the function computes in a narrower one."""
    lowered = aotkit.jit(loss, frontend="jax").lower(*args)
    got = lowered.grad(argnums, **options).compile()(*args)
    want = jax.grad(loss, argnums)(*args)
    got_leaves, want_leaves = jax.tree.leaves(got), jax.tree.leaves(want)
    assert len(got_leaves) == len(want_leaves)
    for g, w in zip(got_leaves, want_leaves, strict=True):
        g, w = np.asarray(g), np.asarray(w)
        assert g.dtype == w.dtype
        rtol, atol = TOL[np.dtype(computed_in or g.dtype)]
        wide = np.complex128 if np.iscomplexobj(g) else np.float64
        np.testing.assert_allclose(g.astype(wide), w.astype(wide), rtol, atol)


def rows(loop, shape) -> int:
    """How many of the loop's carries are stacks of `shape` (one row per step)."""
    return sum(tuple(r.type.shape) == shape for r in loop.results)


# --- values --------------------------------------------------------------------------------------


def sigmoid_loss(x):
    return jnp.sum(jax.nn.sigmoid(x) * jnp.cos(x))


@pytest.mark.parametrize(
    "dtype", [np.float32, np.float16, ml_dtypes.bfloat16], ids=lambda d: np.dtype(d).name
)
def test_a_sigmoid_gradient_matches_jax(dtype):
    assert_matches_jax(sigmoid_loss, (sample(4, 7, dtype=dtype, scale=3.0),))


def test_a_float64_sigmoid_gradient_matches_jax_in_x64_mode():
    with jax.enable_x64(True):
        x = sample(4, 7, dtype=np.float64, scale=3.0)
        assert_matches_jax(sigmoid_loss, (x,))


def test_a_sigmoid_gradient_stays_finite_where_exp_of_minus_x_overflows():
    # exp(100) is inf in float32: the quotient's derivative would be inf * 0 there.
    x = np.array([-100.0, -30.0, -5.0, 0.0, 5.0, 30.0, 100.0], np.float32)
    got = aotkit.grad(lambda x: jnp.sum(jax.nn.sigmoid(x)), frontend="jax")(x)
    want = jax.grad(lambda x: jnp.sum(jax.nn.sigmoid(x)))(x)
    assert np.asarray(got).dtype == np.float32
    assert np.isfinite(np.asarray(got)).all()
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-6, atol=0)


def test_a_written_out_sigmoid_is_recognised_too():
    def loss(x):
        return jnp.sum(x * (1.0 / (1.0 + jnp.exp(-x))))

    lowered = aotkit.jit(loss, frontend="jax").lower(sample(3, 4)).grad()
    # The derivative is y (1 - y): no divide by the square of the sum, no second exp.
    names = op_names(lowered.module.body)
    assert names.count("stablehlo.exponential") == 1
    assert names.count("stablehlo.divide") == 1
    assert_matches_jax(loss, (sample(3, 4, scale=3.0),))


def test_an_aotkit_program_written_out_matches_jax():
    def loss(xp):
        return lambda x: xp.sum(x * (1.0 / (1.0 + xp.exp(-x))) + xp.sin(x))

    x = sample(3, 4, scale=3.0)
    got = aotkit.grad(loss(anp))(x)
    want = jax.grad(loss(jnp))(x)
    assert np.asarray(got).dtype == np.float32
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), *TOL[np.dtype(np.float32)])


MODULE = """module @m {
  func.func public @main(%arg0: tensor<2xf32>) -> tensor<f32> {
    %one = stablehlo.constant ONE : tensor<2xf32>
    %z = stablehlo.constant dense<0.0> : tensor<f32>
    %0 = stablehlo.negate %arg0 : tensor<2xf32>
    %1 = stablehlo.exponential %0 : tensor<2xf32>
    %2 = stablehlo.add %1, %one : tensor<2xf32>
    %3 = stablehlo.divide %one, %2 : tensor<2xf32>
    %4 = stablehlo.reduce(%3 init: %z) applies stablehlo.add across dimensions = [0]
      : (tensor<2xf32>, tensor<f32>) -> tensor<f32>
    return %4 : tensor<f32>
  }
}
{-#
  dialect_resources: {
    builtin: {
      ones: "0x040000000000803F0000803F"
    }
  }
#-}
"""


def test_a_loaded_module_with_splat_ones_differentiates_as_a_sigmoid():
    lowered = aotkit.load_module(MODULE.replace("ONE", "dense<1.0>").encode()).grad()
    assert op_names(lowered.module.body).count("stablehlo.divide") == 1
    x = np.array([0.5, -2.0], np.float32)
    got = np.asarray(lowered.compile()(x))
    want = np.asarray(jax.grad(lambda x: jnp.sum(jax.nn.sigmoid(x)))(x))
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, *TOL[np.dtype(np.float32)])


def test_ones_in_a_resource_blob_are_not_read_and_keep_the_op_by_op_derivative():
    # The bindings cannot read a dense_resource constant: the chain is not taken for a
    # sigmoid (the derivative divides again), and the transform does not fail on it.
    lowered = aotkit.load_module(MODULE.replace("ONE", "dense_resource<ones>").encode()).grad()
    assert op_names(lowered.module.body).count("stablehlo.divide") == 2


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=lambda d: np.dtype(d).name)
def test_the_forward_mode_derivative_matches_jax_jvp(dtype):
    def f(x):
        return jax.nn.sigmoid(x) * x

    with jax.enable_x64(dtype == np.float64):
        x, t = sample(5, dtype=dtype, scale=3.0), sample(5, dtype=dtype)
        out, tout = aotkit.jvp(f, (x,), (t,), frontend="jax")
        want_out, want_tout = jax.jvp(f, (x,), (t,))
    for g, w in ((out, want_out), (tout, want_tout)):
        g, w = np.asarray(g), np.asarray(w)
        assert g.dtype == w.dtype == np.dtype(dtype)
        np.testing.assert_allclose(g, w, *TOL[g.dtype])


# --- chains that are not a sigmoid keep their values ----------------------------------------------


# A value of the chain used elsewhere too, that use before the chain's own and after it.


def exp_used_again(x):
    e = jnp.exp(-x)
    return jnp.sum(1.0 / (1.0 + e) + e * x)


def exp_used_before(x):
    e = jnp.exp(-x)
    other = e * x
    return jnp.sum(other + 1.0 / (1.0 + e))


def negation_used_again(x):
    n = -x
    return jnp.sum(1.0 / (1.0 + jnp.exp(n)) * n)


def negation_used_before(x):
    n = -x
    other = n * n
    return jnp.sum(other + 1.0 / (1.0 + jnp.exp(n)))


def sum_used_again(x):
    d = 1.0 + jnp.exp(-x)
    return jnp.sum(1.0 / d + jnp.sin(d))


def sum_used_before(x):
    d = 1.0 + jnp.exp(-x)
    other = jnp.sin(d)
    return jnp.sum(other + 1.0 / d)


def quotient_used_twice(x):
    y = 1.0 / (1.0 + jnp.exp(-x))
    return jnp.sum(y * y + y)


def two_over(x):
    return jnp.sum(2.0 / (1.0 + jnp.exp(-x)) * x)


def one_over_two_plus(x):
    return jnp.sum(1.0 / (2.0 + jnp.exp(-x)) * x)


def sum_over_one(x):
    return jnp.sum((1.0 + jnp.exp(-x)) / 1.0 * x)


def exp_of_plus(x):
    return jnp.sum(1.0 / (1.0 + jnp.exp(x)) * x)


def minus_instead_of_plus(x):
    return jnp.sum(1.0 / (1.0 - jnp.exp(-x)) * x)


def exp_in_another_dtype(x):
    e = jnp.exp(-x).astype(jnp.float16)
    return jnp.sum((1.0 / (1.0 + e)).astype(x.dtype) * x)


def exp_of_the_same_value_twice(x):
    e = jnp.exp(-x)
    return jnp.sum(1.0 / (e + e) * x)


@pytest.mark.parametrize(
    "loss",
    [
        exp_used_again,
        exp_used_before,
        negation_used_again,
        negation_used_before,
        sum_used_again,
        sum_used_before,
        quotient_used_twice,
        two_over,
        one_over_two_plus,
        sum_over_one,
        exp_of_plus,
        minus_instead_of_plus,
        exp_in_another_dtype,
        exp_of_the_same_value_twice,
    ],
    ids=lambda f: f.__name__,
)
def test_a_chain_that_is_not_exactly_a_sigmoid_keeps_its_derivative(loss):
    x = sample(3, 4) + 2.5  # away from 1 - exp(-x) = 0
    # (a float16 step: JAX and aotkit may round its operations differently)
    narrow = np.float16 if loss is exp_in_another_dtype else None
    assert_matches_jax(loss, (x,), computed_in=narrow)


def test_a_complex_sigmoid_keeps_its_derivative():
    def loss(z):
        y = 1.0 / (1.0 + jnp.exp(-z))
        return jnp.sum(jnp.real(y * jnp.conj(y)))

    z = (sample(3, 4) + 1j * sample(3, 4)).astype(np.complex64) * 0.5
    assert_matches_jax(loss, (z,))


def test_a_sigmoid_split_across_a_loop_boundary_keeps_its_derivative():
    def loss(w, x):
        n = -(x @ w)  # outside the loop; the exp, sum and quotient inside

        def body(i, h):
            return h * 0.5 + 1.0 / (1.0 + jnp.exp(n)) * jnp.tanh(h)

        return jnp.sum(jax.lax.fori_loop(0, 4, body, x) ** 2)

    assert_matches_jax(loss, (sample(HIDDEN, HIDDEN, scale=0.4), sample(BATCH, HIDDEN)), (0, 1))


def test_a_sigmoid_in_both_branches_of_a_cond_matches_jax():
    def loss(x, p):
        return jnp.sum(
            jax.lax.cond(
                p > 0, lambda v: jax.nn.sigmoid(v) * 2.0, lambda v: jax.nn.sigmoid(-v * v), x
            )
        )

    x = sample(3, 4, scale=2.0)
    assert_matches_jax(loss, (x, np.float32(1.0)))
    assert_matches_jax(loss, (x, np.float32(-1.0)))


# --- structure: one stored row per sigmoid per step -----------------------------------------------

W = sample(HIDDEN, HIDDEN, scale=0.4)
U = sample(HIDDEN, HIDDEN, scale=0.4)
XS = sample(STEPS, BATCH, HIDDEN)
ROW = (STEPS, BATCH, HIDDEN)


def gated(xp, scan, gate):
    """A one-gate recurrent loss: h' = gate(x W + h U), every h' an output row."""

    def loss(w, u, xs):
        def step(h, x):
            h = gate(x @ w + h @ u)
            return h, h

        _, hs = scan(step, xp.zeros((BATCH, HIDDEN), xs.dtype), xs)
        return xp.sum(hs * hs)

    return loss


def stored_rows(lowered) -> int:
    module = lowered.module
    forward = loops(module)[0]
    return rows(forward, ROW)


def test_a_sigmoid_in_a_loop_stores_one_row_per_step_as_tanh_does():
    sigmoid = aotkit.jit(gated(jnp, jax.lax.scan, jax.nn.sigmoid), frontend="jax")
    tanh = aotkit.jit(gated(jnp, jax.lax.scan, jnp.tanh), frontend="jax")
    got = stored_rows(sigmoid.lower(W, U, XS).grad((0, 1)))
    # tanh's derivative is one value of its result: the two loops store the same rows
    # (the input, the output, the state h, the derivative's factor).
    assert got == stored_rows(tanh.lower(W, U, XS).grad((0, 1)))
    assert got == 4
    assert_matches_jax(gated(jnp, jax.lax.scan, jax.nn.sigmoid), (W, U, XS), (0, 1, 2))


def test_the_loops_of_a_sigmoid_gradient_compute_it_once():
    lowered = aotkit.jit(gated(jnp, jax.lax.scan, jax.nn.sigmoid), frontend="jax")
    module = lowered.lower(W, U, XS).grad((0, 1)).module
    forward, backward = loops(module)
    # The forward loop's one quotient is the sigmoid's (the op-by-op derivative divides
    # again, by the sum); the backward loop reads y (1 - y).
    assert op_names(forward.regions[1].blocks[0]).count("stablehlo.exponential") == 1
    assert op_names(forward.regions[1].blocks[0]).count("stablehlo.divide") == 1
    assert "stablehlo.exponential" not in op_names(backward.regions[1].blocks[0])
    assert "stablehlo.divide" not in op_names(backward.regions[1].blocks[0])


def test_stablehlo_logistic_in_a_loop_stores_one_row_per_step():
    """aotkit's own sigmoid is one stablehlo.logistic; its rule keeps one value too."""
    ours = gated(anp, aotkit.scan, aotkit.nn.sigmoid)
    lowered = aotkit.jit(ours).lower(W, U, XS)
    assert "stablehlo.logistic" in lowered.as_text()
    sigmoid_rows = stored_rows(lowered.grad((0, 1)))
    tanh = aotkit.jit(gated(anp, aotkit.scan, anp.tanh)).lower(W, U, XS)
    assert sigmoid_rows == stored_rows(tanh.grad((0, 1)))
    got = aotkit.grad(ours, (0, 1, 2))(W, U, XS)
    want = jax.grad(gated(jnp, jax.lax.scan, jax.nn.sigmoid), (0, 1, 2))(W, U, XS)
    for g, w in zip(got, want, strict=True):
        assert np.asarray(g).dtype == np.float32
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-5, atol=1e-6)


def gru(w, u, xs):
    """A GRU cell written as Flax's (`jax.nn.sigmoid` gates), over `lax.scan`."""

    def step(h, x):
        r = jax.nn.sigmoid(x @ w[0] + h @ u[0])
        z = jax.nn.sigmoid(x @ w[1] + h @ u[1])
        n = jnp.tanh(x @ w[2] + r * (h @ u[2]))
        h = (1.0 - z) * n + z * h
        return h, h

    _, hs = jax.lax.scan(step, jnp.zeros((BATCH, HIDDEN), xs.dtype), xs)
    return jnp.mean(hs * hs)


def jax_stored_rows(loss, args, argnums) -> int:
    """Stacks of ROW the forward loop of jax.grad's program carries (its module, walked
    as aotkit's)."""
    text = jax.jit(jax.grad(loss, argnums)).lower(*args).as_text()
    module = aotkit.load_module(text.encode()).module
    return rows(loops(module)[0], ROW)


def test_a_gru_stores_no_more_rows_per_step_than_jax():
    w = sample(3, HIDDEN, HIDDEN, scale=0.4)
    u = sample(3, HIDDEN, HIDDEN, scale=0.4)
    lowered = aotkit.jit(gru, frontend="jax").lower(w, u, XS).grad((0, 1))
    got = stored_rows(lowered)
    # Each gate's sigmoid stores y (1 - y) alone; the op-by-op derivative stored exp(-x)
    # and y / (1 + exp(-x)) for each (two rows more).
    assert got <= jax_stored_rows(gru, (w, u, XS), (0, 1))
    assert_matches_jax(gru, (w, u, XS), (0, 1, 2))


@pytest.mark.parametrize("checkpoint_loops", ["sqrt", 2])
def test_a_gru_gradient_with_checkpointed_loops_matches_jax(checkpoint_loops):
    w = sample(3, HIDDEN, HIDDEN, scale=0.4)
    u = sample(3, HIDDEN, HIDDEN, scale=0.4)
    assert_matches_jax(gru, (w, u, XS), (0, 1, 2), checkpoint_loops=checkpoint_loops)


def test_a_flax_gru_stores_no_more_rows_per_step_than_jax():
    nn = pytest.importorskip("flax.linen")
    model = nn.RNN(nn.GRUCell(features=HIDDEN))
    xs = sample(BATCH, STEPS, HIDDEN)
    params = model.init(jax.random.key(0), xs)

    def loss(p, xs):
        return jnp.mean(model.apply(p, xs) ** 2)

    lowered = aotkit.jit(loss, frontend="jax").lower(params, xs).grad()
    assert stored_rows(lowered) <= jax_stored_rows(loss, (params, xs), 0)
    assert_matches_jax(loss, (params, xs))
