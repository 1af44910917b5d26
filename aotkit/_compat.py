"""The one module that imports private jax/jaxlib names.

Written against jax/jaxlib 0.10, 0.11 and 0.12. Everything else in aotkit uses public API
(`jaxlib.mlir`, `jax.tree_util`, `jax.extend`, `jax.export`, `jax.sharding`); a jaxlib
upgrade that moves a private name touches this file only.

Each private name is looked up through `_private`, and checked (parameter names, fields)
before use where a changed signature would otherwise fail late or silently. When a name is
missing or its signature is not the one written against, the entry point that needs it
takes a public fallback with the same results and errors, only slower: a future jaxlib
costs speed, never correctness. `fast_paths()` says which entry points run on private
names in this process; docs/compat.md lists each name, why it is used and its fallback.

The one exception is the PJRT runtime API that the `cpu` and plugin backends are built on
(a client's `compile_and_load`, an executable's `execute_sharded`): there is no public
equivalent, so it is used as `jax.extend.backend.get_backend` hands it out.

It imports nothing from aotkit at module level: `aotkit/frontends/_probe.py` loads this file
by path in a sandbox process that must start without importing aotkit.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import operator
import threading

from jaxlib.mlir import ir


def _private(module: str, name: str = ""):
    """`module.name` (`name` may be dotted; empty for the module itself), or None where this
    jax/jaxlib has no such thing.

    Every private lookup goes through here, so tests can take any one away
    (tests/test_compat.py) and check that its fallback gives the same results.
    """
    try:
        found = importlib.import_module(module)
    except ImportError:
        return None
    for part in name.split(".") if name else ():
        found = getattr(found, part, None)
        if found is None:
            return None
    return found


@functools.lru_cache(maxsize=64)
def _parameters(fn) -> tuple[str, ...] | None:
    """The parameter names of a jaxlib (nanobind) or Python function; None if it does not say."""
    signatures = getattr(fn, "__nb_signature__", None)
    if signatures:
        return _parse_parameters(signatures[0][0])
    try:
        return tuple(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return None


def _parse_parameters(text: str) -> tuple[str, ...] | None:
    """Names from nanobind's `def name(a: T[x, y], b: U = \\0, *, c: V) -> R`."""
    start = text.find("(")
    if start < 0:
        return None
    names, depth, current = [], 0, ""
    for char in text[start + 1 :]:
        if char in "([{":
            depth += 1
        elif char in ")]}":
            if depth == 0:
                break
            depth -= 1
        if char == "," and depth == 0:
            names.append(current)
            current = ""
        else:
            current += char
    names.append(current)
    parsed = []
    for part in names:
        name = part.split(":")[0].split("=")[0].strip().lstrip("*")
        if name and name != "/":
            parsed.append(name)
    return tuple(parsed)


def _takes(fn, expected: tuple[str, ...]) -> bool:
    """Whether `fn`'s parameters start with `expected`, in that order."""
    params = _parameters(fn)
    return params is not None and params[: len(expected)] == expected


def _jaxlib_version() -> str:
    import jaxlib

    return getattr(jaxlib, "__version__", "?")


# --- MLIR contexts -------------------------------------------------------------------------


def make_context() -> ir.Context:
    """A new MLIR context with every dialect aotkit reads or writes, and StableHLO's passes.

    aotkit's own context (`aotkit._context`) and the file-parsing sandbox process
    (`aotkit/frontends/_probe.py`) both come from here, so what parses in one parses in the
    other.

    Private: `jaxlib.mlir._mlir_libs._jax_mlir_ext.register_dialects`, which registers the
    upstream dialects (func, arith, ...) jaxlib links in. Fallback: JAX's own context
    (`jax.interpreters.mlir.make_ir_context`, which registers the same ones), at the cost of
    importing JAX in the sandbox process.
    """
    from jaxlib.mlir.dialects import chlo, sdy, stablehlo

    register = _private("jaxlib.mlir._mlir_libs._jax_mlir_ext", "register_dialects")
    ctx = None
    if register is not None:
        registry = ir.DialectRegistry()
        try:
            register(registry)
        except TypeError:
            pass
        else:
            ctx = ir.Context()
            ctx.append_dialect_registry(registry)
    if ctx is None:
        from jax.interpreters import mlir as jax_mlir

        ctx = jax_mlir.make_ir_context()
    ctx.load_all_available_dialects()
    stablehlo.register_dialect(ctx)
    chlo.register_dialect(ctx)
    # JAX annotates ops (custom calls above all) with Shardy attributes even on one device;
    # without the dialect its modules and exports do not parse.
    sdy.register_dialect(ctx)
    stablehlo.register_stablehlo_passes()
    return ctx


# --- LAPACK custom calls -------------------------------------------------------------------

_lapack_lock = threading.Lock()
_lapack_registered = False


