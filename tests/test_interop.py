"""aotkit programs inside JAX programs (aotkit/interop.py): `aotkit.to_jax`.

The oracle is the same kernel written with jax.numpy, and the stage's own compile: an aotkit
kernel embedded under `jax.jit` (alone, and as a layer of a Flax model) gives what the JAX
kernel gives, dtypes included; `jax.grad` and `jax.vmap` of it run aotkit's own transforms
of the module and give what JAX's transforms of the JAX kernel give.
"""

from __future__ import annotations

import re
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import aotkit
import aotkit.numpy as anp
from aotkit import interop

RTOL = 2e-6


def rms_norm(xp, x, scale):
    """One kernel for both namespaces: RMS normalization over the last axis, then a gate."""
    mean_square = xp.mean(x * x, axis=-1, keepdims=True)
    y = x / xp.sqrt(mean_square + 1e-6) * scale
    return y * xp.tanh(y)


def aotkit_kernel(x, scale):
    return rms_norm(anp, x, scale)


def jax_kernel(x, scale):
    return rms_norm(jnp, x, scale)


X = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)
SCALE = np.random.default_rng(1).standard_normal(8).astype(np.float32)


@pytest.fixture(scope="module")
def lowered():
    return aotkit.jit(aotkit_kernel).lower(aotkit.spec("f32[4,8]"), aotkit.spec("f32[8]"))


@pytest.fixture(scope="module")
def embedded(lowered):
    return aotkit.to_jax(lowered)


def test_under_jax_jit_it_equals_the_kernel_in_jax(embedded, lowered):
    got = jax.jit(lambda x, s: embedded(x, s) + 1.0)(X, SCALE)
    want = jax.jit(lambda x, s: jax_kernel(x, s) + 1.0)(X, SCALE)
    assert got.dtype == want.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=1e-6)
    own = lowered.compile()(X, SCALE)
    np.testing.assert_allclose(got - 1.0, own, rtol=RTOL, atol=1e-6)
    # The module is in the caller's program, not called through a callback.
    text = jax.jit(lambda x, s: embedded(x, s)).lower(X, SCALE).as_text()
    assert "call_exported_aotkit_kernel" in text and "custom_call" not in text


def test_pytrees_keywords_and_python_scalars():
    def kernel(params, x, *, shift):
        return {"out": x @ params["w"] + params["b"] + shift, "norm": anp.sum(x * x)}

    specs = {"w": aotkit.spec("f32[8,3]"), "b": aotkit.spec("f32[3]")}
    lowered = aotkit.lower(kernel, specs, aotkit.spec("f32[4,8]"), shift=aotkit.spec("f32[]"))
    f = aotkit.to_jax(lowered)
    params = {"w": np.ones((8, 3), np.float32), "b": np.arange(3, dtype=np.float32)}
    got = jax.jit(lambda p, x: f(p, x, shift=0.5))(params, X)
    np.testing.assert_allclose(got["out"], X @ params["w"] + params["b"] + 0.5, rtol=RTOL)
    assert got["norm"].shape == () and got["norm"].dtype == np.float32


def test_a_loaded_artifact_embeds_too(lowered):
    loaded = aotkit.load(lowered.compile().serialize())
    got = jax.jit(aotkit.to_jax(loaded))(X, SCALE)
    np.testing.assert_allclose(got, jax_kernel(X, SCALE), rtol=RTOL, atol=1e-6)


def test_inside_a_flax_model_it_equals_the_same_kernel_in_jax(embedded):
    nn = pytest.importorskip("flax.linen", reason="flax is not installed: pip install -e '.[flax]'")

    class Model(nn.Module):
        kernel: object

        @nn.compact
        def __call__(self, x):
            h = nn.Dense(8)(x)
            scale = self.param("scale", nn.initializers.ones, (8,))
            return nn.Dense(2)(self.kernel(h, scale))

    ours, theirs = Model(embedded), Model(jax_kernel)
    x = np.random.default_rng(2).standard_normal((4, 5)).astype(np.float32)
    params = theirs.init(jax.random.PRNGKey(0), x)
    got = jax.jit(ours.apply)(params, x)
    want = jax.jit(theirs.apply)(params, x)
    assert got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=1e-6)

    def loss(model, p):
        return jnp.mean(model.apply(p, x) ** 2)

    got = jax.jit(jax.grad(lambda p: loss(ours, p)))(params)
    want = jax.jit(jax.grad(lambda p: loss(theirs, p)))(params)
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_jax_grad_runs_aotkits_vjp(embedded):
    def loss(kernel):
        return lambda x, s: jnp.sum(kernel(x, s) ** 2)

    got = jax.grad(loss(embedded), argnums=(0, 1))(X, SCALE)
    want = jax.grad(loss(jax_kernel), argnums=(0, 1))(X, SCALE)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_jax_vmap_runs_aotkits_batched_program(embedded):
    xs = np.random.default_rng(3).standard_normal((5, 4, 8)).astype(np.float32)
    got = jax.jit(jax.vmap(embedded, in_axes=(0, None)))(xs, SCALE)
    want = jax.vmap(jax_kernel, in_axes=(0, None))(xs, SCALE)
    assert got.shape == (5, 4, 8) and got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=1e-6)


