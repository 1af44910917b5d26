"""What a module becomes before XLA:TPU compiles it (a chip through PJRT, a deviceless
topology, or a TPU executable's portable module in an artifact): the ops XLA:TPU would abort
the process on rewritten or refused (`tpu_complex128`), then the select_and_scatter windows it
has no kernel for rewritten (`tpu_windows`)."""

from __future__ import annotations

from jaxlib.mlir import ir

from aotkit.backends import tpu_complex128, tpu_windows


def legalize(module: ir.Module, where: str) -> ir.Module:
    """`module`, or a rewritten copy of it, that XLA:TPU compiles; an UnsupportedModuleError
    (saying `where`) for what it would abort on and aotkit cannot rewrite."""
    return tpu_windows.legalize(tpu_complex128.legalize(module, where))
