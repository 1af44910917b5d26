"""Symbolic programs on IREE: compiled once, one dynamic executable serves every shape.

On a backend with `dynamic_shapes` (iree), `Lowered.compile` of a symbolic program runs
iree-compile once, for a vmfb whose `main` takes dynamic shapes (aotkit/symbolic/specialize.py's
`DynamicExecutable`); a call binds the symbols and checks the constraints as the per-shape
path does, with the same errors. Here: the MLP and the transformer block, written with
aotkit.numpy (traced with symbolic specs) and as JAX exports them (tests/symbolic/
programs.py), at sizes 0 (where the constraints allow it), 1, 2, 7 and 64; one compile
each, counted; the artifact served in a fresh process with no compile; the persistent
cache; the per-shape fallback and its warning; the errors word for word.

Oracle: cpu's per-shape executables of the same program (XLA), to float32 rounding
(`TOLERANCES`): IREE and XLA sum in other orders, so they agree closely, not bit for bit.
"""

from __future__ import annotations

import collections
import warnings

import numpy as np
import pytest

import aotkit
import aotkit.numpy as anp
from aotkit import artifacts, backends, cache, lax
from aotkit.backends import iree as iree_backend
from aotkit.backends.base import ArgumentMismatch
from aotkit.errors import ArtifactError, ArtifactWarning
from aotkit.symbolic.specialize import DynamicExecutable, DynamicShapesWarning
from tests.helpers import IREE_MISSING, assert_matches
from tests.symbolic import programs
from tests.symbolic.test_serving import _serve_in_fresh_process, aotkit_block

if not iree_backend.installed():
    pytest.skip(IREE_MISSING, allow_module_level=True)

CPU_OPTIONS = {"xla_backend_optimization_level": 0}
D = programs.D


def numpy_mlp(x, y, w1, w2):
    """tests/symbolic/programs.py's MLP in aotkit.numpy: logits and the squared error."""
    logits = anp.tanh(x @ w1) @ w2
    return logits, anp.sum((logits - y) * (logits - y), axis=-1)


def _numpy_mlp():
    return aotkit.jit(numpy_mlp).lower(
        aotkit.spec("f32[b,784]"),
        aotkit.spec("f32[b,10]"),
        aotkit.spec("f32[784,32]"),
        aotkit.spec("f32[32,10]"),
    )


def _numpy_block():
    b, t = aotkit.symbolic_shape("b, t", constraints=("t >= 1",))
    params = programs.block_params(np.random.default_rng(0))
    specs = [aotkit.ShapeDtype((b, t, D), "float32")]
    specs += [aotkit.ShapeDtype(p.shape, p.dtype) for p in params]
    return aotkit.jit(aotkit_block).lower(*specs)


LOWER = {
    "numpy-mlp": _numpy_mlp,
    "numpy-block": _numpy_block,
    "jax-mlp": lambda: aotkit.load_module(programs.mlp_export().serialize()),
    "jax-block": lambda: aotkit.load_module(programs.block_export().serialize()),
}
# Each size for each symbol: 0 where the constraints allow it (not for jax.export's s >= 1,
# nor the aotkit.numpy block's t >= 1), 1, 2, 7 and 64.
SIZES = {
    "numpy-mlp": [(0,), (1,), (2,), (7,), (64,)],
    "numpy-block": [(0, 7), (1, 1), (2, 64), (7, 2), (64, 7)],
    "jax-mlp": [(1,), (2,), (7,), (64,)],
    "jax-block": [(1, 1), (2, 64), (7, 2), (64, 7)],
}
CASES = [(name, sizes) for name, all_sizes in SIZES.items() for sizes in all_sizes]


def inputs(name: str, sizes: tuple, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed + 100 * sum(sizes))
    if name.endswith("mlp"):
        return [*programs.mlp_inputs(rng, sizes[0]), *programs.mlp_params(rng)]
    b, t = sizes
    x = rng.standard_normal((b, t, D)).astype(np.float32)
    return [x, *programs.block_params(rng)]


