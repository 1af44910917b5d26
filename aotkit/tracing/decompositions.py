"""Trace stage, decompositions family: `numpy.linalg`'s factorizations and solvers via LAPACK.

Each factorization is one `stablehlo.custom_call` to a LAPACK kernel that jaxlib ships for
XLA's CPU backend, in the form JAX 0.10.2 emits on CPU (the lowered text of JAX's
`linalg.cholesky`):

    %0:2 = stablehlo.custom_call @lapack_spotrf_ffi(%a) {api_version = 1 : i32,
        backend_config = "", mhlo.backend_config = {uplo = 85 : ui8},
        mhlo.frontend_attributes = {num_batch_dims = "1"},
        operand_layouts = [dense<[1, 2, 0]> : tensor<3xindex>],
        result_layouts = [dense<[1, 2, 0]> : tensor<3xindex>, dense<0> : tensor<1xindex>],
        output_operand_aliases = [...operand 0 -> result 0...],
        aotkit.function = "linalg.cholesky"}

A dictionary `mhlo.backend_config` (with `api_version = 1`, as JAX writes it) makes XLA
call the kernel through its typed FFI, attributes by name (`uplo`, `mode`, `side`,
`trans_x`, `diag` as ASCII codes in ui8). The operands and results of the highest rank are
column-major (`[r-2, r-1, r-3, ..., 0]`), the rest row-major; leading dimensions are a
batch (`num_batch_dims`) that the kernel loops over. Targets used: potrf, getrf, geqrf,
orgqr/ungqr, syevd/heevd, gesdd and trsm (s, d, c, z). `aotkit.function` is aotkit's own
mark, read back when a backend refuses the call. The shape rules below compute every
result type from the operands and refuse anything the kernel would misread, so a
wrong-shaped call never reaches XLA.

Where a module runs: tracing happens before a backend is chosen, so the LAPACK calls are in
the module whatever the backend. `cpu` registers jaxlib's targets before compiling such a
module (`aotkit._compat.register_lapack_targets`); the reference interpreter cannot run a
custom call and refuses the module with a CompileError that names the function; PJRT
plugins (GPU) have no LAPACK targets and XLA refuses the module.

Results follow `numpy.linalg` (names, modes, batching over leading dimensions, result
dtypes; integers and booleans are computed in float64, float16/bfloat16 are refused as in
NumPy). NumPy computes float32/complex64 in double precision; aotkit calls the single
precision kernels (as JAX does). Errors NumPy raises from the data (LinAlgError on a
singular or non-positive-definite matrix) cannot be raised at run time: a failed
factorization gives NaN (cholesky, eigh, svd, as JAX) and a singular `solve`/`inv` gives
inf/NaN.
"""

from __future__ import annotations

import operator
from collections import namedtuple

import numpy as np
from jaxlib.mlir import ir
from jaxlib.mlir.dialects import stablehlo

from aotkit import dtypes
from aotkit.tracing.control import fori_loop
from aotkit.tracing.core import RuleContext, Tracer, bind, bind1, emit, full, register, where
from aotkit.tracing.creation import iota
from aotkit.tracing.elementwise import asarray
from aotkit.tracing.hlo import (
    broadcast_shapes,
    broadcast_to_shape,
    cast,
    concat,
    normalize_axis,
    reshape_to,
    reverse,
)
from aotkit.tracing.indexing import getitem, take_along_axis
from aotkit.tracing.linalg import _linalg, _need_matrices, matmul
from aotkit.tracing.reduction import count_nonzero, max_, reduce_raw, reduction_axes
from aotkit.tracing.shape import slice_axis
from aotkit.tracing.sorting import sort_along

_BOOL = np.dtype(np.bool_)
_I32 = np.dtype(np.int32)
_INT64 = np.dtype(np.int64)
_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)
_C128 = np.dtype(np.complex128)
_LAPACK_PREFIX = {
    np.dtype(np.float32): "s",
    np.dtype(np.float64): "d",
    np.dtype(np.complex64): "c",
    np.dtype(np.complex128): "z",
}

SlogdetResult = namedtuple("SlogdetResult", "sign logabsdet")
EighResult = namedtuple("EighResult", "eigenvalues eigenvectors")
QRResult = namedtuple("QRResult", "Q R")
SVDResult = namedtuple("SVDResult", "U S Vh")


# --- the custom call --------------------------------------------------------------------------


def _layout(rank: int, column_major: bool) -> ir.DenseIntElementsAttr:
    dims = (rank - 2, rank - 1, *range(rank - 3, -1, -1)) if column_major else range(rank)[::-1]
    return ir.DenseIntElementsAttr.get(
        np.asarray(list(dims), np.int64), type=ir.IndexType.get(), shape=[rank]
    )


def _u8(char: str) -> ir.IntegerAttr:
    return ir.IntegerAttr.get(ir.IntegerType.get_unsigned(8), ord(char))


