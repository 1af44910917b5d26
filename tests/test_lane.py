"""The seed transcript, artifacts and the persistent cache on the lane's backend (tests/lane.py).

The accelerator's results are compared with the CPU's of the same program, with the lane's
tolerances. Cases marked `lane` run in the pytest process, which holds the accelerator; those
marked `lane_children` save, load and hit the cache in fresh processes on it, in a pytest of
their own. Without AOTKIT_TEST_BACKEND every case skips, saying so.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import numpy as np
import pytest
from jax import tree_util

import aotkit
import aotkit.numpy as anp
from aotkit import cache
from tests import artifact_child, lane
from tests.helpers import assert_matches
from tests.test_artifacts import PROGRAMS, compile_program, program_args

ROOT = Path(__file__).resolve().parents[1]
NAME = lane.NAME


def platform() -> str:
    """The lane backend's platform (a plugin loaded under another name keeps its own)."""
    from aotkit import backends

    return backends.get(NAME).platform


pytestmark = pytest.mark.skipif(
    not lane.ON, reason=f"{lane.ENV} names no accelerator backend (tests/lane.py)"
)


def assert_tree_matches(got, want, label: str) -> None:
    got_leaves, want_leaves = tree_util.tree_leaves(got), tree_util.tree_leaves(want)
    assert tree_util.tree_structure(got) == tree_util.tree_structure(want), label
    for i, (g, w) in enumerate(zip(got_leaves, want_leaves, strict=True)):
        assert_matches(np.asarray(g), np.asarray(w), f"{label}[{i}]", backend=NAME)


# --- in this process ---------------------------------------------------------------------------


@pytest.mark.lane
def test_the_seed_transcript_on_the_lane():
    f = lambda x: anp.sqrt(x**2) + 1.0  # noqa: E731  (the seed's own line)
    f_exe = aotkit.jit(f, backend=NAME).lower(1.0).compile()
    assert repr(f_exe).endswith(f" on {NAME}>")
    # The optimized HLO: every backend's XLA simplified sqrt(x**2) to abs(x).
    assert re.search(r"\babs\(", f_exe.as_text()), f_exe.as_text()
    assert "sqrt" not in f_exe.as_text(), f_exe.as_text()
    out = f_exe(3.0)
    assert isinstance(out, jax.Array) and out.dtype == np.float32 and out.shape == ()
    assert float(out) == 4.0 and repr(out) == "Array(4., dtype=float32)"
    assert {d.platform for d in out.devices()} == {platform()}
    with pytest.raises(
        TypeError,
        match=re.escape(
            "function compiled for PyTreeDef(((*,), {})), called with PyTreeDef((([*],), {}))"
        ),
    ):
        f_exe([3.0])


@pytest.mark.lane
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_an_artifact_saved_on_the_lane_loads_its_executable_and_equals_the_cpus(name, tmp_path):
    args, kwargs = program_args(name)
    compiled = compile_program(name, NAME)
    path = tmp_path / f"{name}.aotx"
    compiled.save(path)
    loaded = aotkit.load(path, recompile=False)
    assert loaded.origin == "artifact" and repr(loaded).endswith(f" on {NAME}>")
    want = tree_util.tree_map(np.asarray, compile_program(name, "cpu")(*args, **kwargs))
    got = loaded(*args, **kwargs)
    assert_tree_matches(got, want, name)
    assert (
        artifact_child.call_record(loaded, args, kwargs, False)["errors"]
        == (artifact_child.call_record(compiled, args, kwargs, False)["errors"])
    )


@pytest.mark.lane
def test_a_second_compile_on_the_lane_is_a_persistent_hit(tmp_path):
    def make():
        def f(x):
            return anp.tanh(x) * 3.0 + 1.0

        return f

    x = np.linspace(-2, 2, 128, dtype=np.float32)
    cache.configure(dir=tmp_path / "cache")
    try:
        first = aotkit.jit(make(), backend=NAME).lower(x).compile()
        second = aotkit.jit(make(), backend=NAME).lower(x).compile()
        assert (first.origin, second.origin) == ("compiled", "persistent cache")
        want = np.tanh(x) * np.float32(3) + np.float32(1)
        assert_matches(np.asarray(second(x)), want, "tanh", backend=NAME)
    finally:
        cache.configure(dir=None, max_bytes=cache.DEFAULT_MAX_BYTES)


@pytest.mark.lane
def test_a_pruned_jax_program_saved_on_the_lane_loads_and_equals_the_cpus(tmp_path):
    """The JAX front end's module is jax.jit's, the unused argument pruned; the executable
    takes every leaf (the pruned one unread), saved and loaded on the lane's backend."""
    import jax.numpy as jnp

    def f(x, unused, y):
        # 'highest': at JAX's default precision a TPU multiplies float32 in one bfloat16 pass.
        return jnp.matmul(jnp.tanh(x), y, precision="highest") + 1.0

    rng = np.random.default_rng(4)
    args = (
        rng.standard_normal((8, 16)).astype(np.float32),
        np.arange(5, dtype=np.int32),
        rng.standard_normal((16, 4)).astype(np.float32),
    )
    lowered = aotkit.jit(f, frontend="jax", backend=NAME).lower(*args)
    assert lowered._program.pruned == (1,)
    path = tmp_path / "pruned.aotx"
    lowered.compile().save(path)
    loaded = aotkit.load(path, recompile=False)
    assert loaded.origin == "artifact" and repr(loaded).endswith(f" on {NAME}>")
    want = np.asarray(aotkit.jit(f, frontend="jax", backend="cpu")(*args))
    got = loaded(*args)
    assert np.asarray(got).dtype == np.float32
    assert_matches(np.asarray(got), want, "pruned", backend=NAME)


