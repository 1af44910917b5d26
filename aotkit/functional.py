"""Function transforms with JAX's names and semantics: `grad`, `value_and_grad`, `vjp`, `jvp`,
`vmap`, `jacfwd`, `jacrev`, `hessian`.

Each is aotkit's own: the function is traced to StableHLO by aotkit's tracer, or, written
with JAX, lowered by JAX (`frontend=`, chosen as `jit`'s `frontend="auto"` chooses, or
given), and the StableHLO is rewritten by aotkit's rules (`aotkit.transforms`); JAX's own
transforms are only the oracle of the tests. Inside a function aotkit is tracing, a
transformed function is emitted into the program being traced, like any op; called on
concrete arrays, it compiles itself with `aotkit.jit` (once per argument signature) and
runs. They compose with each other
(`vmap(grad(f))`, `grad(grad(f))`, `jvp(grad(f), ...)`) and with `jit`, `lower`,
`compile`, `save`/`load` and sharding.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np
from jax import dtypes as jax_dtypes
from jax import tree_util

from aotkit import api, arguments, autograph, dtypes, frontends
from aotkit.arguments import function_name
from aotkit.tracing import core, keys
from aotkit.transforms import _hlo as H
from aotkit.transforms import functions as F
from aotkit.transforms.core import check_policy

__all__ = [
    "checkpoint",
    "grad",
    "hessian",
    "jacfwd",
    "jacrev",
    "jvp",
    "value_and_grad",
    "vjp",
    "vmap",
]


def _check_callable(where: str, fun) -> None:
    if not callable(fun):
        raise TypeError(f"{where}: expected a function, got {type(fun).__name__}")


class _Transformed:
    """A transformed function: traced inline inside a trace, jitted outside one.

    `run(fun, args, kwargs)` emits the transform inside a trace, `fun` being the user's
    function as `F.by_frontend` makes it for `frontend` (resolved at the first call, as
    `jit` resolves its own). `restore(result, args)` puts back the float0 zeros (gradients
    of integer arguments) a compiled program cannot return: the jitted program returns
    None in their place."""

    def __init__(
        self,
        fun: Callable,
        where: str,
        run: Callable,
        restore: Callable | None = None,
        frontend: str = "auto",
    ):
        frontends.check_frontend(where, frontend)
        self.fun = fun
        self.frontend = frontend
        self._where = where
        self._run = run
        self._restore = restore
        self._jitted = None
        self._traced_fun = None
        functools.update_wrapper(self, fun, updated=())
        self.__name__ = where

    def with_frontend(self, frontend: str) -> _Transformed:
        """The same transform with `frontend` lowering its function (what
        `jit(transform, frontend=...)` traces)."""
        return _Transformed(self.fun, self._where, self._run, self._restore, frontend)

    def _fun(self) -> Callable:
        fun = self._traced_fun
        if fun is None:
            fun = self._traced_fun = F.by_frontend(self.fun, self.frontend, self._where)
        return fun

    def __call__(self, *args, **kwargs):
        if core.is_tracing():
            return self._run(self._fun(), args, kwargs)
        if self._jitted is None:
            self._jitted = api.jit(_named(self._compiled_body, self.fun), frontend="aotkit")
        result = self._jitted(*args, **kwargs)
        return self._restore(result, args) if self._restore is not None else result

    def _compiled_body(self, *args, **kwargs):
        result = self._run(self._fun(), args, kwargs)
        return F.drop_float0(result) if self._restore is not None else result

    def __repr__(self) -> str:
        return f"<aotkit.{self._where}>"


def _named(body: Callable, fun: Callable) -> Callable:
    """`body` under the name of the user's function `fun` (the name its jit, module and
    errors carry)."""

    def run(*args, **kwargs):
        return body(*args, **kwargs)

    run.__name__ = run.__qualname__ = function_name(fun)
    return run


def value_and_grad(
    fun: Callable,
    argnums=0,
    has_aux: bool = False,
    holomorphic: bool = False,
    allow_int: bool = False,
    *,
    checkpoint_loops=None,
    max_trip_count: int | None = None,
    frontend: str = "auto",
) -> Callable:
    """`fun`'s value and its gradient with respect to the arguments `argnums` (an int or a
    tuple of ints), as `jax.value_and_grad`: `fun` must return a float scalar (or
    `(scalar, aux)` with `has_aux=True`); the gradient has the structure of those
    arguments. `checkpoint_loops`, `max_trip_count` and `frontend` are `grad`'s."""
    where = f"value_and_grad({function_name(fun)})"
    _check_callable(where, fun)
    _no_holomorphic(where, holomorphic)
    loops = _loop_options(where, checkpoint_loops, max_trip_count)

    def run(fun, args, kwargs):
        return F.value_and_grad(
            fun,
            args,
            kwargs,
            argnums=argnums,
            has_aux=has_aux,
            allow_int=allow_int,
            where=where,
            **loops,
        )

    def restore(result, args):
        return result[0], _float0_grads(result[1], args, argnums)

    return _Transformed(fun, where, run, restore if allow_int else None, frontend)


