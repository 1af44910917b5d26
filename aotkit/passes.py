"""Pipeline stage: rewrites a traced StableHLO module in place before a backend sees it.

A pipeline is a named pipeline (`NAMED_PIPELINES`: "none", "default") or MLIR's textual
syntax (`"builtin.module(func.func(canonicalize,cse))"`). MLIR passes run through
`jaxlib.mlir.passmanager.PassManager`; passes jaxlib does not register (it lacks StableHLO's
aggressive simplifier) are written in Python over the IR, registered by name with
`register_pass`, and may appear anywhere in a pipeline text (`"aotkit-simplify"`).

Promises:
- A pipeline is checked whole before any pass runs: an unknown pass is a ValueError naming
  it and the nearest registered names.
- The module is verified after the pipeline; a failing pass or an invalid result is a
  `CompileError` that names the dump file or says how to turn dumps on.
- aotkit's own passes never change what the module computes, with one exception shared
  with XLA's algebraic simplifier: `x + 0.0 -> x` keeps the sign of a zero `x` (-0.0),
  where IEEE arithmetic would give +0.0.
"""

from __future__ import annotations

import difflib
import functools
import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import ml_dtypes
import numpy as np
from jaxlib.mlir import ir, passmanager
from jaxlib.mlir.dialects import chlo, stablehlo

from aotkit import dumps
from aotkit._context import IR_LOCK, context
from aotkit.errors import CompileError

PassFn = Callable[[ir.Module], bool]

NAMED_PIPELINES: dict[str, str] = {
    "none": "builtin.module()",
    # aotkit-inline, not MLIR's `inline`: jaxlib does not register func's inliner extension,
    # so `inline` leaves every func.call in place. cse runs before aotkit-simplify so
    # duplicated subexpressions are rewritten once, and after it because rewriting
    # identities away exposes new duplicates (`x*1 + x` -> `x + x`).
    "default": (
        "builtin.module(aotkit-inline,symbol-dce,func.func(chlo-legalize-to-stablehlo),"
        "stablehlo-refine-shapes,func.func(canonicalize,cse),aotkit-simplify,func.func(cse))"
    ),
}

_EXAMPLE = "'builtin.module(aotkit-inline,func.func(canonicalize,cse),aotkit-simplify)'"

# --- Python passes -------------------------------------------------------------------------------


@dataclass(frozen=True)
class PythonPass:
    """A pass written in Python: `run(module) -> bool`, True when it changed the module."""

    name: str
    run: PassFn
    description: str


PYTHON_PASSES: dict[str, PythonPass] = {}
_PASS_NAME = re.compile(r"^[a-z][a-z0-9-]*$")


def _add_pass(name: str, fn: PassFn, description: str) -> None:
    PYTHON_PASSES[name] = PythonPass(name, fn, description)
    _plan.cache_clear()


def register_pass(name: str, *, description: str = "") -> Callable[[PassFn], PassFn]:
    """Registers `fn(module) -> bool` as the pipeline pass `name` (a decorator).

    The pass runs on the whole module wherever it appears in a pipeline (inside
    `func.func(...)` too) and returns True when it changed the module. The caller holds
    `IR_LOCK` and the aotkit context is current.
    """
    if not isinstance(name, str) or not _PASS_NAME.match(name):
        raise ValueError(
            f"register_pass: invalid pass name {name!r}; use lowercase letters, digits and "
            "dashes, starting with a letter (e.g. 'my-simplify')"
        )
    if name in PYTHON_PASSES or name in NAMED_PIPELINES:
        raise ValueError(f"register_pass: {name!r} is already registered; choose another name")
    if _is_mlir_pass(name):
        raise ValueError(
            f"register_pass: {name!r} is an MLIR pass registered in jaxlib; choose another name"
        )

    def decorate(fn: PassFn) -> PassFn:
        if not callable(fn):
            raise TypeError(
                f"register_pass({name!r}): expected a function module -> bool, "
                f"got {type(fn).__name__}"
            )
        doc = (fn.__doc__ or "").strip().splitlines()
        _add_pass(name, fn, description or (doc[0] if doc else ""))
        return fn

    return decorate


