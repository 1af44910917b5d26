"""AOT artifacts (aotkit/artifacts.py): save a Compiled, load it in a fresh process.

The oracle of a loaded artifact is the `Compiled` that was saved: the same results, the
same errors for wrong calls, the same donation behaviour. The round trips run in one fresh
child process per test module (tests/artifact_child.py), which imports nothing of aotkit
before `aotkit.load`. Every corruption is an `ArtifactError` with an exact message; the
corrupted files are also loaded in a child process that must not die of a signal.
"""

from __future__ import annotations

import hashlib
import json
import re
import struct
import subprocess
import sys
import warnings
from pathlib import Path

import jaxlib
import numpy as np
import pytest
from jax import tree_util
from jaxlib.mlir.dialects import stablehlo

import aotkit
import aotkit.numpy as anp
from aotkit import artifacts, backends
from aotkit.errors import ArtifactError, ArtifactWarning
from aotkit.stages import Compiled
from tests import artifact_child

ROOT = Path(__file__).resolve().parents[1]
CHILD = ROOT / "tests" / "artifact_child.py"
REWRITE = re.escape(artifacts.REWRITE) + "$"


# --- programs ------------------------------------------------------------------------------


def scalars(x, y):
    return x * y + 1.0


def pytree(params, xs, *, scale):
    return {
        "s": params["w"] @ xs[0] * scale,
        "l": [xs[1] * 2.0, None],
        "t": (params["b"] + 1.0,),
    }


def donated(x, y):
    return x + y


def bf16(x):
    return x * 2.0 + 1.0


def complex_(z):
    return z * anp.conj(z) + 1j


def multi_output(x):
    return anp.sin(x), anp.cos(x), anp.sum(x)


def control_flow(x, n):
    def body(i, c):
        return aotkit.cond(c[0] > 0, lambda v: v * 0.5, lambda v: v + 1.0, c)

    return aotkit.fori_loop(0, 3, body, x) + n.astype(x.dtype)


def _rng():
    return np.random.default_rng(0)


def program_args(name: str) -> tuple[tuple, dict]:
    rng = _rng()
    f32 = rng.standard_normal(4).astype(np.float32)
    if name == "scalars":
        return (3.0, np.float32(2.0)), {}
    if name == "pytree":
        params = {
            "w": rng.standard_normal((3, 4)).astype(np.float32),
            "b": rng.standard_normal(3).astype(np.float32),
        }
        xs = [f32, rng.standard_normal(2).astype(np.float32)]
        return (params, xs), {"scale": np.float32(0.5)}
    if name == "donated":
        return (f32, np.ones(4, np.float32)), {}
    if name == "bf16":
        return (f32.astype(aotkit.numpy.bfloat16),), {}
    if name == "complex":
        return ((f32 + 1j * f32[::-1]).astype(np.complex64),), {}
    if name == "multi_output":
        return (f32,), {}
    return (f32, np.int32(2)), {}


PROGRAMS = {
    "scalars": scalars,
    "pytree": pytree,
    "donated": donated,
    "bf16": bf16,
    "complex": complex_,
    "multi_output": multi_output,
    "control_flow": control_flow,
}
BACKENDS = ("cpu", "interpreter")
CASES = [(p, b) for b in BACKENDS for p in PROGRAMS]


def compile_program(name: str, backend: str) -> Compiled:
    args, kwargs = program_args(name)
    donate = (0,) if name == "donated" else ()
    return (
        aotkit.jit(PROGRAMS[name], donate_argnums=donate, backend=backend)
        .lower(*args, **kwargs)
        .compile()
    )


