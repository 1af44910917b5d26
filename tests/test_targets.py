"""Targets as backends report them (issue 42): artifacts and cache entries of any backend load
on it, whatever text its platform version is; the default backend is the accelerator JAX
picks; `aotkit backends` gives one line per backend.

The backends here are stand-ins (tests/standin_backends.py): the CPU client reporting a TPU's
three-line platform version, with a tab, text beyond ASCII and an escape sequence besides. The
oracle of every loaded program is the `Compiled` that was saved, and NumPy.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import jaxlib
import numpy as np
import pytest

import aotkit
from aotkit import artifacts, backends, cache
from aotkit.cli import commands
from aotkit.errors import ArtifactError, ArtifactWarning, CacheWarning
from tests.helpers import pythonpath
from tests.standin_backends import ODD_VERSION, StandIn, register

ROOT = Path(__file__).resolve().parents[1]
X = np.arange(4, dtype=np.float32)
OTHER_VERSION = "PJRT C API\nTFRT TPU v6 lite\nBuilt on Jan  2 2027 00:00:00 (456)"


def program(x):
    return x * 2.0 + 1.0


@pytest.fixture
def fresh_registry(monkeypatch):
    """Backends started or registered inside the test are forgotten afterwards."""
    monkeypatch.setattr(backends, "_started", dict(backends._started))


@pytest.fixture
def odd(fresh_registry):
    return register(StandIn("tpu", "tpu", ODD_VERSION))


@pytest.fixture
def saved(odd, tmp_path):
    compiled = aotkit.jit(program).lower(aotkit.spec("f32[4]")).compile(backend="tpu")
    path = tmp_path / "odd.aotx"
    compiled.save(path)
    return compiled, path


# --- artifacts: saved, loaded in every mode, by the CLI too --------------------------------------


def test_the_target_holds_the_platform_version_as_reported(saved):
    _, path = saved
    artifact = artifacts.unpack(path.read_bytes())
    assert artifact.target["platform_version"] == ODD_VERSION
    assert artifact.target["backend"] == "tpu"


@pytest.mark.parametrize(
    ("mode", "origin"),
    [
        ({}, "artifact"),
        ({"recompile": False}, "artifact"),
        ({"recompile": True}, "recompiled"),
        ({"portable_only": True}, "recompiled"),
    ],
    ids=["default", "no-recompile", "recompile", "portable-only"],
)
def test_an_artifact_of_a_multiline_platform_version_loads(saved, mode, origin):
    compiled, path = saved
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "was changed", no recompile warning
        loaded = aotkit.load(path, **mode)
    assert loaded.origin == origin
    out = np.asarray(loaded(X))
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, np.asarray(compiled(X)))
    np.testing.assert_array_equal(out, X * np.float32(2) + np.float32(1))


def test_a_platform_version_mismatch_is_printed_escaped(saved, monkeypatch):
    _, path = saved
    monkeypatch.setitem(backends._started, "tpu", StandIn("tpu", "tpu", OTHER_VERSION))
    expected = (
        f"aotkit.load: {path} was compiled with platform_version {ODD_VERSION!r} (here "
        f"{OTHER_VERSION!r})"
    )
    assert "\n" not in expected and "\x1b" not in expected and "\\x1b[2J" in expected
    with pytest.raises(ArtifactError) as e:
        aotkit.load(path, recompile=False)
    assert str(e.value) == (
        f"{expected}; load it with recompile=True or 'auto' to compile its portable StableHLO here"
    )
    with pytest.warns(ArtifactWarning) as record:
        loaded = aotkit.load(path)
    (warning,) = record
    assert str(warning.message) == (
        f"{expected}; compiling its portable StableHLO for backend 'tpu' (recompile=True does "
        "so without this warning)"
    )
    assert loaded.origin == "recompiled"
    np.testing.assert_array_equal(loaded(X), X * np.float32(2) + np.float32(1))


def test_the_cli_runs_and_inspects_it(saved, tmp_path, run_cli):
    _, path = saved
    np.save(tmp_path / "x.npy", X)
    code, out, err = run_cli("run", path, "--inputs", tmp_path / "x.npy", "-v")
    assert code == 0, err
    assert out == "out: f32[4]\n[1. 3. 5. 7.]\n"
    assert "its executable loaded as it is (no compile)" in err
    code, out, err = run_cli("inspect", path)
    assert code == 0, err
    assert "\x1b" not in out and "\u2028" not in out
    assert json.dumps(ODD_VERSION) in out  # escaped as JSON escapes it
    assert "here: backend 'tpu' matches; its executable loads as it is" in out


# --- the persistent cache in fresh processes -----------------------------------------------------

CACHED = textwrap.dedent(
    """
    import json, warnings
    import numpy as np
    import aotkit
    from tests.standin_backends import ODD_VERSION, StandIn, register

    register(StandIn("tpu", "tpu", ODD_VERSION))
    jitted = aotkit.jit(lambda x: x * 2.0 + 1.0, backend="tpu")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = np.asarray(jitted(np.arange(4, dtype=np.float32)))
    print(json.dumps({
        "out": out.tolist(),
        "dtype": str(out.dtype),
        "hits": jitted.cache_info().persistent_hits,
        "warnings": [f"{w.category.__name__}: {w.message}" for w in caught],
    }))
    """
)


def test_the_cache_hits_an_entry_of_a_multiline_platform_version_in_a_fresh_process(tmp_path):
    folder = tmp_path / "cache"
    env = {**os.environ, cache.ENV: str(folder), "PYTHONPATH": pythonpath(ROOT)}
    runs = []
    for _ in range(2):
        proc = subprocess.run(
            [sys.executable, "-c", CACHED],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env=env,
            timeout=600,
        )
        assert proc.returncode == 0, proc.stderr
        runs.append(json.loads(proc.stdout))
    want = (X * np.float32(2) + np.float32(1)).tolist()
    assert runs[0] == {"out": want, "dtype": "float32", "hits": 0, "warnings": []}
    assert runs[1] == {"out": want, "dtype": "float32", "hits": 1, "warnings": []}
    (entry,) = folder.glob("*.aotx")
    assert artifacts.unpack(entry.read_bytes()).target["platform_version"] == ODD_VERSION


def test_the_cache_hits_it_in_this_process(odd, tmp_path):
    cache.configure(dir=tmp_path / "cache")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", CacheWarning)
            # New function objects each: their in-memory caches are empty.
            first = aotkit.jit(lambda x: x * 2.0 + 1.0, backend="tpu")
            np.testing.assert_array_equal(first(X), X * np.float32(2) + np.float32(1))
            second = aotkit.jit(lambda x: x * 2.0 + 1.0, backend="tpu")
            np.testing.assert_array_equal(second(X), X * np.float32(2) + np.float32(1))
        assert (first.cache_info().persistent_hits, second.cache_info().persistent_hits) == (0, 1)
    finally:
        cache.configure(dir=None)


# --- the default backend: the accelerator JAX picks, else cpu ------------------------------------


@pytest.fixture
def detection(monkeypatch, fresh_registry):
    """JAX's pick made `platform` (no client starts); the default backend settings unset."""
    monkeypatch.delenv(backends.ENV, raising=False)
    monkeypatch.setattr(backends, "_detected", [])
    monkeypatch.setattr(backends, "_plugins_installed", [])
    asked = []

    def pick(platform: str):
        def jax_platform():
            asked.append(platform)
            return platform

        monkeypatch.setattr(backends, "_jax_platform", jax_platform)

    pick("cpu")
    return pick, asked


