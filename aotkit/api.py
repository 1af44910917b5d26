"""The orchestration of the stages: `jit`, `lower` and `load_module`, and the transitions
they bind into the stage values (aotkit/stages.py).

A front end returns a `Program` (aotkit/program.py). This module wraps it in a `Traced`
whose `.lower()` is a transition bound here: the pass pipeline, then donation, then
verification, then the dumps, in one order for every front end, so what is dumped is what
the backend gets (`_lower`). The `Lowered` it makes holds the compile transition
(aotkit/compiling.py underneath). `jit` adds caches shared by every `jit` of the same
function, which its transitions reach: no value holds a cache or the options it came from.

Every entry point takes its options as one frozen `Options` value, checked once
(`check_options`).
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import os
import sys
import threading
import warnings
import weakref
from collections.abc import Callable
from typing import NamedTuple

import numpy as np
from jax import tree_util

from aotkit import (
    _native,
    arguments,
    autograph,
    backends,
    compiling,
    config,
    dtypes,
    dumps,
    frontends,
    modules,
    passes,
    spmd,
    tracing,
)
from aotkit._traceback import api_boundary, filter_exception, user_stacklevel
from aotkit.errors import InvalidModuleError
from aotkit.frontends import files
from aotkit.program import Options, Program
from aotkit.specs import ShapeDtype
from aotkit.stages import Compiled, Lowered, Traced
from aotkit.symbolic import specialize
from aotkit.symbolic.signatures import SymbolicSignature, is_symbolic
from aotkit.tracing import core
from aotkit.tracing.trace import trace
from aotkit.transforms import functions as transform_functions

# The tracer dispatches plain NumPy calls through the op families' registry: load them all
# (`import aotkit` alone does not; see aotkit/__init__.py).
tracing.load_families()

# --- options -------------------------------------------------------------------------------------


def check_options(where: str, fn: Callable | None, **given) -> Options:
    """The checked `Options` (TypeError/ValueError worded for `where`).

    A function already wrapped in jax.jit keeps the static and donated arguments it was
    given there, unless these options name some.
    """
    for name, kind in (("static_argnums", int), ("static_argnames", str), ("donate_argnums", int)):
        given[name] = arguments.as_tuple(where, name, given.get(name, ()), kind)
    options = Options(**given)
    frontends.check_frontend(where, options.frontend)
    backend = options.backend
    if backend is not None and not isinstance(backend, str):
        raise TypeError(f"{where}: backend must be a name such as 'cpu', got {backend!r}")
    if options.pipeline is not None:
        passes.check_pipeline(options.pipeline)
    if not isinstance(options.autograph, bool):
        raise TypeError(f"{where}: autograph must be True or False, got {options.autograph!r}")
    if not isinstance(options.keep_unused, bool):
        raise TypeError(f"{where}: keep_unused must be True or False, got {options.keep_unused!r}")
    if options.print_ir_after_all not in (None, True, False):
        raise TypeError(
            f"{where}: print_ir_after_all must be True, False or None (then "
            f"AOTKIT_PRINT_IR_AFTER_ALL decides), got {options.print_ir_after_all!r}"
        )
    if fn is not None and options.frontend != "aotkit":
        options = frontends.inherit_jax_jit(fn, options)
    return options


def default_pipeline(frontend: str) -> str:
    """The pipeline a stage runs unless told otherwise: "default" for programs aotkit's
    tracer wrote, "none" for modules JAX lowered and modules read from files. JAX already
    ran its own passes, and any rewrite (even `cse`, which merges only identical ops)
    changes XLA's fusion choices and with them floating-point results; run as written, a
    JAX module compiles to what jax.jit compiles, bit for bit. A file's module runs as
    written."""
    return "default" if frontend == "aotkit" else "none"


# --- the transitions a stage holds ---------------------------------------------------------------


def _compile_key(lowering_key, backend: str, options_key=(), target_key=()) -> tuple:
    """The key of a jit's compile cache: its lowering's key (which holds no backend: one
    lowering serves every backend), the backend's name, the compiler options and the
    target. The one place it is built: `Jitted`'s call looks up what `Lowered.compile`
    stored."""
    return (lowering_key, backend, options_key) + ((target_key,) if target_key else ())


@dataclasses.dataclass(frozen=True, eq=False)
class _Transitions:
    """What `Traced.lower` and `Lowered.compile` call for stages made with `options`; with
    `link` = (function caches, lowering key), through a jit's caches."""

    options: Options
    link: tuple | None = None

    def traced(self, program: Program) -> Traced:
        return Traced(program, self.lower)

    def lower(self, traced: Traced, *, pipeline=None, dump_dir=None, consume=False) -> Lowered:
        """`Traced.lower`: with the options' pipeline and dumps, a jit's trace shares that
        jit's lowering cache; another pipeline or dump folder makes a lowering of its own,
        which compiles outside the jit's caches (their keys do not hold the pipeline)."""
        if pipeline is None and dump_dir is None:
            if self.link is not None:
                cache, key = self.link
                build = lambda: _lower(traced, self, consume)  # noqa: E731
                return _cached_lowering(cache, key, build, self.options.backend)
            return _lower(traced, self, consume)
        options = self.options
        changed = dataclasses.replace(
            options,
            pipeline=pipeline if pipeline is not None else options.pipeline,
            dump_dir=dump_dir if dump_dir is not None else options.dump_dir,
        )
        return _lower(traced, _Transitions(changed), consume)

    def compile(
        self,
        lowered: Lowered,
        backend=None,
        options=None,
        *,
        target=None,
        target_options=None,
        topology=None,
    ) -> Compiled:
        """`Lowered.compile`: on `backend` (default: the jit's, else the default backend),
        or for a TPU `topology` without a TPU. A lowering made by a jit shares its
        function's compile cache."""
        where = f"Lowered.compile({lowered.name})"
        name = backend if backend is not None else lowered.backend
        if topology is not None:
            chosen = compiling.deviceless(where, name, topology)
        else:
            chosen = backends.get(name)
        options_key = compiling.options_key(where, options)
        targeting, target_key = compiling.targeting(where, chosen, target, target_options)
        if topology is not None:
            target_key = (*target_key, ("topology", chosen.topology.name))
        if self.link is None:
            return compiling.compile_lowered(lowered, chosen, options, targeting)
        cache, lowering_key = self.link
        key = _compile_key(lowering_key, chosen.name, options_key, target_key)
        with cache.lock:
            compiled = cache.compiled.get(key)
            if compiled is not None:
                cache.hits += 1
                return compiled
            cache.misses += 1
            compiled = compiling.compile_lowered(lowered, chosen, options, targeting)
            cache.compiles += 1
            if compiled.origin == "persistent cache":
                cache.persistent_hits += 1
            cache.put(cache.compiled, key, compiled)
        return compiled

    def transform(self, lowered: Lowered, kind: str, **options) -> Lowered:
        """`Lowered.grad`, `.vjp`, `.jvp`, `.vmap`: the program called as a function,
        transformed by aotkit's rules, traced in the program's own context and lowered with
        these options (outside any jit's caches)."""
        where = f"Lowered.{kind}({lowered.name})"
        if kind == "specialize":
            # A static program of its own: it compiles outside the jit's caches, whose
            # lowering key is the symbolic program's.
            program = specialize.specialize_program(
                lowered._program, options["sizes"], f"Lowered {lowered.name!r}: specialize"
            )
            transitions = _Transitions(self.options)
            return Lowered(
                program,
                pipeline=lowered.pipeline,
                backend=lowered.backend,
                compile=transitions.compile,
                transform=transitions.transform,
            )
        if lowered.partitioning is not None:
            raise NotImplementedError(
                f"{where}: the program is sharded ({lowered.partitioning.describe()}), and "
                "aotkit transforms single-device programs; transform the function and jit "
                "it with in_shardings/out_shardings instead"
            )
        if is_symbolic(lowered.flat_in_specs) or isinstance(options.get("axis_size"), str):
            return self._pending(lowered, kind, options, where)
        program = lowered._program
        call = transform_functions.call_program(program)
        fn, args, kwargs = transform_functions.stage_function(
            kind, call, lowered.in_specs, lowered.out_specs, where, **options
        )
        fn.__name__ = fn.__qualname__ = f"{lowered.name}_{kind}"
        plain = dataclasses.replace(
            self.options,
            frontend="aotkit",
            autograph=False,
            static_argnums=(),
            static_argnames=(),
            donate_argnums=(),
            in_shardings=None,
            out_shardings=None,
        )
        transitions = _Transitions(plain)
        traced = transitions.traced(trace(fn, args, kwargs, plain, lc=program.lc))
        return transitions.lower(traced, consume=True)

    def _pending(self, lowered: Lowered, kind: str, options: dict, where: str) -> Lowered:
        """The transform of a symbolic program (or a vmap over a symbolic axis): a
        symbolic `Lowered` whose signature is derived from the program's
        (`stage_signature`) and whose module is made per shape, when it compiles (or is
        specialized): the source program refined to the sizes, then the transforms applied
        by the static rules as to any static program (`specialize.Pending`)."""
        program = lowered._program
        signature = transform_functions.stage_signature(kind, lowered.signature, where, **options)
        before = program.pending
        source = before.source if before is not None else program
        transforms = (before.transforms if before is not None else ()) + ((kind, options),)
        transitions = _Transitions(self.options)

        def build(values: dict, where: str) -> Program:
            static = source
            if is_symbolic(source.signature.flat_in_specs):
                known = {s: values[s] for s in _symbols(source.signature)}
                static = specialize.specialize_program(source, known, where)
            step = Lowered(
                static,
                pipeline=lowered.pipeline,
                backend=lowered.backend,
                compile=transitions.compile,
                transform=transitions.transform,
            )
            for step_kind, step_options in transforms:
                size = step_options.get("axis_size")
                if isinstance(size, str):  # a new symbol (`vmap(axis_size="n")`)
                    step_options = {**step_options, "axis_size": values[size]}
                step = transitions.transform(step, step_kind, **step_options)
            made = step._program
            # The derived signature is the one each shape's module has.
            assert (made.signature.in_tree, made.signature.out_tree) == (
                signature.in_tree,
                signature.out_tree,
            ), (made.signature, signature)
            return made

        options = self.options
        key = f"pipeline {options.pipeline!r}, keep_unused {options.keep_unused!r}"
        pending = specialize.Pending(source, transforms, build, key=key)
        # Each shape's program is the tracer's, as a static program's transform is.
        made = source.replace(
            signature=signature, pending=pending, frontend="aotkit", facts=frozenset()
        )
        return Lowered(
            made,
            pipeline=lowered.pipeline,
            backend=lowered.backend,
            compile=transitions.compile,
            transform=transitions.transform,
        )


