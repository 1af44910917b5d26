"""aotkit.nn and the windowed aotkit.lax ops against JAX: values and result dtypes.

Oracles: `jax.nn` for activations, softmax and one_hot; `jax.lax.conv_general_dilated`,
`conv_transpose` and `reduce_window` for convolutions and windows; Flax's formulas written
in `jax.numpy` for pooling, layer_norm, rms_norm and dropout (Flax is not a dependency).
float64 cases ask JAX with x64 on. Most cases run on the CPU backend; small ones also on
the StableHLO reference interpreter.
"""

from __future__ import annotations

import operator
import zlib

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import aotkit
import aotkit.numpy as anp
from aotkit import nn
from aotkit import random as ar
from tests.helpers import assert_matches, run_on

BF16 = np.dtype(ml_dtypes.bfloat16)
F16, F32, F64 = np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)
FLOATS = [F32, F64, F16, BF16]
# XLA's and the CHLO legalization's transcendental functions differ in the last bits.
TOLERANCES = {F32: (2e-5, 2e-6), F16: (4e-3, 4e-3), BF16: (3e-2, 3e-2)}


def _rng(*parts):
    return np.random.default_rng(zlib.crc32(repr(parts).encode()))


def _values(dtype, shape, *parts, lo=-3.0, hi=3.0):
    rng = _rng(dtype, shape, *parts)
    if np.dtype(dtype).kind in "iu":
        return rng.integers(int(lo), int(hi) + 1, shape).astype(dtype)
    return rng.uniform(lo, hi, shape).astype(dtype)


def _jax(fn, *args, x64=False):
    with jax.enable_x64(x64):
        return jax.tree_util.tree_map(np.asarray, fn(*args))


# --- activations ------------------------------------------------------------------------------

ACTIVATIONS = {
    "relu": (nn.relu, jax.nn.relu),
    "relu6": (nn.relu6, jax.nn.relu6),
    "leaky_relu": (lambda x: nn.leaky_relu(x, 0.2), lambda x: jax.nn.leaky_relu(x, 0.2)),
    "elu": (lambda x: nn.elu(x, 0.5), lambda x: jax.nn.elu(x, 0.5)),
    "sigmoid": (nn.sigmoid, jax.nn.sigmoid),
    "softplus": (nn.softplus, jax.nn.softplus),
    "log_sigmoid": (nn.log_sigmoid, jax.nn.log_sigmoid),
    "silu": (nn.silu, jax.nn.silu),
    "swish": (nn.swish, jax.nn.swish),
    "gelu_tanh": (nn.gelu, jax.nn.gelu),
    "gelu_exact": (
        lambda x: nn.gelu(x, approximate=False),
        lambda x: jax.nn.gelu(x, approximate=False),
    ),
}


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("name", ACTIVATIONS)
def test_activations_match_jax_nn(name, dtype):
    ours, theirs = ACTIVATIONS[name]
    x = _values(dtype, (4, 9), name)
    x[0, :3] = [0.0, -0.0, 40.0]
    got = run_on("cpu", ours, x)
    assert_matches(got, _jax(theirs, x, x64=dtype == F64), name, tolerances=TOLERANCES)


@pytest.mark.parametrize("name", ["sigmoid", "gelu_tanh", "gelu_exact", "softplus", "silu"])
def test_integer_inputs_compute_in_float64_as_numpy(name):
    ours, theirs = ACTIVATIONS[name]
    x = np.arange(-4, 5, dtype=np.int32)
    got = run_on("cpu", ours, x)
    assert_matches(got, _jax(theirs, x.astype(np.float64), x64=True), name)


def test_relu_keeps_integer_dtypes():
    x = np.arange(-4, 5, dtype=np.int8)
    assert_matches(run_on("cpu", nn.relu, x), np.maximum(x, 0))


def test_activations_on_the_interpreter():
    x = _values(F32, (7,), "interp")
    fns = {k: v for k, v in ACTIVATIONS.items() if k != "swish"}
    got = run_on("interpreter", lambda a: {k: f[0](a) for k, f in fns.items()}, x)
    for k, (_, theirs) in fns.items():
        assert_matches(got[k], _jax(theirs, x), k, tolerances=TOLERANCES)


# --- softmax ----------------------------------------------------------------------------------

SOFTMAX_CASES = [
    {},
    {"axis": 0},
    {"axis": (0, 2)},
    {"axis": None},
    {"axis": -1, "where": "mask"},
    {"axis": 1, "where": "mask"},
]


