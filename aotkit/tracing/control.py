"""Trace stage, control flow: cond, switch, while_loop, fori_loop and scan.

Branches and loops stay branches and loops: each call lowers to one `stablehlo.if`,
`stablehlo.case` or `stablehlo.while` whose regions hold the traced bodies, so the size of
the IR does not depend on the trip count. Each body is traced into the op's region once
(a loop whose init holds Python scalars traces its body once or twice more, see below);
bodies may close over outer tracers and constants (StableHLO regions are not isolated from
above) and may nest.

Operands, branch outputs and loop carries are pytrees (`jax.tree_util`). Their structure,
shapes and dtypes are checked before any op is built, so a mismatch is a TypeError naming
the branch or carry leaf and both types, never an invalid module.

Bodies are traced into the regions of a detached scratch op first, because the result
types of `stablehlo.if`/`case` (and the stacked outputs of `scan`) are known only after
tracing; the finished blocks are then moved into the real op.

Python scalars follow NEP 50. A Python scalar returned by a branch or loop body takes the
dtype of the other branches or of the carry when NumPy would give it that dtype. A loop
carry whose init is a Python scalar gets the dtype NumPy's first iteration would give it:
the body is probed once with the scalar itself (`c = 0; c = c + x` has x's dtype), then
traced with the carry at that dtype (NumPy's default for the kind, int64/float64/...,
when the probe cannot tell). If the body still returns another dtype that NumPy would
give the scalar, the loop is traced again at that dtype; otherwise the TypeError says so.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import contextmanager

import numpy as np
from jax import tree_util
from jaxlib.mlir import ir
from jaxlib.mlir.dialects import stablehlo

from aotkit import dtypes, modules
from aotkit.symbolic.algebra import Dim
from aotkit.tracing import indexing  # also registers the dynamic slices scan binds
from aotkit.tracing.core import (
    Tracer,
    _check_live,
    as_weak,
    bind1,
    constant,
    current_scope,
    full,
    is_tracing,
    note_made,
    note_range,
    pop_scope,
    push_scope,
    user_location,
    where,
)
from aotkit.tracing.hlo import cast

# Loop counters are int64, NumPy's default integer, as `range` values would become.
_INDEX = np.dtype(np.int64)
# A carry's dtype can only climb bool -> int -> float -> complex, so retraces are bounded.
_MAX_RETRACES = 4


# --- one row of a stacked array, for scan (primitives from the indexing family) ---------------


def _row_starts(i: Tracer, ndim: int) -> list[Tracer]:
    return [i] + [full((), 0, i.dtype) for _ in range(ndim - 1)]


def _take_row(x: Tracer, i: Tracer) -> Tracer:
    """`x[i]` for a traced scalar `i` (in range by construction)."""
    if x.shape[0] == 0:
        # A scan of length 0 traces its body but never runs it; an empty axis has no row
        # to slice (a dynamic_slice there would not verify).
        return full(x.shape[1:], 0, x.dtype)
    row = bind1("dynamic_slice", x, *_row_starts(i, x.ndim), sizes=(1,) + x.shape[1:])
    return bind1("reshape", row, shape=x.shape[1:])


def _with_spare_row(x: Tracer) -> Tracer:
    """`x` with one more row of zeros at the end (see `scan`)."""
    zero = full((), 0, x.dtype)
    pad = (0,) * (x.ndim - 1)
    return bind1("pad", x, zero, low=(0,) + pad, high=(1,) + pad)


def _put_row(x: Tracer, row: Tracer, i: Tracer) -> Tracer:
    """`x` with `x[i] = row`, functionally."""
    if x.shape[0] == 0:
        return x
    update = bind1("reshape", row, shape=(1,) + row.shape)
    return bind1("dynamic_update_slice", x, update, *_row_starts(i, x.ndim))


# --- helpers -----------------------------------------------------------------------------------


def _start(op: str) -> None:
    if not is_tracing():
        raise RuntimeError(
            f"{where(op)}: no function is being traced; call aotkit.{op} inside a function "
            "given to aotkit.lower or aotkit.jit"
        )


def _live(t: Tracer, op: str) -> Tracer:
    if not t._scope.open:
        _check_live(t, op)
    return t


def _leaf_name(root: str, path) -> str:
    return root + tree_util.keystr(tuple(path))


def _type_str(leaf) -> str:
    if isinstance(leaf, Tracer):
        return f"{dtypes.short_name(leaf.dtype)}[{','.join(map(str, leaf.shape))}]"
    return f"a Python {type(leaf).__name__}"


def _aval_str(shape, dtype) -> str:
    return f"{dtypes.short_name(dtype)}[{','.join(map(str, shape))}]"


def _output_leaf(op: str, fn_name: str, name: str, leaf):
    """A body's output leaf: a live tracer, a NumPy value made a constant, or a Python
    scalar kept weak until the type it must take is known."""
    if isinstance(leaf, Tracer):
        return _live(leaf, op)
    if dtypes.weak_kind(leaf) is not None:
        return leaf
    if isinstance(leaf, np.ndarray | np.generic):
        return constant(leaf)
    raise TypeError(
        f"{where(op)}: {fn_name} returns a {type(leaf).__name__} for {name}, which is not an "
        "array; return arrays, Python scalars or pytrees (tuples, lists, dicts, None) of them"
    )


def _weak_fits(kind: type, dtype: np.dtype) -> bool:
    """Whether NumPy (NEP 50) gives a Python scalar of `kind` met with `dtype` that dtype."""
    return dtypes.result_type(dtype, kind) == dtype


def _weak_value(op: str, value, dtype: np.dtype) -> Tracer:
    try:
        np.array(value, dtype=dtype)
    except OverflowError:
        raise OverflowError(
            f"{where(op)}: the Python scalar {value!r} does not fit {dtypes.short_name(dtype)}; "
            "use a wider dtype"
        ) from None
    return full((), value, dtype)


@contextmanager
def _region(region: ir.Region, avals: Sequence, name: str):
    """Traces into a new block of `region` whose arguments have `avals`, in its own scope."""
    block = region.blocks.append(*(dtypes.tensor_type(s, d) for s, d in avals))
    scope = push_scope(name)
    try:
        with ir.InsertionPoint(block):
            yield (
                block,
                [Tracer(a, s, d, scope) for a, (s, d) in zip(block.arguments, avals, strict=True)],
            )
    finally:
        pop_scope(scope)


def _scratch(n_regions: int) -> ir.Operation:
    # Never attached or verified: it only owns the blocks until the real op exists.
    return ir.Operation.create(
        "stablehlo.case", results=[], operands=[], regions=n_regions, ip=False
    )


def _results(op: ir.Operation, avals: Sequence) -> list[Tracer]:
    scope = current_scope()
    return [Tracer(r, s, d, scope) for r, (s, d) in zip(op.results, avals, strict=True)]


def _scalar_operand(op: str, name: str, x, check: Callable[[np.dtype], bool], want: str):
    """A scalar operand (pred, index, bound) as a live tracer or a NumPy scalar."""
    if isinstance(x, Tracer):
        _live(x, op)
        shape, dtype = x.shape, x.dtype
    elif (kind := dtypes.weak_kind(x)) is not None:
        # By kind, not value: a huge Python int is still an int (its range is checked later).
        shape, dtype = (), dtypes.result_type(kind)
    elif isinstance(x, np.ndarray | np.generic):
        shape, dtype = x.shape, x.dtype
    else:
        raise TypeError(f"{where(op)}: {name} must be {want}, got a {type(x).__name__}")
    if shape != () or not check(dtype):
        raise TypeError(
            f"{where(op)}: {name} must be {want}, got {_aval_str(shape, dtype)}"
            if dtype in dtypes.SUPPORTED
            else f"{where(op)}: {name} must be {want}, got dtype {dtype}"
        )
    return x


# --- cond and switch ----------------------------------------------------------------------------


def _branch_operands(op: str, operands: tuple) -> tuple:
    """Tracers pass as they are, NumPy values become constants; Python scalars stay weak
    (as if the branch closed over them), so `x * s` keeps x's dtype as NumPy would."""

    def convert(leaf):
        if isinstance(leaf, Tracer):
            return _live(leaf, op)
        if isinstance(leaf, np.ndarray | np.generic):
            return constant(leaf)
        return leaf

    return tree_util.tree_map(convert, operands)


