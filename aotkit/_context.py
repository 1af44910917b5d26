"""Lowering contexts: the MLIR contexts aotkit builds IR in, and everything cached per context.

A `LoweringContext` owns one MLIR context and the caches of objects uniqued in it (types,
attributes, locations, parsed pass pipelines). Nothing is cached in module-level globals
that would outlive the context, so a context and all it holds are freed with the last
module built in it.

MLIR uniques attributes in their context and never frees them while it lives: a process
that keeps lowering programs with large constants (new weights each time) into one context
grows without bound. Creating a context costs about 2 ms, as much as a whole small
lowering, so neither "one context forever" nor "one context per lowering" holds both memory
and speed. Contexts rotate instead: new lowerings share the current context until it has
taken `RETIRE_BYTES` of constant data or `RETIRE_LOWERINGS` lowerings; it is then retired
(nothing new is built in it) and freed with the last `Traced`/`Lowered` that uses it.
Programs without large constants keep reusing one context; a program with weights gets a
fresh one, freed when the user drops its stages.

Threads: an MLIR context is not safe to build IR in from several threads at once (a pass
run invalidates the Python handles of operations in its context, a half-built module is
visible to whoever prints the context's modules), so each `LoweringContext` has its own
re-entrant lock, taken by `with lc:`; everything that creates, rewrites, prints or
serializes IR does so inside `with lc:` for the context of the module it touches
(`with of(module):`). Contexts are independent, so threads in different contexts never wait
for each other. A trace holds its context for as long as the user's function runs, so a new
lowering never waits for another thread's trace: `for_lowering` gives it a context no other
thread holds (one of a small pool, or a fresh one), and a traced function that waits on a
thread which lowers something cannot deadlock. What a thread is tracing (its scope stack,
in `tracing/core.py`) and which context it builds in are thread-local.
"""

from __future__ import annotations

import threading
import weakref

from jaxlib.mlir import ir

from aotkit import _compat

# Guards the pool of contexts new lowerings share and the table of contexts by MLIR context
# (held only to pick or register a context, never while IR is built).
_PICK = threading.Lock()
# At most this many contexts are kept for new lowerings to share (one per thread lowering at
# the same time); a lowering that finds all of them held by other threads gets a context of
# its own, freed with its stages.
POOL_SIZE = 8

# A context is retired once it holds this many bytes of dense constants or has served this
# many lowerings (types, locations and small attributes grow slowly with every program).
RETIRE_BYTES = 1 << 20
RETIRE_LOWERINGS = 1000


class LoweringContext:
    """One MLIR context and the caches of what is uniqued in it; `with lc:` makes it current."""

    __slots__ = (
        "mlir",
        "element_types",
        "tensor_types",
        "plans",
        "locations",
        "location_codes",
        "location",
        "attributes",
        "splats",
        "pipelines",
        "templates",
        "constant_bytes",
        "lowerings",
        "lock",
        "__weakref__",
    )

    def __init__(self, mlir: ir.Context | None = None):
        self.mlir = mlir if mlir is not None else _compat.make_context()
        self.element_types: dict = {}
        self.tensor_types: dict = {}
        # What `tracing.core.bind` makes of an op with parameters, by (op, its operands'
        # shapes and dtypes, its parameters): (shape, dtype, result type, attributes).
        self.plans: dict = {}
        # The user's locations, by (id of the code object, instruction offset): see
        # `tracing.core.user_location`. The code objects are kept, so no other takes an id.
        self.locations: dict = {}
        self.location_codes: dict = {}
        # The location of every op built now, when set (`tracing.core.at_location`): a
        # transform rebuilding a module gives its ops the location of the op they came from.
        self.location: ir.Location | None = None
        # Attributes built from hashable keys (dimension numbers, i64 arrays, directions).
        self.attributes: dict = {}
        self.splats: dict = {}
        # Parsed pass pipelines: a PassManager belongs to the context it was parsed in.
        self.pipelines: dict = {}
        # Ops with regions built once and copied after (`tracing.core.copy_of_template`).
        self.templates: dict = {}
        self.constant_bytes = 0
        self.lowerings = 0
        self.lock = threading.RLock()

    @property
    def retired(self) -> bool:
        return self.constant_bytes >= RETIRE_BYTES or self.lowerings >= RETIRE_LOWERINGS

    def add_constant_bytes(self, n: int) -> None:
        self.constant_bytes += n

    def __enter__(self) -> LoweringContext:
        self.lock.acquire()
        try:
            stack = _stack()
            stack.append(self)
            self.mlir.__enter__()
        except BaseException:
            self.lock.release()
            raise
        return self

    def __exit__(self, *exc) -> None:
        try:
            self.mlir.__exit__(*exc)
            _state.stack.pop()
        finally:
            self.lock.release()

    def free(self) -> bool:
        """Whether this thread can enter the context now (no other thread holds it)."""
        if self.lock.acquire(blocking=False):
            self.lock.release()
            return True
        return False

    def __repr__(self) -> str:
        return (
            f"<LoweringContext {id(self):#x}: {self.lowerings} lowerings, "
            f"{self.constant_bytes} constant bytes{', retired' if self.retired else ''}>"
        )


