"""Native executables in artifacts are trusted code (issue 26 item 12, class "crash").

An artifact's `executable` section is code the backend runs as it is; its checksum proves
only that the file was not changed after the checksums were computed, and whoever changes
it can compute them again. What aotkit checks before running it, and what it does when a
check fails, is tested here; so is the way to refuse native code altogether,
`aotkit.load(..., portable_only=True)` (CLI `--portable-only`).

IREE (skipped without it): every vmfb goes through IREE's verifier (flatbuffer structure,
every function's VM bytecode) and aotkit's check of the registers that bytecode names
(IREE's verifier leaves i32 register numbers unchecked), then, for a vmfb meant for this
machine, into the runtime at load, where IREE checks its HAL executables (flatbuffers, ELF
headers). A refusal anywhere is an executable that does not load: `recompile="auto"`
compiles the portable module with an ArtifactWarning, `recompile=False` raises ArtifactError
naming the file. Each seeded mutation (checksums recomputed) runs in its own child process,
which must not die.

`python -m tests.reliability.test_trust_native --seeds 400` runs the same mutations over more
seeds (docs/reliability.md has its table): of 400 vmfbs changed outside their ELF none kills
the process (4 did before the register check: VM bytecode that IREE's verifier accepts with
out-of-range i32 register numbers); of 400 changed inside it, whose machine code nothing
checks, 148 killed it (SIGSEGV, SIGILL) and 23 returned wrong values. The seeds below are
plain ranges, not picked: a death among them fails its test.
"""

from __future__ import annotations

import json
import random
import re
import struct
import subprocess
import sys
import textwrap
import types
import warnings
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from jaxlib.mlir import ir

import aotkit
import aotkit.numpy as anp
from aotkit import artifacts, backends, cli, modules
from aotkit.backends import iree as iree_backend
from aotkit.errors import ArtifactError, ArtifactWarning, UnsupportedModuleError
from tests.helpers import IREE_MISSING, ir_context

needs_iree = pytest.mark.skipif(not iree_backend.installed(), reason=IREE_MISSING)

SEEDS = range(40)
# A child that lives longer than this is a hang (a mutated loop), which fails its test.
CHILD_TIMEOUT_S = 120


def repack(data: bytes, **sections: bytes) -> bytes:
    """`data` with `sections` replaced and every checksum computed again, as an attacker
    (or a careless tool) would."""
    artifact = artifacts.unpack(data, "<repack>")
    header = {k: v for k, v in artifact.header.items() if k != "sections"}
    found = {e["name"]: artifact.section(e["name"]) for e in artifact.header["sections"]}
    return artifacts.pack(header, {**found, **sections})


def executable_of(data: bytes) -> bytes:
    return artifacts.unpack(data, "<artifact>").section(artifacts.EXECUTABLE)


# --- portable only: any backend (these run without IREE) ---------------------------------


def scale(x):
    return x * 2 + 1


@pytest.fixture(scope="module")
def cpu_artifact() -> bytes:
    return aotkit.jit(scale).lower(aotkit.spec("f32[3]")).compile().serialize()


X3 = np.arange(3, dtype=np.float32)


def test_portable_only_never_reads_the_executable(cpu_artifact, tmp_path):
    path = tmp_path / "scale.aotx"
    path.write_bytes(repack(cpu_artifact, executable=b"\x00not an executable\x00" * 8))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "does not load" warning: it is never read
        loaded = aotkit.load(path, portable_only=True)
    assert loaded.origin == "recompiled"
    np.testing.assert_array_equal(loaded(X3), X3 * 2 + 1)


def test_portable_only_of_an_intact_artifact_compiles_it(cpu_artifact):
    assert aotkit.load(cpu_artifact).origin == "artifact"
    loaded = aotkit.load(cpu_artifact, portable_only=True)
    assert loaded.origin == "recompiled"
    np.testing.assert_array_equal(loaded(X3), X3 * 2 + 1)


def test_portable_only_with_recompile_false_is_refused(cpu_artifact):
    with pytest.raises(ValueError) as e:
        aotkit.load(cpu_artifact, portable_only=True, recompile=False)
    assert str(e.value) == (
        "aotkit.load: portable_only=True compiles the portable StableHLO, which "
        "recompile=False forbids; drop one of them"
    )


