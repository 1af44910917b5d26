"""Transforms, forward mode: one JVP rule per StableHLO op, and the evaluator that runs them.

`JVP_RULES[op_name](ctx, primals, tangents) -> (primal results, tangent results)`: the
rule re-emits the primal op (`ctx.replay`) and builds each result's tangent from the
operands' tangents with the linear primitives (`aotkit.transforms.linear`, through the
algebra `ctx.T`), so the same rules serve forward mode and, on a tape, reverse mode.
`None` is a zero tangent. Ops whose derivative is zero (comparisons, rounding, integer
ops, iota, random bits) are declared in `ZERO`; an op with neither is an error that names
it, never a silent zero. Ops that share a derivative share one rule through
`functools.partial`, as JAX's `defjvp` rules do.
"""

from __future__ import annotations

import functools
import math

import numpy as np
from jaxlib.mlir import ir

from aotkit import dtypes, modules
from aotkit.transforms import _hlo as H
from aotkit.transforms import _ir
from aotkit.transforms import linear as L
from aotkit.transforms.core import (
    Algebra,
    Env,
    Evaluator,
    Forward,
    Linear,
    TransformError,
    is_float,
    no_rule,
    op_site,
    replay,
)

JVP_RULES: dict = {}

# Ops whose results have no tangent whatever their operands' (integer, boolean or
# piecewise-constant results): their tangents are zero by declaration.
ZERO = frozenset(
    {
        "stablehlo.compare",
        "stablehlo.is_finite",
        "stablehlo.sign",
        "stablehlo.floor",
        "stablehlo.ceil",
        "stablehlo.round_nearest_even",
        "stablehlo.round_nearest_afz",
        "stablehlo.and",
        "stablehlo.or",
        "stablehlo.xor",
        "stablehlo.not",
        "stablehlo.shift_left",
        "stablehlo.shift_right_arithmetic",
        "stablehlo.shift_right_logical",
        "stablehlo.popcnt",
        "stablehlo.bitcast_convert",
        "stablehlo.count_leading_zeros",
        "stablehlo.iota",
        "stablehlo.constant",
        "stablehlo.rng",
        "stablehlo.rng_bit_generator",
        "stablehlo.get_dimension_size",
        "stablehlo.partition_id",
        "stablehlo.replica_id",
        "chlo.is_inf",
        "chlo.is_neg_inf",
        "chlo.is_pos_inf",
    }
)


class Ctx:
    """What a JVP rule sees: the source op, the algebra, the evaluator and environment."""

    __slots__ = ("op", "T", "ev", "env")

    def __init__(self, op, T: Algebra, ev: JVPEvaluator, env: Env):
        self.op = op
        self.T = T
        self.ev = ev
        self.env = env

    def replay(self, primals) -> list:
        return self.ev.replay(self.op, primals)

    def out_aval(self, i: int = 0):
        return _ir.aval(self.op.operation.results[i])


class JVPEvaluator(Evaluator):
    """Entries are (primal, tangent) pairs; tangents are the algebra's (None: zero).

    `adopt` is a block traced for this evaluation alone (`functions.trace_function`), whose
    ops become the program's primal ops: a rule that re-emits one of its ops on the values
    the op already uses gets the op itself, moved to the insertion point, instead of a copy
    (`adopted`). The block is walked once; what stays in it is dropped with it.
    """

    def __init__(self, functions, T: Algebra, transform: str = "jvp", adopt=None):
        super().__init__(functions)
        self.T = T
        self.transform = transform
        self.adopt = adopt
        self._adopting = False  # walking `adopt` itself (not a region or function below it)
        self._arguments: dict = {}  # adopt's arguments: the primals they stand for
        self._last = None  # the op adopted last: the next goes after it
        # The divide ending a sigmoid whose negate began it (`_sigmoid_end`): the tangent
        # of the sigmoid's operand, by the divide op.
        self.sigmoids: dict = {}
        # The custom backward passes being walked in reverse mode (`_through_vjp_rule`):
        # (the op that encloses their ops, the ops).
        self.backward_passes: list = []

    def outside(self, value):
        return (value, None)

    def run_block(self, block, inputs, env):
        if block is self.adopt:
            self.adopt = None
            self._arguments = {a: p for a, (p, _) in zip(block.arguments, inputs, strict=True)}
            adopting = True
        elif self._adopting:
            adopting = False
        else:
            return super().run_block(block, inputs, env)
        saved, self._adopting = self._adopting, adopting
        try:
            return super().run_block(block, inputs, env)
        finally:
            self._adopting = saved

    def replay(self, op, primals) -> list:
        """`core.replay(op, primals)`, or the op itself where it can be adopted."""
        if self._adopting:
            outs = self.adopted(op, primals)
            if outs is not None:
                return outs
        return replay(op, primals)

    def adopted(self, op, primals) -> list | None:
        """The results of `op`, an op of the adopted block, moved to the insertion point,
        when `primals` are the values it uses (an argument of the block stands for its
        primal, which the op then uses); None when it must be copied instead: other
        primals, or regions that use values from outside them (see `replay`)."""
        o = op.operation
        operands = o.operands
        if len(primals) != len(operands):
            return None
        arguments = self._arguments
        fixes = []
        for i, (p, v) in enumerate(zip(primals, operands)):
            value = p.value
            if value != v:
                if arguments.get(v) is not p:
                    return None
                fixes.append((i, value))
        if len(o.regions) and _ir.captured(op):
            return None
        for i, value in fixes:
            operands[i] = value
        if self._last is None:
            ir.InsertionPoint.current.insert(o.detach_from_parent())
        else:
            o.move_after(self._last)
        self._last = o
        return [H.wrap(r) for r in o.results]

    def call(self, op, ins):
        self._note(op)
        return super().call(op, ins)

    def _note(self, op) -> None:
        """Notes `op` as one of the backward pass being walked, if it is one."""
        if self.backward_passes:
            parent, ops = self.backward_passes[-1]
            if op.operation.parent == parent:
                ops.append(op)

    def apply(self, op, ins, env):
        if self.backward_passes:
            self._note(op)
        o = op.operation
        name = o.name
        primals = [p for p, _ in ins]
        tangents = [t for _, t in ins]
        if name in CONTROL:
            return CONTROL[name](Ctx(op, self.T, self, env), primals, tangents)
        if self.sigmoids:
            t = self.sigmoids.pop(o, None)
            if t is not None:
                (y,) = self.replay(op, primals)
                return [(y, L.mul(self.T, t, _logistic_factor(None, y)))]
        if all(t is None for t in tangents) or name in ZERO:
            return [(p, None) for p in self.replay(op, primals)]
        rule = JVP_RULES.get(name)
        if rule is None:
            if name == "stablehlo.custom_call":
                rule = CUSTOM_CALLS.get(_ir.custom_call_target(op))
            if rule is None:
                raise no_rule(self.transform, op, "differentiation")
        outs, touts = rule(Ctx(op, self.T, self, env), primals, tangents)
        return [
            (p, t if t is not None and is_float(p.dtype) else None)
            for p, t in zip(outs, touts, strict=True)
        ]


