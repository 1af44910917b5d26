"""Trace stage, reduction family: sums, extrema, statistics and cumulative ops.

Every reduction is one `stablehlo.reduce` whose body is a single binary op; argmax and
argmin are a variadic reduce over (value, index) pairs, and complex max/min/argmax reduce
(real, imag) keys in NumPy's lexicographic order. Cumulative ops are one
`stablehlo.reduce_window` with a window as long as the axis, padded in front; along a
symbolic axis, whose length no window can have, a Hillis-Steele scan in one while loop.

Result dtypes follow NumPy 2: `sum`/`prod`/`cumsum`/`cumprod` widen bool and integers
narrower than 64 bits to int64/uint64, `mean`/`var`/`std` of integers are float64, float16
and bfloat16 stay float16/bfloat16 (accumulated in float32, as NumPy does for float16).
Axis, keepdims, dtype, where and initial behave as in NumPy wherever NumPy has them.
"""

from __future__ import annotations

import math

import numpy as np
from jaxlib.mlir import ir
from jaxlib.mlir.dialects import stablehlo

from aotkit import dtypes
from aotkit.symbolic import algebra
from aotkit.tracing.control import fori_loop, while_loop
from aotkit.tracing.core import (
    RuleContext,
    Tracer,
    bind,
    bind1,
    export,
    full,
    register,
    where,
)
from aotkit.tracing.creation import iota
from aotkit.tracing.elementwise import asarray, divide, maximum, subtract
from aotkit.tracing.hlo import (
    broadcast_shapes,
    broadcast_to_shape,
    broadcasts_to,
    cast,
    no_out,
    normalize_axes,
    normalize_axis,
    ravel_or_axis,
    reshape_to,
    to_operand,
)
from aotkit.tracing.indexing import take
from aotkit.tracing.outputs import accepts_out
from aotkit.tracing.shape import concatenate

_BOOL = np.dtype(np.bool_)
_INT64 = np.dtype(np.int64)
_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)

# --- primitives ------------------------------------------------------------------------------

# Body ops of a reduction, by monoid name; bool operands use the logical forms.
_MONOID_OPS = {
    "add": stablehlo.add,
    "multiply": stablehlo.multiply,
    "max": stablehlo.maximum,
    "min": stablehlo.minimum,
    "and": stablehlo.and_,
    "or": stablehlo.or_,
    "xor": stablehlo.xor,
}


def _reduce_shape(*avals, axes, monoid):
    n = len(avals) // 2
    return [(tuple(d for i, d in enumerate(a[0]) if i not in axes), a[1]) for a in avals[:n]]


def _scalar_types(ctx: RuleContext) -> list[ir.Type]:
    return [dtypes.tensor_type((), a[1]) for a in ctx.avals_out]


def _build_body(region: ir.Region, types: list[ir.Type], body) -> None:
    block = region.blocks.append(*types, *types)
    with ir.InsertionPoint(block):
        stablehlo.return_(body(list(block.arguments)))


def _monoid_body(monoid: str):
    fn = _MONOID_OPS[monoid]
    return lambda args: [fn(args[0], args[1])]


def _cmp(x, y, direction: str):
    return stablehlo.compare(x, y, stablehlo.ComparisonDirectionAttr.get(direction))


def _lex_body(direction: str, n_keys: int, indexed: bool):
    """Keeps the extreme of lexicographically ordered keys (a complex number is the keys
    (real, imag)), NaN before anything as in NumPy, and with an index the first among equals.
    """
    n = n_keys + indexed

    def body(args):
        a, b = args[:n], args[n:]
        ka, kb = a[:n_keys], b[:n_keys]
        a_nan, b_nan = _cmp(ka[0], ka[0], "NE"), _cmp(kb[0], kb[0], "NE")
        for x, y in zip(ka[1:], kb[1:], strict=True):
            a_nan = stablehlo.or_(a_nan, _cmp(x, x, "NE"))
            b_nan = stablehlo.or_(b_nan, _cmp(y, y, "NE"))
        gt, eq = _cmp(ka[-1], kb[-1], direction), _cmp(ka[-1], kb[-1], "EQ")
        for x, y in zip(reversed(ka[:-1]), reversed(kb[:-1]), strict=True):
            x_eq_y = _cmp(x, y, "EQ")
            gt = stablehlo.or_(_cmp(x, y, direction), stablehlo.and_(x_eq_y, gt))
            eq = stablehlo.and_(x_eq_y, eq)
        both_ok = stablehlo.not_(stablehlo.or_(a_nan, b_nan))
        better = stablehlo.or_(
            stablehlo.and_(a_nan, stablehlo.not_(b_nan)), stablehlo.and_(both_ok, gt)
        )
        pick_a = better
        if indexed:
            tie = stablehlo.or_(stablehlo.and_(a_nan, b_nan), stablehlo.and_(both_ok, eq))
            pick_a = stablehlo.or_(better, stablehlo.and_(tie, _cmp(a[-1], b[-1], "LT")))
        return [stablehlo.select(pick_a, x, y) for x, y in zip(a, b, strict=True)]

    return body


