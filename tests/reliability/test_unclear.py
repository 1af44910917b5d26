"""Unclear errors: each says where, what, and what to do (issue 26, class "unclear")."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import aotkit

_NO_SOURCE = textwrap.dedent(
    """
    import numpy as np, aotkit
    def f(x):
        if x > 0:
            return x
        return -x
    try:
        aotkit.jit(f)(np.float32(1))
    except TypeError as e:
        print(e)
    """
)


def _child(script: str) -> subprocess.CompletedProcess:
    """`script` run as `python -c` in a child process, which must exit 0."""
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    return proc


def test_autograph_without_source_says_so():
    proc = _child(_NO_SOURCE)
    assert proc.stdout.strip().endswith(
        "; autograph, which turns Python control flow on traced values into StableHLO, "
        "converts only functions defined in a source file, and this one is not (<string>: "
        "code from python -c, exec or an interactive prompt), so it ran as written: define "
        "the function in a .py file"
    )
    assert proc.stdout.startswith("bool() of a traced bool[] array (at <string>:4)")


def test_a_function_with_source_gets_no_such_note():
    def f(x):
        return x if any([x > 0]) else -x  # any() calls bool() on the item, unconverted

    with pytest.raises(TypeError) as e:
        aotkit.jit(f)(np.float32(1))
    assert "converts only functions defined in a source file" not in str(e.value)


_RECURSIVE = """
import aotkit.numpy as anp


def tower(x, d):
    return x if d == 0 else tower(anp.sin(x), d - 1)


def endless(x):
    return endless(x + 1)
"""


def test_recursion_under_autograph(tmp_path):
    import importlib.util

    path = tmp_path / "recursive.py"
    path.write_text(_RECURSIVE)
    spec = importlib.util.spec_from_file_location("recursive", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    got = aotkit.jit(module.tower, static_argnums=1)(np.float32(1), 3)  # was KeyError 'tower'
    np.testing.assert_allclose(got, np.sin(np.sin(np.sin(np.float32(1)))), rtol=1e-6)
    proc = subprocess.run(
        [sys.executable, "-m", "aotkit", "lower", f"{path}:endless", "--shapes", "f32[]"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1
    last = proc.stderr.splitlines()[-1]
    assert last.startswith(f"aotkit lower: error: lowering {path}:endless failed: RecursionError: ")
    assert "maximum recursion depth exceeded" in last  # Python's own, never a KeyError


_REPEATED_DEVICE = """
import jax
jax.config.update("jax_num_cpu_devices", 2)
import numpy as np, aotkit
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
d = jax.devices()
m = Mesh(np.array([d[0], d[0]]), ("data",))
try:
    aotkit.jit(lambda x: x + 1, in_shardings=NamedSharding(m, P("data"))).lower(
        aotkit.spec("f32[4]"))
except ValueError as e:
    print(e)
