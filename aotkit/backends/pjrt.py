"""PJRT backends: compile a StableHLO module with XLA through a PJRT client and run it.

`cpu` (jaxlib's embedded CPU client) and the plugins (`cuda`, `rocm`, `tpu`, any plugin
`.so`) differ only in where their client comes from; this module holds what they share for
programs on one device. Sharded programs build on it in aotkit/backends/pjrt_spmd.py, whose
`SpmdBackend` (a `PjrtBackend` that also compiles for several devices) is the class the
`cpu` and plugin backends are; nothing here imports it.

The call path is the hot path of `Compiled.__call__`, and it has two layers. In front is
jaxlib's C++ dispatch (the one JAX's own `Compiled` runs on): once an argument signature
has been checked, and if jaxlib's C++ transfer turns such arguments into exactly the
compiled buffers, later calls with that signature never enter Python. Behind it is the
checked Python call: each argument slot has a precomputed closure that passes a matching
device array through untouched, copies a NumPy value with jaxlib's batched transfer, or
raises the mismatch `Compiled` words as a TypeError; outputs are wrapped by jaxlib's C++
result handlers.

NumPy arguments of 2 KiB or more are prepared in front of both (`HostInputs`): a large one
is read in place when it is aligned as XLA needs, and otherwise copied at memory bandwidth
into a reused staging buffer; the caller's arrays are never written, and a call that reads
one in place returns once its results are ready.
"""

from __future__ import annotations

import concurrent.futures
import functools
import os
import re
import sys
import threading
import warnings
from collections.abc import Mapping

import jax
import jaxlib
import ml_dtypes
import numpy as np
from jax import tree_util
from jaxlib.mlir import ir

from aotkit import _compat, _context, _native, dtypes, modules
from aotkit._traceback import filter_exception
from aotkit.backends.base import (
    ArgumentMismatch,
    Backend,
    Executable,
    MemoryAnalysis,
    describe,
    host_cpu,
    host_fits,
    host_value,
    negative_size,
)
from aotkit.errors import CompileError
from aotkit.specs import ShapeDtype

_Front = _native.Front  # None without aotkit._speedups: `call` then takes every call

_OPTION_VALUE_TYPES = (bool, int, float, str)
# XLA's own wording for a bad entry in env_option_overrides.
_BAD_OPTION_MARKERS = ("No such compile option", "While setting option")


def cost_of(exe) -> dict[str, float] | None:
    """XLA's cost analysis of a PJRT executable (the first device's, where it gives one per
    device), with the three keys every backend reports; None where the plugin has none."""
    try:
        raw = exe.cost_analysis()
    except Exception:  # noqa: BLE001 - plugins may not implement it: the view is absent
        return None
    if isinstance(raw, list | tuple):
        raw = raw[0] if raw else None
    if raw is None:
        return None
    cost = {k: float(v) for k, v in dict(raw).items()}
    for key in ("flops", "bytes accessed", "transcendentals"):
        cost.setdefault(key, 0.0)
    return cost


def verified(module: ir.Module, where: str, backend: str) -> tuple[str, tuple, tuple]:
    """(name, in specs, out specs) of a module a PJRT backend is about to compile, which
    must verify (a CompileError naming the first diagnostic, not a crash in XLA)."""
    name = modules.module_name(module)
    in_specs, out_specs = modules.signature(module, f"{where}: module {name!r}")
    with _context.of(module):
        try:
            module.operation.verify()
        except ir.MLIRError as e:
            raise CompileError(
                f"{where} rejected module {name!r}: it does not verify: "
                f"{modules.diagnostic(e)}; build modules with aotkit.lower or check them "
                "with Lowered.as_text()",
                backend=backend,
                module_name=name,
            ) from e
    return name, in_specs, out_specs


def check_options(options: Mapping[str, object] | None, where: str) -> dict[str, object]:
    """Validates XLA option names and values as far as Python can (types); XLA checks names."""
    if options is None:
        return {}
    if not isinstance(options, Mapping):
        raise TypeError(
            f"{where}: options must be a dict of XLA flags, got {type(options).__name__}; "
            "e.g. {'xla_cpu_enable_fast_math': True}"
        )
    checked = {}
    for key, value in options.items():
        if not isinstance(key, str):
            raise TypeError(f"{where}: option name {key!r} is not a string; use XLA flag names")
        if not isinstance(value, _OPTION_VALUE_TYPES):
            raise TypeError(
                f"{where}: option {key!r} has a {type(value).__name__} value {value!r}; "
                "XLA options take bool, int, float or str"
            )
        # What the bindings cannot carry is refused here: they would raise a bare TypeError
        # (an int past 64 bits, a str that is not UTF-8) or cut a str at its first NUL.
        if negative_size(key, value):
            raise ValueError(
                f"{where}: option {key!r} has the negative value {value}, but it counts or "
                "sizes something and XLA would read it as a huge unsigned size (aborting "
                "the process); give 0 or a positive value, or leave the option out"
            )
        big = isinstance(value, int) and not _INT64_MIN <= value <= _INT64_MAX
        if big:
            bits = value.bit_length()  # str() of a huge int is itself refused past 4300 digits
            shown = repr(value) if bits <= 100 else f"of {bits} bits"
            raise ValueError(
                f"{where}: option {key!r} has an int value {shown}, outside the 64-bit range "
                "XLA options take (-2**63 to 2**63 - 1)"
            )
        for what, text in (("name", key), ("value", value)):
            if isinstance(text, str) and ("\0" in text or not _utf8(text)):
                raise ValueError(
                    f"{where}: option {key!r} has a {what} holding a NUL or a character "
                    "UTF-8 cannot encode; XLA options take plain text"
                )
        checked[key] = value
    return checked


