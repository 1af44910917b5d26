"""StableHLO rewrites that make IREE 3.13 compute what the module says (iree backend only).

IREE compiles these ops to code whose results differ from the StableHLO spec (and from
XLA and the reference interpreter) on ordinary inputs, without any diagnostic:

- `add` of booleans: IREE adds modulo 2 (`true + true = false`, so a boolean sum-reduce
  gives the parity); the spec says logical or. Rewritten to `or`.
- `power` of floats: IREE computes `exp(y * log(x))`, which is NaN for every negative
  base (`(-2.0) ** 2.0`), for `x ** 0` at zero or infinite `x`, and for `1 ** inf`.
  Rewritten to IREE's power of `|x|` with the sign, the NaN of a negative base with a
  non-integer exponent, and C's exact cases (`pow(x, 0) = 1`, `pow(1, y) = 1`,
  `pow(-1, ±inf) = 1`) put back.
- `atan2`: NaN at `(±0, ±0)` and `(±inf, ±inf)`, and `+pi` for `(-0, x < 0)` and for
  `(y < 0, -inf)`. Zero and infinite cases are selected from their exact values.
- `cbrt` of `±inf` is NaN. Selected back to `±inf`. IREE has no float64 `cbrt` at all: it is
  `|x| ** (1/3)` refined by one Newton step, with x's sign (within 4 ulp of cpu's).
- `convert` of floats to integers: out-of-range values and NaN give whatever the CPU's
  conversion instruction gives. aotkit's semantics (docs/programs.md, XLA's) saturate and map
  NaN to 0; the conversion is guarded so.
- `convert` to bf16: on a CPU without native bf16 conversions (AVX512-BF16), IREE calls
  `__truncsfbf2`, which its embedded linker does not have, and the module does not compile.
  The rounding is written out on the bits instead: the source goes to f32 first (as XLA's
  CPU code and IREE itself convert), then rounds to nearest even, NaN kept quiet with its sign.

Each rewrite keeps IREE's own op for the ordinary inputs, so its accuracy is IREE's, except
the two IREE cannot always compile (float64 `cbrt`; `convert` to bf16 without AVX512-BF16). The
module is parsed from text into a context of its own and printed back: nothing here
touches aotkit's lowering context.
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
from jaxlib.mlir import ir

from aotkit import _compat

_FLOATS = {
    "f16": np.dtype(np.float16),
    "bf16": np.dtype(ml_dtypes.bfloat16),
    "f32": np.dtype(np.float32),
    "f64": np.dtype(np.float64),
}
_BITS = {"f16": "i16", "bf16": "i16", "f32": "i32", "f64": "i64"}
# (bits, signed) of the integer element types a float may be converted to.
_INTEGERS = {
    f"{prefix}{bits}": (bits, prefix == "i") for prefix in ("i", "ui") for bits in (8, 16, 32, 64)
}


def rewrite(text: str) -> tuple[str, list[str]]:
    """`text` with the rewrites applied, and the names of the ops rewritten (sorted)."""
    with _compat.make_context() as ctx, ir.Location.unknown(ctx):
        module = ir.Module.parse(text, ctx)
        targets = []
        _collect(module.operation, targets)
        if not targets:
            return text, []
        done = set()
        for op in targets:
            done.add(op.name)
            _RULES[op.name](op)
        module.operation.verify()
        return module.operation.get_asm(enable_debug_info=True), sorted(done)


def _element(t: ir.Type) -> str:
    return str(ir.RankedTensorType(t).element_type)


def _collect(op: ir.Operation, out: list) -> None:
    for region in op.regions:
        for block in region.blocks:
            for inner in block.operations:
                inner = inner.operation
                if inner.name in _RULES and _applies(inner):
                    out.append(inner)
                _collect(inner, out)


def _applies(op: ir.Operation) -> bool:
    element = _element(op.results[0].type)
    if op.name == "stablehlo.add":
        return element == "i1"
    if op.name == "stablehlo.convert":
        source = _element(op.operands[0].type)
        return (source in _FLOATS and element in _INTEGERS) or (
            element == "bf16" and source != "bf16"
        )
    return element in _FLOATS


class _Builder:
    """Creates ops of the same shape as `op`, just before it, at its location. Where that
    shape is dynamic (a symbolic program compiled once: aotkit/backends/_iree_dynamic.py),
    constants are scalars broadcast to the shape of `op`'s first operand, which every
    rewritten op (elementwise) shares."""

    def __init__(self, op: ir.Operation):
        self.op = op
        self.type = ir.RankedTensorType(op.results[0].type)
        self.shape = list(self.type.shape)
        self.ip = ir.InsertionPoint(op)
        self.loc = op.location
        self._dims: ir.Value | None = None

    def tensor(self, element: str) -> ir.Type:
        return ir.RankedTensorType.get(self.shape, ir.Type.parse(element))

    def emit(self, name: str, *operands: ir.Value, type=None, **attributes) -> ir.Value:
        created = ir.Operation.create(
            name,
            results=[type or operands[0].type],
            operands=list(operands),
            attributes=attributes,
            loc=self.loc,
            ip=self.ip,
        )
        return created.results[0]

    def constant(self, literal: str, element: str) -> ir.Value:
        if self.type.has_static_shape:
            t = self.tensor(element)
            value = ir.Attribute.parse(f"dense<{literal}> : {t}")
            return self.emit("stablehlo.constant", type=t, value=value)
        scalar = ir.RankedTensorType.get([], ir.Type.parse(element))
        value = ir.Attribute.parse(f"dense<{literal}> : {scalar}")
        c = self.emit("stablehlo.constant", type=scalar, value=value)
        dims = ir.DenseI64ArrayAttr.get([])
        return self.emit(
            "stablehlo.dynamic_broadcast_in_dim",
            c,
            self.dims(),
            type=self.tensor(element),
            broadcast_dimensions=dims,
        )

    def dims(self) -> ir.Value:
        """The shape of `op`'s first operand as a `tensor<Nxi64>`, made once."""
        if self._dims is None:
            x = self.op.operands[0]
            i64 = ir.IntegerType.get_signless(64)
            one = ir.RankedTensorType.get([1], i64)
            parts = []
            for k, n in enumerate(self.shape):
                if not self.type.is_dynamic_dim(k):
                    value = ir.Attribute.parse(f"dense<{n}> : {one}")
                    parts.append(self.emit("stablehlo.constant", type=one, value=value))
                    continue
                size = self.emit(
                    "stablehlo.get_dimension_size",
                    x,
                    type=ir.RankedTensorType.get([], ir.IntegerType.get_signless(32)),
                    dimension=ir.IntegerAttr.get(i64, k),
                )
                wide = self.emit("stablehlo.convert", size, type=ir.RankedTensorType.get([], i64))
                parts.append(self.emit("stablehlo.reshape", wide, type=one))
            self._dims = self.emit(
                "stablehlo.concatenate",
                *parts,
                type=ir.RankedTensorType.get([len(parts)], i64),
                dimension=ir.IntegerAttr.get(i64, 0),
            )
        return self._dims

    def float_constant(self, x: float, element: str) -> ir.Value:
        bits = np.array(x, _FLOATS[element]).view(f"u{_FLOATS[element].itemsize}")
        return self.constant(f"0x{int(bits):X}", element)

    def compare(self, direction: str, a: ir.Value, b: ir.Value) -> ir.Value:
        attr = ir.Attribute.parse(f"#stablehlo<comparison_direction {direction}>")
        return self.emit(
            "stablehlo.compare", a, b, type=self.tensor("i1"), comparison_direction=attr
        )

    def select(self, pred: ir.Value, a: ir.Value, b: ir.Value) -> ir.Value:
        return self.emit("stablehlo.select", pred, a, b, type=a.type)

    def both(self, a: ir.Value, b: ir.Value) -> ir.Value:
        return self.emit("stablehlo.and", a, b)

    def either(self, a: ir.Value, b: ir.Value) -> ir.Value:
        return self.emit("stablehlo.or", a, b)

    def negative_sign(self, x: ir.Value, element: str) -> ir.Value:
        """x's sign bit is set (true for -0.0 and -inf too)."""
        bits = self.emit("stablehlo.bitcast_convert", x, type=self.tensor(_BITS[element]))
        return self.compare("LT", bits, self.constant("0", _BITS[element]))

    def is_finite(self, x: ir.Value) -> ir.Value:
        return self.emit("stablehlo.is_finite", x, type=self.tensor("i1"))

    def is_inf(self, x: ir.Value) -> ir.Value:
        absolute = self.emit("stablehlo.abs", x)
        return self.compare("EQ", absolute, self.float_constant(math.inf, _element(x.type)))

    def replace(self, value: ir.Value) -> None:
        self.op.results[0].replace_all_uses_with(value)
        self.op.erase()


