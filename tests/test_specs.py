"""ShapeDtype, the compact spec syntax, and NumPy 2 / NEP 50 promotion."""

from __future__ import annotations

import itertools

import ml_dtypes
import numpy as np
import pytest

import aotkit
from aotkit import dtypes

BF16 = np.dtype(ml_dtypes.bfloat16)


@pytest.mark.parametrize(
    "text, shape, dtype",
    [
        ("f32[]", (), np.float32),
        ("f32[2,3]", (2, 3), np.float32),
        ("bf16[4]", (4,), BF16),
        ("float32[ 1 , 2 ]", (1, 2), np.float32),
        ("bool[0]", (0,), np.bool_),
        ("c128[1,1,1]", (1, 1, 1), np.complex128),
        ("u64[7]", (7,), np.uint64),
        ("int8[]", (), np.int8),
    ],
)
def test_spec_parses(text, shape, dtype):
    s = aotkit.spec(text)
    assert s == aotkit.ShapeDtype(shape, dtype)
    assert s.shape == shape and s.dtype == np.dtype(dtype)


@pytest.mark.parametrize("name", list(dtypes.SHORT_NAMES))
def test_every_short_name_round_trips(name):
    s = aotkit.spec(f"{name}[2]")
    assert str(s) == f"{name}[2]"
    assert aotkit.spec(str(s)) == s


@pytest.mark.parametrize(
    "text, what",
    [
        ("f32[2,", "cannot parse 'f32\\[2,'"),
        ("q7[3]", "unknown dtype 'q7' in 'q7\\[3\\]'"),
        ("f32[-1]", "bad dimension '-1' in 'f32\\[-1\\]'"),
        ("f32[2.5]", "bad dimension '2.5' in 'f32\\[2.5\\]'"),
        ("f32", "cannot parse 'f32'"),
        ("f32[2]x", "cannot parse"),
    ],
)
def test_malformed_spec_quotes_text_and_syntax(text, what):
    with pytest.raises(ValueError, match=f"spec: {what}.*expected DTYPE\\[DIM,...\\] with DTYPE"):
        aotkit.spec(text)


def test_shape_dtype_is_hashable_and_validated():
    a = aotkit.ShapeDtype((2, 3), "float32")
    assert {a: 1}[aotkit.ShapeDtype([2, 3], np.float32)] == 1
    assert repr(a) == "ShapeDtype(shape=(2, 3), dtype=float32)"
    assert a.ndim == 2 and a.size == 6
    with pytest.raises(ValueError, match="must hold non-negative integers"):
        aotkit.ShapeDtype((2, -1), "float32")
    with pytest.raises(TypeError, match="ShapeDtype: unsupported dtype 'float128'"):
        aotkit.ShapeDtype((2,), "float128")
    with pytest.raises(TypeError, match="unsupported dtype dtype\\('<U3'\\)"):
        aotkit.ShapeDtype((2,), np.dtype("U3"))


STRONG = [np.dtype(n) for n in ("bool", "int8", "uint8", "int16", "int32", "uint32", "int64",
                                "uint64", "float16", "float32", "float64", "complex64",
                                "complex128")]  # fmt: skip


@pytest.mark.parametrize("a, b", list(itertools.product(STRONG, STRONG)), ids=str)
def test_strong_promotion_equals_numpy(a, b):
    assert dtypes.result_type(a, b) == np.result_type(a, b)


@pytest.mark.parametrize("a", STRONG, ids=str)
@pytest.mark.parametrize("scalar", [True, 1, 1.0, 1j], ids=["bool", "int", "float", "complex"])
def test_weak_promotion_equals_numpy(a, scalar):
    assert dtypes.result_type(a, type(scalar)) == (np.zeros((), a) + scalar).dtype


@pytest.mark.parametrize(
    "a, b, want",
    [
        (BF16, np.dtype("float32"), np.float32),
        (BF16, np.dtype("float16"), np.float32),
        (BF16, np.dtype("int8"), BF16),
        (BF16, np.dtype("int16"), np.float32),
        (BF16, np.dtype("int32"), np.float64),
        (BF16, float, BF16),
        (BF16, int, BF16),
        (BF16, complex, np.complex64),
    ],
)
def test_bfloat16_promotion(a, b, want):
    assert dtypes.result_type(a, b) == np.dtype(want)


def test_weak_only_defaults_to_numpy_defaults():
    assert dtypes.result_type(int) == np.int64
    assert dtypes.result_type(int, float) == np.float64
    assert dtypes.result_type(bool, complex) == np.complex128


