"""Trace stage, symbolic dimensions in the module: dynamic StableHLO (issue 25).

A trace whose arguments have symbolic dimensions (`f32[b,784]`, see aotkit/symbolic/algebra.py) runs
the same shape rules on `Dim`s and emits one dynamic module (`tensor<?x784xf32>`). What
the rules know as expressions, the module computes at run time:

- each symbol's value is read once, at `@main`'s entry, from an argument dimension that is
  that symbol (`stablehlo.get_dimension_size`), or solved from one that is `k*b + c`;
- an expression (`b*t`, `floordiv(t, 8)`) is i64 scalar arithmetic on them, built once per
  trace beside the symbols (before `anchor`, so it dominates every use, regions included);
- ops whose attributes encode a shape become their dynamic forms when a dimension is
  symbolic: `dynamic_broadcast_in_dim`, `dynamic_reshape`, `dynamic_iota`,
  `real_dynamic_slice`, `dynamic_pad`, `dynamic_gather`; a splat of symbolic shape is a
  scalar constant broadcast dynamically. Every other op takes its operands' dynamic types.

Static traces never come here (`core.register_symbolic` says how). Refined to concrete sizes
(StableHLO's `stablehlo-refine-arguments`, `stablehlo-refine-shapes`), the module is the
static program of those sizes; aotkit/symbolic/specialize.py does that per call.
"""

from __future__ import annotations

import numpy as np
from jaxlib.mlir import ir
from jaxlib.mlir.dialects import stablehlo

from aotkit import dtypes
from aotkit.symbolic import algebra
from aotkit.symbolic.algebra import Dim
from aotkit.tracing.core import (
    RuleContext,
    Tracer,
    _constant_op,
    _splat_attr,
    current_scope,
    register,
    register_symbolic,
    user_site,
)
from aotkit.tracing.indexing import gather_dimension_numbers


class SymbolicTrace:
    """The symbols of one trace and the i64 values computed for its expressions."""

    __slots__ = ("scope", "anchor", "symbols", "dims", "shapes", "i64", "where")

    def __init__(self, scope: algebra.SymbolicScope, where: str):
        self.scope = scope
        self.where = where
        self.anchor: ir.Operation | None = None
        self.symbols: dict[str, ir.Value] = {}
        # tensor<i64> per expression (by structure: its terms) and tensor<Nxi64> per shape.
        self.dims: dict = {}
        self.shapes: dict = {}
        self.i64 = ir.RankedTensorType.get([], ir.IntegerType.get_signless(64))


def start(emitted, arguments, specs, where: str) -> SymbolicTrace | None:
    """Begins a symbolic trace when some spec of `specs` (the arguments' `ShapeDtype`s, in
    one scope: `specs.unify_scopes`) has a symbolic dimension: reads every symbol from the
    block `arguments` at the insertion point. None for a static trace."""
    scope = algebra.scope_of(specs)
    if scope is None:
        return None
    st = SymbolicTrace(scope, where)
    loc = ir.Location.unknown()
    names = sorted(algebra.symbols_of(specs))
    found: dict[str, tuple[ir.Value, int, object]] = {}  # name -> (size, k, rest): k*name+rest
    for name in names:
        for arg, spec in zip(arguments, specs, strict=True):
            for axis, d in enumerate(spec.shape):
                if isinstance(d, Dim) and d.as_symbol() == name and name not in found:
                    found[name] = (_dimension_size(st, arg, axis, loc), 1, 0)
    # Symbols that appear only as k*s + (known symbols): solved once those are known.
    progress = True
    while progress:
        progress = False
        for name in names:
            if name in found:
                continue
            for arg, spec in zip(arguments, specs, strict=True):
                for axis, d in enumerate(spec.shape):
                    if not isinstance(d, Dim) or name in found:
                        continue
                    linear = d.linear_in(name)
                    if linear is None:
                        continue
                    rest_symbols = (
                        algebra.symbols_of(linear[1]) if isinstance(linear[1], Dim) else ()
                    )
                    if all(s in found for s in rest_symbols):
                        found[name] = (_dimension_size(st, arg, axis, loc), *linear)
                        progress = True
    missing = [n for n in names if n not in found]
    if missing:
        raise ValueError(
            f"{where}: symbol {missing[0]} is in no argument dimension on its own ({missing[0]}, "
            f"or k*{missing[0]} plus other symbols), so its value cannot be read from the "
            f"arguments' shapes; give {missing[0]} its own dimension in some argument"
        )
    with loc:
        for name in names:
            size, k, rest = found[name]
            if k == 1 and not isinstance(rest, Dim) and rest == 0:
                st.symbols[name] = size
        # The anchor: expressions are built before it, after the symbols they read.
        st.anchor = _constant_op(_splat_attr(0, (), np.dtype(np.int64)))[0].owner
        for name in names:
            if name in st.symbols:
                continue
            size, k, rest = found[name]
            with ir.InsertionPoint(st.anchor):
                v = _emit("stablehlo.subtract", size, dim_value(st, rest))
                st.symbols[name] = _floordiv_values(st, v, _i64_constant(st, k))
    emitted.symbolic = st
    emitted.opaque = True
    emitted.unchecked = True  # its dimension arithmetic is built outside `bind`
    return st


