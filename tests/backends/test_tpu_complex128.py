"""complex128 before XLA:TPU (aotkit/backends/tpu_complex128.py), checked without a TPU.

`legalize` rewrites the converts XLA:TPU aborts on into converts of real parts and a
`stablehlo.complex`; the oracle for the rewrite is NumPy's `astype`, run on the CPU and
interpreter backends for the module as written and as rewritten (same values, signed zeros,
NaNs and infinities included, and the same result dtype). The ops XLA:TPU aborts on are refused
with an UnsupportedModuleError that names them and where they are. Compiling the rewritten
modules for a deviceless TPU (libtpu) is tests/backends/test_deviceless_tpu.py's job.
"""

from __future__ import annotations

import re
import sys

import hypothesis.extra.numpy as hnp
import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jaxlib.mlir import ir

import aotkit
from aotkit import _context, modules
from aotkit.backends import tpu_complex128
from aotkit.errors import UnsupportedModuleError
from tests.backends import modules as hand

BF16 = np.dtype(ml_dtypes.bfloat16)
SOURCES = [
    np.dtype(d)
    for d in (
        np.bool_, np.int8, np.int32, np.int64, np.uint8, np.uint32, np.uint64, np.float16, BF16,
        np.float32, np.float64, np.complex64,
    )
]  # fmt: skip
SHAPE = (3, 4)
BACKENDS = ["cpu", "interpreter"]
WHERE = "Lowered.compile(f)"


# --- values and modules ---------------------------------------------------------------------


