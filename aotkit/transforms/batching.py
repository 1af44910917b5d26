"""Transforms, batching: one rule per StableHLO op, and the evaluator that runs them.

`BATCH_RULES[op_name](ctx, values, batched) -> (values, batched)`: an entry is a value and
whether it carries the batch dimension, always first (size `ctx.size`). An op none of
whose operands is batched is emitted as it was. Elementwise ops broadcast their unbatched
operands; layout ops shift their dimension attributes by one; products and gathers use
StableHLO's batching dimensions; control flow batches its regions (a loop whose
condition is batched runs until every lane is done, a branch whose index is batched runs
every branch and selects). `loop_fallback` is the rule of last resort for ops with no
batched form (a custom call): one iteration per batch element, in a `stablehlo.while`.
"""

from __future__ import annotations

import functools
import re

import numpy as np
from jaxlib.mlir import ir

from aotkit import dtypes
from aotkit.tracing import control as tracer_control
from aotkit.transforms import _hlo as H
from aotkit.transforms import _ir
from aotkit.transforms.control import active_results, select_branch
from aotkit.transforms.core import Env, Evaluator, TransformError, no_rule, op_site, replay

BATCH_RULES: dict = {}


class Ctx:
    __slots__ = ("op", "size", "ev", "env")

    def __init__(self, op, size: int, ev: BatchEvaluator, env: Env):
        self.op = op
        self.size = size
        self.ev = ev
        self.env = env

    def out_avals(self, batched: bool = True) -> list[tuple]:
        """The op's result avals, with the batch dimension in front."""
        lead = (self.size,) if batched else ()
        return [(lead + s, d) for s, d in (_ir.aval(r) for r in self.op.operation.results)]

    def replay(self, values, batched_results=True):
        return replay(self.op, values, self.out_avals(batched_results))

    def batch(self, x, batched: bool):
        """x with the batch dimension: broadcast along a new first dimension if unbatched."""
        if batched:
            return x
        return H.broadcast_in_dim(x, (self.size,) + x.shape, range(1, x.ndim + 1))


class BatchEvaluator(Evaluator):
    transform = "vmap"

    def __init__(self, functions, size: int):
        super().__init__(functions)
        self.size = size

    def outside(self, value):
        return (value, False)

    def apply(self, op, ins, env):
        o = op.operation
        name = o.name
        values = [v for v, _ in ins]
        batched = [b for _, b in ins]
        if not any(batched) and (not len(o.regions) or not _captures_batched(op, env)):
            # A loop or branch that reads values from above is evaluated again by its rule,
            # so the ops inside it that read them are replayed, each valid on its own.
            if name not in _ir.CAPTURING or not _ir.captured(op):
                return [(v, False) for v in replay(op, values)]
        rule = BATCH_RULES.get(name)
        if rule is None:
            raise no_rule("vmap", op, "batching")
        outs, out_batched = rule(Ctx(op, self.size, self, env), values, batched)
        return list(zip(outs, out_batched, strict=True))


def _captures_batched(op, env) -> bool:
    for v in _ir.captured(op):
        try:
            if env[v][1]:
                return True
        except KeyError:
            pass
    return False


def defbatch(*names):
    def register(rule):
        for name in names:
            assert name not in BATCH_RULES, name
            BATCH_RULES[name] = rule
        return rule

    return register


# --- elementwise ---------------------------------------------------------------------------------


def _elementwise(ctx, values, batched):
    """Every operand batched and the op applied to batched shapes. The scalar operands
    StableHLO allows (select's predicate, clamp's bounds) stay scalars when unbatched and
    are broadcast to the others' shape when batched."""
    full = max(
        (v.shape[1:] if b else v.shape for v, b in zip(values, batched, strict=True)), key=len
    )
    out = []
    for v, b in zip(values, batched, strict=True):
        if (v.shape[1:] if b else v.shape) == full:
            out.append(ctx.batch(v, b))
        elif b:
            out.append(H.broadcast_in_dim(v, (ctx.size,) + full, (0,)))
        else:
            out.append(v)
    return ctx.replay(out), [True] * len(ctx.op.operation.results)


