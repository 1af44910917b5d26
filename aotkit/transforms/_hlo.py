"""Transforms, building: the StableHLO ops the rules emit, on the tracer's values.

A transform rebuilds a module inside an aotkit trace (`aotkit.tracing.trace`), so the
values it makes are the tracer's `Tracer`s and the result is an ordinary traced module.
Elementwise and layout ops go through the tracer's registry (`bind`); the ops it has no
primitive for with these parameters (general gathers and scatters, reductions with a
given combiner, windows, convolutions) are created here, with result types computed
from the operands. Every op takes the location `tracing.core.at_location` set: the
source op's.

Functions take Tracers and Python parameters and return Tracers; `like(x, c)` makes a
scalar operand of x's shape and dtype.
"""

from __future__ import annotations

import functools

import numpy as np
from jaxlib.mlir import ir
from jaxlib.mlir.dialects import stablehlo

from aotkit import _context, dtypes
from aotkit.tracing import core
from aotkit.tracing.core import Tracer, bind1, full
from aotkit.tracing.linalg import dot_dimension_numbers, dot_general_shape
from aotkit.transforms import _ir

# --- making values ---------------------------------------------------------------------------


def wrap(value: ir.Value) -> Tracer:
    """A tracer of an IR value built in the current scope."""
    shape, dtype = _ir.aval(value)
    return Tracer(value, shape, dtype, core.current_scope())


def create(
    op_name: str,
    operands: list[Tracer],
    avals: list[tuple],
    attributes: dict | None = None,
    regions: int = 0,
) -> ir.Operation:
    """Creates op `op_name` with results of `avals` at the current location. Its regions,
    when it has some, are the caller's to fill: with ops on their own arguments, or copies
    of the regions of the op it comes from (see `core.note_made`)."""
    values = [t.value for t in operands]
    op = ir.Operation.create(
        op_name,
        results=[dtypes.tensor_type(tuple(s), d) for s, d in avals],
        operands=values,
        attributes=attributes,
        regions=regions,
        loc=core.user_location(),
    )
    _made(op, values)
    return op


def _made(op: ir.Operation, values: list[ir.Value]) -> None:
    emitted = core.current_scope().emitted
    emitted.opaque = True
    if op.name.startswith("chlo."):
        emitted.chlo = True
    core.note_made(op, values)


def results(op: ir.Operation) -> list[Tracer]:
    return [wrap(r) for r in op.results]


def like(x: Tracer, value) -> Tracer:
    """`value` (a Python scalar) as an array of x's shape and dtype."""
    return full(x.shape, value, x.dtype)


def zeros(shape, dtype) -> Tracer:
    return full(tuple(shape), 0, np.dtype(dtype))


def scalar(value, dtype) -> Tracer:
    return full((), value, np.dtype(dtype))


@_context.cached
def i64_array(values: tuple[int, ...]) -> ir.DenseI64ArrayAttr:
    return ir.DenseI64ArrayAttr.get(list(values))


@_context.cached
def bool_array(values: tuple[bool, ...]) -> ir.DenseBoolArrayAttr:
    return ir.DenseBoolArrayAttr.get(list(values))


def i64_elements(rows) -> ir.DenseIntElementsAttr:
    return ir.DenseIntElementsAttr.get(np.asarray(rows, np.int64))


# --- elementwise ---------------------------------------------------------------------------


def _operand(x, ref: Tracer) -> Tracer:
    return x if isinstance(x, Tracer) else like(ref, x)


def _binary(name: str, a, b) -> Tracer:
    if not isinstance(a, Tracer):
        a = like(b, a)
    else:
        b = _operand(b, a)
    return bind1(name, a, b)


add = functools.partial(_binary, "add")
sub = functools.partial(_binary, "subtract")


def mul(a, b) -> Tracer:
    """a * b, where a real factor that is the constant 1 gives the other (the seed of a
    gradient is one: its cotangents would otherwise be products by one)."""
    if isinstance(a, Tracer) and _is_one(b, a):
        return a
    if isinstance(b, Tracer) and _is_one(a, b):
        return b
    return _binary("multiply", a, b)


def _is_one(x, other: Tracer) -> bool:
    if dtypes.is_complex(other.dtype):
        return False  # (inf + 0j) * (1 + 0j) is not inf + 0j
    if isinstance(x, Tracer):
        return x.shape == other.shape and x.dtype == other.dtype and core.splat_value(x) == 1
    return type(x) in (int, float) and x == 1  # a Python number, never an array


