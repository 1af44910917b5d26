"""JAX's semantics of aotkit's public transforms: pytrees in and out, argnums, has_aux,
integer inputs, in_axes/out_axes/axis_size, compositions (vmap(grad), grad(grad), jvp(grad),
jacfwd/jacrev/hessian), closures over the enclosing trace's values, `jit(grad(f)).lower()`;
and every error the transforms of functions raise, word for word.

Values are compared with JAX's transforms of the jax.numpy twin. Most programs run on the
StableHLO interpreter (`run`, `run_jax`: one trace, no XLA compile); a few run as the user
runs them, eagerly on the CPU backend.
"""

from __future__ import annotations

import re
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import dtypes as jax_dtypes
from jax import tree_util

import aotkit
import aotkit.numpy as anp
from tests.transforms.oracle import assert_close

RNG = np.random.default_rng(0)
TOL = (2e-5, 2e-5)


def f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def run(fn, *args, **kwargs):
    """`fn` traced by aotkit and run on the interpreter."""
    out = aotkit.jit(fn, frontend="aotkit", backend="interpreter")(*args, **kwargs)
    return tree_util.tree_map(np.asarray, out)


def run_jax(fn, *args, **kwargs):
    """`fn` (JAX's transforms of the twin) lowered by JAX and run on the interpreter."""
    out = aotkit.jit(fn, frontend="jax", backend="interpreter")(*args, **kwargs)
    return tree_util.tree_map(np.asarray, out)


def same(got, want, tol=TOL):
    assert_close(got, tree_util.tree_map(np.asarray, want), tol, "result")


# --- a model written once for both namespaces -----------------------------------------------------


def mlp(xp, params, x):
    h = xp.tanh(x @ params["w"] + params["b"])
    return xp.sum(h * h) + xp.sum(params["scale"][0] * h)


PARAMS = {"w": f32(4, 3), "b": f32(3), "scale": [f32(3)]}
X = f32(5, 4)


def loss_a(params, x):
    return mlp(anp, params, x)


def loss_j(params, x):
    return mlp(jnp, params, x)


# --- pytrees, argnums, has_aux --------------------------------------------------------------------


def test_grad_of_a_pytree_has_its_structure():
    got = run(aotkit.grad(loss_a), PARAMS, X)
    want = run_jax(jax.grad(loss_j), PARAMS, X)
    assert tree_util.tree_structure(got) == tree_util.tree_structure(PARAMS)
    same(got, want)


def test_argnums_tuple_gives_a_tuple_of_trees():
    got = run(aotkit.grad(loss_a, argnums=(0, 1)), PARAMS, X)
    want = run_jax(jax.grad(loss_j, argnums=(0, 1)), PARAMS, X)
    assert isinstance(got, tuple) and len(got) == 2
    same(got, want)


def test_negative_argnums_count_from_the_end():
    got = run(aotkit.grad(loss_a, argnums=-1), PARAMS, X)
    same(got, run_jax(jax.grad(loss_j, argnums=-1), PARAMS, X))


def test_value_and_grad_with_aux():
    def with_aux(xp):
        def f(params, x):
            loss = mlp(xp, params, x)
            return loss, {"loss": loss, "h": xp.tanh(x @ params["w"])}

        return f

    got = run(aotkit.value_and_grad(with_aux(anp), has_aux=True), PARAMS, X)
    want = run_jax(jax.value_and_grad(with_aux(jnp), has_aux=True), PARAMS, X)
    same(got, want)


def test_grad_with_aux_returns_grads_then_aux():
    got = run(aotkit.grad(lambda x: (anp.sum(x * x), x * 2), has_aux=True), X)
    want = run_jax(jax.grad(lambda x: (jnp.sum(x * x), x * 2), has_aux=True), X)
    same(got, want)


def test_keyword_arguments_are_not_differentiated():
    got = run(lambda p, x: aotkit.grad(lambda p, x=None: loss_a(p, x))(p, x=x), PARAMS, X)
    same(got, run_jax(lambda p, x: jax.grad(lambda p, x=None: loss_j(p, x))(p, x=x), PARAMS, X))


