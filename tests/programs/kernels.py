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


# --- loops over a growing prefix: slices whose bounds are the loop index --------------------------


def forward_substitution_rows(L, b):
    """x with L @ x = b, each row a dot product over the prefix solved so far."""
    n = b.shape[0]
    x = np.zeros_like(b)
    for i in range(n):
        x[i] = (b[i] - L[i, :i] @ x[:i]) / L[i, i]
    return x


def back_substitution(U, b):
    """x with U @ x = b, U upper triangular: dot products over the suffix solved so far."""
    n = b.shape[0]
    x = np.zeros_like(b)
    for i in range(n - 1, -1, -1):
        x[i] = (b[i] - U[i, i + 1 :] @ x[i + 1 :]) / U[i, i]
    return x


def make_back_substitution(n, rng):
    U = np.triu(rng.uniform(-1, 1, (n, n))) + n * np.eye(n)
    return U, rng.uniform(-1, 1, n)


def lu_in_place(A):
    """Doolittle LU in one array (L below the diagonal, U on and above), as Polybench's lu."""
    A = A.copy()
    n = A.shape[0]
    for i in range(n):
        for j in range(i):
            A[i, j] = (A[i, j] - A[i, :j] @ A[:j, j]) / A[j, j]
        for j in range(i, n):
            A[i, j] -= A[i, :i] @ A[:i, j]
    return A


def lu_solve(A, b):
    """LU in place, then forward and back substitution over prefixes and suffixes."""
    LU = lu_in_place(A)
    n = b.shape[0]
    y = np.zeros_like(b)
    for i in range(n):
        y[i] = b[i] - LU[i, :i] @ y[:i]
    x = np.zeros_like(b)
    for i in range(n - 1, -1, -1):
        x[i] = (y[i] - LU[i, i + 1 :] @ x[i + 1 :]) / LU[i, i]
    return x


def make_lu_solve(n, rng):
    return make_lu_decompose(n, rng)[0], rng.uniform(-1, 1, n)


def cholesky_rows(A):
    """L with L @ L.T = A, each entry from a dot product of two row prefixes."""
    n = A.shape[0]
    L = np.zeros_like(A)
    for i in range(n):
        for j in range(i + 1):
            s = L[i, :j] @ L[j, :j]
            if i == j:
                L[i, j] = np.sqrt(A[i, i] - s)
            else:
                L[i, j] = (A[i, j] - s) / L[j, j]
    return L


def gram_schmidt(A):
    """Modified Gram-Schmidt QR, as Polybench's gramschmidt: the inner loop starts at k + 1."""
    A = A.copy()
    m, n = A.shape
    Q = np.zeros((m, n))
    R = np.zeros((n, n))
    for k in range(n):
        nrm = np.sqrt(A[:, k] @ A[:, k])
        R[k, k] = nrm
        Q[:, k] = A[:, k] / nrm
        for j in range(k + 1, n):
            R[k, j] = Q[:, k] @ A[:, j]
            A[:, j] = A[:, j] - Q[:, k] * R[k, j]
    return Q, R


def make_gram_schmidt(n, rng):
    return (rng.uniform(-1, 1, (n + 2, n)) + 3 * np.eye(n + 2, n),)


def syrk_lower(alpha, beta, C, A):
    """C = alpha A A^T + beta C on the lower triangle, as Polybench's syrk (`j <= i`)."""
    C = C.copy()
    n, m = A.shape
    for i in range(n):
        C[i, : i + 1] *= beta
        for k in range(m):
            C[i, : i + 1] += alpha * A[i, k] * A[: i + 1, k]
    return C