div = functools.partial(_binary, "divide")
maximum = functools.partial(_binary, "max")
minimum = functools.partial(_binary, "min")
power = functools.partial(_binary, "pow")
atan2 = functools.partial(_binary, "atan2")
rem = functools.partial(_binary, "rem")
logical_and = functools.partial(_binary, "and")
logical_or = functools.partial(_binary, "or")


def _unary(name: str, x: Tracer) -> Tracer:
    return bind1(name, x)


neg = functools.partial(_unary, "negate")
exp = functools.partial(_unary, "exp")
log = functools.partial(_unary, "log")
log1p = functools.partial(_unary, "log1p")
sin = functools.partial(_unary, "sin")
cos = functools.partial(_unary, "cos")
tanh = functools.partial(_unary, "tanh")
sqrt = functools.partial(_unary, "sqrt")
rsqrt = functools.partial(_unary, "rsqrt")
sign = functools.partial(_unary, "sign")
sinh = functools.partial(_unary, "sinh")
cosh = functools.partial(_unary, "cosh")
floor = functools.partial(_unary, "floor")
logical_not = functools.partial(_unary, "not")
digamma = functools.partial(_unary, "digamma")


def abs_(x: Tracer) -> Tracer:
    return bind1("abs", x)


def real(x: Tracer) -> Tracer:
    return bind1("real", x) if dtypes.is_complex(x.dtype) else x


def imag(x: Tracer) -> Tracer:
    return bind1("imag", x)


def complex_(re: Tracer, im: Tracer) -> Tracer:
    return bind1("complex", re, im)


def conj(x: Tracer) -> Tracer:
    if not dtypes.is_complex(x.dtype):
        return x
    return complex_(real(x), neg(imag(x)))


def square(x: Tracer) -> Tracer:
    return mul(x, x)


def reciprocal(x: Tracer) -> Tracer:
    return div(like(x, 1), x)


def polygamma(n: int, x: Tracer) -> Tracer:
    (out,) = create("chlo.polygamma", [like(x, n), x], [(x.shape, x.dtype)]).results
    return wrap(out)


def compare(a, b, direction: str) -> Tracer:
    if not isinstance(a, Tracer):
        a = like(b, a)
    else:
        b = _operand(b, a)
    return bind1("compare", a, b, direction=direction)


def select(pred: Tracer, a, b) -> Tracer:
    ref = a if isinstance(a, Tracer) else b
    a, b = _operand(a, ref), _operand(b, ref)
    if pred.shape != a.shape:
        pred = broadcast_in_dim(pred, a.shape, ())
    return bind1("select", pred, a, b)


def convert(x: Tracer, dtype) -> Tracer:
    dtype = np.dtype(dtype)
    if x.dtype == dtype:
        return x
    if dtypes.is_complex(x.dtype) and not dtypes.is_complex(dtype):
        x = real(x)
        if x.dtype == dtype:
            return x
    return bind1("convert", x, dtype=dtype)


def replace_zero(x: Tracer) -> Tracer:
    """x with its zeros made ones (for a division whose result is masked where x is 0)."""
    return select(compare(x, 0, "EQ"), like(x, 1), x)


# --- layout --------------------------------------------------------------------------------


def broadcast_in_dim(x: Tracer, shape, dims) -> Tracer:
    shape, dims = tuple(shape), tuple(dims)
    if x.shape == shape and dims == tuple(range(len(shape))):
        return x
    value = core.splat_value(x)
    if value is not None:
        return full(shape, value, x.dtype)
    return bind1("broadcast_in_dim", x, shape=shape, dims=dims)


def broadcast_to(x: Tracer, shape) -> Tracer:
    """x broadcast to `shape`, NumPy style (trailing dimensions aligned)."""
    shape = tuple(shape)
    return broadcast_in_dim(x, shape, range(len(shape) - x.ndim, len(shape)))


def reshape(x: Tracer, shape) -> Tracer:
    shape = tuple(shape)
    return x if x.shape == shape else bind1("reshape", x, shape=shape)


def transpose(x: Tracer, perm) -> Tracer:
    perm = tuple(perm)
    if perm == tuple(range(x.ndim)):
        return x
    return bind1("transpose", x, perm=perm)


