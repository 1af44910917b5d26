"""The file front end: modules JAX (or aotkit) wrote to disk, loaded back and run by aotkit.

Every format is produced by its real writer (JAX's lowering, MLIR's bytecode writer,
StableHLO's portable serializer, `jax.export`); the oracle is `jax.jit` of the function that
produced the file. Every bad-file error is matched exactly, and none may end the process.
"""

from __future__ import annotations

import io
import os
import pickle
import re
import signal
import subprocess
import sys
import time
import types
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import tree_util
from jaxlib.mlir.dialects import stablehlo

import aotkit
import aotkit.numpy as anp
from aotkit.api import load_module
from aotkit.frontends.files import FORMATS, sniff
from tests.helpers import run_lowered

EXPECTED = "expected " + re.escape(FORMATS) + "$"


def model(params, x, unused):
    h = jax.nn.gelu(x @ params["w"] + params["b"])
    return {"out": jnp.tanh(h).sum(axis=-1), "h": h}


def model_args():
    rng = np.random.default_rng(1)
    params = {
        "w": rng.standard_normal((4, 5)).astype(np.float32),
        "b": rng.standard_normal(5).astype(np.float32),
    }
    return params, rng.standard_normal((3, 4)).astype(np.float32), np.zeros(2, np.int32)


def bytecode_of(module) -> bytes:
    buffer = io.BytesIO()
    module.operation.write_bytecode(buffer)
    return buffer.getvalue()


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """The same function as each file format, written by JAX and MLIR's own writers."""
    root = tmp_path_factory.mktemp("modules")
    args = model_args()
    exported = jax.export.export(jax.jit(model))(*args)
    jax_lowered = jax.jit(model, keep_unused=True).lower(*args)
    text = jax_lowered.as_text()
    written = {
        "model.jax_export": bytes(exported.serialize()),
        "model.mlir": text.encode(),
        "model.mlirbc": bytecode_of(jax_lowered.compiler_ir("stablehlo")),
        "model.vhlo": bytes(
            stablehlo.serialize_portable_artifact_str(text, stablehlo.get_minimum_version())
        ),
    }
    for name, data in written.items():
        (root / name).write_bytes(data)
    return root


def flat_result(lowered, args):
    """Runs a module file's flat signature on the model's flat leaves."""
    return run_lowered("cpu", lowered, *tree_util.tree_leaves(args))


def oracle_leaves():
    return [np.asarray(v) for v in tree_util.tree_leaves(jax.jit(model)(*model_args()))]


def assert_leaves_equal(got, want):
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)


# --- Formats ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, kind",
    [
        ("model.jax_export", "jax.export"),
        ("model.mlir", "text"),
        ("model.mlirbc", "bytecode"),
        ("model.vhlo", "portable"),
    ],
)
def test_sniff_reads_the_format_from_the_bytes(files, name, kind):
    assert sniff((files / name).read_bytes()) == kind


def test_jax_export_artifact_keeps_its_pytrees_and_matches_jax(files):
    args = model_args()
    lowered = load_module(files / "model.jax_export")
    assert lowered.frontend == "file" and lowered.pipeline == "none"
    assert lowered.name == "model"
    assert lowered.in_tree == tree_util.tree_structure((args, {}))
    # jax.export dropped `unused`; aotkit's @main takes it again (one argument per leaf).
    assert [str(s) for s in lowered.flat_in_specs] == ["f32[5]", "f32[4,5]", "f32[3,4]", "i32[2]"]
    got = run_lowered("cpu", lowered, *args)
    want = jax.jit(model)(*args)
    assert tree_util.tree_structure(got) == tree_util.tree_structure(want)
    assert_leaves_equal(tree_util.tree_leaves(got), oracle_leaves())


@pytest.mark.parametrize("name", ["model.mlir", "model.mlirbc", "model.vhlo"])
def test_module_files_match_jax(files, name):
    lowered = load_module(str(files / name))
    assert lowered.name == "jit_model"
    assert [str(s) for s in lowered.flat_in_specs] == ["f32[5]", "f32[4,5]", "f32[3,4]", "i32[2]"]
    assert [str(s) for s in lowered.flat_out_specs] == ["f32[3,5]", "f32[3]"]
    assert_leaves_equal(flat_result(lowered, model_args()), oracle_leaves())


