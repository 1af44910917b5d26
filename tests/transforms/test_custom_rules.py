"""Functions with their own derivative rule (`jax.custom_jvp`, `jax.custom_vjp`) through
aotkit's transforms: the rule gives the derivative, as in JAX. JAX lowers such a function to
its primal computation, and differentiating that gave other values: `jax.nn.relu`'s
derivative at 0 was 0.5 (JAX's: 0), `jax.nn.softplus`'s at 0 was 0 (JAX's: 0.5),
`jax.scipy.special.log_ndtr`'s NaN from x = 14 on, `i0e`'s NaN at 0, `entr`'s NaN at 0
(JAX's: inf). The JAX front end now lowers each such call, for the transforms, as its rule
between two marked barriers (`modules.CUSTOM_JVP`); a few JAX primitives whose lowering
aotkit cannot differentiate as JAX does (`erf_inv`, `bessel_i0e`, `bessel_i1e`, `igamma`,
`igammac`) get their derivative formulas the same way. The program's own module stays
jax.jit's, and no barrier reaches a backend. A custom_vjp function's backward function was
not applied either (a gradient clipped in it came out unclipped); reverse mode now evaluates
it on the outputs' cotangents, as JAX calls it. The oracle is JAX's transform of the same
function.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import jax.scipy.special as jss
import numpy as np
import pytest

import aotkit
import aotkit.numpy as anp
from aotkit import modules
from aotkit.transforms import TransformError
from tests.helpers import assert_matches

X = np.array([0.0, 1.0, -2.0, 3.0, 14.0, 20.0], np.float32)


@jax.custom_jvp
def safe_log(x):
    return jnp.log(x)


@safe_log.defjvp
def _safe_log_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    return safe_log(x), t / jnp.maximum(x, 0.5)


@jax.custom_jvp
def clipped(x):
    return x


@clipped.defjvp
def _clipped_jvp(primals, tangents):
    # Not linear in the tangent: forward mode only (JAX refuses it in reverse mode).
    return primals[0], jnp.clip(tangents[0], -0.5, 0.5)


@jax.custom_jvp
def scaled(x, n):
    return x * n


@scaled.defjvp
def _scaled_jvp(primals, tangents):
    # An integer argument: its tangent is JAX's float0 zero, which the rule ignores.
    (x, n), (t, _) = primals, tangents
    return scaled(x, n), t * 100.0


def rnn(x):
    def step(h, xi):
        h = jax.nn.relu(h * 0.5 + xi)
        return h, jss.log_ndtr(h).sum()

    h, ys = jax.lax.scan(step, jnp.zeros(2), x.reshape(3, 2))
    return ys.sum() + h.sum()


# The rule differs from the primal's derivative at these points (the comment says how
# aotkit's derivative of the primal differed before).
FUNCTIONS = {
    "relu": lambda x: jnp.sum(jax.nn.relu(x) * jnp.arange(6.0)),  # 0.5 at 0
    "relu6": lambda x: jnp.sum(jax.nn.relu6(x - 3.0)),  # 0.5 at 3 and 9 (x - 3 at 0 and 6)
    "softplus": lambda x: jnp.sum(jax.nn.softplus(x) * 2),  # 0 at 0, Hessian 0
    "logaddexp_tie": lambda x: jnp.sum(jnp.logaddexp(x, x[::-1])),  # 0 at a tie
    "log_sigmoid": lambda x: jnp.sum(jax.nn.log_sigmoid(-x)),
    "log_ndtr": lambda x: jnp.sum(jss.log_ndtr(x) + jss.log_ndtr(-x / 4)),  # NaN at 14, 20
    "i0e": lambda x: jnp.sum(jss.i0e(x)),  # NaN at 0
    "i1e": lambda x: jnp.sum(jss.i1e(x / 4)),  # refused: chlo.bessel_i1e had no rule
    "i0": lambda x: jnp.sum(jss.i0(x / 4)),  # NaN at 0
    "erfinv": lambda x: jnp.sum(jss.erfinv(x / 25)),  # NaN everywhere from jax 0.12.1
    "entr": lambda x: jnp.sum(jss.entr(jnp.abs(x)) * (x != 0)),  # NaN at 0 (JAX: 0 * inf)
    "safe_log": lambda x: jnp.sum(safe_log(jnp.abs(x) + 0.1)),
    "integer_argument": lambda x: jnp.sum(scaled(x, 3)),
    "scan": lambda x: rnn(x),
    "cond": lambda x: jax.lax.cond(x[1] > 0, lambda: jnp.sum(jax.nn.relu(x)), lambda: 0.0),
    "nested_jit": lambda x: jax.jit(lambda y: jnp.sum(jax.nn.relu(y) ** 2))(x),
    "softmax": lambda x: jax.nn.softmax(x / 8)[1],
}


def close(got, want, rtol=1e-5, atol=1e-5):
    assert_matches(np.asarray(got), np.asarray(want), rtol=rtol, atol=atol)


# The derivatives of these need `bessel_i1e`'s. Where JAX lowers it to a `chlo` op (before
# jax 0.12), which has no rule of its own in aotkit (the rules above give the first
# derivatives), their second derivatives are refused, naming it.
FIRST_ORDER = {"i0e", "i1e", "i0"}
I1E_IS_AN_OP = "chlo.bessel_i1e" in jax.jit(jax.lax.bessel_i1e).lower(X).as_text()


@pytest.mark.parametrize("name", FUNCTIONS)
def test_custom_jvp_functions_differentiate_as_jax(name):
    f = FUNCTIONS[name]
    jx = "jax"  # (this module imports aotkit too: "auto" would pick aotkit's tracer)
    close(aotkit.grad(f, frontend=jx)(X), jax.grad(f)(X))
    close(aotkit.jvp(f, (X,), (X,), frontend=jx)[1], jax.jvp(f, (X,), (X,))[1])
    if name in FIRST_ORDER and I1E_IS_AN_OP:
        with pytest.raises(TransformError, match="no differentiation rule for op chlo.bessel_i1e"):
            aotkit.hessian(f, frontend=jx)(X)
    else:
        close(aotkit.hessian(f, frontend=jx)(X), jax.hessian(f)(X), rtol=1e-4, atol=1e-4)
    batch = np.stack([X, -X])
    close(aotkit.vmap(aotkit.grad(f, frontend=jx))(batch), jax.vmap(jax.grad(f))(batch))
    # The stage transforms of the JAX program, whose module is jax.jit's.
    lowered = aotkit.jit(f, frontend=jx).lower(X)
    close(lowered.grad().compile()(X), jax.grad(f)(X))
    assert modules.CUSTOM_JVP not in lowered.as_text()


def test_relu_at_zero_before_and_after():
    """The case that was most often wrong: a ReLU layer's gradient where a pre-activation
    is exactly 0 (a zero input row and zero-initialized biases): JAX's derivative there is
    0, aotkit's was 0.5 (the bias gradient was [4.5, 3.5])."""
    w = np.array([[1.0, -1.0], [0.5, 2.0]], np.float32)
    b = np.zeros(2, np.float32)
    x = np.array([[0.0, 0.0], [1.0, 1.0]], np.float32)

    def loss(w, b, x):
        h = jax.nn.relu(x @ w + b)
        return jnp.sum(h**2 + h)

    got = aotkit.grad(loss, argnums=(0, 1), frontend="jax")(w, b, x)
    want = jax.grad(loss, argnums=(0, 1))(w, b, x)
    close(got[0], want[0])
    close(got[1], want[1])
    close(got[1], np.array([4.0, 3.0], np.float32))


