"""Transforms of symbolic programs (issue 44, item 3): `Lowered.grad`, `.value_and_grad`,
`.vjp`, `.jvp` and `.vmap` of a program with symbolic dimensions give a symbolic `Lowered`,
its signature derived from the program's, whose module is made per shape when it compiles
(the program refined to the call's sizes, then transformed by the static rules), once per
distinct shape like any symbolic program.

The programs are JAX functions exported with a symbolic batch (`jax.export.symbolic_shape`)
and read as files; the oracle is JAX's own transform of the original function at each
concrete size (values and dtypes).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import export

import aotkit
import aotkit.numpy as anp
from aotkit import cache
from tests import lane

SIZES = (1, 3, 8)


# --- the programs ------------------------------------------------------------------------------


def mlp(w1, w2, x):
    """A two-layer MLP's mean squared output over the batch (a reduction over `b`)."""
    return jnp.mean(jnp.sum((jnp.tanh(x @ w1) @ w2) ** 2, axis=-1))


def tanh_sum(x):
    return jnp.sum(jnp.tanh(x) * 1.5)


def loop(w, x):
    """Three steps of `h = tanh(h @ w)` in a while loop."""
    h = jax.lax.fori_loop(0, 3, lambda i, h: jnp.tanh(h @ w), x)
    return jnp.sum(h**2)


# name -> (function, argument shapes with "b" for the batch, the arguments that have it)
PROGRAMS = {
    "mlp": (mlp, [(4, 5), (5, 2), ("b", 4)]),
    "tanh": (tanh_sum, [("b", 3)]),
    "loop": (loop, [(3, 3), ("b", 3)]),
}


def _export(fn, shapes) -> bytes:
    (b,) = export.symbolic_shape("b")
    specs = [
        jax.ShapeDtypeStruct(tuple(b if d == "b" else d for d in shape), jnp.float32)
        for shape in shapes
    ]
    return bytes(export.export(jax.jit(fn), platforms=lane.EXPORT_PLATFORMS)(*specs).serialize())


@pytest.fixture(scope="module", params=sorted(PROGRAMS))
def program(request):
    """(name, the JAX function, its argument shapes, the loaded symbolic program)."""
    fn, shapes = PROGRAMS[request.param]
    return request.param, fn, shapes, aotkit.load_module(_export(fn, shapes))


def _args(shapes, b: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed + b)
    return [
        (rng.standard_normal(tuple(b if d == "b" else d for d in s)) / 2).astype(np.float32)
        for s in shapes
    ]


def close(got, want) -> None:
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape
    scale = float(np.max(np.abs(want))) if want.size else 1.0
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6 * scale)


def close_trees(got, want) -> None:
    got_leaves, got_tree = jax.tree_util.tree_flatten(got)
    want_leaves, want_tree = jax.tree_util.tree_flatten(want)
    assert got_tree == want_tree
    for g, w in zip(got_leaves, want_leaves, strict=True):
        close(g, w)


def _runs_once_per_shape(compiled, call) -> None:
    """`call(b)` at each size, then again at the middle one: one compile per size."""
    for b in SIZES:
        call(b)
    call(SIZES[1])
    assert compiled.specializations == tuple({"b": b} for b in SIZES)
    assert compiled._executable.compiles == len(SIZES)


# --- each transform against JAX's, at each size ------------------------------------------------


def test_grad_matches_jax_at_each_size(program):
    _, fn, shapes, loaded = program
    argnums = tuple(range(len(shapes)))
    compiled = loaded.grad(argnums=argnums).compile()

    def call(b):
        args = _args(shapes, b)
        close_trees(compiled(*args), jax.grad(fn, argnums=argnums)(*args))

    _runs_once_per_shape(compiled, call)


