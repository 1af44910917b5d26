"""The transforms of linear algebra and FFT (aotkit/transforms/linalg.py): jvp, vjp and vmap of
`numpy.linalg` as aotkit traces it (the LAPACK custom calls), against JAX on the jax.numpy
twin, central differences (float64, complex128) and the transpose identity; the LAPACK
calls, triangular solves and FFTs of JAX's own modules through `Lowered.jvp`/`.vjp`/
`.vmap`/`.grad`; `stablehlo.cholesky` and `stablehlo.triangular_solve` from a module file;
and the derivatives that do not exist, refused by name.

The numpy family runs as one program per dtype (tests/transforms/oracle.py) on `cpu`: the
interpreter cannot run LAPACK's custom calls.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import tree_util

import aotkit
from aotkit.transforms import TransformError
from tests.transforms.oracle import BATCH, FD_STEP, Case, Family, assert_close, rule_tests

DTYPES = ["float32", "float64", "complex128"]
EXACT = ("float64", "complex128")
N = 4
# XLA's quickest compile: these programs run once, on matrices of a few elements.
_FAST = {"xla_backend_optimization_level": 0}


# --- inputs --------------------------------------------------------------------------------------


def _normal(rng, shape, dt):
    x = rng.standard_normal(shape)
    if np.dtype(dt).kind == "c":
        x = x + 1j * rng.standard_normal(shape)
    return x.astype(dt)


def general(*shapes):
    """Matrices (and right-hand sides) with N added to the diagonal of the first: far from
    singular."""

    def make(rng, dt):
        first, *rest = (_normal(rng, s, dt) for s in shapes)
        first = first + N * np.eye(*shapes[0][-2:], dtype=dt)
        return (first, *rest)

    return make


def positive_definite(rng, dt):
    a = _normal(rng, (N, N), dt)
    return ((a @ a.conj().T + N * np.eye(N)).astype(dt),)


def rectangular(m, n):
    return lambda rng, dt: (_normal(rng, (m, n), dt),)


# --- numpy.linalg and its twins ------------------------------------------------------------------


def _herm_np(a):
    return (a + np.conj(np.swapaxes(a, -1, -2))) / 2


def _from_triangle_jnp(a, lower: bool):
    """The Hermitian matrix LAPACK reads from one triangle of `a` (the real diagonal)."""
    strict = jnp.tril(a, -1) if lower else jnp.triu(a, 1)
    diag = jnp.real(jnp.diagonal(a, axis1=-2, axis2=-1)).astype(a.dtype)
    eye = jnp.eye(a.shape[-1], dtype=a.dtype)
    return strict + jnp.conj(jnp.swapaxes(strict, -1, -2)) + diag[..., None] * eye


def _projectors(v, w=None):
    """`v_j w_j^H` for each column pair j: blind to the phase (sign) of each column."""
    w = v if w is None else w
    return np.einsum("...ij,...kj->...jik", v, np.conj(w))


def _projectors_jnp(v, w=None):
    w = v if w is None else w
    return jnp.einsum("...ij,...kj->...jik", v, jnp.conj(w))


def _svd_projectors(a):
    u, s, vh = np.linalg.svd(a, full_matrices=False)
    return s, _projectors(u, np.conj(np.swapaxes(vh, -1, -2)))


def _svd_projectors_jnp(a):
    u, s, vh = jnp.linalg.svd(a, full_matrices=False)
    return s, _projectors_jnp(u, jnp.conj(jnp.swapaxes(vh, -1, -2)))


def _eigh_projectors(a):
    w, v = np.linalg.eigh(_herm_np(a))
    return w, _projectors(v)


def _eigh_projectors_jnp(a):
    w, v = jnp.linalg.eigh(a)
    return w, _projectors_jnp(v)


# Looser than the oracle's float32 tolerance: a factorization's tangent goes through a few
# triangular solves, and JAX orders them differently.
F32 = {"float32": (2e-4, 2e-4), "complex64": (2e-4, 2e-4)}

CASES = {
    # Cholesky: numpy's reads the lower (upper) triangle; jnp's symmetrizes. The first twin
    # pair symmetrizes both, the others give JAX the matrix LAPACK reads.
    "cholesky": Case(
        lambda a: np.linalg.cholesky(_herm_np(a)), jnp.linalg.cholesky, positive_definite
    ),
    "cholesky_lower_triangle": Case(
        np.linalg.cholesky,
        lambda a: jnp.linalg.cholesky(_from_triangle_jnp(a, True)),
        positive_definite,
    ),
    "cholesky_upper": Case(
        lambda a: np.linalg.cholesky(a, upper=True),
        lambda a: jnp.linalg.cholesky(_from_triangle_jnp(a, False), upper=True),
        positive_definite,
    ),
    # LU: solve, inv, det, slogdet (getrf, its pivots' permutation, trsm).
    "solve": Case(np.linalg.solve, jnp.linalg.solve, general((N, N), (N, 2))),
    "solve_vector": Case(np.linalg.solve, jnp.linalg.solve, general((N, N), (N,))),
    "inv": Case(np.linalg.inv, jnp.linalg.inv, general((N, N))),
    "det": Case(np.linalg.det, jnp.linalg.det, general((N, N))),
    "slogdet": Case(
        lambda a: tuple(np.linalg.slogdet(a)),
        lambda a: tuple(jnp.linalg.slogdet(a)),
        general((N, N)),
    ),
    # eigh: the vectors against JAX's (the same kernel gives the same phases), and their
    # projectors (phase-blind) against central differences.
    "eigh": Case(
        lambda a: tuple(np.linalg.eigh(_herm_np(a))),
        lambda a: tuple(jnp.linalg.eigh(a)),
        positive_definite,
        fd=False,
    ),
    "eigh_upper": Case(
        lambda a: tuple(np.linalg.eigh(a, UPLO="U")),
        lambda a: tuple(jnp.linalg.eigh(_from_triangle_jnp(a, False), UPLO="U")),
        positive_definite,
        fd=False,
    ),
    "eigh_projectors": Case(_eigh_projectors, _eigh_projectors_jnp, positive_definite),
    "eigvalsh": Case(
        lambda a: np.linalg.eigvalsh(_herm_np(a)), jnp.linalg.eigvalsh, positive_definite
    ),
    # SVD: values; vectors of full square and thin factors (against JAX's, same kernel);
    # projectors u_j v_j^H against central differences.
    "svdvals_tall": Case(
        lambda a: np.linalg.svd(a, compute_uv=False),
        lambda a: jnp.linalg.svd(a, compute_uv=False),
        rectangular(5, 3),
    ),
    "svd_square": Case(
        lambda a: tuple(np.linalg.svd(a)),
        lambda a: tuple(jnp.linalg.svd(a)),
        rectangular(N, N),
        fd=False,
    ),
    "svd_thin_tall": Case(
        lambda a: tuple(np.linalg.svd(a, full_matrices=False)),
        lambda a: tuple(jnp.linalg.svd(a, full_matrices=False)),
        rectangular(5, 3),
        fd=False,
    ),
    "svd_thin_wide": Case(
        lambda a: tuple(np.linalg.svd(a, full_matrices=False)),
        lambda a: tuple(jnp.linalg.svd(a, full_matrices=False)),
        rectangular(3, 5),
        fd=False,
    ),
    "svd_projectors_tall": Case(_svd_projectors, _svd_projectors_jnp, rectangular(5, 3)),
    "svd_projectors_wide": Case(_svd_projectors, _svd_projectors_jnp, rectangular(3, 5)),
    # QR (geqrf, then orgqr/ungqr): unique with LAPACK's signs, so Q and R themselves.
    "qr_square": Case(
        lambda a: tuple(np.linalg.qr(a)), lambda a: tuple(jnp.linalg.qr(a)), rectangular(N, N)
    ),
    "qr_tall": Case(
        lambda a: tuple(np.linalg.qr(a)), lambda a: tuple(jnp.linalg.qr(a)), rectangular(5, 3)
    ),
    "qr_wide": Case(
        lambda a: tuple(np.linalg.qr(a)), lambda a: tuple(jnp.linalg.qr(a)), rectangular(3, 5)
    ),
    "qr_complete_tall": Case(
        lambda a: tuple(np.linalg.qr(a, mode="complete")),
        lambda a: tuple(jnp.linalg.qr(a, mode="complete")),
        rectangular(5, 3),
    ),
    "qr_r": Case(
        lambda a: np.linalg.qr(a, mode="r"),
        lambda a: jnp.linalg.qr(a, mode="r"),
        rectangular(5, 3),
    ),
    # Built on the above.
    "lstsq": Case(
        lambda a, b: np.linalg.lstsq(a, b)[0],
        lambda a, b: jnp.linalg.lstsq(a, b)[0],
        lambda rng, dt: (_normal(rng, (5, 3), dt), _normal(rng, (5, 2), dt)),
    ),
    "pinv": Case(np.linalg.pinv, jnp.linalg.pinv, rectangular(3, 5)),
    "norm_2": Case(
        lambda a: np.linalg.norm(a, 2), lambda a: jnp.linalg.norm(a, 2), rectangular(N, N)
    ),
    "norm_nuc": Case(
        lambda a: np.linalg.norm(a, "nuc"),
        lambda a: jnp.linalg.norm(a, "nuc"),
        rectangular(N, N),
    ),
}


class _Family(Family):
    def tolerance(self, name, dtype):
        return F32.get(np.dtype(dtype).name) or super().tolerance(name, dtype)


FAMILY = _Family(CASES, backend="cpu")


test_jvp, test_vjp, test_vmap, test_transpose, test_central_differences = rule_tests(
    FAMILY,
    [(n, d) for n in CASES for d in DTYPES],
    [(n, d) for n, c in CASES.items() if c.fd for d in EXACT],
)

# --- Householder vectors: numpy's qr(mode="raw") -------------------------------------------------

RAW_SHAPES = {"square": (N, N), "tall": (5, 3), "wide": (3, 5)}


@functools.cache
def _raw_qr(dtype):
    """geqrf's own results (R over the Householder vectors, and tau), which JAX has no
    derivative for: the tangents of every shape in one program, with central differences
    and the vjp."""
    rng = np.random.default_rng(7)
    x = {k: _normal(rng, s, dtype) for k, s in RAW_SHAPES.items()}
    v = {k: _normal(rng, s, dtype) for k, s in RAW_SHAPES.items()}

    def f(a):
        return {k: tuple(np.linalg.qr(a[k], mode="raw")) for k in a}

    out_shapes = jax.eval_shape(lambda a: {k: (a[k].T, a[k][0, : min(a[k].shape)]) for k in a}, x)
    u = tree_util.tree_map(lambda s: _normal(rng, s.shape, dtype), out_shapes)

    def program(x, v, u):
        _, tan = aotkit.jvp(f, (x,), (v,))
        _, pull = aotkit.vjp(f, x)
        step = tree_util.tree_map(lambda a, t: t * np.asarray(FD_STEP, a.dtype), x, v)
        plus = f(tree_util.tree_map(np.add, x, step))
        minus = f(tree_util.tree_map(np.subtract, x, step))
        return tan, pull(u)[0], plus, minus

    found = aotkit.jit(program).lower(x, v, u).compile(options=_FAST)(x, v, u)
    return x, v, u, tree_util.tree_map(np.asarray, found)


@pytest.mark.parametrize("dtype", EXACT)
@pytest.mark.parametrize("shape", RAW_SHAPES)
def test_householder_vectors_central_differences(shape, dtype):
    _, _, _, (tan, _, plus, minus) = _raw_qr(dtype)
    fd = tree_util.tree_map(lambda p, m: (p - m) / (2 * FD_STEP), plus[shape], minus[shape])
    assert_close(tan[shape], fd, (1e-6, 1e-6), "central differences")


@pytest.mark.parametrize("dtype", EXACT)
@pytest.mark.parametrize("shape", RAW_SHAPES)
def test_householder_vectors_transpose(shape, dtype):
    _, v, u, (tan, ct, _, _) = _raw_qr(dtype)
    lhs = _inner(ct[shape], v[shape])
    rhs = _inner(u[shape], tan[shape])
    assert abs(lhs - rhs) <= 1e-9 * max(1.0, abs(lhs)), (lhs, rhs)


def _inner(a, b) -> float:
    pairs = zip(tree_util.tree_leaves(a), tree_util.tree_leaves(b), strict=True)
    return float(np.real(sum(np.sum(np.asarray(x) * np.asarray(y)) for x, y in pairs)))


# --- batching: LAPACK's own batch, not a loop -----------------------------------------------------

BATCHED_KERNELS = {
    "cholesky": np.linalg.cholesky,
    "eigh": np.linalg.eigh,
    "svd": np.linalg.svd,
    "qr": np.linalg.qr,
    "solve": lambda a: np.linalg.solve(a, a),
}


@pytest.mark.parametrize("name", BATCHED_KERNELS)
def test_vmap_uses_the_kernels_batch(name):
    """A batched LAPACK call is the same call with one more batch dimension: no
    `loop_fallback` loop, and no call left unbatched."""
    xs = np.stack([np.eye(3) + 0.1 * k for k in range(BATCH)])
    text = aotkit.jit(aotkit.vmap(BATCHED_KERNELS[name])).lower(xs).as_text()
    assert "@lapack_" in text
    assert 'num_batch_dims = "0"' not in text
    assert 'num_batch_dims = "1"' in text
    if name != "solve":  # solve's pivots become a permutation in a loop of its own
        assert "stablehlo.while" not in text


def _unbatched_matrix_programs():
    rng = np.random.default_rng(3)
    a = positive_definite(rng, np.dtype(np.float64))[0]
    ts = np.stack([_normal(rng, (N, N), np.float64) for _ in range(BATCH)])

    def tangent(t):
        return aotkit.jvp(np.linalg.cholesky, (a,), (t,))[1]

    def cotangent(t):
        return aotkit.vjp(np.linalg.cholesky, a)[1](t)[0]

    return a, ts, tangent, cotangent


@pytest.mark.parametrize("which", ["tangent", "cotangent"])
def test_vmap_of_a_derivative_with_the_matrix_unbatched(which):
    """Tangents and cotangents batched over one factor: the triangular solves fold the
    batch into the right-hand side's columns (solves from the left) or rows (from the
    right), against a loop."""
    a, ts, tangent, cotangent = _unbatched_matrix_programs()
    fn = tangent if which == "tangent" else cotangent
    lowered = aotkit.jit(aotkit.vmap(fn)).lower(ts)
    text = lowered.as_text()
    assert "stablehlo.triangular_solve" in text
    assert f"tensor<{N}x{N}xf64>, tensor<{N}x{N * BATCH}xf64>" in text or (
        f"tensor<{N}x{N}xf64>, tensor<{N * BATCH}x{N}xf64>" in text
    )
    got = lowered.compile()(ts)
    one = aotkit.jit(fn)
    assert_close(np.asarray(got), np.stack([np.asarray(one(t)) for t in ts]), (1e-12, 1e-12), which)


# --- second order ------------------------------------------------------------------------------


def test_hessian_through_cholesky():
    """The cotangent program's triangular solves are differentiated again
    (`stablehlo.triangular_solve`'s own rule)."""
    a = positive_definite(np.random.default_rng(5), np.dtype(np.float64))[0]

    def f(x):
        return np.sum(np.linalg.cholesky(_herm_np(x)) ** 3)

    def fj(x):
        return jnp.sum(jnp.linalg.cholesky(x) ** 3)

    got = aotkit.jit(aotkit.hessian(f)).lower(a).compile(options=_FAST)(a)
    with jax.enable_x64(True):
        want = jax.hessian(fj)(a)
    assert_close(np.asarray(got), np.asarray(want), (1e-10, 1e-10), "hessian")


# --- JAX's modules: Lowered.jvp, .vjp, .vmap ------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class JaxCase:
    """A jax.numpy function, its arguments `make(rng, dtype)`; `fd` whether its outputs are
    smooth functions of the input (vectors are, up to a phase JAX's tangent does not
    follow)."""

    fn: Callable
    make: Callable
    fd: bool = True


class JaxFamily:
    """The module JAX lowers for all the cases at once (one dict in, one dict out),
    transformed by aotkit (`Lowered.jvp`, `.vjp`, `.vmap`) and compared with JAX's
    transforms of the same function: five programs per dtype."""

    def __init__(self, cases: dict[str, JaxCase], seed: int):
        self.cases = cases
        self.seed = seed

    def fn(self, x):
        return {n: self.cases[n].fn(*x[n]) for n in x}

    @functools.cache  # noqa: B019 (one family per module, kept for the session)
    def result(self, dtype):
        rng = np.random.default_rng(self.seed)
        dt = np.dtype(dtype)
        x = {n: c.make(rng, dt) for n, c in self.cases.items()}
        v = tree_util.tree_map(lambda a: _normal(rng, a.shape, a.dtype), x)
        lanes = [x] + [
            {n: c.make(rng, dt) for n, c in self.cases.items()} for _ in range(BATCH - 1)
        ]
        xs = tree_util.tree_map(lambda *b: np.stack(b), *lanes)
        with jax.enable_x64(True):
            shapes = jax.eval_shape(self.fn, x)
            u = tree_util.tree_map(lambda s: _normal(rng, s.shape, s.dtype), shapes)
            lowered = aotkit.jit(self.fn, frontend="jax").lower(x)
            step = tree_util.tree_map(lambda a, t: t * np.asarray(FD_STEP, a.dtype), x, v)
            plain = lowered.compile(options=_FAST)
            got = {
                "jvp": lowered.jvp().compile(options=_FAST)((x,), (v,)),
                "vjp": lowered.vjp().compile(options=_FAST)((x,), u)[1][0],
                "vmap": lowered.vmap(axis_size=BATCH).compile(options=_FAST)(xs),
                "loop": [plain(tree_util.tree_map(lambda b, i=i: b[i], xs)) for i in range(BATCH)],
                "plus": plain(tree_util.tree_map(np.add, x, step)),
                "minus": plain(tree_util.tree_map(np.subtract, x, step)),
            }

            def oracle(x, v, u, xs):
                return {
                    "jvp": jax.jvp(self.fn, (x,), (v,)),
                    "vjp": jax.vjp(self.fn, x)[1](u)[0],
                    "vmap": jax.vmap(self.fn)(xs),
                }

            want = jax.jit(oracle).lower(x, v, u, xs).compile(_FAST)(x, v, u, xs)
        as_np = functools.partial(tree_util.tree_map, np.asarray)
        return x, v, u, as_np(got), as_np(want)

    def check(self, name, dtype, what):
        x, v, u, got, want = self.result(dtype)
        tol = F32.get(np.dtype(dtype).name, (1e-10, 1e-10))
        if what == "jvp":
            assert_close(got["jvp"][1][name], want["jvp"][1][name], tol, "jvp tangent")
        elif what == "vjp":
            assert_close(got["vjp"][name], want["vjp"][name], tol, "vjp")
        elif what == "vmap":
            for leaf in tree_util.tree_leaves(got["vmap"][name]):
                assert np.all(np.isfinite(leaf)), "every lane is a valid input"
            assert_close(got["vmap"][name], want["vmap"][name], tol, "vmap against jax.vmap")
            loop = tree_util.tree_map(lambda *r: np.stack(r), *[r[name] for r in got["loop"]])
            assert_close(got["vmap"][name], loop, tol, "vmap against a loop")
        elif what == "transpose":
            lhs, rhs = _inner(got["vjp"][name], v[name]), _inner(u[name], got["jvp"][1][name])
            assert abs(lhs - rhs) <= 10 * sum(tol) * max(1.0, abs(lhs)), (lhs, rhs)
        else:
            fd = tree_util.tree_map(
                lambda p, m: (p - m) / (2 * FD_STEP), got["plus"][name], got["minus"][name]
            )
            assert_close(got["jvp"][1][name], fd, (1e-6, 1e-6), "central differences")


def _solve_triangular(**kw):
    return lambda a, b: jax.scipy.linalg.solve_triangular(a, b, **kw)


def _triangular_solve(**kw):
    return lambda a, b: jax.lax.linalg.triangular_solve(a, b, **kw)


JAX_LINALG = {
    "cholesky": JaxCase(jnp.linalg.cholesky, positive_definite),
    "lu_factor": JaxCase(lambda a: jax.scipy.linalg.lu_factor(a)[0], general((N, N))),
    "solve": JaxCase(jnp.linalg.solve, general((N, N), (N, 2))),
    "inv": JaxCase(jnp.linalg.inv, general((N, N))),
    "slogdet": JaxCase(lambda a: tuple(jnp.linalg.slogdet(a)), general((N, N))),
    "eigh": JaxCase(lambda a: tuple(jnp.linalg.eigh(a)), positive_definite, fd=False),
    "eigh_projectors": JaxCase(_eigh_projectors_jnp, positive_definite),
    "svd_gesdd": JaxCase(
        lambda a: tuple(jnp.linalg.svd(a, full_matrices=False)), rectangular(5, 3), fd=False
    ),
    "svd_gesvd": JaxCase(
        lambda a: tuple(
            jax.lax.linalg.svd(a, full_matrices=False, algorithm=jax.lax.linalg.SvdAlgorithm.QR)
        ),
        rectangular(3, 5),
        fd=False,
    ),
    "qr": JaxCase(lambda a: tuple(jnp.linalg.qr(a)), rectangular(5, 3)),
    "qr_complete": JaxCase(lambda a: tuple(jnp.linalg.qr(a, mode="complete")), rectangular(5, 3)),
    "qr_wide": JaxCase(lambda a: tuple(jnp.linalg.qr(a)), rectangular(3, 5)),
    "pinv": JaxCase(jnp.linalg.pinv, rectangular(5, 3)),
    # LAPACK's trsm in each of its forms, as JAX calls it.
    "trsm_lower": JaxCase(_solve_triangular(lower=True), general((N, N), (N, 2))),
    "trsm_upper_transposed": JaxCase(
        _solve_triangular(lower=False, trans=1), general((N, N), (N, 2))
    ),
    "trsm_lower_adjoint": JaxCase(_solve_triangular(lower=True, trans=2), general((N, N), (N, 2))),
    "trsm_unit_diagonal": JaxCase(
        _solve_triangular(lower=True, unit_diagonal=True), general((N, N), (N, 2))
    ),
    "trsm_right": JaxCase(
        _triangular_solve(left_side=False, lower=True, transpose_a=True, conjugate_a=True),
        general((N, N), (2, N)),
    ),
    "trsm_conjugate": JaxCase(
        _triangular_solve(left_side=True, lower=False, conjugate_a=True),
        general((N, N), (N, 2)),
    ),
}
JAX_FAMILY = JaxFamily(JAX_LINALG, seed=11)
CHECKS = ["jvp", "vjp", "vmap", "transpose"]


@pytest.mark.parametrize("what", CHECKS)
@pytest.mark.parametrize("dtype", EXACT)
@pytest.mark.parametrize("name", JAX_LINALG)
def test_jax_linalg(name, dtype, what):
    JAX_FAMILY.check(name, dtype, what)


@pytest.mark.parametrize("dtype", EXACT)
@pytest.mark.parametrize("name", [n for n, c in JAX_LINALG.items() if c.fd])
def test_jax_linalg_central_differences(name, dtype):
    JAX_FAMILY.check(name, dtype, "fd")


def test_grad_of_a_jax_program():
    """`Lowered.grad` of a JAX function built on jnp.linalg, against jax.grad."""

    def loss(a, b):
        sign, logdet = jnp.linalg.slogdet(a)
        x = jnp.linalg.solve(a, b)
        w, v = jnp.linalg.eigh(a @ a.T)
        q, r = jnp.linalg.qr(a)
        return logdet + jnp.sum(x**2) + jnp.sum(w) + jnp.sum(jnp.abs(v[:, -1])) + jnp.sum(q * r)

    rng = np.random.default_rng(13)
    a, b = general((N, N), (N, 2))(rng, np.dtype(np.float64))
    with jax.enable_x64(True):
        lowered = aotkit.jit(loss, frontend="jax").lower(a, b)
        want = jax.grad(loss, argnums=(0, 1))(a, b)
    got = lowered.grad(argnums=(0, 1)).compile(options=_FAST)(a, b)
    assert_close(tuple(map(np.asarray, got)), tuple(map(np.asarray, want)), (1e-10, 1e-10), "grad")


# --- FFT (JAX's modules: aotkit.numpy has no numpy.fft) -----------------------------------------


def _signal(*shape, complex_=False):
    def make(rng, dt):
        dt = np.dtype(dt)
        if complex_:
            dt = np.result_type(dt, np.complex64)
        return (_normal(rng, shape, dt),)

    return make


FFTS = {
    "fft": JaxCase(jnp.fft.fft, _signal(8, complex_=True)),
    "fft_of_real": JaxCase(jnp.fft.fft, _signal(8)),
    "ifft": JaxCase(jnp.fft.ifft, _signal(8, complex_=True)),
    "rfft": JaxCase(jnp.fft.rfft, _signal(8)),
    "rfft_odd": JaxCase(jnp.fft.rfft, _signal(7)),
    "irfft": JaxCase(jnp.fft.irfft, _signal(5, complex_=True)),
    "irfft_odd": JaxCase(lambda z: jnp.fft.irfft(z, 7), _signal(4, complex_=True)),
    "fft2": JaxCase(jnp.fft.fft2, _signal(3, 4, complex_=True)),
    "rfft2": JaxCase(jnp.fft.rfft2, _signal(3, 4)),
    "irfft2": JaxCase(jnp.fft.irfft2, _signal(3, 3, complex_=True)),
    "fft_batch": JaxCase(lambda x: jnp.fft.fft(x, axis=0), _signal(6, 2, complex_=True)),
}
FFT_FAMILY = JaxFamily(FFTS, seed=17)


@pytest.mark.parametrize("what", CHECKS)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", FFTS)
def test_fft(name, dtype, what):
    FFT_FAMILY.check(name, dtype, what)


@pytest.mark.parametrize("name", FFTS)
def test_fft_central_differences(name):
    FFT_FAMILY.check(name, "float64", "fd")


# --- stablehlo.cholesky and stablehlo.triangular_solve, from a module file ------------------------

_TYPES = {np.dtype(np.float64): "f64", np.dtype(np.complex128): "complex<f64>"}


def _tensor(shape, dtype) -> str:
    return f"tensor<{'x'.join(map(str, shape))}x{_TYPES[np.dtype(dtype)]}>"


def _cholesky_module(shape, dtype, lower: bool) -> bytes:
    t = _tensor(shape, dtype)
    return (
        f"func.func @main(%a: {t}) -> {t} {{\n"
        f"  %0 = stablehlo.cholesky %a, lower = {str(lower).lower()} : {t}\n"
        f"  return %0 : {t}\n}}\n"
    ).encode()


def _solve_module(a_shape, b_shape, dtype, *, left, lower, unit, transpose) -> bytes:
    ta, tb = _tensor(a_shape, dtype), _tensor(b_shape, dtype)
    flags = ", ".join(
        f"{k} = {str(v).lower()}"
        for k, v in (("left_side", left), ("lower", lower), ("unit_diagonal", unit))
    )
    return (
        f"func.func @main(%a: {ta}, %b: {tb}) -> {tb} {{\n"
        f'  %0 = "stablehlo.triangular_solve"(%a, %b) {{{flags}, '
        f"transpose_a = #stablehlo<transpose {transpose}>}} : ({ta}, {tb}) -> {tb}\n"
        f"  return %0 : {tb}\n}}\n"
    ).encode()


def _real_diagonal(t):
    """t with the imaginary part of its diagonal removed."""
    d = np.diagonal(t, axis1=-2, axis2=-1)
    return t - 1j * np.imag(d)[..., None] * np.eye(t.shape[-1]) if t.dtype.kind == "c" else t


def _batched_spd(rng, dt, batch=2):
    return np.stack([positive_definite(rng, dt)[0] for _ in range(batch)])


_JAX_TRANSPOSE = {
    "NO_TRANSPOSE": (False, False),
    "TRANSPOSE": (True, False),
    "ADJOINT": (True, True),
}

# name: (module(dtype), twin, inputs(rng, dtype), mask of the result JAX defines)
HLO_OPS = {
    "cholesky_lower": (
        lambda dt: _cholesky_module((2, N, N), dt, True),
        lambda a: jnp.linalg.cholesky(_from_triangle_jnp(a, True)),
        lambda rng, dt: (_batched_spd(rng, dt),),
        np.tril,
    ),
    "cholesky_upper": (
        lambda dt: _cholesky_module((2, N, N), dt, False),
        lambda a: jnp.linalg.cholesky(_from_triangle_jnp(a, False), upper=True),
        lambda rng, dt: (_batched_spd(rng, dt),),
        np.triu,
    ),
}
for _left, _lower, _unit, _transpose in [
    (True, True, False, "NO_TRANSPOSE"),
    (True, False, True, "TRANSPOSE"),
    (False, True, False, "ADJOINT"),
    (False, False, False, "NO_TRANSPOSE"),
]:
    _b = (2, N, 3) if _left else (2, 3, N)
    _t, _c = _JAX_TRANSPOSE[_transpose]
    HLO_OPS[f"triangular_solve_{'left' if _left else 'right'}_{_transpose.lower()}"] = (
        functools.partial(
            lambda dt, *, b, **kw: _solve_module((2, N, N), b, dt, **kw),
            b=_b,
            left=_left,
            lower=_lower,
            unit=_unit,
            transpose=_transpose,
        ),
        functools.partial(
            jax.lax.linalg.triangular_solve,
            left_side=_left,
            lower=_lower,
            unit_diagonal=_unit,
            transpose_a=_t,
            conjugate_a=_c,
        ),
        functools.partial(
            lambda rng, dt, b: (
                np.stack([general((N, N))(rng, dt)[0] for _ in range(2)]),
                _normal(rng, b, dt),
            ),
            b=_b,
        ),
        None,
    )


@pytest.mark.parametrize("dtype", EXACT)
@pytest.mark.parametrize("name", HLO_OPS)
def test_stablehlo_linalg_ops(name, dtype):
    """jvp, vjp and vmap of the op (a batch of matrices) against JAX's rules on the twin
    that reads what the op reads; the transpose identity; central differences."""
    module, twin, make, mask = HLO_OPS[name]
    keep = mask if mask is not None else (lambda x: x)
    rng = np.random.default_rng(19)
    dt = np.dtype(dtype)
    x = make(rng, dt)
    v = tuple(_normal(rng, a.shape, dt) for a in x)
    lowered = aotkit.load_module(module(dt))
    out_shape = x[-1].shape if mask is None else x[0].shape
    u = _normal(rng, out_shape, dt)
    xs = tuple(np.stack([a, b]) for a, b in zip(x, make(rng, dt), strict=True))
    jvp = lowered.jvp().compile(options=_FAST)
    _, tan = jvp(x, v)
    _, ct = lowered.vjp().compile(options=_FAST)(x, u)
    got_vmap = lowered.vmap(axis_size=2).compile(options=_FAST)(*xs)
    # Central differences along a direction the op's contract allows: XLA's complex
    # Cholesky reads the imaginary part of the diagonal a Hermitian matrix does not have.
    w = v if mask is None else tuple(_real_diagonal(t) for t in v)
    _, tan_w = jvp(x, w)
    plain = lowered.compile(options=_FAST)
    plus = plain(*(a + FD_STEP * t for a, t in zip(x, w, strict=True)))
    minus = plain(*(a - FD_STEP * t for a, t in zip(x, w, strict=True)))
    fd = (np.asarray(plus) - np.asarray(minus)) / (2 * FD_STEP)
    with jax.enable_x64(True):
        _, want_tan = jax.jvp(twin, x, v)
        want_ct = jax.vjp(twin, *x)[1](u)
        want_vmap = jax.vmap(twin)(*xs)
    tol = (1e-10, 1e-10)
    assert_close(keep(np.asarray(tan)), np.asarray(want_tan), tol, "jvp")
    assert_close(tuple(map(np.asarray, ct)), tuple(map(np.asarray, want_ct)), tol, "vjp")
    assert_close(keep(np.asarray(got_vmap)), np.asarray(want_vmap), tol, "vmap")
    assert_close(keep(np.asarray(tan_w)), keep(fd), (1e-6, 1e-6), "central differences")
    lhs, rhs = _inner(ct, v), _inner(u, tan)
    assert abs(lhs - rhs) <= 1e-9 * max(1.0, abs(lhs)), (lhs, rhs)


# --- what has no derivative ---------------------------------------------------------------------


def test_eig_of_a_general_matrix_is_refused():
    a = general((N, N))(np.random.default_rng(0), np.dtype(np.float32))[0]
    lowered = aotkit.jit(lambda a: jnp.sum(jnp.abs(jnp.linalg.eig(a)[0])), frontend="jax").lower(a)
    with pytest.raises(
        TransformError,
        match=r"grad: stablehlo\.custom_call at .* \(@lapack_sgeev_ffi\) is the "
        r"eigendecomposition of a general \(non-symmetric\) matrix, which aotkit has no "
        r"derivative for; for a symmetric or Hermitian matrix use eigh",
    ):
        lowered.grad()


def test_a_custom_call_without_a_rule_is_named_by_its_target_and_batched_by_the_loop():
    """lapack_sgees_ffi (a Schur decomposition) runs but has no derivative: the error names
    the target; vmap runs the call once per batch element."""
    a = np.random.default_rng(1).normal(size=(2, N, N)).astype(np.float32)
    lowered = aotkit.jit(lambda a: jax.scipy.linalg.schur(a)[0], frontend="jax").lower(a[0])
    for transform, mode in (("jvp", "forward"), ("vjp", "reverse")):
        with pytest.raises(
            TransformError,
            match=rf"{transform}: no differentiation rule for op stablehlo\.custom_call .*"
            rf"\(@lapack_sgees_ffi\); aotkit cannot differentiate \({mode} mode\) this program",
        ):
            getattr(lowered, transform)()
    batched = lowered.vmap(axis_size=2).compile()(a)
    plain = lowered.compile()
    np.testing.assert_array_equal(batched, np.stack([plain(a[0]), plain(a[1])]))
    assert batched.dtype == np.float32


def test_full_svd_vectors_of_a_rectangular_matrix_are_refused():
    a = rectangular(N, 3)(np.random.default_rng(0), np.dtype(np.float64))[0]
    with pytest.raises(
        TransformError,
        match=r"vjp: stablehlo\.custom_call at .* \(@lapack_dgesdd_ffi\) is a full SVD "
        r"\(full_matrices=True\) of 4x3 matrices, and the program uses its singular vectors: "
        r"the vectors beyond the first 3 are any basis of a complement, with no derivative "
        r"\(JAX defines none either\)\. Use full_matrices=False",
    ):
        aotkit.vjp(lambda a: np.linalg.svd(a)[0], a)


def test_full_svd_values_of_a_rectangular_matrix_differentiate():
    """The same call, its vectors unused: the singular values have their derivative (JAX
    refuses the full SVD's; its values-only SVD is the oracle)."""
    a = rectangular(N, 3)(np.random.default_rng(0), np.dtype(np.float64))[0]
    got = aotkit.grad(lambda a: np.sum(np.linalg.svd(a)[1]))(a)
    with jax.enable_x64(True):
        want = jax.grad(lambda a: jnp.sum(jnp.linalg.svd(a, compute_uv=False)))(a)
    assert_close(np.asarray(got), np.asarray(want), (1e-12, 1e-12), "grad")


_VALUES_ONLY_EIGH = b"""
func.func @main(%a: tensor<3x3xf64>) -> (tensor<3x3xf64>, tensor<3xf64>) {
  %0:3 = stablehlo.custom_call @lapack_dsyevd_ffi(%a) {api_version = 1 : i32,
      mhlo.backend_config = {mode = 78 : ui8, uplo = 76 : ui8},
      operand_layouts = [dense<[0, 1]> : tensor<2xindex>],
      result_layouts = [dense<[0, 1]> : tensor<2xindex>, dense<0> : tensor<1xindex>,
                        dense<> : tensor<0xindex>],
      output_operand_aliases = [#stablehlo.output_operand_alias<output_tuple_indices = [0],
                                operand_index = 0, operand_tuple_indices = []>]}
      : (tensor<3x3xf64>) -> (tensor<3x3xf64>, tensor<3xf64>, tensor<i32>)
  return %0#0, %0#1 : tensor<3x3xf64>, tensor<3xf64>
}
"""


def test_scratch_result_of_a_values_only_call_is_refused():
    """syevd with mode 'N' leaves its vectors' slot undefined: a program that returns it
    has no derivative."""
    lowered = aotkit.load_module(_VALUES_ONLY_EIGH)
    with pytest.raises(
        TransformError,
        match=r"jvp: stablehlo\.custom_call at .* \(@lapack_dsyevd_ffi\): result 0 is the "
        r"eigenvectors' slot of a values-only call \(mode 'N'\), which the kernel leaves "
        r"undefined, and the program uses it; it has no derivative\. Use the call's other "
        r"results",
    ):
        lowered.jvp()
