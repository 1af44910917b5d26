"""Dynamic StableHLO, proven: every dimension of a symbolic program as a `Dim` of its symbols.

A symbolic program is one dynamic StableHLO module (`tensor<?x784xf32>`) whose signature
names its dimensions (`f32[b,784]`) under constraints. Compiled per shape (XLA; aotkit/
specialize.py), it is refined to static shapes first, and MLIR's verifier checks every op
at those shapes. A backend that compiles it once for every shape (`Backend.dynamic_shapes`:
iree) gets no such check: an op whose operands disagree when it runs (an `add` of `b` and
`c` elements, a reshape that changes the element count, a broadcast of a dimension that is
neither 1 nor the result's) reads out of bounds there, and a compiler that cannot tell
whether a dimension broadcasts refuses the op.

`prove` reads a copy of the module (its calls inlined) op by op and gives each dimension of
each value as an int or a `Dim` of the signature's scope, computed by the op's own shape
rule from its operands, from `stablehlo.get_dimension_size` and the integer arithmetic on
dimensions, and from the shape operands of the dynamic ops. Each op's requirements are
checked over the symbols: the operands of an elementwise op have equal dimensions, a dot's
batch and contracting dimensions match, a reshape keeps the element count, a dynamic
broadcast's operand dimension equals its result's or is 1, a slice stays inside its
operand, and `@main` returns the signature's dimensions. What the constraints decide holds
for every size a call may bind (the call checks them: `SymbolicSignature.bind`, in
signatures.py), so this is a proof for all sizes, not a sample. An op without a rule here,
or a requirement the constraints leave open, raises `NotDynamic` naming the op, its line and
why; the caller then compiles per shape.

jax.export's `shape_assertion` calls become `Assertion`s, checks over the symbols' values
that run on the host once per new shape (the per-shape path decides them at refinement),
and are removed from the copy. So does every dimension the module computes in integers
narrower than 64 bits (jax.export computes them in i32): a size whose arithmetic would wrap
there is refused before the program runs, since the proof is over exact integers.

This module builds no IR beyond the copy and its inlined calls: a backend rewrites what it
lacks from the `Proof` (aotkit/backends/_iree_dynamic.py).
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from jaxlib.mlir import ir, passmanager
from jaxlib.mlir.dialects import stablehlo

from aotkit import modules
from aotkit.errors import printable
from aotkit.specs import ShapeDtype
from aotkit.symbolic import algebra

SHAPE_ASSERTION = "shape_assertion"
MAX_ASSERTION_TEXT = 2000
_PLACEHOLDER = re.compile(r"\{(\d+)\}")
# Shape tensors (`tensor<3xi64>`) longer than this are not read element by element.
MAX_SHAPE_VECTOR = 64
_DCE = "builtin.module(symbol-dce)"


class NotDynamic(Exception):
    """The module's dynamic shapes cannot be proven (or compiled once): `str()` says which
    op, where and why. The caller compiles the program per shape instead."""


# --- scalars: dimension arithmetic ----------------------------------------------------------


@dataclass(frozen=True)
class Expr:
    """An integer computed from the symbols that a `Dim` cannot hold (a comparison, a
    truncating division, a select): evaluated on the host, never used as a dimension."""

    fn: Callable[[dict[str, int]], int]
    text: str

    def __str__(self) -> str:
        return self.text


def evaluate(x, values: dict[str, int]) -> int:
    """The value of an int, a `Dim` or an `Expr` for the symbols' `values`."""
    if isinstance(x, int):
        return x
    if isinstance(x, algebra.Dim):
        return x.evaluate(values)
    return x.fn(values)


def _expr(fn, text: str, *args) -> Expr:
    return Expr(lambda v: fn(*(evaluate(a, v) for a in args)), text)


def _trunc_div(a: int, b: int) -> int:
    if b == 0:
        return -1  # XLA's integer division by zero
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def _trunc_rem(a: int, b: int) -> int:
    if b == 0:
        return a
    return a - b * _trunc_div(a, b)


def _nonnegative(x) -> bool:
    if isinstance(x, int):
        return x >= 0
    if isinstance(x, algebra.Dim):
        return x.scope.try_ge(x, 0) is True
    return False


def _exact(x) -> bool:
    return isinstance(x, int | algebra.Dim)


def _divide(a, b):
    # StableHLO truncates; a Dim floors: the same for a nonnegative dividend and divisor.
    if _exact(a) and isinstance(b, int) and b > 0 and _nonnegative(a):
        return a // b
    return _expr(_trunc_div, f"({a}) / ({b})", a, b)


def _remainder(a, b):
    if _exact(a) and isinstance(b, int) and b > 0 and _nonnegative(a):
        return a % b
    return _expr(_trunc_rem, f"({a}) rem ({b})", a, b)


def _binary(fn, symbol: str, a, b):
    if _exact(a) and _exact(b):
        return fn(a, b)
    return _expr(fn, f"({a}) {symbol} ({b})", a, b)


