"""Reductions against NumPy: values and result dtypes, on the CPU backend.

Each parametrized case lowers one function for one dtype with several axis/keepdims
variants in one module (one compile), runs it, and compares every output with NumPy.
float16 and bfloat16 are compared with NumPy's float32 answer rounded to the result dtype
(aotkit accumulates them in float32), with NumPy's own result dtype.
"""

from __future__ import annotations

import warnings

import ml_dtypes
import numpy as np
import pytest
import scipy.special
from hypothesis import given, settings
from hypothesis import strategies as st

import aotkit
import aotkit.numpy as anp
from tests.helpers import PEERS, run_on
from tests.helpers import assert_matches as _check

BF16 = np.dtype(ml_dtypes.bfloat16)
F16 = np.dtype(np.float16)
# float64 takes the float32 paths; the NaN and hypothesis tests below cover it.
DTYPES = [np.dtype(d) for d in ("float32", "int32", "uint8", "bool", "float16")] + [BF16]
RNG = np.random.default_rng(0)
SHAPE = (3, 4, 5)


def _values(dtype: np.dtype, shape, *, near_one=False) -> np.ndarray:
    if dtype == np.bool_:
        return RNG.random(shape) < 0.5
    if dtype.kind in "iu":
        lo = 0 if dtype.kind == "u" else -9
        return RNG.integers(lo, 3 if near_one else 10, shape).astype(dtype)
    if near_one:
        return RNG.uniform(0.5, 1.5, shape).astype(dtype)
    return RNG.uniform(-3, 3, shape).astype(dtype)


def _oracle(fn, *args, **kwargs):
    """The oracle's answer; float16/bfloat16 inputs are computed in float32, then rounded.

    The low-precision call is never made: a float result is rounded to the input's dtype
    (NumPy's rule for float16, and aotkit's for both), so the reference does not depend on
    whether `fn` (scipy's included) understands ml_dtypes' bfloat16.
    """
    narrow = [a.dtype for a in args if getattr(a, "dtype", None) in (F16, BF16)]
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        if not narrow:
            return fn(*args, **kwargs)
        wide = fn(*(a.astype(np.float32) if a.dtype in (F16, BF16) else a for a in args), **kwargs)

    def rounded(w):
        w = np.asarray(w)
        return w.astype(narrow[0]) if w.dtype.kind == "f" else w

    return tuple(map(rounded, wide)) if isinstance(wide, tuple) else rounded(wide)


# name -> (kwargs variants, whether the function is defined for booleans)
AXES = [{}, {"axis": -1, "keepdims": True}, {"axis": (0, 2)}]
REDUCTIONS = {
    "sum": (AXES, True),
    "prod": (AXES, True),
    "mean": (AXES, True),
    "var": (AXES + [{"axis": 1, "ddof": 1}], True),
    "std": (AXES + [{"axis": (1, 2), "ddof": 2, "keepdims": True}], True),
    "max": (AXES, True),
    "min": (AXES, True),
    "argmax": ([{}, {"axis": 0}, {"keepdims": True}], True),
    "argmin": ([{}, {"axis": 1}, {"axis": 2, "keepdims": True}], True),
    "any": (AXES, True),
    "all": (AXES, True),
    "ptp": (AXES, False),
    "count_nonzero": ([{}, {"axis": 1}, {"axis": (0, 2), "keepdims": True}], True),
    "cumsum": ([{}, {"axis": 0}, {"axis": -1}], True),
    "cumprod": ([{}, {"axis": 1}], True),
    "diff": ([{}, {"n": 2, "axis": 1}, {"n": 7}], True),
    "nansum": (AXES, True),
    "nanmean": (AXES, True),
    "nanmax": (AXES, True),
    "nanmin": (AXES, True),
    "average": ([{}, {"axis": 1}, {"axis": (0, 2), "keepdims": True}], True),
}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", sorted(REDUCTIONS))
def test_reduction_matches_numpy(name, dtype):
    variants, bool_ok = REDUCTIONS[name]
    if dtype == np.bool_ and not bool_ok:
        with pytest.raises(TypeError, match="does not support operands of dtype"):
            aotkit.lower(getattr(anp, name), _values(dtype, SHAPE))
        return
    x = _values(dtype, SHAPE, near_one=name in ("prod", "cumprod"))
    fn = getattr(anp, name)
    got = run_on("cpu", lambda a: [fn(a, **kw) for kw in variants], x)
    for kw, g in zip(variants, got, strict=True):
        _check(g, _oracle(getattr(np, name), x, **kw), f"{name}({dtype}, {kw})")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_logsumexp_matches_scipy(dtype):
    x = _values(dtype, SHAPE)
    variants = [{}, {"axis": 1}, {"axis": (0, 2), "keepdims": True}]
    got = run_on("cpu", lambda a: [anp.logsumexp(a, **kw) for kw in variants], x)
    for kw, g in zip(variants, got, strict=True):
        _check(g, _oracle(scipy.special.logsumexp, x, **kw), f"logsumexp({dtype}, {kw})")


