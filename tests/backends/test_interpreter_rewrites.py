"""Each rewrite of the interpreter backend (aotkit/backends/interpreter/rewrites.py) against the
cpu backend: the same module and inputs give the same results and dtypes on both.

Inputs are chosen so that the interpreter's own defect would show: NaN payloads and signed
zeros for TOTALORDER, zero divisors and MIN / -1 for integer division, sums that 16-bit
accumulation rounds away, i8 products that overflow i8, layouts that abort it. Float
results are compared exactly where the inputs make every partial sum exact.
"""

from __future__ import annotations

import itertools

import ml_dtypes
import numpy as np
import pytest

import aotkit
from aotkit import backends
from tests.backends import modules


def on_both(text: str, *args, cpu_text: str | None = None):
    """(cpu results, interpreter results, interpreter's final text); cpu may run `cpu_text`."""
    cpu = backends.get("cpu").compile(modules.parse(cpu_text or text)).execute(list(args))
    exe = backends.get("interpreter").compile(modules.parse(text))
    return [np.asarray(x) for x in cpu], exe.execute(list(args)), exe.as_text()


def assert_same(cpu, interp, *, rtol=0.0, atol=0.0):
    assert len(cpu) == len(interp)
    for want, got in zip(cpu, interp):
        assert got.dtype == want.dtype and got.shape == want.shape
        if rtol or atol:
            np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)
        else:
            np.testing.assert_array_equal(got, want)


def module(name: str, args: list[str], results: list[str], body: str) -> str:
    params = ", ".join(f"%a{i}: {t}" for i, t in enumerate(args))
    return (
        f"module @{name} {{ func.func public @main({params}) -> ({', '.join(results)}) "
        f"{{ {body} }} }}"
    )


# --- scatter ----------------------------------------------------------------------------


def test_scatter_leaves_its_operand_alone():
    idx = np.array([0, 2])
    x = np.arange(4, dtype=np.float32)

    def f(x):
        return x.at[idx].add(10.0), x

    on_cpu = aotkit.jit(f, backend="cpu")(x)
    on_interp = aotkit.jit(f, backend="interpreter")(x)
    assert_same([np.asarray(a) for a in on_cpu], list(on_interp))
    np.testing.assert_array_equal(on_interp[1], x)


_SCATTER_ADD = """"stablehlo.scatter"({inputs}, %i, {updates}) <{{indices_are_sorted = false,
    scatter_dimension_numbers = #stablehlo.scatter<inserted_window_dims = [0],
    scatter_dims_to_operand_dims = [0], index_vector_dim = 1>, unique_indices = false}}> ({{
    ^bb0({block}):
      {adds}
      stablehlo.return {sums}
    }}) : ({types}) -> ({results})"""


def test_variadic_scatter_leaves_both_operands_alone():
    t, u = "tensor<4xf32>", "tensor<2xf32>"
    s = "tensor<f32>"
    scatter = _SCATTER_ADD.format(
        inputs="%a0, %a1",
        updates="%u, %u",
        block=f"%p: {s}, %q: {s}, %r: {s}, %w: {s}",
        adds=f"%x = stablehlo.add %p, %r : {s}\n%y = stablehlo.multiply %q, %w : {s}",
        sums=f"%x, %y : {s}, {s}",
        types=f"{t}, {t}, tensor<2x1xi32>, {u}, {u}",
        results=f"{t}, {t}",
    )
    text = module(
        "variadic",
        [t, t],
        [t, t, t, t],
        f"""%i = stablehlo.constant dense<[[0], [2]]> : tensor<2x1xi32>
        %u = stablehlo.constant dense<3.0> : {u}
        %0:2 = {scatter}
        return %0#0, %0#1, %a0, %a1 : {t}, {t}, {t}, {t}""",
    )
    x, y = np.arange(4, dtype=np.float32), np.arange(4, dtype=np.float32) + 1
    cpu, interp, _ = on_both(text, x, y)
    assert_same(cpu, interp)