def _lapack_call(ctx: RuleContext, base: str, operands, aliases, function: str, **attrs):
    """The custom call to `lapack_<s|d|c|z><base>` with JAX's attributes and layouts."""
    prefix = _LAPACK_PREFIX[ctx.avals_in[0][1]]
    rank = max(len(shape) for shape, _ in ctx.avals_in)
    n_out = len(ctx.avals_out)
    alias_attrs = [
        stablehlo.OutputOperandAlias.get(
            output_tuple_indices=[out] if n_out > 1 else [],
            operand_index=operand,
            operand_tuple_indices=[],
        )
        for operand, out in aliases.items()
    ]
    attributes = {
        "call_target_name": ir.StringAttr.get(f"lapack_{prefix}{base}"),
        "api_version": ir.IntegerAttr.get(ir.IntegerType.get_signless(32), 1),
        "backend_config": ir.StringAttr.get(""),
        "has_side_effect": ir.BoolAttr.get(False),
        "called_computations": ir.ArrayAttr.get([]),
        "operand_layouts": ir.ArrayAttr.get(
            [_layout(len(s), len(s) == rank) for s, _ in ctx.avals_in]
        ),
        "result_layouts": ir.ArrayAttr.get(
            [_layout(len(s), len(s) == rank) for s, _ in ctx.avals_out]
        ),
        "output_operand_aliases": ir.ArrayAttr.get(alias_attrs),
        "mhlo.backend_config": ir.DictAttr.get({k: _u8(v) for k, v in attrs.items()}),
        "mhlo.frontend_attributes": ir.DictAttr.get(
            {"num_batch_dims": ir.StringAttr.get(str(rank - 2))}
        ),
        "aotkit.function": ir.StringAttr.get(function),
    }
    return emit(ctx, "stablehlo.custom_call", *operands, **attributes)


def _require(ok: bool, op: str, what: str) -> None:
    # Operands come from the NumPy-level functions below, which check user input first; a
    # failure here is an aotkit bug, caught before XLA could misread a buffer.
    if not ok:
        raise ValueError(f"{op}: {what} (an aotkit bug: please report it)")


def _matrix(op: str, a, square: bool = False):
    shape, dtype = a
    _require(dtype in _LAPACK_PREFIX, op, f"LAPACK has no {dtype} kernel")
    _require(len(shape) >= 2, op, f"operand of shape {shape} is not a (stack of) matrices")
    if square:
        _require(shape[-1] == shape[-2], op, f"operand of shape {shape} is not square")
    return shape[:-2], shape[-2], shape[-1], dtype


def _potrf_shape(a, *, lower, function):
    batch, _, _, _ = _matrix("lapack potrf", a, square=True)
    return [a, (batch, _I32)]


@register("lapack_potrf", shape=_potrf_shape)
def _lower_potrf(ctx: RuleContext, a, *, lower, function):
    return _lapack_call(ctx, "potrf_ffi", [a], {0: 0}, function, uplo="L" if lower else "U")


def _getrf_shape(a, *, function):
    batch, m, n, _ = _matrix("lapack getrf", a)
    return [a, (batch + (min(m, n),), _I32), (batch, _I32)]


@register("lapack_getrf", shape=_getrf_shape)
def _lower_getrf(ctx: RuleContext, a, *, function):
    return _lapack_call(ctx, "getrf_ffi", [a], {0: 0}, function)


def _geqrf_shape(a, *, function):
    batch, m, n, dtype = _matrix("lapack geqrf", a)
    return [a, (batch + (min(m, n),), dtype)]


@register("lapack_geqrf", shape=_geqrf_shape)
def _lower_geqrf(ctx: RuleContext, a, *, function):
    return _lapack_call(ctx, "geqrf_ffi", [a], {0: 0}, function)


def _orgqr_shape(a, tau, *, function):
    batch, m, n, dtype = _matrix("lapack orgqr", a)
    _require(tau[1] == dtype, "lapack orgqr", f"tau is {tau[1]}, the matrix {dtype}")
    _require(tau[0][:-1] == batch, "lapack orgqr", f"tau {tau[0]} and matrix {a[0]} batches")
    _require(m >= n >= tau[0][-1], "lapack orgqr", f"needs m >= n >= k, got {a[0]}, {tau[0]}")
    return [a]


@register("lapack_orgqr", shape=_orgqr_shape)
def _lower_orgqr(ctx: RuleContext, a, tau, *, function):
    base = "ungqr_ffi" if dtypes.is_complex(ctx.avals_in[0][1]) else "orgqr_ffi"
    return _lapack_call(ctx, base, [a, tau], {0: 0}, function)


def _syevd_shape(a, *, lower, vectors, function):
    batch, _, n, dtype = _matrix("lapack syevd", a, square=True)
    return [a, (batch + (n,), dtypes.real_dtype(dtype)), (batch, _I32)]


@register("lapack_syevd", shape=_syevd_shape)
def _lower_syevd(ctx: RuleContext, a, *, lower, vectors, function):
    base = "heevd_ffi" if dtypes.is_complex(ctx.avals_in[0][1]) else "syevd_ffi"
    mode, uplo = ("V" if vectors else "N"), ("L" if lower else "U")
    return _lapack_call(ctx, base, [a], {0: 0}, function, mode=mode, uplo=uplo)


def _gesdd_shape(a, *, mode, function):
    batch, m, n, dtype = _matrix("lapack gesdd", a)
    _require(min(m, n) > 0, "lapack gesdd", f"empty matrix {a[0]}")
    k = min(m, n)
    u_cols, vt_rows = (k, k) if mode == "S" else (m, n)
    return [
        a,
        (batch + (k,), dtypes.real_dtype(dtype)),
        (batch + (m, u_cols), dtype),
        (batch + (vt_rows, n), dtype),
        (batch, _I32),
    ]


