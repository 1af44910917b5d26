"""The one module that imports private jax/jaxlib names.

A jaxlib upgrade that moves any of these touches this file only. Everything else in
aotkit uses the public `jaxlib.mlir` bindings, `jax.tree_util` and `jax.extend`.

It imports nothing from aotkit at module level: `aotkit/frontends/_probe.py` loads this file
by path in a sandbox process that must start without importing aotkit.
"""

from __future__ import annotations

import threading

from jaxlib.mlir import ir
from jaxlib.mlir._mlir_libs import _jax_mlir_ext


def register_upstream_dialects(registry: ir.DialectRegistry) -> None:
    """Registers func, arith, ... (the upstream dialects jaxlib links in) into `registry`."""
    _jax_mlir_ext.register_dialects(registry)


def make_context() -> ir.Context:
    """A new MLIR context with every dialect aotkit reads or writes, and StableHLO's passes.

    aotkit's own context (`aotkit._context`) and the file-parsing sandbox process
    (`aotkit/frontends/_probe.py`) both come from here, so what parses in one parses in the
    other.
    """
    from jaxlib.mlir.dialects import chlo, sdy, stablehlo

    registry = ir.DialectRegistry()
    register_upstream_dialects(registry)
    ctx = ir.Context()
    ctx.append_dialect_registry(registry)
    ctx.load_all_available_dialects()
    stablehlo.register_dialect(ctx)
    chlo.register_dialect(ctx)
    # JAX annotates ops (custom calls above all) with Shardy attributes even on one device;
    # without the dialect its modules and exports do not parse.
    sdy.register_dialect(ctx)
    stablehlo.register_stablehlo_passes()
    return ctx


_lapack_lock = threading.Lock()
_lapack_registered = False


def register_lapack_targets() -> None:
    """Makes jaxlib's LAPACK custom-call targets (`lapack_spotrf_ffi`, ...) runnable on CPU.

    Loads the LAPACK kernels (jaxlib takes them from SciPy, ~0.1 s once) and registers every
    target jaxlib provides with XLA's CPU custom-call registry, as `jax._src.lax.linalg`
    does when JAX lowers a linalg op. Without the first step, running such a call crashes
    the process. Idempotent and thread-safe; call it before compiling a module that uses
    them (the `cpu` backend does).
    """
    global _lapack_registered
    if _lapack_registered:
        return
    with _lapack_lock:
        if _lapack_registered:
            return
        from jaxlib import lapack
        from jaxlib import xla_client as xc

        lapack._lapack.initialize()
        for platform, targets in lapack.registrations().items():
            for name, fn, api_version in targets:
                xc.register_custom_call_target(name, fn, platform, api_version)
        _lapack_registered = True


def xla_client():
    """jaxlib's XLA client module: CompileOptions, DeviceList, plugin loading."""
    from jax._src.lib import xla_client

    return xla_client


# --- PJRT runtime accessors (aotkit/backends). jaxlib's C++ transfer and result-handling
# entry points are what JAX's own dispatch uses; going through `jax.device_put` instead
# costs ~100 µs per NumPy scalar.


def pjrt_backend(platform: str):
    """JAX's PJRT client for `platform` ('cpu', 'cuda', 'rocm', 'tpu'); starts it on first use.

    From `jax._src.xla_bridge` when it is there: the public `jax.extend.backend` imports
    `jax.extend` whole (Pallas included), ~20 ms of a process that only loads an artifact.
    """
    try:
        from jax._src.xla_bridge import get_backend
    except ImportError:
        from jax.extend.backend import get_backend

    return get_backend(platform)


def array_type() -> type:
    """The concrete class of the device arrays PJRT backends return (jax.Array's ArrayImpl)."""
    from jaxlib import _jax

    return _jax.ArrayImpl


def runtime_error_type() -> type:
    """The exception jaxlib raises for runtime and compile failures."""
    from jax.errors import JaxRuntimeError

    return JaxRuntimeError


def single_device_sharding(device):
    from jax.sharding import SingleDeviceSharding

    return SingleDeviceSharding(device)


def shaped_array(shape: tuple[int, ...], dtype):
    """The abstract value jaxlib's transfer and result handlers attach to an array."""
    from jax._src.core import ShapedArray

    return ShapedArray(shape, dtype)


