"""aotkit: an MLIR/StableHLO-first ahead-of-time compiler toolkit for Python array programs.

import aotkit, aotkit.numpy as anp
f = aotkit.jit(lambda x: anp.sqrt(x ** 2) + 1.)
lowered = f.lower(aotkit.spec("f32[]"))   # print(lowered.as_text()): StableHLO
compiled = lowered.compile()              # compiled.as_text(): optimized HLO
compiled(3.0)                             # 4.0 as float32
"""

from __future__ import annotations

from aotkit import (
    backends,
    lax,
    numpy,  # noqa: F401  (registers every op family)
)
from aotkit.check import check
from aotkit.compiled import Compiled
from aotkit.errors import CompileError
from aotkit.frontends.files import load_module
from aotkit.lax import cond, fori_loop, scan, switch, while_loop
from aotkit.specs import ShapeDtype, spec
from aotkit.stages import CacheInfo, Jitted, Lowered, jit, lower

__version__ = "0.1.0"
__all__ = [
    "CacheInfo",
    "Compiled",
    "CompileError",
    "Jitted",
    "Lowered",
    "ShapeDtype",
    "cond",
    "backends",
    "check",
    "fori_loop",
    "jit",
    "lax",
    "load_module",
    "lower",
    "numpy",
    "scan",
    "spec",
    "switch",
    "while_loop",
]