def _values(dtype: np.dtype) -> np.ndarray:
    """12 values of `dtype` for a 3x4 tensor: the extremes, zeros of both signs, NaN, inf."""
    if dtype == np.bool_:
        flat = np.array([True, False] * 6)
    elif dtype.kind in "iu":
        info = np.iinfo(dtype)
        flat = np.array(
            [info.min, info.max, 0, 1, info.max - 1, info.min + 1, 7, info.max // 3,
             info.min // 3, 100, 2, info.max // 2],
            dtype=dtype,
        )  # fmt: skip
    elif dtype.kind != "c":  # the floats (bfloat16's kind is "V")
        info = ml_dtypes.finfo(dtype)
        flat = np.array(
            [np.nan, np.inf, -np.inf, -0.0, 0.0, float(info.max), float(info.min),
             float(info.tiny), float(info.smallest_subnormal), 1.5, -2.25, 1 / 3],
            dtype=np.float64,
        ).astype(dtype)  # fmt: skip
    else:
        # The parts are converted apart: pair special values with others, both ways.
        parts = _values(np.dtype(np.float32)).ravel()
        flat = np.empty(12, dtype)
        flat.real, flat.imag = parts, parts[::-1]
    return flat.reshape(SHAPE)


def _wide_values() -> np.ndarray:
    """complex128 values whose parts round, overflow, underflow or are special in complex64."""
    parts = np.array(
        [1e300, -1e300, 1e-300, -1e-300, np.nan, np.inf, -0.0, 0.1, 1 / 3, 3.4028235e38,
         2.0**-149, 2.0**-150 * 1.5],
    )  # fmt: skip
    flat = np.empty(12, np.complex128)
    flat.real, flat.imag = parts, parts[::-1]
    return flat.reshape(SHAPE)


# XLA:CPU runs with float32 subnormals flushed to zero, on what it reads and what it writes
# (the module as written does the same): on 'cpu', NumPy's values are flushed alike.
_FLUSHED = {np.dtype(np.float32), BF16, np.dtype(np.complex64)}


def _flushed(a: np.ndarray, backend: str) -> np.ndarray:
    """`a` with its float32 subnormals as zeros of their sign, on 'cpu'."""
    if backend != "cpu" or a.dtype not in _FLUSHED:
        return a
    tiny = np.finfo(np.float32).tiny

    def flush(part):
        return np.where(np.abs(part) < tiny, np.copysign(0, part), part).astype(part.dtype)

    if a.dtype.kind == "c":
        out = np.empty_like(a)
        out.real, out.imag = flush(a.real), flush(a.imag)
        return out
    return flush(a)


def _convert_module(source, target, shape=SHAPE) -> ir.Module:
    a, b = hand.tensor(shape, source), hand.tensor(shape, target)
    return hand.module("f", [a], [b], f"%0 = stablehlo.convert %a0 : ({a}) -> {b}\nreturn %0 : {b}")


def _text(module: ir.Module) -> str:
    with _context.of(module):
        return module.operation.get_asm(enable_debug_info=True)


def _converts(module: ir.Module) -> list[tuple[str, str]]:
    """(source, result) element types of every `stablehlo.convert`, regions included."""
    found = []

    def visit(op):
        if op.name == "stablehlo.convert":
            types = (op.operands[0].type, op.results[0].type)
            found.append(tuple(str(ir.RankedTensorType(t).element_type) for t in types))
        return ir.WalkResult.ADVANCE

    with _context.of(module):
        module.operation.walk(visit)
    return found


def _aborting_converts(module: ir.Module) -> list[tuple[str, str]]:
    """The converts XLA:TPU aborts on: to complex128, and complex128 to complex64."""
    return [
        (s, t)
        for s, t in _converts(module)
        if t == "complex<f64>" or (s, t) == ("complex<f64>", "complex<f32>")
    ]


def _run(module: ir.Module, backend: str, *args) -> np.ndarray:
    lowered = aotkit.load_module(modules.bytecode(module))
    return np.asarray(lowered.compile(backend=backend)(*args))


def _assert_same(got: np.ndarray, want: np.ndarray, label: str) -> None:
    """Equal bit for bit in meaning: dtype, shape, values, NaN where NaN, signs of zeros."""
    assert got.dtype == want.dtype, f"{label}: dtype {got.dtype}, NumPy gives {want.dtype}"
    assert got.shape == want.shape, f"{label}: shape {got.shape}, NumPy gives {want.shape}"
    for part in (np.real, np.imag):
        g, w = part(got), part(want)
        np.testing.assert_array_equal(g, w, err_msg=label)
        np.testing.assert_array_equal(np.signbit(g), np.signbit(w), err_msg=f"{label}: signs")


def _body(module: ir.Module) -> list:
    with _context.of(module):
        return list(modules.main_function(module).regions[0].blocks[0].operations)


def _legalized(module: ir.Module) -> ir.Module:
    out = tpu_complex128.legalize(module, WHERE)
    assert out is not module
    with _context.of(out):
        assert out.operation.verify()
    assert _aborting_converts(out) == []
    return out


# --- converts to complex128 are rewritten, with NumPy's values -------------------------------


@pytest.mark.parametrize("source", SOURCES, ids=str)
def test_convert_to_complex128_is_rewritten(source):
    module = _convert_module(source, np.complex128)
    assert len(_aborting_converts(module)) == 1
    out = _legalized(module)
    kinds = [op.operation.name for op in _body(out)]
    assert kinds.count("stablehlo.complex") == 1
    # Each part is converted to float64 (a convert from f64 to f64 is left out).
    part_converts = [t for _, t in _converts(out)]
    assert set(part_converts) <= {"f64"}
    assert len(part_converts) == (2 if source == np.complex64 else int(source != np.float64))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("which", ["as_written", "legalized"])
@pytest.mark.parametrize("source", SOURCES, ids=str)
def test_convert_to_complex128_matches_numpy(source, which, backend):
    module = _convert_module(source, np.complex128)
    if which == "legalized":
        module = _legalized(module)
    x = _values(source)
    with np.errstate(all="ignore"):
        want = _flushed(x, backend).astype(np.complex128)
    _assert_same(_run(module, backend, x), want, f"{source} on {backend} ({which})")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("which", ["as_written", "legalized"])
def test_complex128_to_complex64_matches_numpy(which, backend):
    module = _convert_module(np.complex128, np.complex64)
    assert _aborting_converts(module) == [("complex<f64>", "complex<f32>")]
    if which == "legalized":
        module = _legalized(module)
        assert sorted(_converts(module)) == [("f64", "f32"), ("f64", "f32")]
    x = _wide_values()
    with np.errstate(all="ignore"):
        want = _flushed(x.astype(np.complex64), backend)
    _assert_same(_run(module, backend, x), want, f"complex128 -> complex64 on {backend}")


@pytest.mark.parametrize("backend", BACKENDS)
def test_complex128_to_complex128_convert_is_rewritten_to_itself(backend):
    module = _legalized(_convert_module(np.complex128, np.complex128))
    assert _converts(module) == []
    x = _wide_values()
    _assert_same(_run(module, backend, x), x, f"complex128 -> complex128 on {backend}")


@pytest.mark.parametrize("backend", BACKENDS)
def test_traced_int_times_complex(backend):
    """NumPy's promotion makes complex128 of int32 * a Python complex: the tracer converts the
    int32 array (and the weak complex64 scalar) to complex128."""
    x = np.arange(3, dtype=np.int32)
    lowered = aotkit.jit(lambda a, b: a * b).lower(x, 2 - 1j)
    assert ("i32", "complex<f64>") in _aborting_converts(lowered.module)
    before = _text(lowered.module)
    out = _legalized(lowered.module)
    assert _text(lowered.module) == before
    want = x * (2 - 1j)
    assert want.dtype == np.complex128
    _assert_same(_run(out, backend, x, np.complex64(2 - 1j)), want, f"int32 * complex on {backend}")
    _assert_same(np.asarray(lowered.compile(backend=backend)(x, 2 - 1j)), want, "as traced")


@pytest.mark.parametrize("backend", BACKENDS)
def test_converts_inside_regions_and_private_functions(backend):
    c, i = "tensor<2xcomplex<f64>>", "tensor<2xi32>"
    module = hand.parse(
        f"""module @f {{
          func.func private @g(%x: {i}) -> {c} {{
            %0 = stablehlo.convert %x : ({i}) -> {c}
            return %0 : {c}
          }}
          func.func public @main(%p: tensor<i1>, %x: {i}) -> {c} {{
            %0 = "stablehlo.if"(%p) ({{
              %1 = stablehlo.convert %x : ({i}) -> {c}
              %2 = stablehlo.negate %1 : {c}
              stablehlo.return %2 : {c}
            }}, {{
              %3 = func.call @g(%x) : ({i}) -> {c}
              stablehlo.return %3 : {c}
            }}) : (tensor<i1>) -> {c}
            return %0 : {c}
          }}
        }}"""
    )
    assert len(_aborting_converts(module)) == 2
    out = _legalized(module)
    x = np.array([-3, 2**31 - 1], dtype=np.int32)
    for p, want in [(True, -x.astype(np.complex128)), (False, x.astype(np.complex128))]:
        _assert_same(_run(out, backend, np.bool_(p), x), want, f"branch {p} on {backend}")


_SHAPES = hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4)


