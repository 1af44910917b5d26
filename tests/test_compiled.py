"""`Compiled`: calling conventions (arrays, NEP 50 scalars, pytrees), the exact errors of a
wrong call, and the inspection views, on every backend of `tests.helpers.BACKENDS`."""

from __future__ import annotations

import jax
import ml_dtypes
import numpy as np
import pytest

import aotkit
import aotkit.numpy as anp
from aotkit import ShapeDtype, backends
from aotkit.backends import MemoryAnalysis
from aotkit.stages import Compiled
from tests import lane
from tests.helpers import BACKENDS, assert_matches


def compiled_identity(spec_text: str, backend: str = "cpu") -> Compiled:
    return aotkit.lower(lambda x: x, aotkit.spec(spec_text)).compile(backend)


# -- Python scalars fill 0-d slots of their kind or higher (NEP 50) ---------------------------

ACCEPTED_SCALARS = [
    ("f32[]", 3.0),
    ("f32[]", 3),
    ("f32[]", True),
    ("f64[]", 0.1),
    ("bf16[]", 1.5),
    ("f16[]", 2),
    ("i32[]", 3),
    ("i32[]", False),
    ("i8[]", -128),
    ("u8[]", 255),
    ("u64[]", 2**64 - 1),
    ("bool[]", True),
    ("c64[]", 1 + 2j),
    ("c128[]", 2.5),
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(("spec_text", "value"), ACCEPTED_SCALARS)
def test_python_scalar_fills_a_slot_of_its_kind_or_higher(backend, spec_text, value):
    spec = aotkit.spec(spec_text)
    out = np.asarray(compiled_identity(spec_text, backend)(value))
    assert out.dtype == spec.dtype
    assert out.shape == ()
    want = np.asarray(value).astype(spec.dtype)
    if backend == lane.NAME and spec.dtype == np.float64:
        # An accelerator may emulate float64 (a TPU: in pairs of float32), not carry it exactly.
        assert_matches(out, want, backend=backend)
    else:
        assert out == want


REFUSED_SCALARS = [
    ("f32[]", 1j, r"expected f32\[\], got Python complex 1j"),
    ("i32[]", 3.0, r"expected i32\[\], got Python float 3.0"),
    ("u8[]", 2.5, r"expected u8\[\], got Python float 2.5"),
    ("bool[]", 1, r"expected bool\[\], got Python int 1"),
    ("f32[3]", 3.0, r"expected f32\[3\], got Python float 3.0"),
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(("spec_text", "value", "message"), REFUSED_SCALARS)
def test_python_scalar_of_a_higher_kind_is_a_type_error(backend, spec_text, value, message):
    with pytest.raises(TypeError, match=rf"Compiled 'lambda': argument x {message}; "):
        compiled_identity(spec_text, backend)(value)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    ("spec_text", "value", "message"),
    [
        ("u8[]", 256, r"Python int 256, out of range for u8\[\]"),
        ("u8[]", -1, r"Python int -1, out of range for u8\[\]"),
        ("i32[]", 2**40, r"Python int 1099511627776, out of range for i32\[\]"),
    ],
)
def test_python_int_out_of_range_is_a_value_error(backend, spec_text, value, message):
    with pytest.raises(ValueError, match=rf"argument x is {message}; pass a value that fits"):
        compiled_identity(spec_text, backend)(value)


def test_float32_result_for_a_python_float_argument():
    f_exe = aotkit.lower(lambda x: anp.sqrt(x**2) + 1.0, aotkit.spec("f32[]")).compile()
    out = f_exe(3.0)
    assert isinstance(out, jax.Array)
    assert out.dtype == np.float32 and float(out) == 4.0


# -- arrays -----------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_numpy_arrays_of_every_supported_kind(backend):
    def f(a, b, c):
        return a + 1, ~b, c * 2

    args = (
        np.arange(6, dtype=np.int16).reshape(2, 3),
        np.array([True, False]),
        np.array([1.5, -2.0], ml_dtypes.bfloat16),
    )
    outs = aotkit.lower(f, *args).compile(backend)(*args)
    want = f(*args)
    for got, expected in zip(outs, want):
        got = np.asarray(got)
        assert got.dtype == expected.dtype
        np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize(
    ("given", "message"),
    [
        (np.ones(4, np.float32), r"expected f32\[3\], got f32\[4\]"),
        (np.ones(3, np.float64), r"expected f32\[3\], got f64\[3\]"),
        (np.ones((1, 3), np.float32), r"expected f32\[3\], got f32\[1,3\]"),
        (jax.numpy.ones(3, np.int32), r"expected f32\[3\], got i32\[3\]"),
        ("abc", r"expected f32\[3\], got a str"),
        (ShapeDtype((3,), np.float32), r"is the spec f32\[3\]; a compiled function runs on arrays"),
    ],
)
@pytest.mark.parametrize("backend", BACKENDS)
def test_wrong_shape_or_dtype_names_the_argument_and_both_specs(backend, given, message):
    compiled = compiled_identity("f32[3]", backend)
    with pytest.raises(TypeError, match=rf"Compiled 'lambda': argument x {message}") as e:
        compiled(given)
    assert e.value.__cause__ is None and e.value.__suppress_context__


def test_spec_error_path_inside_a_pytree():
    x = np.ones(3, np.float32)
    compiled = aotkit.lower(lambda p, *, scale: p["b"][1] * scale, {"a": x, "b": (x, x)}, scale=x)
    compiled = compiled.compile()
    bad = {"a": x, "b": (x, np.ones(4, np.float32))}
    with pytest.raises(TypeError, match=r"argument p\['b'\]\[1\] expected f32\[3\], got f32\[4\]"):
        compiled(bad, scale=x)
    with pytest.raises(TypeError, match=r"argument scale expected f32\[3\], got f64\[3\]"):
        compiled({"a": x, "b": (x, x)}, scale=np.ones(3))
    np.testing.assert_array_equal(np.asarray(compiled({"a": x, "b": (x, 2 * x)}, scale=x)), 2 * x)


# -- pytree mismatches ------------------------------------------------------------------------


def test_wrong_pytree_names_both_treedefs_and_the_first_difference():
    f_exe = compiled_identity("f32[]")
    with pytest.raises(
        TypeError,
        match=r"^Compiled 'lambda': function compiled for PyTreeDef\(\(\(\*,\), \{\}\)\), called "
        r"with PyTreeDef\(\(\(\[\*\],\), \{\}\)\); first difference at x: expected an "
        r"array, got a list of 1; call it with the structure it was compiled for: "
        r"lambda\(x: f32\[\]\) -> \(out: f32\[\]\)$",
    ):
        f_exe([3.0])


TREE_CASES = [
    ((1.0, 2.0), {}, r"at args: expected a tuple of 1, got a tuple of 2"),
    ((), {}, r"at args: expected a tuple of 1, got a tuple of 0"),
    ((None,), {}, r"at x: expected an array, got None"),
    (
        (1.0,),
        {"y": 2.0},
        r"at kwargs: expected a dict with keys \[\], got a dict with keys \['y'\]",
    ),
    (({"a": 1.0},), {}, r"at x: expected an array, got a dict with keys \['a'\]"),
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(("args", "kwargs", "message"), TREE_CASES)
def test_pytree_mismatch_cases(backend, args, kwargs, message):
    with pytest.raises(
        TypeError, match=rf"called with PyTreeDef\(.*\); first difference {message}"
    ):
        compiled_identity("f32[]", backend)(*args, **kwargs)


def test_nested_pytree_difference_path():
    x = np.ones(2, np.float32)
    compiled = aotkit.lower(lambda t: t["b"][0], {"a": x, "b": (x, [x, x])}).compile()
    with pytest.raises(
        TypeError,
        match=r"first difference at t\['b'\]\[1\]: expected a list of 2, got a list of 3",
    ):
        compiled({"a": x, "b": (x, [x, x, x])})
    with pytest.raises(
        TypeError,
        match=r"first difference at t: expected a dict with keys \['a', 'b'\], got a dict "
        r"with keys \['a', 'c'\]",
    ):
        compiled({"a": x, "c": (x, [x, x])})


# -- results ----------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_results_come_back_in_the_output_pytree(backend):
    def f(x, y):
        return {"sum": x + y, "parts": (x, None, [y * 2])}

    x, y = np.float32(1.5), np.arange(3, dtype=np.int32)
    out = aotkit.lower(f, x, y).compile(backend)(x, y)
    assert set(out) == {"sum", "parts"}
    assert out["parts"][1] is None
    np.testing.assert_array_equal(np.asarray(out["sum"]), x + y)
    assert np.asarray(out["sum"]).dtype == np.float64  # f32 + i32 -> f64, as NumPy
    np.testing.assert_array_equal(np.asarray(out["parts"][2][0]), y * 2)


@pytest.mark.parametrize("backend", BACKENDS)
def test_function_of_no_arguments(backend):
    compiled = aotkit.lower(lambda: anp.ones((2,), dtype="float32")).compile(backend)
    np.testing.assert_array_equal(np.asarray(compiled()), [1.0, 1.0])
    with pytest.raises(
        TypeError, match=r"first difference at args: expected a tuple of 0, got a tuple of 1"
    ):
        compiled(1.0)


@pytest.mark.parametrize("n", [2, 3, 5])
def test_positional_arguments_of_several_arities(n):
    args = [np.full(2, i, np.float32) for i in range(n)]
    compiled = aotkit.lower(lambda *xs: sum(xs[1:], xs[0]), *args).compile()
    np.testing.assert_array_equal(np.asarray(compiled(*args)), sum(args))
    bad = list(args)
    bad[-1] = np.ones(2, np.int8)
    with pytest.raises(
        TypeError, match=rf"argument args\[{n - 1}\] expected f32\[2\], got i8\[2\]"
    ):
        compiled(*bad)


def test_device_results_feed_back_in():
    compiled = aotkit.lower(lambda x: x * 2, aotkit.spec("i64[2]")).compile()
    x = np.array([1, 2])
    for _ in range(3):
        x = compiled(x)
    np.testing.assert_array_equal(np.asarray(x), [8, 16])


# -- inspection -------------------------------------------------------------------------------


def test_inspection_views_on_cpu():
    lowered = aotkit.lower(
        lambda x, *, w: (x @ w, x.sum()), aotkit.spec("f32[2,3]"), w=aotkit.spec("f32[3,4]")
    )
    compiled = lowered.compile()
    assert compiled.in_tree == lowered.in_tree
    assert compiled.out_tree == lowered.out_tree
    assert compiled.in_specs == (
        (ShapeDtype((2, 3), np.float32),),
        {"w": ShapeDtype((3, 4), np.float32)},
    )
    assert compiled.out_specs == (ShapeDtype((2, 4), np.float32), ShapeDtype((), np.float32))
    assert compiled.backend is backends.get("cpu")
    assert compiled.lowered is lowered
    assert compiled.as_text().startswith("HloModule lambda")
    assert compiled.cost_analysis()["flops"] > 0
    assert isinstance(compiled.memory_analysis(), MemoryAnalysis)
    assert compiled.runtime_executable().hlo_modules()[0].name == "lambda"
    assert repr(compiled) == (
        "<Compiled lambda(x: f32[2,3], w: f32[3,4]) -> (out[0]: f32[2,4], out[1]: f32[]) on cpu>"
    )


def test_inspection_views_on_the_interpreter():
    compiled = aotkit.lower(lambda x: x + 1, aotkit.spec("f32[2]")).compile("interpreter")
    assert compiled.as_text().startswith("module @lambda")
    assert compiled.cost_analysis() is None
    assert compiled.memory_analysis() is None
    assert compiled.backend.name == "interpreter"


def test_compiled_checks_its_pytrees_against_the_executable():
    from jax import tree_util

    exe = backends.get("cpu").compile(aotkit.lower(lambda x: x, aotkit.spec("f32[]")).module)
    with pytest.raises(
        ValueError, match=r"pytrees with 2 inputs and 1 outputs do not fit executable"
    ):
        Compiled(
            exe,
            in_tree=tree_util.tree_structure(((0, 0), {})),
            out_tree=tree_util.tree_structure(0),
        )


# -- repeated calls: the native (C++) dispatch caches a signature after its first call -------


def _repeat(compiled, *args, times=3):
    return [np.asarray(compiled(*args)) for _ in range(times)]


@pytest.mark.parametrize(
    ("spec_text", "good", "bad", "message"),
    [
        ("f32[3]", np.ones(3, np.float32), np.ones(3), r"expected f32\[3\], got f64\[3\]"),
        ("i32[2]", np.ones(2, np.int32), np.ones(2, np.int64), r"expected i32\[2\], got i64\[2\]"),
        ("u32[]", np.uint32(7), np.uint64(7), r"expected u32\[\], got u64\[\]"),
        ("c64[]", np.complex64(1j), np.complex128(1j), r"expected c64\[\], got c128\[\]"),
        ("f64[]", np.float64(0.1), np.float32(0.1), r"expected f64\[\], got f32\[\]"),
        ("f32[]", 2.5, np.float64(2.5), r"expected f32\[\], got f64\[\]"),
    ],
)
def test_wrong_dtype_after_a_cached_signature_is_still_a_type_error(spec_text, good, bad, message):
    # With JAX's x64 mode off, jaxlib's transfer would narrow the wide value to the cached
    # narrow signature; the call must still be refused, not silently narrowed.
    compiled = compiled_identity(spec_text)
    for out in _repeat(compiled, good):
        assert out.dtype == aotkit.spec(spec_text).dtype
        np.testing.assert_array_equal(out, np.asarray(good).astype(out.dtype))
    with pytest.raises(TypeError, match=rf"argument x {message}"):
        compiled(bad)
    with jax.enable_x64(True):
        with pytest.raises(TypeError, match=rf"argument x {message}"):
            compiled(bad)


def test_64_bit_values_stay_64_bit_on_repeated_calls():
    compiled = aotkit.lower(lambda x, y: x + y, aotkit.spec("f64[2]"), aotkit.spec("i64[]"))
    compiled = compiled.compile()
    x, y = np.array([1.0 + 2.0**-40, 2.0]), np.int64(2**40)
    for out in _repeat(compiled, x, y):
        assert out.dtype == np.float64
        np.testing.assert_array_equal(out, x + y)


@pytest.mark.parametrize("value", [1.5, 3, True])
def test_python_scalars_on_repeated_calls(value):
    compiled = aotkit.lower(lambda x, s: x * s, aotkit.spec("bf16[2]"), aotkit.spec("f32[]"))
    compiled = compiled.compile()
    x = np.array([1.0, 2.0], ml_dtypes.bfloat16)
    for out in _repeat(compiled, x, value):
        assert out.dtype == np.float32
        np.testing.assert_array_equal(out, x.astype(np.float32) * np.float32(value))


def test_mixed_argument_kinds_on_repeated_calls_and_in_x64_mode():
    compiled = aotkit.lower(lambda x, s: x * s, aotkit.spec("f32[3]"), aotkit.spec("f32[]"))
    compiled = compiled.compile()
    x = np.arange(3, dtype=np.float32)
    device_x = compiled(x, np.float32(1.0))
    for args in [(x, 2.0), (device_x, 2.0), (x, np.float32(2.0)), (device_x, np.float32(2))]:
        for out in _repeat(compiled, *args):
            np.testing.assert_array_equal(out, x * 2)
        with jax.enable_x64(True):
            for out in _repeat(compiled, *args):
                assert out.dtype == np.float32
                np.testing.assert_array_equal(out, x * 2)
    with pytest.raises(TypeError, match=r"argument s expected f32\[\], got Python complex"):
        compiled(x, 1j)


def test_calls_in_and_out_of_x64_mode_keep_every_dtype():
    # A call switches JAX's x64 mode only when the thread is not in the mode it needs, and
    # not at all for device arrays and 32-bit NumPy values: each way keys its own signature.
    compiled = aotkit.lower(
        lambda x, y, s: (x * s, y * s), aotkit.spec("f32[2]"), aotkit.spec("f64[2]"),
        aotkit.spec("f32[]"),
    ).compile()  # fmt: skip
    jitted = aotkit.jit(lambda x: x * 2)
    x32 = np.array([1.5, 2.0], np.float32)
    x64 = np.array([1.0 + 2.0**-40, 2.0])
    for mode in (False, True, False, True):
        with jax.enable_x64(mode):
            for s in (2.0, np.float32(2.0)):
                for _ in range(3):
                    a, b = compiled(x32, x64, s)
                    assert (a.dtype, b.dtype) == (np.float32, np.float64)
                    np.testing.assert_array_equal(a, x32 * 2)
                    np.testing.assert_array_equal(b, x64 * 2)
            for arg, dtype in [
                (x32, np.float32), (x64, np.float64), (1.5, np.float32),
                (np.float32(1.5), np.float32), (np.float64(1.5), np.float64),
            ]:  # fmt: skip
                for out in _repeat(jitted, arg):
                    assert out.dtype == dtype
                    np.testing.assert_array_equal(out, np.asarray(arg, dtype) * 2)
    assert jitted.cache_info().traces == 5


def test_deleted_array_after_a_cached_signature_is_a_value_error():
    compiled = compiled_identity("f32[2]")
    x = compiled(np.ones(2, np.float32))
    _repeat(compiled, x)
    x.delete()
    with pytest.raises(ValueError, match=r"argument x was deleted or donated"):
        compiled(x)


def test_calls_work_under_jax_disable_jit():
    compiled = compiled_identity("f32[2]")
    with jax.disable_jit():
        np.testing.assert_array_equal(np.asarray(compiled(np.ones(2, np.float32))), [1.0, 1.0])


@pytest.mark.parametrize(
    "args",
    [(np.ones(3, np.float32), np.float32(2)), (jax.numpy.ones(3, np.float32), 2.0)],
    ids=["numpy", "device-array-and-python-float"],
)
def test_cpu_caches_a_signature_after_one_checked_call(monkeypatch, args):
    from aotkit import _compat

    cached = []
    real = _compat.fastpath_data
    monkeypatch.setattr(_compat, "fastpath_data", lambda *a, **k: cached.append(1) or real(*a, **k))
    compiled = aotkit.lower(lambda x, s: x * s, aotkit.spec("f32[3]"), aotkit.spec("f32[]"))
    compiled = compiled.compile()
    for out in _repeat(compiled, *args, times=5):
        np.testing.assert_array_equal(out, [2.0, 2.0, 2.0])
    assert len(cached) == 1