# --- errors ------------------------------------------------------------------------------------


def test_only_stages_embed():
    with pytest.raises(TypeError, match=re.escape(
        "aotkit.to_jax: expected a Lowered or Compiled stage, got function; pass "
        "aotkit.jit(f).lower(*specs) or its .compile()"
    )):  # fmt: skip
        aotkit.to_jax(aotkit_kernel)


def test_sharded_stages_are_refused():
    mesh = aotkit.sharding.mesh({"x": 1})
    lowered = aotkit.jit(aotkit_kernel, in_shardings=NamedSharding(mesh, P("x"))).lower(X, SCALE)
    with pytest.raises(ValueError, match=re.escape(
        "aotkit.to_jax: 'aotkit_kernel' is partitioned over mesh ('x': 1); to_jax embeds "
        "one-device programs: lower it without shardings and shard the caller's jax.jit instead"
    )):  # fmt: skip
        aotkit.to_jax(lowered)


def test_calls_of_another_structure_or_spec_are_type_errors(embedded):
    with pytest.raises(TypeError, match=re.escape(
        "aotkit.to_jax('aotkit_kernel'): called with PyTreeDef(((*,), {})), but it takes "
        "PyTreeDef(((*, *), {})): aotkit_kernel(x: f32[4,8], scale: f32[8])"
    )):  # fmt: skip
        embedded(X)
    with pytest.raises(TypeError, match=re.escape(
        "aotkit.to_jax('aotkit_kernel'): argument x is i32[4,8], but it takes f32[4,8]; "
        "pass an array of that shape and dtype, or lower the program for the new one"
    )):  # fmt: skip
        jax.jit(embedded)(X.astype(np.int32), SCALE)


def test_a_stage_without_a_transform_says_what_jax_asked_for():
    stage = types.SimpleNamespace(name="k")
    with pytest.raises(TypeError, match=re.escape(
        "aotkit.to_jax('k'): jax.grad or jax.vjp needs aotkit's vjp transform of the program "
        "(Lowered.vjp), which this aotkit does not have; transform the function with aotkit "
        "before lowering it, or call it outside the JAX transform"
    )):  # fmt: skip
        interop._transformed(stage, "vjp")
    with pytest.raises(TypeError, match=re.escape(
        "aotkit.to_jax('k'): jax.vmap needs aotkit's vmap transform of the program "
        "(Lowered.vmap), which this aotkit does not have;"
    )):  # fmt: skip
        interop._transformed(stage, "vmap")


def test_vmap_of_a_keyword_argument_is_refused():
    lowered = aotkit.lower(lambda x, *, s: x * s, aotkit.spec("f32[3]"), s=aotkit.spec("f32[]"))
    f = aotkit.to_jax(lowered)
    with pytest.raises(TypeError, match=re.escape(
        "aotkit.to_jax('lambda'): jax.vmap maps keyword argument(s) 's', but aotkit maps "
        "positional arguments only; pass them positionally"
    )):  # fmt: skip
        jax.vmap(lambda x, s: f(x, s=s))(np.ones((2, 3), np.float32), np.ones(2, np.float32))


def test_a_compiled_without_its_module_cannot_embed(lowered):
    compiled = lowered.compile()
    bare = aotkit.Compiled(
        compiled._executable, in_tree=compiled.in_tree, out_tree=compiled.out_tree
    )
    with pytest.raises(ValueError, match=re.escape(
        "aotkit.to_jax: Compiled 'aotkit_kernel' has neither its Lowered stage nor a portable "
        "module; compile it with Lowered.compile (or load it with aotkit.load)"
    )):  # fmt: skip
        aotkit.to_jax(bare)
