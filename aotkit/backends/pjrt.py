"""PJRT backends: compile a StableHLO module with XLA through a PJRT client and run it.

`cpu` (jaxlib's embedded CPU client) and the plugins (`cuda`, `rocm`, `tpu`, any plugin
`.so`) differ only in where their client comes from; this module holds what they share for
programs on one device. Sharded programs build on it in aotkit/backends/pjrt_spmd.py, whose
`SpmdBackend` (a `PjrtBackend` that also compiles for several devices) is the class the
`cpu` and plugin backends are; nothing here imports it.

The call path is the hot path of `Compiled.__call__`, and it has two layers. In front is
jaxlib's C++ dispatch (the one JAX's own `Compiled` runs on; aotkit/backends/dispatch.py):
once an argument signature has been checked, and if jaxlib's C++ transfer turns such
arguments into exactly the compiled buffers, later calls with that signature never enter
Python. Behind it is the
checked Python call: each argument slot has a precomputed closure that passes a matching
device array through untouched, copies a NumPy value with jaxlib's batched transfer, or
raises the mismatch `Compiled` words as a TypeError; outputs are wrapped by jaxlib's C++
result handlers.

NumPy arguments the transfer may read after the call are prepared in front of both
(`HostInputs`, aotkit/backends/host_inputs.py). On jaxlib's CPU client (those of 2 KiB or
more) a large one is read in place when it is aligned as XLA needs, and otherwise copied at
memory bandwidth into a reused staging buffer; a call that hands the transfer one of the
caller's arrays returns once its results are ready. On other clients every NumPy argument
is copied first. The caller's arrays are never written.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping

import jax
import jaxlib
import numpy as np
from jaxlib.mlir import ir

from aotkit import _compat, _context, dtypes, modules
from aotkit.backends import xla_tpu
from aotkit.backends.base import (
    ArgumentMismatch,
    Backend,
    Executable,
    MemoryAnalysis,
    check_verifies,
    describe,
    host_cpu,
    host_fits,
    host_value,
    option_danger,
)
from aotkit.backends.dispatch import live, native_dispatcher
from aotkit.backends.host_inputs import (
    NONE_KNOWN,
    STAGED_FROM,
    host_inputs,
    host_transfer_exact,
)
from aotkit.errors import CompileError
from aotkit.specs import ShapeDtype

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
        check_verifies(
            module,
            name,
            where,
            backend,
            "build modules with aotkit.lower or check them with Lowered.as_text()",
        )
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
        danger = option_danger(key, value)
        if danger is not None:
            raise ValueError(f"{where}: option {key!r} {danger}")
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
    # The NumPy arguments its client copies while a call runs, so that the call need not wait
    # for its results (aotkit/backends/host_inputs.py); none known to be, but for jaxlib's CPU
    # client.
    copied_in_call = NONE_KNOWN
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
        if self.platform == "tpu":  # what XLA:TPU would abort on or refuse, rewritten or refused
            module = xla_tpu.legalize(module, where)
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
        return native_dispatcher(name, python_call, run, self.copied_in_call)


_avals: dict[ShapeDtype, object] = {}


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

    def dispatcher(self, name: str, python_call, fastpath=None, unread: tuple = ()):
        """jaxlib's C++ dispatch in front of `python_call` (see `native_dispatcher`), or None
        if this jaxlib has none; `fastpath` is what it caches (default: `self.fastpath`),
        `unread` the positional arguments no executable reads."""
        fastpath = fastpath or self.fastpath

        def run(x64: bool, args: tuple, kwargs: dict):
            out = python_call(*args, **kwargs)
            return out, fastpath(out, args, kwargs, x64)

        return native_dispatcher(name, python_call, run, self.backend.copied_in_call, unread)

    def fastpath(self, out, args: tuple, kwargs: dict, x64: bool, pruned=None):
        """What jaxlib's C++ dispatch caches to run this executable again for the argument
        signature of `args`/`kwargs` (just run, giving `out`), or None when its transfer
        would not turn such arguments into exactly the compiled buffers. `pruned` is the
        `PrunedExecutable` calling it with every leaf: the dispatch passes its kept ones."""
        array_type = _compat.array_type()
        specs = self.in_specs if pruned is None else pruned.in_specs

        def exact(leaf, spec: ShapeDtype) -> bool:
            # An array: the checked call has seen its spec, device and liveness.
            return type(leaf) is array_type or host_transfer_exact(leaf, spec, x64)

        # (flattened as the dispatch flattens them: a typed key's leaf is its data, the
        # module's argument, and its implementation part of the cached signature)
        leaves = _compat.dispatch_leaves((args, kwargs))
        if leaves is None or len(leaves) != len(specs) or not all(map(exact, leaves, specs)):
            return None
        kept = None if pruned is None else [i in pruned.kept for i in range(len(specs))]
        return _compat.fastpath_data(
            self._exe, out, len(self.in_specs), self._sharding, self._sharding, kept
        )

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
