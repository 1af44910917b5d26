"""aotkit/_compat.py: every private jax/jaxlib name has a public fallback with the same
results and errors.

Each private name is taken away in turn (as if this jaxlib lacked it, or had it with
another signature), and a representative set of calls runs with fresh functions, so no
cache carries the fast path over: the results and error messages must equal those of the
same calls with every name present.
"""

from __future__ import annotations

import ast
import collections
import operator
import os
import pathlib
import re
import subprocess
import sys
import textwrap
import types

import jax
import numpy as np
import pytest

import aotkit
import aotkit.numpy as anp
from aotkit import _compat
from aotkit.backends.dispatch import native_dispatcher

# Every (module, name) _compat looks up through `_private`, and the `fast_paths()` entry
# that must then report its fallback.
PRIVATE = {
    ("jaxlib.mlir._mlir_libs._jax_mlir_ext", "register_dialects"): "mlir dialects",
    ("jaxlib.lapack", "registrations"): "lapack",
    ("jaxlib.cpu._lapack", "initialize"): "lapack",
    ("jaxlib.xla_client", ""): "compile options",
    ("jax.extend.source_info_util", "register_exclusion"): None,
    ("jax._src.xla_bridge", "get_backend"): None,
    ("jaxlib._jax", "ArrayImpl"): "array type",
    ("jax.core", "ShapedArray"): "host transfer",
    ("jaxlib._jax", "batched_device_put"): "host transfer",
    ("jaxlib._jax", "HostBufferSemantics.IMMUTABLE_ONLY_DURING_CALL"): "host transfer",
    ("jaxlib._jax", "HostBufferSemantics.ZERO_COPY"): "host transfer",
    ("jaxlib._jax", "array_result_handler"): "result handler",
    ("jaxlib._jax", "collect_garbage"): None,
    ("jax", "enable_x64.swap_local"): "x64 switch",
    ("jax", "enable_x64.set_local"): "x64 switch",
    ("jaxlib._jax", "pjit"): "C++ dispatch",
    ("jax._src.interpreters.pxla", "JitGlobalCppCacheKeys"): "C++ dispatch",
    ("jax._src.interpreters.pxla", "cc_shard_arg"): "C++ dispatch",
    ("jax._src.interpreters.pxla", "MeshExecutableFastpathData"): "C++ dispatch",
    ("jax._src.tree_util", "dispatch_registry"): "C++ dispatch",
    ("jax._src.random.prng", "PRNGKeyArray"): "key arrays",
    ("jaxlib._jax", "GSPMDSharding"): "sharded results",
    ("jax._src.sharding_impls", "parse_flatten_op_sharding"): "mesh specs",
    ("jax._src.xla_bridge", "backends_are_initialized"): "backend state",
    ("jax._src.export._export", "serialization_registry"): "jax.export registrations",
    ("jax._src.export._export", "deserialization_registry"): "jax.export registrations",
    ("jaxlib._jax", "mlir.serialize_portable_artifact"): "sharded artifacts",
    ("jaxlib._jax", "mlir.mlir_module_to_xla_computation"): None,
    ("jaxlib._jax", "hlo_module_cost_analysis"): None,
    ("jax._src.lib", "cpu_math"): None,
    # Deviceless TPU compilation (tests/backends/test_deviceless_tpu.py covers the fallbacks).
    ("jax._src.cloud_tpu_init", "get_tpu_library_path"): None,
    ("jax._src.xla_bridge", "make_pjrt_tpu_topology"): None,
}
CLOSURES = [(key,) for key in PRIVATE] + [tuple(PRIVATE)]
CLOSURE_IDS = [f"{m}.{n}".rstrip(".") for m, n in PRIVATE] + ["all"]


def close(monkeypatch, *names, replace=None):
    """Makes `_compat._private` answer None for `names` (missing), or `replace[name]`."""
    real = _compat._private
    replace = replace or {}

    def private(module, name=""):
        if (module, name) in replace:
            return replace[(module, name)]
        if (module, name) in names:
            return None
        return real(module, name)

    monkeypatch.setattr(_compat, "_private", private)


def test_every_private_lookup_is_covered_here():
    source = pathlib.Path(_compat.__file__).read_text()
    looked_up = set(re.findall(r'_private\(\s*"([^"]+)"(?:,\s*"([^"]*)")?\s*\)', source))
    assert looked_up == set(PRIVATE)


