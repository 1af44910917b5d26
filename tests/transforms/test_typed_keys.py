"""Typed PRNG keys through aotkit's transforms (issue 44, item 2): a key array
(`jax.random.key`) is an argument or result of a transformed function as in JAX. Transforms
never differentiate it (float0 cotangents and tangents of the key's shape, as JAX gives),
vmap batches it along its own axes, and programs lowered from JAX with key arguments
(`Lowered.grad()`, `.vjp()`, `.jvp()`, `.vmap()`) transform like any other. The oracle is
JAX's own transform of the same function: same structure, dtypes (key dtypes included),
shapes and values; key results compare by their data.
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import tree_util

import aotkit

RTOL = 1e-6
IMPLS = ["threefry2x32", "rbg", "unsafe_rbg"]
FLOAT0 = jax.dtypes.float0


def is_key(x) -> bool:
    return jax.dtypes.issubdtype(getattr(x, "dtype", np.float32), jax.dtypes.prng_key)


def same(got, want):
    """Equal trees: key leaves keys of the same dtype, shape and data; float0 leaves float0
    of the same shape; others of the same dtype and shape, values to RTOL."""
    got_leaves, got_tree = tree_util.tree_flatten(got)
    want_leaves, want_tree = tree_util.tree_flatten(want)
    assert got_tree == want_tree
    for g, w in zip(got_leaves, want_leaves, strict=True):
        assert g.shape == w.shape, (g.shape, w.shape)
        if is_key(w):
            assert g.dtype == w.dtype, (g.dtype, w.dtype)
            g, w = jax.random.key_data(g), jax.random.key_data(w)
        g, w = np.asarray(g), np.asarray(w)
        assert g.dtype == w.dtype, (g.dtype, w.dtype)
        if w.dtype == FLOAT0:
            continue
        scale = float(np.max(np.abs(w))) if w.size else 0.0
        np.testing.assert_allclose(g, w, rtol=RTOL, atol=RTOL * scale)


def dropout_loss(w, key):
    keep = jax.random.bernoulli(key, 0.7, w.shape)
    return jnp.sum(jnp.where(keep, jnp.tanh(w), 0.0) ** 2) / 0.7


def noisy_step(w, key):
    k1, k2 = jax.random.split(key)
    return w * jax.random.normal(k1, w.shape), k2


W = np.linspace(-1.0, 1.5, 6, dtype=np.float32).reshape(2, 3)


def zero_ct(key):
    return np.zeros(key.shape, FLOAT0)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("frontend", ["auto", "jax"])
def test_grad_and_value_and_grad_with_a_key_argument(impl, frontend):
    key = jax.random.key(3, impl=impl)
    same(aotkit.grad(dropout_loss, frontend=frontend)(W, key), jax.grad(dropout_loss)(W, key))
    same(
        aotkit.value_and_grad(dropout_loss, frontend=frontend)(W, key),
        jax.value_and_grad(dropout_loss)(W, key),
    )


def test_grad_with_respect_to_a_key_gives_float0_of_the_keys_shape():
    keys = jax.random.split(jax.random.key(0), 3)

    def loss(w, ks):
        return sum(dropout_loss(w, ks[i]) for i in range(3))

    got = aotkit.grad(loss, argnums=(0, 1), allow_int=True, frontend="jax")(W, keys)
    same(got, jax.grad(loss, argnums=(0, 1), allow_int=True)(W, keys))
    assert got[1].shape == (3,) and got[1].dtype == FLOAT0


def test_grad_with_respect_to_a_key_without_allow_int_is_refused():
    message = (
        "grad(dropout_loss): grad requires real- or complex-valued inputs (a float or "
        "complex dtype), but argument 1 has a leaf of dtype key<fry>; pass allow_int=True "
        "for a float0 zero gradient, or leave the argument out of argnums"
    )
    with pytest.raises(TypeError, match=f"^{re.escape(message)}$"):
        aotkit.grad(dropout_loss, argnums=1)(W, jax.random.key(0))


@pytest.mark.parametrize("impl", IMPLS)
def test_vjp_with_keys_in_and_out(impl):
    key = jax.random.key(5, impl=impl)
    out, vjp_fn = aotkit.vjp(noisy_step, W, key)
    want_out, want_fn = jax.vjp(noisy_step, W, key)
    same(out, want_out)
    ct = (np.ones_like(W), zero_ct(key))
    same(vjp_fn(ct), want_fn(ct))


@pytest.mark.parametrize("impl", IMPLS)
def test_jvp_with_keys_in_and_out(impl):
    key = jax.random.key(7, impl=impl)
    tangents = (np.full_like(W, 0.5), zero_ct(key))
    got = aotkit.jvp(noisy_step, (W, key), tangents)
    same(got, jax.jvp(noisy_step, (W, key), tangents))
    assert got[1][1].shape == () and got[1][1].dtype == FLOAT0


@pytest.mark.parametrize("in_axis, out_axis", [(0, 0), (-1, -1), (0, 1)])
def test_vmap_over_keys(in_axis, out_axis):
    keys = jax.random.split(jax.random.key(11), 4)
    args = (W, keys)
    in_axes, out_axes = (None, in_axis), (out_axis, 0)
    got = aotkit.vmap(noisy_step, in_axes=in_axes, out_axes=out_axes)(*args)
    same(got, jax.vmap(noisy_step, in_axes=in_axes, out_axes=out_axes)(*args))


@pytest.mark.parametrize("impl", ["rbg", "unsafe_rbg"])
def test_vmap_over_rbg_keys_is_the_function_on_each_key(impl):
    """JAX's batching rule for rng_bit_generator draws the whole batch from the first key,
    so `jax.vmap` of an RBG sampler is not the sampler on each key; aotkit's is (the
    definition of vmap is the oracle here)."""
    keys = jax.random.split(jax.random.key(11, impl=impl), 4)
    got = aotkit.vmap(noisy_step, in_axes=(None, 0))(W, keys)
    each = [noisy_step(W, keys[i]) for i in range(4)]
    same(got, tree_util.tree_map(lambda *xs: jnp.stack(xs), *each))


def test_nested_vmap_over_a_two_dimensional_batch_of_keys():
    keys = jax.random.split(jax.random.key(2), (2, 3))

    def nested(vmap):
        inner = vmap(noisy_step, in_axes=(None, 0), out_axes=(0, 0))
        return vmap(inner, in_axes=(None, -1), out_axes=(-1, -1))

    same(nested(aotkit.vmap)(W, keys), nested(jax.vmap)(W, keys))


def test_vmap_in_axes_out_of_range_counts_the_keys_own_axes():
    message = (
        "vmap(noisy_step): in_axes 1 is out of range for an argument of rank 1 (shape (4,)); "
        "choose an axis in [-1, 1)"
    )
    keys = jax.random.split(jax.random.key(0), 4)
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        aotkit.vmap(noisy_step, in_axes=(None, 1))(W, keys)


def test_compositions_with_keys():
    keys = jax.random.split(jax.random.key(1), 3)
    key = keys[0]
    same(aotkit.jit(aotkit.grad(dropout_loss))(W, key), jax.grad(dropout_loss)(W, key))
    same(
        aotkit.vmap(aotkit.grad(dropout_loss), in_axes=(None, 0))(W, keys),
        jax.vmap(jax.grad(dropout_loss), in_axes=(None, 0))(W, keys),
    )
    same(aotkit.hessian(dropout_loss)(W, key), jax.hessian(dropout_loss)(W, key))
    first = lambda w, k: noisy_step(w, k)[0]  # noqa: E731
    same(aotkit.jacfwd(first, frontend="jax")(W, key), jax.jacfwd(first)(W, key))
    same(aotkit.jacrev(first, frontend="jax")(W, key), jax.jacrev(first)(W, key))


def test_jacobians_name_a_key_by_its_dtype():
    key = jax.random.key(0)
    message = (
        "jacrev(noisy_step): Jacobians need real float outputs, but an output has dtype key<fry>"
    )
    with pytest.raises(TypeError, match=f"^{re.escape(message)}$"):
        aotkit.jacrev(noisy_step)(W, key)
    message = (
        "jacfwd(noisy_step): Jacobians need real float inputs, but an argument has dtype "
        "key<fry>; convert it to a float dtype, or leave it out of argnums"
    )
    with pytest.raises(TypeError, match=f"^{re.escape(message)}$"):
        aotkit.jacfwd(noisy_step, argnums=1)(W, key)


def test_jax_code_traced_by_aotkit_on_a_key_says_to_let_jax_lower_it():
    key = jax.random.key(0)
    first = lambda w, k: noisy_step(w, k)[0]  # noqa: E731  (auto: aotkit traces a lambda)
    message = (
        "jacfwd(lambda): lambda calls JAX (jax.numpy, jax.lax, ...) on aotkit's traced "
        "values, which JAX cannot take (unexpected PRNG key type <class "
        "'aotkit.tracing.keys.KeyTracer'>); pass frontend='jax' to aotkit.jacfwd to let "
        "JAX lower lambda, or write it with aotkit.numpy"
    )
    with pytest.raises(TypeError, match=f"^{re.escape(message)}$"):
        aotkit.jacfwd(first)(W, key)


@pytest.mark.parametrize("impl", IMPLS)
def test_lowered_transforms_of_a_jax_program_with_keys(impl):
    """The issue's case: `jit(loss, frontend='jax').lower(w, key).grad()`."""
    key = jax.random.key(9, impl=impl)
    keys = jax.random.split(key, 4)
    lowered = aotkit.jit(dropout_loss, frontend="jax").lower(W, key)
    same(lowered.grad().compile()(W, key), jax.grad(dropout_loss)(W, key))
    step = aotkit.jit(noisy_step, frontend="jax").lower(W, key)
    each = [noisy_step(W, keys[i]) for i in range(4)]  # (RBG: see test_vmap_over_rbg_keys...)
    same(
        step.vmap(in_axes=(None, 0), axis_size=4).compile()(W, keys),
        tree_util.tree_map(lambda *xs: jnp.stack(xs), *each),
    )
    out, cts = step.vjp().compile()((W, key), (np.ones_like(W), None))
    want_out, want_fn = jax.vjp(noisy_step, W, key)
    same(out, want_out)
    same(cts[0], want_fn((np.ones_like(W), zero_ct(key)))[0])
    assert cts[1] is None  # float0 is no compiled result: None, as for integer primals
    out, touts = step.jvp().compile()((W, key), (np.ones_like(W), None))
    want = jax.jvp(noisy_step, (W, key), (np.ones_like(W), zero_ct(key)))
    same(out, want[0])
    same(touts[0], want[1][0])