@pytest.mark.parametrize("dtype", [F32, F64, BF16], ids=str)
@pytest.mark.parametrize("kwargs", SOFTMAX_CASES, ids=repr)
@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_softmax_matches_jax_nn(name, kwargs, dtype):
    x = _values(dtype, (2, 3, 5), name) * 10
    mask = _values(np.int32, (2, 3, 5), "mask", lo=0, hi=3) > 0
    mask[..., 0] = True
    kw = {k: v for k, v in kwargs.items() if k != "where"}
    if "where" in kwargs:  # the mask is a traced argument here, a constant for JAX
        fn = lambda a, m: getattr(nn, name)(a, **kw, where=m)  # noqa: E731
        got = run_on("cpu", fn, x, mask)
        kw["where"] = mask
    else:
        got = run_on("cpu", lambda a: getattr(nn, name)(a, **kw), x)
    want = _jax(lambda a: getattr(jax.nn, name)(a, **kw), x, x64=dtype == F64)
    assert_matches(got, want, name, tolerances=TOLERANCES)


def test_softmax_is_stable_for_large_logits():
    x = np.array([[1000.0, 1000.0, -1000.0], [-1e30, 0.0, 1e30]], np.float32)
    got = run_on("cpu", lambda a: (nn.softmax(a), nn.log_softmax(a)), x)
    want = _jax(lambda a: (jax.nn.softmax(a), jax.nn.log_softmax(a)), x)
    for g, w in zip(got, want, strict=True):
        assert np.isfinite(g).all()
        assert_matches(g, w)


def test_softmax_with_a_traced_mask_on_the_interpreter():
    x = _values(F32, (3, 4), "interp")
    mask = np.array([[1, 1, 0, 1], [0, 1, 1, 1], [1, 0, 0, 0]], bool)
    got = run_on(
        "interpreter", lambda a, m: (nn.softmax(a, where=m), nn.log_softmax(a, where=m)), x, mask
    )
    want = _jax(lambda a: (jax.nn.softmax(a, where=mask), jax.nn.log_softmax(a, where=mask)), x)
    for g, w in zip(got, want, strict=True):
        assert_matches(g, w, tolerances=TOLERANCES)


# --- one_hot ----------------------------------------------------------------------------------


@pytest.mark.parametrize("axis", [-1, 0, 1])
@pytest.mark.parametrize("dtype", [None, np.int32, np.bool_, BF16], ids=str)
def test_one_hot_matches_jax_nn(dtype, axis):
    x = np.array([[0, 2, -1], [4, 1, 3]], np.int32)
    got = run_on("cpu", lambda a: nn.one_hot(a, 4, dtype=dtype, axis=axis), x)
    assert_matches(got, _jax(lambda a: jax.nn.one_hot(a, 4, dtype=dtype, axis=axis), x))


def test_one_hot_of_floats_and_booleans():
    x = np.array([0.0, 2.0, 2.5, -1.0], np.float32)
    got = run_on("cpu", lambda a, b: (nn.one_hot(a, 3), nn.one_hot(b, 2)), x, x > 1)
    assert_matches(got[0], _jax(lambda a: jax.nn.one_hot(a, 3), x))
    assert_matches(got[1], np.eye(2, dtype=np.float32)[(x > 1).astype(int)])


def test_one_hot_of_a_python_list_on_the_interpreter():
    got = run_on("interpreter", lambda: nn.one_hot(np.array([2, 0, 5], np.int32), 3))
    assert_matches(got, _jax(lambda: jax.nn.one_hot(jnp.array([2, 0, 5]), 3)))


# --- normalization ----------------------------------------------------------------------------


def _flax_layer_norm(x, scale, bias, axis, eps):
    wide = x.astype(jnp.float32) if x.dtype in (jnp.float16, jnp.bfloat16) else x
    mean = jnp.mean(wide, axis, keepdims=True)
    var = jnp.mean(jnp.square(wide - mean), axis, keepdims=True)
    y = (wide - mean) * jax.lax.rsqrt(var + eps)
    out = x.dtype
    if scale is not None:
        y, out = y * scale, jnp.result_type(out, scale)
    if bias is not None:
        y, out = y + bias, jnp.result_type(out, bias)
    return y.astype(out)


def _flax_rms_norm(x, scale, axis, eps):
    wide = x.astype(jnp.float32) if x.dtype in (jnp.float16, jnp.bfloat16) else x
    y = wide * jax.lax.rsqrt(jnp.mean(jnp.square(wide), axis, keepdims=True) + eps)
    if scale is not None:
        return (y * scale).astype(jnp.result_type(x.dtype, scale))
    return y.astype(x.dtype)


NORM_CASES = [
    {"axis": -1, "affine": True},
    {"axis": -1, "affine": False},
    {"axis": (1, 2), "affine": True},
]


@pytest.mark.parametrize("dtype", [F32, BF16], ids=str)
@pytest.mark.parametrize("case", NORM_CASES, ids=repr)
def test_layer_norm_and_rms_norm_match_flax(case, dtype):
    x = _values(dtype, (2, 3, 8), "norm", lo=-2, hi=5)
    axis = case["axis"]
    pshape = (8,) if axis == -1 else (3, 8)
    scale = _values(F32, pshape, "scale", lo=0.5, hi=1.5) if case["affine"] else None
    bias = _values(F32, pshape, "bias") if case["affine"] else None

    def ours(a, s, b):
        return (nn.layer_norm(a, s, b, axis=axis, eps=1e-5), nn.rms_norm(a, s, axis=axis))

    got = run_on("cpu", ours, x, scale, bias)
    want = (
        _jax(lambda a: _flax_layer_norm(a, scale, bias, axis, 1e-5), x),
        _jax(lambda a: _flax_rms_norm(a, scale, axis, 1e-6), x),
    )
    for g, w in zip(got, want, strict=True):
        assert_matches(g, w, repr(case), tolerances=TOLERANCES)