_COMPARE = {
    "EQ": ("==", lambda a, b: int(a == b)),
    "NE": ("!=", lambda a, b: int(a != b)),
    "GE": (">=", lambda a, b: int(a >= b)),
    "GT": (">", lambda a, b: int(a > b)),
    "LE": ("<=", lambda a, b: int(a <= b)),
    "LT": ("<", lambda a, b: int(a < b)),
}


def _compare(direction: str, a, b) -> bool | None:
    """`a direction b` where the constraints decide it for every size, else None."""
    if direction in ("EQ", "NE"):
        found = _decide(a, "==", b)
        return found if found is None or direction == "EQ" else not found
    if isinstance(a, Expr) or isinstance(b, Expr):
        return None
    if direction == "GE":
        return _decide(a, ">=", b)
    if direction == "GT":
        return _decide(a, ">=", b + 1)
    if direction == "LE":
        return _decide(b, ">=", a)
    return _decide(b, ">=", a + 1)


def _scalar_rule(op: ir.Operation, args: list):
    """The value of a rank-0 integer op over known operand values, or None."""
    name = op.name
    if name == "stablehlo.add":
        return _binary(lambda a, b: a + b, "+", *args)
    if name == "stablehlo.subtract":
        return _binary(lambda a, b: a - b, "-", *args)
    if name == "stablehlo.multiply":
        return _binary(lambda a, b: a * b, "*", *args)
    if name == "stablehlo.divide":
        return _divide(*args)
    if name == "stablehlo.remainder":
        return _remainder(*args)
    if name == "stablehlo.maximum":
        return _binary(algebra.dim_max, "max", *args)
    if name == "stablehlo.minimum":
        return _binary(algebra.dim_min, "min", *args)
    if name == "stablehlo.negate":
        return -args[0] if _exact(args[0]) else _expr(lambda a: -a, f"-({args[0]})", *args)
    if name == "stablehlo.convert":
        return args[0]  # integer to integer; widths are checked as `bounded`
    if name == "stablehlo.compare":
        direction = stablehlo.ComparisonDirectionAttr(op.attributes["comparison_direction"])
        symbol, fn = _COMPARE[direction.value]
        decided = _compare(direction.value, *args)
        if decided is not None:
            return int(decided)  # the constraints decide it: a branch on it is known
        return _expr(fn, f"{args[0]} {symbol} {args[1]}", *args)
    if name == "stablehlo.select":
        pred, a, b = args
        if isinstance(pred, int):
            return a if pred else b
        return _expr(lambda p, x, y: x if p else y, f"({pred} ? {a} : {b})", pred, a, b)
    boolean = ir.IntegerType(_element(op.results[0])).width == 1
    if name in ("stablehlo.and", "stablehlo.or"):
        a, b = args
        if isinstance(a, int) and isinstance(b, int):
            return a & b if name == "stablehlo.and" else a | b
        absorbing = 0 if name == "stablehlo.and" else 1
        if boolean and absorbing in (a, b) and (isinstance(a, int) or isinstance(b, int)):
            return absorbing
        fn, symbol = (
            (lambda x, y: x & y, "&") if name == "stablehlo.and" else (lambda x, y: x | y, "|")
        )
        return _expr(fn, f"({a}) {symbol} ({b})", a, b)
    if name == "stablehlo.not":
        if not boolean:
            return None
        if isinstance(args[0], int):
            return 1 - (args[0] & 1)
        return _expr(lambda a: 1 - (a & 1), f"!({args[0]})", *args)
    if name == "stablehlo.clamp":
        low, x, high = args
        if all(map(_exact, args)):
            return algebra.dim_max(low, algebra.dim_min(x, high))
        return _expr(lambda lo, v, hi: max(lo, min(v, hi)), f"clamp({x})", low, x, high)
    return None


# --- assertions -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Assertion:
    """One jax.export `shape_assertion`: `condition` holds (nonzero) for sizes the program
    takes; `template` is its error message, `{k}` filled from `arguments`."""

    condition: object
    arguments: tuple
    template: str

    def failure(self, values: dict[str, int]) -> str | None:
        """The error message when `values` break it, or None."""
        if evaluate(self.condition, values):
            return None
        args = [evaluate(a, values) for a in self.arguments]

        def fill(m):
            k = int(m.group(1))
            return str(args[k]) if k < len(args) else m.group(0)

        return printable(_PLACEHOLDER.sub(fill, self.template[:MAX_ASSERTION_TEXT]))


# --- the proof ------------------------------------------------------------------------------


