"""Trace stage, core: tracers, the op registry and the one `bind` point.

A `Tracer` is an abstract array (shape, dtype) bound to an `ir.Value`. Every operation
goes through `bind(op, *tracers, **params)`: the op's shape rule runs in Python, then its
lowering rule emits StableHLO into the current block at once (no intermediate graph), with
the user's `file:line` as the op's location. Op families register their rules beside the
ops (`elementwise.py`, `shape.py`, ...).
"""

from __future__ import annotations

import contextlib
import linecache
import math
import os
import sys
import threading
from collections.abc import Callable
from typing import NamedTuple

import numpy as np
from jaxlib.mlir import ir
from jaxlib.mlir.dialects import stablehlo

from aotkit import _context, _native, config, dtypes
from aotkit.passes import python_passes
from aotkit.symbolic import algebra

Aval = tuple  # (shape: tuple[int, ...], dtype: np.dtype), kept a plain tuple for speed


# --- Where the user is --------------------------------------------------------------------

_AOTKIT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_NUMPY_DIR = os.path.dirname(os.path.abspath(np.__file__)) + os.sep
_SKIP_PREFIXES = (_AOTKIT_DIR, _NUMPY_DIR)
_INTERNAL_FILES = ("<__array_function__ internals>",)


_internal_files: dict[str, bool] = {}


def _is_internal(name: str) -> bool:
    """Whether frames of file `name` are aotkit's or NumPy's own, remembered per name (the
    walks below look a name up first and call this only the first time they meet it)."""
    skip = _internal_files[name] = name.startswith(_SKIP_PREFIXES) or name in _INTERNAL_FILES
    return skip


def _user_frame():
    # Walking frames is on the hot path of every op: remember per file name (a string whose
    # hash Python caches) whether it is aotkit's or NumPy's own. Code objects would be
    # slower keys: their hash is recomputed on every lookup.
    f = sys._getframe(2)
    internal = _internal_files
    while f is not None:
        name = f.f_code.co_filename
        skip = internal.get(name)
        if skip is None:
            skip = _is_internal(name)
        if not skip:
            return f
        f = f.f_back
    return None


def user_site() -> str:
    """`file.py:12` of the innermost user frame, for error messages."""
    f = _user_frame()
    return f"{f.f_code.co_filename}:{f.f_lineno}" if f is not None else "<unknown>"


def user_location() -> ir.Location:
    """The location of the innermost user frame (`file.py:12`), cached per lowering context.

    Called for every op: the walk of `_user_frame` is repeated inline here, since a
    function call costs as much as a step of it. It starts above the caller, which is
    always aotkit's. Inside `at_location(loc)`, it is `loc`.
    """
    lc = _context.active()
    if lc.location is not None:
        return lc.location
    f = sys._getframe(2)
    internal = _internal_files
    while f is not None:
        name = f.f_code.co_filename
        skip = internal.get(name)
        if skip is None:
            skip = _is_internal(name)
        if not skip:
            loc = lc.locations.get((id(f.f_code), f.f_lasti))
            return loc if loc is not None else _new_location(lc, f)
        f = f.f_back
    return ir.Location.unknown()


def _new_location(lc: _context.LoweringContext, f) -> ir.Location:
    """The location of frame `f`'s current line, cached in `lc` by (id of its code object,
    instruction offset): reading `f_lineno` decodes the code's line table every time (0.1 to
    0.4 us, more deep in a long function), `f_lasti` does not. The code object is kept
    alive with the cache, so its id names no other while the cache holds it."""
    code = f.f_code
    lc.location_codes[id(code)] = code
    loc = lc.locations[id(code), f.f_lasti] = ir.Location.file(code.co_filename, f.f_lineno, 0)
    return loc


@contextlib.contextmanager
def at_location(loc: ir.Location | None):
    """Every op built inside gets `loc` (None: the user's line, as usual): a transform that
    rebuilds a module's ops gives them the location of the op each came from."""
    lc = _context.active()
    saved = lc.location
    lc.location = loc
    try:
        yield
    finally:
        lc.location = saved


def where(op: str) -> str:
    """The `<where>` prefix of an error: the op name and the user's line."""
    return f"{op} (at {user_site()})"


def traced_size_error(op: str, what: str) -> TypeError:
    """The refusal of a traced value where a size is needed (`np.zeros(n)`, `x.reshape(n,
    -1)`, `np.repeat(x, n)`): every such refusal reads the same, with the user's line and
    the two ways out."""
    return TypeError(
        f"{where(op)}: {what} is traced, but it sets the shape of the result, and shapes are "
        "fixed when the function is traced; make it static (aotkit.jit(f, "
        "static_argnames=...), or compute it from static sizes such as x.shape[0]), or give "
        "the array it comes from a symbolic dimension (aotkit.spec('f32[n]')) and use that "
        "array's size"
    )


# --- Tracing scopes -------------------------------------------------------------------------


