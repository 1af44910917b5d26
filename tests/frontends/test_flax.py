"""A Flax transformer trained with Optax through aotkit's JAX front end, bit for bit with jax.jit.

Skipped unless flax and optax are installed (`pip install -e '.[flax]'`). The model is what a
Flax user writes: a pre-norm transformer block (MultiHeadDotProductAttention, LayerNorm, an
MLP), token and position embeddings, a softmax cross-entropy loss, and a training step that
takes `jax.value_and_grad` of it and applies `optax.adamw` with gradient clipping. Its Optax
state is a tree of namedtuples. aotkit's executable must give jax.jit's parameters, optimizer
state and loss, bit for bit, after every one of 20 steps.
"""

from __future__ import annotations

import numpy as np
import pytest

flax = pytest.importorskip("flax", reason="flax is not installed: pip install -e '.[flax]'")
optax = pytest.importorskip("optax", reason="optax is not installed: pip install -e '.[flax]'")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from flax import linen as nn  # noqa: E402
from jax import tree_util  # noqa: E402

import aotkit  # noqa: E402

VOCAB, LENGTH, WIDTH, HEADS = 50, 12, 32, 4


class Block(nn.Module):
    @nn.compact
    def __call__(self, x, mask):
        y = nn.LayerNorm()(x)
        y = nn.MultiHeadDotProductAttention(num_heads=HEADS, qkv_features=WIDTH)(y, y, mask=mask)
        x = x + y
        y = nn.LayerNorm()(x)
        y = nn.Dense(4 * WIDTH)(y)
        return x + nn.Dense(WIDTH)(nn.gelu(y))


class Transformer(nn.Module):
    @nn.compact
    def __call__(self, tokens):
        x = nn.Embed(VOCAB, WIDTH)(tokens)
        x = x + self.param("position", nn.initializers.normal(0.02), (LENGTH, WIDTH))
        mask = nn.make_causal_mask(tokens)
        for _ in range(2):
            x = Block()(x, mask)
        return nn.Dense(VOCAB)(nn.LayerNorm()(x))


MODEL = Transformer()
OPTIMIZER = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(3e-3, weight_decay=1e-2))


def loss_fn(params, tokens):
    logits = MODEL.apply(params, tokens[:, :-1])
    targets = tokens[:, 1:]
    return optax.softmax_cross_entropy_with_integer_labels(logits, targets).mean()


def train_step(params, opt_state, tokens):
    loss, grads = jax.value_and_grad(loss_fn)(params, tokens)
    updates, opt_state = OPTIMIZER.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss


def _start():
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, VOCAB, (4, LENGTH + 1)).astype(np.int32)
    params = MODEL.init(jax.random.PRNGKey(0), tokens[:, :-1])
    return params, OPTIMIZER.init(params), tokens


def _assert_identical(ours, theirs):
    ours_leaves, ours_tree = tree_util.tree_flatten(ours)
    theirs_leaves, theirs_tree = tree_util.tree_flatten(theirs)
    assert ours_tree == theirs_tree
    for a, b in zip(ours_leaves, theirs_leaves, strict=True):
        a, b = np.asarray(a), np.asarray(b)
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a, b)


def test_a_flax_transformer_training_step_equals_jax_jit_bit_for_bit_over_twenty_steps():
    params, opt_state, tokens = _start()
    step_aotkit, step_jax = aotkit.jit(train_step), jax.jit(train_step)
    assert step_aotkit.lower(params, opt_state, tokens).pipeline == "none"
    ours = theirs = (params, opt_state)
    losses = []
    for _ in range(20):
        *ours, loss_ours = step_aotkit(*ours, tokens)
        *theirs, loss_theirs = step_jax(*theirs, tokens)
        _assert_identical((ours, loss_ours), (theirs, loss_theirs))
        losses.append(float(loss_ours))
    assert losses[-1] < losses[0] - 0.5  # it trains


def test_the_flax_forward_pass_equals_jax_jit_bit_for_bit_with_donated_parameters():
    params, _, tokens = _start()
    ours = aotkit.jit(lambda p, t: MODEL.apply(p, t), donate_argnums=())(params, tokens[:, :-1])
    theirs = jax.jit(lambda p, t: MODEL.apply(p, t))(params, tokens[:, :-1])
    _assert_identical(ours, theirs)
    assert np.asarray(ours).dtype == jnp.float32