def _float0_grads(grads, args: tuple, argnums):
    """Gradients a compiled program returned with None for integer arguments, completed with
    their float0 zeros (as JAX gives)."""

    def complete(arg, found):
        return tree_util.tree_map(
            lambda x, g: F.float0_zeros(np.shape(x)) if g is None else g, arg, found
        )

    if isinstance(argnums, tuple | list):
        return tuple(complete(args[a], g) for a, g in zip(argnums, grads, strict=True))
    return complete(args[argnums], grads)


def grad(
    fun: Callable,
    argnums=0,
    has_aux: bool = False,
    holomorphic: bool = False,
    allow_int: bool = False,
    *,
    checkpoint_loops=None,
    max_trip_count: int | None = None,
    frontend: str = "auto",
) -> Callable:
    """The gradient of `fun` with respect to the arguments `argnums`, as `jax.grad`.
    Integer arguments among them are a TypeError (with `allow_int=True`, their gradient
    is a float0 zero array, as JAX gives).

    Reverse mode keeps the carry of every iteration of a loop; `checkpoint_loops="sqrt"`
    keeps about sqrt(n) of them and recomputes the rest in the backward pass (an int k
    keeps every k-th). A loop whose trip count depends on the data needs
    `max_trip_count=N` (its gradient is NaN if it runs longer).

    `frontend` says who lowers `fun`, as `jit`'s does: "auto" (JAX when `fun` uses JAX and
    not aotkit), "aotkit" or "jax"; a function JAX lowers is differentiated by aotkit's
    rules on the module JAX wrote (the same holds for every transform here)."""
    where = f"grad({function_name(fun)})"
    _check_callable(where, fun)
    _no_holomorphic(where, holomorphic)
    loops = _loop_options(where, checkpoint_loops, max_trip_count)

    def run(fun, args, kwargs):
        out = F.value_and_grad(
            fun,
            args,
            kwargs,
            argnums=argnums,
            has_aux=has_aux,
            allow_int=allow_int,
            where=where,
            **loops,
        )
        (value_aux, grads) = out
        return (grads, value_aux[1]) if has_aux else grads

    def restore(result, args):
        if has_aux:
            return _float0_grads(result[0], args, argnums), result[1]
        return _float0_grads(result, args, argnums)

    return _Transformed(fun, where, run, restore if allow_int else None, frontend)


def _loop_options(where: str, checkpoint_loops, max_trip_count) -> dict:
    check_policy(where, checkpoint_loops, max_trip_count)  # errors at the call, not the trace
    return {"checkpoint_loops": checkpoint_loops, "max_trip_count": max_trip_count}


def _no_holomorphic(where: str, holomorphic: bool) -> None:
    if holomorphic:
        raise NotImplementedError(
            f"{where}: holomorphic=True is not supported; differentiate the real and "
            "imaginary parts separately, or use aotkit.vjp"
        )


def jvp(fun: Callable, primals, tangents, has_aux: bool = False, *, frontend: str = "auto"):
    """`(fun(*primals), the directional derivative along tangents)`, as `jax.jvp`:
    `primals` and `tangents` are tuples with one entry per positional argument; `frontend`
    is `grad`'s."""
    where = f"jvp({function_name(fun)})"
    _check_callable(where, fun)
    fun = F.by_frontend(fun, frontend, where)
    if core.is_tracing():
        return F.jvp(fun, primals, tangents, has_aux=has_aux, where=where)
    F.check_jvp_arguments(where, primals, tangents)
    run = _eager(
        fun, where, lambda p, t: F.drop_float0(F.jvp(fun, p, t, has_aux=has_aux, where=where))
    )
    result = run(tuple(primals), _no_float0(tuple(tangents)))
    # The tangents of integer outputs are float0 zeros, which the program cannot return.
    out, tout = result[0], result[1]
    tout = tree_util.tree_map(
        lambda o, t: F.float0_zeros(np.shape(o)) if t is None else t, out, tout
    )
    return (out, tout, result[2]) if has_aux else (out, tout)


