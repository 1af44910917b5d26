"""Transforms, coverage: which ops each transform has a rule for, as the table of
docs/transforms.md.

One row per StableHLO/CHLO op aotkit knows: the ops of the rule tables (`jvp.JVP_RULES`,
`jvp.ZERO`, `jvp.CONTROL`, `batching.BATCH_RULES`), each custom call target of
`jvp.CUSTOM_CALLS`, and every op aotkit's tracer can emit (the entries of its registry,
`tracing.core._rules`, by the ops each one emits, and the ops it builds outside the
registry). Each row says:

- jvp: `rule` (a JVP rule), `zero` (declared to have a zero tangent), `regions` (control
  flow: the rule evaluates the regions again), `error` (a rule that only explains why the
  op has no derivative), or `-`;
- vjp: the linear primitives the JVP rule builds its tangent with, each of which has a
  transpose rule (`linear.LINEAR`): reverse mode runs the JVP rule on a tape and transposes
  them. Read from the rules' bytecode (the module-level primitives and helpers they load),
  so the column follows the code;
- vmap: `rule`, `loop` (`batching.loop_fallback`: one iteration per batch element),
  `unbatched` (an op without operands is never batched), or `-`.

`python -m aotkit.transforms.coverage --write docs/transforms.md` rewrites the table
between its markers; `--check` says whether the file is up to date (tests run it).
"""

from __future__ import annotations

import argparse
import dataclasses
import dis
import functools
import importlib
import pkgutil
import re
import sys
import types
from pathlib import Path

from aotkit import tracing as tracer_rules
from aotkit.tracing import core as tracer_core
from aotkit.transforms import batching, jvp
from aotkit.transforms.core import Linear
from aotkit.transforms.linear import LINEAR

BEGIN = "<!-- transforms-coverage: begin (python -m aotkit.transforms.coverage --write) -->"
END = "<!-- transforms-coverage: end -->"

CUSTOM_CALL = "stablehlo.custom_call"

# The ops each entry of the tracer's registry emits, for the entries `register_direct` does
# not name (a lowering rule of their own). A LAPACK entry emits a custom call whose target
# names the routine for the element type.
_LAPACK = {
    "lapack_potrf": ("potrf",),
    "lapack_getrf": ("getrf",),
    "lapack_geqrf": ("geqrf",),
    "lapack_orgqr": ("orgqr", "ungqr"),
    "lapack_syevd": ("syevd", "heevd"),
    "lapack_gesdd": ("gesdd",),
    "lapack_trsm": ("trsm",),
}
REGISTRY_OPS: dict[str, tuple[str, ...]] = {
    "slice": ("stablehlo.slice",),
    "reverse": ("stablehlo.reverse",),
    "concatenate": ("stablehlo.concatenate",),
    "pad": ("stablehlo.pad",),
    "iota": ("stablehlo.iota",),
    "dynamic_slice": ("stablehlo.dynamic_slice",),
    "dynamic_update_slice": ("stablehlo.dynamic_update_slice",),
    "gather": ("stablehlo.gather",),
    "scatter": ("stablehlo.scatter",),
    "reduce": ("stablehlo.reduce",),
    "cumulative": ("stablehlo.reduce_window",),
    "diff": ("stablehlo.slice", "stablehlo.subtract", "stablehlo.xor"),
    "sort": ("stablehlo.sort",),
    "sort_key_val": ("stablehlo.sort",),
    "convolution": ("stablehlo.convolution",),
    "reduce_window": ("stablehlo.reduce_window",),
    "sharding_constraint": ("sdy.sharding_constraint",),
    "symbolic_slice": ("stablehlo.slice", "stablehlo.real_dynamic_slice"),
    **{
        entry: tuple(
            f"{CUSTOM_CALL} @lapack_{p}{base}_ffi"
            for base in bases
            for p in ("cz" if base in ("ungqr", "heevd") else "sd" if len(bases) > 1 else "sdcz")
        )
        for entry, bases in _LAPACK.items()
    },
}
# Ops the tracer builds outside its registry: constants, and structured control flow
# (`tracing.control`: while_loop, fori_loop, scan, cond, switch).
OUTSIDE_REGISTRY = ("stablehlo.constant", "stablehlo.while", "stablehlo.case", "stablehlo.if")
# The dynamic-shape ops the tracer emits for symbolic dimensions (`tracing.symbolic`). The
# transforms read static shapes: a symbolic program is specialized to concrete shapes before
# it is transformed, so these need no rules (their rows say so).
SYMBOLIC_OPS = (
    "stablehlo.dynamic_broadcast_in_dim",
    "stablehlo.dynamic_gather",
    "stablehlo.dynamic_iota",
    "stablehlo.dynamic_pad",
    "stablehlo.dynamic_reshape",
    "stablehlo.get_dimension_size",
    "stablehlo.real_dynamic_slice",
)
# Ops without operands: nothing of theirs is batched, so vmap never needs a rule.
NO_OPERANDS = frozenset(
    {"stablehlo.iota", "stablehlo.constant", "stablehlo.partition_id", "stablehlo.replica_id"}
)
# What reverse mode does with control flow (the JVP rules of regions hold no primitives).
_CONTROL_VJP = {
    "stablehlo.while": "counted loops (or max_trip_count)",
    "stablehlo.case": "regions",
    "stablehlo.if": "regions",
}