def test_the_accelerator_jax_picks_is_the_default(detection, run_cli):
    pick, asked = detection
    register(StandIn("tpu", "tpu", ODD_VERSION))
    pick("tpu")
    assert backends.default_name() == ("tpu", "the accelerator JAX picks")
    assert backends.get() is backends.get("tpu")
    compiled = aotkit.jit(program).lower(aotkit.spec("f32[4]")).compile()
    assert compiled.backend.name == "tpu"
    assert repr(compiled).startswith("<Compiled program(") and repr(compiled).endswith(" on tpu>")
    out = np.asarray(aotkit.jit(lambda x: x * 2.0 + 1.0)(X))
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, X * np.float32(2) + np.float32(1))
    assert asked == ["tpu"]  # asked once per process


def test_the_cli_says_which_backend_it_compiled_for_and_why(detection, tmp_path, run_cli):
    pick, _ = detection
    register(StandIn("tpu", "tpu", ODD_VERSION))
    pick("tpu")
    user = tmp_path / "user.py"
    user.write_text("def f(x):\n    return x * 2.0 + 1.0\n")
    code, out, err = run_cli("run", f"{user}:f", "--shapes", "f32[4]", "-v")
    assert code == 0, err
    said = "aotkit: compiled f for backend 'tpu' (the default: the accelerator JAX picks) in "
    assert said in err
    code, out, err = run_cli("run", f"{user}:f", "--shapes", "f32[4]", "-v", "--backend", "cpu")
    assert code == 0, err
    assert "aotkit: compiled f for backend 'cpu' in " in err


