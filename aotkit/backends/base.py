"""The backend interface: what the compile stage needs from a backend, and nothing more.

A `Backend` has a `name`, a `platform`, `devices()` and `compile(module, options)`, which
returns an `Executable`. An `Executable` runs flat argument leaves to flat results and
answers the inspection questions `Compiled` forwards (`as_text`, `cost_analysis`,
`memory_analysis`, `runtime_executable`); a view it cannot give is `None`.

Every optional capability is declared here with the default of a backend that lacks it, so
callers ask the object and never probe it with `getattr`: cross-compiling
(`Backend.cross_compiles`, `normalize_target`, the `target=`/`target_options=` keywords of
`compile`), sharded programs (`Backend.compile_spmd`, `Executable.partitioning`), native
dispatch (`Backend.jit_dispatcher`, `Executable.dispatcher`, `Executable.fastpath`), and
dynamic shapes (`Backend.dynamic_shapes`, `Backend.compile_dynamic`, `Executable.execute_bound`:
one executable for every size of a symbolic program).

Results. Every result of one backend's executables is of one type, `Backend.result_type`:
`jax.Array` for PJRT backends (`cpu`, the plugins), where the result stays in the buffer
the device wrote (no copy; the call returns before the device finishes); `numpy.ndarray`
for every other backend (`interpreter`, `iree`), 0-d results included (never a NumPy
scalar). Those hold no PJRT buffer to hand out: the interpreter computes on the host, and
IREE's buffers belong to IREE's runtime, so the result is copied to the host once, and
making a `jax.Array` of it would copy it again onto a device that did not compute it.
Both types are accepted as arguments by every backend, and `np.asarray(result)` is a
NumPy array for both.

Argument rules shared by every backend live here too, so that `Compiled` reports the same
errors whatever runs underneath: an argument must be a NumPy array (or NumPy scalar) of
exactly the compiled shape and dtype, an array the backend itself produced, or a Python
scalar filling a 0-d slot whose dtype kind is its own or higher (NEP 50: `3.` fits
`f32[]`, `3` fits `u8[]` when in range, `3.` does not fit `i32[]`).
"""

from __future__ import annotations

import abc
import functools
import hashlib
import platform
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass

import numpy as np
from jaxlib.mlir import ir

from aotkit import _compat, dtypes, modules
from aotkit.errors import CompileError
from aotkit.specs import ShapeDtype


class ArgumentMismatch(Exception):
    """Internal: leaf `index` does not fit its slot; `Compiled` turns it into a user error."""

    def __init__(
        self, index: int, reason: str, kind: type[Exception] = TypeError, says_fix: bool = False
    ):
        super().__init__(index, reason)
        self.index = index
        self.reason = reason
        self.kind = kind
        self.says_fix = says_fix  # `reason` already says what to do


@dataclass(frozen=True, slots=True)
class MemoryAnalysis:
    """Byte sizes of a compiled executable's buffers and code."""

    argument_size_in_bytes: int
    output_size_in_bytes: int
    alias_size_in_bytes: int
    temp_size_in_bytes: int
    generated_code_size_in_bytes: int

    def to_dict(self) -> dict[str, int]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class BackendInfo:
    """One row of `aotkit.backends.available()`."""

    name: str
    platform: str
    version: str
    device_count: int


