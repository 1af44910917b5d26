"""The stage values: `Traced` -> `.lower()` -> `Lowered` -> `.compile()` -> `Compiled`.

Each stage is an immutable value the user can hold, print and dump. It holds a `Program`
(aotkit/program.py: the module, its lowering context and its `Signature`) and the
transition the code that made it bound for it: `Traced.lower` and `Lowered.compile` call
what `aotkit.jit` or `aotkit.lower` gave them (aotkit/api.py), so a stage made by a jit
shares that jit's caches, and no value reaches up to the code that orchestrates them.

`Compiled` wraps a backend `Executable` with the argument and result pytrees. Calling it
checks the arguments against the compiled pytree and specs and runs; it never retraces or
recompiles. Its results (the leaves of the result pytree) are all of one type, the
backend's `result_type`: `jax.Array` on PJRT backends (`cpu` and the plugins: the device's
own buffer, not copied), `numpy.ndarray` on the others (`interpreter`, `iree`: host memory);
see aotkit/backends/base.py for why. A mismatch is a TypeError naming both PyTreeDefs and
the first difference, or the argument path with the expected and given specs.

The call is the dispatch hot path. A backend may supply a native dispatcher (PJRT backends
use jaxlib's C++ dispatch, as JAX's own `Compiled` does) that runs argument signatures it
has seen before without entering Python and hands every other call to the checked Python
call. That call, for the common case (positional array arguments, no kwargs), skips
flattening: the backend's per-slot checks reject anything that is not a matching leaf, and
only then is the full pytree diagnosis run to word the error.

Stages are immutable: their attributes cannot be set, and the module is never handed out
for writing (`as_text()` prints it; `Lowered.module` returns a copy).
"""

from __future__ import annotations

import ast
import dataclasses
import operator
import sys
from collections.abc import Callable

import numpy as np
from jax import tree_util
from jaxlib.mlir import ir

from aotkit import artifacts, backends, dumps, modules, pytrees
from aotkit._traceback import api_boundary, filter_exception
from aotkit.arguments import (
    flatten,
    format_signature,
    key_data,
    key_dtype,
    leaf_specs,
    spec_text,
    wrap_key,
)
from aotkit.backends.base import ArgumentMismatch, Backend, Executable, MemoryAnalysis, describe
from aotkit.program import Program, Signature
from aotkit.specs import ShapeDtype
from aotkit.symbolic.signatures import SymbolicSignature, is_symbolic
from aotkit.symbolic.specialize import SymbolicExecutable, pending_note, per_shape_only


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

    __slots__ = ("__weakref__", "signature")

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

    # -- the signature (aotkit/program.py), read through

    @property
    def name(self) -> str:
        return self.signature.name

    @property
    def in_tree(self):
        return self.signature.in_tree

    @property
    def out_tree(self):
        return self.signature.out_tree

    @property
    def flat_in_specs(self) -> tuple[ShapeDtype, ...]:
        return self.signature.flat_in_specs

    @property
    def flat_out_specs(self) -> tuple[ShapeDtype, ...]:
        return self.signature.flat_out_specs

    @property
    def donated(self) -> tuple[bool, ...]:
        """Per argument leaf: whether its buffer may be reused for a result."""
        return self.signature.donated

    @property
    def partitioning(self):
        """How the program is sharded (aotkit/spmd.py), or None for one device."""
        return self.signature.partitioning

    @property
    def in_specs(self):
        """The input pytree `((args...), {kwargs})` with ShapeDtype leaves (statics removed)."""
        return self.signature.in_specs

    @property
    def out_specs(self):
        """The output pytree with ShapeDtype leaves."""
        return self.signature.out_specs

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
        specs = leaf_specs(self.flat_in_specs, self.signature.in_keys)
        infos = [ArgInfo(s.shape, s.dtype, d) for s, d in zip(specs, self.donated, strict=True)]
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
        return format_signature(self)