class Emitted:
    """What the trace of one module emitted that its pass pipeline may skip work for.

    `bind` vouches for each op it creates itself (`register_direct`) and `_constant_op` for
    each constant: `used` has a byte for each (see below), `constants` holds the
    constants' values (with the scalar of a splat made by `full`, None for the others), and
    `simplify` is set when one of them may give `aotkit-simplify` work. Any other way an op
    is made (a lowering rule, a control-flow body) makes the module `opaque`.

    `simplify` is kept for every op, vouched or not: the ops a transform copies or builds
    are tested by `note_made`, a lowering rule's ops are safe when it is registered
    `simplify_free`, and any other maker sets `unchecked` (aotkit-simplify then runs).

    For MLIR's `canonicalize` and `cse`, which have nothing to do on most traced modules
    (StableHLO's ops have no folders or patterns in jaxlib), it also records which of the
    module's arguments and vouched ops' results some vouched op uses (`used`: an op none
    uses is dead, which both erase), whether a constant came after another op
    (`late_constant`: canonicalize moves constants to the top, and merges equal ones:
    `equal_constants`, seen by `keys`), and whether an op equals an earlier one
    (`duplicates`, which cse merges).

    `used` has one byte per argument and vouched result, in the order they were made: a
    tracer of such a value carries its index (`Tracer.seq`), and every tracer of one value
    carries the same (`same_value` makes such tracers; an in-place update copies it too). A
    tracer without one (a rule's result, a transform's) marks nothing; using one in this
    module sets `duplicates`, since it may stand for a value used before.
    """

    __slots__ = (
        "chlo",
        "arguments",
        "constants",
        "simplify",
        "unchecked",
        "opaque",
        "scratch",
        "symbolic",
        "used",
        "keys",
        "duplicates",
        "late_constant",
        "equal_constants",
        "first_op",
    )

    def __init__(self):
        self.chlo = False  # a CHLO op (`chlo-legalize-to-stablehlo` has work to do)
        self.arguments = 0  # how many of `used` are the module's arguments
        self.constants: dict[ir.Value, object] = {}
        self.simplify = False
        self.unchecked = False
        self.opaque = False
        # The symbolic dimensions of a trace whose arguments have some (issue 25): a
        # `tracing.symbolic.SymbolicTrace`, None for static traces.
        self.symbolic = None
        self.used = bytearray()  # by `Tracer.seq`: whether a vouched op uses that value
        self.keys: set[int] = set()  # hashes of the constants (see `_constant_op`)
        self.duplicates = False
        self.late_constant = False
        self.equal_constants = False
        # The module block's first op that is not a constant: constants made later go
        # before it, where canonicalize would move them (see `_constant_op`).
        self.first_op: ir.Operation | None = None
        # Detached ops whose regions hold functions traced for a transform
        # (aotkit.transforms.functions), in the order they were made: a reverse-mode
        # cotangent function may read them until the trace ends, when `erase_scratch` drops
        # them, last first (a later one may use an earlier one's values, never the reverse).
        self.scratch: list[ir.Operation] = []

    def erase_scratch(self) -> None:
        while self.scratch:
            self.scratch.pop().erase()

    def vouched(self, block: ir.Block) -> bool:
        """Whether every op of `block` (the module's one block, and its return) was vouched
        for."""
        return not self.opaque and len(block.operations) == self.vouched_ops() + 1

    def vouched_ops(self) -> int:
        """How many ops `bind` and `_constant_op` vouched for (exact while the module is not
        opaque, the only time it is asked)."""
        return len(self.used) - self.arguments

    def no_dead_op(
        self, arguments: list[Tracer], returned: list[Tracer], scope: TraceScope
    ) -> bool:
        """Whether every op of the module's block (all vouched, see `vouched`) has its result
        used or `returned`: an op nothing uses is erased by `canonicalize` and by `cse`.
        `arguments` (which may go unused) and `returned` are tracers of the module's
        `scope`; call it once the trace is over."""
        used = self.used
        for t in (*arguments, *returned):
            if t._scope is scope and t.seq is not None:
                used[t.seq] = 1
        # A use by a tracer without `seq` marked nothing: its op then counts as dead, which
        # only makes the answer more cautious.
        return 0 not in used

    def forget_values(self) -> None:
        """Drops the values recorded (a tracer kept by the user must not keep them alive)."""
        self.constants.clear()
        self.used.clear()
        self.keys.clear()
        self.first_op = None


class TraceScope:
    """A region being traced into. Tracers made in a closed scope may not be used again."""

    __slots__ = ("open", "name", "constants", "written", "emitted", "ranges")

    def __init__(self, name: str, emitted: Emitted):
        self.open = True
        self.name = name
        self.emitted = emitted  # shared by every scope of one module
        # Integer scalars known to lie in [lo, hi] (the index of a loop over known bounds),
        # by value: a window that moves with the index is proven inside its array with them.
        self.ranges: dict[ir.Value, tuple[int, int]] = {}
        # Tracers written in place here (`x[i] = v`, `x += v`), by id: where the first
        # write was, for the warning about arguments written but not returned.
        self.written: dict[int, str] = {}
        # Scalar splats already emitted in this scope, by (block, dtype, shape, value): a
        # program multiplies by 2.0 many times, and one constant op serves every use in
        # its block. The cache dies with the scope, so it never outlives its blocks.
        self.constants: dict[tuple, tuple[ir.Value, int | None]] = {}  # (value, seq)


# Each thread traces on its own: a trace in one thread is invisible to the others.
_tls = threading.local()
# The thread-local stack of lowering contexts (`_context.active()` is its top), read by
# `bind` directly.
_contexts = _context._state


def _scopes() -> list[TraceScope]:
    try:
        return _tls.scopes
    except AttributeError:
        _tls.scopes = []
        return _tls.scopes


NO_TRACE = (
    "aotkit.numpy has no eager mode: it builds StableHLO inside a traced function rather "
    "than computing on concrete arrays; call it inside a function given to aotkit.jit or "
    "aotkit.lower (use numpy itself for concrete arrays)"
)


# The threads tracing now (ident -> name): only for the error of a call from another thread.
_tracing_threads: dict[int, str] = {}


def no_trace_error(what: str) -> RuntimeError:
    me = threading.get_ident()
    others = [name for ident, name in list(_tracing_threads.items()) if ident != me]
    message = f"{what} was called outside a traced function: {NO_TRACE}"
    if others:
        message += (
            f". Tracing state is per-thread: thread {others[0]!r} is tracing a function now, "
            f"but this call ran in thread {threading.current_thread().name!r}; a traced "
            "function's aotkit.numpy calls must run in the thread that traces it, not in a "
            "thread it starts (a helper thread may compute on concrete values with NumPy)"
        )
    return RuntimeError(message)


def in_loop_body() -> bool:
    """Whether the trace is inside a loop's body (a while/fori loop, or a Python loop
    autograph converted), where a loop index is traced."""
    return any(s.name.endswith((" body", " probe")) for s in _scopes())


def note_range(value: ir.Value, lo: int, hi: int) -> None:
    """Records that the integer scalar `value` lies in [lo, hi] while the current scope is
    traced (see `noted_range`)."""
    current_scope().ranges[value] = (lo, hi)


def noted_range(value: ir.Value) -> tuple[int, int] | None:
    """The [lo, hi] an open scope recorded for `value` (`note_range`), else None."""
    for scope in reversed(_scopes()):
        found = scope.ranges.get(value)
        if found is not None:
            return found
    return None


def current_scope() -> TraceScope:
    scopes = _scopes()
    if not scopes:
        raise no_trace_error("an aotkit.numpy function")
    return scopes[-1]


def push_scope(name: str, emitted: Emitted | None = None) -> TraceScope:
    """Opens a scope: a new module's with `emitted`, else a region of the current module."""
    scopes = _scopes()
    if emitted is None:
        emitted = scopes[-1].emitted
        emitted.opaque = True  # a region: its ops are not in the module's block
    elif not scopes:
        thread = threading.current_thread()
        _tracing_threads[thread.ident] = thread.name
    s = TraceScope(name, emitted)
    scopes.append(s)
    return s


