"""Linear algebra against NumPy: matmul/dot/inner/tensordot/einsum/norm values and dtypes.

Products of one dtype are checked together in one module (one compile per dtype); einsum
cases are parametrized by their subscripts so a failure names the expression.
"""

from __future__ import annotations

import functools
import warnings

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import aotkit
import aotkit.numpy as anp
from tests.helpers import PEERS, assert_matches, run_lowered, run_on

BF16 = np.dtype(ml_dtypes.bfloat16)
F16 = np.dtype(np.float16)
DTYPES = [np.dtype(d) for d in ("float32", "float64", "int32", "uint8", "bool", "complex64")] + [
    F16,
    BF16,
]
RNG = np.random.default_rng(1)

# Products accumulate more rounding in low precision than one elementwise op.
_check = functools.partial(assert_matches, tolerances={BF16: (2e-2, 5e-2), F16: (5e-3, 2e-2)})


def _values(dtype: np.dtype, shape) -> np.ndarray:
    if dtype == np.bool_:
        return RNG.random(shape) < 0.5
    if dtype.kind in "iu":
        return RNG.integers(0 if dtype.kind == "u" else -5, 6, shape).astype(dtype)
    if dtype.kind == "c":
        return (RNG.uniform(-2, 2, shape) + 1j * RNG.uniform(-2, 2, shape)).astype(dtype)
    return RNG.uniform(-2, 2, shape).astype(dtype)


def _oracle(fn, *args, **kwargs):
    """NumPy's answer; float16/bfloat16 operands are multiplied in float32, then rounded."""
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        want = np.asarray(fn(*args, **kwargs))
        low = [a for a in args if getattr(a, "dtype", None) in (F16, BF16)]
        if not low:
            return want
        wide = fn(*(a.astype(np.float32) if a.dtype in (F16, BF16) else a for a in args), **kwargs)
    if want.dtype == np.float32 and any(a.dtype == BF16 for a in low):
        # NumPy has no bfloat16 loop for some products (vecdot) and answers float32.
        return np.asarray(wide).astype(BF16)
    return np.asarray(wide).astype(want.dtype)


MATMUL_SHAPES = [
    ((3, 4), (4, 2)),
    ((4,), (4, 2)),
    ((3, 4), (4,)),
    ((4,), (4,)),
    ((2, 3, 4), (4, 5)),
    ((4,), (2, 4, 5)),
    ((3, 4), (2, 4, 5)),
    ((2, 1, 3, 4), (5, 4, 2)),
    ((2, 3, 4), (4,)),
    ((3, 0), (0, 2)),
]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_matmul_matches_numpy(dtype):
    pairs = [(_values(dtype, a), _values(dtype, b)) for a, b in MATMUL_SHAPES]
    got = run_on("cpu", lambda ps: [anp.matmul(a, b) for a, b in ps], pairs)
    for (a, b), g in zip(pairs, got, strict=True):
        _check(g, _oracle(np.matmul, a, b), f"matmul {a.shape} @ {b.shape} ({dtype})")


PRODUCTS = [
    ("dot 2d", lambda m, a, b: m.dot(a, b.T)),
    ("dot nd-1d", lambda m, a, b: m.dot(a, b[0])),
    ("dot 1d-2d", lambda m, a, b: m.dot(a[0], b.T)),
    ("dot scalar", lambda m, a, b: m.dot(a, b[0, 0])),
    ("dot nd-md", lambda m, a, b: m.dot(a.reshape(2, 1, 4), b.T.reshape(2, 4, 1))),
    ("vdot", lambda m, a, b: m.vdot(a, b)),
    ("inner", lambda m, a, b: m.inner(a, b)),
    ("inner 1d", lambda m, a, b: m.inner(a[0], b[1])),
    ("tensordot 2", lambda m, a, b: m.tensordot(a, b)),
    ("tensordot 1", lambda m, a, b: m.tensordot(a, b.T, axes=1)),
    ("tensordot 0", lambda m, a, b: m.tensordot(a[0], b[1], axes=0)),
    ("tensordot pairs", lambda m, a, b: m.tensordot(a, b, axes=([1, 0], [1, 0]))),
    ("tensordot ints", lambda m, a, b: m.tensordot(a, b, axes=(1, 1))),
    ("vecdot", lambda m, a, b: m.vecdot(a, b)),
    ("vecdot axis", lambda m, a, b: m.vecdot(a, b, axis=0)),
    ("vecdot dtype", lambda m, a, b: m.vecdot(a, b, dtype=np.complex128)),
]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_products_match_numpy(dtype):
    a, b = _values(dtype, (2, 4)), _values(dtype, (2, 4))
    got = run_on("cpu", lambda x, y: [fn(anp, x, y) for _, fn in PRODUCTS], a, b)
    for (label, fn), g in zip(PRODUCTS, got, strict=True):
        _check(g, _oracle(lambda x, y, f=fn: f(np, x, y), a, b), f"{label} ({dtype})")