def test_scatter_in_a_loop_starts_from_the_unchanged_operand_each_time():
    t, s = "tensor<4xf32>", "tensor<f32>"
    scatter = _SCATTER_ADD.format(
        inputs="%a0",
        updates="%u",
        block=f"%p: {s}, %q: {s}",
        adds=f"%x = stablehlo.add %p, %q : {s}",
        sums=f"%x : {s}",
        types=f"{t}, tensor<2x1xi32>, tensor<2xf32>",
        results=t,
    )
    text = module(
        "loop",
        [t],
        [t, t],
        f"""%i = stablehlo.constant dense<[[0], [0]]> : tensor<2x1xi32>
        %u = stablehlo.constant dense<1.0> : tensor<2xf32>
        %z = stablehlo.constant dense<0.0> : {t}
        %n = stablehlo.constant dense<0> : tensor<i32>
        %one = stablehlo.constant dense<1> : tensor<i32>
        %three = stablehlo.constant dense<3> : tensor<i32>
        %0:2 = stablehlo.while(%k = %n, %acc = %z) : tensor<i32>, {t}
          cond {{
            %c = stablehlo.compare LT, %k, %three : (tensor<i32>, tensor<i32>) -> tensor<i1>
            stablehlo.return %c : tensor<i1>
          }} do {{
            %sc = {scatter}
            %next = stablehlo.add %acc, %sc : {t}
            %k1 = stablehlo.add %k, %one : tensor<i32>
            stablehlo.return %k1, %next : tensor<i32>, {t}
          }}
        return %0#1, %a0 : {t}, {t}""",
    )
    cpu, interp, _ = on_both(text, np.arange(4, dtype=np.float32))
    assert_same(cpu, interp)


# --- compare TOTALORDER -----------------------------------------------------------------

_DIRECTIONS = ["EQ", "NE", "LT", "LE", "GT", "GE"]
_FLOATS = {
    "f16": (np.float16, np.uint16),
    "bf16": (ml_dtypes.bfloat16, np.uint16),
    "f32": (np.float32, np.uint32),
    "f64": (np.float64, np.uint64),
}


def _special_values(dtype, bits_dtype) -> np.ndarray:
    """-NaN, -inf, -1, -denormal, -0, +0, +denormal, 1, inf, NaN, and a NaN of another payload."""
    finfo = ml_dtypes.finfo(dtype)
    values = np.array(
        [-np.inf, -1.0, -float(finfo.smallest_subnormal), -0.0, 0.0]
        + [float(finfo.smallest_subnormal), 1.0, np.inf, np.nan]
    ).astype(dtype)
    quiet = values[-1:].view(bits_dtype)
    other_payload = (quiet | bits_dtype(1)).view(dtype)
    sign = bits_dtype(1) << bits_dtype(8 * np.dtype(bits_dtype).itemsize - 1)
    negative_nan = (quiet | sign).view(dtype)
    return np.concatenate([negative_nan, values, other_payload])


@pytest.mark.parametrize("direction", _DIRECTIONS)
@pytest.mark.parametrize("dtype", sorted(_FLOATS))
def test_total_order_compare_orders_nan_and_signed_zero(dtype, direction):
    values = _special_values(*_FLOATS[dtype])
    lhs, rhs = (np.array(p) for p in zip(*itertools.product(values, values)))
    t, b = f"tensor<{lhs.size}x{dtype}>", f"tensor<{lhs.size}xi1>"
    text = module(
        "total",
        [t, t],
        [b],
        f"%0 = stablehlo.compare {direction}, %a0, %a1, TOTALORDER : ({t}, {t}) -> {b}\n"
        f"return %0 : {b}",
    )
    cpu, interp, final = on_both(text, lhs, rhs)
    assert "TOTALORDER" not in final
    assert_same(cpu, interp)


def test_jax_sort_and_top_k_with_nans():
    import jax
    import jax.numpy as jnp

    def f(x):
        return jnp.sort(x), jax.lax.top_k(x, 3), jnp.argsort(x)

    x = np.array([3.0, np.nan, -0.0, 0.0, -np.inf, 1.0, -np.nan, np.inf], np.float32)
    on_cpu = aotkit.jit(f, backend="cpu", frontend="jax")(x)
    on_interp = aotkit.jit(f, backend="interpreter", frontend="jax")(x)
    flat_cpu, flat_interp = jax.tree_util.tree_leaves(on_cpu), jax.tree_util.tree_leaves(on_interp)
    assert_same([np.asarray(a) for a in flat_cpu], [np.asarray(a) for a in flat_interp])