def test_logsumexp_is_nan_and_inf_safe():
    x = np.array(
        [
            [0.0, -np.inf, 1.0, 2.0],
            [-np.inf, -np.inf, -np.inf, -np.inf],
            [np.inf, 1.0, 2.0, 3.0],
            [np.nan, 1.0, 2.0, 3.0],
            [1000.0, 1000.0, -1000.0, 0.0],
        ],
        np.float32,
    )
    b = np.array([1.0, 2.0, -1.0, 0.5], np.float32)
    got = run_on(
        "cpu",
        lambda a, w: (
            anp.logsumexp(a, axis=1),
            anp.logsumexp(a, axis=1, b=w),
            anp.logsumexp(a, axis=1, b=w, return_sign=True),
        ),
        x,
        b,
    )
    with np.errstate(all="ignore"):
        _check(got[0], scipy.special.logsumexp(x, axis=1))
        _check(got[1], scipy.special.logsumexp(x, axis=1, b=b))
        want = scipy.special.logsumexp(x, axis=1, b=b, return_sign=True)
    _check(got[2][0], want[0])
    _check(got[2][1], want[1])


@pytest.mark.parametrize("dtype", [np.dtype("float32"), np.dtype("float64")], ids=str)
def test_nan_handling_matches_numpy(dtype):
    x = RNG.uniform(-3, 3, (4, 5)).astype(dtype)
    x[0, 2] = x[0, 4] = np.nan
    x[2, :] = np.nan
    x[3, 1] = np.nan
    names = [
        "max", "min", "argmax", "argmin", "sum", "mean", "cumsum",
        "nansum", "nanmean", "nanmax", "nanmin",
    ]  # fmt: skip
    got = run_on("cpu", lambda a: [getattr(anp, n)(a, axis=1) for n in names], x)
    for n, g in zip(names, got, strict=True):
        _check(g, _oracle(getattr(np, n), x, axis=1), n)


NAN_VARIANTS = {
    "nanargmax": lambda m, x, z, i: m.nanargmax(x, axis=1),
    "nanargmin": lambda m, x, z, i: m.nanargmin(x, axis=1),
    "nanargmax keepdims": lambda m, x, z, i: m.nanargmax(x, axis=0, keepdims=True),
    "nanargmin flat": lambda m, x, z, i: m.nanargmin(x),
    "nanargmax int": lambda m, x, z, i: m.nanargmax(i, axis=1),
    "nanargmax complex": lambda m, x, z, i: m.nanargmax(z, axis=1),
    "nanargmin complex": lambda m, x, z, i: m.nanargmin(z, axis=1),
    "nanprod": lambda m, x, z, i: m.nanprod(x[:, 2:], axis=1),
    "nanprod int": lambda m, x, z, i: m.nanprod(i, axis=0),
    "nancumsum": lambda m, x, z, i: m.nancumsum(x, axis=1),
    "nancumprod": lambda m, x, z, i: m.nancumprod(x[1:2]),
    "nancumsum int8": lambda m, x, z, i: m.nancumsum(i.astype(np.int8)),
    "nanvar": lambda m, x, z, i: m.nanvar(np.where(np.isinf(x), 1.0, x), axis=1),
    "nanstd ddof": lambda m, x, z, i: m.nanstd(np.where(np.isinf(x), 1.0, x), axis=0, ddof=1),
    "nanvar int": lambda m, x, z, i: m.nanvar(i),
    "cumulative_sum initial": lambda m, x, z, i: m.cumulative_sum(i, axis=1, include_initial=True),
    "cumulative_prod int8": lambda m, x, z, i: m.cumulative_prod(i[0].astype(np.int8)),
    "cumulative_sum dtype": lambda m, x, z, i: m.cumulative_sum(
        x[0], dtype=np.float64, include_initial=True
    ),
    "cumulative_prod bool": lambda m, x, z, i: m.cumulative_prod(
        i > 0, axis=0, include_initial=True
    ),
}