def _boolean_add(op: ir.Operation) -> None:
    b = _Builder(op)
    b.replace(b.emit("stablehlo.or", *op.operands))


def _power(op: ir.Operation) -> None:
    b = _Builder(op)
    x, y = op.operands
    e = _element(x.type)
    one = b.float_constant(1.0, e)
    p = b.emit("stablehlo.power", b.emit("stablehlo.abs", x), y)
    y_half = b.emit("stablehlo.multiply", y, b.float_constant(0.5, e))
    y_integer = b.both(b.is_finite(y), b.compare("EQ", b.emit("stablehlo.floor", y), y))
    y_odd = b.both(y_integer, b.compare("NE", b.emit("stablehlo.floor", y_half), y_half))
    # A negative finite base with a finite non-integer exponent has no real power.
    no_real = b.both(
        b.both(b.compare("LT", x, b.float_constant(0.0, e)), b.is_finite(x)),
        b.both(b.is_finite(y), b.emit("stablehlo.not", y_integer)),
    )
    signed = b.select(b.both(b.negative_sign(x, e), y_odd), b.emit("stablehlo.negate", p), p)
    result = b.select(no_real, b.float_constant(math.nan, e), signed)
    exactly_one = b.either(
        b.compare("EQ", y, b.float_constant(0.0, e)),
        b.either(
            b.compare("EQ", x, one),
            b.both(b.compare("EQ", b.emit("stablehlo.abs", x), one), b.is_inf(y)),
        ),
    )
    b.replace(b.select(exactly_one, one, result))