def _join(op: str, labels: Sequence[str], traced: list) -> list:
    """The common (shape, dtype) of each output leaf across branches, or a TypeError."""
    tree0 = traced[0][1]
    for label, (_, tree, _, _) in zip(labels[1:], traced[1:], strict=True):
        if tree != tree0:
            raise TypeError(
                f"{where(op)}: {labels[0]} returns the pytree {tree0} but {label} returns "
                f"{tree}; every branch must return the same structure"
            )
    avals = []
    for j, path in enumerate(traced[0][3]):
        name = _leaf_name("output", path)
        column = [(label, t[2][j]) for label, t in zip(labels, traced, strict=True)]
        strong = [(label, leaf) for label, leaf in column if isinstance(leaf, Tracer)]
        if strong:
            ref_label, ref = strong[0]
            shape, dtype = ref.shape, ref.dtype
            for label, leaf in column:
                ok = (
                    (leaf.shape, leaf.dtype) == (shape, dtype)
                    if isinstance(leaf, Tracer)
                    else shape == () and _weak_fits(type(leaf), dtype)
                )
                if not ok:
                    hint = (
                        f"NumPy (NEP 50) would not give {_type_str(leaf)} the dtype "
                        f"{dtypes.short_name(dtype)}; "
                        if not isinstance(leaf, Tracer) and shape == ()
                        else ""
                    )
                    raise TypeError(
                        f"{where(op)}: {ref_label} returns {_type_str(ref)} for {name} but "
                        f"{label} returns {_type_str(leaf)}; {hint}every branch must return "
                        "the same shapes and dtypes (cast with .astype)"
                    )
        else:
            shape = ()
            dtype = dtypes.result_type(*(type(leaf) for _, leaf in column))
        avals.append((shape, dtype))
    return avals