@dataclass
class Proof:
    """What `prove` found, for a backend to rewrite from and a call to check.

    `module` is the copy it read (calls inlined, shape assertions removed), in the source's
    context; `dims` maps each tensor value of `@main`'s body to its dimensions; `vectors`
    each 1-D integer tensor whose elements are known (shape operands) to them;
    `broadcasts` each `dynamic_broadcast_in_dim`'s result to its (expanding,
    nonexpanding) operand dimensions; `assertions`, `requirements` and `bounded` are
    checked per new set of sizes (`failure`)."""

    module: ir.Operation
    dims: dict = field(default_factory=dict)
    vectors: dict = field(default_factory=dict)
    scalars: dict = field(default_factory=dict)
    broadcasts: dict = field(default_factory=dict)
    assertions: list = field(default_factory=list)
    # (integer, bits): a dimension the module computes in a `bits`-wide signed integer.
    bounded: list = field(default_factory=list)
    requirements: list = field(default_factory=list)

    def failure(self, values: dict[str, int]) -> str | None:
        """Why the module must not run for `values` (a failing assertion, or a size its
        narrow integer arithmetic would wrap), or None."""
        for check in (*self.assertions, *self.requirements):
            message = check.failure(values)
            if message is not None:
                return message
        for x, bits in self.bounded:
            n = evaluate(x, values)
            if not -(2 ** (bits - 1)) <= n < 2 ** (bits - 1):
                return (
                    f"the program computes {x} = {n} in {bits}-bit integers, where it does not "
                    "fit; pass smaller sizes"
                )
        return None


def prove(module, lc, in_specs: Sequence[ShapeDtype], out_specs: Sequence[ShapeDtype]) -> Proof:
    """The `Proof` of a copy of `module` (in its lowering context `lc`) for the symbolic
    signature `in_specs -> out_specs`; `NotDynamic` where an op's shapes cannot be proven."""
    with lc, ir.Location.unknown():
        copy = module.operation.clone()
        flatten_calls(copy.operation, lc)
        proof = Proof(copy.operation)
        main = _main(copy.operation)
        if main is None:
            raise NotDynamic("the module has no @main function")
        block = main.regions[0].blocks[0]
        if len(main.regions[0].blocks) != 1 or len(block.arguments) != len(in_specs):
            raise NotDynamic("@main is not one block taking the signature's arguments")
        prover = _Prover(proof)
        for arg, spec in zip(block.arguments, in_specs, strict=True):
            prover.argument(arg, spec)
        for op in block.operations:
            op = op.operation
            if op.name == "func.return":
                prover.returns(op, out_specs)
                continue
            prover.visit(op)
        for op in prover.erase:
            op.erase()
        return proof


def _main(module_op: ir.Operation):
    for op in module_op.regions[0].blocks[0].operations:
        if op.operation.name == "func.func":
            if ir.StringAttr(op.attributes["sym_name"]).value == "main":
                return op.operation
    return None


def _target(op: ir.Operation) -> str:
    return ir.StringAttr(op.attributes["call_target_name"]).value


def _element(value: ir.Value) -> ir.Type:
    return ir.ShapedType(value.type).element_type


def _tensor(value: ir.Value) -> ir.RankedTensorType | None:
    try:
        return ir.RankedTensorType(value.type)
    except ValueError:
        return None


def _is_integer(t: ir.Type) -> bool:
    return isinstance(t, ir.IntegerType)


def _ints(op: ir.Operation, name: str) -> list[int]:
    return list(ir.DenseI64ArrayAttr(op.attributes[name]))


def _where(op: ir.Operation) -> str:
    return f"{op.name}{modules.op_location(op)}"


def _same(a, b) -> bool:
    """Whether dimensions `a` and `b` are equal for every size (the constraints decide)."""
    return _decide(a, "==", b) is True


def _decide(a, relation: str, b) -> bool | None:
    """Whether `a relation b` (`==` or `>=`) holds for every size the constraints allow
    (True), for none (False), or is undecided (None)."""
    if isinstance(a, Expr) or isinstance(b, Expr):
        return None
    if isinstance(a, int) and isinstance(b, int):
        return a == b if relation == "==" else a >= b
    scope = (a if isinstance(a, algebra.Dim) else b).scope
    if relation == "==":
        return True if a == b else scope.try_eq(a, b)
    return scope.try_ge(a, b)


@dataclass(frozen=True)
class Requirement:
    """`left relation right` (`==`, `>=`), which an op needs and the constraints leave
    open: checked on the host for each new set of sizes before the program runs."""

    where: str
    what: str
    left: object
    relation: str
    right: object

    def failure(self, values: dict[str, int]) -> str | None:
        a, b = evaluate(self.left, values), evaluate(self.right, values)
        if (a == b) if self.relation == "==" else (a >= b):
            return None
        return (
            f"{self.where} needs {self.what} ({self.left} {self.relation} {self.right}), "
            f"which these sizes break ({a} against {b}); pass sizes for which it holds"
        )


def _product(dims) -> object:
    return functools.reduce(lambda x, y: x * y, dims, 1)


# --- rules: one per op, in one table ---------------------------------------------------------

_RULES: dict[str, Callable] = {}


def _rule(*names: str):
    def register(fn):
        for name in names:
            _RULES[name] = fn
        return fn

    return register


