"""Element-level NumPy kernels, written the way they appear in textbooks: Python loops over
indices, scalar updates, `if` and `while` on computed values.

Nothing here names aotkit. Run on NumPy arrays they are the oracle; traced by aotkit with
autograph, each loop and branch on traced values becomes one StableHLO loop or
conditional, so the size of the program does not grow with the trip counts. Each kernel is
paired with `make_<name>(n, rng)`, which returns its arguments for size n.
"""

from __future__ import annotations

import numpy as np

# --- linear algebra -------------------------------------------------------------------------------


def forward_substitution(L, b):
    """x with L @ x = b, L lower triangular."""
    n = L.shape[0]
    x = np.zeros_like(b)
    for i in range(n):
        s = b[i]
        for j in range(i):
            s = s - L[i, j] * x[j]
        x[i] = s / L[i, i]
    return x


def make_forward_substitution(n, rng):
    L = np.tril(rng.uniform(-1, 1, (n, n))) + n * np.eye(n)
    return L, rng.uniform(-1, 1, n)


def lu_decompose(A):
    """Doolittle LU without pivoting: A = L @ U, L unit lower triangular."""
    n = A.shape[0]
    L = np.zeros_like(A)
    U = np.zeros_like(A)
    for i in range(n):
        L[i, i] = 1.0
        for k in range(i, n):
            s = 0.0
            for j in range(i):
                s += L[i, j] * U[j, k]
            U[i, k] = A[i, k] - s
        for k in range(i + 1, n):
            s = 0.0
            for j in range(i):
                s += L[k, j] * U[j, i]
            L[k, i] = (A[k, i] - s) / U[i, i]
    return L, U


def make_lu_decompose(n, rng):
    return (rng.uniform(-1, 1, (n, n)) + n * np.eye(n),)


def cholesky(A):
    """Lower triangular L with L @ L.T = A (Cholesky-Banachiewicz)."""
    n = A.shape[0]
    L = np.zeros_like(A)
    for i in range(n):
        for j in range(i + 1):
            s = 0.0
            for k in range(j):
                s += L[i, k] * L[j, k]
            if i == j:
                L[i, j] = np.sqrt(A[i, i] - s)
            else:
                L[i, j] = (A[i, j] - s) / L[j, j]
    return L


def make_cholesky(n, rng):
    M = rng.uniform(-1, 1, (n, n))
    return (M @ M.T + n * np.eye(n),)


def gauss_seidel(A, b, sweeps):
    """`sweeps` Gauss-Seidel sweeps for A @ x = b, from x = 0."""
    n = A.shape[0]
    x = np.zeros_like(b)
    for _ in range(sweeps):
        for i in range(n):
            s = b[i]
            for j in range(n):
                if j != i:
                    s -= A[i, j] * x[j]
            x[i] = s / A[i, i]
    return x


def make_gauss_seidel(n, rng):
    A = rng.uniform(-1, 1, (n, n)) + 2 * n * np.eye(n)
    return A, rng.uniform(-1, 1, n), 6


# --- graphs and dynamic programming ---------------------------------------------------------------


def floyd_warshall(dist):
    """All-pairs shortest path lengths; `dist[i, j]` is the edge length (inf: no edge)."""
    n = dist.shape[0]
    d = dist.copy()
    for k in range(n):
        for i in range(n):
            for j in range(n):
                if d[i, k] + d[k, j] < d[i, j]:
                    d[i, j] = d[i, k] + d[k, j]
    return d


def make_floyd_warshall(n, rng):
    dist = rng.uniform(1, 10, (n, n)).astype(np.float32)
    dist[rng.uniform(size=(n, n)) < 0.6] = np.inf
    np.fill_diagonal(dist, 0)
    return (dist,)


def can_pair(a, b):
    """Watson-Crick and wobble pairs of bases coded A=0, C=1, G=2, U=3."""
    return a + b == 3 or (a == 2 and b == 3) or (a == 3 and b == 2)


def nussinov(seq):
    """The most base pairs a non-crossing fold of the RNA `seq` can make (Nussinov)."""
    n = seq.shape[0]
    N = np.zeros((n, n), dtype=np.int32)
    for span in range(1, n):
        for i in range(n - span):
            j = i + span
            best = N[i + 1, j]
            if N[i, j - 1] > best:
                best = N[i, j - 1]
            if can_pair(seq[i], seq[j]):
                if N[i + 1, j - 1] + 1 > best:
                    best = N[i + 1, j - 1] + 1
            for k in range(i + 1, j):
                if N[i, k] + N[k + 1, j] > best:
                    best = N[i, k] + N[k + 1, j]
            N[i, j] = best
    return N[0, n - 1]


def make_nussinov(n, rng):
    return (rng.integers(0, 4, n).astype(np.int32),)


# --- bits and iterations --------------------------------------------------------------------------


def crc32(data):
    """CRC-32 (as zlib computes it) of a uint8 array, bit by bit."""
    crc = np.uint32(0xFFFFFFFF)
    for byte in data:
        crc = crc ^ byte
        for _ in range(8):
            if crc & 1:
                crc = (crc >> 1) ^ np.uint32(0xEDB88320)
            else:
                crc = crc >> 1
    return crc ^ np.uint32(0xFFFFFFFF)


def make_crc32(n, rng):
    return (rng.integers(0, 256, n).astype(np.uint8),)


def mandelbrot(re, im, max_iter):
    """Escape iteration counts of the points re + i*im (max_iter if they never escape)."""
    counts = np.zeros(re.shape, dtype=np.int32)
    for p in range(re.shape[0]):
        zr = 0.0
        zi = 0.0
        n = 0
        while zr * zr + zi * zi <= 4.0 and n < max_iter:
            zr, zi = zr * zr - zi * zi + re[p], 2.0 * zr * zi + im[p]
            n += 1
        counts[p] = n
    return counts


def make_mandelbrot(n, rng):
    return rng.uniform(-2, 0.6, n), rng.uniform(-1.2, 1.2, n), 50


KERNELS = {
    "forward_substitution": (forward_substitution, make_forward_substitution),
    "lu_decompose": (lu_decompose, make_lu_decompose),
    "cholesky": (cholesky, make_cholesky),
    "gauss_seidel": (gauss_seidel, make_gauss_seidel),
    "floyd_warshall": (floyd_warshall, make_floyd_warshall),
    "nussinov": (nussinov, make_nussinov),
    "crc32": (crc32, make_crc32),
    "mandelbrot": (mandelbrot, make_mandelbrot),
}
