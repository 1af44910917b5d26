"""Small models written with aotkit.numpy + aotkit.nn equal the same models written in JAX.

A CNN (conv, relu, max pool, conv, relu, avg pool, dense, softmax, NHWC layouts) and a
pre-LN transformer block (layer_norm, causal multi-head attention with a masked softmax,
a gelu MLP, residual dropout drawn from a key) run with the same weights and inputs in
aotkit on the CPU backend and in JAX (`jax.numpy`, `jax.nn`, `jax.lax`, `jax.random`).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import aotkit
import aotkit.numpy as anp
from aotkit import nn
from aotkit import random as ar
from tests.helpers import assert_matches

RTOL, ATOL = 2e-5, 2e-5
LAYOUT = ("NHWC", "HWIO", "NHWC")


def _params(shapes: dict, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    return {
        k: (rng.standard_normal(s) / math.sqrt(max(1, math.prod(s[:-1])))).astype(np.float32)
        for k, s in shapes.items()
    }


# --- CNN --------------------------------------------------------------------------------------

CNN_SHAPES = {
    "conv1": (3, 3, 3, 8),
    "b1": (8,),
    "conv2": (3, 3, 8, 16),
    "b2": (16,),
    "dense": (64, 10),
    "bd": (10,),
}


def cnn_aotkit(p, x):
    h = nn.conv_general_dilated(x, p["conv1"], (1, 1), "SAME", dimension_numbers=LAYOUT)
    h = nn.max_pool(nn.relu(h + p["b1"]), (2, 2), strides=(2, 2))
    h = nn.conv_general_dilated(h, p["conv2"], (1, 1), "VALID", dimension_numbers=LAYOUT)
    h = nn.avg_pool(nn.relu(h + p["b2"]), (2, 2), strides=(2, 2))
    logits = anp.reshape(h, (h.shape[0], -1)) @ p["dense"] + p["bd"]
    return nn.softmax(logits), nn.log_softmax(logits)


def cnn_jax(p, x):
    def pool(h, init, op):
        return jax.lax.reduce_window(h, init, op, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")

    h = jax.lax.conv_general_dilated(x, p["conv1"], (1, 1), "SAME", dimension_numbers=LAYOUT)
    h = pool(jax.nn.relu(h + p["b1"]), -jnp.inf, jax.lax.max)
    h = jax.lax.conv_general_dilated(h, p["conv2"], (1, 1), "VALID", dimension_numbers=LAYOUT)
    h = pool(jax.nn.relu(h + p["b2"]), 0.0, jax.lax.add) / 4
    logits = h.reshape(h.shape[0], -1) @ p["dense"] + p["bd"]
    return jax.nn.softmax(logits), jax.nn.log_softmax(logits)


@pytest.mark.parametrize("batch", [1, 4])
def test_cnn_matches_jax(batch):
    params = _params(CNN_SHAPES, 0)
    x = np.random.default_rng(batch).standard_normal((batch, 12, 12, 3)).astype(np.float32)
    got = aotkit.jit(cnn_aotkit)(params, x)
    want = jax.jit(cnn_jax)(params, x)
    for g, w in zip(got, want, strict=True):
        assert_matches(np.asarray(g), np.asarray(w), "cnn", rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(np.asarray(got[0]).sum(-1), 1.0, rtol=1e-6)


def test_cnn_lowers_to_convolutions_and_windows():
    params = _params(CNN_SHAPES, 0)
    text = aotkit.lower(cnn_aotkit, params, aotkit.spec("f32[2,12,12,3]")).as_text()
    assert text.count("stablehlo.convolution") == 2
    assert text.count("stablehlo.reduce_window") == 2


# --- transformer block ------------------------------------------------------------------------

B, T, D, HEADS = 2, 8, 16, 4
BLOCK_SHAPES = {
    "ln1_scale": (D,),
    "ln1_bias": (D,),
    "wq": (D, D),
    "wk": (D, D),
    "wv": (D, D),
    "wo": (D, D),
    "ln2_scale": (D,),
    "ln2_bias": (D,),
    "w1": (D, 4 * D),
    "b1": (4 * D,),
    "w2": (4 * D, D),
    "b2": (D,),
}
RATE = 0.1


def block_aotkit(p, x, key, train):
    def heads(t):
        return anp.transpose(anp.reshape(t, (B, T, HEADS, D // HEADS)), (0, 2, 1, 3))

    h = nn.layer_norm(x, p["ln1_scale"], p["ln1_bias"], eps=1e-6)
    q, k, v = heads(h @ p["wq"]), heads(h @ p["wk"]), heads(h @ p["wv"])
    scores = q @ anp.swapaxes(k, -1, -2) / math.sqrt(D // HEADS)
    causal = anp.tril(anp.ones((T, T), dtype=bool))
    attn = nn.softmax(scores, axis=-1, where=causal)
    out = anp.reshape(anp.transpose(attn @ v, (0, 2, 1, 3)), (B, T, D)) @ p["wo"]
    k1, k2 = ar.split(key)
    x = x + nn.dropout(k1, RATE, out, deterministic=not train)
    h = nn.layer_norm(x, p["ln2_scale"], p["ln2_bias"], eps=1e-6)
    h = nn.gelu(h @ p["w1"] + p["b1"]) @ p["w2"] + p["b2"]
    return x + nn.dropout(k2, RATE, h, deterministic=not train)


def block_jax(p, x, key, train):
    def layer_norm(t, scale, bias):
        mean = t.mean(-1, keepdims=True)
        var = jnp.square(t - mean).mean(-1, keepdims=True)
        return (t - mean) * jax.lax.rsqrt(var + 1e-6) * scale + bias

    def dropout(k, t):
        if not train:
            return t
        keep = 1.0 - RATE
        return jnp.where(jax.random.bernoulli(k, keep, t.shape), t / keep, 0)

    def heads(t):
        return t.reshape(B, T, HEADS, D // HEADS).transpose(0, 2, 1, 3)

    h = layer_norm(x, p["ln1_scale"], p["ln1_bias"])
    q, k, v = heads(h @ p["wq"]), heads(h @ p["wk"]), heads(h @ p["wv"])
    scores = q @ k.swapaxes(-1, -2) / math.sqrt(D // HEADS)
    causal = jnp.tril(jnp.ones((T, T), bool))
    attn = jax.nn.softmax(scores, axis=-1, where=causal)
    out = (attn @ v).transpose(0, 2, 1, 3).reshape(B, T, D) @ p["wo"]
    k1, k2 = jax.random.split(key)
    x = x + dropout(k1, out)
    h = layer_norm(x, p["ln2_scale"], p["ln2_bias"])
    h = jax.nn.gelu(h @ p["w1"] + p["b1"]) @ p["w2"] + p["b2"]
    return x + dropout(k2, h)


@pytest.mark.parametrize("train", [False, True])
def test_transformer_block_matches_jax(train):
    params = _params(BLOCK_SHAPES, 1)
    params["ln1_scale"] += 1.0
    params["ln2_scale"] += 1.0
    x = np.random.default_rng(2).standard_normal((B, T, D)).astype(np.float32)
    key = ar.key(11)
    got = aotkit.jit(block_aotkit, static_argnames="train")(params, x, key, train=train)
    want = jax.jit(block_jax, static_argnames="train")(params, x, jax.random.PRNGKey(11), train)
    assert_matches(np.asarray(got), np.asarray(want), f"block train={train}", rtol=RTOL, atol=ATOL)


def test_transformer_attention_never_looks_ahead():
    params = _params(BLOCK_SHAPES, 1)
    x = np.random.default_rng(3).standard_normal((B, T, D)).astype(np.float32)
    changed = x.copy()
    changed[:, -1] += 10.0
    f = aotkit.jit(block_aotkit, static_argnames="train")
    a = np.asarray(f(params, x, ar.key(0), train=False))
    b = np.asarray(f(params, changed, ar.key(0), train=False))
    np.testing.assert_array_equal(a[:, :-1], b[:, :-1])
