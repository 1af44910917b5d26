"""Dot and convolution precision: `precision=` in JAX's spellings on every product and
convolution entry point, the scoped default (`aotkit.default_matmul_precision`), the global
setting (`default_matmul_precision`, `AOTKIT_DEFAULT_MATMUL_PRECISION`), the jit caches that
key on them, `preferred_element_type`, and transforms that keep each op's precision.

On the CPU every precision computes float32 as float32, so values are checked against
NumPy (and `jax.jit` at the same precision); what a precision changes is the module's
`precision_config`, which the text checks read.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import aotkit
import aotkit.numpy as anp
from aotkit import config, lax, nn

BF16 = np.dtype(ml_dtypes.bfloat16)
F32 = np.dtype(np.float32)
RNG = np.random.default_rng(7)
A = RNG.uniform(-2, 2, (4, 5)).astype(F32)
B = RNG.uniform(-2, 2, (5, 3)).astype(F32)
V = RNG.uniform(-2, 2, (5,)).astype(F32)
W = RNG.uniform(-2, 2, (5,)).astype(F32)
IMG = RNG.uniform(-1, 1, (2, 3, 6, 6)).astype(F32)  # NCHW
KER = RNG.uniform(-1, 1, (4, 3, 3, 3)).astype(F32)  # OIHW
NHWC = RNG.uniform(-1, 1, (2, 6, 6, 3)).astype(F32)
HWIO = RNG.uniform(-1, 1, (3, 3, 3, 4)).astype(F32)

# A dot prints its precision as `precision = [HIGH, HIGH]`; a convolution as
# `precision_config = [#stablehlo<precision HIGH>, #stablehlo<precision HIGH>]`.
_PRECISION = re.compile(
    r"precision = \[(\w+), (\w+)\]"
    r"|precision_config = \[#stablehlo<precision (\w+)>, #stablehlo<precision (\w+)>\]"
)
_OPS = re.compile(r"stablehlo\.(dot_general|convolution)\b")


def _found(text: str) -> list[tuple[str, str]]:
    return [(m[0] or m[2], m[1] or m[3]) for m in _PRECISION.findall(text)]


_DOT = re.compile(r"stablehlo\.dot_general (%\w+), (%\w+), .*precision = \[(\w+), (\w+)\]")


def _by_operand(text: str) -> list:
    """Each dot as the precision it gives each operand: the arguments by name (JAX and
    aotkit both print them %arg0, %arg1), any other value as "g" (the cotangent)."""

    def role(v):
        return v if v.startswith("%arg") else "g"

    return sorted(tuple(sorted([(role(x), p), (role(y), q)])) for x, y, p, q in _DOT.findall(text))


def _precisions(text: str) -> list[tuple[str, str]]:
    """The precision pair of every dot and convolution of a module's text."""
    found = _found(text)
    assert len(found) == len(_OPS.findall(text)) > 0, text
    return found


@pytest.fixture(autouse=True)
def _global_precision_restored():
    before = config.get("default_matmul_precision")
    yield
    config.update("default_matmul_precision", before)


# Each entry point: (its name, a function of `precision` to trace, its operands, NumPy's or
# JAX's answer). A product takes `precision=` itself; `None` traces it without one.
def _kw(precision) -> dict:
    return {} if precision is None else {"precision": precision}


def _conv_want(x, w, dn=("NCHW", "OIHW", "NCHW"), **kwargs):
    return np.asarray(
        jax.lax.conv_general_dilated(
            x, w, (1, 1), "SAME", dimension_numbers=dn, precision="highest", **kwargs
        )
    )