@functools.cache
def load_rules() -> None:
    """Imports every module of aotkit.transforms, so each rule table is complete (rule
    modules register into the tables when imported)."""
    package = importlib.import_module("aotkit.transforms")
    for info in pkgutil.iter_modules(package.__path__):
        if info.name != "coverage":
            importlib.import_module(f"aotkit.transforms.{info.name}")


def unmapped_registry_entries() -> list[str]:
    """Entries of the tracer's registry whose ops this module does not know: each needs
    a line in `REGISTRY_OPS`."""
    tracer_rules.load_families()
    return sorted(
        name
        for name, entry in tracer_core._rules.items()
        if entry.hlo is None and name not in REGISTRY_OPS
    )


def tracer_ops() -> dict[str, list[str]]:
    """Every op the tracer can emit (for static shapes), with the registry entries that
    emit it: `register_direct` entries name their op, `REGISTRY_OPS` the others'."""
    tracer_rules.load_families()
    found: dict[str, list[str]] = {op: ["(outside the registry)"] for op in OUTSIDE_REGISTRY}
    direct = {name: (entry.hlo,) for name, entry in tracer_core._rules.items() if entry.hlo}
    for name, ops in {**REGISTRY_OPS, **direct}.items():
        for op in ops:
            if op not in SYMBOLIC_OPS:
                found.setdefault(op, []).append(name)
    return found


# --- what each rule is made of --------------------------------------------------------------------


def _functions_in(fn) -> list:
    """The plain functions behind a rule (a `functools.partial` holds its factor too)."""
    if isinstance(fn, functools.partial):
        return _functions_in(fn.func) + [
            g for a in (*fn.args, *fn.keywords.values()) for g in _functions_in(a)
        ]
    return [fn] if isinstance(fn, types.FunctionType) else []


def _codes(code: types.CodeType):
    yield code
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            yield from _codes(c)


def _loaded(fn) -> list:
    """The module-level objects `fn`'s code loads: globals, and attributes of the aotkit
    modules it loads (`L.mul`)."""
    out = []
    for code in _codes(fn.__code__):
        module = None
        for ins in dis.get_instructions(code):
            if ins.opname == "LOAD_GLOBAL":
                obj = fn.__globals__.get(ins.argval)
                module = obj if isinstance(obj, types.ModuleType) else None
                if module is None and obj is not None:
                    out.append((ins.argval, obj))
            elif ins.opname in ("LOAD_ATTR", "LOAD_METHOD") and module is not None:
                if module.__name__.startswith("aotkit.transforms"):
                    out.append((ins.argval, getattr(module, ins.argval, None)))
                module = None
            else:
                module = None
    return out


def _is_rule_code(obj) -> bool:
    return (
        isinstance(obj, types.FunctionType)
        and obj.__module__.startswith("aotkit.transforms")
        and obj.__module__ != "aotkit.transforms._hlo"
    )


