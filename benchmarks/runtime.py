"""Run time of NumPy kernels traced by aotkit against NumPy itself, in one run.

    python benchmarks/runtime.py [--rounds 9] [--kernels atax bicg ...]

The kernels are plain NumPy functions (the matrix-vector kernels of PolyBench on a
2000x2500 float64 matrix, and a 2-D convolution with bias written as one `tensordot` per
filter tap), run by NumPy and by `aotkit.jit` of the same function: with NumPy inputs
(what a NumPy program passes) and with the inputs already on the device. Every call runs to
its result. Rounds are interleaved (every variant once per round), cells are milliseconds,
best / median round, and the ratios (NumPy's time over aotkit's: above 1 is faster than
NumPy) are of those bests and medians, measured in this run.
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax
import numpy as np

import aotkit

M, N = 2000, 2500


def atax(A, x):
    return A.T @ (A @ x)


def bicg(A, r, p):
    return A.T @ r, A @ p


def mvt(A, x1, x2, y1, y2):
    return x1 + A @ y1, x2 + A.T @ y2


def gesummv(A, B, x):
    return 1.5 * (A @ x) + 1.2 * (B @ x)


def conv2d_bias(x, w, b):
    """x: (channels, height, width); w: (filters, channels, rows, cols); b: (filters,)."""
    k, _, rows, cols = w.shape
    h, wd = x.shape[1] - rows + 1, x.shape[2] - cols + 1
    out = np.zeros((k, h, wd), x.dtype) + b[:, None, None]
    for r in range(rows):
        for s in range(cols):
            out = out + np.tensordot(w[:, :, r, s], x[:, r : r + h, s : s + wd], axes=(1, 0))
    return out


def inputs(kernel: str, rng: np.random.Generator) -> tuple:
    def mat():
        return rng.standard_normal((M, N))

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
    x = rng.standard_normal((32, 128, 128), dtype=np.float32)
    w = rng.standard_normal((64, 32, 3, 3), dtype=np.float32)
    return x, w, rng.standard_normal(64, dtype=np.float32)


KERNELS = {"atax": atax, "bicg": bicg, "mvt": mvt, "gesummv": gesummv, "conv2d+bias": conv2d_bias}
SIZES = {
    "atax": "2000x2500 f64",
    "bicg": "2000x2500 f64",
    "mvt": "2000x2500 f64",
    "gesummv": "2x 2000x2500 f64",
    "conv2d+bias": "32x128x128, 64x32x3x3 f32",
}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9, help="interleaved rounds")
    parser.add_argument("--kernels", nargs="+", default=list(KERNELS), choices=list(KERNELS))
    args = parser.parse_args(argv)

    rng = np.random.default_rng(0)
    cases = {}
    for name in args.kernels:
        fn = KERNELS[name]
        host = inputs(name, rng)
        with jax.enable_x64(True):  # float64 stays float64 on the device
            device = [jax.device_put(x) for x in host]
        jitted = aotkit.jit(fn)
        expected = fn(*host)
        for got in (jitted(*host), jitted(*device)):
            for e, g in zip(jax.tree_util.tree_leaves(expected), jax.tree_util.tree_leaves(got)):
                tol = 1e-3 if e.dtype == np.float32 else 1e-9
                np.testing.assert_allclose(np.asarray(g), e, rtol=tol, atol=tol * 10)
        cases[name] = {
            "numpy": lambda fn=fn, host=host: fn(*host),
            "aotkit numpy in": lambda j=jitted, host=host: jax.block_until_ready(j(*host)),
            "aotkit device in": lambda j=jitted, d=device: jax.block_until_ready(j(*d)),
        }
    times = {(k, v): [] for k, fns in cases.items() for v in fns}
    for _ in range(args.rounds):
        for name, fns in cases.items():
            for variant, fn in fns.items():
                start = time.perf_counter()
                fn()
                times[(name, variant)].append(time.perf_counter() - start)

    print(
        f"NumPy kernels: NumPy against aotkit.jit (cpu backend), jax {jax.__version__}, "
        f"numpy {np.__version__}; {args.rounds} interleaved rounds; ms, best / median"
    )
    variants = ("numpy", "aotkit numpy in", "aotkit device in")
    header = (
        f"{'kernel':<12} {'size':<26} "
        + " ".join(f"{v:>19}" for v in variants)
        + f" {'numpy/aotkit np':>16} {'numpy/aotkit dev':>17}"
    )
    print(header)
    print("-" * len(header))
    for name in cases:
        best = {v: min(times[(name, v)]) * 1e3 for v in variants}
        med = {v: statistics.median(times[(name, v)]) * 1e3 for v in variants}
        cells = " ".join(f"{best[v]:>8.2f} / {med[v]:>8.2f}" for v in variants)
        ratios = [
            f"{best['numpy'] / best[v]:.2f} / {med['numpy'] / med[v]:.2f}" for v in variants[1:]
        ]
        print(f"{name:<12} {SIZES[name]:<26} {cells} {ratios[0]:>16} {ratios[1]:>17}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
