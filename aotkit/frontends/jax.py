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
import threading
from collections.abc import Callable

import jax
import jax.extend.core
import jax.interpreters.mlir
import jax.numpy
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
    if not sharded and _has_marks(jax_traced.jaxpr.jaxpr):
        marked = _MarkedModule(jax_traced.jaxpr, keep_unused, n_main, pruned or (), name, where, lc)
    return adopted.replace(signature=signature, pruned=pruned or (), marked_module=marked)


# --- stop_gradient and custom rules, kept for the transforms ------------------------------------
# JAX lowers `jax.lax.stop_gradient` to nothing, and a `jax.custom_jvp` or `jax.custom_vjp`
# function to its primal computation: its module differentiates through them. For the
# transforms, a function that uses them is lowered again from its jaxpr
# (`Program.marked_module`):
# - each stop_gradient its own code calls (or a library's other than JAX) bound as `_STOP`
#   instead, which lowers to a barrier marked `modules.STOP_GRADIENT` (the value unchanged,
#   the derivative zero in aotkit's rules). JAX's own functions stop gradients where a
#   custom rule, which JAX's module does not carry, gives the derivative (jnp.linalg.solve's
#   LU factors, inside a custom_linear_solve) or where the derivative does not depend on it
#   (logsumexp's shift by the maximum): aotkit differentiates through those, as the rules'
#   primal computes;
# - each custom_jvp call (jax.nn.relu, jax.scipy.special.log_ndtr, the user's own) bound as
#   `_CUSTOM_JVP`, which lowers to its rule between the barriers of `modules.CUSTOM_JVP`:
#   the transforms take the rule's tangents as the derivative, as JAX does. Differentiating
#   the primal instead gives other values where the rule chooses one (relu's derivative at
#   0) or where the primal's own derivative is not finite (log_ndtr's far tail, i0e at 0).
#   Calls with a result that is not floating point (whose tangent JAX types float0) or that
#   close over traced values keep their primal;
# - each custom_vjp call bound as `_CUSTOM_VJP`, which lowers to its forward function and
#   then its backward function (on zero cotangents) between the barriers of
#   `modules.CUSTOM_VJP`: reverse mode evaluates the backward function on the outputs'
#   cotangents, as JAX calls it (a gradient clipped or reversed there was not before).
#   Calls with an argument or result that is not floating point keep their primal.

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

# `_CUSTOM_JVP.bind(*primals, rule=..., out_avals=...)`: the primal outputs of a custom_jvp
# function whose rule is `rule(*primals, *tangents) -> [*outputs, *output tangents]`.
_CUSTOM_JVP = jax.extend.core.Primitive("aotkit_custom_jvp")
_CUSTOM_JVP.multiple_results = True
_CUSTOM_JVP.def_abstract_eval(lambda *avals, rule, out_avals: list(out_avals))
# `_CUSTOM_VJP.bind(*primals, fwd=..., bwd=..., out_avals=...)`: the primal outputs of a
# custom_vjp function (`_compat.custom_vjp_rule` says what fwd and bwd are).
_CUSTOM_VJP = jax.extend.core.Primitive("aotkit_custom_vjp")
_CUSTOM_VJP.multiple_results = True
_CUSTOM_VJP.def_abstract_eval(lambda *avals, fwd, bwd, out_avals: list(out_avals))
# The barriers around a rule: `_RULE_MARK.bind(*values, mark=modules.CUSTOM_JVP or
# modules.CUSTOM_VJP, kind="begin ..." | "end ...")`.
_RULE_MARK = jax.extend.core.Primitive("aotkit_rule_mark")
_RULE_MARK.multiple_results = True
_RULE_MARK.def_abstract_eval(lambda *avals, mark, kind: list(avals))


def _lower_rule_mark(ctx, *values, mark, kind):
    op = stablehlo.OptimizationBarrierOp(list(values))
    op.attributes[mark] = ir.StringAttr.get(kind)
    return list(op.results)


def _custom_jvp_as_rule(*primals, rule, out_avals):
    n = len(primals)
    zeros = [jax.numpy.zeros_like(p) for p in primals]
    entered = _RULE_MARK.bind(*primals, *zeros, mark=modules.CUSTOM_JVP, kind="begin")
    left = _RULE_MARK.bind(*primals, *rule(*entered), mark=modules.CUSTOM_JVP, kind=f"end {n}")
    return left[n : n + len(out_avals)]