class _Prover:
    def __init__(self, proof: Proof):
        self.proof = proof
        self.erase: list[ir.Operation] = []  # the shape assertions, checked on the host

    # -- values

    def argument(self, value: ir.Value, spec: ShapeDtype) -> None:
        t = _tensor(value)
        if t is None or t.rank != len(spec.shape) or t.encoding is not None:
            raise NotDynamic(f"@main's argument type {value.type} is not the signature's {spec}")
        for k, d in enumerate(spec.shape):
            if t.is_dynamic_dim(k) != isinstance(d, algebra.Dim) or (
                not t.is_dynamic_dim(k) and t.shape[k] != d
            ):
                raise NotDynamic(
                    f"@main's argument type {value.type} is not the signature's {spec}"
                )
        self.proof.dims[value] = tuple(spec.shape)

    def dims(self, value: ir.Value, op: ir.Operation) -> tuple:
        found = self.proof.dims.get(value)
        if found is not None:
            return found
        t = _tensor(value)
        if t is not None and t.has_static_shape:
            return tuple(t.shape)
        raise NotDynamic(f"{_where(op)} takes a value of type {value.type} with unknown dimensions")

    def scalar(self, value: ir.Value):
        return self.proof.scalars.get(value)

    def vector(self, value: ir.Value, op: ir.Operation, what: str) -> tuple:
        found = self.proof.vectors.get(value)
        if found is None or any(isinstance(x, Expr) for x in found):
            raise NotDynamic(
                f"{_where(op)} takes its {what} from a computation aotkit cannot follow over "
                "the symbols"
            )
        return found

    def result(self, op: ir.Operation, dims, index: int = 0) -> None:
        value = op.results[index]
        t = _tensor(value)
        dims = tuple(dims)
        if t is None or t.rank != len(dims):
            raise NotDynamic(f"{_where(op)} gives {value.type}, not a tensor of rank {len(dims)}")
        out = []
        for k, d in enumerate(dims):
            if isinstance(d, Expr):
                raise NotDynamic(
                    f"{_where(op)} has a dimension computed as {d}, which is no polynomial "
                    "of the symbols"
                )
            if t.is_dynamic_dim(k):
                out.append(d)
            elif _same(d, t.shape[k]):
                out.append(t.shape[k])
            else:
                raise NotDynamic(
                    f"{_where(op)} gives dimension {k} as {t.shape[k]}, but its operands make "
                    f"it {d}"
                )
        self.proof.dims[value] = tuple(out)

    def equal(self, op: ir.Operation, a, b, what: str) -> None:
        self.require(op, a, "==", b, f"{what} to be equal")

    def require(self, op: ir.Operation, a, relation: str, b, what: str) -> None:
        """`a relation b` holds for every size, or is checked for each new set of sizes;
        NotDynamic where it holds for none."""
        found = _decide(a, relation, b)
        if found is True:
            return
        if found is False:
            raise NotDynamic(
                f"{_where(op)} needs {what} ({a} {relation} {b}), which holds for no sizes "
                "its constraints allow"
            )
        self.proof.requirements.append(Requirement(_where(op), what, a, relation, b))

    # -- ops

    def visit(self, op: ir.Operation) -> None:
        for value in op.results:
            t = _tensor(value)
            if t is not None and t.encoding is not None:
                raise NotDynamic(
                    f"{_where(op)} gives {value.type}, whose encoding (bounded dimensions, "
                    "sparsity) aotkit does not prove"
                )
        rule = _RULES.get(op.name)
        if rule is None:
            self.static(op)
        else:
            rule(self, op)
        self.track(op)

    def static(self, op: ir.Operation) -> None:
        """An op without a rule: only with static shapes throughout (MLIR's verifier checks
        them); its results' dimensions are their types'."""
        for value in [*op.operands, *op.results]:
            t = _tensor(value)
            if t is not None and not t.has_static_shape:
                raise NotDynamic(
                    f"{_where(op)} has dynamic shapes ({value.type}), and aotkit has no rule "
                    "proving them for every size"
                )
        _static_regions(op)
        for value in op.results:
            t = _tensor(value)
            if t is not None:
                self.proof.dims[value] = tuple(t.shape)

    def track(self, op: ir.Operation) -> None:
        """Follows integer scalars and short integer vectors: the dimension arithmetic."""
        if len(op.results) != 1:
            return
        value = op.results[0]
        t = _tensor(value)
        if t is None or not t.has_static_shape or not _is_integer(t.element_type):
            return
        if t.rank == 0:
            x = None
            if op.name == "stablehlo.constant":
                x = (_constant_ints(op, 1) or [None])[0]
            elif op.name == "stablehlo.get_dimension_size":
                x = self.dims(op.operands[0], op)[ir.IntegerAttr(op.attributes["dimension"]).value]
            elif op.name == "stablehlo.reshape":
                known = self.proof.vectors.get(op.operands[0])
                x = known[0] if known is not None and len(known) == 1 else None
            elif op.operands and all(_tensor(v) is not None for v in op.operands):
                args = [self.scalar(v) for v in op.operands]
                if all(a is not None for a in args) and all(
                    _tensor(v).rank == 0 for v in op.operands
                ):
                    x = _scalar_rule(op, args)
            if x is not None:
                self.proof.scalars[value] = x
                width = ir.IntegerType(t.element_type).width
                if isinstance(x, algebra.Dim) and 1 < width < 64:
                    self.proof.bounded.append((x, width))
            return
        if t.rank != 1 or t.shape[0] > MAX_SHAPE_VECTOR:
            return
        n = t.shape[0]
        elements = None
        if op.name == "stablehlo.constant":
            found = _constant_ints(op, n)
            elements = tuple(found) if found is not None else None
        elif op.name == "stablehlo.reshape":
            s = self.scalar(op.operands[0])
            if s is not None and n == 1:
                elements = (s,)
        elif op.name == "stablehlo.concatenate":
            parts = [self.proof.vectors.get(v) for v in op.operands]
            if all(p is not None for p in parts):
                elements = tuple(x for p in parts for x in p)
        elif op.name == "stablehlo.broadcast_in_dim":
            s = self.scalar(op.operands[0])
            if s is not None:
                elements = (s,) * n
        elif op.operands and all(
            (_tensor(v) is not None and _tensor(v).rank == 1) for v in op.operands
        ):
            parts = [self.proof.vectors.get(v) for v in op.operands]
            if all(p is not None and len(p) == n for p in parts):
                column = [_scalar_rule(op, list(xs)) for xs in zip(*parts)]
                if all(x is not None for x in column):
                    elements = tuple(column)
        if elements is not None:
            self.proof.vectors[value] = elements

    def returns(self, op: ir.Operation, out_specs: Sequence[ShapeDtype]) -> None:
        if len(op.operands) != len(out_specs):
            raise NotDynamic(
                f"@main returns {len(op.operands)} results where the signature has {len(out_specs)}"
            )
        for k, (value, spec) in enumerate(zip(op.operands, out_specs, strict=True)):
            got = self.dims(value, op)
            if len(got) != len(spec.shape):
                raise NotDynamic(
                    f"@main's result {k} has rank {len(got)} where the signature says {spec}"
                )
            for a, b in zip(got, spec.shape):
                self.require(
                    op, a, "==", b, f"result {k}'s dimensions to be the signature's {spec}"
                )


