"""The trust boundary (aotkit/frontends/trust.py): what a loaded module may ask a backend to run.

Every refusal is checked here, in this process, through `aotkit.load_module` (the check runs
before any backend sees the module, so nothing here reaches the code that would crash);
tests/reliability/test_trust.py runs the same modules in child processes through compile
and run, where they used to end the process. Every message is matched exactly. The positive
side: every LAPACK call JAX 0.10.2 emits on CPU, for every element type and for square,
tall, wide, batched and empty matrices, passes the check unchanged.
"""

from __future__ import annotations

import re

import jax
import jax.lax.linalg as lax_linalg
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np
import pytest

import aotkit
from aotkit import _compat
from aotkit.frontends import trust

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def load(text: str):
    return aotkit.load_module(text.encode(), name="m")


def refused(text: str, message: str, op: str | None = None):
    """Loads `text`, refused with exactly `message` (after 'load_module: <bytes>: ')."""
    with pytest.raises(aotkit.UnsupportedModuleError) as raised:
        load(text)
    assert str(raised.value) == f"load_module: <bytes>: {message}"
    if op is not None:
        assert raised.value.op == op
    return raised.value


def module(body: str, args: str = "", result: str = "tensor<f32>", ret: str = "%0") -> str:
    return f"func.func public @main({args}) -> {result} {{\n{body}\n  return {ret} : {result}\n}}\n"


def custom_call(target: str, operands: list[str], results: list[str], config="{}", extra=""):
    """@main taking `operands`, one custom call (line 2, column 3 or 8), its first result out."""
    args = ", ".join(f"%a{i}: {t}" for i, t in enumerate(operands))
    names = ", ".join(f"%a{i}" for i in range(len(operands)))
    config_attr = "" if config is None else f"mhlo.backend_config = {config}"
    attrs = ", ".join(a for a in (config_attr, extra) if a)
    n = len(results)
    lhs = "%0" if n == 1 else f"%0:{n}"
    out = "%0" if n == 1 else "%0#0"
    text = (
        f"func.func public @main({args}) -> {results[0]} {{\n"
        f"  {lhs} = stablehlo.custom_call @{target}({names}) {{{attrs}}} : "
        f"({', '.join(operands)}) -> ({', '.join(results)})\n"
        f"  return {out} : {results[0]}\n}}\n"
    )
    return text


AT = " at line 2, column 8"


def at(results: list[str]) -> str:
    """Where `custom_call` puts the call: `%0 = ` or `%0:N = ` before it."""
    return AT if len(results) == 1 else " at line 2, column 10"


BROKEN = (
    " (the kernel would read or write past its buffers); re-export the module from JAX or aotkit"
)


# --- ops and functions ----------------------------------------------------------------------


FEED = "  %t = stablehlo.create_token : !stablehlo.token\n"


@pytest.mark.parametrize(
    "op, body, args, what",
    [
        (
            "stablehlo.infeed",
            FEED + '  %0:2 = "stablehlo.infeed"(%t) {infeed_config = ""} : (!stablehlo.token) '
            "-> (tensor<f32>, !stablehlo.token)",
            "",
            "reads from a host infeed queue, which nothing feeds (the call would block forever)",
        ),
        (
            "stablehlo.outfeed",
            FEED + '  %1 = "stablehlo.outfeed"(%a, %t) {outfeed_config = ""} : '
            "(tensor<f32>, !stablehlo.token) -> !stablehlo.token\n  %0 = stablehlo.abs %a : "
            "tensor<f32>",
            "%a: tensor<f32>",
            "writes to a host outfeed queue, which nothing drains (the call would block forever)",
        ),
        (
            "stablehlo.send",
            FEED + '  %1 = "stablehlo.send"(%a, %t) {channel_handle = '
            "#stablehlo.channel_handle<handle = 1, type = 2>, is_host_transfer = true} : "
            "(tensor<f32>, !stablehlo.token) -> !stablehlo.token\n  %0 = stablehlo.abs %a : "
            "tensor<f32>",
            "%a: tensor<f32>",
            "sends to another device or the host, which an aotkit executable cannot serve",
        ),
        (
            "stablehlo.recv",
            FEED + '  %0:2 = "stablehlo.recv"(%t) {channel_handle = '
            "#stablehlo.channel_handle<handle = 1, type = 3>, is_host_transfer = true} : "
            "(!stablehlo.token) -> (tensor<f32>, !stablehlo.token)",
            "",
            "receives from another device or the host, which an aotkit executable cannot serve",
        ),
    ],
)
def test_feeds_and_host_transfers_are_refused(op, body, args, what):
    ret, column = ("%0#0", 10) if "%0:2" in body else ("%0", 8)
    error = refused(
        module(body, args, ret=ret),
        f"op {op} at line 3, column {column} {what}; remove it from the module",
        op,
    )
    assert error.location == f" at line 3, column {column}"


