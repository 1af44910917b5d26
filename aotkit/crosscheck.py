"""The cross-backend check: one program, every backend, the same inputs, one table.

`aotkit.check(fn, *specs_or_values)` lowers `fn` once, compiles the module on every
available backend (cpu, interpreter, iree, plugins), runs each on the same inputs (seeded
random data for each spec; values as given) and compares every output with the reference
backend's (cpu): dtype and shape exactly, integers and booleans exactly, floats within a
tolerance per platform and dtype (`tolerance`: accelerators compute transcendental functions
with their own approximations), NaN where the reference has NaN, the same infinities,
reporting the largest absolute and ULP difference (and, for a disagreement, the tolerance).
A backend that cannot compile or run the module is reported with its reason and does not
count as a disagreement; `CheckReport.ok` is False when some backend computed a different
answer. `aotkit check` is the CLI form.

Not a stage: it only uses `lower`, `Lowered.compile` and `Compiled.call_flat`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
from jax import tree_util

import aotkit.backends
from aotkit import dtypes, dumps
from aotkit.api import lower
from aotkit.errors import CompileError
from aotkit.specs import ShapeDtype
from aotkit.symbolic.signatures import SymbolicSignature, is_symbolic

# (rtol, atol) by result dtype: XLA, the interpreter and IREE each have their own
# transcendental approximations and summation orders.
TOLERANCES: dict[np.dtype, tuple[float, float]] = {
    np.dtype(np.float16): (2e-3, 1e-3),
    dtypes.bfloat16: (2e-2, 1e-2),
    np.dtype(np.float32): (2e-5, 1e-6),
    np.dtype(np.float64): (1e-12, 1e-14),
    np.dtype(np.complex64): (2e-5, 1e-6),
    np.dtype(np.complex128): (1e-12, 1e-14),
}
# (rtol, atol) by platform and dtype where a platform's arithmetic is looser than
# `TOLERANCES` (docs/backends.md has the table). On a TPU v5e, float32 tanh and exp were
# measured 4.2e-6 absolute (1,750 ULP) from cpu's, and compositions further:
# `exp(sin(x)) * log1p(x * x) + tanh(x)` 2.0e-4 absolute (2.6e-4 relative), `tanh(x @ w1) @ w2`
# at 'highest' 5.7e-5 absolute on results near zero, each from the same executable the chip
# compiles itself (bit for bit). GPUs' fast transcendental functions are a few ULP apart (not
# measured: no GPU to run on).
PLATFORM_TOLERANCES: dict[str, dict[np.dtype, tuple[float, float]]] = {
    "tpu": {
        np.dtype(np.float32): (5e-4, 1e-4),
        np.dtype(np.complex64): (5e-4, 1e-4),
    },
    **dict.fromkeys(
        ("cuda", "rocm"),
        {
            np.dtype(np.float32): (5e-5, 5e-6),
            np.dtype(np.complex64): (5e-5, 5e-6),
        },
    ),
}


def tolerance(dtype, *platforms: str) -> tuple[float, float]:
    """The (rtol, atol) of floats of `dtype` computed on `platforms` (the reference's and
    the checked backend's): the loosest of their entries in `PLATFORM_TOLERANCES`, else
    `TOLERANCES`."""
    dtype = np.dtype(dtype)
    found = [PLATFORM_TOLERANCES.get(p, {}).get(dtype, TOLERANCES[dtype]) for p in platforms]
    found = found or [TOLERANCES[dtype]]
    return max(r for r, _ in found), max(a for _, a in found)


def random_input(rng: np.random.Generator, spec: ShapeDtype) -> np.ndarray:
    """Seeded data for one argument: standard normal floats, integers in [-10, 10], coin flips."""
    dtype, shape = spec.dtype, spec.shape
    if dtypes.is_bool(dtype):
        return rng.random(shape) < 0.5
    if dtypes.is_integer(dtype):
        info = np.iinfo(dtype)
        lo, hi = max(int(info.min), -10), min(int(info.max), 10)
        return np.asarray(rng.integers(lo, hi, size=shape, endpoint=True), dtype=dtype)
    if dtypes.is_complex(dtype):
        return np.asarray(rng.standard_normal(shape) + 1j * rng.standard_normal(shape), dtype)
    return np.asarray(rng.standard_normal(shape), dtype=dtype)


@dataclass(frozen=True)
class Comparison:
    """One output of one backend against the reference's."""

    backend: str
    output: str
    spec: str
    max_abs: float | None
    max_ulp: float | None
    ok: bool
    note: str = ""
    # The symbol values of the call, for a program with symbolic shapes ("b = 8"); "".
    sizes: str = ""


@dataclass
class CheckReport:
    """What `check` found: one row per backend and output; `ok` unless a backend disagreed."""

    name: str
    in_specs: tuple[ShapeDtype, ...]
    reference: str
    seed: int
    rows: list[Comparison] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(row.ok for row in self.rows)

    @property
    def disagreeing(self) -> list[str]:
        """Backends with at least one output beyond tolerance, in table order."""
        return list(dict.fromkeys(row.backend for row in self.rows if not row.ok))

    def table(self) -> str:
        sized = any(row.sizes for row in self.rows)
        header = ("BACKEND", "OUTPUT", "SPEC", "MAX ABS DIFF", "MAX ULP DIFF", "RESULT")
        if sized:
            header = ("SIZES", *header)
        lines = [header]
        for row in self.rows:
            cells = (
                row.backend,
                row.output,
                row.spec,
                _number(row.max_abs),
                _number(row.max_ulp),
                row.note or ("ok" if row.ok else "DIFFERS"),
            )
            lines.append((row.sizes, *cells) if sized else cells)
        widths = [max(len(line[i]) for line in lines) for i in range(len(header) - 1)]
        text = [
            f"{self.name}({', '.join(map(str, self.in_specs))}), seed {self.seed}, "
            f"reference {self.reference}"
        ]
        for line in lines:
            cells = [c.ljust(w) for c, w in zip(line, widths)] + [line[-1]]
            text.append("  ".join(cells).rstrip())
        return "\n".join(text) + "\n"

    def __str__(self) -> str:
        return self.table()


def _number(x: float | None) -> str:
    if x is None:
        return "-"
    if x == 0:
        return "0"
    if math.isinf(x):
        return "inf"
    return f"{x:.3g}"


def check(
    fn: Callable,
    *args,
    backends: Sequence[str] | None = None,
    reference: str = "cpu",
    seed: int = 0,
    rtol: float | None = None,
    atol: float | None = None,
    frontend: str = "aotkit",
    **kwargs,
) -> CheckReport:
    """Runs `fn` on every backend (default: all of `aotkit.backends.available()`) and
    compares each output with `reference`'s.

    Arguments are values or `aotkit.ShapeDtype` specs; each spec becomes seeded random data
    (`seed`). `rtol`/`atol` override the tolerances of floats (`tolerance`: per platform
    and dtype).
    """

    lowered = lower(fn, *args, frontend=frontend, **kwargs)
    leaves = tree_util.tree_leaves((args, kwargs))
    return check_lowered(
        lowered,
        leaves if any(not isinstance(x, ShapeDtype) for x in leaves) else None,
        backends=backends,
        reference=reference,
        seed=seed,
        rtol=rtol,
        atol=atol,
    )


def check_lowered(
    lowered,
    leaves: Sequence | None = None,
    *,
    backends: Sequence[str] | None = None,
    reference: str = "cpu",
    seed: int = 0,
    rtol: float | None = None,
    atol: float | None = None,
) -> CheckReport:
    """`check` for a `Lowered` (a traced function or a module file); `leaves` are its flat
    arguments, a spec or None taking seeded random data."""
    where = f"check({lowered.name})"
    for name, value in (("rtol", rtol), ("atol", atol)):
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0
        ):
            raise ValueError(f"{where}: {name} must be a number >= 0, got {value!r}")
    names = _backend_names(where, backends, reference, aotkit.backends)
    specs = lowered.flat_in_specs
    if is_symbolic(specs):
        return _check_symbolic(lowered, leaves, names, reference, seed, rtol, atol, where)
    if leaves is None:
        leaves = [None] * len(specs)
    if len(leaves) != len(specs):
        raise ValueError(
            f"{where}: {len(leaves)} argument(s) for {len(specs)} argument slot(s) "
            f"({', '.join(map(str, specs))}); give one value or spec per argument"
        )
    rng = np.random.default_rng(seed)
    inputs = [
        random_input(rng, s) if x is None or isinstance(x, ShapeDtype) else x
        for x, s in zip(leaves, specs)
    ]
    report = CheckReport(lowered.name, tuple(specs), reference, seed)
    out_paths = _output_paths(lowered.out_tree)
    out_specs = [str(s) for s in lowered.flat_out_specs]
    want = _run(lowered, reference, inputs, raise_errors=True)
    platforms = (aotkit.backends.get(reference).platform,)
    for path, spec in zip(out_paths, out_specs):
        report.rows.append(Comparison(reference, path, spec, None, None, True, "reference"))
    for name in names:
        if name == reference:
            continue
        got = _run(lowered, name, inputs, raise_errors=False)
        if isinstance(got, str):
            report.rows.append(Comparison(name, "-", "-", None, None, True, got))
            continue
        pair = (*platforms, aotkit.backends.get(name).platform)
        for path, spec, w, g in zip(out_paths, out_specs, want, got):
            report.rows.append(_compare(name, path, spec, w, g, rtol, atol, pair))
    return report


