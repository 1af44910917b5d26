"""aotkit's front end: the tracer (`core`), the op families, and the trace driver.

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
)


def load_families() -> None:
    for name in FAMILIES:
        importlib.import_module(f"aotkit.lowering.{name}")
    importlib.import_module("aotkit.lowering.operators").bind_directly()
