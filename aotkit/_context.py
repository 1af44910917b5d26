"""The single MLIR context every aotkit stage builds IR in.

One context for the process keeps modules, types and attributes interchangeable between
the tracer, the pass pipeline and the backends. MLIR contexts are not safe to mutate from
several threads at once, so every stage that creates or rewrites IR holds `IR_LOCK` (a
re-entrant lock: tracing may nest, e.g. a control-flow body traced inside a trace).
"""

from __future__ import annotations

import threading

from jaxlib.mlir import ir

from aotkit import _compat

IR_LOCK = threading.RLock()
_context: ir.Context | None = None


def context() -> ir.Context:
    """Returns the process-wide context, creating it (and registering dialects) once."""
    global _context
    if _context is None:
        with IR_LOCK:
            if _context is None:
                _context = _compat.make_context()
    return _context