def make_syrk_lower(n, rng):
    return 1.5, 0.5, rng.uniform(-1, 1, (n, n)), rng.uniform(-1, 1, (n, n // 2 + 5))


def csr_matvec(vals, cols, row, x):
    """y = S @ x for S in CSR form: each row a dot product over its run of the arrays."""
    y = np.zeros(row.shape[0] - 1)
    for i in range(row.shape[0] - 1):
        y[i] = vals[row[i] : row[i + 1]] @ x[cols[row[i] : row[i + 1]]]
    return y


def make_csr_matvec(n, rng):
    dense = rng.uniform(-1, 1, (n, n)) * (rng.uniform(0, 1, (n, n)) < 0.3)
    dense[n // 2] = 0.0  # an empty row: its run is x[:0]
    rows, cols = np.nonzero(dense)
    row = np.searchsorted(rows, np.arange(n + 1)).astype(np.int32)
    return dense[rows, cols], cols.astype(np.int32), row, rng.uniform(-1, 1, n)


def durbin(r):
    """Levinson-Durbin recursion for the Yule-Walker equations, as NumPy ports of Polybench's
    durbin write it: a reversed prefix dotted with a prefix, and a prefix updated with its
    own reverse."""
    y = np.empty_like(r)
    alpha = -r[0]
    beta = 1.0
    y[0] = -r[0]
    for k in range(1, r.shape[0]):
        beta *= 1.0 - alpha * alpha
        alpha = -(r[k] + np.dot(np.flip(r[:k]), y[:k])) / beta
        y[:k] += alpha * y[:k][::-1]
        y[k] = alpha
    return y


def durbin_elements(r):
    """Polybench's durbin element by element: inner loops whose bound is the outer index."""
    n = r.shape[0]
    y = np.zeros(n)
    z = np.zeros(n)
    y[0] = -r[0]
    beta = 1.0
    alpha = -r[0]
    for k in range(1, n):
        beta = (1 - alpha * alpha) * beta
        s = 0.0
        for i in range(k):
            s += r[k - i - 1] * y[i]
        alpha = -(r[k] + s) / beta
        for i in range(k):
            z[i] = y[i] + alpha * y[k - i - 1]
        for i in range(k):
            y[i] = z[i]
        y[k] = alpha
    return y


def make_durbin(n, rng):
    return (0.5 ** np.arange(1, n + 1) * rng.uniform(0.5, 1.0, n),)


def covariance(data):
    """Covariance of the columns, as Polybench's: each column against the columns from it
    on (a vector times a matrix suffix), written into a row and a column at once."""
    m = data.shape[1]
    data = data - np.mean(data, axis=0)
    cov = np.zeros((m, m))
    for i in range(m):
        cov[i:m, i] = cov[i, i:m] = data[:, i] @ data[:, i:m] / (data.shape[0] - 1.0)
    return cov


def make_covariance(n, rng):
    return (rng.uniform(-1, 1, (n + 3, n)),)


PREFIX_KERNELS = {
    "forward_substitution_rows": (forward_substitution_rows, make_forward_substitution),
    "back_substitution": (back_substitution, make_back_substitution),
    "lu_in_place": (lu_in_place, make_lu_decompose),
    "lu_solve": (lu_solve, make_lu_solve),
    "cholesky_rows": (cholesky_rows, make_cholesky),
    "gram_schmidt": (gram_schmidt, make_gram_schmidt),
    "syrk_lower": (syrk_lower, make_syrk_lower),
    "csr_matvec": (csr_matvec, make_csr_matvec),
    "durbin": (durbin, make_durbin),
    "durbin_elements": (durbin_elements, make_durbin),
    "covariance": (covariance, make_covariance),
}


# --- loops over index tuples, rows and moving windows --------------------------------------------


def local_maxima_4d(x):
    """Interior points no smaller than their 3x3x3x3 neighbourhood, over np.ndindex."""
    out = np.zeros(x.shape, dtype=bool)
    for idx in np.ndindex(*[s - 2 for s in x.shape]):
        centre = tuple(i + 1 for i in idx)
        window = x[tuple(slice(i, i + 3) for i in idx)]
        out[centre] = x[centre] >= window.max()
    return out


def make_local_maxima_4d(n, rng):
    return (rng.uniform(-1, 1, (n // 2 + 3,) * 4),)


def weighted_pairs(x):
    """A double sum over itertools.product of two ranges."""
    import itertools

    s = 0.0
    for i, j in itertools.product(range(x.shape[0]), range(x.shape[1])):
        s = s + x[i, j] * (i + 1) - j
    return s


def make_weighted_pairs(n, rng):
    return (rng.uniform(-1, 1, (n, 5)),)


def row_dots(x, y):
    """enumerate of zip over the rows of two arrays."""
    out = np.zeros(x.shape[0])
    for k, (a, b) in enumerate(zip(x, y)):
        out[k] = a @ b + k
    return out


def make_row_dots(n, rng):
    return rng.uniform(-1, 1, (n, 4)), rng.uniform(-1, 1, (n, 4))


def moving_windows(x, w):
    """A valid 1-D correlation and max pooling over windows that move with the index."""
    k = w.shape[0]
    corr = np.zeros(x.shape[0] - k + 1)
    for i in range(corr.shape[0]):
        corr[i] = x[i : i + k] @ w
    pooled = np.zeros(x.shape[0] // 2)
    for i in range(pooled.shape[0]):
        pooled[i] = x[i * 2 : i * 2 + 2].max()
    spread = np.zeros(x.shape[0] + 2)
    for i in range(x.shape[0]):
        spread[i : i + 3] += x[i]
    return corr, pooled, spread


def make_moving_windows(n, rng):
    return rng.uniform(-1, 1, n + 4), rng.uniform(-1, 1, 3)


INDEX_KERNELS = {
    "local_maxima_4d": (local_maxima_4d, make_local_maxima_4d),
    "weighted_pairs": (weighted_pairs, make_weighted_pairs),
    "row_dots": (row_dots, make_row_dots),
    "moving_windows": (moving_windows, make_moving_windows),
}
