"""Run time of NumPy kernels traced by aotkit against NumPy itself and jax.jit, in one run.

    python benchmarks/runtime.py [--rounds 9] [--kernels atax bicg ...]

The kernels are plain NumPy functions: the matrix-vector kernels of PolyBench on a
2000x2500 float64 matrix, a 2-D convolution with bias written as one `tensordot` per
filter tap, and PolyBench's covariance and correlation (a row loop of vector-matrix
products, written as npbench writes them) and seidel_2d (an in-place 9-point stencil in a
time loop). Each runs in NumPy and under `aotkit.jit` of the same function, with NumPy inputs
(what a NumPy program passes) and with the inputs already on the device, and under
`jax.jit` of the same kernel written with jax.numpy (its loops as `lax.fori_loop`), with
NumPy inputs. trmm is npbench's JAX version, run by `aotkit.jit(frontend="jax")` and by
`jax.jit` (one module, lowered by JAX), against npbench's NumPy version.

Every call runs to its result. Rounds are interleaved (every variant once per round), cells
are milliseconds, best / median round, and the ratios are of those bests and medians,
measured in this run: NumPy's time over aotkit's (above 1: faster than NumPy) and jax.jit's
over aotkit's (above 1: faster than jax.jit), both with NumPy inputs.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import statistics
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jaxlib.mlir import ir

import aotkit

M, N = 2000, 2500
MIN_CELL = 20e-3  # seconds of calls per cell, at least


# --- the NumPy kernels and their jax.numpy twins -------------------------------------------------


def atax(A, x):
    return A.T @ (A @ x)


def bicg(A, r, p):
    return A.T @ r, A @ p


def mvt(A, x1, x2, y1, y2):
    return x1 + A @ y1, x2 + A.T @ y2


def gesummv(A, B, x):
    return 1.5 * (A @ x) + 1.2 * (B @ x)


def conv2d_bias(x, w, b, xp=np):
    """x: (channels, height, width); w: (filters, channels, rows, cols); b: (filters,)."""
    k, _, rows, cols = w.shape
    h, wd = x.shape[1] - rows + 1, x.shape[2] - cols + 1
    out = xp.zeros((k, h, wd), x.dtype) + b[:, None, None]
    for r in range(rows):
        for s in range(cols):
            out = out + xp.tensordot(w[:, :, r, s], x[:, r : r + h, s : s + wd], axes=(1, 0))
    return out


def covariance(data):
    """PolyBench's covariance as npbench writes it: each column against the columns from it
    on, written into a row and a column at once."""
    m, float_n = data.shape[1], float(data.shape[0])
    data = data - np.mean(data, axis=0)
    cov = np.zeros((m, m), dtype=data.dtype)
    for i in range(m):
        cov[i:m, i] = cov[i, i:m] = data[:, i] @ data[:, i:m] / (float_n - 1.0)
    return cov


def covariance_jax(data):
    m, float_n = data.shape[1], float(data.shape[0])
    data = data - jnp.mean(data, axis=0)
    cols = jnp.arange(m)

    def row(i, cov):
        r = jnp.where(cols >= i, data[:, i] @ data / (float_n - 1.0), 0.0)
        return (
            cov.at[i, :]
            .set(jnp.where(cols >= i, r, cov[i, :]))
            .at[:, i]
            .set(jnp.where(cols >= i, r, cov[:, i]))
        )

    return jax.lax.fori_loop(0, m, row, jnp.zeros((m, m), data.dtype))


def correlation(data):
    """PolyBench's correlation as npbench writes it."""
    m, float_n = data.shape[1], float(data.shape[0])
    mean = np.mean(data, axis=0)
    stddev = np.std(data, axis=0)
    stddev[stddev <= 0.1] = 1.0
    data = (data - mean) / (np.sqrt(float_n) * stddev)
    corr = np.eye(m, dtype=data.dtype)
    for i in range(m - 1):
        corr[i + 1 : m, i] = corr[i, i + 1 : m] = data[:, i] @ data[:, i + 1 : m]
    return corr


