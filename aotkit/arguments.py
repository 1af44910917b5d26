"""How a call's arguments become a program's signature, for every front end alike.

A call `f(*args, **kwargs)` is split into static arguments (Python values baked into the
program) and dynamic ones; the dynamic ones form the input pytree `((args...), {kwargs})`,
whose leaves (arrays, Python scalars or `ShapeDtype` specs) are the program's flat
arguments. Donated positional arguments mark their leaves.

A typed PRNG key array (`jax.random.key(0)`, dtype `key<fry>`) is one leaf to the user and
its uint32 key data to the module, as in JAX: a key leaf of shape S is the `@main` argument
or result `uint32[S + key shape]`. A signature keeps per leaf the user's view of it (`in_keys`,
`out_keys`: a `jax.ShapeDtypeStruct` of the key dtype, or None); `Compiled` unwraps key
arguments into their data and wraps key results back into keys of the same implementation.
"""

from __future__ import annotations

import array
import functools
import inspect
import sys
from collections.abc import Callable, Sequence

import jax
import numpy as np
from jax import tree_util

from aotkit.specs import ShapeDtype, spec, spec_of


def function_name(fn: Callable) -> str:
    name = getattr(fn, "__name__", None) or type(fn).__name__
    return "lambda" if name == "<lambda>" else name


def as_tuple(where: str, name: str, value, kind: type) -> tuple:
    """`value` (one `kind` or an iterable of them, None for none) as a tuple; else TypeError."""
    if value is None:
        return ()
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


def positions(
    where: str, name: str, nums: Sequence[int], n_args: int, lenient: bool = False
) -> set[int]:
    """`static_argnums`/`donate_argnums` resolved against a call with `n_args` positional
    arguments (negative numbers count from the end); ValueError for one out of range, unless
    `lenient` (numbers jax.jit inferred from static_argnames: the call may pass that argument
    by name, or not at all, as jax.jit allows), which drops it."""
    found = set()
    for i in nums:
        j = i + n_args if i < 0 else i
        if not 0 <= j < n_args:
            if lenient:
                continue
            raise ValueError(
                f"{where}: {name} has {i}, but the call passes {n_args} positional "
                f"argument(s); pass that argument positionally or fix {name}"
            )
        found.add(j)
    return found


def split_static(
    where: str,
    args: tuple,
    kwargs: dict,
    static_argnums: Sequence[int],
    static_argnames: Sequence[str],
    lenient: bool = False,
) -> tuple[tuple, dict, dict[int, object], dict[str, object]]:
    """Separates static arguments (by position or name) from the dynamic ones (`lenient`:
    see `positions`)."""
    nums = (
        positions(where, "static_argnums", static_argnums, len(args), lenient)
        if static_argnums
        else ()
    )
    static_pos = {i: args[i] for i in sorted(nums)}
    dyn_args = tuple(a for i, a in enumerate(args) if i not in nums)
    static_kw = {k: v for k, v in kwargs.items() if k in static_argnames}
    dyn_kwargs = {k: v for k, v in kwargs.items() if k not in static_argnames}
    return dyn_args, dyn_kwargs, static_pos, static_kw


_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


