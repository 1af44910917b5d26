"""aotkit's tracer: its core (`core`) and the op families (the trace driver, the front end
that runs a function on it, is `aotkit.tracing.trace`).

`load_families()` imports every op family so its rules and `aotkit.numpy` functions are
registered; adding a family is one import line here.
"""

from __future__ import annotations

import importlib

FAMILIES = (
    "shape",
    "elementwise",
    "creation",
    "operators",
    "reduction",
    "indexing",
    "linalg",
    "dispatch",
    "control",
    # Families added for issue 15 (NumPy functions from scientific kernels).
    "sorting",
    "statistics",
    "decompositions",
    "updates",
    "sharding",
    # Symbolic dimensions (issue 25): the dynamic forms of ops, for symbolic traces only.
    "symbolic",
)


def load_families() -> None:
    for name in FAMILIES:
        importlib.import_module(f"aotkit.tracing.{name}")
    importlib.import_module("aotkit.tracing.operators").bind_directly()
