"""aotkit: an MLIR/StableHLO-first ahead-of-time compiler toolkit for Python array programs.

import aotkit, aotkit.numpy as anp
lowered = aotkit.lower(lambda x: anp.sqrt(x ** 2) + 1., aotkit.spec("f32[]"))
print(lowered.as_text())
"""

from __future__ import annotations

from aotkit import numpy  # noqa: F401  (registers every op family)
from aotkit.errors import CompileError
from aotkit.specs import ShapeDtype, spec
from aotkit.stages import Lowered, lower

__version__ = "0.1.0"
__all__ = ["CompileError", "Lowered", "ShapeDtype", "lower", "numpy", "spec"]
