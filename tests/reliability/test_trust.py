"""Loaded modules that used to end the process (segfault, abort, heap corruption) or block it
forever, each run through load_module -> compile -> run in a fresh child process.

Every case must end in a clear exception or the right value; a child killed by a signal has a
negative return code, which fails the test with the signal's name. What each case did before
the trust check (aotkit/frontends/trust.py) is in its comment; the exact wording of every
refusal is tested in-process in tests/frontends/test_trust.py.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

_ROOT = Path(__file__).resolve().parents[2]

# The child: loads each module (text or a file), compiles and runs it on `backend` with ones
# (or the given inputs), and prints one JSON answer per module.
_CHILD = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    import aotkit

    request = json.loads(sys.stdin.read())
    for case in request["cases"]:
        source = case["path"] if "path" in case else case["text"].encode()
        try:
            lowered = aotkit.load_module(source)
            compiled = lowered.compile(backend=case.get("backend", "cpu"))
            args = [np.asarray(a, s.dtype) for a, s in zip(case["args"], lowered.flat_in_specs)]
            if not case["args"]:
                args = [np.ones(s.shape, s.dtype) for s in lowered.flat_in_specs]
            out = compiled(*args)
            outs = out if isinstance(out, (tuple, list)) else [out]
            values = [np.asarray(o) for o in outs]
            answer = {"values": [v.tolist() if v.dtype.kind != "c" else [v.real.tolist(),
                      v.imag.tolist()] for v in values], "dtypes": [v.dtype.name for v in values]}
        except Exception as e:
            answer = {"error": type(e).__name__, "message": str(e)}
        print(json.dumps(answer), flush=True)
    """
)


def run_child(cases: list[dict], timeout: float = 300) -> list[dict]:
    """Runs `cases` in one new process; their answers. A signal fails the test."""
    done = subprocess.run(
        [sys.executable, "-c", _CHILD],
        input=json.dumps({"cases": cases}),
        capture_output=True,
        text=True,
        cwd=_ROOT,
        timeout=timeout,
    )
    if done.returncode < 0:
        pytest.fail(
            f"the child died of {signal.Signals(-done.returncode).name}: {done.stderr[-2000:]}"
        )
    assert done.returncode == 0, done.stderr[-2000:]
    answers = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert len(answers) == len(cases), done.stdout
    return answers


def refused(answer: dict, message: str, kind: str = "UnsupportedModuleError") -> None:
    assert answer.get("error") == kind, answer
    assert message in answer["message"], answer["message"]


def module(
    body: str, args: str = "%a: tensor<2xf32>", result: str = "tensor<2xf32>", extra: str = ""
) -> str:
    """`module @m` with `@main(args) -> result` (its body starts on line 3) and `extra`."""
    return f"module @m {{\nfunc.func public @main({args}) -> {result} {{\n{body}\n}}\n{extra}}}\n"


# --- LAPACK modules from files and from the JAX front end --------------------------------------


