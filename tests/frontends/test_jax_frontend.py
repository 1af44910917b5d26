"""The JAX front end: JAX functions lowered by JAX, compiled and run by aotkit.

The oracle is `jax.jit` of the same function on the same inputs: values and result dtypes.
"""

from __future__ import annotations

import re
import sys
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import tree_util

import aotkit
import aotkit.numpy as anp
from aotkit import frontends
from aotkit.api import lower_function
from tests.helpers import PEERS, run_lowered

RNG = np.random.default_rng(0)


def lower_jax(fn, args, kwargs, **options):
    return lower_function(fn, args, kwargs, frontend="jax", **options)


def normal(*shape, scale=1.0, dtype=np.float32):
    return (scale * RNG.standard_normal(shape)).astype(dtype)


def assert_same(got, want, rtol=1e-5, atol=1e-6):
    """Same tree, same dtypes, close values."""
    want = tree_util.tree_map(np.asarray, want)
    assert tree_util.tree_structure(got) == tree_util.tree_structure(want)
    for g, w in zip(tree_util.tree_leaves(got), tree_util.tree_leaves(want), strict=True):
        assert g.dtype == w.dtype
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)


# --- The three programs of the issue -------------------------------------------------------


def mlp(params, x):
    for w, b in params[:-1]:
        x = jax.nn.relu(x @ w + b)
    w, b = params[-1]
    return jax.nn.log_softmax(x @ w + b)


def mlp_params():
    sizes = [16, 32, 32, 10]
    return [(normal(m, n, scale=1 / np.sqrt(m)), normal(n)) for m, n in zip(sizes[:-1], sizes[1:])]


def layer_norm(x, scale, bias, eps=1e-5):
    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.var(x, axis=-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + eps) * scale + bias


def transformer_block(p, x):
    """Pre-norm block: causal multi-head self-attention, then a GELU MLP."""
    seq, dim = x.shape
    heads = 4
    h = layer_norm(x, p["ln1_scale"], p["ln1_bias"])
    q, k, v = (jnp.split(h @ p["qkv"], 3, axis=-1)[i].reshape(seq, heads, -1) for i in range(3))
    logits = jnp.einsum("qhd,khd->hqk", q, k) / jnp.sqrt(q.shape[-1]).astype(x.dtype)
    mask = jnp.tril(jnp.ones((seq, seq), bool))
    logits = jnp.where(mask, logits, jnp.finfo(x.dtype).min)
    attention = jax.nn.softmax(logits, axis=-1)
    out = jnp.einsum("hqk,khd->qhd", attention, v).reshape(seq, dim)
    x = x + out @ p["proj"]
    h = layer_norm(x, p["ln2_scale"], p["ln2_bias"])
    return x + jax.nn.gelu(h @ p["up"]) @ p["down"]


def transformer_params(dim=32):
    return {
        "ln1_scale": normal(dim, scale=0.1) + 1,
        "ln1_bias": normal(dim, scale=0.1),
        "qkv": normal(dim, 3 * dim, scale=1 / np.sqrt(dim)),
        "proj": normal(dim, dim, scale=1 / np.sqrt(dim)),
        "ln2_scale": normal(dim, scale=0.1) + 1,
        "ln2_bias": normal(dim, scale=0.1),
        "up": normal(dim, 4 * dim, scale=1 / np.sqrt(dim)),
        "down": normal(4 * dim, dim, scale=1 / np.sqrt(4 * dim)),
    }


def rnn(w, h0, xs):
    def step(h, x):
        h = jnp.tanh(h @ w + x)
        return h, jnp.sum(h * h)

    return jax.lax.scan(step, h0, xs)


PROGRAMS = {
    "mlp": (mlp, lambda: (mlp_params(), normal(8, 16))),
    "transformer_block": (transformer_block, lambda: (transformer_params(), normal(16, 32))),
    "scan": (rnn, lambda: (normal(8, 8, scale=1 / 3), normal(8), normal(20, 8))),
}


@pytest.mark.parametrize("program", sorted(PROGRAMS))
def test_lower_frontend_jax_matches_jax_jit(program):
    fn, make_args = PROGRAMS[program]
    args = make_args()
    lowered = aotkit.lower(fn, *args, frontend="jax")
    assert lowered.frontend == "jax"
    assert f"module @{fn.__name__}" in lowered.as_text()
    assert_same(run_lowered("cpu", lowered, *args), jax.jit(fn)(*args))


@pytest.mark.parametrize("program", sorted(PROGRAMS))
def test_lower_from_specs_matches_jax_jit(program):
    fn, make_args = PROGRAMS[program]
    args = make_args()
    specs = tree_util.tree_map(lambda a: aotkit.ShapeDtype(a.shape, a.dtype), args)
    lowered = aotkit.lower(fn, *specs, frontend="jax")
    assert lowered.in_specs == (specs, {})
    assert_same(run_lowered("cpu", lowered, *args), jax.jit(fn)(*args))


@pytest.mark.parametrize("program", sorted(PROGRAMS))
def test_jit_frontend_jax_matches_jax_jit(program):
    fn, make_args = PROGRAMS[program]
    args = make_args()
    jitted = aotkit.jit(fn, frontend="jax")
    assert_same(tree_util.tree_map(np.asarray, jitted(*args)), jax.jit(fn)(*args))
    jitted(*args)
    assert jitted.cache_info()[:3] == (1, 1, 1)  # traces, lowerings, compiles


@pytest.mark.parametrize("backend", PEERS)
@pytest.mark.parametrize("program", sorted(PROGRAMS))
def test_peer_backends_agree(program, backend):
    fn, make_args = PROGRAMS[program]
    args = make_args()
    lowered = aotkit.lower(fn, *args, frontend="jax")
    assert_same(run_lowered(backend, lowered, *args), jax.jit(fn)(*args), rtol=1e-4,
                atol=1e-5)  # fmt: skip


