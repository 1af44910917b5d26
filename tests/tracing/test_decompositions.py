"""numpy.linalg factorizations and solvers (LAPACK custom calls) against NumPy, on cpu.

Results are compared with NumPy directly where they are unique (solutions, inverses,
determinants, Cholesky and R factors, eigen- and singular values); eigenvectors and
singular vectors, unique only up to sign or phase, are checked by reconstruction and
orthonormality. Like NumPy, aotkit computes float32 and complex64 in double precision and
rounds the results, so they agree to the last bits of the result dtype. The interpreter
cannot run custom calls: every LAPACK-based function is checked to be refused there with an error
naming it. The custom calls themselves are compared with the ones JAX emits.
"""

from __future__ import annotations

import functools
import subprocess
import sys
import textwrap
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jaxlib.mlir import ir

import aotkit
import aotkit.numpy as anp
from aotkit.errors import CompileError
from tests.helpers import assert_matches, ir_context, run_on

DTYPES = [np.dtype(d) for d in ("float32", "float64", "complex64", "complex128")]
RNG = np.random.default_rng(11)
_check = functools.partial(
    assert_matches,
    tolerances={
        np.dtype(np.float32): (2e-4, 2e-5),
        np.dtype(np.complex64): (2e-4, 2e-5),
        np.dtype(np.float64): (1e-9, 1e-10),
        np.dtype(np.complex128): (1e-9, 1e-10),
    },
)


def _random(dtype, shape, rng=RNG) -> np.ndarray:
    dtype = np.dtype(dtype)
    x = rng.normal(size=shape)
    if dtype.kind == "c":
        x = x + 1j * rng.normal(size=shape)
    return x.astype(dtype)


def _well_conditioned(dtype, shape, rng=RNG) -> np.ndarray:
    n = shape[-1]
    return (_random(dtype, shape, rng) + 2 * n * np.eye(n)).astype(dtype)


def _hpd(dtype, shape, rng=RNG) -> np.ndarray:
    """Hermitian positive definite matrices."""
    x = _random(dtype, shape, rng)
    return (x @ np.conj(np.swapaxes(x, -1, -2)) + shape[-1] * np.eye(shape[-1])).astype(dtype)


def _np(fn, *args, **kwargs):
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return fn(*args, **kwargs)


def _eps(dtype) -> float:
    return 1e-4 if np.dtype(dtype) in (np.float32, np.complex64) else 1e-10


def _mH(x):
    return np.conj(np.swapaxes(x, -1, -2))


# --- solvers and determinants -----------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_solve_inv_det_slogdet_match_numpy(dtype):
    a = _well_conditioned(dtype, (2, 3, 4, 4))
    b_vec = _random(dtype, (4,))
    b_mat = _random(dtype, (3, 4, 2))
    singular = np.array([[1.0, 2.0], [2.0, 4.0]], dtype)
    cases = {
        "solve vector": lambda m, a, bv, bm, s: m.linalg.solve(a[0, 0], bv),
        "solve batched vector b": lambda m, a, bv, bm, s: m.linalg.solve(a[0], bv),
        "solve matrix": lambda m, a, bv, bm, s: m.linalg.solve(a, bm),
        "inv": lambda m, a, bv, bm, s: m.linalg.inv(a),
        "det": lambda m, a, bv, bm, s: m.linalg.det(a),
        "det singular": lambda m, a, bv, bm, s: m.linalg.det(s),
        "slogdet": lambda m, a, bv, bm, s: tuple(m.linalg.slogdet(a)),
        "slogdet singular": lambda m, a, bv, bm, s: tuple(m.linalg.slogdet(s)),
        "det 1x1": lambda m, a, bv, bm, s: m.linalg.det(a[..., :1, :1]),
    }
    args = (a, b_vec, b_mat, singular)
    got = run_on("cpu", lambda *x: {k: f(anp, *x) for k, f in cases.items()}, *args)
    for k, f in cases.items():
        want = _np(f, np, *args)
        if isinstance(want, tuple):
            for i, (g, w) in enumerate(zip(got[k], want, strict=True)):
                _check(g, w, f"{k}[{i}] ({dtype})")
        else:
            _check(got[k], want, f"{k} ({dtype})")