_BODIES = {
    **{m: _monoid_body(m) for m in _MONOID_OPS},
    "argmax": _lex_body("GT", 1, True),
    "argmin": _lex_body("LT", 1, True),
    "argmax_complex": _lex_body("GT", 2, True),
    "argmin_complex": _lex_body("LT", 2, True),
    "max_complex": _lex_body("GT", 2, False),
    "min_complex": _lex_body("LT", 2, False),
    # nanargmax/nanargmin: a validity key first, so NaN loses to every number.
    "nanargmax": _lex_body("GT", 2, True),
    "nanargmin": _lex_body("LT", 2, True),
    "nanargmax_complex": _lex_body("GT", 3, True),
    "nanargmin_complex": _lex_body("LT", 3, True),
}


@register("reduce", shape=_reduce_shape, simplify_free=True)
def _lower_reduce(ctx: RuleContext, *operands, axes, monoid):
    n = len(operands) // 2
    op = stablehlo.ReduceOp(
        [ctx.out_type(i) for i in range(n)], operands[:n], operands[n:], list(axes)
    )
    _build_body(op.regions[0], _scalar_types(ctx), _BODIES[monoid])
    return list(op.results)


def _cumulative_shape(x, init, *, axis, monoid):
    return [x]


@register("cumulative", shape=_cumulative_shape, simplify_free=True)
def _lower_cumulative(ctx: RuleContext, x, init, *, axis, monoid):
    shape = ctx.avals_in[0][0]
    window = [1] * len(shape)
    window[axis] = shape[axis]
    pad = np.zeros((len(shape), 2), np.int64)
    pad[axis, 0] = shape[axis] - 1
    op = stablehlo.ReduceWindowOp(
        [ctx.out_type()],
        [x],
        [init],
        window,
        padding=ir.DenseIntElementsAttr.get(pad),
    )
    _build_body(op.regions[0], _scalar_types(ctx), _BODIES[monoid])
    return list(op.results)


def _diff_shape(x, *, axis):
    shape = list(x[0])
    shape[axis] -= 1
    return [(tuple(shape), x[1])]


@register("diff", shape=_diff_shape)
def _lower_diff(ctx: RuleContext, x, *, axis):
    shape = ctx.avals_in[0][0]
    ones, zeros = [1] * len(shape), [0] * len(shape)
    # x[1:] and x[:-1] along `axis`.
    hi_start, lo_limit = list(zeros), list(shape)
    hi_start[axis] = 1
    lo_limit[axis] -= 1
    hi = stablehlo.slice(x, hi_start, list(shape), ones)
    lo = stablehlo.slice(x, zeros, lo_limit, ones)
    if ctx.avals_in[0][1] == _BOOL:
        # NumPy's diff of booleans is not_equal.
        return [stablehlo.xor(hi, lo)]
    return [stablehlo.subtract(hi, lo)]


# --- helpers ---------------------------------------------------------------------------------


def reduction_axes(op: str, axis, ndim: int) -> tuple[int, ...]:
    """`axis` (None, an int or a tuple of ints) as a sorted tuple of distinct axes."""
    return tuple(sorted(normalize_axes(op, axis, ndim)))


def _identity(monoid: str, dtype: np.dtype):
    if monoid in ("add", "or", "xor"):
        return 0
    if monoid == "multiply":
        return 1
    if monoid == "and":
        return True if dtype == _BOOL else ~np.zeros((), dtype)
    big = monoid == "min"
    if dtype == _BOOL:
        return big
    if dtypes.is_complex(dtype):
        # The bottom (or top) of NumPy's complex order: real part first, then imaginary.
        return complex(np.inf, np.inf) if big else complex(-np.inf, -np.inf)
    return dtypes.highest(dtype) if big else dtypes.lowest(dtype)


_LOGICAL = {"add": "or", "multiply": "and", "max": "or", "min": "and"}


def reduce_raw(x: Tracer, axes: tuple[int, ...], monoid: str) -> Tracer:
    """Reduces `x` over `axes` with `monoid` in its own dtype (no NumPy widening)."""
    if not axes:
        return x
    if x.dtype == _BOOL:
        monoid = _LOGICAL.get(monoid, monoid)
    init = full((), _identity(monoid, x.dtype), x.dtype)
    return bind1("reduce", x, init, axes=tuple(axes), monoid=monoid)


def _keep(x: Tracer, axes: tuple[int, ...], in_shape: tuple[int, ...], keepdims: bool) -> Tracer:
    if not keepdims:
        return x
    return reshape_to(x, tuple(1 if i in axes else d for i, d in enumerate(in_shape)))


def _mask(op: str, wh, shape: tuple[int, ...]) -> Tracer | None:
    """The `where=` argument as a bool tracer of `shape` (None when it is True)."""
    if wh is True or wh is None:
        return None
    if isinstance(wh, Tracer):
        m = wh
    else:
        m = asarray(np.asarray(wh))
    if m.dtype != _BOOL:
        raise TypeError(
            f"{where(op)}: where= must be a boolean mask, got dtype {m.dtype}; "
            "compare first (e.g. where=x > 0)"
        )
    if not broadcasts_to(m.shape, shape):
        raise ValueError(
            f"{where(op)}: where= of shape {m.shape} does not broadcast to the array's "
            f"shape {shape}"
        )
    return to_operand(op, m, _BOOL, shape)