@pytest.fixture(scope="module")
def compiles(tmp_path_factory):
    """iree-compile runs that made a vmfb (not IREE's IR for `as_text`), by module name, in
    a persistent cache of this module's own (so a count is never a hit of another test's)."""
    counts: collections.Counter = collections.Counter()
    original = iree_backend.IreeBackend._run_compiler

    def counting(self, source, flags, name, *, phase=None):
        if phase is None:
            counts[name] += 1
        return original(self, source, flags, name, phase=phase)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(iree_backend.IreeBackend, "_run_compiler", counting)
        mp.setenv("AOTKIT_CACHE_DIR", str(tmp_path_factory.mktemp("iree-dynamic-cache")))
        yield counts


@pytest.fixture(scope="module")
def built(compiles):
    """name -> (Lowered, its Compiled on iree, its Compiled on cpu), made on first use."""
    found = {}

    def build(name: str):
        if name not in found:
            lowered = LOWER[name]()
            with warnings.catch_warnings():
                warnings.simplefilter("error", DynamicShapesWarning)
                on_iree = lowered.compile(backend="iree")
            found[name] = (lowered, on_iree, lowered.compile(backend="cpu", options=CPU_OPTIONS))
        return found[name]

    return build


def _leaves(out) -> list[np.ndarray]:
    return [np.asarray(o) for o in (out if isinstance(out, tuple) else (out,))]


# --- one compile, every size ---------------------------------------------------------------


def test_the_backend_declares_dynamic_shapes():
    assert backends.get("iree").dynamic_shapes is True
    assert backends.get("cpu").dynamic_shapes is False
    assert backends.get("interpreter").dynamic_shapes is False


def test_other_backends_compile_per_shape():
    cpu = backends.get("cpu")
    with pytest.raises(NotImplementedError) as e:
        cpu.compile_dynamic(None, None, (), ())
    assert str(e.value) == (
        "backend 'cpu' compiles symbolic programs per shape (dynamic_shapes is False); compile "
        "the program with Lowered.compile, which specializes it"
    )


@pytest.mark.parametrize("name, sizes", CASES, ids=[f"{n}-{s}" for n, s in CASES])
def test_one_dynamic_executable_equals_cpu_per_shape(built, name, sizes):
    _, on_iree, on_cpu = built(name)
    args = inputs(name, sizes)
    got, want = _leaves(on_iree(*args)), _leaves(on_cpu(*args))
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert type(g) is np.ndarray
        assert_matches(g, w, f"{name} at {sizes}")


@pytest.mark.parametrize("name", list(LOWER))
def test_each_program_compiles_once_for_every_size(built, compiles, name):
    _, on_iree, _ = built(name)
    for sizes in SIZES[name]:
        on_iree(*inputs(name, sizes))
    executable = on_iree._executable
    assert isinstance(executable, DynamicExecutable) and executable.dynamic is not None
    assert compiles[on_iree.name] == 1
    assert executable.compiles == 1
    assert on_iree.specializations == ()
    assert executable.per_shape_reason is None


def test_the_table_of_checked_shapes_stays_bounded(built, monkeypatch):
    from aotkit.symbolic import specialize

    _, on_iree, _ = built("numpy-mlp")
    monkeypatch.setattr(specialize, "MAX_BOUND_SHAPES", 2)
    monkeypatch.setattr(iree_backend, "_MAX_CHECKED_SHAPES", 2)
    for b in (3, 4, 5, 6, 3):
        args = inputs("numpy-mlp", (b,))
        assert _leaves(on_iree(*args))[0].shape == (b, 10)
        assert len(on_iree._executable._bound) <= 2
        assert len(on_iree._executable.dynamic._concrete) <= 2


def test_specialize_compiles_nothing(built, compiles):
    _, on_iree, _ = built("numpy-mlp")
    assert on_iree.specialize(b=[3, 5]) is on_iree
    assert on_iree.specializations == ()
    assert compiles["numpy_mlp"] == 1
    with pytest.raises(ValueError) as e:
        on_iree.specialize(b=[-1])
    assert str(e.value) == (
        "Compiled 'numpy_mlp': specialize: b = -1; give every symbol (b) a size >= 0"
    )