@pytest.mark.parametrize("platform", ["cpu", "gpu", "METAL", "tpu"])
def test_cpu_where_aotkit_has_no_backend_for_jax_pick(detection, platform, monkeypatch):
    pick, asked = detection
    # A plugin package is installed (so JAX is asked), but no backend of JAX's pick starts.
    monkeypatch.setattr(backends, "_plugins_installed", [True])
    monkeypatch.setattr(backends._plugin(), "installed", lambda platform: False)
    pick(platform)
    assert backends.default_name() == ("cpu", "no accelerator here")
    assert backends.get().name == "cpu"
    assert asked == [platform]


def test_gpu_is_cuda_where_jax_picks_a_gpu(detection):
    pick, _ = detection
    register(StandIn("cuda", "cuda", "cuda 12.8"))
    pick("gpu")
    assert backends.default_name() == ("cuda", "the accelerator JAX picks")


def test_jax_is_not_asked_where_no_accelerator_can_be(detection, monkeypatch):
    _, asked = detection
    monkeypatch.setattr(backends._plugin(), "installed", lambda platform: False)
    assert backends.default_name() == ("cpu", "no accelerator here")
    assert asked == []


def test_aotkit_backend_and_the_config_override_jax_pick(detection, monkeypatch):
    pick, asked = detection
    register(StandIn("tpu", "tpu", ODD_VERSION))
    pick("tpu")
    monkeypatch.setenv(backends.ENV, "interpreter")
    assert backends.default_name() == ("interpreter", "AOTKIT_BACKEND")
    assert backends.get().name == "interpreter"
    assert aotkit.jit(program).lower(aotkit.spec("f32[4]")).compile().backend.name == (
        "interpreter"
    )
    aotkit.config.update("default_backend", "cpu")
    try:
        assert backends.default_name() == ("cpu", "aotkit.config's default_backend")
        assert backends.get().name == "cpu"
    finally:
        aotkit.config.update("default_backend", None)
    assert backends.default_name() == ("interpreter", "AOTKIT_BACKEND")
    assert asked == []