def _masked(x: Tracer, mask: Tracer | None, fill) -> Tracer:
    if mask is None:
        return x
    return bind1("select", mask, x, full(x.shape, fill, x.dtype))


def _sum_dtype(dtype: np.dtype) -> np.dtype:
    """NumPy's add.reduce dtype: bool and narrow integers widen to 64 bits."""
    if dtype == _BOOL or (dtypes.is_signed_int(dtype) and dtype.itemsize < 8):
        return _INT64
    if dtypes.is_unsigned_int(dtype) and dtype.itemsize < 8:
        return np.dtype(np.uint64)
    return dtype


def _accumulator(dtype: np.dtype) -> np.dtype:
    """Sums of float16 and bfloat16 run in float32 (NumPy's float16 loops do the same)."""
    return _F32 if dtype in (np.float16, dtypes.bfloat16) else dtype


def _widened_dtype(op: str, dtype, x: Tracer) -> np.dtype:
    """The user's `dtype=`, or NumPy's add/multiply.reduce dtype for `x`."""
    if dtype is None:
        return _sum_dtype(x.dtype)
    return dtypes.canonicalize(dtype, where=where(op))


def _combine(monoid: str, r: Tracer, other: Tracer) -> Tracer:
    return bind1(_LOGICAL.get(monoid, monoid) if r.dtype == _BOOL else monoid, r, other)


def _reduced_size(shape: tuple[int, ...], axes: tuple[int, ...]) -> int:
    return math.prod(shape[i] for i in axes)


_NAMES = {"add": "add", "multiply": "multiply", "max": "maximum", "min": "minimum"}


def _arith_reduce(op, monoid, a, axis, dtype, out, keepdims, initial, wh) -> Tracer:
    no_out(op, out)
    x = asarray(a)
    axes = reduction_axes(op, axis, x.ndim)
    out_dtype = _widened_dtype(op, dtype, x)
    acc = _accumulator(out_dtype)
    r = _widening_reduce(x, _mask(op, wh, x.shape), acc, axes, monoid)
    if initial is not None:
        r = _combine(monoid, r, to_operand(op, initial, acc, r.shape))
    return _keep(cast(r, out_dtype), axes, x.shape, keepdims)


# The most a reduction's widened copy of its input may take at once: a wider input is
# reduced block by block in a loop (an int8 sum accumulates in int64, and converting a 2 GiB
# array first would take 16 GiB).
WIDEN_BLOCK_BYTES = 16 << 20


def _widening_reduce(x: Tracer, mask, acc: np.dtype, axes, monoid: str) -> Tracer:
    """`x` (masked) reduced over `axes` with `monoid` in the wider dtype `acc`."""
    identity = _identity(monoid, acc)
    if not algebra.is_static(x.shape):  # symbolic (issue 25): no blocks, one reduction
        return reduce_raw(_masked(cast(x, acc), mask, identity), axes, monoid)
    reduced = _reduced_size(x.shape, axes)
    kept = x.size // reduced if reduced else 0
    block = WIDEN_BLOCK_BYTES // max(1, kept * acc.itemsize)
    if (
        acc.itemsize <= x.dtype.itemsize
        or x.size * acc.itemsize <= WIDEN_BLOCK_BYTES
        or (block < 1 or block >= reduced)
    ):
        return reduce_raw(_masked(cast(x, acc), mask, identity), axes, monoid)
    # Reduced axes last, flattened: (kept, reduced); then `block` columns at a time.
    rest = tuple(i for i in range(x.ndim) if i not in axes)
    out_shape = tuple(x.shape[i] for i in rest)

    def columns(t: Tracer) -> Tracer:
        t = broadcast_to_shape(t, x.shape)
        if rest + tuple(axes) != tuple(range(x.ndim)):
            t = bind1("transpose", t, perm=rest + tuple(axes))
        return reshape_to(t, (kept, reduced))

    x2, m2 = columns(x), columns(mask) if mask is not None else None
    i32 = np.dtype(np.int32 if reduced < 2**31 else np.int64)

    def part(start, size: int) -> Tracer:
        starts = [full((), 0, i32), start]
        piece = bind1("dynamic_slice", x2, *starts, sizes=(kept, size))
        piece_mask = None
        if m2 is not None:
            piece_mask = bind1("dynamic_slice", m2, *starts, sizes=(kept, size))
        return reduce_raw(_masked(cast(piece, acc), piece_mask, identity), (1,), monoid)

    def body(k, total):
        start = bind1("multiply", cast(k, i32), full((), block, i32))
        return _combine(monoid, total, part(start, block))

    n = reduced // block
    total = fori_loop(0, n, body, full((kept,), identity, acc))
    if reduced % block:
        total = _combine(monoid, total, part(full((), n * block, i32), reduced % block))
    return reshape_to(total, out_shape)