_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class PjrtBackend(Backend):
    """A backend over one PJRT client; executables run on its first local device.

    It compiles programs for one device; `pjrt_spmd.SpmdBackend` adds `compile_spmd`."""

    executable_format = "pjrt"
    # Results stay in the PJRT buffers the device wrote (aotkit/backends/base.py).
    result_type = jax.Array

    def __init__(self, name: str, client):
        self.name = name
        self.platform = client.platform
        self._client = client
        self._device = client.local_devices()[0]
        # One sharding object per backend: arrays it returned are then recognized by identity.
        self._sharding = _compat.single_device_sharding(self._device)

    @property
    def version(self) -> str:
        return f"jaxlib {jaxlib.__version__}, {self._client.platform_version}"

    def devices(self) -> list:
        return list(self._client.local_devices())

    def input_sharding(self):
        return self._sharding

    def estimate_cost(self, module: ir.Module) -> dict[str, float] | None:
        runtime_error = _compat.runtime_error_type()
        try:
            return _compat.hlo_cost_analysis(self._client, modules.bytecode(module))
        except runtime_error:  # XLA has no estimate for it (a custom call, ...)
            return None

    def global_devices(self) -> list:
        return list(self._client.devices())

    def target(self) -> dict[str, str]:
        """Platform, its version, jaxlib's version and the device kind; on the CPU also the
        host's instruction set, which XLA compiles for (another CPU may lack it)."""
        target = {
            "backend": self.name,
            "platform": self.platform,
            "platform_version": str(self._client.platform_version),
            "runtime": f"jaxlib {jaxlib.__version__}",
            "device_kind": str(getattr(self._device, "device_kind", "")),
        }
        if self.platform == "cpu":
            target["host"] = host_cpu()
        return target

    def deserialize(self, data: bytes, *, name, in_specs, out_specs, options=None, target=None):
        data = bytes(data)
        where = f"backend {self.name!r}"
        overrides = check_options(options, f"{where}: deserialize")
        exe = self._load_serialized(
            data, [self._device], _compat.compile_options(overrides), name, in_specs, out_specs
        )
        n_out = len(out_specs)
        kinds = _output_memory_kinds(exe)
        if kinds is not None and len(kinds) != n_out:
            # Its runtime metadata lost the results (a section cut short): PJRT loads it, and
            # every call fails with "Unexpected number of outputs".
            raise CompileError(
                f"{where}: the serialized executable of {name!r} returns {n_out} results but "
                f"its runtime metadata describes {len(kinds)}; the executable is damaged",
                backend=self.name,
                module_name=name,
            )
        head = _module_head(exe)
        declared = _entry_signature(exe, head) if head is not None else None
        given = ([_hlo_type(x) for x in in_specs], [_hlo_type(x) for x in out_specs])
        if declared is not None and declared != given:
            ins, outs = ([_aotkit_type(t) for t in side] for side in declared)
            raise CompileError(
                f"{where}: the serialized executable of {name!r} takes ({', '.join(ins)}) -> "
                f"({', '.join(outs)}), but its signature says ({', '.join(map(str, in_specs))})"
                f" -> ({', '.join(map(str, out_specs))}); the file's header does not describe "
                "its executable",
                backend=self.name,
                module_name=name,
            )
        executable = PjrtExecutable(self, name, exe, in_specs, out_specs, serialized=data)
        executable._head = head
        return executable

    def _load_serialized(self, data: bytes, devices, compile_options, name, in_specs, out_specs):
        """The PJRT executable serialized in `data`, loaded on `devices`, with as many
        arguments and results as `in_specs`/`out_specs` (CompileError otherwise)."""
        where = f"backend {self.name!r}"
        if self.platform == "cpu" and b"lapack_" in data:
            # An executable with LAPACK custom calls (JAX's linalg, say) crashes the process
            # when run unless jaxlib's LAPACK targets are registered; in a fresh process
            # nothing has registered them. The name in the bytes over-approximates.
            _compat.register_lapack_targets()
        runtime_error = _compat.runtime_error_type()
        try:
            exe = self._client.deserialize_executable(
                data, _compat.device_list(devices), compile_options
            )
        except runtime_error as e:
            raise CompileError(
                f"{where} could not load the serialized executable of {name!r}: "
                f"{modules.diagnostic(e)}",
                backend=self.name,
                module_name=name,
            ) from e
        n_in, n_out = len(exe.get_parameter_layouts()), len(exe.get_output_layouts())
        if (n_in, n_out) != (len(in_specs), len(out_specs)):
            raise CompileError(
                f"{where}: the serialized executable of {name!r} takes {n_in} arguments and "
                f"returns {n_out} results, but its signature has {len(in_specs)} and "
                f"{len(out_specs)}",
                backend=self.name,
                module_name=name,
            )
        return exe

    def compile(
        self,
        module: ir.Module,
        options: Mapping[str, object] | None = None,
        *,
        target: str | None = None,
        target_options: Mapping[str, str] | None = None,
    ):
        self.normalize_target(target, target_options)  # XLA compiles for this client's devices
        where = f"backend {self.name!r}"
        overrides, name, in_specs, out_specs, data = self._prepare(module, options, where)
        exe = self._compile_and_load(
            data, [self._device], _compat.compile_options(overrides), overrides, name, where
        )
        return PjrtExecutable(self, name, exe, in_specs, out_specs)

    def _prepare(self, module: ir.Module, options, where: str):
        """(checked options, name, in specs, out specs, bytecode) of a module to compile."""
        overrides = check_options(options, f"{where}: compile")
        name, in_specs, out_specs = verified(module, where, self.name)
        data = modules.bytecode(module)
        if self.platform == "cpu" and b"lapack_" in data:
            # LAPACK custom calls (aotkit.numpy.linalg, or a JAX module read from a file)
            # crash XLA's CPU runtime unless jaxlib's LAPACK is loaded first. A substring of
            # the bytecode is a cheap over-approximation; registering is idempotent.
            _compat.register_lapack_targets()
        return overrides, name, in_specs, out_specs, data

    def _compile_and_load(self, data: bytes, devices, compile_options, overrides, name, where):
        runtime_error = _compat.runtime_error_type()
        try:
            return self._client.compile_and_load(
                data, _compat.device_list(devices), compile_options
            )
        except runtime_error as e:
            message = modules.diagnostic(e)
            if any(m in message for m in _BAD_OPTION_MARKERS):
                raise ValueError(
                    f"{where}: compile options {overrides!r} rejected: {message}; options are "
                    "XLA debug flags such as {'xla_cpu_enable_fast_math': True}"
                ) from None
            raise CompileError(
                f"{where} rejected module {name!r}: {message}",
                backend=self.name,
                module_name=name,
            ) from e

    def jit_dispatcher(self, name: str, python_call, run):
        """jaxlib's C++ dispatch in front of `jit`'s checked call (`native_dispatcher`)."""
        return native_dispatcher(name, python_call, run)


