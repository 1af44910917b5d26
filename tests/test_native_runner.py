"""aotkit-run and aotkit_runtime.h (aotkit/native/): artifacts written by Python, run by the C
runner on the xla-cpu-pjrt plugin, equal Python's results; malformed artifacts, inputs and
API calls are refused with their messages and never crash the process.

Skips, saying why, where no C compiler or no CPU plugin (`pip install 'aotkit[native]'`) is
present."""

from __future__ import annotations

import io
import random
import re
import subprocess
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import aotkit
import aotkit.numpy as anp
from aotkit import artifacts, native
from aotkit.errors import ArtifactError

ROOT = Path(__file__).resolve().parent.parent

if native.compiler() is None:
    pytest.skip("no C compiler (cc, gcc or clang) on PATH", allow_module_level=True)
if native.cpu_plugin() is None or native.pjrt_include() is None:
    pytest.skip(
        "no CPU PJRT plugin: pip install 'aotkit[native]' (xla-cpu-pjrt)", allow_module_level=True
    )


@pytest.fixture(scope="module")
def runner(tmp_path_factory) -> Path:
    return native.build(tmp_path_factory.mktemp("native"))


def run(runner, *args, cwd=None) -> subprocess.CompletedProcess:
    result = subprocess.run(
        [str(runner), *map(str, args)], capture_output=True, text=True, cwd=cwd, timeout=120
    )
    assert result.returncode >= 0, f"killed by signal {-result.returncode}: {result.stderr}"
    return result


def save(tmp_path, fn, *args, name="model", jit=None, **kwargs) -> tuple[Path, object]:
    compiled = aotkit.jit(fn, **(jit or {})).lower(*args, **kwargs).compile()
    path = tmp_path / f"{name}.aotx"
    compiled.save(path)
    return path, compiled


def run_npz(runner, tmp_path, model, inputs: dict) -> dict:
    """Runs `model` with `inputs` (leaf path -> array) through an .npz; the outputs by path."""
    np.savez(tmp_path / "in.npz", **inputs)
    result = run(runner, model, "--inputs", tmp_path / "in.npz", "--output", tmp_path / "out.npz")
    assert result.returncode == 0, result.stderr
    with np.load(tmp_path / "out.npz") as f:
        return {k: f[k] for k in f.files}


def mlp(w1, b1, w2, x):
    return anp.tanh(x @ w1 + b1) @ w2


def mlp_args():
    rng = np.random.default_rng(0)
    return (
        rng.standard_normal((8, 16)).astype(np.float32),
        rng.standard_normal(16).astype(np.float32),
        rng.standard_normal((16, 4)).astype(np.float32),
        rng.standard_normal((3, 8)).astype(np.float32),
    )


def test_mlp_equals_python(runner, tmp_path):
    args = mlp_args()
    model, compiled = save(tmp_path, mlp, *args)
    for i, a in enumerate(args):
        np.save(tmp_path / f"a{i}.npy", a)
    inputs = [x for i in range(4) for x in ("--input", tmp_path / f"a{i}.npy")]
    result = run(runner, model, *inputs, "-o", tmp_path, "-v")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "out: f32[3,4]\n"
    assert "mlp(w1: f32[8,16], b1: f32[16], w2: f32[16,4], x: f32[3,8])" in result.stderr
    # The jaxlib executable is not the plugin's: -v says it compiled the portable module.
    assert "compiled the portable StableHLO (section 'stablehlo', version 1" in result.stderr
    assert "another XLA build than the plugin" in result.stderr
    out = np.load(tmp_path / "out.npy")
    want = np.asarray(compiled(*args))
    assert out.dtype == want.dtype == np.float32
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)


@pytest.fixture(scope="module")
def plugin_backend():
    """The CPU plugin loaded into this process as backend `xcpu`: jaxlib serializes its
    executables as it does libtpu's (an IFRT record around the plugin's bytes)."""
    from aotkit import backends

    return backends.load_plugin("xcpu", str(native.cpu_plugin()))


def test_a_plugins_executable_is_unwrapped_and_loaded_not_compiled(
    runner, plugin_backend, tmp_path
):
    args = mlp_args()
    model, compiled = save(tmp_path, mlp, *args, jit={"backend": "xcpu"})
    exe = artifacts.unpack(model.read_bytes()).section("executable")
    assert b"pjrt_ifrt" in exe[:16]  # jaxlib's wrapping, which the runner takes off
    for i, a in enumerate(args):
        np.save(tmp_path / f"a{i}.npy", a)
    inputs = [x for i in range(4) for x in ("--input", tmp_path / f"a{i}.npy")]
    result = run(runner, model, *inputs, "-o", tmp_path, "-v")
    assert result.returncode == 0, result.stderr
    assert (
        "aotkit-run: loaded the executable section, unwrapped from jaxlib's IFRT record, "
        "(platform 'cpu')"
    ) in result.stderr
    out, want = np.load(tmp_path / "out.npy"), np.asarray(compiled(*args))
    assert out.dtype == want.dtype == np.float32 and out.shape == (3, 4)
    np.testing.assert_array_equal(out, want)


