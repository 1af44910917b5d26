"""`jit`: the staged API's caches (one trace, one compile, shared across jit objects and
orders), static arguments, donation, backends, options, and thread safety."""

from __future__ import annotations

import threading

import jax
import numpy as np
import pytest

import aotkit
import aotkit.numpy as anp
from aotkit import ShapeDtype
from aotkit.api import CacheInfo, Jitted, jit
from aotkit.errors import CompileError
from tests.helpers import BACKENDS


def fresh_function():
    """A new function object per test: caches are per function."""

    def f(x):
        return anp.sqrt(x**2) + 1.0

    return f


def test_lower_compile_then_call_is_one_trace_and_one_compile():
    f = fresh_function()
    x = np.float32(3.0)
    compiled = jit(f).lower(x).compile()
    out = jit(f)(x)
    assert float(out) == float(compiled(x)) == 4.0
    info = jit(f).cache_info()
    assert (info.traces, info.lowerings, info.compiles) == (1, 1, 1)
    assert info.hits == 1
    assert info.misses == 2  # the lowering and the compile


def test_one_trace_serves_every_backend():
    """A program does not depend on the backend: jits of one function on cpu and on the
    interpreter (and a Lowered compiled for both) trace and lower it once, compile it once
    per backend, and each lowering defaults to its own jit's backend."""

    def f(x):  # (a program of its own: no other test's compile is in the persistent cache)
        return x * 3.0 - 0.5

    x = np.arange(3, dtype=np.float32)
    on_cpu, on_interpreter = jit(f, backend="cpu"), jit(f, backend="interpreter")
    for jitted in (on_cpu, on_interpreter, on_cpu, on_interpreter):
        np.testing.assert_array_equal(np.asarray(jitted(x)), x * 3 - 0.5)
    assert on_interpreter.lower(x).backend == "interpreter"
    assert on_cpu.lower(x).backend == "cpu"
    assert on_interpreter.lower(x).compile().backend.name == "interpreter"
    assert jit(f).lower(x).compile(backend="interpreter").backend.name == "interpreter"
    info = on_cpu.cache_info()
    assert (info.traces, info.lowerings, info.compiles) == (1, 1, 2)


def test_one_lowering_serves_every_target_it_compiles_for():
    """One `Lowered` compiles for cpu, the interpreter, IREE and a deviceless TPU topology
    (those installed here): one trace and one lowering in all, one compile per target,
    each result as NumPy computes it (the TPU one cannot run here: its optimized HLO is
    XLA:TPU's)."""
    from aotkit.backends import iree, tpu_topology

    def f(x):  # (a program of its own: no other test's compile is in the persistent cache)
        return x * 5.0 + 0.25

    x = np.arange(4, dtype=np.float32)
    jitted = jit(f)
    lowered = jitted.lower(x)
    targets = [{"backend": "cpu"}, {"backend": "interpreter"}]
    if iree.installed():
        targets.append({"backend": "iree"})
    for target in targets:
        compiled = lowered.compile(**target)
        assert compiled.backend.name == target["backend"]
        np.testing.assert_allclose(np.asarray(compiled(x)), x * 5 + 0.25, rtol=1e-6)
    if tpu_topology.available() is None:  # libtpu is installed: a deviceless TPU target
        targets.append({"backend": "tpu", "topology": "v5e:1x1"})
        assert "tpu" in lowered.compile(**targets[-1]).as_text().lower()
    for target in targets:  # each again: from the jit's compile cache
        assert lowered.compile(**target) is lowered.compile(**target)
    assert jitted.lower(x) is lowered
    info = jitted.cache_info()
    assert (info.traces, info.lowerings, info.compiles) == (1, 1, len(targets))


def test_call_then_lower_compile_is_one_trace_and_one_compile():
    f = fresh_function()
    x = np.ones(3, np.float32)
    first = jit(f)(x)
    compiled = jit(f).lower(x).compile()
    np.testing.assert_array_equal(np.asarray(compiled(x)), np.asarray(first))
    assert jit(f).cache_info() == CacheInfo(
        traces=1, lowerings=1, compiles=1, hits=2, misses=2, entries=2
    )


def test_lowering_a_spec_then_calling_with_an_array_of_that_spec_hits():
    f = fresh_function()
    lowered = jit(f).lower(ShapeDtype((2,), np.float64))
    assert jit(f).lower(np.zeros(2)) is lowered
    jit(f)(np.zeros(2))
    info = jit(f).cache_info()
    assert (info.traces, info.compiles) == (1, 1)