@register("lapack_gesdd", shape=_gesdd_shape)
def _lower_gesdd(ctx: RuleContext, a, *, mode, function):
    return _lapack_call(ctx, "gesdd_ffi", [a], {0: 0}, function, mode=mode)


def _trsm_shape(a, b, *, left, lower, trans, unit, function):
    batch, _, n, dtype = _matrix("lapack trsm", a, square=True)
    b_batch, m_b, n_b, b_dtype = _matrix("lapack trsm", b)
    _require(b_dtype == dtype, "lapack trsm", f"operands are {dtype} and {b_dtype}")
    _require(b_batch == batch, "lapack trsm", f"batches {a[0]} and {b[0]} differ")
    _require((m_b if left else n_b) == n, "lapack trsm", f"shapes {a[0]} and {b[0]}")
    return [b]


@register("lapack_trsm", shape=_trsm_shape)
def _lower_trsm(ctx: RuleContext, a, b, *, left, lower, trans, unit, function):
    return _lapack_call(
        ctx,
        "trsm_ffi",
        [a, b],
        {1: 0},
        function,
        side="L" if left else "R",
        uplo="L" if lower else "U",
        trans_x=trans,
        diag="U" if unit else "N",
    )


# --- helpers ------------------------------------------------------------------------------------


def _lapack_dtypes(op: str, *dts: np.dtype) -> tuple[np.dtype, np.dtype]:
    """NumPy's linalg rule (`_commonType`): (the dtype to compute in, the result dtype).

    NumPy computes every linalg function in double precision (complex128 when complex) and
    rounds the results to single precision for float32/complex64 input; integers and bools
    give float64. float16 and bfloat16 are refused.
    """
    for d in dts:
        if d in (np.float16, dtypes.bfloat16):
            raise TypeError(
                f"{where('linalg.' + op)}: array type {d.name} is unsupported in linalg; cast "
                "to float32 first (x.astype('float32'))"
            )
    dt = dtypes.result_type(*dts)
    if dt == _BOOL or dtypes.is_integer(dt):
        dt = _F64
    return (_C128 if dtypes.is_complex(dt) else _F64), dt


def _back(x: Tracer, result: np.dtype) -> Tracer:
    """A computed result in the result dtype (its real counterpart for real values)."""
    if not dtypes.is_complex(x.dtype):
        result = dtypes.real_dtype(result)
    return cast(x, result)


def _stacked(op: str, a, square: bool = True) -> tuple[Tracer, np.dtype]:
    """`a` checked to be a (square) stack of matrices, in the compute dtype; and the result
    dtype."""
    x = asarray(a)
    if x.ndim < 2:
        raise np.linalg.LinAlgError(
            f"{where('linalg.' + op)}: {x.ndim}-dimensional array given. Array must be at "
            "least two-dimensional"
        )
    if square and x.shape[-1] != x.shape[-2]:
        raise np.linalg.LinAlgError(
            f"{where('linalg.' + op)}: Last 2 dimensions of the array must be square, got "
            f"shape {x.shape}"
        )
    compute, result = _lapack_dtypes(op, x.dtype)
    return cast(x, compute), result


def _mT(x: Tracer) -> Tracer:
    perm = (*range(x.ndim - 2), x.ndim - 1, x.ndim - 2)
    return bind1("transpose", x, perm=perm)


def _conj(x: Tracer) -> Tracer:
    if not dtypes.is_complex(x.dtype):
        return x
    return bind1("complex", bind1("real", x), bind1("negate", bind1("imag", x)))


def _triangle(x: Tracer, lower: bool, k: int = 0) -> Tracer:
    """`tril(x, k)` or `triu(x, k)` over the last two axes."""
    rows, cols = x.shape[-2:]
    i = iota((rows, cols), _I32, 0)
    j = iota((rows, cols), _I32, 1)
    d = bind1("subtract", j, i)
    keep = bind1("compare", d, full(d.shape, k, _I32), direction="LE" if lower else "GE")
    keep = bind1("broadcast_in_dim", keep, shape=x.shape, dims=(x.ndim - 2, x.ndim - 1))
    return bind1("select", keep, x, full(x.shape, 0, x.dtype))


def _nan_unless(ok: Tracer, x: Tracer) -> Tracer:
    """`x` where the factorization of its batch entry succeeded (`ok`), NaN elsewhere."""
    ok = bind1("broadcast_in_dim", ok, shape=x.shape, dims=tuple(range(ok.ndim)))
    return bind1("select", ok, x, full(x.shape, np.nan, x.dtype))


def _info_ok(info: Tracer, direction: str = "EQ") -> Tracer:
    return bind1("compare", info, full(info.shape, 0, _I32), direction=direction)


def _diagonal(x: Tracer) -> Tracer:
    """The main diagonal of the last two axes, as the last axis."""
    k = min(x.shape[-2:])
    idx = np.arange(k)
    return getitem(x, (Ellipsis, idx, idx))


def _eye(shape: tuple[int, ...], dtype: np.dtype) -> Tracer:
    n, m = shape[-2:]
    eq = bind1("compare", iota((n, m), _I32, 0), iota((n, m), _I32, 1), direction="EQ")
    eye = cast(eq, dtype)
    return bind1("broadcast_in_dim", eye, shape=shape, dims=(len(shape) - 2, len(shape) - 1))