def test_layer_norm_on_the_interpreter():
    x = _values(F32, (3, 6), "interp")
    got = run_on("interpreter", lambda a: nn.layer_norm(a, np.float32(2.0), 1.0), x)
    assert_matches(got, _jax(lambda a: _flax_layer_norm(a, 2.0, 1.0, -1, 1e-6), x))


# --- dropout ----------------------------------------------------------------------------------


@pytest.mark.parametrize("rate", [0.0, 0.25, 0.5, 1.0])
@pytest.mark.parametrize("backend", ["cpu", "interpreter"])
def test_dropout_masks_like_jax_random(backend, rate):
    x = _values(F32, (4, 5), "dropout")
    got = run_on(backend, lambda k, a: nn.dropout(k, rate, a), ar.key(7), x)

    def flax_dropout(k, a):
        if rate == 1.0:
            return jnp.zeros_like(a)
        if rate == 0.0:
            return a
        keep = 1.0 - rate
        return jnp.where(jax.random.bernoulli(k, keep, a.shape), a / keep, 0)

    assert_matches(got, _jax(flax_dropout, jax.random.PRNGKey(7), x))


def test_dropout_deterministic_returns_its_input():
    x = _values(F32, (3,), "det")
    assert_matches(
        run_on("cpu", lambda k, a: nn.dropout(k, 0.5, a, deterministic=True), ar.key(0), x), x
    )


# --- convolution ------------------------------------------------------------------------------


def _conv_case(lhs_shape, rhs_shape, dtype=F32, **kwargs):
    return (lhs_shape, rhs_shape, np.dtype(dtype), kwargs)


CONV_CASES = {
    "1d_default_same": _conv_case((2, 3, 9), (4, 3, 3), window_strides=(2,), padding="SAME"),
    "2d_nhwc_rhs_dilation": _conv_case(
        (2, 8, 7, 3), (3, 2, 3, 5), window_strides=(2, 1), padding="SAME", rhs_dilation=(1, 2),
        dimension_numbers=("NHWC", "HWIO", "NHWC"),
    ),
    "2d_explicit_lhs_dilation": _conv_case(
        (1, 2, 5, 6), (3, 2, 2, 3), window_strides=(1, 2), padding=((1, 2), (0, -1)),
        lhs_dilation=(2, 1),
    ),
    "2d_feature_groups": _conv_case(
        (2, 4, 6, 6), (6, 2, 3, 3), window_strides=(1, 1), padding="VALID", feature_group_count=2
    ),
    "2d_depthwise_nhwc": _conv_case(
        (1, 6, 6, 4), (3, 3, 1, 4), window_strides=(1, 1), padding="SAME",
        dimension_numbers=("NHWC", "HWIO", "NHWC"), feature_group_count=4,
    ),
    "2d_batch_groups": _conv_case(
        (4, 3, 5, 5), (4, 3, 2, 2), window_strides=(1, 1), padding="VALID", batch_group_count=2
    ),
    "2d_mixed_layouts": _conv_case(
        (2, 5, 3, 6), (2, 4, 3, 3), window_strides=(2, 1), padding="SAME_LOWER",
        dimension_numbers=("NWCH", "WOHI", "CHNW"),
    ),
    "3d_ndhwc": _conv_case(
        (1, 4, 5, 3, 2), (2, 3, 2, 2, 3), window_strides=(1, 2, 1), padding="SAME",
        dimension_numbers=("NDHWC", "DHWIO", "NDHWC"),
    ),
    "2d_int32": _conv_case(
        (1, 2, 5, 5), (2, 2, 3, 3), np.int32, window_strides=(1, 1), padding="VALID"
    ),
    "2d_bf16": _conv_case((1, 2, 5, 5), (2, 2, 3, 3), BF16, window_strides=(1, 1), padding="SAME"),
    "2d_f64": _conv_case((1, 2, 5, 5), (2, 2, 3, 3), F64, window_strides=(2, 2), padding="SAME"),
    "2d_bf16_preferred_f32": _conv_case(
        (1, 2, 5, 5), (2, 2, 3, 3), BF16, window_strides=(1, 1), padding="SAME",
        preferred_element_type=np.float32,
    ),
}  # fmt: skip


def _conv_inputs(name, case):
    lhs_shape, rhs_shape, dtype, _ = case
    return _values(dtype, lhs_shape, name, "lhs"), _values(dtype, rhs_shape, name, "rhs")


