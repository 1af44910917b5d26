"""Element types: the names aotkit accepts, their MLIR types, and NumPy 2 promotion.

Promotion follows NumPy 2 with NEP 50: Python scalars are "weak" and take the dtype of
the array they meet (`f32 * 2.0 -> f32`, `i8 + 1 -> i8`), unless their kind is higher
(`i32 + 1.5 -> f64`). bfloat16 (from ml_dtypes) has no NumPy promotion with float16 or
with integers wider than 8 bits; aotkit promotes it as if it were float16 there
(`bf16 + f16 -> f32`, `bf16 + i16 -> f32`, `bf16 + i32 -> f64`), a documented divergence.

The low-precision types people deploy quantized models with (`LOW_PRECISION`: int2, int4,
uint2, uint4, the float8 types and float4_e2m1fn, all from ml_dtypes) promote as JAX
promotes them, because NumPy defines no promotion for most of them: a 2- or 4-bit integer
only with itself, bool and Python ints (`i4 + 1 -> i4`); a float8/float4 type with itself,
bool, any integer of 8 bits or more and Python bools, ints and floats (`f8e4m3fn + i32 ->
f8e4m3fn`, `f8e4m3fn * 2.0 -> f8e4m3fn`). Every other pair (two different float8 types,
`f8e4m3fn + f32`, `i4 + i8`, `i4 + 1.5`) is a TypeError that asks for an explicit cast,
as in JAX.
"""

from __future__ import annotations

import functools
import math
import re

import ml_dtypes
import numpy as np
from jaxlib.mlir import ir

from aotkit import _context, config
from aotkit.symbolic import algebra

bfloat16 = np.dtype(ml_dtypes.bfloat16)

# Compact name -> dtype, in the order the CLI documents them.
SHORT_NAMES: dict[str, np.dtype] = {
    "bool": np.dtype(np.bool_),
    "i8": np.dtype(np.int8),
    "i16": np.dtype(np.int16),
    "i32": np.dtype(np.int32),
    "i64": np.dtype(np.int64),
    "u8": np.dtype(np.uint8),
    "u16": np.dtype(np.uint16),
    "u32": np.dtype(np.uint32),
    "u64": np.dtype(np.uint64),
    "f16": np.dtype(np.float16),
    "bf16": bfloat16,
    "f32": np.dtype(np.float32),
    "f64": np.dtype(np.float64),
    "c64": np.dtype(np.complex64),
    "c128": np.dtype(np.complex128),
}

# The low-precision types of quantized models, from ml_dtypes: compact name -> dtype. The
# names are XLA's, lower-cased (`f8e4m3fn` for MLIR's f8E4M3FN), with the integers spelled as
# above (`i4`, `u4`); their NumPy names (`int4`, `float8_e4m3fn`) and MLIR's work too.
SUB_BYTE_INTS: dict[str, np.dtype] = {
    "i2": np.dtype(ml_dtypes.int2),
    "i4": np.dtype(ml_dtypes.int4),
    "u2": np.dtype(ml_dtypes.uint2),
    "u4": np.dtype(ml_dtypes.uint4),
}
LOW_FLOATS: dict[str, np.dtype] = {
    "f8e4m3fn": np.dtype(ml_dtypes.float8_e4m3fn),
    "f8e5m2": np.dtype(ml_dtypes.float8_e5m2),
    "f8e4m3": np.dtype(ml_dtypes.float8_e4m3),
    "f8e3m4": np.dtype(ml_dtypes.float8_e3m4),
    "f8e4m3fnuz": np.dtype(ml_dtypes.float8_e4m3fnuz),
    "f8e5m2fnuz": np.dtype(ml_dtypes.float8_e5m2fnuz),
    "f8e4m3b11fnuz": np.dtype(ml_dtypes.float8_e4m3b11fnuz),
    "f8e8m0fnu": np.dtype(ml_dtypes.float8_e8m0fnu),
    "f4e2m1fn": np.dtype(ml_dtypes.float4_e2m1fn),
}
LOW_PRECISION: dict[str, np.dtype] = {**SUB_BYTE_INTS, **LOW_FLOATS}
# Every compact name aotkit reads and writes: the NumPy-promoting types, then the others.
ALL_NAMES: dict[str, np.dtype] = {**SHORT_NAMES, **LOW_PRECISION}
SUPPORTED: frozenset[np.dtype] = frozenset(ALL_NAMES.values())
_SUB_BYTE = frozenset(SUB_BYTE_INTS.values())
_LOW_FLOAT = frozenset(LOW_FLOATS.values())
_UNSIGNED_SUB_BYTE = frozenset((SUB_BYTE_INTS["u2"], SUB_BYTE_INTS["u4"]))
_SHORT_OF = {d: n for n, d in ALL_NAMES.items()}
_BY_NAME = {
    **ALL_NAMES,
    **{d.name: d for d in ALL_NAMES.values()},
    "bool_": SHORT_NAMES["bool"],
    # MLIR's spelling of the unsigned types (the others are the short names, in any case).
    **{f"ui{n[1:]}": d for n, d in ALL_NAMES.items() if n[0] == "u"},
}
# XLA's names of the element types where they differ from aotkit's (an HLO module's entry
# layout prints `s4[8]` for i4[8]); the others are spelled alike.
HLO_NAMES: dict[str, str] = {
    "bool": "pred",
    "i2": "s2",
    "i4": "s4",
    "i8": "s8",
    "i16": "s16",
    "i32": "s32",
    "i64": "s64",
}
_EXACT_WIDE = {
    bfloat16: np.dtype(np.float32),
    **{d: np.dtype(np.float32) for d in LOW_FLOATS.values()},
    **{d: np.dtype(np.uint8 if n[0] == "u" else np.int8) for n, d in SUB_BYTE_INTS.items()},
}
# `f32, ..., c128 and the low-precision i2, ..., f4e2m1fn`: the names error messages list.
NAMES_TEXT = f"{', '.join(SHORT_NAMES)} and the low-precision {', '.join(LOW_PRECISION)}"

