"""aotkit's transforms of functions written with JAX (issue 44, item 1): JAX lowers the
function, aotkit's rules transform the module JAX wrote, and the results agree with JAX's
own transforms (the oracle) in values and dtypes; compositions with `aotkit.jit` and with
each other; the front end chosen as `jit`'s `frontend="auto"` chooses, or given; and the
error that names the user's function when aotkit's tracer runs JAX code.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import tree_util

import aotkit

RNG = np.random.default_rng(44)
RTOL = 1e-6  # float32, relative


def f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def same(got, want):
    """Equal pytrees of arrays: structure, dtypes, values to RTOL (relative to the largest
    magnitude of each leaf, so entries near zero do not demand more than float32 holds)."""
    got_leaves, got_tree = tree_util.tree_flatten(got)
    want_leaves, want_tree = tree_util.tree_flatten(want)
    assert got_tree == want_tree
    for g, w in zip(got_leaves, want_leaves, strict=True):
        g, w = np.asarray(g), np.asarray(w)
        assert g.dtype == w.dtype, (g.dtype, w.dtype)
        assert g.shape == w.shape
        scale = float(np.max(np.abs(w))) if w.size else 0.0
        np.testing.assert_allclose(g, w, rtol=RTOL, atol=RTOL * scale)


W = {"w": f32(3, 4), "b": f32(4)}
X = f32(5, 3)
Y = f32(5, 4)


def model(params, x):
    return jnp.tanh(x @ params["w"] + params["b"])


def loss(params, x, y):
    return jnp.mean((model(params, x) - y) ** 2)


def loss_aux(params, x, y):
    pred = model(params, x)
    return jnp.mean((pred - y) ** 2), {"pred_sum": jnp.sum(pred)}


def cubic(x):
    return jnp.sum(jnp.sin(x) * x**2)


@pytest.fixture(autouse=True)
def no_jax_transforms(monkeypatch):
    """aotkit applies its own rules: JAX's transforms are the oracle only, never called by
    aotkit (the oracle runs before or after the patch, in `jax_oracle`)."""

    def refuse(name):
        def refused(*args, **kwargs):
            raise AssertionError(f"aotkit called jax.{name}")

        return refused

    originals = {}
    for name in ("grad", "value_and_grad", "vjp", "jvp", "vmap", "jacfwd", "jacrev", "hessian"):
        originals[name] = getattr(jax, name)
        monkeypatch.setattr(jax, name, refuse(name))
    return originals


def jax_oracle(originals, name, *args, **kwargs):
    return originals[name](*args, **kwargs)


# --- each transform against JAX's --------------------------------------------------------


def test_grad_of_a_jax_loss(no_jax_transforms):
    got = aotkit.grad(loss)(W, X, Y)
    same(got, jax_oracle(no_jax_transforms, "grad", loss)(W, X, Y))


def test_grad_argnums_tuple(no_jax_transforms):
    got = aotkit.grad(loss, argnums=(0, 1))(W, X, Y)
    same(got, jax_oracle(no_jax_transforms, "grad", loss, argnums=(0, 1))(W, X, Y))


def test_grad_has_aux(no_jax_transforms):
    got = aotkit.grad(loss_aux, has_aux=True)(W, X, Y)
    same(got, jax_oracle(no_jax_transforms, "grad", loss_aux, has_aux=True)(W, X, Y))


def test_value_and_grad(no_jax_transforms):
    got = aotkit.value_and_grad(loss, argnums=1)(W, X, Y)
    same(got, jax_oracle(no_jax_transforms, "value_and_grad", loss, argnums=1)(W, X, Y))


def test_value_and_grad_has_aux(no_jax_transforms):
    got = aotkit.value_and_grad(loss_aux, has_aux=True)(W, X, Y)
    want = jax_oracle(no_jax_transforms, "value_and_grad", loss_aux, has_aux=True)(W, X, Y)
    same(got, want)


def test_vjp(no_jax_transforms):
    ct = f32(5, 4)
    out, pullback = aotkit.vjp(model, W, X)
    want_out, want_pullback = jax_oracle(no_jax_transforms, "vjp", model, W, X)
    same(out, want_out)
    same(pullback(ct), want_pullback(ct))


def test_vjp_has_aux(no_jax_transforms):
    out, pullback, aux = aotkit.vjp(loss_aux, W, X, Y, has_aux=True)
    want_out, want_pullback, want_aux = jax_oracle(
        no_jax_transforms, "vjp", loss_aux, W, X, Y, has_aux=True
    )
    same((out, aux), (want_out, want_aux))
    one = np.float32(1.0)
    same(pullback(one), want_pullback(one))


def test_jvp(no_jax_transforms):
    tangents = (tree_util.tree_map(lambda a: f32(*a.shape), W), f32(5, 3))
    got = aotkit.jvp(model, (W, X), tangents)
    same(got, jax_oracle(no_jax_transforms, "jvp", model, (W, X), tangents))


def test_jvp_has_aux(no_jax_transforms):
    tangents = (tree_util.tree_map(np.ones_like, W), np.zeros_like(X), np.zeros_like(Y))
    got = aotkit.jvp(loss_aux, (W, X, Y), tangents, has_aux=True)
    want = jax_oracle(no_jax_transforms, "jvp", loss_aux, (W, X, Y), tangents, has_aux=True)
    same(got, want)


def test_vmap(no_jax_transforms):
    xs = f32(6, 5, 3)
    got = aotkit.vmap(model, in_axes=(None, 0))(W, xs)
    same(got, jax_oracle(no_jax_transforms, "vmap", model, in_axes=(None, 0))(W, xs))


def test_vmap_out_axes(no_jax_transforms):
    xs = f32(3, 6)
    got = aotkit.vmap(jnp.sin, in_axes=1, out_axes=1)(xs)
    same(got, jax_oracle(no_jax_transforms, "vmap", jnp.sin, in_axes=1, out_axes=1)(xs))


def test_jacfwd(no_jax_transforms):
    got = aotkit.jacfwd(model, argnums=1)(W, X[:2])
    same(got, jax_oracle(no_jax_transforms, "jacfwd", model, argnums=1)(W, X[:2]))


def test_jacrev(no_jax_transforms):
    got = aotkit.jacrev(model)(W, X[:2])
    same(got, jax_oracle(no_jax_transforms, "jacrev", model)(W, X[:2]))


def test_jacfwd_argnums_tuple_has_aux(no_jax_transforms):
    def with_aux(params, x):
        out = model(params, x)
        return out, jnp.sum(out)

    got = aotkit.jacfwd(with_aux, argnums=(0, 1), has_aux=True)(W, X[:2])
    want = jax_oracle(no_jax_transforms, "jacfwd", with_aux, argnums=(0, 1), has_aux=True)(W, X[:2])
    same(got, want)


def test_jacrev_has_aux(no_jax_transforms):
    def with_aux(params, x):
        out = model(params, x)
        return out, {"max": jnp.max(out)}

    got = aotkit.jacrev(with_aux, has_aux=True)(W, X[:2])
    same(got, jax_oracle(no_jax_transforms, "jacrev", with_aux, has_aux=True)(W, X[:2]))


def test_hessian(no_jax_transforms):
    x = f32(4)
    same(aotkit.hessian(cubic)(x), jax_oracle(no_jax_transforms, "hessian", cubic)(x))


def test_integer_output_keeps_jax_dtype(no_jax_transforms):
    def count(x):
        return jnp.sum(x > 0), jnp.sum(x)

    xs = f32(4, 3)
    got = aotkit.vmap(count)(xs)
    same(got, jax_oracle(no_jax_transforms, "vmap", count)(xs))


# --- compositions ---------------------------------------------------------------------------


def test_jit_of_grad(no_jax_transforms):
    got = aotkit.jit(aotkit.grad(loss))(W, X, Y)
    same(got, jax_oracle(no_jax_transforms, "grad", loss)(W, X, Y))


def test_jit_of_grad_with_frontend_jax(no_jax_transforms):
    """jit's front end is handed to the transform's function."""
    got = aotkit.jit(aotkit.grad(loss), frontend="jax")(W, X, Y)
    same(got, jax_oracle(no_jax_transforms, "grad", loss)(W, X, Y))


def test_grad_of_jit(no_jax_transforms):
    got = aotkit.grad(aotkit.jit(loss))(W, X, Y)
    same(got, jax_oracle(no_jax_transforms, "grad", loss)(W, X, Y))


def test_grad_of_grad(no_jax_transforms):
    def scalar(x):
        return jnp.sin(x) * x**3

    x = np.float32(0.7)
    got = aotkit.grad(aotkit.grad(scalar))(x)
    oracle = jax_oracle(no_jax_transforms, "grad", scalar)
    same(got, jax_oracle(no_jax_transforms, "grad", oracle)(x))


def test_vmap_of_grad(no_jax_transforms):
    xs = f32(6, 4)
    got = aotkit.vmap(aotkit.grad(cubic))(xs)
    oracle = jax_oracle(no_jax_transforms, "grad", cubic)
    same(got, jax_oracle(no_jax_transforms, "vmap", oracle)(xs))


def test_jvp_of_grad(no_jax_transforms):
    x, t = f32(4), f32(4)
    got = aotkit.jvp(aotkit.grad(cubic), (x,), (t,))
    oracle = jax_oracle(no_jax_transforms, "grad", cubic)
    same(got, jax_oracle(no_jax_transforms, "jvp", oracle, (x,), (t,)))


def test_transform_inside_an_aotkit_jit_of_jax_code(no_jax_transforms):
    """A training step: grad of a JAX loss inside a function jit traces (its closure over
    the step's batch included)."""

    def step(params, x, y):
        grads = aotkit.grad(loss)(params, x, y)
        return tree_util.tree_map(lambda p, g: p - 0.1 * g, params, grads)

    got = aotkit.jit(step, frontend="aotkit")(W, X, Y)
    want = jax.jit(
        lambda p, x, y: tree_util.tree_map(
            lambda a, g: a - 0.1 * g, p, jax_oracle(no_jax_transforms, "grad", loss)(p, x, y)
        )
    )(W, X, Y)
    same(got, want)


def test_lower_of_grad_shows_aotkits_rules():
    text = aotkit.jit(aotkit.grad(cubic)).lower(f32(4)).as_text()
    assert "stablehlo.cosine" in text  # d/dx sin(x), written by aotkit's rule


# --- choosing the front end -------------------------------------------------------------------


def _helper(x):
    return jnp.sum(jnp.cos(x))


def only_calls_a_helper(x):
    # Refers to no JAX name itself, in a module that imports both aotkit and JAX: "auto"
    # picks aotkit's tracer, as jit's does.
    return _helper(x) * 2.0


def test_frontend_jax_given(no_jax_transforms):
    x = f32(5)
    got = aotkit.grad(only_calls_a_helper, frontend="jax")(x)
    same(got, jax_oracle(no_jax_transforms, "grad", only_calls_a_helper)(x))


def test_vmap_frontend_jax_given(no_jax_transforms):
    xs = f32(3, 5)
    got = aotkit.vmap(only_calls_a_helper, frontend="jax")(xs)
    same(got, jax_oracle(no_jax_transforms, "vmap", only_calls_a_helper)(xs))


def test_frontend_aotkit_on_jax_code_names_the_users_function():
    with pytest.raises(
        TypeError,
        match=r"^grad\(only_calls_a_helper\): only_calls_a_helper calls JAX \(jax\.numpy, "
        r"jax\.lax, \.\.\.\) on aotkit's traced values, which JAX cannot take \(.*\); pass "
        r"frontend='jax' to aotkit\.grad to let JAX lower only_calls_a_helper, or write it "
        r"with aotkit\.numpy$",
    ):
        aotkit.grad(only_calls_a_helper)(f32(5))


def test_jit_of_transform_on_jax_code_names_the_users_function():
    with pytest.raises(
        TypeError,
        match=r"^vmap\(only_calls_a_helper\): only_calls_a_helper calls JAX .* pass "
        r"frontend='jax' to aotkit\.vmap",
    ):
        aotkit.jit(aotkit.vmap(only_calls_a_helper))(f32(3, 5))


def test_unknown_frontend_is_refused():
    with pytest.raises(
        ValueError,
        match=r"^grad\(loss\): unknown frontend 'torch'; expected one of aotkit, jax, auto$",
    ):
        aotkit.grad(loss, frontend="torch")


def test_jax_lowering_errors_name_the_users_function():
    with pytest.raises(ValueError, match=r"^grad\(cubic\): JAX lowering cubic: argument "):
        aotkit.grad(cubic)(np.ones(3, np.float64))


def test_jax_function_closing_over_traced_values_is_named():
    def outer(w, x):
        return aotkit.grad(lambda w: loss(w, x, x), frontend="jax")(w)

    with pytest.raises(
        TypeError,
        match=r"^grad\(lambda\): JAX lowering lambda: lambda uses a value of the function "
        r"aotkit is tracing that is not one of its arguments \(.*\); JAX lowers lambda on its "
        r"arguments only: pass that value as an argument$",
    ):
        aotkit.jit(outer, frontend="aotkit")(W, f32(5, 3))
