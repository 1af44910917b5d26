"""Test session settings.

Hypothesis runs a derandomized profile when `CI` is set, so CI results depend only on the
code; local runs keep the random profile, and a failure it finds becomes an explicit
example (or a parametrized case) in the test that found it.

The persistent compilation cache (aotkit/cache.py) of the whole session is a temporary
folder of its own, never the user's: off while test modules are collected, then a fresh
folder (inherited by the subprocesses tests start) from the first test on. Under
pytest-xdist each worker process is a session of its own, with its own folder.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import settings

settings.register_profile("ci", derandomize=True, print_blob=True)
settings.register_profile("dev", print_blob=True)
settings.load_profile("ci" if os.environ.get("CI") else "dev")

os.environ["AOTKIT_CACHE_DIR"] = "off"


@pytest.fixture(scope="session", autouse=True)
def compilation_cache_dir(tmp_path_factory):
    """The session's persistent-cache folder (AOTKIT_CACHE_DIR points at it)."""
    folder = tmp_path_factory.mktemp("aotkit-cache")
    os.environ["AOTKIT_CACHE_DIR"] = str(folder)
    yield folder
    os.environ["AOTKIT_CACHE_DIR"] = "off"


@pytest.fixture
def run_cli(capsys):
    """`run_cli(*argv)` runs `aotkit ARGV` in this process: (exit status, stdout, stderr)."""
    from aotkit import cli

    def run(*argv):
        code = cli.main([str(a) for a in argv])
        out, err = capsys.readouterr()
        return code, out, err

    return run