@pytest.mark.parametrize("dtype", ["int32", "bool"])
def test_integer_and_bool_matrices_are_solved_in_float64(dtype):
    a = np.array([[3, 1], [1, 2]] if dtype != "bool" else [[1, 0], [1, 1]], dtype)
    b = np.array([1, 0], dtype)
    got = run_on("cpu", lambda a, b: (anp.linalg.solve(a, b), anp.linalg.det(a)), a, b)
    _check(got[0], np.linalg.solve(a, b), f"solve {dtype}")
    _check(got[1], np.linalg.det(a), f"det {dtype}")


@settings(max_examples=15, deadline=None)
@given(
    n=st.integers(1, 7),
    batch=st.lists(st.integers(1, 3), max_size=2).map(tuple),
    k=st.integers(1, 3),
    seed=st.integers(0, 2**16),
)
def test_solve_and_det_any_size(n, batch, k, seed):
    rng = np.random.default_rng(seed)
    a = _well_conditioned(np.float64, batch + (n, n), rng)
    b = _random(np.float64, batch + (n, k), rng)
    got = run_on("cpu", lambda a, b: (anp.linalg.solve(a, b), anp.linalg.det(a)), a, b)
    _check(got[0], np.linalg.solve(a, b), f"solve n={n} batch={batch}")
    _check(got[1], np.linalg.det(a), f"det n={n} batch={batch}")


def test_solve_of_a_singular_matrix_is_not_finite():
    # NumPy raises LinAlgError, which needs the data; the program returns inf/NaN instead.
    a = np.array([[1.0, 2.0], [2.0, 4.0]])
    got = run_on("cpu", lambda a: anp.linalg.solve(a, np.ones(2)), a)
    assert not np.isfinite(got).all()


# --- cholesky, qr -----------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_cholesky_matches_numpy(dtype):
    a = _hpd(dtype, (3, 4, 4))
    # Non-symmetric matrices: NumPy reads the lower (upper=True: the upper) triangle only.
    lower = np.tril(a[0]) + np.triu(_random(dtype, (4, 4)), 1)
    upper = np.triu(a[0]) + np.tril(_random(dtype, (4, 4)), -1)
    got = run_on(
        "cpu",
        lambda a, lo, up: (
            anp.linalg.cholesky(a),
            anp.linalg.cholesky(a, upper=True),
            anp.linalg.cholesky(lo),
            anp.linalg.cholesky(up, upper=True),
        ),
        a,
        lower,
        upper,
    )
    _check(got[0], np.linalg.cholesky(a), f"cholesky ({dtype})")
    _check(got[1], np.linalg.cholesky(a, upper=True), f"cholesky upper ({dtype})")
    _check(got[2], np.linalg.cholesky(lower), f"cholesky, lower triangle only ({dtype})")
    want = np.linalg.cholesky(upper, upper=True)
    _check(got[3], want, f"cholesky upper, upper triangle only ({dtype})")


def test_cholesky_of_a_matrix_that_is_not_positive_definite_is_nan():
    a = np.stack([np.eye(2), [[1.0, 2.0], [2.0, 1.0]]])
    got = run_on("cpu", anp.linalg.cholesky, a)
    _check(got[0], np.eye(2), "positive definite entry")
    assert np.isnan(got[1]).all()


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(5, 3), (3, 5), (2, 4, 4)], ids=str)
def test_qr_matches_numpy(shape, dtype):
    a = _random(dtype, shape)
    modes = ("reduced", "complete", "r", "raw")

    def f(x):
        return {m: anp.linalg.qr(x, mode=m) for m in modes}

    got = run_on("cpu", f, a)
    for mode in modes:
        want = np.linalg.qr(a, mode=mode)
        if mode == "r":
            _check(got[mode], want, f"qr r {shape} ({dtype})")
            continue
        for g, w, part in zip(got[mode], want, ("Q", "R"), strict=True):
            _check(g, w, f"qr {mode} {part} {shape} ({dtype})")
        if mode != "raw":
            q, r = got[mode]
            _check(q @ r, a, f"qr {mode} reconstruction {shape} ({dtype})")