def _symbols(signature) -> tuple[str, ...]:
    return SymbolicSignature.of(signature.flat_in_specs, signature.flat_out_specs).symbols


# --- Traced -> Lowered ---------------------------------------------------------------------------


def _cached_lowering(cache: _FunctionCache, key: tuple, build, backend: str | None) -> Lowered:
    """The lowering of `key` from the function's cache, else `build()`'s. The key holds no
    backend: one trace serves every backend, and the `Lowered` given out defaults to
    compiling on `backend` (the asking jit's)."""
    with cache.lock:
        lowered = cache.lowered.get(key)
        if lowered is not None:
            cache.hits += 1
        else:
            cache.misses += 1
            lowered = build()
            cache.lowerings += 1
            cache.put(cache.lowered, key, lowered)
    if lowered.backend == backend:
        return lowered
    return Lowered(
        lowered._program,
        pipeline=lowered.pipeline,
        backend=backend,
        compile=lowered._compile,
        transform=lowered._transform,
        dumper=lowered._dumper,
    )


def _lower(traced: Traced, transitions: _Transitions, consume: bool) -> Lowered:
    """The pipeline, donation, verification and dumps of `traced`, on a copy of its module
    unless `consume` (the caller drops `traced`)."""
    options = transitions.options
    pipeline = options.pipeline
    if pipeline is None:
        pipeline = default_pipeline(traced.frontend)
    passes.check_pipeline(pipeline)
    name = traced.name
    dumper = dumps.Dumper.create(
        name, options.dump_dir, print_ir_after_all=options.print_ir_after_all
    )
    program = traced._program if consume else traced._program.clone()
    module = program.module
    with program.lc:
        if dumper is not None:
            dumper.write_module("traced", module)
        timings = passes.run_pipeline(
            module,
            pipeline,
            name=name,
            dumper=dumper,
            verified=True,
            verify=False,
            facts=program.facts,
        )
        donating = any(traced.donated)
        if donating or program.frontend != "aotkit":
            # @main's arguments are the leaves the front end did not prune.
            kept = [i for i in range(len(traced.flat_in_specs)) if i not in program.pruned]
            marked, bad = modules.mark_donated(
                module,
                tuple(traced.donated[i] for i in kept),
                [traced.flat_in_specs[i] for i in kept],
                name,
            )
            donated = [False] * len(traced.flat_in_specs)
            for i, flag in zip(kept, marked, strict=True):
                donated[i] = flag
            donated, unusable = tuple(donated), [kept[j] for j in bad]
        else:  # the tracer's modules carry no donation attributes of their own
            donated, unusable = traced.donated, []
        # Every front end verifies its module: with no pass run and nothing donated, this
        # is that module unchanged (`pipeline="none"`, `load_module`).
        if passes.ran_any(timings) or donating:
            passes.verify_result(module, pipeline, name=name, dumper=dumper)
        if dumper is not None:
            dumper.write_module("final", module)
            if dumper.pass_timing:
                report = passes.format_timing(timings, name=name, pipeline=pipeline)
                dumper.write("pass-timing", report, ext="txt")
        elif dumps.pass_timing_requested():
            sys.stderr.write(passes.format_timing(timings, name=name, pipeline=pipeline))
    if unusable:
        _warn_unusable(name, traced, unusable)
    if donated != program.signature.donated:  # a module's own donation attributes
        program = program.replace(signature=program.signature.replace(donated=donated))
    return Lowered(
        program,
        pipeline=pipeline,
        backend=options.backend,
        compile=transitions.compile,
        transform=transitions.transform,
        dumper=dumper,
    )


