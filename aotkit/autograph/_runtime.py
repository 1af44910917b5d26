"""Trace stage, autograph runtime: what converted code calls (`ag__.for_stmt`, ...).

Each operator decides, when the trace runs, whether its statement stays Python or becomes
StableHLO control flow, and keeps Python's meaning either way:

- `if`, `x if c else y`, `and`, `or`, `not`: a traced condition becomes `aotkit.cond` (or
  `logical_and`/`logical_or`/`logical_not` on traced booleans); anything else is Python.
- `while`: Python iterations while the condition is a Python value; once it is traced, the
  rest of the loop becomes one `aotkit.while_loop`.
- `for ... in range(...)` and `for row in traced_array`: traced bounds always give one
  loop; static bounds give one loop when the trip count exceeds `UNROLL_LIMIT`, the loop
  carries variables and its state holds traced arrays. A loop that cannot become one
  (state that is not arrays, side effects on Python objects, a shape that needs a static
  index, ...) is unrolled as before, with an `AutographWarning` naming its line and why.
- A traced `break` (a break under a traced condition) turns the rest of the loop into a
  `while_loop` that also stops on the flag.

Loop-carried variables and branch outputs are the variables a block assigns that are
live after it (or in the next iteration); Python numbers among them become arrays (weakly
typed, as NumPy's first iteration would type them). In-place writes (`x[i] = v`) update
the array object the name held before the block, so other names bound to it see them, as
in NumPy.
"""

from __future__ import annotations

import builtins
import contextlib
import itertools
import operator
import re
import sys
import threading
import types
import warnings
import weakref

import numpy as np
from jax import tree_util
from jaxlib.mlir import ir

from aotkit import dtypes, lax, modules
from aotkit import numpy as anp
from aotkit.symbolic.algebra import Dim
from aotkit.tracing.core import (
    IN_PLACE_CHECKS,
    Tracer,
    as_weak,
    note_range,
    traced_size_error,
    user_site,
)

# Loops of at most this many iterations (with static bounds) stay unrolled: a handful of
# copies of the body costs less than a loop and keeps every index static.
UNROLL_LIMIT = 4


class AutographWarning(UserWarning):
    """A loop or branch that autograph could not convert: it is unrolled (or taken) as
    Python runs it. The message names the statement's file:line and the reason."""


class _Undefined:
    """The value of a variable that has none yet (assigned later, or deleted)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<undefined>"


UNDEFINED = _Undefined()
NEVER = False  # a condition converted code tests so that names it mentions stay in scope


class _NotConvertible(Exception):
    """A loop or branch cannot become StableHLO control flow; the message says why."""


class _Discovered(Exception):
    """A trace found the type of a return slot (the value a loop returns): trace again."""

    def __init__(self, found: dict):
        super().__init__(found)
        self.found = found


def _is_slot(name: str) -> bool:
    # The value a `return` inside a loop hands out (see _transform.lift_returns): it has no
    # value until the loop returns, so it starts as zeros of the type the return gives.
    return name.startswith("ag__retval_")


def _zeros_like(v):
    def zero(leaf):
        if isinstance(leaf, Tracer):
            return np.zeros(leaf.shape, leaf.dtype)
        if isinstance(leaf, np.ndarray | np.generic):
            return np.zeros_like(leaf)
        return type(leaf)(0)

    return tree_util.tree_map(zero, v)


# --- state and messages ---------------------------------------------------------------------------

_local = threading.local()


class Session:
    """Per-trace state: warnings already given (each once per trace)."""

    def __init__(self):
        self.warned: set = set()

    def __enter__(self):
        self.outer = getattr(_local, "session", None)
        if self.outer is None:
            _local.session = self
        return self

    def __exit__(self, *exc):
        if self.outer is None:
            _local.session = None


def in_session() -> bool:
    """Whether a converted function is being traced on this thread."""
    return getattr(_local, "session", None) is not None


def _warn(info, message: str) -> None:
    current = getattr(_local, "session", None)
    key = (info.filename, info.lineno, message)
    if current is not None:
        if key in current.warned:
            return
        current.warned.add(key)
    warnings.warn_explicit(message, AutographWarning, info.filename, info.lineno)


def _what(info) -> str:
    return {"for": "for loop", "while": "while loop"}.get(info.kind, "if")


def _desc(x) -> str:
    if isinstance(x, Tracer):
        return f"{dtypes.short_name(x.dtype)}[{','.join(map(str, x.shape))}]"
    return type(x).__name__


def _reason(e: BaseException) -> str:
    if isinstance(e, _NotConvertible):
        return str(e)
    text = str(e).split("\n")[0]
    return f"tracing its body as one loop failed with {type(e).__name__}: {text}"


def out(names: tuple) -> tuple:
    """The values of `names` in the caller (UNDEFINED for unbound ones): what a block returns."""
    f = sys._getframe(1).f_locals
    return tuple(f.get(n, UNDEFINED) for n in names)


class _CallerNames:
    """Looks names up as the caller's code would: its locals, then globals and builtins."""

    __slots__ = ("locals", "globals")

    def __init__(self, frame):
        self.locals = frame.f_locals
        self.globals = frame.f_globals

    def get(self, name: str):
        for d in (self.locals, self.globals):
            if name in d:
                return d[name]
        return getattr(builtins, name, UNDEFINED)


def _entry(params, depth: int = 2) -> tuple[dict, _CallerNames]:
    """The caller's values of `params` (UNDEFINED when unbound), and its scope."""
    scope = _CallerNames(sys._getframe(depth))
    f = scope.locals
    return {n: f.get(n, UNDEFINED) for n in params}, scope


_ARRAYS = (Tracer, np.ndarray, np.generic, bool, int, float, complex)


def _arraylike(v) -> bool:
    """An array, a number, or a pytree (tuples, lists, dicts) of them: what cond and loops
    can carry."""
    if isinstance(v, _ARRAYS):
        return True
    if not isinstance(v, tuple | list | dict):
        return False
    try:
        leaves = tree_util.tree_leaves(v)
    except (TypeError, ValueError):  # a dict whose keys do not sort is no pytree
        return False
    return all(isinstance(leaf, _ARRAYS) for leaf in leaves)


def _uncarried(v) -> str:
    """How a message names a value that is not `_arraylike`."""
    name = f"a {type(v).__name__}"
    if isinstance(v, dict):
        try:
            sorted(v)
        except TypeError:
            return f"{name} whose keys do not sort (a pytree's keys are of one type)"
    if isinstance(v, tuple | list | dict):
        try:
            tree_util.tree_leaves(v)
        except (TypeError, ValueError):
            return f"{name} holding a dict whose keys do not sort (a pytree's keys are of one type)"
    return name


def _has_tracer(v) -> bool:
    if isinstance(v, Tracer):
        return True
    if isinstance(v, list | tuple):
        return any(isinstance(x, Tracer) for x in v)
    if isinstance(v, dict):
        return any(isinstance(x, Tracer) for x in v.values())
    return False


def _side_effects(info, vals: dict, scope: _CallerNames) -> list[str]:
    """Reasons the block would change Python objects (runs once traced, N times in Python)."""
    reasons = []
    for name in sorted(info.subscript_bases):
        v = vals[name] if name in vals else scope.get(name)
        if isinstance(v, Tracer) or v is UNDEFINED:
            continue
        if isinstance(v, np.ndarray) and name in info.writes:
            continue  # becomes a traced array carried through the block
        reasons.append(f"it assigns items of {name!r}, a {type(v).__name__}")
    for name, method in info.mutating_calls:
        v = vals[name] if name in vals else scope.get(name)
        if isinstance(v, Tracer | types.ModuleType) or v is UNDEFINED:
            continue
        reasons.append(f"it calls {name}.{method}() on a {type(v).__name__}")
    return reasons


def _is_outer_inplace_error(e: BaseException) -> bool:
    # aotkit refuses in-place writes to an array traced outside the current body (see
    # aotkit.tracing.indexing.rebind): a function called in the block wrote into an array
    # the block only reads. Carrying that array through the block fixes it.
    return isinstance(e, TypeError) and "in place: it was traced outside the body" in str(e)


def _truth(x: Tracer, what: str, site: str) -> Tracer:
    """`bool(x)` for a traced x, as a traced boolean scalar."""
    if x.size != 1:
        raise ValueError(
            f"{what} (at {site}): the truth value of a traced {_desc(x)} array with more than "
            "one element is ambiguous; use .any() or .all()"
        )
    if x.ndim:
        x = x.reshape(())
    if x.dtype != np.bool_:
        x = anp.not_equal(x, 0)
    return x


