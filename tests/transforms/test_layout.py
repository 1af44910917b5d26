"""The transforms of layout and indexing ops: broadcasts, reshapes, transposes, slices with
steps, reverse, pad, concatenate and its users (stack, tile, repeat, roll, split), dynamic
slices and updates, gathers (fancy indexing, take, take_along_axis) and scatters (`x.at[]`
updates and in-place writes `x[idx] = v`, `x[idx] += v`, duplicate indices included),
sort and argsort, cumulative sums; against JAX, central differences and the transpose
identity, with indices batched and unbatched under vmap.

One program per dtype for the whole family (tests/transforms/oracle.py); each test checks
one op, so a failure names it.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import aotkit
import aotkit.numpy as anp
from tests.transforms.oracle import Case, Family, rule_tests

FLOATS = ["float32", "float64"]


def twin(fn, make, **options) -> Case:
    """A case written once for both namespaces: `fn(xp, *args)`."""
    return Case(lambda *a: fn(anp, *a), lambda *a: fn(jnp, *a), make, **options)


def normal(*shapes):
    return lambda rng, dt: tuple(rng.standard_normal(s).astype(dt) for s in shapes)


def with_index(shape, high, index_shape=(), *more):
    """x of `shape`, an int32 index of `index_shape` in [0, high), then arrays of `more`."""

    def make(rng, dt):
        x = rng.standard_normal(shape).astype(dt)
        i = rng.integers(0, high, index_shape).astype(np.int32)
        return (x, i) + tuple(rng.standard_normal(s).astype(dt) for s in more)

    return make


DUPLICATES = np.array([0, 2, 0, 3], np.int32)  # rows 0 twice


def with_duplicates(shape, update_shape):
    def make(rng, dt):
        x = rng.standard_normal(shape).astype(dt)
        idx = rng.permutation(DUPLICATES).astype(np.int32)
        return x, idx, rng.standard_normal(update_shape).astype(dt)

    return make


def _setitem(x, idx, v):
    x = x + 0
    x[idx] = v
    return x


def _setitem_add(x, idx, v):
    x = x + 0
    x[idx] += v
    return x


def _window_write(x, v):
    x = x + 0
    x[1:3] = v
    return x


def _dynamic_write(x, i, v):
    x = x + 0
    x[i : i + 2] = v
    return x


def _unique_rows(rng, dt):
    """A permutation of rows: a scatter with unique indices (no winner to choose)."""
    x = rng.standard_normal((5, 3)).astype(dt)
    return x, rng.permutation(5)[:3].astype(np.int32), rng.standard_normal((3, 3)).astype(dt)


def _multiplied(x, idx, v):
    """`x.at[idx].multiply(v)` written with one write per update: JAX differentiates it in
    the updates whatever the indices (its scatter_mul needs unique ones)."""
    m = jnp.ones_like(x)
    for j in range(idx.shape[0]):
        m = m.at[idx[j]].set(m[idx[j]] * v[j])
    return x * m


def with_zero_updates(rng, dt):
    """Duplicate rows, updates with zeros: one zero at a location, and two."""
    x, idx, v = with_duplicates((5, 3), (4, 3))(rng, dt)
    first = int(np.flatnonzero(idx == 0)[0])
    v[first, 0] = 0
    v[idx == 0, 1] = 0
    return x, idx, v


def with_tied_updates(rng, dt):
    """Duplicate rows whose updates tie with each other and with the operand."""
    x, idx, v = with_duplicates((5, 3), (4, 3))(rng, dt)
    rows = np.flatnonzero(idx == 0)
    v[rows[1]] = v[rows[0]]
    x[0, 1] = v[rows[0], 1]
    v[idx == 3, 2] = x[3, 2]
    return x, idx, v


LAYOUT = {
    "broadcast_to": twin(lambda xp, x: xp.broadcast_to(x, (2, 3, 4)), normal((3, 1))),
    "broadcast_rank": twin(lambda xp, x: xp.broadcast_to(x, (2, 3, 4)), normal((4,))),
    "reshape": twin(lambda xp, x: x.reshape(4, 6) * x.reshape(4, 6)[::-1], normal((2, 3, 4))),
    "ravel": twin(lambda xp, x: xp.ravel(x), normal((2, 3, 4))),
    "transpose": twin(lambda xp, x: xp.transpose(x, (2, 0, 1)), normal((2, 3, 4))),
    "moveaxis": twin(lambda xp, x: xp.moveaxis(x, 0, -1), normal((2, 3, 4))),
    "expand_squeeze": twin(
        lambda xp, x: xp.expand_dims(x, 1) * x[None].squeeze(0)[:, None], normal((3, 4))
    ),
    "slice_steps": twin(lambda xp, x: x[1:, ::2] * 2, normal((4, 5))),
    "slice_negative_steps": twin(lambda xp, x: x[::-1, 4:0:-2], normal((4, 5))),
    "slice_empty": twin(lambda xp, x: x[2:2].sum() + x[1:3, 1:4] * 3, normal((4, 5))),
    "flip": twin(lambda xp, x: xp.flip(x, 1) * x, normal((3, 4))),
    "pad": twin(lambda xp, x: xp.pad(x, ((1, 2), (0, 1))), normal((3, 4))),
    "pad_value": twin(
        lambda xp, x, c: xp.pad(x, ((1, 0), (2, 1)), constant_values=c), normal((3, 4), ())
    ),
    "concatenate": twin(lambda xp, x, y: xp.concatenate([x, y, x], axis=1), normal((3, 2), (3, 4))),
    "stack": twin(lambda xp, x, y: xp.stack([x, y, x * y], axis=1), normal((3, 4), (3, 4))),
    "split": twin(lambda xp, x: tuple(xp.split(x, [1, 3], axis=1)), normal((3, 5))),
    "tile": twin(lambda xp, x: xp.tile(x, (2, 1, 3)), normal((3, 4))),
    "repeat": twin(lambda xp, x: xp.repeat(x, 2, axis=0), normal((3, 4))),
    "repeat_counts": twin(lambda xp, x: xp.repeat(x, np.array([1, 0, 3]), axis=0), normal((3, 4))),
    "roll": twin(lambda xp, x: xp.roll(x, 2, axis=1) * x, normal((3, 4))),
    "roll_traced": twin(lambda xp, x, i: xp.roll(x, i, axis=1), with_index((3, 4), 8)),
    "dynamic_index": twin(lambda xp, x, i: x[i] * 2, with_index((4, 3), 4)),
    "dynamic_index_fixed": twin(
        lambda xp, x, i: x[i] * 2, with_index((4, 3), 4), in_axes=(0, None)
    ),
    "dynamic_index_batched_only": twin(
        lambda xp, x, i: x[i] * 2, with_index((4, 3), 4), in_axes=(None, 0)
    ),
    "dynamic_window": Case(
        lambda x, i: x[i : i + 2],
        lambda x, i: jax.lax.dynamic_slice_in_dim(x, i, 2),
        with_index((5, 3), 4),
    ),
    "dynamic_write": Case(
        _dynamic_write,
        lambda x, i, v: jax.lax.dynamic_update_slice_in_dim(x, v, i, 0),
        with_index((5, 3), 4, (), (2, 3)),
    ),
    "dynamic_write_clamped": Case(
        _dynamic_write,
        lambda x, i, v: jax.lax.dynamic_update_slice_in_dim(x, v, i, 0),
        lambda rng, dt: (
            rng.standard_normal((5, 3)).astype(dt),
            np.int32(rng.integers(3, 6)),  # a window past the end is moved inside
            rng.standard_normal((2, 3)).astype(dt),
        ),
    ),
    "dynamic_write_fixed": Case(
        _dynamic_write,
        lambda x, i, v: jax.lax.dynamic_update_slice_in_dim(x, v, i, 0),
        with_index((5, 3), 4, (), (2, 3)),
        in_axes=(0, None, None),
    ),
    "window_write": Case(_window_write, lambda x, v: x.at[1:3].set(v), normal((5, 3), (2, 3))),
    "fancy_rows": twin(lambda xp, x, idx: x[idx], with_index((4, 3), 4, (5,))),
    "fancy_rows_fixed": twin(
        lambda xp, x, idx: x[idx], with_index((4, 3), 4, (5,)), in_axes=(0, None)
    ),
    "fancy_indices_only_batched": twin(
        lambda xp, x, idx: x[idx], with_index((4, 3), 4, (5,)), in_axes=(None, 0)
    ),
    "fancy_columns": twin(lambda xp, x, idx: x[:, idx], with_index((3, 4), 4, (2, 3))),
    "fancy_pair": twin(lambda xp, x, idx: x[idx, idx[::-1]], with_index((4, 4), 4, (5,))),
    "fancy_negative": twin(lambda xp, x: x[np.array([-1, 0, -1])], normal((4, 3))),
    "take": twin(lambda xp, x, idx: xp.take(x, idx, axis=1), with_index((3, 5), 5, (4,))),
    "take_along_axis": twin(
        lambda xp, x, idx: xp.take_along_axis(x, idx, axis=1), with_index((3, 5), 5, (3, 2))
    ),
    "at_set": twin(lambda xp, x, idx, v: x.at[idx].set(v), _unique_rows),
    "at_set_duplicates": twin(
        lambda xp, x, idx, v: x.at[idx].set(v), with_duplicates((5, 3), (4, 3))
    ),
    "at_add_duplicates": twin(
        lambda xp, x, idx, v: x.at[idx].add(v), with_duplicates((5, 3), (4, 3))
    ),
    "at_add_scalar_updates": twin(
        lambda xp, x, idx, v: x.at[idx, 1].add(v), with_duplicates((5, 3), (4,))
    ),
    "at_add_fixed_indices": twin(
        lambda xp, x, idx, v: x.at[idx].add(v),
        with_duplicates((5, 3), (4, 3)),
        in_axes=(0, None, 0),
    ),
    "at_add_batched_updates_only": twin(
        lambda xp, x, idx, v: x.at[idx].add(v),
        with_duplicates((5, 3), (4, 3)),
        in_axes=(None, None, 0),
    ),
    "at_multiply": Case(lambda x, idx, v: x.at[idx].multiply(v), _multiplied, _unique_rows),
    "at_multiply_duplicates": Case(
        lambda x, idx, v: x.at[idx].multiply(v), _multiplied, with_duplicates((5, 3), (4, 3))
    ),
    "at_multiply_zeros": Case(
        lambda x, idx, v: x.at[idx].multiply(v), _multiplied, with_zero_updates
    ),
    "at_max": twin(lambda xp, x, idx, v: x.at[idx].max(v), with_duplicates((5, 3), (4, 3))),
    "at_min": twin(lambda xp, x, idx, v: x.at[idx].min(v), with_duplicates((5, 3), (4, 3))),
    "at_max_ties": twin(lambda xp, x, idx, v: x.at[idx].max(v), with_tied_updates, fd=False),
    "at_min_ties": twin(lambda xp, x, idx, v: x.at[idx].min(v), with_tied_updates, fd=False),
    "setitem": Case(_setitem, lambda x, idx, v: x.at[idx].set(v), with_duplicates((5, 3), (4, 3))),
    "setitem_add": Case(
        _setitem_add,
        lambda x, idx, v: x.at[idx].set(x[idx] + v),
        with_duplicates((5, 3), (4, 3)),
    ),
    "sort": twin(lambda xp, x: xp.sort(x, axis=1), normal((3, 5))),
    "sort_axis0": twin(lambda xp, x: xp.sort(x, axis=0), normal((4, 3))),
    "argsort": twin(
        lambda xp, x, key: xp.take_along_axis(x, xp.argsort(key, axis=1), axis=1),
        normal((3, 5), (3, 5)),
    ),
    "cumsum": twin(lambda xp, x: xp.cumsum(x, axis=1), normal((3, 5))),
    "cumsum_axis0": twin(lambda xp, x: xp.cumsum(x, axis=0), normal((4, 3))),
    "cumprod": twin(lambda xp, x: xp.cumprod(x, axis=1), normal((3, 4))),
    "diff": twin(lambda xp, x: xp.diff(x, axis=1), normal((3, 5))),
}

FAMILY = Family(LAYOUT)
CASES = [pytest.param(name, dtype, id=f"{name}-{dtype}") for name in LAYOUT for dtype in FLOATS]


test_jvp, test_vjp, test_vmap, test_transpose, test_central_differences = rule_tests(
    FAMILY, CASES, [(n, "float64") for n, c in LAYOUT.items() if c.fd]
)


# --- sharding constraints -------------------------------------------------------------------------


def test_sharding_constraints_are_differentiated_and_batched():
    """A constraint is the identity on values: its tangent and cotangent are constrained
    alike, and under vmap it gains a replicated leading dimension (JAX's rules)."""
    from jax.sharding import AxisType, NamedSharding, PartitionSpec

    # The CPU's device, where aotkit compiles it (an accelerator host's JAX defaults to its own).
    cpu = jax.devices("cpu")[:1]
    mesh = jax.make_mesh((1,), ("x",), axis_types=(AxisType.Auto,), devices=cpu)
    sharding = NamedSharding(mesh, PartitionSpec("x"))

    def f(xp, constrain):
        return lambda x: xp.sum(constrain(xp.sin(x), sharding) ** 2)

    fa = f(anp, aotkit.sharding.constrain)
    fj = f(jnp, jax.lax.with_sharding_constraint)
    xs = np.linspace(0, 1, 8, dtype=np.float32).reshape(2, 4)
    lowered = aotkit.jit(aotkit.vmap(aotkit.grad(fa)), pipeline="none").lower(xs)
    text = lowered.as_text()
    assert text.count("sdy.sharding_constraint") == 2, text
    assert '<@mesh, [{}, {"x"}]>' in text, text
    got = lowered.compile(backend="cpu")(xs)
    np.testing.assert_allclose(np.asarray(got), jax.vmap(jax.grad(fj))(xs), rtol=1e-6)
    _, tangent = aotkit.jvp(fa, (xs[0],), (xs[1],))
    np.testing.assert_allclose(np.asarray(tangent), jax.jvp(fj, (xs[0],), (xs[1],))[1], rtol=1e-6)
