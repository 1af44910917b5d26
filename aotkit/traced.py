"""The trace stage's value: `Traced`, what every front end returns.

A front end (aotkit's tracer, the JAX front end, the file reader) turns a program into a
`Traced`: the StableHLO module before any pass pipeline, with the argument and result
pytrees and specs, which arguments are donated, the program's name and the front end that
made it. `aotkit.stages` alone turns a `Traced` into a `Lowered` (pipeline, then donation,
then verification, then dumps), so every front end gets the same pipeline, dumps and checks.

Stages are immutable: their attributes cannot be set, and the module is never handed out
for writing (`as_text()` prints it; `Lowered.module` returns a copy).
"""

from __future__ import annotations

import dataclasses

import numpy as np
from jax import tree_util
from jaxlib.mlir import ir

from aotkit._context import LoweringContext
from aotkit._traceback import api_boundary
from aotkit.frontends import signature
from aotkit.specs import ShapeDtype


@dataclasses.dataclass(frozen=True)
class ArgInfo:
    """One argument leaf of a stage (`args_info`): its shape, dtype and whether it is
    donated, as in JAX's `Lowered.args_info` (a pytree leaf, as JAX's is)."""

    shape: tuple[int, ...]
    dtype: np.dtype
    donated: bool


class Stage:
    """Immutable attributes for the stages: set once in `__init__`, read-only after.
    Stages can be weakly referenced, as JAX's can (a cache keyed on them, a finalizer)."""

    __slots__ = ("__weakref__",)

    def __setattr__(self, name, value):
        raise AttributeError(
            f"{type(self).__name__} is immutable: cannot set {name!r}; stages are values "
            "(lower or compile again for a different one)"
        )

    def __delattr__(self, name):
        raise AttributeError(f"{type(self).__name__} is immutable: cannot delete {name!r}")

    def _init(self, **values) -> None:
        for name, value in values.items():
            object.__setattr__(self, name, value)

    @property
    def in_specs(self):
        """The input pytree `((args...), {kwargs})` with ShapeDtype leaves (statics removed)."""
        return tree_util.tree_unflatten(self.in_tree, self.flat_in_specs)

    @property
    def out_specs(self):
        """The output pytree with ShapeDtype leaves."""
        return tree_util.tree_unflatten(self.out_tree, self.flat_out_specs)

    # -- JAX's names for the same things (docs/stages.md has the table)

    @property
    def in_avals(self):
        """`in_specs` under JAX's name: the input pytree `((args...), {kwargs})` of
        ShapeDtype leaves, which have `.shape` and `.dtype` as JAX's avals do."""
        return self.in_specs

    @property
    def args_info(self):
        """The input pytree `((args...), {kwargs})` with one `ArgInfo(shape, dtype, donated)`
        per leaf, as JAX's `Lowered.args_info`."""
        infos = [
            ArgInfo(s.shape, s.dtype, d)
            for s, d in zip(self.flat_in_specs, self.donated, strict=True)
        ]
        return tree_util.tree_unflatten(self.in_tree, infos)

    @property
    def out_info(self):
        """`out_specs` under JAX's name: the output pytree of ShapeDtype leaves."""
        return self.out_specs

    @property
    def donate_argnums(self) -> tuple[int, ...]:
        """The positional arguments with a donated leaf, as JAX's `Lowered.donate_argnums`
        (`donated` says it per leaf)."""
        args_tree = tree_util.tree_structure(self.in_specs[0])
        counts = [child.num_leaves for child in args_tree.children()]
        found, start = [], 0
        for i, n in enumerate(counts):
            if any(self.donated[start : start + n]):
                found.append(i)
            start += n
        return tuple(found)

    @property
    def in_shardings(self):
        """The input pytree with one sharding per leaf (a `jax.sharding.NamedSharding`; None
        where the module does not say), or None for a single-device program."""
        p = self.partitioning
        return None if p is None else tree_util.tree_unflatten(self.in_tree, p.in_shardings)

    @property
    def out_shardings(self):
        """The output pytree with one sharding per leaf (None where the compiler decides:
        the Compiled stage says what it decided), or None for a single-device program."""
        p = self.partitioning
        return None if p is None else tree_util.tree_unflatten(self.out_tree, p.out_shardings)

    @property
    def mesh(self):
        """The `jax.sharding.Mesh` the program is partitioned over (an `AbstractMesh` for a
        module file before it is compiled), or None (single device, or a module that names
        no mesh)."""
        p = self.partitioning
        return None if p is None else p.mesh

    def _signature_text(self) -> str:
        return signature.format_signature(self)


