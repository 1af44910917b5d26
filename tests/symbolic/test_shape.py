"""Symbolic dimensions through reshape (with -1), transpose, concatenate and stack (issue 25)."""

from __future__ import annotations

import numpy as np
import pytest

import aotkit
import aotkit.numpy as anp
from tests.symbolic.helpers import Case

TN = {"constraints": ("t % 8 == 0",), "symbol": "t", "sizes": (0, 8, 16, 64)}

CASES = {
    "reshape_flatten": Case(lambda x: x.reshape(-1), "f32[b,3]"),
    "reshape_product": Case(lambda x: x.reshape(x.shape[0] * 3), "f32[b,3]"),
    "reshape_split_static": Case(lambda x: x.reshape(x.shape[0], 2, 3), "f32[b,6]"),
    "reshape_infer_leading": Case(lambda x: x.reshape(-1, 2), "f32[b,6]"),
    "reshape_infer_symbolic": Case(lambda x: x.reshape(2, -1), "f32[2,b,3]"),
    "reshape_heads": Case(
        lambda x: x.reshape(x.shape[0], x.shape[1], 2, 4),
        "f32[b,t,8]",
        symbol=None,
        values=lambda n: {"b": n, "t": n + 1},
    ),
    "reshape_by_constraint": Case(lambda x: x.reshape(-1, 8, 2), "f32[t,2]", **TN),
    "reshape_floordiv": Case(lambda x: x.reshape(x.shape[0] // 8, 16), "f32[t,2]", **TN),
    "ravel": Case(np.ravel, "f32[b,2,3]"),
    "expand_dims": Case(lambda x: np.expand_dims(x, 1), "f32[b,3]"),
    "squeeze": Case(lambda x: np.squeeze(x, 1), "f32[b,1,3]"),
    "x_none": Case(lambda x: x[None, :, None], "f32[b,3]"),
    "transpose": Case(lambda x: x.T, "f32[b,3]"),
    "transpose_axes": Case(lambda x: np.transpose(x, (1, 2, 0)), "f32[b,2,3]"),
    "swapaxes": Case(lambda x: np.swapaxes(x, 0, 1), "f32[b,3]"),
    "moveaxis": Case(lambda x: np.moveaxis(x, 0, -1), "f32[b,2,3]"),
    "concatenate_symbolic_axis": Case(
        lambda x, y: np.concatenate([x, y, x]), "f32[b,3]", "f32[2,3]"
    ),
    "concatenate_static_axis": Case(
        lambda x, y: np.concatenate([x, y], axis=1), "f32[b,3]", "f32[b,2]"
    ),
    "stack": Case(lambda x, y: np.stack([x, y], axis=1), "f32[b,3]", "f32[b,3]"),
    "hstack": Case(lambda x: np.hstack([x, x]), "f32[b]"),
    "broadcast_to_symbolic": Case(
        lambda x, y: np.broadcast_to(x[:, None], (x.shape[0], 4)) + y, "f32[b]", "f32[4]"
    ),
    "diff_symbolic_axis": Case(lambda x: np.diff(x, axis=0), "f32[b,3]"),
    "diff_static_axis": Case(lambda x: np.diff(x), "i32[b,3]"),
    "flip": Case(lambda x: np.flip(x, 0), "f32[b,3]"),
    "split_static_axis": Case(lambda x: np.split(x, 3, axis=1), "f32[b,6]"),
    "tile": Case(lambda x: np.tile(x, (2, 1)), "f32[b,3]"),
    "repeat_static_axis": Case(lambda x: np.repeat(x, 2, axis=1), "f32[b,3]"),
    "pad_static": Case(lambda x: np.pad(x, ((1, 2), (0, 1))), "f32[b,3]"),
    "atleast_2d": Case(np.atleast_2d, "f32[b]"),
    "shape_as_value": Case(lambda x: anp.zeros(x.shape[0]) + x.size + x.shape[0] * x, "f32[b]"),
}


@pytest.mark.parametrize("name", CASES)
def test_shape(name):
    CASES[name].run()


def test_reshape_that_does_not_divide_says_which_constraint_would():
    def f(x):
        return x.reshape(-1, 8)

    with pytest.raises(ValueError) as e:
        aotkit.jit(f).lower(aotkit.spec("f32[t]"))
    assert str(e.value) == (
        f"reshape (at {__file__}:{f.__code__.co_firstlineno + 1}): cannot infer -1 of shape "
        "(-1, 8) from size t: 8 does not divide t for every value of the symbols; add a "
        "constraint such as t % 8 == 0 with aotkit.symbolic_shape(..., constraints=...), "
        "or give the shape without -1"
    )


def test_reshape_to_another_size_is_refused():
    def f(x):
        return x.reshape(x.shape[0] + 1)

    with pytest.raises(
        ValueError, match=r"cannot reshape array of size b into shape \(b \+ 1,\); "
    ):
        aotkit.jit(f).lower(aotkit.spec("f32[b]"))