def vjp(
    fun: Callable,
    *primals,
    has_aux: bool = False,
    checkpoint_loops=None,
    max_trip_count: int | None = None,
    frontend: str = "auto",
):
    """`(fun(*primals), vjp_fn)` (and `aux` with `has_aux=True`), as `jax.vjp`:
    `vjp_fn(cotangent)` gives one cotangent per primal. Inside a trace the backward
    program is emitted where `vjp_fn` is called; on concrete arrays `vjp_fn` is a
    compiled program of its own (it recomputes the forward pass). `checkpoint_loops`,
    `max_trip_count` and `frontend` are `grad`'s."""
    where = f"vjp({function_name(fun)})"
    _check_callable(where, fun)
    loops = _loop_options(where, checkpoint_loops, max_trip_count)
    fun = F.by_frontend(fun, frontend, where)
    if core.is_tracing():
        return F.vjp(fun, primals, has_aux=has_aux, where=where, **loops)
    forward = _eager(fun, where, lambda p: _forward_only(fun, p, has_aux, where))
    result = forward(tuple(primals))
    # (a typed key's cotangent is float0 too)
    float0 = [
        arguments.key_dtype(x) is not None or not dtypes.is_inexact(np.result_type(x))
        for x in tree_util.tree_leaves(primals)
    ]

    def cotangents(p, ct):
        # Only the float cotangents leave the compiled program (it cannot return float0).
        found = tree_util.tree_leaves(F.vjp(fun, p, has_aux=has_aux, where=where, **loops)[1](ct))
        return [c for c, f in zip(found, float0, strict=True) if not f]

    backward = _eager(fun, where, cotangents)

    def vjp_fn(ct):
        return _restore_float0(backward(tuple(primals), _no_float0(ct)), primals, float0)

    if has_aux:
        out, aux = result
        return out, vjp_fn, aux
    return result, vjp_fn


def _forward_only(fun, primals, has_aux, where):
    out = F.vjp(fun, primals, has_aux=has_aux, where=where)
    return (out[0], out[2]) if has_aux else out[0]


def _eager(fun, where: str, body: Callable) -> Callable:
    """`body` compiled with aotkit.jit (outside a trace), named after `fun`."""

    def run(*args):
        return body(*args)

    run.__name__ = run.__qualname__ = function_name(fun)
    return api.jit(run, frontend="aotkit")


def _no_float0(tree):
    """Tangents with float0 leaves (of integer primals) as zeros jit can take."""
    return tree_util.tree_map(
        lambda x: (
            np.zeros(np.shape(x), np.bool_) if getattr(x, "dtype", None) == jax_dtypes.float0 else x
        ),
        tree,
    )


def _restore_float0(float_cts: list, primals, float0) -> tuple:
    """One cotangent per primal (a tuple of trees): the float ones a compiled backward pass
    returned, and float0 zeros for the integer primals, as JAX gives."""

    found = iter(float_cts)
    flags = iter(float0)
    out = []
    for p in primals:
        leaves, tree = tree_util.tree_flatten(p)
        rebuilt = [
            np.zeros(np.shape(x), jax_dtypes.float0) if next(flags) else next(found) for x in leaves
        ]
        out.append(tree_util.tree_unflatten(tree, rebuilt))
    return tuple(out)


def checkpoint(fun: Callable, *, frontend: str = "auto") -> Callable:
    """`fun`, whose intermediates reverse mode recomputes in the backward pass instead of
    storing them from the forward pass, as `jax.checkpoint` (remat): less memory for one
    more evaluation of `fun`. Usable as a decorator; outside reverse mode it is `fun`.
    `frontend` is `grad`'s."""
    where = f"checkpoint({function_name(fun)})"
    _check_callable(where, fun)

    def run(fun, args, kwargs):
        return F.checkpoint(fun, args, kwargs, where)

    return _Transformed(fun, where, run, frontend=frontend)


