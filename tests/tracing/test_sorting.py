"""Sorting, searching, unique and quantiles against NumPy (JAX for unique's padding).

Sorts are compared with NumPy's stable sort element for element, signs of zeros included
(aotkit always sorts stably, and -0.0 == 0.0 keeps input order in both). Each case runs on
the CPU backend and, with small inputs, on the reference interpreter.
"""

from __future__ import annotations

import warnings

import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import aotkit
import aotkit.numpy as anp
from tests import lane
from tests.helpers import assert_matches, run_on

BF16 = np.dtype(ml_dtypes.bfloat16)
BACKENDS = lane.with_lane(["cpu", "interpreter"])
SORT_DTYPES = [
    np.dtype(d)
    for d in ("float32", "float64", "float16", "int8", "int32", "int64", "uint8", "uint32")
] + [np.dtype(np.bool_), np.dtype(np.complex64), BF16]
RNG = np.random.default_rng(7)


def _values(dtype: np.dtype, shape, rng=RNG) -> np.ndarray:
    """Values with ties; floats also get NaN, infinities and zeros of both signs."""
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    if dtype.kind in "iu":
        lo = 0 if dtype.kind == "u" else -4
        return rng.integers(lo, 5, shape).astype(dtype)
    specials = np.array([np.nan, -np.inf, np.inf, 0.0, -0.0, 1.0, -1.0])
    base = np.round(rng.uniform(-3, 3, shape), 1)
    pick = rng.random(shape) < 0.4
    x = np.where(pick, rng.choice(specials, shape), base)
    if dtype.kind == "c":
        y = np.where(rng.random(shape) < 0.3, rng.choice(specials, shape), np.round(base, 0))
        z = np.empty(np.shape(x), dtype)
        z.real, z.imag = x, y
        return z
    return x.astype(dtype)


def _np_sort(fn, x, **kw):
    """NumPy's stable sort; bfloat16 through float32 (ml_dtypes' own sort puts NaN anywhere)."""
    if x.dtype == BF16:
        out = fn(x.astype(np.float32), kind="stable", **kw)
        return out.astype(BF16) if fn is np.sort else out
    return fn(x, kind="stable", **kw)


def _same_sorted(got, want, label):
    """Equal element for element: NaN matches NaN and zeros must have the same sign."""
    assert_matches(got, want, label, rtol=0, atol=0)
    if want.dtype.kind in "fc" or want.dtype == BF16:
        parts = (np.real, np.imag) if want.dtype.kind == "c" else (lambda v: v,)
        for part in parts:
            g = np.asarray(part(got)).astype(np.float64)
            w = np.asarray(part(want)).astype(np.float64)
            np.testing.assert_array_equal(np.signbit(g), np.signbit(w), err_msg=label)


# --- sort, argsort ----------------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", SORT_DTYPES, ids=str)
def test_sort_and_argsort_match_numpy_stable(dtype, backend):
    if dtype == np.float64:
        lane.skip_where_float64_is_emulated(
            backend, "values come back within 2**-49 and -0.0 as 0.0, where this check is exact"
        )
    shape = (3, 5) if backend == "interpreter" else (6, 40)
    x = _values(dtype, shape)
    variants = [{}, {"axis": 0}, {"axis": None}, {"kind": "quicksort"}, {"stable": True}]

    def f(a):
        return [anp.sort(a, **kw) for kw in variants] + [anp.argsort(a, **kw) for kw in variants]

    got = run_on(backend, f, x)
    for i, kw in enumerate(variants):
        stable = {k: v for k, v in kw.items() if k == "axis"}
        _same_sorted(got[i], _np_sort(np.sort, x, **stable), f"sort({dtype}, {kw})")
        want = _np_sort(np.argsort, x, **stable)
        assert_matches(got[len(variants) + i], want, f"argsort({dtype}, {kw})")