def test_value_and_grad_matches_jax_at_each_size(program):
    _, fn, shapes, loaded = program
    argnums = len(shapes) - 1  # the batched argument
    compiled = loaded.value_and_grad(argnums=argnums).compile()

    def call(b):
        args = _args(shapes, b, seed=10)
        close_trees(compiled(*args), jax.value_and_grad(fn, argnums=argnums)(*args))

    _runs_once_per_shape(compiled, call)


def test_vjp_matches_jax_at_each_size(program):
    _, fn, shapes, loaded = program
    compiled = loaded.vjp().compile()

    def call(b):
        args = _args(shapes, b, seed=20)
        ct = np.float32(0.75)
        out, pullback = jax.vjp(fn, *args)
        close_trees(compiled(tuple(args), ct), (out, pullback(ct)))

    _runs_once_per_shape(compiled, call)


def test_jvp_matches_jax_at_each_size(program):
    _, fn, shapes, loaded = program
    compiled = loaded.jvp().compile()

    def call(b):
        args = _args(shapes, b, seed=30)
        tangents = _args(shapes, b, seed=40)
        close_trees(
            compiled(tuple(args), tuple(tangents)), jax.jvp(fn, tuple(args), tuple(tangents))
        )

    _runs_once_per_shape(compiled, call)


def test_vmap_matches_jax_at_each_size(program):
    _, fn, shapes, loaded = program
    # The batched argument mapped over a new leading axis of 2, the others shared.
    in_axes = (None,) * (len(shapes) - 1) + (0,)
    compiled = loaded.vmap(in_axes=in_axes, axis_size=2).compile()

    def call(b):
        args = _args(shapes, b, seed=50)
        args[-1] = np.stack([args[-1], -args[-1] / 3])
        close(compiled(*args), jax.vmap(fn, in_axes=in_axes)(*args))

    _runs_once_per_shape(compiled, call)


def test_per_example_gradients_compose(program):
    """`grad().vmap()`: a transform of a transform, applied per shape in order."""
    _, fn, shapes, loaded = program
    last = len(shapes) - 1
    in_axes = (None,) * last + (0,)
    compiled = loaded.grad(argnums=last).vmap(in_axes=in_axes, axis_size=3).compile()

    def call(b):
        args = _args(shapes, b, seed=60)
        args[-1] = np.stack([args[-1], args[-1] * 2, -args[-1]])
        want = jax.vmap(jax.grad(fn, argnums=last), in_axes=in_axes)(*args)
        close(compiled(*args), want)

    _runs_once_per_shape(compiled, call)


def _with_aux(w, x):
    h = jnp.tanh(x @ w)
    return jnp.sum(h**2), [jnp.sum(h, axis=1), x[:, 0]]


@pytest.mark.parametrize("kind", ["grad", "value_and_grad"])
def test_auxiliary_outputs_keep_their_symbolic_shapes(kind):
    loaded = aotkit.load_module(_export(_with_aux, [(3, 2), ("b", 3)]))
    compiled = getattr(loaded, kind)(argnums=(0, 1), has_aux=True).compile()
    for b in SIZES:
        args = _args([(3, 2), ("b", 3)], b, seed=5)
        want = getattr(jax, kind)(_with_aux, argnums=(0, 1), has_aux=True)(*args)
        close_trees(compiled(*args), want)
    assert compiled.specializations == tuple({"b": b} for b in SIZES)


# --- the symbolic signature and what the stage shows -------------------------------------------


@pytest.fixture(scope="module")
def mlp_loaded():
    fn, shapes = PROGRAMS["mlp"]
    return aotkit.load_module(_export(fn, shapes))