def test_ops_outside_stablehlo_are_refused():
    refused(
        module("  %0 = arith.constant dense<1.0> : tensor<f32>"),
        "op arith.constant at line 2, column 8 is not a StableHLO op; aotkit compiles StableHLO "
        "and CHLO (with func.call and Shardy's sharding annotations): lower the program to "
        "StableHLO",
        "arith.constant",
    )


def test_ops_at_the_top_of_the_module_are_refused():
    main = module("  %0 = stablehlo.constant dense<1.0> : tensor<f32>")
    text = "module @m {\nllvm.mlir.global internal @g(0 : i32) : i32\n" + main + "}"
    refused(
        text,
        "op llvm.mlir.global at line 2, column 1 is not a function at the top of the module; "
        "aotkit compiles modules of func.func functions (and sdy.mesh): remove it",
        "llvm.mlir.global",
    )


SHARDING = 'mhlo.sharding = "{replicated}"'


@pytest.mark.parametrize(
    "target, result",
    [
        ("Sharding", "tensor<4xf32>"),
        ("SPMDFullToShardShape", "tensor<2xf32>"),
        ("SPMDShardToFullShape", "tensor<8xf32>"),
    ],
)
def test_gspmd_sharding_annotations_pass(target, result):
    loaded = load(custom_call(target, ["tensor<4xf32>"], [result], config=None, extra=SHARDING))
    if target == "Sharding":  # on one device an identity
        x = np.arange(4, dtype=np.float32)
        np.testing.assert_array_equal(np.asarray(loaded.compile()(x)), x)


@pytest.mark.parametrize(
    "target, operands, result, broken",
    [
        (
            "Sharding",
            ["tensor<4xf32>"],
            "tensor<2xf32>",
            "it turns tensor<4xf32> into tensor<2xf32>",
        ),
        (
            "SPMDFullToShardShape",
            ["tensor<4xf32>"],
            "tensor<2xi32>",
            "it turns tensor<4xf32> into tensor<2xi32>",
        ),
        (
            "SPMDShardToFullShape",
            ["tensor<4xf32>"],
            "tensor<2x4xf32>",
            "it turns tensor<4xf32> into tensor<2x4xf32>",
        ),
        (
            "Sharding",
            ["tensor<4xf32>", "tensor<4xf32>"],
            "tensor<4xf32>",
            "it takes 2 operand(s) and gives 1 result(s)",
        ),
    ],
)
def test_gspmd_sharding_annotations_that_change_values_are_refused(
    target, operands, result, broken
):
    refused(
        custom_call(target, operands, [result], config=None, extra=SHARDING),
        f"custom call @{target}{AT} is a GSPMD sharding annotation, which takes one value and "
        f"gives one of the same element type and rank, but {broken}; re-export the module "
        "from JAX",
        f"stablehlo.custom_call @{target}",
    )


def test_shardy_annotations_pass():
    # What aotkit itself lowers for a one-device mesh, loaded back and run.
    ones = aotkit.sharding.Mesh(np.array(jax.devices("cpu")[:1], dtype=object), ("x",))
    rows = aotkit.sharding.NamedSharding(ones, aotkit.sharding.P("x"))

    def f(x):
        return aotkit.sharding.constrain(x * 2, aotkit.sharding.P("x"))

    text = aotkit.jit(f, in_shardings=rows).lower(aotkit.spec("f32[4]")).as_text()
    assert "sdy.mesh" in text and "sdy.sharding_constraint" in text
    loaded = load(text)
    assert loaded.mesh.size == 1
    x = np.arange(4, dtype=np.float32)
    np.testing.assert_array_equal(np.asarray(loaded.compile()(x)), x * 2)