# Filled by aotkit.transforms.control: while, case and if (rules that see regions).
CONTROL: dict = {}
# By custom call target (aotkit.transforms.linalg and others).
CUSTOM_CALLS: dict = {}


def defjvp(*names):
    def register(rule):
        for name in names:
            assert name not in JVP_RULES, name
            JVP_RULES[name] = rule
        return rule

    return register


# --- elementwise: one derivative factor per operand ----------------------------------------------


def _unary(factor, ctx, primals, tangents):
    """t_out = t * factor(x, y) (y the result)."""
    (x,), (t,) = primals, tangents
    (y,) = ctx.replay(primals)
    return [y], [L.mul(ctx.T, t, factor(x, y))]


def _def_unary(name, factor):
    JVP_RULES[name] = functools.partial(_unary, factor)


_def_unary("stablehlo.exponential", lambda x, y: y)
_def_unary("stablehlo.exponential_minus_one", lambda x, y: H.add(y, 1))
_def_unary("stablehlo.log", lambda x, y: H.reciprocal(x))
_def_unary("stablehlo.log_plus_one", lambda x, y: H.reciprocal(H.add(x, 1)))
_def_unary("stablehlo.sine", lambda x, y: H.cos(x))
_def_unary("stablehlo.cosine", lambda x, y: H.neg(H.sin(x)))
_def_unary("stablehlo.tan", lambda x, y: H.add(H.square(y), 1))
_def_unary("chlo.tan", lambda x, y: H.add(H.square(y), 1))
# jax 0.12 lowers lax.square of complex operands to chlo.square (x * x, holomorphic).
_def_unary("chlo.square", lambda x, y: H.mul(x, 2))
_def_unary("stablehlo.tanh", lambda x, y: H.mul(H.add(y, 1), H.sub(1, y)))


def _logistic_factor(x, y):
    """y (1 - y): JAX's, one value of the result, the only residual reverse mode keeps."""
    return H.mul(y, H.sub(1, y))


_def_unary("stablehlo.logistic", _logistic_factor)
_def_unary("stablehlo.sqrt", lambda x, y: H.div(0.5, y))
_def_unary("stablehlo.rsqrt", lambda x, y: H.mul(H.div(y, x), -0.5))
_def_unary("stablehlo.cbrt", lambda x, y: H.div(1 / 3, H.square(y)))
_def_unary("chlo.sinh", lambda x, y: H.cosh(x))
_def_unary("chlo.cosh", lambda x, y: H.sinh(x))
_def_unary("chlo.asin", lambda x, y: H.rsqrt(H.sub(1, H.square(x))))
_def_unary("chlo.acos", lambda x, y: H.neg(H.rsqrt(H.sub(1, H.square(x)))))
_def_unary("chlo.atan", lambda x, y: H.reciprocal(H.add(H.square(x), 1)))
_def_unary("chlo.asinh", lambda x, y: H.rsqrt(H.add(H.square(x), 1)))
_def_unary("chlo.acosh", lambda x, y: H.rsqrt(H.mul(H.sub(x, 1), H.add(x, 1))))
_def_unary("chlo.atanh", lambda x, y: H.reciprocal(H.mul(H.add(x, 1), H.sub(1, x))))
_def_unary("chlo.erf", lambda x, y: H.mul(H.exp(H.neg(H.square(x))), 2 / math.sqrt(math.pi)))
_def_unary("chlo.erfc", lambda x, y: H.mul(H.exp(H.neg(H.square(x))), -2 / math.sqrt(math.pi)))
_def_unary("chlo.erf_inv", lambda x, y: H.mul(H.exp(H.square(y)), math.sqrt(math.pi) / 2))
_def_unary("chlo.lgamma", lambda x, y: H.digamma(x))
_def_unary("chlo.digamma", lambda x, y: H.polygamma(1, x))
# Ops of newer StableHLO, which jax 0.12.1 emits for exp2, log2 and inside erf and erfc.
_def_unary("stablehlo.exp2", lambda x, y: H.mul(y, math.log(2.0)))
_def_unary("stablehlo.log2", lambda x, y: H.div(1 / math.log(2.0), x))
# jax 0.12.1 lowers lax.lgamma and lax.digamma on the CPU to kernels of jaxlib's (the
# trust check holds them to one array in, one of its type out): the CHLO ops' derivatives.
CUSTOM_CALLS["cpu_lgamma_ffi"] = JVP_RULES["chlo.lgamma"]
CUSTOM_CALLS["cpu_digamma_ffi"] = JVP_RULES["chlo.digamma"]