@pytest.mark.parametrize(
    "transform, signature",
    [
        (
            lambda low: low.grad(argnums=(0, 2)),
            "mlp_grad(args[0]: f32[4,5], args[1]: f32[5,2], args[2]: f32[b,4]) -> "
            "(out[0]: f32[4,5], out[1]: f32[b,4])",
        ),
        (
            lambda low: low.value_and_grad(),
            "mlp_value_and_grad(args[0]: f32[4,5], args[1]: f32[5,2], args[2]: f32[b,4]) -> "
            "(out[0]: f32[], out[1]: f32[4,5])",
        ),
        (
            lambda low: low.vjp(),
            "mlp_vjp(args[0][0]: f32[4,5], args[0][1]: f32[5,2], args[0][2]: f32[b,4], "
            "args[1]: f32[]) -> (out[0]: f32[], out[1][0]: f32[4,5], out[1][1]: f32[5,2], "
            "out[1][2]: f32[b,4])",
        ),
        (
            lambda low: low.jvp(),
            "mlp_jvp(args[0][0]: f32[4,5], args[0][1]: f32[5,2], args[0][2]: f32[b,4], "
            "args[1][0]: f32[4,5], args[1][1]: f32[5,2], args[1][2]: f32[b,4]) -> "
            "(out[0]: f32[], out[1]: f32[])",
        ),
        (
            lambda low: low.vmap(in_axes=(None, None, 1), axis_size=6),
            "mlp_vmap(args[0]: f32[4,5], args[1]: f32[5,2], args[2]: f32[b,6,4]) -> (out: f32[6])",
        ),
        (
            lambda low: low.grad(argnums=2).vmap(in_axes=(None, None, 0), out_axes=1, axis_size=2),
            "mlp_grad_vmap(args[0]: f32[4,5], args[1]: f32[5,2], args[2]: f32[2,b,4]) -> "
            "(out: f32[b,2,4])",
        ),
    ],
)
def test_the_transform_has_a_symbolic_signature(mlp_loaded, transform, signature):
    lowered = transform(mlp_loaded)
    assert repr(lowered) == f"<Lowered {signature}>"
    # Each shape's module has that signature (the executable checks it), at every size.
    compiled = lowered.compile().specialize(b=[1, 2])
    assert compiled.specializations == ({"b": 1}, {"b": 2})


def test_its_text_names_the_pending_transform(mlp_loaded):
    lowered = mlp_loaded.grad().vmap(in_axes=(None, None, 0), axis_size=2)
    text = lowered.as_text()
    assert text.startswith(
        "// this program is grad(argnums=0, has_aux=False), then vmap(in_axes=(None, None, 0), "
        "out_axes=0, axis_size=2) of the module below, whose\n"
        "// module aotkit makes per shape: that module at those sizes, then transformed\n"
        "module @mlp"
    )
    assert text.endswith(mlp_loaded.as_text())
    assert "tensor<?x4xf32>" in text
    # The Compiled's text says the same, after the sizes it holds.
    compiled = lowered.compile().specialize(b=3)
    assert compiled.as_text().startswith(
        "// symbolic program 'mlp_grad_vmap'; executables compiled for:\n//   b = 3\n"
        "// this program is grad(argnums=0, has_aux=False), then vmap("
    )


def test_specialize_of_the_transform_is_the_transform_of_specialize(mlp_loaded):
    lowered = mlp_loaded.grad(argnums=(0, 2)).specialize(b=5)
    assert [s.shape for s in lowered.flat_in_specs] == [(4, 5), (5, 2), (5, 4)]
    assert "?" not in lowered.as_text()
    assert lowered.as_text() == mlp_loaded.specialize(b=5).grad(argnums=(0, 2)).as_text()
    args = _args(PROGRAMS["mlp"][1], 5)
    close_trees(lowered.compile()(*args), jax.grad(mlp, argnums=(0, 2))(*args))


def test_compiled_specialize_compiles_ahead(mlp_loaded):
    compiled = mlp_loaded.grad(argnums=1).compile().specialize(b=[2, 7])
    assert compiled.specializations == ({"b": 2}, {"b": 7})
    assert compiled._executable.compiles == 2
    for b in (2, 7):
        args = _args(PROGRAMS["mlp"][1], b, seed=70)
        close(compiled(*args), jax.grad(mlp, argnums=1)(*args))
    assert compiled._executable.compiles == 2