@pytest.mark.parametrize("name", CONV_CASES)
def test_conv_general_dilated_matches_lax(name):
    case = CONV_CASES[name]
    kwargs = case[3]
    x, w = _conv_inputs(name, case)
    got = run_on("cpu", lambda a, b: nn.conv_general_dilated(a, b, **kwargs), x, w)
    want = _jax(lambda a, b: jax.lax.conv_general_dilated(a, b, **kwargs), x, w, x64=x.dtype == F64)
    assert_matches(got, want, name, tolerances=TOLERANCES)


@pytest.mark.parametrize("name", ["1d_default_same", "2d_feature_groups", "2d_mixed_layouts"])
def test_conv_general_dilated_on_the_interpreter(name):
    case = CONV_CASES[name]
    x, w = _conv_inputs(name, case)
    got = run_on("interpreter", lambda a, b: aotkit.lax.conv_general_dilated(a, b, **case[3]), x, w)
    want = _jax(lambda a, b: jax.lax.conv_general_dilated(a, b, **case[3]), x, w)
    assert_matches(got, want, name, tolerances=TOLERANCES)


def test_conv_promotes_mixed_operands_as_numpy():
    x = _values(F16, (1, 2, 5), "mixed")
    w = _values(F32, (3, 2, 2), "mixed")
    got = run_on("cpu", lambda a, b: nn.conv(a, b, (1,), "VALID"), x, w)
    assert_matches(got, _jax(lambda a, b: jax.lax.conv(a.astype(F32), b, (1,), "VALID"), x, w))


@pytest.mark.parametrize("backend", ["cpu", "interpreter"])
def test_conv_of_complex_operands(backend):
    rng = _rng("complex")
    x = (rng.standard_normal((1, 2, 5)) + 1j * rng.standard_normal((1, 2, 5))).astype(np.complex64)
    w = (rng.standard_normal((3, 2, 2)) + 1j * rng.standard_normal((3, 2, 2))).astype(np.complex64)
    got = run_on(backend, lambda a, b: nn.conv(a, b, (1,), "SAME"), x, w)
    want = _jax(lambda a, b: jax.lax.conv(a, b, (1,), "SAME"), x, w)
    assert_matches(got, want, tolerances={np.dtype(np.complex64): (2e-5, 2e-6)})


def test_conv_accepts_jax_dimension_numbers_and_precision():
    x, w = _values(F32, (1, 3, 6, 6), "dn"), _values(F32, (2, 3, 3, 3), "dn", "w")
    dn = jax.lax.conv_dimension_numbers(x.shape, w.shape, ("NCHW", "OIHW", "NCHW"))
    got = run_on(
        "cpu",
        lambda a, b: nn.conv_general_dilated(
            a, b, (1, 1), "SAME", dimension_numbers=dn, precision=jax.lax.Precision.HIGHEST
        ),
        x,
        w,
    )
    assert_matches(got, _jax(lambda a, b: jax.lax.conv(a, b, (1, 1), "SAME"), x, w))


@st.composite
def _conv_config(draw):
    n = draw(st.integers(1, 2))
    spatial = [draw(st.integers(1, 6)) for _ in range(n)]
    kernel = [draw(st.integers(1, 3)) for _ in range(n)]
    strides = tuple(draw(st.integers(1, 3)) for _ in range(n))
    rhs_dil = tuple(draw(st.integers(1, 2)) for _ in range(n))
    lhs_dil = tuple(draw(st.integers(1, 2)) for _ in range(n))
    groups = draw(st.sampled_from([1, 2]))
    pad_kind = draw(st.sampled_from(["SAME", "VALID", "SAME_LOWER", "explicit"]))
    if pad_kind == "explicit":
        padding = tuple((draw(st.integers(0, 2)), draw(st.integers(-1, 2))) for _ in range(n))
    else:
        padding, lhs_dil = pad_kind, (1,) * n
    lhs = (draw(st.integers(1, 2)), 2 * groups, *spatial)
    rhs = (2 * groups, 2, *kernel)
    kwargs = dict(
        window_strides=strides,
        padding=padding,
        lhs_dilation=lhs_dil,
        rhs_dilation=rhs_dil,
        feature_group_count=groups,
    )
    return lhs, rhs, kwargs


@settings(max_examples=30, deadline=None)
@given(_conv_config())
def test_conv_shapes_and_padding_match_lax(config):
    lhs, rhs, kwargs = config
    x, w = _values(F32, lhs, "h"), _values(F32, rhs, "h", "w")
    want = _jax(lambda a, b: jax.lax.conv_general_dilated(a, b, **kwargs), x, w)
    got = run_on("cpu", lambda a, b: nn.conv_general_dilated(a, b, **kwargs), x, w)
    assert_matches(got, want, repr(config), tolerances=TOLERANCES)


