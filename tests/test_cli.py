"""The `aotkit` command line against its oracle, the Python API.

Most paths run in-process through `main(argv)`; a smaller set runs the real console script
and `python -m aotkit` as subprocesses (each costs a JAX import, about a second).
"""

from __future__ import annotations

import importlib.util
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from jaxlib.mlir import ir
from jaxlib.mlir.dialects import stablehlo

import aotkit
from aotkit import api, arguments, cli
from aotkit.cli import commands, inputs, report, targets
from tests.helpers import ir_context

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "mlp.py"
MLP_SHAPES = ["f32[8,4]", "f32[4,16]", "f32[16]", "f32[16,3]"]
AOTKIT_SCRIPT = Path(sys.executable).with_name("aotkit")

USER_CODE = """
import aotkit.numpy as anp

SIZE = 3

def double(x):
    return x + x

def affine(x, w, b):
    return anp.sin(x * w + b)

def scaled(x, n, y, *, act="tanh"):
    out = x * n + y
    return anp.tanh(out) if act == "tanh" else out

def branchy(x):
    if x > 0:
        return x
    return -x

def boom(x):
    return helper(x)

def helper(x):
    return 1 / 0

def pair(x):
    return {"s": anp.sin(x), "c": (anp.cos(x), x * 2)}

class Model:
    def forward(self, x):
        return anp.exp(x)

    def __call__(self, x, y):
        return x - y

model = Model()

def total(*xs):
    return sum(xs)
"""


