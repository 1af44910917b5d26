"""Elementwise ops against NumPy: values and result dtypes, on the CPU backend and the
StableHLO reference interpreter.

Each case lowers one `aotkit.numpy` function for one dtype, runs it on a backend, and
compares with the same NumPy function on the same inputs. Where NumPy has no loop for a
dtype, aotkit must refuse it with a TypeError too.
"""

from __future__ import annotations

import warnings
import zlib

import ml_dtypes
import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import aotkit
import aotkit.numpy as anp
from tests import lane
from tests.helpers import BACKENDS, run_on
from tests.helpers import assert_matches as _check

BF16 = np.dtype(ml_dtypes.bfloat16)
DTYPES = [np.dtype(d) for d in ("float32", "float64", "int32", "uint8", "bool")] + [BF16]

UNARY = [
    "abs", "negative", "positive", "sign", "sqrt", "cbrt", "square", "reciprocal", "exp",
    "exp2", "expm1", "log", "log2", "log10", "log1p", "sin", "cos", "tan", "arcsin", "arccos",
    "arctan", "sinh", "cosh", "tanh", "arcsinh", "arccosh", "arctanh", "floor", "ceil",
    "trunc", "rint", "isfinite", "isnan", "isinf", "signbit", "logical_not", "invert",
    "bitwise_not", "real", "imag", "conj", "fabs",
]  # fmt: skip
BINARY = [
    "add", "subtract", "multiply", "divide", "true_divide", "floor_divide", "remainder", "mod",
    "fmod", "power", "float_power", "maximum", "minimum", "fmax", "fmin", "arctan2", "hypot",
    "logaddexp", "logaddexp2", "copysign", "equal", "not_equal", "less", "less_equal",
    "greater", "greater_equal", "logical_and", "logical_or", "logical_xor", "bitwise_and",
    "bitwise_or", "bitwise_xor", "left_shift", "right_shift",
]  # fmt: skip

RNG = np.random.default_rng(0)


def _values(dtype: np.dtype, shape, *, positive=False, op=None, rng=RNG) -> np.ndarray:
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    if dtype.kind in "iu":
        lo = 0 if (positive or dtype.kind == "u") else -9
        hi = 8 if op in ("left_shift", "right_shift") else 10
        return rng.integers(lo, hi, shape).astype(dtype)
    x = rng.uniform(0.1 if positive else -3, 3, shape)
    if not positive and shape and shape[-1] >= 2:
        x[..., :2] = [0.0, -0.0]
    return x.astype(dtype)


def _numpy_oracle(fn_name: str, *args):
    """NumPy's answer; bf16 is computed in float32 and its dtype mapped back to bf16."""
    bf16 = any(a.dtype == BF16 for a in args)
    if bf16:
        args = tuple(a.astype(np.float32) if a.dtype == BF16 else a for a in args)
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        out = getattr(np, fn_name)(*args)
    if bf16 and out.dtype == np.float32:
        out = out.astype(BF16)
    return out


def _numpy_refuses(fn_name: str, *args) -> bool:
    try:
        _numpy_oracle(fn_name, *args)
    except TypeError:
        return True
    return False


def _case_rng(*parts) -> np.random.Generator:
    """A generator seeded by the case, so inputs do not depend on which tests ran before."""
    return np.random.default_rng(zlib.crc32(repr(parts).encode()))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", UNARY)
def test_unary_matches_numpy(name, dtype, backend):
    x = _values(dtype, (2, 5), rng=_case_rng(name, str(dtype)))
    if dtype.kind in "iu" and name == "reciprocal":
        x[x == 0] = 1  # integer 1/0: NumPy gives INT_MIN on x86, aotkit 0 (docs/programs.md)
    fn = getattr(anp, name)
    if _numpy_refuses(name, x):
        with pytest.raises(TypeError, match=f"does not support operands of dtype \\({dtype}\\)"):
            aotkit.lower(fn, x)
        return
    _check(run_on(backend, fn, x), _numpy_oracle(name, x))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", BINARY)