def test_nan_variants_and_cumulative_api():
    x = np.array(
        [
            [np.nan, -np.inf, 1, 1],
            [3, np.nan, 3, -1],
            [np.inf, np.nan, np.inf, 0],
            [2, 2, np.nan, -9],
        ],
        np.float32,
    )
    z = (x + 1j * np.arange(4)).astype(np.complex64)
    i = np.array([[1, 5, 5, 2], [0, 0, -1, 3]], np.int32)
    got = run_on("cpu", lambda *a: {k: f(anp, *a) for k, f in NAN_VARIANTS.items()}, x, z, i)
    for k, f in NAN_VARIANTS.items():
        _check(got[k], _oracle(lambda *a, f=f: f(np, *a), x, z, i), k)


def test_argmax_first_occurrence_and_infinities():
    x = np.array([[1, 3, 3, 0], [-np.inf, -np.inf, -np.inf, -np.inf], [2, np.inf, np.inf, 1]])
    got = run_on("cpu", lambda a: (anp.argmax(a, axis=1), anp.argmin(a, axis=1)), x)
    _check(got[0], np.argmax(x, axis=1))
    _check(got[1], np.argmin(x, axis=1))
    i = np.array([[np.iinfo(np.int32).min] * 3, [5, 9, 9]], np.int32)
    got = run_on("cpu", lambda a: (anp.argmax(a, axis=1), anp.argmin(a, axis=1)), i)
    _check(got[0], np.argmax(i, axis=1))
    _check(got[1], np.argmin(i, axis=1))


KEYWORD_CASES = [
    ("sum dtype=int8", lambda m, x: m.sum(x, axis=0, dtype=np.int8)),
    ("sum dtype=float32", lambda m, x: m.sum(x, dtype=np.float32)),
    ("sum initial", lambda m, x: m.sum(x, axis=1, initial=5)),
    ("sum where", lambda m, x: m.sum(x, axis=1, where=x > 0)),
    ("prod where initial", lambda m, x: m.prod(x % 3, axis=0, where=x != 0, initial=2)),
    ("max initial", lambda m, x: m.max(x, axis=1, initial=4)),
    ("min where initial", lambda m, x: m.min(x, axis=0, where=x > -5, initial=100)),
    ("any where", lambda m, x: m.any(x > 5, axis=1, where=x < 8)),
    ("all where", lambda m, x: m.all(x > -5, axis=0, where=x < 0)),
    ("mean where", lambda m, x: m.mean(x, axis=1, where=x > 0)),
    ("mean dtype=float32", lambda m, x: m.mean(x, axis=0, dtype=np.float32)),
    ("var correction", lambda m, x: m.var(x, axis=1, correction=1)),
    ("var where", lambda m, x: m.var(x, axis=0, where=x != 0)),
    ("var mean=", lambda m, x: m.var(x, axis=1, mean=m.mean(x, axis=1, keepdims=True))),
    ("std dtype=float32", lambda m, x: m.std(x, dtype=np.float32)),
    ("cumsum dtype=float32", lambda m, x: m.cumsum(x, axis=1, dtype=np.float32)),
    ("cumprod int", lambda m, x: m.cumprod(x % 4, axis=0)),
    ("nansum initial", lambda m, x: m.nansum(x, axis=1, initial=1)),
    ("nanmax initial", lambda m, x: m.nanmax(x, axis=1, initial=0)),
    ("max of broadcast mask",
     lambda m, x: m.max(x, axis=0, where=np.array([True, False, True, True]), initial=-99)),
    ("average weights 2d", lambda m, x: m.average(x, weights=x * 0 + 2)),
    ("average returned", lambda m, x: m.average(x, axis=0, weights=np.arange(1, 4), returned=True)),
    ("average axes", lambda m, x: m.average(x, axis=(1, 0), weights=np.ones((4, 3)))),
    ("average no weights returned", lambda m, x: m.average(x, axis=1, returned=True)),
    ("ptp keepdims", lambda m, x: m.ptp(x, axis=1, keepdims=True)),
    ("count_nonzero all", lambda m, x: m.count_nonzero(x)),
]  # fmt: skip


