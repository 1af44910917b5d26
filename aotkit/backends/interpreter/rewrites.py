"""Rewrites of the interpreter's own copy of a module, each around one defect of jaxlib
0.10.2's reference interpreter (measured there), into ops it evaluates with XLA's values.

- scatter writes into its operand's buffer, so other uses of the operand saw the update:
  the scatter gets a copy (a same-type reshape, which the interpreter materializes).
- compare TOTALORDER on floats compared like FLOAT (NaN unordered, -0.0 == +0.0): it
  becomes a signed compare of the float bits mapped to a monotonic integer.
- integer divide and remainder by 0 end the process (SIGFPE): they divide by 1 where XLA
  defines the result (x / 0 = -1, all ones unsigned; x % 0 = x; MIN / -1 = MIN;
  MIN % -1 = 0) and select that result.
- dot_general contracting an empty dimension aborts the process ("Incompatible index and
  shape found while flattening index"): it is a constant zero of its result type.
- dot_general and convolution on f16/bf16 round every partial sum to 16 bits, where XLA
  accumulates in f32: operands go to f32, the result comes back.
- convolution of narrower integers (i8 x i8 -> i32) wraps in i8: operands are converted
  to the result type first.
- convolution whose output feature dimension precedes its batch dimension aborts
  ("Incompatible index and shape"): it is computed batch-first, then transposed.
- batched (rank > 2) triangular_solve aborts the same way: each matrix is solved alone;
  ADJOINT on real types crashes (SIGSEGV): it is TRANSPOSE, which is the same there.
- dynamic_pad, dynamic_gather and dynamic_conv read their shape operands at run time and
  abort (or give garbage) when those disagree with the result type: with constant
  operands they become pad, gather and convolution; other operands are refused.
- jax 0.12.1's CPU kernels for lgamma and digamma (`cpu_lgamma_ffi`, `cpu_digamma_ffi`
  custom calls) become `chlo.lgamma` and `chlo.digamma` before CHLO is legalized
  (`restore_chlo`), so they run as the StableHLO that JAX emitted for them before.
- exp2, log2 and fma (which jaxlib 0.12.1's StableHLO has, and JAX and CHLO's legalization
  emit) are not ops the interpreter knows: they become power(2, x), log(x) / log(2) and
  a * b + c, computed in f64 for narrower floats (where the product of an f32 fma is
  exact), and exp(x * log(2)) for complex exp2.

Rewrites run after `checks.check_carried` (types and shapes are static and carried), on ops
collected before any rewrite, so the ops they emit are never rewritten again. The caller
is inside `with lc:` for the copy's context.
"""

from __future__ import annotations

import math

import numpy as np
from jaxlib.mlir import ir
from jaxlib.mlir.dialects import stablehlo

from aotkit import dtypes, modules
from aotkit.backends.interpreter import checks

_RULES = {}


def rule(*names):
    def register(fn):
        for n in names:
            _RULES["stablehlo." + n] = fn
        return fn

    return register


def apply(functions: list[ir.Operation], name: str) -> None:
    """Rewrites every op of `functions` that has a rule (the list in the module docstring)."""
    ops = [op for fn in functions for op in checks.walk(fn) if op.name in _RULES]
    for op in ops:
        with ir.InsertionPoint(op), op.location:
            _RULES[op.name](op, name)


# CPU kernels of elementwise math that CHLO has as ops (jax 0.12.1 lowers to the kernels).
_CHLO_FOR_TARGETS = {"cpu_lgamma_ffi": "chlo.lgamma", "cpu_digamma_ffi": "chlo.digamma"}


def restore_chlo(functions: list[ir.Operation]) -> None:
    """Replaces every call of a `_CHLO_FOR_TARGETS` kernel with its CHLO op (the trust check
    has held it to its contract: one operand, one result of its type). Runs before CHLO
    is legalized."""
    calls = [
        op
        for fn in functions
        for op in checks.walk(fn)
        if op.name == "stablehlo.custom_call"
        and ir.StringAttr(op.attributes["call_target_name"]).value in _CHLO_FOR_TARGETS
    ]
    for op in calls:
        target = ir.StringAttr(op.attributes["call_target_name"]).value
        with ir.InsertionPoint(op), op.location:
            _replace(op, _emit(_CHLO_FOR_TARGETS[target], list(op.operands), op.result.type))