def test_binary_matches_numpy(name, dtype, backend):
    rng = _case_rng(name, str(dtype))
    x = _values(dtype, (2, 6), op=name, rng=rng)
    y = _values(dtype, (2, 6), op=name, rng=rng)
    if dtype.kind in "iu" and name in ("floor_divide", "remainder", "mod", "fmod"):
        y[0, :3] = 0  # NumPy gives 0 for integer division by zero; XLA would give -1
    if dtype.kind in "iu" and name in ("power",):
        y = np.abs(y) % 4  # negative integer powers raise in NumPy (documented divergence)
    float64 = dtype == np.float64 if name == "power" else dtype.kind not in "iu"
    if name in ("power", "float_power") and float64:  # (float_power computes in float64)
        lane.skip_where_float64_is_emulated(backend, "nan ** 0 and 1 ** nan are nan")
    fn = getattr(anp, name)
    if _numpy_refuses(name, x, y):
        with pytest.raises(TypeError, match="does not support operands of dtype"):
            aotkit.lower(fn, x, y)
        return
    _check(run_on(backend, fn, x, y), _numpy_oracle(name, x, y))


@pytest.mark.parametrize("dtype", [np.dtype("float32"), np.dtype("float64")], ids=str)
def test_float_floor_divide_and_remainder_edge_cases(dtype):
    x = np.array([-7.5, 7.0, 5.0, -5.0, 0.0, -0.0, np.nan, np.inf, 1.0, -1.0], dtype)
    y = np.array([2.0, -2.0, 0.0, 3.0, -1.0, 2.0, 1.0, 2.0, np.inf, np.inf], dtype)
    got = run_on("cpu", lambda a, b: (a // b, a % b, anp.fmod(a, b)), x, y)
    with np.errstate(all="ignore"):
        want = (x // y, x % y, np.fmod(x, y))
    for g, w in zip(got, want, strict=True):
        _check(g, w)
        np.testing.assert_array_equal(np.signbit(g), np.signbit(w))


def test_complex_math():
    z = (RNG.normal(size=6) + 1j * RNG.normal(size=6)).astype(np.complex64)
    w = (RNG.normal(size=6) + 1j * RNG.normal(size=6)).astype(np.complex64)
    names = ["abs", "sqrt", "exp", "log", "conj", "real", "imag", "sign", "negative", "rint"]
    got = run_on("cpu", lambda a: tuple(getattr(anp, n)(a) for n in names), z)
    for n, g in zip(names, got, strict=True):
        _check(g, _numpy_oracle(n, z))
    got = run_on("cpu", lambda a, b: (a * b, a / b, a + b, a == b), z, w)
    for g, want in zip(got, (z * w, z / w, z + w, z == w), strict=True):
        _check(g, want)


# --- weak scalars and promotion ----------------------------------------------------------------

WEAK_CASES = [
    ("f32 * 2.0", np.float32, lambda x: x * 2.0),
    ("f32 + 1", np.float32, lambda x: x + 1),
    ("i8 + 1", np.int8, lambda x: x + 1),
    ("i32 + 1.5", np.int32, lambda x: x + 1.5),
    ("u8 * 3", np.uint8, lambda x: x * 3),
    ("bool + 1", np.bool_, lambda x: x + 1),
    ("f16 * 1j", np.float16, lambda x: x * 1j),
    ("i32 / 2", np.int32, lambda x: x / 2),
    ("2 ** f64", np.float64, lambda x: 2**x),
    ("1.0 - u8", np.uint8, lambda x: 1.0 - x),
    ("i64 // 3", np.int64, lambda x: x // 3),
    ("True & bool", np.bool_, lambda x: True & x),
]


@pytest.mark.parametrize("case", WEAK_CASES, ids=[c[0] for c in WEAK_CASES])
def test_weak_python_scalars_follow_nep50(case):
    _, dtype, fn = case
    x = _values(np.dtype(dtype), (4,), positive=True)
    with np.errstate(all="ignore"):
        want = fn(x)
    _check(run_on("cpu", fn, x), np.asarray(want))


def test_bf16_keeps_its_dtype_with_weak_floats():
    x = np.array([1.5, -2.0], BF16)
    out = run_on("cpu", lambda a: (a * 2.0, a + 1, a + np.float32(1)), x)
    assert [o.dtype for o in out] == [BF16, BF16, np.dtype(np.float32)]
    np.testing.assert_array_equal(out[0].astype(np.float32), [3.0, -4.0])


def test_weak_int_out_of_range_raises_like_numpy():
    with pytest.raises(OverflowError, match="add .*Python integer 1000 out of bounds for int8"):
        aotkit.lower(lambda x: x + 1000, aotkit.spec("i8[3]"))


def test_numpy_scalars_and_arrays_become_constants():
    table = np.arange(6, dtype=np.float32).reshape(2, 3)
    x = np.ones((2, 3), np.float32)
    lowered = aotkit.lower(lambda a: a * table + np.float32(0.5), x)
    assert "stablehlo.constant dense<[[0.000000e+00" in lowered.as_text()
    _check(run_on("cpu", lambda a: a * table + np.float32(0.5), x), x * table + np.float32(0.5))


# --- broadcasting and mixed dtypes (hypothesis) ------------------------------------------------

MIXED = [np.dtype(d) for d in ("float32", "float64", "int8", "int32", "uint8", "bool")]


@st.composite
def _broadcast_case(draw):
    shapes = draw(hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=3, max_side=4))
    d1, d2 = draw(st.sampled_from(MIXED)), draw(st.sampled_from(MIXED))
    op = draw(st.sampled_from(BINARY))
    return op, shapes.input_shapes, d1, d2


@settings(max_examples=80, deadline=None)
@given(_broadcast_case())
def test_broadcasting_and_promotion_match_numpy(case):
    op, (s1, s2), d1, d2 = case
    x = _values(d1, s1, positive=True) if s1 else _values(d1, (1,), positive=True)[0]
    y = _values(d2, s2, positive=True) if s2 else _values(d2, (1,), positive=True)[0]
    x, y = np.asarray(x, d1), np.asarray(y, d2)
    if _numpy_refuses(op, x, y):
        with pytest.raises(TypeError):
            aotkit.lower(getattr(anp, op), x, y)
        return
    _check(run_on("cpu", getattr(anp, op), x, y), _numpy_oracle(op, x, y))


SCALAR_DTYPES = [np.dtype(d) for d in ("float16", "float32", "float64", "int8", "int32")] + [
    np.dtype(d) for d in ("uint8", "complex64", "bool")
]


@st.composite
def _scalar_case(draw):
    op = draw(st.sampled_from(BINARY))
    dtype = draw(st.sampled_from(SCALAR_DTYPES))
    scalar = draw(st.sampled_from([0, 1, 3, -2, 300, 0.5, -1.5, 2.0]))
    return op, dtype, scalar, draw(st.booleans())


@settings(max_examples=80, deadline=None)
@given(_scalar_case())
def test_arrays_with_python_scalars_match_numpy(case):
    # A strongly typed array next to a Python scalar, on either side: NEP 50 keeps the
    # array's dtype when the scalar's kind is no higher, and NumPy's errors stay errors.
    op, dtype, scalar, scalar_first = case
    # XLA's complex power overflows to inf+nanj where NumPy gives inf+0j.
    assume(not (op in ("power", "float_power") and dtype.kind == "c" and scalar == 300))
    x = _values(dtype, (2, 3), positive=True)

    def fn(a):
        return getattr(anp, op)(scalar, a) if scalar_first else getattr(anp, op)(a, scalar)

    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            want = getattr(np, op)(scalar, x) if scalar_first else getattr(np, op)(x, scalar)
    except (TypeError, OverflowError, ValueError) as e:
        with pytest.raises(type(e)):
            aotkit.lower(fn, x)
        return
    _check(run_on("cpu", fn, x), np.asarray(want))


@pytest.mark.parametrize("op", ["equal", "not_equal", "less", "less_equal", "greater"])
@pytest.mark.parametrize("dtype, n", [("int8", 300), ("int8", -129), ("uint8", -1)])
@pytest.mark.parametrize("n_first", [False, True])
def test_comparisons_with_ints_out_of_range_match_numpy(op, dtype, n, n_first):
    # Found by the test above: NumPy 2 compares by value where arithmetic would overflow.
    x = np.array([0, 1, 127], dtype)

    def fn(a):
        return getattr(anp, op)(n, a) if n_first else getattr(anp, op)(a, n)

    want = getattr(np, op)(n, x) if n_first else getattr(np, op)(x, n)
    _check(run_on("cpu", fn, x), want)


@pytest.mark.parametrize(
    "op", ["equal", "not_equal", "less", "less_equal", "greater", "greater_equal"]
)
@pytest.mark.parametrize("signed", ["int64", "int32", "int8"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_uint64_compares_with_signed_integers_exactly(op, signed, backend):
    # NumPy 2 has its own loop for uint64 against a signed integer (no common integer
    # dtype holds both); aotkit emitted a compare of u64 with i64 (an invalid module).
    u = np.array([0, 5, 2**63 - 1, 2**63, 2**63 + 5, 2**64 - 1], np.uint64)
    info = np.iinfo(signed)
    s = np.array([info.min, -1, 0, 5, info.max, 1], signed)
    for a, b in ((u, s), (s, u), (u[:, None], s), (s[:, None], u), (u, s.dtype.type(-1))):
        want = getattr(np, op)(a, b)
        got = run_on(backend, lambda a, b: getattr(anp, op)(a, b), a, b)
        _check(got, want)


def test_a_negative_power_out_of_an_unsigned_range_overflows_first():
    # NumPy converts the exponent before it refuses negative integer powers: u8 ** -2 is
    # the exponent's OverflowError, i8 ** -2 the refusal.
    with pytest.raises(OverflowError, match=r"power .*Python integer -2 out of bounds for uint8"):
        aotkit.lower(lambda a: a**-2, aotkit.spec("u8[3]"))
    with pytest.raises(ValueError, match="integers to negative integer powers are not allowed"):
        aotkit.lower(lambda a: a**-2, aotkit.spec("i8[3]"))


# Found by the hypothesis test above: XLA rewrites `convert(bool) / y` into a select that
# gives 0 where NumPy gives NaN (0 / 0); aotkit converts booleans to floats with a select.
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("op", ["divide", "true_divide", "multiply"])
@pytest.mark.parametrize(
    "y",
    [np.asarray(False), np.array([False, False]), np.float32(0.0), np.float32(np.inf)],
    ids=["bool-0d", "bool-1d", "f32-zero", "f32-inf"],
)
def test_booleans_as_numbers_keep_ieee_nan_and_inf(op, y, backend):
    x = np.array([True, False])
    _check(run_on(backend, getattr(anp, op), x, y), _numpy_oracle(op, x, np.asarray(y)))


def test_shapes_that_cannot_broadcast_raise():
    with pytest.raises(
        ValueError, match=r"add \(at .*test_elementwise.py:\d+\): shapes \(3, 4\) and \(5,\) cannot"
    ):
        aotkit.lower(lambda a, b: a + b, aotkit.spec("f32[3,4]"), aotkit.spec("f32[5]"))


# --- where, clip, creation, astype -----------------------------------------------------------


def test_where_and_clip():
    x = _values(np.dtype(np.float32), (3, 4))
    got = run_on(
        "cpu",
        lambda a: (anp.where(a > 0, a, 0), anp.where(a > 0, 1, 2.5), anp.clip(a, -1, 1)),
        x,
    )
    for g, w in zip(got, (np.where(x > 0, x, 0), np.where(x > 0, 1, 2.5), np.clip(x, -1, 1))):
        _check(g, w)


def test_where_needs_both_branches():
    with pytest.raises(ValueError, match="data-dependent shape; pass both x and y"):
        aotkit.lower(lambda a: anp.where(a > 0), aotkit.spec("f32[3]"))


CREATION = {
    "zeros": lambda m: m.zeros((2, 3)),
    "ones-int8": lambda m: m.ones(4, dtype="int8"),
    "full-int": lambda m: m.full((2,), 7),
    "full-f32": lambda m: m.full((2,), 1.5, dtype=np.float32),
    "zeros-bool": lambda m: m.zeros((1, 2), dtype=bool),
    "arange": lambda m: m.arange(5),
    "arange-step": lambda m: m.arange(2, 11, 3),
    "arange-negative-step": lambda m: m.arange(5, -3, -2),
    "arange-float": lambda m: m.arange(0.0, 1.0, 0.25),
    "arange-f32": lambda m: m.arange(5, dtype=np.float32),
    "linspace": lambda m: m.linspace(0, 1, 5),
    "linspace-noend": lambda m: m.linspace(-2, 2, 4, endpoint=False),
    "linspace-int": lambda m: m.linspace(0, 10, 6, dtype=np.int32),
    "asarray-list": lambda m: m.asarray([1, 2, 3]),
    "array-scalar": lambda m: m.array(2.5),
    "asarray-bool": lambda m: m.asarray([[1, 0, 1]], dtype=bool),
}


@pytest.mark.parametrize("name", CREATION)
def test_creation_matches_numpy(name):
    make = CREATION[name]
    _check(run_on("cpu", lambda: make(anp)), make(np))


@pytest.mark.parametrize(
    "start, stop, num, endpoint",
    [
        (np.float64(0.0), np.float64(2.0), 5, True),
        (np.float32(-1.0), np.float32(1.0), 4, False),
        (np.array([0.0, 1.0]), np.array([2.0, -1.0]), 5, True),
        (np.array([[0.0], [1.0]], np.float32), np.array([2.0, 3.0, 4.0], np.float32), 3, True),
        (np.float64(1.0), np.float64(3.0), 1, True),
        (np.int32(0), np.int32(7), 4, False),
    ],
)
def test_linspace_step_has_the_ends_shape(start, stop, num, endpoint):
    # retstep's step came back broadcast over the num axis too: shape (num,) for scalars.
    def fn(a, b):
        return anp.linspace(a, b, num, endpoint=endpoint, retstep=True)

    values, step = run_on("cpu", fn, start, stop)
    want_values, want_step = np.linspace(start, stop, num, endpoint=endpoint, retstep=True)
    _check(values, want_values)
    _check(step, np.asarray(want_step))


def test_empty_is_zeros():
    # Uninitialized memory has no meaning in StableHLO; aotkit's empty is documented as zeros.
    _check(run_on("cpu", lambda: anp.empty((2,), dtype=np.int8)), np.zeros((2,), np.int8))


def test_like_functions():
    x = _values(np.dtype(np.int32), (2, 3))
    got = run_on(
        "cpu",
        lambda a: (
            anp.zeros_like(a),
            anp.ones_like(a, dtype=np.float32),
            anp.full_like(a, 4),
            anp.empty_like(a),
            anp.full_like(a, 2.5, shape=(3,)),
        ),
        x,
    )
    want = (
        np.zeros_like(x),
        np.ones_like(x, dtype=np.float32),
        np.full_like(x, 4),
        np.zeros_like(x),
        np.full_like(x, 2.5, shape=(3,)),
    )
    for g, w in zip(got, want, strict=True):
        _check(g, w)


@pytest.mark.parametrize("src", DTYPES, ids=str)
@pytest.mark.parametrize("dst", DTYPES + [np.dtype(np.complex64)], ids=str)
def test_astype_matches_numpy(src, dst):
    x = _values(src, (6,), positive=True)
    got = run_on("cpu", lambda a: a.astype(dst), x)
    want = x.astype(np.float32).astype(dst) if src == BF16 else x.astype(dst)
    _check(got, want)


def test_arange_with_traced_bound_is_refused():
    with pytest.raises(TypeError, match="stop is traced, but the length of the result"):
        aotkit.lower(lambda n: anp.arange(0, n), aotkit.spec("i32[]"))


def test_array_and_astype_copy_but_asarray_aliases():
    def f(a):
        b = anp.array(a)
        b[0] = 1.0
        c = a.astype(np.float32)
        c[1] = 5.0
        d = anp.asarray(a)  # no copy in NumPy either: writing through d changes a
        d[2] = 7.0
        return a, b, c, d

    def numpy_f(a):
        a = a.copy()
        b = np.array(a)
        b[0] = 1.0
        c = a.astype(np.float32)
        c[1] = 5.0
        d = np.asarray(a)
        d[2] = 7.0
        return a, b, c, d

    x = np.zeros(3, np.float32)
    for g, w in zip(run_on("cpu", f, x), numpy_f(x), strict=True):
        _check(g, w)


# --- static exponents: integer_pow and NumPy's fast scalar power ------------------------------

POWERS = [0, 1, 2, 3, 7, -1, -3, 0.5, 2.0, -1.0, 3.0]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64, np.int32, np.uint8])
@pytest.mark.parametrize("exponent", POWERS, ids=repr)
def test_static_powers_match_numpy(exponent, dtype, backend):
    dtype = np.dtype(dtype)
    x = _values(dtype, (6,), positive=dtype.kind in "iu", rng=_case_rng(exponent, str(dtype)))
    if dtype.kind == "f":
        x[:3] = [-0.0, -np.inf, np.nan]
    if dtype == np.float64:
        lane.skip_where_float64_is_emulated(backend, "-0.0 is 0.0 and (-inf) ** 3.0 is nan")
    fn = lambda a: a**exponent  # noqa: E731
    if dtype.kind in "iu" and isinstance(exponent, int) and exponent < 0:
        # NumPy converts the exponent first: u8 ** -1 overflows, i32 ** -1 is refused.
        refusal, words = (
            (OverflowError, "out of bounds for uint8")
            if dtype.kind == "u"
            else (ValueError, "(?i)integers to negative integer powers")
        )
        with pytest.raises(refusal, match=words):
            fn(x)
        with pytest.raises(refusal, match=words):
            aotkit.lower(fn, x)
        return
    with np.errstate(all="ignore"):
        want = fn(x)
    _check(run_on(backend, fn, x), want)


@pytest.mark.parametrize(
    "exponent, ops",
    [(2, {"multiply"}), (3, {"multiply"}), (-1, {"divide"}), (0.5, {"sqrt"}), (3.0, {"power"})],
    ids=repr,
)
def test_integer_powers_are_multiplies(exponent, ops):
    text = aotkit.lower(lambda a: a**exponent, aotkit.spec("f32[4]")).as_text()
    found = {w.split(".")[1] for w in text.split() if w.startswith("stablehlo.")}
    assert found - {"constant"} == ops, text


def test_negative_integer_power_of_integers_is_refused():
    with pytest.raises(
        ValueError,
        match=r"^power \(at .*\): integers to negative integer powers are not allowed \(NumPy "
        r"raises too\): i32 \*\* -2; use a float base$",
    ):
        aotkit.lower(lambda a: a**-2, aotkit.spec("i32[3]"))
