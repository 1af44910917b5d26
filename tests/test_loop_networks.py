"""Networks written as loops over output positions roll into StableHLO loops and equal NumPy.

A window `x[i * k:(i + 1) * k]` in a loop body is read with one dynamic_slice: its extent is
the difference of two sums of constant multiples of the same values (`_constant_extent`),
which cancel. Before, only `i:i + k` was seen, so a pooling loop failed to trace as a loop
and unrolled: LeNet became 34,365 ops with no loop and took minutes to compile.
"""

from __future__ import annotations

import numpy as np
import pytest

import aotkit
from tests.helpers import assert_matches
from tests.programs.loop_networks import NETWORKS


@pytest.mark.parametrize("name", list(NETWORKS))
def test_a_network_written_as_loops_rolls_and_equals_numpy(name):
    fn, make, loops = NETWORKS[name]
    args = make(np.random.default_rng(0))
    lowered = aotkit.jit(fn).lower(*args)
    text = lowered.as_text()
    assert text.count("stablehlo.while") == loops, name
    assert text.count("stablehlo.") < 1000, name  # unrolled, LeNet was 34,365
    got = lowered.compile()(*args)
    assert_matches(got, fn(*args), name, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize(
    "start, stop, extent",
    [
        (lambda i: i * 2, lambda i: (i + 1) * 2, 2),
        (lambda i: i * 3 + 1, lambda i: 3 * (i + 1) + 2, 4),
        (lambda i: 2 * i - 1, lambda i: 2 * i + 3, 4),
        (lambda i: (i + 3) - 3, lambda i: i - (-5), 5),
        (lambda i: i * 2, lambda i: i * 3, None),  # not a constant extent
        (lambda i: i, lambda i: i * i + 1, None),
    ],
)
def test_windows_of_constant_extent_are_read_as_one_slice(start, stop, extent):
    """`(i + 1) * k` minus `i * k` is k: the window is one dynamic_slice in the loop."""

    def f(x):
        out = np.zeros(6)
        for i in range(6):
            out[i] = x[start(i) + 1 : stop(i) + 1].sum()
        return out

    x = np.arange(40.0)
    text = aotkit.jit(f).lower(x).as_text()
    assert "stablehlo.while" in text
    # A constant extent is one dynamic_slice; any other is read as a masked slice.
    assert ("stablehlo.dynamic_slice" in text) == (extent is not None)
    assert_matches(aotkit.jit(f)(x), f(x), "window")
