"""Sharding: JAX's public sharding types as aotkit's, and constraints inside traced functions.

    from aotkit.sharding import Mesh, NamedSharding, PartitionSpec as P
    mesh = aotkit.sharding.mesh("data=4,model=2")           # or jax's own Mesh(devices, names)
    step = aotkit.jit(train_step, in_shardings=(NamedSharding(mesh, P()),
                                                NamedSharding(mesh, P("data"))))

The types are JAX's own (`jax.sharding.Mesh`, `NamedSharding`, `PartitionSpec`), so a mesh
works in aotkit and in JAX alike, and a `jax.Array` JAX sharded over it is an argument aotkit
uses in place. aotkit writes the shardings into the StableHLO module as Shardy annotations
and XLA's SPMD partitioner (through PJRT) partitions the program when it is compiled for
the mesh's devices; see aotkit/spmd.py.
"""

from __future__ import annotations

import re

import numpy as np
from jax.sharding import AbstractMesh, AxisType, Mesh, NamedSharding, PartitionSpec

from aotkit import backends

P = PartitionSpec

__all__ = [
    "AbstractMesh",
    "AxisType",
    "Mesh",
    "NamedSharding",
    "P",
    "PartitionSpec",
    "constrain",
    "mesh",
]

_AXIS = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*([0-9]+)\s*$")
MESH_SYNTAX = "NAME=SIZE,... such as 'data=4,model=2'"


def constrain(x, sharding):
    """`x`, constrained to `sharding` where it is computed: a sharding constraint
    (`sdy.sharding_constraint`, as `jax.lax.with_sharding_constraint` writes).

    Inside a function traced by aotkit. `sharding` is a `NamedSharding`, or a
    `PartitionSpec` over the program's mesh (the one its in/out shardings use). The
    partitioner then computes `x` with that layout, resharding (with collectives) as needed.
    """
    # lazy: a constraint exists only inside a trace, and the tracer is not imported with
    # `aotkit.sharding` (which `aotkit.load` of a sharded program needs)
    from aotkit.tracing.sharding import constrain as bind_constraint

    return bind_constraint(x, sharding)


def parse_axes(text: str, where: str = "mesh") -> tuple[tuple[str, ...], tuple[int, ...]]:
    """('data', 'model'), (4, 2) from 'data=4,model=2'; ValueError naming the bad part."""
    if not isinstance(text, str):
        raise TypeError(f"{where}: expected a string {MESH_SYNTAX}, got {type(text).__name__}")
    names, sizes = [], []
    for part in text.split(","):
        m = _AXIS.match(part)
        if m is None:
            raise ValueError(
                f"{where}: cannot read {part.strip()!r} in {text!r}; expected {MESH_SYNTAX}"
            )
        name, size = m.group(1), int(m.group(2))
        if name in names:
            raise ValueError(
                f"{where}: axis {name!r} appears twice in {text!r}; name each axis once"
            )
        if size < 1:
            raise ValueError(f"{where}: axis {name!r} has size {size} in {text!r}; sizes are >= 1")
        names.append(name)
        sizes.append(size)
    return tuple(names), tuple(sizes)


def mesh(axes, *, backend: str | None = None) -> Mesh:
    """A `Mesh` with `axes` ('data=4,model=2', or a dict {'data': 4, 'model': 2}) over the
    first devices of `backend` (default: cpu), in order: what the CLI's `--mesh` builds.

    In a run of several processes the devices are the global ones (every process's).
    """
    where = "aotkit.sharding.mesh"
    if isinstance(axes, dict):
        names, sizes = tuple(axes), tuple(axes.values())
        if not all(isinstance(n, str) for n in names) or not all(
            isinstance(s, int) and not isinstance(s, bool) and s >= 1 for s in sizes
        ):
            raise ValueError(f"{where}: {axes!r} must map axis names to sizes >= 1")
    else:
        names, sizes = parse_axes(axes, where)
    target = backends.get(backend)
    devices = target.global_devices()
    n = int(np.prod(sizes))
    if n > len(devices):
        hint = "ask for fewer devices"
        if target.platform == "cpu":
            hint = (
                f"on the CPU, start the process with XLA_FLAGS="
                f"--xla_force_host_platform_device_count={n} (or call "
                f"jax.config.update('jax_num_cpu_devices', {n}) before the first compile)"
            )
        raise ValueError(
            f"{where}: axes {dict(zip(names, sizes))} need {n} devices but backend "
            f"{target.name!r} has {len(devices)}; {hint}"
        )
    return Mesh(np.array(devices[:n], dtype=object).reshape(sizes), names)