# --- emitting ---------------------------------------------------------------------------


def _emit(op_name: str, operands, result_type: ir.Type, attributes=None) -> ir.Value:
    return ir.Operation.create(
        op_name, results=[result_type], operands=list(operands), attributes=attributes or {}
    ).result


def _attributes(op: ir.Operation) -> dict[str, ir.Attribute]:
    return {key: op.attributes[key] for key in op.attributes}


def _tensor(t: ir.Type) -> ir.RankedTensorType:
    return ir.RankedTensorType(t)


def _like(t: ir.Type, element: ir.Type, shape=None) -> ir.RankedTensorType:
    t = _tensor(t)
    return ir.RankedTensorType.get(list(t.shape) if shape is None else list(shape), element)


def _splat(value, t: ir.Type) -> ir.Value:
    """A constant of tensor type `t` (static, not empty) with every element `value`."""
    t = _tensor(t)
    dtype = dtypes.dtype_of_ir_type(t.element_type)
    buffer = np.array([value]).astype(dtype)
    attr = ir.DenseElementsAttr.get(buffer, type=t.element_type, shape=list(t.shape))
    return _emit("stablehlo.constant", [], t, {"value": attr})


def _compare(direction: str, lhs: ir.Value, rhs: ir.Value, compare_type=None) -> ir.Value:
    attrs = {"comparison_direction": stablehlo.ComparisonDirectionAttr.get(direction)}
    if compare_type is not None:
        attrs["compare_type"] = stablehlo.ComparisonTypeAttr.get(compare_type)
    i1 = _like(lhs.type, ir.IntegerType.get_signless(1))
    return _emit("stablehlo.compare", [lhs, rhs], i1, attrs)


def _select(pred: ir.Value, on_true: ir.Value, on_false: ir.Value) -> ir.Value:
    return _emit("stablehlo.select", [pred, on_true, on_false], on_false.type)


def _convert(value: ir.Value, element: ir.Type) -> ir.Value:
    if _tensor(value.type).element_type == element:
        return value
    return _emit("stablehlo.convert", [value], _like(value.type, element))


def _replace(op: ir.Operation, value: ir.Value) -> None:
    op.result.replace_all_uses_with(value)
    op.erase()


def _empty(t: ir.Type) -> bool:
    return 0 in _tensor(t).shape


# --- scatter ----------------------------------------------------------------------------


@rule("scatter")
def _copy_scatter_inputs(op: ir.Operation, name: str) -> None:
    # The interpreter starts its results from the input tensors themselves, not copies, and
    # scatters into them: `(x.at[i].add(1), x)` returned x updated. A reshape to the same
    # type is a fresh tensor in the interpreter (and nothing folds it away after this).
    for i in range(len(op.results)):
        value = op.operands[i]
        op.operands[i] = _emit("stablehlo.reshape", [value], value.type)


# --- compare TOTALORDER -----------------------------------------------------------------


def _total_order_key(x: ir.Value, width: int) -> ir.Value:
    """x's bits as a signed integer that orders like IEEE totalOrder: negative floats (sign
    bit set) have their other bits flipped, so -NaN < -inf < ... < -0 < +0 < ... < +NaN."""
    bits_type = _like(x.type, ir.IntegerType.get_signless(width))
    bits = _emit("stablehlo.bitcast_convert", [x], bits_type)
    sign = _emit(
        "stablehlo.shift_right_arithmetic", [bits, _splat(width - 1, bits_type)], bits_type
    )
    flip = _emit("stablehlo.shift_right_logical", [sign, _splat(1, bits_type)], bits_type)
    return _emit("stablehlo.xor", [bits, flip], bits_type)


