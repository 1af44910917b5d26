"""The window and convolution family under aotkit's transforms: `stablehlo.convolution`,
`stablehlo.reduce_window` and `stablehlo.select_and_scatter` (aotkit/transforms/windows.py).

Each case is an aotkit.numpy / aotkit.lax / aotkit.nn program and its jax.lax twin; the
oracle (tests/transforms/oracle.py) checks aotkit.jvp, aotkit.vjp and aotkit.vmap against
jax.jvp, jax.vjp and jax.vmap, central differences in float64 and the transpose identity,
per case and dtype. Then: programs JAX lowered (its own pools, convolutions and their
gradients, with select_and_scatter and pads) transformed by `Lowered.grad/jvp/vmap`, a CNN
training step, and the errors of what the rules do not cover.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import aotkit
import aotkit.lax as alax
import aotkit.nn as ann
import aotkit.numpy as anp
from aotkit.transforms import TransformError
from tests.transforms.oracle import Case, Family

F32, F64 = np.dtype(np.float32), np.dtype(np.float64)
HIGHEST = lax.Precision.HIGHEST


def normal(*shapes):
    return lambda rng, dtype: tuple(rng.standard_normal(s).astype(dtype) for s in shapes)


# --- convolutions ---------------------------------------------------------------------------------


def conv_case(lhs, rhs, in_axes=(0, 0), **params) -> Case:
    """`conv_general_dilated(lhs, rhs, **params)` in aotkit and JAX, vmapped over `in_axes`."""
    params.setdefault("window_strides", (1,) * (len(lhs) - 2))
    params.setdefault("padding", "VALID")
    return Case(
        functools.partial(alax.conv_general_dilated, **params),
        functools.partial(lax.conv_general_dilated, precision=HIGHEST, **params),
        normal(lhs, rhs),
        in_axes=in_axes,
    )


LHS, RHS, BOTH = (0, None), (None, 0), (0, 0)
NHWC = ("NHWC", "HWIO", "NHWC")

# Each case varies several parameters at once (every XLA kernel costs a compile); the
# groups' cases take every branch of the batching rule: the input, the kernel or both
# batched, with no groups, feature groups or batch groups.
CONVOLUTIONS = {
    "2d_same[both]": conv_case((2, 3, 6, 5), (4, 3, 3, 2), BOTH, padding="SAME"),
    "2d_explicit_padding[rhs]": conv_case(
        (2, 2, 7, 6), (3, 2, 2, 3), RHS, window_strides=(2, 1), padding=((2, -1), (0, 2))
    ),
    "feature_groups_rhs_dilation[lhs]": conv_case(
        (2, 4, 7, 6),
        (6, 2, 2, 3),
        LHS,
        padding="SAME",
        rhs_dilation=(3, 2),
        feature_group_count=2,
    ),
    "depthwise_nhwc[rhs]": conv_case(
        (2, 5, 5, 3),
        (3, 3, 1, 3),
        RHS,
        window_strides=(2, 1),
        padding="SAME",
        dimension_numbers=NHWC,
        feature_group_count=3,
    ),
    "feature_groups_lhs_dilation[both]": conv_case(
        (1, 4, 4, 5),
        (4, 2, 3, 2),
        BOTH,
        padding=((2, 1), (1, 0)),
        lhs_dilation=(2, 3),
        feature_group_count=2,
    ),
    "batch_groups_stride[lhs]": conv_case(
        (4, 3, 5, 4), (6, 3, 2, 2), LHS, window_strides=(2, 1), batch_group_count=2
    ),
    "batch_groups_same[rhs]": conv_case(
        (4, 2, 5, 4), (4, 2, 3, 2), RHS, padding="SAME", batch_group_count=2
    ),
    "batch_groups_nhwc[both]": conv_case(
        (4, 5, 4, 2),
        (2, 3, 2, 6),
        BOTH,
        padding=((1, -1), (0, 1)),
        dimension_numbers=NHWC,
        batch_group_count=2,
    ),
    "1d_stride_valid[lhs]": conv_case((2, 3, 9), (4, 3, 3), LHS, window_strides=(2,)),
    "3d[both]": conv_case(
        (1, 2, 4, 5, 4),
        (3, 2, 2, 3, 2),
        BOTH,
        window_strides=(1, 2, 1),
        padding="SAME",
        rhs_dilation=(1, 1, 2),
    ),
    "mixed_layouts[lhs]": conv_case(
        (2, 3, 6, 5),
        (3, 2, 3, 4),
        LHS,
        padding="SAME",
        dimension_numbers=("NCHW", "HWIO", "NHWC"),
    ),
    "conv[rhs]": Case(
        lambda x, w: alax.conv(x, w, (1, 2), "SAME"),
        lambda x, w: lax.conv(x, w, (1, 2), "SAME", precision=HIGHEST),
        normal((2, 3, 5, 6), (2, 3, 2, 2)),
        in_axes=RHS,
    ),
    "conv_transpose_kernel[both]": Case(
        lambda x, w: alax.conv_transpose(x, w, (2, 2), "SAME", transpose_kernel=True),
        lambda x, w: lax.conv_transpose(
            x, w, (2, 2), "SAME", transpose_kernel=True, precision=HIGHEST
        ),
        normal((1, 3, 4, 2), (3, 3, 3, 2)),
        in_axes=BOTH,
    ),
}


_GROUPED = {"window_strides": (2, 1), "padding": ((1, 0), (0, 1)), "rhs_dilation": (1, 2)}
_conv_a = functools.partial(alax.conv_general_dilated, feature_group_count=2, **_GROUPED)
_conv_j = functools.partial(
    lax.conv_general_dilated, feature_group_count=2, precision=HIGHEST, **_GROUPED
)
# The gradient's derivatives: those of the transposed convolutions (batch groups).
CONVOLUTIONS["grad_feature_groups[both]"] = Case(
    lambda x, w: aotkit.grad(lambda x, w: anp.sum(anp.sin(_conv_a(x, w))), (0, 1))(x, w),
    lambda x, w: jax.grad(lambda x, w: jnp.sum(jnp.sin(_conv_j(x, w))), (0, 1))(x, w),
    normal((2, 4, 5, 5), (6, 2, 2, 3)),
    in_axes=BOTH,
)


# --- window reductions ----------------------------------------------------------------------------

INF = np.inf


def with_zeros(shape, *where):
    """Normal samples with exact zeros at `where` (one zero and two in one window)."""

    def make(rng, dtype):
        x = rng.standard_normal(shape).astype(dtype)
        for i in where:
            x[i] = 0
        return (x,)

    return make


def rw_case(x_shape, init, kind, *window, in_axes=None, make=None) -> Case:
    """`reduce_window(x, init, kind, *window)` in aotkit and JAX (one operand)."""
    jax_kind = {"add": lax.add, "max": lax.max, "min": lax.min}[kind]
    return Case(
        lambda x: alax.reduce_window(x, init, kind, *window),
        lambda x: lax.reduce_window(x, np.asarray(init, x.dtype), jax_kind, *window),
        make or normal(x_shape),
        in_axes=in_axes,
    )


def _product_2x2(x, pad_high):
    x = jnp.pad(x, ((0, pad_high), (0, pad_high)), constant_values=1)
    return x[:-1, :-1] * x[1:, :-1] * x[:-1, 1:] * x[1:, 1:]


SUM_WINDOW = ((2, 3), (2, 1), ((1, 0), (2, 1)), (2, 1), (1, 2))
WINDOWS = {
    "max_pool_nhwc": Case(
        lambda x: ann.max_pool(x, (2, 2), (2, 2)),
        lambda x: lax.reduce_window(x, -INF, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID"),
        normal((2, 4, 6, 3)),
    ),
    "max_pool_same_stride": Case(
        lambda x: ann.max_pool(x, (3, 3), (2, 2), "SAME"),
        lambda x: lax.reduce_window(x, -INF, lax.max, (1, 3, 3, 1), (1, 2, 2, 1), "SAME"),
        normal((1, 5, 5, 2)),
    ),
    "max_pool_nchw": rw_case((2, 3, 4, 6), -INF, "max", (1, 1, 2, 2), (1, 1, 2, 2), "VALID"),
    "max_pool_1d": Case(
        lambda x: ann.max_pool(x, (3,), (2,), "SAME"),
        lambda x: lax.reduce_window(x, -INF, lax.max, (1, 3, 1), (1, 2, 1), "SAME"),
        normal((2, 7, 3)),
    ),
    "min_explicit_padding": rw_case((5, 6), INF, "min", (2, 3), (1, 2), ((1, 0), (1, 1))),
    # Every window holds at least one real element, so none is -inf.
    "max_base_dilation": rw_case((5, 4), -INF, "max", (3, 2), (2, 1), ((1, 1), (0, 0)), (2, 1)),
    "max_from_zero": Case(
        lambda x: alax.reduce_window(x, 0.0, "max", (2, 2), (1, 1), "SAME"),
        lambda x: jnp.maximum(lax.reduce_window(x, -INF, lax.max, (2, 2), (1, 1), "SAME"), 0),
        normal((4, 5)),
    ),
    "max_init_with_tangent": Case(
        lambda x, c: alax.reduce_window(x, c, "max", (2, 2), (1, 1), "SAME"),
        lambda x, c: jnp.maximum(lax.reduce_window(x, -INF, lax.max, (2, 2), (1, 1), "SAME"), c),
        normal((4, 5), ()),
        in_axes=(0, None),
    ),
    "sum_dilations": rw_case((4, 5), 0.0, "add", *SUM_WINDOW),
    "sum_init_with_tangent": Case(
        lambda x, c: alax.reduce_window(x, c, "add", *SUM_WINDOW),
        # aotkit combines a non-identity init once into each window, on every backend (XLA
        # applies it as often as its compiler's tiling takes: once on the CPU, more on a TPU).
        lambda x, c: lax.reduce_window(x, np.asarray(0, x.dtype), lax.add, *SUM_WINDOW) + c,
        normal((4, 5), ()),
        in_axes=(0, None),
    ),
    "avg_pool_same": Case(
        lambda x: ann.avg_pool(x, (3, 3), (1, 1), "SAME"),
        lambda x: lax.reduce_window(x, 0.0, lax.add, (1, 3, 3, 1), (1, 1, 1, 1), "SAME") / 9,
        normal((2, 4, 5, 3)),
    ),
    "avg_pool_real_count": Case(
        lambda x: ann.avg_pool(x, (2, 2), (2, 2), "SAME", count_include_pad=False),
        lambda x: (
            lax.reduce_window(x, 0.0, lax.add, (1, 2, 2, 1), (1, 2, 2, 1), "SAME")
            / lax.reduce_window(jnp.ones_like(x), 0.0, lax.add, (1, 2, 2, 1), (1, 2, 2, 1), "SAME")
        ),
        normal((2, 5, 5, 3)),
    ),
    "avg_pool_3d": Case(
        lambda x: ann.avg_pool(x, (2, 2, 2), (2, 1, 2)),
        lambda x: lax.reduce_window(x, 0.0, lax.add, (1, 2, 2, 2, 1), (1, 2, 1, 2, 1), "VALID") / 8,
        normal((1, 4, 5, 4, 2)),
    ),
    "cumsum": Case(
        lambda x: anp.cumsum(x, axis=1), lambda x: jnp.cumsum(x, axis=1), normal((3, 5))
    ),
    "cumprod_with_zeros": Case(
        lambda x: anp.cumprod(x, axis=1),
        lambda x: jnp.cumprod(x, axis=1),
        with_zeros((3, 5), (0, 2), (1, 1), (1, 3)),
    ),
    "cummax": Case(
        lambda x: np.maximum.accumulate(x, axis=0),
        lambda x: lax.cummax(x, axis=0),
        normal((5, 3)),
    ),
    "product_2x2_padded": Case(
        lambda x: alax.reduce_window(x, 1.0, "mul", (2, 2), (1, 1), ((0, 1), (0, 1))),
        lambda x: _product_2x2(x, 1),
        with_zeros((4, 4), (0, 0), (1, 1), (3, 3)),
    ),
}


# --- select_and_scatter and select pairs: second derivatives of max pools ------------------------


def _pool_pair(dims, strides, padding, base=None):
    window = (dims, strides, padding, base)
    return (
        lambda x: alax.reduce_window(x, -INF, "max", *window),
        lambda x: lax.reduce_window(x, -INF, lax.max, *window),
    )


_POOLS = {
    "nhwc": ((1, 4, 6, 2), _pool_pair((1, 2, 2, 1), (1, 2, 2, 1), "VALID")),
    "same": ((1, 5, 5, 2), _pool_pair((1, 3, 3, 1), (1, 2, 2, 1), "SAME")),
    "base_dilation": ((5, 4), _pool_pair((3, 2), (2, 1), ((1, 1), (0, 0)), (2, 1))),
}


def _pool_vjp_case(shape, pools, in_axes=None) -> Case:
    """The pool's backward pass (a select_and_scatter) as a function of the input and the
    cotangent: linear in the cotangent, piecewise constant in the input."""
    pool_a, pool_j = pools
    out_shape = jax.eval_shape(pool_j, jax.ShapeDtypeStruct(shape, np.float32)).shape
    return Case(
        lambda x, g: aotkit.vjp(pool_a, x)[1](g)[0],
        lambda x, g: jax.vjp(pool_j, x)[1](g)[0],
        normal(shape, out_shape),
        in_axes=in_axes,
    )


def _pool_jvp_case(shape, pools) -> Case:
    """The pool's forward-mode tangent (a reduce_window of (value, tangent) pairs)."""
    pool_a, pool_j = pools
    return Case(
        lambda x, t: aotkit.jvp(pool_a, (x,), (t,))[1],
        lambda x, t: jax.jvp(pool_j, (x,), (t,))[1],
        normal(shape, shape),
    )


