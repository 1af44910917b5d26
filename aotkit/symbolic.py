"""The symbolic part of a signature: specs with symbolic dimensions (`f32[b,784]`), their
constraints, and the values a call's argument shapes give the symbols.

A value layer under the compile stage (aotkit/specialize.py) and the artifact format
(aotkit/artifacts.py, which reads symbolic specs and constraints from headers): it builds no
IR and compiles nothing. `Shapes.bind` is the call-time check: it reads each symbol's value
from the first argument dimension that is that symbol alone, solves dimensions written as
linear expressions (`2*b + 1`), then checks every dimension and every constraint, raising
`ArgumentMismatch` (which `Compiled` words as an error naming the argument) before anything
is compiled.

Until aotkit/shapes.py (the tracer's symbolic dimension type) is in, the dimension
expressions are aotkit/_dims.py's and a symbolic spec is a `SymbolicSpec`.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Sequence

import numpy as np

from aotkit import _dims, dtypes
from aotkit import specs as _specs
from aotkit.backends.base import ArgumentMismatch, describe
from aotkit.specs import ShapeDtype

# --- symbolic specs ------------------------------------------------------------------------


class SymbolicSpec(ShapeDtype):
    """A ShapeDtype whose shape holds symbolic dimensions (`_dims.Expr`) beside ints:
    `f32[b,784]`. Its `constraints` are those of the program it belongs to."""

    __slots__ = ("constraints",)

    def __init__(self, shape, dtype, constraints=()):
        shape = tuple(shape)
        for d in shape:
            if not (isinstance(d, _dims.Expr) or type(d) is int and d >= 0):
                raise ValueError(
                    f"SymbolicSpec: dimension {d!r} of {shape!r} is neither a size nor a "
                    "symbolic expression"
                )
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "dtype", dtypes.canonicalize(dtype, where="SymbolicSpec"))
        object.__setattr__(self, "constraints", tuple(constraints))

    @property
    def size(self):
        raise TypeError(f"{self} has a symbolic size; specialize it first")

    def __repr__(self) -> str:
        return f"SymbolicSpec(shape=({', '.join(map(str, self.shape))}), dtype={self.dtype.name})"


def is_symbolic(specs: Sequence) -> bool:
    """Whether any spec of `specs` has a symbolic dimension."""
    return any(not isinstance(d, int) for s in specs for d in getattr(s, "shape", ()))


_SPEC = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*\[(.*)\]\s*$", re.S)


def parse_spec(text: str, constraints=()) -> ShapeDtype:
    """`f32[2,3]` (a ShapeDtype) or `f32[b,2*b]` (a SymbolicSpec); ValueError otherwise."""
    if not isinstance(text, str):
        raise ValueError(f"spec {text!r} is not text")
    try:
        return _specs.spec(text)
    except ValueError:
        pass
    m = _SPEC.match(text)
    if m is None:
        raise ValueError(f"cannot parse spec {text!r}")
    name, body = m.groups()
    dims = [_dims.parse_dim(part) for part in _split_dims(body)] if body.strip() else []
    return SymbolicSpec(tuple(dims), dtypes.canonicalize(name), constraints)


def _split_dims(body: str) -> list[str]:
    """The dimensions of `b,floordiv(t, 2)`: commas at the top level only."""
    parts, depth, start = [], 0, 0
    for i, c in enumerate(body):
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif c == "," and depth == 0:
            parts.append(body[start:i])
            start = i + 1
    parts.append(body[start:])
    return parts


# --- the symbolic part of a signature -----------------------------------------------------


def leaf_shape(leaf):
    """A leaf's shape as a call sees it (a Python scalar is 0-d), or None for a non-array."""
    shape = getattr(leaf, "shape", None)
    if shape is not None:
        return tuple(shape)
    if dtypes.weak_kind(leaf) is not None:
        return ()
    return None


