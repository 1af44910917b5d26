"""Trace+lower time: aotkit against `jax.jit(f).lower()` on the same programs, in one run.

    python benchmarks/lowering.py [--repeat 9] [--min-time 0.5]

Programs: a 5,000-op elementwise chain, a 32-layer MLP and one op (`sin(x)`: what a
lowering costs whatever the program, its fixed part). Each cell is the best of its
runs (fresh Python function each time, so no cache can help either side), with aotkit's
and JAX's runs interleaved so both see the same machine load, and the variant that goes
first in a round rotating (no variant always runs right after the same other). Every
variant runs the same number of rounds: `--repeat`, or more for a small program, enough
that the slowest variant runs `--min-time` seconds in all (as `timeit`'s autorange does; a
1 ms lowering needs more than 9 tries for its best to settle).
Prints microseconds per op (StableHLO ops in aotkit's module) and the ratios JAX / aotkit
with no pipeline and with the default pipeline included. The "pipeline ms" column is the
default pass pipeline alone, run on the traced module (with the verification of its result
when a pass ran, as `lower` does); the per-pass breakdown for each program follows the
table. Where aotkit's C part is built, a second table sets the default pipeline's lowering
with the tracer's C `bind` against the same lowering with its Python `bind` alone (the C
part switched off), in the same interleaved rounds.
"""

from __future__ import annotations

import argparse
import math
import time

import jax
import jax.numpy as jnp
import numpy as np

import aotkit
import aotkit.numpy as anp
from aotkit import _native, passes
from aotkit.tracing import core

CHAIN_OPS = 5000
MLP_LAYERS = 32
MLP_WIDTH = 256


def make_chain(np_mod):
    def chain(x, y):
        z = x
        for i in range(CHAIN_OPS):
            k = i % 4
            if k == 0:
                z = np_mod.sin(z)
            elif k == 1:
                z = z * y
            elif k == 2:
                z = z + x
            else:
                z = np_mod.tanh(z)
        return z

    return chain


def make_one_op(np_mod):
    def one_op(x):
        return np_mod.sin(x)

    return one_op


def make_mlp(np_mod):
    def mlp(params, x):
        for w, b in params:
            x = np_mod.maximum(x @ w + b, 0.0)
        return x

    return mlp


def rounds_for(variants: dict, repeat: int, min_time: float) -> int:
    """`repeat`, or more rounds when the slowest variant's first run says they are cheap."""
    slowest = 0.0
    for fn in variants.values():
        t0 = time.perf_counter()
        fn()
        slowest = max(slowest, time.perf_counter() - t0)
    return max(repeat, math.ceil(min_time / slowest))


def best_of(variants: dict, rounds: int) -> dict[str, float]:
    """Best time of each variant; rounds are interleaved so all see the same machine load,
    and the variant that goes first rotates, so none always runs right after the same other
    (a lowering runs slower right after another one that filled the caches with its own
    data: 5-15% after JAX's 190 ms chain)."""
    best = dict.fromkeys(variants, float("inf"))
    names = list(variants)
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            t0 = time.perf_counter()
            variants[name]()
            best[name] = min(best[name], time.perf_counter() - t0)
    return best


def with_python_bind(fn):
    """`fn()` with every op made by the tracer's Python `bind` (the C `Binder` hands over)."""
    core.bind.enabled = core.bind1.enabled = False
    try:
        return fn()
    finally:
        core.bind.enabled = core.bind1.enabled = True