def test_a_wrapper_of_another_kind_is_not_unwrapped(runner, plugin_backend, tmp_path):
    # The first record renamed: not jaxlib's IFRT record, so the plugin gets the bytes as they
    # are (the CPU plugin reads them all the same; libtpu does not).
    args = mlp_args()
    model, compiled = save(tmp_path, mlp, *args, jit={"backend": "xcpu"})
    art = artifacts.unpack(model.read_bytes())
    sections = {name: bytes(data) for name, data in art.sections.items()}
    sections["executable"] = sections["executable"].replace(b"pjrt_ifrt", b"pjrt_xxxx", 1)
    header = {k: v for k, v in art.header.items() if k != "sections"}
    model.write_bytes(artifacts.pack(header, sections))
    np.savez(tmp_path / "in.npz", **{n: a for n, a in zip(("w1", "b1", "w2", "x"), args)})
    result = run(runner, model, "--inputs", tmp_path / "in.npz", "-o", tmp_path, "-v")
    assert result.returncode == 0, result.stderr
    assert "aotkit-run: loaded the executable section as it is (platform 'cpu')" in result.stderr
    np.testing.assert_array_equal(np.load(tmp_path / "out.npy"), np.asarray(compiled(*args)))


def test_typed_key_leaves_are_their_uint32_data(runner, tmp_path):
    import jax

    def step(k, x):
        k1, k2 = jax.random.split(k)
        return k1, jax.random.normal(k2, x.shape) * x

    key, x = jax.random.key(0), np.linspace(-1, 1, 4, dtype=np.float32)
    model, compiled = save(tmp_path, step, key, x)
    got = run_npz(runner, tmp_path, model, {"k": np.asarray(jax.random.key_data(key)), "x": x})
    want_key, want = compiled(key, x)
    assert got["out[0]"].dtype == np.uint32
    np.testing.assert_array_equal(got["out[0]"], jax.random.key_data(want_key))
    np.testing.assert_array_equal(got["out[1]"], want)


def test_a_jax_program_with_a_pruned_argument_takes_every_leaf(runner, tmp_path):
    # JAX prunes `unused` from its module, and the executable and the portable module take
    # no argument for it (the header's `pruned`, format version 4); the runner takes the
    # same inputs as Python's call, and transfers the others.
    import jax.numpy as jnp

    def f(unused, x, y):
        return jnp.sin(x) * y

    unused, x = np.ones((2, 2), np.float32), np.linspace(-1, 1, 4, dtype=np.float32)
    y = np.float32(3)
    model, compiled = save(tmp_path, f, unused, x, y, jit={"frontend": "jax"})
    assert artifacts.unpack(model.read_bytes()).header["pruned"] == [0]
    assert int.from_bytes(model.read_bytes()[8:12], "little") == 4  # the format version
    got = run_npz(runner, tmp_path, model, {"unused": unused, "x": x, "y": y})
    np.testing.assert_array_equal(got["out"], np.asarray(compiled(unused, x, y)))


def test_pytree_signature_names_leaves(runner, tmp_path):
    def tree(params, xs, *, scale):
        h = xs[0] @ params["w"] + params["b"]
        return {"y": h * scale, "aux": (xs[1].sum(), None), "n": [h.astype(np.int32)]}

    rng = np.random.default_rng(1)
    params = {"w": rng.standard_normal((3, 2)).astype(np.float32), "b": np.ones(2, np.float32)}
    xs = (rng.standard_normal((4, 3)).astype(np.float32) * 3, np.arange(5, dtype=np.float32))
    scale = np.float32(2.5)
    model, compiled = save(tmp_path, tree, params, xs, scale=scale)
    inputs = {
        "params['b']": params["b"],
        "params['w']": params["w"],
        "xs[0]": xs[0],
        "xs[1]": xs[1],
        "scale": scale,
    }
    out = run_npz(runner, tmp_path, model, inputs)
    want = compiled(params, xs, scale=scale)
    assert sorted(out) == ["out['aux'][0]", "out['n'][0]", "out['y']"]
    np.testing.assert_allclose(out["out['y']"], want["y"], rtol=1e-5)
    np.testing.assert_allclose(out["out['aux'][0]"], want["aux"][0], rtol=1e-5)
    assert out["out['n'][0]"].dtype == np.int32
    np.testing.assert_array_equal(out["out['n'][0]"], np.asarray(want["n"][0]))


