"""Older copies of an artifact's portable module, for PJRT plugins built with an older
StableHLO than the jaxlib that wrote it.

`add_portable_copy(path, "1.9.0")` adds a section `stablehlo@1.9.0`: the artifact's
`stablehlo` module serialized at that StableHLO version. For a symbolic program it adds one
static module per held specialization instead, `stablehlo@1.9.0/executable.0` (the section
its executable is in): the symbolic module refined to that specialization's shapes, as
aotkit/symbolic/specialize.py refines it before compiling. `aotkit-run` compiles the newest copy
within the plugin's StableHLO window (docs/deploy.md); aotkit.load ignores the sections, as
it ignores every section it does not know (docs/artifact-format.md).
"""

from __future__ import annotations

import os

from jaxlib.mlir import ir

from aotkit import _files, artifacts, modules
from aotkit.symbolic import specialize

PREFIX = "stablehlo@"


def add_portable_copy(path, version: str = "minimum", *, output=None) -> str:
    """Adds to the artifact at `path` (written to `output`, default `path`) its portable
    module serialized at StableHLO `version` (MAJOR.MINOR.PATCH, or 'minimum': the oldest
    this jaxlib writes) as the section `stablehlo@VERSION`, replacing one of that version;
    returns the version. A symbolic program gets one static module per held specialization
    (`stablehlo@VERSION/SECTION`). ValueError where a module cannot be written at that
    version (it uses something newer), the artifact is sharded (aotkit-run does not run it)
    or is symbolic with no specialization."""
    where = "aotkit.native.add_portable_copy"
    target = modules.portable_version(version)
    data, label = artifacts.read(path, where)
    artifact = artifacts.unpack(data, label, where=where)
    if artifact.partitioning is not None:
        raise ValueError(
            f"{where}: {label} is a sharded program, which aotkit-run does not run; give a "
            "one-device artifact"
        )
    if artifact.shapes is not None and not artifact.specializations:
        raise ValueError(
            f"{where}: {label} is a symbolic program with no specialization, which aotkit-run "
            "cannot run; call it with the shapes to serve before saving it"
        )
    module, lc = artifacts.parse_portable(artifact, f"{where}: {label}")
    header = {k: v for k, v in artifact.header.items() if k != "sections"}
    sections = {name: bytes(chunk) for name, chunk in artifact.sections.items()}
    with lc:
        if artifact.shapes is None:
            sections[PREFIX + target] = modules.portable_artifact(module, target)
        for values, section in artifact.specializations:
            in_specs = artifact.shapes.concrete(values)[0]
            refined = specialize.refine(module, lc, in_specs, f"{where}: {label}")
            # StableHLO's writer takes an ir.Module (refine gives the module's op)
            static = ir.Module.parse(modules.bytecode(refined), lc.mlir)
            sections[f"{PREFIX}{target}/{section}"] = modules.portable_artifact(static, target)
    destination = os.fspath(output if output is not None else path)
    _files.write_atomic(destination, artifacts.pack(header, sections))
    return target
