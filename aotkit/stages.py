"""The staged API: trace -> `Traced` -> `.lower()` -> `Lowered` -> `.compile()` -> `Compiled`.

Each stage is an immutable value the user can hold, print and dump. Front ends (the
tracer, JAX, files) return a `Traced`; this module alone turns it into a `Lowered`, in one
order for every front end: the pass pipeline, then donation, then verification, then the
dumps, so what is dumped is what the backend gets (`lower_traced`). `jit` adds caches
shared by every `jit` of the same function.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import operator
import os
import sys
import threading
import warnings
import weakref
from collections.abc import Callable
from typing import NamedTuple

import numpy as np
from jax import tree_util
from jaxlib.mlir import ir

from aotkit import (
    _context,
    backends,
    config,
    dtypes,
    dumps,
    frontends,
    lowering,
    modules,
    passes,
    spmd,
)
from aotkit import cache as persistent_cache
from aotkit._traceback import api_boundary, filter_exception, user_stacklevel
from aotkit.backends.base import Backend
from aotkit.backends.pjrt import native_dispatcher
from aotkit.compiled import Compiled
from aotkit.errors import CompileError, InvalidModuleError
from aotkit.frontends import signature
from aotkit.lowering import core
from aotkit.specs import ShapeDtype
from aotkit.traced import ModuleStage, Traced

# The tracer dispatches plain NumPy calls through the op families' registry: load them all
# (`import aotkit` alone no longer does; see aotkit/__init__.py).
lowering.load_families()


class Lowered(ModuleStage):
    """A program lowered to a verified StableHLO module, after its pass pipeline."""

    __slots__ = (
        "_module",
        "_lc",
        "name",
        "in_tree",
        "out_tree",
        "flat_in_specs",
        "flat_out_specs",
        "donated",
        "pipeline",
        "backend",
        "frontend",
        "_dumper",
        "_cache_link",
        "partitioning",
    )

    def __init__(
        self,
        module,
        lc: _context.LoweringContext,
        *,
        name: str,
        in_tree,
        out_tree,
        flat_in_specs: tuple[ShapeDtype, ...],
        flat_out_specs: tuple[ShapeDtype, ...],
        donated: tuple[bool, ...] = (),
        pipeline: str = "none",
        backend: str | None = None,
        frontend: str = "aotkit",
        dumper: dumps.Dumper | None = None,
        cache_link: tuple | None = None,
        partitioning=None,
    ):
        self._init(
            _module=module,
            _lc=lc,
            name=name,
            in_tree=in_tree,
            out_tree=out_tree,
            flat_in_specs=tuple(flat_in_specs),
            flat_out_specs=tuple(flat_out_specs),
            donated=tuple(donated) or (False,) * len(flat_in_specs),
            pipeline=pipeline,
            backend=backend,
            # Which front end produced the module: "aotkit" (the tracer), "jax" or "file".
            frontend=frontend,
            # The compile step writes its stages (optimized HLO, cost) after the lowering's.
            _dumper=dumper,
            # (function cache, key) of a lowering made through jit: compiles share its cache.
            _cache_link=cache_link,
            # How the program is sharded (aotkit/spmd.py), or None for one device.
            partitioning=partitioning,
        )

    @api_boundary
    def compile(
        self,
        backend: str | None = None,
        options: dict | None = None,
        *,
        target: str | None = None,
        target_options: dict | None = None,
    ) -> Compiled:
        """Compiles on `backend` (default: the one given to jit, else `cpu`) into `Compiled`.

        `options` are the backend compiler's flags (XLA's, e.g.
        `{"xla_cpu_enable_fast_math": True}`; iree-compile's for `iree`); an unknown one is a
        ValueError. `target` and `target_options` choose what a cross-compiling backend
        compiles for (`iree`: "llvm-cpu", "cuda", "rocm", "vulkan-spirv"); other backends
        refuse them. A backend that rejects the module raises `aotkit.CompileError`.
        A sharded program is partitioned by XLA for its mesh's devices (a module file's
        mesh goes on the backend's first devices).
        """
        return compile_lowered(self, backend, options, target=target, target_options=target_options)

    @api_boundary
    def cost_analysis(self, backend: str | None = None) -> dict[str, float] | None:
        """XLA's cost estimate of the module before compiling ('flops', 'bytes accessed',
        ...; what JAX's `Lowered.cost_analysis()` gives), for `backend` (default: the jit's,
        else the default backend), or None where the backend has none (interpreter, iree).
        `Compiled.cost_analysis()` is the estimate of the optimized program."""
        chosen = backends.get(backend if backend is not None else self.backend)
        with self._lc:
            return chosen.estimate_cost(self._module)

    @property
    def dump_paths(self) -> tuple:
        """The files dumped for this lowering so far (its compiles add theirs), or ()."""
        return tuple(self._dumper.paths) if self._dumper is not None else ()

    def __repr__(self) -> str:
        return f"<Lowered {self._signature_text()}>"


# --- Traced -> Lowered ---------------------------------------------------------------------------


def lower_traced(
    traced: Traced,
    *,
    pipeline: str | None = None,
    dump_dir: str | os.PathLike | None = None,
    print_ir_after_all: bool | None = None,
    consume: bool = False,
) -> Lowered:
    """The `Lowered` stage of `traced`: pipeline, donation, verification, dumps, in order.

    `pipeline`, `dump_dir` and `print_ir_after_all` default to what the jit that traced it
    was given; with those defaults, a trace made by jit shares that jit's lowering cache.
    The pipeline runs on a copy of the traced module, unless `consume` (the caller drops
    `traced`).
    """
    link = traced._defaults.get("cache_link")
    if link is not None and pipeline is dump_dir is print_ir_after_all is None:
        cache, key = link
        return _cached_lowering(cache, key, lambda: _lower(traced, None, None, None, consume))
    return _lower(traced, pipeline, dump_dir, print_ir_after_all, consume)


def default_pipeline(frontend: str) -> str:
    """The pipeline a stage runs unless told otherwise: "default" for programs aotkit's
    tracer wrote, "none" for modules JAX lowered. JAX already ran its own passes, and any
    rewrite (even `cse`, which merges only identical ops) changes XLA's fusion choices and
    with them floating-point results; run as written, a JAX module compiles to what jax.jit
    compiles, bit for bit."""
    return "none" if frontend == "jax" else "default"


def _cached_lowering(cache: _FunctionCache, key: tuple, build) -> Lowered:
    with cache.lock:
        lowered = cache.lowered.get(key)
        if lowered is not None:
            cache.hits += 1
            return lowered
        cache.misses += 1
        lowered = build()
        cache.lowerings += 1
        cache.put(cache.lowered, key, lowered)
    return lowered


def _lower(traced: Traced, pipeline, dump_dir, print_ir_after_all, consume: bool) -> Lowered:
    defaults = traced._defaults
    if pipeline is None:
        pipeline = defaults.get("pipeline")
    if pipeline is None:
        pipeline = default_pipeline(traced.frontend)
    passes.check_pipeline(pipeline)
    if dump_dir is None:
        dump_dir = defaults.get("dump_dir")
    if print_ir_after_all is None:
        print_ir_after_all = defaults.get("print_ir_after_all")
    name = traced.name
    dumper = dumps.Dumper.create(name, dump_dir, print_ir_after_all=print_ir_after_all)
    lc = traced._lc
    with lc:
        module = traced._module if consume else traced._module.operation.clone()
        if dumper is not None:
            dumper.write_module("traced", module)
        timings = passes.run_pipeline(
            module,
            pipeline,
            name=name,
            dumper=dumper,
            verified=True,
            verify=False,
            facts=traced.facts,
        )
        donated, unusable = _mark_donated(module, traced.donated, traced.flat_in_specs, name)
        # Every front end verifies its module: with no pass run and nothing donated, this
        # is that module unchanged (`pipeline="none"`, `load_module`).
        if timings or any(traced.donated):
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
    return Lowered(
        module,
        lc,
        name=name,
        in_tree=traced.in_tree,
        out_tree=traced.out_tree,
        flat_in_specs=traced.flat_in_specs,
        flat_out_specs=traced.flat_out_specs,
        donated=donated,
        pipeline=pipeline,
        backend=defaults.get("backend"),
        frontend=traced.frontend,
        dumper=dumper,
        cache_link=defaults.get("cache_link"),
        partitioning=traced.partitioning,
    )


def _mark_donated(
    module, flags: tuple[bool, ...], in_specs, name: str
) -> tuple[tuple[bool, ...], list[int]]:
    """Gives each donated argument of `@main` its aliasing attribute; returns the donated
    flags of the module (attributes a front end already wrote count too) and the arguments
    it could pair with no result.

    A donated argument without one gets `tf.aliasing_output = k` for the first result of its
    spec no other argument aliases (XLA then writes that result into the argument's
    buffer), or `jax.buffer_donor = true` when no result matches: XLA reuses a donated
    buffer only for a result of its shape and dtype, so such a donation is unusable. The
    caller is inside `with lc:` for the module's context.
    """
    main = modules.main_function(module)
    unusable: list[int] = []
    if "arg_attrs" not in main.attributes:
        if not any(flags):
            return flags, unusable  # the common case: nothing donated, by the caller or module
        old = []
    else:
        old = list(ir.ArrayAttr(main.attributes["arg_attrs"]))
    # Names first: the values are read (by name) only when an attribute is added, since
    # `NamedAttribute.attr` of a complex dense value (a file may hold one) ends the process.
    names = [
        [a.name for a in ir.DictAttr(old[i])] if i < len(old) else [] for i in range(len(in_specs))
    ]
    present = [any(k in n for k in modules.DONATION_ATTRS) for n in names]
    wanted = [f and not p for f, p in zip(flags, present, strict=True)]
    if any(wanted):
        entries = [{k: ir.DictAttr(old[i])[k] for k in n} for i, n in enumerate(names)]
        out_specs = modules.signature(module, f"module {name!r}")[1]
        claimed = {
            ir.IntegerAttr(e["tf.aliasing_output"]).value
            for e in entries
            if "tf.aliasing_output" in e
        }
        for i, spec in enumerate(in_specs):
            if not wanted[i]:
                continue
            match = next(
                (j for j, out in enumerate(out_specs) if out == spec and j not in claimed), None
            )
            if match is None:
                entries[i]["jax.buffer_donor"] = ir.BoolAttr.get(True)
                unusable.append(i)
            else:
                claimed.add(match)
                entries[i]["tf.aliasing_output"] = ir.IntegerAttr.get(
                    ir.IntegerType.get_signless(32), match
                )
        main.attributes["arg_attrs"] = ir.ArrayAttr.get([ir.DictAttr.get(e) for e in entries])
    return tuple(f or p for f, p in zip(flags, present, strict=True)), unusable


def _warn_unusable(name: str, traced: Traced, unusable: list[int]) -> None:
    """JAX's warning for donated arguments no result can reuse, naming them by leaf path."""
    ins = signature.leaf_names(traced.in_tree)
    outs = signature.output_names(traced.out_tree)
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


