"""The select_and_scatter rewrite for XLA:TPU (aotkit/backends/tpu_windows.py).

The rewrite is plain StableHLO, so it runs on the CPU here: each module's rewritten copy is
compiled for the CPU and compared with a NumPy model of select_and_scatter (each window's
elements in row-major order, the select region keeping the element it holds or moving on), and
the original module's own CPU result checks that model where XLA's CPU kernel takes the window
(it takes no padding). That XLA:TPU then compiles what the rewrite gives is in
tests/backends/test_deviceless_tpu.py.
"""

from __future__ import annotations

import itertools
import operator

import hypothesis.strategies as st
import numpy as np
import pytest
from hypothesis import given, settings

import aotkit
from aotkit.backends import tpu_windows

_COMPARE = {"GE": operator.ge, "GT": operator.gt, "LE": operator.le, "LT": operator.lt}
_MLIR = {np.dtype(np.float32): "f32", np.dtype(np.float64): "f64", np.dtype(np.int32): "i32"}


def module(shape, source_shape, dims, strides, padding, direction, dtype, *, total=False):
    t = _MLIR[np.dtype(dtype)]
    tensor = "tensor<{}x" + t + ">"
    operand, source = (tensor.format("x".join(map(str, s))) for s in (shape, source_shape))
    pads = ", ".join(f"[{lo}, {hi}]" for lo, hi in padding)
    kind = "TOTALORDER" if total else ("FLOAT" if t.startswith("f") else "SIGNED")
    return f"""
func.func @main(%x: {operand}, %s: {source}, %init: tensor<{t}>) -> {operand} {{
  %r = "stablehlo.select_and_scatter"(%x, %s, %init) <{{
      window_dimensions = array<i64: {", ".join(map(str, dims))}>,
      window_strides = array<i64: {", ".join(map(str, strides))}>,
      padding = dense<[{pads}]> : tensor<{len(shape)}x2xi64>}}> ({{
    ^bb0(%a: tensor<{t}>, %b: tensor<{t}>):
      %c = stablehlo.compare {direction}, %a, %b, {kind} : (tensor<{t}>, tensor<{t}>) -> tensor<i1>
      stablehlo.return %c : tensor<i1>
  }}, {{
    ^bb0(%a: tensor<{t}>, %b: tensor<{t}>):
      %c = stablehlo.add %a, %b : tensor<{t}>
      stablehlo.return %c : tensor<{t}>
  }}) : ({operand}, {source}, tensor<{t}>) -> {operand}
  return %r : {operand}
}}
""".encode()


def windows_of(shape, dims, strides, padding):
    """The source shape: StableHLO's count of windows per dimension."""
    return tuple(
        (n + lo + hi - d) // s + 1
        for n, d, s, (lo, hi) in zip(shape, dims, strides, padding, strict=True)
    )


def reference(x, source, init, dims, strides, padding, direction):
    """select_and_scatter as the spec runs it: per window, its elements in row-major order; the
    select keeps the element it holds where `held <direction> next`, else moves on. Padding
    elements are never selected (a window of padding only drops its source element)."""
    keep = _COMPARE[direction]
    out = np.full(x.shape, init, dtype=np.result_type(x, source))
    for w in itertools.product(*(range(n) for n in source.shape)):
        held = None
        for offset in itertools.product(*(range(d) for d in dims)):
            at = tuple(
                i * s + o - lo for i, s, o, (lo, _) in zip(w, strides, offset, padding, strict=True)
            )
            if any(a < 0 or a >= n for a, n in zip(at, x.shape, strict=True)):
                continue
            if held is None or not keep(x[held], x[at]):
                held = at
        if held is not None:
            out[held] += source[w]
    return out


def run(text, x, source, init):
    lowered = aotkit.load_module(text)
    rewritten = tpu_windows.legalize(lowered.compiler_ir())
    got = aotkit.load_module(str(rewritten).encode()).compile(backend="cpu")(x, source, init)
    return lowered, rewritten, np.asarray(got)


def inputs(rng, shape, source_shape, dtype, levels):
    # Few distinct values, so that windows hold ties.
    x = rng.integers(-levels, levels + 1, shape).astype(dtype)
    source = rng.integers(1, 9, source_shape).astype(dtype)
    return x, source, np.asarray(3, dtype)


CASES = {
    # (shape, window, strides, padding): what reverse mode writes for windows XLA:TPU lacks
    "cummax, one axis": ((7,), (7,), (1,), ((6, 0),)),
    "pool over a matrix": ((6, 8), (2, 3), (2, 3), ((0, 0), (0, 0))),
    "overlapping windows": ((5, 6), (3, 2), (1, 2), ((0, 0), (0, 0))),
    "explicit padding": ((5, 6), (2, 3), (1, 2), ((1, 0), (1, 1))),
    "one inactive dimension": ((3, 4, 5), (1, 2, 2), (1, 1, 2), ((0, 0), (0, 1), (1, 0))),
    "a window of padding only": ((3,), (2,), (2,), ((2, 2),)),
}


@pytest.mark.parametrize("direction", ["GE", "GT", "LE", "LT"])
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.float64])
@pytest.mark.parametrize("case", list(CASES))
def test_rewrite_gives_select_and_scatter_values(case, dtype, direction):
    shape, dims, strides, padding = CASES[case]
    source_shape = windows_of(shape, dims, strides, padding)
    x, source, init = inputs(np.random.default_rng(len(case)), shape, source_shape, dtype, 2)
    text = module(shape, source_shape, dims, strides, padding, direction, dtype)
    lowered, rewritten, got = run(text, x, source, init)
    assert "select_and_scatter" not in str(rewritten)
    want = reference(x, source, init, dims, strides, padding, direction)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
    if all(p == (0, 0) for p in padding):
        # The model is XLA's where XLA's CPU kernel takes the window.
        np.testing.assert_array_equal(
            np.asarray(lowered.compile(backend="cpu")(x, source, init)), want
        )


