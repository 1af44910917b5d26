"""Sharded programs on 8 CPU devices, checked against their oracles.

Each `check_*` function runs in a child process whose CPU backend has 8 devices
(tests/test_spmd_devices.py starts it with `--xla_force_host_platform_device_count=8`; the
test session's own process already has a one-device client). The oracles: the same
function compiled for one device (no shardings), and `jax.jit` of the same program with the
same shardings. A check raises (an assertion, or pytest.raises not matching) on failure.

Checks wait for each SPMD execution before starting the next: jaxlib 0.10.2's CPU client can
deadlock (and abort after 40 s) on back-to-back executions with collectives (docs/sharding.md,
Sharding), with jax.jit as with aotkit.
"""

from __future__ import annotations

import functools
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

import aotkit
import aotkit.numpy as anp
from aotkit import spmd

RTOL = 2e-5


def _mesh(**axes) -> Mesh:
    return aotkit.sharding.mesh(dict(axes))


def _close(got, want, rtol=RTOL, atol=1e-6):
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=rtol, atol=atol)


# --- the programs ---------------------------------------------------------------------------


def mlp_step(xp, params, x, y):
    """One SGD step of a 2-layer MLP with mean squared error; gradients written by hand, so
    one definition serves aotkit.numpy and jax.numpy."""
    w1, b1, w2, b2 = params
    a = xp.tanh(x @ w1 + b1)
    out = a @ w2 + b2
    diff = out - y
    loss = xp.mean(diff * diff)
    g_out = diff * (2.0 / diff.size)
    g_w2 = a.T @ g_out
    g_b2 = g_out.sum(0)
    g_h = (g_out @ w2.T) * (1.0 - a * a)
    g_w1 = x.T @ g_h
    g_b1 = g_h.sum(0)
    grads = (g_w1, g_b1, g_w2, g_b2)
    return tuple(p - 0.1 * g for p, g in zip(params, grads)), loss


def mlp_data(batch=32, d_in=16, hidden=32, d_out=8, seed=0):
    rng = np.random.default_rng(seed)

    def f32(*shape, scale=1.0):
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    params = (f32(d_in, hidden, scale=0.3), f32(hidden), f32(hidden, d_out, scale=0.3), f32(d_out))
    return params, f32(batch, d_in), f32(batch, d_out)


def _dp_shardings(mesh):
    replicated = NamedSharding(mesh, P())
    batch = NamedSharding(mesh, P("data"))
    return ((replicated,) * 4, batch, batch), ((replicated,) * 4, replicated)


def _jax_loss(params, x, y):
    w1, b1, w2, b2 = params
    out = jnp.tanh(x @ w1 + b1) @ w2 + b2
    return jnp.mean((out - y) ** 2)


def jax_grad_step(params, x, y):
    loss, grads = jax.value_and_grad(_jax_loss)(params, x, y)
    return tuple(p - 0.1 * g for p, g in zip(params, grads)), loss


# --- data parallel, tensor parallel, reshard ----------------------------------------------


def check_data_parallel_mlp_step_equals_one_device_and_jax():
    mesh = _mesh(data=8)
    params, x, y = mlp_data()
    ins, outs = _dp_shardings(mesh)
    step = functools.partial(mlp_step, anp)
    sharded = aotkit.jit(step, in_shardings=ins, out_shardings=outs)
    compiled = sharded.lower(params, x, y).compile()
    assert "all-reduce" in compiled.as_text()  # the gradients, summed over the batch shards
    got = jax.block_until_ready(compiled(params, x, y))  # one SPMD step at a time (see docs)
    _close(got, aotkit.jit(step)(params, x, y))
    want = jax.jit(functools.partial(mlp_step, jnp), in_shardings=ins, out_shardings=outs)(
        params, x, y
    )
    _close(got, want)
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        assert g.sharding.is_equivalent_to(w.sharding, g.ndim), (g.sharding, w.sharding)
    # Three steps, each feeding the last one's sharded params back in place.
    p_sharded, p_one = params, params
    for _ in range(3):
        p_sharded, loss = sharded(p_sharded, x, y)
        # Waits for each step: jaxlib 0.10.2's CPU client can deadlock on pipelined SPMD
        # steps with collectives (docs/sharding.md), in JAX as in aotkit.
        loss.block_until_ready()
        p_one, loss_one = aotkit.jit(step)(p_one, x, y)
    _close((p_sharded, loss), (p_one, loss_one), rtol=1e-4)


