"""Transforms, windows and convolutions: the rules of `stablehlo.convolution`,
`stablehlo.reduce_window` and `stablehlo.select_and_scatter`.

- A convolution is bilinear: its tangent is one convolution per operand tangent (the
  linear primitives `convolution_lhs` and `convolution_rhs`), and the transpose of each
  is another convolution, JAX's rules: for the input, the cotangent convolved with the
  reversed kernel (window strides become input dilation, the groups move to the kernel's
  input features); for the kernel, the input convolved with the cotangent (feature groups
  become batch groups and back). Batching folds the batch dimension into the input's
  batch, the kernel's output features, or, when both are batched, into feature groups.
- A window sum is linear (`reduce_window_sum`); its transpose pads the cotangent by the
  strides and sums windows of it.
- A window max or min has the tangent of the element each window chose: a reduce_window
  over (value, tangent) pairs that keeps the pair whose value the window selects
  (`select_gather`). Its transpose adds each cotangent to the element its window chose,
  which is `stablehlo.select_and_scatter`; the tangent of a select_and_scatter is
  another (it is linear in its source and init), and its transpose a `select_gather`, so
  the family is closed under every order of differentiation. A reduce_window of such
  pairs (what forward mode emits, aotkit's or JAX's) is differentiated the same way.
- A window product (cumprod) is exact with zeros: per window, the product of its
  nonzero elements and the count of its zeros give the tangent with no division by zero.

Window max/min in reverse mode with window dilation (select_and_scatter has none), window
products from an init with a tangent, regions other than these and scatters that do not
add are `TransformError`s that name the op.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np
from jaxlib.mlir import ir
from jaxlib.mlir.dialects import stablehlo

from aotkit import dtypes, modules
from aotkit.tracing import core as tracer_core
from aotkit.tracing.core import Tracer
from aotkit.tracing.nn import conv_dimension_numbers_attr
from aotkit.transforms import _hlo as H
from aotkit.transforms import _ir
from aotkit.transforms import linear as L
from aotkit.transforms.batching import defbatch
from aotkit.transforms.core import Linear, Tape, TransformError, instantiate, op_site, replay
from aotkit.transforms.jvp import _balanced_eq, defjvp


def _prim(name, linear, emit, transpose, aval) -> Linear:
    prim = Linear(name, tuple(linear), emit, transpose, aval)
    L.LINEAR[name] = prim
    return prim


def _dilate(size: int, factor: int) -> int:
    return 0 if size == 0 else (size - 1) * factor + 1


def _window_out(padded: int, window: int, stride: int) -> int:
    """StableHLO's count of windows of `window` (dilated) elements, `stride` apart."""
    return (padded - window) // stride + 1 if padded >= window and padded > 0 else 0


def _i64(v: int) -> ir.IntegerAttr:
    return ir.IntegerAttr.get(ir.IntegerType.get_signless(64), v)


def _axis_into(x: Tracer, src: int, dst: int) -> Tracer:
    """x with dimension `src` merged into `dst` (numbered without `src`) as its major part
    (JAX's `_reshape_axis_into`)."""
    perm = [d for d in range(x.ndim) if d != src]
    perm.insert(dst, src)
    shape = [x.shape[d] for d in range(x.ndim) if d != src]
    shape[dst] *= x.shape[src]
    return H.reshape(H.transpose(x, perm), shape)


