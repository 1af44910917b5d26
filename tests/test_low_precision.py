"""The low-precision element types of quantized models (issue 27) end to end: int2, int4,
uint2, uint4, the float8 types and float4_e2m1fn, from specs through promotion, the tracer,
load_module, artifacts and the CLI, on cpu and the interpreter.

Oracles: jax.jit of the same program (values and dtypes, bit for bit on cpu), JAX's own
promotion lattice, and NumPy on ml_dtypes arrays where JAX refuses an op.
"""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import aotkit
import aotkit.numpy as anp
from aotkit import dtypes
from aotkit.cli.notation import parse_shape
from aotkit.errors import CompileError
from aotkit.specs import restore_dtype

LOW = list(dtypes.LOW_PRECISION)
FLOATS = list(dtypes.LOW_FLOATS)
INTS = list(dtypes.SUB_BYTE_INTS)
# What the reference interpreter backend refuses (see the refusal tests below).
INTERPRETER_REFUSED = {"f8e8m0fnu"}
MLIR_SPELLING = {
    "i2": "i2",
    "i4": "i4",
    "u2": "ui2",
    "u4": "ui4",
    "f8e4m3fn": "f8E4M3FN",
    "f8e5m2": "f8E5M2",
    "f8e4m3": "f8E4M3",
    "f8e3m4": "f8E3M4",
    "f8e4m3fnuz": "f8E4M3FNUZ",
    "f8e5m2fnuz": "f8E5M2FNUZ",
    "f8e4m3b11fnuz": "f8E4M3B11FNUZ",
    "f8e8m0fnu": "f8E8M0FNU",
    "f4e2m1fn": "f4E2M1FN",
}
ML_DTYPES = {
    "i2": ml_dtypes.int2,
    "i4": ml_dtypes.int4,
    "u2": ml_dtypes.uint2,
    "u4": ml_dtypes.uint4,
    "f8e4m3fn": ml_dtypes.float8_e4m3fn,
    "f8e5m2": ml_dtypes.float8_e5m2,
    "f8e4m3": ml_dtypes.float8_e4m3,
    "f8e3m4": ml_dtypes.float8_e3m4,
    "f8e4m3fnuz": ml_dtypes.float8_e4m3fnuz,
    "f8e5m2fnuz": ml_dtypes.float8_e5m2fnuz,
    "f8e4m3b11fnuz": ml_dtypes.float8_e4m3b11fnuz,
    "f8e8m0fnu": ml_dtypes.float8_e8m0fnu,
    "f4e2m1fn": ml_dtypes.float4_e2m1fn,
}


def every_value(name: str) -> np.ndarray:
    """Every value of the type: all bit patterns of a float (NaN, inf, -0.0, subnormals
    included), every integer of an int."""
    dtype = dtypes.ALL_NAMES[name]
    if dtypes.is_float(dtype):
        return np.arange(16 if name == "f4e2m1fn" else 256, dtype=np.uint8).view(dtype)
    info = dtypes.iinfo(dtype)
    return np.arange(int(info.min), int(info.max) + 1).astype(dtype)


def pairs(name: str) -> tuple[np.ndarray, np.ndarray]:
    """Every value against every other for the small types, a fixed sample for float8."""
    x = every_value(name)
    if x.size <= 16:
        return np.repeat(x, x.size), np.tile(x, x.size)
    rng = np.random.default_rng(0)
    return np.concatenate([x, rng.permutation(x)]), np.concatenate([rng.permutation(x), x])


