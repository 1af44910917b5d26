"""Deviceless TPU targets: compile for a TPU topology on a machine without a TPU.

`Lowered.compile(backend="tpu", topology="v5e:2x2")` (and `aotkit compile ... --backend tpu
--topology v5e:2x2`) compiles through libtpu's compile-only PJRT client (`pip install
'aotkit[tpu]'`; it runs on any x86-64 Linux machine). The result is a `Compiled` whose
executable cannot run here, but has what a build machine needs: the optimized HLO, XLA:TPU's
cost analysis, and the memory analysis per device with the chip's HBM beside it ("does it fit
in HBM?"); and it saves to an artifact whose target names platform `tpu`, the topology, the
chip and libtpu's platform version, which a TPU host of that topology loads and runs without
compiling. Programs sharded over a mesh of the topology's devices (`devices(topology)`) are
partitioned as on any PJRT backend.

A `TopologyBackend` is the compile stage's backend for one topology: the real `tpu` backend
(aotkit/backends/plugin.py, on a TPU host) has the same name and platform, and reports the
same target fields (`topology_of` gives a host's topology name), so an artifact moves from
one to the other as data. Everything libtpu-specific is reached through aotkit/_compat.py.
"""

from __future__ import annotations

import math
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass, replace

import jaxlib
from jaxlib.mlir import ir

from aotkit import _compat, _context, modules, spmd
from aotkit.backends import pjrt_spmd, xla_tpu
from aotkit.backends.base import Backend, Executable, MemoryAnalysis
from aotkit.backends.pjrt import _aliased_parameters, _module_head, check_options, cost_of, verified
from aotkit.backends.tpu_chips import CHIPS, GIB, Chip
from aotkit.errors import CompileError
from aotkit.specs import ShapeDtype

# A host holds 2x2x1 chips; a smaller slice must say so to libtpu (`chips_per_host_bounds`).
_HOST_BOUNDS = (2, 2, 1)
_TOPOLOGY = re.compile(r"(?P<chip>[a-z0-9]+):(?P<dims>\d+(?:x\d+)*)")
INSTALL = "pip install 'aotkit[tpu]'"


@dataclass(frozen=True, slots=True)
class Topology:
    """A parsed topology name: `v5e:2x2` is chip v5e, bounds (2, 2)."""

    chip: Chip
    bounds: tuple[int, ...]

    @property
    def name(self) -> str:
        return f"{self.chip.name}:{'x'.join(map(str, self.bounds))}"

    @property
    def chips(self) -> int:
        return math.prod(self.bounds)

    def host_bounds(self) -> tuple[int, int, int] | None:
        """`chips_per_host_bounds` for libtpu: None where the default (2x2x1) divides it."""
        full = (*self.bounds, 1, 1)[:3]
        bounds = tuple(min(b, h) for b, h in zip(full, _HOST_BOUNDS))
        return None if bounds == _HOST_BOUNDS else bounds


def parse(text, where: str) -> Topology:
    """The `Topology` named by `text` ("v5e:2x2", "v4:2x2x1"); ValueError otherwise."""
    known = ", ".join(f"{c.name} ({'x'.join('N' * c.dims)})" for c in CHIPS.values())
    if not isinstance(text, str):
        raise TypeError(
            f"{where}: topology must be a name such as 'v5e:2x2', got {type(text).__name__}"
        )
    match = _TOPOLOGY.fullmatch(text.strip().lower())
    chip = CHIPS.get(match["chip"]) if match else None
    if chip is None:
        raise ValueError(
            f"{where}: topology {text!r} is not a TPU topology aotkit knows; write CHIP:BOUNDS "
            f"such as 'v5e:2x2' or 'v4:2x2x1', with CHIP one of {known}"
        )
    bounds = tuple(int(b) for b in match["dims"].split("x"))
    if len(bounds) != chip.dims or min(bounds) < 1:
        example = "x".join(["2"] * (chip.dims - 1) + ["1" if chip.dims == 3 else "2"])
        raise ValueError(
            f"{where}: topology {text!r}: a {chip.name} topology has {chip.dims} positive "
            f"bounds, such as '{chip.name}:{example}'"
        )
    return Topology(chip, bounds)


def available() -> str | None:
    """None where libtpu is installed, else what to do about it."""
    if _compat.tpu_library_path() is None:
        return f"libtpu is not installed ({INSTALL})"
    return None


_backends: dict[str, TopologyBackend] = {}
_lock = threading.Lock()


