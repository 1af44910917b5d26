"""Trace stage, linear algebra family: matmul, dot, tensordot, einsum and norms.

Every product is one `stablehlo.dot_general` (batch and contracting dimensions named
explicitly) plus the transposes, reshapes and reductions the NumPy spelling needs. Its
`precision_config` is the product's `precision=` (JAX's spellings), else the default in
force (`aotkit.default_matmul_precision`, the `default_matmul_precision` setting): aotkit's
own is HIGHEST, so float32 stays float32 on accelerators that would use bfloat16 passes or
TF32. `preferred_element_type` (as in JAX) makes the dot's result, and so its accumulation,
a wider dtype than its operands'. Result dtypes
are NumPy's: integer products stay in their (promoted) integer dtype and wrap on overflow,
boolean products are logical (any of ands).

`LINALG_FUNCTIONS` holds the `aotkit.numpy.linalg` namespace (`norm`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np
from jaxlib.mlir.dialects import stablehlo

from aotkit import _context, config, dtypes
from aotkit.tracing.core import (
    Tracer,
    bind,
    bind1,
    export,
    full,
    precision_attr,
    register_direct,
    where,
)
from aotkit.tracing.core import precision as precision_pair
from aotkit.tracing.creation import iota
from aotkit.tracing.elementwise import asarray, conj, multiply, overriding
from aotkit.tracing.hlo import (
    broadcast_shapes,
    broadcast_to_shape,
    cast,
    no_out,
    normalize_axis,
    reshape_to,
)
from aotkit.tracing.reduction import reduce_raw, sum_
from aotkit.tracing.shape import diagonal, matrix_transpose

_BOOL = np.dtype(np.bool_)
_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)

LINALG_FUNCTIONS: dict[str, Callable] = {}

# --- primitive -------------------------------------------------------------------------------


def _dot_shape(a, b, *, lhs_batch, rhs_batch, lhs_contract, rhs_contract, precision, dtype):
    shape = dot_general_shape(a[0], b[0], lhs_batch, rhs_batch, lhs_contract, rhs_contract)
    return [(shape, a[1] if dtype is None else dtype)]


@functools.lru_cache(maxsize=1024)  # a model repeats a few products many times
def dot_general_shape(a, b, lhs_batch, rhs_batch, lhs_contract, rhs_contract) -> tuple[int, ...]:
    """The shape of `dot_general` of operands of shapes `a` and `b`: batch, a's free, b's
    free (the tracer's shape rule and the transforms' emitter both read it)."""
    batch = tuple(a[i] for i in lhs_batch)
    lhs_free = tuple(d for i, d in enumerate(a) if i not in lhs_batch and i not in lhs_contract)
    rhs_free = tuple(d for i, d in enumerate(b) if i not in rhs_batch and i not in rhs_contract)
    return batch + lhs_free + rhs_free


def _dot_attrs(*, lhs_batch, rhs_batch, lhs_contract, rhs_contract, precision, dtype) -> dict:
    dims = dot_dimension_numbers(lhs_batch, rhs_batch, lhs_contract, rhs_contract)
    return {"dot_dimension_numbers": dims, "precision_config": precision_attr(precision)}


@_context.cached
def dot_dimension_numbers(lhs_batch, rhs_batch, lhs_contract, rhs_contract):
    return stablehlo.DotDimensionNumbers.get(
        lhs_batching_dimensions=list(lhs_batch),
        rhs_batching_dimensions=list(rhs_batch),
        lhs_contracting_dimensions=list(lhs_contract),
        rhs_contracting_dimensions=list(rhs_contract),
    )


register_direct({"dot_general": "stablehlo.dot_general"}, shape=_dot_shape, attributes=_dot_attrs)


def dot_general(
    a: Tracer,
    b: Tracer,
    contract: tuple[tuple[int, ...], tuple[int, ...]],
    batch: tuple[tuple[int, ...], tuple[int, ...]] = ((), ()),
    precision: tuple[str, str] | None = None,
    dtype: np.dtype | None = None,
) -> Tracer:
    """Contracts two tracers of one dtype; result dims: batch, a's free, b's free.

    `precision`: (lhs, rhs) StableHLO precision names (`core.precision`), the default in
    force when None. `dtype`: the result's, when not the operands' (JAX's
    `preferred_element_type`: the products accumulate in it, as int8 x int8 -> int32).

    An operand that is a transpose (`A.T @ x`) is contracted in place of it, with the
    dimension numbers mapped through the permutation, where that keeps the order of its
    free dimensions: XLA's CPU backend fuses an explicit transpose into a naive loop around
    the product (a matrix-vector product of 2000x2500 float64 ran 18x slower than with the
    transpose folded), while a dot whose dimension numbers say it runs its tuned kernel.
    """
    assert a.dtype == b.dtype, (a.dtype, b.dtype)
    if precision is None:
        precision = config.matmul_precision()
    if dtype == a.dtype:
        dtype = None
    logical = a.dtype.kind == "b" and dtype is None
    if a.dtype.kind == "b":
        # XLA has no boolean dot; count the true products and test the count instead.
        wide = np.dtype(np.int32) if dtype is None else dtype
        a, b, dtype = cast(a, wide), cast(b, wide), None
    (lhs_contract, rhs_contract), (lhs_batch, rhs_batch) = contract, batch
    if a.transposed is not None:
        a, lhs_contract, lhs_batch = _untransposed(a, lhs_contract, lhs_batch)
    if b.transposed is not None:
        b, rhs_contract, rhs_batch = _untransposed(b, rhs_contract, rhs_batch)
    r = bind(
        "dot_general",
        a,
        b,
        lhs_batch=tuple(lhs_batch),
        rhs_batch=tuple(rhs_batch),
        lhs_contract=tuple(lhs_contract),
        rhs_contract=tuple(rhs_contract),
        precision=precision,
        dtype=dtype,
    )[0]
    return cast(r, _BOOL) if logical else r


def _untransposed(t: Tracer, contract: tuple[int, ...], batch: tuple[int, ...]):
    """(operand, contracting dims, batch dims) for a product of `t`: the tracer `t`
    transposes, with the dims mapped through the permutation, when `t` is still that
    transpose (not written in place since) and its free dimensions keep their order."""
    value, source, perm = t.transposed
    if value is not t.value or not source._scope.open:
        return t, contract, batch
    free = [perm[i] for i in range(len(perm)) if i not in contract and i not in batch]
    if free != sorted(free):
        return t, contract, batch
    return source, tuple(perm[i] for i in contract), tuple(perm[i] for i in batch)


# --- helpers ---------------------------------------------------------------------------------


def _promoted(op: str, *xs, dtype=None) -> list[Tracer]:
    ts = [asarray(x) for x in xs]
    if dtype is not None:
        dt = dtypes.canonicalize(dtype, where=where(op))
    else:
        dt = dtypes.result_type(*(t.dtype for t in ts))
    return [cast(t, dt) for t in ts]


def _preferred(op: str, dt: np.dtype, preferred) -> np.dtype | None:
    """The result dtype `preferred_element_type` asks of a product of `dt` operands (None:
    `dt` itself), with JAX's rules: the same kind (integers of the same signedness or
    unsigned into signed), or integers into floats, and never narrower."""
    if preferred is None:
        return None
    pref = dtypes.canonicalize(preferred, where=where(op))
    if pref == dt:
        return None
    ok = (
        dtypes.is_bool(dt)
        or (dtypes.is_integer(dt) and dtypes.is_float(pref))
        or (dtypes.is_signed_int(dt) and dtypes.is_signed_int(pref))
        or (dtypes.is_unsigned_int(dt) and dtypes.is_integer(pref))
        or (dtypes.is_float(dt) and dtypes.is_float(pref))
        or (dtypes.is_complex(dt) and dtypes.is_complex(pref))
    )
    if not ok or pref.itemsize < dt.itemsize:
        raise TypeError(
            f"{where(op)}: preferred_element_type {pref.name} does not hold products of "
            f"{dt.name} operands; give a dtype of their kind at least as wide (integers may "
            "also accumulate in a float), or None"
        )
    return pref


def _product(op: str, xs, *, dtype=None, precision=None, preferred_element_type=None):
    """The operands of product `op` promoted to one dtype, its precision pair and its
    result dtype (None: the operands')."""
    pair = precision_pair(op, precision)
    ts = _promoted(op, *xs, dtype=dtype)
    pref = _preferred(op, ts[0].dtype, preferred_element_type)
    if pref is not None and dtypes.is_integer(ts[0].dtype) and dtypes.is_float(pref):
        # Integers into floats: the operands are converted first (one ordinary dot).
        ts, pref = [cast(t, pref) for t in ts], None
    return ts, pair, pref


def _conj(x: Tracer) -> Tracer:
    # Only complex values have a conjugate; NumPy's conjugate of bool would make int8.
    return conj(x) if dtypes.is_complex(x.dtype) else x


# --- NumPy-level products --------------------------------------------------------------------


_MATRIX_PRODUCT = {"lhs_batch": (), "rhs_batch": (), "lhs_contract": (1,), "rhs_contract": (0,)}


@export("matmul")
def matmul(
    x1,
    x2,
    /,
    out=None,
    *,
    dtype=None,
    casting="same_kind",
    order="K",
    subok=True,
    precision=None,
    preferred_element_type=None,
):
    """NumPy's matmul, with JAX's `precision` and `preferred_element_type` (`x @ y` takes
    the default precision in force: `aotkit.default_matmul_precision`)."""
    if out is not None:
        no_out("matmul", out)
    if (
        dtype is None
        and precision is None
        and preferred_element_type is None
        and type(x1) is Tracer
        and type(x2) is Tracer
        and x1.dtype is x2.dtype
    ):
        a, b = x1, x2  # the common case: nothing to convert
        pair, pref = config.matmul_precision(), None
        # The commonest product, matrix by matrix (`x @ w`): `dot_general`'s one dot, with no
        # transpose to fold and nothing to cast.
        if (
            len(a.shape) == 2
            and len(b.shape) == 2
            and a.shape[1] == b.shape[0]
            and a.transposed is None
            and b.transposed is None
            and a.dtype.kind != "b"
        ):
            return bind("dot_general", a, b, **_MATRIX_PRODUCT, precision=pair, dtype=None)[0]
    else:
        special = overriding(x1, x2)
        if special is not None and dtype is None:  # a slice with a traced bound
            # (What it cannot take, precision= included, it refuses in its own words.)
            given = {"precision": precision, "preferred_element_type": preferred_element_type}
            kwargs = {k: v for k, v in given.items() if v is not None}
            return special.__array_function__(np.matmul, (), (x1, x2), kwargs)
        (a, b), pair, pref = _product(
            "matmul",
            (x1, x2),
            dtype=dtype,
            precision=precision,
            preferred_element_type=preferred_element_type,
        )
    shapes = (a.shape, b.shape)
    for i, shape in enumerate(shapes):
        if not shape:
            raise ValueError(
                f"{where('matmul')}: input operand {i} is a scalar (shape ()); matmul needs "
                "arrays of at least one dimension, use multiply (*) for scalars"
            )
    a_vec, b_vec = len(shapes[0]) == 1, len(shapes[1]) == 1
    if a_vec:
        a = reshape_to(a, (1,) + a.shape)
    if b_vec:
        b = reshape_to(b, b.shape + (1,))
    if a.shape[-1] != b.shape[-2]:
        raise ValueError(
            f"{where('matmul')}: shapes {shapes[0]} and {shapes[1]}: core dimension {a.shape[-1]} "
            f"(last of operand 0) does not match {b.shape[-2]} (second to last of operand 1)"
        )
    if len(b.shape) == 2:
        # No batch on the right: a's leading dimensions are free dims of one dot.
        r = dot_general(a, b, ((len(a.shape) - 1,), (0,)), precision=pair, dtype=pref)
    else:
        batch = broadcast_shapes("matmul", a.shape[:-2], b.shape[:-2])
        a = broadcast_to_shape(a, batch + a.shape[-2:])
        b = broadcast_to_shape(b, batch + b.shape[-2:])
        nb = len(batch)
        batches = (tuple(range(nb)), tuple(range(nb)))
        r = dot_general(a, b, ((nb + 1,), (nb,)), batches, precision=pair, dtype=pref)
    if a_vec:
        r = reshape_to(r, r.shape[:-2] + r.shape[-1:])
    if b_vec:
        r = reshape_to(r, r.shape[:-1])
    return r


def _not_aligned(op: str, a: Tracer, b: Tracer, ia: int, ib: int) -> ValueError:
    return ValueError(
        f"{where(op)}: shapes {a.shape} and {b.shape} not aligned: {a.shape[ia]} "
        f"(dim {ia}) != {b.shape[ib]} (dim {ib})"
    )


def _scaled(x: Tracer, y: Tracer, pref: np.dtype | None) -> Tracer:
    """A product with a scalar operand (no dot): in `pref` when one is asked for."""
    if pref is not None:
        x, y = cast(x, pref), cast(y, pref)
    return multiply(x, y)


@export("dot")
def dot(a, b, out=None, *, precision=None, preferred_element_type=None):
    no_out("dot", out)
    special = overriding(a, b)
    if special is not None:  # a slice with a traced bound
        return special.__array_function__(np.dot, (), (a, b), {})
    (x, y), pair, pref = _product(
        "dot", (a, b), precision=precision, preferred_element_type=preferred_element_type
    )
    if x.ndim == 0 or y.ndim == 0:
        return _scaled(x, y, pref)
    ia = x.ndim - 1
    ib = 0 if y.ndim == 1 else y.ndim - 2
    if x.shape[ia] != y.shape[ib]:
        raise _not_aligned("dot", x, y, ia, ib)
    return dot_general(x, y, ((ia,), (ib,)), precision=pair, dtype=pref)


@export("vdot")
def vdot(a, b, /, *, precision=None, preferred_element_type=None):
    (x, y), pair, pref = _product(
        "vdot", (a, b), precision=precision, preferred_element_type=preferred_element_type
    )
    if x.size != y.size:
        raise ValueError(
            f"{where('vdot')}: vectors have different lengths {x.size} ({x.shape}) and "
            f"{y.size} ({y.shape})"
        )
    x = _conj(reshape_to(x, (x.size,)))
    return dot_general(x, reshape_to(y, (y.size,)), ((0,), (0,)), precision=pair, dtype=pref)


@export("inner")
def inner(a, b, /, *, precision=None, preferred_element_type=None):
    (x, y), pair, pref = _product(
        "inner", (a, b), precision=precision, preferred_element_type=preferred_element_type
    )
    if x.ndim == 0 or y.ndim == 0:
        return _scaled(x, y, pref)
    if x.shape[-1] != y.shape[-1]:
        raise _not_aligned("inner", x, y, x.ndim - 1, y.ndim - 1)
    return dot_general(x, y, ((x.ndim - 1,), (y.ndim - 1,)), precision=pair, dtype=pref)


@export("tensordot")
def tensordot(a, b, axes=2, *, precision=None, preferred_element_type=None):
    (x, y), pair, pref = _product(
        "tensordot", (a, b), precision=precision, preferred_element_type=preferred_element_type
    )
    if isinstance(axes, int):
        if axes < 0 or axes > min(x.ndim, y.ndim):
            raise ValueError(
                f"{where('tensordot')}: axes={axes} must be between 0 and the smaller "
                f"rank ({x.ndim}, {y.ndim})"
            )
        ax_a = tuple(range(x.ndim - axes, x.ndim))
        ax_b = tuple(range(axes))
    else:
        try:
            ax_a, ax_b = axes
        except (TypeError, ValueError):
            raise ValueError(
                f"{where('tensordot')}: axes={axes!r} must be an int or a pair of axis sequences"
            ) from None
        ax_a = (ax_a,) if isinstance(ax_a, int) else tuple(ax_a)
        ax_b = (ax_b,) if isinstance(ax_b, int) else tuple(ax_b)
        if len(ax_a) != len(ax_b):
            raise ValueError(f"{where('tensordot')}: axes {ax_a} and {ax_b} have different lengths")
        ax_a = tuple(normalize_axis("tensordot", i, x.ndim) for i in ax_a)
        ax_b = tuple(normalize_axis("tensordot", i, y.ndim) for i in ax_b)
    for i, j in zip(ax_a, ax_b, strict=True):
        if x.shape[i] != y.shape[j]:
            raise ValueError(
                f"{where('tensordot')}: shape mismatch for sum: axis {i} of {x.shape} has "
                f"{x.shape[i]}, axis {j} of {y.shape} has {y.shape[j]}"
            )
    return dot_general(x, y, (ax_a, ax_b), precision=pair, dtype=pref)


@export("vecdot")
def vecdot(x1, x2, /, out=None, *, axis=-1, dtype=None):
    no_out("vecdot", out)
    x, y = _promoted("vecdot", x1, x2, dtype=dtype)
    shape = broadcast_shapes("vecdot", x.shape, y.shape)
    if not shape:
        raise ValueError(f"{where('vecdot')}: inputs must have at least one dimension")
    ax = normalize_axis("vecdot", axis, len(shape))
    prod = multiply(_conj(x), y)
    return reduce_raw(prod, (ax,), "add")


# --- lax-level products ----------------------------------------------------------------------


def _dims(op: str, name: str, value, ndim: int) -> tuple[int, ...]:
    try:
        dims = tuple(value)
    except TypeError:
        dims = None
    if (
        dims is None
        or any(isinstance(d, bool) or not isinstance(d, int | np.integer) for d in dims)
        or any(not 0 <= d < ndim for d in dims)
        or len(set(dims)) != len(dims)
    ):
        raise ValueError(
            f"{where(op)}: {name} {value!r} must be distinct dimensions in [0, {ndim}) of its "
            "operand"
        )
    return tuple(int(d) for d in dims)


def lax_dot_general(lhs, rhs, dimension_numbers, precision=None, preferred_element_type=None):
    """`jax.lax.dot_general`: one `stablehlo.dot_general`; `dimension_numbers` is
    `((lhs_contracting, rhs_contracting), (lhs_batch, rhs_batch))` and the result's dims are
    batch, lhs free, rhs free. Operands of different dtypes are promoted as NumPy would."""
    op = "dot_general"
    (x, y), pair, pref = _product(
        op, (lhs, rhs), precision=precision, preferred_element_type=preferred_element_type
    )
    try:
        (lc, rc), (lb, rb) = dimension_numbers
    except (TypeError, ValueError):
        raise ValueError(
            f"{where(op)}: dimension_numbers {dimension_numbers!r} must be "
            "((lhs_contracting, rhs_contracting), (lhs_batch, rhs_batch))"
        ) from None
    lc, lb = _dims(op, "lhs_contracting", lc, x.ndim), _dims(op, "lhs_batch", lb, x.ndim)
    rc, rb = _dims(op, "rhs_contracting", rc, y.ndim), _dims(op, "rhs_batch", rb, y.ndim)
    if set(lc) & set(lb) or set(rc) & set(rb):
        raise ValueError(
            f"{where(op)}: a dimension is both contracting and batch in {dimension_numbers!r}"
        )
    for kind, ls, rs in (("contracting", lc, rc), ("batch", lb, rb)):
        if tuple(x.shape[i] for i in ls) != tuple(y.shape[j] for j in rs):
            raise ValueError(
                f"{where(op)}: {kind} dimensions {ls} of lhs {x.shape} and {rs} of rhs "
                f"{y.shape} have different sizes"
            )
    return dot_general(x, y, (lc, rc), (lb, rb), precision=pair, dtype=pref)


def lax_dot(lhs, rhs, precision=None, preferred_element_type=None):
    """`jax.lax.dot`: the last dimension of `lhs` contracted with the first of `rhs` (vector
    and matrix products of operands of one or two dimensions)."""
    x, y = asarray(lhs), asarray(rhs)
    if x.ndim not in (1, 2) or y.ndim not in (1, 2) or x.shape[-1] != y.shape[0]:
        raise TypeError(
            f"{where('dot')}: incompatible shapes for dot: got {x.shape} and {y.shape}; "
            "lhs and rhs have 1 or 2 dimensions, lhs's last matching rhs's first"
        )
    return lax_dot_general(
        x,
        y,
        (((x.ndim - 1,), (0,)), ((), ())),
        precision=precision,
        preferred_element_type=preferred_element_type,
    )


def batch_matmul(lhs, rhs, precision=None):
    """`jax.lax.batch_matmul`: matrix products over the last two dimensions of operands of
    the same leading (batch) dimensions."""
    x, y = asarray(lhs), asarray(rhs)
    if x.ndim < 2 or x.ndim != y.ndim or x.shape[:-2] != y.shape[:-2]:
        raise ValueError(
            f"{where('batch_matmul')}: lhs {x.shape} and rhs {y.shape} must have the same "
            "number of dimensions, at least 2, and the same batch dimensions before the last two"
        )
    nb = x.ndim - 2
    batch = tuple(range(nb))
    return lax_dot_general(x, y, (((nb + 1,), (nb,)), (batch, batch)), precision=precision)


# --- einsum ----------------------------------------------------------------------------------

_LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


def _sublist_to_str(op: str, sub) -> str:
    if not isinstance(sub, list | tuple):
        raise TypeError(
            f"{where(op)}: expected subscripts as a string or sublists of ints, got "
            f"{type(sub).__name__}: einsum('ij,jk', a, b) or einsum(a, [0, 1], b, [1, 2])"
        )
    out = []
    for s in sub:
        if s is Ellipsis:
            out.append("...")
        elif isinstance(s, int) and 0 <= s < len(_LETTERS):
            out.append(_LETTERS[s])
        else:
            raise ValueError(f"{where(op)}: subscript {s!r} must be an int in [0, 52) or ...")
    return "".join(out)


def _interleaved(args) -> tuple[str, list]:
    operands, subs = list(args[0::2]), list(args[1::2])
    out = None
    if len(operands) > len(subs):  # a trailing output sublist
        out = operands.pop()
    spec = ",".join(_sublist_to_str("einsum", s) for s in subs)
    if out is not None:
        spec += "->" + _sublist_to_str("einsum", out)
    return spec, operands


def _parse_term(term: str, ndim: int, i: int) -> tuple[list[str], int]:
    """The letters of one input term (None for its ellipsis) and its ellipsis rank."""
    if term.count("...") > 1 or ("." in term.replace("...", "")):
        raise ValueError(f"{where('einsum')}: term {term!r} has a malformed ellipsis")
    head, ell, tail = term.partition("...")
    for c in head + tail:
        if c not in _LETTERS:
            raise ValueError(
                f"{where('einsum')}: invalid subscript {c!r} in term {term!r}; use letters"
            )
    n_letters = len(head) + len(tail)
    if not ell:
        if n_letters != ndim:
            raise ValueError(
                f"{where('einsum')}: term {term!r} has {n_letters} subscripts but operand "
                f"{i} has {ndim} dimensions"
            )
        return list(head), 0
    n_ell = ndim - n_letters
    if n_ell < 0:
        raise ValueError(
            f"{where('einsum')}: term {term!r} has more subscripts than operand {i} has "
            f"dimensions ({ndim})"
        )
    return list(head) + [None] * n_ell + list(tail), n_ell


def _diagonal(x: Tracer, p: int, q: int) -> Tracer:
    """Keeps x[..., i (at p), ..., i (at q), ...] as axis p, dropping axis q."""
    i32 = np.dtype(np.int32)
    eye = bind1("compare", iota(x.shape, i32, p), iota(x.shape, i32, q), direction="EQ")
    return reduce_raw(bind1("select", eye, x, full(x.shape, 0, x.dtype)), (q,), "add")


@export("einsum")
def einsum(
    *operands,
    out=None,
    dtype=None,
    order="K",
    casting="safe",
    optimize=False,
    precision=None,
    preferred_element_type=None,
):
    """NumPy's einsum, with JAX's `precision` and `preferred_element_type` for its dots
    (the sums an einsum needs besides them are in that dtype too)."""
    no_out("einsum", out)
    if not operands:
        raise ValueError(f"{where('einsum')}: no subscripts given")
    if isinstance(operands[0], str):
        spec, arrays = operands[0], list(operands[1:])
    else:
        spec, arrays = _interleaved(operands)
    if arrays:
        xs, pair, pref = _product(
            "einsum",
            arrays,
            dtype=dtype,
            precision=precision,
            preferred_element_type=preferred_element_type,
        )
    else:
        xs, pair, pref = [], precision_pair("einsum", precision), None
    if pref is not None and len(xs) < 2:
        # No dot to accumulate in it: the operand is converted.
        xs, pref = [cast(x, pref) for x in xs], None
    spec = spec.replace(" ", "")
    explicit = "->" in spec
    ins, _, out_spec = spec.partition("->")
    terms = ins.split(",")
    if len(terms) != len(xs):
        raise ValueError(
            f"{where('einsum')}: {len(terms)} terms in {spec!r} but {len(xs)} operands"
        )
    parsed = [_parse_term(t, x.ndim, i) for i, (t, x) in enumerate(zip(terms, xs, strict=True))]
    n_ell = max((p[1] for p in parsed), default=0)
    # Ellipsis dims are labelled 0..n_ell-1, right-aligned as in broadcasting.
    labels: list[list] = []
    for letters, k in parsed:
        ell = iter(range(n_ell - k, n_ell))
        labels.append([c if c is not None else next(ell) for c in letters])
    counts: dict[str, int] = {}
    for ls in labels:
        for c in ls:
            if isinstance(c, str):
                counts[c] = counts.get(c, 0) + 1
    if explicit:
        if "..." not in out_spec and n_ell:
            raise ValueError(
                f"{where('einsum')}: output {out_spec!r} has no '...' but the inputs have "
                "broadcast dimensions; add ... to the output"
            )
        out_rank = len(out_spec.replace("...", "")) + (n_ell if "..." in out_spec else 0)
        out_letters, _ = _parse_term(out_spec, out_rank, -1)
        out_ell = iter(range(n_ell))
        out_labels = [c if c is not None else next(out_ell) for c in out_letters]
        for c in out_labels:
            if isinstance(c, str) and c not in counts:
                raise ValueError(
                    f"{where('einsum')}: output subscript {c!r} does not appear in the inputs"
                )
        if len(set(out_labels)) != len(out_labels):
            raise ValueError(f"{where('einsum')}: output {out_spec!r} repeats a subscript")
    else:
        out_labels = list(range(n_ell)) + sorted(c for c, n in counts.items() if n == 1)

    sizes: dict = {}
    for i, (ls, x) in enumerate(zip(labels, xs, strict=True)):
        for c, d in zip(ls, x.shape, strict=True):
            prev = sizes.get(c)
            if prev is None or prev == 1:
                sizes[c] = d
            elif d not in (1, prev):
                name = repr(c) if isinstance(c, str) else "'...'"
                raise ValueError(
                    f"{where('einsum')}: size {d} of subscript {name} in operand {i} does not "
                    f"match size {prev} elsewhere"
                )

    prepared: list[tuple[Tracer, list]] = []
    for ls, x in zip(labels, xs, strict=True):
        ls = list(ls)
        while len(set(ls)) != len(ls):
            p = next(i for i, c in enumerate(ls) if ls.index(c) != i)
            first = ls.index(ls[p])
            if x.shape[first] != x.shape[p]:
                raise ValueError(
                    f"{where('einsum')}: repeated subscript {ls[p]!r} has sizes "
                    f"{x.shape[first]} and {x.shape[p]} in one operand"
                )
            x = _diagonal(x, first, p)
            del ls[p]
        target = tuple(sizes[c] for c in ls)
        if x.shape != target:
            x = bind1("broadcast_in_dim", x, shape=target, dims=tuple(range(len(ls))))
        prepared.append((x, ls))

    def needed_after(k: int) -> set:
        need = set(out_labels)
        for _, ls in prepared[k + 1 :]:
            need.update(ls)
        return need

    def sum_unneeded(x: Tracer, ls: list, need: set) -> tuple[Tracer, list]:
        drop = tuple(i for i, c in enumerate(ls) if c not in need)
        if not drop:
            return x, ls
        return reduce_raw(x, drop, "add"), [c for c in ls if c in need]

    need0 = set(out_labels)
    for _, ls in prepared[1:]:
        need0.update(ls)
    acc, acc_ls = sum_unneeded(*prepared[0], need0)
    for k in range(1, len(prepared)):
        x, ls = prepared[k]
        need = needed_after(k)
        x, ls = sum_unneeded(x, ls, need | set(acc_ls))
        shared = [c for c in acc_ls if c in ls]
        batch = [c for c in shared if c in need]
        contract = [c for c in shared if c not in need]
        if pref is not None and k > 1:
            x = cast(x, pref)  # the running product is in `pref` already
        acc = dot_general(
            acc,
            x,
            (tuple(acc_ls.index(c) for c in contract), tuple(ls.index(c) for c in contract)),
            (tuple(acc_ls.index(c) for c in batch), tuple(ls.index(c) for c in batch)),
            precision=pair,
            dtype=pref if k == 1 else None,
        )
        acc_ls = batch + [c for c in acc_ls if c not in shared] + [c for c in ls if c not in shared]
        acc, acc_ls = sum_unneeded(acc, acc_ls, need)
    perm = tuple(acc_ls.index(c) for c in out_labels)
    if perm != tuple(range(len(perm))):
        acc = bind1("transpose", acc, perm=perm)
    return acc


# --- norms -----------------------------------------------------------------------------------


def _linalg(name: str):
    def decorate(fn):
        LINALG_FUNCTIONS[name] = fn
        return fn

    return decorate


def _need_matrices(op: str, x: Tracer) -> None:
    if x.ndim < 2:
        raise ValueError(
            f"{where(op)}: the input has {x.ndim} dimension(s); it must be a (stack of) "
            "matrices with at least 2"
        )


@_linalg("matmul")
def linalg_matmul(x1, x2, /, *, precision=None, preferred_element_type=None):
    return matmul(x1, x2, precision=precision, preferred_element_type=preferred_element_type)


@_linalg("vecdot")
def linalg_vecdot(x1, x2, /, *, axis=-1):
    return vecdot(x1, x2, axis=axis)


@_linalg("tensordot")
def linalg_tensordot(x1, x2, /, *, axes=2, precision=None, preferred_element_type=None):
    return tensordot(
        x1, x2, axes, precision=precision, preferred_element_type=preferred_element_type
    )


@_linalg("outer")
def linalg_outer(x1, x2, /):
    a, b = asarray(x1), asarray(x2)
    if a.ndim != 1 or b.ndim != 1:
        raise ValueError(
            f"{where('linalg.outer')}: inputs must be one-dimensional, got shapes {a.shape} "
            f"and {b.shape}; use numpy.outer to flatten first"
        )
    return multiply(reshape_to(a, (a.shape[0], 1)), b)


@export("trace")
def trace(a, offset=0, axis1=0, axis2=1, dtype=None, out=None):
    no_out("trace", out)
    return sum_(diagonal(a, offset, axis1, axis2), axis=-1, dtype=dtype)


@_linalg("matrix_transpose")
def linalg_matrix_transpose(x, /):
    return matrix_transpose(x)


@_linalg("diagonal")
def linalg_diagonal(x, /, *, offset=0):
    x = asarray(x)
    _need_matrices("linalg.diagonal", x)
    return diagonal(x, offset, -2, -1)


@_linalg("trace")
def linalg_trace(x, /, *, offset=0, dtype=None):
    x = asarray(x)
    _need_matrices("linalg.trace", x)
    return trace(x, offset, -2, -1, dtype=dtype)
