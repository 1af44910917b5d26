"""Symbolic dimensions through slicing and indexing: symbolic bounds, static and traced
indices (issue 25)."""

from __future__ import annotations

import numpy as np
import pytest

import aotkit
import aotkit.numpy as anp
from tests.symbolic.helpers import SIZES, Case

POSITIVE = {"constraints": ("b >= 1",), "sizes": (1, 2, 7, 64)}
AT_LEAST_3 = {"constraints": ("b >= 3",), "sizes": (3, 7, 64)}

CASES = {
    "from_one": Case(lambda x: x[1:], "f32[b,3]"),
    "drop_last": Case(lambda x: x[:-1], "f32[b,3]"),
    "difference": Case(lambda x: x[1:] - x[:-1], "f32[b,3]"),
    "middle": Case(lambda x: x[1:-1], "f32[b]"),
    "static_window": Case(lambda x: x[2:5], "f32[b]"),
    "step_two": Case(lambda x: x[::2], "f32[b,3]"),
    "step_three_from_one": Case(lambda x: x[1::3], "f32[b]"),
    "reversed": Case(lambda x: x[::-1], "f32[b,3]"),
    "reversed_step_two": Case(lambda x: x[::-2], "f32[b]"),
    "symbolic_stop": Case(lambda x: x[: x.shape[0] - 1], "f32[b,3]", **POSITIVE),
    "symbolic_start": Case(lambda x: x[x.shape[0] // 2 :], "f32[b]"),
    "static_axis_slice": Case(lambda x: x[:, 1:], "f32[b,3]"),
    "column": Case(lambda x: x[:, 0], "f32[b,3]"),
    "first_row": Case(lambda x: x[0], "f32[b,3]", **POSITIVE),
    "last_row": Case(lambda x: x[-1], "f32[b,3]", **POSITIVE),
    "ellipsis_none": Case(lambda x: x[..., None, 1], "f32[b,3]"),
    "traced_index": Case(lambda x, i: x[i], "f32[b,3]", "i32[]", **POSITIVE),
    "traced_index_static_axis": Case(lambda x, i: x[:, i % 3], "f32[b,3]", "i32[]"),
    "static_array_index": Case(lambda x: x[np.array([0, 2, 1])], "f32[b,3]", **AT_LEAST_3),
    "static_array_on_static_axis": Case(lambda x: x[:, [2, 0]], "f32[b,3]"),
    "traced_array_index": Case(lambda x, i: x[i % 4], "f32[4,3]", "i32[b]"),
    "take_along_symbolic": Case(lambda x, i: anp.take(x, i % 3, axis=1), "f32[b,3]", "i32[b]"),
    "index_by_dimension": Case(lambda x: x[x.shape[0] // 2], "f32[b,3]", **POSITIVE),
    "update_at_dimension": Case(lambda x: x.at[x.shape[0] // 2].set(1.0), "f32[b,3]", **POSITIVE),
    "set_column": Case(lambda x: x.at[:, 1].set(0.0), "f32[b,3]"),
    "add_row": Case(lambda x: x.at[0].add(1.0), "f32[b,3]", **POSITIVE),
}


@pytest.mark.parametrize("name", CASES)
def test_indexing(name):
    CASES[name].run()


def test_first_element_of_a_possibly_empty_axis_needs_a_constraint():
    def f(x):
        return x[0]

    with pytest.raises(aotkit.InconclusiveDimensionError) as e:
        aotkit.jit(f).lower(aotkit.spec("f32[b,3]"))
    assert str(e.value) == (
        f"symbolic dimension comparison b > 0 (at {__file__}:{f.__code__.co_firstlineno + 1}): "
        "the constraints (every symbol >= 0) do not decide it; add a constraint such as "
        "b >= 1 with aotkit.symbolic_shape(..., constraints=...), or make the dimension static"
    )


def test_a_bound_of_undecided_sign_needs_a_constraint():
    def f(x):
        return x[: x.shape[0] - 2]

    with pytest.raises(aotkit.InconclusiveDimensionError) as e:
        aotkit.jit(f).lower(aotkit.spec("f32[b]"))
    assert str(e.value) == (
        f"symbolic dimension comparison b - 2 < 0 (at {__file__}:{f.__code__.co_firstlineno + 1}):"
        " the constraints (every symbol >= 0) do not decide it; add a constraint such as "
        "b - 2 <= -1 with aotkit.symbolic_shape(..., constraints=...), or make the dimension "
        "static"
    )


def test_python_range_over_a_symbolic_dimension():
    def f(x):
        return sum(x[i] for i in range(x.shape[0]))

    with pytest.raises(aotkit.InconclusiveDimensionError) as e:
        aotkit.jit(f).lower(aotkit.spec("f32[b]"))
    assert str(e.value) == (
        "using as a Python int (range(), an index, NumPy) of the symbolic dimension b (at "
        f"{__file__}:{f.__code__.co_firstlineno + 1}): its value is known only when the program "
        "runs; use array operations on it (aotkit.numpy.arange, x.shape in reshapes and slices, "
        "aotkit.fori_loop for loops), add a constraint such as b == 4 with "
        "aotkit.symbolic_shape(..., constraints=...), or make the dimension static"
    )


assert SIZES
