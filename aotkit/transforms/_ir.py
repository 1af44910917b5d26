"""Transforms, reading: what the rules need to know of a StableHLO op they rewrite.

The transforms read the ops of a verified module through the MLIR bindings: the op's
name, operands, attributes and regions. This module decodes the attributes the rules use
(integer arrays, dimension numbers, comparison directions, constants) and says what a
region computes (`combiner`), which values a region captures from above (`captured`) and
which of those its constants alone compute (`rematerializable`), and what a loop's trip
count is when its ops say so (`trip_count`). Nothing here builds IR.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from jaxlib.mlir import ir
from jaxlib.mlir.dialects import stablehlo

from aotkit import _context, dtypes

Aval = tuple  # (shape, dtype), as the tracer's


@_context.cached
def _aval_of_type(t: ir.Type) -> Aval:
    ranked = ir.RankedTensorType(t)
    if not ranked.has_static_shape:
        raise NotImplementedError(
            f"a value of type {t} has a dynamic shape; aotkit's transform rules run on "
            "static shapes: transform the symbolic program as a stage instead, which "
            "transforms it per shape as it compiles (aotkit.jit(f).lower(aotkit.spec("
            "'f32[b,784]')).grad()), or specialize it to concrete sizes first "
            "(Lowered.specialize, one size per symbol: lowered.specialize(b=8).grad())"
        )
    return tuple(ranked.shape), dtypes.dtype_of_ir_type(ranked.element_type)


def aval(value: ir.Value) -> Aval:
    """(shape, dtype) of a tensor value."""
    return _aval_of_type(value.type)


def name(op) -> str:
    """The op's name (`stablehlo.add`); OpView.name may be an attribute (func.func's)."""
    return op.operation.name


def custom_call_target(op) -> str:
    """A stablehlo.custom_call's target (`lapack_dpotrf_ffi`)."""
    return ir.StringAttr(op.operation.attributes["call_target_name"]).value


def has(op, key: str) -> bool:
    return key in op.operation.attributes


def attr(op, key: str):
    return op.operation.attributes[key]


def i64s(op, key: str, default=None) -> tuple[int, ...]:
    """An integer array attribute (DenseI64ArrayAttr or a dense int elements attribute)."""
    attributes = op.operation.attributes
    if key not in attributes:
        if default is None:
            raise KeyError(f"{name(op)} has no attribute {key!r}")
        return tuple(default)
    # Attributes are uniqued: each is read once per lowering context.
    cache = _context.active().attributes
    a = attributes[key]
    cache_key = (i64s, a)
    found = cache.get(cache_key)
    if found is None:
        if isinstance(a, ir.DenseI64ArrayAttr):
            found = tuple(ir.DenseI64ArrayAttr(a))
        elif isinstance(a, ir.DenseBoolArrayAttr):
            found = tuple(bool(v) for v in ir.DenseBoolArrayAttr(a))
        else:
            found = tuple(int(v) for v in ir.DenseIntElementsAttr(a))
        cache[cache_key] = found
    return found


def bools(op, key: str, n: int) -> tuple[bool, ...]:
    attributes = op.operation.attributes
    if key not in attributes:
        return (False,) * n
    a = attributes[key]
    if isinstance(a, ir.DenseBoolArrayAttr):
        return tuple(bool(v) for v in ir.DenseBoolArrayAttr(a))
    return tuple(bool(v) for v in ir.DenseIntElementsAttr(a))


def int_attr(op, key: str, default: int = 0) -> int:
    attributes = op.operation.attributes
    return ir.IntegerAttr(attributes[key]).value if key in attributes else default


def bool_attr(op, key: str) -> bool:
    attributes = op.operation.attributes
    return key in attributes and ir.BoolAttr(attributes[key]).value


