"""Trace stage, windowed and keyed ops under `aotkit.nn`, `aotkit.random` and `aotkit.lax`.

Primitives: `convolution` (one `stablehlo.convolution`), `reduce_window` (one
`stablehlo.reduce_window` whose body is a single binary op), `sort_key_val` (one stable
`stablehlo.sort` ordered by its first operand) and `erf_inv` (`chlo.erf_inv`, expanded
by the default pipeline's CHLO legalization, so every backend runs the same polynomial).

The lax-level functions here take JAX's arguments and defaults
(`jax.lax.conv_general_dilated`, `conv_transpose`, `reduce_window`): padding "SAME",
"SAME_LOWER", "VALID" or explicit (low, high) pairs, dimension numbers as three layout
strings (`("NHWC", "HWIO", "NHWC")`) or three permutations, and output shapes from the
StableHLO spec's formulas. Operands of different dtypes are promoted as NumPy would
(`jax.lax` refuses them).
"""

from __future__ import annotations

import numpy as np
from jaxlib.mlir import ir
from jaxlib.mlir.dialects import stablehlo

from aotkit import dtypes
from aotkit.symbolic import algebra
from aotkit.symbolic.algebra import Dim
from aotkit.tracing.core import (
    RuleContext,
    Tracer,
    bind,
    bind1,
    emit,
    full,
    precision_attr,
    register,
    register_direct,
    where,
)
from aotkit.tracing.core import precision as precision_pair
from aotkit.tracing.elementwise import asarray
from aotkit.tracing.hlo import cast, normalize_axis, reverse, to_operand
from aotkit.tracing.reduction import _combine, _identity

_BOOL = np.dtype(np.bool_)

# --- primitives -------------------------------------------------------------------------------


def _dilate(size: int, factor: int) -> int:
    if isinstance(size, Dim):  # symbolic (issue 25)
        return size if factor == 1 else algebra.dim_max(0, (size - 1) * factor + 1)
    return 0 if size == 0 else (size - 1) * factor + 1


