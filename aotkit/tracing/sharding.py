"""The sharding constraint op family: `aotkit.sharding.constrain` inside a trace.

`constrain(x, sharding)` binds `sharding_constraint`, which lowers to
`sdy.sharding_constraint` (what `jax.lax.with_sharding_constraint` writes). The mesh and
the checks of a sharding against an array are the SPMD layer's (aotkit/spmd.py); the trace
in progress keeps the mesh it found (`spmd.current_layout`).
"""

from __future__ import annotations

from jax.sharding import NamedSharding
from jaxlib.mlir import ir

from aotkit import spmd
from aotkit.specs import ShapeDtype
from aotkit.tracing import core


def constrain(x, sharding):
    """`aotkit.sharding.constrain`: x, constrained to `sharding` (see there)."""
    where = "aotkit.sharding.constrain"
    if not isinstance(x, core.Tracer):
        if not core.is_tracing():
            raise core.no_trace_error(where)
        raise TypeError(
            f"{where} (at {core.user_site()}): x is a {type(x).__name__}, not a traced array; "
            "constrain the arrays the function computes (or its arguments)"
        )
    layout = spmd.current_layout()
    assert layout is not None, "every trace of a function runs under spmd.tracing"
    where = core.where(where)
    if isinstance(sharding, NamedSharding) and layout.mesh is None:
        layout.mesh = sharding.mesh
    spec = ShapeDtype(x.shape, x.dtype)
    resolved = spmd.resolve(
        where, "the sharding", sharding, spec, layout.mesh, default_replicated=True
    )
    weak = x.weak
    out = core.bind1("sharding_constraint", x, sharding=spmd.shardy_text(resolved, x.ndim))
    return core.as_weak(out) if weak else out


def _same_aval(aval, **params):
    return [aval]


@core.register("sharding_constraint", shape=_same_aval)
def _lower_constraint(ctx, x, *, sharding: str):
    return core.emit(ctx, "sdy.sharding_constraint", x, sharding=ir.Attribute.parse(sharding))
