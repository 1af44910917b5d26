"""Transforms, control flow: `stablehlo.while`, `stablehlo.case` and `stablehlo.if`.

These rules see regions: they evaluate each region again with the transform's own
evaluator, inside a new op built with the tracer's structured control flow
(`aotkit.lowering.control`), and carry the values a region captures from above as the
regions of the new op capture them.

- Forward mode: a loop carries the tangents of its float carries beside them (which ones
  is a fixpoint over the body, so a tangent that stays zero is not carried); a branch
  returns its tangents beside its results.
- Reverse mode: a loop with a trip count its ops fix (a counter compared with a constant)
  stores its carries in a stack as it runs; the transpose runs a loop backwards over
  them, differentiating the body at each stored carry (the body's intermediates are
  recomputed, not stored: memory is one carry per iteration). A loop whose trip count
  depends on the data is an error that says what to do. A branch is transposed by a
  branch of the same index whose regions transpose the taken region.
- Batching: in `aotkit.transforms.batching`.
"""

from __future__ import annotations

import numpy as np

from aotkit.lowering import control as tracer_control
from aotkit.transforms import _hlo as H
from aotkit.transforms import _ir
from aotkit.transforms.core import (
    Env,
    Forward,
    Linear,
    LinVar,
    LoopPolicy,
    Tape,
    TransformError,
    is_float,
    op_site,
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
    if trips is None and policy.max_trip_count is None:
        raise TransformError(
            f"{ev.transform}: {op_site(op)} is a while loop whose trip count depends on the "
            "data, and reverse-mode differentiation stores one carry per iteration; write it "
            "as a loop with a static trip count (aotkit.lax.fori_loop or scan with constant "
            "bounds, `for i in range(n)` with a static n), give a bound with "
            "max_trip_count=N (the gradient is NaN if the loop runs longer), or "
            "differentiate it in forward mode (aotkit.jvp, aotkit.jacfwd)"
        )
    capacity = trips if trips is not None else policy.max_trip_count
    every = policy.segment(capacity)
    rows = max(1, -(-capacity // every))
    # Forward: the loop as it was, storing the carry that enters every `every`-th iteration
    # (every one by default).
    penv = _primal_env(ctx.ev, ctx.env, captured)
    primal_ev = JVPEvaluator(ev.functions, Forward(), ev.transform)
    stacks = [H.zeros((rows,) + p.shape, p.dtype) for p in primals]
    init = list(primals) + stacks + [H.scalar(0, _I32)]

    def cond_fn(carry):
        (pred,) = primal_ev.run_block(cond_block, [(p, None) for p in carry[:n]], Env(penv))
        return pred[0]

    def body_fn(carry):
        ps, st, i = carry[:n], carry[n : 2 * n], carry[2 * n]
        slot = H.minimum(H.div(i, H.like(i, every)) if every > 1 else i, H.like(i, rows - 1))
        if every == 1:
            new_st = [_store(s, p, slot) for s, p in zip(st, ps, strict=True)]
        else:
            first = H.compare(H.rem(i, H.like(i, every)), 0, "EQ")
            new_st = [
                _store(s, H.select(first, p, _load(s, slot)), slot)
                for s, p in zip(st, ps, strict=True)
            ]
        outs = primal_ev.run_block(body_block, [(p, None) for p in ps], Env(penv))
        return [p for p, _ in outs] + new_st + [H.add(i, 1)]

    result = tracer_control.while_loop(cond_fn, body_fn, init)
    outs, stacks, count = result[:n], result[n : 2 * n], result[2 * n]
    floats = [is_float(p.dtype) for p in primals]
    params = {
        "op": op,
        "functions": ev.functions,
        "transform": ev.transform,
        "stacks": stacks,
        "count": count,
        "trips": trips,
        "every": every,
        "captured": captured,
        "env": ctx.env,
        "floats": floats,
        "policy": policy,
    }
    args = list(tangents) + cap_tangents
    prim = _WHILE_REVERSE_PRIMS.get(len(args))
    if prim is None:
        prim = _WHILE_REVERSE_PRIMS[len(args)] = Linear(
            "while", tuple(range(len(args))), _no_emit, _while_transpose, None, n
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
    run forward again first, its carries kept for the way back."""
    o = op.operation
    body_block = o.regions[1].blocks[0]
    n = len(floats)
    cap_args = args[n:]
    which = [i for i in range(n) if floats[i]]
    cap_which = [j for j, a in enumerate(cap_args) if isinstance(a, LinVar)]
    shapes = [(s.shape[1:], s.dtype) for s in stacks]
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
            new_ct, new_acc = step_back([_load(s, j) for s in rows], carry[:n_ct], carry[n_ct:-1])
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
            local = [H.zeros((every,) + shape, dtype) for shape, dtype in shapes]
            first = [_load(st, s) for st in stacks]

            def fwd(c):
                ps, ls, j = c[:n], c[n : 2 * n], c[2 * n]
                new_ls = [_store(lst, p, j) for lst, p in zip(ls, ps, strict=True)]
                outs = primal_ev.run_block(body_block, [(p, None) for p in ps], Env(penv))
                return [p for p, _ in outs] + new_ls + [H.add(j, 1)]

            filled = tracer_control.while_loop(
                lambda c: H.compare(c[-1], length, "LT"),
                fwd,
                first + local + [H.scalar(0, _I32)],
            )[n : 2 * n]
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