def test_a_call_checks_the_symbols(mlp_loaded):
    compiled = mlp_loaded.vjp().compile()
    args = _args(PROGRAMS["mlp"][1], 3)
    with pytest.raises(
        TypeError,
        match=r"^Compiled 'mlp_vjp': argument args\[0\]\[2\] expected f32\[b,4\], got i32\[3,4\]; ",
    ):
        compiled((args[0], args[1], args[2].astype(np.int32)), np.float32(1))


def test_the_persistent_cache_keys_the_transforms():
    fn = lambda x: jnp.sum(jnp.sin(x) * 0.25)  # noqa: E731  (a program of this test only)
    data = _export(fn, [("b", 2)])
    x = _args([("b", 2)], 4)[0]
    first = aotkit.load_module(data).grad().compile()
    close(first(x), jax.grad(fn)(x))
    assert first._executable.compiles == 1
    hits = cache.stats().hits
    # Another Compiled of the same transform of the same program finds that entry ...
    again = aotkit.load_module(data).grad().compile()
    close(again(x), jax.grad(fn)(x))
    assert (again._executable.compiles, cache.stats().hits) == (0, hits + 1)
    # ... one of another transform of it does not.
    other = aotkit.load_module(data).value_and_grad().compile()
    close_trees(other(x), jax.value_and_grad(fn)(x))
    assert other._executable.compiles == 1


# --- aotkit's own tracer with symbolic specs ---------------------------------------------------


def _anp_mlp(w1, w2, x):
    return anp.mean(anp.sum((anp.tanh(x @ w1) @ w2) ** 2, axis=-1))


def test_a_traced_symbolic_program_transforms_per_shape():
    lowered = aotkit.jit(_anp_mlp).lower(
        aotkit.spec("f32[4,5]"), aotkit.spec("f32[5,2]"), aotkit.spec("f32[b,4]")
    )
    grad = lowered.grad(argnums=(0, 1, 2))
    assert repr(grad) == (
        "<Lowered _anp_mlp_grad(args[0]: f32[4,5], args[1]: f32[5,2], args[2]: f32[b,4]) -> "
        "(out[0]: f32[4,5], out[1]: f32[5,2], out[2]: f32[b,4])>"
    )
    compiled = grad.compile()

    def call(b):
        args = _args(PROGRAMS["mlp"][1], b, seed=80)
        close_trees(compiled(*args), jax.grad(mlp, argnums=(0, 1, 2))(*args))

    _runs_once_per_shape(compiled, call)


def test_a_traced_symbolic_program_vmaps_per_shape():
    lowered = aotkit.jit(lambda x: anp.sum(anp.tanh(x), axis=0)).lower(aotkit.spec("f32[b,3]"))
    compiled = lowered.vmap(in_axes=1, axis_size=2).compile()
    for b in (1, 4):
        x = _args([("b", 2, 3)], b)[0]
        close(compiled(x), jax.vmap(lambda x: jnp.sum(jnp.tanh(x), axis=0), in_axes=1)(x))
    assert compiled.specializations == ({"b": 1}, {"b": 4})


# --- a symbolic axis of vmap --------------------------------------------------------------------


def test_vmap_over_a_new_symbol(mlp_loaded):
    lowered = mlp_loaded.vmap(in_axes=(None, None, 0), axis_size="n")
    assert repr(lowered) == (
        "<Lowered mlp_vmap(args[0]: f32[4,5], args[1]: f32[5,2], args[2]: f32[n,b,4]) -> "
        "(out: f32[n])>"
    )
    compiled = lowered.compile()
    for n, b in ((2, 3), (5, 1), (2, 3)):
        args = _args(PROGRAMS["mlp"][1], b, seed=90)
        args[-1] = np.stack([args[-1] * (k + 1) for k in range(n)])
        close(compiled(*args), jax.vmap(mlp, in_axes=(None, None, 0))(*args))
    assert compiled.specializations == ({"n": 2, "b": 3}, {"n": 5, "b": 1})
    assert compiled._executable.compiles == 2