@defjvp("stablehlo.fma")
def _fma(ctx, primals, tangents):
    (a, b, _), (ta, tb, tc) = primals, tangents
    T = ctx.T
    return ctx.replay(primals), [L.add(T, L.add(T, L.mul(T, ta, b), L.mul(T, tb, a)), tc)]


@defjvp("chlo.polygamma")
def _polygamma(ctx, primals, tangents):
    (n, x), (tn, tx) = primals, tangents
    if tn is not None:
        raise TransformError(
            f"{ctx.ev.transform}: {op_site(ctx.op)} is polygamma(n, x) with a tangent in n, and "
            "its derivative in the order n is not defined (JAX's neither); differentiate "
            "with respect to x only"
        )
    (y,) = ctx.replay(primals)
    op = H.create("chlo.polygamma", [H.add(n, 1), x], [(x.shape, x.dtype)])
    return [y], [L.mul(ctx.T, tx, H.wrap(op.results[0]))]


@defjvp("stablehlo.negate")
def _negate(ctx, primals, tangents):
    end = _sigmoid_end(ctx.op)
    if end is not None:
        # The sigmoid's tangent is the divide's (`JVPEvaluator.apply`); the exp and the sum
        # between have none, and store nothing.
        ctx.ev.sigmoids[end] = tangents[0]
        return ctx.replay(primals), [None]
    return ctx.replay(primals), [L.neg(ctx.T, tangents[0])]


def _sigmoid_end(op):
    """The divide of `1 / (1 + exp(-x))` when `op` is its negate, in one block, each value
    between used once only (JAX lowers `lax.logistic` so); else None. Its derivative is
    then the logistic's, `y (1 - y)` of the result y, rather than the exp's and the
    quotient's (two residuals per sigmoid instead of one in reverse mode, and NaN where
    exp(-x) overflows)."""
    o = op.operation
    block = o.block
    value = o.results[0]
    for name, position in (
        ("stablehlo.exponential", None),
        ("stablehlo.add", None),
        ("stablehlo.divide", 1),
    ):
        use = _only_use(value)
        if use is None:
            return None
        user = use.owner.operation
        if user.name != name or user.block != block:
            return None
        if position is not None and use.operand_number != position:
            return None
        if name != "stablehlo.exponential" and not _is_one(user.operands[1 - use.operand_number]):
            return None
        value = user.results[0]
    return user if dtypes.is_float(_ir.aval(value)[1]) else None


def _only_use(value):
    """The one use of `value` (an OpOperand), or None when it has none or several."""
    uses = iter(value.uses)
    first = next(uses, None)
    if first is None or next(uses, None) is not None:
        return None
    return first


def _is_one(value) -> bool:
    """Whether `value` is a float constant of ones (a splat, or a scalar broadcast)."""
    owner = value.owner
    while isinstance(owner, ir.OpView | ir.Operation) and (
        owner.operation.name == "stablehlo.broadcast_in_dim"
    ):
        owner = owner.operation.operands[0].owner
    if not isinstance(owner, ir.OpView | ir.Operation) or (
        owner.operation.name != "stablehlo.constant"
    ):
        return False
    try:
        attr = ir.DenseElementsAttr(owner.operation.attributes["value"])
    except (TypeError, ValueError):  # a dense_resource blob, which the bindings cannot read
        return False
    return attr.is_splat and ir.FloatAttr(attr.get_splat_value()).value == 1.0


@defjvp("stablehlo.abs")
def _abs(ctx, primals, tangents):
    (x,), (t,) = primals, tangents
    (y,) = ctx.replay(primals)
    if dtypes.is_complex(x.dtype):
        factor = H.div(H.conj(x), H.replace_zero(H.convert(y, x.dtype)))
        return [y], [L.real(ctx.T, L.mul(ctx.T, t, factor))]
    return [y], [L.mul(ctx.T, t, H.select(H.compare(x, 0, "GE"), H.like(x, 1), H.like(x, -1)))]


@defjvp("stablehlo.real")
def _real(ctx, primals, tangents):
    return ctx.replay(primals), [L.real(ctx.T, tangents[0])]


@defjvp("stablehlo.imag")
def _imag(ctx, primals, tangents):
    return ctx.replay(primals), [L.imag(ctx.T, tangents[0])]


@defjvp("stablehlo.complex")
def _complex(ctx, primals, tangents):
    aval = (primals[0].shape, primals[0].dtype)
    return ctx.replay(primals), [L.complex_(ctx.T, tangents[0], tangents[1], aval)]


@defjvp("chlo.conj")
def _conj(ctx, primals, tangents):
    return ctx.replay(primals), [L.conj(ctx.T, tangents[0])]


@defjvp("stablehlo.convert")
def _convert(ctx, primals, tangents):
    (y,) = ctx.replay(primals)
    return [y], [L.convert(ctx.T, tangents[0], y.dtype)]