@settings(max_examples=25, deadline=None)
@given(
    shape=st.lists(st.integers(0, 6), min_size=1, max_size=3).map(tuple),
    dtype=st.sampled_from(SORT_DTYPES),
    axis_seed=st.integers(0, 100),
    seed=st.integers(0, 2**16),
)
def test_sort_any_shape_and_axis(shape, dtype, axis_seed, seed):
    x = _values(dtype, shape, np.random.default_rng(seed))
    axis = axis_seed % len(shape) - len(shape) if axis_seed % 3 else None
    got_s, got_a = run_on("cpu", lambda a: (anp.sort(a, axis=axis), anp.argsort(a, axis=axis)), x)
    _same_sorted(got_s, _np_sort(np.sort, x, axis=axis), f"sort {shape} axis={axis}")
    assert_matches(got_a, _np_sort(np.argsort, x, axis=axis), f"argsort {shape} axis={axis}")


def test_plain_numpy_sort_calls_and_methods_trace():
    x = _values(np.dtype(np.float32), (4, 6))

    def f(a):
        b = a.copy()
        b.sort(axis=0)
        c = a.copy()
        c.partition(2)
        return np.sort(a), np.argsort(a, axis=0), b, c, a.argsort(axis=None)

    got = run_on("cpu", f, x)
    _same_sorted(got[0], np.sort(x, kind="stable"), "np.sort")
    assert_matches(got[1], np.argsort(x, axis=0, kind="stable"), "np.argsort")
    _same_sorted(got[2], np.sort(x, axis=0, kind="stable"), "x.sort()")
    _same_sorted(got[3], np.sort(x, kind="stable"), "x.partition()")
    assert_matches(got[4], np.argsort(x, axis=None, kind="stable"), "x.argsort()")


@pytest.mark.parametrize("backend", BACKENDS)
def test_lexsort_matches_numpy(backend):
    a = np.array([1, 5, 1, 4, 3, 4, 4], np.int32)
    b = np.array([9, 4, 0, 4, 0, 2, 1], np.int32)
    c = np.array([np.nan, 1, 1, -0.0, 0.0, 1, 2], np.float32)
    got = run_on(
        backend,
        lambda a, b, c: (anp.lexsort((b, a)), anp.lexsort((a, c)), anp.lexsort(np.stack([a, b]))),
        a,
        b,
        c,
    )
    assert_matches(got[0], np.lexsort((b, a)), "lexsort((b, a))")
    assert_matches(got[1], np.lexsort((a, c)), "lexsort((a, c))")
    assert_matches(got[2], np.lexsort(np.stack([a, b])), "lexsort(stacked)")


@pytest.mark.parametrize("kth", [0, 3, -1, (1, 4)], ids=str)
def test_partition_and_argpartition_partition_like_numpy(kth):
    x = _values(np.dtype(np.float64), (5, 7))
    got_p, got_a = run_on(
        "cpu", lambda a: (anp.partition(a, kth, axis=1), anp.argpartition(a, kth, axis=0)), x
    )
    want = np.sort(x, axis=1)
    for k in np.atleast_1d(kth):
        # Every kth element is where a full sort puts it, smaller ones before it.
        assert_matches(got_p[:, k], np.partition(x, kth, axis=1)[:, k], f"partition kth={k}")
        assert_matches(got_p[:, k], want[:, k], f"partition kth={k} vs sort")
    picked = np.take_along_axis(x, got_a, axis=0)
    want0 = np.sort(x, axis=0)
    for k in np.atleast_1d(kth):
        assert_matches(picked[k], want0[k], f"argpartition kth={k}")