def test_output_files_stay_in_their_folder(runner, tmp_path):
    """`-o DIR` names a file per output after its leaf path: a '/' in a dict key made the
    path leave DIR (`{'/../../../PWNED': ...}` wrote two folders up) or name a folder that
    is not there ("dense/kernel"); it is written %2F (and '%' %25)."""
    keys = ["/../../../PWNED", "dense/kernel", "50%"]
    model, _ = save(tmp_path, lambda x: {k: x * (i + 1.0) for i, k in enumerate(keys)},
                    np.ones(4, np.float32))  # fmt: skip
    x = tmp_path / "x.npy"
    np.save(x, np.arange(4, dtype=np.float32))
    out = tmp_path / "deep" / "er"
    out.mkdir(parents=True)
    (out / "out['").mkdir()  # the folder the traversal needed
    result = run(runner, model, "--input", x, "-o", out)
    assert result.returncode == 0, result.stderr
    written = sorted(p.name for p in out.iterdir() if p.is_file())
    assert written == ["out['%2F..%2F..%2F..%2FPWNED'].npy", "out['50%25'].npy",
                       "out['dense%2Fkernel'].npy"]  # fmt: skip
    np.testing.assert_array_equal(np.load(out / written[2]), np.arange(4) * 2.0)  # dense/kernel
    assert not any(p.name.startswith("PWNED") for p in tmp_path.rglob("*"))


def test_donated_argument(runner, tmp_path):
    def step(x, y):
        return x + y, y * 2.0

    x, y = np.arange(6, dtype=np.float32), np.full(6, 0.5, np.float32)
    model, compiled = save(tmp_path, step, x, y, jit={"donate_argnums": 0})
    assert artifacts.unpack(model.read_bytes()).header["donated"] == [True, False]
    out = run_npz(runner, tmp_path, model, {"x": x, "y": y})
    want = compiled(x.copy(), y)
    np.testing.assert_array_equal(out["out[0]"], np.asarray(want[0]))
    np.testing.assert_array_equal(out["out[1]"], np.asarray(want[1]))


BF16 = np.dtype(ml_dtypes.bfloat16)


def _bf16(x):
    return x * 2 + 1


def _i8(a, b):
    return a + b, a * b


def _bool(p, q):
    return p & ~q, p ^ q


DTYPE_CASES = {
    "bf16": (_bf16, (np.linspace(-3, 3, 12).astype(BF16).reshape(3, 4),)),
    "i8": (_i8, (np.arange(-60, 60, 10, dtype=np.int8), np.full(12, 7, np.int8))),
    "bool": (_bool, (np.arange(6) % 2 == 0, np.arange(6) % 3 == 0)),
}


@pytest.mark.parametrize("dtype", sorted(DTYPE_CASES))
def test_dtypes_exact(runner, tmp_path, dtype):
    fn, args = DTYPE_CASES[dtype]
    model, compiled = save(tmp_path, fn, *args)
    names = [p for p in ("x", "a", "b", "p", "q") if p in fn.__code__.co_varnames][: len(args)]
    out = run_npz(runner, tmp_path, model, dict(zip(names, args)))
    want = compiled(*args)
    want = want if isinstance(want, tuple) else (want,)
    keys = ["out"] if len(want) == 1 else [f"out[{i}]" for i in range(len(want))]
    for key, w in zip(keys, want):
        w = np.asarray(w)
        got = out[key]
        if w.dtype == BF16:  # NumPy saves ml_dtypes arrays as void of their size
            assert got.dtype == np.dtype("V2")
            got = got.view(BF16)
        assert got.dtype == w.dtype, key
        np.testing.assert_array_equal(got, w)


def _symbolic(tmp_path, sizes=(2, 5)) -> tuple[Path, object]:
    def grow(x):
        return x * 2.0, anp.concatenate([x, x + 1.0])

    compiled = aotkit.jit(grow).lower(aotkit.spec("f32[n,3]")).compile()
    for n in sizes:
        compiled(np.ones((n, 3), np.float32))
    model = tmp_path / "sym.aotx"
    compiled.save(model)
    return model, compiled


def test_symbolic_runs_held_specializations(runner, tmp_path):
    from aotkit.native import portable

    model, compiled = _symbolic(tmp_path)
    assert portable.add_portable_copy(model) == "0.9.0"
    for n in (2, 5):
        x = np.arange(n * 3, dtype=np.float32).reshape(n, 3)
        np.save(tmp_path / "x.npy", x)
        result = run(runner, model, "--input", tmp_path / "x.npy", "-o", tmp_path, "-v")
        assert result.returncode == 0, result.stderr
        assert result.stdout == f"out[0]: f32[{n},3]\nout[1]: f32[{2 * n},3]\n"
        assert "section 'stablehlo@0.9.0/executable." in result.stderr
        assert f"since it runs specialization n={n} of a symbolic program" in result.stderr
        for i, want in enumerate(compiled(x)):
            got = np.load(tmp_path / f"out[{i}].npy")
            assert got.dtype == np.float32
            np.testing.assert_array_equal(got, np.asarray(want))