def test_aotkits_tracer_takes_and_returns_keys():
    def swap(k, x):
        return x + 1, k

    key = jax.random.key(4, impl="rbg")
    compiled = aotkit.jit(swap, frontend="aotkit").lower(key, np.float32(1)).compile()
    assert repr(compiled) == (
        "<Compiled swap(k: key<rbg>[], x: f32[]) -> (out[0]: f32[], out[1]: key<rbg>[]) on cpu>"
    )
    same(compiled(key, np.float32(1)), (np.float32(2), key))


def test_a_key_used_as_numbers_in_aotkits_tracer_says_what_to_do():
    message = (
        "a typed PRNG key array (key<fry>[]) is not an array of numbers: pass it to "
        "aotkit.random, or to jax.random in a function JAX lowers (frontend='jax'); "
        "aotkit.random.key_data(key) is its uint32 data"
    )

    def use(k):
        return aotkit.numpy.sum(k)

    with pytest.raises(TypeError, match=re.escape(message)):
        aotkit.jit(use, frontend="aotkit")(jax.random.key(0))


def test_a_concrete_key_inside_a_trace_is_a_constant_of_the_transform():
    key = jax.random.key(8)

    def outer(w):
        return aotkit.grad(dropout_loss, frontend="jax")(w, key)

    same(aotkit.jit(outer, frontend="aotkit")(W), jax.grad(dropout_loss)(W, key))


