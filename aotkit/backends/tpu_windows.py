"""select_and_scatter on a TPU: the windows XLA:TPU has no kernel for, rewritten first.

XLA:TPU compiles `stablehlo.select_and_scatter` only where at least two dimensions are
inactive (window 1, stride 1, no padding), which it lays out as the two minor-most ones, and
only of 32-bit values. Any other window is refused at compile time ("Select and Scatter with
less than 2 inactive dims is not implemented on TPU", "... a window bound or window stride in
one of the two minor-most dimensions that are not 1 ..."), and so is every float64 one (its
64-bit emulation has no rule for the op). Reverse mode writes one for every window max or min: the
gradient of a cumulative max, of pooling over a matrix, of a max with explicit padding. JAX's
gradient of such a window fails on a TPU the same way (its cummax has a rule of its own).

So before a module reaches XLA:TPU (a chip, or a deviceless topology), `legalize` rewrites
each select_and_scatter of 64-bit values or with fewer than two inactive dimensions into ops
XLA:TPU has, with the values the op is defined to give:
- the flat index of each operand element (an iota), and a reduce_window over (value, index)
  pairs that keeps, per window, the element the select region chooses. Of equal values it keeps
  the first in the window for GE and LE (the select keeps the element it holds) and the last
  for GT and LT (it moves on to the new one), as a select_and_scatter does. Values compare as
  the select region compares them; where that is not a total order (FLOAT), NaN comes before
  every number (the element a window max or min propagates), so the selection does not depend
  on the order the reduction takes;
- a scatter of the source into the broadcast init value at those indices, combined by the
  op's own scatter region. A window that holds only padding selects no element, and its source
  element is dropped.

The rest are left to XLA:TPU's own kernel. Modules with dynamic shapes are left as they are.
"""

from __future__ import annotations

import numpy as np
from jaxlib.mlir import ir
from jaxlib.mlir.dialects import stablehlo

from aotkit import _context, dtypes, modules

_GREATER = ("GE", "GT")


def legalize(module: ir.Module) -> ir.Module:
    """`module`, or a rewritten copy of it (in the same context) with each select_and_scatter
    XLA:TPU has no kernel for written as a reduce_window and a scatter."""
    with _context.of(module):
        if not _find(module.operation):
            return module
        copy = ir.Module.parse(modules.bytecode(module))  # the caller's module stays as it was
        for op in _find(copy.operation):
            _rewrite(op)
        return copy


def _find(root: ir.Operation) -> list[ir.Operation]:
    found: list[ir.Operation] = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        if op.name == "stablehlo.select_and_scatter" and _needs_rewrite(op):
            found.append(op)
        return ir.WalkResult.ADVANCE

    root.walk(visit)
    return found


def _ints(op: ir.Operation, name: str, default: list[int]) -> list[int]:
    if name not in op.attributes:
        return default
    return [int(v) for v in np.asarray(op.attributes[name]).reshape(-1)]


def _window(op: ir.Operation):
    rank = ir.RankedTensorType(op.operands[0].type).rank
    dims = _ints(op, "window_dimensions", [1] * rank)
    strides = _ints(op, "window_strides", [1] * rank)
    flat = _ints(op, "padding", [0] * (2 * rank))
    padding = [(flat[2 * i], flat[2 * i + 1]) for i in range(rank)]
    return dims, strides, padding


def _needs_rewrite(op: ir.Operation) -> bool:
    if any(not ir.RankedTensorType(v.type).has_static_shape for v in op.operands):
        return False
    if modules.select_direction(op) is None:
        return False  # a select region other than one comparison: XLA:TPU says what it lacks
    if any(_bits(v.type) == 64 for v in (*op.operands[:2], op.results[0])):
        return True  # XLA:TPU's 64-bit emulation has no rule for select_and_scatter at all
    dims, strides, padding = _window(op)
    inactive = sum(
        d == 1 and s == 1 and p == (0, 0) for d, s, p in zip(dims, strides, padding, strict=True)
    )
    return inactive < 2


def _bits(t: ir.Type) -> int | None:
    element = ir.RankedTensorType(t).element_type
    return element.width if isinstance(element, ir.FloatType | ir.IntegerType) else None


def _constant(value, element: ir.Type) -> ir.Value:
    t = ir.RankedTensorType.get([], element)
    attr = ir.DenseElementsAttr.get(np.asarray(value, dtypes.dtype_of_ir_type(element)), type=t)
    return _create("constant", t, [], {"value": attr})


def _create(kind: str, result: ir.Type | list, operands: list, attributes=None, regions=0):
    op = ir.Operation.create(
        f"stablehlo.{kind}",
        results=result if isinstance(result, list) else [result],
        operands=operands,
        attributes=attributes or {},
        regions=regions,
    )
    return op if regions or isinstance(result, list) else op.result