@defjvp("stablehlo.optimization_barrier")
def _identity_like(ctx, primals, tangents):
    # The tangents pass unchanged: a barrier orders the primal computation only. One that
    # stands for stop_gradient (kept in the primal, for the transforms of this transform)
    # has none.
    attributes = ctx.op.attributes
    if modules.STOP_GRADIENT in attributes:
        return ctx.replay(primals), [None] * len(tangents)
    if modules.CUSTOM_JVP in attributes:
        mark = ir.StringAttr(attributes[modules.CUSTOM_JVP]).value
        return _through_rule(ctx, mark, primals, tangents)
    if modules.CUSTOM_VJP in attributes:
        mark = ir.StringAttr(attributes[modules.CUSTOM_VJP]).value
        return _through_vjp_rule(ctx, mark, primals, tangents)
    return ctx.replay(primals), list(tangents)


def _through_rule(ctx, mark: str, primals: list, tangents: list):
    """The barriers around a custom JVP rule (`modules.CUSTOM_JVP`) when a primal has a
    tangent (else the op is replayed, marks and all): the values pass as they are and the
    marks are spent, since what this transform emits is the rule's derivative. Both
    barriers take the primals, with their tangents, so both decide alike.

    Forward mode runs the rule on the tangents' values, as JAX does (a rule need not be
    linear there): "begin" passes each tangent as the value in place of its zero, and the
    outputs leave "end" with the rule's tangent values. Reverse mode records the rule's
    derivative in its tangents (JAX requires a rule linear in them for reverse mode, so
    that is the rule): "begin" gives the zeros the primals' tangents and the primals none,
    and each output leaves "end" with the tangent of its tangent."""
    kind, _, count = mark.partition(" ")
    forward = isinstance(ctx.T, Forward)
    if kind == "begin":
        n = len(primals) // 2
        if forward:
            values = primals[:n] + [
                t if t is not None else z for t, z in zip(tangents[:n], primals[n:], strict=True)
            ]
            return values, [None] * (2 * n)
        return primals, [None] * n + tangents[:n]
    n = int(count)
    m = (len(primals) - n) // 2
    if forward:
        return primals, [None] * n + primals[n + m :] + [None] * m
    return primals, [None] * n + tangents[n + m :] + [None] * m


def _through_vjp_rule(ctx, mark: str, primals: list, tangents: list):
    """The barriers around a custom backward pass (`modules.CUSTOM_VJP`) when a primal has
    a tangent (else the op is replayed, marks and all); the values pass as they are.

    Forward mode, which JAX refuses for a custom_vjp function, differentiates its forward
    function: the tangents of the primals, outputs and residuals pass into "begin", and
    those of the primals and outputs out of "end". Reverse mode walks the backward
    function's ops (on zero cotangents, dead code) noting them; at "end" the outputs get
    tangents from one linear primitive of the primals' tangents, whose transpose evaluates
    those ops again on the outputs' cotangents, as JAX calls the backward function (it
    need not be linear: gradient clipping is not)."""
    kind, n, m = mark.split()
    n, m = int(n), int(m)
    ev = ctx.ev
    if isinstance(ctx.T, Forward):
        if kind == "begin":
            return primals, tangents[: n + m] + [None] * (len(primals) - n - m)
        return primals, tangents[: n + m] + [None] * n
    if kind == "begin":
        ev.backward_passes.append((ctx.op.operation.parent, []))
        return primals, [None] * len(primals)
    _, ops = ev.backward_passes.pop()
    ops.pop()  # (this op, noted as its walk began)
    run = functools.partial(_run_backward, ev.functions, ops, ctx.env, ctx.op.operation, n, m)
    outs = custom_vjp(ctx.T, tangents[:n], run, [(o.shape, o.dtype) for o in primals[n : n + m]])
    return primals, [None] * n + list(outs) + [None] * n


def custom_vjp(T: Algebra, tangents: list, backward, avals: list) -> list:
    """The linear primitive of a custom_vjp function's outputs' tangents (one per aval) from
    its primals' `tangents`, whose transpose is `backward(cts, *tangents)`."""
    prim = Linear(
        "custom_vjp", tuple(range(len(tangents))), _no_forward, backward, results=len(avals)
    )
    return T.bind(prim, tangents, aval=avals)


def _no_forward(*args):
    raise AssertionError("a custom_vjp function's cotangent map has no forward form")


def _run_backward(functions, ops, env, end, n: int, m: int, cts, *tangents):
    """The cotangents of a custom_vjp function's primals (one per primal): its backward
    function's ops (`ops`, walked in `env`, between the "begin" barrier and `end`)
    evaluated again with the outputs' cotangents `cts` (None: zero) in place of the zeros
    "begin" took."""
    begin = end.operands[n].owner  # (the outputs pass through it)
    begin = getattr(begin, "operation", begin)
    local = Env(env)
    slots = list(begin.results)[-m:]
    zeros = list(begin.operands)[-m:]
    for slot, zero, g in zip(slots, zeros, cts, strict=True):
        value = env[zero][0]
        local[slot] = (g if g is not None else H.zeros(value.shape, value.dtype), None)
    JVPEvaluator(functions, Forward(), "vjp").run_ops(ops, local)
    return [local[v][0] for v in list(end.operation.operands)[n + m :]]


@defjvp("stablehlo.reduce_precision")
def _reduce_precision(ctx, primals, tangents):
    attributes = {k: _ir.attr(ctx.op, k) for k in ("exponent_bits", "mantissa_bits")}
    return ctx.replay(primals), [L.reduce_precision(ctx.T, tangents[0], attributes)]


@defjvp("sdy.sharding_constraint")
def _sharding_constraint(ctx, primals, tangents):
    sharding = _ir.attr(ctx.op, "sharding")
    return ctx.replay(primals), [L.sharding_constraint(ctx.T, tangents[0], sharding)]


# --- elementwise: two or three operands ----------------------------------------------------------


@defjvp("stablehlo.add")
def _add(ctx, primals, tangents):
    return ctx.replay(primals), [L.add(ctx.T, *tangents)]