@pytest.mark.parametrize("form", ["jax.export", "text"])
def test_jax_modules_with_custom_calls_and_shardy_attributes(form):
    def solve(a, b):
        return jnp.linalg.solve(a, b)

    a = np.eye(4, dtype=np.float32) * 2 + 0.1
    b = np.ones((4, 2), np.float32)
    if form == "jax.export":
        data = bytes(jax.export.export(jax.jit(solve))(a, b).serialize())
    else:
        data = jax.jit(solve).lower(a, b).as_text().encode()
        assert b"sdy.sharding_rule" in data
    lowered = load_module(data)
    assert "sdy." not in lowered.as_text()
    assert_leaves_equal([run_lowered("cpu", lowered, a, b)], [np.asarray(jax.jit(solve)(a, b))])


def test_bytes_and_path_load_the_same_module(files):
    data = (files / "model.mlirbc").read_bytes()
    assert load_module(data).as_text() == load_module(files / "model.mlirbc").as_text()


def test_name_override_and_single_result(files):
    text = jax.jit(lambda x: x * 2).lower(np.ones(3, np.float32)).as_text()
    lowered = load_module(text.encode(), name="double")
    assert lowered.name == "double" and "module @double" in lowered.as_text()
    assert lowered.out_tree == tree_util.tree_structure(0)
    assert_leaves_equal([run_lowered("cpu", lowered, np.arange(3.0, dtype=np.float32))],
                        [np.arange(3.0, dtype=np.float32) * 2])  # fmt: skip


def test_aotkit_module_round_trip():
    x = np.linspace(-2, 2, 5)
    lowered = aotkit.lower(lambda x: anp.sqrt(x**2) + 1.0, x)
    loaded = load_module(lowered.as_text().encode())
    assert loaded.flat_in_specs == lowered.flat_in_specs
    assert_leaves_equal([run_lowered("cpu", loaded, x)], [np.sqrt(x**2) + 1.0])


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_complex_constants_load(dtype):
    # The sandbox once read every attribute through the bindings, which cannot give complex
    # dense elements a Python class: every module with a complex constant failed to load.
    table = np.array([1 + 2j, -3.5j], dtype)
    lowered = aotkit.lower(lambda z: z * table, table)
    loaded = load_module(lowered.as_text().encode())
    assert_leaves_equal([run_lowered("cpu", loaded, table)], [table * table])


def test_donation_is_read_from_arg_attrs():
    x = np.ones(3, np.float32)
    text = jax.jit(lambda s, g: s - g, donate_argnums=0).lower(x, x).as_text()
    assert load_module(text.encode()).donated == (True, False)


def test_placement_attrs_are_dropped():
    text = """module @m {
      func.func public @main(%a: tensor<2xf32> {mhlo.sharding = "{replicated}"}) -> tensor<2xf32> {
        return %a : tensor<2xf32>
      }
    }"""
    assert "mhlo.sharding" not in load_module(text.encode()).as_text()


# --- Bad files -------------------------------------------------------------------------------


def where(label="<bytes>"):
    return f"^load_module: {label}"


def test_truncated_bytecode(files):
    data = (files / "model.mlirbc").read_bytes()[:60]
    with pytest.raises(ValueError, match=where() + r" is not valid MLIR bytecode: .+; " + EXPECTED):
        load_module(data)


