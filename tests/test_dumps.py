"""IR dumps: file names and order, contents that parse back as MLIR, and configuration."""

from __future__ import annotations

import json
import threading

import numpy as np
import pytest
from jaxlib.mlir import ir

import aotkit
from aotkit import dumps, passes
from aotkit.api import jit, lower_function
from tests.helpers import ir_context
from tests.test_passes import DEFAULT_STEPS

F4 = aotkit.spec("f32[4]")


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for var in (dumps.ENV_DUMP_DIR, dumps.ENV_PRINT_IR_AFTER_ALL, dumps.ENV_PASS_TIMING):
        monkeypatch.delenv(var, raising=False)


def f(x):
    return (x * 1 + 0) + (x * 1 + 0)


def g(x, y):
    return x * y - 0


def _names(directory) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def _parses(path) -> str:
    with ir_context():
        return str(ir.Module.parse(path.read_text()))


def test_dumps_are_off_without_a_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert dumps.Dumper.create("f") is None
    assert aotkit.lower(f, F4).dump_paths == ()
    assert _names(tmp_path) == []


def test_two_functions_dump_with_the_documented_names(tmp_path, monkeypatch):
    monkeypatch.setenv(dumps.ENV_DUMP_DIR, str(tmp_path))
    lowered_f = aotkit.lower(f, F4)
    lowered_g = aotkit.lower(g, F4, F4)
    assert _names(tmp_path) == [
        "0000.f.01-traced.mlir",
        "0000.f.02-final.mlir",
        "0001.g.01-traced.mlir",
        "0001.g.02-final.mlir",
    ]
    for path in tmp_path.iterdir():
        _parses(path)
    traced = _parses(tmp_path / "0000.f.01-traced.mlir")
    assert traced.count("stablehlo.multiply") == 2
    assert (tmp_path / "0000.f.02-final.mlir").read_text() == lowered_f.as_text()
    assert (tmp_path / "0001.g.02-final.mlir").read_text() == lowered_g.as_text()
    assert "stablehlo.subtract" not in lowered_g.as_text()


def _traced_f() -> ir.Module:
    return aotkit.lower(f, F4, pipeline="none").module


def test_print_ir_after_all_dumps_every_pass_in_order(tmp_path, monkeypatch):
    monkeypatch.setenv(dumps.ENV_PRINT_IR_AFTER_ALL, "1")
    lower_function(f, (F4,), {}, dump_dir=tmp_path)
    labels = [label for label, _ in passes.run_pipeline(_traced_f(), "default", name="f")]
    assert labels == DEFAULT_STEPS
    expected = (
        ["0000.f.01-traced.mlir"]
        + [f"0000.f.{i + 2:02d}-after-{label}.mlir" for i, label in enumerate(labels)]
        + [f"0000.f.{len(labels) + 2:02d}-final.mlir"]
    )
    assert _names(tmp_path) == expected
    after_simplify = next(tmp_path.glob("*-after-aotkit-simplify.mlir"))
    assert "stablehlo.multiply" not in _parses(after_simplify)
    for path in tmp_path.iterdir():
        _parses(path)


def test_print_ir_after_all_flag_accepts_falsy_spellings(tmp_path, monkeypatch):
    monkeypatch.setenv(dumps.ENV_PRINT_IR_AFTER_ALL, "0")
    lower_function(f, (F4,), {}, dump_dir=tmp_path)
    assert _names(tmp_path) == ["0000.f.01-traced.mlir", "0000.f.02-final.mlir"]


def test_dump_dir_argument_wins_over_the_environment(tmp_path, monkeypatch):
    from_env, from_arg = tmp_path / "env", tmp_path / "arg" / "nested"
    monkeypatch.setenv(dumps.ENV_DUMP_DIR, str(from_env))
    lowered = lower_function(f, (F4,), {}, dump_dir=from_arg)
    assert not from_env.exists()
    assert _names(from_arg) == ["0000.f.01-traced.mlir", "0000.f.02-final.mlir"]
    assert {p.parent for p in lowered.dump_paths} == {from_arg.resolve()}


def test_module_numbers_continue_after_existing_files(tmp_path):
    (tmp_path / "0041.old.01-traced.mlir").write_text("module {}")
    (tmp_path / "notes.txt").write_text("not a dump")
    lower_function(f, (F4,), {}, dump_dir=tmp_path)
    assert "0042.f.01-traced.mlir" in _names(tmp_path)