class ModuleStage(Stage):
    """A stage that holds a StableHLO module in its lowering context."""

    __slots__ = ("_program",)

    @property
    def _module(self):
        return self._program.module

    @property
    def _lc(self):
        return self._program.lc

    @property
    def frontend(self) -> str:
        """Which front end made the module: "aotkit" (the tracer), "jax" or "file"."""
        return self._program.frontend

    @property
    def facts(self) -> frozenset[str]:
        """What the front end knows of its module (`aotkit.passes.TRACER_FACTS`, ...)."""
        return self._program.facts

    def as_text(self, debug_info: bool = False) -> str:
        """The module as MLIR text; `debug_info=True` adds the `file:line` locations. A
        transform of a symbolic program (`Lowered.grad` of one), whose module exists per
        shape only, shows the symbolic module it transforms, after a comment saying so."""
        with self._lc:
            text = self._module.operation.get_asm(enable_debug_info=debug_info)
        return pending_note(self._program.pending) + text

    def as_bytecode(self) -> bytes:
        """The module as MLIR bytecode (exact constants, locations kept)."""
        return modules.bytecode(self._own_module("as_bytecode()"))

    def as_portable_artifact(self, target_version: str | None = None) -> bytes:
        """The module as a StableHLO portable artifact for `target_version` (MAJOR.MINOR.PATCH,
        'current' or 'minimum'), readable by later StableHLO versions and other compilers."""
        self._own_module("as_portable_artifact()")
        return modules.portable_artifact(self.module, target_version)

    def _own_module(self, what: str):
        """The module, unless the program is a transform of a symbolic one (ValueError: it
        has a module per shape only)."""
        pending = self._program.pending
        if pending is not None:
            symbols = SymbolicSignature.of(self.flat_in_specs, self.flat_out_specs).symbols
            raise per_shape_only(
                f"{type(self).__name__} {self.name!r}: {what}",
                pending,
                symbols,
                "module of its own",
                f"specialize it to one size per symbol first (lowered.specialize({{sizes}})."
                f"{what}), or see as_text() for the module it transforms",
            )
        return self._module

    @property
    def module(self) -> ir.Module:
        """A copy of the module (an `ir.Module` in the same context): changing it changes
        nothing in this stage. Use `as_text()` to look."""
        data = modules.bytecode(self._own_module("module"))
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

    __slots__ = ("_lower",)

    def __init__(self, program: Program, lower: Callable[..., Lowered]):
        # `lower(traced, pipeline=, dump_dir=)`: the transition the jit (or `aotkit.lower`)
        # that traced it bound, with that jit's options and caches.
        self._init(signature=program.signature, _program=program, _lower=lower)

    @api_boundary
    def lower(self, *, pipeline: str | None = None, dump_dir=None) -> Lowered:
        """The `Lowered` stage: `pipeline` (default: the one given to jit, else the front
        end's default, see `aotkit.api.default_pipeline`), then donation, verification and
        dumps (under `dump_dir` or `AOTKIT_DUMP_DIR`). This Traced stays as it is: the
        pipeline runs on a copy of its module."""
        return self._lower(self, pipeline=pipeline, dump_dir=dump_dir)

    def __repr__(self) -> str:
        return f"<Traced {self._signature_text()} from {self.frontend}>"