def test_jit_lower_compile_then_call_is_one_compile():
    def f(x):
        return jax.nn.sigmoid(x) * 2

    jitted = aotkit.jit(f, frontend="jax")
    x = normal(5)
    compiled = jitted.lower(aotkit.ShapeDtype((5,), np.float32)).compile()
    assert_same(np.asarray(compiled(x)), jax.jit(f)(x))
    assert_same(np.asarray(jitted(x)), jax.jit(f)(x))
    assert jitted.cache_info()[:3] == (1, 1, 1)


def test_jit_statics_and_donation():
    def sgd(params, grads, lr):
        return jax.tree_util.tree_map(lambda p, g: p - lr * g, params, grads)

    params = {"w": normal(3, 2), "b": normal(2)}
    grads = {"w": normal(3, 2), "b": normal(2)}
    jitted = aotkit.jit(sgd, static_argnums=2, donate_argnums=0, frontend="jax")
    assert jitted.lower(params, grads, 0.5).donated == (True, True, False, False)
    want = params
    got = jitted(params, grads, 0.5)
    for _ in range(2):  # device arrays from the last call are donated to the next
        want = jax.jit(sgd, static_argnums=2)(want, grads, 0.5)
        got = jitted(got, grads, 0.5)
    assert_same(
        tree_util.tree_map(np.asarray, got), jax.jit(sgd, static_argnums=2)(want, grads, 0.5)
    )


def test_linalg_custom_calls_run_and_lose_their_sharding_rules():
    def solve_and_eig(a, b):
        return jnp.linalg.solve(a, b), jnp.linalg.eigh(a @ a.T)[0]

    a = normal(4, 4) + 4 * np.eye(4, dtype=np.float32)
    b = normal(4, 2)
    lowered = aotkit.lower(solve_and_eig, a, b, frontend="jax")
    assert "lapack_sgetrf_ffi" in lowered.as_text() and "sdy." not in lowered.as_text()
    assert_same(run_lowered("cpu", lowered, a, b), jax.jit(solve_and_eig)(a, b), rtol=1e-4,
                atol=1e-5)  # fmt: skip


def test_scan_stays_one_while_loop():
    lowered = aotkit.lower(rnn, *PROGRAMS["scan"][1](), frontend="jax")
    assert lowered.as_text().count("stablehlo.while") == 1


# --- Calling convention: pytrees, statics, unused arguments, donation -----------------------


def with_kwargs(x, n, *, table, unused):
    return {"y": x**n + table["b"], "n": jnp.asarray(n)}


def test_statics_and_keyword_pytrees():
    x, table = normal(3), {"b": normal(3)}
    unused = np.zeros(2, np.int32)
    lowered = lower_jax(
        with_kwargs, (x, 3), {"table": table, "unused": unused}, static_argnums=(1,)
    )
    assert lowered.in_tree == tree_util.tree_structure(((x,), {"table": table, "unused": 0}))
    # The unused argument stays: one @main argument per input leaf, as for traced functions.
    assert [str(s) for s in lowered.flat_in_specs] == ["f32[3]", "f32[3]", "i32[2]"]
    got = run_lowered("cpu", lowered, x, table=table, unused=unused)
    want = jax.jit(with_kwargs, static_argnums=1)(x, 3, table=table, unused=unused)
    assert_same(got, want)


def test_static_argnames():
    lowered = lower_jax(with_kwargs, (normal(3),), {"n": 2, "table": {"b": normal(3)}, "unused": 0},
                        static_argnames=("n",))  # fmt: skip
    assert lowered.in_tree.num_leaves == 3


def test_python_scalar_is_weak_float32():
    lowered = aotkit.lower(lambda x, s: x * s, normal(3), 2.0, frontend="jax")
    assert [str(s) for s in lowered.flat_in_specs] == ["f32[3]", "f32[]"]


def test_donation_carries_over():
    def step(state, grad):
        return state - 0.1 * grad

    lowered = lower_jax(step, (normal(4), normal(4)), {}, donate_argnums=(0,))
    assert lowered.donated == (True, False)
    assert "tf.aliasing_output = 0" in lowered.as_text()


def test_already_jitted_function_keeps_its_statics():
    jitted = jax.jit(lambda x, n: x * n, static_argnums=1)
    lowered = aotkit.lower(jitted, normal(3), 4, frontend="jax")
    assert [str(s) for s in lowered.flat_in_specs] == ["f32[3]"]
    assert "stablehlo.multiply" in lowered.as_text()


def test_module_is_clean_for_backends():
    text = aotkit.lower(mlp, mlp_params(), normal(2, 16), frontend="jax").as_text()
    assert "func.func public @main" in text
    assert "mhlo.sharding" not in text and "sdy." not in text


def test_debug_info_keeps_jax_locations():
    text = aotkit.lower(mlp, mlp_params(), normal(2, 16), frontend="jax").as_text(debug_info=True)
    assert "test_jax_frontend.py" in text
    # Only the user's frames: JAX is told to skip aotkit's own files.
    assert "aotkit/frontends" not in text and "aotkit/api.py" not in text


def test_pipeline_none_and_dump_dir(tmp_path):
    from aotkit.api import lower_function

    lowered = lower_function(
        mlp, (mlp_params(), normal(2, 16)), {}, pipeline="none", dump_dir=tmp_path,
        frontend="jax",
    )  # fmt: skip
    assert lowered.pipeline == "none"
    assert any(p.name.endswith("final.mlir") for p in tmp_path.iterdir())


# --- Errors ---------------------------------------------------------------------------------