class Pair(NamedTuple):
    a: np.ndarray
    b: np.ndarray


def test_vjp_of_pytree_outputs():
    def f(xp):
        return lambda p: (Pair(xp.sin(p.a), p.a * p.b), {"s": xp.sum(p.b)})

    p = Pair(f32(3), f32(3))
    ct = (Pair(f32(3), f32(3)), {"s": np.float32(2.0)})

    def pullback(p, ct):
        out, fn = aotkit.vjp(f(anp), p)
        return out, fn(ct)

    got = run(pullback, p, ct)
    want = run_jax(lambda p, ct: (lambda out, fn: (out, fn(ct)))(*jax.vjp(f(jnp), p)), p, ct)
    same(got, want)
    assert isinstance(got[1][0], Pair)


def test_vjp_with_aux():
    def pullback(x, ct):
        out, fn, aux = aotkit.vjp(lambda x: (anp.sin(x), anp.sum(x)), x, has_aux=True)
        return out, fn(ct), aux

    x, ct = f32(3), f32(3)
    got = run(pullback, x, ct)

    def oracle(x, ct):
        out, fn, aux = jax.vjp(lambda x: (jnp.sin(x), jnp.sum(x)), x, has_aux=True)
        return out, fn(ct), aux

    same(got, run_jax(oracle, x, ct))


def test_jvp_of_pytrees_with_aux():
    def f(xp):
        return lambda p, x: ({"y": mlp(xp, p, x), "z": x * 2}, xp.max(x))

    tangents = (tree_util.tree_map(lambda a: np.ones_like(a), PARAMS), np.ones_like(X))
    got = run(lambda p, t: aotkit.jvp(f(anp), p, t, has_aux=True), (PARAMS, X), tangents)
    same(got, run_jax(lambda p, t: jax.jvp(f(jnp), p, t, has_aux=True), (PARAMS, X), tangents))


# --- integer inputs -------------------------------------------------------------------------------


def test_vjp_of_an_integer_primal_is_a_float0_zero():
    x, n = f32(3), np.arange(3, dtype=np.int32)
    _, fn = aotkit.vjp(lambda x, n: x * n, x, n)
    ct_x, ct_n = fn(np.ones(3, np.float32))
    assert ct_n.dtype == jax_dtypes.float0 and ct_n.shape == (3,)
    np.testing.assert_array_equal(np.asarray(ct_x), n.astype(np.float32))


def test_allow_int_gives_float0_zeros_inside_a_trace():
    def f(x, n):
        grads = aotkit.grad(lambda x, n: anp.sum(x * n), argnums=(0, 1), allow_int=True)(x, n)
        assert grads[1].dtype == jax_dtypes.float0, grads[1].dtype
        assert grads[1].shape == n.shape
        assert not np.any(grads[1].view(np.uint8))
        return grads[0]

    n = np.arange(3, dtype=np.int32)
    np.testing.assert_array_equal(run(f, f32(3), n), n.astype(np.float32))


def test_integer_argument_left_out_of_argnums_is_fine():
    n = np.arange(3, dtype=np.int32)
    got = run(aotkit.grad(lambda x, n: anp.sum(x * x * n)), f32(3) + 1, n)
    assert got.dtype == np.float32


# --- vmap axes -----------------------------------------------------------------------------------


def per_example(xp):
    return lambda p, x: mlp(xp, p, x[None])


def test_in_axes_pytree_prefix():
    params = dict(PARAMS, b=f32(5, 3))  # b is mapped, w and scale are not
    axes = ({"w": None, "b": 0, "scale": None}, 0)
    got = run(aotkit.vmap(per_example(anp), in_axes=axes), params, X)
    same(got, run_jax(jax.vmap(per_example(jnp), in_axes=axes), params, X))


