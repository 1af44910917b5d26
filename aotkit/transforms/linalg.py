"""Transforms, linear algebra and FFT: the tangents and batching of factorizations, triangular
solves and Fourier transforms.

The ops covered are what aotkit's tracer emits for `numpy.linalg`
(`aotkit.tracing.decompositions`) and what JAX emits for `jnp.linalg` and `jnp.fft`:

- the LAPACK FFI custom calls jaxlib ships for XLA's CPU, by call target: potrf (Cholesky),
  getrf (LU), geqrf and orgqr/ungqr (QR), syevd/heevd (eigh), gesdd/gesvd (SVD), trsm
  (triangular solve), any of s, d, c, z;
- `stablehlo.cholesky`, `stablehlo.triangular_solve` and `stablehlo.fft`.

Derivatives are JAX's (`jax/_src/lax/linalg.py`, `fft.py`) where JAX defines one, taken of
what each kernel computes: a kernel that reads one triangle of its operand (potrf, syevd,
trsm) is a function of that triangle only (and of the real part of a Hermitian diagonal),
and every element of a packed result has its own tangent: getrf's L and U, geqrf's R with
the Householder vectors below it and their scales tau (from the QR tangent, by the LU
factorization `E - Q = V M` that relates Q to the vectors), so a program that reads a
packed result itself (`numpy.linalg.qr(a, mode="raw")`) is differentiated correctly too.

Tangents are made of the linear primitives of `aotkit.transforms.linear` and two more
defined here, each with its transpose: `triangular_solve`, linear in its right-hand side
(emitted as `stablehlo.triangular_solve`, which every XLA backend compiles), and `fft`.

Where a derivative does not exist the rule raises a `TransformError` that says why: the
eigenvectors of a non-symmetric matrix (geev), the singular vectors of a full SVD of a
non-square matrix (no unique ones; JAX defines none), and a kernel's scratch result (the
vectors slot of a values-only call) that the program goes on to use.

Batching: every kernel here maps over leading batch dimensions, so a batched call is the
same call with one more of them (layouts and `num_batch_dims` updated); other custom
calls keep `batching.loop_fallback`.
"""

from __future__ import annotations

import functools

import numpy as np
from jaxlib.mlir import ir
from jaxlib.mlir.dialects import stablehlo

from aotkit import dtypes
from aotkit.tracing import core as tracer_core
from aotkit.tracing.decompositions import _permutation as pivots_to_permutation
from aotkit.transforms import _hlo as H
from aotkit.transforms import _ir, batching, jvp
from aotkit.transforms import linear as L
from aotkit.transforms.core import Linear, TransformError, op_site

_I32 = np.dtype(np.int32)

# --- reading a LAPACK call -----------------------------------------------------------------------


def _char(op, key: str, default: str) -> str:
    """A character attribute of the kernel (`uplo`, `mode`, ...), ASCII in a ui8."""
    attributes = op.operation.attributes
    if "mhlo.backend_config" not in attributes:
        return default
    config = ir.DictAttr(attributes["mhlo.backend_config"])
    return chr(ir.IntegerAttr(config[key]).value) if key in config else default


def _u8(char: str) -> ir.IntegerAttr:
    return ir.IntegerAttr.get(ir.IntegerType.get_unsigned(8), ord(char))


def _live(value: ir.Value) -> bool:
    """Whether anything the program returns (or any op without results) depends on
    `value`: a dead value's tangent is never read."""
    seen, stack = set(), [value]
    while stack:
        for use in stack.pop().uses:
            owner = use.owner
            o = getattr(owner, "operation", owner)
            if len(o.results) == 0 or o.name in ("func.call", "stablehlo.composite"):
                return True
            for r in o.results:
                if r not in seen:
                    seen.add(r)
                    stack.append(r)
    return False


def _scratch(ctx, index: int, what: str) -> None:
    """A result the kernel leaves undefined (LAPACK's workspace) has no derivative: fine
    while nothing uses it."""
    if _live(ctx.op.operation.results[index]):
        raise TransformError(
            f"{ctx.ev.transform}: {op_site(ctx.op)}: result {index} is {what}, which the "
            "kernel leaves undefined, and the program uses it; it has no derivative. Use the "
            "call's other results"
        )


def _variant(ctx, primals, avals, **chars) -> list:
    """The op's kernel with other character attributes (a values-only call made to give
    the vectors too), results of `avals`."""
    o = ctx.op.operation
    attributes = {n: o.attributes[n] for n in o.attributes}
    config = {a.name: a.attr for a in ir.DictAttr(attributes["mhlo.backend_config"])}
    config.update({k: _u8(v) for k, v in chars.items()})
    attributes["mhlo.backend_config"] = ir.DictAttr.get(config)
    attributes.pop("sdy.sharding_rule", None)  # it spells out the result shapes
    return H.results(H.create(o.name, list(primals), avals, attributes))


# --- matrices (primal values) --------------------------------------------------------------------