COMPOSITE = (
    '  %0 = stablehlo.composite "my.op" %a {decomposition = @f} : (tensor<f32>) -> tensor<f32>'
)
CALLS_F = "  %0 = func.call @f(%a) : (tensor<f32>) -> tensor<f32>"


@pytest.mark.parametrize(
    "extra, callee, cycle, line",
    [
        ("", "main", "@main -> @main", 2),
        (
            "func.func private @f(%a: tensor<f32>) -> tensor<f32> {\n"
            + CALLS_F
            + "\n  return %0 : tensor<f32>\n}\n",
            "f",
            "@f -> @f",
            6,
        ),
        (
            "func.func private @f(%a: tensor<f32>) -> tensor<f32> {\n"
            "  %0 = func.call @g(%a) : (tensor<f32>) -> tensor<f32>\n  return %0 : tensor<f32>\n}\n"
            "func.func private @g(%a: tensor<f32>) -> tensor<f32> {\n"
            + CALLS_F
            + "\n  return %0 : tensor<f32>\n}\n",
            "f",
            "@f -> @g -> @f",
            10,
        ),
    ],
)
def test_recursion_is_refused(extra, callee, cycle, line):
    first = (
        CALLS_F if callee != "main" else "  %0 = func.call @main(%a) : (tensor<f32>) -> tensor<f32>"
    )
    text = module(first, "%a: tensor<f32>") + extra
    refused(
        text,
        f"func.call @{callee} at line {line}, column 8 makes the call graph recursive ({cycle}), "
        "which crashes XLA's compiler; write the recursion as a loop (stablehlo.while)",
        "func.call",
    )


def test_recursion_through_a_composite_is_refused():
    text = (
        module(
            COMPOSITE,
            "%a: tensor<f32>",
        )
        + "func.func private @f(%a: tensor<f32>) -> tensor<f32> {\n"
        + COMPOSITE
        + "\n"
        "  return %0 : tensor<f32>\n}\n"
    )
    refused(
        text,
        "stablehlo.composite @f at line 6, column 8 makes the call graph recursive (@f -> @f), "
        "which crashes XLA's compiler; write the recursion as a loop (stablehlo.while)",
    )


def test_recursion_that_main_never_reaches_is_refused_too():
    text = module("  %0 = stablehlo.abs %a : tensor<f32>", "%a: tensor<f32>") + (
        "func.func private @f(%a: tensor<f32>) -> tensor<f32> {\n"
        + CALLS_F
        + "\n  return %0 : tensor<f32>\n}\n"
    )
    refused(
        text,
        "func.call @f at line 6, column 8 makes the call graph recursive (@f -> @f), which "
        "crashes XLA's compiler; write the recursion as a loop (stablehlo.while)",
    )


def test_a_deep_call_chain_is_not_recursion():
    n = 2000  # deeper than Python's recursion limit: the check walks with a stack
    chain = "".join(
        f"func.func private @f{i}(%a: tensor<f32>) -> tensor<f32> {{\n"
        f"  %0 = func.call @f{i + 1}(%a) : (tensor<f32>) -> tensor<f32>\n"
        "  return %0 : tensor<f32>\n}\n"
        for i in range(n)
    )
    last = f"func.func private @f{n}(%a: tensor<f32>) -> tensor<f32> {{\n"
    last += "  return %a : tensor<f32>\n}\n"
    text = module("  %0 = func.call @f0(%a) : (tensor<f32>) -> tensor<f32>", "%a: tensor<f32>")
    lowered = load(text + chain + last)
    assert lowered.flat_in_specs == (aotkit.ShapeDtype((), "float32"),)


@pytest.mark.parametrize("called", [True, False])
def test_functions_without_a_body_are_refused(called):
    body = CALLS_F if called else "  %0 = stablehlo.abs %a : tensor<f32>"
    text = (
        module(body, "%a: tensor<f32>") + "func.func private @f(%a: tensor<f32>) -> tensor<f32>\n"
    )
    refused(
        text,
        "function @f at line 5, column 1 is declared without a body (XLA's compiler crashes on "
        "such a module); define it in the module or remove the declaration",
        "func.func",
    )