# Python scalar types are weak: they carry a kind, not a dtype.
WEAK_KINDS = (bool, int, float, complex)
WEAK_RANK = {bool: 0, int: 1, float: 2, complex: 3}
_DEFAULT_OF_WEAK = {
    bool: np.dtype(np.bool_),
    int: np.dtype(np.int64),
    float: np.dtype(np.float64),
    complex: np.dtype(np.complex128),
}


_SCALAR_ARGUMENT = {
    False: {
        bool: np.dtype(np.bool_),
        int: np.dtype(np.int32),
        float: np.dtype(np.float32),
        complex: np.dtype(np.complex64),
    },
    True: dict(_DEFAULT_OF_WEAK),
}


def scalar_argument_dtype(kind: type) -> np.dtype:
    """The dtype of a Python scalar of `kind` passed as a top-level argument: 32-bit unless
    `aotkit.config` x64_scalars is on (a weak type: it promotes like the Python scalar)."""

    return _SCALAR_ARGUMENT[config.get("x64_scalars")][kind]


def short_name(dtype: np.dtype) -> str:
    """`f32`, `bf16`, ... for a supported dtype."""
    return _SHORT_OF[dtype]


def canonicalize(dtype, *, where: str = "dtype") -> np.dtype:
    """Turns a dtype-like (name, NumPy type, np.dtype) into a supported np.dtype."""
    if isinstance(dtype, np.dtype) and dtype in SUPPORTED:
        return dtype
    if isinstance(dtype, str):
        found = _BY_NAME.get(dtype.strip().lower())
        if found is not None:
            return found
    elif dtype in (bool, int, float, complex):
        return _DEFAULT_OF_WEAK[dtype]
    else:
        try:
            d = np.dtype(dtype)
        except TypeError:
            d = None
        if d is not None and not d.isnative:
            d = d.newbyteorder("=")  # big-endian data holds the same numbers
        if d is not None and d in SUPPORTED:
            return d
        if d is not None and d.kind == "V" and d.names is None:
            raise TypeError(
                f"{where}: unsupported dtype {dtype!r}: raw bytes, as numpy.save writes "
                "bfloat16 and the ml_dtypes types (int4, float8_e4m3fn, ...); view the array "
                "as its dtype (x.view(ml_dtypes.int4)), or give its spec (such as i4[8])"
            )
    raise TypeError(
        f"{where}: unsupported dtype {dtype!r}; aotkit supports "
        f"{NAMES_TEXT} (NumPy names such as 'float32' and 'float8_e4m3fn' work too)"
    )


def is_bool(d: np.dtype) -> bool:
    return d.kind == "b"


def is_signed_int(d: np.dtype) -> bool:
    return d.kind == "i" or (d in _SUB_BYTE and d not in _UNSIGNED_SUB_BYTE)


def is_unsigned_int(d: np.dtype) -> bool:
    return d.kind == "u" or d in _UNSIGNED_SUB_BYTE


def is_integer(d: np.dtype) -> bool:
    return d.kind in "iu" or d in _SUB_BYTE


