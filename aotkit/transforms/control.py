"""Transforms, control flow: `stablehlo.while`, `stablehlo.case` and `stablehlo.if`.

These rules see regions: they evaluate each region again with the transform's own
evaluator, inside a new op built with the tracer's structured control flow
(`aotkit.tracing.control`), and carry the values a region captures from above as the
regions of the new op capture them.

- Forward mode: a loop carries the tangents of its float carries beside them (which ones
  is a fixpoint over the body, so a tangent that stays zero is not carried); a branch
  returns its tangents beside its results.
- Reverse mode: a loop with a trip count its ops fix (a counter compared with a constant)
  stores what its backward loop reads, as JAX's scan does: each iteration linearizes the
  body and stacks the primal values the linear program uses (its residuals), except what
  the backward loop can have without a stack (values the same at every iteration, the
  counter, scan's row of its input); the transpose runs a loop backwards over the rows,
  transposing the recorded program at each. Scan's stacked outputs and inputs keep their
  cotangents out of the backward loop's carry where their rows are written once. With
  `checkpoint_loops` (or a body whose linear program holds a loop or branch of its own),
  the loop stores its carries instead, every k-th, and differentiates the body again at
  each (recomputing its intermediates). A loop whose trip count depends on the data is
  an error that says what to do. A branch is transposed by a branch of the same index
  whose regions transpose the taken region.
- Batching: in `aotkit.transforms.batching`.
"""

from __future__ import annotations

import numpy as np
from jaxlib.mlir import ir

from aotkit import dtypes, modules
from aotkit.tracing import control as tracer_control
from aotkit.tracing.core import Tracer
from aotkit.transforms import _hlo as H
from aotkit.transforms import _ir
from aotkit.transforms.core import (
    Env,
    Equation,
    Forward,
    Linear,
    LinVar,
    LoopPolicy,
    Tape,
    TransformError,
    is_float,
    op_site,
    replay,
    transpose,
)
from aotkit.transforms.jvp import CONTROL, ZERO, JVPEvaluator

# --- which values a region makes nonzero ---------------------------------------------------------


def active_results(block, active_args, is_active_outer, *, zero_ops=ZERO, floats_only=True):
    """Per value the block returns: whether it depends on an active input (a block
    argument marked in `active_args`, or a captured value `is_active_outer` says is).
    With `zero_ops`, results of those ops are never active (their tangent is zero); with
    `floats_only`, only float values are (integers carry no tangent)."""
    active = set()
    for arg, flag in zip(block.arguments, active_args, strict=True):
        if flag:
            active.add(arg)

    def is_active(v):
        return v in active or (v not in local and is_active_outer(v))

    local = set(block.arguments)
    ops = list(block.operations)
    for op in ops[:-1]:
        o = op.operation
        hit = any(is_active(v) for v in o.operands)
        if not hit and len(o.regions):
            hit = any(is_active(v) for v in _ir.captured(op))
        for r in o.results:
            local.add(r)
            if hit and o.name not in zero_ops:
                if not floats_only or is_float(_ir.aval(r)[1]):
                    active.add(r)
    return [is_active(v) for v in ops[-1].operation.operands]


def _outer(env: Env, index: int):
    """`is_active_outer` for an environment of (primal, tangent) or (value, batched)."""

    def active(v):
        try:
            entry = env[v]
        except KeyError:
            return False
        flag = entry[index]
        return flag is not None and flag is not False

    return active


def _zeros_like(p):
    return H.zeros(p.shape, p.dtype)


# --- forward mode --------------------------------------------------------------------------------


def _while(ctx, primals, tangents):
    if isinstance(ctx.T, Tape):
        return _while_reverse(ctx, primals, tangents)
    op = ctx.op
    o = op.operation
    ev = ctx.ev
    cond_block, body_block = o.regions[0].blocks[0], o.regions[1].blocks[0]
    n = len(primals)
    outer = _outer(ctx.env, 1)
    carried = [t is not None and is_float(p.dtype) for p, t in zip(primals, tangents, strict=True)]
    while True:
        out = active_results(body_block, carried, outer)
        grown = [a or b for a, b in zip(carried, out, strict=True)]
        if grown == carried:
            break
        carried = grown
    which = [i for i in range(n) if carried[i]]
    init = list(primals) + [
        tangents[i] if tangents[i] is not None else _zeros_like(primals[i]) for i in which
    ]

    def entries(carry):
        ts = [None] * n
        for j, i in enumerate(which):
            ts[i] = carry[n + j]
        return list(zip(carry[:n], ts, strict=True))

    def cond_fn(carry):
        (pred,) = ev.run_block(cond_block, entries(carry), Env(ctx.env))
        return pred[0]

    def body_fn(carry):
        outs = ev.run_block(body_block, entries(carry), Env(ctx.env))
        ps = [p for p, _ in outs]
        ts = [outs[i][1] if outs[i][1] is not None else _zeros_like(ps[i]) for i in which]
        return ps + ts

    result = tracer_control.while_loop(cond_fn, body_fn, init)
    ts = [None] * n
    for j, i in enumerate(which):
        ts[i] = result[n + j]
    return list(zip(result[:n], ts, strict=True))


