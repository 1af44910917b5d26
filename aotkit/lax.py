"""`aotkit.lax`: structured control flow, named as in `jax.lax`.

`cond`, `switch`, `while_loop`, `fori_loop` and `scan` trace their bodies into one
`stablehlo.if`, `stablehlo.case` or `stablehlo.while` each (see `aotkit.lowering.control`);
they are also available as `aotkit.cond`, ... .
"""

from __future__ import annotations

from aotkit.lowering.control import cond, fori_loop, scan, switch, while_loop

__all__ = ["cond", "fori_loop", "scan", "switch", "while_loop"]
