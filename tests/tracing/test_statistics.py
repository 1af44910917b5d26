"""Histograms, bincount, digitize, cov and corrcoef against NumPy, on cpu and interpreter."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import aotkit
import aotkit.numpy as anp
from tests import lane
from tests.helpers import assert_matches, run_on

BACKENDS = lane.with_lane(["cpu", "interpreter"])
RNG = np.random.default_rng(3)


def _np(fn, *args, **kwargs):
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return fn(*args, **kwargs)


def _check_all(got, want, label, **tol):
    if isinstance(want, tuple):
        assert len(got) == len(want), label
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            assert_matches(g, w, f"{label}[{i}]", **tol)
    else:
        assert_matches(got, want, label, **tol)


# --- histogram --------------------------------------------------------------------------------

HISTOGRAMS = {
    "default": lambda m, x, w: m.histogram(x),
    "bins int range": lambda m, x, w: m.histogram(x, bins=7, range=(-1.0, 2.0)),
    "edges on values": lambda m, x, w: m.histogram(x, bins=4, range=(-2, 2)),
    "bins array": lambda m, x, w: m.histogram(x, bins=[-3, -1, 0, 0.5, 0.5, 3]),
    "weights": lambda m, x, w: m.histogram(x, bins=5, range=(-2, 2), weights=w),
    "density": lambda m, x, w: m.histogram(x, bins=6, density=True),
    "density weights": lambda m, x, w: m.histogram(x, [-2, 0, 1, 2], weights=w, density=True),
    "degenerate range": lambda m, x, w: m.histogram(x, bins=3, range=(1.0, 1.0)),
    "edges only": lambda m, x, w: m.histogram_bin_edges(x, bins=5),
    "edges range": lambda m, x, w: m.histogram_bin_edges(x, bins=5, range=(0, 1)),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "float16"])
def test_histogram_matches_numpy(dtype, backend):
    if dtype == "float64":
        lane.skip_where_float64_is_emulated(
            backend, "a value on a bin edge (within 2**-49) may fall in either bin"
        )
    n = 12 if backend == "interpreter" else 200
    x = np.round(RNG.normal(size=n) * 1.5, 1)
    x[:4] = [-2.0, 2.0, 0.0, 1.0]  # values on edges
    x = x.astype(dtype)
    w = RNG.uniform(0, 2, n).astype(np.float32)
    got = run_on(backend, lambda a, b: {k: f(anp, a, b) for k, f in HISTOGRAMS.items()}, x, w)
    for k, f in HISTOGRAMS.items():
        # float32 weights are summed in another order than NumPy's (cumulative) sums.
        tol = {"rtol": 2e-6} if "weights" in k else {}
        _check_all(got[k], _np(f, np, x, w), f"histogram {k} ({dtype})", **tol)


def test_histogram_nan_and_out_of_range_values_are_dropped():
    x = np.array([np.nan, -5, 0.5, 5, np.inf, 1.0, 0.0], np.float64)
    got = run_on("cpu", lambda a: anp.histogram(a, bins=4, range=(0, 1)), x)
    _check_all(got, np.histogram(x, bins=4, range=(0, 1)), "histogram with NaN")


def test_histogram_of_a_constant_array_widens_its_range():
    x = np.full(5, 3, np.int32)
    got = run_on("cpu", lambda a: anp.histogram(a, bins=4), x)
    _check_all(got, np.histogram(x, bins=4), "histogram of equal values")


@settings(max_examples=20, deadline=None)
@given(
    n=st.integers(1, 40),
    bins=st.integers(1, 12),
    lo=st.floats(-10, 10),
    width=st.floats(0.01, 20),
    seed=st.integers(0, 2**16),
)
def test_histogram_counts_any_bins(n, bins, lo, width, seed):
    x = np.random.default_rng(seed).uniform(lo - 1, lo + width + 1, n).astype(np.float32)
    rng = (lo, lo + width)
    got = run_on("cpu", lambda a: (anp.histogram(a, bins, rng), anp.histogram(a, bins)), x)
    _check_all(got[0], np.histogram(x, bins, rng), f"bins={bins} range={rng}")
    _check_all(got[1], np.histogram(x, bins), f"bins={bins} from data")


HISTOGRAM_ERRORS = [
    (lambda a: anp.histogram(a, bins="auto"), NotImplementedError, "estimates the number of"),
    (lambda a: anp.histogram(a, bins=0), ValueError, "`bins` must be positive, when an integer"),
    (lambda a: anp.histogram(a, bins=2.5), TypeError, "`bins` must be an integer or an array"),
    (lambda a: anp.histogram(a, bins=[[1, 2]]), ValueError, "`bins` must be 1d, when an array"),
    (lambda a: anp.histogram(a, bins=[3, 1]), ValueError, "`bins` must increase monotonically"),
    (lambda a: anp.histogram(a, bins=[1]), ValueError, "`bins` needs at least two edges"),
    (lambda a: anp.histogram(a, range=(2, 1)), ValueError, "max must be larger than min"),
    (lambda a: anp.histogram(a, range=(0, np.inf)), ValueError, "is not finite"),
    (lambda a: anp.histogram(a, range=(a[0], 1)), TypeError, "range= must be static"),
    (
        lambda a: anp.histogram(a, weights=a[:2]),
        ValueError,
        r"weights should have the same shape as a, got \(2,\) and \(3,\)$",
    ),
    (
        lambda a: anp.histogram(a, bins=10**6, range=(0, 1e-300)),
        ValueError,
        "Too many bins for data range",
    ),
]


@pytest.mark.parametrize("case", range(len(HISTOGRAM_ERRORS)))
def test_histogram_errors(case):
    fn, exc, message = HISTOGRAM_ERRORS[case]
    with pytest.raises(exc, match=message):
        aotkit.lower(fn, np.zeros(3, np.float32))


# --- bincount, digitize -----------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_bincount_and_digitize_match_numpy(backend):
    i = np.array([0, 3, 3, 1, 7, 0, 3], np.int32)
    w = np.array([0.5, 1, 2, 3, 4, 5, 6], np.float32)
    x = np.array([-1.0, 0.0, 0.2, 1.0, 2.5, 10.0, np.nan], np.float64)
    up = np.array([0.0, 1.0, 1.0, 2.5])
    down = up[::-1].copy()

    def f(i, w, x, b):
        return {
            "bincount": anp.bincount(i, length=8),
            "bincount weights": anp.bincount(i, weights=w, length=8),
            "bincount minlength": anp.bincount(i, minlength=10, length=8),
            "digitize": anp.digitize(x, up),
            "digitize right": anp.digitize(x, up, right=True),
            "digitize decreasing": anp.digitize(x, down),
            "digitize decreasing right": anp.digitize(x, down, right=True),
            "digitize traced bins": anp.digitize(x, b),
            "digitize traced decreasing": anp.digitize(x, b[::-1], right=True),
        }

    got = run_on(backend, f, i, w, x, up)
    assert_matches(got["bincount"], np.bincount(i, minlength=8), "bincount")
    assert_matches(got["bincount weights"], np.bincount(i, w, minlength=8), "bincount weights")
    assert_matches(got["bincount minlength"], np.bincount(i, minlength=10), "bincount minlength")
    assert_matches(got["digitize"], np.digitize(x, up), "digitize")
    assert_matches(got["digitize right"], np.digitize(x, up, right=True), "digitize right")
    assert_matches(got["digitize decreasing"], np.digitize(x, down), "digitize decreasing")
    want = np.digitize(x, down, right=True)
    assert_matches(got["digitize decreasing right"], want, "digitize decreasing right")
    assert_matches(got["digitize traced bins"], np.digitize(x, up), "digitize traced bins")
    assert_matches(got["digitize traced decreasing"], want, "digitize traced decreasing")


def test_bincount_drops_values_outside_the_length():
    i = np.array([0, -2, 5, 9, 2], np.int64)
    got = run_on("cpu", lambda a: anp.bincount(a, length=6), i)
    assert_matches(got, np.bincount(i[(i >= 0) & (i < 6)], minlength=6), "bincount drops")


BINCOUNT_ERRORS = [
    (
        lambda a: anp.bincount(a),
        TypeError,
        r"depends on the data; pass length=N \(static: values >= N are dropped\), as JAX's "
        r"bincount takes$",
    ),
    (lambda a: anp.bincount(a.astype(np.float32), length=3), TypeError, "non-negative integers"),
    (lambda a: anp.bincount(a.reshape(1, 3), length=3), ValueError, "x must be 1-D"),
    (
        lambda a: anp.bincount(a, a[:1], length=3),
        ValueError,
        r"weights should have the same shape as x, got \(1,\) and \(3,\)$",
    ),
    (lambda a: anp.bincount(a, length=2.5), TypeError, "must be static ints"),
    (lambda a: anp.digitize(a, [1, 0, 2]), ValueError, "monotonically increasing or"),
    (lambda a: anp.digitize(a, [[1, 2]]), ValueError, "object of too small depth"),
    (lambda a: anp.digitize(a.astype(np.complex64), [1]), TypeError, "x may not be complex"),
]


@pytest.mark.parametrize("case", range(len(BINCOUNT_ERRORS)))
def test_bincount_and_digitize_errors(case):
    fn, exc, message = BINCOUNT_ERRORS[case]
    with pytest.raises(exc, match=message):
        aotkit.lower(fn, np.zeros(3, np.int32))


# --- cov, corrcoef ----------------------------------------------------------------------------

COVS = {
    "cov": lambda m, a, b, f, w: m.cov(a),
    "cov rowvar": lambda m, a, b, f, w: m.cov(a, rowvar=False),
    "cov bias": lambda m, a, b, f, w: m.cov(a, bias=True),
    "cov ddof": lambda m, a, b, f, w: m.cov(a, ddof=2),
    "cov y": lambda m, a, b, f, w: m.cov(a[0], b),
    "cov 1-d": lambda m, a, b, f, w: m.cov(b),
    "cov fweights": lambda m, a, b, f, w: m.cov(a, fweights=f),
    "cov aweights": lambda m, a, b, f, w: m.cov(a, aweights=w),
    "cov both": lambda m, a, b, f, w: m.cov(a, fweights=f, aweights=w, ddof=1),
    "cov both bias": lambda m, a, b, f, w: m.cov(a, fweights=f, aweights=w, bias=True),
    "cov f32": lambda m, a, b, f, w: m.cov(a, dtype=np.float32),
    "cov f32 weights": lambda m, a, b, f, w: m.cov(a, aweights=w, dtype=np.float32),
    "corrcoef": lambda m, a, b, f, w: m.corrcoef(a),
    "corrcoef y": lambda m, a, b, f, w: m.corrcoef(a, b, rowvar=True),
    "corrcoef rowvar": lambda m, a, b, f, w: m.corrcoef(a.T, rowvar=False),
    "corrcoef 1-d": lambda m, a, b, f, w: m.corrcoef(b),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", ["float64", "float32", "int32", "complex64"])
def test_cov_and_corrcoef_match_numpy(dtype, backend):
    dtype = np.dtype(dtype)
    if dtype.kind == "i":
        a = RNG.integers(-5, 5, (3, 6)).astype(dtype)
    elif dtype.kind == "c":
        a = (RNG.normal(size=(3, 6)) + 1j * RNG.normal(size=(3, 6))).astype(dtype)
    else:
        a = RNG.normal(size=(3, 6)).astype(dtype)
    b = a[1] * 2 + 1
    f = np.array([1, 2, 0, 3, 1, 1])
    w = RNG.uniform(0.1, 1, 6)
    got = run_on(backend, lambda *args: {k: c(anp, *args) for k, c in COVS.items()}, a, b, f, w)
    for k, c in COVS.items():
        assert_matches(got[k], _np(c, np, a, b, f, w), f"{k} ({dtype})")


def test_cov_with_one_observation_divides_by_zero_like_numpy():
    a = np.array([[1.0], [2.0]])
    got = run_on("cpu", lambda x: (anp.cov(x), anp.cov(x, aweights=np.ones(1))), a)
    assert_matches(got[0], _np(np.cov, a), "cov ddof > observations")
    assert_matches(got[1], _np(np.cov, a, aweights=np.ones(1)), "weighted, no dof")


COV_ERRORS = [
    (lambda a: anp.cov(a, ddof=1.5), ValueError, "ddof must be integer"),
    (lambda a: anp.cov(a.reshape(1, 1, 4)), ValueError, "m has more than 2 dimensions"),
    (lambda a: anp.cov(a, a.reshape(1, 1, 4)), ValueError, "y has more than 2 dimensions"),
    (lambda a: anp.cov(a, a[:3]), ValueError, "must have the same number"),
    (lambda a: anp.cov(a, fweights=[1, 2, 1.5, 1]), TypeError, "fweights must be integer"),
    (lambda a: anp.cov(a, fweights=[1, -2, 1, 1]), ValueError, "fweights cannot be negative"),
    (lambda a: anp.cov(a, aweights=[[1, 2, 1, 1]]), RuntimeError, "multidimensional aweights"),
    (lambda a: anp.cov(a, aweights=[1, 2]), RuntimeError, "incompatible numbers of samples"),
]


@pytest.mark.parametrize("case", range(len(COV_ERRORS)))
def test_cov_errors(case):
    fn, exc, message = COV_ERRORS[case]
    with pytest.raises(exc, match=message):
        aotkit.lower(fn, np.zeros(4, np.float64))