@dataclasses.dataclass(frozen=True, eq=False)
class Shapes:
    """The symbols of a signature, in the order they first appear in its argument specs,
    its constraints, and its flat argument and result specs (symbolic)."""

    in_specs: tuple
    out_specs: tuple
    constraints: tuple
    symbols: tuple[str, ...]

    @classmethod
    def of(cls, in_specs, out_specs, constraints=None, where: str = "") -> Shapes:
        """The Shapes of a signature; ValueError where a symbol of a result or a constraint
        appears in no argument (no call could give it a value)."""
        if constraints is None:
            found = []
            for s in in_specs:
                for c in getattr(s, "constraints", ()):
                    if c not in found:
                        found.append(c)
            constraints = tuple(found)
        symbols: list[str] = []
        for s in in_specs:
            for d in s.shape:
                if isinstance(d, _dims.Expr):
                    for name in sorted(d.symbols()):
                        if name not in symbols:
                            symbols.append(name)
        known = set(symbols)
        for what, items in (
            ("result", [d for s in out_specs for d in s.shape if isinstance(d, _dims.Expr)]),
            ("constraint", list(constraints)),
        ):
            for item in items:
                missing = sorted(item.symbols() - known)
                if missing:
                    raise ValueError(
                        f"{where}: {what} {item} names symbol {missing[0]!r}, which no "
                        "argument's shape has; every symbol must size an argument"
                    )
        return cls(tuple(in_specs), tuple(out_specs), tuple(constraints), tuple(symbols))

    def key(self, values: dict[str, int]) -> tuple[int, ...]:
        return tuple(values[s] for s in self.symbols)

    def text(self, values: dict[str, int]) -> str:
        """`b = 8, t = 128`."""
        return ", ".join(f"{s} = {values[s]}" for s in self.symbols)

    def concrete(self, values: dict[str, int]) -> tuple[tuple, tuple]:
        """The flat argument and result specs for `values`."""

        def one(spec):
            if not any(isinstance(d, _dims.Expr) for d in spec.shape):
                return spec
            return ShapeDtype(
                tuple(d.evaluate(values) if isinstance(d, _dims.Expr) else d for d in spec.shape),
                spec.dtype,
            )

        return tuple(map(one, self.in_specs)), tuple(map(one, self.out_specs))

    def bind(self, leaves: Sequence, names: Callable[[int], str]) -> dict[str, int]:
        """The symbols' values from the argument leaves; `ArgumentMismatch` naming the leaf
        (its path is `names(i)`) where a shape does not fit."""
        values: dict[str, int] = {}
        source: dict[str, tuple[int, tuple]] = {}
        pending: list[tuple[int, tuple, _dims.Expr, int]] = []
        for i, (spec, leaf) in enumerate(zip(self.in_specs, leaves, strict=True)):
            shape = leaf_shape(leaf)
            dtype = getattr(leaf, "dtype", None)
            if (
                shape is None
                or len(shape) != len(spec.shape)
                or (dtype is not None and isinstance(dtype, np.dtype) and dtype != spec.dtype)
            ):
                raise ArgumentMismatch(i, f"expected {spec}, got {describe(leaf)}")
            for d, n in zip(spec.shape, shape):
                if isinstance(d, int):
                    if d != n:
                        raise ArgumentMismatch(i, f"expected {spec}, got {describe(leaf)}")
                elif d.is_symbol:
                    name = d.node[1]
                    if name in values and values[name] != n:
                        j, other = source[name]
                        raise ArgumentMismatch(
                            i,
                            f"has {name} = {n} (shape {shape} for {spec}), but {names(j)} has "
                            f"{name} = {values[name]} (shape {other} for {self.in_specs[j]}); "
                            f"pass arrays whose sizes agree on {name}",
                            ValueError,
                            says_fix=True,
                        )
                    if name not in values:
                        values[name], source[name] = n, (i, shape)
                else:
                    pending.append((i, shape, d, n))
        _solve(pending, values, source)
        for i, shape, d, n in pending:
            unknown = sorted(d.symbols() - values.keys())
            if unknown:
                raise ArgumentMismatch(
                    i,
                    f"has shape {shape} for {self.in_specs[i]}, which does not give "
                    f"{unknown[0]}: a dimension {d} has more than one unknown; pass an "
                    f"argument whose dimension is {unknown[0]} alone",
                    ValueError,
                    says_fix=True,
                )
            try:
                expected = d.evaluate(values)
            except ValueError as e:
                raise ArgumentMismatch(i, f"has shape {shape}: {e}", ValueError) from None
            if expected != n:
                given = ", ".join(f"{s} = {values[s]}" for s in sorted(d.symbols()))
                raise ArgumentMismatch(
                    i,
                    f"has shape {shape} for {self.in_specs[i]}, where {d} = {expected} "
                    f"({given}), not {n}; pass arrays whose sizes agree",
                    ValueError,
                    says_fix=True,
                )
        for constraint in self.constraints:
            try:
                holds = constraint.holds(values)
            except ValueError as e:
                holds, detail = False, f" ({e})"
            else:
                detail = ""
            if not holds:
                first = sorted(constraint.symbols(), key=self.symbols.index)
                i, shape = source[first[0]] if first else (0, leaf_shape(leaves[0]))
                given = ", ".join(f"{s} = {values[s]}" for s in first)
                raise ArgumentMismatch(
                    i,
                    f"has shape {shape} for {self.in_specs[i]}, giving {given}, which breaks "
                    f"the constraint {constraint}{detail}; pass shapes for which it holds",
                    ValueError,
                    says_fix=True,
                )
        return values

    def check_values(self, values: dict[str, int], where: str) -> None:
        """ValueError unless `values` gives every symbol a size and meets every constraint
        (`Compiled.specialize`)."""
        for name in self.symbols:
            v = values.get(name)
            if type(v) is not int or v < 0:
                raise ValueError(
                    f"{where}: {name} = {v!r}; give every symbol ({', '.join(self.symbols)}) "
                    "a size >= 0"
                )
        for constraint in self.constraints:
            if not constraint.holds(values):
                raise ValueError(
                    f"{where}: {self.text(values)} breaks the constraint {constraint}; give "
                    "sizes for which it holds"
                )
        for spec in self.in_specs + self.out_specs:
            for d in spec.shape:
                if isinstance(d, _dims.Expr) and d.evaluate(values) < 0:
                    raise ValueError(
                        f"{where}: {self.text(values)} makes dimension {d} of {spec} "
                        f"{d.evaluate(values)}; give sizes for which every dimension is >= 0"
                    )


def _solve(pending, values: dict[str, int], source: dict) -> None:
    """Gives a value to each symbol that appears alone in a linear dimension (`2*b + 1`),
    from the dimensions already known; `bind` then checks every dimension."""
    progress = True
    while progress:
        progress = False
        for i, shape, d, n in pending:
            unknown = d.symbols() - values.keys()
            if len(unknown) != 1:
                continue
            (name,) = unknown
            try:
                c = d.evaluate({**values, name: 0})
                a = d.evaluate({**values, name: 1}) - c
                linear = d.evaluate({**values, name: 2}) == 2 * a + c
            except ValueError:
                continue
            if a != 0 and linear and (n - c) % a == 0 and (n - c) // a >= 0:
                values[name] = (n - c) // a
                source[name] = (i, shape)
                progress = True
