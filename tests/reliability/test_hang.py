"""Hangs: nothing aotkit is given makes it wait forever (issue 26, class "hang").

A FIFO has no writer to wait for: every reader of a path (`aotkit inspect | run | opt |
compile`, `aotkit.load`, `aotkit.load_module`, `--inputs`) refuses it at once, saying what it
is, and `-o FIFO` writes into it as a shell redirection would. Each case runs in a child
process with a timeout: a regression is a failed test, not a stalled test run.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap
import threading

import pytest

from aotkit.frontends.files import FORMATS

pytestmark = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")

# A refusal takes well under a second after the imports; a blocked reader takes forever.
TIMEOUT_S = 120

FUNCTION = """\
def double(x):
    return x * 2
"""


def _run(argv: list[str], **kwargs) -> subprocess.CompletedProcess:
    """`argv` in a child process, which must end within the timeout and not by a signal."""
    proc = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        stdin=subprocess.DEVNULL,
        **kwargs,
    )
    assert proc.returncode >= 0, f"killed by signal {-proc.returncode}: {proc.stderr}"
    return proc


def _cli(*argv) -> subprocess.CompletedProcess:
    return _run([sys.executable, "-m", "aotkit", *map(str, argv)])


@pytest.fixture
def fifo(tmp_path) -> str:
    path = tmp_path / "pipe"
    os.mkfifo(path)
    return str(path)


@pytest.fixture
def user(tmp_path) -> str:
    path = tmp_path / "user.py"
    path.write_text(FUNCTION)
    return str(path)


@pytest.mark.parametrize("command", ["inspect", "run", "opt", "compile"])
def test_the_cli_refuses_a_fifo_target_at_once(fifo, command):
    proc = _cli(command, fifo)
    assert proc.returncode == 1
    assert proc.stderr == (
        f"aotkit {command}: error: load_module: {fifo} is a FIFO (named pipe), not a regular "
        f"file; pass a file holding {FORMATS}\n"
    )


def test_load_and_load_module_refuse_a_fifo_at_once(fifo):
    script = textwrap.dedent(
        f"""
        import aotkit
        for load in (aotkit.load, aotkit.load_module):
            try:
                load({fifo!r})
            except ValueError as e:
                print(f"{{type(e).__name__}}: {{e}}")
        """
    )
    proc = _run([sys.executable, "-c", script])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        f"ArtifactError: aotkit.load: {fifo} is a FIFO (named pipe), not a regular file; pass "
        "the path of an artifact file",
        f"ValueError: load_module: {fifo} is a FIFO (named pipe), not a regular file; pass a "
        f"file holding {FORMATS}",
    ]


def test_an_inputs_fifo_is_refused_at_once(fifo, user):
    proc = _cli("run", f"{user}:double", "--inputs", fifo)
    assert proc.returncode == 1
    assert proc.stderr == (
        f"aotkit run: error: --inputs: {fifo!r} is a FIFO (named pipe), not a regular file; "
        "save inputs with numpy.save or numpy.savez\n"
    )


def test_output_to_a_fifo_is_written_into_it(fifo, user):
    # Checking what `-o` would replace opened the FIFO to read it: blocked, with no writer.
    received = []

    def read():
        with open(fifo, "rb") as f:
            received.append(f.read())

    reader = threading.Thread(target=read)
    reader.start()
    try:
        proc = _cli("lower", f"{user}:double", "--shapes", "f32[3]", "-o", fifo)
    finally:
        if reader.is_alive():  # the child never opened it: let the reader's open return
            with open(fifo, "wb"):
                pass
        reader.join(TIMEOUT_S)
    assert proc.returncode == 0, proc.stderr
    assert received[0].decode().startswith("module @double")
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)  # written into, not replaced by a file


# --- tracing holds its own lowering context, not a process-wide lock --------------------------

TRACE_WAITS_ON_A_LOWERING = """
import threading
import numpy as np
import aotkit

got = {}


def other():
    compiled = aotkit.lower(lambda y: y * 2, aotkit.spec("f32[3]")).compile()
    got["value"] = np.asarray(compiled(np.ones(3, np.float32))).tolist()


def f(x):
    thread = threading.Thread(target=other)
    thread.start()
    thread.join(timeout=60)
    print("other thread finished:", not thread.is_alive(), got.get("value"))
    return x + 1


print(np.asarray(aotkit.jit(f)(np.zeros(3, np.float32))).tolist())
"""


def test_a_traced_function_that_waits_on_a_lowering_thread_does_not_deadlock():
    # It did: the trace held a process-wide lock while the function ran, and the other
    # thread's lowering waited for it. Now the other thread lowers in another context.
    done = _run([sys.executable, "-c", TRACE_WAITS_ON_A_LOWERING])
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines() == [
        "other thread finished: True [2.0, 2.0, 2.0]",
        "[1.0, 1.0, 1.0]",
    ]