class Executable(abc.ABC):
    """A module compiled by one backend for fixed flat argument and result specs."""

    backend: Backend
    name: str
    in_specs: tuple[ShapeDtype, ...]
    out_specs: tuple[ShapeDtype, ...]
    # A sharded executable's `aotkit.spmd.Partitioning`, bound to its devices and holding
    # the shardings XLA compiled (what `Backend.compile_spmd` returns); None for an
    # executable that runs on one device.
    partitioning = None

    @abc.abstractmethod
    def execute(self, leaves: Sequence) -> list:
        """Runs on flat argument leaves; raises `ArgumentMismatch` for a leaf that does not fit."""

    @abc.abstractmethod
    def as_text(self) -> str:
        """The backend's final program text (optimized HLO, or the final StableHLO)."""

    def dispatcher(
        self, name: str, python_call: Callable, fastpath=None, unread: tuple = ()
    ) -> Callable | None:
        """An optional native callable in front of `python_call` (None: call Python directly).

        It must behave exactly like `python_call`, handing it every call it cannot run;
        `fastpath` replaces `self.fastpath` as what it caches (a `PrunedExecutable`'s), and
        `unread` are positional arguments the executable does not read (its pruned leaves).
        """
        return None

    def fastpath(self, out, args: tuple, kwargs: dict, x64: bool):
        """What the native dispatch of `Backend.jit_dispatcher` caches to run this executable
        again for the argument signature of `args`/`kwargs` (just run, giving `out`, with
        JAX's x64 mode `x64`), or None when it cannot run such calls exactly as the checked
        Python call does (the call then stays in Python). None for backends without one."""
        return None

    def execute_bound(self, leaves: Sequence, values: dict[str, int]) -> list:
        """Runs an executable whose specs have symbolic dimensions (`Backend.compile_dynamic`
        made it) on leaves whose shapes give the symbols `values` (the caller bound them:
        `signatures.SymbolicSignature.bind`); it checks them against the leaves' shapes and the
        constraints before running. An executable of static specs runs `execute`."""
        return self.execute(leaves)

    def cost_analysis(self) -> dict[str, float] | None:
        return None

    def memory_analysis(self) -> MemoryAnalysis | None:
        return None

    @abc.abstractmethod
    def runtime_executable(self):
        """The backend's own executable object."""

    def serialize(self) -> bytes | None:
        """The backend's own serialized form of this executable (what `Backend.deserialize`
        reads back, in the format `Backend.executable_format` names), or None when it has
        none: an artifact then holds only the portable StableHLO, which loading compiles."""
        return None

    def aliased_arguments(self) -> frozenset[int] | None:
        """The arguments whose buffers the executable writes its results into (the donated
        ones XLA used), or None where the backend does not say. A loaded artifact is checked
        against it: an argument the executable consumes must be marked donated."""
        return None

    def compiled_for(self) -> dict[str, str]:
        """The `Backend.target()` this executable was compiled for (a cross-compiling
        backend's executable may be for another target than its backend's default)."""
        return self.backend.target()


class PrunedExecutable(Executable):
    """An executable of a module that takes no argument for some input leaves (`pruned`: the
    unused arguments jax.jit prunes), called with every leaf as its program is: a pruned leaf
    is checked against its spec, as a transferred one would be, and never transferred (what
    jax.jit's executable does). Everything else is the executable's own (`inner`)."""

    def __init__(self, inner: Executable, in_specs, pruned):
        in_specs = tuple(in_specs)
        self.inner = inner
        self.backend = inner.backend
        self.name = inner.name
        self.in_specs = in_specs
        self.out_specs = inner.out_specs
        self.pruned = tuple(pruned)
        dropped = frozenset(self.pruned)
        self.kept = tuple(i for i in range(len(in_specs)) if i not in dropped)
        if len(self.kept) != len(inner.in_specs) or not dropped <= set(range(len(in_specs))):
            raise ValueError(
                f"executable {inner.name!r} takes {len(inner.in_specs)} arguments, but "
                f"{len(in_specs)} leaves less pruned {list(self.pruned)} are {len(self.kept)}"
            )
        self._unread = tuple((i, in_specs[i]) for i in self.pruned)
        self._run = inner.execute

    def execute(self, leaves: Sequence) -> list:
        for index, spec in self._unread:
            _check_unread(index, leaves[index], spec)
        kept = self.kept
        try:
            return self._run([leaves[i] for i in kept])
        except ArgumentMismatch as mismatch:
            mismatch.index = kept[mismatch.index]  # the executable's argument: a kept leaf
            raise

    def as_text(self) -> str:
        return self.inner.as_text()

    def dispatcher(
        self, name: str, python_call: Callable, fastpath=None, unread: tuple = ()
    ) -> Callable | None:
        return self.inner.dispatcher(name, python_call, self.fastpath, unread)

    def fastpath(self, out, args: tuple, kwargs: dict, x64: bool):
        return self.inner.fastpath(out, args, kwargs, x64, pruned=self)

    def cost_analysis(self) -> dict[str, float] | None:
        return self.inner.cost_analysis()

    def memory_analysis(self) -> MemoryAnalysis | None:
        return self.inner.memory_analysis()

    def runtime_executable(self):
        return self.inner.runtime_executable()

    def serialize(self) -> bytes | None:
        return self.inner.serialize()

    def aliased_arguments(self) -> frozenset[int] | None:
        aliased = self.inner.aliased_arguments()
        return None if aliased is None else frozenset(self.kept[i] for i in aliased)

    def compiled_for(self) -> dict[str, str]:
        return self.inner.compiled_for()