def _dimension_size(st: SymbolicTrace, arg: ir.Value, axis: int, loc) -> ir.Value:
    i32 = ir.RankedTensorType.get([], ir.IntegerType.get_signless(32))
    size = ir.Operation.create(
        "stablehlo.get_dimension_size",
        results=[i32],
        operands=[arg],
        attributes={"dimension": ir.IntegerAttr.get(ir.IntegerType.get_signless(64), axis)},
        loc=loc,
    ).result
    return ir.Operation.create("stablehlo.convert", results=[st.i64], operands=[size]).result


def trace_of(*dims) -> SymbolicTrace:
    """The symbolic trace in progress; TypeError when one of `dims` (a dimension the user
    made with aotkit.symbolic_shape, say) is not one of its own."""
    st = current_scope().emitted.symbolic
    d = next((d for d in dims if isinstance(d, Dim)), None)
    if st is None:
        raise TypeError(
            f"symbolic dimension {d} (at {user_site()}) used in a trace whose arguments have "
            "no symbolic dimensions; a traced program's symbols come from its arguments' "
            "specs (aotkit.spec('f32[b,3]')): take the dimension from an argument's shape"
        )
    for d in dims:
        if isinstance(d, Dim) and (d.scope != st.scope or not d.symbols() <= st.symbols.keys()):
            raise TypeError(
                f"symbolic dimension {d} (at {user_site()}) is not one of this trace's (symbols "
                f"{', '.join(sorted(st.symbols))}; constraints: {st.scope.describe()}); take "
                "the dimension from an argument's shape"
            )
    return st


# --- expressions as i64 values -----------------------------------------------------------------


def _emit(name: str, *operands: ir.Value, result: ir.Type | None = None) -> ir.Value:
    return ir.Operation.create(
        name, results=[result or operands[0].type], operands=list(operands)
    ).result


def _i64_constant(st: SymbolicTrace, n: int) -> ir.Value:
    key = ("int", n)
    v = st.dims.get(key)
    if v is None:
        with ir.InsertionPoint(st.anchor), ir.Location.unknown():
            attr = ir.DenseElementsAttr.get(np.array(n, np.int64), type=st.i64.element_type)
            v = st.dims[key] = ir.Operation.create(
                "stablehlo.constant", results=[st.i64], attributes={"value": attr}
            ).result
    return v