def _custom_vjp_as_rule(*primals, fwd, bwd, out_avals):
    n, m = len(primals), len(out_avals)
    outs, res = fwd(*primals)
    zeros = [jax.numpy.zeros_like(o) for o in outs]
    entered = _RULE_MARK.bind(
        *primals, *outs, *res, *zeros, mark=modules.CUSTOM_VJP, kind=f"begin {n} {m}"
    )
    outs, res, zeros = entered[n : n + m], entered[n + m : -m], entered[-m:]
    cts = [
        jax.numpy.zeros_like(p) if g is None else g.astype(p.dtype)
        for g, p in zip(bwd(res, zeros), primals, strict=True)
    ]
    left = _RULE_MARK.bind(*primals, *outs, *cts, mark=modules.CUSTOM_VJP, kind=f"end {n} {m}")
    return left[n : n + m]


jax.interpreters.mlir.register_lowering(_RULE_MARK, _lower_rule_mark)
jax.interpreters.mlir.register_lowering(
    _CUSTOM_JVP, jax.interpreters.mlir.lower_fun(_custom_jvp_as_rule, multiple_results=True)
)
jax.interpreters.mlir.register_lowering(
    _CUSTOM_VJP, jax.interpreters.mlir.lower_fun(_custom_vjp_as_rule, multiple_results=True)
)


class _MarkedModule:
    """`Program.marked_module` of a JAX program: made on first use (lowering the marked
    jaxpr costs about as much again as the program's own lowering, which a program no
    transform asks for never needs), under the JAX settings the program was lowered with
    (x64 mode, the default matmul precision); None when nothing in it is kept after all
    (every stop_gradient JAX's own)."""

    def __init__(self, closed, keep_unused, n_main, pruned, name, where, lc):
        self._args = (closed, keep_unused, n_main, pruned, name, where, lc)
        self._x64 = bool(jax.config.jax_enable_x64)
        self._precision = jax.config.jax_default_matmul_precision
        self._lock = threading.Lock()
        self._done = False
        self._module = None

    def __call__(self):
        with self._lock:
            if not self._done:
                closed, keep_unused, n_main, pruned, name, where, lc = self._args
                with jax.enable_x64(self._x64), jax.default_matmul_precision(self._precision):
                    marked = _marked_for_transforms(closed)
                    if marked is not None:
                        self._module = _marked_module(
                            marked, keep_unused, n_main, pruned, name, where, lc
                        )
                self._done = True
                self._args = None
            return self._module


_KEPT = ("stop_gradient", "custom_jvp_call", "custom_vjp_call")


def _has_marks(jaxpr) -> bool:
    """Whether `jaxpr`, or a jaxpr inside it, binds what `_marked_for_transforms` may keep."""
    core = jax.extend.core
    for eqn in jaxpr.eqns:
        name = eqn.primitive.name
        if name in _KEPT or name in _PRIMITIVE_RULES:
            return True
        if name.startswith("custom_"):
            continue
        for v in eqn.params.values():
            inner = v if isinstance(v, tuple) else (v,)
            for j in inner:
                if isinstance(j, core.ClosedJaxpr):
                    j = j.jaxpr
                if isinstance(j, core.Jaxpr) and _has_marks(j):
                    return True
    return False


def _marked_for_transforms(closed):
    """`closed` (a ClosedJaxpr) with every `stop_gradient` the user's code (or a library's
    other than JAX) binds in it, or in a jaxpr inside it (a nested jit, a loop body, a
    branch), bound as `_STOP`, and every custom_jvp or custom_vjp call it can keep
    (`_custom_jvp_marked`, `_custom_vjp_marked`, and the primitives of `_PRIMITIVE_RULES`)
    bound as `_CUSTOM_JVP` or `_CUSTOM_VJP`; None if there is none. JAX's own
    stop_gradients (`_written_outside_jax`), and any inside a custom rule's primal
    (`custom_linear_solve`, a custom call kept as it is), are left as they are: the rule,
    which the module does not carry, is what gives the derivative there, and aotkit
    differentiates the primal as if they were not there."""
    jaxpr = _marked_jaxpr(closed.jaxpr)
    return None if jaxpr is closed.jaxpr else closed.replace(jaxpr=jaxpr)


# How deep rules are kept inside rules: a rule that calls its own function (`ans = f(x)`
# is the usual way to write one) holds another call with a rule, and so on. The second
# derivative differentiates the rule, whose calls then take their rules too, as in JAX.
_RULE_DEPTH = 2