# --- Spec strings where lower() takes specs (issue 43) ---------------------------------------


def _matmul(x, y):
    return x @ y


def test_lower_reads_spec_strings_as_aotkit_spec_does():
    lowered = aotkit.jit(_matmul).lower("f32[4,3]", "f32[3,2]")
    assert lowered.in_specs == ((aotkit.spec("f32[4,3]"), aotkit.spec("f32[3,2]")), {})
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 3), dtype=np.float32)
    y = rng.standard_normal((3, 2), dtype=np.float32)
    got = lowered.compile()(x, y)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, x @ y, rtol=1e-6)
    # aotkit.lower, keyword arguments and pytrees of spec strings alike.
    same = aotkit.lower(_matmul, "f32[4,3]", y="f32[3,2]").compile()
    np.testing.assert_allclose(same(x, y=y), x @ y, rtol=1e-6)
    tree = aotkit.lower(lambda p: p["w"] @ p["v"], {"w": "bf16[2,3]", "v": "bf16[3]"})
    assert tree.flat_in_specs == (aotkit.spec("bf16[3]"), aotkit.spec("bf16[2,3]"))
    assert tree.out_specs.dtype == BF16
    assert aotkit.jit(_matmul).eval_shape("i32[5,3]", "i32[3,7]") == aotkit.spec("i32[5,7]")
    assert repr(aotkit.jit(_matmul).trace("f32[b,3]", "f32[3,2]")).startswith(
        "<Traced _matmul(x: f32[b,3], y: f32[3,2]) -> (out: f32[b,2])"
    )


def _scaled(x, mode):
    return x * 2 if mode == "double" else x


@pytest.mark.parametrize("how", ["argnums", "argnames"])
def test_a_static_str_stays_a_str(how):
    options = {"static_argnums": 1} if how == "argnums" else {"static_argnames": "mode"}
    jitted = aotkit.jit(_scaled, **options)
    x = np.arange(3, dtype=np.float32)
    for mode, expected in (("double", x * 2), ("f32[3]", x)):  # a static spec-like str too
        lowered = (
            jitted.lower("f32[3]", mode) if how == "argnums" else jitted.lower("f32[3]", mode=mode)
        )
        got = lowered.compile()(x)
        assert got.dtype == np.float32
        np.testing.assert_array_equal(got, expected)


def test_a_str_that_is_no_spec_names_the_argument():
    with pytest.raises(
        TypeError,
        match=r"^_matmul: argument y is the str 'hello', which is not a spec \(cannot parse "
        r"'hello'; expected DTYPE.*\); pass a spec such as 'f32\[4,3\]', an array, or mark it "
        r"static with static_argnums/static_argnames$",
    ):
        aotkit.jit(_matmul).lower("f32[4,3]", "hello")
    with pytest.raises(TypeError, match=r"^_matmul: argument y\['w'\] is the str 'f23\[3\]'.*"
                       r"\(did you mean 'f32'\?\)"):  # fmt: skip
        aotkit.lower(_matmul, "f32[4,3]", {"w": "f23[3]"})


def test_unknown_dtype_suggests_the_nearest_name():
    for typo, meant in (
        ("f23", "f32"),
        ("i46", "i64"),
        ("flaot32", "float32"),
        ("bfloat", "bfloat16"),
    ):
        with pytest.raises(ValueError, match=rf"unknown dtype '{typo}' in '{typo}\[3\]' \(did you "
                           rf"mean '{meant}'\?\); expected DTYPE"):  # fmt: skip
            aotkit.spec(f"{typo}[3]")
    with pytest.raises(ValueError, match=r"^spec: unknown dtype 'qq' in 'qq\[3\]'; expected"):
        aotkit.spec("qq[3]")


def test_a_dimension_past_64_bits_is_refused_before_int_reads_it():
    text = "f32[" + "9" * 5000 + "]"
    with pytest.raises(ValueError) as e:
        aotkit.spec(text)
    message = str(e.value)
    assert message.startswith(f"spec: dimension '{'9' * 20}...{'9' * 10}' (5000 digits) in ")
    assert message.endswith("does not fit in 64 bits (at most 2**63 - 1); use smaller dimensions")
    assert len(message) < 300
    with pytest.raises(ValueError, match=r"does not fit in 64 bits"):
        aotkit.spec("f32[99999999999999999999]")  # 20 digits: past int64 after int()
    assert aotkit.spec("f32[" + "0" * 30 + "3]").shape == (3,)  # leading zeros are no digits
    assert aotkit.spec("u8[9223372036854775807]").shape == (2**63 - 1,)