class Lowered(ModuleStage):
    """A program lowered to a verified StableHLO module, after its pass pipeline."""

    __slots__ = ("pipeline", "backend", "_dumper", "_compile", "_transform")

    def __init__(
        self,
        program: Program,
        *,
        pipeline: str,
        backend: str | None,
        compile: Callable[..., Compiled],  # noqa: A002
        transform: Callable[..., Lowered],
        dumper: dumps.Dumper | None = None,
    ):
        self._init(
            signature=program.signature,
            _program=program,
            # The pipeline that ran, and the backend the jit was given (None: the default).
            pipeline=pipeline,
            backend=backend,
            # `compile(lowered, backend, options, target=, target_options=)`: the transition
            # bound by the jit that lowered it (its compile cache) or by `aotkit.lower`.
            _compile=compile,
            # `transform(lowered, kind, **options)`: the program grad, vjp, jvp or vmap
            # transformed (aotkit.transforms) and lowered as the jit that lowered it would.
            _transform=transform,
            # The compile step writes its stages (optimized HLO, cost) after the lowering's.
            _dumper=dumper,
        )

    @api_boundary
    def compile(
        self,
        backend: str | None = None,
        options: dict | None = None,
        *,
        target: str | None = None,
        target_options: dict | None = None,
        topology: str | None = None,
    ) -> Compiled:
        """Compiles on `backend` (default: the one given to jit, else the default backend: the
        accelerator JAX picks, else `cpu`; aotkit.backends.default_name) into `Compiled`.

        `options` are the backend compiler's flags (XLA's, e.g.
        `{"xla_cpu_enable_fast_math": True}`; iree-compile's for `iree`); an unknown one is a
        ValueError. `target` and `target_options` choose what a cross-compiling backend
        compiles for (`iree`: "llvm-cpu", "cuda", "rocm", "vulkan-spirv"); other backends
        refuse them. A backend that rejects the module raises `aotkit.CompileError`.
        A sharded program is partitioned by XLA for its mesh's devices (a module file's
        mesh goes on the backend's first devices).

        `topology` ("v5e:2x2", with `backend="tpu"`) compiles for that TPU slice on a machine
        without one, through libtpu (`pip install 'aotkit[tpu]'`): the `Compiled` cannot run
        here, but gives its optimized HLO, cost and memory analysis (per device, beside the
        chip's HBM) and saves an artifact a TPU host of that topology runs without compiling
        (aotkit/backends/tpu_topology.py).
        """
        return self._compile(
            self,
            backend,
            options,
            target=target,
            target_options=target_options,
            topology=topology,
        )

    @api_boundary
    def cost_analysis(self, backend: str | None = None) -> dict[str, float] | None:
        """XLA's cost estimate of the module before compiling ('flops', 'bytes accessed',
        ...; what JAX's `Lowered.cost_analysis()` gives), for `backend` (default: the jit's,
        else the default backend), or None where the backend has none (interpreter, iree).
        `Compiled.cost_analysis()` is the estimate of the optimized program. None for a
        program with symbolic shapes, whose cost depends on its sizes (XLA's estimate of a
        dynamic module is meaningless)."""
        if is_symbolic(self.flat_in_specs):
            return None
        chosen = backends.get(backend if backend is not None else self.backend)
        with self._lc:
            return chosen.estimate_cost(self._module)

    # -- transforms (aotkit/transforms): each gives a new Lowered, of any front end's module

    @api_boundary
    def grad(
        self, argnums=0, *, has_aux: bool = False, checkpoint_loops=None, max_trip_count=None
    ) -> Lowered:
        """The gradient of this program with respect to its positional arguments `argnums`
        (an int or a tuple), as `aotkit.grad` of the function it was lowered from: the
        program must return a float scalar (or `(scalar, aux)` with `has_aux=True`). Works
        for a module from any front end: traced, lowered by JAX, or loaded from a file.
        `checkpoint_loops` and `max_trip_count` are `aotkit.grad`'s.

        The transforms of a program with symbolic shapes are symbolic (their signatures
        derived from its): each compiles per shape, the program refined to the sizes and
        then transformed. Their module exists per shape only: `as_text()` shows the
        symbolic module they transform, and `specialize` gives the module of one size."""
        return self._transform(
            self,
            "grad",
            argnums=argnums,
            has_aux=has_aux,
            checkpoint_loops=checkpoint_loops,
            max_trip_count=max_trip_count,
        )

    @api_boundary
    def value_and_grad(
        self, argnums=0, *, has_aux: bool = False, checkpoint_loops=None, max_trip_count=None
    ) -> Lowered:
        """`(value, gradient)`, as `aotkit.value_and_grad` (see `grad`)."""
        return self._transform(
            self,
            "value_and_grad",
            argnums=argnums,
            has_aux=has_aux,
            checkpoint_loops=checkpoint_loops,
            max_trip_count=max_trip_count,
        )

    @api_boundary
    def vjp(self, *, checkpoint_loops=None, max_trip_count=None) -> Lowered:
        """The reverse-mode program `(primals, cotangents, **kwargs) -> (outputs,
        argument cotangents)`: `primals` is the tuple of positional arguments,
        `cotangents` mirrors the output pytree (None at integer leaves), and the result's
        cotangents mirror the arguments (None at integer leaves)."""
        return self._transform(
            self, "vjp", checkpoint_loops=checkpoint_loops, max_trip_count=max_trip_count
        )

    @api_boundary
    def jvp(self) -> Lowered:
        """The forward-mode program `(primals, tangents, **kwargs) -> (outputs, output
        tangents)`: `tangents` mirrors the positional arguments (None at integer leaves),
        the output tangents mirror the outputs (None at integer leaves)."""
        return self._transform(self, "jvp")

    @api_boundary
    def vmap(self, in_axes=0, out_axes=0, *, axis_size: int | str) -> Lowered:
        """This program mapped over a new axis of size `axis_size`: each argument leaf with
        an axis in `in_axes` (an int, None or one entry per positional argument, as
        `aotkit.vmap`'s) takes that axis, each output gets one at `out_axes`. A name
        (`axis_size="n"`) makes that axis a symbolic dimension: the program compiles per
        size of it, as any symbolic program."""
        return self._transform(
            self, "vmap", in_axes=in_axes, out_axes=out_axes, axis_size=axis_size
        )

    @api_boundary
    def specialize(self, **sizes) -> Lowered:
        """This program with one concrete size per symbol (`lowered.specialize(b=8)`): a
        Lowered of static shapes, its module the symbolic one refined to those sizes, which
        compiles and transforms (`grad`, `vmap`, ...) as any static program. A missing or
        unknown symbol, or sizes that break a constraint, is a ValueError; so is a static
        program. (`Compiled.specialize` compiles sizes of a symbolic program ahead of time
        instead.)"""
        return self._transform(self, "specialize", sizes=sizes)

    @property
    def dump_paths(self) -> tuple:
        """The files dumped for this lowering so far (its compiles add theirs), or ()."""
        return tuple(self._dumper.paths) if self._dumper is not None else ()

    def __repr__(self) -> str:
        return f"<Lowered {self._signature_text()}>"