def _compare(a: ir.Value, b: ir.Value, direction: str, compare_type=None) -> ir.Value:
    i1 = ir.RankedTensorType.get([], ir.IntegerType.get_signless(1))
    attributes = {"comparison_direction": stablehlo.ComparisonDirectionAttr.get(direction)}
    if compare_type is not None:
        attributes["compare_type"] = compare_type
    return _create("compare", i1, [a, b], attributes)


def _selection_body(block: ir.Block, direction: str, select: ir.Operation) -> None:
    """`((v, i), (w, j)) -> the pair the select chooses`, a total order on pairs: by value
    (compared as the select compares them; NaN first where that is not a total order), then
    by index (the first for GE and LE, the last for GT and LT)."""
    v, i, w, j = block.arguments
    total = _compare_type(select)
    is_float = isinstance(ir.RankedTensorType(v.type).element_type, ir.FloatType)
    with ir.InsertionPoint(block):
        better = _compare(v, w, "GT" if direction in _GREATER else "LT", total)
        tie = _compare(v, w, "EQ", total)
        if is_float and (total is None or "TOTALORDER" not in str(total)):
            v_nan, w_nan = _compare(v, v, "NE"), _compare(w, w, "NE")
            both = _create("and", v_nan.type, [v_nan, w_nan])
            only_v = _create("and", v_nan.type, [v_nan, _create("not", w_nan.type, [w_nan])])
            better = _create("or", better.type, [better, only_v])
            tie = _create("or", tie.type, [tie, both])
        earlier = _compare(i, j, "LT" if direction in ("GE", "LE") else "GT")
        keep = _create("or", better.type, [better, _create("and", tie.type, [tie, earlier])])
        chosen = [_create("select", x.type, [keep, x, y]) for x, y in ((v, w), (i, j))]
        _create("return", [], chosen)


def _compare_type(select: ir.Operation):
    """The select region's compare's `compare_type` attribute, or None."""
    cmp = list(select.regions[0].blocks[0].operations)[0].operation
    return cmp.attributes["compare_type"] if "compare_type" in cmp.attributes else None


def _rewrite(op: ir.Operation) -> None:
    operand, source, init = op.operands
    operand_type = ir.RankedTensorType(operand.type)
    source_type = ir.RankedTensorType(source.type)
    element = operand_type.element_type
    direction = modules.select_direction(op)
    dims, strides, padding = _window(op)
    size = int(np.prod(operand_type.shape, dtype=np.int64))
    index = ir.IntegerType.get_signless(32 if size < 2**31 - 1 else 64)
    info = np.iinfo(np.int32 if index.width == 32 else np.int64)
    # The init pair loses every tie to an element: its index comes after every element's
    # for GE and LE, and before for GT and LT (an index out of range: the scatter drops it).
    sentinel = info.max if direction in ("GE", "LE") else -1
    dtype = dtypes.dtype_of_ir_type(element)
    identity = (dtypes.lowest if direction in _GREATER else dtypes.highest)(dtype)
    with op.location, ir.InsertionPoint(op):
        flat_type = ir.RankedTensorType.get([size], index)
        flat = _create(
            "iota",
            flat_type,
            [],
            {"iota_dimension": ir.IntegerAttr.get(ir.IntegerType.get_signless(64), 0)},
        )
        indices = _create("reshape", ir.RankedTensorType.get(operand_type.shape, index), [flat])
        window = {
            "window_dimensions": ir.DenseI64ArrayAttr.get(dims),
            "window_strides": ir.DenseI64ArrayAttr.get(strides),
            "padding": ir.DenseIntElementsAttr.get(
                np.asarray(padding, np.int64).reshape(len(dims), 2),
                type=ir.RankedTensorType.get([len(dims), 2], ir.IntegerType.get_signless(64)),
            ),
        }
        pairs = _create(
            "reduce_window",
            [
                ir.RankedTensorType.get(source_type.shape, element),
                ir.RankedTensorType.get(source_type.shape, index),
            ],
            [operand, indices, _constant(identity, element), _constant(sentinel, index)],
            window,
            regions=1,
        )
        scalars = [ir.RankedTensorType.get([], t) for t in (element, index)]
        _selection_body(pairs.regions[0].blocks.append(*scalars, *scalars), direction, op)
        chosen = pairs.results[1]
        flat_out = ir.RankedTensorType.get([size], source_type.element_type)
        start = _create(
            "broadcast_in_dim",
            flat_out,
            [init],
            {"broadcast_dimensions": ir.DenseI64ArrayAttr.get([])},
        )
        numbers = ir.Attribute.parse(
            "#stablehlo.scatter<inserted_window_dims = [0], scatter_dims_to_operand_dims = [0], "
            f"index_vector_dim = {source_type.rank}>"
        )
        scatter = _create(
            "scatter",
            [flat_out],
            [start, chosen, source],
            {"scatter_dimension_numbers": numbers},
            regions=1,
        )
        op.regions[1].blocks[0].append_to(scatter.regions[0])  # the op's own combiner
        out = _create("reshape", op.results[0].type, [scatter.result])
    op.results[0].replace_all_uses_with(out)
    op.erase()
