"""Sharding in this process: the annotations, the checks and every error worded for the user.

This session's CPU backend has one device, so sharded programs here run on a one-device mesh
(`ONE`), and programs for more devices are lowered over an `AbstractMesh` (lowering needs no
devices). Running them on 8 devices is tests/test_spmd_devices.py; on 2 processes,
tests/test_spmd_processes.py.
"""

from __future__ import annotations

import re

import jax
import numpy as np
import pytest

import aotkit
import aotkit.numpy as anp
from aotkit import cli
from aotkit.sharding import AbstractMesh, AxisType, Mesh, NamedSharding, P, PartitionSpec

ONE = Mesh(np.array(jax.devices("cpu")[:1], dtype=object), ("x",))
OTHER = Mesh(np.array(jax.devices("cpu")[:1], dtype=object), ("y",))
EIGHT = AbstractMesh((4, 2), ("data", "model"), axis_types=(AxisType.Auto,) * 2)
F32_16x8 = aotkit.spec("f32[16,8]")


def layer(x, w):
    return anp.tanh(x @ w)


# --- what the lowered module says ------------------------------------------------------------


def test_lowered_text_shows_the_mesh_and_shardings():
    ins = (NamedSharding(EIGHT, P("data")), NamedSharding(EIGHT, P(None, "model")))
    out = NamedSharding(EIGHT, P("data", "model"))
    lowered = aotkit.jit(layer, in_shardings=ins, out_shardings=out).lower(
        F32_16x8, aotkit.spec("f32[8,4]")
    )
    assert lowered.as_text() == (
        "module @layer attributes {mhlo.num_partitions = 8 : i32, mhlo.num_replicas = 1 : i32} {\n"
        '  sdy.mesh @mesh = <["data"=4, "model"=2]>\n'
        "  func.func public @main(%arg0: tensor<16x8xf32> {sdy.sharding = #sdy.sharding<@mesh, "
        '[{"data"}, {}]>}, %arg1: tensor<8x4xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, '
        '{"model"}]>}) -> (tensor<16x4xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"data"}, '
        '{"model"}]>}) {\n'
        "    %0 = stablehlo.dot_general %arg0, %arg1, contracting_dims = [1] x [0], precision = "
        "[HIGHEST, HIGHEST] : (tensor<16x8xf32>, tensor<8x4xf32>) -> tensor<16x4xf32>\n"
        "    %1 = stablehlo.tanh %0 : tensor<16x4xf32>\n"
        "    return %1 : tensor<16x4xf32>\n"
        "  }\n"
        "}\n"
    )
    assert lowered.in_shardings == (ins, {})
    assert lowered.out_shardings == out
    assert lowered.mesh == EIGHT


def test_constraint_and_replicated_defaults():
    def f(x, y):
        return aotkit.sharding.constrain(x * 2, P(None, "model")) + y

    lowered = aotkit.jit(f, in_shardings=(NamedSharding(EIGHT, P("data")), None)).lower(
        F32_16x8, F32_16x8
    )
    text = lowered.as_text()
    assert re.search(r'sdy.sharding_constraint %\d+ <@mesh, \[\{\}, \{"model"\}\]>', text), text
    assert "%arg1: tensor<16x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {}]>}" in text
    assert lowered.in_shardings[0][1] == NamedSharding(EIGHT, P())
    assert lowered.out_shardings is None  # the compiler decides


def test_a_constraint_alone_makes_the_program_sharded():
    def f(x):
        return aotkit.sharding.constrain(x + 1, NamedSharding(EIGHT, P("data")))

    lowered = aotkit.lower(f, F32_16x8)
    assert lowered.mesh == EIGHT
    assert lowered.in_shardings == ((NamedSharding(EIGHT, P()),), {})


def test_no_shardings_is_a_single_device_program():
    lowered = aotkit.jit(layer, in_shardings=None).lower(F32_16x8, aotkit.spec("f32[8,4]"))
    assert lowered.partitioning is None and lowered.in_shardings is None
    assert "sdy" not in lowered.as_text() and "num_partitions" not in lowered.as_text()


