"""Helpers for the symbolic tracer's tests (issue 25, part A): trace once with symbolic
specs, refine the dynamic module to each concrete size with StableHLO's own passes, run it
on cpu and the interpreter, and compare with the same program traced at that fixed shape.

The refinement here is the passes alone (`stablehlo-refine-arguments`,
`stablehlo-refine-shapes`, `stablehlo-canonicalize-dynamism`, `canonicalize`), independent
of how `Lowered.compile` specializes (aotkit/symbolic/specialize.py), so these tests check the
module the tracer makes.
"""

from __future__ import annotations

import functools

import numpy as np
from jax import tree_util
from jaxlib.mlir import ir, passmanager

import aotkit
from aotkit import _context, dtypes
from aotkit.symbolic import algebra
from tests import lane
from tests.helpers import assert_matches

# The sizes each symbol takes: 0 and 1 too, which one symbolic program must serve.
SIZES = (0, 1, 2, 7, 64)
BACKENDS = ("cpu", "interpreter")
INTERPRETER_ELEMENTS = 1024


def spec(text: str, scope: algebra.SymbolicScope | None = None) -> aotkit.ShapeDtype:
    """`f32[b,4]` in `scope` (default: no constraints)."""
    name, dims = text.split("[", 1)
    return aotkit.ShapeDtype(algebra.symbolic_shape(dims[:-1], scope=scope), name)


def concrete(specs, values: dict[str, int]) -> list[aotkit.ShapeDtype]:
    return [aotkit.ShapeDtype(algebra.evaluate_shape(s.shape, values), s.dtype) for s in specs]


@functools.cache
def _refining_context() -> _context.LoweringContext:
    return _context.LoweringContext()


def refine(lowered, in_specs) -> str:
    """The text of `lowered`'s module refined to the static `in_specs`."""
    with _refining_context(), ir.Location.unknown():
        module = ir.Module.parse(lowered.as_text())
        types = ",".join(str(dtypes.tensor_type(s.shape, s.dtype)) for s in in_specs)
        pipeline = (
            f"builtin.module(stablehlo-refine-arguments{{types='{types}'}},"
            "stablehlo-refine-shapes,func.func(stablehlo-canonicalize-dynamism),canonicalize)"
        )
        passmanager.PassManager.parse(pipeline).run(module.operation)
        text = str(module)
    assert "?" not in text.split("func.func", 1)[1].split("{", 1)[0], text
    return text


def inputs(specs, values: dict[str, int], seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = []
    for s in concrete(specs, values):
        if s.dtype == np.bool_:
            out.append(rng.random(s.shape) < 0.5)
        elif dtypes.is_integer(s.dtype):
            out.append(rng.integers(0, 5, s.shape).astype(s.dtype))
        else:
            out.append(rng.standard_normal(s.shape).astype(s.dtype))
    return out


def _compile(lowered, backend: str):
    # XLA's backend optimizations take most of a small program's compile time and change
    # no value these tests compare.
    options = CPU_OPTIONS if backend == "cpu" else None
    return lowered.compile(backend=backend, options=options)


CPU_OPTIONS = {"xla_backend_optimization_level": 0}


@functools.cache
def _loaded(text: str):
    return aotkit.load_module(text.encode())


def check(fn, specs, *, sizes=SIZES, symbol: str = "b", values=None, make_inputs=None, **tol):
    """`fn` traced for `specs` (symbolic) equals `fn` traced at each size, on each backend.

    `values(n)` gives the symbols' values for size n (default: {symbol: n});
    `make_inputs(values)` the arguments (default: random arrays of the specs' shapes)."""
    lowered = aotkit.jit(fn).lower(*specs)
    assert "?" in lowered.as_text(), "the module is not dynamic"
    # The lane's accelerator (tests/lane.py) runs the first and last sizes (the smallest,
    # often empty, and the largest): a chip's compile takes seconds, and cpu runs them all.
    on_lane = {sizes[0], sizes[-1]}
    for n in sizes:
        vals = values(n) if values is not None else {symbol: n}
        args = make_inputs(vals) if make_inputs is not None else inputs(specs, vals)
        # The interpreter (the golden backend) is slow: it runs the small sizes, where it also
        # runs the fixed-shape program (XLA's compiles are most of these tests' time).
        small = sum(np.size(a) for a in args) <= INTERPRETER_ELEMENTS
        reference = "interpreter" if small else "cpu"
        want = _compile(aotkit.jit(fn).lower(*args), reference)(*args)
        want = tree_util.tree_map(np.asarray, want)
        text = refine(lowered, concrete(specs, vals))
        lanes = lane.running() if n in on_lane else ()
        for backend in (*(BACKENDS if small else BACKENDS[:1]), *lanes):
            got = _compile(_loaded(text), backend)(*args)
            got_leaves = [np.asarray(g) for g in tree_util.tree_leaves(got)]
            want_leaves = tree_util.tree_leaves(want)
            assert len(got_leaves) == len(want_leaves)
            for g, w in zip(got_leaves, want_leaves, strict=True):
                assert_matches(g, w, f"{backend}, {vals}", backend=backend, **tol)
    return lowered


class Case:
    """One symbolic program: `fn` on `specs` (texts such as "f32[b,4]") under `constraints`,
    checked at `sizes` of `symbol` (or at `values(n)` for several symbols)."""

    def __init__(self, fn, *specs, constraints=(), sizes=SIZES, symbol="b", values=None, **tol):
        self.fn = fn
        self.specs = specs
        self.constraints = constraints
        self.sizes = sizes
        self.symbol = symbol
        self.values = values
        self.tol = tol

    def run(self):
        scope = algebra.SymbolicScope(self.constraints) if self.constraints else None
        specs = [spec(s, scope) for s in self.specs]
        return check(
            self.fn,
            specs,
            sizes=self.sizes,
            symbol=self.symbol,
            values=self.values,
            **self.tol,
        )