def test_float64_without_x64_is_an_error():
    with pytest.raises(ValueError, match=(
        r"^lower: lambda \(frontend='jax'\): argument args\[0\] is float64 but JAX lowered "
        r"it as float32 because jax_enable_x64 is off; enable it with "
        r"jax.config.update\('jax_enable_x64', True\), or pass float32$"
    )):  # fmt: skip
        aotkit.lower(lambda x: x + 1, aotkit.spec("f64[3]"), frontend="jax")


def test_float64_with_x64_is_kept():
    with jax.enable_x64(True):
        x = np.arange(3.0)
        lowered = aotkit.lower(lambda x: jnp.sin(x), x, frontend="jax")
        assert [str(s) for s in lowered.flat_out_specs] == ["f64[3]"]
        assert_same(run_lowered("cpu", lowered, x), np.sin(x))


def test_host_callback_is_an_error():
    def noisy(x):
        jax.debug.print("x = {}", x)
        return x * 2

    line = noisy.__code__.co_firstlineno + 1
    with pytest.raises(aotkit.UnsupportedModuleError, match=(
        r"^lower: noisy \(frontend='jax'\): custom call @xla_ffi_python_cpu_callback at "
        rf".*test_jax_frontend.py:{line} calls back into Python \(jax.debug.print, "
        r"jax.pure_callback or io_callback\); an aotkit executable cannot call Python: remove "
        r"the callback$"
    )) as raised:  # fmt: skip
        aotkit.lower(noisy, normal(3), frontend="jax")
    assert raised.value.op == "stablehlo.custom_call @xla_ffi_python_cpu_callback"
    assert raised.value.location.endswith(f"test_jax_frontend.py:{line}")


def test_sharding_constraint_over_a_one_device_mesh_is_a_one_device_sharded_program():
    # JAX lowers a constraint over a one-device mesh into a one-partition module with the
    # constraint in it: aotkit keeps it as a sharded program on that mesh, as jax.jit runs it.
    from jax.sharding import AxisType, NamedSharding, PartitionSpec

    mesh = jax.make_mesh((1,), ("x",), axis_types=(AxisType.Auto,))

    def constrained(x):
        return jax.lax.with_sharding_constraint(x * 2, NamedSharding(mesh, PartitionSpec("x")))

    lowered = aotkit.lower(constrained, normal(4), frontend="jax")
    assert "sdy.sharding_constraint" in lowered.as_text()
    assert lowered.mesh.axis_names == ("x",) and lowered.mesh.size == 1
    x = np.arange(4, dtype=np.float32)
    got = lowered.compile()(x)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(np.asarray(got), np.asarray(jax.jit(constrained)(x)))


def test_sharding_constraint_over_a_bigger_mesh_in_a_one_device_module_is_an_error():
    text = (
        "module @m attributes {mhlo.num_partitions = 1 : i32} {\n"
        '  sdy.mesh @mesh = <["x"=2]>\n'
        "  func.func public @main(%a: tensor<4xf32>) -> tensor<4xf32> {\n"
        '    %0 = sdy.sharding_constraint %a <@mesh, [{"x"}]> : tensor<4xf32>\n'
        "    return %0 : tensor<4xf32>\n"
        "  }\n"
        "}\n"
    )
    with pytest.raises(ValueError, match=(
        r"^load_module: <bytes>: the module shards its computation "
        r"\(sdy.sharding_constraint\) but is lowered for one device \(mhlo.num_partitions = "
        r"1\); lower or export it for the mesh's devices, or remove sharding constraints and "
        r"shard_map$"
    )):  # fmt: skip
        aotkit.load_module(text.encode())


def test_module_in_a_dialect_aotkit_does_not_load():
    from jaxlib.mlir import ir

    from aotkit.frontends.jax import _import_module

    foreign = ir.Context()
    foreign.allow_unregistered_dialects = True
    with foreign, ir.Location.unknown():
        module = ir.Module.parse('"foo.bar"() : () -> ()')
    with pytest.raises(ValueError, match=(
        r"^W: aotkit's MLIR context cannot read JAX's module: dialect 'foo' is unknown; JAX "
        r"used a dialect aotkit does not load: please report this with the function$"
    )):  # fmt: skip
        _import_module(module, "W")


def test_jitted_without_keep_unused_is_an_error_when_jax_hides_its_options(monkeypatch):
    # With its options known, a jitted function is jitted again (with aotkit's keep_unused);
    # with the arguments jax.jit kept known, the pruned ones are put back; a jax that hides
    # both leaves this error.
    from aotkit import _compat

    monkeypatch.setattr(_compat, "jit_options", lambda fn: None)
    monkeypatch.setattr(_compat, "kept_arguments", lambda lowered: None)
    jitted = jax.jit(lambda x, y: x * 2)
    with pytest.raises(ValueError, match=(
        r"^lower: lambda \(frontend='jax'\): JAX's module takes 1 arguments for 2 input "
        r"leaves \(jax.jit drops unused arguments unless keep_unused=True; effects such as "
        r"ordered io_callback add tokens\); pass the plain function or "
        r"jax.jit\(fn, keep_unused=True\), and no effects$"
    )):  # fmt: skip
        aotkit.lower(jitted, normal(3), normal(3), frontend="jax")


def test_jitted_whose_options_jax_hides_gets_its_pruned_arguments_back(monkeypatch):
    from aotkit import _compat

    monkeypatch.setattr(_compat, "jit_options", lambda fn: None)
    jitted = jax.jit(lambda x, y: x * 2)
    x, y = normal(3), normal(3)
    lowered = aotkit.lower(jitted, x, y, frontend="jax")
    assert [s.shape for s in lowered.in_specs[0]] == [(3,), (3,)]
    assert_same(run_lowered("cpu", lowered, x, y), jitted(x, y), rtol=0, atol=0)


