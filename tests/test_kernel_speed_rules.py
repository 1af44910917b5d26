"""Emission rules that keep NumPy kernels on XLA's fast paths (benchmarks/runtime.py).

- A write through traced scalar indices (`a[i, j] = v`, `a[i, 1:-1] += v`) is one
  `dynamic_update_slice`, not a `scatter` (XLA's CPU backend turns a scatter into a select
  over the whole array: a copy of the array per write, per loop iteration). A traced index
  out of range still drops the write, as the scatter did (JAX's mode="drop" is the oracle).
- A read through traced scalar indices and static slices (`a[i - 1, :-2]`) is one
  `dynamic_slice` of the box, not a `slice` of the whole array first.
- A JAX function (frontend="jax") called in x64 mode with a Python float (or a NumPy
  float64 scalar) and float64 NumPy arrays runs on jaxlib's cached C++ path, as under
  jax.jit, not on the checked call.

Oracles: NumPy for values and dtypes, JAX for out-of-range writes and JAX functions.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import aotkit
from aotkit import _native, api
from aotkit.backends import dispatch


def _same(got, expected) -> None:
    got = np.asarray(got)
    assert got.dtype == expected.dtype, (got.dtype, expected.dtype)
    np.testing.assert_array_equal(got, expected)


# --- writes through traced scalar indices ------------------------------------------------------


def set_element(a, i, j):
    a[i, j] = 7
    return a


def add_element(a, i, j):
    a[i, j] += 3
    return a


def set_row_part(a, i, j):
    a[i, 1:-1] = a[j, 2:] * 2
    return a


def multiply_row_part(a, i, j):
    a[i, 1:3] *= 2
    return a


WRITES = {
    "set_element": (set_element, lambda a, i, j: a.at[i, j].set(7, mode="drop")),
    "add_element": (add_element, lambda a, i, j: a.at[i, j].add(3, mode="drop")),
    "set_row_part": (set_row_part, lambda a, i, j: a.at[i, 1:-1].set(a[j, 2:] * 2, mode="drop")),
    "multiply_row_part": (
        multiply_row_part,
        lambda a, i, j: a.at[i, 1:3].multiply(2, mode="drop"),
    ),
}
DTYPES = [np.float32, np.float64, np.int32]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("name", list(WRITES))
@pytest.mark.parametrize("i, j", [(0, 0), (3, 2), (-1, -2), (-4, 1)])
def test_scalar_index_writes_equal_numpy_and_are_one_dynamic_update_slice(name, dtype, i, j):
    fn, _ = WRITES[name]
    a = np.arange(20).reshape(4, 5).astype(dtype)
    jitted = aotkit.jit(fn)
    text = jitted.lower(a, np.int32(i), np.int32(j)).as_text()
    assert "stablehlo.dynamic_update_slice" in text
    assert "stablehlo.scatter" not in text
    _same(jitted(a, np.int32(i), np.int32(j)), fn(a.copy(), i, j))


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("name", list(WRITES))
@pytest.mark.parametrize("i", [4, 9, -5, -100])
def test_scalar_index_writes_out_of_range_are_dropped_as_jax_drops_them(name, dtype, i):
    fn, oracle = WRITES[name]
    a = np.arange(20).reshape(4, 5).astype(dtype)
    got = aotkit.jit(fn)(a, np.int32(i), np.int32(1))
    with jax.enable_x64(True):  # float64 stays float64
        expected = np.asarray(jax.jit(oracle)(a, np.int32(i), np.int32(1)))
    _same(got, expected)
    _same(got, a)  # the array unchanged: a dropped write


def test_a_write_with_a_loop_index_in_range_has_no_guard():
    """A loop index over the axis is known in range: the write is the dynamic_update_slice
    alone (no read of the old element, no select)."""

    def f(x):
        out = np.zeros(6)
        for i in range(6):
            out[i] = x[i] * 2
        return out

    x = np.arange(6.0)
    text = aotkit.jit(f).lower(x).as_text()
    assert "stablehlo.dynamic_update_slice" in text
    assert "stablehlo.scatter" not in text
    assert text.count("stablehlo.dynamic_slice") == 1  # the read of x[i] only
    assert "stablehlo.and" not in text
    _same(aotkit.jit(f)(x), f(x))


def seidel_2d(A, tsteps):
    """PolyBench's seidel_2d as npbench writes it (benchmarks/runtime.py)."""
    A = A.copy()
    n = A.shape[0]
    for _ in range(tsteps - 1):
        for i in range(1, n - 1):
            A[i, 1:-1] += (
                A[i - 1, :-2]
                + A[i - 1, 1:-1]
                + A[i - 1, 2:]
                + A[i, 2:]
                + A[i + 1, :-2]
                + A[i + 1, 1:-1]
                + A[i + 1, 2:]
            )
            for j in range(1, n - 1):
                A[i, j] += A[i, j - 1]
                A[i, j] /= 9.0
    return A


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=lambda d: np.dtype(d).name)
def test_seidel_2d_equals_numpy_with_no_scatter_and_no_whole_array_slices(dtype):
    A = np.random.default_rng(0).uniform(0, 1, (12, 12)).astype(dtype)
    jitted = aotkit.jit(seidel_2d, static_argnums=1)
    lowered = jitted.lower(A, 4)
    text = lowered.as_text()
    assert "stablehlo.while" in text
    assert "stablehlo.scatter" not in text
    # Rows are read as boxes of the loop-carried matrix, never sliced whole first.
    assert "stablehlo.slice" not in text
    optimized = lowered.compile().as_text()
    assert "scatter(" not in optimized
    got = jitted(A, 4)
    expected = seidel_2d(A, 4)
    assert np.asarray(got).dtype == expected.dtype
    np.testing.assert_allclose(
        np.asarray(got), expected, rtol=1e-5 if dtype == np.float32 else 1e-12
    )


