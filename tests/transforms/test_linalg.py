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

import jax.numpy as jnp
import numpy as np
import pytest

from tests.transforms.oracle import Case, Family

DTYPES = ["float32", "float64", "complex128"]
EXACT = ("float64", "complex128")
N = 4


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


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", CASES)
def test_jvp(name, dtype):
    FAMILY.check_jvp(name, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", CASES)
def test_vjp(name, dtype):
    FAMILY.check_vjp(name, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", CASES)
def test_vmap(name, dtype):
    FAMILY.check_vmap(name, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", CASES)
def test_transpose(name, dtype):
    FAMILY.check_transpose(name, dtype)


@pytest.mark.parametrize("dtype", EXACT)
@pytest.mark.parametrize("name", [n for n, c in CASES.items() if c.fd])
def test_central_differences(name, dtype):
    FAMILY.check_fd(name, dtype)