ENTRY_POINTS = [
    ("matmul", lambda p: lambda a, b: anp.matmul(a, b, **_kw(p)), (A, B), A @ B),
    (
        "matmul batched",
        lambda p: lambda a, b: anp.matmul(a, b, **_kw(p)),
        (A[None], B),
        (A @ B)[None],
    ),
    ("dot", lambda p: lambda a, b: anp.dot(a, b, **_kw(p)), (A, B), A @ B),
    ("einsum", lambda p: lambda a, b: anp.einsum("ij,jk->ki", a, b, **_kw(p)), (A, B), (A @ B).T),
    ("tensordot", lambda p: lambda a, b: anp.tensordot(a, b, 1, **_kw(p)), (A, B), A @ B),
    ("inner", lambda p: lambda a, b: anp.inner(a, b, **_kw(p)), (A, B.T), A @ B),
    ("vdot", lambda p: lambda a, b: anp.vdot(a, b, **_kw(p)), (V, W), np.vdot(V, W)),
    (
        "lax.dot_general",
        lambda p: lambda a, b: lax.dot_general(a, b, (((1,), (0,)), ((), ())), **_kw(p)),
        (A, B),
        A @ B,
    ),
    ("lax.dot", lambda p: lambda a, b: lax.dot(a, b, **_kw(p)), (A, V), A @ V),
    (
        "lax.batch_matmul",
        lambda p: lambda a, b: lax.batch_matmul(a, b, **_kw(p)),
        (A[None], B[None]),
        (A @ B)[None],
    ),
    (
        "lax.conv_general_dilated",
        lambda p: lambda x, w: lax.conv_general_dilated(x, w, (1, 1), "SAME", **_kw(p)),
        (IMG, KER),
        _conv_want(IMG, KER),
    ),
    (
        "lax.conv",
        lambda p: lambda x, w: lax.conv(x, w, (1, 1), "SAME", **_kw(p)),
        (IMG, KER),
        _conv_want(IMG, KER),
    ),
    (
        "nn.conv_general_dilated NHWC",
        lambda p: (
            lambda x, w: nn.conv_general_dilated(
                x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"), **_kw(p)
            )
        ),
        (NHWC, HWIO),
        _conv_want(NHWC, HWIO, ("NHWC", "HWIO", "NHWC")),
    ),
    (
        "nn.conv_transpose",
        lambda p: lambda x, w: nn.conv_transpose(x, w, (2, 2), "SAME", **_kw(p)),
        (NHWC, HWIO),
        np.asarray(jax.lax.conv_transpose(NHWC, HWIO, (2, 2), "SAME", precision="highest")),
    ),
]
ENTRY_IDS = [e[0] for e in ENTRY_POINTS]

P = jax.lax.Precision
SPELLINGS = [
    ("default", ("DEFAULT", "DEFAULT")),
    ("high", ("HIGH", "HIGH")),
    ("highest", ("HIGHEST", "HIGHEST")),
    ("bfloat16", ("DEFAULT", "DEFAULT")),
    ("tensorfloat32", ("HIGH", "HIGH")),
    ("float32", ("HIGHEST", "HIGHEST")),
    ("fastest", ("DEFAULT", "DEFAULT")),
    ("bfloat16_3x", ("HIGH", "HIGH")),
    ("HIGH", ("HIGH", "HIGH")),
    (P.DEFAULT, ("DEFAULT", "DEFAULT")),
    (P.HIGH, ("HIGH", "HIGH")),
    (P.HIGHEST, ("HIGHEST", "HIGHEST")),
    (("default", "highest"), ("DEFAULT", "HIGHEST")),
    ((P.HIGH, "float32"), ("HIGH", "HIGHEST")),
    (["highest", P.DEFAULT], ("HIGHEST", "DEFAULT")),
]
SPELLING_IDS = [repr(s) for s, _ in SPELLINGS]


def _text(fn, *args) -> str:
    return aotkit.lower(fn, *args, autograph=False).as_text()


# --- precision= in the module ---------------------------------------------------------------


@pytest.mark.parametrize("spelling,pair", SPELLINGS, ids=SPELLING_IDS)
@pytest.mark.parametrize("entry", ENTRY_POINTS, ids=ENTRY_IDS)
def test_precision_spelling_reaches_the_module(entry, spelling, pair):
    _, make, args, _ = entry
    assert set(_precisions(_text(make(spelling), *args))) == {pair}


