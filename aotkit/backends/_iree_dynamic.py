"""A symbolic program in the forms IREE 3.13 compiles for every shape at once (iree backend only).

IREE compiles `?` dimensions natively, but its StableHLO input has no dynamic form of some
ops, and refuses them ("failed to legalize operation"):

- `dynamic_broadcast_in_dim` of a dynamic dimension: IREE must know whether it expands (is
  1 and broadcast) or not, which its types do not say. The proof (aotkit/backends/
  dynamic.py) decides it over the symbols; the op gets `known_nonexpanding_dimensions`.
- `dynamic_reshape`: IREE 3.13 lowers none. A reshape whose element count is proven equal
  becomes `tensor.collapse_shape` and `tensor.expand_shape` over groups of dimensions whose
  products are proven equal (its output sizes from its own shape operand), or
  `stablehlo.reshape` where both shapes are static.
- `dot_general` without batch dimensions whose operands IREE would flatten to a matrix
  through a `dynamic_reshape` (more than one free or contracting dimension, any of them
  dynamic): the operands are transposed and collapsed here, the 2-D product expanded back.

What IREE computes differently from the spec is rewritten by aotkit/backends/
_iree_rewrites.py afterwards, on the text, as for a static module (its constants broadcast
to the dynamic shape). What cannot be put in these forms raises `prover.NotDynamic`; the
program is then compiled per shape.
"""

from __future__ import annotations

from jaxlib.mlir import ir
from jaxlib.mlir.dialects import stablehlo

from aotkit.specs import ShapeDtype
from aotkit.symbolic import prover
from aotkit.symbolic.prover import NotDynamic

_DYNAMIC = ir.ShapedType.get_dynamic_size()


def prepare(
    module, lc, in_specs: tuple[ShapeDtype, ...], out_specs: tuple[ShapeDtype, ...]
) -> tuple[str, prover.Proof]:
    """The text of `module` (a symbolic program in its lowering context `lc`) for IREE, with
    the proof of its shapes; `NotDynamic` where that cannot be."""
    proof = prover.prove(module, lc, in_specs, out_specs)
    with lc, ir.Location.unknown():
        main = prover._main(proof.module)
        ops: list[ir.Operation] = []

        def collect(op: ir.Operation) -> ir.WalkResult:
            ops.append(op)
            return ir.WalkResult.ADVANCE

        main.walk(collect, ir.WalkOrder.PRE_ORDER)
        for op in ops:
            if op.name == "stablehlo.dynamic_broadcast_in_dim":
                _annotate(op, proof)
            elif op.name == "stablehlo.dynamic_reshape":
                _reshape(op, proof)
            elif op.name == "stablehlo.dot_general" and _flattened_by_iree(op):
                _dot(op, proof)
        try:
            proof.module.verify()
        except ir.MLIRError as e:  # a rewrite here is wrong: say so rather than compile it
            raise NotDynamic(f"aotkit's dynamic form of the module does not verify: {e}") from e
        return proof.module.get_asm(enable_debug_info=True), proof


def _dims(proof: prover.Proof, value: ir.Value) -> tuple:
    found = proof.dims.get(value)
    return found if found is not None else tuple(ir.RankedTensorType(value.type).shape)


# --- dynamic_broadcast_in_dim -------------------------------------------------------------


def _annotate(op: ir.Operation, proof: prover.Proof) -> None:
    """Marks the dynamic operand dimensions the proof found nonexpanding. A broadcast of a
    broadcast is made one first where the proof decides every dimension of the whole: IREE
    merges such chains itself, and its merged op keeps no annotation."""
    source, nonexpanding = op.operands[0], proof.broadcasts[op.results[0]][1]
    inner = source.owner
    inner = inner.operation if isinstance(inner, ir.OpView) else inner
    if isinstance(inner, ir.Operation) and inner.name == "stablehlo.dynamic_broadcast_in_dim":
        outer_dims = prover._ints(op, "broadcast_dimensions")
        composed = [outer_dims[k] for k in prover._ints(inner, "broadcast_dimensions")]
        before, after = _dims(proof, inner.operands[0]), _dims(proof, op.results[0])
        same = [prover._same(before[i], after[k]) for i, k in enumerate(composed)]
        if all(s or (isinstance(d, int) and d == 1) for s, d in zip(same, before)):
            source = inner.operands[0]
            nonexpanding = [i for i, s in enumerate(same) if s]
            op.operands[0] = source
            op.attributes["broadcast_dimensions"] = ir.DenseI64ArrayAttr.get(composed)
            for name in ("known_expanding_dimensions", "known_nonexpanding_dimensions"):
                if name in op.attributes:
                    del op.attributes[name]
    claimed = set()
    if "known_nonexpanding_dimensions" in op.attributes:
        claimed = set(prover._ints(op, "known_nonexpanding_dimensions"))
    t = ir.RankedTensorType(source.type)
    dims = sorted(claimed | {i for i in nonexpanding if t.is_dynamic_dim(i)})
    if dims:
        op.attributes["known_nonexpanding_dimensions"] = ir.DenseI64ArrayAttr.get(dims)