def test_mixed_dtypes_promote_like_numpy():
    i8, f32 = _values(np.dtype(np.int8), (3, 4)), _values(np.dtype(np.float32), (4, 2))
    u8, i16 = _values(np.dtype(np.uint8), (3, 4)), _values(np.dtype(np.int16), (4,))
    got = run_on(
        "cpu",
        lambda a, b, c, d: (a @ b, anp.dot(c, d), anp.einsum("ij,j", c, d), b.T @ a.T),
        i8,
        f32,
        u8,
        i16,
    )
    _check(got[0], i8 @ f32)
    _check(got[1], np.dot(u8, i16))
    _check(got[2], np.einsum("ij,j", u8, i16))
    _check(got[3], f32.T @ i8.T)


def test_matmul_operator_and_numpy_operands():
    w = _values(np.dtype(np.float32), (4, 3))
    x = _values(np.dtype(np.float32), (2, 4))
    got = run_on("cpu", lambda a: (a @ w, w.T @ a.T, a.dot(w)), x)
    _check(got[0], x @ w)
    _check(got[1], w.T @ x.T)
    _check(got[2], x.dot(w))


def test_int_matmul_wraps_like_numpy():
    a = np.full((2, 64), 100, np.int8)
    got = run_on("cpu", lambda x: x @ x.T, a)
    _check(got, a @ a.T)


@pytest.mark.parametrize("backend", PEERS)
def test_peer_backends_agree(backend):
    # dot_general with batch dims and precision config, and einsum's diagonal, by the spec.
    a, b = _values(np.dtype(np.float32), (2, 3, 4)), _values(np.dtype(np.float32), (2, 4, 3))
    fns = {
        "matmul": lambda m, x, y: m.matmul(x, y),
        "einsum diag": lambda m, x, y: m.einsum("bij,bji->b", x, y),
        "einsum trace": lambda m, x, y: m.einsum("bii->b", x[:, :, :3]),
        "norm": lambda m, x, y: m.linalg.norm(x[0], ord=1),
        "bool matmul": lambda m, x, y: m.matmul(x > 0, y > 0),
    }
    got = run_on(backend, lambda x, y: {k: f(anp, x, y) for k, f in fns.items()}, a, b)
    for k, f in fns.items():
        _check(got[k], f(np, a, b), k)


def test_products_lower_to_one_dot_general_each():
    lowered = aotkit.lower(
        lambda a, b: (a @ b, anp.einsum("bij,bjk->bik", a, a.transpose(0, 2, 1))),
        aotkit.spec("f32[2,3,4]"),
        aotkit.spec("f32[4,5]"),
    )
    text = lowered.as_text()
    assert text.count("stablehlo.dot_general") == 2
    assert "precision = [HIGHEST, HIGHEST]" in text


# --- einsum --------------------------------------------------------------------------------------

