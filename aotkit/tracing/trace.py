"""The tracer front end: runs a Python function on tracers and returns its `Program`.

The module is `module @<name>` with one public `@main` whose arguments are the flat leaves
of the input pytree (static arguments removed) and whose results are the flat leaves of the
output pytree. It is built in a lowering context (`aotkit._context`) and verified; the
pipeline, donation and dumps are the stages' business (`aotkit.api`, `Traced.lower`).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence

import numpy as np
from jax import tree_util
from jaxlib.mlir import ir

from aotkit import _context, arguments, dtypes, modules, spmd
from aotkit.errors import InPlaceWriteWarning, InvalidModuleError
from aotkit.passes.runner import (
    CANONICAL,
    NO_CHLO,
    NO_DUPLICATES,
    NOTHING_TO_SIMPLIFY,
    TRACER_FACTS,
)
from aotkit.program import DEFAULT_OPTIONS, Options, Program, Signature
from aotkit.specs import ShapeDtype, unify_scopes
from aotkit.tracing import keys
from aotkit.tracing.core import (
    Emitted,
    Tracer,
    _check_live,
    constant,
    pop_scope,
    push_scope,
)
from aotkit.tracing.indexing import MaskedSelection
from aotkit.tracing.symbolic import start as start_symbolic


def _static(specs) -> bool:
    """Whether every dimension of `specs` is an int (the common case, checked in a few µs
    where the symbolic machinery's walk of the specs costs ~2.5 µs per spec)."""
    return all(type(d) is int for s in specs for d in s.shape)


def output_value(path, leaf) -> Tracer:
    """The tracer of one output leaf (a Python scalar or NumPy array becomes a constant);
    TypeError naming the leaf for anything that is not an array."""
    if isinstance(leaf, Tracer):
        if not leaf._scope.open:
            # A tracer leaked from a control-flow body (or an earlier trace) is not
            # visible here; returning it would make an invalid module.
            _check_live(leaf, "return")
        return leaf
    if dtypes.weak_kind(leaf) is not None or isinstance(leaf, np.ndarray | np.generic):
        return constant(leaf)
    if isinstance(leaf, MaskedSelection):
        raise leaf.refusal(f"output {tree_util.keystr(path) or '<root>'}")
    raise TypeError(
        f"output {tree_util.keystr(path) or '<root>'}: a {type(leaf).__name__} is not an "
        "array; functions must return arrays, Python scalars, or pytrees (tuples, lists, "
        "dicts, None) of them"
    )


def _warn_unreturned_writes(name, scope, args, outs, arg_names) -> None:
    """Warns about each argument written in place but not returned (its write is lost)."""
    returned = {id(t) for t in outs}
    for i, arg in enumerate(args):
        site = scope.written.get(id(arg))
        if site is None or id(arg) in returned:
            continue
        what = arg_names()[i] if arg_names is not None else f"argument {i}"
        filename, _, line = site.rpartition(":")
        warnings.warn_explicit(
            f"{name}: argument {what} is written in place at {site} but not returned; "
            "aotkit's arrays are values, so the caller's array does not change (NumPy's "
            "would): return it to keep the write",
            InPlaceWriteWarning,
            filename or "<unknown>",
            int(line) if line.isdigit() else 0,
        )


def trace(
    fn: Callable,
    args: tuple,
    kwargs: dict,
    options: Options = DEFAULT_OPTIONS,
    lc: _context.LoweringContext | None = None,
) -> Program:
    """Traces `fn` on `args`/`kwargs` (values or `ShapeDtype` specs) into a `Program`, with
    the static and donated arguments and the shardings of `options`, in the lowering
    context `lc` (default: one `_context.for_lowering` picks; a transform of a program
    traces in that program's context, whose types and attributes it reuses).

    Python scalars among the arguments become weakly typed 0-d arguments
    (`dtypes.scalar_argument_dtype`); static arguments are passed to `fn` as they are.
    With `in_shardings`/`out_shardings` (see `aotkit.jit`), or an `aotkit.sharding.constrain`
    inside `fn`, the module is annotated for its mesh (aotkit/spmd.py).
    """
    name = arguments.function_name(fn)
    where = f"trace({name})"
    donate_argnums = options.donate_argnums
    in_shardings, out_shardings = options.in_shardings, options.out_shardings
    dyn_args, dyn_kwargs, static_pos, static_kw = arguments.split_static(
        where, args, kwargs, options.static_argnums, options.static_argnames
    )
    leaves, in_tree = tree_util.tree_flatten((dyn_args, dyn_kwargs))
    specs = arguments.specs_of_leaves(
        name,
        (dyn_args, dyn_kwargs),
        leaves,
        names=lambda: arguments.parameter_names(fn, len(args), static_pos),
    )
    static = _static(specs)
    if not static:
        specs = unify_scopes(specs)  # symbolic dimensions: one scope (issue 25)
    weak = [dtypes.weak_kind(leaf) is not None for leaf in leaves]
    donated = ()
    if donate_argnums:
        donated = arguments.donated_leaves(where, in_tree, args, set(static_pos), donate_argnums)

    in_keys = arguments.key_leaves(leaves)
    out_keys = ()

    def body(flat_tracers):
        nonlocal out_keys
        flat_tracers = keys.wrap(flat_tracers, in_keys)
        t_args, t_kwargs = tree_util.tree_unflatten(in_tree, flat_tracers)
        full_args, full_kwargs = arguments.merge_static(t_args, t_kwargs, static_pos, static_kw)
        out, out_keys = keys.unwrap(fn(*full_args, **full_kwargs))
        return out

    mesh = flat_in = None
    if in_shardings is not None or out_shardings is not None:
        mesh = spmd.find_mesh(where, in_shardings, out_shardings)
        names = arguments.parameter_names(fn, len(args), static_pos)
        flat_in = spmd.flat_in_shardings(where, in_shardings, in_tree, specs, mesh, names)
        if mesh is None:
            spmd.refuse_bare_specs(where, "out_shardings", out_shardings)
    partitioning = None

    def annotate(module, out_tree, out_specs):
        # A mesh came with the shardings or with a constraint: the module is partitioned.
        nonlocal partitioning
        if layout.mesh is None:
            return
        flat_out = spmd.flat_shardings(
            where,
            "out_shardings",
            out_shardings,
            out_tree,
            out_specs,
            layout.mesh,
            spmd.result_labels(out_tree),
            default_replicated=False,
        )
        ins = spmd.replicate_missing(flat_in or (None,) * len(specs), layout.mesh)
        partitioning = spmd.Partitioning(layout.mesh, layout.mesh.size, ins, flat_out)
        spmd.annotate(module, partitioning, specs, out_specs)

    def paths() -> list[str]:  # only a warning needs them
        flat = tree_util.tree_flatten_with_path((dyn_args, dyn_kwargs))[0]
        return [arguments.arg_path(p) for p, _ in flat]

    if lc is None:
        lc = _context.for_lowering()
    with spmd.tracing(mesh, where) as layout:
        module, out_tree, out_specs, facts = trace_to_module(
            lc, body, name, specs, weak=weak, arg_names=paths, finish=annotate, static=static
        )
    signature = Signature(
        name, in_tree, out_tree, specs, out_specs, donated, partitioning, in_keys, out_keys
    )
    return Program(module, lc, signature, "aotkit", facts)


def trace_to_module(
    lc: _context.LoweringContext,
    body: Callable[[list[Tracer]], object],
    name: str,
    flat_in_specs: Sequence[ShapeDtype],
    *,
    weak: Sequence[bool] | None = None,
    arg_names: Callable[[], Sequence[str]] | None = None,
    finish: Callable | None = None,
    static: bool | None = None,
) -> tuple[ir.Module, object, tuple[ShapeDtype, ...], frozenset[str]]:
    """Traces `body(flat_tracers)` into a new verified module named `name` in `lc`.

    Returns (module, output tree, flat output specs, what the pass runner may know of the
    module: `aotkit.passes` facts). `finish(module, out_tree, out_specs)`
    runs before verification (the sharding annotations); `arg_names()` names the arguments
    in the warning about writes that are not returned; `static`, when known, says whether
    every dimension of the specs is an int. A module that fails verification is an aotkit
    bug: `InvalidModuleError` carries it, so the stages can dump it.
    """
    weak = weak or (False,) * len(flat_in_specs)
    with lc, ir.Location.unknown():
        module = ir.Module.create()
        module.operation.attributes["sym_name"] = ir.StringAttr.get(modules.symbol_name(name))
        # (`dtypes.tensor_type`, its cache read inline: a model has many arguments alike)
        known = lc.tensor_types
        in_types = [
            known.get((s.shape, s.dtype)) or dtypes.tensor_type(s.shape, s.dtype)
            for s in flat_in_specs
        ]
        # `@main` and its return are made as generic ops (`func.FuncOp` and `ReturnOp` add
        # layers of Python), its type completed once the results are known (it has one from
        # the start: printing a function without one would end the process). The entry
        # block takes the types at hand (`add_entry_block` reads them back from the function
        # type, one binding object per argument).
        main = ir.Operation.create(
            "func.func",
            attributes={
                "sym_name": ir.StringAttr.get("main"),
                "function_type": ir.TypeAttr.get(ir.FunctionType.get(in_types, [])),
                "sym_visibility": ir.StringAttr.get("public"),
            },
            regions=1,
            ip=ir.InsertionPoint(module.body),
        )
        block = main.regions[0].blocks.append(*in_types)
        emitted = Emitted()
        scope = push_scope(name, emitted)
        try:
            with ir.InsertionPoint(block):
                # Symbolic dimensions (issue 25): their values, read from the arguments.
                if not (_static(flat_in_specs) if static is None else static):
                    start_symbolic(emitted, block.arguments, flat_in_specs, f"trace({name})")
                first = len(emitted.used)  # each argument's `Tracer.seq`, from here
                emitted.used.extend(bytes(len(flat_in_specs)))
                emitted.arguments = len(flat_in_specs)
                args = [
                    Tracer(a, s.shape, s.dtype, scope, w, first + i)
                    for i, (a, s, w) in enumerate(
                        zip(block.arguments, flat_in_specs, weak, strict=True)
                    )
                ]
                out = body(args)
                leaves_with_paths, out_tree = tree_util.tree_flatten_with_path(out)
                outs = [output_value(p, leaf) for p, leaf in leaves_with_paths]
                ir.Operation.create("func.return", operands=[t.value for t in outs])
            if scope.written:
                _warn_unreturned_writes(name, scope, args, outs, arg_names)
        finally:
            pop_scope(scope)
            emitted.erase_scratch()
        main.attributes["function_type"] = ir.TypeAttr.get(
            ir.FunctionType.get(in_types, [t.value.type for t in outs])
        )
        specs = tuple(ShapeDtype(t.shape, t.dtype) for t in outs)
        if finish is not None:
            finish(module, out_tree, specs)
        try:
            module.operation.verify()
        except ir.MLIRError as e:
            raise InvalidModuleError(
                f"aotkit produced an invalid module for {name!r} (please report this): {e}",
                module=module,
                stage="invalid-traced",
            ) from e
        facts = TRACER_FACTS if emitted.chlo else TRACER_FACTS | {NO_CHLO}
        if not emitted.simplify and (emitted.vouched(block) or not emitted.unchecked):
            facts |= {NOTHING_TO_SIMPLIFY}
        if emitted.vouched(block):
            if emitted.no_dead_op(args, outs, scope):
                if not emitted.duplicates:
                    facts |= {NO_DUPLICATES}
                if not (emitted.late_constant or emitted.equal_constants):
                    facts |= {CANONICAL}
        emitted.forget_values()
        return module, out_tree, specs, facts