SORT_ERRORS = [
    (lambda a: anp.sort(a, kind="bogo"), ValueError, "sort kind must be one of"),
    (lambda a: anp.sort(a, kind="stable", stable=True), ValueError, "can't be provided at the"),
    (lambda a: anp.argsort(a, order="f"), NotImplementedError, "sorts structured arrays"),
    (lambda a: anp.sort(a[0, 0], axis=0), ValueError, "a 0-d array cannot be sorted along axis"),
    (lambda a: anp.partition(a, 9), ValueError, r"kth\(=9\) out of bounds \(4\)"),
    (lambda a: anp.argpartition(a, 1.5), TypeError, "kth must be an integer"),
    (lambda a: anp.lexsort([]), TypeError, "need sequence of keys with len > 0"),
    (lambda a: anp.lexsort([a, a[0]]), ValueError, "all keys need to be the same shape"),
]


@pytest.mark.parametrize("case", range(len(SORT_ERRORS)))
def test_sort_errors(case):
    fn, exc, message = SORT_ERRORS[case]
    with pytest.raises(exc, match=message):
        aotkit.lower(fn, np.zeros((3, 4), np.float32))


# --- searchsorted -----------------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", ["float32", "int32", "uint8", "complex64", "bool"])
def test_searchsorted_matches_numpy(dtype, backend):
    dtype = np.dtype(dtype)
    n = 9 if backend == "interpreter" else 33
    a = np.sort(_values(dtype, (n,)), kind="stable")
    v = np.concatenate([a[::3], _values(dtype, (6,))])
    perm = RNG.permutation(n)
    got = run_on(
        backend,
        lambda a, v, s: (
            anp.searchsorted(a, v),
            anp.searchsorted(a, v, side="right"),
            anp.searchsorted(a[s], v[:4].reshape(2, 2), sorter=np.argsort(s)),
            anp.searchsorted(a, v[0]),
        ),
        a,
        v,
        perm,
    )
    assert_matches(got[0], np.searchsorted(a, v), f"searchsorted left {dtype}")
    assert_matches(got[1], np.searchsorted(a, v, side="right"), f"searchsorted right {dtype}")
    want = np.searchsorted(a[perm], v[:4].reshape(2, 2), sorter=np.argsort(perm))
    assert_matches(got[2], want, f"searchsorted sorter {dtype}")
    assert_matches(got[3], np.searchsorted(a, v[0]), f"searchsorted scalar {dtype}")


@settings(max_examples=20, deadline=None)
@given(n=st.integers(0, 70), m=st.integers(1, 10), seed=st.integers(0, 2**16))
def test_searchsorted_any_length(n, m, seed):
    rng = np.random.default_rng(seed)
    a = np.sort(rng.integers(-5, 5, n)).astype(np.float64)
    v = rng.integers(-6, 6, m).astype(np.int32)
    got = run_on("cpu", lambda a, v: (np.searchsorted(a, v), np.searchsorted(a, v, "right")), a, v)
    assert_matches(got[0], np.searchsorted(a, v), f"left n={n}")
    assert_matches(got[1], np.searchsorted(a, v, "right"), f"right n={n}")


def test_searchsorted_errors():
    x = np.zeros((3, 2), np.float32)
    with pytest.raises(ValueError, match="side must be 'left' or 'right', got 'middle'"):
        aotkit.lower(lambda a: anp.searchsorted(a[0], 1.0, side="middle"), x)
    with pytest.raises(ValueError, match=r"a must be 1-D, got shape \(3, 2\)"):
        aotkit.lower(lambda a: anp.searchsorted(a, 1.0), x)
    with pytest.raises(ValueError, match=r"sorter must be an integer array of a's shape \(2,\)"):
        aotkit.lower(lambda a: anp.searchsorted(a[0], 1.0, sorter=a[1]), x)


# --- unique -----------------------------------------------------------------------------------


def _jnp_unique(x, **kw):
    out = jnp.unique(jnp.asarray(x), **kw)
    return [np.asarray(o) for o in (out if isinstance(out, tuple) else (out,))]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", ["int32", "float32", "uint8", "bool"])
