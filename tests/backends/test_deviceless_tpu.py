"""Compiling for a TPU topology on a machine without a TPU (aotkit/backends/tpu_topology.py).

The compiles need libtpu (`pip install 'aotkit[tpu]'`) and skip where it is not installed;
the errors that come before libtpu is needed (a bad topology name, a topology with another
backend, libtpu missing) run everywhere. The oracle is the CPU backend: XLA:TPU's cost
analysis counts the same flops, and an artifact compiled for a TPU runs its portable module
on the CPU with NumPy's values. Running on a real chip is the accelerator lane's job.

libtpu prints warnings about TPU_ACCELERATOR_TYPE and worker hostnames when it starts on a
machine without a TPU; they go to the process's stderr and are harmless.
"""

from __future__ import annotations

import os
import re
import sys
import textwrap
import warnings
from types import SimpleNamespace

import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec

import aotkit
import aotkit.numpy as anp
from aotkit import _compat, artifacts, backends, compiling
from aotkit.backends import pjrt_spmd, tpu_chips, tpu_topology
from aotkit.errors import ArtifactError, ArtifactWarning, CompileError

LIBTPU_MISSING = "libtpu is not installed (pip install 'aotkit[tpu]')"
needs_libtpu = pytest.mark.skipif(tpu_topology.available() is not None, reason=LIBTPU_MISSING)

GIB = 1 << 30
SPECS = (
    aotkit.ShapeDtype((128, 256), np.float32),
    aotkit.ShapeDtype((256, 512), np.float32),
    aotkit.ShapeDtype((512, 10), np.float32),
)


def mlp(x, w1, w2):
    return anp.tanh(x @ w1) @ w2


def inputs():
    rng = np.random.default_rng(0)
    return [rng.standard_normal(s.shape).astype(s.dtype) / 16 for s in SPECS]


def numpy_mlp(x, w1, w2):
    return np.tanh(x @ w1) @ w2


def data_parallel():
    """`mlp` with its batch split over the 4 devices of v5e:2x2."""
    mesh = Mesh(np.array(tpu_topology.devices("v5e:2x2")), ("data",))
    batch = NamedSharding(mesh, PartitionSpec("data"))
    return aotkit.jit(mlp, in_shardings=(batch, None, None), out_shardings=batch)


@pytest.fixture(scope="module")
def compiled_1x1():
    return aotkit.jit(mlp).lower(*SPECS).compile(backend="tpu", topology="v5e:1x1")


@pytest.fixture(scope="module")
def compiled_2x2():
    return data_parallel().lower(*SPECS).compile(backend="tpu", topology="v5e:2x2")


@pytest.fixture(scope="module")
def cpu_flops():
    return aotkit.jit(mlp).lower(*SPECS).compile(backend="cpu").cost_analysis()["flops"]


# --- errors before libtpu is needed ----------------------------------------------------------


@pytest.mark.parametrize("name", ["v9:2x2", "v5e", "2x2", "v5e-2x2", "tpu:v5e:2x2", ""])
def test_unknown_topology_names_the_form(name):
    lowered = aotkit.jit(mlp).lower(*SPECS)
    with pytest.raises(
        ValueError,
        match=rf"^Lowered.compile\(mlp\): topology {re.escape(repr(name))} is not a TPU "
        r"topology aotkit knows; write CHIP:BOUNDS such as 'v5e:2x2' or 'v4:2x2x1', with "
        r"CHIP one of v4 \(NxNxN\), v5e \(NxN\), v5p \(NxNxN\), v6e \(NxN\)$",
    ):
        lowered.compile(backend="tpu", topology=name)


def test_topology_of_the_wrong_rank():
    with pytest.raises(
        ValueError,
        match=r"^Lowered.compile\(mlp\): topology 'v4:2x2': a v4 topology has 3 positive "
        r"bounds, such as 'v4:2x2x1'$",
    ):
        aotkit.jit(mlp).lower(*SPECS).compile(backend="tpu", topology="v4:2x2")


def test_topology_that_is_not_a_string():
    with pytest.raises(
        TypeError,
        match=r"^Lowered.compile\(mlp\): topology must be a name such as 'v5e:2x2', got tuple$",
    ):
        aotkit.jit(mlp).lower(*SPECS).compile(backend="tpu", topology=(2, 2))