@pytest.mark.parametrize("case", KEYWORD_CASES, ids=[c[0] for c in KEYWORD_CASES])
def test_keywords_match_numpy(case):
    _, fn = case
    x = RNG.integers(-9, 10, (3, 4)).astype(np.int32)
    got = run_on("cpu", lambda a: fn(anp, a), x)
    want = fn(np, x)
    if isinstance(want, tuple):
        for g, w in zip(got, want, strict=True):
            _check(g, w, case[0])
    else:
        _check(got, want, case[0])


def test_complex_sum_mean_var():
    z = (RNG.normal(size=(3, 4)) + 1j * RNG.normal(size=(3, 4))).astype(np.complex64)
    names = ["sum", "prod", "mean", "var", "std", "cumsum", "nansum"]
    got = run_on("cpu", lambda a: [getattr(anp, n)(a, axis=1) for n in names], z)
    for n, g in zip(names, got, strict=True):
        _check(g, getattr(np, n)(z, axis=1), n)


def test_complex_extrema_use_numpys_lexicographic_order():
    z = np.array(
        [
            [-1 - 1j, -1 - 2j, -3 + 0j, -1 + 1j],
            [1 + 2j, 1 + 3j, 0 + 9j, complex(np.nan, 0)],
            [1 + 1j, complex(1, np.nan), 1 + 1j, 5],
            [-np.inf - 2j, -np.inf - 5j, -np.inf + 0j, -np.inf - 5j],
        ],
        np.complex64,
    )
    fns = {
        "max axis=1": lambda m, a: m.max(a, axis=1),
        "min axis=0": lambda m, a: m.min(a, axis=0),
        "max": lambda m, a: m.max(a[:1]),
        "argmax axis=1": lambda m, a: m.argmax(a, axis=1),
        "argmin axis=0": lambda m, a: m.argmin(a, axis=0),
        "argmin": lambda m, a: m.argmin(a),
        "ptp": lambda m, a: m.ptp(a[0]),
        "max initial": lambda m, a: m.max(a[:1], axis=1, initial=-1 + 5j),
        "min where": lambda m, a: m.min(a, axis=1, where=a.real > -2, initial=9 + 0j),
        "maximum": lambda m, a: m.maximum(a[0], a[2]),
        "minimum": lambda m, a: m.minimum(a[1], a[0]),
    }
    got = run_on("cpu", lambda a: {k: f(anp, a) for k, f in fns.items()}, z)
    for k, f in fns.items():
        want = np.asarray(f(np, z))
        assert got[k].dtype == want.dtype, k
        np.testing.assert_array_equal(got[k], want, err_msg=k)


def test_diff_prepend_append():
    x = RNG.integers(-9, 10, (3, 4)).astype(np.int32)
    got = run_on(
        "cpu",
        lambda a: (
            anp.diff(a, prepend=0),
            anp.diff(a, axis=0, append=a[:1]),
            anp.diff(a > 0, prepend=True),
        ),
        x,
    )
    _check(got[0], np.diff(x, prepend=0))
    _check(got[1], np.diff(x, axis=0, append=x[:1]))
    _check(got[2], np.diff(x > 0, prepend=True))


