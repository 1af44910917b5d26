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

from tests import lane

settings.register_profile("ci", derandomize=True, print_blob=True)
settings.register_profile("dev", print_blob=True)
settings.load_profile("ci" if os.environ.get("CI") else "dev")

os.environ["AOTKIT_CACHE_DIR"] = "off"


def pytest_configure(config):
    config.addinivalue_line(
        "markers", f"{lane.MARK}: a case on the backend {lane.ENV} names (tests/lane.py)"
    )
    config.addinivalue_line(
        "markers",
        f"{lane.CHILDREN_MARK}: a case whose fresh processes use {lane.ENV}'s backend; it "
        f"runs in a pytest of its own (-m {lane.CHILDREN_MARK}), see tests/lane.py",
    )
    lane.configure(children_only=config.getoption("markexpr", "") == lane.CHILDREN_MARK)


# The folders whose helpers run every case on the lane's backend too (the transform families'
# oracle, the symbolic shapes' check): all their cases are the lane's.
_LANE_FOLDERS = ("transforms", "symbolic")


def pytest_collection_modifyitems(config, items):
    if not lane.ON:
        return
    for item in items:
        if item.path.parent.name in _LANE_FOLDERS and item.path.parent.parent.name == "tests":
            item.add_marker(lane.MARK)
    items[:], dropped = lane.shard(items)
    if dropped:
        config.hook.pytest_deselected(items=dropped)


@pytest.fixture(autouse=True)
def lane_backend(request):
    """The lane's cases (tests/lane.py): skipped where its backend does not start; their
    backend is what `tests.helpers.assert_matches` loosens its tolerances for."""
    from tests import helpers

    params = getattr(request.node, "callspec", None)
    backend = params.params.get("backend") if params is not None else None
    if request.node.get_closest_marker(lane.MARK) is not None:
        lane.skip_unless_available()
    if request.node.get_closest_marker(lane.CHILDREN_MARK) is not None:
        lane.skip_unless_children_may_use_it()
    helpers.CURRENT_BACKEND[0] = backend if isinstance(backend, str) else None
    yield
    helpers.CURRENT_BACKEND[0] = None


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