def test_qr_of_empty_matrices_matches_numpy():
    for shape in ((0, 3), (3, 0)):
        a = np.zeros(shape)
        got = run_on(
            "cpu", lambda x: [anp.linalg.qr(x, mode=m) for m in ("reduced", "complete")], a
        )
        for g, mode in zip(got, ("reduced", "complete"), strict=True):
            for part, w in zip(g, np.linalg.qr(a, mode=mode), strict=True):
                _check(part, w, f"qr {mode} of {shape}")


# --- eigh, svd --------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_eigh_eigenpairs_match_numpy(dtype):
    a = _hpd(dtype, (2, 5, 5)) - 3 * np.eye(5, dtype=dtype)
    lopsided = np.tril(a[0]) + np.triu(_random(dtype, (5, 5)), 1)

    def f(x, y):
        return (
            anp.linalg.eigh(x),
            anp.linalg.eigh(y, UPLO="U"),
            anp.linalg.eigvalsh(y),
            anp.linalg.eigvalsh(y, UPLO="u"),
        )

    (w, v), (wu, vu), wl, wu2 = run_on("cpu", f, a, lopsided)
    _check(w, np.linalg.eigh(a).eigenvalues, f"eigh values ({dtype})")
    _check(wl, np.linalg.eigvalsh(lopsided), f"eigvalsh lower triangle ({dtype})")
    _check(wu2, np.linalg.eigvalsh(lopsided, UPLO="U"), f"eigvalsh upper triangle ({dtype})")
    _check(wu, np.linalg.eigh(lopsided, UPLO="U").eigenvalues, f"eigh UPLO=U ({dtype})")
    assert v.dtype == dtype and w.dtype == np.finfo(dtype).dtype
    eps = _eps(dtype)
    np.testing.assert_allclose(a @ v, v * w[..., None, :], atol=50 * eps)
    np.testing.assert_allclose(_mH(v) @ v, np.broadcast_to(np.eye(5), v.shape), atol=10 * eps)
    sym_u = np.triu(lopsided) + _mH(np.triu(lopsided, 1))
    np.testing.assert_allclose(sym_u @ vu, vu * wu[None, :], atol=50 * eps)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(5, 3), (3, 5), (2, 4, 4)], ids=str)
def test_svd_matches_numpy(shape, dtype):
    a = _random(dtype, shape)

    def f(x):
        return (
            anp.linalg.svd(x),
            anp.linalg.svd(x, full_matrices=False),
            anp.linalg.svd(x, compute_uv=False),
            anp.linalg.svdvals(x),
        )

    full_, reduced, s_only, svals = run_on("cpu", f, a)
    want_s = np.linalg.svd(a, compute_uv=False)
    for s, label in (
        (full_[1], "full"),
        (reduced[1], "reduced"),
        (s_only, "s"),
        (svals, "svdvals"),
    ):
        _check(s, want_s, f"svd {label} singular values {shape} ({dtype})")
    eps = _eps(dtype)
    m, n = shape[-2:]
    k = min(m, n)
    u, s, vh = reduced
    assert u.shape == shape[:-2] + (m, k) and vh.shape == shape[:-2] + (k, n)
    np.testing.assert_allclose((u * s[..., None, :]) @ vh, a, atol=50 * eps)
    u, s, vh = full_
    assert u.shape == shape[:-2] + (m, m) and vh.shape == shape[:-2] + (n, n)
    np.testing.assert_allclose(_mH(u) @ u, np.broadcast_to(np.eye(m), u.shape), atol=10 * eps)
    np.testing.assert_allclose(vh @ _mH(vh), np.broadcast_to(np.eye(n), vh.shape), atol=10 * eps)


def test_hermitian_svd_matches_numpy():
    a = _hpd(np.float64, (4, 4)) - 6 * np.eye(4)
    got_u, got_s, got_vh = run_on("cpu", lambda x: anp.linalg.svd(x, hermitian=True), a)
    want_u, want_s, want_vh = np.linalg.svd(a, hermitian=True)
    _check(got_s, want_s, "hermitian svd values")
    _check(got_u, want_u, "hermitian svd U")
    _check(got_vh, want_vh, "hermitian svd Vh")
    s = run_on("cpu", lambda x: anp.linalg.svd(x, compute_uv=False, hermitian=True), a)
    _check(s, np.linalg.svd(a, compute_uv=False, hermitian=True), "hermitian singular values")