ELEMENTWISE = (
    "stablehlo.abs stablehlo.add stablehlo.and stablehlo.atan2 stablehlo.cbrt stablehlo.ceil "
    "stablehlo.clamp stablehlo.compare stablehlo.complex stablehlo.convert "
    "stablehlo.bitcast_convert stablehlo.cosine stablehlo.count_leading_zeros "
    "stablehlo.divide stablehlo.exponential stablehlo.exponential_minus_one stablehlo.floor "
    "stablehlo.exp2 stablehlo.log2 stablehlo.fma "
    "stablehlo.imag stablehlo.is_finite stablehlo.log stablehlo.log_plus_one "
    "stablehlo.logistic stablehlo.maximum stablehlo.minimum stablehlo.multiply "
    "stablehlo.negate stablehlo.not stablehlo.or stablehlo.popcnt stablehlo.power "
    "stablehlo.real stablehlo.reduce_precision stablehlo.remainder "
    "stablehlo.round_nearest_afz stablehlo.round_nearest_even stablehlo.rsqrt "
    "stablehlo.select stablehlo.shift_left stablehlo.shift_right_arithmetic "
    "stablehlo.shift_right_logical stablehlo.sign stablehlo.sine stablehlo.sqrt "
    "stablehlo.subtract stablehlo.tan stablehlo.tanh stablehlo.xor chlo.acos chlo.acosh "
    "chlo.asin chlo.asinh chlo.atan chlo.atanh chlo.conj chlo.cosh chlo.digamma chlo.erf "
    "chlo.erf_inv chlo.erfc chlo.is_inf chlo.is_neg_inf chlo.is_pos_inf chlo.lgamma "
    "chlo.polygamma chlo.sinh chlo.square chlo.tan chlo.zeta chlo.next_after chlo.bessel_i1e"
).split()
for _name in ELEMENTWISE:
    BATCH_RULES[_name] = _elementwise


@defbatch("stablehlo.optimization_barrier")
def _barrier(ctx, values, batched):
    avals = [
        ((ctx.size,) + v.shape[1:] if b else v.shape, v.dtype)
        for v, b in zip(values, batched, strict=True)
    ]
    return replay(ctx.op, values, avals), list(batched)


@defbatch("sdy.sharding_constraint")
def _sharding_constraint(ctx, values, batched):
    """The constraint with one more dimension in front, replicated (JAX's rule without an
    spmd_axis_name): `[{"x"}, {}]` becomes `[{}, {"x"}, {}]`."""
    text = str(_ir.attr(ctx.op, "sharding"))
    dims = re.search(r"\[(?=\{|\])", text)  # the dimension list (an inline mesh's is `["`)
    assert dims is not None, text
    at = dims.end()
    text = text[:at] + ("{}" if text[at] == "]" else "{}, ") + text[at:]
    (aval,) = ctx.out_avals()
    new = H.create(
        "sdy.sharding_constraint", values, [aval], {"sharding": ir.Attribute.parse(text)}
    )
    return H.results(new), [True]


# --- layout --------------------------------------------------------------------------------------


def _shifted(dims) -> tuple[int, ...]:
    return tuple(d + 1 for d in dims)


@defbatch("stablehlo.broadcast_in_dim")
def _broadcast_in_dim(ctx, values, batched):
    (x,) = values
    ((shape, _),) = ctx.out_avals()
    dims = (0,) + _shifted(_ir.i64s(ctx.op, "broadcast_dimensions"))
    return [H.broadcast_in_dim(x, shape, dims)], [True]


@defbatch("stablehlo.reshape")
def _reshape(ctx, values, batched):
    ((shape, _),) = ctx.out_avals()
    return [H.reshape(values[0], shape)], [True]


@defbatch("stablehlo.transpose")
def _transpose(ctx, values, batched):
    perm = (0,) + _shifted(_ir.i64s(ctx.op, "permutation"))
    return [H.transpose(values[0], perm)], [True]


@defbatch("stablehlo.slice")
def _slice(ctx, values, batched):
    op, (x,) = ctx.op, values
    start = (0,) + _ir.i64s(op, "start_indices")
    limit = (ctx.size,) + _ir.i64s(op, "limit_indices")
    strides = (1,) + _ir.i64s(op, "strides")
    return [H.slice_(x, start, limit, strides)], [True]


@defbatch("stablehlo.reverse")
def _reverse(ctx, values, batched):
    return [H.reverse(values[0], _shifted(_ir.i64s(ctx.op, "dimensions")))], [True]