def cached(build):
    """Decorates `build(*key)` (hashable arguments, returns an MLIR attribute or type, or an
    immutable value read from one) to run once per key and lowering context, the way
    `functools.cache` would for one context."""

    def get(*key):
        attributes = active().attributes
        full_key = (build, key)
        attr = attributes.get(full_key)
        if attr is None:
            attr = attributes[full_key] = build(*key)
        return attr

    get.__name__ = get.__qualname__ = build.__name__
    get.__doc__ = build.__doc__
    get.__wrapped__ = build
    return get


_state = threading.local()
_pool: list[LoweringContext] = []
# The LoweringContext of each live MLIR context, for modules that reach aotkit without their
# stage (a module a user parsed, a copy from `Lowered.module`). Weak both ways: a context is
# kept alive by its modules, never by this table.
_by_mlir: dict[int, weakref.ref] = {}


def _stack() -> list[LoweringContext]:
    try:
        return _state.stack
    except AttributeError:
        _state.stack = []
        return _state.stack


def active() -> LoweringContext:
    """The context this thread is building in (inside `with lc:`)."""
    try:
        return _state.stack[-1]
    except (AttributeError, IndexError):
        raise RuntimeError(
            "aotkit: no lowering context is active; IR is built inside aotkit.lower or "
            "aotkit.jit (please report this if you did not call aotkit internals)"
        ) from None


def for_lowering() -> LoweringContext:
    """The context a new lowering builds in: one of the pool that no other thread holds and
    that has not retired, else a fresh one (added to the pool while it has room)."""
    with _PICK:
        _pool[:] = [lc for lc in _pool if not lc.retired]
        for lc in _pool:
            if lc.free():
                break
        else:
            lc = _register(LoweringContext())
            if len(_pool) < POOL_SIZE:
                _pool.append(lc)
        lc.lowerings += 1
        return lc


def of(module: ir.Module | ir.Operation) -> LoweringContext:
    """The LoweringContext of the MLIR context `module` lives in (made if it has none);
    `with of(module):` before touching the module's IR."""
    mlir = module.context
    with _PICK:
        ref = _by_mlir.get(id(mlir))
        lc = ref() if ref is not None else None
        if lc is None or lc.mlir is not mlir:
            lc = _register(LoweringContext(mlir))
        return lc


def _register(lc: LoweringContext) -> LoweringContext:
    key = id(lc.mlir)
    _by_mlir[key] = weakref.ref(lc, lambda _, key=key: _forget(key))
    return lc


def _forget(key: int) -> None:
    ref = _by_mlir.get(key)
    if ref is not None and ref() is None:
        del _by_mlir[key]
