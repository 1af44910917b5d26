"""Modules that end the process inside jaxlib 0.10.2's reference interpreter (SIGFPE, SIGABRT
from an LLVM ERROR, SIGSEGV), each run on the interpreter backend in a fresh child process.

The backend must rewrite each one into a form the interpreter evaluates (and give XLA's
values) or refuse it with a clear error before `stablehlo.eval_module` is called; a child
killed by a signal has a negative return code, which fails the test with the signal's name.
What each module did to the raw interpreter is in its case's comment.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

_ROOT = Path(__file__).resolve().parents[2]

_CHILD = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    from aotkit import backends
    from aotkit.errors import CompileError
    from tests.backends import modules

    request = json.loads(sys.stdin.read())
    args = [np.array(a, dtype=d) for a, d in request["args"]]
    try:
        exe = backends.get("interpreter").compile(modules.parse(request["text"]))
        out = exe.execute(args)
    except (CompileError, TypeError) as e:
        print(json.dumps({"error": type(e).__name__, "message": str(e)}))
    else:
        values, names = [o.tolist() for o in out], [o.dtype.name for o in out]
        print(json.dumps({"values": values, "dtypes": names}))
    """
)


def run_in_child(text: str, *args: np.ndarray) -> dict:
    """Compiles and runs `text` on the interpreter in a new process; its JSON answer."""
    request = {"text": text, "args": [[a.tolist(), a.dtype.name] for a in args]}
    done = subprocess.run(
        [sys.executable, "-c", _CHILD],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        cwd=_ROOT,
        timeout=300,
    )
    if done.returncode < 0:
        pytest.fail(
            f"the child died of {signal.Signals(-done.returncode).name}: {done.stderr[-2000:]}"
        )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def module(name: str, args: list[str], result: str, body: str) -> str:
    params = ", ".join(f"%a{i}: {t}" for i, t in enumerate(args))
    return (
        f"module @{name} {{ func.func public @main({params}) -> {result} {{ {body}\n"
        f"return %0 : {result} }} }}"
    )


# --- rewritten: XLA's values ------------------------------------------------------------


@pytest.mark.parametrize(
    "op, element, a, b, expected",
    [
        # SIGFPE: the interpreter divides by the zero.
        ("divide", "i32", [7, -7, -(2**31), -(2**31)], [0, 2, 0, -1], [-1, -3, -1, -(2**31)]),
        ("divide", "ui32", [7, 7, 0, 9], [0, 2, 0, 9], [2**32 - 1, 3, 2**32 - 1, 1]),
        ("remainder", "i8", [7, -7, -128, -128], [0, 2, 0, -1], [7, -1, -128, 0]),
        ("remainder", "ui64", [7, 7, 2**63, 2**63], [0, 2, 0, 2**63], [7, 1, 2**63, 0]),
    ],
)
def test_integer_division_by_zero(op, element, a, b, expected):
    dtype = element.replace("ui", "uint") if element.startswith("ui") else "int" + element[1:]
    t = f"tensor<4x{element}>"
    text = module(op, [t, t], t, f"%0 = stablehlo.{op} %a0, %a1 : {t}")
    answer = run_in_child(text, np.array(a, dtype), np.array(b, dtype))
    assert answer == {"values": [expected], "dtypes": [dtype]}


def test_batched_triangular_solve():
    # SIGABRT: "LLVM ERROR: Incompatible index and shape found while flattening index".
    a = np.array([[[2.0, 0.0], [1.0, 4.0]], [[1.0, 0.0], [3.0, 2.0]]], np.float32)
    b = np.array([[[2.0], [9.0]], [[1.0], [7.0]]], np.float32)
    text = module(
        "solve",
        ["tensor<2x2x2xf32>", "tensor<2x2x1xf32>"],
        "tensor<2x2x1xf32>",
        """%0 = "stablehlo.triangular_solve"(%a0, %a1) {left_side = true, lower = true,
            unit_diagonal = false, transpose_a = #stablehlo<transpose NO_TRANSPOSE>}
            : (tensor<2x2x2xf32>, tensor<2x2x1xf32>) -> tensor<2x2x1xf32>""",
    )
    answer = run_in_child(text, a, b)
    assert answer == {"values": [[[[1.0], [2.0]], [[1.0], [2.0]]]], "dtypes": ["float32"]}


def test_triangular_solve_adjoint_of_a_real_matrix():
    # SIGSEGV.
    a = np.array([[2.0, 1.0], [0.0, 4.0]], np.float32)
    b = np.array([[2.0], [9.0]], np.float32)
    text = module(
        "adjoint",
        ["tensor<2x2xf32>", "tensor<2x1xf32>"],
        "tensor<2x1xf32>",
        """%0 = "stablehlo.triangular_solve"(%a0, %a1) {left_side = true, lower = false,
            unit_diagonal = false, transpose_a = #stablehlo<transpose ADJOINT>}
            : (tensor<2x2xf32>, tensor<2x1xf32>) -> tensor<2x1xf32>""",
    )
    # a^T x = b: 2 x0 = 2, x0 + 4 x1 = 9.
    assert run_in_child(text, a, b) == {"values": [[[1.0], [2.0]]], "dtypes": ["float32"]}