def check_data_parallel_adam_step_differentiated_by_aotkit_grad():
    """tests/transforms/test_training.py's step (an MLP, softmax cross-entropy, Adam; the
    gradient aotkit's own) with the batch sharded over 8 devices."""
    from tests.transforms import test_training as t

    mesh = _mesh(data=8)
    params, state = t.init()
    x, y = t.batch()
    replicated, batch = NamedSharding(mesh, P()), NamedSharding(mesh, P("data"))
    ins = (replicated, replicated, batch, batch)
    compiled = aotkit.jit(t.aotkit_step, in_shardings=ins).lower(params, state, x, y).compile()
    assert "all-reduce" in compiled.as_text()  # the gradients, summed over the batch shards
    one = aotkit.jit(t.aotkit_step)
    want = jax.jit(t.jax_step)
    got_p, got_s, want_p, want_s = params, state, params, state
    for _ in range(3):
        got_p, got_s, got_loss = jax.block_until_ready(compiled(got_p, got_s, x, y))
        one_p, _, one_loss = one(want_p, want_s, x, y)
        want_p, want_s, want_loss = want(want_p, want_s, x, y)
        _close((got_p, got_loss), (one_p, one_loss), rtol=1e-4, atol=1e-5)
        _close((got_p, got_loss), (want_p, want_loss), rtol=1e-4, atol=1e-5)


def check_data_parallel_step_from_the_jax_front_end():
    mesh = _mesh(data=8)
    params, x, y = mlp_data()
    ins, outs = _dp_shardings(mesh)
    sharded = aotkit.jit(jax_grad_step, in_shardings=ins, out_shardings=outs, frontend="jax")
    lowered = sharded.lower(params, x, y)
    assert '#sdy.sharding<@mesh, [{"data"}, {}]>' in lowered.as_text()
    compiled = lowered.compile()
    assert "all-reduce" in compiled.as_text()
    got = jax.block_until_ready(compiled(params, x, y))  # one SPMD step at a time (see docs)
    _close(got, jax.jit(jax_grad_step, in_shardings=ins, out_shardings=outs)(params, x, y))
    _close(got, aotkit.jit(jax_grad_step, frontend="jax")(params, x, y))


def two_layers(xp, x, w1, w2):
    return xp.tanh(x @ w1) @ w2


def check_tensor_parallel_matmul_equals_one_device_and_jax():
    mesh = _mesh(data=2, model=4)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((8, 16)).astype(np.float32)
    w1 = rng.standard_normal((16, 32)).astype(np.float32)
    w2 = rng.standard_normal((32, 12)).astype(np.float32)
    ins = (
        NamedSharding(mesh, P("data", None)),
        NamedSharding(mesh, P(None, "model")),  # columns of the first layer split
        NamedSharding(mesh, P("model", None)),  # rows of the second: a partial sum per device
    )
    out = NamedSharding(mesh, P("data", None))
    sharded = aotkit.jit(functools.partial(two_layers, anp), in_shardings=ins, out_shardings=out)
    lowered = sharded.lower(x, w1, w2)
    text = lowered.as_text()
    assert 'sdy.mesh @mesh = <["data"=2, "model"=4]>' in text
    assert '{sdy.sharding = #sdy.sharding<@mesh, [{}, {"model"}]>}' in text
    compiled = lowered.compile()
    assert re.search(r"all-reduce|reduce-scatter", compiled.as_text())
    # Each device holds a 16x8 block of w1 and an 8x12 block of w2, not the whole weights.
    assert "f32[16,8]" in compiled.as_text() and "f32[8,12]" in compiled.as_text()
    got = jax.block_until_ready(compiled(x, w1, w2))  # one SPMD step at a time (see docs)
    assert got.sharding == out
    _close(got, aotkit.jit(functools.partial(two_layers, anp))(x, w1, w2), rtol=1e-4)
    want = jax.jit(functools.partial(two_layers, jnp), in_shardings=ins, out_shardings=out)
    _close(got, want(x, w1, w2), rtol=1e-4, atol=1e-4)