def _branches(op: str, labels: Sequence[str], fns: Sequence[Callable], operands: tuple):
    """Traces each branch into a region of a scratch op, checks that their outputs agree
    and returns them; returns (scratch, blocks, out_tree, out_avals)."""
    scratch = _scratch(len(fns))
    try:
        traced = []
        for i, (label, fn) in enumerate(zip(labels, fns, strict=True)):
            with _region(scratch.regions[i], (), f"{op} {label}") as (block, _):
                out = fn(*operands)
                leaves_with_paths, tree = tree_util.tree_flatten_with_path(out)
                paths = [p for p, _ in leaves_with_paths]
                leaves = [
                    _output_leaf(op, label, _leaf_name("output", p), leaf)
                    for p, leaf in leaves_with_paths
                ]
            traced.append((block, tree, leaves, paths))
        avals = _join(op, labels, traced)
        for block, _, leaves, _ in traced:
            with _region_tail(block, f"{op} return"), user_location():
                values = [
                    leaf if isinstance(leaf, Tracer) else _weak_value(op, leaf, d)
                    for leaf, (_, d) in zip(leaves, avals, strict=True)
                ]
                stablehlo.ReturnOp([v.value for v in values])
        # An output every branch gives as a Python scalar (or a weakly typed value) stays
        # weakly typed, as the Python scalar a Python `if` would leave behind.
        weak = [
            all(not isinstance(t[2][j], Tracer) or t[2][j].weak for t in traced)
            for j in range(len(avals))
        ]
        return scratch, [t[0] for t in traced], traced[0][1], (avals, weak)
    except BaseException:
        scratch.erase()
        raise


@contextmanager
def _region_tail(block: ir.Block, name: str):
    """Appends to a finished block (its return op, constants it needs) in a fresh scope."""
    scope = push_scope(name)
    try:
        with ir.InsertionPoint(block):
            yield
    finally:
        pop_scope(scope)


def _finish_branches(scratch, blocks, real: ir.OpView, tree, avals, weak):
    for block, region in zip(blocks, real.regions, strict=True):
        block.append_to(region)
    scratch.erase()
    results = _results(real.operation, avals)
    results = [as_weak(r) if w else r for r, w in zip(results, weak, strict=True)]
    return tree_util.tree_unflatten(tree, results)


def cond(pred, true_fn: Callable, false_fn: Callable, *operands):
    """`true_fn(*operands)` if `pred` else `false_fn(*operands)`, as one `stablehlo.if`.

    `pred` is a scalar (nonzero is true). Both branches are traced and must return the
    same pytree of shapes and dtypes; they may close over outer tracers.
    """
    _start("cond")
    _callables("cond", true_fn=true_fn, false_fn=false_fn)
    _scalar_operand("cond", "pred", pred, lambda d: d in dtypes.SUPPORTED, "a scalar")
    pred = cast(pred, np.dtype(np.bool_)) if isinstance(pred, Tracer) else bool(pred)
    operands = _branch_operands("cond", operands)
    labels = ("true_fn", "false_fn")
    scratch, blocks, tree, (avals, weak) = _branches("cond", labels, (true_fn, false_fn), operands)
    with user_location():
        if not isinstance(pred, Tracer):
            pred = full((), pred, np.dtype(np.bool_))
        real = stablehlo.IfOp([dtypes.tensor_type(s, d) for s, d in avals], pred.value)
    return _finish_branches(scratch, blocks, real, tree, avals, weak)


def switch(index, branches: Sequence[Callable], *operands):
    """`branches[index](*operands)` as one `stablehlo.case`; `index` is clamped into range
    (as `jax.lax.switch` does) and every branch must return the same pytree of types."""
    _start("switch")
    branches = tuple(branches) if isinstance(branches, Sequence) else None
    if not branches:
        raise ValueError(f"{where('switch')}: branches must be a non-empty sequence of functions")
    _callables("switch", **{f"branches[{i}]": fn for i, fn in enumerate(branches)})
    _scalar_operand(
        "switch",
        "index",
        index,
        dtypes.is_integer,
        "an integer scalar",
    )
    last = len(branches) - 1
    if not isinstance(index, Tracer):
        index = min(max(int(index), 0), last)
    operands = _branch_operands("switch", operands)
    labels = tuple(f"branches[{i}]" for i in range(len(branches)))
    scratch, blocks, tree, (avals, weak) = _branches("switch", labels, branches, operands)
    i32 = np.dtype(np.int32)
    with user_location():
        if isinstance(index, Tracer):
            # Clamp in the index's own dtype first, so wide indices do not wrap in i32.
            if dtypes.is_signed_int(index.dtype):
                index = bind1("max", index, full((), 0, index.dtype))
            index = bind1("min", index, full((), last, index.dtype))
            index = cast(index, i32)
        else:
            index = full((), index, i32)
        real = stablehlo.CaseOp(
            [dtypes.tensor_type(s, d) for s, d in avals], index.value, len(branches)
        )
    return _finish_branches(scratch, blocks, real, tree, avals, weak)


