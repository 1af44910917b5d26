"""Symbolic programs for tests/symbolic: an MLP and a transformer block, as JAX writes them
(`jax.export` with `jax.export.symbolic_shape`), and the inputs and fixed-shape results
they are compared with.

The JAX programs are files to aotkit (a jax.export artifact read by `aotkit.load_module`),
which is how aotkit meets a symbolic module JAX made. The same programs written with
aotkit.numpy and traced with symbolic specs need the symbolic tracer (aotkit/symbolic/algebra.py).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from tests import lane

D = 16  # model width of the block
HIDDEN = 32


def mlp(x, y, w1, w2):
    """Logits and the squared error per example: `x` and `y` share the batch `b`."""
    logits = jnp.tanh(x @ w1) @ w2
    return logits, jnp.sum((logits - y) ** 2, axis=-1)


def mlp_params(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    w1 = (rng.standard_normal((784, HIDDEN)) / 28).astype(np.float32)
    w2 = (rng.standard_normal((HIDDEN, 10)) / 6).astype(np.float32)
    return w1, w2


def mlp_inputs(rng: np.random.Generator, b: int) -> tuple[np.ndarray, np.ndarray]:
    x = rng.standard_normal((b, 784)).astype(np.float32)
    y = rng.standard_normal((b, 10)).astype(np.float32)
    return x, y


def mlp_export(constraints=()) -> jax.export.Exported:
    b = jax.export.symbolic_shape("b", constraints=constraints)[0]
    f32 = jnp.float32
    return jax.export.export(jax.jit(mlp), platforms=lane.EXPORT_PLATFORMS)(
        jax.ShapeDtypeStruct((b, 784), f32),
        jax.ShapeDtypeStruct((b, 10), f32),
        jax.ShapeDtypeStruct((784, HIDDEN), f32),
        jax.ShapeDtypeStruct((HIDDEN, 10), f32),
    )


def _layer_norm(h):
    mean = jnp.mean(h, axis=-1, keepdims=True)
    var = jnp.mean((h - mean) ** 2, axis=-1, keepdims=True)
    return (h - mean) / jnp.sqrt(var + 1e-5)


def block(x, wq, wk, wv, wo, w1, w2):
    """Pre-norm causal self-attention and an MLP, each with a residual: x is (b, t, D)."""
    h = _layer_norm(x)
    q, k, v = h @ wq, h @ wk, h @ wv
    scores = jnp.einsum("btd,bsd->bts", q, k) / np.sqrt(D).astype(np.float32)
    t = x.shape[1]
    causal = jnp.arange(t)[:, None] >= jnp.arange(t)[None, :]
    scores = jnp.where(causal, scores, -1e9)
    x = x + jnp.einsum("bts,bsd->btd", jax.nn.softmax(scores, axis=-1), v) @ wo
    return x + jax.nn.gelu(_layer_norm(x) @ w1) @ w2


def block_params(rng: np.random.Generator) -> list[np.ndarray]:
    shapes = [(D, D)] * 4 + [(D, 4 * D), (4 * D, D)]
    return [(rng.standard_normal(s) / np.sqrt(s[0])).astype(np.float32) for s in shapes]


def block_export(constraints=("t <= 64",)) -> jax.export.Exported:
    b, t = jax.export.symbolic_shape("b, t", constraints=constraints)
    f32 = jnp.float32
    params = [jax.ShapeDtypeStruct(p.shape, f32) for p in block_params(np.random.default_rng(0))]
    return jax.export.export(jax.jit(block), platforms=lane.EXPORT_PLATFORMS)(
        jax.ShapeDtypeStruct((b, t, D), f32), *params
    )


def fixed(fn, *args):
    """`fn` jitted by JAX for these arguments' own shapes: the fixed-shape program."""
    return jax.jit(fn)(*args)