def pop_scope(scope: TraceScope) -> None:
    scopes = _scopes()
    assert scopes and scopes[-1] is scope, "unbalanced tracing scopes"
    scopes.pop()
    scope.open = False
    if not scopes:
        _tracing_threads.pop(threading.get_ident(), None)


def is_tracing() -> bool:
    """Whether this thread is tracing a function."""
    return bool(getattr(_tls, "scopes", None))


# --- Tracer ----------------------------------------------------------------------------------


def _control_flow_error(what: str, suggestion: str) -> TypeError:
    frame = _user_frame()
    note = ""
    filename = frame.f_code.co_filename if frame is not None else ""
    # autograph converts only functions defined in source files (`<string>`, `<stdin>` and
    # the like are not: their source may be gone, and Python 3.13 keeps -c's lines).
    if frame is not None and (
        filename.startswith("<") or not linecache.getline(filename, frame.f_lineno)
    ):
        note = (
            "; autograph, which turns Python control flow on traced values into StableHLO, "
            f"converts only functions defined in a source file, and this one is not "
            f"({filename}: code from python -c, exec or an interactive prompt), so it ran as "
            "written: define the function in a .py file"
        )
    return TypeError(
        f"{what} (at {user_site()}): the value is traced, so Python control flow and "
        f"conversions cannot see it; {suggestion}{note}"
    )


class Tracer:
    """An abstract array inside a trace: `shape`, `dtype` and the `ir.Value` holding it."""

    # `transposed`: None, or (set by `aotkit.numpy.transpose` only) this tracer's value, the
    # tracer it transposes and the permutation, so that a product can contract the source.
    # `seq`: this value's index in its module's `Emitted.used`, or None (see `Emitted`).
    # The slots are aotkit's record of the value, which the C bind reads as it is: code
    # outside this module sets none of them (`__setattr__` refuses; `repoint` and
    # `set_transposed` are the ways in), and `x.shape = ...` is NumPy's in-place reshape.
    __slots__ = ("value", "shape", "dtype", "weak", "_scope", "seq", "transposed", "__weakref__")
    # Above NumPy arrays, so `ndarray + tracer` defers to the tracer.
    __array_priority__ = 1000

    def __init__(
        self,
        value: ir.Value,
        shape: tuple[int, ...],
        dtype: np.dtype,
        scope: TraceScope,
        weak: bool = False,
        seq: int | None = None,
    ):
        # `weak`: weakly typed, a Python scalar passed as an argument (or the index of a
        # fori_loop). It promotes like the Python scalar it stands for (NEP 50) next to
        # strongly typed arrays, and keeps its own dtype next to other weak values.
        # Past `__setattr__`, in one call: the C `Binder.fill`, else `_python_fill`.
        _fill(self, value, shape, dtype, weak, scope, seq)

    def __setattr__(self, name: str, value) -> None:
        if name == "shape":
            # NumPy's `x.shape = (2, 3)`: this tracer becomes its reshape (same size).
            reshape = NUMPY_FUNCTIONS.get("reshape")
            if reshape is None:
                raise NotImplementedError(f"{where('reshape')}: aotkit.numpy has no 'reshape' yet")
            repoint("x.shape = ...", self, reshape(self, value))
            return
        raise AttributeError(_refused_attribute(self, name, value, "set"))

    def __delattr__(self, name: str) -> None:
        raise AttributeError(_refused_attribute(self, name, None, "delete"))

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def aval(self) -> Aval:
        return (self.shape, self.dtype)

    def __repr__(self) -> str:
        weak = ", weak" if self.weak else ""
        return f"Tracer<{dtypes.short_name(self.dtype)}[{','.join(map(str, self.shape))}]{weak}>"

    # Python conversions and control flow cannot see traced values.
    def __bool__(self):
        raise _control_flow_error(
            f"bool() of a traced {self._desc()}",
            "use aotkit.numpy.where(cond, a, b) for values or aotkit.cond(pred, f, g, ...) "
            "for branches (and aotkit.while_loop for loops)",
        )

    def __int__(self):
        raise _control_flow_error(
            f"int() of a traced {self._desc()}",
            "keep it an array (x.astype('int32')), or pass the value as a static argument",
        )

    def __float__(self):
        raise _control_flow_error(
            f"float() of a traced {self._desc()}",
            "keep it an array (x.astype('float32')), or pass the value as a static argument",
        )

    def __complex__(self):
        raise _control_flow_error(
            f"complex() of a traced {self._desc()}", "keep it an array (x.astype('complex64'))"
        )

    def __index__(self):
        raise _control_flow_error(
            f"using a traced {self._desc()} as a Python index",
            "index with the tracer itself (x[i] gathers) or make the index static",
        )

    def __len__(self):
        if not self.shape:
            raise TypeError(f"len() of a 0-d traced array (at {user_site()}); it has no length")
        return self.shape[0]

    def __iter__(self):
        if not self.shape:
            raise TypeError(f"iteration over a 0-d traced array (at {user_site()})")
        return (self[i] for i in range(self.shape[0]))

    def __array__(self, dtype=None, copy=None):
        raise _control_flow_error(
            f"np.asarray() of a traced {self._desc()}",
            "NumPy cannot hold a value known only when the program runs; call aotkit.numpy "
            "(or plain np.* functions, which dispatch to it) on the tracer instead",
        )

    def __hash__(self):
        return id(self)

    def _desc(self) -> str:
        return f"{dtypes.short_name(self.dtype)}[{','.join(map(str, self.shape))}] array"


# The slots' own setters (member descriptors' `__set__`): how this module sets them.
_set_value = Tracer.value.__set__
_set_shape = Tracer.shape.__set__
_set_dtype = Tracer.dtype.__set__
_set_weak = Tracer.weak.__set__
_set_scope = Tracer._scope.__set__
_set_seq = Tracer.seq.__set__
_set_transposed = Tracer.transposed.__set__


def _python_fill(t: Tracer, value, shape, dtype, weak, scope, seq) -> None:
    """`Tracer.__init__`'s body without the C part."""
    _set_value(t, value)
    _set_shape(t, shape)
    _set_dtype(t, dtype)
    _set_weak(t, weak)
    _set_scope(t, scope)
    _set_seq(t, seq)
    # Set, not left unset: reading an unset slot with a default costs 0.3 us (an
    # AttributeError raised and caught), and every product reads both operands'.
    _set_transposed(t, None)


def set_transposed(t: Tracer, record) -> None:
    """Sets `t.transposed` (`aotkit.numpy.transpose`'s note for products, see `Tracer`)."""
    _set_transposed(t, record)


