"""Fuzzing loaded modules: mutated real modules through load_module -> compile -> run.

Seeds are real programs written by their real writers: aotkit's lowering (StableHLO text,
MLIR bytecode, a portable artifact; one with LAPACK custom calls) and `jax.export` (LAPACK,
complex constants). Mutations flip bytes, truncate, splice two seeds, and, in text, replace
numbers (dimensions, attribute values) and custom-call targets. Each batch runs in a child
process (`python -m tests.reliability.fuzzing --child`), which loads, compiles and runs every
module of the batch and prints one JSON line each; a child that dies (a signal) has its
batch run again one module per process, so the death is attributed to a module. A death is
what must never happen: bad input is an exception.

Then a thread phase: the seeds are loaded, compiled and called from several threads at once,
and every result must equal the one-thread result (nothing lost).

`tests/reliability/test_fuzz.py` runs a small deterministic sample; the full run, whose
counts are in docs/reliability.md, is `python -m tests.reliability.fuzzing --mutations 3000`.
"""

from __future__ import annotations

import argparse
import base64
import json
import random
import re
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

_ROOT = Path(__file__).resolve().parents[2]
# Arguments up to this many elements are made and passed; bigger signatures only compile.
MAX_ARGUMENT_ELEMENTS = 1 << 20
BATCH_TIMEOUT_S = 240.0
CASE_TIMEOUT_S = 60.0


# --- seeds -------------------------------------------------------------------------------------


def seeds() -> dict[str, bytes]:
    """Real modules, by name (`program.format`)."""
    import jax
    import jax.numpy as jnp
    from jax import export

    import aotkit
    import aotkit.numpy as anp

    def mlp(x, w1, b1, w2):
        return anp.tanh(x @ w1 + b1) @ w2

    def linalg(a, b):
        return anp.linalg.solve(a, b) + anp.linalg.eigh(a)[0].sum()

    found = {}
    for name, fn, specs in (
        ("mlp", mlp, ("f32[4,3]", "f32[3,5]", "f32[5]", "f32[5,2]")),
        ("linalg", linalg, ("f64[3,3]", "f64[3]")),
    ):
        # Read back from text, which has no locations: the bytes, so the seeded sample of
        # mutations, do not depend on where the checkout lies (a location names this file).
        lowered = aotkit.load_module(aotkit.lower(fn, *map(aotkit.spec, specs)).as_text().encode())
        found[f"{name}.mlir"] = lowered.as_text().encode()
        found[f"{name}.mlirbc"] = lowered.as_bytecode()
        found[f"{name}.vhlo"] = lowered.as_portable_artifact()
    f32 = jnp.float32

    def exported(fn, *shapes, dtype=f32):
        specs = [jax.ShapeDtypeStruct(s, dtype) for s in shapes]
        limit = jax.config.jax_traceback_in_locations_limit
        jax.config.update("jax_traceback_in_locations_limit", 0)  # no file names, as above
        try:
            return bytes(export.export(jax.jit(fn), platforms=["cpu"])(*specs).serialize())
        finally:
            jax.config.update("jax_traceback_in_locations_limit", limit)

    found["solve.jax_export"] = exported(jnp.linalg.solve, (3, 3), (3,))
    found["svd.jax_export"] = exported(lambda a: jnp.linalg.svd(a)[1], (4, 3))
    found["complex.jax_export"] = exported(lambda x: x * (1 + 2j), (3,), dtype=jnp.complex64)
    found["solve.mlir"] = (
        jax.jit(jnp.linalg.solve)
        .lower(jax.ShapeDtypeStruct((3, 3), f32), jax.ShapeDtypeStruct((3,), f32))
        .as_text()
        .encode()
    )
    return found


# --- mutations ---------------------------------------------------------------------------------

_NUMBER = re.compile(rb"(?<![\w.])\d+(?![\w.])")
_TARGET = re.compile(rb"custom_call @(\w+)")
_BINARY = re.compile(
    rb"stablehlo\.(add|subtract|multiply|divide|maximum|minimum|power|remainder)\b"
)
_INTERESTING = [b"0", b"1", b"2", b"7", b"255", b"65536", b"2147483648", b"4294967296",
                b"4611686018427387904", b"9223372036854775807"]  # fmt: skip
_TARGETS = [b"lapack_sgetrf_ffi", b"lapack_dpotrf_ffi", b"lapack_zgesdd_ffi",
            b"xla_ffi_python_cpu_callback", b"lapack_strsm_ffi", b"my_kernel",
            b"tridiagonal_solve_perturbed_ffi"]  # fmt: skip


