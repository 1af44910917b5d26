"""aotkit.autograph: Python loops and branches on traced values become StableHLO loops and
conditionals. Every program is also run by NumPy (the oracle: values and dtypes), and the
lowered module is checked for the loops and conditionals it should (or should not) hold.
"""

from __future__ import annotations

import functools
import inspect
import json
import re
import warnings

import numpy as np
import pytest
from jax import tree_util

import aotkit
from aotkit.autograph import AutographWarning, _convert, do_not_convert
from tests.helpers import assert_matches, module_from_source
from tests.programs.kernels import KERNELS

F32, F64, I32 = np.float32, np.float64, np.int32
X = np.array([1.5, -2.0, 3.0, 0.5, 4.5, -1.0, 2.0, 6.0, -3.5, 1.0], np.float32)


# --- helpers --------------------------------------------------------------------------------------


def count_ops(lowered, name: str | None = None) -> int:
    """Ops in the module (all but constants), or only those called `name`."""
    n = 0

    def walk(op):
        nonlocal n
        for region in op.regions:
            for block in region.blocks:
                for inner in block.operations:
                    op_name = inner.operation.name
                    if name is None and op_name != "stablehlo.constant" or op_name == name:
                        n += 1
                    walk(inner)

    walk(lowered.module.operation)
    return n


def whiles(lowered) -> int:
    return count_ops(lowered, "stablehlo.while")


def ifs(lowered) -> int:
    return count_ops(lowered, "stablehlo.if")


def copies(args):
    return [a.copy() if isinstance(a, np.ndarray) else a for a in args]


def run(fn, *args, static=(), autograph=True):
    """(lowered, NumPy outputs) of `fn` traced with aotkit and run on the CPU backend."""
    jitted = aotkit.jit(fn, static_argnums=static, autograph=autograph)
    lowered = jitted.lower(*args)
    out = lowered.compile()(*[a for i, a in enumerate(args) if i not in static])
    return lowered, out


def check(fn, *args, static=(), **kw):
    """Runs `fn` traced and on NumPy and compares every output (value and dtype)."""
    lowered, got = run(fn, *copies(args), static=static, **kw)
    want = fn(*copies(args))
    got_t = got if isinstance(got, tuple | list) else (got,)
    want_t = want if isinstance(want, tuple | list) else (want,)
    assert len(got_t) == len(want_t)
    for i, (g, w) in enumerate(zip(got_t, want_t, strict=True)):
        assert_matches(np.asarray(g), np.asarray(w), label=f"output {i}")
    return lowered


def at(fn, snippet: str) -> str:
    """`file:line` of the first line of `fn`'s source containing `snippet`."""
    lines, first = inspect.getsourcelines(fn)
    for k, line in enumerate(lines):
        if snippet in line:
            return f"{inspect.getsourcefile(fn)}:{first + k}"
    raise AssertionError(f"{snippet!r} not in {fn.__name__}")


@pytest.fixture(autouse=True)
def _no_silent_fallbacks():
    # A test that expects a fallback says so with pytest.warns; any other is a failure.
    with warnings.catch_warnings():
        warnings.simplefilter("error", AutographWarning)
        yield


# --- the kernels of tests/programs ----------------------------------------------------------------

# Two sizes per kernel whose constants do not collide with other constants of the kernel.
SIZES = {name: (7, 13) for name in KERNELS}
STATIC = {"gauss_seidel": (2,), "mandelbrot": (2,)}


@pytest.mark.parametrize("size", [0, 1], ids=["small", "large"])
@pytest.mark.parametrize("name", list(KERNELS))
def test_kernel_matches_numpy(name, size):
    fn, make = KERNELS[name]
    args = make(SIZES[name][size], np.random.default_rng(size))
    lowered = check(fn, *args, static=STATIC.get(name, ()))
    assert whiles(lowered) >= 1


@pytest.mark.parametrize("name", list(KERNELS))
def test_kernel_op_count_does_not_grow_with_the_trip_count(name):
    fn, make = KERNELS[name]
    jitted = aotkit.jit(fn, static_argnums=STATIC.get(name, ()))
    small, large = (jitted.lower(*make(n, np.random.default_rng(0))) for n in SIZES[name])
    assert count_ops(small) == count_ops(large)
    assert count_ops(small) < 150


@pytest.mark.parametrize("name", ["forward_substitution", "cholesky", "gauss_seidel"])
def test_without_autograph_the_kernels_unroll(name):
    fn, make = KERNELS[name]
    counts = [
        count_ops(
            aotkit.jit(fn, static_argnums=STATIC.get(name, ()), autograph=False).lower(
                *make(n, np.random.default_rng(0))
            )
        )
        for n in (4, 6)
    ]
    assert counts[1] > counts[0] > 40


@pytest.mark.parametrize("a", range(4))
@pytest.mark.parametrize("b", range(4))
def test_base_pairing_rule(a, b):
    from tests.programs.kernels import can_pair

    check(can_pair, np.int32(a), np.int32(b))


@pytest.mark.parametrize("dtype", [F32, F64])
def test_kernels_keep_float32(dtype):
    fn, make = KERNELS["lu_decompose"]
    (a,) = make(9, np.random.default_rng(2))
    check(fn, a.astype(dtype))
    fn, make = KERNELS["cholesky"]
    (a,) = make(9, np.random.default_rng(2))
    check(fn, a.astype(dtype))


# --- loops ----------------------------------------------------------------------------------------


def running_sum(x):
    s = 0.0
    for i in range(10):
        s += x[i]
    return s


def counter(x):
    c = 0
    for i in range(10):
        if x[i] > 0:
            c += 1
    return c


def first_big(x):
    s = np.float32(0)
    for i in range(10):
        if x[i] > 4:
            break
        s = s + x[i]
    return s


def skip_negatives(x):
    s = np.float32(0)
    for i in range(10):
        if x[i] < 0:
            continue
        s = s + x[i]
    return s


