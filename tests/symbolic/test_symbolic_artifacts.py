"""Artifacts of symbolic programs (format version 3): what a header holds, what a reader
refuses, and what `aotkit inspect` shows.

A header's symbolic field is data: symbols, constraint texts and one entry per
specialization, each read by a bounded parser (aotkit/symbolic/algebra.py) and checked against the
specs before any byte reaches the bindings. Nothing in it is evaluated as code.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import aotkit
from aotkit import artifacts
from aotkit.errors import ArtifactError, ArtifactWarning
from tests.symbolic import programs

REWRITE = "; the file is not one aotkit wrote, or was changed: write it again"


@pytest.fixture(scope="module")
def symbolic_artifact() -> bytes:
    compiled = aotkit.load_module(programs.mlp_export().serialize()).compile()
    return compiled.specialize(b=[2, 4]).serialize()


def repack(data: bytes, symbolic=None, **fields) -> bytes:
    """`data` with header fields replaced (`symbolic`: keys of the symbolic field)."""
    art = artifacts.unpack(data)
    header = {k: v for k, v in art.header.items() if k != "sections"}
    header.update(fields)
    if symbolic is not None:
        header["symbolic"] = {**header["symbolic"], **symbolic}
    return artifacts.pack(header, {n: bytes(v) for n, v in art.sections.items()})


def test_the_header_holds_symbols_constraints_and_specializations(symbolic_artifact):
    art = artifacts.unpack(symbolic_artifact)
    assert art.version == 3
    assert art.header["in_specs"] == ["f32[b,784]", "f32[b,10]", "f32[784,32]", "f32[32,10]"]
    assert art.header["out_specs"] == ["f32[b,10]", "f32[b]"]
    assert art.header["symbolic"] == {
        "symbols": ["b"],
        "constraints": ["b >= 1"],
        "specializations": [
            {"sizes": [2], "section": "executable.0"},
            {"sizes": [4], "section": "executable.1"},
        ],
    }
    assert art.header["executable_format"] == "pjrt"


def test_a_static_artifact_is_still_version_1():
    compiled = aotkit.jit(lambda x: x * 2).lower(aotkit.spec("f32[3]")).compile()
    assert artifacts.unpack(compiled.serialize()).version == 1


def test_a_symbolic_program_with_no_executable_has_no_format(mlp_export_bytes):
    data = aotkit.load_module(mlp_export_bytes).compile().serialize()
    art = artifacts.unpack(data)
    assert art.header["executable_format"] is None
    assert art.header["symbolic"]["specializations"] == []
    assert aotkit.load(data).specializations == ()


@pytest.fixture(scope="module")
def mlp_export_bytes() -> bytes:
    return programs.mlp_export().serialize()


CASES = {
    "constraint-as-code": (
        {"symbolic": {"constraints": ["__import__('os').system('echo hi') >= 1"]}},
        "header field 'symbolic' has a constraint that does not parse (symbolic constraint "
        "\"__import__('os').system('echo hi') >= 1\": cannot parse \"__import__('os')."
        "system('echo hi') >= 1\": unexpected character \"'\"; expected an integer "
        "expression over symbols such as 'b', '2*t + 1', 't // 8', 'mod(t, 8)')",
    ),
    "constraint-without-comparison": (
        {"symbolic": {"constraints": ["b"]}},
        "header field 'symbolic' has a constraint that does not parse (symbolic constraint "
        "'b': cannot parse 'b': a constraint compares two expressions with one of ==, !=, "
        ">=, <=, >, <; expected an integer expression over symbols such as 'b', '2*t + 1', "
        "'t // 8', 'mod(t, 8)')",
    ),
    "constraint-nested-deep": (
        {"symbolic": {"constraints": ["(" * 40 + "b" + ")" * 40 + " >= 1"]}},
        "header field 'symbolic' has a constraint that does not parse (symbolic constraint '"
        + "(" * 40
        + "b"
        + ")" * 40
        + " >= 1': cannot parse '"
        + "(" * 40
        + "b"
        + ")" * 40
        + " >= 1': it nests deeper than 32 levels; expected an integer expression over "
        "symbols such as 'b', '2*t + 1', 't // 8', 'mod(t, 8)')",
    ),
    "specialization-its-constraints-refuse": (
        {"symbolic": {"constraints": ["b <= 1"]}},
        "header field 'symbolic' has a specialization its program cannot have (the "
        "specialization: b = 2 breaks the constraint b <= 1; give sizes for which it holds)",
    ),
    "constraint-of-no-argument": (
        {"symbolic": {"constraints": ["z >= 1"]}},
        "header field 'symbolic' describes no program aotkit can call (its program: "
        "constraint z >= 1 names symbol 'z', which no argument's shape has; every symbol "
        "must size an argument)",
    ),
    # Found by fuzzing headers: ZeroDivisionError, KeyError and AttributeError escaped (and
    # a cache entry so written failed every later run of the program).
    "constraint-dividing-by-zero": (
        {"symbolic": {"constraints": ["b % 0 == 0"]}},
        "header field 'symbolic' has a constraint that does not parse (symbolic constraint "
        "'b % 0 == 0' "
        "divides by zero)",
    ),
    "equality-of-no-argument": (
        {"symbolic": {"constraints": ["c // b == 0"]}},
        "header field 'symbolic' describes no program aotkit can call (its program: "
        "constraint c // b == 0 names symbol 'c', which no argument's shape has; every "
        "symbol must size an argument)",
    ),
    "constraints-with-no-solution": (
        {"symbolic": {"constraints": ["1 - b >= 0", "-b == 2"]}},
        "header field 'symbolic' has a constraint that does not parse (symbolic constraint "
        "'-b == 2' can "
        "never hold (b >= 0 is a whole number); remove it)",
    ),
    "result-dividing-by-zero": (
        {"out_specs": ["f32[floordiv(b, b - b),10]", "f32[b]"]},
        "header field 'out_specs' holds a bad spec",
    ),
    "result-symbol-of-no-argument": (
        {"out_specs": ["f32[c,10]", "f32[b]"]},
        "header field 'symbolic' describes no program aotkit can call (its program: result "
        "f32[c,10] names symbol 'c', which no argument's shape has; every symbol must size "
        "an argument)",
    ),
    "symbols-not-the-specs'": (
        {"symbolic": {"symbols": ["b", "c"]}},
        'header field \'symbolic\' has symbols ["b", "c"], but its argument specs name ["b"]',
    ),
    "specialization-breaks-a-constraint": (
        {"symbolic": {"specializations": [{"sizes": [0], "section": "executable.0"}]}},
        "header field 'symbolic' has a specialization its program cannot have (the "
        "specialization: b = 0 breaks the constraint b >= 1; give sizes for which it holds)",
    ),
    "specialization-without-its-section": (
        {"symbolic": {"specializations": [{"sizes": [2], "section": "executable.9"}]}},
        "header field 'symbolic' names section \"executable.9\" for b = 2, which is not an "
        "executable section of the file",
    ),
    "specialization-in-the-portable-section": (
        {"symbolic": {"specializations": [{"sizes": [2], "section": "stablehlo"}]}},
        "header field 'symbolic' names section \"stablehlo\" for b = 2, which is not an "
        "executable section of the file",
    ),
    "specialization-twice": (
        {
            "symbolic": {
                "specializations": [
                    {"sizes": [2], "section": "executable.0"},
                    {"sizes": [2], "section": "executable.1"},
                ]
            }
        },
        "header field 'symbolic' lists the specialization b = 2 twice",
    ),
    "negative-size": (
        {"symbolic": {"specializations": [{"sizes": [-1], "section": "executable.0"}]}},
        'header field \'symbolic\' has a specialization {"section": "executable.0", '
        '"sizes": [-1]}, not {sizes: one size per symbol, section: a section name}',
    ),
    "format-without-executables": (
        {"symbolic": {"specializations": []}},
        "header field 'executable_format' is \"pjrt\" for a symbolic program with 0 "
        "specialization(s) and no executable for every shape; it names the format of their "
        "executables, and is null when there are none",
    ),
    "field-missing-keys": (
        {"symbolic_whole": {"symbols": ["b"]}},
        'header field \'symbolic\' is {"symbols": ["b"]}, not an object of symbols, '
        "constraints, specializations",
    ),
    "symbols-without-symbolic-field": (
        {"symbolic_whole": None},
        "header field 'in_specs' holds a bad spec (a symbolic dimension in a header without "
        "a symbolic field)",
    ),
    "dimension-that-does-not-parse": (
        {"in_specs": ["f32[b+,784]", "f32[b,10]", "f32[784,32]", "f32[32,10]"]},
        "header field 'in_specs' holds a bad spec (spec: bad dimension 'b+' in 'f32[b+,784]'; "
        "expected DTYPE[DIM,...]",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_crafted_header_is_refused(symbolic_artifact, case):
    fields, message = CASES[case]
    fields = dict(fields)
    if "symbolic_whole" in fields:
        whole = fields.pop("symbolic_whole")
        art = artifacts.unpack(symbolic_artifact)
        header = {k: v for k, v in art.header.items() if k != "sections"}
        header["symbolic"] = whole
        data = artifacts.pack(header, {n: bytes(v) for n, v in art.sections.items()})
    else:
        data = repack(symbolic_artifact, fields.pop("symbolic", None), **fields)
    with pytest.raises(ArtifactError) as e:
        aotkit.load(data)
    text = str(e.value)
    assert text.startswith(f"aotkit.load: <bytes>: {message}")
    assert text.endswith(REWRITE)


def _swapped_executables(data: bytes) -> bytes:
    """`data` with its two specializations' executables swapped: each section loads, and
    each takes the other batch size than its header entry says."""
    art = artifacts.unpack(data)
    header = {k: v for k, v in art.header.items() if k != "sections"}
    sections = {n: bytes(v) for n, v in art.sections.items()}
    sections["executable.0"], sections["executable.1"] = (
        sections["executable.1"],
        sections["executable.0"],
    )
    return artifacts.pack(header, sections)


def _refused_for(size: int, small: int, big: int) -> str:
    return (
        f"aotkit.load: <bytes>: its executable for b = {size} does not load (backend 'cpu': "
        "the serialized executable of 'mlp' takes "
        f"(f32[{big},784], f32[{big},10], f32[784,32], f32[32,10]) -> (f32[{big},10], "
        f"f32[{big}]), but its signature says (f32[{small},784], f32[{small},10], "
        f"f32[784,32], f32[32,10]) -> (f32[{small},10], f32[{small}]); the file's header "
        "does not describe its executable)"
    )


def test_a_specialization_that_does_not_load_is_refused_or_compiled_again(symbolic_artifact):
    data = _swapped_executables(symbolic_artifact)
    with pytest.raises(ArtifactError) as e:
        aotkit.load(data, recompile=False)
    assert str(e.value) == (
        _refused_for(2, 2, 4)
        + "; load it with recompile=True or 'auto' to compile its portable StableHLO"
    )
    with pytest.warns(ArtifactWarning) as caught:
        loaded = aotkit.load(data)
    assert [str(w.message) for w in caught] == [
        _refused_for(2, 2, 4)
        + "; compiling its portable StableHLO for that shape when it is called",
        _refused_for(4, 4, 2)
        + "; compiling its portable StableHLO for that shape when it is called",
    ]
    assert {w.filename for w in caught} == {__file__}
    assert loaded.specializations == ()
    # Called, each shape compiles the portable module and computes what the intact file does.
    rng = np.random.default_rng(0)
    w1, w2 = programs.mlp_params(rng)
    intact = aotkit.load(symbolic_artifact)
    for b in (2, 4):
        x, y = programs.mlp_inputs(rng, b)
        for got, want in zip(loaded(x, y, w1, w2), intact(x, y, w1, w2), strict=True):
            assert got.dtype == want.dtype
            np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-6)


def test_inspect_shows_symbols_and_specializations(run_cli, tmp_path, symbolic_artifact):
    path = tmp_path / "mlp.aotx"
    path.write_bytes(symbolic_artifact)
    code, out, _ = run_cli("inspect", path)
    assert code == 0
    lines = out.splitlines()
    assert lines[1:6] == [
        "function: mlp(args[0]: f32[b,784], args[1]: f32[b,10], args[2]: f32[784,32], "
        "args[3]: f32[32,10]) -> (out[0]: f32[b,10], out[1]: f32[b])",
        "symbolic: b; constraints: b >= 1",
        "specializations: 2 (other shapes compile from the portable StableHLO)",
        "  b = 2: f32[2,784], f32[2,10], f32[784,32], f32[32,10] (executable.0)",
        "  b = 4: f32[4,784], f32[4,10], f32[784,32], f32[32,10] (executable.1)",
    ]
    header = json.loads(out.split("symbolic: ", 2)[2].splitlines()[0])
    assert header["symbols"] == ["b"]