def register_lapack_targets() -> None:
    """Makes jaxlib's LAPACK custom-call targets (`lapack_spotrf_ffi`, ...) runnable on CPU.

    Loads the LAPACK kernels (jaxlib takes them from SciPy, ~0.1 s once) and registers every
    target jaxlib provides with XLA's CPU custom-call registry through `jax.ffi`, as JAX
    does for its own linalg ops. Without the first step, running such a call crashes the
    process. Idempotent and thread-safe; call it before compiling a module that uses them
    (the `cpu` backend does).

    Private: `jaxlib.lapack.registrations` and `jaxlib.cpu._lapack.initialize`. Fallback:
    JAX registers the same targets when `jax.lax.linalg` is imported and loads the kernels
    when it lowers a LAPACK op for CPU, so a 1x1 Cholesky exported for CPU (`jax.export`)
    does both, ~0.1 s more, once.
    """
    global _lapack_registered
    if _lapack_registered:
        return
    with _lapack_lock:
        if _lapack_registered:
            return
        if not _register_lapack_privately():
            _register_lapack_publicly()
        _lapack_registered = True


def _lapack_names():
    """(jaxlib.lapack.registrations, the kernels' initialize), or None."""
    registrations = _private("jaxlib.lapack", "registrations")
    initialize = _private("jaxlib.cpu._lapack", "initialize")
    if registrations is None or initialize is None:
        return None
    return registrations, initialize


def _register_lapack_privately() -> bool:
    import jax.ffi

    names = _lapack_names()
    if names is None:
        return False
    registrations, initialize = names
    try:
        targets = [
            (name, fn, platform, int(api_version))
            for platform, entries in registrations().items()
            for name, fn, api_version in entries
        ]
        initialize()
    except (TypeError, ValueError):  # a different shape of registration table
        return False
    for name, fn, platform, api_version in targets:
        jax.ffi.register_ffi_target(name, fn, platform=platform, api_version=api_version)
    return True


def _register_lapack_publicly() -> None:
    import jax
    import jax.lax.linalg
    import numpy as np

    spec = jax.ShapeDtypeStruct((1, 1), np.float32)
    jax.export.export(jax.jit(jax.lax.linalg.cholesky), platforms=("cpu",))(spec)


# --- PJRT clients and compilation ------------------------------------------------------------


def xla_client():
    """jaxlib's XLA client module (CompileOptions, DeviceList, plugin loading), or None."""
    return _private("jaxlib.xla_client")


def pjrt_backend(platform: str):
    """JAX's PJRT client for `platform` ('cpu', 'cuda', 'rocm', 'tpu'); starts it on first use.

    From `jax._src.xla_bridge` when it is there: the public `jax.extend.backend` imports
    `jax.extend` whole (Pallas included), ~20 ms of a process that only loads an artifact.
    """
    get_backend = _private("jax._src.xla_bridge", "get_backend")
    if get_backend is None:
        from jax.extend.backend import get_backend

    return get_backend(platform)


def runtime_error_type() -> type:
    """The exception jaxlib raises for runtime and compile failures."""
    from jax.errors import JaxRuntimeError

    return JaxRuntimeError


def hlo_cost_analysis(client, bytecode: bytes) -> dict[str, float] | None:
    """XLA's cost analysis of a StableHLO module before compilation (what `jax.jit(f).lower(x)
    .cost_analysis()` computes): the module converted to HLO, then analysed for `client`.
    Fallback: None (`Lowered.cost_analysis()` says the estimate is unavailable)."""
    convert = _private("jaxlib._jax", "mlir.mlir_module_to_xla_computation")
    analyse = _private("jaxlib._jax", "hlo_module_cost_analysis")
    if convert is None or analyse is None:
        return None
    computation = convert(bytecode, use_tuple_args=False, return_tuple=False)
    return dict(analyse(client, computation.as_hlo_module()))


def cpu_math_targets() -> frozenset[str]:
    """The elementwise math kernels jaxlib registers for the CPU (`cpu_lgamma_ffi` and
    `cpu_digamma_ffi`, to which jax 0.12.1 lowers `lax.lgamma` and `lax.digamma`); JAX
    registers them with XLA when it is imported.

    Private: `jax._src.lib.cpu_math`. Fallback: none (older jaxlibs have no such kernels,
    and JAX lowers those functions to StableHLO ops).
    """
    math = _private("jax._src.lib", "cpu_math")
    try:
        return frozenset(math.registrations()) if math is not None else frozenset()
    except Exception:  # noqa: BLE001 - a jaxlib whose module says otherwise has none we know
        return frozenset()


def single_device_sharding(device):
    """The sharding of an array on `device` alone. `jax.sharding.make_single_device_sharding`
    (jax 0.10 and newer); naming `jax.sharding.SingleDeviceSharding` itself is deprecated
    from jax 0.12.1 (a DeprecationWarning in the user's program). Fallback: that class."""
    import jax

    make = getattr(jax.sharding, "make_single_device_sharding", None)
    if make is not None:
        return make(device)
    from jax.sharding import SingleDeviceSharding

    return SingleDeviceSharding(device)