def _check_unread(index: int, leaf, spec: ShapeDtype) -> None:
    """A leaf the executable does not read: its shape and dtype checked, nothing copied (a
    device array's data stays where it is, a host value's is not converted)."""
    if type(leaf) is _compat.array_type():
        if leaf.dtype != spec.dtype or leaf.shape != spec.shape:
            raise ArgumentMismatch(index, _expected(spec, leaf))
    else:
        host_value(index, leaf, spec)  # what a transferred leaf is checked by, or its error


class Backend(abc.ABC):
    """A compiler plus runtime for StableHLO modules."""

    name: str
    platform: str
    # The format `Executable.serialize` writes ("pjrt" for PJRT's serialized executables),
    # or None when this backend's executables do not serialize: loading an artifact then
    # compiles its portable StableHLO, and the persistent cache skips the backend.
    executable_format: str | None = None
    # The type of every result this backend's executables return (see the module docstring).
    result_type: type = np.ndarray
    # Whether `compile` takes a `target=`/`target_options=` other than None, compiling for
    # a device other than its own (iree); `normalize_target` checks them. Stages refuse the
    # keywords for any other backend before compiling.
    cross_compiles: bool = False
    # Whether `compile_dynamic` compiles a symbolic program (dynamic StableHLO) once into an
    # executable that runs every size its signature allows (iree). Other backends compile
    # it per shape, refined to static StableHLO first (aotkit/symbolic/specialize.py).
    dynamic_shapes: bool = False
    # Whether this backend's executables run in this process. False for a deviceless target
    # (a TPU topology compiled for without a TPU, aotkit/backends/tpu_topology.py): its
    # executables are inspected and saved, never run, and the persistent cache skips them.
    runs_here: bool = True

    @abc.abstractmethod
    def devices(self) -> list:
        """The devices this backend runs on; single-device executables run on the first."""

    def global_devices(self) -> list:
        """The devices a sharded program may be placed on: `devices()`, and in a run of
        several processes (aotkit.distributed) the other processes' devices too."""
        return self.devices()

    @property
    def version(self) -> str:
        return ""

    def info(self) -> BackendInfo:
        return BackendInfo(self.name, self.platform, self.version, len(self.devices()))

    def target(self) -> dict[str, str]:
        """What this backend's serialized executables are tied to, as strings (backend
        name, platform, versions, the machine when code is compiled for it). An artifact
        records it; a backend whose target is equal loads the executable as it is, any
        other compiles the portable StableHLO instead."""
        return {"backend": self.name, "platform": self.platform, "version": self.version}

    def target_for(self, saved: dict[str, str]) -> dict[str, str]:
        """The target this backend would load an executable compiled for `saved` as (equal
        to `saved` when it loads it as it is). Backends with one target: `target()`."""
        return self.target()

    def deserialize(
        self,
        data: bytes,
        *,
        name: str,
        in_specs: tuple[ShapeDtype, ...],
        out_specs: tuple[ShapeDtype, ...],
        options: Mapping[str, object] | None = None,
        target: dict[str, str] | None = None,
    ) -> Executable:
        """Rebuilds an executable from `Executable.serialize()` output of a backend with an
        equal `target_for(target)` (`target` is what it was compiled for). `data` must come
        from a checked artifact (aotkit/artifacts.py): backends load it as machine code.
        Failures raise CompileError."""
        raise NotImplementedError(
            f"backend {self.name!r} does not load serialized executables "
            "(executable_format is None); compile the artifact's portable StableHLO"
        )

    @abc.abstractmethod
    def compile(
        self,
        module: ir.Module,
        options: Mapping[str, object] | None = None,
        *,
        target: str | None = None,
        target_options: Mapping[str, str] | None = None,
    ) -> Executable:
        """Compiles a verified module with a public `@main`; failures raise CompileError.

        `target`/`target_options` choose another device to compile for; only a backend that
        `cross_compiles` takes values other than None (others: `normalize_target` refuses)."""

    def compile_dynamic(
        self,
        module: ir.Module,
        options: Mapping[str, object] | None,
        in_specs: tuple[ShapeDtype, ...],
        out_specs: tuple[ShapeDtype, ...],
    ) -> Executable:
        """Compiles a verified module with dynamic shapes (`tensor<?x784xf32>`) whose
        signature is `in_specs -> out_specs`, specs with symbolic dimensions, into one
        executable with those specs (it runs with `Executable.execute_bound`). Raises
        `aotkit.symbolic.prover.NotDynamic` where the module cannot be compiled so (the
        caller compiles it per shape), CompileError where the compiler fails. Only a
        backend with `dynamic_shapes` has it."""
        raise NotImplementedError(
            f"backend {self.name!r} compiles symbolic programs per shape (dynamic_shapes is "
            "False); compile the program with Lowered.compile, which specializes it"
        )

    def normalize_target(
        self, target: str | None = None, target_options: Mapping[str, str] | None = None
    ) -> tuple:
        """Checks `compile`'s `target`/`target_options`; returns a hashable key for compile
        caches. A backend that does not cross-compile takes only None for both (key `()`),
        and refuses anything else with a ValueError."""
        if target is None and target_options is None:
            return ()
        given = f"target={target!r}" if target is not None else f"target_options={target_options!r}"
        raise ValueError(
            f"backend {self.name!r}: {given} applies to backend='iree', which cross-compiles; "
            f"backend {self.name!r} compiles for its own devices; drop it or compile with "
            "backend='iree'"
        )

    def compile_spmd(
        self, module: ir.Module, options: Mapping[str, object] | None, partitioning
    ) -> Executable:
        """Compiles a module partitioned over several devices (`partitioning`, an
        `aotkit.spmd.Partitioning`) into an executable whose `partitioning` is bound to its
        devices and the compiled shardings. Backends that run on one device refuse."""
        raise ValueError(
            f"backend {self.name!r} runs programs on one device, but module "
            f"{modules.module_name(module)!r} is partitioned over {partitioning.describe()}; "
            "compile it on a PJRT backend such as 'cpu'"
        )

    def deserialize_spmd(
        self,
        data: bytes,
        *,
        name: str,
        in_specs: tuple[ShapeDtype, ...],
        out_specs: tuple[ShapeDtype, ...],
        partitioning,
        options: Mapping[str, object] | None = None,
        donates: bool = False,
    ) -> Executable:
        """Rebuilds a sharded executable (`Executable.serialize()` of what `compile_spmd`
        made) on the devices of `partitioning`, as `deserialize` does for one device.
        Backends that run on one device refuse."""
        raise ValueError(
            f"backend {self.name!r} runs programs on one device, but {name!r} is partitioned "
            f"over {partitioning.describe()}; load it on a PJRT backend such as 'cpu'"
        )

    def estimate_cost(self, module: ir.Module) -> dict[str, float] | None:
        """The compiler's cost estimate of a module before it is compiled (`Lowered.
        cost_analysis`), or None where this backend has none."""
        return None

    def input_sharding(self):
        """The sharding a single-device executable's arguments and results have on this
        backend (a `jax.sharding.SingleDeviceSharding`), or None where its arrays are not
        JAX's (the interpreter's and iree's results are NumPy arrays)."""
        return None

    def jit_dispatcher(self, name: str, python_call: Callable, run: Callable) -> Callable | None:
        """A native callable for `jit` to put in front of its checked Python call, or None
        (the default: `jit` calls Python directly).

        `run(x64, args, kwargs) -> (out, fastpath or None)` is called for every call the
        native side has not cached: it runs the checked call and returns what to cache
        (`Executable.fastpath`). `python_call(*args, **kwargs)` is the checked call itself,
        for what the native side never runs. The callable behaves exactly like
        `python_call`, and has a `clear_cache()` that forgets every cached signature."""
        return None

    def __repr__(self) -> str:
        return f"<aotkit backend {self.name!r} platform={self.platform!r}>"


