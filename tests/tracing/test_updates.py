"""ufunc.at, ufunc.reduceat, put, insert, select and out= against NumPy, on cpu and interpreter.

In-place APIs are checked by running the same function on NumPy arrays (NumPy mutates them)
and on traced ones (aotkit rebinds them) and comparing what each returns.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import aotkit
import aotkit.numpy as anp
from tests import lane
from tests.helpers import assert_matches, run_on

BACKENDS = lane.with_lane(["cpu", "interpreter"])
RNG = np.random.default_rng(5)


def _same(fn, *args, backend="cpu"):
    """Runs `fn` on copies of `args` with NumPy and traced with aotkit; compares results."""
    want = fn(*[np.array(a, copy=True) for a in args])
    got = run_on(backend, fn, *args)
    if isinstance(want, dict):
        for k in want:
            assert_matches(got[k], want[k], k)
    else:
        assert_matches(got, want, fn.__name__)


# --- ufunc.at ----------------------------------------------------------------------------------


def _at_cases(x, i, v, b):
    y = x.copy()
    np.add.at(y, i, v[:, None])
    z = x.copy()
    np.subtract.at(z, (i, 2), v)
    w = x.copy()
    np.multiply.at(w, (i, 1), 2.0)
    mx = x.copy()
    np.maximum.at(mx, i, v[:, None])
    mn = x.copy()
    np.minimum.at(mn, (slice(None), [0, 0, 2]), -v[:3])
    bb = b.copy()
    np.add.at(bb, [0, 0, 3], True)
    sc = x.copy()
    np.add.at(sc, 2, 1.5)
    return {"add": y, "subtract": z, "multiply": w, "max": mx, "min": mn, "bool": bb, "scalar": sc}


@pytest.mark.parametrize("backend", BACKENDS)
def test_ufunc_at_accumulates_repeated_indices_like_numpy(backend):
    x = RNG.normal(size=(5, 3)).astype(np.float32)
    i = np.array([0, 3, 3, 1, 0, 3])
    v = RNG.normal(size=6).astype(np.float32)
    b = np.zeros(4, bool)
    _same(lambda x, i, v, b: _at_cases(x, i, v, b), x, i, v, b, backend=backend)


def test_ufunc_at_with_traced_indices_and_integers():
    x = np.arange(6, dtype=np.int32)
    i = np.array([5, 1, 5, 5])

    def f(x, i):
        y = x.copy()
        np.add.at(y, i, 10)
        z = x.copy()
        np.multiply.at(z, i, np.int32(2))
        return {"add": y, "multiply": z}

    _same(f, x, i)


UFUNC_AT_ERRORS = [
    (lambda x: np.divide.at(x, [0], 2.0), NotImplementedError, "numpy.divide.at is not supported"),
    (lambda x: np.add.at(np.zeros(3), [0], x[0]), TypeError, "the array to update is a ndarray"),
    (lambda x: np.add.at(x.astype(np.int32), [0], 1.5), TypeError, "casts after every single"),
    (lambda x: np.subtract.at(x > 0, [0], True), TypeError, "boolean subtract is not supported"),
    (lambda x: np.add.at(x, [7], 1.0), IndexError, "index 7 is out of bounds"),
]


@pytest.mark.parametrize("case", range(len(UFUNC_AT_ERRORS)))
def test_ufunc_at_errors(case):
    fn, exc, message = UFUNC_AT_ERRORS[case]
    with pytest.raises(exc, match=message):
        aotkit.lower(fn, np.zeros(3, np.float32))


# --- ufunc.reduceat -------------------------------------------------------------------------------

REDUCEAT = {
    "add increasing": lambda x, i: np.add.reduceat(x, [0, 2, 5]),
    "add numpy doc": lambda x, i: np.add.reduceat(x, [0, 4, 1, 5]),
    "add repeated": lambda x, i: np.add.reduceat(x, [1, 1, 3, 3, 6]),
    "multiply": lambda x, i: np.multiply.reduceat(x, [0, 3]),
    "maximum axis 1": lambda x, i: np.maximum.reduceat(x.reshape(2, 4), [0, 1, 3], axis=1),
    "minimum": lambda x, i: np.minimum.reduceat(x, [2, 0, 7]),
    "int widening": lambda x, i: np.add.reduceat(i, [0, 1]),
    "bool": lambda x, i: np.add.reduceat(i > 0, [0, 2]),
    "dtype": lambda x, i: np.add.reduceat(i, [0, 3], dtype=np.float32),
    "traced indices": lambda x, i: np.add.reduceat(x, np.array([0, 2, 2, 5])),
}


@pytest.mark.parametrize("backend", BACKENDS)
def test_ufunc_reduceat_matches_numpy(backend):
    x = np.round(RNG.normal(size=8), 2)
    i = np.array([3, -1, 4, 1, -5, 9], np.int8)
    got = run_on(backend, lambda x, i: {k: f(x, i) for k, f in REDUCEAT.items()}, x, i)
    for k, f in REDUCEAT.items():
        assert_matches(got[k], f(x, i), k)


def test_ufunc_reduceat_with_traced_sorted_indices():
    x = np.arange(10.0)
    idx = np.array([0, 3, 3, 7, 9])
    got = run_on("cpu", lambda x, i: np.maximum.reduceat(x[::-1], i), x, idx)
    assert_matches(got, np.maximum.reduceat(x[::-1], idx), "traced sorted indices")


@settings(max_examples=20, deadline=None)
@given(
    n=st.integers(1, 12),
    idx=st.lists(st.integers(0, 11), min_size=1, max_size=6),
    seed=st.integers(0, 2**16),
)
def test_ufunc_reduceat_any_static_indices(n, idx, seed):
    idx = [i % n for i in idx]
    x = np.random.default_rng(seed).integers(-9, 9, n).astype(np.int64)
    got = run_on("cpu", lambda x: (np.add.reduceat(x, idx), np.minimum.reduceat(x, idx)), x)
    assert_matches(got[0], np.add.reduceat(x, idx), f"add.reduceat {idx}")
    assert_matches(got[1], np.minimum.reduceat(x, idx), f"minimum.reduceat {idx}")


REDUCEAT_ERRORS = [
    (lambda x: np.add.reduceat(x, [0, 3]), IndexError, r"index 3 out-of-bounds in add.reduceat"),
    (lambda x: np.add.reduceat(x, [[0]]), TypeError, "indices must be a 1-D integer array"),
    (lambda x: np.add.reduceat(x, x), TypeError, "indices must be a 1-D integer array"),
    (lambda x: np.add.reduceat(x[0], [0]), TypeError, "cannot reduceat a 0-d array"),
    (lambda x: np.divide.reduceat(x, [0]), NotImplementedError, "divide.reduceat is not"),
]


@pytest.mark.parametrize("case", range(len(REDUCEAT_ERRORS)))
def test_ufunc_reduceat_errors(case):
    fn, exc, message = REDUCEAT_ERRORS[case]
    with pytest.raises(exc, match=message):
        aotkit.lower(fn, np.zeros(3, np.float32))


# --- put, insert, select --------------------------------------------------------------------------


def _put_cases(x, i):
    a = x.copy()
    np.put(a, [0, 5, -1], [7, 8, 9])
    b = x.copy()
    np.put(b, [1, 1, 2], [5, 6, 7])  # the last write wins
    c = x.copy()
    np.put(c, [0, 1, 2, 3], [-1, -2])  # v repeats
    d = x.copy()
    np.put(d, [9, -20], 4, mode="clip")
    e = x.copy()
    np.put(e, [9, -20], 4, mode="wrap")
    f = x.copy()
    f.put(i, 3, mode="clip")
    g = x.copy()
    np.put(g, i, [1, 2, 3], mode="wrap")
    return {"raise": a, "last wins": b, "cycle": c, "clip": d, "wrap": e, "method": f, "traced": g}


@pytest.mark.parametrize("backend", BACKENDS)
def test_put_matches_numpy(backend):
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    i = np.array([7, -8, 2])
    _same(_put_cases, x, i, backend=backend)


PUT_ERRORS = [
    (lambda x, i: np.put(x, i, 1.0), ValueError, "mode='raise' needs the traced indices"),
    (lambda x, i: np.put(x, [3], 1.0), IndexError, "index 3 is out of bounds for axis 0"),
    (lambda x, i: np.put(x, [0], 1.0, mode="bad"), ValueError, "clipmode must be one of"),
    (lambda x, i: anp.put(np.zeros(3), [0], x[0]), TypeError, "the array to write into is a"),
    (lambda x, i: np.put(x, [0, 1], []), ValueError, "cannot put from an empty v"),
]


@pytest.mark.parametrize("case", range(len(PUT_ERRORS)))
def test_put_errors(case):
    fn, exc, message = PUT_ERRORS[case]
    with pytest.raises(exc, match=message):
        aotkit.lower(fn, np.zeros(3, np.float32), np.zeros(2, np.int32))


INSERTS = {
    "scalar index": lambda a, v: np.insert(a, 1, 5),
    "scalar index axis 1": lambda a, v: np.insert(a, 1, v[:3], axis=1),
    "scalar index column": lambda a, v: np.insert(a, 2, [[1], [2], [3]], axis=1),
    "list index axis 1": lambda a, v: np.insert(a, [1], [[1], [2], [3]], axis=1),
    "sequence": lambda a, v: np.insert(a, [1, 1, 3, -1], v[:4]),
    "sequence unsorted": lambda a, v: np.insert(a, [4, 0, 2], [10, 20, 30]),
    "slice": lambda a, v: np.insert(a, slice(0, 4, 2), v[:2], axis=1),
    "bool mask": lambda a, v: np.insert(a, np.array([True, False, True]), 0, axis=0),
    "end": lambda a, v: np.insert(a, 12, 1.5),
    "negative": lambda a, v: np.insert(a, -1, v[0], axis=0),
    "rows": lambda a, v: np.insert(a, [0, 3], v[:4], axis=0),
}


@pytest.mark.parametrize("backend", BACKENDS)
def test_insert_matches_numpy(backend):
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    v = np.array([-1, -2, -3, -4], np.float32)
    got = run_on(backend, lambda a, v: {k: f(a, v) for k, f in INSERTS.items()}, a, v)
    for k, f in INSERTS.items():
        assert_matches(got[k], f(a, v), k)


INSERT_ERRORS = [
    (lambda a: np.insert(a, a[0].astype(np.int32), 1), TypeError, "obj .* must be static"),
    (lambda a: np.insert(a, 13, 1), IndexError, "index 13 is out of bounds for axis 0 with"),
    (lambda a: np.insert(a, [0, 14], 1), IndexError, "index 14 is out of bounds"),
    (lambda a: np.insert(a, [[0]], 1), ValueError, "must be one dimensional or scalar"),
    (lambda a: np.insert(a, np.ones((1, 1), bool), 1), ValueError, "boolean array argument"),
    (lambda a: np.insert(a, [0.5], 1), IndexError, "index arrays must be of integer type"),
    (lambda a: np.insert(a, [0, 1], [1, 2, 3]), ValueError, "could not broadcast input array"),
]


@pytest.mark.parametrize("case", range(len(INSERT_ERRORS)))
def test_insert_errors(case):
    fn, exc, message = INSERT_ERRORS[case]
    with pytest.raises(exc, match=message):
        aotkit.lower(fn, np.zeros((3, 4), np.float32))


@pytest.mark.parametrize("backend", BACKENDS)
def test_select_matches_numpy(backend):
    x = np.arange(-4, 5, dtype=np.int32)
    f32 = np.linspace(0, 1, 9, dtype=np.float32)
    cases = {
        "ints": lambda x, f: np.select([x < -2, x > 2], [x, x**2], default=7),
        "weak scalars": lambda x, f: np.select([x < 0, x == 0], [f, 0.5], default=-1.0),
        "first wins": lambda x, f: np.select([x > 0, x > 2], [1, 2]),
        "broadcast": lambda x, f: np.select([x[:, None] > x[None, :]], [f[None, :]]),
        "default array": lambda x, f: np.select([x > 0], [f], default=x),
    }
    got = run_on(backend, lambda x, f: {k: c(x, f) for k, c in cases.items()}, x, f32)
    for k, c in cases.items():
        assert_matches(got[k], c(x, f32), k)


SELECT_ERRORS = [
    (lambda x: np.select([x > 0], [x, x]), ValueError, "list of cases must be same length"),
    (lambda x: np.select([], []), ValueError, "select with an empty condition list"),
    (lambda x: np.select([x], [x]), TypeError, "invalid entry 0 in condlist: should be boolean"),
]


@pytest.mark.parametrize("case", range(len(SELECT_ERRORS)))
def test_select_errors(case):
    fn, exc, message = SELECT_ERRORS[case]
    with pytest.raises(exc, match=message):
        aotkit.lower(fn, np.zeros(3, np.float32))


# --- out= ----------------------------------------------------------------------------------------


def _out_cases(x, i):
    # Buffers made from the inputs (`*_like`) are traced arrays when the inputs are.
    o = np.empty_like(x)
    np.add(x, 1, out=o)
    r = np.multiply(x, x, out=np.zeros_like(x))
    p = np.zeros_like(x)
    np.subtract(x, 2, out=p, where=x > 0)
    q = np.zeros_like(x, np.float64, shape=(2, 3))
    np.add(x[0], 1.0, out=q)  # a float32 result cast into float64, broadcast to q
    ii = np.zeros_like(i)
    np.floor_divide(i, 2, out=(ii,))
    s = np.zeros_like(x, np.float64, shape=(3,))
    np.sum(x, axis=0, out=s)  # computed in float64, out's dtype
    s16 = np.zeros_like(i, np.int16, shape=(2,))
    np.sum(i, axis=1, out=s16)
    m = np.zeros_like(x, shape=(3,))
    np.mean(x, axis=0, out=m)
    mx = np.zeros_like(i, shape=(2,))
    np.max(x, axis=1, out=mx)  # reductions cast into out whatever the rule
    am = np.zeros_like(i, np.int64, shape=(3,))
    np.argmax(x, 0, am)  # out given by position
    cs = np.zeros_like(x)
    np.cumsum(x, axis=1, out=cs)
    red = np.zeros_like(x, shape=(3,))
    np.add.reduce(x, axis=0, out=red)
    acc = np.zeros_like(i)
    np.bitwise_or.accumulate(i, axis=1, out=acc)
    bred = np.zeros_like(i, np.int64, shape=(3,))
    np.bitwise_xor.reduce(i, axis=0, out=bred)
    ip = np.abs(x)
    np.sqrt(ip, out=ip)
    return {
        "add": o, "returned": r, "where": p, "broadcast": q, "tuple": ii, "sum": s,
        "sum int16": s16, "mean": m, "max": mx, "argmax": am, "cumsum": cs, "reduce": red,
        "accumulate": acc, "bitwise reduce": bred, "in place": ip,
    }  # fmt: skip


@pytest.mark.parametrize("backend", BACKENDS)
def test_out_writes_into_traced_arrays_like_numpy(backend):
    x = np.abs(RNG.normal(size=(2, 3))).astype(np.float32) - 0.3
    i = RNG.integers(-50, 50, (2, 3)).astype(np.int32)
    _same(_out_cases, x, i, backend=backend)


def test_out_returns_the_out_array():
    seen = []

    def f(x):
        o, s = anp.zeros_like(x), anp.zeros(3, np.float32)
        seen.append((np.add(x, 1, out=o) is o, np.sum(x, axis=0, out=s) is s))
        return o, s

    aotkit.lower(f, np.zeros((2, 3), np.float32))
    assert seen == [(True, True)]


OUT_ERRORS = [
    (lambda x: np.add(x, 1, out=np.zeros((2, 3), np.float32)), TypeError, "out= is a NumPy array"),
    (lambda x: np.add(x, 1.5, out=x.astype(np.int32)), TypeError,
     r"Cannot cast ufunc 'add' output from float32 to int32 with casting rule 'same_kind'"),
    (lambda x: np.add(x, x, out=x[0]), ValueError,
     r"non-broadcastable output operand with shape \(3,\) doesn't match the broadcast shape "
     r"\(2, 3\)"),
    (lambda x: anp.add(x, x, out=(x, x)), ValueError, "out= holds 2 arrays"),
    (lambda x: np.add(x, x, out=[1, 2]), TypeError, "out= must be a traced array, got list"),
    (lambda x: aotkit.fori_loop(0, 2, lambda k, c: np.add(c, 1, out=x), x), TypeError,
     "cannot update .* in place: it was traced outside the body"),
]  # fmt: skip


@pytest.mark.parametrize("case", range(len(OUT_ERRORS)))
def test_out_errors(case):
    fn, exc, message = OUT_ERRORS[case]
    with pytest.raises(exc, match=message):
        aotkit.lower(fn, np.zeros((2, 3), np.float32))