def for_else(x, limit):
    s = np.float32(0)
    for i in range(10):
        if x[i] > limit:
            break
        s += x[i]
    else:
        s = s * 2
    return s


def index_after_break(x):
    for i in range(10):
        if x[i] > 3:
            break
    return i


def back_substitution(U, b):
    n = U.shape[0]
    x = np.zeros_like(b)
    for i in range(n - 1, -1, -1):
        s = b[i]
        for j in range(i + 1, n):
            s -= U[i, j] * x[j]
        x[i] = s / U[i, i]
    return x


def strided(x, start, stop, step):
    s = np.float32(0)
    for i in range(start, stop, step):
        s = s * 0.5 + x[i]
    return s


def rows_of(m):
    s = np.zeros(m.shape[1], m.dtype)
    for r in m:
        s = s + r * r
    return s


def aliased(x):
    y = x
    for i in range(10):
        x[i] = x[i] * 2
    return y


def bump(a, i):
    a[i] += 1


def callee_writes(x):
    t = np.float32(0)
    for i in range(10):
        bump(x, i)
        t = t + x[i]
    return x, t


def zero_diagonal_of(m):
    for i in range(m.shape[0]):
        m[i, i] = 0


def caller_sees_callee_writes(m):
    zero_diagonal_of(m)  # its loop writes into the caller's array, as in NumPy
    return m


def while_skip(x):
    i = x.argmin() * 0  # a traced 0: the while is a loop from the start
    s = np.float32(0)
    while i < 10:
        i += 1
        if x[i - 1] < 0:
            continue
        s = s + x[i - 1]
    return s, i


def newton_sqrt(a):
    r = a
    err = np.inf
    while err > 1e-6:
        r2 = 0.5 * (r + a / r)
        err = abs(r2 - r)
        r = r2
    return r


def sum_until(x):
    i = 0
    total = np.float32(0)
    while i < 10:
        if total > 5:
            break
        total = total + x[i]
        i += 1
    return total, i


def find_first(x, t):
    for i in range(10):
        if x[i] > t:
            return i
    return -1


def find_pair(x):
    for i in range(10):
        for j in range(10):
            if x[i] + x[j] > 10:
                return x[i] * x[j]
    return x[0]


def grow_until(x):
    s = x[0]
    while s < 100:
        s = s * 2 + 1
        if s > 50:
            return s - 1000
    return s


def returns_a_pair(x):
    for i in range(10):
        if x[i] > 2:
            return i, x[i]
    return -1, x[0]


def returns_from_else(x):
    for i in range(10):
        if x[i] < 4:
            pass
        else:
            return x[i]
    return x[0] * 0


def traced_bound_return(x, n):
    for i in range(n):
        if x[i] > 2:
            return x[i]
    return x[0]


def fills_numpy_buffer(x):
    # `out` is a NumPy array, which cannot hold traced values: unrolled, `out[i] = ...` is
    # an error; converted, out is carried through the loop as a traced array.
    out = np.eye(10, dtype=np.float32)[0]
    for i in range(10):
        out[i] = out[i] + x[i] * 2
    return out


def reversed_back_substitution(U, b):
    n = U.shape[0]
    x = np.zeros_like(b)
    for i in reversed(range(n)):
        s = b[i]
        for j in reversed(range(i + 1, n)):
            s -= U[i, j] * x[j]
        x[i] = s / U[i, i]
    return x


def reversed_strided(x, start, stop):
    s = np.float32(0)
    for i in reversed(range(start, stop, 2)):
        s = s * 0.5 + x[i]
    return s


def row_updates(m):
    for i in range(1, m.shape[0]):
        m[i, :] += m[i - 1, :] * 0.5
        m[i, 0] -= 1
    return m


def rows_until(m):
    total = m[0] * 0
    for r in m:  # 3 rows: unrolled until the traced break, then a loop
        if r.sum() > 5:
            break
        total = total + r
    return total


def short_loop_with_break(x):
    s = np.float32(0)
    for i in range(3):  # unrolled until the traced break, then a loop
        if x[i] < 0:
            break
        s = s + x[i]
    return s


def python_while(x):
    i = 0
    s = np.float32(0)
    while i < 6:  # a Python condition: unrolled, as written
        s = s + x[i]
        i += 1
    return s


def small_loop(x):
    for i in range(3):
        x[i] = x[i] * 2
    return x


def python_if_in_loop(x, mode):
    s = np.float32(0)
    for i in range(10):
        if mode == "square":
            s = s + x[i] * x[i]
        else:
            s = s + x[i]
    return s


def empty_range(x, n):
    s = x[0]
    for i in range(3, n):
        s = s + x[i]
    return s


def nested_dependent(n_outer):
    acc = np.int64(0)  # a Python int would warn: a traced bound gives no bound on its growth
    for i in range(n_outer):
        for j in range(i):
            acc += i * j
    return acc


def mixed_conditions(x):
    """Dynamic programming that mixes conditions on the index and on the data."""
    acc = np.zeros(x.shape[0])
    for i in range(x.shape[0]):
        if i % 2 == 0:
            if x[i] > 2:
                acc[i] = x[i]
            else:
                acc[i] = -x[i]
        else:
            acc[i] = acc[i - 1] * 2
    return acc


