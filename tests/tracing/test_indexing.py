"""Indexing family against NumPy: x[...], take, take_along_axis, .at[] updates, x[i] = v.

Fixed tables run in one program per dtype (parametrized so a failure names the case and
dtype); hypothesis draws random shapes and index tuples mixing ints, slices, None, Ellipsis
and integer arrays, static and traced, and checks reads and updates in one program per
example. Traced out-of-range indices follow aotkit's documented rule (wrap negatives once,
then reads clamp and updates are dropped), which the oracles below spell out in NumPy.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import aotkit
import aotkit.numpy as anp
from aotkit.tracing.core import NUMPY_FUNCTIONS, pop_scope, push_scope
from tests.helpers import run_lowered, run_on
from tests.tracing.test_shape import assert_same, sample

BF16 = np.dtype(ml_dtypes.bfloat16)
DTYPES = [np.dtype(np.float32), np.dtype(np.int32), np.dtype(np.bool_), BF16]
IDS = ["f32", "i32", "bool", "bf16"]
SHAPE = (3, 4, 5)
MASK_2D = (np.arange(12).reshape(3, 4) % 5) < 2
IDX_ALONG = np.argsort(np.sin(np.arange(60.0)).reshape(SHAPE), axis=1)[:, :2]

# --- reads -----------------------------------------------------------------------------------

GETS = {
    "int": lambda a: a[1],
    "negative_int": lambda a: a[-1],
    "ints": lambda a: a[1, -2],
    "scalar": lambda a: a[2, 3, 4],
    "np_int": lambda a: a[np.int64(2), np.array(1)],
    "slice": lambda a: a[1:],
    "reverse": lambda a: a[::-1],
    "step": lambda a: a[:, ::2],
    "ellipsis_negative_step": lambda a: a[..., ::-2],
    "mixed_steps": lambda a: a[:, 3:0:-2, 1:],
    "empty_slice": lambda a: a[5:],
    "empty_reverse": lambda a: a[:, 0:3:-1],
    "clipped_slice": lambda a: a[:, -100:100],
    "big_steps": lambda a: a[::-3, ::3, 4:0:-3],
    "newaxis": lambda a: a[None],
    "trailing_newaxis": lambda a: a[..., None],
    "newaxis_int": lambda a: a[:, None, 1],
    "newaxes_around": lambda a: a[None, ..., None, 0],
    "ellipsis": lambda a: a[...],
    "empty_tuple": lambda a: a[()],
    "array": lambda a: a[[0, 2]],
    "array_2d": lambda a: a[[[0, 1], [2, -1]]],
    "adjacent_arrays": lambda a: a[:, [0, 1], [2, 3]],
    "separated_arrays": lambda a: a[[0, 1], :, [2, 3]],
    "broadcast_arrays": lambda a: a[:, [[0], [3]], [1, 2, 4]],
    "array_then_int": lambda a: a[[0, 1], 1],
    "array_then_slice_int": lambda a: a[[0, 2], :, 1],
    "int_slice_array": lambda a: a[1, :, [0, 4]],
    "zero_d_array_with_array": lambda a: a[:, np.array(1), [0, 1]],
    "empty_list": lambda a: a[[]],
    "empty_array_2d": lambda a: a[:, np.zeros((0, 2), int)],
    "arrays_around_newaxis": lambda a: a[[0, 1], None, [2, 3]],
    "ellipsis_array": lambda a: a[..., [0, -1]],
    "newaxis_array_newaxis": lambda a: a[None, [0, 1], None],
    "tuple_as_array": lambda a: a[(0, 2),],
    "range": lambda a: a[:, range(3, 0, -2)],
    "mask_1d": lambda a: a[np.array([True, False, True])],
    "mask_2d": lambda a: a[MASK_2D],
    "mask_middle": lambda a: a[:, np.array([True, False, True, False])],
    "mask_and_array": lambda a: a[np.array([False, True, True]), :, [1, 3]],
    "iterate": lambda a: tuple(a),
    "take_axis": lambda a: np.take(a, [[0, 3], [1, -1]], axis=2),
    "take_flat": lambda a: np.take(a, [7, -1, 59]),
    "take_scalar": lambda a: np.take(a, 2, axis=1),
    "take_wrap": lambda a: np.take(a, [-7, 5, 12], axis=1, mode="wrap"),
    "take_clip": lambda a: np.take(a, [-7, 2, 12], axis=2, mode="clip"),
    "take_method": lambda a: a.take([1, 0], axis=1),
    "take_along_axis": lambda a: np.take_along_axis(a, IDX_ALONG, axis=1),
    "take_along_none": lambda a: np.take_along_axis(a, np.array([5, 0, 59]), axis=None),
    "take_along_broadcast": lambda a: np.take_along_axis(a, IDX_ALONG[:1], axis=1),
}


@pytest.fixture(scope="module", params=DTYPES, ids=IDS)
def gets(request):
    x = sample(SHAPE, request.param)
    # np.take etc. reach aotkit through _Anp, so this table does not depend on dispatch.py.
    got = run_on("cpu", lambda a: {k: f(_Anp(a)) for k, f in GETS.items()}, x)
    return request.param, x, got


class _Anp:
    """Wraps a tracer so `np.take(a, ...)` in the table reaches aotkit.numpy.take."""

    def __init__(self, t):
        self.t = t

    def __getitem__(self, idx):
        return self.t[idx]

    def __iter__(self):
        return iter(self.t)

    def take(self, *args, **kwargs):
        return self.t.take(*args, **kwargs)

    def __array_function__(self, func, types, args, kwargs):
        args = tuple(a.t if isinstance(a, _Anp) else a for a in args)
        return NUMPY_FUNCTIONS[func.__name__](*args, **kwargs)


@pytest.mark.parametrize("name", list(GETS))
def test_getitem(gets, name):
    dtype, x, got = gets
    assert_same(got[name], GETS[name](x), f"{name}[{dtype}]")


def test_static_indexing_lowers_to_slices():
    text = aotkit.lower(lambda a: a[1, ::-2, 1:4], aotkit.spec("f32[3,4,5]")).as_text()
    assert "stablehlo.slice" in text and "stablehlo.reverse" in text
    assert "gather" not in text and "dynamic_slice" not in text


def test_traced_scalar_index_lowers_to_dynamic_slice():
    text = aotkit.lower(lambda a, i: a[i, 1:], aotkit.spec("f32[3,4]"), aotkit.spec("i32[]"))
    assert "stablehlo.dynamic_slice" in text.as_text() and "gather" not in text.as_text()


# --- traced indices --------------------------------------------------------------------------


def read_oracle(i, n):
    """aotkit's rule for traced reads: negative indices wrap once, then clamp into range."""
    i = np.asarray(i).astype(np.int64)
    return np.clip(np.where(i < 0, i + n, i), 0, n - 1)