def test_shardings_key_the_jit_caches():
    f = aotkit.jit(layer, in_shardings=NamedSharding(EIGHT, P("data")))
    g = aotkit.jit(layer, in_shardings=NamedSharding(EIGHT, P()))
    a = f.lower(F32_16x8, aotkit.spec("f32[8,4]"))
    b = g.lower(F32_16x8, aotkit.spec("f32[8,4]"))
    assert a is not b and a.as_text() != b.as_text()
    assert f.lower(F32_16x8, aotkit.spec("f32[8,4]")) is a


# --- running on a one-device mesh -------------------------------------------------------------


def test_one_device_mesh_runs_like_the_unsharded_program():
    x = np.linspace(-1, 1, 32, dtype=np.float32).reshape(8, 4)
    w = np.linspace(0, 1, 12, dtype=np.float32).reshape(4, 3)
    sharding = NamedSharding(ONE, P("x"))
    compiled = aotkit.jit(layer, in_shardings=(sharding, None)).lower(x, w).compile()
    got = compiled(x, w)
    assert isinstance(got, jax.Array)
    assert compiled.in_shardings[0][0] == sharding
    assert got.sharding == compiled.out_shardings
    np.testing.assert_allclose(np.asarray(got), np.asarray(aotkit.jit(layer)(x, w)), rtol=1e-6)
    placed = jax.device_put(x, sharding)
    np.testing.assert_allclose(np.asarray(compiled(placed, w)), np.asarray(got))
    assert compiled.cost_analysis()["devices"] == 1.0
    assert compiled.memory_analysis().devices == 1


def test_partition_specs_use_the_mesh_of_the_named_shardings():
    jitted = aotkit.jit(
        layer, in_shardings=(P("x"), NamedSharding(ONE, P())), out_shardings=P(None, "x")
    )
    lowered = jitted.lower(aotkit.spec("f32[4,2]"), aotkit.spec("f32[2,2]"))
    assert lowered.in_shardings[0][0] == NamedSharding(ONE, P("x"))
    assert lowered.out_shardings == NamedSharding(ONE, P(None, "x"))


def test_keyword_arguments_are_replicated_without_in_shardings():
    lowered = aotkit.jit(lambda x, *, y: x + y, out_shardings=NamedSharding(ONE, P())).lower(
        aotkit.spec("f32[2]"), y=aotkit.spec("f32[2]")
    )
    assert lowered.in_shardings == ((NamedSharding(ONE, P()),), {"y": NamedSharding(ONE, P())})


def test_jax_front_end_keeps_shardings_on_a_one_device_mesh():
    import jax.numpy as jnp

    sharding = NamedSharding(ONE, P("x"))
    compiled = aotkit.jit(lambda x: jnp.sin(x) * 2, in_shardings=sharding, frontend="jax")
    compiled = compiled.lower(np.zeros(4, np.float32)).compile()
    assert compiled.in_shardings == ((sharding,), {})
    x = np.arange(4, dtype=np.float32)
    np.testing.assert_allclose(np.asarray(compiled(x)), np.sin(x) * 2, rtol=1e-6)


def test_interpreter_refuses_sharded_programs():
    lowered = aotkit.jit(layer, in_shardings=NamedSharding(EIGHT, P())).lower(
        aotkit.spec("f32[2,2]"), aotkit.spec("f32[2,2]")
    )
    with pytest.raises(ValueError, match=re.escape(
        "backend 'interpreter' runs programs on one device, but module 'layer' is partitioned "
        "over mesh ('data': 4, 'model': 2); compile it on a PJRT backend such as 'cpu'"
    )):  # fmt: skip
        lowered.compile(backend="interpreter")


def test_compiling_for_more_devices_than_the_backend_has():
    lowered = aotkit.jit(layer, in_shardings=NamedSharding(EIGHT, P())).lower(
        aotkit.spec("f32[2,2]"), aotkit.spec("f32[2,2]")
    )
    with pytest.raises(ValueError, match=re.escape(
        "backend 'cpu': module 'layer' is partitioned over mesh ('data': 4, 'model': 2), but "
        "the backend has 1 device(s); on the CPU, start the process with "
        "XLA_FLAGS=--xla_force_host_platform_device_count=8 (or call "
        "jax.config.update('jax_num_cpu_devices', 8) before the first compile)"
    )):  # fmt: skip
        lowered.compile()


