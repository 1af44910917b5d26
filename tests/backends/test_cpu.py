"""The `cpu` backend (PJRT): compile, run, transfer every dtype, inspect, and fail cleanly."""

from __future__ import annotations

import jax
import ml_dtypes
import numpy as np
import pytest
from jax import tree_util

from aotkit import backends, dtypes
from aotkit.backends import MemoryAnalysis
from aotkit.backends.base import ArgumentMismatch
from aotkit.errors import CompileError
from aotkit.specs import ShapeDtype
from tests.backends import modules

ALL_DTYPES = list(dtypes.SHORT_NAMES)


def sample(shape, dtype_name, seed=0) -> np.ndarray:
    """Values that exercise a dtype: extremes for integers, inf/nan/-0.0 for floats."""
    dtype = dtypes.SHORT_NAMES[dtype_name]
    rng = np.random.default_rng(seed)
    n = int(np.prod(shape))
    if dtypes.is_bool(dtype):
        flat = rng.integers(0, 2, n).astype(bool)
    elif dtypes.is_integer(dtype):
        info = np.iinfo(dtype)
        flat = rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)
        flat[:2] = [info.min, info.max][: min(n, 2)]
    else:
        real = dtypes.real_dtype(dtype)
        flat = (rng.standard_normal(n) * 100).astype(real)
        special = np.array([np.inf, -np.inf, np.nan, -0.0], dtype=real)
        flat[: min(n, 4)] = special[: min(n, 4)]
        if dtypes.is_complex(dtype):
            flat = flat + 1j * (rng.standard_normal(n) * 100).astype(real)[::-1]
            flat = flat.astype(dtype)
    return flat.astype(dtype).reshape(shape)


def same_bits(got, want) -> bool:
    got, want = np.asarray(got), np.asarray(want)
    return got.dtype == want.dtype and got.shape == want.shape and got.tobytes() == want.tobytes()


@pytest.fixture(scope="module")
def cpu():
    return backends.get("cpu")


@pytest.mark.parametrize("shape", [(), (1,), (2, 3)])
@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_identity_round_trips_every_dtype_bit_for_bit(cpu, dtype, shape):
    x = sample(shape, dtype)
    out = cpu.compile(modules.identity(shape, dtype)).execute([x])[0]
    assert isinstance(out, jax.Array)
    assert same_bits(out, x)


def test_float64_stays_float64_with_jax_x64_disabled(cpu):
    assert not jax.config.jax_enable_x64
    x = np.array([1.0 + 2.0**-40, -3.5])
    out = cpu.compile(modules.identity((2,), "f64")).execute([x])[0]
    assert out.dtype == np.float64 and same_bits(out, x)


def test_executable_specs_come_from_main(cpu):
    exe = cpu.compile(
        modules.module(
            "two",
            ["tensor<2x3xbf16>", "tensor<ui8>"],
            ["tensor<ui8>", "tensor<2x3xbf16>"],
            "return %a1, %a0 : tensor<ui8>, tensor<2x3xbf16>",
        )
    )
    assert exe.in_specs == (ShapeDtype((2, 3), ml_dtypes.bfloat16), ShapeDtype((), np.uint8))
    assert exe.out_specs == (ShapeDtype((), np.uint8), ShapeDtype((2, 3), ml_dtypes.bfloat16))
    assert exe.name == "two"


def test_device_array_and_jax_array_inputs_pass_through(cpu):
    exe = cpu.compile(modules.seed())
    first = exe.execute([np.float32(-3.0)])[0]
    again = exe.execute([first])[0]
    from_jax = exe.execute([jax.numpy.float32(-2.0)])[0]
    assert (float(first), float(again), float(from_jax)) == (4.0, 5.0, 3.0)


def test_non_contiguous_numpy_input(cpu):
    x = np.arange(12, dtype=np.float32).reshape(3, 4).T
    out = cpu.compile(modules.identity((4, 3), "f32")).execute([x])[0]
    np.testing.assert_array_equal(np.asarray(out), x)


def test_wrong_dtype_device_array_is_a_mismatch(cpu):
    exe = cpu.compile(modules.seed())
    with pytest.raises(ArgumentMismatch) as info:
        exe.execute([jax.numpy.zeros((), np.int32)])
    assert info.value.reason == "expected f32[], got i32[]"


def test_as_text_is_optimized_hlo_with_a_fusion(cpu):
    text = cpu.compile(modules.seed()).as_text()
    assert text.startswith("HloModule seed")
    assert "fusion" in text


def test_cost_analysis_has_the_standard_keys(cpu):
    cost = cpu.compile(modules.seed()).cost_analysis()
    assert {"flops", "bytes accessed", "transcendentals"} <= set(cost)
    assert cost["bytes accessed"] == 8.0  # one f32 in, one f32 out
    assert all(isinstance(v, float) for v in cost.values())


