"""Trace stage driver: runs a Python function on tracers and returns a verified module.

The module is `module @<name>` with one public `@main` whose arguments are the flat leaves
of the input pytree and whose results are the flat leaves of the output pytree.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
from jax import tree_util
from jaxlib.mlir import ir
from jaxlib.mlir.dialects import func

from aotkit import dtypes, dumps
from aotkit._context import IR_LOCK, context
from aotkit.lowering.core import Tracer, _check_live, constant, pop_scope, push_scope
from aotkit.specs import ShapeDtype


class TraceResult:
    __slots__ = ("module", "out_tree", "flat_out_specs")

    def __init__(self, module, out_tree, flat_out_specs):
        self.module = module
        self.out_tree = out_tree
        self.flat_out_specs = flat_out_specs


def _symbol_name(name: str) -> str:
    cleaned = "".join(c if c.isalnum() or c in "_." else "_" for c in name)
    return cleaned or "fn"


def _output_value(path, leaf) -> Tracer:
    if isinstance(leaf, Tracer):
        if not leaf._scope.open:
            # A tracer leaked from a control-flow body (or an earlier trace) is not
            # visible here; returning it would make an invalid module.
            _check_live(leaf, "return")
        return leaf
    if dtypes.weak_kind(leaf) is not None or isinstance(leaf, np.ndarray | np.generic):
        return constant(leaf)
    raise TypeError(
        f"output {tree_util.keystr(path) or '<root>'}: a {type(leaf).__name__} is not an "
        "array; functions must return arrays, Python scalars, or pytrees (tuples, lists, "
        "dicts, None) of them"
    )


def trace_to_module(
    body: Callable[[list[Tracer]], object],
    name: str,
    flat_in_specs: Sequence[ShapeDtype],
    *,
    arg_attrs: Sequence[dict[str, ir.Attribute]] | None = None,
    dumper: dumps.Dumper | None = None,
) -> TraceResult:
    """Traces `body(flat_tracers)` into a new verified module named `name`.

    A module that fails verification is written to `dumper` (when dumps are on) and the
    error names the file, or says how to turn dumps on.
    """
    with IR_LOCK, context(), ir.Location.unknown():
        module = ir.Module.create()
        module.operation.attributes["sym_name"] = ir.StringAttr.get(_symbol_name(name))
        in_types = [dtypes.tensor_type(s.shape, s.dtype) for s in flat_in_specs]
        with ir.InsertionPoint(module.body):
            main = func.FuncOp("main", ir.FunctionType.get(in_types, []))
        main.attributes["sym_visibility"] = ir.StringAttr.get("public")
        if arg_attrs is not None:
            main.arg_attrs = ir.ArrayAttr.get([ir.DictAttr.get(a) for a in arg_attrs])
        block = main.add_entry_block()
        scope = push_scope(name)
        try:
            with ir.InsertionPoint(block):
                args = [
                    Tracer(block.arguments[i], s.shape, s.dtype, scope)
                    for i, s in enumerate(flat_in_specs)
                ]
                out = body(args)
                leaves_with_paths, out_tree = tree_util.tree_flatten_with_path(out)
                outs = [_output_value(p, leaf) for p, leaf in leaves_with_paths]
                func.ReturnOp([t.value for t in outs])
        finally:
            pop_scope(scope)
        main.attributes["function_type"] = ir.TypeAttr.get(
            ir.FunctionType.get(in_types, [t.value.type for t in outs])
        )
        try:
            module.operation.verify()
        except ir.MLIRError as e:
            # User input is validated before it reaches the bindings: this is an aotkit bug.
            if dumper is not None:
                dumper.write_module("invalid-traced", module)
            raise RuntimeError(
                f"aotkit produced an invalid module for {name!r} (please report this): {e}; "
                f"{dumps.hint(dumper)}"
            ) from e
        specs = tuple(ShapeDtype(t.shape, t.dtype) for t in outs)
        return TraceResult(module, out_tree, specs)