def native_dispatcher(name: str, python_call, run):
    """jaxlib's C++ dispatch (the loop under JAX's own jit) in front of a Python call.

    `run(x64, args, kwargs) -> (out, fastpath or None)` handles every argument signature
    the C++ side has not cached: it checks and runs the call in Python and returns what
    to cache (`PjrtExecutable.fastpath`), after which calls with that signature (tree,
    dtypes, shapes, weak types, shardings) never enter Python. `python_call` runs when
    JAX's `disable_jit` is on, and words the error for an array donated to an earlier call.
    None if this jaxlib has no C++ dispatch.

    JAX's x64 mode changes what the C++ transfer does: with it off, 64-bit NumPy values
    are narrowed and a float64 array keys like a float32 one (so a cached float32 signature
    would take float64 arrays too); with it on, a Python float becomes a float64 buffer. So
    calls run in x64 mode, where NumPy dtypes key as themselves, except calls with a Python
    scalar anywhere in their arguments, which run with x64 off (a Python float then becomes
    the weakly typed float32 of a scalar argument); each mode has its own C++ cache. No
    NumPy leaf of a dtype narrowing changes (`_EXACT_NUMPY` are the others) ever reaches the
    x64-off cache: such calls take the checked call, so a float32 signature cached there is
    only ever a float32 array's. A call switches only when the thread is not in its mode
    already, and calls whose leaves are device arrays and NumPy arrays and scalars of dtypes
    narrowing keeps never do. What runs in Python (a miss, which may trace with JAX) runs
    under the caller's own x64 setting. Arrays in big-endian byte order never reach the C++
    side (it would read their bytes as native ones). NumPy arrays the transfer may read in
    place are prepared first, and their calls wait for their results (`HostInputs`). A call
    of one array or scalar takes the fewest steps.
    """
    swap, restore = _compat.x64_switch()
    thread_x64 = _compat.x64_state()
    # The caller's own x64 setting, per thread (calls nest: a miss may trace code that calls
    # another compiled function): what runs in Python (tracing with JAX above all) sees it.
    callers = threading.local()

    def as_caller(fn, *args, **kwargs):
        forced = swap(False)
        stack = getattr(callers, "stack", None)
        # A call of device arrays only runs without switching (see `call`): the caller's
        # setting is then the one in force.
        restore(stack[-1] if stack else forced)
        try:
            return fn(*args, **kwargs)
        finally:
            restore(forced)

    # Whether this dispatcher's programs take a Python scalar as x64 mode's 64-bit value, as
    # a JAX function lowered in x64 mode does (aotkit's tracer takes a 32-bit one): learnt
    # from its first call in x64 mode with a float, int or complex; None until then.
    scalars_64 = [None]

    native = {}
    for x64 in (True, False):

        def cache_miss(*args, _x64=x64, **kwargs):
            if not _x64 and thread_x64.value:
                # The C front calls `narrow` with Python scalars without reading the mode
                # (a read costs as much as the rest of the front). In x64 mode the call runs
                # in `wide` where its programs take 64-bit scalars (the first such call tries
                # it); otherwise it switches x64 off here, and jaxlib forgets this signature
                # (x64 mode's) again.
                if scalars_64[0] is not False:
                    try:
                        return wide(*args, **kwargs), None, True
                    except (runtime_error, ValueError):
                        return _after_failure(args, kwargs), None, True
                return in_mode(False, narrow, args, kwargs), None, True
            out, fastpath = as_caller(run, _x64, args, kwargs)
            if _x64 and scalars_64[0] is None and _mode_scalars((args, kwargs)):
                scalars_64[0] = fastpath is not None
            return out, fastpath, False

        native[x64] = _compat.cpp_dispatcher(
            name, functools.partial(as_caller, python_call), cache_miss
        )
        if native[x64] is None:
            return None
    wide, narrow = native[True], native[False]
    python_scalars = _PYTHON_SCALARS
    runtime_error = _compat.runtime_error_type()
    array_type, key_type = _compat.array_type(), _compat.key_array_type()

    exact, exact_scalars, wide_scalars = _EXACT_NUMPY, _EXACT_NUMPY_SCALARS, _WIDE_NUMPY_SCALARS
    in_place_from, staged_from = IN_PLACE_FROM, STAGED_FROM

    def call(*args, **kwargs):
        # The entry point of every call (aotkit/_traceback.py): an error leaves it without
        # aotkit's frames. A try costs nothing until it catches; a wrapper would add a frame.
        try:
            if len(args) == 1 and not kwargs:
                # One array or scalar (`f(x)`, whatever the program's arguments): the
                # commonest call, in the fewest steps (`wide(arg)` passes it as it is).
                (arg,) = args
                t = type(arg)
                if (
                    t is array_type
                    or t in exact_scalars
                    or (t is np.ndarray and arg.dtype in exact and arg.nbytes < in_place_from)
                ):
                    try:
                        return wide(arg)
                    except (runtime_error, ValueError):
                        return _after_failure(args, kwargs)
                if t in python_scalars and thread_x64.value is False:
                    try:
                        return narrow(arg)
                    except (runtime_error, ValueError):
                        return _after_failure(args, kwargs)
            narrow_mode = wait = wide_only = False
            for arg in args:
                t = type(arg)
                if t is array_type or t is key_type:  # (a key: its data, a device array)
                    continue
                if t is np.ndarray:
                    exact_dtype = arg.dtype in exact
                    if exact_dtype or (arg.dtype.isnative and thread_x64.value is True):
                        # In x64 mode a 64-bit array keys as itself, in `wide` only.
                        wide_only = wide_only or not exact_dtype
                        n = arg.nbytes
                        if n < in_place_from:
                            continue
                        if n < staged_from:  # the transfer may read it in place: wait
                            wait = True
                            continue
                    break
                if t in exact_scalars:
                    continue
                if t in wide_scalars and thread_x64.value is True:
                    wide_only = True  # as a 64-bit array
                    continue
                if t in python_scalars:
                    narrow_mode = True
                    continue
                break
            else:
                if not kwargs:
                    # Device arrays, NumPy values of dtypes x64 mode does not narrow (under
                    # `STAGED_FROM` bytes) and Python scalars: the common calls, in as few
                    # steps as jax.jit's.
                    if not narrow_mode or wide_only:
                        # These key and transfer alike in either x64 mode: no switch. With
                        # 64-bit arrays (`wide_only`) the thread is in x64 mode, where a
                        # Python scalar keys as jax.jit's do there (a float as a weak
                        # float64): a JAX function's signature, cached in `wide`.
                        try:
                            out = wide(*args)
                        except (runtime_error, ValueError):
                            return _after_failure(args, kwargs)
                        if wait:
                            _block(out, array_type)
                        return out
                    if thread_x64.value is False and not wait:  # x64 off, as it usually is
                        try:
                            return narrow(*args)
                        except (runtime_error, ValueError):
                            return _after_failure(args, kwargs)
            return other_call(args, kwargs)
        except Exception as e:
            filter_exception(e)
            raise

    def other_call(args: tuple, kwargs: dict):
        """Every call `call` does not finish itself: keyword arguments, containers, NumPy
        values of 64-bit dtypes, non-native byte order or `IN_PLACE_FROM` bytes or more."""
        # The call's own lists and dicts: the C++ dispatch keys one structure, and a miss
        # traces and runs that same one, whatever another thread does to the caller's.
        args, kwargs = _native.snapshot(args), _native.snapshot(kwargs)
        found = _host_leaves(args, array_type)
        if kwargs:
            found |= _host_leaves(kwargs, array_type)
        both = found & _NARROWING and found & _PYTHON_SCALAR
        if found & _NON_NATIVE or both and thread_x64.value is not True:
            # Read as native bytes, or narrowed into an x64-off signature: the checked call.
            return python_call(*args, **kwargs)
        # A Python scalar anywhere runs the call with x64 off (see above), unless the thread
        # is in x64 mode and 64-bit NumPy values come with it or the programs take 64-bit
        # scalars (`scalars_64`; the first such call tries it): those run as under jax.jit
        # in that mode.
        wide_mode = thread_x64.value is True and (both or scalars_64[0] is not False)
        narrowed = found & _PYTHON_SCALAR and not wide_mode
        mode, dispatch = (False, narrow) if narrowed else (True, wide)
        # Leaves that key and transfer alike in either mode: no switch.
        exact_only = mode and not found & (_NARROWING | _OTHER)
        if found & _LARGE:
            return large_call(mode, dispatch, exact_only, args, kwargs)
        if exact_only or thread_x64.value is mode:  # or in that mode already
            try:
                return dispatch(*args, **kwargs)
            except (runtime_error, ValueError):
                return _after_failure(args, kwargs)
        return in_mode(mode, dispatch, args, kwargs)

    def in_mode(mode: bool, dispatch, args: tuple, kwargs: dict):
        previous = swap(mode)
        stack = getattr(callers, "stack", None)
        if stack is None:
            stack = callers.stack = []
        stack.append(previous)
        try:
            return dispatch(*args, **kwargs)
        except (runtime_error, ValueError):
            return _after_failure(args, kwargs)
        finally:
            stack.pop()
            restore(previous)

    def large_call(mode: bool, dispatch, exact_only: bool, args: tuple, kwargs: dict):
        # NumPy arrays the transfer may read in place (see `HostInputs`): those of
        # `STAGED_FROM` bytes or more that are not aligned are copied into staging buffers
        # first; if any of the caller's own arrays is left, the call returns only once its
        # results are ready, so that the caller may write to them as soon as it returns.
        args, kwargs, in_place = host_inputs.prepare_tree(args, kwargs)
        if exact_only or thread_x64.value is mode:
            try:
                out = dispatch(*args, **kwargs)
            except (runtime_error, ValueError):
                out = _after_failure(args, kwargs)
        else:
            out = in_mode(mode, dispatch, args, kwargs)
        if in_place:
            if type(out) is array_type:
                out.block_until_ready()
            else:
                _block(out, array_type)
        return out

    def donated(args, kwargs) -> bool:
        # A donated array passes the C++ signature check and fails in PJRT (as a
        # ValueError); the checked call words that error, refusing before it runs.
        try:
            leaves = tree_util.tree_leaves((args, kwargs))
        except ValueError:  # a dict whose keys do not sort: the checked call names it
            return True
        return any(type(x) is array_type and x.is_deleted() for x in leaves)

    def _after_failure(args, kwargs):
        if donated(args, kwargs):
            return as_caller(python_call, *args, **kwargs)
        raise

    def failed(error: Exception, args: tuple):
        # What the C front (`_Front`) does when the C++ dispatch raises `error`: the
        # `except` clauses of `call`'s own fast path.
        try:
            if isinstance(error, (runtime_error, ValueError)) and donated(args, {}):
                return as_caller(python_call, *args)
            raise error
        except Exception as e:
            filter_exception(e)
            raise

    def clear_cache() -> None:
        """Forgets every cached signature (the executables they hold can then be freed)."""
        for dispatch in (wide, narrow):
            dispatch._clear_cache()

    call.clear_cache = clear_cache
    if _Front is None:
        return call
    # The C front takes `call`'s fast path without a Python frame (`call` takes the rest).
    try:
        return _Front(
            wide=wide,
            narrow=narrow,
            slow=call,
            failed=failed,
            clear_cache=clear_cache,
            settle=functools.partial(_block, array_type=array_type),
            scalars_64=scalars_64,
            **front_tables(),
        )
    except RuntimeError as e:  # it cannot read this NumPy's arrays
        warnings.warn(f"{e}; calls take the Python front", RuntimeWarning, stacklevel=2)
        return call