@defbatch("stablehlo.pad")
def _pad(ctx, values, batched):
    op = ctx.op
    (x, value), (bx, bv) = values, batched
    low = (0,) + _ir.i64s(op, "edge_padding_low")
    high = (0,) + _ir.i64s(op, "edge_padding_high")
    interior = (0,) + _ir.i64s(op, "interior_padding")
    x = ctx.batch(x, bx)
    if not bv:
        return [H.pad(x, value, low, high, interior)], [True]
    # A batched padding value: pad with zeros, then put each lane's value where the
    # padding is.
    padded = H.pad(x, H.scalar(0, x.dtype), low, high, interior)
    ones = H.full_like_aval((x.shape, np.dtype(np.bool_)), True)
    inside = H.pad(ones, H.scalar(False, np.bool_), low, high, interior)
    fill = H.broadcast_in_dim(value, padded.shape, (0,))
    return [H.select(inside, padded, fill)], [True]


@defbatch("stablehlo.concatenate")
def _concatenate(ctx, values, batched):
    dim = _ir.int_attr(ctx.op, "dimension") + 1
    xs = [ctx.batch(v, b) for v, b in zip(values, batched, strict=True)]
    return [H.concatenate(xs, dim)], [True]


@defbatch("stablehlo.iota", "stablehlo.constant")
def _never(ctx, values, batched):  # no operands: never reached batched
    return ctx.replay(values, False), [False]


# --- products ------------------------------------------------------------------------------------


def _dot_general_batch(ctx, values, batched, dims: _ir.DotDims):
    (a, b), (ba, bb) = values, batched
    op = ctx.op
    precision = _ir.attr(op, "precision_config") if _ir.has(op, "precision_config") else None
    ((_, dtype),) = ctx.out_avals()
    shift_a = _shifted if ba else tuple
    shift_b = _shifted if bb else tuple
    ac, bc = shift_a(dims.lhs_contract), shift_b(dims.rhs_contract)
    ab, bbatch = shift_a(dims.lhs_batch), shift_b(dims.rhs_batch)
    if ba and bb:
        out = H.dot_general(
            a, b, (ac, bc), ((0,) + ab, (0,) + bbatch), precision=precision, dtype=dtype
        )
        return [out], [True]
    out = H.dot_general(a, b, (ac, bc), (ab, bbatch), precision=precision, dtype=dtype)
    nb = len(dims.lhs_batch)
    if ba:
        # a's dimension 0 is its first free dimension: right after the batch dimensions.
        return [H.moveaxis(out, nb, 0)], [True]
    lhs_free = a.ndim - len(dims.lhs_contract) - len(dims.lhs_batch)
    return [H.moveaxis(out, nb + lhs_free, 0)], [True]


@defbatch("stablehlo.dot_general")
def _dot_general(ctx, values, batched):
    return _dot_general_batch(ctx, values, batched, _ir.dot_dims(ctx.op))


@defbatch("stablehlo.dot")
def _dot(ctx, values, batched):
    a = values[0]
    rank = a.ndim - 1 if batched[0] else a.ndim
    return _dot_general_batch(ctx, values, batched, _ir.DotDims((rank - 1,), (0,), (), ()))


# --- reductions ----------------------------------------------------------------------------------


@defbatch("stablehlo.reduce")
def _reduce(ctx, values, batched):
    op = ctx.op
    n = len(values) // 2
    if any(batched[n:]):
        raise TransformError(
            f"vmap: {op_site(op)} reduces from an init value that is batched (a value its "
            "region reads from outside it is passed in as one); aotkit batches reductions "
            "whose init values, and the values their regions read from outside, are the same "
            "for every batch element"
        )
    operands = [ctx.batch(v, b) for v, b in zip(values[:n], batched[:n], strict=True)]
    dims = _shifted(_ir.i64s(op, "dimensions"))
    attributes = {"dimensions": H.i64_array(dims)}
    return replay(op, operands + list(values[n:]), ctx.out_avals(), attributes), [True] * n


def _window_attrs(op, size_one_front: bool = True) -> dict:
    attrs = {}
    o = op.operation
    rank = len(_ir.aval(o.operands[0])[0])
    for key, default in (
        ("window_dimensions", None),
        ("window_strides", (1,) * rank),
        ("base_dilations", (1,) * rank),
        ("window_dilations", (1,) * rank),
    ):
        if key in o.attributes:
            attrs[key] = H.i64_array((1,) + _ir.i64s(op, key, default))
        elif key == "window_dimensions":
            raise AssertionError("a window op without window_dimensions")
    if "padding" in o.attributes:
        attrs["padding"] = H.i64_elements(((0, 0),) + _ir.padding_pairs(op, "padding", rank))
    return attrs