@settings(max_examples=25, deadline=None)
@given(data=st.data(), source=st.sampled_from(SOURCES), shape=_SHAPES)
def test_any_shape_and_source_matches_numpy(data, source, shape):
    wide = np.dtype(np.float32) if source == BF16 else source
    x = data.draw(hnp.arrays(wide, shape)).astype(source)
    out = _legalized(_convert_module(source, np.complex128, shape))
    with np.errstate(all="ignore"):
        want = _flushed(x, "cpu").astype(np.complex128)
    _assert_same(_run(out, "cpu", x), want, f"{source}{list(shape)}")


# --- ops XLA:TPU aborts on are refused, naming the op and where it is ------------------------

# The complex128 ops XLA:TPU aborts on: (operand count, expression). In the expression
# {t} is the complex tensor type, {r} the real one of its parts (abs gives a real result).
_OPS = {
    "stablehlo.abs": (1, "stablehlo.abs %a0 : ({t}) -> {r}"),
    "stablehlo.atan2": (2, "stablehlo.atan2 %a0, %a1 : {t}"),
    "stablehlo.cosine": (1, "stablehlo.cosine %a0 : {t}"),
    "stablehlo.divide": (2, "stablehlo.divide %a0, %a1 : {t}"),
    "stablehlo.exponential_minus_one": (1, "stablehlo.exponential_minus_one %a0 : {t}"),
    "stablehlo.power": (2, "stablehlo.power %a0, %a1 : {t}"),
    "stablehlo.rsqrt": (1, "stablehlo.rsqrt %a0 : {t}"),
    "stablehlo.sine": (1, "stablehlo.sine %a0 : {t}"),
    "stablehlo.tan": (1, "stablehlo.tan %a0 : {t}"),
    "stablehlo.tanh": (1, "stablehlo.tanh %a0 : {t}"),
    "stablehlo.logistic": (1, "stablehlo.logistic %a0 : {t}"),
    "stablehlo.cholesky": (1, "stablehlo.cholesky %a0, lower = true : {t}"),
    "stablehlo.triangular_solve": (
        2,
        '"stablehlo.triangular_solve"(%a0, %a1) {{left_side = true, lower = true, '
        "unit_diagonal = false, transpose_a = #stablehlo<transpose NO_TRANSPOSE>}} : "
        "({t}, {t}) -> {t}",
    ),
    "chlo.tan": (1, "chlo.tan %a0 : {t} -> {t}"),
    "chlo.broadcast_divide": (2, "chlo.broadcast_divide %a0, %a1 : ({t}, {t}) -> {t}"),
    "chlo.broadcast_power": (2, "chlo.broadcast_power %a0, %a1 : ({t}, {t}) -> {t}"),
}
_MATRIX_OPS = {"stablehlo.cholesky", "stablehlo.triangular_solve"}
# Each found aborting libtpu 0.0.42, compiled alone for a deviceless v5e in a process of its
# own (a failed check in xprecision_rewriter.cc, exit -6; on complex64 they compile). `sign`,
# `maximum`, `fft` and a complex128 `sort` are refused by XLA:TPU with a CompileError, no
# abort. CHLO ops reach the backend where the pipeline is "none", as `aotkit.load_module`
# leaves it.