def test_truncated_portable_artifact(files):
    data = (files / "model.vhlo").read_bytes()
    with pytest.raises(
        ValueError, match=where() + r" is not a valid StableHLO portable artifact: .+; " + EXPECTED
    ):
        load_module(data[: len(data) // 2])


def test_corrupt_bytecode_that_crashes_mlir_is_an_error_not_an_abort(files):
    # A dialect name that is not UTF-8 makes jaxlib's diagnostic conversion call
    # std::terminate in-process; load_module must survive it.
    data = (files / "model.mlirbc").read_bytes().replace(b"stablehlo", b"stablehl\xff", 1)
    with pytest.raises(ValueError, match=(
        where() + r" is corrupt MLIR bytecode: MLIR's reader crashed \(SIGABRT\) while reading "
        r"it \(in a sandbox process\); re-export the file$"
    )):  # fmt: skip
        load_module(data)


def test_strings_that_are_not_utf8_are_refused(files):
    # Reading such a string from Python raises at best and aborts at worst; the sandbox reads
    # them all first.
    text = b"""func.func @main(%a: tensor<2xf32>) -> tensor<2xf32> attributes {note = "\\FF"} {
  return %a : tensor<2xf32>
}"""
    with pytest.raises(ValueError, match=(
        where() + r" is corrupt MLIR text: it holds a name or string attribute that is not "
        r"UTF-8; re-export the file$"
    )):  # fmt: skip
        load_module(text)
    data = (files / "model.mlirbc").read_bytes().replace(b"main", b"ma\xffn")
    with pytest.raises(ValueError, match=where() + " is corrupt MLIR bytecode: it holds a name"):
        load_module(data)


def test_text_that_is_not_mlir():
    with pytest.raises(ValueError, match=(
        where() + r" is not valid MLIR text: line 1, column 1: custom op 'hello' is unknown "
        r"\(tried 'builtin.hello' as well\); " + EXPECTED
    )):  # fmt: skip
        load_module(b"hello world\n")


def test_module_that_does_not_verify():
    text = b"""module @m {
  func.func @main(%a: tensor<2xf32>, %b: tensor<3xf32>) -> tensor<2xf32> {
    %0 = "stablehlo.add"(%a, %b) : (tensor<2xf32>, tensor<3xf32>) -> tensor<2xf32>
    return %0 : tensor<2xf32>
  }
}"""
    with pytest.raises(ValueError, match=(
        where() + r": the module does not verify: line 3, column 10: 'stablehlo.add' op requires "
        r"the same shape for all operands and results; fix the module or re-export it$"
    )):  # fmt: skip
        load_module(text)


def test_module_without_main(tmp_path):
    path = tmp_path / "nomain.mlir"
    path.write_text(
        "func.func @f(%a: tensor<2xf32>) -> tensor<2xf32> {\n  return %a : tensor<2xf32>\n}\n"
    )
    with pytest.raises(ValueError, match=(
        where(str(path)) + r": the module has no @main function \(functions: @f\); aotkit runs a "
        r"module's @main: name the entry function main$"
    )):  # fmt: skip
        load_module(path)


def test_partitioned_module_needs_its_devices():
    # Partitioned modules load with their device count (tests/test_spmd.py runs them on 8
    # devices); this process's CPU backend has one device, so the compile says how to get more.
    text = b"""module @m attributes {mhlo.num_partitions = 2 : i32} {
  func.func @main(%a: tensor<2xf32>) -> tensor<2xf32> {
    return %a : tensor<2xf32>
  }
}"""
    lowered = load_module(text)
    assert lowered.partitioning.num_devices == 2 and lowered.mesh is None
    with pytest.raises(ValueError, match=(
        r"^backend 'cpu': module 'm' is partitioned over 2 devices, but the backend has 1 "
        r"device\(s\); on the CPU, start the process with "
        r"XLA_FLAGS=--xla_force_host_platform_device_count=2 \(or call "
        r"jax.config.update\('jax_num_cpu_devices', 2\) before the first compile\)$"
    )):  # fmt: skip
        lowered.compile()


def test_replicated_module():
    text = b"""module @m attributes {mhlo.num_replicas = 2 : i32} {
  func.func @main(%a: tensor<2xf32>) -> tensor<2xf32> {
    return %a : tensor<2xf32>
  }
}"""
    with pytest.raises(ValueError, match=(
        where() + r": the module runs as 2 replicas \(mhlo.num_replicas\); aotkit compiles one "
        r"replica partitioned over a mesh: lower or export it with shardings instead of "
        r"replicas$"
    )):  # fmt: skip
        load_module(text)


def test_dynamic_shapes_are_refused():
    text = b"func.func @main(%a: tensor<?xf32>) -> tensor<?xf32> {\n  return %a : tensor<?xf32>\n}"
    with pytest.raises(TypeError, match=where() + r": @main has dynamic shape tensor<\?xf32>"):
        load_module(text)


@pytest.mark.parametrize(
    "data, what",
    [
        (np.lib.format.magic(1, 0) + b"rest", "a NumPy .npy array"),
        (b"PK\x03\x04rest", r"a zip archive \(an .npz file\?\)"),
        (b"\x7fELF\x02\x01", r"an ELF binary \(a shared library or an executable\)"),
        (b"HloModule m, entry_computation_layout={()->f32[]}", "XLA HLO text, not StableHLO"),
        (pickle.dumps({"w": 1}), "a Python pickle"),
    ],
)
def test_other_kinds_of_file_are_named(data, what):
    with pytest.raises(ValueError, match=where() + f" is {what}; " + EXPECTED):
        load_module(data)


def test_unknown_binary():
    with pytest.raises(ValueError, match=(
        where() + r" is binary data of no known kind \(starts with b'\\x00\\x01\\x02\\x03"
        r"\\x04\\x05\\x06\\x07'\); " + EXPECTED
    )):  # fmt: skip
        load_module(bytes(range(256)))


def test_empty_file(tmp_path):
    path = tmp_path / "empty.mlir"
    path.write_bytes(b"")
    with pytest.raises(ValueError, match=where(str(path)) + " is empty; " + EXPECTED):
        load_module(path)


def test_python_source(tmp_path):
    path = tmp_path / "model.py"
    path.write_text("def f(x):\n    return x\n")
    with pytest.raises(ValueError, match=(
        where(str(path)) + r" is Python source, not a module; lower a function from it with "
        r"aotkit.lower\(fn, ...\) or `aotkit lower FILE.py:FN`$"
    )):  # fmt: skip
        load_module(path)


def test_missing_file(tmp_path):
    path = str(tmp_path / "absent.mlir")
    with pytest.raises(FileNotFoundError, match=(
        rf"^load_module: no such file '{path}'; pass the path of a file holding .+, or its "
        r"contents as bytes$"
    )):  # fmt: skip
        load_module(path)


def test_directory(tmp_path):
    with pytest.raises(
        ValueError, match=where(str(tmp_path)) + " is a directory; pass a file holding"
    ):
        load_module(tmp_path)


def test_not_a_path():
    with pytest.raises(TypeError, match=(
        r"^load_module: expected a path or bytes, got int; pass the file's path or its "
        r"contents as bytes$"
    )):  # fmt: skip
        load_module(3)


# --- Bad jax.export artifacts ----------------------------------------------------------------


def test_truncated_jax_export_artifact(files):
    data = (files / "model.jax_export").read_bytes()
    with pytest.raises(ValueError, match=(
        where() + r" looks like a flatbuffer but JAX cannot read it as a jax.export artifact "
        r"\(error: .+\); " + EXPECTED
    )):  # fmt: skip
        load_module(data[: len(data) // 2])


def test_jax_export_with_symbolic_shapes_runs_for_any_batch_size():
    # Before symbolic shapes, this file was refused ("exported with symbolic shapes").
    spec = jax.ShapeDtypeStruct(jax.export.symbolic_shape("b, 4"), np.float32)
    data = jax.export.export(jax.jit(jnp.sin))(spec).serialize()
    compiled = load_module(data).compile()
    for b in (1, 3):
        x = np.arange(4 * b, dtype=np.float32).reshape(b, 4)
        np.testing.assert_array_equal(np.asarray(compiled(x)), np.asarray(jnp.sin(x)))


def _platform_dependent(x):
    return jax.lax.platform_dependent(x, cpu=lambda x: x + 1, default=lambda x: x - 1)


@pytest.mark.parametrize("platforms", [("cpu", "cuda"), ("cuda", "cpu")])
def test_jax_export_for_several_platforms_runs_the_lowering_of_its_platform(platforms):
    x = np.arange(3, dtype=np.float32)
    exported = jax.export.export(jax.jit(_platform_dependent), platforms=platforms)(x)
    data = exported.serialize()
    lowered = load_module(data)  # the default backend is cpu
    out = lowered.compile()(x)
    assert out.dtype == np.float32 and np.asarray(out).tolist() == [1.0, 2.0, 3.0]
    assert lowered.flat_in_specs == (aotkit.spec("f32[3]"),)
    # The other platform's lowering (its `default` branch), compiled here to show the choice.
    other = load_module(data, platform="cuda").compile()(x)
    assert np.asarray(other).tolist() == [-1.0, 0.0, 1.0]
    # Unused arguments are restored after the platform index, as for one platform.
    both = jax.export.export(jax.jit(lambda x, y: _platform_dependent(x)), platforms=platforms)
    lowered = load_module(both(x, np.ones(2, np.int32)).serialize())
    assert lowered.flat_in_specs == (aotkit.spec("f32[3]"), aotkit.spec("i32[2]"))
    out = lowered.compile()(x, np.ones(2, np.int32))
    assert np.asarray(out).tolist() == [1.0, 2.0, 3.0]


def test_jax_export_for_other_platforms_names_them():
    data = jax.export.export(jax.jit(jnp.sin), platforms=["cpu", "cuda"])(np.ones(3, np.float32))
    with pytest.raises(ValueError, match=(
        where() + r" was exported for 'cpu', 'cuda', and platform='tpu' was asked; pass "
        r"load_module\(..., platform=...\) one of those, or export for 'tpu' too: "
        r"jax.export.export\(fn, platforms=\[..., 'tpu'\]\)$"
    )):  # fmt: skip
        load_module(data.serialize(), platform="tpu")
    cuda = jax.export.export(jax.jit(jnp.sin), platforms=["cuda"])(np.ones(3, np.float32))
    with pytest.raises(ValueError, match=(
        where() + r" was exported for 'cuda', and the default backend runs 'cpu'; pass "
    )):  # fmt: skip
        load_module(cuda.serialize())


def test_process_survives_every_bad_file():
    # The loads above ran in this process; reaching here means none of them aborted it.
    assert sys.modules["aotkit"] is aotkit


# --- Failures simulated: the sandbox itself, and artifacts JAX cannot easily be made to write --


@pytest.fixture
def fake_compat(tmp_path, monkeypatch):
    """Points the sandbox at a stand-in for aotkit/_compat.py with the given body."""
    from aotkit.frontends import sandbox

    def install(body: str):
        path = tmp_path / "compat_stand_in.py"
        path.write_text(body)
        monkeypatch.setattr(sandbox, "_compat", types.SimpleNamespace(__file__=str(path)))

    return install


TEXT = b"func.func @main(%a: tensor<2xf32>) -> tensor<2xf32> {\n  return %a : tensor<2xf32>\n}\n"


def test_sandbox_that_cannot_start_is_an_aotkit_bug(fake_compat):
    fake_compat("raise ImportError('no bindings here')\n")
    with pytest.raises(RuntimeError, match=(
        where() + r": aotkit's MLIR sandbox process failed \(ImportError: no bindings here\); "
        r"please report this$"
    )):  # fmt: skip
        load_module(TEXT)


def test_sandbox_out_of_memory_is_the_file(fake_compat):
    # A corrupt size field can make MLIR's reader ask for more memory than there is: the
    # bindings raise MemoryError (std::bad_alloc), which ends the worker with a traceback.
    fake_compat("def make_context():\n    raise MemoryError('std::bad_alloc')\n")
    with pytest.raises(ValueError, match=where() + re.escape(
        " is corrupt MLIR text: MLIR's reader ran out of memory (MemoryError: "
        "std::bad_alloc) while reading it (in a sandbox process); re-export the file"
    ) + "$"):  # fmt: skip
        load_module(TEXT)


def test_sandbox_exit_status(fake_compat):
    fake_compat(
        "import os, sys\nsys.stderr.write('out of memory\\n')\nsys.stderr.flush()\nos._exit(7)\n"
    )
    with pytest.raises(ValueError, match=(
        where() + r" is corrupt MLIR text: MLIR's reader failed \(exit status 7: out of memory\) "
        r"while reading it \(in a sandbox process\); re-export the file$"
    )):  # fmt: skip
        load_module(TEXT)


def test_sandbox_killed_by_a_signal_without_a_name(fake_compat):
    fake_compat("import os\nos.kill(os.getpid(), 40)\n")
    with pytest.raises(ValueError, match=(
        where() + r" is corrupt MLIR text: MLIR's reader crashed \(signal 40\) while reading it"
    )):  # fmt: skip
        load_module(TEXT)


def test_sandbox_timeout(fake_compat, monkeypatch):
    from aotkit.frontends import sandbox

    fake_compat("import time\ntime.sleep(600)\n")  # a worker that never answers
    monkeypatch.setattr(sandbox, "PROBE_TIMEOUT_S", 0.5)
    with pytest.raises(ValueError, match=(
        where() + r": parsing took longer than 0.5 s; check the file$"
    )):  # fmt: skip
        load_module(TEXT)


def test_adopt_refuses_a_module_that_does_not_verify():
    from jaxlib.mlir import ir

    from aotkit.frontends._module import adopt
    from tests.helpers import ir_context

    with ir_context():
        module = ir.Module.parse(TEXT.decode())
        main = module.body.operations[0]
        wrong = ir.FunctionType.get([ir.F32Type.get()], [ir.F32Type.get()])
        main.attributes["function_type"] = ir.TypeAttr.get(wrong)
    with pytest.raises(ValueError, match=(
        r"^W: the module does not verify: .+; fix the module or re-export it$"
    )):  # fmt: skip
        adopt(module, name="m", where="W")


@pytest.fixture
def exported_as(files, monkeypatch):
    """Makes jax.export.deserialize return the real artifact with some fields changed."""
    import dataclasses

    real = jax.export.deserialize(bytearray((files / "model.jax_export").read_bytes()))

    def install(**changes):
        changed = dataclasses.replace(real, **changes)
        monkeypatch.setattr(jax.export, "deserialize", lambda data: changed)
        return (files / "model.jax_export").read_bytes()

    return install


def test_jax_export_with_effects(exported_as):
    data = exported_as(ordered_effects=("OrderedIOEffect",))
    with pytest.raises(ValueError, match=(
        where() + r" was exported with effects \(OrderedIOEffect\); aotkit runs pure functions: "
        r"export a function without callbacks or effects$"
    )):  # fmt: skip
        load_module(data)


def test_jax_export_whose_module_disagrees_with_its_avals(exported_as):
    data = exported_as(out_avals=(jax.ShapeDtypeStruct((9,), np.float32),) * 2)
    with pytest.raises(ValueError, match=(
        where() + r": the exported module's @main takes \(f32\[5\], f32\[4,5\], f32\[3,4\], "
        r"i32\[2\]\) -> \(f32\[3,5\], f32\[3\]\) but the artifact declares \(f32\[5\], "
        r"f32\[4,5\], f32\[3,4\], i32\[2\]\) -> \(f32\[9\], f32\[9\]\); the artifact is "
        r"inconsistent: re-export it$"
    )):  # fmt: skip
        load_module(data)


def test_jax_export_without_flatbuffers(files, monkeypatch):
    def deserialize(data):
        raise ImportError("Please install 'flatbuffers' in order to use Exported serialization")

    monkeypatch.setattr(jax.export, "deserialize", deserialize)
    with pytest.raises(ImportError, match=(
        where() + r" is a jax.export artifact; reading one needs the flatbuffers package "
        r"\(Please install 'flatbuffers' in order to use Exported serialization\); install it "
        r"with: pip install flatbuffers$"
    )):  # fmt: skip
        load_module((files / "model.jax_export").read_bytes())


# --- CLI -------------------------------------------------------------------------------------


def test_aotkit_run_on_a_jax_export_artifact_matches_jax(files, tmp_path):
    """The issue's demonstration: JAX writes an artifact; the `aotkit` command runs it."""
    args = model_args()
    inputs = []
    for i, leaf in enumerate(tree_util.tree_leaves(args)):
        inputs.append(str(tmp_path / f"in{i}.npy"))
        np.save(inputs[-1], leaf)
    proc = subprocess.run(
        [sys.executable, "-m", "aotkit", "run", str(files / "model.jax_export"), "-q",
         "--inputs", *inputs],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    blocks = re.split(r"^(out\S*): (\S+)$", proc.stdout, flags=re.M)[1:]
    printed = {
        name: (spec, np.array([float(v) for v in re.findall(r"[-+0-9.e]+", body)]))
        for name, spec, body in zip(blocks[0::3], blocks[1::3], blocks[2::3], strict=True)
    }
    want = jax.jit(model)(*args)
    assert set(printed) == {"out['h']", "out['out']"}
    for key in ("h", "out"):
        spec, values = printed[f"out['{key}']"]
        assert spec == str(aotkit.ShapeDtype(want[key].shape, want[key].dtype))
        np.testing.assert_allclose(values, np.asarray(want[key]).ravel(), rtol=1e-6, atol=1e-7)


def test_aotkit_compile_on_a_corrupt_file_is_one_line_and_exit_1(files, tmp_path, capsys):
    from aotkit import cli

    path = tmp_path / "corrupt.mlirbc"
    path.write_bytes(
        (files / "model.mlirbc").read_bytes().replace(b"stablehlo", b"stablehl\xff", 1)
    )
    assert cli.main(["compile", str(path)]) == 1
    _, err = capsys.readouterr()
    assert err == (
        f"aotkit compile: error: load_module: {path} is corrupt MLIR bytecode: MLIR's reader "
        "crashed (SIGABRT) while reading it (in a sandbox process); re-export the file\n"
    )


def test_example_and_its_jax_export_run_alike(tmp_path, capsys):
    """`aotkit run` of a JAX function and of its jax.export artifact: same inputs, same output."""
    import importlib.util

    from aotkit import cli

    example = Path(__file__).resolve().parents[2] / "examples" / "jax_mlp.py"
    spec = importlib.util.spec_from_file_location("jax_mlp_example", example)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    artifact = tmp_path / "jax_mlp.jax_export"
    module.export(str(artifact))
    shapes = ["f32[8,4]", "f32[4,16]", "f32[16]", "f32[16,3]"]
    assert cli.main(["run", f"{example}:predict", "--shapes", *shapes, "-q"]) == 0
    from_python = capsys.readouterr().out
    assert cli.main(["run", str(artifact), "-q"]) == 0
    assert capsys.readouterr().out == from_python
    assert from_python.startswith("out: f32[8,3]\n")


# --- the sandbox worker: one per process, replaced when it dies, ended at exit ---------------


def worker_pid() -> int:
    from aotkit.frontends import sandbox

    return sandbox._worker.proc.pid


def test_one_worker_serves_every_file(files):
    load_module(TEXT)
    pid = worker_pid()
    load_module(files / "model.mlirbc")
    load_module(files / "model.vhlo")
    assert worker_pid() == pid


def test_a_dead_worker_is_replaced(files):
    load_module(TEXT)
    pid = worker_pid()
    os.kill(pid, signal.SIGKILL)
    lowered = load_module(files / "model.mlirbc")
    assert lowered.in_specs
    assert worker_pid() != pid


def test_a_worker_that_dies_after_its_first_reply(files, monkeypatch):
    # The worker replies in steps (parsed, strings read, printed): a death after the first
    # is this file's doing, said as such, and the next file gets a fresh worker. Killed
    # as the first reply arrives, it is still reading the strings of 5,000 ops.
    from aotkit.frontends import sandbox

    lines = [
        f"  %v{i} = stablehlo.add %v{i - 1}, %v{i - 1} : tensor<2xf32>" for i in range(1, 5000)
    ]
    text = (
        "func.func @main(%v0: tensor<2xf32>) -> tensor<2xf32> {\n"
        + "\n".join(lines)
        + "\n  return %v4999 : tensor<2xf32>\n}\n"
    ).encode()
    load_module(TEXT)
    reply = sandbox._Worker.reply

    def dies_after_the_first_reply(worker):
        answer = reply(worker)
        os.kill(worker.proc.pid, signal.SIGKILL)
        return answer

    monkeypatch.setattr(sandbox._Worker, "reply", dies_after_the_first_reply)
    pid = worker_pid()
    with pytest.raises(ValueError, match=where() + re.escape(
        " is corrupt MLIR text: MLIR's reader crashed (SIGKILL) while reading it "
        "(in a sandbox process); re-export the file"
    ) + "$"):  # fmt: skip
        load_module(text)
    monkeypatch.setattr(sandbox._Worker, "reply", reply)
    assert load_module(files / "model.mlirbc").in_specs
    assert worker_pid() != pid


def test_the_worker_ends_with_its_process(tmp_path):
    code = (
        "import aotkit\n"
        "from aotkit.frontends import sandbox\n"
        f"aotkit.load_module({TEXT!r})\n"
        "print(sandbox._worker.proc.pid)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    pid = int(proc.stdout)
    assert _ends_within(pid, 10)


def _running(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has ended


def _ends_within(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and _running(pid):
        time.sleep(0.05)
    return not _running(pid)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_busy_worker_ends_when_its_process_is_killed():
    # A parse that never ends (a corrupt file can loop MLIR's reader) keeps the worker from
    # reading the end of its input; stopped here, it stands for one. Its watchdog kills it
    # once the killed process's end of the pipe closes.
    code = (
        "import os, signal\n"
        "import aotkit\n"
        "from aotkit.frontends import sandbox\n"
        f"aotkit.load_module({TEXT!r})\n"
        "pid = sandbox._worker.proc.pid\n"
        "print(pid, flush=True)\n"
        "os.kill(pid, signal.SIGSTOP)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    pid = int(proc.stdout)
    try:
        assert _ends_within(pid, 10)
    finally:
        if _running(pid):
            os.kill(pid, signal.SIGKILL)


# --- A str is a path when it names a file, whatever it starts with (issue 43, item 5) -----

_STARTS_AS_TEXT = ["module.aotx", "#x.aotx", "func.func.aotx", "// x.aotx", "a\nb.aotx"]


@pytest.mark.parametrize("name", _STARTS_AS_TEXT)
def test_a_str_naming_a_file_is_a_path_whatever_it_starts_with(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    x = np.arange(4, dtype=np.float32)
    aotkit.jit(lambda x: x * 3 + 1).lower(x).compile().save(name)
    got = aotkit.load(name)(x)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, x * 3 + 1)
    module_name = name.removesuffix(".aotx") + ".mlir"
    Path(module_name).write_text(aotkit.jit(lambda x: x - 2).lower(x).as_text())
    got = load_module(module_name).compile()(x)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, x - 2)
    # Its artifact reads as a module too (the portable StableHLO inside it).
    np.testing.assert_array_equal(load_module(name).compile()(x), x * 3 + 1)


@pytest.mark.parametrize("name", ["module.aotx", "func.func.mlir", "#x.mlir", "//no/such.aotx"])
def test_a_missing_file_that_reads_as_text_too_names_both_readings(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    both = rf"^{{}}: no such file '{re.escape(name)}', which could be a path or MLIR text; as a "
    both += r"path, check it \(a pathlib.Path is always read as a path\); as MLIR text, "
    with pytest.raises(FileNotFoundError, match=(
        both.format("load_module") + r"pass it as bytes \(load_module\(text.encode\(\)\)\)$"
    )):  # fmt: skip
        load_module(name)
    with pytest.raises(FileNotFoundError, match=(
        both.format("aotkit.load") + r"load it with aotkit.load_module\(text.encode\(\)\) and "
        r"compile it$"
    )):  # fmt: skip
        aotkit.load(name)
    # A pathlib.Path is a path: the plain missing-file message.
    with pytest.raises(
        FileNotFoundError, match=rf"^load_module: no such file '{re.escape(name)}'; pass"
    ):
        load_module(Path(name))


@pytest.mark.parametrize("text", ["module {}", "#map = affine_map<(d0) -> (d0)>", "module\n"])
def test_a_str_of_text_that_names_no_file_is_text(text, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(TypeError, match=r"^load_module: got a str of MLIR text; "):
        load_module(text)
    with pytest.raises(TypeError, match=r"^aotkit.load: got a str of MLIR text, which is a "):
        aotkit.load(text)


def test_str_reading_decides_once_for_both_readers(tmp_path, monkeypatch):
    from aotkit import _files

    monkeypatch.chdir(tmp_path)
    (tmp_path / "module.mlir").write_text("module {}\n")
    assert _files.str_reading("module.mlir") == "path"
    assert _files.str_reading("module.aotx") == "either"
    assert _files.str_reading("module {}") == "text"
    assert _files.str_reading("module {\n}") == "text"
    assert _files.str_reading("absent.aotx") == "path"
    assert _files.str_reading("x" * 5000) == "path"  # too long a name: the reader says so