"""


def test_a_mesh_that_repeats_a_device_is_refused_when_used():
    proc = _child(_REPEATED_DEVICE)
    assert proc.stdout.strip() == (
        "trace(lambda): the mesh ('data': 2) names device cpu:0 more than once; each device "
        "can hold one shard: build the mesh from distinct devices (e.g. "
        "aotkit.sharding.mesh('data=4'))"
    )


@pytest.mark.parametrize("transform", ["grad", "jit", "vmap"])
def test_a_compiled_traced_by_jax_names_the_tracer(transform):
    import jax

    compiled = aotkit.jit(lambda x: (x * x).sum()).lower(aotkit.spec("f32[4,4]")).compile()
    x = np.ones((4, 4), np.float32)
    call = {
        "grad": lambda: jax.grad(compiled)(x),
        "jit": lambda: jax.jit(lambda v: compiled(v))(x),
        "vmap": lambda: jax.vmap(compiled)(np.stack([x, x])),
    }[transform]
    with pytest.raises(TypeError) as e:
        call()
    assert str(e.value) == (
        "Compiled 'lambda': argument x expected f32[4,4], got a JAX tracer of f32[4,4] "
        "(the Compiled was called inside jax.jit, jax.grad or jax.vmap, or with a value leaked "
        "from one); a Compiled runs on concrete arrays and JAX cannot trace into it: call it "
        "outside JAX's transformations, or give JAX the Python function itself"
    )


def test_stages_can_be_weakly_referenced():
    import gc
    import weakref

    traced = aotkit.jit(lambda x: x + 1).trace(1.0)
    lowered = traced.lower()
    compiled = lowered.compile()
    refs = [weakref.ref(s) for s in (traced, lowered, compiled)]
    assert [r() for r in refs] == [traced, lowered, compiled]
    del traced, lowered, compiled
    gc.collect()
    assert refs[0]() is None  # a weak reference keeps nothing alive


def test_round_and_divmod_of_traced_values_follow_numpy():
    x = np.array([2.5, -1.5, 7.25, -7.0], np.float32)
    y = np.array([2.0, 2.0, -3.0, 4.0], np.float32)
    got = aotkit.jit(lambda a, b: (round(a), round(a, 1), *divmod(a, b), *divmod(3.0, b)))(x, y)
    want = (np.round(x), np.round(x, 1), *np.divmod(x, y), *np.divmod(np.float32(3.0), y))
    for g, w in zip(got, want, strict=True):
        assert np.asarray(g).dtype == w.dtype
        np.testing.assert_allclose(np.asarray(g), w, rtol=1e-6)  # round(a, 1): 1 ulp


def _cli(*argv) -> subprocess.CompletedProcess:
    """`aotkit ARGV` in a child process (a target that blocks must not stall the test run)."""
    return subprocess.run(
        [sys.executable, "-m", "aotkit", *map(str, argv)],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )


@pytest.fixture
def double(tmp_path):
    path = tmp_path / "user.py"
    path.write_text("def double(x):\n    return x * 2\n")
    return f"{path}:double"


@pytest.mark.parametrize("command", ["run", "check"])
def test_a_negative_seed_names_the_flag(double, command):
    proc = _cli(command, double, "--shapes", "f32[3]", "--seed", "-1")
    assert proc.returncode == 2
    assert proc.stderr.splitlines()[-1] == (
        f"aotkit {command}: error: argument --seed: expected a non-negative integer, got '-1'"
    )


def test_inputs_given_twice_are_all_read(double, tmp_path):
    # `--inputs a.npy --inputs b.npy` ran on b.npy alone: the second flag replaced the first.
    paths = [tmp_path / "a.npy", tmp_path / "b.npy"]
    for p in paths:
        np.save(p, np.ones(3, np.float32))
    proc = _cli("run", double, "--inputs", paths[0], "--inputs", paths[1])
    assert proc.returncode == 1
    assert proc.stderr == (
        f"aotkit run: error: --inputs: {double} takes 1 array argument(s) (x) but got 2 file(s) "
        "(f32[3], f32[3]); give one .npy file per array argument (or one .npz keyed by leaf "
        "path)\n"
    )


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (10**400, "of 1329 bits"),
        (2**63, "9223372036854775808"),
        (-(2**63) - 1, "-9223372036854775809"),
    ],
    ids=["10**400", "2**63", "-2**63-1"],
)
def test_an_option_value_past_64_bits_is_refused_before_the_bindings(value, shown):
    lowered = aotkit.jit(lambda x: x + 1).lower(aotkit.spec("f32[3]"))
    with pytest.raises(ValueError) as e:  # was nanobind's TypeError: incompatible arguments
        lowered.compile(options={"xla_backend_optimization_level": value})
    assert str(e.value) == (
        f"backend 'cpu': compile: option 'xla_backend_optimization_level' has an int value "
        f"{shown}, outside the 64-bit range XLA options take (-2**63 to 2**63 - 1)"
    )


@pytest.mark.parametrize(
    ("options", "what"),
    [({"xla_dump_hlo_pass_re": "a\0b"}, "value"), ({"xla_\udcff": True}, "name")],
    ids=["nul-value", "surrogate-name"],
)
def test_option_text_the_bindings_cannot_carry_is_refused(options, what):
    lowered = aotkit.jit(lambda x: x + 1).lower(aotkit.spec("f32[3]"))
    with pytest.raises(ValueError) as e:
        lowered.compile(options=options)
    (key,) = options
    assert str(e.value) == (
        f"backend 'cpu': compile: option {key!r} has a {what} holding a NUL or a character "
        "UTF-8 cannot encode; XLA options take plain text"
    )


@pytest.mark.parametrize("kind", ["link to /dev/zero", "FIFO"])
def test_a_python_target_that_is_not_a_regular_file_says_what_it_is(tmp_path, kind):
    # A .py linked to /dev/zero was said "not to exist".
    path = tmp_path / "user.py"
    if kind == "FIFO":
        if not hasattr(os, "mkfifo"):
            pytest.skip("needs FIFOs")
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero")
    what = "a FIFO (named pipe)" if kind == "FIFO" else "a character device"
    proc = _cli("lower", f"{path}:f", "--shapes", "f32[3]")
    assert proc.returncode == 1
    assert proc.stderr == (
        f"aotkit lower: error: file {str(path)!r} is {what}, not a regular file; give the path "
        "of a Python file\n"
    )


def test_a_base_exception_of_the_users_is_reported_as_their_error(tmp_path):
    source = tmp_path / "halts.py"
    source.write_text(
        "class Stop(BaseException):\n    pass\n\n\ndef f(x):\n    raise Stop('halt')\n"
    )
    done = _cli("lower", f"{source}:f", "--shapes", "f32[]")
    assert done.returncode == 1
    assert done.stderr.splitlines()[-1] == (
        f"aotkit lower: error: lowering {source}:f failed: Stop: halt"
    )
    assert "ag__" not in done.stderr and "aotkit/" not in done.stderr


_MODULE_TEXT = "module @m {\n  func.func public @main(%a: tensor<f32>) -> tensor<f32> {\n" + (
    "    return %a : tensor<f32>\n  }\n}\n"
)


@pytest.mark.parametrize("text", [_MODULE_TEXT, _MODULE_TEXT * 40, "module {}"])
def test_module_text_given_as_a_str_says_to_pass_bytes(text):
    # A str is a path; a long one used to end in "OSError: [Errno 36] File name too long".
    with pytest.raises(
        TypeError,
        match=r"^load_module: got a str of MLIR text; a str is a path: pass the module's text "
        r"as bytes \(load_module\(text.encode\(\)\)\) or the path of a file holding it$",
    ):
        aotkit.load_module(text)
    with pytest.raises(
        TypeError,
        match=r"^aotkit.load: got a str of MLIR text, which is a module, not an artifact; load "
        r"it with aotkit.load_module\(text.encode\(\)\) and compile it",
    ):
        aotkit.load(text)
    assert aotkit.load_module(_MODULE_TEXT.encode()).compile()(np.float32(2)) == 2


def test_a_path_too_long_for_a_file_name_is_a_clear_error():
    with pytest.raises(ValueError, match=r"a path of 5000 characters is too long for a file name"):
        aotkit.load_module("x" * 5000)
    with pytest.raises(
        aotkit.ArtifactError, match=r"a path of 5000 characters is too long for a file name"
    ):
        aotkit.load("x" * 5000)