# --- LU: solve, inv, det, slogdet --------------------------------------------------------------


def _lu(op: str, a: Tracer) -> tuple[Tracer, Tracer]:
    """(packed LU factors, 0-based pivots); an entry LAPACK could not factor is NaN."""
    lu, piv, info = bind("lapack_getrf", a, function=f"linalg.{op}")
    lu = _nan_unless(_info_ok(info, "GE"), lu)
    return lu, bind1("subtract", piv, full(piv.shape, 1, _I32))


def _permutation(piv: Tracer, m: int) -> Tracer:
    """The row permutation LAPACK's pivots (0-based, applied in order) describe."""
    k = piv.shape[-1]
    perm = bind1(
        "broadcast_in_dim", iota((m,), _I32), shape=piv.shape[:-1] + (m,), dims=(piv.ndim - 1,)
    )
    rows = iota(perm.shape, _I32, perm.ndim - 1)

    def swap(i, p):
        pi = reshape_to(getitem(piv, (Ellipsis, i)), piv.shape[:-1] + (1,))
        at_i = reshape_to(getitem(p, (Ellipsis, i)), piv.shape[:-1] + (1,))
        at_pi = take_along_axis(p, pi, axis=-1)
        pi, at_i, at_pi = (broadcast_to_shape(t, p.shape) for t in (pi, at_i, at_pi))
        i_b = bind1("broadcast_in_dim", cast(i, _I32), shape=p.shape, dims=())
        p = bind1("select", bind1("compare", rows, pi, direction="EQ"), at_i, p)
        return bind1("select", bind1("compare", rows, i_b, direction="EQ"), at_pi, p)

    return fori_loop(0, k, swap, perm)


def _lu_solve(op: str, lu: Tracer, piv: Tracer, b: Tracer) -> Tracer:
    """Solves A x = b for A = P L U; b of shape batch + (n, k), batch equal to lu's."""
    perm = _permutation(piv, lu.shape[-1])
    idx = broadcast_to_shape(reshape_to(perm, perm.shape + (1,)), b.shape)
    pb = take_along_axis(b, idx, axis=-2)
    fn = f"linalg.{op}"
    y = bind1("lapack_trsm", lu, pb, left=True, lower=True, trans="N", unit=True, function=fn)
    return bind1("lapack_trsm", lu, y, left=True, lower=False, trans="N", unit=False, function=fn)


@_linalg("solve")
def solve(a, b):
    x, _ = _stacked("solve", a)
    y = asarray(b)
    dt, result = _lapack_dtypes("solve", asarray(a).dtype, y.dtype)
    x, y = cast(x, dt), cast(y, dt)
    n = x.shape[-1]
    vector = y.ndim == 1
    if vector:
        y = reshape_to(y, (y.shape[0], 1))
    if y.ndim < 2 or y.shape[-2] != n:
        raise ValueError(
            f"{where('linalg.solve')}: b of shape {asarray(b).shape} does not match a of shape "
            f"{x.shape}: b must be (..., {n}, K), or ({n},) for one vector"
        )
    batch = broadcast_shapes("linalg.solve", x.shape[:-2], y.shape[:-2])
    x = broadcast_to_shape(x, batch + x.shape[-2:])
    y = broadcast_to_shape(y, batch + y.shape[-2:])
    if n == 0 or y.shape[-1] == 0:
        out = full(y.shape, 0, dt)
    else:
        lu, piv = _lu("solve", x)
        out = _lu_solve("solve", lu, piv, y)
    out = _back(out, result)
    return reshape_to(out, out.shape[:-1]) if vector else out


@_linalg("inv")
def inv(a):
    return _inv("inv", a)


def _inv(op: str, a) -> Tracer:
    x, result = _stacked(op, a)
    if x.shape[-1] == 0:
        return _back(x, result)
    lu, piv = _lu(op, x)
    return _back(_lu_solve(op, lu, piv, _eye(x.shape, x.dtype)), result)


def _det_parts(op: str, x: Tracer) -> tuple[Tracer, Tracer]:
    """(diagonal of U, sign of the row permutation) of each matrix's LU factorization."""
    lu, piv = _lu(op, x)
    k = piv.shape[-1]
    moved = bind1("compare", piv, iota(piv.shape, _I32, piv.ndim - 1), direction="NE")
    swaps = reduce_raw(cast(moved, _I32), (piv.ndim - 1,), "add")
    one_i = full(swaps.shape, 1, _I32)
    odd = bind1("compare", bind1("and", swaps, one_i), one_i, direction="EQ")
    one = full(odd.shape, 1, x.dtype)
    sign = bind1("select", odd, bind1("negate", one), one)
    assert k == x.shape[-1]
    return _diagonal(lu), sign


@_linalg("det")
def det(a):
    x, result = _stacked("det", a)
    if x.shape[-1] == 0:
        return full(x.shape[:-2], 1, result)
    d, sign = _det_parts("det", x)
    return _back(bind1("multiply", sign, reduce_raw(d, (d.ndim - 1,), "multiply")), result)