def mutate(rng: random.Random, name: str, data: bytes, others: list[bytes]) -> tuple[str, bytes]:
    """One mutation of `data`: (what was done, the new bytes)."""
    is_text = name.endswith(".mlir")
    kinds = ["flip", "truncate", "splice"]
    if is_text:
        kinds += ["number", "number", "target", "op", "op", "line"]
    kind = rng.choice(kinds)
    b = bytearray(data)
    if kind == "flip":
        for _ in range(rng.randint(1, 8)):
            i = rng.randrange(len(b))
            b[i] ^= rng.randint(1, 255)
        return kind, bytes(b)
    if kind == "truncate":
        return kind, bytes(b[: rng.randrange(1, len(b))])
    if kind == "splice":
        other = rng.choice(others)
        return kind, bytes(b[: rng.randrange(len(b))] + other[rng.randrange(len(other)) :])
    if kind == "number":
        spots = list(_NUMBER.finditer(data))
        if spots:
            m = rng.choice(spots)
            return kind, data[: m.start()] + rng.choice(_INTERESTING) + data[m.end() :]
    if kind == "target":
        spots = list(_TARGET.finditer(data))
        if spots:
            m = rng.choice(spots)
            return kind, data[: m.start(1)] + rng.choice(_TARGETS) + data[m.end(1) :]
    if kind == "op":
        spots = list(_BINARY.finditer(data))
        if spots:
            m = rng.choice(spots)
            op = rng.choice([b"add", b"subtract", b"multiply", b"divide", b"power", b"remainder"])
            return kind, data[: m.start(1)] + op + data[m.end(1) :]
    lines = data.split(b"\n")
    i = rng.randrange(len(lines))
    if rng.random() < 0.5:
        lines.insert(i, lines[rng.randrange(len(lines))])
    else:
        del lines[i]
    return "line", b"\n".join(lines)


def mutations(count: int, seed: int, found: dict[str, bytes]) -> list[dict]:
    names = sorted(found)
    cases = []
    for i in range(count):
        name = names[i % len(names)]
        # One generator per case: its kind is its first draw, so which kinds a sample holds
        # depends on `seed` alone, not on the bytes of the modules before it.
        rng = random.Random(f"{seed}:{i}")
        kind, data = mutate(rng, name, found[name], [found[n] for n in names])
        cases.append({"id": i, "seed": name, "kind": kind, "data": data})
    return cases


# --- the child ---------------------------------------------------------------------------------


def _child(case_seconds: float) -> int:
    """Reads a batch (JSON lines on stdin), answers one JSON line per case on stdout.

    A mutated loop may never end (`i = i * 1`); a computation cannot be interrupted, so a
    case still running after `case_seconds` ends this process through faulthandler's
    watchdog (exit status 1, "Timeout" on stderr): the parent counts it as a runaway.
    """
    import faulthandler

    import aotkit

    for line in sys.stdin:
        faulthandler.dump_traceback_later(case_seconds, exit=True)
        case = json.loads(line)
        answer = {"id": case["id"]}
        data = base64.b64decode(case["data"])
        stage = "load"
        try:
            lowered = aotkit.load_module(data)
            stage = "compile"
            compiled = lowered.compile()
            stage = "run"
            if sum(s.size for s in lowered.flat_in_specs) > MAX_ARGUMENT_ELEMENTS:
                answer["outcome"] = "compiled"
            else:
                args = [np.ones(s.shape, s.dtype) for s in lowered.flat_in_specs]
                compiled(*args)
                answer["outcome"] = "ran"
        except Exception as e:  # every failure must be an exception: which one is counted
            answer["outcome"] = f"{stage} {type(e).__name__}"
            if not isinstance(e, ValueError):  # not the expected refusal: keep its words
                where = traceback.extract_tb(e.__traceback__)[-3:]
                frames = " <- ".join(f"{Path(f.filename).name}:{f.lineno}" for f in where[::-1])
                answer["detail"] = f"{type(e).__name__}: {str(e)[:300]} (at {frames})"
        faulthandler.cancel_dump_traceback_later()
        print(json.dumps(answer), flush=True)
    return 0


