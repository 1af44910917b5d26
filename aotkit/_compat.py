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


def jit_options(fn):
    """`(function, static_argnums, static_argnames, donate_argnums)` that `jax.jit` was given
    for the jitted function `fn`, or None when this jax does not say (the JAX front end then
    lowers `fn` as it is, without knowing its static arguments)."""
    info = getattr(fn, "_jit_info", None)
    fun = getattr(fn, "_fun", None)
    try:
        return (
            fun,
            tuple(info.static_argnums),
            tuple(info.static_argnames),
            tuple(info.donate_argnums),
        )
    except (AttributeError, TypeError):
        return None


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
