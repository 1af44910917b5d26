"""The staged API: `lower(fn, *args)` -> `Lowered` -> `.compile()` -> `Compiled`.

Each stage is a value the user can hold, print and dump. `Lowered` holds the verified
StableHLO module (after the pass pipeline) with the argument and result pytrees and specs.
"""

from __future__ import annotations

import functools
import os
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import NamedTuple

from jax import tree_util
from jaxlib.mlir import ir

from aotkit import backends, dtypes, dumps, frontends, passes
from aotkit._context import IR_LOCK, context
from aotkit.backends.base import Backend, main_function
from aotkit.compiled import Compiled
from aotkit.errors import CompileError
from aotkit.lowering.trace import trace_to_module
from aotkit.specs import ShapeDtype, spec_of


class Lowered:
    """A function lowered to a verified StableHLO module, ready to compile."""

    # Which front end produced the module: "aotkit" (the tracer), "jax" or "file".
    frontend = "aotkit"

    def __init__(
        self,
        module: ir.Module,
        *,
        name: str,
        in_tree,
        out_tree,
        flat_in_specs: tuple[ShapeDtype, ...],
        flat_out_specs: tuple[ShapeDtype, ...],
        donated: tuple[bool, ...] = (),
        pipeline: str = "none",
        backend: str | None = None,
        dumper: dumps.Dumper | None = None,
    ):
        self.module = module
        self.name = name
        self.in_tree = in_tree
        self.out_tree = out_tree
        self.flat_in_specs = flat_in_specs
        self.flat_out_specs = flat_out_specs
        self.donated = donated or (False,) * len(flat_in_specs)
        self.pipeline = pipeline
        self.backend = backend
        # The compile step writes its stages (optimized HLO, cost) after the lowering's files.
        self.dumper = dumper

    @property
    def in_specs(self):
        """The input pytree `((args...), {kwargs})` with ShapeDtype leaves (statics removed)."""
        return tree_util.tree_unflatten(self.in_tree, self.flat_in_specs)

    @property
    def out_specs(self):
        """The output pytree with ShapeDtype leaves."""
        return tree_util.tree_unflatten(self.out_tree, self.flat_out_specs)

    def as_text(self, debug_info: bool = False) -> str:
        """The StableHLO module as MLIR text; `debug_info=True` adds `file:line` locations."""
        with IR_LOCK:
            return self.module.operation.get_asm(enable_debug_info=debug_info)

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
        """
        return compile_lowered(self, backend, options, target=target, target_options=target_options)

    def __str__(self) -> str:
        return self.as_text()

    def __repr__(self) -> str:
        ins = ", ".join(map(str, self.flat_in_specs))
        outs = ", ".join(map(str, self.flat_out_specs))
        return f"<Lowered {self.name}({ins}) -> ({outs})>"


def function_name(fn: Callable) -> str:
    name = getattr(fn, "__name__", None) or type(fn).__name__
    return "lambda" if name == "<lambda>" else name


def split_static(
    args: tuple, kwargs: dict, static_argnums: Sequence[int], static_argnames: Sequence[str]
) -> tuple[tuple, dict, dict[int, object], dict[str, object]]:
    """Separates static arguments (by position or name) from the dynamic ones."""
    n = len(args)
    nums = set()
    for i in static_argnums:
        j = i + n if i < 0 else i
        if 0 <= j < n:
            nums.add(j)
    static_pos = {i: args[i] for i in sorted(nums)}
    dyn_args = tuple(a for i, a in enumerate(args) if i not in nums)
    static_kw = {k: v for k, v in kwargs.items() if k in static_argnames}
    dyn_kwargs = {k: v for k, v in kwargs.items() if k not in static_argnames}
    return dyn_args, dyn_kwargs, static_pos, static_kw


def merge_static(dyn_args: Sequence, dyn_kwargs: dict, static_pos: dict, static_kw: dict):
    args = list(dyn_args)
    for i, v in static_pos.items():
        args.insert(i, v)
    return tuple(args), {**dyn_kwargs, **static_kw}


def flat_specs(fn_name: str, tree_in) -> tuple[tuple[ShapeDtype, ...], object]:
    """Flattens `((args), {kwargs})` and gives each leaf's spec; non-arrays are TypeErrors."""
    leaves_with_paths, treedef = tree_util.tree_flatten_with_path(tree_in)
    specs = []
    for path, leaf in leaves_with_paths:
        try:
            specs.append(spec_of(leaf))
        except (TypeError, ValueError) as e:
            where = _arg_path(path)
            raise TypeError(
                f"{fn_name}: argument {where} of type {type(leaf).__name__} is not an array "
                f"({e}); pass arrays, Python scalars or aotkit.ShapeDtype specs, or mark it "
                "static with static_argnums/static_argnames"
            ) from None
    return tuple(specs), treedef


