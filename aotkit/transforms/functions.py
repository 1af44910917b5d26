"""Transforms of Python functions inside a trace: what `aotkit.grad(f)(x)` does when `x` is
traced, with JAX's semantics (pytrees, `argnums`, `has_aux`, `in_axes`/`out_axes`).

The function is traced into a region of its own (a detached block whose arguments are
the flattened inputs); the transform then evaluates that block's ops with its rules,
emitting the transformed program at the current insertion point (forward and reverse mode
move the ops they emit unchanged out of the block instead of copying them), and the
region is dropped. The outer program stays one module, and a function that closes over
values of the enclosing trace sees them as constants of the transform (a training step's
batch, captured by its loss). Nested transforms (`grad(grad(f))`, `vmap(grad(f))`,
`jvp(grad(f))`) nest regions.

`aotkit.functional` wraps these in the public `aotkit.grad`, `aotkit.vmap`, ... (which,
called outside a trace, jit themselves); `Lowered.grad` and friends apply them to a
program called as a function (`call_program`).

A function written with JAX (`by_frontend`: chosen as `jit`'s `frontend="auto"` chooses,
or asked for) is lowered by JAX for the avals of the tracers it is called on, and JAX's
module is evaluated inline (`call_jax`): the transforms then apply aotkit's rules to the
ops JAX wrote, never JAX's own transforms.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import jax
import numpy as np
from jax import dtypes as jax_dtypes
from jax import tree_util
from jaxlib.mlir import ir
from jaxlib.mlir.dialects import stablehlo

from aotkit import _context, arguments, autograph, dtypes, frontends, modules
from aotkit.arguments import function_name
from aotkit.frontends import jax as jax_frontend
from aotkit.specs import ShapeDtype
from aotkit.symbolic import algebra
from aotkit.tracing import control as tracer_control
from aotkit.tracing import core, keys
from aotkit.tracing.core import Tracer
from aotkit.tracing.trace import output_value
from aotkit.transforms import _hlo as H
from aotkit.transforms import batching, control, linalg, windows  # noqa: F401  (they fill the rule tables)
from aotkit.transforms.core import Env, Forward, LinVar, Tape, check_policy, transpose
from aotkit.transforms.jvp import JVPEvaluator

# --- a function as a block -----------------------------------------------------------------------


class TracedBlock:
    """A function traced into a detached block: its ops, and what calling it needs."""

    __slots__ = ("block", "functions", "out_tree", "scratch", "name")

    def __init__(self, block, functions, out_tree, scratch, name):
        self.block = block
        self.functions = functions
        self.out_tree = out_tree
        self.scratch = scratch
        self.name = name

    @property
    def out_avals(self):
        ret = self.block.operations[-1].operation  # the terminator
        return [_aval(v) for v in ret.operands]

    def drop(self) -> None:
        """Done with the block. The trace erases it when it ends (`trace_function`
        registered it): until then a reverse-mode backward pass (a `vjp_fn` called later)
        may evaluate its regions."""


def _aval(v):
    t = ir.RankedTensorType(v.type)
    return tuple(t.shape), dtypes.dtype_of_ir_type(t.element_type)


def as_tracer(where: str, x) -> Tracer:
    """An input leaf as a tracer of the current trace (Python scalars weakly typed)."""
    if isinstance(x, Tracer):
        return x
    kind = dtypes.weak_kind(x)
    if kind is not None and not isinstance(x, np.generic):
        return core.as_weak(core.full((), x, dtypes.scalar_argument_dtype(kind)))
    try:
        return core.constant(np.asarray(x))
    except (TypeError, ValueError) as e:
        raise TypeError(
            f"{where}: argument {x!r:.60} is not an array ({type(x).__name__}); transformed "
            "functions take arrays, Python scalars and pytrees of them"
        ) from e


def trace_function(fun: Callable, leaves: list[Tracer], in_tree, where: str) -> TracedBlock:
    """Traces `fun(*args, **kwargs)` (the pytree `in_tree` of `leaves`' avals) into a
    detached block; its Python control flow is converted when the enclosing trace's is."""
    with core.user_location():
        scratch = ir.Operation.create(
            "stablehlo.case", results=[], operands=[], regions=1, ip=False
        )
    # Erased when the enclosing trace ends, in the reverse order of creation: a block traced
    # later may use the values of one traced earlier (a backward pass emitted into it),
    # never the other way round.
    core.current_scope().emitted.scratch.append(scratch)
    block = scratch.regions[0].blocks.append(
        *(dtypes.tensor_type(t.shape, t.dtype) for t in leaves)
    )
    scope = core.push_scope(where)
    try:
        with ir.InsertionPoint(block):
            args = [
                Tracer(a, t.shape, t.dtype, scope, t.weak)
                for a, t in zip(block.arguments, leaves, strict=True)
            ]
            a, k = tree_util.tree_unflatten(in_tree, args)
            # Converted as the function being traced is (`jit`'s `autograph`).
            try:
                out = (autograph.convert(fun) if autograph.active() else fun)(*a, **k)
            except TypeError as e:
                error = _jax_on_tracers(where, fun, e)
                if error is e:
                    raise
                raise error.with_traceback(e.__traceback__.tb_next) from e
            with_paths, out_tree = tree_util.tree_flatten_with_path(out)
            outs = [output_value(p, leaf) for p, leaf in with_paths]
            with core.user_location():
                stablehlo.ReturnOp([t.value for t in outs])
    finally:
        core.pop_scope(scope)
    return TracedBlock(block, {}, out_tree, scratch, where)


# How JAX names a value it cannot take, when that value is one of aotkit's tracers (or
# traced keys).
_TRACER_TYPES = tuple(
    f"<class '{t.__module__}.{t.__qualname__}'>" for t in (Tracer, keys.KeyTracer)
)


def _jax_on_tracers(where: str, fun, error: TypeError) -> TypeError:
    """`error` itself, unless it is JAX refusing one of aotkit's tracers (`fun` calls
    jax.numpy or jax.lax and aotkit's tracer ran it): then the error that says how to let
    JAX lower `fun`."""
    text = str(error)
    if not any(t in text for t in _TRACER_TYPES) or "frontend='jax'" in text:
        return error
    name = function_name(fun)
    transform = where.partition("(")[0]
    return TypeError(
        f"{where}: {name} calls JAX (jax.numpy, jax.lax, ...) on aotkit's traced values, "
        f"which JAX cannot take ({text.splitlines()[0]}); pass frontend='jax' to "
        f"aotkit.{transform} to let JAX lower {name}, or write it with aotkit.numpy"
    )


# --- functions JAX lowers ------------------------------------------------------------------------


def by_frontend(fun: Callable, frontend: str, where: str) -> Callable:
    """`fun` as the transforms call it inside a trace: itself when aotkit's tracer runs it,
    else a function that JAX lowers (`call_jax`). `frontend` is `jit`'s: "auto" lets
    `aotkit.frontends.choose` decide (an aotkit transform or jit is aotkit's)."""
    if frontends.is_transform(fun):  # traced by aotkit; `frontend` lowers its function
        return frontends.for_transform(fun, frontend)
    if frontends.resolve(fun, frontend, where).name == "aotkit":
        return fun

    def lowered_by_jax(*args, **kwargs):
        return call_jax(fun, where, args, kwargs)

    functools.update_wrapper(lowered_by_jax, fun, updated=())
    return lowered_by_jax


def call_jax(fun: Callable, where: str, args: tuple, kwargs: dict):
    """`fun(*args, **kwargs)` inside a trace, `fun` being a JAX function: JAX lowers it for
    the shapes and dtypes (and weak types) of the arguments, in the trace's MLIR context,
    and its module is evaluated at the insertion point, its calls inlined."""
    # A typed key is one leaf to JAX (which lowers it as its data) and its data here.
    leaves, tree = tree_util.tree_flatten(_concrete_keys((args, kwargs)), is_leaf=keys.is_key)
    tracers = [x.data if keys.is_key(x) else as_tracer(where, x) for x in leaves]
    specs = [
        x.spec if keys.is_key(x) else jax.ShapeDtypeStruct(t.shape, t.dtype, weak_type=t.weak)
        for x, t in zip(leaves, tracers, strict=True)
    ]
    a, k = tree_util.tree_unflatten(tree, specs)
    lc = _context.of(ir.InsertionPoint.current.block.owner)
    name = function_name(fun)
    try:
        program = jax_frontend.trace_jax(fun, a, k, lc=lc, where=f"{where}: JAX lowering {name}")
    except TypeError as e:
        text = str(e)
        if not any(t in text for t in _TRACER_TYPES) and "JaxprTracer" not in text:
            raise
        # JAX met a value of the enclosing trace: the function closes over it.
        raise TypeError(
            f"{where}: JAX lowering {name}: {name} uses a value of the function aotkit is "
            f"tracing that is not one of its arguments ({text.splitlines()[0]}); JAX lowers "
            f"{name} on its arguments only: pass that value as an argument"
        ) from e
    src = _Program(_module_for_transforms(program))
    core.current_scope().emitted.unchecked = True  # its regions are copied as JAX wrote them
    ev = JVPEvaluator(src.functions, Forward(), "call")
    # (@main takes no argument for a leaf JAX pruned: its value goes nowhere)
    pruned = program.pruned
    args = [(x, None) for i, x in enumerate(tracers) if i not in pruned]
    outs = ev.run_block(src.block, args, Env())
    sig = program.signature
    return tree_util.tree_unflatten(sig.out_tree, keys.wrap([p for p, _ in outs], sig.out_keys))


def _module_for_transforms(program):
    """The module the transforms evaluate: a JAX program's with its stop_gradient calls and
    custom rules kept (`Program.marked_module`), which its own module lowers away."""
    marked = program.marked_module() if program.marked_module is not None else None
    return marked if marked is not None else program.module


class _Program:
    """A module's @main as a TracedBlock-like source (for `call_program`)."""

    def __init__(self, module):
        self.module = module  # (its blocks live as long as it does)
        self.functions = modules.functions(module)
        self.block = modules.main_function(module).regions[0].blocks[0]


def _split_aux(where: str, out_tree, has_aux: bool, short: str, noun: str):
    """(the main output's tree, the auxiliary data's or None): with `has_aux`, the function
    must return a tuple or list of two, as JAX requires."""
    if not has_aux:
        return out_tree, None
    if (
        out_tree.num_nodes == 1
        or len(out_tree.children()) != 2
        or out_tree.node_data()[0] not in (tuple, list)
    ):
        raise TypeError(
            f"{where}: has_aux=True needs the function to return a pair ({short}, aux), "
            f"got {out_tree}; return a tuple of the {noun} and the auxiliary data"
        )
    main_tree, aux_tree = out_tree.children()
    return main_tree, aux_tree


def _concrete_keys(tree):
    """`tree` with its concrete typed key arrays as `KeyTracer`s (constants of the trace)."""
    return tree_util.tree_map(keys.from_concrete, tree)


def _flatten(where: str, args: tuple, kwargs: dict):
    """(leaf tracers, tree) of a call's arguments, each typed key (concrete ones made
    constants) a node whose leaf is its data."""
    leaves, in_tree = tree_util.tree_flatten(_concrete_keys((args, kwargs)))
    return [as_tracer(where, x) for x in leaves], in_tree


def _key_dims(tree) -> list[int]:
    """Per leaf of `tree` as `_flatten` flattens it: how many trailing dimensions are a
    typed key's own (those of its data), else 0."""
    return [
        len(keys.key_shape(x.dtype)) if keys.is_key(x) else 0
        for x in tree_util.tree_leaves(_concrete_keys(tree), is_leaf=keys.is_key)
    ]


def _user_structure(tree):
    """The structure of `tree` as its user sees it: each typed key one leaf."""
    return tree_util.tree_structure(_concrete_keys(tree), is_leaf=keys.is_key)


def _key_zeros(given, like):
    """`given`, tangents or cotangents of `like` (one leaf per typed key of `like`, as JAX
    takes them), with each key's entry as the key's node over float0 zeros of its data."""

    def entry(x, t):
        if not keys.is_key(x):
            return t
        return keys.KeyTracer(float0_zeros(x.data.shape), x.dtype)

    return tree_util.tree_map(entry, _concrete_keys(like), given, is_leaf=keys.is_key)


def _arg_leaf_ranges(in_tree) -> list[range]:
    """Per positional argument, the range of its leaves in the flat input."""
    args, _ = tree_util.tree_unflatten(in_tree, list(range(in_tree.num_leaves)))
    out, start = [], 0
    for a in args:
        n = len(tree_util.tree_leaves(a))
        out.append(range(start, start + n))
        start += n
    return out


def _argnums(where: str, argnums, n_args: int) -> tuple[int, ...]:
    many = isinstance(argnums, tuple | list)
    nums = tuple(argnums) if many else (argnums,)
    for a in nums:
        if isinstance(a, bool) or not isinstance(a, int | np.integer):
            raise TypeError(f"{where}: argnums must be an int or a tuple of ints, got {argnums!r}")
        if not -n_args <= a < n_args:
            raise ValueError(
                f"{where}: argnums {argnums!r} names positional argument {a}, but the "
                f"function was called with {n_args} positional argument(s)"
            )
    return tuple(int(a) % n_args for a in nums)


# --- forward and reverse mode --------------------------------------------------------------------


def jvp_block(src, primals, tangents, env: Env | None = None):
    """Evaluates `src`'s block (a `TracedBlock`, whose ops it adopts) on primals and tangents
    (None: zero) at the current insertion point; (primal outputs, output tangents)."""
    ev = JVPEvaluator(src.functions, Forward(), "jvp", adopt=src.block)
    outs = ev.run_block(src.block, list(zip(primals, tangents, strict=True)), env or Env())
    return [p for p, _ in outs], [t for _, t in outs]


def linearize_block(src, primals, diff: list[bool], transform: str = "vjp", policy=None):
    """The forward half of reverse mode: evaluates `src` (a `TracedBlock`, whose ops it adopts)
    on primals, emitting the primal program, and returns (primal outputs, backward) where
    `backward(cts)` (one cotangent or None per output) emits the cotangent program and
    returns one cotangent (or None) per input."""
    tape = Tape(policy)
    ev = JVPEvaluator(src.functions, tape, transform, adopt=src.block)
    lin_in = [
        LinVar(p.shape, p.dtype) if d and dtypes.is_inexact(p.dtype) else None
        for p, d in zip(primals, diff, strict=True)
    ]
    outs = ev.run_block(src.block, list(zip(primals, lin_in, strict=True)), Env())
    out_vars = [t for _, t in outs]

    def backward(cts) -> list:
        seeds: dict = {}
        for var, g in zip(out_vars, cts, strict=True):
            if isinstance(var, LinVar) and g is not None:
                g = H.convert(g, var.dtype) if g.dtype != var.dtype else g
                seeds[var] = g if var not in seeds else H.add(seeds[var], g)
        found = transpose(tape.tape, seeds)
        return [found.get(v) if v is not None else None for v in lin_in]

    return [p for p, _ in outs], backward


def _zeros_for(p: Tracer) -> Tracer:
    return H.zeros(p.shape, p.dtype)


def float0_zeros(shape):
    return np.zeros(shape, jax_dtypes.float0)


def _check_scalar_output(where: str, spec) -> None:
    shape, dtype = spec.shape, spec.dtype
    if not dtypes.is_float(dtype):
        raise TypeError(
            f"{where}: grad requires a real-valued output (a float dtype), but the function "
            f"returned {dtypes.short_name(dtype)}; for complex outputs use aotkit.vjp directly"
        )
    if shape != ():
        raise TypeError(
            f"{where}: grad is defined for functions with a scalar output, but the output "
            f"has shape {tuple(shape)}; reduce it to a scalar (a sum or mean) or use "
            "aotkit.vjp or aotkit.jacrev"
        )


def _check_differentiable(where: str, arg, a: int, dtype) -> None:
    """TypeError unless a leaf of dtype `dtype` of positional argument `a` (`arg`) is
    differentiable (without `allow_int`)."""
    if dtypes.is_inexact(dtype):
        return
    key = [x for x in tree_util.tree_leaves(arg, is_leaf=keys.is_key) if keys.is_key(x)]
    got = key[0].dtype.name if key else dtypes.short_name(dtype)
    raise TypeError(
        f"{where}: grad requires real- or complex-valued inputs (a float or "
        f"complex dtype), but argument {a} has a leaf of dtype {got}; pass "
        "allow_int=True for a float0 zero gradient, or leave the argument out "
        "of argnums"
    )


def _value_trees(where: str, out_tree, first, has_aux: bool):
    """(the value's tree, the auxiliary data's or None) of a function `grad` takes: its
    value (whose spec is `first`) one real scalar."""
    value_tree, aux_tree = _split_aux(where, out_tree, has_aux, "value", "value")
    if value_tree.num_leaves != 1 or value_tree.num_nodes != 1:
        raise TypeError(
            f"{where}: grad is defined for functions with one scalar output, but the "
            f"function returned {value_tree}; return one scalar (with has_aux=True, "
            "return (scalar, aux))"
        )
    _check_scalar_output(where, first)
    return value_tree, aux_tree


def value_and_grad(
    fun: Callable,
    args: tuple,
    kwargs: dict,
    *,
    argnums=0,
    has_aux: bool = False,
    allow_int: bool = False,
    checkpoint_loops=None,
    max_trip_count: int | None = None,
    where: str | None = None,
):
    """(value, grads) or ((value, aux), grads) of `fun` at `args` (inside a trace).
    `checkpoint_loops` and `max_trip_count` say how loops keep their carries
    (`core.LoopPolicy`)."""
    where = where or f"grad({function_name(fun)})"
    policy = check_policy(where, checkpoint_loops, max_trip_count)
    nums = _argnums(where, argnums, len(args))
    args = _concrete_keys(args)
    leaves, in_tree = _flatten(where, args, kwargs)
    ranges = _arg_leaf_ranges(in_tree)
    diff = [False] * len(leaves)
    for a in nums:
        for i in ranges[a]:
            diff[i] = True
            if not allow_int:
                _check_differentiable(where, args[a], a, leaves[i].dtype)
    src = trace_function(fun, leaves, in_tree, where)
    try:
        out_specs = src.out_avals
        out_tree = src.out_tree
        _, aux_tree = _value_trees(where, out_tree, _Spec(*out_specs[0]), has_aux)
        outs, backward = linearize_block(src, leaves, diff, "grad", policy)
    finally:
        src.drop()
    value = outs[0]
    cts = backward([H.like(value, 1.0)] + [None] * (len(outs) - 1))
    grads_flat = []
    for i, (leaf, g) in enumerate(zip(leaves, cts, strict=True)):
        if not diff[i]:
            grads_flat.append(None)
        elif not dtypes.is_inexact(leaf.dtype):
            grads_flat.append(float0_zeros(leaf.shape))
        else:
            grads_flat.append(g if g is not None else _zeros_for(leaf))
    args_grads = [
        tree_util.tree_unflatten(
            tree_util.tree_structure(args[a]), [grads_flat[i] for i in ranges[a]]
        )
        for a in nums
    ]
    grads = tuple(args_grads) if isinstance(argnums, tuple | list) else args_grads[0]
    if has_aux:
        aux = tree_util.tree_unflatten(aux_tree, outs[1:])
        return (value, aux), grads
    return value, grads


class _Spec:
    __slots__ = ("shape", "dtype")

    def __init__(self, shape, dtype):
        self.shape, self.dtype = shape, dtype


def vjp(
    fun: Callable,
    primals: tuple,
    *,
    has_aux: bool = False,
    checkpoint_loops=None,
    max_trip_count: int | None = None,
    where: str | None = None,
):
    """(out, vjp_fn) or (out, vjp_fn, aux), inside a trace; `vjp_fn(ct)` emits the
    backward program where it is called (in the same trace) and returns one cotangent
    per primal (float0 zeros for integer primals)."""
    where = where or f"vjp({function_name(fun)})"
    policy = check_policy(where, checkpoint_loops, max_trip_count)
    primals = _concrete_keys(tuple(primals))
    leaves, in_tree = _flatten(where, primals, {})
    src = trace_function(fun, leaves, in_tree, where)
    try:
        out_tree = src.out_tree
        main_tree, aux_tree = _split_aux(where, out_tree, has_aux, "out", "output")
        outs, backward = linearize_block(src, leaves, [True] * len(leaves), "vjp", policy)
    finally:
        src.drop()
    n_main = main_tree.num_leaves
    main_outs = outs[:n_main]
    out = tree_util.tree_unflatten(main_tree, main_outs)
    ranges = _arg_leaf_ranges(in_tree)

    def vjp_fn(ct):
        ct_tree, out_tree = _user_structure(ct), _user_structure(out)
        if ct_tree != out_tree:
            raise TypeError(
                f"{where}: the cotangent has structure {ct_tree}, but the function's output "
                f"has {out_tree}; pass one cotangent per output leaf"
            )
        ct_leaves = tree_util.tree_leaves(_key_zeros(ct, out))
        cts = []
        for c, p in zip(ct_leaves, main_outs, strict=True):
            if not (isinstance(c, np.ndarray) and c.dtype == jax_dtypes.float0):
                c = as_tracer(where, c)
            if c.shape != p.shape:
                raise ValueError(
                    f"{where}: a cotangent has shape {c.shape} where the output has "
                    f"{p.shape}; pass cotangents of the output's shapes"
                )
            cts.append(c if dtypes.is_inexact(p.dtype) else None)
        found = backward(cts + [None] * (len(outs) - n_main))
        flat = [
            (g if g is not None else _zeros_for(leaf))
            if dtypes.is_inexact(leaf.dtype)
            else float0_zeros(leaf.shape)
            for leaf, g in zip(leaves, found, strict=True)
        ]
        return tuple(
            tree_util.tree_unflatten(tree_util.tree_structure(primals[a]), [flat[i] for i in r])
            for a, r in enumerate(ranges)
        )

    if has_aux:
        return out, vjp_fn, tree_util.tree_unflatten(aux_tree, outs[n_main:])
    return out, vjp_fn


def check_jvp_arguments(where: str, primals, tangents) -> None:
    if not isinstance(primals, tuple | list) or not isinstance(tangents, tuple | list):
        raise TypeError(
            f"{where}: primals and tangents must be tuples (one entry per positional "
            f"argument), got {type(primals).__name__} and {type(tangents).__name__}"
        )
    if len(primals) != len(tangents):
        raise ValueError(
            f"{where}: {len(primals)} primal(s) but {len(tangents)} tangent(s); give one "
            "tangent per primal"
        )


def jvp(fun: Callable, primals, tangents, *, has_aux: bool = False, where: str | None = None):
    """(out, out_tangent) or (out, out_tangent, aux) inside a trace."""
    where = where or f"jvp({function_name(fun)})"
    check_jvp_arguments(where, primals, tangents)
    primals = _concrete_keys(tuple(primals))
    leaves, in_tree = _flatten(where, primals, {})
    t_tree, p_tree = _user_structure(tuple(tangents)), _user_structure(primals)
    if t_tree != p_tree:
        raise TypeError(
            f"{where}: the tangents have structure {t_tree}, but the primals have {p_tree}; "
            "give tangents of the primals' structure"
        )
    t_leaves = tree_util.tree_leaves(_key_zeros(tuple(tangents), primals))
    ts = []
    for p, t in zip(leaves, t_leaves, strict=True):
        if not dtypes.is_inexact(p.dtype):
            ts.append(None)
            continue
        t = as_tracer(where, t)
        if t.shape != p.shape or t.dtype != p.dtype:
            raise ValueError(
                f"{where}: a tangent is {dtypes.short_name(t.dtype)}{list(t.shape)} where its "
                f"primal is {dtypes.short_name(p.dtype)}{list(p.shape)}; tangents must have "
                "their primals' shapes and dtypes"
            )
        ts.append(t)
    src = trace_function(fun, leaves, in_tree, where)
    try:
        outs, touts = jvp_block(src, leaves, ts)
        out_tree = src.out_tree
    finally:
        src.drop()
    touts = [
        (t if t is not None else _zeros_for(p))
        if dtypes.is_inexact(p.dtype)
        else float0_zeros(p.shape)
        for p, t in zip(outs, touts, strict=True)
    ]
    if has_aux:
        main_tree, aux_tree = _split_aux(where, out_tree, True, "out", "output")
        n = main_tree.num_leaves
        return (
            tree_util.tree_unflatten(main_tree, outs[:n]),
            tree_util.tree_unflatten(main_tree, touts[:n]),
            tree_util.tree_unflatten(aux_tree, outs[n:]),
        )
    return tree_util.tree_unflatten(out_tree, outs), tree_util.tree_unflatten(out_tree, touts)


# --- checkpoints --------------------------------------------------------------------------------


def checkpoint(fun: Callable, args: tuple, kwargs: dict, where: str):
    """`fun(*args, **kwargs)` wrapped in a one-branch `stablehlo.case` marked
    `aotkit.checkpoint`: reverse mode recomputes its intermediates in the backward pass
    instead of keeping them (as every branch's are), behind an optimization barrier."""
    leaves, in_tree = _flatten(where, args, kwargs)
    src = trace_function(fun, leaves, in_tree, where)

    def body():
        ev = JVPEvaluator(src.functions, Forward(), "checkpoint")
        outs = ev.run_block(src.block, [(x, None) for x in leaves], Env())
        return [p for p, _ in outs]

    outs = tracer_control.switch(0, [body])
    if outs:
        outs[0].value.owner.attributes[control.CHECKPOINT] = ir.UnitAttr.get()
    return tree_util.tree_unflatten(src.out_tree, outs)


# --- batching ------------------------------------------------------------------------------------


_WHAT = {"in_axes": "arguments", "out_axes": "outputs"}


def _axes_for(where: str, what: str, axes, tree) -> list:
    """One axis (int or None) per leaf of `tree`, from a pytree prefix `axes`."""
    try:
        per_leaf = []
        tree_util.tree_map(
            lambda a, sub: per_leaf.extend([a] * len(tree_util.tree_leaves(sub))),
            axes,
            tree,
            is_leaf=lambda x: x is None,
        )
    except ValueError as e:
        raise ValueError(
            f"{where}: {what} {axes!r} is not a pytree prefix of the {_WHAT[what]} "
            f"({tree_util.tree_structure(tree)}); give an int, None, or a prefix of their "
            "structure"
        ) from e
    for a in per_leaf:
        if a is not None and (isinstance(a, bool) or not isinstance(a, int | np.integer)):
            raise TypeError(f"{where}: {what} entries must be ints or None, got {a!r}")
    return per_leaf


def vmap(
    fun: Callable,
    args: tuple,
    kwargs: dict,
    *,
    in_axes=0,
    out_axes=0,
    axis_size: int | None = None,
    where: str | None = None,
):
    """`fun` mapped over an axis of its arguments, inside a trace."""
    where = where or f"vmap({function_name(fun)})"
    if isinstance(in_axes, list):
        in_axes = tuple(in_axes)
    if isinstance(in_axes, tuple) and len(in_axes) != len(args):
        raise ValueError(
            f"{where}: in_axes has {len(in_axes)} entries but the function was called with "
            f"{len(args)} positional argument(s); give one entry per positional argument "
            "(or one int for all)"
        )
    arg_axes = in_axes if isinstance(in_axes, tuple) else (in_axes,) * len(args)
    args = _concrete_keys(tuple(args))
    leaves, in_tree = _flatten(where, args, kwargs)
    axes = _axes_for(where, "in_axes", tuple(arg_axes), tuple(args))
    axes += [0] * (len(leaves) - len(axes))  # keyword arguments are mapped over axis 0
    key_dims = _key_dims((args, kwargs))
    sizes = {}
    normalized = []
    for i, (leaf, a) in enumerate(zip(leaves, axes, strict=True)):
        if a is None:
            normalized.append(None)
            continue
        # (a typed key's axes are those of its data but its own trailing ones)
        rank, shape = leaf.ndim - key_dims[i], leaf.shape[: leaf.ndim - key_dims[i]]
        if not -rank <= a < rank:
            raise ValueError(
                f"{where}: in_axes {a} is out of range for an argument of rank {rank} "
                f"(shape {shape}); choose an axis in [-{rank}, {rank})"
                if rank
                else f"{where}: in_axes {a} maps over a scalar argument, which has no axis; "
                "give None for it"
            )
        a = int(a) % rank
        normalized.append(a)
        sizes.setdefault(leaf.shape[a], []).append(i)
    if len(sizes) > 1:
        listed = ", ".join(f"{n} (leaves {v})" for n, v in sorted(sizes.items()))
        raise ValueError(
            f"{where}: the mapped axes have inconsistent sizes: {listed}; map axes of one size"
        )
    if sizes:
        size = next(iter(sizes))
        if axis_size is not None and axis_size != size:
            raise ValueError(f"{where}: axis_size={axis_size} but the mapped axes have size {size}")
    elif axis_size is None:
        raise ValueError(
            f"{where}: no argument is mapped (every in_axes is None) and axis_size is not "
            "given; map an argument or pass axis_size"
        )
    else:
        size = int(axis_size)
    per_example = []
    values = []
    for leaf, a in zip(leaves, normalized, strict=True):
        if a is None:
            per_example.append(leaf)
            values.append(leaf)
            continue
        shape = leaf.shape[:a] + leaf.shape[a + 1 :]
        per_example.append(_Leaf(shape, leaf.dtype, leaf.weak))
        values.append(H.moveaxis(leaf, a, 0))
    src = trace_function(fun, per_example, in_tree, where)
    try:
        outs = batching.BatchEvaluator(src.functions, size).run_block(
            src.block,
            [(v, a is not None) for v, a in zip(values, normalized, strict=True)],
            Env(),
        )
        out_tree = src.out_tree
    finally:
        src.drop()
    vals = [v for v, _ in outs]
    flags = [b for _, b in outs]
    out_struct = tree_util.tree_unflatten(out_tree, [0] * out_tree.num_leaves)
    o_axes = _axes_for(where, "out_axes", out_axes, out_struct)
    out_key_dims = _key_dims(tree_util.tree_unflatten(out_tree, vals))
    results = []
    for v, b, a, kd in zip(vals, flags, o_axes, out_key_dims, strict=True):
        if a is None:
            if b:
                raise ValueError(
                    f"{where}: out_axes is None for an output that depends on the mapped "
                    "arguments; give it an axis, or return only unmapped values there"
                )
            results.append(v)
            continue
        if not b:
            v = H.broadcast_in_dim(v, (size,) + v.shape, range(1, v.ndim + 1))
        rank = v.ndim - kd
        if not -rank <= a < rank:
            raise ValueError(
                f"{where}: out_axes {a} is out of range for an output of rank {rank - 1}"
            )
        results.append(H.moveaxis(v, 0, int(a) % rank))
    return tree_util.tree_unflatten(out_tree, results)


class _Leaf:
    """The aval of a per-example argument (what `trace_function` needs of a leaf)."""

    __slots__ = ("shape", "dtype", "weak")

    def __init__(self, shape, dtype, weak):
        self.shape, self.dtype, self.weak = tuple(shape), dtype, weak

    @property
    def ndim(self):
        return len(self.shape)


# --- a program called as a function --------------------------------------------------------------


def call_program(program) -> Callable:
    """A function of the program's argument pytree that evaluates its module inline (in
    the current trace): how the stages' transforms treat any program, traced, from JAX or
    loaded, as a function."""
    sig = program.signature
    src = _Program(_module_for_transforms(program))
    pruned = program.pruned  # leaves @main takes no argument for (the JAX front end's)

    def call(*args, **kwargs):
        # A typed key is one leaf of the program's tree, and its data one argument.
        leaves, tree = tree_util.tree_flatten((args, kwargs), is_leaf=keys.is_key)
        if tree != sig.in_tree:
            raise TypeError(f"{sig.name}: called with {tree}, compiled for {sig.in_tree}")
        leaves = [x.data if keys.is_key(x) else x for x in leaves]
        # The regions its ops hold are copied as they are, untested for aotkit-simplify.
        core.current_scope().emitted.unchecked = True
        ev = JVPEvaluator(src.functions, Forward(), "call")
        args = [(x, None) for i, x in enumerate(leaves) if i not in pruned]
        outs = ev.run_block(src.block, args, Env())
        return tree_util.tree_unflatten(sig.out_tree, keys.wrap([p for p, _ in outs], sig.out_keys))

    call.__name__ = sig.name
    call.__qualname__ = sig.name
    return call


# --- the stages' transforms ------------------------------------------------------------------


def _is_inexact_spec(x) -> bool:
    """Whether a spec (or a typed key's) is of a float or complex dtype."""
    return arguments.key_dtype(x) is None and dtypes.is_inexact(x.dtype)


def _none_at_int(tree):
    """The tree with None at its integer (and typed key) leaves: what a tangent or cotangent
    tree holds of them."""
    return tree_util.tree_map(lambda x: x if _is_inexact_spec(x) else None, tree)


def _fill(where: str, given, like):
    """`given` (a tree like `like` with None at integer leaves) completed with zeros at
    those leaves."""
    found = iter(tree_util.tree_leaves(given))
    leaves, tree = tree_util.tree_flatten(like)
    out = []
    for x in leaves:
        if dtypes.is_inexact(x.dtype):
            out.append(next(found))
        else:
            out.append(H.zeros(x.shape, x.dtype))
    return tree_util.tree_unflatten(tree, out)


def drop_float0(tree):
    """The tree with None where it holds float0 arrays (which no compiled program can
    return)."""
    return tree_util.tree_map(
        lambda x: None if isinstance(x, np.ndarray) and x.dtype == jax_dtypes.float0 else x, tree
    )


def stage_function(kind: str, call: Callable, in_specs, out_specs, where: str, **options):
    """(function, args, kwargs) to trace for the stage transform `kind` of a program
    called as `call` with `in_specs` = ((args...), {kwargs}) and `out_specs`."""
    args, kwargs = in_specs
    loops = {
        "checkpoint_loops": options.get("checkpoint_loops"),
        "max_trip_count": options.get("max_trip_count"),
    }
    if kind in ("grad", "value_and_grad"):
        argnums, has_aux = options["argnums"], options["has_aux"]

        def transformed(*a, **k):
            (value, grads) = value_and_grad(
                call, a, k, argnums=argnums, has_aux=has_aux, where=where, **loops
            )
            if kind == "value_and_grad":
                return value, grads
            return (grads, value[1]) if has_aux else grads

        return transformed, args, kwargs
    if kind == "vjp":
        cotangent_specs = _none_at_int(out_specs)

        def pullback(primals, cotangents, **k):
            out, vjp_fn = vjp(lambda *a: call(*a, **k), primals, where=where, **loops)
            cts = vjp_fn(_fill(where, cotangents, out))
            return out, drop_float0(cts)

        return pullback, (tuple(args), cotangent_specs), kwargs
    if kind == "jvp":
        tangent_specs = _none_at_int(tuple(args))

        def pushforward(primals, tangents, **k):
            full = _fill(where, tangents, tuple(primals))
            out, tout = jvp(lambda *a: call(*a, **k), tuple(primals), full, where=where)
            return out, drop_float0(tout)

        return pushforward, (tuple(args), tangent_specs), kwargs
    if kind == "vmap":
        in_axes, out_axes, size = options["in_axes"], options["out_axes"], options["axis_size"]
        if isinstance(size, bool) or not isinstance(size, int | np.integer) or size < 0:
            raise TypeError(f"{where}: axis_size must be a non-negative int, got {size!r}")
        b_args, b_kwargs = batched_specs(where, args, kwargs, in_axes, int(size))

        def batched(*a, **k):
            return vmap(call, a, k, in_axes=in_axes, out_axes=out_axes, where=where)

        return batched, b_args, b_kwargs
    raise AssertionError(kind)


def batched_specs(where: str, args: tuple, kwargs: dict, in_axes, size: int):
    """The argument specs with a new axis of `size` where `in_axes` maps them."""
    if isinstance(in_axes, list):
        in_axes = tuple(in_axes)
    if isinstance(in_axes, tuple) and len(in_axes) != len(args):
        raise ValueError(
            f"{where}: in_axes has {len(in_axes)} entries but the program has {len(args)} "
            "positional argument(s); give one entry per positional argument (or one int)"
        )
    arg_axes = in_axes if isinstance(in_axes, tuple) else (in_axes,) * len(args)
    leaves, tree = tree_util.tree_flatten((tuple(args), kwargs))
    axes = _axes_for(where, "in_axes", tuple(arg_axes), tuple(args))
    axes += [0] * (len(leaves) - len(axes))
    out = []
    for spec, a in zip(leaves, axes, strict=True):
        if a is None:
            out.append(spec)
            continue
        out.append(_with_new_axis(where, "in_axes", spec, a, size))
    b_args, b_kwargs = tree_util.tree_unflatten(tree, out)
    return b_args, b_kwargs


def _with_new_axis(where: str, what: str, spec, a: int, size):
    """`spec` with a new axis of `size` at `a` (`what`: "in_axes" for an argument,
    "out_axes" for an output; ValueError for an axis out of range). A typed key's spec
    stays a `jax.ShapeDtypeStruct`, as JAX spells its dtype."""
    rank = len(spec.shape) + 1
    if not -rank <= a < rank:
        if what == "in_axes":
            raise ValueError(
                f"{where}: in_axes {a} is out of range for an argument of rank {rank - 1}; "
                f"choose an axis in [-{rank}, {rank})"
            )
        raise ValueError(f"{where}: out_axes {a} is out of range for an output of rank {rank - 1}")
    a = int(a) % rank
    shape = tuple(spec.shape[:a]) + (size,) + tuple(spec.shape[a:])
    if arguments.key_dtype(spec) is not None:
        return jax.ShapeDtypeStruct(shape, spec.dtype)
    return ShapeDtype(shape, spec.dtype)


def stage_signature(kind: str, signature, where: str, **options):
    """The signature of the stage transform `kind` of a program of `signature`, from the
    specs alone (symbolic ones included): the one the function `stage_function` gives would
    trace to, known before any shape is (the module of each shape then has it). A name as
    vmap's `axis_size` is a new symbol. Raises what the transform raises for a program of
    these specs."""
    in_specs, out_specs = signature.in_specs, signature.out_specs
    if kind == "vmap" and isinstance(options["axis_size"], str):
        options = {**options, "axis_size": _new_symbol(where, signature, options["axis_size"])}
        args, kwargs = in_specs
        args, kwargs = batched_specs(where, args, kwargs, options["in_axes"], options["axis_size"])
        new = options["axis_size"]
        if not any(d is new for s in tree_util.tree_leaves((args, kwargs)) for d in s.shape):
            raise ValueError(
                f"{where}: axis_size={str(new)!r} is a symbol, but in_axes maps no "
                "argument, so no call could give its size; map an argument, or give an int"
            )
    else:
        _, args, kwargs = stage_function(kind, None, in_specs, out_specs, where, **options)
    primals = tuple(in_specs[0])
    if kind in ("grad", "value_and_grad"):
        argnums, has_aux = options["argnums"], options["has_aux"]
        nums = _argnums(where, argnums, len(primals))
        for a in nums:
            for leaf in tree_util.tree_leaves(primals[a]):
                _check_differentiable(where, primals[a], a, leaf.dtype)
        first = signature.flat_out_specs[0] if signature.flat_out_specs else None
        _value_trees(where, signature.out_tree, first, has_aux)
        grads = tuple(primals[a] for a in nums)
        grads = grads if isinstance(argnums, tuple | list) else grads[0]
        if kind == "value_and_grad":
            out = ((out_specs[0], out_specs[1]) if has_aux else out_specs, grads)
        else:
            out = (grads, out_specs[1]) if has_aux else grads
    elif kind == "vjp":
        out = (out_specs, _none_at_int(primals))
    elif kind == "jvp":
        out = (out_specs, _none_at_int(out_specs))
    elif kind == "vmap":
        out = _batched_out_specs(where, out_specs, signature.out_tree, options)
    else:
        raise AssertionError(kind)
    flat_in, in_tree = tree_util.tree_flatten((tuple(args), kwargs))
    flat_out, out_tree = tree_util.tree_flatten(out)
    return signature.replace(
        name=f"{signature.name}_{kind}",
        in_tree=in_tree,
        out_tree=out_tree,
        flat_in_specs=tuple(flat_in),
        flat_out_specs=tuple(flat_out),
        donated=(),
        in_keys=(),
        out_keys=(),
        arg_names=(),
    )


def _new_symbol(where: str, signature, name: str):
    """The dimension `name` (`vmap(axis_size="n")`) among the program's symbols."""
    if not name.isidentifier():
        raise ValueError(
            f"{where}: axis_size={name!r} is neither an int nor a symbol's name; give a size, "
            "or a name such as 'n' for a symbolic one"
        )
    specs = signature.flat_in_specs + signature.flat_out_specs
    return (algebra.scope_of(specs) or algebra.DEFAULT_SCOPE).symbol(name)


def _batched_out_specs(where: str, out_specs, out_tree, options):
    """The output specs of `vmap` with `options`: each output with the new axis at its
    `out_axes` (an output given None stays as it is: the transform refuses it where it
    depends on the mapped arguments)."""
    size = options["axis_size"]
    size = size if isinstance(size, algebra.Dim) else int(size)
    out_struct = tree_util.tree_unflatten(out_tree, [0] * out_tree.num_leaves)
    o_axes = _axes_for(where, "out_axes", options["out_axes"], out_struct)
    leaves = []
    for spec, a in zip(tree_util.tree_leaves(out_specs), o_axes, strict=True):
        if a is None:
            leaves.append(spec)
            continue
        leaves.append(_with_new_axis(where, "out_axes", spec, a, size))
    return tree_util.tree_unflatten(out_tree, leaves)
