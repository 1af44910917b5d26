"""End to end: training steps written with aotkit.numpy and differentiated by aotkit.grad,
compiled ahead of time, saved, loaded in a fresh process and trained; per-example
gradients with vmap(grad); the oracle is the same model in JAX (jax.value_and_grad)."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import aotkit
import aotkit.numpy as anp
from tests.helpers import pythonpath

ROOT = Path(__file__).resolve().parents[2]
STEPS = 200


def init(seed=0, d_in=16, hidden=32, classes=10):
    rng = np.random.default_rng(seed)

    def f32(*shape, scale):
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    params = {
        "w1": f32(d_in, hidden, scale=0.3),
        "b1": np.zeros(hidden, np.float32),
        "w2": f32(hidden, classes, scale=0.3),
        "b2": np.zeros(classes, np.float32),
    }
    zeros = {k: np.zeros_like(v) for k, v in params.items()}
    return params, (zeros, dict(zeros), np.zeros((), np.float32))


def batch(seed=1, n=64, d_in=16, classes=10):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, d_in)).astype(np.float32)
    labels = rng.integers(0, classes, n)
    return x, np.eye(classes, dtype=np.float32)[labels]


def loss(xp, params, x, y):
    """Softmax cross-entropy of a 2-layer MLP (one definition for aotkit.numpy and jnp)."""
    h = xp.tanh(x @ params["w1"] + params["b1"])
    logits = h @ params["w2"] + params["b2"]
    shifted = logits - xp.max(logits, axis=1, keepdims=True)
    logp = shifted - xp.log(xp.sum(xp.exp(shifted), axis=1, keepdims=True))
    return -xp.mean(xp.sum(y * logp, axis=1))


def adam(xp, params, grads, state, lr=1e-2, b1=0.9, b2=0.999, eps=1e-8):
    m, v, t = state
    t = t + 1
    m = {k: b1 * m[k] + (1 - b1) * grads[k] for k in params}
    v = {k: b2 * v[k] + (1 - b2) * grads[k] * grads[k] for k in params}
    scale = xp.sqrt(1 - b2**t) / (1 - b1**t)
    new = {k: params[k] - lr * scale * m[k] / (xp.sqrt(v[k]) + eps) for k in params}
    return new, (m, v, t)


def aotkit_step(params, state, x, y):
    value, grads = aotkit.value_and_grad(functools.partial(loss, anp))(params, x, y)
    params, state = adam(anp, params, grads, state)
    return params, state, value


def jax_step(params, state, x, y):
    value, grads = jax.value_and_grad(functools.partial(loss, jnp))(params, x, y)
    params, state = adam(jnp, params, grads, state)
    return params, state, value


def jax_curve():
    params, state = init()
    x, y = batch()
    step = jax.jit(jax_step)
    losses = []
    for _ in range(STEPS):
        params, state, value = step(params, state, x, y)
        losses.append(float(value))
    return np.array(losses, np.float32), params


_CHILD = textwrap.dedent(
    """
    import sys
    import numpy as np
    import aotkit
    from tests.transforms.test_training import STEPS, batch, init

    step = aotkit.load(sys.argv[1])
    params, state = init()
    x, y = batch()
    losses = []
    for _ in range(STEPS):
        params, state, value = step(params, state, x, y)
        losses.append(float(value))
    np.save(sys.argv[2], np.array(losses, np.float32))
    np.savez(sys.argv[3], **{k: np.asarray(v) for k, v in params.items()})
    """
)


def test_an_adam_training_step_saved_and_loaded_trains_as_jax(tmp_path):
    params, state = init()
    x, y = batch()
    compiled = aotkit.jit(aotkit_step).lower(params, state, x, y).compile()
    path = tmp_path / "step.aotx"
    compiled.save(path)
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, str(path), str(tmp_path / "l.npy"), str(tmp_path / "p")],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": pythonpath(ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = np.load(tmp_path / "l.npy")
    want, want_params = jax_curve()
    assert got.dtype == np.float32
    assert got[-1] < 0.5 * got[0]  # it trains
    np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-5)
    final = np.load(tmp_path / "p.npz")
    for k, w in want_params.items():
        np.testing.assert_allclose(final[k], np.asarray(w), rtol=1e-3, atol=1e-4)


def test_the_step_program_is_one_module_with_no_jax():
    params, state = init()
    x, y = batch()
    text = aotkit.jit(aotkit_step).lower(params, state, x, y).as_text()
    assert text.count("func.func") == 1
    assert "custom_call" not in text


def test_per_example_gradients_with_vmap_of_grad():
    params, _ = init()
    x, y = batch(n=8)
    got = aotkit.jit(aotkit.vmap(aotkit.grad(functools.partial(loss, anp)), in_axes=(None, 0, 0)))(
        params, x[:, None], y[:, None]
    )
    want = jax.vmap(jax.grad(functools.partial(loss, jnp)), in_axes=(None, 0, 0))(
        params, x[:, None], y[:, None]
    )
    for k in params:
        assert got[k].shape == (8,) + params[k].shape
        assert got[k].dtype == np.float32
        np.testing.assert_allclose(np.asarray(got[k]), np.asarray(want[k]), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("argnums", [0, (0, 2)])
def test_value_and_grad_of_a_pytree_matches_jax(argnums):
    params, _ = init()
    x, y = batch(n=8)
    value, grads = aotkit.value_and_grad(functools.partial(loss, anp), argnums=argnums)(
        params, x, y
    )
    want_value, want = jax.value_and_grad(functools.partial(loss, jnp), argnums=argnums)(
        params, x, y
    )
    np.testing.assert_allclose(np.asarray(value), np.asarray(want_value), rtol=1e-6)
    for g, w in zip(jax.tree.leaves(grads), jax.tree.leaves(want), strict=True):
        assert np.asarray(g).dtype == np.asarray(w).dtype
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-5, atol=1e-6)