def test_memory_analysis_sizes(cpu):
    memory = cpu.compile(modules.identity((2, 3), "f64")).memory_analysis()
    assert isinstance(memory, MemoryAnalysis)
    assert memory.argument_size_in_bytes == 48
    assert memory.output_size_in_bytes == 48
    assert set(memory.to_dict()) == {
        "argument_size_in_bytes",
        "output_size_in_bytes",
        "alias_size_in_bytes",
        "temp_size_in_bytes",
        "generated_code_size_in_bytes",
    }


def test_runtime_executable_is_the_pjrt_executable(cpu):
    exe = cpu.compile(modules.seed())
    raw = exe.runtime_executable()
    assert raw.hlo_modules()[0].name == "seed"


def _custom_call_module():
    return modules.module(
        "needs_target",
        ["tensor<3xf32>"],
        ["tensor<3xf32>"],
        """%0 = stablehlo.custom_call @no_such_target(%a0) : (tensor<3xf32>) -> tensor<3xf32>
        return %0 : tensor<3xf32>""",
    )


def test_compile_failure_is_a_compile_error_with_the_diagnostic(cpu):
    with pytest.raises(
        CompileError,
        match=r"backend 'cpu' rejected module 'needs_target': .*no_such_target",
    ) as info:
        cpu.compile(_custom_call_module())
    assert info.value.backend == "cpu"
    assert info.value.module_name == "needs_target"
    assert isinstance(info.value.__cause__, jax.errors.JaxRuntimeError)


def test_xla_option_passes_through(cpu):
    module = modules.identity((3,), "f32")
    exe = cpu.compile(
        module, {"xla_cpu_enable_fast_math": False, "xla_backend_optimization_level": 0}
    )
    np.testing.assert_array_equal(np.asarray(exe.execute([np.ones(3, np.float32)])[0]), 1.0)


def test_unknown_xla_option_is_a_value_error(cpu):
    with pytest.raises(
        ValueError,
        match=r"backend 'cpu': compile options \{'xla_no_such_flag': True\} rejected: "
        r".*No such compile option: 'xla_no_such_flag'; options are XLA debug flags",
    ):
        cpu.compile(modules.seed(), {"xla_no_such_flag": True})


def test_bad_xla_option_value_is_a_value_error(cpu):
    with pytest.raises(ValueError, match=r"While setting option xla_cpu_enable_fast_math"):
        cpu.compile(modules.seed(), {"xla_cpu_enable_fast_math": "maybe"})


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ([("a", 1)], r"options must be a dict of XLA flags, got list"),
        ({1: True}, r"option name 1 is not a string"),
        ({"xla_flag": [1]}, r"option 'xla_flag' has a list value \[1\]; XLA options take"),
    ],
)
def test_malformed_options_are_type_errors(cpu, options, message):
    with pytest.raises(TypeError, match=message):
        cpu.compile(modules.seed(), options)


def test_module_without_main_is_refused(cpu):
    module = modules.parse("module @nomain { func.func public @other() { return } }")
    with pytest.raises(ValueError, match=r"module 'nomain': module has no @main function"):
        cpu.compile(module)


def test_dynamic_shape_in_main_is_refused(cpu):
    module = modules.parse(
        "module @dyn { func.func public @main(%a: tensor<?xf32>) -> tensor<?xf32> "
        "{ return %a : tensor<?xf32> } }"
    )
    with pytest.raises(TypeError, match=r"@main has dynamic shape tensor<\?xf32>"):
        cpu.compile(module)


def test_deleted_array_is_a_value_error_before_pjrt_sees_it(cpu):
    exe = cpu.compile(modules.seed())
    x = exe.execute([np.float32(1.0)])[0]
    x.delete()
    with pytest.raises(ArgumentMismatch) as info:
        exe.execute([x])
    assert info.value.kind is ValueError
    assert "deleted or donated" in info.value.reason


def test_outputs_feed_back_as_inputs(cpu):
    exe = cpu.compile(modules.seed())
    x = np.float32(-1.0)
    for _ in range(3):
        (x,) = exe.execute([x])
    assert float(x) == 4.0


def test_pjrt_compiled_runs_through_compiled_wrapper(cpu):
    from aotkit.stages import Compiled

    compiled = Compiled(
        cpu.compile(modules.seed()),
        in_tree=tree_util.tree_structure(((0,), {})),
        out_tree=tree_util.tree_structure(0),
    )
    assert compiled.backend is cpu
    assert float(compiled(3.0)) == 4.0


def test_a_mesh_of_another_platforms_devices_is_refused_naming_their_platform(cpu):
    """A TPU's device 0 and the CPU's share an id: the refusal says whose they are."""
    import re
    from collections import namedtuple

    from aotkit import spmd
    from aotkit.backends import pjrt_spmd

    tpu0 = namedtuple("Device", "id platform")(0, "tpu")
    partitioning = spmd.Partitioning(None, 1, (), (), devices=(tpu0,))
    with pytest.raises(ValueError, match=re.escape(
        "compile: module 'f' runs on 1 devices over devices [0], but devices [0] are not "
        "backend 'cpu''s (they are tpu devices; its devices: [0]); build the mesh from "
        "aotkit.backends.get('cpu').global_devices()"
    )):  # fmt: skip
        pjrt_spmd._devices(cpu, partitioning, "f", "compile")