def _branches(ctx, primals, tangents):
    """case / if in forward mode (and their primal half in reverse mode)."""
    op = ctx.op
    o = op.operation
    ev = ctx.ev
    if isinstance(ctx.T, Tape):
        return _branches_reverse(ctx, primals, tangents)
    blocks = [r.blocks[0] for r in o.regions]
    outer = _outer(ctx.env, 1)
    active = [False] * len(o.results)
    for block in blocks:
        found = active_results(block, [], outer)
        active = [a or b for a, b in zip(active, found, strict=True)]
    which = [i for i, a in enumerate(active) if a]

    def branch(block):
        def run():
            outs = ev.run_block(block, [], Env(ctx.env))
            ps = [p for p, _ in outs]
            return ps + [
                outs[i][1] if outs[i][1] is not None else _zeros_like(ps[i]) for i in which
            ]

        return run

    result = select_branch(o.name, primals[0], [branch(b) for b in blocks])
    m = len(o.results)
    ts = [None] * m
    for j, i in enumerate(which):
        ts[i] = result[m + j]
    return list(zip(result[:m], ts, strict=True))


def select_branch(op_name: str, selector, fns):
    if op_name == "stablehlo.if":
        return tracer_control.cond(selector, fns[0], fns[1])
    # stablehlo.case runs its last branch for any index out of range (a negative one too,
    # which aotkit.lax.switch would clamp to 0).
    last = len(fns) - 1
    outside = H.logical_or(H.compare(selector, 0, "LT"), H.compare(selector, last, "GT"))
    return tracer_control.switch(H.select(outside, H.like(selector, last), selector), fns)


# --- reverse mode --------------------------------------------------------------------------------


def _primal_env(ev, env: Env, values) -> Env:
    """An environment where the captured `values` are their primals with zero tangents."""
    primal = Env()
    for v in values:
        primal[v] = (ev.entry(env, v)[0], None)
    return primal


def _linear_env(ev, env: Env, values, primals=None) -> tuple[Env, list]:
    """An environment where each captured float value with a tangent has a fresh LinVar
    (and its primal from `primals`, when given)."""
    lin = Env()
    found = []
    for i, v in enumerate(values):
        p, t = ev.entry(env, v)
        if primals is not None:
            p = primals[i]
        var = LinVar(p.shape, p.dtype) if t is not None and is_float(p.dtype) else None
        lin[v] = (p, var)
        found.append(var)
    return lin, found