def _extreme(op, monoid, a, axis, out, keepdims, initial, wh) -> Tracer:
    no_out(op, out)
    x = asarray(a)
    axes = reduction_axes(op, axis, x.ndim)
    mask = _mask(op, wh, x.shape)
    if initial is None and mask is not None:
        raise ValueError(
            f"{where(op)}: reduction operation {_NAMES[monoid]!r} has no identity, so a "
            "where= mask needs initial= as well"
        )
    size = _reduced_size(x.shape, axes)
    if initial is None and isinstance(size, algebra.Dim) and not algebra.definitely(size, ">=", 1):
        raise algebra.InconclusiveDimensionError(
            f"{where(op)}: the reduced size {size} may be 0, and {op} has no identity; "
            + algebra.HOW_TO_DECIDE.format(example=f"{size} >= 1").replace(
                "make the dimension static", "pass initial="
            )
        )
    if initial is None and size == 0:
        raise ValueError(
            f"{where(op)}: zero-size array of shape {x.shape} to reduction operation "
            f"{_NAMES[monoid]!r} which has no identity; pass initial="
        )
    x = _masked(x, mask, _identity(monoid, x.dtype))
    if dtypes.is_complex(x.dtype):
        r = _complex_extreme(monoid, x, axes)
        if initial is not None:
            r = _complex_pick(monoid, r, to_operand(op, initial, x.dtype, r.shape))
    else:
        r = reduce_raw(x, axes, monoid)
        if initial is not None:
            r = _combine(monoid, r, to_operand(op, initial, x.dtype, r.shape))
    return _keep(r, axes, x.shape, keepdims)


def _parts(x: Tracer) -> tuple[Tracer, Tracer]:
    return bind1("real", x), bind1("imag", x)


def _complex_extreme(monoid: str, x: Tracer, axes: tuple[int, ...]) -> Tracer:
    """max/min of complex values in NumPy's order: by real part, then imaginary part."""
    if not axes:
        return x
    re, im = _parts(x)
    init = full((), _identity(monoid, re.dtype), re.dtype)
    r_re, r_im = bind("reduce", re, im, init, init, axes=axes, monoid=f"{monoid}_complex")
    return bind1("complex", r_re, r_im)


def _complex_pick(monoid: str, a: Tracer, b: Tracer) -> Tracer:
    """Elementwise max/min of complex tracers in NumPy's order, NaN propagating."""
    direction = "GT" if monoid == "max" else "LT"
    (ar, ai), (br, bi) = _parts(a), _parts(b)

    def cmp(x, y, d):
        return bind1("compare", x, y, direction=d)

    a_nan = bind1("or", cmp(ar, ar, "NE"), cmp(ai, ai, "NE"))
    b_nan = bind1("or", cmp(br, br, "NE"), cmp(bi, bi, "NE"))
    gt = bind1(
        "or", cmp(ar, br, direction), bind1("and", cmp(ar, br, "EQ"), cmp(ai, bi, direction))
    )
    ok = bind1("not", bind1("or", a_nan, b_nan))
    better = bind1("or", bind1("and", a_nan, bind1("not", b_nan)), bind1("and", ok, gt))
    return bind1("select", better, a, b)


@export("sum")
@accepts_out("sum", computes_in_out_dtype=True)
def sum_(a, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=True):
    return _arith_reduce("sum", "add", a, axis, dtype, out, keepdims, initial, where)


@export("prod")
@accepts_out("prod", computes_in_out_dtype=True)
def prod(a, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=True):
    return _arith_reduce("prod", "multiply", a, axis, dtype, out, keepdims, initial, where)


@export("max", "amax")
@accepts_out("max")
def max_(a, axis=None, out=None, keepdims=False, initial=None, where=True):
    return _extreme("max", "max", a, axis, out, keepdims, initial, where)


@export("min", "amin")
@accepts_out("min")
def min_(a, axis=None, out=None, keepdims=False, initial=None, where=True):
    return _extreme("min", "min", a, axis, out, keepdims, initial, where)


def _logical_reduce(op, monoid, a, axis, out, keepdims, wh) -> Tracer:
    no_out(op, out)
    x = asarray(a)
    axes = reduction_axes(op, axis, x.ndim)
    xb = _masked(cast(x, _BOOL), _mask(op, wh, x.shape), monoid == "and")
    return _keep(reduce_raw(xb, axes, monoid), axes, x.shape, keepdims)


@export("any")
@accepts_out("any")
def any_(a, axis=None, out=None, keepdims=False, *, where=True):
    return _logical_reduce("any", "or", a, axis, out, keepdims, where)


@export("all")
@accepts_out("all")
def all_(a, axis=None, out=None, keepdims=False, *, where=True):
    return _logical_reduce("all", "and", a, axis, out, keepdims, where)


def _mean_dtype(op: str, x: Tracer, dtype) -> np.dtype:
    if dtype is not None:
        return dtypes.canonicalize(dtype, where=where(op))
    if x.dtype == _BOOL or dtypes.is_integer(x.dtype):
        return _F64
    return x.dtype


def _mean_parts(op, x, axes, acc, mask) -> tuple[Tracer, Tracer]:
    """(sum, count) over `axes` in `acc`, both of the reduced shape."""
    s = reduce_raw(_masked(cast(x, acc), mask, 0), axes, "add")
    if mask is None:
        count = full(s.shape, _reduced_size(x.shape, axes), acc)
    else:
        count = reduce_raw(cast(mask, acc), axes, "add")
    return s, count