class Compiled(Stage):
    """A function compiled by one backend for fixed argument specs; call it like the function.

    Immutable, like the other stages. `lowered` is the `Lowered` stage it was compiled from
    (None for a Compiled loaded from an artifact). `options` are the compile options it was
    compiled with; `origin` says where its executable came from: "compiled" (the backend
    compiled it), "persistent cache", "artifact" (deserialized by `aotkit.load`) or
    "recompiled" (`aotkit.load` compiled the artifact's portable StableHLO).
    """

    __slots__ = (
        "lowered",
        "_executable",
        "_execute",
        "_n_args",
        "_positional",
        "_single_out",
        "_unflatten_out",
        "_paths",
        "_call",
        "options",
        "origin",
        "_portable",
    )

    def __init__(
        self,
        executable: Executable,
        *,
        in_tree,
        out_tree,
        donated=(),
        lowered=None,
        options=None,
        origin: str = "compiled",
        portable: bytes | None = None,
        arg_names: tuple = (),
        keys: tuple = ((), ()),
    ):
        n_in, n_out = len(executable.in_specs), len(executable.out_specs)
        if in_tree.num_leaves != n_in or out_tree.num_leaves != n_out:
            raise ValueError(
                f"Compiled: pytrees with {in_tree.num_leaves} inputs and {out_tree.num_leaves} "
                f"outputs do not fit executable {executable.name!r} ({n_in} arguments, "
                f"{n_out} results); build Compiled through Lowered.compile"
            )
        # Typed PRNG key leaves (aotkit/arguments.py): the Lowered stage's, or an artifact's
        # (`keys`, its header's).
        in_keys, out_keys = (
            (lowered.signature.in_keys, lowered.signature.out_keys) if lowered is not None else keys
        )
        self._init(
            # A sharded executable's partitioning has its compiled shardings (aotkit/spmd.py).
            signature=Signature(
                executable.name,
                in_tree,
                out_tree,
                executable.in_specs,
                executable.out_specs,
                donated,
                executable.partitioning,
                in_keys,
                out_keys,
                lowered.signature.arg_names if lowered is not None else tuple(arg_names),
            ),
            lowered=lowered,
            _executable=executable,
            _execute=_with_keys(executable.execute, in_keys, out_keys),
            _n_args=n_in,
            _positional=in_tree == tree_util.tree_structure(((0,) * n_in, {})),
            _single_out=out_tree == tree_util.tree_structure(0),
            _unflatten_out=out_tree.unflatten,
            _paths=None,
            options=dict(options or {}),
            origin=origin,
            # The portable StableHLO of a Compiled loaded from an artifact (it has no
            # `lowered` to write it from), so that it saves again.
            _portable=portable,
        )
        if isinstance(executable, SymbolicExecutable):
            # Its errors name the other argument a symbol's size came from.
            executable.set_leaf_names(lambda: _leaf_paths(in_tree, self.signature.arg_names))
        # A backend may put a native dispatcher in front of the checked Python call; it
        # falls back to `_python_call` for every argument signature it has not cached. Where
        # every argument is a leaf, a pruned leaf is its argument: the dispatcher need not
        # prepare it for a transfer (`PrunedExecutable`).
        unread = getattr(executable, "pruned", ()) if self._positional else ()
        native = executable.dispatcher(self.name, self._python_call, unread=unread)
        self._init(_call=native if native is not None else self._python_call)

    # -- calling

    # `compiled(*args, **kwargs)` runs the executable on arguments of the compiled specs. A
    # property whose getter is C code hands out the dispatcher itself: Python calls what it
    # returns, with no forwarding frame (nor a getter frame) on every call.
    __call__ = property(
        operator.attrgetter("_call"),
        doc="`compiled(*args, **kwargs)`: runs the executable on arguments of its specs.",
    )

    def _python_call(self, *args, **kwargs):
        # An entry point (aotkit/_traceback.py): the error leaves without aotkit's frames.
        try:
            if self._positional and not kwargs and len(args) == self._n_args:
                try:
                    outs = self._execute(args)
                except ArgumentMismatch as mismatch:
                    raise self._diagnose(args, kwargs, mismatch) from None
            else:
                leaves, tree = flatten(
                    f"Compiled {self.name!r}", (args, kwargs), lambda: self.signature.arg_names
                )
                # A loaded artifact's namedtuple stand-ins take the real namedtuples too.
                if tree != self.in_tree and not pytrees.conforms(tree, self.in_tree):
                    raise self._tree_error(tree)
                try:
                    outs = self._execute(leaves)
                except ArgumentMismatch as mismatch:
                    raise self._argument_error(mismatch, leaves) from None
        except Exception as e:
            filter_exception(e)
            raise
        if self._single_out:
            return outs[0]
        return self._unflatten_out(outs)

    def call_flat(self, leaves) -> list:
        """Runs on leaves already flattened with `in_tree`; returns the flat results."""
        try:
            return self._execute(leaves)
        except ArgumentMismatch as mismatch:
            raise self._argument_error(mismatch, leaves) from None

    def _diagnose(self, args, kwargs, mismatch: ArgumentMismatch) -> Exception:
        leaves, tree = flatten(
            f"Compiled {self.name!r}", (args, kwargs), lambda: self.signature.arg_names
        )
        if tree != self.in_tree:
            return self._tree_error(tree)
        return self._argument_error(mismatch, leaves)

    def _tree_error(self, tree) -> TypeError:
        where, expected, given = _first_difference(self.in_tree, tree, ())
        e_node, g_node = expected.node_data(), given.node_data()
        hint = ""
        if e_node is not None and g_node is not None:
            hint = pytrees.same_name_hint(e_node[0], g_node[0])
        return TypeError(
            f"Compiled {self.name!r}: function compiled for {self.in_tree}, called with "
            f"{tree}; first difference at {_path_text(where, self.signature.arg_names)}: "
            f"expected {_node_text(expected)}, "
            f"got {_node_text(given)}{hint}; call it with the structure it was compiled for: "
            f"{self._signature_text()}"
        )

    def _argument_error(self, mismatch: ArgumentMismatch, leaves=None) -> Exception:
        if self._paths is None:
            self._init(_paths=_leaf_paths(self.in_tree, self.signature.arg_names))
        message = f"Compiled {self.name!r}: argument {self._paths[mismatch.index]} "
        if leaves is not None and _is_traced(leaves[mismatch.index]):
            # The shape and dtype match: what is wrong is that the value is traced.
            return TypeError(
                f"{message}is a traced value ({describe(leaves[mismatch.index])}): the "
                "Compiled was called inside a function being traced (by aotkit.jit, "
                "aotkit.grad, aotkit.vmap or another transform), and a Compiled runs on "
                "concrete arrays only, so it cannot be called on traced values; inside the "
                "traced function call the Python function itself (or its aotkit.jit), and "
                "call the Compiled outside the trace"
            )
        message += mismatch.reason
        if mismatch.kind is TypeError and not mismatch.says_fix:
            message += (
                "; pass an array of the compiled shape and dtype, or lower and compile again "
                "for the new one"
            )
        return mismatch.kind(message)

    # -- symbolic shapes (aotkit/symbolic/specialize.py)

    @api_boundary
    def specialize(self, **sizes) -> Compiled:
        """Compiles, ahead of the calls that would, the executables of a program with
        symbolic shapes for every combination of the sizes given per symbol
        (`compiled.specialize(b=[1, 8, 32], t=128)`); returns this Compiled, whose artifact
        (`save`) then holds them. Sizes already compiled are kept as they are. A size that
        breaks a constraint is a ValueError; so is a static program."""
        if not isinstance(self._executable, SymbolicExecutable):
            raise ValueError(
                f"Compiled {self.name!r}: specialize: the program has static shapes "
                f"({self._signature_text()}), so it has nothing to specialize; lower it with "
                "symbolic dimensions (aotkit.spec('f32[b,784]')) to compile it per shape"
            )
        self._executable.specialize(sizes, f"Compiled {self.name!r}: specialize")
        return self

    @property
    def specializations(self) -> tuple[dict[str, int], ...]:
        """The symbol values of the executables a program with symbolic shapes holds
        (compiled by calls, `specialize` or loaded from an artifact), in order of their
        values: `({'b': 1}, {'b': 8})`; () for a static program."""
        if not isinstance(self._executable, SymbolicExecutable):
            return ()
        return tuple(self._executable.specialized())

    # -- inspection

    @property
    def backend(self) -> Backend:
        return self._executable.backend

    def as_text(self) -> str:
        """The backend's optimized program: XLA's optimized HLO, or the interpreter's StableHLO."""
        return self._executable.as_text()

    def cost_analysis(self) -> dict[str, float] | None:
        """XLA's cost estimate ('flops', 'bytes accessed', 'transcendentals', ...) or None.

        For a sharded program the estimate is per device (the program one device runs), and
        'devices' says how many devices run it."""
        return self._executable.cost_analysis()

    @property
    def input_shardings(self):
        """Where each argument leaf must live, as JAX's `Compiled.input_shardings`: the input
        pytree `((args...), {kwargs})` of `jax.sharding` shardings (the compiled ones for a
        sharded program, the device's `SingleDeviceSharding` otherwise), or None on a
        backend whose arrays are not JAX's (interpreter, iree)."""
        flat = self._flat_shardings(self.flat_in_specs, "in_shardings")
        return None if flat is None else tree_util.tree_unflatten(self.in_tree, flat)

    @property
    def output_shardings(self):
        """Where each result leaf lives, as JAX's `Compiled.output_shardings` (see
        `input_shardings`)."""
        flat = self._flat_shardings(self.flat_out_specs, "out_shardings")
        return None if flat is None else tree_util.tree_unflatten(self.out_tree, flat)

    def _flat_shardings(self, specs, side: str):
        if self.partitioning is not None:
            return list(getattr(self.partitioning, side))
        sharding = self._executable.backend.input_sharding()
        return None if sharding is None else [sharding] * len(specs)

    def memory_analysis(self) -> MemoryAnalysis | None:
        """Argument, output, alias, temp and generated-code sizes in bytes, or None.

        For a sharded program the sizes are per device, and its `devices` field says how
        many devices run it."""
        return self._executable.memory_analysis()

    def runtime_executable(self):
        """The backend's own executable (a PJRT LoadedExecutable for PJRT backends), for
        calls that bypass aotkit's checks: the backend checks little of what it is given (on
        a TPU, an input buffer on another device ends the process), so give it buffers on its
        own devices, in the number, shapes and dtypes of `in_specs`."""
        return self._executable.runtime_executable()

    # -- artifacts (aotkit/artifacts.py; the format is docs/artifact-format.md)

    @api_boundary
    def serialize(self) -> bytes:
        """This function as an AOT artifact: `aotkit.load(data)` rebuilds it in any process,
        without the Python function, tracing or (on the same platform and versions)
        compiling. Its pytrees may hold tuples, lists, dicts (str or int keys), None,
        namedtuples and node types registered with `aotkit.register_pytree_node_serialization`
        (docs/artifacts.md)."""
        return artifacts.serialize(self)

    @api_boundary
    def save(self, path) -> None:
        """Writes `serialize()` to `path` (conventionally `NAME.aotx`), atomically."""
        artifacts.save(self, path)

    def __repr__(self) -> str:
        over = f", {self.partitioning.describe()}" if self.partitioning is not None else ""
        return f"<Compiled {self._signature_text()} on {self.backend.name}{over}>"