def parameter_names(fn: Callable, n_args: int, static_nums=()) -> tuple[str | None, ...]:
    """The name of each dynamic positional argument of a call of `fn` with `n_args`
    positional arguments (static positions `static_nums` left out): its parameter's name
    (`x`), or None past the named parameters (into `*args`) and for a function whose
    signature cannot be read. What stages and errors call the arguments, as the CLI and JAX
    do (`x: f32[3]`, not `args[0]: f32[3]`)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return ()
    named = [p.name for p in params if p.kind in _POSITIONAL]
    # A parameter called `args` would read as the fallback `args[i]` of another one.
    if "args" in named:
        return ()
    return tuple(
        named[i] if i < len(named) else None for i in range(n_args) if i not in static_nums
    )


def spec_strings(
    where: str,
    fn: Callable,
    args: tuple,
    kwargs: dict,
    static_argnums: Sequence[int],
    static_argnames: Sequence[str],
    lenient: bool = False,
) -> tuple[tuple, dict]:
    """`args`/`kwargs` of a `lower` or `trace` with every str leaf of a dynamic argument
    read as a spec (`"f32[4,3]"`, as `aotkit.spec` reads it); a static argument's str is
    the user's value and stays one. A str that is no spec is a TypeError naming the
    argument (`lenient`: see `positions`)."""
    leaves = flatten(where, (args, kwargs), lambda: parameter_names(fn, len(args)))[0]
    if not any(isinstance(leaf, str) for leaf in leaves):
        return args, kwargs
    dyn_args, dyn_kwargs, static_pos, static_kw = split_static(
        where, args, kwargs, static_argnums, static_argnames, lenient
    )
    tree_in = (dyn_args, dyn_kwargs)
    leaves, treedef = tree_util.tree_flatten(tree_in)
    out = list(leaves)
    for i, leaf in enumerate(leaves):
        if not isinstance(leaf, str):
            continue
        try:
            out[i] = spec(leaf)
        except ValueError as e:
            names = parameter_names(fn, len(args), static_pos)
            raise TypeError(
                f"{function_name(fn)}: argument {_named_leaf_path(tree_in, i, names)} is the "
                f"str {leaf!r}, "
                f"which is not a spec ({str(e).removeprefix('spec: ')}); pass a spec such as "
                "'f32[4,3]', an array, or mark it static with static_argnums/static_argnames"
            ) from None
    dyn_args, dyn_kwargs = tree_util.tree_unflatten(treedef, out)
    return merge_static(dyn_args, dyn_kwargs, static_pos, static_kw)


def merge_static(dyn_args: Sequence, dyn_kwargs: dict, static_pos: dict, static_kw: dict):
    args = list(dyn_args)
    for i, v in static_pos.items():
        args.insert(i, v)
    return tuple(args), {**dyn_kwargs, **static_kw}


def flatten(where: str, tree_in, names: Callable[[], Sequence] | None = None):
    """`tree_util.tree_flatten` of a call's `((args), {kwargs})`, with a dict whose keys do
    not sort (jax.tree_util sorts a dict's keys) a TypeError naming the argument (`names()`:
    see `parameter_names`) and the keys' types, where JAX says only that its comparator
    failed."""
    try:
        return tree_util.tree_flatten(tree_in)
    except (RecursionError, SystemError) as e:
        # (jax.tree_util's C++ flattening ran out of Python's recursion limit: a SystemError
        # "returned a result with an exception set" whose cause is a RecursionError)
        if isinstance(e, SystemError) and not isinstance(e.__cause__, RecursionError):
            raise
        raise ValueError(
            f"{where}: the arguments nest deeper than Python's recursion limit "
            f"({sys.getrecursionlimit()}) lets a pytree be flattened; pass flatter containers "
            "(a list of arrays, or one stacked array)"
        ) from None
    except ValueError:
        found = _unsortable_dict(tree_in)
        if found is None:
            raise
        path, keys = found
        names = names() if names is not None else None
        kinds = ", ".join(sorted({type(k).__name__ for k in keys}))
        raise TypeError(
            f"{where}: argument {_leaf_name(path, names)} is a dict whose keys do not sort "
            f"(keys of types {kinds}: {', '.join(map(repr, keys[:4]))}"
            f"{', ...' if len(keys) > 4 else ''}), and a pytree orders a dict's keys by "
            "sorting them; use keys of one type (such as all str)"
        ) from None


def _unsortable_dict(tree_in):
    """(path, keys) of the first dict in `tree_in` whose keys do not sort, or None."""

    def unsortable(node) -> bool:
        if type(node) is not dict:
            return False
        try:
            sorted(node)
        except TypeError:
            return True
        return False

    try:
        flat = tree_util.tree_flatten_with_path(tree_in, is_leaf=unsortable)[0]
    except ValueError:  # a dict type of another kind: leave JAX's message
        return None
    for path, leaf in flat:
        if unsortable(leaf):
            return path, list(leaf)
    return None


def flat_specs(fn_name: str, tree_in) -> tuple[tuple[ShapeDtype, ...], object]:
    """Flattens `((args), {kwargs})` and gives each leaf's spec; non-arrays are TypeErrors."""
    leaves, treedef = tree_util.tree_flatten(tree_in)
    return specs_of_leaves(fn_name, tree_in, leaves), treedef


def specs_of_leaves(
    fn_name: str, tree_in, leaves: list, names: Callable[[], Sequence] | None = None
) -> tuple[ShapeDtype, ...]:
    """The spec of each leaf of `tree_in` (`leaves`, flattened); non-arrays are TypeErrors
    naming the argument by its parameter's name (`names()`: see `parameter_names`, called
    only for an error)."""

    def path(i: int) -> str:
        return _named_leaf_path(tree_in, i, names() if names is not None else ())

    specs = []
    for i, leaf in enumerate(leaves):
        if type(leaf) is ShapeDtype:  # a spec is its own (and never a key's: np.dtype only)
            specs.append(leaf)
            continue
        if isinstance(leaf, _BUFFERS):
            raise TypeError(
                f"{fn_name}: argument {path(i)} is {_type_name(leaf)}, a buffer rather "
                "than an array, which aotkit (as JAX) does not take as an argument: a "
                "compiled function could not be called with it; pass a NumPy array "
                "(np.asarray(x), or np.frombuffer(x, dtype) for raw bytes)"
            )
        if key_dtype(leaf) is not None:  # a typed key: the module takes its data
            specs.append(key_data_spec(jax.ShapeDtypeStruct(tuple(leaf.shape), leaf.dtype)))
            continue
        try:
            specs.append(spec_of(leaf))
        except OverflowError as e:
            raise OverflowError(f"{fn_name}: argument {path(i)}: {e}") from None
        except (TypeError, ValueError) as e:
            raise TypeError(
                f"{fn_name}: argument {path(i)} of type {type(leaf).__name__} "
                f"is not an array ({e}); pass arrays, Python scalars or aotkit.ShapeDtype "
                "specs, or mark it static with static_argnums/static_argnames"
            ) from None
    return tuple(specs)