# --- for and while --------------------------------------------------------------------------------


class _Range:
    """`range(start, stop, step)` with traced bounds."""

    __slots__ = ("start", "stop", "step")

    def __init__(self, start, stop, step):
        self.start, self.stop, self.step = start, stop, step


def range_(rng, *args):
    """`range(*args)`, or a `_Range` when a bound is traced (when `range` is the builtin)."""
    if rng is not builtins.range or not any(isinstance(a, Tracer) for a in args):
        return rng(*args)
    names = ("stop",) if len(args) == 1 else ("start", "stop", "step")
    for name, a in zip(names, args, strict=False):
        if isinstance(a, Tracer):
            if a.shape != () or a.dtype.kind not in "iu":
                raise TypeError(
                    f"range (at {user_site()}): {name} is a traced {_desc(a)} array, which "
                    "cannot be interpreted as an integer; pass an integer scalar "
                    "(x.astype(int)) or a Python int"
                )
        else:
            operator.index(a)  # the TypeError range() itself gives
    if len(args) == 1:
        return _Range(0, args[0], 1)
    if len(args) == 2:
        return _Range(args[0], args[1], 1)
    if not isinstance(args[2], Tracer) and operator.index(args[2]) == 0:
        raise ValueError("range() arg 3 must not be zero")
    return _Range(*args)


def reversed_(rev, seq):
    """`reversed(seq)`; for a range (traced or not) the reversed range, so that the loop over
    it can become a StableHLO loop."""
    if rev is builtins.reversed:
        if type(seq) is range:
            return seq[::-1]
        if isinstance(seq, _Range):
            n = _trip_count(seq)
            return _Range(seq.start + (n - 1) * seq.step, seq.start - seq.step, -seq.step)
    return rev(seq)


def py_iter(iterable, info):
    """The iterable of a loop that stays Python (`info.reasons` say why)."""
    if isinstance(iterable, _Range):
        raise TypeError(
            f"for loop (at {info.site}): range() has a traced bound, so the loop must become "
            f"a StableHLO loop, but {'; '.join(info.reasons)}; restructure the loop (keep "
            "its state in arrays) or make the bound static"
        )
    n = _static_length(iterable)
    if n is not None and n > UNROLL_LIMIT:
        vals, _ = _entry(info.params)
        if isinstance(iterable, Tracer) or any(_has_tracer(v) for v in vals.values()):
            _warn(info, _unrolled_message(info, n, "; ".join(info.reasons)))
    return iterable


def _static_length(iterable):
    if type(iterable) is range:
        return len(iterable)
    if isinstance(iterable, Tracer) and iterable.ndim:
        return iterable.shape[0]
    if isinstance(iterable, _Indexed):
        return iterable.length
    return None


def py_test(test, info):
    """The condition of an `if`/`while` that stays Python (`info.reasons` say why)."""
    if isinstance(test, Tracer):
        raise TypeError(
            f"{_what(info)} (at {info.site}): the condition is a traced {_desc(test)} array, "
            f"so the {_what(info)} must become StableHLO control flow, but "
            f"{'; '.join(info.reasons)}; compute values with np.where(cond, a, b), or move "
            "the statement out of the traced branch"
        )
    return test


def _unrolled_message(info, n: int, reason: str) -> str:
    return (
        f"{_what(info)} (at {info.site}): unrolled into {n} copies of its body instead of one "
        f"StableHLO loop because {reason}; keep the loop state in arrays and numbers to get a "
        "loop, or mark the function with aotkit.autograph.do_not_convert to silence this"
    )


def _wants_loop(info, vals: dict, iterable) -> bool:
    state = [n for n in info.live if n != info.brk and n != info.target]
    if not state:
        return False
    return _iterates_tracers(iterable) or any(_has_tracer(vals[p]) for p in info.params)


def _iterates_tracers(iterable) -> bool:
    """Whether a loop's iterable holds traced arrays (`enumerate(zip(x, y))` of traced x)."""
    if isinstance(iterable, _Indexed):
        return any(_iterates_tracers(part) for part in iterable._args)
    return isinstance(iterable, Tracer)


def for_stmt(iterable, body, info):
    """A converted `for` statement; returns the new values of `info.writes`."""
    vals, scope = _entry(info.params)
    if isinstance(iterable, _Range):
        try:
            return _must_convert(info, vals, scope, body, iterable)
        except _NotConvertible as e:
            raise TypeError(
                f"for loop (at {info.site}): range() has a traced bound, so the loop must "
                f"become a StableHLO loop, but {e}"
            ) from None
    n = _static_length(iterable)
    if n is not None and n > UNROLL_LIMIT and _wants_loop(info, vals, iterable):
        reasons = _side_effects(info, vals, scope)
        if reasons:
            _warn(info, _unrolled_message(info, n, "; ".join(reasons)))
        else:
            try:
                if type(iterable) is range:
                    bounds = _Range(iterable.start, iterable.stop, iterable.step)
                    return _loop(info, vals, scope, body, bounds)
                return _loop(info, vals, scope, body, _Range(0, n, 1), rows=iterable)
            except Exception as e:
                _warn(info, _unrolled_message(info, n, _reason(e)))
    return _python_for(info, vals, scope, body, iterable)


def _must_convert(info, vals, scope, body, bounds: _Range, rows=None):
    reasons = _side_effects(info, vals, scope)
    if reasons:
        raise _NotConvertible("; ".join(reasons))
    return _loop(info, vals, scope, body, bounds, rows=rows)


def _python_for(info, vals: dict, scope, body, iterable):
    params, writes, brk = info.params, info.writes, info.brk
    done = 0
    for item in iterable:
        _note_rows(iterable, item, info.site)
        vals.update(zip(writes, body(item, *[vals[p] for p in params]), strict=True))
        done += 1
        if brk is not None:
            flag = vals[brk]
            if isinstance(flag, Tracer):
                return _traced_break(info, vals, scope, body, iterable, done)
            if flag:
                break
    return tuple(vals[w] for w in writes)


def _traced_break(info, vals, scope, body, iterable, done: int):
    """A traced condition broke out of an unrolled loop: the rest becomes a while loop."""
    if type(iterable) is range:
        bounds = _Range(iterable.start + done * iterable.step, iterable.stop, iterable.step)
        rows = None
    elif isinstance(iterable, Tracer | _Indexed):
        bounds, rows = _Range(done, _static_length(iterable), 1), iterable
    else:
        raise TypeError(
            f"for loop (at {info.site}): a traced condition breaks out of a loop over a "
            f"{type(iterable).__name__}; loop over range(...) or a traced array so the loop "
            "can become a while loop that stops on it"
        )
    try:
        return _must_convert(info, vals, scope, body, bounds, rows=rows)
    except _NotConvertible as e:
        raise TypeError(
            f"for loop (at {info.site}): a traced condition breaks out of the loop, so the "
            f"rest of the loop must become a StableHLO loop, but {e}"
        ) from None


def while_stmt(test, body, info):
    """A converted `while` statement; returns the new values of `info.writes`."""
    vals, scope = _entry(info.params)
    params, writes, brk = info.params, info.writes, info.brk
    while True:
        flag = vals[brk] if brk is not None else False
        if isinstance(flag, Tracer):
            break
        if flag:
            return tuple(vals[w] for w in writes)
        t = test(*[vals[p] for p in info.test_params])
        if isinstance(t, Tracer):
            break
        if not t:
            return tuple(vals[w] for w in writes)
        vals.update(zip(writes, body(*[vals[p] for p in params]), strict=True))
    reasons = _side_effects(info, vals, scope)
    try:
        if reasons:
            raise _NotConvertible("; ".join(reasons))
        return _loop(info, vals, scope, body, None, test=test)
    except _NotConvertible as e:
        raise TypeError(
            f"while loop (at {info.site}): the condition is traced, so the loop must become "
            f"a StableHLO while loop, but {e}"
        ) from None


def _trip_count(r: _Range):
    start, stop, step = r.start, r.stop, r.step
    if not any(isinstance(b, Tracer) for b in (start, stop, step)):
        return len(range(start, stop, step))
    if isinstance(step, Tracer):
        sign = anp.where(step > 0, 1, -1).astype(step.dtype)
        n = (stop - start + step - sign) // step
    elif step > 0:
        n = (stop - start + (step - 1)) // step
    else:
        n = (start - stop + (-step - 1)) // -step
    return anp.maximum(n, 0)


