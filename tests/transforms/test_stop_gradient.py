"""`stop_gradient` through aotkit's transforms: every derivative through it is zero, as in
JAX. JAX lowers `jax.lax.stop_gradient` to nothing, so a JAX function's module
differentiated straight through it (`grad(sum(x * stop_gradient(x)))` was 2x, a
straight-through estimator's gradient 0): the JAX front end now lowers such a function
again for the transforms with each stop_gradient kept as a marked barrier
(`modules.STOP_GRADIENT`), while the program's own module stays jax.jit's. aotkit's tracer
has `aotkit.lax.stop_gradient`. The oracle is JAX's transform of the same function.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import aotkit
import aotkit.numpy as anp
from aotkit import lax, modules
from tests.helpers import assert_matches

sg = jax.lax.stop_gradient
X = np.array([1.0, -2.0, 0.3, 2.5], np.float32)
W = np.array([[0.5, -1.0], [0.2, 0.3], [1.0, 1.0], [-0.4, 0.7]], np.float32)

# JAX functions with stop_gradient where it changes the derivative, and where it does not
# (log_softmax's and logsumexp's shift by the maximum).
JAX_FUNCTIONS = {
    "product": lambda x: jnp.sum(x * sg(x)),
    "straight_through": lambda x: jnp.sum(x + sg(jnp.round(x) - x)),
    "td_target": lambda x: jnp.sum((x @ W - sg(1.0 + 0.9 * jnp.max(x @ W))) ** 2),
    "log_softmax": lambda x: jnp.sum(jax.nn.log_softmax(x) * jnp.arange(4.0)),
    "logsumexp": lambda x: jax.nn.logsumexp(x * 2),
    "scan": lambda x: jax.lax.scan(lambda c, e: (c + e * sg(c + e), None), 0.0, x)[0],
    "cond": lambda x: jax.lax.cond(x[0] > 0, lambda: jnp.sum(x * sg(x)), lambda: jnp.sum(x)),
    "fori_loop": lambda x: jax.lax.fori_loop(0, 3, lambda i, c: c * sg(c) + x, x).sum(),
    "nested_jit": lambda x: jax.jit(lambda y: jnp.sum(y**2 * sg(y)))(x),
    "custom_jvp": lambda x: jnp.sum(jax.nn.relu(x) * sg(x)),
    "tree_map": lambda x: jnp.sum(x * jax.tree.map(sg, {"a": x})["a"]),
    # JAX's own stop_gradient inside jnp.linalg.solve, whose custom_linear_solve rule the
    # module does not carry: differentiated through, as the rule's primal computes.
    "solve": lambda x: jnp.sum(jnp.linalg.solve(jnp.outer(x, x) + 4 * jnp.eye(4), x) * sg(x)),
    "checkpoint": lambda x: jax.checkpoint(lambda y: jnp.sum(jnp.sin(y) * sg(y)))(x),
}


def close(got, want):
    assert_matches(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", JAX_FUNCTIONS)
def test_jax_functions_with_stop_gradient_differentiate_as_jax(name):
    f = JAX_FUNCTIONS[name]
    jx = "jax"  # (this module imports aotkit too: "auto" would pick aotkit's tracer)
    close(aotkit.grad(f, frontend=jx)(X), jax.grad(f)(X))
    close(aotkit.hessian(f, frontend=jx)(X), jax.hessian(f)(X))
    close(aotkit.jvp(f, (X,), (X,), frontend=jx)[1], jax.jvp(f, (X,), (X,))[1])
    batch = np.stack([X, -X])
    close(aotkit.vmap(aotkit.grad(f, frontend=jx))(batch), jax.vmap(jax.grad(f))(batch))
    # The stage transforms of the JAX program, whose module is jax.jit's.
    lowered = aotkit.jit(f, frontend=jx).lower(X)
    close(lowered.grad().compile()(X), jax.grad(f)(X))
    assert "optimization_barrier" not in lowered.as_text()


def test_the_jax_programs_module_stays_jax_jits():
    f = JAX_FUNCTIONS["straight_through"]
    ours = aotkit.jit(f, frontend="jax").lower(X).as_text()
    theirs = jax.jit(f).lower(X).as_text()
    body = lambda text: text[text.index("func.func") :]  # noqa: E731  (the module's name aside)
    assert body(ours) == body(theirs)
    # Before: aotkit's gradient of the straight-through estimator was 0 (JAX's: 1).
    close(aotkit.grad(f, frontend="jax")(X), np.ones(4, np.float32))


def tracer_product(x):
    return anp.sum(x * lax.stop_gradient(x))


def tracer_straight_through(x):
    return anp.sum(x + lax.stop_gradient(anp.round(x) - x))


def tracer_cube(x):
    return anp.sum(x**2 * lax.stop_gradient(x))


@pytest.mark.parametrize(
    ("ours", "theirs"),
    [
        (tracer_product, JAX_FUNCTIONS["product"]),
        (tracer_straight_through, JAX_FUNCTIONS["straight_through"]),
        (tracer_cube, lambda x: jnp.sum(x**2 * sg(x))),
    ],
)
def test_aotkit_lax_stop_gradient_differentiates_as_jax(ours, theirs):
    close(aotkit.grad(ours)(X), jax.grad(theirs)(X))
    close(aotkit.hessian(ours)(X), jax.hessian(theirs)(X))
    close(aotkit.jvp(ours, (X,), (X,))[1], jax.jvp(theirs, (X,), (X,))[1])
    batch = np.stack([X, -X])
    close(aotkit.vmap(aotkit.grad(ours))(batch), jax.vmap(jax.grad(theirs))(batch))
    close(aotkit.jit(ours)(X), theirs(X))
    lowered = aotkit.jit(ours).lower(X)
    assert "stablehlo.optimization_barrier {aotkit.stop_gradient}" in lowered.as_text()
    close(lowered.grad().compile()(X), jax.grad(theirs)(X))


def test_stop_gradient_of_constants_integers_and_outside_a_trace():
    assert lax.stop_gradient(X) is X
    tree = {"a": X, "n": 3}
    assert lax.stop_gradient(tree) is tree

    def f(x, n):
        k = lax.stop_gradient(n)  # an integer: passed as it is
        c = lax.stop_gradient(np.float32(2.0))  # a constant: no derivative to stop
        return anp.sum(x * c) + k

    got = aotkit.grad(f)(X, np.int32(3))
    close(got, np.full(4, 2.0, np.float32))


def test_saved_programs_keep_the_value_and_leave_the_mark_out(tmp_path):
    """VHLO has no place for the mark: a portable module leaves the barrier out (each use
    reads its operand); the compiled artifact loads and gives the same values."""
    compiled = aotkit.jit(tracer_product).lower(X).compile()
    path = tmp_path / "p.aotx"
    compiled.save(path)
    loaded = aotkit.load(path)
    close(loaded(X), compiled(X))
    again = aotkit.load(path, recompile=True)
    close(again(X), compiled(X))
    lowered = aotkit.jit(tracer_product).lower(X)
    stripped = modules.without_marks(lowered._program.module)
    assert stripped is not lowered._program.module
    assert "optimization_barrier" not in str(stripped)
    assert "aotkit.stop_gradient" in lowered.as_text()  # the program's own module is kept


def test_a_marked_module_that_takes_other_arguments_is_refused(monkeypatch):
    """The module lowered again with stop_gradient kept must take the program's arguments
    (jax.jit prunes the same ones from it); if it did not, the transforms would evaluate it
    with the wrong ones."""
    from aotkit.frontends import jax as jax_frontend

    def f(x):
        return jnp.sum(x * sg(x))

    arity = jax_frontend._main_arity
    calls = []

    def other_arity(module):  # the program's module first, then the marked one's
        calls.append(module)
        return arity(module) + (len(calls) > 1)

    monkeypatch.setattr(jax_frontend, "_main_arity", other_arity)
    lowered = aotkit.jit(f, frontend="jax").lower(X)
    with pytest.raises(ValueError) as e:
        lowered.grad()  # (made on first use)
    assert str(e.value) == (
        "lower: f (frontend='jax'): JAX's module with stop_gradient and custom rules kept for "
        "the transforms takes other arguments than the program: please report this"
    )