def padding_pairs(op, key: str, rank: int) -> tuple[tuple[int, int], ...]:
    """A `[[lo, hi], ...]` padding attribute (zeros when absent)."""
    attributes = op.operation.attributes
    if key not in attributes:
        return ((0, 0),) * rank
    flat = [int(v) for v in ir.DenseIntElementsAttr(attributes[key])]
    return tuple((flat[2 * i], flat[2 * i + 1]) for i in range(len(flat) // 2))


def direction(op) -> str:
    """A compare op's direction: "EQ", "LT", ..."""
    return str(stablehlo.ComparisonDirectionAttr(attr(op, "comparison_direction")).value)


@dataclasses.dataclass(frozen=True)
class DotDims:
    lhs_contract: tuple[int, ...]
    rhs_contract: tuple[int, ...]
    lhs_batch: tuple[int, ...]
    rhs_batch: tuple[int, ...]


def dot_dims(op) -> DotDims:
    return _dot_dims_of(attr(op, "dot_dimension_numbers"))


@_context.cached
def _dot_dims_of(attribute: ir.Attribute) -> DotDims:
    # Read once per lowering context (attributes are uniqued: equal ones hash alike).
    d = stablehlo.DotDimensionNumbers(attribute)
    return DotDims(
        tuple(d.lhs_contracting_dimensions),
        tuple(d.rhs_contracting_dimensions),
        tuple(d.lhs_batching_dimensions),
        tuple(d.rhs_batching_dimensions),
    )


@dataclasses.dataclass(frozen=True)
class GatherDims:
    offset_dims: tuple[int, ...]
    collapsed_slice_dims: tuple[int, ...]
    operand_batching_dims: tuple[int, ...]
    start_indices_batching_dims: tuple[int, ...]
    start_index_map: tuple[int, ...]
    index_vector_dim: int


def gather_dims(op) -> GatherDims:
    d = stablehlo.GatherDimensionNumbers(attr(op, "dimension_numbers"))
    return GatherDims(
        tuple(d.offset_dims),
        tuple(d.collapsed_slice_dims),
        tuple(d.operand_batching_dims),
        tuple(d.start_indices_batching_dims),
        tuple(d.start_index_map),
        d.index_vector_dim,
    )


@dataclasses.dataclass(frozen=True)
class ScatterDims:
    update_window_dims: tuple[int, ...]
    inserted_window_dims: tuple[int, ...]
    input_batching_dims: tuple[int, ...]
    scatter_indices_batching_dims: tuple[int, ...]
    scatter_dims_to_operand_dims: tuple[int, ...]
    index_vector_dim: int


def scatter_dims(op) -> ScatterDims:
    d = stablehlo.ScatterDimensionNumbers(attr(op, "scatter_dimension_numbers"))
    return ScatterDims(
        tuple(d.update_window_dims),
        tuple(d.inserted_window_dims),
        tuple(d.input_batching_dims),
        tuple(d.scatter_indices_batching_dims),
        tuple(d.scattered_dims_to_operand_dims),
        d.index_vector_dim,
    )


@dataclasses.dataclass(frozen=True)
class ConvDims:
    """A convolution's layout: for each operand, which dimension is which."""

    in_batch: int
    in_feature: int
    in_spatial: tuple[int, ...]
    kernel_in: int
    kernel_out: int
    kernel_spatial: tuple[int, ...]
    out_batch: int
    out_feature: int
    out_spatial: tuple[int, ...]


def conv_dims(op) -> ConvDims:
    d = stablehlo.ConvDimensionNumbers(attr(op, "dimension_numbers"))
    return ConvDims(
        d.input_batch_dimension,
        d.input_feature_dimension,
        tuple(d.input_spatial_dimensions),
        d.kernel_input_feature_dimension,
        d.kernel_output_feature_dimension,
        tuple(d.kernel_spatial_dimensions),
        d.output_batch_dimension,
        d.output_feature_dimension,
        tuple(d.output_spatial_dimensions),
    )


# --- constants -------------------------------------------------------------------------------


def converted_from_integers(value: ir.Value) -> bool:
    """Whether a `stablehlo.convert` of an integer (or boolean) array defines the value."""
    owner = value.owner
    if not isinstance(owner, ir.OpView | ir.Operation):
        return False
    op = owner.operation
    if op.name != "stablehlo.convert":
        return False
    _, dtype = aval(op.operands[0])
    return not dtypes.is_inexact(dtype)


def constant_of(value: ir.Value) -> np.ndarray | None:
    """The value as a NumPy array when a `stablehlo.constant` defines it, else None."""
    owner = value.owner
    if not isinstance(owner, ir.OpView | ir.Operation) or owner.operation.name != (
        "stablehlo.constant"
    ):
        return None
    shape, dtype = aval(value)
    if dtype == dtypes.bfloat16 or dtypes.is_low_precision(dtype):
        return None
    try:
        a = ir.DenseElementsAttr(owner.operation.attributes["value"])
    except TypeError:  # a complex constant, which the bindings cannot hand to Python
        return None
    if a.is_splat:
        v = a.get_splat_value()
        scalar = _scalar(v, dtype)
        return None if scalar is None else np.full(shape, scalar, dtype)
    try:
        if dtypes.is_inexact(dtype):
            arr = np.array(ir.DenseFPElementsAttr(a)) if dtypes.is_float(dtype) else None
        elif dtype == np.bool_:
            arr = np.array(ir.DenseIntElementsAttr(a)).astype(bool)
        else:
            arr = np.array(ir.DenseIntElementsAttr(a))
    except (TypeError, ValueError):
        return None
    return None if arr is None else arr.astype(dtype).reshape(shape)


def _scalar(v, dtype):
    if isinstance(v, ir.FloatAttr):
        return ir.FloatAttr(v).value
    if isinstance(v, ir.IntegerAttr):
        x = ir.IntegerAttr(v).value
        if dtype == np.bool_:
            return bool(x & 1)
        if dtypes.is_unsigned_int(dtype) and x < 0:
            x += 1 << (8 * dtype.itemsize)
        return x
    return None


# --- regions -----------------------------------------------------------------------------------

# A region whose block applies one binary op to its two arguments: what it computes.
_COMBINERS = {
    "stablehlo.add": "add",
    "stablehlo.multiply": "mul",
    "stablehlo.maximum": "max",
    "stablehlo.minimum": "min",
    "stablehlo.and": "and",
    "stablehlo.or": "or",
    "stablehlo.xor": "xor",
}


def combiner(region: ir.Region) -> str | None:
    """ "add", "mul", "max", "min", "and", "or", "xor" for a region `(a, b) -> op(a, b)`
    (either order), "replace" for `(a, b) -> b`, None otherwise."""
    block = region.blocks[0]
    ops = list(block.operations)
    args = list(block.arguments)
    if len(args) != 2:
        return None
    if len(ops) == 1 and ops[0].operation.operands[0] == args[1]:
        return "replace"
    if len(ops) != 2:
        return None
    kind = _COMBINERS.get(ops[0].operation.name)
    if kind is None:
        return None
    a, b = ops[0].operation.operands
    if {_arg_index(a, args), _arg_index(b, args)} != {0, 1}:
        return None
    if ops[1].operation.operands[0] != ops[0].operation.results[0]:
        return None
    return kind


def _arg_index(value: ir.Value, args: list) -> int:
    for i, a in enumerate(args):
        if value == a:
            return i
    return -1


def captured(op) -> list[ir.Value]:
    """The values the op's regions use that are defined outside the op, in first-use order
    (StableHLO regions are not isolated from above)."""
    return captured_in(list(op.operation.regions))


def captured_in(regions) -> list[ir.Value]:
    """The values `regions` use that are defined outside them, in first-use order."""
    inside: set = set()
    found: list[ir.Value] = []
    seen: set = set()

    def walk_region(region):
        for block in region.blocks:
            for a in block.arguments:
                inside.add(a)
            for inner in block.operations:
                o = inner.operation
                for v in o.operands:
                    if v not in inside and v not in seen:
                        seen.add(v)
                        found.append(v)
                for r in o.regions:
                    walk_region(r)
                for v in o.results:
                    inside.add(v)

    for region in regions:
        walk_region(region)
    return found


# Ops whose regions may use values from above where XLA runs them: the converter to HLO
# passes those values in (a while's carries, a branch's operands). Every other region
# becomes a computation of its own arguments alone.
CAPTURING = frozenset({"stablehlo.while", "stablehlo.case", "stablehlo.if"})

# Ops a value computed from constants may be built with, again, inside a region: no
# regions, no effects, results fixed by their operands and attributes.
_PURE = frozenset(
    {
        "stablehlo.constant",
        "stablehlo.iota",
        "stablehlo.broadcast_in_dim",
        "stablehlo.reshape",
        "stablehlo.transpose",
        "stablehlo.slice",
        "stablehlo.concatenate",
        "stablehlo.convert",
        "stablehlo.bitcast_convert",
        "stablehlo.negate",
        "stablehlo.abs",
        "stablehlo.add",
        "stablehlo.subtract",
        "stablehlo.multiply",
        "stablehlo.divide",
        "stablehlo.maximum",
        "stablehlo.minimum",
        "stablehlo.compare",
        "stablehlo.select",
        "stablehlo.and",
        "stablehlo.or",
        "stablehlo.not",
    }
)

# A chain longer than this is not copied into a region (it is threaded in, or refused).
_REMAT_LIMIT = 16


def rematerializable(value: ir.Value) -> list | None:
    """The ops that compute `value` from constants alone, in the order they run (the
    value's own op last), when there are at most a few of them and each is pure; None
    otherwise (the value depends on an argument, a block argument, or an op with effects
    or regions)."""
    found: list = []
    done: set = set()

    def visit(v) -> bool:
        if v in done:
            return True
        owner = v.owner
        if not isinstance(owner, ir.OpView | ir.Operation):
            return False  # a block argument
        o = owner.operation
        if o.name not in _PURE or len(o.regions):
            return False
        for w in o.operands:
            if not visit(w):
                return False
        if len(found) >= _REMAT_LIMIT:
            return False
        found.append(o)
        done.update(o.results)
        return True

    return found if visit(value) else None


def block_ops(block: ir.Block) -> list:
    """The block's ops and its terminator's operands: (ops before the terminator, returned
    values)."""
    ops = list(block.operations)
    return ops[:-1], list(ops[-1].operation.operands)


# --- loops ---------------------------------------------------------------------------------------

_STEP_DIRECTIONS = {"LT": 1, "GT": -1, "NE": 0}


def trip_count(op, constant_value) -> int | None:
    """The number of iterations of a `stablehlo.while` whose ops fix it, else None.

    The pattern is a counter: the condition compares carry `k` (LT, GT or NE) with a bound
    that is a constant (in the condition, or a carry the body passes through unchanged
    from a constant init), the body adds a constant step to `k` (or, with LT, multiplies
    a positive `k` by a constant of 2 or more), and `k` starts at a constant.
    `constant_value(v)` gives an outer value's constant (NumPy) or None.
    """
    o = op.operation
    cond_block = o.regions[0].blocks[0]
    body_block = o.regions[1].blocks[0]
    cond_ops, cond_ret = block_ops(cond_block)
    body_ops, body_ret = block_ops(body_block)
    cond_args = list(cond_block.arguments)
    body_args = list(body_block.arguments)
    inits = list(o.operands)
    pred_owner = cond_ret[0].owner
    if not isinstance(pred_owner, ir.OpView | ir.Operation):
        return None
    compare = pred_owner.operation
    if compare.name != "stablehlo.compare":
        return None
    dir_ = direction(compare)
    a, b = compare.operands
    k = _arg_index(a, cond_args)
    if k < 0:  # `bound > k` is `k < bound`
        a, b = b, a
        k = _arg_index(a, cond_args)
        dir_ = {"GT": "LT", "LT": "GT", "NE": "NE"}.get(dir_, "")
    if k < 0 or dir_ not in _STEP_DIRECTIONS:
        return None

    def known(v, block_args, ret):
        """The constant `v` is in the condition: defined there, captured, or a carry kept
        unchanged whose init is constant."""
        j = _arg_index(v, block_args)
        if j >= 0:
            if body_ret[j] != body_args[j]:
                return None
            return constant_value(inits[j])
        return constant_value(v)

    bound = known(b, cond_args, cond_ret)
    start = constant_value(inits[k])
    if bound is None or start is None or bound.shape != () or start.shape != ():
        return None
    step_owner = body_ret[k].owner
    if not isinstance(step_owner, ir.OpView | ir.Operation):
        return None
    add = step_owner.operation
    if add.name not in ("stablehlo.add", "stablehlo.multiply"):
        return None
    x, y = add.operands
    if x != body_args[k]:
        x, y = y, x
    if x != body_args[k]:
        return None
    step = constant_value(y)
    if step is None or step.shape != ():
        return None
    start, bound, step = int(start), int(bound), int(step)
    if add.name == "stablehlo.multiply":
        # A counter that doubles (aotkit's scans along a symbolic axis: k = 1, 2, 4, ...
        # while k < n), at most 64 times for a 64-bit counter.
        if dir_ != "LT" or start < 1 or step < 2:
            return None
        trips = 0
        while start < bound:
            start, trips = start * step, trips + 1
        return trips
    if step == 0:
        return None
    if dir_ == "NE":
        if (bound - start) % step != 0 or (bound - start) // step < 0:
            return None
        return (bound - start) // step
    if _STEP_DIRECTIONS[dir_] * step < 0:
        return None
    span = bound - start if dir_ == "LT" else start - bound
    return max(0, -(-span // abs(step)))