def test_repeated_calls_hit_and_new_specs_trace_again():
    f = fresh_function()
    jitted = jit(f)
    for _ in range(3):
        jitted(np.ones(2, np.float32))
    jitted(np.ones(3, np.float32))
    jitted(np.ones(3, np.float64))
    info = jitted.cache_info()
    # Repeated signatures run in jaxlib's C++ dispatch without entering Python, uncounted.
    assert (info.traces, info.compiles, info.hits, info.misses) == (3, 3, 0, 6)
    # A static argument keeps every call in Python, where hits are counted.
    g = jit(lambda x, n: x * n, static_argnums=1)
    for _ in range(3):
        g(np.ones(2, np.float32), 2)
    info = g.cache_info()
    assert (info.traces, info.compiles, info.hits) == (1, 1, 2)


def test_python_scalars_key_as_weak_32_bit_values():
    f = fresh_function()
    jit(f)(2.0)
    jit(f)(3.0)
    assert jit(f).cache_info().traces == 1
    # A float32 spec or array is strongly typed: another program (it promotes differently).
    jit(f).lower(ShapeDtype((), np.float32))
    assert jit(f).cache_info().traces == 2


def test_python_scalars_trace_weak_and_promote_like_python_scalars():
    both = lambda x, y: x * y  # noqa: E731
    cases = [
        ((2.0, np.float16(3)), np.float16),  # NEP 50: a Python float takes f16
        ((2.0, 3.0), np.float32),  # weak with weak keeps the 32-bit type
        ((2, np.int8(3)), np.int8),
        ((2.0, np.int32(3)), np.float64),  # NumPy: Python float with int32 is float64
        ((2, 3.0), np.float32),
        ((2.0, 1j), np.complex64),
    ]
    for args, dtype in cases:
        out = jit(both)(*args)
        assert out.dtype == dtype, (args, out.dtype)
        assert float(np.real(out)) == float(np.real(np.multiply(*args)))


def test_x64_scalars_makes_python_scalar_arguments_64_bit():
    f = fresh_function()
    aotkit.config.update("x64_scalars", True)
    try:
        assert jit(f).lower(2.0).flat_in_specs == (ShapeDtype((), np.float64),)
        assert jit(f)(2.0).dtype == np.float64
    finally:
        aotkit.config.update("x64_scalars", False)
    assert jit(f)(2.0).dtype == np.float32


def test_python_int_arguments_out_of_int32_range_are_refused():
    with pytest.raises(
        OverflowError,
        match=r"^f: argument x: Python int 4294967296 does not fit int32, the dtype of "
        r"Python int arguments; pass np.int64\(...\) \(or set "
        r"aotkit.config.update\('x64_scalars', True\)\)$",
    ):
        jit(fresh_function())(2**32)


def test_config_errors():
    with pytest.raises(ValueError, match=r"aotkit.config: unknown setting 'x64'; settings: "):
        aotkit.config.update("x64", True)
    with pytest.raises(TypeError, match=r"aotkit.config.update: x64_scalars takes True or False"):
        aotkit.config.update("x64_scalars", 1)


def test_different_functions_do_not_share():
    f, g = fresh_function(), fresh_function()
    jit(f)(1.0)
    assert jit(g).cache_info() == CacheInfo(0, 0, 0, 0, 0)


def test_static_argnums_values_are_part_of_the_key():
    def power(x, n):
        return x**n

    jitted = jit(power, static_argnums=1)
    x = np.arange(3, dtype=np.float32)
    np.testing.assert_array_equal(np.asarray(jitted(x, 2)), x**2)
    np.testing.assert_array_equal(np.asarray(jitted(x, 3)), x**3)
    np.testing.assert_array_equal(np.asarray(jitted(x, 2)), x**2)
    lowered = jitted.lower(x, 2)
    assert lowered.in_specs == ((ShapeDtype((3,), np.float32),), {})
    assert jitted.cache_info().traces == 2


def test_static_values_of_different_types_trace_separately():
    def scale(x, k):
        return x * k

    jitted = jit(scale, static_argnums=(1,))
    x = np.ones(2, np.int32)
    assert np.asarray(jitted(x, 2)).dtype == np.int32
    assert np.asarray(jitted(x, 2.0)).dtype == np.float64
    assert jitted.cache_info().traces == 2


def test_static_argnames():
    def f(x, *, mode):
        return x + 1 if mode == "inc" else x - 1

    jitted = jit(f, static_argnames="mode")
    assert float(jitted(1.0, mode="inc")) == 2.0
    assert float(jitted(1.0, mode="dec")) == 0.0
    assert jitted.cache_info().traces == 2


