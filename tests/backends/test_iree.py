"""The `iree` backend: compile with iree-compile, run with iree.runtime, keep the module's
meaning (f64, i64, the ops IREE computes against the spec), cross-compile, and fail cleanly.

Oracles: NumPy, and the `cpu` backend on the same module. Skipped as a whole without the
extra `aotkit[iree]`; `test_registry.py` covers the backend's absence.
"""

from __future__ import annotations

import threading
import warnings

import jax
import numpy as np
import pytest
from jaxlib.mlir import ir

import aotkit
import aotkit.numpy as anp
from aotkit import _context, backends, dtypes
from aotkit.backends import MemoryAnalysis
from aotkit.backends import iree as iree_backend
from aotkit.backends.base import ArgumentMismatch
from aotkit.errors import CompileError
from aotkit.specs import ShapeDtype
from tests.backends import modules
from tests.backends.test_cpu import _custom_call_module, same_bits, sample
from tests.helpers import IREE_MISSING, TOLERANCES, assert_matches

if not iree_backend.installed():
    pytest.skip(IREE_MISSING, allow_module_level=True)

ALL_DTYPES = list(dtypes.SHORT_NAMES)


@pytest.fixture(scope="module")
def iree():
    return backends.get("iree")


def both(fn, *args):
    """(cpu result, iree result) of `fn` lowered once for `args`, as NumPy trees."""
    lowered = aotkit.lower(fn, *args)
    got = lowered.compile("iree")(*args)
    want = lowered.compile("cpu")(*args)
    return jax.tree_util.tree_map(np.asarray, want), got


def assert_same_as_cpu(fn, *args):
    want, got = both(fn, *args)
    for w, g in zip(jax.tree_util.tree_leaves(want), jax.tree_util.tree_leaves(got), strict=True):
        assert isinstance(g, np.ndarray)
        assert g.dtype == w.dtype and g.shape == w.shape
        if w.dtype.kind in "biu":
            np.testing.assert_array_equal(g, w)
            continue
        numbers = ~np.isnan(w.astype(np.float64))  # the sign of a NaN is not specified
        np.testing.assert_array_equal(np.signbit(g[numbers]), np.signbit(w[numbers]))
        # Exact where the rewrites select a value; IREE's own accuracy elsewhere.
        rtol, _ = TOLERANCES[w.dtype]
        np.testing.assert_allclose(
            g.astype(np.float64), w.astype(np.float64), rtol=rtol, atol=0, equal_nan=True
        )


# -- registry and running ----------------------------------------------------------------------


def test_available_lists_iree_with_its_version(iree):
    infos = {info.name: info for info in backends.available()}
    assert infos["iree"].platform == "cpu"
    assert infos["iree"].version.startswith("IREE 3.13")
    assert infos["iree"].device_count == 1


@pytest.mark.parametrize("shape", [(), (1,), (2, 3), (0, 2)])
@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_identity_round_trips_every_dtype_bit_for_bit(iree, dtype, shape):
    x = sample(shape, dtype)
    (out,) = iree.compile(modules.identity(shape, dtype)).execute([x])
    assert isinstance(out, np.ndarray)
    assert same_bits(out, x)


def test_seed_program_matches_numpy(iree):
    exe = iree.compile(modules.seed())
    (out,) = exe.execute([np.float32(-3.0)])
    assert_matches(out, np.float32(4.0))
    assert exe.in_specs == (ShapeDtype((), "f32"),) and exe.out_specs == exe.in_specs


def test_float64_and_int64_are_not_demoted():
    # IREE demotes f64 to f32 by default: 1e-300 * 1e300 would then be inf * 0.
    x, n = np.array([1.0, 2.0, 3.0]), np.array([1, 2, 3], np.int64)
    out = aotkit.lower(lambda a, b: (a * 1e-300 * 1e300, b * 3_000_000_000), x, n).compile("iree")
    got = out(x, n)
    assert_matches(got[0], x * 1e-300 * 1e300)
    assert_matches(got[1], n * 3_000_000_000)


def test_complex128_constants_compile_with_float64_kept(iree):
    z = np.array([1 + 2j, 3 - 1j])
    table = np.array([1.5 - 2j, 0.25 + 3j])
    lowered = aotkit.lower(lambda a: a * table, z)
    assert_matches(lowered.compile("iree")(z), z * table)
    # IREE's defaults demote f64 to f32, and then the complex128 constant fails to verify.
    defaults = [f for f in iree._flags(None, iree._target(None), {}) if "demote" not in f]
    with pytest.raises(CompileError, match=r"'arith.constant' op failed to verify"):
        iree._run_compiler(lowered.as_text().encode(), defaults, "raw")