LOOPS = [
    # (function, args, statics, stablehlo.while count, stablehlo.if count)
    (running_sum, (X,), (), 1, 0),
    (mixed_conditions, (X,), (), 1, 2),
    (counter, (X,), (), 1, 1),
    (first_big, (X,), (), 1, 2),
    (skip_negatives, (X,), (), 1, 2),
    (for_else, (X, np.float32(4)), (), 1, 3),
    (for_else, (X, np.float32(100)), (), 1, 3),
    (index_after_break, (X,), (), 1, 2),
    (back_substitution, (np.triu(np.full((6, 6), 0.5)) + np.eye(6), np.arange(6.0)), (), 2, 0),
    (strided, (X, 1, 10, 2), (), 1, 0),
    (strided, (X, 9, 0, -2), (), 1, 0),
    (strided, (X, np.int64(9), np.int64(0), np.int64(-3)), (), 1, 0),
    (strided, (X, np.int64(2), np.int64(9), np.int64(3)), (), 1, 0),
    (rows_of, (X[:8].reshape(8, 1) * np.ones((1, 3), np.float32),), (), 1, 0),
    (aliased, (X,), (), 1, 0),
    (callee_writes, (X,), (), 1, 0),
    (newton_sqrt, (np.float32(2.0),), (), 1, 0),
    (caller_sees_callee_writes, (np.arange(36, dtype=np.float32).reshape(6, 6),), (), 1, 0),
    (while_skip, (X,), (), 1, 2),
    (sum_until, (X,), (), 1, 4),
    (find_first, (X, np.float32(4)), (), 1, 2),
    (find_first, (X, np.float32(100)), (), 1, 2),
    (find_pair, (X,), (), 2, 3),
    (grow_until, (X + 4,), (), 1, 2),
    (grow_until, (X * 0 + 200,), (), 1, 2),
    (returns_from_else, (X,), (), 1, 2),
    (returns_a_pair, (X,), (), 1, 2),
    (returns_a_pair, (-X * 0,), (), 1, 2),
    (traced_bound_return, (X, np.int64(4)), (), 1, 2),
    (traced_bound_return, (X, np.int64(2)), (), 1, 2),
    (fills_numpy_buffer, (X,), (), 1, 0),
    (
        reversed_back_substitution,
        (np.triu(np.full((6, 6), 0.5)) + np.eye(6), np.arange(6.0)),
        (),
        2,
        0,
    ),
    (reversed_strided, (X, np.int64(1), np.int64(9)), (), 1, 0),
    (reversed_strided, (X, np.int64(2), np.int64(9)), (), 1, 0),
    (reversed_strided, (X, np.int64(5), np.int64(5)), (), 1, 0),
    (reversed_strided, (X, 1, 10), (), 1, 0),
    (row_updates, (np.arange(24, dtype=np.float32).reshape(6, 4),), (), 1, 0),
    (rows_until, (np.arange(12, dtype=np.float32).reshape(3, 4) / 4,), (), 1, 4),
    (short_loop_with_break, (X,), (), 1, 4),
    (short_loop_with_break, (-X,), (), 1, 4),
    (python_while, (X,), (), 0, 0),
    (small_loop, (X,), (), 0, 0),
    (python_if_in_loop, (X, "square"), (1,), 1, 0),
    (empty_range, (X, np.int64(2)), (), 1, 0),
    (nested_dependent, (np.int64(9),), (), 2, 0),
]


@pytest.mark.parametrize(
    "fn, args, static, n_while, n_if",
    LOOPS,
    ids=[f"{c[0].__name__}-{k}" for k, c in enumerate(LOOPS)],
)
def test_loops_match_numpy(fn, args, static, n_while, n_if):
    lowered = check(fn, *args, static=static)
    assert (whiles(lowered), ifs(lowered)) == (n_while, n_if)


def test_lambdas_that_bind_the_index_early_do_not_block_the_loop():
    def f(x):
        s = x[0]
        for i in range(10):
            s = s + (lambda k=i: x[k])()  # k is the lambda's own parameter
        return s

    assert whiles(check(f, X)) == 1


def test_static_loop_stays_python_up_to_the_unroll_limit():
    def f(x, n):
        for _ in range(n):
            x = x * 2 + 1
        return x

    x = np.float32(1)
    limit = aotkit.autograph.UNROLL_LIMIT
    assert whiles(aotkit.jit(f, static_argnums=1).lower(x, limit)) == 0
    assert whiles(aotkit.jit(f, static_argnums=1).lower(x, limit + 1)) == 1


def test_loop_of_python_values_stays_python():
    def f(x):
        scale = 1
        for _ in range(20):
            scale = scale * 2
        return x * scale  # a Python int: x keeps its dtype (NEP 50)

    lowered = check(f, X)
    assert whiles(lowered) == 0


def test_in_place_updates_reach_every_name_of_the_array():
    def f(x):
        y = x  # another name for the same array
        z = x.copy()
        for i in range(6):
            x[i] = i
        if x.sum() > 0:
            z[0] = 100
        return y, z

    lowered = check(f, X)
    assert (whiles(lowered), ifs(lowered)) == (1, 1)


# --- branches and expressions ---------------------------------------------------------------------


def piecewise(x):
    if x.sum() > 0:
        y = x * 2
    elif x.sum() > -5:
        y = x - 1
    else:
        y = -x
    return y


def early_return(x):
    if x.sum() > 0:
        return x
    y = x * 2
    return y + 1


def nested_returns(x):
    if x[0] > 0:
        if x[1] > 0:
            return x[0] + x[1]
        return x[0]
    return x[1]


def in_place_branch(x):
    y = x.copy()
    if x.sum() > 0:
        y[0] = 100
        y[1] += 1
    return y


def branch_calls_mutator(x):
    y = x.copy()
    if x[0] > 0:
        bump(y, 1)  # writes into y through a call: y is copied into the branch
    return y


def python_scalar_in_branch(x):
    # A Python number a traced branch assigns becomes an array of NumPy's default dtype
    # for its kind (int64 here, as np.asarray(k) would be).
    k = 1
    if x[0] > 0:
        k = 3
    return k


def boolean_operators(x):
    a = x[0] > 0 and x[1] > 0
    b = x[0] > 0 or x[1] > 0
    c = not x[2] > 0
    d = 0 < x[3] < 5
    e = x[4] if x[5] > 0 else -x[4]
    f = x[0] > 0 and True
    g = x[0] and x[1]  # not booleans: `a and b` is `b if a else a`
    h = x[0] > 0 and x[1] < 0 and x[2] > 2  # every operand counts once one is traced
    k = x[1] > 0 or x[0] < 0 or x[2] > 2
    return a, b, c, d, e, f, g, h, k