def host_to_device(aval, sharding, device):
    """A function `put(ndarray) -> device array` for one argument slot.

    The data is copied during the call (IMMUTABLE_ONLY_DURING_CALL with a forced copy): the
    device array is ready at once, so execution does not wait on an asynchronous copy of an
    unaligned NumPy buffer (measured ~5-10 µs per call for a 0-d array), and it never aliases
    memory the caller may mutate or donate. x64 is forced on: the slot's dtype was fixed at
    compile time, and JAX's global `jax_enable_x64=False` must not narrow float64 to float32.
    """
    from jaxlib import _jax

    put = _jax.batched_device_put
    devices = [device]
    during_call = _jax.HostBufferSemantics.IMMUTABLE_ONLY_DURING_CALL

    def device_put(x):
        return put(aval, sharding, [x], devices, True, True, during_call, enable_x64=True)

    return device_put


def result_handler(aval, sharding):
    """jaxlib's C++ handler that wraps one output buffer as a device array."""
    from jaxlib import _jax

    return _jax.array_result_handler(aval, sharding, committed=True, _skip_checks=True)


def compile_options(overrides: dict[str, object]):
    """XLA CompileOptions with `overrides` as XLA debug-option flags (env_option_overrides)."""
    xc = xla_client()
    options = xc.CompileOptions()
    if overrides:
        options.env_option_overrides = list(overrides.items())
    return options


def device_list(devices):
    return xla_client().DeviceList(tuple(devices))


def load_pjrt_plugin(name: str, path: str) -> None:
    """dlopens a PJRT plugin library and initializes it under `name`."""
    xc = xla_client()
    if not xc.pjrt_plugin_loaded(name):
        xc.load_pjrt_plugin_dynamically(name, path)
    if not xc.pjrt_plugin_initialized(name):
        xc.initialize_pjrt_plugin(name)


def plugin_client(name: str):
    """A PJRT C API client for a plugin loaded with `load_pjrt_plugin`."""
    return xla_client().make_c_api_client(name)


def exclude_from_jax_locations(path: str) -> None:
    """Makes the source locations JAX attaches to ops skip frames under `path`.

    The JAX front end calls `jax.jit(fn).lower` from inside aotkit; without this, every op's
    location is a call stack through aotkit's own files before it reaches the user's line.
    """
    from jax._src import source_info_util

    source_info_util.register_exclusion(path)


# --- jaxlib's C++ dispatch loop, the one JAX's own `Compiled.__call__` runs on. aotkit hands
# it a cache-miss function (aotkit's checked Python call) and, for argument signatures the C++
# transfer converts exactly as compiled, the executable and result handling it then runs
# without entering Python.


def x64_switch():
    """(swap, restore) for JAX's x64 mode on this thread: `previous = swap(True)` turns it on,
    `restore(previous)` puts back what was there (including "not set here")."""
    from jax._src import config

    return config.enable_x64.swap_local, config.enable_x64.set_local


def cpp_dispatcher(name: str, fun, cache_miss):
    """A C++ callable that runs `cache_miss(*args, **kwargs) -> (out, fastpath, False)` on
    new argument signatures and the cached fast path on known ones; `fun` runs when JAX's
    `disable_jit` is on. None when this jaxlib lacks the entry point."""
    try:
        from jax._src import tree_util
        from jax._src.interpreters import pxla
        from jaxlib import _jax

        return _jax.pjit(
            name,
            fun,
            cache_miss,
            [],
            [],
            pxla.JitGlobalCppCacheKeys(),
            tree_util.dispatch_registry,
            pxla.cc_shard_arg,
        )
    except (ImportError, AttributeError, TypeError):
        return None


def fastpath_data(executable, out, n_args: int, in_sharding, out_sharding):
    """What jaxlib's C++ dispatch caches to run `executable` again for one signature.

    `out` is the result pytree of the call that is being cached (its leaves are device
    arrays); every argument is kept and lives on `in_sharding`'s single device.
    """
    from jax._src import tree_util
    from jax._src.interpreters import pxla

    out_flat, out_tree = tree_util.dispatch_registry.flatten(out, None)
    return pxla.MeshExecutableFastpathData(
        executable,
        out_tree,
        [in_sharding] * n_args,
        [out_sharding] * len(out_flat),
        [o.aval for o in out_flat],
        [o._committed for o in out_flat],
        [True] * n_args,
        [None] * n_args,
        [],
    )