def test_symbolic_refusals_name_specializations(runner, tmp_path):
    model, _ = _symbolic(tmp_path)
    np.save(tmp_path / "x2.npy", np.ones((2, 3), np.float32))
    np.save(tmp_path / "x3.npy", np.ones((3, 3), np.float32))
    result = run(runner, model, "--input", tmp_path / "x3.npy")
    assert result.returncode == 1
    assert (
        "the inputs' shapes (x: (3, 3)) are no specialization grow(x: f32[n,3]) -> (out[0]: "
        "f32[n,3], out[1]: f32[2*n,3]) holds (n=2; n=5); give inputs of one of those shapes"
    ) in result.stderr
    result = run(runner, model, "--input", tmp_path / "x2.npy")
    assert result.returncode == 1
    assert (
        "has symbolic shapes, and no static module of its specialization n=2 (aotkit-run "
        "compiles a portable module, which is symbolic here, and cannot load jaxlib's "
        f"executables): add them with `python -m aotkit.native portable {model}`"
    ) in result.stderr


def _resave(path: Path, **changes) -> Path:
    a = artifacts.unpack(path.read_bytes())
    header = {k: v for k, v in a.header.items() if k != "sections"}
    header.update(changes)
    out = path.with_name("changed.aotx")
    out.write_bytes(artifacts.pack(header, {n: a.section(n) for n in a.sections}))
    return out


def test_sharded_refused(runner, tmp_path):
    model, _ = save(tmp_path, lambda x: x + 1.0, np.ones(4, np.float32))
    layout = {"mesh": [["x", 1]], "devices": [0], "in_shardings": [None], "out_shardings": [None]}
    sharded = _resave(model, partitioning=layout)
    artifacts.unpack(sharded.read_bytes())  # Python reads it
    np.save(tmp_path / "x.npy", np.ones(4, np.float32))
    result = run(runner, sharded, "--input", tmp_path / "x.npy")
    assert result.returncode == 1
    assert (
        "is a sharded program (its header has a partitioning); aotkit-run runs programs of "
        "one device" in result.stderr
    )


@pytest.mark.parametrize("version", ["1.13.3", "minimum"])
def test_older_portable_copy_is_compiled(runner, tmp_path, version):
    from aotkit.native import portable

    args = mlp_args()
    model, compiled = save(tmp_path, mlp, *args)
    written = portable.add_portable_copy(model, version)
    assert written == ("1.13.3" if version == "1.13.3" else "0.9.0")
    loaded = aotkit.load(model)  # Python ignores the section
    np.testing.assert_array_equal(np.asarray(loaded(*args)), np.asarray(compiled(*args)))
    names = ("w1", "b1", "w2", "x")
    np.savez(tmp_path / "in.npz", **dict(zip(names, args)))
    result = run(runner, model, "--inputs", tmp_path / "in.npz", "-o", tmp_path, "-v")
    assert result.returncode == 0, result.stderr
    # The plugin reads StableHLO 0.9.0 to 1.13.3: the copy is compiled, not the 1.17.0 module.
    assert f"compiled the portable StableHLO (section 'stablehlo@{written}', version {written}" in (
        result.stderr
    )
    np.testing.assert_allclose(
        np.load(tmp_path / "out.npy"), np.asarray(compiled(*args)), rtol=1e-5, atol=1e-5
    )


def test_module_the_plugin_cannot_read_names_both_versions(runner, small, tmp_path):
    model, folder = small
    broken = _resave(model, stablehlo="1.99.0")
    a = artifacts.unpack(broken.read_bytes())
    header = {k: v for k, v in a.header.items() if k != "sections"}
    sections = {n: a.section(n) for n in a.sections}
    sections["stablehlo"] = b"ML\xefR not a module"
    broken.write_bytes(artifacts.pack(header, sections))
    x = folder / "x.npy"
    result = run(runner, broken, "--input", x, "--input", x)
    assert result.returncode == 1
    assert (
        f"the plugin {native.cpu_plugin()} did not compile its portable StableHLO (version "
        "1.99.0; the plugin reads StableHLO 0.9.0 to 1.13.3): "
    ) in result.stderr
    assert result.stderr.rstrip().endswith(
        "; where the version is the cause, use a newer plugin; or run it with aotkit.load in Python"
    )