@pytest.mark.parametrize("entry", ENTRY_POINTS, ids=ENTRY_IDS)
def test_no_precision_is_aotkits_default_highest(entry):
    _, make, args, _ = entry
    assert config.get("default_matmul_precision") == "highest"
    assert set(_precisions(_text(make(None), *args))) == {("HIGHEST", "HIGHEST")}


@pytest.mark.parametrize("entry", ENTRY_POINTS, ids=ENTRY_IDS)
def test_no_precision_takes_the_scoped_default(entry):
    _, make, args, _ = entry
    with aotkit.default_matmul_precision("bfloat16"):
        assert set(_precisions(_text(make(None), *args))) == {("DEFAULT", "DEFAULT")}
        # The op's own precision wins over the scope's.
        assert set(_precisions(_text(make("high"), *args))) == {("HIGH", "HIGH")}


def test_the_matmul_operator_takes_the_scoped_default():
    f = lambda a, b: a @ b  # noqa: E731
    assert _precisions(_text(f, A, B)) == [("HIGHEST", "HIGHEST")]
    with aotkit.default_matmul_precision("tensorfloat32"):
        assert _precisions(_text(f, A, B)) == [("HIGH", "HIGH")]
    # np.matmul on tracers reaches aotkit's matmul through NumPy's dispatch.
    with aotkit.default_matmul_precision("default"):
        assert _precisions(_text(lambda a, b: np.matmul(a, b), A, B)) == [("DEFAULT", "DEFAULT")]


def test_two_precisions_of_one_product_in_one_trace():
    # The C bind's plans key on the op's parameters: the same product of the same operand
    # types at two precisions must make two different ops (and a third, the default).
    def f(a, b):
        return anp.matmul(a, b, precision="default") + anp.matmul(a, b, precision="high") + a @ b

    assert _precisions(_text(f, A, B)) == [
        ("DEFAULT", "DEFAULT"),
        ("HIGH", "HIGH"),
        ("HIGHEST", "HIGHEST"),
    ]


# --- values and dtypes on the CPU -------------------------------------------------------------


@pytest.mark.parametrize("spelling", ["default", "highest"])
@pytest.mark.parametrize("entry", ENTRY_POINTS, ids=ENTRY_IDS)
def test_values_match_numpy_at_each_precision(entry, spelling):
    _, make, args, want = entry
    got = aotkit.jit(make(spelling))(*args)
    assert got.dtype == F32
    np.testing.assert_allclose(np.asarray(got), want, rtol=2e-5, atol=2e-5)


def test_values_match_jax_jit_under_the_same_default():
    def f(a, b):
        return jnp.tanh(a @ b) @ b.T

    g = lambda a, b: anp.tanh(a @ b) @ b.T  # noqa: E731
    for spelling in ("default", "highest"):
        with jax.default_matmul_precision(spelling), aotkit.default_matmul_precision(spelling):
            want = jax.jit(f)(A, B)
            got = aotkit.jit(g)(A, B)
        assert got.dtype == want.dtype == F32
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=2e-5, atol=2e-5)


# --- preferred_element_type -----------------------------------------------------------------

I8A = RNG.integers(-128, 128, (4, 5)).astype(np.int8)
I8B = RNG.integers(-128, 128, (5, 3)).astype(np.int8)
I8V, I8W = I8A[0], I8B[:, 0]