# --- reads through traced scalar indices and static slices --------------------------------------


@pytest.mark.parametrize(
    "index",
    [
        lambda i: (i, slice(None, -2)),
        lambda i: (i - 1, slice(1, 4)),
        lambda i: (slice(2, 5), i),
        lambda i: (i, 2),
    ],
    ids=["row_head", "row_middle", "column_part", "element"],
)
@pytest.mark.parametrize("i", [0, 2, -1, 7])
def test_scalar_index_reads_are_one_dynamic_slice_of_the_box(index, i):
    def f(a, i):
        return a[index(i)]

    a = np.arange(30, dtype=np.float32).reshape(5, 6)
    jitted = aotkit.jit(f)
    text = jitted.lower(a, np.int32(i)).as_text()
    assert text.count("stablehlo.dynamic_slice") == 1
    assert "stablehlo.slice " not in text
    # Traced reads clamp out-of-range indices (after wrapping negatives once), as JAX's do.
    _same(jitted(a, np.int32(i)), np.asarray(jax.jit(f)(a, np.int32(i))))
    if -5 <= i < 5:
        _same(jitted(a, np.int32(i)), f(a, i))


# --- a JAX function with a Python float and float64 NumPy arrays in x64 mode ------------------


def trmm_jax(alpha, A, B):
    """npbench's JAX trmm (benchmarks/runtime.py)."""

    def body_fun(carry, i):
        def inner_body_fun(B, j):
            A_slice = jnp.where(jnp.arange(A.shape[0]) > i, A[:, i], 0.0)
            B_slice = jnp.where(jnp.arange(B.shape[0]) > i, B[:, j], 0.0)
            return B.at[i, j].add(jnp.dot(A_slice, B_slice)), None

        return jax.lax.scan(inner_body_fun, carry, jnp.arange(B.shape[1]))[0], None

    B, _ = jax.lax.scan(body_fun, B, jnp.arange(B.shape[0]))
    return alpha * B


@pytest.fixture(params=["c", "python"])
def front(request, monkeypatch):
    if request.param == "c" and _native.Front is None:
        pytest.skip("aotkit._speedups is not built (no C compiler at install)")
    monkeypatch.setattr(dispatch, "_Front", _native.Front if request.param == "c" else None)
    return request.param


@pytest.mark.parametrize("alpha", [1.5, np.float64(1.5)], ids=["float", "numpy_float64"])
@pytest.mark.parametrize("shape", [(3, 4), (20, 30)], ids=["small", "in_place"])
def test_a_jax_function_with_a_python_float_and_float64_arrays_stays_on_the_cpp_path(
    front, shape, alpha, monkeypatch
):
    checked = []
    native_run = api.Jitted._native_run

    def counting(self, x64, args, kwargs):
        checked.append(x64)
        return native_run(self, x64, args, kwargs)

    monkeypatch.setattr(api.Jitted, "_native_run", counting)
    rng = np.random.default_rng(0)
    A, B = rng.uniform(0, 1, (shape[0], shape[0])), rng.uniform(0, 1, shape)
    with jax.enable_x64(True):
        jitted = aotkit.jit(trmm_jax, frontend="jax")
        expected = np.asarray(jax.jit(trmm_jax)(alpha, A, B))
        outs = [jitted(alpha, A, B) for _ in range(4)]
    assert expected.dtype == np.float64
    for out in outs:
        _same(out, expected)
    # The first call misses jaxlib's C++ cache (x64 mode's) and fills it; no later one misses.
    assert checked == [True]


