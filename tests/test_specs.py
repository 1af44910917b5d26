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
