"""Real programs written as plain NumPy, traced unchanged through aotkit.lower.

Nothing inside the programs names aotkit: they call `np.*` and array methods only, and
NumPy's dispatch protocols route those calls on tracers to aotkit.numpy. Each program is
lowered once, run on the CPU backend, and compared with running it on NumPy arrays
(values and result dtypes).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import aotkit
from tests.helpers import assert_matches as _check
from tests.helpers import run_on

RNG = np.random.default_rng(3)


def _normal(*shape, dtype=np.float32, scale=1.0):
    return (RNG.normal(size=shape) * scale).astype(dtype)


# --- the programs: plain NumPy only ------------------------------------------------------------


def layer_norm(x, eps=1e-5):
    mu = x.mean(axis=-1, keepdims=True)
    var = np.var(x, axis=-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps)


def mlp(x, params):
    h = x
    for w, b in params[:-1]:
        h = np.maximum(h @ w + b, 0.0)
        h = layer_norm(h)
    w, b = params[-1]
    logits = h @ w + b
    # log-softmax, stabilised the usual way
    shifted = logits - np.max(logits, axis=-1, keepdims=True)
    return shifted - np.log(np.sum(np.exp(shifted), axis=-1, keepdims=True))


def attention(x, wq, wk, wv, wo, n_heads):
    b, t, d = x.shape
    hd = d // n_heads

    def heads(y):
        return y.reshape(b, t, n_heads, hd).transpose(0, 2, 1, 3)

    q, k, v = heads(x @ wq), heads(x @ wk), heads(x @ wv)
    scores = np.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(hd)
    causal = np.tril(np.ones((t, t), dtype=bool))
    scores = np.where(causal, scores, -1e9)
    scores = scores - scores.max(axis=-1, keepdims=True)
    p = np.exp(scores)
    p = p / p.sum(axis=-1, keepdims=True)
    out = (p @ v).transpose(0, 2, 1, 3).reshape(b, t, d)
    return out @ wo, p


def kmeans_step(points, centroids):
    k = centroids.shape[0]
    d2 = np.sum((points[:, None, :] - centroids[None, :, :]) ** 2, axis=-1)
    assign = np.argmin(d2, axis=1)
    onehot = (assign[:, None] == np.arange(k)[None, :]).astype(points.dtype)
    counts = onehot.sum(axis=0)
    new_centroids = (onehot.T @ points) / np.maximum(counts, 1)[:, None]
    inertia = np.sum(np.min(d2, axis=1))
    return assign, new_centroids, inertia


def rbf_kernel(x, y, gamma=0.5):
    sq = np.sum(x * x, axis=1)[:, None] + np.sum(y * y, axis=1)[None, :] - 2.0 * (x @ y.T)
    dist = np.sqrt(np.maximum(sq, 0.0))
    return np.exp(-gamma * dist**2), dist


def normal_cdf(x):
    # Abramowitz & Stegun 7.1.26 for erf (|error| < 1.5e-7): plain NumPy has no erf.
    a1, a2, a3, a4, a5 = 0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429
    p = 0.3275911
    z = np.abs(x) / np.sqrt(2.0)
    t = 1.0 / (1.0 + p * z)
    poly = ((((a5 * t + a4) * t + a3) * t + a2) * t + a1) * t
    erf = 1.0 - poly * np.exp(-z * z)
    return 0.5 * (1.0 + np.sign(x) * erf)


def black_scholes(spot, strike, t, rate, vol):
    sqrt_t = np.sqrt(t)
    d1 = (np.log(spot / strike) + (rate + 0.5 * vol**2) * t) / (vol * sqrt_t)
    d2 = d1 - vol * sqrt_t
    discount = strike * np.exp(-rate * t)
    call = spot * normal_cdf(d1) - discount * normal_cdf(d2)
    put = discount * normal_cdf(-d2) - spot * normal_cdf(-d1)
    return call, put


def heat_stencil(u, steps, alpha=0.2):
    u = np.copy(u)
    for _ in range(steps):
        lap = u[2:, 1:-1] + u[:-2, 1:-1] + u[1:-1, 2:] + u[1:-1, :-2] - 4 * u[1:-1, 1:-1]
        u[1:-1, 1:-1] = u[1:-1, 1:-1] + alpha * lap
        u[:, 0] = 1.0  # a hot left wall
        u[-1] += 0.01 * u[-2]
    return u


# --- tests ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_mlp_forward(dtype):
    sizes = [16, 32, 32, 10]
    params = [
        (_normal(m, n, dtype=dtype, scale=1 / math.sqrt(m)), _normal(n, dtype=dtype, scale=0.1))
        for m, n in zip(sizes[:-1], sizes[1:], strict=True)
    ]
    x = _normal(8, 16, dtype=dtype)
    tol = 1e-4 if dtype == np.float32 else 1e-10
    _check(run_on("cpu", mlp, x, params), mlp(x, params), rtol=tol, atol=tol)


def test_multi_head_attention():
    d, heads = 16, 4
    x = _normal(2, 6, d)
    ws = [_normal(d, d, scale=1 / math.sqrt(d)) for _ in range(4)]
    got = run_on("cpu", lambda *a: attention(*a, n_heads=heads), x, *ws)
    want = attention(x, *ws, n_heads=heads)
    _check(got[0], want[0], rtol=1e-4, atol=1e-5, label="output")
    _check(got[1], want[1], rtol=1e-4, atol=1e-6, label="attention weights")
    np.testing.assert_allclose(got[1].sum(-1), 1.0, rtol=1e-5)


def test_kmeans_assignment_step():
    centers = np.array([[0, 0], [5, 5], [-5, 5]], np.float32)
    points = (centers[RNG.integers(0, 3, 40)] + _normal(40, 2, scale=0.5)).astype(np.float32)
    init = points[:3] + 0.1
    got = run_on("cpu", kmeans_step, points, init)
    want = kmeans_step(points, init)
    _check(got[0], want[0], label="assignment")
    _check(got[1], want[1], rtol=1e-5, atol=1e-5, label="centroids")
    _check(got[2], want[2], rtol=1e-5, label="inertia")


def test_pairwise_distance_kernel():
    x, y = _normal(12, 5, dtype=np.float64), _normal(7, 5, dtype=np.float64)
    got = run_on("cpu", rbf_kernel, x, y)
    want = rbf_kernel(x, y)
    _check(got[0], want[0], rtol=1e-10, atol=1e-12, label="kernel")
    _check(got[1], want[1], rtol=1e-8, atol=1e-7, label="distances")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_black_scholes(dtype):
    n = 64
    spot = RNG.uniform(50, 150, n).astype(dtype)
    strike = RNG.uniform(50, 150, n).astype(dtype)
    t = RNG.uniform(0.1, 2.0, n).astype(dtype)
    vol = RNG.uniform(0.1, 0.5, n).astype(dtype)
    rate = dtype(0.03)
    got = run_on("cpu", black_scholes, spot, strike, t, rate, vol)
    want = black_scholes(spot, strike, t, rate, vol)
    tol = {"rtol": 1e-4, "atol": 1e-3} if dtype == np.float32 else {"rtol": 1e-10, "atol": 1e-9}
    _check(got[0], want[0], label="call", **tol)
    _check(got[1], want[1], label="put", **tol)
    # put-call parity holds for the traced prices as well
    parity = got[0] - got[1] - (spot - strike * np.exp(-rate * t))
    np.testing.assert_allclose(parity, 0.0, atol=1e-2 if dtype == np.float32 else 1e-8)


def test_stencil_updates_slices_of_its_own_array():
    u0 = np.zeros((8, 10), np.float32)
    u0[3:5, 4:6] = 1.0
    got = run_on("cpu", lambda u: heat_stencil(u, steps=6), u0)
    _check(got, heat_stencil(u0, steps=6), rtol=1e-5, atol=1e-6)
    assert u0[0, 0] == 0.0, "the input was written to"


def test_programs_lower_without_aotkit_names():
    # The modules are plain StableHLO: the products are dot_generals, the reductions reduces.
    text = aotkit.lower(kmeans_step, aotkit.spec("f32[40,2]"), aotkit.spec("f32[3,2]")).as_text()
    assert "stablehlo.dot_general" in text and "stablehlo.reduce" in text
