"""The `interpreter` backend: every aotkit dtype in and out, CHLO legalized, and refusals that
raise in Python where the bindings would abort the process."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import ml_dtypes
import numpy as np
import pytest

from aotkit import backends, dtypes
from aotkit.errors import CompileError
from tests.backends import modules
from tests.backends.test_cpu import ALL_DTYPES, same_bits, sample


@pytest.fixture(scope="module")
def interp():
    return backends.get("interpreter")


@pytest.mark.parametrize("shape", [(), (1,), (9,), (2, 3), (0, 2)])
@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_identity_round_trips_every_dtype_bit_for_bit(interp, dtype, shape):
    x = sample(shape, dtype)
    out = interp.compile(modules.identity(shape, dtype)).execute([x])[0]
    assert isinstance(out, np.ndarray)
    assert same_bits(out, x)


def test_complex_results_keep_inf_and_nan_parts(interp):
    x = np.array([complex(1, np.inf), complex(np.nan, 2), complex(-np.inf, -0.0)], np.complex64)
    out = interp.compile(modules.identity((3,), "c64")).execute([x])[0]
    assert same_bits(out, x)


def test_bfloat16_arithmetic_rounds_in_bfloat16(interp):
    # 1 + 2**-9 is not a bf16 value: computed in bf16 it rounds back to 1.
    t = "tensor<2xbf16>"
    module = modules.module(
        "bf16_add", [t, t], [t], f"%0 = stablehlo.add %a0, %a1 : {t}\nreturn %0 : {t}"
    )
    x = np.array([1.0, 256.0], ml_dtypes.bfloat16)
    y = np.array([2.0**-9, 1.0], ml_dtypes.bfloat16)
    out = interp.compile(module).execute([x, y])[0]
    assert out.dtype == dtypes.bfloat16
    np.testing.assert_array_equal(out, (x + y).astype(ml_dtypes.bfloat16))
    np.testing.assert_array_equal(out.astype(np.float32), [1.0, 256.0])


def test_complex_arithmetic(interp):
    t = "tensor<2xcomplex<f64>>"
    module = modules.module(
        "cmul", [t, t], [t], f"%0 = stablehlo.multiply %a0, %a1 : {t}\nreturn %0 : {t}"
    )
    x = np.array([1 + 2j, -3 + 0.5j])
    y = np.array([2 - 1j, 1j])
    np.testing.assert_array_equal(interp.compile(module).execute([x, y])[0], x * y)


def test_multiple_results_and_mixed_dtypes(interp):
    module = modules.module(
        "mixed",
        ["tensor<3xi1>", "tensor<3xbf16>"],
        ["tensor<3xbf16>", "tensor<3xi1>", "tensor<3xcomplex<f32>>"],
        """%0 = stablehlo.not %a0 : tensor<3xi1>
        %1 = stablehlo.convert %a1 : (tensor<3xbf16>) -> tensor<3xcomplex<f32>>
        return %a1, %0, %1 : tensor<3xbf16>, tensor<3xi1>, tensor<3xcomplex<f32>>""",
    )
    b = np.array([True, False, True])
    h = np.array([1.5, -2.0, 0.25], ml_dtypes.bfloat16)
    out = interp.compile(module).execute([b, h])
    assert same_bits(out[0], h)
    assert same_bits(out[1], ~b)
    assert same_bits(out[2], h.astype(np.float32).astype(np.complex64))


def test_chlo_ops_are_legalized_first(interp):
    module = modules.module(
        "erf",
        ["tensor<2xf32>"],
        ["tensor<2xf32>"],
        "%0 = chlo.erf %a0 : tensor<2xf32> -> tensor<2xf32>\nreturn %0 : tensor<2xf32>",
    )
    exe = interp.compile(module)
    assert "chlo." not in exe.as_text()
    out = exe.execute([np.array([0.5, 1.0], np.float32)])[0]
    np.testing.assert_allclose(out, [0.5204999, 0.8427008], rtol=1e-6)


def test_as_text_is_final_stablehlo_and_analyses_are_none(interp):
    exe = interp.compile(modules.seed())
    assert exe.as_text().startswith("module @seed")
    assert "stablehlo.sqrt" in exe.as_text()
    assert exe.cost_analysis() is None
    assert exe.memory_analysis() is None


_REFUSED_OPS = {
    "custom_call": """%0 = stablehlo.custom_call @foo(%a0) : (tensor<3xf32>) -> tensor<3xf32>
        return %0 : tensor<3xf32>""",
    "rng": """%lo = stablehlo.constant dense<0.0> : tensor<f32>
        %hi = stablehlo.constant dense<1.0> : tensor<f32>
        %sh = stablehlo.constant dense<[3]> : tensor<1xi64>
        %0 = stablehlo.rng %lo, %hi, %sh, distribution = UNIFORM
            : (tensor<f32>, tensor<f32>, tensor<1xi64>) -> tensor<3xf32>
        return %0 : tensor<3xf32>""",
    "rng_bit_generator": """%s = stablehlo.constant dense<[1, 2]> : tensor<2xui64>
        %0:2 = stablehlo.rng_bit_generator %s, algorithm = DEFAULT
            : (tensor<2xui64>) -> (tensor<2xui64>, tensor<3xf32>)
        return %0#1 : tensor<3xf32>""",
    "fft": """%c = stablehlo.convert %a0 : (tensor<3xf32>) -> tensor<3xcomplex<f32>>
        %0 = stablehlo.fft %c, type = FFT, length = [3]
            : (tensor<3xcomplex<f32>>) -> tensor<3xcomplex<f32>>
        %r = stablehlo.real %0 : (tensor<3xcomplex<f32>>) -> tensor<3xf32>
        return %r : tensor<3xf32>""",
}