def _while_reverse(ctx, primals, tangents):
    op = ctx.op
    o = op.operation
    ev = ctx.ev
    n = len(primals)
    cond_block, body_block = o.regions[0].blocks[0], o.regions[1].blocks[0]
    captured = _ir.captured(op)
    cap_tangents = [ctx.ev.entry(ctx.env, v)[1] for v in captured]
    if all(t is None for t in list(tangents) + cap_tangents):
        return _primal_while(ctx, primals, captured)
    policy: LoopPolicy = ctx.T.loop_policy

    def constant_value(v):
        c = _ir.constant_of(v)
        if c is None:
            try:
                entry = ctx.env[v]
            except KeyError:
                return None
            c = _ir.constant_of(entry[0].value)
        return c

    trips = _ir.trip_count(op, constant_value)
    if policy.max_trip_count is None and _ir.has(op, modules.TRIP_BOUND):
        # The bound the loop's maker recorded, where the user gave none.
        policy = LoopPolicy(policy.checkpoint, _ir.int_attr(op, modules.TRIP_BOUND))
    bound = policy.max_trip_count
    if trips is None and bound is None:
        raise TransformError(
            f"{ev.transform}: {op_site(op)} is a while loop whose trip count depends on the "
            "data, and reverse-mode differentiation stores one carry per iteration; write it "
            "as a loop with a static trip count (aotkit.lax.fori_loop or scan with constant "
            "bounds, `for i in range(n)` with a static n), give a bound with "
            "max_trip_count=N (the gradient is NaN if the loop runs longer), or "
            "differentiate it in forward mode (aotkit.jvp, aotkit.jacfwd)"
        )
    capacity = trips if trips is not None else bound
    every = policy.segment(capacity)
    rows = max(1, -(-capacity // every))
    if every == 1:
        try:
            return _while_reverse_stored(ctx, primals, tangents, captured, trips, rows, policy)
        except _Unstorable:
            pass
    # Forward: the loop as it was, storing the carry that enters every `every`-th iteration
    # (every one without checkpoints), but for carries the backward loop can have without
    # a stack (`_stand_ins`).
    penv = _primal_env(ctx.ev, ctx.env, captured)
    primal_ev = JVPEvaluator(ev.functions, Forward(), ev.transform)
    kept: list[int] = []
    stand_ins: list = [None] * n

    def cond_fn(carry):
        (pred,) = primal_ev.run_block(cond_block, [(p, None) for p in carry[:n]], Env(penv))
        return pred[0]

    def body_fn(args, loop):
        ps, i = args[:n], args[n]
        outs = primal_ev.run_block(body_block, [(p, None) for p in ps], Env(penv))
        new_ps = [p for p, _ in outs]
        kept[:] = _stand_ins(loop.block, cond_block, ps, new_ps, primals, stand_ins)
        slot = H.minimum(H.div(i, H.like(i, every)) if every > 1 else i, H.like(i, rows - 1))
        first = H.compare(H.rem(i, H.like(i, every)), 0, "EQ") if every > 1 else None
        new_st = []
        for k in kept:
            stack = loop.add_carry((rows,) + ps[k].shape, ps[k].dtype)
            row = ps[k] if first is None else H.select(first, ps[k], _load(stack, slot))
            new_st.append(_store(stack, row, slot))
        return new_ps + [H.add(i, 1)] + new_st

    result = _counted_loop(primals, cond_fn, body_fn)
    outs, count = result[:n], result[n]
    stacks = [None] * n
    for k, stack in zip(kept, result[n + 1 :], strict=True):
        stacks[k] = stack
    floats = [is_float(p.dtype) for p in primals]
    params = {
        "op": op,
        "functions": ev.functions,
        "transform": ev.transform,
        "stacks": stacks,
        "stand_ins": stand_ins,
        "avals": [(p.shape, p.dtype) for p in primals],
        "count": count,
        "trips": trips,
        "every": every,
        "captured": captured,
        "env": ctx.env,
        "floats": floats,
        "policy": policy,
    }
    args = list(tangents) + cap_tangents
    return _bind_linear_loop(
        ctx, _WHILE_REVERSE_PRIMS, _while_transpose, args, params, primals, outs, floats
    )


def _counted_loop(primals, cond, body) -> list:
    """One while loop over `primals` and an int32 count from 0, whose `body(carry, loop)`
    may add carries (`loop.add_carry`, stacks of what it stores): its results, in order."""
    carry = [tracer_control.Carry(p.shape, p.dtype, None, p, "carry") for p in primals]
    carry.append(tracer_control.Carry((), _I32, None, H.scalar(0, _I32), "i"))
    result, _ = tracer_control.carried_while("while_loop", carry, cond, body)
    return result


def _bind_linear_loop(ctx, prims: dict, transpose, args, params, primals, outs, floats):
    """The loop's linear part as one equation on the tape (a `Linear` primitive per argument
    count, kept in `prims`, transposed by `transpose`): (primal, tangent or None) per carry."""
    n = len(primals)
    prim = prims.get(len(args))
    if prim is None:
        prim = prims[len(args)] = Linear(
            "while", tuple(range(len(args))), _no_emit, transpose, None, n
        )
    lin_outs = ctx.T.bind(prim, args, params, aval=[(p.shape, p.dtype) for p in primals])
    return [(p, t if f else None) for p, t, f in zip(outs, lin_outs, floats, strict=True)]


_I32 = np.dtype(np.int32)
_WHILE_REVERSE_PRIMS: dict[int, Linear] = {}
_CASE_REVERSE_PRIMS: dict[int, Linear] = {}


def _no_emit(*args, **params):
    raise AssertionError("a reverse-mode loop is never emitted forward")


def _store(stack, value, i):
    starts = [i] + [H.scalar(0, _I32) for _ in value.shape]
    return H.dynamic_update_slice(stack, H.reshape(value, (1,) + value.shape), starts)


def _load(stack, i):
    starts = [i] + [H.scalar(0, _I32) for _ in stack.shape[1:]]
    row = H.dynamic_slice(stack, starts, (1,) + stack.shape[1:])
    return H.reshape(row, stack.shape[1:])


def _carries_at(stacks, stand_ins, avals, j) -> list:
    """The carry stored at row `j` of `stacks`: each stacked carry's row, else its stand-in
    (zeros where that is None)."""
    return [
        _load(s, j) if s is not None else (p if p is not None else H.zeros(*aval))
        for s, p, aval in zip(stacks, stand_ins, avals, strict=True)
    ]


def _stand_ins(body, cond_block, ps, new_ps, primals, stand_ins) -> list[int]:
    """The carries the loop must store (their indices). Not stored: a carry the body passes
    on unchanged (its stand-in is its init), and one the body only writes slices into, its
    next value, that the condition does not read (scan's stacked output: its value reaches
    no derivative, its stand-in is zeros, None in `stand_ins`)."""
    uses: dict = {}
    for inner in body.operations:
        o = inner.operation
        for v in list(o.operands) + (_ir.captured(inner) if len(o.regions) else []):
            uses.setdefault(v, []).append(o)
    read_by_cond = {v for o in _all_ops(cond_block) for v in o.operands}
    kept = []
    for k, (p, new) in enumerate(zip(ps, new_ps, strict=True)):
        if new.value == p.value:
            stand_ins[k] = primals[k]
            continue
        o = _owner(new.value)
        users = uses.get(p.value, [])
        if (
            o is not None
            and o.name == "stablehlo.dynamic_update_slice"
            and o.operands[0] == p.value
            and users == [o]
            and cond_block.arguments[k] not in read_by_cond
        ):
            continue
        kept.append(k)
    return kept


def _all_ops(block):
    for inner in block.operations:
        yield inner.operation
        for region in inner.operation.regions:
            for b in region.blocks:
                yield from _all_ops(b)


def _primal_while(ctx, primals, captured):
    """The loop with nothing to differentiate: its primal, evaluated again."""
    o = ctx.op.operation
    ev = JVPEvaluator(ctx.ev.functions, Forward(), ctx.ev.transform)
    penv = _primal_env(ctx.ev, ctx.env, captured)
    cond_block, body_block = o.regions[0].blocks[0], o.regions[1].blocks[0]

    def cond_fn(carry):
        return ev.run_block(cond_block, [(p, None) for p in carry], Env(penv))[0][0]

    def body_fn(carry):
        return [p for p, _ in ev.run_block(body_block, [(p, None) for p in carry], Env(penv))]

    return [(p, None) for p in tracer_control.while_loop(cond_fn, body_fn, list(primals))]


def _while_transpose(
    cts,
    *args,
    op,
    functions,
    transform,
    stacks,
    stand_ins,
    avals,
    count,
    trips,
    every,
    captured,
    env,
    floats,
    policy,
):
    """The loop backwards: from the last carry to the first, the body's VJP at that carry
    maps the carry's cotangent to the previous one's and adds up the captured values'
    cotangents. With checkpoints (`every` > 1), each segment between two stored carries is
    run forward again first, its carries kept for the way back. A carry without a stack
    (None in `stacks`) is its stand-in."""
    o = op.operation
    body_block = o.regions[1].blocks[0]
    n = len(floats)
    cap_args = args[n:]
    which = [i for i in range(n) if floats[i]]
    cap_which = [j for j, a in enumerate(cap_args) if isinstance(a, LinVar)]
    shapes = avals
    n_ct = len(which)

    def step_back(ps, ct, acc):
        """The body's VJP at carry `ps`: (the previous carry's cotangent, acc + captured
        cotangents)."""
        tape = Tape(policy)
        bev = JVPEvaluator(functions, tape, transform)
        lin_env, cap_vars = _linear_env(bev, env, captured)
        lin_in = [LinVar(p.shape, p.dtype) if floats[k] else None for k, p in enumerate(ps)]
        outs = bev.run_block(body_block, list(zip(ps, lin_in, strict=True)), lin_env)
        seeds = {}
        for k, g in zip(which, ct, strict=True):
            var = outs[k][1]
            if isinstance(var, LinVar):
                seeds[var] = _add_seed(seeds.get(var), g)
        found = transpose(tape.tape, seeds)
        new_ct = [_or_zeros(found.get(lin_in[k]), shapes[k]) for k in which]
        new_acc = []
        for a, j in zip(acc, cap_which, strict=True):
            g = found.get(cap_vars[j])
            new_acc.append(a if g is None else H.add(a, g))
        return new_ct, new_acc

    def backward_over(rows, last, ct, acc):
        """Steps back from row `last` of the carry stacks `rows` to row 0."""

        def body_fn(carry):
            j = carry[-1]
            ps = _carries_at(rows, stand_ins, avals, j)
            new_ct, new_acc = step_back(ps, carry[:n_ct], carry[n_ct:-1])
            return new_ct + new_acc + [H.sub(j, 1)]

        result = tracer_control.while_loop(
            lambda carry: H.compare(carry[-1], 0, "GE"), body_fn, list(ct) + list(acc) + [last]
        )
        return result[:n_ct], result[n_ct:-1]

    ct0 = [cts[i] if cts[i] is not None else H.zeros(*shapes[i]) for i in which]
    acc0 = [H.zeros(cap_args[j].shape, cap_args[j].dtype) for j in cap_which]
    # A static trip count's arithmetic is done here: folded, not left to aotkit-simplify.
    total = H.scalar(trips, _I32) if trips is not None else count
    if every == 1:
        last = H.scalar(trips - 1, _I32) if trips is not None else H.sub(count, 1)
        ct, acc = backward_over(stacks, last, ct0, acc0)
    else:
        primal_ev = JVPEvaluator(functions, Forward(), transform)
        penv = _primal_env(primal_ev, env, captured)
        if trips is not None:
            last_segment = H.scalar((trips + every - 1) // every - 1, _I32)
        else:
            last_segment = H.sub(H.div(H.add(total, every - 1), H.like(total, every)), 1)

        def segment_fn(carry):
            s = carry[-1]
            start = H.mul(s, H.like(s, every))
            length = H.minimum(H.like(s, every), H.sub(total, start))
            kept = [k for k in range(n) if stacks[k] is not None]
            local = [H.zeros((every,) + shapes[k][0], shapes[k][1]) for k in kept]
            first = _carries_at(stacks, stand_ins, avals, s)
            m = len(kept)

            def fwd(c):
                ps, ls, j = c[:n], c[n : n + m], c[n + m]
                new_ls = [_store(lst, ps[k], j) for lst, k in zip(ls, kept, strict=True)]
                outs = primal_ev.run_block(body_block, [(p, None) for p in ps], Env(penv))
                return [p for p, _ in outs] + new_ls + [H.add(j, 1)]

            rows = tracer_control.while_loop(
                lambda c: H.compare(c[-1], length, "LT"),
                fwd,
                first + local + [H.scalar(0, _I32)],
            )[n : n + m]
            filled = [None] * n
            for k, row in zip(kept, rows, strict=True):
                filled[k] = row
            ct, acc = backward_over(filled, H.sub(length, 1), carry[:n_ct], carry[n_ct:-1])
            return list(ct) + list(acc) + [H.sub(s, 1)]

        result = tracer_control.while_loop(
            lambda carry: H.compare(carry[-1], 0, "GE"),
            segment_fn,
            ct0 + acc0 + [last_segment],
        )
        ct, acc = result[:n_ct], result[n_ct:-1]
    if trips is None:
        # A loop that ran past max_trip_count overwrote its last stored carry: its
        # cotangents are NaN, never a wrong number.
        over = H.compare(count, H.like(count, policy.max_trip_count), "GT")
        ct = [H.select(over, H.like(g, np.nan), g) for g in ct]
        acc = [H.select(over, H.like(g, np.nan), g) for g in acc]
    out = [None] * len(args)
    for k, g in zip(which, ct, strict=True):
        out[k] = g
    for j, g in zip(cap_which, acc, strict=True):
        out[n + j] = g
    return out


# --- reverse mode, storing what the backward loop reads -------------------------------------------


class _Unstorable(Exception):
    """The body's linear program holds control flow of its own (a nested loop or branch,
    whose transpose reads a whole environment), or values inside containers the backward
    loop would not find: the loop stores its carries instead."""


class _Stored:
    """What a forward loop keeps for its backward one, as JAX's scan does: the body's linear
    program as the forward loop recorded it (`tape`, its carries' and captured values'
    variables), and where each primal value that program reads is found after the loop:
    `stacked` values (one row per iteration), `fixed` ones (a carry the body passes on
    unchanged is its init; a value from above the loop is itself), and values the body
    computes from fixed ones alone, `hoisted` (their ops, run once more before the
    backward loop); integer scalars `counted` from the iteration, values `remade` from
    those (their ops, run again in the backward loop). `same`: the carries the body passes
    on unchanged; `written`, `read`: the carries of which each iteration writes (reads)
    one row, a different one each time (scan's stacked outputs and inputs)."""

    __slots__ = (
        "tape",
        "lin_in",
        "lin_out",
        "cap_vars",
        "stacked",
        "fixed",
        "hoisted",
        "same",
        "written",
        "read",
        "counted",
        "remade",
    )

    def __init__(self):
        self.tape = []
        self.lin_in = []
        self.lin_out = []
        self.cap_vars = []
        self.stacked: list = []  # ir.Value, in the order of the stacks
        self.fixed: dict = {}  # ir.Value -> Tracer (None: the value itself, from above)
        self.hoisted: list = []  # ops of the body, in order
        self.same: set[int] = set()
        self.written: set[int] = set()
        self.read: set[int] = set()
        self.counted: dict = {}  # ir.Value -> (a, b): a + b * t at iteration t
        self.remade: list = []  # ops of the body the backward loop runs again, in order


def _while_reverse_stored(ctx, primals, tangents, captured, trips, rows, policy: LoopPolicy):
    """Reverse mode storing the body's residuals: the forward loop linearizes the body at
    each iteration and stacks the primal values the linear program reads; the backward
    loop transposes that program on the stored rows (nothing recomputed)."""
    op = ctx.op
    o = op.operation
    ev = ctx.ev
    n = len(primals)
    cond_block, body_block = o.regions[0].blocks[0], o.regions[1].blocks[0]
    cap_tangents = [ev.entry(ctx.env, v)[1] for v in captured]
    floats = [is_float(p.dtype) for p in primals]
    penv = _primal_env(ev, ctx.env, captured)
    primal_ev = JVPEvaluator(ev.functions, Forward(), ev.transform)
    stored = _Stored()

    def cond(args):
        (pred,) = primal_ev.run_block(cond_block, [(p, None) for p in args[:n]], Env(penv))
        return pred[0]

    def body(args, loop):
        ps, i = args[:n], args[n]
        tape = Tape(policy)
        bev = JVPEvaluator(ev.functions, tape, ev.transform)
        lin_env, cap_vars = _linear_env(bev, ctx.env, captured)
        lin_in = [LinVar(p.shape, p.dtype) if f else None for p, f in zip(ps, floats, strict=True)]
        outs = bev.run_block(body_block, list(zip(ps, lin_in, strict=True)), lin_env)
        new_ps = [p for p, _ in outs]
        residuals = {}
        for eq in tape.tape:
            for value in eq.params.values():
                if isinstance(value, Tracer | Env | list | dict):
                    raise _Unstorable
            for a in eq.args:
                if isinstance(a, Tracer):
                    residuals.setdefault(a.value, a)
                elif isinstance(a, list | tuple | dict):
                    raise _Unstorable
        _place(stored, loop.block, ps, new_ps, primals, residuals, i)
        if trips is not None:
            _rows_once(stored, loop.block, ps, new_ps, primals, i, trips)
        slot = i if trips is not None else H.minimum(i, H.like(i, rows - 1))
        stacks = []
        for v in stored.stacked:
            r = residuals[v]
            stacks.append(_store(loop.add_carry((rows,) + r.shape, r.dtype), r, slot))
        stored.tape = tape.tape
        stored.lin_in = lin_in
        stored.lin_out = [t for _, t in outs]
        stored.cap_vars = cap_vars
        return new_ps + [H.add(i, 1)] + stacks

    result = _counted_loop(primals, cond, body)
    outs, count, stacks = result[:n], result[n], result[n + 1 :]
    params = {
        "stored": stored,
        "stacks": stacks,
        "count": count,
        "trips": trips,
        "floats": floats,
        "policy": policy,
    }
    args = list(tangents) + cap_tangents
    return _bind_linear_loop(
        ctx, _WHILE_STORED_PRIMS, _while_transpose_stored, args, params, primals, outs, floats
    )


def _place(stored: _Stored, block, ps, new_ps, primals, residuals, i) -> None:
    """Where each residual of the body (`residuals`, by value) is found after the loop:
    fills `stored.same`, `.stacked`, `.fixed`, `.hoisted`, `.counted` and `.remade`.

    A value of the body is the same at every iteration when its op reads only such values
    (a carry the body returns unchanged, a value from above the loop, a constant) and has
    no side effect: it is hoisted. An integer scalar that is a counter plus or minus
    constants is counted again from the backward loop's index; a slice, reshape,
    broadcast or scalar op of such values (scan's row of its input, read at the counter)
    is remade; anything else is stacked."""
    same = {}
    for k, (p, new) in enumerate(zip(ps, new_ps, strict=True)):
        if new.value == p.value:
            same[p.value] = primals[k]
            stored.same.add(k)
    inside = set(block.arguments)
    varying = {a for a in block.arguments if a not in same}
    ops = {}
    for inner in block.operations:
        o = inner.operation
        reads = list(o.operands)
        # An op with regions that read values from above it is not run again (`replay`
        # copies only regions that read their own values): its results are stacked.
        captures = _ir.captured(inner) if len(o.regions) else []
        moves = o.name == "stablehlo.custom_call" or bool(captures)
        moves = moves or any(v in varying for v in reads)
        for r in o.results:
            inside.add(r)
            ops[r] = o
            if moves:
                varying.add(r)
    affine = _affine(_counters(ps, new_ps, primals, i))
    needed = set()

    def hoist(v):
        if v in same:
            stored.fixed[v] = same[v]
        elif v not in inside:
            stored.fixed[v] = None
        elif ops[v] not in needed:
            o = ops[v]
            needed.add(o)
            for w in o.operands:
                hoist(w)

    remade = set()
    known: dict = {}

    def unstacked(v) -> bool:
        """Whether v can be had in the backward loop without a stack (and arranges it)."""
        found = known.get(v)
        if found is not None:
            return found
        ok = True
        if v not in varying:
            hoist(v)
        elif (f := affine(v)) is not None and _ir.aval(v)[0] == ():
            stored.counted[v] = f
        else:
            o = ops.get(v)
            ok = (
                o is not None
                and not len(o.regions)
                and (o.name in _REMADE or all(_ir.aval(r)[0] == () for r in o.results))
                and all(unstacked(w) for w in o.operands)
            )
            if ok:
                remade.add(o)
        known[v] = ok
        return ok

    for v in residuals:
        if not unstacked(v):
            stored.stacked.append(v)
    stored.hoisted = [inner.operation for inner in block.operations if inner.operation in needed]
    stored.remade = [inner.operation for inner in block.operations if inner.operation in remade]


# Ops the backward loop runs again rather than read from a stack: they move or copy data.
_REMADE = frozenset(
    {
        "stablehlo.dynamic_slice",
        "stablehlo.slice",
        "stablehlo.reshape",
        "stablehlo.broadcast_in_dim",
        "stablehlo.transpose",
        "stablehlo.convert",
    }
)


def _owner(v):
    owner = v.owner
    return owner.operation if isinstance(owner, ir.OpView | ir.Operation) else None


def _counters(ps, new_ps, primals, i) -> dict:
    """The body's counters: block argument -> (start, step), the carries that start at a
    constant and to which the body adds a nonzero constant (and the loop's own `i`)."""
    counters = {i.value: (0, 1)}
    for k, (p, new) in enumerate(zip(ps, new_ps, strict=True)):
        add = _owner(new.value)
        start = _ir.constant_of(primals[k].value)
        if add is None or add.name != "stablehlo.add" or start is None or start.shape != ():
            continue
        x, y = add.operands
        if x != p.value:
            x, y = y, x
        step = _ir.constant_of(y)
        if x == p.value and step is not None and step.shape == () and int(step) != 0:
            counters[p.value] = (int(start), int(step))
    return counters


def _affine(counters: dict):
    """`affine(v)`: (a, b) where v is a + b * t at iteration t (a counter plus or minus
    constants), or None."""

    def affine(v):
        if v in counters:
            return counters[v]
        o = _owner(v)
        if o is None or o.name not in ("stablehlo.add", "stablehlo.subtract"):
            return None
        x, y = o.operands
        cx, cy = _ir.constant_of(x), _ir.constant_of(y)
        if cy is not None and cy.shape == ():
            f = affine(x)
            sign = 1 if o.name == "stablehlo.add" else -1
            return None if f is None else (f[0] + sign * int(cy), f[1])
        if cx is not None and cx.shape == ():
            f = affine(y)
            if f is None:
                return None
            return (int(cx) + f[0], f[1]) if o.name == "stablehlo.add" else (int(cx) - f[0], -f[1])
        return None

    return affine


def _rows_once(stored: _Stored, block, ps, new_ps, primals, i, trips: int) -> None:
    """Fills `stored.written` and `.read`: the carries the body uses in one op only, a
    dynamic_update_slice that makes the carry's next value (written) or a dynamic_slice of
    a carry passed on unchanged (read), of one row at an index that is a different row at
    each of the `trips` iterations (a counter plus or minus constants, inside the rows)."""
    affine = _affine(_counters(ps, new_ps, primals, i))

    def distinct_rows(index, rows, size) -> bool:
        f = affine(index)
        if f is None or f[1] == 0 or size != 1:
            return False
        ends = (f[0], f[0] + f[1] * (trips - 1))
        return 0 <= min(ends) and max(ends) <= rows - 1

    uses: dict = {}
    for inner in block.operations:
        o = inner.operation
        reads = list(o.operands) + (_ir.captured(inner) if len(o.regions) else [])
        for v in reads:
            uses.setdefault(v, []).append(o)
    for k, (p, new) in enumerate(zip(ps, new_ps, strict=True)):
        users = uses.get(p.value, [])
        if len(users) != 1 or not p.shape:
            continue
        o = users[0]
        if k in stored.same:
            if o.name == "stablehlo.dynamic_slice" and o.operands[0] == p.value:
                size = _ir.i64s(o, "slice_sizes", ())[0]
                if distinct_rows(o.operands[1], p.shape[0], size):
                    stored.read.add(k)
        elif o.name == "stablehlo.dynamic_update_slice" and _owner(new.value) == o:
            x, update = o.operands[0], o.operands[1]
            size = _ir.aval(update)[0][0]
            if x == p.value and distinct_rows(o.operands[2], p.shape[0], size):
                stored.written.add(k)


def _while_transpose_stored(cts, *args, stored, stacks, count, trips, floats, policy):
    """The loop backwards over the stored rows: at each, the body's recorded linear program,
    reading that row's values, maps the carry's cotangent to the previous one's and adds
    up the cotangents of the captured values and of the carries the body passes on
    unchanged (whose own cotangent passes through)."""
    n = len(floats)
    cap_args = args[n:]
    which = [k for k in range(n) if floats[k]]
    # A row written once gets its cotangent from the result's, never from a later row.
    fixed = [k for k in which if k in stored.written and not isinstance(args[k], LinVar)]
    # A carry passed on unchanged gets its own cotangent back plus what the iterations add:
    # nothing to carry when its init wants none.
    same = [k for k in which if k in stored.same and isinstance(args[k], LinVar)]
    carried = [k for k in which if k not in fixed and k not in stored.same]
    cap_which = [j for j, a in enumerate(cap_args) if isinstance(a, LinVar)]
    shapes = [(v.shape, v.dtype) if v is not None else None for v in stored.lin_in]
    known = {}
    for v, p in stored.fixed.items():
        known[v] = H.wrap(v) if p is None else p
    for o in stored.hoisted:
        for r, new in zip(o.results, replay(o, [known[v] for v in o.operands]), strict=True):
            known[r] = new
    ct0 = [cts[k] if cts[k] is not None else H.zeros(*shapes[k]) for k in range(n) if floats[k]]
    ct0 = dict(zip(which, ct0, strict=True))
    n_ct, n_same = len(carried), len(same)

    def body_fn(carry):
        j = carry[-1]
        values = dict(known)
        for v, stack in zip(stored.stacked, stacks, strict=True):
            values[v] = _load(stack, j)
        for v, (a, b) in stored.counted.items():
            values[v] = _counted(j, a, b, _ir.aval(v)[1])
        for o in stored.remade:
            outs = replay(o, [values[v] for v in o.operands])
            for r, new in zip(o.results, outs, strict=True):
                values[r] = new
        tape = [
            Equation(
                eq.prim,
                [values[a.value] if isinstance(a, Tracer) else a for a in eq.args],
                eq.params,
                eq.outs,
                eq.loc,
            )
            for eq in stored.tape
        ]
        seeds = {}
        for k, g in [*zip(carried, carry[:n_ct], strict=True), *((k, ct0[k]) for k in fixed)]:
            var = stored.lin_out[k]
            if isinstance(var, LinVar):
                seeds[var] = _add_seed(seeds.get(var), g)
        found = transpose(tape, seeds)
        new_ct = [_or_zeros(found.get(stored.lin_in[k]), shapes[k]) for k in carried]
        new_same = []
        for k, a in zip(same, carry[n_ct : n_ct + n_same], strict=True):
            g = found.get(stored.lin_in[k])
            new_same.append(_accumulate(a, g, k in stored.read))
        new_acc = []
        for j2, a in zip(cap_which, carry[n_ct + n_same : -1], strict=True):
            g = found.get(stored.cap_vars[j2])
            new_acc.append(a if g is None else H.add(a, g))
        return new_ct + new_same + new_acc + [H.sub(j, 1)]

    init = [ct0[k] for k in carried] + [H.zeros(*shapes[k]) for k in same]
    init += [H.zeros(cap_args[j].shape, cap_args[j].dtype) for j in cap_which]
    last = H.scalar(trips - 1, _I32) if trips is not None else H.sub(count, 1)
    result = tracer_control.while_loop(
        lambda carry: H.compare(carry[-1], 0, "GE"), body_fn, init + [last]
    )
    ct = dict(zip(carried, result[:n_ct], strict=True))
    for k, g in zip(same, result[n_ct : n_ct + n_same], strict=True):
        ct[k] = H.add(ct0[k], g) if cts[k] is not None else g
    acc = result[n_ct + n_same : -1]
    if trips is None:
        # A loop that ran past max_trip_count overwrote its last stored row: its
        # cotangents are NaN, never a wrong number.
        over = H.compare(count, H.like(count, policy.max_trip_count), "GT")
        ct = {k: H.select(over, H.like(g, np.nan), g) for k, g in ct.items()}
        acc = [H.select(over, H.like(g, np.nan), g) for g in acc]
    out = [None] * len(args)
    for k, g in ct.items():
        out[k] = g
    for j, g in zip(cap_which, acc, strict=True):
        out[n + j] = g
    return out


def _counted(t, a: int, b: int, dtype):
    """a + b * t, of `dtype`."""
    t = t if t.dtype == dtype else H.convert(t, dtype)
    if b != 1:
        t = H.mul(t, H.like(t, b))
    return t if a == 0 else H.add(t, H.like(t, a))


def _accumulate(acc, g, one_row: bool):
    """acc + g; where g is one row of zeros updated (a dynamic_slice's transpose) at a row
    no other iteration writes (`one_row`), that row written into acc in place."""
    if g is None:
        return acc
    o = _owner(g.value)
    # The bindings give no complex constants to Python: a complex row is added.
    real = dtypes.is_float(g.dtype)
    if one_row and real and o is not None and o.name == "stablehlo.dynamic_update_slice":
        zeros = _ir.constant_of(o.operands[0])
        if zeros is not None and not zeros.any():
            starts = [H.wrap(v) for v in list(o.operands)[2:]]
            return H.dynamic_update_slice(acc, H.wrap(o.operands[1]), starts)
    return H.add(acc, g)


_WHILE_STORED_PRIMS: dict[int, Linear] = {}


def _add_seed(prev, g):
    return g if prev is None else H.add(prev, g)


def _or_zeros(g, aval):
    return g if g is not None else H.zeros(*aval)


def _branches_reverse(ctx, primals, tangents):
    op = ctx.op
    o = op.operation
    ev = ctx.ev
    captured = _ir.captured(op)
    cap_tangents = [ctx.ev.entry(ctx.env, v)[1] for v in captured]
    penv = _primal_env(ctx.ev, ctx.env, captured)
    primal_ev = JVPEvaluator(ev.functions, Forward(), ev.transform)
    blocks = [r.blocks[0] for r in o.regions]

    def branch(block):
        return lambda: [p for p, _ in primal_ev.run_block(block, [], Env(penv))]

    outs = select_branch(o.name, primals[0], [branch(b) for b in blocks])
    if all(t is None for t in cap_tangents):
        return [(p, None) for p in outs]
    floats = [is_float(p.dtype) for p in outs]
    params = {
        "op": op,
        "functions": ev.functions,
        "transform": ev.transform,
        "selector": primals[0],
        "captured": captured,
        "env": ctx.env,
        "floats": floats,
        "policy": ctx.T.loop_policy,
    }
    prim = _CASE_REVERSE_PRIMS.get(len(cap_tangents))
    if prim is None:
        prim = _CASE_REVERSE_PRIMS[len(cap_tangents)] = Linear(
            "case", tuple(range(len(cap_tangents))), _no_emit, _case_transpose, None, len(outs)
        )
    lin_outs = ctx.T.bind(prim, cap_tangents, params, aval=[(p.shape, p.dtype) for p in outs])
    return [(p, t if f else None) for p, t, f in zip(outs, lin_outs, floats, strict=True)]


def _case_transpose(
    cts, *cap_args, op, functions, transform, selector, captured, env, floats, policy
):
    o = op.operation
    which = [j for j, a in enumerate(cap_args) if isinstance(a, LinVar)]
    primals = None
    if CHECKPOINT in o.attributes and captured:
        # aotkit.checkpoint: the recomputation reads its inputs through one barrier with
        # the cotangents, so XLA can neither merge it with the forward pass nor run it
        # before the backward pass reaches it (and keep the intermediates after all).
        probe = JVPEvaluator(functions, Forward(), transform)
        values = [probe.entry(env, v)[0] for v in captured]
        given = [g for g in cts if g is not None]
        barrier = H.create(
            "stablehlo.optimization_barrier",
            values + given,
            [(p.shape, p.dtype) for p in values + given],
        )
        fenced = H.results(barrier)
        primals = fenced[: len(values)]
        rest = iter(fenced[len(values) :])
        cts = [None if g is None else next(rest) for g in cts]

    def branch(block):
        def run():
            tape = Tape(policy)
            bev = JVPEvaluator(functions, tape, transform)
            lin_env, cap_vars = _linear_env(bev, env, captured, primals)
            outs = bev.run_block(block, [], lin_env)
            seeds = {}
            for (_, var), g in zip(outs, cts, strict=True):
                if isinstance(var, LinVar) and g is not None:
                    seeds[var] = _add_seed(seeds.get(var), g)
            found = transpose(tape.tape, seeds)
            return [
                _or_zeros(found.get(cap_vars[j]), (cap_args[j].shape, cap_args[j].dtype))
                for j in which
            ]

        return run

    result = select_branch(o.name, selector, [branch(r.blocks[0]) for r in o.regions])
    out = [None] * len(cap_args)
    for j, g in zip(which, result, strict=True):
        out[j] = g
    return out


# The attribute `aotkit.checkpoint` puts on the one-branch case it wraps a function in.
CHECKPOINT = "aotkit.checkpoint"

CONTROL["stablehlo.while"] = lambda ctx, primals, tangents: _while(ctx, primals, tangents)
CONTROL["stablehlo.case"] = _branches
CONTROL["stablehlo.if"] = _branches