def test_values_too_large_to_address_are_refused():
    refused(
        module(
            "  %1 = stablehlo.broadcast_in_dim %a, dims = [] : (tensor<f32>) -> "
            "tensor<4294967296x4294967296xf32>\n"
            "  %0 = stablehlo.abs %a : tensor<f32>",
            "%a: tensor<f32>",
        ),
        "op stablehlo.broadcast_in_dim at line 2, column 8 has a value of type "
        "tensor<4294967296x4294967296xf32> (73,786,976,294,838,206,464 bytes), more than XLA "
        "can address (9,223,372,036,854,775,807 bytes); use smaller shapes",
    )


def test_a_signature_too_large_to_address_is_refused():
    text = module(
        "", "%a: tensor<4611686018427387904xf32>", "tensor<4611686018427387904xf32>", "%a"
    )
    with pytest.raises(TypeError, match=re.escape(
        "load_module: <bytes>: @main has type tensor<4611686018427387904xf32>: ShapeDtype: "
        "shape (4611686018427387904,) of float32 holds 4,611,686,018,427,387,904 elements "
        "(18,446,744,073,709,551,616 bytes), more than XLA can address "
        "(9,223,372,036,854,775,807 bytes); use a smaller shape"
    )):  # fmt: skip
        load(text)


def test_a_large_value_that_fits_is_accepted():
    text = module(
        "  %1 = stablehlo.broadcast_in_dim %a, dims = [] : (tensor<f32>) -> "
        "tensor<2147483648x536870912xf32>\n"
        "  %0 = stablehlo.abs %a : tensor<f32>",
        "%a: tensor<f32>",
    )
    assert load(text).name == "m"  # 2**62 bytes


# --- custom calls ---------------------------------------------------------------------------


def test_host_callbacks_are_refused():
    text = custom_call(
        "xla_ffi_python_cpu_callback", ["tensor<3xf32>"], ["tensor<3xf32>"], "{index = 0 : ui64}"
    )
    refused(
        text,
        f"custom call @xla_ffi_python_cpu_callback{AT} calls back into Python (jax.debug.print, "
        "jax.pure_callback or io_callback); an aotkit executable cannot call Python: remove the "
        "callback",
        "stablehlo.custom_call @xla_ffi_python_cpu_callback",
    )


@pytest.mark.parametrize("target", ["check.expect_close", "my_kernel", "lapack_sgetrf"])
def test_targets_outside_the_allowlist_are_refused(target):
    text = custom_call(target, ["tensor<3xf32>"], ["tensor<3xf32>"], config=None)
    refused(
        text,
        f"custom call @{target}{AT} targets a function aotkit does not run (it runs the "
        f"custom calls {trust.allowlist()}); remove the call, or compute it with StableHLO ops",
        f"stablehlo.custom_call @{target}",
    )


def test_the_allowlist():
    # jaxlib 0.12.1's elementwise math kernels, where this jaxlib has them.
    math = sorted(_compat.cpu_math_targets())
    assert trust.allowlist() == "".join(f"{t}, " for t in math) + (
        "lapack_{c,d,s,z}gees_ffi, lapack_{c,d,s,z}geev_ffi, lapack_{c,d,s,z}gehrd_ffi, "
        "lapack_{c,d,s,z}geqp3_ffi, lapack_{c,d,s,z}geqrf_ffi, lapack_{c,d,s,z}gesdd_ffi, "
        "lapack_{c,d,s,z}gesvd_ffi, lapack_{c,d,s,z}getrf_ffi, lapack_{c,d,s,z}gtsv_ffi, "
        "lapack_{c,z}heevd_ffi, lapack_{c,z}hetrd_ffi, lapack_{c,d,s,z}potrf_ffi, "
        "lapack_{c,d,s,z}trsm_ffi, lapack_{c,z}ungqr_ffi, lapack_{c,z}unmqr_ffi, "
        "lapack_{d,s}orgqr_ffi, lapack_{d,s}ormqr_ffi, lapack_{d,s}syevd_ffi, "
        "lapack_{d,s}sytrd_ffi, tridiagonal_solve_perturbed_ffi"
    )
    from jaxlib import lapack

    registered = {name for targets in lapack.registrations().values() for name, *_ in targets}
    assert set(trust.ALLOWED_TARGETS) == registered | set(math)


M33 = "tensor<3x3xf32>"
GETRF_OK = [M33, "tensor<3xi32>", "tensor<i32>"]
UPLO_L = "{uplo = 76 : ui8}"
TRSM_CONFIG = "{diag = 78 : ui8, side = 76 : ui8, trans_x = 78 : ui8, uplo = 76 : ui8}"


