"""The JAX front end: a JAX function, lowered by JAX itself, as an aotkit `Program`.

This is the one place in aotkit where JAX traces (`jax.jit(fn).lower(...)`). JAX's StableHLO
module lives in JAX's own MLIR context; it is written as bytecode and read back into a
lowering context of aotkit's, then adopted (`_module.adopt`): `module @<fn name>` with a
public `@main` whose arguments are the flat input leaves (static arguments removed),
placement attributes dropped, donation kept. The module is jax.jit's: JAX prunes the
arguments the program does not use (and with them dead loop carries), and the program
records which leaves it takes no argument for (`Program.pruned`). A call still passes one
argument per input leaf: a one-device executable, like jax.jit's, takes no parameter for a
pruned leaf, which the call checks and does not transfer (`backends.base.PrunedExecutable`);
the transforms leave it out too, and a sharded executable takes it back as an unused
argument of `@main` (`Options.keep_unused` lowers with `jax.jit(fn, keep_unused=True)`
instead). From there
the module takes aotkit's pipeline, dumps, backends and `Compiled` like a traced one.
`in_shardings`/`out_shardings` go to `jax.jit` as they are (PartitionSpecs made
NamedShardings over the program's mesh): JAX writes the annotations, and the module keeps
them.

Semantics are JAX's, not NumPy's: dtypes follow JAX's promotion and `jax_enable_x64`.
"""

from __future__ import annotations

import io
import os
from collections.abc import Callable

import jax
import jax.extend.core
import jax.interpreters.mlir
import numpy as np
from jax import tree_util
from jaxlib.mlir import ir
from jaxlib.mlir.dialects import stablehlo

from aotkit import _compat, _context, arguments, dtypes, frontends, modules, spmd
from aotkit.frontends import _module, trust
from aotkit.program import DEFAULT_OPTIONS, Options, Program
from aotkit.specs import ShapeDtype
from aotkit.symbolic import algebra

# aotkit's own frames are not the user's: JAX's locations skip the package's folder.
_compat.exclude_from_jax_locations(os.path.dirname(os.path.dirname(__file__)) + os.sep)