SELECTIONS = {
    "vjp_nhwc[cotangent]": _pool_vjp_case(*_POOLS["nhwc"], in_axes=(None, 0)),
    "vjp_same[input]": _pool_vjp_case(*_POOLS["same"], in_axes=(0, None)),
    "vjp_base_dilation[both]": _pool_vjp_case(*_POOLS["base_dilation"]),
    "jvp_same": _pool_jvp_case(*_POOLS["same"]),
    "jvp_base_dilation": _pool_jvp_case(*_POOLS["base_dilation"]),
}


# --- the checks, per family, case and dtype -------------------------------------------------------

FAMILIES = {
    "convolution": Family(CONVOLUTIONS),
    "window": Family(WINDOWS, seed=1),
    "selection": Family(SELECTIONS, seed=2),
}
CASES = [(f, n) for f, family in FAMILIES.items() for n in family.cases]
IDS = [f"{f}:{n}" for f, n in CASES]


@pytest.mark.parametrize("dtype", [F32, F64], ids=["f32", "f64"])
@pytest.mark.parametrize(("family", "name"), CASES, ids=IDS)
@pytest.mark.parametrize("check", ["primal", "jvp", "vjp", "vmap", "transpose"])
def test_against_jax(check, family, name, dtype):
    getattr(FAMILIES[family], f"check_{check}")(name, dtype)


