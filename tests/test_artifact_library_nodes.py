"""Saving names every unregistered pytree node type at once, and
`aotkit.register_library_nodes` registers a library's node types in one call (issue 44,
item 7): Equinox modules by class (the user's included, defined before or after the call)
and Flax nnx's Variable kinds and State; an artifact saved so loads in a fresh process that
made the same call, with the same results.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import jax
import numpy as np
import pytest
from jax import tree_util

import aotkit
from aotkit import pytrees

eqx = pytest.importorskip("equinox")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(autouse=True)
def registry_restored():
    """Registrations are per process: each test leaves the registry as it found it."""
    saved = (dict(pytrees._by_type), dict(pytrees._by_name), dict(pytrees._library_bases))
    yield
    for table, old in zip(
        (pytrees._by_type, pytrees._by_name, pytrees._library_bases), saved, strict=True
    ):
        table.clear()
        table.update(old)


class Linear(eqx.Module):
    w: jax.Array
    b: jax.Array


class Stack(eqx.Module):
    layers: tuple
    scale: float = 2.0


def stack():
    return Stack(
        (
            Linear(np.full((2, 2), 0.5, np.float32), np.ones(2, np.float32)),
            Linear(np.eye(2, dtype=np.float32), np.zeros(2, np.float32)),
        )
    )


def apply(model, x):
    for layer in model.layers:
        x = jax.numpy.tanh(x @ layer.w + layer.b)
    return x * model.scale, model


def test_saving_names_every_unregistered_node_type_at_once():
    compiled = aotkit.jit(apply, frontend="jax").lower(stack(), np.ones(2, np.float32)).compile()
    with pytest.raises(TypeError, match=(
        r"^Compiled 'apply': serialize: 2 custom pytree node types are not registered for "
        r"serialization: tests\.test_artifact_library_nodes\.Stack \(argument args\[0\]\), "
        r"tests\.test_artifact_library_nodes\.Linear \(argument args\[0\]\[0\]\[0\]\); call "
        r"aotkit\.register_pytree_node_serialization\(<class>\) for each in the processes "
        r"that save and load them, or aotkit\.register_library_nodes\('equinox'\) for every "
        r"node type of equinox \(a namedtuple, or a type registered with jax\.export, needs "
        r"no call\)$"
    )):  # fmt: skip
        compiled.serialize()


def test_plain_custom_nodes_are_listed_together_without_a_library_hint():
    class Box:
        def __init__(self, v):
            self.v = v

    class Pair:
        def __init__(self, a, b):
            self.a, self.b = a, b

    tree_util.register_pytree_node(Box, lambda b: ((b.v,), None), lambda _, c: Box(*c))
    tree_util.register_pytree_node(Pair, lambda p: ((p.a, p.b), None), lambda _, c: Pair(*c))
    compiled = aotkit.lower(
        lambda p: Box(p.a + p.b), Pair(aotkit.spec("f32[]"), aotkit.spec("f32[]"))
    ).compile()
    with pytest.raises(TypeError, match=(
        r"^Compiled 'lambda': serialize: 2 custom pytree node types are not registered for "
        r"serialization: tests\.test_artifact_library_nodes\.test_plain_custom_nodes_are_listed"
        r"_together_without_a_library_hint\.<locals>\.Pair \(argument args\[0\]\), "
        r"tests\.test_artifact_library_nodes\.test_plain_custom_nodes_are_listed_together_"
        r"without_a_library_hint\.<locals>\.Box \(result\); call "
        r"aotkit\.register_pytree_node_serialization\(<class>\) for each in the processes "
        r"that save and load them \(a namedtuple, or a type registered with jax\.export, needs "
        r"no call\)$"
    )):  # fmt: skip
        compiled.serialize()


def test_equinox_modules_register_in_one_call_and_load_in_a_fresh_process(tmp_path):
    assert aotkit.register_library_nodes("equinox") == (eqx.Module,)

    class Later(eqx.Module):  # defined after the call: registered too
        v: jax.Array

    x = np.array([0.5, -1.0], np.float32)
    compiled = aotkit.jit(apply, frontend="jax").lower(stack(), x).compile()
    path = tmp_path / "stack.aotx"
    compiled.save(path)
    later = aotkit.jit(lambda m: Later(m.v * 2), frontend="jax").lower(Later(x)).compile()
    np.testing.assert_array_equal(aotkit.load(later.serialize())(Later(x)).v, x * 2)

    want_y, _ = jax.jit(apply)(stack(), x)
    child = textwrap.dedent(
        f"""
        import numpy as np, aotkit
        from tests.test_artifact_library_nodes import stack
        aotkit.register_library_nodes("equinox")
        loaded = aotkit.load({str(path)!r})
        y, model = loaded(stack(), np.array([0.5, -1.0], np.float32))
        print(type(model).__name__, type(model.layers[0]).__name__, model.scale)
        np.save({str(tmp_path / "y.npy")!r}, np.asarray(y))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", child], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["Stack", "Linear", "2.0"]
    got = np.load(tmp_path / "y.npy")
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, np.asarray(want_y))