@export("mean")
@accepts_out("mean")
def mean(a, axis=None, dtype=None, out=None, keepdims=False, *, where=True):
    no_out("mean", out)
    x = asarray(a)
    axes = reduction_axes("mean", axis, x.ndim)
    out_dtype = _mean_dtype("mean", x, dtype)
    acc = _accumulator(out_dtype)
    s, count = _mean_parts("mean", x, axes, acc, _mask("mean", where, x.shape))
    return _keep(cast(bind1("divide", s, count), out_dtype), axes, x.shape, keepdims)


def _expand(r: Tracer, axes: tuple[int, ...], shape: tuple[int, ...]) -> Tracer:
    """Broadcasts a reduction result back over the reduced axes."""
    kept = tuple(i for i in range(len(shape)) if i not in axes)
    return bind1("broadcast_in_dim", r, shape=shape, dims=kept) if r.shape != shape else r


def _var(op, a, axis, dtype, out, ddof, keepdims, wh, mean_, correction) -> Tracer:
    no_out(op, out)
    if correction is not None:
        if ddof != 0:
            raise ValueError(
                f"{where(op)}: ddof={ddof!r} and correction={correction!r} were both given; "
                "they are the same parameter, pass one"
            )
        ddof = correction
    x = asarray(a)
    axes = reduction_axes(op, axis, x.ndim)
    comp_dtype = _mean_dtype(op, x, dtype)
    acc = _accumulator(comp_dtype)
    mask = _mask(op, wh, x.shape)
    s, count = _mean_parts(op, x, axes, acc, mask)
    if mean_ is not None:
        m = to_operand(op, mean_, acc, x.shape)
    else:
        m = _expand(bind1("divide", s, count), axes, x.shape)
    d = bind1("subtract", cast(x, acc), m)
    if dtypes.is_complex(acc):
        sq = bind1(
            "add",
            bind1("multiply", bind1("real", d), bind1("real", d)),
            bind1("multiply", bind1("imag", d), bind1("imag", d)),
        )
        count = bind1("real", count)
    else:
        sq = bind1("multiply", d, d)
    ss = reduce_raw(_masked(sq, mask, 0), axes, "add")
    rd = sq.dtype
    denom = bind1(
        "max", bind1("subtract", count, full(count.shape, ddof, rd)), full(count.shape, 0, rd)
    )
    v = bind1("divide", ss, denom)
    if op.endswith("std"):
        v = bind1("sqrt", v)
    return _keep(cast(v, dtypes.real_dtype(comp_dtype)), axes, x.shape, keepdims)


@export("var")
@accepts_out("var")
def var(
    a,
    axis=None,
    dtype=None,
    out=None,
    ddof=0,
    keepdims=False,
    *,
    where=True,
    mean=None,
    correction=None,
):
    return _var("var", a, axis, dtype, out, ddof, keepdims, where, mean, correction)


@export("std")
@accepts_out("std")
def std(
    a,
    axis=None,
    dtype=None,
    out=None,
    ddof=0,
    keepdims=False,
    *,
    where=True,
    mean=None,
    correction=None,
):
    return _var("std", a, axis, dtype, out, ddof, keepdims, where, mean, correction)


def _argreduce(op: str, a, axis, out, keepdims) -> Tracer:
    no_out(op, out)
    x = asarray(a)
    in_shape = x.shape
    x, ax = ravel_or_axis(op, x, axis)
    if x.shape[ax] == 0:
        raise ValueError(f"{where(op)}: attempt to get {op} of an empty sequence")
    if x.dtype == _BOOL or dtypes.is_sub_byte_int(x.dtype):
        # i1 compares as signed in some lowerings; u8 keeps True > False unambiguous. XLA's CPU
        # client cannot compile a variadic reduce of 2-bit integers: they reduce as 8-bit ones.
        x = cast(x, np.dtype(np.uint8) if x.dtype == _BOOL else dtypes.exact_wide(x.dtype))
    monoid = "max" if op.endswith("argmax") else "min"
    keys = list(_parts(x)) if dtypes.is_complex(x.dtype) else [x]
    body = op if len(keys) == 1 else f"{op}_complex"
    ok = _not_nan(x) if op.startswith("nan") else None
    if ok is not None:
        # NaN sorts below every number: a validity key first, NaN itself zeroed.
        valid = cast(ok if monoid == "max" else bind1("not", ok), np.dtype(np.uint8))
        keys = [valid] + [bind1("select", ok, k, full(k.shape, 0, k.dtype)) for k in keys]
    elif op.startswith("nan"):
        body = op.removeprefix("nan")
    idx = iota(x.shape, _INT64, ax)
    inits = [full((), _identity(monoid, k.dtype), k.dtype) for k in keys]
    *_, i = bind("reduce", *keys, idx, *inits, full((), 0, _INT64), axes=(ax,), monoid=body)
    if not keepdims:
        return i
    if axis is None:
        return reshape_to(i, (1,) * len(in_shape))
    return _keep(i, (ax,), x.shape, True)


@export("argmax")
@accepts_out("argmax")
def argmax(a, axis=None, out=None, *, keepdims=False):
    return _argreduce("argmax", a, axis, out, keepdims)


@export("argmin")
@accepts_out("argmin")
def argmin(a, axis=None, out=None, *, keepdims=False):
    return _argreduce("argmin", a, axis, out, keepdims)