def test_compile_stages_continue_the_numbering(tmp_path):
    lowered = lower_function(f, (F4,), {}, dump_dir=tmp_path)
    lowered.compile()
    hlo, cost = lowered.dump_paths[2:4]
    assert hlo.name == "0000.f.03-optimized.hlo"
    assert cost.name == "0000.f.04-cost.json"
    assert set(json.loads(cost.read_text())) >= {"bytes accessed", "flops"}


def test_compile_writes_optimized_hlo_and_cost(tmp_path):
    lowered = lower_function(f, (F4,), {}, dump_dir=tmp_path)
    lowered.compile()
    names = _names(tmp_path)
    assert names[:4] == [
        "0000.f.01-traced.mlir",
        "0000.f.02-final.mlir",
        "0000.f.03-optimized.hlo",
        "0000.f.04-cost.json",
    ]
    assert "HloModule" in (tmp_path / "0000.f.03-optimized.hlo").read_text()
    assert isinstance(json.loads((tmp_path / "0000.f.04-cost.json").read_text()), dict)


def test_jit_dumps_every_stage_once(tmp_path):
    jitted = jit(f, dump_dir=tmp_path)
    x = np.arange(4, dtype=np.float32)
    np.testing.assert_array_equal(np.asarray(jitted(x)), 2 * x)
    jitted(x)  # a cache hit: no new lowering, no new files
    assert _names(tmp_path) == [
        "0000.f.01-traced.mlir",
        "0000.f.02-final.mlir",
        "0000.f.03-optimized.hlo",
        "0000.f.04-cost.json",
        "0000.f.05-memory.json",
    ]


def test_pass_timing_report_is_dumped_on_request(tmp_path, monkeypatch):
    monkeypatch.setenv(dumps.ENV_PASS_TIMING, "yes")
    lower_function(f, (F4,), {}, dump_dir=tmp_path)
    assert _names(tmp_path)[-1] == "0000.f.03-pass-timing.txt"
    report = (tmp_path / "0000.f.03-pass-timing.txt").read_text().splitlines()
    assert report[0] == "pipeline 'default' on module 'f'"
    assert report[2].split()[0] == "aotkit-inline"
    assert report[-1].split()[0] == "total"


def test_file_names_are_portable():
    for name, part in [("<lambda>", "lambda"), ("a/b c", "a_b_c"), ("...", "module")]:
        assert dumps._file_part(name) == part


def test_concurrent_lowerings_get_distinct_numbers(tmp_path):
    errors = []

    def work():
        try:
            for _ in range(3):
                lower_function(f, (F4,), {}, dump_dir=tmp_path)
        except Exception as e:  # surfaced below; a thread cannot fail the test itself
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    names = _names(tmp_path)
    assert len(names) == 24
    assert sorted({n[:4] for n in names}) == [f"{i:04d}" for i in range(12)]


def test_hint_names_the_last_file_or_says_how_to_dump(tmp_path):
    assert dumps.hint(None) == (
        "set AOTKIT_DUMP_DIR=DIR (or pass jit(..., dump_dir=DIR)) to dump the module at each stage"
    )
    dumper = dumps.Dumper.create("f", tmp_path)
    assert dumps.hint(dumper) == dumps.HOW_TO_DUMP  # nothing written yet
    path = dumper.write("traced", "module {}")
    assert dumps.hint(dumper) == f"dumped to {path}"


def test_unusable_dump_dir_is_a_value_error(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(ValueError) as info:
        lower_function(f, (F4,), {}, dump_dir=blocker)
    assert str(info.value) == (
        f"dump_dir: cannot dump to '{blocker}': File exists; choose a writable directory"
    )
    monkeypatch.setenv(dumps.ENV_DUMP_DIR, str(blocker / "sub"))
    with pytest.raises(ValueError) as info:
        aotkit.lower(f, F4)
    assert str(info.value) == (
        f"AOTKIT_DUMP_DIR: cannot dump to '{blocker / 'sub'}': Not a directory; choose a "
        "writable directory"
    )


def test_dump_dir_must_not_be_empty():
    with pytest.raises(ValueError) as info:
        lower_function(f, (F4,), {}, dump_dir="")
    assert str(info.value) == (
        "dump_dir: empty directory path ''; pass a directory, or None for no dumps"
    )


def test_dump_dir_must_be_a_path():
    with pytest.raises(TypeError) as info:
        lower_function(f, (F4,), {}, dump_dir=3)
    assert str(info.value) == (
        "dump_dir: expected a directory path, got int 3; pass a str or pathlib.Path"
    )