# Checks run before an in-place write rebinds a tracer (`hlo.rebind`), each called with
# (op, tracer): the converted functions' record of views (aotkit/autograph/_runtime.py)
# refuses a write NumPy would make through a view into another array.
IN_PLACE_CHECKS: list = []


def repoint(op: str, x: Tracer, new: Tracer) -> None:
    """Points the Python tracer `x` at `new`'s value (NumPy's in-place writes, and
    `x.shape = ...`): `x` is then `new` in all but identity. `x` must be of the body being
    traced now (a write to a value from outside it could not leave the body)."""
    if x._scope is not current_scope():
        raise TypeError(
            f"{where(op)}: cannot update {x!r} in place: it was traced outside the body being "
            f"traced now ({x._scope.name!r}); carry it through the body and return the new "
            "value instead"
        )
    if id(x) not in x._scope.written:
        x._scope.written[id(x)] = user_site()
    _set_value(x, new.value)
    _set_shape(x, new.shape)
    _set_seq(x, new.seq if new._scope is x._scope else None)
    _set_transposed(x, None)


# What to do instead of setting an attribute of a traced array (`Tracer.__setattr__`).
_INSTEAD = {
    "dtype": "use x = x.astype({dtype}) for a converted copy (a traced array's dtype is fixed)",
    "real": "build the new array instead: x = {value} + 1j * x.imag",
    "imag": "build the new array instead: x = x.real + 1j * {value}",
}


def _refused_attribute(x: Tracer, name: str, value, verb: str) -> str:
    what = f"x.{name} = ..."
    if verb == "delete":
        return (
            f"{where(f'del x.{name}')}: cannot delete attributes of a traced "
            f"{x._desc()}; traced arrays are values: make a new array instead"
        )
    if name in _INSTEAD:
        try:
            dtype = repr(np.dtype(value).name) if name == "dtype" else ""
        except (TypeError, ValueError):
            dtype = "..."
        hint = _INSTEAD[name].format(dtype=dtype, value="...")
        return f"{where(what)}: cannot set {name!r} of a traced {x._desc()}; {hint}"
    if name in Tracer.__slots__:
        return (
            f"{where(what)}: {name!r} is aotkit's own record of a traced {x._desc()} and cannot "
            "be set; make a new array instead (only x.shape = ... reshapes in place)"
        )
    if hasattr(type(x), name):
        return (
            f"{where(what)}: cannot set {name!r} of a traced {x._desc()}; traced arrays are "
            "values: make a new array instead (only x.shape = ... reshapes in place)"
        )
    return (
        f"{where(what)}: a traced {x._desc()} takes no attributes of its own; keep {name!r} "
        "in a variable (or a container) of your own"
    )


def same_value(t: Tracer, scope: TraceScope | None = None, weak: bool = False) -> Tracer:
    """A new tracer object of `t`'s value, in `scope` (default: `t`'s own). In `t`'s scope it
    carries `t`'s `Tracer.seq`, as every tracer of one value must (see `Emitted`)."""
    if scope is None:
        scope = t._scope
    return Tracer(t.value, t.shape, t.dtype, scope, weak, t.seq if scope is t._scope else None)


def as_weak(t: Tracer) -> Tracer:
    """`t` weakly typed: a new tracer of the same value (never `t` itself changed)."""
    if t.weak:
        return t
    return same_value(t, weak=True)


# --- Registry and bind -------------------------------------------------------------------------


class RuleContext:
    """What a lowering rule sees besides its operands."""

    __slots__ = ("op", "avals_in", "avals_out")

    def __init__(self, op: str, avals_in: list[Aval], avals_out: list[Aval]):
        self.op = op
        self.avals_in = avals_in
        self.avals_out = avals_out

    def out_type(self, i: int = 0) -> ir.RankedTensorType:
        shape, dtype = self.avals_out[i]
        return dtypes.tensor_type(shape, dtype)


def emit(ctx: RuleContext, name: str, *operands: ir.Value, **attributes) -> list[ir.Value]:
    """Creates op `name` with the rule's result types and returns its results.

    The hot path of simple ops: `ir.Operation.create` costs well under half of the generated
    builders (`stablehlo.add(...)`), which re-derive what the shape rule already knows. Ops
    with regions use the builders' op classes.
    """
    avals = ctx.avals_out
    if len(avals) == 1:  # a comprehension costs more than the op's one type
        results = [dtypes.tensor_type(*avals[0])]
    else:
        results = [dtypes.tensor_type(shape, dtype) for shape, dtype in avals]
    op = ir.Operation.create(name, results=results, operands=operands, attributes=attributes)
    if name.startswith("chlo."):
        _tls.scopes[-1].emitted.chlo = True
    return op.results


ShapeRule = Callable[..., list[Aval]]
LoweringRule = Callable[..., list[ir.Value]]
AttributeRule = Callable[..., dict]


class OpRule(NamedTuple):
    """How `bind` makes one op: the registry `_rules` holds one per op name. The C `Binder`
    (aotkit/_speedups.c) reads the fields it needs by their names in `_fields`, found when
    it is made, so this declaration is the one layout both read."""

    shape: ShapeRule  # operand avals and params -> result avals
    lower: LoweringRule | None  # the lowering rule; None for an op that is one StableHLO op
    hlo: str | None  # that StableHLO (or CHLO) op's name (`register_direct`), else None
    attributes: AttributeRule | None  # the op's attributes from the params; None: none
    chlo: bool  # whether `hlo` is a CHLO op (the module then needs CHLO's legalization)
    elementwise: bool  # whether `shape` is `same` (`bind` does not call it)
    simplify_free: bool  # `register`'s promise: the rule makes nothing aotkit-simplify rewrites
    simplifiable: bool  # whether aotkit-simplify may rewrite `hlo` (`may_simplify` says when)


_rules: dict[str, OpRule] = {}


def same(*avals: Aval, **_) -> list[Aval]:
    """The shape rule of an op whose result has its last operand's shape and dtype (the
    elementwise ops, whose operands `aotkit.numpy` has made alike); `bind` knows it and
    does not call it."""
    return [avals[-1]]


def register(*names: str, shape: ShapeRule, simplify_free: bool = False):
    """Registers one lowering rule (and its shape rule) for each op name. `simplify_free`:
    the rule makes no op `aotkit-simplify` could rewrite, whatever its operands (in its
    block, only ops the sweep has no rule for; in their regions, only ops on the regions'
    arguments)."""

    def decorate(rule: LoweringRule) -> LoweringRule:
        for name in names:
            assert name not in _rules, f"op {name!r} registered twice"
            _rules[name] = OpRule(shape, rule, None, None, False, False, simplify_free, True)
        return rule

    return decorate