def test_views_of_the_dynamic_executable(built):
    lowered, on_iree, _ = built("numpy-mlp")
    assert repr(on_iree) == (
        "<Compiled numpy_mlp(x: f32[b,784], y: f32[b,10], w1: f32[784,32], "
        "w2: f32[32,10]) -> (out[0]: f32[b,10], out[1]: f32[b]) on iree>"
    )
    assert on_iree.as_text().startswith(
        "// symbolic program 'numpy_mlp', compiled once for every shape by backend 'iree'\n"
    )
    assert (on_iree.cost_analysis(), on_iree.memory_analysis()) == (None, None)
    context, main = on_iree.runtime_executable()
    assert main.reflection["iree.abi.declaration"].startswith(
        "sync func @main(%input0: tensor<?x784xf32>, %input1: tensor<?x10xf32>"
    )


# --- errors, word for word, before anything runs ---------------------------------------------


def test_sizes_that_disagree(built, compiles):
    _, on_iree, _ = built("jax-mlp")
    before = compiles["mlp"]
    x, _, w1, w2 = inputs("jax-mlp", (3,))
    _, y, _, _ = inputs("jax-mlp", (5,))
    with pytest.raises(ValueError) as e:
        on_iree(x, y, w1, w2)
    assert str(e.value) == (
        "Compiled 'mlp': argument args[1] has b = 5 (shape (5, 10) for f32[b,10]), but "
        "args[0] has b = 3 (shape (3, 784) for f32[b,784]); pass arrays whose sizes agree on b"
    )
    assert compiles["mlp"] == before


@pytest.mark.parametrize(
    "name, shape, message",
    [
        (
            "jax-block",
            (2, 65, D),
            "Compiled 'block': argument args[0] has shape (2, 65, 16) for f32[b,t,16], giving "
            "t = 65, which breaks the constraint t <= 64; pass shapes for which it holds",
        ),
        (
            "numpy-block",
            (2, 0, D),
            "Compiled 'aotkit_block': argument x has shape (2, 0, 16) for f32[b,t,16], "
            "giving t = 0, which breaks the constraint t >= 1; pass shapes for which it holds",
        ),
    ],
)
def test_a_broken_constraint(built, compiles, name, shape, message):
    _, on_iree, _ = built(name)
    before = sum(compiles.values())
    params = programs.block_params(np.random.default_rng(1))
    with pytest.raises(ValueError) as e:
        on_iree(np.zeros(shape, np.float32), *params)
    assert str(e.value) == message
    assert sum(compiles.values()) == before


def test_size_zero_of_a_jax_export(built):
    _, on_iree, _ = built("jax-mlp")
    with pytest.raises(ValueError) as e:
        on_iree(*inputs("jax-mlp", (0,)))
    assert str(e.value) == (
        "Compiled 'mlp': argument args[0] has shape (0, 784) for f32[b,784], giving b = 0, "
        "which breaks the constraint b >= 1; pass shapes for which it holds"
    )


def test_a_wrong_dtype(built):
    _, on_iree, _ = built("jax-mlp")
    _, y, w1, w2 = inputs("jax-mlp", (3,))
    with pytest.raises(TypeError) as e:
        on_iree(np.zeros((3, 784), np.float64), y, w1, w2)
    assert str(e.value) == (
        "Compiled 'mlp': argument args[0] expected f32[b,784], got f64[3,784]; pass an array "
        "of the compiled shape and dtype, or lower and compile again for the new one"
    )