def is_float(d: np.dtype) -> bool:
    return d.kind == "f" or d == bfloat16 or d in _LOW_FLOAT


def is_sub_byte_int(d: np.dtype) -> bool:
    """int2, int4, uint2, uint4 (ml_dtypes; NumPy's `kind` of them is 'V')."""
    return d in _SUB_BYTE


def is_low_float(d: np.dtype) -> bool:
    """The float8 types and float4_e2m1fn (ml_dtypes), not bfloat16 or float16."""
    return d in _LOW_FLOAT


def is_low_precision(d: np.dtype) -> bool:
    """A dtype of `LOW_PRECISION`: it promotes as JAX promotes it (see module doc)."""
    return d in _SUB_BYTE or d in _LOW_FLOAT


def iinfo(d: np.dtype):
    """Integer limits, the sub-byte integers included (np.iinfo does not know them)."""
    return ml_dtypes.iinfo(d)


def finfo(d: np.dtype):
    """Float limits, bfloat16 and the float8/float4 types included."""
    return ml_dtypes.finfo(d)


def lowest(d: np.dtype) -> int | float:
    """The least value of a real dtype (the identity of max): -inf where the type has
    infinities, else its most negative finite number (float8_e4m3fn: -448; its -inf is NaN)."""
    if is_integer(d):
        return int(iinfo(d).min)
    if is_bool(d):
        return False
    return -math.inf if _has_inf(d) else float(finfo(d).min)


def highest(d: np.dtype) -> int | float:
    """The greatest value of a real dtype (the identity of min); see `lowest`."""
    if is_integer(d):
        return int(iinfo(d).max)
    if is_bool(d):
        return True
    return math.inf if _has_inf(d) else float(finfo(d).max)


def _has_inf(d: np.dtype) -> bool:
    return bool(np.isinf(np.array(np.inf).astype(d).astype(np.float64)))


def exact_wide(d: np.dtype) -> np.dtype:
    """The dtype of a standard width that holds every value of `d` exactly: float32 for
    bfloat16 and the float8/float4 types, int8/uint8 for the 2- and 4-bit integers, `d`
    itself for the others. Backends that cannot carry `d` (the reference interpreter's
    results) carry it in this dtype."""
    return _EXACT_WIDE.get(d, d)


def is_complex(d: np.dtype) -> bool:
    return d.kind == "c"


def is_inexact(d: np.dtype) -> bool:
    return is_float(d) or is_complex(d)


def real_dtype(d: np.dtype) -> np.dtype:
    """The component dtype of a complex dtype; other dtypes map to themselves."""
    if d.kind == "c":
        return np.dtype(np.float32) if d.itemsize == 8 else np.dtype(np.float64)
    return d


def complex_dtype(d: np.dtype) -> np.dtype:
    """The complex dtype that holds `d` (NumPy: f16/f32 -> c64, f64 -> c128)."""
    if d.kind == "c":
        return d
    if d == np.float64 or is_integer(d) or is_bool(d):
        return np.dtype(np.complex128)
    return np.dtype(np.complex64)


def _no_promotion(a: np.dtype | type, b: np.dtype | type) -> TypeError:
    names = [f"Python {x.__name__}" if isinstance(x, type) else x.name for x in (a, b)]
    low = a if isinstance(a, np.dtype) and is_low_precision(a) else b
    if is_sub_byte_int(low):
        rule, cast = (
            "2- and 4-bit integers promote only with themselves, bool and Python ints",
            "int32",
        )
    else:
        rule = (
            "float8 and float4 types promote only with themselves, bool, integers of 8 bits "
            "or more and Python bools, ints and floats"
        )
        cast = "float32"
    return TypeError(
        f"cannot promote {names[0]} and {names[1]} implicitly: {rule} (as in JAX); cast "
        f"explicitly, e.g. x.astype('{cast}')"
    )


def _low_precision_pair(a: np.dtype, b: np.dtype) -> np.dtype:
    """JAX's lattice for a pair with a low-precision member (see module doc)."""
    low, other = (a, b) if is_low_precision(a) else (b, a)
    if other.kind == "b":
        return low
    if is_low_float(low) and other.kind in "iu":
        return low
    raise _no_promotion(a, b)