def _index(k, r: _Range):
    """The loop variable of iteration `k`, weakly typed like the Python int of `range`."""
    if isinstance(r.step, int) and r.step == 1:
        i = k if isinstance(r.start, int) and r.start == 0 else k + r.start
    else:
        i = r.start + k * r.step
    return as_weak(i) if isinstance(i, Tracer) else i


def _carried(info, vals: dict, extra, bounds, slots: dict) -> tuple[list[str], dict]:
    names = list(info.live) + [n for n in extra if n not in info.live]
    init = {}
    for n in list(names):
        v = vals[n]
        if v is UNDEFINED and _is_slot(n):
            if n not in slots:  # not known yet: a first trace finds it (see _Discovered)
                names.remove(n)
                continue
            v = slots[n]
        elif v is UNDEFINED:
            if n != info.target or bounds is None:
                raise _NotConvertible(
                    f"{n!r} is assigned in the loop and read after it (or in the next "
                    "iteration) but has no value before the loop; give it one before the loop"
                )
            v = bounds.start  # the loop variable's value if the loop runs at all
        elif not _arraylike(v):
            raise _NotConvertible(
                f"{n!r} holds {_uncarried(v)}, and a loop can only carry arrays and "
                "numbers from one iteration to the next"
            )
        init[n] = v
    return names, init


def _loop(info, vals, scope, body, bounds, *, rows=None, test=None):
    """One traced loop over `bounds` (a `_Range`), or while `test` holds when `bounds` is None."""
    _refuse_views_written(info, vals)
    extra: list[str] = []
    slots: dict = {}
    while True:
        names, init = _carried(info, vals, extra, bounds, slots)
        pending = [n for n in info.live if _is_slot(n) and n not in names]
        record: dict = {}
        run = _body_runner(info, vals, body, names, record, rows, pending)
        run = _watch_python_ints(info, init, run, bounds)
        try:
            with _traced_block(info, scope, "at every iteration"):
                results = _build_loop(info, vals, names, init, run, bounds, test)
        except _Discovered as d:
            slots.update(d.found)
            continue
        except TypeError as e:
            more = [
                p
                for p in info.params
                if p not in names and p not in extra and isinstance(vals[p], Tracer)
            ]
            if _is_outer_inplace_error(e) and more:
                extra += more
                continue
            raise
        break
    final = {}
    for n in names:
        if n not in record:  # a return slot the trace never assigned
            continue
        same, mutated = record[n]
        orig = vals[n]
        if isinstance(orig, Tracer) and same:
            if mutated:
                orig[...] = results[n]  # in place: every name bound to orig sees it
            final[n] = orig
        else:
            final[n] = results[n]
    return tuple(final.get(w, UNDEFINED) for w in info.writes)


def _body_runner(info, vals, body, names, record, rows, pending=()):
    params, writes = info.params, info.writes
    is_for = info.kind == "for"

    def run(index, carry: dict) -> dict:
        local = dict(vals)
        local.update(carry)
        before = {n: t.value for n, t in carry.items() if isinstance(t, Tracer)}
        args = [local[p] for p in params]
        if is_for:
            item = rows[index] if rows is not None else index
            _note_rows(rows, item, info.site)
            outs = body(item, *args)
        else:
            outs = body(*args)
        got = dict(zip(writes, outs, strict=True))
        found = {n: _zeros_like(got[n]) for n in pending if _arraylike(got.get(n, UNDEFINED))}
        if found:
            raise _Discovered(found)
        new = {}
        for n in names:
            arg = carry[n]
            v = got.get(n, arg)
            if v is UNDEFINED:
                raise _NotConvertible(f"{n!r} has no value at the end of the loop body")
            same = v is arg
            mutated = n in before and arg.value is not before[n]
            # A carry that began as a Python number has no other names (`k += 1` then
            # `k = k + i` only rebinds it, as Python does); an array's in-place update
            # must be the only update.
            if mutated and not same and not _is_python_number(vals[n]):
                raise _NotConvertible(
                    f"the loop body updates {n!r} in place and also assigns it a new array"
                )
            record[n] = (same, mutated)
            new[n] = v
        return new

    return run


def _is_python_number(v) -> bool:
    return type(v) in (int, float, complex, bool)


# With a trip count unknown when tracing, a Python int that grows by at most this much per
# iteration needs more than 10**14 iterations to wrap.
_SLOW_GROWTH = 1 << 16
_INT64_MAX = (1 << 63) - 1
# How many ops deep the update of a carried int is followed before it counts as unknown.
_UPDATE_DEPTH = 64


def _watch_python_ints(info, init: dict, run, bounds):
    """`run`, warning where a Python int carried through the loop could wrap.

    A converted loop carries a Python int as an int64, which wraps past 2**63 - 1 where
    Python's int grows. The warning is raised unless the body's update is provably small:
    each iteration keeps the int, sets it to a constant or the loop variable, or adds a
    constant or the loop variable to it (also under converted ifs), and the loop's trip
    count bounds the total; with an unknown trip count, it may grow by at most 2**16 per
    iteration, which wraps only after more than 10**14 iterations. A value that began as
    `np.int64`, or that the body mixes with an int64 array, wraps in NumPy too and is not
    watched, nor is the loop variable.
    """
    ints = {
        n: v
        for n, v in init.items()
        if type(v) is int and n != info.target and abs(v) <= _INT64_MAX  # else no loop
    }
    if not ints:
        return run
    trips = index_bound = None
    if bounds is not None and not any(
        isinstance(b, Tracer) for b in (bounds.start, bounds.stop, bounds.step)
    ):
        trips = _trip_count(bounds)
        index_bound = max(abs(bounds.start), abs(bounds.stop))

    mixed: set[str] = set()

    def watched(index, carry: dict) -> dict:
        # the carries' values before the body runs (`k += 1` updates the tracer in place)
        olds = {n: carry[n].value for n in ints if isinstance(carry[n], Tracer)}
        new = run(index, carry)
        at = index.value if isinstance(index, Tracer) else None
        for n, k0 in ints.items():
            if n not in olds:  # the probe trace, which runs the body on the int itself
                if isinstance(new[n], Tracer) and not new[n].weak:
                    mixed.add(n)  # `k0 + x[i]`: NumPy's value has x's dtype and wraps too
                continue
            if n in mixed:
                continue
            update = _int_update(new[n], olds[n], at, index_bound)
            if update is None:
                safe = False
            elif trips is not None:
                reset, step = update
                safe = max(abs(k0), reset) + trips * step <= _INT64_MAX
            else:
                safe = update[1] <= _SLOW_GROWTH
            if not safe:
                _warn(
                    info,
                    f"{_what(info)} (at {info.site}): {n!r} is a Python int carried through "
                    "the converted loop, which keeps it as an int64: it wraps past "
                    "2**63 - 1, where Python's int keeps growing, and this loop's update of "
                    f"{n!r} is not provably small; start it as a float ({n} = "
                    f"{float(k0)!r}) for float64's range, as np.int64({k0}) if wrapping is "
                    "what you mean, or mark the function with "
                    "aotkit.autograph.do_not_convert to keep Python's int",
                )
        return new

    return watched


def _int_update(new, old, index, index_bound) -> tuple[int, int] | None:
    """(reset, step) for one iteration's update of a carried int, from the IR that computes
    it: the value is set to at most `reset` in magnitude or grows by at most `step`; None
    when neither is a constant bound (a product, a value read from an array, ...)."""
    if type(new) is int:
        return (abs(new), 0)
    if not isinstance(new, Tracer):
        return None
    return _value_update(new.value, old, index, index_bound)


def _value_update(v, old, index, index_bound, depth=0):
    """(reset, step) of `v`: |v| <= max(reset, |old| + step)."""
    if v == old:
        return (0, 0)
    if depth > _UPDATE_DEPTH:
        return None
    bound = _magnitude(v, index, index_bound)
    if bound is not None:
        return (bound, 0)
    op = v.owner
    if not hasattr(op, "operation"):
        return None  # a block argument other than the carry
    name = op.operation.name
    operands = list(op.operation.operands)
    if name in ("stablehlo.add", "stablehlo.subtract"):
        # |x + m| <= max(reset + m, |old| + step + m) for x's (reset, step) and |m| <= m
        for x, m in (operands, operands[::-1]):
            bound = _magnitude(m, index, index_bound)
            update = None if bound is None else _value_update(x, old, index, index_bound, depth + 1)
            if update is not None:
                return (update[0] + bound, update[1] + bound)
        return None
    if name == "stablehlo.select":
        choices = operands[1:]
    elif name in ("stablehlo.if", "stablehlo.case"):
        at = list(op.operation.results).index(v)
        choices = []
        for region in op.operation.regions:
            ops = region.blocks[0].operations
            choices.append(ops[len(ops) - 1].operands[at])
    else:
        return None
    updates = [_value_update(w, old, index, index_bound, depth + 1) for w in choices]
    if None in updates:
        return None
    return (max(r for r, _ in updates), max(s for _, s in updates))