@pytest.mark.parametrize("backend", ["cpu", "interpreter"])
def test_topology_needs_backend_tpu(backend):
    with pytest.raises(
        ValueError,
        match=rf"^Lowered.compile\(mlp\): topology='v5e:2x2' applies to backend='tpu' "
        rf"\(compiling for a TPU slice on a machine without one\), but the backend is "
        rf"'{backend}'; pass backend='tpu' with it, or drop topology=$",
    ):
        aotkit.jit(mlp).lower(*SPECS).compile(backend=backend, topology="v5e:2x2")


def test_libtpu_missing_says_what_to_install(monkeypatch):
    monkeypatch.setattr(_compat, "tpu_library_path", lambda: None)
    monkeypatch.setattr(tpu_topology, "_backends", {})
    assert tpu_topology.available() == LIBTPU_MISSING
    with pytest.raises(
        ImportError,
        match=r"^Lowered.compile\(mlp\): compiling for TPU topology 'v5e:2x2' needs libtpu, "
        r"which is not installed; pip install 'aotkit\[tpu\]' \(it compiles for TPUs on "
        r"machines without one\)$",
    ):
        aotkit.jit(mlp).lower(*SPECS).compile(backend="tpu", topology="v5e:2x2")


def test_cli_libtpu_missing_is_a_user_error(monkeypatch, run_cli, tmp_path):
    monkeypatch.setattr(_compat, "tpu_library_path", lambda: None)
    monkeypatch.setattr(tpu_topology, "_backends", {})
    target = _module_file(tmp_path)
    code, out, err = run_cli(
        "compile", f"{target}:mlp", "--shapes", *map(str, SPECS), "--backend", "tpu",
        "--topology", "v5e:2x2", "-o", tmp_path / "f.aotx",
    )  # fmt: skip
    assert (code, out) == (1, "")
    assert err == (
        "aotkit compile: error: Lowered.compile(mlp): compiling for TPU topology 'v5e:2x2' "
        "needs libtpu, which is not installed; pip install 'aotkit[tpu]' (it compiles for "
        "TPUs on machines without one)\n"
    )
    assert not (tmp_path / "f.aotx").exists()


@pytest.mark.parametrize(
    ("name", "host_bounds"),
    [("v5e:1x1", (1, 1, 1)), ("v5e:1x2", (1, 2, 1)), ("v5e:2x2", None), ("v5e:4x4", None),
     ("v4:2x2x1", None), ("v4:1x1x1", (1, 1, 1)), ("V5E:2x4", None)],
)  # fmt: skip
def test_host_bounds_for_small_slices(name, host_bounds):
    """libtpu's default host is 2x2x1 chips; a smaller slice is one host of its own size."""
    assert tpu_topology.parse(name, "here").host_bounds() == host_bounds


def test_known_chips_hbm():
    assert {c.name: c.hbm_bytes // GIB for c in tpu_chips.CHIPS.values()} == {
        "v4": 32,
        "v5e": 16,
        "v5p": 95,
        "v6e": 32,
    }


@pytest.mark.parametrize(("hbm", "fits"), [(35, True), (34, False)])
def test_memory_fits_when_what_one_device_holds_is_at_most_its_hbm(hbm, fits):
    # libtpu's statistics, stood in for: 10 + 20 - 5 (an aliased result) + 7 + 3 = 35 bytes.
    stats = SimpleNamespace(
        argument_size_in_bytes=10,
        output_size_in_bytes=20,
        alias_size_in_bytes=5,
        temp_size_in_bytes=7,
        generated_code_size_in_bytes=3,
    )
    exe = SimpleNamespace(get_compiled_memory_stats=lambda: stats)
    chip = SimpleNamespace(device_kind="TPU v5 lite")
    backend = SimpleNamespace(hbm_per_device=hbm, topology=SimpleNamespace(chip=chip))
    memory = tpu_topology.DevicelessExecutable(backend, "f", exe, (), ()).memory_analysis()
    assert (memory.used_in_bytes, memory.hbm_size_in_bytes, memory.fits) == (35, hbm, fits)
    assert memory.to_dict()["fits"] is fits


def test_a_host_reports_its_topology_in_the_target_it_loads_as():
    """The PJRT backends name the host's topology where a saved target has one (so a TPU
    host loads a deviceless artifact as it is); CPU devices are of no TPU topology."""
    cpu = backends.get("cpu")
    assert cpu.target_for({**cpu.target(), "topology": "v5e:1x1"}) == cpu.target()


