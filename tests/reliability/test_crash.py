"""Crashes: nothing aotkit is given kills the process (issue 26, class "crash").

Readers: a file is checked before it is read (a regular file, at most 4 GiB, no longer than an
artifact's header says), so /dev/zero, a huge file or an artifact with gigabytes after it is
refused at once instead of filling memory. Each case runs in a child process whose address
space is capped at 2 GiB: a reader that reads what it should refuse fails the test with a
MemoryError instead of taking the machine's memory. Big files are sparse (no disk used).
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import aotkit
from aotkit import _files
from aotkit.frontends.files import FORMATS

pytest.importorskip("resource")

TIMEOUT_S = 120
MEMORY_CAP = 2 << 30
BIG = 5 << 30  # over the 4 GiB aotkit reads
REWRITE = "the file is not one aotkit wrote, or was changed: write it again"
TOO_BIG = f"is {BIG} bytes, more than aotkit reads (4 GiB); check that it is the file you meant"


# Run first in each child: the cap must hold before aotkit is imported, and a preexec_fn
# would fork this (threaded, JAX-importing) process.
CAP = f"import resource; resource.setrlimit(resource.RLIMIT_AS, ({MEMORY_CAP}, {MEMORY_CAP}))\n"


def _run(script: str, *argv, stdin=subprocess.DEVNULL) -> subprocess.CompletedProcess:
    """`script` with `argv` in a memory-capped child process, which must not end by a signal."""
    proc = subprocess.run(
        [sys.executable, "-c", CAP + script, *map(str, argv)],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        stdin=stdin,
    )
    assert proc.returncode >= 0, f"killed by signal {-proc.returncode}: {proc.stderr}"
    return proc


def _cli(*argv, stdin=subprocess.DEVNULL) -> subprocess.CompletedProcess:
    return _run("import runpy; runpy.run_module('aotkit', run_name='__main__')", *argv, stdin=stdin)


def _loads(path) -> list[str]:
    """What `aotkit.load` and `aotkit.load_module` raise for `path`, in a child process."""
    script = textwrap.dedent(
        f"""
        import aotkit
        for load in (aotkit.load, aotkit.load_module):
            try:
                load({str(path)!r})
            except ValueError as e:
                print(f"{{type(e).__name__}}: {{e}}")
        """
    )
    proc = _run(script)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


def _sparse(path, size: int) -> str:
    with open(path, "ab") as f:
        f.truncate(size)
    return str(path)


@pytest.fixture(scope="module")
def artifact() -> bytes:
    return aotkit.jit(lambda x: x + 1.0).lower(aotkit.spec("f32[2]")).compile().serialize()


# --- /dev/zero and other devices ---------------------------------------------------------


@pytest.mark.parametrize("command", ["inspect", "run", "opt", "compile"])
def test_the_cli_refuses_dev_zero_at_once(command):
    proc = _cli(command, "/dev/zero")
    assert proc.returncode == 1
    assert proc.stderr == (
        f"aotkit {command}: error: load_module: /dev/zero is a character device, not a regular "
        f"file; pass a file holding {FORMATS}\n"
    )


def test_load_and_load_module_refuse_a_link_to_dev_zero(tmp_path):
    link = tmp_path / "model.aotx"
    link.symlink_to("/dev/zero")
    assert _loads(link) == [
        f"ArtifactError: aotkit.load: {link} is a character device, not a regular file; pass "
        "the path of an artifact file",
        f"ValueError: load_module: {link} is a character device, not a regular file; pass a "
        f"file holding {FORMATS}",
    ]


def test_an_inputs_file_that_is_dev_zero_is_refused(tmp_path):
    user = tmp_path / "user.py"
    user.write_text("def double(x):\n    return x * 2\n")
    proc = _cli("run", f"{user}:double", "--inputs", "/dev/zero")
    assert proc.returncode == 1
    assert proc.stderr == (
        "aotkit run: error: --inputs: '/dev/zero' is a character device, not a regular file; "
        "save inputs with numpy.save or numpy.savez\n"
    )


# --- size checked before reading ---------------------------------------------------------


def test_a_file_over_the_limit_is_refused_before_it_is_read(tmp_path):
    big = _sparse(tmp_path / "big.mlir", BIG)
    assert _loads(big) == [
        f"ArtifactError: aotkit.load: {big} {TOO_BIG}",
        f"ValueError: load_module: {big} {TOO_BIG}",
    ]
    proc = _cli("inspect", big)
    assert proc.returncode == 1
    assert proc.stderr == f"aotkit inspect: error: load_module: {big} {TOO_BIG}\n"


def test_stdin_over_the_limit_is_refused_before_it_is_read(tmp_path):
    big = _sparse(tmp_path / "big.mlir", BIG)
    with open(big, "rb") as stdin:
        proc = _cli("opt", "-", stdin=stdin)
    assert proc.returncode == 1
    assert proc.stderr == f"aotkit opt: error: stdin {TOO_BIG}\n"


@pytest.mark.parametrize("command", ["inspect", "run", "opt"])
def test_an_artifact_with_gigabytes_after_it_is_refused_from_its_header(
    tmp_path, artifact, command
):
    path = tmp_path / "trailing.aotx"
    path.write_bytes(artifact)
    _sparse(path, 3 << 30)
    extra = (3 << 30) - len(artifact)
    where = "load_module" if command == "opt" else "aotkit.load"
    proc = _cli(command, path)
    assert proc.returncode == 1
    assert proc.stderr == (
        f"aotkit {command}: error: {where}: {path} has {extra} bytes after its last section "
        f"(it should end at byte {len(artifact)}); {REWRITE}\n"
    )


def test_load_refuses_trailing_bytes_from_the_header(tmp_path, artifact):
    path = tmp_path / "trailing.aotx"
    path.write_bytes(artifact)
    _sparse(path, 3 << 30)
    extra = (3 << 30) - len(artifact)
    assert _loads(path) == [
        f"ArtifactError: aotkit.load: {path} has {extra} bytes after its last section (it "
        f"should end at byte {len(artifact)}); {REWRITE}",
        f"ArtifactError: load_module: {path} has {extra} bytes after its last section (it "
        f"should end at byte {len(artifact)}); {REWRITE}",
    ]


def test_a_few_trailing_bytes_read_as_before(tmp_path, artifact):
    path = tmp_path / "trailing.aotx"
    path.write_bytes(artifact + b"xyz")
    with pytest.raises(aotkit.ArtifactError) as e:
        aotkit.load(str(path))
    assert str(e.value) == (
        f"aotkit.load: {path} has 3 bytes after its last section (it should end at byte "
        f"{len(artifact)}); {REWRITE}"
    )


# --- bounded reads -----------------------------------------------------------------------


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="needs /proc")
def test_a_file_larger_than_its_size_says_is_read_only_to_the_limit():
    # /proc files say they are 0 bytes long; one that grows while read looks the same.
    with pytest.raises(ValueError) as e:
        _files.read_regular("/proc/self/status", where="status", fix="", limit=10)
    assert str(e.value) == (
        "status holds more than aotkit reads (10 bytes); check that it is the file you meant"
    )
    assert _files.read_regular("/proc/self/status", where="status", fix="").startswith(b"Name:")


def test_an_endless_stream_is_read_only_to_the_limit():
    with pytest.raises(ValueError) as e:
        _files.read_stream(io.BytesIO(b"x" * 100), where="stdin", limit=10)
    assert str(e.value) == (
        "stdin holds more than aotkit reads (10 bytes); check that it is the file you meant"
    )
    assert _files.read_stream(io.BytesIO(b"x" * 10), where="stdin", limit=10) == b"x" * 10


# --- .npy headers that declare more than the file holds ----------------------------------


def _npy_declaring(shape: tuple) -> bytes:
    """A .npy file of 3 float64 values whose header declares `shape`."""
    buffer = io.BytesIO()
    np.save(buffer, np.zeros(3))
    data = buffer.getvalue()
    old = b"'shape': (3,), "
    new = f"'shape': {shape}, ".encode()
    header_end = data.index(b"\n") + 1
    padding = data[: header_end - 1].rstrip(b" ")
    assert len(padding) - len(old) + len(new) < header_end - 1
    header = padding.replace(old, new).ljust(header_end - 1) + b"\n"
    return header + data[header_end:]


def test_an_npy_file_declaring_more_data_than_it_holds_is_refused(tmp_path):
    user = tmp_path / "user.py"
    user.write_text("def double(x):\n    return x * 2\n")
    npy = tmp_path / "big.npy"
    npy.write_bytes(_npy_declaring((10**10,)))
    npz = tmp_path / "big.npz"
    npz.write_bytes(_npz_of(npy.read_bytes()))
    declared = "declares a float64 array of shape (10000000000,) (80000000000 bytes) but holds 24"
    fix = (
        " bytes of data; the file is truncated or was not written by numpy.save: save inputs "
        "with numpy.save or numpy.savez\n"
    )
    proc = _cli("run", f"{user}:double", "--inputs", npy)
    assert proc.returncode == 1
    assert proc.stderr == f"aotkit run: error: --inputs: {str(npy)!r} {declared}{fix}"
    proc = _cli("run", f"{user}:double", "--inputs", npz)
    assert proc.returncode == 1
    assert proc.stderr == f"aotkit run: error: --inputs: {str(npz)!r}['x'] {declared}{fix}"


def _npz_of(npy: bytes) -> bytes:
    import zipfile

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("x.npy", npy)
    return buffer.getvalue()


def test_the_limit_is_stated_in_bytes_and_units():
    assert [_files.size_text(n) for n in (4 << 30, 16 << 20, 3 << 10, 1000)] == [
        "4 GiB",
        "16 MiB",
        "3 KiB",
        "1000 bytes",
    ]


# --- a donated sharded array used again --------------------------------------------------------

DONATED_SHARDED = """
import numpy as np, jax, aotkit
from jax.sharding import NamedSharding, PartitionSpec as P
mesh = jax.make_mesh((2,), ("data",))
sharding = NamedSharding(mesh, P("data"))
{make}
a = jax.device_put(np.zeros(4, np.float32), sharding)
print(np.asarray(c({arg})).tolist())
try:
    c({arg})
