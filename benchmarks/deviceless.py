"""TPU executables built on a machine without a TPU, run on one: the values against the CPU's.

    python benchmarks/deviceless.py build DIR [--topology v5e:1x1]   # no TPU needed (libtpu)
    python benchmarks/deviceless.py run DIR                          # on a TPU host

`build` compiles each program for the topology through libtpu's compile-only client
(`Lowered.compile(backend="tpu", topology=...)`), saves DIR/NAME.aotx, and beside it
DIR/NAME.npz: the inputs and the CPU backend's outputs. `run` loads every artifact with
`recompile=False` (the executable as it was built, or an error), calls it, and compares its
outputs with the CPU's at aotkit.crosscheck's tolerances for the TPU (programs traced at
'default' precision at `DEFAULT_PRECISION`). It prints one row per
program: where the executable came from, the largest absolute and relative differences, and
whether every output is within the tolerance; the exit status is 1 where one is not.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from accelerator import make_step, step_args  # noqa: E402

# At 'default' a TPU multiplies float32 matrices in one bfloat16 pass (8 bits of mantissa)
# where the CPU reference keeps float32: its outputs are compared at this (rtol, atol).
DEFAULT_PRECISION = (2e-2, 2e-3)


def programs():
    """(name, function, arguments, precision) of each program."""
    import aotkit
    import aotkit.numpy as anp

    rng = np.random.default_rng(1)

    def mlp(x, w1, w2):
        return anp.tanh(x @ w1) @ w2

    def elementwise(x):
        return anp.exp(anp.sin(x)) * anp.log1p(x * x) + anp.tanh(x)

    def reduce_and_sort(x):
        return anp.sort(x, axis=-1), anp.cumsum(x, axis=0), anp.max(x, axis=1)

    f32 = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    step = step_args(2, 256, 64)
    return [
        ("mlp", mlp, (f32(64, 128), f32(128, 256) * 0.1, f32(256, 10) * 0.1), "highest"),
        ("elementwise", elementwise, (f32(1024),), "highest"),
        ("reduce_and_sort", reduce_and_sort, (f32(32, 64),), "highest"),
        ("step_default", make_step(anp, aotkit.grad), step, "default"),
        ("step_highest", make_step(anp, aotkit.grad), step, "highest"),
    ]


def build(folder: Path, topology: str) -> None:
    import aotkit

    folder.mkdir(parents=True, exist_ok=True)
    for name, fn, args, precision in programs():
        with aotkit.default_matmul_precision(precision):
            lowered = aotkit.jit(fn).lower(*args)
        compiled = lowered.compile(backend="tpu", topology=topology)
        compiled.save(folder / f"{name}.aotx")
        outs = [np.asarray(o) for o in _leaves(lowered.compile(backend="cpu")(*args))]
        np.savez(
            folder / f"{name}.npz",
            precision=np.array(precision),
            **{f"in{i}": a for i, a in enumerate(args)},
            **{f"out{i}": o for i, o in enumerate(outs)},
        )
        print(f"built {name}: {compiled!r}")


def _leaves(tree):
    from jax import tree_util

    return tree_util.tree_leaves(tree)


def run(folder: Path) -> int:
    import aotkit
    from aotkit import crosscheck

    failed = 0
    print("| program | executable from | max abs diff | max rel diff | within TPU tolerance |")
    print("| --- | --- | --- | --- | --- |")
    for path in sorted(folder.glob("*.aotx")):
        with np.load(path.with_suffix(".npz")) as data:
            ins = [data[k] for k in sorted((k for k in data if k.startswith("in")), key=_index)]
            want = [data[k] for k in sorted((k for k in data if k.startswith("out")), key=_index)]
            precision = str(data["precision"])
        compiled = aotkit.load(path, recompile=False)
        got = [np.asarray(o) for o in _leaves(compiled(*ins))]
        abs_diff = rel_diff = 0.0
        ok = len(got) == len(want)
        for g, w in zip(got, want, strict=False):
            ok &= g.dtype == w.dtype and g.shape == w.shape
            d = np.abs(g.astype(np.float64) - w)
            abs_diff = max(abs_diff, float(d.max(initial=0)))
            rel_diff = max(rel_diff, float((d / np.maximum(np.abs(w), 1e-30)).max(initial=0)))
            rtol, atol = crosscheck.tolerance(w.dtype, "tpu")
            if precision == "default":
                rtol, atol = DEFAULT_PRECISION
            ok &= bool(np.allclose(g, w, rtol=rtol, atol=atol))
        failed += not ok
        print(f"| {path.stem} | {compiled.origin} | {abs_diff:.2e} | {rel_diff:.2e} | {ok} |")
    return 1 if failed else 0


def _index(key: str) -> int:
    return int(key[2:] if key.startswith("in") else key[3:])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build")
    b.add_argument("folder", type=Path)
    b.add_argument("--topology", default="v5e:1x1")
    r = sub.add_parser("run")
    r.add_argument("folder", type=Path)
    args = parser.parse_args()
    if args.command == "build":
        build(args.folder, args.topology)
        return 0
    return run(args.folder)


if __name__ == "__main__":
    sys.exit(main())
