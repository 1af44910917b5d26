"""cpu agrees with its peers: the same aotkit programs give the same results on cpu and on
the interpreter and iree backends (`tests.helpers.PEERS`).

The interpreter evaluates StableHLO op by op with exact element-type semantics; XLA and
IREE fuse and use their own approximations of transcendental functions, so floats agree
within a dtype-appropriate tolerance and everything else bit for bit. Result dtypes must
be equal.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import aotkit.numpy as anp
from aotkit import dtypes
from tests.helpers import PEERS, run_on

# (relative, absolute) tolerance of float results, by result dtype. Values are about
# N(0, 3), so intermediates reach ~10: XLA's CPU backend may keep a half-precision
# intermediate in f32 (its default `xla_allow_excess_precision`, or native FP16 FMA on CPUs
# with AVX512-FP16) where the interpreter rounds every op, so f16 results differ by up to
# half an ulp of those intermediates (0.004 at 8), whatever the result's own size.
TOLERANCE = {
    np.dtype(np.float16): (2e-3, 8e-3),
    dtypes.bfloat16: (2e-2, 1e-2),
    np.dtype(np.float32): (2e-5, 1e-6),
    np.dtype(np.float64): (1e-12, 1e-14),
    np.dtype(np.complex64): (2e-5, 1e-6),
    np.dtype(np.complex128): (1e-12, 1e-14),
}


def assert_agree(cpu_out, peer_out):
    cpu_leaves = cpu_out if isinstance(cpu_out, tuple) else (cpu_out,)
    peer_leaves = peer_out if isinstance(peer_out, tuple) else (peer_out,)
    assert len(cpu_leaves) == len(peer_leaves)
    for a, b in zip(cpu_leaves, peer_leaves):
        a, b = np.asarray(a), np.asarray(b)
        assert a.dtype == b.dtype, (a.dtype, b.dtype)
        assert a.shape == b.shape
        if a.dtype in TOLERANCE:
            rtol, atol = TOLERANCE[a.dtype]
            wide = np.complex128 if dtypes.is_complex(a.dtype) else np.float64
            np.testing.assert_allclose(
                a.astype(wide), b.astype(wide), rtol=rtol, atol=atol, equal_nan=True
            )
        else:
            np.testing.assert_array_equal(a, b)


def values(shape, dtype, seed, *, positive=False, nonzero=False) -> np.ndarray:
    rng = np.random.default_rng(seed)
    dtype = np.dtype(dtype)
    if dtype.kind == "b":
        return rng.integers(0, 2, shape).astype(bool)
    if dtype.kind in "iu":
        low = 1 if positive else (0 if dtype.kind == "u" else -50)
        x = rng.integers(low, 50, shape).astype(dtype)
        if nonzero:
            x = np.where(x == 0, dtype.type(7), x)
        return x
    real = dtypes.real_dtype(dtype) if dtypes.is_complex(dtype) else dtype
    x = rng.standard_normal(shape) * 3
    if positive:
        x = np.abs(x) + 0.1
    if dtypes.is_complex(dtype):
        x = x + 1j * rng.standard_normal(shape)
        return x.astype(dtype)
    return x.astype(real)


ARITH_DTYPES = ["f32", "f64", "bf16", "f16", "c64", "i32", "u8", "i8"]
FLOAT_DTYPES = ["f32", "f64", "bf16"]
INT_DTYPES = ["i32", "i64", "u8", "i16"]
SHAPES = [((), ()), ((3, 1), (4,)), ((2, 3), (2, 3))]


def _dtype(name):
    return dtypes.SHORT_NAMES[name]


@pytest.mark.parametrize("peer", PEERS)
@pytest.mark.parametrize("shapes", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", ARITH_DTYPES)
def test_arithmetic(peer, dtype, shapes):
    x = values(shapes[0], _dtype(dtype), 1)
    y = values(shapes[1], _dtype(dtype), 2)

    def f(x, y):
        return x * y + x - y, -x, x * x

    assert_agree(run_on("cpu", f, x, y), run_on(peer, f, x, y))


@pytest.mark.parametrize("peer", PEERS)
@pytest.mark.parametrize("shapes", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_transcendental(peer, dtype, shapes):
    x = values(shapes[0], _dtype(dtype), 3)
    y = values(shapes[1], _dtype(dtype), 4, positive=True)

    def f(x, y):
        return (
            anp.exp(anp.sin(x)) * anp.tanh(x),
            anp.sqrt(y) + anp.log1p(y),
            anp.arctan2(x, y),
            anp.where(x > 0, x, anp.cos(x)),
        )

    assert_agree(run_on("cpu", f, x, y), run_on(peer, f, x, y))


@pytest.mark.parametrize("peer", PEERS)
@pytest.mark.parametrize("shapes", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", INT_DTYPES)
def test_integer_division_and_bits(peer, dtype, shapes):
    x = values(shapes[0], _dtype(dtype), 5)
    y = values(shapes[1], _dtype(dtype), 6, nonzero=True)

    def f(x, y):
        return x // y, x % y, x & y, x | y, x ^ y, anp.maximum(x, y)

    assert_agree(run_on("cpu", f, x, y), run_on(peer, f, x, y))


@pytest.mark.parametrize("peer", PEERS)
@pytest.mark.parametrize("dtype", ["f32", "i32", "u8", "bool"])
def test_comparisons_and_logic(peer, dtype):
    x = values((2, 3), _dtype(dtype), 7)
    y = values((3,), _dtype(dtype), 8)

    def f(x, y):
        return (x < y) & (x != y), (x == y) | ~(x >= y), anp.logical_xor(x > y, x <= y)

    assert_agree(run_on("cpu", f, x, y), run_on(peer, f, x, y))


@pytest.mark.parametrize("peer", PEERS)
@pytest.mark.parametrize("dtype", ["c64", "c128"])
def test_complex_programs(peer, dtype):
    z = values((2, 3), _dtype(dtype), 9)

    def f(z):
        return z * anp.conj(z) + anp.exp(z), anp.abs(z), anp.real(z) - anp.imag(z)

    assert_agree(run_on("cpu", f, z), run_on(peer, f, z))


@pytest.mark.parametrize("peer", PEERS)
@pytest.mark.parametrize("dtype", ["f32", "i32", "bf16"])
def test_casts_and_reductions(peer, dtype):
    x = values((3, 4), _dtype(dtype), 10)

    def f(x):
        return x.astype("float64") * 0.5, x.sum(axis=0), x.max(), x.astype(ml_dtypes.bfloat16)

    assert_agree(run_on("cpu", f, x), run_on(peer, f, x))


@pytest.mark.parametrize("peer", PEERS)
@settings(max_examples=25, deadline=None)
@given(
    shapes=hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=3, max_side=4),
    dtype=st.sampled_from(["f32", "i32", "bf16"]),
    seed=st.integers(0, 2**16),
)
def test_broadcasting_expression_agrees(peer, shapes, dtype, seed):
    x = values(shapes.input_shapes[0], _dtype(dtype), seed)
    y = values(shapes.input_shapes[1], _dtype(dtype), seed + 1)

    def f(x, y):
        return anp.minimum(x * 2 + y, x - y * 3)

    assert_agree(run_on("cpu", f, x, y), run_on(peer, f, x, y))