@pytest.mark.parametrize(("family", "name"), CASES, ids=IDS)
def test_central_differences(family, name):
    FAMILIES[family].check_fd(name, F64)


# --- on XLA: a CNN step, its per-example gradients and Hessians -----------------------------------

RNG = np.random.default_rng(7)


def f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def close(got, want, rtol=2e-5, atol=2e-5):
    got_leaves, want_leaves = jax.tree.leaves(got), jax.tree.leaves(want)
    assert len(got_leaves) == len(want_leaves)
    for g, w in zip(got_leaves, want_leaves, strict=True):
        g, w = np.asarray(g), np.asarray(w)
        assert g.dtype == w.dtype, (g.dtype, w.dtype)
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)


CNN_PARAMS = {"w": f32(3, 3, 3, 8) * 0.3, "b": f32(8) * 0.1, "dense": f32(8, 5) * 0.3}
IMAGES, LABELS = f32(4, 8, 8, 3), RNG.integers(0, 5, 4).astype(np.int32)


def cnn_loss(params, x, labels, np_, lax_, nn_):
    """conv + bias + relu + max pool + avg pool + dense + softmax cross-entropy."""
    h = lax_.conv_general_dilated(x, params["w"], (1, 1), "SAME", dimension_numbers=NHWC)
    h = np_.maximum(h + params["b"], 0)
    h = nn_["max_pool"](h)
    h = np_.mean(nn_["avg_pool"](h), axis=(1, 2))
    logits = h @ params["dense"]
    logits = logits - np_.max(logits, axis=1, keepdims=True)
    log_p = logits - np_.log(np_.sum(np_.exp(logits), axis=1, keepdims=True))
    return -np_.mean(np_.sum(log_p * (np_.arange(5) == labels[:, None]), axis=1))