def check_reshard_between_two_layouts():
    mesh = _mesh(data=4, model=2)
    x = np.arange(16 * 8, dtype=np.float32).reshape(16, 8)
    rows, cols = NamedSharding(mesh, P("data", None)), NamedSharding(mesh, P(None, "data"))
    compiled = aotkit.jit(lambda x: x * 2.0, in_shardings=rows, out_shardings=cols).lower(x)
    compiled = compiled.compile()
    assert re.search(r"all-to-all|collective-permute|all-gather", compiled.as_text())
    got = compiled(x)
    assert got.sharding == cols and compiled.out_shardings == cols
    np.testing.assert_array_equal(np.asarray(got), x * 2)
    # Each device holds the columns its 'data' coordinate names, whole rows of them.
    shard = got.addressable_shards[0]
    np.testing.assert_array_equal(np.asarray(shard.data), (x * 2)[shard.index])
    assert shard.data.shape == (16, 2)


def check_reshard_inside_with_a_constraint():
    mesh = _mesh(data=4, model=2)
    x = np.arange(16 * 8, dtype=np.float32).reshape(16, 8)

    def f(x):
        y = aotkit.sharding.constrain(anp.sin(x), P(None, ("data", "model")))
        return aotkit.sharding.constrain(y * 2, NamedSharding(mesh, P("model", "data")))

    rows = NamedSharding(mesh, P("data"))
    lowered = aotkit.jit(f, in_shardings=rows).lower(x)
    text = lowered.as_text()
    assert re.search(r'sdy.sharding_constraint %\d+ <@mesh, \[\{\}, \{"data", "model"\}\]>', text)
    assert re.search(r'sdy.sharding_constraint %\d+ <@mesh, \[\{"model"\}, \{"data"\}\]>', text)
    got = lowered.compile()(x)
    np.testing.assert_allclose(np.asarray(got), np.sin(x) * 2, rtol=1e-6)
    want = jax.jit(
        lambda x: jax.lax.with_sharding_constraint(
            jax.lax.with_sharding_constraint(
                jnp.sin(x), NamedSharding(mesh, P(None, ("data", "model")))
            )
            * 2,
            NamedSharding(mesh, P("model", "data")),
        ),
        in_shardings=rows,
    )(x)
    assert got.sharding.is_equivalent_to(want.sharding, 2), (got.sharding, want.sharding)


# --- uneven shapes ----------------------------------------------------------------------------


def check_uneven_argument_is_refused():
    mesh = _mesh(data=4)
    x = np.zeros((10, 3), np.float32)
    with pytest.raises(ValueError, match=re.escape(
        "trace(lambda): in_shardings for x is P('data',): dimension 0 of f32[10,3] "
        "(size 10) is split over 'data' (4 devices), which does not divide it; uneven shards "
        "are refused: pad the dimension to a multiple of 4 (e.g. 12) or split another dimension"
    )):  # fmt: skip
        aotkit.jit(lambda x: x + 1, in_shardings=NamedSharding(mesh, P("data"))).lower(x)


def check_uneven_result_is_refused():
    mesh = _mesh(data=2, model=4)
    x = np.zeros((8, 6), np.float32)
    with pytest.raises(ValueError, match=re.escape(
        "trace(lambda): out_shardings for result[1] is P(None, ('data', 'model')): dimension "
        "1 of f32[8,6] (size 6) is split over 'data' x 'model' (8 devices), which does not "
        "divide it; uneven shards are refused: pad the dimension to a multiple of 8 (e.g. 8) "
        "or split another dimension"
    )):  # fmt: skip
        aotkit.jit(
            lambda x: (x, x * 2),
            in_shardings=NamedSharding(mesh, P()),
            out_shardings=(None, NamedSharding(mesh, P(None, ("data", "model")))),
        ).lower(x)