def test_nnx_model_with_rngs_and_dropout():
    nnx = pytest.importorskip("flax.nnx")

    class Model(nnx.Module):
        def __init__(self, rngs):
            self.linear = nnx.Linear(3, 4, rngs=rngs)
            self.drop = nnx.Dropout(0.5, rngs=rngs)

        def __call__(self, x):
            return self.drop(jnp.tanh(self.linear(x)))

    def make():
        return Model(nnx.Rngs(0, dropout=1))

    graphdef, params, rng_state = nnx.split(make(), nnx.Param, ...)

    def loss(params, rng_state, x):
        model = nnx.merge(graphdef, params, rng_state)
        return jnp.mean(model(x) ** 2)

    # (jax.grad of `loss` refuses nnx's state made outside its trace; nnx.grad is JAX's way)
    got = aotkit.grad(loss, frontend="jax")(params, rng_state, W)
    same(got, nnx.grad(lambda m, x: jnp.mean(m(x) ** 2))(make(), W))


def test_a_saved_gradient_with_a_key_loads_in_a_fresh_process(tmp_path):
    key = jax.random.key(12)
    lowered = aotkit.jit(dropout_loss, frontend="jax").lower(W, key)
    path = tmp_path / "grad.aotkit"
    lowered.grad().compile().save(path)
    np.save(tmp_path / "w.npy", W)
    code = textwrap.dedent(
        f"""
        import jax, numpy as np, aotkit
        c = aotkit.load({str(path)!r})
        g = c(np.load({str(tmp_path / "w.npy")!r}), jax.random.key(12))
        np.save({str(tmp_path / "g.npy")!r}, np.asarray(g))
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    same(np.load(tmp_path / "g.npy"), jax.grad(dropout_loss)(W, key))


def test_aotkit_random_takes_a_typed_threefry_key():
    key = jax.random.key(21)

    def sample(k):
        k1, k2 = aotkit.random.split(k)
        return aotkit.random.normal(k1, (3,)), aotkit.random.fold_in(k2, 5), k1[None]

    def want(k):
        k1, k2 = jax.random.split(k)
        return jax.random.normal(k1, (3,)), jax.random.fold_in(k2, 5), k1[None]

    same(aotkit.jit(sample, frontend="aotkit")(key), jax.jit(want)(key))
    assert np.array_equal(aotkit.random.key_data(key), jax.random.key_data(key))


def test_aotkit_random_refuses_a_batch_or_another_implementation():
    def sample(k):
        return aotkit.random.normal(k, (3,))

    for key, text in [
        (jax.random.split(jax.random.key(0), 2), "key<fry>[2]"),
        (jax.random.key(0, impl="rbg"), "key<rbg>[]"),
    ]:
        message = (
            f"a typed key must be one Threefry key (key<fry>[]), got {text}; split a batch "
            "of keys with aotkit.vmap, or let JAX lower the function (frontend='jax')"
        )
        with pytest.raises(TypeError, match=re.escape(message)):
            aotkit.jit(sample, frontend="aotkit")(key)


def test_a_batch_of_traced_keys_indexes_and_iterates_as_keys():
    keys = jax.random.split(jax.random.key(30), 3)

    def pick(ks):
        first, *rest = ks
        return ks[1], ks[::2], ks[..., -1], first, len(rest)

    got = aotkit.jit(lambda ks: pick(ks)[:4], frontend="aotkit")(keys)
    same(got, pick(keys)[:4])


@pytest.mark.parametrize(
    "use, error, message",
    [
        (lambda k: k[0], IndexError, "a single key (key<fry>[]) has no axis to index"),
        (lambda k: len(k), TypeError, "len() of a single key (key<fry>[])"),
        (
            lambda k: 1 if k else 0,
            TypeError,
            "a typed PRNG key array (key<fry>[]) is not an array of numbers",
        ),
    ],
    ids=["index", "len", "bool"],
)
def test_a_single_traced_key_refuses_what_a_key_cannot_do(use, error, message):
    with pytest.raises(error, match=re.escape(message)):
        aotkit.jit(lambda k: use(k) and k, frontend="aotkit")(jax.random.key(0))
