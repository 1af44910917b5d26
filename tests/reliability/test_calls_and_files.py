"""Calls, caches, dumps and CLI errors that used to crash, hang or lie (issue 13), each run in
a child process of its own: the child must finish by itself (no signal) and say the right
thing."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import aotkit
import aotkit.numpy as anp

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def child(code: str, *args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )
    assert out.returncode >= 0, f"killed by signal {-out.returncode}: {out.stderr[-2000:]}"
    return out


# --- calls -------------------------------------------------------------------------------------


def test_big_endian_arrays_give_the_right_values_after_a_native_call():
    out = child(
        """
        import numpy as np, aotkit
        jitted = aotkit.jit(lambda x: x + 2)
        compiled = aotkit.lower(lambda x: x + 2, np.ones(3, np.float32)).compile()
        for f in (jitted, compiled):
            f(np.ones(3, np.float32))  # the native signature is now cached
            print(np.asarray(f(np.arange(3, dtype=">f4"))).tolist())
        print(np.asarray(jitted({"a": np.arange(3, dtype=">f4")}["a"])).tolist())
        nested = aotkit.jit(lambda t: t["a"] * 2)
        nested({"a": np.ones(2, np.float32)})
        print(np.asarray(nested({"a": np.arange(2, dtype=">f4")})).tolist())
        """
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:4] == [
        "[2.0, 3.0, 4.0]",
        "[2.0, 3.0, 4.0]",
        "[2.0, 3.0, 4.0]",
        "[0.0, 2.0]",
    ]


def test_static_arguments_that_compare_equal_trace_apart():
    out = child(
        """
        import numpy as np, aotkit
        divide = aotkit.jit(lambda x, s: x / s, static_argnums=1)
        x = np.ones(1, np.float32)
        print(float(divide(x, 0.0)[0]), float(divide(x, -0.0)[0]))
        scale = aotkit.jit(lambda x, t: x * t[0], static_argnums=1)
        print(scale(np.ones(1, np.int32), (2,)).dtype, scale(np.ones(1, np.int32), (2.0,)).dtype)
        """
    )
    assert out.stdout.split() == ["inf", "-inf", "int32", "float64"], out.stderr


def test_out_of_range_static_and_donate_argnums_raise():
    with pytest.raises(
        ValueError,
        match=r"^jit\(lambda\): static_argnums has 3, but the call passes 1 positional "
        r"argument\(s\); pass that argument positionally or fix static_argnums$",
    ):
        aotkit.jit(lambda x: x, static_argnums=3)(np.ones(2))
    with pytest.raises(
        ValueError,
        match=r"^trace\(lambda\): donate_argnums has -2, but the call passes 1 positional "
        r"argument\(s\); pass that argument positionally or fix donate_argnums$",
    ):
        aotkit.jit(lambda x: x, donate_argnums=-2)(np.ones(2))


def test_take_with_mode_raise_on_traced_indices_is_refused():
    with pytest.raises(
        ValueError,
        match=r"^take \(at .*\): mode='raise' cannot check traced indices \(a program cannot "
        r"raise when it runs\); pass mode='clip' or mode='wrap', or leave mode out",
    ):
        aotkit.lower(lambda x, i: anp.take(x, i, mode="raise"), np.ones(4), np.array([1, 9]))
    got = aotkit.jit(lambda x, i: np.take(x, i))(np.arange(4.0), np.array([1, 9, -1]))
    np.testing.assert_array_equal(np.asarray(got), [1.0, 3.0, 3.0])  # the rule of x[i]


def test_summing_narrow_integers_does_not_widen_the_whole_input_at_once():
    from aotkit.tracing import reduction

    n = 4 * reduction.WIDEN_BLOCK_BYTES  # int8: a full int64 copy would be 8x this
    x = (np.arange(n) % 251 - 125).astype(np.int8)
    compiled = aotkit.jit(lambda a: anp.sum(a)).lower(x).compile()
    assert compiled.memory_analysis().temp_size_in_bytes < 2 * reduction.WIDEN_BLOCK_BYTES
    assert int(compiled(x)) == int(x.astype(np.int64).sum())
    y = x.reshape(4096, -1)
    by_column = aotkit.jit(lambda a: anp.sum(a, axis=0, where=a > 0)).lower(y).compile()
    np.testing.assert_array_equal(np.asarray(by_column(y)), np.sum(y, axis=0, where=y > 0))


# --- the CLI and dumps ---------------------------------------------------------------------------

USER = """
import aotkit.numpy as anp