@pytest.mark.parametrize("index_dtype", ["int32", "int64", "uint8", "int8"])
def test_traced_indices(index_dtype):
    x = sample(SHAPE, np.dtype(np.float32))
    signed = np.dtype(index_dtype).kind == "i"
    scalars = [np.array(v, index_dtype) for v in ([2, -1, 9, -9] if signed else [2, 0, 9, 200])]
    arr = np.array([[0, 3], [-1, 7]] if signed else [[0, 3], [1, 7]], index_dtype)
    arr2 = np.array([4, -5, 1] if signed else [4, 0, 1], index_dtype)

    def fn(a, s0, s1, s2, s3, arr, arr2):
        return {
            "scalar": a[s0],
            "scalar_negative": a[s1, 1:],
            "scalar_past_end": a[:, s2],
            "scalar_before_start": a[s3, s0],
            "array": a[:, arr],
            "arrays_separated": a[arr2, :, arr2],
            "mixed_static_traced": a[[0, 1, 2], 1, arr2],
            "list_of_traced": a[[s0, s1]],
            "ix": a[anp.ix_(arr2, np.array([True, False, True, False]))],
            "take": anp.take(a, arr, axis=1),
            "take_wrap": anp.take(a, arr2, axis=2, mode="wrap"),
            "take_clip": anp.take(a, arr, axis=1, mode="clip"),
            "take_along_axis": anp.take_along_axis(
                a, anp.broadcast_to(arr2[None, :, None], (3, 3, 5)), 1
            ),
        }

    got = run_on("cpu", fn, x, *scalars, arr, arr2)
    s = [read_oracle(v, n) for v, n in zip(scalars, (3, 3, 4, 3), strict=True)]
    s_first = read_oracle(scalars[0], 4)
    want = {
        "scalar": x[s[0]],
        "scalar_negative": x[s[1], 1:],
        "scalar_past_end": x[:, s[2]],
        "scalar_before_start": x[s[3], s_first],
        "array": x[:, read_oracle(arr, 4)],
        "arrays_separated": x[read_oracle(arr2, 3), :, read_oracle(arr2, 5)],
        "mixed_static_traced": x[[0, 1, 2], 1, read_oracle(arr2, 5)],
        "list_of_traced": x[read_oracle(np.stack(scalars[:2]), 3)],
        "ix": x[np.ix_(read_oracle(arr2, 3), np.array([True, False, True, False]))],
        "take": np.take(x, read_oracle(arr, 4), axis=1),
        "take_wrap": np.take(x, arr2.astype(np.int64), axis=2, mode="wrap"),
        "take_clip": np.take(x, arr.astype(np.int64), axis=1, mode="clip"),
        "take_along_axis": np.take_along_axis(
            x, np.broadcast_to(read_oracle(arr2, 4)[None, :, None], (3, 3, 5)), 1
        ),
    }
    for name in want:
        assert_same(got[name], want[name], f"{name}[{index_dtype}]")


