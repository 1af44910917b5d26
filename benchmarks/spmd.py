"""Sharded programs: compile time and step time on 1, 2, 4 and 8 devices, aotkit against
`jax.jit` of the same program with the same shardings, in one run.

The program is one SGD step of a 2-layer MLP (tests/spmd_checks.py's `mlp_step`, gradients
written by hand, so the same source runs as aotkit.numpy and as jax.numpy), data parallel:
the batch split over a mesh axis 'data' of the first n devices, the weights replicated, the
gradients all-reduced by XLA's partitioner. Variants:

  aotkit      aotkit.jit(mlp_step with aotkit.numpy, in_shardings, out_shardings)
  aotkit[jax] the same jit with frontend="jax" on the jax.numpy source: JAX's own module,
              compiled and called by aotkit
  jax         jax.jit(mlp_step with jax.numpy, in_shardings, out_shardings)

"compile" is a fresh trace + lower + compile (new function objects each round, so no cache
answers; sharded programs skip aotkit's persistent cache and JAX's is off). "step" is the
time per call in a loop that feeds the returned parameters back in (sharded jax.Arrays, the
batch already placed), waiting for each step's result before the next (pipelined steps
deadlock on jaxlib 0.10.2's CPU client, see docs/sharding.md); "step, NumPy
batch" passes the batch as a NumPy array each call (placed by its sharding). Rounds are
interleaved; best and median round shown. On a machine with few cores more devices means
less speed, not more: the point here is aotkit's overhead relative to JAX on the same
devices.

    .venv/bin/python benchmarks/spmd.py [--rounds 7] [--steps 200] [--batch 256] [--hidden 256]
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import time
from pathlib import Path

import jax

jax.config.update("jax_num_cpu_devices", 8)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import aotkit  # noqa: E402
import aotkit.numpy as anp  # noqa: E402
from tests.spmd_checks import mlp_data, mlp_step  # noqa: E402

VARIANTS = ("aotkit", "aotkit[jax]", "jax")


def shardings(mesh):
    replicated, batch = NamedSharding(mesh, P()), NamedSharding(mesh, P("data"))
    return ((replicated,) * 4, batch, batch), ((replicated,) * 4, replicated)


def make(variant: str, mesh):
    """A fresh jitted step (new function objects: nothing cached) for `variant`."""
    ins, outs = shardings(mesh)
    if variant == "jax":
        return jax.jit(functools.partial(mlp_step, jnp), in_shardings=ins, out_shardings=outs)
    xp, frontend = (anp, "aotkit") if variant == "aotkit" else (jnp, "jax")
    return aotkit.jit(
        functools.partial(mlp_step, xp), in_shardings=ins, out_shardings=outs, frontend=frontend
    )


def compile_seconds(variant: str, mesh, data) -> float:
    start = time.perf_counter()
    make(variant, mesh).lower(*data).compile()
    return time.perf_counter() - start


def step_seconds(step, placed, x_host, steps: int, numpy_batch: bool) -> float:
    params, x, y = placed
    if numpy_batch:
        x = x_host
    start = time.perf_counter()
    for _ in range(steps):
        params, loss = step(params, x, y)
        # Each step waits for the last: on jaxlib 0.10.2's CPU client, pipelined SPMD steps
        # with collectives deadlock (see docs/sharding.md), in JAX as in aotkit.
        loss.block_until_ready()
    return (time.perf_counter() - start) / steps


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7, help="interleaved rounds")
    parser.add_argument("--steps", type=int, default=200, help="steps per timed round")
    parser.add_argument("--batch", type=int, default=256, help="batch size (rows)")
    parser.add_argument("--hidden", type=int, default=256, help="hidden layer width")
    args = parser.parse_args(argv)
    data = mlp_data(batch=args.batch, d_in=64, hidden=args.hidden, d_out=16)
    devices = [1, 2, 4, 8]
    rows = []
    for n in devices:
        mesh = aotkit.sharding.mesh({"data": n})
        ins, _ = shardings(mesh)
        placed = jax.device_put(data, ins)
        steps = {v: make(v, mesh) for v in VARIANTS}
        results = []
        for v in VARIANTS:  # compile, warm up, and check they agree
            results.append(jax.tree.leaves(steps[v](*placed)))
            jax.block_until_ready(results[-1])
        for other in results[1:]:
            for a, b in zip(results[0], other, strict=True):
                np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-5)
        times = {(v, k): [] for v in VARIANTS for k in ("compile", "step", "numpy")}
        for _ in range(args.rounds):
            for v in VARIANTS:
                times[v, "compile"].append(compile_seconds(v, mesh, data))
                times[v, "step"].append(step_seconds(steps[v], placed, data[1], args.steps, False))
                times[v, "numpy"].append(step_seconds(steps[v], placed, data[1], args.steps, True))
        rows.append((n, times))

    def ratios(ours, theirs) -> str:
        best = min(ours) / min(theirs)
        median = statistics.median(ours) / statistics.median(theirs)
        return f"{best:.2f} / {median:.2f}"

    def cell(samples, scale):
        return f"{min(samples) * scale:8.2f} / {statistics.median(samples) * scale:8.2f}"

    for kind, title, scale, unit in (
        ("compile", "compile (trace + lower + compile)", 1e3, "ms"),
        ("step", "step, sharded jax.Array arguments", 1e6, "us"),
        ("numpy", "step, NumPy batch", 1e6, "us"),
    ):
        print(
            f"\n{title}: {unit}, best / median of {args.rounds} rounds (ratios: of the bests "
            "/ of the medians)"
        )
        header = f"{'devices':>7}  " + "  ".join(f"{v:>19}" for v in VARIANTS)
        header += f"  {'aotkit/jax':>13}  {'aotkit[jax]/jax':>15}"
        print(header)
        print("-" * len(header))
        for n, times in rows:
            line = f"{n:>7}  " + "  ".join(f"{cell(times[v, kind], scale):>19}" for v in VARIANTS)
            for variant, width in (("aotkit", 13), ("aotkit[jax]", 15)):
                line += f"  {ratios(times[variant, kind], times['jax', kind]):>{width}}"
            print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
