"""Sharded programs on 8 CPU devices (tests/spmd_checks.py), each check reported as a test.

The checks run together in one child process started with
`--xla_force_host_platform_device_count=8`: this test session's own process already has a
one-device CPU client, which cannot grow.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests import spmd_checks

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def results():
    env = dict(os.environ)
    env["XLA_FLAGS"] = (
        env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
    ).strip()
    proc = subprocess.run(
        [sys.executable, "-m", "tests.spmd_child", *spmd_checks.CHECKS],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        pytest.fail(f"the 8-device child failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
    return json.loads(lines[-1])


@pytest.mark.parametrize("name", spmd_checks.CHECKS)
def test_on_8_devices(results, name):
    outcome = results[name]
    assert outcome == "ok", f"{name} failed in the 8-device child:\n{outcome}"