def linear_primitives(rule, seen: set | None = None) -> set[str]:
    """The names of the linear primitives a JVP rule can build its tangent with: the
    `Linear` values its code (and the transforms' helpers it calls) loads; a helper that
    defines a primitive on first use (`linear.concatenate`) counts as that primitive."""
    seen = set() if seen is None else seen
    found: set[str] = set()
    for fn in _functions_in(rule):
        if fn in seen:
            continue
        seen.add(fn)
        for name, obj in _loaded(fn):
            if isinstance(obj, Linear):
                found.add(obj.name)
            elif name in ("_prim", "Linear") and fn.__module__ != "aotkit.transforms.control":
                found.add(fn.__name__)
            elif _is_rule_code(obj) or isinstance(obj, functools.partial):
                found |= linear_primitives(obj, seen)
            elif isinstance(obj, dict) and not any(obj is t for t in _TABLES):
                # A module's table of rules by kind (`_WINDOW_RULES`).
                for value in obj.values():
                    if _is_rule_code(value) or isinstance(value, functools.partial):
                        found |= linear_primitives(value, seen)
    return found


# The transforms' own tables: a rule that reads one is not made of all its entries.
_TABLES = (jvp.JVP_RULES, jvp.CUSTOM_CALLS, jvp.CONTROL, batching.BATCH_RULES, LINEAR)


def always_refuses(rule) -> bool:
    """Whether a JVP rule builds no tangent at all and raises TransformError: a rule that
    names the op in its error (`lapack_sgeev_ffi`), not a derivative."""
    if linear_primitives(rule):
        return False
    return any(name == "TransformError" for fn in _functions_in(rule) for name, _ in _loaded(fn))


# --- the table ------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Row:
    op: str  # "stablehlo.add", or "stablehlo.custom_call @target"
    jvp: str
    vjp: str
    vmap: str
    tracer: str  # "yes": aotkit's tracer emits it; "symbolic": for symbolic shapes only

    @property
    def covered(self) -> bool:
        return "-" not in (self.jvp, self.vjp, self.vmap) and self.jvp != "error"

    @property
    def needed(self) -> bool:
        """Whether every transform must cover it: the tracer emits it for static shapes."""
        return self.tracer == "yes"


def _custom_call_batched(target: str) -> str:
    return "rule" if target in batching.CUSTOM_CALLS else "loop"


def _row(op: str, tracer: str) -> Row:
    if op.startswith(CUSTOM_CALL + " @"):
        target = op.split("@", 1)[1]
        rule = jvp.CUSTOM_CALLS.get(target)
        if rule is None or always_refuses(rule):
            jvp_text, vjp_text = ("-" if rule is None else "error"), "-"
        else:
            jvp_text, vjp_text = "rule", _prims_text(linear_primitives(rule))
        return Row(op, jvp_text, vjp_text, _custom_call_batched(target), tracer)
    if op == CUSTOM_CALL:
        # Any other target: no derivative, batched by the loop fallback.
        return Row(op, "by target", "by target", _custom_call_batched(""), tracer)
    if op in jvp.ZERO:
        jvp_text = vjp_text = "zero"
    elif op in jvp.CONTROL:
        jvp_text, vjp_text = "regions", _CONTROL_VJP.get(op, "regions")
    elif op in jvp.JVP_RULES and always_refuses(jvp.JVP_RULES[op]):
        jvp_text, vjp_text = "error", "-"
    elif op in jvp.JVP_RULES:
        jvp_text, vjp_text = "rule", _prims_text(linear_primitives(jvp.JVP_RULES[op]))
    else:
        jvp_text = vjp_text = "-"
    batch = batching.BATCH_RULES.get(op)
    if op in NO_OPERANDS:
        vmap_text = "unbatched"
    elif batch is None:
        vmap_text = "-"
    else:
        vmap_text = "loop" if batch is batching.loop_fallback else "rule"
    return Row(op, jvp_text, vjp_text, vmap_text, tracer)


def _prims_text(prims: set[str] | None) -> str:
    if prims is None:
        return "-"
    return ", ".join(sorted(prims)) if prims else "identity"


def known_ops() -> set[str]:
    """Every op aotkit knows: the rule tables' and the tracer's."""
    load_rules()
    ops = set(jvp.JVP_RULES) | set(jvp.ZERO) | set(jvp.CONTROL) | set(batching.BATCH_RULES)
    ops |= {f"{CUSTOM_CALL} @{t}" for t in jvp.CUSTOM_CALLS}
    ops |= set(tracer_ops()) | set(SYMBOLIC_OPS)
    return ops


def table() -> list[Row]:
    """One row per op aotkit knows, by name (custom calls by target)."""
    return list(_table())


