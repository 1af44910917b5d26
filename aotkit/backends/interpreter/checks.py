"""What may reach jaxlib 0.10.2's reference interpreter: checks on the interpreter's own copy.

In that jaxlib an op, element type or shape the interpreter does not carry ends the process
(LLVM ERROR / SIGABRT) inside `stablehlo.eval_module` instead of raising, so everything is
checked here, in Python, first. Only what `@main` can run counts: functions it never calls
(through `func.call` or a `stablehlo.composite` decomposition) are dropped from the copy,
so an op or element type in them is no reason to refuse. Recursion is refused, because the
interpreter recurses on the C stack without a limit.

An op the interpreter cannot run is an `aotkit.CompileError` naming the op and its location;
an element type outside aotkit's dtypes is a `TypeError`. Every function here expects the
caller to be inside `with lc:` for the copy's context.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
from jaxlib.mlir import ir

from aotkit import dtypes, modules
from aotkit.errors import CompileError
from aotkit.modules import op_location as location

# Ops the interpreter evaluates correctly for static shapes (or after the rewrites in
# `rewrites.py`). Everything else (custom_call, rng, rng_bit_generator, cholesky, fft,
# collectives, infeed/outfeed, tokens, real_dynamic_slice, set_dimension_size, ...) aborts
# the process inside eval_module, so it is refused before the call. The shape operands of
# dynamic_iota, dynamic_broadcast_in_dim and dynamic_reshape are ignored by the interpreter
# and by XLA alike (both build the static result type), so those run as they are.
SUPPORTED_OPS = frozenset(
    ["builtin.module", "func.func", "func.return", "func.call"]
    + [
        "stablehlo." + name
        for name in """
        abs add and atan2 bitcast_convert broadcast_in_dim case cbrt ceil clamp compare
        complex composite concatenate constant convert convolution cosine
        count_leading_zeros divide dot_general dynamic_broadcast_in_dim dynamic_iota
        dynamic_reshape dynamic_slice dynamic_update_slice exponential
        exponential_minus_one floor gather get_dimension_size get_tuple_element if imag
        iota is_finite log log_plus_one logistic map maximum minimum multiply negate not
        optimization_barrier or pad popcnt power real reduce reduce_precision
        reduce_window remainder reshape return reverse round_nearest_afz
        round_nearest_even rsqrt scatter select select_and_scatter shift_left
        shift_right_arithmetic shift_right_logical sign sine slice sort sqrt subtract
        tan tanh transpose triangular_solve tuple while xor
        """.split()
    ]
)
# Ops that `rewrites.py` turns into their static forms when their shape operands are
# constants (and refuses otherwise): the interpreter would read those operands at run time
# and abort, or return garbage, on values that disagree with the static result type.
REWRITTEN_OPS = frozenset(
    ["stablehlo.dynamic_pad", "stablehlo.dynamic_gather", "stablehlo.dynamic_conv"]
    # Ops of newer StableHLO (jaxlib 0.12.1) the interpreter does not know: `rewrites.py`
    # computes them with ops it does.
    + ["stablehlo.exp2", "stablehlo.log2", "stablehlo.fma"]
)


def refused(name: str, what: str, fix: str = "use backend='cpu'") -> CompileError:
    """The CompileError for a module the interpreter backend will not evaluate."""
    return CompileError(
        f"backend 'interpreter' rejected module {name!r}: {what}; {fix}",
        backend="interpreter",
        module_name=name,
    )


def walk(op: ir.Operation) -> Iterator[ir.Operation]:
    """`op` and every op nested in its regions, outer before inner."""
    yield op
    for region in op.regions:
        for block in region.blocks:
            for inner in block.operations:
                yield from walk(inner.operation)


def _callees(op: ir.Operation) -> list[str]:
    if op.name == "func.call":
        return [ir.FlatSymbolRefAttr(op.attributes["callee"]).value]
    if op.name == "stablehlo.composite":
        return [ir.FlatSymbolRefAttr(op.attributes["decomposition"]).value]
    return []


def reachable(module: ir.Module, name: str) -> list[ir.Operation]:
    """The functions `@main` runs, `@main` first; erases every other function from `module`.

    Raises CompileError for a recursive call graph.
    """
    functions = modules.functions(module)
    order: list[str] = []
    path: list[str] = []

    def visit(symbol: str) -> None:
        if symbol in path:
            cycle = " -> ".join(f"@{s}" for s in path[path.index(symbol) :] + [symbol])
            raise refused(
                name,
                f"function @{symbol} is recursive ({cycle}); the reference interpreter "
                "recurses without a depth limit and would overflow the process's stack",
                "write the recursion as a loop (stablehlo.while, aotkit.while_loop)",
            )
        if symbol in order:
            return
        fn = functions.get(symbol)
        if fn is None or not fn.regions[0].blocks:
            raise refused(
                name,
                f"@main reaches function @{symbol}, which has no body in the module",
                "define it in the module (or inline it) before compiling",
            )
        path.append(symbol)
        for op in walk(fn.operation):
            for callee in _callees(op):
                visit(callee)
        path.pop()
        order.append(symbol)

    visit("main")
    for symbol, fn in functions.items():
        if symbol not in order:
            fn.operation.erase()
    return [functions[s].operation for s in reversed(order)]


def check_carried(functions: list[ir.Operation], name: str, where: str) -> None:
    """Refuses ops, element types and shapes the interpreter would abort on."""
    for fn in functions:
        for op in walk(fn):
            op_name = op.name
            if op_name not in SUPPORTED_OPS and op_name not in REWRITTEN_OPS:
                raise refused(
                    name,
                    f"the reference interpreter cannot run op {op_name}"
                    f"{_custom_call_origin(op)}{location(op)}",
                )
            for result in op.results:
                _check_type(result.type, op, name, where)
            for region in op.regions:
                for block in region.blocks:
                    for arg in block.arguments:
                        _check_type(arg.type, op, name, where)


def _custom_call_origin(op: ir.Operation) -> str:
    """` @target`, and the function that emitted it when aotkit marked one, for a custom call."""
    if op.name != "stablehlo.custom_call":
        return ""
    target = ir.StringAttr(op.attributes["call_target_name"]).value
    if "aotkit.function" not in op.attributes:
        return f" @{target}"
    fn = ir.StringAttr(op.attributes["aotkit.function"]).value
    return f" @{target} (emitted by aotkit.numpy.{fn}, which needs LAPACK)"


_CARRIED: dict[str, np.dtype] = {}
# The element types the interpreter carries: every aotkit dtype (bfloat16 and the float8/int4
# types return widened to a type the bindings convert, see _widen_results), but for the
# element types it computes wrong values for (measured on every value against XLA and
# ml_dtypes): in every op (None), or in the ops named.
_CARRIES = dtypes.SUPPORTED
_WRONG_VALUES: dict[str, tuple[frozenset[str] | None, str]] = {
    "f8E8M0FNU": (
        None,
        "computes wrong values for (negate, subtract, floor give numbers where XLA gives NaN)",
    ),
    "f4E2M1FN": (
        frozenset(
            f"stablehlo.{r}" for r in ("convert", "divide", "log", "log_plus_one", "power", "rsqrt")
        ),
        "turns to 0 where the value overflows to infinity (XLA and ml_dtypes saturate to +-6)",
    ),
    "f8E3M4": (
        frozenset(
            f"stablehlo.{r}" for r in ("floor", "ceil", "round_nearest_even", "round_nearest_afz")
        ),
        "rounds to NaN (floor(0.5) gives NaN)",
    ),
}


def _check_type(t: ir.Type, op: ir.Operation, name: str, where: str) -> None:
    if isinstance(t, ir.TupleType):
        for i in range(t.num_types):
            _check_type(t.get_type(i), op, name, where)
        return
    if not isinstance(t, ir.RankedTensorType):
        raise TypeError(
            f"{where}: op {op.name}{location(op)} has a value of type {t}, which the "
            "reference interpreter does not carry; use backend='cpu'"
        )
    if not t.has_static_shape:
        raise refused(
            name,
            f"op {op.name}{location(op)} has a value of dynamic shape {t}, which the "
            "reference interpreter cannot evaluate",
            "refine its shapes first (aotkit opt FILE --pipeline default) or use backend='cpu'",
        )
    element = t.element_type
    key = str(element)
    wrong = _WRONG_VALUES.get(key)
    if wrong is not None and (wrong[0] is None or op.name in wrong[0]):
        raise refused(
            name,
            f"op {op.name}{location(op)} uses element type {key}, which the reference "
            f"interpreter {wrong[1]}",
        )
    if key in _CARRIED:
        return
    try:
        dtype = dtypes.dtype_of_ir_type(element)
    except TypeError:
        dtype = None
    if dtype not in _CARRIES:
        raise TypeError(
            f"{where}: op {op.name}{location(op)} uses element type {key}, which the "
            f"interpreter backend does not carry (it carries {', '.join(dtypes.ALL_NAMES)}); "
            "use backend='cpu'"
        )
    _CARRIED[key] = dtype
