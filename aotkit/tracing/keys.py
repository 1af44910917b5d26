"""Typed PRNG keys inside a trace.

A typed key array (`jax.random.key(0)`, dtype `key<fry>`) is one leaf to its user and its
uint32 key data to a module: a key of shape S is `uint32[S + key shape]` (`[2]` for
Threefry). Inside a trace it is a `KeyTracer`: the data's tracer and the key dtype.

`KeyTracer` is a pytree node whose one child is the data. Whatever flattens a tree of
traced values (the transforms, `tree_map`) therefore sees the data, an integer array that
is never differentiated and is batched along its leading axes (the key's own), and
rebuilds keys where it rebuilds the tree. A cotangent or tangent built for the data (float0
zeros of the data's shape) rebuilds as float0 zeros of the key's shape, as JAX gives them.

At a trace's edges keys are leaves (`jax.ShapeDtypeStruct`s of the key dtype in a
signature's `in_keys`/`out_keys`): `wrap` makes a program's key arguments (or results)
`KeyTracer`s, and `unwrap` takes them out of a tree it returns.
"""

from __future__ import annotations

import functools

import jax
import numpy as np
from jax import dtypes as jax_dtypes
from jax import tree_util

from aotkit import arguments
from aotkit.tracing.core import Tracer, constant


class KeyTracer:
    """A typed PRNG key array inside a trace: `data`, its uint32 key data (a `Tracer` of
    shape `shape + key shape`), and `dtype`, the key dtype (`key<fry>`)."""

    __slots__ = ("data", "dtype")

    def __init__(self, data, dtype):
        self.data = data
        self.dtype = dtype

    @property
    def shape(self) -> tuple:
        return tuple(self.data.shape[: len(self.data.shape) - len(key_shape(self.dtype))])

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def spec(self) -> jax.ShapeDtypeStruct:
        return jax.ShapeDtypeStruct(self.shape, self.dtype)

    def __repr__(self) -> str:
        return f"KeyTracer({arguments.spec_text(self.spec)})"

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError(f"len() of a single key ({arguments.spec_text(self.spec)})")
        return self.shape[0]

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def __getitem__(self, index):
        # An index of the key's own axes: the data's, keeping the key's trailing ones.
        index = index if isinstance(index, tuple) else (index,)
        if not self.shape and any(i is not None and i is not Ellipsis for i in index):
            raise IndexError(
                f"a single key ({arguments.spec_text(self.spec)}) has no axis to index"
            )
        if any(i is Ellipsis for i in index):
            index += (slice(None),) * len(key_shape(self.dtype))
        return KeyTracer(self.data[index], self.dtype)

    def __array__(self, *args, **kwargs):
        raise TypeError(
            f"a typed PRNG key array ({arguments.spec_text(self.spec)}) is not an array of "
            "numbers: pass it to aotkit.random, or to jax.random in a function JAX lowers "
            "(frontend='jax'); aotkit.random.key_data(key) is its uint32 data"
        )

    def __bool__(self):
        self.__array__()


def _rebuild(dtype, children):
    (data,) = children
    if isinstance(data, np.ndarray) and data.dtype == jax_dtypes.float0:
        # a tangent or cotangent of the data: the key's is float0 zeros of the key's shape
        kdims = len(key_shape(dtype))
        return np.zeros(data.shape[: data.ndim - kdims], jax_dtypes.float0)
    return KeyTracer(data, dtype)


tree_util.register_pytree_node(KeyTracer, lambda k: ((k.data,), k.dtype), _rebuild)


@functools.cache
def key_shape(dtype) -> tuple[int, ...]:
    """The trailing dimensions of a key dtype's data (`(2,)` for Threefry)."""
    return tuple(arguments.key_data_spec(jax.ShapeDtypeStruct((), dtype)).shape)


def is_key(x) -> bool:
    return type(x) is KeyTracer


def wrap(tracers: list, keys: tuple) -> list:
    """Tracers of a program's arguments or results, the keys among them (`keys`: its
    signature's `in_keys` or `out_keys`) as `KeyTracer`s of their data."""
    if not keys:
        return tracers
    return [t if k is None else KeyTracer(t, k.dtype) for t, k in zip(tracers, keys, strict=True)]


def unwrap(tree) -> tuple[object, tuple]:
    """(`tree` with each `KeyTracer` replaced by its data, and per leaf of that tree the key
    spec of a key leaf, else None: a signature's `out_keys`, () without keys)."""
    leaves, treedef = tree_util.tree_flatten(tree, is_leaf=is_key)
    found = tuple(x.spec if is_key(x) else None for x in leaves)
    if not any(k is not None for k in found):
        return tree, ()
    return treedef.unflatten([x.data if is_key(x) else x for x in leaves]), found


def from_concrete(x):
    """A concrete typed key array met inside a trace as a `KeyTracer` of its data (a
    constant); anything else as it is."""
    if isinstance(x, Tracer) or arguments.key_dtype(x) is None or not isinstance(x, jax.Array):
        return x
    return KeyTracer(constant(np.asarray(jax.random.key_data(x))), x.dtype)