def load(path: Path):
    spec = importlib.util.spec_from_file_location(f"oracle_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def specs(*texts):
    return [aotkit.spec(t) for t in texts]


@pytest.fixture
def user(tmp_path):
    path = tmp_path / "user.py"
    path.write_text(USER_CODE)
    return path


def fails(result, code: int, *fragments: str):
    """The run exited with `code`, printed nothing on stdout and no internal traceback."""
    rc, out, err = result
    assert rc == code, err
    assert out == ""
    assert "internal error" not in err
    assert "aotkit/cli/" not in err and "aotkit/api.py" not in err
    for fragment in fragments:
        assert fragment in err
    return err


def error_line(err: str) -> str:
    lines = err.strip().splitlines()
    return lines[-1]


# --- lower ---------------------------------------------------------------------------------------


def test_lower_example_prints_the_python_api_module(run_cli):
    code, out, err = run_cli("lower", f"{EXAMPLE}:predict", "--shapes", *MLP_SHAPES)
    assert code == 0, err
    oracle = aotkit.lower(load(EXAMPLE).predict, *specs(*MLP_SHAPES))
    assert out == oracle.as_text()
    assert "stablehlo.dot_general" in out


def test_lower_dotted_function(run_cli, user):
    code, out, _ = run_cli("lower", f"{user}:model.forward", "--shapes", "f32[2]")
    assert code == 0
    assert out == aotkit.lower(load(user).model.forward, *specs("f32[2]")).as_text()


def test_lower_static_arguments_keep_their_positions(run_cli, user):
    argv = ["lower", f"{user}:scaled", "--shapes", "f32[3]", "f32[3]"]
    code, out, err = run_cli(*argv, "--static", "n=2", "--static", "act='none'")
    assert code == 0, err
    x, y = specs("f32[3]", "f32[3]")
    oracle = api.lower_function(
        load(user).scaled,
        (x, 2, y),
        {"act": "none"},
        static_argnums=(1,),
        static_argnames=("act",),
    )
    assert out == oracle.as_text()
    assert "stablehlo.tanh" not in out


def test_lower_pipeline_none_and_textual(run_cli, user):
    fn, x = load(user).double, aotkit.spec("f32[3]")
    for pipeline in ("none", "builtin.module(func.func(canonicalize,cse))"):
        code, out, _ = run_cli(
            "lower", f"{user}:double", "--shapes", "f32[3]", "--pipeline", pipeline
        )
        assert code == 0
        assert out == aotkit.lower(fn, x, pipeline=pipeline).as_text()


def test_lower_debug_info_has_user_locations(run_cli, user):
    code, out, _ = run_cli("lower", f"{user}:double", "--shapes", "f32[3]", "--debug-info")
    assert code == 0
    assert out == aotkit.lower(load(user).double, *specs("f32[3]")).as_text(debug_info=True)
    assert f'loc("{user}":' in out


def test_lower_output_file(run_cli, user, tmp_path):
    dest = tmp_path / "out.mlir"
    code, out, _ = run_cli("lower", f"{user}:double", "--shapes", "f32[3]", "-o", dest)
    assert (code, out) == (0, "")
    assert dest.read_text() == aotkit.lower(load(user).double, *specs("f32[3]")).as_text()


def test_lower_pytree_output(run_cli, user):
    code, out, _ = run_cli("lower", f"{user}:pair", "--shapes", "f64[]")
    assert code == 0
    assert out == aotkit.lower(load(user).pair, *specs("f64[]")).as_text()


def test_lower_varargs_and_callable_objects(run_cli, user):
    module = load(user)
    code, out, _ = run_cli("lower", f"{user}:total", "--shapes", "i32[2]", "i32[2]", "i32[]")
    assert code == 0
    assert out == aotkit.lower(module.total, *specs("i32[2]", "i32[2]", "i32[]")).as_text()
    code, out, _ = run_cli("lower", f"{user}:model", "--shapes", "f32[2]", "f32[2]")
    assert code == 0
    assert out == aotkit.lower(module.model, *specs("f32[2]", "f32[2]")).as_text()


def test_lower_refuses_a_module_file(run_cli, tmp_path):
    err = fails(run_cli("lower", tmp_path / "m.mlir"), 1)
    assert err == (
        f"aotkit lower: error: target {str(tmp_path / 'm.mlir')!r} is not FILE.py:FN; "
        "`aotkit lower` traces a Python function (use `aotkit opt FILE.mlir` for module files)\n"
    )


def test_unwritable_output(run_cli, user, tmp_path):
    dest = tmp_path / "missing" / "out.mlir"
    err = fails(run_cli("lower", f"{user}:double", "--shapes", "f32[]", "-o", dest), 1)
    assert err == (
        f"aotkit lower: error: -o: cannot write {str(dest)!r}: No such file or directory; "
        "pick a writable path\n"
    )


def test_file_folder_is_importable_only_while_importing(run_cli, tmp_path):
    (tmp_path / "helper_mod_cli.py").write_text("def twice(x):\n    return x * 2\n")
    (tmp_path / "main_cli.py").write_text(
        "from helper_mod_cli import twice\n\ndef f(x):\n    return twice(x)\n"
    )
    before = list(sys.path)
    code, out, _ = run_cli("lower", f"{tmp_path / 'main_cli.py'}:f", "--shapes", "i32[2]")
    assert code == 0
    assert "stablehlo.multiply" in out
    assert sys.path == before


def parse(data: bytes) -> str:
    with ir_context():
        return str(ir.Module.parse(data))


def test_emit_bytecode_round_trips(run_cli, user, tmp_path):
    dest = tmp_path / "out.mlirbc"
    code, _, _ = run_cli(
        "lower",
        f"{user}:affine",
        "--shapes",
        "f32[3]",
        "f32[3]",
        "f32[]",
        "--emit",
        "bytecode",
        "-o",
        dest,
    )
    assert code == 0
    oracle = aotkit.lower(load(user).affine, *specs("f32[3]", "f32[3]", "f32[]"))
    assert dest.read_bytes().startswith(b"ML\xefR")
    assert parse(dest.read_bytes()) == oracle.as_text()


@pytest.mark.parametrize("version", [None, "minimum", "1.0.0"])
def test_emit_portable_artifact(run_cli, user, tmp_path, version):
    dest = tmp_path / "out.sa"
    extra = ["--target-version", version] if version else []
    code, _, err = run_cli(
        "lower", f"{user}:double", "--shapes", "f32[3]", "--emit", "portable", "-o", dest, *extra
    )
    assert code == 0, err
    with ir_context() as lc:
        module = stablehlo.deserialize_portable_artifact(lc.mlir, dest.read_bytes())
        text = str(module)
    assert "stablehlo.add %arg0, %arg0" in text


@pytest.mark.parametrize("version", ["0.1.0", "1.2", "99.0.0"])
def test_emit_portable_bad_target_version(run_cli, user, tmp_path, version):
    result = run_cli(
        "lower",
        f"{user}:double",
        "--shapes",
        "f32[3]",
        "--emit",
        "portable",
        "-o",
        tmp_path / "x",
        "--target-version",
        version,
    )
    err = fails(result, 1, f"--target-version {version!r} is not a StableHLO version")
    assert f"from {stablehlo.get_minimum_version()} to {stablehlo.get_current_version()}" in err


class FakeTerminal(io.StringIO):
    def isatty(self):
        return True


@pytest.mark.parametrize("emit", ["bytecode", "portable"])
def test_binary_emit_refuses_a_terminal(user, monkeypatch, capsys, emit):
    terminal = FakeTerminal()
    monkeypatch.setattr(sys, "stdout", terminal)
    code = cli.main(["lower", f"{user}:double", "--shapes", "f32[3]", "--emit", emit])
    err = capsys.readouterr().err
    assert code == 1
    assert terminal.getvalue() == ""
    assert error_line(err) == (
        f"aotkit lower: error: --emit {emit} writes binary data and stdout is a terminal; "
        "use -o FILE (or redirect stdout)"
    )


def test_dump_dir_writes_stage_files(run_cli, user, tmp_path):
    dump = tmp_path / "dumps"
    code, _, _ = run_cli("lower", f"{user}:double", "--shapes", "f32[3]", "--dump-dir", dump)
    assert code == 0
    names = sorted(p.name for p in dump.iterdir())
    assert names[0].endswith(".double.01-traced.mlir")
    assert any(n.endswith("-final.mlir") for n in names)


def test_print_ir_after_all_goes_to_stderr(run_cli, user, tmp_path):
    code, out, err = run_cli(
        "lower",
        f"{user}:double",
        "--shapes",
        "f32[3]",
        "--pipeline",
        "builtin.module(func.func(canonicalize,cse))",
        "--print-ir-after-all",
    )
    assert code == 0
    assert "// -----// IR Dump After canonicalize //----- //" in err
    assert "// -----// IR Dump After cse //----- //" in err
    assert (
        out
        == aotkit.lower(
            load(user).double,
            aotkit.spec("f32[3]"),
            pipeline="builtin.module(func.func(canonicalize,cse))",
        ).as_text()
    )
    assert os.environ.get("AOTKIT_PRINT_IR_AFTER_ALL") is None


# --- Bad input: one line, exit 1 (2 for usage) ------------------------------------------------


def test_missing_file(run_cli, tmp_path):
    missing = tmp_path / "nope.py"
    err = fails(run_cli("lower", f"{missing}:f", "--shapes", "f32[]"), 1)
    assert err == (
        f"aotkit lower: error: file {str(missing)!r} does not exist; give the path of a "
        "Python file\n"
    )


def test_file_that_fails_to_import_shows_user_traceback(run_cli, tmp_path):
    path = tmp_path / "broken.py"
    path.write_text("import math\n\nvalue = math.sqrt(-1)\n")
    err = fails(run_cli("lower", f"{path}:f", "--shapes", "f32[]"), 1)
    assert err.startswith("Traceback (most recent call last; aotkit's frames hidden):\n")
    assert f'File "{path}", line 3, in <module>' in err
    assert "importlib" not in err
    assert error_line(err) == (
        f"aotkit lower: error: importing {str(path)!r} failed: ValueError: math domain error"
    )


def test_file_with_syntax_error(run_cli, tmp_path):
    path = tmp_path / "syntax.py"
    path.write_text("def f(:\n    pass\n")
    err = fails(run_cli("lower", f"{path}:f", "--shapes", "f32[]"), 1)
    assert f'File "{path}", line 1' in err
    assert error_line(err).startswith(
        f"aotkit lower: error: importing {str(path)!r} failed: SyntaxError:"
    )


def test_file_that_exits_on_import(run_cli, tmp_path):
    path = tmp_path / "script.py"
    path.write_text("import sys\nsys.exit(3)\n")
    err = fails(run_cli("lower", f"{path}:f"), 1)
    assert error_line(err) == (
        f"aotkit lower: error: importing {str(path)!r} called sys.exit(3); put script code "
        "under `if __name__ == '__main__':`"
    )


def test_missing_function_suggests_names(run_cli, user):
    err = fails(run_cli("lower", f"{user}:dubble", "--shapes", "f32[]"), 1)
    assert err == f"aotkit lower: error: {user} has no attribute 'dubble'; did you mean double?\n"


def test_missing_method(run_cli, user):
    err = fails(run_cli("lower", f"{user}:model.zzz", "--shapes", "f32[]"), 1)
    assert (
        err
        == f"aotkit lower: error: {user}:model has no attribute 'zzz'; callables there: forward\n"
    )


def test_function_not_callable(run_cli, user):
    err = fails(run_cli("lower", f"{user}:SIZE", "--shapes", "f32[]"), 1)
    assert err == (
        f"aotkit lower: error: {user}:SIZE is not callable (it is int 3); name a function or "
        "another callable\n"
    )


@pytest.mark.parametrize("target", ["user.py", "user.py:", "user.py:1x"])
def test_target_without_function(run_cli, user, target):
    target = str(user.parent / target)
    err = fails(run_cli("lower", target, "--shapes", "f32[]"), 1)
    assert "write FILE.py:FN" in err


def test_too_many_shapes(run_cli, user):
    err = fails(run_cli("lower", f"{user}:double", "--shapes", "f32[]", "f32[2]"), 1)
    assert err == (
        f"aotkit lower: error: --shapes: {user}:double takes 1 array argument(s) (x) but got 2 "
        "spec(s): f32[], f32[2]; give one spec per array argument\n"
    )


def test_too_few_shapes(run_cli, user):
    err = fails(run_cli("lower", f"{user}:affine", "--shapes", "f32[]"), 1)
    assert err == (
        f"aotkit lower: error: --shapes: {user}:affine takes 3 array argument(s) (x, w, b) but "
        "got 1 spec(s): f32[]; add a spec for w, b (or --static NAME=VALUE)\n"
    )


def test_unknown_static_parameter(run_cli, user):
    err = fails(run_cli("lower", f"{user}:double", "--shapes", "f32[]", "--static", "m=2"), 1)
    assert (
        err
        == f"aotkit lower: error: --static: {user}:double has no parameter 'm'; its parameters: x\n"
    )


@pytest.mark.parametrize("text", ["f32[2,", "q7[3]", "f32[-1]", "f32[2.5]"])
def test_malformed_spec_is_a_usage_error(run_cli, user, text):
    err = fails(run_cli("lower", f"{user}:double", "--shapes", text), 2)
    assert "aotkit lower: error: argument --shapes: spec: " in err
    assert repr(text) in err
    assert "usage: aotkit lower" in err


@pytest.mark.parametrize(
    "text, message",
    [
        ("n", "expected NAME=VALUE with NAME a parameter of FN, got 'n'; e.g. --static n=3"),
        ("n=abc", "value of 'n' must be a Python literal"),
    ],
)
def test_malformed_static_is_a_usage_error(run_cli, user, text, message):
    err = fails(run_cli("lower", f"{user}:scaled", "--static", text), 2)
    assert f"argument --static: {message}" in err


def test_user_code_error_during_tracing_shows_only_user_frames(run_cli, user):
    err = fails(run_cli("lower", f"{user}:boom", "--shapes", "f32[]"), 1)
    assert f'File "{user}", line 22, in boom' in err
    assert f'File "{user}", line 25, in helper' in err
    assert "aotkit" not in err.split("\n", 1)[1].rsplit("\n", 2)[0]
    assert error_line(err) == (
        f"aotkit lower: error: lowering {user}:boom failed: ZeroDivisionError: division by zero"
    )


def test_tracer_error_points_at_the_users_line(run_cli, user):
    err = fails(run_cli("lower", f"{user}:branchy", "--shapes", "f32[]", "--no-autograph"), 1)
    assert f'File "{user}", line 17, in branchy' in err
    assert error_line(err).startswith(
        f"aotkit lower: error: lowering {user}:branchy failed: TypeError:"
    )


def test_traceback_flag_shows_aotkits_frames(run_cli, user):
    rc, _, err = run_cli("lower", f"{user}:boom", "--shapes", "f32[]", "--traceback")
    assert rc == 1
    assert "aotkit/api.py" in err and "aotkit/cli/" in err
    assert error_line(err).endswith("ZeroDivisionError: division by zero")


def test_unknown_pass(run_cli, user):
    err = fails(
        run_cli(
            "lower",
            f"{user}:double",
            "--shapes",
            "f32[]",
            "--pipeline",
            "builtin.module(canonicalise)",
        ),
        1,
    )
    assert err == (
        "aotkit lower: error: --pipeline 'builtin.module(canonicalise)': unknown pass "
        "'canonicalise'; nearest registered: canonicalize\n"
    )


def test_internal_error_is_one_line(run_cli, user, monkeypatch):
    # A builtin raising inside aotkit's frames stands in for a bug in aotkit.
    monkeypatch.setattr(arguments, "function_name", {}.__getitem__)
    rc, out, err = run_cli("lower", f"{user}:double", "--shapes", "f32[]")
    assert (rc, out) == (1, "")
    assert err.startswith("aotkit lower: error: internal error: KeyError: <function double")
    assert err.endswith("; rerun with --traceback and report it with the command line\n")
    assert err.count("\n") == 1


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["frobnicate"],
        ["lower"],
        ["lower", "x.py:f", "--emit", "llvm"],
        ["run", "x.py:f", "--repeat", "0"],
        ["compile", "x.py:f", "--frontend", "torch"],
    ],
)
def test_usage_errors_exit_2(run_cli, argv):
    rc, out, err = run_cli(*argv)
    assert rc == 2
    assert "usage: aotkit" in err


def test_help_exits_0(run_cli):
    rc, out, _ = run_cli("lower", "--help")
    assert rc == 0
    assert "--shapes" in out and "--emit" in out


# --- opt ---------------------------------------------------------------------------------------


@pytest.fixture
def module_file(user, tmp_path):
    """`(x*1 + 0) + (x*1 + 0)` as StableHLO text before any pipeline."""
    path = tmp_path / "dup.mlir"
    path.write_text(
        aotkit.lower(
            lambda x: (x * 1 + 0) + (x * 1 + 0), aotkit.spec("f32[3]"), pipeline="none"
        ).as_text()
    )
    return path