def test_svd_of_empty_matrices_matches_numpy():
    a = np.zeros((0, 3), np.float32)
    got = run_on("cpu", lambda x: (anp.linalg.svd(x), anp.linalg.svd(x, compute_uv=False)), a)
    for g, w in zip(got[0], np.linalg.svd(a), strict=True):
        _check(g, w, "svd of a 0x3 matrix")
    _check(got[1], np.linalg.svd(a, compute_uv=False), "singular values of a 0x3 matrix")


# --- norms, rank, pinv, lstsq, cond, powers ---------------------------------------------------

DERIVED = {
    "norm 2": lambda m, a, b: m.linalg.norm(a[0], 2),
    "norm -2": lambda m, a, b: m.linalg.norm(a[0], -2),
    "norm nuc": lambda m, a, b: m.linalg.norm(a[0], "nuc"),
    "norm 2 axes": lambda m, a, b: m.linalg.norm(a, 2, axis=(2, 0), keepdims=True),
    "matrix_norm nuc": lambda m, a, b: m.linalg.matrix_norm(a, ord="nuc"),
    "matrix_rank": lambda m, a, b: m.linalg.matrix_rank(a),
    "matrix_rank deficient": lambda m, a, b: m.linalg.matrix_rank(b),
    "matrix_rank tol": lambda m, a, b: m.linalg.matrix_rank(a, tol=0.5),
    "matrix_rank rtol": lambda m, a, b: m.linalg.matrix_rank(a, rtol=0.1),
    "matrix_rank vector": lambda m, a, b: m.linalg.matrix_rank(a[0, 0]),
    "pinv": lambda m, a, b: m.linalg.pinv(a),
    "pinv deficient": lambda m, a, b: m.linalg.pinv(b),
    "pinv rtol": lambda m, a, b: m.linalg.pinv(b, rtol=None),
    "cond": lambda m, a, b: m.linalg.cond(a),
    "cond -2": lambda m, a, b: m.linalg.cond(a, -2),
    "cond fro": lambda m, a, b: m.linalg.cond(a[:, :3, :3], "fro"),
    "cond 1": lambda m, a, b: m.linalg.cond(a[:, :3, :3], 1),
    "cond singular": lambda m, a, b: m.linalg.cond(b[:3, :3], 1),
    "matrix_power 0": lambda m, a, b: m.linalg.matrix_power(a[:, :3, :3], 0),
    "matrix_power 5": lambda m, a, b: m.linalg.matrix_power(a[:, :3, :3], 5),
    "matrix_power -3": lambda m, a, b: m.linalg.matrix_power(a[:, :3, :3], -3),
    "multi_dot": lambda m, a, b: m.linalg.multi_dot([a[0, :, 0], a[0], a[1].T, b]),
}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_functions_built_on_decompositions_match_numpy(dtype):
    a = _random(dtype, (2, 4, 3))
    b = np.outer(np.arange(1, 5), np.arange(1, 4)).astype(dtype)  # rank 1
    got = run_on("cpu", lambda *x: {k: f(anp, *x) for k, f in DERIVED.items()}, a, b)
    for k, f in DERIVED.items():
        want = _np(f, np, a, b)
        if k == "matrix_rank vector":
            want = np.asarray(want, np.int64)  # NumPy answers a Python int here
        _check(got[k], want, f"{k} ({dtype})")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_lstsq_matches_numpy(dtype):
    tall = _random(dtype, (6, 3))
    wide = _random(dtype, (3, 5))
    y = _random(dtype, (6, 2))

    def f(a, w, b):
        return anp.linalg.lstsq(a, b), anp.linalg.lstsq(a, b[:, 0]), anp.linalg.lstsq(w, b[:3])

    got = run_on("cpu", f, tall, wide, y)
    wants = (np.linalg.lstsq(tall, y), np.linalg.lstsq(tall, y[:, 0]), np.linalg.lstsq(wide, y[:3]))
    for i, (g, w) in enumerate(zip(got, wants, strict=True)):
        for part, gp, wp in zip(("x", "residuals", "rank", "s"), g, w, strict=True):
            if part == "rank":
                assert int(gp) == int(wp), f"lstsq case {i} rank"
                continue
            _check(gp, wp, f"lstsq case {i} {part} ({dtype})")


# --- errors -----------------------------------------------------------------------------------