def python_boolean_operators(x, flag):
    # Python values keep Python's short circuit: x[100] would raise if evaluated.
    if flag or x[100] > 0:
        x = x + 1
    y = x if flag else x[100]
    return y, (flag and 1 < 2 < 3), (not flag)


BRANCHES = [
    (piecewise, (X,), (), 2),
    (piecewise, (-X,), (), 2),
    (piecewise, (X * 0 - 10,), (), 2),
    (early_return, (X,), (), 1),
    (early_return, (-X,), (), 1),
    (nested_returns, (X,), (), 2),
    (nested_returns, (np.array([1.0, -1.0], np.float32),), (), 2),
    (in_place_branch, (X,), (), 1),
    (branch_calls_mutator, (X,), (), 1),
    (branch_calls_mutator, (-X,), (), 1),
    (python_scalar_in_branch, (X,), (), 1),
    (boolean_operators, (X,), (), 1),
    (python_boolean_operators, (X, True), (1,), 0),
]


@pytest.mark.parametrize(
    "fn, args, static, n_if", BRANCHES, ids=[f"{c[0].__name__}-{k}" for k, c in enumerate(BRANCHES)]
)
def test_branches_match_numpy(fn, args, static, n_if):
    lowered = check(fn, *args, static=static)
    assert ifs(lowered) == n_if


def test_branches_must_agree_on_types():
    def f(x):
        if x[0] > 0:
            y = x * 2
        else:
            y = x[:3]
        return y

    with pytest.raises(TypeError, match=re.escape("returns f32[10] for output[0]['y'] but")):
        aotkit.lower(f, X)


# --- calls ----------------------------------------------------------------------------------------


def helper(v, k):
    if v > 0:
        return v * k
    return -v


def calls_helper(x):
    out = np.zeros_like(x)
    for i in range(10):
        out[i] = helper(x[i], 2.0)
    return out


class Scaler:
    def __init__(self, k):
        self.k = k

    def total(self, x):
        s = x[0]
        for i in range(10):
            s = s + self.k * x[i]
        return s

    def __call__(self, x):
        return self.total(x)


def scaled_total(x, k):
    s = x[0]
    for i in range(10):
        s = s + k * x[i]
    return s


@do_not_convert
def kept_as_written(x):
    s = x[0]
    for i in range(10):
        s = s + x[i]
    return s


def calls_kept(x):
    return kept_as_written(x)


CALLS = [
    (calls_helper, 1),
    (Scaler(2.0), 1),
    (Scaler(2.0).total, 1),
    (functools.partial(scaled_total, k=2.0), 1),
    (lambda x: scaled_total(x, 3.0), 1),
    (kept_as_written, 0),
    (calls_kept, 0),
]


@pytest.mark.parametrize("fn, n_while", CALLS, ids=[str(k) for k in range(len(CALLS))])
def test_functions_called_from_user_code_are_converted(fn, n_while):
    lowered = check(fn, X)
    assert whiles(lowered) == n_while


@pytest.mark.parametrize(
    "fn",
    [np.linalg.norm, json.dumps, aotkit.numpy.sum, tree_util.tree_map],
    ids=["numpy", "stdlib", "aotkit", "site-packages"],
)
def test_library_code_runs_as_written(fn):
    assert _convert.converted(fn) is fn


def test_lambdas_given_to_library_code_keep_their_calls_converted():
    # tree_map (library code) calls the lambda; the lambda is part of the converted f, so
    # the running_sum it calls is converted too.
    def f(x):
        return tree_util.tree_map(lambda v: running_sum(v), {"a": x})["a"]

    lowered = check(f, X)
    assert whiles(lowered) == 1


def test_function_without_source_runs_as_written():
    namespace = {"np": np}
    exec("def f(x):\n    for i in range(10):\n        x = x * 2\n    return x\n", namespace)
    lowered = check(namespace["f"], X)
    assert whiles(lowered) == 0


def test_generators_run_as_written():
    def rows(x):
        for i in range(3):
            yield x[i]

    def f(x):
        return sum(rows(x))

    check(f, X)


def test_autograph_false_leaves_control_flow_to_python():
    with pytest.raises(TypeError, match=re.escape("bool() of a traced bool[] array")):
        aotkit.lower(piecewise, X, autograph=False)
    assert whiles(aotkit.lower(running_sum, X, autograph=False)) == 0


def test_autograph_is_part_of_the_jit_cache_key():
    converted = aotkit.jit(running_sum)
    unrolled = aotkit.jit(running_sum, autograph=False)
    assert whiles(converted.lower(X)) == 1
    assert whiles(unrolled.lower(X)) == 0
    np.testing.assert_allclose(converted(X), unrolled(X), rtol=1e-6)
    assert converted.cache_info().lowerings == 2


def test_jit_refuses_a_non_boolean_autograph():
    with pytest.raises(
        TypeError, match=re.escape("jit(running_sum): autograph must be True or False, got 'no'")
    ):
        aotkit.jit(running_sum, autograph="no")


def test_do_not_convert_refuses_what_it_cannot_mark():
    with pytest.raises(
        TypeError,
        match=re.escape("do_not_convert: cannot mark 3 (int); mark a Python function or method"),
    ):
        do_not_convert(3)


def test_convert_refuses_non_callables():
    with pytest.raises(
        TypeError, match=re.escape("autograph.convert: expected a function, got str")
    ):
        aotkit.autograph.convert("f")


def test_converted_function_outside_a_trace_computes_the_same():
    f = aotkit.autograph.convert(first_big)
    assert f(X) == first_big(X)


# --- fallbacks: unrolled loops with a warning -----------------------------------------------------


def appends_rows(x):
    rows = []
    acc = x[0]
    for i in range(10):
        acc = acc + x[i]
        rows.append(acc)
    return np.stack(rows)


def prefix_lengths(x):
    out = np.zeros_like(x)
    for i in range(10):
        out[i] = len(x[: i + 1])  # (x[: i + 1].sum() converts: tests/test_prefix_loops.py)
    return out