@_linalg("slogdet")
def slogdet(a):
    x, result = _stacked("slogdet", a)
    real = dtypes.real_dtype(x.dtype)
    if x.shape[-1] == 0:
        return SlogdetResult(
            full(x.shape[:-2], 1, result), full(x.shape[:-2], 0, dtypes.real_dtype(result))
        )
    d, sign = _det_parts("slogdet", x)
    mag = bind1("abs", d)
    zero = bind1("compare", mag, full(mag.shape, 0, real), direction="EQ")
    if dtypes.is_complex(x.dtype):
        unit = bind1("divide", d, cast(mag, x.dtype))
    else:
        unit = bind1("sign", d)
    unit = bind1("select", zero, full(d.shape, 0, x.dtype), unit)
    sign = bind1("multiply", sign, reduce_raw(unit, (d.ndim - 1,), "multiply"))
    logdet = reduce_raw(bind1("log", mag), (d.ndim - 1,), "add")
    return SlogdetResult(_back(sign, result), _back(logdet, result))


# --- cholesky, qr ---------------------------------------------------------------------------------


@_linalg("cholesky")
def cholesky(a, /, *, upper=False):
    x, result = _stacked("cholesky", a)
    if x.shape[-1] == 0:
        return _back(x, result)
    # As NumPy: L L^H = A from A's lower triangle, or U^H U = A from its upper one.
    f, info = bind("lapack_potrf", x, lower=not upper, function="linalg.cholesky")
    return _back(_nan_unless(_info_ok(info), _triangle(f, lower=not upper)), result)


_QR_MODES = ("reduced", "complete", "r", "raw")


@_linalg("qr")
def qr(a, mode="reduced"):
    op = "linalg.qr"
    if mode not in _QR_MODES:
        raise ValueError(
            f"{where(op)}: Unrecognized mode {mode!r}; use one of {', '.join(map(repr, _QR_MODES))}"
        )
    x, result = _stacked("qr", a, square=False)
    *batch, m, n = x.shape
    batch = tuple(batch)
    k = min(m, n)
    if k == 0:
        return _empty_qr(x.shape, result, mode)
    h, tau = bind("lapack_geqrf", x, function=op)
    if mode == "r":
        return _back(_triangle(_rows(h, k), lower=False), result)
    if mode == "raw":
        return _back(_mT(h), result), _back(tau, result)
    if mode == "complete" and m > n:
        pad = full(batch + (m, m - n), 0, x.dtype)
        q = bind1("lapack_orgqr", concat([h, pad], x.ndim - 1), tau, function=op)
        r = _triangle(h, lower=False)
    else:
        q = bind1("lapack_orgqr", _cols(h, k), tau, function=op)
        r = _triangle(_rows(h, k), lower=False)
    return QRResult(_back(q, result), _back(r, result))


def _rows(x: Tracer, k: int) -> Tracer:
    return slice_axis(x, x.ndim - 2, 0, k)


def _cols(x: Tracer, k: int) -> Tracer:
    return slice_axis(x, x.ndim - 1, 0, k)


def _empty_qr(shape: tuple[int, ...], dt: np.dtype, mode: str):
    *batch, m, n = shape
    batch = tuple(batch)
    if mode == "r":
        return full(batch + (0, n), 0, dt)
    if mode == "raw":
        return full(batch + (n, m), 0, dt), full(batch + (0,), 0, dt)
    if mode == "complete":
        return QRResult(_eye(batch + (m, m), dt), full(batch + (m, n), 0, dt))
    return QRResult(full(batch + (m, 0), 0, dt), full(batch + (0, n), 0, dt))


# --- eigh, svd ----------------------------------------------------------------------------------


def _uplo(op: str, UPLO) -> bool:
    u = UPLO.upper() if isinstance(UPLO, str) else UPLO
    if u not in ("L", "U"):
        raise ValueError(f"{where('linalg.' + op)}: UPLO argument must be 'L' or 'U', got {UPLO!r}")
    return u == "L"


def _eigh(op: str, a, UPLO, vectors: bool):
    lower = _uplo(op, UPLO)
    x, result = _stacked(op, a)
    if x.shape[-1] == 0:
        return full(x.shape[:-1], 0, dtypes.real_dtype(result)), _back(x, result)
    v, w, info = bind("lapack_syevd", x, lower=lower, vectors=vectors, function=f"linalg.{op}")
    ok = _info_ok(info)
    return _back(_nan_unless(ok, w), result), _back(_nan_unless(ok, v), result)


@_linalg("eigh")
def eigh(a, UPLO="L"):
    w, v = _eigh("eigh", a, UPLO, True)
    return EighResult(w, v)


@_linalg("eigvalsh")
def eigvalsh(a, UPLO="L"):
    return _eigh("eigvalsh", a, UPLO, False)[0]


def _descending(x: Tracer) -> Tracer:
    return reverse(sort_along([x], [], x.ndim - 1)[0], (x.ndim - 1,))


@_linalg("svd")
def svd(a, full_matrices=True, compute_uv=True, hermitian=False):
    return _svd("svd", a, full_matrices, compute_uv, hermitian)