@pytest.mark.lane
@pytest.mark.parametrize("name", ["cummax", "padded_max", "max_pool_nhwc"])
def test_window_gradients_on_the_lane_equal_the_cpus(name):
    """Reverse mode through window maxima writes select_and_scatter, which a TPU compiles only
    after aotkit's rewrite for most windows (docs/backends.md); NHWC pooling keeps XLA:TPU's
    own kernel. Values distinct, so that no window holds a tie."""
    import aotkit.lax as alax

    rng = np.random.default_rng(6)
    if name == "max_pool_nhwc":
        x = rng.permutation(2 * 6 * 6 * 3).astype(np.float32).reshape(2, 6, 6, 3)
        window = lambda x: alax.reduce_window(x, -np.inf, "max", (1, 2, 2, 1), (1, 2, 2, 1))  # noqa: E731
    elif name == "padded_max":
        x = rng.permutation(40).astype(np.float32).reshape(8, 5)
        window = lambda x: alax.reduce_window(  # noqa: E731
            x, -np.inf, "max", (2, 3), (1, 2), ((1, 0), (1, 1))
        )
    else:
        x = rng.permutation(40).astype(np.float32).reshape(8, 5)
        window = lambda x: np.maximum.accumulate(x, axis=0)  # noqa: E731

    def loss(x):
        out = window(x)
        return (out * np.arange(out.size, dtype=np.float32).reshape(out.shape)).sum()

    lowered = aotkit.jit(aotkit.grad(loss)).lower(x)
    assert "select_and_scatter" in lowered.as_text()
    got = np.asarray(lowered.compile(backend=NAME)(x))
    want = np.asarray(lowered.compile(backend="cpu")(x))
    assert got.dtype == want.dtype == np.float32
    np.testing.assert_array_equal(got, want)  # sums of small integers: exact


# --- in fresh processes on the accelerator (-m lane_children) -----------------------------------

CHILD = textwrap.dedent(
    """
    import json, os, sys
    import numpy as np
    import aotkit, aotkit.numpy as anp

    def f(x, y):
        return {"h": anp.tanh(x @ y) * 2.0, "s": anp.sum(anp.exp(x), axis=0)}

    mode, path, name = sys.argv[1], sys.argv[2], sys.argv[3]
    if os.environ.get("AOTKIT_TEST_PLUGIN"):  # the lane's backend is a plugin library
        aotkit.backends.load_plugin(name, os.environ["AOTKIT_TEST_PLUGIN"])
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 32)).astype(np.float32)
    y = rng.standard_normal((32, 16)).astype(np.float32)
    if mode == "save":
        compiled = aotkit.jit(f, backend=name).lower(x, y).compile()
        compiled.save(path)
    elif mode == "load":
        compiled = aotkit.load(path, recompile=False)
    else:
        compiled = aotkit.jit(f, backend=name).lower(x, y).compile()
    out = compiled(x, y)
    print(json.dumps({
        "origin": compiled.origin,
        "repr": repr(compiled),
        "platforms": sorted({d.platform for v in out.values() for d in v.devices()}),
        "h": np.asarray(out["h"]).tolist(),
        "s": np.asarray(out["s"]).tolist(),
    }))
    """
)


def run_child(*argv) -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, *map(str, argv)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=lane.chip_env(),
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def cpu_reference() -> dict:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 32)).astype(np.float32)
    y = rng.standard_normal((32, 16)).astype(np.float32)
    h = np.tanh(x.astype(np.float64) @ y) * 2.0
    return {"h": h.astype(np.float32), "s": np.exp(x).sum(axis=0, dtype=np.float32)}


def check_child(record: dict, origin: str) -> None:
    assert record["origin"] == origin
    assert record["repr"].endswith(f" on {NAME}>")
    for key, want in cpu_reference().items():
        assert_matches(np.asarray(record[key], np.float32), want, key, backend=NAME)


@pytest.mark.lane_children
def test_an_artifact_saved_by_one_process_runs_in_another_without_compiling(tmp_path):
    path = tmp_path / "f.aotx"
    check_child(run_child("save", path, NAME), "compiled")
    check_child(run_child("load", path, NAME), "artifact")


@pytest.mark.lane_children
def test_the_persistent_cache_is_hit_by_a_fresh_process_on_the_lane(tmp_path, monkeypatch):
    monkeypatch.setenv("AOTKIT_CACHE_DIR", str(tmp_path / "cache"))
    check_child(run_child("cache", tmp_path / "unused", NAME), "compiled")
    check_child(run_child("cache", tmp_path / "unused", NAME), "persistent cache")