def guarded(x):
    s = x[0]
    for i in range(10):
        try:
            s = s + x[i]
        except IndexError:
            pass
    return s


LOG = []


def logs_globally(x):
    global LOG
    s = x[0]
    for i in range(10):
        s = s + x[i]
        LOG = [s]
    return s


def grows(x):
    y = x[:1]
    for _ in range(6):
        y = np.concatenate([y, y])
    return y


def widens(x):
    s = np.int32(0)
    for i in range(10):
        s = s + x[i]
    return s


def carries_a_list(x):
    acc = [x[0]]
    for i in range(10):
        acc = acc + [x[i]]
    return acc[-1]


def carries_a_string(x):
    label = ""
    s = x[0]
    for i in range(10):
        s = s + x[i]
        label = label + "."
    return s, len(label)


def assigns_attribute(x):
    box = Scaler(0.0)
    for i in range(10):
        box.k = box.k + x[i]
    return box.k


def item_of_a_list(x):
    parts = [x[0], x[1]]
    for i in range(10):
        parts[0] = parts[0] + x[i]
    return parts[0]


def defined_in_loop(x):
    for i in range(10):
        last = x[i] * 2
        x = x + last
    return last


def rebinds_after_update(x):
    for i in range(10):
        x[i] = 0
        x = x * 2
    return x


def closes_over_index(x):
    fns = []
    acc = x[0]
    for i in range(10):
        acc = acc + x[i]
        fns.append(lambda: i)  # noqa: B023  (late binding is the point)
    return acc + fns[0]()


FALLBACKS = [
    (appends_rows, "rows = []", "for i", "it calls rows.append() on a list"),
    (
        prefix_lengths,
        "out = ",
        "for i",
        "tracing its body as one loop failed with IndexError: len (at {i + 1}): the slice at "
        "{i + 1} has a traced bound, so its length is known only when the program runs",
    ),
    (guarded, "s = x[0]", "for i", "it contains a try statement"),
    (logs_globally, "s = x[0]", "for i", "it assigns the global or nonlocal variable 'LOG'"),
    (
        grows,
        "y = x[:1]",
        "for _",
        "tracing its body as one loop failed with TypeError: fori_loop (at {for _}): body_fn "
        "returns f32[2] for carry['y'], whose init is f32[1]",
    ),
    (
        widens,
        "s = np.int32",
        "for i",
        "tracing its body as one loop failed with TypeError: fori_loop (at {for i}): body_fn "
        "returns f64[] for carry['s'], whose init is i32[]",
    ),
    (
        carries_a_list,
        "acc = [",
        "for i",
        "tracing its body as one loop failed with TypeError: fori_loop (at {for i}): body_fn "
        "must return the carry's pytree PyTreeDef({{'acc': [*]}}), got "
        "PyTreeDef({{'acc': [*, *]}})",
    ),
    (
        carries_a_string,
        "label = ",
        "for i",
        "'label' holds a str, and a loop can only carry arrays and numbers from one iteration to "
        "the next",
    ),
    (assigns_attribute, "box = ", "for i", "it assigns the attribute box.k"),
    (item_of_a_list, "parts = ", "for i", "it assigns items of 'parts', a list"),
    (
        defined_in_loop,
        "for i",
        "for i",
        "'last' is assigned in the loop and read after it (or in the next iteration) but has "
        "no value before the loop; give it one before the loop",
    ),
    (
        rebinds_after_update,
        "for i",
        "for i",
        "the loop body updates 'x' in place and also assigns it a new array",
    ),
    (
        closes_over_index,
        "acc = x[0]",
        "for i",
        "a function defined in it reads 'i', which it assigns (a closure sees later assignments)",
    ),
]


@pytest.mark.parametrize("fn, _, loop, reason", FALLBACKS, ids=[c[0].__name__ for c in FALLBACKS])
def test_loops_that_cannot_convert_unroll_with_a_warning(fn, _, loop, reason):
    site = at(fn, loop)
    sites = re.findall(r"(?<!\{)\{([^{}]+)\}(?!\})", reason)
    n = 6 if fn is grows else 10
    message = (
        f"for loop (at {site}): unrolled into {n} copies of its body instead of one StableHLO "
        f"loop because {reason.format(**{s: at(fn, s) for s in sites})}"
    )
    with pytest.warns(AutographWarning, match=re.escape(message)) as record:
        lowered = check(fn, X)
    assert whiles(lowered) == 0
    assert record[0].filename == site.rsplit(":", 1)[0]
    assert record[0].lineno == int(site.rsplit(":", 1)[1])
    assert str(record[0].message).endswith(
        "; keep the loop state in arrays and numbers to get a loop, or mark the function "
        "with aotkit.autograph.do_not_convert to silence this"
    )


def test_a_fallback_warns_once_per_trace():
    def f(x):
        s = x[0]
        for _ in range(3):  # unrolled: the inner loop is traced three times
            for i in range(10):
                s = s + x[i]
                LOG.append(i)
        return s

    with pytest.warns(AutographWarning) as record:
        check(f, X)
    assert len(record) == 1


# --- errors: traced conditions and bounds that cannot convert -------------------------------------


def traced_bound_with_list(x, n):
    rows = []
    for i in range(n):
        rows.append(x[i])
    return x


def traced_if_appends(x):
    log = []
    if x[0] > 0:
        log.append(1)
    return x


def one_branch_defines(x):
    if x[0] > 0:
        y = x * 2
    return y


def other_branch_defines(x):
    if x[0] > 0:
        pass
    else:
        y = x * 2
    return y


def branch_assigns_string(x):
    label = None
    if x[0] > 0:
        label = "positive"
    return x, label


def branch_replaces_none(x):
    y = None
    if x[0] > 0:
        y = x
    return y


def vector_condition(x):
    if x > 0:
        x = x * 2
    return x


def raises_in_branch(x):
    if x[0] > 0:
        raise ValueError("positive")
    return x


