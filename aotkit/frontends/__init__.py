"""Front ends: the ways a program enters aotkit. Each returns a `Program`
(aotkit/program.py), which the stages wrap (aotkit/api.py).

- `aotkit`: aotkit's own tracer (`aotkit.tracing.trace` over the op families in
  `aotkit/tracing/`), for `aotkit.numpy` and plain NumPy code.
- `jax`: a JAX function lowered by JAX itself and imported (`aotkit.frontends.jax`).
- files: StableHLO text, bytecode, portable artifacts, jax.export artifacts
  (`aotkit.frontends.files.read_module`, which `aotkit.load_module` lowers).

`frontend="auto"`, the default of `aotkit.jit`, `aotkit.lower` and the CLI, picks between
the first two by looking at what the function refers to; `choose(fn)` returns the choice
with the reason, which the CLI prints with `-v`.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import sys
import types
from dataclasses import dataclass

from aotkit import _compat
from aotkit.program import Options

FRONTENDS = ("aotkit", "jax", "auto")


@dataclass(frozen=True)
class Choice:
    """The front end picked for a function, and why (one line for `-v`)."""

    name: str
    reason: str


@dataclass(frozen=True)
class JitOptions:
    """A function the user already wrapped in `jax.jit`: the function and what jax.jit was
    given (its static and donated arguments and shardings, as aotkit `Options`)."""

    fun: object
    options: Options


def jax_jit_options(fn) -> JitOptions | None:
    """The options of `fn` if it is a `jax.jit`-wrapped function (decorated, or made with
    `functools.partial(jax.jit, ...)`), else None."""
    if not (callable(getattr(fn, "lower", None)) and type(fn).__module__.startswith("jaxlib")):
        return None

    found = _compat.jit_options(fn)
    if found is None:
        return None
    fun, static_argnums, static_argnames, donate_argnums, in_shardings, out_shardings = found
    options = Options(
        static_argnums=static_argnums,
        static_argnames=static_argnames,
        donate_argnums=donate_argnums,
        in_shardings=in_shardings,
        out_shardings=out_shardings,
    )
    return JitOptions(fun, options)


def inherit_jax_jit(fn, options: Options) -> Options:
    """`options`, with the static and donated arguments `fn` was given to jax.jit when `fn`
    is a jax.jit-wrapped function and `options` name none: a JAX function keeps the
    meaning jax.jit gives its arguments."""
    wrapped = jax_jit_options(fn)
    named = options.static_argnums or options.static_argnames or options.donate_argnums
    if wrapped is None or named:
        return options
    given = wrapped.options
    return dataclasses.replace(
        options,
        static_argnums=given.static_argnums,
        static_argnames=given.static_argnames,
        donate_argnums=given.donate_argnums,
    )


def statics_from_jax(options: JitOptions | None, static_argnums, static_argnames) -> bool:
    """Whether the static arguments are those jax.jit was given (`options`): jax.jit infers
    numbers from `static_argnames`, which a call may pass by name or leave to its default,
    so a number past the call's positional arguments is dropped rather than refused."""
    return options is not None and (tuple(static_argnums), tuple(static_argnames)) == (
        options.options.static_argnums,
        options.options.static_argnames,
    )


def check_frontend(where: str, frontend) -> str:
    if frontend not in FRONTENDS:
        raise ValueError(
            f"{where}: unknown frontend {frontend!r}; expected one of {', '.join(FRONTENDS)}"
        )
    return frontend


def resolve(fn, frontend: str, where: str = "lower") -> Choice:
    """The front end to use for `fn`: `frontend` itself unless it is `auto`."""
    check_frontend(where, frontend)
    if frontend == "auto" or is_transform(fn):
        return choose(fn)
    return Choice(frontend, f"frontend={frontend!r} was asked for")


def choose(fn) -> Choice:
    """`jax` when `fn` uses JAX and not aotkit, else `aotkit` (the tracer also runs NumPy code).

    Looks first at the global names `fn`'s code refers to (nested functions included), then,
    when those settle nothing (say `fn` only calls helpers), at what its module imports.
    """
    if _is_aotkit_object(fn):
        label = getattr(fn, "__name__", None) or type(fn).__name__
        return Choice(
            "aotkit",
            f"{label} is aotkit's {type(fn).__name__} (it lets the front end of its choice "
            "lower its function)",
        )
    target = _unwrap(fn)
    label = getattr(target, "__qualname__", None) or getattr(target, "__name__", repr(fn))
    if _is_jax(target):
        return Choice("jax", f"{label} is a JAX-transformed function")
    used = _referenced_values(target)
    aotkit_names = sorted(n for n, v in used.items() if _is_aotkit(v))
    if aotkit_names:
        return Choice("aotkit", f"{label} uses {', '.join(aotkit_names)} from aotkit")
    jax_names = sorted(n for n, v in used.items() if _is_jax(v) and not _neutral(v))
    if jax_names:
        return Choice("jax", f"{label} uses {', '.join(jax_names)} from JAX")
    module = sys.modules.get(getattr(target, "__module__", None) or "")
    if module is not None:
        module_aotkit, module_jax = _imports(vars(module))
        if module_jax and not module_aotkit:
            return Choice(
                "jax",
                f"module {module.__name__} imports {', '.join(module_jax)} from JAX and "
                "nothing from aotkit",
            )
        if module_aotkit:
            return Choice(
                "aotkit", f"module {module.__name__} imports {', '.join(module_aotkit)} from aotkit"
            )
    return Choice("aotkit", f"{label} uses neither JAX nor aotkit directly (NumPy code)")