# --- SPMD: sharded programs over several devices and processes (issue 17) ---------------------
# Used by aotkit/backends/pjrt_spmd.py and aotkit/distributed.py only; the single-device entry
# points above do not depend on anything here. Each function names the private jax/jaxlib
# thing it stands for.


def spmd_compile_options(overrides: dict[str, object], device_ids: list[int], shardy: bool):
    """CompileOptions for XLA's SPMD partitioner: one replica, `len(device_ids)` partitions
    placed on those devices in order, Shardy's partitioner when the module is annotated with
    Shardy (`sdy.mesh`), GSPMD's otherwise. (`xla_client.CompileOptions`, `DeviceAssignment`.)"""
    import numpy as np

    xc = xla_client()
    options = xc.CompileOptions()
    if overrides:
        options.env_option_overrides = list(overrides.items())
    options.num_replicas = 1
    options.num_partitions = len(device_ids)
    build = options.executable_build_options
    build.use_spmd_partitioning = True
    build.use_shardy_partitioner = shardy
    assignment = np.asarray(device_ids, dtype=np.int64).reshape(1, len(device_ids))
    options.device_assignment = xc.DeviceAssignment.create(assignment)
    return options


def compiled_shardings(executable) -> tuple[list, list]:
    """The HloShardings XLA chose for an SPMD executable's parameters and results (None for
    each when it reports none: one partition). (`xla_client.HloSharding.from_proto`.)"""
    xc = xla_client()

    def convert(protos, n):
        if protos is None:
            return [xc.HloSharding.replicate()] * n
        replicated = xc.HloSharding.replicate()
        return [replicated if p is None else xc.HloSharding.from_proto(p) for p in protos]

    n_in = len(executable.get_parameter_layouts())
    n_out = len(executable.get_output_layouts())
    return (
        convert(executable.get_parameter_shardings(), n_in),
        convert(executable.get_output_shardings(), n_out),
    )


def hlo_sharding(sharding, ndim: int):
    """The HloSharding of a jax.sharding.Sharding for an array of rank `ndim`
    (`Sharding._to_xla_hlo_sharding`)."""
    return sharding._to_xla_hlo_sharding(ndim)


def gspmd_sharding(devices, hlo):
    """A jax Sharding for an HloSharding over `devices` (jaxlib's `GSPMDSharding`), for results
    of a module whose shardings name no mesh."""
    from jaxlib import _jax

    return _jax.GSPMDSharding(tuple(devices), hlo)


def named_sharding_from_hlo(hlo, mesh):
    """The PartitionSpec over `mesh` that an HloSharding stands for, or None when it has none
    (`sharding_impls.parse_flatten_op_sharding`)."""
    from jax._src.sharding_impls import parse_flatten_op_sharding

    try:
        return parse_flatten_op_sharding(hlo, mesh)[0]
    except Exception:  # a sharding the mesh cannot express (JAX raises several kinds)
        return None


def spmd_fastpath_data(executable, out, in_shardings, out_shardings):
    """What jaxlib's C++ dispatch caches to run a sharded `executable` again: like
    `fastpath_data`, with one sharding per argument and per result."""
    from jax._src import tree_util
    from jax._src.interpreters import pxla

    out_flat, out_tree = tree_util.dispatch_registry.flatten(out, None)
    n = len(in_shardings)
    return pxla.MeshExecutableFastpathData(
        executable,
        out_tree,
        list(in_shardings),
        list(out_shardings),
        [o.aval for o in out_flat],
        [o._committed for o in out_flat],
        [True] * n,
        [None] * n,
        [],
    )


def sharded_device_put(aval, sharding, shards, devices):
    """A global array from one host array per addressable device (`batched_device_put`).

    jaxlib 0.10.2 raises `RuntimeError: bad_function_call` for several shards with any host
    buffer semantics but the default zero-copy one, so the caller passes copies it owns.
    """
    from jaxlib import _jax

    return _jax.batched_device_put(aval, sharding, shards, devices, True, enable_x64=True)


def backends_started() -> bool:
    """Whether JAX's PJRT clients have started (`xla_bridge.backends_are_initialized`)."""
    from jax._src import xla_bridge

    return xla_bridge.backends_are_initialized()