@defjvp("stablehlo.subtract")
def _subtract(ctx, primals, tangents):
    return ctx.replay(primals), [L.sub(ctx.T, *tangents)]


@defjvp("stablehlo.multiply")
def _multiply(ctx, primals, tangents):
    (x, y), (tx, ty) = primals, tangents
    T = ctx.T
    return ctx.replay(primals), [L.add(T, L.mul(T, tx, y), L.mul(T, ty, x))]


@defjvp("stablehlo.divide")
def _divide(ctx, primals, tangents):
    (_, y), (tx, ty) = primals, tangents
    T = ctx.T
    (out,) = ctx.replay(primals)
    t = L.div(T, tx, y)
    if ty is not None:
        t = L.sub(T, t, L.mul(T, ty, H.div(out, y)))
    return [out], [t]


def _balanced_eq(x, z, y):
    """1 where x is the result z (0.5 where y is too), else 0: JAX's split of ties."""
    half_or_one = H.select(H.compare(y, z, "EQ"), H.like(z, 0.5), H.like(z, 1))
    return H.select(H.compare(x, z, "EQ"), half_or_one, H.like(z, 0))


@defjvp("stablehlo.maximum", "stablehlo.minimum")
def _max_min(ctx, primals, tangents):
    (x, y), (tx, ty) = primals, tangents
    T = ctx.T
    (z,) = ctx.replay(primals)
    t = None
    if tx is not None:
        t = L.mul(T, tx, _balanced_eq(x, z, y))
    if ty is not None:
        t = L.add(T, t, L.mul(T, ty, _balanced_eq(y, z, x)))
    return [z], [t]


@defjvp("stablehlo.power")
def _power(ctx, primals, tangents):
    (x, y), (tx, ty) = primals, tangents
    T = ctx.T
    (out,) = ctx.replay(primals)
    t = None
    if tx is not None:
        slope = H.mul(y, H.power(x, H.sub(y, 1)))
        if _integer_exponent(ctx.op.operands[1]):
            # An integer exponent (`x ** n`, n an int array): 0 where n is 0 (x ** 0 is 1
            # everywhere), as JAX's, where y * x ** (y - 1) is 0 * inf = NaN at x = 0. (A
            # float exponent keeps the formula, and JAX's NaN there.)
            slope = H.select(H.compare(y, H.like(y, 0), "EQ"), H.like(slope, 0), slope)
        t = L.mul(T, tx, slope)
    if ty is not None:
        t = L.add(T, t, L.mul(T, ty, H.mul(H.log(H.replace_zero(x)), out)))
    return [out], [t]


def _integer_exponent(y: ir.Value) -> bool:
    """Whether a power's exponent is an integer array converted to a float one, or a
    constant of whole numbers (the pipeline folds `x ** n`'s convert of a constant n)."""
    if _ir.converted_from_integers(y):
        return True
    c = _ir.constant_of(y)
    return c is not None and bool(np.all(np.isfinite(c) & (c == np.round(c))))


@defjvp("stablehlo.remainder")
def _remainder(ctx, primals, tangents):
    (x, y), (tx, ty) = primals, tangents
    T = ctx.T
    (out,) = ctx.replay(primals)
    t = tx
    if ty is not None:
        q = H.div(x, y)
        t = L.sub(T, t, L.mul(T, ty, H.mul(H.sign(q), H.floor(H.abs_(q)))))
    return [out], [t]


@defjvp("stablehlo.atan2")
def _atan2(ctx, primals, tangents):
    (x, y), (tx, ty) = primals, tangents
    T = ctx.T
    (out,) = ctx.replay(primals)
    r = H.add(H.square(x), H.square(y))
    t = None
    if tx is not None:
        t = L.mul(T, tx, H.div(y, r))
    if ty is not None:
        t = L.add(T, t, L.mul(T, ty, H.div(H.neg(x), r)))
    return [out], [t]


@defjvp("stablehlo.select")
def _select(ctx, primals, tangents):
    pred, a, _ = primals
    (out,) = ctx.replay(primals)
    return [out], [L.select(ctx.T, pred, tangents[1], tangents[2], (a.shape, a.dtype))]


@defjvp("stablehlo.clamp")
def _clamp(ctx, primals, tangents):
    lo, x, hi = primals
    tlo, tx, thi = tangents
    T = ctx.T
    (out,) = ctx.replay(primals)
    lo_b, hi_b = H.broadcast_to(lo, x.shape), H.broadcast_to(hi, x.shape)
    tlo, thi = L.broadcast_to(T, tlo, x.shape), L.broadcast_to(T, thi, x.shape)
    aval = (x.shape, x.dtype)
    below = H.logical_and(H.compare(lo_b, x, "GT"), H.compare(lo_b, hi_b, "LT"))
    inside = H.logical_and(H.compare(x, lo_b, "GT"), H.compare(x, hi_b, "LT"))
    above = H.compare(hi_b, x, "LT")
    t = L.select(T, below, tlo, None, aval)
    t = L.add(T, t, L.select(T, inside, tx, None, aval))
    t = L.add(T, t, L.select(T, above, thi, None, aval))
    return [out], [t]


# --- layout: the op itself is linear ------------------------------------------------------------


@defjvp("stablehlo.broadcast_in_dim")
def _broadcast_in_dim(ctx, primals, tangents):
    (out,) = ctx.replay(primals)
    dims = _ir.i64s(ctx.op, "broadcast_dimensions")
    return [out], [L.broadcast_in_dim(ctx.T, tangents[0], out.shape, dims)]


