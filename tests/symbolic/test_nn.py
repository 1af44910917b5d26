"""Symbolic dimensions through what a transformer block and a small convnet use: softmax,
layer norm, attention with a causal mask, convolutions and pooling with symbolic spatial
sizes (issue 25)."""

from __future__ import annotations

import numpy as np
import pytest

import aotkit
import aotkit.numpy as anp
from aotkit import nn
from tests.symbolic.helpers import Case

D = 8
RNG = np.random.default_rng(0)
W = {k: (RNG.standard_normal((D, D)) / 3).astype(np.float32) for k in "qkvo"}
W1 = (RNG.standard_normal((D, 16)) / 3).astype(np.float32)
W2 = (RNG.standard_normal((16, D)) / 4).astype(np.float32)
KERNEL = (RNG.standard_normal((3, 3, 2, 4)) / 3).astype(np.float32)  # HWIO

BT = {"symbol": None, "values": lambda n: {"b": min(n, 2), "t": n}}
SPATIAL = {"symbol": None, "values": lambda n: {"b": min(n, 2), "h": n + 2, "w": n + 3}}


def _layer_norm(h):
    mean = h.mean(-1, keepdims=True)
    var = ((h - mean) ** 2).mean(-1, keepdims=True)
    return (h - mean) / np.sqrt(var + 1e-5)


def block(x):
    """Pre-norm causal self-attention and an MLP, each with a residual: x is (b, t, D)."""
    h = _layer_norm(x)
    q, k, v = h @ W["q"], h @ W["k"], h @ W["v"]
    scores = anp.einsum("btd,bsd->bts", q, k) / np.float32(np.sqrt(D))
    t = x.shape[1]
    causal = np.tril(anp.ones((t, t), bool))
    scores = np.where(causal, scores, -1e9)
    attn = nn.softmax(scores, axis=-1)
    x = x + (attn @ v) @ W["o"]
    return x + np.maximum(_layer_norm(x) @ W1, 0) @ W2


def conv(x):
    y = aotkit.lax.conv_general_dilated(
        x, KERNEL, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")
    )
    return nn.max_pool(nn.relu(y), (2, 2), strides=(1, 1))


CASES = {
    "softmax": Case(lambda x: nn.softmax(x, axis=-1), "f32[b,5]"),
    "softmax_symbolic_axis": Case(
        lambda x: nn.softmax(x, axis=0), "f32[b,5]", constraints=("b >= 1",), sizes=(1, 2, 7, 64)
    ),  # fmt: skip
    "log_softmax": Case(lambda x: nn.log_softmax(x), "f32[b,5]"),
    "layer_norm": Case(lambda x: nn.layer_norm(x), "f32[b,t,8]", **BT),
    "layer_norm_by_hand": Case(_layer_norm, "f32[b,8]"),
    "gelu": Case(nn.gelu, "f32[b,8]"),
    "one_hot": Case(lambda i: nn.one_hot(i % 4, 4), "i32[b]"),
    "transformer_block": Case(block, "f32[b,t,8]", atol=2e-5, rtol=1e-4, **BT),
    "conv_valid_symbolic_batch": Case(
        lambda x: aotkit.lax.conv_general_dilated(
            x, KERNEL, (1, 1), "VALID", dimension_numbers=("NHWC", "HWIO", "NHWC")
        ),
        "f32[b,6,7,2]",
        atol=1e-5,
    ),
    "conv_same_symbolic_spatial": Case(conv, "f32[b,h,w,2]", atol=1e-5, **SPATIAL),
    "conv_strided_valid_symbolic_spatial": Case(
        lambda x: aotkit.lax.conv_general_dilated(
            x, KERNEL, (2, 2), "VALID", dimension_numbers=("NHWC", "HWIO", "NHWC")
        ),
        "f32[2,h,w,2]",
        atol=1e-5,
        symbol=None,
        values=lambda n: {"h": n + 3, "w": 2 * n + 3},
    ),
    "conv_strided_same_symbolic_spatial": Case(
        lambda x: aotkit.lax.conv_general_dilated(
            x, KERNEL, (2, 2), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")
        ),
        "f32[1,h,w,2]",
        atol=1e-5,
        **SPATIAL,
    ),
    "max_pool_same_strided": Case(
        lambda x: nn.max_pool(x, (3, 3), strides=(2, 2), padding="SAME"), "f32[1,h,w,3]", **SPATIAL
    ),
    "max_pool_symbolic_spatial": Case(
        lambda x: nn.max_pool(x, (2, 2), strides=(2, 2)), "f32[1,h,w,3]", **SPATIAL
    ),  # fmt: skip
    "avg_pool_symbolic_batch": Case(lambda x: nn.avg_pool(x, (2, 2)), "f32[b,5,6,3]"),
}


@pytest.mark.parametrize("name", CASES)
def test_nn(name):
    CASES[name].run()