def _static_regions(op: ir.Operation) -> None:
    found = []

    def visit(inner: ir.Operation) -> ir.WalkResult:
        for value in [*inner.operands, *inner.results]:
            t = _tensor(value)
            if t is not None and not t.has_static_shape:
                found.append(inner)
                return ir.WalkResult.INTERRUPT
        return ir.WalkResult.ADVANCE

    for region in op.regions:
        for block in region.blocks:
            for inner in block.operations:
                inner.operation.walk(visit)
                if found:
                    raise NotDynamic(
                        f"{_where(op)} has a region with dynamic shapes ({_where(found[0])})"
                    )


def _constant_ints(op: ir.Operation, n: int) -> list[int] | None:
    """The `n` elements of an integer constant, or None for one not held as dense ints (a
    resource blob) or a boolean vector (no dimension is one)."""
    try:
        dense = ir.DenseIntElementsAttr(op.attributes["value"])
    except ValueError:
        return None
    if ir.IntegerType(ir.RankedTensorType(dense.type).element_type).width == 1:
        if not dense.is_splat:
            return None
        return [1 if ir.BoolAttr(dense.get_splat_value()).value else 0] * n
    return [dense[0] if dense.is_splat else dense[i] for i in range(n)]


_ELEMENTWISE = [
    f"stablehlo.{name}"
    for name in (
        "abs add and atan2 cbrt ceil complex convert cosine count_leading_zeros divide "
        "exponential exponential_minus_one floor imag is_finite log log_plus_one logistic "
        "maximum minimum multiply negate not or popcnt power real reduce_precision remainder "
        "round_nearest_afz round_nearest_even rsqrt shift_left shift_right_arithmetic "
        "shift_right_logical sign sine sqrt subtract tan tanh xor compare select clamp"
    ).split()
] + [
    f"chlo.{name}"
    for name in (
        "acos acosh asin asinh atan atanh bessel_i1e conj cosh digamma erf erf_inv erfc is_inf "
        "is_neg_inf is_pos_inf lgamma next_after polygamma sinh tan zeta"
    ).split()
]


