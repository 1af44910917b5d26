"""Transforms, core: walking a module's ops, the linear primitives, and transposition.

Every transform is an evaluator of a StableHLO function on new values: it walks the
function's ops in order and, for each, calls the rule its table has for that op name
with the op and the entries of its operands; what the rule returns are the entries of
the op's results. The ops a rule emits go into the current aotkit trace, so a transform
builds an ordinary traced module (`aotkit.tracing.trace.trace_to_module`).

- Forward mode (`jvp`): an entry is (primal, tangent). The primal op is emitted again
  (`replay`), the tangent by the op's JVP rule.
- Reverse mode (`vjp`): the same JVP rules run with tangents that are not values but
  variables (`LinVar`) of a tape: each tangent op a rule applies is one of the *linear
  primitives* below, recorded with the primal values it uses. Transposing the tape
  backwards (`transpose`) emits the cotangent ops after the forward program, each
  primitive by its transpose rule: JAX's linearize-then-transpose, over StableHLO.
- Batching (`vmap`): an entry is (value, batched); a batched value has the batch
  dimension first.

`None` is a symbolic zero tangent everywhere: integer and boolean values, and the results
of ops whose derivative is zero (comparisons, `floor`, `iota`, ...), carry no tangent ops.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable

import numpy as np
from jaxlib.mlir import ir

from aotkit import _context, dtypes, modules
from aotkit.tracing import core as tracer_core
from aotkit.tracing.core import Tracer
from aotkit.transforms import _hlo as H
from aotkit.transforms import _ir

# --- errors -------------------------------------------------------------------------------------


class TransformError(NotImplementedError):
    """An op a transform has no rule for, or a program it cannot transform."""


def op_site(op) -> str:
    """`stablehlo.sine at model.py:12` for error messages (the op's name alone when its
    location names no source line); a custom call adds its target (` (@lapack_sgeev_ffi)`)."""
    name = _ir.name(op)
    site = f"{name}{modules.op_location(op.operation)}"
    if name == "stablehlo.custom_call":
        site += f" (@{_ir.custom_call_target(op)})"
    return site


def no_rule(transform: str, op, table_hint: str) -> TransformError:
    return TransformError(
        f"{transform}: no {table_hint} rule for op {op_site(op)}; aotkit cannot "
        f"{_VERBS[transform]} this program. The rule table (docs/transforms.md) lists the "
        "ops each transform covers: rewrite this part with covered ops, or report the op"
    )


_VERBS = {
    "jvp": "differentiate (forward mode)",
    "vjp": "differentiate (reverse mode)",
    "grad": "differentiate",
    "vmap": "batch",
}


# --- the tape's variables ------------------------------------------------------------------------


class LinVar:
    """A tangent in reverse mode: a variable of the linear program on the tape."""

    __slots__ = ("shape", "dtype")

    def __init__(self, shape: tuple[int, ...], dtype: np.dtype):
        self.shape = shape
        self.dtype = dtype

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def aval(self):
        return (self.shape, self.dtype)

    def __repr__(self) -> str:
        return f"LinVar<{dtypes.short_name(self.dtype)}{list(self.shape)}>"


@dataclasses.dataclass(frozen=True, eq=False)
class Linear:
    """A linear primitive: `emit(*args, **params)` on values, linear in the argument
    positions `linear` (the others are primal values it multiplies by, indexes with, ...);
    `transpose(cts, *args, **params)` gives one cotangent (or None) per linear position,
    from the cotangents of its results (`cts`, None for a zero); `aval(*avals, **params)`
    gives its result's (shape, dtype) (None: the caller passes `aval=`)."""

    name: str
    linear: tuple[int, ...]
    emit: Callable[..., Tracer | list[Tracer]]
    transpose: Callable[..., list]
    aval: Callable[..., tuple] | None = None
    # How many results, for a primitive with a list of them (control flow); 0: one result,
    # given and taken as a value rather than a list.
    results: int = 0


@dataclasses.dataclass(eq=False)
class Equation:
    prim: Linear
    args: list
    params: dict
    outs: list[LinVar]
    loc: ir.Location | None  # the source op's: the cotangent ops take it too


