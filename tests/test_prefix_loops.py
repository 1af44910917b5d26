"""Loops over a growing prefix, index tuples, rows and moving windows stay one loop.

Inside a loop body `x[:i]`, `A[i, j:i]` or `vals[row[i]:row[i + 1]]` has a length only the
data knows; aotkit holds it over the axis's full extent with a mask (aotkit/tracing/
indexing.py, `TracedSlice`), so reductions, dot products of two such slices, elementwise
arithmetic and writes back into the same extent compute NumPy's value and the loop stays
one StableHLO while loop: the program does not grow with n. Loops over `np.ndindex`,
`itertools.product` of ranges, `enumerate` and `zip` of arrays run over a flat index, and a
window whose stop is its traced start plus a constant (`x[i * 2 : i * 2 + 2]`) is one
`dynamic_slice`. Oracles: NumPy on the same kernels (tests/programs/kernels.py), and
generated slices with every kind of bound.
"""

from __future__ import annotations

import warnings

import jax
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import aotkit
from aotkit.autograph import AutographWarning
from tests.helpers import assert_matches, module_from_source
from tests.programs.kernels import INDEX_KERNELS, PREFIX_KERNELS


def _as_loops(fn, *args):
    """The Lowered of `fn` for `args`, failing if a loop was unrolled instead."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", AutographWarning)
        return aotkit.lower(fn, *args)


def _ops(lowered) -> int:
    return lowered.as_text().count("stablehlo.")


KERNELS = {**PREFIX_KERNELS, **INDEX_KERNELS}


@pytest.mark.parametrize("n", [7, 13])
@pytest.mark.parametrize("name", list(KERNELS))
def test_kernels_equal_numpy_as_one_loop(name, n):
    fn, make = KERNELS[name]
    args = make(n, np.random.default_rng(n))
    got = _as_loops(fn, *args).compile()(*args)
    jax.tree_util.tree_map(lambda g, w: assert_matches(g, w, name), got, fn(*args))
    assert "stablehlo.while" in _as_loops(fn, *args).as_text()


@pytest.mark.parametrize("name", list(KERNELS))
def test_kernels_do_not_grow_with_n(name):
    fn, make = KERNELS[name]
    small, large = (_ops(_as_loops(fn, *make(n, np.random.default_rng(0)))) for n in (7, 13))
    assert small == large < 200


SOURCE = """
def sums(x):
    n = x.shape[0]
    out = np.zeros(n)
    for i in range(n):
        out[i] = x[{lo}:{hi}].sum() + (x[{lo}:{hi}] * x[{lo}:{hi}]).sum()
    return out