def check_uneven_constraint_is_refused():
    mesh = _mesh(data=8)
    x = np.zeros((12,), np.float32)

    def f(x):
        return aotkit.sharding.constrain(x * 2, P("data"))

    with pytest.raises(ValueError, match=(
        r"^aotkit.sharding.constrain \(at .*spmd_checks.py:\d+\): the sharding is P\('data',\): "
        r"dimension 0 of f32\[12\] \(size 12\) is split over 'data' \(8 devices\), which does "
        r"not divide it; uneven shards are refused: pad the dimension to a multiple of 8 "
        r"\(e.g. 16\) or split another dimension$"
    )):  # fmt: skip
        aotkit.jit(f, in_shardings=NamedSharding(mesh, P())).lower(x)


def check_padded_argument_runs_and_equals_one_device():
    # What the refusal suggests: pad to a multiple of the device count, slice after.
    mesh = _mesh(data=4)
    x = np.arange(10, dtype=np.float32)
    padded = np.pad(x, (0, 2))
    got = aotkit.jit(anp.cumsum, in_shardings=NamedSharding(mesh, P("data")))(padded)
    np.testing.assert_allclose(np.asarray(got)[:10], np.cumsum(x))


# --- calling: NumPy, sharded jax.Arrays, errors, the fast path ---------------------------------


def check_call_takes_numpy_and_sharded_arrays_and_refuses_other_shardings():
    mesh = _mesh(data=4, model=2)
    x = np.arange(32, dtype=np.float32).reshape(8, 4)
    rows = NamedSharding(mesh, P("data"))
    compiled = aotkit.jit(lambda x: x.sum(1), in_shardings=rows).lower(x).compile()
    assert compiled.in_shardings == ((rows,), {})
    np.testing.assert_array_equal(np.asarray(compiled(x)), x.sum(1))
    np.testing.assert_array_equal(np.asarray(compiled(jax.device_put(x, rows))), x.sum(1))
    # An equivalent sharding (the same shards on the same devices) is used as it is.
    same = jax.device_put(x, NamedSharding(mesh, P("data", None)))
    np.testing.assert_array_equal(np.asarray(compiled(same)), x.sum(1))
    other = jax.device_put(x, NamedSharding(mesh, P("model")))
    with pytest.raises(ValueError, match=re.escape(
        "Compiled 'lambda': argument x is sharded as P('model',) on mesh ('data': 4, "
        "'model': 2), but the function was compiled for P('data',) on mesh ('data': 4, "
        "'model': 2); move it with jax.device_put(x, sharding) to the sharding in "
        "Compiled.in_shardings, or pass a NumPy array"
    )):  # fmt: skip
        compiled(other)
    one_device = jax.device_put(x, jax.devices()[0])
    with pytest.raises(ValueError, match=(
        r"^Compiled 'lambda': argument x is sharded as SingleDeviceSharding\(.*\), but "
        r"the function was compiled for P\('data',\) on mesh"
    )):  # fmt: skip
        compiled(one_device)
    with pytest.raises(TypeError, match=re.escape(
        "Compiled 'lambda': argument x expected f32[8,4], got f32[4,8]; pass an array "
        "of the compiled shape and dtype, or lower and compile again for the new one"
    )):  # fmt: skip
        compiled(jax.device_put(x.T.copy(), rows))