class LoopPolicy:
    """How reverse mode keeps a loop's carries: `checkpoint` None stores every one;
    "sqrt" stores about sqrt(n) of them and recomputes the segments between them in the
    backward pass (memory ~2 sqrt(n) carries, one more forward pass); an int k stores
    every k-th. `max_trip_count` bounds a loop whose trip count depends on the data."""

    __slots__ = ("checkpoint", "max_trip_count")

    def __init__(self, checkpoint=None, max_trip_count: int | None = None):
        self.checkpoint = checkpoint
        self.max_trip_count = max_trip_count

    def segment(self, trips: int) -> int:
        if self.checkpoint is None or trips <= 1:
            return 1
        if self.checkpoint == "sqrt":
            return max(1, int(np.ceil(np.sqrt(trips))))
        return max(1, min(int(self.checkpoint), trips))


DEFAULT_POLICY = LoopPolicy()


# Reverse mode's loop counter is int32.
MAX_TRIP_COUNT = 2**31 - 1


def check_policy(where: str, checkpoint_loops, max_trip_count) -> LoopPolicy:
    """The checked loop policy of a transform's options (see `LoopPolicy`)."""
    ok = checkpoint_loops is None or checkpoint_loops == "sqrt"
    if isinstance(checkpoint_loops, int | np.integer) and not isinstance(checkpoint_loops, bool):
        ok = checkpoint_loops >= 1
    if not ok:
        raise ValueError(
            f"{where}: checkpoint_loops must be None (store every carry), 'sqrt' or an int "
            f">= 1 (store every k-th carry), got {checkpoint_loops!r}"
        )
    if max_trip_count is not None and (
        isinstance(max_trip_count, bool)
        or not isinstance(max_trip_count, int | np.integer)
        or max_trip_count < 1
    ):
        raise ValueError(
            f"{where}: max_trip_count must be None or an int >= 1, got {max_trip_count!r}"
        )
    if max_trip_count is not None and max_trip_count > MAX_TRIP_COUNT:
        raise ValueError(
            f"{where}: max_trip_count={max_trip_count} is above {MAX_TRIP_COUNT} (2**31 - 1): "
            "the differentiated loop counts its iterations in int32; give a bound below "
            "2**31 (its carries are stored once per iteration, or once per checkpoint with "
            "checkpoint_loops)"
        )
    if checkpoint_loops is None and max_trip_count is None:
        return DEFAULT_POLICY
    return LoopPolicy(checkpoint_loops, None if max_trip_count is None else int(max_trip_count))


class Algebra:
    """What JVP rules apply tangent operations through: forward mode emits them at once,
    reverse mode records them on a tape. `None` is a zero tangent: applying a primitive to
    zero linear arguments only gives zero."""

    tape: list[Equation] | None = None

    def bind(self, prim: Linear, args: list, params: dict | None = None, aval=None):
        raise NotImplementedError

    def zeros(self, aval) -> object:
        raise NotImplementedError


class Forward(Algebra):
    def bind(self, prim, args, params=None, aval=None):
        if all(args[i] is None for i in prim.linear):
            return [None] * prim.results if prim.results else None
        args = list(args)
        for i in prim.linear:
            if args[i] is None:
                raise AssertionError(f"{prim.name}: a zero linear argument must be instantiated")
        return prim.emit(*args, **(params or {}))

    def zeros(self, aval):
        return H.zeros(*aval)