def trace_jax(
    fn: Callable,
    args: tuple,
    kwargs: dict,
    options: Options = DEFAULT_OPTIONS,
    *,
    lc: _context.LoweringContext | None = None,
    where: str | None = None,
) -> Program:
    """Lowers `fn` with JAX for `args`/`kwargs` (values, `aotkit.ShapeDtype` or
    `jax.ShapeDtypeStruct` specs): JAX's module, adopted in a lowering context (`lc`, the
    context of the trace the module is evaluated in, else a new lowering's), with the
    input and output pytrees. Errors begin with `where` (default: `lower: <fn>`).

    The static and donated arguments and the shardings of `options` mean what they mean
    to `jax.jit`; a function wrapped in jax.jit keeps its own unless `options` names some.
    """
    options = frontends.inherit_jax_jit(fn, options)
    static_argnums, static_argnames = options.static_argnums, options.static_argnames
    donate_argnums = options.donate_argnums
    in_shardings, out_shardings = options.in_shardings, options.out_shardings
    name = arguments.function_name(fn)
    where = where or f"lower: {name} (frontend='jax')"
    static_argnums = _as_tuple(static_argnums)
    static_argnames = _as_tuple(static_argnames)
    wrapped = frontends.jax_jit_options(fn)
    lenient = frontends.statics_from_jax(wrapped, static_argnums, static_argnames)
    own = wrapped.options if wrapped is not None else None
    own_shardings = own is not None and (
        own.in_shardings is not None or own.out_shardings is not None
    )
    if own_shardings and in_shardings is None and out_shardings is None:
        # The shardings it was given to jax.jit, which the re-jit below must keep.
        in_shardings, out_shardings = own.in_shardings, own.out_shardings
        own_shardings = False
    dyn_args, dyn_kwargs, static_pos, static_kw = arguments.split_static(
        where, args, kwargs, static_argnums, static_argnames, lenient
    )
    user_args = (dyn_args, dyn_kwargs)
    leaves_with_paths, user_tree = tree_util.tree_flatten_with_path(user_args)
    _refuse_symbolic(where, fn, len(dyn_args), static_argnums, leaves_with_paths)
    abstract_args, abstract_kwargs = tree_util.tree_unflatten(
        user_tree, [_jax_argument(leaf) for _, leaf in leaves_with_paths]
    )
    full_args, full_kwargs = arguments.merge_static(
        abstract_args, abstract_kwargs, static_pos, static_kw
    )
    sharded = in_shardings is not None or out_shardings is not None
    mesh = flat_in = None
    jit_shardings = {}
    if sharded:
        if own_shardings or (wrapped is None and _is_jax_jitted(fn)):
            why = (
                "with shardings of its own; give the shardings to one of the two"
                if own_shardings
                else "whose options this jax does not expose; give the shardings to jax.jit"
            )
            raise ValueError(
                f"{where}: in_shardings/out_shardings were given to aotkit for a function "
                f"already wrapped in jax.jit {why}"
            )
        mesh = spmd.find_mesh(where, in_shardings, out_shardings)
        if mesh is None:
            spmd.refuse_bare_specs(where, "in_shardings", in_shardings)
            spmd.refuse_bare_specs(where, "out_shardings", out_shardings)
            sharded = False
    if sharded:
        # A typed key leaf is sharded as its uint32 data, the module's argument.
        specs, _ = arguments.flat_specs(name, tree_util.tree_map(_key_data_spec, user_args))
        flat_in = spmd.flat_in_shardings(where, in_shardings, user_tree, specs, mesh)
        args_tree = user_tree.children()[0]
        jit_shardings = dict(
            in_shardings=tree_util.tree_unflatten(args_tree, flat_in[: args_tree.num_leaves]),
            out_shardings=_over_mesh(out_shardings, mesh),
        )
    # A sharded program keeps its arguments: its shardings are given per input leaf.
    keep_unused = options.keep_unused or sharded
    jitted = _jitted(
        fn, static_argnums, static_argnames, donate_argnums, jit_shardings, keep_unused
    )
    jax_traced = jitted.trace(*full_args, **full_kwargs)
    jax_lowered = jax_traced.lower()
    jax_module = jax_lowered.compiler_ir("stablehlo")
    module, lc = _import_module(jax_module, where, lc)
    # JAX's own tree: it knows the statics of a function the user already wrapped in jax.jit.
    in_tree = jax_lowered.in_tree
    n_main = _main_arity(module)
    pruned = None
    if n_main != in_tree.num_leaves:
        pruned = _restore_pruned(module, jax_lowered)
        if pruned is not None:
            n_main = in_tree.num_leaves
    if n_main != in_tree.num_leaves:
        raise ValueError(
            f"{where}: JAX's module takes {n_main} arguments for {in_tree.num_leaves} input "
            "leaves (jax.jit drops unused arguments unless keep_unused=True; effects such as "
            "ordered io_callback add tokens); pass the plain function or "
            "jax.jit(fn, keep_unused=True), and no effects"
        )
    adopted = _module.adopt(
        module, name=name, where=where, sharded=sharded, mesh=mesh, frontend="jax"
    )
    # The same check as a module from a file: no host callbacks, custom calls aotkit runs.
    trust.check(adopted.module, where)
    if in_tree == user_tree:
        _check_dtypes(leaves_with_paths, adopted.signature.flat_in_specs, where)
    out_tree = jax_lowered.out_tree
    partitioning = adopted.signature.partitioning
    if sharded and partitioning is not None:
        flat_out = spmd.flat_shardings(
            where,
            "out_shardings",
            out_shardings,
            out_tree,
            adopted.signature.flat_out_specs,
            mesh,
            spmd.result_labels(out_tree),
            default_replicated=False,
        )
        ins = spmd.replicate_missing(flat_in, mesh) if mesh is not None else flat_in
        partitioning = spmd.Partitioning(mesh, mesh.size, ins, flat_out)
    signature = adopted.signature.replace(
        in_tree=in_tree,
        out_tree=out_tree,
        partitioning=partitioning,
        in_keys=arguments.key_leaves(tree_util.tree_leaves(jax_lowered.args_info)),
        out_keys=arguments.key_leaves(tree_util.tree_leaves(jax_lowered.out_info)),
    )
    _check_keys(signature, where)
    if pruned:
        # The module is jax.jit's: the leaves JAX pruned were put back for adopting (a spec
        # per leaf) and come out again (`Program.compiled_form` says what backends compile).
        with _context.of(adopted.module):
            modules.erase_unused_arguments(adopted.module, pruned)
    marked = None
    if not sharded:
        stops = _stop_gradients_marked(jax_traced.jaxpr)
        if stops is not None:
            marked = _marked_module(stops, keep_unused, n_main, pruned or (), name, where, lc)
    return adopted.replace(signature=signature, pruned=pruned or (), marked_module=marked)