# --- updates ---------------------------------------------------------------------------------

UPDATE_INDICES = {
    "int": 1,
    "row": (slice(None), 2),
    "strided_reversed": (slice(1, None, 2), slice(None, None, -1)),
    "unit_box": (slice(0, 2), slice(1, 3), slice(2, 5)),
    "reversed_box": (slice(2, 0, -1), 3),
    "ellipsis": (Ellipsis, 0),
    "newaxis": (None, 0, slice(1, 3)),
    "duplicates": [0, 2, 0],
    "adjacent_arrays": (slice(None), [1, 3], [0, 4]),
    "separated_arrays": ([0, 1], slice(None), [2, 3]),
    "mask": MASK_2D,
    "int_step_array": (2, slice(None, None, 2), [0, -1]),
    "whole": (Ellipsis,),
    "empty": (slice(2, 2),),
}
MODES = {
    "set": None,
    "add": np.add,
    "multiply": np.multiply,
    "min": np.minimum,
    "max": np.maximum,
}


def update_oracle(x, idx, v, mode):
    y = x.copy()
    if mode == "set":
        y[idx] = v
    else:
        MODES[mode].at(y, idx, v)
    return y


def update_value(x, idx, dtype, salt):
    shape = x[idx].shape
    v = sample(shape, dtype) if dtype != np.bool_ else (np.arange(int(np.prod(shape))) % 2 == 0)
    v = np.asarray(v).reshape(shape)
    return (v + salt).astype(dtype) if dtype != np.bool_ else v


@pytest.fixture(scope="module", params=DTYPES, ids=IDS)
def updates(request):
    dtype = request.param
    x = sample(SHAPE, dtype)
    values = {k: update_value(x, idx, dtype, 3) for k, idx in UPDATE_INDICES.items()}

    def fn(a, values):
        out = {}
        for k, idx in UPDATE_INDICES.items():
            for mode in MODES:
                out[f"{k}-{mode}"] = getattr(a.at[idx], mode)(values[k])
        out["scalar_value-set"] = a.at[1, 2].set(7)
        out["broadcast_value-add"] = a.at[:, 1].add(values["int"][0])
        out["leading_ones-set"] = a.at[0].set(values["int"][None, None])
        return out

    return dtype, x, values, run_on("cpu", fn, x, values)


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("name", list(UPDATE_INDICES))
def test_at_update(updates, name, mode):
    dtype, x, values, got = updates
    idx = UPDATE_INDICES[name]
    if name == "duplicates" and mode == "set":
        pytest.skip("NumPy keeps the last of duplicate writes; XLA's order is unspecified")
    want = update_oracle(x, idx, values[name], mode)
    assert_same(got[f"{name}-{mode}"], want, f"at[{name}].{mode}[{dtype}]", exact=dtype != BF16)