def compile_options(overrides: dict[str, object]):
    """XLA CompileOptions with `overrides` as XLA debug-option flags (env_option_overrides).

    Private: `jaxlib.xla_client.CompileOptions`, plain options for one device. Fallback:
    `jax.extend.backend.get_compile_options(1, 1)`, JAX's own options for one device.
    """
    options_type = getattr(xla_client(), "CompileOptions", None)
    if options_type is not None:
        options = options_type()
    else:
        from jax.extend.backend import get_compile_options

        options = get_compile_options(1, 1)
    if overrides:
        options.env_option_overrides = list(overrides.items())
    return options


def device_list(devices):
    """The devices argument of a client's `compile_and_load`.

    Private: `jaxlib.xla_client.DeviceList`. Fallback: a tuple, which `compile_and_load`
    also takes.
    """
    list_type = getattr(xla_client(), "DeviceList", None)
    if list_type is None:
        return tuple(devices)
    return list_type(tuple(devices))


def load_pjrt_plugin(name: str, path: str) -> None:
    """dlopens a PJRT plugin library and initializes it under `name`.

    Private: `jaxlib.xla_client`'s plugin functions. No fallback: JAX loads plugins only
    from packages it discovers at start-up, so without them this is an error that says so.
    """
    xc = xla_client()
    needed = (
        "pjrt_plugin_loaded",
        "load_pjrt_plugin_dynamically",
        "pjrt_plugin_initialized",
        "initialize_pjrt_plugin",
        "make_c_api_client",
    )
    missing = [n for n in needed if getattr(xc, n, None) is None]
    if missing:
        raise RuntimeError(
            f"load_plugin({name!r}, {path!r}): jaxlib {_jaxlib_version()} cannot load a PJRT "
            f"plugin from a path (no xla_client.{missing[0]}); install the plugin as a JAX "
            "plugin package and use its backend by name, or use jaxlib 0.10 to 0.12"
        )
    if not xc.pjrt_plugin_loaded(name):
        xc.load_pjrt_plugin_dynamically(name, path)
    if not xc.pjrt_plugin_initialized(name):
        xc.initialize_pjrt_plugin(name)


def plugin_client(name: str):
    """A PJRT C API client for a plugin loaded with `load_pjrt_plugin`."""
    return xla_client().make_c_api_client(name)


def jit_options(fn):
    """`(function, static_argnums, static_argnames, donate_argnums, in_shardings,
    out_shardings)` that `jax.jit` was given for the jitted function `fn` (a sharding tree is
    None where none was given, and an unspecified leaf in it None), or None when this jax
    does not say (the JAX front end then lowers `fn` as it is, without knowing its static
    arguments)."""
    info = getattr(fn, "_jit_info", None)
    fun = getattr(fn, "_fun", None)
    try:
        return (
            fun,
            tuple(info.static_argnums),
            tuple(info.static_argnames),
            tuple(info.donate_argnums),
            _given_shardings(info.in_shardings_treedef, info.in_shardings_leaves),
            _given_shardings(info.out_shardings_treedef, info.out_shardings_leaves),
        )
    except (AttributeError, TypeError):
        return None


def kept_arguments(lowered) -> tuple[int, ...] | None:
    """The indices of the flat input leaves that the module of `lowered` (a `jax.stages.Lowered`
    of `jax.jit(f)`) takes as arguments, sorted: jax.jit prunes the ones the program does
    not use unless `keep_unused=True`. None when this jax does not say.

    Private: `Lowered._lowering.compile_args["kept_var_idx"]`."""
    try:
        kept = lowered._lowering.compile_args["kept_var_idx"]
        return tuple(sorted(int(i) for i in kept))
    except (AttributeError, KeyError, TypeError, ValueError):
        return None


def _given_shardings(treedef, leaves):
    # jax.jit stores an argument it was not given as UnspecifiedValue leaves.
    given = [None if type(leaf).__name__ == "UnspecifiedValue" else leaf for leaf in leaves]
    if all(leaf is None for leaf in given):
        return None
    from jax import tree_util

    return tree_util.tree_unflatten(treedef, given)


def exclude_from_jax_locations(path: str) -> None:
    """Makes the source locations JAX attaches to ops skip frames under `path`.

    The JAX front end calls `jax.jit(fn).lower` from inside aotkit; without this, every op's
    location is a call stack through aotkit's own files before it reaches the user's line.
    Public (`jax.extend.source_info_util`); where it is missing, locations keep those frames.
    """
    register = _private("jax.extend.source_info_util", "register_exclusion")
    if register is not None:
        register(path)


# --- Host transfer and result handling (aotkit/backends/: pjrt.py, dispatch.py,
# host_inputs.py). jaxlib's C++ transfer and result handlers are what JAX's own dispatch
# uses; `jax.device_put` instead costs ~100 µs per NumPy scalar.