@rule("compare")
def _total_order_compare(op: ir.Operation, name: str) -> None:
    if "compare_type" not in op.attributes:
        return
    if stablehlo.ComparisonTypeAttr(op.attributes["compare_type"]).value != "TOTALORDER":
        return
    lhs, rhs = op.operands
    element = _tensor(lhs.type).element_type
    if not isinstance(element, ir.FloatType) or _empty(lhs.type):
        return
    width = ir.FloatType(element).width
    direction = stablehlo.ComparisonDirectionAttr(op.attributes["comparison_direction"]).value
    keys = [_total_order_key(v, width) for v in (lhs, rhs)]
    _replace(op, _compare(direction, *keys, "SIGNED"))


# --- integer divide and remainder -------------------------------------------------------


@rule("divide", "remainder")
def _integer_division(op: ir.Operation, name: str) -> None:
    t = op.result.type
    element = _tensor(t).element_type
    if not isinstance(element, ir.IntegerType) or _empty(t):
        return
    dtype = dtypes.dtype_of_ir_type(element)
    info = dtypes.iinfo(dtype)
    a, b = op.operands
    by_zero = _compare("EQ", b, _splat(0, t))
    undefined = by_zero
    if info.min < 0:
        overflow = _emit(
            "stablehlo.and",
            [_compare("EQ", a, _splat(info.min, t)), _compare("EQ", b, _splat(-1, t))],
            by_zero.type,
        )
        undefined = _emit("stablehlo.or", [by_zero, overflow], by_zero.type)
    # MIN / 1 = MIN and MIN % 1 = 0 are already XLA's values for MIN / -1 and MIN % -1.
    safe = _select(undefined, _splat(1, t), b)
    quotient = _emit(op.name, [a, safe], t)
    if op.name == "stablehlo.divide":
        # -1 for signed types, all ones for unsigned ones.
        by_zero_value = _splat(-1 if info.min < 0 else info.max, t)
    else:
        by_zero_value = a
    _replace(op, _select(by_zero, by_zero_value, quotient))


# --- dot_general and convolution --------------------------------------------------------


def _is_half(t: ir.Type) -> bool:
    return isinstance(_tensor(t).element_type, ir.F16Type | ir.BF16Type)


@rule("dot_general")
def _widen_half_dot(op: ir.Operation, name: str) -> None:
    if any(_empty(v.type) for v in op.operands) and not _empty(op.result.type):
        # A contraction over an empty dimension aborts the interpreter ("Incompatible index
        # and shape found while flattening index"); its result is all zeros.
        _replace(op, _splat(0, op.result.type))
        return
    # An `algorithm` attribute names the accumulation type itself; it is left as written.
    if "algorithm" in op.attributes or not any(_is_half(v.type) for v in op.operands):
        return
    f32 = ir.F32Type.get()
    operands = [_convert(v, f32) if _is_half(v.type) else v for v in op.operands]
    result_type = op.result.type
    wide_type = _like(result_type, f32) if _is_half(result_type) else result_type
    result = _emit(op.name, operands, wide_type, _attributes(op))
    _replace(op, _convert(result, _tensor(result_type).element_type))