# --- user errors in shardings -------------------------------------------------------------------


def lower_layer(**shardings):
    return aotkit.jit(layer, **shardings).lower(F32_16x8, aotkit.spec("f32[8,4]"))


def test_partition_spec_without_a_mesh():
    with pytest.raises(ValueError, match=re.escape(
        "trace(layer): in_shardings for x is P('data',), a PartitionSpec without a mesh; "
        "pass NamedSharding(mesh, spec), or a NamedSharding for another argument or result, "
        "whose mesh the PartitionSpecs then use"
    )):  # fmt: skip
        lower_layer(in_shardings=(P("data"), None))


def test_partition_spec_in_out_shardings_without_a_mesh():
    with pytest.raises(ValueError, match=re.escape(
        "trace(layer): out_shardings is P('data',), a PartitionSpec without a mesh;"
    )):  # fmt: skip
        lower_layer(out_shardings=P("data"))


def test_sharding_that_is_not_named():
    single = jax.sharding.make_single_device_sharding(jax.devices("cpu")[0])
    with pytest.raises(TypeError, match=(
        r"^trace\(layer\): in_shardings for w is SingleDeviceSharding\(.*\), not a "
        r"NamedSharding; aotkit shards over named meshes: pass NamedSharding\(mesh, "
        r"PartitionSpec\(...\)\), a PartitionSpec or None$"
    )):  # fmt: skip
        lower_layer(in_shardings=(NamedSharding(EIGHT, P()), single))


def test_two_meshes():
    with pytest.raises(ValueError, match=re.escape(
        "trace(layer): shardings over two meshes, ('x': 1) and ('y': 1) (or the same axes on "
        "other devices); a program runs on one mesh: build every NamedSharding from the same Mesh"
    )):  # fmt: skip
        lower_layer(in_shardings=(NamedSharding(ONE, P()), NamedSharding(OTHER, P())))


def test_constraint_over_another_mesh():
    def f(x):
        return aotkit.sharding.constrain(x, NamedSharding(OTHER, P()))

    with pytest.raises(ValueError, match=(
        r"^aotkit.sharding.constrain \(at .*test_spmd.py:\d+\): the sharding is over mesh "
        r"\('y': 1\), but the program's mesh is \('x': 1\) \(or the same axes on other "
        r"devices\); build every NamedSharding from the same Mesh$"
    )):  # fmt: skip
        aotkit.jit(f, in_shardings=NamedSharding(ONE, P())).lower(aotkit.spec("f32[2]"))


def test_shardings_that_do_not_match_the_arguments():
    with pytest.raises(ValueError, match=(
        r"^trace\(layer\): in_shardings \(None, None, None\) does not match the structure "
        r"PyTreeDef\(\(\*, \*\)\): .*; give one sharding for everything, or a tuple \(or pytree\) "
        r"with one per argument$"
    )):  # fmt: skip
        lower_layer(in_shardings=(None, None, None))


def test_keyword_arguments_with_in_shardings():
    with pytest.raises(ValueError, match=re.escape(
        "trace(<lambda>): in_shardings covers positional arguments (as in jax.jit), but "
        "y is passed by keyword; pass it positionally"
    ).replace("<lambda>", "lambda")):  # fmt: skip
        aotkit.jit(lambda x, y: x + y, in_shardings=NamedSharding(ONE, P())).lower(
            aotkit.spec("f32[2]"), y=aotkit.spec("f32[2]")
        )


def lower_layer_over_eight(spec, shape=F32_16x8):
    return aotkit.jit(layer, in_shardings=(spec, NamedSharding(EIGHT, P()))).lower(
        shape, aotkit.spec("f32[8,4]")
    )


def test_sharding_with_more_entries_than_dimensions():
    with pytest.raises(ValueError, match="^" + re.escape(
        "trace(layer): in_shardings for x is P('data', None, None), with 3 entries for "
        "f32[16,8] (2 dimensions); give at most one entry per dimension"
    )):  # fmt: skip
        lower_layer_over_eight(P("data", None, None))