AOTKIT_POOLS = {
    "max_pool": lambda h: ann.max_pool(h, (2, 2), (2, 2)),
    "avg_pool": lambda h: ann.avg_pool(h, (3, 3), (1, 1), "SAME"),
}
JAX_POOLS = {
    "max_pool": lambda h: lax.reduce_window(h, -INF, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID"),
    "avg_pool": lambda h: (
        lax.reduce_window(h, 0.0, lax.add, (1, 3, 3, 1), (1, 1, 1, 1), "SAME") / 9
    ),
}
loss_a = functools.partial(cnn_loss, np_=anp, lax_=alax, nn_=AOTKIT_POOLS)


def loss_j(params, x, labels):
    conv = functools.partial(lax.conv_general_dilated, precision=HIGHEST)
    lax_ = type("lax", (), {"conv_general_dilated": staticmethod(conv)})
    return cnn_loss(params, x, labels, jnp, lax_, JAX_POOLS)


def test_cnn_step_gradient_equals_jax():
    grads = aotkit.grad(loss_a)(CNN_PARAMS, IMAGES, LABELS)
    close(grads, jax.jit(jax.grad(loss_j))(CNN_PARAMS, IMAGES, LABELS))


def on_interpreter(fn, frontend="aotkit"):
    """`fn` run by the StableHLO interpreter: XLA would spend seconds compiling programs
    that run once on a few elements (the tests above run on XLA)."""
    return aotkit.jit(fn, frontend=frontend, backend="interpreter")


def test_cnn_per_example_gradients_equal_jax():
    # vmap(grad): the transposed convolutions and select_and_scatter, batched.
    def one(params, x, label):
        return loss_a(params, x[None], label[None])

    def one_j(params, x, label):
        return loss_j(params, x[None], label[None])

    got = on_interpreter(aotkit.vmap(aotkit.grad(one), in_axes=(None, 0, 0)))
    want = on_interpreter(jax.vmap(jax.grad(one_j), in_axes=(None, 0, 0)), "jax")
    close(got(CNN_PARAMS, IMAGES, LABELS), want(CNN_PARAMS, IMAGES, LABELS))


def _pooled(np_, pools, conv):
    def f(x, w):
        return np_.sum(np_.sin(pools["max_pool"](conv(x, w))))

    return f


_HESSIAN_CONV = {"window_strides": (1, 1), "padding": "SAME", "dimension_numbers": NHWC}
HESSIAN_A = _pooled(
    anp, AOTKIT_POOLS, functools.partial(alax.conv_general_dilated, **_HESSIAN_CONV)
)
HESSIAN_J = _pooled(
    jnp,
    JAX_POOLS,
    functools.partial(lax.conv_general_dilated, precision=HIGHEST, **_HESSIAN_CONV),
)


def test_hessian_of_conv_and_max_pool_equals_jax():
    # jacfwd(jacrev): the tangents of the transposed ops (select_and_scatter, convolutions).
    x, w = f32(1, 4, 4, 2), f32(2, 2, 2, 2)
    got = on_interpreter(aotkit.hessian(HESSIAN_A, (0, 1)))(x, w)
    close(got, on_interpreter(jax.hessian(HESSIAN_J, (0, 1)), "jax")(x, w), 1e-4, 1e-4)


def test_jacrev_of_jacfwd_of_a_max_pool_equals_jax_on_xla():
    # The transposes of forward mode's select pairs (a variadic reduce_window), which
    # XLA's CPU compiles and runs as JAX's own.
    def pool_a(x):
        return anp.sin(ann.max_pool(x, (3, 3), (2, 2), "SAME"))

    def pool_j(x):
        return jnp.sin(lax.reduce_window(x, -INF, lax.max, (1, 3, 3, 1), (1, 2, 2, 1), "SAME"))

    x = f32(1, 5, 5, 1)
    close(aotkit.jacrev(aotkit.jacfwd(pool_a))(x), jax.jit(jax.jacrev(jax.jacfwd(pool_j)))(x))


# --- programs JAX lowered: its pools, convolutions and gradients ---------------------------------


def jax_cnn(params, x):
    h = lax.conv_general_dilated(
        x, params["w"], (2, 1), "SAME", dimension_numbers=NHWC, feature_group_count=3
    )
    h = jax.nn.relu(h)
    h = lax.reduce_window(h, -jnp.inf, lax.max, (1, 3, 3, 1), (1, 2, 2, 1), "SAME")
    h = lax.reduce_window(h, 0.0, lax.add, (1, 2, 2, 1), (1, 1, 1, 1), "VALID") / 4
    return jnp.sum(jnp.cumsum(h, axis=3) ** 2)


JAX_PARAMS = {"w": f32(3, 3, 1, 6) * 0.5}
JAX_X, JAX_XS = f32(2, 8, 7, 3), f32(3, 2, 8, 7, 3)


def interpret(lowered):
    return lowered.compile(backend="interpreter")


@pytest.fixture(scope="module")
def jax_programs():
    return {
        "cnn": aotkit.jit(jax_cnn, frontend="jax").lower(JAX_PARAMS, JAX_X),
        "grad": aotkit.jit(jax.grad(jax_cnn, (0, 1)), frontend="jax").lower(JAX_PARAMS, JAX_X),
    }


def test_a_jax_cnn_is_differentiated_and_batched(jax_programs):
    lowered = jax_programs["cnn"]
    text = lowered.as_text()
    assert "stablehlo.convolution" in text and "stablehlo.reduce_window" in text
    args = (JAX_PARAMS, JAX_X)
    want = on_interpreter(jax.grad(jax_cnn, (0, 1)), "jax")(*args)
    close(interpret(lowered.grad((0, 1)))(*args), want, 1e-4, 1e-4)
    tangents = jax.tree.map(np.ones_like, args)
    want = on_interpreter(lambda a, t: jax.jvp(jax_cnn, a, t), "jax")(args, tangents)
    close(interpret(lowered.jvp())(args, tangents), want, 1e-4, 1e-4)
    batched = interpret(lowered.vmap(in_axes=(None, 0), axis_size=3))
    want = on_interpreter(jax.vmap(jax_cnn, (None, 0)), "jax")(JAX_PARAMS, JAX_XS)
    close(batched(JAX_PARAMS, JAX_XS), want, 1e-4)


def test_jax_gradient_program_is_differentiated_again(jax_programs):
    # JAX's backward pass holds select_and_scatter (with its pads) and transposed
    # convolutions: their tangents, transposes and batching.
    lowered = jax_programs["grad"]
    assert "stablehlo.select_and_scatter" in lowered.as_text()
    grad = jax.grad(jax_cnn, (0, 1))
    args = (JAX_PARAMS, JAX_X)
    tangents = jax.tree.map(lambda a: f32(*a.shape), args)
    want = on_interpreter(lambda a, t: jax.jvp(grad, a, t), "jax")(args, tangents)
    close(interpret(lowered.jvp())(args, tangents), want, 1e-4, 1e-4)
    cts = jax.tree.map(lambda a: f32(*a.shape), args)

    def vjp(a, ct):
        out, pullback = jax.vjp(grad, *a)
        return out, pullback(ct)

    want = on_interpreter(vjp, "jax")(args, cts)
    close(interpret(lowered.vjp())(args, cts), want, 1e-4, 1e-4)
    batched = interpret(lowered.vmap(in_axes=(None, 0), axis_size=3))
    want = on_interpreter(jax.vmap(grad, (None, 0)), "jax")(JAX_PARAMS, JAX_XS)
    close(batched(JAX_PARAMS, JAX_XS), want, 1e-4, 1e-4)


# --- a reversed window, and what the rules refuse ------------------------------------------------

REVERSED_CONV = """
func.func @main(%x: tensor<1x2x5x4xf32>, %w: tensor<3x2x2x3xf32>) -> tensor<1x3x4x2xf32> {
  %0 = stablehlo.convolution(%x, %w)
    dim_numbers = [b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1],
    window = {stride = [1, 1], pad = [[0, 0], [0, 0]], lhs_dilate = [1, 1],
              rhs_dilate = [1, 1], reverse = [true, false]}
    {batch_group_count = 1 : i64, feature_group_count = 1 : i64}
    : (tensor<1x2x5x4xf32>, tensor<3x2x2x3xf32>) -> tensor<1x3x4x2xf32>
  return %0 : tensor<1x3x4x2xf32>
}
"""


def _reversed_twin(x, w):
    return lax.conv_general_dilated(x, w[:, :, ::-1, :], (1, 1), "VALID", precision=HIGHEST)


def test_a_reversed_window_is_a_reversed_kernel():
    lowered = aotkit.load_module(REVERSED_CONV.encode())
    args = (f32(1, 2, 5, 4), f32(3, 2, 2, 3))
    tangents = (f32(1, 2, 5, 4), f32(3, 2, 2, 3))
    want = on_interpreter(lambda a, t: jax.jvp(_reversed_twin, a, t), "jax")(args, tangents)
    close(interpret(lowered.jvp())(args, tangents), want)
    ct = f32(1, 3, 4, 2)
    want = on_interpreter(lambda a, c: jax.vjp(_reversed_twin, *a)[1](c), "jax")(args, ct)
    close(interpret(lowered.vjp())(args, ct)[1], want)
    xs, ws = f32(3, 1, 2, 5, 4), f32(3, 3, 2, 2, 3)
    close(
        interpret(lowered.vmap(axis_size=3))(xs, ws),
        on_interpreter(jax.vmap(_reversed_twin), "jax")(xs, ws),
    )


def _max_with_window_dilation(x):
    return alax.reduce_window(x, -INF, "max", (2, 2), (1, 1), "VALID", window_dilation=(1, 2))


DILATED_MAX = (
    r"stablehlo\.reduce_window at .*test_windows\.py:\d+ takes the max or min of windows "
    r"with window dilation \[1, 2\]; reverse mode scatters the cotangent with "
    r"stablehlo\.select_and_scatter, which has no window dilation: differentiate it in "
    r"forward mode \(aotkit\.jvp, aotkit\.jacfwd\), or without window dilation"
)


def test_max_with_window_dilation_has_a_forward_mode_but_no_reverse_mode():
    x, t = f32(4, 6), f32(4, 6)

    def twin(x):
        return lax.reduce_window(x, -INF, lax.max, (2, 2), (1, 1), "VALID", window_dilation=(1, 2))

    want = on_interpreter(lambda x, t: jax.jvp(twin, (x,), (t,)), "jax")(x, t)
    close(
        on_interpreter(lambda x, t: aotkit.jvp(_max_with_window_dilation, (x,), (t,)))(x, t), want
    )
    with pytest.raises(TransformError, match="grad: " + DILATED_MAX):
        aotkit.grad(lambda x: anp.sum(_max_with_window_dilation(x)))(x)
    # Forward mode's select pairs, transposed, the same.
    with pytest.raises(TransformError, match="vjp: " + DILATED_MAX):
        aotkit.jit(
            lambda x, t: aotkit.vjp(
                lambda t: aotkit.jvp(_max_with_window_dilation, (x,), (t,))[1], t
            )[0]
        ).lower(x, t)


def test_a_window_product_from_an_init_with_a_tangent_is_differentiated():
    """aotkit.lax multiplies the init into each window after the reduction."""
    x = f32(5)
    window = np.array([x[i] * x[i + 1] for i in range(4)])
    got = aotkit.grad(lambda c: anp.sum(alax.reduce_window(x, c, "mul", (2,), (1,))))(np.float32(2))
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, window.sum(), rtol=1e-6)