def _op_module(op: str, element: str) -> ir.Module:
    """`op` on ELEMENT tensors, alone on line 2 (column 6) of the module text."""
    arity, expr = _OPS[op]
    part = element.removeprefix("complex<").removesuffix(">")
    shape = "2x2x" if op in _MATRIX_OPS else "3x"
    t, r = f"tensor<{shape}{element}>", f"tensor<{shape}{part}>"
    result = r if op == "stablehlo.abs" else t
    body = f"\n%0 = {expr.format(t=t, r=r)}\nreturn %0 : {result}"
    return hand.module("f", [t] * arity, [result], body)


def test_the_refused_ops_are_those_found_aborting():
    assert tpu_complex128.ABORTS == set(_OPS)


def _refusal(op: str, name: str, location: str) -> str:
    return (
        rf"^{re.escape(WHERE)}: module '{name}' applies {op} to complex128 values"
        rf"{re.escape(location)}, which XLA:TPU cannot compile \(its float64 emulation has no "
        r"rule for it, and it would abort the process\); compute it in complex64, or compile "
        r"for 'cpu'$"
    )


@pytest.mark.parametrize("op", sorted(tpu_complex128.ABORTS))
def test_complex128_op_is_refused(op):
    module = _op_module(op, "complex<f64>")
    before = _text(module)
    with pytest.raises(UnsupportedModuleError, match=_refusal(op, "f", " at line 2, column 6")):
        tpu_complex128.legalize(module, WHERE)
    assert _text(module) == before


@pytest.mark.parametrize("op", sorted(_OPS))
def test_complex64_op_is_the_same_module(op):
    module = _op_module(op, "complex<f32>")
    before = _text(module)
    assert tpu_complex128.legalize(module, WHERE) is module
    assert _text(module) == before


def test_refusal_comes_before_rewriting_and_names_the_first_op():
    c, i = "tensor<3xcomplex<f64>>", "tensor<3xi32>"
    module = hand.module(
        "f",
        [i, c],
        [c],
        f"%0 = stablehlo.convert %a0 : ({i}) -> {c}\n%1 = stablehlo.sine %a1 : {c}\n"
        f"%2 = stablehlo.divide %0, %1 : {c}\nreturn %2 : {c}",
    )
    before = _text(module)
    with pytest.raises(UnsupportedModuleError) as caught:
        tpu_complex128.legalize(module, WHERE)
    assert (caught.value.op, caught.value.location) == ("stablehlo.sine", "at line 2, column 6")
    assert _text(module) == before


def test_traced_divide_is_refused_at_its_line():
    lowered = aotkit.jit(lambda a, b: a / b).lower(np.complex128(1j), np.complex128(2))
    line = sys._getframe().f_lineno - 1
    with pytest.raises(
        UnsupportedModuleError,
        match=_refusal("stablehlo.divide", "lambda", f" at {__file__}:{line}"),
    ) as caught:
        tpu_complex128.legalize(lowered.module, WHERE)
    assert caught.value.op == "stablehlo.divide"
    assert caught.value.location == f"at {__file__}:{line}"
    # The same program in complex64 is left as it is.
    narrow = aotkit.jit(lambda a, b: a / b).lower(np.complex64(1j), np.complex64(2)).module
    assert tpu_complex128.legalize(narrow, WHERE) is narrow


@pytest.mark.parametrize(
    "body",
    [
        "%0 = stablehlo.add %a0, %a0 : tensor<3xcomplex<f64>>",
        "%0 = stablehlo.multiply %a0, %a0 : tensor<3xcomplex<f64>>",
        "%0 = stablehlo.exponential %a0 : tensor<3xcomplex<f64>>",
        "%0 = stablehlo.sqrt %a0 : tensor<3xcomplex<f64>>",
    ],
    ids=["add", "multiply", "exponential", "sqrt"],
)
def test_complex128_without_converts_is_the_same_module(body):
    t = "tensor<3xcomplex<f64>>"
    module = hand.module("f", [t], [t], f"{body}\nreturn %0 : {t}")
    assert tpu_complex128.legalize(module, WHERE) is module


