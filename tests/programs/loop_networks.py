"""Networks written as Python loops over output positions, as NumPy tutorials write them:
a convolution, LeNet and a residual block. Their windows start at `i * stride` and end at
`i * stride + k` or `(i + 1) * k`; every loop over more than a few positions must become one
StableHLO loop (the unrolled LeNet was 34,365 ops and took minutes to compile)."""

from __future__ import annotations

import numpy as np


def conv2d(x, w):
    H, W = x.shape
    kh, kw = w.shape
    out = np.zeros((H - kh + 1, W - kw + 1), dtype=x.dtype)
    for i in range(H - kh + 1):
        for j in range(W - kw + 1):
            out[i, j] = np.sum(x[i : i + kh, j : j + kw] * w)
    return out


def conv(x, w, b, stride=1, pad=0):
    C, H, W = x.shape
    F, _, KH, KW = w.shape
    if pad:
        x = np.pad(x, ((0, 0), (pad, pad), (pad, pad)))
        H, W = H + 2 * pad, W + 2 * pad
    OH = (H - KH) // stride + 1
    OW = (W - KW) // stride + 1
    out = np.zeros((F, OH, OW), dtype=x.dtype)
    for f in range(F):
        for i in range(OH):
            for j in range(OW):
                hs, ws = i * stride, j * stride
                out[f, i, j] = np.sum(x[:, hs : hs + KH, ws : ws + KW] * w[f]) + b[f]
    return out


def maxpool(x, k=2):
    C, H, W = x.shape
    out = np.zeros((C, H // k, W // k), dtype=x.dtype)
    for c in range(C):
        for i in range(H // k):
            for j in range(W // k):
                out[c, i, j] = np.max(x[c, i * k : (i + 1) * k, j * k : (j + 1) * k])
    return out


def lenet(x, w1, b1, w2, b2, w3, b3):
    h = maxpool(np.maximum(conv(x, w1, b1), 0))
    h = maxpool(np.maximum(conv(h, w2, b2), 0))
    return h.reshape(-1) @ w3 + b3


def residual_block(x, w1, b1, w2, b2, wd, bd):
    h = np.maximum(conv(x, w1, b1, stride=2, pad=1), 0)
    h = conv(h, w2, b2, stride=1, pad=1)
    shortcut = conv(x, wd, bd, stride=2)
    return np.maximum(h + shortcut, 0)


def make_conv2d(rng):
    return rng.random((24, 24), np.float32), rng.random((3, 3), np.float32)


def make_lenet(rng):
    return (
        rng.random((1, 28, 28), np.float32),
        rng.standard_normal((6, 1, 5, 5), np.float32) * 0.3,
        rng.standard_normal(6, np.float32) * 0.1,
        rng.standard_normal((16, 6, 5, 5), np.float32) * 0.1,
        rng.standard_normal(16, np.float32) * 0.1,
        rng.standard_normal((16 * 4 * 4, 10), np.float32) * 0.1,
        rng.standard_normal(10, np.float32) * 0.1,
    )


def make_residual_block(rng):
    return (
        rng.random((4, 12, 12), np.float32),
        rng.standard_normal((8, 4, 3, 3), np.float32) * 0.2,
        rng.standard_normal(8, np.float32) * 0.1,
        rng.standard_normal((8, 8, 3, 3), np.float32) * 0.2,
        rng.standard_normal(8, np.float32) * 0.1,
        rng.standard_normal((8, 4, 1, 1), np.float32) * 0.2,
        rng.standard_normal(8, np.float32) * 0.1,
    )


# name: (function, argument maker, the StableHLO loops it must become)
NETWORKS = {
    "conv2d": (conv2d, make_conv2d, 2),
    # conv (3 loops) and maxpool (3 loops) twice; the second pool's 4x4 loops unroll.
    "lenet": (lenet, make_lenet, 10),
    "residual_block": (residual_block, make_residual_block, 9),
}
