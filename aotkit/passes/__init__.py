"""Pipeline stage: rewrites a traced StableHLO module in place before a backend sees it.

A pipeline is a named pipeline (`NAMED_PIPELINES`: "none", "default") or MLIR's textual
syntax (`"builtin.module(func.func(canonicalize,cse))"`). MLIR passes run through
`jaxlib.mlir.passmanager.PassManager`; passes jaxlib does not register (it lacks StableHLO's
aggressive simplifier) are written in Python over the IR, registered by name with
`register_pass`, and may appear anywhere in a pipeline text (`"aotkit-simplify"`).

- `pipeline`: the text, the names and the parser (a pipeline is checked whole before any
  pass runs: an unknown pass is a ValueError naming it and the nearest registered names);
- `python_passes`: aotkit's passes written in Python;
- `runner`: `run_pipeline`, which verifies the result: a failing pass or an invalid result
  is a `CompileError` that names the dump file or says how to turn dumps on.
"""

from __future__ import annotations

from aotkit.passes import python_passes
from aotkit.passes.pipeline import (
    NAMED_PIPELINES,
    PYTHON_PASSES,
    PythonPass,
    check_pipeline,
    known_names,
    plan,
    register_pass,
)
from aotkit.passes.python_passes import (
    FOLD_LIMIT,
    algebraic_simplify,
    fold_constants,
    inline_calls,
    remove_dead_ops,
    simplify,
)
from aotkit.passes.runner import (
    CANONICAL,
    NO_CHLO,
    NO_DUPLICATES,
    NOTHING_TO_SIMPLIFY,
    TRACER_FACTS,
    format_timing,
    ran_any,
    run_pipeline,
    verify_result,
)

__all__ = [
    "CANONICAL",
    "FOLD_LIMIT",
    "NAMED_PIPELINES",
    "NOTHING_TO_SIMPLIFY",
    "NO_CHLO",
    "NO_DUPLICATES",
    "PYTHON_PASSES",
    "PythonPass",
    "TRACER_FACTS",
    "algebraic_simplify",
    "check_pipeline",
    "fold_constants",
    "format_timing",
    "inline_calls",
    "known_names",
    "plan",
    "python_passes",
    "ran_any",
    "register_pass",
    "remove_dead_ops",
    "run_pipeline",
    "simplify",
    "verify_result",
]