@_rule(*_ELEMENTWISE, "stablehlo.bitcast_convert")
def _elementwise(p: _Prover, op: ir.Operation) -> None:
    rank = _tensor(op.results[0]).rank
    if op.name == "stablehlo.bitcast_convert" and _tensor(op.operands[0]).rank != rank:
        p.static(op)  # a bitcast between widths adds or drops a dimension
        return
    # select's predicate and clamp's bounds may be scalars (the verifier checks the rank).
    shaped = [p.dims(v, op) for v in op.operands if _tensor(v).rank == rank]
    first = shaped[0]
    for other in shaped[1:]:
        for a, b in zip(first, other, strict=True):
            p.equal(op, a, b, "its operands' dimensions")
    p.result(op, first)


@_rule("stablehlo.constant", "stablehlo.iota", "stablehlo.get_dimension_size")
def _static_result(p: _Prover, op: ir.Operation) -> None:
    if op.name != "stablehlo.get_dimension_size":
        p.static(op)
        return
    p.dims(op.operands[0], op)
    p.result(op, ())


@_rule("stablehlo.optimization_barrier")
def _barrier(p: _Prover, op: ir.Operation) -> None:
    for k, value in enumerate(op.operands):
        if _tensor(value) is not None:
            p.result(op, p.dims(value, op), k)


@_rule("stablehlo.reshape")
def _reshape(p: _Prover, op: ir.Operation) -> None:
    t = _tensor(op.results[0])  # static: the verifier refuses `?` here
    before = p.dims(op.operands[0], op)
    p.equal(op, _product(before), _product(t.shape), "the element counts before and after")
    p.result(op, t.shape)


@_rule("stablehlo.concatenate")
def _concatenate(p: _Prover, op: ir.Operation) -> None:
    axis = ir.IntegerAttr(op.attributes["dimension"]).value
    parts = [p.dims(v, op) for v in op.operands]
    first = list(parts[0])
    for other in parts[1:]:
        for k, (a, b) in enumerate(zip(first, other, strict=True)):
            if k != axis:
                p.equal(op, a, b, "its operands' dimensions off the concatenated axis")
        first[axis] = first[axis] + other[axis]
    p.result(op, first)


@_rule("stablehlo.transpose")
def _transpose(p: _Prover, op: ir.Operation) -> None:
    before = p.dims(op.operands[0], op)
    p.result(op, [before[k] for k in _ints(op, "permutation")])


@_rule("stablehlo.reverse")
def _same_shape(p: _Prover, op: ir.Operation) -> None:
    p.result(op, p.dims(op.operands[0], op))


@_rule("stablehlo.broadcast_in_dim")
def _broadcast(p: _Prover, op: ir.Operation) -> None:
    before = p.dims(op.operands[0], op)
    after = _tensor(op.results[0]).shape  # static: the verifier refuses `?` here
    for d, k in zip(before, _ints(op, "broadcast_dimensions"), strict=True):
        if not (isinstance(d, int) and d == 1):
            p.equal(op, d, after[k], "a broadcast dimension and its result's")
    p.result(op, after)


@_rule("stablehlo.dynamic_broadcast_in_dim")
def _dynamic_broadcast(p: _Prover, op: ir.Operation) -> None:
    before = p.dims(op.operands[0], op)
    after = p.vector(op.operands[1], op, "output dimensions")
    p.result(op, after)
    expanding, nonexpanding = [], []
    for i, (d, k) in enumerate(zip(before, _ints(op, "broadcast_dimensions"), strict=True)):
        if _same(d, after[k]):
            nonexpanding.append(i)
        elif isinstance(d, int) and d == 1:
            expanding.append(i)
        else:
            raise NotDynamic(
                f"{_where(op)} broadcasts dimension {i} of size {d} to {after[k]}, which the "
                "constraints neither make equal nor rule out"
            )
    # Claims the file makes are checked, never believed.
    for name, proven in (
        (
            "known_expanding_dimensions",
            set(expanding) | {i for i in nonexpanding if before[i] == 1},
        ),
        ("known_nonexpanding_dimensions", set(nonexpanding)),
    ):
        if name in op.attributes and not set(_ints(op, name)) <= proven:
            raise NotDynamic(f"{_where(op)} states {name} that its shapes contradict")
    p.proof.broadcasts[op.results[0]] = (tuple(expanding), tuple(nonexpanding))


@_rule("stablehlo.dynamic_reshape")
def _dynamic_reshape(p: _Prover, op: ir.Operation) -> None:
    before = p.dims(op.operands[0], op)
    after = p.vector(op.operands[1], op, "output dimensions")
    p.equal(op, _product(before), _product(after), "the element counts before and after")
    p.result(op, after)


@_rule("stablehlo.dynamic_iota")
def _dynamic_iota(p: _Prover, op: ir.Operation) -> None:
    p.result(op, p.vector(op.operands[0], op, "output dimensions"))