EINSUM_CASES = [
    ("ij,jk->ik", [(3, 4), (4, 5)]),
    ("ij,jk", [(3, 4), (4, 5)]),
    ("ij,kj->ik", [(3, 4), (5, 4)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("i,i->", [(4,), (4,)]),
    ("i,i", [(4,), (4,)]),
    ("i,j->ij", [(3,), (4,)]),
    ("i,j", [(3,), (4,)]),
    ("ij->ji", [(3, 4)]),
    ("ij", [(3, 4)]),
    ("ji", [(3, 4)]),
    ("ij->", [(3, 4)]),
    ("ij->j", [(3, 4)]),
    ("ii", [(4, 4)]),
    ("ii->i", [(4, 4)]),
    ("iij->ji", [(3, 3, 2)]),
    ("iji->j", [(3, 2, 3)]),
    ("ijk,jkl->il", [(2, 3, 4), (3, 4, 5)]),
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]),
    ("ij,jk,kl", [(2, 3), (3, 4), (4, 2)]),
    ("ab,cd,bd->ac", [(2, 3), (4, 5), (3, 5)]),
    ("i,i,i->i", [(4,), (4,), (4,)]),
    ("bi,bj->b", [(2, 3), (2, 4)]),
    ("...ij,...jk->...ik", [(2, 3, 4), (2, 4, 5)]),
    ("...ij,jk", [(2, 2, 3, 4), (4, 5)]),
    ("...j,j", [(2, 3, 4), (4,)]),
    ("i...->...", [(3, 2, 2)]),
    ("...ii->...i", [(2, 3, 3)]),
    ("ij...,jk...->ik...", [(3, 4, 2), (4, 5, 2)]),
    ("...i,...i->...", [(2, 1, 4), (3, 4)]),
    ("bhqd,bhkd->bhqk", [(2, 3, 4, 5), (2, 3, 6, 5)]),
    ("ij,ij->ij", [(3, 4), (3, 4)]),
    ("ij,j->ij", [(3, 4), (1,)]),
    (" ij , jk -> ki ", [(3, 4), (4, 5)]),
    ("Ab,bC->CA", [(3, 4), (4, 2)]),
    ("i,->i", [(3,), ()]),
]


@pytest.mark.parametrize("case", EINSUM_CASES, ids=[c[0].strip() for c in EINSUM_CASES])
def test_einsum_matches_numpy(case):
    spec, shapes = case
    xs = [_values(np.dtype(np.float32), s) for s in shapes]
    got = run_on("cpu", lambda ops: anp.einsum(spec, *ops, optimize=True), xs)
    _check(got, np.einsum(spec, *xs), spec)


@pytest.mark.parametrize("dtype", [np.dtype(d) for d in ("int32", "bool", "complex64", "uint8")])
def test_einsum_dtypes(dtype):
    a, b = _values(dtype, (3, 4)), _values(dtype, (4, 4))
    specs = ["ij,jk->ik", "ij->", "ii->i", "ij,kj->ijk", "ij,jj->i"]
    got = run_on("cpu", lambda x, y: [anp.einsum(s, x, y) if "," in s else anp.einsum(s, y)
                                      for s in specs], a, b)  # fmt: skip
    for s, g in zip(specs, got, strict=True):
        _check(g, np.einsum(s, a, b) if "," in s else np.einsum(s, b), f"{s} ({dtype})")


def test_einsum_interleaved_sublists_and_dtype():
    a = _values(np.dtype(np.int32), (3, 4))
    b = _values(np.dtype(np.int32), (4, 5))
    got = run_on(
        "cpu",
        lambda x, y: (
            anp.einsum(x, [0, 1], y, [1, 2], [2, 0]),
            anp.einsum(x, [Ellipsis, 1], y, [1, 2]),
            anp.einsum("ij,jk", x, y, dtype=np.float32, casting="unsafe"),
        ),
        a,
        b,
    )
    _check(got[0], np.einsum(a, [0, 1], b, [1, 2], [2, 0]))
    _check(got[1], np.einsum(a, [Ellipsis, 1], b, [1, 2]))
    _check(got[2], np.einsum("ij,jk", a, b, dtype=np.float32, casting="unsafe"))


@st.composite
def _einsum_case(draw):
    letters = "abcde"
    sizes = {c: draw(st.integers(1, 3)) for c in letters}
    n_ops = draw(st.integers(1, 3))
    terms = [
        "".join(draw(st.lists(st.sampled_from(letters), min_size=0, max_size=3)))
        for _ in range(n_ops)
    ]
    used = sorted(set("".join(terms)))
    out = "".join(draw(st.permutations(used))[: draw(st.integers(0, len(used)))])
    spec = ",".join(terms) + "->" + out
    shapes = [tuple(sizes[c] for c in t) for t in terms]
    return spec, shapes