def test_at_update_value_forms(updates):
    dtype, x, values, got = updates
    assert_same(got["scalar_value-set"], update_oracle(x, (1, 2), 7, "set"), "scalar value")
    assert_same(
        got["broadcast_value-add"],
        update_oracle(x, (slice(None), 1), values["int"][0], "add"),
        "broadcast value",
        exact=dtype != BF16,
    )
    assert_same(got["leading_ones-set"], update_oracle(x, 0, values["int"], "set"), "leading 1s")


def test_at_get_is_getitem():
    x = sample(SHAPE, np.dtype(np.float32))
    got = run_on("cpu", lambda a: a.at[1, ::-1].get(), x)
    assert_same(got, x[1, ::-1], "at[].get")


@pytest.mark.parametrize("index_dtype", ["int32", "uint8", "int64"])
def test_traced_updates_drop_out_of_range(index_dtype):
    x = sample(SHAPE, np.dtype(np.float32))
    signed = np.dtype(index_dtype).kind == "i"
    arr = np.array([0, -1, 9, 2, -7] if signed else [0, 4, 9, 2, 200], index_dtype)
    s = np.array(-1 if signed else 2, index_dtype)
    v = np.arange(5, dtype=np.float32) + 100

    def fn(a, arr, s, v):
        return {
            "set": a.at[:, 1, arr].set(v),
            "add": a.at[arr, 2].add(v[:, None]),
            "scalar": a.at[s, :, s].multiply(2.0),
        }

    got = run_on("cpu", fn, x, arr, s, v)
    w = np.where(arr.astype(np.int64) < 0, arr.astype(np.int64) + 5, arr.astype(np.int64))
    keep = (w >= 0) & (w < 5)
    want_set = x.copy()
    want_set[:, 1, w[keep]] = v[keep]
    w3 = np.where(arr.astype(np.int64) < 0, arr.astype(np.int64) + 3, arr.astype(np.int64))
    keep3 = (w3 >= 0) & (w3 < 3)
    want_add = x.copy()
    np.add.at(want_add, (w3[keep3], 2), v[keep3][:, None])
    want_scalar = x.copy()
    si = int(s.astype(np.int64))
    want_scalar[si, :, si] *= 2
    assert_same(got["set"], want_set, f"set[{index_dtype}]")
    assert_same(got["add"], want_add, f"add[{index_dtype}]")
    assert_same(got["scalar"], want_scalar, f"scalar[{index_dtype}]")


def test_min_max_updates_propagate_nan():
    x = np.array([1.0, np.nan, 3.0, 4.0], np.float32)
    v = np.array([np.nan, 0.0, 5.0], np.float32)
    i = np.array([0, 1, 3])

    def fn(a, v, i):
        return {
            "min": a.at[i].min(v),
            "max": a.at[i].max(v),
            "min_box": a.at[1:].min(v),
            "max_box": a.at[1:].max(v),
        }

    got = run_on("cpu", fn, x, v, i)
    with np.errstate(invalid="ignore"):
        for name, idx in [("min", i), ("max", i), ("min_box", slice(1, None))]:
            want = update_oracle(x, idx, v, name.split("_")[0])
            assert_same(got[name], want, f"at[].{name} with NaN")
        assert_same(got["max_box"], update_oracle(x, slice(1, None), v, "max"), "max_box")