def front_tables() -> dict:
    """The C `Front`'s keyword arguments other than its callables: which types and dtypes it
    passes straight to the C++ dispatch (as `native_dispatcher`'s `call` does), the x64 mode
    it reads for 64-bit NumPy values, and the sizes it hands to the Python front."""
    return dict(
        array_type=_compat.array_type(),
        key_type=_compat.key_array_type(),
        ndarray_type=np.ndarray,
        exact_scalars=_EXACT_NUMPY_SCALARS,
        # NumPy's own instances of these dtypes, which its arrays hold (compared by identity).
        exact_dtypes=tuple(np.dtype(d.type) for d in _EXACT_NUMPY),
        python_scalars=_PYTHON_SCALARS,
        wide_dtypes=tuple(np.dtype(t) for t in _WIDE_NUMPY_SCALARS),
        wide_scalars=_WIDE_NUMPY_SCALARS,
        x64=_compat.x64_state(),
        in_place_from=IN_PLACE_FROM,
        staged_from=STAGED_FROM,
    )


def live(index: int, x):
    """`x`, a device array passed as argument `index`, unless it was deleted or donated."""
    if x.is_deleted():
        raise ArgumentMismatch(
            index, "was deleted or donated to an earlier call; pass a live array", ValueError
        )
    return x