def test_vmap_of_a_static_program_over_a_symbol():
    lowered = aotkit.jit(lambda x: anp.sum(anp.tanh(x))).lower(aotkit.spec("f32[4,3]"))
    per_example = lowered.vmap(axis_size="n")
    assert repr(per_example) == "<Lowered lambda_vmap(args[0]: f32[n,4,3]) -> (out: f32[n])>"
    assert per_example.specialize(n=3).flat_in_specs == (aotkit.spec("f32[3,4,3]"),)
    compiled = per_example.compile()
    for n in (1, 6):
        x = _args([(n, 4, 3)], 0)[0]
        close(compiled(x), jax.vmap(lambda x: jnp.sum(jnp.tanh(x)))(x))
    assert compiled.specializations == ({"n": 1}, {"n": 6})


@pytest.mark.parametrize(
    "in_axes, size, message",
    [
        (
            None,
            "n",
            r"^Lowered\.vmap\(mlp\): axis_size='n' is a symbol, but in_axes maps no argument, "
            r"so no call could give its size; map an argument, or give an int$",
        ),
        (
            0,
            "2n",
            r"^Lowered\.vmap\(mlp\): axis_size='2n' is neither an int nor a symbol's name; give "
            r"a size, or a name such as 'n' for a symbolic one$",
        ),
    ],
)
def test_vmap_symbol_errors(mlp_loaded, in_axes, size, message):
    with pytest.raises(ValueError, match=message):
        mlp_loaded.vmap(in_axes=in_axes, axis_size=size)


# --- what is still refused, word for word -------------------------------------------------------


def test_saving_the_transform_is_refused(mlp_loaded, tmp_path):
    compiled = mlp_loaded.grad().compile().specialize(b=2)
    message = (
        r"^Compiled 'mlp_grad': serialize: the program is grad\(argnums=0, has_aux=False\) "
        r"of another, which aotkit makes per shape as it compiles each, so it has no portable "
        r"StableHLO of its own to save; save the transform specialized to each size instead "
        r"\(lowered\.specialize\(b=8\)\.compile\(\)\.save\(path\)\)$"
    )
    with pytest.raises(ValueError, match=message):
        compiled.serialize()
    with pytest.raises(ValueError, match=message):
        compiled.save(tmp_path / "grad.aotx")
    assert not (tmp_path / "grad.aotx").exists()
    # What the message says to do saves, and loads.
    mlp_loaded.grad().specialize(b=2).compile().save(tmp_path / "grad.aotx")
    args = _args(PROGRAMS["mlp"][1], 2)
    close(aotkit.load(tmp_path / "grad.aotx")(*args), jax.grad(mlp)(*args))


@pytest.mark.parametrize(
    "view, what",
    [
        (lambda low: low.module, "module"),
        (lambda low: low.compiler_ir(), "module"),
        (lambda low: low.as_bytecode(), r"as_bytecode\(\)"),
        (lambda low: low.as_portable_artifact(), r"as_portable_artifact\(\)"),
    ],
)
def test_the_transform_has_no_module_of_its_own(mlp_loaded, view, what):
    with pytest.raises(
        ValueError,
        match=rf"^Lowered 'mlp_jvp': {what}: the program is jvp\(\) of another, which aotkit "
        r"makes per shape as it compiles each, so it has no module of its own; specialize it "
        rf"to one size per symbol first \(lowered\.specialize\(b=8\)\.{what}\), or see "
        r"as_text\(\) for the module it transforms$",
    ):
        view(mlp_loaded.jvp())