def _magnitude(v, index, index_bound) -> int | None:
    """A bound on |v| for a constant or the loop variable, else None."""
    if index is not None and v == index:
        return index_bound
    op = v.owner
    if not hasattr(op, "operation"):
        return None
    name = op.operation.name
    if name in ("stablehlo.convert", "stablehlo.broadcast_in_dim", "stablehlo.reshape"):
        return _magnitude(op.operation.operands[0], index, index_bound)
    if name == "stablehlo.constant":
        try:
            values = np.asarray(op.operation.attributes["value"])
        except Exception:  # noqa: BLE001 - an attribute NumPy cannot view: no bound
            return None
        if values.dtype.kind not in "iu" or values.size == 0:
            return None
        return max(abs(int(w)) for w in values.ravel())
    return None


def _build_loop(info, vals, names, init, run, bounds, test):
    brk = info.brk
    if test is not None:
        params = info.test_params

        def cond(carry):
            local = dict(vals)
            local.update(carry)
            t = test(*[local[p] for p in params])
            pred = _truth(t, "while loop", info.site) if isinstance(t, Tracer) else bool(t)
            if brk is not None:
                pred = anp.logical_and(pred, anp.logical_not(carry[brk]))
            return pred

        return lax.while_loop(cond, lambda carry: run(None, carry), init)
    if brk is None:
        if isinstance(bounds.step, int) and bounds.step == 1:
            return lax.fori_loop(bounds.start, bounds.stop, run, init)
        n = _trip_count(bounds)
        return lax.fori_loop(0, n, lambda k, carry: run(_index(k, bounds), carry), init)
    n = _trip_count(bounds)
    kinds = [b.dtype for b in (bounds.start, bounds.stop, bounds.step) if isinstance(b, Tracer)]
    k0 = np.zeros((), np.result_type(*kinds) if kinds else np.int64)

    def cond(state):
        k, carry = state
        return anp.logical_and(k < n, anp.logical_not(carry[brk]))

    def step(state):
        k, carry = state
        return k + 1, run(_index(k, bounds), carry)

    k, results = lax.while_loop(cond, step, (k0, init))
    if isinstance(n, int) and n > 0:
        # It runs at most n times, which its form (a break flag) does not show: reverse
        # mode stores that many carries, as `max_trip_count=n` would.
        k.value.owner.attributes[modules.TRIP_BOUND] = ir.IntegerAttr.get(
            ir.IntegerType.get_signless(64), n
        )
    return results


# --- if -------------------------------------------------------------------------------------------


def if_stmt(test, true_fn, false_fn, info):
    """A converted `if` statement: the new values of `info.writes` (or, for an `if` whose
    branches both return, the returned value)."""
    vals, scope = _entry(info.params)
    if not isinstance(test, Tracer):
        return (true_fn if test else false_fn)(*[vals[p] for p in info.params])
    pred = _truth(test, "if", info.site)
    _refuse_views_written(info, vals)
    _promote_written_numpy(info, vals)
    reasons = _side_effects(info, vals, scope)
    if reasons:
        raise TypeError(
            f"if (at {info.site}): the condition is a traced {_desc(test)} array, so both "
            f"branches are traced into one aotkit.cond, but {'; '.join(reasons)}; compute "
            "values with np.where(cond, a, b), or move the side effect out of the branch"
        )
    copied = [n for n in info.params if n in info.inplace and isinstance(vals[n], Tracer)]
    slots: dict = {}
    while True:
        try:
            return _traced_if(info, vals, scope, pred, true_fn, false_fn, copied, slots)
        except _Discovered as d:  # the false branch returns, the true one does not
            slots.update(d.found)
        except TypeError as e:
            everything = [n for n in info.params if isinstance(vals[n], Tracer)]
            if not (_is_outer_inplace_error(e) and len(everything) > len(copied)):
                raise
            copied = everything


def _refuse_views_written(info, vals) -> None:
    """A traced branch or loop body that writes through a view bound before it (`v = V[1:];
    if t > 0: v += 1`) is refused: the write would reach only a traced copy of the view
    (which a NumPy view becomes, see `_promote_written_numpy`), never the array viewed."""
    for n in info.params:
        if n in info.inplace and n in info.writes:
            view = _view_reason(vals[n]) or _numpy_view_in_use(vals[n])
            if view is not None:
                raise TypeError(
                    f"{_what(info)} (at {info.site}): it writes into {n!r}, which is {view}; "
                    "NumPy would write through it into that array, but a traced branch or "
                    "loop changes only its own value of the name; write into the array "
                    "itself inside it (out[i, 0] = v, not row = out[i]; row[0] = v), or "
                    "take a copy (.copy()) before it if that array should not change"
                )


def _promote_written_numpy(info, vals) -> None:
    """A NumPy array a traced branch or loop body writes into becomes a traced array first.

    Both branches of a traced `if` (and a loop body) are traced whatever the condition, so
    a write that stayed in the NumPy array would happen although the branch does not run
    (`if t[0] > 0: out[0] = 1.0` set `out[0]` for every `t`); as a traced array the write is
    part of the cond and happens exactly when the branch does.
    """
    shared = dict(info.shared)
    for n in info.params:
        if n in info.inplace and n in info.writes and isinstance(vals[n], np.ndarray):
            how = f"it writes into {n!r}, a NumPy array it must make traced, whose name is"
            vals[n] = _promote(vals[n], shared.get(n), f"{_what(info)} (at {info.site})", how)


def _traced_if(info, vals, scope, pred, true_fn, false_fn, copied, slots):
    returning = info.kind == "ifreturn"
    structure: dict[str, str] = {}
    first: dict = {}  # the true branch's outputs, for the return slots of the false branch
    records = []

    def branch(fn, label):
        def run():
            local = dict(vals)
            copies = {n: anp.copy(vals[n]) for n in copied}
            local.update(copies)
            outs = fn(*[local[p] for p in info.params])
            if returning:
                values, got = outs, {}
            else:
                got = dict(zip(info.writes, outs, strict=True))
                for n in info.live:
                    if _is_slot(n) and got[n] is UNDEFINED:
                        if n in slots:
                            got[n] = slots[n]
                        elif n in first:
                            got[n] = _zeros_like(first[n])
                if label == "false":
                    found = {
                        n: _zeros_like(got[n])
                        for n in info.live
                        if _is_slot(n) and structure.get(n) == "undefined" and _arraylike(got[n])
                    }
                    if found:
                        raise _Discovered(found)
                values = _branch_outputs(info, vals, got, structure, label)
                first.update(values)
            records.append(
                {n: (got.get(n) is c, c.value is not vals[n].value) for n, c in copies.items()}
            )
            return values, copies

        return run

    with _traced_block(info, scope, "only if the branch runs"):
        result, inplace = lax.cond(pred, branch(true_fn, "true"), branch(false_fn, "false"))
    final = {} if returning else dict(result)
    for n, kind in structure.items():
        if kind == "same":
            final[n] = vals[n]
    for n in copied:
        if any(r[n][1] for r in records):
            vals[n][...] = inplace[n]  # in place: every name bound to the array sees it
        if all(r[n][0] for r in records) and n in final:
            final[n] = vals[n]
    if returning:
        return result
    return tuple(final.get(w, UNDEFINED) for w in info.writes)


def _branch_outputs(info, vals, got, structure, label) -> dict:
    """The values a traced branch passes out, by name; the first branch fixes which names
    are arrays, and the second must agree."""
    values = {}
    for n in info.live:
        v, before = got[n], vals[n]
        if v is UNDEFINED:
            kind = "undefined"
        elif v is before and not _arraylike(v):
            kind = "same"
        elif _arraylike(v):
            kind = "array"
        else:
            raise TypeError(
                f"if (at {info.site}): the condition is traced, but the {label} branch assigns "
                f"{n!r} {_uncarried(v)}; a traced if can only assign arrays and numbers"
            )
        first = structure.setdefault(n, kind)
        if first != kind:
            if "undefined" in (first, kind):
                only = label if kind != "undefined" else ("true" if label == "false" else "false")
                raise TypeError(
                    f"if (at {info.site}): the condition is traced, and {n!r} is assigned in "
                    f"the {only} branch only but read after the if; assign it in both "
                    "branches (or before the if)"
                )
            raise TypeError(
                f"if (at {info.site}): the condition is traced, and {n!r} is a "
                f"{type(before).__name__} before the if but an array after one branch; a "
                "traced if can only assign arrays and numbers"
            )
        if kind == "array":
            values[n] = v
    return values