def contract(target, operands, results, config, why):
    return (target, operands, results, config, "", why)


CONTRACTS = [
    contract(
        "lapack_sgetrf_ffi",
        [M33],
        ["tensor<1x1xf32>", "tensor<3xi32>", "tensor<i32>"],
        "{}",
        "operands (f32[3,3]) give results (f32[3,3], i32[3], i32[]), but the call declares "
        "(f32[1,1], i32[3], i32[])",
    ),
    contract(
        "lapack_sgetrf_ffi",
        [M33],
        [M33, "tensor<2xi32>", "tensor<i32>"],
        "{}",
        "operands (f32[3,3]) give results (f32[3,3], i32[3], i32[]), but the call declares "
        "(f32[3,3], i32[2], i32[])",
    ),
    contract(
        "lapack_dgetrf_ffi",
        [M33],
        GETRF_OK,
        "{}",
        "operand 0 is float32, the target computes in float64",
    ),
    contract(
        "lapack_sgetrf_ffi",
        ["tensor<3xf32>"],
        GETRF_OK,
        "{}",
        "operand 0 has shape (3,), not a (stack of) matrices",
    ),
    contract(
        "lapack_spotrf_ffi",
        ["tensor<3x4xf32>"],
        ["tensor<3x4xf32>", "tensor<i32>"],
        UPLO_L,
        "operand 0 has shape (3, 4), whose matrices are not square",
    ),
    contract(
        "lapack_spotrf_ffi",
        [M33],
        [M33, "tensor<i32>"],
        "{uplo = 88 : ui8}",
        "uplo is 88 : ui8; expected 76 ('L') or 85 ('U')",
    ),
    contract(
        "lapack_spotrf_ffi",
        [M33],
        [M33, "tensor<i32>"],
        '{uplo = "L"}',
        "uplo is \"L\"; expected 76 ('L') or 85 ('U')",
    ),
    contract(
        "lapack_spotrf_ffi",
        [M33],
        [M33, "tensor<i32>"],
        "{}",
        "mhlo.backend_config has attributes (none); the kernel reads (uplo)",
    ),
    contract(
        "lapack_spotrf_ffi",
        [M33],
        [M33, "tensor<i32>"],
        None,
        "mhlo.backend_config is missing; it needs uplo",
    ),
    contract(
        "lapack_spotrf_ffi",
        [M33],
        [M33, "tensor<i32>"],
        '"uplo"',
        'mhlo.backend_config is "uplo", not a dictionary of attributes',
    ),
    contract("lapack_sgetrf_ffi", [M33, M33], GETRF_OK, "{}", "it takes 1 operand(s), got 2"),
    contract(
        "lapack_sgetrf_ffi",
        ["tensor<3x3xbf16>"],
        GETRF_OK,
        "{}",
        "operand 0 is bfloat16, the target computes in float32",
    ),
    contract(
        "lapack_sgetrf_ffi",
        [M33],
        [M33, "tensor<3xf6E2M3FN>", "tensor<i32>"],
        "{}",
        "result 1 has element type f6E2M3FN, which no kernel takes",
    ),
    contract(
        "lapack_sgetrf_ffi",
        [M33],
        [M33, "tensor<?xi32>", "tensor<i32>"],
        "{}",
        "result 1 has type tensor<?xi32>, not a tensor of static shape",
    ),
    contract(
        "lapack_sgeqp3_ffi",
        [M33, "tensor<2xi32>"],
        [M33, "tensor<2xi32>", "tensor<3xf32>"],
        "{}",
        "the pivots are i32[2]; expected i32[3]",
    ),
    contract(
        "lapack_sorgqr_ffi",
        ["tensor<3x4xf32>", "tensor<3xf32>"],
        ["tensor<3x4xf32>"],
        "{}",
        "needs rows >= columns >= reflectors, got a 3x4 matrix and 3",
    ),
    contract(
        "lapack_sorgqr_ffi",
        [M33, "tensor<2x3xf32>"],
        [M33],
        "{}",
        "operand 1 has shape (2, 3); expected one vector per matrix, () + (k,)",
    ),
    contract(
        "lapack_sormqr_ffi",
        ["tensor<2x3x3xf32>", "tensor<2x3xf32>", "tensor<3x3xf32>"],
        [M33],
        "{left = true, transpose = false}",
        "operand batches (2,) and () differ",
    ),
    contract(
        "lapack_sormqr_ffi",
        [M33, "tensor<3xf32>", "tensor<4x2xf32>"],
        ["tensor<4x2xf32>"],
        "{left = true, transpose = false}",
        "reflectors of shape (3, 3) (3 of them) cannot apply to a matrix of shape (4, 2) from "
        "the left",
    ),
    contract(
        "lapack_sormqr_ffi",
        [M33, "tensor<3xf32>", M33],
        [M33],
        "{left = 1 : i32, transpose = false}",
        "left is 1 : i32; expected true or false",
    ),
    contract(
        "lapack_sgehrd_ffi",
        [M33],
        [M33, "tensor<2xf32>", "tensor<i32>"],
        "{high = 4 : i32, low = 1 : i32}",
        "needs 1 <= low <= high <= n, got low=1, high=4, n=3",
    ),
    contract(
        "lapack_sgehrd_ffi",
        [M33],
        [M33, "tensor<2xf32>", "tensor<i32>"],
        "{high = true, low = 1 : i32}",
        "high is true; expected an integer",
    ),
    contract(
        "lapack_ssytrd_ffi",
        ["tensor<0x0xf32>"],
        ["tensor<0x0xf32>", "tensor<0xf32>", "tensor<0xf32>", "tensor<0xf32>", "tensor<i32>"],
        UPLO_L,
        "needs a non-empty matrix, got shape (0, 0)",
    ),
    contract(
        "lapack_sgesdd_ffi",
        ["tensor<4x3xf32>"],
        ["tensor<4x3xf32>", "tensor<3xf32>", "tensor<4x3xf32>", "tensor<3x3xf32>", "tensor<i32>"],
        "{mode = 65 : ui8}",
        "operands (f32[4,3]) give results (f32[4,3], f32[3], f32[4,4], f32[3,3], i32[]), but the "
        "call declares (f32[4,3], f32[3], f32[4,3], f32[3,3], i32[])",
    ),
    contract(
        "lapack_strsm_ffi",
        ["tensor<2x3x3xf32>", "tensor<3x5xf32>"],
        ["tensor<3x5xf32>"],
        TRSM_CONFIG,
        "operand batches (2,) and () differ",
    ),
    contract(
        "lapack_strsm_ffi",
        [M33, "tensor<3x5xf32>"],
        ["tensor<3x5xf32>"],
        TRSM_CONFIG.replace("side = 76", "side = 82"),
        "a triangular matrix of shape (3, 3) cannot solve a right-hand side of shape (3, 5) "
        "from the right",
    ),
    contract(
        "lapack_sgtsv_ffi",
        ["tensor<3xf32>"] * 3 + ["tensor<3xf32>"],
        ["tensor<3xf32>"] * 4 + ["tensor<i32>"],
        "{}",
        "operand 3 is f32[3], not a (stack of) float32 matrices",
    ),
    contract(
        "lapack_sgtsv_ffi",
        ["tensor<3xf32>", "tensor<4xf32>", "tensor<3xf32>", "tensor<3x2xf32>"],
        ["tensor<3xf32>"] * 3 + ["tensor<3x2xf32>", "tensor<i32>"],
        "{}",
        "diagonal operand 1 is f32[4]; expected f32[3]",
    ),
    contract(
        "tridiagonal_solve_perturbed_ffi",
        ["tensor<3xi32>"] * 3 + ["tensor<3x2xi32>"],
        ["tensor<3x2xi32>"],
        "{}",
        "operands of i32[3,2]: no kernel for that type",
    ),
]