def test_a_module_the_plugins_compiler_would_abort_on_is_refused(runner, tmp_path):
    # A cpu artifact of a complex128 convert records that XLA:TPU would end the process on
    # its portable module; on a plugin of that platform the runner refuses to compile it.
    x = np.arange(4, dtype=np.int32)
    model, _ = save(tmp_path, lambda x: x * 1j, x)
    what = artifacts.unpack(model.read_bytes()).header["aborts_on"]["tpu"]
    assert what.startswith("stablehlo.convert of complex128 values at ")
    np.save(tmp_path / "x.npy", x)
    assert run(runner, model, "--input", tmp_path / "x.npy").returncode == 0  # the CPU compiles it
    # The same field for this plugin's platform: refused before the plugin sees the module.
    aborting = _resave(model, aborts_on={"cpu": "stablehlo.divide of 'x'\n"})
    result = run(runner, aborting, "--input", tmp_path / "x.npy")
    assert result.returncode == 1
    assert (
        f"aotkit-run: {aborting}: the plugin (platform 'cpu') would compile its portable "
        "StableHLO, since its executable was compiled by jaxlib"
    ) in result.stderr  # (by jaxlib's own CPU client, ...)
    assert (
        "but the module holds \"stablehlo.divide of 'x'\\n\", on which that platform's "
        "compiler ends the process; save the artifact from a 'cpu' backend (its portable "
        "module is written for it), or run it with aotkit.load in Python"
    ) in result.stderr


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("aborts_on", ["tpu"], "header field 'aborts_on' is [\"tpu\"], not an object"),
        ("aborts_on", {"tpu": 3}, "header field 'aborts_on' must map strings to strings"),
        ("pruned", {"0": 1}, "header field 'pruned' is {\"0\": 1}, not a list of input indices"),
        ("pruned", [0.5], "header field 'pruned' is [0.5], not a list of input indices"),
        ("pruned", [2], "header field 'pruned' is [2]; it lists input indices below 2, each once"),
        ("pruned", [1, 0], "header field 'pruned' is [1, 0]; it lists input indices below 2, "),
        ("pruned", [0, 0], "header field 'pruned' is [0, 0]; it lists input indices below 2, "),
        ("pruned", [-1], "header field 'pruned' is [-1]; it lists input indices below 2, each"),
        # Options that end or exhaust the process in XLA's compile (the runner compiles the
        # portable module with them): SIGABRT, or 16 GB and growing.
        (
            "options",
            {"xla_unsupported_crash_on_hlo_pass_noop_change": True},
            "header field 'options' has 'xla_unsupported_crash_on_hlo_pass_noop_change', an "
            "option that makes the compiler end the process on purpose",
        ),
        (
            "options",
            {"xla_cpu_parallel_codegen_split_count": -1},
            "header field 'options' has 'xla_cpu_parallel_codegen_split_count' = -1, a "
            "negative count or size, which XLA would read as a huge unsigned size (aborting "
            "the process)",
        ),
        # A flag named for a place names one only with a string value.
        (
            "options",
            {"xla_hlo_evaluator_use_fast_path": "/tmp/evil"},
            "header field 'options' has 'xla_hlo_evaluator_use_fast_path', an option that "
            "names a path or makes the compiler write files",
        ),
        (
            "options",
            {"xla_cpu_parallel_codegen_split_count": 2147483647},
            "header field 'options' has 'xla_cpu_parallel_codegen_split_count' = 2147483647, "
            "a count above 4096, which makes the compile run for minutes with memory growing "
            "without bound",
        ),
    ],
)
def test_a_bad_header_field_is_refused_as_python_refuses(
    runner, small, tmp_path, field, value, message
):
    model, folder = small
    bad = _resave(model, **{field: value})
    with pytest.raises(ArtifactError, match=re.escape(message)):
        artifacts.unpack(bad.read_bytes(), str(bad))
    result = run(runner, bad, "--input", folder / "x.npy", "--input", folder / "x.npy")
    assert result.returncode == 1
    assert message in result.stderr


def test_a_flag_named_for_a_place_that_is_not_a_string_is_kept(runner, small):
    """`xla_hlo_evaluator_use_fast_path = True` was refused as naming a path (its name ends
    in `_path`), and saving left it out silently; a bool names no place."""
    model, folder = small
    flagged = _resave(model, options={"xla_hlo_evaluator_use_fast_path": True})
    header = artifacts.unpack(flagged.read_bytes(), str(flagged)).header
    assert header["options"] == {"xla_hlo_evaluator_use_fast_path": True}
    result = run(runner, flagged, "--input", folder / "x.npy", "--input", folder / "x.npy")
    assert result.returncode == 0, result.stderr


def test_pruned_leaves_with_a_partitioning_are_refused_as_python_refuses(runner, small):
    model, folder = small
    layout = {
        "mesh": [["x", 1]],
        "devices": [0],
        "in_shardings": [None] * 2,
        "out_shardings": [None],
    }
    bad = _resave(model, pruned=[0], partitioning=layout)
    message = (
        "header field 'pruned' is given for a sharded or symbolic program; aotkit writes neither"
    )
    with pytest.raises(ArtifactError, match=re.escape(message)):
        artifacts.unpack(bad.read_bytes(), str(bad))
    result = run(runner, bad, "--input", folder / "x.npy", "--input", folder / "x.npy")
    assert result.returncode == 1
    assert message in result.stderr


def test_older_portable_copy_refusals(tmp_path):
    from aotkit.native import portable

    model, _ = save(tmp_path, lambda x: x + 1.0, np.ones(4, np.float32))
    with pytest.raises(ValueError, match=r"target version '0\.1\.0' is not a StableHLO version"):
        portable.add_portable_copy(model, "0.1.0")
    layout = {"mesh": [["x", 1]], "devices": [0], "in_shardings": [None], "out_shardings": [None]}
    sharded = _resave(model, partitioning=layout)
    with pytest.raises(ValueError, match=r"is a sharded program, which aotkit-run does not run"):
        portable.add_portable_copy(sharded)
    symbolic, _ = _symbolic(tmp_path, sizes=())
    with pytest.raises(ValueError, match=r"is a symbolic program with no specialization"):
        portable.add_portable_copy(symbolic)


