"""Symbolic dimensions through while/fori/scan/cond: carries of symbolic shape, and loops
whose trip count is a symbolic dimension (issue 25)."""

from __future__ import annotations

import numpy as np
import pytest

import aotkit
from tests.symbolic.helpers import Case

POSITIVE = {"constraints": ("b >= 1",), "sizes": (1, 2, 7, 64)}


def _fori_carry(x):
    return aotkit.fori_loop(0, 3, lambda i, c: c * 0.5 + i, x)


def _fori_symbolic_trip(x):
    return aotkit.fori_loop(0, x.shape[0], lambda i, c: c + x[i], np.zeros(3, np.float32))


def _while_carry(x):
    def cond(c):
        return c[1] < 4

    def body(c):
        return c[0] * 2.0 + 1.0, c[1] + 1

    return aotkit.while_loop(cond, body, (x, 0))[0]


def _scan_rows(x):
    def f(c, row):
        c = c + row
        return c, c * 2.0

    return aotkit.scan(f, np.zeros(3, np.float32), x)


def _scan_reverse(x):
    return aotkit.scan(lambda c, row: (c * row, c), np.ones(3, np.float32), x, reverse=True)


def _scan_symbolic_carry(x):
    # Rows of a static axis, a carry of symbolic shape.
    return aotkit.scan(lambda c, col: (c + col, c.sum()), np.float32(0) * x[:, 0], x.T)


def _cond(x, p):
    return aotkit.cond(p > 0, lambda v: v * 2.0, lambda v: v[::-1], x)


def _cond_shape_values(x):
    return aotkit.cond(x.shape[0] > 2, lambda v: v + 1.0, lambda v: v - 1.0, x)


CASES = {
    "fori_loop_carry": Case(_fori_carry, "f32[b,3]"),
    "fori_loop_symbolic_trip_count": Case(_fori_symbolic_trip, "f32[b,3]", **POSITIVE),
    "while_loop_carry": Case(_while_carry, "f32[b,3]"),
    "scan_over_symbolic_rows": Case(_scan_rows, "f32[b,3]"),
    "scan_reverse": Case(_scan_reverse, "f32[b,3]"),
    "scan_symbolic_carry": Case(_scan_symbolic_carry, "f32[b,3]"),
    "cond": Case(_cond, "f32[b,3]", "i32[]"),
    "cond_on_a_dimension": Case(
        _cond_shape_values, "f32[b]", constraints=("b >= 3",), sizes=(3, 7)
    ),  # fmt: skip
}


@pytest.mark.parametrize("name", CASES)
def test_control(name):
    CASES[name].run()


def test_a_traced_index_into_a_possibly_empty_axis_needs_a_constraint():
    with pytest.raises(aotkit.InconclusiveDimensionError) as e:
        aotkit.jit(_fori_symbolic_trip).lower(aotkit.spec("f32[b,3]"))
    line = _fori_symbolic_trip.__code__.co_firstlineno + 1
    assert str(e.value) == (
        f"getitem (at {__file__}:{line}): axis 0 of symbolic size b may be empty, which a "
        "traced index cannot read; add a constraint such as b >= 1 with "
        "aotkit.symbolic_shape(..., constraints=...), or make the dimension static"
    )