@_rule("stablehlo.dot_general")
def _dot_general(p: _Prover, op: ir.Operation) -> None:
    lhs, rhs = (p.dims(v, op) for v in op.operands)
    numbers = stablehlo.DotDimensionNumbers(op.attributes["dot_dimension_numbers"])
    lb, rb = list(numbers.lhs_batching_dimensions), list(numbers.rhs_batching_dimensions)
    lc, rc = list(numbers.lhs_contracting_dimensions), list(numbers.rhs_contracting_dimensions)
    for i, j in zip(lb, rb, strict=True):
        p.equal(op, lhs[i], rhs[j], "the batch dimensions of its operands")
    for i, j in zip(lc, rc, strict=True):
        p.equal(op, lhs[i], rhs[j], "the contracting dimensions of its operands")
    free_l = [lhs[k] for k in range(len(lhs)) if k not in lb and k not in lc]
    free_r = [rhs[k] for k in range(len(rhs)) if k not in rb and k not in rc]
    p.result(op, [lhs[k] for k in lb] + free_l + free_r)


@_rule("stablehlo.reduce")
def _reduce(p: _Prover, op: ir.Operation) -> None:
    n = len(op.results)
    inputs = [p.dims(v, op) for v in op.operands[:n]]
    for other in inputs[1:]:
        for a, b in zip(inputs[0], other, strict=True):
            p.equal(op, a, b, "its inputs' dimensions")
    _static_regions(op)
    reduced = set(_ints(op, "dimensions"))
    kept = [d for k, d in enumerate(inputs[0]) if k not in reduced]
    for k in range(n):
        p.result(op, kept, k)


@_rule("stablehlo.sort")
def _sort(p: _Prover, op: ir.Operation) -> None:
    inputs = [p.dims(v, op) for v in op.operands]
    for other in inputs[1:]:
        for a, b in zip(inputs[0], other, strict=True):
            p.equal(op, a, b, "its inputs' dimensions")
    _static_regions(op)
    for k in range(len(op.results)):
        p.result(op, inputs[0], k)


@_rule("stablehlo.slice")
def _slice(p: _Prover, op: ir.Operation) -> None:
    before = p.dims(op.operands[0], op)
    starts, limits = _ints(op, "start_indices"), _ints(op, "limit_indices")
    strides = _ints(op, "strides")
    after = []
    for d, start, limit, stride in zip(before, starts, limits, strides, strict=True):
        p.require(op, d, ">=", limit, "its limit inside its operand")
        after.append(max(0, math.ceil((limit - start) / stride)))
    p.result(op, after)


@_rule("stablehlo.pad")
def _pad(p: _Prover, op: ir.Operation) -> None:
    before = p.dims(op.operands[0], op)
    low, high = _ints(op, "edge_padding_low"), _ints(op, "edge_padding_high")
    interior = _ints(op, "interior_padding")
    after = []
    for d, lo, hi, inner in zip(before, low, high, interior, strict=True):
        if isinstance(d, int):
            after.append(lo + hi + d + max(d - 1, 0) * inner)
            continue
        if inner:
            p.require(op, d, ">=", 1, "a dimension it pads inside to be nonempty")
        size = lo + hi + d + (d - 1) * inner
        p.require(op, size, ">=", 0, "its result's size to be >= 0")
        after.append(size)
    p.result(op, after)


@_rule("stablehlo.dynamic_slice")
def _dynamic_slice(p: _Prover, op: ir.Operation) -> None:
    before = p.dims(op.operands[0], op)
    sizes = _ints(op, "slice_sizes")
    for d, size in zip(before, sizes, strict=True):
        p.require(op, d, ">=", size, "its slice inside its operand")
    p.result(op, sizes)


@_rule("stablehlo.dynamic_update_slice")
def _dynamic_update_slice(p: _Prover, op: ir.Operation) -> None:
    before = p.dims(op.operands[0], op)
    update = p.dims(op.operands[1], op)
    for d, u in zip(before, update, strict=True):
        p.require(op, d, ">=", u, "its update inside its operand")
    p.result(op, before)


@_rule("stablehlo.while")
def _while(p: _Prover, op: ir.Operation) -> None:
    """A loop keeps the dimensions of what it carries: its condition and body are proven
    with the operands' dimensions for their arguments, and the body must return them."""
    carried = [p.dims(v, op) if _tensor(v) is not None else None for v in op.operands]
    for index, region in enumerate(op.regions):
        block = region.blocks[0]
        for arg, dims in zip(block.arguments, carried, strict=True):
            if dims is not None:
                p.proof.dims[arg] = dims
        for inner in block.operations:
            inner = inner.operation
            if inner.name != "stablehlo.return":
                p.visit(inner)
            elif index == 1:
                for value, dims in zip(inner.operands, carried, strict=True):
                    if dims is not None:
                        for a, b in zip(p.dims(value, inner), dims, strict=True):
                            p.equal(op, a, b, "what its body returns and what it carries")
    for k, dims in enumerate(carried):
        if dims is not None:
            p.result(op, dims, k)


