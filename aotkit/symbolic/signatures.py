"""The symbolic part of a signature: specs with symbolic dimensions (`f32[b,784]`, whose
dimensions are `aotkit.symbolic.algebra.Dim`s of one `SymbolicScope` of constraints), and the values
a call's argument shapes give the symbols.

A value layer under the compile stage (aotkit/symbolic/specialize.py) and the artifact
format (aotkit/artifacts.py, which reads symbolic specs and constraints from headers): it
builds no IR and compiles nothing. `SymbolicSignature.bind` is the call-time check: it reads
each symbol's value from the first argument dimension that is that symbol alone, solves
dimensions written as linear expressions (`2*b + 1`), then checks every dimension and every
constraint, raising `ArgumentMismatch` (which `Compiled` words as an error naming the
argument) before anything is compiled.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import numpy as np

from aotkit import dtypes
from aotkit import specs as _specs
from aotkit.backends.base import ArgumentMismatch, describe
from aotkit.specs import ShapeDtype
from aotkit.symbolic import algebra

# --- symbolic specs ------------------------------------------------------------------------


def is_symbolic(specs: Sequence) -> bool:
    """Whether any spec of `specs` has a symbolic dimension."""
    return any(isinstance(d, algebra.Dim) for s in specs for d in getattr(s, "shape", ()))


def parse_spec(text: str, scope: algebra.SymbolicScope) -> ShapeDtype:
    """`f32[2,3]` or `f32[b,2*b]`, its symbolic dimensions in `scope`; ValueError otherwise
    (texts are parsed by aotkit/symbolic/algebra.py's bounded parser: data, never code)."""
    spec = _specs.spec(text)
    if not any(isinstance(d, algebra.Dim) for d in spec.shape):
        return spec
    return ShapeDtype(tuple(algebra.rehome(d, scope) for d in spec.shape), spec.dtype)


def _constraint_symbols(text: str) -> frozenset[str]:
    return frozenset(algebra.SymbolicScope((text,)).symbols)


def _complete(scope: algebra.SymbolicScope, values: dict[str, int]) -> dict[str, int]:
    """`values` with the symbols an equality constraint (`b == 2*k`) made expressions of
    the others."""
    full = dict(values)
    for name in scope.symbols - values.keys():
        d = scope.symbol(name)
        if isinstance(d, algebra.Dim) and d.symbols() <= values.keys():
            full[name] = d.evaluate(values)
        elif isinstance(d, int):
            full[name] = d
    return full


def _broken(scope: algebra.SymbolicScope, values: dict[str, int]) -> str | None:
    """The first constraint of `scope` that `values` break, or None."""
    values = _complete(scope, values)
    try:
        scope.check(values)
    except ValueError:
        pass
    else:
        return None
    for text in scope.constraints:
        try:
            algebra.SymbolicScope((text,)).check({k: values[k] for k in _constraint_symbols(text)})
        except ValueError:
            return text
    return "; ".join(scope.constraints)


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
class SymbolicSignature:
    """The symbols of a signature, in the order they first appear in its argument specs,
    its constraints, and its flat argument and result specs (symbolic)."""

    in_specs: tuple
    out_specs: tuple
    scope: algebra.SymbolicScope
    symbols: tuple[str, ...]

    @classmethod
    def of(cls, in_specs, out_specs, scope=None, where: str = "") -> SymbolicSignature:
        """The symbolic part of a signature (its constraints: those of its dimensions' scope, or
        `scope`); ValueError where a symbol of a result or a constraint appears in no
        argument (no call could give it a value)."""
        if scope is None:
            scope = algebra.scope_of(tuple(in_specs) + tuple(out_specs)) or algebra.DEFAULT_SCOPE
        symbols: list[str] = []
        for s in in_specs:
            for d in s.shape:
                if isinstance(d, algebra.Dim):
                    for name in sorted(d.symbols()):
                        if name not in symbols:
                            symbols.append(name)
        known = set(symbols)
        named = [
            ("result", s, d.symbols())
            for s in out_specs
            for d in s.shape
            if isinstance(d, algebra.Dim)
        ]
        # An equality (`b == 2*k`) rewrote its left side everywhere: its right side counts.
        named += [("constraint", c, algebra.constraint_needs(c)) for c in scope.constraints]
        for what, item, used in named:
            missing = sorted(used - known)
            if missing:
                raise ValueError(
                    f"{where}: {what} {item} names symbol {missing[0]!r}, which no "
                    "argument's shape has; every symbol must size an argument"
                )
        return cls(tuple(in_specs), tuple(out_specs), scope, tuple(symbols))

    @property
    def constraints(self) -> tuple[str, ...]:
        return self.scope.constraints

    def key(self, values: dict[str, int]) -> tuple[int, ...]:
        return tuple(values[s] for s in self.symbols)

    def text(self, values: dict[str, int]) -> str:
        """`b = 8, t = 128`."""
        return ", ".join(f"{s} = {values[s]}" for s in self.symbols)

    def concrete(self, values: dict[str, int]) -> tuple[tuple, tuple]:
        """The flat argument and result specs for `values`."""

        def one(spec):
            if not any(isinstance(d, algebra.Dim) for d in spec.shape):
                return spec
            return ShapeDtype(algebra.evaluate_shape(spec.shape, values), spec.dtype)

        return tuple(map(one, self.in_specs)), tuple(map(one, self.out_specs))

    def bind(self, leaves: Sequence, names: Callable[[int], str]) -> dict[str, int]:
        """The symbols' values from the argument leaves; `ArgumentMismatch` naming the leaf
        (its path is `names(i)`) where a shape does not fit."""
        values: dict[str, int] = {}
        source: dict[str, tuple[int, tuple]] = {}
        pending: list[tuple[int, tuple, algebra.Dim, int]] = []
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
                elif d.as_symbol() is not None:
                    name = d.as_symbol()
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
            except (ValueError, ZeroDivisionError) as e:
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
        broken = _broken(self.scope, values)
        if broken is not None:
            constraint = broken
            first = sorted(_constraint_symbols(constraint), key=self.symbols.index)
            i, shape = source[first[0]] if first else (0, leaf_shape(leaves[0]))
            given = ", ".join(f"{s} = {values[s]}" for s in first)
            raise ArgumentMismatch(
                i,
                f"has shape {shape} for {self.in_specs[i]}, giving {given}, which breaks "
                f"the constraint {constraint}; pass shapes for which it holds",
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
        broken = _broken(self.scope, values)
        if broken is not None:
            raise ValueError(
                f"{where}: {self.text(values)} breaks the constraint {broken}; give "
                "sizes for which it holds"
            )
        for spec in self.in_specs + self.out_specs:
            for d in spec.shape:
                if not isinstance(d, algebra.Dim):
                    continue
                try:
                    n = d.evaluate(values)
                except ZeroDivisionError:
                    raise ValueError(
                        f"{where}: {self.text(values)} makes dimension {d} of {spec} divide "
                        "by zero; give sizes for which every dimension has a value"
                    ) from None
                if n < 0:
                    raise ValueError(
                        f"{where}: {self.text(values)} makes dimension {d} of {spec} {n}; "
                        "give sizes for which every dimension is >= 0"
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
            except (ValueError, ZeroDivisionError):
                continue
            if a != 0 and linear and (n - c) % a == 0 and (n - c) // a >= 0:
                values[name] = (n - c) // a
                source[name] = (i, shape)
                progress = True