def register_direct(
    ops: dict[str, str], *, shape: ShapeRule, attributes: AttributeRule | None = None
) -> None:
    """Registers ops that are each one StableHLO op: `ops` maps op name to that op's name.

    The op's operands are the tracers' values, its one result is what `shape` gives, and
    its attributes are `attributes(**params)` (none without it). `bind` creates it itself,
    with no lowering rule to call: the hot path of traced programs.
    """
    for name, hlo in ops.items():
        assert name not in _rules, f"op {name!r} registered twice"
        simplified = hlo in _SIMPLIFY_WITH_CONSTANTS or hlo in _SIMPLIFY_IF
        _rules[name] = OpRule(
            shape=shape,
            lower=None,
            hlo=hlo,
            attributes=attributes,
            chlo=hlo.startswith("chlo."),
            elementwise=shape is same,
            simplify_free=True,
            simplifiable=simplified,
        )


def _foreign_tracer(t: Tracer, scope: TraceScope, op: str) -> TypeError:
    return TypeError(
        f"{where(op)}: a tracer of another function being traced ({t!r}, traced in "
        f"{t._scope.name!r}) was used while tracing {scope.name!r}, whose module cannot "
        "read it; pass it to that function as an argument instead of closing over it"
    )


def _check_live(t: Tracer, op: str) -> None:
    if not t._scope.open:
        raise TypeError(
            f"{where(op)}: a tracer from a finished trace or a closed control-flow body "
            f"({t!r}, traced in {t._scope.name!r}) was used again; return it from that "
            "function or body instead of keeping it in a global or closure"
        )


def python_bind(op: str, *operands: Tracer, **params) -> list[Tracer]:
    """Applies `op` to tracers: shape rule, then its lowering rule, at the user's location.

    The hot path of every traced program: an op that is one StableHLO op (`register_direct`)
    is created here, with what `user_location` and `dtypes.tensor_type` would give inlined
    (each is a function call and a lookup of the lowering context otherwise). `bind` is
    this function, or the C `Binder` in front of it (see the end of this module).
    """
    entry = _rules.get(op)
    if entry is None:
        raise NotImplementedError(f"aotkit has no lowering rule for op {op!r}")
    try:
        scope = _tls.scopes[-1]
    except (AttributeError, IndexError):
        for t in operands:  # a tracer of a finished trace says so in its own words
            _check_live(t, op)
        raise no_trace_error(f"aotkit.numpy (its {op!r} op)") from None
    emitted = scope.emitted
    used = emitted.used
    values = []
    # Whether an operand is a value no vouched op used before: then this op equals no
    # earlier op (the `duplicates` of `Emitted`).
    fresh = False
    for t in operands:
        if t._scope is scope:
            s = t.seq
            if s is None:
                emitted.duplicates = True
            elif not used[s]:
                used[s] = 1
                fresh = True
        elif not t._scope.open:
            _check_live(t, op)
        elif t._scope.emitted is not emitted:  # every scope of one module shares its record
            raise _foreign_tracer(t, scope, op)
        values.append(t.value)
    hlo = entry.hlo
    if hlo is None:
        return _bind_rule(op, entry, operands, values, params)
    try:
        lc = _contexts.stack[-1]  # `_context.active()`, without its call
    except (AttributeError, IndexError):
        lc = _context.active()  # raises the error that says no context is active
    if entry.elementwise:  # the result is the last operand's shape and dtype
        last = operands[-1]
        shape, dtype = last.shape, last.dtype
        avals_in = None
        result_type = lc.tensor_types.get((shape, dtype))
        attributes = entry.attributes
        if attributes is not None:
            attributes = attributes(**params)
    else:
        # The shape rule and attributes of an op with these operand types and parameters,
        # made once per lowering context (a rule called with keywords costs more than the
        # lookup; parameters are keyed by name, so two orders of them never collide). Not
        # in a trace with symbolic dimensions: comparing two of them may be undecidable.
        if len(operands) == 1:  # (a comprehension is a call of its own before Python 3.12)
            last = operands[0]
            avals_in = [(last.shape, last.dtype)]
        else:
            avals_in = [(t.shape, t.dtype) for t in operands]
        plan = plan_key = None
        if emitted.symbolic is None:
            plan_key = (op, *avals_in, *params.items())
            try:
                plan = lc.plans.get(plan_key)
            except TypeError:  # a parameter that is not hashable (a list): no plan
                plan_key = None
        if plan is not None:
            shape, dtype, result_type, attributes = plan
        else:
            shape, dtype = entry.shape(*avals_in, **params)[0]
            result_type = lc.tensor_types.get((shape, dtype))
            attributes = entry.attributes
            if attributes is not None:
                attributes = attributes(**params)
            if result_type is not None and plan_key is not None:
                lc.plans[plan_key] = (shape, dtype, result_type, attributes)
    if result_type is None:
        if not algebra.is_static(shape):  # a symbolic dimension (issue 25)
            return _bind_symbolic(op, entry, operands, values, params, shape, dtype)
        result_type = lc.tensor_types[(shape, dtype)] = ir.RankedTensorType.get(
            shape, dtypes.ir_element_type(dtype)
        )
    loc = lc.location
    if loc is None:  # `user_location`, its walk inlined (from the caller's caller: the
        f = sys._getframe(2)  # caller is aotkit's own)
        # Most often that is the user's own code at a line seen before, which one lookup
        # finds: only the user's frames enter `lc.locations`, which keeps their code alive.
        loc = lc.locations.get((id(f.f_code), f.f_lasti))
        if loc is None:
            internal = _internal_files
            while f is not None:
                name = f.f_code.co_filename
                skip = internal.get(name)
                if skip is None:
                    skip = internal[name] = (
                        name.startswith(_SKIP_PREFIXES) or name in _INTERNAL_FILES
                    )
                if not skip:
                    loc = lc.locations.get((id(f.f_code), f.f_lasti))
                    if loc is None:
                        loc = _new_location(lc, f)
                    break
                f = f.f_back
            else:
                loc = ir.Location.unknown()
    created = ir.Operation.create(
        hlo, results=[result_type], operands=values, attributes=attributes, loc=loc
    )
    result = created.result
    if entry.chlo:
        emitted.chlo = True
    seq = None
    if not emitted.opaque:
        if emitted.first_op is None:
            emitted.first_op = created
        # An op equal to an earlier one uses only values used before: only then are the
        # users of its first operand compared with it.
        if not fresh and not emitted.duplicates:
            emitted.duplicates = _has_equal_user(created, values)
        seq = len(used)
        used.append(0)
    if entry.simplifiable and not emitted.simplify:
        if emitted.constants and hlo in _SIMPLIFY_WITH_CONSTANTS:
            emitted.simplify = _constant_operands(
                values, emitted.constants, _SIMPLIFY_WITH_CONSTANTS[hlo]
            )
        check = _SIMPLIFY_IF.get(hlo)
        if check is not None:
            if avals_in is None:
                avals_in = [(t.shape, t.dtype) for t in operands]
            if check(avals_in[0], (shape, dtype), params, values[0]):
                emitted.simplify = True
    return [Tracer(result, shape, dtype, scope, False, seq)]


