"""`aotkit run --timeout`: the command run again in a worker process, killed at the deadline."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from aotkit.cli.report import UserError

# Set in the worker process `aotkit run --timeout` starts, which then runs the command itself.
WORKER_ENV = "AOTKIT_RUN_WORKER"


def run_in_worker(args) -> int:
    """`aotkit run --timeout S`: the same command in a worker process, killed at the deadline.

    A computation cannot be interrupted inside the process that runs it (jaxlib's call runs
    to its end, and a Ctrl-C during it is lost), so the bound is a process: its own session,
    so that the terminal's Ctrl-C reaches only this process, which then kills it.
    """
    env = dict(os.environ, **{WORKER_ENV: "1"})
    argv = [sys.executable, "-m", "aotkit", *args.argv]
    sys.stdout.flush()
    sys.stderr.flush()
    worker = subprocess.Popen(argv, env=env, start_new_session=True)
    try:
        returncode = worker.wait(timeout=args.timeout)
    except subprocess.TimeoutExpired:
        _kill_group(worker)
        raise UserError(
            f"--timeout: {args.target} did not finish within {args.timeout:g} s (load, compile "
            "and run); its worker process was killed. Raise --timeout, or check the module for "
            "a loop that does not end"
        ) from None
    except BaseException:
        _kill_group(worker)
        raise
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        raise UserError(
            f"the worker process running {args.target} died of {name}; nothing in this "
            "process was lost. Rerun with --traceback, and report it with the file"
        )
    return returncode


def _kill_group(worker: subprocess.Popen) -> None:
    """Kills the worker and what it started (the module-parsing sandbox), then reaps it."""
    try:
        os.killpg(worker.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    worker.wait()