def trace_function(
    fn: Callable,
    args: tuple,
    kwargs: dict,
    *,
    static_argnums=(),
    static_argnames=(),
    donate_argnums=(),
    frontend: str = "auto",
    defaults: dict | None = None,
    autograph: bool = True,
    in_shardings=None,
    out_shardings=None,
) -> Traced:
    """Traces `fn` with the front end `frontend` ("auto", "aotkit" or "jax") into `Traced`;
    `autograph` converts Python control flow on traced values first (aotkit front end).
    `in_shardings`/`out_shardings` shard the program (see `jit`)."""
    options = dict(
        static_argnums=static_argnums,
        static_argnames=static_argnames,
        donate_argnums=donate_argnums,
        defaults=defaults,
        in_shardings=in_shardings,
        out_shardings=out_shardings,
    )
    if frontends.resolve(fn, frontend).name == "jax":
        from aotkit.frontends.jax import trace_jax

        return trace_jax(fn, args, kwargs, **options)
    from aotkit.lowering.trace import trace

    if frontends.jax_jit_options(fn) is not None or frontends.is_jax_function(fn):
        name = signature.function_name(fn)
        raise TypeError(
            f"trace({name}): {name} is a JAX-transformed function (jax.jit, jax.grad, ...), "
            "which aotkit's tracer cannot run; use frontend='jax' (or 'auto') to let JAX "
            "lower it"
        )
    if autograph:  # Python loops and branches on traced values -> StableHLO control flow
        from aotkit.autograph import convert

        fn = convert(fn)
    try:
        return trace(fn, args, kwargs, **options)
    except TypeError as e:
        error = _jax_on_tracers(signature.function_name(fn), e)
        if error is e:
            raise
        # With the frames below this one, down to the user's line that called JAX.
        raise error.with_traceback(e.__traceback__.tb_next) from e
    except InvalidModuleError as e:
        defaults = defaults or {}
        dumper = dumps.Dumper.create(signature.function_name(fn), defaults.get("dump_dir"))
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