# --- jax.jit's module: unused arguments and dead loop carries pruned (issue 44) ---------------


def dead_carry_loop(x, y, unused):
    """`y`'s carry is dead (the result does not use it) and `unused` is not used at all."""

    def body(i, carry):
        a, b, c = carry
        return a + x, b * 2.0, c + 1.0

    a, _, _ = jax.lax.fori_loop(0, 3, body, (x, y, x))
    return a


def test_module_is_jax_jits_with_unused_arguments_pruned():
    args = (np.float32(1.5), np.float32(2.0), np.float32(3.0))
    jax_text = jax.jit(dead_carry_loop).lower(*args).as_text()
    assert "@main(%arg0: tensor<f32>) ->" in jax_text  # JAX pruned y and unused
    lowered = aotkit.lower(dead_carry_loop, *args, frontend="jax")
    # jax.jit's module, bit for bit, but for its name.
    want = jax_text.replace("module @jit_dead_carry_loop", "module @dead_carry_loop")
    assert lowered.as_text() == want
    assert "stablehlo.while(%iterArg = %arg0, %iterArg_0 = %c, %iterArg_1 = %arg0)" in want
    assert lowered.in_specs[0] == (aotkit.spec("f32[]"),) * 3  # the call takes every leaf
    compiled = lowered.compile()
    assert_same(compiled(*args), jax.jit(dead_carry_loop)(*args), rtol=0, atol=0)
    jitted = aotkit.jit(dead_carry_loop, frontend="jax")
    assert_same(jitted(*args), jax.jit(dead_carry_loop)(*args), rtol=0, atol=0)


def test_keep_unused_gives_jax_jits_module_with_keep_unused():
    args = (np.float32(1.5), np.float32(2.0), np.float32(3.0))
    kept = jax.jit(dead_carry_loop, keep_unused=True).lower(*args).as_text()
    lowered = aotkit.lower(dead_carry_loop, *args, frontend="jax", keep_unused=True)
    assert lowered.as_text() == kept.replace(
        "module @jit_dead_carry_loop", "module @dead_carry_loop"
    )
    assert "%0:6 = stablehlo.while" in kept  # the dead carry (and the loop bounds) kept
    jitted = aotkit.jit(dead_carry_loop, frontend="jax", keep_unused=True)
    assert_same(jitted(*args), jax.jit(dead_carry_loop)(*args), rtol=0, atol=0)


def test_pruned_argument_in_the_middle_keeps_its_place():
    def f(x, unused, y):
        return x * y

    x, unused, y = normal(3), normal(2, 2), normal(3)
    lowered = aotkit.lower(f, x, unused, y, frontend="jax")
    assert "@main(%arg0: tensor<3xf32>, %arg1: tensor<3xf32>)" in lowered.as_text()  # JAX's
    assert "stablehlo.multiply %arg0, %arg1" in lowered.as_text()
    compiled = lowered.compile()
    # The executable is jax.jit's: it takes no parameter for the pruned leaf, which a call
    # still passes, checked against its spec and never transferred.
    want = jax.jit(f).lower(x, unused, y).compile()
    assert "entry_computation_layout={(f32[3]{0}, f32[3]{0})->f32[3]{0}}" in compiled.as_text()
    assert (
        compiled.memory_analysis().argument_size_in_bytes
        == want.memory_analysis().argument_size_in_bytes
        == 24
    )
    assert_same(compiled(x, unused, y), want(x, unused, y), rtol=0, atol=0)
    assert_same(compiled(x, jax.device_put(unused), y), want(x, unused, y), rtol=0, atol=0)
    with pytest.raises(
        TypeError,
        match=r"^Compiled 'f': argument unused expected f32\[2,2\], got f32\[3\]; pass an array "
        r"of the compiled shape and dtype, or lower and compile again for the new one$",
    ):
        compiled(x, normal(3), y)  # a pruned leaf is checked as any other
    with pytest.raises(
        TypeError, match=r"^Compiled 'f': argument unused expected f32\[2,2\], got i32\[2,2\]"
    ):
        compiled(x, jax.device_put(np.zeros((2, 2), np.int32)), y)
    with pytest.raises(
        TypeError, match=r"^Compiled 'f': argument y expected f32\[3\], got f32\[4\]"
    ):
        compiled(x, unused, normal(4))  # a kept leaf after it: named as itself


