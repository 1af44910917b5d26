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
        rf"cannot run op stablehlo.{op}{' @foo' if op == 'custom_call' else ''}; use "
        "backend='cpu'",
    ):
        interp.compile(module)


def test_a_scatter_leaves_its_operand_alone(interp):
    # jaxlib's interpreter scatters into its operand's buffer; the backend copies it first.
    import aotkit
    import aotkit.numpy as anp

    def f(x, i):
        return x, x.at[i].add(1), x.at[i].add(1), anp.zeros(3, np.int64).at[i].add(1)

    x, i = np.array([5, 6, 7]), np.array([0, 1, 1])
    got = aotkit.lower(f, x, i).compile(backend="interpreter")(x, i)
    for g, want in zip(got, ([5, 6, 7], [6, 8, 7], [6, 8, 7], [1, 2, 0]), strict=True):
        np.testing.assert_array_equal(g, want)


def test_ops_of_other_dialects_are_compile_errors(interp):
    module = modules.module(
        "arith",
        ["tensor<3xf32>"],
        ["tensor<3xf32>"],
        "%0 = arith.addf %a0, %a0 : tensor<3xf32>\nreturn %0 : tensor<3xf32>",
    )
    with pytest.raises(CompileError, match=r"cannot run op arith.addf; use backend='cpu'"):
        interp.compile(module)


def test_element_type_outside_aotkit_is_a_type_error(interp):
    module = modules.module(
        "f8",
        ["tensor<3xf32>"],
        ["tensor<3xf32>"],
        """%0 = stablehlo.convert %a0 : (tensor<3xf32>) -> tensor<3xf8E4M3FN>
        %1 = stablehlo.convert %0 : (tensor<3xf8E4M3FN>) -> tensor<3xf32>
        return %1 : tensor<3xf32>""",
    )
    with pytest.raises(
        TypeError,
        match=r"module 'f8': op stablehlo.convert uses element type f8E4M3FN, which the "
        r"interpreter backend does not carry \(it carries bool, i8, .*c128\); use backend='cpu'",
    ):
        interp.compile(module)


def test_element_type_in_main_signature_is_a_type_error(interp):
    module = modules.parse(
        "module @f8sig { func.func public @main(%a: tensor<3xf8E5M2>) -> tensor<3xf8E5M2> "
        "{ return %a : tensor<3xf8E5M2> } }"
    )
    with pytest.raises(TypeError, match=r"element type f8E5M2 has no aotkit dtype"):
        interp.compile(module)


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