def test_convolution_with_output_feature_before_batch():
    # SIGABRT: "LLVM ERROR: Incompatible index and shape found while flattening index".
    x = np.arange(10, dtype=np.float32).reshape(2, 1, 5)
    w = np.array([[[1.0, -1.0]], [[2.0, 0.0]], [[0.0, 3.0]]], np.float32)
    text = module(
        "cnw",
        ["tensor<2x1x5xf32>", "tensor<3x1x2xf32>"],
        "tensor<3x2x4xf32>",
        """%0 = stablehlo.convolution(%a0, %a1) dim_numbers = [b, f, 0]x[o, i, 0]->[f, b, 0],
            window = {} {batch_group_count = 1 : i64, feature_group_count = 1 : i64}
            : (tensor<2x1x5xf32>, tensor<3x1x2xf32>) -> tensor<3x2x4xf32>""",
    )
    windows = np.stack([x[:, 0, i : i + 2] for i in range(4)], axis=1)  # (batch, pos, 2)
    expected = np.einsum("bpk,ok->obp", windows, w[:, 0, :])
    answer = run_in_child(text, x, w)
    assert answer == {"values": [expected.tolist()], "dtypes": ["float32"]}


# --- refused: a clear error -------------------------------------------------------------


def _assert_refused(answer: dict, kind: str, message: str) -> None:
    assert answer.get("error") == kind, answer
    assert message in answer["message"], answer["message"]


def test_value_of_dynamic_shape_is_refused():
    # SIGABRT: "LLVM ERROR: dynamic result types are not supported at the moment".
    text = module(
        "dyn",
        ["tensor<3xf32>"],
        "tensor<3xf32>",
        """%s = stablehlo.constant dense<[3]> : tensor<1xi64>
        %d = stablehlo.dynamic_broadcast_in_dim %a0, %s, dims = [0]
            : (tensor<3xf32>, tensor<1xi64>) -> tensor<?xf32>
        %0 = stablehlo.dynamic_reshape %d, %s : (tensor<?xf32>, tensor<1xi64>) -> tensor<3xf32>""",
    )
    answer = run_in_child(text, np.ones(3, np.float32))
    _assert_refused(answer, "CompileError", "has a value of dynamic shape tensor<?xf32>")


def test_dynamic_pad_with_runtime_padding_is_refused():
    # SIGABRT: "LLVM ERROR: Expected same type for an SSA register and its evaluated value"
    # when the padding read at run time disagrees with the result type.
    text = module(
        "pad",
        ["tensor<3xf32>", "tensor<1xi64>"],
        "tensor<8xf32>",
        """%hi = stablehlo.constant dense<[2]> : tensor<1xi64>
        %in = stablehlo.constant dense<[1]> : tensor<1xi64>
        %p = stablehlo.constant dense<-1.0> : tensor<f32>
        %0 = stablehlo.dynamic_pad %a0, %p, %a1, %hi, %in : (tensor<3xf32>, tensor<f32>,
            tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<8xf32>""",
    )
    answer = run_in_child(text, np.ones(3, np.float32), np.array([40]))
    _assert_refused(answer, "CompileError", "its edge_padding_low operand is not a constant")


def test_real_dynamic_slice_is_refused():
    # SIGABRT: "LLVM ERROR: Unsupported op: stablehlo.real_dynamic_slice".
    text = module(
        "rds",
        ["tensor<5xf32>"],
        "tensor<2xf32>",
        """%b = stablehlo.constant dense<[1]> : tensor<1xi64>
        %e = stablehlo.constant dense<[5]> : tensor<1xi64>
        %s = stablehlo.constant dense<[2]> : tensor<1xi64>
        %0 = stablehlo.real_dynamic_slice %a0, %b, %e, %s
            : (tensor<5xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<2xf32>""",
    )
    answer = run_in_child(text, np.ones(5, np.float32))
    _assert_refused(answer, "CompileError", "cannot run op stablehlo.real_dynamic_slice")


def test_call_of_a_function_without_a_body_is_refused():
    # SIGABRT: "LLVM ERROR: Expected same number of block arguments and runtime arguments".
    text = """module @decl {
      func.func private @ext(tensor<2xf32>) -> tensor<2xf32>
      func.func public @main(%a: tensor<2xf32>) -> tensor<2xf32> {
        %0 = func.call @ext(%a) : (tensor<2xf32>) -> tensor<2xf32>
        return %0 : tensor<2xf32>
      }
    }"""
    answer = run_in_child(text, np.ones(2, np.float32))
    _assert_refused(answer, "CompileError", "@main reaches function @ext, which has no body")


def test_unbounded_recursion_is_refused():
    # SIGSEGV: the interpreter recurses on the C stack until it overflows.
    text = """module @rec {
      func.func public @main(%a: tensor<i32>) -> tensor<i32> {
        %0 = func.call @forever(%a) : (tensor<i32>) -> tensor<i32>
        return %0 : tensor<i32>
      }
      func.func private @forever(%a: tensor<i32>) -> tensor<i32> {
        %0 = func.call @forever(%a) : (tensor<i32>) -> tensor<i32>
        return %0 : tensor<i32>
      }
    }"""
    answer = run_in_child(text, np.array(1, np.int32))
    _assert_refused(answer, "CompileError", "function @forever is recursive")