PREFERRED = [
    ("matmul", lambda a, b, t: anp.matmul(a, b, preferred_element_type=t), (I8A, I8B)),
    ("dot", lambda a, b, t: anp.dot(a, b, preferred_element_type=t), (I8A, I8B)),
    (
        "einsum",
        lambda a, b, t: anp.einsum("ij,jk->ik", a, b, preferred_element_type=t),
        (I8A, I8B),
    ),
    ("tensordot", lambda a, b, t: anp.tensordot(a, b, 1, preferred_element_type=t), (I8A, I8B)),
    ("inner", lambda a, b, t: anp.inner(a, b, preferred_element_type=t), (I8A, I8B.T)),
    ("vdot", lambda a, b, t: anp.vdot(a, b, preferred_element_type=t), (I8V, I8W)),
    (
        "lax.dot_general",
        lambda a, b, t: lax.dot_general(a, b, (((1,), (0,)), ((), ())), preferred_element_type=t),
        (I8A, I8B),
    ),
    ("lax.dot", lambda a, b, t: lax.dot(a, b, preferred_element_type=t), (I8A, I8B)),
]
PREFERRED_IDS = [p[0] for p in PREFERRED]


def _wide_oracle(name, a, b, dtype):
    a, b = a.astype(dtype), b.astype(dtype)
    return np.vdot(a, b) if name == "vdot" else np.inner(a, b) if name == "inner" else a @ b


@pytest.mark.parametrize("entry", PREFERRED, ids=PREFERRED_IDS)
def test_preferred_int8_products_accumulate_in_int32(entry):
    name, fn, (a, b) = entry
    f = lambda x, y: fn(x, y, np.int32)  # noqa: E731
    got = aotkit.jit(f)(a, b)
    assert got.dtype == np.int32
    want = _wide_oracle(name, a, b, np.int32)
    np.testing.assert_array_equal(np.asarray(got), want)
    # In int8 the sums would wrap: the products really accumulate in int32.
    assert np.abs(want).max() > 127
    # One dot of int8 operands with an int32 result (JAX's lowering of the same).
    assert re.search(
        r"stablehlo\.dot_general .*\(tensor<[0-9x]*xi8>, tensor<[0-9x]*xi8>\) ->", _text(f, a, b)
    )


@pytest.mark.parametrize("entry", PREFERRED, ids=PREFERRED_IDS)
def test_preferred_bfloat16_products_give_float32(entry):
    name, fn, (a, b) = entry
    a, b = (a / 16).astype(BF16), (b / 16).astype(BF16)
    got = aotkit.jit(lambda x, y: fn(x, y, np.float32))(a, b)
    assert got.dtype == F32
    want = _wide_oracle(name, a, b, F32)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6, atol=1e-6)


def test_preferred_int8_to_float32_and_conv_preferred():
    got = aotkit.jit(lambda a, b: anp.matmul(a, b, preferred_element_type=np.float32))(I8A, I8B)
    assert got.dtype == F32
    np.testing.assert_array_equal(np.asarray(got), I8A.astype(F32) @ I8B.astype(F32))
    x, w = (IMG * 8).astype(BF16), (KER * 8).astype(BF16)
    conv = lambda x, w: lax.conv(x, w, (1, 1), "SAME", preferred_element_type=np.float32)  # noqa: E731
    got = aotkit.jit(conv)(x, w)
    want = jax.lax.conv(
        x, w, (1, 1), "SAME", preferred_element_type=np.float32, precision="highest"
    )
    assert got.dtype == want.dtype == F32
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize(
    "a,pref",
    [(A, BF16), (A, np.int32), (I8A, np.uint32), (A.astype(np.complex64), F32)],
    ids=["f32->bf16", "f32->i32", "i8->u32", "c64->f32"],
)
def test_preferred_element_type_refused(a, pref):
    pref_name = np.dtype(pref).name
    with pytest.raises(
        TypeError,
        match=rf"^matmul \(at .*\): preferred_element_type {pref_name} does not hold products of "
        rf"{a.dtype.name} operands; give a dtype of their kind at least as wide \(integers may "
        r"also accumulate in a float\), or None$",
    ):
        aotkit.lower(lambda x: anp.matmul(x, x.T, preferred_element_type=pref), a)


# --- spellings refused ----------------------------------------------------------------------