def _custom_jvp_marked(eqn, depth: int):
    """The `custom_jvp_call` equation `eqn` bound as `_CUSTOM_JVP`, or None where it keeps
    its primal: a result not floating point, values it closes over, or a rule this jax does
    not give. The calls inside its rule are kept down to `_RULE_DEPTH` rules deep (`depth`:
    how deep `eqn` is)."""
    if eqn.params.get("num_consts", 0) or not all(_inexact(v) for v in eqn.outvars):
        return None
    # An integer argument's tangent is a symbolic zero (JAX's float0): the rule takes none.
    differentiable = [_inexact(v) for v in eqn.invars]
    found = _compat.custom_jvp_rule(eqn, [not d for d in differentiable])
    if found is None:
        return None
    jaxpr, consts, out_zeros = found
    if any(isinstance(c, jax.core.Tracer) for c in consts):
        return None
    if depth + 1 < _RULE_DEPTH:
        jaxpr = _marked_jaxpr(jaxpr, depth + 1)
    body = jax.extend.core.jaxpr_as_fun(jax.extend.core.ClosedJaxpr(jaxpr, consts))
    out_avals = tuple(v.aval for v in eqn.outvars)
    n = len(differentiable)

    def rule(*primals_and_tangents):
        primals, tangents = primals_and_tangents[:n], primals_and_tangents[n:]
        given = [t for t, d in zip(tangents, differentiable, strict=True) if d]
        outs = iter(body(*primals, *given))
        primal_outs = [next(outs) for _ in out_avals]
        out_tangents = [
            jax.numpy.zeros(a.shape, a.dtype) if zero else next(outs)
            for a, zero in zip(out_avals, out_zeros, strict=True)
        ]
        return [*primal_outs, *out_tangents]

    return eqn.replace(primitive=_CUSTOM_JVP, params={"rule": rule, "out_avals": out_avals})


def _custom_vjp_marked(eqn):
    """The `custom_vjp_call` equation `eqn` bound as `_CUSTOM_VJP`, or None where it keeps
    its primal: an argument or result not floating point, values it closes over, or
    functions this jax does not give."""
    if eqn.params.get("num_consts", 0) or not all(_inexact(v) for v in (*eqn.invars, *eqn.outvars)):
        return None
    found = _compat.custom_vjp_rule(eqn)
    if found is None:
        return None
    fwd, bwd = found
    out_avals = tuple(v.aval for v in eqn.outvars)
    return eqn.replace(
        primitive=_CUSTOM_VJP, params={"fwd": fwd, "bwd": bwd, "out_avals": out_avals}
    )


# JAX primitives whose lowering is a computation that aotkit cannot differentiate as JAX
# does (a polynomial whose derivative is NaN where JAX's rule is finite, a `chlo` op with no
# rule, a series summed in a while loop), given a rule as a custom_jvp function is: the
# tangent of the primitive's result `y` at arguments `xs` for tangents `ts`. The formulas
# are the functions' derivatives (what JAX's own rules compute).


def _i0e_tangent(y, x, t):
    lax = jax.lax
    return t * (lax.bessel_i1e(x) - lax.sign(x) * y)


def _i1e_tangent(y, x, t):
    # d/dx i1e(x) = i0e(x) - i1e(x) (sign(x) + 1/x), whose limit at 0 is 1/2.
    lax = jax.lax
    tiny = lax.abs(x) <= jax.numpy.finfo(x.dtype).eps
    safe = jax.numpy.where(tiny, jax.numpy.ones_like(x), x)
    slope = lax.bessel_i0e(safe) - y * (lax.sign(safe) + 1 / safe)
    return t * jax.numpy.where(tiny, 0.5, slope)


def _igamma_tangent(y, a, x, ta, tx):
    # P(a, x): d/dx = x^(a-1) e^-x / Gamma(a); d/da by JAX's own series (igamma_grad_a).
    lax = jax.lax
    dx = lax.exp(-x + (a - 1) * lax.log(x) - lax.lgamma(a))
    return ta * lax.igamma_grad_a(a, x) + tx * dx


def _igammac_tangent(y, a, x, ta, tx):
    return -_igamma_tangent(y, a, x, ta, tx)  # Q = 1 - P