def _is_mlir_pass(name: str) -> bool:
    with IR_LOCK, context():
        for text in (f"builtin.module({name})", f"builtin.module(func.func({name}))"):
            try:
                passmanager.PassManager.parse(text)
                return True
            except ValueError:
                pass
    return False


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


def _decode(op: ir.Operation) -> _Const:
    rtype = op.results[0].type
    elem = str(rtype.element_type)
    if elem not in _DTYPES:
        return _OPAQUE
    attr = op.attributes["value"]
    if not isinstance(attr, ir.DenseElementsAttr):  # dense_resource<...> blobs
        return _OPAQUE
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

        def visit(op: ir.Operation) -> ir.WalkResult:
            try:
                self._visit(op)
            except BaseException as e:  # re-raised below: exceptions must not cross C++
                failure.append(e)
                return ir.WalkResult.INTERRUPT
            return ir.WalkResult.ADVANCE

        module.operation.walk(visit)
        if failure:
            raise failure[0]
        _erase_dead(self.replaced)
        return bool(self.replaced)

    def _visit(self, op: ir.Operation) -> None:
        name = op.name
        if name == "stablehlo.constant":
            self.constants[op.results[0]] = op
            return
        rules = self.rules.get(name)
        if rules is None:
            return
        operands = tuple(op.operands)
        constants = self.constants
        has_const = any(v in constants for v in operands)
        for rule, needs_const in rules:
            if needs_const and not has_const:
                continue
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


def _add_zero(rw: _Rewriter, op: ir.Operation, operands):
    x, y = operands
    if rw.is_splat(y, 0):
        return _same_type(x, op)
    if rw.is_splat(x, 0):
        return _same_type(y, op)
    return None


def _subtract_zero(rw: _Rewriter, op: ir.Operation, operands):
    x, y = operands
    return _same_type(x, op) if rw.is_splat(y, 0) else None


def _multiply_one(rw: _Rewriter, op: ir.Operation, operands):
    x, y = operands
    if rw.is_splat(y, 1):
        return _same_type(x, op)
    if rw.is_splat(x, 1):
        return _same_type(y, op)
    return None


def _double_negation(rw: _Rewriter, op: ir.Operation, operands):
    x = operands[0]
    inner = rw.negated.get(x)
    if inner is not None:
        return _same_type(inner, op)
    rw.negated[op.results[0]] = x
    return None


def _same_type_noop(rw: _Rewriter, op: ir.Operation, operands):
    return _same_type(operands[0], op)


def _iota(values) -> bool:
    return all(v == i for i, v in enumerate(values))


def _noop_broadcast(rw: _Rewriter, op: ir.Operation, operands):
    if not _iota(op.attributes["broadcast_dimensions"]):
        return None
    return _same_type(operands[0], op)


def _noop_transpose(rw: _Rewriter, op: ir.Operation, operands):
    x = operands[0]
    outer = list(op.attributes["permutation"])
    if _iota(outer):
        return _same_type(x, op)
    inner = rw.transposed.get(x)
    # Result dim i is x's dim inner[outer[i]]: the pair cancels when that is always i.
    if inner is not None and _iota(inner[1][i] for i in outer):
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
        return np.transpose(c.array, list(op.attributes["permutation"]))
    dims = list(op.attributes["broadcast_dimensions"])
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


def _remap(op: ir.Operation, mapping: dict[ir.Value, ir.Value]) -> None:
    def visit(inner: ir.Operation) -> ir.WalkResult:
        operands = inner.operands
        for i, v in enumerate(operands):
            new = mapping.get(v)
            if new is not None:
                operands[i] = new
        return ir.WalkResult.ADVANCE

    op.walk(visit)  # nested regions may use the callee's arguments too