@export("nanargmax")
@accepts_out("nanargmax")
def nanargmax(a, axis=None, out=None, *, keepdims=False):
    return _argreduce("nanargmax", a, axis, out, keepdims)


@export("nanargmin")
@accepts_out("nanargmin")
def nanargmin(a, axis=None, out=None, *, keepdims=False):
    return _argreduce("nanargmin", a, axis, out, keepdims)


@export("ptp")
@accepts_out("ptp")
def ptp(a, axis=None, out=None, keepdims=False):
    hi = max_(a, axis=axis, out=out, keepdims=keepdims)
    lo = min_(a, axis=axis, keepdims=keepdims)
    return subtract(hi, lo)


@export("count_nonzero")
def count_nonzero(a, axis=None, *, keepdims=False):
    x = asarray(a)
    axes = reduction_axes("count_nonzero", axis, x.ndim)
    r = reduce_raw(cast(cast(x, _BOOL), _INT64), axes, "add")
    return _keep(r, axes, x.shape, keepdims)


def cumulative(x: Tracer, axis: int, monoid: str) -> Tracer:
    """The inclusive scan of `x` along `axis` with `monoid`, in `x`'s dtype."""
    if x.dtype == _BOOL:
        monoid = _LOGICAL.get(monoid, monoid)
    if algebra.is_symbolic(x.shape[axis]):
        return _cumulative_symbolic(x, axis, monoid)
    if x.shape[axis] == 0:
        return x
    init = full((), _identity(monoid, x.dtype), x.dtype)
    return bind1("cumulative", x, init, axis=axis, monoid=monoid)


def _cumulative_symbolic(x: Tracer, axis: int, monoid: str) -> Tracer:
    """`cumulative` along an axis of symbolic size n, where reduce_window's window (as long
    as the axis) cannot be: a Hillis-Steele scan in a loop, whose step k combines each
    element with the one k before it (k = 1, 2, 4, ... while k < n: ceil(log2(n)) steps)."""
    n = x.shape[axis]
    edge = full(x.shape[:axis] + (1,) + x.shape[axis + 1 :], _identity(monoid, x.dtype), x.dtype)
    position = iota((n,), _INT64)
    size = cast(asarray(n), _INT64)

    def step(carry):
        y, k = carry
        # Element 0 of `padded` is the identity: element i reads i - k + 1 there, or 0.
        padded = concatenate([edge, y], axis=axis)
        source = maximum(position - (k - 1), 0)
        return bind1(monoid, y, take(padded, source, axis=axis)), k * 2

    return while_loop(lambda c: c[1] < size, step, (x, full((), 1, _INT64)))[0]


def _cumulative(op, monoid, a, axis, dtype, out) -> Tracer:
    no_out(op, out)
    x = asarray(a)
    x, ax = ravel_or_axis(op, x, axis)
    out_dtype = _widened_dtype(op, dtype, x)
    return cast(cumulative(cast(x, _accumulator(out_dtype)), ax, monoid), out_dtype)


def _cumulative_api(op, monoid, x, axis, dtype, out, include_initial) -> Tracer:
    """NumPy 2.1's cumulative_sum/cumulative_prod: axis needed above 1-D, optional initial."""
    x = asarray(x)
    if axis is None:
        if x.ndim > 1:
            raise ValueError(
                f"{where(op)}: axis= is required for arrays of more than one dimension "
                f"(shape {x.shape}); pass the axis to accumulate along"
            )
        axis = 0
    if x.ndim == 0:
        raise ValueError(f"{where(op)}: the input must have at least one dimension")
    r = _cumulative(op, monoid, x, axis, dtype, out)
    if not include_initial:
        return r
    ax = normalize_axis(op, axis, x.ndim)
    first = full(r.shape[:ax] + (1,) + r.shape[ax + 1 :], _identity(monoid, r.dtype), r.dtype)
    return concatenate([first, r], axis=ax)


@export("cumulative_sum")
@accepts_out("cumulative_sum", computes_in_out_dtype=True)
def cumulative_sum(x, /, *, axis=None, dtype=None, out=None, include_initial=False):
    return _cumulative_api("cumulative_sum", "add", x, axis, dtype, out, include_initial)


@export("cumulative_prod")
@accepts_out("cumulative_prod", computes_in_out_dtype=True)
def cumulative_prod(x, /, *, axis=None, dtype=None, out=None, include_initial=False):
    return _cumulative_api("cumulative_prod", "multiply", x, axis, dtype, out, include_initial)


@export("cumsum")
@accepts_out("cumsum", computes_in_out_dtype=True)
def cumsum(a, axis=None, dtype=None, out=None):
    return _cumulative("cumsum", "add", a, axis, dtype, out)


@export("cumprod")
@accepts_out("cumprod", computes_in_out_dtype=True)
def cumprod(a, axis=None, dtype=None, out=None):
    return _cumulative("cumprod", "multiply", a, axis, dtype, out)


_NOVALUE = object()


def _edge(op: str, v, x: Tracer, ax: int) -> Tracer:
    """A prepend/append value as an array that concatenates to `x` along `ax`."""
    e = asarray(v)
    if e.ndim == 0:
        shape = x.shape[:ax] + (1,) + x.shape[ax + 1 :]
        return to_operand(op, e, e.dtype, shape)
    return e