@defjvp("stablehlo.reshape")
def _reshape(ctx, primals, tangents):
    (out,) = ctx.replay(primals)
    return [out], [L.reshape(ctx.T, tangents[0], out.shape)]


@defjvp("stablehlo.transpose")
def _transpose(ctx, primals, tangents):
    (out,) = ctx.replay(primals)
    return [out], [L.transpose(ctx.T, tangents[0], _ir.i64s(ctx.op, "permutation"))]


@defjvp("stablehlo.slice")
def _slice(ctx, primals, tangents):
    op = ctx.op
    (out,) = ctx.replay(primals)
    t = L.slice_(
        ctx.T,
        tangents[0],
        _ir.i64s(op, "start_indices"),
        _ir.i64s(op, "limit_indices"),
        _ir.i64s(op, "strides"),
    )
    return [out], [t]


@defjvp("stablehlo.reverse")
def _reverse(ctx, primals, tangents):
    (out,) = ctx.replay(primals)
    return [out], [L.reverse(ctx.T, tangents[0], _ir.i64s(ctx.op, "dimensions"))]


@defjvp("stablehlo.pad")
def _pad(ctx, primals, tangents):
    op = ctx.op
    x = primals[0]
    (out,) = ctx.replay(primals)
    t = L.pad(
        ctx.T,
        tangents[0],
        tangents[1],
        _ir.i64s(op, "edge_padding_low"),
        _ir.i64s(op, "edge_padding_high"),
        _ir.i64s(op, "interior_padding"),
        (x.shape, x.dtype),
    )
    return [out], [t]


@defjvp("stablehlo.concatenate")
def _concatenate(ctx, primals, tangents):
    (out,) = ctx.replay(primals)
    dim = _ir.int_attr(ctx.op, "dimension")
    avals = [(p.shape, p.dtype) for p in primals]
    return [out], [L.concatenate(ctx.T, list(tangents), dim, avals)]


@defjvp("stablehlo.dynamic_slice")
def _dynamic_slice(ctx, primals, tangents):
    (out,) = ctx.replay(primals)
    return [out], [L.dynamic_slice(ctx.T, tangents[0], primals[1:], out.shape)]


@defjvp("stablehlo.dynamic_update_slice")
def _dynamic_update_slice(ctx, primals, tangents):
    x, u = primals[:2]
    (out,) = ctx.replay(primals)
    t = L.dynamic_update_slice(
        ctx.T, tangents[0], tangents[1], primals[2:], (x.shape, x.dtype), (u.shape, u.dtype)
    )
    return [out], [t]


@defjvp("stablehlo.gather")
def _gather(ctx, primals, tangents):
    (out,) = ctx.replay(primals)
    t = L.gather(
        ctx.T,
        tangents[0],
        primals[1],
        _ir.gather_dims(ctx.op),
        _ir.i64s(ctx.op, "slice_sizes"),
        (out.shape, out.dtype),
    )
    return [out], [t]


# --- products ------------------------------------------------------------------------------------


def _precision(op):
    return _ir.attr(op, "precision_config") if _ir.has(op, "precision_config") else None


def _dot_rule(ctx, primals, tangents, dims):
    (a, b), (ta, tb) = primals, tangents
    T = ctx.T
    (out,) = ctx.replay(primals)
    common = {"dims": dims, "precision": _precision(ctx.op), "dtype": out.dtype}
    t = L.add(
        T,
        L.dot_general(T, ta, b, linear="lhs", **common),
        L.dot_general(T, a, tb, linear="rhs", **common),
    )
    return [out], [t]


@defjvp("stablehlo.dot_general")
def _dot_general(ctx, primals, tangents):
    return _dot_rule(ctx, primals, tangents, _ir.dot_dims(ctx.op))


@defjvp("stablehlo.dot")
def _dot(ctx, primals, tangents):
    a = primals[0]
    return _dot_rule(ctx, primals, tangents, _ir.DotDims((a.ndim - 1,), (0,), (), ()))


# --- reductions ----------------------------------------------------------------------------------


def _is_identity(value, kind: str) -> bool:
    """Whether the init `value` of a max (min) reduction is a constant no element can
    beat: -inf or the dtype's lowest (inf or its highest)."""
    c = _ir.constant_of(value)
    if c is None or c.shape != ():
        return False
    if kind == "max":
        return bool(c == -np.inf) or bool(c == dtypes.lowest(c.dtype))
    return bool(c == np.inf) or bool(c == dtypes.highest(c.dtype))


@defjvp("stablehlo.reduce")
def _reduce(ctx, primals, tangents):
    op = ctx.op
    o = op.operation
    n = len(primals) // 2
    kind = _ir.combiner(o.regions[0])
    dims = _ir.i64s(op, "dimensions")
    outs = ctx.replay(primals)
    if n != 1 or kind is None:
        # A reduction of several operands (argmax: a value and its index): its integer
        # results have no tangent; a float result that nothing uses needs none.
        if all(not is_float(y.dtype) or _unused(r) for y, r in zip(outs, o.results, strict=True)):
            return outs, [None] * len(outs)
        raise TransformError(
            f"{ctx.ev.transform}: {op_site(op)} reduces {n} operand(s) with a region aotkit "
            "has no derivative for (its rules cover add, mul, max, min, and, or of one "
            "operand); write the reduction with those"
        )
    (x, init), (t, t_init) = primals, tangents
    (y,) = outs
    T = ctx.T
    kept = [d for d in range(x.ndim) if d not in dims]
    if kind == "add":
        tout = L.reduce_sum(T, t, dims)
        if t_init is not None:
            tout = L.add(T, tout, L.broadcast_in_dim(T, t_init, y.shape, ()))
        return [y], [tout]
    if kind in ("max", "min"):
        yb = H.broadcast_in_dim(y, x.shape, kept)
        ind = H.convert(H.compare(x, yb, "EQ"), x.dtype)
        counts = H.reduce_sum(ind, dims)
        tout = L.reduce_sum(T, L.mul(T, t, ind), dims)
        if not _is_identity(o.operands[1], kind):
            at_init = H.convert(H.compare(y, H.broadcast_in_dim(init, y.shape, ()), "EQ"), x.dtype)
            counts = H.add(counts, at_init)
            if t_init is not None:
                tout = L.add(T, tout, L.mul(T, L.broadcast_in_dim(T, t_init, y.shape, ()), at_init))
        return [y], [L.div(T, tout, counts)]
    if kind == "mul":
        others = _product_of_others(x, dims)
        tout = L.reduce_sum(
            T, L.mul(T, t, H.mul(others, H.broadcast_in_dim(init, x.shape, ()))), dims
        )
        if t_init is not None:
            prod = H.reduce(x, H.scalar(1, x.dtype), dims, "mul")
            tout = L.add(T, tout, L.mul(T, L.broadcast_in_dim(T, t_init, y.shape, ()), prod))
        return [y], [tout]
    return [y], [None]  # and, or, xor: integer results