def assert_same(got, want) -> None:
    """Same dtype and shape, and the same numbers: NaN where NaN, -0.0 where -0.0."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    assert got.shape == want.shape, (got.shape, want.shape)
    if dtypes.is_float(got.dtype):
        g, w = got.astype(np.float64), want.astype(np.float64)
        np.testing.assert_array_equal(g, w)
        numbers = ~np.isnan(w)
        np.testing.assert_array_equal(np.signbit(g[numbers]), np.signbit(w[numbers]))
    else:
        np.testing.assert_array_equal(got, want)


# --- specs -----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", LOW)
def test_spec_reads_and_writes_each_short_name(name):
    s = aotkit.spec(f"{name}[8]")
    assert s == aotkit.ShapeDtype((8,), ML_DTYPES[name])
    assert s.dtype == np.dtype(ML_DTYPES[name])
    assert str(s) == f"{name}[8]"
    assert aotkit.spec(str(s)) == s


@pytest.mark.parametrize("name", LOW)
def test_spec_accepts_ml_dtypes_names_objects_and_mlir_spellings(name):
    want = aotkit.ShapeDtype((2, 3), ML_DTYPES[name])
    assert aotkit.spec(f"{np.dtype(ML_DTYPES[name]).name}[2,3]") == want
    assert aotkit.spec(f"{MLIR_SPELLING[name]}[2,3]") == want
    assert aotkit.ShapeDtype((2, 3), ML_DTYPES[name]) == want
    assert aotkit.ShapeDtype((2, 3), np.dtype(ML_DTYPES[name])) == want
    assert aotkit.ShapeDtype((2, 3), np.dtype(ML_DTYPES[name]).name) == want
    assert dtypes.short_name(want.dtype) == name


def test_short_names_table_keeps_the_numpy_types_apart():
    assert set(dtypes.SHORT_NAMES).isdisjoint(dtypes.LOW_PRECISION)
    assert dtypes.ALL_NAMES == {**dtypes.SHORT_NAMES, **dtypes.LOW_PRECISION}
    assert dtypes.SUPPORTED == frozenset(dtypes.ALL_NAMES.values())


def test_unknown_dtype_message_lists_the_low_precision_names():
    with pytest.raises(
        TypeError,
        match=r"ShapeDtype: unsupported dtype 'float6_e2m3fn'; aotkit supports bool, i8, .*, "
        r"c128 and the low-precision i2, i4, u2, u4, f8e4m3fn, .*, f4e2m1fn \(NumPy names such "
        r"as 'float32' and 'float8_e4m3fn' work too\)",
    ):
        aotkit.ShapeDtype((2,), "float6_e2m3fn")


def test_raw_bytes_dtype_says_how_to_view_it():
    with pytest.raises(
        TypeError,
        match=r"ShapeDtype: unsupported dtype dtype\('V1'\): raw bytes, as numpy.save writes "
        r"bfloat16 and the ml_dtypes types \(int4, float8_e4m3fn, ...\); view the array as its "
        r"dtype \(x.view\(ml_dtypes.int4\)\), or give its spec \(such as i4\[8\]\)",
    ):
        aotkit.ShapeDtype((2,), np.dtype("V1"))


# numpy.save writes float8_e5m2 (NumPy kind 'f') as '<f1', which numpy.load cannot read back.
@pytest.mark.parametrize("name", [n for n in LOW if n != "f8e5m2"] + ["bf16"])
def test_restore_dtype_gives_back_what_numpy_save_wrote(name, tmp_path):
    x = every_value(name) if name != "bf16" else np.arange(4).astype(ml_dtypes.bfloat16)
    np.save(tmp_path / "x.npy", x)
    raw = np.load(tmp_path / "x.npy")
    assert raw.dtype.kind == "V"  # NumPy keeps only the bytes
    back = restore_dtype(raw, aotkit.ShapeDtype(x.shape, x.dtype))
    assert back.dtype == x.dtype and back.tobytes() == x.tobytes()


def test_restore_dtype_leaves_other_arrays_alone():
    raw = np.zeros(3, "V1")
    assert restore_dtype(raw, aotkit.spec("i4[4]")) is raw  # another shape
    assert restore_dtype(raw, aotkit.spec("u8[3]")) is raw  # not a raw-bytes dtype
    x = np.zeros(3, np.int8)
    assert restore_dtype(x, aotkit.spec("i4[3]")) is x


def test_pytree_specs_take_low_precision_leaves():
    tree = parse_shape('{"w": i4[4,3], "s": [f8e4m3fn[3], "f4e2m1fn[]"]}')
    assert tree == {
        "w": aotkit.ShapeDtype((4, 3), ml_dtypes.int4),
        "s": [
            aotkit.ShapeDtype((3,), ml_dtypes.float8_e4m3fn),
            aotkit.ShapeDtype((), ml_dtypes.float4_e2m1fn),
        ],
    }


# --- promotion -------------------------------------------------------------------------------


# JAX's refusal (TypePromotionError is no TypeError).
JAX_REFUSES = (TypeError, jax.dtypes.TypePromotionError)


def _jax_promote(a: np.dtype, b: np.dtype):
    try:
        return np.dtype(jnp.promote_types(a, b))
    except JAX_REFUSES:
        return None


def _aotkit_promote(a: np.dtype, b: np.dtype):
    try:
        return dtypes.promote_types(a, b)
    except TypeError:
        return None


@pytest.mark.parametrize("other", list(dtypes.ALL_NAMES))
@pytest.mark.parametrize("name", LOW)
def test_promotion_is_jaxs(name, other):
    a, b = dtypes.ALL_NAMES[name], dtypes.ALL_NAMES[other]
    want = _jax_promote(a, b)
    assert _aotkit_promote(a, b) == want
    assert _aotkit_promote(b, a) == want


@pytest.mark.parametrize("kind", [bool, int, float, complex])
@pytest.mark.parametrize("name", LOW)
def test_python_scalars_promote_as_in_jax(name, kind):
    d = dtypes.ALL_NAMES[name]
    try:
        want = (jnp.ones(1, d) + kind(1)).dtype
    except JAX_REFUSES:
        want = None
    try:
        got = dtypes.result_type(d, kind)
    except TypeError:
        got = None
    assert got == want


@pytest.mark.parametrize(
    "a, b, text",
    [
        (
            "f8e4m3fn",
            "f8e5m2",
            r"cannot promote float8_e4m3fn and float8_e5m2 implicitly: float8 and float4 types "
            r"promote only with themselves, bool, integers of 8 bits or more and Python bools, "
            r"ints and floats \(as in JAX\); cast explicitly, e.g. x.astype\('float32'\)",
        ),
        ("f4e2m1fn", "f32", r"cannot promote float4_e2m1fn and float32 implicitly: float8 and"),
        ("bf16", "f8e4m3fn", r"cannot promote bfloat16 and float8_e4m3fn implicitly: float8 and"),
        (
            "i4",
            "i8",
            r"cannot promote int4 and int8 implicitly: 2- and 4-bit integers promote only with "
            r"themselves, bool and Python ints \(as in JAX\); cast explicitly, e.g. "
            r"x.astype\('int32'\)",
        ),
        ("u2", "u4", r"cannot promote uint2 and uint4 implicitly: 2- and 4-bit integers"),
        ("i4", "f8e4m3fn", r"cannot promote int4 and float8_e4m3fn implicitly: 2- and 4-bit"),
    ],
)
def test_promotion_refusal_says_why_and_what_to_do(a, b, text):
    with pytest.raises(TypeError, match=text):
        dtypes.promote_types(dtypes.ALL_NAMES[a], dtypes.ALL_NAMES[b])


def test_python_scalar_refusal_names_the_python_type():
    with pytest.raises(
        TypeError, match=r"cannot promote int4 and Python float implicitly: 2- and 4-bit"
    ):
        dtypes.result_type(dtypes.ALL_NAMES["i4"], float)
    with pytest.raises(
        TypeError, match=r"cannot promote float8_e4m3fn and Python complex implicitly"
    ):
        dtypes.result_type(dtypes.ALL_NAMES["f8e4m3fn"], complex)


@pytest.mark.parametrize(
    "fn, args, text",
    [
        (
            lambda x, y: x + y,
            (np.ones(2, ml_dtypes.float8_e4m3fn), np.ones(2, np.float32)),
            r"add \(at .*test_low_precision.py:\d+\): cannot promote float8_e4m3fn and float32 "
            r"implicitly",
        ),
        (
            lambda x, y: anp.maximum(x, y),
            (np.ones(2, ml_dtypes.int4), np.ones(2, ml_dtypes.uint4)),
            r"maximum \(at .*\): cannot promote int4 and uint4 implicitly",
        ),
        (
            lambda x: x * 1.5,
            (np.ones(2, ml_dtypes.int4),),
            r"multiply \(at .*\): cannot promote int4 and Python float implicitly",
        ),
    ],
)
def test_traced_promotion_refusal_names_the_op(fn, args, text):
    with pytest.raises(TypeError, match=text):
        aotkit.lower(fn, *args)


@pytest.mark.parametrize("name", INTS)
def test_python_int_out_of_range_is_an_overflow_error(name):
    x = every_value(name)
    big = int(dtypes.iinfo(x.dtype).max) + 1
    with pytest.raises(
        OverflowError,
        match=rf"add \(at .*\): Python integer {big} out of bounds for {x.dtype.name}; cast the "
        "array to a wider dtype",
    ):
        aotkit.lower(lambda x: x + big, x)


@pytest.mark.parametrize("name", INTS)
def test_comparison_with_out_of_range_int_is_by_value(name):
    # NumPy 2's rule for int8 == 300: every element is on one side of the int.
    x = every_value(name)
    got = aotkit.jit(lambda x: (x == 100, x < 100, x > -100))(x)
    for g, value in zip(got, (False, True, True), strict=True):
        assert_same(g, np.full(x.shape, value))


# --- the tracer against jax.jit ----------------------------------------------------------------

BINARY = {
    "add": lambda xp, x, y: x + y,
    "subtract": lambda xp, x, y: x - y,
    "multiply": lambda xp, x, y: x * y,
    "maximum": lambda xp, x, y: xp.maximum(x, y),
    "minimum": lambda xp, x, y: xp.minimum(x, y),
    "less": lambda xp, x, y: x < y,
    "equal": lambda xp, x, y: x == y,
    "where": lambda xp, x, y: xp.where(x < y, x, y),
}
FLOAT_BINARY = {"divide": lambda xp, x, y: x / y}
INT_BINARY = {
    # NumPy's values: 0 where the divisor is 0 (JAX's x // 0 is -1), see _oracle.
    "floor_divide": lambda xp, x, y: x // y,
    "remainder": lambda xp, x, y: x % y,
    "bitwise_and": lambda xp, x, y: x & y,
    "bitwise_or": lambda xp, x, y: x | y,
    "bitwise_xor": lambda xp, x, y: x ^ y,
}
UNARY = {
    "negative": lambda xp, x: -x,
    "astype_f32": lambda xp, x: x.astype(np.float32),
    "asarray_f32": lambda xp, x: xp.asarray(x, np.float32),
    "astype_bf16": lambda xp, x: x.astype(ml_dtypes.bfloat16),
    "python_ints": lambda xp, x: x * 1 + 1,
    "plus_true": lambda xp, x: x + True,
    "with_int8": lambda xp, x: x * np.int8(1) if dtypes.is_float(x.dtype) else x,
}
FLOAT_UNARY = {
    "floor": lambda xp, x: xp.floor(x),
    "ceil": lambda xp, x: xp.ceil(x),
    "rint": lambda xp, x: xp.rint(x),
    "abs": lambda xp, x: xp.abs(x),
    "sign": lambda xp, x: xp.sign(x),
    "isnan": lambda xp, x: xp.isnan(x),
    "isfinite": lambda xp, x: xp.isfinite(x),
    "sqrt": lambda xp, x: xp.sqrt(x),
    "exp": lambda xp, x: xp.exp(x),
    "sin": lambda xp, x: xp.sin(x),
    "tanh": lambda xp, x: xp.tanh(x),
    "times_python_float": lambda xp, x: x * 0.5,
    "to_int8": lambda xp, x: xp.where(xp.abs(x) < 100, x, 0).astype(np.int8),
    "to_other_float8": lambda xp, x: x.astype(ml_dtypes.float8_e5m2),
}
INT_UNARY = {
    "invert": lambda xp, x: ~x,
    "sign": lambda xp, x: xp.sign(x),
    "to_int32": lambda xp, x: x.astype(np.int32),
    "from_int32": lambda xp, x: x.astype(np.int32).astype(x.dtype),
}
# Ops whose values are exactly defined (one rounding of an exact result): the interpreter must
# agree with XLA on them bit for bit. Transcendental functions round differently there.
INEXACT = {"sqrt", "exp", "sin", "tanh"}


def _cases(backend: str):
    cases = []
    for name in LOW:
        if backend == "interpreter" and name in INTERPRETER_REFUSED:
            continue
        is_float = name in dtypes.LOW_FLOATS
        binary = {**BINARY, **(FLOAT_BINARY if is_float else INT_BINARY)}
        unary = {**UNARY, **(FLOAT_UNARY if is_float else INT_UNARY)}
        for op in (*binary, *unary):
            if backend == "interpreter" and (
                op in INEXACT
                or (name == "f8e3m4" and op in ("floor", "ceil", "rint"))
                or (name == "f4e2m1fn" and op in ("divide", "sqrt"))
            ):
                continue
            cases.append(pytest.param(name, op, id=f"{name}-{op}"))
    return cases


def _program(op: str, dtype_name: str):
    is_float = dtype_name in dtypes.LOW_FLOATS
    table = {
        **BINARY,
        **UNARY,
        **(FLOAT_BINARY if is_float else INT_BINARY),
        **(FLOAT_UNARY if is_float else INT_UNARY),
    }
    return table[op], op in BINARY or op in FLOAT_BINARY or op in INT_BINARY


# Ops where aotkit keeps NumPy's meaning and JAX differs: integer division by zero is 0.
NUMPY_MEANING = {"floor_divide", "remainder"}


def _oracle(op: str, fn, args):
    """jax.jit of `fn` with jax.numpy, or NumPy on ml_dtypes arrays for NUMPY_MEANING (whose
    integer loops keep the operands' dtype)."""
    if op in NUMPY_MEANING:
        return fn(np, *args)
    return jax.jit(lambda *a: fn(jnp, *a))(*args)


@pytest.mark.parametrize("name, op", _cases("cpu"))
def test_traced_op_on_cpu_equals_jax_jit(name, op):
    fn, binary = _program(op, name)
    args = pairs(name) if binary else (every_value(name),)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # NumPy's oracle on NaN and 0
        got = aotkit.jit(lambda *a: fn(anp, *a), backend="cpu")(*args)
        assert_same(got, _oracle(op, fn, args))


@pytest.mark.parametrize("name, op", _cases("interpreter"))
def test_traced_op_on_the_interpreter_equals_jax_jit(name, op):
    fn, binary = _program(op, name)
    args = pairs(name) if binary else (every_value(name),)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        got = aotkit.jit(lambda *a: fn(anp, *a), backend="interpreter")(*args)
        assert_same(got, _oracle(op, fn, args))


@pytest.mark.parametrize("name", ["i2", "i4"])
def test_abs_of_signed_sub_byte_ints_keeps_their_dtype(name):
    # JAX refuses abs of int2/int4 and NumPy computes it in int8: aotkit keeps the dtype, and
    # abs of the least value wraps to itself as it does for int8 (abs(-128) is -128).
    x = every_value(name)
    want = np.abs(x.astype(np.int8))
    want = np.where(x == dtypes.iinfo(x.dtype).min, x.astype(np.int8), want).astype(x.dtype)
    assert_same(aotkit.jit(anp.abs)(x), want)


@pytest.mark.parametrize("name", FLOATS)
def test_signbit_matches_ml_dtypes(name):
    x = every_value(name)
    assert_same(aotkit.jit(anp.signbit)(x), np.signbit(x))


# float8_e8m0fnu has no sign: its -x is NaN.
@pytest.mark.parametrize("name", [n for n in FLOATS if n != "f8e8m0fnu"])
def test_copysign_matches_ml_dtypes(name):
    x = every_value(name)
    assert_same(aotkit.jit(lambda x: anp.copysign(x, -x))(x), np.copysign(x, -x))


@pytest.mark.parametrize("target", [np.int8, np.int32, np.uint8, np.int64])
@pytest.mark.parametrize("name", FLOATS)
def test_float_to_integer_casts_are_exact(name, target):
    # XLA's CPU client converts float4_e2m1fn 6.0 to int32 2**31 - 1; aotkit goes through f32.
    x = every_value(name)
    wide = x.astype(np.float64)
    info = np.iinfo(target)
    x = x[np.isfinite(wide) & (wide >= info.min) & (wide < info.max)]
    assert_same(aotkit.jit(lambda x: x.astype(target))(x), x.astype(target))
    assert_same(aotkit.jit(lambda x: anp.asarray(x, target))(x), x.astype(target))


@pytest.mark.parametrize("name", LOW)
def test_casts_from_wide_types_round_as_ml_dtypes(name):
    dtype = dtypes.ALL_NAMES[name]
    f = np.concatenate(
        [np.linspace(-500, 500, 1001), [np.inf, -np.inf, np.nan, -0.0, 1e-30, 3e-3]]
    ).astype(np.float32)
    i = np.arange(-300, 301, dtype=np.int32)
    if dtypes.is_integer(dtype):
        info = dtypes.iinfo(dtype)
        f = np.trunc(f[np.isfinite(f) & (f >= int(info.min)) & (f <= int(info.max))])
        i = i[(i >= int(info.min)) & (i <= int(info.max))]
    for src in (f, i):
        want = src.astype(dtype)
        if name == "f8e8m0fnu" and float(np.float32(3).astype(dtype)) == 2.0:
            # ml_dtypes 0.5 rounds float8_e8m0fnu's halfway values (3 between 2 and 4) down;
            # XLA, so jax.jit, and newer ml_dtypes round them up.
            want = np.asarray(jax.jit(lambda x: x.astype(dtype))(src))
            assert float(want[src == 3][0]) == 4.0
        assert_same(aotkit.jit(lambda x: x.astype(dtype))(src), want)


@pytest.mark.parametrize("name", ["f8e4m3fn", "f8e4m3fnuz", "f8e8m0fnu", "f4e2m1fn", "i4", "u2"])
def test_max_and_min_reductions_start_from_the_types_own_extremes(name):
    # float8_e4m3fn has no infinity: a max that starts from -inf starts from NaN.
    x = every_value(name)
    wide = x.astype(np.float64)
    # XLA's CPU client flushes float32 subnormals (float8_e8m0fnu's 2**-127) to zero.
    x = x[~np.isnan(wide) & ((wide == 0) | (np.abs(wide) >= 2.0**-126))].reshape(1, -1)
    got = aotkit.jit(lambda x: (anp.max(x), anp.min(x, axis=1), anp.argmax(x), anp.argmin(x)))(x)
    want = (
        np.max(x).astype(x.dtype),
        np.min(x, axis=1).astype(x.dtype),
        np.argmax(x),
        np.argmin(x),
    )
    for g, w in zip(got, want, strict=True):
        assert_same(g, w)


def _random_program(xp, x, y):
    return x * y + x, x / (y - x), xp.maximum(x, -y), (x * 3).astype(np.float32)


# One jitted function each: a hypothesis example reuses their caches (one compile per dtype).
_AOTKIT_RANDOM = aotkit.jit(lambda x, y: _random_program(anp, x, y))
_JAX_RANDOM = jax.jit(lambda x, y: _random_program(jnp, x, y))


@pytest.mark.parametrize("name", FLOATS)
@settings(max_examples=40, deadline=None)
@given(data=st.binary(min_size=64, max_size=64))
def test_arithmetic_on_random_bits_equals_jax_jit(name, data):
    dtype = dtypes.ALL_NAMES[name]
    raw = np.frombuffer(data, np.uint8)
    if name == "f4e2m1fn":
        raw = raw & 0x0F
    x, y = raw[:32].view(dtype), raw[32:].view(dtype)
    for g, w in zip(_AOTKIT_RANDOM(x, y), _JAX_RANDOM(x, y), strict=True):
        assert_same(g, w)


# --- the interpreter's refusals ---------------------------------------------------------------


def test_interpreter_refuses_float8_e8m0fnu():
    x = every_value("f8e8m0fnu")
    with pytest.raises(
        CompileError,
        match=r"backend 'interpreter' rejected module 'lambda': op func.func uses element type "
        r"f8E8M0FNU, which the reference interpreter computes wrong values for \(negate, "
        r"subtract, floor give numbers where XLA gives NaN\); use backend='cpu'",
    ):
        aotkit.lower(lambda x: x * x, x).compile("interpreter")


def test_interpreter_refuses_rounding_float8_e3m4():
    x = every_value("f8e3m4")
    with pytest.raises(
        CompileError,
        match=r"rejected module 'lambda': op stablehlo.floor at .*test_low_precision.py:\d+ uses "
        r"element type f8E3M4, which the reference interpreter rounds to NaN \(floor\(0.5\) "
        r"gives NaN\); use backend='cpu'",
    ):
        aotkit.lower(lambda x: anp.floor(x), x).compile("interpreter")


@pytest.mark.parametrize(
    "fn, op",
    [
        (lambda xp, x: x / x, "divide"),
        (lambda xp, x: xp.log(x), "log"),
        (lambda xp, x: x.astype(np.float32).astype(ml_dtypes.float4_e2m1fn), "convert"),
    ],
)
def test_interpreter_refuses_float4_ops_that_overflow_to_infinity(fn, op):
    x = every_value("f4e2m1fn")
    with pytest.raises(
        CompileError,
        match=rf"op stablehlo.{op} at .* uses element type f4E2M1FN, which the reference "
        r"interpreter turns to 0 where the value overflows to infinity \(XLA and ml_dtypes "
        r"saturate to \+-6\); use backend='cpu'",
    ):
        aotkit.lower(lambda x: fn(anp, x), x).compile("interpreter")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        want = jax.jit(lambda x: fn(jnp, x))(x)
    assert_same(aotkit.jit(lambda x: fn(anp, x), backend="cpu")(x), want)


# --- load_module -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", LOW)
def test_ir_element_types_have_dtypes(name):
    from jaxlib.mlir import ir

    with ir.Context():
        t = ir.Type.parse(MLIR_SPELLING[name])
        assert dtypes.dtype_of_ir_type(t) == dtypes.ALL_NAMES[name]


def test_element_type_without_dtype_is_still_named():
    from jaxlib.mlir import ir

    with ir.Context():
        t = ir.Type.parse("f6E2M3FN")
        with pytest.raises(
            TypeError,
            match=r"element type f6E2M3FN has no aotkit dtype; supported: bool, i8, .*, c128 "
            r"and the low-precision i2, i4, .*, f4e2m1fn$",
        ):
            dtypes.dtype_of_ir_type(t)


def _module_text(name: str) -> str:
    t = f"tensor<4x{MLIR_SPELLING[name]}>"
    op = "stablehlo.add" if name != "f8e8m0fnu" else "stablehlo.multiply"
    return f"""
module @lowp {{
  func.func public @main(%a: {t}, %b: {t}) -> ({t}, tensor<4xf32>, tensor<4xi1>) {{
    %0 = {op} %a, %b : {t}
    %1 = stablehlo.convert %0 : ({t}) -> tensor<4xf32>
    %2 = stablehlo.compare LT, %a, %b : ({t}, {t}) -> tensor<4xi1>
    return %0, %1, %2 : {t}, tensor<4xf32>, tensor<4xi1>
  }}
}}
"""


@pytest.mark.parametrize("backend", ["cpu", "interpreter"])
@pytest.mark.parametrize("name", LOW)
def test_load_module_runs_low_precision_stablehlo(name, backend, tmp_path):
    if backend == "interpreter" and name in INTERPRETER_REFUSED:
        pytest.skip("refused: test_interpreter_refuses_float8_e8m0fnu")
    path = tmp_path / "lowp.mlir"
    path.write_text(_module_text(name))
    lowered = aotkit.load_module(path)
    spec = aotkit.ShapeDtype((4,), ML_DTYPES[name])
    assert lowered.in_specs == ((spec, spec), {})
    dtype = spec.dtype
    a = np.array([1, 2, 0, 1], dtype)
    b = np.array([1, 0, 1, 2], dtype) if name not in ("u2", "i2") else np.array([1, 0, 1, 0], dtype)
    combined = a * b if name == "f8e8m0fnu" else a + b
    got = lowered.compile(backend)(a, b)
    for g, w in zip(got, (combined, combined.astype(np.float32), a < b), strict=True):
        assert_same(g, w)


def test_load_module_refuses_quant_dialect_types(tmp_path):
    path = tmp_path / "q.mlir"
    path.write_text(
        """module @q {
  func.func public @main(%arg0: tensor<4xf32>) -> tensor<4xf32> {
    %0 = stablehlo.uniform_quantize %arg0 : (tensor<4xf32>) -> tensor<4xQ>
    %1 = stablehlo.uniform_dequantize %0 : (tensor<4xQ>) -> tensor<4xf32>
    return %1 : tensor<4xf32>
  }
}
""".replace("Q", "!quant.uniform<i8:f32, 0.1:-3>")
    )
    with pytest.raises(
        ValueError,
        match=r"load_module: .*q.mlir: line 3, column \d+: element type "
        r"!quant.uniform<i8:f32, 0.1:-3> is a quantized type of MLIR's quant dialect, which "
        r"jaxlib's MLIR bindings do not register, so aotkit cannot load the module for any "
        r"backend; lower the quantized ops to integer arithmetic before saving it "
        r"\(StableHLO's stablehlo-legalize-quant-to-math pass\), keeping int8 values and float "
        r"scales",
    ):
        aotkit.load_module(path)


def test_quant_refusal_reads_only_quant_types():
    assert dtypes.quant_refusal("line 1, column 2: expected ')'") is None


# --- artifacts ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", LOW)
def test_artifact_round_trip_keeps_dtypes_and_loads_its_executable(name, tmp_path):
    dtype = dtypes.ALL_NAMES[name]
    x = every_value(name)

    def f(x):
        return x, x.astype(np.float32), x == x

    compiled = aotkit.jit(f).lower(x).compile()
    path = tmp_path / "lowp.aotx"
    compiled.save(path)
    header = aotkit.artifacts.unpack(path.read_bytes()).header
    assert header["in_specs"] == [f"{name}[{x.size}]"]
    assert header["out_specs"][0] == f"{name}[{x.size}]"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a native executable that does not load warns
        loaded = aotkit.load(path)
        got = loaded(x)
    for g, w in zip(got, compiled(x), strict=True):
        assert_same(g, w)
    assert np.asarray(got[0]).dtype == dtype


# --- the CLI -----------------------------------------------------------------------------------

PROGRAM = """
import numpy as np

def f(q, w):
    return q + q, (w * w).astype(np.float32)
"""


@pytest.fixture
def program(tmp_path):
    path = tmp_path / "lowp.py"
    path.write_text(PROGRAM)
    return path


Q = np.array([1, 2, 3, -4], ml_dtypes.int4)
W = np.array([1, 2, 0.5, 3], ml_dtypes.float8_e4m3fn)


def test_cli_lowers_low_precision_shapes(run_cli, program):
    code, out, err = run_cli("lower", f"{program}:f", "--shapes", "i4[4]", "f8e4m3fn[4]", "-o", "-")
    assert code == 0, err
    assert "%arg0: tensor<4xi4>, %arg1: tensor<4xf8E4M3FN>" in out


def test_cli_runs_npy_inputs_of_low_precision_types(run_cli, program, tmp_path):
    np.save(tmp_path / "q.npy", Q)
    np.save(tmp_path / "w.npy", W)
    out_path = tmp_path / "out.npz"
    code, out, err = run_cli(
        "run", f"{program}:f", "--shapes", "i4[4]", "f8e4m3fn[4]",
        "--inputs", tmp_path / "q.npy", tmp_path / "w.npy", "-o", out_path,
    )  # fmt: skip
    assert code == 0, err
    assert "out[0]: i4[4]\n[2 4 6 -8]" in out
    saved = np.load(out_path)
    assert_same(restore_dtype(saved["out[0]"], aotkit.spec("i4[4]")), Q + Q)
    assert_same(saved["out[1]"], (W * W).astype(np.float32))


def test_cli_runs_npz_inputs_of_low_precision_types(run_cli, program, tmp_path):
    np.savez(tmp_path / "in.npz", q=Q, w=W)
    code, out, err = run_cli(
        "run", f"{program}:f", "--shapes", "i4[4]", "f8e4m3fn[4]", "--inputs", tmp_path / "in.npz"
    )
    assert code == 0, err
    assert "out[0]: i4[4]\n[2 4 6 -8]" in out


def test_cli_raw_byte_inputs_without_shapes_say_what_to_do(run_cli, program, tmp_path):
    np.save(tmp_path / "q.npy", Q)
    np.save(tmp_path / "w.npy", W)
    code, out, err = run_cli(
        "run", f"{program}:f", "--inputs", tmp_path / "q.npy", tmp_path / "w.npy"
    )
    assert code == 1
    assert "unsupported dtype dtype('V1'): raw bytes, as numpy.save writes bfloat16" in err
    assert "or give its spec (such as i4[8])" in err
