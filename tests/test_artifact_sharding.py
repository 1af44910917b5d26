"""Sharded artifacts (aotkit/artifacts.py, aotkit/compiling.py): a data-parallel training step
on 8 CPU devices saved by one process, loaded by a fresh 8-device process, compiled again
there from the persistent cache, and loaded by 2 processes of 4 devices each.

The oracle is the `Compiled` that was saved, run in the saving process: the loaded step and
the cached one give its results bit for bit; the two processes (whose collectives cross
processes, summing in another order) to within float32 rounding. The processes are
tests/sharded_artifact_child.py; this test session's own process has one CPU device, which
checks what a process with too few devices gets, and the header's checks on a 1-device mesh.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import aotkit
import aotkit.numpy as anp
from aotkit import artifacts
from aotkit.errors import ArtifactError
from tests.test_artifacts import repack

ROOT = Path(__file__).resolve().parents[1]
CHILD = "tests.sharded_artifact_child"


def _env(devices: int | None) -> dict:
    env = dict(os.environ)
    flags = [f for f in env.get("XLA_FLAGS", "").split() if "device_count" not in f]
    if devices is not None:
        flags.append(f"--xla_force_host_platform_device_count={devices}")
    env["XLA_FLAGS"] = " ".join(flags)
    return env


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def _check(proc, what: str) -> None:
    # A negative exit status is a signal: the process must end by itself, with 0.
    assert proc.returncode == 0, f"{what} failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The folder with step.aotx and what each process wrote: `save` and `load` (8 devices,
    one after the other), then `process-0` and `process-1` (2 x 4 devices, together)."""
    tmp = tmp_path_factory.mktemp("sharded")
    for mode in ("save", "load"):
        proc = subprocess.run(
            [sys.executable, "-m", CHILD, mode, str(tmp)],
            cwd=ROOT,
            env=_env(8),
            capture_output=True,
            text=True,
            timeout=600,
        )
        _check(proc, f"the {mode} process")
    port = _free_port()
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", CHILD, "process", str(tmp), str(i), str(port)],
            cwd=ROOT,
            env=_env(None),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    try:
        errors = [p.communicate(timeout=600)[1] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for i, (p, err) in enumerate(zip(procs, errors)):
        p.stderr = err
        _check(p, f"process {i} of 2")
    return tmp


def facts(folder: Path, name: str) -> dict:
    return json.loads((folder / f"{name}.json").read_text())


def results(folder: Path, name: str) -> list[np.ndarray]:
    got = np.load(folder / f"{name}.npz", allow_pickle=False)
    return [got[f"arr_{i}"] for i in range(len(got.files) - 1)] + [got["losses"]]


def assert_identical(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_array_equal(g, w)


def test_the_header_records_mesh_devices_shardings_and_pytrees(runs):
    art = artifacts.unpack((runs / "step.aotx").read_bytes())
    assert art.version == 2 and art.target["devices"] == "8"
    layout = art.header["partitioning"]
    assert layout["mesh"] == [["data", 8]] and layout["devices"] == list(range(8))
    # params (3 leaves) and state (3 + count) replicated, the batch split over 'data'.
    assert layout["in_shardings"][-2:] == [["data"], ["data"]]
    assert all(s in ([], [None]) or s == [None, None] for s in layout["in_shardings"][:-2])
    args = art.header["in_tree"]["tuple"][0]["tuple"]
    assert args[1]["namedtuple"][:2] == [
        "__main__.Momentum",
        ["velocity", "count"],
    ]
    assert art.signature.donated == (True,) * 7 + (False,) * 2


def test_loaded_in_a_fresh_8_device_process_it_equals_the_original(runs):
    saved, loaded = facts(runs, "save"), facts(runs, "load")["loaded"]
    assert loaded["origin"] == "artifact"
    for key in ("mesh", "in_shardings", "donated"):
        assert loaded[key] == saved[key], key
    assert "namedtuple[Momentum]" in loaded["out_tree"]
    assert facts(runs, "load")["donated_consumed"]
    assert_identical(results(runs, "load"), results(runs, "save"))


def test_the_same_step_compiled_there_comes_from_the_persistent_cache(runs):
    cached = facts(runs, "load")["cached"]
    assert cached["origin"] == "persistent cache"
    assert cached["mesh"] == facts(runs, "save")["mesh"]
    assert_identical(results(runs, "cache"), results(runs, "save"))


def test_another_topology_is_refused_or_recompiled(runs):
    seen = facts(runs, "load")
    assert seen["other_topology"] == (
        "aotkit.load: <bytes> was compiled with devices '16' (here '8'); load it with "
        "recompile=True or 'auto' to compile its portable StableHLO here"
    )
    assert seen["warnings"] == [
        "aotkit.load: <bytes> was compiled with devices '16' (here '8'); compiling its portable "
        "StableHLO for backend 'cpu' (recompile=True does so without this warning)"
    ]
    assert seen["recompiled"]["origin"] == "recompiled"
    assert seen["recompiled"]["in_shardings"] == facts(runs, "save")["in_shardings"]
    assert_identical(results(runs, "recompiled"), results(runs, "save"))


def test_two_processes_of_4_devices_each_load_one_artifact(runs):
    want = results(runs, "save")
    for i in range(2):
        seen = facts(runs, f"process-{i}")
        assert seen["origin"] == "artifact" and len(seen["local_devices"]) == 4
        got = results(runs, f"process-{i}")
        assert [g.dtype for g in got] == [w.dtype for w in want]
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_a_process_with_too_few_devices_is_told_how_to_get_them(runs):
    path = runs / "step.aotx"
    for recompile in ("auto", True, False):
        with pytest.raises(ArtifactError, match="^" + re.escape(
            f"aotkit.load: {path} is partitioned over mesh ('data': 8) on 8 devices (up to "
            "device 7 of the writer's), but backend 'cpu' has 1 here; on the CPU, start the "
            "process with XLA_FLAGS=--xla_force_host_platform_device_count=8 (or "
            "aotkit.distributed.initialize(..., local_device_count=...) across processes)"
        ) + "$"):  # fmt: skip
            aotkit.load(path, recompile=recompile)
    text = artifacts.describe(path.read_bytes(), "step.aotx")
    assert 'partitioning: {"devices": [0, 1, 2, 3, 4, 5, 6, 7],' in text
    assert text.endswith("here: backend 'cpu' has 1 device(s); it needs 8")


# --- one device: the same code paths, in this process ---------------------------------------

ONE = aotkit.sharding.mesh({"x": 1})


def make_layer():
    def layer(x, w):
        return {"y": anp.tanh(x @ w)}

    return layer


def compile_layer():
    jitted = aotkit.jit(
        make_layer(), in_shardings=(NamedSharding(ONE, P("x")), None), donate_argnums=(0,)
    )
    return jitted.lower(aotkit.spec("f32[2,2]"), aotkit.spec("f32[2,2]")).compile()


@pytest.fixture(scope="module")
def one_device():
    compiled = compile_layer()
    return compiled, compiled.serialize()


def test_a_one_device_mesh_saves_loads_and_saves_again(one_device):
    compiled, data = one_device
    loaded = aotkit.load(data)
    assert loaded.origin == "artifact" and loaded.mesh == compiled.mesh
    assert loaded.in_shardings == compiled.in_shardings
    assert repr(loaded).endswith("on cpu, mesh ('x': 1)>")
    x = np.arange(4, dtype=np.float32).reshape(2, 2)
    np.testing.assert_array_equal(loaded(x, x)["y"], compiled(x, x)["y"])
    again = aotkit.load(loaded.serialize())
    np.testing.assert_array_equal(again(x, x)["y"], compiled(x, x)["y"])


def test_a_sharded_compile_is_a_persistent_cache_hit():
    compile_layer()
    assert compile_layer().origin == "persistent cache"


@pytest.mark.parametrize(
    "layout, message",
    [
        (
            "8 devices",
            'is "8 devices", not an object of mesh, devices, in_shardings, out_shardings',
        ),
        (
            {"devices": [0, 0]},
            'is {"devices": [0, 0]}, not an object of mesh, devices, in_shardings, out_shardings',
        ),
        (
            {"mesh": [["x", 1]], "devices": [0, 0], "in_shardings": [], "out_shardings": []},
            "has devices [0, 0], not a list of distinct device positions (1 to 65536)",
        ),
        (
            {"mesh": [["x", 2]], "devices": [0], "in_shardings": [], "out_shardings": []},
            "has a mesh of 2 devices but places it on 1",
        ),
        (
            {"mesh": [['x"', 1]], "devices": [0], "in_shardings": [], "out_shardings": []},
            'has mesh axis name "x\\"", which is no plain axis name',
        ),
        (
            {"mesh": [["x", 1]], "devices": [0], "in_shardings": [], "out_shardings": [[]]},
            "has in_shardings [], not one entry per flat leaf (2)",
        ),
        (
            {
                "mesh": [["x", 1]],
                "devices": [0],
                "in_shardings": [["y"], None],
                "out_shardings": [None],
            },
            'has in_shardings[0] ["y"], which names an axis its mesh does not have',
        ),
        (
            {
                "mesh": [["x", 1]],
                "devices": [0],
                "in_shardings": [["x", "x"], None],
                "out_shardings": [None],
            },
            'has in_shardings[0] ["x", "x"], which uses a mesh axis twice',
        ),
        (
            {
                "mesh": [["x", 1]],
                "devices": [0],
                "in_shardings": [[None, None, None], None],
                "out_shardings": [None],
            },
            "has in_shardings[0] [null, null, null], not a PartitionSpec of f32[2,2] over its mesh",
        ),
    ],
    ids=[
        "not-object",
        "keys",
        "repeated-device",
        "mesh-size",
        "axis-name",
        "count",
        "unknown-axis",
        "axis-twice",
        "too-many-entries",
    ],
)
def test_bad_partitioning_fields_are_artifact_errors(one_device, layout, message):
    data = repack(one_device[1], partitioning=layout)
    with pytest.raises(ArtifactError) as info:
        aotkit.load(data)
    assert str(info.value) == (
        f"aotkit.load: <bytes>: header field 'partitioning' {message}; {artifacts.REWRITE}"
    )


def test_an_uneven_split_in_a_header_is_refused():
    jitted = aotkit.jit(make_layer(), in_shardings=(NamedSharding(ONE, P("x")), None))
    data = jitted.lower(aotkit.spec("f32[3,2]"), aotkit.spec("f32[2,2]")).compile().serialize()
    layout = artifacts.unpack(data).header["partitioning"]
    layout = {**layout, "mesh": [["x", 2]], "devices": [0, 1]}
    with pytest.raises(ArtifactError, match=re.escape(
        "header field 'partitioning' has in_shardings[0] [\"x\"], which splits dimension 0 of "
        "f32[3,2] unevenly"
    )):  # fmt: skip
        aotkit.load(repack(data, partitioning=layout))


def test_a_sharded_executable_that_does_not_load_is_refused_or_recompiled(one_device):
    compiled, data = one_device
    broken = repack(data, replace={"executable": b"not an executable"})
    with pytest.raises(ArtifactError, match=(
        r"^aotkit.load: <bytes>: its executable does not load \(backend 'cpu' could not load "
        r"the serialized executable of 'layer': .*\); load it with recompile=True or 'auto' to "
        r"compile its portable StableHLO$"
    )):  # fmt: skip
        aotkit.load(broken, recompile=False)
    with pytest.warns(aotkit.errors.ArtifactWarning, match="its executable does not load"):
        loaded = aotkit.load(broken)
    assert loaded.origin == "recompiled" and loaded.mesh == compiled.mesh


def test_a_sharded_executable_of_other_shapes_is_refused(one_device):
    _, data = one_device
    other = aotkit.jit(make_layer(), in_shardings=(NamedSharding(ONE, P("x")), None))
    other = other.lower(aotkit.spec("f32[4,4]"), aotkit.spec("f32[4,4]")).compile().serialize()
    swapped = repack(data, replace={"executable": artifacts.unpack(other).section("executable")})
    with pytest.raises(ArtifactError, match=re.escape(
        "aotkit.load: <bytes>: its executable does not load (backend 'cpu': the serialized "
        "executable of 'layer' takes per device (f32[4,4], f32[4,4]) -> (f32[4,4]), but its "
        "signature and shardings say (f32[2,2], f32[2,2]) -> (f32[2,2]); the file's header "
        "does not describe its executable); load it with recompile=True"
    )):  # fmt: skip
        aotkit.load(swapped, recompile=False)


def test_one_device_backends_refuse_sharded_executables():
    with pytest.raises(ValueError, match=re.escape(
        "backend 'interpreter' runs programs on one device, but 'f' is partitioned over mesh "
        "('x': 1); load it on a PJRT backend such as 'cpu'"
    )):  # fmt: skip
        aotkit.backends.get("interpreter").deserialize_spmd(
            b"",
            name="f",
            in_specs=(),
            out_specs=(),
            partitioning=aotkit.spmd.Partitioning(ONE, 1, (), ()),
        )


def test_without_jaxlibs_mixed_serialization_a_sharded_program_does_not_save(monkeypatch):
    from aotkit import _compat

    monkeypatch.setattr(_compat, "portable_artifact_with_shardy", lambda *a: None)
    with pytest.raises(ValueError, match=re.escape(
        "Compiled 'layer': serialize: this jaxlib cannot write a sharded module as a portable "
        "artifact (jaxlib's mixed StableHLO/Shardy serialization is missing); save the module "
        "with Lowered.as_bytecode() and compile it where it runs"
    )):  # fmt: skip
        compile_layer().serialize()


@pytest.mark.parametrize(
    "mesh, message",
    [
        ("x", 'has mesh "x", not a list of [axis name, size] pairs'),
        ([["x", 0]], 'has mesh axis ["x", 0], not an [axis name, size] pair'),
        ([["x", 1], ["x", 1]], "names mesh axis 'x' twice"),
    ],
    ids=["not-list", "size-0", "axis-twice"],
)
def test_bad_meshes_in_a_header_are_artifact_errors(one_device, mesh, message):
    layout = {**artifacts.unpack(one_device[1]).header["partitioning"], "mesh": mesh}
    with pytest.raises(ArtifactError, match=re.escape(f"header field 'partitioning' {message};")):
        aotkit.load(repack(one_device[1], partitioning=layout))


def test_a_header_with_specs_of_another_rank_is_refused(one_device):
    # Found by the header fuzz: the compiled shardings do not apply to specs of another rank.
    bad = repack(one_device[1], out_specs=["f32[2,2,1]"])
    with pytest.raises(ArtifactError, match=re.escape(
        "aotkit.load: <bytes>: its executable does not load (backend 'cpu': the serialized "
        "executable of 'layer' takes per device (f32[2,2], f32[2,2]) -> (f32[2,2]), but its "
        "signature and shardings say (f32[2,2], f32[2,2]) -> (f32[2,2,1]); the file's header "
        "does not describe its executable); load it with recompile=True"
    )):  # fmt: skip
        aotkit.load(bad, recompile=False)