# Words of the names of options that count or size something. XLA reads some of these as
# unsigned sizes: xla_cpu_parallel_codegen_split_count = -1 ends the process in
# std::length_error (SIGABRT) during the compile, from a user's options or a file's alike.
_SIZE_WORDS = re.compile(r"(^|_)(count|counts|size|sizes|split|threads|num|bytes|limit)(_|$)")


def check_verifies(
    module: ir.Module,
    name: str,
    where: str,
    backend: str,
    hint: str = "build modules with aotkit.lower",
) -> None:
    """Verifies a module a backend is about to compile, inside its context: one that does not
    is a CompileError naming the first diagnostic, not a crash in the compiler."""
    try:
        module.operation.verify()
    except ir.MLIRError as e:
        raise CompileError(
            f"{where} rejected module {name!r}: it does not verify: "
            f"{modules.diagnostic(e)}; {hint}",
            backend=backend,
            module_name=name,
        ) from e


def negative_size(key: str, value) -> bool:
    """Whether option `key` = `value` is a negative count or size (refused before compiling:
    see `_SIZE_WORDS`)."""
    return (
        isinstance(value, int)
        and not isinstance(value, bool)
        and value < 0
        and _SIZE_WORDS.search(key) is not None
    )


# Counts of parts or threads above this make XLA's compile run for minutes with memory
# growing without bound (xla_cpu_parallel_codegen_split_count = 2**31 - 1 took 16 GB in 45
# s; 10,000 compiles in 2 s): refused from a user's options and a file's alike.
MAX_COUNT = 4096
_COUNT_WORDS = re.compile(r"(^|_)(count|counts|split|threads|num)(_|$)")