def test_uneven_sharding():
    with pytest.raises(ValueError, match="^" + re.escape(
        "trace(layer): in_shardings for x is P(('data', 'model'), None): dimension 0 of "
        "f32[12,8] (size 12) is split over 'data' x 'model' (8 devices), which does not divide "
        "it; uneven shards are refused: pad the dimension to a multiple of 8 (e.g. 16) or "
        "split another dimension"
    )):  # fmt: skip
        lower_layer_over_eight(P(("data", "model"), None), aotkit.spec("f32[12,8]"))


@pytest.mark.parametrize(
    "spec, message",
    [
        (P("batch"), "Resource axis: batch of P('batch',) is not found in mesh: ('data', 'model')"),
        (P("data", "data"), "A single NamedSharding spec specification can map every mesh axis"),
    ],
    ids=["unknown-axis", "axis-twice"],
)
def test_partition_spec_that_does_not_fit_the_mesh(spec, message):
    with pytest.raises(ValueError, match="^" + re.escape(
        f"trace(layer): in_shardings for x is {spec}, which does not fit mesh ('data': 4, "
        f"'model': 2): {message}"
    )):  # fmt: skip
        lower_layer_over_eight(spec)


def test_unreduced_axes():
    explicit = Mesh(
        np.array(jax.devices("cpu")[:1], dtype=object),
        ("x",),
        axis_types=(jax.sharding.AxisType.Explicit,),
    )
    spec = P(None, unreduced={"x"})  # newer JAX spells it with unreduced_kind=sum
    with pytest.raises(ValueError, match="^" + re.escape(
        f"trace(lambda): in_shardings for x is {spec}, with unreduced or "
        "reduced axes; aotkit shards arrays, it does not keep partial values: drop unreduced= "
        "and reduced="
    )):  # fmt: skip
        aotkit.jit(lambda x: x, in_shardings=NamedSharding(explicit, spec)).lower(
            aotkit.spec("f32[2]")
        )


def test_unhashable_shardings():
    with pytest.raises(TypeError, match=re.escape(
        "jit(layer): in_shardings holds an unhashable leaf ([array([0.])]); its leaves are "
        "NamedSharding, PartitionSpec or None"
    )):  # fmt: skip
        aotkit.jit(layer, in_shardings=[np.zeros(1)])


def test_mesh_axis_name_that_cannot_be_written():
    mesh = Mesh(np.array(jax.devices("cpu")[:1], dtype=object), ('a"b',))
    with pytest.raises(ValueError, match=re.escape(
        "lower: mesh axis name 'a\"b' cannot be written into the module; name mesh axes with "
        "plain strings such as 'data'"
    )):  # fmt: skip
        aotkit.jit(lambda x: x, in_shardings=NamedSharding(mesh, P())).lower(aotkit.spec("f32[]"))


def test_constrain_outside_a_trace():
    with pytest.raises(RuntimeError, match=(
        r"^aotkit.sharding.constrain was called outside a traced function: "
    )):  # fmt: skip
        aotkit.sharding.constrain(np.zeros(2), P())


def test_constrain_on_a_concrete_value():
    def f(x):
        return x + aotkit.sharding.constrain(np.ones(2, np.float32), P())

    with pytest.raises(TypeError, match=(
        r"^aotkit.sharding.constrain \(at .*test_spmd.py:\d+\): x is a ndarray, not a traced "
        r"array; constrain the arrays the function computes \(or its arguments\)$"
    )):  # fmt: skip
        aotkit.lower(f, aotkit.spec("f32[2]"))


def test_jax_front_end_keeps_the_shardings_given_to_jax_jit():
    # A jitted function is jitted again from its own options; its shardings go along.
    rows = NamedSharding(ONE, P("x"))
    fn = jax.jit(lambda x, y: x * y, in_shardings=(rows, None), out_shardings=rows)
    lowered = aotkit.lower(fn, aotkit.spec("f32[4]"), aotkit.spec("f32[4]"), frontend="jax")
    assert lowered.in_shardings == ((rows, NamedSharding(ONE, P())), {})
    assert lowered.out_shardings == rows
    assert '#sdy.sharding<@mesh, [{"x"}]>' in lowered.as_text()
    x = np.arange(4, dtype=np.float32)
    got = lowered.compile()(x, x)
    assert got.sharding == rows
    np.testing.assert_array_equal(np.asarray(got), x * x)