def test_in_axes_none_and_negative():
    x, y = f32(3, 5), f32(3)
    got = run(aotkit.vmap(lambda a, b: a * b, in_axes=(-1, None)), x, y)
    same(got, run_jax(jax.vmap(lambda a, b: a * b, in_axes=(-1, None)), x, y))
    assert got.shape == (5, 3)


def test_in_axes_and_out_axes_move_the_batch():
    x, y = f32(3, 5), f32(5, 3)

    def f(xp):
        return lambda a, b: {"ab": xp.outer(a, b), "s": xp.sum(a * b)}

    out_axes = {"ab": 2, "s": 0}
    got = run(aotkit.vmap(f(anp), in_axes=(1, 0), out_axes=out_axes), x, y)
    want = run_jax(jax.vmap(f(jnp), in_axes=(1, 0), out_axes=out_axes), x, y)
    same(got, want)
    assert got["ab"].shape == (3, 3, 5)


def test_out_axes_none_for_an_unmapped_output():
    got = run(
        aotkit.vmap(lambda x, c: (x * c, c * 2), in_axes=(0, None), out_axes=(0, None)),
        f32(4, 2),
        np.float32(3),
    )
    assert got[1].shape == () and got[1] == 6


def test_axis_size_when_nothing_is_mapped():
    x = f32(3)
    got = run(aotkit.vmap(lambda x: x * 2, in_axes=None, axis_size=4), x)
    same(got, run_jax(jax.vmap(lambda x: x * 2, in_axes=None, axis_size=4), x))


def test_keyword_arguments_are_mapped_over_their_first_axis():
    x, y = f32(4, 3), f32(4, 3)
    got = run(lambda x, y: aotkit.vmap(lambda a, b=None: a @ b)(x, b=y), x, y)
    same(got, np.einsum("ij,ij->i", x, y))


def test_vmap_against_a_python_loop():
    xs = f32(6, 5, 4)
    got = run(aotkit.vmap(loss_a, in_axes=(None, 0)), PARAMS, xs)
    loop = np.stack([run(loss_a, PARAMS, x) for x in xs[:2]])
    same(got[:2], loop)
    same(got, run_jax(jax.vmap(loss_j, in_axes=(None, 0)), PARAMS, xs))


# --- compositions ---------------------------------------------------------------------------------


def test_per_example_gradients_vmap_of_grad():
    xs = f32(6, 1, 4)
    got = run(aotkit.vmap(aotkit.grad(loss_a), in_axes=(None, 0)), PARAMS, xs)
    same(got, run_jax(jax.vmap(jax.grad(loss_j), in_axes=(None, 0)), PARAMS, xs))


def test_grad_of_grad():
    def g(xp):
        return lambda x: xp.sin(x) * x**3 + xp.exp(-x * x)

    for x in (np.float32(0.7), np.float32(-1.3)):
        got = run(aotkit.grad(aotkit.grad(g(anp))), x)
        same(got, run_jax(jax.grad(jax.grad(g(jnp))), x))


def test_hessian_vector_product_jvp_of_grad():
    x, v = f32(4), f32(4)

    def f(xp):
        return lambda x: xp.sum(xp.tanh(x) * x[::-1]) + xp.prod(x[:2])

    got = run(lambda x, v: aotkit.jvp(aotkit.grad(f(anp)), (x,), (v,)), x, v)
    same(got, run_jax(lambda x, v: jax.jvp(jax.grad(f(jnp)), (x,), (v,)), x, v))


def test_grad_of_vmap():
    xs = f32(6, 4)
    got = run(
        aotkit.grad(lambda p, xs: aotkit.vmap(per_example(anp), (None, 0))(p, xs).sum()), PARAMS, xs
    )
    want = run_jax(
        jax.grad(lambda p, xs: jax.vmap(per_example(jnp), (None, 0))(p, xs).sum()), PARAMS, xs
    )
    same(got, want)


def _vector_function(xp):
    return lambda a, b: {"y": xp.sin(a) * b[0], "z": (xp.sum(a * a), b * 2)}


