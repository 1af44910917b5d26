"""`x[mask]` with a traced boolean mask, reduced: a fixed-shape masked reduction, against NumPy.

The selection's length depends on the data, so it cannot be an array of a compiled program;
a reduction of it can (`x[mask].sum()` is `np.sum(x, where=mask)`). Every reduction and its
NumPy function form is checked against NumPy on the same data, result dtype included, for
masks that select some, all and none of the elements; every other use is refused with an
error that names the line of the selection.
"""

from __future__ import annotations

import re
import warnings

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import aotkit
from tests.helpers import assert_matches, run_on

REDUCTIONS = {
    "sum": lambda x, m: x[m].sum(),
    "np_sum": lambda x, m: np.sum(x[m]),
    "sum_dtype": lambda x, m: x[m].sum(dtype=np.float64),
    "prod": lambda x, m: np.prod(x[m]),
    "mean": lambda x, m: x[m].mean(),
    "np_mean": lambda x, m: np.mean(x[m]),
    "std": lambda x, m: x[m].std(),
    "var_ddof": lambda x, m: np.var(x[m], ddof=1),
    "max": lambda x, m: x[m].max(),
    "np_max": lambda x, m: np.max(x[m]),
    "amin": lambda x, m: np.amin(x[m]),
    "min_initial": lambda x, m: x[m].min(initial=10.0),
    "any": lambda x, m: np.any(x[m]),
    "all": lambda x, m: x[m].all(),
}
MASKS = {
    "some": lambda x: x > 0,
    "all": lambda x: x > -100,
    "none": lambda x: x > 100,
}
X = np.array([[-1.5, 2.0, 3.0], [0.0, 4.5, -2.0]], np.float32)


def _numpy(fn, x, mask_fn):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # mean/std of an empty selection
        return fn(x, mask_fn(x))


@pytest.mark.parametrize("mask", MASKS)
@pytest.mark.parametrize("name", REDUCTIONS)
def test_reductions_of_a_selection_equal_numpys(name, mask):
    fn, mask_fn = REDUCTIONS[name], MASKS[mask]
    if mask == "none" and name in ("max", "np_max", "amin"):
        pytest.skip("NumPy raises for an empty selection: see the empty-selection test")
    got = run_on("cpu", lambda x: fn(x, mask_fn(x)), X)
    assert_matches(got, _numpy(fn, X, mask_fn), f"{name} over {mask}")


def _row_sums(a):
    return a[a[:, 0] > 0].sum(axis=0)


def _row_means(a):
    return np.mean(a[a[:, 0] > 0], axis=0)


@pytest.mark.parametrize("fn", [_row_sums, _row_means])
def test_the_rows_a_mask_of_the_first_axis_selects_reduce_along_axis_0(fn):
    a = np.array([[1.0, 2.0], [-3.0, 4.0], [5.0, 6.0]])
    assert_matches(run_on("cpu", fn, a), fn(a))


def test_the_extreme_of_an_empty_float_selection_is_nan():
    # NumPy raises ("zero-size array to reduction operation maximum which has no identity"),
    # which a compiled program cannot do: NaN, which no non-empty selection gives.
    got = run_on("cpu", lambda x: (x[x > 100].max(), x[x > 100].min(), x[x > 0].max()), X)
    assert np.isnan(got[0]) and np.isnan(got[1]) and got[2] == np.float32(4.5)
    assert got[0].dtype == np.float32
    with pytest.raises(ValueError, match="zero-size array"):
        X[X > 100].max()


def test_the_extreme_of_an_integer_selection_needs_initial():
    x = np.array([3, -1, 7], np.int32)
    with pytest.raises(
        ValueError,
        match=r"the maximum of a selection by a traced boolean mask \(at .*test_masked_"
        r"selection.py:\d+\) has no value when nothing is selected, .* pass initial= ",
    ):
        aotkit.lower(lambda v: v[v > 0].max(), x)
    got = run_on("cpu", lambda v: v[v > 0].max(initial=-5), x)
    assert_matches(got, x[x > 0].max(initial=-5))