def _arg_path(path) -> str:
    """`args[0]['w']` style path of a leaf in the `((args), {kwargs})` tree."""
    if not path:
        return "<root>"
    head, rest = path[0], path[1:]
    prefix = "args" if getattr(head, "idx", None) == 0 else "kwargs"
    return prefix + tree_util.keystr(tuple(rest))


def lower_function(
    fn: Callable,
    args: tuple,
    kwargs: dict,
    *,
    static_argnums: Sequence[int] = (),
    static_argnames: Sequence[str] = (),
    donate_argnums: Sequence[int] = (),
    pipeline: str = "default",
    backend: str | None = None,
    dump_dir: str | os.PathLike | None = None,
    frontend: str = "aotkit",
    print_ir_after_all: bool | None = None,
) -> Lowered:
    """Traces `fn` on `args`/`kwargs` (values or specs), runs `pipeline` on the module and
    returns the `Lowered` stage; dumps each stage under `dump_dir` or `AOTKIT_DUMP_DIR`
    (one file per pass with `print_ir_after_all`, default `AOTKIT_PRINT_IR_AFTER_ALL`).
    `frontend` is "aotkit" (the tracer), "jax" (JAX lowers; see aotkit.frontends.jax) or "auto"."""
    name = function_name(fn)
    passes.check_pipeline(pipeline)
    if frontends.resolve(fn, frontend).name == "jax":
        from aotkit.frontends.jax import lower_jax

        return lower_jax(
            fn,
            args,
            kwargs,
            static_argnums=static_argnums,
            static_argnames=static_argnames,
            donate_argnums=donate_argnums,
            pipeline=pipeline,
            backend=backend,
            dump_dir=dump_dir,
            print_ir_after_all=print_ir_after_all,
        )
    dyn_args, dyn_kwargs, static_pos, static_kw = split_static(
        args, kwargs, static_argnums, static_argnames
    )
    specs, in_tree = flat_specs(name, (dyn_args, dyn_kwargs))

    def body(flat_tracers):
        t_args, t_kwargs = tree_util.tree_unflatten(in_tree, flat_tracers)
        full_args, full_kwargs = merge_static(t_args, t_kwargs, static_pos, static_kw)
        return fn(*full_args, **full_kwargs)

    dumper = dumps.Dumper.create(name, dump_dir, print_ir_after_all=print_ir_after_all)
    result = trace_to_module(body, name, specs, dumper=dumper)
    passes.run_pipeline(result.module, pipeline, name=name, dumper=dumper, verified=True)
    return Lowered(
        result.module,
        name=name,
        in_tree=in_tree,
        out_tree=result.out_tree,
        flat_in_specs=specs,
        flat_out_specs=result.flat_out_specs,
        pipeline=pipeline,
        backend=backend,
        dumper=dumper,
    )


