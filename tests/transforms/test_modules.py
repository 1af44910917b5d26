"""Transforms of programs aotkit did not trace: JAX modules, jax.export artifacts and
StableHLO files, differentiated and batched by aotkit's rules (`Lowered.grad`, `.vjp`,
`.jvp`, `.vmap`), against jax.grad / jax.vmap of the original function; and the CLI."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import export

import aotkit
from tests import lane

RNG = np.random.default_rng(0)


def f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


PARAMS = {"w1": f32(4, 8), "b1": f32(8), "w2": f32(8, 3)}
X = f32(5, 4)
XS = f32(6, 5, 4)


def mlp(params, x):
    h = jax.nn.relu(x @ params["w1"] + params["b1"])
    return jnp.sum(jax.nn.log_softmax(h @ params["w2"]) ** 2)


def loopy(w, x):
    """JAX's own loop and branch ops: fori_loop (a counted while), scan and cond."""
    h = jax.lax.fori_loop(0, 4, lambda i, h: jnp.tanh(h @ w[:, :4] + i), x)
    h, ys = jax.lax.scan(lambda c, r: (c * 0.5 + r, jnp.sin(c)), h, jnp.ones((3,) + h.shape))
    h = jax.lax.cond(jnp.sum(h) > 0, lambda: h * 2.0, lambda: jnp.cos(h))
    return jnp.sum(h**2) + jnp.sum(ys)


def close(got, want, rtol=1e-5, atol=1e-5):
    got_leaves, want_leaves = jax.tree.leaves(got), jax.tree.leaves(want)
    assert len(got_leaves) == len(want_leaves)
    for g, w in zip(got_leaves, want_leaves, strict=True):
        assert np.asarray(g).dtype == np.asarray(w).dtype
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=rtol, atol=atol)


@pytest.fixture(scope="module")
def exported():
    data = export.export(jax.jit(mlp), platforms=lane.EXPORT_PLATFORMS)(PARAMS, X).serialize()
    return aotkit.load_module(bytes(data))


def test_grad_of_a_jax_export_artifact_keeps_its_pytree(exported):
    grad = exported.grad()
    assert grad.frontend == "aotkit"
    close(grad.compile()(PARAMS, X), jax.grad(mlp)(PARAMS, X))


def test_vmap_of_a_jax_export_artifact(exported):
    batched = exported.vmap(in_axes=(None, 0), axis_size=6)
    assert batched.flat_in_specs[-1].shape == (6, 5, 4)
    close(batched.compile()(PARAMS, XS), jax.vmap(mlp, in_axes=(None, 0))(PARAMS, XS))


def test_jvp_and_vjp_of_a_jax_export_artifact(exported):
    tangents = jax.tree.map(np.ones_like, (PARAMS, X))
    close(exported.jvp().compile()((PARAMS, X), tangents), jax.jvp(mlp, (PARAMS, X), tangents))
    out, cts = exported.vjp().compile()((PARAMS, X), np.float32(2.0))
    want_out, pullback = jax.vjp(mlp, PARAMS, X)
    close((out, cts), (want_out, pullback(np.float32(2.0))))


def test_vmap_of_grad_of_a_jax_export_artifact(exported):
    # Per-example gradients of a loaded program: the stage transforms compose.
    per_example = exported.grad().vmap(in_axes=(None, 0), axis_size=6).compile()
    close(per_example(PARAMS, XS), jax.vmap(jax.grad(mlp), in_axes=(None, 0))(PARAMS, XS))


def test_a_stablehlo_text_file_is_differentiated_and_batched(tmp_path):
    path = tmp_path / "mlp.mlir"
    path.write_text(jax.jit(mlp).lower(PARAMS, X).as_text())
    loaded = aotkit.load_module(path)
    flat = [PARAMS["b1"], PARAMS["w1"], PARAMS["w2"], X]  # the module's own argument order

    def flat_mlp(b1, w1, w2, x):
        return mlp({"w1": w1, "b1": b1, "w2": w2}, x)

    close(loaded.grad(argnums=(0, 1, 2)).compile()(*flat), jax.grad(flat_mlp, (0, 1, 2))(*flat))
    batched = loaded.vmap(in_axes=(None, None, None, 0), axis_size=6).compile()
    close(batched(*flat[:3], XS), jax.vmap(flat_mlp, in_axes=(None, None, None, 0))(*flat[:3], XS))


def test_jax_loops_and_branches_are_differentiated():
    w = f32(4, 4) * 0.3
    lowered = aotkit.jit(loopy, frontend="jax").lower(w, X)
    assert "stablehlo.while" in lowered.as_text()
    close(lowered.grad(argnums=(0, 1)).compile()(w, X), jax.grad(loopy, (0, 1))(w, X), 1e-4)
    close(
        lowered.vmap(in_axes=(None, 0), axis_size=6).compile()(w, XS),
        jax.vmap(loopy, in_axes=(None, 0))(w, XS),
        1e-4,
    )