def array_type() -> type:
    """The concrete class of the device arrays PJRT backends return (jax.Array's ArrayImpl).

    Private: `jaxlib._jax.ArrayImpl`. Fallback: the type of an array `jax.device_put` makes.
    """
    found = _private("jaxlib._jax", "ArrayImpl")
    if found is None:
        found = _public_array_type()
    return found


def key_array_type() -> type:
    """The class of typed PRNG key arrays (`jax.random.key`), which jaxlib's C++ dispatch
    flattens into their uint32 data.

    Private: `jax._src.random.prng.PRNGKeyArray`. Fallback: the type of `jax.random.key(0)`.
    """
    found = _private("jax._src.random.prng", "PRNGKeyArray")
    if found is None:
        import jax  # (the fallback only: a key is made on the default device)

        found = type(jax.random.key(0))
    return found


@functools.cache
def _public_array_type() -> type:
    import jax
    import numpy as np

    return type(jax.device_put(np.zeros((), np.float32), jax.devices("cpu")[0]))


def shaped_array(shape: tuple[int, ...], dtype):
    """The abstract value jaxlib's transfer and result handlers attach to an array.

    Public (`jax.core.ShapedArray`); where it is missing, None, and `host_to_device` and
    `result_handler` take their public fallbacks, which need none.
    """
    shaped = _private("jax.core", "ShapedArray")
    return None if shaped is None else shaped(shape, dtype)


_DEVICE_PUT_PARAMETERS = (
    "aval",
    "sharding",
    "xs",
    "devices",
    "committed",
    "force_copy",
    "host_buffer_semantics",
    "enable_x64",
)


def _device_put_names():
    """(jaxlib's batched_device_put, IMMUTABLE_ONLY_DURING_CALL, ZERO_COPY), or None."""
    put = _private("jaxlib._jax", "batched_device_put")
    during_call = _private("jaxlib._jax", "HostBufferSemantics.IMMUTABLE_ONLY_DURING_CALL")
    zero_copy = _private("jaxlib._jax", "HostBufferSemantics.ZERO_COPY")
    if (
        put is None
        or during_call is None
        or zero_copy is None
        or not _takes(put, _DEVICE_PUT_PARAMETERS)
    ):
        return None
    return put, during_call, zero_copy


def host_to_device(aval, sharding, device, *, in_place: bool = False):
    """A function `put(ndarray) -> device array` for one argument slot.

    By default the data is copied during the call, so the device array never aliases memory
    the caller may mutate or donate. With `in_place=True` the device array reads the NumPy
    buffer in place where the client can (a CPU client, for a 64-byte aligned dense buffer)
    and keeps it alive: for buffers nobody writes to while the device array lives (aotkit's
    staging buffers, aotkit/backends/host_inputs.py). x64 is on for the transfer: the slot's dtype
    was fixed at compile time, and JAX's global `jax_enable_x64=False` must not narrow
    float64 to float32.

    Private: `jaxlib._jax.batched_device_put` with IMMUTABLE_ONLY_DURING_CALL and a forced
    copy (the device array is ready at once, so execution does not wait on an asynchronous
    copy of an unaligned NumPy buffer: ~5-10 µs per call for a 0-d array), or ZERO_COPY
    in place. Fallback: `jax.device_put` under `jax.enable_x64(True)`, of a copy of `x`
    unless in place.
    """
    names = _device_put_names()
    if aval is None or names is None:
        return _public_device_put(sharding, in_place)
    put, during_call, zero_copy = names
    devices = [device]
    if in_place:

        def device_put_in_place(x):
            return put(aval, sharding, [x], devices, True, False, zero_copy, enable_x64=True)

        return device_put_in_place

    def device_put(x):
        return put(aval, sharding, [x], devices, True, True, during_call, enable_x64=True)

    return device_put


def _public_device_put(sharding, in_place: bool = False):
    import jax
    import numpy as np

    x64 = jax.enable_x64
    put = jax.device_put
    copy = (lambda x: x) if in_place else np.array

    def device_put(x):
        with x64(True):
            # On CPU, device_put may alias a NumPy buffer even with may_alias=False (jax
            # 0.10-0.12), and the caller may mutate its buffer once this call returns: the
            # device array gets a private copy, unless the buffer is one nobody writes to.
            return put(copy(x), sharding)

    return device_put


def release_host_references() -> None:
    """Drops the references to Python objects (NumPy buffers a transfer read in place) that
    jaxlib released without the GIL and keeps until its next call takes it.

    Private: `jaxlib._jax.collect_garbage`. Fallback: nothing (they go at jaxlib's next call).
    """
    collect = _private("jaxlib._jax", "collect_garbage")
    if collect is not None:
        collect()


