"""Plain `np.*` calls on tracers: NumPy's dispatch protocols route them to aotkit.numpy.

The functions under test are written against NumPy only; each is lowered with aotkit and
compared with running the same function on NumPy arrays (values and dtypes).
"""

from __future__ import annotations

import numpy as np
import pytest

import aotkit
import aotkit.numpy as anp
from tests.helpers import assert_matches as _check
from tests.helpers import run_on

RNG = np.random.default_rng(2)
X = RNG.uniform(-3, 3, (3, 4)).astype(np.float32)
I = RNG.integers(-9, 10, (3, 4)).astype(np.int32)  # noqa: E741
B = RNG.random((3, 4)) < 0.5


def _compare(cases, *args):
    """Lowers all `cases` (label -> fn of args) in one module and compares each with NumPy."""
    got = run_on("cpu", lambda *a: {k: fn(*a) for k, fn in cases.items()}, *args)
    with np.errstate(all="ignore"):
        for k, fn in cases.items():
            _check(got[k], fn(*args), k)


def test_ufunc_calls():
    _compare(
        {
            "np.sin": lambda x, i, b: np.sin(x),
            "np.add weak": lambda x, i, b: np.add(x, 2.0),
            "np.add ndarray": lambda x, i, b: np.add(X, x),
            "ndarray + tracer": lambda x, i, b: X + x,
            "ndarray * tracer int": lambda x, i, b: I * i,
            "np.float32 * tracer": lambda x, i, b: np.float32(2) * x,
            "np.int8 + tracer": lambda x, i, b: np.int8(3) + i,
            "np.maximum": lambda x, i, b: np.maximum(x, i),
            "np.abs": lambda x, i, b: np.abs(i),
            "np.conjugate": lambda x, i, b: np.conjugate(x),
            "np.true_divide": lambda x, i, b: np.true_divide(i, 4),
            "np.logical_and": lambda x, i, b: np.logical_and(b, i > 0),
            "np.exp dtype": lambda x, i, b: np.exp(x, dtype=np.float64),
            "np.matmul": lambda x, i, b: np.matmul(x, x.T),
            "np.vecdot": lambda x, i, b: np.vecdot(x, x),
            "ndarray @ tracer": lambda x, i, b: X.T @ x,
        },
        X,
        I,
        B,
    )


def test_array_functions():
    _compare(
        {
            "np.sum": lambda x, i: np.sum(x, axis=0),
            "np.sum int": lambda x, i: np.sum(i),
            "np.mean keepdims": lambda x, i: np.mean(i, axis=1, keepdims=True),
            "np.std": lambda x, i: np.std(x, ddof=1),
            "np.max": lambda x, i: np.max(x, axis=1),
            "np.amin": lambda x, i: np.amin(i, axis=0),
            "np.argmax": lambda x, i: np.argmax(x),
            "np.cumsum": lambda x, i: np.cumsum(i, axis=1),
            "np.where": lambda x, i: np.where(x > 0, x, 0.0),
            "np.where mixed": lambda x, i: np.where(i > 0, i, X),
            "np.einsum": lambda x, i: np.einsum("ij,kj->ik", x, x),
            "np.dot": lambda x, i: np.dot(x, x.T),
            "np.tensordot": lambda x, i: np.tensordot(x, i, axes=2),
            "np.concatenate": lambda x, i: np.concatenate([x, X], axis=0),
            "np.stack": lambda x, i: np.stack([x, x * 2]),
            "np.clip": lambda x, i: np.clip(x, -1, 1),
            "np.round": lambda x, i: np.round(x, 1),
            "np.linalg.norm": lambda x, i: np.linalg.norm(x, axis=1),
            "np.linalg.norm fro": lambda x, i: np.linalg.norm(i),
            "np.linalg.vector_norm": lambda x, i: np.linalg.vector_norm(x, ord=1),
            "np.linalg.matmul": lambda x, i: np.linalg.matmul(x, i.T),
            "np.logsumexp-like": lambda x, i: np.log(np.sum(np.exp(x), axis=-1)),
            "np.zeros(np.shape)": lambda x, i: np.zeros(np.shape(x), np.result_type(x, i)),
            "np.ndim/np.size": lambda x, i: x * (np.ndim(x) + np.size(x) + np.size(x, 1)),
            "np.average": lambda x, i: np.average(x, axis=1, weights=np.arange(4.0)),
            "np.diff": lambda x, i: np.diff(i, axis=0),
        },
        X,
        I,
    )