def test_a_pruned_program_donates_saves_and_transforms_as_any_other(tmp_path):
    def f(unused, x, y):
        return x * y + 1.0

    unused, x, y = normal(2), normal(3), normal(3)
    jitted = aotkit.jit(f, frontend="jax", donate_argnums=(0, 2))
    lowered = jitted.lower(unused, x, y)
    assert "@main(%arg0: tensor<3xf32>, %arg1: tensor<3xf32> {tf.aliasing_output = 0" in (
        lowered.as_text()
    )  # y's donation on its own argument; the pruned leaf has none
    assert lowered.donated == (False, False, True)
    compiled = lowered.compile()
    want = np.asarray(jax.jit(f)(unused, x, y))
    assert_same(compiled(unused, x, jax.device_put(y)), want, rtol=0, atol=0)
    path = tmp_path / "f.aotx"
    compiled.save(path)
    assert_same(aotkit.load(path)(unused, x, y), want, rtol=0, atol=0)
    g = (
        aotkit.jit(lambda u, a, b: f(u, a, b).sum(), frontend="jax")
        .lower(unused, x, y)
        .grad(argnums=(0, 1))
    )
    got = g.compile()(unused, x, y)
    jax_grads = jax.grad(lambda u, a, b: f(u, a, b).sum(), argnums=(0, 1))(unused, x, y)
    for a, b in zip(got, jax_grads, strict=True):
        assert_same(a, b, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("how", ["executable", "recompile", "portable_only"])
def test_a_pruned_program_loads_taking_every_leaf(tmp_path, how):
    """The artifact's executable and portable module take no argument for the pruned leaf
    (the header's `pruned`, format version 4); loaded either way, the Compiled takes every
    leaf and checks the pruned one, as the saved one did."""
    from aotkit import artifacts

    def f(x, unused, y):
        return jnp.tanh(x) @ y

    x, unused, y = normal(2, 3), normal(5), normal(3, 4)
    compiled = aotkit.jit(f, frontend="jax").lower(x, unused, y).compile()
    path = tmp_path / "f.aotx"
    compiled.save(path)
    data = path.read_bytes()
    assert int.from_bytes(data[8:12], "little") == 4
    artifact = artifacts.unpack(data)
    assert artifact.pruned == (1,) and artifact.header["in_specs"] == [
        "f32[2,3]",
        "f32[5]",
        "f32[3,4]",
    ]
    portable = aotkit.load_module(artifact.section(artifacts.PORTABLE)).as_text()
    assert "@main(%arg0: tensor<2x3xf32>, %arg1: tensor<3x4xf32>)" in portable
    options = {
        "executable": {},
        "recompile": {"recompile": True},
        "portable_only": {"portable_only": True},
    }[how]
    loaded = aotkit.load(path, **options)
    assert loaded.origin == ("artifact" if how == "executable" else "recompiled")
    assert repr(loaded) == repr(compiled)
    assert_same(loaded(x, unused, y), compiled(x, unused, y), rtol=0, atol=0)
    assert (
        loaded.memory_analysis().argument_size_in_bytes
        == compiled.memory_analysis().argument_size_in_bytes
        == (6 + 12) * 4
    )
    with pytest.raises(
        TypeError, match=r"^Compiled 'f': argument unused expected f32\[5\], got f32\[4\]"
    ):
        loaded(x, normal(4), y)
    loaded.save(tmp_path / "again.aotx")  # a loaded one saves as it was loaded
    assert artifacts.unpack((tmp_path / "again.aotx").read_bytes()).pruned == (1,)


def test_a_pruned_program_runs_on_the_native_dispatch():
    """The C++ dispatch caches the call with jax.jit's kept-argument mask: after the first
    call no call enters Python."""
    from aotkit.backends import base

    def f(x, unused, y):
        return x * y

    x, unused = jax.device_put(normal(3)), normal(2, 2)
    compiled = aotkit.jit(f, frontend="jax").lower(x, unused, x).compile()
    assert isinstance(compiled._executable, base.PrunedExecutable)
    calls = []
    run = compiled._executable._run
    compiled._executable._run = lambda leaves: calls.append(len(leaves)) or run(leaves)
    for _ in range(5):
        out = compiled(x, unused, x)
    assert_same(out, np.asarray(x) * np.asarray(x), rtol=0, atol=0)
    assert calls == [2]  # the checked call once, with the two kept leaves


def test_a_pruned_executable_must_fit_its_leaves():
    from aotkit.backends import base

    def f(x, unused):
        return x + 1.0

    compiled = aotkit.jit(f, frontend="jax").lower(normal(3), normal(2)).compile()
    inner = compiled._executable.inner  # takes x only
    with pytest.raises(
        ValueError,
        match=r"^executable 'f' takes 1 arguments, but 3 leaves less pruned \[1\] are 2$",
    ):
        base.PrunedExecutable(inner, (aotkit.spec("f32[3]"),) * 3, (1,))
    with pytest.raises(ValueError, match=r"^executable 'f' takes 1 arguments, but 2 leaves less"):
        base.PrunedExecutable(inner, (aotkit.spec("f32[3]"),) * 2, (5,))


def test_keep_unused_must_be_a_bool():
    with pytest.raises(TypeError, match=r"^jit\(mlp\): keep_unused must be True or False, got 1$"):
        aotkit.jit(mlp, frontend="jax", keep_unused=1)


def test_unknown_frontend_is_an_error():
    with pytest.raises(ValueError, match=(
        r"^lower: unknown frontend 'torch'; expected one of aotkit, jax, auto$"
    )):  # fmt: skip
        aotkit.lower(mlp, mlp_params(), normal(2, 16), frontend="torch")


# --- frontend="auto" ------------------------------------------------------------------------


def uses_anp(x):
    return anp.sin(x)


def uses_numpy(x):
    return np.sin(x)


def _module_with(source: str, name: str) -> types.ModuleType:
    module = types.ModuleType(name)
    sys.modules[name] = module
    exec(compile(source, f"<{name}>", "exec"), module.__dict__)
    return module


@pytest.mark.parametrize(
    "fn, name, reason",
    [
        (mlp, "jax", "mlp uses jax from JAX"),
        (transformer_block, "jax", "transformer_block uses jax, jnp from JAX"),
        (uses_anp, "aotkit", "uses_anp uses anp from aotkit"),
        (jax.jit(uses_numpy), "jax", "uses_numpy is a JAX-transformed function"),
    ],
)
def test_auto_choice(fn, name, reason):
    assert frontends.choose(fn) == frontends.Choice(name, reason)


def test_auto_looks_at_module_imports_when_the_function_only_calls_helpers():
    module = _module_with(
        "import jax.numpy as jnp\ndef helper(x):\n    return jnp.cos(x)\n"
        "def f(x):\n    return helper(x) + 1\n",
        "_aotkit_test_jax_model",
    )
    choice = frontends.choose(module.f)
    assert choice == frontends.Choice(
        "jax", "module _aotkit_test_jax_model imports jnp from JAX and nothing from aotkit"
    )


def test_auto_sees_closure_variables():
    def make():
        from jax import numpy as jax_numpy

        def f(x):
            return jax_numpy.cos(x)

        return f

    assert frontends.choose(make()) == frontends.Choice(
        "jax", "test_auto_sees_closure_variables.<locals>.make.<locals>.f uses jax_numpy from JAX"
    )


def test_auto_sees_a_model_of_a_jax_library_in_a_module_that_imports_aotkit():
    # A Flax model is an instance of the user's class whose base is flax's Module; the module
    # defining it imports aotkit too, which alone would pick the tracer.
    module = _module_with(
        "import aotkit\nclass Module:\n    pass\nModule.__module__ = 'flax.linen.module'\n"
        "class Model(Module):\n    pass\nMODEL = Model()\n"
        "f = lambda params, x: MODEL.apply(params, x)\n",
        "_aotkit_test_flax_user",
    )
    assert frontends.choose(module.f) == frontends.Choice("jax", "<lambda> uses MODEL from JAX")


def test_auto_defaults_to_the_tracer_for_numpy_code():
    module = _module_with(
        "import numpy as np\ndef f(x):\n    return np.sin(x)\n", "_aotkit_test_numpy_model"
    )
    choice = frontends.choose(module.f)
    assert choice == frontends.Choice(
        "aotkit", "f uses neither JAX nor aotkit directly (NumPy code)"
    )


def test_auto_reads_a_modules_globals_at_every_choice():
    # What a value comes from is remembered by (its module, its type), never by the value
    # or the name: a global rebound to another kind of value changes the choice.
    name = "_aotkit_test_rebound_globals"
    module = _module_with(
        "class Plain:\n    pass\nMODEL = Plain()\n"
        "def helper(x):\n    return x\ndef f(x):\n    return helper(x)\n",
        name,
    )
    base = type("Module", (), {"__module__": "flax.linen.module"})
    model = type("Model", (base,), {"__module__": name})()  # the module's, as Plain() is
    numpy_code = frontends.Choice("aotkit", "f uses neither JAX nor aotkit directly (NumPy code)")
    assert frontends.choose(module.f) == numpy_code
    module.MODEL = model
    assert frontends.choose(module.f) == frontends.Choice(
        "jax", f"module {name} imports MODEL from JAX and nothing from aotkit"
    )
    module.MODEL = module.Plain()
    assert frontends.choose(module.f) == numpy_code
    module.__dunder__ = jnp  # a module's dunder names are no imports
    assert frontends.choose(module.f) == numpy_code
    module.anp = anp
    assert frontends.choose(module.f) == frontends.Choice(
        "aotkit", f"module {name} imports anp from aotkit"
    )


def test_auto_lowers_both_kinds():
    x = normal(3)
    assert aotkit.lower(mlp, mlp_params(), normal(2, 16), frontend="auto").frontend == "jax"
    lowered = aotkit.lower(uses_anp, x, frontend="auto")
    assert lowered.frontend == "aotkit"
    assert_same(run_lowered("cpu", lowered, x), np.sin(x))


# --- CLI: --frontend ------------------------------------------------------------------------

JAX_MODEL = """
import jax
import jax.numpy as jnp


def forward(x, w):
    return jax.nn.softmax(jnp.tanh(x @ w))
"""


@pytest.fixture
def jax_model(tmp_path):
    path = tmp_path / "jax_model.py"
    path.write_text(JAX_MODEL)
    return path


def test_cli_auto_picks_jax_and_says_why(jax_model, capsys):
    from aotkit import cli

    code = cli.main(["lower", f"{jax_model}:forward", "--shapes", "f32[2,3]", "f32[3,4]", "-v"])
    out, err = capsys.readouterr()
    assert code == 0
    assert f"aotkit: front end for {jax_model}:forward: jax (forward uses jax, jnp from JAX)" in err
    want = aotkit.lower(_import(jax_model).forward, aotkit.spec("f32[2,3]"),
                        aotkit.spec("f32[3,4]"), frontend="jax").as_text()  # fmt: skip
    assert out == want


def test_cli_frontend_aotkit_on_jax_code_is_a_user_error(jax_model, capsys):
    from aotkit import cli

    code = cli.main(["lower", f"{jax_model}:forward", "--shapes", "f32[2,3]", "f32[3,4]",
                     "--frontend", "aotkit"])  # fmt: skip
    _, err = capsys.readouterr()
    assert code == 1
    assert (
        err.strip()
        .splitlines()[-1]
        .startswith(f"aotkit lower: error: lowering {jax_model}:forward failed: TypeError:")
    )


def test_cli_run_with_jax_frontend_matches_jax(jax_model, tmp_path, capsys):
    from aotkit import cli

    x, w = normal(2, 3), normal(3, 4)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "w.npy", w)
    code = cli.main(["run", f"{jax_model}:forward", "--frontend", "jax", "-q",
                     "--inputs", str(tmp_path / "x.npy"), str(tmp_path / "w.npy")])  # fmt: skip
    out, _ = capsys.readouterr()
    assert code == 0
    header, *rows = out.strip().splitlines()
    assert header == "out: f32[2,4]"
    printed = np.array([float(v) for v in re.findall(r"[-+0-9.e]+", " ".join(rows))])
    want = np.asarray(jax.jit(_import(jax_model).forward)(x, w)).ravel()
    np.testing.assert_allclose(printed, want, rtol=1e-6)