def count_ops(text: str) -> int:
    return sum(1 for line in text.splitlines() if " = stablehlo." in line or " = chlo." in line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=9, help="fewest rounds")
    parser.add_argument(
        "--min-time", type=float, default=0.5, help="seconds the slowest variant runs in all"
    )
    args = parser.parse_args()

    f32 = aotkit.spec("f32[128]")
    x = np.zeros(128, np.float32)
    params_spec = [
        (
            aotkit.ShapeDtype((MLP_WIDTH, MLP_WIDTH), "float32"),
            aotkit.ShapeDtype((MLP_WIDTH,), "float32"),
        )
        for _ in range(MLP_LAYERS)
    ]
    params_jax = [
        (jax.ShapeDtypeStruct(w.shape, w.dtype), jax.ShapeDtypeStruct(b.shape, b.dtype))
        for w, b in params_spec
    ]
    xs_spec = aotkit.ShapeDtype((8, MLP_WIDTH), "float32")
    xs_jax = jax.ShapeDtypeStruct((8, MLP_WIDTH), np.float32)

    cases = [
        ("chain (5,000 ops)", make_chain, (f32, f32), (x, x)),
        ("mlp (32 layers)", make_mlp, (params_spec, xs_spec), (params_jax, xs_jax)),
        ("one op", make_one_op, (f32,), (x,)),
    ]
    pipelines = ["none", "default"]
    header = (
        f"{'program':<20} {'ops':>6} {'rounds':>6} "
        + " ".join(f"{'aotkit ' + p + ' ms':>18}" for p in pipelines)
        + f" {'pipeline ms':>12} {'jax ms':>10} {'aotkit us/op':>13} {'jax us/op':>10}"
    )
    header += f" {'jax/none':>9} {'jax/default':>12}"
    print(header)
    print("-" * len(header))
    breakdowns = []
    binds = []
    for name, make, a_args, j_args in cases:
        # autograph=False: the chain is meant to stay 5,000 unrolled ops, as under jax.jit.
        variants = {
            p: (
                lambda p=p, make=make, a=a_args: aotkit.lower(
                    make(anp), *a, pipeline=p, autograph=False
                )
            )
            for p in pipelines
        }
        variants["jax"] = lambda make=make, j_args=j_args: jax.jit(make(jnp)).lower(*j_args)
        if _native.Binder is not None:
            variants["python bind"] = lambda default=variants["default"]: with_python_bind(default)
        rounds = rounds_for(variants, args.repeat, args.min_time)
        times = best_of(variants, rounds)
        t_jax = times["jax"]
        n_ops = count_ops(aotkit.lower(make(anp), *a_args, autograph=False).as_text())
        t_pipe, per_pass = pipeline_only(make, a_args, rounds)
        breakdowns.append((name, per_pass))
        if "python bind" in times:
            binds.append((name, times["default"], times["python bind"]))
        t_aot = times["none"]
        print(
            f"{name:<20} {n_ops:>6} {rounds:>6} "
            + " ".join(f"{times[p] * 1e3:>18.2f}" for p in pipelines)
            + f" {t_pipe * 1e3:>12.2f}"
            + f" {t_jax * 1e3:>10.2f} {t_aot / n_ops * 1e6:>13.2f} {t_jax / n_ops * 1e6:>10.2f}"
            f" {t_jax / t_aot:>8.1f}x {t_jax / times['default']:>11.1f}x"
        )
    if binds:
        print("\ndefault pipeline, the tracer's C bind against its Python bind alone:")
        print(f"{'program':<20} {'C bind ms':>10} {'Python bind ms':>15} {'speedup':>8}")
        for name, c_time, python_time in binds:
            print(
                f"{name:<20} {c_time * 1e3:>10.2f} {python_time * 1e3:>15.2f}"
                f" {python_time / c_time:>7.2f}x"
            )
    for name, per_pass in breakdowns:
        print(f"\ndefault pipeline on {name}, fastest run:")
        print(passes.format_timing(per_pass, name=name, pipeline="default"), end="")


def pipeline_only(make, a_args, repeat: int):
    """Best time of the default pipeline on freshly traced modules, and that run's passes
    (with what the tracer tells the runner, and the verification of the result when a pass
    ran, as `lower` runs it)."""
    best, best_passes = float("inf"), []
    for _ in range(repeat):
        traced = aotkit.jit(make(anp), autograph=False).trace(*a_args)
        module = traced.module
        t0 = time.perf_counter()
        per_pass = passes.run_pipeline(
            module, "default", name="bench", verified=True, verify=False, facts=traced.facts
        )
        if passes.ran_any(per_pass):
            passes.verify_result(module, "default", name="bench", dumper=None)
        elapsed = time.perf_counter() - t0
        if elapsed < best:
            best, best_passes = elapsed, per_pass
    return best, best_passes


if __name__ == "__main__":
    main()
