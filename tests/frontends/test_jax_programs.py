"""JAX programs written the ways JAX users write them, through aotkit's JAX front end.

Each program is called through `aotkit.jit(fn, frontend=...)` exactly as the user calls it
under `jax.jit`, and must give what `jax.jit` gives: the same values, dtypes and pytrees.
Already-jitted functions keep their own static and donated arguments, and arguments the
program does not use stay in the signature.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import tree_util

import aotkit

RNG = np.random.default_rng(0)


def normal(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


# --- the programs: (name, function, arguments) -------------------------------------------------


@jax.jit
def decorated(x, y):
    return jnp.tanh(x) @ y


@functools.partial(jax.jit, static_argnums=(1,))
def partial_static(x, n):
    for _ in range(n):  # a Python loop over a static count
        x = jnp.sin(x) + x
    return x


@functools.partial(jax.jit, static_argnames=("axis", "keepdims"))
def static_by_name(x, *, axis, keepdims=False):
    return jnp.max(x, axis=axis, keepdims=keepdims)


def shape_from_argument(x, n):
    return jnp.zeros((n, x.shape[0]), x.dtype) + x


@jax.jit
def unused_arguments(x, unused, y, also_unused):
    return x * 2.0 + y


@functools.partial(jax.jit, donate_argnums=0)
def donated_update(params, grads):
    return jax.tree_util.tree_map(lambda p, g: p - 0.1 * g, params, grads)


def mlp(params, x):
    for w, b in params["layers"]:
        x = jax.nn.relu(x @ w + b)
    return jax.nn.log_softmax(x @ params["out"])


@jax.jit
def fori_cumulative(x):
    return jax.lax.fori_loop(0, 10, lambda i, c: c * 0.9 + i, x)


@jax.jit
def while_newton(a):
    def body(state):
        x, i = state
        return 0.5 * (x + a / x), i + 1

    return jax.lax.while_loop(lambda s: (s[1] < 20) & (jnp.abs(s[0] ** 2 - a) > 1e-6), body, (a, 0))


@jax.jit
def scan_running(xs):
    return jax.lax.scan(lambda c, x: (c + x, c * x), jnp.zeros(xs.shape[1:]), xs)


@jax.jit
def cond_sign(x):
    return jax.lax.cond(x.sum() > 0, lambda v: v * 2, lambda v: -v, x)


@jax.jit
def grad_of_loss(w, x, y):
    return jax.grad(lambda w: jnp.mean((x @ w - y) ** 2))(w)


@jax.jit
def vmapped(xs, w):
    return jax.vmap(lambda x: jnp.dot(w, x))(xs)


PARAMS = {
    "layers": [(normal(4, 8), normal(8)), (normal(8, 8), normal(8))],
    "out": normal(8, 3),
}

PROGRAMS = [
    ("decorated", decorated, (normal(3, 4), normal(4, 2)), {}, {}),
    ("partial_static_argnums", partial_static, (normal(5), 3), {}, {}),
    ("static_argnames", static_by_name, (normal(3, 4),), {"axis": 1, "keepdims": True}, {}),
    ("shape_from_argument", shape_from_argument, (normal(3), 4), {}, {"static_argnums": 1}),
    (
        "unused_arguments",
        unused_arguments,
        (normal(3), normal(7), normal(3), np.int32(5)),
        {},
        {},
    ),
    ("pytree_params", mlp, (PARAMS, normal(2, 4)), {}, {}),
    ("fori_loop", fori_cumulative, (normal(4),), {}, {}),
    ("while_loop", while_newton, (np.float32(2.0),), {}, {}),
    ("scan", scan_running, (normal(6, 3),), {}, {}),
    ("cond", cond_sign, (normal(4),), {}, {}),
    ("grad", grad_of_loss, (normal(4), normal(8, 4), normal(8)), {}, {}),
    ("vmap", vmapped, (normal(5, 3), normal(3)), {}, {}),
]


def _same(got, want):
    got_leaves, got_tree = tree_util.tree_flatten(got)
    want_leaves, want_tree = tree_util.tree_flatten(want)
    assert got_tree == want_tree
    for g, w in zip(got_leaves, want_leaves, strict=True):
        g, w = np.asarray(g), np.asarray(w)
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("frontend", ["jax", "auto"])
@pytest.mark.parametrize("name, fn, args, kwargs, options", PROGRAMS, ids=[p[0] for p in PROGRAMS])
def test_jax_program_equals_jax_jit(name, fn, args, kwargs, options, frontend):
    want_fn = fn if hasattr(fn, "lower") else jax.jit(fn, **options)
    want = want_fn(*args, **kwargs)
    ours = aotkit.jit(fn, frontend=frontend, **options)
    _same(ours(*args, **kwargs), want)
    _same(ours(*args, **kwargs), want)  # again, from the caches


def test_an_already_jitted_function_keeps_its_static_and_donated_arguments():
    ours = aotkit.jit(partial_static, frontend="jax")
    assert (ours.static_argnums, ours.donate_argnums) == ((1,), ())
    assert aotkit.jit(donated_update, frontend="jax").donate_argnums == (0,)
    lowered = ours.lower(normal(5), 2)
    assert [str(s) for s in lowered.flat_in_specs] == ["f32[5]"]


@pytest.mark.parametrize(
    "call",
    [
        lambda f, a: f(a),  # static UPLO left to its default
        lambda f, a: f(a, UPLO="U"),  # by name
        lambda f, a: f(a, "U"),  # by position
    ],
    ids=["default", "by-name", "by-position"],
)
def test_static_argnames_of_a_jax_library_function_may_be_passed_any_way(call):
    # jnp.linalg.eigh is jax.jit(..., static_argnames=("UPLO", "symmetrize_input")): jax.jit
    # infers numbers for them, which a call need not pass positionally.
    a = normal(3, 3)
    a = a @ a.T
    ours = call(aotkit.jit(jnp.linalg.eigh, frontend="jax"), a)
    _same(ours, call(jnp.linalg.eigh, a))


def test_donation_of_an_already_jitted_function_carries_over():
    params = {"w": normal(3), "b": normal(3)}
    grads = {"w": normal(3), "b": normal(3)}
    lowered = aotkit.jit(donated_update, frontend="jax").lower(params, grads)
    assert lowered.donated == (True, True, False, False)
    _same(aotkit.jit(donated_update, frontend="jax")(params, grads), donated_update(params, grads))


def test_unused_arguments_stay_in_the_signature():
    args = (normal(3), normal(7), normal(3), np.int32(5))
    lowered = aotkit.jit(unused_arguments, frontend="jax").lower(*args)
    assert [str(s) for s in lowered.flat_in_specs] == ["f32[3]", "f32[7]", "f32[3]", "i32[]"]
    compiled = lowered.compile()
    _same(compiled(*args), unused_arguments(*args))


def test_a_jax_function_given_to_aotkits_tracer_says_which_front_end_to_use():
    with pytest.raises(
        TypeError,
        match=r"^trace\(decorated\): decorated is a JAX-transformed function \(jax.jit, "
        r"jax.grad, ...\), which aotkit's tracer cannot run; use frontend='jax' \(or 'auto'\)",
    ):
        aotkit.jit(decorated, frontend="aotkit")(normal(3, 4), normal(4, 2))


# --- bit for bit: a JAX module runs as JAX wrote it ---------------------------------------------


def _attention_loss(params, x):
    q, k, v = (x @ params[n] for n in ("wq", "wk", "wv"))
    b, t, d = q.shape
    heads = 4
    q, k, v = (a.reshape(b, t, heads, d // heads) for a in (q, k, v))
    scores = jnp.einsum("bthd,bshd->bhts", q, k) / jnp.sqrt(d // heads)
    out = jnp.einsum("bhts,bshd->bthd", jax.nn.softmax(scores, axis=-1), v).reshape(b, t, d)
    return jnp.mean(jax.nn.gelu(out @ params["wo"] + params["b"]) ** 2)


def _adam_step(state, x):
    params, m, v, step = state
    grads = jax.grad(_attention_loss)(params, x)
    step = step + 1
    m = jax.tree.map(lambda m, g: 0.9 * m + 0.1 * g, m, grads)
    v = jax.tree.map(lambda v, g: 0.999 * v + 0.001 * g * g, v, grads)
    scale = jnp.sqrt(1 - 0.999**step) / (1 - 0.9**step)
    params = jax.tree.map(lambda p, m, v: p - 1e-2 * scale * m / (jnp.sqrt(v) + 1e-8), params, m, v)
    return params, m, v, step


def test_a_jax_training_step_equals_jax_jit_bit_for_bit_over_twenty_steps():
    # The default pipeline's cse (exact on the interpreter) moved these gradients by ~3e-5
    # on XLA's CPU backend, and Adam amplified it on the zero-gradient bias; a JAX module now
    # runs as JAX wrote it unless a pipeline is passed.
    d = 32
    params = {n: normal(d, d) for n in ("wq", "wk", "wv", "wo")}
    params["b"] = np.zeros(d, np.float32)
    zeros = jax.tree.map(np.zeros_like, params)
    x = normal(2, 8, d)
    ours = theirs = (params, zeros, zeros, jnp.int32(0))
    step_aotkit, step_jax = aotkit.jit(_adam_step), jax.jit(_adam_step)
    assert step_aotkit.lower(ours, x).pipeline == "none"
    for _ in range(20):
        ours, theirs = step_aotkit(ours, x), step_jax(theirs, x)
    for a, b in zip(tree_util.tree_leaves(ours), tree_util.tree_leaves(theirs), strict=True):
        assert np.asarray(a).dtype == np.asarray(b).dtype
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_a_pipeline_passed_for_a_jax_function_still_runs():
    lowered = aotkit.jit(_attention_loss, pipeline="default").lower(
        {n: normal(8, 8) for n in ("wq", "wk", "wv", "wo")} | {"b": np.zeros(8, np.float32)},
        normal(1, 4, 8),
    )
    assert lowered.pipeline == "default"
