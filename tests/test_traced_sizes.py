"""A traced value where a size is needed is refused in one wording, wherever it arises.

`np.empty(nvar_x * (1 + nvar_y))` with traced ints gave NumPy's own "expected a sequence of
integers or a single integer, got 'Tracer<i32[], weak>'" with no line; `reshape`, `repeat`,
`tile` and `delete` each had their own words, none with the way out. Every such refusal now
names the function, the user's line, the argument, and both fixes (a static argument, or a
symbolic dimension); and the fix it names works.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import aotkit

FIX = (
    "is traced, but it sets the shape of the result, and shapes are fixed when the function "
    "is traced; make it static (aotkit.jit(f, static_argnames=...), or compute it from static "
    "sizes such as x.shape[0]), or give the array it comes from a symbolic dimension "
    "(aotkit.spec('f32[n]')) and use that array's size"
)

# name: (function of a traced int n, the op and argument the message names)
CASES = {
    "empty": (lambda x, n: np.empty(n * (1 + n)), "np.empty", "shape"),
    "zeros": (lambda x, n: np.zeros(n), "np.zeros", "shape"),
    "zeros_tuple": (lambda x, n: np.zeros((n, 2)), "np.zeros", "a size in shape"),
    "ones_keyword": (lambda x, n: np.ones(shape=n), "np.ones", "shape"),
    "full": (lambda x, n: np.full(n, 1.0), "np.full", "shape"),
    "empty_like": (
        lambda x, n: np.empty_like(np.ones(3), shape=(n,)),
        "np.empty_like",
        "a size in shape",
    ),
    "eye": (lambda x, n: np.eye(n), "np.eye", "N"),
    "identity": (lambda x, n: np.identity(n), "np.identity", "n"),
    "tri": (lambda x, n: np.tri(3, n), "np.tri", "M"),
    "arange": (lambda x, n: np.arange(n), "np.arange", "a bound (start, stop or step)"),
    "linspace": (lambda x, n: np.linspace(0, 1, n), "np.linspace", "num"),
    "reshape": (lambda x, n: x.reshape(n, -1), "reshape", "a size in shape (<traced>, -1)"),
    "np_reshape": (lambda x, n: np.reshape(x, (n, 2)), "reshape", "a size in shape (<traced>, 2)"),
    "repeat": (lambda x, n: np.repeat(x, n), "repeat", "repeats"),
    "tile": (lambda x, n: np.tile(x, n), "tile", "reps"),
    "broadcast_to": (lambda x, n: np.broadcast_to(x, (n, 4)), "broadcast_to", "shape"),
    "split": (lambda x, n: np.split(x, n), "split", "indices_or_sections"),
    "delete": (lambda x, n: np.delete(x, n), "delete", "obj (the indices deleted)"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_a_traced_size_is_refused_with_the_line_and_the_fix(name):
    fn, op, what = CASES[name]
    line = fn.__code__.co_firstlineno
    with pytest.raises(TypeError) as e:
        aotkit.jit(fn)(np.ones(4, np.float32), 2)
    assert str(e.value) == f"{op} (at {__file__}:{line}): {what} {FIX}"


def test_the_fixes_the_message_names_work():
    def f(x, n):
        return np.zeros(n * (1 + n)) + x.sum()

    static = aotkit.jit(f, static_argnames=("n",))(np.ones(4, np.float32), n=2)
    np.testing.assert_array_equal(np.asarray(static), np.full(6, 4.0))
    assert static.dtype == np.float64

    def g(x):
        return np.zeros(x.shape[0] * 2) + x.sum()

    lowered = aotkit.jit(g).lower(aotkit.spec("f32[n]"))
    assert re.search(r"tensor<\?xf64>|tensor<\?xf32>", lowered.as_text())
    out = lowered.compile()(np.ones(3, np.float32))
    np.testing.assert_array_equal(np.asarray(out), np.full(6, 3.0))


def test_numpy_functions_with_static_sizes_are_unchanged():
    def f(x):
        return np.zeros(3) + np.arange(3) + np.linspace(0, 1, 3) + np.eye(3)[0] + x

    x = np.ones(3, np.float32)
    want = f(x)
    got = aotkit.jit(f)(x)
    np.testing.assert_allclose(np.asarray(got), want)
    assert got.dtype == want.dtype
