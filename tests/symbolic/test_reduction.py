"""Symbolic dimensions through reductions: sum, mean (a symbolic count), max, var, argmax
(issue 25)."""

from __future__ import annotations

import numpy as np
import pytest

import aotkit
from tests.symbolic.helpers import Case

POSITIVE = {"constraints": ("b >= 1",), "sizes": (1, 2, 7, 64)}

CASES = {
    "sum_all": Case(np.sum, "f32[b,3]"),
    "sum_symbolic_axis": Case(lambda x: x.sum(0), "f32[b,3]"),
    "sum_static_axis": Case(lambda x: x.sum(1), "f32[b,3]"),
    "sum_keepdims": Case(lambda x: x.sum(1, keepdims=True), "f32[b,3]"),
    "sum_ints_widen": Case(lambda x: x.sum(0), "i8[b,3]"),
    "mean_symbolic_axis": Case(lambda x: x.mean(0), "f32[b,3]", **POSITIVE),
    "mean_empty_is_nan": Case(lambda x: x.mean(0), "f32[b,3]"),
    "mean_static_axis": Case(lambda x: x.mean(-1), "f32[b,3]"),
    "mean_all": Case(np.mean, "f32[b,3]", **POSITIVE),
    "max_static_axis": Case(lambda x: x.max(1), "f32[b,3]"),
    "max_symbolic_axis": Case(lambda x: x.max(0), "f32[b,3]", **POSITIVE),
    "min_initial": Case(lambda x: np.min(x, axis=0, initial=5.0), "f32[b,3]"),
    "prod": Case(lambda x: np.prod(x, axis=1), "f32[b,3]"),
    "any_all": Case(lambda x: (np.any(x > 0, 0), np.all(x > 0, 1)), "f32[b,3]"),
    "var": Case(lambda x: np.var(x, axis=0), "f32[b,3]", **POSITIVE),
    "std_static_axis": Case(lambda x: np.std(x, axis=1), "f32[b,3]"),
    "argmax_static_axis": Case(lambda x: np.argmax(x, axis=1), "f32[b,3]"),
    "argmax_symbolic_axis": Case(lambda x: np.argmax(x, axis=0), "f32[b,3]", **POSITIVE),
    "logsumexp": Case(lambda x: np.log(np.sum(np.exp(x - x.max(1, keepdims=True)), 1)), "f32[b,3]"),
    "count_nonzero": Case(lambda x: np.count_nonzero(x > 0, axis=0), "f32[b,3]"),
}


@pytest.mark.parametrize("name", CASES)
def test_reduction(name):
    CASES[name].run()


def test_max_over_a_possibly_empty_axis_needs_a_constraint():
    def f(x):
        return x.max(0)

    with pytest.raises(aotkit.InconclusiveDimensionError) as e:
        aotkit.jit(f).lower(aotkit.spec("f32[b,3]"))
    assert str(e.value) == (
        f"max (at {__file__}:{f.__code__.co_firstlineno + 1}): the reduced size b may be 0, and "
        "max has no identity; add a constraint such as b >= 1 with "
        "aotkit.symbolic_shape(..., constraints=...), or pass initial="
    )
