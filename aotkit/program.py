"""What every front end returns: a `Program` (a StableHLO module in its lowering context)
with its one `Signature`; and the one `Options` value front ends are given.

The signature of a program (its name, argument and result pytrees, flat specs, which
arguments are donated and how it is partitioned) is declared here only. Every stage
(`Traced`, `Lowered`, `Compiled`), the module a front end adopts and an artifact's header
hold one `Signature`; none redeclares its fields.

This module sits just above the IR helpers: front ends import it and nothing above it
(tests/test_layers.py holds the layer table).
"""

from __future__ import annotations

import dataclasses
import os

from jax import tree_util
from jaxlib.mlir import ir

from aotkit import arguments, dtypes, modules
from aotkit._context import LoweringContext
from aotkit.specs import ShapeDtype


@dataclasses.dataclass(frozen=True)
class Signature:
    """The calling convention of a program, from the user's side and the module's.

    `in_tree` is the pytree of `((args...), {kwargs})` with static arguments removed and
    `out_tree` the result's; `flat_in_specs`/`flat_out_specs` are their leaves' specs, in
    `@main`'s argument and result order. `donated` says per argument leaf whether its buffer
    may be reused for a result. `partitioning` (aotkit/spmd.py) says how a sharded program
    is laid out over its mesh, None for one device. `in_keys`/`out_keys` say per leaf which
    are typed PRNG keys (aotkit/arguments.py): the user's `jax.ShapeDtypeStruct` of the key
    (whose uint32 data is the module's argument or result) or None; () when none is.
    `arg_names` names the positional arguments of `in_tree` by the function's parameters
    (`arguments.parameter_names`: None where it has none; () when none is known), for reprs
    and errors.
    """

    name: str
    in_tree: tree_util.PyTreeDef
    out_tree: tree_util.PyTreeDef
    flat_in_specs: tuple[ShapeDtype, ...]
    flat_out_specs: tuple[ShapeDtype, ...]
    donated: tuple[bool, ...] = ()
    partitioning: object = None
    in_keys: tuple = ()
    out_keys: tuple = ()
    arg_names: tuple = ()

    def __post_init__(self):
        set_ = object.__setattr__
        set_(self, "flat_in_specs", tuple(self.flat_in_specs))
        set_(self, "flat_out_specs", tuple(self.flat_out_specs))
        set_(self, "in_keys", tuple(self.in_keys))
        set_(self, "out_keys", tuple(self.out_keys))
        set_(self, "donated", tuple(self.donated) or (False,) * len(self.flat_in_specs))

    @classmethod
    def flat(cls, name: str, in_specs, out_specs, **fields) -> Signature:
        """The signature of a module called with positional arrays: one argument per
        `@main` argument, and one array (one result) or a tuple of them as the result,
        as the function that produced it would return."""
        in_tree = tree_util.tree_structure(((0,) * len(in_specs), {}))
        out_tree = tree_util.tree_structure(0 if len(out_specs) == 1 else (0,) * len(out_specs))
        return cls(name, in_tree, out_tree, tuple(in_specs), tuple(out_specs), **fields)

    def replace(self, **changes) -> Signature:
        return dataclasses.replace(self, **changes)

    @property
    def in_specs(self):
        """The input pytree `((args...), {kwargs})` with ShapeDtype leaves (a typed key leaf:
        its `jax.ShapeDtypeStruct`)."""
        leaves = arguments.leaf_specs(self.flat_in_specs, self.in_keys)
        return tree_util.tree_unflatten(self.in_tree, leaves)

    @property
    def out_specs(self):
        """The output pytree with ShapeDtype leaves (a typed key leaf: its
        `jax.ShapeDtypeStruct`)."""
        return tree_util.tree_unflatten(
            self.out_tree, arguments.leaf_specs(self.flat_out_specs, self.out_keys)
        )


