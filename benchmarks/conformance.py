"""Conformance on StableHLO test modules: raw IREE against aotkit's iree backend (and cpu).

    python benchmarks/conformance.py generate DIR [--count 300] [--seed 0]
    python benchmarks/conformance.py run DIR [DIR...] [--runners raw-iree aotkit-iree aotkit-cpu]

A case is a StableHLO module whose `@main` takes no arguments (the inputs are constants),
in one of two forms:

- StableHLO's own testdata (`stablehlo/testdata/*.mlir` in openxla/stablehlo): `@main`
  ends in `stablehlo.custom_call @check.*(%result, %expected)`. The runner rewrites `@main`
  to return the pairs instead, and compares them in Python.
- `generate` output: JAX's primitive test harnesses (the ones StableHLO's testdata was made
  from; `jax._src.internal_test_util.test_harnesses`, which needs `pip install absl-py`),
  a seeded sample of `--count` taken round-robin over the primitives, each lowered by JAX
  with its random inputs as constants (`NAME.mlir`), with XLA CPU's results as the
  expected values (`NAME.npz`).

Runners: `raw-iree` is iree-compile (float64 and int64 kept, llvm-cpu for this CPU, as
aotkit compiles) and iree.runtime on the text as written; `aotkit-iree` and `aotkit-cpu`
are `aotkit.load_module(path).compile(backend)()`. A case passes when every output has the
expected dtype and shape, integers and booleans are equal, and floats agree within
(rtol, atol) = 1e-2 for 16-bit floats, 1e-4 for 32-bit, 1e-9 for 64-bit, with NaN and
infinities in the same places. Each runner works in a child process that is restarted
when a case kills it (counted as a crash). Prints the pass counts, then every case raw
IREE passes and aotkit's iree backend does not ("lost"), and the reverse ("gained").
Generated cases live wherever DIR is; keep them out of the repository (`.conformance/` is
ignored).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

RUNNERS = ("raw-iree", "aotkit-iree", "aotkit-cpu")
TOLERANCE = {2: 1e-2, 4: 1e-4, 8: 1e-9}  # by the float's width in bytes
_CHECK = re.compile(
    r"^\s*(%[\w#:]+) = stablehlo\.custom_call @check\.\w+\(([^)]*)\)[^:]*: \(([^)]*)\) -> .*$"
)


# --- generate ------------------------------------------------------------------------------------


def generate(directory: Path, count: int, seed: int) -> None:
    import jax

    jax.config.update("jax_enable_x64", True)
    from jax._src.internal_test_util import test_harnesses

    rng = np.random.default_rng(seed)
    groups: dict[str, list] = {}
    for h in test_harnesses.all_harnesses:
        if h.filter("cpu"):
            groups.setdefault(h.group_name, []).append(h)
    # Round-robin over the primitives, each shuffled: scatter alone has half the harnesses.
    queues = [list(rng.permutation(len(g))) for g in groups.values()]
    order = []
    while any(queues):
        for g, queue in zip(groups.values(), queues):
            if queue:
                order.append(g[queue.pop()])
    directory.mkdir(parents=True, exist_ok=True)
    made = 0
    for h in order:
        if made == count:
            break
        name = f"{made:03d}_" + re.sub(r"[^A-Za-z0-9_]+", "_", h.fullname)[:100]
        try:
            args = h.dyn_args_maker(np.random.RandomState(seed))
            fn = jax.jit(lambda args=args, h=h: h.dyn_fun(*args))
            text = fn.lower().as_text()
            outs = [np.asarray(x) for x in jax.tree_util.tree_leaves(fn())]
        except Exception as e:  # a harness JAX itself cannot run here is not a case
            print(f"skip {name}: {type(e).__name__}: {str(e)[:100]}", file=sys.stderr)
            continue
        (directory / f"{name}.mlir").write_text(text)
        np.savez(directory / f"{name}.npz", *outs)
        made += 1
    print(f"wrote {made} cases to {directory}")


# --- cases ---------------------------------------------------------------------------------------


def load_case(path: Path) -> tuple[str, list[np.ndarray] | None]:
    """(module text whose @main returns the outputs to compare, expected outputs or None).

    None: the module returns (result, expected) pairs itself (StableHLO testdata form).
    """
    text = path.read_text()
    expected = path.with_suffix(".npz")
    if expected.exists():
        with np.load(expected) as data:
            return text, [_bfloat16(data[f"arr_{i}"]) for i in range(len(data.files))]
    return _return_checked_pairs(text), None


def _bfloat16(x: np.ndarray) -> np.ndarray:
    """NumPy saves ml_dtypes' bfloat16 as 2-byte void; no other 2-byte void is written."""
    if x.dtype.kind == "V" and x.dtype.itemsize == 2:
        import ml_dtypes

        return x.view(ml_dtypes.bfloat16)
    return x