_CONTAINERS = frozenset((list, tuple, dict))
_NON_NATIVE, _LARGE, _NARROWING, _PYTHON_SCALAR, _OTHER = 1, 2, 4, 8, 16


_KEY_ARRAY = _compat.key_array_type()


def _host_leaves(tree, array_type) -> int:
    """What the leaves of a call's arguments (`tree`: its tuple of positional arguments, its
    dict of keywords, or a list, tuple or dict in them) are, as far as the C++ transfer and
    its x64 mode go: `_NON_NATIVE`, a NumPy array in non-native (big-endian) byte order,
    whose bytes jaxlib would read as native ones (such calls take the checked path, which
    converts them); `_LARGE`, a NumPy array of `IN_PLACE_FROM` bytes or more, which the
    transfer may read in place (`HostInputs`); `_NARROWING`, a NumPy value of a dtype x64-off
    mode narrows (not in `_EXACT_NUMPY`); `_PYTHON_SCALAR`, a Python scalar; `_OTHER`, any
    other leaf or pytree node (device arrays, None and NumPy values of `_EXACT_NUMPY`
    dtypes key alike in either mode)."""
    found = 0
    for x in tree.values() if type(tree) is dict else tree:
        t = type(x)
        if t is array_type or t in _EXACT_NUMPY_SCALARS or x is None or t is _KEY_ARRAY:
            continue
        if t is np.ndarray:
            if not x.dtype.isnative:
                return _NON_NATIVE
            if x.nbytes >= IN_PLACE_FROM:
                found |= _LARGE
            if x.dtype not in _EXACT_NUMPY:
                found |= _NARROWING
        elif t in _CONTAINERS:
            inner = _host_leaves(x, array_type)
            if inner & _NON_NATIVE:
                return _NON_NATIVE
            found |= inner
        elif t in _PYTHON_SCALARS:
            found |= _PYTHON_SCALAR
        elif isinstance(x, np.generic):
            found |= _NARROWING
        else:
            found |= _OTHER
    return found


def _mode_scalars(tree) -> bool:
    """Whether a call's arguments hold a Python scalar whose dtype x64 mode sets (a float,
    an int or a complex: not a bool)."""
    try:
        return any(type(x) in (float, int, complex) for x in tree_util.tree_leaves(tree))
    except ValueError:  # a dict whose keys do not sort: nothing learnt
        return False


def _block(out, array_type) -> None:
    """Waits until every result in `out` (an array or a pytree of them) is computed."""
    if type(out) is array_type:
        out.block_until_ready()
        return
    for leaf in tree_util.tree_leaves(out):
        if type(leaf) is array_type:
            leaf.block_until_ready()


# --- NumPy inputs ----------------------------------------------------------------------------
# jaxlib's transfer hands PJRT's CPU client a NumPy array of `IN_PLACE_FROM` bytes or more to
# read in place when it is 64-byte aligned and dense (XLA's code assumes that alignment): no
# copy, and the execution, which runs asynchronously, reads the caller's memory. Any other it
# copies, into newly allocated memory. NumPy aligns its buffers to 16 bytes only (a large
# array from the allocator's mmap path always starts 16 bytes past a page), so most large
# NumPy arrays take that copy, which runs at a fraction of memory bandwidth (page faults on
# fresh memory on every call).
#
# So a call with a NumPy array of `IN_PLACE_FROM` bytes or more is prepared: an array of
# `STAGED_FROM` bytes or more that is not aligned is copied into a reused, already-faulted,
# aligned staging buffer (in parallel for large arrays), which the transfer then reads in
# place; an aligned one goes as it is (no copy). If any of the caller's own arrays goes to
# the transfer (aligned large ones, and those under `STAGED_FROM`, which jaxlib copies as
# fast as staging would, when they are not aligned), the call returns once its results are
# ready, so the caller may write to its arrays as soon as the call returns, as with a copy.
# Arrays under `IN_PLACE_FROM` are always copied by the transfer.

# Measured on jaxlib 0.10.2's CPU client: an aligned array of 2048 bytes or more is read in
# place (tests/backends/test_host_inputs.py checks that a smaller one is not).
IN_PLACE_FROM = 2048
# Below this, jaxlib's own copy costs what staging does, a call included (measured on the CPU
# client: within 5% at 16 MB, 1.1x staging at 24 MB, 3x from 40 MB, where the allocator
# returns every buffer of that size to the system and each copy faults its pages in again).
# On 13 cores, staging from 256 KB made calls of 1 MB 1.15x-1.25x slower and of 4 MB up to
# 1.25x (aligned ones 1.1x-1.2x: they took the Python front), and calls of 10 MB anywhere
# from 1.03x slower to 1.2x faster.
STAGED_FROM = 16 << 20
# Staging buffers kept for reuse, in bytes (least recently used dropped first). A call whose
# arrays do not fit in what is free copies into buffers that are not kept.
STAGING_LIMIT = 1 << 30
# Copies of this many bytes or more are split over threads (NumPy releases the GIL to copy).
_PARALLEL_FROM = 4 << 20
_ALIGN = 64