def test_a_window_product_from_an_init_with_a_tangent_is_refused():
    """A module's own reduce_window (here JAX's) keeps its init inside the window."""
    x = f32(5)

    def f(c):
        return jnp.sum(lax.reduce_window(x, c, lax.mul, (2,), (1,)))

    with pytest.raises(
        TransformError,
        match=r"grad: stablehlo\.reduce_window at .*test_windows\.py:\d+ multiplies "
        r"windows from an init value that has a tangent; aotkit differentiates window "
        r"products \(cumprod\) whose init is a constant: multiply by the init after the "
        r"reduce_window instead",
    ):
        aotkit.grad(f)(np.float32(2))


def _window_module(op: str) -> aotkit.Lowered:
    return aotkit.load_module(f"func.func @main{op}".encode())


SUBTRACTING_WINDOWS = """(%x: tensor<6xf32>) -> tensor<5xf32> {
  %c = stablehlo.constant dense<0.0> : tensor<f32>
  %0 = "stablehlo.reduce_window"(%x, %c) <{window_dimensions = array<i64: 2>}> ({
  ^bb0(%a: tensor<f32>, %b: tensor<f32>):
    %d = stablehlo.subtract %a, %b : tensor<f32>
    stablehlo.return %d : tensor<f32>
  }) : (tensor<6xf32>, tensor<f32>) -> tensor<5xf32>
  return %0 : tensor<5xf32>
}"""

