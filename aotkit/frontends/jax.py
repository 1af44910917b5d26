"""The JAX front end: a JAX function, lowered by JAX itself, as aotkit's `Traced` stage.

This is the one place in aotkit where JAX traces (`jax.jit(fn).lower(...)`). JAX's StableHLO
module lives in JAX's own MLIR context; it is written as bytecode and read back into a
lowering context of aotkit's, then adopted (`_module.adopt`): `module @<fn name>` with a
public `@main` whose arguments are the flat input leaves (static arguments removed; unused
ones kept, so the calling convention is the tracer's), placement attributes dropped,
donation kept. From there the module takes aotkit's pipeline, dumps, backends and
`Compiled` like a traced one.

Semantics are JAX's, not NumPy's: dtypes follow JAX's promotion and `jax_enable_x64`.
"""

from __future__ import annotations

import io
import os
from collections.abc import Callable, Sequence

import jax
import numpy as np
from jax import tree_util
from jaxlib.mlir import ir

import aotkit
from aotkit import _compat, dtypes, modules
from aotkit._context import IR_LOCK
from aotkit.frontends import _module, signature, trust
from aotkit.specs import ShapeDtype
from aotkit.traced import Traced

_compat.exclude_from_jax_locations(os.path.dirname(aotkit.__file__) + os.sep)


def trace_jax(
    fn: Callable,
    args: tuple,
    kwargs: dict,
    *,
    static_argnums: Sequence[int] = (),
    static_argnames: Sequence[str] = (),
    donate_argnums: Sequence[int] = (),
    defaults: dict | None = None,
) -> Traced:
    """Lowers `fn` with JAX for `args`/`kwargs` (values, `aotkit.ShapeDtype` or
    `jax.ShapeDtypeStruct` specs) and returns aotkit's `Traced` stage of JAX's module.

    Static arguments, pytrees and `donate_argnums` mean what they mean to `jax.jit`.
    """
    adopted, in_tree, out_tree = import_jax(
        fn,
        args,
        kwargs,
        static_argnums=static_argnums,
        static_argnames=static_argnames,
        donate_argnums=donate_argnums,
    )
    return Traced(
        adopted.module,
        adopted.lc,
        name=adopted.name,
        in_tree=in_tree,
        out_tree=out_tree,
        flat_in_specs=adopted.flat_in_specs,
        flat_out_specs=adopted.flat_out_specs,
        donated=adopted.donated,
        frontend="jax",
        defaults=defaults,
    )


def import_jax(
    fn: Callable,
    args: tuple,
    kwargs: dict,
    *,
    static_argnums: Sequence[int] = (),
    static_argnames: Sequence[str] = (),
    donate_argnums: Sequence[int] = (),
) -> tuple[_module.Adopted, object, object]:
    """JAX's module for `fn`, adopted in a lowering context, with the input and output trees."""
    name = signature.function_name(fn)
    where = f"lower: {name} (frontend='jax')"
    static_argnums = _as_tuple(static_argnums)
    static_argnames = _as_tuple(static_argnames)
    dyn_args, dyn_kwargs, static_pos, static_kw = signature.split_static(
        where, args, kwargs, static_argnums, static_argnames
    )
    leaves_with_paths, user_tree = tree_util.tree_flatten_with_path((dyn_args, dyn_kwargs))
    abstract_args, abstract_kwargs = tree_util.tree_unflatten(
        user_tree, [_jax_argument(leaf) for _, leaf in leaves_with_paths]
    )
    full_args, full_kwargs = signature.merge_static(
        abstract_args, abstract_kwargs, static_pos, static_kw
    )
    jax_lowered = _jitted(fn, static_argnums, static_argnames, donate_argnums).lower(
        *full_args, **full_kwargs
    )
    jax_module = jax_lowered.compiler_ir("stablehlo")
    module, lc = _import_module(jax_module, where)
    # JAX's own tree: it knows the statics of a function the user already wrapped in jax.jit.
    in_tree = jax_lowered.in_tree
    n_main = _main_arity(module)
    if n_main != in_tree.num_leaves:
        raise ValueError(
            f"{where}: JAX's module takes {n_main} arguments for {in_tree.num_leaves} input "
            "leaves (jax.jit drops unused arguments unless keep_unused=True; effects such as "
            "ordered io_callback add tokens); pass the plain function or "
            "jax.jit(fn, keep_unused=True), and no effects"
        )
    adopted = _module.adopt(module, name=name, where=where)
    # The same check as a module from a file: no host callbacks, custom calls aotkit runs.
    trust.check(adopted.module, where)
    if in_tree == user_tree:
        _check_dtypes(leaves_with_paths, adopted.flat_in_specs, where)
    return adopted, in_tree, jax_lowered.out_tree


def _jitted(fn, static_argnums, static_argnames, donate_argnums):
    """`fn` under jax.jit; a function the user already jitted keeps its own options."""
    if _is_jax_jitted(fn):
        return fn
    # keep_unused: aotkit's calling convention has one @main argument per input leaf.
    return jax.jit(
        fn,
        static_argnums=static_argnums,
        static_argnames=static_argnames,
        donate_argnums=_as_tuple(donate_argnums),
        keep_unused=True,
    )


def _is_jax_jitted(fn) -> bool:
    return callable(getattr(fn, "lower", None)) and type(fn).__module__.startswith("jaxlib")


def _as_tuple(value) -> tuple:
    if value is None:
        return ()
    if isinstance(value, int | str):
        return (value,)
    return tuple(value)


def _jax_argument(leaf):
    """An argument JAX can lower with: aotkit specs become `jax.ShapeDtypeStruct`."""
    if isinstance(leaf, ShapeDtype):
        return jax.ShapeDtypeStruct(leaf.shape, leaf.dtype)
    return leaf


def _import_module(jax_module: ir.Module, where: str):
    # Bytecode, not text: exact constants, locations kept, and no printing of large weights.
    buffer = io.BytesIO()
    jax_module.operation.write_bytecode(buffer)
    try:
        return _module.parse(buffer.getvalue())
    except ir.MLIRError as e:
        raise ValueError(
            f"{where}: aotkit's MLIR context cannot read JAX's module: "
            f"{modules.diagnostic(e)}; JAX used a dialect aotkit does not load: please report "
            "this with the function"
        ) from None


def _main_arity(module: ir.Module) -> int:
    with IR_LOCK:
        main = modules.main_function(module)
        if main is None:
            return -1
        return len(modules.function_type(main).inputs)


def _check_dtypes(leaves_with_paths, specs: tuple[ShapeDtype, ...], where: str) -> None:
    """A leaf with an explicit 64-bit dtype must keep it: without x64, JAX narrows it."""
    if jax.config.jax_enable_x64:
        return
    for (path, leaf), got in zip(leaves_with_paths, specs, strict=True):
        if dtypes.weak_kind(leaf) is not None or getattr(leaf, "dtype", None) is None:
            continue
        asked = np.dtype(leaf.dtype)
        if asked.itemsize > got.dtype.itemsize and asked.kind == got.dtype.kind:
            raise ValueError(
                f"{where}: argument {signature.arg_path(path)} is {asked.name} but JAX lowered "
                f"it as {got.dtype.name} because jax_enable_x64 is off; enable it with "
                f"jax.config.update('jax_enable_x64', True), or pass {got.dtype.name}"
            )