def lower_function(
    fn: Callable,
    args: tuple,
    kwargs: dict,
    *,
    static_argnums=(),
    static_argnames=(),
    donate_argnums=(),
    pipeline: str | None = None,
    backend: str | None = None,
    dump_dir: str | os.PathLike | None = None,
    frontend: str = "auto",
    print_ir_after_all: bool | None = None,
    autograph: bool = True,
    in_shardings=None,
    out_shardings=None,
) -> Lowered:
    """Traces `fn` on `args`/`kwargs` (values or specs) and lowers it with `pipeline`;
    dumps each stage under `dump_dir` or `AOTKIT_DUMP_DIR` (one file per pass with
    `print_ir_after_all`, default `AOTKIT_PRINT_IR_AFTER_ALL`). `frontend` is "auto"
    (JAX when `fn` uses JAX and not aotkit, see `aotkit.frontends.choose`), "aotkit" (the
    tracer) or "jax" (JAX lowers; see aotkit.frontends.jax). `autograph`
    converts Python control flow on traced values (see aotkit.autograph).
    `in_shardings`/`out_shardings` shard the program (see `jit`)."""
    if pipeline is not None:
        passes.check_pipeline(pipeline)
    defaults = dict(
        pipeline=pipeline,
        backend=backend,
        dump_dir=dump_dir,
        print_ir_after_all=print_ir_after_all,
    )
    traced = trace_function(
        fn,
        args,
        kwargs,
        static_argnums=static_argnums,
        static_argnames=static_argnames,
        donate_argnums=donate_argnums,
        frontend=frontend,
        defaults=defaults,
        autograph=autograph,
        in_shardings=in_shardings,
        out_shardings=out_shardings,
    )
    return lower_traced(traced, consume=True)


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
    frontend: str = "auto",
    autograph: bool = True,
    in_shardings=None,
    out_shardings=None,
    **kwargs,
) -> Lowered:
    """Lowers `fn` for the given arguments (concrete values or `aotkit.ShapeDtype` specs),
    then runs `pipeline` ("default", "none" or MLIR pipeline text) on the module.

    Takes the options of `jit`, with the same meaning and checks: `aotkit.lower(f, *args,
    **options)` is `jit(f, **options).lower(*args)` without the jit caches. The other
    keyword arguments go to `fn`.

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
        frontend=frontend,
        autograph=autograph,
        in_shardings=in_shardings,
        out_shardings=out_shardings,
    )
    return lower_function(fn, args, kwargs, **options.keywords())


@api_boundary
def load_module(source, *, name: str | None = None, platform: str | None = None) -> Lowered:
    """Loads a StableHLO module (text, bytecode, portable artifact, jax.export artifact).

    `source` is a path (str or os.PathLike) or the file's bytes. `name` overrides the module
    name (default: the exported function's name, the module's own `sym_name`, or the file
    stem). Returns a `Lowered` whose `in_specs`/`out_specs` come from `@main`, with the
    pipeline "none": the module runs as written. Compile it with `.compile(backend=...)`.
    A jax.export artifact exported for several platforms (`platforms=("cpu", "cuda")`)
    keeps the lowering for `platform` ("cpu", "cuda", ...; default: the default backend's
    platform): compile it for a backend of that platform.
    """
    from aotkit.frontends import files

    traced = files.read_module(source, name=name, platform=platform)
    return lower_traced(traced, pipeline="none", consume=True)


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


def _static_key(where: str, static_pos: dict, static_kw: dict) -> tuple:
    items = [(f"args[{i}]", v) for i, v in static_pos.items()]
    items += [(f"kwargs[{k!r}]", static_kw[k]) for k in sorted(static_kw)]
    for path, value in items:
        try:
            hash(value)
        except TypeError:
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


def _options_key(where: str, options) -> tuple:
    if options is None:
        return ()
    if not isinstance(options, dict):
        raise TypeError(
            f"{where}: options must be a dict of XLA flags, got {type(options).__name__}; "
            "e.g. {'xla_cpu_enable_fast_math': True}"
        )
    try:
        key = tuple(sorted((str(k), type(v), v) for k, v in options.items()))
        hash(key)
    except TypeError:
        raise TypeError(
            f"{where}: option values must be hashable bool/int/float/str, got {options!r}"
        ) from None
    return key


def _compile_uncached(lowered: Lowered, backend: Backend, options, targeting=None) -> Compiled:
    dumper = lowered._dumper
    # The persistent cache (aotkit/cache.py) first: an executable another process compiled.
    # Not cached: a cross-compile (`target=`; the key has no place for its target) and a
    # sharded executable (it does not serialize).
    sharded = lowered.partitioning is not None
    cache_key = None if targeting or sharded else persistent_cache.key(lowered, backend, options)
    executable = None
    if cache_key is not None:
        executable = persistent_cache.get(cache_key, lowered, backend, options)
    origin = "persistent cache"
    if executable is None:
        origin = "compiled"
        try:
            if sharded:
                executable = backend.compile_spmd(lowered._module, options, lowered.partitioning)
            else:
                executable = backend.compile(lowered._module, options, **(targeting or {}))
        except CompileError as e:
            raise CompileError(
                f"{e}; {dumps.hint(dumper)}", backend=e.backend, module_name=e.module_name
            ) from e.__cause__
        if cache_key is not None:
            persistent_cache.put(cache_key, lowered, executable, options)
    compiled = Compiled(
        executable,
        in_tree=lowered.in_tree,
        out_tree=lowered.out_tree,
        donated=lowered.donated,
        lowered=lowered,
        options=options,
        origin=origin,
    )
    if dumper is not None:
        dumper.write("optimized", compiled.as_text(), ext="hlo")
        cost = compiled.cost_analysis()
        if cost is not None:
            dumper.write_json("cost", cost)
        memory = compiled.memory_analysis()
        if memory is not None:
            dumper.write_json("memory", memory.to_dict())
    return compiled


def _targeting(where: str, backend: Backend, target, target_options) -> tuple[dict, tuple]:
    """The target keywords for `backend.compile` and their cache key (none: the default).

    Only a backend with `normalize_target` (one that cross-compiles) takes them.
    """
    if target is None and target_options is None:
        return {}, ()
    normalize = getattr(backend, "normalize_target", None)
    if normalize is None:
        given = f"target={target!r}" if target is not None else f"target_options={target_options!r}"
        raise ValueError(
            f"{where}: {given} applies to backend='iree', which cross-compiles; backend "
            f"{backend.name!r} compiles for its own devices; drop it or compile with "
            "backend='iree'"
        )
    key = normalize(target, target_options)
    return {"target": target, "target_options": target_options}, key


def compile_lowered(
    lowered: Lowered, backend=None, options=None, *, target=None, target_options=None
) -> Compiled:
    """`Lowered.compile`: compiles on `backend` (default: the lowering's, else `cpu`).

    A lowering made by `jit(...).lower` shares its function's compile cache.
    """
    where = f"Lowered.compile({lowered.name})"
    chosen = backends.get(backend if backend is not None else lowered.backend)
    options_key = _options_key(where, options)
    targeting, target_key = _targeting(where, chosen, target, target_options)
    link = lowered._cache_link
    if link is None:
        return _compile_uncached(lowered, chosen, options, targeting)
    cache, lowering_key = link
    key = (lowering_key, chosen.name, options_key) + ((target_key,) if target_key else ())
    with cache.lock:
        compiled = cache.compiled.get(key)
        if compiled is not None:
            cache.hits += 1
            return compiled
        cache.misses += 1
        compiled = _compile_uncached(lowered, chosen, options, targeting)
        cache.compiles += 1
        if compiled.origin == "persistent cache":
            cache.persistent_hits += 1
        cache.put(cache.compiled, key, compiled)
    return compiled


@dataclasses.dataclass(frozen=True)
class Options:
    """What `jit` (or `lower`) was given for one function, checked (`check_options`)."""

    static_argnums: tuple[int, ...] = ()
    static_argnames: tuple[str, ...] = ()
    donate_argnums: tuple[int, ...] = ()
    backend: str | None = None
    pipeline: str | None = None
    dump_dir: str | os.PathLike | None = None
    frontend: str = "auto"
    autograph: bool = True
    in_shardings: object = None
    out_shardings: object = None

    def keywords(self) -> dict:
        """The options as keyword arguments (of `lower_function`); values as given, not copied."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}


def check_options(where: str, fn: Callable, **given) -> Options:
    """The checked `Options` of `fn` (TypeError/ValueError worded for `where`).

    A function already wrapped in jax.jit keeps the static and donated arguments it was
    given there, unless these options name some.
    """
    options = Options(**given)
    static_argnums = signature.as_tuple(where, "static_argnums", options.static_argnums, int)
    static_argnames = signature.as_tuple(where, "static_argnames", options.static_argnames, str)
    donate_argnums = signature.as_tuple(where, "donate_argnums", options.donate_argnums, int)
    frontends.check_frontend(where, options.frontend)
    wrapped = frontends.jax_jit_options(fn) if options.frontend != "aotkit" else None
    if wrapped is not None and not (static_argnums or static_argnames or donate_argnums):
        static_argnums = wrapped.static_argnums
        static_argnames = wrapped.static_argnames
        donate_argnums = wrapped.donate_argnums
    backend = options.backend
    if backend is not None and not isinstance(backend, str):
        raise TypeError(f"{where}: backend must be a name such as 'cpu', got {backend!r}")
    if options.pipeline is not None:
        passes.check_pipeline(options.pipeline)
    if not isinstance(options.autograph, bool):
        raise TypeError(f"{where}: autograph must be True or False, got {options.autograph!r}")
    return dataclasses.replace(
        options,
        static_argnums=static_argnums,
        static_argnames=static_argnames,
        donate_argnums=donate_argnums,
    )


class Jitted:
    """`jit(fn)`: call it to trace, lower, compile and run; `.trace`/`.lower` for the stages.

    Called inside a function aotkit is tracing, it traces `fn` into the outer program
    (inline), as `jax.jit` does.
    """

    def __init__(
        self,
        fn: Callable,
        *,
        static_argnums=(),
        static_argnames=(),
        donate_argnums=(),
        backend: str | None = None,
        pipeline: str | None = None,
        dump_dir: str | os.PathLike | None = None,
        frontend: str = "auto",
        autograph: bool = True,
        in_shardings=None,
        out_shardings=None,
    ):
        if not callable(fn):
            raise TypeError(f"jit: expected a function, got {type(fn).__name__}")
        self.fn = fn
        self.__name__ = signature.function_name(fn)
        self.__doc__ = getattr(fn, "__doc__", None)
        self.__wrapped__ = fn
        where = f"jit({self.__name__})"
        options = check_options(
            where,
            fn,
            static_argnums=static_argnums,
            static_argnames=static_argnames,
            donate_argnums=donate_argnums,
            backend=backend,
            pipeline=pipeline,
            dump_dir=dump_dir,
            frontend=frontend,
            autograph=autograph,
            in_shardings=in_shardings,
            out_shardings=out_shardings,
        )
        self.options = options
        self.static_argnums = options.static_argnums
        self.static_argnames = options.static_argnames
        self.donate_argnums = options.donate_argnums
        self._lenient_statics = frontends.statics_from_jax(
            frontends.jax_jit_options(fn) if frontend != "aotkit" else None,
            self.static_argnums,
            self.static_argnames,
        )
        self.backend = backend
        self.pipeline = pipeline
        self.dump_dir = dump_dir
        self.frontend = frontend
        self.autograph = autograph
        self.in_shardings = in_shardings
        self.out_shardings = out_shardings
        # The front end `frontend` resolves to, found at the first trace ("auto" reads the
        # function's globals, which a module still importing may not have yet).
        self._resolved_frontend: str | None = None
        self._where = where
        self._has_statics = bool(self.static_argnums or self.static_argnames)
        self._config = (
            self.static_argnums,
            self.static_argnames,
            self.donate_argnums,
            backend,
            pipeline,
            frontend,
            autograph,
            _shardings_key(where, "in_shardings", in_shardings),
            _shardings_key(where, "out_shardings", out_shardings),
        )
        self._cache = _cache_for(fn)
        self._backend_name: str | None = None
        native = None
        if not self._has_statics:
            native = native_dispatcher(self.__name__, self._python_call, self._native_run)
        self._dispatch = native if native is not None else self._python_call
        self._cache.jitted.add(self)

    def _clear_native_cache(self) -> None:
        clear = getattr(self._dispatch, "clear_cache", None)
        if clear is not None:
            clear()

    def _keys(self, args: tuple, kwargs: dict):
        """(flat dynamic leaves, lowering key) for a call."""
        if self._has_statics:
            dyn_args, dyn_kwargs, static_pos, static_kw = signature.split_static(
                self._where,
                args,
                kwargs,
                self.static_argnums,
                self.static_argnames,
                self._lenient_statics,
            )
            statics = _static_key(self._where, static_pos, static_kw)
        else:
            dyn_args, dyn_kwargs, statics = args, kwargs, ()
        leaves, tree = tree_util.tree_flatten((dyn_args, dyn_kwargs))
        key = (tree, tuple(map(_leaf_key, leaves)), statics, self._config)
        return leaves, key

    def _defaults(self, key: tuple | None) -> dict:
        return dict(
            pipeline=self.pipeline,
            backend=self.backend,
            dump_dir=self.dump_dir,
            cache_link=(self._cache, key) if key is not None else None,
        )

    def _trace(self, args: tuple, kwargs: dict, key: tuple | None) -> Traced:
        traced = trace_function(
            self.fn,
            args,
            kwargs,
            static_argnums=self.static_argnums,
            static_argnames=self.static_argnames,
            donate_argnums=self.donate_argnums,
            frontend=self._frontend_name(),
            defaults=self._defaults(key),
            autograph=self.autograph,
            in_shardings=self.in_shardings,
            out_shardings=self.out_shardings,
        )
        with self._cache.lock:
            self._cache.traces += 1
        return traced

    @api_boundary
    def trace(self, *args, **kwargs) -> Traced:
        """The `Traced` stage for these arguments (values or ShapeDtype specs): the module
        before any pass pipeline. `.lower()` on it shares this function's caches."""
        _, key = self._keys(args, kwargs)
        return self._trace(args, kwargs, key)

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
        """The `Lowered` stage for these arguments (concrete values or ShapeDtype specs)."""
        _, key = self._keys(args, kwargs)
        return self._lower(args, kwargs, key)

    def _lower(self, args: tuple, kwargs: dict, key: tuple) -> Lowered:
        return _cached_lowering(
            self._cache, key, lambda: _lower(self._trace(args, kwargs, key), *(None,) * 3, True)
        )

    # `jitted(*args, **kwargs)`: runs `fn` compiled for these arguments' signature. Without
    # static arguments, jaxlib's C++ dispatch sits in front (as under `jax.jit`): a signature
    # seen before runs its cached executable without entering Python; every other call takes
    # the checked Python path (`_python_call`). A property whose getter is C code hands out
    # that callable: no forwarding frame per call.
    __call__ = property(
        operator.attrgetter("_dispatch"),
        doc="`jitted(*args, **kwargs)`: runs `fn` compiled for these arguments' signature.",
    )

    def _python_call(self, *args, **kwargs):
        # The call is an entry point (aotkit/_traceback.py); a try costs nothing until it
        # catches, where a decorator would add a frame to every call.
        try:
            if core.is_tracing():
                return self._inline(args, kwargs)
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
            backend_name = self._backend_name = backends.get(self.backend).name
        cache = self._cache
        with cache.lock:
            compiled = cache.compiled.get((key, backend_name, ()))
            if compiled is not None:
                cache.hits += 1
        if compiled is None:
            compiled = compile_lowered(self._lower(args, kwargs, key), backend_name)
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
        fastpath = getattr(compiled._executable, "fastpath", None)
        return out, fastpath(out, args, kwargs, x64) if fastpath is not None else None

    def _inline(self, args: tuple, kwargs: dict):
        """A call inside a trace: `fn` is traced into the outer program (donation is the
        outer program's business, as in JAX)."""
        if self._frontend_name() == "jax":
            raise TypeError(
                f"{self._where}: a JAX function (frontend='jax') was called inside a function "
                "aotkit is tracing; JAX cannot trace aotkit's arrays: write it with "
                "aotkit.numpy, or jit the whole program with frontend='jax'"
            )
        return self.fn(*args, **kwargs)

    def _frontend_name(self) -> str:
        name = self._resolved_frontend
        if name is None:
            name = self._resolved_frontend = frontends.resolve(self.fn, self.frontend).name
        return name

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
    frontend: str = "auto",
    autograph: bool = True,
    in_shardings=None,
    out_shardings=None,
):
    """Stages `fn`: `jit(f)(x)` runs it compiled; `jit(f).lower(x).compile()` shows each stage.

    Usable as `@jit` or `@jit(static_argnums=...)`. Arguments in `static_argnums` /
    `static_argnames` are Python values baked into the trace (hashable); `donate_argnums`
    marks arguments whose buffers the computation may reuse for its results. Python scalar
    arguments are weakly typed 32-bit values (see `aotkit.config`). `pipeline` is a named or
    MLIR pass pipeline (by default "default" for traced programs and "none" for modules JAX
    lowers, which then equal jax.jit's bit for bit; see `default_pipeline`), `dump_dir`
    turns on per-stage dumps, and `frontend` says who traces: "auto" (the default, as in
    the CLI: JAX lowers `fn` when it uses JAX and not aotkit, see `aotkit.frontends.choose`),
    "aotkit" (the tracer) or "jax" (JAX lowers `fn`). A function
    the tracer runs that calls jax.numpy on traced values is a TypeError that says to pass
    `frontend="jax"`. `autograph` (on by default)
    turns Python loops and branches on traced values into StableHLO control flow (see
    aotkit.autograph); `autograph=False` unrolls loops and keeps branches Python.

    `in_shardings` (a pytree prefix of the positional arguments) and `out_shardings` (of the
    result) shard the program over a mesh, with JAX's public types (`aotkit.sharding`):
    leaves are `NamedSharding`, `PartitionSpec` (over the mesh of the other shardings) or
    None (arguments: replicated; results: the compiler decides). XLA's SPMD partitioner
    partitions the program for the mesh's devices; see aotkit.sharding.
    """
    options = dict(
        static_argnums=static_argnums,
        static_argnames=static_argnames,
        donate_argnums=donate_argnums,
        backend=backend,
        pipeline=pipeline,
        dump_dir=dump_dir,
        frontend=frontend,
        autograph=autograph,
        in_shardings=in_shardings,
        out_shardings=out_shardings,
    )
    if fn is None:
        return functools.partial(jit, **options)
    return Jitted(fn, **options)