def test_no_private_module_is_imported_around_private():
    # A private name imported directly would have no fallback: every one goes through
    # `_private`, which the test above ties to this file's table.
    tree = ast.parse(pathlib.Path(_compat.__file__).read_text())
    imported = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            imported += [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            imported += [a.name for a in node.names]
    private = [
        m
        for m in imported
        if not m.startswith("__future__.") and any(p.startswith("_") for p in m.split("."))
    ]
    assert private == [], f"import {private[0]!r} directly: look it up through _private instead"


def test_supported_jaxlib_runs_every_fast_path():
    import jaxlib

    if tuple(int(p) for p in jaxlib.__version__.split(".")[:2]) >= (0, 13):
        pytest.skip(f"jaxlib {jaxlib.__version__} is newer than aotkit was written against")
    assert _compat.fast_paths() == dict.fromkeys(_compat.fast_paths(), True)


@pytest.mark.parametrize("names", CLOSURES, ids=CLOSURE_IDS)
def test_a_missing_name_switches_its_entry_point_to_the_fallback(monkeypatch, names):
    close(monkeypatch, *names)
    paths = _compat.fast_paths()
    expected = {PRIVATE[name] for name in names} - {None}
    if ("jax.core", "ShapedArray") in names:
        expected.add("result handler")
    if ("jaxlib.xla_client", "") in names:
        expected.add("device list")
    assert {k for k, fast in paths.items() if not fast} == expected


# --- Representative calls: each returns what it observed (results or the error raised).


def _outcome(fn):
    try:
        out = fn()
    except Exception as e:  # the error itself is what is compared
        return ("error", type(e).__name__, str(e))
    leaves = jax.tree_util.tree_leaves(out)
    return ("ok", [(np.asarray(x).dtype, np.asarray(x).tolist()) for x in leaves])


def _scale():
    return aotkit.lower(lambda x, s: x * s, aotkit.spec("f32[3]"), aotkit.spec("f32[]")).compile()


def _numpy_arrays():
    c = _scale()
    return [c(np.arange(3, dtype=np.float32), np.float32(2)) for _ in range(3)]


def _python_float():
    c = _scale()
    return [c(np.arange(3, dtype=np.float32), 2.5) for _ in range(3)]


def _device_array_fed_back():
    c = _scale()
    y = c(np.arange(3, dtype=np.float32), np.float32(2))
    return [c(y, np.float32(2)) for _ in range(3)]


def _jax_array():
    c = _scale()
    return [c(jax.numpy.arange(3, dtype=np.float32), 3.0) for _ in range(3)]


def _float64_with_x64_off():
    c = aotkit.lower(lambda x: x / 3, aotkit.spec("f64[]")).compile()
    return [c(np.float64(1.0)) for _ in range(3)] + [c(np.asarray(2.0)) for _ in range(3)]


def _python_int():
    c = aotkit.lower(lambda x: x * 2, aotkit.spec("i32[]")).compile()
    return [c(7) for _ in range(3)]


def _python_int_out_of_range():
    c = aotkit.lower(lambda x: x * 2, aotkit.spec("i32[]")).compile()
    return c(2**40)


def _pytree_and_kwargs():
    def f(a, *, b):
        return {"sum": a + b["w"], "pair": (a, b["w"] * 2)}

    c = aotkit.lower(f, aotkit.spec("f32[2]"), b={"w": aotkit.spec("f32[2]")}).compile()
    x = np.ones(2, np.float32)
    return [c(x, b={"w": x + 1}) for _ in range(3)]


def _jit_calls():
    jitted = aotkit.jit(lambda x: anp.sqrt(x**2) + 1.0)
    x = np.float32(3.0)
    outs = [jitted(np.asarray(x)) for _ in range(3)] + [jitted(3.0) for _ in range(3)]
    outs += [jitted(outs[0]) for _ in range(3)]
    info = jitted.cache_info()
    return outs, info.traces, info.compiles


def _wrong_dtype():
    c = _scale()
    c(np.ones(3, np.float32), np.float32(1))
    return c(np.ones(3), np.float32(1))


def _wrong_pytree():
    c = _scale()
    c(np.ones(3, np.float32), np.float32(1))
    return c([np.ones(3, np.float32)], np.float32(1))


def _donated_array():
    jitted = aotkit.jit(lambda x: x + 1, donate_argnums=0)
    x = jitted(np.ones(2, np.float32))
    jitted(x)
    return jitted(x)


def _deleted_array():
    c = _scale()
    y = c(np.ones(3, np.float32), np.float32(1))
    c(y, np.float32(1))
    y.delete()
    return c(y, np.float32(1))


def _under_disable_jit():
    c = _scale()
    with jax.disable_jit():
        return [c(np.ones(3, np.float32), np.float32(2)) for _ in range(2)]


def _linalg():
    a = np.array([[4.0, 2.0], [2.0, 3.0]], np.float32)
    return aotkit.jit(anp.linalg.cholesky)(a)


def _compile_options():
    lowered = aotkit.lower(lambda x: x * 2, aotkit.spec("f32[2]"))
    return lowered.compile(options={"xla_cpu_enable_fast_math": False})(np.ones(2, np.float32))


def _bad_compile_option():
    lowered = aotkit.lower(lambda x: x * 2, aotkit.spec("f32[2]"))
    return lowered.compile(options={"xla_no_such_option": True})


CASES = {
    "numpy arrays": _numpy_arrays,
    "python float": _python_float,
    "device array fed back": _device_array_fed_back,
    "jax array": _jax_array,
    "float64 with x64 off": _float64_with_x64_off,
    "python int": _python_int,
    "python int out of range": _python_int_out_of_range,
    "pytree and kwargs": _pytree_and_kwargs,
    "jit calls": _jit_calls,
    "wrong dtype": _wrong_dtype,
    "wrong pytree": _wrong_pytree,
    "donated array": _donated_array,
    "deleted array": _deleted_array,
    "under disable_jit": _under_disable_jit,
    "linalg": _linalg,
    "compile options": _compile_options,
    "bad compile option": _bad_compile_option,
}


@pytest.fixture(scope="module")
def expected():
    """Each case's outcome with every private name present."""
    return {name: _outcome(case) for name, case in CASES.items()}


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("names", CLOSURES, ids=CLOSURE_IDS)
def test_fallback_gives_the_same_results_and_errors(monkeypatch, expected, names, case):
    close(monkeypatch, *names)
    assert _outcome(CASES[case]) == expected[case]


def test_the_expected_outcomes_are_right(expected):
    # The comparison above is only as good as the fast path's own outcomes.
    x = np.arange(3, dtype=np.float32)
    assert expected["numpy arrays"] == ("ok", [(np.dtype(np.float32), (x * 2).tolist())] * 3)
    assert expected["float64 with x64 off"][1][0] == (np.dtype(np.float64), 1.0 / 3)
    assert expected["python int out of range"][:2] == ("error", "ValueError")
    assert expected["wrong dtype"][:2] == ("error", "TypeError")
    assert "expected f32[3], got f64[3]" in expected["wrong dtype"][2]
    assert expected["wrong pytree"][:2] == ("error", "TypeError")
    assert expected["donated array"][:2] == ("error", "ValueError")
    assert "was deleted or donated" in expected["donated array"][2]
    assert expected["deleted array"][:2] == ("error", "ValueError")
    # NumPy f32 and Python float are two signatures; the device array shares the first.
    assert expected["jit calls"][1][-2:] == [(np.dtype(np.int64), 2)] * 2
    assert expected["bad compile option"][:2] == ("error", "ValueError")
    assert expected["linalg"] == (
        "ok",
        [(np.dtype(np.float32), np.linalg.cholesky(np.array([[4, 2], [2, 3]], "f4")).tolist())],
    )


# --- What each fallback is, and signatures that differ.


def test_without_cpp_dispatch_calls_take_the_checked_python_call(monkeypatch):
    close(monkeypatch, ("jaxlib._jax", "pjit"))
    compiled = _scale()
    assert compiled._call == compiled._python_call
    jitted = aotkit.jit(lambda x: x + 1)
    jitted(1.0)  # the dispatcher is chosen at the first call
    assert jitted._dispatch == jitted._python_call
    assert native_dispatcher("f", None, None) is None


def test_a_pjit_with_other_parameters_is_not_used(monkeypatch):
    def pjit(function_name, fun, cache_miss, static_argnums, static_argnames, cache_key):
        raise AssertionError("called")

    close(monkeypatch, replace={("jaxlib._jax", "pjit"): pjit})
    assert _compat.cpp_dispatcher("f", None, None) is None
    assert _outcome(_numpy_arrays) == ("ok", [(np.dtype(np.float32), [0.0, 2.0, 4.0])] * 3)


def test_fastpath_data_with_other_fields_is_not_used(monkeypatch):
    fields = (*_compat._FASTPATH_FIELDS, "new_field")
    fastpath = collections.namedtuple("MeshExecutableFastpathData", fields)
    close(
        monkeypatch,
        replace={("jax._src.interpreters.pxla", "MeshExecutableFastpathData"): fastpath},
    )
    assert _compat.cpp_dispatcher("f", None, None) is None
    assert _compat.fastpath_data(None, (), 0, None, None) is None
    assert _outcome(_python_float) == ("ok", [(np.dtype(np.float32), [0.0, 2.5, 5.0])] * 3)


def test_a_result_handler_with_other_parameters_is_not_used(monkeypatch):
    def array_result_handler(aval, sharding, committed, layout):
        raise AssertionError("called")

    close(monkeypatch, replace={("jaxlib._jax", "array_result_handler"): array_result_handler})
    sharding = _compat.single_device_sharding(jax.devices("cpu")[0])
    handler = _compat.result_handler(_compat.shaped_array((), np.float32), sharding)
    assert isinstance(handler, operator.itemgetter)
    assert _outcome(_numpy_arrays) == ("ok", [(np.dtype(np.float32), [0.0, 2.0, 4.0])] * 3)


def test_a_device_put_with_other_parameters_is_not_used(monkeypatch):
    def batched_device_put(aval, sharding, xs, devices, committed=True):
        raise AssertionError("called")

    close(monkeypatch, replace={("jaxlib._jax", "batched_device_put"): batched_device_put})
    device = jax.devices("cpu")[0]
    sharding = _compat.single_device_sharding(device)
    put = _compat.host_to_device(_compat.shaped_array((), np.float64), sharding, device)
    with jax.enable_x64(False):
        out = put(np.asarray(1.0 / 3))
    assert out.dtype == np.float64 and float(out) == 1.0 / 3
    assert _outcome(_float64_with_x64_off)[1][0] == (np.dtype(np.float64), 1.0 / 3)


def test_public_device_put_copies_the_numpy_buffer_during_the_call():
    device = jax.devices("cpu")[0]
    put = _compat._public_device_put(_compat.single_device_sharding(device))
    for _ in range(20):
        x = np.arange(1 << 16, dtype=np.float32)
        y = put(x)
        x[:] = -1  # the caller may reuse its buffer as soon as the call returns
        assert np.asarray(y)[-1] == (1 << 16) - 1


def test_x64_switch_fallback_restores_what_was_there(monkeypatch):
    close(monkeypatch, ("jax", "enable_x64.swap_local"))
    swap, restore = _compat.x64_switch()
    before = jax.config.jax_enable_x64
    previous = swap(not before)
    assert jax.config.jax_enable_x64 is (not before)
    restore(previous)
    assert jax.config.jax_enable_x64 is before


def test_x64_state_fallback_reads_the_config(monkeypatch):
    assert _compat.x64_state() is jax.enable_x64
    enable_x64 = jax.enable_x64
    monkeypatch.setattr(jax, "enable_x64", None)
    state = _compat.x64_state()
    monkeypatch.setattr(jax, "enable_x64", enable_x64)
    for mode in (True, False):
        with jax.enable_x64(mode):
            assert state.value is mode


def test_dialect_registration_with_other_parameters_falls_back_to_jax_context(monkeypatch):
    def register_dialects(registry, *, pipelines):
        raise AssertionError("called")

    close(
        monkeypatch,
        replace={("jaxlib.mlir._mlir_libs._jax_mlir_ext", "register_dialects"): register_dialects},
    )
    _check_context(_compat.make_context())


def test_missing_dialect_registration_falls_back_to_jax_context(monkeypatch):
    close(monkeypatch, ("jaxlib.mlir._mlir_libs._jax_mlir_ext", "register_dialects"))
    _check_context(_compat.make_context())


SANDBOX_COMPAT = """
import importlib.util

spec = importlib.util.spec_from_file_location("_aotkit_real_compat", {real!r})
real = importlib.util.module_from_spec(spec)
spec.loader.exec_module(real)
_lookup = real._private
_closed = ("jaxlib.mlir._mlir_libs._jax_mlir_ext", "register_dialects")
real._private = lambda module, name="": None if (module, name) == _closed else _lookup(module, name)
make_context = real.make_context
"""


def test_sandbox_parses_files_with_the_fallback_context(monkeypatch, tmp_path):
    # The sandbox process loads _compat by path, without aotkit: a stand-in that takes the
    # dialect registration away there shows the fallback works in that process too.
    from aotkit.frontends import sandbox

    stand_in = tmp_path / "compat_stand_in.py"
    stand_in.write_text(SANDBOX_COMPAT.format(real=_compat.__file__))
    monkeypatch.setattr(sandbox, "_compat", types.SimpleNamespace(__file__=str(stand_in)))
    text = b"func.func @main(%a: tensor<2xf32>) -> tensor<2xf32> {\n"
    text += b"  %0 = stablehlo.add %a, %a : tensor<2xf32>\n  return %0 : tensor<2xf32>\n}\n"
    out = aotkit.load_module(text).compile()(np.array([1.0, 2.0], np.float32))
    np.testing.assert_array_equal(out, [2.0, 4.0])


def _check_context(ctx):
    from jaxlib.mlir import ir
    from jaxlib.mlir.passmanager import PassManager

    text = """
    func.func @main(%a: tensor<2xf32>) -> tensor<2xf32> {
      %c = arith.constant dense<1.0> : tensor<2xf32>
      %0 = stablehlo.add %a, %c : tensor<2xf32>
      %1 = chlo.erf %0 : tensor<2xf32> -> tensor<2xf32>
      return %1 : tensor<2xf32>
    }
    """
    with ctx:
        module = ir.Module.parse(text)
        module.operation.verify()
        PassManager.parse("builtin.module(func.func(chlo-legalize-to-stablehlo,canonicalize))").run(
            module.operation
        )
        assert "chlo.erf" not in str(module)


def test_parse_parameters_of_nanobind_signatures():
    text = (
        "def pjit(function_name: str, fun: Callable[..., Any] | None, cache: dict[str, "
        "int] | None = \\0, *, flag: bool = \\1) -> PjitFunction"
    )
    assert _compat._parse_parameters(text) == ("function_name", "fun", "cache", "flag")
    assert _compat._parse_parameters("def f(arg: object, /) -> None") == ("arg",)
    assert _compat._parse_parameters("no signature") is None


def test_plugin_loading_without_jaxlib_support_is_a_clear_error(monkeypatch, tmp_path):
    close(monkeypatch, ("jaxlib.xla_client", ""))
    path = tmp_path / "libplugin.so"
    path.write_bytes(b"")
    with pytest.raises(RuntimeError, match=(
        r"^load_plugin\('myplugin', '.*libplugin\.so'\): jaxlib \S+ cannot load a PJRT plugin "
        r"from a path \(no xla_client\.pjrt_plugin_loaded\); install the plugin as a JAX plugin "
        r"package and use its backend by name, or use jaxlib 0\.10 to 0\.12$"
    )):  # fmt: skip
        aotkit.backends.load_plugin("myplugin", str(path))


def test_jax_frontend_without_location_exclusion_still_lowers(monkeypatch):
    # The JAX front end registers its exclusion when first imported: import it before the
    # patch, or the rest of this process's JAX locations would keep aotkit's frames.
    import aotkit.frontends.jax  # noqa: F401

    close(monkeypatch, ("jax.extend.source_info_util", "register_exclusion"))
    _compat.exclude_from_jax_locations("/nowhere/")  # nothing to register with: a no-op
    lowered = aotkit.lower(lambda x: jax.numpy.sin(x) * 2, aotkit.spec("f32[3]"), frontend="jax")
    out = lowered.compile()(np.ones(3, np.float32))
    np.testing.assert_allclose(out, np.sin(np.ones(3, np.float32)) * 2, rtol=1e-6)


LAPACK_SCRIPT = """
import numpy as np
import aotkit, aotkit.numpy as anp
from aotkit import _compat

real = _compat._private
closed = {("jaxlib.lapack", "registrations"), ("jaxlib.cpu._lapack", "initialize")}
_compat._private = lambda m, n="": None if (m, n) in closed else real(m, n)
a = np.array([[4.0, 2.0], [2.0, 3.0]], np.float32)
print(np.asarray(aotkit.jit(anp.linalg.cholesky)(a)).tolist())
print(np.asarray(aotkit.jit(anp.linalg.eigvalsh)(a)).tolist())
"""


def test_lapack_fallback_loads_the_kernels_in_a_fresh_process():
    # In this process LAPACK may be loaded already; a fresh one shows the fallback loads it
    # (running a LAPACK custom call without it crashes the process).
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(LAPACK_SCRIPT)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
    )
    assert done.returncode == 0, done.stderr
    a = np.array([[4.0, 2.0], [2.0, 3.0]], np.float32)
    cholesky, eigenvalues = (eval(line) for line in done.stdout.splitlines())
    np.testing.assert_allclose(cholesky, np.linalg.cholesky(a), rtol=1e-6)
    np.testing.assert_allclose(eigenvalues, np.linalg.eigvalsh(a), rtol=1e-6)


@pytest.mark.parametrize(
    "name", ["mlir.mlir_module_to_xla_computation", "hlo_module_cost_analysis"]
)
def test_lowered_cost_analysis_without_xlas_analysis_is_none(monkeypatch, name):
    lowered = aotkit.jit(lambda x: x @ x).lower(np.ones((4, 4), np.float32))
    assert lowered.cost_analysis()["flops"] == 128.0
    close(monkeypatch, ("jaxlib._jax", name))
    assert lowered.cost_analysis() is None