def test_a_sharded_program_is_refused_with_what_to_do():
    # One device here: the partitioning of a lowered program is what makes it sharded.
    mesh = aotkit.sharding.mesh({"x": 1})
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    lowered = aotkit.jit(mlp, frontend="jax", in_shardings=(None, NamedSharding(mesh, P()))).lower(
        PARAMS, X
    )
    with pytest.raises(
        NotImplementedError,
        match=r"Lowered\.grad\(mlp\): the program is sharded \(.*\), and aotkit transforms "
        r"single-device programs; transform the function and jit it with "
        r"in_shardings/out_shardings instead",
    ):
        lowered.grad()


def test_a_data_dependent_loop_under_grad_says_what_to_do():
    def until(x):
        return jax.lax.while_loop(lambda c: jnp.sum(c) < 10.0, lambda c: c * 1.5 + 0.1, x)

    lowered = aotkit.jit(lambda x: jnp.sum(until(x)), frontend="jax").lower(np.ones(3, np.float32))
    with pytest.raises(
        NotImplementedError,
        match=r"grad: stablehlo\.while at .* is a while loop whose trip count depends on the "
        r"data, and reverse-mode differentiation stores one carry per iteration; write it as a "
        r"loop with a static trip count",
    ):
        lowered.grad()
    # Forward mode runs any loop.
    tangent = np.ones(3, np.float32)
    close(
        lowered.jvp().compile()((np.ones(3, np.float32),), (tangent,)),
        jax.jvp(lambda x: jnp.sum(until(x)), (np.ones(3, np.float32),), (tangent,)),
    )


# --- the command line ----------------------------------------------------------------------------


def test_cli_opt_transforms_a_module_file(tmp_path, run_cli):
    path = tmp_path / "mlp.mlir"
    path.write_text(jax.jit(mlp).lower(PARAMS, X).as_text())
    out = tmp_path / "vjp.mlir"
    code, _, err = run_cli("opt", str(path), "--transform", "vjp", "-o", str(out))
    assert code == 0, err
    vjp = aotkit.load_module(out)
    # (b1, w1, w2, x) and the output's cotangent -> (output, one cotangent per argument)
    assert [s.shape for s in vjp.flat_in_specs] == [(8,), (4, 8), (8, 3), (5, 4), ()]
    assert [s.shape for s in vjp.flat_out_specs] == [(), (8,), (4, 8), (8, 3), (5, 4)]


def test_cli_lower_grad_equals_the_api(tmp_path, run_cli):
    src = tmp_path / "loss.py"
    src.write_text(
        "import numpy as np\n\ndef loss(w, x):\n    return np.sum(np.tanh(x @ w) ** 2)\n"
    )
    code, out, err = run_cli("lower", f"{src}:loss", "--shapes", "f32[4,3]", "f32[8,4]", "--grad")
    assert code == 0, err
    assert "@main(%arg0: tensor<4x3xf32>, %arg1: tensor<8x4xf32>) -> tensor<4x3xf32>" in out


def test_cli_vmap_needs_an_axis_size(tmp_path, run_cli):
    src = tmp_path / "f.py"
    src.write_text("import numpy as np\n\ndef f(x):\n    return np.sin(x)\n")
    code, _, err = run_cli("lower", f"{src}:f", "--shapes", "f32[3]", "--transform", "vmap")
    assert code == 1
    assert "--transform vmap needs --axis-size N, the size of the new axis" in err


# Functions whose jax 0.12.1 lowering holds ops of newer StableHLO (exp2, log2, fma) or
# jaxlib's CPU math kernels (cpu_lgamma_ffi, cpu_digamma_ffi); older jax lowers them to
# ops aotkit had rules for already, and the test runs all the same.
NEWER_OPS = {
    "exp2": lambda x: jnp.sum(jnp.exp2(x) * x),  # stablehlo.exp2
    "log2": lambda x: jnp.sum(jnp.log2(x) ** 2),  # stablehlo.log2
    "erfc": lambda x: jnp.sum(jax.lax.erfc(x) * jnp.exp2(x)),  # stablehlo.fma
    "lgamma": lambda x: jnp.sum(jax.lax.lgamma(x) * x),  # cpu_lgamma_ffi
    "digamma": lambda x: jnp.sum(jax.lax.digamma(x)),  # cpu_digamma_ffi
}


@pytest.mark.parametrize("name", NEWER_OPS)
def test_ops_of_newer_jax_lowerings_differentiate_and_batch(name):
    fn = NEWER_OPS[name]
    x = np.linspace(0.5, 3.0, 6).astype(np.float32)
    lowered = aotkit.jit(fn, frontend="jax").lower(x)
    grad = lowered.grad().compile()(x)
    assert grad.dtype == np.float32
    close(grad, jax.grad(fn)(x), rtol=2e-5)
    xs = np.stack([x, x * 1.25])
    batched = lowered.vmap(axis_size=2).compile()(xs)
    close(batched, jax.vmap(fn)(xs), rtol=2e-5)