def _with_keys(execute, in_keys: tuple, out_keys: tuple):
    """`execute(leaves)` for a program with typed PRNG key leaves (`in_keys`, `out_keys`, as
    a Signature holds them): key arguments go in as their uint32 data, key results come back
    as keys of their implementation."""
    if not (in_keys or out_keys):
        return execute
    ins = [(i, k) for i, k in enumerate(in_keys) if k is not None]
    outs = [(i, k) for i, k in enumerate(out_keys) if k is not None]

    def run(leaves):
        leaves = list(leaves)
        for i, spec in ins:
            data = key_data(leaves[i], spec)
            if data is None:
                got = leaves[i]
                got = spec_text(got) if key_dtype(got) is not None else describe(got)
                raise ArgumentMismatch(
                    i,
                    f"expected the typed PRNG key array {spec_text(spec)}, got {got}; pass "
                    "a key array of that shape and implementation (jax.random.key, or "
                    "jax.random.wrap_key_data of its data)",
                    says_fix=True,
                )
            leaves[i] = data
        results = list(execute(leaves))
        for i, spec in outs:
            results[i] = wrap_key(results[i], spec)
        return results

    return run


def _leaf_paths(tree, names=()) -> list[str]:
    dummy = tree_util.tree_unflatten(tree, list(range(tree.num_leaves)))
    flat = tree_util.tree_flatten_with_path(dummy)[0]
    return [_path_text(_keys(path), names) for path, _ in flat]