def _svd(op: str, a, full_matrices: bool, compute_uv: bool, hermitian: bool):
    """`svd` for the user's `linalg.<op>`, which the custom call is marked with."""
    if hermitian:
        return _hermitian_svd(op, a, compute_uv)
    x, result = _stacked(op, a, square=False)
    *batch, m, n = x.shape
    batch = tuple(batch)
    k = min(m, n)
    if k == 0:
        s = full(batch + (0,), 0, dtypes.real_dtype(result))
        if not compute_uv:
            return s
        u = _eye(batch + (m, m), result) if full_matrices else full(batch + (m, 0), 0, result)
        vh = _eye(batch + (n, n), result) if full_matrices else full(batch + (0, n), 0, result)
        return SVDResult(u, s, vh)
    mode = ("A" if full_matrices else "S") if compute_uv else "N"
    _, s, u, vt, info = bind("lapack_gesdd", x, mode=mode, function=f"linalg.{op}")
    ok = _info_ok(info)
    s = _back(_nan_unless(ok, s), result)
    if not compute_uv:
        return s
    return SVDResult(_back(_nan_unless(ok, u), result), s, _back(_nan_unless(ok, vt), result))


def _hermitian_svd(op: str, a, compute_uv: bool):
    """NumPy's `svd(hermitian=True)`: from eigh, |w| descending, the signs moved into Vh."""
    if not compute_uv:
        return _descending(bind1("abs", _eigh(op, a, "L", False)[0]))
    w, u = _eigh(op, a, "L", True)
    one = full(w.shape, 1.0, w.dtype)
    sgn = bind1("select", _signbit(w), bind1("negate", one), one)
    s = bind1("abs", w)
    last = s.ndim - 1
    # NumPy orders by argsort(s)[..., ::-1]: descending.
    order = reverse(sort_along([s], [iota(s.shape, _INT64, last)], last)[1], (last,))
    sgn = take_along_axis(sgn, order, axis=-1)
    s = take_along_axis(s, order, axis=-1)

    def columns(v: Tracer) -> Tracer:
        return broadcast_to_shape(reshape_to(v, v.shape[:-1] + (1, v.shape[-1])), u.shape)

    u = take_along_axis(u, columns(order), axis=-1)
    signed = bind1("multiply", u, cast(columns(sgn), u.dtype))
    return SVDResult(u, s, _conj(_mT(signed)))


def _signbit(x: Tracer) -> Tracer:
    bits = np.dtype(f"i{x.dtype.itemsize}")
    as_int = bind1("bitcast_convert", x, dtype=bits)
    return bind1("compare", as_int, full(x.shape, 0, bits), direction="LT")


@_linalg("svdvals")
def svdvals(x, /):
    return _svd("svdvals", x, True, False, False)


def singular_values(op: str, x: Tracer, row: int, col: int) -> Tracer:
    """Singular values of the matrices in axes (row, col) of `x`, as its last axis, for the
    user's `linalg.<op>` (norm, matrix_norm)."""
    rest = [i for i in range(x.ndim) if i not in (row, col)]
    perm = (*rest, row, col)
    if perm != tuple(range(x.ndim)):
        x = bind1("transpose", x, perm=perm)
    return _svd(op, x, True, False, False)


# --- built on the above: matrix_rank, pinv, lstsq, cond, matrix_power, multi_dot -------------


@_linalg("matrix_rank")
def matrix_rank(A, tol=None, hermitian=False, *, rtol=None):
    op = "linalg.matrix_rank"
    if rtol is not None and tol is not None:
        raise ValueError(f"{where(op)}: `tol` and `rtol` can't be both set")
    x = asarray(A)
    if x.ndim < 2:
        nz = count_nonzero(x)
        return cast(bind1("compare", nz, full((), 0, _INT64), direction="NE"), _INT64)
    s = _svd("matrix_rank", x, True, False, hermitian)
    if tol is None:
        if rtol is None:
            rtol = max(x.shape[-2:]) * np.finfo(s.dtype).eps
        else:
            rtol = asarray(rtol)[..., None]
        smax = max_(s, axis=-1, keepdims=True, initial=0)
        t = smax * rtol
    else:
        t = asarray(tol)[..., None]
    return count_nonzero(s > t, axis=-1)


_NOVALUE = object()


@_linalg("pinv")
def pinv(a, rcond=None, hermitian=False, *, rtol=_NOVALUE):
    op = "linalg.pinv"
    x, result = _stacked("pinv", a, square=False)
    if rcond is None:
        if rtol is _NOVALUE:
            rcond = 1e-15
        elif rtol is None:
            rcond = max(x.shape[-2:]) * np.finfo(result).eps
        else:
            rcond = rtol
    elif rtol is not _NOVALUE:
        raise ValueError(f"{where(op)}: `rtol` and `rcond` can't be both set")
    *batch, m, n = x.shape
    if m == 0 or n == 0:
        return full(tuple(batch) + (n, m), 0, result)
    # As NumPy: the SVD (in double) rounded to the result dtype, the rest in that dtype.
    u, s, vt = _svd("pinv", _conj(_back(x, result)), False, True, hermitian)
    rc = asarray(rcond)
    cutoff = rc[..., None] * max_(s, axis=-1, keepdims=True)
    large = broadcast_to_shape(s > cutoff, s.shape)
    inv_s = bind1("select", large, 1 / s, full(s.shape, 0, s.dtype))
    return matmul(_mT(vt), inv_s[..., None] * _mT(u))