@rule("convolution")
def _convolution(op: ir.Operation, name: str) -> None:
    lhs, rhs = op.operands
    result_type = _tensor(op.result.type)
    result_element = result_type.element_type
    attrs = _attributes(op)
    dnums = stablehlo.ConvDimensionNumbers(attrs["dimension_numbers"])
    batch, feature = dnums.output_batch_dimension, dnums.output_feature_dimension

    compute = None
    if any(_is_half(v.type) for v in (lhs, rhs, op.result)):
        compute = ir.F32Type.get()
    elif any(_tensor(v.type).element_type != result_element for v in (lhs, rhs)):
        compute = result_element
    swap = feature < batch
    if compute is None and not swap:
        return

    operands = [lhs, rhs] if compute is None else [_convert(lhs, compute), _convert(rhs, compute)]
    shape = list(result_type.shape)
    if swap:
        shape[batch], shape[feature] = shape[feature], shape[batch]
        attrs["dimension_numbers"] = stablehlo.ConvDimensionNumbers.get(
            input_batch_dimension=dnums.input_batch_dimension,
            input_feature_dimension=dnums.input_feature_dimension,
            input_spatial_dimensions=list(dnums.input_spatial_dimensions),
            kernel_input_feature_dimension=dnums.kernel_input_feature_dimension,
            kernel_output_feature_dimension=dnums.kernel_output_feature_dimension,
            kernel_spatial_dimensions=list(dnums.kernel_spatial_dimensions),
            output_batch_dimension=feature,
            output_feature_dimension=batch,
            output_spatial_dimensions=list(dnums.output_spatial_dimensions),
        )
    element = result_element if compute is None else compute
    result = _emit(op.name, operands, _like(result_type, element, shape), attrs)
    if swap:
        perm = list(range(len(shape)))
        perm[batch], perm[feature] = feature, batch
        result = _emit(
            "stablehlo.transpose",
            [result],
            _like(result_type, element),
            {"permutation": ir.DenseI64ArrayAttr.get(perm)},
        )
    _replace(op, _convert(result, result_element))


# --- triangular_solve -------------------------------------------------------------------


@rule("triangular_solve")
def _triangular_solve(op: ir.Operation, name: str) -> None:
    a, b = op.operands
    if not isinstance(_tensor(a.type).element_type, ir.ComplexType):
        if stablehlo.TransposeAttr(op.attributes["transpose_a"]).value == "ADJOINT":
            op.attributes["transpose_a"] = stablehlo.TransposeAttr.get("TRANSPOSE")
    a_type, b_type = _tensor(a.type), _tensor(b.type)
    if a_type.rank <= 2:
        return
    if _empty(b_type):
        # Nothing to solve: any tensor of the result type will do, and b is one.
        _replace(op, _emit("stablehlo.reshape", [b], b_type))
        return
    element = a_type.element_type
    a_matrix, b_matrix = list(a_type.shape[-2:]), list(b_type.shape[-2:])
    count = math.prod(a_type.shape[:-2])
    a_flat = _emit("stablehlo.reshape", [a], _like(a_type, element, [count, *a_matrix]))
    b_flat = _emit("stablehlo.reshape", [b], _like(b_type, element, [count, *b_matrix]))
    attrs = _attributes(op)
    solved = []
    for i in range(count):
        parts = []
        for flat, matrix in ((a_flat, a_matrix), (b_flat, b_matrix)):
            one = _emit(
                "stablehlo.slice",
                [flat],
                _like(flat.type, element, [1, *matrix]),
                {
                    "start_indices": ir.DenseI64ArrayAttr.get([i, 0, 0]),
                    "limit_indices": ir.DenseI64ArrayAttr.get([i + 1, *matrix]),
                    "strides": ir.DenseI64ArrayAttr.get([1, 1, 1]),
                },
            )
            parts.append(_emit("stablehlo.reshape", [one], _like(flat.type, element, matrix)))
        x = _emit(op.name, parts, parts[1].type, attrs)
        solved.append(_emit("stablehlo.reshape", [x], _like(x.type, element, [1, *b_matrix])))
    stacked = _emit(
        "stablehlo.concatenate",
        solved,
        _like(b_type, element, [count, *b_matrix]),
        {"dimension": ir.IntegerAttr.get(ir.IntegerType.get_signless(64), 0)},
    )
    _replace(op, _emit("stablehlo.reshape", [stacked], b_type))


# --- dynamic ops with constant shape operands -------------------------------------------

_STATIC = {
    "stablehlo.dynamic_pad": "stablehlo.pad",
    "stablehlo.dynamic_gather": "stablehlo.gather",
    "stablehlo.dynamic_conv": "stablehlo.convolution",
}


