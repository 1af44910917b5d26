"""The CLI with symbolic programs: `aotkit compile --specialize`, `--constraint` on symbolic
`--shapes`, `aotkit run` on inputs of any size, `aotkit check` over sampled sizes."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import aotkit
from tests import lane
from tests.symbolic import programs


@pytest.fixture(scope="module")
def mlp_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("cli") / "mlp.jaxexp"
    path.write_bytes(programs.mlp_export().serialize())
    return path


@pytest.fixture(scope="module")
def affine_file(tmp_path_factory):
    """x * y + 1 over (b, 3): exact on every backend."""
    b = jax.export.symbolic_shape("b")[0]
    spec = jax.ShapeDtypeStruct((b, 3), jnp.float32)

    def affine(x, y):
        return x * y + 1

    exported = jax.export.export(jax.jit(affine), platforms=lane.EXPORT_PLATFORMS)(spec, spec)
    path = tmp_path_factory.mktemp("cli") / "affine.jaxexp"
    path.write_bytes(exported.serialize())
    return path


def test_compile_specialize_writes_the_executables(run_cli, tmp_path, mlp_file):
    out = tmp_path / "mlp.aotx"
    code, _, err = run_cli("compile", mlp_file, "--specialize", "b=1,8,32", "-o", out, "-v")
    assert code == 0, err
    assert "specialized in" in err and "it holds: b = 1; b = 8; b = 32" in err
    assert aotkit.load(out, recompile=False).specializations == ({"b": 1}, {"b": 8}, {"b": 32})
    # and more on the artifact itself
    more = tmp_path / "more.aotx"
    code, _, err = run_cli("compile", out, "--specialize", "b=128", "-o", more)
    assert code == 0, err
    held = aotkit.load(more, recompile=False).specializations
    assert held == ({"b": 1}, {"b": 8}, {"b": 32}, {"b": 128})


def test_inspect_lists_what_compile_specialized(run_cli, tmp_path, mlp_file):
    out = tmp_path / "mlp.aotx"
    assert run_cli("compile", mlp_file, "--specialize", "b=2", "-o", out)[0] == 0
    code, text, _ = run_cli("inspect", out)
    assert code == 0
    assert "symbolic: b; constraints: b >= 1\n" in text
    assert "  b = 2: f32[2,784], f32[2,10], f32[784,32], f32[32,10] (executable.0)\n" in text


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["--specialize", "b=0"],
            "aotkit compile: error: Compiled 'mlp': specialize: b = 0 breaks the constraint "
            "b >= 1; give sizes for which it holds\n",
        ),
        (
            ["--specialize", "c=1"],
            "aotkit compile: error: Compiled 'mlp': specialize: 'c' is not a symbol of this "
            "program (its symbols: b)\n",
        ),
        (
            ["--constraint", "b % 2 == 0"],
            "aotkit compile: error: {target}: --constraint applies to the symbolic --shapes of "
            "FILE.py:FN targets; a module file's symbols and constraints (a jax.export "
            "artifact's) come from the file\n",
        ),
    ],
)
def test_compile_errors(run_cli, tmp_path, mlp_file, argv, message):
    code, _, err = run_cli("compile", mlp_file, *argv, "-o", tmp_path / "x.aotx")
    assert code == 1
    assert err == message.format(target=mlp_file)


def test_specialize_needs_sizes(run_cli, mlp_file, tmp_path):
    code, _, err = run_cli("compile", mlp_file, "--specialize", "b=", "-o", tmp_path / "x.aotx")
    assert code == 2
    assert err.endswith(
        "argument --specialize: expected SYMBOL=SIZE,... with sizes >= 0, got 'b='; e.g. "
        "--specialize b=1,8,32,128 (repeat it for each symbol: --specialize t=128)\n"
    )


def test_specialize_of_a_static_program(run_cli, tmp_path):
    fn = tmp_path / "f.py"
    fn.write_text("def f(x):\n    return x + 1\n")
    code, _, err = run_cli(
        "compile", f"{fn}:f", "--shapes", "f32[3]", "--specialize", "b=1", "-o", tmp_path / "f.aotx"
    )
    assert code == 1
    assert err == (
        "aotkit compile: error: --specialize: f has static shapes (f(x: f32[3]) -> (out: "
        "f32[3])); it applies to programs lowered with symbolic --shapes such as f32[b,784]\n"
    )


def test_constraint_without_symbols(run_cli, tmp_path):
    fn = tmp_path / "f.py"
    fn.write_text("def f(x):\n    return x + 1\n")
    code, _, err = run_cli("lower", f"{fn}:f", "--shapes", "f32[3]", "--constraint", "b >= 1")
    assert code == 1
    assert err == (
        "aotkit lower: error: --constraint: the --shapes have no symbolic dimension to "
        "constrain; write symbols in them, e.g. --shapes 'f32[b,t,512]' --constraint "
        "'t % 8 == 0'\n"
    )


def test_run_takes_inputs_of_any_size(run_cli, tmp_path, affine_file):
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    np.save(tmp_path / "x.npy", x)
    code, out, err = run_cli("run", affine_file, "--inputs", tmp_path / "x.npy", tmp_path / "x.npy")
    assert code == 0, err
    assert out.startswith("out: f32[4,3]\n")


def test_run_without_inputs_says_to_give_them(run_cli, affine_file):
    code, _, err = run_cli("run", affine_file)
    assert code == 1
    assert err == (
        "aotkit run: error: affine has symbolic shapes (affine(args[0]: f32[b,3], args[1]: "
        "f32[b,3]) -> (out: f32[b,3])); give --inputs files, whose shapes choose the sizes it "
        "runs with\n"
    )


def test_check_samples_sizes_on_every_backend(run_cli, affine_file):
    code, out, err = run_cli("check", affine_file, "--backends", "cpu", "interpreter")
    assert code == 0, out + err
    lines = out.splitlines()
    assert lines[1].split() == [
        "SIZES",
        "BACKEND",
        "OUTPUT",
        "SPEC",
        "MAX",
        "ABS",
        "DIFF",
        "MAX",
        "ULP",
        "DIFF",
        "RESULT",
    ]
    sizes = [line.split("  ")[0] for line in lines[2:]]
    # b >= 1 (jax.export's): 0 is left out, 1 is in
    assert sizes == ["b = 1"] * 2 + ["b = 2"] * 2 + ["b = 3"] * 2 + ["b = 5"] * 2
    assert all(line.endswith(("reference", "ok")) for line in lines[2:])
