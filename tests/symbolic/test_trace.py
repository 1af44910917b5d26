"""Tracing with symbolic specs (issue 25): the dynamic module and its signature, symbols read
from the arguments, scopes merged across arguments, and what needs static shapes."""

from __future__ import annotations

import numpy as np
import pytest

import aotkit
from aotkit.tracing import core
from tests.symbolic.helpers import check, spec


def mlp(x, w):
    return np.maximum(x @ w, 0)


def test_the_signature_shows_the_symbols():
    low = aotkit.jit(mlp).lower(aotkit.spec("f32[b,784]"), aotkit.ShapeDtype((784, 10), "float32"))
    assert repr(low) == "<Lowered mlp(x: f32[b,784], w: f32[784,10]) -> (out: f32[b,10])>"
    assert [str(s) for s in low.flat_out_specs] == ["f32[b,10]"]
    text = low.as_text()
    assert "%arg0: tensor<?x784xf32>" in text and "-> tensor<?x10xf32>" in text


def test_each_symbol_is_read_once_at_entry():
    low = aotkit.jit(lambda x, y: (x + 1.0) * (y + 2.0), pipeline="none").lower(
        aotkit.spec("f32[b,3]"), aotkit.spec("f32[b,3]")
    )
    text = low.as_text()
    assert text.count("stablehlo.get_dimension_size") == 1
    assert text.count("stablehlo.dynamic_broadcast_in_dim") == 2


def test_a_static_trace_has_no_dynamic_op():
    text = aotkit.jit(mlp, pipeline="none").lower(np.ones((2, 4), "f4"), np.ones((4, 3), "f4"))
    assert "dynamic" not in text.as_text() and "get_dimension_size" not in text.as_text()


def test_symbols_are_shared_by_name_and_scopes_merge():
    (b,) = aotkit.symbolic_shape("b", constraints=("b >= 1",))
    low = aotkit.jit(lambda x, y: x[0] + y[-1]).lower(
        aotkit.ShapeDtype((b, 3), "float32"), aotkit.spec("f32[b,3]")
    )
    assert low.flat_in_specs[1].shape[0].scope.constraints == ("b >= 1",)
    assert repr(low).endswith("-> (out: f32[3])>")


def test_a_symbol_solved_from_a_linear_dimension():
    check(lambda x: x.reshape(-1, 2), [spec("f32[2*k]")], symbol="k", sizes=(0, 1, 5))


def test_a_symbol_with_no_dimension_of_its_own():
    with pytest.raises(ValueError) as e:
        aotkit.jit(lambda x: x).lower(aotkit.spec("f32[b*t]"))
    assert str(e.value) == (
        "trace(lambda): symbol b is in no argument dimension on its own (b, or k*b plus other "
        "symbols), so its value cannot be read from the arguments' shapes; give b its own "
        "dimension in some argument"
    )


def test_lowered_compile_runs_each_size():
    compiled = aotkit.jit(mlp).lower(aotkit.spec("f32[b,4]"), aotkit.spec("f32[4,3]")).compile()
    w = np.ones((4, 3), np.float32)
    for n in (0, 1, 5):
        x = np.full((n, 4), 0.5, np.float32)
        np.testing.assert_array_equal(np.asarray(compiled(x, w)), np.maximum(x @ w, 0))


def test_transforms_inside_a_symbolic_trace_need_static_shapes():
    # A stage transform of the symbolic program works per shape
    # (tests/symbolic/test_symbolic_transforms.py); a transform inside its trace does not.
    with pytest.raises(NotImplementedError) as e:
        aotkit.jit(aotkit.grad(lambda x: (x * x).sum())).lower(aotkit.spec("f32[b]"))
    assert "has a dynamic shape; aotkit's transform rules run on static shapes: transform " in (
        str(e.value)
    )


def test_an_op_without_a_symbolic_lowering_says_so():
    def f(x):
        zero = core.full((), 0.0, np.dtype(np.float32))
        window = (x.shape[0],)
        return core.bind1(
            "reduce_window", x, zero, window=window, strides=(1,), base_dilation=(1,),
            window_dilation=(1,), padding=((0, 0),), monoid="add",
        )  # fmt: skip

    with pytest.raises(NotImplementedError) as e:
        aotkit.jit(f).lower(aotkit.spec("f32[b]"))
    assert str(e.value) == (
        f"reduce_window (at {__file__}:{f.__code__.co_firstlineno + 3}): aotkit cannot lower "
        "reduce_window of (f32[b], f32[]) with symbolic dimensions yet; make the dimension "
        "static"
    )


def test_a_dimension_from_outside_the_trace_is_refused():
    (b,) = aotkit.symbolic_shape("b")

    def f(x):
        return x + b

    line = f.__code__.co_firstlineno + 1
    with pytest.raises(TypeError) as e:
        aotkit.jit(f).lower(np.ones(3, np.float32))
    assert str(e.value) == (
        f"symbolic dimension b (at {__file__}:{line}) used in a trace whose arguments have no "
        "symbolic dimensions; a traced program's symbols come from its arguments' specs "
        "(aotkit.spec('f32[b,3]')): take the dimension from an argument's shape"
    )
    with pytest.raises(TypeError) as e:
        aotkit.jit(f).lower(aotkit.spec("f32[k]"))
    assert str(e.value) == (
        f"symbolic dimension b (at {__file__}:{line}) is not one of this trace's (symbols k; "
        "constraints: every symbol >= 0); take the dimension from an argument's shape"
    )


def test_jax_shape_dtype_structs_with_symbolic_dims():
    import jax

    b, t = jax.export.symbolic_shape("b, t", constraints=("t >= 1",))
    low = aotkit.jit(lambda x: x[:, 0]).lower(jax.ShapeDtypeStruct((b, t), np.float32))
    assert repr(low) == "<Lowered lambda(x: f32[b,t]) -> (out: f32[b])>"
    assert low.flat_in_specs[0].shape[1] >= 1