@settings(max_examples=60, deadline=None)  # each example compiles a module
@given(
    data=st.data(),
    rank=st.integers(1, 3),
    direction=st.sampled_from(["GE", "GT", "LE", "LT"]),
    dtype=st.sampled_from([np.float32, np.int32]),
)
def test_rewrite_against_the_model_for_any_window(data, rank, direction, dtype):
    shape = tuple(data.draw(st.lists(st.integers(1, 5), min_size=rank, max_size=rank)))
    dims = tuple(data.draw(st.integers(1, n + 2)) for n in shape)
    strides = tuple(data.draw(st.integers(1, 3)) for _ in shape)
    padding = tuple((data.draw(st.integers(0, 2)), data.draw(st.integers(0, 2))) for _ in shape)
    source_shape = windows_of(shape, dims, strides, padding)
    if min(source_shape) < 1:
        return  # no window fits
    seed = data.draw(st.integers(0, 2**16))
    x, source, init = inputs(np.random.default_rng(seed), shape, source_shape, dtype, 1)
    text = module(shape, source_shape, dims, strides, padding, direction, dtype)
    _, _, got = run(text, x, source, init)
    np.testing.assert_array_equal(
        got, reference(x, source, init, dims, strides, padding, direction)
    )


def test_nan_is_the_selected_value():
    """NaN compares false, so a select_and_scatter's choice among NaNs depends on the order
    it visits a window in; the rewrite orders NaN before every number (the element a window
    max propagates) for GE/GT, and likewise for LE/LT."""
    x = np.array([1.0, np.nan, 5.0, 2.0], np.float32)
    source = np.array([10.0], np.float32)
    for direction in ("GE", "LE"):
        text = module((4,), (1,), (4,), (1,), ((0, 0),), direction, np.float32)
        _, _, got = run(text, x, source, np.float32(0))
        np.testing.assert_array_equal(got, [0.0, 10.0, 0.0, 0.0])


def test_total_order_compares_signed_zeros():
    """A select region comparing in TOTALORDER (-0 < +0) is followed: the window's +0 wins."""
    x = np.array([-0.0, 0.0, -1.0], np.float32)
    source = np.array([4.0], np.float32)
    text = module((3,), (1,), (3,), (1,), ((0, 0),), "GE", np.float32, total=True)
    _, _, got = run(text, x, source, np.float32(0))
    np.testing.assert_array_equal(got, [0.0, 4.0, 0.0])
    plain = module((3,), (1,), (3,), (1,), ((0, 0),), "GE", np.float32)
    _, _, got = run(plain, x, source, np.float32(0))
    np.testing.assert_array_equal(got, [4.0, 0.0, 0.0])  # equal under FLOAT: the first


def test_windows_xla_tpu_takes_are_left_alone():
    """Two inactive dimensions (window 1, stride 1, no padding): XLA:TPU's own kernel, the
    module returned as it is."""
    shape, dims, strides, padding = (2, 6, 6, 3), (1, 2, 2, 1), (1, 2, 2, 1), ((0, 0),) * 4
    source_shape = windows_of(shape, dims, strides, padding)
    text = module(shape, source_shape, dims, strides, padding, "GE", np.float32)
    original = aotkit.load_module(text).compiler_ir()
    assert tpu_windows.legalize(original) is original


def test_64_bit_values_are_rewritten_in_any_window():
    """XLA:TPU's float64 emulation has no select_and_scatter: even its own windows go."""
    shape, dims, strides, padding = (2, 6, 6, 3), (1, 2, 2, 1), (1, 2, 2, 1), ((0, 0),) * 4
    source_shape = windows_of(shape, dims, strides, padding)
    text = module(shape, source_shape, dims, strides, padding, "GE", np.float64)
    x, source, init = inputs(np.random.default_rng(1), shape, source_shape, np.float64, 2)
    _, rewritten, got = run(text, x, source, init)
    assert "select_and_scatter" not in str(rewritten)
    np.testing.assert_array_equal(got, reference(x, source, init, dims, strides, padding, "GE"))


def test_the_callers_module_is_not_changed():
    shape, dims, strides, padding = CASES["pool over a matrix"]
    text = module(
        shape, windows_of(shape, dims, strides, padding), dims, strides, padding, "GE", np.float32
    )
    original = aotkit.load_module(text).compiler_ir()
    before = str(original)
    rewritten = tpu_windows.legalize(original)
    assert rewritten is not original
    assert str(original) == before
    assert "select_and_scatter" in before


def test_gradient_of_cummax_through_the_rewrite():
    """aotkit's gradient of a cumulative max, rewritten, against JAX's: equal where no
    values tie (JAX's cummax splits a tie's cotangent; a window max gives it to the first)."""
    import jax

    x = np.random.default_rng(3).permutation(24).astype(np.float32).reshape(8, 3)
    weights = np.arange(1, 25, dtype=np.float32).reshape(8, 3)

    def loss(x):
        return (np.maximum.accumulate(x, axis=0) * weights).sum()

    lowered = aotkit.jit(aotkit.grad(loss)).lower(x)
    assert "select_and_scatter" in lowered.as_text()
    rewritten = tpu_windows.legalize(lowered.compiler_ir())
    got = aotkit.load_module(str(rewritten).encode()).compile(backend="cpu")(x)
    want = jax.grad(lambda x: (jax.lax.cummax(x, axis=0) * weights).sum())(x)
    assert np.asarray(got).dtype == np.float32
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