def result_handler(aval, sharding):
    """The handler `consume_with_handlers` wraps one output buffer with.

    Private: `jaxlib._jax.array_result_handler` (jaxlib's C++ handler; `_skip_checks=True`
    where it takes it, as in jaxlib 0.10). Fallback: a Python handler, which
    `consume_with_handlers` gives the output's (already wrapped) single-device arrays.
    """
    names = _result_handler_names()
    if aval is None or names is None:
        return operator.itemgetter(0)
    handler, skip_checks = names
    if skip_checks:
        return handler(aval, sharding, True, True)
    return handler(aval, sharding, True)


def _result_handler_names():
    """(jaxlib's array_result_handler, whether it takes `_skip_checks`), or None."""
    handler = _private("jaxlib._jax", "array_result_handler")
    if handler is None:
        return None
    params = _parameters(handler)
    if params == ("aval", "sharding", "committed", "_skip_checks"):
        return handler, True
    if params == ("aval", "sharding", "committed"):
        return handler, False
    return None


# --- jaxlib's C++ dispatch loop, the one JAX's own `Compiled.__call__` runs on. aotkit hands
# it a cache-miss function (aotkit's checked Python call) and, for argument signatures the C++
# transfer converts exactly as compiled, the executable and result handling it then runs
# without entering Python. Without it, every call takes that checked Python call.


def x64_switch():
    """(swap, restore) for JAX's x64 mode on this thread: `previous = swap(True)` turns it on,
    `restore(previous)` puts back what was there (including "not set here").

    Private: `swap_local`/`set_local` of the `jax.enable_x64` config state. Fallback: enter
    and exit the public `jax.enable_x64(mode)` context manager (~1 µs more per call).
    """
    import jax

    names = _x64_names()
    if names is not None:
        return names
    state = jax.enable_x64

    def enter(mode: bool):
        scope = state(mode)
        scope.__enter__()
        return scope

    def leave(scope) -> None:
        scope.__exit__(None, None, None)

    return enter, leave


def x64_state():
    """An object whose `value` is JAX's x64 mode on this thread now: `jax.enable_x64` itself
    (its config state's `value`, 0.03 µs a read). Fallback: one that reads
    `jax.config.jax_enable_x64`."""
    import jax

    state = getattr(jax, "enable_x64", None)
    try:
        if isinstance(state.value, bool):
            return state
    except Exception:  # noqa: BLE001 - any failure means "not the config state we know"
        pass

    class _FromConfig:
        __slots__ = ()

        @property
        def value(self) -> bool:
            return bool(jax.config.jax_enable_x64)

    return _FromConfig()


def _x64_names():
    """(swap_local, set_local) of `jax.enable_x64`, or None."""
    swap = _private("jax", "enable_x64.swap_local")
    restore = _private("jax", "enable_x64.set_local")
    if swap is None or restore is None:
        return None
    return swap, restore


_PJIT_PARAMETERS = (
    "function_name",
    "fun",
    "cache_miss",
    "static_argnums",
    "static_argnames",
    "global_cache_key",
    "pytree_registry",
    "shard_arg_fallback",
)
_FASTPATH_FIELDS = (
    "xla_executable",
    "out_pytree_def",
    "in_shardings",
    "out_shardings",
    "out_avals",
    "out_committed",
    "kept_var_bitvec",
    "in_device_local_layouts",
    "const_args",
)


def _dispatch_names():
    """(pjit, JitGlobalCppCacheKeys, dispatch_registry, cc_shard_arg, fastpath type), or None
    when any is missing or not the one this module was written against."""
    pjit = _private("jaxlib._jax", "pjit")
    keys = _private("jax._src.interpreters.pxla", "JitGlobalCppCacheKeys")
    registry = _private("jax._src.tree_util", "dispatch_registry")
    shard_arg = _private("jax._src.interpreters.pxla", "cc_shard_arg")
    fastpath = _private("jax._src.interpreters.pxla", "MeshExecutableFastpathData")
    if None in (pjit, keys, registry, shard_arg, fastpath):
        return None
    if not _takes(pjit, _PJIT_PARAMETERS) or getattr(fastpath, "_fields", None) != _FASTPATH_FIELDS:
        return None
    return pjit, keys, registry, shard_arg, fastpath


def cpp_dispatcher(name: str, fun, cache_miss):
    """A C++ callable that runs `cache_miss(*args, **kwargs) -> (out, fastpath, False)` on
    new argument signatures and the cached fast path on known ones; `fun` runs when JAX's
    `disable_jit` is on.

    Private: `jaxlib._jax.pjit`, `pxla.JitGlobalCppCacheKeys`, `pxla.cc_shard_arg`,
    `tree_util.dispatch_registry` and `pxla.MeshExecutableFastpathData`. Fallback: None, and
    callers take their checked Python call on every call.
    """
    names = _dispatch_names()
    if names is None:
        return None
    pjit, keys, registry, shard_arg, _ = names
    try:
        return pjit(name, fun, cache_miss, [], [], keys(), registry, shard_arg)
    except TypeError:
        return None