# --- expressions ----------------------------------------------------------------------------------


def if_exp(test, true_fn, false_fn):
    """`true_fn() if test else false_fn()`; a traced test gives one `aotkit.cond`."""
    if isinstance(test, Tracer):
        return lax.cond(_truth(test, "if expression", user_site()), true_fn, false_fn)
    return true_fn() if test else false_fn()


def _traced_bool(x) -> bool:
    return isinstance(x, Tracer) and x.dtype == np.bool_


def and_(first, *rest):
    """`first and rest[0]() and ...`: Python's short circuit on Python values; on a traced
    value, the remaining operands are evaluated and combined elementwise."""
    value = first
    for fn in rest:
        if isinstance(value, Tracer):
            value = _combine(value, fn(), anp.logical_and, "and")
        elif not value:
            return value
        else:
            value = fn()
    return value


def or_(first, *rest):
    """`first or rest[0]() or ...`, as `and_` for `or`."""
    value = first
    for fn in rest:
        if isinstance(value, Tracer):
            value = _combine(value, fn(), anp.logical_or, "or")
        elif value:
            return value
        else:
            value = fn()
    return value


def _combine(left: Tracer, right, logical, op: str):
    if _traced_bool(left) and (_traced_bool(right) or isinstance(right, bool | np.bool_)):
        return logical(left, right)
    if isinstance(right, bool) and left.size == 1 and left.dtype != np.bool_:
        right = np.bool_(right)
    # `a and b` is `b if a else a` (`a or b`: `a if a else b`), elementwise on a traced a.
    truth = _truth(left, op, user_site())
    if op == "and":
        return anp.where(truth, right, left)
    return anp.where(truth, left, right)


def not_(x):
    """`not x`; a traced x gives a traced boolean."""
    if isinstance(x, Tracer):
        return anp.logical_not(_truth(x, "not", user_site()))
    return not x


_COMPARE = {
    "Eq": operator.eq,
    "NotEq": operator.ne,
    "Lt": operator.lt,
    "LtE": operator.le,
    "Gt": operator.gt,
    "GtE": operator.ge,
    "Is": operator.is_,
    "IsNot": operator.is_not,
    "In": lambda a, b: a in b,
    "NotIn": lambda a, b: a not in b,
}


def compare_chain(left, *pairs):
    """`a < b < c` as Python evaluates it (each operand once, stopping at the first false
    Python result); traced results combine with `logical_and`."""
    result = None
    for op, fn in pairs:
        right = fn()
        r = _COMPARE[op](left, right)
        result = r if result is None else and_(result, lambda r=r: r)
        if not isinstance(result, Tracer) and not result:
            return result
        left = right
    return result


# --- calls ----------------------------------------------------------------------------------------

# Types whose instances are always called as they are (filled as calls meet new types):
# builtins, classes, ufuncs, NumPy's function dispatchers, ...
plain_types: set = {
    types.BuiltinFunctionType,
    types.BuiltinMethodType,
    types.MethodWrapperType,
    types.WrapperDescriptorType,
    types.MethodDescriptorType,
    type,
    np.ufunc,
}


def call(f):
    """The function to call in place of `f`: its converted version when `f` is a Python
    function from the user's own code, `max`/`min`, `int`/`float`/`bool`/`round` that take
    traced numbers, the iterables a converted loop can index (`np.ndindex`,
    `itertools.product`, `enumerate`, `zip`), `np.array` and `np.asarray` of traced data,
    else `f`."""
    if type(f) in plain_types:
        if f is builtins.max:
            return _max
        if f is builtins.min:
            return _min
        return _SCALAR_BUILTINS.get(f) or _INDEXABLE.get(f) or _FROM_DATA.get(f) or _SIZED.get(f, f)
    return _SIZED.get(f) or _converter(f)


# --- iterables a loop can index: element k of the iteration from a traced k -----------------


class _Indexed:
    """An iterable whose element k a converted loop computes from its traced index k, so
    `for idx in np.ndindex(shape)`, `for i, j in itertools.product(range(a), range(b))`,
    `for i, row in enumerate(x)` and `for a, b in zip(x, y)` become one loop over a flat
    index. Iterated by Python (an unrolled loop), it is the iterable it stands for."""

    __slots__ = ("_make", "_args", "length")

    def __init__(self, make, args: tuple, length: int | None):
        self._make, self._args, self.length = make, args, length

    def __iter__(self):
        return iter(self._make(*self._args))


def _length(part) -> int | None:
    """The static length of an iterable a converted loop can index, else None."""
    if type(part) is range:
        return len(part)
    if isinstance(part, Tracer | np.ndarray) and np.ndim(part):
        return part.shape[0]
    if isinstance(part, _Indexed):
        return part.length
    return None


def _element(part, k):
    """Element `k` (a traced index) of `part`, one of what `_length` measures."""
    if type(part) is range:
        return part.start + part.step * k
    if isinstance(part, np.ndarray):
        row = anp.asarray(part)[k]
    else:
        row = part[k]
    _note_rows(part, row, user_site())
    return row


def _digits(k, sizes: tuple[int, ...]) -> list:
    """The mixed-radix digits of the flat index `k` (the last size varies fastest)."""
    out = []
    for size in reversed(sizes):
        digit = k % size
        if isinstance(digit, Tracer):  # windows at these indices are then proven inside
            note_range(digit.value, 0, max(size - 1, 0))
        out.append(digit)
        k = k // size
    return out[::-1]


class _Product(_Indexed):
    __slots__ = ()

    def __getitem__(self, k):
        return tuple(_element(r, d) for r, d in zip(self._args, _digits(k, self._sizes())))

    def _sizes(self) -> tuple[int, ...]:
        return tuple(len(r) for r in self._args)


class _NdIndex(_Indexed):
    __slots__ = ()

    def __getitem__(self, k):
        return tuple(_digits(k, self._args))


class _Enumerate(_Indexed):
    __slots__ = ()

    def __getitem__(self, k):
        part, start = self._args
        return start + k, _element(part, k)


class _Zip(_Indexed):
    __slots__ = ()

    def __getitem__(self, k):
        return tuple(_element(part, k) for part in self._args)


def _product(*iterables, repeat=1):
    pools = iterables * repeat
    if pools and all(type(r) is range for r in pools) and repeat >= 1:
        return _Product(itertools.product, pools, _prod(len(r) for r in pools))
    return itertools.product(*iterables, repeat=repeat)


def _ndindex(*shape):
    if len(shape) == 1 and isinstance(shape[0], tuple):
        shape = shape[0]
    if all(isinstance(d, int) and d >= 0 for d in shape):
        return _NdIndex(lambda *s: np.ndindex(*s), tuple(shape), _prod(shape))
    return np.ndindex(*shape)


def _enumerate(iterable, start=0):
    n = _length(iterable)
    if n is not None and isinstance(start, int):
        return _Enumerate(lambda it, s: enumerate(it, s), (iterable, start), n)
    return enumerate(iterable, start)


def _zip(*iterables, strict=False):
    lengths = [_length(it) for it in iterables]
    if iterables and None not in lengths and (not strict or len(set(lengths)) == 1):
        return _Zip(lambda *its: zip(*its, strict=strict), iterables, min(lengths))
    return zip(*iterables, strict=strict)


def _prod(sizes) -> int:
    out = 1
    for size in sizes:
        out *= size
    return out


_INDEXABLE = {
    itertools.product: _product,
    np.ndindex: _ndindex,
    builtins.enumerate: _enumerate,
    builtins.zip: _zip,
}


def _not_installed(f):
    raise RuntimeError("aotkit.autograph._convert did not install its converter")


# The function that converts a callee (`_convert.converted`): `_convert` sits above this
# module (it builds the functions that call into it) and installs it when it is imported.
_converter = _not_installed


def install_converter(converter) -> None:
    """Makes `call` convert user functions with `converter` (done by aotkit.autograph._convert)."""
    global _converter
    _converter = converter