@pytest.mark.parametrize("op", sorted(_REFUSED_OPS))
def test_ops_the_interpreter_cannot_run_are_compile_errors(interp, op):
    module = modules.module("refused", ["tensor<3xf32>"], ["tensor<3xf32>"], _REFUSED_OPS[op])
    with pytest.raises(
        CompileError,
        match=rf"backend 'interpreter' rejected module 'refused': the reference interpreter "
        rf"cannot run op stablehlo.{op}{' @foo' if op == 'custom_call' else ''} at line \d+, "
        r"column \d+; use backend='cpu'",
    ):
        interp.compile(module)


def test_refused_op_names_the_source_line_of_a_traced_module(interp):
    module = modules.parse(
        "module @traced { func.func public @main(%a: tensor<3xf32>) -> tensor<3xf32> { "
        "%0 = stablehlo.custom_call @foo(%a) : (tensor<3xf32>) -> tensor<3xf32> "
        'loc("model.py":12:0) '
        "return %0 : tensor<3xf32> } }"
    )
    with pytest.raises(
        CompileError,
        match=r"module 'traced': the reference interpreter cannot run op stablehlo.custom_call "
        r"@foo at model.py:12; use backend='cpu'",
    ):
        interp.compile(module)


def test_refused_op_names_a_named_location_without_a_file(interp):
    # JAX names its ops' locations ("cholesky") without a file and line.
    module = modules.parse(
        "module @named { func.func public @main(%a: tensor<3xf32>) -> tensor<3xf32> { "
        "%0 = stablehlo.custom_call @foo(%a) : (tensor<3xf32>) -> tensor<3xf32> "
        'loc("cholesky") return %0 : tensor<3xf32> } }'
    )
    with pytest.raises(
        CompileError,
        match=r"module 'named': the reference interpreter cannot run op stablehlo.custom_call "
        r'@foo \("cholesky"\); use backend=\'cpu\'',
    ):
        interp.compile(module)


def test_ops_of_other_dialects_are_compile_errors(interp):
    module = modules.module(
        "arith",
        ["tensor<3xf32>"],
        ["tensor<3xf32>"],
        "%0 = arith.addf %a0, %a0 : tensor<3xf32>\nreturn %0 : tensor<3xf32>",
    )
    with pytest.raises(
        CompileError, match=r"cannot run op arith.addf at line 1, column \d+; use backend='cpu'"
    ):
        interp.compile(module)


def test_element_type_outside_aotkit_is_a_type_error(interp):
    module = modules.module(
        "f6",
        ["tensor<3xf32>"],
        ["tensor<3xf32>"],
        """%0 = stablehlo.convert %a0 : (tensor<3xf32>) -> tensor<3xf6E2M3FN>
        %1 = stablehlo.convert %0 : (tensor<3xf6E2M3FN>) -> tensor<3xf32>
        return %1 : tensor<3xf32>""",
    )
    with pytest.raises(
        TypeError,
        match=r"module 'f6': op stablehlo.convert at line 1, column \d+ uses element type "
        r"f6E2M3FN, which the interpreter backend does not carry \(it carries bool, i8, "
        r".*c128, i2, .*f4e2m1fn\); use backend='cpu'",
    ):
        interp.compile(module)