CONV_TRANSPOSE_CASES = {
    "2d_same_stride2": dict(strides=(2, 2), padding="SAME"),
    "2d_valid_stride2": dict(strides=(2, 2), padding="VALID"),
    "2d_valid_stride1": dict(strides=(1, 1), padding="VALID"),
    "2d_explicit": dict(strides=(2, 1), padding=((1, 0), (2, 1))),
    "2d_consistent": dict(strides=(2, 2), padding=((1, 1), (0, 1)), use_consistent_padding=True),
    "2d_transpose_kernel": dict(strides=(2, 2), padding="SAME", transpose_kernel=True),
    "2d_rhs_dilation": dict(strides=(3, 2), padding="SAME", rhs_dilation=(2, 1)),
}


@pytest.mark.parametrize("name", CONV_TRANSPOSE_CASES)
def test_conv_transpose_matches_lax(name):
    kwargs = CONV_TRANSPOSE_CASES[name]
    # transpose_kernel swaps the kernel's I and O: its O then meets the input's features.
    kernel = (3, 3, 4, 3) if kwargs.get("transpose_kernel") else (3, 3, 3, 4)
    x, w = _values(F32, (2, 5, 4, 3), name), _values(F32, kernel, name, "w")
    got = run_on("cpu", lambda a, b: nn.conv_transpose(a, b, **kwargs), x, w)
    want = _jax(lambda a, b: jax.lax.conv_transpose(a, b, **kwargs), x, w)
    assert_matches(got, want, name, tolerances=TOLERANCES)


def test_conv_transpose_1d_and_ncw_layouts():
    x, w = _values(F32, (2, 3, 7), "ncw"), _values(F32, (4, 3, 3), "ncw", "w")
    dn = ("NCH", "OIH", "NCH")
    got = run_on(
        "cpu",
        lambda a, b: (
            nn.conv_transpose(a, b, (2,), "SAME", dimension_numbers=dn),
            aotkit.lax.conv_transpose(a.transpose(0, 2, 1), b.transpose(2, 1, 0), (3,), "VALID"),
        ),
        x,
        w,
    )
    want = _jax(
        lambda a, b: (
            jax.lax.conv_transpose(a, b, (2,), "SAME", dimension_numbers=dn),
            jax.lax.conv_transpose(a.transpose(0, 2, 1), b.transpose(2, 1, 0), (3,), "VALID"),
        ),
        x,
        w,
    )
    for g, wt in zip(got, want, strict=True):
        assert_matches(g, wt, tolerances=TOLERANCES)


# --- pooling and reduce_window ----------------------------------------------------------------


def _flax_pool(x, init, op, window, strides, padding):
    n_batch = x.ndim - len(window) - 1
    single = n_batch == 0
    if single:
        x, n_batch = x[None], 1
    strides = strides or (1,) * len(window)
    dims = (1,) * n_batch + tuple(window) + (1,)
    steps = (1,) * n_batch + tuple(strides) + (1,)
    if not isinstance(padding, str):
        padding = ((0, 0),) * n_batch + tuple(padding) + ((0, 0),)
    y = jax.lax.reduce_window(x, init, op, dims, steps, padding)
    return y[0] if single else y


def _flax_max_pool(x, window, strides=None, padding="VALID"):
    init = -jnp.inf if jnp.issubdtype(x.dtype, jnp.floating) else jnp.iinfo(x.dtype).min
    return _flax_pool(x, jnp.array(init, x.dtype), jax.lax.max, window, strides, padding)


def _flax_avg_pool(x, window, strides=None, padding="VALID", count_include_pad=True):
    total = _flax_pool(x, jnp.array(0, x.dtype), jax.lax.add, window, strides, padding)
    if count_include_pad:
        return total / np.prod(window)
    ones = jnp.ones(x.shape, x.dtype)
    return total / _flax_pool(ones, jnp.array(0, x.dtype), jax.lax.add, window, strides, padding)


POOL_CASES = {
    "2x2_valid": ((2, 6, 6, 3), dict(window_shape=(2, 2), strides=(2, 2))),
    "3x3_same_stride2": ((2, 7, 5, 2), dict(window_shape=(3, 3), strides=(2, 2), padding="SAME")),
    "explicit": ((1, 5, 5, 2), dict(window_shape=(2, 3), padding=((1, 1), (0, 2)))),
    "no_batch": ((6, 6, 3), dict(window_shape=(3, 3), strides=(1, 2), padding="SAME")),
    "1d": ((2, 9, 4), dict(window_shape=(3,), strides=(2,), padding="SAME")),
    "two_batch_dims": ((2, 2, 5, 5, 1), dict(window_shape=(2, 2), padding="SAME")),
}


@pytest.mark.parametrize("name", POOL_CASES)
def test_pooling_matches_flax(name):
    shape, kw = POOL_CASES[name]
    x = _values(F32, shape, name)
    got = run_on(
        "cpu",
        lambda a: (
            nn.max_pool(a, **kw),
            nn.avg_pool(a, **kw),
            nn.avg_pool(a, **kw, count_include_pad=False),
        ),
        x,
    )
    want = _jax(
        lambda a: (
            _flax_max_pool(a, kw["window_shape"], kw.get("strides"), kw.get("padding", "VALID")),
            _flax_avg_pool(a, kw["window_shape"], kw.get("strides"), kw.get("padding", "VALID")),
            _flax_avg_pool(
                a, kw["window_shape"], kw.get("strides"), kw.get("padding", "VALID"), False
            ),
        ),
        x,
    )
    for label, g, w in zip(("max", "avg", "avg_no_pad"), got, want, strict=True):
        assert_matches(g, w, f"{name} {label}", tolerances=TOLERANCES)