# --- loops --------------------------------------------------------------------------------------


class Carry:
    """One leaf of a loop carry: its type, and the init it starts from."""

    __slots__ = ("shape", "dtype", "weak", "init", "name")

    def __init__(self, shape, dtype, weak, init, name):
        self.shape = shape
        self.dtype = dtype
        self.weak = weak  # the Python scalar type of the init, or None
        self.init = init
        self.name = name

    @property
    def aval(self):
        return (self.shape, self.dtype)

    def promoted(self, dtype: np.dtype) -> Carry:
        return Carry(self.shape, dtype, self.weak, self.init, self.name)

    def materialize(self, op: str) -> Tracer:
        if isinstance(self.init, Tracer):
            return self.init
        if self.weak is not None:
            return _weak_value(op, self.init, self.dtype)
        return constant(self.init, self.dtype)

    def describe(self) -> str:
        if self.weak is not None:
            return f"a Python {self.weak.__name__} (traced as {_aval_str(self.shape, self.dtype)})"
        return _aval_str(self.shape, self.dtype)


class _Retrace(Exception):
    """A Python-scalar init must take the dtype its body returns: trace the loop again."""

    def __init__(self, index: int, dtype: np.dtype):
        super().__init__(index, dtype)
        self.index = index
        self.dtype = dtype


class _Probed(Exception):
    """The dtypes a probe trace found for Python-scalar inits (None: keep the default)."""

    def __init__(self, found: list):
        super().__init__(found)
        self.found = found


def _carry_leaves(op: str, init, root: str = "carry") -> tuple[list[Carry], object]:
    leaves_with_paths, tree = tree_util.tree_flatten_with_path(init)
    carry = []
    for path, leaf in leaves_with_paths:
        name = _leaf_name(root, path)
        if isinstance(leaf, Tracer):
            _live(leaf, op)
            carry.append(Carry(leaf.shape, leaf.dtype, None, leaf, name))
        elif (kind := dtypes.weak_kind(leaf)) is not None:
            carry.append(Carry((), dtypes.result_type(kind), kind, leaf, name))
        elif isinstance(leaf, np.ndarray | np.generic):
            arr = np.asarray(leaf)
            dtype = dtypes.canonicalize(arr.dtype, where=where(op))
            carry.append(Carry(arr.shape, dtype, None, arr, name))
        else:
            raise TypeError(
                f"{where(op)}: {name} is a {type(leaf).__name__}, not an array; a loop carry "
                "is a pytree (tuples, lists, dicts, None) of arrays and Python scalars"
            )
    return carry, tree


def _check_carry(
    op: str, fn_name: str, carry: Sequence[Carry], tree, out, *, offset: int = 0, probe=False
) -> list[Tracer]:
    """The body's new carry as tracers of the carry's types; raises `_Retrace` when a
    Python-scalar init must be promoted, and TypeError for any other mismatch. In a probe
    trace it raises `_Probed` with the dtypes the body gave the Python-scalar inits."""
    leaves_with_paths, out_tree = tree_util.tree_flatten_with_path(out)
    if out_tree != tree:
        raise TypeError(
            f"{where(op)}: {fn_name} must return the carry's pytree {tree}, got {out_tree}; "
            "a loop carry keeps its structure across iterations"
        )
    if probe:
        found = [None] * offset
        for (_, leaf), c in zip(leaves_with_paths, carry, strict=True):
            fits = (
                c.weak is not None
                and isinstance(leaf, Tracer)
                and leaf.shape == ()
                and _weak_fits(c.weak, leaf.dtype)
            )
            found.append(leaf.dtype if fits else None)
        raise _Probed(found)
    new = []
    for j, ((_, leaf), c) in enumerate(zip(leaves_with_paths, carry, strict=True)):
        leaf = _output_leaf(op, fn_name, c.name, leaf)
        kind = None if isinstance(leaf, Tracer) else type(leaf)
        shape = leaf.shape if kind is None else ()
        if shape == c.shape:
            if kind is None and leaf.dtype == c.dtype:
                new.append(leaf)
                continue
            if kind is not None and _weak_fits(kind, c.dtype):
                new.append(_weak_value(op, leaf, c.dtype))
                continue
            # The dtype NumPy would give the init's Python scalar met with this output.
            target = leaf.dtype if kind is None else dtypes.result_type(c.weak or c.dtype, kind)
            if c.weak is not None and _weak_fits(c.weak, target) and target != c.dtype:
                raise _Retrace(offset + j, target)
        hint = (
            f"; NumPy (NEP 50) does not turn {c.describe().split(' (')[0]} into "
            f"{_type_str(leaf)}, so the carry cannot change type"
            if c.weak is not None and shape == c.shape
            else ""
        )
        raise TypeError(
            f"{where(op)}: {fn_name} returns {_type_str(leaf)} for {c.name}, whose init is "
            f"{c.describe()}{hint}; a loop carry keeps its shape and dtype across iterations "
            "(cast the result with .astype, or start from an init of the type the body returns)"
        )
    return new


