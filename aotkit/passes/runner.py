"""Running a pass pipeline over a module, with per-pass dumps and timing.

The stages (`Traced.lower`, aotkit/api.py) call `run_pipeline`; it rewrites the module in
place, verifies the result, and raises `aotkit.CompileError` for a failing pass or an
invalid result, naming the dump file or saying how to turn dumps on.
"""

from __future__ import annotations

import functools
import time

from jaxlib.mlir import ir

from aotkit import _context, dumps, modules
from aotkit.errors import CompileError
from aotkit.passes.pipeline import Step, manager, plan

# MLIR passes that change nothing when run again on a module they just ran on.
IDEMPOTENT = frozenset(
    "canonicalize cse symbol-dce chlo-legalize-to-stablehlo stablehlo-refine-shapes "
    "stablehlo-legalize-deprecated-ops strip-debuginfo".split()
)


# What a front end may know of its module ("facts"), and the passes that then do nothing:
# aotkit's tracer writes one function (@main, control flow in regions) of static shapes, and
# knows whether it wrote a CHLO op, and, for a module of one block whose every op it
# vouches for, whether `aotkit-simplify` has anything to rewrite, whether `canonicalize`
# has (a dead op, a constant below another op) and whether `cse` has (a dead op, two equal
# ops).
ONE_FUNCTION = "one function"
STATIC_SHAPES = "static shapes"
NO_CHLO = "no CHLO op"
NOTHING_TO_SIMPLIFY = "nothing to simplify"
CANONICAL = "canonical"
NO_DUPLICATES = "no equal ops"
TRACER_FACTS = frozenset({ONE_FUNCTION, STATIC_SHAPES})
_NOOP_GIVEN = {
    "aotkit-inline": ONE_FUNCTION,
    "symbol-dce": ONE_FUNCTION,
    "stablehlo-refine-shapes": STATIC_SHAPES,
    "chlo-legalize-to-stablehlo": NO_CHLO,
    "aotkit-simplify": NOTHING_TO_SIMPLIFY,
    "aotkit-algebraic-simplify": NOTHING_TO_SIMPLIFY,
    "aotkit-fold-constants": NOTHING_TO_SIMPLIFY,
    "canonicalize": CANONICAL,
    "cse": NO_DUPLICATES,
}
# The facts each pass keeps true; any other step makes the runner forget them all. None of
# these adds a function, call, dynamic shape or CHLO op, and those that keep "nothing to
# simplify" only remove ops or merge equal ones (jaxlib's StableHLO ops have no folders or
# canonicalization patterns: tests/test_passes.py checks that canonicalize changes none).
# canonicalize leaves no dead op and no constant below another op, and merges no ops a
# module without equal ops has (equal constants are equal ops); cse, which merges equal
# ops, leaves no dead op and moves no constant.
_ALL_FACTS = frozenset(
    {ONE_FUNCTION, STATIC_SHAPES, NO_CHLO, NOTHING_TO_SIMPLIFY, CANONICAL, NO_DUPLICATES}
)
_WITHOUT_SIMPLIFY = frozenset({ONE_FUNCTION, STATIC_SHAPES, NO_CHLO})
_PASS_FACTS = frozenset({ONE_FUNCTION, STATIC_SHAPES, NO_CHLO, NOTHING_TO_SIMPLIFY})
_KEEPS = {
    **dict.fromkeys(
        [*_NOOP_GIVEN]
        + "strip-debuginfo aotkit-simplify aotkit-algebraic-simplify "
        "aotkit-fold-constants aotkit-dce".split(),
        _PASS_FACTS,
    ),
    "canonicalize": _ALL_FACTS,
    "cse": _ALL_FACTS,
    # These make new ops (legalized CHLO, refined shapes folded), which may be simplified.
    "chlo-legalize-to-stablehlo": _WITHOUT_SIMPLIFY,
    "stablehlo-refine-shapes": _WITHOUT_SIMPLIFY,
    # It rewrites ops StableHLO deprecates, into what this jaxlib may say: not known CHLO-free.
    "stablehlo-legalize-deprecated-ops": frozenset({ONE_FUNCTION, STATIC_SHAPES}),
}


def ran_any(timings: list[tuple[str, float]]) -> bool:
    """Whether any step of a `run_pipeline` report ran (rather than being skipped)."""
    return any(" (skipped" not in label for label, _ in timings)


def format_timing(timings: list[tuple[str, float]], *, name: str, pipeline: str) -> str:
    """A pass timing report: one line per pass with milliseconds and share of the total."""
    total = sum(t for _, t in timings) or 1e-12
    width = max((len(label) for label, _ in timings), default=4)
    lines = [f"pipeline {pipeline!r} on module {name!r}", f"{'pass':<{width}}  {'ms':>9}  share"]
    for label, seconds in timings:
        lines.append(f"{label:<{width}}  {seconds * 1e3:9.3f}  {seconds / total:5.1%}")
    lines.append(f"{'total':<{width}}  {total * 1e3:9.3f}")
    return "\n".join(lines) + "\n"