def test_jax_array_from_cpu_is_an_argument(iree):
    x = jax.device_put(np.arange(3, dtype=np.float32))
    (out,) = iree.compile(modules.identity((3,), "f32")).execute([x])
    np.testing.assert_array_equal(out, np.arange(3, dtype=np.float32))


def test_wrong_leaf_is_an_argument_mismatch(iree):
    exe = iree.compile(modules.identity((3,), "f32"))
    with pytest.raises(ArgumentMismatch) as info:
        exe.execute([jax.device_put(np.arange(3, dtype=np.int32))])
    assert info.value.reason == "expected f32[3], got i32[3]"


def test_concurrent_calls_give_their_own_results(iree):
    exe = iree.compile(modules.seed())
    results = {}

    def call(i):
        results[i] = exe.execute([np.float32(i)])[0]

    threads = [threading.Thread(target=call, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert {i: float(v) for i, v in results.items()} == {i: i + 1.0 for i in range(8)}


def test_failed_invocation_is_a_runtime_error(iree):
    def double(shape):
        return iree.compile(aotkit.lower(lambda x: x * 2, aotkit.spec(shape)).module)

    exe = double("f32[3]")
    # Run it on the loaded function of an f32[4] module: IREE's own argument check fails.
    exe._loaded = double("f32[4]")._state()
    with pytest.raises(
        RuntimeError,
        match=r"^backend 'iree': running module 'lambda' failed: input0 shape dimension 0 "
        r"mismatch; expected 4 but have 3",
    ):
        exe.execute([np.zeros(3, np.float32)])


# -- what IREE computes against the spec, rewritten (each case: raw IREE differs) --------------

SPECIAL = np.array([0.0, -0.0, 1.0, -1.0, 2.0, -2.0, 0.5, -3.0, np.inf, -np.inf, np.nan])


def _pairs(dtype):
    x, y = np.meshgrid(SPECIAL, SPECIAL)
    return x.ravel().astype(dtype), y.ravel().astype(dtype)


REWRITTEN = {
    "boolean add": (
        lambda x, y: (x + y, anp.sum(x)),
        lambda: (np.array([True, True, False, False]), np.array([True, False, True, False])),
    ),
    "float power f32": (lambda x, y: x**y, lambda: _pairs(np.float32)),
    "float power f64": (lambda x, y: x**y, lambda: _pairs(np.float64)),
    "float power bf16": (lambda x, y: x**y, lambda: _pairs(dtypes.bfloat16)),
    "atan2 f32": (anp.arctan2, lambda: _pairs(np.float32)),
    "atan2 f16": (anp.arctan2, lambda: _pairs(np.float16)),
    "cbrt of inf": (anp.cbrt, lambda: (SPECIAL.astype(np.float32),)),
    "float to int": (
        lambda x: (
            x.astype(np.int32),
            x.astype(np.uint8),
            x.astype(np.int8),
            x.astype(np.int64),
            x.astype(np.uint64),
        ),
        lambda: (np.array([1e30, -1e30, np.inf, -np.inf, np.nan, 300.0, -2.5, 127.9], np.float32),),
    ),
}


@pytest.mark.parametrize("case", REWRITTEN)
def test_rewritten_ops_match_cpu(case):
    fn, make = REWRITTEN[case]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert_same_as_cpu(fn, *make())


@pytest.mark.parametrize("case", REWRITTEN)
def test_raw_iree_gets_the_rewritten_cases_wrong(iree, case):
    # Why each rewrite exists: IREE 3.13 on the module as written differs from cpu. When
    # this fails, IREE has fixed the op and its rewrite in _iree_rewrites can go.
    fn, make = REWRITTEN[case]
    args = make()
    lowered = aotkit.lower(fn, *args)
    vmfb, _ = iree._run_compiler(
        lowered.as_text(debug_info=True).encode(), iree._flags(None, iree._target(None), {}), "raw"
    )
    raw = iree.load_executable(vmfb, lowered.flat_in_specs, lowered.flat_out_specs)
    want = [np.asarray(w) for w in lowered.compile("cpu").call_flat(list(args))]
    got = raw.execute(list(args))
    assert any(
        not np.array_equal(w, g, equal_nan=w.dtype.kind not in "biu")
        for w, g in zip(want, got, strict=True)
    )


# f32 bit patterns at bf16's edges: ties to even both ways, the largest f32 (rounds to inf),
# the largest value that stays finite, subnormals, NaNs of both signs and payloads.
BF16_EDGES = np.array(
    [
        0x3F808000,
        0x3F818000,
        0x3F808001,
        0x7F7FFFFF,
        0x7F7F7FFF,
        0xFF7FFFFF,
        0x00000001,
        0x00008000,
        0x00018000,
        0x807FFFFF,
        0x7F800000,
        0xFF800000,
        0x7FC00001,
        0xFFA12345,
        0x00000000,
        0x80000000,
    ],
    np.uint32,
).view(np.float32)


def _to_bf16_sources():
    rng = np.random.default_rng(7)
    bits = rng.integers(0, 2**32, 4096, dtype=np.uint32)
    return (
        np.concatenate([BF16_EDGES, bits.view(np.float32)]),
        np.array([2**24 + 2**16 + 1, -(2**31), 2**31 - 1, 0, 255, -7], np.int32),
        np.array([1 + 2**-8 + 2**-30, 1e300, -1e-300, 3.0e38, np.nan], np.float64),
        np.array([65504.0, -0.0, 6e-8, 1.0 / 3.0], np.float16),
        np.array([True, False]),
    )


def test_conversions_to_bfloat16_are_bit_exact_as_cpu():
    def fn(*xs):
        return tuple(x.astype(dtypes.bfloat16) for x in xs)

    args = _to_bf16_sources()
    got = aotkit.jit(fn, backend="iree")(*args)
    want = aotkit.jit(fn)(*args)
    for g, w in zip(got, want, strict=True):
        g, w = np.asarray(g), np.asarray(w)
        assert g.dtype == w.dtype == dtypes.bfloat16
        nan = np.isnan(w.astype(np.float32))
        assert np.isnan(g.astype(np.float32)[nan]).all()
        # NaN keeps its sign; every other value is the same bf16, bit for bit.
        assert np.array_equal(g.view(np.uint16)[nan] >> 15, w.view(np.uint16)[nan] >> 15)
        assert np.array_equal(g.view(np.uint16)[~nan], w.view(np.uint16)[~nan])


def test_conversion_to_bfloat16_compiles_for_a_cpu_without_bf16_instructions(iree):
    # Haswell has no AVX512-BF16: raw IREE calls __truncsfbf2, which its linker lacks.
    lowered = aotkit.lower(
        lambda x, i: (x.astype(dtypes.bfloat16), i.astype(dtypes.bfloat16)),
        np.ones(4, np.float32),
        np.ones(4, np.int32),
    )
    options = {"cpu": "haswell"}
    with pytest.raises(CompileError, match="__truncsfbf2"):
        iree._run_compiler(
            lowered.as_text(debug_info=True).encode(),
            iree._flags(None, iree._target(None), options),
            "raw",
        )
    exe = iree.compile(lowered.module, target_options=options)
    assert exe.rewritten == ("stablehlo.convert",)


def test_boolean_add_inside_a_reduce_body_is_rewritten(iree):
    # A boolean sum-reduce is "any" in StableHLO; IREE's xor gives the parity.
    module = modules.module(
        "any_by_add",
        ["tensor<4xi1>"],
        ["tensor<i1>"],
        """%c = stablehlo.constant dense<false> : tensor<i1>
        %0 = stablehlo.reduce(%a0 init: %c) applies stablehlo.add across dimensions = [0]
          : (tensor<4xi1>, tensor<i1>) -> tensor<i1>
        return %0 : tensor<i1>""",
    )
    x = np.array([True, True, False, False])
    exe = iree.compile(module)
    assert exe.rewritten == ("stablehlo.add",)
    assert bool(exe.execute([x])[0]) is True
    assert bool(backends.get("cpu").compile(module).execute([x])[0]) is True


def test_executable_names_the_ops_it_rewrote(iree):
    lowered = aotkit.lower(lambda x, y: (x**y, anp.arctan2(x, y)), *_pairs(np.float32))
    assert iree.compile(lowered.module).rewritten == ("stablehlo.atan2", "stablehlo.power")
    assert iree.compile(modules.seed()).rewritten == ()


# -- IREE's limitations and failures -------------------------------------------------------------


F64_MATH = {
    "sin": anp.sin,
    "cos": anp.cos,
    "tan": anp.tan,
    "tanh": anp.tanh,
    "arcsin": lambda x: anp.arcsin(x / 1e5),
    "arctan": anp.arctan,
    "arctan2": lambda x: anp.arctan2(x, x * 0.5 - 1),
    "fmod": lambda x: anp.fmod(x, 0.75),
    "mod": lambda x: x % 0.75,
    "floor_divide": lambda x: x // 0.75,
    "complex exp": lambda x: anp.exp(x * 1e-3 * 1j),
}


@pytest.mark.parametrize("name", F64_MATH)
def test_float64_math_links_the_host_math_library_and_matches_cpu(iree, name):
    # IREE's embedded ELF has no libm: these compile as a system library linked with it.
    x = np.concatenate([np.linspace(-20, 20, 41), [1e-300, -0.0, 1e5, 3.0e8]])
    lowered = aotkit.lower(F64_MATH[name], x)
    compiled = lowered.compile("iree")
    data = compiled.serialize()
    assert b"system-elf-" in data and b"embedded-elf-" not in data
    got, want = np.asarray(compiled(x)), np.asarray(lowered.compile("cpu")(x))
    assert got.dtype == want.dtype and got.dtype.itemsize >= 8
    np.testing.assert_allclose(got, want, rtol=1e-14, atol=1e-300)
    loaded = aotkit.load(data, recompile=False)
    np.testing.assert_array_equal(np.asarray(loaded(x)), got)


def test_float64_math_keeps_the_embedded_elf_where_it_does_not_call_libm(iree):
    compiled = aotkit.lower(lambda x: anp.exp(x) + anp.log(x), aotkit.spec("f64[3]")).compile(
        "iree"
    )
    data = compiled.serialize()
    assert b"embedded-elf-" in data and b"system-elf-" not in data


def test_float64_sine_with_the_embedded_elf_forced_is_a_named_iree_limitation():
    lowered = aotkit.lower(anp.sin, aotkit.spec("f64[3]"))
    with pytest.raises(
        CompileError,
        match=r"^backend 'iree' rejected module 'sin': IREE limitation: its llvm-cpu code calls "
        r"the C math library's sin\(\) .* \(iree-lld: error: undefined symbol: sin\); compute it "
        r"in a type IREE supports, or compile with backend='cpu'",
    ):
        lowered.compile("iree", options={"iree-llvmcpu-link-embedded": True})


def test_float64_sine_without_a_system_linker_is_a_named_iree_limitation(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # no ld, no cc
    lowered = aotkit.lower(anp.sin, aotkit.spec("f64[3]"))
    with pytest.raises(CompileError) as e:
        lowered.compile("iree")
    message = str(e.value)
    assert message.startswith(
        "backend 'iree' rejected module 'sin': IREE limitation: its llvm-cpu code calls the C "
        "math library, which IREE's embedded ELF does not link, and linking it as a system "
        "library with this host's libm failed: "
    ), message
    assert "failed to link executable" in message
    assert "; install a system linker (binutils' ld) or compile with backend='cpu'" in message


def test_float64_cbrt_is_rewritten_and_within_4_ulp_of_cpu(iree):
    # IREE has no float64 cbrt; the rewrite's special values are exact, the rest within 4 ulp.
    rng = np.random.default_rng(3)
    x = np.concatenate(
        [
            rng.standard_normal(4000) * 10.0 ** rng.integers(-300, 300, 4000),
            [0.0, -0.0, np.inf, -np.inf, np.nan, 27.0, -8.0, 1e-310, -3e-320, 1.7e308],
        ]
    )
    lowered = aotkit.lower(anp.cbrt, x)
    got, want = np.asarray(lowered.compile("iree")(x)), np.asarray(lowered.compile("cpu")(x))
    assert got.dtype == want.dtype == np.float64
    normal = np.isfinite(want) & (want != 0)
    ulps = np.abs(got[normal] - want[normal]) / np.spacing(np.abs(want[normal]))
    assert ulps.max() <= 4, ulps.max()
    special = ~normal
    assert np.array_equal(got[special], want[special], equal_nan=True)
    assert np.array_equal(np.signbit(got[special]), np.signbit(want[special]))


def test_rejected_module_is_a_compile_error_with_the_diagnostic(iree):
    with pytest.raises(
        CompileError,
        match=r"^backend 'iree' rejected module 'needs_target': .*error: failed to legalize "
        r"operation 'stablehlo.custom_call'",
    ) as info:
        iree.compile(_custom_call_module())
    assert info.value.backend == "iree" and info.value.module_name == "needs_target"
    assert "stablehlo.custom_call" in str(info.value.__cause__)


def test_compiler_crash_is_a_compile_error(iree):
    # iree-compile 3.13 segfaults on an unknown CUDA target name; the child process dies.
    with pytest.raises(
        CompileError,
        match=r"^backend 'iree' rejected module 'seed': iree-compile crashed \(SIG[A-Z]+\): "
        r".*Unknown CUDA target 'h100'; this is an IREE bug, compile with backend='cpu'",
    ):
        iree.compile(modules.seed(), target="cuda", target_options={"arch": "h100"})


def test_missing_compiler_is_a_compile_error(iree, monkeypatch):
    monkeypatch.setattr(iree, "_compiler", "/nonexistent/iree-compile")
    with pytest.raises(
        CompileError,
        match=r"^backend 'iree' could not start iree-compile \(/nonexistent/iree-compile\): "
        r"No such file or directory; reinstall it with pip install 'aotkit\[iree\]'",
    ):
        iree.compile(modules.seed())


def test_module_that_does_not_verify_is_a_compile_error(iree):
    module = modules.identity((3,), "f32")
    main = module.body.operations[0]
    with _context.of(module):
        f32 = [ir.Type.parse("tensor<3xf32>")]
        f32x4 = [ir.Type.parse("tensor<4xf32>")]
        main.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(f32, f32x4))
    with pytest.raises(
        CompileError, match=r"^backend 'iree' rejected module 'identity': it does not verify: "
    ):
        iree.compile(module)


# -- options -----------------------------------------------------------------------------------


def test_iree_compile_flags_pass_through(iree):
    exe = iree.compile(
        modules.seed(), {"iree-opt-level": "O1", "--iree-opt-strip-assertions": True}
    )
    assert "--iree-opt-level=O1" in exe._flags
    assert "--iree-opt-strip-assertions=true" in exe._flags
    assert float(exe.execute([np.float32(2.0)])[0]) == 3.0


def test_unknown_flag_is_a_value_error(iree):
    with pytest.raises(
        ValueError,
        match=r"^backend 'iree': compile options rejected: iree-compile: Unknown command line "
        r"argument '--no-such-flag=1'.*; options are iree-compile flags without the leading "
        r"'--', e.g. \{'iree-opt-level': 'O3'\}",
    ):
        iree.compile(modules.seed(), {"no-such-flag": 1})


BAD_OPTIONS = [
    (["iree-opt-level"], TypeError, r"options must be a dict of iree-compile flags, got list"),
    ({1: "x"}, TypeError, r"option name 1 is not a string; use flag names"),
    ({"a b": "x"}, ValueError, r"option name 'a b' is not an iree-compile flag name"),
    ({"iree-opt-level": [3]}, TypeError, r"option 'iree-opt-level' has a list value \[3\]"),
    ({"iree-opt-level": "O3\nx"}, ValueError, r"option 'iree-opt-level' value 'O3\\nx' spans"),
    (
        {"iree-hal-target-device": "cuda"},
        ValueError,
        r"option 'iree-hal-target-device' is set by aotkit; use target=",
    ),
    (
        {"iree-llvmcpu-target-cpu": "generic"},
        ValueError,
        r"option 'iree-llvmcpu-target-cpu' is set by aotkit; use target_options=",
    ),
    (
        {"iree-input-demote-f64-to-f32": True},
        ValueError,
        r"option 'iree-input-demote-f64-to-f32' converts element types, so the executable would "
        r"not have the module's signature",
    ),
    (
        {"iree-input-promote-bf16-to-f32": "true"},
        ValueError,
        r"option 'iree-input-promote-bf16-to-f32' converts element types",
    ),
]


@pytest.mark.parametrize(("options", "kind", "message"), BAD_OPTIONS, ids=str)
def test_bad_options_are_refused_before_compiling(iree, monkeypatch, options, kind, message):
    monkeypatch.setattr(iree, "_compiler", "/nonexistent/iree-compile")  # never reached
    with pytest.raises(kind, match=r"^backend 'iree': " + message):
        iree.compile(modules.seed(), options)


def test_demotion_may_be_turned_off_explicitly(iree):
    exe = iree.compile(modules.seed(), {"iree-input-demote-f64-to-f32": False})
    assert float(exe.execute([np.float32(1.0)])[0]) == 2.0


# -- targets and cross-compilation -------------------------------------------------------------


def _driver_present(driver: str) -> bool:
    import iree.runtime as rt

    try:
        rt.get_driver(driver).create_default_device()
    except (RuntimeError, ValueError):
        return False
    return True


@pytest.mark.parametrize(
    ("target", "options", "driver"),
    [
        ("cuda", {"arch": "sm_80"}, "cuda"),
        ("rocm", {"arch": "gfx942"}, "hip"),
        ("vulkan-spirv", {}, "vulkan"),
    ],
)
def test_cross_compiles_without_the_device_and_says_so_when_run(target, options, driver):
    if _driver_present(driver):
        pytest.skip(f"this machine has a {driver} device; the missing-device error cannot show")
    lowered = aotkit.lower(lambda x: anp.tanh(x) @ x.T, aotkit.spec("f32[4,8]"))
    compiled = lowered.compile("iree", target=target, target_options=options)
    exe = compiled._executable
    assert exe.target == target and len(exe.vmfb) > 1000
    with pytest.raises(
        RuntimeError,
        match=rf"^backend 'iree': module 'lambda' was compiled for target '{target}', which runs "
        rf"on IREE's '{driver}' driver, and that driver has no device here: .+; run it on a "
        r"machine with that device, or compile with target='llvm-cpu' to run here$",
    ):
        compiled(np.ones((4, 8), np.float32))


def test_foreign_cpu_triple_compiles_and_refuses_to_run_here():
    lowered = aotkit.lower(lambda x: x * 2, aotkit.spec("f32[3]"))
    compiled = lowered.compile(
        "iree", target="llvm-cpu", target_options={"triple": "aarch64-unknown-linux-gnu"}
    )
    with pytest.raises(
        RuntimeError,
        match=r"^backend 'iree': module 'lambda' was compiled for target 'llvm-cpu', which this "
        r"machine's 'local-task' device cannot run: HAL device `__device_0` not found or "
        r"unavailable; run it on a machine of that target",
    ):
        compiled(np.ones(3, np.float32))


def test_generic_cpu_runs_here():
    lowered = aotkit.lower(lambda x: x * 2, aotkit.spec("f32[3]"))
    compiled = lowered.compile("iree", target="llvm-cpu", target_options={"cpu": "generic"})
    np.testing.assert_array_equal(compiled(np.ones(3, np.float32)), np.full(3, 2, np.float32))


def test_target_keys_the_compile_cache():
    def f(x):
        return x + 1

    lowered = aotkit.jit(f).lower(aotkit.spec("f32[]"))
    host = lowered.compile("iree")
    generic = lowered.compile("iree", target="llvm-cpu", target_options={"cpu": "generic"})
    assert generic is not host
    assert lowered.compile("iree", target_options={"cpu": "generic"}, target="llvm-cpu") is generic


BAD_TARGETS = [
    ({"target": "tpu"}, ValueError, r"unknown target 'tpu'; targets are llvm-cpu, cuda, rocm, "),
    (
        {"target": "cuda", "target_options": {"cpu": "x"}},
        ValueError,
        r"target 'cuda' has no option 'cpu'; its options are arch, features",
    ),
    (
        {"target": "cuda", "target_options": {"arch": 80}},
        TypeError,
        r"target option 'arch' must be a non-empty one-line str, got 80",
    ),
    (
        {"target": "cuda", "target_options": ["sm_80"]},
        TypeError,
        r"target_options must be a dict, got list",
    ),
]


@pytest.mark.parametrize(("kwargs", "kind", "message"), BAD_TARGETS, ids=str)
def test_bad_targets_are_refused(kwargs, kind, message):
    lowered = aotkit.lower(lambda x: x, aotkit.spec("f32[]"))
    with pytest.raises(kind, match=r"^backend 'iree': " + message):
        lowered.compile("iree", **kwargs)


@pytest.mark.parametrize(
    ("backend", "kwargs", "given"),
    [
        ("cpu", {"target": "cuda"}, "target='cuda'"),
        (
            "interpreter",
            {"target_options": {"arch": "sm_80"}},
            r"target_options=\{'arch': 'sm_80'\}",
        ),
    ],
)
def test_other_backends_refuse_targets(backend, kwargs, given):
    lowered = aotkit.lower(lambda x: x, aotkit.spec("f32[]"))
    with pytest.raises(
        ValueError,
        match=rf"^Lowered.compile\(lambda\): {given} applies to backend='iree', which "
        rf"cross-compiles; backend '{backend}' compiles for its own devices; drop it or compile "
        r"with backend='iree'$",
    ):
        lowered.compile(backend, **kwargs)


# -- views ---------------------------------------------------------------------------------------


def test_as_text_is_the_flow_phase_with_dispatches():
    lowered = aotkit.lower(
        lambda x, w: anp.tanh(x @ w), aotkit.spec("f32[4,8]"), aotkit.spec("f32[8,2]")
    )
    text = lowered.compile("iree").as_text()
    assert "flow.executable" in text and "flow.dispatch" in text
    assert "matmul" in text


def test_cost_analysis_is_none():
    assert (
        aotkit.lower(lambda x: x + 1, aotkit.spec("f32[]")).compile("iree").cost_analysis() is None
    )


def test_memory_analysis_reports_sizes(iree):
    exe = iree.compile(modules.identity((2, 3), "f64"))
    memory = exe.memory_analysis()
    assert isinstance(memory, MemoryAnalysis)
    assert memory.argument_size_in_bytes == 48 and memory.output_size_in_bytes == 48
    assert memory.alias_size_in_bytes == 0
    assert memory.temp_size_in_bytes >= 0
    assert memory.generated_code_size_in_bytes == len(exe.vmfb)


def test_runtime_executable_is_the_vm_context_and_main(iree):
    import iree.runtime as rt

    vm_context, function = iree.compile(modules.seed()).runtime_executable()
    assert isinstance(vm_context, rt.VmContext) and function.name == "main"


# -- vmfb round trip (what Compiled.serialize will store) ---------------------------------------


def test_vmfb_round_trips_through_bytes(iree):
    lowered = aotkit.lower(
        lambda x, n: (anp.exp(x) * 2, n + 1), aotkit.spec("f32[3]"), aotkit.spec("i64[2]")
    )
    exe = iree.compile(lowered.module)
    data = bytes(exe.vmfb)
    again = iree.load_executable(
        data, exe.in_specs, exe.out_specs, name=exe.name, source=exe._source
    )
    args = [np.arange(3, dtype=np.float32), np.array([1, 2**40], np.int64)]
    for got, want in zip(again.execute(args), exe.execute(args), strict=True):
        assert same_bits(got, want)
    assert again.as_text() == exe.as_text()
    assert again.memory_analysis() is None


@pytest.mark.parametrize("dtype", ["c64", "c128", "bf16", "bool"])
def test_vmfb_of_every_element_type_loads_back(iree, dtype):
    # The signature check reads IREE's declaration; complex<f32> nests a second <...>.
    exe = iree.compile(modules.identity((2, 3), dtype))
    again = iree.load_executable(exe.vmfb, exe.in_specs, exe.out_specs, name=exe.name)
    x = np.ones((2, 3), exe.in_specs[0].dtype)
    (got,) = again.execute([x])
    assert got.dtype == x.dtype
    np.testing.assert_array_equal(got, x)


def test_loaded_without_source_says_where_the_text_went(iree):
    exe = iree.compile(modules.seed())
    again = iree.load_executable(exe.vmfb, exe.in_specs, exe.out_specs, name="seed")
    assert again.as_text().startswith(
        "// IREE module 'seed' loaded from a vmfb without its StableHLO source; pass source= to "
        "IreeBackend.load_executable for IREE's IR"
    )


def test_load_executable_checks_the_specs(iree):
    exe = iree.compile(modules.identity((3,), "u8"))
    with pytest.raises(
        ValueError,
        match=r"^IreeBackend.load_executable: the vmfb's main is \(tensor<3xui8>\) -> "
        r"\(tensor<3xui8>\), but the specs say \(tensor<3xi8>\) -> \(tensor<3xui8>\); pass the "
        r"specs it was compiled with$",
    ):
        iree.load_executable(exe.vmfb, [aotkit.spec("i8[3]")], exe.out_specs)


@pytest.mark.parametrize(
    ("vmfb", "specs", "kind", "message"),
    [
        ("abc", [], TypeError, r"vmfb must be bytes, got str"),
        (
            b"not a module at all",
            [],
            ValueError,
            r"the bytes are not an IREE module: .+; pass the ",
        ),
        (None, ["f32[]"], TypeError, r"specs must be aotkit.ShapeDtype values, got 'f32\[\]'"),
    ],
    ids=["str", "garbage", "spec text"],
)
def test_load_executable_refuses_bad_input(iree, vmfb, specs, kind, message):
    vmfb = iree.compile(modules.seed()).vmfb if vmfb is None else vmfb
    with pytest.raises(kind, match=r"^IreeBackend.load_executable: " + message):
        iree.load_executable(vmfb, specs, [])


def test_load_executable_needs_a_main(iree):
    text = (
        b"module @other { "
        b"func.func @f(%a: tensor<f32>) -> tensor<f32> { return %a : tensor<f32> } }"
    )
    vmfb, _ = iree._run_compiler(text, iree._flags(None, iree._target(None), {}), "other")
    with pytest.raises(
        ValueError,
        match=r"^IreeBackend.load_executable: the IREE module 'other' has no function 'main' "
        r"\(it has f\); pass a vmfb compiled by aotkit$",
    ):
        iree.load_executable(vmfb, [], [])


def test_missing_compiler_tool_names_the_extra(monkeypatch):
    from iree.compiler.tools import binaries

    def no_tool(name):
        raise ValueError(f"IREE compiler tool '{name}' is not installed")

    monkeypatch.setattr(binaries, "find_tool", no_tool)
    with pytest.raises(
        ValueError,
        match=r"^backends.get: backend 'iree' has no iree-compile tool: IREE compiler tool "
        r"'iree-compile' is not installed; reinstall it with pip install 'aotkit\[iree\]'",
    ):
        iree_backend.create()


# --- artifacts: the vmfb in aotkit's container ------------------------------------------------


def test_artifact_holds_the_vmfb_and_loads_in_a_fresh_process(tmp_path):
    import subprocess
    import sys

    from aotkit import artifacts

    lowered = aotkit.lower(
        lambda x, y: (anp.tanh(x) @ y, x.sum()), sample((3, 4), "f32"), sample((4, 2), "f32")
    )
    compiled = lowered.compile("iree")
    path = tmp_path / "f.aotx"
    compiled.save(path)
    artifact = artifacts.unpack(path.read_bytes(), str(path))
    assert artifact.executable_format == "iree-vmfb"
    assert artifact.section(artifacts.EXECUTABLE) == compiled._executable.vmfb
    assert artifact.target["target"] == "llvm-cpu" and "host" in artifact.target
    x, y = sample((3, 4), "f32"), sample((4, 2), "f32")
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    code = (
        "import sys, numpy as np, aotkit\n"
        "c = aotkit.load(sys.argv[1])\n"
        "a, b = c(np.load(sys.argv[2]), np.load(sys.argv[3]))\n"
        "print(c.origin, c.backend.name)\n"
        "np.save(sys.argv[4], np.asarray(a))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(path), str(tmp_path / "x.npy"), str(tmp_path / "y.npy"),
         str(tmp_path / "out.npy")],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert out.stdout.split() == ["artifact", "iree"]
    np.testing.assert_array_equal(np.load(tmp_path / "out.npy"), np.asarray(compiled(x, y)[0]))


def test_cross_compiled_artifact_loads_as_it_is_and_needs_its_device_to_run(tmp_path):
    if _driver_present("cuda"):
        pytest.skip("this machine has a cuda device; the missing-device error cannot show")
    lowered = aotkit.lower(lambda x: x * 2, aotkit.spec("f32[3]"))
    compiled = lowered.compile("iree", target="cuda", target_options={"arch": "sm_80"})
    loaded = aotkit.load(compiled.serialize(), recompile=False)
    assert loaded.origin == "artifact"
    assert loaded._executable.target == "cuda"
    assert loaded._executable.vmfb == compiled._executable.vmfb
    with pytest.raises(RuntimeError, match=r"was compiled for target 'cuda'"):
        loaded(np.ones(3, np.float32))
