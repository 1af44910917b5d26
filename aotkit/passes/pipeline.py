"""Pass pipelines as text: named pipelines, aotkit's Python passes by name, and the parser.

A pipeline is a named pipeline (`NAMED_PIPELINES`: "none", "default") or MLIR's textual
syntax (`"builtin.module(func.func(canonicalize,cse))"`), in which aotkit's Python passes
(`register_pass`) may appear anywhere by name. `plan(pipeline)` checks the whole text before
any pass runs (an unknown pass is a ValueError naming it and the nearest registered names)
and splits it into steps; a step's MLIR passes are parsed into a PassManager per lowering
context (`manager`), because a PassManager belongs to the context it was parsed in.
"""

from __future__ import annotations

import contextlib
import difflib
import functools
import os
import re
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass

from jaxlib.mlir import ir, passmanager

from aotkit import _context

PassFn = Callable[[ir.Module], bool]

NAMED_PIPELINES: dict[str, str] = {
    "none": "builtin.module()",
    # aotkit-inline, not MLIR's `inline`: jaxlib does not register func's inliner extension,
    # so `inline` leaves every func.call in place. cse runs before aotkit-simplify so
    # duplicated subexpressions are rewritten once, and after it because rewriting
    # identities away exposes new duplicates (`x*1 + x` -> `x + x`). canonicalize runs
    # without region simplification: it merges blocks and drops the arguments of blocks
    # that branches reach, and StableHLO's regions are one block each, so it finds nothing
    # (the dead ops it would also erase, the rewrite driver erases too) at 40% of the pass's
    # cost.
    "default": (
        "builtin.module(aotkit-inline,symbol-dce,func.func(chlo-legalize-to-stablehlo),"
        "stablehlo-refine-shapes,func.func(canonicalize{region-simplify=disabled},cse),"
        "aotkit-simplify,func.func(cse))"
    ),
}

_EXAMPLE = "'builtin.module(aotkit-inline,func.func(canonicalize,cse),aotkit-simplify)'"

# --- Python passes -------------------------------------------------------------------------------


@dataclass(frozen=True)
class PythonPass:
    """A pass written in Python: `run(module) -> bool`, True when it changed the module."""

    name: str
    run: PassFn
    description: str


PYTHON_PASSES: dict[str, PythonPass] = {}
_PASS_NAME = re.compile(r"^[a-z][a-z0-9-]*$")


def add_pass(name: str, fn: PassFn, description: str) -> None:
    PYTHON_PASSES[name] = PythonPass(name, fn, description)
    plan.cache_clear()


def register_pass(name: str, *, description: str = "") -> Callable[[PassFn], PassFn]:
    """Registers `fn(module) -> bool` as the pipeline pass `name` (a decorator).

    The pass runs on the whole module wherever it appears in a pipeline (inside
    `func.func(...)` too) and returns True when it changed the module. The caller holds
    is inside `with lc:` for the module's context.
    """
    if not isinstance(name, str) or not _PASS_NAME.match(name):
        raise ValueError(
            f"register_pass: invalid pass name {name!r}; use lowercase letters, digits and "
            "dashes, starting with a letter (e.g. 'my-simplify')"
        )
    if name in PYTHON_PASSES or name in NAMED_PIPELINES:
        raise ValueError(f"register_pass: {name!r} is already registered; choose another name")
    if _is_mlir_pass(name):
        raise ValueError(
            f"register_pass: {name!r} is an MLIR pass registered in jaxlib; choose another name"
        )

    def decorate(fn: PassFn) -> PassFn:
        if not callable(fn):
            raise TypeError(
                f"register_pass({name!r}): expected a function module -> bool, "
                f"got {type(fn).__name__}"
            )
        doc = (fn.__doc__ or "").strip().splitlines()
        add_pass(name, fn, description or (doc[0] if doc else ""))
        return fn

    return decorate


_checking: _context.LoweringContext | None = None


def _checking_context() -> _context.LoweringContext:
    """A context of its own for parsing pipeline texts to check them (it holds no module)."""
    global _checking
    if _checking is None:
        _checking = _context.LoweringContext()
    return _checking


def _is_mlir_pass(name: str) -> bool:
    with _checking_context():
        for text in (f"builtin.module({name})", f"builtin.module(func.func({name}))"):
            try:
                passmanager.PassManager.parse(text)
                return True
            except ValueError:
                pass
    return False