def vmap(
    fun: Callable,
    in_axes=0,
    out_axes=0,
    axis_size: int | None = None,
    *,
    frontend: str = "auto",
) -> Callable:
    """`fun` mapped over an axis of its arguments, as `jax.vmap`: `in_axes` is an int, None
    or a tuple with one entry (a pytree prefix) per positional argument (keyword
    arguments are mapped over axis 0); `out_axes` the same for the outputs; `axis_size`
    is needed when no argument is mapped. `frontend` is `grad`'s."""
    where = f"vmap({function_name(fun)})"
    _check_callable(where, fun)

    def run(fun, args, kwargs):
        return F.vmap(
            fun,
            args,
            kwargs,
            in_axes=in_axes,
            out_axes=out_axes,
            axis_size=axis_size,
            where=where,
        )

    return _Transformed(fun, where, run, frontend=frontend)


# --- Jacobians --------------------------------------------------------------------------------


def _std_basis(leaves):
    """The standard basis of the flattened leaves: one array per leaf, shaped
    (n, *leaf.shape) where n is the total size."""
    sizes = [int(np.prod(x.shape)) for x in leaves]
    n = sum(sizes)
    dtype = dtypes.result_type(*[x.dtype for x in leaves]) if leaves else np.float32
    eye = H.broadcast_in_dim(
        H.convert(H.compare(H.iota((n, n), np.int32, 0), H.iota((n, n), np.int32, 1), "EQ"), dtype),
        (n, n),
        (0, 1),
    )
    out, start = [], 0
    for x, m in zip(leaves, sizes, strict=True):
        part = H.slice_(eye, (0, start), (n, start + m))
        out.append(H.convert(H.reshape(part, (n,) + tuple(x.shape)), x.dtype))
        start += m
    return out


def _not_float(tree) -> str | None:
    """The dtype's name of the first leaf of `tree` that is not a real float (a typed key
    named as such: `key<fry>`), or None."""
    for x in tree_util.tree_leaves(tree, is_leaf=keys.is_key):
        if keys.is_key(x):
            return x.dtype.name
        if not dtypes.is_float(x.dtype):
            return dtypes.short_name(x.dtype)
    return None


def _check_jacobian_inputs(where, dyn, holomorphic):
    _no_holomorphic(where, holomorphic)
    found = _not_float(dyn)
    if found is not None:
        raise TypeError(
            f"{where}: Jacobians need real float inputs, but an argument has dtype {found}; "
            "convert it to a float dtype, or leave it out of argnums"
        )


def jacfwd(
    fun: Callable,
    argnums=0,
    has_aux: bool = False,
    holomorphic: bool = False,
    *,
    frontend: str = "auto",
):
    """The Jacobian of `fun` with respect to `argnums` by forward mode (one JVP per input
    element, batched with vmap), as `jax.jacfwd`: for each output leaf of shape `o` and
    input leaf of shape `i`, an array of shape `o + i`. `frontend` is `grad`'s."""
    where = f"jacfwd({function_name(fun)})"
    _check_callable(where, fun)

    def run(fun, args, kwargs):
        dyn, partial = _jacobian_inputs(where, fun, args, kwargs, argnums, holomorphic)
        leaves, dyn_tree = tree_util.tree_flatten(tuple(dyn))

        def pushfwd(*basis_leaves):
            tangents = tree_util.tree_unflatten(dyn_tree, list(basis_leaves))
            out = F.jvp(partial, tuple(dyn), tangents, has_aux=has_aux, where=where)
            return (out[0], out[1], out[2]) if has_aux else (out[0], out[1])

        basis = _std_basis(leaves)
        out_axes = (None, -1, None) if has_aux else (None, -1)
        res = F.vmap(pushfwd, tuple(basis), {}, in_axes=0, out_axes=out_axes, where=where)
        y, jac = res[0], res[1]
        example = dyn[0] if isinstance(argnums, int) else tuple(dyn)
        jac_tree = tree_util.tree_map(lambda yl, jl: _jacfwd_unravel(example, yl, jl), y, jac)
        return (jac_tree, res[2]) if has_aux else jac_tree

    return _Transformed(fun, where, run, frontend=frontend)