# Python buffers np.asarray reads as arrays, but a call never takes (nor does JAX).
_BUFFERS = (bytes, bytearray, memoryview, array.array)


def _type_name(x) -> str:
    """`a bytearray`, `an array.array`."""
    kind = type(x)
    name = kind.__name__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__name__}"
    return f"{'an' if name[0] in 'aeiou' else 'a'} {name}"


def _named_leaf_path(tree_in, index: int, names: Sequence) -> str:
    """The name of leaf `index` of `tree_in` (only an error needs it: paths cost more than
    the flattening itself): `x['w']` with parameter names, `args[0]['w']` without."""
    return _leaf_name(tree_util.tree_flatten_with_path(tree_in)[0][index][0], names)


def arg_path(path, names=()) -> str:
    """`x['w']` style path of a leaf in the `((args), {kwargs})` tree: a positional argument
    named by its parameter where `names` (`parameter_names`) has one, a keyword argument by
    its keyword, else `args[0]['w']` / `kwargs['k']`."""
    if not path:
        return "<root>"
    head, rest = path[0], path[1:]
    positional = getattr(head, "idx", None) == 0
    if rest:
        key = getattr(rest[0], "idx", getattr(rest[0], "key", None))
        if positional and type(key) is int and key < len(names) and names[key]:
            return names[key] + tree_util.keystr(tuple(rest[1:]))
        if not positional and isinstance(key, str) and key.isidentifier():
            return key + tree_util.keystr(tuple(rest[1:]))
    return ("args" if positional else "kwargs") + tree_util.keystr(tuple(rest))


def donated_leaves(
    where: str, in_tree, args: tuple, static_nums: set[int], donate_argnums: Sequence[int]
) -> tuple[bool, ...]:
    """Which flat leaves of `in_tree` belong to donated positional arguments."""
    n = len(args)
    donated = positions(where, "donate_argnums", donate_argnums, n)
    both = donated & static_nums
    if both:
        raise ValueError(
            f"{where}: argument {min(both)} is both static and donated; a static argument "
            "has no buffer to donate"
        )
    dyn_positions = [i for i in range(n) if i not in static_nums]
    arg_trees = in_tree.children()[0].children()
    flags: list[bool] = []
    for k, position in enumerate(dyn_positions):
        flags += [position in donated] * arg_trees[k].num_leaves
    flags += [False] * (in_tree.num_leaves - len(flags))
    return tuple(flags)


# --- Naming leaves by path ----------------------------------------------------------------------


def leaf_names(in_tree, params: Sequence[str] | None = None) -> list[str]:
    """Each flat leaf of the `((args), {kwargs})` tree `in_tree`, named by its path.

    `params[i]` names positional argument i (`params['w']`); without it, `args[i]['w']`.
    A keyword argument is named by its keyword (`scale`, `opts['lr']`).
    """
    dummy = tree_util.tree_unflatten(in_tree, range(in_tree.num_leaves))
    return [_leaf_name(path, params) for path, _ in tree_util.tree_flatten_with_path(dummy)[0]]


def _leaf_name(path, params: Sequence[str | None] | None) -> str:
    if len(path) < 2:
        return "args"
    (group, head), rest = path[:2], tree_util.keystr(tuple(path[2:]))
    if getattr(group, "idx", None) == 1:
        return f"{head.key}{rest}"
    if params is not None and head.idx < len(params) and params[head.idx] is not None:
        return f"{params[head.idx]}{rest}"
    return f"args[{head.idx}]{rest}"


def output_names(out_tree) -> list[str]:
    """Each flat result leaf named by its path: `out`, `out['loss']`, `out[0]`."""
    dummy = tree_util.tree_unflatten(out_tree, range(out_tree.num_leaves))
    return ["out" + tree_util.keystr(p) for p, _ in tree_util.tree_flatten_with_path(dummy)[0]]


