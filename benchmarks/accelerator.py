"""aotkit and jax.jit side by side on one accelerator: matrix products, a training step,
compile time, dispatch, and a fresh process's first result from an artifact and the caches.

    python benchmarks/accelerator.py [--backend tpu] [--quick] [--runner PATH --plugin PATH]

Run it where nothing else holds the accelerator: the fresh processes of the last table run
first, while this process is off it, then this process opens it for the rest.

Tables (every cell measured in this run, aotkit and JAX interleaved round by round):
- matmul: an n x n x n product, bfloat16 (8192) and float32 (4096) at each precision
  ('default', 'high', 'highest'); aotkit's `anp.matmul(a, b, precision=p)` against
  `jnp.matmul(a, b, precision=p)`. TFLOP/s = 2n^3 / (mean time of `--calls` calls, run back to
  back on inputs already on the device, blocked on the last).
- training step: an 8-layer residual MLP (width 1024, batch 512, float32), loss, gradient
  and an SGD update in one program, at 'default' and at 'highest' (aotkit's
  `default_matmul_precision` against `jax.default_matmul_precision`, both scoped): the mean
  step time, and the compile time (no cache on either side). "unrolled" is aotkit with
  `autograph=False`, the program jax.jit runs (the loop over layers unrolled at trace time);
  "rolled" is autograph's default, which turns that loop into one while loop.
- dispatch: a call of `x + 1` on 8 floats already on the device, blocked on each result
  (median of rounds of 200 calls).
- fresh process: each variant in a new Python process, the unrolled step at 'default':
  "first result" is from the process's start (as the parent sees it) to the first result,
  blocked on; "process" to its exit. JAX's persistent cache and aotkit's are filled by an
  earlier process; the artifact was saved by one. `--runner` adds the C runner
  (`aotkit-run ARTIFACT --plugin PATH`, process start to exit).
Ratios are aotkit / JAX (times) or JAX / aotkit (rates): above 1 is aotkit slower.
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

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
PRECISIONS = ("default", "high", "highest")
LAYERS, WIDTH, BATCH = 8, 1024, 512
LR = 1e-3


def make_step(xp, grad):
    """The training step (`xp` is aotkit.numpy or jax.numpy; `grad` aotkit.grad or jax.grad)."""

    def loss(w, b, x, y):
        h = x
        for i in range(w.shape[0]):
            h = h + xp.maximum(h @ w[i] + b[i], 0.0)
        return xp.mean((h - y) ** 2)

    def step(w, b, x, y):
        gw, gb = grad(loss, argnums=(0, 1))(w, b, x, y)
        return w - LR * gw, b - LR * gb, loss(w, b, x, y)

    return step


def step_args(layers: int, width: int, batch: int) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((layers, width, width)) * width**-0.5 * 0.5).astype(np.float32)
    b = np.zeros((layers, width), np.float32)
    x = rng.standard_normal((batch, width)).astype(np.float32)
    y = rng.standard_normal((batch, width)).astype(np.float32)
    return w, b, x, y


def block(out):
    import jax

    return jax.block_until_ready(out)


def mean_time(fn, args, calls: int) -> float:
    block(fn(*args))
    t0 = time.perf_counter()
    out = None
    for _ in range(calls):
        out = fn(*args)
    block(out)
    return (time.perf_counter() - t0) / calls


def interleaved(fns: dict, args, calls: int, rounds: int) -> dict[str, float]:
    """The best per-round mean time of each of `fns`, rounds interleaved."""
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(rounds):
        for name, fn in fns.items():
            best[name] = min(best[name], mean_time(fn, args, calls))
    return best


def matmul_rows(backend: str, quick: bool, calls: int, rounds: int) -> list[tuple]:
    import jax
    import jax.numpy as jnp

    import aotkit
    import aotkit.numpy as anp

    rng = np.random.default_rng(0)
    rows = []
    cases = [("bfloat16", 8192, "default")] + [("float32", 4096, p) for p in PRECISIONS]
    for dtype, n, precision in cases:
        n = 512 if quick else n
        a = jax.device_put(rng.standard_normal((n, n)).astype(dtype), jax.devices(backend)[0])
        b = jax.device_put(rng.standard_normal((n, n)).astype(dtype), jax.devices(backend)[0])
        ours = aotkit.jit(lambda a, b, p=precision: anp.matmul(a, b, precision=p), backend=backend)
        theirs = jax.jit(lambda a, b, p=precision: jnp.matmul(a, b, precision=p))
        times = interleaved({"aotkit": ours, "jax": theirs}, (a, b), calls, rounds)
        flop = 2.0 * n**3
        rows.append(
            (
                f"{dtype} {n}^3 {precision}",
                flop / times["aotkit"] / 1e12,
                flop / times["jax"] / 1e12,
                times["aotkit"] / times["jax"],
            )
        )
    return rows


def step_rows(backend: str, quick: bool, calls: int, rounds: int) -> list[tuple]:
    import jax
    import jax.numpy as jnp

    import aotkit
    import aotkit.numpy as anp

    layers, width, batch = (2, 128, 64) if quick else (LAYERS, WIDTH, BATCH)
    host = step_args(layers, width, batch)
    device = jax.devices(backend)[0]
    args = tuple(jax.device_put(a, device) for a in host)
    rows = []
    for precision, rolled in (("default", False), ("highest", False), ("default", True)):
        t0 = time.perf_counter()
        with aotkit.default_matmul_precision(precision):
            # autograph=False: the layers unrolled, jax.jit's program; autograph's default
            # rolls the loop over layers into one while loop.
            jitted = aotkit.jit(make_step(anp, aotkit.grad), backend=backend, autograph=rolled)
            ours = jitted.lower(*host).compile()
        ours_compile = time.perf_counter() - t0
        t0 = time.perf_counter()
        with jax.default_matmul_precision(precision):
            theirs = jax.jit(make_step(jnp, jax.grad)).lower(*host).compile()
        theirs_compile = time.perf_counter() - t0
        got, want = block(ours(*args)), block(theirs(*args))
        loss_diff = abs(float(got[2]) - float(want[2])) / abs(float(want[2]))
        times = interleaved({"aotkit": ours, "jax": theirs}, args, calls, rounds)
        rows.append(
            (
                f"{precision}, {'rolled (autograph)' if rolled else 'unrolled'}",
                times["aotkit"] * 1e3,
                times["jax"] * 1e3,
                times["aotkit"] / times["jax"],
                ours_compile,
                theirs_compile,
                loss_diff,
            )
        )
    return rows


def dispatch_row(backend: str, rounds: int) -> tuple:
    import jax
    import jax.numpy as jnp

    import aotkit

    x = jax.device_put(np.arange(8, dtype=np.float32), jax.devices(backend)[0])
    ours = aotkit.jit(lambda x: x + 1.0, backend=backend)
    theirs = jax.jit(lambda x: jnp.add(x, 1.0))
    samples = {"aotkit": [], "jax": []}
    for fn in (ours, theirs):
        block(fn(x))
    for _ in range(rounds):
        for name, fn in (("aotkit", ours), ("jax", theirs)):
            t0 = time.perf_counter()
            for _ in range(200):
                block(fn(x))
            samples[name].append((time.perf_counter() - t0) / 200)
    ours_us = statistics.median(samples["aotkit"]) * 1e6
    theirs_us = statistics.median(samples["jax"]) * 1e6
    return ours_us, theirs_us, ours_us / theirs_us


# --- fresh processes --------------------------------------------------------------------------

CHILD = """
import json, os, sys, time
sys.path.insert(0, {here!r})
from accelerator import make_step, step_args
mode, folder, backend = sys.argv[1], sys.argv[2], sys.argv[3]
host = step_args({layers}, {width}, {batch})
if mode.startswith("jax"):
    import jax, jax.numpy as jnp
    jax.config.update("jax_compilation_cache_dir", os.path.join(folder, "jax-cache"))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
    fn = jax.jit(make_step(jnp, jax.grad))
    origin = "jax"