@pytest.mark.parametrize("jac", ["jacfwd", "jacrev"])
def test_jacobians_of_pytrees_and_argnums(jac):
    a, b = f32(3), f32(2)
    got = run(getattr(aotkit, jac)(_vector_function(anp), argnums=(0, 1)), a, b)
    want = run_jax(getattr(jax, jac)(_vector_function(jnp), argnums=(0, 1)), a, b)
    assert tree_util.tree_structure(got) == tree_util.tree_structure(want)
    same(got, want)
    assert got["y"][0].shape == (3, 3) and got["z"][1][1].shape == (2, 2)


@pytest.mark.parametrize("jac", ["jacfwd", "jacrev"])
def test_jacobian_with_aux(jac):
    x = f32(2, 3)
    got = run(getattr(aotkit, jac)(lambda x: (anp.sin(x) @ x.T, x.sum()), has_aux=True), x)
    want = run_jax(getattr(jax, jac)(lambda x: (jnp.sin(x) @ x.T, x.sum()), has_aux=True), x)
    same(got, want)
    assert got[0].shape == (2, 2, 2, 3)


def test_hessian_shape_and_values():
    x = f32(2, 3)

    def h(xp):
        return lambda x: xp.sum(xp.exp(x) * xp.sin(x[::-1]))

    got = run(aotkit.hessian(h(anp)), x)
    assert got.shape == (2, 3, 2, 3)
    same(got, run_jax(jax.hessian(h(jnp)), x), (1e-4, 1e-4))


# --- closures and staging -------------------------------------------------------------------------


def test_closures_over_values_of_the_enclosing_trace():
    """A batch the loss closes over is a constant to the transforms: grad, jvp and vmap of
    a function of the parameters only."""
    v = f32(4, 3)

    def step(xp, grad, jvp, vmap, params, x):
        def loss(w):
            return mlp(xp, dict(params, w=w), x)

        g = grad(loss)(params["w"])
        _, t = jvp(loss, (params["w"],), (v,))
        per_row = vmap(lambda r: xp.sum(xp.tanh(r @ params["w"])))(x)
        return g, t, per_row

    got = run(lambda p, x: step(anp, aotkit.grad, aotkit.jvp, aotkit.vmap, p, x), PARAMS, X)
    want = run_jax(lambda p, x: step(jnp, jax.grad, jax.jvp, jax.vmap, p, x), PARAMS, X)
    same(got, want)


def _the_function_as_argument_and_closure(xp, grad, vjp, jvp, x):
    """A function closing over the very value it is differentiated at: the closed-over
    use is a constant, the argument's a variable (d/dw of w * x * w is 2 w x)."""

    def f(w):
        return xp.sin(w) * x * w

    g = grad(lambda w: xp.sum(f(w)))(x)
    out, pull = vjp(f, x)
    (ct,) = pull(xp.cos(out))
    _, t = jvp(f, (x,), (xp.ones_like(x),))
    return g, ct, t


def test_a_value_closed_over_and_passed_keeps_its_two_roles():
    x = f32(5)
    got = run(
        lambda x: _the_function_as_argument_and_closure(
            anp, aotkit.grad, aotkit.vjp, aotkit.jvp, x
        ),
        x,
    )
    want = run_jax(
        lambda x: _the_function_as_argument_and_closure(jnp, jax.grad, jax.vjp, jax.jvp, x), x
    )
    same(got, want)


def test_one_value_passed_twice_gets_a_gradient_per_argument():
    def f(xp, grad, x):
        return grad(lambda a, b: xp.sum(xp.sin(a) * b * a), argnums=(0, 1))(x, x)

    x = f32(5)
    same(run(lambda x: f(anp, aotkit.grad, x), x), run_jax(lambda x: f(jnp, jax.grad, x), x))