def _warn_unusable(name: str, traced: Traced, unusable: list[int]) -> None:
    """JAX's warning for donated arguments no result can reuse, naming them by leaf path."""
    ins = arguments.leaf_names(traced.in_tree, traced.signature.arg_names)
    outs = arguments.output_names(traced.out_tree)
    given = ", ".join(f"{ins[i]}: {traced.flat_in_specs[i]}" for i in unusable)
    results = ", ".join(f"{n}: {s}" for n, s in zip(outs, traced.flat_out_specs, strict=True))
    warnings.warn(
        f"Some donated buffers were not usable: {given}; lowering {name!r}: no result left "
        f"has that shape and dtype for XLA to write into (results: {results or 'none'}); "
        "drop them from donate_argnums, or return a value of their shape and dtype",
        UserWarning,
        stacklevel=user_stacklevel(),
    )


# --- one call: trace and lower ------------------------------------------------------------------


def _with_arg_names(program: Program, fn: Callable, n_args: int, options: Options) -> Program:
    """`program` with its positional arguments named by `fn`'s parameters (`x`, not
    `args[0]`, in reprs and errors: `arguments.parameter_names`)."""
    static = arguments.positions("", "", options.static_argnums, n_args, lenient=True)
    names = arguments.parameter_names(fn, n_args, static)
    signature = program.signature
    if not names or len(names) != len(signature.in_tree.children()[0].children()):
        return program
    return program.replace(signature=signature.replace(arg_names=names))


