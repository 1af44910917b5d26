"""aotkit: an MLIR/StableHLO-first ahead-of-time compiler toolkit for Python array programs.

import aotkit, aotkit.numpy as anp
lowered = aotkit.lower(lambda x: anp.sqrt(x ** 2) + 1., aotkit.spec("f32[]"))
print(lowered.as_text())
"""

from __future__ import annotations

from aotkit import (
    lax,
    numpy,  # noqa: F401  (registers every op family)
)
from aotkit.errors import CompileError
from aotkit.frontends.files import load_module
from aotkit.lax import cond, fori_loop, scan, switch, while_loop
from aotkit.specs import ShapeDtype, spec
from aotkit.stages import Lowered, lower

__version__ = "0.1.0"
__all__ = [
    "CompileError",
    "Lowered",
    "ShapeDtype",
    "cond",
    "fori_loop",
    "lax",
    "load_module",
    "lower",
    "numpy",
    "scan",
    "spec",
    "switch",
    "while_loop",
]