@defbatch("stablehlo.reduce_window")
def _reduce_window(ctx, values, batched):
    op = ctx.op
    n = len(values) // 2
    if any(batched[n:]):
        raise TransformError(
            f"vmap: {op_site(op)} is a window reduction from a batched init value; aotkit "
            "batches window reductions whose init values are the same for every element"
        )
    operands = [ctx.batch(v, b) for v, b in zip(values[:n], batched[:n], strict=True)]
    outs = replay(op, operands + list(values[n:]), ctx.out_avals(), _window_attrs(op))
    return outs, [True] * n


@defbatch("stablehlo.select_and_scatter")
def _select_and_scatter(ctx, values, batched):
    op = ctx.op
    operand, source, init = values
    if batched[2]:
        raise TransformError(
            f"vmap: {op_site(op)} scatters from a batched init value; aotkit batches "
            "select_and_scatter whose init value is the same for every element"
        )
    operands = [ctx.batch(operand, batched[0]), ctx.batch(source, batched[1]), init]
    return replay(op, operands, ctx.out_avals(), _window_attrs(op)), [True]


@defbatch("stablehlo.sort")
def _sort(ctx, values, batched):
    op = ctx.op
    operands = [ctx.batch(v, b) for v, b in zip(values, batched, strict=True)]
    attributes = {"dimension": _i64(_ir.int_attr(op, "dimension") + 1)}
    return replay(op, operands, ctx.out_avals(), attributes), [True] * len(values)


def _i64(v: int):
    return ir.IntegerAttr.get(ir.IntegerType.get_signless(64), v)


# --- gathers, scatters and dynamic slices --------------------------------------------------------


@defbatch("stablehlo.gather")
def _gather(ctx, values, batched):
    op = ctx.op
    (x, idx), (bx, bi) = values, batched
    d = _ir.gather_dims(op)
    sizes = _ir.i64s(op, "slice_sizes")
    if bx and not bi:
        # The batch is one more window dimension of every slice, the first of the result.
        dims = _ir.GatherDims(
            (0,) + _shifted(d.offset_dims),
            _shifted(d.collapsed_slice_dims),
            _shifted(d.operand_batching_dims),
            d.start_indices_batching_dims,
            _shifted(d.start_index_map),
            d.index_vector_dim,
        )
        return [H.gather(x, idx, dims, (ctx.size,) + sizes)], [True]
    if bi and not bx:
        dims = _ir.GatherDims(
            _shifted(d.offset_dims),
            d.collapsed_slice_dims,
            d.operand_batching_dims,
            _shifted(d.start_indices_batching_dims),
            d.start_index_map,
            d.index_vector_dim + 1,
        )
        return [H.gather(x, idx, dims, sizes)], [True]
    dims = _ir.GatherDims(
        _shifted(d.offset_dims),
        _shifted(d.collapsed_slice_dims),
        (0,) + _shifted(d.operand_batching_dims),
        (0,) + _shifted(d.start_indices_batching_dims),
        _shifted(d.start_index_map),
        d.index_vector_dim + 1,
    )
    return [H.gather(x, idx, dims, (1,) + sizes)], [True]


@defbatch("stablehlo.scatter")
def _scatter(ctx, values, batched):
    op = ctx.op
    n = (len(values) - 1) // 2
    operands = [ctx.batch(v, b) for v, b in zip(values[:n], batched[:n], strict=True)]
    idx = ctx.batch(values[n], batched[n])
    updates = [ctx.batch(v, b) for v, b in zip(values[n + 1 :], batched[n + 1 :], strict=True)]
    d = _ir.scatter_dims(op)
    dims = _ir.ScatterDims(
        _shifted(d.update_window_dims),
        _shifted(d.inserted_window_dims),
        (0,) + _shifted(d.input_batching_dims),
        (0,) + _shifted(d.scatter_indices_batching_dims),
        _shifted(d.scatter_dims_to_operand_dims),
        d.index_vector_dim + 1,
    )
    attributes = {"scatter_dimension_numbers": H.scatter_dimension_numbers(dims)}
    return replay(op, operands + [idx] + updates, ctx.out_avals(), attributes), [True] * n


def _stack_starts(ctx, starts, batched):
    """The start indices of a dynamic slice as one (size, n) index array."""
    dtype = functools.reduce(dtypes.promote_types, [s.dtype for s in starts])
    cols = []
    for s, b in zip(starts, batched, strict=True):
        s = H.convert(s, dtype)
        s = s if b else H.broadcast_in_dim(s, (ctx.size,), ())
        cols.append(H.reshape(s, (ctx.size, 1)))
    return H.concatenate(cols, 1)