def test_jax_front_end_takes_aotkit_shardings_for_a_jitted_function_without_any():
    sharding = NamedSharding(ONE, P("x"))
    lowered = aotkit.lower(
        jax.jit(lambda x: x * 2), aotkit.spec("f32[2]"), frontend="jax", in_shardings=sharding
    )
    assert lowered.in_shardings == ((sharding,), {})


def test_jax_front_end_refuses_shardings_given_twice():
    fn = jax.jit(lambda x: x * 2, in_shardings=NamedSharding(ONE, P()))
    with pytest.raises(ValueError, match=re.escape(
        "in_shardings/out_shardings were given to aotkit for a function already wrapped in "
        "jax.jit with shardings of its own; give the shardings to one of the two"
    )):  # fmt: skip
        aotkit.lower(
            fn, aotkit.spec("f32[2]"), frontend="jax", in_shardings=NamedSharding(ONE, P("x"))
        )


def test_jax_front_end_refuses_shardings_when_jax_hides_the_jit_options(monkeypatch):
    from aotkit import _compat

    monkeypatch.setattr(_compat, "jit_options", lambda fn: None)
    with pytest.raises(ValueError, match=re.escape(
        "in_shardings/out_shardings were given to aotkit for a function already wrapped in "
        "jax.jit whose options this jax does not expose; give the shardings to jax.jit"
    )):  # fmt: skip
        aotkit.lower(
            jax.jit(lambda x: x * 2),
            aotkit.spec("f32[2]"),
            frontend="jax",
            in_shardings=NamedSharding(ONE, P()),
        )


# --- modules from files ---------------------------------------------------------------------------


def module_text(mesh_ops: str, partitions: int = 8) -> bytes:
    return (
        f"module @m attributes {{mhlo.num_partitions = {partitions} : i32}} {{\n{mesh_ops}\n"
        "  func.func @main(%a: tensor<8xf32>) -> tensor<8xf32> {\n"
        "    return %a : tensor<8xf32>\n  }\n}"
    ).encode()


def test_module_with_several_meshes():
    text = module_text('  sdy.mesh @a = <["x"=8]>\n  sdy.mesh @b = <["y"=8]>')
    with pytest.raises(ValueError, match=re.escape(
        "load_module: <bytes>: the module declares several meshes (@a, @b); aotkit runs a "
        "program on one mesh: lower or export it with one"
    )):  # fmt: skip
        aotkit.load_module(text)


def test_module_mesh_with_devices_out_of_order():
    text = module_text('  sdy.mesh @mesh = <["x"=2], device_ids=[1, 0]>', partitions=2)
    with pytest.raises(ValueError, match=re.escape(
        "load_module: <bytes>: mesh @mesh lists its devices in the order [1, 0]; aotkit places "
        "a module's mesh on devices in order: export it with a mesh in device order"
    )):  # fmt: skip
        aotkit.load_module(text)


def test_module_mesh_of_another_size():
    text = module_text('  sdy.mesh @mesh = <["x"=4]>', partitions=8)
    with pytest.raises(ValueError, match=re.escape(
        "load_module: <bytes>: its mesh ('x': 4) has 4 devices but the module is partitioned "
        "for 8 (mhlo.num_partitions); re-export it"
    )):  # fmt: skip
        aotkit.load_module(text)


def test_module_keeps_its_shardings():
    text = (
        b"module @m attributes {mhlo.num_partitions = 8 : i32} {\n"
        b'  sdy.mesh @mesh = <["data"=4, "model"=2]>\n'
        b'  func.func @main(%a: tensor<8x2xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"data"}, '
        b'{"model"}]>}) -> (tensor<8x2xf32> {sdy.sharding = #sdy.sharding<@mesh, [{?}, {}]>}) {\n'
        b"    return %a : tensor<8x2xf32>\n  }\n}"
    )
    lowered = aotkit.load_module(text)
    assert lowered.mesh == EIGHT
    assert lowered.in_shardings == ((NamedSharding(EIGHT, P("data", "model")),), {})
    assert lowered.out_shardings == NamedSharding(EIGHT, P(PartitionSpec.UNCONSTRAINED, None))
    assert '{"data"}, {"model"}' in lowered.as_text()


