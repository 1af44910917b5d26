"""The backend registry: names, lazy start, plugins by package or path, entry points."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

from aotkit import backends
from aotkit.backends import plugin
from aotkit.stages import Compiled
from tests.backends import modules


@pytest.fixture
def fresh_registry(monkeypatch):
    """Backends started inside the test are forgotten afterwards."""
    monkeypatch.setattr(backends, "_started", dict(backends._started))


def test_importing_aotkit_starts_no_client():
    code = textwrap.dedent(
        """
        import aotkit, aotkit.backends
        from aotkit import _compat
        assert not _compat.backends_started()
        aotkit.backends.get("interpreter")
        assert not _compat.backends_started(), "the interpreter must not start PJRT"
        aotkit.backends.get("cpu")
        assert _compat.backends_started()
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_default_backend_is_cpu_without_an_accelerator(monkeypatch, fresh_registry):
    # Where an accelerator is, it is the default (tests/test_targets.py).
    monkeypatch.delenv(backends.ENV, raising=False)
    monkeypatch.setattr(plugin, "installed", lambda platform: False)
    monkeypatch.setattr(backends, "_plugins_installed", [])
    assert backends.default_name() == ("cpu", "no accelerator here")
    assert backends.get() is backends.get("cpu")
    assert backends.get(None).name == "cpu"
    assert backends.get("cpu").platform == "cpu"


def test_get_returns_one_instance_per_name():
    assert backends.get("interpreter") is backends.get("interpreter")


def test_get_passes_a_backend_through():
    cpu = backends.get("cpu")
    assert backends.get(cpu) is cpu


def test_available_lists_builtins_with_platform_version_and_devices():
    infos = {info.name: info for info in backends.available()}
    assert {"cpu", "interpreter"} <= set(infos)
    assert infos["cpu"].platform == "cpu"
    assert infos["cpu"].device_count >= 1
    assert "jaxlib" in infos["cpu"].version
    assert infos["interpreter"].version.startswith("StableHLO ")
    assert infos["interpreter"].device_count == 1


def test_unknown_backend_lists_what_is_available():
    with pytest.raises(ValueError, match=r"unknown backend 'nope'; available: cpu, interpreter"):
        backends.get("nope")


def test_backend_name_must_be_a_string():
    with pytest.raises(TypeError, match=r"backend must be a name such as 'cpu', got int"):
        backends.get(3)


def test_absent_plugin_names_the_package(monkeypatch, fresh_registry):
    monkeypatch.setattr(plugin, "installed", lambda platform: False)
    with pytest.raises(
        ValueError,
        match=r"backend 'cuda' is not installed; get it with pip install \"jax\[cuda12\]\"; "
        r"available: cpu, interpreter",
    ):
        backends.get("cuda")
    with pytest.raises(ValueError, match=r"backend 'tpu' is not installed.*jax\[tpu\]"):
        backends.get("tpu")


def _gpu_backend():
    for name in ("cuda", "rocm"):
        if plugin.installed(name):
            try:
                return backends.get(name)
            except (RuntimeError, ValueError):
                continue
    pytest.skip("no GPU PJRT plugin with a device here")


def test_gpu_backend_runs_the_seed_program():
    gpu = _gpu_backend()
    exe = gpu.compile(modules.seed())
    assert float(np.asarray(exe.execute([np.float32(-3.0)])[0])) == 4.0


def test_load_plugin_rejects_a_missing_file(tmp_path):
    missing = tmp_path / "libnothing.so"
    with pytest.raises(ValueError, match=r"load_plugin\('mine', '.*libnothing.so'\): no such file"):
        backends.load_plugin("mine", str(missing))


def test_load_plugin_rejects_a_file_that_is_not_a_plugin(tmp_path, fresh_registry):
    fake = tmp_path / "libfake.so"
    fake.write_bytes(b"not an ELF file")
    with pytest.raises(ValueError, match=r"not a loadable PJRT plugin: .*; pass a library"):
        backends.load_plugin("notaplugin", str(fake))
    assert "notaplugin" not in backends._started


@pytest.mark.parametrize("name", ["cpu", "interpreter", "cuda"])
def test_load_plugin_refuses_a_taken_name(name, tmp_path):
    with pytest.raises(ValueError, match=rf"backend name '{name}' is taken"):
        backends.load_plugin(name, str(tmp_path))


def test_load_plugin_name_must_be_an_identifier(tmp_path):
    with pytest.raises(ValueError, match=r"backend name 'my gpu' must be an identifier"):
        backends.load_plugin("my gpu", str(tmp_path))


def _install_entry_point(tmp_path, monkeypatch, target: str, module_source: str):
    """A fake installed distribution exposing `fake = <target>` in group aotkit.backends."""
    (tmp_path / "aotkit_fake_backend.py").write_text(module_source)
    dist = tmp_path / "aotkit_fake_backend-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: aotkit-fake-backend\nVersion: 0.1\n"
    )
    (dist / "entry_points.txt").write_text(f"[aotkit.backends]\nfake = {target}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "aotkit_fake_backend", raising=False)


_FAKE_BACKEND = textwrap.dedent(
    """
    from aotkit.backends.interpreter import InterpreterBackend

    class FakeBackend(InterpreterBackend):
        name = "fake"
        platform = "fake-platform"

    def make():
        return FakeBackend()

    not_a_backend = 42
    """
)


@pytest.mark.parametrize("target", ["aotkit_fake_backend:FakeBackend", "aotkit_fake_backend:make"])
def test_entry_point_backend_is_found_and_runs(target, tmp_path, monkeypatch, fresh_registry):
    _install_entry_point(tmp_path, monkeypatch, target, _FAKE_BACKEND)
    fake = backends.get("fake")
    assert (fake.name, fake.platform) == ("fake", "fake-platform")
    assert "fake" in {info.name for info in backends.available()}
    exe = fake.compile(modules.seed())
    from jax import tree_util

    compiled = Compiled(
        exe, in_tree=tree_util.tree_structure(((0,), {})), out_tree=tree_util.tree_structure(0)
    )
    assert compiled(np.float32(-3.0)) == np.float32(4.0)
    assert compiled.backend is fake


def test_entry_point_that_is_not_a_backend_is_a_type_error(tmp_path, monkeypatch, fresh_registry):
    _install_entry_point(tmp_path, monkeypatch, "aotkit_fake_backend:not_a_backend", _FAKE_BACKEND)
    with pytest.raises(
        TypeError,
        match=r"entry point 'fake' \(aotkit_fake_backend:not_a_backend\) gave a int, "
        r"not an aotkit.backends.Backend",
    ):
        backends.get("fake")