@pytest.mark.parametrize("scalar", [1.5, 2, True])
def test_a_traced_function_with_a_python_scalar_and_float64_arrays_in_x64_mode(front, scalar):
    """aotkit's tracer takes Python scalars as weak 32-bit values: in x64 mode such a call
    misses the C++ cache every time (its transfer would make a 64-bit scalar) and runs the
    checked call, with NumPy's results."""

    def f(s, a, b):
        return a * s + b

    a, b = np.linspace(0, 1, 600), np.arange(600, dtype=np.int64)
    with jax.enable_x64(True):
        jitted = aotkit.jit(f)
        outs = [jitted(scalar, a, b) for _ in range(3)]
    for out in outs:
        _same(out, f(scalar, a, b))


# --- the transforms take the windows ------------------------------------------------------------


def scaled_rows(a, i):
    a = a * 1.0
    a[i, 1:3] *= a[i, 0]
    a[i, 0] = 3.0 * a[i, 4]
    return (a**2).sum()


def scaled_rows_jax(a, i):
    a = a.at[i, 1:3].multiply(a[i, 0], mode="drop")
    a = a.at[i, 0].set(3.0 * a[i, 4], mode="drop")
    return (a**2).sum()


@pytest.mark.parametrize("i", [1, -1, 7])
def test_grad_through_scalar_index_writes_equals_jax(i):
    a = np.arange(20.0, dtype=np.float32).reshape(4, 5) / 10
    got = aotkit.jit(aotkit.grad(scaled_rows))(a, np.int32(i))
    expected = np.asarray(jax.grad(scaled_rows_jax)(jnp.asarray(a), np.int32(i)))
    assert np.asarray(got).dtype == expected.dtype
    np.testing.assert_allclose(np.asarray(got), expected, rtol=1e-6)


def test_vmap_over_scalar_indices_of_writes_equals_jax():
    a = np.arange(20.0, dtype=np.float32).reshape(4, 5) / 10
    i = np.array([0, 1, -2, 9], np.int32)
    got = aotkit.vmap(scaled_rows, in_axes=(None, 0))(a, i)
    expected = np.asarray(jax.vmap(scaled_rows_jax, in_axes=(None, 0))(jnp.asarray(a), i))
    assert np.asarray(got).dtype == expected.dtype
    np.testing.assert_allclose(np.asarray(got), expected, rtol=1e-6)


def _counting_checked_calls(monkeypatch) -> list:
    checked = []
    native_run = api.Jitted._native_run

    def counting(self, x64, args, kwargs):
        checked.append(x64)
        return native_run(self, x64, args, kwargs)

    monkeypatch.setattr(api.Jitted, "_native_run", counting)
    return checked


@pytest.mark.parametrize("scalar", [1.5, 3], ids=["float", "int"])
def test_a_jax_function_with_a_python_scalar_and_device_arrays_in_x64_mode_hits(
    front, scalar, monkeypatch
):
    """Its module takes the scalar as a weak 64-bit value (jax.jit's x64 mode): the call
    runs in x64 mode's C++ cache, learnt at the first call, as under jax.jit."""
    checked = _counting_checked_calls(monkeypatch)
    rng = np.random.default_rng(0)
    with jax.enable_x64(True):
        A, B = jax.device_put(rng.uniform(0, 1, (4, 4))), jax.device_put(rng.uniform(0, 1, (4, 5)))
        jitted = aotkit.jit(trmm_jax, frontend="jax")
        expected = np.asarray(jax.jit(trmm_jax)(scalar, A, B))
        outs = [jitted(scalar, A, B) for _ in range(4)]
    for out in outs:
        _same(out, expected)
    assert checked == [True]


@pytest.mark.parametrize("scalar", [1.5, 3], ids=["float", "int"])
def test_a_traced_function_with_a_python_scalar_and_device_arrays_in_x64_mode_hits(
    front, scalar, monkeypatch
):
    """aotkit's tracer takes the scalar as a weak 32-bit value: after the first call (which
    tries x64 mode's cache and learns it does not fit) the call runs with x64 off, cached."""
    checked = _counting_checked_calls(monkeypatch)

    def f(s, a):
        return a * s

    with jax.enable_x64(True):
        a = jax.device_put(np.linspace(0, 1, 6, dtype=np.float32))
        jitted = aotkit.jit(f)
        outs = [jitted(scalar, a) for _ in range(4)]
    for out in outs:
        _same(out, f(scalar, np.linspace(0, 1, 6, dtype=np.float32)))
    assert checked == [True, False]