def trace_function(fn: Callable, args: tuple, kwargs: dict, transitions: _Transitions) -> Traced:
    """Traces `fn` with the front end `transitions.options.frontend` ("auto", "aotkit" or
    "jax") into a `Traced` that lowers through `transitions`; `autograph` converts Python
    control flow on traced values first (aotkit front end)."""
    options = transitions.options
    if frontends.resolve(fn, options.frontend).name == "jax":
        # lazy: the JAX front end imports jax's lowering machinery, which only JAX programs need
        from aotkit.frontends.jax import trace_jax

        program = trace_jax(fn, args, kwargs, options)
        return transitions.traced(_with_arg_names(program, fn, len(args), options))
    if frontends.jax_jit_options(fn) is not None or frontends.is_jax_function(fn):
        name = arguments.function_name(fn)
        raise TypeError(
            f"trace({name}): {name} is a JAX-transformed function (jax.jit, jax.grad, ...), "
            "which aotkit's tracer cannot run; use frontend='jax' (or 'auto') to let JAX "
            "lower it"
        )
    user_fn = fn
    if options.autograph:  # Python loops and branches on traced values -> StableHLO control flow
        fn = autograph.convert(fn)
    try:
        program = trace(fn, args, kwargs, options)
        return transitions.traced(_with_arg_names(program, user_fn, len(args), options))
    except TypeError as e:
        error = _jax_on_tracers(arguments.function_name(fn), e)
        if error is e:
            raise
        # With the frames below this one, down to the user's line that called JAX.
        raise error.with_traceback(e.__traceback__.tb_next) from e
    except InvalidModuleError as e:
        dumper = dumps.Dumper.create(arguments.function_name(fn), options.dump_dir)
        if dumper is not None and e.module is not None:
            dumper.write_module(e.stage, e.module)
        raise InvalidModuleError(f"{e}; {dumps.hint(dumper)}", stage=e.stage) from e.__cause__


# How JAX names a value it cannot take, when that value is one of aotkit's tracers.
_TRACER_TYPE = f"<class '{core.Tracer.__module__}.{core.Tracer.__qualname__}'>"


def _jax_on_tracers(name: str, error: TypeError) -> TypeError:
    """`error` itself, unless it is JAX refusing one of aotkit's tracers (a function that
    calls jax.numpy or jax.lax, traced by aotkit's tracer): then the error that says to
    let JAX lower the function."""
    text = str(error)
    if _TRACER_TYPE not in text or "frontend='jax'" in text:
        return error
    return TypeError(
        f"trace({name}): {name} calls JAX (jax.numpy, jax.lax, ...) on aotkit's traced "
        f"values, which JAX cannot take ({text.splitlines()[0]}); pass frontend='jax' to let "
        f"JAX lower {name}, or write it with aotkit.numpy"
    )


def lower_function(fn: Callable, args: tuple, kwargs: dict, **options) -> Lowered:
    """`aotkit.lower` with the function's arguments as a tuple and a dict: traces `fn` on
    `args`/`kwargs` (values or specs) and lowers it with `options` (those of `jit`)."""
    checked = check_options("lower", fn, **options)
    fn = frontends.for_transform(fn, checked.frontend)
    return _Transitions(checked).lower(
        trace_function(fn, args, kwargs, _Transitions(checked)), consume=True
    )


@api_boundary
def lower(
    fn: Callable,
    *args,
    static_argnums=(),
    static_argnames=(),
    donate_argnums=(),
    backend: str | None = None,
    pipeline: str | None = None,
    dump_dir: str | os.PathLike | None = None,
    print_ir_after_all: bool | None = None,
    frontend: str = "auto",
    autograph: bool = True,
    in_shardings=None,
    out_shardings=None,
    keep_unused: bool = False,
    **kwargs,
) -> Lowered:
    """Lowers `fn` for the given arguments (concrete values or `aotkit.ShapeDtype` specs),
    then runs `pipeline` ("default", "none" or MLIR pipeline text) on the module.

    Takes the options of `jit`, with the same meaning and checks: `aotkit.lower(f, *args,
    **options)` is `jit(f, **options).lower(*args)` without the jit caches. The other
    keyword arguments go to `fn`. `dump_dir` (default `AOTKIT_DUMP_DIR`) writes each stage's
    module there, one file per pass with `print_ir_after_all` (default
    `AOTKIT_PRINT_IR_AFTER_ALL`); `Lowered.dump_paths` lists them.

    `aotkit.lower(lambda x: anp.sqrt(x ** 2) + 1., aotkit.spec("f32[]")).as_text()`
    """
    if not callable(fn):
        raise TypeError(f"lower: expected a function, got {type(fn).__name__}")
    options = check_options(
        "lower",
        fn,
        static_argnums=static_argnums,
        static_argnames=static_argnames,
        donate_argnums=donate_argnums,
        backend=backend,
        pipeline=pipeline,
        dump_dir=dump_dir,
        print_ir_after_all=print_ir_after_all,
        frontend=frontend,
        autograph=autograph,
        in_shardings=in_shardings,
        out_shardings=out_shardings,
        keep_unused=keep_unused,
    )
    fn = frontends.for_transform(fn, options.frontend)
    # Spec strings ("f32[4,3]") stand for specs, as on the command line.
    args, kwargs = arguments.spec_strings(
        "lower", fn, args, kwargs, options.static_argnums, options.static_argnames
    )
    transitions = _Transitions(options)
    return transitions.lower(trace_function(fn, args, kwargs, transitions), consume=True)


