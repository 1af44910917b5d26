"""The transforms of elementwise ops: jvp, vjp and vmap of every unary and binary op the tracer
emits, against JAX on the jax.numpy twin, central differences (float64) and the transpose
identity; the ops whose tangent is zero by declaration; complex parts; ops that only JAX's
modules hold (clamp, round_nearest_afz, reduce_precision), through `Lowered.jvp`.

Each family runs as one traced program per dtype (tests/transforms/oracle.py); each test
checks one op, so a failure names the op and the dtype.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import aotkit
import aotkit.numpy as anp
from aotkit.tracing.core import bind1
from tests.transforms.oracle import Case, Family, assert_close, rule_tests

FLOATS = ["float32", "float64"]
SHAPE = (3, 4)


def uniform(lo, hi, shape=SHAPE):
    return lambda rng, dt: (rng.uniform(lo, hi, shape).astype(dt),)


def away_from_zero(lo=0.3, hi=2.0, shape=SHAPE):
    """Both signs, |x| in [lo, hi): smooth for abs, sign, cbrt."""

    def make(rng, dt):
        return ((rng.uniform(lo, hi, shape) * rng.choice([-1, 1], shape)).astype(dt),)

    return make


def off_grid(rng, dt):
    """Values a quarter away from integers and halves: floor, ceil and round are flat."""
    return ((rng.integers(-4, 4, SHAPE) + rng.choice([0.2, 0.3, 0.7, 0.8], SHAPE)).astype(dt),)


def _prim(name):
    return lambda x: bind1(name, x)


UNARY = {
    "sin": Case(anp.sin, jnp.sin, uniform(-3, 3)),
    "cos": Case(anp.cos, jnp.cos, uniform(-3, 3)),
    "tan": Case(anp.tan, jnp.tan, uniform(-1.2, 1.2)),
    "tanh": Case(anp.tanh, jnp.tanh, uniform(-3, 3)),
    "exp": Case(anp.exp, jnp.exp, uniform(-2, 2)),
    "exp2": Case(anp.exp2, jnp.exp2, uniform(-2, 2)),
    "expm1": Case(anp.expm1, jnp.expm1, uniform(-2, 2)),
    "log": Case(anp.log, jnp.log, uniform(0.2, 3)),
    "log2": Case(anp.log2, jnp.log2, uniform(0.2, 3)),
    "log10": Case(anp.log10, jnp.log10, uniform(0.2, 3)),
    "log1p": Case(anp.log1p, jnp.log1p, uniform(-0.5, 3)),
    "sqrt": Case(anp.sqrt, jnp.sqrt, uniform(0.2, 3)),
    "rsqrt": Case(_prim("rsqrt"), jax.lax.rsqrt, uniform(0.2, 3)),
    "cbrt": Case(anp.cbrt, jnp.cbrt, away_from_zero()),
    "logistic": Case(aotkit.nn.sigmoid, jax.nn.sigmoid, uniform(-4, 4)),
    "erf": Case(_prim("erf"), jax.lax.erf, uniform(-2, 2)),
    "erfc": Case(_prim("erfc"), jax.lax.erfc, uniform(-2, 2)),
    "erf_inv": Case(_prim("erf_inv"), jax.lax.erf_inv, uniform(-0.9, 0.9)),
    "lgamma": Case(_prim("lgamma"), jax.lax.lgamma, uniform(0.5, 4)),
    "digamma": Case(_prim("digamma"), jax.lax.digamma, uniform(0.5, 4)),
    "sinh": Case(anp.sinh, jnp.sinh, uniform(-2, 2)),
    "cosh": Case(anp.cosh, jnp.cosh, uniform(-2, 2)),
    "arcsin": Case(anp.arcsin, jnp.arcsin, uniform(-0.9, 0.9)),
    "arccos": Case(anp.arccos, jnp.arccos, uniform(-0.9, 0.9)),
    "arctan": Case(anp.arctan, jnp.arctan, uniform(-3, 3)),
    "arcsinh": Case(anp.arcsinh, jnp.arcsinh, uniform(-3, 3)),
    "arccosh": Case(anp.arccosh, jnp.arccosh, uniform(1.2, 3)),
    "arctanh": Case(anp.arctanh, jnp.arctanh, uniform(-0.9, 0.9)),
    "abs": Case(anp.abs, jnp.abs, away_from_zero()),
    "negative": Case(anp.negative, jnp.negative, uniform(-3, 3)),
    "square": Case(anp.square, jnp.square, uniform(-3, 3)),
    "reciprocal": Case(anp.reciprocal, jnp.reciprocal, away_from_zero()),
    "sign": Case(anp.sign, jnp.sign, away_from_zero()),
    "floor": Case(anp.floor, jnp.floor, off_grid),
    "ceil": Case(anp.ceil, jnp.ceil, off_grid),
    "round": Case(anp.round, jnp.round, off_grid),
    "trunc": Case(anp.trunc, jnp.trunc, off_grid),
    "relu": Case(aotkit.nn.relu, jax.nn.relu, away_from_zero()),
    "softplus": Case(aotkit.nn.softplus, jax.nn.softplus, uniform(-3, 3)),
    "gelu": Case(aotkit.nn.gelu, jax.nn.gelu, uniform(-3, 3)),
}


def pair(make_x, make_y):
    return lambda rng, dt: make_x(rng, dt) + make_y(rng, dt)


def with_ties(rng, dt):
    """x and a broadcast y equal to x's first row: every column has a tie."""
    x = rng.uniform(-2, 2, SHAPE).astype(dt)
    y = x[0].copy()
    x[1] = y - 1
    x[2] = y + 1
    return x, y