# --- integer divide and remainder -------------------------------------------------------


_INTEGERS = {
    "i8": np.int8,
    "i16": np.int16,
    "i32": np.int32,
    "i64": np.int64,
    "ui8": np.uint8,
    "ui16": np.uint16,
    "ui32": np.uint32,
    "ui64": np.uint64,
}


@pytest.mark.parametrize("dtype", list(_INTEGERS))
def test_integer_division_by_zero_and_overflow(dtype):
    np_dtype = np.dtype(_INTEGERS[dtype])
    info = np.iinfo(np_dtype)
    a = np.array([7, 0, info.max, info.min, info.min, 9, 5, info.max], np_dtype)
    b = np.array([0, 0, 0, 0, np_dtype.type(-1) if info.min else 1, 2, 3, 7], np_dtype)
    t = f"tensor<8x{dtype}>"
    text = module(
        "div",
        [t, t],
        [t, t],
        f"""%0 = stablehlo.divide %a0, %a1 : {t}
        %1 = stablehlo.remainder %a0, %a1 : {t}
        return %0, %1 : {t}, {t}""",
    )
    cpu, interp, _ = on_both(text, a, b)
    assert_same(cpu, interp)


def test_integer_division_of_scalars_inside_a_reduction():
    text = module(
        "reduce_div",
        ["tensor<4xi32>"],
        ["tensor<i32>"],
        """%init = stablehlo.constant dense<100> : tensor<i32>
        %0 = stablehlo.reduce(%a0 init: %init) across dimensions = [0]
            : (tensor<4xi32>, tensor<i32>) -> tensor<i32>
          reducer(%acc: tensor<i32>, %x: tensor<i32>) {
            %q = stablehlo.divide %acc, %x : tensor<i32>
            stablehlo.return %q : tensor<i32>
          }
        return %0 : tensor<i32>""",
    )
    cpu, interp, _ = on_both(text, np.array([3, 0, -1, 5], np.int32))
    assert_same(cpu, interp)


# --- dot_general and convolution in f16/bf16 --------------------------------------------

# 2048 + 1 + 1 + 1 + 1 = 2052 in f32 (and in f16), but 2048 + 1 rounds back to 2048 in f16;
# bf16 does the same at 256.
_HALF = {"f16": (np.float16, 2048.0), "bf16": (ml_dtypes.bfloat16, 256.0)}


def _half_inputs(dtype):
    np_dtype, big = _HALF[dtype]
    return np.array([big, 1, 1, 1, 1], np_dtype), np.ones(5, np_dtype)


@pytest.mark.parametrize("result", ["same", "f32"])
@pytest.mark.parametrize("dtype", sorted(_HALF))
def test_half_precision_dot_general_accumulates_in_f32(dtype, result):
    out = dtype if result == "same" else "f32"
    t, r = f"tensor<5x{dtype}>", f"tensor<{out}>"
    text = module(
        "dot",
        [t, t],
        [r],
        f"%0 = stablehlo.dot_general %a0, %a1, contracting_dims = [0] x [0] : ({t}, {t}) -> {r}\n"
        f"return %0 : {r}",
    )
    cpu, interp, _ = on_both(text, *_half_inputs(dtype))
    assert_same(cpu, interp)
    assert float(interp[0]) == _HALF[dtype][1] + 4


_CONV_1D = """%0 = stablehlo.convolution(%a0, %a1) dim_numbers = {dnums}, window = {{}}
    {{batch_group_count = {bg} : i64, feature_group_count = {fg} : i64}} : ({l}, {k}) -> {r}
  return %0 : {r}"""