def test_the_module_shape_assertions_are_checked_on_the_host(built, compiles):
    # Without the constraint in its header, the module's own assertion refuses t = 65.
    _, on_iree, _ = built("jax-block")
    art = artifacts.unpack(on_iree.serialize())
    header = {k: v for k, v in art.header.items() if k != "sections"}
    header["symbolic"]["constraints"] = ["b >= 1", "t >= 1"]
    sections = {n: bytes(v) for n, v in art.sections.items()}
    loaded = aotkit.load(artifacts.pack(header, sections))
    before = sum(compiles.values())
    params = programs.block_params(np.random.default_rng(11))
    with pytest.raises(ValueError) as e:
        loaded(np.zeros((2, 65, D), np.float32), *params)
    assert str(e.value).startswith(
        "Compiled 'block' (<bytes>): for b = 2, t = 65: Input shapes do not match the symbolic "
        "shape constraint t <= 64. Expected '- t + 64' to be greater or equal to 0, but found -1."
    )
    x = np.ones((2, 64, D), np.float32)
    np.testing.assert_array_equal(loaded(x, *params), on_iree(x, *params))
    assert sum(compiles.values()) == before


def test_the_executable_itself_checks_the_shapes_it_is_given(built):
    _, on_iree, _ = built("jax-mlp")
    executable = on_iree._executable.dynamic
    x, y, w1, w2 = inputs("jax-mlp", (3,))
    _, y5, _, _ = inputs("jax-mlp", (5,))
    with pytest.raises(ArgumentMismatch) as e:
        executable.execute([x, y5, w1, w2])
    assert (e.value.index, e.value.reason) == (
        1,
        "expected f32[b,10] (= f32[3,10] for b = 3), got f32[5,10]",
    )
    with pytest.raises(ArgumentMismatch) as e:
        executable.execute_bound([x, y, w1, w2], {})
    assert e.value.reason == (
        "has shape (3, 784) for f32[b,784], which the symbols read from the arguments (none) "
        "do not size; call it through aotkit's Compiled, which solves them"
    )
    with pytest.raises(ArgumentMismatch) as e:
        executable.execute(inputs("jax-mlp", (0,)))
    assert e.value.reason == (
        "gives sizes b = 0, for which module 'mlp' is not defined: symbolic shapes: the sizes "
        "b=0 break the constraint(s) b >= 1 (0 >= 1 is false); pass arrays whose dimensions "
        "meet every constraint"
    )
    assert_matches(executable.execute([x, y, w1, w2])[0], np.asarray(on_iree(x, y, w1, w2)[0]))


def test_a_result_of_another_shape_than_the_proof_says_is_an_error(built):
    _, on_iree, _ = built("numpy-mlp")
    executable = on_iree._executable.dynamic
    iree = backends.get("iree")
    b2 = aotkit.spec("f32[b,784]").shape[0] * 2
    out_specs = (aotkit.ShapeDtype((b2, 10), "float32"), aotkit.ShapeDtype((b2,), "float32"))
    wrong = iree.load_executable(executable.vmfb, executable.in_specs, out_specs, name="numpy_mlp")
    with pytest.raises(RuntimeError) as e:
        wrong.execute(inputs("numpy-mlp", (3,)))
    assert str(e.value) == (
        "backend 'iree': module 'numpy_mlp' returned f32[3,10] for result 0, but its "
        "signature gives f32[2*b,10] = f32[6,10] here; this is a bug in aotkit's dynamic "
        "compile: compile with backend='cpu'"
    )


def test_the_dynamic_vmfb_refuses_static_specs(built):
    _, on_iree, _ = built("numpy-mlp")
    executable = on_iree._executable.dynamic
    static = [aotkit.spec(s) for s in ("f32[3,784]", "f32[3,10]", "f32[784,32]", "f32[32,10]")]
    with pytest.raises(ValueError) as e:
        backends.get("iree").load_executable(
            executable.vmfb, static, [aotkit.spec("f32[3,10]"), aotkit.spec("f32[3]")]
        )
    assert str(e.value) == (
        "IreeBackend.load_executable: the vmfb's main is (tensor<?x784xf32>, "
        "tensor<?x10xf32>, tensor<784x32xf32>, tensor<32x10xf32>) -> (tensor<?x10xf32>, "
        "tensor<?xf32>), but the specs say (tensor<3x784xf32>, tensor<3x10xf32>, "
        "tensor<784x32xf32>, tensor<32x10xf32>) -> (tensor<3x10xf32>, tensor<3xf32>); pass "
        "the specs it was compiled with"
    )