# --- refusals: files and inputs -----------------------------------------------------------


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    folder = tmp_path_factory.mktemp("small")
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    model, _ = save(folder, lambda x, y: x * y, x, x)
    np.save(folder / "x.npy", x)
    return model, folder


INPUT_CASES = {
    "dtype": (
        lambda f: np.save(f, np.zeros((2, 3), np.int32)),
        "--input {f}: leaf x is f32[2,3] (NumPy <f4), the file holds a <i4 (2, 3) array; "
        "give an array of that dtype and shape",
    ),
    "shape": (
        lambda f: np.save(f, np.zeros(6, np.float32)),
        "--input {f}: leaf x is f32[2,3] (NumPy <f4), the file holds a <f4 (6,) array",
    ),
    "fortran": (
        lambda f: np.save(f, np.asfortranarray(np.zeros((2, 3), np.float32))),
        "--input {f}: the file is in Fortran order; save it C-contiguous",
    ),
    "not npy": (
        lambda f: f.write_bytes(b"hello"),
        "--input {f}: the file is not a .npy file (no \\x93NUMPY magic); give a file written",
    ),
    "truncated": (
        lambda f: f.write_bytes(_npy(np.zeros((2, 3), np.float32))[:-4]),
        "--input {f}: leaf x: the file has 20 data bytes, its f32[2,3] needs 24",
    ),
}


def _npy(a) -> bytes:
    b = io.BytesIO()
    np.save(b, a)
    return b.getvalue()


@pytest.mark.parametrize("case", sorted(INPUT_CASES))
def test_bad_input_refused(runner, small, tmp_path, case):
    model, folder = small
    write, message = INPUT_CASES[case]
    f = tmp_path / "bad.npy"
    write(f)
    result = run(runner, model, "--input", f, "--input", folder / "x.npy")
    assert result.returncode == 1, result.stderr
    assert result.stderr.startswith("aotkit-run: ")
    assert message.format(f=f) in result.stderr


def test_npz_inputs_refused(runner, small, tmp_path):
    model, folder = small
    x = np.ones((2, 3), np.float32)
    np.savez_compressed(tmp_path / "c.npz", x=x)
    result = run(runner, model, "--inputs", tmp_path / "c.npz")
    assert result.returncode == 1
    assert "entry 'x.npy' is compressed (zip method 8); write it with np.savez (uncompressed" in (
        result.stderr
    )
    np.savez(tmp_path / "missing.npz", **{"x": x})
    result = run(runner, model, "--inputs", tmp_path / "missing.npz")
    assert "has no array for leaf y of lambda(x: f32[2,3], y: f32[2,3])" in (result.stderr)
    np.savez(tmp_path / "extra.npz", **{"x": x, "y": x, "z": x})
    result = run(runner, model, "--inputs", tmp_path / "extra.npz")
    assert "'z' is no input leaf of lambda(" in result.stderr
    result = run(runner, model, "--input", folder / "x.npy")
    assert "--input: lambda takes 2 input leaves, got 1 .npy file(s); give one per leaf" in (
        result.stderr
    )
    result = run(runner, model)
    assert "takes 2 input leaves; give them with --input X.npy" in result.stderr


def test_corrupted_input_files_refused_without_crash(runner, small, tmp_path):
    """Bytes changed, cut or inserted in .npy and .npz inputs (which carry no checksum): the
    runner runs what still reads as the leaf's array, else refuses it, never crashing."""
    model, folder = small
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    buffer = io.BytesIO()
    np.savez(buffer, x=x, y=x)
    sources = (_npy(x), buffer.getvalue())
    rng = random.Random(4747)
    refused = 0
    for i in range(40):
        data = bytearray(sources[i % 2])
        for _ in range(rng.randint(1, 3)):
            at = rng.randrange(len(data))
            if rng.random() < 0.6:
                data[at] = rng.randrange(256)
            else:
                del data[at:]
            if not data:
                break
        f = tmp_path / ("in.npz" if i % 2 else "in.npy")
        f.write_bytes(bytes(data))
        flags = ["--inputs", f] if i % 2 else ["--input", f, "--input", folder / "x.npy"]
        result = run(runner, model, *flags)
        assert result.returncode in (0, 1), f"case {i}: {result.stderr}"
        if result.returncode == 1:
            refused += 1
            assert result.stderr.startswith(f"aotkit-run: --input{'s' if i % 2 else ''} "), i
    assert refused > 20


@pytest.mark.parametrize(
    "argv, message",
    [
        ([], "the following arguments are required: MODEL.aotx"),
        (["m.aotx", "--repeat", "0"], "argument --repeat: '0' is not a count from 1"),
        (["m.aotx", "--bogus"], "unrecognized argument '--bogus'"),
        (["m.aotx", "--output", "o.txt"], "argument --output: 'o.txt' is not an .npz file name"),
        (["m.aotx", "--plugin", "p.so", "--platform", "cpu"], "give --plugin or --platform"),
    ],
)
def test_usage_errors_exit_2(runner, argv, message):
    result = run(runner, *argv)
    assert result.returncode == 2
    assert result.stderr.startswith("usage: aotkit-run MODEL.aotx")
    assert message in result.stderr