# Sizes tried for each symbol of a program with symbolic shapes: the edge sizes 0 and 1
# first, then sizes that are neither small powers of two nor alike.
SAMPLE_SIZES = (0, 1, 2, 3, 5, 8, 16, 17, 32, 64)
SAMPLES = 4


def sample_sizes(shapes, count: int = SAMPLES) -> list[dict[str, int]]:
    """Up to `count` sets of symbol values that meet the constraints of `shapes` (an
    `aotkit.symbolic.signatures.SymbolicSignature`): the smallest sizes allowed (0 and 1
    where they are), then larger ones, the symbols told apart where there are several."""
    found: list[dict[str, int]] = []

    def take(values: dict[str, int]) -> None:
        if values in found or len(found) >= count:
            return
        try:
            shapes.check_values(values, "check")
        except ValueError:
            return
        found.append(values)

    symbols = shapes.symbols
    for size in SAMPLE_SIZES[:2]:
        take(dict.fromkeys(symbols, size))
    for i, size in enumerate(SAMPLE_SIZES[2:]):
        # told apart: each symbol one step further along the list
        take(
            {s: SAMPLE_SIZES[min(2 + i + k, len(SAMPLE_SIZES) - 1)] for k, s in enumerate(symbols)}
        )
        take(dict.fromkeys(symbols, size))
    return found