def _aval(x) -> tuple:
    return (tuple(x.shape), np.dtype(x.dtype))


def _last2(shape) -> tuple[int, int]:
    return (len(shape) - 2, len(shape) - 1)


def _batch(shape) -> tuple[int, ...]:
    return tuple(range(len(shape) - 2))


def _mask(shape, lower: bool, k: int = 0):
    """`tril(ones, k)` (lower) or `triu(ones, k)` as booleans of `shape`'s last two axes."""
    rows, cols = shape[-2:]
    d = H.sub(H.iota((rows, cols), _I32, 1), H.iota((rows, cols), _I32, 0))
    return H.broadcast_in_dim(H.compare(d, k, "LE" if lower else "GE"), shape, _last2(shape))


def _tri(x, lower: bool, k: int = 0):
    return H.select(_mask(x.shape, lower, k), x, 0)


def _eye(shape, dtype):
    rows, cols = shape[-2:]
    eq = H.compare(H.iota((rows, cols), _I32, 0), H.iota((rows, cols), _I32, 1), "EQ")
    return H.broadcast_in_dim(H.convert(eq, dtype), tuple(shape), _last2(shape))


def _rows(v, shape):
    """`v[..., i]` at `[..., i, j]`: a vector broadcast along the last axis."""
    return H.broadcast_in_dim(v, tuple(shape), _batch(shape) + (len(shape) - 2,))


def _cols(v, shape):
    """`v[..., j]` at `[..., i, j]`."""
    return H.broadcast_in_dim(v, tuple(shape), _batch(shape) + (len(shape) - 1,))


def _swap_last2(ndim: int) -> tuple[int, ...]:
    return (*range(ndim - 2), ndim - 1, ndim - 2)


def _mT(x):
    return H.transpose(x, _swap_last2(x.ndim))


def _adj(x):
    return H.conj(_mT(x))


def _block(x, rows: tuple[int, int] | None = None, cols: tuple[int, int] | None = None):
    """`x[..., r0:r1, c0:c1]`."""
    start, limit = [0] * x.ndim, list(x.shape)
    if rows is not None:
        start[-2], limit[-2] = rows
    if cols is not None:
        start[-1], limit[-1] = cols
    return H.slice_(x, start, limit)


def _highest() -> ir.ArrayAttr:
    # The products inside a decomposition's derivative are the decomposition's own
    # arithmetic, not a product the user wrote: float32-faithful, as JAX's linalg rules.
    return tracer_core.precision_attr(("HIGHEST", "HIGHEST"))


def _matmul_dims(ndim: int) -> _ir.DotDims:
    batch = tuple(range(ndim - 2))
    return _ir.DotDims((ndim - 1,), (ndim - 2,), batch, batch)


def _mm(a, b):
    """a @ b over the last two axes (the same batch dimensions in front)."""
    d = _matmul_dims(a.ndim)
    return H.dot_general(
        a,
        b,
        (d.lhs_contract, d.rhs_contract),
        (d.lhs_batch, d.rhs_batch),
        precision=_highest(),
        dtype=a.dtype,
    )


_TRANSPOSE_ATTR = {"N": "NO_TRANSPOSE", "T": "TRANSPOSE", "H": "ADJOINT"}


def triangular_solve(a, b, *, left: bool, lower: bool, unit: bool, mode: str):
    """x with `op(a) x = b` (left) or `x op(a) = b`, reading one triangle of a (not its
    diagonal when `unit`); op by `mode`: N (a), T (transpose), H (conjugate transpose),
    C (conjugate). One `stablehlo.triangular_solve`, batched over leading dimensions."""
    if not dtypes.is_complex(a.dtype):
        mode = {"H": "T", "C": "N"}.get(mode, mode)
    if mode == "C":
        a, mode = H.conj(a), "N"
    attributes = {
        "left_side": ir.BoolAttr.get(left),
        "lower": ir.BoolAttr.get(lower),
        "unit_diagonal": ir.BoolAttr.get(unit),
        "transpose_a": stablehlo.TransposeAttr.get(_TRANSPOSE_ATTR[mode]),
    }
    (out,) = H.create("stablehlo.triangular_solve", [a, b], [_aval(b)], attributes).results
    return H.wrap(out)


