"""aotkit's Python passes: rewrites jaxlib does not register, written over the IR.

`aotkit-simplify` (identities and constant folding in one sweep), `aotkit-algebraic-simplify`,
`aotkit-fold-constants`, `aotkit-dce` and `aotkit-inline` (jaxlib does not register func's
inliner extension, so MLIR's `inline` leaves every func.call in place). Each is
`fn(module) -> bool`, True when it changed the module; the caller is inside `with lc:` for the
module's context current.

They never change what the module computes, with one exception shared with XLA's algebraic
simplifier: `x + 0.0 -> x` keeps the sign of a zero `x` (-0.0), where IEEE arithmetic would
give +0.0.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import ml_dtypes
import numpy as np
from jaxlib.mlir import ir
from jaxlib.mlir.dialects import chlo, stablehlo

from aotkit.passes.pipeline import add_pass
from aotkit.symbolic.prover import inline_call

# Element types the passes compute on, by their MLIR spelling. Complex and narrow float
# constants are never decoded: reading them through the bindings can abort the process.
_DTYPES: dict[str, np.dtype] = {
    "i1": np.dtype(np.bool_),
    **{f"i{b}": np.dtype(f"int{b}") for b in (8, 16, 32, 64)},
    **{f"ui{b}": np.dtype(f"uint{b}") for b in (8, 16, 32, 64)},
    "f16": np.dtype(np.float16),
    "bf16": np.dtype(ml_dtypes.bfloat16),
    "f32": np.dtype(np.float32),
    "f64": np.dtype(np.float64),
}
_BOOL, _SIGNED, _UNSIGNED, _FLOAT = "bool", "signed", "unsigned", "float"
_CATEGORY = {
    "i1": _BOOL,
    **{f"i{b}": _SIGNED for b in (8, 16, 32, 64)},
    **{f"ui{b}": _UNSIGNED for b in (8, 16, 32, 64)},
    **{f: _FLOAT for f in ("f16", "bf16", "f32", "f64")},
}
_INTS = frozenset({_BOOL, _SIGNED, _UNSIGNED})
_NUMBERS = frozenset({_SIGNED, _UNSIGNED, _FLOAT})

# Non-splat constants are folded only up to this many elements: folding trades compile
# time and module size for nothing once XLA's own folder would do the same work.
FOLD_LIMIT = 1024


@dataclass(frozen=True)
class _Const:
    """What a sweep knows about a constant; all fields None for one it cannot read."""

    elem: str | None  # MLIR element type spelling, a key of _DTYPES
    splat: np.ndarray | None  # 0-d value when every element is equal
    array: np.ndarray | None  # the elements of a small non-splat constant
    scalar: bool | int | float | None = None  # splat as a Python number, for fast tests

    @property
    def value(self) -> np.ndarray | None:
        return self.splat if self.splat is not None else self.array


_OPAQUE = _Const(None, None, None)


def _splat_const(elem: str, value) -> _Const:
    splat = np.asarray(value).astype(_DTYPES[elem])
    scalar = float(splat) if _CATEGORY[elem] == _FLOAT else splat.item()
    return _Const(elem, splat, None, scalar)


def _readable(op: ir.Operation) -> tuple[str, ir.DenseElementsAttr] | None:
    """(element type, elements) of a constant op the sweep may read, else None."""
    elem = str(op.results[0].type.element_type)
    if elem not in _DTYPES:
        return None
    attr = op.attributes["value"]
    if not isinstance(attr, ir.DenseElementsAttr):  # dense_resource<...> blobs
        return None
    return elem, attr


def splat_scalar(op: ir.Operation):
    """The Python scalar of a splat constant op the sweep reads as one, else None."""
    found = _readable(op)
    if found is None or not found[1].is_splat:
        return None
    return _splat_const(found[0], found[1].get_splat_value().value).scalar


def _decode(op: ir.Operation) -> _Const:
    found = _readable(op)
    if found is None:
        return _OPAQUE
    elem, attr = found
    rtype = op.results[0].type
    if attr.is_splat:
        return _splat_const(elem, attr.get_splat_value().value)
    if elem == "bf16" or np.prod(rtype.shape) > FOLD_LIMIT:
        return _OPAQUE
    return _Const(elem, None, np.array(attr))


def _attr(value: np.ndarray, rtype: ir.RankedTensorType, elem: str) -> ir.Attribute | None:
    """A dense attribute of `rtype` holding `value` (0-d: a splat), or None if not encodable."""
    flat = np.ascontiguousarray(value, _DTYPES[elem]).reshape(-1)
    if flat.size > 1 and (flat == flat[0]).all():
        flat = flat[:1]
    if flat.size == 1:
        if elem == "i1":
            # A one-byte i1 buffer is read as a splat of its bits: only 0x00 and 0xFF are safe.
            flat = np.array([0xFF if flat[0] else 0], np.uint8)
    elif elem == "i1" or elem == "bf16" or flat.size > FOLD_LIMIT:
        return None
    if elem == "bf16":
        flat = flat.view(np.uint16)
    return ir.DenseElementsAttr.get(flat, type=rtype.element_type, shape=list(rtype.shape))


class _Rewriter:
    """One forward sweep over every op (defs before uses), then removal of replaced ops.

    Each rule sees operands that earlier rules already rewrote, so one sweep reaches the
    fixed point of these local rules; running it again changes nothing.
    """

    def __init__(self, rules: dict[str, tuple]):
        self.rules = rules
        # Constant results, as their op until a rule first asks for the decoded value.
        self.constants: dict[ir.Value, ir.Operation | _Const] = {}
        self.negated: dict[ir.Value, ir.Value] = {}
        self.transposed: dict[ir.Value, tuple[ir.Value, list[int]]] = {}
        self.replaced: list[ir.Operation] = []

    def const(self, value: ir.Value) -> _Const | None:
        c = self.constants.get(value)
        if c is None or type(c) is _Const:
            return c
        c = self.constants[value] = _decode(c)
        return c

    def is_splat(self, value: ir.Value, k) -> bool:
        c = self.const(value)
        return c is not None and c.scalar is not None and c.scalar == k

    def make_const(self, op: ir.Operation, value: np.ndarray) -> ir.Value | None:
        rtype = op.results[0].type
        if not rtype.has_static_shape:
            return None
        elem = str(rtype.element_type)
        if elem not in _DTYPES:
            return None
        value = np.asarray(value)
        if value.ndim and tuple(value.shape) != tuple(rtype.shape):
            return None
        attr = _attr(value, rtype, elem)
        if attr is None:
            return None
        with ir.InsertionPoint(op), op.location:
            result = stablehlo.constant(attr)
        if value.size == 1 or attr.is_splat:
            self.constants[result] = _splat_const(elem, value.reshape(-1)[0])
        else:
            self.constants[result] = _Const(elem, None, value.astype(_DTYPES[elem]))
        return result

    def run(self, module: ir.Module) -> bool:
        failure: list[BaseException] = []
        constants = self.constants
        rules_of = self.rules.get
        # Ops whose every rule needs a constant operand: nothing to do before a constant.
        const_only = frozenset(n for n, rules in self.rules.items() if all(c for _, c in rules))
        advance, interrupt = ir.WalkResult.ADVANCE, ir.WalkResult.INTERRUPT

        def visit(op: ir.Operation) -> ir.WalkResult:
            # Called for every op of the module: most return at the first test or two.
            try:
                name = op.name
                if name == "stablehlo.constant":
                    constants[op.results[0]] = op
                    return advance
                rules = rules_of(name)
                if rules is None or (not constants and name in const_only):
                    return advance
                self._apply(op, rules)
            except BaseException as e:  # re-raised below: exceptions must not cross C++
                failure.append(e)
                return interrupt
            return advance

        module.operation.walk(visit)
        if failure:
            raise failure[0]
        _erase_dead(self.replaced)
        return bool(self.replaced)

    def _apply(self, op: ir.Operation, rules: tuple) -> None:
        # Operands are fetched, and looked up among the constants, only when a rule needs
        # them: that lookup is most of the cost of a visit.
        operands = has_const = None
        for rule, needs_const in rules:
            if needs_const:
                if has_const is None:
                    constants = self.constants
                    has_const = False
                    if constants:
                        operands = tuple(op.operands)
                        for v in operands:  # a loop: a generator costs more than the test
                            if v in constants:
                                has_const = True
                                break
                if not has_const:
                    continue
            if operands is None:
                operands = tuple(op.operands)
            new = rule(self, op, operands)
            if new is not None:
                op.results[0].replace_all_uses_with(new)
                self.replaced.append(op)
                return


# Ops that may be erased when their results are unused: region-free StableHLO/CHLO ops
# without side effects. Ops with regions are left to `canonicalize`; erasing one would free
# nested ops a sweep may still hold.
_EFFECTFUL = frozenset(
    "stablehlo." + n
    for n in (
        "custom_call infeed outfeed send recv after_all create_token all_gather all_to_all "
        "collective_permute collective_broadcast cross-replica-sum optimization_barrier rng "
        "rng_bit_generator async_done composite return partition_id replica_id"
    ).split()
)


def _pure_ops() -> frozenset[str]:
    names = set()
    for dialect in (stablehlo, chlo):
        for cls in vars(dialect).values():
            if isinstance(cls, type) and hasattr(cls, "OPERATION_NAME"):
                regions = getattr(cls, "_ODS_REGIONS", (0, False))
                if regions[0] == 0 and not regions[1]:
                    names.add(cls.OPERATION_NAME)
    return frozenset(names - _EFFECTFUL)


_PURE = _pure_ops()


def _unused(op: ir.Operation) -> bool:
    results = op.results
    if len(results) == 0:
        return False
    for r in results:
        for _ in r.uses:
            return False
    return True


def _erase_dead(candidates: list[ir.Operation]) -> bool:
    """Erases unused pure ops among `candidates` and, transitively, their producers."""
    work = [(hash(op), op) for op in candidates]
    erased: set[int] = set()
    while work:
        key, op = work.pop()
        if key in erased or op.name not in _PURE or not _unused(op):
            continue
        producers = [v.owner.operation for v in op.operands if isinstance(v, ir.OpResult)]
        erased.add(key)
        op.erase()
        work.extend((hash(p), p) for p in producers)
    return bool(erased)


def _same_type(value: ir.Value, op: ir.Operation) -> ir.Value | None:
    return value if value.type == op.results[0].type else None


# Identity rules: each returns the value that replaces the op's single result, or None.


def _neutral(rw: _Rewriter, op: ir.Operation, operands, *, element: int):
    """`x op e` or `e op x` is x, for `element` e the neutral element of a commutative op."""
    x, y = operands
    if rw.is_splat(y, element):
        return _same_type(x, op)
    if rw.is_splat(x, element):
        return _same_type(y, op)
    return None


_add_zero = functools.partial(_neutral, element=0)
_multiply_one = functools.partial(_neutral, element=1)


def _subtract_zero(rw: _Rewriter, op: ir.Operation, operands):
    x, y = operands
    return _same_type(x, op) if rw.is_splat(y, 0) else None


def _double_negation(rw: _Rewriter, op: ir.Operation, operands):
    x = operands[0]
    inner = rw.negated.get(x)
    if inner is not None:
        return _same_type(inner, op)
    rw.negated[op.results[0]] = x
    return None


def _same_type_noop(rw: _Rewriter, op: ir.Operation, operands):
    return _same_type(operands[0], op)


def _ints(attr: ir.Attribute) -> list[int]:
    """The values of a `DenseI64ArrayAttr`: indexing it is several times faster than `list()`."""
    return [attr[i] for i in range(len(attr))]


def _iota(values) -> bool:
    """Whether `values` (a sequence, or a `DenseI64ArrayAttr` read by index) is 0, 1, ..."""
    for i in range(len(values)):
        if values[i] != i:
            return False
    return True


def _noop_broadcast(rw: _Rewriter, op: ir.Operation, operands):
    if not _iota(op.attributes["broadcast_dimensions"]):
        return None
    return _same_type(operands[0], op)


def _noop_transpose(rw: _Rewriter, op: ir.Operation, operands):
    x = operands[0]
    outer = _ints(op.attributes["permutation"])
    if _iota(outer):
        return _same_type(x, op)
    inner = rw.transposed.get(x)
    # Result dim i is x's dim inner[outer[i]]: the pair cancels when that is always i.
    if inner is not None and _iota([inner[1][i] for i in outer]):
        return _same_type(inner[0], op)
    rw.transposed[op.results[0]] = (x, outer)
    return None


def _select_known(rw: _Rewriter, op: ir.Operation, operands):
    pred, on_true, on_false = operands
    c = rw.const(pred)
    if c is None or c.scalar is None:
        return None
    return _same_type(on_true if c.scalar else on_false, op)


# Each rule is (function, needs a constant operand): the sweep skips the latter unless an
# operand is a known constant, which keeps ops without constants cheap.
_IDENTITIES: dict[str, tuple] = {
    "stablehlo.add": ((_add_zero, True),),
    "stablehlo.subtract": ((_subtract_zero, True),),
    "stablehlo.multiply": ((_multiply_one, True),),
    "stablehlo.negate": ((_double_negation, False),),
    "stablehlo.convert": ((_same_type_noop, False),),
    "stablehlo.reshape": ((_same_type_noop, False),),
    "stablehlo.broadcast_in_dim": ((_noop_broadcast, False),),
    "stablehlo.transpose": ((_noop_transpose, False),),
    "stablehlo.select": ((_select_known, True),),
}

# Folding rules. Only operations whose NumPy result is bit-identical to XLA's are folded:
# exact integer arithmetic (wrapping), correctly rounded float add/subtract/multiply,
# bitwise ops and comparisons. Transcendentals, division and float min/max (signed zeros)
# are left to the backend.


def _operand_consts(rw: _Rewriter, operands) -> list[_Const] | None:
    consts = []
    for v in operands:
        c = rw.const(v)
        if c is None or c.value is None:
            return None
        consts.append(c)
    return consts


def _elementwise(fn: Callable, categories: frozenset[str]):
    def fold(rw: _Rewriter, op: ir.Operation, operands):
        consts = _operand_consts(rw, operands)
        if consts is None or _CATEGORY[consts[0].elem] not in categories:
            return None
        with np.errstate(all="ignore"):
            return rw.make_const(op, fn(*(c.value for c in consts)))

    return fold


_COMPARE = {
    "EQ": np.equal,
    "NE": np.not_equal,
    "LT": np.less,
    "LE": np.less_equal,
    "GT": np.greater,
    "GE": np.greater_equal,
}


def _fold_compare(rw: _Rewriter, op: ir.Operation, operands):
    attrs = op.attributes
    if "compare_type" in attrs:
        if stablehlo.ComparisonTypeAttr(attrs["compare_type"]).value == "TOTALORDER":
            return None
    consts = _operand_consts(rw, operands)
    if consts is None:
        return None
    fn = _COMPARE[stablehlo.ComparisonDirectionAttr(attrs["comparison_direction"]).value]
    return rw.make_const(op, fn(consts[0].value, consts[1].value))


def _fold_select(rw: _Rewriter, op: ir.Operation, operands):
    consts = _operand_consts(rw, operands)
    if consts is None:
        return None
    return rw.make_const(op, np.where(*(c.value for c in consts)))


def _exact_convert(src: str, dst: str) -> bool:
    s, d = _CATEGORY[src], _CATEGORY[dst]
    if s != _FLOAT:
        return d != _FLOAT or dst in ("f32", "f64")
    # Float to integer saturates in XLA and is undefined in NumPy; narrow floats would round
    # twice through NumPy's casts.
    return d == _FLOAT and dst in ("f32", "f64")


def _fold_convert(rw: _Rewriter, op: ir.Operation, operands):
    c = rw.const(operands[0])
    dst = str(op.results[0].type.element_type)
    if c is None or c.value is None or dst not in _DTYPES or not _exact_convert(c.elem, dst):
        return None
    return rw.make_const(op, c.value.astype(_DTYPES[dst]))


def _fold_shape(op: ir.Operation, c: _Const) -> np.ndarray | None:
    if c.splat is not None:
        return c.splat  # a splat keeps its value under any broadcast, reshape or transpose
    shape = op.results[0].type.shape
    name = op.name
    if name == "stablehlo.reshape":
        return c.array.reshape(shape)
    if name == "stablehlo.transpose":
        return np.transpose(c.array, _ints(op.attributes["permutation"]))
    dims = _ints(op.attributes["broadcast_dimensions"])
    order = np.argsort(dims)
    x = np.transpose(c.array, order)
    expanded = [1] * len(shape)
    for axis, dim in enumerate(np.asarray(dims)[order]):
        expanded[dim] = x.shape[axis]
    return np.broadcast_to(x.reshape(expanded), shape)


def _fold_layout(rw: _Rewriter, op: ir.Operation, operands):
    c = rw.const(operands[0])
    if c is None or c.value is None or not op.results[0].type.has_static_shape:
        return None  # bounded dynamic results (`tensor<?xf32, #stablehlo.bounds<4>>`)
    return rw.make_const(op, _fold_shape(op, c))


_FOLDS: dict[str, tuple] = {
    "stablehlo.add": ((_elementwise(np.add, _INTS | _NUMBERS), True),),
    "stablehlo.subtract": ((_elementwise(np.subtract, _NUMBERS), True),),
    "stablehlo.multiply": ((_elementwise(np.multiply, _INTS | _NUMBERS), True),),
    "stablehlo.negate": ((_elementwise(np.negative, _NUMBERS), True),),
    "stablehlo.abs": ((_elementwise(np.abs, frozenset({_SIGNED, _FLOAT})), True),),
    "stablehlo.maximum": ((_elementwise(np.maximum, _INTS), True),),
    "stablehlo.minimum": ((_elementwise(np.minimum, _INTS), True),),
    "stablehlo.and": ((_elementwise(np.bitwise_and, _INTS), True),),
    "stablehlo.or": ((_elementwise(np.bitwise_or, _INTS), True),),
    "stablehlo.xor": ((_elementwise(np.bitwise_xor, _INTS), True),),
    "stablehlo.not": ((_elementwise(np.invert, _INTS), True),),
    "stablehlo.compare": ((_fold_compare, True),),
    "stablehlo.select": ((_fold_select, True),),
    "stablehlo.convert": ((_fold_convert, True),),
    "stablehlo.broadcast_in_dim": ((_fold_layout, True),),
    "stablehlo.reshape": ((_fold_layout, True),),
    "stablehlo.transpose": ((_fold_layout, True),),
}


class Alone(NamedTuple):
    """When an identity rule that needs no constant operand (`_IDENTITIES`) may rewrite an
    op: after an op of its own kind (`-(-x)`, a transpose of a transpose), or when its
    result has its operand's type (`same_type`) and, where `order` names an attribute, that
    attribute is 0, 1, ... (an identity transpose or broadcast). Declared here, beside the
    rules, for the tracer (`aotkit.tracing.core`), which tests it on every op it makes."""

    after_itself: bool = False
    same_type: bool = False
    order: str | None = None


# The identities that need no constant, and when each may fire (its rule above, as data).
ALONE: dict[str, Alone] = {
    "stablehlo.negate": Alone(after_itself=True),
    "stablehlo.convert": Alone(same_type=True),
    "stablehlo.reshape": Alone(same_type=True),
    "stablehlo.broadcast_in_dim": Alone(same_type=True, order="broadcast_dimensions"),
    # An identity permutation keeps the type: only the order is tested.
    "stablehlo.transpose": Alone(after_itself=True, order="permutation"),
}


# For the tracer (`aotkit.tracing.core.bind`), which tells the runner when this sweep has
# nothing to do: the ops whose rules need constant operands, and which: "all" (a fold),
# "first" (a select's identity reads its predicate; its fold needs every operand), or for
# an identity, (its unit, the operands that may be it), besides the fold. The rules that
# need no constant are `ALONE`'s.
CONSTANT_OPERANDS: dict[str, object] = {
    **{name: "all" for name in _FOLDS},
    "stablehlo.add": (0, (0, 1)),
    "stablehlo.subtract": (0, (1,)),
    "stablehlo.multiply": (1, (0, 1)),
    "stablehlo.select": "first",
}


def _merge(*tables: dict[str, tuple]) -> dict[str, tuple]:
    merged: dict[str, tuple] = {}
    for table in tables:
        for name, rules in table.items():
            merged[name] = merged.get(name, ()) + rules
    return merged


_SIMPLIFY = _merge(_IDENTITIES, _FOLDS)  # identities first: they reuse an existing value


def algebraic_simplify(module: ir.Module) -> bool:
    """Removes identities: x+0, x-0, x*1, -(-x), transposes that cancel, and no-op
    converts, reshapes, broadcasts, transposes and selects."""
    return _Rewriter(_IDENTITIES).run(module)


def fold_constants(module: ir.Module) -> bool:
    """Folds elementwise, compare, convert and layout ops whose operands are constants
    (splats of any size, other constants up to FOLD_LIMIT elements)."""
    return _Rewriter(_FOLDS).run(module)


def simplify(module: ir.Module) -> bool:
    """algebraic_simplify and fold_constants in one sweep, then removes the dead ops."""
    return _Rewriter(_SIMPLIFY).run(module)


def remove_dead_ops(module: ir.Module) -> bool:
    """Erases every side-effect-free op whose results are unused."""
    candidates: list[ir.Operation] = []

    def collect(op: ir.Operation) -> ir.WalkResult:
        if op.name in _PURE:
            candidates.append(op)
        return ir.WalkResult.ADVANCE

    module.operation.walk(collect)
    return _erase_dead(candidates)


def _callees(func_op: ir.Operation) -> set[str]:
    names: set[str] = set()

    def collect(op: ir.Operation) -> ir.WalkResult:
        if op.name == "func.call":
            names.add(ir.FlatSymbolRefAttr(op.attributes["callee"]).value)
        return ir.WalkResult.ADVANCE

    func_op.walk(collect)
    return names


def _recursive(graph: dict[str, set[str]]) -> set[str]:
    """Functions that can reach themselves through calls."""
    found = set()
    for start in graph:
        seen, stack = set(), list(graph[start])
        while stack:
            name = stack.pop()
            if name == start:
                found.add(start)
                break
            if name not in seen and name in graph:
                seen.add(name)
                stack.extend(graph[name])
    return found


def inline_calls(module: ir.Module) -> bool:
    """Inlines every func.call to a single-block, non-recursive function of the module.

    Each round inlines the calls present at its start, so a call chain of depth d takes d
    rounds, at most one per function.
    """
    funcs: dict[str, ir.Operation] = {}
    for op in module.body.operations:
        op = op.operation
        if op.name == "func.func":
            funcs[ir.StringAttr(op.attributes["sym_name"]).value] = op
    if len(funcs) < 2:
        return False  # a call needs a second function, or is recursive: nothing to inline
    recursive = _recursive({name: _callees(op) for name, op in funcs.items()})
    bodies = {
        name: op.regions[0].blocks[0]
        for name, op in funcs.items()
        if name not in recursive and len(op.regions[0].blocks) == 1
    }
    calls: list[tuple[ir.Operation, ir.Block]] = []

    def collect(op: ir.Operation) -> ir.WalkResult:
        if op.name == "func.call":
            callee = ir.FlatSymbolRefAttr(op.attributes["callee"]).value
            if callee in bodies:
                calls.append((op, bodies[callee]))
        return ir.WalkResult.ADVANCE

    changed = False
    for _ in range(len(bodies)):
        calls.clear()
        module.operation.walk(collect)
        if not calls:
            break
        for call, body in calls:
            inline_call(call, body)
        changed = True
    return changed


for _name, _fn in (
    ("aotkit-inline", inline_calls),
    ("aotkit-algebraic-simplify", algebraic_simplify),
    ("aotkit-fold-constants", fold_constants),
    ("aotkit-dce", remove_dead_ops),
    ("aotkit-simplify", simplify),
):
    add_pass(_name, _fn, " ".join(_fn.__doc__.split("\n\n")[0].split()))