def correlation_jax(data):
    m, float_n = data.shape[1], float(data.shape[0])
    mean = jnp.mean(data, axis=0)
    stddev = jnp.std(data, axis=0)
    stddev = jnp.where(stddev <= 0.1, 1.0, stddev)
    data = (data - mean) / (jnp.sqrt(float_n) * stddev)
    cols = jnp.arange(m)

    def row(i, corr):
        r = data[:, i] @ data
        return (
            corr.at[i, :]
            .set(jnp.where(cols > i, r, corr[i, :]))
            .at[:, i]
            .set(jnp.where(cols > i, r, corr[:, i]))
        )

    return jax.lax.fori_loop(0, m - 1, row, jnp.eye(m, dtype=data.dtype))


def seidel_2d(A, tsteps):
    """PolyBench's seidel_2d as npbench writes it: the row's 8 earlier-known neighbours as
    one vector sum, then the running sweep along the row, in place."""
    A = A.copy()
    n = A.shape[0]
    for _ in range(tsteps - 1):
        for i in range(1, n - 1):
            A[i, 1:-1] += (
                A[i - 1, :-2]
                + A[i - 1, 1:-1]
                + A[i - 1, 2:]
                + A[i, 2:]
                + A[i + 1, :-2]
                + A[i + 1, 1:-1]
                + A[i + 1, 2:]
            )
            for j in range(1, n - 1):
                A[i, j] += A[i, j - 1]
                A[i, j] /= 9.0
    return A


def seidel_2d_jax(A, tsteps):
    n = A.shape[0]

    def row(i, A):
        s = A[i, 1:-1] + A[i - 1, :-2] + A[i - 1, 1:-1] + A[i - 1, 2:] + A[i, 2:]
        s = s + A[i + 1, :-2] + A[i + 1, 1:-1] + A[i + 1, 2:]
        r = jax.lax.dynamic_index_in_dim(A, i, keepdims=False)

        def col(j, r):
            return r.at[j].set((r[j - 1] + s[j - 1]) / 9.0)

        return A.at[i].set(jax.lax.fori_loop(1, n - 1, col, r))

    return jax.lax.fori_loop(0, tsteps - 1, lambda t, A: jax.lax.fori_loop(1, n - 1, row, A), A)


def trmm(alpha, A, B):
    """npbench's NumPy trmm."""
    B = B.copy()
    for i in range(B.shape[0]):
        for j in range(B.shape[1]):
            B[i, j] += np.dot(A[i + 1 :, i], B[i + 1 :, j])
    return B * alpha


def trmm_jax(alpha, A, B):
    """npbench's JAX trmm: scans over the rows and columns, the slices as masks."""

    def body_fun(carry, i):
        B = carry

        def inner_body_fun(carry, j):
            B = carry
            A_slice = jnp.where(jnp.arange(A.shape[0]) > i, A[:, i], 0.0)
            B_slice = jnp.where(jnp.arange(B.shape[0]) > i, B[:, j], 0.0)
            B = B.at[i, j].add(jnp.dot(A_slice, B_slice))
            return B, None

        B, _ = jax.lax.scan(inner_body_fun, B, jnp.arange(B.shape[1]))
        return B, None

    B, _ = jax.lax.scan(body_fun, B, jnp.arange(B.shape[0]))
    return alpha * B


@dataclasses.dataclass(frozen=True)
class Kernel:
    numpy: Callable
    jax: Callable  # the same kernel in jax.numpy (or npbench's JAX version)
    size: str
    static: tuple = ()  # static argument positions (under both jits)
    aotkit_runs: str = "numpy"  # which version aotkit runs: "numpy" or "jax" (frontend="jax")