def test_forward_mode_runs_a_rule_that_is_not_linear_as_jax():
    def f(x):
        return clipped(x * 2.0)

    t = np.array([0.1, -3.0, 2.0, 0.0, 1.0, -0.2], np.float32)
    close(aotkit.jvp(f, (X,), (t,), frontend="jax")[1], jax.jvp(f, (X,), (t,))[1])
    close(aotkit.jvp(f, (X,), (t,), frontend="jax")[1], np.clip(2 * t, -0.5, 0.5))


@pytest.mark.parametrize(
    "f",
    [
        lambda x: jnp.sum(jss.gammainc(2.5, x + 0.5)),
        lambda x: jnp.sum(jss.gammaincc(x + 0.5, 1.5)),
        lambda x: jnp.sum(jss.gammainc(x / 4 + 1.0, x / 2 + 1.0)),
    ],
    ids=["gammainc_x", "gammaincc_a", "gammainc_both"],
)
def test_incomplete_gamma_differentiates_as_jax(f):
    """Refused before: JAX lowers igamma to a series summed in a while loop whose trip
    count depends on the data, which reverse mode cannot store without a bound."""
    x = np.abs(X[:4])
    close(aotkit.grad(f, frontend="jax")(x), jax.grad(f)(x), rtol=1e-4)
    close(aotkit.jvp(f, (x,), (x,), frontend="jax")[1], jax.jvp(f, (x,), (x,))[1], rtol=1e-4)