def test_max_pool_pads_with_minus_infinity():
    x = -np.ones((1, 3, 3, 1), np.float32) * 5
    got = run_on("cpu", lambda a: nn.max_pool(a, (3, 3), padding="SAME"), x)
    assert (got == -5).all()


def test_pooling_of_integers():
    x = _values(np.int32, (1, 5, 5, 2), "int", lo=-9, hi=9)
    got = run_on(
        "cpu", lambda a: (nn.max_pool(a, (2, 2), padding="SAME"), nn.avg_pool(a, (2, 2))), x
    )
    assert_matches(got[0], _jax(lambda a: _flax_max_pool(a, (2, 2), padding="SAME"), x))
    # NumPy promotion: the int32 window sums divide to float64.
    want = _jax(lambda a: _flax_avg_pool(a.astype(jnp.float64), (2, 2)), x, x64=True)
    assert_matches(got[1], want)


def test_pooling_on_the_interpreter():
    x = _values(F32, (1, 5, 4, 2), "interp")
    kw = dict(window_shape=(2, 2), strides=(2, 1), padding="SAME")
    got = run_on(
        "interpreter",
        lambda a: (nn.max_pool(a, **kw), nn.avg_pool(a, **kw, count_include_pad=False)),
        x,
    )
    assert_matches(got[0], _jax(lambda a: _flax_max_pool(a, (2, 2), (2, 1), "SAME"), x))
    want = _jax(lambda a: _flax_avg_pool(a, (2, 2), (2, 1), "SAME", False), x)
    assert_matches(got[1], want, tolerances=TOLERANCES)


REDUCE_WINDOW_CASES = {
    "add_string": ("add", jax.lax.add, 0.0, dict(padding="SAME")),
    "max_numpy": (np.maximum, jax.lax.max, -np.inf, dict(window_strides=(2, 1))),
    "min_jax": (jax.lax.min, jax.lax.min, np.inf, dict(window_dilation=(2, 1))),
    "mul_operator": (
        operator.mul, jax.lax.mul, 1.0, dict(base_dilation=(1, 2), padding=((1, 0), (0, 1)))
    ),
    "add_aotkit": (anp.add, jax.lax.add, 0.5, dict(window_strides=(1, 2), padding="VALID")),
}  # fmt: skip


@pytest.mark.parametrize("name", REDUCE_WINDOW_CASES)
def test_reduce_window_matches_lax(name):
    ours, theirs, init, kw = REDUCE_WINDOW_CASES[name]
    x = _values(F32, (5, 6), name, lo=0.5, hi=1.5)
    kw = {"padding": "VALID", "window_strides": (1, 1), **kw}
    got = run_on("cpu", lambda a: aotkit.lax.reduce_window(a, init, ours, (2, 3), **kw), x)
    want = _jax(lambda a: jax.lax.reduce_window(a, np.float32(init), theirs, (2, 3), **kw), x)
    assert_matches(got, want, name, tolerances=TOLERANCES)


def test_reduce_window_of_booleans_is_logical():
    x = np.array([[True, False, False], [False, False, True]])
    got = run_on("cpu", lambda a: aotkit.lax.reduce_window(a, False, "max", (1, 2)), x)
    assert_matches(got, np.array([[True, False], [False, True]]))


def test_convolution_lowers_to_one_stablehlo_convolution():
    text = aotkit.lower(
        lambda a, b: nn.conv_general_dilated(
            a, b, (2, 1), "SAME", rhs_dilation=(1, 2), dimension_numbers=("NHWC", "HWIO", "NHWC")
        ),
        aotkit.spec("f32[1,8,8,3]"),
        aotkit.spec("f32[3,3,3,4]"),
    ).as_text()
    assert text.count("stablehlo.convolution") == 1
    assert "dim_numbers = [b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f]" in text
    assert (
        "window = {stride = [2, 1], pad = [[0, 1], [2, 2]], lhs_dilate = [1, 1], "
        "rhs_dilate = [1, 2]}" in text
    )
    assert "precision_config = [#stablehlo<precision HIGHEST>" in text


# --- errors -----------------------------------------------------------------------------------

X4 = aotkit.spec("f32[1,2,5,5]")
W4 = aotkit.spec("f32[3,2,3,3]")


def _conv(**kw):
    args = {"window_strides": (1, 1), "padding": "VALID", **kw}
    return lambda: aotkit.lower(lambda a, b: nn.conv_general_dilated(a, b, **args), X4, W4)


def _on(spec, fn):
    return lambda: aotkit.lower(fn, aotkit.spec(spec))


