"""TPU chips as aotkit knows them: names, device kinds, HBM, and a host's topology name.

Data only, read by the deviceless TPU target (aotkit/backends/tpu_topology.py) and by the
PJRT backends (a TPU host reports its topology in an artifact's target, aotkit/backends/
pjrt_spmd.py); it imports nothing, so neither pulls the other in.
"""

from __future__ import annotations

from dataclasses import dataclass

GIB = 1 << 30


@dataclass(frozen=True, slots=True)
class Chip:
    """A TPU generation as topology names spell it (`v5e`) and as its devices report it."""

    name: str
    device_kind: str  # what `device.device_kind` says, on the chip and in a topology
    hbm_bytes: int  # HBM per chip
    dims: int  # how many dimensions its topology names have (2: "2x2", 3: "2x2x1")


# HBM per chip, from Google Cloud's TPU system architecture pages:
# https://cloud.google.com/tpu/docs/v4 (32 GiB), https://cloud.google.com/tpu/docs/v5e
# (16 GiB), https://cloud.google.com/tpu/docs/v5p (95 GiB), https://cloud.google.com/tpu/docs/v6e
# (32 GiB). Device kinds as libtpu 0.0.42 reports them for each topology.
CHIPS = {
    c.name: c
    for c in (
        Chip("v4", "TPU v4", 32 * GIB, 3),
        Chip("v5e", "TPU v5 lite", 16 * GIB, 2),
        Chip("v5p", "TPU v5", 95 * GIB, 3),
        Chip("v6e", "TPU v6 lite", 32 * GIB, 2),
    )
}
_BY_KIND = {c.device_kind: c for c in CHIPS.values()}
_BY_KIND = {c.device_kind: c for c in CHIPS.values()}


def topology_of(devices) -> str | None:
    """The topology name of a TPU host's (or a topology's) devices, as `Topology.name`
    spells it ("v5e:2x2"), or None for devices of a chip aotkit does not know."""
    devices = list(devices)
    chip = _BY_KIND.get(str(getattr(devices[0], "device_kind", ""))) if devices else None
    if chip is None:
        return None
    coords = [tuple(getattr(d, "coords", ()) or ()) for d in devices]
    if not all(len(c) >= chip.dims for c in coords):
        return None
    bounds = [max(c[i] for c in coords) + 1 for i in range(chip.dims)]
    return f"{chip.name}:{'x'.join(map(str, bounds))}"