def _extreme(builtin, better):
    """`builtin` (max or min) that also takes traced 0-d values, with Python's meaning: the
    items are compared left to right and the first of equal ones is kept (`b > a` replaces
    `a`), so NaN behaves as Python's comparisons make it. The result has the promoted
    dtype of the items (Python's is the type of whichever item wins)."""

    def converted(*args, **kwargs):
        items = args[0] if len(args) == 1 else args
        if kwargs.get("key") is not None:
            return builtin(*args, **kwargs)
        if isinstance(items, Tracer):
            if items.ndim != 1:
                return builtin(*args, **kwargs)  # Python's own error (not iterable, ambiguous)
            items = list(items)
        elif len(args) == 1:
            items = list(items)
            args = (items,)
        if not any(isinstance(v, Tracer) for v in items):
            return builtin(*args, **kwargs)
        if not all(
            isinstance(v, Tracer) and v.shape == () or isinstance(v, int | float | np.generic)
            for v in items
        ):
            return builtin(*args, **kwargs)  # an array among them: Python's ambiguity error
        best = items[0]
        for v in items[1:]:
            best = anp.where(better(v, best), v, best)
        return best

    converted.__name__ = builtin.__name__
    return converted


_max = _extreme(builtins.max, operator.gt)
_min = _extreme(builtins.min, operator.lt)


def _scalar_builtin(builtin, convert):
    """`builtin` (int, float, bool, round) that also takes a traced 0-d value, as it takes
    the NumPy scalar that value is when NumPy runs the code: the result is the traced form of
    the Python number it returns, weakly typed as Python numbers are (`int(t)` of a float
    rounds toward zero, `round(t)` half to even; both int64, as NumPy makes a Python int)."""

    def converted(*args, **kwargs):
        if len(args) != 1 or kwargs or not isinstance(args[0], Tracer) or args[0].ndim != 0:
            return builtin(*args, **kwargs)
        x = args[0]
        if dtypes.is_complex(x.dtype) and builtin is not bool:
            return builtin(*args, **kwargs)  # Python's own TypeError, as for a NumPy complex
        return as_weak(convert(x))

    converted.__name__ = builtin.__name__
    return converted


_INT64 = np.dtype(np.int64)
_SCALAR_BUILTINS = {
    builtins.int: _scalar_builtin(
        builtins.int,
        lambda x: (anp.trunc(x) if dtypes.is_inexact(x.dtype) else x).astype(_INT64),
    ),
    builtins.float: _scalar_builtin(builtins.float, lambda x: x.astype(np.float64)),
    builtins.bool: _scalar_builtin(builtins.bool, lambda x: x != 0),
    builtins.round: _scalar_builtin(builtins.round, lambda x: anp.rint(x).astype(_INT64)),
}


# --- arrays from data ----------------------------------------------------------------------------


def _from_data(f, ours):
    """`f` (`np.array`, `np.asarray`), or `ours` (aotkit.numpy's) when the data holds a
    traced value: `np.array([x[0], 2 * x[1]])`, which NumPy cannot make ("np.asarray() of a
    traced array"), is the traced array of those values."""

    def made(obj, *args, **kwargs):
        if isinstance(obj, Tracer) or (
            isinstance(obj, list | tuple)
            and any(isinstance(leaf, Tracer) for leaf in tree_util.tree_leaves(obj))
        ):
            return ours(obj, *args, **kwargs)
        return f(obj, *args, **kwargs)

    return made


_FROM_DATA = {
    np.array: _from_data(np.array, anp.array),
    np.asarray: _from_data(np.asarray, anp.asarray),
    np.asanyarray: _from_data(np.asanyarray, anp.asarray),
    np.ascontiguousarray: _from_data(np.ascontiguousarray, anp.asarray),
}


# --- NumPy functions whose arguments are sizes ------------------------------------------------


def _sized(f, params: tuple[str | None, ...], what: str | None = None):
    """`f` (`np.zeros`, `np.arange`, ...), refusing a traced value among its size parameters
    (the names in `params`, by position or keyword; None for a parameter that is no size)
    with aotkit's message, naming the parameter or `what`. NumPy's own, for `np.zeros(n)`
    with a traced n, was "expected a sequence of integers or a single integer, got
    'Tracer<i32[], weak>'"."""

    def checked(*args, **kwargs):
        given = [(p, v) for p, v in zip(params, args) if p is not None]
        given += [(k, v) for k, v in kwargs.items() if k in params]
        symbolic = False
        for param, value in given:
            sizes = value if isinstance(value, list | tuple) else (value,)
            if any(isinstance(d, Tracer) for d in sizes):
                said = param if isinstance(value, Tracer) else f"a size in {param}"
                raise traced_size_error(f"np.{f.__name__}", what or said)
            symbolic = symbolic or any(isinstance(d, Dim) for d in sizes)
        if symbolic and hasattr(anp, f.__name__):
            # `np.zeros(x.shape[0])` of a symbolic x: NumPy cannot make it, aotkit.numpy can.
            return getattr(anp, f.__name__)(*args, **kwargs)
        return f(*args, **kwargs)

    return checked


_LIKE = (None, None, None, None, "shape")  # prototype, dtype, order, subok, shape
_SIZED = {
    f: _sized(f, params, what)
    for f, params, what in [
        (np.zeros, ("shape",), None),
        (np.ones, ("shape",), None),
        (np.empty, ("shape",), None),
        (np.full, ("shape",), None),
        (np.zeros_like, _LIKE, None),
        (np.ones_like, _LIKE, None),
        (np.empty_like, _LIKE, None),
        (np.full_like, (None, *_LIKE), None),
        (np.eye, ("N", "M"), None),
        (np.identity, ("n",), None),
        (np.tri, ("N", "M"), None),
        (np.arange, ("start", "stop", "step"), "a bound (start, stop or step)"),
        (np.linspace, (None, None, "num"), None),
        (np.logspace, (None, None, "num"), None),
        (np.geomspace, (None, None, "num"), None),
    ]
}


# --- item assignments (see _transform._ItemAssignments) -------------------------------------------


# --- views: names bound to part of another array ----------------------------------------------
# NumPy writes through a view into its array; a traced array has no views (`x[:2]` is a new
# value), so a write through a name bound to a view is refused (`writable`) rather than
# lost. The views are noted by object, per thread, as the converted code binds them.

_views = threading.local()
slice_ = builtins.slice  # the transform's `a:b` as a value, whatever the user named `slice`


def _view_table() -> dict:
    try:
        return _views.table
    except AttributeError:
        _views.table = {}
        return _views.table


def _note_view(value, why: str | None) -> None:
    table, key = _view_table(), id(value)

    def forget(ref, table=table, key=key):
        # The view is gone; the key may already name a newer object's entry.
        if table.get(key, (None,))[0] is ref:
            del table[key]

    table[key] = (weakref.ref(value, forget), why)


def _view_reason(target) -> str | None:
    entry = _view_table().get(id(target))
    return entry[1] if entry is not None and entry[0]() is target else None


def _held_view(owner) -> bool:
    """Whether `owner`, an expression's value, is a view of an array held (a basic index,
    a view method or attribute of it is then one too): a noted view, or a traced array that
    a full basic index gave back as itself (`V[0:n]`, `V[...]`), as NumPy's `V[0:n]` is a
    view of V."""
    entry = _view_table().get(id(owner))
    return entry is not None and entry[0]() is owner


def _is_array(x) -> bool:
    return isinstance(x, Tracer | np.ndarray) and x.ndim >= 1


def _basic(index) -> bool:
    """Whether `x[index]` is NumPy's basic indexing (a view), not advanced (a copy)."""
    items = index if isinstance(index, tuple) else (index,)
    return all(
        i is None
        or i is Ellipsis
        or isinstance(i, builtins.slice)
        or (isinstance(i, int | np.integer) and not isinstance(i, bool | np.bool_))
        or (isinstance(i, Tracer | np.ndarray) and i.ndim == 0 and i.dtype.kind in "iu")
        for i in items
    )


def _shares(value, base) -> bool:
    """Whether `value`, made from `base`, is a view of it (or, for a container `base`, one
    of the NumPy arrays it holds) that NumPy would write through."""
    if not _is_array(value) or value is base:
        return False
    if isinstance(value, np.ndarray):
        if isinstance(base, np.ndarray):
            return np.may_share_memory(value, base)
        return isinstance(base, list | tuple | dict)
    return isinstance(base, Tracer)