# --- compiling with libtpu ------------------------------------------------------------------


@needs_libtpu
@pytest.mark.parametrize(
    ("name", "count", "kind"),
    [("v5e:1x1", 1, "TPU v5 lite"), ("v5e:2x2", 4, "TPU v5 lite"),
     ("v5e:2x4", 8, "TPU v5 lite"), ("v6e:2x2", 4, "TPU v6 lite"), ("v5p:2x2x1", 4, "TPU v5")],
)  # fmt: skip
def test_topology_devices(name, count, kind):
    devices = tpu_topology.devices(name)
    assert len(devices) == count
    assert {d.device_kind for d in devices} == {kind}
    # What a TPU host of this topology reports in the target it loads artifacts as.
    assert tpu_chips.topology_of(devices) == name


@needs_libtpu
def test_libtpu_refuses_a_topology():
    with pytest.raises(
        ValueError,
        match=r"^Lowered.compile\(mlp\): libtpu refused topology 'v5e:3x3': INVALID_ARGUMENT: "
        r".*not divisible.*; use a slice such as 'v5e:1x1', 'v5e:2x2' or 'v5e:2x4'$",
    ):
        aotkit.jit(mlp).lower(*SPECS).compile(backend="tpu", topology="v5e:3x3")


def test_libtpu_held_by_another_process_is_said_so(monkeypatch):
    # What libtpu says where another process holds it (a chip's, or another compile's).
    held = (
        'ABORTED: Internal error when accessing libtpu multi-process lockfile. Run "$ sudo rm '
        '/tmp/libtpu_lockfile".'
    )

    def refuse(name, bounds):
        raise _compat.runtime_error_type()(held)

    monkeypatch.setattr(tpu_topology, "available", lambda: None)
    monkeypatch.setattr(_compat, "tpu_topology_devices", refuse)
    monkeypatch.setattr(tpu_topology, "_backends", {})
    with pytest.raises(
        RuntimeError,
        match=r"^Lowered.compile\(mlp\): libtpu did not start for topology 'v5e:2x4': another "
        r"process on this machine holds it \(its lockfile, /tmp/libtpu_lockfile\); compile in "
        r"that process, or after it ends$",
    ):
        aotkit.jit(mlp).lower(*SPECS).compile(backend="tpu", topology="v5e:2x4")


@needs_libtpu
def test_1x1_hlo_cost_and_memory(compiled_1x1, cpu_flops):
    compiled = compiled_1x1
    assert compiled.backend.name == "tpu" and compiled.partitioning is None
    text = compiled.as_text()
    assert text.startswith("HloModule mlp, is_scheduled=true")
    # XLA:TPU's tiled layouts: the optimized HLO is the TPU's, not the CPU's.
    assert "f32[128,256]{1,0:T(8,128)}" in text
    cost = compiled.cost_analysis()
    assert cost["flops"] == pytest.approx(cpu_flops, rel=0.01)
    assert cost["flops"] == pytest.approx(2 * 128 * 256 * 512 + 2 * 128 * 512 * 10, rel=0.02)
    assert cost["transcendentals"] == 128 * 512  # the tanh
    memory = compiled.memory_analysis()
    assert isinstance(memory, tpu_topology.TpuMemoryAnalysis)
    assert (memory.devices, memory.device_kind) == (1, "TPU v5 lite")
    assert memory.hbm_size_in_bytes == 16 * GIB
    assert memory.fits is True
    assert memory.argument_size_in_bytes >= sum(s.dtype.itemsize * np.prod(s.shape) for s in SPECS)
    assert memory.output_size_in_bytes >= 128 * 10 * 4
    assert memory.to_dict()["hbm_size_in_bytes"] == 16 * GIB
    assert re.fullmatch(
        r"\d+\.\d MiB per device of 16 GiB HBM \(TPU v5 lite, 1 device\): fits", str(memory)
    )