# --- Pipeline text -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    """One step of a pipeline: MLIR pass text (parsed per context by `manager`) or a
    Python pass; `label` names it in dump files and the timing report."""

    label: str
    mlir: str | None
    python: PythonPass | None


def _split(text: str, pipeline: str) -> list[str]:
    """Splits `a,b{x=1},c(d,e)` at top-level commas."""
    parts, start, quote = [], 0, None
    closing = {"(": ")", "{": "}"}
    stack: list[str] = []
    for i, ch in enumerate(text):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif ch in closing:
            stack.append(closing[ch])
        elif ch in ")}":
            if not stack or stack.pop() != ch:
                raise _syntax_error(pipeline, f"unbalanced {ch!r}")
        elif ch == "," and not stack:
            parts.append(text[start:i])
            start = i + 1
    if stack or quote:
        raise _syntax_error(pipeline, "unbalanced brackets")
    parts.append(text[start:])
    return [p.strip() for p in parts]


def _syntax_error(pipeline: str, what: str) -> ValueError:
    return ValueError(f"pipeline {pipeline!r}: {what}; write pipelines as {_EXAMPLE}")


_NAME = re.compile(r"[A-Za-z_][\w.\-]*")


def _parse_element(text: str, pipeline: str) -> tuple[str, str, str | None]:
    """`name{options}(body)` -> (name, "{options}", body or None)."""
    m = _NAME.match(text)
    if m is None:
        raise _syntax_error(pipeline, f"cannot read pass {text!r}")
    name, rest = m.group(), text[m.end() :].strip()
    options = ""
    if rest.startswith("{"):
        depth = 0
        for i, ch in enumerate(rest):
            depth += {"{": 1, "}": -1}.get(ch, 0)
            if depth == 0:
                options, rest = rest[: i + 1], rest[i + 1 :].strip()
                break
    if not rest:
        return name, options, None
    if rest.startswith("(") and rest.endswith(")"):
        return name, options, rest[1:-1]
    raise _syntax_error(pipeline, f"cannot read pass {text!r}")


def _nested(anchors: tuple[str, ...], inner: str) -> str:
    for anchor in reversed(anchors):
        inner = f"{anchor}({inner})"
    return f"builtin.module({inner})"


def _flatten(text: str, anchors: tuple[str, ...], pipeline: str) -> list[Step]:
    steps: list[Step] = []
    for element in _split(text, pipeline):
        if not element:
            if text.strip():
                raise _syntax_error(pipeline, "empty pass name")
            continue
        name, options, body = _parse_element(element, pipeline)
        if body is not None:
            if options:
                raise _syntax_error(pipeline, f"options on op anchor {name!r}")
            steps.extend(_flatten(body, anchors + (name,), pipeline))
        elif name in PYTHON_PASSES:
            if options:
                raise ValueError(
                    f"pipeline {pipeline!r}: aotkit pass {name!r} takes no options, "
                    f"got {options}; remove them"
                )
            steps.append(Step(name, None, PYTHON_PASSES[name]))
        else:
            steps.append(Step(name, _checked_text(name, element, anchors, pipeline), None))
    return steps


def _checked_text(name: str, element: str, anchors: tuple[str, ...], pipeline: str) -> str:
    """The full MLIR pipeline text of one pass, checked by parsing it (caller is inside a context
    in the checking context)."""
    text = _nested(anchors, element)
    try:
        passmanager.PassManager.parse(text)
    except ValueError as e:
        message = str(e)
    else:
        return _dry_run(text, element, pipeline)
    if not anchors and "restricted to 'func.func'" in message:
        # Passes such as chlo-legalize-to-stablehlo run on functions: nest them for the user.
        text = _nested(("func.func",), element)
        passmanager.PassManager.parse(text)
        return _dry_run(text, element, pipeline)
    if "does not refer to a registered pass" in message:
        if name in _NOT_IN_JAXLIB:
            raise ValueError(
                f"pipeline {pipeline!r}: unknown pass {name!r} (jaxlib does not register it); "
                f"use {_NOT_IN_JAXLIB[name]}"
            ) from None
        near = difflib.get_close_matches(name, known_names(), n=3, cutoff=0.6)
        suggestion = (
            f"nearest registered: {', '.join(near)}"
            if near
            else "see aotkit.passes.known_names() for the registered names"
        )
        raise ValueError(f"pipeline {pipeline!r}: unknown pass {name!r}; {suggestion}") from None
    first = next((ln.strip() for ln in message.splitlines() if ln.strip()), message)
    raise ValueError(
        f"pipeline {pipeline!r}: MLIR rejected {element!r}: {first}; check the pass options "
        "and the op it is nested under"
    ) from None


_EMPTY = "module { func.func private @f() { return } }"


def _dry_run(text: str, element: str, pipeline: str) -> str:
    """Runs the pass on a trivial module, so that options it parses only when it runs
    (`inline{default-pipeline=...}`) are checked now. MLIR prints such errors to the
    process's stderr and carries on, so stderr is captured for the run."""
    pm = passmanager.PassManager.parse(text)
    with _stderr_captured() as captured:
        try:
            pm.run(ir.Module.parse(_EMPTY).operation)
        except ir.MLIRError:
            pass  # a pass that needs real input; the pipeline run reports it
    errors = [ln.strip() for ln in captured() if "error:" in ln]
    if errors:
        raise ValueError(
            f"pipeline {pipeline!r}: MLIR rejected {element!r}: "
            f"{errors[0].split('error:', 1)[1].strip()}; check the pass options"
        )
    return text