def test_errors_are_raised_by_the_transform_not_the_call(mlp_loaded):
    per_example = mlp_loaded.vmap(in_axes=(None, None, 0), axis_size=2)
    with pytest.raises(
        TypeError,
        match=r"^Lowered\.grad\(mlp_vmap\): grad is defined for functions with a scalar "
        r"output, but the output has shape \(2,\); reduce it to a scalar \(a sum or mean\) or "
        r"use aotkit\.vjp or aotkit\.jacrev$",
    ):
        per_example.grad()
    with pytest.raises(
        ValueError,
        match=r"^Lowered\.vmap\(mlp\): in_axes 3 is out of range for an argument of rank 2; "
        r"choose an axis in \[-3, 3\)$",
    ):
        mlp_loaded.vmap(in_axes=(None, None, 3), axis_size=2)


def test_an_integer_argument_has_no_gradient():
    (b,) = export.symbolic_shape("b")
    data = bytes(
        export.export(jax.jit(lambda x, n: jnp.sum(x * n)), platforms=lane.EXPORT_PLATFORMS)(
            jax.ShapeDtypeStruct((b,), jnp.float32), jax.ShapeDtypeStruct((b,), jnp.int32)
        ).serialize()
    )
    loaded = aotkit.load_module(data)
    with pytest.raises(
        TypeError,
        match=r"^Lowered\.grad\(<lambda>\): grad requires real- or complex-valued inputs \(a "
        r"float or complex dtype\), but argument 1 has a leaf of dtype i32; pass "
        r"allow_int=True for a float0 zero gradient, or leave the argument out of argnums$",
    ):
        loaded.grad(argnums=1)
    # Its cotangent is None, as the static program's (vjp) and its tangent (jvp).
    assert repr(loaded.vjp()).endswith("-> (out[0]: f32[], out[1][0]: f32[b])>")
    x, n = np.arange(4, dtype=np.float32), np.arange(4, dtype=np.int32)
    out, (ct_x, ct_n) = loaded.vjp().compile()((x, n), np.float32(2))
    close(out, np.float32(np.sum(x * n)))
    close(ct_x, (2 * n).astype(np.float32))
    assert ct_n is None


def test_a_symbolic_output_that_is_not_a_scalar_is_refused():
    data = _export(lambda x: jnp.tanh(x), [("b",)])
    with pytest.raises(
        TypeError,
        match=r"^Lowered\.grad\(<lambda>\): grad is defined for functions with a scalar "
        r"output, but the output has shape \(b,\); reduce it to a scalar",
    ):
        aotkit.load_module(data).grad()


def test_a_transform_inside_a_symbolic_trace_names_both_ways():
    with pytest.raises(
        NotImplementedError,
        match=r"has a dynamic shape; aotkit's transform rules run on static shapes: transform "
        r"the symbolic program as a stage instead",
    ):
        aotkit.jit(aotkit.grad(lambda x: anp.sum(anp.tanh(x)))).lower(aotkit.spec("f32[b]"))


@pytest.mark.parametrize(
    "name, fn",
    [
        ("cumsum", lambda x: anp.sum(anp.cumsum(x) * x)),
        ("cumprod", lambda x: anp.sum(anp.cumprod(x))),
        ("running_max", lambda x: anp.sum(np.maximum.accumulate(x) * x)),
    ],
)
def test_gradient_of_a_scan_along_a_symbolic_axis(name, fn):
    """A scan along a symbolic axis is a loop whose counter doubles (k = 1, 2, 4, ... while
    k < n): reverse mode refused it as a loop "whose trip count depends on the data". Its
    trip count, ceil(log2 n), is known once the shape is; the gradient equals the static
    program's at each size."""
    grad = aotkit.jit(fn).lower(aotkit.spec("f32[n]")).grad().compile()
    for n in (1, 2, 5, 8):
        x = np.linspace(0.5, 2.0, n).astype(np.float32)
        want = aotkit.grad(fn)(x)
        got = grad(x)
        assert got.dtype == want.dtype == np.float32
        np.testing.assert_allclose(got, want, rtol=1e-5, err_msg=f"{name} at n={n}")
