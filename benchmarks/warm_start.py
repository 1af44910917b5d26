"""Warm starts: a fresh process's time to the first result, aotkit against JAX, in one run.

    python benchmarks/warm_start.py [--rounds 3] [--steps 1500]

Programs: (a) an elementwise chain of `--steps` steps (`z = sin(z) * y + x`, three ops a
step), (b) the perceptron of examples/mlp.py (examples/jax_mlp.py for JAX). Each variant
runs in a fresh Python process:

  aotkit cold      no persistent cache (AOTKIT_CACHE_DIR=off): trace, lower, compile
  aotkit cache     the persistent cache filled by an earlier process: trace, lower, load
  aotkit artifact  `aotkit.load("prog.aotx")` and call: no tracing, no compile
  jax cold         jax.jit, no compilation cache
  jax cache        jax.jit with JAX's persistent cache filled by an earlier process (its
                   size and compile-time thresholds set to 0, so small programs are cached)

Columns: "import" is importing what the program needs (aotkit and aotkit.numpy for
tracing, jax and jax.numpy for JAX; for an artifact aotkit and JAX's runtime, which
`aotkit.load` would otherwise import during the first call: every variant's import holds
JAX's); "first call" is from there to the first result (blocked on), and for an artifact
"load" and "call" split it (`aotkit.load`, then the first call itself); "process" is the
whole process as the parent sees it (interpreter start to exit). Rounds are interleaved
(every variant once per round) so machine load hits all alike; cells are the median of the
rounds. Ratios are measured in this run: the first call against aotkit cold and against
JAX with its cache, the process against JAX with its cache. Every process runs with Python's
bytecode cache (in a directory of the run, filled by the preparing processes), as an
installed aotkit and JAX do.

A second table times `aotkit.load_module` of two 100 KB MLIR bytecode files (one of
~11,000 ops, one mostly a constant) in one process: the first call (it starts the sandbox
worker) and the median of the later ones, against starting a worker per file (what a
process per file cost before).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

AOTKIT_TRACE = """
import json, sys, time
t0 = time.perf_counter()
import aotkit, aotkit.numpy as anp
import numpy as np
{define}
t1 = time.perf_counter()
jitted = aotkit.jit({fn}, autograph=False)  # the same unrolled program as jax.jit's
out = jitted(*args)
out.block_until_ready()
t2 = time.perf_counter()
hits = jitted.cache_info().persistent_hits
print(json.dumps({{"import": t1 - t0, "first": t2 - t1, "origin": hits}}))
"""

AOTKIT_LOAD = """
import json, sys, time
t0 = time.perf_counter()
import aotkit
import jax  # the runtime aotkit.load runs on
import numpy as np
t1 = time.perf_counter()
compiled = aotkit.load({path!r})
t_load = time.perf_counter()
args = [np.load(p) for p in {inputs!r}]
out = compiled(*args)
out.block_until_ready()
t2 = time.perf_counter()
print(json.dumps({{"import": t1 - t0, "first": t2 - t1, "load": t_load - t1, "call": t2 - t_load,
                  "origin": compiled.origin}}))
"""

JAX_RUN = """
import json, sys, time
t0 = time.perf_counter()
import jax, jax.numpy as jnp
import numpy as np
{cache}
{define}
t1 = time.perf_counter()
out = jax.jit({fn})(*args)
out.block_until_ready()
t2 = time.perf_counter()
print(json.dumps({{"import": t1 - t0, "first": t2 - t1, "origin": None}}))
"""

JAX_CACHE = """
jax.config.update("jax_compilation_cache_dir", {dir!r})
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
"""


def chain_source(np_name: str, steps: int) -> str:
    return f"""
def chain(x, y):
    z = x
    for _ in range({steps}):
        z = {np_name}.sin(z) * y + x
    return z
args = [np.load(p) for p in INPUTS]
"""


def mlp_source(module: str) -> str:
    return f"""