def aborts_on_purpose(key: str) -> bool:
    """Whether option `key` makes XLA end the process on purpose, a debugging check of its
    own (`xla_unsupported_crash_on_hlo_pass_noop_change` aborts compiling any module)."""
    return "crash" in key.lower()


def huge_count(key: str, value) -> bool:
    """Whether option `key` = `value` counts parts or threads above `MAX_COUNT`."""
    return (
        isinstance(value, int)
        and not isinstance(value, bool)
        and value > MAX_COUNT
        and _COUNT_WORDS.search(key) is not None
    )


def option_danger(key: str, value) -> str | None:
    """Why compiling with option `key` = `value` would end or exhaust the process, worded to
    follow the option's name, or None: `aborts_on_purpose`, `negative_size`, `huge_count`."""
    if aborts_on_purpose(key):
        return (
            "makes the compiler end the process on purpose (a debugging check of XLA's); "
            "leave it out"
        )
    if negative_size(key, value):
        return (
            f"has the negative value {value}, but it counts or sizes something and XLA would "
            "read it as a huge unsigned size (aborting the process); give 0 or a positive "
            "value, or leave the option out"
        )
    if huge_count(key, value):
        return (
            f"has the value {value}, a count of parts or threads above {MAX_COUNT}, which "
            "makes the compile run for minutes with memory growing without bound; give "
            f"{MAX_COUNT} or less, or leave the option out"
        )
    return None