def test_opt_runs_the_default_pipeline(run_cli, module_file):
    rc, out, err = run_cli("opt", module_file)
    assert rc == 0, err
    assert "stablehlo.add %arg0, %arg0" in out
    assert "stablehlo.multiply" not in out
    assert out == aotkit.lower(lambda x: (x * 1 + 0) + (x * 1 + 0), aotkit.spec("f32[3]")).as_text()


def test_opt_textual_pipeline_and_bytecode_input(run_cli, module_file, tmp_path):
    bc = tmp_path / "dup.mlirbc"
    rc, _, _ = run_cli("opt", module_file, "--pipeline", "none", "--emit", "bytecode", "-o", bc)
    assert rc == 0
    assert parse(bc.read_bytes()) == module_file.read_text()
    rc, out, _ = run_cli("opt", bc, "--pipeline", "builtin.module(func.func(cse))")
    assert rc == 0
    assert out.count("stablehlo.multiply") == 1


def test_opt_reads_portable_artifacts(run_cli, module_file, tmp_path):
    sa = tmp_path / "dup.sa"
    assert run_cli("opt", module_file, "--pipeline", "none", "--emit", "portable", "-o", sa)[0] == 0
    rc, out, _ = run_cli("opt", sa)
    assert rc == 0
    assert "stablehlo.add %arg0, %arg0" in out


@pytest.mark.parametrize(
    "content, message",
    [
        (
            b"module {\n  func.func @main( }\n",
            "{path} is not valid MLIR text: line 2, column 19: expected non-function type; "
            "expected StableHLO MLIR text, MLIR bytecode,",
        ),
        (
            b"ML\xefR\rMLIR23.0.0git\x00\x01",
            "{path} is not valid MLIR bytecode: attempting to parse a byte at the end of the "
            "bytecode; expected StableHLO MLIR text, MLIR bytecode,",
        ),
        (
            b"module {\n  func.func private @f() {\n    return\n  }\n}\n",
            "{path}: the module has no @main function (functions: @f);",
        ),
    ],
    ids=["text", "truncated-bytecode", "no-main"],
)
def test_opt_malformed_module_file(run_cli, tmp_path, content, message):
    path = tmp_path / "bad.mlir"
    path.write_bytes(content)
    err = fails(run_cli("opt", path), 1)
    assert err.startswith("aotkit opt: error: load_module: " + message.format(path=path))
    assert err.count("\n") == 1


def test_opt_missing_file(run_cli, tmp_path):
    err = fails(run_cli("opt", tmp_path / "nope.mlir"), 1)
    assert err == (
        f"aotkit opt: error: {tmp_path / 'nope.mlir'}: no such file; the target is an artifact "
        "(.aotx, written by `aotkit compile ... -o F.aotx`), a module file (.mlir, .mlirbc) or "
        "FILE.py:FN\n"
    )


def test_opt_unknown_pass(run_cli, module_file):
    err = fails(run_cli("opt", module_file, "--pipeline", "builtin.module(cse,frobnicate)"), 1)
    assert "unknown pass 'frobnicate'" in err


def test_opt_print_ir_after_all_and_dump_dir(run_cli, module_file, tmp_path):
    dump = tmp_path / "d"
    rc, _, err = run_cli(
        "opt",
        module_file,
        "--pipeline",
        "builtin.module(func.func(cse))",
        "--print-ir-after-all",
        "--dump-dir",
        dump,
    )
    assert rc == 0
    assert "// -----// IR Dump After cse //----- //" in err
    assert any("after-cse" in p.name for p in dump.iterdir())


# --- Progress -------------------------------------------------------------------------------------


class FakeTerminalErr(io.StringIO):
    def isatty(self):
        return True


@pytest.mark.parametrize("quiet", [False, True])
def test_progress_on_a_terminal_only(user, monkeypatch, capsys, quiet, tmp_path):
    slow = tmp_path / "slow.py"
    slow.write_text("import time\n\ndef f(x):\n    time.sleep(0.3)\n    return x\n")
    monkeypatch.setattr(report, "PROGRESS_AFTER_S", 0.0)
    terminal = FakeTerminalErr()
    monkeypatch.setattr(sys, "stderr", terminal)
    argv = ["lower", f"{slow}:f", "--shapes", "f32[]"] + (["-q"] if quiet else [])
    assert cli.main(argv) == 0
    shown = terminal.getvalue()
    if quiet:
        assert shown == ""
    else:
        assert f"\raotkit: lowering {slow}:f... " in shown
        assert shown.endswith("\r\x1b[K")


def test_no_progress_when_stderr_is_not_a_terminal(run_cli, tmp_path, monkeypatch):
    slow = tmp_path / "slow.py"
    slow.write_text("import time\n\ndef f(x):\n    time.sleep(0.1)\n    return x\n")
    monkeypatch.setattr(report, "PROGRESS_AFTER_S", 0.0)
    rc, _, err = run_cli("lower", f"{slow}:f", "--shapes", "f32[]")
    assert (rc, err) == (0, "")


# --- Subprocesses: the real console script and `python -m aotkit` ---------------------------------


def run_process(argv, **kwargs):
    return subprocess.run(argv, capture_output=True, cwd=ROOT, timeout=120, **kwargs)