def test_portable_only_must_be_a_bool(cpu_artifact):
    with pytest.raises(TypeError) as e:
        aotkit.load(cpu_artifact, portable_only="yes")
    assert str(e.value) == "aotkit.load: portable_only must be True or False, got 'yes'"


_FOREIGN_CALL = """
module @scale {
  func.func public @main(%arg0: tensor<3xf32>) -> tensor<3xf32> {
    %0 = stablehlo.custom_call @my_kernel(%arg0) : (tensor<3xf32>) -> tensor<3xf32>
    return %0 : tensor<3xf32>
  }
}
"""


def test_portable_only_checks_the_portable_module(cpu_artifact, tmp_path):
    """The portable section is the file's too: under portable_only it passes the trust
    check that modules from files pass."""
    with ir_context():
        portable = modules.portable_artifact(ir.Module.parse(_FOREIGN_CALL))
    path = tmp_path / "scale.aotx"
    path.write_bytes(repack(cpu_artifact, stablehlo=portable))
    with pytest.raises(UnsupportedModuleError) as e:
        aotkit.load(path, portable_only=True)
    assert str(e.value).startswith(f"aotkit.load: {path}: custom call @my_kernel")
    assert "targets a function aotkit does not run" in str(e.value)


def test_cli_portable_only_compiles_the_portable_module(cpu_artifact, tmp_path, capsys):
    path = tmp_path / "scale.aotx"
    path.write_bytes(cpu_artifact)
    assert cli.main(["run", str(path), "-v", "--portable-only"]) == 0
    err = capsys.readouterr().err
    assert f"aotkit: loaded artifact {path} in " in err
    assert ": compiled from its portable StableHLO\n" in err
    assert cli.main(["run", str(path), "-v"]) == 0
    assert ": its executable loaded as it is (no compile)\n" in capsys.readouterr().err


# --- IREE: the vmfb is verified, and refused at load when IREE refuses it ----------------


def model(x, y):
    return anp.tanh(x) @ y + 1


X = np.linspace(-1, 1, 32, dtype=np.float32).reshape(4, 8)
Y = np.linspace(0, 2, 24, dtype=np.float32).reshape(8, 3)


@pytest.fixture(scope="module")
def iree_artifact() -> tuple[bytes, np.ndarray]:
    """A vmfb artifact of `model` and what it returns on (X, Y)."""
    compiled = aotkit.jit(model, backend="iree").lower(X, Y).compile()
    return compiled.serialize(), np.asarray(compiled(X, Y))


def elf_span(vmfb: bytes) -> tuple[int, int]:
    """Where the one ELF (the llvm-cpu HAL executable: machine code) lies in `vmfb`."""
    start = vmfb.find(b"\x7fELF")
    assert start > 0 and vmfb.find(b"\x7fELF", start + 1) == -1, "expected one ELF"
    (section_headers,) = struct.unpack_from("<Q", vmfb, start + 0x28)
    entry_size, count = struct.unpack_from("<HH", vmfb, start + 0x3A)
    return start, start + section_headers + entry_size * count


def mutated(vmfb: bytes, seed: int, *, inside_elf: bool) -> bytes:
    """`vmfb` with 1-8 bytes set at random, inside its ELF or everywhere else."""
    start, end = elf_span(vmfb)
    rng = random.Random(seed)
    lo, hi = (start, end) if inside_elf else (0, len(vmfb) - (end - start))
    out = bytearray(vmfb)
    for _ in range(rng.randint(1, 8)):
        i = rng.randrange(lo, hi)
        if not inside_elf and i >= start:
            i += end - start  # skip over the ELF
        out[i] = rng.randrange(256)
    return bytes(out)


_RAW_VERIFIER_ERROR = (
    "Error creating vm module from aligned memory: c/runtime/src/iree/vm/bytecode/"
    "verifier.c:1583: OUT_OF_RANGE; ref register ordinal 70 out of range 8; at f@2+000000B4"
)
_VERIFIER_SAYS = (
    "backend 'iree' could not load the vmfb of 'model': IreeBackend.load_executable: the "
    "bytes are not an IREE module: ref register ordinal 70 out of range 8; at f@2+000000B4; "
    "pass the bytes of IreeExecutable.vmfb"
)


