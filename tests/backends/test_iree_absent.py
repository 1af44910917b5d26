"""The `iree` backend when its extra is not installed or does not import: never listed,
and asking for it says which extra to install. Runs with and without IREE installed."""

from __future__ import annotations

import sys

import pytest

from aotkit import backends
from aotkit.backends import iree


@pytest.fixture
def fresh_registry(monkeypatch):
    """Backends started inside the test are forgotten afterwards."""
    monkeypatch.setattr(backends, "_started", {})


@pytest.fixture
def not_installed(monkeypatch, fresh_registry):
    monkeypatch.setattr(iree, "installed", lambda: False)


def test_absent_iree_is_not_listed(not_installed):
    assert "iree" not in {info.name for info in backends.available()}


def test_absent_iree_names_the_extra(not_installed):
    with pytest.raises(
        ValueError,
        match=r"^backends.get: backend 'iree' is not installed; get it with pip install "
        r"'aotkit\[iree\]' \(iree-base-compiler and iree-base-runtime\); available: cpu, "
        r"interpreter",
    ):
        backends.get("iree")


def test_iree_that_does_not_import_names_the_extra(monkeypatch, fresh_registry):
    monkeypatch.setattr(iree, "installed", lambda: True)
    monkeypatch.setitem(sys.modules, "iree.compiler.tools", None)
    with pytest.raises(
        ValueError,
        match=r"^backends.get: backend 'iree' is not usable: .+; get it with pip install "
        r"'aotkit\[iree\]'",
    ):
        backends.get("iree")


def test_installed_is_false_without_the_packages(monkeypatch):
    monkeypatch.setattr(iree, "_PACKAGES", ("iree_no_such_package.compiler",))
    assert iree.installed() is False


def test_plugins_cannot_take_the_name_iree(tmp_path):
    with pytest.raises(ValueError, match=r"backend name 'iree' is taken"):
        backends.load_plugin("iree", str(tmp_path))