class Tape(Algebra):
    """Reverse mode's algebra: records the linear program. `loop_policy` says how loops
    keep their carries (`control.LoopPolicy`; None: every carry)."""

    def __init__(self, loop_policy: LoopPolicy | None = None):
        self.tape = []
        self.loop_policy = loop_policy if loop_policy is not None else DEFAULT_POLICY

    def bind(self, prim, args, params=None, aval=None):
        for i in prim.linear:  # a loop: the generator `all` would build costs more
            a = args[i]
            if a is not None and type(a) is not Zero:
                break
        else:
            return [None] * prim.results if prim.results else None
        params = params or {}
        if aval is None:
            aval = prim.aval(*[_aval_of(a) for a in args], **params)
        loc = _context.active().location
        if prim.results:
            outs = [LinVar(tuple(s), np.dtype(d)) for s, d in aval]
            self.tape.append(Equation(prim, list(args), params, outs, loc))
            return outs
        out = LinVar(tuple(aval[0]), np.dtype(aval[1]))
        self.tape.append(Equation(prim, list(args), params, [out], loc))
        return out

    def zeros(self, aval):
        return Zero(aval)


class Zero:
    """A zero tangent of a known aval, where a primitive needs every linear argument (a
    concatenation of a zero and a nonzero piece): reverse mode records it and gives it no
    cotangent; forward mode never sees it (it emits zeros)."""

    __slots__ = ("shape", "dtype")

    def __init__(self, aval):
        self.shape, self.dtype = tuple(aval[0]), np.dtype(aval[1])

    @property
    def aval(self):
        return (self.shape, self.dtype)


_ARRAYS = (Tracer, LinVar, Zero)  # a tuple: `A | B | C` would build a union at every call


def _aval_of(a):
    if a is None:
        return None
    if isinstance(a, _ARRAYS):
        return (a.shape, a.dtype)
    return a


def instantiate(T: Algebra, t, aval):
    """`t`, or zeros of `aval` for a zero tangent (a primitive that needs all its linear
    arguments)."""
    return T.zeros(aval) if t is None else t


def transpose(tape: list[Equation], cts: dict) -> dict:
    """Runs the tape backwards from the cotangents of some of its variables (`cts`, by
    LinVar) and returns the cotangent of every variable reached (the tape's inputs
    among them). Emits the cotangent ops at the current insertion point."""
    ct = dict(cts)
    lc = _context.active()
    saved = lc.location
    for eq in reversed(tape):
        outs = [ct.pop(v, None) for v in eq.outs]
        if all(g is None for g in outs):
            continue
        lc.location = eq.loc
        try:
            if eq.prim.results:
                found = eq.prim.transpose(outs, *eq.args, **eq.params)
            else:
                found = eq.prim.transpose(outs[0], *eq.args, **eq.params)
        finally:
            lc.location = saved
        for pos, g in zip(eq.prim.linear, found, strict=True):
            a = eq.args[pos]
            if g is None or not isinstance(a, LinVar):
                continue
            if g.dtype != a.dtype:
                g = H.convert(g, a.dtype)
            prev = ct.get(a)
            ct[a] = g if prev is None else _sum_cotangents(prev, g)
    return ct


def _sum_cotangents(a: Tracer, b: Tracer) -> Tracer:
    """a + b, where two slices' cotangents (zeros padding adjacent pieces along one
    dimension, the transpose of a split) are concatenated instead, as JAX's transpose of a
    split gives: XLA fuses a sum of pads with the ops that make each piece, and computes
    every piece again for each piece of the result."""
    pa, pb = _pad_piece(a), _pad_piece(b)
    if pa is None or pb is None or pa[1] != pb[1] or a.shape != b.shape:
        return H.add(a, b)
    d = pa[1]
    if pa[2] + pa[0].shape[d] == pb[2]:
        first, second = pa, pb
    elif pb[2] + pb[0].shape[d] == pa[2]:
        first, second = pb, pa
    else:
        return H.add(a, b)
    pieces = _pieces(first[0], d) + _pieces(second[0], d)
    low, high = [0] * a.ndim, [0] * a.ndim
    low[d], high[d] = first[2], second[3]
    return H.pad(H.concatenate(pieces, d), H.scalar(0, a.dtype), low, high)