def clip_args(rng, dt):
    """x with entries exactly at its bounds (ties), and the bounds as arrays."""
    x = rng.uniform(-2, 2, SHAPE).astype(dt)
    lo = np.full(SHAPE[1:], -0.5, dt)
    hi = rng.uniform(0.5, 1, SHAPE[1:]).astype(dt)
    x[0] = lo
    x[1] = hi
    return x, lo, hi


def remainder_args(rng, dt):
    """x and y of both signs, x / y away from integers (remainder is smooth there)."""
    y = (rng.uniform(0.5, 2, SHAPE[1:]) * rng.choice([-1, 1], SHAPE[1:])).astype(dt)
    q = rng.integers(-3, 3, SHAPE) + rng.uniform(0.2, 0.8, SHAPE)
    return (q * y).astype(dt), y


BINARY = {
    "add": Case(anp.add, jnp.add, pair(uniform(-3, 3), uniform(-3, 3, (4,)))),
    "subtract": Case(anp.subtract, jnp.subtract, pair(uniform(-3, 3), uniform(-3, 3, (4,)))),
    "multiply": Case(anp.multiply, jnp.multiply, pair(uniform(-3, 3), uniform(-3, 3, (3, 1)))),
    "divide": Case(anp.divide, jnp.divide, pair(uniform(-3, 3), away_from_zero(shape=(4,)))),
    "power": Case(anp.power, jnp.power, pair(uniform(0.3, 2), uniform(-2, 2, (4,)))),
    "power_int": Case(lambda x: x**3, lambda x: x**3, uniform(-2, 2)),
    "power_half": Case(lambda x: x**0.5, lambda x: x**0.5, uniform(0.3, 2)),
    "remainder": Case(anp.remainder, jnp.remainder, remainder_args),
    "fmod": Case(anp.fmod, jnp.fmod, remainder_args),
    "arctan2": Case(anp.arctan2, jnp.arctan2, pair(away_from_zero(), away_from_zero(shape=(4,)))),
    "hypot": Case(anp.hypot, jnp.hypot, pair(away_from_zero(), away_from_zero(shape=(4,)))),
    "logaddexp": Case(anp.logaddexp, jnp.logaddexp, pair(uniform(-3, 3), uniform(-3, 3, (4,)))),
    "maximum": Case(anp.maximum, jnp.maximum, with_ties, fd=False),
    "minimum": Case(anp.minimum, jnp.minimum, with_ties, fd=False),
    "clip": Case(anp.clip, jnp.clip, clip_args, fd=False),
    "clip_scalars": Case(
        lambda x: anp.clip(x, -0.5, 0.5), lambda x: jnp.clip(x, -0.5, 0.5), uniform(-1, 1)
    ),
    "where": Case(
        lambda c, x, y: anp.where(c, x, y),
        lambda c, x, y: jnp.where(c, x, y),
        lambda rng, dt: (
            (rng.random(SHAPE) < 0.5,)
            + uniform(-3, 3)(rng, dt)
            + (rng.uniform(-3, 3, (4,)).astype(dt),)
        ),
    ),
    "where_mask": Case(
        lambda x: anp.where(x > 0, anp.sin(x), x * x),
        lambda x: jnp.where(x > 0, jnp.sin(x), x * x),
        away_from_zero(),
    ),
}

