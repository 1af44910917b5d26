"""complex128 on a TPU: what XLA:TPU aborts the process on, rewritten or refused first.

A TPU has no 64-bit arithmetic; XLA:TPU emulates float64 and complex128 in pairs of 32-bit
values. For a few complex128 ops that emulation has no rule, and libtpu (0.0.42, the one
jax 0.10.2 takes) then ends the whole process with a failed check instead of an error:
- every `stablehlo.convert` to complex128 (from a bool, an integer, a float or complex64) and
  from complex128 to complex64;
- `divide`, `power`, `atan2`, `abs`, `rsqrt`, `exponential_minus_one`, `sine`, `cosine`, `tan`,
  `tanh`, `logistic`, `cholesky` and `triangular_solve` of complex128 values, and CHLO's `tan`,
  `broadcast_divide` and `broadcast_power` (a module read with pipeline "none" keeps them).
(Found by compiling each complex128 op alone for a deviceless v5e, each in a process of its
own; `add`, `subtract`, `multiply`, `negate`, `exponential`, `log`, `log_plus_one`, `sqrt`,
`real`, `imag`, `complex`, `compare`, `dot_general`, `select`, reductions, converts from
complex128 to real types and the data-movement ops compile.)

NumPy's rules make complex128 of ordinary code: an int32 array times a Python complex is
complex128. So before a module reaches XLA:TPU (a chip, or a deviceless topology), `legalize`
rewrites each such convert into ops the emulation has, with the same values
(`complex(convert(x) to float64, 0)`, or the parts converted one by one), and refuses the other
ops with an `UnsupportedModuleError` that names the op and where it is, instead of an abort.
"""

from __future__ import annotations

from jaxlib.mlir import ir

from aotkit import _context, modules
from aotkit.errors import UnsupportedModuleError

# The complex128 ops XLA:TPU aborts on (besides the converts, which `legalize` rewrites).
ABORTS = frozenset(
    f"stablehlo.{name}"
    for name in (
        "divide",
        "power",
        "atan2",
        "abs",
        "rsqrt",
        "exponential_minus_one",
        "sine",
        "cosine",
        "tan",
        "tanh",
        "logistic",
        "cholesky",
        "triangular_solve",
    )
) | {"chlo.tan", "chlo.broadcast_divide", "chlo.broadcast_power"}


def _element(value_type: ir.Type) -> ir.Type | None:
    return value_type.element_type if isinstance(value_type, ir.RankedTensorType) else None


def _is_complex(element: ir.Type | None, bits: int) -> bool:
    return isinstance(element, ir.ComplexType) and _width(element.element_type) == bits // 2


def _width(element: ir.Type) -> int | None:
    return element.width if isinstance(element, ir.FloatType) else None


def _uses_complex128(op: ir.Operation) -> bool:
    types = [v.type for v in op.operands] + [r.type for r in op.results]
    return any(_is_complex(_element(t), 128) for t in types)


def legalize(module: ir.Module, where: str) -> ir.Module:
    """`module`, or a rewritten copy of it (in the same context), that XLA:TPU compiles
    without aborting: the converts it aborts on rewritten, and an UnsupportedModuleError for
    the ops it aborts on."""
    with _context.of(module):
        refused: list[ir.Operation] = []
        converts = _find(module.operation, refused)
        if refused:
            op = refused[0]
            raise UnsupportedModuleError(
                f"{where}: module {modules.module_name(module)!r} applies {op.name} to "
                f"complex128 values{modules.op_location(op)}, which XLA:TPU cannot compile "
                "(its float64 emulation has no rule for it, and it would abort the process); "
                "compute it in complex64, or compile for 'cpu'",
                op=op.name,
                location=modules.op_location(op).strip(),
            )
        if not converts:
            return module
        copy = ir.Module.parse(modules.bytecode(module))  # the caller's module stays as it was
        for op in _find(copy.operation, []):
            _rewrite(op, where, modules.module_name(module))
        return copy


def first_abort(module: ir.Module) -> str | None:
    """What in `module` as it is XLA:TPU would end the process on (the op and where it is),
    or None: the check of a module a TPU may be given without `legalize` (a cpu artifact's
    portable module, which the native runner compiles on whatever plugin it is given)."""
    with _context.of(module):
        refused: list[ir.Operation] = []
        converts = _find(module.operation, refused)
        found = refused or converts
        if not found:
            return None
        op = found[0]
        return f"{op.name} of complex128 values{modules.op_location(op)}"


def _find(root: ir.Operation, refused: list) -> list[ir.Operation]:
    """The converts under `root` that need rewriting; the first op XLA:TPU aborts on is
    appended to `refused` (and the walk stops there)."""
    converts: list[ir.Operation] = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        if op.name == "stablehlo.convert" and _needs_rewrite(op):
            converts.append(op)
        elif op.name in ABORTS and _uses_complex128(op):
            refused.append(op)
            return ir.WalkResult.INTERRUPT
        return ir.WalkResult.ADVANCE

    root.walk(visit)
    return converts


def _needs_rewrite(op: ir.Operation) -> bool:
    source, target = _element(op.operands[0].type), _element(op.results[0].type)
    return _is_complex(target, 128) or (_is_complex(source, 128) and _is_complex(target, 64))


def _rewrite(op: ir.Operation, where: str, name: str) -> None:
    """Replaces a convert to complex128 (or complex128 to complex64) by converts of its real
    and imaginary parts and a `stablehlo.complex`."""
    x = op.operands[0]
    result_type = op.results[0].type
    if not result_type.has_static_shape:
        raise UnsupportedModuleError(
            f"{where}: module {name!r} converts to complex128 with the dynamic shape "
            f"{result_type}{modules.op_location(op)}, which XLA:TPU cannot compile; give the "
            "program static shapes (specialize it) first",
            op=op.name,
            location=modules.op_location(op).strip(),
        )
    shape = result_type.shape
    part = result_type.element_type.element_type
    loc = op.location
    part_type = ir.RankedTensorType.get(shape, part, loc=loc)
    source = _element(x.type)
    with loc, ir.InsertionPoint(op):
        if isinstance(source, ir.ComplexType):
            source_part = ir.RankedTensorType.get(shape, source.element_type, loc=loc)
            parts = [_create(kind, source_part, [x], loc) for kind in ("real", "imag")]
            re, im = (_convert(p, part_type, loc) for p in parts)
        else:
            re = _convert(x, part_type, loc)
            zero = ir.DenseElementsAttr.get_splat(part_type, ir.FloatAttr.get(part, 0.0))
            im = ir.Operation.create(
                "stablehlo.constant", results=[part_type], attributes={"value": zero}, loc=loc
            ).result
        out = _create("complex", result_type, [re, im], loc)
    op.results[0].replace_all_uses_with(out)
    op.erase()


def _create(kind: str, result_type: ir.Type, operands: list, loc) -> ir.Value:
    op = ir.Operation.create(f"stablehlo.{kind}", results=[result_type], operands=operands, loc=loc)
    return op.result


def _convert(x: ir.Value, to: ir.Type, loc) -> ir.Value:
    return x if x.type == to else _create("convert", to, [x], loc)