else:
    import aotkit
    if mode == "artifact":
        fn = aotkit.load(os.path.join(folder, "step.aotx"), recompile=False)
    else:
        import aotkit.numpy as anp
        fn = aotkit.jit(make_step(anp, aotkit.grad), backend=backend, autograph=False)
        fn = fn.lower(*host).compile()
        if mode == "save":
            fn.save(os.path.join(folder, "step.aotx"))
    origin = fn.origin
out = fn(*host)
import jax
jax.block_until_ready(out)
print(json.dumps({{"first": time.time(), "origin": origin, "loss": float(out[2])}}))
"""


def fresh_rows(backend: str, quick: bool, rounds: int, runner, plugin) -> list[tuple]:
    layers, width, batch = (2, 128, 64) if quick else (LAYERS, WIDTH, BATCH)
    folder = tempfile.mkdtemp(prefix="aotkit-accelerator-")
    script = Path(folder) / "child.py"
    script.write_text(
        CHILD.format(
            here=str(Path(__file__).resolve().parent), layers=layers, width=width, batch=batch
        )
    )
    env = {
        **os.environ,
        "AOTKIT_CACHE_DIR": os.path.join(folder, "aotkit-cache"),
        "AOTKIT_DEFAULT_MATMUL_PRECISION": "default",
        "JAX_DEFAULT_MATMUL_PRECISION": "default",
        "PYTHONPYCACHEPREFIX": os.path.join(folder, "pycache"),
    }

    def run(mode: str) -> tuple[float, float, dict]:
        t0 = time.time()
        proc = subprocess.run(
            [sys.executable, str(script), mode, folder, backend],
            capture_output=True,
            text=True,
            env=env,
            cwd=ROOT,
        )
        end = time.time()
        if proc.returncode != 0:
            raise RuntimeError(f"{mode}: {proc.stderr[-3000:]}")
        record = json.loads(proc.stdout.splitlines()[-1])
        return record["first"] - t0, end - t0, record

    # Fill JAX's cache and aotkit's, and save the artifact (untimed).
    run("jax-fill")
    run("save")
    variants = {
        "jax.jit, JAX's persistent cache": "jax",
        "aotkit.load(artifact)": "artifact",
        "aotkit.jit, aotkit's persistent cache": "cache",
    }
    samples = {name: [] for name in variants}
    origins = {}
    if runner:
        samples["aotkit-run (C), artifact"] = []
        host = step_args(layers, width, batch)
        inputs = []
        for name, a in zip("wbxy", host, strict=True):
            np.save(os.path.join(folder, f"{name}.npy"), a)
            inputs += ["--input", os.path.join(folder, f"{name}.npy")]
    for _ in range(rounds):
        for name, mode in variants.items():
            first, whole, record = run(mode)
            samples[name].append((first, whole))
            origins[name] = record["origin"]
        if runner:
            t0 = time.time()
            argv = [runner, os.path.join(folder, "step.aotx"), "--plugin", plugin, *inputs]
            argv += ["-o", folder, "-v"]
            proc = subprocess.run(argv, capture_output=True, text=True)
            whole = time.time() - t0
            if proc.returncode != 0:
                raise RuntimeError(f"aotkit-run: {proc.stderr[-3000:]}")
            how = [line for line in proc.stderr.splitlines() if "executable" in line]
            origins["aotkit-run (C), artifact"] = how[0].split(": ", 1)[-1] if how else "?"
            samples["aotkit-run (C), artifact"].append((whole, whole))
    reference = statistics.median(s[0] for s in samples["jax.jit, JAX's persistent cache"])
    rows = []
    for name, values in samples.items():
        first = statistics.median(v[0] for v in values)
        whole = statistics.median(v[1] for v in values)
        rows.append((name, first, whole, first / reference, origins.get(name, "")))
    return rows


def table(title: str, header: list[str], rows: list[tuple], formats: list[str]) -> None:
    print(f"\n### {title}\n")
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join(" --- " for _ in header) + "|")
    for row in rows:
        cells = [format(v, f) if f else str(v) for v, f in zip(row, formats, strict=True)]
        print("| " + " | ".join(cells) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", default="tpu")
    parser.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    parser.add_argument("--calls", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--runner", help="an aotkit-run binary, for the fresh-process table")
    parser.add_argument("--plugin", help="the PJRT plugin --runner loads")
    parser.add_argument("--fresh-rounds", type=int, default=3)
    parser.add_argument("--skip-fresh", action="store_true")
    args = parser.parse_args()
    os.environ.setdefault("AOTKIT_CACHE_DIR", "off")

    fresh = None
    if not args.skip_fresh:
        # First, while this process is off the accelerator.
        fresh = fresh_rows(args.backend, args.quick, args.fresh_rounds, args.runner, args.plugin)

    import jax

    import aotkit

    device = jax.devices(args.backend)[0]
    versions = f"jax {jax.__version__}; aotkit {aotkit.__version__}"
    print(f"# {device.device_kind} ({args.backend}); {versions}")
    table(
        "matmul (TFLOP/s)",
        ["product", "aotkit", "jax.jit", "aotkit time / jax time"],
        matmul_rows(args.backend, args.quick, args.calls, args.rounds),
        ["", ".1f", ".1f", ".3f"],
    )
    table(
        "training step (quick sizes: 2 layers, width 128, batch 64)"
        if args.quick
        else f"training step ({LAYERS}-layer residual MLP, width {WIDTH}, batch {BATCH}, float32)",
        [
            "precision, program",
            "aotkit ms",
            "jax.jit ms",
            "ratio",
            "aotkit compile s",
            "jax compile s",
            "loss rel. diff",
        ],
        step_rows(args.backend, args.quick, args.calls, args.rounds),
        ["", ".3f", ".3f", ".3f", ".2f", ".2f", ".1e"],
    )
    table(
        "dispatch (x + 1 on f32[8], blocked per call)",
        ["aotkit us", "jax.jit us", "ratio"],
        [dispatch_row(args.backend, max(args.rounds, 5))],
        [".1f", ".1f", ".3f"],
    )
    if fresh is not None:
        table(
            "fresh process, the training step at 'default' (median of rounds)",
            ["variant", "first result s", "process s", "first / JAX's", "executable from"],
            fresh,
            ["", ".2f", ".2f", ".2f", ""],
        )


if __name__ == "__main__":
    main()