@functools.cache
def host_cpu() -> str:
    """The host's architecture and a digest of its CPU feature flags (Linux), or its
    processor string elsewhere: CPU code compiled for the host (XLA's, IREE's llvm-cpu)
    uses its instruction set, which another CPU may lack."""
    machine = platform.machine() or "unknown"
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() in ("flags", "Features"):
                    features = " ".join(sorted(value.split()))
                    return f"{machine} {hashlib.sha256(features.encode()).hexdigest()[:16]}"
    except OSError:
        pass
    return f"{machine} {platform.processor()}".strip()


# NEP 50: a Python scalar fills a slot whose kind is its own or higher.


def host_fits(kind: type, dtype: np.dtype) -> bool:
    """Whether a Python scalar of type `kind` may fill a 0-d slot of `dtype` (NEP 50)."""
    return dtypes.WEAK_RANK[kind] <= dtypes.kind_rank(dtype)


def describe(leaf) -> str:
    """How an argument reads in an error: `f64[3]`, `Python float 3.0`, `str`."""
    kind = dtypes.weak_kind(leaf)
    if kind is not None:
        return f"Python {kind.__name__} {leaf!r}"
    shape = getattr(leaf, "shape", None)
    dtype = getattr(leaf, "dtype", None)
    if shape is not None and dtype is not None:
        try:
            return str(ShapeDtype(shape, dtype))
        except (TypeError, ValueError):
            return f"{type(leaf).__name__} of dtype {dtype} and shape {tuple(shape)}"
    return f"a {type(leaf).__name__}"


def host_value(index: int, leaf, spec: ShapeDtype) -> np.ndarray:
    """The NumPy array for a host argument (NumPy array/scalar or Python scalar) in `spec`'s slot.

    Raises `ArgumentMismatch` when it does not fit; device arrays are the caller's business.
    """
    t = type(leaf)
    if isinstance(leaf, np.ma.MaskedArray):
        raise ArgumentMismatch(
            index,
            "is a NumPy masked array, whose mask a program would drop; pass x.filled(value), "
            "or the data (x.data) and the mask (np.ma.getmaskarray(x)) as two arguments",
            says_fix=True,
        )
    if t is np.ndarray or isinstance(leaf, np.ndarray | np.generic):
        if not leaf.dtype.isnative:
            # Big-endian data: the same numbers, in the byte order the backend reads.
            leaf = np.asarray(leaf).astype(leaf.dtype.newbyteorder("="))
            t = np.ndarray
        if leaf.dtype == spec.dtype and leaf.shape == spec.shape:
            return leaf if t is np.ndarray else np.asarray(leaf)
        raise ArgumentMismatch(index, _expected(spec, leaf))
    kind = dtypes.weak_kind(leaf)
    if kind is not None:
        if spec.shape != () or not host_fits(kind, spec.dtype):
            raise ArgumentMismatch(index, _expected(spec, leaf))
        try:
            return np.asarray(leaf, dtype=spec.dtype)
        except OverflowError:
            raise ArgumentMismatch(
                index,
                f"is Python {kind.__name__} {leaf!r}, out of range for {spec}; pass a value "
                f"that fits or a NumPy array of dtype {spec.dtype.name}",
                ValueError,
            ) from None
    if isinstance(leaf, ShapeDtype):
        raise ArgumentMismatch(
            index, f"is the spec {leaf}; a compiled function runs on arrays, not specs"
        )
    raise ArgumentMismatch(index, _expected(spec, leaf), says_fix=_is_jax_tracer(leaf))


def _expected(spec: ShapeDtype, leaf) -> str:
    if _is_jax_tracer(leaf):
        return (
            f"expected {spec}, got a JAX tracer of {describe(leaf)} (the Compiled was called "
            "inside jax.jit, jax.grad or jax.vmap, or with a value leaked from one); a "
            "Compiled runs on concrete arrays and JAX cannot trace into it: call it outside "
            "JAX's transformations, or give JAX the Python function itself"
        )
    return f"expected {spec}, got {describe(leaf)}"


def _is_jax_tracer(leaf) -> bool:
    """Whether `leaf` is a `jax.core.Tracer` (read from its type, so JAX is not imported)."""
    return any(
        c.__name__ == "Tracer" and c.__module__.startswith("jax") for c in type(leaf).__mro__
    )