def test_an_unknown_default_is_an_error_naming_where_it_came_from(detection, monkeypatch):
    monkeypatch.setenv(backends.ENV, "nosuch")
    with pytest.raises(
        ValueError,
        match=r"^backends.get: the default backend 'nosuch' \(from AOTKIT_BACKEND\) is unknown; "
        r"available: cpu, interpreter.*; set AOTKIT_BACKEND to one of them, or unset it for the "
        r"accelerator JAX picks \(else cpu\)$",
    ):
        backends.get()
    monkeypatch.delenv(backends.ENV)
    aotkit.config.update("default_backend", "nosuch")
    try:
        with pytest.raises(
            ValueError,
            match=r"^backends.get: the default backend 'nosuch' \(from aotkit.config's "
            r"default_backend\) is unknown; available: .*; "
            r"aotkit.config.update\('default_backend', ...\) with one of them, or None for the "
            r"accelerator JAX picks \(else cpu\)$",
        ):
            backends.get()
    finally:
        aotkit.config.update("default_backend", None)


@pytest.mark.parametrize("value", [3, "", b"cpu"])
def test_the_config_takes_a_backend_name_or_none(value):
    with pytest.raises(
        TypeError,
        match=r"^aotkit.config.update: default_backend takes a backend name such as 'cpu' or "
        r"'tpu', or None for the accelerator JAX picks \(else cpu\), got "
        + re.escape(repr(value))
        + "$",
    ):
        aotkit.config.update("default_backend", value)
    assert aotkit.config.get("default_backend") is None


DETECT = textwrap.dedent(
    """
    import aotkit.backends
    from aotkit import _compat

    assert not _compat.backends_started()
    print(aotkit.backends._jax_platform())
    """
)


def test_jax_pick_honours_jax_platforms():
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    env.pop(backends.ENV, None)
    proc = subprocess.run(
        [sys.executable, "-c", DETECT], capture_output=True, text=True, env=env, timeout=600
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "cpu\n"


# --- `aotkit backends`: one line per backend -----------------------------------------------------


def test_backends_prints_one_line_per_backend_and_marks_the_default(detection, run_cli):
    pick, _ = detection
    register(StandIn("tpu", "tpu", ODD_VERSION))
    pick("tpu")
    code, out, err = run_cli("backends")
    assert (code, err) == (0, "")
    lines = out.splitlines()
    infos = backends.available()
    assert len(lines) == 1 + len(infos) + 1
    (row,) = [line for line in lines if line[3:].startswith("tpu ")]
    assert row.startswith("*  tpu")
    shown = commands._one_line(f"jaxlib {jaxlib.__version__}, {ODD_VERSION}")
    assert shown.endswith("...") and len(shown) == commands.VERSION_WIDTH
    assert shown in row and "\\nTFRT TPU v5 lite\\t" in shown
    assert [line for line in lines if line.startswith("*")] == [
        row,
        "* the default backend is 'tpu' (the accelerator JAX picks); --backend or "
        "AOTKIT_BACKEND chooses another",
    ]
    assert all(line.isprintable() for line in lines)  # no raw control character on any line


def test_backends_verbose_prints_the_whole_version(detection, run_cli):
    pick, _ = detection
    register(StandIn("tpu", "tpu", ODD_VERSION))
    pick("tpu")
    code, out, _ = run_cli("backends", "-v")
    assert code == 0
    lines = out.split("\n")
    start = lines.index(f"tpu: version: jaxlib {jaxlib.__version__}, PJRT C API")
    assert lines[start + 1 : start + 4] == [
        "     TFRT TPU v5 lite\\tß-é 東京 \\u2028\\x1b[2J",
        "     Built on Dec  1 2026 00:00:00 (123)",
        "tpu: cpu:0",
    ]
    assert all(line.isprintable() for line in lines)


def test_an_unlisted_default_is_said(detection, monkeypatch, run_cli):
    monkeypatch.setenv(backends.ENV, "iree")
    monkeypatch.setattr(backends, "_startable", lambda: ["cpu", "interpreter"])
    code, out, _ = run_cli("backends")
    assert code == 0
    assert out.splitlines()[-1] == (
        "not listed here: the default backend is 'iree' (AOTKIT_BACKEND); --backend or "
        "AOTKIT_BACKEND chooses another"
    )