def _strong_pair(a: np.dtype, b: np.dtype) -> np.dtype:
    if a == b:
        return a
    if is_low_precision(a) or is_low_precision(b):
        return _low_precision_pair(a, b)
    if a == bfloat16 or b == bfloat16:
        other = b if a == bfloat16 else a
        if other == np.float16:
            return np.dtype(np.float32)
        if other.kind in "iu" and other.itemsize > 1:
            return np.result_type(np.float16, other)
    try:
        return np.result_type(a, b)
    except TypeError as e:  # numpy raises DTypePromotionError (a TypeError subclass)
        raise TypeError(
            f"cannot promote {a.name} and {b.name}; cast one explicitly with .astype"
        ) from e


@functools.cache
def promote_types(a: np.dtype, b: np.dtype) -> np.dtype:
    """NumPy 2 promotion of two (strong) dtypes, bfloat16 included."""
    return _strong_pair(a, b)


@functools.cache
def _with_weak(d: np.dtype, kind: type) -> np.dtype:
    if kind is bool or WEAK_RANK[kind] <= kind_rank(d):
        return d
    if is_low_precision(d):
        raise _no_promotion(d, kind)
    if kind is int:  # only bool is below int
        return _DEFAULT_OF_WEAK[int]
    if kind is float:
        return _DEFAULT_OF_WEAK[float]
    return complex_dtype(d)


def kind_rank(d: np.dtype) -> int:
    """bool 0 < integers 1 < floats (bfloat16 too) 2 < complex 3: the NEP 50 kind order."""
    if d.kind == "b":
        return 0
    if d.kind in "iu" or d in _SUB_BYTE:
        return 1
    if d.kind == "c":
        return 3
    return 2


def result_type(*args) -> np.dtype:
    """Promotes dtypes and weak Python scalar types (`int`, `float`, ...) per NEP 50."""
    strong = None
    weak = None
    for a in args:
        if isinstance(a, type) and a in WEAK_RANK:
            if weak is None or WEAK_RANK[a] > WEAK_RANK[weak]:
                weak = a
        else:
            strong = a if strong is None else promote_types(strong, a)
    if strong is None:
        return _DEFAULT_OF_WEAK[weak]
    if weak is None:
        return strong
    return _with_weak(strong, weak)


# Types seen by `weak_kind` that are no kind of Python scalar (arrays, specs, ...): what it
# answers depends on the type alone, and a lowering asks it of every argument.
_NOT_WEAK: set[type] = set()


def weak_kind(x) -> type | None:
    """The weak kind of a Python scalar (bool before int: bool is an int subclass)."""
    t = type(x)
    if t in WEAK_RANK:
        return t
    if t in _NOT_WEAK:
        return None
    if isinstance(x, bool):
        return bool
    if isinstance(x, int) and not isinstance(x, np.integer):
        return int
    if isinstance(x, float) and not isinstance(x, np.floating):
        return float
    if isinstance(x, complex) and not isinstance(x, np.complexfloating):
        return complex
    if isinstance(x, algebra.Dim):  # a symbolic dimension is a Python int (issue 25)
        return int
    _NOT_WEAK.add(t)
    return None


_IR_ELEMENT_BUILDERS = {
    "bool": lambda: ir.IntegerType.get_signless(1),
    "i8": lambda: ir.IntegerType.get_signless(8),
    "i16": lambda: ir.IntegerType.get_signless(16),
    "i32": lambda: ir.IntegerType.get_signless(32),
    "i64": lambda: ir.IntegerType.get_signless(64),
    "u8": lambda: ir.IntegerType.get_unsigned(8),
    "u16": lambda: ir.IntegerType.get_unsigned(16),
    "u32": lambda: ir.IntegerType.get_unsigned(32),
    "u64": lambda: ir.IntegerType.get_unsigned(64),
    "f16": ir.F16Type.get,
    "bf16": ir.BF16Type.get,
    "f32": ir.F32Type.get,
    "f64": ir.F64Type.get,
    "c64": lambda: ir.ComplexType.get(ir.F32Type.get()),
    "c128": lambda: ir.ComplexType.get(ir.F64Type.get()),
    "i2": lambda: ir.IntegerType.get_signless(2),
    "i4": lambda: ir.IntegerType.get_signless(4),
    "u2": lambda: ir.IntegerType.get_unsigned(2),
    "u4": lambda: ir.IntegerType.get_unsigned(4),
    "f8e4m3fn": ir.Float8E4M3FNType.get,
    "f8e5m2": ir.Float8E5M2Type.get,
    "f8e4m3": ir.Float8E4M3Type.get,
    "f8e3m4": ir.Float8E3M4Type.get,
    "f8e4m3fnuz": ir.Float8E4M3FNUZType.get,
    "f8e5m2fnuz": ir.Float8E5M2FNUZType.get,
    "f8e4m3b11fnuz": ir.Float8E4M3B11FNUZType.get,
    "f8e8m0fnu": ir.Float8E8M0FNUType.get,
    "f4e2m1fn": ir.Float4E2M1FNType.get,
}