def format_signature(stage, params: Sequence[str] | None = None) -> str:
    """`f(x: f32[3], params['w']: f32[4,3]) -> (out: f32[3])`: a stage's signature
    (anything with `name`, `in_tree`, `out_tree`, `flat_in_specs`, `flat_out_specs`: a
    Traced, Lowered or Compiled, or a Signature) with every leaf named by its path, a typed
    key leaf by its key spec (`key<fry>[2]`); `params` names the positional arguments (see
    `leaf_names`; default: the signature's `arg_names`)."""
    signature = getattr(stage, "signature", stage)
    if params is None:
        params = getattr(signature, "arg_names", None) or None
    in_specs = leaf_specs(stage.flat_in_specs, signature.in_keys)
    out_specs = leaf_specs(stage.flat_out_specs, signature.out_keys)
    ins = zip(leaf_names(stage.in_tree, params), in_specs, strict=True)
    outs = zip(output_names(stage.out_tree), out_specs, strict=True)
    text_in = ", ".join(f"{n}: {spec_text(s)}" for n, s in ins)
    text_out = ", ".join(f"{n}: {spec_text(s)}" for n, s in outs)
    return f"{stage.name}({text_in}) -> ({text_out})"


# --- Typed PRNG keys ---------------------------------------------------------------------------


def key_dtype(leaf):
    """The key dtype (`key<fry>`, ...) of a typed PRNG key leaf (an array or a spec), else None."""
    dtype = getattr(leaf, "dtype", None)
    if dtype is None or isinstance(dtype, np.dtype):
        return None
    try:
        return dtype if jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key) else None
    except TypeError:
        return None


def key_leaves(leaves) -> tuple:
    """Per leaf (arrays or specs, in a signature's flat order): the `jax.ShapeDtypeStruct`
    of a typed key leaf, else None; () when no leaf is a key (the common case)."""
    found = tuple(
        None if key_dtype(x) is None else jax.ShapeDtypeStruct(tuple(x.shape), x.dtype)
        for x in leaves
    )
    return found if any(k is not None for k in found) else ()


def leaf_specs(flat_specs, keys) -> list:
    """The user's view of a signature's flat leaves: `flat_specs` (the module's), with each
    key leaf of `keys` (see `key_leaves`) as its key spec."""
    if not keys:
        return list(flat_specs)
    return [s if k is None else k for s, k in zip(flat_specs, keys, strict=True)]


def spec_text(spec) -> str:
    """`f32[2,3]` for a ShapeDtype, `key<fry>[2]` for a key leaf or spec."""
    if isinstance(spec, ShapeDtype):
        return str(spec)
    return f"{spec.dtype.name}[{','.join(map(str, spec.shape))}]"


def key_data(leaf, spec):
    """The uint32 data of `leaf` for a key leaf compiled as `spec` (its `jax.ShapeDtypeStruct`),
    or None when `leaf` is not a key array of that dtype and shape."""
    if not isinstance(leaf, jax.Array) or key_dtype(leaf) != spec.dtype:
        return None
    if tuple(leaf.shape) != spec.shape:
        return None
    return jax.random.key_data(leaf)


# The implementations `jax.random.key(seed, impl=NAME)` takes by name; an artifact records a
# key leaf's implementation by that name.
KEY_IMPLS = ("threefry2x32", "rbg", "unsafe_rbg")


@functools.cache
def _impl_dtype(name: str):
    return jax.eval_shape(functools.partial(jax.random.key, impl=name), 0).dtype


def key_impl_name(dtype) -> str | None:
    """The name (`KEY_IMPLS`) of the implementation of keys of `dtype`; None for one that
    jax.random.key does not take by name (a custom PRNG implementation)."""
    for name in KEY_IMPLS:
        if _impl_dtype(name) == dtype:
            return name
    return None


def key_spec(impl: str, shape) -> jax.ShapeDtypeStruct:
    """The `jax.ShapeDtypeStruct` of keys of implementation `impl` (a name of `KEY_IMPLS`) and
    `shape`; ValueError for another name."""
    if impl not in KEY_IMPLS:
        raise ValueError(
            f"names PRNG implementation {impl!r}, which is none of jax.random.key's "
            f"({', '.join(KEY_IMPLS)})"
        )
    return jax.ShapeDtypeStruct(tuple(shape), _impl_dtype(impl))


def key_data_spec(key: jax.ShapeDtypeStruct) -> ShapeDtype:
    """The spec of the uint32 data of keys `key` (the module's argument or result)."""
    data = jax.eval_shape(jax.random.key_data, key)
    return ShapeDtype(data.shape, data.dtype)


def wrap_key(data, spec):
    """A result's uint32 data as the key array `spec` (a key `jax.ShapeDtypeStruct`) says."""
    return jax.random.wrap_key_data(data, dtype=spec.dtype)