# Users of a value compared with a new op before `_has_equal_user` gives up (and says
# "maybe": cse then runs): a value many ops use is compared at most this often per op.
_EQUAL_USERS_SCANNED = 16


def _has_equal_user(op: ir.Operation, operands: list[ir.Value]) -> bool:
    """Whether an op other than `op` equals it (name, operands, attributes, result types:
    what `cse` merges), among the users of its first operand; True when it cannot tell."""
    if not operands:
        return True
    name, result_type = op.name, op.results[0].type
    attributes = _attribute_dict(op)
    for i, use in enumerate(operands[0].uses):
        if i == _EQUAL_USERS_SCANNED:
            return True
        user = use.owner
        if (
            user.name == name
            and user != op
            and len(user.results) == 1
            and user.results[0].type == result_type
            and list(user.operands) == operands
            and _attribute_dict(user) == attributes
        ):
            return True
    return False


def _attribute_dict(op: ir.Operation) -> dict[str, ir.Attribute]:
    attributes = op.attributes  # iterating it gives the names
    return {name: attributes[name] for name in attributes}


def _bind_rule(op: str, entry, operands, values: list, params: dict) -> list[Tracer]:
    """`bind` of an op with a lowering rule of its own."""
    avals_in = [(t.shape, t.dtype) for t in operands]
    avals_out = entry.shape(*avals_in, **params)
    scope = _tls.scopes[-1]
    scope.emitted.opaque = True
    if not entry.simplify_free:
        scope.emitted.unchecked = True
    if scope.emitted.symbolic is not None:
        return _bind_symbolic_rule(op, entry, avals_in, avals_out, values, params)
    with user_location():
        results = entry.lower(RuleContext(op, avals_in, avals_out), *values, **params)
    if len(avals_out) == 1:
        # Iterating a result list is several times slower than indexing its one value.
        shape, dtype = avals_out[0]
        return [Tracer(results[0], shape, dtype, scope)]
    return [Tracer(v, a[0], a[1], scope) for v, a in zip(results, avals_out)]  # noqa: B905


# --- Symbolic dimensions (issue 25) ----------------------------------------------------------
# A trace whose arguments have symbolic dimensions (`f32[b,784]`) builds dynamic StableHLO.
# Static traces never reach these functions: `bind` comes here only when a result type is
# not in the context's cache, which symbolic types never enter, and `_bind_rule` and `full`
# only for a symbolic trace (`Emitted.symbolic`). aotkit/tracing/symbolic.py registers the
# rules: the dynamic op for each op whose attributes encode a shape (`broadcast_in_dim` ->
# `dynamic_broadcast_in_dim`, `reshape`, `iota`, `slice`, `pad`, ...) and "full".
_symbolic_rules: dict[str, Callable] = {}


def register_symbolic(*names: str):
    """Registers the rule that lowers each op of `names` in a symbolic trace:
    `rule(ctx, *values, static=<the op's own rule, or None for a direct op>, **params)`."""

    def decorate(rule: Callable) -> Callable:
        for name in names:
            assert name not in _symbolic_rules, f"symbolic rule {name!r} registered twice"
            _symbolic_rules[name] = rule
        return rule

    return decorate


def _bind_symbolic(op, entry, operands, values, params, shape, dtype) -> list[Tracer]:
    """`bind` of a direct op whose result has a symbolic dimension: its symbolic rule, or
    the same op with a dynamic result type."""
    avals_in = [(t.shape, t.dtype) for t in operands]
    scope = _tls.scopes[-1]
    scope.emitted.opaque = True
    scope.emitted.unchecked = True
    if entry.chlo:
        scope.emitted.chlo = True
    rule = _symbolic_rules.get(op)
    with user_location():
        if rule is not None:
            ctx = RuleContext(op, avals_in, [(shape, dtype)])
            result = rule(ctx, *values, static=None, **params)[0]
        else:
            attributes = entry.attributes(**params) if entry.attributes is not None else None
            result = ir.Operation.create(
                entry.hlo,
                results=[dtypes.tensor_type(shape, dtype)],
                operands=values,
                attributes=attributes,
            ).result
    return [Tracer(result, shape, dtype, scope)]


def _bind_symbolic_rule(op, entry, avals_in, avals_out, values, params) -> list[Tracer]:
    """`_bind_rule` in a symbolic trace: the op's symbolic rule where it has one, else its
    own rule, which may build an op whose attributes cannot hold a symbolic dimension (the
    bindings then refuse the Dim: a NotImplementedError naming the op)."""
    scope = _tls.scopes[-1]
    scope.emitted.unchecked = True
    ctx = RuleContext(op, avals_in, avals_out)
    rule = _symbolic_rules.get(op)
    try:
        with user_location():
            if rule is not None:
                results = rule(ctx, *values, static=entry.lower, **params)
            else:
                results = entry.lower(ctx, *values, **params)
    except TypeError as e:
        refused = "incompatible function arguments" in str(e)  # the bindings took no Dim
        if not refused or isinstance(e, algebra.InconclusiveDimensionError):
            raise
        listed = ", ".join(f"{dtypes.short_name(d)}[{','.join(map(str, s))}]" for s, d in avals_in)
        raise NotImplementedError(
            f"{where(op)}: aotkit cannot lower {op} of ({listed}) with symbolic dimensions "
            "yet; make the dimension static"
        ) from None
    return [Tracer(v, a[0], a[1], scope) for v, a in zip(results, avals_out, strict=True)]


# When an op `bind` creates may give `aotkit-simplify` work (aotkit/passes/python_passes.py
# declares it beside its rules): by op name, which of its operands must be constants
# (`python_passes.CONSTANT_OPERANDS`) ...
_SIMPLIFY_WITH_CONSTANTS = python_passes.CONSTANT_OPERANDS
# ... or, for the rules that need none (`python_passes.ALONE`), whether one may fire; the
# tracer's params name the order attributes as `perm` and `dims`.
_ORDER_PARAMS = {"permutation": "perm", "broadcast_dimensions": "dims"}