@needs_libtpu
def test_2x2_data_parallel_is_partitioned(compiled_2x2, compiled_1x1, cpu_flops):
    compiled = compiled_2x2
    assert compiled.partitioning.describe() == "mesh ('data': 4)"
    text = compiled.as_text()
    head = text.split("\n", 1)[0]
    # Each device holds a quarter of the batch.
    assert "num_partitions=4" in head
    assert "(f32[32,256]{1,0:T(8,128)}, f32[256,512]" in head
    assert "->f32[32,10]" in head
    cost = compiled.cost_analysis()
    assert cost["devices"] == 4.0
    assert cost["flops"] == pytest.approx(cpu_flops / 4, rel=0.01)
    memory = compiled.memory_analysis()
    assert (memory.devices, memory.hbm_size_in_bytes, memory.fits) == (4, 16 * GIB, True)
    single = compiled_1x1.memory_analysis()
    assert memory.argument_size_in_bytes < single.argument_size_in_bytes
    assert str(memory).endswith("(TPU v5 lite, 4 devices): fits")


@needs_libtpu
@pytest.mark.parametrize("which", ["compiled_1x1", "compiled_2x2"])
def test_calling_it_says_where_it_runs(request, which):
    compiled = request.getfixturevalue(which)
    name = compiled.backend.topology.name
    with pytest.raises(
        RuntimeError,
        match=rf"^Compiled 'mlp' was compiled for TPU topology '{name}' without a TPU and "
        r"cannot run here; save it \(Compiled.save\) and run it with aotkit.load \(or `aotkit "
        rf"run FILE`\) on a TPU host of topology '{name}'$",
    ):
        compiled(*inputs())


@needs_libtpu
def test_too_big_for_hbm_names_the_chip():
    # 10 GiB in and 10 GiB out: XLA:TPU refuses what does not fit in a v5e's HBM.
    lowered = aotkit.jit(lambda x: x * 2).lower(aotkit.ShapeDtype((5 * 2**29,), np.float32))
    with pytest.raises(
        CompileError,
        match=r"^backend 'tpu' \(topology 'v5e:1x1'\) rejected module 'lambda': "
        r"RESOURCE_EXHAUSTED: .*HBM.*; a v5e device has 16 GiB of HBM: shard the program over "
        r"more devices \(a larger topology\) or give it smaller shapes",
    ):
        lowered.compile(backend="tpu", topology="v5e:1x1")


@needs_libtpu
def test_symbolic_programs_are_refused():
    lowered = aotkit.jit(mlp).lower(aotkit.ShapeDtype(("b", 256), np.float32), *SPECS[1:])
    with pytest.raises(
        ValueError,
        match=r"^Lowered.compile\(mlp\): the program has symbolic shapes \(.*\), which are "
        r"compiled per shape when called, and <aotkit backend 'tpu' topology='v5e:1x1' "
        r"\(deviceless\)> cannot run; lower it with concrete shapes",
    ):
        lowered.compile(backend="tpu", topology="v5e:1x1")


@needs_libtpu
def test_jit_caches_one_compile_per_topology():
    lowered = aotkit.jit(mlp).lower(*SPECS)
    a = lowered.compile(backend="tpu", topology="v5e:1x1")
    assert lowered.compile(topology="v5e:1x1") is a  # a topology implies backend='tpu'
    b = lowered.compile(backend="tpu", topology="v5e:2x2")
    assert b is not a and b.backend.topology.name == "v5e:2x2"


# --- artifacts ------------------------------------------------------------------------------


@needs_libtpu
@pytest.mark.parametrize("which", ["compiled_1x1", "compiled_2x2"])
def test_artifact_target_records_the_topology(request, which, tmp_path):
    compiled = request.getfixturevalue(which)
    name = compiled.backend.topology.name
    path = tmp_path / "f.aotx"
    compiled.save(path)
    artifact = artifacts.unpack(path.read_bytes(), str(path))
    target = artifact.target
    assert (target["backend"], target["platform"], target["topology"]) == ("tpu", "tpu", name)
    assert target["device_kind"] == "TPU v5 lite"
    # libtpu's own version, as a TPU host's client reports it: several lines, kept as data.
    assert target["platform_version"] == compiled.backend._platform_version
    assert target["platform_version"].startswith("PJRT C API\n")
    assert artifact.executable_format == "pjrt"
    assert len(artifact.section(artifacts.EXECUTABLE)) > 1000
    if compiled.partitioning is not None:
        assert target["devices"] == "4"
        assert artifact.header["partitioning"]["devices"] == [0, 1, 2, 3]


