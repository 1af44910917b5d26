"""The seed transcript, in aotkit terms.

JAX's first ahead-of-time example was::

    f = lambda x: jnp.sqrt(x ** 2) + 1.
    f_exe = jax.jit(f).lower(1.).compile()  # a float32 program; optimized HLO shows a fusion
    f_exe(3.)     # DeviceArray(4., dtype=float32, weak_type=True)
    f_exe([3.])   # TypeError: function compiled for PyTreeDef(((*,), {})),
                  #            called with PyTreeDef((([*],), {})).

The tests below run those lines as they are, with `aotkit.numpy` for `jnp`.
"""

from __future__ import annotations

import re

import jax
import numpy as np
import pytest
from jaxlib.mlir import ir

import aotkit
import aotkit.numpy as anp
from aotkit import _context
from aotkit.api import jit

f = lambda x: anp.sqrt(x**2) + 1.0  # noqa: E731  (the seed's own line)


@pytest.fixture(scope="module")
def lowered():
    return jit(f).lower(1.0)


def test_a_python_float_lowers_to_a_float32_program(lowered):
    assert [str(s) for s in lowered.flat_in_specs] == ["f32[]"]
    assert [str(s) for s in lowered.flat_out_specs] == ["f32[]"]


def test_lowers_to_the_expected_stablehlo(lowered):
    text = lowered.as_text()
    assert text.startswith("module @lambda {")
    assert re.search(r"func\.func public @main\(%arg0: tensor<f32>\) -> \(?tensor<f32>", text), text
    assert re.search(r"stablehlo\.(multiply|power) %arg0", text), text
    assert "stablehlo.sqrt" in text
    assert re.search(r"stablehlo\.add .* : tensor<f32>", text), text
    assert re.search(r"return %\w+ : tensor<f32>", text), text
    with _context.LoweringContext():
        reparsed = ir.Module.parse(text)
        assert reparsed.operation.verify()


def test_compile_gives_optimized_hlo_with_a_fusion(lowered):
    hlo = lowered.compile().as_text()
    assert hlo.startswith("HloModule lambda")
    assert re.search(r"\bfusion\(", hlo), hlo
    assert "kind=kLoop" in hlo


def test_calling_with_a_python_float_returns_float32_four(lowered):
    f_exe = lowered.compile()
    out = f_exe(3.0)
    assert isinstance(out, jax.Array)
    assert out.dtype == np.float32
    assert out.shape == ()
    assert float(out) == 4.0
    assert repr(out) == "Array(4., dtype=float32)"


def test_calling_with_a_list_is_the_pytree_type_error(lowered):
    f_exe = lowered.compile()
    with pytest.raises(
        TypeError,
        match=re.escape(
            "function compiled for PyTreeDef(((*,), {})), called with PyTreeDef((([*],), {}))"
        )
        + r"; first difference at x: expected an array, got a list of 1",
    ):
        f_exe([3.0])


def test_jit_call_after_lower_compile_reuses_both():
    g = lambda x: anp.sqrt(x**2) + 1.0  # noqa: E731  (a fresh function: its own caches)
    f_exe = jit(g).lower(aotkit.spec("f32[]")).compile()
    assert float(jit(g)(np.float32(-3.0))) == float(f_exe(-3.0)) == 4.0
    info = jit(g).cache_info()
    assert (info.traces, info.compiles, info.hits) == (1, 1, 1)
