"""The rule coverage table (aotkit/transforms/coverage.py, docs/transforms.md): up to date,
complete for every op the tracer can emit, and read from the rules themselves."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import aotkit
import aotkit.numpy as anp
from aotkit.transforms import coverage
from tests.transforms import test_control, test_elementwise, test_layout, test_reductions

DOC = Path(__file__).resolve().parents[2] / "docs" / "transforms.md"


def test_the_committed_table_is_up_to_date():
    text = DOC.read_text()
    assert coverage.rewrite(text) == text, (
        "docs/transforms.md's coverage table is stale: run "
        "python -m aotkit.transforms.coverage --write docs/transforms.md"
    )


def test_every_registry_entry_of_the_tracer_is_mapped_to_its_ops():
    assert coverage.unmapped_registry_entries() == []


def test_every_op_the_tracer_can_emit_is_covered_by_every_transform():
    rows = {r.op: r for r in coverage.table()}
    for op in coverage.tracer_ops():
        assert op in rows, op
    missing = [(r.op, r.jvp, r.vjp, r.vmap) for r in rows.values() if r.needed and not r.covered]
    assert missing == []


# --- a corpus of traced programs: every op in them has a row --------------------------------------


def _corpus():
    """The aotkit programs of the oracle tests (one program per family), and a few more."""
    for module, families in (
        (test_elementwise, test_elementwise.FAMILIES.values()),
        (test_layout, [test_layout.FAMILY]),
        (test_reductions, [test_reductions.FAMILY]),
        (test_control, [test_control.FAMILY]),
    ):
        for k, family in enumerate(families):
            dtype = np.dtype(np.complex64 if family.backend == "cpu" else np.float32)
            rng = np.random.default_rng(0)
            args = {n: c.make(rng, dtype) for n, c in family.cases.items()}

            def program(args, cases=family.cases):
                return {n: cases[n].fa(*a) for n, a in args.items()}

            yield f"{module.__name__}[{k}]", program, (args,)
    a = np.eye(3, dtype=np.float32) * 2 + 0.1
    yield "linalg", lambda a: (anp.linalg.cholesky(a), anp.linalg.svd(a), anp.linalg.qr(a)), (a,)
    yield "eigh", lambda a: anp.linalg.eigh(a), (a,)
    yield "solve", lambda a: (anp.linalg.solve(a, a), anp.linalg.det(a), anp.linalg.inv(a)), (a,)
    x = np.ones((1, 5, 5, 2), np.float32)
    yield "nn", lambda x: aotkit.nn.max_pool(x, (2, 2), (1, 1), "VALID"), (x,)
    yield "random", lambda k: aotkit.random.normal(k, (3,)), (aotkit.random.key(0),)


CORPUS = list(_corpus())


def _ops(text: str) -> set[str]:
    """The ops of a module's text (the first word of each operation, not attribute names)."""
    ops = set(re.findall(r'^\s*(?:%[^=]*=\s*)?"?((?:stablehlo|chlo|sdy)\.[a-z_0-9]+)', text, re.M))
    ops -= {"stablehlo.return", "sdy.mesh", "stablehlo.custom_call"}  # by target below
    targets = re.findall(r"stablehlo\.custom_call @([\w.]+)", text)
    ops |= {f"stablehlo.custom_call @{t}" for t in targets}
    return ops


def test_every_op_of_the_corpus_has_a_row():
    known = coverage.known_ops()
    seen: dict[str, str] = {}
    for name, fn, args in CORPUS:
        text = aotkit.jit(fn, pipeline="none", frontend="aotkit").lower(*args).as_text()
        for op in _ops(text):
            seen.setdefault(op, name)
    missing = {op: where for op, where in seen.items() if op not in known}
    assert missing == {}
    emitted = coverage.tracer_ops()
    not_listed = {op: where for op, where in seen.items() if op not in emitted}
    assert not_listed == {}, "ops the tracer emitted that coverage.tracer_ops() does not list"


# --- the table reads the rules --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("op", "jvp", "vjp", "vmap"),
    [
        ("stablehlo.sine", "rule", "mul", "rule"),
        ("stablehlo.add", "rule", "add", "rule"),
        ("stablehlo.compare", "zero", "zero", "rule"),
        ("stablehlo.iota", "zero", "zero", "unbatched"),
        ("stablehlo.dot_general", "rule", "add, dot_general_lhs, dot_general_rhs", "rule"),
        ("stablehlo.concatenate", "rule", "concatenate", "rule"),
        # (identity, but for a custom_vjp function's barriers)
        ("stablehlo.optimization_barrier", "rule", "custom_vjp", "rule"),
        ("stablehlo.while", "regions", "counted loops (or max_trip_count)", "rule"),
        ("stablehlo.case", "regions", "regions", "rule"),
        ("stablehlo.custom_call", "by target", "by target", "loop"),
        ("stablehlo.custom_call @lapack_sgeev_ffi", "error", "-", "rule"),
        ("chlo.zeta", "-", "-", "rule"),
        ("sdy.sharding_constraint", "rule", "sharding_constraint", "rule"),
    ],
)
def test_rows(op, jvp, vjp, vmap):
    (row,) = [r for r in coverage.table() if r.op == op]
    assert (row.jvp, row.vjp, row.vmap) == (jvp, vjp, vmap)


def test_lapack_targets_share_a_row_per_routine():
    text = coverage.markdown()
    assert "| `stablehlo.custom_call @lapack_{s,d,c,z}potrf_ffi` | rule |" in text
    assert "| `stablehlo.custom_call @lapack_{s,d}syevd_ffi` |" in text


# --- the entry point ------------------------------------------------------------------------------


def test_write_and_check(tmp_path, capsys):
    doc = tmp_path / "t.md"
    doc.write_text(f"intro\n\n{coverage.BEGIN}\nold\n{coverage.END}\n\nafter\n")
    assert coverage.main(["--check", str(doc)]) == 1
    assert capsys.readouterr().err == (
        f"coverage: the table in {doc} is stale; run python -m aotkit.transforms.coverage "
        f"--write {doc}\n"
    )
    assert coverage.main(["--write", str(doc)]) == 0
    assert coverage.main(["--check", str(doc)]) == 0
    text = doc.read_text()
    assert text.startswith("intro\n\n") and text.endswith("\n\nafter\n")
    assert "| `stablehlo.add` | rule | add | rule | yes |" in text


def test_a_document_without_markers_is_refused(tmp_path, capsys):
    doc = tmp_path / "t.md"
    doc.write_text("no table here\n")
    assert coverage.main(["--write", str(doc)]) == 1
    assert capsys.readouterr().err == (
        f"coverage: {doc} has no coverage markers; add a line {coverage.BEGIN!r} and a line "
        f"{coverage.END!r} where the table goes\n"
    )
    assert doc.read_text() == "no table here\n"
