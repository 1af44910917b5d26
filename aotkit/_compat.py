"""The one module that imports private jax/jaxlib names.

A jaxlib upgrade that moves any of these touches this file only. Everything else in
aotkit uses the public `jaxlib.mlir` bindings, `jax.tree_util` and `jax.extend`.

It imports nothing from aotkit at module level: `aotkit/frontends/_probe.py` loads this file
by path in a sandbox process that must start without importing aotkit.
"""

from __future__ import annotations

from jaxlib.mlir import ir
from jaxlib.mlir._mlir_libs import _jax_mlir_ext


def register_upstream_dialects(registry: ir.DialectRegistry) -> None:
    """Registers func, arith, ... (the upstream dialects jaxlib links in) into `registry`."""
    _jax_mlir_ext.register_dialects(registry)


def xla_client():
    """jaxlib's XLA client module: CompileOptions, DeviceList, plugin loading."""
    from jax._src.lib import xla_client

    return xla_client


# --- PJRT runtime accessors (aotkit/backends). jaxlib's C++ transfer and result-handling
# entry points are what JAX's own dispatch uses; going through `jax.device_put` instead
# costs ~100 µs per NumPy scalar.


def pjrt_backend(platform: str):
    """JAX's PJRT client for `platform` ('cpu', 'cuda', 'rocm', 'tpu'); starts it on first use."""
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