def returns_on_some_paths(x):
    if x[0] > 0:
        if x[1] > 0:
            return x
        x = x * 2
    return x + 1


def while_carries_string(x):
    trail = ""
    while x.sum() > 0:
        trail = trail + "."
        x = x - 1
    return x, trail


def while_side_effect(x):
    log = []
    while x.sum() > 0:
        x = x - 1
        log.append(1)
    return x


def float_bound(x):
    s = x[0]
    for _ in range(x[1]):
        s = s + 1
    return s


def break_in_list_loop(x):
    s = x[0]
    for v in [x[1], x[2], x[3]]:
        if v > 2:
            break
        s = s + v
    return s


def break_needs_value(x):
    s = x[0]
    for i in range(3):
        t = "stopped"
        if x[i] > 2:
            break
        s = s + x[i]
    return s, t


ERRORS = [
    (
        traced_bound_with_list,
        (X, np.int64(3)),
        TypeError,
        "for loop (at {for i}): range() has a traced bound, so the loop must become a StableHLO "
        "loop, but it calls rows.append() on a list",
    ),
    (
        traced_if_appends,
        (X,),
        TypeError,
        "if (at {if x}): the condition is a traced bool[] array, so both branches are traced "
        "into one aotkit.cond, but it calls log.append() on a list; compute values with "
        "np.where(cond, a, b), or move the side effect out of the branch",
    ),
    (
        one_branch_defines,
        (X,),
        TypeError,
        "if (at {if x}): the condition is traced, and 'y' is assigned in the true branch only but "
        "read after the if; assign it in both branches (or before the if)",
    ),
    (
        other_branch_defines,
        (X,),
        TypeError,
        "if (at {if x}): the condition is traced, and 'y' is assigned in the false branch only "
        "but read after the if; assign it in both branches (or before the if)",
    ),
    (
        branch_assigns_string,
        (X,),
        TypeError,
        "if (at {if x}): the condition is traced, but the true branch assigns 'label' a str; a "
        "traced if can only assign arrays and numbers",
    ),
    (
        branch_replaces_none,
        (X,),
        TypeError,
        "if (at {if x}): the condition is traced, and 'y' is a NoneType before the if but an "
        "array after one branch; a traced if can only assign arrays and numbers",
    ),
    (
        vector_condition,
        (X,),
        ValueError,
        "if (at {if x}): the truth value of a traced bool[10] array with more than one element "
        "is ambiguous; use .any() or .all()",
    ),
    (
        raises_in_branch,
        (X,),
        TypeError,
        "if (at {if x}): the condition is a traced bool[] array, so the if must become StableHLO "
        "control flow, but a branch raises an exception; compute values with np.where(cond, a, "
        "b), or move the statement out of the traced branch",
    ),
    (
        returns_on_some_paths,
        (X,),
        TypeError,
        "if (at {if x}): the condition is a traced bool[] array, so the if must become "
        "StableHLO control flow, but a branch returns on some paths only",
    ),
    (
        while_carries_string,
        (X,),
        TypeError,
        "while loop (at {while x}): the condition is traced, so the loop must become a StableHLO "
        "while loop, but 'trail' holds a str, and a loop can only carry arrays and numbers",
    ),
    (
        while_side_effect,
        (X,),
        TypeError,
        "while loop (at {while x}): the condition is traced, so the loop must become a StableHLO "
        "while loop, but it calls log.append() on a list",
    ),
    (
        float_bound,
        (X,),
        TypeError,
        "range (at {for _}): stop is a traced f32[] array, which cannot be interpreted as an "
        "integer; pass an integer scalar (x.astype(int)) or a Python int",
    ),
    (
        break_in_list_loop,
        (X,),
        TypeError,
        "for loop (at {for v}): a traced condition breaks out of a loop over a list; loop over "
        "range(...) or a traced array so the loop can become a while loop that stops on it",
    ),
    (
        break_needs_value,
        (X,),
        TypeError,
        "for loop (at {for i}): a traced condition breaks out of the loop, so the rest of the "
        "loop must become a StableHLO loop, but 't' holds a str",
    ),
]


@pytest.mark.parametrize("fn, args, kind, message", ERRORS, ids=[c[0].__name__ for c in ERRORS])
def test_statements_that_must_convert_but_cannot_raise(fn, args, kind, message):
    sites = re.findall(r"\{([^}]*)\}", message)
    text = message.format(**{s: at(fn, s) for s in sites})
    with pytest.raises(kind, match=re.escape(text)):
        aotkit.lower(fn, *args)


def test_range_step_zero_is_python_error():
    def f(x, step):
        for _ in range(0, 5, step):
            x = x + 1
        return x

    with pytest.raises(ValueError, match=re.escape("range() arg 3 must not be zero")):
        aotkit.jit(f, static_argnums=1).lower(X, 0)


def test_rewrite_failures_warn_and_run_as_written(monkeypatch):
    def f(x):
        s = x[0]
        for i in range(10):
            s = s + x[i]
        return s

    def broken(self, node, visible):
        raise RuntimeError("unsupported node")

    monkeypatch.setattr(aotkit.autograph._transform.Converter, "function", broken)
    site = at(f, "def f")
    message = (
        f"autograph (at {site}): could not convert {f.__qualname__} (RuntimeError: unsupported "
        "node); it runs as written, with Python control flow unrolled"
    )
    with pytest.warns(AutographWarning, match=re.escape(message)):
        lowered = check(f, X)
    assert whiles(lowered) == 0


# --- locations ------------------------------------------------------------------------------------


def located(x):
    s = x[0]
    for i in range(10):
        t = x[i] * 2
        if t > 3:
            s = s + t
    return s


def op_lines(lowered) -> dict[str, set[int]]:
    """The source lines of each kind of op, from the ops' locations."""
    out: dict[str, set[int]] = {}

    def walk(op):
        for region in op.regions:
            for block in region.blocks:
                for inner in block.operations:
                    found = re.search(r":(\d+):\d+\)$", str(inner.location))
                    if found:
                        out.setdefault(inner.operation.name, set()).add(int(found.group(1)))
                    walk(inner)

    walk(lowered.module.operation)
    return out