def f(x):
    return anp.sin(x) + 1
"""


@pytest.fixture
def user(tmp_path):
    path = tmp_path / "user.py"
    path.write_text(USER)
    return path


def aotkit_cli(*argv, cwd=None) -> subprocess.CompletedProcess:
    out = subprocess.run(
        [sys.executable, "-m", "aotkit", *map(str, argv)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd or ROOT,
    )
    assert out.returncode >= 0, out.stderr
    return out


def test_a_pass_option_mlir_only_prints_about_is_an_error(user):
    out = aotkit_cli(
        "lower", f"{user}:f", "--shapes", "f32[3]", "--pipeline",
        "builtin.module(inline{default-pipeline=bogus})",
    )  # fmt: skip
    assert (out.returncode, out.stdout) == (1, "")
    assert out.stderr == (
        "aotkit lower: error: --pipeline 'builtin.module(inline{default-pipeline=bogus})': MLIR "
        "rejected 'inline{default-pipeline=bogus}': 'bogus' does not refer to a registered "
        "pass or pass pipeline; check the pass options\n"
    )


def test_a_huge_bad_line_is_quoted_short(tmp_path):
    bad = tmp_path / "bad.mlir"
    bad.write_text("x" * (8 << 20))
    out = aotkit_cli("opt", bad)
    assert out.returncode == 1
    assert len(out.stderr) < 1000
    assert out.stderr.rstrip().endswith(
        "more characters); expected StableHLO MLIR text, MLIR bytecode, a StableHLO portable "
        "artifact or a jax.export artifact (Exported.serialize() output)"
    )


def test_out_of_memory_says_it_is_the_size(user):
    out = aotkit_cli("run", f"{user}:f", "--shapes", "f32[400000000000]")
    assert out.returncode == 1
    assert out.stderr.startswith("aotkit run: error: out of memory (")
    assert out.stderr.endswith(
        "): the program or its inputs need more memory than this machine has; use smaller "
        "shapes or inputs\n"
    )


def test_two_processes_dumping_into_one_folder_keep_every_file(tmp_path, user):
    dumps = tmp_path / "dumps"
    code = f"""
        import sys; sys.path.insert(0, {str(user.parent)!r})
        import numpy as np, aotkit, user
        for i in range(15):
            aotkit.jit(lambda x: user.f(x) * {{}}, dump_dir={str(dumps)!r}).lower(np.ones(3))
    """
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(code.replace("{}", str(k)))],
            cwd=ROOT,
            stderr=subprocess.PIPE,
            text=True,
        )
        for k in (2, 3)
    ]
    for p in procs:
        assert p.wait(timeout=600) == 0, p.stderr.read()
    traced = sorted(dumps.glob("*-traced.mlir"))
    assert len(traced) == 30  # 15 lowerings x 2 processes, none overwritten
    assert len({p.name.split(".")[0] for p in traced}) == 30  # one module number each


def test_a_link_planted_in_a_dump_folder_is_not_followed(tmp_path):
    dumps = tmp_path / "dumps"
    dumps.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    (dumps / "0000.lambda.01-traced.mlir").symlink_to(victim)
    (dumps / "0001.lambda.02-final.mlir").symlink_to(victim)
    aotkit.jit(lambda x: x + 1, dump_dir=dumps).lower(np.ones(2))
    assert victim.read_text() == "precious"
    assert (dumps / "0002.lambda.01-traced.mlir").read_text().startswith("module @lambda")