def run_pipeline(
    module,
    pipeline: str,
    *,
    name: str,
    dumper: dumps.Dumper | None = None,
    verified: bool = False,
    verify: bool = True,
    facts: frozenset[str] = frozenset(),
) -> list[tuple[str, float]]:
    """Runs `pipeline` on `module` in place and returns (pass, seconds) per pass.

    `verified=True` skips verifying the input (the front end did); `verify=False` leaves
    verifying the result to the caller (the stages verify once, after donation). `facts`
    (`TRACER_FACTS`) are what the front end knows of the module: a pass they make a no-op
    is skipped, and says so in the timing report, until a pass that may break them runs.
    With a dumper whose `print_ir_after_all` is on, writes the module after each pass.
    """
    steps = plan(pipeline)
    if verified and (dumper is None or not dumper.print_ir_after_all):
        skipped = _all_skipped(steps, facts)
        if skipped is not None:  # the tracer's common case: its facts make every pass a no-op
            return list(skipped)
    timings: list[tuple[str, float]] = []
    with _context.of(module) as lc:
        if not verified:
            try:
                module.operation.verify()
            except ir.MLIRError as e:
                raise ValueError(
                    f"run_pipeline: module {name!r} fails verification before the pipeline: "
                    f"{modules.diagnostic(e)}; {dumps.hint(dumper)}"
                ) from e
        # Changes so far, and for each idempotent MLIR step the count right after it last
        # ran: a step that ran since the last change would change nothing (`cse` after an
        # `aotkit-simplify` that found nothing to rewrite).
        changes = 0
        clean_after: dict[str, int] = {}
        for step in steps:
            start = time.perf_counter()
            if step.mlir is not None and clean_after.get(step.mlir) == changes:
                timings.append((f"{step.label} (skipped: unchanged since it ran)", 0.0))
            elif _NOOP_GIVEN.get(step.label) in facts:
                timings.append((_skipped_label(step.label), 0.0))
            else:
                facts &= _KEEPS.get(step.label, frozenset())
                if _run_step(lc, step, module, name=name, pipeline=pipeline, dumper=dumper):
                    changes += 1
                if step.label in IDEMPOTENT:
                    clean_after[step.mlir] = changes
                timings.append((step.label, time.perf_counter() - start))
            if dumper is not None and dumper.print_ir_after_all:
                dumper.write_module(f"after-{step.label}", module)
        if verify and steps:
            verify_result(module, pipeline, name=name, dumper=dumper)
    return timings


@functools.lru_cache(maxsize=64)
def _all_skipped(steps: tuple, facts: frozenset[str]) -> tuple[tuple[str, float], ...] | None:
    """The report of `run_pipeline` when `facts` make every step a no-op (nothing runs, so no
    step's skip depends on another having run), else None."""
    if not all(_NOOP_GIVEN.get(step.label) in facts for step in steps):
        return None
    return tuple((_skipped_label(step.label), 0.0) for step in steps)


def _skipped_label(label: str) -> str:
    """A step's line in the timing report when a fact of the front end's makes it a no-op."""
    return f"{label} (skipped: {_NOOP_GIVEN[label]})"


def verify_result(module, pipeline: str, *, name: str, dumper: dumps.Dumper | None) -> None:
    """Verifies a pipeline's result; CompileError (after dumping it as `invalid`) if not."""
    with _context.of(module):
        try:
            module.operation.verify()
        except ir.MLIRError as e:
            if dumper is not None:
                dumper.write_module("invalid", module)
            raise CompileError(
                f"pipeline {pipeline!r} produced an invalid module {name!r}: "
                f"{modules.diagnostic(e)}; {dumps.hint(dumper)}",
                module_name=name,
            ) from e


def _run_step(lc, step: Step, module, *, name, pipeline, dumper) -> bool:
    """Runs one step; returns whether it may have changed the module (an MLIR pass may)."""
    if step.python is not None:
        try:
            changed = step.python.run(module)
        except Exception as e:
            e.add_note(f"in aotkit pass {step.label!r} on module {name!r}")
            raise
        if not isinstance(changed, bool):
            raise TypeError(
                f"aotkit pass {step.label!r} returned {type(changed).__name__} {changed!r}; "
                "a pass returns True when it changed the module, else False"
            )
        return changed
    try:
        manager(lc, step.mlir).run(module.operation)
    except ir.MLIRError as e:
        if dumper is not None:
            dumper.write_module(f"failed-{step.label}", module)
        raise CompileError(
            f"pipeline {pipeline!r}: pass {step.label!r} failed on module {name!r}: "
            f"{modules.diagnostic(e)}; {dumps.hint(dumper)}",
            module_name=name,
        ) from e
    return True