def _check_symbolic(lowered, leaves, names, reference, seed, rtol, atol, where) -> CheckReport:
    """`check_lowered` for a program with symbolic shapes: each backend compiles it once and
    runs it on every sampled set of sizes (`sample_sizes`), each with its seeded inputs."""
    if leaves is not None and any(x is not None for x in leaves):
        raise ValueError(
            f"{where}: the program has symbolic shapes; check samples their sizes (0 and 1 "
            "among them) with random inputs, so give no inputs"
        )
    shapes = SymbolicSignature.of(lowered.flat_in_specs, lowered.flat_out_specs, where=where)
    samples = sample_sizes(shapes)
    if not samples:
        raise ValueError(
            f"{where}: no sizes up to {SAMPLE_SIZES[-1]} meet the constraints "
            f"({'; '.join(shapes.constraints)}); check the program with concrete inputs"
        )
    report = CheckReport(lowered.name, tuple(lowered.flat_in_specs), reference, seed)
    out_paths = _output_paths(lowered.out_tree)
    compiled = {}
    for name in names:
        try:
            compiled[name] = lowered.compile(name)
        except (CompileError, ValueError) as e:
            if name == reference:
                raise
            compiled[name] = f"not compiled: {_first_line(e)}"
    rng = np.random.default_rng(seed)
    platform = {n: c.backend.platform for n, c in compiled.items() if not isinstance(c, str)}
    for values in samples:
        sizes = shapes.text(values)
        in_specs, out_specs = shapes.concrete(values)
        inputs = [random_input(rng, s) for s in in_specs]
        want = _call(compiled[reference], inputs, raise_errors=True)
        for path, spec in zip(out_paths, out_specs):
            report.rows.append(
                Comparison(reference, path, str(spec), None, None, True, "reference", sizes)
            )
        for name in names:
            if name == reference:
                continue
            got = _call(compiled[name], inputs, raise_errors=False)
            if isinstance(got, str):
                report.rows.append(Comparison(name, "-", "-", None, None, True, got, sizes))
                continue
            pair = (platform[reference], platform[name])
            for path, spec, w, g in zip(out_paths, out_specs, want, got):
                row = _compare(name, path, str(spec), w, g, rtol, atol, pair)
                report.rows.append(dataclasses.replace(row, sizes=sizes))
    return report


def _call(compiled, inputs: list, *, raise_errors: bool):
    if isinstance(compiled, str):
        return compiled
    try:
        return [np.asarray(x) for x in compiled.call_flat([np.copy(x) for x in inputs])]
    except (CompileError, RuntimeError, ValueError, TypeError) as e:
        if raise_errors:
            raise
        return f"failed to run: {_first_line(e)}"