@functools.cache
def _table() -> tuple[Row, ...]:
    # Computed once: every rule module is imported first (`load_rules`), so the tables
    # do not change afterwards.
    load_rules()
    emitted = tracer_ops()

    def tracer(op):
        return "yes" if op in emitted else "symbolic" if op in SYMBOLIC_OPS else ""

    return tuple(_row(op, tracer(op)) for op in sorted(known_ops()))


def _display_rows(rows: list[Row]) -> list[tuple[str, Row]]:
    """The rows as the document shows them: the custom calls of one LAPACK routine for
    several element types (`lapack_spotrf_ffi`, `lapack_dpotrf_ffi`, ...) in one row."""
    out: list[tuple[str, Row]] = []
    groups: dict[tuple, list[str]] = {}
    for row in rows:
        m = re.fullmatch(rf"{re.escape(CUSTOM_CALL)} @lapack_([sdcz])(\w+)", row.op)
        if m is None:
            out.append((f"`{row.op}`", row))
            continue
        key = (m.group(2), row.jvp, row.vjp, row.vmap, row.tracer)
        if key not in groups:
            groups[key] = []
            out.append((key, row))
        groups[key].append(m.group(1))
    return [
        (
            f"`{CUSTOM_CALL} @lapack_{{{','.join(sorted(groups[label], key='sdcz'.index))}}}"
            f"{label[0]}`"
            if isinstance(label, tuple)
            else label,
            row,
        )
        for label, row in out
    ]


def summary(rows: list[Row]) -> str:
    n = len(rows)
    jvp_rules = sum(r.jvp in ("rule", "regions") for r in rows)
    zeros = sum(r.jvp == "zero" for r in rows)
    vjp = sum(r.vjp not in ("-", "by target") for r in rows)
    vmap_rules = sum(r.vmap == "rule" for r in rows)
    loops = sum(r.vmap == "loop" for r in rows)
    unbatched = sum(r.vmap == "unbatched" for r in rows)
    traced = [r for r in rows if r.needed]
    return (
        f"{n} ops ({len(traced)} of them emitted by aotkit's tracer for static shapes, "
        f"{sum(r.covered for r in traced)} of those covered by all three transforms). "
        f"jvp: {jvp_rules + zeros} ({jvp_rules} rules, {zeros} declared zero); "
        f"vjp: {vjp}; vmap: {vmap_rules + loops + unbatched} ({vmap_rules} rules, "
        f"{loops} by the loop fallback, {unbatched} without operands). "
        "Custom calls are counted by target."
    )


def markdown() -> str:
    """The table and its summary, between the markers."""
    rows = table()
    lines = [
        BEGIN,
        "",
        "| op | jvp | vjp (linear primitives) | vmap | tracer |",
        "| --- | --- | --- | --- | --- |",
    ]
    for label, row in _display_rows(rows):
        lines.append(f"| {label} | {row.jvp} | {row.vjp} | {row.vmap} | {row.tracer} |")
    lines += ["", summary(rows), "", END]
    return "\n".join(lines)


def rewrite(text: str, where: str = "the document") -> str:
    """`text` with the table between its markers replaced by the current one."""
    begin, end = text.find(BEGIN), text.find(END)
    if begin < 0 or end < begin:
        raise ValueError(
            f"{where} has no coverage markers; add a line {BEGIN!r} and a line {END!r} "
            "where the table goes"
        )
    return text[:begin] + markdown() + text[end + len(END) :]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m aotkit.transforms.coverage",
        description="The op x transform coverage table of aotkit's transforms.",
    )
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--write", metavar="FILE", help="rewrite the table between the markers")
    group.add_argument("--check", metavar="FILE", help="exit 1 when FILE's table is stale")
    args = parser.parse_args(argv)
    if args.write is None and args.check is None:
        print(markdown())
        return 0
    path = Path(args.write or args.check)
    try:
        text = path.read_text()
        new = rewrite(text, str(path))
    except (OSError, ValueError) as e:
        print(f"coverage: {e}", file=sys.stderr)
        return 1
    if args.check is not None:
        if new != text:
            print(
                f"coverage: the table in {path} is stale; run python -m "
                f"aotkit.transforms.coverage --write {path}",
                file=sys.stderr,
            )
            return 1
        return 0
    path.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