@pytest.mark.parametrize("dtype", sorted(_HALF))
def test_half_precision_convolution_accumulates_in_f32(dtype):
    x, w = _half_inputs(dtype)
    lt, kt, rt = f"tensor<1x5x1x{dtype}>", f"tensor<1x5x1x{dtype}>", f"tensor<1x1x1x{dtype}>"
    text = module(
        "conv",
        [lt, kt],
        [rt],
        _CONV_1D.format(dnums="[b, f, 0]x[o, i, 0]->[b, f, 0]", bg=1, fg=1, l=lt, k=kt, r=rt),
    )
    cpu, interp, _ = on_both(text, x.reshape(1, 5, 1), w.reshape(1, 5, 1))
    assert_same(cpu, interp)


def test_i8_convolution_with_an_i32_result_does_not_wrap():
    lt, kt, rt = "tensor<1x1x4xi8>", "tensor<1x1x2xi8>", "tensor<1x1x3xi32>"
    text = module(
        "conv_i8",
        [lt, kt],
        [rt],
        _CONV_1D.format(dnums="[b, f, 0]x[o, i, 0]->[b, f, 0]", bg=1, fg=1, l=lt, k=kt, r=rt),
    )
    x = np.array([[[100, 100, -100, 7]]], np.int8)
    w = np.array([[[100, 2]]], np.int8)
    cpu, interp, _ = on_both(text, x, w)
    assert_same(cpu, interp)
    np.testing.assert_array_equal(interp[0], [[[10200, 9800, -9986]]])


# --- dot_general over an empty dimension ------------------------------------------------


@pytest.mark.parametrize("shapes", [((0,), (0,), ()), ((2, 0), (0, 3), (2, 3))], ids=str)
def test_dot_general_over_an_empty_dimension_is_zero(shapes):
    # The interpreter aborted the process ("Incompatible index and shape").
    a, b, r = ("tensor<" + "".join(f"{d}x" for d in s) + "f32>" for s in shapes)
    text = module(
        "dot",
        [a, b],
        [r],
        f"%0 = stablehlo.dot_general %a0, %a1, contracting_dims = [{len(shapes[0]) - 1}] x [0] "
        f": ({a}, {b}) -> {r}\n return %0 : {r}",
    )
    x, y = np.ones(shapes[0], np.float32), np.ones(shapes[1], np.float32)
    cpu, interp, _ = on_both(text, x, y)
    assert_same(cpu, interp)


# --- convolution layouts ----------------------------------------------------------------