def test_unconstrained_result_over_a_mesh_of_explicit_axes():
    from aotkit import spmd

    explicit = Mesh(
        np.array(jax.devices("cpu")[:1], dtype=object), ("x",), axis_types=(AxisType.Explicit,)
    )
    layout = spmd.ModuleLayout(
        1, 1, AbstractMesh((1,), ("x",), axis_types=(AxisType.Auto,)), [P("x")],
        [P(PartitionSpec.UNCONSTRAINED)],
    )  # fmt: skip
    f32_4 = aotkit.spec("f32[4]")
    # The module's own mesh has Auto axes, so {?} reads back ...
    partitioning = spmd.from_module("m.mlir", layout, [f32_4], [f32_4])
    assert partitioning.out_shardings[0].spec == P(PartitionSpec.UNCONSTRAINED)
    # ... and a user's mesh of Explicit axes, which cannot hold it, is a clear error.
    with pytest.raises(ValueError, match="^" + re.escape(
        f"m.mlir: the sharding of result 0 is {P(PartitionSpec.UNCONSTRAINED)}, which does not "
        "fit mesh ('x': 1): "
    ) + ".*UNCONSTRAINED"):  # fmt: skip
        spmd.from_module("m.mlir", layout, [f32_4], [f32_4], explicit)


# --- aotkit.sharding.mesh -----------------------------------------------------------------------


def test_mesh_over_the_backend_devices():
    mesh = aotkit.sharding.mesh("x=1")
    assert mesh.axis_names == ("x",) and list(mesh.devices.flat) == jax.devices("cpu")[:1]
    assert aotkit.sharding.mesh({"x": 1}) == mesh


@pytest.mark.parametrize(
    "axes, error, message",
    [
        ("data=4,model", ValueError, "cannot read 'model' in 'data=4,model'; expected NAME=SIZE,"),
        ("data=2,data=2", ValueError, "axis 'data' appears twice in 'data=2,data=2'; name each"),
        ("data=0", ValueError, "axis 'data' has size 0 in 'data=0'; sizes are >= 1"),
        (4, TypeError, "expected a string NAME=SIZE,... such as 'data=4,model=2', got int"),
        ({"data": 0}, ValueError, "{'data': 0} must map axis names to sizes >= 1"),
        (
            "data=2",
            ValueError,
            "axes {'data': 2} need 2 devices but backend 'cpu' has 1; on the CPU, start the "
            "process with XLA_FLAGS=--xla_force_host_platform_device_count=2",
        ),
    ],
    ids=["syntax", "twice", "zero", "type", "dict", "too-many"],
)
def test_mesh_errors(axes, error, message):
    with pytest.raises(error, match="^" + re.escape(f"aotkit.sharding.mesh: {message}")):
        aotkit.sharding.mesh(axes)


# --- aotkit.distributed ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args, kwargs, message",
    [
        (("localhost", 2, 0), {}, "coordinator_address 'localhost' is not 'host:port'; give "),
        (("localhost:1", 0, 0), {}, "num_processes=0; give an integer >= 1"),
        (("localhost:1", 2, -1), {}, "process_id=-1; give an integer >= 0"),
        (("localhost:1", 2, 2), {}, "process_id=2 is not below num_processes=2; number the "),
        (("localhost:1", 2, 0), {"local_device_count": 0}, "local_device_count=0; give an "),
        (("localhost:1", 2, 0), {"cpu_collectives": "nccl"}, "cpu_collectives='nccl'; choose "),
    ],
    ids=["address", "processes", "process-id", "id-too-big", "device-count", "collectives"],
)
def test_distributed_initialize_checks_its_arguments(args, kwargs, message):
    with pytest.raises(
        ValueError, match="^" + re.escape(f"aotkit.distributed.initialize: {message}")
    ):
        aotkit.distributed.initialize(*args, **kwargs)