def backend(topology, where: str) -> TopologyBackend:
    """The deviceless `tpu` backend of `topology` (a name), one per topology and process."""
    parsed = parse(topology, where)
    with _lock:
        found = _backends.get(parsed.name)
        if found is None:
            missing = available()
            if missing is not None:
                raise ImportError(
                    f"{where}: compiling for TPU topology {parsed.name!r} needs libtpu, which "
                    f"is not installed; {INSTALL} (it compiles for TPUs on machines without one)"
                )
            runtime_error = _compat.runtime_error_type()
            try:
                devices, version = _compat.tpu_topology_devices(parsed.name, parsed.host_bounds())
            except runtime_error as e:
                message = modules.diagnostic(e)
                if "lockfile" in message:  # (libtpu's own advice, to delete it, is not ours)
                    raise RuntimeError(
                        f"{where}: libtpu did not start for topology {parsed.name!r}: another "
                        "process on this machine holds it (its lockfile, /tmp/libtpu_lockfile); "
                        "compile in that process, or after it ends"
                    ) from None
                raise ValueError(
                    f"{where}: libtpu refused topology {parsed.name!r}: {message}; use a slice "
                    "such as 'v5e:1x1', 'v5e:2x2' or 'v5e:2x4'"
                ) from None
            found = _backends[parsed.name] = TopologyBackend(parsed, devices, version)
    return found


def devices(topology) -> list:
    """The compile-only devices of `topology` ("v5e:2x2"), to build a `jax.sharding.Mesh`
    of for programs sharded over it: `Mesh(np.array(devices("v5e:2x2")).reshape(2, 2),
    ("x", "y"))`."""
    return backend(topology, "aotkit.backends.tpu_topology.devices").devices()


@dataclass(frozen=True, slots=True)
class TpuMemoryAnalysis(MemoryAnalysis):
    """`MemoryAnalysis` of an executable compiled for a TPU topology: the sizes on each
    one of `devices` devices, beside the HBM of each (`hbm_size_in_bytes`, from the chip),
    and whether the program's arguments, results, temporaries and code fit in it (`fits`)."""

    devices: int = 1
    device_kind: str = ""
    hbm_size_in_bytes: int = 0
    fits: bool = True

    @property
    def used_in_bytes(self) -> int:
        """HBM one device holds while the program runs (an aliased result reuses its
        argument's buffer)."""
        return (
            self.argument_size_in_bytes
            + self.output_size_in_bytes
            - self.alias_size_in_bytes
            + self.temp_size_in_bytes
            + self.generated_code_size_in_bytes
        )

    def __str__(self) -> str:
        used, hbm = self.used_in_bytes, self.hbm_size_in_bytes
        verdict = "fits" if self.fits else "does NOT fit"
        return (
            f"{used / 2**20:.1f} MiB per device of {hbm / GIB:g} GiB HBM ({self.device_kind}, "
            f"{self.devices} device{'s' if self.devices != 1 else ''}): {verdict}"
        )