@settings(max_examples=30, deadline=None)
@given(_einsum_case())
def test_einsum_random_subscripts(case):
    spec, shapes = case
    xs = [_values(np.dtype(np.float64), s) for s in shapes]
    got = run_on("cpu", lambda ops: anp.einsum(spec, *ops), xs)
    _check(got, np.einsum(spec, *xs), spec)


@st.composite
def _matmul_case(draw):
    batch = tuple(draw(st.lists(st.integers(1, 3), max_size=2)))
    n, k, m = draw(st.integers(1, 3)), draw(st.integers(1, 3)), draw(st.integers(1, 3))

    def side(core):
        b = tuple(d if draw(st.booleans()) else 1 for d in batch)
        b = b[draw(st.integers(0, len(b))) :]
        return b + core

    a = (k,) if draw(st.integers(0, 4)) == 0 else side((n, k))
    b = (k,) if draw(st.integers(0, 4)) == 0 else side((k, m))
    return a, b


@settings(max_examples=25, deadline=None)
@given(_matmul_case(), st.sampled_from([np.dtype("float32"), np.dtype("int32")]))
def test_matmul_random_broadcasting(shapes, dtype):
    a, b = _values(dtype, shapes[0]), _values(dtype, shapes[1])
    _check(run_on("cpu", anp.matmul, a, b), np.matmul(a, b), f"{a.shape} @ {b.shape}")


@st.composite
def _product_case(draw):
    name = draw(st.sampled_from(["dot", "inner", "tensordot", "vecdot", "vdot", "norm"]))
    dims = draw(st.lists(st.integers(1, 3), min_size=1, max_size=4))
    k = draw(st.integers(0, min(2, len(dims))))
    a_shape = tuple(dims)
    if name == "dot":
        b_shape = (a_shape[-1],) if draw(st.booleans()) else (2, a_shape[-1], 3)
        return name, a_shape, b_shape, {}
    if name in ("inner", "vecdot"):
        return name, a_shape, a_shape[-1:] if draw(st.booleans()) else a_shape, {}
    if name == "tensordot":
        return name, a_shape, a_shape[len(a_shape) - k :] + (2,), {"axes": k}
    if name == "vdot":
        return name, a_shape, a_shape, {}
    ord_ = draw(st.sampled_from([None, 1, 2, np.inf, -np.inf, 0, 3]))
    axis = draw(st.integers(-len(a_shape), len(a_shape) - 1))
    return name, a_shape, (), {"ord": ord_, "axis": axis, "keepdims": draw(st.booleans())}


@settings(max_examples=30, deadline=None)
@given(_product_case(), st.sampled_from([np.dtype("float64"), np.dtype("int32")]))
def test_products_random_shapes(case, dtype):
    name, a_shape, b_shape, kw = case
    a = _values(dtype, a_shape)
    if name == "norm":
        got = run_on("cpu", lambda x: anp.linalg.norm(x, **kw), a)
        _check(got, np.linalg.norm(a, **kw), f"norm {a_shape} {kw}")
        return
    b = _values(dtype, b_shape)
    got = run_on("cpu", lambda x, y: getattr(anp, name)(x, y, **kw), a, b)
    _check(got, getattr(np, name)(a, b, **kw), f"{name} {a_shape} {b_shape} {kw}")


# --- norm ----------------------------------------------------------------------------------------

NORM_CASES = [
    {},
    {"keepdims": True},
    {"axis": 1},
    {"axis": 0, "ord": 1},
    {"axis": -1, "ord": np.inf},
    {"axis": 1, "ord": -np.inf},
    {"axis": 1, "ord": 0},
    {"axis": 1, "ord": 3},
    {"axis": 0, "ord": 0.5},
    {"axis": 1, "ord": -1},
    {"axis": 1, "keepdims": True, "ord": 2},
    {"ord": "fro"},
    {"ord": 1},
    {"ord": -1},
    {"ord": np.inf},
    {"ord": -np.inf},
    {"axis": (1, 0), "ord": 1},
    {"axis": (1, 0), "ord": np.inf, "keepdims": True},
    {"axis": (0, 1), "ord": "fro", "keepdims": True},
]
NORM_DTYPES = [np.dtype(d) for d in ("float32", "float64", "int32", "complex64", "float16")]


