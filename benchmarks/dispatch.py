"""Per-call dispatch overhead of `Compiled(x)` on a tiny input, in one run:

  aotkit   aotkit.lower(f, f32[]).compile() called on the input
  jax      jax.jit(f).lower(x).compile() called on the input (JAX's C++ fast path)
  raw      the raw PJRT `execute_sharded` of aotkit's own executable (device inputs: no
           checks, no output wrapping; NumPy inputs: plus the host->device transfer)

with device-array inputs and with NumPy inputs, plus Python-float inputs and the
`jit(f)(x)` path, `jit` of `f(x, s) = x * s` called with an array and a Python scalar, and
`jit` of a 4-layer `f(params, x)` whose `params` is a dict of lists of arrays and a scalar,
typed PRNG keys, and a JAX function with an argument it does not use (jax.jit prunes it).
Each input kind is measured on its own, its variants' rounds interleaved (the first variant
of a round rotating) so all see the same machine load; the table shows the best and the
median round (microseconds per call) and aotkit's ratios of the bests and
of the medians.
`--public-only` first takes away every private jaxlib name `aotkit._compat` uses, so aotkit
(and the raw column's host transfer) run on the public fallbacks a newer jaxlib would get.

    .venv/bin/python benchmarks/dispatch.py [--calls 5000] [--rounds 15] [--public-only]
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
from aotkit import _compat
from aotkit.api import jit


def measure(variants: dict, calls: int, rounds: int) -> dict[str, list[float]]:
    """Per-call microseconds of each variant, one entry per round. The variants run in
    turn within each round, starting one further along every round, so that none is always
    the one that runs first (or after a given other)."""
    for fn in variants.values():
        for _ in range(min(calls, 1000)):
            fn()
    names = list(variants)
    times = {name: [] for name in variants}
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            fn = variants[name]
            start = time.perf_counter()
            for _ in range(calls):
                fn()
            times[name].append((time.perf_counter() - start) / calls * 1e6)
    return times


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=5000, help="calls per round")
    parser.add_argument("--rounds", type=int, default=15, help="interleaved rounds")
    parser.add_argument(
        "--public-only", action="store_true", help="aotkit without any private jaxlib name"
    )
    args = parser.parse_args(argv)
    if args.public_only:
        _compat._private = lambda module, name="": None

    def f_aot(x):
        return anp.sqrt(x**2) + 1.0

    def f_jax(x):
        return jnp.sqrt(x**2) + 1.0

    x_np = np.float32(3.0)
    x_np0 = np.asarray(x_np)
    ours = aotkit.lower(f_aot, aotkit.spec("f32[]")).compile()
    theirs = jax.jit(f_jax).lower(x_np).compile()
    x_dev = jax.device_put(x_np)
    our_dev = ours(x_np)  # a device array aotkit produced
    assert float(ours(x_dev)) == float(theirs(x_dev)) == 4.0

    exe = ours.runtime_executable()
    run = exe.execute_sharded
    # The raw executable checks nothing: an input on another device than its own ends the
    # process, so the transfer goes to the device aotkit's result is on.
    device = next(iter(our_dev.devices()))
    sharding = _compat.single_device_sharding(device)
    put = _compat.host_to_device(_compat.shaped_array((), np.dtype(np.float32)), sharding, device)
    jitted_ours = jit(f_aot)
    jitted_theirs = jax.jit(f_jax)
    for x in (x_np0, our_dev, 3.0):
        jitted_ours(x)
    for x in (x_np0, x_dev, 3.0):
        jitted_theirs(x)
    # Two arguments: an array and a Python scalar, as in `f(x, 0.5)`.
    scaled_ours = jit(lambda x, s: x * s)
    scaled_theirs = jax.jit(lambda x, s: x * s)
    v_np = np.arange(3, dtype=np.float32)
    v_dev = jax.device_put(v_np)
    for scaled in (scaled_ours, scaled_theirs):
        scaled(v_np, 0.5)
        scaled(v_dev, 2)

    # A parameter tree: `f(params, x)`, a dict of lists of (w, b) device arrays and a scale.
    def layers(params, x):
        for w, b in params["layers"]:
            x = x @ w + b
        return x * params["scale"]

    w, b = jax.device_put(np.eye(4, dtype=np.float32)), jax.device_put(np.ones(4, np.float32))
    params = {"layers": [(w, b)] * 4, "scale": 0.5}
    batch = np.ones((2, 4), np.float32)
    layers_ours, layers_theirs = jit(layers), jax.jit(layers)
    layers_ours(params, batch)
    layers_theirs(params, batch)

    # A typed PRNG key and an array in, a key and an array out (a training step's RNG).
    def keyed(k, v):
        return jax.random.fold_in(k, 1), v + 1

    key = jax.random.key(0)
    keyed_ours, keyed_theirs = jit(keyed, frontend="jax"), jax.jit(keyed)
    keyed_compiled = keyed_ours.lower(key, v_dev).compile()
    for fn in (keyed_ours, keyed_theirs, keyed_compiled):
        fn(key, v_dev)

    # An argument the program does not use (jax.jit prunes it): f32[1M] as NumPy, never
    # transferred by either.
    def pruned(x, unused, y):
        return x * y

    unused = np.ones(1 << 20, np.float32)
    pruned_ours = jit(pruned, frontend="jax").lower(v_np, unused, v_np).compile()
    pruned_theirs = jax.jit(pruned).lower(v_np, unused, v_np).compile()
    for fn in (pruned_ours, pruned_theirs):
        fn(v_np, unused, v_np)

    groups = [
        (
            "device array",
            {
                "aotkit": lambda: ours(our_dev),
                "jax": lambda: theirs(x_dev),
                "raw": lambda: run([x_dev]),
            },
        ),
        (
            "NumPy 0-d array",
            {
                "aotkit": lambda: ours(x_np0),
                "jax": lambda: theirs(x_np0),
                "raw": lambda: run([put(x_np0)]),
            },
        ),
        (
            "NumPy scalar",
            {
                "aotkit": lambda: ours(x_np),
                "jax": lambda: theirs(x_np),
                "raw": lambda: run([put(x_np)]),
            },
        ),
        (
            "Python float",
            {
                "aotkit": lambda: ours(3.0),
                "jax": lambda: theirs(3.0),
                "raw": lambda: run([put(np.asarray(3.0, np.float32))]),
            },
        ),
        (
            "jit(f)(x), device array",
            {
                "aotkit": lambda: jitted_ours(our_dev),
                "jax": lambda: jitted_theirs(x_dev),
            },
        ),
        (
            "jit(f)(x), NumPy 0-d",
            {
                "aotkit": lambda: jitted_ours(x_np0),
                "jax": lambda: jitted_theirs(x_np0),
            },
        ),
        (
            "jit(f)(x), Python float",
            {
                "aotkit": lambda: jitted_ours(3.0),
                "jax": lambda: jitted_theirs(3.0),
            },
        ),
        (
            "jit(f)(x, 0.5), NumPy x",
            {
                "aotkit": lambda: scaled_ours(v_np, 0.5),
                "jax": lambda: scaled_theirs(v_np, 0.5),
            },
        ),
        (
            "jit(f)(x, 2), device x",
            {
                "aotkit": lambda: scaled_ours(v_dev, 2),
                "jax": lambda: scaled_theirs(v_dev, 2),
            },
        ),
        (
            "jit(f)(params, x), a tree",
            {
                "aotkit": lambda: layers_ours(params, batch),
                "jax": lambda: layers_theirs(params, batch),
            },
        ),
        (
            "jit(f)(key, x), typed key",
            {
                "aotkit": lambda: keyed_ours(key, v_dev),
                "jax": lambda: keyed_theirs(key, v_dev),
            },
        ),
        (
            "Compiled(key, x)",
            {
                "aotkit": lambda: keyed_compiled(key, v_dev),
                "jax": lambda: keyed_theirs(key, v_dev),
            },
        ),
        (
            "Compiled(x, unused 4 MB)",
            {
                "aotkit": lambda: pruned_ours(v_np, unused, v_np),
                "jax": lambda: pruned_theirs(v_np, unused, v_np),
            },
        ),
    ]
    # Each group on its own (its variants interleaved): the variants of one group compare
    # on the same input, and no group's state weighs on another's.
    times = {}
    for group, fns in groups:
        for name, samples in measure(fns, args.calls, args.rounds).items():
            times[(group, name)] = samples

    print(
        f"dispatch of f(x) = sqrt(x**2) + 1 on f32[], {device.platform} ({device.device_kind}); "
        f"{args.rounds} rounds x "
        f"{args.calls} calls, microseconds per call (best / median round); jax "
        f"{jax.__version__}{', aotkit on public API only' if args.public_only else ''}"
    )
    columns = ("aotkit", "jax", "raw PJRT", "aotkit/jax", "aotkit/raw")
    widths = (15, 15, 15, 13, 13)
    header = f"{'input':25s} " + " ".join(f"{c:>{w}s}" for c, w in zip(columns, widths))
    print(header)
    print("-" * len(header))
    for group, fns in groups:
        best = {n: min(times[(group, n)]) for n in fns}
        median = {n: statistics.median(times[(group, n)]) for n in fns}
        cells = []
        for n in ("aotkit", "jax", "raw"):
            cells.append(f"{best[n]:6.2f} / {median[n]:6.2f}" if n in fns else f"{'-':>15s}")
        jax_ratio = f"{best['aotkit'] / best['jax']:.2f} / {median['aotkit'] / median['jax']:.2f}"
        raw_ratio = (
            f"{best['aotkit'] / best['raw']:.2f} / {median['aotkit'] / median['raw']:.2f}"
            if "raw" in fns
            else "-"
        )
        print(
            f"{group:25s} {cells[0]:>15s} {cells[1]:>15s} {cells[2]:>15s} {jax_ratio:>13s} "
            f"{raw_ratio:>13s}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