def _return_checked_pairs(text: str) -> str:
    """Rewrites @main's `check.*` custom calls into returning (result, expected) pairs."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if "func.func public @main" in line)
    end = next(i for i in range(start, len(lines)) if lines[i].strip().startswith("return"))
    values, types, kept = [], [], []
    for line in lines[start + 1 : end]:
        match = _CHECK.match(line)
        if match:
            values += [v.strip() for v in match.group(2).split(",")]
            types += _split_types(match.group(3))
        else:
            kept.append(line)
    if not values:
        raise ValueError("no check.* custom call in @main")
    indent = lines[end][: len(lines[end]) - len(lines[end].lstrip())]
    head = re.sub(r"\) -> .*\{$", f") -> ({', '.join(types)}) {{", lines[start])
    body = [*kept, f"{indent}return {', '.join(values)} : {', '.join(types)}"]
    return "\n".join([*lines[:start], head, *body, *lines[end + 1 :]]) + "\n"


def _split_types(text: str) -> list[str]:
    types, depth, current = [], 0, ""
    for ch in text:
        depth += ch == "<"
        depth -= ch == ">"
        if ch == "," and depth == 0:
            types.append(current.strip())
            current = ""
        else:
            current += ch
    return types + [current.strip()] if current.strip() else types


def compare(outs: list[np.ndarray], expected: list[np.ndarray] | None) -> str | None:
    """None if the outputs pass, else why not."""
    if expected is None:
        if len(outs) % 2:
            return f"odd number of outputs ({len(outs)}) for (result, expected) pairs"
        pairs = list(zip(outs[0::2], outs[1::2]))
    else:
        if len(outs) != len(expected):
            return f"{len(outs)} outputs, expected {len(expected)}"
        pairs = list(zip(outs, expected))
    for i, (got, want) in enumerate(pairs):
        got, want = np.asarray(got), np.asarray(want)
        if got.shape != want.shape or got.dtype != want.dtype:
            given, wanted = f"{got.dtype}{list(got.shape)}", f"{want.dtype}{list(want.shape)}"
            return f"output {i}: {given} instead of {wanted}"
        if want.dtype.kind in "biu":
            if not np.array_equal(got, want):
                return f"output {i}: {int(np.sum(got != want))} of {want.size} values differ"
            continue
        width = want.dtype.itemsize // (2 if want.dtype.kind == "c" else 1)
        tol = TOLERANCE[width]
        g = got.astype(np.complex128 if want.dtype.kind == "c" else np.float64)
        w = want.astype(g.dtype)
        if not np.allclose(g, w, rtol=tol, atol=tol, equal_nan=True):
            bad = ~np.isclose(g, w, rtol=tol, atol=tol, equal_nan=True)
            return f"output {i}: {int(bad.sum())} of {want.size} values beyond {tol}"
    return None


# --- runners (each in a child process) -----------------------------------------------------------


_KEEP_ALIVE: list = []  # IREE runtime objects must outlive what was made from them


def _raw_iree(text: str) -> list[np.ndarray]:
    import iree.runtime as rt

    from aotkit.backends import iree

    if not _KEEP_ALIVE:
        instance = rt.VmInstance()
        device = rt.get_driver("local-task").create_default_device()
        _KEEP_ALIVE.extend(
            [iree.create(), instance, device, rt.create_hal_module(instance, device)]
        )
    backend, instance, device, hal = _KEEP_ALIVE[:4]
    flags = backend._flags(None, iree.TARGETS["llvm-cpu"], {})
    vmfb, _ = backend._run_compiler(text.encode(), flags, "case")
    module = rt.VmModule.copy_buffer(instance, vmfb)
    context = rt.VmContext(instance, modules=[hal, module])
    _KEEP_ALIVE.extend([module, context])
    results = rt.VmVariantList(16)
    context.invoke(module.lookup_function("main"), rt.VmVariantList(0), results)
    outs = []
    for i in range(len(results)):
        view = results.get_as_object(i, rt.HalBufferView)
        host = rt.DeviceArray(device, view, implicit_host_transfer=True).to_host()
        outs.append(np.array(host, copy=True))
    _KEEP_ALIVE.append(results)
    return outs


def _aotkit(backend: str):
    def run(text: str) -> list[np.ndarray]:
        import aotkit

        compiled = aotkit.load_module(text.encode()).compile(backend)
        return [np.asarray(x) for x in compiled.call_flat([])]

    return run


def worker(runner: str) -> None:
    """Reads case paths from stdin; writes one JSON line per case to stdout."""
    run = _raw_iree if runner == "raw-iree" else _aotkit(runner.split("-", 1)[1])
    for line in sys.stdin:
        path = Path(line.strip())
        start = time.perf_counter()
        try:
            text, expected = load_case(path)
            failure = compare(run(text), expected)
            status = "pass" if failure is None else "wrong"
        except Exception as e:
            status, failure = "fail", f"{type(e).__name__}: {str(e).strip()[:300]}"
        result = {"case": path.stem, "status": status, "why": failure}
        result["seconds"] = round(time.perf_counter() - start, 3)
        print(json.dumps(result), flush=True)


def run_all(paths: list[Path], runner: str, timeout: float) -> dict[str, dict]:
    """Results by case name; a child that dies or hangs on a case is restarted after it."""
    results: dict[str, dict] = {}
    pending = list(paths)
    while pending:
        child = subprocess.Popen(
            [sys.executable, __file__, "worker", runner],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        while pending:
            path = pending[0]
            child.stdin.write(f"{path}\n")
            child.stdin.flush()
            line = _read_line(child, timeout)
            pending.pop(0)
            if line is None:
                child.kill()
                child.wait()
                why = f"killed the process ({_exit_text(child.returncode)}) or took > {timeout} s"
                results[path.stem] = {"case": path.stem, "status": "crash", "why": why}
                break
            result = json.loads(line)
            results[result["case"]] = result
        else:
            child.stdin.close()
            child.wait()
    return results


def _read_line(child: subprocess.Popen, timeout: float) -> str | None:
    import selectors

    selector = selectors.DefaultSelector()
    selector.register(child.stdout, selectors.EVENT_READ)
    if not selector.select(timeout):
        return None
    line = child.stdout.readline()
    return line or None


def _exit_text(code: int | None) -> str:
    if code is not None and code < 0:
        import signal

        return signal.Signals(-code).name
    return f"exit status {code}"


def report(results: dict[str, dict[str, dict]], names: list[str]) -> None:
    runners = list(results)
    print(f"{len(names)} cases")
    header = f"{'runner':<12} {'pass':>6} {'wrong':>6} {'fail':>6} {'crash':>6}"
    print(header)
    print("-" * len(header))
    for runner in runners:
        statuses = [results[runner][n]["status"] for n in names]
        counts = [statuses.count(s) for s in ("pass", "wrong", "fail", "crash")]
        print(f"{runner:<12} " + " ".join(f"{c:>6}" for c in counts))
    if "raw-iree" in results and "aotkit-iree" in results:
        raw, ours = results["raw-iree"], results["aotkit-iree"]
        lost = [n for n in names if raw[n]["status"] == "pass" != ours[n]["status"]]
        gained = [n for n in names if ours[n]["status"] == "pass" != raw[n]["status"]]
        print(f"\nlost by aotkit's iree backend (raw IREE passes): {len(lost)}")
        for n in lost:
            print(f"  {n}: {ours[n]['status']}: {ours[n]['why']}")
        print(f"gained by aotkit's iree backend (raw IREE does not pass): {len(gained)}")
        for n in gained:
            print(f"  {n}: raw IREE {raw[n]['status']}: {raw[n]['why']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    g = sub.add_parser("generate", help="write a seeded sample of JAX's harnesses as cases")
    g.add_argument("directory", type=Path)
    g.add_argument("--count", type=int, default=300)
    g.add_argument("--seed", type=int, default=0)
    r = sub.add_parser("run", help="run every case of the directories on each runner")
    r.add_argument("directories", type=Path, nargs="+")
    r.add_argument("--runners", nargs="+", choices=RUNNERS, default=list(RUNNERS))
    r.add_argument("--timeout", type=float, default=300.0, help="seconds per case")
    r.add_argument("--json", type=Path, help="also write every result here")
    w = sub.add_parser("worker")
    w.add_argument("runner", choices=RUNNERS)
    args = parser.parse_args()
    if args.command == "generate":
        generate(args.directory, args.count, args.seed)
    elif args.command == "worker":
        worker(args.runner)
    else:
        paths = sorted(p for d in args.directories for p in d.glob("*.mlir"))
        results = {runner: run_all(paths, runner, args.timeout) for runner in args.runners}
        report(results, [p.stem for p in paths])
        if args.json:
            args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    main()
