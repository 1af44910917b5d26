"""`aotkit.lax`: structured control flow and windowed ops, named as in `jax.lax`.

`cond`, `switch`, `while_loop`, `fori_loop` and `scan` trace their bodies into one
`stablehlo.if`, `stablehlo.case` or `stablehlo.while` each (see `aotkit.tracing.control`);
they are also available as `aotkit.cond`, ... . `conv_general_dilated`, `conv`,
`conv_transpose` and `reduce_window` are in `aotkit.tracing.nn`; `dot_general`, `dot` and
`batch_matmul` in `aotkit.tracing.linalg`. `stop_gradient` is JAX's: a value every
transform differentiates as a constant. Dots and convolutions take JAX's `precision`
(else the default in force: `aotkit.default_matmul_precision`) and
`preferred_element_type`.
"""

from __future__ import annotations

from aotkit.tracing.control import cond, fori_loop, scan, stop_gradient, switch, while_loop
from aotkit.tracing.linalg import batch_matmul
from aotkit.tracing.linalg import lax_dot as dot
from aotkit.tracing.linalg import lax_dot_general as dot_general
from aotkit.tracing.nn import conv, conv_general_dilated, conv_transpose, reduce_window

__all__ = [
    "batch_matmul",
    "cond",
    "conv",
    "conv_general_dilated",
    "conv_transpose",
    "dot",
    "dot_general",
    "fori_loop",
    "reduce_window",
    "scan",
    "stop_gradient",
    "switch",
    "while_loop",
]