def lower(
    fn: Callable, *args, pipeline: str = "default", frontend: str = "aotkit", **kwargs
) -> Lowered:
    """Lowers `fn` for the given arguments (concrete values or `aotkit.ShapeDtype` specs),
    then runs `pipeline` ("default", "none" or MLIR pipeline text) on the module.
    `frontend="jax"` lowers a JAX function with JAX; `"auto"` picks by what `fn` uses.

    `aotkit.lower(lambda x: anp.sqrt(x ** 2) + 1., aotkit.spec("f32[]")).as_text()`
    """
    if not callable(fn):
        raise TypeError(f"lower: expected a function, got {type(fn).__name__}")
    return lower_function(fn, args, kwargs, pipeline=pipeline, frontend=frontend)


# --- compile and jit: the staged calls and their caches --------------------------------------
#
# Caches live per function, not per `jit(fn)` object, so that `jit(f).lower(x).compile()` and
# a later `jit(f)(x)` (two Jitted objects) share one trace and one compile. A lowering is keyed
# by the argument tree, each leaf's (shape, dtype) (a ShapeDtype and an array of that spec key
# alike), the static values and the jit configuration (statics, donation, backend, pipeline,
# front end); a compile by its lowering, the backend and the options. Each function's caches
# have one lock; a miss holds it while tracing and compiling, so concurrent first calls do the
# work once.


class CacheInfo(NamedTuple):
    """Counters of one function's caches, shared by every `jit` of that function."""

    traces: int
    lowerings: int
    compiles: int
    hits: int
    misses: int


class _FunctionCache:
    __slots__ = ("lock", "lowered", "compiled", "traces", "lowerings", "compiles", "hits", "misses")

    def __init__(self):
        self.lock = threading.RLock()
        self.lowered: dict[tuple, Lowered] = {}
        self.compiled: dict[tuple, Compiled] = {}
        self.traces = self.lowerings = self.compiles = self.hits = self.misses = 0

    def info(self) -> CacheInfo:
        with self.lock:
            return CacheInfo(self.traces, self.lowerings, self.compiles, self.hits, self.misses)


_function_caches: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
# Callables that cannot be weakly referenced are kept alive with their cache.
_pinned_caches: dict[int, tuple[Callable, _FunctionCache]] = {}
_caches_lock = threading.Lock()


def _cache_for(fn: Callable) -> _FunctionCache:
    with _caches_lock:
        try:
            cache = _function_caches.get(fn)
            if cache is None:
                cache = _function_caches[fn] = _FunctionCache()
        except TypeError:  # not weakly referenceable (or unhashable): pin by identity
            pinned = _pinned_caches.get(id(fn))
            if pinned is None:
                pinned = _pinned_caches[id(fn)] = (fn, _FunctionCache())
            cache = pinned[1]
    return cache


_WEAK_LEAF_KEYS = {t: ((), dtypes.result_type(t)) for t in dtypes.WEAK_KINDS}