def dim_value(st: SymbolicTrace, d) -> ir.Value:
    """The i64 scalar value of dimension `d` (an int or a Dim), built once per trace."""
    if not isinstance(d, Dim):
        return _i64_constant(st, int(d))
    key = d.terms
    v = st.dims.get(key)
    if v is None:
        with ir.InsertionPoint(st.anchor), ir.Location.unknown():
            total = None
            for mono, c in d.terms:
                term = None
                for atom, p in mono:
                    a = _atom_value(st, atom)
                    for _ in range(p):
                        term = a if term is None else _emit("stablehlo.multiply", term, a)
                if term is None:
                    term = _i64_constant(st, c)
                elif c != 1:
                    term = _emit("stablehlo.multiply", term, _i64_constant(st, c))
                total = term if total is None else _emit("stablehlo.add", total, term)
            v = st.dims[key] = total
    return v


def _atom_value(st: SymbolicTrace, atom) -> ir.Value:
    if isinstance(atom, str):
        return st.symbols[atom]
    a, b = (dim_value(st, x) for x in atom.args)
    if atom.name == "floordiv":
        return _floordiv_values(st, a, b)
    if atom.name == "mod":
        q = _floordiv_values(st, a, b)
        return _emit("stablehlo.subtract", a, _emit("stablehlo.multiply", q, b))
    return _emit("stablehlo.maximum" if atom.name == "max" else "stablehlo.minimum", a, b)


def _floordiv_values(st: SymbolicTrace, a: ir.Value, b: ir.Value) -> ir.Value:
    """Python's a // b (rounding down) from StableHLO's divide (rounding toward zero)."""
    q = _emit("stablehlo.divide", a, b)
    zero = _i64_constant(st, 0)
    i1 = ir.RankedTensorType.get([], ir.IntegerType.get_signless(1))
    back = _emit("stablehlo.multiply", q, b)
    inexact = _compare(a, back, "NE", i1)
    signs_differ = _compare(_compare(a, zero, "LT", i1), _compare(b, zero, "LT", i1), "NE", i1)
    fix = _emit("stablehlo.and", inexact, signs_differ)
    one = _i64_constant(st, 1)
    return ir.Operation.create(
        "stablehlo.select",
        results=[st.i64],
        operands=[fix, _emit("stablehlo.subtract", q, one), q],
    ).result


def _compare(a: ir.Value, b: ir.Value, direction: str, i1: ir.Type) -> ir.Value:
    return ir.Operation.create(
        "stablehlo.compare",
        results=[i1],
        operands=[a, b],
        attributes={"comparison_direction": stablehlo.ComparisonDirectionAttr.get(direction)},
    ).result


def shape_value(st: SymbolicTrace, shape: tuple) -> ir.Value:
    """`shape` as a `tensor<Nxi64>` value (the shape operand of the dynamic ops)."""
    key = tuple(d.terms if isinstance(d, Dim) else d for d in shape)
    v = st.shapes.get(key)
    if v is None:
        with ir.InsertionPoint(st.anchor), ir.Location.unknown():
            one = ir.RankedTensorType.get([1], st.i64.element_type)
            parts = [
                ir.Operation.create(
                    "stablehlo.reshape", results=[one], operands=[dim_value(st, d)]
                ).result
                for d in shape
            ]
            if not parts:
                attr = ir.DenseElementsAttr.get(np.zeros((0,), np.int64), type=st.i64.element_type)
                v = ir.Operation.create(
                    "stablehlo.constant",
                    results=[ir.RankedTensorType.get([0], st.i64.element_type)],
                    attributes={"value": attr},
                ).result
            elif len(parts) == 1:
                v = parts[0]
            else:
                v = ir.Operation.create(
                    "stablehlo.concatenate",
                    results=[ir.RankedTensorType.get([len(parts)], st.i64.element_type)],
                    operands=parts,
                    attributes={
                        "dimension": ir.IntegerAttr.get(ir.IntegerType.get_signless(64), 0)
                    },
                ).result
            st.shapes[key] = v
    return v