@export("diff")
def diff(a, n=1, axis=-1, prepend=_NOVALUE, append=_NOVALUE):
    if not isinstance(n, int) or isinstance(n, bool):
        raise TypeError(f"{where('diff')}: n must be a Python int, got {n!r}")
    if n < 0:
        raise ValueError(f"{where('diff')}: order must be non-negative but got {n}")
    x = asarray(a)
    if x.ndim == 0:
        raise ValueError(f"{where('diff')}: diff requires input that is at least one dimensional")
    ax = normalize_axis("diff", axis, x.ndim)
    if n == 0:
        return x
    if prepend is not _NOVALUE or append is not _NOVALUE:
        parts = [x]
        if prepend is not _NOVALUE:
            parts.insert(0, _edge("diff", prepend, x, ax))
        if append is not _NOVALUE:
            parts.append(_edge("diff", append, x, ax))
        x = concatenate(parts, axis=ax)
    for _ in range(n):
        if isinstance(x.shape[ax], algebra.Dim):
            x = _symbolic_diff(x, ax)
            continue
        if x.shape[ax] == 0:
            break
        x = bind1("diff", x, axis=ax)
    return x


def _symbolic_diff(x: Tracer, ax: int) -> Tracer:
    """One `diff` along a symbolic axis of length b: x[1:] - x[:-1], max(0, b - 1) long
    (issue 25)."""
    first, length = algebra.slice_indices(1, None, 1, x.shape[ax])

    def part(start: int | algebra.Dim) -> Tracer:
        lo = tuple(start if d == ax else 0 for d in range(x.ndim))
        hi = tuple(start + length if d == ax else n for d, n in enumerate(x.shape))
        shape = tuple(length if d == ax else n for d, n in enumerate(x.shape))
        return bind1("symbolic_slice", x, start=lo, limit=hi, strides=(1,) * x.ndim, shape=shape)

    hi, lo = part(first), part(0)
    return bind1("xor" if x.dtype == _BOOL else "subtract", hi, lo)


# --- NaN-aware reductions ----------------------------------------------------------------------


def _not_nan(x: Tracer) -> Tracer | None:
    if not dtypes.is_inexact(x.dtype):
        return None
    return (
        bind1("compare", x, x, direction="EQ")
        if not dtypes.is_complex(x.dtype)
        else (
            bind1(
                "and",
                bind1("compare", bind1("real", x), bind1("real", x), direction="EQ"),
                bind1("compare", bind1("imag", x), bind1("imag", x), direction="EQ"),
            )
        )
    )


def _and_masks(a: Tracer | None, b: Tracer | None) -> Tracer | None:
    if a is None or b is None:
        return a if b is None else b
    return bind1("and", a, b)


@export("nansum")
@accepts_out("nansum", computes_in_out_dtype=True)
def nansum(a, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=True):
    x = asarray(a)
    ok = _not_nan(x)
    if ok is not None:
        x = bind1("select", ok, x, full(x.shape, 0, x.dtype))
    return _arith_reduce("nansum", "add", x, axis, dtype, out, keepdims, initial, where)


@export("nanmean")
@accepts_out("nanmean")
def nanmean(a, axis=None, dtype=None, out=None, keepdims=False, *, where=True):
    no_out("nanmean", out)
    x = asarray(a)
    mask = _and_masks(_not_nan(x), _mask("nanmean", where, x.shape))
    return mean(x, axis=axis, dtype=dtype, keepdims=keepdims, where=True if mask is None else mask)


def _nan_extreme(op, monoid, a, axis, out, keepdims, initial, wh) -> Tracer:
    x = asarray(a)
    ok = _not_nan(x)
    if ok is None:
        return _extreme(op, monoid, x, axis, out, keepdims, initial, wh)
    filled = bind1("select", ok, x, full(x.shape, _identity(monoid, x.dtype), x.dtype))
    r = _extreme(op, monoid, filled, axis, out, keepdims, initial, wh)
    if initial is not None:
        return r
    # An all-NaN slice gives NaN, as in NumPy (which also warns).
    any_ok = _logical_reduce(op, "or", ok, axis, None, keepdims, wh)
    return bind1("select", any_ok, r, full(r.shape, np.nan, r.dtype))


def _nan_filled(x: Tracer, fill) -> Tracer:
    ok = _not_nan(x)
    return x if ok is None else bind1("select", ok, x, full(x.shape, fill, x.dtype))


@export("nanprod")
@accepts_out("nanprod", computes_in_out_dtype=True)
def nanprod(a, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=True):
    x = _nan_filled(asarray(a), 1)
    return _arith_reduce("nanprod", "multiply", x, axis, dtype, out, keepdims, initial, where)


@export("nancumsum")
@accepts_out("nancumsum", computes_in_out_dtype=True)
def nancumsum(a, axis=None, dtype=None, out=None):
    return _cumulative("nancumsum", "add", _nan_filled(asarray(a), 0), axis, dtype, out)