ERRORS = [
    pytest.param(
        _conv(window_strides=(1, 0)),
        ValueError,
        r"conv_general_dilated \(at .*\): window_strides must be a sequence of 2 "
        r"ints >= 1 \(one per spatial dimension\), got \(1, 0\)",
        id="window-strides-must-be-a-sequence-of-2-i",
    ),
    pytest.param(
        _conv(rhs_dilation=3),
        ValueError,
        r"rhs_dilation must be a sequence of 2 ints >= 1 .*got 3",
        id="rhs-dilation-must-be-a-sequence-of-2-int",
    ),
    pytest.param(
        _conv(padding="FULL"),
        ValueError,
        r"conv_general_dilated \(at .*\): unknown padding 'FULL'; use 'SAME', "
        r"'SAME_LOWER', 'VALID' or a sequence of \(low, high\) pairs",
        id="unknown-padding-full-use-same-same-lower",
    ),
    pytest.param(
        _conv(padding=((1, 1),)),
        ValueError,
        r"conv_general_dilated \(at .*\): padding must be 'SAME', 'SAME_LOWER', "
        r"'VALID' or a sequence of 2 \(low, high\) int pairs, got \(\(1, 1\),\)",
        id="padding-must-be-same-same-lower-valid-or",
    ),
    pytest.param(
        _conv(dimension_numbers=("NHWC", "HWIO")),
        ValueError,
        r"conv_general_dilated \(at .*\): dimension_numbers \('NHWC', 'HWIO'\) do "
        r"not describe arrays of 4 dimensions; pass three layout strings",
        id="dimension-numbers-nhwc-hwio-do-not-descr",
    ),
    pytest.param(
        _conv(dimension_numbers=("NHWC", "HWIO", "NHWD")),
        ValueError,
        r"dimension_numbers .* do not describe arrays of 4 dimensions",
        id="dimension-numbers-do-not-describe-arrays",
    ),
    pytest.param(
        _conv(precision="fast"),
        ValueError,
        r"conv_general_dilated \(at .*\): unknown precision 'fast'; use None, "
        r"'default' \(or 'bfloat16', 'fastest'\), 'high' \(or 'tensorfloat32', 'bfloat16_3x'\), "
        r"'highest' \(or 'float32'\), a jax.lax.Precision member, or a pair of two of these",
        id="unknown-precision-fast-use-none-default",
    ),
    pytest.param(
        _conv(preferred_element_type=np.float16),
        TypeError,
        r"conv_general_dilated \(at .*\): preferred_element_type float16 must be "
        r"a float32 or a wider dtype of the same kind",
        id="preferred-element-type-float16-must-be-a",
    ),
    pytest.param(
        lambda: aotkit.lower(lambda a: nn.conv(a, a, (1,), "VALID"), aotkit.spec("bool[1,1,3]")),
        TypeError,
        r"conv_general_dilated \(at .*\): convolution of booleans is not "
        r"supported; cast the operands",
        id="convolution-of-booleans-is-not-supported",
    ),
    pytest.param(
        lambda: aotkit.lower(
            lambda a, b: nn.conv(a, b, (1,), "VALID"), aotkit.spec("f32[1,2,3]"), W4
        ),
        ValueError,
        r"conv_general_dilated \(at .*\): lhs \(1, 2, 3\) and rhs \(3, 2, 3, 3\) "
        r"must have the same number of dimensions, at least 2",
        id="lhs-1-2-3-and-rhs-3-2-3-3-must-have-the",
    ),
    pytest.param(
        _conv(padding="SAME", lhs_dilation=(2, 1)),
        ValueError,
        r"conv_general_dilated \(at .*\): padding 'SAME' with lhs_dilation \(2, "
        r"1\) is ambiguous; pass explicit \(low, high\) pairs, or use "
        r"conv_transpose",
        id="padding-same-with-lhs-dilation-2-1-is-am",
    ),
    pytest.param(
        _conv(padding=((0, 0), (-6, 0))),
        ValueError,
        r"conv_general_dilated \(at .*\): padding \(-6, 0\) of spatial dimension "
        r"1 removes more than its size 5",
        id="padding-6-0-of-spatial-dimension-1-remov",
    ),
    pytest.param(
        _conv(feature_group_count=0),
        ValueError,
        r"conv_general_dilated \(at .*\): feature_group_count must be a positive "
        r"int, got 0",
        id="feature-group-count-must-be-a-positive-i",
    ),
    pytest.param(
        _conv(feature_group_count=2, batch_group_count=3),
        ValueError,
        r"feature_group_count 2 and batch_group_count 3 are both > 1; at most one "
        r"of them may be",
        id="feature-group-count-2-and-batch-group-co",
    ),
    pytest.param(
        _conv(feature_group_count=2),
        ValueError,
        r"conv_general_dilated \(at .*\): the input has 2 features, which "
        r"feature_group_count 2 must divide into groups of the kernel's 2 input "
        r"features",
        id="the-input-has-2-features-which-feature-g",
    ),
    pytest.param(
        _conv(batch_group_count=3),
        ValueError,
        r"the kernel's 3 output features \(and, for batch groups, the batch of "
        r"1\) must be multiples of feature_group_count 1 and batch_group_count 3",
        id="the-kernel-s-3-output-features-and-for-b",
    ),
    pytest.param(
        lambda: aotkit.lower(
            lambda a: nn.conv_transpose(a, a, (1,) * 4, "SAME"), aotkit.spec("f32[1,1,1,1,1,1]")
        ),
        ValueError,
        r"conv_transpose \(at .*\): no default layout for lhs \(1, 1, 1, 1, 1, "
        r"1\) and rhs \(1, 1, 1, 1, 1, 1\); pass dimension_numbers",
        id="no-default-layout-for-lhs-1-1-1-1-1-1-an",
    ),
    pytest.param(
        lambda: aotkit.lower(lambda a, b: nn.conv_transpose(a, b, (1, 1), "SAME_LOWER"), X4, W4),
        ValueError,
        r"conv_transpose \(at .*\): unknown padding 'SAME_LOWER'; use 'SAME', "
        r"'VALID' or a sequence of \(low, high\) pairs",
        id="unknown-padding-same-lower-use-same-vali",
    ),
    pytest.param(
        _on("f32[4]", lambda a: aotkit.lax.reduce_window(a, 0.0, lambda x, y: x + y, (2,))),
        NotImplementedError,
        r"reduce_window \(at .*\): computation <function .*> is not supported; "
        r"pass 'add', 'max', 'min' or 'mul'",
        id="computation-function-is-not-supported-pa",
    ),
    pytest.param(
        _on("f32[3]", lambda a: nn.softmax(a, where=np.array([1, 0, 1]))),
        TypeError,
        r"softmax \(at .*\): where= must be a boolean mask, got dtype int64; "
        r"compare first",
        id="where-must-be-a-boolean-mask-got-dtype-i",
    ),
    pytest.param(
        _on("i32[3]", lambda a: nn.one_hot(a, 3.0)),
        TypeError,
        r"one_hot \(at .*\): num_classes must be a static int, got 3\.0; the "
        r"number of classes fixes the result's shape",
        id="num-classes-must-be-a-static-int-got-30",
    ),
    pytest.param(
        _on("f32[3]", lambda a: nn.dropout(ar.key(0), 1.5, a)),
        ValueError,
        r"dropout \(at .*\): rate must be a static Python number in \[0, 1\], got "
        r"1\.5",
        id="rate-must-be-a-static-python-number-in-0",
    ),
    pytest.param(
        _on("f32[4,4]", lambda a: nn.max_pool(a, (2, 2))),
        ValueError,
        r"max_pool \(at .*\): window_shape \(2, 2\) needs an input of shape "
        r"\(\*batch, \*spatial, features\) with one spatial dimension per window "
        r"dimension, got an input of shape \(4, 4\)",
        id="window-shape-2-2-needs-an-input-of-shape",
    ),
    pytest.param(
        _on("f32[1,4,4,1]", lambda a: nn.avg_pool(a, (2, 2), strides=(1,))),
        ValueError,
        r"avg_pool \(at .*\): strides \(1,\) must have one entry per window "
        r"dimension \(2\)",
        id="strides-1-must-have-one-entry-per-window",
    ),
]