def index_value(d, dtype: np.dtype) -> ir.Value:
    """Dimension `d` as a 0-d integer value of `dtype` at the insertion point (a count for
    `mean`, a bound for a loop)."""
    st = trace_of(d)
    v = dim_value(st, d)
    if dtype == np.int64:
        return v
    return ir.Operation.create(
        "stablehlo.convert", results=[dtypes.tensor_type((), dtype)], operands=[v]
    ).result


# --- the dynamic ops -----------------------------------------------------------------------------


def _i64_array(values) -> ir.DenseI64ArrayAttr:
    return ir.DenseI64ArrayAttr.get([int(v) for v in values])


@register_symbolic("full")
def _full(value, shape, dtype) -> ir.Value:
    scalar = _constant_op(_splat_attr(value, (), dtype))[0]
    return ir.Operation.create(
        "stablehlo.dynamic_broadcast_in_dim",
        results=[dtypes.tensor_type(shape, dtype)],
        operands=[scalar, shape_value(trace_of(*shape), shape)],
        attributes={"broadcast_dimensions": _i64_array(())},
    ).result


@register_symbolic("dim")
def _dim(shape, d, dtype) -> Tracer:
    """The value of dimension `d` as an array of `shape` and `dtype` (`x + x.shape[0]`)."""
    v = index_value(d, np.dtype(np.int64))
    if dtype != np.int64:
        v = ir.Operation.create(
            "stablehlo.convert", results=[dtypes.tensor_type((), dtype)], operands=[v]
        ).result
    scope = current_scope()
    if shape:
        if algebra.is_static(shape):
            v = ir.Operation.create(
                "stablehlo.broadcast_in_dim",
                results=[dtypes.tensor_type(shape, dtype)],
                operands=[v],
                attributes={"broadcast_dimensions": _i64_array(())},
            ).result
        else:
            v = ir.Operation.create(
                "stablehlo.dynamic_broadcast_in_dim",
                results=[dtypes.tensor_type(shape, dtype)],
                operands=[v, shape_value(trace_of(*shape), shape)],
                attributes={"broadcast_dimensions": _i64_array(())},
            ).result
    return Tracer(v, tuple(shape), dtype, scope)


@register_symbolic("broadcast_in_dim")
def _broadcast_in_dim(ctx: RuleContext, x, *, static, shape, dims):
    return ir.Operation.create(
        "stablehlo.dynamic_broadcast_in_dim",
        results=[ctx.out_type()],
        operands=[x, shape_value(trace_of(*shape), tuple(shape))],
        attributes={"broadcast_dimensions": _i64_array(dims)},
    ).results


@register_symbolic("reshape")
def _reshape(ctx: RuleContext, x, *, static, shape):
    return ir.Operation.create(
        "stablehlo.dynamic_reshape",
        results=[ctx.out_type()],
        operands=[x, shape_value(trace_of(*shape), tuple(shape))],
    ).results


@register_symbolic("iota")
def _iota(ctx: RuleContext, *, static, shape, dtype, dim):
    if algebra.is_static(shape):
        return static(ctx, shape=shape, dtype=dtype, dim=dim)
    return ir.Operation.create(
        "stablehlo.dynamic_iota",
        results=[ctx.out_type()],
        operands=[shape_value(trace_of(*shape), tuple(shape))],
        attributes={"iota_dimension": ir.IntegerAttr.get(ir.IntegerType.get_signless(64), dim)},
    ).results


def _real_dynamic_slice(ctx: RuleContext, x, start, limit, strides):
    """`x[start:limit:strides]` with symbolic bounds, of the result type the rule computed."""
    st = trace_of()
    return ir.Operation.create(
        "stablehlo.real_dynamic_slice",
        results=[ctx.out_type()],
        operands=[
            x,
            shape_value(st, tuple(start)),
            shape_value(st, tuple(limit)),
            shape_value(st, tuple(strides)),
        ],
    ).results


@register_symbolic("slice")
def _slice(ctx: RuleContext, x, *, static, start, limit, strides):
    if algebra.is_static(start) and algebra.is_static(limit):
        return static(ctx, x, start=start, limit=limit, strides=strides)
    return _real_dynamic_slice(ctx, x, start, limit, strides)