@pytest.mark.parametrize("dtype", NORM_DTYPES, ids=str)
def test_norm_matches_numpy(dtype):
    x = _values(dtype, (3, 4))
    got = run_on("cpu", lambda a: [anp.linalg.norm(a, **kw) for kw in NORM_CASES], x)
    for kw, g in zip(NORM_CASES, got, strict=True):
        _check(g, _oracle(np.linalg.norm, x, **kw), f"norm({dtype}, {kw})")


def test_norm_of_vectors_and_batches():
    v = _values(np.dtype(np.float32), (5,))
    t = _values(np.dtype(np.float32), (2, 3, 4))
    cases = [
        (v, {}),
        (v, {"ord": 1}),
        (v, {"ord": np.inf}),
        (t, {}),
        (t, {"axis": -1}),
        (t, {"axis": (1, 2)}),
        (t, {"axis": (2, 0), "ord": 1}),
        (t, {"axis": (0, 1), "ord": -np.inf, "keepdims": True}),
    ]
    got = run_on("cpu", lambda a, b: [anp.linalg.norm(a if x is v else b, **kw)
                                      for x, kw in cases], v, t)  # fmt: skip
    for (x, kw), g in zip(cases, got, strict=True):
        _check(g, np.linalg.norm(x, **kw), f"norm({x.shape}, {kw})")


LINALG_NAMESPACE = {
    "vector_norm": lambda m, x, v, i: m.linalg.vector_norm(x),
    "vector_norm axes ord=1": lambda m, x, v, i: m.linalg.vector_norm(
        x, axis=(0, 2), ord=1, keepdims=True
    ),
    "vector_norm inf": lambda m, x, v, i: m.linalg.vector_norm(x, axis=-1, ord=np.inf),
    "vector_norm int ord=3": lambda m, x, v, i: m.linalg.vector_norm(i, ord=3),
    "matrix_norm": lambda m, x, v, i: m.linalg.matrix_norm(x),
    "matrix_norm ord=1": lambda m, x, v, i: m.linalg.matrix_norm(x, ord=1, keepdims=True),
    "matrix_norm int -inf": lambda m, x, v, i: m.linalg.matrix_norm(i, ord=-np.inf),
    "matmul": lambda m, x, v, i: m.linalg.matmul(x, v),
    "vecdot": lambda m, x, v, i: m.linalg.vecdot(x, v),
    "tensordot": lambda m, x, v, i: m.linalg.tensordot(x, x, axes=3),
    "outer": lambda m, x, v, i: m.linalg.outer(v, i[0]),
    "matrix_transpose": lambda m, x, v, i: m.linalg.matrix_transpose(x),
    "diagonal": lambda m, x, v, i: m.linalg.diagonal(x, offset=1),
    "trace": lambda m, x, v, i: m.linalg.trace(i),
    "trace offset dtype": lambda m, x, v, i: m.linalg.trace(x, offset=-1, dtype=np.float64),
}


def test_linalg_namespace_matches_numpy():
    x = _values(np.dtype(np.float32), (2, 3, 4))
    v = _values(np.dtype(np.float32), (4,))
    i = _values(np.dtype(np.int32), (3, 3))
    got = run_on("cpu", lambda *a: {k: f(anp, *a) for k, f in LINALG_NAMESPACE.items()}, x, v, i)
    for k, f in LINALG_NAMESPACE.items():
        _check(got[k], f(np, x, v, i), f"linalg.{k}")


# --- errors --------------------------------------------------------------------------------------