@export("nancumprod")
@accepts_out("nancumprod", computes_in_out_dtype=True)
def nancumprod(a, axis=None, dtype=None, out=None):
    return _cumulative("nancumprod", "multiply", _nan_filled(asarray(a), 1), axis, dtype, out)


def _nan_var(op, a, axis, dtype, out, ddof, keepdims, wh, mean_, correction) -> Tracer:
    x = asarray(a)
    mask = _and_masks(_not_nan(x), _mask(op, wh, x.shape))
    wh = True if mask is None else mask
    return _var(op, x, axis, dtype, out, ddof, keepdims, wh, mean_, correction)


@export("nanvar")
@accepts_out("nanvar")
def nanvar(
    a,
    axis=None,
    dtype=None,
    out=None,
    ddof=0,
    keepdims=False,
    *,
    where=True,
    mean=None,
    correction=None,
):
    return _nan_var("nanvar", a, axis, dtype, out, ddof, keepdims, where, mean, correction)


@export("nanstd")
@accepts_out("nanstd")
def nanstd(
    a,
    axis=None,
    dtype=None,
    out=None,
    ddof=0,
    keepdims=False,
    *,
    where=True,
    mean=None,
    correction=None,
):
    return _nan_var("nanstd", a, axis, dtype, out, ddof, keepdims, where, mean, correction)


@export("nanmax")
@accepts_out("nanmax")
def nanmax(a, axis=None, out=None, keepdims=False, initial=None, where=True):
    return _nan_extreme("nanmax", "max", a, axis, out, keepdims, initial, where)


@export("nanmin")
@accepts_out("nanmin")
def nanmin(a, axis=None, out=None, keepdims=False, initial=None, where=True):
    return _nan_extreme("nanmin", "min", a, axis, out, keepdims, initial, where)


# --- weighted and log-domain -------------------------------------------------------------------


@export("average")
def average(a, axis=None, weights=None, returned=False, *, keepdims=False):
    x = asarray(a)
    if weights is None:
        avg = mean(x, axis=axis, keepdims=keepdims)
        scl = full(avg.shape, x.size // max(avg.size, 1), avg.dtype)
        return (avg, scl) if returned else avg
    w = asarray(weights)
    if x.dtype == _BOOL or dtypes.is_integer(x.dtype):
        rdt = dtypes.result_type(x.dtype, w.dtype, _F64)
    else:
        rdt = dtypes.result_type(x.dtype, w.dtype)
    if x.shape != w.shape:
        if axis is None:
            raise TypeError(
                f"{where('average')}: axis must be specified when shapes of a {x.shape} "
                f"and weights {w.shape} differ"
            )
        axes = tuple(
            normalize_axis("average", ax, x.ndim)
            for ax in (axis if isinstance(axis, tuple | list) else (axis,))
        )
        if w.shape != tuple(x.shape[ax] for ax in axes):
            raise ValueError(
                f"{where('average')}: shape of weights {w.shape} must be consistent with "
                f"shape of a {x.shape} along axis {axis!r}"
            )
        order = tuple(int(i) for i in np.argsort(axes))
        if order != tuple(range(len(order))):
            w = bind1("transpose", w, perm=order)
        w = reshape_to(w, tuple(s if i in axes else 1 for i, s in enumerate(x.shape)))
    shape = broadcast_shapes("average", x.shape, w.shape)
    xw = bind1(
        "multiply", to_operand("average", x, rdt, shape), to_operand("average", w, rdt, shape)
    )
    scl = sum_(w, axis=axis, dtype=rdt, keepdims=keepdims)
    avg = divide(sum_(xw, axis=axis, keepdims=keepdims), scl)
    if returned:
        return avg, broadcast_to_shape(scl, avg.shape)
    return avg


@export("logsumexp")
def logsumexp(a, axis=None, b=None, keepdims=False, return_sign=False):
    """`log(sum(b * exp(a)))` along `axis`, computed stably (as scipy.special.logsumexp)."""
    x = asarray(a)
    keys = [x.dtype] if b is None else [x.dtype, asarray(b).dtype]
    out_dtype = dtypes.result_type(*keys, float)
    if dtypes.is_complex(out_dtype):
        raise NotImplementedError(f"{where('logsumexp')}: complex inputs are not supported")
    shape = (
        x.shape
        if b is None
        else broadcast_shapes(
            "logsumexp", x.shape, np.shape(b) if not isinstance(b, Tracer) else b.shape
        )
    )
    acc = _accumulator(out_dtype)
    x = to_operand("logsumexp", x, acc, shape)
    axes = reduction_axes("logsumexp", axis, len(shape))
    m = reduce_raw(x, axes, "max")
    m = bind1("select", bind1("is_finite", m), m, full(m.shape, 0, acc))
    e = bind1("exp", bind1("subtract", x, _expand(m, axes, shape)))
    if b is not None:
        e = bind1("multiply", e, to_operand("logsumexp", b, acc, shape))
    s = reduce_raw(e, axes, "add")
    sign = None
    if return_sign:
        sign = bind1("sign", s)
        s = bind1("abs", s)
    r = cast(bind1("add", bind1("log", s), m), out_dtype)
    r = _keep(r, axes, shape, keepdims)
    if return_sign:
        return r, _keep(cast(sign, out_dtype), axes, shape, keepdims)
    return r