def _atan2(op: ir.Operation) -> None:
    b = _Builder(op)
    y, x = op.operands
    e = _element(y.type)
    y_negative = b.negative_sign(y, e)

    def with_sign_of_y(magnitude: float) -> ir.Value:
        plus = b.float_constant(magnitude, e)
        return b.select(y_negative, b.float_constant(-magnitude, e), plus)

    on_zero = b.select(b.negative_sign(x, e), with_sign_of_y(math.pi), with_sign_of_y(0.0))
    y_zero_x_number = b.both(b.compare("EQ", y, b.float_constant(0.0, e)), b.compare("EQ", x, x))
    x_positive = b.compare("GT", x, b.float_constant(0.0, e))
    on_inf = b.select(x_positive, with_sign_of_y(math.pi / 4), with_sign_of_y(3 * math.pi / 4))
    both_inf = b.both(b.is_inf(y), b.is_inf(x))
    # A finite y against an infinite x: the angle of the x axis, on y's side.
    x_inf_y_finite = b.both(b.is_inf(x), b.is_finite(y))
    on_x_axis = b.select(x_positive, with_sign_of_y(0.0), with_sign_of_y(math.pi))
    atan2 = b.emit("stablehlo.atan2", y, x)
    exact = b.select(x_inf_y_finite, on_x_axis, atan2)
    b.replace(b.select(y_zero_x_number, on_zero, b.select(both_inf, on_inf, exact)))