def fastpath_data(executable, out, n_args: int, in_sharding, out_sharding, kept=None):
    """What jaxlib's C++ dispatch caches to run `executable` again for one signature, or None
    (the signature is then not cached, and its calls keep taking the checked call).

    `out` is the result pytree of the call that is being cached (its leaves are device
    arrays); the executable's `n_args` arguments live on `in_sharding`'s single device.
    `kept` (one bool per leaf of a call) says which leaves they are, as jax.jit's
    `kept_var_bitvec` does; None: every leaf is one.
    """
    names = _dispatch_names()
    if names is None:
        return None
    _, _, registry, _, fastpath = names
    out_flat, out_tree = registry.flatten(out, None)
    return fastpath(
        executable,
        out_tree,
        [in_sharding] * n_args,
        [out_sharding] * len(out_flat),
        [o.aval for o in out_flat],
        [o.committed for o in out_flat],
        [True] * n_args if kept is None else list(kept),
        [None] * n_args,
        [],
    )


def dispatch_leaves(tree) -> list | None:
    """The leaves of `tree` as jaxlib's C++ dispatch flattens a call's arguments (a typed PRNG
    key array is a node whose leaf is its uint32 data), or None without that dispatch."""
    names = _dispatch_names()
    if names is None:
        return None
    return names[2].flatten(tree, None)[0]


def fast_paths() -> dict[str, bool]:
    """Which entry points run on jaxlib's private names in this process (True) and which on
    their public fallbacks (False). On jaxlib 0.10 to 0.12 all are True."""
    import numpy as np

    xc = xla_client()
    has_aval = shaped_array((), np.dtype(np.float32)) is not None
    return {
        "mlir dialects": _private("jaxlib.mlir._mlir_libs._jax_mlir_ext", "register_dialects")
        is not None,
        "lapack": _lapack_names() is not None,
        "compile options": getattr(xc, "CompileOptions", None) is not None,
        "device list": getattr(xc, "DeviceList", None) is not None,
        "array type": _private("jaxlib._jax", "ArrayImpl") is not None,
        "host transfer": has_aval and _device_put_names() is not None,
        "result handler": has_aval and _result_handler_names() is not None,
        "x64 switch": _x64_names() is not None,
        "C++ dispatch": _dispatch_names() is not None,
        "key arrays": _private("jax._src.random.prng", "PRNGKeyArray") is not None,
        "sharded results": _private("jaxlib._jax", "GSPMDSharding") is not None,
        "mesh specs": _private("jax._src.sharding_impls", "parse_flatten_op_sharding") is not None,
        "backend state": _private("jax._src.xla_bridge", "backends_are_initialized") is not None,
        "jax.export registrations": jax_export_registries() is not None,
        "sharded artifacts": _private("jaxlib._jax", "mlir.serialize_portable_artifact")
        is not None,
    }


# --- SPMD: sharded programs over several devices and processes (issue 17) ---------------------
# Used by aotkit/backends/pjrt_spmd.py, aotkit/distributed.py and the CLI only; the
# single-device entry points above do not depend on anything here.


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
    """The HloShardings XLA chose for an SPMD executable's parameters and results (replicated
    for each when it reports none: one partition). (`xla_client.HloSharding.from_proto`.)"""
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


def sharding_support() -> str | None:
    """None where sharded programs can be compiled in this process, else why not (the one
    private name they cannot do without is missing)."""
    if _private("jaxlib._jax", "GSPMDSharding") is None:
        return (
            "this jaxlib has no GSPMDSharding, which sharded results are expressed in; "
            "sharding needs jax/jaxlib 0.10 to 0.12"
        )
    return None


def gspmd_sharding(devices, hlo):
    """A jax Sharding for an HloSharding over `devices` (jaxlib's `GSPMDSharding`), for results
    of a module whose shardings name no mesh. No fallback: `sharding_support()` says so, and
    sharded compiles refuse with its reason before they get here."""
    return _private("jaxlib._jax", "GSPMDSharding")(tuple(devices), hlo)


def named_sharding_from_hlo(hlo, mesh):
    """The PartitionSpec over `mesh` that an HloSharding stands for, or None when it has none
    (`sharding_impls.parse_flatten_op_sharding`). Fallback: None, and the result keeps the
    GSPMD sharding (the same shards, printed without the mesh's axis names)."""
    parse = _private("jax._src.sharding_impls", "parse_flatten_op_sharding")
    if parse is None:
        return None
    try:
        return parse(hlo, mesh)[0]
    except Exception:  # a sharding the mesh cannot express (JAX raises several kinds)
        return None


