"""Symbolic programs, specialized per shape: part of the compile stage.

A symbolic program's module is dynamic StableHLO (`tensor<?x784xf32>`) and its signature
names its dimensions (`f32[b,784]`) under constraints (`t % 8 == 0`). `Lowered.compile` of
one gives a `Compiled` whose executable is a `SymbolicExecutable`: called with concrete
arrays, it

1. reads the symbols' values from the arguments' shapes (`SymbolicSignature.bind`): two arguments
   that share a symbol must agree, a dimension written as an expression (`2*b`) must equal
   its value, and every constraint must hold; otherwise a ValueError naming the argument,
   the symbol, the values and the constraint, before anything is compiled;
2. for values it has not seen, refines a copy of the module to those shapes (`refine`:
   StableHLO's `stablehlo-refine-arguments` and `stablehlo-refine-shapes` passes, dynamism
   canonicalized, jax.export's `shape_assertion` calls decided and removed, verified), then
   compiles it once: from the persistent cache when a process compiled that program for
   those shapes before (the key is the symbolic program and the concrete shapes, so a hit
   costs no refinement), else by the backend;
3. runs the executable of those values. On a backend with a native dispatcher (PJRT),
   each specialization's argument signature is cached there as a static `Compiled`'s is,
   so a call of a shape already compiled costs what a static call costs.

Sizes 0 and 1 are values like any other: the same symbolic program serves them (a program
from jax.export states `b >= 1` for each of its dimensions, as JAX assumes). Sizes of 2**31
and more are not, for a program that reads its arguments' sizes (`get_dimension_size` gives
int32, and refined past it the sizes wrap): such an argument dimension is a ValueError
naming it, before anything is refined or compiled.

`Compiled.specialize(b=[1, 8])` compiles chosen values ahead of time; artifacts keep the
symbolic program and every specialization compiled (aotkit/artifacts.py).

On a backend with dynamic shapes (`Backend.dynamic_shapes`: iree), `DynamicExecutable`
compiles the program once instead, into one executable for every shape, after proving its
shapes for every size (aotkit/symbolic/prover.py); a call checks the symbols as in 1., and
once per new set of sizes what the proof left to the host (jax.export's assertions, open
requirements), then runs it. What the backend cannot compile so is compiled per shape as
above, with a `DynamicShapesWarning`.

The symbolic signature (`SymbolicSignature`, `SymbolicSpec`) is aotkit/symbolic/signatures.py's.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import itertools
import re
import threading
import warnings
from collections.abc import Callable, Sequence

import numpy as np
from jax import tree_util
from jaxlib.mlir import ir, passmanager

from aotkit import artifacts, cache, dtypes, modules
from aotkit._traceback import user_stacklevel
from aotkit.backends.base import Backend, Executable
from aotkit.errors import ArtifactError, CompileError, printable
from aotkit.program import Program, Signature
from aotkit.specs import ShapeDtype
from aotkit.symbolic import prover
from aotkit.symbolic.prover import MAX_ASSERTION_TEXT, NotDynamic, flatten_calls
from aotkit.symbolic.signatures import SymbolicSignature, leaf_shape

# --- refinement ----------------------------------------------------------------------------

_SHAPE_ASSERTION = prover.SHAPE_ASSERTION
# The sizes a symbolic program reads (`stablehlo.get_dimension_size` gives int32) stay below.
MAX_READ_SIZE = 2**31
_PLACEHOLDER = re.compile(r"\{(\d+)\}")


def refine(module: ir.Module, lc, in_specs: Sequence[ShapeDtype], where: str) -> ir.Module:
    """A copy of the dynamic `module` refined to the static `in_specs`: StableHLO's argument
    and shape refinement, dynamism canonicalized, `shape_assertion` calls (jax.export's)
    decided and removed, then verified. ValueError for an assertion that fails; CompileError
    for a module that does not refine to static shapes."""
    with lc, ir.Location.unknown():
        types = ",".join(str(dtypes.tensor_type(s.shape, s.dtype)) for s in in_specs)
        # A `builtin.module` op view, which backends take as they take an `ir.Module`.
        copy = module.operation.clone()
        pipeline = (
            f"builtin.module(stablehlo-refine-arguments{{types='{types}'}},"
            "stablehlo-refine-shapes,func.func(stablehlo-canonicalize-dynamism),canonicalize)"
        )
        try:
            # What JAX's own refinement runs first (jaxlib's C++ inliner, which the Python
            # bindings' contexts do not register): with every call inlined, a function is
            # never refined twice, which fails ("incompatible refinement keys") where a size
            # of 1 lets one call site's operands refine later than the call.
            flatten_calls(copy.operation, lc)
            passmanager.PassManager.parse(pipeline).run(copy)
        except ir.MLIRError as e:
            raise CompileError(
                f"{where}: the symbolic program does not refine to {_specs_text(in_specs)}: "
                f"{modules.diagnostic(e)}",
                module_name=modules.module_name(module),
            ) from None
        _check_assertions(copy.operation, where)
        left = _dynamic_types(copy.operation)
        if left:
            raise CompileError(
                f"{where}: the symbolic program refined to {_specs_text(in_specs)} still has "
                f"a dynamic shape ({left}); the shapes cannot be decided from the arguments",
                module_name=modules.module_name(module),
            )
        try:
            copy.operation.verify()
        except ir.MLIRError as e:
            raise CompileError(
                f"{where}: the symbolic program refined to {_specs_text(in_specs)} does not "
                f"verify: {modules.diagnostic(e)}",
                module_name=modules.module_name(module),
            ) from None
        return copy


def _constant_ints(value: ir.Value) -> list[int] | None:
    owner = value.owner
    if not isinstance(owner, ir.OpView | ir.Operation):
        return None
    op = owner.operation if isinstance(owner, ir.OpView) else owner
    if op.name != "stablehlo.constant":
        return None
    attr = op.attributes["value"]
    try:
        dense = ir.DenseIntElementsAttr(attr)
    except ValueError:
        return None
    t = ir.RankedTensorType(dense.type)
    if t.rank != 0:
        return None
    if ir.IntegerType(t.element_type).width == 1:
        return [1 if ir.BoolAttr(dense.get_splat_value()).value else 0]
    return [dense[0]]


def _check_assertions(op: ir.Operation, where: str) -> None:
    found: list[ir.Operation] = []

    def visit(inner: ir.Operation) -> ir.WalkResult:
        if inner.name == "stablehlo.custom_call":
            target = ir.StringAttr(inner.attributes["call_target_name"]).value
            if target == _SHAPE_ASSERTION:
                found.append(inner)
        return ir.WalkResult.ADVANCE

    op.walk(visit)
    for assertion in found:
        values = [_constant_ints(v) for v in assertion.operands]
        if any(v is None for v in values):
            raise CompileError(
                f"{where}: a shape assertion of the symbolic program "
                f"{modules.op_location(assertion)}cannot be decided for these shapes (its "
                "operands are not constants after refinement)",
            )
        if not values or values[0][0] != 1:
            message = "a shape assertion failed"
            if "error_message" in assertion.attributes:
                template = ir.StringAttr(assertion.attributes["error_message"]).value
                args = [v[0] for v in values[1:]]

                def fill(m, args=args):
                    k = int(m.group(1))
                    return str(args[k]) if k < len(args) else m.group(0)

                message = printable(_PLACEHOLDER.sub(fill, template[:MAX_ASSERTION_TEXT]))
            raise ValueError(f"{where}: {message}")
    for assertion in found:
        assertion.erase()


def _dynamic_types(op: ir.Operation) -> str | None:
    found: list[str] = []

    def visit(inner: ir.Operation) -> ir.WalkResult:
        for result in inner.results:
            t = result.type
            if isinstance(t, ir.RankedTensorType) and not t.has_static_shape:
                found.append(f"{inner.name} gives {t}")
                return ir.WalkResult.INTERRUPT
        return ir.WalkResult.ADVANCE

    op.walk(visit)
    return found[0] if found else None


def _specs_text(specs) -> str:
    return f"({', '.join(map(str, specs))})"


# --- the executable ------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, eq=False)
class Pending:
    """A symbolic program transformed by the stages (`Lowered.grad`, `.vmap`, ...), or any
    program mapped over a symbolic axis (`vmap(axis_size="n")`): its module exists per
    shape only. `source` is the program transformed;
    `transforms` the (kind, options) applied to it, in order; `build(values, where)` gives
    the static program for the symbols' values (`source` refined to their sizes, as
    `specialize_program` refines it, then transformed by the static rules, a symbolic
    axis of vmap given its size). `key` says
    what else decides the modules `build` makes (the transforms' pass pipeline)."""

    source: Program
    transforms: tuple[tuple[str, dict], ...]
    build: Callable[[dict[str, int], str], Program]
    key: str = ""

    @property
    def text(self) -> str:
        """`grad(argnums=0, has_aux=False), then vmap(...)`."""
        return ", then ".join(
            f"{kind}({', '.join(f'{k}={v!r}' for k, v in options.items() if v is not None)})"
            for kind, options in self.transforms
        )


class Source:
    """Where a symbolic executable gets its program: `module()` gives (module, lc), parsed
    on first use; `portable()` its StableHLO portable artifact. With `pending` (a
    `Pending`), `module()` is the source program and the module of each shape is
    `pending.build`'s (`refined`)."""

    def __init__(
        self,
        module: Callable[[], tuple],
        portable: Callable[[], bytes],
        pending: Pending | None = None,
    ):
        self._module_fn, self._portable_fn = module, portable
        self.pending = pending
        self._module = None
        self._portable = None
        self._digest = None
        self._reads_sizes: bool | None = None
        self._lock = threading.Lock()

    def module(self) -> tuple:
        with self._lock:
            if self._module is None:
                self._module = self._module_fn()
            return self._module

    def portable(self) -> bytes:
        with self._lock:
            if self._portable is None:
                self._portable = bytes(self._portable_fn())
            return self._portable

    def digest(self) -> str:
        """SHA-256 of the program without its locations: the persistent cache's key for it."""
        if self._digest is None:
            module, lc = self.module()
            digest = cache.program_digest(module, lc)
            if self.pending is not None:
                # The transforms decide the modules as much as the source does.
                text = f"{digest}\n{self.pending.text}\n{self.pending.key}"
                digest = hashlib.sha256(text.encode()).hexdigest()
            self._digest = digest
        return self._digest

    def refined(self, values: dict[str, int], in_specs, where: str):
        """The static module of the symbols' `values` (the signature's concrete argument
        specs `in_specs`): the program refined to them, or for a pending transform the
        module `pending.build` makes."""
        if self.pending is None:
            module, lc = self.module()
            return refine(module, lc, in_specs, where)
        return self.pending.build(values, where).module

    def reads_sizes(self) -> bool:
        """Whether the program reads a dimension size (`stablehlo.get_dimension_size`, whose
        result is int32: such a program runs only for sizes below `MAX_READ_SIZE`)."""
        if self._reads_sizes is None:
            module, lc = self.module()
            found = []

            def visit(op: ir.Operation) -> ir.WalkResult:
                if op.name == "stablehlo.get_dimension_size":
                    found.append(op)
                    return ir.WalkResult.INTERRUPT
                return ir.WalkResult.ADVANCE

            with lc:
                module.operation.walk(visit)
            self._reads_sizes = bool(found)
        return self._reads_sizes


class SymbolicExecutable(Executable):
    """The executable of a symbolic program: one static executable per distinct set of
    symbol values, compiled on first call (see the module docstring).

    `in_specs`/`out_specs` are the symbolic specs. `recompile=False` (an artifact loaded
    so) runs only the specializations it was given. `names(i)` is the path of argument leaf
    `i` for errors. `dynamic` is the one executable serving every shape where the backend
    compiled the program so (`DynamicExecutable`), None here.
    """

    dynamic: Executable | None = None

    def __init__(
        self,
        backend: Backend,
        name: str,
        shapes: SymbolicSignature,
        source: Source,
        *,
        options=None,
        donated: tuple = (),
        recompile: bool = True,
        where: str | None = None,
    ):
        self.backend = backend
        self.name = name
        self.shapes = shapes
        self.in_specs = shapes.in_specs
        self.out_specs = shapes.out_specs
        self.options = dict(options or {})
        self.donated = tuple(donated) or (False,) * len(shapes.in_specs)
        self.recompile = recompile
        self.source = source
        self._where = where or f"Compiled {name!r}"
        # symbol values -> executable, and leaf shapes -> executable (the call's lookup).
        self._by_values: dict[tuple, Executable] = {}
        self._by_shape: dict[tuple, Executable] = {}
        self._values: dict[tuple, dict] = {}
        self._lock = threading.RLock()
        self._names: list[str] | None = None
        self.compiles = 0

    # -- what the call runs

    def execute(self, leaves: Sequence) -> list:
        executable = self._by_shape.get(tuple(map(leaf_shape, leaves)))
        if executable is None:
            executable = self._for_leaves(leaves)
        return executable.execute(leaves)

    def _leaf_name(self, i: int) -> str:
        if self._names is None:
            return f"argument {i}"
        if callable(self._names):
            self._names = self._names()
        return self._names[i]

    def set_leaf_names(self, names: Callable[[], list[str]]) -> None:
        """`names()` gives the path of each argument leaf (`args[0]`), for errors."""
        self._names = names

    def _for_leaves(self, leaves: Sequence) -> Executable:
        values = self.shapes.bind(leaves, self._leaf_name)
        executable = self.specialization(values)
        self._by_shape[tuple(map(leaf_shape, leaves))] = executable
        return executable

    def specialization(self, values: dict[str, int]) -> Executable:
        """The executable for `values` (checked by the caller), compiled if needed."""
        key = self.shapes.key(values)
        executable = self._by_values.get(key)
        if executable is not None:
            return executable
        with self._lock:
            executable = self._by_values.get(key)
            if executable is None:
                if not self.recompile:
                    raise self._unknown(values)
                executable = self._compile(values)
                self._by_values[key] = executable
                self._values[key] = dict(values)
        return executable

    def _unknown(self, values: dict[str, int]) -> ArtifactError:
        held = "; ".join(self.shapes.text(v) for v in self.specialized()) or "none"
        return ArtifactError(
            f"{self._where}: no executable for {self.shapes.text(values)}, and it was loaded "
            f"with recompile=False; it holds executables for: {held}; call it with one of "
            "those shapes, or load it with recompile='auto' to compile others from its "
            "portable StableHLO"
        )

    def _compile(self, values: dict[str, int]) -> Executable:
        in_specs, out_specs = self.shapes.concrete(values)
        where = f"{self._where}: specializing to {self.shapes.text(values)}"
        self._check_sizes(in_specs, where)
        backend, options = self.backend, self.options
        # What the persistent cache reads of a compile: the specialization's signature.
        entry = Signature.flat(self.name, in_specs, out_specs, donated=self.donated)
        cache_key = cache.shape_key(self.source.digest, in_specs, backend, options, self.donated)
        executable = None
        if cache_key is not None:
            executable = cache.get(cache_key, entry, backend, options)
        if executable is None:
            refined = self.source.refined(values, in_specs, where)
            executable = backend.compile(refined, options)
            self.compiles += 1
            if cache_key is not None:
                cache.put(cache_key, entry, executable, options, portable=_portable(refined))
        self.check(executable, values, where)
        return executable

    def _check_sizes(self, in_specs: Sequence[ShapeDtype], where: str) -> None:
        """ValueError for an argument dimension the program cannot read (see `reads_sizes`),
        before anything is refined or compiled: past int32, its sizes would wrap (negative
        shapes, or a program refined to other shapes than the arguments')."""
        for i, (symbolic, spec) in enumerate(zip(self.in_specs, in_specs, strict=True)):
            for axis, (d, n) in enumerate(zip(symbolic.shape, spec.shape, strict=True)):
                if isinstance(d, int) or n < MAX_READ_SIZE or not self.source.reads_sizes():
                    continue
                raise ValueError(
                    f"{where}: dimension {axis} of argument {self._leaf_name(i)} ({d} in "
                    f"{symbolic}) is {n}, but this program reads its arguments' sizes with "
                    "stablehlo.get_dimension_size, whose result is int32, so it takes sizes "
                    f"below 2**31 = {MAX_READ_SIZE} only; use smaller sizes (split the array "
                    "along that dimension), or lower the program for those static shapes"
                )

    def check(self, executable: Executable, values: dict[str, int], where: str) -> None:
        """CompileError unless `executable` has the specs `values` give the signature."""
        in_specs, out_specs = self.shapes.concrete(values)
        if (tuple(executable.in_specs), tuple(executable.out_specs)) != (in_specs, out_specs):
            raise CompileError(
                f"{where}: the program compiled to {_specs_text(executable.in_specs)} -> "
                f"{_specs_text(executable.out_specs)}, but its signature gives "
                f"{_specs_text(in_specs)} -> {_specs_text(out_specs)}",
                backend=self.backend.name,
                module_name=self.name,
            )

    def add(self, values: dict[str, int], executable: Executable) -> None:
        """Keeps an executable made elsewhere (an artifact's) for `values`."""
        with self._lock:
            key = self.shapes.key(values)
            self._by_values[key] = executable
            self._values[key] = dict(values)

    def specialized(self) -> list[dict[str, int]]:
        """The symbol values of every specialization held, in the order of their values."""
        with self._lock:
            return [self._values[k] for k in sorted(self._values)]

    def executable_for(self, values: dict[str, int]) -> Executable | None:
        return self._by_values.get(self.shapes.key(values))

    def specialize(self, sizes: dict[str, Sequence[int]], where: str) -> list[dict[str, int]]:
        """Compiles the executables of every combination of `sizes` (symbol -> sizes)."""
        unknown = sorted(set(sizes) - set(self.shapes.symbols))
        if unknown:
            raise ValueError(
                f"{where}: {unknown[0]!r} is not a symbol of this program (its symbols: "
                f"{', '.join(self.shapes.symbols)})"
            )
        missing = [s for s in self.shapes.symbols if s not in sizes]
        if missing:
            raise ValueError(
                f"{where}: no sizes for {', '.join(missing)}; give sizes for every symbol: "
                + ", ".join(f"{s}=[...]" for s in self.shapes.symbols)
            )
        lists = []
        for name in self.shapes.symbols:
            given = sizes[name]
            given = [given] if isinstance(given, int | np.integer) else given
            try:
                given = list(given)
            except TypeError:
                raise TypeError(
                    f"{where}: {name}={sizes[name]!r}; give a size or a list of sizes"
                ) from None
            lists.append([_size(where, name, n) for n in given])
        done = []
        for combination in itertools.product(*lists):
            values = dict(zip(self.shapes.symbols, combination, strict=True))
            self.shapes.check_values(values, where)
            self._check_sizes(
                self.shapes.concrete(values)[0], f"{where}: {self.shapes.text(values)}"
            )
            done.append(values)
        # Every combination is checked before the first compiles.
        for values in done:
            self.specialization(values)
        return done

    # -- native dispatch

    def dispatcher(self, name: str, python_call, fastpath=None, unread: tuple = ()):
        """The backend's multi-signature native dispatch in front of `python_call`: each
        argument signature (shapes included) the checked call ran is cached with its
        specialization's fast path, as `jit` caches its executables. (A symbolic program
        has no pruned leaves: `fastpath` and `unread` are never given.)"""

        def run(x64: bool, args: tuple, kwargs: dict):
            out = python_call(*args, **kwargs)
            leaves = tree_util.tree_leaves((args, kwargs))
            executable = self._by_shape.get(tuple(map(leaf_shape, leaves)))
            if executable is None:
                return out, None
            return out, executable.fastpath(out, args, kwargs, x64)

        return self.backend.jit_dispatcher(name, python_call, run)

    # -- views

    def as_text(self) -> str:
        module, lc = self.source.module()
        with lc:
            text = module.operation.get_asm()
        held = "\n".join(f"//   {self.shapes.text(v)}" for v in self.specialized())
        return (
            f"// symbolic program {self.name!r}; executables compiled for:\n"
            f"{held or '//   (none yet)'}\n{pending_note(self.source.pending)}{text}"
        )

    def runtime_executable(self):
        return None

    def serialize(self) -> bytes | None:
        return None


def per_shape_only(where: str, pending: Pending, symbols, lacks: str, remedy: str):
    """The ValueError of asking a pending transform (`pending`) for what only each shape's
    module has (`lacks`); `remedy` says what to do, its `{sizes}` an example size per
    symbol (`b=8`)."""
    sizes = ", ".join(f"{s}=8" for s in symbols)
    return ValueError(
        f"{where}: the program is {pending.text} of another, which aotkit makes per shape as "
        f"it compiles each, so it has no {lacks}; {remedy.format(sizes=sizes)}"
    )


def pending_note(pending: Pending | None) -> str:
    """The comment that says what a pending transform's text is (its source module follows
    it), or "" for a program whose module is its own."""
    if pending is None:
        return ""
    return (
        f"// this program is {pending.text} of the module below, whose\n"
        "// module aotkit makes per shape: that module at those sizes, then transformed\n"
    )


def _size(where: str, name: str, n):
    """A size given to `specialize`: a Python or NumPy integer (not a bool), as an int."""
    if isinstance(n, bool | np.bool_):
        raise ValueError(
            f"{where}: {name} = {n!r} is a bool, not a size; give ints (such as {int(n)})"
        )
    if isinstance(n, np.integer):
        return int(n)
    return n  # anything else is for `SymbolicSignature.check_values` to refuse


def _portable(module: ir.Module) -> bytes:
    return artifacts.module_portable_artifact(module)


# --- a symbolic program made static (`Lowered.specialize`) ------------------------------------


def specialize_program(program: Program, sizes: dict, where: str) -> Program:
    """`program` (with symbolic shapes) refined to one concrete size per symbol (`sizes`):
    a static program, its module the symbolic one refined as a compile for those sizes
    refines it. ValueError for a static program, a symbol missing or unknown, or sizes that
    break a constraint."""
    sig = program.signature
    shapes = SymbolicSignature.of(sig.flat_in_specs, sig.flat_out_specs, where=where)
    if not shapes.symbols:
        raise ValueError(
            f"{where}: the program has static shapes, so it has nothing to specialize; "
            "lower it with symbolic dimensions (aotkit.spec('f32[b,784]')) to specialize it"
        )
    unknown = sorted(set(sizes) - set(shapes.symbols))
    if unknown:
        raise ValueError(
            f"{where}: {unknown[0]!r} is not a symbol of this program (its symbols: "
            f"{', '.join(shapes.symbols)})"
        )
    missing = [s for s in shapes.symbols if s not in sizes]
    if missing:
        raise ValueError(
            f"{where}: no size for {', '.join(missing)}; give one size per symbol: "
            + ", ".join(f"{s}=..." for s in shapes.symbols)
        )
    values = {name: _size(where, name, sizes[name]) for name in shapes.symbols}
    shapes.check_values(values, where)
    if program.pending is not None:
        return program.pending.build(values, f"{where}: {shapes.text(values)}")
    in_specs, _ = shapes.concrete(values)
    refined = refine(program.module, program.lc, in_specs, f"{where}: {shapes.text(values)}")
    with program.lc:
        # The refined copy is an op; the stages hold modules.
        module = ir.Module.parse(_bytecode(refined))
    flat_in, flat_out = modules.signature(module, where)
    signature = sig.replace(flat_in_specs=flat_in, flat_out_specs=flat_out)
    return program.replace(module=module, signature=signature, facts=frozenset())


def _bytecode(op) -> bytes:
    buffer = io.BytesIO()
    op.write_bytecode(buffer)
    return buffer.getvalue()


# --- one executable for every shape -------------------------------------------------------


# Sets of argument shapes a DynamicExecutable remembers as checked (a few hundred bytes
# each); past this many it forgets them all and checks again as they come.
MAX_BOUND_SHAPES = 1 << 14


class DynamicShapesWarning(UserWarning):
    """A symbolic program that a backend with dynamic shapes cannot compile once for every
    shape is compiled per shape instead; the warning says why."""


class DynamicExecutable(SymbolicExecutable):
    """The executable of a symbolic program on a backend with `dynamic_shapes` (iree): the
    program compiled once (`Backend.compile_dynamic`, through the persistent cache) into one
    executable that runs every shape its signature allows.

    A call binds the symbols from the arguments' shapes and checks the constraints exactly
    as `SymbolicExecutable` does (the same errors), then, once per new set of shapes, the
    program's own shape assertions (jax.export's) and the width of its dimension
    arithmetic, from the proof of its shapes (aotkit/symbolic/prover.py); then the one
    executable runs. Nothing is compiled per shape: `specialize` only checks sizes, and
    `specializations` lists none.

    Where the backend cannot compile the program once (`NotDynamic`, or its compiler fails
    on the dynamic form), it is compiled per shape as `SymbolicExecutable` does, with a
    `DynamicShapesWarning` saying why (`per_shape_reason`). `executable` is a dynamic
    executable loaded already (an artifact's); with none and `recompile=False`, only the
    per-shape executables given by `add` run.
    """

    def __init__(
        self,
        backend: Backend,
        name: str,
        shapes: SymbolicSignature,
        source: Source,
        *,
        options=None,
        donated: tuple = (),
        recompile: bool = True,
        where: str | None = None,
        executable: Executable | None = None,
    ):
        super().__init__(
            backend,
            name,
            shapes,
            source,
            options=options,
            donated=donated,
            recompile=recompile,
            where=where,
        )
        self.per_shape_reason: str | None = None
        self._proof: prover.Proof | None = None
        # Argument shapes checked so far -> the symbols' values.
        self._bound: dict[tuple, dict[str, int]] = {}
        self.dynamic = executable
        if executable is None and recompile:
            self.dynamic = self._compile_dynamic()

    def _compile_dynamic(self) -> Executable | None:
        backend, options = self.backend, self.options
        entry = Signature.flat(
            self.name, self.shapes.in_specs, self.shapes.out_specs, donated=self.donated
        )
        # The constraints are in the key: the proof of its shapes assumed them.
        keyed = (
            "dynamic",
            *map(str, self.shapes.in_specs),
            *(f"constraint {c}" for c in self.shapes.constraints),
        )
        cache_key = cache.shape_key(self.source.digest, keyed, backend, options, self.donated)
        executable = None
        if cache_key is not None:
            executable = cache.get(cache_key, entry, backend, options)
        if executable is None:
            module, _ = self.source.module()
            try:
                executable = backend.compile_dynamic(
                    module, options, self.shapes.in_specs, self.shapes.out_specs
                )
            except (NotDynamic, CompileError) as e:
                return self._per_shape(str(e))
            self.compiles += 1
            if cache_key is not None:
                cache.put(cache_key, entry, executable, options, portable=self.source.portable())
        return executable

    def _per_shape(self, reason: str) -> None:
        self.per_shape_reason = reason
        warnings.warn(
            f"{self._where}: backend {self.backend.name!r} cannot compile it once for every "
            f"shape ({reason}); it compiles it for each shape it is called with instead",
            DynamicShapesWarning,
            stacklevel=user_stacklevel(),
        )
        return None

    def _checks(self) -> prover.Proof | None:
        """The proof of the program's shapes, for the per-shape checks (made once)."""
        if self._proof is None:
            module, lc = self.source.module()
            try:
                self._proof = prover.prove(module, lc, self.shapes.in_specs, self.shapes.out_specs)
            except NotDynamic as e:
                # An executable loaded for a program whose shapes do not prove: not run.
                self.dynamic = None
                self._per_shape(str(e))
        return self._proof

    def execute(self, leaves: Sequence) -> list:
        executable = self.dynamic
        if executable is None:
            return super().execute(leaves)
        key = tuple(map(leaf_shape, leaves))
        values = self._bound.get(key)
        if values is None:
            values = self.shapes.bind(leaves, self._leaf_name)
            proof = self._checks()
            if proof is None:
                return super().execute(leaves)
            problem = proof.failure(values)
            if problem is not None:
                raise ValueError(f"{self._where}: for {self.shapes.text(values)}: {problem}")
            if len(self._bound) >= MAX_BOUND_SHAPES:
                self._bound.clear()  # a server that sees every size keeps a bounded table
            self._bound[key] = values
        return executable.execute_bound(leaves, values)

    def specialization(self, values: dict[str, int]) -> Executable:
        if self.dynamic is not None:
            return self.dynamic  # every shape runs it: nothing to compile
        return super().specialization(values)

    def as_text(self) -> str:
        if self.dynamic is None:
            return super().as_text()
        return (
            f"// symbolic program {self.name!r}, compiled once for every shape by backend "
            f"{self.backend.name!r}\n{self.dynamic.as_text()}"
        )

    def runtime_executable(self):
        return None if self.dynamic is None else self.dynamic.runtime_executable()