# --- stop_gradient, kept for the transforms ------------------------------------------------------
# JAX lowers `jax.lax.stop_gradient` to nothing: its module differentiates through it. For
# the transforms, a function whose own code calls it (or a library's other than JAX) is
# lowered again from its jaxpr with each such stop_gradient bound as `_STOP` instead, which
# lowers to a barrier marked `modules.STOP_GRADIENT` (the value unchanged, the derivative
# zero in aotkit's rules). JAX's own functions stop gradients where a custom rule, which
# JAX's module does not carry, gives the derivative (jnp.linalg.solve's LU factors, inside
# a custom_linear_solve) or where the derivative does not depend on it (logsumexp's shift
# by the maximum): aotkit differentiates through those, as the rules' primal computes.

_JAX_DIR = os.path.dirname(jax.__file__) + os.sep
_TREE_MAPS = (
    os.path.join(_JAX_DIR, "_src", "tree_util.py"),
    os.path.join(_JAX_DIR, "_src", "tree.py"),
)

_STOP = jax.extend.core.Primitive("aotkit_stop_gradient")
_STOP.def_abstract_eval(lambda aval: aval)


def _lower_stop(ctx, x):
    op = stablehlo.OptimizationBarrierOp([x])
    op.attributes[modules.STOP_GRADIENT] = ir.UnitAttr.get()
    return list(op.results)


jax.interpreters.mlir.register_lowering(_STOP, _lower_stop)


def _stop_gradients_marked(closed):
    """`closed` (a ClosedJaxpr) with every `stop_gradient` the user's code (or a library's
    other than JAX) binds in it, or in a jaxpr inside it (a nested jit, a loop body, a
    branch), bound as `_STOP`; None if there is none. JAX's own (`_written_outside_jax`),
    and any inside a custom rule's primal (`custom_jvp_call`, `custom_vjp_call`,
    `custom_linear_solve`), are left as they are: the rule, which the module does not
    carry, is what gives the derivative there, and aotkit differentiates the primal as if
    they were not there."""
    jaxpr = _marked_jaxpr(closed.jaxpr)
    return None if jaxpr is closed.jaxpr else closed.replace(jaxpr=jaxpr)


def _written_outside_jax(eqn) -> bool:
    """Whether a stop_gradient equation was bound by code other than JAX's own: the frame
    that called `jax.lax.stop_gradient` (past `jax.tree.map`, which may apply it) is not in
    JAX's package. Unknown (no frames kept) counts as JAX's."""
    frames = _compat.equation_frames(eqn)
    if frames is None:
        return False
    calls = [
        i
        for i, (file, fn) in enumerate(frames)
        if fn == "stop_gradient" and file.startswith(_JAX_DIR)
    ]
    if not calls:
        return False
    for file, _ in frames[calls[-1] + 1 :]:
        if file not in _TREE_MAPS:
            return not file.startswith(_JAX_DIR)
    return False


def _marked_jaxpr(jaxpr):
    eqns, changed = [], False
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "stop_gradient":
            if _written_outside_jax(eqn):
                eqn = eqn.replace(primitive=_STOP, params={})
                changed = True
        elif not eqn.primitive.name.startswith("custom_"):
            params = {k: _marked_param(v) for k, v in eqn.params.items()}
            if any(params[k] is not v for k, v in eqn.params.items()):
                eqn = eqn.replace(params=params)
                changed = True
        eqns.append(eqn)
    return jaxpr.replace(eqns=eqns) if changed else jaxpr