def test_ops_keep_the_user_lines():
    lines = op_lines(aotkit.lower(located, X, pipeline="none"))

    def line(snippet):
        return int(at(located, snippet).rsplit(":", 1)[1])

    assert lines["stablehlo.while"] == {line("for i")}
    assert lines["stablehlo.if"] == {line("if t > 3")}
    assert lines["stablehlo.multiply"] == {line("t = x[i] * 2")}
    assert line("s = s + t") in lines["stablehlo.add"]


def test_errors_in_converted_code_name_the_user_line():
    def f(x):
        s = x[0]
        for _ in range(10):
            s = s + np.ones(2) @ x  # a shape error in the loop body
        return s

    site = at(f, "np.ones(2) @ x")
    with pytest.raises(ValueError, match=re.escape(f"(at {site})")) as info:
        with pytest.warns(AutographWarning):
            aotkit.lower(f, X)
    frames = [fr for fr in info.traceback if str(fr.path) == __file__]
    assert frames[-1].lineno + 1 == int(site.rsplit(":", 1)[1])


# --- scopes and introspection ---------------------------------------------------------------------


BIAS = np.float32(1)


def test_closures_defaults_and_nested_functions_are_kept():
    scale = np.float32(3)

    def f(x, k=2.0, *, bias=BIAS):
        def inner(v):
            t = v[0]
            for i in range(10):
                t = t + v[i] * scale
            return t

        return inner(x) * k + bias

    lowered = check(f, X)
    assert whiles(lowered) == 1

    def g(x):  # `scale` is read only inside the loop: still a closure variable of g
        t = x[0]
        for i in range(10):
            t = t + x[i] * scale
        return t

    assert whiles(check(g, X)) == 1


class Private:
    def __init__(self):
        self.__k = np.float32(2)

    def total(self, x):
        s = x[0]
        for i in range(10):
            s = s + self.__k * x[i]
        return s


class Base:
    def total(self, x):
        s = x[0]
        for i in range(10):
            s = s + x[i]
        return s


class Derived(Base):
    def total(self, x):
        return super().total(x) * 2


def test_methods_keep_private_names_and_super():
    assert whiles(check(Private().total, X)) == 1
    # Derived.total uses super(): it runs as written; Base.total, called from it, is
    # library-free user code but called through super(), so it runs as written too.
    assert whiles(check(Derived().total, X)) == 0
    assert aotkit.autograph.to_source(Derived.total) is None


def test_to_source_shows_the_rewrite():
    text = aotkit.autograph.to_source(first_big)
    assert "ag__.for_stmt(ag__.range_(range, 10), ag__for_body_0, ag__info[0])" in text
    assert "ag__.if_stmt(x[i] > 4," in text
    assert aotkit.autograph.to_source(np.linalg.norm) is None


def test_concurrent_traces_convert_once_and_agree():
    import threading

    results, errors = {}, []

    def work(k):
        try:
            results[k] = run(first_big, X * (k + 1))[1]
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for k in range(4):
        assert_matches(np.asarray(results[k]), np.asarray(first_big(X * (k + 1))))


def test_cli_lowers_with_autograph_unless_told_not_to(tmp_path, capsys):
    from aotkit import cli

    path = tmp_path / "prog.py"
    path.write_text("def f(x):\n    if x > 0:\n        return x\n    return -x\n")
    assert cli.main(["lower", f"{path}:f", "--shapes", "f32[]", "-q"]) == 0
    assert "stablehlo.if" in capsys.readouterr().out
    assert cli.main(["lower", f"{path}:f", "--shapes", "f32[]", "-q", "--no-autograph"]) == 1
    assert "bool() of a traced bool[] array" in capsys.readouterr().err


# --- Python's max and min on traced numbers ---------------------------------------------------


def max_of_two(t):
    return max(t[0], t[1])


def max_with_a_python_float(t):
    return max(1.0, t.max())


def min_of_three(t):
    return min(t[0], t[1], t[2])


def max_of_a_vector(t):
    return max(t)


def min_of_a_list(t):
    return min([t[0], t[1] * 2])


def max_of_empty_with_default(t):
    return max([], default=t[0])


def clipped_in_a_loop(t):
    out = 0.0
    for i in range(8):
        out = out + max(t[i % 3], 0.5) - min(t[i % 3], -0.5)
    return out


BUILTIN_EXTREMES = [
    max_of_two,
    max_with_a_python_float,
    min_of_three,
    max_of_a_vector,
    min_of_a_list,
    max_of_empty_with_default,
    clipped_in_a_loop,
]


@pytest.mark.parametrize("fn", BUILTIN_EXTREMES, ids=lambda f: f.__name__)
@pytest.mark.parametrize(
    "t",
    [
        np.array([3.0, -1.0, 2.0], np.float32),
        np.array([np.nan, 2.0, 1.0], np.float32),  # Python's comparisons decide NaN's fate
        np.array([2.0, 2.0, -0.0], np.float64),  # ties keep the first
        np.array([4, -7, 1], np.int32),
    ],
    ids=["f32", "nan", "ties", "i32"],
)
def test_builtin_max_and_min_of_traced_numbers_equal_python(fn, t):
    expected = fn(t)
    got = aotkit.jit(fn)(t)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(expected))
    # The items' promoted dtype (Python's result has the winner's type): NEP 50, so a
    # Python float keeps float32 and turns int32 into float64.
    floats = fn in (max_with_a_python_float, clipped_in_a_loop)
    assert np.asarray(got).dtype == (np.result_type(t.dtype, 1.0) if floats else t.dtype)


def test_builtin_max_with_a_key_runs_as_python():
    def by_key(t):
        return max([1, 2, 3], key=lambda i: -i) + t[0]

    out = aotkit.jit(by_key)(np.array([1.0], np.float32))
    assert np.asarray(out).tolist() == 2.0