PAIRS_FROM_ZERO = """(%x: tensor<6xf32>, %t: tensor<6xf32>) -> tensor<5xf32> {
  %c = stablehlo.constant dense<0.0> : tensor<f32>
  %0:2 = "stablehlo.reduce_window"(%x, %t, %c, %c) <{window_dimensions = array<i64: 2>}> ({
  ^bb0(%a: tensor<f32>, %at: tensor<f32>, %b: tensor<f32>, %bt: tensor<f32>):
    %k = stablehlo.compare GE, %a, %b : (tensor<f32>, tensor<f32>) -> tensor<i1>
    %v = stablehlo.select %k, %a, %b : tensor<i1>, tensor<f32>
    %w = stablehlo.select %k, %at, %bt : tensor<i1>, tensor<f32>
    stablehlo.return %v, %w : tensor<f32>, tensor<f32>
  }) : (tensor<6xf32>, tensor<6xf32>, tensor<f32>, tensor<f32>) -> (tensor<5xf32>, tensor<5xf32>)
  return %0#1 : tensor<5xf32>
}"""


def _select_and_scatter(select: str, scatter: str) -> str:
    return f"""(%x: tensor<6xf32>, %s: tensor<3xf32>) -> tensor<6xf32> {{
  %c = stablehlo.constant dense<0.0> : tensor<f32>
  %0 = "stablehlo.select_and_scatter"(%x, %s, %c) <{{window_dimensions = array<i64: 2>,
       window_strides = array<i64: 2>}}> ({{
  ^bb0(%a: tensor<f32>, %b: tensor<f32>):
    {select}
  }}, {{
  ^bb0(%a: tensor<f32>, %b: tensor<f32>):
    %r = {scatter} %a, %b : tensor<f32>
    stablehlo.return %r : tensor<f32>
  }}) : (tensor<6xf32>, tensor<3xf32>, tensor<f32>) -> tensor<6xf32>
  return %0 : tensor<6xf32>
}}"""


