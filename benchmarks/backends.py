"""Compile and run time of the same lowered programs on the cpu (XLA) and iree backends.

    python benchmarks/backends.py [--compiles 3] [--runs 20] [--backends cpu iree]

Programs: the 5,000-op elementwise chain and the 32-layer MLP of `lowering.py`, one
attention block (128 tokens, width 64) and a stencil loop (100 Jacobi steps on 128x128
inside `aotkit.fori_loop`). Each program is lowered once; "compile" is the best of
`--compiles` compiles of that `Lowered` (no cache is involved: `aotkit.lower` results are
not jit-linked), "run" the best of `--runs` calls on NumPy inputs, each ending with the
result as a NumPy array (XLA's buffers are waited for; IREE's results are copied to the
host). Backends alternate in every round so that both see the same machine load. Outputs
of the backends are compared once (max abs difference) so a fast wrong answer shows.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import aotkit
import aotkit.numpy as anp

CHAIN_OPS = 5000
MLP_LAYERS, MLP_WIDTH = 32, 256
TOKENS, WIDTH = 128, 64
GRID, STEPS = 128, 100


def chain(x, y):
    z = x
    for i in range(CHAIN_OPS):
        k = i % 4
        if k == 0:
            z = anp.sin(z)
        elif k == 1:
            z = z * y
        elif k == 2:
            z = z + x
        else:
            z = anp.tanh(z)
    return z


def mlp(params, x):
    for w, b in params:
        x = anp.maximum(x @ w + b, 0.0)
    return x


def attention(x, wq, wk, wv, wo):
    q, k, v = x @ wq, x @ wk, x @ wv
    scores = (q @ k.T) / np.float32(np.sqrt(WIDTH))
    scores = scores - anp.max(scores, axis=-1, keepdims=True)
    weights = anp.exp(scores)
    weights = weights / anp.sum(weights, axis=-1, keepdims=True)
    return (weights @ v) @ wo + x


def stencil(u):
    def step(_, u):
        inner = 0.25 * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:])
        return u.at[1:-1, 1:-1].set(inner)

    return aotkit.fori_loop(0, STEPS, step, u)


def programs(rng: np.random.Generator):
    """(name, function, concrete arguments)."""

    def f32(*shape, scale=1.0):
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    params = [(f32(MLP_WIDTH, MLP_WIDTH, scale=0.06), f32(MLP_WIDTH)) for _ in range(MLP_LAYERS)]
    weights = [f32(WIDTH, WIDTH, scale=WIDTH**-0.5) for _ in range(4)]
    return [
        ("chain (5,000 ops)", chain, (f32(128), f32(128, scale=0.1))),
        ("mlp (32 layers)", mlp, (params, f32(8, MLP_WIDTH))),
        ("attention block", attention, (f32(TOKENS, WIDTH), *weights)),
        ("stencil loop", stencil, (f32(GRID, GRID),)),
    ]


def count_ops(text: str) -> int:
    return sum(1 for line in text.splitlines() if " = stablehlo." in line)


def best_times(lowered, args, backends: list[str], compiles: int, runs: int):
    """{backend: (best compile s, best run s, NumPy result)}, rounds interleaved."""
    compile_best = dict.fromkeys(backends, float("inf"))
    compiled = {}
    for _ in range(compiles):
        for b in backends:
            start = time.perf_counter()
            compiled[b] = lowered.compile(b)
            compile_best[b] = min(compile_best[b], time.perf_counter() - start)
    outs = {b: np.asarray(compiled[b](*args)) for b in backends}  # warm-up and result
    run_best = dict.fromkeys(backends, float("inf"))
    for _ in range(runs):
        for b in backends:
            start = time.perf_counter()
            np.asarray(compiled[b](*args))
            run_best[b] = min(run_best[b], time.perf_counter() - start)
    return {b: (compile_best[b], run_best[b], outs[b]) for b in backends}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--compiles", type=int, default=3)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--backends", nargs=2, default=["cpu", "iree"], metavar="NAME")
    args = parser.parse_args()
    first, second = args.backends
    header = (
        f"{'program':<18} {'ops':>5} {first + ' compile ms':>16} {second + ' compile ms':>17} "
        f"{'ratio':>7} {first + ' run ms':>12} {second + ' run ms':>13} {'ratio':>7} "
        f"{'max abs diff':>13}"
    )
    print(header)
    print("-" * len(header))
    for name, fn, fn_args in programs(np.random.default_rng(0)):
        # autograph=False: the chain stays 5,000 unrolled ops; the stencil is a fori_loop.
        lowered = aotkit.lower(fn, *fn_args, autograph=False)
        times = best_times(lowered, fn_args, [first, second], args.compiles, args.runs)
        (c1, r1, o1), (c2, r2, o2) = times[first], times[second]
        diff = float(np.max(np.abs(o1.astype(np.float64) - o2.astype(np.float64))))
        print(
            f"{name:<18} {count_ops(lowered.as_text()):>5} {c1 * 1e3:>16.1f} {c2 * 1e3:>17.1f} "
            f"{c2 / c1:>6.1f}x {r1 * 1e3:>12.3f} {r2 * 1e3:>13.3f} {r2 / r1:>6.2f}x {diff:>13.2e}"
        )


if __name__ == "__main__":
    main()