@needs_libtpu
def test_load_here_refuses_naming_the_topology(compiled_1x1, tmp_path):
    path = tmp_path / "f.aotx"
    compiled_1x1.save(path)
    with pytest.raises(
        ArtifactError,
        match=r"^aotkit.load: .*f.aotx was compiled for backend 'tpu' \(TPU topology "
        r"'v5e:1x1'\), which does not start here \(",
    ):
        aotkit.load(path, recompile=False)
    with pytest.raises(ArtifactError, match=r"topology 'v5e:1x1' \(here None\)") as caught:
        aotkit.load(path, backend="cpu", recompile=False)
    assert "device_kind 'TPU v5 lite' (here 'cpu')" in str(caught.value)


@needs_libtpu
def test_load_here_recompiles_the_portable_module_where_allowed(compiled_1x1, tmp_path):
    path = tmp_path / "f.aotx"
    compiled_1x1.save(path)
    with pytest.warns(ArtifactWarning, match=r"topology 'v5e:1x1' \(here None\)"):
        loaded = aotkit.load(path)
    assert loaded.backend.name == "cpu" and loaded.origin == "recompiled"
    x = inputs()
    out = np.asarray(loaded(*x))
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, numpy_mlp(*x), rtol=1e-5, atol=1e-6)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        portable = aotkit.load(path, portable_only=True)
    np.testing.assert_array_equal(np.asarray(portable(*x)), out)


@needs_libtpu
def test_another_topology_is_refused_naming_both(compiled_1x1, compiled_2x2):
    """A host of another topology (here the 2x2 target standing in for one) compares the
    saved target as data: the topologies differ, and both are named."""
    artifact = artifacts.unpack(compiled_1x1.serialize(), "<bytes>")
    with pytest.raises(
        ArtifactError, match=r"topology 'v5e:1x1' \(here 'v5e:2x2'\); load it with recompile="
    ):
        compiling.to_compiled(artifact, backend=compiled_2x2.backend, recompile=False)


@needs_libtpu
def test_same_topology_loads_the_executable_as_it_is(compiled_1x1):
    """The saved target equals what a host of the same topology reports (the deviceless
    target stands in for it), so the executable is loaded, not recompiled; the compile-only
    client cannot load it, and says where it runs."""
    artifact = artifacts.unpack(compiled_1x1.serialize(), "<bytes>")
    backend = compiled_1x1.backend
    assert dict(artifact.target) == backend.target_for(artifact.target)
    with pytest.raises(
        ArtifactError,
        match=r"^aotkit.load: <bytes>: its executable does not load \(backend 'tpu' \(topology "
        r"'v5e:1x1', deviceless\): 'mlp' cannot be loaded without a TPU; load it with "
        r"aotkit.load on a TPU host of that topology\); load it with recompile=True",
    ):
        compiling.to_compiled(artifact, backend=backend, recompile=False)


@needs_libtpu
@pytest.mark.parametrize("which", ["compiled_1x1", "compiled_2x2"])
def test_a_tpu_host_of_the_topology_loads_it_as_it_is(request, which):
    """What the `tpu` plugin backend (an SpmdBackend) of a host of the same topology and
    libtpu reports for the saved target equals it: a stand-in host whose devices are the
    topology's, and whose own target is the PJRT backend's fields without the topology."""
    compiled = request.getfixturevalue(which)
    saved = artifacts.unpack(compiled.serialize(), "<bytes>").target
    devices = compiled.backend.devices()

    class Host:
        def target(self):
            return {k: v for k, v in saved.items() if k not in ("topology", "devices")}

        def global_devices(self):
            return devices

    assert pjrt_spmd.SpmdBackend.target_for(Host(), saved) == saved

    class SmallerHost(Host):
        def global_devices(self):
            return devices[:1] if len(devices) > 1 else tpu_topology.devices("v5e:2x2")

    here = pjrt_spmd.SpmdBackend.target_for(SmallerHost(), saved)
    assert here["topology"] != saved["topology"]


@needs_libtpu
def test_inspect_says_where_it_runs(compiled_2x2, tmp_path, run_cli):
    path = tmp_path / "f.aotx"
    compiled_2x2.save(path)
    code, out, err = run_cli("inspect", path)
    assert code == 0, err
    assert '"topology": "v5e:2x2"' in out
    assert out.rstrip().endswith(
        "here: backend 'tpu' does not start; it runs on a TPU host of topology 'v5e:2x2'; "
        "aotkit.load compiles it for another"
    )


# --- the CLI --------------------------------------------------------------------------------