def test_traced_mask_updates():
    x = sample((3, 4), np.dtype(np.float32))
    m = x % 3 == 0

    def fn(a, m):
        b = a.copy()
        b[m] = 0
        c = a.copy()
        c[a[:, 0] > 3] = a[0]  # one row value for every selected row
        return {"set": b, "row_value": c, "add": a.at[m].add(1.5), "max": a.at[m[:, 0]].max(60.0)}

    got = run_on("cpu", fn, x, m)
    b = x.copy()
    b[m] = 0
    c = x.copy()
    c[x[:, 0] > 3] = x[0]
    assert_same(got["set"], b, "x[mask] = 0")
    assert_same(got["row_value"], c, "x[mask] = row")
    assert_same(got["add"], update_oracle(x, m, 1.5, "add"), "at[mask].add")
    assert_same(got["max"], update_oracle(x, m[:, 0], 60.0, "max"), "at[mask].max")


# --- in-place writes on traced arrays ----------------------------------------------------------


def stencil(xp, a, b):
    a = xp.copy(a)
    a[0] = 1
    a[:, 1:3] += a[:, :2]
    a[..., -1] *= 2
    a[[0, 2], 1] = -a[[0, 2], 2]
    a += 1
    a -= a[0]
    a[1:, ::-1] = b[:-1]
    a[2, 1:3] //= 2
    a[a.shape[0] - 1, 0] = 7.9  # float into an int array truncates, as in NumPy
    for i in range(1, a.shape[0]):
        a[i] += a[i - 1]
    return a


@pytest.mark.parametrize("dtype", [np.dtype(np.float32), np.dtype(np.int32)], ids=["f32", "i32"])
def test_in_place_writes_match_numpy(dtype):
    x, y = sample((3, 4), dtype), sample((3, 4), dtype)[::-1].copy()
    got = run_on("cpu", lambda a, b: stencil(anp, a, b), x, y)
    assert_same(got, stencil(np, x, y), f"stencil[{dtype}]")


def test_in_place_semantics():
    x = sample((2, 3), np.dtype(np.float32))

    def fn(a):
        alias = a
        alias += 1  # the same Python object: `a` sees it, as in NumPy
        view = a[0]
        view += 100  # views do not alias: `a` does not see this (NumPy's would)
        c = anp.copy(a)
        c[0] = 5
        d = a.copy()
        d *= 0
        e = a[0]
        e[1:] = -1
        f = a.astype("int32")
        f |= 8
        g = a.at[0].set(3)
        return a, view, c, d, e, f, g

    # The tracer's own semantics: autograph (on by default) refuses the writes through views
    # (tests/test_autograph_writes.py), which NumPy would make visible through `a`.
    with pytest.raises(TypeError, match=r"the array written is a view of another array"):
        aotkit.lower(fn, x)
    a, view, c, d, e, f, g = run_lowered("cpu", aotkit.lower(fn, x, autograph=False), x)
    assert_same(a, x + 1, "alias")
    assert_same(view, x[0] + 101, "view")
    assert_same(c, np.concatenate([np.full((1, 3), 5, np.float32), x[1:] + 1]), "copy")
    assert_same(d, np.zeros_like(x), "copy method")
    assert_same(e, np.array([x[0, 0] + 1, -1, -1], np.float32), "setitem on a view")
    assert_same(f, (x + 1).astype(np.int32) | 8, "in-place or")
    assert_same(g, np.concatenate([np.full((1, 3), 3, np.float32), x[1:] + 1]), "at[].set")


def writers(xp, a, v):
    b = xp.copy(a)
    xp.fill_diagonal(b, -1)
    c = xp.copy(a)
    xp.fill_diagonal(c, v[:2], wrap=True)
    d = xp.copy(a)
    xp.copyto(d, a[0] * 2, where=a > 5)
    e = xp.copy(a)
    e.fill(v[1])
    f = xp.zeros((3, 3, 3), a.dtype)
    xp.fill_diagonal(f, v)
    g = xp.zeros_like(a)
    xp.copyto(g, 7)
    return b, c, d, e, f, g


@pytest.mark.parametrize("dtype", [np.dtype(np.float32), np.dtype(np.int32)], ids=["f32", "i32"])
def test_numpy_writers_rebind(dtype):
    x, v = sample((5, 4), dtype), sample((3,), dtype) + 100
    got = run_on("cpu", lambda a, v: writers(anp, a, v), x, v)
    assert_same(got, writers(np, x, v), f"fill_diagonal/copyto/fill[{dtype}]")