"""

BOUNDS = ["", "i", "i + 1", "i - 2", "2 * i", "n - i", "-i", "i + 100", "-100"]


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(BOUNDS), st.sampled_from(BOUNDS), st.integers(0, 9))
def test_slices_with_any_bound_match_numpy(tmp_path_factory, lo, hi, n):
    """Every kind of bound NumPy normalizes: left out, negative (wraps once), past the end
    (clamped), crossing (empty)."""
    m, _ = module_from_source(tmp_path_factory.mktemp("b"), SOURCE.format(lo=lo, hi=hi))
    x = np.arange(1.0, n + 1.0) ** 2
    assert_matches(aotkit.jit(m.sums)(x), m.sums(x), f"x[{lo}:{hi}] for n={n}")


def test_elementwise_arithmetic_and_writes_into_the_same_extent(tmp_path):
    m, _ = module_from_source(
        tmp_path,
        """
        def update(x, y):
            n = x.shape[0]
            out = np.zeros(n)
            acc = y.copy()
            for i in range(n):
                out[: i + 1] = x[: i + 1] * 2.0 - y[: i + 1]
                acc[i:] += x[i:] / (i + 1)
                out[i] += np.sqrt(np.abs(x[:i])).sum() + (x[:i] > 1).sum()
            return out, acc
        """,
    )
    x, y = np.linspace(-2, 3, 9), np.linspace(1, 2, 9)
    got = _as_loops(m.update, x, y).compile()(x, y)
    for g, w in zip(got, m.update(x, y), strict=True):
        assert_matches(g, w)


def test_extremes_and_dtypes_of_prefix_slices(tmp_path):
    m, _ = module_from_source(
        tmp_path,
        """
        def running(x):
            n = x.shape[0]
            hi = np.zeros(n, np.float32)
            count = np.zeros(n, np.int32)
            for i in range(n):
                hi[i] = x[: i + 1].max()
                count[i] = (x[:i] > 0).sum()
            return hi, count

        def empty_max(x):
            out = np.zeros(x.shape[0])
            for i in range(x.shape[0]):
                out[i] = x[:i].max()
            return out
        """,
    )
    x = np.array([3.0, -1.0, 4.0, 1.0, 5.0], np.float32)
    got = _as_loops(m.running, x).compile()(x)
    for g, w in zip(got, m.running(x), strict=True):
        assert_matches(g, w)
    # NumPy raises for the maximum of x[:0]; a compiled program gives NaN there.
    got = np.asarray(_as_loops(m.empty_max, x).compile()(x))
    assert np.isnan(got[0]) and list(got[1:]) == [3.0, 3.0, 4.0, 4.0]
    assert got.dtype == np.float64


def test_slices_of_other_bounds_do_not_combine(tmp_path):
    m, path = module_from_source(
        tmp_path,
        """
        def shifted(x):
            n = x.shape[0]
            out = np.zeros(n)
            for i in range(1, n):
                out[i] = x[:i] @ x[1 : i + 1]
            return out
        """,
    )
    x = np.arange(6.0)
    # Two extents of the same length but other bounds: the loop unrolls (n stays small
    # here), saying why, and the result is still NumPy's.
    with pytest.warns(
        AutographWarning,
        match=rf"matmul \(at {path}:7\): the slice at {path}:7 has a traced bound, so its "
        r"length is known only when the program runs",
    ):
        got = aotkit.jit(m.shifted)(x)
    assert_matches(got, m.shifted(x))


def test_a_prefix_slice_that_escapes_the_loop_is_refused(tmp_path):
    m, path = module_from_source(
        tmp_path,
        """
        def keeps(x):
            total = 0.0
            for i in range(x.shape[0]):
                total = total + x[:i].shape[0]
            return total
        """,
    )
    with pytest.warns(AutographWarning, match=r"the slice at .* has a traced bound"):
        assert float(aotkit.jit(m.keeps)(np.ones(5))) == 10.0  # unrolled: NumPy's answer


def test_traced_slice_bounds_outside_a_loop_keep_their_error():
    with pytest.raises(IndexError, match=r"slice stop is traced, but slice bounds fix the"):
        aotkit.lower(lambda x, i: x[:i].sum(), np.ones(4), np.int32(2))


def test_window_reads_and_writes_use_dynamic_slices(tmp_path):
    m, _ = module_from_source(
        tmp_path,
        """
        def windows(x):
            out = np.zeros(x.shape[0] + 2)
            total = 0.0
            for i in range(x.shape[0] - 2):
                total = total + x[i : i + 3].sum()
                out[i + 1 : i + 4] = x[i : i + 3] * 2.0
            return out, total
        """,
    )
    x = np.arange(1.0, 9.0)
    lowered = _as_loops(m.windows, x)
    text = lowered.as_text()
    assert "stablehlo.dynamic_slice" in text and "stablehlo.dynamic_update_slice" in text
    for g, w in zip(lowered.compile()(x), m.windows(x), strict=True):
        assert_matches(g, w)


def test_indexed_iterables_keep_their_python_meaning_when_unrolled(tmp_path):
    m, _ = module_from_source(
        tmp_path,
        """
        import itertools

        def short(x):
            seen = []
            for i, j in itertools.product(range(2), range(2)):  # 4 steps: unrolled
                seen.append((i, j))
            for k, row in enumerate(x, start=5):
                seen.append(k)
            for idx in np.ndindex(2, 1):
                seen.append(idx)
            return x.sum() + len(seen), seen
        """,
    )
    x = np.ones((3, 2))
    assert m.short(x)[1] == [(0, 0), (0, 1), (1, 0), (1, 1), 5, 6, 7, (0, 0), (1, 0)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", AutographWarning)  # the list makes the loops unroll
        total = aotkit.jit(lambda v: m.short(v)[0])(x)
    assert float(total) == 6.0 + 9


REVERSED = """
def reversed_sums(x):
    n = x.shape[0]
    out = np.zeros(n)
    y = x.copy()
    for i in range(n):
        out[i] = np.flip(x[{lo}:{hi}]) @ x[{lo}:{hi}] + (x[{lo}:{hi}][::-1] * 2.0).max(initial=-1.0)
        y[{lo}:{hi}] = y[{lo}:{hi}] - 0.5 * np.flip(y[{lo}:{hi}])
    return out, y