@_linalg("lstsq")
def lstsq(a, b, rcond=None):
    op = "linalg.lstsq"
    x = asarray(a)
    y = asarray(b)
    if x.ndim != 2 or y.ndim not in (1, 2):
        raise np.linalg.LinAlgError(
            f"{where(op)}: a must be 2-D and b 1-D or 2-D, got shapes {x.shape} and {y.shape}"
        )
    dt, result = _lapack_dtypes("lstsq", x.dtype, y.dtype)
    real = dtypes.real_dtype(dt)
    x, y = cast(x, dt), cast(y, dt)
    vector = y.ndim == 1
    if vector:
        y = reshape_to(y, (y.shape[0], 1))
    m, n = x.shape
    if y.shape[0] != m:
        raise np.linalg.LinAlgError(
            f"{where(op)}: Incompatible dimensions: a is {x.shape}, b is {asarray(b).shape}"
        )
    if rcond is None:
        rcond = np.finfo(dt).eps * max(n, m)
    k = min(m, n)
    if k == 0:
        sol = full((n,) + y.shape[1:], 0, dt)
        s = full((0,), 0, real)
        rank = full((), 0, _I32)
    else:
        u, s, vt = _svd("lstsq", x, False, True, False)
        cutoff = rcond * reshape_to(max_(s, axis=-1), (1,))
        large = s > cutoff
        rank = cast(count_nonzero(large), _I32)
        inv_s = bind1("select", large, 1 / s, full(s.shape, 0, real))
        uhb = matmul(_conj(_mT(u)), y)
        sol = matmul(_conj(_mT(vt)), cast(inv_s, dt)[:, None] * uhb)
    if m > n:
        r = y - matmul(x, sol)
        resid = reduce_raw(bind1("abs", r) ** 2 if dtypes.is_complex(dt) else r * r, (0,), "add")
        resid = cast(resid, real)
    else:
        resid = full((0,), 0, real)
    if vector:
        sol = reshape_to(sol, (n,))
    return _back(sol, result), _back(resid, result), rank, _back(s, result)


@_linalg("cond")
def cond(x, p=None):
    op = "linalg.cond"
    a = asarray(x)
    if a.ndim >= 2 and a.size == 0:
        raise np.linalg.LinAlgError(f"{where(op)}: cond is not defined on empty arrays")
    if p is None or p in (2, -2):
        s = _svd("cond", a, True, False, False)
        first, last = s[..., 0], s[..., -1]
        r = last / first if p == -2 else first / last
    else:
        # NumPy multiplies the norm of x by the norm of its inverse in double precision.
        xx, result = _stacked("cond", a)
        r = norm(a, p, axis=(-2, -1)) * norm(_inv("cond", xx), p, axis=(-2, -1))
        r = cast(r, dtypes.real_dtype(result))
    # NaN becomes inf unless the matrix itself holds NaN, as NumPy does.
    parts = [bind1("real", a), bind1("imag", a)] if dtypes.is_complex(a.dtype) else [a]
    a_nan = bind1("compare", parts[0], parts[0], direction="NE")
    for part in parts[1:]:
        a_nan = bind1("or", a_nan, bind1("compare", part, part, direction="NE"))
    has_nan = reduce_raw(a_nan, (a.ndim - 2, a.ndim - 1), "or")
    r_nan = bind1("compare", r, r, direction="NE")
    to_inf = bind1("and", r_nan, bind1("not", has_nan))
    return bind1("select", to_inf, full(r.shape, np.inf, r.dtype), r)


@_linalg("matrix_power")
def matrix_power(a, n):
    op = "linalg.matrix_power"
    x = asarray(a)
    if x.ndim < 2 or x.shape[-1] != x.shape[-2]:
        raise np.linalg.LinAlgError(
            f"{where(op)}: Last 2 dimensions of the array must be square, got shape {x.shape}"
        )
    if isinstance(n, Tracer):
        raise TypeError(
            f"{where(op)}: the exponent must be a static Python int, got a traced array"
        )
    try:
        n = operator.index(n)
    except TypeError:
        raise TypeError(f"{where(op)}: exponent must be an integer, got {n!r}") from None
    if n == 0:
        return _eye(x.shape, x.dtype)
    if n < 0:
        x = _inv("matrix_power", x)
        n = -n
    if n == 1:
        return x
    if n == 2:
        return matmul(x, x)
    if n == 3:
        return matmul(matmul(x, x), x)
    z = result = None
    while n > 0:
        z = x if z is None else matmul(z, z)
        n, bit = divmod(n, 2)
        if bit:
            result = z if result is None else matmul(result, z)
    return result


@_linalg("multi_dot")
def multi_dot(arrays, *, out=None):
    op = "linalg.multi_dot"
    if out is not None:
        raise NotImplementedError(f"{where(op)}: out= is not supported; use the return value")
    xs = [asarray(x) for x in arrays]
    if len(xs) < 2:
        raise ValueError(f"{where(op)}: Expecting at least two arrays, got {len(xs)}")
    first_vec, last_vec = xs[0].ndim == 1, xs[-1].ndim == 1
    if first_vec:
        xs[0] = reshape_to(xs[0], (1, xs[0].shape[0]))
    if last_vec:
        xs[-1] = reshape_to(xs[-1], (xs[-1].shape[0], 1))
    for i, x in enumerate(xs):
        if x.ndim != 2:
            raise ValueError(
                f"{where(op)}: array {i} has {x.ndim} dimensions; multi_dot takes 2-D arrays "
                "(1-D at either end)"
            )
    r = xs[0]
    for x in xs[1:]:
        r = matmul(r, x)
    if first_vec and last_vec:
        return reshape_to(r, ())
    if first_vec:
        return reshape_to(r, r.shape[1:])
    if last_vec:
        return reshape_to(r, r.shape[:1])
    return r