class _LoopBody:
    """What a loop body builder sees: the carry's types in this attempt, and a way to add
    carries whose types the body decides (scan's stacked outputs)."""

    def __init__(self, block: ir.Block, scope, carry: list[Carry], probe: bool = False):
        self.block = block
        self.scope = scope
        self.carry = carry
        self.probe = probe
        self.extra: list[tuple[tuple, np.dtype]] = []

    def add_carry(self, shape: tuple[int, ...], dtype: np.dtype) -> Tracer:
        """A new carry, zeros at the start, added after the body's type is known."""
        arg = self.block.add_argument(dtypes.tensor_type(shape, dtype), ir.Location.unknown())
        self.extra.append((shape, dtype))
        return Tracer(arg, shape, dtype, self.scope)


def _probe(op: str, carry: list[Carry], body_fn) -> list[Carry]:
    """The carry with each Python-scalar init typed as NumPy's first iteration would type
    it: that iteration sees the scalar itself (`c = 0; c = c + x` is x's dtype), so the
    body is traced once with the scalars in place. A body that cannot run on a Python
    scalar keeps the default dtypes, promoted later by `_Retrace` where NumPy allows."""
    scratch = _scratch(1)
    try:
        with _region(scratch.regions[0], [c.aval for c in carry], f"{op} probe") as (block, args):
            args = [c.init if c.weak is not None else a for c, a in zip(carry, args, strict=True)]
            body_fn(args, _LoopBody(block, current_scope(), carry, probe=True))
    except _Probed as p:
        carry = [c if d is None else c.promoted(d) for c, d in zip(carry, p.found, strict=True)]
    except OverflowError as e:
        # A Python int the first iteration would mix with a narrower array (`s - 1` in one
        # branch, `s + x[i]` of a uint8 x in the other): NumPy's dtype for it depends on
        # which values that iteration sees, or NumPy raises this same error.
        names = ", ".join(c.name for c in carry if c.weak is not None)
        raise TypeError(
            f"{where(op)}: the dtype of {names}, started as a Python scalar, is NumPy's "
            f"dtype after the first iteration, but that iteration fails on it ({e}): "
            "NumPy's dtype here depends on the values the body sees first; give the init "
            "an explicit dtype (np.uint8(0), np.int64(0), ...)"
        ) from None
    except Exception:  # the real trace reports the body's own errors
        pass
    finally:
        scratch.erase()
    return carry


def carried_while(
    op: str,
    carry: list[Carry],
    cond_fn: Callable[[list[Tracer]], Tracer],
    body_fn: Callable[[list[Tracer], _LoopBody], list[Tracer]],
) -> tuple[list[Tracer], list[Carry]]:
    """One `stablehlo.while` over `carry` (plus carries the body adds); returns its results
    and the carry as finally typed."""
    if any(c.weak is not None for c in carry):
        carry = _probe(op, carry, body_fn)
    for _ in range(_MAX_RETRACES):
        scratch = _scratch(2)
        try:
            avals = [c.aval for c in carry]
            with _region(scratch.regions[1], avals, f"{op} body") as (body_block, args):
                body = _LoopBody(body_block, current_scope(), carry)
                outs = body_fn(args, body)
                with user_location():
                    stablehlo.ReturnOp([t.value for t in outs])
            avals += body.extra
            with _region(scratch.regions[0], avals, f"{op} cond") as (cond_block, args):
                pred = cond_fn(args[: len(carry)])
                with user_location():
                    stablehlo.ReturnOp([pred.value])
        except _Retrace as retrace:
            scratch.erase()
            r = retrace
            carry = list(carry)
            carry[r.index] = carry[r.index].promoted(r.dtype)
            continue
        except BaseException:
            scratch.erase()
            raise
        with user_location():
            inits = [c.materialize(op) for c in carry]
            inits += [full(s, 0, d) for s, d in body.extra]
            real = stablehlo.WhileOp(
                [dtypes.tensor_type(s, d) for s, d in avals], [t.value for t in inits]
            )
        cond_block.append_to(real.regions[0])
        body_block.append_to(real.regions[1])
        scratch.erase()
        return _results(real.operation, avals), carry
    c = carry[r.index]
    raise TypeError(
        f"{where(op)}: the dtype of {c.name}, whose init is a Python {c.weak.__name__}, does "
        f"not settle: after {_MAX_RETRACES} promotions the body still returns a new dtype "
        f"({dtypes.short_name(r.dtype)}); give the init an explicit dtype (np.int32(0), ...)"
    )