def _module_file(tmp_path):
    path = tmp_path / "model.py"
    path.write_text(
        textwrap.dedent(
            """\
            import aotkit.numpy as anp

            def mlp(x, w1, w2):
                return anp.tanh(x @ w1) @ w2
            """
        )
    )
    return path


@needs_libtpu
@pytest.mark.parametrize("mesh", [(), ("--mesh", "data=4", "--shardings", "data,None", "-", "-")])
def test_cli_compiles_for_a_topology(run_cli, tmp_path, mesh):
    target = _module_file(tmp_path)
    dest = tmp_path / "f.aotx"
    code, out, err = run_cli(
        "compile", f"{target}:mlp", "--shapes", *map(str, SPECS), "--backend", "tpu",
        "--topology", "v5e:2x2", *mesh, "-o", dest,
    )  # fmt: skip
    assert code == 0, err
    assert out == ""
    devices = "4 devices" if mesh else "1 device"
    assert re.search(
        r"^aotkit compile: compiled mlp for TPU topology 'v5e:2x2' \(it runs on a TPU host of "
        rf"that topology, not here\): \d+\.\d MiB per device of 16 GiB HBM \(TPU v5 lite, "
        rf"{devices}\): fits$",
        err,
        re.M,
    ), err
    artifact = artifacts.unpack(dest.read_bytes(), str(dest))
    assert artifact.target["topology"] == "v5e:2x2"
    assert (artifact.partitioning is not None) == bool(mesh)


@needs_libtpu
def test_cli_emits_the_memory_analysis(run_cli, tmp_path):
    import json

    target = _module_file(tmp_path)
    code, out, err = run_cli(
        "compile", f"{target}:mlp", "--shapes", *map(str, SPECS), "--topology", "v5e:1x1",
        "--emit", "memory", "-q",
    )  # fmt: skip
    assert (code, err) == (0, "")
    memory = json.loads(out)
    assert memory["hbm_size_in_bytes"] == 16 * GIB and memory["fits"] is True
    assert memory["device_kind"] == "TPU v5 lite"


def test_cli_topology_with_another_backend(run_cli, tmp_path):
    target = _module_file(tmp_path)
    code, out, err = run_cli(
        "compile", f"{target}:mlp", "--shapes", *map(str, SPECS), "--backend", "cpu",
        "--topology", "v5e:2x2",
    )  # fmt: skip
    assert (code, out) == (1, "")
    assert err == (
        "aotkit compile: error: Lowered.compile(mlp): topology='v5e:2x2' applies to "
        "backend='tpu' (compiling for a TPU slice on a machine without one), but the backend "
        "is 'cpu'; pass backend='tpu' with it, or drop topology=\n"
    )


def test_cli_topology_of_an_artifact(run_cli, tmp_path):
    path = tmp_path / "f.aotx"
    aotkit.jit(mlp).lower(*SPECS).compile(backend="cpu").save(path)
    code, out, err = run_cli("compile", path, "--topology", "v5e:2x2", "--emit", "memory")
    assert (code, out) == (1, "")
    assert err == (
        f"aotkit compile: error: {path} is an AOT artifact, compiled already (its signature "
        "and pipeline are fixed); drop --topology\n"
    )


# --- the private names' fallbacks (docs/compat.md) ------------------------------------------


@needs_libtpu
def test_library_path_fallback_finds_the_libtpu_package(monkeypatch):
    import libtpu

    real = _compat._private
    monkeypatch.setattr(
        _compat,
        "_private",
        lambda module, name="": None if name == "get_tpu_library_path" else real(module, name),
    )
    assert _compat.tpu_library_path() == os.path.join(os.path.dirname(libtpu.__file__), "libtpu.so")


@needs_libtpu
def test_topology_fallback_gives_the_same_devices(monkeypatch):
    private = _compat.tpu_topology_devices("v5e:2x2", None)
    real = _compat._private
    monkeypatch.setattr(
        _compat,
        "_private",
        lambda module, name="": None if name == "make_pjrt_tpu_topology" else real(module, name),
    )
    public = _compat.tpu_topology_devices("v5e:2x2", None)
    assert public[1] == private[1]  # libtpu's platform version
    assert [(d.id, d.device_kind, tuple(d.coords)) for d in public[0]] == [
        (d.id, d.device_kind, tuple(d.coords)) for d in private[0]
    ]