def test_readme_first_command_console_script():
    argv = [str(AOTKIT_SCRIPT), "lower", "examples/mlp.py:predict", "--shapes", *MLP_SHAPES]
    proc = run_process(argv, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    assert proc.stdout == aotkit.lower(load(EXAMPLE).predict, *specs(*MLP_SHAPES)).as_text()


def test_python_dash_m_matches(user):
    proc = run_process(
        [
            sys.executable,
            "-m",
            "aotkit",
            "lower",
            f"{user}:affine",
            "--shapes",
            "f32[3]",
            "f32[3]",
            "f32[]",
        ],
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    oracle = aotkit.lower(load(user).affine, *specs("f32[3]", "f32[3]", "f32[]"))
    assert proc.stdout == oracle.as_text()


def test_bytecode_to_a_pipe(user):
    proc = run_process(
        [str(AOTKIT_SCRIPT), "lower", f"{user}:double", "--shapes", "f32[3]", "--emit", "bytecode"]
    )
    assert proc.returncode == 0, proc.stderr
    assert parse(proc.stdout) == aotkit.lower(load(user).double, *specs("f32[3]")).as_text()


@pytest.mark.parametrize(
    "argv, code, last_line",
    [
        (
            ["lower", "nope.py:f", "--shapes", "f32[]"],
            1,
            "aotkit lower: error: file 'nope.py' does not exist; give the path of a Python file",
        ),
        (
            ["lower", "examples/mlp.py:predict", "--shapes", "f32[2,"],
            2,
            "aotkit lower: error: argument --shapes: spec: cannot parse 'f32[2,'; expected",
        ),
        (
            ["lower", "examples/mlp.py:nope"],
            1,
            "aotkit lower: error: examples/mlp.py has no attribute 'nope'; callables there:",
        ),
    ],
    ids=["missing-file", "malformed-spec", "missing-function"],
)
def test_subprocess_bad_input(argv, code, last_line):
    proc = run_process([str(AOTKIT_SCRIPT), *argv], text=True)
    assert proc.returncode == code
    assert proc.stdout == ""
    assert "Traceback" not in proc.stderr
    assert error_line(proc.stderr).startswith(last_line)


def test_subprocess_import_failure_shows_user_traceback(tmp_path):
    path = tmp_path / "broken.py"
    path.write_text("def f(x):\n    return x\n\nraise RuntimeError('not today')\n")
    proc = run_process(
        [sys.executable, "-m", "aotkit", "lower", f"{path}:f", "--shapes", "f32[]"], text=True
    )
    assert proc.returncode == 1
    assert f'File "{path}", line 4, in <module>' in proc.stderr
    assert "aotkit/" not in proc.stderr.replace(str(path), "")
    assert error_line(proc.stderr) == (
        f"aotkit lower: error: importing {str(path)!r} failed: RuntimeError: not today"
    )


def test_subprocess_malformed_mlir(tmp_path):
    path = tmp_path / "bad.mlir"
    path.write_text("module { this is not mlir }\n")
    proc = run_process([str(AOTKIT_SCRIPT), "opt", str(path)], text=True)
    assert proc.returncode == 1
    assert proc.stderr.startswith(f"aotkit opt: error: load_module: {path} is not valid MLIR text")
    assert proc.stderr.count("\n") == 1


# --- compile -------------------------------------------------------------------------------------


def test_compile_prints_the_optimized_hlo(run_cli, user):
    code, out, err = run_cli("compile", f"{user}:affine", "--shapes", "f32[3]", "f32[3]", "f32[]")
    assert code == 0, err
    oracle = aotkit.lower(load(user).affine, *specs("f32[3]", "f32[3]", "f32[]")).compile()
    assert out == oracle.as_text()
    assert out.startswith("HloModule affine")


@pytest.mark.parametrize("emit", ["cost", "memory"])
def test_compile_analyses_as_json(run_cli, user, emit):
    code, out, _ = run_cli("compile", f"{user}:double", "--shapes", "f32[16]", "--emit", emit)
    assert code == 0
    compiled = aotkit.lower(load(user).double, *specs("f32[16]")).compile()
    expected = compiled.cost_analysis() if emit == "cost" else compiled.memory_analysis().to_dict()
    assert json.loads(out) == pytest.approx(expected)


def test_compile_on_the_interpreter(run_cli, user):
    code, out, _ = run_cli(
        "compile", f"{user}:double", "--shapes", "f32[3]", "--backend", "interpreter"
    )
    assert code == 0
    oracle = aotkit.lower(load(user).double, *specs("f32[3]")).compile(backend="interpreter")
    assert out == oracle.as_text()
    err = fails(
        run_cli(
            "compile",
            f"{user}:double",
            "--shapes",
            "f32[3]",
            "--backend",
            "interpreter",
            "--emit",
            "cost",
        ),
        1,
    )
    assert err == (
        "aotkit compile: error: --emit cost: backend 'interpreter' gives no cost analysis; "
        "use --backend cpu\n"
    )


def test_unknown_backend(run_cli, user):
    # A usage error (exit 2), worded for the command line: no `backends.get:` prefix.
    err = fails(run_cli("compile", f"{user}:double", "--shapes", "f32[3]", "--backend", "nope"), 2)
    assert error_line(err).startswith(
        "aotkit compile: error: argument --backend: unknown backend 'nope'; available here: "
        "cpu, interpreter"
    )
    assert error_line(err).endswith("(`aotkit backends` lists them with their devices)")
    assert "backends.get" not in err
    err = fails(run_cli("compile", f"{user}:double", "--shapes", "f32[3]", "--backend", "cpux"), 2)
    assert "unknown backend 'cpux'; did you mean 'cpu'? available here: cpu" in err


def test_compile_module_file(run_cli, module_file, tmp_path):
    code, out, _ = run_cli("compile", module_file, "-o", tmp_path / "out.hlo")
    assert (code, out) == (0, "")
    assert (tmp_path / "out.hlo").read_text() == aotkit.load_module(module_file).compile().as_text()


def test_module_file_takes_no_shapes(run_cli, module_file):
    err = fails(run_cli("compile", module_file, "--shapes", "f32[3]"), 1)
    assert err == (
        f"aotkit compile: error: {module_file}: --shapes and --static apply to FILE.py:FN "
        "targets; a module file's signature comes from its @main\n"
    )


# --- run -----------------------------------------------------------------------------------------


def expected_outputs(out) -> str:
    from jax import tree_util

    text = ""
    for path, leaf in tree_util.tree_flatten_with_path(out)[0]:
        x = np.asarray(leaf)
        text += f"out{tree_util.keystr(path)}: {aotkit.ShapeDtype(x.shape, x.dtype)}\n"
        text += commands._format_array(x) + "\n"
    return text


@pytest.fixture
def npy_inputs(tmp_path):
    rng = np.random.default_rng(7)
    arrays = [rng.standard_normal(3).astype(np.float32) for _ in range(2)]
    arrays.append(np.float32(0.5) * np.ones((), np.float32))
    paths = []
    for i, a in enumerate(arrays):
        paths.append(tmp_path / f"in{i}.npy")
        np.save(paths[-1], a)
    return arrays, paths


def test_run_on_npy_inputs(run_cli, user, npy_inputs):
    arrays, paths = npy_inputs
    code, out, err = run_cli("run", f"{user}:affine", "--inputs", *paths)
    assert code == 0, err
    compiled = aotkit.lower(load(user).affine, *arrays).compile()
    assert out == expected_outputs(compiled(*arrays))
    time = r"\d+(\.\d+)? (s|ms|us|ns)"
    assert re.fullmatch(rf"aotkit run: lower {time}, compile {time}, run {time}\n", err)


def test_run_seeded_random_inputs(run_cli, user):
    code, out, err = run_cli("run", f"{user}:pair", "--shapes", "f64[4]", "--seed", "3", "-q")
    assert (code, err) == (0, "")
    x = np.random.default_rng(3).standard_normal(4)
    compiled = aotkit.lower(load(user).pair, *specs("f64[4]")).compile()
    assert out == expected_outputs(compiled(x))
    assert "out['c'][0]: f64[4]" in out
    assert run_cli("run", f"{user}:pair", "--shapes", "f64[4]", "--seed", "3", "-q")[1] == out
    assert run_cli("run", f"{user}:pair", "--shapes", "f64[4]", "--seed", "4", "-q")[1] != out


@pytest.mark.parametrize("text", ["i32[5]", "u8[2]", "bool[3]", "bf16[2]", "c64[2]"])
def test_run_random_inputs_of_every_kind(run_cli, user, text):
    code, out, err = run_cli("run", f"{user}:double", "--shapes", text, "-q")
    assert code == 0, err
    x = inputs.random_input(np.random.default_rng(0), aotkit.spec(text))
    assert x.dtype == aotkit.spec(text).dtype
    compiled = aotkit.lower(load(user).double, aotkit.spec(text)).compile()
    assert out == expected_outputs(compiled(x))


def test_run_repeat_reports_best_time(run_cli, user):
    code, _, err = run_cli("run", f"{user}:double", "--shapes", "f32[3]", "--repeat", "3")
    assert code == 0
    assert ", run best of 3: " in err


def test_run_module_file(run_cli, module_file, tmp_path):
    x = np.arange(3, dtype=np.float32)
    np.save(tmp_path / "x.npy", x)
    code, out, _ = run_cli("run", module_file, "--inputs", tmp_path / "x.npy", "-q")
    assert code == 0
    assert out == expected_outputs(aotkit.load_module(module_file).compile()(x))


def test_run_input_mismatch(run_cli, user, npy_inputs):
    _, paths = npy_inputs
    err = fails(
        run_cli(
            "run", f"{user}:affine", "--shapes", "f32[3]", "f32[4]", "f32[]", "--inputs", *paths
        ),
        1,
    )
    assert err == (
        f"aotkit run: error: --inputs: {str(paths[1])!r} holds f32[3] but argument w is f32[4]; "
        "save the array with that shape and dtype\n"
    )
    err = fails(
        run_cli(
            "run", f"{user}:affine", "--shapes", "f32[3]", "f32[3]", "f32[]", "--inputs", *paths[:2]
        ),
        1,
    )
    assert err == (
        f"aotkit run: error: --inputs: {user}:affine takes 3 array leaf(s) (x: f32[3], w: f32[3], "
        "b: f32[]) but got 2 file(s); give one .npy file per array leaf, in flat order, or one "
        ".npz file keyed by leaf path (see aotkit run --help)\n"
    )


def test_inputs_that_are_not_numbers_or_numpy_files(run_cli, user, npy_inputs, tmp_path):
    """A file without NumPy's magic was called "pickled (object) data" with NumPy's advice
    to load it with pickle; a text array's dtype error named neither the file nor the
    argument."""
    _, paths = npy_inputs
    garbage = tmp_path / "garbage.npy"
    garbage.write_bytes(b"garbage\n")
    empty = tmp_path / "empty.npy"
    empty.write_bytes(b"")
    text = tmp_path / "text.npy"
    np.save(text, np.array(["abc", "de"]))
    shapes = ["--shapes", "f32[3]", "f32[3]", "f32[]", "--inputs", paths[0]]
    fix = "save inputs with numpy.save or numpy.savez"
    err = fails(run_cli("run", f"{user}:affine", *shapes, garbage, paths[2]), 1)
    assert err == (
        f"aotkit run: error: --inputs: cannot read {str(garbage)!r} as a .npy or .npz file (it "
        "is not a NumPy file: it starts with b'garbag', not b'\\x93NUMPY' (.npy) or b'PK' "
        f"(.npz)); {fix}\n"
    )
    err = fails(run_cli("run", f"{user}:affine", *shapes, empty, paths[2]), 1)
    assert err == (
        f"aotkit run: error: --inputs: cannot read {str(empty)!r} as a .npy or .npz file (it "
        f"is empty); {fix}\n"
    )
    err = fails(run_cli("run", f"{user}:affine", *shapes, text, paths[2]), 1)
    assert err == (
        f"aotkit run: error: --inputs: {str(text)!r} holds an array of dtype <U3, which no "
        "program takes (numbers and booleans only); save the array as it should be passed\n"
    )


def test_run_module_file_input_count(run_cli, module_file, npy_inputs):
    _, paths = npy_inputs
    err = fails(run_cli("run", module_file, "--inputs", *paths[:2]), 1)
    assert err == (
        "aotkit run: error: --inputs: lambda takes 1 array leaf(s) (args[0]: f32[3]) but got 2 "
        "file(s); give one .npy file per array leaf, in flat order, or one .npz file keyed by "
        "leaf path (see aotkit run --help)\n"
    )


def test_run_bad_input_files(run_cli, user, tmp_path):
    err = fails(run_cli("run", f"{user}:double", "--inputs", tmp_path / "none.npy"), 1)
    assert err == (
        f"aotkit run: error: --inputs: file {str(tmp_path / 'none.npy')!r} does not exist; give "
        "one .npy file per array leaf, in flat order, or one .npz file keyed by leaf path\n"
    )
    (tmp_path / "t.npy").write_text("hello")
    err = fails(run_cli("run", f"{user}:double", "--inputs", tmp_path / "t.npy"), 1)
    assert err.startswith(f"aotkit run: error: --inputs: cannot read {str(tmp_path / 't.npy')!r}")


# --- backends ------------------------------------------------------------------------------------


def test_backends_lists_the_registry(run_cli):
    import aotkit.backends

    code, out, _ = run_cli("backends")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["NAME", "PLATFORM", "VERSION", "DEVICES"]
    infos = aotkit.backends.available()
    assert len(lines) == len(infos) + 2  # one line per backend, and the default's
    for info in infos:
        row = next(line for line in lines[1:] if line[3:].split()[0] == info.name)
        assert row[3:].split()[1] == info.platform
        assert info.version in row
        assert row.split()[-1] == str(info.device_count)
        assert row.startswith("*" if info.name == aotkit.backends.default_name()[0] else " ")


# --- Subprocesses: compile, run, backends ------------------------------------------------------


def test_subprocess_compile_matches_the_api(user):
    proc = run_process(
        [str(AOTKIT_SCRIPT), "compile", f"{user}:double", "--shapes", "f32[3]"], text=True
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == aotkit.lower(load(user).double, *specs("f32[3]")).compile().as_text()


def test_subprocess_run_on_inputs(user, npy_inputs):
    arrays, paths = npy_inputs
    argv = [sys.executable, "-m", "aotkit", "run", f"{user}:affine", "--inputs", *map(str, paths)]
    proc = run_process(argv, text=True)
    assert proc.returncode == 0, proc.stderr
    compiled = aotkit.lower(load(user).affine, *arrays).compile()
    assert proc.stdout == expected_outputs(compiled(*arrays))
    assert proc.stderr.startswith("aotkit run: lower ")


def test_subprocess_backends():
    proc = run_process([str(AOTKIT_SCRIPT), "backends"], text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0].split() == ["NAME", "PLATFORM", "VERSION", "DEVICES"]
    assert {line[3:].split()[0] for line in proc.stdout.splitlines()[1:-1]} >= {
        "cpu",
        "interpreter",
    }
    assert re.fullmatch(
        r"\* the default backend is '\w+' \((no accelerator here|the accelerator JAX picks)\); "
        r"--backend or AOTKIT_BACKEND chooses another",
        proc.stdout.splitlines()[-1],
    )


@pytest.mark.parametrize(
    "extra, code, last_line",
    [
        (
            ["--backend", "nope"],
            2,
            "aotkit compile: error: argument --backend: unknown backend 'nope';",
        ),
        (
            ["--pipeline", "builtin.module(cse,frobnicate)"],
            1,
            "aotkit compile: error: --pipeline 'builtin.module(cse,frobnicate)': unknown pass "
            "'frobnicate'",
        ),
    ],
    ids=["unknown-backend", "unknown-pass"],
)
def test_subprocess_compile_bad_options(user, extra, code, last_line):
    argv = [str(AOTKIT_SCRIPT), "compile", f"{user}:double", "--shapes", "f32[3]", *extra]
    proc = run_process(argv, text=True)
    assert proc.returncode == code
    assert proc.stdout == ""
    assert "Traceback" not in proc.stderr
    assert error_line(proc.stderr).startswith(last_line)


# --- Issue 22: pytree --shapes, leaf names, .npz inputs, option order, outputs -----------------

PYTREE_CODE = """
import aotkit.numpy as anp

def loss(params, x, labels):
    logits = x @ params["w"] + params["b"]
    return anp.mean((logits - labels) ** 2)

def layers(ws, x):
    for w in ws:
        x = anp.tanh(x @ w)
    return {"y": x, "n": (x.sum(),)}
"""
PARAMS = '{"w": "f32[4,3]", "b": "f32[3]"}'
LOSS_SHAPES = [PARAMS, "f32[8,4]", "f32[8,3]"]


@pytest.fixture
def pytree_user(tmp_path):
    path = tmp_path / "model.py"
    path.write_text(PYTREE_CODE)
    return path


@pytest.fixture
def loss_inputs(tmp_path):
    rng = np.random.default_rng(1)
    arrays = {
        "params['w']": rng.standard_normal((4, 3)).astype(np.float32),
        "params['b']": rng.standard_normal(3).astype(np.float32),
        "x": rng.standard_normal((8, 4)).astype(np.float32),
        "labels": rng.standard_normal((8, 3)).astype(np.float32),
    }
    params = {"w": arrays["params['w']"], "b": arrays["params['b']"]}
    return arrays, (params, arrays["x"], arrays["labels"])


def save_npz(path, arrays):
    np.savez(path, **arrays)
    return path


@pytest.mark.parametrize(
    "shapes",
    [
        LOSS_SHAPES,
        ["{w: f32[4,3], b: f32[3]}", "f32[8,4]", "f32[8,3]"],
        ["{'b': 'f32[3]', 'w': 'f32[4,3]'}", "f32[8,4]", "f32[8,3]"],
        # a spec in quotes at the top level too, as inside a pytree (it was refused)
        ["{'b': 'f32[3]', 'w': 'f32[4,3]'}", '"f32[8,4]"', "'f32[8,3]'"],
    ],
    ids=["json", "bare", "single-quotes", "quoted-specs"],
)
def test_pytree_shapes_lower_like_the_api(run_cli, pytree_user, shapes):
    code, out, err = run_cli("lower", f"{pytree_user}:loss", "--shapes", *shapes)
    assert code == 0, err
    params = {"w": aotkit.spec("f32[4,3]"), "b": aotkit.spec("f32[3]")}
    oracle = aotkit.lower(load(pytree_user).loss, params, *specs("f32[8,4]", "f32[8,3]"))
    assert out == oracle.as_text()


def test_pytree_shapes_lists_and_tuples(run_cli, pytree_user):
    for text, ws in [
        ('["f32[2,2]", "f32[2,2]"]', [aotkit.spec("f32[2,2]")] * 2),
        ("(f32[2,2],)", (aotkit.spec("f32[2,2]"),)),
    ]:
        code, out, err = run_cli("lower", f"{pytree_user}:layers", "--shapes", text, "f32[1,2]")
        assert code == 0, err
        assert out == aotkit.lower(load(pytree_user).layers, ws, aotkit.spec("f32[1,2]")).as_text()


@pytest.mark.parametrize(
    "text, message",
    [
        (
            '{"w": f32[4,3}',
            """at character 10 ('[') of '{"w": f32[4,3}': spec f32[... has no closing ']'; """
            "add ']'",
        ),
        (
            '{"w" "f32[4,3]"}',
            """at character 6 ('"') of '{"w" "f32[4,3]"}': expected ':' after key 'w'; """
            'write "KEY": SPEC',
        ),
        (
            '["f32[2]" "f32[3]"]',
            """at character 11 ('"') of '["f32[2]" "f32[3]"]': expected ',' or ']'; separate """
            "entries with commas",
        ),
        (
            '{"a": f32[1], "a": f32[2]}',
            """at character 15 ('"') of '{"a": f32[1], "a": f32[2]}': key 'a' appears twice; """
            "give each key once",
        ),
        (
            "[f32]",
            "at character 5 (']') of '[f32]': expected '[' after dtype 'f32'; write f32[DIM,...]",
        ),
        (
            "[f32[2]] x",
            "at character 10 ('x') of '[f32[2]] x': unexpected text after the pytree's end; "
            "remove it",
        ),
        (
            '{"w": "f32[4,3]',
            """at character 7 ('"') of '{"w": "f32[4,3]': the string opened here has no """
            """closing "; add \"""",
        ),
    ],
    ids=[
        "unclosed-dims",
        "missing-colon",
        "missing-comma",
        "duplicate-key",
        "no-dims",
        "trailing",
        "unclosed-string",
    ],
)
def test_pytree_syntax_errors_say_where(run_cli, pytree_user, text, message):
    err = fails(
        run_cli("lower", f"{pytree_user}:loss", "--shapes", text, "f32[8,4]", "f32[8,3]"), 2
    )
    assert error_line(err) == (
        f"aotkit lower: error: argument --shapes: spec 1 of 3: {message} (a pytree is JSON with "
        """specs as leaves: {"w": "f32[4,3]"}, ["f32[2]"], ("f32[2]",))"""
    )


def test_pytree_bad_leaf_names_the_leaf(run_cli, pytree_user):
    err = fails(run_cli("lower", f"{pytree_user}:loss", "--shapes", "f32[2]", '{"w": "q7[3]"}'), 2)
    assert error_line(err).startswith(
        """aotkit lower: error: argument --shapes: spec 2 of 2: leaf ['w'] at character 7 of """
        """'{"w": "q7[3]"}': spec: unknown dtype 'q7' in 'q7[3]'; expected DTYPE[DIM,...]"""
    )


def test_pytree_shape_count_error_prints_the_tree(run_cli, pytree_user):
    err = fails(run_cli("lower", f"{pytree_user}:loss", "--shapes", PARAMS), 1)
    assert err == (
        f"aotkit lower: error: --shapes: {pytree_user}:loss takes 3 array argument(s) (params, x, "
        "labels) but got 1 spec(s): {'w': f32[4,3], 'b': f32[3]}; add a spec for x, labels (or "
        "--static NAME=VALUE)\n"
    )


@pytest.mark.parametrize(
    "argv",
    [
        ["lower", "--shapes", "f32[3]", "{user}:double"],
        ["lower", "--shapes", "f32[3]", "{user}:double", "--pipeline", "none"],
        ["lower", "--pipeline", "none", "--shapes", "f32[3]", "{user}:double"],
    ],
    ids=["shapes-first", "target-between", "pipeline-first"],
)
def test_options_before_the_target(run_cli, user, argv):
    code, out, err = run_cli(*[a.format(user=user) for a in argv])
    assert code == 0, err
    pipeline = "none" if "none" in argv else "default"
    assert out == aotkit.lower(load(user).double, *specs("f32[3]"), pipeline=pipeline).as_text()


def test_inputs_before_the_target(run_cli, user, npy_inputs):
    arrays, paths = npy_inputs
    code, out, err = run_cli("run", "--inputs", *paths, f"{user}:affine", "-q")
    assert code == 0, err
    assert out == expected_outputs(aotkit.lower(load(user).affine, *arrays).compile()(*arrays))


def test_run_npz_inputs_keyed_by_leaf_path(run_cli, pytree_user, loss_inputs, tmp_path):
    arrays, call = loss_inputs
    npz = save_npz(tmp_path / "in.npz", arrays)
    code, out, err = run_cli("run", f"{pytree_user}:loss", "--inputs", npz, "-q")
    assert code == 0, err
    assert out == expected_outputs(aotkit.lower(load(pytree_user).loss, *call).compile()(*call))
    # The same with --shapes first, and with keys spelled args[i] and with double quotes.
    aliased = {'args[0]["w"]': arrays["params['w']"], "params['b']": arrays["params['b']"]}
    aliased |= {"args[1]": arrays["x"], "labels": arrays["labels"]}
    npz2 = save_npz(tmp_path / "in2.npz", aliased)
    code, out2, err = run_cli(
        "run", "--shapes", *LOSS_SHAPES, f"{pytree_user}:loss", "--inputs", npz2, "-q"
    )
    assert (code, out2) == (0, out), err


def test_run_npz_errors(run_cli, pytree_user, loss_inputs, tmp_path):
    arrays, _ = loss_inputs
    target = f"{pytree_user}:loss"
    missing = save_npz(tmp_path / "m.npz", {k: v for k, v in arrays.items() if k != "x"})
    err = fails(run_cli("run", target, "--shapes", *LOSS_SHAPES, "--inputs", missing), 1)
    assert err == (
        f"aotkit run: error: --inputs: {str(missing)!r} has no array for x: f32[8,4] (its keys: "
        f"params['w'], params['b'], labels); save each leaf of {target} under its path\n"
    )
    err = fails(run_cli("run", target, "--inputs", missing), 1)
    assert err == (
        f"aotkit run: error: --inputs: {str(missing)!r} has no array for parameter 'x' of "
        f"{target} (keys: params['w'], params['b'], labels); save it under the key 'x' "
        "(x['w'] or x[0] for the leaves of a pytree)\n"
    )
    extra = save_npz(tmp_path / "e.npz", {**arrays, "params['c']": np.ones(2, np.float32)})
    err = fails(run_cli("run", target, "--shapes", *LOSS_SHAPES, "--inputs", extra), 1)
    assert err == (
        f"aotkit run: error: --inputs: {str(extra)!r}: key \"params['c']\" is no argument leaf "
        f"of {target} (params['b']: f32[3], params['w']: f32[4,3], x: f32[8,4], labels: "
        "f32[8,3]); remove it or rename it to a leaf path\n"
    )
    stray = save_npz(tmp_path / "s.npz", {**arrays, "bias": np.ones(2, np.float32)})
    err = fails(run_cli("run", target, "--inputs", stray), 1)
    assert err == (
        f"aotkit run: error: --inputs: {str(stray)!r}: 'bias' is no array parameter of {target} "
        "(its array parameters: params, x, labels); key each array by its parameter's name and "
        "leaf path\n"
    )
    shaped = save_npz(tmp_path / "w.npz", {**arrays, "params['w']": np.ones((3, 3), np.float32)})
    err = fails(run_cli("run", target, "--shapes", *LOSS_SHAPES, "--inputs", shaped), 1)
    assert err == (
        f"aotkit run: error: --inputs: {str(shaped)!r}[\"params['w']\"] holds f32[3,3] but "
        "argument params['w'] is f32[4,3]; save the array with that shape and dtype\n"
    )
    err = fails(run_cli("run", target, "--inputs", shaped, missing), 1)
    assert err == (
        "aotkit run: error: --inputs: got 2 .npz and 0 .npy file(s); give either .npy files "
        "(one per leaf) or one .npz file keyed by leaf path\n"
    )


def test_run_npy_inputs_in_flat_leaf_order(run_cli, pytree_user, loss_inputs, tmp_path):
    arrays, call = loss_inputs
    # Flat order: a dict's leaves by sorted key (b before w), then x, labels.
    order = ["params['b']", "params['w']", "x", "labels"]
    paths = []
    for i, key in enumerate(order):
        paths.append(tmp_path / f"{i}.npy")
        np.save(paths[-1], arrays[key])
    code, out, err = run_cli(
        "run", f"{pytree_user}:loss", "--shapes", *LOSS_SHAPES, "--inputs", *paths, "-q"
    )
    assert code == 0, err
    assert out == expected_outputs(aotkit.lower(load(pytree_user).loss, *call).compile()(*call))


def test_two_npy_files_for_one_argument_blame_inputs(run_cli, user, npy_inputs):
    _, paths = npy_inputs
    err = fails(run_cli("run", f"{user}:double", "--inputs", *paths[:2]), 1)
    assert err == (
        f"aotkit run: error: --inputs: {user}:double takes 1 array argument(s) (x) but got 2 "
        "file(s) (f32[3], f32[3]); give one .npy file per array argument (or one .npz keyed by "
        "leaf path)\n"
    )


def test_inspect_names_leaves_by_path(run_cli, module_file):
    code, out, err = run_cli("inspect", module_file)
    assert code == 0, err
    assert "function: lambda(args[0]: f32[3]) -> (out: f32[3])\n" in out


def test_opt_reads_stdin(run_cli, module_file, monkeypatch):
    from_file = run_cli("opt", module_file)
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(module_file.read_bytes())))
    code, out, err = run_cli("opt", "-")
    assert code == 0, err
    assert out == from_file[1]
    assert "stablehlo.multiply" not in out


def test_opt_list_passes(run_cli):
    from aotkit import passes

    code, out, _ = run_cli("opt", "--list-passes")
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "Named pipelines (--pipeline NAME):"
    assert f"  none     {passes.NAMED_PIPELINES['none']}" in lines
    assert any(line.split()[:1] == ["aotkit-simplify"] for line in lines)
    assert "  canonicalize" in lines and "  cse" in lines
    err = fails(run_cli("opt"), 1)
    assert err == (
        "aotkit opt: error: give the module FILE to optimize ('-' reads stdin), or --list-passes\n"
    )


def test_run_output_npz_keyed_by_leaf_path(run_cli, user, tmp_path):
    dest = tmp_path / "out.npz"
    code, out, err = run_cli("run", f"{user}:pair", "--shapes", "f64[4]", "-q", "-o", dest)
    assert (code, err) == (0, ""), err
    x = np.random.default_rng(0).standard_normal(4)
    want = aotkit.lower(load(user).pair, *specs("f64[4]")).compile()(x)
    with np.load(dest) as saved:
        assert sorted(saved.files) == ["out['c'][0]", "out['c'][1]", "out['s']"]
        np.testing.assert_array_equal(saved["out['s']"], want["s"])
        np.testing.assert_array_equal(saved["out['c'][1]"], want["c"][1])
    assert out == expected_outputs(want)
    err = fails(run_cli("run", f"{user}:pair", "--shapes", "f64[4]", "-o", tmp_path / "o.txt"), 1)
    assert err == (
        f"aotkit run: error: --output: {str(tmp_path / 'o.txt')!r} does not end in .npz; aotkit "
        "run saves the outputs as one .npz file keyed by leaf path (out, out['s'], out[0]): -o "
        "out.npz\n"
    )


def test_run_repeat_quiet_still_reports_the_time(run_cli, user):
    code, _, err = run_cli("run", f"{user}:double", "--shapes", "f32[3]", "--repeat", "3", "-q")
    assert code == 0
    assert re.fullmatch(r"aotkit run: run best of 3: \d+(\.\d+)? (s|ms|us|ns)\n", err)


@pytest.mark.parametrize(
    "seconds, text",
    [
        (1.2134, "1.21 s"),
        (0.35, "350 ms"),
        (12.3e-6, "12.3 us"),
        (0.9997, "1 s"),
        (1234.5, "1234 s"),
        (3e-9, "3 ns"),
        (1.5, "1.5 s"),
        (0.0999996, "100 ms"),
    ],
)
def test_times_are_human_readable(seconds, text):
    assert report.human_time(seconds) == text


def test_compile_output_form_from_the_suffix(run_cli, user, tmp_path):
    argv = ["compile", f"{user}:double", "--shapes", "f32[3]"]
    err = fails(run_cli(*argv, "-o", tmp_path / "x.xyz"), 1)
    assert err == (
        f"aotkit compile: error: -o {str(tmp_path / 'x.xyz')!r}: cannot tell the output form "
        "from its suffix '.xyz'; add --emit hlo|cost|memory|artifact (without --emit, -o picks "
        "by suffix: .aotx: artifact, .hlo: hlo, .txt: hlo, .mlir: hlo)\n"
    )
    err = fails(run_cli(*argv, "-o", tmp_path / "x.json"), 1)
    assert err == (
        f"aotkit compile: error: -o {str(tmp_path / 'x.json')!r}: a .json file can hold the cost "
        "or the memory analysis; add --emit cost or --emit memory\n"
    )
    assert run_cli(*argv, "-o", tmp_path / "x.xyz", "--emit", "hlo")[0] == 0
    assert run_cli(*argv, "-o", tmp_path / "x.txt")[0] == 0
    oracle = aotkit.lower(load(user).double, *specs("f32[3]")).compile().as_text()
    assert (tmp_path / "x.xyz").read_text() == (tmp_path / "x.txt").read_text() == oracle


def test_writes_refuse_the_input_file(run_cli, user):
    before = user.read_text()
    argv = ["compile", f"{user}:double", "--shapes", "f32[3]", "--emit", "hlo", "-o", user]
    err = fails(run_cli(*argv), 1)
    assert err == (
        f"aotkit compile: error: -o: {str(user)!r} is the target this command read; write the "
        "output to another path (or pass --force to replace it)\n"
    )
    assert user.read_text() == before


def test_opt_in_place_needs_force(run_cli, module_file):
    err = fails(run_cli("opt", module_file, "-o", module_file), 1)
    assert err == (
        f"aotkit opt: error: -o: {str(module_file)!r} is the target this command read; write the "
        "output to another path (or pass --force to replace it)\n"
    )
    code, _, err = run_cli("opt", module_file, "-o", module_file, "--force")
    assert code == 0, err
    assert "stablehlo.add" in module_file.read_text()


def test_writes_refuse_a_file_of_another_kind(run_cli, user, tmp_path):
    artifact = tmp_path / "m.aotx"
    argv = ["compile", f"{user}:double", "--shapes", "f32[3]"]
    assert run_cli(*argv, "-o", artifact)[0] == 0
    err = fails(run_cli("lower", f"{user}:double", "--shapes", "f32[3]", "-o", artifact), 1)
    assert err == (
        f"aotkit lower: error: -o: {str(artifact)!r} exists and holds an aotkit artifact, not "
        "text; pick another path (or pass --force to replace it)\n"
    )
    assert (
        run_cli("lower", f"{user}:double", "--shapes", "f32[3]", "-o", artifact, "--force")[0] == 0
    )
    assert artifact.read_text().startswith("module @double")


def test_writes_are_atomic_and_keep_no_temporary(run_cli, user, tmp_path, monkeypatch):
    dest = tmp_path / "out.mlir"
    dest.write_text("old\n")
    dest.chmod(0o640)

    def fail(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", fail)
    err = fails(run_cli("lower", f"{user}:double", "--shapes", "f32[3]", "-o", dest), 1)
    assert err == (
        f"aotkit lower: error: -o: cannot write {str(dest)!r}: No space left on device; pick a "
        "writable path\n"
    )
    assert dest.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.mlir", "user.py"]
    monkeypatch.undo()
    assert run_cli("lower", f"{user}:double", "--shapes", "f32[3]", "-o", dest)[0] == 0
    assert dest.read_text().startswith("module @double")
    assert dest.stat().st_mode & 0o777 == 0o640


def test_docs_cli_commands_parse():
    import shlex

    text = (ROOT / "docs" / "cli.md").read_text()
    blocks = re.findall(r"```sh\n(.*?)```", text, re.S)
    commands = [line for b in blocks for line in b.splitlines() if line.startswith("aotkit ")]
    assert len(commands) >= 10
    parser = cli.build_parser()
    for line in commands:
        argv = shlex.split(line.split(" < ")[0])[1:]
        args = parser.parse_args(cli.targets_first(argv))
        assert args.command == argv[0], line


def test_arguments_with_defaults_are_counted_as_optional(tmp_path, capsys):
    user = tmp_path / "kernel.py"
    user.write_text("def k(x, y, gamma=0.5):\n    return x * gamma + y\n")
    assert cli.main(["lower", f"{user}:k", "--shapes", "f32[3]", "f32[3]"]) == 0
    capsys.readouterr()
    assert cli.main(["lower", f"{user}:k", "--shapes", "f32[3]"]) == 1
    assert capsys.readouterr().err == (
        f"aotkit lower: error: --shapes: {user}:k takes 2 to 3 array argument(s) (x, y, "
        "gamma=default) but got 1 spec(s): f32[3]; add a spec for y (or --static NAME=VALUE)\n"
    )


@pytest.mark.parametrize("code", [0, 5])
def test_sys_exit_in_the_traced_function_is_an_error(tmp_path, code):
    user = tmp_path / "quits.py"
    user.write_text(f"import sys\n\ndef f(x):\n    sys.exit({code})\n")
    proc = subprocess.run(
        [sys.executable, "-m", "aotkit", "lower", f"{user}:f", "--shapes", "f32[]"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr == (
        f"aotkit lower: error: lowering {user}:f: the function called sys.exit({code}) while "
        "it was traced; a traced function must return its result (raise an exception to "
        "report an error)\n"
    )


def test_the_cli_spells_the_artifact_suffix_as_the_format_does():
    from aotkit import artifacts, cache

    assert targets.ARTIFACT_SUFFIX == artifacts.SUFFIX == cache.SUFFIX == ".aotx"


def test_help_and_usage_errors_import_neither_jax_nor_the_tracer():
    # What tests/test_layers.py's LAZY entry for aotkit.cli.* is for: the parser, --help and
    # argument errors run without jax, the tracer, the passes or a backend (--shapes values
    # are read by aotkit.cli.notation, which imports jax).
    script = (
        "import sys\n"
        "from aotkit import cli\n"
        "codes = [cli.main(['--help']), cli.main(['lower', 'f.py:g', '--static', 'n']),\n"
        "         cli.main(['run', 'f.py:g', '--seed', '-1'])]\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('jax', 'jaxlib')\n"
        "               or m.startswith(('aotkit.tracing', 'aotkit.passes', 'aotkit.backends',\n"
        "                                'aotkit.cli.notation')))\n"
        "print('RESULT', codes, heavy)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == "RESULT [0, 2, 2] []"
    assert "aotkit lower: error: argument --static: expected NAME=VALUE" in proc.stderr


def test_platform_picks_the_lowering_of_a_multi_platform_jax_export(run_cli, tmp_path, user):
    import jax

    def by_platform(x):
        return jax.lax.platform_dependent(x, cpu=lambda x: x + 1, default=lambda x: x - 1)

    x = np.arange(3, dtype=np.float32)
    path = tmp_path / "f.jax_export"
    path.write_bytes(
        jax.export.export(jax.jit(by_platform), platforms=("cuda", "cpu"))(x).serialize()
    )
    np.save(tmp_path / "x.npy", x)
    results = {}
    for given in ((), ("--platform", "cpu"), ("--platform", "cuda")):
        code, out, err = run_cli("run", path, *given, "--inputs", tmp_path / "x.npy", "-q")
        assert code == 0, err
        results[given] = out
    assert results[()] == results[("--platform", "cpu")] == expected_outputs(x + 1)
    assert results[("--platform", "cuda")] == expected_outputs(x - 1)  # compiled here anyway
    code, out, _ = run_cli("opt", path, "--platform", "cuda", "--pipeline", "none")
    assert code == 0 and "stablehlo.subtract" in out
    fails(
        run_cli("run", path, "--platform", "tpu", "--inputs", tmp_path / "x.npy"),
        1,
        "was exported for 'cuda', 'cpu', and platform='tpu' was asked",
    )
    fails(
        run_cli("run", f"{user}:double", "--shapes", "f32[3]", "--platform", "cpu"),
        1,
        "--platform picks the lowering of a jax.export artifact exported for several "
        "platforms; a Python function is lowered for --backend",
    )


# --- Issue 43: paths that start like MLIR text, --shapes limits, messages for the CLI -----------


@pytest.mark.parametrize("stem", ["module", "#x", "func.func", "plain"])
def test_targets_named_like_mlir_text_are_files(run_cli, stem, tmp_path, monkeypatch):
    # A name that starts as MLIR text does (`module`, `#`, `func.func`) is a file name here.
    monkeypatch.chdir(tmp_path)
    x = np.arange(3, dtype=np.float32)
    aotkit.jit(lambda x: x * 2 + 1).lower(x).compile().save(f"{stem}.aotx")
    Path(f"{stem}.mlir").write_text(aotkit.lower(lambda x: x - 5, x).as_text())
    np.save("x.npy", x)
    code, out, err = run_cli("run", f"{stem}.aotx", "--inputs", "x.npy", "-q")
    assert code == 0, err
    assert out == expected_outputs(x * 2 + 1)
    code, out, err = run_cli("run", f"{stem}.mlir", "--inputs", "x.npy", "-q")
    assert code == 0, err
    assert out == expected_outputs(x - 5)
    code, out, err = run_cli("compile", f"{stem}.mlir", "-o", "out.aotx")
    assert (code, out) == (0, ""), err
    got = aotkit.load(Path("out.aotx"))(x)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, x - 5)


def test_a_missing_artifact_target_names_what_a_target_is(run_cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for target in ("nosuch.aotx", "module.aotx"):
        err = fails(run_cli("run", target), 1)
        assert err == (
            f"aotkit run: error: {target}: no such file; the target is an artifact (.aotx, "
            "written by `aotkit compile ... -o F.aotx`), a module file (.mlir, .mlirbc) or "
            "FILE.py:FN\n"
        )
        assert "bytes" not in err
    err = fails(run_cli("inspect", "nosuch.mlir"), 1)
    assert err.startswith("aotkit inspect: error: nosuch.mlir: no such file; the target is")


@pytest.mark.parametrize(
    "content, what", [(b"", "it is empty"), (b"\n", "it does not start as an artifact does")]
)
@pytest.mark.parametrize("command", ["run", "compile", "inspect"])
def test_an_aotx_that_is_no_artifact_is_told_so(run_cli, command, content, what, tmp_path):
    path = tmp_path / "model.aotx"
    path.write_bytes(content)
    err = fails(run_cli(command, path), 1)
    assert err == (
        f"aotkit {command}: error: {path} is not an aotkit artifact: {what}; write one with "
        f"`aotkit compile FILE.py:FN --shapes ... -o {path}` or Compiled.save\n"
    )
    assert "main" not in err


def test_inspect_names_the_file_of_a_bad_module(run_cli, tmp_path):
    path = tmp_path / "bad.mlir"
    path.write_text("module {\n  func.func @main(%a: tensor<f32>) -> tensor<f32> {\n"
                    "    return %zz : tensor<f32>\n  }\n}\n")  # fmt: skip
    err = fails(run_cli("inspect", path), 1)
    assert err.startswith(f"aotkit inspect: error: load_module: {path} is not valid MLIR text: ")
    assert "<bytes>" not in err


def test_inspect_of_a_folder_named_like_an_artifact_says_so(run_cli, tmp_path):
    folder = tmp_path / "model.aotx"
    folder.mkdir()
    err = fails(run_cli("inspect", folder), 1)
    # (it spoke of module files: "pass a file holding StableHLO MLIR text, ...")
    assert err == (
        f"aotkit inspect: error: aotkit.load: {folder} is a directory; pass the path of an "
        "artifact file\n"
    )


def test_unknown_pass_points_to_list_passes(run_cli, user):
    err = fails(
        run_cli("compile", f"{user}:double", "--shapes", "f32[3]", "--pipeline", "nosuch"), 1
    )
    assert err == (
        "aotkit compile: error: --pipeline 'nosuch': unknown pass 'nosuch'; `aotkit opt "
        "--list-passes` lists the pipelines and passes\n"
    )
    code, out, _ = run_cli("opt", "--list-passes")
    assert code == 0 and "Named pipelines" in out


@pytest.mark.parametrize("command", ["run", "check"])
def test_run_without_specs_mentions_inputs(run_cli, user, command):
    err = fails(run_cli(command, f"{user}:double"), 1)
    assert err == (
        f"aotkit {command}: error: --shapes or --inputs: {user}:double takes 1 array "
        "argument(s) (x) but got neither; give x a spec with --shapes or values with --inputs "
        "FILE.npy (or --static NAME=VALUE)\n"
    )
    # compile has no --inputs: it asks for --shapes only.
    err = fails(run_cli("compile", f"{user}:double"), 1)
    assert "--inputs" not in err and "add a spec for x" in err


KEYWORD_ONLY_CODE = "def f(*, x):\n    return x + 1\n\ndef g(x, *, y):\n    return x + y\n"


def test_keyword_only_parameters_say_why_they_take_no_spec(run_cli, tmp_path):
    path = tmp_path / "kw.py"
    path.write_text(KEYWORD_ONLY_CODE)
    err = fails(run_cli("lower", f"{path}:f", "--shapes", "f32[3]"), 1)
    assert err == (
        f"aotkit lower: error: --shapes: {path}:f takes 0 array argument(s) (none) but got 1 "
        "spec(s): f32[3]; give one spec per array argument ('x' is keyword-only, which takes "
        "no spec: make it positional, or give it with --static NAME=VALUE)\n"
    )
    err = fails(run_cli("lower", f"{path}:f"), 1)
    assert err == (
        f"aotkit lower: error: {path}:f: its parameter 'x' is keyword-only, which takes no "
        "spec; make it positional, or give it with --static NAME=VALUE\n"
    )
    err = fails(run_cli("lower", f"{path}:g", "--shapes", "f32[3]", "f32[3]"), 1)
    assert err.endswith(
        "give one spec per array argument ('y' is keyword-only, which takes no spec: make it "
        "positional, or give it with --static NAME=VALUE)\n"
    )
    # With y given by --static, g lowers: the oracle is the Python API.
    code, out, err = run_cli("lower", f"{path}:g", "--shapes", "f32[3]", "--static", "y=2.0")
    assert code == 0, err
    oracle = aotkit.lower(load(path).g, aotkit.spec("f32[3]"), y=2.0, static_argnames="y")
    assert out == oracle.as_text()


@pytest.mark.parametrize(
    "argv, whole",
    [
        (["f32[3,", "4]"], "f32[3, 4]"),
        (["f32[", "3,", "4", "]"], "f32[ 3, 4 ]"),
        (['{"w":', "f32[3]}"], '{"w": f32[3]}'),
    ],
)
def test_a_spec_split_by_the_shell_says_to_quote_it(run_cli, user, argv, whole):
    err = fails(run_cli("lower", f"{user}:double", "--shapes", *argv), 2)
    assert error_line(err) == (
        f"aotkit lower: error: argument --shapes: cannot parse {argv[0]!r}: the shell split "
        f"{whole!r} at its spaces; quote it (--shapes '{whole}') or write it without spaces "
        f"({''.join(whole.split())})"
    )
    # Quoted, the same text is one spec.
    code, _, err = run_cli("lower", f"{user}:double", "--shapes", whole)
    assert code in (0, 1) and "cannot parse" not in err


@pytest.mark.parametrize("typo, meant", [("f23", "f32"), ("i46", "i64"), ("flaot32", "float32")])
def test_an_unknown_dtype_suggests_the_nearest(run_cli, user, typo, meant):
    err = fails(run_cli("lower", f"{user}:double", "--shapes", f"{typo}[3]"), 2)
    assert error_line(err).startswith(
        f"aotkit lower: error: argument --shapes: spec: unknown dtype {typo!r} in "
        f"'{typo}[3]' (did you mean {meant!r}?); expected DTYPE[DIM,...]"
    )


def test_deep_shapes_are_a_usage_error(run_cli, user):
    for text in ("[" * 3000 + "f32[1]" + "]" * 3000, '{"a":' * 500 + "f32[1]" + "}" * 500):
        err = fails(run_cli("lower", f"{user}:double", "--shapes", text), 2)
        assert "the pytree nests deeper than 64 levels; give each argument a flatter pytree" in err
        assert "Recursion" not in err and "Traceback" not in err
    # 64 levels are read.
    text = "[" * 63 + "f32[1]" + "]" * 63
    code, _, err = run_cli("lower", f"{user}:double", "--shapes", text)
    assert "nests deeper" not in err


def test_deep_shapes_in_a_child_process(user):
    text = "[" * 3000 + "f32[1]" + "]" * 3000
    proc = run_process(
        [sys.executable, "-m", "aotkit", "lower", f"{user}:double", "--shapes", text]
    )
    assert proc.returncode == 2
    stderr = proc.stderr.decode()
    assert "the pytree nests deeper than 64 levels" in error_line(stderr)
    assert "Traceback" not in stderr and "RecursionError" not in stderr


@pytest.mark.parametrize("wrap", ["{}", "[{}]"])
def test_a_dimension_of_thousands_of_digits_is_refused(run_cli, user, wrap):
    text = wrap.format("f32[" + "9" * 5000 + "]")
    err = fails(run_cli("lower", f"{user}:double", "--shapes", text), 2)
    assert "(5000 digits) in 'f32[" in error_line(err)
    assert error_line(err).endswith(
        "does not fit in 64 bits (at most 2**63 - 1); use smaller dimensions"
    )
    assert "int" not in error_line(err) and "4300" not in err
    assert len(error_line(err)) < 400


def test_compile_o_says_what_it_wrote(run_cli, user, tmp_path):
    out_path = tmp_path / "double.aotx"
    code, out, err = run_cli("compile", f"{user}:double", "--shapes", "f32[3]", "-o", out_path)
    assert (code, out) == (0, "")
    size = out_path.stat().st_size
    assert err == f"aotkit compile: wrote {out_path} (an aotkit artifact, {size:,} bytes)\n"
    x = np.arange(3, dtype=np.float32)
    got = aotkit.load(out_path)(x)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, x + x)
    hlo = tmp_path / "double.hlo"
    code, out, err = run_cli("compile", f"{user}:double", "--shapes", "f32[3]", "-o", hlo, "-q")
    assert (code, out, err) == (0, "", "")
    assert hlo.read_text().startswith("HloModule")