def moveaxis(x: Tracer, src: int, dst: int) -> Tracer:
    if src == dst:
        return x
    perm = [d for d in range(x.ndim) if d != src]
    perm.insert(dst, src)
    return transpose(x, perm)


def slice_(x: Tracer, start, limit, strides=None) -> Tracer:
    start, limit = tuple(start), tuple(limit)
    strides = tuple(strides) if strides is not None else (1,) * x.ndim
    if start == (0,) * x.ndim and limit == x.shape and strides == (1,) * x.ndim:
        return x
    shape = tuple(max(0, -(-(hi - lo) // s)) for lo, hi, s in zip(start, limit, strides))
    (out,) = create(
        "stablehlo.slice",
        [x],
        [(shape, x.dtype)],
        {
            "start_indices": i64_array(start),
            "limit_indices": i64_array(limit),
            "strides": i64_array(strides),
        },
    ).results
    return wrap(out)


def pad(x: Tracer, value: Tracer, low, high, interior=None) -> Tracer:
    low, high = tuple(low), tuple(high)
    interior = tuple(interior) if interior is not None else (0,) * x.ndim
    if not any(low) and not any(high) and not any(interior):
        return x
    shape = tuple(
        lo + hi + n + max(0, n - 1) * i
        for n, lo, hi, i in zip(x.shape, low, high, interior, strict=True)
    )
    (out,) = create(
        "stablehlo.pad",
        [x, value],
        [(shape, x.dtype)],
        {
            "edge_padding_low": i64_array(low),
            "edge_padding_high": i64_array(high),
            "interior_padding": i64_array(interior),
        },
    ).results
    return wrap(out)


def concatenate(xs: list[Tracer], dim: int) -> Tracer:
    if len(xs) == 1:
        return xs[0]
    shape = list(xs[0].shape)
    shape[dim] = sum(x.shape[dim] for x in xs)
    (out,) = create(
        "stablehlo.concatenate",
        list(xs),
        [(tuple(shape), xs[0].dtype)],
        {"dimension": ir.IntegerAttr.get(ir.IntegerType.get_signless(64), dim)},
    ).results
    return wrap(out)


def reverse(x: Tracer, dims) -> Tracer:
    dims = tuple(dims)
    if not dims:
        return x
    (out,) = create(
        "stablehlo.reverse", [x], [(x.shape, x.dtype)], {"dimensions": i64_array(dims)}
    ).results
    return wrap(out)


def iota(shape, dtype, dim: int) -> Tracer:
    (out,) = create(
        "stablehlo.iota",
        [],
        [(tuple(shape), np.dtype(dtype))],
        {"iota_dimension": ir.IntegerAttr.get(ir.IntegerType.get_signless(64), dim)},
    ).results
    return wrap(out)


def dynamic_slice(x: Tracer, starts: list[Tracer], sizes) -> Tracer:
    (out,) = create(
        "stablehlo.dynamic_slice",
        [x, *starts],
        [(tuple(sizes), x.dtype)],
        {"slice_sizes": i64_array(tuple(sizes))},
    ).results
    return wrap(out)


def dynamic_update_slice(x: Tracer, update: Tracer, starts: list[Tracer]) -> Tracer:
    (out,) = create(
        "stablehlo.dynamic_update_slice", [x, update, *starts], [(x.shape, x.dtype)]
    ).results
    return wrap(out)


# --- reductions --------------------------------------------------------------------------------

_COMBINER_OPS = {
    "add": "stablehlo.add",
    "mul": "stablehlo.multiply",
    "max": "stablehlo.maximum",
    "min": "stablehlo.minimum",
    "and": "stablehlo.and",
    "or": "stablehlo.or",
}


def combiner_body(region: ir.Region, dtype, kind: str, n: int = 1) -> None:
    """Fills `region` with `(a, b) -> kind(a, b)` on scalars of `dtype` (n pairs)."""
    t = dtypes.tensor_type((), np.dtype(dtype))
    block = region.blocks.append(*([t] * (2 * n)))
    loc = core.user_location()
    name = _COMBINER_OPS[kind]
    with ir.InsertionPoint(block):
        args = block.arguments
        outs = [
            ir.Operation.create(name, results=[t], operands=[args[i], args[n + i]], loc=loc).result
            for i in range(n)
        ]
        ir.Operation.create("stablehlo.return", operands=outs, loc=loc)


def reduce(x: Tracer, init, dims, kind: str) -> Tracer:
    """`x` reduced over `dims` with the monoid `kind` ("add", "max", ...) from `init`."""
    dims = tuple(sorted(dims))
    if not dims:
        return x
    init = init if isinstance(init, Tracer) else scalar(init, x.dtype)
    shape = tuple(n for d, n in enumerate(x.shape) if d not in dims)

    def build(values):
        op = ir.Operation.create(
            "stablehlo.reduce",
            results=[dtypes.tensor_type(shape, x.dtype)],
            operands=values,
            attributes={"dimensions": i64_array(dims)},
            regions=1,
        )
        combiner_body(op.regions[0], x.dtype, kind)
        return op

    values = [x.value, init.value]
    key = ("reduce", x.shape, x.dtype, dims, kind)
    op = core.copy_of_template(key, build, values, core.user_location())
    _made(op, values)
    return wrap(op.result)


def reduce_sum(x: Tracer, dims) -> Tracer:
    return reduce(x, 0, dims, "add")


# --- products --------------------------------------------------------------------------------


def dot_shape(a: tuple[int, ...], b: tuple[int, ...], contract, batch) -> tuple[int, ...]:
    """The shape of `dot_general(a, b)` (operand shapes, dimension tuples as `dot_general`
    takes them): batch, a's free, b's free; computed once per shapes and dimensions."""
    (ac, bc), (ab, bb) = contract, batch
    return dot_general_shape(a, b, tuple(ab), tuple(bb), tuple(ac), tuple(bc))


def dot_general(
    a: Tracer,
    b: Tracer,
    contract: tuple[tuple[int, ...], tuple[int, ...]],
    batch: tuple[tuple[int, ...], tuple[int, ...]] = ((), ()),
    *,
    precision: ir.Attribute | None = None,
    dtype=None,
) -> Tracer:
    """stablehlo.dot_general: the result's dims are batch, a's free, b's free."""
    (ac, bc), (ab, bb) = contract, batch
    ab, bb, ac, bc = tuple(ab), tuple(bb), tuple(ac), tuple(bc)
    shape = dot_shape(a.shape, b.shape, (ac, bc), (ab, bb))
    attributes = {"dot_dimension_numbers": dot_dimension_numbers(ab, bb, ac, bc)}
    if precision is not None:
        attributes["precision_config"] = precision
    (out,) = create(
        "stablehlo.dot_general",
        [a, b],
        [(shape, np.dtype(dtype) if dtype is not None else a.dtype)],
        attributes,
    ).results
    return wrap(out)


# --- gathers and scatters ----------------------------------------------------------------------


def gather(x: Tracer, idx: Tracer, dims: _ir.GatherDims, slice_sizes, *, sorted_=False) -> Tracer:
    """stablehlo.gather; the result shape from the dimension numbers (StableHLO's rule)."""
    slice_sizes = tuple(slice_sizes)
    batch_shape = [n for i, n in enumerate(idx.shape) if i != dims.index_vector_dim]
    offsets = [
        n
        for i, n in enumerate(slice_sizes)
        if i not in dims.collapsed_slice_dims and i not in dims.operand_batching_dims
    ]
    rank = len(batch_shape) + len(offsets)
    shape, b, o = [], iter(batch_shape), iter(offsets)
    for d in range(rank):
        shape.append(next(o) if d in dims.offset_dims else next(b))
    attributes = {
        "dimension_numbers": stablehlo.GatherDimensionNumbers.get(
            list(dims.offset_dims),
            list(dims.collapsed_slice_dims),
            list(dims.operand_batching_dims),
            list(dims.start_indices_batching_dims),
            list(dims.start_index_map),
            dims.index_vector_dim,
        ),
        "slice_sizes": i64_array(slice_sizes),
        "indices_are_sorted": ir.BoolAttr.get(sorted_),
    }
    (out,) = create("stablehlo.gather", [x, idx], [(tuple(shape), x.dtype)], attributes).results
    return wrap(out)


def scatter_dimension_numbers(dims):
    """The `#stablehlo.scatter<...>` attribute of a scatter dimension numbers record."""
    return stablehlo.ScatterDimensionNumbers.get(
        list(dims.update_window_dims),
        list(dims.inserted_window_dims),
        list(dims.input_batching_dims),
        list(dims.scatter_indices_batching_dims),
        list(dims.scatter_dims_to_operand_dims),
        dims.index_vector_dim,
    )


def scatter(
    x: Tracer,
    idx: Tracer,
    updates: Tracer,
    dims: _ir.ScatterDims,
    kind: str = "add",
    *,
    sorted_=False,
    unique=False,
) -> Tracer:
    """stablehlo.scatter of `updates` into `x` combined with `kind` ("add" or "replace")."""
    attributes = {
        "scatter_dimension_numbers": scatter_dimension_numbers(dims),
        "indices_are_sorted": ir.BoolAttr.get(sorted_),
        "unique_indices": ir.BoolAttr.get(unique),
    }
    op = create("stablehlo.scatter", [x, idx, updates], [(x.shape, x.dtype)], attributes, 1)
    if kind == "replace":
        t = dtypes.tensor_type((), x.dtype)
        block = op.regions[0].blocks.append(t, t)
        with ir.InsertionPoint(block), core.user_location():
            stablehlo.ReturnOp([block.arguments[1]])
    else:
        combiner_body(op.regions[0], x.dtype, kind)
    return wrap(op.results[0])


def gather_dims_of_scatter(d: _ir.ScatterDims) -> _ir.GatherDims:
    """The gather that reads, for each update element, the operand element a scatter with
    `d` writes it to."""
    return _ir.GatherDims(
        offset_dims=d.update_window_dims,
        collapsed_slice_dims=d.inserted_window_dims,
        operand_batching_dims=d.input_batching_dims,
        start_indices_batching_dims=d.scatter_indices_batching_dims,
        start_index_map=d.scatter_dims_to_operand_dims,
        index_vector_dim=d.index_vector_dim,
    )


def scatter_dims_of_gather(d: _ir.GatherDims) -> _ir.ScatterDims:
    """The scatter that writes each gathered element back where a gather with `d` read it."""
    return _ir.ScatterDims(
        update_window_dims=d.offset_dims,
        inserted_window_dims=d.collapsed_slice_dims,
        input_batching_dims=d.operand_batching_dims,
        scatter_indices_batching_dims=d.start_indices_batching_dims,
        scatter_dims_to_operand_dims=d.start_index_map,
        index_vector_dim=d.index_vector_dim,
    )


def scatter_slice_sizes(operand_shape, updates_shape, d: _ir.ScatterDims) -> tuple[int, ...]:
    """The slice sizes of the gather `gather_dims_of_scatter(d)`: the update window's
    extent in each operand dimension (1 where a dimension is inserted or batched)."""
    window = iter(updates_shape[i] for i in d.update_window_dims)
    return tuple(
        1 if i in d.inserted_window_dims or i in d.input_batching_dims else next(window)
        for i in range(len(operand_shape))
    )


# --- windows and convolutions --------------------------------------------------------------


def reduce_window(
    x: Tracer,
    init,
    kind: str,
    window,
    strides=None,
    base_dilation=None,
    window_dilation=None,
    padding=None,
) -> Tracer:
    """stablehlo.reduce_window with the monoid `kind`."""
    n = x.ndim
    window = tuple(window)
    strides = tuple(strides or (1,) * n)
    base_dilation = tuple(base_dilation or (1,) * n)
    window_dilation = tuple(window_dilation or (1,) * n)
    padding = tuple(tuple(p) for p in (padding or ((0, 0),) * n))
    shape = []
    for d in range(n):
        size = (x.shape[d] - 1) * base_dilation[d] + 1 if x.shape[d] else 0
        size += padding[d][0] + padding[d][1]
        span = (window[d] - 1) * window_dilation[d] + 1
        shape.append(max(0, (size - span) // strides[d] + 1) if size >= span else 0)
    init = init if isinstance(init, Tracer) else scalar(init, x.dtype)
    op = create(
        "stablehlo.reduce_window",
        [x, init],
        [(tuple(shape), x.dtype)],
        {
            "window_dimensions": i64_array(window),
            "window_strides": i64_array(strides),
            "base_dilations": i64_array(base_dilation),
            "window_dilations": i64_array(window_dilation),
            "padding": i64_elements(padding),
        },
        regions=1,
    )
    combiner_body(op.regions[0], x.dtype, kind)
    return wrap(op.results[0])


def full_like_aval(aval, value) -> Tracer:
    """`value` as an array of `aval` = (shape, dtype)."""
    return full(tuple(aval[0]), value, np.dtype(aval[1]))