def _import(path):
    import importlib.util

    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_auto_does_not_take_jax_tree_util_for_a_jax_program():
    from jax import tree_util as tu

    from aotkit import frontends

    def f(x):
        return tu.tree_map(lambda v: v * 2, {"a": x})["a"]

    choice = frontends.choose(f)
    assert choice.name == "aotkit", choice


# --- Typed PRNG keys -----------------------------------------------------------------------
# A key array (`jax.random.key`) is one leaf to the user and its uint32 data to the module;
# the oracle is jax.jit of the same function: the same key dtypes and shapes, the same bits.

KEY_IMPLS = ["threefry2x32", "rbg", "unsafe_rbg"]


def _keys_split(k):
    return jax.random.split(k, 3)


def _keys_fold_in(k, data):
    return jax.random.fold_in(k, data)


def _keys_normal(k):
    return jax.random.normal(k, (4,))


def _keys_uniform(k):
    return jax.random.uniform(k, (2, 3), minval=-1.0, maxval=2.0)


def _keys_tree(state):
    k1, k2 = jax.random.split(state["key"])
    return {"key": k1, "noise": jax.random.normal(k2, (3,)) + state["x"]}, [state["key"]]


def assert_same_keys(got, want):
    """Same tree; key leaves are key arrays of the same dtype, shape and data; other leaves
    have the same dtype and bits."""
    assert tree_util.tree_structure(got) == tree_util.tree_structure(want)
    for g, w in zip(tree_util.tree_leaves(got), tree_util.tree_leaves(want), strict=True):
        assert (g.dtype, g.shape) == (w.dtype, w.shape)
        if jax.dtypes.issubdtype(w.dtype, jax.dtypes.prng_key):
            assert type(g) is type(w)
            g, w = jax.random.key_data(g), jax.random.key_data(w)
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w))


