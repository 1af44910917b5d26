"""The accelerator lane's machinery (tests/lane.py): which process may use the accelerator,
what its children inherit, the tolerances, and the skips where the backend does not start."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from tests import lane
from tests.helpers import TOLERANCES, assert_matches

ROOT = Path(__file__).resolve().parents[1]

SETUP = textwrap.dedent(
    """
    import json, os, sys
    from tests import lane
    lane.configure(children_only=sys.argv[1] == "children")
    import jax
    print(json.dumps({
        "env": [os.environ.get("JAX_PLATFORMS"), os.environ.get("AOTKIT_BACKEND")],
        "jax": jax.config.jax_platforms,
        "device": str(jax.config.jax_default_device),
        "child": [lane.chip_env().get("JAX_PLATFORMS"), lane.chip_env().get("AOTKIT_BACKEND")],
    }))
    """
)


def setup_in_child(mode: str, **env) -> dict:
    base = {k: v for k, v in os.environ.items() if k not in ("JAX_PLATFORMS", "AOTKIT_BACKEND")}
    base.pop(lane.ENV, None)
    base.pop(lane.USER_ENV, None)
    proc = subprocess.run(
        [sys.executable, "-c", SETUP, mode],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**base, **env},
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_without_the_lane_the_suite_and_its_children_stay_on_the_cpu():
    got = setup_in_child("all")
    assert got["env"] == ["cpu", None] and got["jax"] == "cpu"


def test_a_users_jax_platforms_is_kept_without_the_lane_and_children_stay_off_its_chip():
    got = setup_in_child("all", JAX_PLATFORMS="tpu,cpu")
    assert got["jax"] == "tpu,cpu"  # this process holds the accelerator
    assert got["env"] == ["cpu", None]  # the processes tests start do not


def test_a_users_cpu_only_platforms_are_kept_without_the_lane():
    assert setup_in_child("all", JAX_PLATFORMS="cpu")["env"] == ["cpu", None]


def test_with_the_lane_this_process_may_use_the_accelerator_and_children_may_not():
    got = setup_in_child("all", AOTKIT_TEST_BACKEND="tpu")
    # jax read JAX_PLATFORMS before it was set for the children; defaults stay cpu.
    assert got["jax"] is None and got["device"] == "cpu"  # JAX's oracles stay on the CPU
    assert got["env"] == ["cpu", "cpu"]
    assert got["child"] == [None, None]  # a child that tests the chip gets the user's settings


def test_the_children_run_stays_off_the_accelerator_and_lets_its_children_on():
    got = setup_in_child("children", AOTKIT_TEST_BACKEND="tpu", JAX_PLATFORMS="tpu,cpu")
    assert got["jax"] == "cpu" and got["env"] == ["cpu", "cpu"]
    assert got["child"] == ["tpu,cpu", None]


def test_a_pytest_xdist_worker_gets_the_users_settings_its_controller_kept():
    # A worker inherits its controller's JAX_PLATFORMS=cpu; the user's value came along in
    # USER_ENV, so the worker may use the accelerator as the controller would have.
    user = json.dumps({"JAX_PLATFORMS": "tpu,cpu", "AOTKIT_BACKEND": None})
    env = {"AOTKIT_TEST_BACKEND": "tpu", "JAX_PLATFORMS": "cpu", "AOTKIT_BACKEND": "cpu"}
    got = setup_in_child("all", **env, AOTKIT_TEST_USER_ENV=user)
    assert got["jax"] == "tpu,cpu" and got["env"] == ["cpu", "cpu"]
    assert got["child"] == ["tpu,cpu", None]


def test_naming_a_backend_every_test_has_runs_no_lane():
    got = setup_in_child("all", AOTKIT_TEST_BACKEND="interpreter")
    assert got["env"] == ["cpu", None] and got["jax"] == "cpu"


def test_the_lanes_tolerances_are_the_looser_of_the_tests_and_the_platforms():
    from aotkit import crosscheck

    f32 = np.dtype(np.float32)
    assert lane.tolerances("cpu", TOLERANCES) is TOLERANCES
    loosened = lane.tolerances("tpu", TOLERANCES)
    assert loosened[f32] == crosscheck.PLATFORM_TOLERANCES["tpu"][f32]
    assert loosened[np.dtype(np.float64)] == TOLERANCES[np.dtype(np.float64)]
    got, want = np.float32([1.0 + 3e-4]), np.float32([1.0])
    assert_matches(got, want, backend="tpu")
    with pytest.raises(AssertionError, match="Not equal to tolerance"):
        assert_matches(got, want, backend="cpu")


def pytest_in_child(*args) -> str:
    """The output of `pytest ARGS` in a child with AOTKIT_TEST_BACKEND=nosuch (exit 0)."""
    env = {k: v for k, v in os.environ.items() if k != "JAX_PLATFORMS"}
    env[lane.ENV] = "nosuch"
    argv = [sys.executable, "-m", "pytest", "-n", "0", "-p", "no:cacheprovider", "-rs", *args]
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, env=env, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def test_a_lane_backend_that_does_not_start_skips_its_cases_saying_why():
    out = pytest_in_child(
        "-m",
        lane.MARK,
        "tests/test_lane.py",
        "tests/tracing/test_sorting.py::test_lexsort_matches_numpy",
    )
    assert (
        "AOTKIT_TEST_BACKEND=nosuch: the backend does not start here: backends.get: unknown "
        "backend 'nosuch'"
    ) in out
    assert " passed" not in out and " skipped" in out


def test_cases_whose_children_use_the_lane_skip_where_this_process_holds_it():
    marks = f"{lane.CHILDREN_MARK} or not {lane.CHILDREN_MARK}"
    out = pytest_in_child("-m", marks, "tests/test_lane.py", "-k", "fresh_process or another")
    assert (
        "this pytest process holds nosuch, which one process at a time can use; run these "
        "cases in a pytest of their own: -m lane_children"
    ) in out


def test_every_lane_folder_is_a_folder_of_tests():
    # The lane marks every case of these folders by name: a folder renamed without its
    # entry here would leave the lane silently without its cases.
    from tests import conftest

    here = Path(__file__).resolve().parent
    missing = [f for f in conftest._LANE_FOLDERS if not (here / f / "__init__.py").is_file()]
    assert not missing, f"tests/conftest.py's _LANE_FOLDERS names no folder of tests: {missing}"


def lane_ids(*args, **env) -> tuple[int, list[str], subprocess.CompletedProcess]:
    base = {k: v for k, v in os.environ.items() if k != lane.SHARD_ENV}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-o", "addopts=", "-n", "0"]
        + ["--collect-only", "-q", "-m", "lane", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**base, lane.ENV: "lane_under_test", **env},
        timeout=600,
    )
    return proc.returncode, [line for line in proc.stdout.splitlines() if "::" in line], proc


def test_the_shards_of_the_lane_are_consecutive_parts_that_cover_it():
    _, whole, _ = lane_ids("tests/test_lane.py")
    parts = [lane_ids("tests/test_lane.py", AOTKIT_TEST_SHARD=f"{k}/3")[1] for k in range(3)]
    assert len(whole) > 3
    assert parts[0] + parts[1] + parts[2] == whole
    assert all(len(whole) // 3 <= len(p) <= len(whole) // 3 + 1 for p in parts)


@pytest.mark.parametrize("text", ["3/3", "a/b", "1", "-1/2"])
def test_a_shard_that_is_not_k_of_n_is_a_usage_error(text):
    rc, _, proc = lane_ids("tests/test_lane.py", AOTKIT_TEST_SHARD=text)
    assert rc == 4
    assert f"AOTKIT_TEST_SHARD={text!r}: expected K/N with 0 <= K < N" in proc.stdout + proc.stderr


def test_an_emulated_float64_skips_the_exact_cases_saying_why(monkeypatch):
    monkeypatch.setattr(lane, "ON", True)
    monkeypatch.setattr(lane, "NAME", "cpu")
    monkeypatch.setattr(lane, "unavailable", lambda: None)
    assert not lane.float64_emulated("cpu")  # the CPU's float64 is IEEE's
    monkeypatch.setattr(lane, "FLOAT64_EMULATED", ("cpu",))
    assert lane.float64_emulated("cpu") and not lane.float64_emulated("interpreter")
    with pytest.raises(pytest.skip.Exception, match=r"^cpu's float64 is emulated \(pairs of "):
        lane.skip_where_float64_is_emulated("cpu", "what differs")
    lane.skip_where_float64_is_emulated("interpreter", "not the lane's: no skip")


def test_emulated_float64_derivatives_skip_unless_asked_for(monkeypatch):
    monkeypatch.setattr(lane, "ON", True)
    monkeypatch.setattr(lane, "NAME", "cpu")
    monkeypatch.setattr(lane, "unavailable", lambda: None)
    monkeypatch.delenv(lane.FLOAT64_DERIVATIVES, raising=False)
    lane.skip_emulated_float64_derivatives("cpu", np.float64)  # IEEE float64: no skip
    monkeypatch.setattr(lane, "FLOAT64_EMULATED", ("cpu",))
    for dtype in (np.float64, np.complex128):
        with pytest.raises(
            pytest.skip.Exception,
            match=r"^cpu's float64 is emulated, and XLA compiles these float64 derivative "
            r"programs for minutes; the rules are the float32 cases' and run in float64 on the "
            r"CPU \(AOTKIT_TEST_LANE_FLOAT64=1 runs them here\)$",
        ):
            lane.skip_emulated_float64_derivatives("cpu", dtype)
    lane.skip_emulated_float64_derivatives("cpu", np.float32)
    lane.skip_emulated_float64_derivatives("interpreter", np.float64)  # not the lane's
    monkeypatch.setenv(lane.FLOAT64_DERIVATIVES, "1")
    lane.skip_emulated_float64_derivatives("cpu", np.float64)
