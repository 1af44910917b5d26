"""Serving a symbolic program (issue 25), side by side in one run, on a transformer block
with symbolic batch and sequence length (tests/symbolic/programs.py, exported by jax.export):

First call of a shape not compiled before (milliseconds, persistent cache off):
  aotkit symbolic   a loaded symbolic artifact called with the new shape: refinement of its
                    portable program to the shape, then XLA's compile, then the run
  aotkit cache hit  the same, where another process compiled that shape (persistent cache)
  aotkit retrace    the fixed-shape program lowered again for the shape (JAX traces it:
                    frontend='jax'), compiled and run
  jax export        JAX itself: the jax.export artifact deserialized, jax.jit(exported.call)
                    called with the new shape (JAX's refinement, compile and run)
  iree dynamic      the program compiled once on iree (one dynamic vmfb), called before
                    with other shapes: the new shape is bound, checked and run
  iree loaded       the iree artifact (its dynamic vmfb) loaded, then called with the new
                    shape: the vmfb loaded into IREE's runtime, the program's shapes proven
                    for the host checks, the run

A call of a shape compiled already (microseconds per call, small inputs so that dispatch
shows; interleaved rounds, best and median):
  specialized       the symbolic Compiled called with a shape it holds (XLA, device inputs)
  static            a fixed-shape Compiled of the same program and shape (XLA, device inputs)
  iree dynamic      the iree Compiled (one dynamic vmfb) called with a shape it ran before
                    (NumPy inputs: IREE's runtime takes host arrays)
  iree static       a fixed-shape Compiled of the same program and shape on iree

    python benchmarks/shapes.py [--shapes 6] [--calls 3000] [--rounds 15]

The iree rows need the extra aotkit[iree] (they are left out without it).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("AOTKIT_CACHE_DIR", "off")

import jax  # noqa: E402
import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import aotkit  # noqa: E402
from aotkit import cache  # noqa: E402
from aotkit.backends import iree as iree_backend  # noqa: E402
from tests.symbolic import programs  # noqa: E402

IREE = iree_backend.installed()


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:8.1f}"


def first_calls(n_shapes: int) -> dict[str, list[float]]:
    rng = np.random.default_rng(0)
    params = programs.block_params(rng)
    exported = programs.block_export()
    data = exported.serialize()
    artifact = aotkit.load_module(data).compile().serialize()
    keys = ("symbolic", "hit", "retrace", "jax") + (("iree", "iree-loaded") if IREE else ())
    times: dict[str, list[float]] = {k: [] for k in keys}
    shapes = [(1 + k % 3, 8 + 7 * k) for k in range(n_shapes)]
    jax_fn = jax.jit(jax.export.deserialize(data).call)
    if IREE:
        on_iree = aotkit.load_module(data).compile(backend="iree")
        x = rng.standard_normal((4, 3, programs.D)).astype(np.float32)
        on_iree(x, *params)  # its vmfb loaded into IREE's runtime, one shape run
        iree_artifact = on_iree.serialize()
    with tempfile.TemporaryDirectory() as folder:
        for b, t in shapes:
            x = rng.standard_normal((b, t, programs.D)).astype(np.float32)
            cache.configure(dir="off")
            loaded = aotkit.load(artifact)
            start = time.perf_counter()
            np.asarray(loaded(x, *params))
            times["symbolic"].append(time.perf_counter() - start)

            cache.configure(dir=folder)
            aotkit.load(artifact)(x, *params)  # another "process" compiles and stores it
            again = aotkit.load(artifact)
            start = time.perf_counter()
            np.asarray(again(x, *params))
            times["hit"].append(time.perf_counter() - start)
            assert again._executable.compiles == 0
            cache.configure(dir="off")

            start = time.perf_counter()
            fixed = aotkit.jit(programs.block, frontend="jax").lower(x, *params).compile()
            np.asarray(fixed(x, *params))
            times["retrace"].append(time.perf_counter() - start)

            start = time.perf_counter()
            np.asarray(jax_fn(x, *params))
            times["jax"].append(time.perf_counter() - start)

            if IREE:
                start = time.perf_counter()
                on_iree(x, *params)
                times["iree"].append(time.perf_counter() - start)

                loaded = aotkit.load(iree_artifact)
                start = time.perf_counter()
                loaded(x, *params)
                times["iree-loaded"].append(time.perf_counter() - start)
                assert loaded._executable.compiles == 0
    return times


def steady_calls(calls: int, rounds: int) -> dict[str, list[float]]:
    rng = np.random.default_rng(1)
    params = programs.block_params(rng)
    x = rng.standard_normal((1, 4, programs.D)).astype(np.float32)
    symbolic = aotkit.load_module(programs.block_export().serialize()).compile()
    static = aotkit.jit(programs.block, frontend="jax").lower(x, *params).compile()
    dev = [jax.device_put(a) for a in (x, *params)]
    variants = {
        "specialized": lambda: symbolic(*dev),
        "static": lambda: static(*dev),
    }
    np.testing.assert_array_equal(np.asarray(symbolic(*dev)), np.asarray(static(*dev)))
    if IREE:
        host = (x, *params)
        dynamic = aotkit.load_module(programs.block_export().serialize()).compile(backend="iree")
        fixed = aotkit.jit(programs.block, frontend="jax").lower(*host).compile(backend="iree")
        variants["iree dynamic"] = lambda: dynamic(*host)
        variants["iree static"] = lambda: fixed(*host)
        np.testing.assert_allclose(dynamic(*host), static(*dev), rtol=2e-5, atol=1e-5)
    for fn in variants.values():
        for _ in range(min(calls, 500)):
            fn()
    times = {name: [] for name in variants}
    for _ in range(rounds):
        for name, fn in variants.items():
            start = time.perf_counter()
            for _ in range(calls):
                fn()
            times[name].append((time.perf_counter() - start) / calls * 1e6)
    return times


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", type=int, default=6, help="new shapes per column")
    parser.add_argument("--calls", type=int, default=3000, help="calls per round")
    parser.add_argument("--rounds", type=int, default=15, help="interleaved rounds")
    args = parser.parse_args(argv)

    first = first_calls(args.shapes)
    print(f"First call of a new shape, ms ({args.shapes} shapes (b, t) from (1, 8) up)")
    print(f"{'':18}{'median':>8}{'best':>9}{'vs symbolic':>13}")
    base = statistics.median(first["symbolic"])
    names = {
        "symbolic": "aotkit symbolic",
        "hit": "aotkit cache hit",
        "retrace": "aotkit retrace",
        "jax": "jax export",
        "iree": "iree dynamic",
        "iree-loaded": "iree loaded",
    }
    for key, label in names.items():
        if key not in first:
            continue
        median = statistics.median(first[key])
        print(f"{label:18}{_ms(median)}{_ms(min(first[key])):>9}{median / base:12.2f}x")

    steady = steady_calls(args.calls, args.rounds)
    print(f"\nA call of a compiled shape, us/call ({args.rounds} rounds)")
    print(f"{'':18}{'best':>8}{'median':>9}")
    for name, values in steady.items():
        print(f"{name:18}{min(values):8.2f}{statistics.median(values):9.2f}")
    ratio = statistics.median(steady["specialized"]) / statistics.median(steady["static"])
    print(f"specialized / static (median): {ratio:.3f}")
    if IREE:
        ratio = statistics.median(steady["iree dynamic"]) / statistics.median(steady["iree static"])
        print(f"iree dynamic / iree static (median): {ratio:.3f}")
    else:
        print("iree rows left out: the extra aotkit[iree] is not installed")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