KERNELS = {
    "atax": Kernel(atax, atax, "2000x2500 f64"),
    "bicg": Kernel(bicg, bicg, "2000x2500 f64"),
    "mvt": Kernel(mvt, mvt, "2000x2500 f64"),
    "gesummv": Kernel(gesummv, gesummv, "2x 2000x2500 f64"),
    "conv2d+bias": Kernel(conv2d_bias, lambda x, w, b: conv2d_bias(x, w, b, jnp), "32x128x128 f32"),
    "covariance": Kernel(covariance, covariance_jax, "260x240 f64"),
    "correlation": Kernel(correlation, correlation_jax, "260x240 f64"),
    "seidel_2d": Kernel(seidel_2d, seidel_2d_jax, "60x60 f64, 10 steps", static=(1,)),
    "trmm (jax)": Kernel(trmm, trmm_jax, "20x20, 20x30 f64", aotkit_runs="jax"),
}


def inputs(kernel: str, rng: np.random.Generator) -> tuple:
    def mat(m=M, n=N):
        return rng.standard_normal((m, n))

    def vec(n):
        return rng.standard_normal(n)

    if kernel == "atax":
        return mat(), vec(N)
    if kernel == "bicg":
        return mat(), vec(M), vec(N)
    if kernel == "mvt":
        return mat(), vec(M), vec(N), vec(N), vec(M)
    if kernel == "gesummv":
        return mat(), mat(), vec(N)
    if kernel in ("covariance", "correlation"):
        return (rng.uniform(0.0, 1.0, (260, 240)),)
    if kernel == "seidel_2d":
        return rng.uniform(0.0, 1.0, (60, 60)), 10
    if kernel == "trmm (jax)":
        return 1.5, rng.uniform(0.0, 1.0, (20, 20)), rng.uniform(0.0, 1.0, (20, 30))
    x = rng.standard_normal((32, 128, 128), dtype=np.float32)
    w = rng.standard_normal((64, 32, 3, 3), dtype=np.float32)
    return x, w, rng.standard_normal(64, dtype=np.float32)


def _ops(module) -> int:
    """The StableHLO (and CHLO) ops of a module, those in loop bodies included."""
    count = 0

    def visit(op):
        nonlocal count
        count += op.name.startswith(("stablehlo.", "chlo."))
        return ir.WalkResult.ADVANCE

    with module.context:
        module.operation.walk(visit)
    return count