def test_distributed_initialize_after_a_backend_started():
    aotkit.backends.get("cpu")
    with pytest.raises(RuntimeError, match=re.escape(
        "aotkit.distributed.initialize: a backend has already started in this process (a "
        "compile, a device query or aotkit.backends.get starts one); call initialize first, "
        "before anything compiles"
    )):  # fmt: skip
        aotkit.distributed.initialize("localhost:1", 2, 0)
    assert aotkit.distributed.process_index() == 0 and aotkit.distributed.process_count() == 1


# --- the CLI ---------------------------------------------------------------------------------


@pytest.fixture
def program(tmp_path):
    path = tmp_path / "prog.py"
    path.write_text("import aotkit.numpy as anp\n\ndef layer(x, w):\n    return anp.tanh(x @ w)\n")
    return f"{path}:layer"


def run_cli(capsys, *argv):
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_lower_with_a_mesh(capsys, program):
    code, out, err = run_cli(
        capsys, "lower", program, "--shapes", "f32[4,2]", "f32[2,3]", "--mesh", "x=1",
        "--shardings", "x,None", "-",
    )  # fmt: skip
    assert code == 0, err
    assert 'sdy.mesh @mesh = <["x"=1]>' in out
    assert '%arg0: tensor<4x2xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {}]>}' in out
    assert "%arg1: tensor<2x3xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {}]>}" in out


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["--shardings", "x", "-"],
            "--shardings: give the mesh they split over with --mesh NAME=SIZE,...",
        ),
        (
            ["--mesh", "x=1", "--shardings", "x"],
            "--shardings: got 1 sharding(s) for 2 array argument(s) (f32[4,2], f32[2,3]); give "
            "one per --shapes spec",
        ),
    ],
    ids=["no-mesh", "count"],
)
def test_cli_sharding_errors(capsys, program, argv, message):
    code, _, err = run_cli(capsys, "lower", program, "--shapes", "f32[4,2]", "f32[2,3]", *argv)
    assert code == 1
    assert err == f"aotkit lower: error: {message}\n"


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--mesh", "data"], "argument --mesh: cannot read 'data' in 'data'; expected NAME=SIZE,"),
        (
            ["--mesh", "x=1", "--shardings", "da ta"],
            "argument --shardings: cannot read 'da ta' in 'da ta'; expected one entry per "
            "leading dimension",
        ),
    ],
    ids=["mesh", "sharding"],
)
def test_cli_sharding_usage_errors(capsys, program, argv, message):
    code, _, err = run_cli(capsys, "lower", program, "--shapes", "f32[4,2]", "f32[2,3]", *argv)
    assert code == 2
    assert message in err


def test_cli_module_file_takes_no_mesh(capsys, tmp_path):
    path = tmp_path / "m.mlir"
    path.write_text(
        "func.func @main(%a: tensor<2xf32>) -> tensor<2xf32> {\n  return %a : tensor<2xf32>\n}\n"
    )
    code, _, err = run_cli(capsys, "run", path, "--mesh", "x=1")
    assert code == 1
    assert err == (
        f"aotkit run: error: {path}: --mesh and --shardings apply to FILE.py:FN targets; a "
        "module file's shardings come from the module (its mesh goes on the first devices)\n"
    )


def test_cli_runs_on_a_mesh_in_its_own_process(program):
    # The CLI owns its process: --mesh data=4 starts the CPU backend with 4 devices.
    import subprocess
    import sys

    common = ["run", program, "--shapes", "f32[8,2]", "f32[2,3]", "--seed", "3", "-q"]
    sharded = subprocess.run(
        [sys.executable, "-m", "aotkit", *common, "--mesh", "data=4", "--shardings", "data", "-"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert sharded.returncode == 0, sharded.stderr
    plain = subprocess.run(
        [sys.executable, "-m", "aotkit", *common], capture_output=True, text=True, timeout=300
    )
    assert plain.returncode == 0, plain.stderr
    assert sharded.stdout == plain.stdout


def test_cli_inspect_says_how_a_module_is_partitioned(capsys, tmp_path):
    path = tmp_path / "m.mlir"
    path.write_bytes(module_text('  sdy.mesh @mesh = <["data"=4, "model"=2]>'))
    code, out, err = run_cli(capsys, "inspect", path)
    assert code == 0, err
    assert out.splitlines()[-1] == "partitioned over: mesh ('data': 4, 'model': 2)"