ERROR_CASES = [
    ("matmul scalar", ValueError, r"matmul \(at .*\): input operand 1 is a scalar \(shape \(\)\)",
     lambda x: anp.matmul(x, anp.sum(x))),
    ("matmul mismatch", ValueError,
     r"shapes \(3, 4\) and \(3, 4\): core dimension 4 \(last of operand 0\) does not match 3",
     lambda x: x @ x),
    ("matmul batch", ValueError, r"matmul \(at .*\): shapes \(2,\) and \(3,\) cannot broadcast",
     lambda x: anp.ones((2, 3, 4)) @ anp.ones((3, 4, 2))),
    ("matmul vector mismatch", ValueError, r"shapes \(4,\) and \(3, 4\): core dimension 4",
     lambda x: x[0] @ x),
    ("einsum no subscripts", TypeError, r"einsum \(at .*\): expected subscripts as a string or "
     r"sublists of ints, got int", lambda x: anp.einsum(5)),
    ("dot not aligned", ValueError, r"dot \(at .*\): shapes \(3, 4\) and \(3, 4\) not aligned: "
     r"4 \(dim 1\) != 3 \(dim 0\)", lambda x: anp.dot(x, x)),
    ("inner not aligned", ValueError, r"inner \(at .*\): shapes \(3, 4\) and \(4, 3\) not aligned",
     lambda x: anp.inner(x, x.T)),
    ("vdot lengths", ValueError, r"vectors have different lengths 12 \(\(3, 4\)\) and 4",
     lambda x: anp.vdot(x, x[0])),
    ("tensordot int", ValueError, r"axes=3 must be between 0 and the smaller rank \(2, 2\)",
     lambda x: anp.tensordot(x, x, axes=3)),
    ("tensordot malformed", ValueError, r"axes=\[1, 2, 3\] must be an int or a pair",
     lambda x: anp.tensordot(x, x, axes=[1, 2, 3])),
    ("tensordot lengths", ValueError, r"axes \(0, 1\) and \(0,\) have different lengths",
     lambda x: anp.tensordot(x, x, axes=([0, 1], [0]))),
    ("tensordot sizes", ValueError, r"shape mismatch for sum: axis 1 of \(3, 4\) has 4, axis 0",
     lambda x: anp.tensordot(x, x, axes=([1], [0]))),
    ("vecdot scalar", ValueError, r"vecdot \(at .*\): inputs must have at least one dimension",
     lambda x: anp.vecdot(anp.sum(x), anp.sum(x))),
    ("einsum no args", ValueError, r"einsum \(at .*\): no subscripts given",
     lambda x: anp.einsum()),
    ("einsum sublist", ValueError, r"subscript 'a' must be an int in \[0, 52\) or \.\.\.",
     lambda x: anp.einsum(x, ["a", 1])),
    ("einsum ellipsis", ValueError, r"term 'i\.\.j' has a malformed ellipsis",
     lambda x: anp.einsum("i..j", x)),
    ("einsum letter", ValueError, r"invalid subscript '1' in term 'i1'; use letters",
     lambda x: anp.einsum("i1", x)),
    ("einsum rank", ValueError, r"term 'ijk' has 3 subscripts but operand 0 has 2 dimensions",
     lambda x: anp.einsum("ijk", x)),
    ("einsum ellipsis rank", ValueError,
     r"term 'ijk\.\.\.' has more subscripts than operand 0 has dimensions \(2\)",
     lambda x: anp.einsum("ijk...", x)),
    ("einsum operand count", ValueError, r"2 terms in 'ij,jk' but 1 operands",
     lambda x: anp.einsum("ij,jk", x)),
    ("einsum output ellipsis", ValueError, r"output 'i' has no '\.\.\.' but the inputs have "
     r"broadcast dimensions", lambda x: anp.einsum("...j->i", x)),
    ("einsum output letter", ValueError, r"output subscript 'k' does not appear in the inputs",
     lambda x: anp.einsum("ij->k", x)),
    ("einsum output repeat", ValueError, r"output 'ii' repeats a subscript",
     lambda x: anp.einsum("ij->ii", x)),
    ("einsum sizes", ValueError, r"size 3 of subscript 'i' in operand 1 does not match size 4",
     lambda x: anp.einsum("ji,ij", x, x)),
    ("einsum diagonal sizes", ValueError, r"repeated subscript 'i' has sizes 1 and 3 in one",
     lambda x: anp.einsum("ii", anp.ones((1, 3)))),
    ("norm vector ord", ValueError, r"linalg.norm \(at .*\): invalid norm order 'fro' for vectors",
     lambda x: anp.linalg.norm(x, ord="fro", axis=1)),
    ("norm matrix ord", ValueError, r"invalid norm order 3 for matrices",
     lambda x: anp.linalg.norm(x, ord=3)),
    ("norm 3-d", ValueError, r"improper number of dimensions to norm: 3 \(with ord=1",
     lambda x: anp.linalg.norm(anp.ones((2, 2, 2)), ord=1)),
    ("norm duplicate axes", ValueError, r"duplicate axes given: \(1, -1\)",
     lambda x: anp.linalg.norm(x, axis=(1, -1))),
    ("norm three axes", ValueError, r"improper number of dimensions to norm: axis=\(0, 1, 2\)",
     lambda x: anp.linalg.norm(anp.ones((2, 2, 2)), axis=(0, 1, 2))),
    ("matmul out=", NotImplementedError, r"out= is not supported",
     lambda x: anp.matmul(x, x.T, out=x)),
    ("linalg attribute", AttributeError,
     r"aotkit.numpy.linalg has no 'eig'; supported: cholesky, cond, det, diagonal, .*norm",
     lambda x: anp.linalg.eig(x)),
    ("vector_norm ord", ValueError, r"linalg.vector_norm \(at .*\): invalid norm order 'fro'",
     lambda x: anp.linalg.vector_norm(x, ord="fro")),
    ("matrix_norm of a vector", ValueError,
     r"linalg.matrix_norm \(at .*\): the input has 1 dimension\(s\); it must be a \(stack",
     lambda x: anp.linalg.matrix_norm(x[0])),
    ("linalg.trace of a vector", ValueError, r"linalg.trace \(at .*\): the input has 1 dim",
     lambda x: anp.linalg.trace(x[0])),
    ("linalg.diagonal of a vector", ValueError, r"linalg.diagonal \(at .*\): the input has 1",
     lambda x: anp.linalg.diagonal(x[0])),
    ("linalg.outer of matrices", ValueError,
     r"linalg.outer \(at .*\): inputs must be one-dimensional, got shapes \(3, 4\) and \(4,\)",
     lambda x: anp.linalg.outer(x, x[0])),
]  # fmt: skip