def test_the_module_stays_jax_jits_and_no_barrier_reaches_a_backend():
    f = FUNCTIONS["relu"]
    ours = aotkit.jit(f, frontend="jax").lower(X)
    theirs = jax.jit(f).lower(X).as_text()
    body = lambda text: text[text.index("func.func") :]  # noqa: E731  (the module's name aside)
    assert body(ours.as_text()) == body(theirs)
    assert 'aotkit.custom_jvp = "begin"' in str(ours._program.marked_module())
    # A traced function that calls the JAX function keeps the marks (a transform of it
    # later takes the rule), and its executable is compiled without them.
    lowered = aotkit.jit(lambda x: anp.sum(aotkit.jit(f, frontend="jax")(x))).lower(X)
    assert 'aotkit.custom_jvp = "begin"' in lowered.as_text()
    compiled_form, _ = lowered._program.compiled_form(False)
    assert "optimization_barrier" not in str(compiled_form)
    close(lowered.compile()(X), f(X))
    close(aotkit.grad(lambda x: anp.sum(aotkit.jit(f, frontend="jax")(x)))(X), jax.grad(f)(X))


@jax.custom_vjp
def clip_gradient(x):
    return x


def _clip_fwd(x):
    return x, None


def _clip_bwd(_, g):
    return (jnp.clip(g, -0.5, 0.5),)  # not linear in g: JAX calls it on the cotangent


clip_gradient.defvjp(_clip_fwd, _clip_bwd)


@jax.custom_vjp
def reverse_gradient(x, scale):
    return x


def _reverse_fwd(x, scale):
    return x, scale


def _reverse_bwd(scale, g):
    return -scale * g, None  # (no cotangent for the scale)


reverse_gradient.defvjp(_reverse_fwd, _reverse_bwd)


@jax.custom_vjp
def safe_norm(x):
    return jnp.sqrt(jnp.sum(x * x))


def _norm_fwd(x):
    y = jnp.sqrt(jnp.sum(x * x))
    return y, (x, y)


def _norm_bwd(res, g):
    x, y = res
    return (g * x / jnp.maximum(y, 1e-6),)  # 0 at 0, where the primal's is NaN


safe_norm.defvjp(_norm_fwd, _norm_bwd)


def clipped_rnn(x):
    def step(h, e):
        h = jnp.tanh(clip_gradient(h * 2.0) + e)
        return h, h

    return jax.lax.scan(step, 0.0, x)[1].sum()


V = np.array([0.5, 1.0, -2.0, 3.0], np.float32)
VJP_FUNCTIONS = {
    "clip": lambda x: jnp.sum(clip_gradient(x * 3.0) ** 2),  # the clip was not applied
    "reverse": lambda x: jnp.sum(jnp.sin(reverse_gradient(x, 0.3))),  # nor the reversal
    "safe_norm_at_zero": lambda x: safe_norm(x * 0.0) + safe_norm(x),  # NaN
    "scan": clipped_rnn,
    "checkpoint": lambda x: jax.checkpoint(lambda y: jnp.sum(clip_gradient(y**2)))(x),
    "nested_jit": lambda x: jax.jit(lambda y: jnp.sum(clip_gradient(y * 4.0) * y))(x),
}


@pytest.mark.parametrize("name", VJP_FUNCTIONS)
def test_custom_vjp_functions_differentiate_as_jax(name):
    f = VJP_FUNCTIONS[name]
    close(aotkit.grad(f, frontend="jax")(V), jax.grad(f)(V))
    batch = np.stack([V, -V])
    close(aotkit.vmap(aotkit.grad(f, frontend="jax"))(batch), jax.vmap(jax.grad(f))(batch))
    lowered = aotkit.jit(f, frontend="jax").lower(V)
    close(lowered.grad().compile()(V), jax.grad(f)(V))
    assert modules.CUSTOM_VJP not in lowered.as_text()


def test_custom_vjp_second_derivatives_and_loops_with_checkpoints():
    """The backward function's ops, evaluated again on the cotangents, are what a second
    transform differentiates (JAX's hessian differentiates the backward function too);
    `checkpoint_loops` recomputes a loop body that holds one."""

    def f(x):
        return jnp.sum(jnp.sin(reverse_gradient(x * x, 0.3)) * safe_norm(x))

    close(aotkit.hessian(f, frontend="jax")(V), jax.hessian(f)(V), rtol=1e-4, atol=1e-5)
    lowered = aotkit.jit(clipped_rnn, frontend="jax").lower(V)
    close(lowered.grad(checkpoint_loops="sqrt").compile()(V), jax.grad(clipped_rnn)(V))


def test_forward_mode_differentiates_a_custom_vjp_functions_forward_function():
    """JAX refuses forward mode for a custom_vjp function; aotkit differentiates its
    forward function, as it did before."""

    def f(x):
        return jnp.sum(clip_gradient(jnp.sin(x)) * x)

    with pytest.raises(TypeError, match="can't apply forward-mode autodiff"):
        jax.jvp(f, (V,), (V,))
    plain = lambda x: jnp.sum(jnp.sin(x) * x)  # noqa: E731
    close(aotkit.jvp(f, (V,), (V,), frontend="jax")[1], jax.jvp(plain, (V,), (V,))[1])