@api_boundary
def load_module(
    source,
    *,
    name: str | None = None,
    platform: str | None = None,
    pipeline: str = "none",
    dump_dir: str | os.PathLike | None = None,
    print_ir_after_all: bool | None = None,
) -> Lowered:
    """Loads a StableHLO module (text, bytecode, portable artifact, jax.export artifact).

    `source` is a path (str or os.PathLike) or the file's bytes. `name` overrides the module
    name (default: the exported function's name, the module's own `sym_name`, or the file
    stem). Returns a `Lowered` whose `in_specs`/`out_specs` come from `@main`, after
    `pipeline` (default "none": the module runs as written), with the dumps of `lower`.
    Compile it with `.compile(backend=...)`. A jax.export artifact exported for several
    platforms (`platforms=("cpu", "cuda")`) keeps the lowering for `platform` ("cpu",
    "cuda", ...; default: the default backend's platform): compile it for a backend of that
    platform.
    """
    options = check_options(
        "load_module",
        None,
        pipeline=pipeline,
        dump_dir=dump_dir,
        print_ir_after_all=print_ir_after_all,
    )
    program = files.read_module(source, name=name, platform=platform)
    transitions = _Transitions(options)
    return transitions.lower(transitions.traced(program), consume=True)


# --- compile and jit: the staged calls and their caches --------------------------------------
#
# Caches live per function, not per `jit(fn)` object, so that `jit(f).lower(x).compile()` and
# a later `jit(f)(x)` (two Jitted objects) share one trace and one compile. A lowering is keyed
# by the argument tree, each leaf's (shape, dtype) (a ShapeDtype and an array of that spec key
# alike; a Python scalar keys as its weak type), the static values and the jit configuration
# (statics, donation, backend, pipeline, front end); a compile by its lowering, the backend
# and the options. Each function's caches have one lock; a miss holds it while tracing and
# compiling, so concurrent first calls do the work once.


class CacheInfo(NamedTuple):
    """Counters of one function's caches, shared by every `jit` of that function.

    `traces` counts every trace (a `jit(f).trace(...)` too), `lowerings` the traces lowered
    into a cached `Lowered`, `compiles` the backend compiles; `hits` and `misses` count the
    lookups of the lowering and compile caches made in Python. A call whose argument
    signature jaxlib's C++ dispatch has already cached runs without entering Python and is
    not counted. Each cache keeps at most `aotkit.config` `jit_cache_size` entries (least
    recently used evicted); `entries` is how many `Lowered` and `Compiled` it holds now,
    `evictions` how many it dropped.
    """

    traces: int
    lowerings: int
    compiles: int
    hits: int
    misses: int
    # The compiles (counted in `compiles` too) that loaded their executable from the
    # persistent cache (aotkit/cache.py) instead of running the backend's compiler.
    persistent_hits: int = 0
    entries: int = 0
    evictions: int = 0


class _LRU:
    """A mapping that keeps its `capacity` most recently used entries."""

    __slots__ = ("items",)

    def __init__(self):
        self.items: collections.OrderedDict = collections.OrderedDict()

    def get(self, key):
        value = self.items.get(key)
        if value is not None:
            self.items.move_to_end(key)
        return value

    def put(self, key, value) -> int:
        """Stores `value`; returns how many entries were evicted to stay within capacity."""
        self.items[key] = value
        self.items.move_to_end(key)
        evicted = 0
        while len(self.items) > config.get("jit_cache_size"):
            self.items.popitem(last=False)
            evicted += 1
        return evicted

    def __len__(self) -> int:
        return len(self.items)


class _FunctionCache:
    __slots__ = (
        "lock",
        "lowered",
        "compiled",
        "traces",
        "lowerings",
        "compiles",
        "hits",
        "misses",
        "persistent_hits",
        "evictions",
        "jitted",
        "__weakref__",
    )

    def __init__(self):
        self.lock = threading.RLock()
        self.lowered = _LRU()
        self.compiled = _LRU()
        self.traces = self.lowerings = self.compiles = self.hits = self.misses = 0
        self.persistent_hits = self.evictions = 0
        # The jit objects of this function: an eviction clears their C++ dispatch caches,
        # which would otherwise keep the evicted executables alive.
        self.jitted: weakref.WeakSet = weakref.WeakSet()

    def put(self, table: _LRU, key, value) -> None:
        """Stores an entry (caller holds `lock`), evicting the least recently used."""
        evicted = table.put(key, value)
        if evicted:
            self.evictions += evicted
            for jitted in list(self.jitted):
                jitted._clear_native_cache()

    def info(self) -> CacheInfo:
        with self.lock:
            return CacheInfo(
                self.traces,
                self.lowerings,
                self.compiles,
                self.hits,
                self.misses,
                self.persistent_hits,
                len(self.lowered) + len(self.compiled),
                self.evictions,
            )


_function_caches: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_caches_lock = threading.Lock()


def _cache_for(fn: Callable) -> _FunctionCache:
    """The caches shared by every jit of `fn`. A callable that cannot be weakly referenced
    (an object with `__slots__` and no `__weakref__`) gets caches of its own jit object:
    a shared table would keep it alive after the user drops it."""
    with _caches_lock:
        try:
            cache = _function_caches.get(fn)
            if cache is None:
                cache = _function_caches[fn] = _FunctionCache()
        except TypeError:  # not weakly referenceable (or unhashable)
            cache = _FunctionCache()
    return cache