def _erf_inv_tangent(y, x, t):
    # d/dx erfinv(x) = sqrt(pi)/2 exp(erfinv(x)^2). (From jax 0.12.1 JAX lowers erf_inv to a
    # polynomial whose edge cases at |x| = 1 multiply by inf in a branch a select drops: in
    # reverse mode, 0 x inf made the gradient NaN everywhere.)
    return t * (np.sqrt(np.pi) / 2) * jax.lax.exp(y * y)


_PRIMITIVE_RULES = {
    "erf_inv": _erf_inv_tangent,
    "bessel_i0e": _i0e_tangent,
    "bessel_i1e": _i1e_tangent,
    "igamma": _igamma_tangent,
    "igammac": _igammac_tangent,
}


def _inexact(var) -> bool:
    return dtypes.is_inexact(np.dtype(var.aval.dtype))


def _primitive_marked(eqn, tangent):
    """`eqn`, of a primitive in `_PRIMITIVE_RULES` (one result), bound as `_CUSTOM_JVP` with
    the rule `tangent`; None where an argument is not floating point."""
    if not all(_inexact(v) for v in (*eqn.invars, *eqn.outvars)):
        return None
    primitive, params = eqn.primitive, eqn.params

    def rule(*primals_and_tangents):
        n = len(primals_and_tangents) // 2
        primals = primals_and_tangents[:n]
        y = primitive.bind(*primals, **params)
        return [y, tangent(y, *primals_and_tangents)]

    out_avals = (eqn.outvars[0].aval,)
    return eqn.replace(primitive=_CUSTOM_JVP, params={"rule": rule, "out_avals": out_avals})


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


def _marked_jaxpr(jaxpr, depth: int = 0):
    eqns, changed = [], False
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "stop_gradient":
            if _written_outside_jax(eqn):
                eqn = eqn.replace(primitive=_STOP, params={})
                changed = True
        elif eqn.primitive.name == "custom_vjp_call":
            marked = _custom_vjp_marked(eqn)
            if marked is not None:
                eqn, changed = marked, True
        elif eqn.primitive.name == "custom_jvp_call" or eqn.primitive.name in _PRIMITIVE_RULES:
            tangent = _PRIMITIVE_RULES.get(eqn.primitive.name)
            marked = (
                _custom_jvp_marked(eqn, depth)
                if tangent is None
                else _primitive_marked(eqn, tangent)
            )
            if marked is not None:
                eqn, changed = marked, True
        elif not eqn.primitive.name.startswith("custom_"):
            params = {k: _marked_param(v, depth) for k, v in eqn.params.items()}
            if any(params[k] is not v for k, v in eqn.params.items()):
                eqn = eqn.replace(params=params)
                changed = True
        eqns.append(eqn)
    return jaxpr.replace(eqns=eqns) if changed else jaxpr


def _marked_param(value, depth: int):
    core = jax.extend.core
    if isinstance(value, core.ClosedJaxpr):
        jaxpr = _marked_jaxpr(value.jaxpr, depth)
        return value if jaxpr is value.jaxpr else value.replace(jaxpr=jaxpr)
    if isinstance(value, core.Jaxpr):
        return _marked_jaxpr(value, depth)
    if isinstance(value, tuple) and any(
        isinstance(v, core.ClosedJaxpr | core.Jaxpr) for v in value
    ):
        marked = tuple(_marked_param(v, depth) for v in value)
        return value if all(a is b for a, b in zip(marked, value, strict=True)) else marked
    return value


def _marked_module(closed, keep_unused, n_main, pruned, name, where, lc) -> ir.Module:
    """The module of the marked jaxpr `closed`, adopted as the program's own (in `lc`) and
    taking the same arguments (under the JAX settings `_MarkedModule` restores)."""
    specs = [jax.ShapeDtypeStruct(a.shape, a.dtype, weak_type=a.weak_type) for a in closed.in_avals]
    fn = jax.extend.core.jaxpr_as_fun(closed)
    lowered = jax.jit(fn, keep_unused=keep_unused).lower(*specs)
    module, _ = _import_module(lowered.compiler_ir("stablehlo"), where, lc)
    again = ()
    if _main_arity(module) != n_main:
        again = _restore_pruned(module, lowered) or ()
    if _main_arity(module) != n_main or again != pruned:
        raise ValueError(
            f"{where}: JAX's module with stop_gradient and custom rules kept for the "
            "transforms takes other arguments than the program: please report this"
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