def _jacobian_inputs(where: str, fun, args, kwargs, argnums, holomorphic: bool):
    """The arguments `argnums` of a Jacobian's call as traced arrays (checked as
    `_check_jacobian_inputs` says), and `fun` as a function of those alone, the other
    arguments fixed."""
    nums = F._argnums(where, argnums, len(args))
    dyn = [tree_util.tree_map(lambda x: F.as_tracer(where, x), args[a]) for a in nums]
    _check_jacobian_inputs(where, dyn, holomorphic)

    # The user's function converted as `grad` converts it (this wrapper has nothing to
    # convert): its Python `if`s and loops on traced values become control flow.
    call = autograph.convert(fun) if autograph.active() else fun

    def partial(*d):
        full = list(args)
        for a, v in zip(nums, d, strict=True):
            full[a] = v
        return call(*full, **kwargs)

    partial.__name__ = partial.__qualname__ = function_name(fun)  # what errors name
    return dyn, partial


def _jacfwd_unravel(example, y_leaf, jac_leaf):
    """A Jacobian block `y.shape + (n,)` split into one `y.shape + x.shape` per input leaf."""
    leaves, tree = tree_util.tree_flatten(example)
    out, start = [], 0
    for x in leaves:
        m = int(np.prod(np.shape(x)))
        lo = [0] * jac_leaf.ndim
        hi = list(jac_leaf.shape)
        lo[-1], hi[-1] = start, start + m
        part = H.slice_(jac_leaf, lo, hi)
        out.append(H.reshape(part, tuple(y_leaf.shape) + tuple(np.shape(x))))
        start += m
    return tree_util.tree_unflatten(tree, out)


def jacrev(
    fun: Callable,
    argnums=0,
    has_aux: bool = False,
    holomorphic: bool = False,
    allow_int=False,
    *,
    frontend: str = "auto",
):
    """The Jacobian of `fun` with respect to `argnums` by reverse mode (one VJP per output
    element, batched with vmap), as `jax.jacrev`: shapes as `jacfwd`'s. `frontend` is
    `grad`'s."""
    where = f"jacrev({function_name(fun)})"
    _check_callable(where, fun)

    def run(fun, args, kwargs):
        dyn, partial = _jacobian_inputs(where, fun, args, kwargs, argnums, holomorphic)
        res = F.vjp(partial, tuple(dyn), has_aux=has_aux, where=where)
        y, pullback = res[0], res[1]
        y_leaves, y_tree = tree_util.tree_flatten(y)
        found = _not_float(y)
        if found is not None:
            raise TypeError(
                f"{where}: Jacobians need real float outputs, but an output has dtype {found}"
            )
        basis = _std_basis(y_leaves)

        def pull(*basis_leaves):
            return pullback(tree_util.tree_unflatten(y_tree, list(basis_leaves)))

        jac = F.vmap(pull, tuple(basis), {}, in_axes=0, out_axes=0, where=where)
        # One cotangent tree per argument in argnums, each leaf (n_out, *x.shape): split
        # along the outputs, then regroup as an output tree of input trees.
        jac = jac[0] if isinstance(argnums, int) else jac
        x_leaves, x_tree = tree_util.tree_flatten(jac)
        split = [_jacrev_unravel(y_leaves, j) for j in x_leaves]
        blocks = [
            tree_util.tree_unflatten(x_tree, [per_x[k] for per_x in split])
            for k in range(len(y_leaves))
        ]
        jac_tree = tree_util.tree_unflatten(y_tree, blocks)
        return (jac_tree, res[2]) if has_aux else jac_tree

    return _Transformed(fun, where, run, frontend=frontend)


def _jacrev_unravel(y_leaves, jac_leaf):
    """A block `(n_out, *x.shape)` split into one `y.shape + x.shape` per output leaf."""
    out, start = [], 0
    x_shape = tuple(jac_leaf.shape[1:])
    for y in y_leaves:
        m = int(np.prod(y.shape))
        lo = [0] * jac_leaf.ndim
        hi = list(jac_leaf.shape)
        lo[0], hi[0] = start, start + m
        part = H.slice_(jac_leaf, lo, hi)
        out.append(H.reshape(part, tuple(y.shape) + x_shape))
        start += m
    return out


def hessian(
    fun: Callable,
    argnums=0,
    has_aux: bool = False,
    holomorphic: bool = False,
    *,
    frontend: str = "auto",
):
    """The Hessian of a scalar `fun`: `jacfwd(jacrev(fun))`, as `jax.hessian`; `frontend`
    is `grad`'s."""
    inner = jacrev(fun, argnums, has_aux, holomorphic, frontend=frontend)
    return jacfwd(inner, argnums, has_aux, holomorphic)