@pytest.mark.parametrize("fn,exc,pattern", ERRORS)
def test_errors(fn, exc, pattern):
    with pytest.raises(exc, match=pattern):
        fn()


def _window_model(x, init, op, window, pad):
    """NumPy: each window's real elements reduced, then `init` combined in once."""
    ufunc = {"add": np.add, "max": np.maximum, "min": np.minimum, "mul": np.multiply}[op]
    n = len(x)
    out = []
    for start in range(-pad[0], n + pad[1] - window + 1):
        real = x[max(start, 0) : min(start + window, n)]
        out.append(ufunc(ufunc.reduce(real), init) if len(real) else init)
    return np.array(out, x.dtype)


@pytest.mark.parametrize("backend", ["cpu", "interpreter"])
@pytest.mark.parametrize("op", ["add", "max", "min", "mul"])
@pytest.mark.parametrize("traced_init", [False, True], ids=["constant", "traced"])
def test_reduce_window_combines_a_non_identity_init_once_per_window(backend, op, traced_init):
    """Padded windows too, where StableHLO's spec pads with the init and XLA's compilers
    apply it as often as they split the window: the same values on every backend."""
    from aotkit import lax as alax

    x = np.array([0.5, -2.0, 1.5, 3.0, -1.0, 2.5], np.float32)
    init = np.float32(0.75)
    pad = (2, 3)

    def f(x, c):
        return alax.reduce_window(x, c if traced_init else init, op, (3,), (1,), (pad,))

    got = aotkit.jit(f, backend=backend)(x, init)
    assert_matches(got, _window_model(x, init, op, 3, pad), f"{op} on {backend}")
