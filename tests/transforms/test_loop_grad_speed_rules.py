"""Reverse mode through loops stores what the backward loop reads, as JAX's scan does: the
body's residuals, one row per iteration, with loop-invariant values hoisted, scan's rows of
its input read again at the counter, and scan's stacked output and input cotangents written
in place. The oracle is jax.grad of the same JAX program; the structure of the gradient
(which loops, what they carry, what the backward loop computes) is checked on its module."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import aotkit
import aotkit.numpy as anp

STEPS, BATCH, HIDDEN = 12, 3, 8
RNG = np.random.default_rng(7)
PARAMS = {
    "wx": (RNG.standard_normal((HIDDEN, HIDDEN)) / 3).astype(np.float32),
    "wh": (RNG.standard_normal((HIDDEN, HIDDEN)) / 3).astype(np.float32),
    "b": RNG.standard_normal(HIDDEN).astype(np.float32),
}
XS = RNG.standard_normal((STEPS, BATCH, HIDDEN)).astype(np.float32)


def rnn(reverse=False, scale=1.0):
    def loss(p, xs):
        def step(h, x):
            h = jnp.tanh(x @ p["wx"] + h @ (p["wh"] * scale) + p["b"])
            return h, h

        _, hs = jax.lax.scan(step, jnp.zeros((BATCH, HIDDEN), xs.dtype), xs, reverse=reverse)
        return jnp.mean(hs * hs)

    return loss


def assert_matches_jax(loss, args, argnums=0, **options):
    got = aotkit.jit(loss, frontend="jax").lower(*args).grad(argnums, **options).compile()(*args)
    want = jax.grad(loss, argnums)(*args)
    got_leaves, want_leaves = jax.tree.leaves(got), jax.tree.leaves(want)
    assert len(got_leaves) == len(want_leaves)
    for g, w in zip(got_leaves, want_leaves, strict=True):
        assert np.asarray(g).dtype == np.asarray(w).dtype
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-5, atol=1e-6)


def loops(module):
    """The stablehlo.while ops of the module's @main, in order (they live as long as
    `module` does: keep it)."""
    for op in module.body.operations:
        if op.operation.name == "func.func" and op.attributes["sym_name"].value == "main":
            block = op.regions[0].blocks[0]
            return [o for o in block.operations if o.operation.name == "stablehlo.while"]
    raise AssertionError("no @main")


def op_names(block) -> list[str]:
    names = []
    for o in block.operations:
        names.append(o.operation.name)
        for region in o.operation.regions:
            for inner in region.blocks:
                names += op_names(inner)
    return names


def body_names(loop) -> list[str]:
    return op_names(loop.regions[1].blocks[0])


def carry_shapes(loop) -> list[tuple[int, ...]]:
    return [tuple(r.type.shape) for r in loop.results]


def rnn_grad(argnums=0, **options):
    return aotkit.jit(rnn(), frontend="jax").lower(PARAMS, XS).grad(argnums, **options)


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("argnums", [0, 1, (0, 1)])
def test_scan_gradient_matches_jax(reverse, argnums):
    assert_matches_jax(rnn(reverse), (PARAMS, XS), argnums)


def test_the_backward_loop_reads_stored_residuals_instead_of_recomputing_the_body():
    lowered = rnn_grad()
    module = lowered.module
    forward, backward = loops(module)
    assert "stablehlo.tanh" in body_names(forward)
    assert "stablehlo.tanh" not in body_names(backward)
    # The forward loop stores rows of the step (residuals), never whole carries: no stack of
    # the (STEPS, BATCH, HIDDEN) input or output buffers, nor of the weights.
    assert all(len(shape) <= 3 for shape in carry_shapes(forward))
    assert (STEPS, HIDDEN, HIDDEN) not in carry_shapes(forward)


def test_a_value_computed_from_loop_invariants_is_hoisted_not_stacked():
    lowered = aotkit.jit(rnn(scale=2.0), frontend="jax").lower(PARAMS, XS).grad()
    module = lowered.module
    forward, _ = loops(module)
    assert (STEPS, HIDDEN, HIDDEN) not in carry_shapes(forward)
    assert_matches_jax(rnn(scale=2.0), (PARAMS, XS))


def test_the_scan_output_cotangent_is_read_where_it_is_not_carried():
    lowered = rnn_grad()
    module = lowered.module
    _, backward = loops(module)
    # Neither the stacked output's cotangent (read from the result's) nor the input's
    # (not asked for) is a carry of the backward loop.
    assert (STEPS, BATCH, HIDDEN) not in carry_shapes(backward)


def test_the_scan_input_cotangent_is_written_row_by_row():
    lowered = rnn_grad(1)
    module = lowered.module
    _, backward = loops(module)
    assert carry_shapes(backward).count((STEPS, BATCH, HIDDEN)) == 1
    body = backward.regions[1].blocks[0]
    wide = [
        o.operation.name
        for o in body.operations
        if o.operation.results and tuple(o.operation.results[0].type.shape) == XS.shape
    ]
    assert wide == ["stablehlo.dynamic_update_slice"]


def shifted_rows(shift, read_back):
    """A loop writing (and reading) row i + shift of an 8-row buffer for 8 steps: past the
    end the index is clamped, so rows are written more than once."""

    def loss(w, x):
        def body(i, carry):
            h, buf = carry
            row = jax.lax.dynamic_index_in_dim(x, i + shift, keepdims=False)
            h = jnp.tanh(h @ w + row)
            if read_back:
                h = h + jax.lax.dynamic_index_in_dim(buf, i + shift, keepdims=False)
            buf = jax.lax.dynamic_update_index_in_dim(buf, h, i + shift, 0)
            return h, buf

        init = (jnp.zeros(x.shape[1:], x.dtype), jnp.zeros_like(x))
        h, buf = jax.lax.fori_loop(0, 8, body, init)
        return jnp.sum(h) + jnp.sum(buf * buf)

    return loss


@pytest.mark.parametrize("shift", [0, 3, -2])
@pytest.mark.parametrize("read_back", [False, True])
def test_rows_written_or_read_more_than_once_keep_their_cotangents(shift, read_back):
    w = (RNG.standard_normal((HIDDEN, HIDDEN)) / 3).astype(np.float32)
    x = RNG.standard_normal((8, BATCH, HIDDEN)).astype(np.float32)
    assert_matches_jax(shifted_rows(shift, read_back), (w, x), (0, 1))


def test_nested_loops_match_jax():
    def loss(w, x):
        def outer(i, h):
            return jax.lax.fori_loop(0, 3, lambda j, g: jnp.tanh(g @ w) + 0.1 * g, h) * 0.5

        return jnp.sum(jax.lax.fori_loop(0, 4, outer, x) ** 2)

    assert_matches_jax(loss, (PARAMS["wh"], XS[0]), (0, 1))


def test_a_loop_whose_body_branches_matches_jax():
    def loss(w, x):
        def body(i, h):
            return jax.lax.cond(i % 2 == 0, lambda g: jnp.tanh(g @ w), lambda g: g * w[0], h)

        return jnp.sum(jax.lax.fori_loop(0, 5, body, x) ** 2)

    assert_matches_jax(loss, (PARAMS["wh"], XS[0]), (0, 1))


def test_a_data_dependent_loop_with_a_bound_matches_jax_on_its_count():
    def loss(w, x):
        def cond(c):
            return c[0] < jnp.asarray(5.0, x.dtype) + jnp.sum(x) * 0.0

        def body(c):
            t, h = c
            return t + 1.0, jnp.tanh(h @ w)

        return jnp.sum(jax.lax.while_loop(cond, body, (jnp.zeros((), x.dtype), x))[1])

    def counted(w, x):
        return jnp.sum(jax.lax.fori_loop(0, 5, lambda i, h: jnp.tanh(h @ w), x))

    args = (PARAMS["wh"], XS[0])
    got = aotkit.jit(loss, frontend="jax").lower(*args).grad((0, 1), max_trip_count=8)
    got = got.compile()(*args)
    want = jax.grad(counted, (0, 1))(*args)
    for g, w in zip(got, want, strict=True):
        assert np.asarray(g).dtype == np.float32
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("policy", ["sqrt", 5, 100])
@pytest.mark.parametrize("argnums", [0, (0, 1)])
def test_scan_gradient_with_checkpoints_matches_jax(policy, argnums):
    # The checkpoints leave out the input (passed on unchanged) and the stacked output.
    assert_matches_jax(rnn(), (PARAMS, XS), argnums, checkpoint_loops=policy)


def test_checkpoints_recompute_the_body_and_keep_less_memory():
    long = np.repeat(XS, 20, axis=0)
    lowered = aotkit.jit(rnn(), frontend="jax").lower(PARAMS, long)
    stored = lowered.grad().compile()
    sqrt = lowered.grad(checkpoint_loops="sqrt")
    module = sqrt.module
    assert "stablehlo.tanh" in body_names(loops(module)[-1])
    assert sqrt.compile().memory_analysis().temp_size_in_bytes < (
        stored.memory_analysis().temp_size_in_bytes
    )
    assert_matches_jax(rnn(), (PARAMS, long), checkpoint_loops="sqrt")


def test_a_traced_fori_loop_stores_residuals_too():
    def loss(xp, fori_loop):
        def f(w, x):
            return xp.sum(fori_loop(0, 6, lambda i, h: xp.tanh(h @ w) * 0.9 + h * 0.1, x))

        return f

    args = (PARAMS["wh"], XS[0])
    lowered = aotkit.jit(aotkit.grad(loss(anp, aotkit.fori_loop), (0, 1))).lower(*args)
    module = lowered.module
    forward, backward = loops(module)
    assert "stablehlo.tanh" not in body_names(backward)
    got = lowered.compile()(*args)
    want = jax.grad(loss(jnp, jax.lax.fori_loop), (0, 1))(*args)
    for g, w in zip(got, want, strict=True):
        assert np.asarray(g).dtype == np.float32
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-5, atol=1e-6)


def test_a_flax_lstm_matches_jax():
    nn = pytest.importorskip("flax.linen")
    model = nn.RNN(nn.LSTMCell(features=HIDDEN))
    xs = np.swapaxes(XS, 0, 1)
    params = model.init(jax.random.key(0), xs)

    def loss(p, xs):
        return jnp.mean(model.apply(p, xs) ** 2)

    assert_matches_jax(loss, (params, xs))


def test_an_equinox_gru_under_scan_matches_jax():
    eqx = pytest.importorskip("equinox")
    cell = eqx.nn.GRUCell(HIDDEN, HIDDEN, key=jax.random.key(1))
    params, static = eqx.partition(cell, eqx.is_array)

    def loss(p, xs):
        gru = jax.vmap(eqx.combine(p, static))

        def step(h, x):
            h = gru(x, h)
            return h, h

        return jnp.mean(jax.lax.scan(step, jnp.zeros((BATCH, HIDDEN), xs.dtype), xs)[1] ** 2)

    assert_matches_jax(loss, (params, XS))


def gates(used):
    def loss(w, x):
        pieces = jnp.split(x @ w, 3, axis=-1)
        acts = (jax.nn.sigmoid, jnp.tanh, jnp.sin)
        return sum(jnp.sum(acts[k](pieces[k]) ** 2) for k in used)

    return loss


@pytest.mark.parametrize("used", [(0, 1, 2), (2, 0, 1), (0, 1), (1, 2), (0, 2), (1,)])
def test_the_cotangent_of_a_split_matches_jax(used):
    w = (RNG.standard_normal((HIDDEN, 3 * HIDDEN)) / 3).astype(np.float32)
    assert_matches_jax(gates(used), (w, XS[0]), (0, 1))


def test_the_cotangent_of_a_split_is_one_concatenate_not_a_sum_of_pads():
    w = (RNG.standard_normal((HIDDEN, 3 * HIDDEN)) / 3).astype(np.float32)
    lowered = aotkit.jit(gates((0, 1, 2)), frontend="jax").lower(w, XS[0]).grad()
    module = lowered.module
    names = op_names(module.body)
    assert names.count("stablehlo.concatenate") == 1
    assert "stablehlo.pad" not in names


def explicit_sigmoid(w, x):
    return jnp.sum(1.0 / (1.0 + jnp.exp(-(x @ w))) * x[:, :1])


def test_the_cotangent_of_a_doubly_negated_chain_drops_both_negations():
    w = (RNG.standard_normal((HIDDEN, HIDDEN)) / 3).astype(np.float32)
    lowered = aotkit.jit(explicit_sigmoid, frontend="jax").lower(w, XS[0]).grad((0, 1))
    module = lowered.module
    # The forward's own negation of x @ w stays; the cotangent's two cancel.
    assert op_names(module.body).count("stablehlo.negate") == 1
    assert_matches_jax(explicit_sigmoid, (w, XS[0]), (0, 1))


@pytest.mark.parametrize("dtype", [np.float32, np.complex64])
def test_negations_in_products_keep_their_values(dtype):
    def loss(x, y):
        z = -(x * y) * (-x) - y * (-(y * x))
        return jnp.sum(jnp.real(z * jnp.conj(z)))

    x = RNG.standard_normal((4, 3)).astype(dtype)
    y = RNG.standard_normal((4, 3)).astype(dtype)
    assert_matches_jax(loss, (x, y), (0, 1))