@pytest.mark.parametrize("size", [2, 6, 12])
def test_unique_with_size_matches_numpy_and_jax_padding(size, dtype, backend):
    dtype = np.dtype(dtype)
    x = _values(dtype, (3, 4))
    if dtype.kind == "f":
        x = np.where(np.isnan(x), 2.5, x).astype(dtype)  # JAX's NaN rules differ
    kw = dict(return_index=True, return_inverse=True, return_counts=True)
    got = run_on(backend, lambda a: anp.unique(a, size=size, **kw), x)
    want = np.unique(x, **kw)
    k = min(size, len(want[0]))
    labels = ("values", "index", "inverse", "counts")
    for g, w, label in zip(got, want, labels, strict=True):
        if label != "inverse":
            assert_matches(g[:k], w[:k], f"unique {label} ({dtype}, size={size})")
    assert_matches(got[2], want[2], f"unique inverse ({dtype}, size={size})")
    # The padding (and the truncation) are jax.numpy.unique's.
    for g, j, label in zip(got, _jnp_unique(x, size=size, **kw), labels, strict=True):
        np.testing.assert_array_equal(g, j, err_msg=f"unique {label} vs jax ({dtype}, {size})")


def test_unique_nan_fill_axis_and_array_api_spellings():
    x = np.array([2.0, np.nan, 1.0, np.nan, 2.0, -0.0, 0.0], np.float64)
    rows = np.array([[1, 2], [0, 5], [1, 2], [0, 4]], np.int32)

    def f(a, r):
        return {
            "nan": anp.unique(a, size=6, return_counts=True),
            "nan_distinct": anp.unique(a, size=6, equal_nan=False),
            "fill": anp.unique(a, size=7, fill_value=-1),
            "rows": anp.unique(r, axis=0, size=3, return_inverse=True, return_index=True),
            "values": anp.unique_values(a, size=4),
            "counts": anp.unique_counts(r, size=5),
            "all": anp.unique_all(r, size=5),
            "inverse": anp.unique_inverse(r, size=5),
        }

    got = run_on("cpu", f, x, rows)
    wv, wc = np.unique(x, return_counts=True)
    assert_matches(got["nan"][0][:4], wv, "unique NaN values")
    assert_matches(got["nan"][1][:4], wc, "unique NaN counts")
    assert_matches(got["nan_distinct"][:5], np.unique(x, equal_nan=False), "equal_nan=False")
    assert_matches(got["fill"], np.r_[wv, [-1.0] * 3], "fill_value")
    want = np.unique(rows, axis=0, return_inverse=True, return_index=True)
    for g, w, label in zip(got["rows"], want, ("rows", "index", "inverse"), strict=True):
        assert_matches(g, w, f"unique axis=0 {label}")
    assert_matches(got["values"], wv, "unique_values")
    for name in ("counts", "all", "inverse"):
        want = getattr(np, f"unique_{name}")(rows)
        for field in want._fields:
            g, w = getattr(got[name], field), getattr(want, field)
            k = len(w) if field != "inverse_indices" else None
            assert_matches(g[:k] if k else g, w, f"unique_{name}.{field}")


def test_unique_of_a_numpy_array_needs_no_size():
    c = np.array([3, 1, 3, 2])
    got = run_on("cpu", lambda a: (anp.unique(c, return_counts=True), a), np.float32(1))
    assert_matches(got[0][0], np.unique(c), "unique constant")
    assert_matches(got[0][1], np.unique(c, return_counts=True)[1], "unique constant counts")


UNIQUE_ERRORS = [
    (lambda a: anp.unique(a), TypeError, "the number of unique values depends on the data"),
    (lambda a: np.unique(a), TypeError, r"pass size=N \(a static upper bound"),
    (lambda a: anp.unique(a, size=2.5), TypeError, "size must be a static Python int, got 2.5"),
    (lambda a: anp.unique(a, size=-1), ValueError, "size must be non-negative, got -1"),
    (lambda a: anp.unique(a[:0], size=2), ValueError, "the input has no elements"),
    (lambda a: anp.unique(a, size=2, sorted=False), NotImplementedError, "sorted=False"),
    (lambda a: anp.unique(a, size=2, fill_value=a), ValueError, "fill_value must be a scalar"),
    (lambda a: anp.unique(a, size=2, fill_value=[1, 2]), ValueError, "fill_value must be a"),
]