def _inline_call(call: ir.Operation, body: ir.Block) -> None:
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
            _inline_call(call, body)
        changed = True
    return changed


# --- Pipeline text -------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Step:
    label: str  # the pass name, used in dump file names and the timing report
    manager: passmanager.PassManager | None
    python: PythonPass | None


def _split(text: str, pipeline: str) -> list[str]:
    """Splits `a,b{x=1},c(d,e)` at top-level commas."""
    parts, start, quote = [], 0, None
    closing = {"(": ")", "{": "}"}
    stack: list[str] = []
    for i, ch in enumerate(text):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif ch in closing:
            stack.append(closing[ch])
        elif ch in ")}":
            if not stack or stack.pop() != ch:
                raise _syntax_error(pipeline, f"unbalanced {ch!r}")
        elif ch == "," and not stack:
            parts.append(text[start:i])
            start = i + 1
    if stack or quote:
        raise _syntax_error(pipeline, "unbalanced brackets")
    parts.append(text[start:])
    return [p.strip() for p in parts]


def _syntax_error(pipeline: str, what: str) -> ValueError:
    return ValueError(f"pipeline {pipeline!r}: {what}; write pipelines as {_EXAMPLE}")


_NAME = re.compile(r"[A-Za-z_][\w.\-]*")


def _parse_element(text: str, pipeline: str) -> tuple[str, str, str | None]:
    """`name{options}(body)` -> (name, "{options}", body or None)."""
    m = _NAME.match(text)
    if m is None:
        raise _syntax_error(pipeline, f"cannot read pass {text!r}")
    name, rest = m.group(), text[m.end() :].strip()
    options = ""
    if rest.startswith("{"):
        depth = 0
        for i, ch in enumerate(rest):
            depth += {"{": 1, "}": -1}.get(ch, 0)
            if depth == 0:
                options, rest = rest[: i + 1], rest[i + 1 :].strip()
                break
    if not rest:
        return name, options, None
    if rest.startswith("(") and rest.endswith(")"):
        return name, options, rest[1:-1]
    raise _syntax_error(pipeline, f"cannot read pass {text!r}")


def _nested(anchors: tuple[str, ...], inner: str) -> str:
    for anchor in reversed(anchors):
        inner = f"{anchor}({inner})"
    return f"builtin.module({inner})"


def _flatten(text: str, anchors: tuple[str, ...], pipeline: str) -> list[_Step]:
    steps: list[_Step] = []
    for element in _split(text, pipeline):
        if not element:
            if text.strip():
                raise _syntax_error(pipeline, "empty pass name")
            continue
        name, options, body = _parse_element(element, pipeline)
        if body is not None:
            if options:
                raise _syntax_error(pipeline, f"options on op anchor {name!r}")
            steps.extend(_flatten(body, anchors + (name,), pipeline))
        elif name in PYTHON_PASSES:
            if options:
                raise ValueError(
                    f"pipeline {pipeline!r}: aotkit pass {name!r} takes no options, "
                    f"got {options}; remove them"
                )
            steps.append(_Step(name, None, PYTHON_PASSES[name]))
        else:
            steps.append(_Step(name, _manager(name, element, anchors, pipeline), None))
    return steps


def _manager(name: str, element: str, anchors: tuple[str, ...], pipeline: str):
    try:
        return _parse_manager(_nested(anchors, element))
    except ValueError as e:
        message = str(e)
    if not anchors and "restricted to 'func.func'" in message:
        # Passes such as chlo-legalize-to-stablehlo run on functions: nest them for the user.
        return _parse_manager(_nested(("func.func",), element))
    if "does not refer to a registered pass" in message:
        if name in _NOT_IN_JAXLIB:
            raise ValueError(
                f"pipeline {pipeline!r}: unknown pass {name!r} (jaxlib does not register it); "
                f"use {_NOT_IN_JAXLIB[name]}"
            ) from None
        near = difflib.get_close_matches(name, known_names(), n=3, cutoff=0.6)
        suggestion = (
            f"nearest registered: {', '.join(near)}"
            if near
            else "see aotkit.passes.known_names() for the registered names"
        )
        raise ValueError(f"pipeline {pipeline!r}: unknown pass {name!r}; {suggestion}") from None
    first = next((ln.strip() for ln in message.splitlines() if ln.strip()), message)
    raise ValueError(
        f"pipeline {pipeline!r}: MLIR rejected {element!r}: {first}; check the pass options "
        "and the op it is nested under"
    ) from None