def _weak_results(outs: list[Tracer], carry: list[Carry]) -> list[Tracer]:
    """A carry that started as a Python scalar and kept that kind's default dtype is weakly
    typed after the loop, as the Python scalar a Python loop would leave behind."""
    return [
        as_weak(t) if c.weak is not None and c.dtype == dtypes.result_type(c.weak) else t
        for t, c in zip(outs, carry, strict=True)
    ]


def _check_pred(op: str, fn_name: str, pred) -> Tracer:
    if isinstance(pred, Tracer):
        _live(pred, op)
        if pred.shape == () and pred.dtype == np.bool_:
            return pred
    elif isinstance(pred, bool | np.bool_):
        return full((), bool(pred), np.dtype(np.bool_))
    raise TypeError(
        f"{where(op)}: {fn_name} must return a boolean scalar, got {_type_str(pred)}"
        if isinstance(pred, Tracer) or dtypes.weak_kind(pred) is not None
        else f"{where(op)}: {fn_name} must return a boolean scalar, got a {type(pred).__name__}"
    )


def _callables(op: str, **fns) -> None:
    for name, fn in fns.items():
        if not callable(fn):
            raise TypeError(f"{where(op)}: {name} must be callable, got {type(fn).__name__}")


def while_loop(cond_fn: Callable, body_fn: Callable, init):
    """`while cond_fn(carry): carry = body_fn(carry)`, as one `stablehlo.while`.

    `init` is a pytree of arrays and Python scalars; `body_fn` must return the same pytree
    of shapes and dtypes, `cond_fn` a boolean scalar.
    """
    _start("while_loop")
    _callables("while_loop", cond_fn=cond_fn, body_fn=body_fn)
    carry, tree = _carry_leaves("while_loop", init)

    def body(args, loop):
        out = body_fn(tree_util.tree_unflatten(tree, args))
        return _check_carry("while_loop", "body_fn", loop.carry, tree, out, probe=loop.probe)

    def cond(args):
        return _check_pred("while_loop", "cond_fn", cond_fn(tree_util.tree_unflatten(tree, args)))

    outs, final = carried_while("while_loop", carry, cond, body)
    return tree_util.tree_unflatten(tree, _weak_results(outs, final))


def _bound(op: str, name: str, x):
    return _scalar_operand(op, name, x, dtypes.is_integer, "an integer scalar")


def _as_index(x, dtype: np.dtype) -> Tracer:
    return cast(x, dtype) if isinstance(x, Tracer) else full((), x, dtype)


def _key(x):
    if isinstance(x, Tracer):
        return x.dtype
    return dtypes.weak_kind(x) or dtypes.canonicalize(np.asarray(x).dtype)


def fori_loop(lower, upper, body_fn: Callable, init):
    """`for i in range(lower, upper): carry = body_fn(i, carry)`, as one `stablehlo.while`.

    The bounds are integer scalars, static (Python or NumPy ints) or traced; `i` has their
    promoted dtype (int64 for Python ints, as NumPy would give) and is weakly typed: it
    promotes like the Python int of a `for` loop (`c * 2.0 + i` keeps an f32 carry f32).
    """
    _start("fori_loop")
    _callables("fori_loop", body_fn=body_fn)
    # A symbolic bound (`x.shape[0]`, issue 25) is a weakly typed traced int.
    lower, upper = (
        as_weak(full((), b, _INDEX)) if isinstance(b, Dim) else b for b in (lower, upper)
    )
    _bound("fori_loop", "lower", lower)
    _bound("fori_loop", "upper", upper)
    index_dtype = dtypes.result_type(_key(lower), _key(upper))
    if not dtypes.is_integer(index_dtype):
        raise TypeError(
            f"{where('fori_loop')}: the bounds promote to {dtypes.short_name(index_dtype)} "
            "(NumPy mixes uint64 and signed ints as floats); give both bounds one integer dtype"
        )
    info = np.iinfo(index_dtype)
    for name, b in (("lower", lower), ("upper", upper)):
        if not isinstance(b, Tracer) and not info.min <= int(b) <= info.max:
            raise OverflowError(
                f"{where('fori_loop')}: {name} bound {b!r} does not fit the loop index "
                f"dtype {dtypes.short_name(index_dtype)}"
            )
    carry, tree = _carry_leaves("fori_loop", init)
    counter = Carry((), index_dtype, None, _as_index(lower, index_dtype), "i")
    upper_t = cast(upper, index_dtype) if isinstance(upper, Tracer) else None

    span = _index_span(lower, upper)

    def body(args, loop):
        # The index is weakly typed, like the Python int a `for i in range(...)` loop gives:
        # `c * 2.0 + i` keeps the carry's dtype.
        i, rest = args[0], args[1:]
        if span is not None:
            note_range(i.value, *span)
        out = body_fn(as_weak(i), tree_util.tree_unflatten(tree, rest))
        new = _check_carry(
            "fori_loop", "body_fn", loop.carry[1:], tree, out, offset=1, probe=loop.probe
        )
        return [bind1("add", i, full((), 1, index_dtype))] + new

    def cond(args):
        stop = upper_t if upper_t is not None else full((), upper, index_dtype)
        return bind1("compare", args[0], stop, direction="LT")

    outs, final = carried_while("fori_loop", [counter] + carry, cond, body)
    return tree_util.tree_unflatten(tree, _weak_results(outs[1:], final[1:]))


