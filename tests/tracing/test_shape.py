"""Shape family against NumPy: values, shapes and result dtypes, on the CPU backend.

Compiles dominate the cost, so each compile checks many functions: a fixed table runs in one
program per dtype (parametrized so a failure names the function and dtype), and each
hypothesis example lowers one program that applies every layout function to one random
shape with random axes. Error paths only trace.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jax import tree_util

import aotkit
import aotkit.numpy as anp
from tests.helpers import run_on

BF16 = np.dtype(ml_dtypes.bfloat16)
DTYPES = [np.dtype(np.float32), np.dtype(np.int32), np.dtype(np.bool_), BF16]
IDS = ["f32", "i32", "bool", "bf16"]


def sample(shape, dtype: np.dtype) -> np.ndarray:
    """Distinct, exactly representable values, so any misplaced element shows."""
    n = int(np.prod(shape))
    if dtype == np.bool_:
        return (np.arange(n) % 3 == 1).reshape(shape)
    return (np.arange(n) % 200 - 50).reshape(shape).astype(dtype)


def assert_same(got, want, what: str, exact: bool = True) -> None:
    got_leaves, want_leaves = tree_util.tree_leaves(got), tree_util.tree_leaves(want)
    assert len(got_leaves) == len(want_leaves), f"{what}: {len(got_leaves)} outputs"
    for g, w in zip(got_leaves, want_leaves, strict=True):
        w = np.asarray(w)
        assert g.dtype == w.dtype, f"{what}: dtype {g.dtype} != NumPy's {w.dtype}"
        assert g.shape == w.shape, f"{what}: shape {g.shape} != NumPy's {w.shape}"
        if exact or w.dtype.kind in "biu":
            np.testing.assert_array_equal(g, w, err_msg=what)
        else:
            tol = 2e-2 if w.dtype == BF16 else 1e-5
            np.testing.assert_allclose(
                g.astype(np.float64), w.astype(np.float64), rtol=tol, err_msg=what
            )


# --- a fixed table, one program per dtype ----------------------------------------------------

CASES = {
    "reshape": lambda xp, a: xp.reshape(a, (4, -1)),
    "reshape_method": lambda xp, a: a.reshape(3, 2, 4),
    "ravel": lambda xp, a: xp.ravel(a),
    "flatten": lambda xp, a: a.flatten(),
    "transpose": lambda xp, a: xp.transpose(a, (1, 2, 0)),
    "permute_dims": lambda xp, a: xp.permute_dims(a, (2, 0, 1)),
    "matrix_transpose": lambda xp, a: xp.matrix_transpose(a),
    "swapaxes": lambda xp, a: xp.swapaxes(a, 0, -1),
    "moveaxis": lambda xp, a: xp.moveaxis(a, [0, 1], [-1, 0]),
    "expand_dims": lambda xp, a: xp.expand_dims(a, (0, 4)),
    "squeeze": lambda xp, a: xp.squeeze(a[:, :1, None], axis=(1, 2)),
    "broadcast_to": lambda xp, a: xp.broadcast_to(a[0], (2, 2, 3, 4)),
    "broadcast_arrays": lambda xp, a: xp.broadcast_arrays(a, a[0, :, :1], 1),
    "atleast_1d": lambda xp, a: xp.atleast_1d(a[0, 0, 0], a[0]),
    "atleast_2d": lambda xp, a: xp.atleast_2d(a[0, 0, 0], a[0, 0], a),
    "atleast_3d": lambda xp, a: xp.atleast_3d(a[0, 0, 0], a[0, 0], a[0], a),
    "concatenate": lambda xp, a: xp.concatenate([a, a[:, :1]], axis=1),
    "concatenate_none": lambda xp, a: xp.concatenate((a, a[0]), axis=None),
    "concat": lambda xp, a: xp.concat([a[0], a[1]], axis=-1),
    "stack": lambda xp, a: xp.stack([a, a, a], axis=-1),
    "unstack": lambda xp, a: xp.unstack(a, axis=1),
    "hstack": lambda xp, a: xp.hstack([a, a[:, :2]]),
    "hstack_1d": lambda xp, a: xp.hstack([a[0, 0], a[1, 1]]),
    "vstack": lambda xp, a: xp.vstack([a[0], a[1, 0]]),
    "dstack": lambda xp, a: xp.dstack([a[0], a[1]]),
    "column_stack": lambda xp, a: xp.column_stack([a[0, 0], a[1].T[:, :2]]),
    "split": lambda xp, a: xp.split(a, [1, -1, 7], axis=2),
    "split_sections": lambda xp, a: xp.split(a, 2, axis=-1),
    "array_split": lambda xp, a: xp.array_split(a, 3, axis=2),
    "hsplit": lambda xp, a: xp.hsplit(a, 3),
    "vsplit": lambda xp, a: xp.vsplit(a, [1]),
    "dsplit": lambda xp, a: xp.dsplit(a, 2),
    "append": lambda xp, a: xp.append(a, a[0]),
    "append_axis": lambda xp, a: xp.append(a, a[:1], axis=0),
    "delete": lambda xp, a: xp.delete(a, [0, 2], axis=2),
    "delete_slice": lambda xp, a: xp.delete(a, slice(None, None, 2)),
    "delete_mask": lambda xp, a: xp.delete(a, np.array([True, False, True]), axis=1),
    "tile": lambda xp, a: xp.tile(a, (2, 1, 1, 2)),
    "tile_int": lambda xp, a: xp.tile(a[0, 0], 3),
    "repeat": lambda xp, a: xp.repeat(a, 2, axis=1),
    "repeat_counts": lambda xp, a: xp.repeat(a, [1, 0, 3], axis=1),
    "repeat_flat": lambda xp, a: xp.repeat(a, 2),
    "repeat_method": lambda xp, a: a.repeat(np.array([2, 1, 0, 3]), axis=-1),
    "pad_constant": lambda xp, a: xp.pad(a, 1, constant_values=3),
    "pad_per_side": lambda xp, a: xp.pad(
        a, ((0, 1), (2, 0), (1, 1)), constant_values=((1, 2), (3, 4), (5, 6))
    ),
    "pad_edge": lambda xp, a: xp.pad(a, ((0, 1), (2, 3), (1, 1)), mode="edge"),
    "pad_reflect": lambda xp, a: xp.pad(a, ((0, 1), (2, 5), (1, 7)), mode="reflect"),
    "pad_wrap": lambda xp, a: xp.pad(a, ((0, 1), (2, 5), (1, 9)), mode="wrap"),
    "pad_symmetric": lambda xp, a: xp.pad(a, [(3, 0)], mode="symmetric"),
    "flip": lambda xp, a: xp.flip(a, (0, 2)),
    "flip_all": lambda xp, a: xp.flip(a),
    "fliplr": lambda xp, a: xp.fliplr(a),
    "flipud": lambda xp, a: xp.flipud(a),
    "roll_flat": lambda xp, a: xp.roll(a, 5),
    "roll_axes": lambda xp, a: xp.roll(a, (1, -1, 2), axis=(1, 2, 1)),
    "rot90": lambda xp, a: xp.rot90(a),
    "rot90_k3": lambda xp, a: xp.rot90(a, 3, axes=(2, 1)),
    "rot90_k2": lambda xp, a: xp.rot90(a, -2),
    "tril": lambda xp, a: xp.tril(a, -1),
    "triu": lambda xp, a: xp.triu(a, 1),
    "tril_1d": lambda xp, a: xp.tril(a[0, 0]),
    "diag_2d": lambda xp, a: xp.diag(a[0], 1),
    "diag_below": lambda xp, a: xp.diag(a[0, 0], -2),
    "diag_above": lambda xp, a: xp.diag(a[0, 0], 2),
    "diagonal": lambda xp, a: xp.diagonal(a, 1, 2, 1),
    "diagonal_below": lambda xp, a: xp.diagonal(a, -1, 0, 2),
    "diagonal_empty": lambda xp, a: xp.diagonal(a, 5, 1, 2),
    "diagonal_method": lambda xp, a: a.diagonal(),
    "trace": lambda xp, a: xp.trace(a, 1, 1, 2),
    "trace_method": lambda xp, a: a[0].trace(),
    "outer": lambda xp, a: xp.outer(a[0], a[1, 0]),
    "kron": lambda xp, a: xp.kron(a[0], a[1, :2, :2]),
    "kron_ranks": lambda xp, a: xp.kron(a[0, 0], a[1]),
    "meshgrid": lambda xp, a: xp.meshgrid(a[0, 0], a[0, :, 0], a[1, 1, :2]),
    "meshgrid_ij_sparse": lambda xp, a: xp.meshgrid(
        a[0, 0], a[0, :, 0], indexing="ij", sparse=True
    ),
}
EXACT_EXCEPT = {"trace", "trace_method"}
X_SHAPE = (2, 3, 4)


@pytest.fixture(scope="module", params=DTYPES, ids=IDS)
def table(request):
    dtype = request.param
    x = sample(X_SHAPE, dtype)
    got = run_on("cpu", lambda a: {k: f(anp, a) for k, f in CASES.items()}, x)
    return dtype, x, got


@pytest.mark.parametrize("name", list(CASES))
def test_layout_function(table, name):
    dtype, x, got = table
    assert_same(got[name], CASES[name](np, x), f"{name}[{dtype}]", exact=name not in EXACT_EXCEPT)


def test_creation_functions():
    def fn():
        return {
            "eye": anp.eye(3),
            "eye_rect": anp.eye(3, 5, k=2, dtype=np.int32),
            "eye_below": anp.eye(4, 2, k=-1, dtype=bool),
            "eye_bf16": anp.eye(2, dtype=BF16),
            "identity": anp.identity(3),
            "identity_i32": anp.identity(2, dtype="int32"),
        }

    want = {
        "eye": np.eye(3),
        "eye_rect": np.eye(3, 5, k=2, dtype=np.int32),
        "eye_below": np.eye(4, 2, k=-1, dtype=bool),
        "eye_bf16": np.eye(2, dtype=BF16),
        "identity": np.identity(3),
        "identity_i32": np.identity(2, dtype="int32"),
    }
    got = run_on("cpu", fn)
    for name in want:
        assert_same(got[name], want[name], name)


def test_mixed_dtypes_promote_like_numpy():
    a, b = sample((2, 3), np.int8), sample((2, 2), np.float32)
    c = sample((1, 3), np.uint8)

    def fn(xp, a, b, c):
        return {
            "concatenate": xp.concatenate([a, b[:, :1]], axis=1),
            "concatenate_list": xp.concatenate([a, [[1, 2, 3]]]),
            "stack_dtype": xp.stack([a[0], c[0]], dtype=np.float32),
            "vstack_unsafe": xp.vstack([a, c], dtype=np.int8, casting="unsafe"),
            "hstack": xp.hstack([a, c[:, :2].repeat(2, axis=0)]),
            "outer": xp.outer(a[0], b[0]),
            "kron": xp.kron(a, c),
            "pad_float_into_int": xp.pad(a, 1, constant_values=2.7),
            "broadcast_arrays": xp.broadcast_arrays(a, c),
        }

    got = run_on("cpu", lambda *args: fn(anp, *args), a, b, c)
    want = fn(np, a, b, c)
    for name in want:
        assert_same(got[name], want[name], name)


def test_roll_by_traced_shift():
    x = sample((3, 4), np.dtype(np.float32))
    shifts = [np.int32(3), np.int32(-7), np.uint8(9), np.int64(0), np.int8(-1)]

    def fn(xp, a, *s):
        return [xp.roll(a, s[0], axis=1), xp.roll(a, s[1])] + [xp.roll(a, v, 0) for v in s[2:]]

    got = run_on("cpu", lambda a, *s: fn(anp, a, *s), x, *shifts)
    assert_same(got, fn(np, x, *(int(v) for v in shifts)), "roll by a traced shift")


# --- random shapes and axes ------------------------------------------------------------------


@st.composite
def layout_programs(draw):
    ndim = draw(st.integers(1, 4))
    shape = tuple(draw(st.lists(st.integers(0, 4), min_size=ndim, max_size=ndim)))
    ax = st.integers(-ndim, ndim - 1)
    perm = draw(st.permutations(range(ndim)))
    src = draw(st.lists(st.integers(0, ndim - 1), unique=True, min_size=1, max_size=ndim))
    dst = draw(st.permutations(range(ndim)))[: len(src)]
    axis = draw(ax)
    n = shape[axis]
    empty = 0 in shape
    mode = draw(st.sampled_from(["constant"] if empty else ["constant", "edge", "reflect", "wrap"]))
    widths = [draw(st.tuples(st.integers(0, 3), st.integers(0, 3))) for _ in range(ndim)]
    ops = {
        "transpose": lambda xp, a: xp.transpose(a, perm),
        "moveaxis": lambda xp, a: xp.moveaxis(a, src, dst),
        "swapaxes": lambda xp, a: xp.swapaxes(a, axis, -1),
        "expand_dims": lambda xp, a: xp.expand_dims(a, draw_axis_new),
        "squeeze": lambda xp, a: xp.squeeze(a),
        "flip": lambda xp, a: xp.flip(a, flip_axes),
        "roll": lambda xp, a: xp.roll(a, shift, axis=axis),
        "concatenate": lambda xp, a: xp.concatenate([a, xp.flip(a, axis)], axis=axis),
        "stack": lambda xp, a: xp.stack([a, a], axis=stack_axis),
        "array_split": lambda xp, a: xp.array_split(a, sections, axis=axis),
        "split_points": lambda xp, a: xp.split(a, points, axis=axis),
        "tile": lambda xp, a: xp.tile(a, reps),
        "repeat": lambda xp, a: xp.repeat(a, repeats, axis=axis),
        "pad": lambda xp, a: xp.pad(a, widths, mode=mode),
        "broadcast_to": lambda xp, a: xp.broadcast_to(a, (2,) + shape),
        "slices": lambda xp, a: a[tuple(slices)],
        "outer": lambda xp, a: xp.outer(a, xp.flip(a)),
        "kron": lambda xp, a: xp.kron(a, a[(slice(0, 2),) * ndim]),
    }
    draw_axis_new = draw(st.integers(-ndim - 1, ndim))
    flip_axes = tuple(draw(st.lists(st.integers(0, ndim - 1), unique=True, max_size=ndim)))
    shift = draw(st.integers(-6, 6))
    stack_axis = draw(st.integers(-ndim - 1, ndim))
    sections = draw(st.integers(1, 5))
    points = sorted(draw(st.lists(st.integers(-n - 1, n + 1), max_size=3)))
    reps = tuple(draw(st.lists(st.integers(0, 3), min_size=1, max_size=ndim + 1)))
    repeats = draw(st.integers(0, 3))
    slices = [
        slice(draw(st.integers(-5, 5) | st.none()), draw(st.integers(-5, 5) | st.none()), step)
        for step in draw(st.lists(st.sampled_from([None, 1, 2, 3, -1, -2]), max_size=ndim))
    ]
    if ndim >= 2:
        k, offset = draw(st.integers(-5, 5)), draw(st.integers(-4, 4))
        a1, a2 = draw(st.permutations(range(ndim)))[:2]
        ops.update(
            {
                "diagonal": lambda xp, a: xp.diagonal(a, offset, a1, a2),
                "tril": lambda xp, a: xp.tril(a, k),
                "triu": lambda xp, a: xp.triu(a, k),
                "rot90": lambda xp, a: xp.rot90(a, k, axes=(a1, a2)),
            }
        )
    if ndim <= 2:
        ops["diag"] = lambda xp, a: xp.diag(a, draw_k)
    draw_k = draw(st.integers(-4, 4))
    return shape, ops


@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
@settings(max_examples=8, deadline=None)
@given(program=layout_programs())
def test_layout_functions_random(dtype, program):
    shape, ops = program
    x = sample(shape, dtype)
    got = run_on("cpu", lambda a: {k: f(anp, a) for k, f in ops.items()}, x)
    for name, f in ops.items():
        assert_same(got[name], f(np, x), f"{name}[{dtype}] on {shape}")


# --- errors ----------------------------------------------------------------------------------


def trace(fn, *shapes: str):
    return aotkit.lower(fn, *(aotkit.spec(s) for s in shapes))


ERRORS = [
    ("reshape", lambda a: anp.reshape(a, (5, -1)), ValueError, r"cannot reshape array of size 6"),
    ("reshape", lambda a: anp.reshape(a, (-1, -1)), ValueError, r"bad shape \(-1, -1\)"),
    ("reshape", lambda a: anp.reshape(a, (2.0, 3)), TypeError, r"must hold Python ints"),
    ("reshape", lambda a: anp.reshape(a, (4, 2)), ValueError, r"size 6 into shape \(4, 2\)"),
    ("reshape", lambda a: anp.reshape(a, 6, order="F"), NotImplementedError, r"order='C'"),
    ("ravel", lambda a: anp.ravel(a, order="F"), NotImplementedError, r"ravel .*order='C'"),
    ("transpose", lambda a: anp.transpose(a, (0, 0)), ValueError, r"not a permutation"),
    ("transpose", lambda a: anp.transpose(a, (0, 2)), ValueError, r"axis 2 is out of bounds"),
    ("transpose", lambda a: anp.transpose(a, (0, 1.0)), TypeError, r"must be a Python int"),
    ("matrix_transpose", lambda a: anp.matrix_transpose(a[0]), ValueError, r"at least 2-dim"),
    (
        "moveaxis",
        lambda a: anp.moveaxis(a, (0, 0), (0, 1)),
        ValueError,
        r"repeated axis in `source`",
    ),
    ("moveaxis", lambda a: anp.moveaxis(a, (0, 1), 0), ValueError, r"same number of elements"),
    ("expand_dims", lambda a: anp.expand_dims(a, (0, 0)), ValueError, r"repeated axis"),
    ("squeeze", lambda a: anp.squeeze(a, 1), ValueError, r"size not equal to one"),
    (
        "broadcast_to",
        lambda a: anp.broadcast_to(a, (3, 2)),
        ValueError,
        r"shapes \(2, 3\) and \(3, 2\) cannot broadcast",
    ),
    ("broadcast_to", lambda a: anp.broadcast_to(a, (-1, 3)), ValueError, r"must be >= 0"),
    (
        "broadcast_to",
        lambda a: anp.broadcast_to(a, (1, 3)),
        ValueError,
        r"cannot broadcast shape \(2, 3\) to \(1, 3\)",
    ),
    (
        "broadcast_to",
        lambda a: anp.broadcast_to(a, (a, 3)),
        TypeError,
        r"broadcast_to \(at .*\): shape is traced, but it sets the shape of the result",
    ),
    (
        "broadcast_arrays",
        lambda a: anp.broadcast_arrays(a, a[0, :2]),
        ValueError,
        r"cannot broadcast",
    ),
    ("concatenate", lambda a: anp.concatenate([]), ValueError, r"need at least one array"),
    (
        "concatenate",
        lambda a: anp.concatenate([a[0, 0], a[0, 1]]),
        ValueError,
        r"zero-dimensional arrays cannot be concatenated",
    ),
    ("concatenate", lambda a: anp.concatenate([a, a[0]]), ValueError, r"index 1 has 1 dimension"),
    (
        "concatenate",
        lambda a: anp.concatenate([a, a[:, :2]]),
        ValueError,
        r"along dimension 1, the array at index 0 has size 3",
    ),
    (
        "concatenate",
        lambda a: anp.concatenate(a, out=a),
        NotImplementedError,
        r"out= is not supported",
    ),
    (
        "concatenate",
        lambda a: anp.concatenate([a, a], dtype=np.int32),
        TypeError,
        r"cannot cast array data from float32 to int32 according to the rule 'same_kind'",
    ),
    (
        "concatenate",
        lambda a: anp.concatenate([a, a], casting="nope"),
        ValueError,
        r"casting must be one of",
    ),
    (
        "concatenate",
        lambda a: anp.concatenate(3),
        TypeError,
        r"expected a sequence of arrays, got int",
    ),
    ("stack", lambda a: anp.stack([]), ValueError, r"need at least one array to stack"),
    (
        "stack",
        lambda a: anp.stack([a, a[:1]]),
        ValueError,
        r"same shape, got \(2, 3\) and \(1, 3\)",
    ),
    ("stack", lambda a: anp.stack([a, a], axis=3), ValueError, r"axis 3 is out of bounds"),
    ("unstack", lambda a: anp.unstack(a[0, 0]), ValueError, r"at least 1-d"),
    (
        "split",
        lambda a: anp.split(a, 2, axis=1),
        ValueError,
        r"does not result in an equal division",
    ),
    ("split", lambda a: anp.split(a, 0), ValueError, r"number sections must be larger than 0"),
    ("split", lambda a: anp.split(a[0, 0], 1), ValueError, r"cannot split a 0-d array"),
    (
        "split",
        lambda a: anp.split(a, [1.5]),
        TypeError,
        r"indices_or_sections must be a static Python int, got 1.5",
    ),
    (
        "split",
        lambda a: anp.split(a, a[0, 0].astype("int32")),
        TypeError,
        r"indices_or_sections is traced, but",
    ),
    (
        "vsplit",
        lambda a: anp.vsplit(a[0], 1),
        ValueError,
        r"vsplit .*only works on arrays of 2 or more",
    ),
    (
        "delete",
        lambda a: anp.delete(a, 5, axis=1),
        IndexError,
        r"delete .*index 5 is out of bounds",
    ),
    (
        "delete",
        lambda a: anp.delete(a, a[0, :1]),
        TypeError,
        r"obj \(the indices deleted\) is traced, but it sets the shape",
    ),
    ("tile", lambda a: anp.tile(a, 2**62), ValueError, r"tile .*has a dimension over 2\*\*63 - 1"),
    ("pad", lambda a: anp.pad(a, 2**62), ValueError, r"pad .*has a dimension over 2\*\*63"),
    ("repeat", lambda a: anp.repeat(a, 2**62), ValueError, r"repeat .*dimension over 2\*\*63"),
    ("repeat", lambda a: anp.repeat(a, [2**62] * 3, 1), ValueError, r"dimension over 2\*\*63"),
    ("eye", lambda a: anp.eye(2**63), ValueError, r"eye .*dimension over 2\*\*63"),
    ("broadcast_to", lambda a: anp.broadcast_to(a, (2**63, 2, 3)), ValueError, r"over 2\*\*63"),
    ("array_split", lambda a: anp.array_split(a, 2**40), ValueError, r"mostly empty arrays"),
    ("append", lambda a: anp.append(a, a[0], axis=0), ValueError, r"same number of dimensions"),
    ("tile", lambda a: anp.tile(a, (-1, 1)), ValueError, r"reps \(-1, 1\) must be non-negative"),
    (
        "repeat",
        lambda a: anp.repeat(a, a.astype("int32")),
        TypeError,
        r"repeats is traced, but it sets the shape of the result",
    ),
    ("repeat", lambda a: anp.repeat(a, 1.5), TypeError, r"repeats must be integers, got float64"),
    ("repeat", lambda a: anp.repeat(a, -1), ValueError, r"may not contain negative values"),
    (
        "repeat",
        lambda a: anp.repeat(a, [1, 2], axis=1),
        ValueError,
        r"repeats of shape \(2,\) cannot broadcast to the 3 elements of axis 1",
    ),
    (
        "pad",
        lambda a: anp.pad(a, 1, mode="mean"),
        NotImplementedError,
        r"mode 'mean' is not supported",
    ),
    (
        "pad",
        lambda a: anp.pad(a, 1, mode="edge", constant_values=1),
        ValueError,
        r"unsupported keyword arguments for mode 'edge'",
    ),
    ("pad", lambda a: anp.pad(a, a.astype("int32")), TypeError, r"pad_width is traced"),
    ("pad", lambda a: anp.pad(a, 1.5), TypeError, r"pad_width must be of integral type"),
    ("pad", lambda a: anp.pad(a, [1, 2, 3]), ValueError, r"cannot broadcast to \(2, 2\)"),
    ("pad", lambda a: anp.pad(a, -1), ValueError, r"can't contain negative values"),
    (
        "pad",
        lambda a: anp.pad(a, 1, mode="reflect", reflect_type="odd"),
        NotImplementedError,
        r"reflect_type='odd'",
    ),
    ("pad", lambda a: anp.pad(a[:0], 1, mode="wrap"), ValueError, r"can't extend empty axis 0"),
    (
        "pad",
        lambda a: anp.pad(a, 1, constant_values=a[0]),
        NotImplementedError,
        r"must be a scalar",
    ),
    (
        "pad",
        lambda a: anp.pad(a, 1, constant_values=[1, 2, 3]),
        ValueError,
        r"constant_values \[1, 2, 3\] cannot broadcast",
    ),
    ("fliplr", lambda a: anp.fliplr(a[0]), ValueError, r"must be >= 2-d"),
    ("flipud", lambda a: anp.flipud(a[0, 0]), ValueError, r"must be >= 1-d"),
    ("flip", lambda a: anp.flip(a, (0, 0)), ValueError, r"repeated axis"),
    ("roll", lambda a: anp.roll(a, (1, 2, 3), axis=(0, 1)), ValueError, r"same length"),
    (
        "roll",
        lambda a: anp.roll(a, a[0, 0], axis=0),
        TypeError,
        r"a traced shift must be a 0-d integer array",
    ),
    (
        "roll",
        lambda a: anp.roll(a, a[0, 0].astype("int32"), axis=(0, 1)),
        TypeError,
        r"axis must be a static Python int",
    ),
    (
        "roll",
        lambda a: anp.roll(a, [a[0, 0]], axis=0),
        TypeError,
        r"shift must be a static Python int, got traced",
    ),
    ("rot90", lambda a: anp.rot90(a, axes=(0,)), ValueError, r"len\(axes\) must be 2"),
    ("rot90", lambda a: anp.rot90(a, axes=(0, -2)), ValueError, r"axes must be different"),
    ("rot90", lambda a: anp.rot90(a, axes=(0, 3)), ValueError, r"out of range for array of ndim=2"),
    ("tril", lambda a: anp.tril(a[0, 0]), ValueError, r"at least 1-d"),
    ("triu", lambda a: anp.triu(a, 0.5), TypeError, r"k must be a static Python int"),
    ("eye", lambda a: anp.eye(-1), ValueError, r"negative dimensions are not allowed"),
    ("eye", lambda a: anp.eye(2, dtype="q7"), TypeError, r"unsupported dtype"),
    ("diagonal", lambda a: anp.diagonal(a[0]), ValueError, r"at least two dimensions"),
    (
        "diagonal",
        lambda a: anp.diagonal(a, 0, 1, -1),
        ValueError,
        r"axis1 and axis2 cannot be the same",
    ),
    ("diag", lambda a: anp.diag(a[None]), ValueError, r"must be 1- or 2-d"),
    ("trace", lambda a: anp.trace(a, out=a), NotImplementedError, r"out= is not supported"),
    (
        "meshgrid",
        lambda a: anp.meshgrid(a, indexing="yx"),
        ValueError,
        r"valid values for `indexing`",
    ),
]


@pytest.mark.parametrize(
    "fn, exc, match",
    [pytest.param(f, e, m, id=f"{name}-{i}") for i, (name, f, e, m) in enumerate(ERRORS)],
)
def test_errors(fn, exc, match):
    with pytest.raises(exc, match=match) as info:
        trace(fn, "f32[2,3]")
    # Every message names the function and the user's line.
    assert "test_shape.py:" in str(info.value)