def _cbrt(op: ir.Operation) -> None:
    b = _Builder(op)
    (x,) = op.operands
    e = _element(x.type)
    if e == "f64":  # IREE has no f64 cbrt: |x| ** (1/3), one Newton step, x's sign
        a = b.emit("stablehlo.abs", x)
        y = b.emit("stablehlo.power", a, b.float_constant(1 / 3, e))
        # (2y + a / y^2) / 3, which needs no y^3.
        step = b.emit("stablehlo.divide", a, b.emit("stablehlo.multiply", y, y))
        twice = b.emit("stablehlo.add", y, y)
        y = b.emit("stablehlo.divide", b.emit("stablehlo.add", twice, step), b.float_constant(3, e))
        negative = b.negative_sign(x, e)
        signed = b.select(negative, b.emit("stablehlo.negate", y), y)
        # Zeros and subnormals give a zero of x's sign, as on cpu (XLA flushes subnormals);
        # inf, -inf and NaN are their own cube roots.
        zero = b.select(negative, b.float_constant(-0.0, e), b.float_constant(0.0, e))
        tiny = b.compare("LT", a, b.float_constant(2.0**-1022, e))
        finite = b.select(tiny, zero, signed)
        b.replace(b.select(b.is_finite(x), finite, x))
        return
    b.replace(b.select(b.is_inf(x), x, b.emit("stablehlo.cbrt", x)))


def _convert(op: ir.Operation) -> None:
    if _element(op.results[0].type) == "bf16":
        _to_bfloat16(op)
    else:
        _float_to_int(op)


def _to_bfloat16(op: ir.Operation) -> None:
    b = _Builder(op)
    (x,) = op.operands
    if _element(x.type) != "f32":
        x = b.emit("stablehlo.convert", x, type=b.tensor("f32"))
    bits = b.emit("stablehlo.bitcast_convert", x, type=b.tensor("ui32"))
    high = b.emit("stablehlo.shift_right_logical", bits, b.constant("16", "ui32"))
    # Round to nearest even: add 0x7FFF and the lowest bit kept, then drop the low half
    # (a finite value that rounds past the largest bf16 becomes inf, as it should).
    odd = b.emit("stablehlo.and", high, b.constant("1", "ui32"))
    biased = b.emit(
        "stablehlo.add", bits, b.emit("stablehlo.add", odd, b.constant("32767", "ui32"))
    )
    rounded = b.emit("stablehlo.shift_right_logical", biased, b.constant("16", "ui32"))
    quiet_nan = b.emit("stablehlo.or", high, b.constant("64", "ui32"))
    chosen = b.select(b.compare("NE", x, x), quiet_nan, rounded)
    narrow = b.emit("stablehlo.convert", chosen, type=b.tensor("ui16"))
    b.replace(b.emit("stablehlo.bitcast_convert", narrow, type=op.results[0].type))


def _float_to_int(op: ir.Operation) -> None:
    b = _Builder(op)
    (x,) = op.operands
    e, target = _element(x.type), _element(op.results[0].type)
    bits, signed = _INTEGERS[target]
    low, high = (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) if signed else (0, 2**bits - 1)
    # Powers of two are exact in every float type (or inf, which compares as wanted).
    too_big = b.compare("GE", x, b.float_constant(float(high + 1), e))
    too_small = b.compare("LT", x, b.float_constant(float(low), e))
    nan = b.compare("NE", x, x)
    outside = b.either(b.either(too_big, too_small), nan)
    safe = b.select(outside, b.float_constant(0.0, e), x)
    converted = b.emit("stablehlo.convert", safe, type=op.results[0].type)
    result = b.select(
        too_big,
        b.constant(str(high), target),
        b.select(too_small, b.constant(str(low), target), converted),
    )
    b.replace(result)


_RULES = {
    "stablehlo.add": _boolean_add,
    "stablehlo.power": _power,
    "stablehlo.atan2": _atan2,
    "stablehlo.cbrt": _cbrt,
    "stablehlo.convert": _convert,
}