_ACCEPTED = re.escape(config.PRECISION_SPELLINGS)
BAD = ["medium", "", 3, ("high",), ("high", "high", "high"), ("high", None), P]


@pytest.mark.parametrize("bad", BAD, ids=repr)
@pytest.mark.parametrize(
    "entry", [e for e in ENTRY_POINTS if e[0] != "matmul batched"], ids=lambda e: e[0]
)
def test_bad_precision_names_op_value_and_spellings(entry, bad):
    name, make, args, _ = entry
    op = {
        "lax.conv": "conv_general_dilated",
        "lax.conv_general_dilated": "conv_general_dilated",
        "nn.conv_general_dilated NHWC": "conv_general_dilated",
        "nn.conv_transpose": "conv_general_dilated",
        "lax.batch_matmul": "dot_general",
        "lax.dot": "dot_general",
        "lax.dot_general": "dot_general",
    }.get(name, name)
    with pytest.raises(
        ValueError,
        match=rf"^{op} \(at .*\): unknown precision {re.escape(repr(bad))}; use {_ACCEPTED}$",
    ):
        aotkit.lower(make(bad), *args, autograph=False)


@pytest.mark.parametrize("bad", BAD, ids=repr)
def test_bad_scoped_and_global_defaults_are_refused(bad):
    with pytest.raises(
        ValueError,
        match=rf"^aotkit.default_matmul_precision: unknown precision {re.escape(repr(bad))}; "
        rf"use {_ACCEPTED}$",
    ):
        aotkit.default_matmul_precision(bad)
    with pytest.raises(
        ValueError,
        match=r"^aotkit.config.update\('default_matmul_precision'\): unknown precision "
        rf"{re.escape(repr(bad))}; use {_ACCEPTED}$",
    ):
        config.update("default_matmul_precision", bad)
    assert config.get("default_matmul_precision") == "highest"
    assert config.matmul_precision() == ("HIGHEST", "HIGHEST")


def _child(code: str, value: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "AOTKIT_DEFAULT_MATMUL_PRECISION": value, "JAX_PLATFORMS": "cpu"}
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
    )


def test_environment_variable_sets_the_global_default():
    code = (
        "import numpy as np, aotkit, aotkit.numpy as anp\n"
        "x = np.ones((2, 2), np.float32)\n"
        "print(aotkit.config.get('default_matmul_precision'))\n"
        "print(aotkit.lower(lambda a: a @ a, x).as_text())\n"
    )
    done = _child(code, "tensorfloat32")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("tensorfloat32\n")
    assert "precision = [HIGH, HIGH]" in done.stdout


def test_bad_environment_variable_is_refused():
    done = _child("import aotkit.config", "bf16")
    assert done.returncode == 1, done.stderr  # an exception, not a signal
    assert (
        f"ValueError: AOTKIT_DEFAULT_MATMUL_PRECISION: unknown precision 'bf16'; use "
        f"{config.PRECISION_SPELLINGS}" in done.stderr
    )


# --- the scoped and the global default ------------------------------------------------------


def test_scopes_nest_and_restore_even_on_exceptions():
    assert config.matmul_precision() == ("HIGHEST", "HIGHEST")
    with aotkit.default_matmul_precision("default"):
        assert config.matmul_precision() == ("DEFAULT", "DEFAULT")
        with pytest.raises(RuntimeError, match="^inside$"):
            with aotkit.default_matmul_precision(("high", "highest")):
                assert config.matmul_precision() == ("HIGH", "HIGHEST")
                raise RuntimeError("inside")
        assert config.matmul_precision() == ("DEFAULT", "DEFAULT")
        with aotkit.default_matmul_precision(None):  # the global setting
            assert config.matmul_precision() == ("HIGHEST", "HIGHEST")
        assert config.matmul_precision() == ("DEFAULT", "DEFAULT")
    assert config.matmul_precision() == ("HIGHEST", "HIGHEST")