def test_a_pullback_called_after_more_of_the_program_is_traced():
    def f(xp, vjp, fori_loop, x):
        def loss(w):
            s = xp.sum(xp.sin(w) * x)  # a reduction: its combiner region moves with it
            return fori_loop(0, 3, lambda i, c: c * 1.5 + xp.tanh(c), s)

        y, pull = vjp(loss, x)
        later = xp.cos(y) * xp.sum(x)
        return pull(later), y

    x = f32(5)
    got = run(lambda x: f(anp, aotkit.vjp, aotkit.fori_loop, x), x)
    same(got, run_jax(lambda x: f(jnp, jax.vjp, jax.lax.fori_loop, x), x))


def test_the_primal_program_appears_once_in_the_gradient():
    # The forward ops of grad(f) are f's own, moved into the program: none is emitted twice
    # (before any pass runs).
    def loss(x, w):
        return anp.sum(anp.tanh(x @ w) * anp.sin(x @ w))

    lowered = aotkit.jit(aotkit.grad(loss, argnums=1), pipeline="none").lower(f32(5, 4), f32(4, 3))
    text = lowered.as_text()
    assert text.count("stablehlo.tanh") == 1 and text.count("stablehlo.sine") == 1


def test_the_weight_cotangent_of_a_matmul_needs_no_transpose():
    # x^T g is a dot with x first, already in w's layout (JAX's rule transposes g^T x).
    def loss(xp, w, x):
        return xp.sum(xp.tanh(x @ w))

    w, x = f32(4, 3), f32(5, 4)
    lowered = aotkit.jit(aotkit.grad(lambda w, x: loss(anp, w, x)), pipeline="none").lower(w, x)
    assert "stablehlo.transpose" not in lowered.as_text()
    same(
        run(aotkit.grad(lambda w, x: loss(anp, w, x)), w, x),
        run_jax(jax.grad(lambda w, x: loss(jnp, w, x)), w, x),
    )


def test_jit_of_grad_lowers_to_a_verified_module():
    lowered = aotkit.jit(aotkit.grad(loss_a)).lower(PARAMS, X)
    assert lowered.module.operation.verify()
    text = lowered.as_text()
    assert "func.func public @main" in text and "stablehlo.dot_general" in text
    assert lowered.out_tree == tree_util.tree_structure(PARAMS)
    same(lowered.compile()(PARAMS, X), run_jax(jax.grad(loss_j), PARAMS, X))


def test_eager_calls_compile_once_per_signature():
    g = aotkit.grad(lambda x: anp.sum(anp.sin(x)))
    a, b = g(f32(3)), g(f32(3))
    assert np.asarray(a).shape == np.asarray(b).shape == (3,)
    same(g(np.zeros(3, np.float32)), np.ones(3, np.float32))


# --- errors, word for word ------------------------------------------------------------------------


def f(x):
    return anp.sum(anp.sin(x))


def two(x, y):
    return anp.sum(x * y)


X3 = np.ones(3, np.float32)
N3 = np.arange(3, dtype=np.int32)