@defbatch("stablehlo.dynamic_slice")
def _dynamic_slice(ctx, values, batched):
    x, starts = values[0], values[1:]
    bx, bstarts = batched[0], batched[1:]
    sizes = _ir.i64s(ctx.op, "slice_sizes")
    if not any(bstarts):
        zero = H.scalar(0, starts[0].dtype if starts else np.int32)
        return [H.dynamic_slice(x, [zero, *starts], (ctx.size,) + sizes)], [True]
    x = ctx.batch(x, bx)
    idx = _stack_starts(ctx, starts, bstarts)
    n = len(starts)
    dims = _ir.GatherDims(
        offset_dims=tuple(range(1, n + 1)),
        collapsed_slice_dims=(),
        operand_batching_dims=(0,),
        start_indices_batching_dims=(0,),
        start_index_map=tuple(range(1, n + 1)),
        index_vector_dim=1,
    )
    return [H.gather(x, idx, dims, (1,) + sizes)], [True]


@defbatch("stablehlo.dynamic_update_slice")
def _dynamic_update_slice(ctx, values, batched):
    x, u, starts = values[0], values[1], values[2:]
    bx, bu, bstarts = batched[0], batched[1], batched[2:]
    x, u = ctx.batch(x, bx), ctx.batch(u, bu)
    if not any(bstarts):
        zero = H.scalar(0, starts[0].dtype if starts else np.int32)
        return [H.dynamic_update_slice(x, u, [zero, *starts])], [True]
    # A scatter with a batch dimension; dynamic_update_slice clamps its starts so the
    # update fits, where a scatter would skip it: clamp first.
    n = len(starts)
    clamped = []
    for k, s in enumerate(starts):
        top = x.shape[k + 1] - u.shape[k + 1]
        clamped.append(H.minimum(H.maximum(s, H.like(s, 0)), H.like(s, top)))
    idx = _stack_starts(ctx, clamped, bstarts)
    dims = _ir.ScatterDims(
        update_window_dims=tuple(range(1, n + 1)),
        inserted_window_dims=(),
        input_batching_dims=(0,),
        scatter_indices_batching_dims=(0,),
        scatter_dims_to_operand_dims=tuple(range(1, n + 1)),
        index_vector_dim=1,
    )
    return [H.scatter(x, idx, u, dims, "replace", unique=True)], [True]


# --- control flow --------------------------------------------------------------------------------


def _is_batched(env):
    def check(v):
        try:
            return bool(env[v][1])
        except KeyError:
            return False

    return check


@defbatch("stablehlo.while")
def _while(ctx, values, batched):
    op = ctx.op
    o = op.operation
    ev = ctx.ev
    cond_block, body_block = o.regions[0].blocks[0], o.regions[1].blocks[0]
    outer = _is_batched(ctx.env)
    flags = list(batched)
    while True:
        out = active_results(body_block, flags, outer, zero_ops=(), floats_only=False)
        grown = [a or b for a, b in zip(flags, out, strict=True)]
        if grown == flags:
            break
        flags = grown
    (pred_batched,) = active_results(cond_block, flags, outer, zero_ops=(), floats_only=False)
    if pred_batched:
        flags = [True] * len(values)  # lanes finish at different iterations
    init = [ctx.batch(v, b) if f else v for v, b, f in zip(values, batched, flags, strict=True)]

    def entries(carry):
        return list(zip(carry, flags, strict=True))

    def lane_pred(carry):
        (pred,) = ev.run_block(cond_block, entries(carry), Env(ctx.env))
        return pred

    def cond_fn(carry):
        pred, b = lane_pred(carry)
        if not b:
            return pred
        return H.reduce(pred, H.scalar(False, np.bool_), (0,), "or")

    def body_fn(carry):
        outs = ev.run_block(body_block, entries(carry), Env(ctx.env))
        new = [v if b or not f else ctx.batch(v, b) for (v, b), f in zip(outs, flags, strict=True)]
        if not pred_batched:
            return new
        pred, _ = lane_pred(carry)
        return [
            H.select(H.broadcast_in_dim(pred, n.shape, (0,)), n, c)
            for n, c in zip(new, carry, strict=True)
        ]

    result = tracer_control.while_loop(cond_fn, body_fn, init)
    return result, flags