def test_static_metadata_functions():
    def fn(x):
        assert np.shape(x) == (3, 4) and anp.shape(x) == (3, 4)
        assert np.ndim(x) == 2 and np.size(x) == 12 and np.size(x, axis=-1) == 4
        assert np.result_type(x, 1.0) == np.float32
        assert np.result_type(x, np.int64) == np.float64
        assert anp.result_type(np.float16, x) == np.float32
        return x

    aotkit.lower(fn, X)


REDUCE_CASES = {
    "add.reduce": lambda x, i, b: np.add.reduce(i),
    "add.reduce axis=None": lambda x, i, b: np.add.reduce(x, axis=None),
    "add.reduce dtype": lambda x, i, b: np.add.reduce(i, axis=1, dtype=np.int16),
    "multiply.reduce keepdims": lambda x, i, b: np.multiply.reduce(x, axis=1, keepdims=True),
    "maximum.reduce": lambda x, i, b: np.maximum.reduce(x, axis=1),
    "minimum.reduce initial": lambda x, i, b: np.minimum.reduce(i, initial=0),
    "fmax.reduce": lambda x, i, b: np.fmax.reduce(x),
    "fmin.reduce": lambda x, i, b: np.fmin.reduce(x, axis=(0, 1)),
    "logical_and.reduce": lambda x, i, b: np.logical_and.reduce(b, axis=1),
    "logical_or.reduce": lambda x, i, b: np.logical_or.reduce(i),
    "bitwise_and.reduce": lambda x, i, b: np.bitwise_and.reduce(i, axis=1),
    "bitwise_or.reduce": lambda x, i, b: np.bitwise_or.reduce(i, axis=None, keepdims=True),
    "bitwise_xor.reduce": lambda x, i, b: np.bitwise_xor.reduce(b),
    "add.accumulate": lambda x, i, b: np.add.accumulate(i),
    "add.accumulate axis": lambda x, i, b: np.add.accumulate(x, axis=1),
    "multiply.accumulate dtype": lambda x, i, b: np.multiply.accumulate(i, dtype=np.float64),
    "maximum.accumulate": lambda x, i, b: np.maximum.accumulate(x, axis=1),
    "minimum.accumulate": lambda x, i, b: np.minimum.accumulate(i),
    "logical_and.accumulate": lambda x, i, b: np.logical_and.accumulate(i, axis=1),
    "logical_or.accumulate": lambda x, i, b: np.logical_or.accumulate(b),
    "bitwise_xor.accumulate": lambda x, i, b: np.bitwise_xor.accumulate(i, axis=-1),
    "add.outer": lambda x, i, b: np.add.outer(x[0], i[:, 0]),
    "multiply.outer 2d": lambda x, i, b: np.multiply.outer(x, x[0]),
    "subtract.outer scalar": lambda x, i, b: np.subtract.outer(x, 2.0),
    "greater.outer": lambda x, i, b: np.greater.outer(i[0], i[1]),
}


@pytest.mark.parametrize("name", sorted(REDUCE_CASES))
def test_ufunc_methods(name):
    fn = REDUCE_CASES[name]
    _check(run_on("cpu", fn, X, I, B), fn(X, I, B), name)