def _pad_piece(x: Tracer):
    """(operand, dim, low, high) when x is its operand padded with zeros along one dimension
    (no interior padding), else None."""
    o = x.value.owner
    if not isinstance(o, ir.OpView | ir.Operation) or o.operation.name != "stablehlo.pad":
        return None
    o = o.operation
    if not dtypes.is_float(x.dtype):  # the bindings give no complex constants to Python
        return None
    zero = _ir.constant_of(o.operands[1])
    if zero is None or zero.any() or any(_ir.i64s(o, "interior_padding")):
        return None
    low, high = _ir.i64s(o, "edge_padding_low"), _ir.i64s(o, "edge_padding_high")
    dims = [d for d, (lo, hi) in enumerate(zip(low, high, strict=True)) if lo or hi]
    if len(dims) != 1 or low[dims[0]] < 0 or high[dims[0]] < 0:
        return None
    return H.wrap(o.operands[0]), dims[0], low[dims[0]], high[dims[0]]


def _pieces(x: Tracer, d: int) -> list[Tracer]:
    """x's operands when x concatenates them along d (one flat concatenate), else [x]."""
    o = x.value.owner
    if isinstance(o, ir.OpView | ir.Operation) and o.operation.name == "stablehlo.concatenate":
        if _ir.int_attr(o, "dimension", -1) == d:
            return [H.wrap(v) for v in o.operation.operands]
    return [x]


# --- environments and the walk -------------------------------------------------------------------


class Env:
    """What each SSA value of the source is, in the program being built; a region's
    environment sees its parent's (regions capture values from above)."""

    __slots__ = ("vars", "parent")

    def __init__(self, parent: Env | None = None):
        self.vars: dict = {}
        self.parent = parent

    def __getitem__(self, value):
        env = self
        while env is not None:
            found = env.vars.get(value, _MISSING)
            if found is not _MISSING:
                return found
            env = env.parent
        raise KeyError(value)

    def __setitem__(self, value, entry) -> None:
        self.vars[value] = entry


_MISSING = object()


class Evaluator:
    """Walks functions and blocks of one source module, one rule per op.

    Subclasses define `apply(op, entries) -> entries`. `func.call` and
    `stablehlo.composite` are followed into the function they name, so a transform sees
    one flat program whatever the module's call structure.
    """

    transform = "transform"

    def __init__(self, functions: dict[str, object]):
        self.functions = functions

    def run_function(self, func_op, inputs: list) -> list:
        block = func_op.regions[0].blocks[0]
        return self.run_block(block, inputs, Env())

    def run_block(self, block: ir.Block, inputs: list, env: Env) -> list:
        for arg, entry in zip(block.arguments, inputs, strict=True):
            env.vars[arg] = entry
        outs = self.run_ops(block.operations, env)
        if outs is None:
            raise AssertionError("a block without a terminator")
        return outs

    def run_ops(self, ops, env: Env) -> list | None:
        """Evaluates `ops` in order in `env`: the values a return among them returns, or
        None where none does (a run of ops from inside a block)."""
        local = env.vars
        apply = self.apply
        entry = self.entry
        lc = _context.active()
        saved = lc.location
        walk = _WALK
        outer_walk = walk.current
        walk.current = (self, env)
        try:
            for op in ops:
                o = op.operation
                name = o.name
                # The block's own values first (most operands), then the enclosing ones.
                ins = [local.get(v) or entry(env, v) for v in o.operands]
                if name == "func.return" or name == "stablehlo.return":
                    return ins
                if name == "func.call" or name == "stablehlo.composite":
                    outs = self.call(op, ins)
                else:
                    # Every op the rule builds takes the location of the op it came from.
                    lc.location = o.location
                    outs = apply(op, ins, env)
                    lc.location = saved
                for r, out in zip(o.results, outs, strict=True):
                    local[r] = out
        finally:
            lc.location = saved
            walk.current = outer_walk
        return None

    def call(self, op, ins: list) -> list:
        """A `func.call` or `stablehlo.composite`: the function it names, on `ins`."""
        return self.run_function(self._callee(op), ins)

    def entry(self, env: Env, value):
        try:
            return env[value]
        except KeyError:
            # A value from outside the program being transformed: a function traced into
            # a region (aotkit.grad inside a trace) closes over the enclosing program's
            # values, which are constants to the transform.
            return self.outside(H.wrap(value))

    def outside(self, value: Tracer):
        """The entry of a value from outside the program (a constant to the transform)."""
        raise NotImplementedError

    def _callee(self, op):
        o = op.operation
        key = "callee" if o.name == "func.call" else "decomposition"
        symbol = ir.FlatSymbolRefAttr(o.attributes[key]).value
        callee = self.functions.get(symbol)
        if callee is None:
            raise TransformError(
                f"{self.transform}: {op_site(op)} calls @{symbol}, which the module does not "
                "define; transforms need the whole program in one module"
            )
        return callee

    def apply(self, op, ins: list, env: Env) -> list:
        raise NotImplementedError