def _index_span(lower, upper) -> tuple[int, int] | None:
    """[lo, hi] that the index of `fori_loop(lower, upper, ...)` lies in whenever the body
    runs, from static bounds or traced ones of known range (`indexing.value_range`)."""
    lo = lower if not isinstance(lower, Tracer) else indexing.value_range(lower.value)
    hi = upper if not isinstance(upper, Tracer) else indexing.value_range(upper.value)
    if lo is None or hi is None:
        return None
    lo = int(lo) if not isinstance(lo, tuple) else lo[0]
    hi = int(hi) - 1 if not isinstance(hi, tuple) else hi[1] - 1
    return lo, max(lo, hi)


def _scan_xs(op: str, xs, length):
    leaves_with_paths, x_tree = tree_util.tree_flatten_with_path(xs)
    leaves = []
    for path, leaf in leaves_with_paths:
        name = _leaf_name("xs", path)
        if isinstance(leaf, Tracer):
            x = _live(leaf, op)
        elif isinstance(leaf, np.ndarray | np.generic):
            x = constant(leaf)
        else:
            raise TypeError(
                f"{where(op)}: {name} is a {type(leaf).__name__}; xs must be a pytree of arrays "
                "with a leading axis to scan over"
            )
        if x.ndim == 0:
            raise ValueError(
                f"{where(op)}: {name} is a 0-d array; xs leaves need a leading axis to scan over"
            )
        leaves.append((name, x))
    if length is not None:
        if isinstance(length, bool) or not isinstance(length, int | np.integer) or length < 0:
            raise TypeError(
                f"{where(op)}: length must be a non-negative Python int, got {length!r}"
            )
        length = int(length)
    sizes = {x.shape[0] for _, x in leaves}
    if len(sizes) > 1 or (length is not None and sizes and sizes != {length}):
        listed = ", ".join(f"{name}: {x.shape[0]}" for name, x in leaves)
        given = f" and length={length}" if length is not None else ""
        raise ValueError(
            f"{where(op)}: the leading axes of xs differ ({listed}){given}; every xs leaf "
            "must have the same leading size"
        )
    if length is None:
        if not sizes:
            raise ValueError(
                f"{where(op)}: xs holds no arrays, so the trip count is unknown; pass length="
            )
        length = sizes.pop()
    return [x for _, x in leaves], x_tree, length


def _unroll(op: str, unroll, length: int) -> int:
    if isinstance(length, Dim):
        # A symbolic trip count (issue 25): one step per iteration, since a remainder of
        # `length % k` steps would be a symbolic number of steps traced after the loop.
        return 1
    if unroll is True:
        return max(length, 1)
    if unroll is False:
        return 1
    if not isinstance(unroll, int | np.integer) or unroll < 1:
        raise ValueError(f"{where(op)}: unroll must be a positive int or a bool, got {unroll!r}")
    return max(1, min(int(unroll), length))