@pytest.mark.parametrize("impl", KEY_IMPLS)
@pytest.mark.parametrize(
    "fn, extra",
    [(_keys_split, ()), (_keys_fold_in, (np.uint32(7),)), (_keys_normal, ()), (_keys_uniform, ())],
    ids=["split", "fold_in", "normal", "uniform"],
)
def test_key_argument_matches_jax_jit(impl, fn, extra):
    key = jax.random.key(42, impl=impl)
    assert_same_keys(aotkit.jit(fn, frontend="jax")(key, *extra), jax.jit(fn)(key, *extra))


@pytest.mark.parametrize("impl", KEY_IMPLS)
def test_key_pytree_matches_jax_jit(impl):
    state = {"key": jax.random.key(3, impl=impl), "x": np.float32(0.5)}
    assert_same_keys(aotkit.jit(_keys_tree, frontend="jax")(state), jax.jit(_keys_tree)(state))


@pytest.mark.parametrize("impl", KEY_IMPLS)
def test_key_result_made_inside_matches_jax_jit(impl):
    def make(x):
        return jax.random.split(jax.random.key(0, impl=impl)), x + 1

    x = np.float32(1)
    jitted = aotkit.jit(make, frontend="jax")
    # Repeated calls: the later ones run on the dispatch cache, which keeps the key results.
    for _ in range(3):
        assert_same_keys(jitted(x), jax.jit(make)(x))
        assert_same_keys(jitted(jnp.float32(1)), jax.jit(make)(x))


def test_key_argument_repeated_calls_and_statics():
    key = jax.random.key(5)
    jitted = aotkit.jit(jax.random.split, frontend="jax", static_argnums=1)
    for _ in range(3):
        assert_same_keys(jitted(key, 4), jax.random.split(key, 4))
    plain = aotkit.jit(_keys_split, frontend="jax")
    for _ in range(3):
        assert_same_keys(plain(key), jax.jit(_keys_split)(key))


@pytest.mark.parametrize("impl", KEY_IMPLS)
def test_key_spec_lowers_and_compiles(impl):
    key = jax.random.key(1, impl=impl)
    spec = jax.ShapeDtypeStruct((), key.dtype)
    compiled = aotkit.jit(_keys_split, frontend="jax").lower(spec).compile()
    assert_same_keys(compiled(key), jax.jit(_keys_split)(key))
    assert compiled.partitioning is None


def test_key_stage_views_are_jax_ones():
    key = jax.random.key(0)
    jitted = aotkit.jit(_keys_tree, frontend="jax")
    state = {"key": key, "x": np.float32(0.5)}
    lowered = jitted.lower(state)
    want = jax.jit(_keys_tree).lower(state)

    def views(tree):
        return tree_util.tree_map(lambda s: (s.shape, s.dtype), tree)

    assert views(lowered.out_info) == views(want.out_info)
    assert views(lowered.in_avals) == views(want.in_avals)
    assert views(jitted.eval_shape(state)) == views(jax.eval_shape(_keys_tree, state))
    info = lowered.args_info[0][0]["key"]
    assert (info.shape, info.dtype, info.donated) == ((), key.dtype, False)
    compiled = lowered.compile()
    assert repr(compiled) == (
        "<Compiled _keys_tree(state['key']: key<fry>[], state['x']: f32[]) -> "
        "(out[0]['key']: key<fry>[], out[0]['noise']: f32[3], out[1][0]: key<fry>[]) on cpu>"
    )
    # The module's own calling convention: the keys' uint32 data.
    assert [str(s) for s in compiled.flat_in_specs] == ["u32[2]", "f32[]"]
    assert [str(s) for s in compiled.flat_out_specs] == ["u32[2]", "f32[3]", "u32[2]"]


def test_key_results_on_the_interpreter():
    key = jax.random.key(2)
    got = aotkit.jit(_keys_split, frontend="jax", backend="interpreter")(key)
    assert_same_keys(got, jax.jit(_keys_split)(key))


def test_key_argument_with_shardings_over_a_mesh():
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    mesh = Mesh(np.array(jax.devices()[:1]), ("x",))
    replicated = NamedSharding(mesh, PartitionSpec())
    keys = jax.random.split(jax.random.key(0), 4)
    fn = jax.vmap(_keys_normal)
    got = aotkit.jit(fn, frontend="jax", in_shardings=replicated)(keys)
    assert_same_keys(got, jax.jit(fn)(keys))


