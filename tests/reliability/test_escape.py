"""Escapes: a file must not make aotkit act outside its job (issue 26, class "escape").

A name read from a file reaches terminals through reprs, `aotkit inspect` and `run -v`; an
escape sequence or a newline in it must arrive escaped, never raw.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

import aotkit
from aotkit import artifacts
from aotkit.errors import ArtifactWarning

HOSTILE = "f\x1b[31mred\nnext line"
ESCAPED = "f\\x1b[31mred\\nnext line"


@pytest.fixture(scope="module")
def hostile(tmp_path_factory) -> str:
    data = aotkit.jit(lambda x: x + 1.0).lower(aotkit.spec("f32[2]")).compile().serialize()
    artifact = artifacts.unpack(data)
    header = {k: v for k, v in artifact.header.items() if k != "sections"}
    header["name"] = HOSTILE
    path = tmp_path_factory.mktemp("hostile") / "hostile.aotx"
    path.write_bytes(artifacts.pack(header, {n: bytes(v) for n, v in artifact.sections.items()}))
    return str(path)


def test_repr_and_name_escape_a_files_name(hostile):
    compiled = aotkit.load(hostile)
    assert compiled.name == ESCAPED
    assert "\x1b" not in repr(compiled) and "\n" not in repr(compiled)
    assert ESCAPED in repr(compiled)


@pytest.mark.parametrize("argv", [["inspect"], ["run", "-v", "--seed", "0"]], ids=str)
def test_the_cli_prints_a_files_name_escaped(hostile, argv):
    proc = subprocess.run(
        [sys.executable, "-m", "aotkit", argv[0], hostile, *argv[1:]],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "\x1b" not in proc.stdout + proc.stderr
    assert "red\nnext" not in proc.stdout + proc.stderr


def test_a_module_files_name_is_escaped(tmp_path):
    path = tmp_path / "m.mlir"
    path.write_text(
        'module @"evil\\1B[2Jname" {\n  func.func @main(%a: tensor<f32>) -> tensor<f32> {\n'
        "    return %a : tensor<f32>\n  }\n}\n"
    )
    lowered = aotkit.load_module(str(path))
    assert lowered.name == "evil\\x1b[2Jname" and "\x1b" not in repr(lowered)


@pytest.mark.parametrize("option", ["xla_dump_to", "xla_dump_hlo_as_text", "xla_gpu_cuda_data_dir"])
def test_header_options_that_write_files_are_refused(tmp_path, option):
    data = aotkit.jit(lambda x: x * 3.0).lower(aotkit.spec("f32[2]")).compile().serialize()
    artifact = artifacts.unpack(data)
    header = {k: v for k, v in artifact.header.items() if k != "sections"}
    target = tmp_path / "dumps"
    header["options"] = {option: str(target)}
    forged = artifacts.pack(header, {n: bytes(v) for n, v in artifact.sections.items()})
    with pytest.raises(aotkit.ArtifactError) as e:
        aotkit.load(forged)
    assert str(e.value) == (
        f"aotkit.load: <bytes>: header field 'options' has {option!r}, an option that names "
        "a path or makes the compiler write files; a file may carry only options that change "
        "what is compiled; the file is not one aotkit wrote, or was changed: write it again"
    )
    assert not target.exists()


def test_saving_drops_options_that_write_files_and_says_so(tmp_path):
    dumps = tmp_path / "dumps"
    lowered = aotkit.jit(lambda x: x * 3.0).lower(aotkit.spec("f32[2]"))
    compiled = lowered.compile(
        options={
            "xla_dump_to": str(dumps),
            "xla_cpu_enable_fast_math": False,
            "xla_hlo_evaluator_use_fast_path": True,  # (a bool: it names no path)
        }
    )
    with pytest.warns(ArtifactWarning) as w:
        data = compiled.serialize()
    assert [str(x.message) for x in w] == [
        "Compiled 'lambda': serialize: the artifact leaves out compile options the "
        "executable was compiled with, so a recompile from it goes without them: it has "
        "'xla_dump_to', an option that names a path or makes the compiler write files; a "
        "file may carry only options that change what is compiled"
    ]
    assert w[0].filename == __file__
    header = artifacts.unpack(data).header
    assert header["options"] == {
        "xla_cpu_enable_fast_math": False,
        "xla_hlo_evaluator_use_fast_path": True,
    }
    aotkit.load(data)