def test_scope_as_a_decorator():
    @aotkit.default_matmul_precision("high")
    def traced():
        return _text(lambda a, b: a @ b, A, B)

    assert _precisions(traced()) == [("HIGH", "HIGH")]
    assert config.matmul_precision() == ("HIGHEST", "HIGHEST")


def test_scope_holds_for_its_thread_only():
    seen = {}

    def other():
        seen["other"] = config.matmul_precision()
        seen["text"] = _text(lambda a, b: a @ b, A, B)

    with aotkit.default_matmul_precision("default"):
        t = threading.Thread(target=other)
        t.start()
        t.join()
        assert config.matmul_precision() == ("DEFAULT", "DEFAULT")
    assert seen["other"] == ("HIGHEST", "HIGHEST")
    assert _precisions(seen["text"]) == [("HIGHEST", "HIGHEST")]


def test_global_setting_and_scope_over_it():
    config.update("default_matmul_precision", "bfloat16")
    assert config.get("default_matmul_precision") == "bfloat16"
    assert _precisions(_text(lambda a, b: a @ b, A, B)) == [("DEFAULT", "DEFAULT")]
    with aotkit.default_matmul_precision("highest"):
        assert _precisions(_text(lambda a, b: a @ b, A, B)) == [("HIGHEST", "HIGHEST")]
    config.update("default_matmul_precision", None)  # aotkit's own default
    assert config.get("default_matmul_precision") == "highest"
    assert config.matmul_precision() == ("HIGHEST", "HIGHEST")


# --- the jit caches -------------------------------------------------------------------------


def test_jit_traces_once_per_default_in_force():
    def f(a, b):
        return a @ b

    jf = aotkit.jit(f)
    jf(A, B)
    jf(A, B)
    with aotkit.default_matmul_precision("default"):
        # A call (not only .lower): the native dispatch in front of jit keys on it too.
        out = jf(A, B)
        assert jf.cache_info().traces == 2
        text_default = jf.lower(A, B).as_text()
    assert jf.cache_info().traces == 2
    assert out.dtype == F32
    jf(A, B)  # back to the first program: no new trace
    assert jf.cache_info().traces == 2
    assert _precisions(text_default) == [("DEFAULT", "DEFAULT")]
    assert _precisions(jf.lower(A, B).as_text()) == [("HIGHEST", "HIGHEST")]
    config.update("default_matmul_precision", "high")
    jf(A, B)
    assert jf.cache_info().traces == 3
    assert _precisions(jf.lower(A, B).as_text()) == [("HIGH", "HIGH")]


# --- transforms keep each op's precision --------------------------------------------------


def _loss(a, b):
    return anp.sum(anp.tanh(a @ b) @ b.T)


def _conv_loss(x, w):
    return anp.sum(lax.conv(x, w, (1, 1), "SAME") ** 2)


TRANSFORMED = [
    ("grad matmul", lambda: aotkit.grad(_loss, argnums=(0, 1)), (A, B)),
    ("vmap matmul", lambda: aotkit.vmap(lambda a, b: a @ b, in_axes=(0, None)), (A[None], B)),
    ("vmap both", lambda: aotkit.vmap(lambda a, b: a @ b), (A[None], B[None])),
    ("vmap grad", lambda: aotkit.vmap(aotkit.grad(_loss), in_axes=(0, None)), (A[None], B)),
    (
        "jvp matmul",
        lambda: lambda a, b: aotkit.jvp(lambda x: _loss(x, b), (a,), (a,)),
        (A, B),
    ),
    ("grad conv", lambda: aotkit.grad(_conv_loss, argnums=(0, 1)), (IMG, KER)),
    (
        "vmap conv",
        lambda: aotkit.vmap(lambda x, w: lax.conv(x, w, (1, 1), "SAME")),
        (IMG[None], KER[None]),
    ),
]