def spmd_fastpath_data(executable, out, in_shardings, out_shardings):
    """What jaxlib's C++ dispatch caches to run a sharded `executable` again: like
    `fastpath_data`, with one sharding per argument and per result. Fallback: None (calls keep
    taking the checked Python call)."""
    names = _dispatch_names()
    if names is None:
        return None
    _, _, registry, _, fastpath = names
    out_flat, out_tree = registry.flatten(out, None)
    n = len(in_shardings)
    return fastpath(
        executable,
        out_tree,
        list(in_shardings),
        list(out_shardings),
        [o.aval for o in out_flat],
        [o.committed for o in out_flat],
        [True] * n,
        [None] * n,
        [],
    )


def sharded_device_put(aval, sharding, shards, devices):
    """A global array from one host array per addressable device (`batched_device_put`).

    jaxlib 0.10.2 raises `RuntimeError: bad_function_call` for several shards with any host
    buffer semantics but the default zero-copy one, so the caller passes copies it owns.
    Fallback: `jax.device_put` per shard and `jax.make_array_from_single_device_arrays`.
    """
    names = _device_put_names()
    if names is None:
        import jax

        placed = [jax.device_put(shard, device) for shard, device in zip(shards, devices)]
        return jax.make_array_from_single_device_arrays(aval.shape, sharding, placed)
    put = names[0]
    return put(aval, sharding, shards, devices, True, enable_x64=True)


def backends_started() -> bool:
    """Whether JAX's PJRT clients have started (`xla_bridge.backends_are_initialized`).
    Fallback: False, and a late `jax.distributed.initialize` reports JAX's own error."""
    started = _private("jax._src.xla_bridge", "backends_are_initialized")
    return False if started is None else bool(started())


# --- pytree node types registered with jax.export (issue 29) --------------------------------
# Used by aotkit/pytrees.py only: artifacts honour what users registered for jax.export.


def jax_export_registries() -> tuple[dict, dict] | None:
    """jax.export's registries of serializable pytree node types: (type -> (serialized name,
    serialize_auxdata), serialized name -> (type, deserialize_auxdata, from_children)), or
    None where this jax keeps them elsewhere (aotkit's own registrations still work).
    (`jax._src.export._export.serialization_registry`, `.deserialization_registry`.)"""
    by_type = _private("jax._src.export._export", "serialization_registry")
    by_name = _private("jax._src.export._export", "deserialization_registry")
    if not isinstance(by_type, dict) or not isinstance(by_name, dict):
        return None
    return by_type, by_name


def portable_artifact_with_shardy(bytecode: bytes, target_version: str) -> bytes | None:
    """A sharded module (MLIR bytecode) as a StableHLO portable artifact that keeps its
    Shardy ops and attributes (`sdy.mesh`, `sdy.sharding`) as they are, which the public
    `stablehlo.serialize_portable_artifact` refuses; what jax.export writes for Shardy
    modules. None where this jaxlib lacks it (sharded artifacts then cannot be saved).
    (`jaxlib._jax.mlir.serialize_portable_artifact` with `use_mixed_serialization`.)"""
    serialize = _private("jaxlib._jax", "mlir.serialize_portable_artifact")
    if serialize is None or not _takes(
        serialize, ("mlir_module", "target", "use_mixed_serialization")
    ):
        return None
    return bytes(serialize(bytecode, target_version, True))


# --- jax.export symbolic dimensions (issue 25) -----------------------------------------------
# Used by aotkit/symbolic/algebra.py only: a `jax.ShapeDtypeStruct` whose shape holds
# `jax.export.symbolic_shape(...)` dimensions becomes aotkit's own symbolic dimensions.


def symbolic_constraints(dim) -> tuple[str, ...]:
    """The constraints (as written) of the scope of a `jax.export` symbolic dimension
    (`dim.scope._explicit_constraints[i].debug_str`); where this jax keeps them elsewhere,
    read from the scope's text, which lists them one per line after " with constraints:"."""
    scope = getattr(dim, "scope", None)
    explicit = getattr(scope, "_explicit_constraints", None)
    if isinstance(explicit, list) and all(
        isinstance(getattr(c, "debug_str", None), str) for c in explicit
    ):
        return tuple(c.debug_str for c in explicit)
    text = str(scope)
    _, found, rest = text.partition(" with constraints:")
    if not found:
        return ()
    return tuple(line.strip() for line in rest.splitlines() if line.strip())


# --- deviceless TPU compilation (issue 42) ----------------------------------------------------
# Used by aotkit/backends/tpu_topology.py only: compiling for a TPU topology on a machine
# without one, through libtpu's compile-only PJRT client.


def tpu_library_path() -> str | None:
    """Where libtpu's `libtpu.so` is (`TPU_LIBRARY_PATH`, else the `libtpu` package's), or
    None where it is not installed. (`jax._src.cloud_tpu_init.get_tpu_library_path`.)
    Fallback: the `libtpu` package's own path."""
    find = _private("jax._src.cloud_tpu_init", "get_tpu_library_path")
    if find is not None:
        return find()
    import importlib.util

    spec = importlib.util.find_spec("libtpu")
    if spec is None or spec.origin is None:
        return None
    import os

    path = os.path.join(os.path.dirname(spec.origin), "libtpu.so")
    return path if os.path.isfile(path) else None