@settings(max_examples=25, deadline=None)
@given(
    hnp.arrays(
        np.float64,
        hnp.array_shapes(min_dims=1, max_dims=3, max_side=4),
        elements=st.floats(-4, 4, allow_nan=False, width=32),
    ),
    # No subnormal thresholds: XLA's CPU code flushes them to zero (0.0 > -5e-324 is False
    # there), a property of the backend found by the random profile, not of the masking.
    st.floats(-3, 3, allow_nan=False, allow_subnormal=False),
    st.sampled_from(["sum", "mean", "prod", "any"]),
)
@example(np.array([0.0, -0.0, 1.0]), -0.0, "sum")
def test_random_shapes_and_thresholds_match_numpy(x, threshold, name):
    fn = REDUCTIONS[name]
    got = run_on("cpu", lambda v: fn(v, v > threshold), x)
    assert_matches(got, _numpy(fn, x, lambda v: v > threshold), f"{name} > {threshold}")


SITE = re.escape(__file__) + r":\d+"


@pytest.mark.parametrize(
    ("use", "fn"),
    [
        ("x[mask] add", lambda x: x[x > 0] + x[x < 0]),
        ("output <root>", lambda x: x[x > 0] + 1),
        ("output <root>", lambda x: np.sin(x[x > 0])),
        ("np.sort", lambda x: np.sort(x[x > 0])),
        ("x[mask].shape", lambda x: x[x > 0].shape),
        ("len", lambda x: len(x[x > 0])),
        ("output <root>", lambda x: x[x > 0]),
        ("output [1]", lambda x: (x.sum(), x[x > 0])),
    ],
)
def test_a_selection_that_escapes_with_its_shape_is_refused_at_its_line(use, fn):
    with pytest.raises(
        IndexError,
        match=rf"{re.escape(use)} \(at .*\): indexing with a traced boolean mask \(the x\[mask\] "
        rf"at {SITE}\) gives a result whose shape depends on the data .*; reduce it "
        r"\(x\[mask\]\.sum\(\), np\.mean\(x\[mask\]\), \.max\(\), \.\.\.\), or use "
        r"aotkit\.numpy\.where\(mask, x, other\)",
    ):
        aotkit.lower(fn, X)


def test_keepdims_and_where_on_a_selection_are_refused():
    with pytest.raises(
        TypeError,
        match=r"sum \(at .*\): keepdims=True on a selection by a traced boolean mask \(at "
        rf"{SITE}\) is not supported; reduce with np\.sum\(x, where=mask, \.\.\.\) instead",
    ):
        aotkit.lower(lambda x: x[x > 0].sum(keepdims=True), X)
    with pytest.raises(TypeError, match=r"mean \(at .*\): where= on a selection"):
        aotkit.lower(lambda x: x[x > 0].mean(where=False), X)


def test_a_mask_inside_a_larger_index_keeps_its_error():
    with pytest.raises(IndexError, match=r"traced boolean mask gives a result whose shape"):
        aotkit.lower(lambda x: x[0, x[0] > 0], X)


def test_writes_through_a_mask_still_work():
    def clip_negative(x):
        y = x.copy()
        y[x < 0] = 0
        return y, x[x < 0].sum()

    got = run_on("cpu", clip_negative, X)
    for g, w in zip(got, clip_negative(X), strict=True):
        assert_matches(g, w)


# --- elementwise work on a selection, written back with its mask ------------------------------


def _bump(x, v):
    y = x.copy()
    y[x > 0] += 1
    y[y < -1] *= 2.0
    return y


def _copy_through(x, v):
    y = np.zeros_like(x)
    m = x > 0.5
    y[m] = v[m] * 2.0 + 1.0
    y[~m] = -np.abs(v[~m])
    return y


def _recomputed_mask(x, v):
    y = x.copy()
    y[x > 0] = np.sqrt(np.abs(v[x > 0])) - x[x > 0]
    return y


def _rows(x, v):
    y = x.copy()
    rows = x[:, 0] > 0
    y[rows] = (v[rows] > 0) * 3.0
    return y, np.sum(v[rows] * 2.0)


def _with_a_tracer(x, v):
    y = x.copy()
    t = v.sum()
    y[x > 0] = t * x[x > 0]
    return y


WRITEBACKS = [_bump, _copy_through, _recomputed_mask, _rows, _with_a_tracer]


