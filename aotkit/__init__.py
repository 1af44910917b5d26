"""aotkit: an MLIR/StableHLO-first ahead-of-time compiler toolkit for Python array programs.

import aotkit, aotkit.numpy as anp
f = aotkit.jit(lambda x: anp.sqrt(x ** 2) + 1.)
lowered = f.lower(aotkit.spec("f32[]"))   # print(lowered.as_text()): StableHLO
compiled = lowered.compile()              # compiled.as_text(): optimized HLO
compiled(3.0)                             # 4.0 as float32
"""

from __future__ import annotations

import os as _os

# As `import jax` does, before jaxlib's C++ starts: without it every first compile prints
# jaxlib's INFO lines ("PjRt-IFRT device count ...") to the user's stderr.
_os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")

from aotkit import (
    autograph,
    backends,
    config,
    lax,
    nn,
    numpy,  # noqa: F401  (registers every op family)
    random,
)
from aotkit.compiled import Compiled
from aotkit.errors import CompileError
from aotkit.lax import cond, fori_loop, scan, switch, while_loop
from aotkit.specs import ShapeDtype, spec
from aotkit.stages import CacheInfo, Jitted, Lowered, jit, load_module, lower
from aotkit.traced import Traced

__version__ = "0.1.0"
__all__ = [
    "CacheInfo",
    "Compiled",
    "CompileError",
    "Jitted",
    "Lowered",
    "ShapeDtype",
    "Traced",
    "autograph",
    "backends",
    "cond",
    "config",
    "fori_loop",
    "jit",
    "lax",
    "load_module",
    "lower",
    "nn",
    "numpy",
    "random",
    "scan",
    "spec",
    "switch",
    "while_loop",
]