def _may_simplify_alone(
    rule: python_passes.Alone, name: str, x: ir.Value, same_type: bool, order
) -> bool:
    """`rule` (`python_passes.ALONE[name]`) of an op on `x`: whether its result has `x`'s
    type, and its order attribute's values (or None)."""
    if rule.after_itself and _made_by(x, name):
        return True
    if not (rule.same_type or rule.order):
        return False
    if rule.same_type and not same_type:
        return False
    return rule.order is None or all(order[i] == i for i in range(len(order)))


def _bind_check(name: str) -> Callable[[Aval, Aval, dict, ir.Value], bool]:
    rule = python_passes.ALONE[name]
    param = _ORDER_PARAMS.get(rule.order)
    return lambda a, out, p, x: _may_simplify_alone(
        rule, name, x, a == out, p[param] if param else None
    )


# By op name: a test of (operand aval, result aval, params, operand), which `bind` (and the C
# `Binder`) call once the op is made.
_SIMPLIFY_IF = {name: _bind_check(name) for name in python_passes.ALONE}


def _made_by(value: ir.Value, name: str) -> bool:
    owner = value.owner  # a Block for a block argument (which a plain ir.Value may be)
    return not isinstance(owner, ir.Block) and owner.name == name


def note_made(op: ir.Operation, values: list[ir.Value]) -> None:
    """Records for `op`, made on `values` in the current trace other than by `bind` (a
    transform copies the ops of the program it transforms and builds some of its own), what
    `bind` records of its ops: a constant and its scalar, or whether `aotkit-simplify` may
    rewrite the op. Its regions are its maker's to answer for (`Emitted.unchecked`)."""
    emitted = _tls.scopes[-1].emitted
    name = op.name
    if name == "stablehlo.constant":
        emitted.constants[op.results[0]] = python_passes.splat_scalar(op)
        return
    if emitted.simplify:
        return
    need = _SIMPLIFY_WITH_CONSTANTS.get(name)
    if need is not None and emitted.constants:
        if _constant_operands(values, emitted.constants, need):
            emitted.simplify = True
            return
    rule = python_passes.ALONE.get(name)
    if rule is not None:
        x = values[0]
        order = op.attributes[rule.order] if rule.order else None
        same_type = x.type == op.results[0].type
        emitted.simplify = _may_simplify_alone(rule, name, x, same_type, order)


def copy_of_template(
    key, build: Callable[[list[ir.Value]], ir.Operation], values: list[ir.Value], loc
) -> ir.Operation:
    """The op `build(operands)` makes (its ops at the ambient location), at the insertion
    point on `values` and at `loc`: built once per lowering context, `key` (everything
    `build` depends on besides the operands' types) and location, on stand-ins (a block's
    arguments), and copied after. Copying an op with a region (a reduction's combiner)
    costs a fifth of building it op by op: the unrolled layers of a gradient make many
    equal reductions at one source line."""
    templates = _context.active().templates
    full_key = (key, loc.attr)  # a Location hashes by identity, its attribute by value
    found = templates.get(full_key)
    if found is None:
        # A detached op holds the template's block (never verified, never in a module).
        holder = ir.Operation.create("stablehlo.case", results=[], regions=1, ip=False)
        block = holder.regions[0].blocks.append(*[v.type for v in values])
        with ir.InsertionPoint(block), loc:
            found = templates[full_key] = (build(list(block.arguments)), holder)
    new = found[0].clone(ip=ir.InsertionPoint.current)
    operands = new.operands
    for i, v in enumerate(values):
        operands[i] = v
    return new


def _constant_operands(values: list, constants: dict, need) -> bool:
    """Whether the constant operands among `values` may let the sweep rewrite the op (see
    `python_passes.CONSTANT_OPERANDS`)."""
    if need == "first":
        return values[0] in constants
    if need != "all":
        unit, positions = need  # an identity: x + 0, x - 0, x * 1
        for i in positions:
            c = constants.get(values[i], _NOT_CONSTANT)
            if c is not _NOT_CONSTANT and (c is None or c == unit):
                return True
    for v in values:
        if v not in constants:
            return False
    return True  # a fold


_NOT_CONSTANT = object()


def python_bind1(op: str, *operands: Tracer, **params) -> Tracer:
    """`python_bind`'s one result."""
    return python_bind(op, *operands, **params)[0]


# --- Constants ----------------------------------------------------------------------------------


_PY_SCALARS = (bool, int, float, complex)


def _splat_attr(scalar, shape, dtype: np.dtype) -> ir.DenseElementsAttr:
    # Scalars meet arrays all the time (x * 2.0); building the attribute from NumPy costs
    # ten times the op itself, so splats are cached (attributes are uniqued and immutable).
    # repr, not the value, keys Python scalars: 0.0 == -0.0 but they are different constants.
    t = type(scalar)
    key = (dtype, shape, t, repr(scalar)) if t in _PY_SCALARS else None
    splats = _context.active().splats
    attr = splats.get(key) if key is not None else None
    if attr is None:
        attr = _build_splat(np.asarray(scalar, dtype).reshape(1), shape, dtype)
        if key is not None:
            splats[key] = attr
    return attr


def _build_splat(one: np.ndarray, shape, dtype: np.dtype) -> ir.DenseElementsAttr:
    if dtype == dtypes.bfloat16:
        one = one.view(np.uint16)
    elif dtype == np.bool_:
        # A 1-byte i1 buffer is read as a splat of its bits: only 0x00 and 0xFF are safe.
        one = np.array([0xFF if one[0] else 0], np.uint8)
    return ir.DenseElementsAttr.get(one, type=dtypes.ir_element_type(dtype), shape=list(shape))


def _constant_op(attr: ir.DenseElementsAttr, splat=None) -> tuple[ir.Value, int]:
    """A constant op holding `attr` (a splat of the scalar `splat`, if given): its value
    and that value's `Tracer.seq`."""
    emitted = _tls.scopes[-1].emitted
    first = emitted.first_op
    if first is not None and not emitted.opaque and ir.InsertionPoint.current.block == first.block:
        # Among the module's other constants, above every other op: where canonicalize
        # puts constants, so it has nothing to move (a constant has no operands).
        with ir.InsertionPoint(first):
            value = ir.Operation.create(
                "stablehlo.constant", results=[attr.type], attributes={"value": attr}
            ).result
    else:
        value = ir.Operation.create(
            "stablehlo.constant", results=[attr.type], attributes={"value": attr}
        ).result
        if emitted.vouched_ops() != len(emitted.constants):  # another op came first
            emitted.late_constant = True
    emitted.constants[value] = splat
    seq = len(emitted.used)
    emitted.used.append(0)
    n = len(emitted.keys)
    emitted.keys.add(hash(("stablehlo.constant", attr)))
    if len(emitted.keys) == n:  # an equal constant: both passes merge them
        emitted.duplicates = emitted.equal_constants = True
    return value, seq