@pytest.mark.parametrize("backend", PEERS)
def test_peer_backends_agree(backend):
    # The StableHLO interpreter follows the spec to the letter: the reduce bodies, variadic
    # reduces and reduce_window are valid StableHLO, not just something XLA accepts; IREE
    # is a second compiler that must read them the same way.
    x = RNG.uniform(-3, 3, (3, 4)).astype(np.float32)
    x[1, 1] = np.nan
    fns = {
        "sum": lambda m, a: m.sum(a, axis=0),
        "argmax": lambda m, a: m.argmax(a, axis=1),
        "nanargmin": lambda m, a: m.nanargmin(a, axis=1),
        "cumsum": lambda m, a: m.cumsum(a, axis=1),
        "var": lambda m, a: m.var(a, axis=1, ddof=1),
        "max complex": lambda m, a: m.max(a.astype(np.complex64), axis=0),
        "any": lambda m, a: m.any(a > 2, axis=1),
    }
    got = run_on(backend, lambda a: {k: f(anp, a) for k, f in fns.items()}, x)
    for k, f in fns.items():
        _check(got[k], _oracle(lambda a, f=f: f(np, a), x), k)


def test_reductions_lower_to_single_reduce_ops():
    text = aotkit.lower(lambda a: (anp.sum(a, axis=1), anp.argmax(a)), aotkit.spec("f32[3,4]"))
    text = text.as_text()
    assert text.count("stablehlo.reduce") == 2
    assert "stablehlo.reduce_window" in aotkit.lower(anp.cumsum, aotkit.spec("f32[5]")).as_text()


def test_tracer_methods_route_to_reductions():
    x = RNG.uniform(-3, 3, (3, 4)).astype(np.float32)
    got = run_on(
        "cpu",
        lambda a: (a.sum(axis=0), a.mean(), a.max(1), a.argmin(), a.cumsum(1), a.std(ddof=1)),
        x,
    )
    want = (x.sum(axis=0), x.mean(), x.max(1), x.argmin(), x.cumsum(1), x.std(ddof=1))
    for g, w in zip(got, want, strict=True):
        _check(g, w)


# --- hypothesis: shapes, axes, keepdims, dtypes -------------------------------------------------

HYP_EXTRAS = ["logsumexp", "nanprod", "nanvar", "nanstd", "nanargmax", "nanargmin", "nancumsum"]
HYP_NAMES = sorted(REDUCTIONS) + HYP_EXTRAS + ["cumulative_sum", "cumulative_prod"]
HYP_DTYPES = [np.dtype(d) for d in ("float32", "int32", "uint8", "bool", "float64")]
SINGLE_AXIS = ("argmax", "argmin", "nanargmax", "nanargmin", "cumsum", "cumprod", "nancumsum")
NEEDS_AXIS = ("diff", "cumulative_sum", "cumulative_prod")
NO_KEEPDIMS = ("cumsum", "cumprod", "nancumsum", *NEEDS_AXIS)


@st.composite
def _reduction_case(draw):
    name = draw(st.sampled_from(HYP_NAMES))
    bool_ok = REDUCTIONS.get(name, (None, True))[1]
    dtype = draw(st.sampled_from([d for d in HYP_DTYPES if bool_ok or d != np.bool_]))
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=3)))
    ndim = len(shape)
    axis_single = st.integers(-ndim, ndim - 1)
    if name in NEEDS_AXIS:
        axis = draw(axis_single)
    elif name in SINGLE_AXIS:
        axis = draw(st.one_of(st.none(), axis_single))
    else:
        axis = draw(
            st.one_of(
                st.none(),
                axis_single,
                st.lists(st.integers(0, ndim - 1), unique=True, max_size=ndim).map(tuple),
            )
        )
    kw = {"axis": axis}
    if name not in NO_KEEPDIMS:
        kw["keepdims"] = draw(st.booleans())
    return name, dtype, shape, kw


@settings(max_examples=40, deadline=None)
@given(_reduction_case())
def test_random_shapes_and_axes(case):
    name, dtype, shape, kw = case
    x = _values(dtype, shape, near_one="prod" in name)
    got = run_on("cpu", lambda a: getattr(anp, name)(a, **kw), x)
    oracle = scipy.special.logsumexp if name == "logsumexp" else getattr(np, name)
    _check(got, _oracle(oracle, x, **kw), f"{name}({dtype}{list(shape)}, {kw})")


