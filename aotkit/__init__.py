"""aotkit: an MLIR/StableHLO-first ahead-of-time compiler toolkit for Python array programs.

import aotkit, aotkit.numpy as anp
f = aotkit.jit(lambda x: anp.sqrt(x ** 2) + 1.)
lowered = f.lower(aotkit.spec("f32[]"))   # print(lowered.as_text()): StableHLO
compiled = lowered.compile()              # compiled.as_text(): optimized HLO
compiled(3.0)                             # 4.0 as float32
compiled.save("f.aotx"); aotkit.load("f.aotx")(3.0)   # in any process: no trace, no compile

The names below are imported on first use: `import aotkit` followed by `aotkit.load(...)`
loads the artifact reader and the backend, not the tracer, the op families or the passes
(which take most of the import time); `aotkit.jit`, `aotkit.numpy` and the rest import them
when first touched.
"""

from __future__ import annotations

import importlib as _importlib
import os as _os

# As `import jax` does, before jaxlib's C++ starts: without it every first compile prints
# jaxlib's INFO lines ("PjRt-IFRT device count ...") to the user's stderr.
_os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")

from aotkit._version import __version__ as __version__  # noqa: E402
from aotkit.errors import ArtifactError, CompileError  # noqa: E402

# Public name -> the module that defines it, imported on first access.
_LAZY = {
    "CacheInfo": "aotkit.api",
    "Jitted": "aotkit.api",
    "Lowered": "aotkit.stages",
    "jit": "aotkit.api",
    "load_module": "aotkit.api",
    "lower": "aotkit.api",
    "Compiled": "aotkit.stages",
    "Traced": "aotkit.stages",
    "UnsupportedModuleError": "aotkit.errors",
    "ShapeDtype": "aotkit.specs",
    "spec": "aotkit.specs",
    "symbolic_shape": "aotkit.symbolic.algebra",
    "Dim": "aotkit.symbolic.algebra",
    "InconclusiveDimensionError": "aotkit.symbolic.algebra",
    "load": "aotkit.compiling",
    "InPlaceWriteWarning": "aotkit.errors",
    "check": "aotkit.crosscheck",
    "cond": "aotkit.lax",
    "fori_loop": "aotkit.lax",
    "scan": "aotkit.lax",
    "switch": "aotkit.lax",
    "while_loop": "aotkit.lax",
    "grad": "aotkit.functional",
    "value_and_grad": "aotkit.functional",
    "vjp": "aotkit.functional",
    "jvp": "aotkit.functional",
    "vmap": "aotkit.functional",
    "jacfwd": "aotkit.functional",
    "jacrev": "aotkit.functional",
    "hessian": "aotkit.functional",
    "checkpoint": "aotkit.functional",
    "register_pytree_node_serialization": "aotkit.pytrees",
    "register_namedtuple_serialization": "aotkit.pytrees",
    "register_library_nodes": "aotkit.pytrees",
    "to_jax": "aotkit.interop",
    "default_matmul_precision": "aotkit.config",
}
_SUBMODULES = frozenset(
    """
    api artifacts autograph backends cache cli compiling config crosscheck distributed dtypes
    dumps errors frontends functional interop lax lowering modules nn numpy passes program
    pytrees random shapes sharding specs spmd stages transforms
    """.split()
)


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is not None:
        value = getattr(_importlib.import_module(module), name)
    elif name in _SUBMODULES:
        value = _importlib.import_module(f"aotkit.{name}")
    else:
        raise AttributeError(f"module 'aotkit' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY) | _SUBMODULES)


__all__ = [
    "ArtifactError",
    "InPlaceWriteWarning",
    "CacheInfo",
    "Compiled",
    "CompileError",
    "Jitted",
    "Lowered",
    "Dim",
    "InconclusiveDimensionError",
    "ShapeDtype",
    "Traced",
    "UnsupportedModuleError",
    "autograph",
    "backends",
    "cache",
    "check",
    "checkpoint",
    "cond",
    "config",
    "default_matmul_precision",
    "distributed",
    "fori_loop",
    "grad",
    "hessian",
    "jacfwd",
    "jacrev",
    "jit",
    "jvp",
    "lax",
    "load",
    "load_module",
    "lower",
    "nn",
    "numpy",
    "random",
    "register_library_nodes",
    "register_namedtuple_serialization",
    "register_pytree_node_serialization",
    "scan",
    "sharding",
    "spec",
    "switch",
    "symbolic_shape",
    "to_jax",
    "value_and_grad",
    "vjp",
    "vmap",
    "while_loop",
]