def check_donated_sharded_argument():
    mesh = _mesh(data=8)
    rows = NamedSharding(mesh, P("data"))
    x = jax.device_put(np.ones((16, 2), np.float32), rows)
    step = aotkit.jit(lambda x: x * 3.0, in_shardings=rows, out_shardings=rows, donate_argnums=0)
    out = step(x)
    np.testing.assert_array_equal(np.asarray(out), np.full((16, 2), 3.0, np.float32))
    assert x.is_deleted()
    with pytest.raises(ValueError, match=re.escape(
        "Compiled 'lambda': argument x was deleted or donated to an earlier call; pass "
        "a live array"
    )):  # fmt: skip
        step.lower(x).compile()(x)


def check_fast_path_runs_sharded_calls_without_python():
    mesh = _mesh(data=8)
    params, x, y = mlp_data()
    ins, outs = _dp_shardings(mesh)
    step = aotkit.jit(functools.partial(mlp_step, anp), in_shardings=ins, out_shardings=outs)
    placed = jax.device_put((params, x, y), ins)
    # Every call waits for the last: see check_data_parallel_mlp_step_equals_one_device_and_jax.
    first = jax.block_until_ready(step(*placed))
    before = step.cache_info()
    for _ in range(5):
        again = jax.block_until_ready(step(*placed))
    after = step.cache_info()
    assert after == before, (before, after)  # no lookup in Python: jaxlib's C++ dispatch ran
    _close(again, first)
    compiled = step.lower(params, x, y).compile()
    fast = jax.block_until_ready(compiled(*placed))
    _close(jax.block_until_ready(compiled(*placed)), fast)
    # NumPy arguments: checked once, then placed by jaxlib's C++ transfer, as jax.jit does.
    _close(jax.block_until_ready(step(params, x, y)), fast)
    before = step.cache_info()
    for _ in range(3):
        again = jax.block_until_ready(step(params, x, y))
    assert step.cache_info() == before
    _close(again, fast)
    for leaf, sharding in zip(jax.tree.leaves(again), jax.tree.leaves(outs), strict=True):
        assert leaf.sharding == sharding
    # With NumPy calls cached, a float64 batch is still not the compiled f32: the C++
    # transfer must not narrow it.
    for _ in range(2):
        jax.block_until_ready(compiled(params, x, y))
    with pytest.raises(TypeError, match=r"argument x expected f32\[32,16\], got f64"):
        compiled(params, x.astype(np.float64), y)


def check_analyses_are_per_device():
    mesh = _mesh(data=8)
    x = np.zeros((64, 16), np.float32)
    compiled = aotkit.jit(lambda x: x * 2.0, in_shardings=NamedSharding(mesh, P("data")))
    compiled = compiled.lower(x).compile()
    single = aotkit.jit(lambda x: x * 2.0).lower(x).compile()
    cost, memory = compiled.cost_analysis(), compiled.memory_analysis()
    assert cost["devices"] == 8.0 and memory.devices == 8
    assert memory.argument_size_in_bytes * 8 == single.memory_analysis().argument_size_in_bytes
    assert memory.to_dict()["devices"] == 8


# --- modules from JAX and from files --------------------------------------------------------


def check_sharded_jax_export_loads_and_runs():
    mesh = _mesh(data=4, model=2)
    ins = (
        NamedSharding(mesh, P("data")),
        NamedSharding(mesh, P(None, "model")),
        NamedSharding(mesh, P("model")),
    )
    fn = jax.jit(functools.partial(two_layers, jnp), in_shardings=ins)
    x = np.random.default_rng(2).standard_normal((8, 16)).astype(np.float32)
    w1 = np.ones((16, 8), np.float32) / 16
    w2 = np.ones((8, 4), np.float32)
    structs = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in (x, w1, w2)]
    exported = jax.export.export(fn)(*structs)
    assert exported.nr_devices == 8
    lowered = aotkit.load_module(exported.serialize())
    assert isinstance(lowered.mesh, jax.sharding.AbstractMesh)
    assert lowered.in_shardings[0][1].spec == P(None, "model")
    compiled = lowered.compile()
    assert [d.id for d in compiled.partitioning.devices] == list(range(8))
    assert compiled.in_shardings[0][0].spec == P("data", None)
    got = jax.block_until_ready(compiled(x, w1, w2))  # one SPMD step at a time (see docs)
    _close(got, fn(x, w1, w2))


