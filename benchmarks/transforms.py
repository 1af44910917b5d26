"""Transforms: aotkit's grad against JAX's on the same programs, in one run.

    python benchmarks/transforms.py [--repeat 7] [--calls 200]

1. Trace + transform + lower: `aotkit.jit(aotkit.grad(loss)).lower(*args)` against
   `jax.jit(jax.grad(loss)).lower(*args)`, for the 5,000-op elementwise chain and the
   32-layer MLP of benchmarks/lowering.py (a fresh Python function each round, so no cache
   helps either side; aotkit's and JAX's rounds interleaved). Best of the rounds.
2. The compiled gradient: the MLP's, and a 500-op chain's (XLA takes minutes to compile the
   5,000-op chain's gradient, JAX's and aotkit's alike), run on device arrays, best and
   median of `--calls` calls (after a warm-up), aotkit / JAX.
3. Memory of reverse mode through a 1,000-step loop (`fori_loop` whose body is a small MLP
   layer on a 256-wide state): XLA's temp allocation of the compiled gradient, with every
   carry stored (aotkit's default), with `checkpoint_loops="sqrt"` (about 2 sqrt(n) carries
   stored, the body recomputed), and JAX's.
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

import aotkit
import aotkit.numpy as anp

CHAIN_OPS = 5000
MLP_LAYERS = 32
MLP_WIDTH = 256
LOOP_STEPS = 1000
LOOP_WIDTH = 256


def make_chain(xp, ops: int = CHAIN_OPS):
    def loss(x, y):
        z = x
        for i in range(ops):
            k = i % 4
            if k == 0:
                z = xp.sin(z)
            elif k == 1:
                z = z * y
            elif k == 2:
                z = z + x
            else:
                z = xp.tanh(z)
        return xp.sum(z)

    return loss


def make_mlp(xp):
    def loss(params, x):
        for w, b in params:
            x = xp.maximum(x @ w + b, 0.0)
        return xp.sum(x * x)

    return loss


def make_loop(xp, fori_loop):
    def loss(w, x):
        def body(i, h):
            return xp.tanh(h @ w) * 0.9 + h * 0.1

        return xp.sum(fori_loop(0, LOOP_STEPS, body, x))

    return loss


def programs(chain_ops: int = CHAIN_OPS):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, 128)).astype(np.float32)
    y = rng.standard_normal((8, 128)).astype(np.float32)
    params = [
        (
            (rng.standard_normal((MLP_WIDTH, MLP_WIDTH)) / np.sqrt(MLP_WIDTH)).astype(np.float32),
            np.zeros(MLP_WIDTH, np.float32),
        )
        for _ in range(MLP_LAYERS)
    ]
    xm = rng.standard_normal((16, MLP_WIDTH)).astype(np.float32)
    return {
        f"chain ({chain_ops} ops)": (lambda xp: make_chain(xp, chain_ops), (x, y)),
        f"MLP ({MLP_LAYERS} layers)": (make_mlp, (params, xm)),
    }


def lowering_times(rounds: int) -> list[tuple]:
    rows = []
    for name, (make, args) in programs().items():
        best = {"aotkit": float("inf"), "jax": float("inf")}
        for _ in range(rounds):
            for side in ("aotkit", "jax"):
                t0 = time.perf_counter()
                if side == "aotkit":
                    # autograph=False: the chain stays 5,000 unrolled ops, as under jax.jit.
                    aotkit.jit(aotkit.grad(make(anp)), autograph=False).lower(*args)
                else:
                    jax.jit(jax.grad(make(jnp))).lower(*args)
                best[side] = min(best[side], time.perf_counter() - t0)
        rows.append((name, best["aotkit"], best["jax"]))
    return rows


def step_times(calls: int) -> list[tuple]:
    rows = []
    for name, (make, args) in programs(chain_ops=500).items():
        dev = jax.device_put(args)
        ours = aotkit.jit(aotkit.grad(make(anp)), autograph=False).lower(*args).compile()
        theirs = jax.jit(jax.grad(make(jnp))).lower(*args).compile()
        samples = {"aotkit": [], "jax": []}
        for fn in (ours, theirs):
            jax.block_until_ready(fn(*dev))
        for _ in range(calls):
            for side, fn in (("aotkit", ours), ("jax", theirs)):
                t0 = time.perf_counter()
                jax.block_until_ready(fn(*dev))
                samples[side].append(time.perf_counter() - t0)
        rows.append(
            (
                name,
                min(samples["aotkit"]),
                statistics.median(samples["aotkit"]),
                min(samples["jax"]),
                statistics.median(samples["jax"]),
            )
        )
    return rows


def loop_memory() -> list[tuple]:
    rng = np.random.default_rng(1)
    w = (rng.standard_normal((LOOP_WIDTH, LOOP_WIDTH)) / np.sqrt(LOOP_WIDTH)).astype(np.float32)
    x = rng.standard_normal((4, LOOP_WIDTH)).astype(np.float32)
    loss = make_loop(anp, aotkit.fori_loop)
    rows = []
    for label, policy in (("aotkit, every carry", None), ("aotkit, sqrt checkpoints", "sqrt")):
        compiled = aotkit.jit(aotkit.grad(loss, checkpoint_loops=policy)).lower(w, x).compile()
        got = np.asarray(compiled(w, x))
        rows.append((label, compiled.memory_analysis().temp_size_in_bytes, got))
    theirs = jax.jit(jax.grad(make_loop(jnp, jax.lax.fori_loop))).lower(w, x).compile()
    want = np.asarray(theirs(w, x))
    rows.append(("jax", theirs.memory_analysis().temp_size_in_bytes, want))
    for label, _, got in rows:
        np.testing.assert_allclose(got, want, rtol=2e-3, atol=1e-4, err_msg=label)
    return [(label, size) for label, size, _ in rows]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--calls", type=int, default=200)
    a = parser.parse_args()

    print(f"Trace + grad + lower (best of {a.repeat}), ms")
    print(f"{'program':<22}{'aotkit':>10}{'jax':>10}{'jax/aotkit':>12}")
    for name, ours, theirs in lowering_times(a.repeat):
        print(f"{name:<22}{ours * 1e3:>10.1f}{theirs * 1e3:>10.1f}{theirs / ours:>11.1f}x")
    print()
    print(f"Compiled gradient, one call on device arrays ({a.calls} calls), us")
    header = f"{'program':<22}{'aotkit best':>12}{'median':>9}{'jax best':>10}{'median':>9}"
    print(header + f"{'best ratio':>12}{'median ratio':>14}")
    for name, ob, om, jb, jm in step_times(a.calls):
        print(
            f"{name:<22}{ob * 1e6:>12.0f}{om * 1e6:>9.0f}{jb * 1e6:>10.0f}{jm * 1e6:>9.0f}"
            f"{ob / jb:>11.2f}x{om / jm:>13.2f}x"
        )
    print()
    print(f"Reverse mode through a {LOOP_STEPS}-step loop: XLA temp memory of the gradient")
    for label, size in loop_memory():
        print(f"  {label:<28}{size / 2**20:>8.2f} MiB")


if __name__ == "__main__":
    main()