@_rule("stablehlo.if", "stablehlo.case")
def _branches(p: _Prover, op: ir.Operation) -> None:
    """A branch op gives what every branch returns: the branches are proven in turn, and
    what they return must have equal dimensions."""
    returned = None
    for region in op.regions:
        for inner in region.blocks[0].operations:
            inner = inner.operation
            if inner.name != "stablehlo.return":
                p.visit(inner)
                continue
            dims = [p.dims(v, inner) if _tensor(v) is not None else None for v in inner.operands]
            if returned is None:
                returned = dims
                continue
            for first, other in zip(returned, dims, strict=True):
                for a, b in zip(first or (), other or (), strict=True):
                    p.equal(op, a, b, "what its branches return")
    for k, dims in enumerate(returned or ()):
        if dims is not None:
            p.result(op, dims, k)


@_rule("stablehlo.real_dynamic_slice")
def _real_dynamic_slice(p: _Prover, op: ir.Operation) -> None:
    before = p.dims(op.operands[0], op)
    starts = p.vector(op.operands[1], op, "start indices")
    limits = p.vector(op.operands[2], op, "limit indices")
    strides = p.vector(op.operands[3], op, "strides")
    after = []
    for d, start, limit, stride in zip(before, starts, limits, strides, strict=True):
        if not isinstance(stride, int) or stride < 1:
            raise NotDynamic(f"{_where(op)} has a stride {stride}, not a constant >= 1")
        p.require(op, start, ">=", 0, "its start >= 0")
        p.require(op, limit, ">=", start, "its limit at or after its start")
        p.require(op, d, ">=", limit, "its limit inside its operand")
        after.append((limit - start + stride - 1) // stride)
    p.result(op, after)


@_rule("stablehlo.custom_call")
def _custom_call(p: _Prover, op: ir.Operation) -> None:
    if _target(op) != SHAPE_ASSERTION:
        p.static(op)
        return
    args = [p.scalar(v) for v in op.operands]
    if not args or any(a is None for a in args):
        raise NotDynamic(
            f"{_where(op)}: a shape assertion whose operands aotkit cannot compute on the host"
        )
    template = "a shape assertion failed"
    if "error_message" in op.attributes:
        template = ir.StringAttr(op.attributes["error_message"]).value
    p.proof.assertions.append(Assertion(args[0], tuple(args[1:]), template))
    p.erase.append(op)


# --- inlining (shared with the per-shape refinement and the aotkit-inline pass) --------------


def inline_calls(module_op: ir.Operation) -> None:
    """Inlines every `func.call` reachable from `@main` (a module's call graph has no cycle:
    the trust check refuses one, and aotkit writes none), in place; the callees are left
    for `symbol-dce`."""
    functions = {}
    main = None
    for op in module_op.regions[0].blocks[0].operations:
        if op.operation.name == "func.func":
            name = ir.StringAttr(op.attributes["sym_name"]).value
            functions[name] = op.operation
            if name == "main":
                main = op.operation
    if main is None:
        return
    while True:
        calls: list[ir.Operation] = []

        def visit(op: ir.Operation, calls=calls) -> ir.WalkResult:
            if op.name == "func.call":
                calls.append(op)
            return ir.WalkResult.ADVANCE

        main.walk(visit)
        if not calls:
            return
        for call in calls:
            callee = functions[ir.FlatSymbolRefAttr(call.attributes["callee"]).value]
            inline_call(call, callee.regions[0].blocks[0])


def flatten_calls(module_op: ir.Operation, lc) -> None:
    """Inlines every call reachable from `@main` and drops the functions left unused
    (`symbol-dce`, parsed once per lowering context `lc`), in place."""
    inline_calls(module_op)
    dce = lc.pipelines.get(_DCE)
    if dce is None:
        dce = lc.pipelines[_DCE] = passmanager.PassManager.parse(_DCE)
    dce.run(module_op)


def _remap(op: ir.Operation, mapping: dict[ir.Value, ir.Value]) -> None:
    """Points the operands of `op` and of the ops in its regions at the inlined values."""

    def visit(inner: ir.Operation) -> ir.WalkResult:
        operands = inner.operands
        for i, v in enumerate(operands):
            new = mapping.get(v)
            if new is not None:
                operands[i] = new
        return ir.WalkResult.ADVANCE

    op.walk(visit)  # nested regions may use the callee's arguments too


def inline_call(call: ir.Operation, body: ir.Block) -> None:
    """Replaces `call` by a copy of the single-block function body `body` (its entry block),
    in place: the results `body`'s `func.return` gives replace the call's."""
    mapping = dict(zip(body.arguments, call.operands, strict=True))
    where = ir.InsertionPoint(call)
    results: list[ir.Value] = []
    for op in list(body.operations):
        op = op.operation
        if op.name == "func.return":
            results = [mapping.get(v, v) for v in op.operands]
            break
        clone = op.clone(where)
        _remap(clone, mapping)
        mapping.update(zip(op.results, clone.results, strict=True))
    for old, new in zip(call.results, results, strict=True):
        old.replace_all_uses_with(new)
    call.erase()