def _run_batch(
    cases: list[dict], timeout: float, case_seconds: float = CASE_TIMEOUT_S
) -> tuple[int | None, dict[int, str], bool]:
    """(return code or None on timeout, outcomes by id, whether the watchdog ended it) of
    one child over `cases`."""
    payload = "".join(
        json.dumps({"id": c["id"], "data": base64.b64encode(c["data"]).decode()}) + "\n"
        for c in cases
    )
    try:
        done = subprocess.run(
            [sys.executable, "-m", "tests.reliability.fuzzing", "--child", str(case_seconds)],
            input=payload,
            capture_output=True,
            text=True,
            cwd=_ROOT,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else e.stdout or ""
        return None, _outcomes(out), False
    watchdog = done.returncode == 1 and "Timeout (" in done.stderr
    return done.returncode, _outcomes(done.stdout), watchdog


# (case id, what was raised) of every exception other than a ValueError, for the report.
_details: list[tuple[int, str]] = []
_details_lock = threading.Lock()


def _outcomes(stdout: str) -> dict[int, str]:
    found = {}
    for line in stdout.splitlines():
        if line.startswith("{"):
            answer = json.loads(line)
            found[answer["id"]] = answer["outcome"]
            if "detail" in answer:
                with _details_lock:
                    _details.append((answer["id"], answer["detail"]))
    return found


@dataclass
class Report:
    cases: int = 0
    children: int = 0
    outcomes: Counter = field(default_factory=Counter)
    deaths: list = field(default_factory=list)
    hangs: list = field(default_factory=list)
    seconds: float = 0.0


def fuzz(
    cases: list[dict], batch: int = 40, jobs: int = 2, case_seconds: float = CASE_TIMEOUT_S
) -> Report:
    """Runs `cases` in child processes, `batch` per child, `jobs` children at a time; a case
    still running after `case_seconds` is a runaway, and the rest of its batch goes on in a
    new child."""
    report = Report(cases=len(cases))
    start = time.monotonic()
    batches = [cases[i : i + batch] for i in range(0, len(cases), batch)]
    lock = threading.Lock()

    def alone(case: dict) -> None:
        code, found, watchdog = _run_batch([case], BATCH_TIMEOUT_S, case_seconds)
        with lock:
            report.children += 1
            if watchdog:
                report.outcomes["runaway"] += 1
            elif code is None:
                report.hangs.append((case["id"], case["seed"], case["kind"]))
                report.outcomes["hang"] += 1
            elif code < 0:
                report.deaths.append(
                    (case["id"], case["seed"], case["kind"], signal.Signals(-code).name)
                )
                report.outcomes["death"] += 1
            else:
                report.outcomes.update(found.values())

    def one(chunk: list[dict]) -> None:
        while chunk:
            code, found, watchdog = _run_batch(chunk, BATCH_TIMEOUT_S, case_seconds)
            with lock:
                report.children += 1
                report.outcomes.update(found.values())
            rest = [c for c in chunk if c["id"] not in found]
            if code == 0 and not rest:
                return
            if watchdog and rest:  # the first unanswered case ran away; go on after it
                with lock:
                    report.outcomes["runaway"] += 1
                chunk = rest[1:]
                continue
            for case in rest:  # attribute the death (or the hang) to one module
                alone(case)
            return

    with ThreadPoolExecutor(jobs) as pool:
        list(pool.map(one, batches))
    report.seconds = time.monotonic() - start
    return report


# --- threads -----------------------------------------------------------------------------------


def thread_calls(found: dict[str, bytes], threads: int, calls: int) -> tuple[int, int]:
    """Loads and compiles every seed in `threads` threads at once, then calls each compiled
    module `calls` times per thread; returns (calls made, results that differ from the
    one-thread result). Raises if any call raises."""
    import aotkit

    rng = np.random.default_rng(0)
    programs = []
    for data in found.values():
        lowered = aotkit.load_module(data)
        args = [np.asarray(rng.standard_normal(s.shape) + 3 * np.ones(s.shape), s.dtype)
                for s in lowered.flat_in_specs]  # fmt: skip
        if all(len(s.shape) == 2 and s.shape[0] == s.shape[1] for s in lowered.flat_in_specs[:1]):
            args[0] = args[0] + np.eye(args[0].shape[0], dtype=args[0].dtype) * 5
        expected = [np.asarray(x) for x in np.atleast_1d(lowered.compile()(*args))]
        programs.append((data, args, expected))

    def work(_: int) -> tuple[int, int]:
        made = wrong = 0
        compiled = [(aotkit.load_module(d).compile(), a, e) for d, a, e in programs]
        for _ in range(calls):
            for c, a, e in compiled:
                out = [np.asarray(x) for x in np.atleast_1d(c(*a))]
                made += 1
                wrong += any(not np.array_equal(x, y, equal_nan=True) for x, y in zip(out, e))
        return made, wrong

    with ThreadPoolExecutor(threads) as pool:
        results = list(pool.map(work, range(threads)))
    return sum(r[0] for r in results), sum(r[1] for r in results)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", type=float, metavar="CASE_SECONDS", help=argparse.SUPPRESS)
    parser.add_argument("--mutations", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args(argv)
    if args.child is not None:
        return _child(args.child)
    found = seeds()
    report = fuzz(mutations(args.mutations, args.seed, found), args.batch, args.jobs)
    print(f"seed files: {len(found)} ({', '.join(sorted(found))})")
    print(f"mutations: {report.cases} in {report.children} child processes, {report.seconds:.0f} s")
    for outcome, n in sorted(report.outcomes.items(), key=lambda kv: -kv[1]):
        print(f"  {n:6d}  {outcome}")
    print(f"deaths: {len(report.deaths)} {report.deaths[:10]}")
    print(f"hangs (no answer, no watchdog): {len(report.hangs)} {report.hangs[:10]}")
    for case_id, detail in sorted(set(_details))[:10]:
        print(f"  case {case_id}: {detail}")
    made, wrong = thread_calls(found, args.threads, args.calls)
    print(f"threads x calls: {args.threads} x {args.calls} per seed = {made} calls, {wrong} wrong")
    return 1 if report.deaths or report.hangs or wrong else 0


if __name__ == "__main__":
    sys.exit(main())