def _leaf_key(x):
    """(shape, dtype) of an argument leaf, equal for a ShapeDtype and an array of that spec."""
    key = _WEAK_LEAF_KEYS.get(type(x))
    if key is not None:
        return key
    if isinstance(x, ShapeDtype):
        return (x.shape, x.dtype)
    shape = getattr(x, "shape", None)
    dtype = getattr(x, "dtype", None)
    if shape is not None and dtype is not None:
        return (tuple(shape), dtype)
    kind = dtypes.weak_kind(x)
    if kind is not None:
        return _WEAK_LEAF_KEYS[kind]
    return (type(x),)  # not an array: lowering it raises the error


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
    # The type is part of the key: 1, 1.0 and True hash alike but trace differently.
    return tuple((path, type(value), value) for path, value in items)


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
    dumper = getattr(lowered, "dumper", None)
    try:
        executable = backend.compile(lowered.module, options, **(targeting or {}))
    except CompileError as e:
        raise CompileError(
            f"{e}; {dumps.hint(dumper)}", backend=e.backend, module_name=e.module_name
        ) from e.__cause__
    compiled = Compiled(
        executable, in_tree=lowered.in_tree, out_tree=lowered.out_tree, lowered=lowered
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
    link = getattr(lowered, "_jit_link", None)
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
        cache.compiled[key] = compiled
    return compiled


def _as_tuple(where: str, name: str, value, kind: type) -> tuple:
    """`value` (one `kind` or an iterable of them) as a tuple; TypeError naming `name`."""
    if isinstance(value, kind):
        value = (value,)
    try:
        out = tuple(value)
    except TypeError:
        out = None
    if out is None or not all(isinstance(v, kind) and not isinstance(v, bool) for v in out):
        what = {int: "an int or a tuple of ints", str: "a str or a tuple of strs"}[kind]
        raise TypeError(f"{where}: {name} must be {what}, got {value!r}")
    return out


class Jitted:
    """`jit(fn)`: call it to trace, lower, compile and run; `.lower(...)` for the stages."""

    def __init__(
        self,
        fn: Callable,
        *,
        static_argnums=(),
        static_argnames=(),
        donate_argnums=(),
        backend: str | None = None,
        pipeline: str = "default",
        dump_dir: str | os.PathLike | None = None,
        frontend: str = "aotkit",
    ):
        if not callable(fn):
            raise TypeError(f"jit: expected a function, got {type(fn).__name__}")
        self.fn = fn
        self.__name__ = function_name(fn)
        self.__doc__ = getattr(fn, "__doc__", None)
        self.__wrapped__ = fn
        where = f"jit({self.__name__})"
        self.static_argnums = _as_tuple(where, "static_argnums", static_argnums, int)
        self.static_argnames = _as_tuple(where, "static_argnames", static_argnames, str)
        self.donate_argnums = _as_tuple(where, "donate_argnums", donate_argnums, int)
        if backend is not None and not isinstance(backend, str):
            raise TypeError(f"{where}: backend must be a name such as 'cpu', got {backend!r}")
        self.backend = backend
        self.pipeline = pipeline
        self.dump_dir = dump_dir
        self.frontend = frontend
        self._where = where
        self._has_statics = bool(self.static_argnums or self.static_argnames)
        self._config = (
            self.static_argnums,
            self.static_argnames,
            self.donate_argnums,
            backend,
            pipeline,
            frontend,
        )
        self._cache = _cache_for(fn)
        self._backend_name: str | None = None

    def _keys(self, args: tuple, kwargs: dict):
        """(flat dynamic leaves, lowering key) for a call."""
        if self._has_statics:
            dyn_args, dyn_kwargs, static_pos, static_kw = split_static(
                args, kwargs, self.static_argnums, self.static_argnames
            )
            statics = _static_key(self._where, static_pos, static_kw)
        else:
            dyn_args, dyn_kwargs, statics = args, kwargs, ()
        leaves, tree = tree_util.tree_flatten((dyn_args, dyn_kwargs))
        key = (tree, tuple(map(_leaf_key, leaves)), statics, self._config)
        return leaves, key

    def lower(self, *args, **kwargs) -> Lowered:
        """The `Lowered` stage for these arguments (concrete values or ShapeDtype specs)."""
        _, key = self._keys(args, kwargs)
        return self._lower(args, kwargs, key)

    def _lower(self, args: tuple, kwargs: dict, key: tuple) -> Lowered:
        cache = self._cache
        with cache.lock:
            lowered = cache.lowered.get(key)
            if lowered is not None:
                cache.hits += 1
                return lowered
            cache.misses += 1
            lowered = lower_function(
                self.fn,
                args,
                kwargs,
                static_argnums=self.static_argnums,
                static_argnames=self.static_argnames,
                donate_argnums=self.donate_argnums,
                pipeline=self.pipeline,
                backend=self.backend,
                dump_dir=self.dump_dir,
                frontend=self.frontend,
            )
            cache.traces += 1
            cache.lowerings += 1
            if self.donate_argnums and not any(lowered.donated):
                _alias_donated(lowered, args, kwargs, self)
            lowered._jit_link = (cache, key)
            cache.lowered[key] = lowered
        return lowered

    def __call__(self, *args, **kwargs):
        leaves, key = self._keys(args, kwargs)
        backend_name = self._backend_name
        if backend_name is None:
            backend_name = self._backend_name = backends.get(self.backend).name
        cache = self._cache
        compiled = cache.compiled.get((key, backend_name, ()))
        if compiled is None:
            compiled = compile_lowered(self._lower(args, kwargs, key), backend_name)
        else:
            with cache.lock:
                cache.hits += 1
        if not self._has_statics:
            return compiled(*args, **kwargs)  # the backend's native dispatch, if it has one
        outs = compiled.call_flat(leaves)
        if compiled._single_out:
            return outs[0]
        return compiled.out_tree.unflatten(outs)

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
    pipeline: str = "default",
    dump_dir: str | os.PathLike | None = None,
    frontend: str = "aotkit",
):
    """Stages `fn`: `jit(f)(x)` runs it compiled; `jit(f).lower(x).compile()` shows each stage.

    Usable as `@jit` or `@jit(static_argnums=...)`. Arguments in `static_argnums` /
    `static_argnames` are Python values baked into the trace (hashable); `donate_argnums`
    marks arguments whose buffers the computation may reuse for its results. `pipeline` is a
    named or MLIR pass pipeline, `dump_dir` turns on per-stage dumps, and `frontend` says who
    traces: "aotkit" (the tracer), "jax" (JAX lowers `fn`), or "auto".
    """
    options = dict(
        static_argnums=static_argnums,
        static_argnames=static_argnames,
        donate_argnums=donate_argnums,
        backend=backend,
        pipeline=pipeline,
        dump_dir=dump_dir,
        frontend=frontend,
    )
    if fn is None:
        return functools.partial(jit, **options)
    return Jitted(fn, **options)