@contextlib.contextmanager
def _stderr_captured():
    """Redirects file descriptor 2 (where MLIR's C++ prints) to a temporary file; yields a
    function returning the lines written."""
    sys.stderr.flush()
    saved = os.dup(2)
    lines: list[str] = []
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield lambda: lines
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            lines += sink.read().decode("utf-8", "replace").splitlines()


def manager(lc: _context.LoweringContext, text: str) -> passmanager.PassManager:
    """The PassManager for checked pipeline `text` in `lc` (caller is inside `with lc:`)."""
    pm = lc.pipelines.get(text)
    if pm is None:
        pm = lc.pipelines[text] = passmanager.PassManager.parse(text)
        # One verification after the whole pipeline instead of one per pass: verifying
        # costs about as much as a pass, and the input was verified when it was traced.
        pm.enable_verifier(False)
    return pm


# StableHLO passes upstream has and jaxlib leaves out, with the aotkit pass to use instead.
_NOT_IN_JAXLIB = {
    "stablehlo-aggressive-simplification": "aotkit-simplify",
    "stablehlo-aggressive-folder": "aotkit-fold-constants",
}

# Candidates for "did you mean": MLIR passes jaxlib may register. Only those that parse in
# this jaxlib are offered.
_MLIR_CANDIDATES = (
    "canonicalize cse inline symbol-dce symbol-privatize sccp loop-invariant-code-motion "
    "control-flow-sink strip-debuginfo print-ir print-op-stats topological-sort "
    "remove-dead-values mem2reg sroa snapshot-op-locations stablehlo-legalize-to-vhlo "
    "vhlo-legalize-to-stablehlo vhlo-to-version stablehlo-refine-shapes "
    "stablehlo-canonicalize-dynamism stablehlo-legalize-to-linalg chlo-legalize-to-stablehlo "
    "stablehlo-compatibility-expander stablehlo-complex-math-expander "
    "stablehlo-legalize-composite-to-call stablehlo-legalize-deprecated-ops "
    "stablehlo-legalize-quant-to-math stablehlo-refine-arguments stablehlo-convert-to-signless "
    "stablehlo-wrap-in-composite shape-legalize-to-stablehlo"
).split()


@functools.cache
def _registered_mlir_names() -> tuple[str, ...]:
    return tuple(n for n in _MLIR_CANDIDATES if _is_mlir_pass(n))


def known_names() -> list[str]:
    """Pass names a pipeline may use: registered MLIR passes (of a known list), aotkit's
    Python passes, and the named pipelines (usable as a whole pipeline only)."""
    return sorted({*_registered_mlir_names(), *PYTHON_PASSES, *NAMED_PIPELINES})


@functools.lru_cache(maxsize=64)
def plan(pipeline: str) -> tuple[Step, ...]:
    """The steps of `pipeline` (a name or MLIR text), checked; ValueError names what is wrong."""
    text = NAMED_PIPELINES.get(pipeline, pipeline).strip()
    if not text:
        raise ValueError(f"pipeline {pipeline!r}: empty pipeline; use 'none' to run no passes")
    parts = _split(text, pipeline)
    if len(parts) == 1:
        name, options, body = _parse_element(parts[0], pipeline)
        if name == "builtin.module" and body is not None and not options:
            text = body
    with _checking_context():
        return tuple(_flatten(text, (), pipeline))


def check_pipeline(pipeline: str) -> None:
    """Raises TypeError/ValueError for a pipeline that `run_pipeline` would reject."""
    if not isinstance(pipeline, str):
        raise TypeError(
            f"pipeline: expected a name ({', '.join(NAMED_PIPELINES)}) or MLIR pipeline text, "
            f"got {type(pipeline).__name__} {pipeline!r}; e.g. pipeline={_EXAMPLE}"
        )
    plan(pipeline)
