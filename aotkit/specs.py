"""Argument specs: `ShapeDtype` and the compact `f32[2,3]` syntax the CLI uses."""

from __future__ import annotations

import difflib
import math
import re
from dataclasses import dataclass

import numpy as np

from aotkit import dtypes
from aotkit.symbolic import algebra

SPEC_SYNTAX = (
    "DTYPE[DIM,...] with DTYPE one of "
    + ", ".join(dtypes.ALL_NAMES)
    + " (or a NumPy name such as float32 or float8_e4m3fn) and non-negative integer dims, "
    "e.g. f32[] or f32[2,3] (or symbolic dims such as f32[b,784])"
)
_SPEC_RE = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*\[([^\[\]]*)\]\s*$")
# The largest dimension (int64, as MLIR and XLA store it) and the largest array in bytes that
# XLA sizes without aborting the process ("overflow in static extent product").
MAX_DIM = 2**63 - 1
MAX_BYTES = 2**63 - 1


@dataclass(frozen=True, slots=True, init=False)
class ShapeDtype:
    """The abstract value of an array: a shape and a dtype. Hashable; usable as an argument.

    A dimension may be symbolic (issue 25): a `aotkit.symbolic.algebra.Dim`, its text (`"b"`,
    `"2*t"`), or a `jax.export.symbolic_shape` dimension; `ShapeDtype(("b", 784), "float32")`
    prints `f32[b,784]`. Two specs are equal when their dimensions are the same expressions
    in scopes with the same constraints.
    """

    shape: tuple[int, ...]
    dtype: np.dtype

    def __init__(self, shape, dtype):
        try:
            shape = tuple(shape)
        except TypeError:
            shape = (shape,)
        for d in shape:
            if isinstance(d, bool) or not isinstance(d, int | np.integer) or d < 0:
                shape = _symbolic_shape(shape)
                break
        else:
            shape = tuple(int(d) for d in shape)
        dtype = dtypes.canonicalize(dtype, where="ShapeDtype")
        _check_size(shape, dtype)
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "dtype", dtype)

    def __eq__(self, other) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        try:
            return self.shape == other.shape and self.dtype == other.dtype
        except algebra.InconclusiveDimensionError:  # different symbolic expressions
            return False

    def __hash__(self) -> int:
        return hash((self.shape, self.dtype))

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    def __str__(self) -> str:
        return f"{dtypes.short_name(self.dtype)}[{','.join(map(dim_text, self.shape))}]"

    def __repr__(self) -> str:
        return f"ShapeDtype(shape={self.shape}, dtype={self.dtype.name})"


def dim_text(d) -> str:
    """A dimension as specs print it: `784`, `b`, `2*t+1` (no spaces)."""
    return str(d) if type(d) is int else str(d).replace(" ", "")


def _symbolic_shape(shape: tuple) -> tuple:
    """`shape` with symbolic dimensions (Dims, their texts, jax.export dims) as Dims, all in
    one scope; ValueError for anything else."""
    scope = None
    for d in shape:
        if isinstance(d, algebra.Dim):
            scope = d.scope
            break
    out = []
    for d in shape:
        if isinstance(d, str):
            try:
                d = algebra.parse_dim(d, scope)
            except ValueError as e:
                raise ValueError(f"ShapeDtype: shape {shape!r}: {e}") from None
        elif algebra.is_jax_dim(d):
            d = algebra.from_jax(d)
        if isinstance(d, algebra.Dim):
            out.append(d)
            continue
        if isinstance(d, bool) or not isinstance(d, int | np.integer) or d < 0:
            raise ValueError(
                f"ShapeDtype: shape {shape!r} must hold non-negative integers; "
                "use e.g. ShapeDtype((2, 3), 'float32')"
            )
        out.append(int(d))
    return tuple(out)


def unify_scopes(specs) -> tuple[ShapeDtype, ...]:
    """`specs` with every symbolic dimension in one scope: the one they share, or one that
    holds the constraints of all of theirs (symbols are the same by name). Static specs are
    returned as they are."""
    scopes: list[algebra.SymbolicScope] = []
    for s in specs:
        for d in s.shape:
            if isinstance(d, algebra.Dim) and d.scope not in scopes:
                scopes.append(d.scope)
    if len(scopes) <= 1:
        return tuple(specs)
    merged = algebra.merge_scopes(scopes)
    return tuple(
        s
        if algebra.is_static(s.shape)
        else ShapeDtype(tuple(algebra.rehome(d, merged) for d in s.shape), s.dtype)
        for s in specs
    )