def check_lowered_text_round_trips_through_load_module():
    mesh = _mesh(data=4, model=2)
    x = np.arange(32, dtype=np.float32).reshape(8, 4)
    lowered = aotkit.jit(
        lambda x: anp.tanh(x).sum(0), in_shardings=NamedSharding(mesh, P("data", "model"))
    ).lower(x)
    again = aotkit.load_module(lowered.as_text().encode())
    assert again.partitioning.num_devices == 8
    assert again.in_shardings[0][0].spec == P("data", "model")
    _close(again.compile()(x), np.tanh(x).sum(0))


GSPMD_MODULE = b"""
module @gspmd attributes {mhlo.num_partitions = 4 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%arg0: tensor<8x2xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"})
      -> (tensor<2xf32> {mhlo.sharding = "{replicated}"}) {
    %cst = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %0 = stablehlo.reduce(%arg0 init: %cst) applies stablehlo.add across dimensions = [0]
      : (tensor<8x2xf32>, tensor<f32>) -> tensor<2xf32>
    return %0 : tensor<2xf32>
  }
}"""


def check_gspmd_annotated_module_runs():
    lowered = aotkit.load_module(GSPMD_MODULE)
    assert lowered.mesh is None and lowered.partitioning.num_devices == 4
    compiled = lowered.compile()
    x = np.arange(16, dtype=np.float32).reshape(8, 2)
    got = compiled(x)
    np.testing.assert_array_equal(np.asarray(got), x.sum(0))
    assert got.sharding.is_fully_replicated
    assert len(compiled.in_shardings[0][0].device_set) == 4
    shard = compiled.in_shardings[0][0].shard_shape((8, 2))
    assert shard == (2, 2), shard


def check_mesh_of_other_devices_is_refused():
    mesh = _mesh(data=8)
    backend = aotkit.backends.get("cpu")
    lowered = aotkit.jit(lambda x: x + 1, in_shardings=NamedSharding(mesh, P("data")))
    lowered = lowered.lower(np.zeros(8, np.float32))
    original = type(backend).global_devices
    type(backend).global_devices = lambda self: original(self)[:4]
    try:
        with pytest.raises(ValueError, match=re.escape(
            "backend 'cpu': module 'lambda' runs on mesh ('data': 8) over devices "
            "[0, 1, 2, 3, 4, 5, 6, 7], but devices [4, 5, 6, 7] are not backend 'cpu''s (its "
            "devices: [0, 1, 2, 3]); build the mesh from "
            "aotkit.backends.get('cpu').global_devices()"
        )):  # fmt: skip
            lowered.compile()
    finally:
        type(backend).global_devices = original


def check_abstract_mesh_lowering_compiles_on_the_first_devices():
    abstract = jax.sharding.AbstractMesh((2, 2), ("data", "model"))
    x = np.arange(16, dtype=np.float32).reshape(4, 4)
    lowered = aotkit.jit(lambda x: x @ x, in_shardings=NamedSharding(abstract, P("data"))).lower(x)
    compiled = lowered.compile()
    assert [d.id for d in compiled.partitioning.devices] == [0, 1, 2, 3]
    assert isinstance(compiled.mesh, Mesh)
    np.testing.assert_allclose(np.asarray(compiled(x)), x @ x)


def check_sharding_mesh_refuses_too_many_devices():
    with pytest.raises(ValueError, match=re.escape(
        "aotkit.sharding.mesh: axes {'data': 16} need 16 devices but backend 'cpu' has 8; on "
        "the CPU, start the process with XLA_FLAGS=--xla_force_host_platform_device_count=16 "
        "(or call jax.config.update('jax_num_cpu_devices', 16) before the first compile)"
    )):  # fmt: skip
        aotkit.sharding.mesh("data=16")