# Conversions: to a wider or narrower float, to an integer and back (zero tangent), and
# an integer argument converted to float (no tangent of its own).
CONVERT = {
    "astype_f64": Case(
        lambda x: x.astype(np.float64) * 2, lambda x: x.astype(np.float64) * 2, uniform(-3, 3)
    ),
    "astype_f32": Case(
        lambda x: x.astype(np.float32) * 2,
        lambda x: x.astype(np.float32) * 2,
        uniform(-3, 3),
        fd=False,  # a float32 result: differences of float64 steps are below its precision
        tol=(2e-5, 2e-5),
    ),
    "astype_int": Case(
        lambda x: x.astype(np.int32).astype(x.dtype) * x,
        lambda x: x.astype(np.int32).astype(x.dtype) * x,
        off_grid,
    ),
    "int_argument": Case(
        lambda x, n: x * n.astype(x.dtype),
        lambda x, n: x * n.astype(x.dtype),
        lambda rng, dt: uniform(-3, 3)(rng, dt) + (rng.integers(-5, 5, SHAPE).astype(np.int32),),
    ),
}

# Integer and boolean ops inside a float program: their tangent is zero by declaration,
# and they batch like any elementwise op.
ZERO_TANGENT = {
    "compare": Case(
        lambda x, y: anp.where(x < y, 1.0, 0.0).astype(x.dtype) * x,
        lambda x, y: jnp.where(x < y, 1.0, 0.0).astype(x.dtype) * x,
        pair(uniform(-3, 3), uniform(-3, 3, (4,))),
    ),
    "isfinite": Case(
        lambda x: anp.where(anp.isfinite(1 / x), x, 0.0),
        lambda x: jnp.where(jnp.isfinite(1 / x), x, 0.0),
        uniform(-3, 3),
    ),
    "bitwise": Case(
        lambda x: (((x.astype(np.int32) & 6) | 1) ^ 3).astype(x.dtype) * x,
        lambda x: (((x.astype(np.int32) & 6) | 1) ^ 3).astype(x.dtype) * x,
        off_grid,
    ),
    "shifts": Case(
        lambda x: (
            ((anp.abs(x).astype(np.int32) << 2) + (anp.abs(x).astype(np.int32) >> 1)).astype(
                x.dtype
            )
            * x
        ),
        lambda x: (
            ((jnp.abs(x).astype(np.int32) << 2) + (jnp.abs(x).astype(np.int32) >> 1)).astype(
                x.dtype
            )
            * x
        ),
        off_grid,
    ),
    "invert": Case(
        lambda x: (~(x > 0)).astype(x.dtype) * x,
        lambda x: (~(x > 0)).astype(x.dtype) * x,
        away_from_zero(),
    ),
    "floor_divide": Case(anp.floor_divide, jnp.floor_divide, remainder_args),
    "integer_ops": Case(
        lambda x, n: x * ((n * 3 + 1) // 2 % 5 - n).astype(x.dtype),
        lambda x, n: x * ((n * 3 + 1) // 2 % 5 - n).astype(x.dtype),
        lambda rng, dt: uniform(-3, 3)(rng, dt) + (rng.integers(-9, 9, SHAPE).astype(np.int32),),
    ),
}


def complex_values(rng, dt, shape=SHAPE):
    real = np.float32 if dt == np.complex64 else np.float64
    re = rng.uniform(-2, 2, shape).astype(real)
    im = rng.uniform(-2, 2, shape).astype(real)
    return re + 1j * im


COMPLEX = {
    "real": Case(anp.real, jnp.real, lambda rng, dt: (complex_values(rng, dt),)),
    "imag": Case(anp.imag, jnp.imag, lambda rng, dt: (complex_values(rng, dt),)),
    "conj": Case(anp.conj, jnp.conj, lambda rng, dt: (complex_values(rng, dt),)),
    "abs": Case(anp.abs, jnp.abs, lambda rng, dt: (complex_values(rng, dt),)),
    "complex": Case(
        lambda a, b: bind1("complex", a, b),
        jax.lax.complex,
        lambda rng, dt: (complex_values(rng, dt).real, complex_values(rng, dt).real),
    ),
    "multiply": Case(
        anp.multiply,
        jnp.multiply,
        lambda rng, dt: (complex_values(rng, dt), complex_values(rng, dt, (4,))),
    ),
    "divide": Case(
        anp.divide,
        jnp.divide,
        lambda rng, dt: (complex_values(rng, dt), complex_values(rng, dt, (4,)) + 3),
    ),
    "exp": Case(anp.exp, jnp.exp, lambda rng, dt: (complex_values(rng, dt),)),
    "astype_real": Case(
        lambda z: anp.real(z) * z.astype(np.complex128).real,
        lambda z: jnp.real(z) * z.astype(np.complex128).real,
        lambda rng, dt: (complex_values(rng, dt),),
    ),
    "real_to_complex": Case(
        lambda x: x.astype(np.complex128) * (1 + 2j),
        lambda x: x.astype(np.complex128) * (1 + 2j),
        lambda rng, dt: (complex_values(rng, dt).real,),
    ),
}

FAMILIES = {
    "unary": Family(UNARY),
    "binary": Family(BINARY),
    "convert": Family(CONVERT),
    "zero": Family(ZERO_TANGENT),
    "complex": Family(COMPLEX, backend="cpu"),
}


def _params(family, dtypes):
    return [
        pytest.param(family, name, dtype, id=f"{family}-{name}-{dtype}")
        for name in FAMILIES[family].cases
        for dtype in dtypes
    ]


REAL = _params("unary", FLOATS) + _params("binary", FLOATS) + _params("convert", FLOATS)
ZERO = _params("zero", FLOATS)
COMPLEXES = _params("complex", ["complex64", "complex128"])
ALL = REAL + ZERO + COMPLEXES


test_jvp, test_vjp, test_vmap, test_transpose, test_central_differences = rule_tests(
    FAMILIES,
    ALL,
    [
        p
        for p in ALL
        if p.values[2] in ("float64", "complex128") and FAMILIES[p.values[0]].cases[p.values[1]].fd
    ],
)


FLAT = ["sign", "floor", "ceil", "round", "trunc"]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("name", FLAT)
def test_declared_zero_tangents_are_exact_zeros(name, dtype):
    """Rounding and sign are declared zero: their tangents and cotangents are exact zeros of
    the primal's dtype, never a difference that happens to be small."""
    inp, got, _ = FAMILIES["unary"].result(name, dtype)
    for what in ("tan", "ct"):
        (t,) = got[what][name] if what == "ct" else (got[what][name],)
        assert t.dtype == np.dtype(dtype)
        assert not np.any(t), f"{what}: {t}"


# --- ops JAX's modules hold and the tracer does not emit ----------------------------------------


def _jax_module_jvp(fn, *args):
    """aotkit's jvp of the module JAX lowers for `fn`, and JAX's own (both programs run on
    the interpreter)."""
    lowered = aotkit.jit(fn, frontend="jax").lower(*args)
    tangents = tuple(np.cos(np.arange(a.size, dtype=a.dtype)).reshape(a.shape) for a in args)
    got = lowered.jvp().compile(backend="interpreter")(args, tangents)
    oracle = aotkit.jit(lambda p, t: jax.jvp(fn, p, t), frontend="jax", backend="interpreter")
    return got, oracle(args, tangents)


JAX_ONLY = {
    "clamp": (lambda x: jax.lax.clamp(np.float32(-0.5), x, np.float32(0.5)), [0.3, -1.0, 0.7, 0.1]),
    "clamp_arrays": (
        lambda x: jax.lax.clamp(x[:2] - 0.1, x[2:], x[:2] + 1),
        [0.3, -1.0, 0.0, 0.5],
    ),
    "round_afz": (lambda x: jax.lax.round(x, jax.lax.RoundingMethod.AWAY_FROM_ZERO) * x, [0.5]),
    "reduce_precision": (lambda x: jax.lax.reduce_precision(x, 5, 10) * x, [0.3, 1.7]),
    "dot": (lambda x: jnp.dot(x, x), [0.3, 1.7, -2.0]),
}


@pytest.mark.parametrize("name", JAX_ONLY)
def test_ops_of_jax_modules(name):
    fn, values = JAX_ONLY[name]
    x = np.asarray(values, np.float32)
    (out, tangent), (want_out, want_tangent) = _jax_module_jvp(fn, x)
    assert_close(out, np.asarray(want_out), (1e-6, 1e-6), "output")
    assert_close(tangent, np.asarray(want_tangent), (1e-6, 1e-6), "tangent")


# jax 0.12 lowers the square of a complex operand to chlo.square; the module is written out, so
# the rule is checked whichever jax is installed.
_CHLO_SQUARE = """
func.func @main(%x: tensor<3xcomplex<f64>>) -> tensor<3xcomplex<f64>> {
  %0 = chlo.square %x : tensor<3xcomplex<f64>> -> tensor<3xcomplex<f64>>
  return %0 : tensor<3xcomplex<f64>>
}
"""


def test_chlo_square_of_complex_operands():
    lowered = aotkit.load_module(_CHLO_SQUARE.encode())
    x = np.array([1 + 2j, -0.5 + 0.25j, 3 - 1j])
    t = np.array([0.5 - 1j, 2 + 0j, -1 + 0.5j])
    out, tangent = lowered.jvp().compile()((x,), (t,))
    np.testing.assert_allclose(out, x * x, rtol=1e-14)
    np.testing.assert_allclose(tangent, 2 * x * t, rtol=1e-14)
    assert tangent.dtype == np.complex128
    _, (cotangent,) = lowered.vjp().compile()((x,), t)
    np.testing.assert_allclose(cotangent, 2 * x * t, rtol=1e-14)
    batched = lowered.vmap(axis_size=2).compile()(np.stack([x, t]))
    np.testing.assert_allclose(batched, np.stack([x * x, t * t]), rtol=1e-14)


# --- broadcasting, any shapes -------------------------------------------------------------------


def _broadcast_pair():
    return hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=3, max_side=3)


_BROADCAST_OPS = {
    "add": (anp.add, jnp.add),
    "subtract": (anp.subtract, jnp.subtract),
    "multiply": (anp.multiply, jnp.multiply),
    "divide": (anp.divide, jnp.divide),
    "maximum": (anp.maximum, jnp.maximum),
    "arctan2": (anp.arctan2, jnp.arctan2),
}


@settings(max_examples=6, deadline=None)
@given(shapes=_broadcast_pair(), seed=st.integers(0, 2**16))
def test_broadcasting_gradients(shapes, seed):
    """The cotangent of a broadcast operand is summed back to its shape, for any pair of
    broadcastable shapes (one program for all the ops)."""
    rng = np.random.default_rng(seed)
    a_shape, b_shape = shapes.input_shapes
    x = rng.uniform(0.5, 2, a_shape)
    y = -rng.uniform(0.5, 2, b_shape)

    def grads(grad, ops):
        def one(op):
            return grad(lambda x, y: (op(x, y) * op(x, y)).sum(), argnums=(0, 1))

        return lambda x, y: {k: one(fns)(x, y) for k, fns in ops.items()}

    got = aotkit.jit(
        grads(aotkit.grad, {k: v[0] for k, v in _BROADCAST_OPS.items()}), backend="interpreter"
    )(x, y)
    with jax.enable_x64(True):
        oracle = grads(jax.grad, {k: v[1] for k, v in _BROADCAST_OPS.items()})
        want = aotkit.jit(oracle, frontend="jax", backend="interpreter")(x, y)
    for k in _BROADCAST_OPS:
        assert_close(got[k], jax.tree_util.tree_map(np.asarray, want[k]), (1e-10, 1e-10), k)


# --- higher derivatives of the special functions ------------------------------------------------


@pytest.mark.parametrize("name", ["lgamma", "digamma"])
def test_third_derivatives_of_gamma_functions(name):
    """digamma's derivative is polygamma(1, x), whose own derivative is polygamma(2, x):
    chlo.polygamma has a JVP rule in x."""

    def third(grad, f):
        return grad(grad(grad(f)))

    x = np.array([0.7, 1.7, 3.2])
    got = aotkit.jit(aotkit.vmap(third(aotkit.grad, _prim(name))), backend="interpreter")(x)
    with jax.enable_x64(True):
        want = jax.vmap(third(jax.grad, getattr(jax.lax, name)))(x)
    assert_close(np.asarray(got), np.asarray(want), (1e-9, 1e-9), name)


def test_polygamma_has_no_derivative_in_its_order():
    lowered = aotkit.jit(jax.lax.polygamma, frontend="jax").lower(np.float32(1), np.float32(2))
    with pytest.raises(
        NotImplementedError,
        match=r"^grad: chlo\.polygamma at .*test_elementwise\.py:\d+ is polygamma\(n, x\) with a "
        r"tangent in n, and its derivative in the order n is not defined \(JAX's neither\); "
        r"differentiate with respect to x only$",
    ):
        lowered.grad(argnums=0)
    got = lowered.grad(argnums=1).compile(backend="interpreter")(np.float32(1), np.float32(2))
    want = jax.grad(jax.lax.polygamma, argnums=1)(np.float32(1), np.float32(2))
    assert_close(np.asarray(got), np.asarray(want), (1e-6, 1e-6), "d/dx")


# --- derivatives at the points where a formula could go wrong -----------------------------------

EDGES = {
    "power_at_zero": (
        lambda xp: lambda x, y: xp.sum(xp.power(x, y)),
        [0.0, 0.0, 2.0],
        [0.0, 1.0, 0.0],
    ),
    "sqrt_at_zero": (lambda xp: lambda x, y: xp.sum(xp.sqrt(x) * y), [0.0, 1.0], [1.0, 2.0]),
    "abs_at_zero": (lambda xp: lambda x, y: xp.sum(xp.abs(x) * y), [0.0, -1.0], [1.0, 1.0]),
    "arctan2_at_origin": (
        lambda xp: lambda x, y: xp.sum(xp.arctan2(x, y)),
        [0.0, -1.0],
        [0.0, 1.0],
    ),
    "maximum_with_scalar_tie": (
        lambda xp: lambda x, y: xp.sum(xp.maximum(x, 0.0) * y),
        [0.0, -1.0],
        [1.0, 3.0],
    ),
    "norm_at_zero": (
        lambda xp: lambda x, y: xp.sqrt(xp.sum(x * x)) + xp.sum(y),
        [0.0, 0.0],
        [1.0, 1.0],
    ),
    "log_at_zero": (lambda xp: lambda x, y: xp.sum(xp.log(x) * y), [0.0, 1.0], [0.0, 1.0]),
    "divide_by_zero": (lambda xp: lambda x, y: xp.sum(x / y), [1.0, 0.0], [0.0, 2.0]),
}


@pytest.mark.parametrize("name", EDGES)
def test_derivatives_at_edges_equal_jax(name):
    """Infinities and NaNs where JAX has them, zeros where JAX's formula avoids them (finite
    values to within rounding: jax 0.12.1 computes arctan2's derivative with other roundings
    than 0.12.0, 0.49999997 for 0.5)."""
    make, x, y = EDGES[name]
    x, y = np.float32(x), np.float32(y)
    got = aotkit.jit(aotkit.grad(make(anp), argnums=(0, 1)), backend="interpreter")(x, y)
    want = aotkit.jit(jax.grad(make(jnp), argnums=(0, 1)), frontend="jax", backend="interpreter")(
        x, y
    )
    for g, w in zip(got, want, strict=True):
        g, w = np.asarray(g), np.asarray(w)
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(np.isfinite(g), np.isfinite(w))  # NaN and inf alike
        np.testing.assert_allclose(g, w, rtol=2e-7, atol=0)


# --- ties and kinks where a formula's derivative differed from JAX's ----------------------------

TIES = {
    # logaddexp's tie branch carried derivative (1, 0): softplus'(0) was 1, its Hessian 0.
    "logaddexp": (
        lambda x: anp.sum(anp.logaddexp(x, 0.0)),
        lambda x: jnp.sum(jnp.logaddexp(x, 0.0)),
    ),
    "logaddexp_of_equal": (
        lambda x: anp.sum(anp.logaddexp(x, x[::-1])),
        lambda x: jnp.sum(jnp.logaddexp(x, x[::-1])),
    ),
    "logaddexp2": (
        lambda x: anp.sum(anp.logaddexp2(x, 0.0)),
        lambda x: jnp.sum(jnp.logaddexp2(x, 0.0)),
    ),
    "softplus": (lambda x: anp.sum(aotkit.nn.softplus(x)), lambda x: jnp.sum(jax.nn.softplus(x))),
    "log_sigmoid": (
        lambda x: anp.sum(aotkit.nn.log_sigmoid(x)),
        lambda x: jnp.sum(jax.nn.log_sigmoid(x)),
    ),
    # aotkit.nn's relu split the tie at 0 (maximum's 0.5); jax.nn's derivative is 0 there.
    "relu": (lambda x: anp.sum(aotkit.nn.relu(x) * x), lambda x: jnp.sum(jax.nn.relu(x) * x)),
    "relu6": (
        lambda x: anp.sum(aotkit.nn.relu6(6 * x) * x),
        lambda x: jnp.sum(jax.nn.relu6(6 * x) * x),
    ),
    # An integer exponent n = 0 at x = 0: n * x ** (n - 1) was 0 * inf = NaN.
    "integer_power": (
        lambda x: anp.sum(x ** np.array([0, 3, 0, 2, 1], np.int32)),
        lambda x: jnp.sum(x ** jnp.array([0, 3, 0, 2, 1], np.int32)),
    ),
}


@pytest.mark.parametrize("name", TIES)
def test_derivatives_at_ties_and_kinks_equal_jax(name):
    ours, theirs = TIES[name]
    x = np.array([0.0, 1.0, -0.0, -2.0, 0.0], np.float32)
    for transform, oracle in ((aotkit.grad, jax.grad), (aotkit.hessian, jax.hessian)):
        got = np.asarray(aotkit.jit(transform(ours))(x))
        want = np.asarray(oracle(theirs)(x))
        assert got.dtype == want.dtype
        assert_close(got, want, (1e-6, 1e-6), f"{name} {transform.__name__}")
    np.testing.assert_allclose(
        np.asarray(aotkit.jit(ours)(x)), np.asarray(theirs(x)), rtol=1e-6, atol=0
    )


def test_relu_values_are_maximums():
    """relu and relu6 are written for their derivative (where x > 0, ...); their values stay
    NumPy's maximum's and minimum's: NaN, infinities and the sign of zero included."""
    x = np.array([0.0, -0.0, 6.0, 3.0, -2.0, 7.0, np.nan, np.inf, -np.inf], np.float32)
    for ours, want in (
        (aotkit.nn.relu, np.maximum(x, 0)),
        (aotkit.nn.relu6, np.minimum(np.maximum(x, 0), 6)),
    ):
        got = np.asarray(aotkit.jit(ours)(x))
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
    ints = np.array([-3, 0, 4, 9], np.int32)
    np.testing.assert_array_equal(np.asarray(aotkit.jit(aotkit.nn.relu6)(ints)), [0, 0, 4, 6])