def _axis_out_of(x: Tracer, src: int, major: int) -> Tracer:
    """x with dimension `src` split in two, the first of size `major`."""
    shape = list(x.shape)
    shape[src : src + 1] = [major, shape[src] // major]
    return H.reshape(x, shape)


# --- convolutions: parameters and building -------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ConvParams:
    """A convolution's parameters. The specs are JAX's `ConvDimensionNumbers`: the input's
    and output's (batch, feature, spatial...) dimensions and the kernel's (output feature,
    input feature, spatial...) ones."""

    lhs_spec: tuple[int, ...]
    rhs_spec: tuple[int, ...]
    out_spec: tuple[int, ...]
    strides: tuple[int, ...]
    padding: tuple[tuple[int, int], ...]
    lhs_dilation: tuple[int, ...]
    rhs_dilation: tuple[int, ...]
    feature_groups: int = 1
    batch_groups: int = 1
    precision: ir.Attribute | None = None

    def shape(self, lhs_shape, rhs_shape) -> tuple[int, ...]:
        spatial = [
            _window_out(_dilate(lhs_shape[i], ld) + lo + hi, _dilate(rhs_shape[k], rd), s)
            for i, k, s, (lo, hi), ld, rd in zip(
                self.lhs_spec[2:],
                self.rhs_spec[2:],
                self.strides,
                self.padding,
                self.lhs_dilation,
                self.rhs_dilation,
                strict=True,
            )
        ]
        canonical = [
            lhs_shape[self.lhs_spec[0]] // self.batch_groups,
            rhs_shape[self.rhs_spec[0]],
            *spatial,
        ]
        out = [0] * len(canonical)
        for d, n in zip(self.out_spec, canonical, strict=True):
            out[d] = n
        return tuple(out)


def conv_params(op) -> tuple[ConvParams, tuple[int, ...]]:
    """The op's parameters, and the kernel dimensions its `window_reversal` reverses."""
    d = _ir.conv_dims(op)
    n = len(d.in_spatial)
    ones = (1,) * n
    reversal = _ir.bools(op, "window_reversal", n)
    params = ConvParams(
        (d.in_batch, d.in_feature, *d.in_spatial),
        (d.kernel_out, d.kernel_in, *d.kernel_spatial),
        (d.out_batch, d.out_feature, *d.out_spatial),
        _ir.i64s(op, "window_strides", ones),
        _ir.padding_pairs(op, "padding", n),
        _ir.i64s(op, "lhs_dilation", ones),
        _ir.i64s(op, "rhs_dilation", ones),
        _ir.int_attr(op, "feature_group_count", 1),
        _ir.int_attr(op, "batch_group_count", 1),
        _ir.attr(op, "precision_config") if _ir.has(op, "precision_config") else None,
    )
    return params, tuple(k for k, r in zip(d.kernel_spatial, reversal, strict=True) if r)


def convolution(lhs: Tracer, rhs: Tracer, p: ConvParams, dtype) -> Tracer:
    attributes = {
        "dimension_numbers": conv_dimension_numbers_attr(p.lhs_spec, p.rhs_spec, p.out_spec),
        "feature_group_count": _i64(p.feature_groups),
        "batch_group_count": _i64(p.batch_groups),
    }
    if p.strides:
        # With no spatial dimension the window attributes are left out, as the spec allows.
        attributes["window_strides"] = H.i64_array(p.strides)
        attributes["padding"] = H.i64_elements(p.padding)
        attributes["lhs_dilation"] = H.i64_array(p.lhs_dilation)
        attributes["rhs_dilation"] = H.i64_array(p.rhs_dilation)
    if p.precision is not None:
        attributes["precision_config"] = p.precision
    shape = p.shape(lhs.shape, rhs.shape)
    op = H.create("stablehlo.convolution", [lhs, rhs], [(shape, np.dtype(dtype))], attributes)
    return H.wrap(op.results[0])


# --- convolutions: the linear primitives and their transposes ------------------------------------


def _swap(spec: tuple[int, ...]) -> tuple[int, ...]:
    return (spec[1], spec[0], *spec[2:])


def _spatial(shape, spec) -> tuple[int, ...]:
    return tuple(shape[d] for d in spec[2:])


def _vjp_lhs_padding(in_shape, window, strides, out_shape, padding, lhs_dil, rhs_dil):
    """The padding of the convolution that carries an output's cotangent back to the
    input (or a window sum's back to its operand)."""
    pads = []
    for n, k, s, m, (lo, _), ld, rd in zip(
        in_shape, window, strides, out_shape, padding, lhs_dil, rhs_dil, strict=True
    ):
        before = _dilate(k, rd) - lo - 1
        after = _dilate(n, ld) + _dilate(k, rd) - 1 - _dilate(m, s) - before
        pads.append((before, after))
    return tuple(pads)


def _vjp_rhs_padding(in_shape, window, strides, out_shape, padding, lhs_dil, rhs_dil):
    """The padding of the convolution of the input with an output's cotangent that gives
    the kernel's cotangent."""
    pads = []
    for n, k, s, m, (lo, _), ld, rd in zip(
        in_shape, window, strides, out_shape, padding, lhs_dil, rhs_dil, strict=True
    ):
        hi = _dilate(m, s) - _dilate(n, ld) + _dilate(k, rd) - lo - 1
        pads.append((lo, hi))
    return tuple(pads)


def _conv_transpose_lhs(g, t, rhs, *, p: ConvParams, dtype):
    ls, rs, os_ = p.lhs_spec, p.rhs_spec, p.out_spec
    if 0 in g.shape or 0 in t.shape:
        return [H.zeros(t.shape, g.dtype)]
    groups = max(p.feature_groups, p.batch_groups)
    kernel = rhs
    if groups > 1:
        # The groups move from the kernel's output features to its input features, which
        # the transposed convolution reads as its output features.
        kernel = _axis_into(_axis_out_of(kernel, rs[0], groups), rs[0], rs[1])
    kernel = H.reverse(kernel, rs[2:])
    if kernel.dtype != g.dtype:
        kernel = H.convert(kernel, g.dtype)
    q = ConvParams(
        os_,
        _swap(rs),
        ls,
        strides=p.lhs_dilation,
        padding=_vjp_lhs_padding(
            _spatial(t.shape, ls),
            _spatial(rhs.shape, rs),
            p.strides,
            _spatial(g.shape, os_),
            p.padding,
            p.lhs_dilation,
            p.rhs_dilation,
        ),
        lhs_dilation=p.strides,
        rhs_dilation=p.rhs_dilation,
        feature_groups=groups,
        precision=p.precision,
    )
    out = convolution(g, kernel, q, g.dtype)
    if p.batch_groups > 1:
        # Each group's cotangent is its part of the input batch.
        out = _axis_into(_axis_out_of(out, ls[1], p.batch_groups), ls[1], ls[0])
    return [out]


def _conv_transpose_rhs(g, lhs, t, *, p: ConvParams, dtype):
    ls, rs, os_ = p.lhs_spec, p.rhs_spec, p.out_spec
    if 0 in g.shape or 0 in t.shape:
        return [H.zeros(t.shape, g.dtype)]
    if p.batch_groups > 1:
        feature_groups, batch_groups = p.batch_groups, 1
    else:
        feature_groups, batch_groups = 1, p.feature_groups
    q = ConvParams(
        _swap(ls),
        _swap(os_),
        _swap(rs),
        strides=p.rhs_dilation,
        padding=_vjp_rhs_padding(
            _spatial(lhs.shape, ls),
            _spatial(t.shape, rs),
            p.strides,
            _spatial(g.shape, os_),
            p.padding,
            p.lhs_dilation,
            p.rhs_dilation,
        ),
        lhs_dilation=p.lhs_dilation,
        rhs_dilation=p.strides,
        feature_groups=feature_groups,
        batch_groups=batch_groups,
        precision=p.precision,
    )
    if lhs.dtype != g.dtype:
        lhs = H.convert(lhs, g.dtype)
    return [convolution(lhs, g, q, g.dtype)]


def _conv_aval(a, b, *, p: ConvParams, dtype):
    return (p.shape(a[0], b[0]), np.dtype(dtype))


CONV_LHS = _prim(
    "convolution_lhs",
    (0,),
    lambda t, rhs, *, p, dtype: convolution(t, rhs, p, dtype),
    _conv_transpose_lhs,
    _conv_aval,
)
CONV_RHS = _prim(
    "convolution_rhs",
    (1,),
    lambda lhs, t, *, p, dtype: convolution(lhs, t, p, dtype),
    _conv_transpose_rhs,
    _conv_aval,
)


@defjvp("stablehlo.convolution")
def _convolution_jvp(ctx, primals, tangents):
    (lhs, rhs), (t_lhs, t_rhs) = primals, tangents
    p, reversed_dims = conv_params(ctx.op)
    (out,) = ctx.replay(primals)
    T = ctx.T
    if reversed_dims:
        # A reversed window is a reversed kernel: the tangents are ordinary convolutions.
        rhs = H.reverse(rhs, reversed_dims)
        t_rhs = L.reverse(T, t_rhs, reversed_dims)
    params = {"p": p, "dtype": out.dtype}
    t = L.add(T, T.bind(CONV_LHS, [t_lhs, rhs], params), T.bind(CONV_RHS, [lhs, t_rhs], params))
    return [out], [t]


@defbatch("stablehlo.convolution")
def _convolution_batch(ctx, values, batched):
    """JAX's batching rule, with the batch dimension first in and out."""
    (lhs, rhs), (bl, br) = values, batched
    p, reversed_dims = conv_params(ctx.op)
    if reversed_dims:
        rhs = H.reverse(rhs, [d + 1 for d in reversed_dims] if br else reversed_dims)
    ((_, dtype),) = ctx.out_avals()
    size = ctx.size
    ls, rs, os_ = p.lhs_spec, p.rhs_spec, p.out_spec
    if bl and br:
        # Each batch element is a group of its own: of the features, or of the batch
        # when the convolution already groups the batch.
        if p.batch_groups > 1:
            lhs = _axis_into(lhs, 0, ls[0])
            q = dataclasses.replace(p, batch_groups=p.batch_groups * size)
        else:
            lhs = _axis_into(lhs, 0, ls[1])
            q = dataclasses.replace(p, feature_groups=p.feature_groups * size)
        out = convolution(lhs, _axis_into(rhs, 0, rs[0]), q, dtype)
        return [H.moveaxis(_axis_out_of(out, os_[1], size), os_[1], 0)], [True]
    if bl:
        if p.batch_groups == 1:
            out = convolution(_axis_into(lhs, 0, ls[0]), rhs, p, dtype)
        else:
            # The batch goes inside each batch group: (groups, batch, per group).
            lhs = _axis_out_of(lhs, ls[0] + 1, p.batch_groups)
            lhs = _axis_into(lhs, 0, ls[0] + 1)
            lhs = _axis_into(lhs, ls[0], ls[0])
            out = convolution(lhs, rhs, p, dtype)
        return [H.moveaxis(_axis_out_of(out, os_[0], size), os_[0], 0)], [True]
    groups = max(p.feature_groups, p.batch_groups)
    if groups == 1:
        out = convolution(lhs, _axis_into(rhs, 0, rs[0]), p, dtype)
        return [H.moveaxis(_axis_out_of(out, os_[1], size), os_[1], 0)], [True]
    # The batch goes inside each group of output features, and comes out of the output's.
    rhs = _axis_out_of(rhs, rs[0] + 1, groups)
    rhs = _axis_into(rhs, 0, rs[0] + 1)
    rhs = _axis_into(rhs, rs[0], rs[0])
    out = convolution(lhs, rhs, p, dtype)
    out = _axis_out_of(_axis_out_of(out, os_[1], groups), os_[1] + 1, size)
    out = _axis_into(out, os_[1], os_[1] + 1)
    return [H.moveaxis(out, os_[1], 0)], [True]


# --- windows: parameters and building ------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Window:
    """A window op's window: dimensions, strides, (low, high) padding, base (operand) and
    window dilations."""

    dims: tuple[int, ...]
    strides: tuple[int, ...]
    padding: tuple[tuple[int, int], ...]
    base: tuple[int, ...]
    dilation: tuple[int, ...]

    def shape(self, operand_shape) -> tuple[int, ...]:
        return tuple(
            _window_out(_dilate(n, b) + lo + hi, _dilate(k, d), s)
            for n, k, s, (lo, hi), b, d in zip(
                operand_shape,
                self.dims,
                self.strides,
                self.padding,
                self.base,
                self.dilation,
                strict=True,
            )
        )

    def attributes(self) -> dict:
        return {
            "window_dimensions": H.i64_array(self.dims),
            "window_strides": H.i64_array(self.strides),
            "base_dilations": H.i64_array(self.base),
            "window_dilations": H.i64_array(self.dilation),
            "padding": H.i64_elements(self.padding or np.zeros((0, 2), np.int64)),
        }


def window_of(op) -> Window:
    rank = len(_ir.aval(op.operation.operands[0])[0])
    ones = (1,) * rank
    return Window(
        _ir.i64s(op, "window_dimensions"),
        _ir.i64s(op, "window_strides", ones),
        _ir.padding_pairs(op, "padding", rank),
        _ir.i64s(op, "base_dilations", ones),
        _ir.i64s(op, "window_dilations", ones),
    )


def _reduce(x: Tracer, init, kind: str, w: Window) -> Tracer:
    return H.reduce_window(x, init, kind, w.dims, w.strides, w.base, w.dilation, w.padding)


def _identity(direction: str, dtype) -> float | int:
    """The init no element loses to under `direction` (GE, GT: a max; LE, LT: a min)."""
    dtype = np.dtype(dtype)
    return dtypes.lowest(dtype) if direction in ("GE", "GT") else dtypes.highest(dtype)


def _select_body(block: ir.Block, direction: str, n: int) -> None:
    """`(a..., b...) -> a if a[0] <direction> b[0] else b`: a window keeps the tuple of
    its selected key (the first of equal keys, for GE and LE)."""
    with ir.InsertionPoint(block), tracer_core.user_location():
        a, b = list(block.arguments[:n]), list(block.arguments[n:])
        keep = stablehlo.compare(a[0], b[0], stablehlo.ComparisonDirectionAttr.get(direction))
        stablehlo.ReturnOp([stablehlo.select(keep, x, y) for x, y in zip(a, b, strict=True)])


def select_pairs(operands: list[Tracer], inits: list[Tracer], direction: str, w: Window):
    """A reduce_window of tuples (key, payloads...): per window, the tuple whose key
    `direction` selects."""
    shape = w.shape(operands[0].shape)
    op = H.create(
        "stablehlo.reduce_window",
        operands + inits,
        [(shape, x.dtype) for x in operands],
        w.attributes(),
        regions=1,
    )
    types = [dtypes.tensor_type((), x.dtype) for x in operands]
    _select_body(op.regions[0].blocks.append(*types, *types), direction, len(operands))
    return H.results(op)


def select_and_scatter_add(x: Tracer, source: Tracer, direction: str, w: Window) -> Tracer:
    """Each element of `source` added to the element of x its window selects. The padding
    goes into x first, as the identity of the selection: XLA's CPU select_and_scatter
    crashes on padded windows (JAX pads first too)."""
    lo, hi = [a for a, _ in w.padding], [b for _, b in w.padding]
    padded = H.pad(x, H.scalar(_identity(direction, x.dtype), x.dtype), lo, hi)
    rank = x.ndim
    op = H.create(
        "stablehlo.select_and_scatter",
        [padded, source, H.scalar(0, source.dtype)],
        [(padded.shape, source.dtype)],
        {
            "window_dimensions": H.i64_array(w.dims),
            "window_strides": H.i64_array(w.strides),
            "padding": H.i64_elements(((0, 0),) * rank or np.zeros((0, 2), np.int64)),
        },
        regions=2,
    )
    t = dtypes.tensor_type((), x.dtype)
    block = op.regions[0].blocks.append(t, t)
    with ir.InsertionPoint(block), tracer_core.user_location():
        a, b = block.arguments
        stablehlo.ReturnOp(
            [stablehlo.compare(a, b, stablehlo.ComparisonDirectionAttr.get(direction))]
        )
    H.combiner_body(op.regions[1], source.dtype, "add")
    out = H.wrap(op.results[0])
    return H.pad(out, H.scalar(0, out.dtype), [-a for a in lo], [-b for b in hi])


# --- windows: the linear primitives and their transposes -----------------------------------------


def _window_sum_transpose(g, t, *, w: Window):
    if 0 in g.shape or 0 in t.shape:
        return [H.zeros(t.shape, g.dtype)]
    pads = _vjp_lhs_padding(t.shape, w.dims, w.strides, g.shape, w.padding, w.base, w.dilation)
    spread = H.pad(
        g,
        H.scalar(0, g.dtype),
        [lo for lo, _ in pads],
        [hi for _, hi in pads],
        [s - 1 for s in w.strides],
    )
    ones = (1,) * g.ndim
    sums = Window(w.dims, w.base, ((0, 0),) * g.ndim, ones, w.dilation)
    return [_reduce(spread, 0, "add", sums)]


WINDOW_SUM = _prim(
    "reduce_window_sum",
    (0,),
    lambda t, *, w: _reduce(t, 0, "add", w),
    _window_sum_transpose,
    lambda a, *, w: (w.shape(a[0]), a[1]),
)


def _select_gather_emit(t, x, *, direction, w):
    key, zero = H.scalar(_identity(direction, x.dtype), x.dtype), H.scalar(0, t.dtype)
    return select_pairs([x, t], [key, zero], direction, w)[1]


def _select_gather_transpose(g, t, x, *, direction, w: Window):
    # Window dilation is refused before a tape holds this (`_check_transposable`).
    assert all(d == 1 for d in w.dilation), w
    dilated = any(b != 1 for b in w.base)
    if dilated:
        zeros = [0] * x.ndim
        fill = H.scalar(_identity(direction, x.dtype), x.dtype)
        x = H.pad(x, fill, zeros, zeros, [b - 1 for b in w.base])
    out = select_and_scatter_add(x, g, direction, w)
    if dilated:
        out = H.slice_(out, [0] * out.ndim, out.shape, w.base)
    return [out]


SELECT_GATHER = _prim(
    "select_gather",
    (0,),
    _select_gather_emit,
    _select_gather_transpose,
    lambda a, x, *, direction, w: (w.shape(x[0]), a[1]),
)


def _select_and_scatter_emit(x, source, init, *, op):
    return replay(op, [x, source, init])[0]


def _select_and_scatter_transpose(g, x, source, init, *, op):
    dims = _ir.i64s(op, "window_dimensions")
    ones = (1,) * len(dims)
    w = Window(
        dims,
        _ir.i64s(op, "window_strides", ones),
        _ir.padding_pairs(op, "padding", len(dims)),
        ones,
        ones,
    )
    direction = modules.select_direction(op)
    key, zero = H.scalar(_identity(direction, x.dtype), x.dtype), H.scalar(0, g.dtype)
    ct_source = select_pairs([x, g], [key, zero], direction, w)[1]
    return [ct_source, H.reduce_sum(g, range(g.ndim))]


SELECT_AND_SCATTER = _prim(
    "select_and_scatter",
    (1, 2),
    _select_and_scatter_emit,
    _select_and_scatter_transpose,
    lambda x, source, init, *, op: (x[0], source[1]),
)


# --- windows: reading regions and inits ----------------------------------------------------------


def _scalar_constant(value: ir.Value):
    """The value of a scalar constant, seen through broadcasts, reshapes and converts
    (JAX broadcasts its init values); None when the value is not one."""
    while True:
        owner = value.owner
        if not isinstance(owner, ir.OpView | ir.Operation):
            return None
        name = owner.operation.name
        if name in ("stablehlo.broadcast_in_dim", "stablehlo.reshape", "stablehlo.convert"):
            value = owner.operation.operands[0]
            continue
        c = _ir.constant_of(value)
        return None if c is None or c.size != 1 else c.reshape(())[()]


def _is_identity(value: ir.Value, direction: str, dtype) -> bool:
    c = _scalar_constant(value)
    return c is not None and bool(c == _identity(direction, dtype))


def _pairs_direction(region: ir.Region, n: int) -> str | None:
    """For a reduce_window region over n-tuples that keeps, per pair of tuples, the one
    whose first element compares true (a `select_pairs` region, as aotkit's and JAX's
    forward mode emit), the comparison's direction; else None."""
    block = region.blocks[0]
    args = list(block.arguments)
    ops = list(block.operations)
    if len(args) != 2 * n or len(ops) != n + 2:
        return None
    cmp = ops[0].operation
    direction = modules.compare_direction(cmp, args[0], args[n])
    if direction is None:
        return None
    keep = cmp.results[0]
    for i, v in enumerate(ops[-1].operation.operands):
        sel = v.owner
        if not isinstance(sel, ir.OpView | ir.Operation):
            return None
        sel = sel.operation
        if sel.name != "stablehlo.select" or list(sel.operands) != [keep, args[i], args[n + i]]:
            return None
    return direction


# --- windows: the JVP rules ----------------------------------------------------------------------


def _check_transposable(ctx, w: Window) -> None:
    if isinstance(ctx.T, Tape) and any(d != 1 for d in w.dilation):
        raise TransformError(
            f"{ctx.ev.transform}: {op_site(ctx.op)} takes the max or min of windows with "
            f"window dilation {list(w.dilation)}; reverse mode scatters the cotangent with "
            "stablehlo.select_and_scatter, which has no window dilation: differentiate it in "
            "forward mode (aotkit.jvp, aotkit.jacfwd), or without window dilation"
        )


def _window_sum_jvp(ctx, w, primals, tangents, y):
    (x, _), (t, t_init) = primals, tangents
    T = ctx.T
    out = T.bind(WINDOW_SUM, [t], {"w": w})
    if t_init is not None:
        # Each window adds the init once, and once more per padded or dilated-in element.
        count = _reduce(H.zeros(x.shape, x.dtype), H.scalar(1, x.dtype), "add", w)
        out = L.add(T, out, L.mul(T, L.broadcast_in_dim(T, t_init, y.shape, ()), count))
    return out


def _window_chooser_jvp(kind, ctx, w, primals, tangents, y):
    (x, init), (t, t_init) = primals, tangents
    T = ctx.T
    direction = "GE" if kind == "max" else "LE"
    if t is not None:
        _check_transposable(ctx, w)
    chosen = T.bind(SELECT_GATHER, [t, x], {"direction": direction, "w": w})
    if t_init is None and _is_identity(ctx.op.operation.operands[1], direction, x.dtype):
        return chosen
    # y = max(z, init) for z the windows' max of the operand alone (a padded element is
    # the init either way); the init's share of the tangent is stablehlo.maximum's.
    z = _reduce(x, _identity(direction, x.dtype), kind, w)
    c = H.broadcast_in_dim(init, y.shape, ())
    out = L.mul(T, chosen, _balanced_eq(z, y, c))
    if t_init is not None:
        t_c = L.broadcast_in_dim(T, t_init, y.shape, ())
        out = L.add(T, out, L.mul(T, t_c, _balanced_eq(c, y, z)))
    return out


def _window_product_jvp(ctx, w, primals, tangents, y):
    (x, init), (t, t_init) = primals, tangents
    if t_init is not None:
        raise TransformError(
            f"{ctx.ev.transform}: {op_site(ctx.op)} multiplies windows from an init value "
            "that has a tangent; aotkit differentiates window products (cumprod) whose init "
            "is a constant: multiply by the init after the reduce_window instead"
        )
    T = ctx.T
    zero = H.compare(x, 0, "EQ")
    x_or_one = H.select(zero, H.like(x, 1), x)
    # Per window: the product of its nonzero elements (the init and padding included) and
    # its count of zeros. With no zero the tangent is that product times the window's sum
    # of t / x; with one, the product times that zero's t; with more, zero.
    nonzero = _reduce(x_or_one, init, "mul", w)
    i32 = np.dtype(np.int32)
    zeros = _reduce(H.convert(zero, i32), H.scalar(0, i32), "add", w)
    over_x = L.mul(T, t, H.select(zero, H.like(x, 0), H.reciprocal(x_or_one)))
    at_zero = L.mul(T, t, H.convert(zero, x.dtype))
    no_zero = H.select(H.compare(zeros, 0, "EQ"), nonzero, H.like(nonzero, 0))
    one_zero = H.select(H.compare(zeros, 1, "EQ"), nonzero, H.like(nonzero, 0))
    return L.add(
        T,
        L.mul(T, T.bind(WINDOW_SUM, [over_x], {"w": w}), no_zero),
        L.mul(T, T.bind(WINDOW_SUM, [at_zero], {"w": w}), one_zero),
    )


_WINDOW_RULES = {
    "add": _window_sum_jvp,
    "max": functools.partial(_window_chooser_jvp, "max"),
    "min": functools.partial(_window_chooser_jvp, "min"),
    "mul": _window_product_jvp,
}


@defjvp("stablehlo.reduce_window")
def _reduce_window_jvp(ctx, primals, tangents):
    op = ctx.op
    o = op.operation
    n = len(primals) // 2
    w = window_of(op)
    outs = ctx.replay(primals)
    if n == 1:
        rule = _WINDOW_RULES.get(_ir.combiner(o.regions[0]))
        if rule is not None:
            return outs, [rule(ctx, w, primals, tangents, outs[0])]
    else:
        direction = _pairs_direction(o.regions[0], n)
        if direction is not None:
            return outs, _select_pairs_jvp(ctx, w, direction, primals, tangents)
    raise TransformError(
        f"{ctx.ev.transform}: {op_site(op)} reduces windows of {n} operand(s) with a region "
        "aotkit has no derivative for; its rules cover window sums, products, maxima and "
        "minima of one operand, and reductions of (key, values...) tuples that keep the "
        "tuple of the greatest or least key"
    )


def _select_pairs_jvp(ctx, w, direction, primals, tangents):
    """Each result's tangent is its operand's tangent at the element the window chose."""
    op = ctx.op
    n = len(primals) // 2
    key = primals[0]
    if any(t is not None for t in tangents[n:]) or not _is_identity(
        op.operation.operands[n], direction, key.dtype
    ):
        raise TransformError(
            f"{ctx.ev.transform}: {op_site(op)} selects tuples from windows starting at an "
            "init key that some element can lose to (or an init with a tangent); aotkit "
            "differentiates such reductions from the identity of the selection (-inf for "
            "the greatest key, inf for the least)"
        )
    if any(t is not None for t in tangents[:n]):
        _check_transposable(ctx, w)
    params = {"direction": direction, "w": w}
    return [ctx.T.bind(SELECT_GATHER, [t, key], params) for t in tangents[:n]]


@defjvp("stablehlo.select_and_scatter")
def _select_and_scatter_jvp(ctx, primals, tangents):
    op = ctx.op
    (x, source, init), (_, t_source, t_init) = primals, tangents
    (out,) = ctx.replay(primals)
    if t_source is None and t_init is None:
        # The operand only chooses where the source goes: no tangent flows from it.
        return [out], [None]
    if _ir.combiner(op.operation.regions[1]) != "add":
        raise TransformError(
            f"{ctx.ev.transform}: {op_site(op)} is a select_and_scatter whose scatter region "
            "does not add; aotkit differentiates select_and_scatter that adds (the gradient "
            "of a max or min pool)"
        )
    if isinstance(ctx.T, Tape) and modules.select_direction(op) is None:
        raise TransformError(
            f"{ctx.ev.transform}: {op_site(op)} selects with a region other than one "
            "comparison (GE, GT, LE or LT) of its two arguments, which aotkit cannot "
            "transpose; differentiate it in forward mode (aotkit.jvp, aotkit.jacfwd)"
        )
    T = ctx.T
    args = [
        x,
        instantiate(T, t_source, (source.shape, source.dtype)),
        instantiate(T, t_init, (init.shape, init.dtype)),
    ]
    return [out], [T.bind(SELECT_AND_SCATTER, args, {"op": op})]
