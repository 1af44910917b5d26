"""aotkit/symbolic/algebra.py: symbolic dimension expressions, constraints and their decisions, and
symbolic specs (`aotkit.spec`, `ShapeDtype`, `aotkit.symbolic_shape`, jax.export dims), with
every error word for word (issue 25)."""

from __future__ import annotations

import inspect
import pickle

import jax
import numpy as np
import pytest

import aotkit
from aotkit.symbolic import algebra
from aotkit.symbolic.algebra import SymbolicScope

HOW = (
    "add a constraint such as {} with aotkit.symbolic_shape(..., constraints=...), or make the "
    "dimension static"
)


def dims(text, *constraints):
    return aotkit.symbolic_shape(text, constraints=constraints)


# --- expressions ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "make, text",
    [
        (lambda b, t: b, "b"),
        (lambda b, t: 2 * t, "2*t"),
        (lambda b, t: b * t, "b*t"),
        (lambda b, t: t * b + 1, "b*t + 1"),
        (lambda b, t: b - 1, "b - 1"),
        (lambda b, t: 3 - b, "-b + 3"),
        (lambda b, t: t // 8, "floordiv(t, 8)"),
        (lambda b, t: t % 8, "mod(t, 8)"),
        (lambda b, t: (2 * t + 4) // 2, "t + 2"),
        (lambda b, t: (4 * t) % 2, "0"),
        (lambda b, t: algebra.dim_max(b, 0), "b"),
        (lambda b, t: algebra.dim_max(b, t), "max(b, t)"),
        (lambda b, t: algebra.dim_min(b, 1), "min(1, b)"),
        (lambda b, t: b * b, "b*b"),
        (lambda b, t: (b + t) - (t + b), "0"),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_expression_text(make, text):
    b, t = dims("b, t")
    assert str(make(b, t)) == text


def test_texts_parse_back_and_evaluate():
    b, t = dims("b, t")
    for d in (b * t + 1, t // 8 + b, algebra.dim_max(b, t) - 1, (t + 3) % 4):
        again = algebra.parse_dim(str(d))
        assert again == d and hash(again) == hash(d)
        assert d.evaluate({"b": 5, "t": 13}) == eval(  # the same value Python computes
            str(d).replace("floordiv", "fd").replace("mod", "md"),
            {"fd": lambda a, k: a // k, "md": lambda a, k: a % k, "max": max},
            {"b": 5, "t": 13},
        )


def test_symbols_cancel_to_ints():
    b, t = dims("b, t")
    assert (b + 2) - b == 2 and type((b + 2) - b) is int
    assert algebra.divide_exact(6 * b * t, 3 * b) == 2 * t
    assert algebra.divide_exact(b + 1, b) is None


def test_pickling_keeps_the_scope():
    (t,) = dims("t", "t % 8 == 0")
    back = pickle.loads(pickle.dumps(t // 8 * 8))
    assert back == t and back.scope == t.scope


# --- constraints and decisions -------------------------------------------------------------


def test_every_symbol_is_a_size():
    b, t = dims("b, t")
    assert b >= 0 and b + t >= 0 and not (b < 0)
    assert b <= algebra.MAX_SIZE


@pytest.mark.parametrize(
    "constraints, question, answer",
    [
        (("b >= 1",), lambda b, t: b >= 1, True),
        (("b >= 1",), lambda b, t: b == 0, False),
        (("b >= 1",), lambda b, t: b > 0, True),
        (("t <= 2048",), lambda b, t: t < 4096, True),
        (("t <= 2048",), lambda b, t: t > 2048, False),
        (("b >= t + 1",), lambda b, t: b > t, True),
        (("b >= t + 1",), lambda b, t: b >= 1, True),
        (("a + b <= 16",), lambda b, t: b <= 16, True),
        (("b == 2*t",), lambda b, t: b >= t, True),
        (("t % 8 == 0",), lambda b, t: t % 8 == 0, True),
        (("t % 8 == 0",), lambda b, t: (t + 3) % 8, 3),
        (("t % 8 == 0",), lambda b, t: t // 8 * 8 == t, True),
        (("t % 8 == 0",), lambda b, t: t // 4 * 4 == t, True),
    ],
)
def test_constraints_decide(constraints, question, answer):
    b, t = dims("b, t", *constraints)
    assert question(b, t) == answer


def test_equality_of_undecided_dimensions_is_false():
    # As in JAX: `==` runs in hashing and in comparisons of shape tuples, which cannot raise.
    b, t = dims("b, t")
    assert (b == 1) is False and (b != 1) is True and (b == t) is False
    assert (b, 3) != (t, 3) and {b: 1}[algebra.parse_dim("b")] == 1


@pytest.mark.parametrize(
    "question, shown, example",
    [
        (lambda b: b >= 4, "b >= 4", "b >= 4"),
        (lambda b: b > 4, "b > 4", "b >= 5"),
        (lambda b: b <= 4, "b <= 4", "b <= 4"),
        (lambda b: b < 4, "b < 4", "b <= 3"),
        (lambda b: 4 < b, "b > 4", "b >= 5"),
        (lambda b: bool(b), "b != 0", "b >= 1"),
        (lambda b: b - 1 >= 0, "b - 1 >= 0", "b - 1 >= 0"),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_undecided_comparisons_raise(question, shown, example):
    (b,) = dims("b")
    with pytest.raises(aotkit.InconclusiveDimensionError) as e:
        question(b)
    assert str(e.value).startswith(f"symbolic dimension comparison {shown} (at {__file__}:")
    assert str(e.value).endswith(
        "): the constraints (every symbol >= 0) do not decide it; " + HOW.format(example)
    )


def test_inconclusive_names_the_constraints():
    b, t = dims("b, t", "t <= 2048", "t % 8 == 0")
    with pytest.raises(aotkit.InconclusiveDimensionError) as e:
        b >= t  # noqa: B015
    assert str(e.value).endswith(
        "): the constraints (every symbol >= 0; t <= 2048; t % 8 == 0) do not decide it; "
        + HOW.format("b >= t")
    )


@pytest.mark.parametrize(
    "use, what",
    [
        (int, "int()"),
        (float, "float()"),
        (range, "using as a Python int (range(), an index, NumPy)"),
        (lambda b: [0, 1][b], "using as a Python int (range(), an index, NumPy)"),
        (lambda b: np.zeros((b, 2)), "using as a Python int (range(), an index, NumPy)"),
    ],
    ids=["int", "float", "range", "index", "numpy"],
)
def test_a_symbolic_dimension_is_not_a_number(use, what):
    (b,) = dims("b")
    with pytest.raises(aotkit.InconclusiveDimensionError) as e:
        use(b)
    assert str(e.value).startswith(f"{what} of the symbolic dimension b (at ")
    assert str(e.value).endswith(
        "): its value is known only when the program runs; use array operations on it "
        "(aotkit.numpy.arange, x.shape in reshapes and slices, aotkit.fori_loop for loops), "
        + HOW.format("b == 4")
    )


def test_true_division_is_refused():
    (b,) = dims("b")
    line = inspect.currentframe().f_lineno + 2
    with pytest.raises(TypeError) as e:
        b / 2  # noqa: B018
    assert str(e.value) == (
        f"symbolic dimension b (at {__file__}:{line}): true division (/) of "
        "a dimension is not an integer; use floor division (//)"
    )


# --- constraint errors ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "constraints, error, message",
    [
        (
            "b >= 1",
            TypeError,
            "symbolic constraints: expected a sequence of strings, got the string 'b >= 1'; "
            "write constraints=('b >= 1',)",
        ),
        (
            ("b",),
            ValueError,
            "symbolic constraint 'b': cannot parse 'b': a constraint compares two expressions "
            "with one of ==, !=, >=, <=, >, <; expected an integer expression over symbols "
            "such as 'b', '2*t + 1', 't // 8', 'mod(t, 8)'",
        ),
        (
            ("b >= 1 +",),
            ValueError,
            "symbolic constraint 'b >= 1 +': cannot parse 'b >= 1 +': it ends too early; "
            "expected an integer expression over symbols such as 'b', '2*t + 1', 't // 8', "
            "'mod(t, 8)'",
        ),
        (
            ("b >= 2", "b <= 1"),
            ValueError,
            "symbolic constraint 'b <= 1' leaves b no value (with b >= 0 and the other "
            "constraints); fix the constraints",
        ),
        (("3 >= 4",), ValueError, "symbolic constraint '3 >= 4' can never hold; remove it"),
        # Found by fuzzing artifact headers: each raised ZeroDivisionError or AttributeError.
        (("b % 0 == 0",), ValueError, "symbolic constraint 'b % 0 == 0' divides by zero"),
        (
            ("floordiv(b, 0) >= 0",),
            ValueError,
            "symbolic constraint 'floordiv(b, 0) >= 0' divides by zero",
        ),
        (
            ("1 - b >= 0", "-b == 2"),
            ValueError,
            "symbolic constraint '-b == 2' can never hold (b >= 0 is a whole number); remove it",
        ),
        (
            ("2*b == 3",),
            ValueError,
            "symbolic constraint '2*b == 3' can never hold (b >= 0 is a whole number); remove it",
        ),
        (
            ("a + b == 16",),
            ValueError,
            "symbolic constraint 'a + b == 16': the left side of an equality must be one term "
            "(a symbol, k*symbol, mod(e, k) or floordiv(e, k)); write e.g. 'b == 2*k' or "
            "'t % 8 == 0'",
        ),
        (
            ("b == 2*k", "b == 3*j"),
            ValueError,
            "symbolic constraint 'b == 3*j': b already has an equality; give each symbol at "
            "most one",
        ),
        (
            ("b == b + 1",),
            ValueError,
            "symbolic constraint 'b == b + 1': b appears on both sides; write it as a bound "
            "instead",
        ),
        (
            ("f(b) >= 1",),
            ValueError,
            "symbolic constraint 'f(b) >= 1': cannot parse 'f(b) >= 1': unknown function 'f' "
            "(known: floordiv, mod, max, min, non_negative); expected an integer expression "
            "over symbols such as 'b', '2*t + 1', 't // 8', 'mod(t, 8)'",
        ),
    ],
)
def test_bad_constraints(constraints, error, message):
    with pytest.raises(error) as e:
        SymbolicScope(constraints)
    assert str(e.value) == message


def test_dimensions_that_divide_by_zero_are_refused_as_text():
    with pytest.raises(ValueError) as e:
        SymbolicScope().dim("b // 0")
    assert str(e.value) == "symbolic dimension 'b // 0' divides by zero"
    with pytest.raises(ValueError, match=r"^spec: bad dimension 'mod\(b, 0\)' in "):
        aotkit.spec("f32[mod(b, 0)]")
    # A constraint that divides by zero at some sizes is broken there, not a crash.
    scope = SymbolicScope(("mod(b, 3 - c) == 0",))
    with pytest.raises(ValueError, match=r"break the constraint\(s\) mod\(b, 3 - c\) == 0"):
        scope.check({"b": 4, "c": 3})


def test_sizes_that_make_a_dimension_divide_by_zero_are_refused():
    from aotkit.symbolic.signatures import SymbolicSignature

    scope = SymbolicScope()
    x = aotkit.ShapeDtype((scope.dim("b"), 3), "float32")
    out = aotkit.ShapeDtype((scope.dim("floordiv(12, b - 2)"),), "float32")
    signature = SymbolicSignature.of((x,), (out,))
    signature.check_values({"b": 5}, "specialize")
    with pytest.raises(ValueError) as e:
        signature.check_values({"b": 2}, "specialize")
    assert str(e.value) == (
        "specialize: b = 2 makes dimension floordiv(12, b - 2) of f32[floordiv(12,b-2)] "
        "divide by zero; give sizes for which every dimension has a value"
    )


def test_check_lists_every_broken_constraint():
    scope = SymbolicScope(("b >= 1", "t % 8 == 0", "b == 2*k"))
    scope.check({"b": 4, "t": 16, "k": 2})
    with pytest.raises(ValueError) as e:
        scope.check({"b": 0, "t": 12, "k": 0})
    assert str(e.value) == (
        "symbolic shapes: the sizes b=0, k=0, t=12 break the constraint(s) b >= 1 (0 >= 1 is "
        "false); t % 8 == 0 (4 == 0 is false); pass arrays whose dimensions meet every "
        "constraint"
    )
    with pytest.raises(ValueError) as e:
        scope.check({"b": 2, "t": 8})
    assert str(e.value) == (
        "symbolic shapes: no value for k in constraint 'b == 2*k' (given: b=2, t=8); give "
        "every symbol a value"
    )


def test_evaluate_and_solve():
    scope = SymbolicScope(("b == 2*k",))
    b = scope.dim("b")
    assert str(b) == "2*k"
    assert scope.evaluate("b*t + 1", {"k": 3, "t": 2}) == 13
    assert algebra.solve([b, scope.dim("t"), 784], [6, 5, 784]) == {"k": 3, "t": 5}
    with pytest.raises(ValueError) as e:
        algebra.solve([b], [7])
    assert str(e.value) == (
        "symbolic shapes: dimension 2*k cannot be 7 (7 is not a multiple of 2); pass an array "
        "of a size the dimension can have"
    )
    with pytest.raises(ValueError) as e:
        algebra.solve([scope.dim("t"), scope.dim("t + 1")], [3, 5])
    assert str(e.value) == (
        "symbolic shapes: dimension t + 1 is 4 for t=3 but the size is 5; pass arrays whose "
        "dimensions agree"
    )


# --- specs -------------------------------------------------------------------------------------


def test_specs_print_and_compare():
    a = aotkit.spec("f32[b,784]")
    assert str(a) == "f32[b,784]" and repr(a) == "ShapeDtype(shape=(b, 784), dtype=float32)"
    assert a == aotkit.ShapeDtype(("b", 784), "float32") == aotkit.spec(str(a))
    assert hash(a) == hash(aotkit.ShapeDtype(("b", 784), np.float32))
    assert a != aotkit.spec("f32[k,784]") and a != aotkit.spec("f32[3,784]")
    assert str(aotkit.spec("i8[2*t + 1, floordiv(t, 8)]")) == "i8[2*t+1,floordiv(t,8)]"
    b, t, _ = dims("b, t, 512", "t <= 2048", "t % 8 == 0")
    s = aotkit.ShapeDtype((b, t, 512), "bfloat16")
    assert str(s) == "bf16[b,t,512]" and s.shape[1].scope.constraints == (
        "t <= 2048",
        "t % 8 == 0",
    )
    assert s != aotkit.ShapeDtype(("b", "t", 512), "bfloat16")  # other constraints


def test_jax_symbolic_dims_become_aotkit_dims():
    jb, jt = jax.export.symbolic_shape("b, 3*t", constraints=("b >= 2",))
    s = aotkit.ShapeDtype(jax.ShapeDtypeStruct((jb, jt, 4), np.float32).shape, np.float32)
    assert str(s) == "f32[b,3*t,4]"
    assert s.shape[0].scope.constraints == ("b >= 2",) and s.shape[0] >= 2


@pytest.mark.parametrize(
    "text, message",
    [
        ("f32[b,-1]", "spec: bad dimension '-1' in 'f32[b,-1]'"),
        ("f32[b,x(1)]", "spec: bad dimension 'x(1)' in 'f32[b,x(1)]'"),
        ("f32[b,2.5]", "spec: bad dimension '2.5' in 'f32[b,2.5]'"),
    ],
)
def test_bad_symbolic_specs(text, message):
    with pytest.raises(ValueError) as e:
        aotkit.spec(text)
    assert str(e.value).startswith(message + "; expected DTYPE[DIM,...]")
    assert str(e.value).endswith("(or symbolic dims such as f32[b,784])")


def test_bad_symbolic_shapes():
    with pytest.raises(ValueError) as e:
        aotkit.ShapeDtype(("b", "2 +"), "float32")
    assert str(e.value) == (
        "ShapeDtype: shape ('b', '2 +'): symbolic dimension: cannot parse '2 +': it ends too "
        "early; expected an integer expression over symbols such as 'b', '2*t + 1', 't // 8', "
        "'mod(t, 8)'"
    )
    with pytest.raises(ValueError) as e:
        aotkit.symbolic_shape("b, , 3")
    assert str(e.value) == (
        "symbolic_shape: empty dimension in 'b, , 3'; expected dimensions separated by "
        "commas, e.g. 'b, t, 512'"
    )
    with pytest.raises(ValueError) as e:
        aotkit.symbolic_shape("b", constraints=("b >= 1",), scope=SymbolicScope())
    assert str(e.value) == (
        "symbolic_shape: pass either constraints= (a new scope) or scope= (an existing "
        "one's constraints), not both"
    )


def test_dimensions_of_different_scopes_do_not_mix():
    (b,) = dims("b", "b >= 1")
    (t,) = dims("t")
    line = inspect.currentframe().f_lineno + 2
    with pytest.raises(ValueError) as e:
        b + t  # noqa: B018
    assert str(e.value) == (
        f"symbolic dimensions b and t (at {__file__}:{line}) come from "
        "scopes with different constraints (every symbol >= 0; b >= 1 and every symbol >= 0); "
        "declare them together, e.g. aotkit.symbolic_shape('b, t', constraints=...)"
    )