def scan(f: Callable, init, xs=None, length=None, reverse: bool = False, unroll=1):
    """`carry, ys = scan(f, init, xs)`: `carry, y = f(carry, x)` for each leading row `x` of
    `xs`, with the `y`s stacked along a new leading axis, as one `stablehlo.while`.

    `xs` is a pytree of arrays (or None with `length=`); `reverse=True` visits the rows
    last to first and still stacks `ys[t]` beside `xs[t]`; `unroll=k` traces `k` steps per
    loop iteration (the remaining `length % k` steps run after the loop).
    """
    op = "scan"
    _start(op)
    _callables(op, f=f)
    carry, tree = _carry_leaves(op, init)
    x_leaves, x_tree, length = _scan_xs(op, xs, length)
    # A symbolic length may be 0 (issue 25): rows are read from xs, and written into
    # buffers, one row longer than the length, so that the body's one-row slices verify
    # for every length; the loop never reads or writes that row.
    spare = 1 if isinstance(length, Dim) else 0
    if spare:
        x_leaves = [_with_spare_row(xl) for xl in x_leaves]
    k = _unroll(op, unroll, length)
    n_loop = length // k * k

    def step(t: Tracer, cs: list, types: list[Carry], *, promote: bool, probe=False):
        idx = bind1("subtract", full((), length - 1, _INDEX), t) if reverse else t
        x = tree_util.tree_unflatten(x_tree, [_take_row(xl, idx) for xl in x_leaves])
        out = f(tree_util.tree_unflatten(tree, cs), x)
        if not (isinstance(out, tuple | list) and len(out) == 2):
            raise TypeError(
                f"{where(op)}: f must return a pair (carry, y), got {_type_str(out)}"
                if isinstance(out, Tracer)
                else f"{where(op)}: f must return a pair (carry, y), got a {type(out).__name__}"
            )
        try:
            new = _check_carry(op, "f", types, tree, out[0], offset=1, probe=probe)
        except _Retrace as r:
            if promote:
                raise
            c = types[r.index - 1]
            raise TypeError(
                f"{where(op)}: f returns {_aval_str((), r.dtype)} for {c.name} at a later "
                f"step than the first, whose init is {c.describe()}; f must return the same "
                "carry types at every step"
            ) from None
        y_with_paths, y_tree = tree_util.tree_flatten_with_path(out[1])
        ys = []
        for path, leaf in y_with_paths:
            leaf = _output_leaf(op, "f", _leaf_name("y", path), leaf)
            if not isinstance(leaf, Tracer):
                leaf = _weak_value(op, leaf, dtypes.result_type(type(leaf)))
            ys.append(leaf)
        return new, y_tree, ys, idx

    y_spec = []  # (y_tree, avals) found by the first traced step

    def check_ys(y_tree, ys):
        avals = [y.aval for y in ys]
        if (y_tree, avals) != tuple(y_spec):
            then = ", ".join(_aval_str(*a) for a in y_spec[1])
            now = ", ".join(_aval_str(*a) for a in avals)
            raise TypeError(
                f"{where(op)}: f returns y as {y_tree} of ({now}) at one step and "
                f"{y_spec[0]} of ({then}) at another; y must keep its structure and types"
            )

    def body(args, loop):
        i, cs = args[0], args[1 : 1 + len(carry)]
        bufs = None
        for j in range(k):
            t = i if j == 0 else bind1("add", i, full((), j, _INDEX))
            cs, y_tree, ys, idx = step(t, cs, loop.carry[1:], promote=True, probe=loop.probe)
            if bufs is None:
                y_spec[:] = [y_tree, [y.aval for y in ys]]
                bufs = [loop.add_carry((length + spare,) + y.shape, y.dtype) for y in ys]
            else:
                check_ys(y_tree, ys)
            bufs = [_put_row(b, y, idx) for b, y in zip(bufs, ys, strict=True)]
        return [bind1("add", i, full((), k, _INDEX))] + cs + bufs

    def cond(args):
        return bind1("compare", args[0], full((), n_loop, _INDEX), direction="LT")

    counter = Carry((), _INDEX, None, np.array(0, _INDEX), "i")
    outs, final = carried_while(op, [counter] + carry, cond, body)
    cs, bufs = outs[1 : 1 + len(carry)], outs[1 + len(carry) :]
    for t in range(n_loop, length) if not isinstance(length, Dim) else ():
        cs, y_tree, ys, idx = step(full((), t, _INDEX), cs, final[1:], promote=False)
        check_ys(y_tree, ys)
        bufs = [_put_row(b, y, idx) for b, y in zip(bufs, ys, strict=True)]
    if spare:
        bufs = [indexing.getitem(b, slice(None, length)) for b in bufs]
    return tree_util.tree_unflatten(tree, cs), tree_util.tree_unflatten(y_spec[0], bufs)


# --- stop_gradient ------------------------------------------------------------------------------


def stop_gradient(x):
    """`jax.lax.stop_gradient`: `x` (a pytree of arrays) unchanged, every derivative
    through it zero (an `optimization_barrier` marked `modules.STOP_GRADIENT`, which the
    transforms' rules read). Leaves that are not traced floats or complex pass as they
    are, and outside a trace `x` is returned as it is: only a traced value has derivatives."""
    if not is_tracing():
        return x

    def stop(t):
        if not isinstance(t, Tracer) or not dtypes.is_inexact(t.dtype):
            return t  # (a constant: no derivative to stop)
        op = ir.Operation.create(
            "stablehlo.optimization_barrier",
            results=[t.value.type],
            operands=[t.value],
            attributes={modules.STOP_GRADIENT: ir.UnitAttr.get()},
            loc=user_location(),
        )
        current_scope().emitted.opaque = True
        note_made(op, [t.value])
        return Tracer(op.results[0], t.shape, t.dtype, current_scope(), t.weak)

    return tree_util.tree_map(stop, x)
