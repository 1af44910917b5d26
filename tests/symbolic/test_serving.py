"""Serving symbolic programs: one compiled program, called with many shapes.

A program with symbolic dimensions compiles once per distinct shape it is called with
(aotkit/symbolic/specialize.py) and saves as one artifact with every specialization compiled so far
(format version 3). Here: an MLP and a transformer block with symbolic batch and sequence
length, as JAX exports them (jax.export with symbolic shapes, read as files), compared with
the fixed-shape programs bit for bit; the artifact loaded in a fresh process and called with
5 shapes; the persistent cache keyed by program and shape; and the errors, word for word.

The same programs written with aotkit.numpy need symbolic specs in the tracer (issue 25,
part A); their tests skip until the tracer lowers a symbolic spec.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import aotkit
from aotkit import artifacts, cache
from aotkit.errors import ArtifactError
from tests.helpers import pythonpath
from tests.symbolic import programs

CHILD = Path(__file__).with_name("serving_child.py")
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def mlp_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("exports") / "mlp.jaxexp"
    path.write_bytes(programs.mlp_export().serialize())
    return path


@pytest.fixture(scope="module")
def block_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("exports") / "block.jaxexp"
    path.write_bytes(programs.block_export().serialize())
    return path


@pytest.fixture(scope="module")
def mlp(mlp_file):
    return aotkit.load_module(mlp_file).compile()


@pytest.fixture(scope="module")
def block(block_file):
    return aotkit.load_module(block_file).compile()


def _same(got, want) -> None:
    got = got if isinstance(got, tuple) else (got,)
    want = want if isinstance(want, tuple) else (want,)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w))


# --- the programs, compiled per shape ----------------------------------------------------------


def test_a_symbolic_program_shows_its_symbols(mlp, block):
    assert repr(mlp) == (
        "<Compiled mlp(args[0]: f32[b,784], args[1]: f32[b,10], args[2]: f32[784,32], "
        "args[3]: f32[32,10]) -> (out[0]: f32[b,10], out[1]: f32[b]) on cpu>"
    )
    assert repr(block).startswith("<Compiled block(args[0]: f32[b,t,16], args[1]: f32[16,16]")
    assert repr(block).endswith("-> (out: f32[b,t,16]) on cpu>")


@pytest.mark.parametrize("b", [1, 2, 7, 33, 128])
def test_mlp_equals_the_fixed_shape_program(mlp, b):
    rng = np.random.default_rng(b)
    x, y = programs.mlp_inputs(rng, b)
    w1, w2 = programs.mlp_params(rng)
    _same(mlp(x, y, w1, w2), programs.fixed(programs.mlp, x, y, w1, w2))


@pytest.mark.parametrize("b, t", [(1, 1), (2, 5), (1, 17), (4, 8), (3, 64)])
def test_block_equals_the_fixed_shape_program(block, b, t):
    rng = np.random.default_rng(10 * b + t)
    x = rng.standard_normal((b, t, programs.D)).astype(np.float32)
    params = programs.block_params(rng)
    _same(block(x, *params), programs.fixed(programs.block, x, *params))


def test_views_of_a_symbolic_program(mlp_file):
    lowered = aotkit.load_module(mlp_file)
    assert lowered.cost_analysis() is None  # its cost depends on b
    compiled = lowered.compile()
    assert (compiled.cost_analysis(), compiled.memory_analysis()) == (None, None)
    assert compiled.as_text().startswith(
        "// symbolic program 'mlp'; executables compiled for:\n//   (none yet)\nmodule @mlp"
    )


def test_each_shape_compiles_once(mlp_file):
    compiled = aotkit.load_module(mlp_file).compile()
    rng = np.random.default_rng(0)
    w1, w2 = programs.mlp_params(rng)
    for b in (3, 5, 3, 5, 3):
        compiled(*programs.mlp_inputs(rng, b), w1, w2)
    assert compiled.specializations == ({"b": 3}, {"b": 5})


def test_results_are_those_of_a_static_compiled(mlp):
    rng = np.random.default_rng(1)
    x, y = programs.mlp_inputs(rng, 4)
    w1, w2 = programs.mlp_params(rng)
    logits, loss = mlp(x, y, w1, w2)
    static = aotkit.jit(programs.mlp, frontend="jax").lower(x, y, w1, w2).compile()
    want_logits, want_loss = static(x, y, w1, w2)
    assert type(logits) is type(want_logits)
    assert (logits.dtype, logits.shape, loss.shape) == (np.float32, (4, 10), (4,))
    _same((logits, loss), (want_logits, want_loss))


def test_a_jax_export_artifact_runs_for_three_batch_sizes(mlp_file):
    compiled = aotkit.load_module(str(mlp_file)).compile()
    rng = np.random.default_rng(2)
    w1, w2 = programs.mlp_params(rng)
    for b in (1, 16, 100):
        x, y = programs.mlp_inputs(rng, b)
        _same(compiled(x, y, w1, w2), programs.fixed(programs.mlp, x, y, w1, w2))


# --- artifacts --------------------------------------------------------------------------------


def _serve_in_fresh_process(tmp_path, artifact: bytes, calls, weights) -> tuple[list, dict]:
    path = tmp_path / "model.aotx"
    path.write_bytes(artifact)
    inputs = {f"in{k}_{i}": a for k, args in enumerate(calls) for i, a in enumerate(args)}
    inputs.update({f"w_{i}": w for i, w in enumerate(weights)})
    np.savez(tmp_path / "inputs.npz", **inputs)
    out = tmp_path / "out.npz"
    env = dict(os.environ, PYTHONPATH=pythonpath(ROOT))
    done = subprocess.run(
        [sys.executable, str(CHILD), str(path), str(tmp_path / "inputs.npz"), str(out)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    data = np.load(out)
    info = json.loads(bytes(data["info"]).decode())
    results = []
    for k in range(len(calls)):
        names = sorted((n for n in data.files if n.startswith(f"out{k}_")), key=len)
        results.append(tuple(data[n] for n in sorted(names, key=lambda n: int(n.split("_")[1]))))
    return results, info


def test_mlp_artifact_serves_five_shapes_in_a_fresh_process(tmp_path, mlp_file):
    compiled = aotkit.load_module(mlp_file).compile().specialize(b=[1, 8, 32])
    rng = np.random.default_rng(3)
    w1, w2 = programs.mlp_params(rng)
    calls = [programs.mlp_inputs(rng, b) for b in (8, 1, 5, 32, 77)]
    results, info = _serve_in_fresh_process(tmp_path, compiled.serialize(), calls, (w1, w2))
    assert info["origin"] == "artifact"
    assert info["held"] == [{"b": 1}, {"b": 8}, {"b": 32}]
    for (x, y), got in zip(calls, results):
        _same(got, programs.fixed(programs.mlp, x, y, w1, w2))


def test_block_artifact_serves_five_shapes_in_a_fresh_process(tmp_path, block_file):
    compiled = aotkit.load_module(block_file).compile().specialize(b=[1, 2], t=[8, 16])
    rng = np.random.default_rng(4)
    params = programs.block_params(rng)
    shapes = [(2, 16), (1, 8), (3, 5), (1, 1), (2, 64)]
    calls = [(rng.standard_normal((b, t, programs.D)).astype(np.float32),) for b, t in shapes]
    results, info = _serve_in_fresh_process(tmp_path, compiled.serialize(), calls, params)
    assert info["held"] == [
        {"b": 1, "t": 8},
        {"b": 1, "t": 16},
        {"b": 2, "t": 8},
        {"b": 2, "t": 16},
    ]
    for (x,), got in zip(calls, results):
        _same(got, programs.fixed(programs.block, x, *params))


def test_a_loaded_artifact_runs_held_shapes_without_compiling(mlp_file):
    compiled = aotkit.load_module(mlp_file).compile().specialize(b=[2, 4])
    loaded = aotkit.load(compiled.serialize(), recompile=False)
    assert loaded.origin == "artifact"
    assert loaded.specializations == ({"b": 2}, {"b": 4})
    rng = np.random.default_rng(5)
    w1, w2 = programs.mlp_params(rng)
    for b in (2, 4):
        x, y = programs.mlp_inputs(rng, b)
        _same(loaded(x, y, w1, w2), programs.fixed(programs.mlp, x, y, w1, w2))
    assert loaded._executable.compiles == 0


def test_another_shape_compiles_from_the_portable_program(mlp_file):
    compiled = aotkit.load_module(mlp_file).compile().specialize(b=2)
    loaded = aotkit.load(compiled.serialize())
    rng = np.random.default_rng(6)
    w1, w2 = programs.mlp_params(rng)
    x, y = programs.mlp_inputs(rng, 9)
    _same(loaded(x, y, w1, w2), programs.fixed(programs.mlp, x, y, w1, w2))
    assert loaded.specializations == ({"b": 2}, {"b": 9})
    # and it saves again with both
    again = aotkit.load(loaded.serialize(), recompile=False)
    assert again.specializations == ({"b": 2}, {"b": 9})


def test_portable_only_compiles_every_shape(mlp_file):
    compiled = aotkit.load_module(mlp_file).compile().specialize(b=3)
    loaded = aotkit.load(compiled.serialize(), portable_only=True)
    assert loaded.origin == "recompiled"
    assert loaded.specializations == ()
    rng = np.random.default_rng(7)
    w1, w2 = programs.mlp_params(rng)
    x, y = programs.mlp_inputs(rng, 3)
    _same(loaded(x, y, w1, w2), programs.fixed(programs.mlp, x, y, w1, w2))


def test_the_persistent_cache_keys_program_and_shape(mlp_file):
    rng = np.random.default_rng(8)
    w1, w2 = programs.mlp_params(rng)
    x, y = programs.mlp_inputs(rng, 11)
    first = aotkit.load_module(mlp_file).compile()
    artifact = first.serialize()  # no executable yet
    first(x, y, w1, w2)
    assert first._executable.compiles in (0, 1)  # 0: an earlier test in this session stored it
    hits = cache.stats().hits
    # Another Compiled of the same program (here: its artifact, loaded) finds that entry.
    second = aotkit.load(artifact)
    _same(second(x, y, w1, w2), first(x, y, w1, w2))
    assert second._executable.compiles == 0
    assert cache.stats().hits == hits + 1


# --- errors, word for word ---------------------------------------------------------------------


def test_sizes_that_disagree_are_an_error(mlp):
    rng = np.random.default_rng(9)
    w1, w2 = programs.mlp_params(rng)
    x, _ = programs.mlp_inputs(rng, 3)
    _, y = programs.mlp_inputs(rng, 5)
    with pytest.raises(ValueError) as e:
        mlp(x, y, w1, w2)
    assert str(e.value) == (
        "Compiled 'mlp': argument args[1] has b = 5 (shape (5, 10) for f32[b,10]), but "
        "args[0] has b = 3 (shape (3, 784) for f32[b,784]); pass arrays whose sizes agree on b"
    )


def test_a_broken_constraint_is_an_error(mlp):
    rng = np.random.default_rng(10)
    w1, w2 = programs.mlp_params(rng)
    x, y = programs.mlp_inputs(rng, 0)
    with pytest.raises(ValueError) as e:
        mlp(x, y, w1, w2)
    assert str(e.value) == (
        "Compiled 'mlp': argument args[0] has shape (0, 784) for f32[b,784], giving b = 0, "
        "which breaks the constraint b >= 1; pass shapes for which it holds"
    )
    assert mlp.specializations == () or {"b": 0} not in mlp.specializations


def test_a_constraint_given_at_export_is_checked_before_compiling(block):
    params = programs.block_params(np.random.default_rng(11))
    x = np.zeros((2, 65, programs.D), np.float32)
    with pytest.raises(ValueError) as e:
        block(x, *params)
    assert str(e.value) == (
        "Compiled 'block': argument args[0] has shape (2, 65, 16) for f32[b,t,16], giving "
        "t = 65, which breaks the constraint t <= 64; pass shapes for which it holds"
    )


def test_a_jax_shape_assertion_fails_the_specialization(block_file):
    # Without the constraint in its header, the module's own assertion decides.
    data = aotkit.load_module(block_file).compile().serialize()
    art = artifacts.unpack(data)
    header = {k: v for k, v in art.header.items() if k != "sections"}
    header["symbolic"]["constraints"] = ["b >= 1", "t >= 1"]
    loaded = aotkit.load(artifacts.pack(header, {n: bytes(v) for n, v in art.sections.items()}))
    params = programs.block_params(np.random.default_rng(11))
    with pytest.raises(ValueError) as e:
        loaded(np.zeros((2, 65, programs.D), np.float32), *params)
    assert str(e.value).startswith(
        "Compiled 'block' (<bytes>): specializing to b = 2, t = 65: Input shapes do not match "
        "the symbolic shape constraint t <= 64. Expected '- t + 64' to be greater or equal to "
        "0, but found -1."
    )


def test_a_wrong_rank_or_dtype_is_a_type_error(mlp):
    w1, w2 = programs.mlp_params(np.random.default_rng(12))
    with pytest.raises(TypeError) as e:
        mlp(np.zeros((3, 784), np.float64), np.zeros((3, 10), np.float32), w1, w2)
    assert str(e.value) == (
        "Compiled 'mlp': argument args[0] expected f32[b,784], got f64[3,784]; pass an array "
        "of the compiled shape and dtype, or lower and compile again for the new one"
    )


def test_an_unknown_shape_with_recompile_false_is_an_error(mlp_file):
    compiled = aotkit.load_module(mlp_file).compile().specialize(b=[1, 8])
    loaded = aotkit.load(compiled.serialize(), recompile=False)
    rng = np.random.default_rng(13)
    w1, w2 = programs.mlp_params(rng)
    with pytest.raises(ArtifactError) as e:
        loaded(*programs.mlp_inputs(rng, 5), w1, w2)
    assert str(e.value) == (
        "Compiled 'mlp' (<bytes>): no executable for b = 5, and it was loaded with "
        "recompile=False; it holds executables for: b = 1; b = 8; call it with one of those "
        "shapes, or load it with recompile='auto' to compile others from its portable StableHLO"
    )


@pytest.mark.parametrize(
    "sizes, message",
    [
        (
            {"c": [1]},
            "Compiled 'mlp': specialize: 'c' is not a symbol of this program (its symbols: b)",
        ),
        ({}, "Compiled 'mlp': specialize: no sizes for b; give sizes for every symbol: b=[...]"),
        (
            {"b": [0]},
            "Compiled 'mlp': specialize: b = 0 breaks the constraint b >= 1; give sizes for "
            "which it holds",
        ),
        (
            {"b": [-1]},
            "Compiled 'mlp': specialize: b = -1; give every symbol (b) a size >= 0",
        ),
        ({"b": "x"}, "Compiled 'mlp': specialize: b = 'x'; give every symbol (b) a size >= 0"),
    ],
)
def test_specialize_errors(mlp, sizes, message):
    with pytest.raises(ValueError) as e:
        mlp.specialize(**sizes)
    assert str(e.value) == message


def test_specialize_a_static_program_is_an_error():
    def add_one(x):
        return x + 1

    compiled = aotkit.jit(add_one).lower(aotkit.spec("f32[3]")).compile()
    with pytest.raises(ValueError) as e:
        compiled.specialize(b=[1])
    assert str(e.value) == (
        "Compiled 'add_one': specialize: the program has static shapes (add_one(x: "
        "f32[3]) -> (out: f32[3])), so it has nothing to specialize; lower it with symbolic "
        "dimensions (aotkit.spec('f32[b,784]')) to compile it per shape"
    )
    assert compiled.specializations == ()


# --- the same programs written with aotkit.numpy ------------------------------------------------


def test_aotkit_numpy_mlp_serves_five_shapes(tmp_path):
    import aotkit.numpy as anp

    def mlp(x, w1, w2):
        return anp.tanh(x @ w1) @ w2

    lowered = aotkit.jit(mlp).lower(
        aotkit.spec("f32[b,784]"), aotkit.spec("f32[784,32]"), aotkit.spec("f32[32,10]")
    )
    compiled = lowered.compile().specialize(b=[1, 8])
    rng = np.random.default_rng(14)
    w1, w2 = programs.mlp_params(rng)
    calls = [(programs.mlp_inputs(rng, b)[0],) for b in (0, 1, 8, 13, 64)]
    results, _ = _serve_in_fresh_process(tmp_path, compiled.serialize(), calls, (w1, w2))
    for (x,), got in zip(calls, results):
        static = aotkit.jit(mlp).lower(x, w1, w2).compile()
        _same(got, static(x, w1, w2))


def _layer_norm(h):
    import aotkit.numpy as anp

    mean = anp.mean(h, axis=-1, keepdims=True)
    var = anp.mean((h - mean) ** 2, axis=-1, keepdims=True)
    return (h - mean) / anp.sqrt(var + 1e-5)


def aotkit_block(x, wq, wk, wv, wo, w1, w2):
    """The transformer block of tests/symbolic/programs.py in aotkit.numpy (no causal mask)."""
    import aotkit.numpy as anp

    h = _layer_norm(x)
    q, k, v = h @ wq, h @ wk, h @ wv
    scores = anp.einsum("btd,bsd->bts", q, k) / np.float32(np.sqrt(programs.D))
    scores = scores - anp.max(scores, axis=-1, keepdims=True)
    weights = anp.exp(scores)
    weights = weights / anp.sum(weights, axis=-1, keepdims=True)
    x = x + anp.einsum("bts,bsd->btd", weights, v) @ wo
    g = _layer_norm(x) @ w1
    return x + (0.5 * g * (1 + anp.tanh(0.7978845608 * (g + 0.044715 * g**3)))) @ w2


def test_aotkit_numpy_block_serves_five_shapes(tmp_path):
    b, t = aotkit.symbolic_shape("b, t", constraints=("t >= 1",))
    params = programs.block_params(np.random.default_rng(15))
    specs = [aotkit.ShapeDtype((b, t, programs.D), "float32")]
    specs += [aotkit.ShapeDtype(p.shape, p.dtype) for p in params]
    lowered = aotkit.jit(aotkit_block).lower(*specs)
    compiled = lowered.compile().specialize(b=[1, 2], t=[8])
    rng = np.random.default_rng(16)
    shapes = [(0, 3), (1, 1), (2, 8), (3, 17), (4, 64)]
    calls = [(rng.standard_normal((bb, tt, programs.D)).astype(np.float32),) for bb, tt in shapes]
    results, info = _serve_in_fresh_process(tmp_path, compiled.serialize(), calls, params)
    assert info["held"] == [{"b": 1, "t": 8}, {"b": 2, "t": 8}]
    for (x,), got in zip(calls, results):
        static = aotkit.jit(aotkit_block).lower(x, *params).compile()
        _same(got, static(x, *params))
