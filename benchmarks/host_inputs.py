"""NumPy inputs against device inputs, aotkit against jax.jit, over sizes 1 KB to 100 MB.

    python benchmarks/host_inputs.py [--rounds 9] [--sizes 1K 16K 128K 1M 10M 40M 100M]

The program is `f(x) = sum(x * 2)` on a float32 vector (it reads its input once and writes
one number, so the cost of getting the input to the device weighs as much as it can). Each
call runs to its result (`block_until_ready`). Inputs, the same values each time:

  device     the array already on the device (`jax.device_put`)
  numpy      a NumPy array 16 bytes past a 64-byte boundary, where NumPy's allocator puts
             every large array (the transfer cannot read it in place: aotkit copies it
             into a staging buffer, jaxlib into new memory)
  aligned    a NumPy array on a 64-byte boundary (read in place by both)

Rounds are interleaved (every variant once per round, several calls each), so machine load
hits all alike; cells are microseconds per call, best / median round. Ratios are of those
bests and medians, measured in this run: each entry point's NumPy inputs against its own
device inputs, and aotkit against jax.jit on the same inputs.
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

UNITS = {"K": 1000, "M": 1000**2}


def parse_size(text: str) -> int:
    text = text.strip().upper().removesuffix("B")
    if text[-1:] in UNITS:
        return int(float(text[:-1]) * UNITS[text[-1]])
    return int(text)


def host_array(nbytes: int, offset: int) -> np.ndarray:
    """A float32 vector of about `nbytes` starting `offset` bytes past a 64-byte boundary."""
    n = max(1, nbytes // 4)
    owner = np.empty(4 * n + 128, np.uint8)
    start = -owner.__array_interface__["data"][0] % 64 + offset
    x = owner[start : start + 4 * n].view(np.float32)
    x[...] = np.random.default_rng(0).standard_normal(n, dtype=np.float32)
    return x


def measure(variants: dict, rounds: int, min_time: float) -> dict[str, list[float]]:
    """Per-call seconds of each variant, one entry per round."""
    calls = {}
    for name, fn in variants.items():
        fn()
        start = time.perf_counter()
        fn()
        calls[name] = max(1, int(min_time / max(time.perf_counter() - start, 1e-7)))
    times = {name: [] for name in variants}
    for _ in range(rounds):
        for name, fn in variants.items():
            n = calls[name]
            start = time.perf_counter()
            for _ in range(n):
                fn()
            times[name].append((time.perf_counter() - start) / n)
    return times


def label(nbytes: int) -> str:
    for unit, scale in (("M", UNITS["M"]), ("K", UNITS["K"])):
        if nbytes >= scale:
            return f"{nbytes / scale:g} {unit}B"
    return f"{nbytes} B"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9, help="interleaved rounds")
    parser.add_argument(
        "--sizes",
        nargs="+",
        default=["1K", "16K", "128K", "1M", "10M", "40M", "100M"],
        help="bytes",
    )
    parser.add_argument(
        "--min-time", type=float, default=0.02, help="seconds each variant runs per round"
    )
    args = parser.parse_args(argv)

    ours = aotkit.jit(lambda x: anp.sum(x * 2.0))
    theirs = jax.jit(lambda x: jnp.sum(x * 2.0))
    rows = []
    for text in args.sizes:
        nbytes = parse_size(text)
        inputs = {"numpy": host_array(nbytes, 16), "aligned": host_array(nbytes, 0)}
        inputs["device"] = jax.device_put(inputs["aligned"])
        expected = float(np.sum(inputs["aligned"].astype(np.float64) * 2.0))
        variants = {}
        for who, fn in (("aotkit", ours), ("jax", theirs)):
            for kind, x in inputs.items():
                got = float(fn(x))
                assert abs(got - expected) <= 1e-3 * max(1.0, abs(expected)), (who, kind, got)
                variants[(who, kind)] = lambda fn=fn, x=x: fn(x).block_until_ready()
        times = measure(variants, args.rounds, args.min_time)
        best = {k: min(v) * 1e6 for k, v in times.items()}
        median = {k: statistics.median(v) * 1e6 for k, v in times.items()}
        rows.append((nbytes, best, median))

    print(
        f"f(x) = sum(x * 2) on float32[n], cpu backend, jax {jax.__version__}; "
        f"{args.rounds} interleaved rounds; microseconds per call, best / median round"
    )
    kinds = ("device", "numpy", "aligned")
    header = f"{'size':>8} {'':6} " + " ".join(f"{k:>19}" for k in kinds)
    header += f" {'numpy/device':>13} {'aligned/device':>15}"
    print(header)
    print("-" * len(header))
    for nbytes, best, median in rows:
        for who in ("aotkit", "jax"):
            cells = " ".join(f"{best[(who, k)]:>9.1f} / {median[(who, k)]:>7.1f}" for k in kinds)
            ratios = []
            for k in ("numpy", "aligned"):
                b = best[(who, k)] / best[(who, "device")]
                m = median[(who, k)] / median[(who, "device")]
                ratios.append(f"{b:.2f} / {m:.2f}")
            size = label(nbytes) if who == "aotkit" else ""
            print(f"{size:>8} {who:6} {cells} {ratios[0]:>13} {ratios[1]:>15}")
    print()
    print("aotkit / jax.jit on the same inputs (best / median)")
    header = f"{'size':>8} " + " ".join(f"{k:>13}" for k in kinds)
    print(header)
    print("-" * len(header))
    for nbytes, best, median in rows:
        cells = []
        for k in kinds:
            b = best[("aotkit", k)] / best[("jax", k)]
            m = median[("aotkit", k)] / median[("jax", k)]
            cells.append(f"{b:.2f} / {m:.2f}")
        print(f"{label(nbytes):>8} " + " ".join(f"{c:>13}" for c in cells))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