def test_in_place_keeps_dtype():
    def fn(a, b):
        a += b  # f64 result cast back to f32 (same_kind), as NumPy does
        return a

    out = aotkit.lower(fn, aotkit.spec("f32[3]"), aotkit.spec("f64[3]")).out_specs
    assert out.dtype == np.float32


# --- random indices --------------------------------------------------------------------------


@st.composite
def index_programs(draw):
    ndim = draw(st.integers(1, 4))
    shape = tuple(draw(st.lists(st.integers(1, 5), min_size=ndim, max_size=ndim)))
    adv_shape = draw(st.sampled_from([(2,), (3,), (1, 2), (2, 1), (2, 2)]))
    kinds = [draw(st.sampled_from(["full", "slice", "int", "array"])) for _ in range(ndim)]
    items, arrays = [], []
    for n, kind in zip(shape, kinds, strict=True):
        if kind == "slice":
            bound = st.integers(-n - 2, n + 2) | st.none()
            step = draw(st.sampled_from([None, 1, 2, -1, -2, 3]))
            items.append(slice(draw(bound), draw(bound), step))
        elif kind == "int":
            items.append(draw(st.integers(-n, n - 1)))
        elif kind == "array":
            sub = adv_shape[draw(st.integers(0, len(adv_shape))) :]
            values = draw(st.lists(st.integers(-n, n - 1), min_size=1, max_size=1))
            arr = (np.arange(int(np.prod(sub))) * 7 + values[0]) % (2 * n) - n
            arrays.append(arr.reshape(sub).astype(np.int32))
            items.append(("array", len(arrays) - 1))
        else:
            items.append(slice(None))
    while items and items[-1] == slice(None) and draw(st.booleans()):
        items.pop()
    fulls = [i for i, it in enumerate(items) if it == slice(None)]
    if fulls and draw(st.booleans()):
        items[fulls[0]] = Ellipsis
    for _ in range(draw(st.integers(0, 2))):
        items.insert(draw(st.integers(0, len(items))), None)
    traced = draw(st.booleans())
    return shape, tuple(items), arrays, traced


def resolve(items, arrays):
    return tuple(arrays[it[1]] if isinstance(it, tuple) else it for it in items)


@settings(max_examples=30, deadline=None)
@given(program=index_programs(), dtype=st.sampled_from(DTYPES))
def test_random_indices(program, dtype):
    shape, items, arrays, traced = program
    x = sample(shape, dtype)
    idx = resolve(items, arrays)
    v = update_value(x, idx, dtype, 1)
    flat = np.arange(x.size).reshape(shape)[idx]
    unique = np.unique(flat).size == flat.size

    def fn(a, arrs, v):
        i = resolve(items, arrs if traced else arrays)
        out = {"get": a[i], "add": a.at[i].add(v)}
        if unique:
            b = a.copy()
            b[i] = v
            out["set"] = b
        return out

    got = run_on("cpu", fn, x, arrays, v)
    what = f"x{shape}[{items}] traced={traced} [{dtype}]"
    assert_same(got["get"], x[idx], f"get {what}")
    assert_same(got["add"], update_oracle(x, idx, v, "add"), f"add {what}", exact=dtype != BF16)
    if unique:
        assert_same(got["set"], update_oracle(x, idx, v, "set"), f"set {what}")


# --- errors ----------------------------------------------------------------------------------


def body_scope_update(a):
    s = push_scope("body")
    try:
        a[0] = 1.0
    finally:
        pop_scope(s)


def copy_of_a_finished_trace(a):
    kept = []
    aotkit.lower(lambda b: kept.append(b), aotkit.spec("f32[2]"))
    return anp.copy(kept[0])


def no_matmul_in_place(a):
    a @= a