@pytest.mark.parametrize("target, operands, results, config, extra, why", CONTRACTS)
def test_lapack_calls_that_break_their_contract_are_refused(
    target, operands, results, config, extra, why
):
    text = custom_call(target, operands, results, config, extra)
    refused(text, f"custom call @{target}{at(results)} breaks the target's contract: {why}{BROKEN}")


@pytest.mark.skipif(
    not _compat.cpu_math_targets(), reason="this jaxlib has no CPU math kernels (jax 0.12.1+)"
)
@pytest.mark.parametrize("target", ["cpu_lgamma_ffi", "cpu_digamma_ffi"])
def test_the_math_kernels_take_one_float_array_and_give_it_back(target):
    # What jax 0.12.1 emits for lax.lgamma and lax.digamma on the CPU runs, as under jax.jit.
    x = np.array([0.5, 1.5, 2.5, 4.0], np.float32)
    ok = aotkit.load_module(custom_call(target, ["tensor<4xf32>"], ["tensor<4xf32>"]).encode())
    want = {"cpu_lgamma_ffi": jax.lax.lgamma, "cpu_digamma_ffi": jax.lax.digamma}[target](x)
    got = ok.compile()(x)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    for operands, results, why in [
        (["tensor<4xi32>"], ["tensor<4xi32>"], "operands of i32[4]: no kernel for that type"),
        (
            ["tensor<4xf32>"],
            ["tensor<5xf32>"],
            "operands (f32[4]) give results (f32[4]), but the call declares (f32[5])",
        ),
        (
            ["tensor<4xf32>", "tensor<4xf32>"],
            ["tensor<4xf32>"],
            "it takes 1 operand(s), got 2",
        ),
    ]:
        text = custom_call(target, operands, results)
        refused(text, f"custom call @{target}{AT} breaks the target's contract: {why}{BROKEN}")