def _scalar_key(kind: type) -> tuple:
    # A Python scalar argument is a weak 0-d value of the configured width.
    return ((), dtypes.scalar_argument_dtype(kind), "weak")


def _leaf_key(x):
    """(shape, dtype) of an argument leaf, equal for a ShapeDtype and an array of that spec."""
    t = type(x)
    if t in dtypes.WEAK_RANK:
        return _scalar_key(t)
    if t is ShapeDtype:
        return (x.shape, x.dtype)
    shape = getattr(x, "shape", None)
    dtype = getattr(x, "dtype", None)
    if shape is not None and dtype is not None:
        return (tuple(shape), dtype)
    kind = dtypes.weak_kind(x)
    if kind is not None:
        return _scalar_key(kind)
    return (t,)  # not an array: lowering it raises the error


def _static_key(where: str, static_pos: dict, static_kw: dict, fn: Callable | None = None) -> tuple:
    items = [(f"args[{i}]", v) for i, v in static_pos.items()]
    items += [(f"kwargs[{k!r}]", static_kw[k]) for k in sorted(static_kw)]
    for path, value in items:
        try:
            hash(value)
        except TypeError:
            if path.startswith("kwargs["):
                path = path[len("kwargs['") : -len("']")]
            elif fn is not None:  # named by its parameter, as the other errors name it
                i = int(path[len("args[") : -1])
                names = arguments.parameter_names(fn, i + 1)
                path = names[i] if len(names) > i and names[i] is not None else path
            raise TypeError(
                f"{where}: static argument {path} = {value!r} is not hashable "
                f"({type(value).__name__}); pass a hashable value (a tuple instead of a list) "
                "or make it a dynamic argument"
            ) from None
    return tuple((path, _static_token(value)) for path, value in items)


def _static_token(value):
    """A key equal only for static values that trace alike. Python's equality is not enough:
    1, 1.0 and True are equal but trace differently (so are (2,) and (2.0,)), and 0.0 ==
    -0.0; floats key by their bits (which also makes a NaN equal to itself)."""
    t = type(value)
    if t is float:
        return (t, value.hex())
    if t is complex:
        return (t, value.real.hex(), value.imag.hex())
    if t is tuple or t is list or t is frozenset:
        items = sorted(value, key=repr) if t is frozenset else value
        return (t, tuple(_static_token(v) for v in items))
    if isinstance(value, np.generic):
        return (t, value.tobytes())
    return (t, value)


def _shardings_key(where: str, name: str, shardings) -> tuple:
    """A hashable key of an `in_shardings`/`out_shardings` pytree for the jit caches."""
    if shardings is None:
        return ()
    leaves, tree = tree_util.tree_flatten(shardings, is_leaf=spmd.is_sharding_leaf)
    try:
        hash(tuple(leaves))
    except TypeError:
        raise TypeError(
            f"{where}: {name} holds an unhashable leaf ({shardings!r}); its leaves are "
            "NamedSharding, PartitionSpec or None"
        ) from None
    return (tree, tuple(leaves))