@pytest.fixture
def failing_verifier(monkeypatch):
    """IREE's verifier refusing the first vmfb it reads as it refuses bad bytecode: with an
    IndexError (its OUT_OF_RANGE status), which aotkit let through before. Later ones (the
    vmfb compiled from the portable module, byte for byte the same here) load as usual."""
    iree = backends.get("iree")
    rt, instance = iree._runtime()
    calls = []

    def copy_buffer(instance, data):
        calls.append(len(data))
        if len(calls) == 1:
            raise IndexError(_RAW_VERIFIER_ERROR)
        return rt.VmModule.copy_buffer(instance, data)

    fake = types.SimpleNamespace(**vars(rt))
    fake.VmModule = types.SimpleNamespace(copy_buffer=copy_buffer)
    monkeypatch.setattr(iree, "_runtime", lambda: (fake, instance))


@needs_iree
def test_verifier_failure_falls_back_with_a_warning(iree_artifact, failing_verifier, tmp_path):
    data, expected = iree_artifact
    path = tmp_path / "model.aotx"
    path.write_bytes(data)
    with pytest.warns(ArtifactWarning) as caught:
        loaded = aotkit.load(path)
    assert [str(w.message) for w in caught] == [
        f"aotkit.load: {path}: its executable does not load ({_VERIFIER_SAYS}); compiling "
        "its portable StableHLO instead"
    ]
    assert loaded.origin == "recompiled"
    np.testing.assert_array_equal(np.asarray(loaded(X, Y)), expected)


@needs_iree
def test_verifier_failure_without_recompile_names_the_file(
    iree_artifact, failing_verifier, tmp_path
):
    path = tmp_path / "model.aotx"
    path.write_bytes(iree_artifact[0])
    with pytest.raises(ArtifactError) as e:
        aotkit.load(path, recompile=False)
    assert str(e.value) == (
        f"aotkit.load: {path}: its executable does not load ({_VERIFIER_SAYS}); load it with "
        "recompile=True or 'auto' to compile its portable StableHLO"
    )


_DAMAGED = (
    r"backend 'iree': module 'model' does not load on this machine's 'local-task' device, "
    r"although its target \(llvm-cpu for this host\) runs here: .+; the vmfb is damaged or "
    r"was not written by iree-compile: compile the module again"
)


@needs_iree
def test_a_damaged_hal_executable_is_refused_at_load_not_at_call(iree_artifact, tmp_path):
    """The vmfb verifies, but its ELF does not: the runtime refuses it when aotkit.load
    loads it, and the file is blamed, not the machine ("cannot run" was said before)."""
    data, expected = iree_artifact
    vmfb = executable_of(data)
    start, _ = elf_span(vmfb)
    damaged = vmfb[:start] + b"\x7fELG" + vmfb[start + 4 :]
    path = tmp_path / "model.aotx"
    path.write_bytes(repack(data, executable=damaged))
    with pytest.raises(ArtifactError) as e:
        aotkit.load(path, recompile=False)
    assert e.value.args[0].startswith(f"aotkit.load: {path}: its executable does not load (")
    assert "cannot run" not in str(e.value)
    warned = (
        rf"^aotkit\.load: {re.escape(str(path))}: its executable does not load \({_DAMAGED}\); "
    )
    with pytest.warns(ArtifactWarning, match=warned + "compiling its portable StableHLO instead$"):
        loaded = aotkit.load(path)
    np.testing.assert_array_equal(np.asarray(loaded(X, Y)), expected)


@needs_iree
def test_a_foreign_triple_still_loads_as_it_is_and_cannot_run_here():
    """Only an intact vmfb whose target really differs says "cannot run"."""
    import platform

    triple = "aarch64-unknown-linux-gnu"
    if platform.machine().lower() in ("aarch64", "arm64"):
        pytest.skip("this machine is aarch64: the foreign triple would run")
    lowered = aotkit.lower(lambda x: x * 2, aotkit.spec("f32[3]"))
    compiled = lowered.compile("iree", target="llvm-cpu", target_options={"triple": triple})
    loaded = aotkit.load(compiled.serialize(), recompile=False)
    assert loaded.origin == "artifact"
    with pytest.raises(RuntimeError) as e:
        loaded(np.ones(3, np.float32))
    assert str(e.value).startswith(
        "backend 'iree': module 'lambda' was compiled for target 'llvm-cpu', which this "
        "machine's 'local-task' device cannot run: "
    )