ERRORS = {
    "not_callable": (
        lambda: aotkit.grad(3),
        TypeError,
        "grad(int): expected a function, got int",
    ),
    "holomorphic": (
        lambda: aotkit.grad(f, holomorphic=True),
        NotImplementedError,
        "grad(f): holomorphic=True is not supported; differentiate the real and imaginary "
        "parts separately, or use aotkit.vjp",
    ),
    "argnums_type": (
        lambda: aotkit.grad(f, argnums="0")(X3),
        TypeError,
        "grad(f): argnums must be an int or a tuple of ints, got '0'",
    ),
    "argnums_range": (
        lambda: aotkit.grad(f, argnums=(0, 2))(X3),
        ValueError,
        "grad(f): argnums (0, 2) names positional argument 2, but the function was called "
        "with 1 positional argument(s)",
    ),
    "integer_input": (
        lambda: aotkit.grad(f)(N3),
        TypeError,
        "grad(f): grad requires real- or complex-valued inputs (a float or complex dtype), "
        "but argument 0 has a leaf of dtype i32; pass allow_int=True for a float0 zero "
        "gradient, or leave the argument out of argnums",
    ),
    "integer_output": (
        lambda: aotkit.grad(lambda x: anp.sum(x).astype(np.int32))(X3),
        TypeError,
        "grad(lambda): grad requires a real-valued output (a float dtype), but the function "
        "returned i32; for complex outputs use aotkit.vjp directly",
    ),
    "vector_output": (
        lambda: aotkit.grad(lambda x: x * 2)(X3),
        TypeError,
        "grad(lambda): grad is defined for functions with a scalar output, but the output "
        "has shape (3,); reduce it to a scalar (a sum or mean) or use aotkit.vjp or "
        "aotkit.jacrev",
    ),
    "aux_not_a_pair": (
        lambda: aotkit.grad(f, has_aux=True)(X3),
        TypeError,
        "grad(f): has_aux=True needs the function to return a pair (value, aux), got "
        "PyTreeDef(*); return a tuple of the value and the auxiliary data",
    ),
    "two_outputs": (
        lambda: aotkit.grad(lambda x: (f(x), f(x)))(X3),
        TypeError,
        "grad(lambda): grad is defined for functions with one scalar output, but the function "
        "returned PyTreeDef((*, *)); return one scalar (with has_aux=True, return (scalar, aux))",
    ),
    "not_an_array": (
        lambda: run(lambda: aotkit.grad(f)("abc")),
        TypeError,
        "grad(f): argument 'abc' is not an array (str); transformed functions take arrays, "
        "Python scalars and pytrees of them",
    ),
    "vjp_aux": (
        lambda: aotkit.vjp(f, X3, has_aux=True),
        TypeError,
        "vjp(f): has_aux=True needs the function to return a pair (out, aux), got "
        "PyTreeDef(*); return a tuple of the output and the auxiliary data",
    ),
    "vjp_aux_dict": (
        lambda: aotkit.vjp(lambda x: {"out": x, "aux": x}, X3, has_aux=True),
        TypeError,
        "vjp(lambda): has_aux=True needs the function to return a pair (out, aux), got "
        "PyTreeDef({'aux': *, 'out': *}); return a tuple of the output and the auxiliary data",
    ),
    "vjp_cotangent_tree": (
        lambda: aotkit.vjp(lambda x: (x, x), X3)[1](X3),
        TypeError,
        "vjp(lambda): the cotangent has structure PyTreeDef(*), but the function's output "
        "has PyTreeDef((*, *)); pass one cotangent per output leaf",
    ),
    "vjp_cotangent_shape": (
        lambda: aotkit.vjp(lambda x: x * 2, X3)[1](np.ones(4, np.float32)),
        ValueError,
        "vjp(lambda): a cotangent has shape (4,) where the output has (3,); pass cotangents "
        "of the output's shapes",
    ),
    "jvp_not_tuples": (
        lambda: run(lambda x: aotkit.jvp(f, x, x), X3),
        TypeError,
        "jvp(f): primals and tangents must be tuples (one entry per positional argument), "
        "got Tracer and Tracer",
    ),
    "jvp_count": (
        lambda: aotkit.jvp(two, (X3, X3), (X3,)),
        ValueError,
        "jvp(two): 2 primal(s) but 1 tangent(s); give one tangent per primal",
    ),
    "jvp_tree": (
        lambda: aotkit.jvp(lambda d: d["a"], ({"a": X3},), ({"b": X3},)),
        TypeError,
        "jvp(lambda): the tangents have structure PyTreeDef(({'b': *},)), but the primals "
        "have PyTreeDef(({'a': *},)); give tangents of the primals' structure",
    ),
    "jvp_tangent_dtype": (
        lambda: aotkit.jvp(f, (X3,), (X3.astype(np.float64),)),
        ValueError,
        "jvp(f): a tangent is f64[3] where its primal is f32[3]; tangents must have their "
        "primals' shapes and dtypes",
    ),
    "jvp_tangent_shape": (
        lambda: aotkit.jvp(f, (X3,), (np.ones(4, np.float32),)),
        ValueError,
        "jvp(f): a tangent is f32[4] where its primal is f32[3]; tangents must have their "
        "primals' shapes and dtypes",
    ),
    "jvp_aux": (
        lambda: aotkit.jvp(f, (X3,), (X3,), has_aux=True),
        TypeError,
        "jvp(f): has_aux=True needs the function to return a pair (out, aux), got "
        "PyTreeDef(*); return a tuple of the output and the auxiliary data",
    ),
    "in_axes_length": (
        lambda: aotkit.vmap(two, in_axes=(0,))(X3, X3),
        ValueError,
        "vmap(two): in_axes has 1 entries but the function was called with 2 positional "
        "argument(s); give one entry per positional argument (or one int for all)",
    ),
    "in_axes_prefix": (
        lambda: aotkit.vmap(lambda d: d["a"], in_axes=({"b": 0},))({"a": X3}),
        ValueError,
        "vmap(lambda): in_axes ({'b': 0},) is not a pytree prefix of the arguments "
        "(PyTreeDef(({'a': *},))); give an int, None, or a prefix of their structure",
    ),
    "in_axes_entry": (
        lambda: aotkit.vmap(f, in_axes=1.5)(X3),
        TypeError,
        "vmap(f): in_axes entries must be ints or None, got 1.5",
    ),
    "in_axes_range": (
        lambda: aotkit.vmap(f, in_axes=2)(np.ones((2, 3), np.float32)),
        ValueError,
        "vmap(f): in_axes 2 is out of range for an argument of rank 2 (shape (2, 3)); choose "
        "an axis in [-2, 2)",
    ),
    "in_axes_scalar": (
        lambda: aotkit.vmap(two, in_axes=(0, 0))(X3, np.float32(2)),
        ValueError,
        "vmap(two): in_axes 0 maps over a scalar argument, which has no axis; give None for it",
    ),
    "inconsistent_sizes": (
        lambda: aotkit.vmap(two)(X3, np.ones(4, np.float32)),
        ValueError,
        "vmap(two): the mapped axes have inconsistent sizes: 3 (leaves [0]), 4 (leaves [1]); "
        "map axes of one size",
    ),
    "axis_size_mismatch": (
        lambda: aotkit.vmap(f, axis_size=4)(X3),
        ValueError,
        "vmap(f): axis_size=4 but the mapped axes have size 3",
    ),
    "nothing_mapped": (
        lambda: aotkit.vmap(f, in_axes=None)(X3),
        ValueError,
        "vmap(f): no argument is mapped (every in_axes is None) and axis_size is not given; "
        "map an argument or pass axis_size",
    ),
    "out_axes_none": (
        lambda: aotkit.vmap(lambda x: x * 2, out_axes=None)(X3),
        ValueError,
        "vmap(lambda): out_axes is None for an output that depends on the mapped arguments; "
        "give it an axis, or return only unmapped values there",
    ),
    "out_axes_range": (
        lambda: aotkit.vmap(lambda x: x * 2, out_axes=2)(X3),
        ValueError,
        "vmap(lambda): out_axes 2 is out of range for an output of rank 0",
    ),
    "jacfwd_integer_input": (
        lambda: aotkit.jacfwd(lambda x: x * 2)(N3),
        TypeError,
        "jacfwd(lambda): Jacobians need real float inputs, but an argument has dtype i32; "
        "convert it to a float dtype, or leave it out of argnums",
    ),
    "jacrev_integer_input": (
        lambda: aotkit.jacrev(lambda x: x * 2)(N3),
        TypeError,
        "jacrev(lambda): Jacobians need real float inputs, but an argument has dtype i32; "
        "convert it to a float dtype, or leave it out of argnums",
    ),
    "jacrev_integer_output": (
        lambda: aotkit.jacrev(lambda x: (x * 2).astype(np.int32))(X3),
        TypeError,
        "jacrev(lambda): Jacobians need real float outputs, but an output has dtype i32",
    ),
}