@register_symbolic("pad")
def _pad(ctx: RuleContext, x, value, *, static, low, high, **params):
    if algebra.is_static(low) and algebra.is_static(high):
        return static(ctx, x, value, low=low, high=high, **params)
    st = trace_of()
    interior = params.get("interior", (0,) * len(low))
    return ir.Operation.create(
        "stablehlo.dynamic_pad",
        results=[ctx.out_type()],
        operands=[
            x,
            value,
            shape_value(st, tuple(low)),
            shape_value(st, tuple(high)),
            shape_value(st, tuple(interior)),
        ],
    ).results


def _vector(st: SymbolicTrace, scalars: list[ir.Value]) -> ir.Value:
    """i64 scalars as one `tensor<Nxi64>`."""
    one = ir.RankedTensorType.get([1], st.i64.element_type)
    parts = [ir.Operation.create("stablehlo.reshape", results=[one], operands=[v]).result
             for v in scalars]  # fmt: skip
    if len(parts) == 1:
        return parts[0]
    return ir.Operation.create(
        "stablehlo.concatenate",
        results=[ir.RankedTensorType.get([len(parts)], st.i64.element_type)],
        operands=parts,
        attributes={"dimension": ir.IntegerAttr.get(ir.IntegerType.get_signless(64), 0)},
    ).result


@register_symbolic("dynamic_slice")
def _dynamic_slice(ctx: RuleContext, x, *starts, static, sizes):
    """A window of symbolic sizes at traced starts: a `dynamic_gather` of one window, which
    clamps the starts into the array as `dynamic_slice` does (and refines to a `gather`)."""
    if algebra.is_static(sizes):
        return static(ctx, x, *starts, sizes=sizes)
    st = trace_of()
    first = []
    for start in starts:
        if ir.RankedTensorType(start.type).element_type != st.i64.element_type:
            start = ir.Operation.create(
                "stablehlo.convert", results=[st.i64], operands=[start]
            ).result
        first.append(start)
    rank = len(sizes)
    dnums = stablehlo.GatherDimensionNumbers.get(
        offset_dims=list(range(rank)),
        collapsed_slice_dims=[],
        operand_batching_dims=[],
        start_indices_batching_dims=[],
        start_index_map=list(range(rank)),
        index_vector_dim=0,
    )
    return ir.Operation.create(
        "stablehlo.dynamic_gather",
        results=[ctx.out_type()],
        operands=[x, _vector(st, first), shape_value(st, tuple(sizes))],
        attributes={"dimension_numbers": dnums, "indices_are_sorted": ir.BoolAttr.get(False)},
    ).results


@register_symbolic("gather")
def _gather(ctx: RuleContext, x, idx, *, static, offset_dims, collapsed, slice_sizes):
    if algebra.is_static(slice_sizes):
        return static(
            ctx, x, idx, offset_dims=offset_dims, collapsed=collapsed, slice_sizes=slice_sizes
        )
    dnums = gather_dimension_numbers(ctx, offset_dims, collapsed)
    return ir.Operation.create(
        "stablehlo.dynamic_gather",
        results=[ctx.out_type()],
        operands=[x, idx, shape_value(trace_of(*slice_sizes), tuple(slice_sizes))],
        attributes={
            "dimension_numbers": dnums,
            "indices_are_sorted": ir.BoolAttr.get(False),
        },
    ).results


def _symbolic_slice_shape(a, *, start, limit, strides, shape):
    return [(tuple(shape), a[1])]


@register("symbolic_slice", shape=_symbolic_slice_shape)
def _lower_symbolic_slice(ctx: RuleContext, x, *, start, limit, strides, shape):
    """A slice whose result shape the caller gives (issue 25): `x[1:]` of a length-b axis is
    `max(0, b - 1)` long, an expression the slice's bounds would spell another way."""
    if algebra.is_static(start) and algebra.is_static(limit):
        return [stablehlo.slice(x, list(start), list(limit), list(strides))]
    return _real_dynamic_slice(ctx, x, start, limit, strides)


