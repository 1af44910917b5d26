"""Autograph: the element-level kernels of tests/programs/kernels.py at two sizes, unrolled
(`autograph=False`, Python loops run at trace time) against converted (`autograph=True`,
loops and branches become StableHLO control flow), measured in the same run. The prefix
kernels (`PREFIX_KERNELS`: slices whose bounds are the loop index, `L[i, :i] @ x[:i]`)
follow, at n = 10, 30 and 60 (unrolled only up to --max-unrolled, 30 by default). A second
table has the networks written as loops over output positions (tests/programs/
loop_networks.py: a convolution, LeNet, a residual block), converted, against NumPy running
the same source (their unrolled forms take minutes to compile: LeNet's 34,365 ops took 479 s;
--networks-unrolled measures them too).

For each: ops in the lowered module (constants excluded), trace + default pipeline time
(best of --rounds), XLA compile time on the CPU backend (best of 2), and run time per call
(best of --rounds rounds of --calls calls). Kernels with `if`/`while` on
traced values cannot be traced at all without autograph; their unrolled columns say so.

    python benchmarks/autograph.py [--rounds 3] [--calls 200] [--only lu_decompose ...]
                                   [--max-unrolled 30]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402

import aotkit  # noqa: E402
from tests.programs.kernels import KERNELS, PREFIX_KERNELS  # noqa: E402
from tests.programs.loop_networks import NETWORKS  # noqa: E402

SIZES = {
    "forward_substitution": (8, 24),
    "lu_decompose": (6, 12),
    "cholesky": (6, 12),
    "gauss_seidel": (6, 12),
    "floyd_warshall": (6, 10),
    "nussinov": (8, 16),
    "crc32": (8, 32),
    "mandelbrot": (8, 32),
    **{name: (10, 30, 60) for name in PREFIX_KERNELS},
}
# Unrolled programs above these sizes take XLA minutes to hours (an LU at n = 30 is 14,000
# ops and three minutes); their columns say "skipped" (`--max-unrolled` changes it).
MAX_UNROLLED = 30
ALL = {**KERNELS, **PREFIX_KERNELS}
STATIC = {"gauss_seidel": (2,), "mandelbrot": (2,)}


def count_ops(lowered) -> int:
    n = 0

    def walk(op):
        nonlocal n
        for region in op.regions:
            for block in region.blocks:
                for inner in block.operations:
                    n += inner.operation.name != "stablehlo.constant"
                    walk(inner)

    walk(lowered.module.operation)
    return n


def measure(name: str, n: int, autograph: bool, rounds: int, calls: int) -> dict | str:
    fn, make = ALL[name]
    args = make(n, np.random.default_rng(0))
    statics = STATIC.get(name, ())

    def lower():
        return aotkit.lower(fn, *args, static_argnums=statics, autograph=autograph)

    try:
        lowered = lower()  # converts the kernel's source once (cached per code object)
    except Exception as e:
        return type(e).__name__
    lower_s = min(_timed(lower)[0] for _ in range(rounds))
    compile_s, compiled = min((_timed(lowered.compile) for _ in range(2)), key=lambda t: t[0])
    dyn = [a for i, a in enumerate(args) if i not in statics]
    for got, want in zip(
        jax.tree_util.tree_leaves(compiled(*dyn)), jax.tree_util.tree_leaves(fn(*args)), strict=True
    ):
        got, want = np.asarray(got), np.asarray(want)
        if got.dtype != want.dtype or not np.allclose(got, want, rtol=1e-6, atol=1e-9):
            raise AssertionError(f"{name} n={n} autograph={autograph}: result differs from NumPy")
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(calls):
            compiled(*dyn)
        best = min(best, (time.perf_counter() - start) / calls)
    return {"ops": count_ops(lowered), "lower": lower_s, "compile": compile_s, "run": best}


def measure_network(name: str, autograph: bool, rounds: int, calls: int) -> dict:
    fn, make, _ = NETWORKS[name]
    args = make(np.random.default_rng(0))
    lower_s, lowered = _timed(lambda: aotkit.lower(fn, *args, autograph=autograph))
    compile_s, compiled = _timed(lowered.compile)
    want = fn(*args)
    got = np.asarray(compiled(*args))
    if got.dtype != want.dtype or not np.allclose(got, want, rtol=2e-5, atol=2e-5):
        raise AssertionError(f"{name} autograph={autograph}: result differs from NumPy")
    run = numpy = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(calls):
            compiled(*args).block_until_ready()
        run = min(run, (time.perf_counter() - start) / calls)
        numpy = min(numpy, _timed(lambda: fn(*args))[0])
    ops = count_ops(lowered)
    return {"ops": ops, "lower": lower_s, "compile": compile_s, "run": run, "numpy": numpy}


def networks(rounds: int, calls: int, unrolled: bool) -> None:
    header = (
        f"{'network':<16} {'form':<9} {'ops':>6} {'lower ms':>9} {'compile ms':>11} "
        f"{'run us':>9} {'numpy us':>10} {'numpy/aotkit':>13}"
    )
    print()
    print(header)
    print("-" * len(header))
    for name in NETWORKS:
        for autograph in (True, False) if unrolled else (True,):
            r = measure_network(name, autograph, rounds, calls)
            print(
                f"{name:<16} {'rolled' if autograph else 'unrolled':<9} {r['ops']:>6} "
                f"{r['lower'] * 1e3:>9.1f} {r['compile'] * 1e3:>11.0f} {r['run'] * 1e6:>9.1f} "
                f"{r['numpy'] * 1e6:>10.0f} {r['numpy'] / r['run']:>12.1f}x",
                flush=True,
            )


def _timed(fn):
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def _cell(r, key, scale, fmt):
    return format(r[key] * scale, fmt) if isinstance(r, dict) else r


def _ratio(u, c, key):
    return f"{u[key] / c[key]:.1f}x" if isinstance(u, dict) else "-"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="best of N for lower and run")
    parser.add_argument("--calls", type=int, default=200, help="calls per timed run round")
    parser.add_argument("--only", nargs="*", default=None, help="kernel names")
    parser.add_argument(
        "--max-unrolled",
        type=int,
        default=MAX_UNROLLED,
        help="largest n measured unrolled (larger: converted only)",
    )
    parser.add_argument(
        "--networks-unrolled",
        action="store_true",
        help="also lower and compile the loop networks unrolled (minutes each)",
    )
    parser.add_argument("--networks-only", action="store_true", help="only the networks table")
    args = parser.parse_args(argv)
    # Every compile is the compiler's: the persistent cache would answer the second one.
    aotkit.cache.configure(dir="off")
    header = (
        f"{'kernel':<26} {'n':>3} {'ops unr':>8} {'ops conv':>8} "
        f"{'lower ms unr':>12} {'conv':>7} {'ratio':>6} "
        f"{'compile ms unr':>14} {'conv':>7} {'ratio':>6} "
        f"{'run us unr':>10} {'conv':>8} {'ratio':>6}"
    )
    if args.networks_only:
        networks(args.rounds, args.calls, args.networks_unrolled)
        return 0
    print(header)
    print("-" * len(header))
    for name in args.only or ALL:
        for n in SIZES[name]:
            u = (
                measure(name, n, False, args.rounds, args.calls)
                if n <= args.max_unrolled
                else "skipped"
            )
            c = measure(name, n, True, args.rounds, args.calls)
            print(
                f"{name:<26} {n:>3} {_cell(u, 'ops', 1, 'd'):>8} {c['ops']:>8} "
                f"{_cell(u, 'lower', 1e3, '.1f'):>12} {c['lower'] * 1e3:>7.1f} "
                f"{_ratio(u, c, 'lower'):>6} "
                f"{_cell(u, 'compile', 1e3, '.0f'):>14} {c['compile'] * 1e3:>7.0f} "
                f"{_ratio(u, c, 'compile'):>6} "
                f"{_cell(u, 'run', 1e6, '.1f'):>10} {c['run'] * 1e6:>8.1f} "
                f"{_ratio(u, c, 'run'):>6}",
                flush=True,
            )
    networks(args.rounds, args.calls, args.networks_unrolled)
    return 0


if __name__ == "__main__":
    sys.exit(main())