def ir_element_type(dtype: np.dtype) -> ir.Type:
    """The MLIR element type of `dtype`, cached in the active lowering context."""
    cache = _context.active().element_types
    t = cache.get(dtype)
    if t is None:
        t = cache[dtype] = _IR_ELEMENT_BUILDERS[_SHORT_OF[dtype]]()
    return t


def tensor_type(shape: tuple[int, ...], dtype: np.dtype) -> ir.RankedTensorType:
    """`tensor<2x3xf32>` for shape (2, 3) and float32, cached in the active lowering context."""
    cache = _context.active().tensor_types
    key = (shape, dtype)
    t = cache.get(key)
    if t is None:
        if not algebra.is_static(shape):
            return dynamic_tensor_type(shape, dtype)
        t = cache[key] = ir.RankedTensorType.get(shape, ir_element_type(dtype))
    return t


def dynamic_tensor_type(shape: tuple, dtype: np.dtype) -> ir.RankedTensorType:
    """`tensor<?x784xf32>` for a shape with symbolic dimensions (`aotkit.symbolic.algebra.Dim`),
    each a `?`. Not cached: the context outlives the trace whose symbols these are."""
    dynamic = ir.ShapedType.get_dynamic_size()
    return ir.RankedTensorType.get(
        [dynamic if isinstance(d, algebra.Dim) else d for d in shape], ir_element_type(dtype)
    )


# MLIR's spelling of each element type: reading a type needs no context.
_DTYPE_OF_IR = {
    "i1": SHORT_NAMES["bool"],
    **{f"i{b}": SHORT_NAMES[f"i{b}"] for b in (8, 16, 32, 64)},
    **{f"ui{b}": SHORT_NAMES[f"u{b}"] for b in (8, 16, 32, 64)},
    "f16": SHORT_NAMES["f16"],
    "bf16": bfloat16,
    "f32": SHORT_NAMES["f32"],
    "f64": SHORT_NAMES["f64"],
    "complex<f32>": SHORT_NAMES["c64"],
    "complex<f64>": SHORT_NAMES["c128"],
    "i2": SUB_BYTE_INTS["i2"],
    "i4": SUB_BYTE_INTS["i4"],
    "ui2": SUB_BYTE_INTS["u2"],
    "ui4": SUB_BYTE_INTS["u4"],
    "f8E4M3FN": LOW_FLOATS["f8e4m3fn"],
    "f8E5M2": LOW_FLOATS["f8e5m2"],
    "f8E4M3": LOW_FLOATS["f8e4m3"],
    "f8E3M4": LOW_FLOATS["f8e3m4"],
    "f8E4M3FNUZ": LOW_FLOATS["f8e4m3fnuz"],
    "f8E5M2FNUZ": LOW_FLOATS["f8e5m2fnuz"],
    "f8E4M3B11FNUZ": LOW_FLOATS["f8e4m3b11fnuz"],
    "f8E8M0FNU": LOW_FLOATS["f8e8m0fnu"],
    "f4E2M1FN": LOW_FLOATS["f4e2m1fn"],
}


def dtype_of_ir_type(t: ir.Type) -> np.dtype:
    """The dtype of an MLIR element type; TypeError for element types aotkit does not carry."""
    d = _DTYPE_OF_IR.get(str(t))
    if d is None:
        raise TypeError(f"element type {t} has no aotkit dtype; supported: {NAMES_TEXT}")
    return d


_QUANT_TYPE = re.compile(r'(line \d+, column \d+): .*?!"quant"<"([^"]*)">')


def quant_refusal(diagnostic: str) -> str | None:
    """Why a module whose parse failed on a `quant` dialect type cannot load (None when the
    failure is another): jaxlib 0.10.2's bindings do not register that dialect, so no
    aotkit context can hold `!quant.uniform<i8:f32, 0.1:-3>` and no backend sees it."""
    m = _QUANT_TYPE.search(diagnostic)
    if m is None:
        return None
    at, body = m.groups()
    return (
        f"{at}: element type !quant.{body} is a quantized type of MLIR's quant dialect, which "
        "jaxlib's MLIR bindings do not register, so aotkit cannot load the module for any "
        "backend; lower the quantized ops to integer arithmetic before saving it (StableHLO's "
        "stablehlo-legalize-quant-to-math pass), keeping int8 values and float scales"
    )