def _parse_manager(text: str) -> passmanager.PassManager:
    pm = passmanager.PassManager.parse(text)
    # One verification after the whole pipeline instead of one per pass: verifying costs
    # about as much as a pass, and the input was verified when it was traced.
    pm.enable_verifier(False)
    return pm


# StableHLO passes upstream has and jaxlib leaves out, with the aotkit pass to use instead.
_NOT_IN_JAXLIB = {
    "stablehlo-aggressive-simplification": "aotkit-simplify",
    "stablehlo-aggressive-folder": "aotkit-fold-constants",
}

# Candidates for "did you mean": MLIR passes jaxlib may register. Only those that parse in
# this jaxlib are offered.
_MLIR_CANDIDATES = (
    "canonicalize cse inline symbol-dce symbol-privatize sccp loop-invariant-code-motion "
    "control-flow-sink strip-debuginfo print-ir print-op-stats topological-sort "
    "remove-dead-values mem2reg sroa snapshot-op-locations stablehlo-legalize-to-vhlo "
    "vhlo-legalize-to-stablehlo vhlo-to-version stablehlo-refine-shapes "
    "stablehlo-canonicalize-dynamism stablehlo-legalize-to-linalg chlo-legalize-to-stablehlo "
    "stablehlo-compatibility-expander stablehlo-complex-math-expander "
    "stablehlo-legalize-composite-to-call stablehlo-legalize-deprecated-ops "
    "stablehlo-legalize-quant-to-math stablehlo-refine-arguments stablehlo-convert-to-signless "
    "stablehlo-wrap-in-composite shape-legalize-to-stablehlo"
).split()


@functools.cache
def _registered_mlir_names() -> tuple[str, ...]:
    return tuple(n for n in _MLIR_CANDIDATES if _is_mlir_pass(n))


def known_names() -> list[str]:
    """Pass names a pipeline may use: registered MLIR passes (of a known list), aotkit's
    Python passes, and the named pipelines (usable as a whole pipeline only)."""
    return sorted({*_registered_mlir_names(), *PYTHON_PASSES, *NAMED_PIPELINES})


@functools.lru_cache(maxsize=64)
def _plan(pipeline: str) -> tuple[_Step, ...]:
    text = NAMED_PIPELINES.get(pipeline, pipeline).strip()
    if not text:
        raise ValueError(f"pipeline {pipeline!r}: empty pipeline; use 'none' to run no passes")
    parts = _split(text, pipeline)
    if len(parts) == 1:
        name, options, body = _parse_element(parts[0], pipeline)
        if name == "builtin.module" and body is not None and not options:
            text = body
    with IR_LOCK, context():
        return tuple(_flatten(text, (), pipeline))


def check_pipeline(pipeline: str) -> None:
    """Raises TypeError/ValueError for a pipeline that `run_pipeline` would reject."""
    if not isinstance(pipeline, str):
        raise TypeError(
            f"pipeline: expected a name ({', '.join(NAMED_PIPELINES)}) or MLIR pipeline text, "
            f"got {type(pipeline).__name__} {pipeline!r}; e.g. pipeline={_EXAMPLE}"
        )
    _plan(pipeline)


# --- Running -------------------------------------------------------------------------------------


def _first_diagnostic(e: ir.MLIRError) -> str:
    diagnostics = getattr(e, "error_diagnostics", None) or []
    if diagnostics:
        return diagnostics[0].message
    return str(e).strip().splitlines()[-1]