@pytest.mark.parametrize("case", range(len(UNIQUE_ERRORS)))
def test_unique_errors(case):
    fn, exc, message = UNIQUE_ERRORS[case]
    with pytest.raises(exc, match=message):
        aotkit.lower(fn, np.zeros(3, np.float32))


# --- quantiles --------------------------------------------------------------------------------

METHODS = [
    "linear",
    "lower",
    "higher",
    "nearest",
    "midpoint",
    "inverted_cdf",
    "averaged_inverted_cdf",
    "closest_observation",
    "interpolated_inverted_cdf",
    "hazen",
    "weibull",
    "median_unbiased",
    "normal_unbiased",
]


def _np(fn, *args, **kwargs):
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return np.asarray(fn(*args, **kwargs))


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "float16"])
@pytest.mark.parametrize("method", METHODS)
def test_quantile_methods_match_numpy(method, dtype):
    dtype = np.dtype(dtype)
    x = (
        RNG.normal(size=(4, 7, 3)).astype(dtype)
        if dtype.kind == "f"
        else RNG.integers(-50, 50, (4, 7, 3)).astype(dtype)
    )
    cases = {
        "scalar q": dict(q=0.3, axis=1),
        "q array": dict(q=np.array([0.0, 0.25, 0.5, 0.93, 1.0]), axis=(0, 2)),
        "f32 q keepdims": dict(q=np.float32(0.71), axis=None, keepdims=True),
        "q list axis -1": dict(q=[0.2, 0.8], axis=-1, keepdims=True),
    }

    def f(a):
        return {k: anp.quantile(a, method=method, **kw) for k, kw in cases.items()}

    got = run_on("cpu", f, x)
    for k, kw in cases.items():
        assert_matches(got[k], _np(np.quantile, x, method=method, **kw), f"{method} {k} {dtype}")


@pytest.mark.parametrize("backend", BACKENDS)
def test_percentile_median_and_nan_forms_match_numpy(backend):
    x = RNG.normal(size=(3, 6)).astype(np.float32)
    x[1, 2] = np.nan
    y = x.copy()
    y[2, :] = np.nan
    i = RNG.integers(-9, 9, (4, 5)).astype(np.int64)
    cases = {
        "percentile": lambda m, a, b, c: m.percentile(a, 40, axis=1),
        "percentile list": lambda m, a, b, c: m.percentile(c, [10, 50, 90]),
        "percentile lower": lambda m, a, b, c: m.percentile(c, 33, axis=0, method="lower"),
        "median": lambda m, a, b, c: m.median(a, axis=1),
        "median even": lambda m, a, b, c: m.median(a, axis=0, keepdims=True),
        "median int": lambda m, a, b, c: m.median(c),
        "median int axis": lambda m, a, b, c: m.median(c, axis=1),
        "nanmedian": lambda m, a, b, c: m.nanmedian(b, axis=1),
        "nanmedian flat": lambda m, a, b, c: m.nanmedian(b),
        "nanmedian int": lambda m, a, b, c: m.nanmedian(c, axis=0),
        "nanpercentile": lambda m, a, b, c: m.nanpercentile(b, [25, 75], axis=1),
        "nanquantile": lambda m, a, b, c: m.nanquantile(b, 0.5, axis=0, keepdims=True),
        "nanquantile nearest": lambda m, a, b, c: m.nanquantile(
            b, np.array([0.1, 0.9]), axis=1, method="nearest"
        ),
        "nanquantile weibull": lambda m, a, b, c: m.nanquantile(b, 0.37, axis=1, method="weibull"),
    }
    got = run_on(backend, lambda *a: {k: f(anp, *a) for k, f in cases.items()}, x, y, i)
    for k, f in cases.items():
        assert_matches(got[k], _np(f, np, x, y, i), k)