# --- artifacts and the persistent cache ------------------------------------------------------


@pytest.mark.parametrize(
    "name, calls",
    [("numpy-mlp", [(0,), (5,), (64,)]), ("jax-block", [(1, 1), (3, 5), (2, 64)])],
)
def test_the_artifact_serves_three_shapes_in_a_fresh_process_without_compiling(
    tmp_path, built, name, calls
):
    _, on_iree, _ = built(name)
    data = on_iree.serialize()
    art = artifacts.unpack(data)
    assert art.executable_format == "iree-vmfb" and art.specializations == ()
    assert art.section(artifacts.EXECUTABLE) == on_iree._executable.dynamic.vmfb
    symbols = "b" if name.endswith("mlp") else "b, t"
    assert (
        f"symbolic: {symbols}; constraints: {'; '.join(art.shapes.constraints) or 'none'}\n"
        "one executable for every shape (executable, iree-vmfb); no specializations\n"
    ) in artifacts.describe(data, "model.aotx")
    args = [inputs(name, sizes, seed=7) for sizes in calls]
    split = 2 if name.endswith("mlp") else 1  # per call; the rest are shared weights
    results, info = _serve_in_fresh_process(
        tmp_path, data, [a[:split] for a in args], args[0][split:]
    )
    assert (info["origin"], info["held"], info["compiles"]) == ("artifact", [], 0)
    assert info["signature"] == repr(on_iree)
    for a, got in zip(args, results, strict=True):
        want = _leaves(on_iree(*a[:split], *args[0][split:]))
        for g, w in zip(got, want, strict=True):
            np.testing.assert_array_equal(g, w)  # the same vmfb: the same bits


def test_an_artifact_whose_vmfb_does_not_load(built, compiles):
    _, on_iree, _ = built("numpy-mlp")
    art = artifacts.unpack(on_iree.serialize())
    header = {k: v for k, v in art.header.items() if k != "sections"}
    sections = {n: bytes(v) for n, v in art.sections.items()}
    sections[artifacts.EXECUTABLE] = b"not a vmfb"
    damaged = artifacts.pack(header, sections)
    prefix = (
        "aotkit.load: <bytes>: its executable for every shape does not load (backend 'iree' "
        "could not load the vmfb of 'numpy_mlp': IreeBackend.load_executable: the bytes are "
        "not an IREE module: "
    )
    with pytest.raises(ArtifactError) as e:
        aotkit.load(damaged, recompile=False)
    assert str(e.value).startswith(prefix)
    assert str(e.value).endswith(
        "; load it with recompile=True or 'auto' to compile its portable StableHLO"
    )
    before = compiles["numpy_mlp"]
    with pytest.warns(ArtifactWarning) as record:
        loaded = aotkit.load(damaged)
    (warning,) = [w for w in record if w.category is ArtifactWarning]
    assert str(warning.message).startswith(prefix)
    assert str(warning.message).endswith("; compiling its portable StableHLO instead")
    assert warning.filename == __file__  # the line that called aotkit.load
    assert loaded.origin == "recompiled"
    args = inputs("numpy-mlp", (4,))
    for g, w in zip(_leaves(loaded(*args)), _leaves(on_iree(*args)), strict=True):
        np.testing.assert_array_equal(g, w)
    # The same program and options: the persistent cache has its dynamic vmfb.
    assert compiles["numpy_mlp"] == before


def test_the_artifact_runs_per_shape_on_cpu(built):
    _, on_iree, on_cpu = built("jax-mlp")
    loaded = aotkit.load(on_iree.serialize(), backend="cpu")
    assert type(loaded._executable).__name__ == "SymbolicExecutable"
    args = inputs("jax-mlp", (6,))
    for g, w in zip(_leaves(loaded(*args)), _leaves(on_cpu(*args)), strict=True):
        assert_matches(g, w)
    assert loaded.specializations == ({"b": 6},)