# --- replaying an op -----------------------------------------------------------------------------


def replay(
    op, operands: list[Tracer], avals: list[tuple] | None = None, attributes: dict | None = None
) -> list[Tracer]:
    """The op again, on `operands`: the same attributes (those in `attributes` replaced) and
    regions, results of `avals` (default: the op's own result types).

    A region that uses values defined outside the op gets them as the new op stays valid
    where XLA runs it (`_carry_captures`): values computed from constants alone are built
    again inside the region; others are the program's values of them, used from above in
    a while or a branch, passed as extra operands to a sort, reduce, window reduction or
    scatter (a scalar the region reads, broadcast to the operands' shape)."""
    o = op.operation
    scope = tracer_core.current_scope()
    emitted = scope.emitted
    emitted.opaque = True
    if o.name.startswith("chlo."):
        emitted.chlo = True
    n_regions = len(o.regions)
    captures = _ir.captured(op) if n_regions else ()
    loc = tracer_core.user_location()
    if avals is None and attributes is None and not captures and loc == o.location:
        # The same op at its own location: a clone (attributes and regions copied in one
        # call, about half the cost of creating it).
        return _clone_onto(o, operands, scope)
    if avals is None:
        types = [r.type for r in o.results]
    else:
        types = [dtypes.tensor_type(tuple(s), d) for s, d in avals]
    source_attributes = o.attributes
    try:
        copied = (
            {n: source_attributes[n] for n in source_attributes} if len(source_attributes) else None
        )
    except TypeError:
        # An attribute the bindings cannot hand to Python (a complex constant's dense
        # elements): the op is cloned as it is.
        if n_regions or attributes or types != [r.type for r in o.results]:
            raise
        return _clone_onto(o, operands, scope)
    if attributes:
        copied = {**(copied or {}), **attributes}
    if captures:
        return _carry_captures(op, operands, types, copied, captures, loc, scope)
    values = [t.value for t in operands]
    new = ir.Operation.create(
        o.name, results=types, operands=values, attributes=copied, regions=n_regions, loc=loc
    )
    tracer_core.note_made(new, values)
    if n_regions:
        copy = o.clone(ip=False)
        for src, dst in zip(copy.regions, new.regions, strict=True):
            for block in list(src.blocks):
                block.append_to(dst)
        copy.erase()
    return [Tracer(r, *_ir.aval(r), scope) for r in new.results]


class _Walk(threading.local):
    """The block an evaluator walks now, on this thread: (evaluator, environment); where
    `replay` finds the program's values of the values a region captures."""

    current: tuple | None = None


_WALK = _Walk()


def _captured_value(op, v) -> Tracer:
    """The program's value of `v`, a value `op`'s region captures."""
    walk = _WALK.current
    # Rules replay ops while an evaluator walks their block; transposes replay only ops
    # whose regions capture constants.
    assert walk is not None, f"{op_site(op)} replayed outside a walk with a captured value"
    ev, env = walk
    return ev.entry(env, v)[0]


def _value_name(v) -> str:
    shape, dtype = _ir.aval(v)
    return f"a {dtypes.short_name(dtype)}{list(shape)} value"


# Ops that take a captured scalar as one more operand (`_thread_operands`, `_thread_region`).
_THREADED = frozenset(
    {"stablehlo.sort", "stablehlo.reduce", "stablehlo.reduce_window", "stablehlo.scatter"}
)