class HostInputs:
    """Prepares large NumPy arguments for PJRT's transfer (see the comment above).

    A staging buffer is in use while anything but this pool holds its memory: the transfer
    keeps the NumPy view it was given until the device buffer made from it is freed (after
    the execution that read it), and a result XLA wrote into a donated argument keeps it as
    long as that result lives. A buffer is handed out again only once its reference count
    says nobody else holds it; until then, new buffers are made (within `STAGING_LIMIT`).
    """

    def __init__(self, limit: int = STAGING_LIMIT):
        self._lock = threading.Lock()
        self._limit = limit
        self._held = 0
        self._tick = 0
        # nbytes -> entries [owner (uint8 array), offset of the aligned start, last use]
        self._entries: dict[int, list[list]] = {}
        self._owners: set[int] = set()
        self._free_refs = self._count_free_refs()
        self._workers = None
        self._workers_pid = None

    @staticmethod
    def _count_free_refs() -> int:
        # What `sys.getrefcount` reads for an entry's owner that only the pool holds, measured
        # the way `_take` reads it (interpreters differ in what the call itself adds).
        entry = [np.empty(1, np.uint8), 0, 0]
        return sys.getrefcount(entry[0])

    def prepare(self, x: np.ndarray) -> tuple[np.ndarray, bool]:
        """(what to hand the transfer for `x`, whether that is `x`'s own memory)."""
        if x.nbytes < STAGED_FROM or (
            x.flags.c_contiguous and x.__array_interface__["data"][0] % _ALIGN == 0
        ):
            return x, True
        return self.copy(x), False

    def prepare_tree(self, args: tuple, kwargs: dict) -> tuple[tuple, dict, bool]:
        """`args` and `kwargs` with every NumPy array of `IN_PLACE_FROM` bytes or more
        prepared (in lists, tuples and dicts too); and whether any of them is the caller's."""
        in_place = False
        prepared = []
        for x in args:
            t = type(x)
            if t is np.ndarray and x.nbytes >= IN_PLACE_FROM:
                if x.nbytes >= STAGED_FROM:
                    x, own = self.prepare(x)
                    in_place = in_place or own
                else:
                    in_place = True
            elif t in _CONTAINERS:
                x, own = self._prepare_container(x)
                in_place = in_place or own
            prepared.append(x)
        if kwargs:
            kwargs, own = self._prepare_container(kwargs)
            in_place = in_place or own
        return tuple(prepared), kwargs, in_place

    def _prepare_container(self, tree) -> tuple[object, bool]:
        in_place = False

        def one(x):
            nonlocal in_place
            t = type(x)
            if t is np.ndarray:
                if x.nbytes < IN_PLACE_FROM:
                    return x
                prepared, own = self.prepare(x)
                in_place = in_place or own
                return prepared
            if t is tuple or t is list:
                return t(one(v) for v in x)
            if t is dict:
                return {k: one(v) for k, v in x.items()}
            return x

        return one(tree), in_place

    def owns(self, x: np.ndarray) -> bool:
        """Whether `x` is a view of one of this pool's staging buffers."""
        return id(x.base) in self._owners

    def copy(self, x: np.ndarray) -> np.ndarray:
        """An aligned, C-contiguous copy of `x` in a staging buffer."""
        nbytes = x.nbytes
        with self._lock:
            owner, offset = self._take(nbytes)
            view = owner[offset : offset + nbytes].view(x.dtype).reshape(x.shape)
        self._copy_into(view, x)
        return view

    def _take(self, nbytes: int) -> tuple[np.ndarray, int]:
        self._tick += 1
        entries = self._entries.setdefault(nbytes, [])
        for attempt in range(2):
            for entry in entries:
                if sys.getrefcount(entry[0]) == self._free_refs:
                    entry[2] = self._tick
                    return entry[0], entry[1]
            if not entries or attempt:
                break
            # jaxlib lets go of a buffer read in place once the call that read it is done,
            # but drops the Python reference only at its next call: drop it now.
            _compat.release_host_references()
        owner = np.empty(nbytes + _ALIGN, np.uint8)
        offset = -owner.__array_interface__["data"][0] % _ALIGN
        # Fault the pages in now, once, rather than in every copy.
        owner.fill(0)
        if self._held + nbytes > self._limit:
            self._evict(self._held + nbytes - self._limit)
        if self._held + nbytes <= self._limit:
            entries.append([owner, offset, self._tick])
            self._owners.add(id(owner))
            self._held += nbytes
        return owner, offset

    def _evict(self, needed: int) -> None:
        """Drops free buffers, least recently used first, until `needed` bytes are gone."""
        free = [
            (entry[2], nbytes, entry)
            for nbytes, entries in self._entries.items()
            for entry in entries
            if sys.getrefcount(entry[0]) == self._free_refs
        ]
        for _, nbytes, entry in sorted(free, key=lambda item: item[0]):
            if needed <= 0:
                break
            # (by identity: `list.remove` compares entries, and so their arrays, with ==)
            bucket = self._entries[nbytes]
            del bucket[next(i for i, e in enumerate(bucket) if e is entry)]
            self._owners.discard(id(entry[0]))
            self._held -= nbytes
            needed -= nbytes

    def release(self) -> None:
        """Forgets every staging buffer (those in use are freed when their user lets go)."""
        with self._lock:
            self._entries.clear()
            self._owners.clear()
            self._held = 0

    def held_bytes(self) -> int:
        return self._held

    def _copy_into(self, dst: np.ndarray, src: np.ndarray) -> None:
        workers = self._pool() if src.nbytes >= _PARALLEL_FROM else None
        if workers is None or not src.flags.c_contiguous:
            np.copyto(dst, src, casting="no")
            return
        pool, n = workers
        flat_dst, flat_src = dst.reshape(-1), src.reshape(-1)
        bounds = np.linspace(0, flat_src.size, n + 1).astype(np.int64)
        futures = [
            pool.submit(np.copyto, flat_dst[a:b], flat_src[a:b])
            for a, b in zip(bounds[1:-1], bounds[2:], strict=True)
        ]
        np.copyto(flat_dst[: bounds[1]], flat_src[: bounds[1]])
        for future in futures:
            future.result()

    def _pool(self):
        """(a thread pool, how many parts a copy is split into), or None on one core."""
        n = min(4, os.cpu_count() or 1)
        if n < 2:
            return None
        if self._workers is None or self._workers_pid != os.getpid():
            # A pool made before a fork has no threads in the child: make a new one there.
            self._workers = concurrent.futures.ThreadPoolExecutor(
                n - 1, thread_name_prefix="aotkit-staging"
            )
            self._workers_pid = os.getpid()
        return self._workers, n


host_inputs = HostInputs()