sys.path.insert(0, {str(ROOT / "examples")!r})
from {module} import predict
args = [np.load(p) for p in INPUTS]
"""


def scripts(program: str, work: Path, steps: int) -> dict[str, tuple[str, dict]]:
    """variant -> (script, extra environment)."""
    inputs = [str(p) for p in sorted(work.glob(f"{program}-in*.npy"))]
    head = f"INPUTS = {inputs!r}\n"
    if program == "chain":
        ours, theirs, fn = chain_source("anp", steps), chain_source("jnp", steps), "chain"
    else:
        ours, theirs, fn = mlp_source("mlp"), mlp_source("jax_mlp"), "predict"
    trace = AOTKIT_TRACE.format(define=head + ours, fn=fn)
    jax_cold = JAX_RUN.format(cache="", define=head + theirs, fn=fn)
    jax_warm = JAX_RUN.format(
        cache=JAX_CACHE.format(dir=str(work / f"jax-cache-{program}")), define=head + theirs, fn=fn
    )
    load = AOTKIT_LOAD.format(path=str(work / f"{program}.aotx"), inputs=inputs)
    ours_cache = {"AOTKIT_CACHE_DIR": str(work / f"aotkit-cache-{program}")}
    off = {"AOTKIT_CACHE_DIR": "off"}
    return {
        "aotkit cold": (trace, off),
        "aotkit cache": (trace, ours_cache),
        "aotkit artifact": (load, off),
        "jax cold": (jax_cold, off),
        "jax cache": (jax_warm, off),
    }


def run(script: str, env: dict, pycache: Path) -> dict:
    start = time.perf_counter()
    base = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    proc = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env={**base, "JAX_PLATFORMS": "cpu", "PYTHONPYCACHEPREFIX": str(pycache), **env},
        cwd=ROOT,
    )
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"benchmark process failed:\n{script}\n{proc.stderr}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result["process"] = wall
    return result


def prepare(program: str, work: Path, steps: int) -> None:
    """Inputs, the artifact, and both persistent caches filled by one process each."""
    import numpy as np

    rng = np.random.default_rng(0)
    if program == "chain":
        shapes = [(128,), (128,)]
    else:
        shapes = [(8, 4), (4, 16), (16,), (16, 3)]
    for i, shape in enumerate(shapes):
        np.save(work / f"{program}-in{i}.npy", rng.standard_normal(shape).astype(np.float32))
    spec_args = ", ".join(f"aotkit.spec('f32[{','.join(map(str, s))}]')" for s in shapes)
    variants = scripts(program, work, steps)
    trace_script = variants["aotkit cold"][0]
    fn = "chain" if program == "chain" else "predict"
    save = trace_script.split("t1 = time.perf_counter()")[0] + (
        f"aotkit.jit({fn}, autograph=False).lower({spec_args}).compile()"
        f".save({str(work / (program + '.aotx'))!r})\n"
        "print(json.dumps({}))\n"
    )
    pycache = work / "pycache"
    run(save, {"AOTKIT_CACHE_DIR": "off"}, pycache)
    for variant in variants.values():  # fills the caches, bytecode's included
        run(*variant, pycache)


def table(program: str, results: dict[str, list[dict]]) -> list[str]:
    keys = ("import", "first", "process", "load", "call")
    med = {
        v: {k: statistics.median(r[k] for r in rs) for k in keys if k in rs[0]}
        for v, rs in results.items()
    }
    cold_first = med["aotkit cold"]["first"]
    jax_first = med["jax cache"]["first"]
    jax_process = med["jax cache"]["process"]
    rows = []
    for variant, m in med.items():
        split = f"{m['load']:.3f} + {m['call']:.3f}" if "load" in m else "-"
        rows.append(
            f"{program:<8} {variant:<16} {m['import']:>9.3f} {m['first']:>12.3f} {split:>15} "
            f"{m['process']:>11.3f} {cold_first / m['first']:>14.1f}x "
            f"{jax_first / m['first']:>13.2f}x {jax_process / m['process']:>16.2f}x"
        )
    return rows


def load_module_table(rounds: int) -> list[str]:
    import numpy as np

    import aotkit
    import aotkit.numpy as anp
    from aotkit.frontends import files

    def ops(x, y):
        z = x
        for _ in range(3700):
            z = anp.sin(z) * y + x
        return z

    weights = np.random.default_rng(0).standard_normal((160, 160)).astype(np.float32)

    def constant(x):
        return anp.tanh(x @ weights)

    modules = {
        # autograph=False: the loop stays 11,000 unrolled ops (converted, it is one while loop).
        "11,000 ops": aotkit.lower(
            ops, aotkit.spec("f32[16]"), aotkit.spec("f32[16]"), autograph=False
        ),
        "a constant": aotkit.lower(constant, aotkit.spec("f32[4,160]")),
    }
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for label, lowered in modules.items():
            path = Path(tmp) / "m.mlirbc"
            data = lowered.as_bytecode()
            path.write_bytes(data)
            files._shutdown()
            start = time.perf_counter()
            aotkit.load_module(path)
            first = time.perf_counter() - start
            later, fresh = [], []
            for _ in range(max(rounds, 5)):
                start = time.perf_counter()
                aotkit.load_module(path)
                later.append(time.perf_counter() - start)
                files._shutdown()  # the old way: a new sandbox process for this file
                start = time.perf_counter()
                aotkit.load_module(path)
                fresh.append(time.perf_counter() - start)
            later_ms = statistics.median(later) * 1e3
            fresh_ms = statistics.median(fresh) * 1e3
            rows.append(
                f"{label:<12} {len(data) / 1024:>7.0f} KB {first * 1e3:>9.0f} {later_ms:>11.1f} "
                f"{fresh_ms:>16.0f} {fresh_ms / later_ms:>8.1f}x"
            )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--programs", nargs="+", default=["chain", "mlp"])
    args = parser.parse_args()

    header = (
        f"{'program':<8} {'variant':<16} {'import s':>9} {'first call s':>12} "
        f"{'load + call s':>15} {'process s':>11} {'first vs cold':>15} "
        f"{'first vs jax$':>14} {'process vs jax$':>17}"
    )
    lines = [header, "-" * len(header)]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for program in args.programs:
            prepare(program, work, args.steps)
            variants = scripts(program, work, args.steps)
            results: dict[str, list[dict]] = {v: [] for v in variants}
            for _ in range(args.rounds):
                for variant, (script, env) in variants.items():
                    results[variant].append(run(script, env, work / "pycache"))
            for variant, rs in results.items():
                origins = {r["origin"] for r in rs}
                expected = {
                    "aotkit cold": {0},
                    "aotkit cache": {1},
                    "aotkit artifact": {"artifact"},
                }.get(variant)
                if expected is not None and origins != expected:
                    raise RuntimeError(f"{program} {variant}: origin {origins}, not {expected}")
            lines += table(program, results)
    print(f"chain: {args.steps} steps ({3 * args.steps} ops); median of {args.rounds} rounds")
    print("\n".join(lines))
    print("(jax$: JAX with its persistent cache warm)\n")
    header = (
        f"{'module':<12} {'size':>10} {'first ms':>9} {'later ms':>11} "
        f"{'new process ms':>16} {'speedup':>9}"
    )
    print("aotkit.load_module of 100 KB bytecode files, sandboxed parse")
    print(header)
    print("-" * len(header))
    print("\n".join(load_module_table(args.rounds)))


if __name__ == "__main__":
    main()