def _check_threadable(op, v) -> None:
    """Refuses a captured value `v` that `op` cannot take as one more operand."""
    name = _ir.name(op)
    if name not in _THREADED:
        raise TransformError(
            f"{op_site(op)}: its region uses {_value_name(v)} defined outside it, which is "
            f"not computed from constants alone, and {name} has no operand to pass it in; "
            "compute that value inside the region from constants, or write the op without it"
        )
    if _ir.aval(v)[0] != ():
        raise TransformError(
            f"{op_site(op)}: its region uses {_value_name(v)} defined outside it, which is "
            "not computed from constants alone, and aotkit passes only scalars into such a "
            "region (as one more operand); compute that value inside the region, or pass it "
            "as an operand of the op"
        )


def _carry_captures(op, operands, types, attributes, captures, loc, scope) -> list[Tracer]:
    """`replay` of an op whose regions use `captures`, values defined outside it."""
    o = op.operation
    name = o.name
    remat = {}
    outer = {}
    for v in captures:
        chain = _ir.rematerializable(v)
        if chain is not None:
            remat[v] = chain
            continue
        if name not in _ir.CAPTURING:
            _check_threadable(op, v)
        outer[v] = _captured_value(op, v)
    threaded = []
    if name not in _ir.CAPTURING:
        for v, t in outer.items():
            # A batched value (its batch dimensions in front) reaches here only from a
            # block that still captures it: a program evaluated inline (call_program,
            # JAX's modules) has its captures passed in before it is batched, where a
            # reduction's batched init is refused.
            assert t.shape == () or name in ("stablehlo.sort", "stablehlo.scatter"), name
            threaded.append((v, t))
        outer = {}
    operands = list(operands)
    extra_types = []
    if threaded:
        operands, extra_types = _thread_operands(name, operands, threaded, types)
    values = [t.value for t in operands]
    new = ir.Operation.create(
        name,
        results=types + extra_types,
        operands=values,
        attributes=attributes,
        regions=len(o.regions),
        loc=loc,
    )
    tracer_core.note_made(new, values)
    copy = o.clone(ip=False)
    for src, dst in zip(copy.regions, new.regions, strict=True):
        if threaded:
            mapping = _thread_region(name, src, dst, threaded)
        else:
            for block in list(src.blocks):
                block.append_to(dst)
            mapping = {}
        for v, t in outer.items():
            assert t.shape == _ir.aval(v)[0], f"{name}: a batched capture reached replay"
            mapping[v] = t.value
        _rebuild_inside(dst, remat, mapping)
    copy.erase()
    results = [Tracer(r, *_ir.aval(r), scope) for r in new.results]
    return results[: len(types)]


def _thread_operands(name, operands, threaded, types):
    """The op's operands with one more per threaded capture `(v, t)` (two for a scatter),
    and the types of the results they add."""
    extra = []
    extra_types = []
    if name == "stablehlo.sort":
        shape = operands[0].shape
        for _, t in threaded:
            extra.append(H.broadcast_in_dim(t, shape, range(t.ndim)))
            extra_types.append(dtypes.tensor_type(shape, t.dtype))
        return operands + extra, extra_types
    out_shape = tuple(ir.RankedTensorType(types[0]).shape)
    if name == "stablehlo.scatter":
        # A batched capture: the batch dimension is the first of the inputs and of the
        # updates, and lane i's updates go to lane i's inputs.
        k = (len(operands) - 1) // 2
        inputs, index, updates = operands[:k], operands[k], operands[k + 1 :]
        more_inputs = [H.broadcast_in_dim(t, inputs[0].shape, range(t.ndim)) for _, t in threaded]
        more_updates = [H.broadcast_in_dim(t, updates[0].shape, range(t.ndim)) for _, t in threaded]
        extra_types = [dtypes.tensor_type(inputs[0].shape, t.dtype) for _, t in threaded]
        return inputs + more_inputs + [index] + updates + more_updates, extra_types
    # reduce, reduce_window: inputs, then their inits; the capture is its own init.
    k = len(operands) // 2
    inputs, inits = operands[:k], operands[k:]
    more_inputs = [H.broadcast_in_dim(t, inputs[0].shape, ()) for _, t in threaded]
    extra_types = [dtypes.tensor_type(out_shape, t.dtype) for _, t in threaded]
    return inputs + more_inputs + inits + [t for _, t in threaded], extra_types