@pytest.mark.parametrize(
    ("source", "target"),
    [(np.int32, np.float64), (np.complex128, np.float64), (np.complex64, np.float32),
     (np.float32, np.complex64), (np.complex64, np.complex64), (np.float64, np.float32)],
    ids=str,
)  # fmt: skip
def test_other_converts_are_the_same_module(source, target):
    module = _convert_module(source, target)
    assert tpu_complex128.legalize(module, WHERE) is module


def test_dynamic_shape_convert_is_refused():
    a, b = "tensor<?xi32>", "tensor<?xcomplex<f64>>"
    module = hand.module(
        "dyn", [a], [b], f"\n%0 = stablehlo.convert %a0 : ({a}) -> {b}\nreturn %0 : {b}"
    )
    before = _text(module)
    with pytest.raises(
        UnsupportedModuleError,
        match=rf"^{re.escape(WHERE)}: module 'dyn' converts to complex128 with the dynamic "
        r"shape tensor<\?xcomplex<f64>> at line 2, column 6, which XLA:TPU cannot compile; "
        r"give the program static shapes \(specialize it\) first$",
    ) as caught:
        tpu_complex128.legalize(module, WHERE)
    assert (caught.value.op, caught.value.location) == ("stablehlo.convert", "at line 2, column 6")
    assert _text(module) == before


# --- the caller's module stays as it was ------------------------------------------------------


@pytest.mark.parametrize("source", SOURCES, ids=str)
def test_callers_module_is_unchanged(source):
    module = _convert_module(source, np.complex128)
    before = _text(module)
    out = tpu_complex128.legalize(module, WHERE)
    assert _text(module) == before
    assert _text(out) != before
    assert len(_aborting_converts(module)) == 1
    # The original still runs as written (nothing of it was erased or moved).
    x = _values(source)
    want = _flushed(x, "cpu").astype(np.complex128)
    _assert_same(_run(module, "cpu", x), want, f"{source} as written")


# --- first_abort: what a module as written would end the process on (the native runner's
# guard on a TPU plugin, through the artifact's `aborts_on` field) ---------------------------


@pytest.mark.parametrize("op", sorted(tpu_complex128.ABORTS))
def test_first_abort_names_a_refused_op_and_where(op):
    module = _op_module(op, "complex<f64>")
    assert tpu_complex128.first_abort(module) == f"{op} of complex128 values at line 2, column 6"


@pytest.mark.parametrize("source", SOURCES, ids=str)
def test_first_abort_names_a_convert_the_rewrite_would_change(source):
    what = tpu_complex128.first_abort(_convert_module(source, np.complex128))
    assert what is not None and what.startswith("stablehlo.convert of complex128 values at ")


@pytest.mark.parametrize("op", sorted(_OPS))
def test_first_abort_is_none_where_xla_tpu_compiles_the_module(op):
    assert tpu_complex128.first_abort(_op_module(op, "complex<f32>")) is None
    assert tpu_complex128.first_abort(_convert_module(np.float32, np.complex64)) is None


def test_a_saved_artifact_records_what_a_tpu_would_abort_on(tmp_path):
    from aotkit import artifacts

    x = np.arange(3, dtype=np.int32)
    for fn, aborts in ((lambda x: x * 1j, True), (lambda x: x * 2.0, False)):
        compiled = aotkit.jit(fn).lower(x).compile()
        header = artifacts.unpack(compiled.serialize()).header
        if aborts:
            (what,) = header["aborts_on"].values()
            assert list(header["aborts_on"]) == ["tpu"]
            assert re.fullmatch(r"stablehlo\.convert of complex128 values at .+:\d+", what)
        else:
            assert "aborts_on" not in header
        symbolic = aotkit.jit(fn).lower(aotkit.spec("i32[n]")).compile()
        assert artifacts.unpack(symbolic.serialize()).header.get("aborts_on") == (
            header["aborts_on"] if aborts else None
        )
        # A TPU executable's portable module is the rewritten one: nothing to record.
        assert artifacts.aborts_on(compiled.lowered._module, "tpu") == {}
        assert aotkit.load(compiled.serialize())(x).dtype == compiled(x).dtype
