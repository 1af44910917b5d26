"""Symbolic dimensions through elementwise ops and NumPy broadcasting (issue 25)."""

from __future__ import annotations

import numpy as np
import pytest

import aotkit
import aotkit.numpy as anp
from tests.symbolic.helpers import Case

CASES = {
    "sin": Case(np.sin, "f32[b,3]"),
    "exp": Case(np.exp, "f32[b,3]"),
    "tanh": Case(np.tanh, "f32[b,3]"),
    "negative": Case(np.negative, "f32[b,3]"),
    "abs": Case(np.abs, "i32[b,3]"),
    "add": Case(np.add, "f32[b,3]", "f32[b,3]"),
    "subtract_scalar": Case(lambda x: x - 1.5, "f32[b,3]"),
    "multiply_int": Case(lambda x: x * 3, "i32[b]"),
    "maximum": Case(np.maximum, "f32[b,3]", "f32[b,3]"),
    "power": Case(lambda x: x**2, "f32[b,3]"),
    "divide_ints": Case(lambda x, y: x / (y + 1), "i32[b,3]", "i32[b,3]"),
    "broadcast_row": Case(np.add, "f32[b,3]", "f32[3]"),
    "broadcast_column": Case(np.multiply, "f32[b,1]", "f32[1,4]"),
    "broadcast_one_against_b": Case(np.subtract, "f32[1,3]", "f32[b,3]"),
    "broadcast_rank": Case(np.add, "f32[2,b,3]", "f32[b,1]"),
    "broadcast_two_symbols": Case(
        np.add, "f32[b,1]", "f32[1,t]", symbol=None, values=lambda n: {"b": n, "t": n + 1}
    ),
    "compare": Case(lambda x, y: x < y, "f32[b,3]", "f32[3]"),
    "where": Case(lambda c, x, y: np.where(c, x, y), "bool[b,3]", "f32[b,3]", "f32[3]"),
    "where_scalar": Case(lambda x: np.where(x > 0, x, 0.0), "f32[b,3]"),
    "astype": Case(lambda x: x.astype(np.int32), "f32[b,3]"),
    "astype_bool": Case(lambda x: x.astype(bool), "f32[b,3]"),
    "clip": Case(lambda x: np.clip(x, -0.5, 0.5), "f32[b,3]"),
    "logical": Case(lambda x, y: np.logical_and(x, y) | ~x, "bool[b]", "bool[b]"),
    "broadcast_to": Case(lambda x, y: np.broadcast_to(x, y.shape), "f32[3]", "f32[b,3]"),
    "ones_like": Case(lambda x: np.ones_like(x) + x, "f32[b,3]"),
    "zeros_shape": Case(lambda x: anp.zeros((x.shape[0], 2), np.float32), "f32[b,3]"),
    "full_like": Case(lambda x: anp.full_like(x, 7), "i32[b]"),
    "square_in_place": Case(lambda x: x * x + x.T.T, "f32[b,3]"),
    "log_nan": Case(lambda x: np.log(x - 0.5), "f32[b]"),
    "isnan": Case(lambda x: np.isnan(np.sqrt(x)), "f32[b,3]"),
}


@pytest.mark.parametrize("name", CASES)
def test_elementwise(name):
    CASES[name].run()


def test_a_symbol_against_another_is_inconclusive():
    def f(x, y):
        return x + y

    with pytest.raises(aotkit.InconclusiveDimensionError) as e:
        aotkit.jit(f).lower(aotkit.spec("f32[b]"), aotkit.spec("f32[k]"))
    assert str(e.value) == (
        f"add (at {__file__}:{f.__code__.co_firstlineno + 1}): cannot broadcast dimension b "
        "against k: the constraints (every symbol >= 0) do not decide whether they are equal "
        "or one of them is 1; add a constraint such as b == k with "
        "aotkit.symbolic_shape(..., constraints=...), or make the dimension static"
    )


def test_a_symbol_against_a_static_size_is_inconclusive():
    def f(x, y):
        return x * y

    with pytest.raises(aotkit.InconclusiveDimensionError) as e:
        aotkit.jit(f).lower(aotkit.spec("f32[b,3]"), aotkit.spec("f32[4,3]"))
    assert str(e.value) == (
        f"multiply (at {__file__}:{f.__code__.co_firstlineno + 1}): cannot broadcast "
        "dimension b against 4: the constraints (every symbol >= 0) do not decide whether "
        "they are equal or one of them is 1; add a constraint such as b == 4 with "
        "aotkit.symbolic_shape(..., constraints=...), or make the dimension static"
    )


def test_symbols_that_cannot_be_equal_do_not_broadcast():
    b, k = aotkit.symbolic_shape("b, k", constraints=("b >= 2", "k >= b + 1"))
    with pytest.raises(ValueError, match=r"shapes \(b,\) and \(k,\) cannot broadcast"):
        aotkit.jit(np.add).lower(aotkit.ShapeDtype((b,), "f32"), aotkit.ShapeDtype((k,), "f32"))