@dataclasses.dataclass(frozen=True, eq=False)
class Program:
    """A verified StableHLO module in the lowering context that owns it, with its signature.

    `frontend` names who made it ("aotkit" for the tracer, "jax", "file"); `facts` are what
    that front end knows of the module (`aotkit.passes.TRACER_FACTS`, ...), which lets the
    pipeline skip passes they make no-ops. The module is the program's own: whoever holds
    the Program and changes the module (a pass pipeline) works on a copy (`clone`).
    `pending` (aotkit.symbolic.specialize.Pending) marks a symbolic program transformed by
    the stages, whose module exists per shape only: `module` is then its source's.
    `pruned` are the flat input leaves (indices) the module takes no argument for: those
    jax.jit pruned, unused, from JAX's module (the JAX front end). An executable for one
    device is compiled from the module as it is and called with every leaf, the pruned ones
    checked and not transferred (`compiled_form`, `backends.base.PrunedExecutable`), as
    jax.jit's is; the transforms evaluate the module with the other leaves; and
    `executable_module` puts them back as unused arguments, one per leaf, for sharded
    executables (whose shardings are per leaf). `marked_module`: None, or (the JAX front end,
    for a function that calls `jax.lax.stop_gradient` or a `jax.custom_jvp`/`custom_vjp`
    function, which JAX's module lowers away) a function that makes, on first use, the
    module lowered again with them kept (`modules.STOP_GRADIENT`, `modules.CUSTOM_JVP`,
    `modules.CUSTOM_VJP`), in the program's context, with the same arguments, or None if
    there is nothing to keep after all: what the transforms evaluate.
    """

    module: object
    lc: LoweringContext
    signature: Signature
    frontend: str
    facts: frozenset[str] = frozenset()
    pending: object = None
    pruned: tuple[int, ...] = ()
    marked_module: object = None

    def replace(self, **changes) -> Program:
        return dataclasses.replace(self, **changes)

    def unread(self, sharded: bool) -> tuple[int, ...]:
        """The leaves an executable of this program takes no argument for: `pruned` on one
        device, none sharded."""
        return () if sharded else self.pruned

    def compiled_form(self, sharded: bool) -> tuple:
        """(the module a backend compiles, `unread(sharded)`): the module as it is where its
        executable leaves the pruned leaves out, else `executable_module()`; without the
        barriers that only carry marks for the transforms (`modules.without_marks`)."""
        module = self.executable_module() if sharded else self.module
        return modules.without_marks(module), self.unread(sharded)

    def executable_module(self):
        """The module with one `@main` argument per flat input leaf: `module` itself, or a
        copy of it with the `pruned` leaves as unused arguments at their places."""
        if not self.pruned:
            return self.module
        with self.lc, ir.Location.unknown():
            module = ir.Module.parse(modules.bytecode(self.module), context=self.lc.mlir)
            specs = self.signature.flat_in_specs
            modules.insert_unused_arguments(
                module, {i: dtypes.tensor_type(specs[i].shape, specs[i].dtype) for i in self.pruned}
            )
            return module

    def clone(self) -> Program:
        """The same program with a copy of the module (in the same context)."""
        with self.lc:
            return self.replace(module=self.module.operation.clone())


@dataclasses.dataclass(frozen=True)
class Options:
    """What `jit`, `lower` or `load_module` was given (checked by `aotkit.api.check_options`):
    the one place these options are declared below the public signatures. Front ends read
    the ones that shape a trace (static and donated arguments, shardings)."""

    static_argnums: tuple[int, ...] = ()
    static_argnames: tuple[str, ...] = ()
    donate_argnums: tuple[int, ...] = ()
    backend: str | None = None
    pipeline: str | None = None
    dump_dir: str | os.PathLike | None = None
    print_ir_after_all: bool | None = None
    frontend: str = "auto"
    autograph: bool = True
    in_shardings: object = None
    out_shardings: object = None
    keep_unused: bool = False


DEFAULT_OPTIONS = Options()