def test_element_type_in_main_signature_is_a_type_error(interp):
    module = modules.parse(
        "module @tf32sig { func.func public @main(%a: tensor<3xtf32>) -> tensor<3xtf32> "
        "{ return %a : tensor<3xtf32> } }"
    )
    with pytest.raises(TypeError, match=r"element type tf32 has no aotkit dtype"):
        interp.compile(module)


def test_low_precision_type_in_main_signature_runs(interp):
    # The bindings cannot convert a float8 result to NumPy: it returns widened to float32.
    module = modules.parse(
        "module @f8sig { func.func public @main(%a: tensor<3xf8E5M2>) -> tensor<3xf8E5M2> "
        "{ return %a : tensor<3xf8E5M2> } }"
    )
    x = np.array([1.5, -0.25, np.inf], ml_dtypes.float8_e5m2)
    out = interp.compile(module).execute([x])[0]
    assert same_bits(out, x)


def test_options_are_refused(interp):
    with pytest.raises(
        ValueError,
        match=r"backend 'interpreter': takes no compile options, got \{'xla_x': 1\}",
    ):
        interp.compile(modules.seed(), {"xla_x": 1})


def test_refusals_leave_the_process_alive_in_a_subprocess():
    # The same refusals in a fresh process, which would die (SIGABRT) if the op reached the
    # bindings: exit status 0 proves the check ran before eval_module.
    code = textwrap.dedent(
        """
        from aotkit import backends
        from aotkit.errors import CompileError
        from tests.backends import modules
        module = modules.module("m", ["tensor<3xf32>"], ["tensor<3xf32>"],
            "%0 = stablehlo.custom_call @foo(%a0) : (tensor<3xf32>) -> tensor<3xf32>\\n"
            "return %0 : tensor<3xf32>")
        try:
            backends.get("interpreter").compile(module)
        except CompileError:
            print("refused")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=_repo_root()
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "refused"


def _repo_root() -> str:
    from pathlib import Path

    return str(Path(__file__).resolve().parents[2])


# --- what @main reaches ------------------------------------------------------------------

_UNUSED_I4 = """module @pruned {
  func.func public @main(%a: tensor<2xf32>) -> tensor<2xf32> {
    %0 = func.call @used(%a) : (tensor<2xf32>) -> tensor<2xf32>
    return %0 : tensor<2xf32>
  }
  func.func private @used(%a: tensor<2xf32>) -> tensor<2xf32> {
    %0 = stablehlo.add %a, %a : tensor<2xf32>
    return %0 : tensor<2xf32>
  }
  func.func private @unused() -> tensor<2xi4> {
    %c = stablehlo.constant dense<[1, 2]> : tensor<2xi4>
    %0 = stablehlo.custom_call @foo(%c) : (tensor<2xi4>) -> tensor<2xi4>
    return %0 : tensor<2xi4>
  }
  func.func public @other(%a: tensor<2xf32>) -> tensor<2xf32> {
    %0 = stablehlo.custom_call @bar(%a) : (tensor<2xf32>) -> tensor<2xf32>
    return %0 : tensor<2xf32>
  }
}"""


def test_functions_main_never_calls_are_dropped_not_checked(interp):
    exe = interp.compile(modules.parse(_UNUSED_I4))
    assert "@used" in exe.as_text()
    assert "@unused" not in exe.as_text() and "@other" not in exe.as_text()
    out = exe.execute([np.array([1.0, 2.0], np.float32)])[0]
    np.testing.assert_array_equal(out, [2.0, 4.0])


def test_an_element_type_in_a_called_function_is_still_checked(interp):
    module = modules.parse(
        """module @called_f6 {
          func.func public @main(%a: tensor<2xf32>) -> tensor<2xf32> {
            %0 = func.call @f6() : () -> tensor<2xf6E2M3FN>
            return %a : tensor<2xf32>
          }
          func.func private @f6() -> tensor<2xf6E2M3FN> {
            %c = stablehlo.constant dense<[1.0, 2.0]> : tensor<2xf6E2M3FN>
            return %c : tensor<2xf6E2M3FN>
          }
        }"""
    )
    with pytest.raises(
        TypeError, match=r"op func.call at line 3, column \d+ uses element type f6E2M3FN"
    ):
        interp.compile(module)


def test_composite_decompositions_are_kept(interp):
    module = modules.parse(
        """module @comp {
          func.func public @main(%a: tensor<2xf32>) -> tensor<2xf32> {
            %0 = stablehlo.composite "my.double" %a {decomposition = @double}
                : (tensor<2xf32>) -> tensor<2xf32>
            return %0 : tensor<2xf32>
          }
          func.func private @double(%a: tensor<2xf32>) -> tensor<2xf32> {
            %0 = stablehlo.add %a, %a : tensor<2xf32>
            return %0 : tensor<2xf32>
          }
        }"""
    )
    out = interp.compile(module).execute([np.array([1.5, -1.0], np.float32)])[0]
    np.testing.assert_array_equal(out, [3.0, -2.0])


def test_recursion_is_refused(interp):
    module = modules.parse(
        """module @rec {
          func.func public @main(%a: tensor<i32>) -> tensor<i32> {
            %0 = func.call @f(%a) : (tensor<i32>) -> tensor<i32>
            return %0 : tensor<i32>
          }
          func.func private @f(%a: tensor<i32>) -> tensor<i32> {
            %0 = func.call @g(%a) : (tensor<i32>) -> tensor<i32>
            return %0 : tensor<i32>
          }
          func.func private @g(%a: tensor<i32>) -> tensor<i32> {
            %0 = func.call @f(%a) : (tensor<i32>) -> tensor<i32>
            return %0 : tensor<i32>
          }
        }"""
    )
    with pytest.raises(
        CompileError,
        match=r"backend 'interpreter' rejected module 'rec': function @f is recursive "
        r"\(@f -> @g -> @f\); the reference interpreter recurses without a depth limit and "
        r"would overflow the process's stack; write the recursion as a loop "
        r"\(stablehlo.while, aotkit.while_loop\)",
    ):
        interp.compile(module)


def test_a_called_function_without_a_body_is_refused(interp):
    module = modules.parse(
        """module @decl {
          func.func private @ext(tensor<2xf32>) -> tensor<2xf32>
          func.func public @main(%a: tensor<2xf32>) -> tensor<2xf32> {
            %0 = func.call @ext(%a) : (tensor<2xf32>) -> tensor<2xf32>
            return %0 : tensor<2xf32>
          }
        }"""
    )
    with pytest.raises(
        CompileError,
        match=r"rejected module 'decl': @main reaches function @ext, which has no body in the "
        r"module; define it in the module \(or inline it\) before compiling",
    ):
        interp.compile(module)


def test_a_value_that_is_not_a_tensor_is_a_type_error(interp):
    module = modules.parse(
        """module @token {
          func.func public @main(%a: tensor<2xf32>) -> tensor<2xf32> {
            %t = func.call @token() : () -> !stablehlo.token
            return %a : tensor<2xf32>
          }
          func.func private @token() -> !stablehlo.token {
            %t = stablehlo.create_token : !stablehlo.token
            return %t : !stablehlo.token
          }
        }"""
    )
    with pytest.raises(
        TypeError,
        match=r"backend 'interpreter': module 'token': op func.call at line 3, column \d+ has a "
        r"value of type !stablehlo.token, which the reference interpreter does not carry; "
        r"use backend='cpu'",
    ):
        interp.compile(module)


def test_dynamic_shapes_are_refused(interp):
    module = modules.module(
        "dyn",
        ["tensor<3xf32>"],
        ["tensor<3xf32>"],
        """%s = stablehlo.constant dense<[3]> : tensor<1xi64>
        %0 = stablehlo.dynamic_broadcast_in_dim %a0, %s, dims = [0]
            : (tensor<3xf32>, tensor<1xi64>) -> tensor<?xf32>
        %1 = stablehlo.dynamic_reshape %0, %s : (tensor<?xf32>, tensor<1xi64>) -> tensor<3xf32>
        return %1 : tensor<3xf32>""",
    )
    with pytest.raises(
        CompileError,
        match=r"rejected module 'dyn': op stablehlo.dynamic_broadcast_in_dim at line 2, column "
        r"\d+ has a value of dynamic shape tensor<\?xf32>, which the reference interpreter "
        r"cannot evaluate; refine its shapes first \(aotkit opt FILE --pipeline default\) or "
        r"use backend='cpu'",
    ):
        interp.compile(module)


_RUNTIME_SHAPE_OPERANDS = {
    "dynamic_pad": (
        ["tensor<3xf32>", "tensor<1xi64>"],
        "tensor<8xf32>",
        """%hi = stablehlo.constant dense<[2]> : tensor<1xi64>
        %in = stablehlo.constant dense<[1]> : tensor<1xi64>
        %p = stablehlo.constant dense<-1.0> : tensor<f32>
        %0 = stablehlo.dynamic_pad %a0, %p, %a1, %hi, %in : (tensor<3xf32>, tensor<f32>,
            tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<8xf32>""",
        "edge_padding_low",
        "stablehlo.pad",
    ),
    "dynamic_gather": (
        ["tensor<3x4xf32>", "tensor<2xi32>"],
        "tensor<2x4xf32>",
        """%i = stablehlo.constant dense<[[2], [0]]> : tensor<2x1xi32>
        %0 = "stablehlo.dynamic_gather"(%a0, %i, %a1) {dimension_numbers =
            #stablehlo.gather<offset_dims = [1], collapsed_slice_dims = [0],
            start_index_map = [0], index_vector_dim = 1>, indices_are_sorted = false}
            : (tensor<3x4xf32>, tensor<2x1xi32>, tensor<2xi32>) -> tensor<2x4xf32>""",
        "slice_sizes",
        "stablehlo.gather",
    ),
    "dynamic_conv": (
        ["tensor<1x4x1xf32>", "tensor<1x2xi64>"],
        "tensor<1x3x1xf32>",
        """%k = stablehlo.constant dense<1.0> : tensor<2x1x1xf32>
        %0 = "stablehlo.dynamic_conv"(%a0, %k, %a1) {dimension_numbers =
            #stablehlo.conv<[b, 0, f]x[0, i, o]->[b, 0, f]>, batch_group_count = 1 : i64,
            feature_group_count = 1 : i64}
            : (tensor<1x4x1xf32>, tensor<2x1x1xf32>, tensor<1x2xi64>) -> tensor<1x3x1xf32>""",
        "padding",
        "stablehlo.convolution",
    ),
}


@pytest.mark.parametrize("op", sorted(_RUNTIME_SHAPE_OPERANDS))
def test_dynamic_ops_with_runtime_shape_operands_are_refused(interp, op):
    args, result, body, what, static = _RUNTIME_SHAPE_OPERANDS[op]
    module = modules.module("runtime", args, [result], f"{body}\nreturn %0 : {result}")
    with pytest.raises(
        CompileError,
        match=rf"rejected module 'runtime': op stablehlo.{op} at line \d+, column \d+: its "
        rf"{what} operand is not a constant, and the reference interpreter reads it at run "
        rf"time \(aborting when it disagrees with the result type {result}\); make it a "
        rf"constant or use the static op {static}",
    ):
        interp.compile(module)


def test_dynamic_conv_with_constant_padding_that_disagrees_is_refused(interp):
    # The verifier checks a constant padding of dynamic_pad and dynamic_gather, not this one.
    module = modules.module(
        "badpad",
        ["tensor<1x4x1xf32>"],
        ["tensor<1x3x1xf32>"],
        """%k = stablehlo.constant dense<1.0> : tensor<2x1x1xf32>
        %p = stablehlo.constant dense<[[5, 5]]> : tensor<1x2xi64>
        %0 = "stablehlo.dynamic_conv"(%a0, %k, %p) {dimension_numbers =
            #stablehlo.conv<[b, 0, f]x[0, i, o]->[b, 0, f]>, batch_group_count = 1 : i64,
            feature_group_count = 1 : i64}
            : (tensor<1x4x1xf32>, tensor<2x1x1xf32>, tensor<1x2xi64>) -> tensor<1x3x1xf32>
        return %0 : tensor<1x3x1xf32>""",
    )
    with pytest.raises(
        CompileError,
        match=r"rejected module 'badpad': op stablehlo.dynamic_conv at line 3, column \d+ has "
        r"constant operands that disagree with its result type tensor<1x3x1xf32>: .*; fix "
        r"the operands",
    ):
        interp.compile(module)