def _unused(value) -> bool:
    return next(iter(value.uses), None) is None


def _product_of_others(x, dims):
    """For each element of x, the product of the other elements of its reduction group
    (exact with zeros: exclusive products from both sides, no division)."""
    dims = sorted(dims)
    kept = [d for d in range(x.ndim) if d not in dims]
    perm = kept + dims
    moved = H.transpose(x, perm)
    group = math.prod(x.shape[d] for d in dims)
    flat = H.reshape(moved, tuple(x.shape[d] for d in kept) + (group,))
    n = flat.ndim
    one = H.scalar(1, x.dtype)
    window = [1] * (n - 1) + [group]
    # Inclusive products from the left and from the right, shifted by one with a 1.
    from_left = H.reduce_window(
        flat, one, "mul", window, padding=[(0, 0)] * (n - 1) + [(group - 1, 0)]
    )
    from_right = H.reduce_window(
        flat, one, "mul", window, padding=[(0, 0)] * (n - 1) + [(0, group - 1)]
    )
    ones = H.full_like_aval((flat.shape[:-1] + (1,), x.dtype), 1)
    lo, hi = [0] * n, list(flat.shape)
    hi[-1] = group - 1
    left = H.concatenate([ones, H.slice_(from_left, lo, hi)], n - 1)
    lo[-1], hi[-1] = 1, group
    right = H.concatenate([H.slice_(from_right, lo, hi), ones], n - 1)
    others = H.reshape(H.mul(left, right), moved.shape)
    return H.transpose(others, np.argsort(perm))


# --- sorting -------------------------------------------------------------------------------------


@defjvp("stablehlo.sort")
def _sort(ctx, primals, tangents):
    """Sorts with an iota beside the operands; each tangent is gathered along the sorted
    dimension by that permutation (JAX's rule)."""
    op = ctx.op
    o = op.operation
    dim = _ir.int_attr(op, "dimension")
    x = primals[0]
    index_dtype = np.dtype(np.int32 if x.shape[dim] < 2**31 - 1 else np.int64)
    iota = H.iota(x.shape, index_dtype, dim)
    avals = [(p.shape, p.dtype) for p in primals] + [(x.shape, index_dtype)]
    attributes = o.attributes
    new = H.create(
        o.name,
        list(primals) + [iota],
        avals,
        {k: attributes[k] for k in attributes},
        regions=1,
    )
    copy = o.clone(ip=False)
    block = list(copy.regions[0].blocks)[0]
    block.append_to(new.regions[0])
    copy.erase()
    scalar = dtypes.tensor_type((), index_dtype)
    block.add_argument(scalar, ir.Location.unknown())
    block.add_argument(scalar, ir.Location.unknown())
    outs = H.results(new)
    perm = outs[-1]
    batch = tuple(d for d in range(x.ndim) if d != dim)
    gdims = _ir.GatherDims(
        offset_dims=(),
        collapsed_slice_dims=(dim,),
        operand_batching_dims=batch,
        start_indices_batching_dims=batch,
        start_index_map=(dim,),
        index_vector_dim=x.ndim,
    )
    sizes = (1,) * x.ndim
    touts = [
        L.gather(ctx.T, t, perm, gdims, sizes, (p.shape, p.dtype))
        for t, p in zip(tangents, primals, strict=True)
    ]
    return outs[:-1], touts


# --- scatter -------------------------------------------------------------------------------------


@defjvp("stablehlo.scatter")
def _scatter(ctx, primals, tangents):
    op = ctx.op
    o = op.operation
    if len(primals) != 3:
        raise TransformError(
            f"{ctx.ev.transform}: {op_site(op)} scatters {len(primals) // 2} operands at once; "
            "aotkit differentiates scatters of one operand"
        )
    kind = _ir.combiner(o.regions[0])
    x, idx, u = primals
    tx, _, tu = tangents
    T = ctx.T
    dims = _ir.scatter_dims(op)
    (out,) = ctx.replay(primals)
    xa, ua = (x.shape, x.dtype), (u.shape, u.dtype)
    if kind == "add":
        return [out], [L.scatter_add(T, tx, idx, tu, dims, xa, ua)]
    if kind == "replace":
        return [out], [_scatter_replace_tangent(T, x, idx, u, tx, tu, dims)]
    if kind in ("max", "min"):
        return [out], [_scatter_extremal_tangent(T, x, idx, u, out, tx, tu, dims)]
    if kind == "mul":
        return [out], [_scatter_mul_tangent(T, x, idx, u, tx, tu, dims)]
    raise TransformError(
        f"{ctx.ev.transform}: {op_site(op)} is a scatter that combines with "
        f"{kind or 'a custom region'}; aotkit differentiates scatters that add, replace, "
        "multiply, or take the minimum or maximum"
    )