def _marked_param(value):
    core = jax.extend.core
    if isinstance(value, core.ClosedJaxpr):
        jaxpr = _marked_jaxpr(value.jaxpr)
        return value if jaxpr is value.jaxpr else value.replace(jaxpr=jaxpr)
    if isinstance(value, core.Jaxpr):
        return _marked_jaxpr(value)
    if isinstance(value, tuple) and any(
        isinstance(v, core.ClosedJaxpr | core.Jaxpr) for v in value
    ):
        marked = tuple(_marked_param(v) for v in value)
        return value if all(a is b for a, b in zip(marked, value, strict=True)) else marked
    return value


def _marked_module(closed, keep_unused, n_main, pruned, name, where, lc) -> ir.Module:
    """The module of the marked jaxpr `closed`, adopted as the program's own (in `lc`) and
    taking the same arguments: `Program.marked_module`. Lowered now, under the same JAX
    settings (x64 mode, ...) as the program's."""
    specs = [jax.ShapeDtypeStruct(a.shape, a.dtype, weak_type=a.weak_type) for a in closed.in_avals]
    fn = jax.extend.core.jaxpr_as_fun(closed)
    lowered = jax.jit(fn, keep_unused=keep_unused).lower(*specs)
    module, _ = _import_module(lowered.compiler_ir("stablehlo"), where, lc)
    again = ()
    if _main_arity(module) != n_main:
        again = _restore_pruned(module, lowered) or ()
    if _main_arity(module) != n_main or again != pruned:
        raise ValueError(
            f"{where}: JAX's module with jax.lax.stop_gradient kept for the transforms takes "
            "other arguments than the program: please report this"
        )
    adopted = _module.adopt(module, name=name, where=where, sharded=False, frontend="jax")
    if pruned:
        with _context.of(adopted.module):
            modules.erase_unused_arguments(adopted.module, pruned)
    return adopted.module


def _over_mesh(shardings, mesh):
    """`shardings` with each PartitionSpec leaf a NamedSharding over `mesh` (JAX reads a bare
    PartitionSpec against its own ambient mesh only)."""
    from jax.sharding import NamedSharding, PartitionSpec

    def convert(leaf):
        if isinstance(leaf, PartitionSpec) and mesh is not None:
            return NamedSharding(mesh, leaf)
        return leaf

    return tree_util.tree_map(convert, shardings, is_leaf=spmd.is_sharding_leaf)


def _jitted(fn, static_argnums, static_argnames, donate_argnums, shardings, keep_unused):
    """`fn` under jax.jit (with `keep_unused`, every argument kept). A function the user
    already jitted is jitted again from its own function and options (and aotkit's
    `keep_unused`); if this jax hides its options, it is lowered as it is."""
    options = frontends.jax_jit_options(fn)
    if options is not None:
        fn = options.fun
    elif _is_jax_jitted(fn):
        return fn
    return jax.jit(
        fn,
        static_argnums=static_argnums,
        static_argnames=static_argnames,
        donate_argnums=_as_tuple(donate_argnums),
        keep_unused=keep_unused,
        **shardings,
    )


def _restore_pruned(module: ir.Module, jax_lowered) -> tuple[int, ...] | None:
    """Puts back, as unused arguments of `@main` at their places, the input leaves jax.jit
    pruned from JAX's module (the rest of the module stays jax.jit's), so that it is adopted
    with one argument per leaf; the pruned leaves' indices, or None, leaving the module as it
    is, when this jax does not say which it kept. (A typed PRNG key leaf is its uint32 data
    here, as JAX lowers a key it keeps.)"""
    kept = _compat.kept_arguments(jax_lowered)
    avals = tree_util.tree_leaves(jax_lowered.in_avals)
    if kept is None or any(not 0 <= i < len(avals) for i in kept):
        return None
    pruned = tuple(i for i in range(len(avals)) if i not in set(kept))
    with _context.of(module), ir.Location.unknown():
        main = modules.main_function(module)
        if main is None or len(main.regions[0].blocks[0].arguments) != len(kept):
            return None
        specs = {i: _key_data_spec(avals[i]) for i in pruned}
        modules.insert_unused_arguments(
            module,
            {i: dtypes.tensor_type(tuple(s.shape), np.dtype(s.dtype)) for i, s in specs.items()},
        )
    return pruned