# --- dynamic_reshape -----------------------------------------------------------------------


def _groups(before: tuple, after: tuple) -> list[tuple[list[int], list[int]]] | None:
    """Consecutive groups of `before`'s and `after`'s dimensions with proven equal products,
    each as small as it can be; unit dimensions left over join the last group. None when
    the dimensions do not split so."""
    groups = []
    i = j = 0
    while i < len(before) and j < len(after):
        for total in range(2, len(before) - i + len(after) - j + 1):
            found = None
            for di in range(1, total):
                dj = total - di
                if i + di > len(before) or j + dj > len(after):
                    continue
                a = prover._product(before[i : i + di])
                b = prover._product(after[j : j + dj])
                if prover._same(a, b):
                    found = (di, dj)
                    break
            if found is not None:
                break
        else:
            return None
        di, dj = found
        groups.append((list(range(i, i + di)), list(range(j, j + dj))))
        i, j = i + di, j + dj
    rest_before, rest_after = list(range(i, len(before))), list(range(j, len(after)))
    if not all(prover._same(before[k], 1) for k in rest_before):
        return None
    if not all(prover._same(after[k], 1) for k in rest_after):
        return None
    if not groups:
        return None
    groups[-1][0].extend(rest_before)
    groups[-1][1].extend(rest_after)
    return groups


def _size(sizes: list[int]) -> int:
    """The size of dimensions merged into one, from their types' sizes (dynamic if any is)."""
    if _DYNAMIC in sizes:
        return _DYNAMIC
    return prover._product(sizes)


def _reassociation(groups: list[list[int]]) -> ir.ArrayAttr:
    i64 = ir.IntegerType.get_signless(64)
    return ir.ArrayAttr.get(
        [ir.ArrayAttr.get([ir.IntegerAttr.get(i64, k) for k in g]) for g in groups]
    )


def _index(k: int, ip: ir.InsertionPoint, loc) -> ir.Value:
    index = ir.IndexType.get()
    return ir.Operation.create(
        "arith.constant",
        results=[index],
        attributes={"value": ir.IntegerAttr.get(index, k)},
        loc=loc,
        ip=ip,
    ).results[0]


def _element_of(shape: ir.Value, k: int, ip, loc) -> ir.Value:
    """Element `k` of the 1-D integer tensor `shape`, as an index."""
    element = ir.RankedTensorType(shape.type).element_type
    x = ir.Operation.create(
        "tensor.extract", results=[element], operands=[shape, _index(k, ip, loc)], loc=loc, ip=ip
    ).results[0]
    return ir.Operation.create(
        "arith.index_cast", results=[ir.IndexType.get()], operands=[x], loc=loc, ip=ip
    ).results[0]


def _dim_of(value: ir.Value, k: int, ip, loc) -> ir.Value:
    return ir.Operation.create(
        "tensor.dim",
        results=[ir.IndexType.get()],
        operands=[value, _index(k, ip, loc)],
        loc=loc,
        ip=ip,
    ).results[0]


def _collapse(value: ir.Value, groups, result: ir.RankedTensorType, ip, loc) -> ir.Value:
    return ir.Operation.create(
        "tensor.collapse_shape",
        results=[result],
        operands=[value],
        attributes={"reassociation": _reassociation(groups)},
        loc=loc,
        ip=ip,
    ).results[0]


def _expand(value: ir.Value, groups, result: ir.RankedTensorType, sizes, ip, loc) -> ir.Value:
    """`value` expanded to `result`; `sizes` gives an index value for each dynamic
    dimension of `result`."""
    return ir.Operation.create(
        "tensor.expand_shape",
        results=[result],
        operands=[value, *sizes],
        attributes={
            "reassociation": _reassociation(groups),
            "static_output_shape": ir.DenseI64ArrayAttr.get(list(result.shape)),
        },
        loc=loc,
        ip=ip,
    ).results[0]


def _cast(value: ir.Value, result: ir.Type, ip, loc) -> ir.Value:
    if value.type == result:
        return value
    return ir.Operation.create(
        "tensor.cast", results=[result], operands=[value], loc=loc, ip=ip
    ).results[0]


