"""Training steps as users of the JAX ecosystem write them: an Optax Adam step on a Flax
linen model, on a Flax nnx model (its `nnx.State`) and on an Equinox model, each with its
real optimizer state. Shared by tests/test_artifact_pytrees.py (which saves them) and
tests/pytree_child.py (the fresh process that loads them), so both build the same start.

Each `CASES[name]()` imports its libraries when called and returns a `Case`: `step(params,
opt_state, x, y) -> (params, opt_state, loss)`, `start()` (the initial parameters and
`optimizer.init` of them), the batch, and `register()`, which registers the model's node types
for artifacts (what a user calls in the process that saves and in every one that loads).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np

STEPS = 20
LIBRARIES = {
    "flax_linen": ("flax", "optax"),
    "flax_nnx": ("flax", "optax"),
    "equinox": ("equinox", "optax"),
}


class Case(NamedTuple):
    step: Callable
    start: Callable
    batch: tuple
    register: Callable


def _batch(d_in: int = 6, d_out: int = 3, n: int = 16):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, d_in)).astype(np.float32)
    y = rng.standard_normal((n, d_out)).astype(np.float32)
    return x, y


def flax_linen() -> Case:
    import jax
    import jax.numpy as jnp
    import optax
    from flax import linen as nn

    class MLP(nn.Module):
        @nn.compact
        def __call__(self, x):
            return nn.Dense(3)(nn.tanh(nn.Dense(16)(x)))

    model, optimizer = MLP(), optax.adam(1e-2)
    x, y = _batch()

    def step(params, opt_state, x, y):
        def loss_fn(p):
            return jnp.mean((model.apply(p, x) - y) ** 2)

        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    def start():
        params = model.init(jax.random.PRNGKey(0), x)
        return params, optimizer.init(params)

    # Dicts and Optax's namedtuples: nothing to register.
    return Case(step, start, (x, y), lambda: None)


def flax_nnx() -> Case:
    import jax
    import jax.numpy as jnp
    import optax
    from flax import nnx

    import aotkit

    class MLP(nnx.Module):
        def __init__(self, rngs):
            self.hidden = nnx.Linear(6, 16, rngs=rngs)
            self.out = nnx.Linear(16, 3, rngs=rngs)

        def __call__(self, x):
            return self.out(jnp.tanh(self.hidden(x)))

    graphdef, _ = nnx.split(MLP(nnx.Rngs(0)))
    optimizer = optax.adam(1e-2)
    x, y = _batch()

    def step(state, opt_state, x, y):
        def loss_fn(s):
            return jnp.mean((nnx.merge(graphdef, s)(x) - y) ** 2)

        loss, grads = jax.value_and_grad(loss_fn)(state)
        updates, opt_state = optimizer.update(grads, opt_state, state)
        return optax.apply_updates(state, updates), opt_state, loss

    def start():
        _, state = nnx.split(MLP(nnx.Rngs(0)))
        return state, optimizer.init(state)

    def register():
        aotkit.register_pytree_node_serialization(nnx.State)
        aotkit.register_pytree_node_serialization(nnx.Param)

    return Case(step, start, (x, y), register)


def equinox() -> Case:
    import equinox as eqx
    import jax
    import jax.numpy as jnp
    import optax

    import aotkit

    def model():
        return eqx.nn.MLP(6, 3, 16, 2, activation=jax.nn.tanh, key=jax.random.PRNGKey(0))

    # The array leaves are the arguments; the rest (activations) is baked into the step.
    _, static = eqx.partition(model(), eqx.is_array)
    optimizer = optax.adam(1e-2)
    x, y = _batch()

    def step(params, opt_state, x, y):
        def loss_fn(p):
            return jnp.mean((jax.vmap(eqx.combine(p, static))(x) - y) ** 2)

        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    def start():
        params, _ = eqx.partition(model(), eqx.is_array)
        return params, optimizer.init(params)

    def register():
        aotkit.register_pytree_node_serialization(eqx.nn.MLP)
        aotkit.register_pytree_node_serialization(eqx.nn.Linear)
        # Loaded as Optax's own class rather than a stand-in.
        aotkit.register_namedtuple_serialization(optax.ScaleByAdamState)

    return Case(step, start, (x, y), register)


CASES = {"flax_linen": flax_linen, "flax_nnx": flax_nnx, "equinox": equinox}
