"""Element types: the names aotkit accepts, their MLIR types, and NumPy 2 promotion.

Promotion follows NumPy 2 with NEP 50: Python scalars are "weak" and take the dtype of
the array they meet (`f32 * 2.0 -> f32`, `i8 + 1 -> i8`), unless their kind is higher
(`i32 + 1.5 -> f64`). bfloat16 (from ml_dtypes) has no NumPy promotion with float16 or
with integers wider than 8 bits; aotkit promotes it as if it were float16 there
(`bf16 + f16 -> f32`, `bf16 + i16 -> f32`, `bf16 + i32 -> f64`), a documented divergence.
"""

from __future__ import annotations

import functools

import ml_dtypes
import numpy as np
from jaxlib.mlir import ir

from aotkit import _context, config

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
SUPPORTED: frozenset[np.dtype] = frozenset(SHORT_NAMES.values())
_SHORT_OF = {d: n for n, d in SHORT_NAMES.items()}
_BY_NAME = {
    **SHORT_NAMES,
    **{d.name: d for d in SHORT_NAMES.values()},
    "bool_": SHORT_NAMES["bool"],
}

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
    raise TypeError(
        f"{where}: unsupported dtype {dtype!r}; aotkit supports "
        f"{', '.join(SHORT_NAMES)} (NumPy names such as 'float32' work too)"
    )


def is_bool(d: np.dtype) -> bool:
    return d.kind == "b"


def is_signed_int(d: np.dtype) -> bool:
    return d.kind == "i"


def is_unsigned_int(d: np.dtype) -> bool:
    return d.kind == "u"


def is_integer(d: np.dtype) -> bool:
    return d.kind in "iu"


def is_float(d: np.dtype) -> bool:
    return d.kind == "f" or d == bfloat16


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


def _strong_pair(a: np.dtype, b: np.dtype) -> np.dtype:
    if a == b:
        return a
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
    if kind is int:  # only bool is below int
        return _DEFAULT_OF_WEAK[int]
    if kind is float:
        return _DEFAULT_OF_WEAK[float]
    return complex_dtype(d)


def kind_rank(d: np.dtype) -> int:
    """bool 0 < integers 1 < floats (bfloat16 too) 2 < complex 3: the NEP 50 kind order."""
    if d.kind == "b":
        return 0
    if d.kind in "iu":
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


def weak_kind(x) -> type | None:
    """The weak kind of a Python scalar (bool before int: bool is an int subclass)."""
    t = type(x)
    if t in WEAK_RANK:
        return t
    if isinstance(x, bool):
        return bool
    if isinstance(x, int) and not isinstance(x, np.integer):
        return int
    if isinstance(x, float) and not isinstance(x, np.floating):
        return float
    if isinstance(x, complex) and not isinstance(x, np.complexfloating):
        return complex
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
        t = cache[key] = ir.RankedTensorType.get(shape, ir_element_type(dtype))
    return t


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
}


def dtype_of_ir_type(t: ir.Type) -> np.dtype:
    """The dtype of an MLIR element type; TypeError for element types aotkit does not carry."""
    d = _DTYPE_OF_IR.get(str(t))
    if d is None:
        raise TypeError(
            f"element type {t} has no aotkit dtype; supported: {', '.join(SHORT_NAMES)}"
        )
    return d