@pytest.mark.parametrize("fn", WRITEBACKS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_selections_written_back_with_their_mask_match_numpy(fn, dtype):
    rng = np.random.default_rng(1)
    x = rng.normal(size=(4, 3)).astype(dtype)
    v = rng.normal(size=(4, 3)).astype(dtype)
    got = run_on("cpu", fn, x, v)
    want = fn(x.copy(), v.copy())
    for g, w in zip(*(t if isinstance(t, tuple) else (t,) for t in (got, want)), strict=True):
        assert_matches(g, w, fn.__name__)


@settings(max_examples=25, deadline=None)
@given(
    hnp.arrays(
        np.float64,
        hnp.array_shapes(min_dims=1, max_dims=3, max_side=4),
        elements=st.floats(-4, 4, allow_nan=False, width=32),
    ),
    # No subnormal thresholds: XLA's CPU code flushes them to zero (0.0 > -5e-324 is False
    # there), a property of the backend found by the random profile, not of the masking.
    st.floats(-3, 3, allow_nan=False, allow_subnormal=False),
)
@example(np.array([[0.0, -1e-300], [2.0, -0.0]]), 0.0)
def test_random_write_backs_match_numpy(x, threshold):
    def fn(v):
        y = v.copy()
        m = v > threshold
        y[m] = 0.5 * v[m] - 1.0
        y[m] += 2.0
        return y

    assert_matches(run_on("cpu", fn, x), fn(x.copy()), f"> {threshold}")


@pytest.mark.parametrize(
    ("use", "fn"),
    [
        ("setitem", lambda x: _set(x, x > 0, x[x < 0])),
        ("setitem", lambda x: _set(np.zeros((2, 3, 2)) + x.sum(), x > 0, x[x > 0])),
        ("setitem", lambda x: _set(x, x[:, 0] > 0, x[x > 0])),
    ],
    ids=["other-mask", "other-shape", "mask-of-rows"],
)
def test_a_selection_written_with_another_mask_is_refused(use, fn):
    with pytest.raises(
        IndexError,
        match=rf"{use} \(at .*\): indexing with a traced boolean mask \(the x\[mask\] at "
        rf"{SITE}\) gives a result whose shape depends on the data",
    ):
        aotkit.lower(fn, X)


def _set(y, mask, value):
    y = y.copy() if isinstance(y, np.ndarray) else y
    y[mask] = value
    return y


@pytest.mark.parametrize(
    "name, fn",
    [
        ("divided", lambda x, L: _masked_write(x, lambda d: d > L / 2, lambda d, m: d[m] - L)),
        ("abs", lambda x, L: _masked_write(x, lambda d: np.abs(d) > L, lambda d, m: d[m] * 2)),
        ("power", lambda x, L: _masked_write(x, lambda d: d**2 > L, lambda d, m: -d[m])),
        (
            "floor_div",
            lambda x, L: _masked_write(x, lambda d: np.floor(d / L) > 0, lambda d, m: d[m] % L),
        ),
    ],
)
def test_a_mask_written_twice_the_same_way_selects_alike(name, fn):
    """`dx[dx > L / 2] = dx[dx > L / 2] - L` with a traced L was refused with a message that
    recommended the form written: masks computed by the same ops (division, powers, abs,
    floor, remainder too) from the same values are the same mask."""
    x, L = np.array([-3.0, 0.5, 2.5, 4.0, -0.25]), np.float64(2.0)
    got = aotkit.jit(fn)(x, L)
    assert_matches(got, fn(x.copy(), L), name)


def _masked_write(x, mask, value):
    d = x.copy()
    d[mask(d)] = value(d, mask(d))
    return d


def test_the_refusal_shows_the_mask_bound_once():
    with pytest.raises(IndexError) as e:
        aotkit.lower(lambda x: x[x > 0] + 1, X)
    assert str(e.value).endswith(
        "or use aotkit.numpy.where(mask, x, other) to keep the shape; writes by the mask work "
        "too (x[m] = value, y[m] = 2 * x[m] + 1), the mask the same value both sides or "
        "computed the same way from the same values (m = x > 0 bound once is surest)"
    )