@pytest.mark.parametrize("name", ERRORS)
def test_error_messages(name):
    call, kind, message = ERRORS[name]
    with pytest.raises(kind, match=f"^{re.escape(message)}$"):
        call()


def test_allow_int_gives_float0_zeros_on_concrete_arrays():
    # The compiled program cannot return float0: the gradient of the integer argument is
    # put back on the host, as JAX gives it.
    x, n = np.ones(3, np.float32), np.arange(3)
    gx, gn = aotkit.grad(lambda x, n: anp.sum(x * n), argnums=(0, 1), allow_int=True)(x, n)
    want_x, want_n = jax.grad(lambda x, n: jnp.sum(x * n), argnums=(0, 1), allow_int=True)(x, n)
    np.testing.assert_array_equal(np.asarray(gx), np.asarray(want_x))
    assert gn.dtype == jax_dtypes.float0 and gn.shape == np.shape(want_n) == (3,)
    value, gn = aotkit.value_and_grad(lambda x, n: anp.sum(x * n), argnums=1, allow_int=True)(x, n)
    assert float(value) == 3.0 and gn.dtype == jax_dtypes.float0


def test_jvp_of_integer_outputs_on_concrete_arrays_gives_float0_tangents():
    def f(x):
        return x * 2.0, (x > 0).astype(np.int32)

    x = np.ones(3, np.float32)
    (y, k), (ty, tk) = aotkit.jvp(f, (x,), (x,))
    np.testing.assert_array_equal(np.asarray(ty), 2 * x)
    assert tk.dtype == jax_dtypes.float0 and tk.shape == (3,)
    assert np.asarray(k).dtype == np.int32