def _pairs_value(st: SymbolicTrace, padding) -> ir.Value:
    """(low, high) pairs as a `tensor<Nx2xi64>`."""
    flat = shape_value(st, tuple(v for pair in padding for v in pair))
    return ir.Operation.create(
        "stablehlo.reshape",
        results=[ir.RankedTensorType.get([len(padding), 2], st.i64.element_type)],
        operands=[flat],
    ).result


@register_symbolic("convolution")
def _convolution(ctx: RuleContext, lhs, rhs, *, static, padding, **params):
    """A convolution with symbolic padding (SAME with strides over a symbolic size):
    `stablehlo.dynamic_conv`, the convolution's attributes and the pads as an operand."""
    if all(algebra.is_static(p) for p in padding):
        return static(ctx, lhs, rhs, padding=padding, **params)
    zeros = ((0, 0),) * len(padding)
    conv = static(ctx, lhs, rhs, padding=zeros, **params)[0].owner
    named = [conv.attributes[i] for i in range(len(conv.attributes))]
    attributes = {a.name: a.attr for a in named if a.name != "padding"}
    conv.erase()
    return ir.Operation.create(
        "stablehlo.dynamic_conv",
        results=[ctx.out_type()],
        operands=[lhs, rhs, _pairs_value(trace_of(), padding)],
        attributes=attributes,
    ).results


@register_symbolic("reduce_window")
def _reduce_window(ctx: RuleContext, x, init, *, static, padding, base_dilation, **params):
    """A window reduction with symbolic padding: the padding (and base dilation) as a
    `dynamic_pad` with the initial value, then the windows over the padded array."""
    if all(algebra.is_static(p) for p in padding):
        return static(ctx, x, init, padding=padding, base_dilation=base_dilation, **params)
    shape, dtype = ctx.avals_in[0]
    padded_shape = tuple(
        algebra.dim_max(0, (n - 1) * d + 1) + lo + hi if d != 1 else n + lo + hi
        for n, d, (lo, hi) in zip(shape, base_dilation, padding, strict=True)
    )
    st = trace_of()
    padded = ir.Operation.create(
        "stablehlo.dynamic_pad",
        results=[dtypes.tensor_type(padded_shape, dtype)],
        operands=[
            x,
            init,
            shape_value(st, tuple(lo for lo, _ in padding)),
            shape_value(st, tuple(hi for _, hi in padding)),
            shape_value(st, tuple(d - 1 for d in base_dilation)),
        ],
    ).result
    inner = RuleContext(ctx.op, [(padded_shape, dtype), ctx.avals_in[1]], ctx.avals_out)
    n = len(padding)
    return static(inner, padded, init, padding=((0, 0),) * n, base_dilation=(1,) * n, **params)


@register_symbolic("diff")
def _diff(ctx: RuleContext, x, *, static, axis):
    """x[1:] - x[:-1] along `axis` (not_equal for booleans) of a symbolic shape."""
    shape, dtype = ctx.avals_in[0]
    if algebra.is_static(shape):
        return static(ctx, x, axis=axis)
    st = trace_of()
    ones = shape_value(st, (1,) * len(shape))
    start = tuple(1 if d == axis else 0 for d in range(len(shape)))
    limit = tuple(n - 1 if d == axis else n for d, n in enumerate(shape))

    def part(first, last):
        return ir.Operation.create(
            "stablehlo.real_dynamic_slice",
            results=[ctx.out_type()],
            operands=[x, shape_value(st, first), shape_value(st, last), ones],
        ).result

    hi, lo = part(start, tuple(shape)), part((0,) * len(shape), limit)
    name = "stablehlo.xor" if dtype == np.bool_ else "stablehlo.subtract"
    return [_emit(name, hi, lo)]