def _close(expected, got) -> None:
    for e, g in zip(jax.tree_util.tree_leaves(expected), jax.tree_util.tree_leaves(got)):
        g = np.asarray(g)
        assert g.dtype == e.dtype, (g.dtype, e.dtype)
        tol = 1e-3 if e.dtype == np.float32 else 1e-9
        np.testing.assert_allclose(g, e, rtol=tol, atol=tol * 10)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9, help="interleaved rounds")
    parser.add_argument("--kernels", nargs="+", default=list(KERNELS), choices=list(KERNELS))
    args = parser.parse_args(argv)
    # jax.jit keeps float64 as float64 (aotkit does in either mode), and a Python float
    # argument of a JAX function is a float64, as in npbench's runs.
    jax.config.update("jax_enable_x64", True)
    os.environ["AOTKIT_CACHE_DIR"] = "off"  # compile times are the compiler's

    rng = np.random.default_rng(0)
    cases, built = {}, {}
    for name in args.kernels:
        kernel = KERNELS[name]
        host = inputs(name, rng)
        device = [
            x if i in kernel.static or not isinstance(x, np.ndarray) else jax.device_put(x)
            for i, x in enumerate(host)
        ]
        if kernel.aotkit_runs == "jax":
            jitted = aotkit.jit(kernel.jax, static_argnums=kernel.static, frontend="jax")
        else:
            jitted = aotkit.jit(kernel.numpy, static_argnums=kernel.static)
        jax_jitted = jax.jit(kernel.jax, static_argnums=kernel.static)
        start = time.perf_counter()
        lowered = jitted.lower(*host)
        lowering = time.perf_counter() - start
        lowered.compile()
        built[name] = (_ops(lowered.module), lowering, time.perf_counter() - start - lowering)
        expected = kernel.numpy(*host)
        for got in (jitted(*host), jitted(*device), jax_jitted(*host)):
            _close(expected, got)
        cases[name] = {
            "numpy": lambda fn=kernel.numpy, host=host: fn(*host),
            "aotkit numpy in": lambda j=jitted, host=host: jax.block_until_ready(j(*host)),
            "aotkit device in": lambda j=jitted, d=device: jax.block_until_ready(j(*d)),
            "jax.jit numpy in": lambda j=jax_jitted, host=host: jax.block_until_ready(j(*host)),
            "jax.jit device in": lambda j=jax_jitted, d=device: jax.block_until_ready(j(*d)),
        }
    # A variant faster than `MIN_CELL` runs that many calls in a row per round (each to its
    # result), so that a cell is not one call's timer noise; the cell is the mean per call.
    # The count comes from the quickest of a few calls: one call alone may be a cold one
    # (after another kernel's work), and a count made from it leaves a few calls per cell,
    # whose mean is then mostly that cold first call.
    calls = {}
    for name, fns in cases.items():
        for variant, fn in fns.items():
            quickest = math.inf
            for _ in range(3):
                start = time.perf_counter()
                fn()
                quickest = min(quickest, time.perf_counter() - start)
            calls[(name, variant)] = max(1, int(MIN_CELL / quickest))
    times = {(k, v): [] for k, fns in cases.items() for v in fns}
    for r in range(args.rounds):
        for name, fns in cases.items():
            # The variants' order turns each round, so that none always runs right after
            # another (NumPy's own loop, above all, leaves the caches to whatever follows it).
            order = list(fns.items())
            for variant, fn in order[r % len(order) :] + order[: r % len(order)]:
                n = calls[(name, variant)]
                start = time.perf_counter()
                for _ in range(n):
                    fn()
                times[(name, variant)].append((time.perf_counter() - start) / n)

    print(
        f"NumPy kernels: NumPy, aotkit.jit (cpu backend) and jax.jit, jax {jax.__version__}, "
        f"numpy {np.__version__}; {args.rounds} interleaved rounds; ms, best / median; ops: "
        "aotkit's StableHLO ops, lower and compile: ms, once"
    )
    variants = (
        "numpy",
        "aotkit numpy in",
        "aotkit device in",
        "jax.jit numpy in",
        "jax.jit device in",
    )
    header = (
        f"{'kernel':<12} {'size':<20} {'ops':>5} {'lower':>6} {'compile':>7} "
        + " ".join(f"{v:>19}" for v in variants)
        + f" {'numpy/aotkit np':>16} {'numpy/aotkit dev':>17} {'jax/aotkit np':>14}"
        + f" {'jax/aotkit dev':>15}"
    )
    print(header)
    print("-" * len(header))
    for name in cases:
        best = {v: min(times[(name, v)]) * 1e3 for v in variants}
        med = {v: statistics.median(times[(name, v)]) * 1e3 for v in variants}
        cells = " ".join(f"{best[v]:>8.2f} / {med[v]:>8.2f}" for v in variants)
        ratios = [
            f"{best[over] / best[v]:.2f} / {med[over] / med[v]:.2f}"
            for over, v in (
                ("numpy", "aotkit numpy in"),
                ("numpy", "aotkit device in"),
                ("jax.jit numpy in", "aotkit numpy in"),
                ("jax.jit device in", "aotkit device in"),
            )
        ]
        ops, lowering, compiling = built[name]
        print(
            f"{name:<12} {KERNELS[name].size:<20} {ops:>5} {lowering * 1e3:>6.1f} "
            f"{compiling * 1e3:>7.1f} {cells} {ratios[0]:>16} {ratios[1]:>17} {ratios[2]:>14} "
            f"{ratios[3]:>15}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