def _dense_attr(x: np.ndarray) -> ir.DenseElementsAttr:
    flat = x.ravel()
    if flat.size > 0 and (flat == flat[0]).all():
        return _splat_attr(flat[0], x.shape, x.dtype)
    assert x.dtype != np.bool_, "non-splat booleans go through u8"
    if x.dtype == dtypes.bfloat16:
        flat = flat.view(np.uint16)
    # Dense constants stay in the context as long as it lives: they decide when it retires.
    _context.active().add_constant_bytes(flat.nbytes)
    return ir.DenseElementsAttr.get(
        np.ascontiguousarray(flat), type=dtypes.ir_element_type(x.dtype), shape=list(x.shape)
    )


def constant(x, dtype: np.dtype | None = None) -> Tracer:
    """Embeds a NumPy array or scalar as a `stablehlo.constant`."""
    scope = current_scope()
    arr = np.asarray(x)
    arr = arr.astype(
        dtype if dtype is not None else dtypes.canonicalize(arr.dtype, where="constant"), copy=False
    )
    with user_location():
        if arr.dtype == np.bool_ and arr.size > 1 and not (arr == arr.flat[0]).all():
            # Non-splat booleans travel as u8 and are compared back to i1.
            u8 = arr.astype(np.uint8)
            scope.emitted.unchecked = True  # a compare of two constants, which the sweep folds
            value = stablehlo.compare(
                _constant_op(_dense_attr(u8))[0],
                _constant_op(_dense_attr(np.zeros_like(u8)))[0],
                stablehlo.ComparisonDirectionAttr.get("NE"),
            )
            seq = None
        else:
            value, seq = _constant_op(_dense_attr(arr))
    return Tracer(value, tuple(arr.shape), arr.dtype, scope, False, seq)


def full(shape: tuple[int, ...], value, dtype: np.dtype) -> Tracer:
    """A splat constant of `shape`: one op and one element of storage, however large."""
    shape = tuple(shape)
    scope = current_scope()
    t = type(value)
    if t not in _PY_SCALARS:
        if isinstance(value, algebra.Dim):  # a symbolic dimension's value (issue 25)
            scope.emitted.unchecked = True
            return _symbolic_rules["dim"](shape, value, dtype)
        value = np.asarray(value).astype(dtype)
        t = type(value)
    # repr, not the value, keys the constant: 0.0 == -0.0, but they are different constants.
    # The insertion point (the object `with` entered, which stays current until it exits),
    # not its block, keys where: reading the block makes a new object each time, and an
    # equal constant made at another insertion point of the block is found as any other is.
    key = (ir.InsertionPoint.current, dtype, shape, t, repr(value))
    made = scope.constants.get(key)
    if made is None:
        if not algebra.is_static(shape):  # a symbolic dimension (issue 25)
            scope.emitted.unchecked = True
            with user_location():
                v = _symbolic_rules["full"](value, shape, dtype)
            scope.constants[key] = v, None
            return Tracer(v, shape, dtype, scope)
        with user_location():
            made = scope.constants[key] = _constant_op(_splat_attr(value, shape, dtype), value)
    return Tracer(made[0], shape, dtype, scope, False, made[1])


def splat_value(t: Tracer):
    """The scalar every element of `t` is when `t` is a splat constant of this trace (made
    by `full`, or copied by a transform), else None. (No op is erased while a trace runs, so
    no other value takes a constant's place.)"""
    return t._scope.emitted.constants.get(t.value)


# --- The aotkit.numpy namespace ----------------------------------------------------------------

NUMPY_FUNCTIONS: dict[str, Callable] = {}


# --- dot and convolution precision ------------------------------------------------------------


def precision(op: str, value) -> tuple[str, str]:
    """The (lhs, rhs) precision names of a dot or convolution `op` given `precision=value`
    (JAX's spellings): its own, else the default in force (`aotkit.config`), a parameter
    of the op like any other (the plans of `bind` key on it)."""
    pair = config.precision_pair(where(op), value) if value is not None else None
    return pair if pair is not None else config.matmul_precision()


@_context.cached
def precision_attr(pair: tuple[str, str]) -> ir.ArrayAttr:
    """The `precision_config` attribute of a dot or convolution: the one place it is made."""
    return ir.ArrayAttr.get([stablehlo.PrecisionAttr.get(p) for p in pair])


def export(*names: str):
    """Publishes a function in `aotkit.numpy` (and to NumPy's dispatch) under `names`."""

    def decorate(fn: Callable) -> Callable:
        for name in names:
            assert name not in NUMPY_FUNCTIONS, f"aotkit.numpy.{name} exported twice"
            NUMPY_FUNCTIONS[name] = fn
        return fn

    return decorate


# --- bind ------------------------------------------------------------------------------------


def _binder(fallback: Callable, first: bool, **replaced):
    """The C `Binder` (aotkit/_speedups.c) in front of `fallback`: it makes the common op
    (one StableHLO op on tracers of the open scope, its result type and location already
    in the lowering context) without a Python frame, the tracer's cost per op, and hands
    every other call to `fallback`, which fills the caches it reads. (`replaced`: what the
    tests give it instead of this module's own.)"""
    given = dict(
        fallback=fallback,
        rules=_rules,
        tls=_tls,
        contexts=_contexts,
        tracer=Tracer,
        scope=TraceScope,
        emitted=Emitted,
        context=_context.LoweringContext,
        create=ir.Operation.create,
        has_equal_user=_has_equal_user,
        with_constants=_SIMPLIFY_WITH_CONSTANTS,
        simplify_if=_SIMPLIFY_IF,
        internal=_internal_files,
        rule=OpRule,
        first=first,
    )
    return _native.Binder(**{**given, **replaced})


# `bind(op, *tracers, **params)` -> [result]; `bind1` -> result. `_fill`: `Tracer.__init__`.
if _native.Binder is None:
    bind, bind1 = python_bind, python_bind1
    _fill = _python_fill
else:
    bind, bind1 = _binder(python_bind, False), _binder(python_bind1, True)
    _fill = bind1.fill