def _is_jax_jitted(fn) -> bool:
    return callable(getattr(fn, "lower", None)) and type(fn).__module__.startswith("jaxlib")


def _as_tuple(value) -> tuple:
    if value is None:
        return ()
    if isinstance(value, int | str):
        return (value,)
    return tuple(value)


def _refuse_symbolic(where: str, fn, n_args: int, static_argnums, leaves_with_paths) -> None:
    """JAX lowers a function here for concrete shapes: a spec with symbolic dimensions is
    refused, naming the two ways that take one."""
    for path, leaf in leaves_with_paths:
        if isinstance(leaf, ShapeDtype) and not algebra.is_static(leaf.shape):
            names = arguments.parameter_names(fn, n_args, set(static_argnums))
            name = arguments.arg_path(path, names)
            raise ValueError(
                f"{where}: argument {name} is {leaf}, with symbolic dimensions, which JAX's "
                "lowering here does not take; trace the function with aotkit "
                "(frontend='aotkit', for aotkit.numpy code), or export it with jax.export "
                "(jax.export.symbolic_shape) and load it with "
                "aotkit.load_module(exported.serialize())"
            )


def _jax_argument(leaf):
    """An argument JAX can lower with: aotkit specs become `jax.ShapeDtypeStruct`."""
    if isinstance(leaf, ShapeDtype):
        return jax.ShapeDtypeStruct(leaf.shape, leaf.dtype)
    return leaf


def _key_data_spec(leaf):
    """The spec of a typed PRNG key leaf's uint32 data; any other leaf as it is."""
    if arguments.key_dtype(leaf) is None:
        return leaf
    return arguments.key_data_spec(jax.ShapeDtypeStruct(leaf.shape, leaf.dtype))


def _import_module(jax_module: ir.Module, where: str, lc: _context.LoweringContext | None = None):
    # Bytecode, not text: exact constants, locations kept, and no printing of large weights.
    buffer = io.BytesIO()
    jax_module.operation.write_bytecode(buffer)
    try:
        if lc is None:
            return _module.parse(buffer.getvalue())
        with lc:
            return ir.Module.parse(buffer.getvalue(), context=lc.mlir), lc
    except ir.MLIRError as e:
        raise ValueError(
            f"{where}: aotkit's MLIR context cannot read JAX's module: "
            f"{modules.diagnostic(e)}; JAX used a dialect aotkit does not load: please report "
            "this with the function"
        ) from None


def _main_arity(module: ir.Module) -> int:
    with _context.of(module):
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
        if arguments.key_dtype(leaf) is not None:
            continue
        asked = np.dtype(leaf.dtype)
        if asked.itemsize > got.dtype.itemsize and asked.kind == got.dtype.kind:
            raise ValueError(
                f"{where}: argument {arguments.arg_path(path)} is {asked.name} but JAX lowered "
                f"it as {got.dtype.name} because jax_enable_x64 is off; enable it with "
                f"jax.config.update('jax_enable_x64', True), or pass {got.dtype.name}"
            )


def _check_keys(signature, where: str) -> None:
    """JAX lowers a typed key leaf of shape S as uint32[S + its key shape]: the layout that
    `Compiled` unwraps and wraps (aotkit/arguments.py)."""
    sides = (
        (signature.in_keys, signature.flat_in_specs),
        (signature.out_keys, signature.flat_out_specs),
    )
    for keys, specs in sides:
        for key, spec in zip(keys, specs, strict=False):
            assert key is None or (
                spec.dtype == np.uint32 and spec.shape[: len(key.shape)] == key.shape
            ), f"{where}: JAX lowered the key {key} as {spec}"
