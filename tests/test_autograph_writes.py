"""Writes into arrays a kernel makes with NumPy keep NumPy's meaning, or are refused.

Under autograph a NumPy array written with a traced value becomes a traced array. Both
branches of a traced `if` are traced whatever the condition, and a NumPy array has no
traced form that other bindings could share, so: a branch's write into a NumPy array makes
it traced first (the write then happens only when the branch runs), and a traced write into
a NumPy array that another binding holds (a caller's, an alias) is refused at the line.
A generator of small random programs (writes, ifs, loops, helper calls) checks the rule
against NumPy, since hand-picked cases missed both silent wrong values.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import aotkit
from tests.helpers import assert_matches, module_from_source


def _same_as_numpy(fn, *args):
    want = fn(*[np.array(a, copy=True) for a in args])
    assert_matches(aotkit.jit(fn)(*args), want, fn.__name__)


def test_a_write_under_a_false_traced_condition_does_not_happen(tmp_path):
    m, _ = module_from_source(
        tmp_path,
        """
        def g(t):
            out = np.zeros(2)
            if t[0] > 0:
                out[0] = 1.0
            return out
        """,
    )
    _same_as_numpy(m.g, np.array([-1.0, 0.0]))  # was [1, 0]
    _same_as_numpy(m.g, np.array([1.0, 0.0]))


def test_a_row_filter_writes_only_the_rows_it_selects(tmp_path):
    m, _ = module_from_source(
        tmp_path,
        """
        def rows(db, target):
            out = np.zeros(db.shape[0])
            for idx, line in enumerate(db):
                if (line > 0).all():
                    if target == 1:
                        out[idx] = 1
            return out
        """,
    )
    db = np.array([[1.0, 2.0], [-1.0, 3.0], [4.0, 5.0], [0.0, 1.0], [2.0, 2.0]])
    _same_as_numpy(m.rows, db, 1)


def test_a_callee_writing_into_the_callers_numpy_array_is_refused(tmp_path):
    m, path = module_from_source(
        tmp_path,
        """
        def fill(b, u):
            b[:] = 2 * u

        def f(u):
            b = np.zeros(3)
            fill(b, u)
            return u + b

        def f_traced(u):
            b = np.zeros_like(u)
            fill(b, u)
            return u + b
        """,
    )
    with pytest.raises(TypeError) as e:
        aotkit.jit(m.f)(np.ones(3))  # was [1, 1, 1], NumPy [3, 3, 3]
    assert str(e.value) == (
        f"item assignment (at {path}:4): a traced value is written into a NumPy array whose "
        "name is a parameter: the caller's binding holds the same array; NumPy would change "
        "the array every binding sees, but a NumPy array cannot hold a traced value, so the "
        "other binding would not see the write; create the array from a traced value where "
        "it is made (np.zeros_like(x), or aotkit.numpy.zeros(shape)), or return the array "
        "and use the result"
    )
    _same_as_numpy(m.f_traced, np.ones(3))  # what the message suggests works


def test_a_write_through_one_of_two_names_is_refused(tmp_path):
    m, path = module_from_source(
        tmp_path,
        """
        def h(x):
            y = np.zeros(3)
            z = y
            y[0] = x[0]
            return z

        def in_a_list(x):
            y = np.zeros(3)
            rows = [y]
            y[0] = x[0]
            return rows[0]

        def untraced_alias(x):
            y = np.zeros(3)
            z = y
            y[0] = 5.0
            return z + x
        """,
    )
    refused = rf"item assignment \(at {path}:6\): .* also bound by the assignment at {path}:5;"
    with pytest.raises(TypeError, match=refused):
        aotkit.jit(m.h)(np.ones(3))  # was [0, 0, 0], NumPy [1, 0, 0]
    with pytest.raises(
        TypeError, match=rf"{path}:12\): .* also bound by the assignment at {path}:11;"
    ):
        aotkit.jit(m.in_a_list)(np.ones(3))
    _same_as_numpy(m.untraced_alias, np.ones(3))  # NumPy writes stay NumPy's


def test_augmented_assignment_on_a_numpy_made_array_is_numpys(tmp_path):
    m, path = module_from_source(
        tmp_path,
        """
        def accumulate(x):
            acc = np.zeros(3)
            for row in range(x.shape[0]):
                acc += x[row]
            acc *= 0.5
            return acc

        def keeps_its_dtype(x):
            acc = np.zeros(3, np.float32)
            acc += x
            return acc

        def int_and_float(x):
            acc = np.zeros(3, np.int64)
            acc += x
            return acc

        def through_an_alias(x):
            a = np.zeros(3)
            b = a
            a += x
            return b
        """,
    )
    _same_as_numpy(m.accumulate, np.arange(12.0).reshape(4, 3))  # was "out= is a NumPy array"
    got = aotkit.jit(m.keeps_its_dtype)(np.arange(3.0))
    assert got.dtype == np.float32  # NumPy writes into acc's float32 array
    _same_as_numpy(m.keeps_its_dtype, np.arange(3.0))
    with pytest.raises(TypeError, match=r"cannot cast ufunc 'add' output from float64 to int64"):
        aotkit.jit(m.int_and_float)(np.arange(3.0))  # NumPy's UFuncTypeError too
    with pytest.raises(
        TypeError,
        match=rf"augmented assignment \(at {path}:23\): a traced value is written into a NumPy "
        rf"array whose name is also bound by the assignment at {path}:22;",
    ):
        aotkit.jit(m.through_an_alias)(np.ones(3))


def test_chained_writes_into_a_numpy_made_array_are_numpys(tmp_path):
    m, path = module_from_source(
        tmp_path,
        """
        def shift(x):
            c = np.zeros(3)
            c[:2] = c[1:] = x[:2]
            return c

        def covariance_like(x):
            m = x.shape[0]
            cov = np.zeros((m, m))
            for i in range(m):
                cov[i:m, i] = cov[i, i:m] = x[i:] * x[i]
            return cov

        def two_names(x):
            a = b = np.zeros(3)
            a[0] = x[0]
            return a, b

        def unpacked(x):
            y = np.zeros(3)
            a, b = y, y
            a[0] = x[0]
            return b
        """,
    )
    _same_as_numpy(m.shift, np.arange(1.0, 4.0))  # was "np.asarray() of a traced array"
    _same_as_numpy(m.covariance_like, np.arange(1.0, 5.0))
    # One array bound to two names: a write through one would not reach the other (NumPy's
    # would), so it is refused; both used to return zeros for `b` silently.
    with pytest.raises(
        TypeError, match=rf"{path}:17\): .* bound with another name by the assignment at {path}:16;"
    ):
        aotkit.jit(m.two_names)(np.ones(3))
    with pytest.raises(
        TypeError, match=rf"{path}:23\): .* also bound by the assignment at {path}:22;"
    ):
        aotkit.jit(m.unpacked)(np.ones(3))


# --- random programs --------------------------------------------------------------------------

N = 4  # the length of `out` and of the argument `t`


def _statement(draw, depth: int) -> list[str]:
    i, j = draw(st.integers(0, N - 1)), draw(st.integers(0, N - 1))
    c = draw(st.sampled_from(["0.5", "-1.0", "2.0"]))
    kinds = ["set_traced", "set_const", "add_traced", "iadd_traced", "scale", "chained"]
    if depth < 2:
        kinds += ["if", "if_else", "loop", "helper"]
    kind = draw(st.sampled_from(kinds))
    if kind == "set_traced":
        return [f"out[{i}] = t[{j}] * {c}"]
    if kind == "set_const":
        return [f"out[{i}] = {c}"]
    if kind == "add_traced":
        return [f"out[{i}] += t[{j}]"]
    if kind == "iadd_traced":
        return [f"out += t * {c}"]
    if kind == "scale":
        return [f"out *= {c}"]
    if kind == "chained":
        return [f"out[:{i}] = out[{N - i}:] = t[{j}:{j + i}].sum() + {c}"]
    if kind == "helper":
        return [f"out = put(out, {i}, t[{j}] + {c})"]
    body = [f"    {s}" for s in _block(draw, depth + 1)]
    if kind == "loop":
        k = draw(st.integers(0, 6))
        return [f"for k in range({k}):", *body, f"    out[k % {N}] += t[{j}]"]
    test = f"if t[{j}] > {c}:"
    if kind == "if":
        return [test, *body]
    other = [f"    {s}" for s in _block(draw, depth + 1)]
    return [test, *body, "else:", *other]


def _block(draw, depth: int) -> list[str]:
    lines: list[str] = []
    for _ in range(draw(st.integers(1, 3))):
        lines += _statement(draw, depth)
    return lines


@st.composite
def programs(draw):
    body = "\n".join(f"    {s}" for s in _block(draw, 0))
    values = draw(st.lists(st.sampled_from([-2.0, -0.5, 0.0, 1.0, 3.0]), min_size=N, max_size=N))
    return body, np.array(values)


@settings(max_examples=30, deadline=None)
@given(programs())
def test_random_programs_of_writes_match_numpy(tmp_path_factory, case):
    body, t = case
    source = (
        "def put(a, i, v):\n    a[i] = v\n    return a\n\n"
        f"def prog(t):\n    out = np.zeros({N})\n{body}\n    return out\n"
    )
    m, _ = module_from_source(tmp_path_factory.mktemp("prog"), source)
    want = m.prog(t.copy())
    try:
        got = aotkit.jit(m.prog)(t)
    except TypeError as e:  # a refusal must be the documented one, never a wrong value
        assert "a traced value is written into a NumPy array" in str(e), (source, e)
        return
    assert_matches(got, want, source)