def tpu_topology_devices(name: str, chips_per_host_bounds: tuple[int, ...] | None):
    """The compile-only devices of TPU topology `name` ("v5e:2x2"), through libtpu, with no
    TPU attached; each device's `client` compiles for them (`compile_for_devices`).
    (`jax._src.xla_bridge.make_pjrt_tpu_topology`, `DeviceTopology._make_compile_only_devices`.)
    Fallback: the public `jax.experimental.topologies.get_topology_desc`, the same call."""
    import os

    # libtpu asks the cloud metadata server what it runs on unless told not to; there is
    # nothing to ask on a machine without a TPU (JAX sets the same when it finds no chip).
    os.environ.setdefault("TPU_SKIP_MDS_QUERY", "1")
    kwargs = {}
    if chips_per_host_bounds is not None:
        kwargs["chips_per_host_bounds"] = chips_per_host_bounds
    make = _private("jax._src.xla_bridge", "make_pjrt_tpu_topology")
    if make is not None:
        topology = make(name, **kwargs)
        return list(topology._make_compile_only_devices()), str(topology.platform_version)
    from jax.experimental import topologies

    devices = list(topologies.get_topology_desc(name, "tpu", **kwargs).devices)
    return devices, str(devices[0].client.platform_version)


def compile_for_devices(module: ir.Module, devices, options):
    """An unloaded executable of `module` for compile-only `devices` (their client is a
    compile-only PJRT client: it compiles, serializes and analyses, and never runs).
    The PJRT runtime API, as JAX's own deviceless compile calls it (`client.compile`)."""
    client = devices[0].client
    return client.compile(module, device_list(devices), options)


def equation_frames(eqn) -> list[tuple[str, str]] | None:
    """(file, function) of the Python frames where a jaxpr equation was bound, innermost
    first (what JAX keeps in the equation's source info for its locations); None where this
    jax keeps none."""
    try:
        frames = eqn.source_info.traceback.frames
        return [(f.file_name, f.function_name) for f in frames]
    except AttributeError:  # (no traceback kept: JAX's location settings)
        return None


def custom_jvp_rule(eqn, zeros: list[bool]):
    """The JVP rule of a `custom_jvp_call` equation as (jaxpr, consts, out_zeros): the
    jaxpr takes the primals and then a tangent for each but those `zeros` marks (True: a
    zero tangent, not passed; one per argument past the closed-over values) and returns the
    primal outputs and then the tangent of each output but those `out_zeros` marks. None
    where this jax keeps the rule otherwise."""
    fun = eqn.params.get("jvp_jaxpr_fun")
    if fun is None or not hasattr(fun, "call_wrapped"):
        return None
    jaxpr, consts, out_zeros = fun.call_wrapped(*zeros)
    return jaxpr, consts, tuple(out_zeros)


def custom_vjp_rule(eqn):
    """The forward and backward functions of a `custom_vjp_call` equation, on JAX values:
    `fwd(*primals) -> (outputs, residuals)` and `bwd(residuals, cotangents)` -> one
    cotangent per primal, None for a zero. None where this jax keeps them otherwise."""
    import jax.core
    import jax.extend.core

    params = eqn.params
    thunk, bwd = params.get("fwd_jaxpr_thunk"), params.get("bwd")
    out_trees = params.get("out_trees")
    wrapped = hasattr(thunk, "call_wrapped") and hasattr(bwd, "call_wrapped")
    if not wrapped or not callable(out_trees):
        return None
    n = len(eqn.invars) - params.get("num_consts", 0)
    jaxpr, consts = thunk.call_wrapped(*[True] * n)  # (every primal has a tangent)
    if any(isinstance(c, jax.core.Tracer) for c in consts):
        return None
    body = jax.extend.core.jaxpr_as_fun(jax.extend.core.ClosedJaxpr(jaxpr, consts))
    _, res_tree, forwarded = out_trees()  # (known once the thunk ran)
    computed = res_tree.num_leaves - sum(f is not None for f in forwarded)

    def fwd(*primals):
        values = body(*primals)
        made = iter(values[:computed])
        # A residual that is a primal itself is not among fwd's results: its index is.
        res = [next(made) if f is None else primals[f] for f in forwarded]
        return list(values[computed:]), res

    def backward(res, cts):
        got = bwd.call_wrapped(*res, *cts)
        if isinstance(got, tuple) and len(got) == 2 and isinstance(got[0], list):
            got = got[0]  # jax 0.12: (the cotangents, logs)
        # (JAX's symbolic zeros, for arguments the rule gives no cotangent, are not values)
        return [g if isinstance(g, jax.core.Tracer) else None for g in got]

    return fwd, backward