def part(base, index, text: str | None, chained: bool = False):
    """`base[index]`, noted as a view of `base` where NumPy would make one. `chained`:
    `base` is no name but an expression (`x.reshape(2, 3)[0]`), whose part is noted only
    when `base` is itself a view (a part of a new array is no view of anything held)."""
    value = base[index]
    if value is base and _basic(index) and isinstance(base, Tracer):
        # A traced array's full basic index is the array itself, where NumPy's is a view of
        # it: what an expression makes of it (`V[0:n][::-1]`) is a view of `base` too. The
        # entry has no reason, so writes to `base` itself stay allowed.
        if not _held_view(base):
            _note_view(base, None)
        return value
    if _basic(index) and (not chained or _held_view(base)) and _shares(value, base):
        if isinstance(base, list | tuple | dict):
            said = f"`{text}` " if text is not None else ""
            why = f"an array a {type(base).__name__} holds (taken by {said}at {user_site()})"
        else:
            why = _bound_by(text)
        _note_view(value, why)
    return value


def attribute_view(owner, attr: str, text: str | None):
    """`owner.T` (`.mT`, `.real`, `.imag`) for an expression `owner`, noted as a view when
    `owner` is one."""
    value = getattr(owner, attr)
    if _held_view(owner) and _shares(value, owner):
        _note_view(value, _bound_by(text))
    return value


def method_view(owner, name: str, text: str | None):
    """`owner.name` (`reshape`, `ravel`, ...) for an expression `owner`, as a callable whose
    result is noted as a view when `owner` is one."""
    method = call(getattr(owner, name))
    if not _held_view(owner):
        return method

    def noted(*args, **kwargs):
        value = method(*args, **kwargs)
        if _shares(value, owner):
            _note_view(value, _bound_by(text))
        return value

    return noted


def view_of(value, text: str | None, *bases):
    """`value` (`base.T`, `base.reshape(...)`, `np.ravel(base)`, ...), noted as a view of
    whichever of `bases` is an array, where NumPy would make one."""
    if any(isinstance(b, Tracer | np.ndarray) and _shares(value, b) for b in bases):
        _note_view(value, _bound_by(text))
    return value


def views_of(values, text: str | None, *bases):
    """`values` (`np.split(base, ...)` and its kin: a list of views of `base`), each noted
    as a view where NumPy would make one."""
    if isinstance(values, list | tuple):
        for value in values:
            view_of(value, text, *bases)
    return values


def _numpy_view_in_use(value) -> str | None:
    """The reason a NumPy array is a view whose array something else holds (a view the
    converter did not see made: a helper it does not convert), else None. The count is the
    view's own reference and getrefcount's argument alone when nothing else holds it."""
    if isinstance(value, np.ndarray) and value.base is not None:
        if sys.getrefcount(value.base) > 2:
            return "a view of a NumPy array that is still in use"
    return None


@contextlib.contextmanager
def _traced_block(info, scope: _CallerNames, what: str):
    """While a traced branch or loop body runs: a NumPy array it writes into is written
    when the function is traced, whether or not the branch or iteration runs (`what`: how
    often NumPy would write, for the message). The NumPy arrays the function's names hold
    (its locals, the variables it closes over, its module's globals, and the lists, tuples
    and dicts they hold, up to `_WALK_LIMIT` items) are read-only meanwhile, so a write into
    one through a view, an in-place method (`v.fill(0)`, `v.sort()`), `out=` or a helper
    (`operator.setitem(BUF[0], 0, v)`) fails where it is made, and is refused with that
    line."""
    held = [v for k, v in scope.globals.items() if k != "__builtins__"]
    frozen = [
        a for a in _numpy_leaves([*scope.locals.values(), *held], _WALK_LIMIT) if a.flags.writeable
    ]
    for a in frozen:
        a.flags.writeable = False
    _views.depth = getattr(_views, "depth", 0) + 1
    try:
        yield
    except ValueError as e:
        if not frozen or not _READ_ONLY.search(str(e)):
            raise
        kind, body = _KINDS[info.kind]
        raise TypeError(
            f"{kind} (at {info.site}): {_where_written(e, info)} writes into a NumPy array "
            f"made before the {kind}, or a view of one (NumPy: {str(e).splitlines()[0]}); "
            f"NumPy would write it {what}, but aotkit traces the {body} once; make the array "
            "from a traced value where it is made (np.zeros_like(x), or "
            "aotkit.numpy.zeros(shape)) and assign into it by name, or return the new values"
        ) from None
    finally:
        _views.depth -= 1
        _writeable_again(frozen)


# What NumPy says of a write into a read-only array (an assignment, an in-place method, out=).
_READ_ONLY = re.compile(r"read-only")
_KINDS = {
    "if": ("if", "branch"),
    "ifreturn": ("if", "branch"),
    "for": ("for loop", "loop body"),
    "while": ("while loop", "loop body"),
}


# How many values `_traced_block` looks at for NumPy arrays to make read-only: a module whose
# globals hold larger containers has the arrays past it left writeable (a write into one
# from a traced block is then not refused).
_WALK_LIMIT = 100_000


def _numpy_leaves(value, limit: int) -> list:
    """The NumPy arrays `value` is or holds in lists, tuples and dicts (walked here, not by
    tree_util, which refuses a dict whose keys do not sort; a container met twice, such as
    one that holds itself, is walked once), among the first `limit` values met."""
    out, stack, seen, left = [], [value], set(), limit
    while stack and left > 0:
        v = stack.pop()
        left -= 1
        if isinstance(v, np.ndarray):
            out.append(v)
        elif isinstance(v, list | tuple | dict) and id(v) not in seen:
            seen.add(id(v))  # `value` holds every container met, so no id is reused
            stack.extend(v.values() if isinstance(v, dict) else v)
    return out


def _where_written(e: BaseException, info) -> str:
    """`the line at FILE:N` for the innermost frame of the exception's traceback in the
    converted function's file, else `it`."""
    line = None
    tb = e.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == info.filename:
            line = tb.tb_lineno
        tb = tb.tb_next
    return "it" if line is None else f"the line at {info.filename}:{line}"


def _writeable_again(arrays: list) -> None:
    """Makes `arrays` writeable again: a view only once its base is (bases first, in as
    many rounds as views of views need)."""
    left = arrays
    while left:
        failed = []
        for a in left:
            try:
                a.flags.writeable = True
            except ValueError:
                failed.append(a)
        if len(failed) == len(left):
            raise AssertionError("arrays that cannot be made writeable again")
        left = failed


def _bound_by(text: str | None) -> str:
    said = f"`{text}` " if text is not None else ""
    return f"a view of another array (bound by {said}at {user_site()})"


def _note_rows(iterable, item, site: str) -> None:
    """Notes `item`, a row of the array a loop runs over, as a view of it."""
    if isinstance(iterable, Tracer | np.ndarray) and iterable.ndim >= 2:
        _note_view(item, f"a row of the array the loop at {site} runs over, a view of it")


_NO_ITEM = object()


def _item_view(container, item, value) -> str | None:
    """Why `container[item] op= value` (`rows[0] += v`, rows a list) would lose its write:
    NumPy changes the item's array in place, and the item is a view of another array, which
    a traced item (or a NumPy item given a traced value) would not change."""
    if not isinstance(container, list | dict):
        return None
    try:
        element = container[item]
    except Exception:
        return None  # the statement itself raises Python's error
    if isinstance(element, Tracer):
        return _view_reason(element)
    if isinstance(element, np.ndarray) and _holds_tracer(value):
        return _view_reason(element) or _numpy_view_in_use(element)
    return None


# --- out-parameters: NumPy arrays a callee may write traced values into ------------------------
# `buf = np.zeros(n); fill(buf, u)` where fill writes `dst[:] = 3 * u`: the call runs inside
# `passing`, whose frame lists the NumPy arrays passed by names the caller rebinds afterwards
# (`current`). A traced write into such an array in the callee makes the traced array once
# (`_promote`), recorded in the frame, and the caller's name is rebound to it: every later
# write mutates that traced array in place, as NumPy's would the one array.

_PARAMETER = "a parameter: the caller's binding holds the same array"


def _frames() -> list[dict]:
    try:
        return _views.frames
    except AttributeError:
        _views.frames = []
        return _views.frames