@defbatch("stablehlo.case", "stablehlo.if")
def _branches(ctx, values, batched):
    op = ctx.op
    o = op.operation
    ev = ctx.ev
    blocks = [r.blocks[0] for r in o.regions]
    outer = _is_batched(ctx.env)
    flags = [False] * len(o.results)
    for block in blocks:
        found = active_results(block, [], outer, zero_ops=(), floats_only=False)
        flags = [a or b for a, b in zip(flags, found, strict=True)]

    def run(block):
        outs = ev.run_block(block, [], Env(ctx.env))
        return [ctx.batch(v, b) if f else v for (v, b), f in zip(outs, flags, strict=True)]

    selector, selector_batched = values[0], batched[0]
    if not selector_batched:
        result = select_branch(o.name, selector, [functools.partial(run, b) for b in blocks])
        return result, flags
    # Each lane takes its own branch: run them all, batched, and select per lane.
    outs = [[ctx.batch(v, f) for v, f in zip(run(b), flags, strict=True)] for b in blocks]
    if o.name == "stablehlo.if":
        chosen = [
            H.select(H.broadcast_in_dim(selector, t.shape, (0,)), t, f)
            for t, f in zip(outs[0], outs[1], strict=True)
        ]
        return chosen, [True] * len(chosen)
    last = len(blocks) - 1
    outside = H.logical_or(H.compare(selector, 0, "LT"), H.compare(selector, last, "GT"))
    index = H.select(outside, H.like(selector, last), selector)
    chosen = outs[last]
    for k in range(last - 1, -1, -1):
        hit = H.compare(index, k, "EQ")
        chosen = [
            H.select(H.broadcast_in_dim(hit, c.shape, (0,)), v, c)
            for v, c in zip(outs[k], chosen, strict=True)
        ]
    return chosen, [True] * len(chosen)


# --- the rule of last resort ---------------------------------------------------------------------


def loop_fallback(ctx, values, batched):
    """The op once per batch element, in a loop: correct for any op, as fast as the op
    itself times the batch size."""
    op = ctx.op
    avals = [_ir.aval(r) for r in op.operation.results]
    outs = [H.zeros((ctx.size,) + s, d) for s, d in avals]
    i32 = np.dtype(np.int32)

    def cond_fn(carry):
        return H.compare(carry[0], ctx.size, "LT")

    def body_fn(carry):
        i, acc = carry[0], carry[1:]
        lane = [_row(v, i) if b else v for v, b in zip(values, batched, strict=True)]
        res = replay(op, lane)
        return [H.add(i, 1)] + [_put_row(a, r, i) for a, r in zip(acc, res, strict=True)]

    result = tracer_control.while_loop(cond_fn, body_fn, [H.scalar(0, i32)] + outs)
    return result[1:], [True] * len(avals)


def _row(x, i):
    zeros = [H.scalar(0, np.int32)] * (x.ndim - 1)
    return H.reshape(H.dynamic_slice(x, [i, *zeros], (1,) + x.shape[1:]), x.shape[1:])


def _put_row(acc, row, i):
    zeros = [H.scalar(0, np.int32)] * row.ndim
    return H.dynamic_update_slice(acc, H.reshape(row, (1,) + row.shape), [i, *zeros])


# Batching rules by custom call target (aotkit.transforms.linalg's LAPACK calls); any other
# target runs once per batch element.
CUSTOM_CALLS: dict = {}


def _custom_call(ctx, values, batched):
    rule = CUSTOM_CALLS.get(_ir.custom_call_target(ctx.op), loop_fallback)
    return rule(ctx, values, batched)


BATCH_RULES["stablehlo.custom_call"] = _custom_call
BATCH_RULES["stablehlo.rng_bit_generator"] = loop_fallback
BATCH_RULES["stablehlo.fft"] = loop_fallback
BATCH_RULES["stablehlo.triangular_solve"] = loop_fallback
BATCH_RULES["stablehlo.cholesky"] = loop_fallback


# --- evaluation entry point ----------------------------------------------------------------------


def vmap_function(functions, func_op, values, batched, size: int):
    """Runs `func_op` on values (batched ones with the batch dimension first); returns
    (values, batched) of its results."""
    ev = BatchEvaluator(functions, size)
    outs = ev.run_function(func_op, list(zip(values, batched, strict=True)))
    return [v for v, _ in outs], [b for _, b in outs]