def _alias_donated(lowered: Lowered, args: tuple, kwargs: dict, jitted: Jitted) -> None:
    """Marks the leaves of donated positional arguments as aliasing a result of their spec.

    A donated leaf gets `tf.aliasing_output = k` for the first unclaimed result with its shape
    and dtype (XLA then writes that result into the argument's buffer), or
    `jax.buffer_donor = true` when no result matches.
    """
    n = len(args)
    statics = {i + n if i < 0 else i for i in jitted.static_argnums}
    dyn_positions = [i for i in range(n) if i not in statics]
    donated_positions = {i + n if i < 0 else i for i in jitted.donate_argnums}
    arg_trees = lowered.in_tree.children()[0].children()
    flags = [False] * len(lowered.flat_in_specs)
    offset = 0
    for k, position in enumerate(dyn_positions):
        count = arg_trees[k].num_leaves
        if position in donated_positions:
            flags[offset : offset + count] = [True] * count
        offset += count
    if not any(flags):
        return
    claimed: set[int] = set()
    with IR_LOCK, context():
        main = main_function(lowered.module)
        entries = []
        old = main.attributes["arg_attrs"] if "arg_attrs" in main.attributes else None
        for i, spec in enumerate(lowered.flat_in_specs):
            entry = {}
            if old is not None:
                entry = {a.name: a.attr for a in ir.DictAttr(old[i])}
            if flags[i]:
                match = next(
                    (
                        j
                        for j, out in enumerate(lowered.flat_out_specs)
                        if out == spec and j not in claimed
                    ),
                    None,
                )
                if match is None:
                    entry["jax.buffer_donor"] = ir.BoolAttr.get(True)
                else:
                    claimed.add(match)
                    entry["tf.aliasing_output"] = ir.IntegerAttr.get(
                        ir.IntegerType.get_signless(32), match
                    )
            entries.append(ir.DictAttr.get(entry))
        main.attributes["arg_attrs"] = ir.ArrayAttr.get(entries)
        lowered.module.operation.verify()
    lowered.donated = tuple(flags)