def test_the_persistent_cache_keys_the_symbolic_program(built, compiles):
    _, on_iree, _ = built("numpy-block")
    hits = cache.stats().hits
    # Loaded with recompile=True, the artifact's portable program compiles: from the cache.
    again = aotkit.load(on_iree.serialize(), recompile=True)
    assert (again.origin, again._executable.compiles) == ("recompiled", 0)
    assert cache.stats().hits == hits + 1
    assert compiles["aotkit_block"] == 1
    args = inputs("numpy-block", (3, 9))
    np.testing.assert_array_equal(again(*args), on_iree(*args))
    # Other constraints are another program to the proof: another entry.
    b, t = aotkit.symbolic_shape("b, t", constraints=("t >= 1", "b <= 100"))
    params = programs.block_params(np.random.default_rng(0))
    specs = [aotkit.ShapeDtype((b, t, D), "float32")]
    specs += [aotkit.ShapeDtype(p.shape, p.dtype) for p in params]
    other = aotkit.jit(aotkit_block).lower(*specs).compile(backend="iree")
    assert other._executable.compiles == 1
    assert compiles["aotkit_block"] == 2


# --- what IREE cannot compile once: per shape, with a warning --------------------------------


def blur(x, k):
    return lax.conv(x, k, (1, 1), "SAME")


def running(x):
    return lax.scan(lambda c, r: (c + r, c * r), anp.zeros(x.shape[1:], x.dtype), x)


def test_an_op_aotkit_cannot_prove_compiles_per_shape_with_a_warning():
    lowered = aotkit.jit(blur).lower(aotkit.spec("f32[1,1,h,w]"), aotkit.spec("f32[1,1,3,3]"))
    line = blur.__code__.co_firstlineno + 1
    with pytest.warns(DynamicShapesWarning) as record:
        on_iree = lowered.compile(backend="iree")
    (warning,) = record
    assert str(warning.message) == (
        f"Compiled 'blur': backend 'iree' cannot compile it once for every shape "
        f"(stablehlo.convolution at {__file__}:{line} has dynamic shapes "
        "(tensor<1x1x?x?xf32>), and aotkit has no rule proving them for every size); it "
        "compiles it for each shape it is called with instead"
    )
    on_cpu = lowered.compile(backend="cpu", options=CPU_OPTIONS)
    rng = np.random.default_rng(3)
    k = rng.standard_normal((1, 1, 3, 3)).astype(np.float32)
    for h, w in ((1, 1), (5, 7)):
        x = rng.standard_normal((1, 1, h, w)).astype(np.float32)
        assert_matches(np.asarray(on_iree(x, k)), np.asarray(on_cpu(x, k)))
    assert on_iree.specializations == ({"h": 1, "w": 1}, {"h": 5, "w": 7})
    assert on_iree._executable.per_shape_reason.startswith("stablehlo.convolution at ")


def test_an_op_iree_cannot_compile_dynamically_compiles_per_shape_with_a_warning():
    lowered = aotkit.jit(running).lower(aotkit.spec("f32[b,3]"))
    with pytest.warns(DynamicShapesWarning) as record:
        on_iree = lowered.compile(backend="iree")
    (warning,) = record
    message = str(warning.message)
    assert message.startswith(
        "Compiled 'running': backend 'iree' cannot compile it once for every shape (backend "
        "'iree' rejected module 'running': "
    )
    assert "failed to legalize operation 'stablehlo.dynamic_update_slice'" in message
    assert message.endswith("); it compiles it for each shape it is called with instead")
    on_cpu = lowered.compile(backend="cpu", options=CPU_OPTIONS)
    for b in (0, 4):
        x = np.arange(3 * b, dtype=np.float32).reshape(b, 3)
        for g, w in zip(_leaves(on_iree(x)), _leaves(on_cpu(x)), strict=True):
            assert_matches(g, w)