# --- norms (matrix norms of order 2, -2 and 'nuc' need the singular values above) -------------


def _sum(x: Tracer, axes: tuple[int, ...]) -> Tracer:
    """A float sum; float16 and bfloat16 accumulate in float32."""
    if x.dtype in (np.float16, dtypes.bfloat16):
        return cast(reduce_raw(cast(x, _F32), axes, "add"), x.dtype)
    return reduce_raw(x, axes, "add")


def _abs(x: Tracer) -> Tracer:
    return bind1("abs", x)


def _abs_sq(x: Tracer) -> Tracer:
    if dtypes.is_complex(x.dtype):
        re, im = bind1("real", x), bind1("imag", x)
        return bind1("add", bind1("multiply", re, re), bind1("multiply", im, im))
    return bind1("multiply", x, x)


def _vector_norm(op: str, x: Tracer, ord, axes: tuple[int, ...]) -> Tracer:
    if isinstance(ord, str):
        raise ValueError(f"{where(op)}: invalid norm order {ord!r} for vectors")
    if ord is None or ord == 2:
        return bind1("sqrt", _sum(_abs_sq(x), axes))
    a = _abs(x)
    if ord == np.inf:
        return reduce_raw(a, axes, "max")
    if ord == -np.inf:
        return reduce_raw(a, axes, "min")
    if ord == 0:
        nz = bind1("compare", a, full(a.shape, 0, a.dtype), direction="NE")
        return _sum(cast(nz, a.dtype), axes)
    if ord == 1:
        return _sum(a, axes)
    p = full(a.shape, ord, a.dtype)
    s = _sum(bind1("pow", a, p), axes)
    return bind1("pow", s, full(s.shape, 1.0 / ord, s.dtype))


def _matrix_norm(op: str, x: Tracer, ord, row: int, col: int) -> Tracer:
    if ord is None or ord == "fro":
        return bind1("sqrt", _sum(_abs_sq(x), (row, col)))
    if ord in (2, -2, "nuc"):
        s = singular_values(op.removeprefix("linalg."), x, row, col)
        return reduce_raw(s, (s.ndim - 1,), {2: "max", -2: "min", "nuc": "add"}[ord])
    if ord in (1, -1):
        sums = _sum(_abs(x), (row,))
        return reduce_raw(sums, (col - 1 if col > row else col,), "max" if ord == 1 else "min")
    if ord in (np.inf, -np.inf):
        sums = _sum(_abs(x), (col,))
        return reduce_raw(sums, (row - 1 if row > col else row,), "max" if ord > 0 else "min")
    raise ValueError(f"{where(op)}: invalid norm order {ord!r} for matrices")


def _float_input(x) -> Tracer:
    """Norms of integers and booleans are computed in float64, as NumPy does."""
    x = asarray(x)
    return x if dtypes.is_inexact(x.dtype) else cast(x, _F64)


def _keepdims(r: Tracer, axes: tuple[int, ...], shape: tuple[int, ...]) -> Tracer:
    return reshape_to(r, tuple(1 if i in axes else d for i, d in enumerate(shape)))


@_linalg("norm")
def norm(x, ord=None, axis=None, keepdims=False):
    x = _float_input(x)
    if axis is None:
        if ord is None:
            axes = tuple(range(x.ndim))
            r = bind1("sqrt", _sum(_abs_sq(x), axes))
            return reshape_to(r, (1,) * x.ndim) if keepdims else r
        if x.ndim not in (1, 2):
            raise ValueError(
                f"{where('linalg.norm')}: improper number of dimensions to norm: "
                f"{x.ndim} (with ord={ord!r} and no axis, x must be 1-D or 2-D)"
            )
        axes = tuple(range(x.ndim))
    elif isinstance(axis, tuple | list):
        axes = tuple(normalize_axis("linalg.norm", a, x.ndim) for a in axis)
    else:
        axes = (normalize_axis("linalg.norm", axis, x.ndim),)
    if len(axes) == 1:
        r = _vector_norm("linalg.norm", x, ord, axes)
    elif len(axes) == 2:
        if axes[0] == axes[1]:
            raise ValueError(f"{where('linalg.norm')}: duplicate axes given: {axis!r}")
        r = _matrix_norm("linalg.norm", x, ord, axes[0], axes[1])
    else:
        raise ValueError(
            f"{where('linalg.norm')}: improper number of dimensions to norm: axis={axis!r}"
        )
    return _keepdims(r, axes, x.shape) if keepdims else r


@_linalg("vector_norm")
def vector_norm(x, /, *, axis=None, keepdims=False, ord=2):
    x = _float_input(x)
    axes = reduction_axes("linalg.vector_norm", axis, x.ndim)
    r = _vector_norm("linalg.vector_norm", x, ord, axes)
    return _keepdims(r, axes, x.shape) if keepdims else r


@_linalg("matrix_norm")
def matrix_norm(x, /, *, keepdims=False, ord="fro"):
    x = _float_input(x)
    _need_matrices("linalg.matrix_norm", x)
    row, col = x.ndim - 2, x.ndim - 1
    r = _matrix_norm("linalg.matrix_norm", x, ord, row, col)
    return _keepdims(r, (row, col), x.shape) if keepdims else r


# The array API spellings in numpy.linalg: the same products over the last axes.
