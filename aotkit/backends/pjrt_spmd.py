"""PJRT backends, sharded programs: compile for XLA's SPMD partitioner and run on a mesh.

`SpmdBackend` is the class of the `cpu` and plugin backends: a `PjrtBackend` (one device,
aotkit/backends/pjrt.py) with `compile_spmd`. This module builds on pjrt; pjrt does not
import it.

The compile stage hands `SpmdBackend.compile_spmd` a module annotated with shardings
(aotkit/spmd.py) and its `Partitioning`. This binds the partitioning to devices (the mesh's
own, or the backend's first devices for a mesh that names none, as a module file's does),
compiles one SPMD executable for all of them (XLA partitions it and inserts the
collectives), and reads back the sharding XLA compiled for every argument and result: those
are the executable's contract, whatever the module asked for.

Calls: an argument slot takes a `jax.Array` whose sharding is the compiled one (or an
equivalent one: the same shards on the same devices), used in place; or a NumPy value (or a
Python scalar), copied shard by shard onto this process's devices. In a run of several
processes (aotkit.distributed) every process passes the whole array and places only its own
shards. A `jax.Array` sharded otherwise is a ValueError naming both shardings. Results are
`jax.Array`s with the compiled shardings. Once a call signature has been checked, jaxlib's
C++ dispatch runs it again without entering Python if every argument is a `jax.Array` with
exactly the compiled sharding or a host value its transfer converts exactly (placed by the
compiled sharding, as `jax.jit` places it); the checked call copies host values itself, a
buffer per device.

A sharded executable serializes as PJRT's does (`SpmdBackend.deserialize_spmd` reads it back
onto devices of the same number and kind, in this process or across several): artifacts and
the persistent cache hold it with its layout (aotkit/artifacts.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from jax import tree_util
from jax.sharding import Mesh, NamedSharding
from jaxlib.mlir import ir

from aotkit import _compat, _context, modules, spmd
from aotkit.backends import tpu_chips
from aotkit.backends.base import ArgumentMismatch, MemoryAnalysis, describe, host_value
from aotkit.backends.pjrt import (
    PjrtBackend,
    PjrtExecutable,
    _aval,
    _entry_signature,
    _hlo_type,
    check_options,
    host_transfer_exact,
    live,
)
from aotkit.errors import CompileError
from aotkit.specs import ShapeDtype


class SpmdBackend(PjrtBackend):
    """A PJRT backend that also compiles programs partitioned over several devices."""

    def compile_spmd(
        self,
        module: ir.Module,
        options: Mapping[str, object] | None,
        partitioning: spmd.Partitioning,
    ) -> SpmdExecutable:
        """Compiles `module` for XLA's SPMD partitioner over the devices of `partitioning`
        (bound to this backend's devices)."""
        where = f"backend {self.name!r}"
        missing = _compat.sharding_support()
        if missing is not None:
            raise NotImplementedError(f"{where}: cannot compile a sharded module: {missing}")
        overrides, name, in_specs, out_specs, data = self._prepare(module, options, where)
        devices = _devices(self, partitioning, name, where)
        partitioning = _bind(partitioning, devices)
        with _context.of(module):
            shardy = any(op.operation.name == "sdy.mesh" for op in module.body.operations)
        compile_options = _compat.spmd_compile_options(overrides, [d.id for d in devices], shardy)
        exe = self._compile_and_load(data, devices, compile_options, overrides, name, where)
        _refuse_manual(exe, self, name, where)
        donates = modules.donates(module)
        return SpmdExecutable(self, name, exe, in_specs, out_specs, partitioning, donates)

    def deserialize_spmd(
        self,
        data: bytes,
        *,
        name: str,
        in_specs,
        out_specs,
        partitioning: spmd.Partitioning,
        options: Mapping[str, object] | None = None,
        donates: bool = False,
    ) -> SpmdExecutable:
        """A sharded executable serialized by `SpmdExecutable.serialize`, loaded on the
        devices of `partitioning` (bound as `compile_spmd` binds it). Its argument and result
        counts and its per-device shapes are checked against `in_specs`/`out_specs` and the
        shardings it was compiled with: PJRT reads buffers by the executable's own shapes."""
        data = bytes(data)
        where = f"backend {self.name!r}"
        missing = _compat.sharding_support()
        if missing is not None:
            raise NotImplementedError(f"{where}: cannot load a sharded executable: {missing}")
        overrides = check_options(options, f"{where}: deserialize")
        devices = _devices(self, partitioning, name, where)
        partitioning = _bind(partitioning, devices)
        compile_options = _compat.spmd_compile_options(overrides, [d.id for d in devices], True)
        exe = self._load_serialized(data, devices, compile_options, name, in_specs, out_specs)
        _refuse_manual(exe, self, name, where)
        declared = _entry_signature(exe)

        def mismatch(given: str) -> CompileError:
            ins, outs = (", ".join(side) for side in declared)
            return CompileError(
                f"{where}: the serialized executable of {name!r} takes per device ({ins}) -> "
                f"({outs}), but its signature and shardings say {given}; the file's header "
                "does not describe its executable",
                backend=self.name,
                module_name=name,
            )

        ranks = ([len(s.shape) for s in in_specs], [len(s.shape) for s in out_specs])
        if declared is not None and ranks != tuple([_rank(t) for t in side] for side in declared):
            # A shard of another rank: the compiled shardings do not even apply to the specs.
            raise mismatch(_specs_text(in_specs, out_specs))
        executable = SpmdExecutable(
            self, name, exe, in_specs, out_specs, partitioning, donates, serialized=data
        )
        shards = executable.partitioning
        given = (
            [_shard_type(s, x) for s, x in zip(shards.in_shardings, in_specs)],
            [_shard_type(s, x) for s, x in zip(shards.out_shardings, out_specs)],
        )
        if declared is not None and declared != given:
            raise mismatch(f"({', '.join(given[0])}) -> ({', '.join(given[1])})")
        return executable

    def target_for(self, saved: dict[str, str]) -> dict[str, str]:
        """`target()`, with this run's device count where `saved` (a sharded executable's
        target) has one."""
        target = self.target()
        if "devices" in saved:
            target["devices"] = str(len(self.global_devices()))
        topology = tpu_chips.topology_of(self.global_devices()) if "topology" in saved else None
        if topology is not None:
            # Compiled for a TPU topology without a TPU (aotkit/backends/tpu_topology.py):
            # loaded as it is on a host of that topology.
            target["topology"] = topology
        return target


def _rank(hlo_type: str) -> int:
    """The rank of `f32[4,16]` (2) or `f32[]` (0)."""
    dims = hlo_type.partition("[")[2].rstrip("]")
    return len(dims.split(",")) if dims else 0


def _specs_text(in_specs, out_specs) -> str:
    return f"({', '.join(map(str, in_specs))}) -> ({', '.join(map(str, out_specs))})"


def _shard_type(sharding, spec: ShapeDtype) -> str:
    """`f32[4,16]`: the shape one device holds of a value of `spec` sharded by `sharding`."""
    return _hlo_type(ShapeDtype(tuple(sharding.shard_shape(spec.shape)), spec.dtype))


def _refuse_manual(exe, backend: PjrtBackend, name: str, where: str) -> None:
    """A CompileError when XLA left an argument or result in manual form (a module that ends
    a shard_map at its boundary, or a `@Sharding` annotation of `{manual}` there): no array
    can hold such a value, and JAX fails on it only when it is read."""
    params, results = _compat.compiled_shardings(exe)
    for kind, shardings in (("argument", params), ("result", results)):
        for i, hlo in enumerate(shardings):
            if hlo.is_manual():
                raise CompileError(
                    f"{where}: module {name!r} compiled with its {kind} {i} in manual "
                    "sharding (the form inside a shard_map), which no array can hold; end "
                    "the manual computation inside the module (sdy.manual_computation, or "
                    "@SPMDShardToFullShape) and re-export it",
                    backend=backend.name,
                    module_name=name,
                )


def _ids(devices) -> str:
    return "[" + ", ".join(str(d.id) for d in devices) + "]"


def _devices(backend: PjrtBackend, partitioning: spmd.Partitioning, name: str, where: str):
    """The device assignment: the mesh's devices, or the backend's first ones."""
    available = backend.global_devices()
    n = partitioning.num_devices
    if partitioning.devices is not None:
        known = set(available)
        missing = [d for d in partitioning.devices if d not in known]
        if missing:
            # Ids repeat across platforms (a TPU's device 0 and the CPU's): name theirs.
            platforms = {str(getattr(d, "platform", "?")) for d in missing}
            others = sorted(platforms - {backend.platform})
            whose = f"they are {', '.join(others)} devices; " if others else ""
            raise ValueError(
                f"{where}: module {name!r} runs on {partitioning.describe()} over devices "
                f"{_ids(partitioning.devices)}, but devices {_ids(missing)} are not backend "
                f"{backend.name!r}'s ({whose}its devices: {_ids(available)}); build the mesh "
                f"from aotkit.backends.get({backend.name!r}).global_devices()"
            )
        return tuple(partitioning.devices)
    if len(available) < n:
        hint = "start it with as many devices"
        if backend.platform == "cpu":
            hint = (
                f"on the CPU, start the process with XLA_FLAGS="
                f"--xla_force_host_platform_device_count={n} (or call "
                f"jax.config.update('jax_num_cpu_devices', {n}) before the first compile)"
            )
        raise ValueError(
            f"{where}: module {name!r} is partitioned over {partitioning.describe()}, but the "
            f"backend has {len(available)} device(s); {hint}"
        )
    return tuple(available[:n])


def _bind(partitioning: spmd.Partitioning, devices) -> spmd.Partitioning:
    """`partitioning` on `devices`: an abstract mesh becomes a Mesh of them, in order."""
    mesh = partitioning.mesh
    if mesh is not None and not isinstance(mesh, Mesh):
        mesh = Mesh(np.array(devices, dtype=object).reshape(mesh.axis_sizes), mesh.axis_names)

        def rebind(s):
            return None if s is None else NamedSharding(mesh, s.spec)

        return spmd.Partitioning(
            mesh,
            partitioning.num_devices,
            map(rebind, partitioning.in_shardings),
            map(rebind, partitioning.out_shardings),
            tuple(devices),
        )
    return spmd.Partitioning(
        mesh,
        partitioning.num_devices,
        partitioning.in_shardings,
        partitioning.out_shardings,
        tuple(devices),
    )


def _equivalent(a, b, ndim: int) -> bool:
    try:
        return bool(a.is_equivalent_to(b, ndim))
    except Exception:  # shardings over different device counts raise instead of answering
        return False


def _compiled_sharding(asked, hlo, spec: ShapeDtype, partitioning: spmd.Partitioning):
    """The sharding XLA compiled for one value: `asked` when it is equivalent, else the
    compiled one as a NamedSharding over the mesh, else as a GSPMD sharding."""
    ndim = len(spec.shape)
    compiled = _compat.gspmd_sharding(partitioning.devices, hlo)
    if asked is not None and _equivalent(asked, compiled, ndim):
        return asked
    mesh = partitioning.mesh
    if isinstance(mesh, Mesh):
        pspec = _compat.named_sharding_from_hlo(hlo, mesh)
        if pspec is not None:
            named = NamedSharding(mesh, pspec)
            if _equivalent(named, compiled, ndim):
                return named
    return compiled


class SpmdExecutable(PjrtExecutable):
    """A PJRT executable partitioned over several devices, with sharded argument slots."""

    def __init__(
        self, backend, name, exe, in_specs, out_specs, partitioning, donates=False, serialized=None
    ):
        self.backend = backend
        self.donates = donates
        # The bytes a deserialized executable was loaded from (see PjrtExecutable).
        self._serialized = serialized
        self.name = name
        self.in_specs = tuple(in_specs)
        self.out_specs = tuple(out_specs)
        self._exe = exe
        params, results = _compat.compiled_shardings(exe)
        ins = [
            _compiled_sharding(asked, hlo, spec, partitioning)
            for asked, hlo, spec in zip(partitioning.in_shardings, params, self.in_specs)
        ]
        outs = [
            _compiled_sharding(asked, hlo, spec, partitioning)
            for asked, hlo, spec in zip(partitioning.out_shardings, results, self.out_specs)
        ]
        self.partitioning = spmd.Partitioning(
            partitioning.mesh, partitioning.num_devices, ins, outs, partitioning.devices
        )
        self._slots = [self._sharded_slot(i, s, ins[i]) for i, s in enumerate(self.in_specs)]
        self._handlers = [
            _compat.result_handler(_aval(spec), sharding)
            for spec, sharding in zip(self.out_specs, outs, strict=True)
        ]
        self._run = self._make_execute(exe.execute_sharded, self._slots, self._handlers)

    def _sharded_slot(self, index: int, spec: ShapeDtype, sharding):
        """The transfer function for argument `index`: leaf -> global array, or mismatch."""
        array_type = _compat.array_type()
        shape, dtype, ndim = spec.shape, spec.dtype, len(spec.shape)
        aval = _aval(spec)
        placement = list(sharding.addressable_devices_indices_map(shape).items())
        devices = [device for device, _ in placement]
        indices = [index_ for _, index_ in placement]
        device_put = _compat.sharded_device_put
        expected = spmd.sharding_text(sharding)

        def place(host: np.ndarray):
            # np.array copies: each device gets a buffer of its own, never the caller's memory.
            return device_put(aval, sharding, [np.array(host[i]) for i in indices], devices)

        def put(x):
            t = type(x)
            if t is array_type:
                if x.aval is not aval and (x.dtype != dtype or x.shape != shape):
                    raise ArgumentMismatch(index, f"expected {spec}, got {describe(x)}")
                s = x.sharding
                if s is not sharding and s != sharding and not _equivalent(s, sharding, ndim):
                    raise ArgumentMismatch(
                        index,
                        f"is sharded as {spmd.sharding_text(s)}, but the function was compiled "
                        f"for {expected}; move it with jax.device_put(x, sharding) to the "
                        "sharding in Compiled.in_shardings, or pass a NumPy array",
                        ValueError,
                    )
                return live(index, x)
            if t is np.ndarray and x.dtype == dtype and x.shape == shape:
                return place(x)
            return place(host_value(index, x, spec))

        return put

    def fastpath(self, out, args: tuple, kwargs: dict, x64: bool):
        """What jaxlib's C++ dispatch caches for this argument signature, or None: every
        argument must be a jax.Array with exactly the compiled sharding, or a host value its
        transfer turns into the compiled buffers (then placed by the compiled sharding, as
        `jax.jit` places it; the single-device fast path does the same).

        Never for an executable that donates: jaxlib's sharded C++ call of an array donated
        to an earlier call ends the process (a segfault, where the single-device call
        raises), so such calls take the checked path, which refuses a donated array."""
        if self.donates:
            return None
        array_type = _compat.array_type()
        shardings = self.partitioning.in_shardings
        leaves = tree_util.tree_leaves((args, kwargs))
        if len(leaves) != len(shardings):
            return None
        for leaf, sharding, spec in zip(leaves, shardings, self.in_specs):
            if type(leaf) is array_type:
                if leaf.sharding != sharding:
                    return None
            elif not host_transfer_exact(leaf, spec, x64):
                return None
        return _compat.spmd_fastpath_data(
            self._exe, out, shardings, self.partitioning.out_shardings
        )

    def cost_analysis(self) -> dict[str, float] | None:
        """XLA's estimate for the program one device runs; `devices` says how many run it."""
        cost = super().cost_analysis()
        if cost is not None:
            cost["devices"] = float(self.partitioning.num_devices)
        return cost

    def memory_analysis(self) -> DeviceMemoryAnalysis | None:
        """Sizes on one device (each runs its partition); `devices` says how many."""
        memory = super().memory_analysis()
        if memory is None:
            return None
        return DeviceMemoryAnalysis(**memory.to_dict(), devices=self.partitioning.num_devices)

    def compiled_for(self) -> dict[str, str]:
        """The backend's target and its device count: a sharded executable loads as it is
        only where as many devices of the same kind run it."""
        return {**self.backend.target(), "devices": str(len(self.backend.global_devices()))}


@dataclass(frozen=True, slots=True)
class DeviceMemoryAnalysis(MemoryAnalysis):
    """`MemoryAnalysis` of a sharded executable: the sizes on each one of `devices` devices."""

    devices: int = 1