def _reshape(op: ir.Operation, proof: prover.Proof) -> None:
    x, shape = op.operands
    source, result = ir.RankedTensorType(x.type), ir.RankedTensorType(op.results[0].type)
    ip, loc = ir.InsertionPoint(op), op.location
    if source.has_static_shape and result.has_static_shape:
        value = ir.Operation.create(
            "stablehlo.reshape", results=[result], operands=[x], loc=loc, ip=ip
        ).results[0]
    else:
        before, after = _dims(proof, x), _dims(proof, op.results[0])
        groups = _groups(before, after) if source.rank and result.rank else None
        if groups is None:
            raise NotDynamic(
                f"{prover._where(op)} reshapes ({', '.join(map(str, before))}) to "
                f"({', '.join(map(str, after))}), which aotkit cannot split into groups of "
                "equal size for IREE"
            )
        value = x
        if any(len(g) > 1 for g, _ in groups):
            middle = [_size([source.shape[k] for k in g]) for g, _ in groups]
            middle_type = ir.RankedTensorType.get(middle, source.element_type)
            value = _collapse(value, [g for g, _ in groups], middle_type, ip, loc)
        if any(len(g) > 1 for _, g in groups):
            sizes = [
                _element_of(shape, k, ip, loc)
                for k in range(result.rank)
                if result.is_dynamic_dim(k)
            ]
            value = _expand(value, [g for _, g in groups], result, sizes, ip, loc)
        value = _cast(value, result, ip, loc)
    op.results[0].replace_all_uses_with(value)
    op.erase()


# --- dot_general ---------------------------------------------------------------------------


def _numbers(op: ir.Operation):
    n = stablehlo.DotDimensionNumbers(op.attributes["dot_dimension_numbers"])
    return (
        list(n.lhs_batching_dimensions),
        list(n.rhs_batching_dimensions),
        list(n.lhs_contracting_dimensions),
        list(n.rhs_contracting_dimensions),
    )


def _flattened_by_iree(op: ir.Operation) -> bool:
    """Whether IREE 3.13 turns this dot into a 2-D dot through a `dynamic_reshape` (its
    `GeneralDotConvert` pattern): no batch dimensions, a dynamic dimension, and operands
    that are not already one matrix each with one contracting dimension."""
    lb, _, lc, _ = _numbers(op)
    lhs, rhs = (ir.RankedTensorType(v.type) for v in op.operands)
    if lb or (lhs.has_static_shape and rhs.has_static_shape):
        return False
    return not (lhs.rank == 2 and rhs.rank == 2 and len(lc) == 1)


def _dot(op: ir.Operation, proof: prover.Proof) -> None:
    _, _, lc, rc = _numbers(op)
    lhs, rhs = op.operands
    lt, rt = ir.RankedTensorType(lhs.type), ir.RankedTensorType(rhs.type)
    free_l = [k for k in range(lt.rank) if k not in lc]
    free_r = [k for k in range(rt.rank) if k not in rc]
    if not free_l or not free_r or not lc:
        raise NotDynamic(
            f"{prover._where(op)} is a dot with dynamic shapes whose operands IREE cannot "
            "flatten without a dynamic reshape (a vector operand, or no contraction)"
        )
    ip, loc = ir.InsertionPoint(op), op.location

    def matrix(value: ir.Value, t: ir.RankedTensorType, order: list[int], split: int):
        """`value` transposed to `order` and collapsed to (order[:split], order[split:])."""
        if order != list(range(len(order))):
            transposed = ir.RankedTensorType.get([t.shape[k] for k in order], t.element_type)
            value = ir.Operation.create(
                "stablehlo.transpose",
                results=[transposed],
                operands=[value],
                attributes={"permutation": ir.DenseI64ArrayAttr.get(order)},
                loc=loc,
                ip=ip,
            ).results[0]
        if len(order) == 2:
            return value
        shape = [
            _size([t.shape[k] for k in order[:split]]),
            _size([t.shape[k] for k in order[split:]]),
        ]
        groups = [list(range(split)), list(range(split, len(order)))]
        return _collapse(value, groups, ir.RankedTensorType.get(shape, t.element_type), ip, loc)

    left = matrix(lhs, lt, free_l + lc, len(free_l))
    right = matrix(rhs, rt, rc + free_r, len(rc))
    result = ir.RankedTensorType(op.results[0].type)
    rows = _size([lt.shape[k] for k in free_l])
    cols = _size([rt.shape[k] for k in free_r])
    attributes = {
        "dot_dimension_numbers": stablehlo.DotDimensionNumbers.get(
            lhs_batching_dimensions=[],
            rhs_batching_dimensions=[],
            lhs_contracting_dimensions=[1],
            rhs_contracting_dimensions=[0],
        )
    }
    for name in ("precision_config", "algorithm"):
        if name in op.attributes:
            attributes[name] = op.attributes[name]
    value = ir.Operation.create(
        "stablehlo.dot_general",
        results=[ir.RankedTensorType.get([rows, cols], result.element_type)],
        operands=[left, right],
        attributes=attributes,
        loc=loc,
        ip=ip,
    ).results[0]
    if len(free_l) + len(free_r) != 2:
        free = [(lhs, lt, k) for k in free_l] + [(rhs, rt, k) for k in free_r]
        expanded = ir.RankedTensorType.get([t.shape[k] for _, t, k in free], result.element_type)
        sizes = [_dim_of(v, k, ip, loc) for v, t, k in free if t.is_dynamic_dim(k)]
        groups = [list(range(len(free_l))), list(range(len(free_l), len(free)))]
        value = _expand(value, groups, expanded, sizes, ip, loc)
    value = _cast(value, result, ip, loc)
    op.results[0].replace_all_uses_with(value)
    op.erase()