# --- complex128, which XLA:TPU aborts the process on (aotkit/backends/tpu_complex128.py) ----

_COMPLEX128_CHILD = """\
import re

import numpy as np

import aotkit


def compile_for_v5e(fn, *args):
    return aotkit.jit(fn).lower(*args).compile(backend="tpu", topology="v5e:1x1")


cases = {
    "int32 * complex": (lambda a, b: a * b, np.arange(3, dtype=np.int32), 2 - 1j),
    "complex64 -> complex128": (lambda a: a.astype(np.complex128), np.ones(3, np.complex64)),
    "float64 -> complex128": (lambda a: a.astype(np.complex128), np.ones(3, np.float64)),
}
for name, (fn, *args) in cases.items():
    head = compile_for_v5e(fn, *args).as_text().split("\\n", 1)[0]
    result = re.search(r"->(\\S+?)\\{", head).group(1)
    print(f"{name}: {result}", flush=True)
try:
    compile_for_v5e(lambda a, b: a / b, np.complex128(1j), np.complex128(2))
except aotkit.UnsupportedModuleError as e:
    print(f"divide refused ({e.op}): {e}", flush=True)
"""


@needs_libtpu
def test_complex128_compiles_or_is_refused_without_aborting(tmp_path):
    """Each of these programs ended the process (a failed check in libtpu) before converts to
    complex128 were rewritten and the complex128 divide refused; a child process runs them."""
    import subprocess

    script = tmp_path / "complex128_child.py"
    script.write_text(_COMPLEX128_CHILD)
    line = _COMPLEX128_CHILD.split("\n").index(
        "    compile_for_v5e(lambda a, b: a / b, np.complex128(1j), np.complex128(2))"
    )
    proc = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        # This process may hold libtpu already (its lockfile), from the tests before.
        env={**os.environ, "TPU_SKIP_MDS_QUERY": "1", "ALLOW_MULTIPLE_LIBTPU_LOAD": "1"},
        timeout=300,
    )
    assert proc.returncode >= 0, f"killed by signal {-proc.returncode}:\n{proc.stderr[-3000:]}"
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.splitlines() == [
        "int32 * complex: c128[3]",
        "complex64 -> complex128: c128[3]",
        "float64 -> complex128: c128[3]",
        "divide refused (stablehlo.divide): backend 'tpu' (topology 'v5e:1x1'): module 'lambda' "
        f"applies stablehlo.divide to complex128 values at {script}:{line + 1}, which XLA:TPU "
        "cannot compile (its float64 emulation has no rule for it, and it would abort the "
        "process); compute it in complex64, or compile for 'cpu'",
    ], proc.stderr[-3000:]


@needs_libtpu
def test_complex128_refusal_in_process():
    """The refusal comes before libtpu sees the module, so it is safe in the test process."""
    lowered = aotkit.jit(lambda a, b: a / b).lower(np.complex128(1j), np.complex128(2))
    line = sys._getframe().f_lineno - 1
    with pytest.raises(
        aotkit.UnsupportedModuleError,
        match=r"^backend 'tpu' \(topology 'v5e:1x1'\): module 'lambda' applies stablehlo.divide "
        rf"to complex128 values at {re.escape(__file__)}:{line}, which XLA:TPU cannot compile "
        r"\(its float64 emulation has no rule for it, and it would abort the process\); "
        r"compute it in complex64, or compile for 'cpu'$",
    ):
        lowered.compile(backend="tpu", topology="v5e:1x1")


@needs_libtpu
def test_a_tpu_artifact_holds_the_portable_module_xla_tpu_compiled(tmp_path):
    """The portable module of a TPU executable is the one XLA:TPU compiled (its complex128
    converts rewritten), so a TPU that compiles it again is not aborted by it; on the CPU it
    gives NumPy's values."""
    a, b = np.arange(3, dtype=np.int32), 2 - 1j
    compiled = aotkit.jit(lambda a, b: a * b).lower(a, b).compile(backend="tpu", topology="v5e:1x1")
    path = tmp_path / "complex.aotx"
    compiled.save(path)
    portable = artifacts.unpack(path.read_bytes(), str(path)).section(artifacts.PORTABLE)
    text = aotkit.load_module(portable).as_text()
    assert "stablehlo.complex" in text
    assert not re.search(r"stablehlo\.convert .*-> tensor<3xcomplex<f64>>", text), text
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loaded = aotkit.load(path, portable_only=True, backend="cpu")
    out = np.asarray(loaded(a, b))
    assert out.dtype == np.complex128
    np.testing.assert_array_equal(out, a * b)
    # A cpu executable's portable module is the program as written.
    cpu = aotkit.jit(lambda a, b: a * b).lower(a, b).compile(backend="cpu")
    cpu_portable = artifacts.unpack(cpu.serialize(), "<bytes>").section(artifacts.PORTABLE)
    cpu_text = aotkit.load_module(cpu_portable).as_text()
    assert re.search(r"stablehlo\.convert .*-> tensor<3xcomplex<f64>>", cpu_text), cpu_text


