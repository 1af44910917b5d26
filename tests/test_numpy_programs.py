"""NumPy kernels as written (tests/programs/numpy_style.py) equal NumPy through aotkit.jit:
buffers NumPy makes inside the function take traced values, in-place writes, histograms,
covariance, Cholesky. Also the warning for an argument written in place but not returned.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import aotkit
from tests.helpers import assert_matches
from tests.programs import numpy_style as k

RNG = np.random.default_rng(7)


def _spd(n):
    a = RNG.standard_normal((n, n))
    return a @ a.T + n * np.eye(n)


CASES = [
    ("rowwise_scale", k.rowwise_scale, (RNG.standard_normal((5, 3)),)),
    ("centered_columns", k.centered_columns, (RNG.standard_normal((6, 4)).astype(np.float32),)),
    ("running_sum", k.running_sum, (RNG.standard_normal(9),)),
    ("blur", k.blur, (RNG.standard_normal((8, 3)),)),
    ("histogram_counts", k.histogram_counts, (RNG.standard_normal(200),)),
    ("correlation", k.correlation, (RNG.standard_normal((30, 4)),)),
    ("cholesky_solve", k.cholesky_solve, (_spd(5), RNG.standard_normal(5))),
    ("manual_cholesky", k.manual_cholesky, (_spd(6),)),
    ("normalize_in_place", k.normalize_in_place, (RNG.standard_normal(10),)),
    (
        "scatter_add",
        k.scatter_add,
        (RNG.standard_normal(7), np.array([0, 1, 1, 3, 0, 2, 3])),
    ),
    # `np.array([[c, -s], [s, c]])` of traced scalars was "np.asarray() of a traced array".
    ("rotate", k.rotate, (RNG.standard_normal((5, 2)), np.float64(0.3))),
    ("rotate_f32", k.rotate, (RNG.standard_normal((5, 2)).astype(np.float32), np.float32(0.3))),
]


# Loops whose bodies slice with the traced loop index (`lower[j, :j]`) stay unrolled, with
# the warning that says so (aotkit slices have static bounds); the result is the same.
UNROLLED = {"manual_cholesky"}


@pytest.mark.parametrize("name, fn, args", CASES, ids=[c[0] for c in CASES])
def test_numpy_kernel_equals_numpy(name, fn, args):
    want = fn(*(np.copy(a) for a in args))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing to warn about in these kernels
        if name in UNROLLED:
            warnings.simplefilter("ignore", aotkit.autograph.AutographWarning)
        got = aotkit.jit(fn)(*args)
    want = want if isinstance(want, tuple) else (want,)
    got = got if isinstance(got, tuple) else (got,)
    for g, w in zip(got, want, strict=True):
        tolerances = {np.dtype(np.float64): (1e-9, 1e-9)}
        assert_matches(np.asarray(g), np.asarray(w), name, tolerances=tolerances)


def test_a_numpy_buffer_becomes_traced_only_when_it_gets_a_traced_value():
    def f(x):
        table = np.zeros(3)
        table[1] = 5.0  # a Python value: NumPy writes it, the buffer stays NumPy's
        kinds = [type(table).__name__]
        table[2] = x[0]
        kinds.append(type(table).__name__)
        return table, kinds

    kinds = []
    out = aotkit.jit(lambda x: f(x)[0])(np.array([7.0]))
    np.testing.assert_array_equal(np.asarray(out), [0.0, 5.0, 7.0])
    aotkit.lower(lambda x: kinds.extend(f(x)[1]) or x, np.array([7.0]))
    assert kinds == ["ndarray", "Tracer"]


def writes_argument(x, y):
    y[1:] = x[1:]
    return x.sum()


def test_an_argument_written_in_place_but_not_returned_warns_once():
    with pytest.warns(
        aotkit.InPlaceWriteWarning,
        match=r"^writes_argument: argument args\[1\] is written in place at .*"
        r"test_numpy_programs.py:\d+ but not returned; aotkit's arrays are values, so the "
        r"caller's array does not change \(NumPy's would\): return it to keep the write$",
    ) as record:
        aotkit.lower(writes_argument, np.ones(3), np.zeros(3))
    assert len(record) == 1


def test_an_argument_written_and_returned_does_not_warn():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = aotkit.jit(k.normalize_in_place)(np.arange(4.0))
    x = np.arange(4.0)
    np.testing.assert_allclose(np.asarray(out), (x - x.mean()) / (x - x.mean()).std())


def test_np_array_of_traced_values_outside_converted_code_says_what_to_do():
    """Only converted code (autograph) reads `np.array([...])` of traced values as
    aotkit.numpy's; a function traced as written gets the error that says to call it."""

    def f(x):
        return np.array([x[0], x[1]])

    with pytest.raises(TypeError) as e:
        aotkit.jit(f, autograph=False)(np.ones(2, np.float32))
    assert "np.asarray() of a traced f32[] array" in str(e.value)
    assert "call aotkit.numpy (or plain np.* functions, which dispatch to it)" in str(e.value)
    assert_matches(aotkit.jit(f)(np.ones(2, np.float32)), np.ones(2, np.float32))