ERRORS = [
    (lambda a: anp.linalg.inv(a), np.linalg.LinAlgError, "Last 2 dimensions of the array must"),
    (lambda a: anp.linalg.det(a[0]), np.linalg.LinAlgError, "1-dimensional array given"),
    (lambda a: anp.linalg.inv(a[:, :2].astype(np.float16)), TypeError, "float16 is"),
    (lambda a: anp.linalg.eigh(a[:2], UPLO="X"), ValueError, "UPLO argument must be 'L' or"),
    (lambda a: anp.linalg.qr(a, mode="full"), ValueError, "Unrecognized mode 'full'"),
    (lambda a: anp.linalg.solve(a[:, :2], a[0]), ValueError, r"b of shape \(3,\) does not"),
    (lambda a: anp.linalg.matrix_rank(a, tol=1, rtol=1), ValueError, "can't be both set"),
    (lambda a: anp.linalg.pinv(a, rcond=1, rtol=1), ValueError, "can't be both set"),
    (lambda a: anp.linalg.lstsq(a, a[:1]), np.linalg.LinAlgError, "Incompatible dimensions"),
    (lambda a: anp.linalg.lstsq(a[0], a), np.linalg.LinAlgError, "a must be 2-D and b 1-D"),
    (lambda a: anp.linalg.cond(a[:0, :0]), np.linalg.LinAlgError, "not defined on empty"),
    (lambda a: anp.linalg.matrix_power(a[:2, :2], 1.5), TypeError, "exponent must be an"),
    (lambda a: anp.linalg.matrix_power(a[:2, :2], a[0, 0]), TypeError, "static Python int"),
    (lambda a: anp.linalg.matrix_power(a, 2), np.linalg.LinAlgError, "must be square"),
    (lambda a: anp.linalg.multi_dot([a]), ValueError, "Expecting at least two arrays"),
    (lambda a: anp.linalg.multi_dot([a, a[None]]), ValueError, "array 1 has 3 dimensions"),
    (lambda a: anp.linalg.multi_dot([a, a], out=a), NotImplementedError, "out= is not"),
]


@pytest.mark.parametrize("case", range(len(ERRORS)))
def test_errors(case):
    fn, exc, message = ERRORS[case]
    with pytest.raises(exc, match=message):
        aotkit.lower(fn, np.zeros((2, 3), np.float64))


# --- where LAPACK runs ------------------------------------------------------------------------

LAPACK_FUNCTIONS = {
    "cholesky": (lambda a: anp.linalg.cholesky(a), "potrf"),
    "solve": (lambda a: anp.linalg.solve(a, a), "getrf"),
    "inv": (lambda a: anp.linalg.inv(a), "getrf"),
    "det": (lambda a: anp.linalg.det(a), "getrf"),
    "slogdet": (lambda a: anp.linalg.slogdet(a), "getrf"),
    "qr": (lambda a: anp.linalg.qr(a), "geqrf"),
    "eigh": (lambda a: anp.linalg.eigh(a), "syevd"),
    "eigvalsh": (lambda a: anp.linalg.eigvalsh(a), "syevd"),
    "svd": (lambda a: anp.linalg.svd(a), "gesdd"),
    "svdvals": (lambda a: anp.linalg.svdvals(a), "gesdd"),
    "norm": (lambda a: anp.linalg.norm(a, 2), "gesdd"),
    "matrix_rank": (lambda a: anp.linalg.matrix_rank(a), "gesdd"),
    "pinv": (lambda a: anp.linalg.pinv(a), "gesdd"),
    "lstsq": (lambda a: anp.linalg.lstsq(a, a), "gesdd"),
    "cond": (lambda a: anp.linalg.cond(a), "gesdd"),
}


@pytest.mark.parametrize("name", sorted(LAPACK_FUNCTIONS))
def test_the_interpreter_refuses_lapack_functions_by_name(name):
    fn, routine = LAPACK_FUNCTIONS[name]
    lowered = aotkit.lower(fn, np.eye(2))
    with pytest.raises(
        CompileError,
        match=rf"cannot run op stablehlo.custom_call @lapack_d{routine}_ffi \(emitted by "
        rf"aotkit.numpy.linalg.{name}, which needs LAPACK\)( at [^;]*)?; use backend='cpu'",
    ):
        lowered.compile(backend="interpreter")