# --- errors --------------------------------------------------------------------------------------

ERROR_CASES = [
    ("duplicate axis", ValueError, r"sum \(at .*\): repeated axis in `axis` argument: \(0, 0\)",
     lambda x: anp.sum(x, axis=(0, 0))),
    ("axis out of range", ValueError, r"axis 3 is out of bounds for an array of dimension 2",
     lambda x: anp.mean(x, axis=3)),
    ("non-bool where", TypeError, r"where= must be a boolean mask, got dtype float32",
     lambda x: anp.sum(x, where=x)),
    ("where shape", ValueError, r"where= of shape \(2, 3\) does not broadcast to "
     r"the array's shape \(3, 4\)",
     lambda x: anp.sum(x, where=np.ones((2, 3), bool))),
    ("out= NumPy array", TypeError, r"sum \(at .*\): out= is a NumPy array of shape \(4,\), "
     r"which cannot hold a value computed when the program runs; make the buffer from a "
     r"traced array", lambda x: anp.sum(x, axis=0, out=np.zeros(4, np.float32))),
    ("out= shape", ValueError, r"non-broadcastable output operand with shape \(3,\) doesn't "
     r"match the broadcast shape \(4,\)", lambda x: anp.sum(x, axis=0, out=x[:, 0])),
    ("max where without initial", ValueError, r"'maximum' has no identity, "
     r"so a where= mask needs initial=",
     lambda x: anp.max(x, where=x > 0)),
    ("empty max", ValueError, r"zero-size array of shape \(0, 4\) to reduction operation 'minimum'",
     lambda x: anp.min(anp.zeros((0, 4)), axis=0)),
    ("ddof and correction", ValueError, r"ddof=1 and correction=1 were both given",
     lambda x: anp.var(x, ddof=1, correction=1)),
    ("empty argmax", ValueError, r"attempt to get argmax of an empty sequence",
     lambda x: anp.argmax(anp.zeros((3, 0)), axis=1)),
    ("diff n type", TypeError, r"diff \(at .*\): n must be a Python int, got 1.5",
     lambda x: anp.diff(x, n=1.5)),
    ("diff n negative", ValueError, r"order must be non-negative but got -1",
     lambda x: anp.diff(x, n=-1)),
    ("diff 0-d", ValueError, r"diff requires input that is at least one dimensional",
     lambda x: anp.diff(anp.sum(x))),
    ("average no axis", TypeError, r"axis must be specified when shapes of a "
     r"\(3, 4\) and weights \(4,\) differ",
     lambda x: anp.average(x, weights=np.ones(4))),
    ("average weights shape", ValueError, r"shape of weights \(3,\) must be "
     r"consistent with shape of a \(3, 4\) along axis 1",
     lambda x: anp.average(x, axis=1, weights=np.ones(3))),
    ("logsumexp complex", NotImplementedError, r"logsumexp \(at .*\): complex inputs "
     r"are not supported",
     lambda x: anp.logsumexp(x.astype(np.complex64))),
    ("cumulative_sum axis", ValueError, r"cumulative_sum \(at .*\): axis= is required for "
     r"arrays of more than one dimension \(shape \(3, 4\)\)",
     lambda x: anp.cumulative_sum(x)),
    ("cumulative_prod 0-d", ValueError, r"cumulative_prod \(at .*\): the input must have at "
     r"least one dimension", lambda x: anp.cumulative_prod(anp.sum(x))),
    ("ptp bool", TypeError, r"does not support operands of dtype \(bool, bool\)",
     lambda x: anp.ptp(x > 0)),
]  # fmt: skip


@pytest.mark.parametrize("case", ERROR_CASES, ids=[c[0] for c in ERROR_CASES])
def test_errors(case):
    _, exc, pattern, fn = case
    with pytest.raises(exc, match=pattern):
        aotkit.lower(fn, aotkit.spec("f32[3,4]"))