def _conv_case(lhs, rhs, out, *, fg=1, bg=1):
    sizes = {"b": 4, "f": 4, "0": 4, "1": 3}
    kernel = {"o": 6, "i": 4 // fg, "0": 2, "1": 2}
    result = {"b": 4 // bg, "f": 6, "0": 3, "1": 2}
    shapes = [
        [table[c] for c in layout] for table, layout in ((sizes, lhs), (kernel, rhs), (result, out))
    ]
    lt, kt, rt = (f"tensor<{'x'.join(map(str, s))}xf32>" for s in shapes)
    dnums = f"[{', '.join(lhs)}]x[{', '.join(rhs)}]->[{', '.join(out)}]"
    text = module(
        "conv", [lt, kt], [rt], _CONV_1D.format(dnums=dnums, bg=bg, fg=fg, l=lt, k=kt, r=rt)
    )
    rng = np.random.default_rng(0)
    # Small integers: every partial sum is exact in f32, whatever the order.
    x = rng.integers(-4, 5, shapes[0]).astype(np.float32)
    w = rng.integers(-4, 5, shapes[1]).astype(np.float32)
    return text, x, w


@pytest.mark.parametrize(
    "lhs, rhs, out, fg, bg",
    [
        ("bf01", "oi01", "fb01", 1, 1),
        ("bf01", "oi01", "f01b", 1, 1),
        ("bf01", "oi01", "01fb", 1, 1),
        ("f0b1", "i0o1", "f1b0", 2, 1),
        ("b01f", "01io", "f01b", 1, 2),
        ("0b1f", "o10i", "1f0b", 1, 1),
    ],
)
def test_convolution_with_output_feature_before_batch(lhs, rhs, out, fg, bg):
    text, x, w = _conv_case(lhs, rhs, out, fg=fg, bg=bg)
    cpu, interp, final = on_both(text, x, w)
    assert "stablehlo.transpose" in final
    assert_same(cpu, interp)


# --- triangular_solve -------------------------------------------------------------------


def _solve_text(a_shape, b_shape, dtype, *, left, lower, unit, transpose):
    at = f"tensor<{'x'.join(map(str, a_shape))}x{dtype}>"
    bt = f"tensor<{'x'.join(map(str, b_shape))}x{dtype}>"
    flags = (
        f"left_side = {str(left).lower()}, lower = {str(lower).lower()}, "
        f"unit_diagonal = {str(unit).lower()}, transpose_a = #stablehlo<transpose {transpose}>"
    )
    return module(
        "solve",
        [at, bt],
        [bt],
        f'%0 = "stablehlo.triangular_solve"(%a0, %a1) {{{flags}}} : ({at}, {bt}) -> {bt}\n'
        f"return %0 : {bt}",
    )


def _solve_inputs(a_shape, b_shape, np_dtype, seed=0):
    rng = np.random.default_rng(seed)

    def draw(shape):
        x = rng.standard_normal(shape)
        if np.dtype(np_dtype).kind == "c":
            x = x + 1j * rng.standard_normal(shape)
        return x

    # A strong diagonal keeps the solve well conditioned.
    a = draw(a_shape) + 4 * np.eye(a_shape[-1])
    return a.astype(np_dtype), draw(b_shape).astype(np_dtype)


_SOLVES = [
    # (batch, left, lower, unit, transpose, dtype)
    ((2,), True, True, False, "NO_TRANSPOSE", "f32"),
    ((3,), False, False, True, "TRANSPOSE", "f64"),
    ((2, 2), True, False, False, "ADJOINT", "f32"),
    ((2,), False, True, False, "ADJOINT", "complex<f32>"),
    ((), True, True, False, "ADJOINT", "f64"),
    ((), False, False, True, "ADJOINT", "f32"),
    ((0,), True, True, False, "NO_TRANSPOSE", "f32"),
]


@pytest.mark.parametrize("batch, left, lower, unit, transpose, dtype", _SOLVES)
def test_triangular_solve(batch, left, lower, unit, transpose, dtype):
    a_shape = (*batch, 3, 3)
    b_shape = (*batch, 3, 2) if left else (*batch, 2, 3)
    np_dtype = {"f32": np.float32, "f64": np.float64, "complex<f32>": np.complex64}[dtype]
    text = _solve_text(
        a_shape, b_shape, dtype, left=left, lower=lower, unit=unit, transpose=transpose
    )
    cpu, interp, _ = on_both(text, *_solve_inputs(a_shape, b_shape, np_dtype))
    tolerance = 1e-5 if np.dtype(np_dtype) in (np.float32, np.complex64) else 1e-12
    assert_same(cpu, interp, rtol=tolerance, atol=tolerance)


# --- dynamic ops ------------------------------------------------------------------------

_DYNAMIC = {
    # name: (args, result, body, inputs, static body for cpu or None to run the same text)
    "dynamic_iota": (
        ["tensor<2xi64>"],
        "tensor<3x4xi32>",
        "%0 = stablehlo.dynamic_iota %a0, dim = 1 : (tensor<2xi64>) -> tensor<3x4xi32>",
        [np.array([3, 4], np.int64)],
        None,
    ),
    "dynamic_broadcast_in_dim": (
        ["tensor<1x3xf32>"],
        "tensor<2x3x2xf32>",
        """%s = stablehlo.constant dense<[2, 3, 2]> : tensor<3xi64>
        %0 = stablehlo.dynamic_broadcast_in_dim %a0, %s, dims = [2, 1]
            : (tensor<1x3xf32>, tensor<3xi64>) -> tensor<2x3x2xf32>""",
        [np.array([[1, 2, 3]], np.float32)],
        None,
    ),
    "dynamic_reshape": (
        ["tensor<2x3xf32>"],
        "tensor<3x2xf32>",
        """%s = stablehlo.constant dense<[3, 2]> : tensor<2xi64>
        %0 = stablehlo.dynamic_reshape %a0, %s
            : (tensor<2x3xf32>, tensor<2xi64>) -> tensor<3x2xf32>""",
        [np.arange(6, dtype=np.float32).reshape(2, 3)],
        None,
    ),
    "get_dimension_size": (
        ["tensor<3x5xf32>"],
        "tensor<i32>",
        "%0 = stablehlo.get_dimension_size %a0, dim = 1 : (tensor<3x5xf32>) -> tensor<i32>",
        [np.zeros((3, 5), np.float32)],
        None,
    ),
    "dynamic_pad": (
        ["tensor<3xf32>"],
        "tensor<8xf32>",
        """%lo = stablehlo.constant dense<[1]> : tensor<1xi64>
        %hi = stablehlo.constant dense<[2]> : tensor<1xi64>
        %in = stablehlo.constant dense<[1]> : tensor<1xi64>
        %p = stablehlo.constant dense<-1.0> : tensor<f32>
        %0 = stablehlo.dynamic_pad %a0, %p, %lo, %hi, %in : (tensor<3xf32>, tensor<f32>,
            tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<8xf32>""",
        [np.array([1, 2, 3], np.float32)],
        """%p = stablehlo.constant dense<-1.0> : tensor<f32>
        %0 = stablehlo.pad %a0, %p, low = [1], high = [2], interior = [1]
            : (tensor<3xf32>, tensor<f32>) -> tensor<8xf32>""",
    ),
    "dynamic_gather": (
        ["tensor<3x4xf32>", "tensor<2x1xi32>"],
        "tensor<2x4xf32>",
        """%s = stablehlo.constant dense<[1, 4]> : tensor<2xi32>
        %0 = "stablehlo.dynamic_gather"(%a0, %a1, %s) {dimension_numbers =
            #stablehlo.gather<offset_dims = [1], collapsed_slice_dims = [0],
            start_index_map = [0], index_vector_dim = 1>, indices_are_sorted = false}
            : (tensor<3x4xf32>, tensor<2x1xi32>, tensor<2xi32>) -> tensor<2x4xf32>""",
        [np.arange(12, dtype=np.float32).reshape(3, 4), np.array([[2], [5]], np.int32)],
        """%0 = "stablehlo.gather"(%a0, %a1) {dimension_numbers =
            #stablehlo.gather<offset_dims = [1], collapsed_slice_dims = [0],
            start_index_map = [0], index_vector_dim = 1>, slice_sizes = array<i64: 1, 4>,
            indices_are_sorted = false} : (tensor<3x4xf32>, tensor<2x1xi32>) -> tensor<2x4xf32>""",
    ),
    "dynamic_conv": (
        ["tensor<1x4x4x1xf32>", "tensor<3x3x1x1xf32>"],
        "tensor<1x2x2x1xf32>",
        """%d = stablehlo.constant dense<[[0, 1], [1, 0]]> : tensor<2x2xi64>
        %0 = "stablehlo.dynamic_conv"(%a0, %a1, %d) {dimension_numbers =
            #stablehlo.conv<[b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f]>,
            window_strides = array<i64: 4, 4>, lhs_dilation = array<i64: 2, 2>,
            batch_group_count = 1 : i64, feature_group_count = 1 : i64}
            : (tensor<1x4x4x1xf32>, tensor<3x3x1x1xf32>, tensor<2x2xi64>) -> tensor<1x2x2x1xf32>""",
        [np.arange(16, dtype=np.float32).reshape(1, 4, 4, 1), np.ones((3, 3, 1, 1), np.float32)],
        """%0 = "stablehlo.convolution"(%a0, %a1) {dimension_numbers =
            #stablehlo.conv<[b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f]>,
            window_strides = array<i64: 4, 4>, lhs_dilation = array<i64: 2, 2>,
            padding = dense<[[0, 1], [1, 0]]> : tensor<2x2xi64>,
            batch_group_count = 1 : i64, feature_group_count = 1 : i64}
            : (tensor<1x4x4x1xf32>, tensor<3x3x1x1xf32>) -> tensor<1x2x2x1xf32>""",
    ),
}


@pytest.mark.parametrize("op", sorted(_DYNAMIC))
def test_dynamic_ops_with_static_shapes(op):
    args, result, body, inputs, static = _DYNAMIC[op]
    text = module(op, args, [result], f"{body}\nreturn %0 : {result}")
    cpu_text = (
        None if static is None else module(op, args, [result], f"{static}\nreturn %0 : {result}")
    )
    cpu, interp, final = on_both(text, *inputs, cpu_text=cpu_text)
    assert_same(cpu, interp)
    if static is not None:
        assert f"stablehlo.{op}" not in final


# --- ops of newer StableHLO: exp2, log2, fma (jaxlib 0.12.1) ---------------------------


def _newer_op(text: str) -> str:
    """`text`, or a skip where this jaxlib's StableHLO has not the op it uses."""
    try:
        modules.parse(text)
    except Exception as e:  # noqa: BLE001 - the parser's own error names the op
        pytest.skip(f"this jaxlib's StableHLO cannot parse it ({str(e).splitlines()[0]})")
    return text


@pytest.mark.parametrize("dtype, element", [(np.float32, "f32"), (np.float64, "f64")])
@pytest.mark.parametrize("op", ["exp2", "log2"])
def test_base_two_ops_run_as_power_and_log(op, dtype, element):
    t = f"tensor<6x{element}>"
    text = _newer_op(module("m", [t], [t], f"%0 = stablehlo.{op} %a0 : {t} return %0 : {t}"))
    x = np.array([0.25, 0.5, 1.0, 3.0, 8.0, 10.5], dtype)
    cpu, interp, final = on_both(text, x)
    assert f"stablehlo.{op}" not in final
    assert_same(cpu, interp, rtol=np.finfo(dtype).eps)
    # Powers of two come out exact, as NumPy's (and XLA's) do.
    want = np.exp2(x) if op == "exp2" else np.log2(x)
    np.testing.assert_array_equal(interp[0][:3], want[:3])


@pytest.mark.parametrize("dtype, element", [(np.float32, "f32"), (np.float64, "f64")])
def test_fma_runs_as_a_product_and_a_sum(dtype, element):
    t = f"tensor<4x{element}>"
    text = _newer_op(
        module(
            "m",
            [t, t, t],
            [t],
            f"%0 = stablehlo.fma %a0, %a1, %a2 : {t} return %0 : {t}",
        )
    )
    # 1 + 2**-12 squared needs 25 bits: f32 rounds the product, fma (and f64) does not.
    a = np.array([1 + 2.0**-12, 3.0, -2.5, 0.1], dtype)
    c = np.array([-1.0, 1.0, 0.5, 0.2], dtype)
    cpu, interp, final = on_both(text, a, a, c)
    assert "stablehlo.fma" not in final
    assert_same(cpu, interp, rtol=np.finfo(dtype).eps)
    assert interp[0][0] == dtype(2.0**-11 + 2.0**-24)  # the fused result, not 2**-11


@pytest.mark.parametrize("target, chlo", [("lgamma", "lgamma"), ("digamma", "digamma")])
def test_cpu_math_kernels_run_as_their_chlo_ops(target, chlo):
    from aotkit import _compat

    if f"cpu_{target}_ffi" not in _compat.cpu_math_targets():
        pytest.skip("this jaxlib has no CPU math kernels (jax 0.12.1+)")
    t = "tensor<5xf32>"
    call = (
        f"%0 = stablehlo.custom_call @cpu_{target}_ffi(%a0) {{mhlo.backend_config = {{}}}} "
        f": ({t}) -> {t} return %0 : {t}"
    )
    text = module("m", [t], [t], call)
    x = np.array([0.5, 1.5, 2.5, 4.0, 7.25], np.float32)
    as_chlo = module("m", [t], [t], f"%0 = chlo.{chlo} %a0 : {t} -> {t} return %0 : {t}")
    cpu, interp, final = on_both(text, x, cpu_text=as_chlo)
    assert "custom_call" not in final
    assert_same(cpu, interp, rtol=1e-6)