def int_of_a_comparison(t, table):
    return table[0] + int(t[0] + t[1] == 3), int(t[1] > t[0])


def int_and_round_of_floats(t, table):
    return int(t[2]), round(t[2]), round(t[3]), table[1] + round(t[0])


def float_and_bool(t, table):
    return t[0] * float(t[4]), float(table[0]), bool(t[0]), bool(table[0] - 5)


def as_indices(t, table):
    x = t * 2.0
    return x[int(t[1])] + x[round(t[3])] + x[int(table[0] - 5)]


def in_a_loop(t, table):
    counts = np.zeros(3, np.int32)
    for i in range(3):
        counts[i] = counts[i - 1] + int(t[i] > 0) + round(t[i] * 0.0)
    return counts


BUILTIN_CONVERSIONS = [
    int_of_a_comparison,
    int_and_round_of_floats,
    float_and_bool,
    as_indices,
    in_a_loop,
]


@pytest.mark.parametrize("fn", BUILTIN_CONVERSIONS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_builtin_int_float_bool_and_round_of_traced_numbers_are_numpys(fn, dtype):
    """On a traced 0-d value they return what they return for the NumPy scalar it is when
    NumPy runs the code: a Python number, which is weakly typed (int64 or float64 alone)."""
    t = np.array([1.0, 2.0, -2.5, 3.5, 0.1], dtype)
    table = np.array([5, 6], np.int32)
    got, want = aotkit.jit(fn)(t, table), fn(t, table)
    for g, w in zip(tree_util.tree_leaves(got), tree_util.tree_leaves(want), strict=True):
        g = np.asarray(g)
        assert g.dtype == np.asarray(w).dtype, (fn.__name__, g, w)
        np.testing.assert_array_equal(g, np.asarray(w))


def test_builtin_int_of_an_array_or_a_complex_keeps_pythons_error():
    def of_array(t):
        return int(t)

    def of_complex(t):
        return int(t[0])

    with pytest.raises(TypeError, match=r"^int\(\) of a traced f32\[2\] array"):
        aotkit.jit(of_array)(np.ones(2, np.float32))
    with pytest.raises(TypeError, match=r"^int\(\) of a traced c64\[\] array"):
        aotkit.jit(of_complex)(np.ones(2, np.complex64))


JUMPING_LOOPS = """
def stops_early(x):
    s = 0.0
    for i in range(5):
        s = s + np.sin(x[i]) * x[i]
        if s > 1.5:
            break
    return s

def skips(x):
    s = 0.0
    for i in range(5):
        if x[i] < 0.6:
            continue
        s = s + x[i] * x[i]
        if s > 2.0:
            break
    else:
        s = s - 1.0
    return s

def returns_early(x):
    for i in range(4):
        if x[i] > 2.0:
            return x[i] * x[0]
    return x.sum()
"""


@pytest.mark.parametrize("name", ["stops_early", "skips", "returns_early"])
def test_the_converter_keys_its_tables_by_node_not_by_id(tmp_path, monkeypatch, name):
    """The converter's tables of loops and statements (break and continue flags, liveness)
    were keyed by `id(node)`: a node the rewrite dropped freed its id for one it made, which
    then read the dropped node's entry (a gradient of a range loop with a traced `break` came
    out wrong in a few fresh processes in a hundred). With every id made equal, as the worst
    reuse would, the conversion is still NumPy's."""
    from aotkit.autograph import _analysis, _transform

    for module in (_analysis, _transform):
        monkeypatch.setattr(module, "id", lambda node: 0, raising=False)
    m, _ = module_from_source(tmp_path, JUMPING_LOOPS)
    fn = getattr(m, name)
    for scale in (0.1, 1.0, 3.0):
        x = np.array([0.5, 0.7, 0.9, 1.2, 0.3]) * scale
        assert_matches(aotkit.jit(fn)(x), np.asarray(fn(x)), f"{name} at {scale}")


MIXED_KEYS = """
def holds(x):
    d = {1: np.ones(2), "a": 3}
    loop = [d]
    loop.append(loop)
    if x[0] > 0:
        y = x * 2
    else:
        y = x
    return y + d[1]

def assigns(x):
    d = {1: x, "a": 3}
    if x[0] > 0:
        d = {1: x * 2, "a": 3}
    return d[1]

def carries(x):
    d = [{1: x, "a": 3}]
    while x[0] < 10:
        x = x * 2
        d = [{1: d[0][1] * 2, "a": 3}]
    return d[0][1]
"""


def test_a_dict_whose_keys_do_not_sort_beside_a_traced_block(tmp_path):
    """A local dict keyed by 1 and 'a' (and a list that holds itself) beside a traced if
    made the conversion fail inside JAX's tree_util ("Comparator raised exception while
    sorting pytree dictionary keys"); such a dict assigned or carried by the block is
    refused saying why."""
    m, path = module_from_source(tmp_path, MIXED_KEYS)
    x = np.array([1.0, 2.0])
    assert_matches(aotkit.jit(m.holds)(x), m.holds(x))
    line = path.read_text().splitlines().index("    if x[0] > 0:", 10) + 1
    with pytest.raises(TypeError) as e:
        aotkit.jit(m.assigns)(x)
    assert str(e.value) == (
        f"if (at {path}:{line}): the condition is traced, but the true branch assigns 'd' a "
        "dict whose keys do not sort (a pytree's keys are of one type); a traced if can only "
        "assign arrays and numbers"
    )
    line = path.read_text().splitlines().index("    while x[0] < 10:") + 1
    with pytest.raises(TypeError) as e:
        aotkit.jit(m.carries)(x)
    assert str(e.value) == (
        f"while loop (at {path}:{line}): the condition is traced, so the loop must become a "
        "StableHLO while loop, but 'd' holds a list holding a dict whose keys do not sort (a "
        "pytree's keys are of one type), and a loop can only carry arrays and numbers from "
        "one iteration to the next"
    )