def format_timing(timings: list[tuple[str, float]], *, name: str, pipeline: str) -> str:
    """A pass timing report: one line per pass with milliseconds and share of the total."""
    total = sum(t for _, t in timings) or 1e-12
    width = max((len(label) for label, _ in timings), default=4)
    lines = [f"pipeline {pipeline!r} on module {name!r}", f"{'pass':<{width}}  {'ms':>9}  share"]
    for label, seconds in timings:
        lines.append(f"{label:<{width}}  {seconds * 1e3:9.3f}  {seconds / total:5.1%}")
    lines.append(f"{'total':<{width}}  {total * 1e3:9.3f}")
    return "\n".join(lines) + "\n"


def run_pipeline(
    module: ir.Module,
    pipeline: str,
    *,
    name: str,
    dumper: dumps.Dumper | None = None,
    verified: bool = False,
) -> list[tuple[str, float]]:
    """Runs `pipeline` on `module` in place and returns (pass, seconds) per pass.

    With a dumper, writes the `traced` module first, the module after each pass when
    `dumper.print_ir_after_all`, the `final` module, and the timing report when
    `dumper.pass_timing`. `verified=True` skips verifying the input (the tracer did).
    """
    check_pipeline(pipeline)
    steps = _plan(pipeline)
    timings: list[tuple[str, float]] = []
    with IR_LOCK, context():
        if dumper is not None:
            dumper.write_module("traced", module)
        if not verified:
            try:
                module.operation.verify()
            except ir.MLIRError as e:
                raise ValueError(
                    f"run_pipeline: module {name!r} fails verification before the pipeline: "
                    f"{_first_diagnostic(e)}; {dumps.hint(dumper)}"
                ) from e
        for step in steps:
            start = time.perf_counter()
            _run_step(step, module, name=name, pipeline=pipeline, dumper=dumper)
            timings.append((step.label, time.perf_counter() - start))
            if dumper is not None and dumper.print_ir_after_all:
                dumper.write_module(f"after-{step.label}", module)
        if steps:
            try:
                module.operation.verify()
            except ir.MLIRError as e:
                if dumper is not None:
                    dumper.write_module("invalid", module)
                raise CompileError(
                    f"pipeline {pipeline!r} produced an invalid module {name!r}: "
                    f"{_first_diagnostic(e)}; {dumps.hint(dumper)}",
                    module_name=name,
                ) from e
        if dumper is not None:
            dumper.write_module("final", module)
            if dumper.pass_timing:
                report = format_timing(timings, name=name, pipeline=pipeline)
                dumper.write("pass-timing", report, ext="txt")
        elif dumps.pass_timing_requested():
            sys.stderr.write(format_timing(timings, name=name, pipeline=pipeline))
    return timings


def _run_step(step: _Step, module: ir.Module, *, name, pipeline, dumper) -> None:
    if step.python is not None:
        try:
            changed = step.python.run(module)
        except Exception as e:
            e.add_note(f"in aotkit pass {step.label!r} on module {name!r}")
            raise
        if not isinstance(changed, bool):
            raise TypeError(
                f"aotkit pass {step.label!r} returned {type(changed).__name__} {changed!r}; "
                "a pass returns True when it changed the module, else False"
            )
        return
    try:
        step.manager.run(module.operation)
    except ir.MLIRError as e:
        if dumper is not None:
            dumper.write_module(f"failed-{step.label}", module)
        raise CompileError(
            f"pipeline {pipeline!r}: pass {step.label!r} failed on module {name!r}: "
            f"{_first_diagnostic(e)}; {dumps.hint(dumper)}",
            module_name=name,
        ) from e


for _name, _fn in (
    ("aotkit-inline", inline_calls),
    ("aotkit-algebraic-simplify", algebraic_simplify),
    ("aotkit-fold-constants", fold_constants),
    ("aotkit-dce", remove_dead_ops),
    ("aotkit-simplify", simplify),
):
    _add_pass(_name, _fn, " ".join(_fn.__doc__.split("\n\n")[0].split()))