def test_jvp_on_concrete_arrays_checks_its_arguments_first():
    with pytest.raises(
        TypeError,
        match=r"^jvp\(lambda\): primals and tangents must be tuples \(one entry per positional "
        r"argument\), got ndarray and ndarray$",
    ):
        aotkit.jvp(lambda x: x, np.ones(3), np.ones(3))


def test_a_family_runs_a_failing_case_once_for_all_its_checks(monkeypatch):
    """The oracle's families (tests/transforms/oracle.py): when the family's program fails,
    each case runs alone, and a case that fails alone is not compiled again for each check
    (on an accelerator each compile takes seconds)."""
    from tests.transforms.oracle import Case, Family

    calls = []

    def run(names, dtype):
        calls.append(tuple(names))
        raise ValueError(f"no program for {names}")

    family = Family({"a": Case(np.sin, np.sin, lambda rng, dt: (np.ones(3, dt),))})
    monkeypatch.setattr(family, "_run", run)
    for check in (family.check_jvp, family.check_vjp, family.check_vmap):
        with pytest.raises(ValueError, match=r"^no program for \['a'\]$"):
            check("a", np.float32)
    assert calls == [("a",), ("a",)]  # the family's program, then the case alone: once each


def _branchy(x):
    if anp.sum(x) > 1.0:
        return x * 2.0
    return x * 3.0


def test_jacobians_convert_python_control_flow_as_grad_does():
    """jacfwd, jacrev and hessian refused a Python `if` on a traced value ("bool() of a
    traced bool[] array") that grad, vjp, jvp and vmap of the same function convert: they
    called it through a wrapper, which autograph had nothing to convert in."""
    for x, slope in ((np.ones(3, np.float32), 2.0), (np.full(3, 0.1, np.float32), 3.0)):
        want = np.eye(3, dtype=np.float32) * slope
        np.testing.assert_array_equal(np.asarray(aotkit.jacfwd(_branchy)(x)), want)
        np.testing.assert_array_equal(np.asarray(aotkit.jacrev(_branchy)(x)), want)
        hess = aotkit.hessian(lambda x: anp.sum(_branchy(x) ** 2))(x)
        np.testing.assert_allclose(np.asarray(hess), 2 * slope**2 * np.eye(3), rtol=1e-6)