def _window_gradients():
    """Gradients whose select_and_scatter XLA:TPU has no kernel for (fewer than two inactive
    dimensions): a cumulative max, and a window max over a matrix with explicit padding."""
    import aotkit.lax as alax

    x = np.random.default_rng(5).permutation(40).astype(np.float32).reshape(8, 5)
    weights = np.arange(40, dtype=np.float32).reshape(8, 5)

    def cummax(x):
        return (np.maximum.accumulate(x, axis=0) * weights).sum()

    def padded_max(x):
        windows = alax.reduce_window(x, -np.inf, "max", (2, 3), (1, 2), ((1, 0), (1, 1)))
        return (windows * np.arange(windows.size, dtype=np.float32).reshape(windows.shape)).sum()

    return x, {"cummax": cummax, "padded_max": padded_max}


@needs_libtpu
@pytest.mark.parametrize("name", ["cummax", "padded_max"])
def test_window_gradients_compile_for_a_tpu(name, tmp_path):
    """XLA:TPU compiles them after the select_and_scatter rewrite (aotkit/backends/
    tpu_windows.py); the artifact's portable module, the rewritten one, gives the CPU's
    gradient."""
    x, programs = _window_gradients()
    lowered = aotkit.jit(aotkit.grad(programs[name])).lower(x)
    assert "select_and_scatter" in lowered.as_text()
    compiled = lowered.compile(backend="tpu", topology="v5e:1x1")
    path = tmp_path / f"{name}.aotx"
    compiled.save(path)
    portable = artifacts.unpack(path.read_bytes(), str(path)).section(artifacts.PORTABLE)
    assert "select_and_scatter" not in aotkit.load_module(portable).as_text()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loaded = aotkit.load(path, portable_only=True, backend="cpu")
    got, want = np.asarray(loaded(x)), np.asarray(lowered.compile(backend="cpu")(x))
    assert got.dtype == want.dtype == np.float32
    np.testing.assert_array_equal(got, want)


@needs_libtpu
def test_without_the_rewrite_xla_tpu_refuses_the_window(monkeypatch):
    """What the rewrite is for: the same gradient, given to XLA:TPU as it is, is refused."""
    from aotkit.backends import tpu_windows

    x, programs = _window_gradients()
    lowered = aotkit.jit(aotkit.grad(programs["cummax"])).lower(x)
    monkeypatch.setattr(tpu_windows, "legalize", lambda module: module)
    with pytest.raises(CompileError, match="not implemented for TPU|not implemented on TPU"):
        lowered.compile(backend="tpu", topology="v5e:1x1")


@needs_libtpu
def test_a_pruned_jax_program_compiles_for_a_tpu_without_its_unused_argument(tmp_path):
    """jax.jit's module and executable leave out the unused argument on a TPU too: the
    artifact says so (`pruned`), and its portable module runs on the CPU with every leaf."""
    import jax.numpy as jnp

    def f(x, unused, w):
        return jnp.tanh(x @ w)

    x, unused, w = inputs()[0], np.ones((64, 64), np.float32), inputs()[1]
    compiled = (
        aotkit.jit(f, frontend="jax").lower(x, unused, w).compile(backend="tpu", topology="v5e:1x1")
    )
    memory = compiled.memory_analysis()
    assert memory.argument_size_in_bytes == x.nbytes + w.nbytes  # not the unused 16 KiB
    path = tmp_path / "pruned.aotx"
    compiled.save(path)
    assert artifacts.unpack(path.read_bytes(), str(path)).pruned == (1,)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loaded = aotkit.load(path, portable_only=True, backend="cpu")
    got = np.asarray(loaded(x, unused, w))
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, np.tanh(x @ w), rtol=1e-5, atol=1e-5)