def test_unhashable_static_argument_is_a_clear_error():
    jitted = jit(lambda x, shape: x.reshape(shape), static_argnums=1)
    with pytest.raises(
        TypeError,
        match=r"jit\(lambda\): static argument shape = \[2, 2\] is not hashable \(list\); "
        r"pass a hashable value \(a tuple instead of a list\)",
    ):
        jitted(np.ones(4), [2, 2])
    np.testing.assert_array_equal(np.asarray(jitted(np.ones(4), (2, 2))), np.ones((2, 2)))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"static_argnums": "0"}, r"static_argnums must be an int or a tuple of ints, got '0'"),
        ({"donate_argnums": 1.5}, r"donate_argnums must be an int or a tuple of ints, got 1.5"),
        ({"static_argnames": 3}, r"static_argnames must be a str or a tuple of strs, got 3"),
        ({"backend": 3}, r"backend must be a name such as 'cpu', got 3"),
    ],
)
def test_bad_jit_arguments(kwargs, message):
    with pytest.raises(TypeError, match=rf"jit\(f\): {message}"):
        jit(fresh_function(), **kwargs)


def test_jit_needs_a_callable():
    with pytest.raises(TypeError, match=r"jit: expected a function, got int"):
        jit(3)


def test_decorator_forms():
    @jit
    def double(x):
        return x * 2

    @jit(static_argnums=1)
    def add_n(x, n):
        return x + n

    assert isinstance(double, Jitted) and double.__name__ == "double"
    assert float(double(2.0)) == 4.0
    assert float(add_n(2.0, 3)) == 5.0


def test_donated_argument_aliases_a_result_and_is_consumed():
    def update(state, delta):
        return state + delta, delta * 2

    jitted = jit(update, donate_argnums=0)
    state = np.arange(4.0)
    lowered = jitted.lower(state, state)
    assert lowered.donated == (True, False)
    assert "tf.aliasing_output = 0 : i32" in lowered.as_text()
    compiled = lowered.compile()
    assert compiled.memory_analysis().alias_size_in_bytes == 32

    device_state = jitted(state, state)[0]  # NumPy input: a fresh device copy is donated
    np.testing.assert_array_equal(state, np.arange(4.0))
    new_state, _ = jitted(device_state, state)
    assert device_state.is_deleted()
    np.testing.assert_array_equal(np.asarray(new_state), 3 * np.arange(4.0))
    with pytest.raises(ValueError, match=r"argument state was deleted or donated"):
        jitted(device_state, state)


def test_donated_argument_without_a_matching_result_is_a_buffer_donor():
    jitted = jit(lambda x: x.sum(), donate_argnums=(0,))
    text = jitted.lower(np.ones(3)).as_text()
    assert "jax.buffer_donor = true" in text
    assert float(jitted(np.ones(3))) == 3.0


def test_donating_a_pytree_argument_marks_each_leaf():
    jitted = jit(lambda p, x: {"w": p["w"] + x, "b": p["b"]}, donate_argnums=0)
    p = {"w": np.ones(2), "b": np.zeros(3)}
    lowered = jitted.lower(p, np.ones(2))
    assert lowered.donated == (True, True, False)
    assert lowered.as_text().count("tf.aliasing_output") == 2


@pytest.mark.parametrize("backend", BACKENDS)
def test_backend_parameter(backend):
    jitted = jit(lambda x: x + 1, backend=backend)
    out = jitted(np.ones(2, np.float32))
    # PJRT backends (cpu, and an accelerator of the lane) give jax.Array; the others NumPy's.
    assert isinstance(out, np.ndarray if backend in ("interpreter", "iree") else jax.Array)
    assert jitted.lower(np.ones(2, np.float32)).compile().backend.name == backend


def test_compile_backend_overrides_and_caches_per_backend():
    f = fresh_function()
    lowered = jit(f).lower(np.float32(1.0))
    on_cpu = lowered.compile()
    on_interp = lowered.compile(backend="interpreter")
    assert on_cpu.backend.name == "cpu" and on_interp.backend.name == "interpreter"
    assert lowered.compile(backend="interpreter") is on_interp
    assert jit(f).cache_info().compiles == 2


def test_compile_options_pass_through_and_key_the_cache():
    f = fresh_function()
    lowered = jit(f).lower(np.float32(1.0))
    fast = lowered.compile(options={"xla_cpu_enable_fast_math": True})
    plain = lowered.compile()
    assert fast is not plain
    assert lowered.compile(options={"xla_cpu_enable_fast_math": True}) is fast
    assert float(fast(np.float32(-3.0))) == 4.0


def test_unknown_compile_option_is_a_value_error():
    lowered = aotkit.lower(lambda x: x, aotkit.spec("f32[]"))
    with pytest.raises(ValueError, match=r"No such compile option: 'xla_made_up'"):
        lowered.compile(options={"xla_made_up": 1})


def test_unhashable_option_value_is_a_type_error():
    lowered = aotkit.lower(lambda x: x, aotkit.spec("f32[]"))
    with pytest.raises(TypeError, match=r"option values must be hashable bool/int/float/str"):
        lowered.compile(options={"xla_flag": [1]})


