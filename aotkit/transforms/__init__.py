"""Transforms: grad, vjp, jvp and vmap as StableHLO -> StableHLO rewrites.

Every aotkit front end produces StableHLO, so the transforms work on StableHLO, whoever
wrote it: a function aotkit's tracer traced, a module JAX lowered, a file loaded with
`aotkit.load_module`. A transform evaluates a function's ops again inside an aotkit trace,
each op through its rule in one table per transform, keyed by op name:

- `jvp.JVP_RULES`: the tangent of each op, from its operands' tangents, with the linear
  primitives of `linear.LINEAR`; `jvp.ZERO` declares the ops whose tangent is zero.
- `linear.LINEAR`: each linear primitive with its transpose rule. Reverse mode runs the JVP
  rules on a tape and transposes it (`core.transpose`).
- `batching.BATCH_RULES`: each op on batched operands (the batch dimension first).
- `control`: while, case and if, for all three.

What each module is:
- `_ir`: reading ops (attributes, regions, trip counts); `_hlo`: building ops on tracers.
- `core`: evaluators, the tape and its transposition, `replay`.
- `functions`: the transforms of Python functions inside a trace (`aotkit.grad` et al.
  are `aotkit.functional`'s wrappers of them), and `call_program`, which makes any
  program a function for the stages' transforms (`Lowered.grad`, ...).
- `coverage`: the op x transform table in docs/transforms.md.

A transformed program is an ordinary traced module: the pass pipeline simplifies it, it
verifies, dumps, caches and serializes like any other.
"""

from aotkit.transforms.core import TransformError

__all__ = ["TransformError"]