ERROR_CASES = [
    ("missing function", NotImplementedError,
     r"numpy.histogramdd \(at .*\): aotkit.numpy has no 'histogramdd', so numpy.histogramdd "
     r"cannot run on a traced array; print\(aotkit\.numpy\.coverage\(\)\) lists what is "
     r"supported", lambda x: np.histogramdd(x)),
    ("missing submodule function", NotImplementedError, r"aotkit.numpy has no 'fft.fft'",
     lambda x: np.fft.fft(x)),
    ("missing linalg function", NotImplementedError, r"aotkit.numpy has no 'linalg.eig'",
     lambda x: np.linalg.eig(x)),
    ("missing ufunc", NotImplementedError, r"aotkit.numpy has no 'spacing'",
     lambda x: np.spacing(x)),
    ("unsupported keyword", NotImplementedError,
     r"numpy.matmul \(at .*\): keyword axes= of numpy.matmul is not supported by "
     r"aotkit.numpy.matmul; accepted: ", lambda x: np.matmul(x, x.T, axes=[(0, 1)] * 3)),
    ("out= NumPy array", TypeError, r"add \(at .*\): out= is a NumPy array of shape \(3, 4\)",
     lambda x: np.add(x, 1, out=np.zeros((3, 4), np.float32))),
    ("ufunc method at", NotImplementedError,
     r"numpy.divide.at \(at .*\): numpy.divide.at is not supported on traced arrays; "
     r"supported: add.at, subtract.at, multiply.at, maximum.at, minimum.at",
     lambda x: np.divide.at(x, [0], 1.0)),
    ("ufunc method reduceat", NotImplementedError,
     r"numpy.subtract.reduceat \(at .*\): numpy.subtract.reduceat is not supported",
     lambda x: np.subtract.reduceat(x, [0, 2])),
    ("ufunc method unknown", NotImplementedError, r"aotkit.numpy has no 'add.foo'",
     lambda x: np.add.foo(x) if hasattr(np.add, "foo") else x.__array_ufunc__(np.add, "foo", x)),
    ("reduce unsupported ufunc", NotImplementedError, r"aotkit.numpy has no 'subtract.reduce'",
     lambda x: np.subtract.reduce(x)),
    ("accumulate unsupported ufunc", NotImplementedError,
     r"aotkit.numpy has no 'divide.accumulate'", lambda x: np.divide.accumulate(x)),
    ("outer unsupported ufunc", NotImplementedError, r"aotkit.numpy has no 'ldexp.outer'",
     lambda x: np.ldexp.outer(x, x.astype(np.int32))),
    ("reduce keyword", NotImplementedError,
     r"keyword initial= is not supported by numpy.bitwise_or.reduce on traced arrays",
     lambda x: np.bitwise_or.reduce(x.astype(np.int32), initial=0)),
    ("reduce keyword of function", NotImplementedError,
     r"keyword initial= of numpy.logical_and.reduce is not supported",
     lambda x: np.logical_and.reduce(x, initial=True)),
    ("bitwise reduce of floats", TypeError,
     r"numpy.bitwise_and.reduce \(at .*\): bitwise_and is not defined for float32",
     lambda x: np.bitwise_and.reduce(x)),
    ("bitwise accumulate of floats", TypeError,
     r"numpy.bitwise_or.accumulate \(at .*\): bitwise_or is not defined for float32",
     lambda x: np.bitwise_or.accumulate(x)),
    ("complex maximum.accumulate", NotImplementedError,
     r"numpy.maximum.accumulate \(at .*\): running maximum of complex values is not supported",
     lambda x: np.maximum.accumulate(x.astype(np.complex64))),
    ("accumulate scalar", TypeError, r"cannot accumulate on a scalar",
     lambda x: np.maximum.accumulate(np.sum(x))),
    # (np.asarray of a traced value is aotkit.numpy's in converted code; traced as written,
    # it is refused: tests/test_numpy_programs.py)
]  # fmt: skip


@pytest.mark.parametrize("case", ERROR_CASES, ids=[c[0] for c in ERROR_CASES])
def test_errors(case):
    _, exc, pattern, fn = case
    with pytest.raises(exc, match=pattern):
        aotkit.lower(fn, X)


def test_foreign_array_types_are_declined():
    class Foreign:
        def __array_function__(self, func, types, args, kwargs):
            return NotImplemented

    with pytest.raises(TypeError, match="no implementation found for 'numpy.concatenate'"):
        aotkit.lower(lambda x: np.concatenate([x, Foreign()]), X)