ERRORS = [
    ("slice_traced", lambda a, i: a[i:], IndexError, r"slice start is traced"),
    (
        "slice_float",
        lambda a, i: a[1.5:],
        IndexError,
        r"slice indices must be integers or None, got start=1.5",
    ),
    ("slice_zero_step", lambda a, i: a[::0], ValueError, r"slice step cannot be zero"),
    (
        "bool_scalar",
        lambda a, i: a[True],
        IndexError,
        r"a boolean scalar index \(True\) is not supported",
    ),
    ("traced_float", lambda a, i: a[a], IndexError, r"got a traced float32 array \(cast it with"),
    ("float", lambda a, i: a[1.0], IndexError, r"only integers, slices .* got float 1.0"),
    ("string", lambda a, i: a["x"], IndexError, r"valid indices; got str"),
    ("float_array", lambda a, i: a[np.array([1.0])], IndexError, r"valid indices; got ndarray"),
    ("ragged", lambda a, i: a[[[0], [0, 1]]], IndexError, r"valid indices; got list"),
    ("two_ellipses", lambda a, i: a[..., ...], IndexError, r"only have a single ellipsis"),
    (
        "too_many",
        lambda a, i: a[0, 0, 0],
        IndexError,
        r"too many indices for array: array is 2-dimensional, but 3 were indexed",
    ),
    (
        "mask_shape",
        lambda a, i: a[np.array([True, False])],
        IndexError,
        r"boolean index did not match indexed array along axis 0; size of axis is 3 but size of "
        r"corresponding boolean axis is 2",
    ),
    (
        "int_bounds",
        lambda a, i: a[3],
        IndexError,
        r"index 3 is out of bounds for axis 0 with size 3",
    ),
    (
        "negative_bounds",
        lambda a, i: a[:, -5],
        IndexError,
        r"index -5 is out of bounds for axis 1 with size 4",
    ),
    (
        "array_bounds",
        lambda a, i: a[[0, 7]],
        IndexError,
        r"index 7 is out of bounds for axis 0 with size 3",
    ),
    (
        "traced_empty_axis",
        lambda a, i: a[:0][i],
        IndexError,
        r"cannot index axis 0 of size 0 with a traced index",
    ),
    (
        "traced_mask",
        lambda a, i: a[a > 0],
        IndexError,
        r"traced boolean mask .* use aotkit.numpy.where",
    ),
    (
        "traced_mask_of_another_mask",
        lambda a, i: a.__setitem__(a > 0, a[a < 0] + 1),
        IndexError,
        r"traced boolean mask",
    ),
    (
        "broadcast_arrays",
        lambda a, i: a[[0, 1], [0, 1, 2]],
        IndexError,
        r"shape mismatch: indexing arrays could not be broadcast together with shapes "
        r"\(2,\) \(3,\)",
    ),
    (
        "value_shape",
        lambda a, i: a.at[0].set(a[:, :2]),
        ValueError,
        r"could not broadcast input array from shape \(3, 2\) into shape \(4,\)",
    ),
    ("value_overflow", lambda a, i: a.astype("uint8").at[0].set(300), OverflowError, r"300"),
    (
        "mask_not_whole",
        lambda a, i: a.at[1, a[0] > 0].set(0),
        IndexError,
        r"a traced boolean mask can only be the whole index",
    ),
    (
        "mask_value",
        lambda a, i: a.at[a > 0].set(a[:2]),
        ValueError,
        r"must broadcast to \(\) .* got shape \(2, 4\)",
    ),
    (
        "scope",
        lambda a, i: body_scope_update(a),
        TypeError,
        r"cannot update Tracer<f32\[3,4\]> in place: it was traced outside the body",
    ),
    (
        "in_place_shape",
        lambda a, i: a[0].__iadd__(a),
        ValueError,
        r"non-broadcastable output operand with shape \(4,\) doesn't match the broadcast "
        r"shape \(3, 4\)",
    ),
    (
        "in_place_dtype",
        lambda a, i: i.__iadd__(1.5),
        TypeError,
        r"cannot cast ufunc 'add' output from float64 to int32 with casting rule 'same_kind'",
    ),
    (
        "copy_dead",
        lambda a, i: copy_of_a_finished_trace(a),
        TypeError,
        r"copy .*a tracer from a finished trace",
    ),
    (
        "copyto_target",
        lambda a, i: anp.copyto(np.zeros(3), a),
        TypeError,
        r"copyto .*must be a traced array, got ndarray",
    ),
    (
        "copyto_cast",
        lambda a, i: anp.copyto(i, 1.5),
        TypeError,
        r"cannot cast array data from float64 to int32 according to the rule 'same_kind'",
    ),
    ("copyto_casting", lambda a, i: anp.copyto(a, a, casting="x"), ValueError, r"casting must be"),
    ("copyto_kwargs", lambda a, i: anp.copyto(a, a, out=a), TypeError, r"unexpected keyword"),
    ("copyto_shape", lambda a, i: anp.copyto(a[0], a), ValueError, r"could not broadcast input"),
    ("fill_diagonal_1d", lambda a, i: anp.fill_diagonal(a[0], 1), ValueError, r"at least 2-d"),
    (
        "fill_diagonal_shape",
        lambda a, i: anp.fill_diagonal(a[None], 1),
        ValueError,
        r"all dimensions of input must be of equal length, got shape \(1, 3, 4\)",
    ),
    (
        "fill_diagonal_empty",
        lambda a, i: anp.fill_diagonal(a, a[:0, 0]),
        ValueError,
        r"val is empty",
    ),
    ("fill_overflow", lambda a, i: a.astype("uint8").fill(300), OverflowError, r"300 out of"),
    (
        "fill_shape",
        lambda a, i: a.fill(a[0]),
        ValueError,
        r"fill .*must be a scalar, got shape \(4,\)",
    ),
    ("ix_2d", lambda a, i: anp.ix_(np.zeros((2, 2), int)), ValueError, r"must be 1 dimensional"),
    ("ix_mask", lambda a, i: anp.ix_(a[0] > 0), IndexError, r"traced boolean mask"),
    ("take_out", lambda a, i: anp.take(a, 0, out=a), NotImplementedError, r"out= is not supported"),
    ("take_mode", lambda a, i: anp.take(a, 0, mode="fill"), ValueError, r"clipmode must be one of"),
    (
        "take_slice",
        lambda a, i: anp.take(a, slice(1)),
        IndexError,
        r"indices must be an integer array",
    ),
    (
        "take_empty",
        lambda a, i: anp.take(a[:0], i, axis=0, mode="clip"),
        IndexError,
        r"cannot do a non-empty take from an empty axis",
    ),
    (
        "take_bounds",
        lambda a, i: anp.take(a, [12]),
        IndexError,
        r"index 12 is out of bounds for axis 0 with size 12",
    ),
    (
        "take_along_kind",
        lambda a, i: anp.take_along_axis(a, a > 0, 0),
        IndexError,
        r"`indices` must be an integer array",
    ),
    (
        "take_along_none",
        lambda a, i: anp.take_along_axis(a, np.zeros((1, 1), int), None),
        ValueError,
        r"when axis=None, `indices` must have a single dimension, got 2",
    ),
    (
        "take_along_ndim",
        lambda a, i: anp.take_along_axis(a, np.zeros(2, int), 0),
        ValueError,
        r"must have the same number of dimensions, got 1 and 2",
    ),
]


@pytest.mark.parametrize(
    "fn, exc, match", [pytest.param(f, e, m, id=name) for name, f, e, m in ERRORS]
)
def test_errors(fn, exc, match):
    with pytest.raises(exc, match=match) as info:
        aotkit.lower(fn, aotkit.spec("f32[3,4]"), aotkit.spec("i32[]"))
    assert "test_indexing.py:" in str(info.value)


def test_in_place_without_the_function(monkeypatch):
    monkeypatch.delitem(NUMPY_FUNCTIONS, "matmul", raising=False)
    with pytest.raises(NotImplementedError, match=r"aotkit.numpy has no 'matmul' yet"):
        aotkit.lower(no_matmul_in_place, aotkit.spec("f32[3,3]"))