SELECT_GE = """%k = stablehlo.compare GE, %a, %b : (tensor<f32>, tensor<f32>) -> tensor<i1>
    stablehlo.return %k : tensor<i1>"""
# Selects by the sign of a difference: not one comparison of the two arguments.
SELECT_BY_DIFFERENCE = """%d = stablehlo.subtract %a, %b : tensor<f32>
    %z = stablehlo.constant dense<0.0> : tensor<f32>
    %k = stablehlo.compare GE, %d, %z : (tensor<f32>, tensor<f32>) -> tensor<i1>
    stablehlo.return %k : tensor<i1>"""

AT = r" at [^;]+ "
REFUSED = {
    "subtracting_windows": (
        SUBTRACTING_WINDOWS,
        "jvp",
        r"jvp: stablehlo\.reduce_window" + AT + r"reduces windows of 1 operand\(s\) with a "
        r"region aotkit has no derivative for; its rules cover window sums, products, maxima "
        r"and minima of one operand, and reductions of \(key, values\.\.\.\) tuples that keep "
        r"the tuple of the greatest or least key",
    ),
    "pairs_from_zero": (
        PAIRS_FROM_ZERO,
        "jvp",
        r"jvp: stablehlo\.reduce_window" + AT + r"selects tuples from windows starting at an "
        r"init key that some element can lose to \(or an init with a tangent\); aotkit "
        r"differentiates such reductions from the identity of the selection \(-inf for the "
        r"greatest key, inf for the least\)",
    ),
    "scatter_by_max": (
        _select_and_scatter(SELECT_GE, "stablehlo.maximum"),
        "jvp",
        r"jvp: stablehlo\.select_and_scatter" + AT + r"is a select_and_scatter whose scatter "
        r"region does not add; aotkit differentiates select_and_scatter that adds \(the "
        r"gradient of a max or min pool\)",
    ),
    "select_by_difference": (
        _select_and_scatter(SELECT_BY_DIFFERENCE, "stablehlo.add"),
        "vjp",
        r"vjp: stablehlo\.select_and_scatter" + AT + r"selects with a region other than one "
        r"comparison \(GE, GT, LE or LT\) of its two arguments, which aotkit cannot "
        r"transpose; differentiate it in forward mode \(aotkit\.jvp, aotkit\.jacfwd\)",
    ),
}