@pytest.mark.parametrize(
    "extra, why",
    [
        (
            "api_version = 2 : i32",
            "api_version is 2; the kernel is called through XLA's typed FFI (api_version 1 "
            "with a dictionary mhlo.backend_config, or 4)",
        ),
        ('backend_config = "x"', 'backend_config is "x"; its attributes go in mhlo.backend_config'),
        (
            "called_computations = [@main]",
            "it calls other functions, which LAPACK kernels never do",
        ),
    ],
)
def test_lapack_calls_in_another_calling_convention_are_refused(extra, why):
    text = custom_call("lapack_sgetrf_ffi", [M33], GETRF_OK, "{}", extra)
    refused(
        text,
        f"custom call @lapack_sgetrf_ffi{at(GETRF_OK)} breaks the target's contract: {why}{BROKEN}",
    )


def test_a_complex_value_in_a_backend_config_is_refused():
    config = "{uplo = dense<(1.0,2.0)> : tensor<complex<f32>>}"
    text = custom_call("lapack_spotrf_ffi", [M33], [M33, "tensor<i32>"], config)
    refused(
        text,
        f"custom call @lapack_spotrf_ffi{at([M33, M33])} breaks the target's contract: uplo is "
        f"None; expected 76 ('L') or 85 ('U'){BROKEN}",
    )


# --- every LAPACK call JAX emits passes ------------------------------------------------------

S = jax.ShapeDtypeStruct


def taus(a):
    """Householder scalars for `a` as geqrf would shape them (the check reads shapes only;
    jax.lax.linalg has no public geqrf)."""
    return jnp.zeros(a.shape[:-2] + (min(a.shape[-2:]),), a.dtype)


SQUARE = {
    "cholesky": jnp.linalg.cholesky,
    "eigh": jnp.linalg.eigh,
    "eigh_upper": lambda a: jnp.linalg.eigh(a, UPLO="U"),
    "eig": jnp.linalg.eig,
    "eigvals": jnp.linalg.eigvals,
    "hessenberg": lax_linalg.hessenberg,
    "schur": jsl.schur,
    "schur_values": lambda a: lax_linalg.schur(a, compute_schur_vectors=False),
    "tridiagonal": lax_linalg.tridiagonal,
    "inv": jnp.linalg.inv,
    "slogdet": jnp.linalg.slogdet,
    "triangular_left": lambda a: lax_linalg.triangular_solve(
        a, a[..., :2], left_side=True, lower=True, transpose_a=True
    ),
    "triangular_right": lambda a: lax_linalg.triangular_solve(
        a, a[..., :2, :], conjugate_a=True, transpose_a=True, unit_diagonal=True
    ),
}
ANY = {
    "lu": lax_linalg.lu,
    "qr": jnp.linalg.qr,
    "qr_complete": lambda a: jnp.linalg.qr(a, mode="complete"),
    "qr_pivoting": lambda a: lax_linalg.qr(a, pivoting=True),
    "svd": jnp.linalg.svd,
    "svd_reduced": lambda a: jnp.linalg.svd(a, full_matrices=False),
    "svdvals": lambda a: jnp.linalg.svd(a, compute_uv=False),
    "svd_qr": lambda a: lax_linalg.svd(a, algorithm=lax_linalg.SvdAlgorithm.QR),
    "svd_qr_reduced": lambda a: lax_linalg.svd(
        a, full_matrices=False, algorithm=lax_linalg.SvdAlgorithm.QR
    ),
    "householder": lambda a: (
        lax_linalg.householder_product(a, taus(a)) if a.shape[-2] >= a.shape[-1] else a
    ),
    "ormqr_left": lambda a: lax_linalg.ormqr(a, taus(a), a[..., :1], left=True, transpose=False),
    "ormqr_right": lambda a: lax_linalg.ormqr(
        a, taus(a), jnp.swapaxes(a, -1, -2), left=False, transpose=True
    ),
    "tridiagonal_solve": lambda a: lax_linalg.tridiagonal_solve(
        a[..., 0], a[..., 0] + 4, a[..., 0], a
    ),
    "tridiagonal_solve_perturbed": lambda a: lax_linalg.tridiagonal_solve(
        a[..., 0], a[..., 0] + 4, a[..., 0], a, perturb_singular=True
    ),
}
SHAPES = {
    "square": (3, 3),
    "tall": (4, 3),
    "wide": (3, 4),
    "batched": (2, 3, 3),
    "empty": (0, 0),
    "one": (1, 1),
}