class Jitted(_native.Dispatching):
    """`jit(fn)`: call it to trace, lower, compile and run; `.trace`/`.lower` for the stages.

    `jitted(*args, **kwargs)` runs `fn` compiled for these arguments' signature: it calls
    `_dispatch` (`_native.Dispatching`). Without static arguments, jaxlib's C++ dispatch sits
    there (as under `jax.jit`): a signature seen before runs its cached executable without
    entering Python; every other call takes the checked Python path (`_python_call`).

    Called inside a function aotkit is tracing, it traces `fn` into the outer program
    (inline), as `jax.jit` does.
    """

    def __init__(self, fn: Callable, options: Options):
        """`jit(fn, **options)` (use `jit`): `options` are checked by `check_options`."""
        if not callable(fn):
            raise TypeError(f"jit: expected a function, got {type(fn).__name__}")
        fn = frontends.for_transform(fn, options.frontend)
        self.fn = fn
        self.__name__ = arguments.function_name(fn)
        self.__doc__ = getattr(fn, "__doc__", None)
        self.__wrapped__ = fn
        where = f"jit({self.__name__})"
        self.options = options
        self._lenient_statics = frontends.statics_from_jax(
            frontends.jax_jit_options(fn) if options.frontend != "aotkit" else None,
            options.static_argnums,
            options.static_argnames,
        )
        # The options with `frontend` resolved, found at the first trace ("auto" reads the
        # function's globals, which a module still importing may not have yet).
        self._resolved: Options | None = None
        self._where = where
        self._has_statics = bool(options.static_argnums or options.static_argnames)
        # What the lowering cache key holds of the options (the dumps change no program, and
        # a program serves every backend: a compile's key names its backend).
        self._config = (
            options.static_argnums,
            options.static_argnames,
            options.donate_argnums,
            options.pipeline,
            options.frontend,
            options.autograph,
            _shardings_key(where, "in_shardings", options.in_shardings),
            _shardings_key(where, "out_shardings", options.out_shardings),
            options.keep_unused,
        )
        self._cache = _cache_for(fn)
        self._backend_name: str | None = None
        # The backend's native dispatcher (`Backend.jit_dispatcher`) goes in front of the
        # checked call at the first call: `jit` starts no backend before it is called.
        self._native = None
        self._dispatch = self._python_call if self._has_statics else self._first_call
        self._cache.jitted.add(self)

    # The options under jax.jit's attribute names.
    static_argnums = property(lambda self: self.options.static_argnums)
    static_argnames = property(lambda self: self.options.static_argnames)
    donate_argnums = property(lambda self: self.options.donate_argnums)

    def _clear_native_cache(self) -> None:
        if self._native is not None:
            self._native.clear_cache()

    def _first_call(self, *args, **kwargs):
        """The first call (without static arguments): puts the backend's native dispatcher,
        if it has one, in front of the checked call, and makes this call through it."""
        try:
            if core.is_tracing():
                return self._inline(args, kwargs)
            backend = backends.get(self.options.backend)
            native = backend.jit_dispatcher(self.__name__, self._python_call, self._native_run)
            self._native = native
            self._dispatch = native if native is not None else self._python_call
            return self._dispatch(*args, **kwargs)
        except Exception as e:
            filter_exception(e)
            raise

    def _keys(self, args: tuple, kwargs: dict):
        """(flat dynamic leaves, lowering key) for a call."""
        if self._has_statics:
            dyn_args, dyn_kwargs, static_pos, static_kw = arguments.split_static(
                self._where,
                args,
                kwargs,
                self.static_argnums,
                self.static_argnames,
                self._lenient_statics,
            )
            statics = _static_key(self._where, static_pos, static_kw, self.fn)
        else:
            dyn_args, dyn_kwargs, statics, static_pos = args, kwargs, (), {}
        leaves, tree = arguments.flatten(
            self._where,
            (dyn_args, dyn_kwargs),
            lambda: arguments.parameter_names(self.fn, len(args), static_pos),
        )
        # The precision in force traces the dots and convolutions that name none: a key part
        # (jaxlib's C++ dispatch keys on it too: aotkit/config.py).
        precision = config.matmul_precision()
        key = (tree, tuple(map(_leaf_key, leaves)), statics, self._config, precision)
        return leaves, key

    def _transitions(self, key: tuple) -> _Transitions:
        """The transitions of this jit's stages for the lowering key `key`: its options
        (with the front end resolved) and its function's caches."""
        return _Transitions(self._resolved_options(), (self._cache, key))

    def _trace(self, args: tuple, kwargs: dict, transitions: _Transitions) -> Traced:
        traced = trace_function(self.fn, args, kwargs, transitions)
        with self._cache.lock:
            self._cache.traces += 1
        return traced

    @api_boundary
    def trace(self, *args, **kwargs) -> Traced:
        """The `Traced` stage for these arguments (values or ShapeDtype specs): the module
        before any pass pipeline. `.lower()` on it shares this function's caches."""
        args, kwargs = self._spec_strings(args, kwargs)
        _, key = self._keys(args, kwargs)
        return self._trace(args, kwargs, self._transitions(key))

    @api_boundary
    def eval_shape(self, *args, **kwargs):
        """The result pytree for these arguments with ShapeDtype leaves (`.shape`, `.dtype`,
        as JAX's `ShapeDtypeStruct`), from a trace: nothing is lowered, compiled or run."""
        return self.trace(*args, **kwargs).out_specs

    def clear_cache(self) -> None:
        """Forgets every lowering and executable cached for this function (by every jit of
        it, as JAX's `clear_cache` does), and the native dispatch's entries; the next call
        traces again. The persistent cache on disk is kept (`aotkit.cache.clear()`)."""
        cache = self._cache
        with cache.lock:
            cache.lowered.items.clear()
            cache.compiled.items.clear()
            for jitted in list(cache.jitted):
                jitted._clear_native_cache()

    @api_boundary
    def lower(self, *args, **kwargs) -> Lowered:
        """The `Lowered` stage for these arguments (concrete values or ShapeDtype specs,
        spec strings such as "f32[4,3]" included)."""
        args, kwargs = self._spec_strings(args, kwargs)
        _, key = self._keys(args, kwargs)
        return self._lower(args, kwargs, key)

    def _spec_strings(self, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        """`arguments.spec_strings` for this jit's static arguments."""
        return arguments.spec_strings(
            self._where,
            self.fn,
            args,
            kwargs,
            self.static_argnums,
            self.static_argnames,
            self._lenient_statics,
        )

    def _lower(self, args: tuple, kwargs: dict, key: tuple) -> Lowered:
        transitions = self._transitions(key)
        return _cached_lowering(
            self._cache,
            key,
            lambda: _lower(self._trace(args, kwargs, transitions), transitions, True),
            self.options.backend,
        )

    def _python_call(self, *args, **kwargs):
        # The call is an entry point (aotkit/_traceback.py); a try costs nothing until it
        # catches, where a decorator would add a frame to every call.
        try:
            if core.is_tracing():
                return self._inline(args, kwargs)
            # One structure keys, checks and runs the call, whatever another thread does to
            # the caller's lists meanwhile (issue 43).
            args, kwargs = _native.snapshot(args), _native.snapshot(kwargs)
            compiled, leaves = self._compiled(args, kwargs)
            if not self._has_statics:
                return compiled._python_call(*args, **kwargs)
            outs = compiled.call_flat(leaves)
            if compiled._single_out:
                return outs[0]
            return compiled.out_tree.unflatten(outs)
        except Exception as e:
            filter_exception(e)
            raise

    def _compiled(self, args: tuple, kwargs: dict) -> tuple[Compiled, list]:
        """The Compiled for a call (from the caches, or traced, lowered and compiled)."""
        leaves, key = self._keys(args, kwargs)
        backend_name = self._backend_name
        if backend_name is None:
            backend_name = self._backend_name = backends.get(self.options.backend).name
        cache = self._cache
        with cache.lock:
            compiled = cache.compiled.get(_compile_key(key, backend_name))
            if compiled is not None:
                cache.hits += 1
        if compiled is None:
            compiled = self._lower(args, kwargs, key).compile(backend_name)
        return compiled, leaves

    def _native_run(self, x64: bool, args: tuple, kwargs: dict):
        """The C++ dispatch's miss handler: the checked call, and what to cache for it."""
        try:
            if core.is_tracing():
                return self._inline(args, kwargs), None
            compiled, _ = self._compiled(args, kwargs)
            out = compiled._python_call(*args, **kwargs)
        except Exception as e:
            filter_exception(e)
            raise
        return out, compiled._executable.fastpath(out, args, kwargs, x64)

    def _inline(self, args: tuple, kwargs: dict):
        """A call inside a trace: `fn` is traced into the outer program (donation is the
        outer program's business, as in JAX)."""
        options = self._resolved_options()
        if options.frontend == "jax" and not (options.static_argnums or options.static_argnames):
            # JAX lowers `fn` for the traced values' shapes, its module inlined.
            return transform_functions.call_jax(self.fn, self._where, args, kwargs)
        if options.frontend == "jax":
            raise TypeError(
                f"{self._where}: a JAX function (frontend='jax') with static arguments was "
                "called inside a function aotkit is tracing, which passes it traced arrays "
                "only; close over the static values (functools.partial), or jit the whole "
                "program with frontend='jax'"
            )
        return self.fn(*args, **kwargs)

    def _resolved_options(self) -> Options:
        """`options` with the front end `frontend` resolves to (see `_resolved`)."""
        options = self._resolved
        if options is None:
            options = self.options
            name = frontends.resolve(self.fn, options.frontend).name
            if options.frontend != name:
                options = dataclasses.replace(options, frontend=name)
            self._resolved = options
        return options

    def cache_info(self) -> CacheInfo:
        """Traces, lowerings, compiles, cache hits and misses of this function so far."""
        return self._cache.info()

    def __repr__(self) -> str:
        return f"<aotkit.jit {self.__name__}>"


def jit(
    fn: Callable | None = None,
    *,
    static_argnums=(),
    static_argnames=(),
    donate_argnums=(),
    backend: str | None = None,
    pipeline: str | None = None,
    dump_dir: str | os.PathLike | None = None,
    print_ir_after_all: bool | None = None,
    frontend: str = "auto",
    autograph: bool = True,
    in_shardings=None,
    out_shardings=None,
    keep_unused: bool = False,
):
    """Stages `fn`: `jit(f)(x)` runs it compiled; `jit(f).lower(x).compile()` shows each stage.

    Usable as `@jit` or `@jit(static_argnums=...)`. Arguments in `static_argnums` /
    `static_argnames` are Python values baked into the trace (hashable); `donate_argnums`
    marks arguments whose buffers the computation may reuse for its results. Python scalar
    arguments are weakly typed 32-bit values (see `aotkit.config`). `pipeline` is a named or
    MLIR pass pipeline (by default "default" for traced programs and "none" for modules JAX
    lowers, which then equal jax.jit's bit for bit; see `default_pipeline`), `dump_dir`
    turns on per-stage dumps (one file per pass with `print_ir_after_all`), and `frontend`
    says who traces: "auto" (the default, as in the CLI: JAX lowers `fn` when it uses JAX
    and not aotkit, see `aotkit.frontends.choose`), "aotkit" (the tracer) or "jax" (JAX
    lowers `fn`). A function
    the tracer runs that calls jax.numpy on traced values is a TypeError that says to pass
    `frontend="jax"`. `autograph` (on by default)
    turns Python loops and branches on traced values into StableHLO control flow (see
    aotkit.autograph); `autograph=False` unrolls loops and keeps branches Python.

    `in_shardings` (a pytree prefix of the positional arguments) and `out_shardings` (of the
    result) shard the program over a mesh, with JAX's public types (`aotkit.sharding`):
    leaves are `NamedSharding`, `PartitionSpec` (over the mesh of the other shardings) or
    None (arguments: replicated; results: the compiler decides). XLA's SPMD partitioner
    partitions the program for the mesh's devices; see aotkit.sharding.

    A module JAX lowers is jax.jit's: arguments the program does not use (and with them
    dead loop carries) are pruned from its body as jax.jit prunes them, and stay arguments
    of `@main` that the program ignores, so that the call takes every argument;
    `keep_unused=True` lowers with `jax.jit(fn, keep_unused=True)` instead.
    """
    given = dict(
        static_argnums=static_argnums,
        static_argnames=static_argnames,
        donate_argnums=donate_argnums,
        backend=backend,
        pipeline=pipeline,
        dump_dir=dump_dir,
        print_ir_after_all=print_ir_after_all,
        frontend=frontend,
        autograph=autograph,
        in_shardings=in_shardings,
        out_shardings=out_shardings,
        keep_unused=keep_unused,
    )
    if fn is None:
        return functools.partial(jit, **given)
    if not callable(fn):
        raise TypeError(f"jit: expected a function, got {type(fn).__name__}")
    return Jitted(fn, check_options(f"jit({arguments.function_name(fn)})", fn, **given))