def test_plugin_errors(runner, small, tmp_path):
    model, folder = small
    x = folder / "x.npy"
    result = run(runner, model, "--input", x, "--input", x, "--plugin", tmp_path / "none.so")
    assert result.returncode == 1
    assert "plugin: no PJRT plugin for platform 'cpu' loads: tried " in result.stderr
    result = run(runner, model, "--input", x, "--input", x, "--platform", "gpu")
    assert "--platform: unknown platform 'gpu'; give cpu, tpu or cuda" in result.stderr
    libm = "libm.so.6"
    result = run(runner, model, "--input", x, "--input", x, "--plugin", libm)
    assert "plugin: libm.so.6 has no GetPjrtApi symbol, so it is no PJRT plugin" in result.stderr


CONTAINER_CASES = {
    "magic": (lambda d: b"PK" + d[2:], "is not an aotkit artifact (it starts with b'PK"),
    "prefix": (lambda d: d[:20], "is truncated: 20 bytes, shorter than the 48-byte prefix"),
    "version": (
        lambda d: d[:8] + (9).to_bytes(4, "little") + d[12:],
        "has artifact format version 9, newer than this aotkit reads (4)",
    ),
    "header sha": (lambda d: d[:60] + bytes([d[60] ^ 1]) + d[61:], "the header is corrupted"),
    "section sha": (
        lambda d: d[:-3] + bytes([d[-3] ^ 1]) + d[-2:],
        "is corrupted (its SHA-256 does not match the header's)",
    ),
    "trailing": (lambda d: d + b"xx", "has 2 bytes after its last section"),
    "truncated": (lambda d: d[:-5], "but its sections end at byte"),
}


@pytest.mark.parametrize("case", sorted(CONTAINER_CASES))
def test_container_faults_refused_as_python_refuses(runner, small, tmp_path, case):
    model, folder = small
    change, message = CONTAINER_CASES[case]
    bad = tmp_path / "bad.aotx"
    bad.write_bytes(change(model.read_bytes()))
    with pytest.raises(ArtifactError) as python:
        artifacts.unpack(bad.read_bytes(), str(bad))
    assert message in str(python.value)
    result = run(runner, bad, "--input", folder / "x.npy", "--input", folder / "x.npy")
    assert result.returncode == 1
    assert result.stderr.startswith(f"aotkit-run: {bad}")
    assert message in result.stderr


def test_header_fuzz_refused_without_crash(runner, small, tmp_path):
    """The reliability suite's header mutations: what Python refuses the runner refuses, in
    its own process, without a signal; what Python reads the runner reads or refuses."""
    from tests.reliability import header_fuzzing

    model, folder = small
    data = model.read_bytes()
    rng = random.Random(47)
    refused = 0
    x = folder / "x.npy"
    for i in range(60):
        kind = header_fuzzing.KINDS[i % len(header_fuzzing.KINDS)]
        what, mutated = header_fuzzing.mutate(rng, kind, data, str(tmp_path / "trap"))
        path = tmp_path / f"case{i}.aotx"
        path.write_bytes(mutated)
        try:
            artifacts.unpack(mutated, str(path))
            python_ok = True
        except ArtifactError:
            python_ok = False
        result = run(runner, path, "--input", x, "--input", x)
        label = f"case {i} ({kind}): {what}"
        assert result.returncode in (0, 1), label
        if not python_ok:
            refused += 1
            assert result.returncode == 1, f"{label}: Python refuses, the runner ran it"
            assert result.stderr.startswith("aotkit-run: "), label
        assert not (tmp_path / "trap").exists(), label
    assert refused > 20


# --- the C API ----------------------------------------------------------------------------


def _compile_c(tmp_path, source: Path, name: str) -> Path:
    exe = tmp_path / name
    cc = native.compiler().split()
    command = [*cc, *native.compile_flags(), str(source), str(native.RUNTIME), "-o", str(exe)]
    subprocess.run([*command, *native.LIBS], check=True, capture_output=True)
    return exe