def _keys(path) -> tuple[str, ...]:
    return tuple(tree_util.keystr((k,)) for k in path)


def _path_text(keys: tuple[str, ...], names=()) -> str:
    """`x['w']`: an argument is named by its parameter (`names`: the signature's
    `arg_names`), a keyword argument by its keyword; else the root pair `(args, kwargs)` is
    named (`args[0]['w']`) and the rest is indexing."""
    if not keys:
        return "the argument list"
    if len(keys) > 1 and keys[0] in ("[0]", "[1]"):
        try:
            key = ast.literal_eval(keys[1][1:-1])
        except (ValueError, SyntaxError):
            key = None
        if keys[0] == "[1]" and isinstance(key, str) and key.isidentifier():
            return key + "".join(keys[2:])
        if keys[0] == "[0]" and type(key) is int and key < len(names) and names[key]:
            return names[key] + "".join(keys[2:])
    head = {"[0]": "args", "[1]": "kwargs"}.get(keys[0], keys[0])
    return head + "".join(keys[1:])


def _first_difference(expected, given, where: tuple[str, ...]):
    """(path, expected subtree, given subtree) at the first place two PyTreeDefs differ."""
    e_node, g_node = expected.node_data(), given.node_data()
    if e_node is None or g_node is None:
        return where, expected, given
    # A loaded artifact's namedtuple stand-in takes the real namedtuple (`pytrees.conforms`).
    if e_node[0] is not g_node[0] and not pytrees.stands_for(e_node[0], g_node[0]):
        return where, expected, given
    if e_node[0] is g_node[0] and e_node[1] != g_node[1]:
        return where, expected, given
    e_children, g_children = expected.children(), given.children()
    if len(e_children) != len(g_children):
        return where, expected, given
    for i, (e, g) in enumerate(zip(e_children, g_children)):
        if not pytrees.conforms(g, e):
            return _first_difference(e, g, where + (_child_key(e_node, i),))
    return where, expected, given


def _child_key(node, i: int) -> str:
    kind, data = node
    if kind is dict and data is not None:
        return f"[{list(data)[i]!r}]"
    return f"[{i}]"


def _node_text(tree) -> str:
    node = tree.node_data()
    if node is None:
        return "an array"
    kind, data = node
    n = len(tree.children())
    if kind is type(None):
        return "None"
    if kind is dict:
        return f"a dict with keys {list(data)}"
    if kind is tuple:
        return f"a tuple of {n}"
    if kind is list:
        return f"a list of {n}"
    return f"a {kind.__name__} of {n}"


def _is_traced(value) -> bool:
    """Whether `value` is a tracer, without importing the tracer: loading an artifact must
    not (where the tracer was never imported, no value can be one)."""
    core = sys.modules.get("aotkit.tracing.core")
    return core is not None and isinstance(value, core.Tracer)