def run_child(plan: dict, tmp: Path, env: dict | None = None) -> dict:
    plan_path, out_path = tmp / "plan.json", tmp / "out.json"
    plan_path.write_text(json.dumps(plan))
    proc = subprocess.run(
        [sys.executable, str(CHILD), str(plan_path), str(out_path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(out_path.read_text())


@pytest.fixture(scope="module")
def round_trip(tmp_path_factory):
    """Every program on every backend: saved here, loaded and called in one fresh process."""
    tmp = tmp_path_factory.mktemp("round_trip")
    saved, plan = {}, {}
    for name, backend in CASES:
        case = f"{name}-{backend}"
        compiled = compile_program(name, backend)
        path = tmp / f"{case}.aotx"
        compiled.save(path)
        args, kwargs = program_args(name)
        saved[case] = compiled
        plan[case] = {
            "artifact": str(path),
            "args": artifact_child.encode(args),
            "kwargs": artifact_child.encode(kwargs),
            "donate": name == "donated",
        }
    return saved, run_child(plan, tmp)


@pytest.mark.parametrize("name, backend", CASES)
def test_round_trip_in_a_fresh_process(round_trip, name, backend):
    saved, results = round_trip
    case = f"{name}-{backend}"
    got = results[case]
    args, kwargs = program_args(name)
    expected = artifact_child.call_record(saved[case], args, kwargs, name == "donated")
    assert got["origin"] == "artifact"
    assert got["lowered"] == "None"
    assert got["errors"] == expected["errors"]
    assert got.get("donated") == expected.get("donated")
    want = artifact_child.decode(expected["out"])
    have = artifact_child.decode(got["out"])
    assert tree_util.tree_structure(have) == tree_util.tree_structure(want)
    for h, w in zip(tree_util.tree_leaves(have), tree_util.tree_leaves(want), strict=True):
        assert h.dtype == w.dtype and h.shape == w.shape
        np.testing.assert_array_equal(h, w)


def test_donated_argument_errors_are_the_originals(round_trip):
    _, results = round_trip
    assert results["donated-cpu"]["donated"].startswith(
        "ValueError: Compiled 'donated': argument x was deleted or donated to an earlier "
        "call; pass a live array"
    )


def test_lapack_custom_calls_run_after_a_fresh_load(tmp_path):
    import jax.numpy as jnp

    compiled = (
        aotkit.jit(lambda a: jnp.linalg.inv(a), frontend="jax")
        .lower(aotkit.spec("f32[3,3]"))
        .compile()
    )
    assert b"lapack_" in compiled._executable.serialize()
    compiled.save(tmp_path / "inv.aotx")
    a = (np.eye(3) * 2 + np.triu(np.ones((3, 3)), 1)).astype(np.float32)
    plan = {
        "inv": {
            "artifact": str(tmp_path / "inv.aotx"),
            "args": artifact_child.encode((a,)),
            "kwargs": artifact_child.encode({}),
        }
    }
    plan["recompiled"] = {**plan["inv"], "recompile": True}
    got = run_child(plan, tmp_path)  # a crash would fail run_child's exit status check
    for case in ("inv", "recompiled"):
        out = artifact_child.decode(got[case]["out"])
        np.testing.assert_array_equal(out, np.asarray(compiled(a)))


def test_loading_imports_neither_the_tracer_nor_the_passes(round_trip):
    _, results = round_trip
    loaded = set(results["modules"])
    for heavy in ("aotkit.tracing", "aotkit.passes", "aotkit.api", "aotkit.numpy"):
        assert heavy not in loaded


def test_lazy_names_still_resolve():
    code = (
        "import aotkit; import numpy as np\n"
        "assert 'aotkit.numpy' not in __import__('sys').modules\n"
        "f = aotkit.jit(lambda x: np.sin(x) * 2)\n"  # plain NumPy code needs the op families
        "print(f'{float(f(np.float32(1))):.5f}', aotkit.numpy.sin.__name__, aotkit.cond.__name__,\n"
        "      aotkit.nn.relu.__name__, aotkit.passes.__name__, 'load' in dir(aotkit))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=600
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [
        f"{np.sin(1.0) * 2:.5f}",
        "sin",
        "cond",
        "relu",
        "aotkit.passes",
        "True",
    ]


def test_unknown_attribute_of_the_package():
    with pytest.raises(AttributeError, match=r"^module 'aotkit' has no attribute 'nope'$"):
        aotkit.nope  # noqa: B018


# --- the loaded Compiled --------------------------------------------------------------------


@pytest.fixture(scope="module")
def mlp_artifact():
    def mlp(x, w):
        return anp.tanh(x @ w)

    spec = aotkit.spec("f32[2,3]"), aotkit.spec("f32[3,3]")
    compiled = aotkit.jit(mlp).lower(*spec).compile()
    return compiled, compiled.serialize()


def mlp_inputs():
    rng = _rng()
    return rng.standard_normal((2, 3)).astype(np.float32), np.eye(3, dtype=np.float32)


def test_loaded_compiled_is_the_same_stage(mlp_artifact):
    compiled, data = mlp_artifact
    loaded = aotkit.load(data)
    assert loaded.lowered is None and loaded.origin == "artifact"
    assert (loaded.in_tree, loaded.out_tree) == (compiled.in_tree, compiled.out_tree)
    assert loaded.flat_in_specs == compiled.flat_in_specs
    assert loaded.cost_analysis() == compiled.cost_analysis()
    assert loaded.as_text() == compiled.as_text()
    assert repr(loaded) == repr(compiled)
    np.testing.assert_array_equal(loaded(*mlp_inputs()), compiled(*mlp_inputs()))


def test_a_loaded_artifact_saves_again(mlp_artifact, tmp_path):
    _, data = mlp_artifact
    loaded = aotkit.load(data)
    loaded.save(tmp_path / "again.aotx")
    assert (tmp_path / "again.aotx").read_bytes() == data
    assert [f.name for f in tmp_path.iterdir()] == ["again.aotx"]  # no temporary file left
    # jaxlib's CPU client re-serializes a loaded executable without its object code: the
    # saved bytes are what must be written again, and what runs.
    twice = aotkit.load(tmp_path / "again.aotx")
    np.testing.assert_array_equal(twice(*mlp_inputs()), loaded(*mlp_inputs()))


def test_options_are_saved_and_used(tmp_path):
    compiled = aotkit.lower(lambda x: x * 2.0, aotkit.spec("f32[3]")).compile(
        options={"xla_cpu_enable_fast_math": True}
    )
    assert compiled.options == {"xla_cpu_enable_fast_math": True}
    loaded = aotkit.load(compiled.serialize(), recompile=True)
    assert loaded.options == {"xla_cpu_enable_fast_math": True}
    assert loaded.origin == "recompiled"


def test_path_and_bytes_load_alike(mlp_artifact, tmp_path):
    _, data = mlp_artifact
    (tmp_path / "m.aotx").write_bytes(data)
    for source in (tmp_path / "m.aotx", str(tmp_path / "m.aotx"), bytearray(data)):
        np.testing.assert_array_equal(
            aotkit.load(source)(*mlp_inputs()), aotkit.load(data)(*mlp_inputs())
        )


def test_module_with_chlo_saves_through_legalization():
    compiled = aotkit.jit(lambda x: anp.sinh(x), pipeline="none").lower(aotkit.spec("f32[3]"))
    assert "chlo." in compiled.as_text()
    compiled = compiled.compile()
    x = np.array([0.1, 0.2, 0.3], np.float32)
    loaded = aotkit.load(compiled.serialize(), recompile=True)
    np.testing.assert_allclose(loaded(x), compiled(x), rtol=1e-6)


def test_interpreter_loads_a_cpu_artifact_by_recompiling(mlp_artifact, recwarn):
    compiled, data = mlp_artifact
    loaded = aotkit.load(data, backend="interpreter")
    assert loaded.origin == "recompiled" and loaded.backend.name == "interpreter"
    assert not [w for w in recwarn if issubclass(w.category, ArtifactWarning)]
    np.testing.assert_allclose(loaded(*mlp_inputs()), compiled(*mlp_inputs()), rtol=1e-6)


def test_load_module_of_an_artifact_keeps_pytrees_and_parses_in_process(tmp_path):
    compiled = compile_program("pytree", "cpu")
    compiled.save(tmp_path / "p.aotx")
    lowered = aotkit.load_module(tmp_path / "p.aotx")
    assert lowered.in_tree == compiled.in_tree and lowered.out_tree == compiled.out_tree
    assert lowered.frontend == "file" and lowered.name == "pytree"
    args, kwargs = program_args("pytree")
    out = lowered.compile()(*args, **kwargs)
    np.testing.assert_array_equal(out["s"], compiled(*args, **kwargs)["s"])


# --- saving: what can and cannot be written -------------------------------------------------


def test_custom_pytree_nodes_must_be_registered_to_be_saved():
    # Namedtuples need no registration (tests/test_artifact_pytrees.py); other nodes do.
    class Box:
        def __init__(self, v):
            self.v = v

    tree_util.register_pytree_node(Box, lambda b: ((b.v,), None), lambda _, c: Box(*c))
    compiled = aotkit.lower(lambda x: Box(x), aotkit.spec("f32[]")).compile()
    with pytest.raises(TypeError, match=(
        r"^Compiled 'lambda': serialize: result is a tests.test_artifacts.test_custom_pytree_"
        r"nodes_must_be_registered_to_be_saved.<locals>.Box, a custom pytree node that is not "
        r"registered for serialization; call aotkit.register_pytree_node_serialization\(Box\) "
        r"in the processes that save and load it \(a namedtuple, or a type registered with "
        r"jax.export, needs no call\)$"
    )):  # fmt: skip
        compiled.serialize()


def test_dict_keys_must_be_str_or_int():
    compiled = aotkit.lower(lambda d: d[(1, 2)], {(1, 2): aotkit.spec("f32[]")}).compile()
    with pytest.raises(TypeError, match=(
        r"^Compiled 'lambda': serialize: argument args\[0\] is a dict with key \(1, 2\) "
        r"\(tuple\); artifacts keep dict keys that are str or int: use such keys$"
    )):  # fmt: skip
        compiled.serialize()


def test_int_dict_keys_round_trip():
    compiled = aotkit.lower(lambda d: {3: d[1] + 1.0}, {1: aotkit.spec("f32[]")}).compile()
    loaded = aotkit.load(compiled.serialize())
    assert loaded({1: np.float32(1)}) == {3: np.float32(2)}


def test_compiled_without_module_cannot_serialize(mlp_artifact):
    compiled, _ = mlp_artifact
    bare = Compiled(compiled._executable, in_tree=compiled.in_tree, out_tree=compiled.out_tree)
    with pytest.raises(ValueError, match=(
        r"^Compiled 'mlp': serialize: it has neither its Lowered stage nor a portable "
        r"StableHLO module to save; compile it with Lowered.compile \(or load it with "
        r"aotkit.load\)$"
    )):  # fmt: skip
        bare.serialize()


def test_save_needs_a_path(mlp_artifact):
    compiled, _ = mlp_artifact
    with pytest.raises(TypeError, match=(
        r"^Compiled 'mlp': save: expected a path, got int; pass a file name such as "
        r"'model.aotx'$"
    )):  # fmt: skip
        compiled.save(3)


# --- load's own errors ------------------------------------------------------------------------


def test_load_errors(mlp_artifact, tmp_path):
    _, data = mlp_artifact
    with pytest.raises(ValueError, match=(
        r"^aotkit.load: recompile='yes'; expected 'auto', True or False$"
    )):  # fmt: skip
        aotkit.load(data, recompile="yes")
    with pytest.raises(TypeError, match=(
        r"^aotkit.load: backend must be a name such as 'cpu', got 3$"
    )):  # fmt: skip
        aotkit.load(data, backend=3)
    with pytest.raises(TypeError, match=(
        r"^aotkit.load: expected a path or bytes, got int; pass the artifact's path or its "
        r"contents as bytes$"
    )):  # fmt: skip
        aotkit.load(3)
    missing = str(tmp_path / "none.aotx")
    with pytest.raises(FileNotFoundError, match=(
        rf"^aotkit.load: no such file {re.escape(repr(missing))}; pass the path of an artifact "
        r"written by Compiled.save or `aotkit compile ... -o FILE.aotx`$"
    )):  # fmt: skip
        aotkit.load(missing)
    with pytest.raises(ArtifactError, match=(
        rf"^aotkit.load: {re.escape(str(tmp_path))} is a directory; pass the path of an "
        r"artifact file$"
    )):  # fmt: skip
        aotkit.load(tmp_path)


def test_backend_that_does_not_start(mlp_artifact):
    _, data = mlp_artifact
    with pytest.raises(ArtifactError, match=(
        r"^aotkit.load: <bytes> was compiled for backend 'cpu', which does not start here "
        r"\(backends.get: unknown backend 'nope'; available: "
    )):  # fmt: skip
        aotkit.load(data, backend="nope")


def test_missing_backend_recompiles_on_the_default(mlp_artifact):
    _, data = mlp_artifact
    moved = repack(data, target={"backend": "nowhere", "platform": "x", "version": "1"})
    with pytest.warns(ArtifactWarning, match=(
        r"^aotkit.load: <bytes> was compiled with backend 'nowhere' \(here 'cpu'\), "
    )):  # fmt: skip
        loaded = aotkit.load(moved)
    assert loaded.origin == "recompiled" and loaded.backend.name == "cpu"
    with pytest.raises(ArtifactError, match=(
        r"^aotkit.load: <bytes> was compiled for backend 'nowhere', which does not start here "
        r"\(backends.get: unknown backend 'nowhere'"
    )):  # fmt: skip
        aotkit.load(moved, recompile=False)


def test_base_backend_does_not_deserialize():
    with pytest.raises(NotImplementedError, match=(
        r"^backend 'interpreter' does not load serialized executables \(executable_format is "
        r"None\); compile the artifact's portable StableHLO$"
    )):  # fmt: skip
        backends.get("interpreter").deserialize(b"", name="f", in_specs=(), out_specs=())


# --- other platforms and versions -------------------------------------------------------------


def repack(data: bytes, *, drop=(), replace=None, **fields) -> bytes:
    """`data` written again with header `fields` and sections changed (checksums valid)."""
    art = artifacts.unpack(data)
    header = {k: v for k, v in art.header.items() if k != "sections"}
    header.update(fields)
    sections = {n: bytes(v) for n, v in art.sections.items() if n not in drop}
    sections.update(replace or {})
    return artifacts.pack(header, sections)


def other_target(data: bytes, **changes) -> bytes:
    target = dict(artifacts.unpack(data).target)
    target.update(changes)
    return repack(data, target=target)


def test_other_jaxlib_recompiles_with_a_warning(mlp_artifact):
    compiled, data = mlp_artifact
    moved = other_target(data, runtime="jaxlib 0.9.0")
    here = f"jaxlib {jaxlib.__version__}"
    with pytest.warns(ArtifactWarning, match=(
        rf"^aotkit.load: <bytes> was compiled with runtime 'jaxlib 0.9.0' \(here '{here}'\); "
        r"compiling its portable StableHLO for backend 'cpu' \(recompile=True does so without "
        r"this warning\)$"
    )):  # fmt: skip
        loaded = aotkit.load(moved)
    assert loaded.origin == "recompiled"
    np.testing.assert_array_equal(loaded(*mlp_inputs()), compiled(*mlp_inputs()))


def test_other_platform_without_recompiling_names_both(mlp_artifact):
    _, data = mlp_artifact
    moved = other_target(data, platform="tpu", platform_version="tpu v9")
    with pytest.raises(ArtifactError, match=(
        r"^aotkit.load: <bytes> was compiled with platform 'tpu' \(here 'cpu'\), "
        r"platform_version 'tpu v9' \(here 'cpu'\); load it with recompile=True or 'auto' to "
        r"compile its portable StableHLO here$"
    )):  # fmt: skip
        aotkit.load(moved, recompile=False)


def test_other_host_cpu_recompiles(mlp_artifact, recwarn):
    _, data = mlp_artifact
    moved = other_target(data, host="x86_64 0000000000000000")
    loaded = aotkit.load(moved, recompile=True)
    assert loaded.origin == "recompiled"
    assert not [w for w in recwarn if issubclass(w.category, ArtifactWarning)]


def test_recompile_true_always_compiles(mlp_artifact):
    _, data = mlp_artifact
    assert aotkit.load(data, recompile=True).origin == "recompiled"
    assert aotkit.load(data, recompile=False).origin == "artifact"


def test_artifact_without_executable(mlp_artifact):
    _, data = mlp_artifact
    bare = repack(data, drop=("executable",), executable_format=None)
    with pytest.raises(ArtifactError, match=(
        r"^aotkit.load: <bytes> was compiled with executable_format None \(here 'pjrt'\); "
    )):  # fmt: skip
        aotkit.load(bare, recompile=False)
    with pytest.warns(ArtifactWarning):
        assert aotkit.load(bare).origin == "recompiled"


def test_executable_that_does_not_load(mlp_artifact):
    compiled, data = mlp_artifact
    broken = repack(data, replace={"executable": b"not an executable"})
    with pytest.raises(ArtifactError, match=(
        r"^aotkit.load: <bytes>: its executable does not load \(backend 'cpu' could not load "
        r"the serialized executable of 'mlp': .*\); load it with recompile=True or 'auto' to "
        r"compile its portable StableHLO$"
    )):  # fmt: skip
        aotkit.load(broken, recompile=False)
    with pytest.warns(ArtifactWarning, match=(
        r"^aotkit.load: <bytes>: its executable does not load \(.*\); compiling its portable "
        r"StableHLO instead$"
    )) as record:  # fmt: skip
        loaded = aotkit.load(broken)
    # The warning points at the line that called aotkit.load.
    assert {w.filename for w in record if w.category is ArtifactWarning} == {__file__}
    np.testing.assert_array_equal(loaded(*mlp_inputs()), compiled(*mlp_inputs()))


def test_executable_of_another_signature(mlp_artifact):
    _, data = mlp_artifact
    other = aotkit.lower(lambda x: x + 1.0, aotkit.spec("f32[2,3]")).compile()
    swapped = repack(data, replace={"executable": other._executable.serialize()})
    with pytest.raises(ArtifactError, match=(
        r"^aotkit.load: <bytes>: its executable does not load \(backend 'cpu': the serialized "
        r"executable of 'mlp' takes 1 arguments and returns 1 results, but its signature has 2 "
        r"and 1\); "
    )):  # fmt: skip
        aotkit.load(swapped, recompile=False)


def test_portable_module_of_another_signature(mlp_artifact):
    _, data = mlp_artifact
    other = aotkit.lower(lambda x: x + 1.0, aotkit.spec("f32[2,3]"))
    swapped = repack(data, replace={"stablehlo": other.as_portable_artifact()})
    with pytest.raises(ArtifactError, match=(
        r"^aotkit.load: <bytes>: its portable StableHLO takes \(f32\[2,3\]\) -> \(f32\[2,3\]\) "
        r"but its header says \(f32\[2,3\], f32\[3,3\]\) -> \(f32\[2,3\]\); " + REWRITE
    )):  # fmt: skip
        aotkit.load(swapped, recompile=True)


def test_portable_module_that_does_not_load(mlp_artifact):
    _, data = mlp_artifact
    version = stablehlo.get_current_version()
    with pytest.raises(ArtifactError, match=(
        rf"^aotkit.load: <bytes>: its portable StableHLO \(version {re.escape(version)}\) does "
        rf"not load here \(StableHLO {re.escape(version)}\): failed to deserialize module; write "
        r"the artifact again with this version$"
    )):  # fmt: skip
        aotkit.load(repack(data, replace={"stablehlo": b"not bytecode"}), recompile=True)
    with pytest.raises(ArtifactError, match=(
        r"^aotkit.load: <bytes>: its portable StableHLO has no @main function; " + REWRITE
    )):  # fmt: skip
        aotkit.load(repack(data, replace={"stablehlo": b""}), recompile=True)


# --- corruption: every class is an ArtifactError naming the file ----------------------------


def flip(data: bytes, at: int) -> bytes:
    return data[:at] + bytes([data[at] ^ 0x40]) + data[at + 1 :]


def section_offsets(data: bytes) -> dict[str, tuple[int, int]]:
    art = artifacts.unpack(data)
    header_size = struct.unpack_from("<I", data, 12)[0]
    offset = artifacts.PREFIX_SIZE + header_size
    spans = {}
    for entry in art.header["sections"]:
        spans[entry["name"]] = (offset, entry["size"])
        offset += entry["size"]
    return spans


def raw_header(text: bytes, version: int = artifacts.FORMAT_VERSION) -> bytes:
    digest = hashlib.sha256(text).digest()
    return struct.pack("<8sII32s", artifacts.MAGIC, version, len(text), digest) + text


def corruptions(data: bytes) -> dict[str, tuple[bytes, str]]:
    """name -> (corrupted bytes, the message aotkit.load must raise, after `<where>: `)."""
    spans = section_offsets(data)
    header_end = artifacts.PREFIX_SIZE + struct.unpack_from("<I", data, 12)[0]
    sections_end = len(data)
    header = {k: v for k, v in artifacts.unpack(data).header.items() if k != "sections"}
    cases = {}
    for name, (start, size) in spans.items():
        cases[f"flip-{name}"] = (
            flip(data, start + size // 2),
            f"section {name!r} is corrupted (its SHA-256 does not match the header's); ",
        )
    cases["flip-header"] = (
        flip(data, artifacts.PREFIX_SIZE + 5),
        "the header is corrupted (its SHA-256 does not match); ",
    )
    cases["flip-header-digest"] = (
        flip(data, 20),
        "the header is corrupted (its SHA-256 does not match); ",
    )
    for at in (0, 4, 20, artifacts.PREFIX_SIZE + 3, header_end + 10, sections_end - 1):
        if at == 0:
            message = "is empty, not an aotkit artifact; "
        elif at < artifacts.PREFIX_SIZE:
            message = f"is truncated: {at} bytes, shorter than the {artifacts.PREFIX_SIZE}-byte"
        elif at < header_end:
            message = f"is truncated: {at} bytes, but its header ends at byte {header_end}; "
        else:
            message = f"is truncated: {at} bytes, but its sections end at byte {sections_end}; "
        cases[f"truncate-{at}"] = (data[:at], message)
    cases["trailing"] = (
        data + b"\0\0\0",
        f"has 3 bytes after its last section (it should end at byte {sections_end}); ",
    )
    cases["magic"] = (b"\x89NOT" + data[4:], "is not an aotkit artifact (it starts with")
    cases["future-version"] = (
        data[:8] + struct.pack("<I", 5) + data[12:],
        "has artifact format version 5, newer than this aotkit reads (4); upgrade aotkit, or "
        "write the artifact with this version",
    )
    cases["version-0"] = (
        data[:8] + struct.pack("<I", 0) + data[12:],
        "has artifact format version 0, which no aotkit wrote (this one reads 1 to 4); ",
    )
    cases["huge-header"] = (
        data[:12] + struct.pack("<I", artifacts.MAX_HEADER_BYTES + 1) + data[16:],
        f"header size {artifacts.MAX_HEADER_BYTES + 1} exceeds {artifacts.MAX_HEADER_BYTES} "
        "bytes; ",
    )
    cases["header-not-json"] = (
        raw_header(b"{not json"),
        "the header is not valid JSON (Expecting property name enclosed in double quotes: "
        "line 1 column 2 (char 1)); ",
    )
    cases["header-not-utf8"] = (raw_header(b'{"a": "\xff"}'), "the header is not valid JSON (")
    cases["header-duplicate-key"] = (
        raw_header(b'{"name": "a", "name": "b"}'),
        "the header is not valid JSON (key 'name' appears twice); ",
    )
    cases["header-list"] = (raw_header(b"[]"), "the header is list JSON, not an object; ")
    cases["header-deep"] = (raw_header(b"[" * 100000 + b"]" * 100000), "is not valid JSON (")
    cases["other-platform"] = (
        other_target(data, platform="tpu"),
        "was compiled with platform 'tpu' (here 'cpu'); load it with recompile=True or 'auto' ",
    )

    def field(name, value, message):
        changed = dict(header)
        if value is _MISSING:
            del changed[name]
        else:
            changed[name] = value
        cases[f"field-{name}-{len(cases)}"] = (
            raw_header(json.dumps({**changed, "sections": []}).encode()),
            f"header field {name!r} {message}",
        )

    field("name", _MISSING, "is missing")
    field("aotkit", 3, "is 3, not a string")
    field("target", "cpu", 'is "cpu", not an object')
    field("target", {"backend": 1}, "must map strings to strings")
    field("target", {"platform": "cpu"}, "has no backend name")
    field("executable_format", 7, "is 7, not a string or null")
    field("options", {"a": [1]}, "has 'a' = [1], not a bool, number or string")
    field("options", True, "is true, not an object")
    field("in_specs", ["f32[2,3]", "q9[1]"], "holds a bad spec (spec: unknown dtype 'q9' in")
    field("donated", [True], "must hold one boolean per input (2)")
    field("donated", [1, 0], "must hold one boolean per input (2)")
    field("in_tree", {"tuple": ["*", "*"]}, "must be an (args tuple, kwargs dict) pair like")
    field("in_tree", {"tuple": [{"tuple": ["*"]}, {"dict": []}]}, "has 1 leaves but there are 2")
    field("in_tree", {"set": []}, 'holds {"set": []}, which is no pytree node')
    field("in_tree", {"dict": [["a"]]}, 'has a dict entry ["a"], not a [key, subtree] pair')
    field("in_tree", {"dict": [[1.5, "*"]]}, "has a dict key 1.5 that is not a str or int")
    field("in_tree", {"dict": [["a", "*"], ["a", "*"]]}, "repeats the dict key 'a'")
    field("in_tree", {"dict": [["a", "*"], [1, "*"]]}, "cannot be rebuilt (")
    deep = "*"
    for _ in range(artifacts.MAX_TREE_DEPTH + 2):
        deep = {"list": [deep]}
    field("out_tree", deep, f"nests deeper than {artifacts.MAX_TREE_DEPTH} levels")
    field("out_tree", _MISSING, "is missing")

    def table(entries, message):
        cases[f"sections-{len(cases)}"] = (
            raw_header(json.dumps({**header, "sections": entries}).encode()),
            f"header field 'sections' {message}",
        )

    ok = {"name": "stablehlo", "size": 0, "sha256": "0" * 64}
    table([{"name": "stablehlo", "size": -1, "sha256": "0" * 64}], "has an entry")
    table([ok, ok], "lists section 'stablehlo' twice")
    table([{**ok, "name": "text"}], "has no 'stablehlo' section (the portable StableHLO)")
    table([{**ok, "name": str(i)} for i in range(70)], "lists 70 sections (at most 64)")
    table([ok], "has no 'executable' section for executable_format 'pjrt'")
    return cases


_MISSING = object()


@pytest.fixture(scope="module")
def corrupted(mlp_artifact):
    return corruptions(mlp_artifact[1])


def test_every_corruption_is_an_artifact_error(corrupted, tmp_path):
    for name, (data, message) in corrupted.items():
        path = tmp_path / f"{name}.aotx"
        path.write_bytes(data)
        with pytest.raises(ArtifactError) as info:
            aotkit.load(path, recompile=False)
        text = str(info.value)
        assert text.startswith(f"aotkit.load: {path}"), (name, text)
        assert message in text, (name, text)
        assert info.value.path == str(path)


def test_load_module_checks_artifacts_alike(corrupted, tmp_path):
    for name, (data, message) in corrupted.items():
        if not artifacts.is_artifact(data) or name == "other-platform":
            continue  # not an artifact: read as a module file; a module has no platform
        path = tmp_path / f"{name}.aotx"
        path.write_bytes(data)
        with pytest.raises(ArtifactError) as info:
            aotkit.load_module(path)
        text = str(info.value)
        assert text.startswith(f"load_module: {path}"), (name, text)
        assert message in text, (name, text)


def test_inspect_reports_corrupted_sections(corrupted):
    for name in ("stablehlo", "executable", "text"):
        data, _ = corrupted[f"flip-{name}"]
        text = artifacts.describe(data, "m.aotx")
        lines = [line for line in text.splitlines() if line.startswith(f"  {name} ")]
        assert lines and lines[0].endswith("CORRUPTED (SHA-256 mismatch)"), text
        assert text.count("  ok") == 2
    with pytest.raises(ArtifactError, match=r"^aotkit.load: m.aotx: the header is corrupted"):
        artifacts.describe(corrupted["flip-header"][0], "m.aotx")


def test_corrupt_files_never_end_the_process(corrupted, tmp_path):
    """Each corrupted file loaded (and read by load_module) in a child that must survive."""
    for name, (data, _) in corrupted.items():
        (tmp_path / f"{name}.aotx").write_bytes(data)
    code = (
        "import sys, pathlib, aotkit\n"
        "for path in sorted(pathlib.Path(sys.argv[1]).iterdir()):\n"
        "    for how, load in (('load', lambda p: aotkit.load(p, recompile=False)),\n"
        "                      ('load_module', aotkit.load_module)):\n"
        "        try:\n"
        "            load(path)\n"
        "            print(path.stem, how, 'loaded')\n"
        "        except ValueError as e:\n"  # ArtifactError is a ValueError
        "            print(path.stem, how, type(e).__name__)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr  # negative: killed by a signal
    seen = dict(((n, how), what) for n, how, what in map(str.split, proc.stdout.splitlines()))
    for name, data in ((n, d) for n, (d, _) in corrupted.items()):
        assert seen[(name, "load")] == "ArtifactError", name
        expected = "ArtifactError" if artifacts.is_artifact(data) else "ValueError"
        if name == "other-platform":
            expected = "loaded"
        assert seen[(name, "load_module")] == expected, name


# --- the CLI: compile -o F.aotx, run F.aotx, inspect ---------------------------------------

USER = """
import aotkit.numpy as anp

def affine(x, w, b):
    return anp.tanh(x @ w + b)
"""


@pytest.fixture
def cli_artifact(tmp_path, run_cli):
    user = tmp_path / "user.py"
    user.write_text(USER)
    dest = tmp_path / "affine.aotx"
    code, out, err = run_cli(
        "compile", f"{user}:affine", "--shapes", "f32[2,3]", "f32[3,4]", "f32[4]", "-o", dest
    )
    assert (code, out) == (0, ""), err
    rng = _rng()
    inputs = []
    for name, shape in (("x", (2, 3)), ("w", (3, 4)), ("b", (4,))):
        path = tmp_path / f"{name}.npy"
        np.save(path, rng.standard_normal(shape).astype(np.float32))
        inputs.append(path)
    return user, dest, inputs


def test_cli_compile_writes_an_artifact_by_its_suffix(cli_artifact, run_cli, tmp_path):
    user, dest, _ = cli_artifact
    assert artifacts.is_artifact(dest.read_bytes())
    art = artifacts.unpack(dest.read_bytes())
    assert art.name == "affine" and [str(s) for s in art.signature.flat_in_specs] == [
        "f32[2,3]",
        "f32[3,4]",
        "f32[4]",
    ]
    shapes = ("--shapes", "f32[2,3]", "f32[3,4]", "f32[4]")
    explicit = tmp_path / "affine.bin"
    assert (
        run_cli("compile", f"{user}:affine", *shapes, "--emit", "artifact", "-o", explicit)[0] == 0
    )
    assert artifacts.unpack(explicit.read_bytes()).header["in_specs"] == art.header["in_specs"]
    hlo = tmp_path / "text.aotx"
    assert run_cli("compile", f"{user}:affine", *shapes, "--emit", "hlo", "-o", hlo)[0] == 0
    assert hlo.read_text().startswith("HloModule")


def test_cli_run_of_an_artifact_matches_the_function(cli_artifact, run_cli):
    user, dest, inputs = cli_artifact
    code, from_artifact, err = run_cli("run", dest, "--inputs", *inputs)
    assert code == 0, err
    assert re.fullmatch(r"aotkit run: load \S+ (s|ms|us|ns), run \S+ (s|ms|us|ns)\n", err)
    code, from_function, _ = run_cli("run", f"{user}:affine", "--inputs", *inputs)
    assert from_artifact == from_function
    code, _, err = run_cli("run", dest, "--inputs", *inputs, "-v")
    assert f"aotkit: loaded artifact {dest} in " in err
    assert ": its executable loaded as it is (no compile)\n" in err
    code, out, err = run_cli("run", dest, "--inputs", *inputs, "-v", "--backend", "interpreter")
    assert code == 0 and ": compiled from its portable StableHLO\n" in err
    assert out.splitlines()[0] == "out: f32[2,4]"


@pytest.mark.parametrize(
    "flags, named",
    [
        (("--shapes", "f32[2,3]"), "--shapes, --static and --constraint"),
        (("--static", "n=3"), "--shapes, --static and --constraint"),
        (("--pipeline", "none"), "--pipeline"),
        (("--print-ir-after-all",), "--dump-dir and --print-ir-after-all"),
    ],
)
def test_cli_flags_that_do_not_apply_to_artifacts(cli_artifact, run_cli, flags, named):
    _, dest, _ = cli_artifact
    code, out, err = run_cli("run", dest, *flags)
    assert (code, out) == (1, "")
    assert err == (
        f"aotkit run: error: {dest} is an AOT artifact, compiled already (its signature and "
        f"pipeline are fixed); drop {named}\n"
    )


def test_cli_compile_of_an_artifact_emits_its_analyses(cli_artifact, run_cli):
    _, dest, _ = cli_artifact
    code, out, err = run_cli("compile", dest, "--emit", "cost")
    assert code == 0, err
    assert "flops" in json.loads(out)


def test_cli_inspect(cli_artifact, run_cli, tmp_path):
    _, dest, _ = cli_artifact
    code, out, err = run_cli("inspect", dest)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == f"{dest}: aotkit artifact, format 1, {dest.stat().st_size} bytes"
    assert lines[1] == "function: affine(x: f32[2,3], w: f32[3,4], b: f32[4]) -> (out: f32[2,4])"
    assert '  name: "affine"' in lines
    assert [line.split()[0] for line in lines if line.endswith("  ok")] == [
        "stablehlo",
        "executable",
        "text",
    ]
    assert lines[-1] == "here: backend 'cpu' matches; its executable loads as it is"
    moved = tmp_path / "moved.aotx"
    moved.write_bytes(other_target(dest.read_bytes(), runtime="jaxlib 0.9.0"))
    last = run_cli("inspect", moved)[1].splitlines()[-1]
    assert last == f"here: recompiles (runtime 'jaxlib 0.9.0' (here 'jaxlib {jaxlib.__version__}'))"
    broken = tmp_path / "broken.aotx"
    broken.write_bytes(dest.read_bytes()[:-10])
    code, out, err = run_cli("inspect", broken)
    assert (code, out) == (1, "")
    assert err.startswith(f"aotkit inspect: error: aotkit.load: {broken} is truncated: ")


def test_cli_inspect_of_a_module_file(cli_artifact, run_cli, tmp_path):
    user, _, _ = cli_artifact
    bc = tmp_path / "affine.mlirbc"
    shapes = ("--shapes", "f32[2,3]", "f32[3,4]", "f32[4]")
    assert run_cli("lower", f"{user}:affine", *shapes, "--emit", "bytecode", "-o", bc)[0] == 0
    code, out, err = run_cli("inspect", bc)
    assert code == 0, err
    assert out.splitlines() == [
        f"{bc}: MLIR bytecode, {bc.stat().st_size} bytes",
        "function: affine(args[0]: f32[2,3], args[1]: f32[3,4], args[2]: f32[4])"
        " -> (out: f32[2,4])",
        "in_tree: PyTreeDef(((*, *, *), {}))",
        "out_tree: PyTreeDef(*)",
        "donated arguments: none",
    ]
    code, out, err = run_cli("inspect", user)
    assert (code, out) == (1, "")
    assert err == (
        f"aotkit inspect: error: {user} is Python source; inspect takes an artifact (.aotx) "
        "or a module file (lower a function with `aotkit lower` or `aotkit compile -o F.aotx`)\n"
    )


def test_cli_run_of_an_artifact_in_a_fresh_process(cli_artifact):
    _, dest, inputs = cli_artifact
    proc = subprocess.run(
        [sys.executable, "-m", "aotkit", "run", str(dest), "--inputs", *map(str, inputs), "-q"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("out: f32[2,4]\n") and proc.stderr == ""


# --- fields aotkit fills itself hold any text (issue 42.1) ---------------------------------------

_RAW = ("\x1b", "\u2028", "\x07", "\x9b", "\nFORGED")


def _with_section_renamed(data: bytes, old: str, new: str) -> bytes:
    art = artifacts.unpack(data)
    header = {k: v for k, v in art.header.items() if k != "sections"}
    sections = {(new if n == old else n): bytes(v) for n, v in art.sections.items()}
    return artifacts.pack(header, sections)


@pytest.mark.parametrize(
    ("edit", "origin"),
    [
        (lambda d: other_target(d, platform_version="PJRT\nTPU\tß 東京\x1b[2J"), "recompiled"),
        (lambda d: other_target(d, **{"\x1b[31mhost": "x"}), "recompiled"),
        (lambda d: other_target(d, platform="cpu\nFORGED"), "recompiled"),
        (lambda d: repack(d, stablehlo="1.17.0\u2028FORGED"), "artifact"),
        (lambda d: repack(d, jaxlib="0.10.2\x9b2J"), "artifact"),
        (lambda d: repack(d, executable_format="pjrt\x07"), "recompiled"),
        (lambda d: _with_section_renamed(d, "text", "\x1b[31mtext"), "artifact"),
    ],
    ids=["platform-version", "target-key", "platform", "stablehlo", "jaxlib", "format", "section"],
)
def test_fields_aotkit_fills_are_data_whatever_their_characters(
    mlp_artifact, edit, origin, tmp_path, run_cli
):
    compiled, data = mlp_artifact
    path = tmp_path / "odd.aotx"
    path.write_bytes(edit(data))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loaded = aotkit.load(path)
    assert loaded.origin == origin
    np.testing.assert_array_equal(loaded(*mlp_inputs()), compiled(*mlp_inputs()))
    code, out, err = run_cli("inspect", path)
    assert code == 0, err
    shown = [str(w.message) for w in caught] + [out, err, repr(loaded)]
    assert [text for text in shown if any(raw in text for raw in _RAW)] == []
    assert all("\n" not in str(w.message) for w in caught)


def test_a_recompile_warning_prints_a_multiline_platform_version_escaped(mlp_artifact):
    _, data = mlp_artifact
    version = "PJRT C API\nTFRT TPU v5 lite\nBuilt on Dec  1 2026"
    with pytest.raises(ArtifactError, match=(
        r"^aotkit.load: <bytes> was compiled with platform_version 'PJRT C API\\nTFRT TPU v5 "
        r"lite\\nBuilt on Dec  1 2026' \(here 'cpu'\); load it with recompile=True"
    )):  # fmt: skip
        aotkit.load(other_target(data, platform_version=version), recompile=False)


# --- save errors name the user's path and the cause (issue 43.6) ---------------------------------


@pytest.fixture(scope="module")
def small_compiled():
    return aotkit.jit(lambda x: x + 1.0).lower(aotkit.spec("f32[4]")).compile()


def test_save_into_a_missing_folder_names_it(small_compiled, tmp_path):
    path = tmp_path / "nosuch" / "f.aotx"
    with pytest.raises(FileNotFoundError) as e:
        small_compiled.save(path)
    assert str(e.value) == (
        f"Compiled 'lambda': save: cannot write {str(path)!r}: the folder "
        f"{str(tmp_path / 'nosuch')!r} does not exist; create it first, or save elsewhere"
    )
    assert e.value.errno == 2
    assert ".tmp" not in str(e.value)


def test_save_onto_a_folder_says_to_name_a_file(small_compiled, tmp_path):
    with pytest.raises(IsADirectoryError) as e:
        small_compiled.save(tmp_path)
    assert str(e.value) == (
        f"Compiled 'lambda': save: cannot write {str(tmp_path)!r}: it is a folder; name a file "
        f"in it, e.g. {str(tmp_path / 'lambda.aotx')!r}"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == []


FILE_SIZE_LIMIT = """
import os, resource, signal, sys
import aotkit

path = sys.argv[1]
small = aotkit.jit(lambda x: x + 1.0).lower(aotkit.spec("f32[4]")).compile()
small.save(path)
before = open(path, "rb").read()
big = aotkit.jit(lambda x: x * 100.0).lower(aotkit.spec("f32[4096]")).compile()
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of death by SIGXFSZ
resource.setrlimit(resource.RLIMIT_FSIZE, (len(before) + 100, resource.RLIM_INFINITY))
try:
    big.save(path)
except OSError as e:
    print(type(e).__name__, e.errno)
    print(e)
print(open(path, "rb").read() == before)
print(sorted(os.listdir(os.path.dirname(path))))
"""


def test_save_under_a_file_size_limit_names_the_path_and_keeps_the_old_file(tmp_path):
    path = tmp_path / "f.aotx"
    proc = subprocess.run(
        [sys.executable, "-c", FILE_SIZE_LIMIT, str(path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr  # no signal: SIGXFSZ is ignored
    kind, message, intact, listed = proc.stdout.splitlines()
    assert kind == "OSError 27"  # EFBIG
    assert re.fullmatch(
        rf"Compiled 'lambda': save: cannot write {re.escape(repr(str(path)))}: File too large "
        r"\(the file-size limit of this process, RLIMIT_FSIZE or `ulimit -f`, is below the "
        r"artifact's [\d,]+ bytes\); raise the limit; a file already there is left as it was",
        message,
    )
    assert intact == "True"
    assert listed == "['f.aotx']"  # no temporary file left behind


@pytest.mark.parametrize(
    ("option", "value", "danger"),
    [
        (
            "xla_unsupported_crash_on_hlo_pass_noop_change",
            True,
            "makes the compiler end the process on purpose (a debugging check of XLA's); "
            "leave it out",
        ),
        (
            "xla_cpu_parallel_codegen_split_count",
            2147483647,
            "has the value 2147483647, a count of parts or threads above 4096, which makes the "
            "compile run for minutes with memory growing without bound; give 4096 or less, or "
            "leave the option out",
        ),
    ],
)
def test_options_that_abort_or_exhaust_the_compile_are_refused(tmp_path, option, value, danger):
    """xla_unsupported_crash_on_hlo_pass_noop_change ended the process (SIGABRT) compiling
    any module, given by the user or carried by a file (aotkit.load with portable_only=True,
    the mode for untrusted files); a split count of 2**31 - 1 grew to 16 GB in 45 s."""
    from tests.reliability.header_fuzzing import Draft, encode

    lowered = aotkit.jit(lambda x: x * 2.0 + 1.0).lower(np.ones(4, np.float32))
    with pytest.raises(ValueError) as e:
        lowered.compile(options={option: value})
    assert str(e.value) == f"backend 'cpu': compile: option {option!r} {danger}"
    lowered.compile(options={"xla_cpu_parallel_codegen_split_count": 64})  # a count in range
    path = tmp_path / "f.aotx"
    lowered.compile().save(path)
    draft = Draft(path.read_bytes())
    draft.header["options"] = {option: value}
    path.write_bytes(encode(draft))
    code = (
        "import aotkit\n"
        "try:\n"
        f"    aotkit.load({str(path)!r}, portable_only=True)\n"
        "except aotkit.ArtifactError as e:\n"
        "    print(e)\n"
    )
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert child.returncode == 0, child.stderr[-2000:]  # (was -6, SIGABRT)
    assert f"header field 'options' has {option!r}" in child.stdout


def test_a_negative_count_option_is_refused_before_it_aborts_the_process(tmp_path):
    """xla_cpu_parallel_codegen_split_count = -1 ended the process in std::length_error
    (SIGABRT) while compiling, given by the user or carried by a file (aotkit.load with
    recompile=True, aotkit-run): both are refused before anything compiles."""
    from tests.reliability.header_fuzzing import Draft, encode

    lowered = aotkit.jit(lambda x: x + 1).lower(np.ones(3, np.float32))
    with pytest.raises(ValueError) as e:
        lowered.compile(options={"xla_cpu_parallel_codegen_split_count": -1})
    assert str(e.value) == (
        "backend 'cpu': compile: option 'xla_cpu_parallel_codegen_split_count' has the negative "
        "value -1, but it counts or sizes something and XLA would read it as a huge unsigned "
        "size (aborting the process); give 0 or a positive value, or leave the option out"
    )
    path = tmp_path / "f.aotx"
    lowered.compile().save(path)
    draft = Draft(path.read_bytes())
    draft.header["options"] = {"xla_cpu_parallel_codegen_split_count": -1}
    path.write_bytes(encode(draft))
    code = (
        "import sys, aotkit\n"
        "try:\n"
        f"    aotkit.load({str(path)!r}, recompile=True)\n"
        "except aotkit.ArtifactError as e:\n"
        "    print(e)\n"
    )
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert child.returncode == 0, child.stderr[-2000:]
    assert "'xla_cpu_parallel_codegen_split_count' = -1, a negative count or size" in child.stdout