def test_a_jax_export_of_linalg_solve_runs(tmp_path):
    # Was: exit 139 in `aotkit run` (jaxlib's LAPACK targets never registered in the process).
    import jax
    import jax.numpy as jnp

    spec = (jax.ShapeDtypeStruct((3, 3), jnp.float32), jax.ShapeDtypeStruct((3,), jnp.float32))
    exported = jax.export.export(jax.jit(jnp.linalg.solve), platforms=["cpu"])(*spec)
    path = tmp_path / "solve.jax_export"
    path.write_bytes(exported.serialize())
    a = np.array([[4.0, 1.0, 0.0], [1.0, 3.0, 1.0], [0.0, 1.0, 2.0]], np.float32)
    b = np.array([1.0, 2.0, 3.0], np.float32)
    (answer,) = run_child([{"path": str(path), "args": [a.tolist(), b.tolist()]}])
    np.testing.assert_allclose(answer["values"][0], np.linalg.solve(a, b), rtol=1e-5)
    np.save(tmp_path / "a.npy", a)
    np.save(tmp_path / "b.npy", b)
    done = subprocess.run(
        [sys.executable, "-m", "aotkit", "run", str(path), "-q", "--inputs"]
        + [str(tmp_path / "a.npy"), str(tmp_path / "b.npy")],
        capture_output=True,
        text=True,
        cwd=_ROOT,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("out: f32[3]\n")


def test_the_jax_front_end_runs_linalg():
    code = textwrap.dedent(
        """
        import jax.numpy as jnp, numpy as np, aotkit
        a = np.array([[4.0, 1.0], [1.0, 3.0]], np.float32)
        f = aotkit.jit(lambda a: (jnp.linalg.solve(a, a[0]), jnp.linalg.eigh(a)[0],
                                  jnp.linalg.svd(a)[1], jnp.linalg.qr(a)[1]), frontend="jax")
        x, w, s, r = f(a)
        assert np.allclose(x, np.linalg.solve(a, a[0]), rtol=1e-5)
        assert np.allclose(w, np.linalg.eigvalsh(a), rtol=1e-5)
        assert np.allclose(s, np.linalg.svd(a)[1], rtol=1e-5)
        print("ok")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=_ROOT, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "ok"


# --- what the check refuses -------------------------------------------------------------------


def test_a_host_callback_is_refused():
    # Was: loaded, compiled, then SIGSEGV when run (what jax.pure_callback lowers to).
    text = module(
        '%0 = stablehlo.custom_call @xla_ffi_python_cpu_callback(%a) {backend_config = "", '
        "mhlo.backend_config = {index = 0 : ui64}} : (tensor<2xf32>) -> tensor<2xf32>\n"
        "return %0 : tensor<2xf32>"
    )
    (answer,) = run_child([{"text": text, "args": []}])
    refused(answer, "custom call @xla_ffi_python_cpu_callback at line 3, column 6 calls back")


GETRF = (
    "%0:3 = stablehlo.custom_call @lapack_sgetrf_ffi(%a) {{mhlo.backend_config = {{}}}} : "
    "(tensor<3x3xf32>) -> ({})\nreturn %0#1 : tensor<3xi32>"
)


def test_a_lapack_call_with_the_wrong_result_shape_is_refused():
    # Was: heap corruption ("malloc(): invalid size"), the process aborted.
    bad = module(
        GETRF.format("tensor<1x1xf32>, tensor<3xi32>, tensor<i32>"),
        "%a: tensor<3x3xf32>",
        "tensor<3xi32>",
    )
    good = module(
        GETRF.format("tensor<3x3xf32>, tensor<3xi32>, tensor<i32>"),
        "%a: tensor<3x3xf32>",
        "tensor<3xi32>",
    )
    a = [[0.0, 1.0, 0.0], [2.0, 0.0, 0.0], [0.0, 0.0, 3.0]]
    answers = run_child([{"text": bad, "args": []}, {"text": good, "args": [a]}])
    refused(answers[0], "custom call @lapack_sgetrf_ffi at line 3, column 8 breaks the target's")
    assert answers[1] == {"values": [[2, 2, 3]], "dtypes": ["int32"]}  # 1-based pivots


CALL = "%0 = func.call @{}(%a) : (tensor<2xf32>) -> tensor<2xf32>\nreturn %0 : tensor<2xf32>"
F = "func.func private @f(%a: tensor<2xf32>) -> tensor<2xf32>"


def test_recursion_and_bodiless_functions_are_refused():
    # Was: SIGSEGV while compiling, for each module.
    texts = [
        module(CALL.format("main")),
        module(CALL.format("f"), extra=f"{F} {{\n{CALL.format('f')}\n}}\n"),
        module(CALL.format("f"), extra=F + "\n"),
    ]
    answers = run_child([{"text": t, "args": []} for t in texts])
    refused(answers[0], "func.call @main at line 3, column 6 makes the call graph recursive")
    refused(answers[1], "func.call @f at line 7, column 6 makes the call graph recursive")
    refused(answers[2], "function @f at line 6, column 1 is declared without a body")


FEEDS = {
    # Were: compiled, then blocked forever when run (infeed, outfeed); compile errors (send,
    # recv) that the check now names before XLA sees them.
    "infeed": '%t = stablehlo.create_token : !stablehlo.token\n%0:2 = "stablehlo.infeed"(%t) '
    '{infeed_config = ""} : (!stablehlo.token) -> (tensor<2xf32>, !stablehlo.token)\n'
    "return %0#0 : tensor<2xf32>",
    "outfeed": '%t = stablehlo.create_token : !stablehlo.token\n%0 = "stablehlo.outfeed"(%a, '
    '%t) {outfeed_config = ""} : (tensor<2xf32>, !stablehlo.token) -> !stablehlo.token\n'
    "return %a : tensor<2xf32>",
    "send": '%t = stablehlo.create_token : !stablehlo.token\n%0 = "stablehlo.send"(%a, %t) '
    "{channel_handle = #stablehlo.channel_handle<handle = 1, type = 2>, is_host_transfer = "
    "true} : (tensor<2xf32>, !stablehlo.token) -> !stablehlo.token\nreturn %a : tensor<2xf32>",
    "recv": '%t = stablehlo.create_token : !stablehlo.token\n%0:2 = "stablehlo.recv"(%t) '
    "{channel_handle = #stablehlo.channel_handle<handle = 1, type = 3>, is_host_transfer = "
    "true} : (!stablehlo.token) -> (tensor<2xf32>, !stablehlo.token)\n"
    "return %0#0 : tensor<2xf32>",
}


def test_infeed_outfeed_send_and_recv_are_refused():
    start = time.monotonic()
    answers = run_child([{"text": module(body), "args": []} for body in FEEDS.values()])
    for answer, op in zip(answers, FEEDS, strict=True):
        refused(answer, f"op stablehlo.{op} at line 4, column")
    assert time.monotonic() - start < 120


def test_token_programs_without_feeds_run():
    text = module(
        "%t = stablehlo.create_token : !stablehlo.token\n%u = stablehlo.after_all %t, %t : "
        "!stablehlo.token\nreturn %a : tensor<2xf32>"
    )
    (answer,) = run_child([{"text": text, "args": [[1.0, 2.0]]}])
    assert answer == {"values": [[1.0, 2.0]], "dtypes": ["float32"]}


REDUCER = (
    "({\n^bb0(%x: tensor<f32>, %y: tensor<f32>):\n%s = stablehlo.add %x, %y : tensor<f32>\n"
    "stablehlo.return %s : tensor<f32>\n})"
)
COLLECTIVES = {
    "all_reduce": f'%0 = "stablehlo.all_reduce"(%a) {REDUCER} {{replica_groups = dense<[[0]]> '
    ": tensor<1x1xi64>} : (tensor<2xf32>) -> tensor<2xf32>",
    "all_gather": '%0 = "stablehlo.all_gather"(%a) {all_gather_dim = 0 : i64, replica_groups = '
    "dense<[[0, 1]]> : tensor<1x2xi64>} : (tensor<2xf32>) -> tensor<2xf32>",
    "all_to_all": '%0 = "stablehlo.all_to_all"(%a) {split_dimension = 0 : i64, '
    "concat_dimension = 0 : i64, split_count = 2 : i64, replica_groups = dense<[[0, 1]]> : "
    "tensor<1x2xi64>} : (tensor<2xf32>) -> tensor<2xf32>",
    "collective_permute": '%0 = "stablehlo.collective_permute"(%a) {source_target_pairs = '
    "dense<[[0, 1], [1, 0]]> : tensor<2x2xi64>, channel_handle = "
    "#stablehlo.channel_handle<handle = 1, type = 1>} : (tensor<2xf32>) -> tensor<2xf32>",
    "collective_broadcast": '%0 = "stablehlo.collective_broadcast"(%a) {replica_groups = '
    "dense<[[0, 1]]> : tensor<1x2xi64>} : (tensor<2xf32>) -> tensor<2xf32>",
}


def test_collectives_on_one_device_are_values_or_errors():
    # Left to XLA: on one device it runs all_reduce and refuses the rest with an error.
    texts = [module(body + "\nreturn %0 : tensor<2xf32>") for body in COLLECTIVES.values()]
    answers = run_child([{"text": t, "args": [[1.0, 2.0]]} for t in texts])
    assert answers[0] == {"values": [[1.0, 2.0]], "dtypes": ["float32"]}
    for name, answer in zip(list(COLLECTIVES)[1:], answers[1:], strict=True):
        assert "error" in answer, (name, answer)


def test_targets_outside_the_allowlist_are_refused():
    text = module(
        "%0 = stablehlo.custom_call @my_kernel(%a) : (tensor<2xf32>) -> tensor<2xf32>\n"
        "return %0 : tensor<2xf32>"
    )
    (answer,) = run_child([{"text": text, "args": []}])
    refused(answer, "custom call @my_kernel at line 3, column 6 targets a function aotkit does")


# --- shapes that overflow -----------------------------------------------------------------------


def test_shapes_too_large_to_address_are_errors():
    # Was: SIGABRT ("overflow in static extent product") compiling each of these, and a raw
    # binding TypeError for a dimension of 2**64.
    code = textwrap.dedent(
        """
        import aotkit, aotkit.numpy as anp
        for shape in [(2**62,), (2**31, 2**31), (2**63,), (2**64,), (0, 2**64)]:
            try:
                aotkit.jit(lambda x: x + 1).lower(aotkit.ShapeDtype(shape, "f32")).compile()
            except ValueError as e:
                print(str(e).split(";")[0])
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=_ROOT, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines() == [
        "ShapeDtype: shape (4611686018427387904,) of float32 holds 4,611,686,018,427,387,904 "
        "elements (18,446,744,073,709,551,616 bytes), more than XLA can address "
        "(9,223,372,036,854,775,807 bytes)",
        "ShapeDtype: shape (2147483648, 2147483648) of float32 holds 4,611,686,018,427,387,904 "
        "elements (18,446,744,073,709,551,616 bytes), more than XLA can address "
        "(9,223,372,036,854,775,807 bytes)",
        "ShapeDtype: dimension 9223372036854775808 of shape (9223372036854775808,) does not "
        "fit in 64 bits (at most 2**63 - 1)",
        "ShapeDtype: dimension 18446744073709551616 of shape (18446744073709551616,) does not "
        "fit in 64 bits (at most 2**63 - 1)",
        "ShapeDtype: dimension 18446744073709551616 of shape (0, 18446744073709551616) does not "
        "fit in 64 bits (at most 2**63 - 1)",
    ]


def test_modules_with_shapes_too_large_to_address_are_refused():
    big = "tensor<4294967296x4294967296xf32>"
    signature = module("return %a : " + big, f"%a: {big}", big)
    inner = module(
        f"%0 = stablehlo.broadcast_in_dim %a, dims = [] : (tensor<f32>) -> {big}\n"
        "%c = stablehlo.constant dense<0.0> : tensor<f32>\n"
        f"%r = stablehlo.reduce(%0 init: %c) applies stablehlo.add across dimensions = [0, 1] "
        f": ({big}, tensor<f32>) -> tensor<f32>\nreturn %r : tensor<f32>",
        "%a: tensor<f32>",
        "tensor<f32>",
    )
    answers = run_child([{"text": signature, "args": []}, {"text": inner, "args": [1.0]}])
    refused(
        answers[0], f"@main has type {big}: ShapeDtype: shape (4294967296, 4294967296)", "TypeError"
    )
    refused(
        answers[1], f"op stablehlo.broadcast_in_dim at line 3, column 6 has a value of type {big}"
    )


def test_cli_shapes_too_large_are_a_usage_error():
    done = subprocess.run(
        [sys.executable, "-m", "aotkit", "lower", "examples/mlp.py:gelu", "--shapes"]
        + ["f32[4611686018427387904]"],
        capture_output=True,
        text=True,
        cwd=_ROOT,
        timeout=300,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines()[-1] == (
        "aotkit lower: error: argument --shapes: ShapeDtype: shape (4611686018427387904,) of "
        "float32 holds 4,611,686,018,427,387,904 elements (18,446,744,073,709,551,616 bytes), "
        "more than XLA can address (9,223,372,036,854,775,807 bytes); use a smaller shape"
    )


# --- complex constants ------------------------------------------------------------------------

# A StableHLO testdata module (add_any_dtypes_lhs_complex64_2__rhs_complex64_2.mlir's
# computation, its check.eq removed: the test harness's checks are custom calls aotkit refuses).
COMPLEX = """module @jit_testcase {
  func.func public @main() -> tensor<2xcomplex<f32>> {
    %0:2 = call @inputs() : () -> (tensor<2xcomplex<f32>>, tensor<2xcomplex<f32>>)
    %2 = stablehlo.add %0#0, %0#1 : tensor<2xcomplex<f32>>
    return %2 : tensor<2xcomplex<f32>>
  }
  func.func private @inputs() -> (tensor<2xcomplex<f32>>, tensor<2xcomplex<f32>>) {
    %0 = stablehlo.constant dense<[(-1.5,-2.0), (1.0,-1.25)]> : tensor<2xcomplex<f32>>
    %1 = stablehlo.constant dense<[(-1.25,-1.5), (-1.5,-2.5)]> : tensor<2xcomplex<f32>>
    return %0, %1 : tensor<2xcomplex<f32>>, tensor<2xcomplex<f32>>
  }
}
"""


def test_modules_with_complex_constants_load_and_run(tmp_path):
    # Was: "aotkit's MLIR sandbox process failed (TypeError: Can't cast unknown element type
    # DenseTypedElementsAttr ...)" for every such file.
    import jax
    import jax.numpy as jnp

    exported = jax.export.export(jax.jit(lambda x: x * (1 + 2j)), platforms=["cpu"])(
        jax.ShapeDtypeStruct((2,), jnp.complex64)
    )
    path = tmp_path / "scale.jax_export"
    path.write_bytes(exported.serialize())
    cases = [
        {"text": COMPLEX, "args": [], "backend": backend} for backend in ("cpu", "interpreter")
    ] + [{"path": str(path), "args": [], "backend": backend} for backend in ("cpu", "interpreter")]
    answers = run_child(cases)
    for answer in answers[:2]:
        assert answer == {"values": [[[-2.75, -0.5], [-3.5, -3.75]]], "dtypes": ["complex64"]}
    for answer in answers[2:]:
        assert answer == {"values": [[[1.0, 1.0], [2.0, 2.0]]], "dtypes": ["complex64"]}


def test_a_complex_value_in_argument_attributes_is_an_error_not_an_abort():
    # Was (once the sandbox read complex constants): std::terminate in this process, reading
    # the attribute through NamedAttribute.attr while dropping placement attributes.
    text = module(
        "return %a : tensor<2xf32>",
        "%a: tensor<2xf32> {mhlo.foo = dense<(1.0,2.0)> : tensor<complex<f32>>, "
        'mhlo.sharding = "{replicated}"}',
    )
    (answer,) = run_child([{"text": text, "args": []}])
    refused(
        answer,
        "load_module: <bytes>: @main's argument or result attribute mhlo.foo holds a value the "
        "MLIR Python bindings cannot read",
        "ValueError",
    )


# --- jax.export versions ------------------------------------------------------------------------


def test_jax_export_calling_convention_versions_are_checked(tmp_path):
    import dataclasses

    import jax
    import jax.numpy as jnp

    exported = jax.export.export(jax.jit(lambda x: x + 1), platforms=["cpu"])(
        jax.ShapeDtypeStruct((2,), jnp.float32)
    )
    path = tmp_path / "future.jax_export"
    path.write_bytes(dataclasses.replace(exported, calling_convention_version=99).serialize())
    (answer,) = run_child([{"path": str(path), "args": []}])
    low = jax.export.minimum_supported_calling_convention_version
    high = jax.export.maximum_supported_calling_convention_version
    refused(
        answer,
        f"load_module: {path} uses jax.export calling convention version 99; this JAX "
        f"({jax.__version__}) reads versions {low} to {high}: re-export it with a JAX whose "
        "versions include it",
        "ValueError",
    )


# --- aotkit run --timeout -----------------------------------------------------------------------

SPIN = """module @spin {
  func.func public @main(%n: tensor<i64>) -> tensor<i64> {
    %c0 = stablehlo.constant dense<0> : tensor<i64>
    %c1 = stablehlo.constant dense<1> : tensor<i64>
    %r:2 = stablehlo.while(%i = %c0, %acc = %c0) : tensor<i64>, tensor<i64>
     cond {
      %p = stablehlo.compare LT, %i, %n, SIGNED : (tensor<i64>, tensor<i64>) -> tensor<i1>
      stablehlo.return %p : tensor<i1>
    } do {
      %i1 = stablehlo.add %i, %c1 : tensor<i64>
      %a1 = stablehlo.xor %acc, %i : tensor<i64>
      stablehlo.return %i1, %a1 : tensor<i64>, tensor<i64>
    }
    return %r#1 : tensor<i64>
  }
}
"""


def _aotkit(*argv: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "aotkit", *argv],
        capture_output=True,
        text=True,
        cwd=_ROOT,
        timeout=timeout,
    )


def test_run_timeout_kills_a_runaway_computation(tmp_path):
    # Was: no way out; the call runs to its end (10**15 iterations: days) and Ctrl-C is lost.
    (tmp_path / "spin.mlir").write_text(SPIN)
    np.save(tmp_path / "n.npy", np.int64(10**15))
    start = time.monotonic()
    done = _aotkit("run", str(tmp_path / "spin.mlir"), "--inputs", str(tmp_path / "n.npy"),
                   "--timeout", "3")  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert time.monotonic() - start < 60
    assert done.stderr.splitlines()[-1] == (
        f"aotkit run: error: --timeout: {tmp_path / 'spin.mlir'} did not finish within 3 s "
        "(load, compile and run); its worker process was killed. Raise --timeout, or check the "
        "module for a loop that does not end"
    )


def test_run_timeout_gives_the_answer_when_in_time(tmp_path):
    (tmp_path / "spin.mlir").write_text(SPIN)
    np.save(tmp_path / "n.npy", np.int64(5))
    done = _aotkit("run", str(tmp_path / "spin.mlir"), "--inputs", str(tmp_path / "n.npy"),
                   "--timeout", "240", "-q")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout == "out: i64[]\n4\n"  # 0 ^ 1 ^ 2 ^ 3 ^ 4


def test_run_timeout_reports_a_crash_in_the_worker(tmp_path):
    (tmp_path / "crash.py").write_text(
        "import os, signal\n\ndef f(x):\n    os.kill(os.getpid(), signal.SIGSEGV)\n"
    )
    done = _aotkit("run", f"{tmp_path / 'crash.py'}:f", "--shapes", "f32[2]", "--timeout", "240")
    assert done.returncode == 1, done.stderr
    assert done.stderr.splitlines()[-1] == (
        f"aotkit run: error: the worker process running {tmp_path / 'crash.py'}:f died of "
        "SIGSEGV; nothing in this process was lost. Rerun with --traceback, and report it "
        "with the file"
    )


def test_run_timeout_must_be_positive():
    done = _aotkit("run", "examples/mlp.py:gelu", "--shapes", "f32[4]", "--timeout", "-1")
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1] == (
        "aotkit run: error: argument --timeout: expected a positive number of seconds, got '-1'"
    )