@pytest.mark.parametrize(
    "spelling,pair", [("default", ("DEFAULT",) * 2), ("highest", ("HIGHEST",) * 2)]
)
@pytest.mark.parametrize("case", TRANSFORMED, ids=[c[0] for c in TRANSFORMED])
def test_transforms_keep_the_precision_of_each_op(case, spelling, pair):
    _, make, args = case
    with aotkit.default_matmul_precision(spelling):
        text = aotkit.jit(make()).lower(*args).as_text()
    assert set(_precisions(text)) == {pair}


def test_transforms_keep_an_ops_own_precision_and_its_pair_order():
    def loss(a, b):
        return anp.sum(anp.matmul(a, b, precision=("high", "highest")))

    with aotkit.default_matmul_precision("default"):
        text = aotkit.jit(aotkit.grad(loss, argnums=(0, 1))).lower(A, B).as_text()
    want = (
        jax.jit(
            jax.grad(lambda a, b: jnp.sum(jnp.matmul(a, b, precision=("high", "highest"))), (0, 1))
        )
        .lower(A, B)
        .as_text()
    )
    # Each cotangent's dot gives each operand the precision JAX's rule gives it (the two
    # may print the operands in another order).
    assert set(_precisions(text)) <= {("HIGH", "HIGHEST"), ("HIGHEST", "HIGH")}
    assert _by_operand(text) == _by_operand(want)
    assert len(_by_operand(text)) == 2


def test_grad_values_match_jax_at_each_precision():
    for spelling in ("default", "highest"):
        with aotkit.default_matmul_precision(spelling), jax.default_matmul_precision(spelling):
            got = aotkit.grad(_loss, argnums=(0, 1))(A, B)
            want = jax.grad(lambda a, b: jnp.sum(jnp.tanh(a @ b) @ b.T), (0, 1))(A, B)
        for g, w in zip(got, want, strict=True):
            assert g.dtype == F32
            np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-4, atol=1e-4)


# --- JAX programs and loaded modules keep their own precision ------------------------------


def test_jax_programs_keep_their_precision_under_any_default():
    def f(a, b):
        return jnp.sum(jnp.dot(a, b, precision=("high", "highest")) @ b.T)

    want = jax.jit(f).lower(A, B).as_text()
    for spelling in ("default", "highest"):
        with aotkit.default_matmul_precision(spelling):
            lowered = aotkit.jit(f, frontend="jax").lower(A, B)
            assert _precisions(lowered.as_text()) == _found(want)
            grad_text = lowered.grad(argnums=(0, 1)).as_text()
        want_grad = jax.jit(jax.grad(f, (0, 1))).lower(A, B).as_text()
        assert len(_precisions(grad_text)) == len(_found(want_grad))
        assert _by_operand(grad_text) == _by_operand(want_grad) != []


_T = "(tensor<4x5xf32>, tensor<5x3xf32>) -> tensor<4x3xf32>"
_LOADED = f"""
func.func public @main(%a: tensor<4x5xf32>, %b: tensor<5x3xf32>) -> tensor<4x3xf32> {{
  %0 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0], precision = [HIGH, DEFAULT]
    : {_T}
  %1 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] : {_T}
  %2 = stablehlo.add %0, %1 : tensor<4x3xf32>
  return %2 : tensor<4x3xf32>
}}
"""


def test_loaded_modules_keep_their_precision():
    with aotkit.default_matmul_precision("highest"):
        lowered = aotkit.load_module(_LOADED.encode())
        text = lowered.as_text()
        batched = lowered.vmap(in_axes=(0, None), axis_size=2).as_text()
    for t in (text, batched):
        assert _found(t) == [("HIGH", "DEFAULT")]
        assert len(_OPS.findall(t)) == 2  # the dot without one still has none
    np.testing.assert_allclose(np.asarray(lowered.compile()(A, B)), 2 * (A @ B), rtol=1e-5)