def check_partitioning_is_described():
    mesh = _mesh(data=4, model=2)
    compiled = aotkit.jit(lambda x: -x, in_shardings=NamedSharding(mesh, P("data")))
    compiled = compiled.lower(np.zeros((4, 2), np.float32)).compile()
    assert repr(compiled) == (
        "<Compiled lambda(x: f32[4,2]) -> (out: f32[4,2]) on cpu, mesh ('data': 4, 'model': 2)>"
    ), repr(compiled)
    text = spmd.sharding_text(compiled.in_shardings[0][0])
    assert text == "P('data',) on mesh ('data': 4, 'model': 2)", text


def check_a_result_left_in_manual_sharding_is_a_compile_error():
    text = (
        "module @m attributes {mhlo.num_partitions = 2 : i32} {\n"
        'func.func public @main(%a: tensor<4xf32> {mhlo.sharding = "{devices=[2]0,1}"}) '
        "-> tensor<4xf32> {\n"
        '  %0 = stablehlo.custom_call @Sharding(%a) {mhlo.sharding = "{manual}"} : '
        "(tensor<4xf32>) -> tensor<4xf32>\n"
        "  return %0 : tensor<4xf32>\n}}\n"
    )
    with pytest.raises(aotkit.CompileError, match=re.escape(
        "backend 'cpu': module 'm' compiled with its result 0 in manual sharding (the form "
        "inside a shard_map), which no array can hold; end the manual computation inside the "
        "module (sdy.manual_computation, or @SPMDShardToFullShape) and re-export it"
    )):  # fmt: skip
        aotkit.load_module(text.encode()).compile()


def _closing(*names):
    """A context where `_compat._private` answers None for `names` (as a jaxlib without them)."""
    import contextlib

    from aotkit import _compat

    @contextlib.contextmanager
    def closed():
        real = _compat._private
        _compat._private = lambda module, name="": (
            None if (module, name) in names else real(module, name)
        )
        try:
            yield
        finally:
            _compat._private = real

    return closed()


def check_fallbacks_of_private_names_give_the_same_sharded_results():
    mesh = _mesh(data=2, model=4)
    rng = np.random.default_rng(2)
    x = rng.standard_normal((8, 16)).astype(np.float32)
    w1 = rng.standard_normal((16, 32)).astype(np.float32)
    w2 = rng.standard_normal((32, 12)).astype(np.float32)
    ins = (
        NamedSharding(mesh, P("data", None)),
        NamedSharding(mesh, P(None, "model")),
        NamedSharding(mesh, P("model", None)),
    )
    fn = functools.partial(two_layers, anp)
    want = np.asarray(aotkit.jit(fn)(x, w1, w2))
    closures = [
        (("jax._src.sharding_impls", "parse_flatten_op_sharding"),),
        (("jaxlib._jax", "batched_device_put"),),
        (("jaxlib._jax", "pjit"),),
        (("jax._src.interpreters.pxla", "MeshExecutableFastpathData"),),
    ]
    for names in closures:
        with _closing(*names):
            fresh = functools.partial(two_layers, anp)  # a function of its own: no cached compile
            compiled = aotkit.jit(fresh, in_shardings=ins).lower(x, w1, w2).compile()
            for _ in range(2):  # the second call takes the cached path, if there is one
                got = jax.block_until_ready(compiled(x, w1, w2))
                np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-4)
            assert got.sharding.is_equivalent_to(compiled.out_shardings, 2), names
            assert got.is_fully_addressable and len(got.addressable_shards) == 8
    with _closing(("jaxlib._jax", "GSPMDSharding")):
        with pytest.raises(
            NotImplementedError,
            match=r"backend 'cpu': cannot compile a sharded module: this jaxlib has no "
            r"GSPMDSharding, which sharded results are expressed in; sharding needs "
            r"jax/jaxlib 0.10 to 0.12",
        ):
            aotkit.jit(functools.partial(two_layers, anp), in_shardings=ins).lower(
                x, w1, w2
            ).compile()


CHECKS = sorted(name for name in dir() if name.startswith("check_"))
