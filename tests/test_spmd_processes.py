"""A sharded program across two processes on localhost (4 CPU devices each), through
aotkit.distributed (JAX's distributed runtime, Gloo collectives), equal to one device."""

from __future__ import annotations

import functools
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import aotkit
import aotkit.numpy as anp
from tests import spmd_checks

ROOT = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def test_data_parallel_step_on_two_processes_equals_one_device(tmp_path):
    port = _free_port()
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.spmd_process", str(i), str(port), str(tmp_path)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    outputs = []
    try:
        for proc in procs:
            outputs.append(proc.communicate(timeout=600))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    for i, (proc, (_, err)) in enumerate(zip(procs, outputs, strict=True)):
        if proc.returncode != 0:
            pytest.fail(f"process {i} failed (exit {proc.returncode}):\n{err[-4000:]}")
    params, x, y = spmd_checks.mlp_data()
    step = aotkit.jit(functools.partial(spmd_checks.mlp_step, anp))
    for _ in range(3):
        params, loss = step(params, x, y)
    want = [np.asarray(a) for a in (*params, loss)]
    for i in range(2):
        got = np.load(tmp_path / f"process-{i}.npz")
        # Process i placed the 16 rows of the batch on its own 4 devices, 4 rows each.
        assert list(got["rows"]) == [16 * i + 4 * k for k in range(4)]
        for j, w in enumerate(want):
            np.testing.assert_allclose(got[f"leaf{j}"], w, rtol=1e-4, atol=1e-6)
