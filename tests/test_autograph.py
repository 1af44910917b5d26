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
from tests.helpers import assert_matches
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
    acc = 0
    for i in range(n_outer):
        for j in range(i):
            acc += i * j
    return acc


LOOPS = [
    # (function, args, statics, stablehlo.while count, stablehlo.if count)
    (running_sum, (X,), (), 1, 0),
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
    (sum_until, (X,), (), 1, 4),
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
    return a, b, c, d, e, f, g


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