HOSTILE_C = r"""
#include <stdio.h>
#include <string.h>
#include "aotkit_runtime.h"
int main(int argc, char **argv) {
  char err[AOTKIT_ERROR_SIZE];
  aotkit_artifact *a = NULL;
  aotkit_runtime *r = NULL;
  aotkit_program *p = NULL;
  printf("%d %s\n", aotkit_artifact_open(NULL, &a, err, sizeof err), err);
  printf("%d %s\n", aotkit_artifact_open(argv[1], NULL, err, sizeof err), err);
  printf("%d %s\n", aotkit_artifact_open_bytes("xy", 2, "mem", &a, err, sizeof err), err);
  printf("%d\n", aotkit_artifact_open_bytes("xy", 2, "mem", &a, NULL, 0));
  printf("%d %s\n", aotkit_program_load(NULL, NULL, &p, err, sizeof err), err);
  printf("%d %s\n", aotkit_program_call(NULL, NULL, 0, NULL, 0, err, sizeof err), err);
  printf("[%s][%zu][%p]\n", aotkit_artifact_signature(NULL), aotkit_artifact_num_inputs(NULL),
         (void *)aotkit_artifact_input(NULL, 0));
  aotkit_artifact_close(NULL);
  aotkit_artifact_close(&a);
  aotkit_program_free(&p);
  aotkit_runtime_close(&r);
  if (aotkit_artifact_open(argv[1], &a, err, sizeof err)) return 10;
  /* a handle of another kind is refused, not misread */
  printf("%d %s\n", aotkit_program_load((aotkit_runtime *)a, a, &p, err, sizeof err), err);
  printf("%p\n", (void *)aotkit_artifact_input(a, 99));
  printf("%d %s\n", aotkit_artifact_select(a, 0, err, sizeof err), err);
  if (aotkit_runtime_open(NULL, "cpu", &r, err, sizeof err)) return 11;
  if (aotkit_program_load(r, a, &p, err, sizeof err)) return 12;
  float x[6] = {1, 2, 3, 4, 5, 6}, out[6];
  const void *in[2] = {x, NULL};
  void *outs[1] = {out};
  printf("%d %s\n", aotkit_program_call(p, in, 2, outs, 1, err, sizeof err), err);
  printf("%d %s\n", aotkit_program_call(p, in, 1, outs, 1, err, sizeof err), err);
  in[1] = x;
  int rc = aotkit_program_call(p, in, 2, outs, 1, err, sizeof err);
  printf("%d %g\n", rc, out[5]);
  aotkit_program_free(&p);
  aotkit_program_free(&p); /* the handle is NULL now: nothing happens */
  aotkit_runtime_close(&r);
  aotkit_runtime_close(&r);
  aotkit_artifact_close(&a);
  aotkit_artifact_close(&a);
  printf("done\n");
  return 0;
}
"""


def test_c_api_hostile_calls(small, tmp_path):
    model, _ = small
    source = tmp_path / "hostile.c"
    source.write_text(HOSTILE_C)
    exe = _compile_c(tmp_path, source, "hostile")
    result = subprocess.run([str(exe), str(model)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, (result.returncode, result.stdout, result.stderr)
    lines = result.stdout.splitlines()
    assert lines[0] == "1 aotkit_artifact_open: path is NULL; pass the path of an artifact file"
    assert lines[1].startswith("1 aotkit_artifact_open: out is NULL")
    assert lines[2].startswith("1 mem is not an aotkit artifact (it starts with b'xy'")
    assert lines[3] == "1"
    assert lines[4].startswith("1 aotkit_program_load: runtime is not an open aotkit_runtime")
    assert lines[5].startswith("1 aotkit_program_call: program is not a loaded aotkit_program")
    assert lines[6] == "[][0][(nil)]"
    assert lines[7].startswith("1 aotkit_program_load: runtime is not an open aotkit_runtime")
    assert lines[8] == "(nil)"
    assert lines.pop(9).startswith("1 aotkit_artifact_select: lambda(x: f32[2,3], y: f32[2,3]) ")
    assert lines[9] == "1 aotkit_program_call: input 1 (y) is NULL; pass its 24 bytes"
    assert lines[10].startswith(
        "1 aotkit_program_call: lambda(x: f32[2,3], y: f32[2,3]) -> (out: "
        "f32[2,3]) takes 2 inputs and gives 1 outputs, got 1 and 1"
    )
    assert lines[11] == "0 36"
    assert lines[12] == "done"


def test_example_c_program(tmp_path):
    rng = np.random.default_rng(3)
    w1 = rng.standard_normal((4, 8)).astype(np.float32)
    w2 = rng.standard_normal((8, 2)).astype(np.float32)
    x = rng.standard_normal((1, 4)).astype(np.float32)

    def small_mlp(w1, w2, x):
        return anp.tanh(x @ w1) @ w2

    model, compiled = save(tmp_path, small_mlp, w1, w2, x, name="mlp")
    exe = _compile_c(tmp_path, ROOT / "examples" / "run_mlp.c", "run_mlp")
    feeds = [str(v) for a in (w1, w2, x) for v in a.ravel()]
    result = subprocess.run(
        [str(exe), str(model), *feeds], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    got = np.array([float(v) for v in result.stdout.split()[-2:]], np.float32)
    np.testing.assert_allclose(got, np.asarray(compiled(w1, w2, x)).ravel(), rtol=1e-5, atol=1e-5)
    assert result.stdout.startswith("small_mlp(w1: f32[4,8], w2: f32[8,2], x: f32[1,4])")


def test_build_reuses_and_reports(tmp_path, monkeypatch):
    first = native.build(tmp_path)
    assert native.build(tmp_path) == first
    monkeypatch.setenv("CC", "no-such-compiler-xyz")
    with pytest.raises(RuntimeError, match=r"aotkit.native.build: no C compiler \(cc, gcc or "):
        native.build(tmp_path)
