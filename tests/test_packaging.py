"""What an install from an index carries: the license, type information, honest metadata."""

from __future__ import annotations

import pathlib
import tomllib

ROOT = pathlib.Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_license_file_is_the_declared_license():
    # An SPDX expression (PEP 639): setuptools deprecates the table form and the license
    # classifiers, and a classifier beside an expression is an error.
    assert PYPROJECT["project"]["license"] == "Apache-2.0"
    assert not [c for c in PYPROJECT["project"]["classifiers"] if c.startswith("License ::")]
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text


def test_package_is_typed_and_ships_the_marker():
    assert (ROOT / "aotkit" / "py.typed").is_file()
    assert "py.typed" in PYPROJECT["tool"]["setuptools"]["package-data"]["aotkit"]


def test_classifiers_state_posix_only():
    classifiers = PYPROJECT["project"]["classifiers"]
    assert "Operating System :: POSIX" in classifiers
    assert not [c for c in classifiers if "Windows" in c or "OS Independent" in c]


def test_test_extra_declares_what_the_tests_import():
    test_extra = " ".join(PYPROJECT["project"]["optional-dependencies"]["test"])
    for name in ("pytest", "pytest-xdist", "hypothesis", "ruff", "scipy"):
        assert name in test_extra