_avals: dict[ShapeDtype, object] = {}
_PYTHON_SCALARS = frozenset((bool, int, float, complex))
# NumPy dtypes (native byte order) that jaxlib's C++ transfer keeps as they are in either x64
# mode: all but the 64-bit ones, which x64-off mode narrows.
_EXACT_NUMPY = frozenset(
    np.dtype(t).newbyteorder("=")
    for t in (
        np.bool_, np.int8, np.int16, np.int32, np.uint8, np.uint16, np.uint32,
        np.float16, np.float32, np.complex64, ml_dtypes.bfloat16,
    )
)  # fmt: skip
_EXACT_NUMPY_SCALARS = frozenset(d.type for d in _EXACT_NUMPY)
# The NumPy scalar types of the dtypes x64-off mode narrows (they key as themselves in x64 mode).
_WIDE_NUMPY_SCALARS = frozenset((np.float64, np.int64, np.uint64, np.complex128))
# The dtype jaxlib's C++ transfer gives a Python scalar, indexed by x64 mode.
_CPP_SCALAR_DTYPES = {
    bool: (np.dtype(np.bool_), np.dtype(np.bool_)),
    float: (np.dtype(np.float32), np.dtype(np.float64)),
    complex: (np.dtype(np.complex64), np.dtype(np.complex128)),
    int: (np.dtype(np.int32), np.dtype(np.int64)),
}


def host_transfer_exact(leaf, spec: ShapeDtype, x64: bool) -> bool:
    """Whether jaxlib's C++ transfer (in JAX's x64 mode `x64`) turns a host leaf (NumPy
    value or Python scalar) into exactly the buffer of `spec` that the checked call makes.
    With x64 off, it narrows the NumPy dtypes outside `_EXACT_NUMPY` (`native_dispatcher`
    never hands it those in that mode, so no other dtype's signature is ever theirs)."""
    t = type(leaf)
    if t is np.ndarray or isinstance(leaf, np.generic):
        return leaf.dtype == spec.dtype and (x64 or leaf.dtype in _EXACT_NUMPY)
    return t in _CPP_SCALAR_DTYPES and _CPP_SCALAR_DTYPES[t][x64] == spec.dtype


def _aval(spec: ShapeDtype):
    """One shared abstract value per spec, so that an output fed back in is known by identity."""
    aval = _avals.get(spec)
    if aval is None:
        aval = _avals.setdefault(spec, _compat.shaped_array(spec.shape, spec.dtype))
    return aval


# XLA's names of the element types, as an HLO module's entry layout prints them.
_HLO_ELEMENT = dtypes.HLO_NAMES


def _hlo_type(spec: ShapeDtype) -> str:
    name = dtypes.short_name(spec.dtype)
    return f"{_HLO_ELEMENT.get(name, name)}[{','.join(map(str, spec.shape))}]"


def _aotkit_type(hlo: str) -> str:
    """`s32[4]` as aotkit spells it (`i32[4]`), for messages."""
    element, bracket, rest = hlo.partition("[")
    names = {v: k for k, v in _HLO_ELEMENT.items()}
    return f"{names.get(element, element)}{bracket}{rest}"