@pytest.mark.parametrize("case", ERROR_CASES, ids=[c[0] for c in ERROR_CASES])
def test_errors(case):
    _, exc, pattern, fn = case
    with pytest.raises(exc, match=pattern):
        aotkit.lower(fn, aotkit.spec("f32[3,4]"))


# --- products of transposes (issue 28) ------------------------------------------------------


@aotkit.autograph.do_not_convert  # the write into `a.T` is the point: no view refusal
def _written_after_transposing(m, a, x):
    t = m.transpose(a) if m is np else a.T
    t = t.copy() if m is np else t
    t[0] = 1.0  # the tracer now holds another value: its product must not use `a`
    return t @ x


TRANSPOSED_PRODUCTS = {
    # name: (fn(module, *operands), operand shapes, whether the transpose is folded)
    "A.T @ x": (lambda m, a, x: a.T @ x, [(5, 4), (5,)], True),
    "x @ A.T": (lambda m, a, x: x @ a.T, [(5, 4), (4,)], True),
    "A.T @ B": (lambda m, a, b: a.T @ b, [(5, 4), (5, 3)], True),
    "A @ B.T": (lambda m, a, b: a @ b.T, [(5, 4), (3, 4)], True),
    "A.T @ B.T": (lambda m, a, b: a.T @ b.T, [(5, 4), (3, 5)], True),
    "batched": (lambda m, a, b: m.transpose(a, (0, 2, 1)) @ b, [(2, 5, 4), (2, 5, 3)], True),
    "free dims reordered": (
        lambda m, a, b: m.tensordot(m.transpose(a, (2, 0, 1)), b, axes=(2, 0)),
        [(3, 4, 5), (4, 2)],
        False,
    ),
    "written after transposing": (_written_after_transposing, [(5, 4), (5,)], False),
}


@pytest.mark.parametrize("name", list(TRANSPOSED_PRODUCTS))
@pytest.mark.parametrize("dtype", ["float32", "float64", "int32"])
def test_products_of_transposes_match_numpy(name, dtype):
    fn, shapes, folded = TRANSPOSED_PRODUCTS[name]
    rng = np.random.default_rng(0)
    args = [(rng.standard_normal(s) * 4).astype(dtype) for s in shapes]
    lowered = aotkit.lower(lambda *xs: fn(anp, *xs), *args)
    assert ("stablehlo.transpose" not in lowered.as_text()) == folded
    got = run_lowered("cpu", lowered, *args)
    assert_matches(got, fn(np, *args), name)