# Loads an artifact strictly, then as aotkit.load does by default (or portable only), calls
# it, and prints what happened as one JSON line. Its exit status is the point: a signal
# ends it with no line at all.
_CHILD = textwrap.dedent(
    """
    import json, sys, warnings
    import numpy as np
    import aotkit

    path, x, y, mode = sys.argv[1], np.load(sys.argv[2]), np.load(sys.argv[3]), sys.argv[4]
    seen = {}
    if mode == "portable":
        loaded = aotkit.load(path, portable_only=True)
    else:
        try:
            aotkit.load(path, recompile=False)
            seen["strict"] = "loaded"
        except aotkit.ArtifactError as e:
            seen["strict"] = str(e)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            loaded = aotkit.load(path)
        seen["warnings"] = [f"{type(w.message).__name__}: {w.message}" for w in caught]
    seen["origin"] = loaded.origin
    try:
        seen["out"] = np.asarray(loaded(x, y)).tolist()
    except RuntimeError as e:
        seen["call"] = str(e)
    print(json.dumps(seen))
    """
)


def _run_child(path, inputs, mode: str) -> dict:
    argv = [sys.executable, "-c", _CHILD, str(path), *map(str, inputs), mode]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=CHILD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return {"died": f"hung (no exit after {CHILD_TIMEOUT_S} s)"}
    if proc.returncode != 0:
        return {"died": f"exit status {proc.returncode}", "stderr": proc.stderr[-2000:]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _run_seeds(
    tmp_path, data: bytes, *, inside_elf: bool, mode: str, seeds=SEEDS
) -> dict[int, dict]:
    """Every seed's mutated artifact, each in its own child process (8 at a time)."""
    inputs = tmp_path / "x.npy", tmp_path / "y.npy"
    np.save(inputs[0], X)
    np.save(inputs[1], Y)
    vmfb = executable_of(data)
    paths = {}
    for seed in seeds:
        paths[seed] = tmp_path / f"seed{seed}.aotx"
        paths[seed].write_bytes(repack(data, executable=mutated(vmfb, seed, inside_elf=inside_elf)))
    with ThreadPoolExecutor(8) as pool:
        found = pool.map(lambda seed: _run_child(paths[seed], inputs, mode), seeds)
        return {seed: {**seen, "path": str(paths[seed])} for seed, seen in zip(seeds, found)}


@pytest.fixture(scope="module")
def vm_mutations(iree_artifact, tmp_path_factory):
    return _run_seeds(
        tmp_path_factory.mktemp("vm"), iree_artifact[0], inside_elf=False, mode="default"
    )


@pytest.fixture(scope="module")
def elf_mutations_portable_only(iree_artifact, tmp_path_factory):
    return _run_seeds(
        tmp_path_factory.mktemp("elf"), iree_artifact[0], inside_elf=True, mode="portable"
    )


@needs_iree
@pytest.mark.parametrize("seed", SEEDS)
def test_a_changed_vmfb_is_refused_or_runs_and_never_kills(seed, vm_mutations, iree_artifact):
    """Outside the ELF: IREE's verifier and runtime refuse the change (ArtifactError under
    recompile=False, the warning and the portable module by default), or the vmfb loads
    and computes the same values, or its call fails with IREE's error; no death."""
    seen = vm_mutations[seed]
    assert "died" not in seen, seen
    refused = f"aotkit.load: {seen['path']}: its executable does not load ("
    if seen["strict"] == "loaded":
        assert seen["origin"] == "artifact" and seen["warnings"] == [], seen
    else:
        assert seen["strict"].startswith(refused), seen
        assert seen["strict"].endswith(
            "); load it with recompile=True or 'auto' to compile its portable StableHLO"
        ), seen
        assert "cannot run" not in seen["strict"], seen  # the file is at fault, not the host
        assert seen["origin"] == "recompiled", seen
        (warning,) = seen["warnings"]
        assert warning.startswith(f"ArtifactWarning: {refused}"), seen
        assert warning.endswith("); compiling its portable StableHLO instead"), seen
    if "call" in seen:
        assert seen["origin"] == "artifact", seen
        assert seen["call"].startswith("backend 'iree': running module 'model' failed: "), seen
    else:
        np.testing.assert_array_equal(np.array(seen["out"], np.float32), iree_artifact[1])


@needs_iree
@pytest.mark.parametrize("seed", SEEDS)
def test_portable_only_runs_a_vmfb_with_changed_machine_code(
    seed, elf_mutations_portable_only, iree_artifact
):
    """Inside the ELF nothing is checked (a vmfb is trusted code); portable_only never
    loads it, so none of these can crash the process or change a value."""
    seen = elf_mutations_portable_only[seed]
    assert "died" not in seen, seen
    assert seen["origin"] == "recompiled", seen
    np.testing.assert_array_equal(np.array(seen["out"], np.float32), iree_artifact[1])


# --- the registers IREE's verifier does not check ----------------------------------------


def _iree():
    return backends.get("iree")


@needs_iree
def test_a_vmfb_naming_registers_beyond_its_counts_is_refused_and_never_runs(
    iree_artifact, tmp_path
):
    """The deaths the seeds above used to find (about 1 in 100 changes outside the ELF):
    bytecode naming i32 register 8714 of a function that has 22 verifies, then writes past
    the register file. The first such change among the seeds (which one depends on the
    vmfb, so on this machine's CPU) is refused before IREE loads it, in a child process
    that must not die."""
    data, expected = iree_artifact
    vmfb = executable_of(data)
    assert _iree()._register_problem(vmfb) is None
    specs = [aotkit.spec("f32[4,8]"), aotkit.spec("f32[8,3]")], [aotkit.spec("f32[4,3]")]
    refused = "IreeBackend.load_executable: the vmfb's VM bytecode cannot be run safely: "
    for seed in range(2000):
        changed = mutated(vmfb, seed, inside_elf=False)
        try:  # IREE's verifier and aotkit's check; nothing here runs the bytecode
            _iree().load_executable(changed, *specs)
        except ValueError as e:
            if str(e).startswith(refused + "function "):
                problem = (
                    str(e)
                    .removeprefix(refused)
                    .removesuffix("; pass the bytes of IreeExecutable.vmfb")
                )
                break
    else:
        pytest.fail("no change among 2,000 seeds passes IREE's verifier with a bad register")
    assert re.fullmatch(
        r"function \d+ \(@\S+\) names register [ir]\d+(:\d+)?, but it declares \d+ "
        r"(i32|ref) registers, which IREE's verifier does not check",
        problem,
    ), problem
    path = tmp_path / f"seed{seed}.aotx"
    path.write_bytes(repack(data, executable=changed))
    inputs = tmp_path / "x.npy", tmp_path / "y.npy"
    np.save(inputs[0], X)
    np.save(inputs[1], Y)
    seen = _run_child(path, inputs, "default")
    assert "died" not in seen, seen
    assert seen["strict"] == (
        f"aotkit.load: {path}: its executable does not load (backend 'iree' could not load "
        f"the vmfb of 'model': IreeBackend.load_executable: the vmfb's VM bytecode cannot be "
        f"run safely: {problem}; pass the bytes of IreeExecutable.vmfb); load it with "
        "recompile=True or 'auto' to compile its portable StableHLO"
    ), seen
    assert seen["origin"] == "recompiled"
    np.testing.assert_array_equal(np.array(seen["out"], np.float32), expected)


_DUMP = """\
  # | Offset   |   Length | Blocks | i32 # | ref # | Requirements | Aliases
----+----------+----------+--------+-------+-------+--------------+---------
  0 | 00000000 |      376 |      1 |     4 |     2 | 00000008     | main

vm.func @main(%r0: !vm.ref<?>) -> (!vm.ref<?>) {
^bb0:
  %i0 = vm.const.i32 2  // 0x00000002
  %i2:3 = vm.const.i64 1
  vm.fail %i0, "text that names %i99 and \"%r70\" is not code"
  vm.return %R1
}
"""


def test_the_register_check_reads_every_operand_and_no_string():
    check = iree_backend._registers_beyond_counts
    assert check(_DUMP) is None
    assert check(_DUMP.replace("%i2:3", "%i3:4")) == (
        "function 0 (@main) names register i3:4, but it declares 4 i32 registers, which "
        "IREE's verifier does not check"
    )
    assert check(_DUMP.replace("%R1", "%R2")) == (
        "function 0 (@main) names register r2, but it declares 2 ref registers, which "
        "IREE's verifier does not check"
    )
    assert check(_DUMP.replace("vm.func @main", "vm.func @main(%i0: i32)\n}\nvm.func @g")) == (
        "IREE's disassembler lists 1 function descriptors and 2 function bodies; aotkit "
        "cannot check their registers"
    )


@needs_iree
@pytest.mark.parametrize(
    "script, message",
    [
        ("exit 3", r"IREE's disassembler failed on it \(exit status 3: no\)"),
        ("kill -SEGV $$", r"IREE's disassembler failed on it \(SIGSEGV: no\)"),
        ("sleep 30", r"IREE's disassembler did not finish in 0\.5 s"),
    ],
)
def test_a_disassembler_that_fails_refuses_the_vmfb(
    iree_artifact, tmp_path, monkeypatch, script, message
):
    tool = tmp_path / "iree-dump-module"
    tool.write_text(f"#!/bin/sh\necho no >&2\n{script}\n")
    tool.chmod(0o755)
    monkeypatch.setattr(_iree(), "_dumper", str(tool))
    monkeypatch.setattr(iree_backend, "_DUMP_TIMEOUT_S", 0.5)
    assert re.fullmatch(message, _iree()._register_problem(executable_of(iree_artifact[0])))


@needs_iree
def test_without_the_disassembler_a_vmfb_is_not_run(iree_artifact, tmp_path, monkeypatch):
    vmfb = executable_of(iree_artifact[0])
    monkeypatch.setattr(_iree(), "_dumper", str(tmp_path / "missing"))
    assert re.fullmatch(
        rf"IREE's disassembler \({re.escape(str(tmp_path))}/missing\) did not start: .+",
        _iree()._register_problem(vmfb),
    )
    monkeypatch.setattr(_iree(), "_dumper", None)
    with pytest.raises(ValueError) as e:
        _iree().load_executable(
            vmfb, [aotkit.spec("f32[4,8]"), aotkit.spec("f32[8,3]")], [aotkit.spec("f32[4,3]")]
        )
    assert str(e.value) == (
        "IreeBackend.load_executable: the vmfb's VM bytecode cannot be run safely: "
        "iree-base-runtime's iree-dump-module, which aotkit needs to check a vmfb's "
        f"registers before running it, is missing; reinstall it with {iree_backend.INSTALL_HINT}"
        "; pass the bytes of IreeExecutable.vmfb"
    )


def _outcome(seen: dict, expected: np.ndarray) -> str:
    if "died" in seen:
        return f"died: {seen['died']}"
    how = "refused, recompiled" if seen["origin"] == "recompiled" else "loaded as it is"
    if "call" in seen:
        return f"{how}, call failed"
    same = np.array_equal(np.array(seen["out"], np.float32), expected)
    return how if same else f"{how}, WRONG values"


def main(argv=None) -> int:
    """`python -m tests.reliability.test_trust_native --seeds 400`: the measurement this
    module's docstring quotes, over more seeds, as a table (needs IREE)."""
    import argparse
    import collections
    import tempfile
    from pathlib import Path

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--seeds", type=int, default=400, help="mutations per region")
    args = parser.parse_args(argv)
    compiled = aotkit.jit(model, backend="iree").lower(X, Y).compile()
    data, expected = compiled.serialize(), np.asarray(compiled(X, Y))
    for inside_elf in (False, True):
        with tempfile.TemporaryDirectory() as tmp:
            found = _run_seeds(
                Path(tmp), data, inside_elf=inside_elf, mode="default", seeds=range(args.seeds)
            )
        counts = collections.Counter(_outcome(seen, expected) for seen in found.values())
        print(f"{args.seeds} vmfbs changed {'inside' if inside_elf else 'outside'} their ELF:")
        for what, n in counts.most_common():
            print(f"  {n:5}  {what}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