def _scatter_extremal_tangent(T, x, idx, u, out, tx, tu, dims):
    """The tangent of a scatter that keeps the minimum or maximum (JAX's rule): where
    several values tie for a location (updates, and the operand's own value), each gets
    an equal share of the location's tangent."""
    xa, ua = (x.shape, x.dtype), (u.shape, u.dtype)
    gdims = H.gather_dims_of_scatter(dims)
    sizes = H.scatter_slice_sizes(x.shape, u.shape, dims)

    def at_updates(v):  # the operand-shaped v, read at each update's location
        return H.gather(v, idx, gdims, sizes)

    target = at_updates(out)
    won = H.compare(u, target, "EQ")
    kept = H.compare(at_updates(x), target, "EQ")
    one, zero = H.like(u, 1), H.like(u, 0)
    winners = at_updates(H.scatter(H.zeros(*xa), idx, H.select(won, one, zero), dims, "add"))
    refs = at_updates(H.scatter(H.zeros(*xa), idx, one, dims, "add"))
    share = H.select(kept, H.reciprocal(H.add(winners, 1)), H.reciprocal(winners))
    update_coef = H.select(won, share, zero)
    operand_coef = H.div(H.sub(H.select(kept, H.reciprocal(H.add(winners, 1)), zero), 1), refs)
    t_updates = L.add(
        T,
        L.mul(T, L.gather(T, tx, idx, gdims, sizes, ua), operand_coef),
        L.mul(T, tu, update_coef),
    )
    return L.scatter_add(T, tx, idx, t_updates, dims, xa, ua)


def _scatter_mul_tangent(T, x, idx, u, tx, tu, dims):
    """The tangent of a scatter that multiplies: the operand's tangent times the product of
    the updates at its location; each update's tangent times the operand and the other
    updates at its location, exact with zeros and duplicates (JAX's rule needs unique
    indices for the updates' part)."""
    xa, ua = (x.shape, x.dtype), (u.shape, u.dtype)
    product = H.scatter(H.full_like_aval(xa, 1), idx, u, dims, "mul")
    t = L.mul(T, tx, product)
    if tu is None:
        return t
    gdims = H.gather_dims_of_scatter(dims)
    sizes = H.scatter_slice_sizes(x.shape, u.shape, dims)
    is_zero = H.compare(u, 0, "EQ")
    one, zero = H.like(u, 1), H.like(u, 0)
    # Per location, the product of its nonzero updates and how many are zero; the product
    # of the others of an update follows without dividing by zero.
    nonzero = H.gather(
        H.scatter(H.full_like_aval(xa, 1), idx, H.select(is_zero, one, u), dims, "mul"),
        idx,
        gdims,
        sizes,
    )
    zeros = H.gather(
        H.scatter(H.zeros(*xa), idx, H.select(is_zero, one, zero), dims, "add"), idx, gdims, sizes
    )
    others = H.select(
        is_zero,
        H.select(H.compare(zeros, 1, "EQ"), nonzero, zero),
        H.select(H.compare(zeros, 0, "EQ"), H.div(nonzero, H.select(is_zero, one, u)), zero),
    )
    coef = H.mul(H.gather(x, idx, gdims, sizes), others)
    return L.add(T, t, L.scatter_add(T, None, idx, L.mul(T, tu, coef), dims, xa, ua))


def _scatter_replace_tangent(T, x, idx, u, tx, tu, dims):
    """The tangent of a scatter that replaces, duplicates included (JAX's rule): each
    update window gets an id, the ids are scattered like the updates, and an update's
    tangent lands only where its id won."""
    scatter_dims = [d for d in range(u.ndim) if d not in dims.update_window_dims]
    counts = [u.shape[d] for d in scatter_dims]
    n = max(1, math.prod(counts))
    id_dtype = np.dtype(np.int32 if n < 2**31 - 2 else np.int64)
    flat = H.add(H.iota((n,), id_dtype, 0), 1)
    ids = H.broadcast_in_dim(H.reshape(flat, tuple(counts)), u.shape, scatter_dims)
    written = H.scatter(H.zeros(x.shape, id_dtype), idx, ids, dims, "replace")
    gdims = H.gather_dims_of_scatter(dims)
    sizes = H.scatter_slice_sizes(x.shape, u.shape, dims)
    won = H.compare(H.gather(written, idx, gdims, sizes), ids, "EQ")
    won = H.logical_and(won, L.scatter_in_bounds(idx, dims, x.shape, u.shape))
    ua = (u.shape, u.dtype)
    xa = (x.shape, x.dtype)
    kept = L.select(T, H.compare(written, 0, "EQ"), tx, None, xa)
    placed = L.scatter_add(T, None, idx, L.select(T, won, tu, None, ua), dims, xa, ua)
    return L.add(T, kept, placed)


# --- evaluation entry points ---------------------------------------------------------------------


def jvp_function(functions, func_op, primals, tangents, T: Algebra | None = None, transform="jvp"):
    """Runs `func_op` on primal tracers and their tangents (None: zero); returns (primal
    outputs, output tangents)."""
    ev = JVPEvaluator(functions, T if T is not None else Forward(), transform)
    outs = ev.run_function(func_op, list(zip(primals, tangents, strict=True)))
    return [p for p, _ in outs], [t for _, t in outs]