class ModuleStage(Stage):
    """A stage that holds a StableHLO module in its lowering context."""

    __slots__ = ()

    def as_text(self, debug_info: bool = False) -> str:
        """The module as MLIR text; `debug_info=True` adds the `file:line` locations."""
        with self._lc:
            return self._module.operation.get_asm(enable_debug_info=debug_info)

    def as_bytecode(self) -> bytes:
        """The module as MLIR bytecode (exact constants, locations kept)."""
        from aotkit import modules

        return modules.bytecode(self._module)

    def as_portable_artifact(self, target_version: str | None = None) -> bytes:
        """The module as a StableHLO portable artifact for `target_version` (MAJOR.MINOR.PATCH,
        'current' or 'minimum'), readable by later StableHLO versions and other compilers."""
        from aotkit import modules

        return modules.portable_artifact(self.module, target_version)

    @property
    def module(self) -> ir.Module:
        """A copy of the module (an `ir.Module` in the same context): changing it changes
        nothing in this stage. Use `as_text()` to look."""
        from aotkit import modules

        data = modules.bytecode(self._module)
        with self._lc:
            return ir.Module.parse(data)

    def compiler_ir(self, dialect: str | None = "stablehlo") -> ir.Module:
        """The module as JAX's `compiler_ir` gives it: a copy of the StableHLO `ir.Module`
        (`Lowered.module`). Other dialects have no meaning before compiling: the optimized
        HLO is `Compiled.as_text()`."""
        if dialect not in (None, "stablehlo"):
            raise ValueError(
                f"compiler_ir: dialect {dialect!r} is not available here; aotkit's stages hold "
                "StableHLO (dialect='stablehlo'); the backend's optimized HLO is "
                "Compiled.as_text()"
            )
        return self.module

    def __str__(self) -> str:
        return self.as_text()


class Traced(ModuleStage):
    """A program traced to StableHLO, before any pass pipeline: `jit(f).trace(*args)`.

    `.lower()` runs the pipeline (the jit's, unless given) and returns the `Lowered` stage.
    Its module is verified: every front end verifies what it makes, and `lower` verifies
    again only what a pass or donation changed.
    """

    __slots__ = (
        "_module",
        "_lc",
        "name",
        "in_tree",
        "out_tree",
        "flat_in_specs",
        "flat_out_specs",
        "donated",
        "frontend",
        "_defaults",
        "partitioning",
        "facts",
    )

    def __init__(
        self,
        module,
        lc: LoweringContext,
        *,
        name: str,
        in_tree,
        out_tree,
        flat_in_specs: tuple[ShapeDtype, ...],
        flat_out_specs: tuple[ShapeDtype, ...],
        donated: tuple[bool, ...] = (),
        frontend: str = "aotkit",
        defaults: dict | None = None,
        partitioning=None,
        facts: frozenset[str] = frozenset(),
    ):
        self._init(
            _module=module,
            _lc=lc,
            name=name,
            in_tree=in_tree,
            out_tree=out_tree,
            flat_in_specs=tuple(flat_in_specs),
            flat_out_specs=tuple(flat_out_specs),
            donated=tuple(donated) or (False,) * len(flat_in_specs),
            frontend=frontend,
            _defaults=dict(defaults or {}),
            # How the program is sharded (aotkit/spmd.py), or None for one device.
            partitioning=partitioning,
            # What the front end knows of its module (`aotkit.passes.TRACER_FACTS`, ...):
            # the pipeline skips the passes these make no-ops.
            facts=frozenset(facts),
        )

    @api_boundary
    def lower(self, *, pipeline: str | None = None, dump_dir=None):
        """The `Lowered` stage: `pipeline` (default: the one given to jit, else "default"),
        then donation, verification and dumps (under `dump_dir` or `AOTKIT_DUMP_DIR`).
        This Traced stays as it is: the pipeline runs on a copy of its module."""
        from aotkit import stages

        return stages.lower_traced(self, pipeline=pipeline, dump_dir=dump_dir)

    def __repr__(self) -> str:
        return f"<Traced {self._signature_text()} from {self.frontend}>"