def _is_aotkit_object(fn) -> bool:
    """Whether `fn` is an instance of one of aotkit's callables (`aotkit.jit(f)`,
    `aotkit.grad(f)`, ...), which a trace of aotkit's calls as it is."""
    return not inspect.isroutine(fn) and "aotkit" in _packages(type(fn))


def is_transform(fn) -> bool:
    """Whether `fn` is an aotkit transform (`aotkit.grad(f)`, `aotkit.vmap(f)`, ...): aotkit's
    tracer runs it, and the transform lets the front end of its choice lower `f`."""
    return callable(getattr(fn, "with_frontend", None)) and _is_aotkit(fn)


def for_transform(fn, frontend: str):
    """`fn`, or, when `fn` is an aotkit transform and `frontend` is not "auto", the same
    transform with `frontend` lowering its function: `jit(grad(f), frontend="jax")` lets JAX
    lower `f`, while aotkit traces the gradient."""
    if frontend == "auto" or not is_transform(fn):
        return fn
    return fn.with_frontend(frontend)


def _imports(values: dict) -> tuple[list[str], list[str]]:
    """The names of a module's globals that come from aotkit, and those that come from JAX
    (its pytree and sharding utilities aside), sorted; the module's own dunder names (its
    `__builtins__`, `__spec__`, ...) are no imports."""
    found_aotkit, found_jax = [], []
    for name, value in values.items():
        if name[:2] == "__":
            continue
        packages = _packages(value)
        if "aotkit" in packages:
            found_aotkit.append(name)
        if not packages.isdisjoint(_JAX_PACKAGES) and not _neutral(value):
            found_jax.append(name)
    return sorted(found_aotkit), sorted(found_jax)


@functools.cache
def _neutral_ids() -> frozenset[int]:
    """JAX's pytree and sharding utilities (modules and what they export): aotkit's tracer
    runs code that uses them (`jax.tree_util.tree_map` over traced values, shardings given
    with JAX's types), so they say nothing about who should trace."""
    import jax

    found = {id(jax.ShapeDtypeStruct)}
    for module in (jax.tree_util, jax.tree, jax.sharding):
        found.add(id(module))
        found.update(id(v) for k, v in vars(module).items() if not k.startswith("_"))
    return frozenset(found)


def _neutral(obj) -> bool:
    return id(obj) in _neutral_ids()


def _unwrap(fn):
    while True:
        if isinstance(fn, functools.partial):
            fn = fn.func
        elif isinstance(fn, types.MethodType):
            fn = fn.__func__
        elif hasattr(fn, "__wrapped__") and not _is_jax(fn):
            fn = fn.__wrapped__
        elif not inspect.isfunction(fn) and not _is_jax(fn) and callable(fn):
            call = inspect.getattr_static(type(fn), "__call__", None)
            if call is None or not inspect.isfunction(call):
                return fn
            fn = call
        else:
            return fn


def _referenced_values(fn) -> dict[str, object]:
    """The globals and closure variables `fn`'s code (nested functions included) names."""
    code = getattr(fn, "__code__", None)
    if code is None:
        return {}
    scope = getattr(fn, "__globals__", None) or {}
    values = {n: scope[n] for n in _global_names(code) if n in scope}
    for name, cell in zip(code.co_freevars, getattr(fn, "__closure__", None) or (), strict=False):
        try:
            values[name] = cell.cell_contents
        except ValueError:  # a cell not filled yet
            pass
    return values


def _global_names(code: types.CodeType) -> set[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _global_names(const)
    return names


def _packages(obj) -> frozenset[str]:
    """Top-level packages `obj` comes from: its own module and its type's and their bases' (a
    jitted function keeps the user's `__module__` but its type lives in jaxlib; a Flax model
    is an instance of the user's class, whose base is flax's Module).

    Those follow from (its own module or, for a module, its name; its type), which is what
    the answer is remembered by: `choose` asks of every global a function's module holds.
    None and plain Python values come from no package."""
    if obj is None or isinstance(obj, _PLAIN):
        return _NO_PACKAGES
    t = type(obj)
    own = obj.__name__ if isinstance(obj, types.ModuleType) else getattr(obj, "__module__", None)
    key = (own if isinstance(own, str) else None, t)
    found = _packages_of.get(key)
    if found is None:
        names = [own]
        if not isinstance(obj, types.ModuleType):
            names += [getattr(base, "__module__", None) for base in getattr(t, "__mro__", ())]
        found = frozenset(name.partition(".")[0] for name in names if isinstance(name, str))
        if len(_packages_of) >= _PACKAGES_KEPT:  # types made on the fly are not kept forever
            _packages_of.clear()
        _packages_of[key] = found
    return found


_packages_of: dict[tuple, frozenset[str]] = {}
_NO_PACKAGES: frozenset[str] = frozenset()
_PACKAGES_KEPT = 4096


# Libraries whose code calls jax.numpy and jax.lax: a function that uses them is a JAX program.
_JAX_PACKAGES = frozenset({"jax", "jaxlib", "flax", "optax", "equinox", "haiku", "chex"})


def is_jax_function(fn) -> bool:
    """Whether `fn` is a JAX-transformed function (jax.jit, jax.grad, jax.vmap, ...)."""
    return _is_jax(_unwrap(fn))


def _is_jax(obj) -> bool:
    return not _packages(obj).isdisjoint(_JAX_PACKAGES)


def _is_aotkit(obj) -> bool:
    return "aotkit" in _packages(obj)


# Values that come from no package: what they are says nothing of who should trace.
_PLAIN = (bool, int, float, str)