"""


@settings(max_examples=30, deadline=None)
@given(st.sampled_from(BOUNDS), st.sampled_from(BOUNDS), st.integers(0, 7))
def test_reversed_slices_with_any_bound_match_numpy(tmp_path_factory, lo, hi, n):
    """`np.flip(x[a:b])` and `x[a:b][::-1]`: the slice's elements in reverse order, which
    combine with slices of the same bounds and write back into them."""
    m, _ = module_from_source(tmp_path_factory.mktemp("r"), REVERSED.format(lo=lo, hi=hi))
    x = np.arange(1.0, n + 1.0) ** 2
    with warnings.catch_warnings():
        warnings.simplefilter("error", AutographWarning)
        got = aotkit.jit(m.reversed_sums)(x)
    for g, w in zip(got, m.reversed_sums(x), strict=True):
        assert_matches(g, w, f"x[{lo}:{hi}] reversed for n={n}")


def test_products_of_an_array_and_a_slice_keep_the_slice(tmp_path):
    m, _ = module_from_source(
        tmp_path,
        """
        def products(a, b, v):
            n = a.shape[0]
            rows = np.zeros((n, n))
            cols = np.zeros((n, n))
            block = np.zeros((n, n))
            for i in range(n):
                rows[i, i:] = v @ a[:, i:]
                cols[:i, i] = np.dot(a[:i, :], v)
                block[:, i:] = b @ a[:, i:] * 0.5
                rows[i, :i] += (a[:i, :] @ b).sum()
            return rows, cols, block
        """,
    )
    rng = np.random.default_rng(0)
    a, b, v = rng.normal(size=(5, 5)), rng.normal(size=(5, 5)), rng.normal(size=5)
    got = _as_loops(m.products, a, b, v).compile()(a, b, v)
    for g, w in zip(got, m.products(a, b, v), strict=True):
        assert_matches(g, w)


def test_products_over_a_traced_extent_need_two_slices(tmp_path):
    m, path = module_from_source(
        tmp_path,
        """
        def over_extent(a, v):
            out = np.zeros(a.shape[0])
            for i in range(a.shape[0]):
                out[i] = (v[:i] @ a[:i]).sum()
            return out

        def sliced_again(v):
            out = np.zeros(v.shape[0])
            for i in range(v.shape[0]):
                out[i] = v[:i][1:].sum()
            return out
        """,
    )
    cases = [
        (m.over_extent, 6, "matmul", np.arange(36.0).reshape(6, 6)),
        (m.sliced_again, 12, r"x\[a:b\]\[\.\.\.\]", None),
    ]
    for fn, line, op, a in cases:
        with pytest.warns(
            AutographWarning,
            match=rf"{op} \(at {path}:{line}\): the slice at {path}:{line} has a traced bound",
        ):
            got = aotkit.jit(fn)(*((a, np.ones(6)) if a is not None else (np.ones(6),)))
        assert_matches(got, fn(*((a, np.ones(6)) if a is not None else (np.ones(6),))))


def test_windows_running_past_an_end_in_a_loop_are_numpys_shorter_slices(tmp_path):
    """A window the loop's index range keeps inside the array is one dynamic_slice; one
    that may run past an end is NumPy's shorter (or empty) slice there, not a window moved
    back inside."""
    m, _ = module_from_source(
        tmp_path,
        """
        def edges(x, w):
            n = x.shape[0]
            sums = np.zeros(n)
            spread = np.zeros(n)
            inside = np.zeros(n)
            for i in range(n):
                sums[i] = x[i : i + 3].sum() + x[i - 2 : i].max(initial=-9.0)
                spread[i : i + 2] += x[i]
                for j in range(i):
                    inside[i] += x[j : j + 2] @ w
            return sums, spread, inside
        """,
    )
    x, w = np.arange(1.0, 8.0) ** 2, np.array([0.5, -1.0])
    lowered = _as_loops(m.edges, x, w)
    text = lowered.as_text()
    assert "sizes = [2]" in text and "sizes = [3]" not in text  # x[j : j + 2] only
    for g, want in zip(lowered.compile()(x, w), m.edges(x, w), strict=True):
        assert_matches(g, want)