@pytest.mark.parametrize("name", list(REFUSED))
def test_what_the_rules_refuse_is_an_error_that_names_the_op(name):
    op, transform, message = REFUSED[name]
    with pytest.raises(TransformError, match=message):
        getattr(_window_module(op), transform)()


def test_select_and_scatter_of_any_selection_has_a_forward_mode():
    # Linear in the source: its tangent is the op applied to the source's tangent.
    lowered = _window_module(_select_and_scatter(SELECT_BY_DIFFERENCE, "stablehlo.add"))
    x, s, t = f32(6), f32(3), f32(3)
    out, tangent = interpret(lowered.jvp())((x, s), (f32(6), t))
    run = interpret(lowered)
    close((out, tangent), (run(x, s), run(x, t)))


def test_bfloat16_convolution_accumulating_in_float32_keeps_its_dtypes():
    # JAX's mixed precision: bf16 operands, an f32 result (preferred_element_type); the
    # cotangents come back in bf16, as JAX's.
    def f(x, w):
        y = lax.conv_general_dilated(x, w, (1, 1), "SAME", preferred_element_type=jnp.float32)
        y = lax.reduce_window(
            y.astype(jnp.bfloat16), -INF, lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID"
        )
        return jnp.sum(y.astype(jnp.float32) ** 2)

    x, w = f32(2, 3, 4, 4).astype(jnp.bfloat16), f32(2, 3, 3, 3).astype(jnp.bfloat16)
    lowered = aotkit.jit(f, frontend="jax").lower(x, w)
    close(lowered.grad((0, 1)).compile()(x, w), jax.jit(jax.grad(f, (0, 1)))(x, w))


def test_jax_forward_mode_program_of_a_max_pool_is_reversed():
    # jax.jvp of a max pool lowers to a reduce_window of (value, tangent) pairs.
    def tangent(x, t):
        pool = JAX_POOLS["max_pool"]
        return jax.jvp(pool, (x,), (t,))[1]

    x, t, ct = f32(1, 4, 6, 2), f32(1, 4, 6, 2), f32(1, 2, 3, 2)
    lowered = aotkit.jit(tangent, frontend="jax").lower(x, t)
    assert ':2 = "stablehlo.reduce_window"' in lowered.as_text()

    def vjp(a, c):
        out, pullback = jax.vjp(tangent, *a)
        return out, pullback(c)

    want = on_interpreter(vjp, "jax")((x, t), ct)
    close(interpret(lowered.vjp())((x, t), ct), want)