def test_compile_error_names_module_and_how_to_dump(monkeypatch):
    from aotkit.backends.base import Backend

    class Refusing(Backend):
        name = platform = "refusing"

        def devices(self):
            return ["refusing:0"]

        def compile(self, module, options=None):
            raise CompileError(
                "backend 'refusing' rejected module 'f': no", backend="refusing", module_name="f"
            )

    lowered = aotkit.lower(fresh_function(), aotkit.spec("f32[]"))
    with pytest.raises(
        CompileError,
        match=r"^backend 'refusing' rejected module 'f': no; set AOTKIT_DUMP_DIR=DIR",
    ) as info:
        lowered.compile(backend=Refusing())
    assert (info.value.backend, info.value.module_name) == ("refusing", "f")


def test_compile_writes_optimized_hlo_and_analyses_to_the_dump(tmp_path):
    jitted = jit(fresh_function(), dump_dir=tmp_path)
    jitted.lower(np.float32(1.0)).compile()
    names = sorted(p.name for p in tmp_path.iterdir())
    assert any(n.endswith("-optimized.hlo") for n in names)
    assert any(n.endswith("-cost.json") for n in names)
    assert any(n.endswith("-memory.json") for n in names)


def test_concurrent_first_calls_trace_and_compile_once():
    f = fresh_function()
    x = np.arange(8, dtype=np.float32)
    results, errors = [], []
    barrier = threading.Barrier(8)

    def worker():
        try:
            barrier.wait()
            results.append(np.asarray(jit(f)(x)))
        except Exception as e:  # collected and reported by the assertion below
            errors.append(e)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for r in results:
        np.testing.assert_array_equal(r, np.abs(x) + 1)
    info = jit(f).cache_info()
    assert (info.traces, info.compiles) == (1, 1)
    assert info.hits + info.misses >= 8


def test_jitted_call_checks_arguments_like_compiled():
    jitted = jit(fresh_function())
    with pytest.raises(TypeError, match=r"argument x of type str is not an array"):
        jitted("text")


def test_kwargs_and_pytrees_through_jit():
    def f(params, *, x):
        return {"y": params["w"] * x + params["b"]}

    jitted = jit(f)
    params = {"w": np.float32(2.0), "b": np.float32(1.0)}
    out = jitted(params, x=np.arange(3, dtype=np.float32))
    np.testing.assert_array_equal(np.asarray(out["y"]), [1.0, 3.0, 5.0])
    jitted(params, x=np.arange(3, dtype=np.float32))
    assert jitted.cache_info().traces == 1


def test_the_jit_cache_keeps_its_bounded_number_of_entries():
    f = fresh_function()
    aotkit.config.update("jit_cache_size", 3)
    try:
        jitted = jit(f)
        for n in range(1, 8):
            jitted(np.ones(n, np.float32))
        info = jitted.cache_info()
        # 7 lowerings and 7 compiles, of which 3 of each are kept.
        assert (info.lowerings, info.compiles, info.entries, info.evictions) == (7, 7, 6, 8)
        # An evicted signature is traced again (the C++ dispatch forgot it too), and
        # still gives the right answer.
        np.testing.assert_array_equal(np.asarray(jitted(np.full(1, -3.0, np.float32))), [4.0])
        assert jitted.cache_info().lowerings == 8
    finally:
        aotkit.config.update("jit_cache_size", 128)


def test_jit_cache_size_must_be_a_positive_int():
    with pytest.raises(
        TypeError, match=r"^aotkit.config.update: jit_cache_size takes a positive int, got 0$"
    ):
        aotkit.config.update("jit_cache_size", 0)


def test_a_callable_without_weak_references_is_not_kept_alive_by_the_caches():
    import gc
    import weakref

    class Scale:
        __slots__ = ("k", "__weakref__")

        def __init__(self, k):
            self.k = k

        def __call__(self, x):
            return x * self.k

    class NoWeakref:
        __slots__ = ("inner",)

        def __init__(self, inner):
            self.inner = inner

        def __call__(self, x):
            return self.inner(x)

    inner = Scale(2.0)
    ref = weakref.ref(inner)
    jitted = jit(NoWeakref(inner))
    assert float(jitted(np.float32(3.0))) == 6.0
    del jitted, inner
    gc.collect()
    assert ref() is None


def test_static_arguments_key_by_type_and_sign():
    divide = jit(lambda x, s: x / s, static_argnums=1)
    x = np.ones(2, np.float32)
    np.testing.assert_array_equal(np.asarray(divide(x, 0.0)), [np.inf, np.inf])
    np.testing.assert_array_equal(np.asarray(divide(x, -0.0)), [-np.inf, -np.inf])
    scale = jit(lambda x, t: x * t[0], static_argnums=1)
    assert scale(np.ones(2, np.int32), (2,)).dtype == np.int32
    assert scale(np.ones(2, np.int32), (2.0,)).dtype == np.float64