def _thread_region(name, src, dst, threaded) -> dict:
    """Fills `dst` with `src`'s block, given the arguments of the threaded operands;
    returns the captured values by the argument that now holds each."""
    (block,) = list(src.blocks)
    old_args = list(block.arguments)
    scalars = [dtypes.tensor_type((), t.dtype) for _, t in threaded]
    k = len(threaded)
    if name == "stablehlo.sort":
        # (lhs, rhs) per operand; the comparator reads the capture from its lhs.
        types = [a.type for a in old_args] + [ty for ty in scalars for _ in range(2)]
        at = [len(old_args) + 2 * j for j in range(k)]
        old_at = list(range(len(old_args)))
    else:
        # (accumulators..., elements...) for a reduce; (operands..., updates...) for a
        # scatter: each half gets the capture's argument last.
        half = len(old_args) // 2
        types = (
            [a.type for a in old_args[:half]]
            + scalars
            + [a.type for a in old_args[half:]]
            + scalars
        )
        at = [half + j for j in range(k)]
        old_at = list(range(half)) + [half + k + i for i in range(half)]
    new_block = ir.Block.create_at_start(dst, types, [old_args[0].location] * len(types))
    new_args = list(new_block.arguments)
    for i, a in zip(old_at, old_args, strict=True):
        a.replace_all_uses_with(new_args[i])
    ip = ir.InsertionPoint(new_block)
    ops = list(block.operations)
    for inner in ops:
        ip.insert(inner.operation.detach_from_parent())
    if name != "stablehlo.sort":
        ret = ops[-1].operation
        returned = list(ret.operands) + [new_args[i] for i in at]
        ir.Operation.create(
            "stablehlo.return", operands=returned, loc=ret.location, ip=ir.InsertionPoint(ret)
        )
        ret.erase()
    return {v: new_args[i] for (v, _), i in zip(threaded, at, strict=True)}


def _rebuild_inside(region, remat: dict, mapping: dict) -> None:
    """In `region`, nested regions too: each use of a value of `remat` (the ops that compute
    it from constants) uses a copy of those ops made at the start of the use's own block,
    so that no region reads it from above (XLA's computations cannot); each use of a key of
    `mapping` uses its value."""
    for block in region.blocks:
        ops = list(block.operations)
        ip = ir.InsertionPoint(ops[0])
        made: dict = {}
        for inner in ops:
            o = inner.operation
            for i, v in enumerate(o.operands):
                chain = remat.get(v)
                if chain is not None:
                    o.operands[i] = _copy_chain(chain, ip, made)
                    continue
                found = mapping.get(v)
                if found is not None:
                    o.operands[i] = found
            for r in o.regions:
                _rebuild_inside(r, remat, mapping)


def _copy_chain(chain: list, ip, made: dict) -> ir.Value:
    """The value `chain`'s last op computes, from copies of its ops at `ip` (those `made`
    holds already are reused)."""
    for src in chain:
        if src.results[0] in made:
            continue
        copy = src.clone(ip=ip)
        for i, v in enumerate(src.operands):
            copy.operands[i] = made[v]
        for a, b in zip(src.results, copy.results, strict=True):
            made[a] = b
    return made[chain[-1].results[0]]


def _clone_onto(o: ir.Operation, operands: list[Tracer], scope) -> list[Tracer]:
    """A clone of `o` at the insertion point, on `operands`."""
    new = o.clone(ip=ir.InsertionPoint.current)
    values = [t.value for t in operands]
    for i, v in enumerate(values):
        new.operands[i] = v
    tracer_core.note_made(new, values)
    return [Tracer(r, *_ir.aval(r), scope) for r in new.results]


def is_float(dtype) -> bool:
    return dtypes.is_inexact(dtype)