def _fft_aval(x, *, kind: str, lengths: tuple[int, ...]):
    shape, dtype = x
    if kind == "RFFT":
        return (tuple(shape[:-1]) + (lengths[-1] // 2 + 1,), dtypes.complex_dtype(dtype))
    if kind == "IRFFT":
        return (tuple(shape[:-1]) + (lengths[-1],), dtypes.real_dtype(dtype))
    return (tuple(shape), np.dtype(dtype))


def fft(x, kind: str, lengths):
    """`stablehlo.fft` of type `kind` (FFT, IFFT, RFFT, IRFFT) over the trailing axes."""
    lengths = tuple(int(n) for n in lengths)
    attributes = {
        "fft_type": stablehlo.FftTypeAttr.get(kind),
        "fft_length": H.i64_array(lengths),
    }
    aval = _fft_aval(_aval(x), kind=kind, lengths=lengths)
    (out,) = H.create("stablehlo.fft", [x], [aval], attributes).results
    return H.wrap(out)


# --- the linear primitives -----------------------------------------------------------------------


def _register(prim: Linear) -> Linear:
    assert prim.name not in L.LINEAR, prim.name
    L.LINEAR[prim.name] = prim
    return prim


# The transpose of `b -> op(a)^-1 b` is `g -> op(a)^-T g`: transposing the operator swaps
# N with T and H with C (JAX's rule: transpose_a flips, conjugate_a stays).
_TRANSPOSED_MODE = {"N": "T", "T": "N", "H": "C", "C": "H"}


def _trsm_transpose(g, a, b, *, left, lower, unit, mode):
    return [triangular_solve(a, g, left=left, lower=lower, unit=unit, mode=_TRANSPOSED_MODE[mode])]


TRSM = _register(
    Linear(
        "triangular_solve",
        (1,),
        lambda a, b, **params: triangular_solve(a, b, **params),
        _trsm_transpose,
        lambda a, b, **_: b,
    )
)


def trsm_t(T, a, t, *, left: bool, lower: bool, unit: bool = False, mode: str = "N"):
    """The tangent `op(a)^-1 t` (left) or `t op(a)^-1` of a right-hand side t."""
    if t is None:
        return None
    if not dtypes.is_complex(a.dtype):
        mode = {"H": "T", "C": "N"}.get(mode, mode)
    return T.bind(TRSM, [a, t], {"left": left, "lower": lower, "unit": unit, "mode": mode})


def _fft_mask(g, n: int, dtype):
    """JAX's weights of an RFFT's bins along the last axis: 2 for a bin that stands for
    itself and its mirror, 1 for the DC bin (and the Nyquist bin when `n` is even)."""
    m = g.shape[-1]
    w = np.full(m, 2.0)
    w[0] = 1.0
    if n % 2 == 0:
        w[-1] = 1.0
    return H.broadcast_in_dim(tracer_core.constant(w, np.dtype(dtype)), g.shape, (g.ndim - 1,))


def _fft_transpose(g, t, *, kind, lengths):
    if kind == "RFFT":
        # The bins RFFT drops are the conjugates of those it keeps: the transpose is an
        # IRFFT of the conjugate with each kept bin counted once.
        size = int(np.prod(lengths))
        weights = H.div(H.like(g, float(size)), _fft_mask(g, lengths[-1], g.dtype))
        return [fft(H.mul(H.conj(g), weights), "IRFFT", lengths)]
    if kind == "IRFFT":
        x = fft(g, "RFFT", lengths)
        scale = H.div(_fft_mask(x, lengths[-1], x.dtype), H.like(x, float(np.prod(lengths))))
        return [H.conj(H.mul(x, scale))]
    return [fft(g, kind, lengths)]  # the DFT matrix is symmetric


FFT = _register(
    Linear(
        "fft",
        (0,),
        lambda t, *, kind, lengths: fft(t, kind, lengths),
        _fft_transpose,
        _fft_aval,
    )
)


def fft_t(T, t, kind: str, lengths):
    if t is None:
        return None
    return T.bind(FFT, [t], {"kind": kind, "lengths": tuple(int(n) for n in lengths)})


# --- matrices (tangents) -------------------------------------------------------------------------


def tri_t(T, t, lower: bool, k: int = 0):
    if t is None:
        return None
    return L.select(T, _mask(t.shape, lower, k), t, None, _aval(t))


def mT_t(T, t):
    return None if t is None else L.transpose(T, t, _swap_last2(len(t.shape)))


def adj_t(T, t):
    return L.conj(T, mT_t(T, t))


def mm_t(T, a, b, linear: str):
    """a @ b with the tangent in `linear` ("lhs" or "rhs"), the other a primal matrix."""
    primal = b if linear == "lhs" else a
    return L.dot_general(
        T,
        a,
        b,
        dims=_matmul_dims(primal.ndim),
        precision=_highest(),
        dtype=primal.dtype,
        linear=linear,
    )


def diag_t(T, t):
    """The main diagonal of a square tangent, as its last axis."""
    if t is None:
        return None
    return L.reduce_sum(T, L.mul(T, t, _eye(t.shape, t.dtype)), (len(t.shape) - 1,))


def real_t(T, t):
    return L.real(T, t) if t is not None and dtypes.is_complex(t.dtype) else t


def _from_triangle(T, t, lower: bool):
    """The tangent of the Hermitian matrix a kernel reads from one triangle of its operand
    (the real part of the diagonal): what it computes from, whatever the other holds."""
    if t is None:
        return None
    strict = tri_t(T, t, lower, -1 if lower else 1)
    diag = L.mul(T, t, _eye(t.shape, t.dtype))
    if dtypes.is_complex(t.dtype):
        diag = L.convert(T, L.real(T, diag), t.dtype)
    return L.add(T, L.add(T, strict, adj_t(T, strict)), diag)


def _i_imag_diag(T, c):
    """`i Im(diag(c))` as a diagonal matrix (zero for real c)."""
    if c is None or not dtypes.is_complex(c.dtype):
        return None
    d = L.mul(T, c, _eye(c.shape, c.dtype))
    return L.sub(T, d, L.convert(T, L.real(T, d), c.dtype))


# --- Cholesky ------------------------------------------------------------------------------------


def _phi_weights(x):
    """1 below the diagonal, 1/2 on it, 0 above: Φ of the Cholesky tangent."""
    below = H.convert(_mask(x.shape, True, -1), x.dtype)
    return H.add(below, H.mul(_eye(x.shape, x.dtype), 0.5))


def _cholesky_tangent(T, low, da):
    """dL = L Φ(L^-1 dA L^-H) (JAX's rule, from Murray 2016), L lower."""
    inner = trsm_t(T, low, da, left=False, lower=True, mode="H")
    inner = trsm_t(T, low, inner, left=True, lower=True)
    if inner is None:
        return None
    return mm_t(T, low, L.mul(T, inner, _phi_weights(low)), "rhs")


def _factor_tangent(T, f, ta, lower: bool):
    """The tangent of the triangle a Cholesky kernel writes (the lower factor L, or U = L^H)."""
    factor = _tri(f, lower)
    low = factor if lower else _adj(factor)
    dl = _cholesky_tangent(T, low, _from_triangle(T, ta, lower))
    return dl if lower else adj_t(T, dl)


def _potrf(ctx, primals, tangents):
    (ta,) = tangents
    T = ctx.T
    lower = _char(ctx.op, "uplo", "L") == "L"
    f, info = ctx.replay(primals)
    # The kernel leaves the other triangle of its operand in place.
    kept = tri_t(T, ta, not lower, 1 if lower else -1)
    return [f, info], [L.add(T, _factor_tangent(T, f, ta, lower), kept), None]


@jvp.defjvp("stablehlo.cholesky")
def _cholesky(ctx, primals, tangents):
    # The other triangle of the result is implementation-defined: its tangent is zero.
    lower = _ir.bool_attr(ctx.op, "lower")
    (f,) = ctx.replay(primals)
    return [f], [_factor_tangent(ctx.T, f, tangents[0], lower)]


# --- triangular solves ---------------------------------------------------------------------------


def _solve_rule(ctx, primals, tangents, *, left: bool, lower: bool, unit: bool, mode: str):
    """x = op(A)^-1 B: dx = op(A)^-1 (dB - op(dA) x) (left; mirrored on the right), dA from
    the triangle the solve reads."""
    a = primals[0]
    ta, tb = tangents
    T = ctx.T
    (x,) = ctx.replay(primals)
    rhs = tb
    if ta is not None:
        da = tri_t(T, ta, lower, (-1 if lower else 1) if unit else 0)
        op_da = da if mode == "N" else mT_t(T, da) if mode == "T" else adj_t(T, da)
        prod = mm_t(T, op_da, x, "lhs") if left else mm_t(T, x, op_da, "rhs")
        rhs = L.sub(T, rhs, prod)
    return [x], [trsm_t(T, a, rhs, left=left, lower=lower, unit=unit, mode=mode)]


def _trsm(ctx, primals, tangents):
    op = ctx.op
    return _solve_rule(
        ctx,
        primals,
        tangents,
        left=_char(op, "side", "L") == "L",
        lower=_char(op, "uplo", "L") == "L",
        unit=_char(op, "diag", "N") == "U",
        mode={"N": "N", "T": "T", "C": "H"}[_char(op, "trans_x", "N")],
    )


_MODE_OF_ATTR = {v: k for k, v in _TRANSPOSE_ATTR.items()}


@jvp.defjvp("stablehlo.triangular_solve")
def _triangular_solve(ctx, primals, tangents):
    op = ctx.op
    transpose = stablehlo.TransposeAttr(_ir.attr(op, "transpose_a")).value
    return _solve_rule(
        ctx,
        primals,
        tangents,
        left=_ir.bool_attr(op, "left_side"),
        lower=_ir.bool_attr(op, "lower"),
        unit=_ir.bool_attr(op, "unit_diagonal"),
        mode=_MODE_OF_ATTR[transpose],
    )


# --- LU ------------------------------------------------------------------------------------------


def _getrf(ctx, primals, tangents):
    """JAX's rule (De Hoog, Anderssen and Lukas): with P A = L U, X = L^-1 P dA U^-1,
    dL = L tril(X, -1) and dU = triu(X) U, packed as the kernel packs L and U. The pivots
    are integers: no tangent."""
    (a,), (ta,) = primals, tangents
    T = ctx.T
    lu, ipiv, info = ctx.replay(primals)
    *batch, m, n = a.shape
    batch, k, dt = tuple(batch), min(m, n), a.dtype
    perm = pivots_to_permutation(H.sub(ipiv, 1), m)
    square = batch + (m, m)
    onehot = H.compare(_rows(perm, square), H.iota(square, _I32, len(square) - 1), "EQ")
    pa = mm_t(T, H.convert(onehot, dt), ta, "rhs")
    zero = H.scalar(0, dt)
    lower = H.pad(
        _tri(_block(lu, cols=(0, k)), True, -1), zero, [0] * a.ndim, [0] * len(batch) + [0, m - k]
    )
    lower = H.add(lower, _eye(square, dt))
    upper = H.pad(
        _tri(_block(lu, rows=(0, k)), False), zero, [0] * a.ndim, [0] * len(batch) + [n - k, 0]
    )
    ushape = batch + (n, n)
    tail = H.logical_and(
        H.compare(_eye(ushape, _I32), 1, "EQ"),
        H.compare(H.iota(ushape, _I32, len(ushape) - 1), k, "GE"),
    )
    upper = H.add(upper, H.convert(tail, dt))
    x = trsm_t(T, lower, pa, left=True, lower=True, unit=True)
    x = trsm_t(T, upper, x, left=False, lower=False)
    dl = mm_t(T, lower, tri_t(T, x, True, -1), "rhs")
    du = mm_t(T, tri_t(T, x, False), upper, "lhs")
    return [lu, ipiv, info], [L.add(T, dl, du), None, None]


# --- QR ------------------------------------------------------------------------------------------


def _householder_vectors(h, k: int):
    """The unit lower trapezoidal V (m, k) whose columns geqrf stores below h's diagonal."""
    first = _block(h, cols=(0, k))
    return H.add(_tri(first, True, -1), _eye(first.shape, h.dtype))


def _compact_wy(v, tau):
    """(T, K, U) with H_1 ... H_k = I - V T V^H (LAPACK's larft): T = K^-1 D for
    U = striu(V^H V), K = I + D U, D = diag(tau). No division by tau, which is 0 for a
    reflector that is the identity."""
    u = _tri(_mm(_adj(v), v), False, 1)
    eye = _eye(u.shape, u.dtype)
    k_mat = H.add(eye, H.mul(u, _rows(tau, u.shape)))
    t_mat = triangular_solve(
        k_mat, H.mul(eye, _rows(tau, u.shape)), left=True, lower=False, unit=True, mode="N"
    )
    return t_mat, k_mat, u


def _pad_to(T, t, shape):
    """A tangent padded with zeros at the end of its last two axes to `shape`."""
    if t is None or tuple(t.shape) == tuple(shape):
        return t
    high = [s - n for s, n in zip(shape, t.shape, strict=True)]
    return L.pad(T, t, None, [0] * len(shape), high, [0] * len(shape), _aval(t))


def _geqrf(ctx, primals, tangents):
    """A = Q R with Q = H_1 ... H_k: R's tangent is JAX's (QR rule, with its wide case),
    the vectors' and tau's follow from Q's, since E - Q = V M (M = T W^H, W the first k
    rows of V) is the LU factorization of E - Q (unit lower V, upper M, diag(M) = tau)."""
    (a,), (ta,) = primals, tangents
    T = ctx.T
    h, tau = ctx.replay(primals)
    *batch, m, n = a.shape
    batch, k, dt, nb = tuple(batch), min(m, n), a.dtype, len(batch)
    v = _householder_vectors(h, k)
    t_mat, _, _ = _compact_wy(v, tau)
    w1 = _block(v, rows=(0, k))
    m_mat = _mm(t_mat, _adj(w1))
    q = H.sub(_eye(v.shape, dt), _mm(v, m_mat))
    r = _tri(_block(h, rows=(0, k)), False)
    r1 = _block(r, cols=(0, k))
    # JAX's QR tangent of the square or tall part A1 = Q R1.
    y = trsm_t(T, r1, L.slice_(T, ta, [0] * a.ndim, (*batch, m, k)), left=False, lower=False)
    c = mm_t(T, _adj(q), y, "rhs")
    c_low = tri_t(T, c, True, -1)
    do = L.add(T, L.sub(T, c_low, adj_t(T, c_low)), _i_imag_diag(T, c))
    dq = L.add(T, mm_t(T, q, L.sub(T, do, c), "rhs"), y)
    dr = mm_t(T, L.sub(T, c, do), r1, "lhs")
    if n > k:  # wide: R2 = Q^H A2
        ta2 = L.slice_(T, ta, [0] * nb + [0, k], (*batch, m, n))
        a2 = _block(a, cols=(k, n))
        dr2 = L.add(T, mm_t(T, adj_t(T, dq), a2, "lhs"), mm_t(T, _adj(q), ta2, "rhs"))
        dr = L.concatenate(
            T, [dr, dr2], a.ndim - 1, [(batch + (k, k), dt), (batch + (k, n - k), dt)]
        )
    # The LU tangent of E - Q = V M. A zero pivot of M is a reflector LAPACK left as the
    # identity (tau = 0: the last one of a real matrix with m <= n); it divides nothing
    # below it, so a 1 in its place gives the same tangent.
    pivot_zero = H.logical_and(
        H.compare(_eye(m_mat.shape, _I32), 1, "EQ"), H.compare(m_mat, 0, "EQ")
    )
    m_safe = H.select(pivot_zero, H.like(m_mat, 1), m_mat)
    dx = L.neg(T, dq)
    g = trsm_t(
        T,
        _block(h, rows=(0, k), cols=(0, k)),
        L.slice_(T, dx, [0] * a.ndim, (*batch, k, k)),
        left=True,
        lower=True,
        unit=True,
    )
    low = tri_t(T, trsm_t(T, m_safe, g, left=False, lower=False), True, -1)
    dm = tri_t(T, L.sub(T, g, mm_t(T, low, m_mat, "lhs")), False)
    dv = mm_t(T, w1, low, "rhs")
    if m > k:
        dx2 = L.slice_(T, dx, [0] * nb + [k, 0], (*batch, m, k))
        v2 = _block(v, rows=(k, m))
        dv2 = trsm_t(T, m_safe, L.sub(T, dx2, mm_t(T, v2, dm, "rhs")), left=False, lower=False)
        dv = L.concatenate(
            T, [dv, dv2], a.ndim - 2, [(batch + (k, k), dt), (batch + (m - k, k), dt)]
        )
    dtau = L.select(T, H.compare(tau, 0, "NE"), diag_t(T, dm), None, _aval(tau))
    th = L.select(
        T,
        _mask(h.shape, False),
        _pad_to(T, dr, h.shape),
        _pad_to(T, dv, h.shape),
        _aval(h),
    )
    return [h, tau], [th, dtau]


def _orgqr(ctx, primals, tangents):
    """Q = (H_1 ... H_k)[:, :n] = E - V T W^H from the vectors below the diagonal of the first
    k columns and tau (nothing else of the operand is read): dQ by the product rule, with
    dT = K^-1 (dD (I - U T) - D dU T) from T = K^-1 D (see `_compact_wy`)."""
    (a, tau), (ta, ttau) = primals, tangents
    T = ctx.T
    (q,) = ctx.replay(primals)
    *batch, m, n = a.shape
    batch, k = tuple(batch), tau.shape[-1]
    nb = len(batch)
    v = _householder_vectors(a, k)
    t_mat, k_mat, u = _compact_wy(v, tau)
    dv = None
    if ta is not None:
        dv = tri_t(T, L.slice_(T, ta, [0] * a.ndim, (*batch, m, k)), True, -1)
    w = _block(v, rows=(0, n))
    dw = None if dv is None else L.slice_(T, dv, [0] * a.ndim, (*batch, n, k))
    du = tri_t(T, L.add(T, mm_t(T, adj_t(T, dv), v, "lhs"), mm_t(T, _adj(v), dv, "rhs")), False, 1)
    eye = _eye(u.shape, u.dtype)
    kk = batch + (k, k)
    rhs = L.sub(
        T,
        L.mul(
            T, L.broadcast_in_dim(T, ttau, kk, tuple(range(nb)) + (nb,)), H.sub(eye, _mm(u, t_mat))
        ),
        L.mul(T, mm_t(T, du, t_mat, "lhs"), _rows(tau, kk)),
    )
    dt_mat = trsm_t(T, k_mat, rhs, left=True, lower=False, unit=True)
    w_adj = _adj(w)
    dq = L.add(
        T,
        L.add(
            T,
            mm_t(T, dv, _mm(t_mat, w_adj), "lhs"),
            mm_t(T, v, mm_t(T, dt_mat, w_adj, "lhs"), "rhs"),
        ),
        mm_t(T, _mm(v, t_mat), adj_t(T, dw), "rhs"),
    )
    return [q], [L.neg(T, dq)]


# --- eigh ----------------------------------------------------------------------------------------


def _syevd(ctx, primals, tangents):
    """JAX's rule (distinct eigenvalues): with M = V^H dA V, dw = Re diag(M) and
    dV = V (F * M), F[i, j] = 1 / (w_j - w_i) off the diagonal, 0 on it."""
    (ta,) = tangents
    T = ctx.T
    lower = _char(ctx.op, "uplo", "L") == "L"
    vectors = _char(ctx.op, "mode", "V") == "V"
    if vectors:
        v, w, info = ctx.replay(primals)
    else:
        _scratch(ctx, 0, "the eigenvectors' slot of a values-only call (mode 'N')")
        v, w, info = _variant(
            ctx, primals, [_ir.aval(r) for r in ctx.op.operation.results], mode="V"
        )
    mat = mm_t(T, _adj(v), mm_t(T, _from_triangle(T, ta, lower), v, "lhs"), "rhs")
    dw = real_t(T, diag_t(T, mat))
    dv = None
    if vectors:
        wc = H.convert(w, v.dtype)
        eye = _eye(v.shape, v.dtype)
        gap = H.add(eye, H.sub(_cols(wc, v.shape), _rows(wc, v.shape)))
        f = H.sub(H.reciprocal(gap), eye)
        dv = mm_t(T, v, L.mul(T, mat, f), "rhs")
    return [v, w, info], [dv, dw, None]


# --- SVD -----------------------------------------------------------------------------------------


def _svd(ctx, primals, tangents):
    """JAX's rule: ds = Re diag(U^H dA V); the vectors' tangents for distinct singular
    values, of the thin factors (and of the full ones of a square matrix)."""
    (a,), (ta,) = primals, tangents
    T = ctx.T
    op = ctx.op
    results = op.operation.results
    mode = _char(op, "mode", "A")
    *batch, m, n = a.shape
    batch, k, dt = tuple(batch), min(m, n), a.dtype
    _scratch(ctx, 0, "the operand's storage, which the kernel overwrites")
    if mode == "N":
        _scratch(ctx, 2, "the left singular vectors' slot of a values-only call (mode 'N')")
        _scratch(ctx, 3, "the right singular vectors' slot of a values-only call (mode 'N')")
        avals = [_ir.aval(r) for r in results]
        avals[2:4] = [(batch + (m, k), dt), (batch + (k, n), dt)]
        a_out, s, u, vt, info = _variant(ctx, primals, avals, mode="S")
        outs = [a_out, s, H.zeros(*_ir.aval(results[2])), H.zeros(*_ir.aval(results[3])), info]
        vectors = False
    else:
        outs = ctx.replay(primals)
        a_out, s, u, vt, info = outs
        vectors = _live(results[2]) or _live(results[3])
        if vectors and mode == "A" and m != n:
            raise TransformError(
                f"{ctx.ev.transform}: {op_site(op)} is a full SVD "
                f"(full_matrices=True) of {m}x{n} matrices, and the program uses its singular "
                f"vectors: the vectors beyond the first {k} are any basis of a complement, "
                "with no derivative (JAX defines none either). Use full_matrices=False"
            )
        u, vt = _block(u, cols=(0, k)), _block(vt, rows=(0, k))
    v, uh = _adj(vt), _adj(u)
    ds_mat = mm_t(T, uh, mm_t(T, ta, v, "lhs"), "rhs")
    ds = real_t(T, diag_t(T, ds_mat))
    if not vectors:
        return outs, [None, ds, None, None, None]
    kk = batch + (k, k)
    s_row, s_col = _cols(s, kk), _rows(s, kk)  # s_j, s_i at [i, j]
    eye_r = _eye(kk, s.dtype)
    f = H.convert(
        H.sub(H.reciprocal(H.add(H.mul(H.add(s_row, s_col), H.sub(s_row, s_col)), eye_r)), eye_r),
        dt,
    )
    s_zero = H.compare(s, 0, "EQ")
    s_inv = H.select(s_zero, H.like(s, 0), H.reciprocal(H.select(s_zero, H.like(s, 1), s)))
    half_inv = H.convert(H.mul(H.mul(eye_r, _rows(s_inv, kk)), 0.5), dt)
    dss = L.mul(T, ds_mat, H.convert(s_row, dt))
    sds = L.mul(T, ds_mat, H.convert(s_col, dt))
    inner_u = L.add(
        T,
        L.mul(T, L.add(T, dss, adj_t(T, dss)), f),
        L.mul(T, L.sub(T, ds_mat, adj_t(T, ds_mat)), half_inv),
    )
    du = mm_t(T, u, inner_u, "rhs")
    dv = mm_t(T, v, L.mul(T, L.add(T, sds, adj_t(T, sds)), f), "rhs")
    if m > n:
        dav = mm_t(T, ta, v, "lhs")
        rest = L.sub(T, dav, mm_t(T, u, mm_t(T, uh, dav, "rhs"), "rhs"))
        du = L.add(T, du, L.div(T, rest, H.convert(_cols(s, batch + (m, k)), dt)))
    if n > m:
        dahu = mm_t(T, adj_t(T, ta), u, "lhs")
        rest = L.sub(T, dahu, mm_t(T, v, mm_t(T, vt, dahu, "rhs"), "rhs"))
        dv = L.add(T, dv, L.div(T, rest, H.convert(_cols(s, batch + (n, k)), dt)))
    du = _pad_to(T, du, _ir.aval(results[2])[0])
    dvt = _pad_to(T, adj_t(T, dv), _ir.aval(results[3])[0])
    return outs, [None, ds, du, dvt, None]


# --- what has no derivative ----------------------------------------------------------------------


def _geev(ctx, primals, tangents):
    op = ctx.op
    raise TransformError(
        f"{ctx.ev.transform}: {op_site(op)} is the eigendecomposition of a general "
        "(non-symmetric) matrix, which aotkit has no derivative for; for a symmetric or "
        "Hermitian matrix use eigh"
    )


# --- FFT -----------------------------------------------------------------------------------------


@jvp.defjvp("stablehlo.fft")
def _fft(ctx, primals, tangents):
    op = ctx.op
    kind = stablehlo.FftTypeAttr(_ir.attr(op, "fft_type")).value
    lengths = _ir.i64s(op, "fft_length")
    return ctx.replay(primals), [fft_t(ctx.T, tangents[0], kind, lengths)]


# --- batching ------------------------------------------------------------------------------------


def _batch_leading(ctx, values, batched):
    """An op that maps over its operands' leading dimensions: one more of them."""
    operands = [ctx.batch(v, b) for v, b in zip(values, batched, strict=True)]
    return ctx.replay(operands), [True] * len(ctx.op.operation.results)


@functools.cache
def _batched_layout_values(layout: tuple[int, ...]) -> tuple[int, ...]:
    # Minor-to-major: the new dimension 0 is the most major.
    return tuple(d + 1 for d in layout) + (0,)


def _batched_layout(attr) -> ir.DenseIntElementsAttr:
    old = tuple(int(d) for d in ir.DenseIntElementsAttr(attr))
    new = _batched_layout_values(old)
    return ir.DenseIntElementsAttr.get(
        np.asarray(new, np.int64), type=ir.IndexType.get(), shape=[len(new)]
    )


def _batch_lapack(ctx, values, batched):
    """A LAPACK FFI kernel loops over its operands' leading dimensions itself: the batched
    call is the same call with one more (layouts and `num_batch_dims` follow)."""
    o = ctx.op.operation
    operands = [ctx.batch(v, b) for v, b in zip(values, batched, strict=True)]
    attributes = {n: o.attributes[n] for n in o.attributes}
    attributes.pop("sdy.sharding_rule", None)  # it spells out the unbatched shapes
    for key in ("operand_layouts", "result_layouts"):
        if key in attributes:
            layouts = ir.ArrayAttr(attributes[key])
            attributes[key] = ir.ArrayAttr.get([_batched_layout(x) for x in layouts])
    if "mhlo.frontend_attributes" in attributes:
        front = {a.name: a.attr for a in ir.DictAttr(attributes["mhlo.frontend_attributes"])}
        if "num_batch_dims" in front:
            count = int(ir.StringAttr(front["num_batch_dims"]).value) + 1
            front["num_batch_dims"] = ir.StringAttr.get(str(count))
        attributes["mhlo.frontend_attributes"] = ir.DictAttr.get(front)
    new = H.create(o.name, operands, ctx.out_avals(), attributes)
    return H.results(new), [True] * len(o.results)


def _batch_triangular_solve(ctx, values, batched):
    (a, b), (a_batched, _) = values, batched
    op = ctx.op
    if a_batched:
        return _batch_leading(ctx, values, batched)
    # Only the right-hand side is batched: the batch joins its columns (left) or its rows
    # (right), so the matrix is not copied for every element (JAX's rule).
    left = _ir.bool_attr(op, "left_side")
    axis = b.ndim - 2 if left else b.ndim - 3
    moved = H.moveaxis(b, 0, axis)
    if left:
        flat = H.reshape(moved, moved.shape[:-2] + (moved.shape[-2] * moved.shape[-1],))
    else:
        flat = H.reshape(moved, moved.shape[:-3] + (moved.shape[-3] * moved.shape[-2], b.shape[-1]))
    attributes = {n: op.operation.attributes[n] for n in op.operation.attributes}
    (out,) = H.results(H.create(op.operation.name, [a, flat], [_aval(flat)], attributes))
    return [H.moveaxis(H.reshape(out, moved.shape), axis, 0)], [True]


# --- the tables ----------------------------------------------------------------------------------

_JVP = {
    "potrf": (_potrf, "sdcz"),
    "getrf": (_getrf, "sdcz"),
    "geqrf": (_geqrf, "sdcz"),
    "orgqr": (_orgqr, "sd"),
    "ungqr": (_orgqr, "cz"),
    "syevd": (_syevd, "sd"),
    "heevd": (_syevd, "cz"),
    "gesdd": (_svd, "sdcz"),
    "gesvd": (_svd, "sdcz"),
    "trsm": (_trsm, "sdcz"),
    "geev": (_geev, "sdcz"),
}
for _base, (_rule, _prefixes) in _JVP.items():
    for _p in _prefixes:
        jvp.CUSTOM_CALLS[f"lapack_{_p}{_base}_ffi"] = _rule
        batching.CUSTOM_CALLS[f"lapack_{_p}{_base}_ffi"] = _batch_lapack
batching.BATCH_RULES["stablehlo.cholesky"] = _batch_leading
batching.BATCH_RULES["stablehlo.fft"] = _batch_leading
batching.BATCH_RULES["stablehlo.triangular_solve"] = _batch_triangular_solve