def test_linalg_namespace_products_take_precision():
    f = lambda a, b: anp.linalg.matmul(a, b, precision="high")  # noqa: E731
    g = lambda a, b: anp.linalg.tensordot(a, b, axes=1, precision=("default", "high"))  # noqa: E731
    assert _precisions(_text(f, A, B)) == [("HIGH", "HIGH")]
    assert _precisions(_text(g, A, B)) == [("DEFAULT", "HIGH")]
    got = aotkit.jit(lambda a, b: anp.linalg.matmul(a, b, preferred_element_type=np.int32))(
        I8A, I8B
    )
    assert got.dtype == np.int32
    np.testing.assert_array_equal(np.asarray(got), I8A.astype(np.int32) @ I8B.astype(np.int32))


def test_transforms_of_products_with_preferred_element_type():
    a, b = (A / 2).astype(BF16), (B / 2).astype(BF16)

    def f(x, y):
        return anp.sum(anp.tanh(anp.matmul(x, y, preferred_element_type=np.float32)))

    def jf(x, y):
        return jnp.sum(jnp.tanh(jnp.matmul(x, y, preferred_element_type=jnp.float32)))

    got, want = aotkit.grad(f, argnums=(0, 1))(a, b), jax.grad(jf, (0, 1))(a, b)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype == BF16
        np.testing.assert_allclose(np.asarray(g, F32), np.asarray(w, F32), rtol=1e-2, atol=1e-2)
    batched = aotkit.vmap(lambda x, y: anp.matmul(x, y, preferred_element_type=np.int32))
    out = batched(I8A[None], I8B[None])
    assert out.dtype == np.int32
    np.testing.assert_array_equal(np.asarray(out)[0], I8A.astype(np.int32) @ I8B.astype(np.int32))


LAX_ERRORS = [
    pytest.param(
        lambda a, b: lax.dot_general(a, b, ((1,), (0,))),
        ValueError,
        r"^dot_general \(at .*\): dimension_numbers \(\(1,\), \(0,\)\) must be "
        r"\(\(lhs_contracting, rhs_contracting\), \(lhs_batch, rhs_batch\)\)$",
        id="dimension-numbers-shape",
    ),
    pytest.param(
        lambda a, b: lax.dot_general(a, b, (((2,), (0,)), ((), ()))),
        ValueError,
        r"^dot_general \(at .*\): lhs_contracting \(2,\) must be distinct dimensions in "
        r"\[0, 2\) of its operand$",
        id="dimension-out-of-range",
    ),
    pytest.param(
        lambda a, b: lax.dot_general(a, b, (((1,), (0,)), ((1,), (0,)))),
        ValueError,
        r"^dot_general \(at .*\): a dimension is both contracting and batch in ",
        id="contracting-and-batch",
    ),
    pytest.param(
        lambda a, b: lax.dot_general(a, b, (((0,), (0,)), ((), ()))),
        ValueError,
        r"^dot_general \(at .*\): contracting dimensions \(0,\) of lhs \(4, 5\) and \(0,\) of "
        r"rhs \(5, 3\) have different sizes$",
        id="contracting-sizes",
    ),
    pytest.param(
        lambda a, b: lax.dot(a, a),
        TypeError,
        r"^dot \(at .*\): incompatible shapes for dot: got \(4, 5\) and \(4, 5\); lhs and rhs "
        r"have 1 or 2 dimensions, lhs's last matching rhs's first$",
        id="dot-shapes",
    ),
    pytest.param(
        lambda a, b: lax.batch_matmul(a[None], b),
        ValueError,
        r"^batch_matmul \(at .*\): lhs \(1, 4, 5\) and rhs \(5, 3\) must have the same number of "
        r"dimensions, at least 2, and the same batch dimensions before the last two$",
        id="batch-matmul-batch",
    ),
]


@pytest.mark.parametrize("fn,exc,match", LAX_ERRORS)
def test_lax_product_errors(fn, exc, match):
    with pytest.raises(exc, match=match):
        aotkit.lower(fn, A, B, autograph=False)