def _window_out(size: int, window: int, stride: int) -> int:
    """The StableHLO spec's output size of a window over a padded, dilated dimension."""
    if isinstance(size, Dim) or isinstance(window, Dim):  # symbolic (issue 25)
        return algebra.dim_max(0, (size - window) // stride + 1)
    if size <= 0 or window > size:
        return 0
    return (size - window) // stride + 1


def _conv_shape(
    lhs, rhs, *, strides, padding, lhs_dilation, rhs_dilation, dnums, groups, precision, dtype
):
    lhs_perm, rhs_perm, out_perm = dnums
    lhs_shape = [lhs[0][i] for i in lhs_perm]
    rhs_shape = [rhs[0][i] for i in rhs_perm]
    spatial = [
        _window_out(
            _dilate(lhs_shape[2 + i], lhs_dilation[i]) + lo + hi,
            _dilate(rhs_shape[2 + i], rhs_dilation[i]),
            strides[i],
        )
        for i, (lo, hi) in enumerate(padding)
    ]
    canonical = [lhs_shape[0] // groups[1], rhs_shape[0], *spatial]
    out = [0] * len(canonical)
    for d, size in zip(out_perm, canonical, strict=True):
        out[d] = size
    return [(tuple(out), dtype)]


def _i64(values) -> ir.DenseI64ArrayAttr:
    return ir.DenseI64ArrayAttr.get([int(v) for v in values])


def _pairs(padding) -> ir.DenseIntElementsAttr:
    return ir.DenseIntElementsAttr.get(np.asarray(padding, np.int64).reshape(len(padding), 2))


def conv_dimension_numbers_attr(lhs_perm, rhs_perm, out_perm):
    """The `#stablehlo.conv<...>` attribute of JAX's permutations: (batch, feature, spatial...)
    of the input and output, (output feature, input feature, spatial...) of the kernel."""
    return stablehlo.ConvDimensionNumbers.get(
        input_batch_dimension=lhs_perm[0],
        input_feature_dimension=lhs_perm[1],
        input_spatial_dimensions=list(lhs_perm[2:]),
        kernel_input_feature_dimension=rhs_perm[1],
        kernel_output_feature_dimension=rhs_perm[0],
        kernel_spatial_dimensions=list(rhs_perm[2:]),
        output_batch_dimension=out_perm[0],
        output_feature_dimension=out_perm[1],
        output_spatial_dimensions=list(out_perm[2:]),
    )


@register("convolution", shape=_conv_shape)
def _lower_convolution(
    ctx: RuleContext,
    lhs,
    rhs,
    *,
    strides,
    padding,
    lhs_dilation,
    rhs_dilation,
    dnums,
    groups,
    precision,
    dtype,
):
    i64 = ir.IntegerType.get_signless(64)
    attrs = {
        "dimension_numbers": conv_dimension_numbers_attr(*dnums),
        "feature_group_count": ir.IntegerAttr.get(i64, groups[0]),
        "batch_group_count": ir.IntegerAttr.get(i64, groups[1]),
        "precision_config": precision_attr(precision),
    }
    if strides:
        # Zero spatial dimensions: the window attributes are left out, as the spec allows.
        attrs.update(
            window_strides=_i64(strides),
            padding=_pairs(padding),
            lhs_dilation=_i64(lhs_dilation),
            rhs_dilation=_i64(rhs_dilation),
        )
    return emit(ctx, "stablehlo.convolution", lhs, rhs, **attrs)


def _reduce_window_shape(
    x, init, *, window, strides, base_dilation, window_dilation, padding, monoid
):
    shape = tuple(
        _window_out(
            _dilate(size, base_dilation[i]) + padding[i][0] + padding[i][1],
            _dilate(window[i], window_dilation[i]),
            strides[i],
        )
        for i, size in enumerate(x[0])
    )
    return [(shape, x[1])]


_MONOID_OPS = {
    "add": stablehlo.add,
    "max": stablehlo.maximum,
    "min": stablehlo.minimum,
    "multiply": stablehlo.multiply,
    "and": stablehlo.and_,
    "or": stablehlo.or_,
}


@register("reduce_window", shape=_reduce_window_shape)
def _lower_reduce_window(
    ctx: RuleContext, x, init, *, window, strides, base_dilation, window_dilation, padding, monoid
):
    op = stablehlo.ReduceWindowOp(
        [ctx.out_type()],
        [x],
        [init],
        list(window),
        window_strides=list(strides),
        base_dilations=list(base_dilation),
        window_dilations=list(window_dilation),
        padding=_pairs(padding) if padding else None,
    )
    scalar = dtypes.tensor_type((), ctx.avals_in[0][1])
    block = op.regions[0].blocks.append(scalar, scalar)
    with ir.InsertionPoint(block):
        stablehlo.return_([_MONOID_OPS[monoid](*block.arguments)])
    return list(op.results)


@register("sort_key_val", shape=lambda *avals, dimension: list(avals))
def _lower_sort_key_val(ctx: RuleContext, *operands, dimension):
    op = stablehlo.SortOp(
        [ctx.out_type(i) for i in range(len(operands))],
        list(operands),
        dimension=dimension,
        is_stable=True,
    )
    scalars = [dtypes.tensor_type((), a[1]) for a in ctx.avals_in for _ in (0, 1)]
    block = op.regions[0].blocks.append(*scalars)
    with ir.InsertionPoint(block):
        lhs, rhs = block.arguments[0], block.arguments[1]
        stablehlo.return_(
            [stablehlo.compare(lhs, rhs, stablehlo.ComparisonDirectionAttr.get("LT"))]
        )
    return list(op.results)


register_direct({"erf_inv": "chlo.erf_inv"}, shape=lambda x: [x])


# --- argument checking ------------------------------------------------------------------------


def _int_tuple(op: str, name: str, value, n: int, *, minimum: int) -> tuple[int, ...]:
    """`value` as `n` Python ints of at least `minimum` (None is all ones)."""
    if value is None:
        return (1,) * n
    try:
        out = tuple(value)
    except TypeError:
        out = None
    if (
        out is None
        or len(out) != n
        or any(isinstance(v, bool) or not isinstance(v, int | np.integer) for v in out)
        or any(v < minimum for v in out)
    ):
        raise ValueError(
            f"{where(op)}: {name} must be a sequence of {n} ints >= {minimum} (one per "
            f"spatial dimension), got {value!r}"
        )
    return tuple(int(v) for v in out)


_PAD_NAMES = ("SAME", "SAME_LOWER", "VALID")


def padtype_to_pads(
    op: str, in_shape, window_shape, strides, padding
) -> tuple[tuple[int, int], ...]:
    """Explicit (low, high) pads for "SAME", "SAME_LOWER" or "VALID", as `jax.lax` computes
    them: "SAME" keeps `ceil(in / stride)` outputs and puts the odd pad at the end."""
    kind = padding.upper()
    if kind not in _PAD_NAMES:
        raise ValueError(
            f"{where(op)}: unknown padding {padding!r}; use 'SAME', 'SAME_LOWER', 'VALID' or "
            "a sequence of (low, high) pairs"
        )
    if kind == "VALID":
        return ((0, 0),) * len(in_shape)
    pads = []
    for size, window, stride in zip(in_shape, window_shape, strides, strict=True):
        total = algebra.dim_max((-(-size // stride) - 1) * stride + window - size, 0)
        small, big = total // 2, total - total // 2
        pads.append((small, big) if kind == "SAME" else (big, small))
    return tuple(pads)


def _explicit_pads(op: str, padding, n: int) -> tuple[tuple[int, int], ...]:
    try:
        pads = tuple((lo, hi) for lo, hi in padding)
    except (TypeError, ValueError):
        pads = None
    if (
        pads is None
        or len(pads) != n
        or any(isinstance(v, bool) or not isinstance(v, int | np.integer) for p in pads for v in p)
    ):
        raise ValueError(
            f"{where(op)}: padding must be 'SAME', 'SAME_LOWER', 'VALID' or a sequence of {n} "
            f"(low, high) int pairs, got {padding!r}"
        )
    return tuple((int(lo), int(hi)) for lo, hi in pads)


def _spec_perm(spec: str, pair: tuple[str, str], spatial_order: str | None) -> tuple[int, ...]:
    spatial = [i for i, c in enumerate(spec) if c not in pair]
    if spatial_order is not None:
        # Input and output spatial dimensions pair up by letter, in the kernel's order.
        spatial.sort(key=lambda i: spatial_order.index(spec[i]))
    return (spec.index(pair[0]), spec.index(pair[1]), *spatial)


def conv_dimension_numbers(op: str, ndim: int, dimension_numbers):
    """(lhs_perm, rhs_perm, out_perm) as `jax.lax.conv_dimension_numbers` computes them:
    each lists the (batch, feature, spatial...) dimensions of its array; the kernel's are
    (output feature, input feature, spatial...)."""
    if dimension_numbers is None:
        iota = tuple(range(ndim))
        return iota, iota, iota
    specs = tuple(dimension_numbers) if isinstance(dimension_numbers, tuple | list) else ()
    if len(specs) == 3 and all(isinstance(s, tuple | list) for s in specs):
        # Already permutations (a jax.lax.ConvDimensionNumbers is a tuple of three).
        perms = tuple(tuple(int(d) for d in s) for s in specs)
        if all(sorted(p) == list(range(ndim)) for p in perms):
            return perms
    elif len(specs) == 3 and all(isinstance(s, str) for s in specs):
        pairs = (("N", "C"), ("O", "I"), ("N", "C"))
        spatial = [set(s) - set(p) for s, p in zip(specs, pairs, strict=True)]
        if (
            all(len(s) == ndim and len(set(s)) == ndim for s in specs)
            and all(s.count(a) == 1 and s.count(b) == 1 for s, (a, b) in zip(specs, pairs))
            and spatial[0] == spatial[1] == spatial[2]
        ):
            rhs = specs[1]
            return (
                _spec_perm(specs[0], pairs[0], rhs),
                _spec_perm(rhs, pairs[1], None),
                _spec_perm(specs[2], pairs[2], rhs),
            )
    raise ValueError(
        f"{where(op)}: dimension_numbers {dimension_numbers!r} do not describe arrays of "
        f"{ndim} dimensions; pass three layout strings of length {ndim} such as "
        "('NCHW', 'OIHW', 'NCHW') or ('NHWC', 'HWIO', 'NHWC') (N and C in the input and "
        "output, O and I in the kernel, the same spatial letters in all three)"
    )


def _operands(op: str, lhs, rhs, preferred_element_type) -> tuple[Tracer, Tracer]:
    a, b = asarray(lhs), asarray(rhs)
    dt = dtypes.result_type(a.dtype, b.dtype)
    if preferred_element_type is not None:
        pref = dtypes.canonicalize(preferred_element_type, where=where(op))
        if dtypes.kind_rank(pref) != dtypes.kind_rank(dt) or pref.itemsize < dt.itemsize:
            raise TypeError(
                f"{where(op)}: preferred_element_type {pref.name} must be a {dt.name} or a wider "
                f"dtype of the same kind (operands promote to {dt.name})"
            )
        # Widening first is exact (products of the narrow values fit the wide dtype),
        # and every backend then runs one ordinary convolution.
        dt = pref
    if dt == _BOOL:
        raise TypeError(
            f"{where(op)}: convolution of booleans is not supported; cast the operands to an "
            "integer or float dtype"
        )
    return cast(a, dt), cast(b, dt)


# --- lax-level functions ----------------------------------------------------------------------


def conv_general_dilated(
    lhs,
    rhs,
    window_strides,
    padding,
    lhs_dilation=None,
    rhs_dilation=None,
    dimension_numbers=None,
    feature_group_count=1,
    batch_group_count=1,
    precision=None,
    preferred_element_type=None,
):
    """`jax.lax.conv_general_dilated`: one `stablehlo.convolution`.

    `dimension_numbers` default to ("NC...", "OI...", "NC..."); window_strides pair with
    the kernel's spatial dimensions in the order of its layout string. Operands of different
    dtypes are promoted as NumPy would; `preferred_element_type` widens them first.
    `precision` in JAX's spellings (a pair: lhs, rhs), else the default in force
    (`aotkit.default_matmul_precision`).
    """
    op = "conv_general_dilated"
    a, b = _operands(op, lhs, rhs, preferred_element_type)
    if a.ndim != b.ndim or a.ndim < 2:
        raise ValueError(
            f"{where(op)}: lhs {a.shape} and rhs {b.shape} must have the same number of "
            "dimensions, at least 2 (batch and feature)"
        )
    n = a.ndim - 2
    lhs_perm, rhs_perm, out_perm = conv_dimension_numbers(op, a.ndim, dimension_numbers)
    strides = _int_tuple(op, "window_strides", window_strides, n, minimum=1)
    lhs_dil = _int_tuple(op, "lhs_dilation", lhs_dilation, n, minimum=1)
    rhs_dil = _int_tuple(op, "rhs_dilation", rhs_dilation, n, minimum=1)
    pair = precision_pair(op, precision)
    in_spatial = [a.shape[d] for d in lhs_perm[2:]]
    k_spatial = [b.shape[d] for d in rhs_perm[2:]]
    if isinstance(padding, str):
        if lhs_dil != (1,) * n:
            raise ValueError(
                f"{where(op)}: padding {padding!r} with lhs_dilation {lhs_dil} is ambiguous; "
                "pass explicit (low, high) pairs, or use conv_transpose"
            )
        window = [_dilate(k, d) for k, d in zip(k_spatial, rhs_dil, strict=True)]
        pads = padtype_to_pads(op, in_spatial, window, strides, padding)
    else:
        pads = _explicit_pads(op, padding, n)
    groups = _check_groups(op, a, b, (lhs_perm, rhs_perm), feature_group_count, batch_group_count)
    for i, (lo, hi) in enumerate(pads):
        if _dilate(in_spatial[i], lhs_dil[i]) + lo + hi < 0:
            raise ValueError(
                f"{where(op)}: padding {pads[i]} of spatial dimension {i} removes more than its "
                f"size {in_spatial[i]}"
            )
    # jaxlib 0.10.2's reference interpreter aborts the process ("Incompatible index and
    # shape found while flattening index") on a convolution whose output feature dimension
    # precedes its batch dimension; such layouts are computed batch-first, then transposed.
    swap = out_perm[1] < out_perm[0]
    r = bind1(
        "convolution",
        a,
        b,
        strides=strides,
        padding=pads,
        lhs_dilation=lhs_dil,
        rhs_dilation=rhs_dil,
        dnums=(lhs_perm, rhs_perm, (out_perm[1], out_perm[0], *out_perm[2:]) if swap else out_perm),
        groups=groups,
        precision=pair,
        dtype=a.dtype,
    )
    if not swap:
        return r
    perm = list(range(r.ndim))
    perm[out_perm[0]], perm[out_perm[1]] = out_perm[1], out_perm[0]
    return bind1("transpose", r, perm=tuple(perm))


def conv(lhs, rhs, window_strides, padding, precision=None, preferred_element_type=None):
    """`jax.lax.conv`: `conv_general_dilated` with NCHW/OIHW layouts and no dilation."""
    return conv_general_dilated(
        lhs,
        rhs,
        window_strides,
        padding,
        precision=precision,
        preferred_element_type=preferred_element_type,
    )


def _positive_int(op: str, name: str, v) -> int:
    if isinstance(v, bool) or not isinstance(v, int | np.integer) or v < 1:
        raise ValueError(f"{where(op)}: {name} must be a positive int, got {v!r}")
    return int(v)


def _check_groups(op, a, b, perms, feature_group_count, batch_group_count) -> tuple[int, int]:
    fgc = _positive_int(op, "feature_group_count", feature_group_count)
    bgc = _positive_int(op, "batch_group_count", batch_group_count)
    lhs_perm, rhs_perm = perms
    batch, features = a.shape[lhs_perm[0]], a.shape[lhs_perm[1]]
    k_in, k_out = b.shape[rhs_perm[1]], b.shape[rhs_perm[0]]
    if fgc > 1 and bgc > 1:
        raise ValueError(
            f"{where(op)}: feature_group_count {fgc} and batch_group_count {bgc} are both > 1; "
            "at most one of them may be"
        )
    if features % fgc or features // fgc != k_in:
        raise ValueError(
            f"{where(op)}: the input has {features} features, which feature_group_count {fgc} "
            f"must divide into groups of the kernel's {k_in} input features"
        )
    if k_out % fgc or k_out % bgc or batch % bgc:
        raise ValueError(
            f"{where(op)}: the kernel's {k_out} output features (and, for batch groups, the "
            f"batch of {batch}) must be multiples of feature_group_count {fgc} and "
            f"batch_group_count {bgc}"
        )
    return fgc, bgc


def _transpose_pads(k: int, s: int, padding) -> tuple[int, int]:
    """The pads of the fractionally strided convolution that transposes a forward one."""
    if padding == "SAME":
        total = k + s - 2
        low = k - 1 if s > k - 1 else -(-total // 2)
    elif padding == "VALID":
        total = k + s - 2 + max(k - s, 0)
        low = k - 1
    else:
        pads = tuple(k - p - 1 for p in padding)
        low, total = pads[0], sum(pads)
    return low, total - low


_TRANSPOSE_LAYOUTS = {
    2: ("NC", "IO", "NC"),
    3: ("NHC", "HIO", "NHC"),
    4: ("NHWC", "HWIO", "NHWC"),
    5: ("NHWDC", "HWDIO", "NHWDC"),
}


def conv_transpose(
    lhs,
    rhs,
    strides,
    padding,
    rhs_dilation=None,
    dimension_numbers=None,
    transpose_kernel=False,
    precision=None,
    preferred_element_type=None,
    use_consistent_padding=False,
):
    """`jax.lax.conv_transpose`: a convolution with `lhs_dilation=strides`.

    Layouts default to TensorFlow's channels-last ("NHWC", "HWIO", "NHWC") for 1 to 3
    spatial dimensions, as in JAX. "SAME"/"VALID" (and, with `use_consistent_padding`,
    explicit pairs) are the forward convolution's padding; explicit pairs otherwise pad the
    dilated input directly. `transpose_kernel` flips the spatial axes and swaps the kernel's
    feature axes (Keras' Conv2DTranspose).
    """
    op = "conv_transpose"
    a, b = asarray(lhs), asarray(rhs)
    if dimension_numbers is None:
        if a.ndim not in _TRANSPOSE_LAYOUTS or b.ndim != a.ndim:
            raise ValueError(
                f"{where(op)}: no default layout for lhs {a.shape} and rhs {b.shape}; pass "
                "dimension_numbers, or arrays of 2 to 5 dimensions each"
            )
        dimension_numbers = _TRANSPOSE_LAYOUTS[a.ndim]
    lhs_perm, rhs_perm, out_perm = conv_dimension_numbers(op, a.ndim, dimension_numbers)
    n = a.ndim - 2
    strides = _int_tuple(op, "strides", strides, n, minimum=1)
    rhs_dil = _int_tuple(op, "rhs_dilation", rhs_dilation, n, minimum=1)
    k_spatial = [_dilate(b.shape[d], r) for d, r in zip(rhs_perm[2:], rhs_dil, strict=True)]
    if isinstance(padding, str) and padding.upper() in ("SAME", "VALID"):
        pads = tuple(_transpose_pads(k, s, padding.upper()) for k, s in zip(k_spatial, strides))
    elif isinstance(padding, str):
        raise ValueError(
            f"{where(op)}: unknown padding {padding!r}; use 'SAME', 'VALID' or a sequence of "
            "(low, high) pairs"
        )
    else:
        pads = _explicit_pads(op, padding, n)
        if use_consistent_padding:
            pads = tuple(_transpose_pads(k, s, p) for k, s, p in zip(k_spatial, strides, pads))
    if transpose_kernel:
        b = reverse(b, tuple(rhs_perm[2:]))
        perm = list(range(b.ndim))
        perm[rhs_perm[0]], perm[rhs_perm[1]] = rhs_perm[1], rhs_perm[0]
        b = bind1("transpose", b, perm=tuple(perm))
    return conv_general_dilated(
        a,
        b,
        (1,) * n,
        pads,
        lhs_dilation=strides,
        rhs_dilation=rhs_dil,
        dimension_numbers=(lhs_perm, rhs_perm, out_perm),
        precision=precision,
        preferred_element_type=preferred_element_type,
    )


_COMPUTATIONS = {
    "add": "add",
    "max": "max",
    "maximum": "max",
    "min": "min",
    "minimum": "min",
    "mul": "multiply",
    "multiply": "multiply",
}


def _monoid(op: str, computation) -> str:
    name = computation if isinstance(computation, str) else getattr(computation, "__name__", None)
    monoid = _COMPUTATIONS.get(name)
    if monoid is None:
        raise NotImplementedError(
            f"{where(op)}: computation {computation!r} is not supported; pass 'add', 'max', "
            "'min' or 'mul' (or np.add, np.maximum, np.minimum, np.multiply, jax.lax.add, ...)"
        )
    return monoid


def window_reduce(
    x: Tracer,
    init,
    monoid: str,
    window,
    strides=None,
    padding="VALID",
    base_dilation=None,
    window_dilation=None,
    *,
    op: str = "reduce_window",
) -> Tracer:
    """reduce_window with a named monoid; `init` is cast to `x`'s dtype."""
    n = x.ndim
    window = _int_tuple(op, "window_dimensions", window, n, minimum=0)
    strides = _int_tuple(op, "window_strides", strides, n, minimum=1)
    base = _int_tuple(op, "base_dilation", base_dilation, n, minimum=1)
    wdil = _int_tuple(op, "window_dilation", window_dilation, n, minimum=1)
    if isinstance(padding, str):
        dilated = [_dilate(w, d) for w, d in zip(window, wdil, strict=True)]
        pads = padtype_to_pads(op, x.shape, dilated, strides, padding)
    else:
        pads = _explicit_pads(op, padding, n)
    if x.dtype == _BOOL:
        monoid = {"add": "or", "max": "or", "min": "and", "multiply": "and"}[monoid]
    identity = _identity(monoid, x.dtype)
    # XLA reads an init that is not the monoid's identity in its own way per compiler: the
    # CPU combines it once into each window, a TPU as often as its tiling of the window
    # takes (and StableHLO's spec pads with it). So the window is reduced from the identity
    # and the init combined once into each result, the same on every backend.
    given = None if _is_value(init, identity, x.dtype) else init
    r = bind1(
        "reduce_window",
        x,
        full((), identity, x.dtype) if given is not None else to_operand(op, init, x.dtype, ()),
        window=window,
        strides=strides,
        base_dilation=base,
        window_dilation=wdil,
        padding=pads,
        monoid=monoid,
    )
    return r if given is None else _combine(monoid, r, to_operand(op, given, x.dtype, r.shape))


def _is_value(x, value, dtype: np.dtype) -> bool:
    """Whether `x` is a concrete scalar (not a tracer) that equals `value` in `dtype`."""
    if isinstance(x, Tracer):
        return False
    with np.errstate(all="ignore"):
        try:
            arr = np.asarray(x).astype(dtype)
        except (TypeError, ValueError, OverflowError):
            return False
    return arr.ndim == 0 and bool(arr == np.asarray(value).astype(dtype))


def reduce_window(
    operand,
    init_value,
    computation,
    window_dimensions,
    window_strides=None,
    padding="VALID",
    base_dilation=None,
    window_dilation=None,
):
    """`jax.lax.reduce_window` for the monoids XLA reduces windows with: add, max, min, mul.

    `computation` is named ('add', 'max', 'min', 'mul') or given as the matching NumPy,
    aotkit.numpy or jax.lax function; arbitrary Python reducers are not supported. An
    `init_value` other than the computation's identity is combined once into each window's
    result on every backend (XLA applies one inside the op as often as its compiler splits
    the window: once on the CPU, more on a TPU).
    """
    x = asarray(operand)
    monoid = _monoid("reduce_window", computation)
    return window_reduce(
        x,
        init_value,
        monoid,
        window_dimensions,
        window_strides,
        padding,
        base_dilation,
        window_dilation,
    )


def sort_key_val(keys: Tracer, values: Tracer, dimension: int = -1) -> tuple[Tracer, Tracer]:
    """Stable sort of `values` by `keys` along `dimension` (as `jax.lax.sort_key_val`)."""
    dim = normalize_axis("sort_key_val", dimension, keys.ndim)
    k, v = bind("sort_key_val", keys, values, dimension=dim)
    return k, v


def erf_inv(x: Tracer) -> Tracer:
    """The inverse error function of a float tracer (`jax.lax.erf_inv`)."""
    return bind1("erf_inv", x)