def _backend_names(where: str, backends, reference: str, registry) -> list[str]:
    if backends is None:
        names = [info.name for info in registry.available()]
    elif isinstance(backends, str) or not all(isinstance(b, str) for b in backends):
        raise TypeError(
            f"{where}: backends must be a list of backend names such as ['cpu', 'iree'], got "
            f"{backends!r}"
        )
    else:
        names = list(dict.fromkeys(backends))
        unknown = [n for n in names if not registry.known(n)]
        if unknown:  # a typo must not pass as a backend that merely did not start
            raise ValueError(
                f"{where}: unknown backend(s) {', '.join(map(repr, unknown))}; known here: "
                f"{', '.join(info.name for info in registry.available())} (and the PJRT "
                "plugins cuda, rocm, tpu once installed)"
            )
    if reference not in names:
        names.insert(0, reference)
    return [reference] + [n for n in names if n != reference]


def _run(lowered, backend: str, inputs: list, *, raise_errors: bool):
    """The backend's flat outputs as NumPy arrays, or (unless `raise_errors`) why there are none."""

    try:
        compiled = lowered.compile(backend)
    except CompileError as e:
        if raise_errors:
            raise
        return f"not compiled: {_first_line(e)}"
    except ValueError as e:
        if raise_errors:
            raise
        return f"not available: {_first_line(e)}"
    try:
        return [np.asarray(x) for x in compiled.call_flat([np.copy(x) for x in inputs])]
    except (RuntimeError, ValueError, TypeError) as e:
        if raise_errors:
            raise
        return f"failed to run: {_first_line(e)}"


def _first_line(e: BaseException) -> str:

    text = str(e).strip().replace("; " + dumps.HOW_TO_DUMP, "")
    return text.splitlines()[0] if text else type(e).__name__


def _output_paths(out_tree) -> list[str]:
    dummy = tree_util.tree_unflatten(out_tree, list(range(out_tree.num_leaves)))
    paths = [tree_util.keystr(p) for p, _ in tree_util.tree_flatten_with_path(dummy)[0]]
    return ["out" + p for p in paths]


def _compare(
    backend, path, spec, want: np.ndarray, got: np.ndarray, rtol, atol, platforms=()
) -> Comparison:
    def row(max_abs, max_ulp, ok, note=""):
        return Comparison(backend, path, spec, max_abs, max_ulp, ok, note)

    if got.dtype != want.dtype or got.shape != want.shape:
        return row(
            None,
            None,
            False,
            f"DIFFERS: {ShapeDtype(got.shape, got.dtype)} instead of {spec}",
        )
    if want.size == 0:
        return row(0.0, 0.0, True)
    if dtypes.is_bool(want.dtype) or dtypes.is_integer(want.dtype):
        diff = np.abs(want.astype(object) - got.astype(object)) if want.size else [0]
        worst = float(max(diff.flat))
        return row(worst, worst, worst == 0)
    default_rtol, default_atol = tolerance(want.dtype, *platforms)
    rtol = default_rtol if rtol is None else rtol
    atol = default_atol if atol is None else atol
    parts = (
        [(want.real, got.real), (want.imag, got.imag)]
        if dtypes.is_complex(want.dtype)
        else [(want, got)]
    )
    ok, max_abs, max_ulp = True, 0.0, 0.0
    for w, g in parts:
        w64, g64 = w.astype(np.float64), g.astype(np.float64)
        both_nan = np.isnan(w64) & np.isnan(g64)
        same = (w64 == g64) | both_nan
        finite = np.isfinite(w64) & np.isfinite(g64)
        diff = np.abs(w64 - g64, where=finite, out=np.zeros_like(w64))
        ok &= bool(np.all(same | (finite & (diff <= atol + rtol * np.abs(w64)))))
        max_abs = max(max_abs, float(diff.max()), 0.0 if np.all(same | finite) else math.inf)
        if np.any(np.isnan(w64) != np.isnan(g64)):
            max_ulp = math.inf
        else:
            max_ulp = max(max_ulp, _max_ulp(w[~both_nan], g[~both_nan]))
    return row(max_abs, max_ulp, ok, "" if ok else f"DIFFERS (rtol {rtol:g}, atol {atol:g})")


def _max_ulp(want: np.ndarray, got: np.ndarray) -> float:
    """The largest distance in units in the last place (representable values between)."""
    if want.size == 0:
        return 0.0
    signed = np.dtype(f"i{want.dtype.itemsize}")
    lowest = np.iinfo(signed).min

    def ordered(x):
        bits = np.ascontiguousarray(x).view(signed)
        # Negative floats count down from the sign bit, so -0.0 and +0.0 are one value.
        ints = np.where(bits < 0, lowest - bits, bits)
        return ints.astype(object) if signed.itemsize == 8 else ints.astype(np.int64)

    return float(np.max(np.abs(ordered(want) - ordered(got))))