except ValueError as e:
    print(e)
"""
DONATING = {
    "compiled": "c = aotkit.jit(lambda x: x + 1, in_shardings=sharding, donate_argnums=0)"
    ".lower(aotkit.spec('f32[4]')).compile()",
    "jitted": "c = aotkit.jit(lambda x: x + 1, in_shardings=sharding, donate_argnums=0)",
    "pytree": "c = aotkit.jit(lambda t: t['x'] + 1, in_shardings=({'x': sharding},), "
    "donate_argnums=0)",
}


@pytest.mark.parametrize("kind", sorted(DONATING))
def test_reusing_a_donated_sharded_array_is_an_error_not_a_segfault(kind):
    # jaxlib's sharded C++ dispatch ends the process on a donated buffer (jax.jit's too);
    # a donating sharded executable takes the checked call, which refuses it.
    arg = "{'x': a}" if kind == "pytree" else "a"
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2")
    done = subprocess.run(
        [sys.executable, "-c", DONATED_SHARDED.format(make=DONATING[kind], arg=arg)],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        env=env,
    )
    assert done.returncode == 0, f"rc {done.returncode}: {done.stderr[-2000:]}"
    first, error = done.stdout.splitlines()
    assert first == "[1.0, 1.0, 1.0, 1.0]"
    leaf = "t['x']" if kind == "pytree" else "x"
    assert error == (
        f"Compiled 'lambda': argument {leaf} was deleted or donated to an earlier call; pass a "
        "live array"
    )