class TopologyBackend(Backend):
    """The `tpu` backend of one topology, compiling through libtpu without a TPU."""

    name = "tpu"
    platform = "tpu"
    executable_format = "pjrt"
    runs_here = False

    def __init__(self, topology: Topology, devices: list, platform_version: str):
        self.topology = topology
        self._devices = list(devices)
        self._platform_version = platform_version
        # v4's topologies list each TensorCore as a device; HBM is the chip's, shared.
        per_chip = max(1, len(self._devices) // topology.chips)
        self.hbm_per_device = topology.chip.hbm_bytes // per_chip

    @property
    def version(self) -> str:
        return f"jaxlib {jaxlib.__version__}, {self._platform_version}"

    def devices(self) -> list:
        return list(self._devices)

    def target(self) -> dict[str, str]:
        """The fields the `tpu` backend of a host of this topology reports (a
        `PjrtBackend`'s, and the topology), so that it loads the executable as it is."""
        return {
            "backend": self.name,
            "platform": self.platform,
            "platform_version": self._platform_version,
            "runtime": f"jaxlib {jaxlib.__version__}",
            "device_kind": self.topology.chip.device_kind,
            "topology": self.topology.name,
        }

    def deserialize(self, data, *, name, in_specs, out_specs, options=None, target=None):
        raise CompileError(
            f"backend 'tpu' (topology {self.topology.name!r}, deviceless): {name!r} cannot be "
            "loaded without a TPU; load it with aotkit.load on a TPU host of that topology",
            backend=self.name,
            module_name=name,
        )

    def compile(
        self,
        module: ir.Module,
        options: Mapping[str, object] | None = None,
        *,
        target: str | None = None,
        target_options: Mapping[str, str] | None = None,
    ) -> DevicelessExecutable:
        self.normalize_target(target, target_options)
        name, in_specs, out_specs = self._check(module)
        exe = self._compile(module, options, self._devices[:1], None, name)
        return DevicelessExecutable(self, name, exe, in_specs, out_specs)

    def compile_spmd(
        self, module: ir.Module, options: Mapping[str, object] | None, partitioning
    ) -> DevicelessExecutable:
        """Compiles for XLA's SPMD partitioner over the topology's devices (the mesh's, or
        the first `partitioning.num_devices`)."""
        # The real backends' device binding and compiled shardings, shared.
        where = f"backend 'tpu' (topology {self.topology.name!r})"
        missing = _compat.sharding_support()
        if missing is not None:
            raise NotImplementedError(f"{where}: cannot compile a sharded module: {missing}")
        name, in_specs, out_specs = self._check(module)
        devices = pjrt_spmd._devices(self, partitioning, name, where)
        partitioning = pjrt_spmd._bind(partitioning, devices)
        with _context.of(module):
            shardy = any(op.operation.name == "sdy.mesh" for op in module.body.operations)
        exe = self._compile(module, options, list(devices), shardy, name)
        params, results = _compat.compiled_shardings(exe)
        bound = spmd.Partitioning(
            partitioning.mesh,
            partitioning.num_devices,
            [
                pjrt_spmd._compiled_sharding(asked, hlo, spec, partitioning)
                for asked, hlo, spec in zip(partitioning.in_shardings, params, in_specs)
            ],
            [
                pjrt_spmd._compiled_sharding(asked, hlo, spec, partitioning)
                for asked, hlo, spec in zip(partitioning.out_shardings, results, out_specs)
            ],
            partitioning.devices,
        )
        return DevicelessExecutable(self, name, exe, in_specs, out_specs, bound)

    def _check(self, module: ir.Module):
        return verified(module, f"backend 'tpu' (topology {self.topology.name!r})", self.name)

    def _compile(self, module, options, devices, shardy: bool | None, name: str):
        where = f"backend 'tpu' (topology {self.topology.name!r})"
        overrides = check_options(options, f"{where}: compile")
        if shardy is None:
            compile_options = _compat.compile_options(overrides)
        else:
            ids = [d.id for d in devices]
            compile_options = _compat.spmd_compile_options(overrides, ids, shardy)
        module = xla_tpu.legalize(module, where)  # what XLA:TPU would abort on or refuse
        runtime_error = _compat.runtime_error_type()
        try:
            with _context.of(module):
                return _compat.compile_for_devices(module, devices, compile_options)
        except runtime_error as e:
            message = modules.diagnostic(e)
            if "RESOURCE_EXHAUSTED" in message:  # XLA:TPU refuses what cannot fit in HBM
                chip = self.topology.chip
                message += (
                    f"; a {chip.name} device has {self.hbm_per_device / GIB:g} GiB of HBM: "
                    "shard the program over more devices (a larger topology) or give it "
                    "smaller shapes"
                )
            raise CompileError(
                f"{where} rejected module {name!r}: {message}",
                backend=self.name,
                module_name=name,
            ) from e

    def __repr__(self) -> str:
        return f"<aotkit backend 'tpu' topology={self.topology.name!r} (deviceless)>"


class DevicelessExecutable(Executable):
    """An executable compiled for a TPU topology without one: inspected and saved, not run."""

    def __init__(
        self,
        backend: TopologyBackend,
        name: str,
        exe,
        in_specs: tuple[ShapeDtype, ...],
        out_specs: tuple[ShapeDtype, ...],
        partitioning=None,
    ):
        self.backend = backend
        self.name = name
        self.in_specs = tuple(in_specs)
        self.out_specs = tuple(out_specs)
        self.partitioning = partitioning
        self._exe = exe

    def execute(self, leaves) -> list:
        topology = self.backend.topology.name
        raise RuntimeError(
            f"Compiled {self.name!r} was compiled for TPU topology {topology!r} without a "
            f"TPU and cannot run here; save it (Compiled.save) and run it with aotkit.load "
            f"(or `aotkit run FILE`) on a TPU host of topology {topology!r}"
        )

    def as_text(self) -> str:
        return "\n".join(m.to_string() for m in self._exe.hlo_modules())

    def cost_analysis(self) -> dict[str, float] | None:
        """XLA:TPU's estimate for the program one device runs (`devices`: how many run it)."""
        cost = cost_of(self._exe)
        if cost is not None and self.partitioning is not None:
            cost["devices"] = float(self.partitioning.num_devices)
        return cost

    def memory_analysis(self) -> TpuMemoryAnalysis | None:
        try:
            stats = self._exe.get_compiled_memory_stats()
        except Exception:  # noqa: BLE001 - libtpu may not give one: the view is absent
            return None
        sizes = {
            "argument_size_in_bytes": stats.argument_size_in_bytes,
            "output_size_in_bytes": stats.output_size_in_bytes,
            "alias_size_in_bytes": stats.alias_size_in_bytes,
            "temp_size_in_bytes": stats.temp_size_in_bytes,
            "generated_code_size_in_bytes": stats.generated_code_size_in_bytes,
        }
        hbm = self.backend.hbm_per_device
        analysis = TpuMemoryAnalysis(
            **sizes,
            devices=1 if self.partitioning is None else self.partitioning.num_devices,
            device_kind=self.backend.topology.chip.device_kind,
            hbm_size_in_bytes=hbm,
        )
        return replace(analysis, fits=analysis.used_in_bytes <= hbm)

    def runtime_executable(self):
        return self._exe

    def serialize(self) -> bytes | None:
        return bytes(self._exe.serialize())

    def aliased_arguments(self) -> frozenset[int] | None:
        return _aliased_parameters(self._exe, _module_head(self._exe))

    def compiled_for(self) -> dict[str, str]:
        """The topology's target; a sharded executable's also counts the devices, as a
        sharded executable's target does on every PJRT backend."""
        target = self.backend.target()
        if self.partitioning is not None:
            target["devices"] = str(len(self.backend.global_devices()))
        return target