def _split_top(text: str) -> list[str]:
    """`text` split at the commas outside brackets, braces and parentheses."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    tail = text[start:].strip()
    return [*parts, tail] if tail else parts


def _output_memory_kinds(exe) -> list | None:
    """The memory kind of each result of a single-device executable, as its runtime metadata
    says, or None where this jaxlib does not tell."""
    get = getattr(exe, "get_output_memory_kinds", None)
    try:
        kinds = get() if get is not None else None
    except Exception:  # noqa: BLE001 - no such metadata on this client: nothing to check
        return None
    return list(kinds[0]) if isinstance(kinds, list) and len(kinds) == 1 else None


def _module_head(exe) -> str | None:
    """The first line of a loaded executable's HLO module (its `HloModule ...` header), or
    None when it has several modules. Printing the module costs about 1 µs per op: callers
    that read several fields print it once and pass the line along."""
    modules_ = exe.hlo_modules()
    if len(modules_) != 1:
        return None
    return modules_[0].to_string().split("\n", 1)[0]


def _head_field(exe, name: str, head: str | None = None) -> str | None:
    """What `name={...}` holds in the header of a loaded executable's HLO module (`head`,
    the `_module_head` if given), without the outer braces; None where it has no such field."""
    if head is None:
        head = _module_head(exe)
        if head is None:
            return None
    key = f"{name}={{"
    start = head.find(key)
    if start < 0:
        return None
    depth, i = 1, start + len(key)
    while i < len(head) and depth:
        depth += {"{": 1, "}": -1}.get(head[i], 0)
        i += 1
    return head[start + len(key) : i - 1]


def _aliased_parameters(exe, head: str | None = None) -> frozenset[int]:
    """The parameter numbers in `input_output_alias={ {0}: (1, {}, may-alias), ... }`."""
    field = _head_field(exe, "input_output_alias", head)
    return frozenset(int(n) for n in re.findall(r":\s*\((\d+),", field or ""))


def _entry_signature(exe, head: str | None = None) -> tuple[list[str], list[str]] | None:
    """(parameter types, result types) of a loaded executable, as `f32[4,3]` strings, from
    the `entry_computation_layout` of its HLO module; None where it prints none.

    A deserialized executable is checked against the signature the file declares for it:
    PJRT reads its arguments' bytes by the executable's own shapes, so a header that said
    `i32[4]` for an `f32[4]` executable would return float bits read as ints."""
    field = _head_field(exe, "entry_computation_layout", head)
    if field is None:
        return None
    layout = re.sub(r"/\*.*?\*/", "", field)  # `/*index=5*/`
    params, _, result = layout.partition(")->")
    strip = functools.partial(re.sub, r"\{[^{}]*\}", "")
    ins = [strip(p) for p in _split_top(params.removeprefix("("))]
    result = strip(result).strip()
    if result.startswith("(") and result.endswith(")"):
        outs = _split_top(result[1:-1])
    else:
        outs = [result]
    return ins, outs


class PjrtExecutable(Executable):
    """A loaded PJRT executable with its per-slot argument transfer closures."""

    def __init__(self, backend: PjrtBackend, name: str, exe, in_specs, out_specs, serialized=None):
        self.backend = backend
        # The bytes a deserialized executable was loaded from: jaxlib 0.10.2's CPU client
        # serializes such an executable without its object code (it loads, then fails with
        # "NOT_FOUND: Function ..._kernel not found" when run), so these are saved instead.
        self._serialized = serialized
        self.name = name
        self.in_specs = tuple(in_specs)
        self.out_specs = tuple(out_specs)
        self._exe = exe
        device = backend._device
        self._sharding = backend._sharding
        self._slots = [self._slot(i, s, device) for i, s in enumerate(self.in_specs)]
        self._handlers = [_compat.result_handler(_aval(s), self._sharding) for s in self.out_specs]
        self._run = self._make_execute(exe.execute_sharded, self._slots, self._handlers)

    @property
    def execute(self):
        """`execute(leaves)`: the per-arity closure built once (Compiled fetches it once)."""
        return self._run

    @staticmethod
    def _make_execute(run, slots, handlers):
        """`execute(leaves)`, unrolled for small arities: a list comprehension costs ~1 µs."""
        if len(slots) == 0:
            return lambda leaves: run([]).consume_with_handlers(handlers)
        if len(slots) == 1:
            (put0,) = slots
            return lambda leaves: run([put0(leaves[0])]).consume_with_handlers(handlers)
        if len(slots) == 2:
            put0, put1 = slots
            return lambda leaves: run([put0(leaves[0]), put1(leaves[1])]).consume_with_handlers(
                handlers
            )

        def execute(leaves):
            return run([put(x) for put, x in zip(slots, leaves)]).consume_with_handlers(handlers)

        return execute

    def _slot(self, index: int, spec: ShapeDtype, device):
        """The transfer function for argument `index`: leaf -> device array, or mismatch."""
        array_type = _compat.array_type()
        shape, dtype = spec.shape, spec.dtype
        sharding = self._sharding
        aval = _aval(spec)
        device_put = _compat.host_to_device(aval, sharding, device)
        in_place_put = _compat.host_to_device(aval, sharding, device, in_place=True)
        staged_from, staging = STAGED_FROM, host_inputs
        backend_name = self.backend.name
        scalar_type = dtype.type
        # Python scalars that convert without a range check (ints go the long way).
        plain_scalars = frozenset(
            t for t in (bool, float, complex) if shape == () and host_fits(t, dtype)
        )

        def put(x):
            t = type(x)
            if t is array_type:
                # Arrays this backend returned carry our aval and sharding objects; anything
                # else (e.g. a jax.Array) is compared by value.
                if x.aval is not aval and (x.dtype != dtype or x.shape != shape):
                    raise ArgumentMismatch(index, f"expected {spec}, got {describe(x)}")
                s = x.sharding
                if s is not sharding and s != sharding and s.device_set != {device}:
                    raise ArgumentMismatch(
                        index,
                        f"lives on {sorted(map(str, s.device_set))}, but backend "
                        f"{backend_name!r} runs it on {device}; pass np.asarray(x) or "
                        "compile for that backend",
                        ValueError,
                    )
                return live(index, x)
            elif t is np.ndarray:
                if x.dtype == dtype and x.shape == shape:
                    if x.nbytes >= staged_from:
                        # A large array is staged (see `HostInputs`) unless the native
                        # dispatch staged it already; the checked call never reads the
                        # caller's memory in place, so it need not wait for the results.
                        return in_place_put(x if staging.owns(x) else staging.copy(x))
                    return device_put(x)
            elif t in plain_scalars:
                return device_put(np.asarray(x, dtype))
            elif t is scalar_type and shape == ():
                return device_put(np.asarray(x))
            return device_put(host_value(index, x, spec))

        return put

    def dispatcher(self, name: str, python_call):
        """jaxlib's C++ dispatch in front of `python_call` (see `native_dispatcher`), or None
        if this jaxlib has none."""

        def run(x64: bool, args: tuple, kwargs: dict):
            out = python_call(*args, **kwargs)
            return out, self.fastpath(out, args, kwargs, x64)

        return native_dispatcher(name, python_call, run)

    def fastpath(self, out, args: tuple, kwargs: dict, x64: bool):
        """What jaxlib's C++ dispatch caches to run this executable again for the argument
        signature of `args`/`kwargs` (just run, giving `out`), or None when its transfer
        would not turn such arguments into exactly the compiled buffers."""
        array_type = _compat.array_type()
        specs = self.in_specs

        def exact(leaf, spec: ShapeDtype) -> bool:
            # An array: the checked call has seen its spec, device and liveness.
            return type(leaf) is array_type or host_transfer_exact(leaf, spec, x64)

        # (flattened as the dispatch flattens them: a typed key's leaf is its data, the
        # module's argument, and its implementation part of the cached signature)
        leaves = _compat.dispatch_leaves((args, kwargs))
        if leaves is None or len(leaves) != len(specs) or not all(map(exact, leaves, specs)):
            return None
        return _compat.fastpath_data(self._exe, out, len(specs), self._sharding, self._sharding)

    def as_text(self) -> str:
        return "\n".join(m.to_string() for m in self._exe.hlo_modules())

    def aliased_arguments(self) -> frozenset[int] | None:
        head = getattr(self, "_head", None)  # printed already when it was deserialized
        return _aliased_parameters(self._exe, head)

    def cost_analysis(self) -> dict[str, float] | None:
        return cost_of(self._exe)

    def memory_analysis(self) -> MemoryAnalysis | None:
        try:
            stats = self._exe.get_compiled_memory_stats()
        except Exception:  # not every plugin reports memory statistics
            return None
        code = stats.generated_code_size_in_bytes
        try:
            code = max(code, self._exe.size_of_generated_code_in_bytes())
        except Exception:  # optional on plugins
            pass
        return MemoryAnalysis(
            argument_size_in_bytes=stats.argument_size_in_bytes,
            output_size_in_bytes=stats.output_size_in_bytes,
            alias_size_in_bytes=stats.alias_size_in_bytes,
            temp_size_in_bytes=stats.temp_size_in_bytes,
            generated_code_size_in_bytes=code,
        )

    def runtime_executable(self):
        return self._exe

    def serialize(self) -> bytes | None:
        if self._serialized is not None:
            return self._serialized
        try:
            return bytes(self._exe.serialize())
        except Exception:  # a plugin without executable serialization: portable only
            return None