def test_loading_without_the_library_call_names_every_type_at_once(tmp_path):
    aotkit.register_library_nodes("equinox")
    compiled = aotkit.jit(apply, frontend="jax").lower(stack(), np.ones(2, np.float32)).compile()
    path = tmp_path / "stack.aotx"
    compiled.save(path)
    child = textwrap.dedent(
        f"""
        import aotkit
        try:
            aotkit.load({str(path)!r})
        except aotkit.ArtifactError as e:
            print(e)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", child], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == (
        f"aotkit.load: {path}: the artifact's pytrees have 2 node types that are not registered "
        "for serialization in this process: 'tests.test_artifact_library_nodes.Linear', "
        "'tests.test_artifact_library_nodes.Stack'; import the modules that define them and "
        "call aotkit.register_pytree_node_serialization(<its class>, serialized_name=<its "
        "name>) for each (aotkit.register_library_nodes for a library's) before loading "
        "(aotkit never imports a module a file names)"
    )


def test_flax_nnx_state_registers_in_one_call():
    nnx = pytest.importorskip("flax.nnx")
    # Another test file of this process may have registered nnx's types one by one
    # (tests/ecosystem_models.py): start from none (the fixture restores them).
    for table in (pytrees._by_type, pytrees._by_name):
        for key in [k for k in table if str(getattr(k, "__module__", k)).startswith("flax")]:
            del table[key]
    state = nnx.state(nnx.Linear(2, 3, rngs=nnx.Rngs(0)))

    def double(state, x):
        return tree_util.tree_map(lambda a: a * 2, state), x

    x = np.ones(2, np.float32)
    compiled = aotkit.jit(double, frontend="jax").lower(state, x).compile()
    with pytest.raises(TypeError, match=(
        r"^Compiled 'double': serialize: 2 custom pytree node types are not registered for "
        r"serialization: flax\.nnx\.statelib\.State \(argument args\[0\]\), "
        r"flax\.nnx\.variablelib\.Param \(argument args\[0\]\[0\]\); .* or "
        r"aotkit\.register_library_nodes\('flax\.nnx'\) for every node type of flax\.nnx "
    )):  # fmt: skip
        compiled.serialize()
    aotkit.register_library_nodes("flax.nnx")
    loaded = aotkit.load(compiled.serialize())
    got, _ = loaded(state, x)
    want, _ = jax.jit(double)(state, x)
    assert tree_util.tree_structure(got) == tree_util.tree_structure(want)
    for g, w in zip(tree_util.tree_leaves(got), tree_util.tree_leaves(want), strict=True):
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)


def test_unknown_library_is_refused():
    with pytest.raises(ValueError, match=(
        r"^aotkit\.register_library_nodes: unknown library 'haiku'; known: equinox, flax\.nnx "
        r"\(register other node types with aotkit\.register_pytree_node_serialization\)$"
    )):  # fmt: skip
        aotkit.register_library_nodes("haiku")