def jax_cases():
    for name, fn in {**SQUARE, **ANY}.items():
        for shape_name, shape in SHAPES.items():
            if name in SQUARE and shape[-1] != shape[-2]:
                continue
            if shape[-1] == 0 and name.startswith(("hessenberg", "tridiagonal", "ormqr")):
                continue  # JAX itself cannot lower these for an empty matrix
            yield pytest.param(fn, shape, id=f"{name}-{shape_name}")


@pytest.mark.parametrize("dtype", ["float32", "complex128"])
@pytest.mark.parametrize("fn, shape", list(jax_cases()))
def test_every_lapack_call_jax_emits_passes(fn, shape, dtype):
    # The check runs inside lower; a refusal would raise UnsupportedModuleError.
    with jax.enable_x64(True):
        lowered = aotkit.lower(fn, aotkit.ShapeDtype(shape, dtype), frontend="jax")
    assert lowered.flat_in_specs == (aotkit.ShapeDtype(shape, dtype),)


def test_the_jax_cases_call_every_allowed_target():
    seen = set()
    with jax.enable_x64(True):
        for param in jax_cases():
            fn, shape = param.values
            for dtype in ("float32", "float64", "complex64", "complex128"):
                text = jax.jit(fn).lower(jax.ShapeDtypeStruct(shape, dtype)).as_text()
                seen.update(re.findall(r"custom_call @(\w+)", text))
    # The math kernels come from lax.lgamma and lax.digamma: see the test of their contract.
    assert seen == set(trust.ALLOWED_TARGETS) - _compat.cpu_math_targets()


def test_jax_linalg_runs_on_cpu():
    a = np.array([[4.0, 1.0, 0.0], [1.0, 3.0, 1.0], [0.0, 1.0, 2.0]], np.float32)
    b = np.array([1.0, 2.0, 3.0], np.float32)

    def f(a, b):
        return jnp.linalg.solve(a, b), jnp.linalg.eigh(a)[0], jnp.linalg.svd(a)[1]

    x, w, s = aotkit.jit(f, frontend="jax")(a, b)
    np.testing.assert_allclose(x, np.linalg.solve(a, b), rtol=1e-5)
    np.testing.assert_allclose(w, np.linalg.eigvalsh(a), rtol=1e-5)
    np.testing.assert_allclose(s, np.linalg.svd(a)[1], rtol=1e-5)


def test_aotkit_linalg_written_to_a_file_passes(tmp_path):
    import aotkit.numpy as anp

    lowered = aotkit.lower(
        lambda a: anp.linalg.svd(anp.linalg.qr(a)[0])[1], aotkit.spec("f64[2,4,3]")
    )
    again = aotkit.load_module(lowered.as_bytecode())
    a = np.random.default_rng(0).standard_normal((2, 4, 3))
    np.testing.assert_allclose(again.compile()(a), np.linalg.svd(np.linalg.qr(a)[0])[1], rtol=1e-10)