def _check_size(shape: tuple[int, ...], dtype: np.dtype) -> None:
    """Refuses shapes XLA cannot size: a dimension past int64, or more than MAX_BYTES bytes
    (jaxlib 0.10.2 aborts the process compiling either)."""
    count = 1
    for d in shape:
        if type(d) is not int:  # symbolic: sized when the program is specialized
            continue
        if d > MAX_DIM:
            raise ValueError(
                f"ShapeDtype: dimension {d} of shape {shape} does not fit in 64 bits (at most "
                f"2**63 - 1); use smaller dimensions"
            )
        count *= d
    if count * dtype.itemsize > MAX_BYTES:
        raise ValueError(
            f"ShapeDtype: shape {shape} of {dtype.name} holds {count:,} elements "
            f"({count * dtype.itemsize:,} bytes), more than XLA can address "
            f"({MAX_BYTES:,} bytes); use a smaller shape"
        )


def spec(text: str) -> ShapeDtype:
    """Parses `f32[2,3]`, `bf16[]`, `float32[4]` into a ShapeDtype."""
    if not isinstance(text, str):
        raise TypeError(f"spec: expected a string such as 'f32[2,3]', got {type(text).__name__}")
    m = _SPEC_RE.match(text)
    if m is None:
        raise ValueError(f"spec: cannot parse {short_text(text)}; expected {SPEC_SYNTAX}")
    name, dims = m.groups()
    try:
        dtype = dtypes.canonicalize(name)
    except TypeError:
        names = [*dtypes.ALL_NAMES, *(dtypes.canonicalize(n).name for n in dtypes.ALL_NAMES)]
        # Swapped letters first (`f23`, `i46`), then the closest spelling.
        near = [n for n in names if sorted(n) == sorted(name)]
        near = near or difflib.get_close_matches(name, names, n=1, cutoff=0.5)
        hint = f" (did you mean {near[0]!r}?)" if near else ""
        raise ValueError(
            f"spec: unknown dtype {name!r} in {text!r}{hint}; expected {SPEC_SYNTAX}"
        ) from None
    shape = []
    if dims.strip():
        for part in algebra.split_dims(dims):
            part = part.strip()
            if part.isascii() and part.isdigit():
                if len(part.lstrip("0")) > len(str(MAX_DIM)):  # before int() reads it all
                    raise ValueError(
                        f"spec: dimension {short_text(part, 40)} ({len(part)} digits) in "
                        f"{short_text(text)} does not fit in 64 bits (at most 2**63 - 1); use "
                        "smaller dimensions"
                    )
                shape.append(int(part))
                continue
            try:
                d = algebra.parse_dim(part)
            except (TypeError, ValueError):
                d = None
            if not isinstance(d, algebra.Dim):
                raise ValueError(
                    f"spec: bad dimension {short_text(part)} in {short_text(text)}; "
                    f"expected {SPEC_SYNTAX}"
                )
            shape.append(d)
    return ShapeDtype(tuple(shape), dtype)


def short_text(text: str, limit: int = 80) -> str:
    """`text` quoted, its middle cut when it is longer than `limit` characters."""
    if len(text) <= limit:
        return repr(text)
    return repr(text[: limit // 2] + "..." + text[-limit // 4 :])


def spec_of(x) -> ShapeDtype:
    """The ShapeDtype of a concrete value or a spec (used for cache keys and checks).

    A Python scalar gets the dtype of a scalar argument (`dtypes.scalar_argument_dtype`:
    float32 for a float unless x64_scalars is on); an int out of that dtype's range is an
    OverflowError.
    """
    if isinstance(x, ShapeDtype):
        return x
    kind = dtypes.weak_kind(x)
    if kind is not None:
        dtype = dtypes.scalar_argument_dtype(kind)
        if kind is int:
            info = np.iinfo(dtype)
            if not info.min <= x <= info.max:
                raise OverflowError(
                    f"Python int {x} does not fit {dtype.name}, the dtype of Python int "
                    "arguments; pass np.int64(...) (or set aotkit.config.update('x64_scalars', "
                    "True))"
                )
        return ShapeDtype((), dtype)
    shape = getattr(x, "shape", None)
    dtype = getattr(x, "dtype", None)
    if shape is not None and dtype is not None:
        return ShapeDtype(tuple(shape), dtype)
    return ShapeDtype(np.shape(x), np.asarray(x).dtype)


def restore_dtype(x, spec: ShapeDtype):
    """`x` as read from a .npy or .npz file, viewed as `spec`'s dtype where NumPy kept only
    raw bytes: `numpy.save` writes bfloat16 and the low-precision ml_dtypes types (int4,
    float8_e4m3fn, ...) as `|V2`/`|V1`, so such an array of `spec`'s shape and item size holds
    exactly `spec`'s values. Any other `x` is returned as it is."""
    if (
        isinstance(x, np.ndarray)
        and x.dtype.kind == "V"
        and x.dtype.names is None
        and x.dtype.itemsize == spec.dtype.itemsize
        and x.shape == spec.shape
        and (spec.dtype == dtypes.bfloat16 or dtypes.is_low_precision(spec.dtype))
    ):
        return x.view(spec.dtype)
    return x