@contextlib.contextmanager
def passing(values: tuple, reasons: tuple):
    """Around a call passing local names: the NumPy arrays among `values` that the callee
    may turn traced. A name another binding shares (`reasons`) is left out, unless it is the
    caller's own parameter that its caller passed the same way (a chain of helpers); one
    array passed twice is left out (the callee's two names could not both follow it)."""
    frames = _frames()
    outer = frames[-1] if frames else {}
    ids = [id(v) for v in values if isinstance(v, np.ndarray)]
    frame = {}
    for v, why in zip(values, reasons, strict=True):
        if (
            isinstance(v, np.ndarray)
            and ids.count(id(v)) == 1
            and (why is None or (why == _PARAMETER and id(v) in outer))
        ):
            frame[id(v)] = [v, None]  # the array (keeps its id), and its traced array
    frames.append(frame)
    try:
        yield
    finally:
        frames.pop()


def current(values: tuple) -> tuple:
    """The values of the names a call passed (see `passing`): each NumPy array the callee
    turned traced is that traced array, recorded for the caller's own caller as well."""
    frames = _frames()
    frame = frames[-1] if frames else {}
    out = []
    for v in values:
        entry = frame.get(id(v)) if isinstance(v, np.ndarray) else None
        if entry is not None and entry[0] is v and entry[1] is not None:
            if len(frames) > 1 and id(v) in frames[-2]:
                frames[-2][id(v)][1] = entry[1]
            v = entry[1]
        out.append(v)
    return tuple(out)


_TRACED_WRITE = "a traced value is written into a NumPy array whose name is"


def _promote(target: np.ndarray, shared: str | None, at: str, how: str = _TRACED_WRITE):
    """`target`, a NumPy array about to receive a traced value (or a write in a traced
    branch or loop), as a traced array: refused when another binding holds it (`shared`),
    unless it is an out-parameter the caller will rebind (see `passing`). `at` is the
    error's `<where>`, `how` what happens to the array, up to its name's reason."""
    frames = _frames()
    entry = frames[-1].get(id(target)) if frames and shared == _PARAMETER else None
    if entry is not None and entry[0] is target:
        if entry[1] is None:
            entry[1] = anp.array(target)
        return entry[1]
    if shared is not None:
        raise TypeError(
            f"{at}: {how} {shared}; NumPy would change the array every binding sees, but a "
            "NumPy array cannot hold a traced value, so the other binding would not see the "
            "write; create the array from a traced value where it is made (np.zeros_like(x), "
            "or aotkit.numpy.zeros(shape)), or return the array and use the result"
        )
    return anp.array(target)


def writable(
    target,
    value,
    shared: str | None = None,
    what: str = "item assignment",
    item=_NO_ITEM,
    *,
    index=None,
):
    """`target` as a traced array when it is a NumPy array about to receive a traced value
    (NumPy cannot hold one) by `what` (`x[i] = v`, `x += v`, `np.put(x, ...)`), or a value
    at a traced index (`item` of `x[item] op= v`, `index` of `x[index] = v`); else `target`
    itself.

    `shared` says why another binding may hold the same NumPy array (a parameter, an alias):
    that binding would keep the NumPy array without the write, where NumPy changes the one
    array both see, so such a write is refused rather than computed differently. So is a
    write through a view (`row = out[i]`, a loop's rows): NumPy's changes the array viewed,
    which a traced array, or a NumPy array given a traced value, would not see.
    """
    if item is not _NO_ITEM:
        view = _item_view(target, item, value)
        if view is not None:
            raise TypeError(_through_view(what, f"an item that is {view}"))
    view = _view_reason(target)
    if view is not None and (
        isinstance(target, Tracer)
        or (
            isinstance(target, np.ndarray) and (_holds_tracer(value) or getattr(_views, "depth", 0))
        )
    ):
        raise TypeError(_through_view(what, view))
    # (a traced index, `out[i] = 1.0`, NumPy cannot take either)
    traced = _holds_tracer(value) or _holds_tracer(index) or _holds_tracer(item)
    if isinstance(target, np.ndarray) and traced:
        view = _numpy_view_in_use(target)
        if view is not None:
            raise TypeError(_through_view(what, view))
        return _promote(target, shared, f"{what} (at {user_site()})")
    return target


def _through_view(what: str, view: str) -> str:
    return (
        f"{what} (at {user_site()}): the array written is {view}; NumPy would write "
        "through it into that array, but here the write would change only the view's own "
        "value; write into the array itself (out[i, 0] = v, not row = out[i]; row[0] = v; "
        "x[0] = np.sort(x[0]), not x[0].sort()), or take a copy (.copy()) if that array "
        "should not change"
    )


def _refuse_write_through_view(op: str, x: Tracer) -> None:
    """An in-place write (`x[0].sort()`, `x.T[0] = v`, `np.add(a, b, out=x[0])`,
    `x[1].fill(v)`) into a tracer the converted code noted as a view: NumPy's would change
    the array viewed, which the tracer's new value would not reach (see `core.repoint`)."""
    view = _view_reason(x)
    if view is not None:
        raise TypeError(
            _through_view("item assignment" if op == "setitem" else f"in-place {op}", view)
        )


IN_PLACE_CHECKS.append(_refuse_write_through_view)


_AUGMENTED = {
    "Add": operator.iadd,
    "Sub": operator.isub,
    "Mult": operator.imul,
    "Div": operator.itruediv,
    "FloorDiv": operator.ifloordiv,
    "Mod": operator.imod,
    "Pow": operator.ipow,
    "MatMult": operator.imatmul,
    "BitAnd": operator.iand,
    "BitOr": operator.ior,
    "BitXor": operator.ixor,
    "LShift": operator.ilshift,
    "RShift": operator.irshift,
}


def setitem(held, outer, index, value, op: str | None, text: str | None) -> None:
    """`target[index] = value` (`op`: `target[index] op= value`, as Python runs it) for a
    target that is no local name of the converted function: `held[outer]` (a list's
    element, `x[i]` of `x[i][j] = v`) when `text` names it, else `held` itself (an
    attribute, a variable of an enclosing function). A NumPy array there cannot become
    traced (what holds it would keep the NumPy array), so a traced value written into it
    is refused at the line, where NumPy's own `__setitem__` would fail with an unclear
    error; so is any write into a part of an array (`x[i]` is a view of x in NumPy, which
    the write changes, where a traced array's part is a value of its own)."""
    target = held if text is None else held[outer]
    if op is not None:
        view = _item_view(target, index, value)
        if view is not None:
            raise TypeError(_through_view("augmented assignment", f"an item that is {view}"))
        value = _AUGMENTED[op](target[index], value)
    # Inside a traced branch or loop, a NumPy array is written when the function is traced,
    # whether or not the branch runs, and once however many times the loop does.
    traced_block = getattr(_views, "depth", 0) > 0
    numpy_written = isinstance(target, np.ndarray) and (traced_block or _holds_tracer(value))
    if text is None and numpy_written:
        view = _view_reason(target)  # `V.T[0] = v`, `V.reshape(-1)[k] = v`
        if view is not None:
            raise TypeError(_through_view("item assignment", view))
    if (
        text is not None
        and isinstance(held, Tracer | np.ndarray)
        and _is_array(target)
        and _basic(outer)
        and (isinstance(target, Tracer) or numpy_written)
    ):
        raise TypeError(
            f"item assignment (at {user_site()}): the array written is `{text}`, a view of "
            "another array; NumPy would write through it into that array, but here the write "
            "would reach only the view; index the array once (x[i, j] = v, not x[i][j] = v)"
        )
    if isinstance(target, np.ndarray) and _holds_tracer(value):
        raise TypeError(
            f"item assignment (at {user_site()}): a traced value is written into a NumPy "
            "array the function reaches through something other than a local name (an "
            "element of a list or dict, an attribute, or a variable of an enclosing "
            "function), which keeps the NumPy array; a NumPy array cannot hold a traced "
            "value: create the array from a traced value where it is made "
            "(np.zeros_like(x), or aotkit.numpy.zeros(shape)), or keep it in a local name "
            "and return it"
        )
    if numpy_written:
        raise TypeError(
            f"item assignment (at {user_site()}): a traced branch or loop writes into a NumPy "
            "array the function reaches through something other than a local name (an "
            "element of a list or dict, an attribute, or a variable of an enclosing "
            "function); that write would happen once, when the function is traced, whether "
            "or not the branch runs and however many times the loop does: keep the array in "
            "a local name and return it, or move the write out of the branch or loop"
        )
    target[index] = value


def _holds_tracer(value) -> bool:
    if isinstance(value, Tracer):
        return True
    if isinstance(value, list | tuple):
        return any(_holds_tracer(v) for v in value)
    return False