def test_quantile_with_traced_q_matches_numpy():
    x = RNG.normal(size=(5, 6))
    q = np.array([0.05, 0.5, 0.99])
    methods = ("linear", "nearest", "midpoint", "hazen", "inverted_cdf")
    got = run_on("cpu", lambda a, q: [anp.quantile(a, q, axis=1, method=m) for m in methods], x, q)
    for m, g in zip(methods, got, strict=True):
        assert_matches(g, np.quantile(x, q, axis=1, method=m), f"traced q, {m}")
    got = run_on("cpu", lambda a, q: anp.percentile(a, q * 100), x, q)
    assert_matches(got, np.percentile(x, q * 100), "traced percentile")


@settings(max_examples=15, deadline=None)
@given(
    n=st.integers(1, 9),
    q=st.floats(0, 1),
    method=st.sampled_from(METHODS),
    seed=st.integers(0, 2**16),
)
def test_quantile_any_length(n, q, method, seed):
    x = np.random.default_rng(seed).normal(size=(2, n))
    got = run_on("cpu", lambda a: anp.quantile(a, q, axis=1, method=method), x)
    assert_matches(got, np.quantile(x, q, axis=1, method=method), f"n={n} q={q} {method}")


QUANTILE_ERRORS = [
    (lambda a: anp.quantile(a, 0.5, method="best"), ValueError, "'best' is not a valid method"),
    (lambda a: anp.quantile(a, 1.5), ValueError, r"Quantiles must be in the range \[0, 1\]"),
    (lambda a: anp.percentile(a, -1), ValueError, r"Percentiles must be in the range \[0, 100\]"),
    (lambda a: anp.quantile(a, [[0.5]]), ValueError, "q must be a scalar or 1d"),
    (lambda a: anp.quantile(a.astype(np.complex64), 0.5), TypeError, "array of real numbers"),
    (lambda a: anp.quantile(a, a.astype(np.complex64)), TypeError, "q must be real"),
    (lambda a: anp.quantile(a, 0.5, interpolation="linear"), TypeError, "interpolation="),
    (lambda a: anp.quantile(a, 0.5, weights=a), NotImplementedError, "weights= is not supported"),
    (lambda a: anp.quantile(a[:0], 0.5), IndexError, "cannot take a quantile of an empty slice"),
]


@pytest.mark.parametrize("case", range(len(QUANTILE_ERRORS)))
def test_quantile_errors(case):
    fn, exc, message = QUANTILE_ERRORS[case]
    with pytest.raises(exc, match=message):
        aotkit.lower(fn, np.zeros(3, np.float32))


def test_quantiles_write_into_out_like_numpy():
    x = RNG.normal(size=(3, 5))

    def f(a):
        m = np.zeros_like(a, shape=(3,))
        np.median(a, axis=1, out=m)
        q = np.zeros_like(a, np.float32, shape=(2, 5))
        np.quantile(a, [0.25, 0.75], axis=0, out=q)
        p = np.zeros_like(a, shape=(5,))
        np.nanpercentile(a, 10, axis=0, out=p)
        return m, q, p

    got = run_on("cpu", f, x)
    want = (
        np.median(x, axis=1),
        np.quantile(x, [0.25, 0.75], axis=0),
        np.percentile(x, 10, axis=0),
    )
    assert_matches(got[0], want[0], "median out=")
    assert_matches(got[1], want[1].astype(np.float32), "quantile out= float32")
    assert_matches(got[2], want[2], "nanpercentile out=")


def test_median_of_an_empty_slice_is_nan_like_numpy():
    got = run_on("cpu", lambda a: anp.median(a, axis=1), np.zeros((2, 0), np.float32))
    assert_matches(got, _np(np.median, np.zeros((2, 0), np.float32), axis=1), "empty median")
