"""Memory of a process that keeps lowering programs with new weights, aotkit against JAX.

    python benchmarks/memory.py [--lowerings 200] [--mib 4]

Each lowering is `x + w` for a new constant `w` of `--mib` MiB (a new function each time,
as a process that re-lowers a model with new weights does); the stage is dropped right
after. Each side runs in a fresh child process of its own, one after the other, and
reports its resident memory (RSS) after a warm-up of 5 lowerings and after all of them.
Also timed: the mean time of one lowering, so a memory fix that costs speed shows.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import textwrap

CHILD = textwrap.dedent(
    """
    import gc, json, sys, time
    import numpy as np
    n, mib, side = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    size = mib * 2**20 // 4

    def rss():
        return int(open("/proc/self/statm").read().split()[1]) * 4096 / 2**20

    if side == "aotkit":
        import aotkit
        spec = aotkit.spec(f"f32[{size}]")

        def once(i):
            w = np.arange(size, dtype=np.float32) + i
            aotkit.lower(lambda x: x + w, spec)
    else:
        import jax
        spec = jax.ShapeDtypeStruct((size,), np.float32)

        def once(i):
            w = np.arange(size, dtype=np.float32) + i
            jax.jit(lambda x: x + w).lower(spec)

    for i in range(5):
        once(i)
    gc.collect()
    start = rss()
    t0 = time.perf_counter()
    for i in range(n):
        once(i)
    seconds = (time.perf_counter() - t0) / n
    gc.collect()
    print(json.dumps({"start": start, "end": rss(), "ms": seconds * 1e3}))
    """
)


def run(side: str, lowerings: int, mib: int) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(lowerings), str(mib), side],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lowerings", type=int, default=200)
    parser.add_argument("--mib", type=int, default=4, help="size of each new constant")
    args = parser.parse_args(argv)
    print(
        f"{args.lowerings} lowerings of x + w, each with a new {args.mib} MiB constant w; RSS in "
        "MiB after 5 warm-up lowerings and after all of them"
    )
    header = f"{'':8s} {'RSS start':>10s} {'RSS end':>10s} {'growth':>10s} {'ms/lowering':>12s}"
    print(header)
    print("-" * len(header))
    for side in ("aotkit", "jax"):
        r = run(side, args.lowerings, args.mib)
        print(
            f"{side:8s} {r['start']:10.1f} {r['end']:10.1f} {r['end'] - r['start']:10.1f} "
            f"{r['ms']:12.2f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