def _custom_calls(module: ir.Module) -> dict[str, dict[str, str]]:
    """Each custom call's attributes (as text) by target, minus what only one side emits."""
    found = {}

    def visit(op):
        if op.name == "stablehlo.custom_call":
            named = [op.attributes[i] for i in range(len(op.attributes))]
            attrs = {a.name: str(a.attr) for a in named}
            target = attrs.pop("call_target_name").strip('"')
            for skip in ("sdy.sharding_rule", "aotkit.function"):
                attrs.pop(skip, None)
            found[target] = attrs
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    return found


PAIRS = {
    "potrf": (
        lambda a: anp.linalg.cholesky(a),
        lambda a: jax.lax.linalg.cholesky(a, symmetrize_input=False),
    ),
    "getrf/trsm": (
        lambda a: anp.linalg.solve(a, a[..., :2]),
        lambda a: jnp.linalg.solve(a, a[..., :2]),
    ),
    "geqrf/orgqr": (lambda a: anp.linalg.qr(a), lambda a: jnp.linalg.qr(a)),
    "syevd": (lambda a: anp.linalg.eigh(a), lambda a: jnp.linalg.eigh(a, symmetrize_input=False)),
    "gesdd": (lambda a: anp.linalg.svd(a), lambda a: jnp.linalg.svd(a)),
    "gesdd reduced": (
        lambda a: anp.linalg.svd(a, full_matrices=False),
        lambda a: jnp.linalg.svd(a, full_matrices=False),
    ),
}


# aotkit computes float32 in double precision as NumPy does, so its calls are JAX's float64 ones.
@pytest.mark.parametrize("dtype", ["float64", "complex128"])
@pytest.mark.parametrize("shape", [(3, 3), (2, 3, 3)], ids=str)
@pytest.mark.parametrize("pair", sorted(PAIRS))
def test_custom_calls_are_the_ones_jax_emits(pair, shape, dtype):
    ours, theirs = PAIRS[pair]
    x = np.ones(shape, dtype)
    with jax.enable_x64(True):
        text = jax.jit(theirs).lower(x).as_text()
    with ir_context():
        jax_calls = _custom_calls(ir.Module.parse(text))
        # Both through text, so that attributes left at their defaults compare alike.
        our_calls = _custom_calls(ir.Module.parse(aotkit.lower(ours, x).as_text()))
    for target, attrs in our_calls.items():
        assert target in jax_calls, f"{target} not among JAX's {sorted(jax_calls)}"
        assert attrs == jax_calls[target], f"{target}: aotkit {attrs} vs JAX {jax_calls[target]}"


def test_a_fresh_process_registers_lapack_before_compiling():
    # Without jaxlib's LAPACK loaded, XLA's CPU runtime crashes on these calls: a fresh
    # process (no JAX lowering has run) must get them registered by the cpu backend, for
    # aotkit's own modules and for a JAX module read from text.
    code = textwrap.dedent(
        """
        import numpy as np, aotkit, aotkit.numpy as anp
        a = np.array([[4.0, 2.0], [2.0, 3.0]])
        print(np.asarray(aotkit.jit(anp.linalg.cholesky)(a)).round(6).tolist())
        text = '''
        func.func @main(%a: tensor<2x2xf64>) -> (tensor<2x2xf64>, tensor<i32>) {
          %0:2 = stablehlo.custom_call @lapack_dpotrf_ffi(%a) {api_version = 1 : i32,
            backend_config = "", mhlo.backend_config = {uplo = 76 : ui8},
            operand_layouts = [dense<[0, 1]> : tensor<2xindex>],
            result_layouts = [dense<[0, 1]> : tensor<2xindex>, dense<> : tensor<0xindex>]}
            : (tensor<2x2xf64>) -> (tensor<2x2xf64>, tensor<i32>)
          return %0#0, %0#1 : tensor<2x2xf64>, tensor<i32>
        }'''
        l, info = aotkit.load_module(text.encode()).compile()(a)
        print(np.tril(np.asarray(l)).round(6).tolist(), int(info))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False
    )
    assert out.returncode == 0, out.stderr[-2000:]
    want = np.linalg.cholesky(np.array([[4.0, 2.0], [2.0, 3.0]])).round(6).tolist()
    assert out.stdout.split("\n")[:2] == [str(want), f"{want} 0"]