def _constant_operand(op: ir.Operation, index: int, what: str, name: str) -> list[int]:
    """The values of operand `index` when a stablehlo.constant defines it; refuses otherwise."""
    value = op.operands[index]
    owner = value.owner
    if isinstance(owner, ir.Block) or owner.name != "stablehlo.constant":
        raise checks.refused(
            name,
            f"op {op.name}{checks.location(op)}: its {what} operand is not a constant, and "
            "the reference interpreter reads it at run time (aborting when it disagrees with "
            f"the result type {op.result.type})",
            f"make it a constant or use the static op {_STATIC[op.name]}",
        )
    return [int(v) for v in ir.DenseIntElementsAttr(owner.attributes["value"])]


def _static(op: ir.Operation, operands, attrs, name: str) -> ir.Operation:
    new = ir.Operation.create(
        _STATIC[op.name], results=[op.result.type], operands=list(operands), attributes=attrs
    )
    try:
        new.verify()
    except ir.MLIRError as e:
        new.erase()
        raise checks.refused(
            name,
            f"op {op.name}{checks.location(op)} has constant operands that disagree with its "
            f"result type {op.result.type}: {modules.diagnostic(e)}",
            "fix the operands",
        ) from None
    op.result.replace_all_uses_with(new.result)
    op.erase()
    return new


def _i64_array(values) -> ir.DenseI64ArrayAttr:
    return ir.DenseI64ArrayAttr.get([int(v) for v in values])


@rule("dynamic_pad")
def _dynamic_pad(op: ir.Operation, name: str) -> None:
    operand, padding_value = op.operands[0], op.operands[1]
    low, high, interior = (
        _constant_operand(op, i, what, name)
        for i, what in ((2, "edge_padding_low"), (3, "edge_padding_high"), (4, "interior_padding"))
    )
    attrs = {
        "edge_padding_low": _i64_array(low),
        "edge_padding_high": _i64_array(high),
        "interior_padding": _i64_array(interior),
    }
    _static(op, [operand, padding_value], attrs, name)


@rule("dynamic_gather")
def _dynamic_gather(op: ir.Operation, name: str) -> None:
    sizes = _constant_operand(op, 2, "slice_sizes", name)
    attrs = _attributes(op)
    attrs["slice_sizes"] = _i64_array(sizes)
    _static(op, list(op.operands)[:2], attrs, name)


@rule("dynamic_conv")
def _dynamic_conv(op: ir.Operation, name: str) -> None:
    pads = _constant_operand(op, 2, "padding", name)
    attrs = _attributes(op)
    attrs["padding"] = ir.DenseElementsAttr.get(
        np.array(pads, np.int64).reshape(-1, 2), type=ir.IntegerType.get_signless(64)
    )
    new = _static(op, list(op.operands)[:2], attrs, name)
    with ir.InsertionPoint(new), new.location:
        _convolution(new, name)


# --- exp2, log2, fma --------------------------------------------------------------------


@rule("exp2", "log2", "fma")
def _base_two_and_fused(op: ir.Operation, name: str) -> None:
    result_type = op.result.type
    element = _tensor(result_type).element_type
    f64 = ir.F64Type.get()
    # Narrower floats are computed in f64 and rounded once at the end.
    wide = f64 if isinstance(element, ir.F16Type | ir.BF16Type | ir.F32Type) else element
    operands = [_convert(v, wide) for v in op.operands]
    wide_type = _like(result_type, wide)
    if op.name == "stablehlo.fma":
        a, b, c = operands
        product = _emit("stablehlo.multiply", [a, b], wide_type)
        value = _emit("stablehlo.add", [product, c], wide_type)
    elif op.name == "stablehlo.exp2":
        (x,) = operands
        if isinstance(wide, ir.ComplexType):
            scaled = _emit("stablehlo.multiply", [x, _splat(math.log(2.0), wide_type)], wide_type)
            value = _emit("stablehlo.exponential", [scaled], wide_type)
        else:
            value = _emit("stablehlo.power", [_splat(2.0, wide_type), x], wide_type)
    else:
        (x,) = operands
        logged = _emit("stablehlo.log", [x], wide_type)
        value = _emit("stablehlo.divide", [logged, _splat(math.log(2.0), wide_type)], wide_type)
    _replace(op, _convert(value, element))