@pytest.mark.parametrize(
    "given, got",
    [
        (lambda: jax.random.key_data(jax.random.key(0)), "u32[2]"),
        (lambda: jax.random.key(0, impl="rbg"), "key<rbg>[]"),
        (lambda: jax.random.split(jax.random.key(0)), "key<fry>[2]"),
    ],
    ids=["raw-data", "other-impl", "other-shape"],
)
def test_key_argument_mismatch_says_what_was_expected(given, got):
    compiled = aotkit.jit(_keys_split, frontend="jax").lower(jax.random.key(0)).compile()
    message = (
        f"Compiled '_keys_split': argument k expected the typed PRNG key array "
        f"key<fry>[], got {got}; pass a key array of that shape and implementation "
        "(jax.random.key, or jax.random.wrap_key_data of its data)"
    )
    with pytest.raises(TypeError, match=f"^{re.escape(message)}$"):
        compiled(given())


def test_key_argument_to_aotkits_tracer_is_carried_through():
    """aotkit's tracer takes typed keys as JAX does (tests/transforms/test_typed_keys.py)."""

    def ident(k):
        return k

    key = jax.random.key(3, impl="rbg")
    assert_same_keys(aotkit.jit(ident, frontend="aotkit")(key), key)


def test_key_calls_take_the_native_fast_path(monkeypatch):
    """Once a signature with typed keys ran, its calls stay in jaxlib's C++ dispatch (the
    key's data is the cached argument), as jax.jit's do: the checked Python call is not
    run again, and the results are still keys."""
    ran = []
    original = aotkit.stages.Compiled._python_call

    def counted(self, *args, **kwargs):
        ran.append(1)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(aotkit.stages.Compiled, "_python_call", counted)
    key, x = jax.random.key(6), jax.device_put(np.arange(3, dtype=np.float32))
    jitted = aotkit.jit(_keys_fold_in_and_add, frontend="jax")
    compiled = jitted.lower(key, x).compile()
    for fn in (jitted, compiled):
        ran.clear()
        for _ in range(5):
            assert_same_keys(fn(key, x), jax.jit(_keys_fold_in_and_add)(key, x))
        assert len(ran) == 1


def _keys_fold_in_and_add(k, x):
    return jax.random.fold_in(k, 1), x + 1


def test_symbolic_specs_are_refused_with_the_ways_that_take_them():
    def f(x, y):
        return jnp.sin(y).sum() + x

    with pytest.raises(ValueError, match=(
        r"^lower: f \(frontend='jax'\): argument y is f32\[b,4\], with symbolic dimensions, "
        r"which JAX's lowering here does not take; trace the function with aotkit "
        r"\(frontend='aotkit', for aotkit.numpy code\), or export it with jax.export "
        r"\(jax.export.symbolic_shape\) and load it with "
        r"aotkit.load_module\(exported.serialize\(\)\)$"
    )):  # fmt: skip
        aotkit.jit(f, frontend="jax").lower(np.float32(1), aotkit.spec("f32[b,4]"))
    # The second way works: the same function exported with a symbolic batch.
    exported = jax.export.export(jax.jit(f))(
        jax.ShapeDtypeStruct((), np.float32),
        jax.ShapeDtypeStruct(jax.export.symbolic_shape("b, 4"), np.float32),
    )
    compiled = aotkit.load_module(exported.serialize()).compile()
    y = np.arange(12, dtype=np.float32).reshape(3, 4)
    np.testing.assert_allclose(
        np.asarray(compiled(np.float32(1), y)), np.sin(y).sum() + 1, rtol=1e-6
    )


def test_an_unused_typed_key_is_pruned_as_jax_prunes_it():
    # (It was refused: a pruned key leaf had no argument type to be put back with.)
    def f(key, x):
        return x * 2.0

    key, x = jax.random.key(0), normal(3)
    lowered = aotkit.lower(f, key, x, frontend="jax")
    assert "@main(%arg0: tensor<3xf32>)" in lowered.as_text()
    compiled = lowered.compile()
    want = np.asarray(jax.jit(f)(key, x))
    assert_same(compiled(key, x), want, rtol=0, atol=0)
    assert_same(aotkit.load(compiled.serialize())(key, x), want, rtol=0, atol=0)
    grad = aotkit.jit(lambda k, a: f(k, a).sum(), frontend="jax").lower(key, x).grad(argnums=1)
    assert_same(grad.compile()(key, x), np.full(3, 2.0, np.float32), rtol=0, atol=0)


def test_unused_arguments_go_out_and_back_with_their_attributes():
    from jaxlib.mlir import ir

    from aotkit import _context, dtypes, modules
    from tests.backends import modules as hand

    t = "tensor<3xf32>"
    body = f"%0 = stablehlo.add %a0, %a2 : {t}\nreturn %0 : {t}"
    module = hand.module("f", [t, "tensor<2xi32>", t], [t], body)
    with _context.of(module), ir.Location.unknown():
        donor = ir.DictAttr.get({"jax.buffer_donor": ir.BoolAttr.get(True)})
        empty = ir.DictAttr.get({})
        main = modules.main_function(module)
        main.attributes["arg_attrs"] = ir.ArrayAttr.get([donor, empty, empty])
        with pytest.raises(ValueError, match=r"^@main's argument 0 is used: it cannot be erased$"):
            modules.erase_unused_arguments(module, [0, 1])
        modules.erase_unused_arguments(module, [1])
        text = str(module)
        assert f"(%arg0: {t} {{jax.buffer_donor = true}}, %arg1: {t})" in text
        modules.insert_unused_arguments(module, {1: dtypes.tensor_type((2,), np.dtype("int32"))})
        text = str(module)
    assert f"(%arg0: {t} {{jax.buffer_donor = true}}, %arg1: tensor<2xi32>, %arg2: {t})" in text
    assert "stablehlo.add %arg0, %arg2" in text
