"""Symbolic dimensions: `Dim` expressions over named symbols, and the `SymbolicScope` of
constraints that decides comparisons between them (issue 25).

A symbolic shape such as `f32[b,784]` traces into one dynamic StableHLO module
(`tensor<?x784xf32>`) that serves every batch size; compiling it for XLA specializes it to
the concrete sizes of a call. This module is the value layer under both halves: the tracer's
shape rules compute with `Dim`s as they do with ints, and the compiler evaluates and checks
them against a call's sizes (`SymbolicScope.evaluate`, `SymbolicScope.check`, `solve`). It
imports nothing that builds IR.

A `Dim` is a polynomial with integer coefficients over atoms: symbols (`b`), and
`floordiv(e, k)`, `mod(e, k)`, `max(a, b)`, `min(a, b)` of expressions, kept as atoms. It is
immutable and hashable, normalized (an expression without symbols is a plain int) and prints
as JAX's symbolic dimensions do (`b`, `2*t`, `b*t + 1`, `floordiv(t, 8)`), so its text parses
back here and in `jax.export.symbolic_shape`.

Every symbol is >= 0, and nothing more unless a constraint says so: a program traced for `b`
must serve b = 0 and b = 1 too, so a question such as `b >= 4` has no answer by default.
Ordering comparisons (`<`, `<=`, `>`, `>=`), `bool()`, `int()` and use as an index return
what the scope's constraints decide and otherwise raise `InconclusiveDimensionError`,
naming the user's line, the question and the constraint that would answer it. Equality is
the exception, as in JAX: `==` is True when the expressions are the same or the
constraints make them equal, and False otherwise (it runs in hashing and in comparisons of
shape tuples, which cannot raise; a rule asking `b == 1` takes its general path, which
serves b == 1 as well). Constraints (JAX's `jax.export` syntax is the model):

    e1 >= e2, e1 <= e2, e1 > e2, e1 < e2     bounds: b >= 1, t <= 2048, a + b <= 16
    e1 == e2                                  e1 one term: b == 2*k (b is 2*k everywhere),
                                              t % 8 == 0 (t is a multiple of 8)
    e1 != e2                                  checked at call time only

Expressions use `+ - * // %`, integer literals, parentheses and `floordiv(a, k)`,
`mod(a, k)`, `max(a, b)`, `min(a, b)`, `non_negative(a)`. A text is parsed by a bounded
recursive descent (never `eval`), so text from a file is safe to read.
"""

from __future__ import annotations

import math
import os
import re
import sys

import numpy as np

from aotkit import _compat

__all__ = [
    "DEFAULT_SCOPE",
    "Dim",
    "InconclusiveDimensionError",
    "SymbolicScope",
    "dim_max",
    "dim_min",
    "divide_exact",
    "evaluate_shape",
    "from_jax",
    "is_static",
    "is_symbolic",
    "parse_dim",
    "same",
    "same_shape",
    "scope_of",
    "solve",
    "symbolic_shape",
    "symbols_of",
]

MAX_TEXT = 1000
MAX_DEPTH = 32
_INF = math.inf
# Every symbol is a size: 0 <= s <= 2**63 - 1 (MLIR and XLA hold sizes as int64).
MAX_SIZE = 2**63 - 1

HOW_TO_DECIDE = (
    "add a constraint such as {example} with aotkit.symbolic_shape(..., constraints=...), "
    "or make the dimension static"
)


class InconclusiveDimensionError(TypeError):
    """A question about symbolic dimensions (`b >= 4`, `b == 1`, `int(b)`) that the scope's
    constraints do not answer."""


# --- Where the user is (for messages; this module is below the tracer) ---------------------

_AOTKIT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_NUMPY_DIR = os.path.dirname(os.path.abspath(np.__file__)) + os.sep


def user_site() -> str:
    """`file.py:12` of the innermost frame outside aotkit and NumPy."""
    f = sys._getframe(1)
    while f is not None:
        name = f.f_code.co_filename
        if not (
            name.startswith((_AOTKIT_DIR, _NUMPY_DIR)) or name == "<__array_function__ internals>"
        ):
            return f"{name}:{f.f_lineno}"
        f = f.f_back
    return "<unknown>"


# --- Parsing ---------------------------------------------------------------------------------

_TOKEN = re.compile(r"\s*(?:(\d+)|([A-Za-z_][A-Za-z0-9_]*)|(==|!=|>=|<=|//|[-+*%(),<>]))")
_FUNCTIONS = {"floordiv": 2, "mod": 2, "max": 2, "min": 2, "non_negative": 1}
_COMPARISONS = ("==", "!=", ">=", "<=", ">", "<")


class _Parser:
    """Recursive descent over `text` into a small tree: ("int", n), ("sym", name),
    (op, a, b) for + - * // %, ("neg", a), ("call", name, args)."""

    def __init__(self, text: str, what: str):
        self.text = text
        self.what = what
        if not isinstance(text, str):
            raise TypeError(f"{what}: expected a string, got {type(text).__name__} {text!r:.80}")
        if len(text) > MAX_TEXT:
            raise ValueError(
                f"{what}: {text[:40]!r}... is {len(text)} characters long, more than "
                f"{MAX_TEXT}; write a shorter expression"
            )
        self.tokens = self._tokens(text)
        self.pos = 0
        self.depth = 0

    def _tokens(self, text: str) -> list[str]:
        tokens, pos = [], 0
        while pos < len(text):
            if text[pos:].strip() == "":
                break
            m = _TOKEN.match(text, pos)
            if m is None:
                bad = text[pos:].strip()[:1]
                raise self.error(f"unexpected character {bad!r}")
            tokens.append(m.group(m.lastindex))
            pos = m.end()
        return tokens

    def error(self, detail: str) -> ValueError:
        return ValueError(
            f"{self.what}: cannot parse {self.text!r}: {detail}; expected an integer expression "
            "over symbols such as 'b', '2*t + 1', 't // 8', 'mod(t, 8)'"
        )

    def peek(self) -> str | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self, expected: str | None = None) -> str:
        token = self.peek()
        if token is None:
            raise self.error("it ends too early")
        if expected is not None and token != expected:
            raise self.error(f"expected {expected!r}, found {token!r}")
        self.pos += 1
        return token

    def end(self) -> None:
        if self.peek() is not None:
            raise self.error(f"unexpected {self.peek()!r}")

    def whole(self) -> tuple:
        if not self.tokens:
            raise self.error("it is empty")
        node = self.expr()
        self.end()
        return node

    def constraint(self) -> tuple[str, tuple, tuple]:
        left = self.expr()
        op = self.peek()
        if op not in _COMPARISONS:
            raise self.error(
                "a constraint compares two expressions with one of ==, !=, >=, <=, >, <"
            )
        self.take()
        right = self.expr()
        self.end()
        return op, left, right

    def expr(self) -> tuple:
        node = self.term()
        while self.peek() in ("+", "-"):
            node = (self.take(), node, self.term())
        return node

    def term(self) -> tuple:
        node = self.unary()
        while self.peek() in ("*", "//", "%"):
            node = (self.take(), node, self.unary())
        return node

    def unary(self) -> tuple:
        if self.peek() == "-":
            self.take()
            return ("neg", self.unary())
        if self.peek() == "+":
            self.take()
            return self.unary()
        return self.atom()

    def atom(self) -> tuple:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise self.error(f"it nests deeper than {MAX_DEPTH} levels")
        try:
            token = self.take()
            if token.isdigit():
                return ("int", int(token))
            if token == "(":
                node = self.expr()
                self.take(")")
                return node
            if token[0].isalpha() or token[0] == "_":
                if self.peek() == "(":
                    if token not in _FUNCTIONS:
                        raise self.error(
                            f"unknown function {token!r} (known: {', '.join(_FUNCTIONS)})"
                        )
                    self.take("(")
                    args = [self.expr()]
                    while self.peek() == ",":
                        self.take()
                        args.append(self.expr())
                    self.take(")")
                    if len(args) != _FUNCTIONS[token]:
                        raise self.error(f"{token} takes {_FUNCTIONS[token]} argument(s)")
                    return ("call", token, tuple(args))
                if token in _FUNCTIONS:
                    raise self.error(f"{token!r} is a function, not a symbol")
                return ("sym", token)
            raise self.error(f"unexpected {token!r}")
        finally:
            self.depth -= 1


def _eval_tree(node: tuple, values, scope: SymbolicScope | None = None):
    """The value of a parsed tree: ints for ints (`values` maps symbols to ints), else Dims
    of `scope`."""
    kind = node[0]
    if kind == "int":
        return node[1]
    if kind == "sym":
        if scope is not None:
            return scope.symbol(node[1])
        return values[node[1]]
    if kind == "neg":
        return -_eval_tree(node[1], values, scope)
    if kind == "call":
        args = [_eval_tree(a, values, scope) for a in node[2]]
        name = node[1]
        if name == "non_negative":
            return dim_max(args[0], 0)
        if name == "max":
            return dim_max(*args)
        if name == "min":
            return dim_min(*args)
        a, b = args
        return _floordiv(a, b) if name == "floordiv" else _mod(a, b)
    a = _eval_tree(node[1], values, scope)
    b = _eval_tree(node[2], values, scope)
    if kind == "+":
        return a + b
    if kind == "-":
        return a - b
    if kind == "*":
        return a * b
    if kind == "//":
        return _floordiv(a, b)
    return _mod(a, b)


def constraint_needs(text: str) -> frozenset[str]:
    """The symbols a constraint needs values of from a program's arguments: all of an
    inequality's; an equality's right side, and its left side unless that is one symbol
    (times a number), which the equality defines (`b == 2*k` needs k; `t % 8 == 0`, t)."""
    op, left, right = _Parser(text, f"symbolic constraint {text!r}").constraint()
    needs = _tree_symbols(right)
    bare = left
    if bare[0] == "*" and bare[1][0] == "int":
        bare = bare[2]
    if op != "==" or bare[0] != "sym":
        needs |= _tree_symbols(left)
    return frozenset(needs)


def _tree_symbols(node: tuple) -> set[str]:
    if node[0] == "sym":
        return {node[1]}
    if node[0] == "int":
        return set()
    if node[0] == "call":
        return set().union(*(_tree_symbols(a) for a in node[2]))
    return set().union(*(_tree_symbols(a) for a in node[1:]))


# --- Atoms and expressions -----------------------------------------------------------------


def _key(x) -> tuple:
    """A total, structural sort key of an int, a Dim or an atom."""
    if isinstance(x, Dim):
        return (1, x._sort_key)
    if isinstance(x, str):
        return (0, x)
    if isinstance(x, _Op):
        return (1, x.key)
    return (0, int(x))


class _Op:
    """An atom `name(args)`: floordiv(e, k), mod(e, k), max(a, b), min(a, b). Compared and
    hashed by structure only."""

    __slots__ = ("name", "args", "key", "_hash")

    def __init__(self, name: str, args: tuple):
        self.name = name
        self.args = args
        self.key = (name, *(_key(a) for a in args))
        self._hash = hash(self.key)

    def __eq__(self, other) -> bool:
        return type(other) is _Op and self.key == other.key

    def __hash__(self) -> int:
        return self._hash

    def __str__(self) -> str:
        return f"{self.name}({', '.join(map(str, self.args))})"


def _atom_key(atom) -> tuple:
    return (0, atom) if isinstance(atom, str) else (1, atom.key)


def _mono_key(mono: tuple) -> tuple:
    return tuple((_atom_key(a), p) for a, p in mono)


def _mono_mul(m1: tuple, m2: tuple) -> tuple:
    if not m1:
        return m2
    if not m2:
        return m1
    powers: dict = {}
    for a, p in m1 + m2:
        powers[a] = powers.get(a, 0) + p
    return tuple(sorted(powers.items(), key=lambda ap: _atom_key(ap[0])))


def _degree(mono: tuple) -> int:
    return sum(p for _, p in mono)


def _is_int(x) -> bool:
    return isinstance(x, int | np.integer) and not isinstance(x, bool | np.bool_)


class Dim:
    """A symbolic dimension: an integer polynomial over symbols and floordiv/mod/max/min
    atoms, in one `SymbolicScope`. Arithmetic with ints and Dims gives Dims (or ints, when the
    symbols cancel); comparisons are decided by the scope's constraints or raise
    `InconclusiveDimensionError`."""

    __slots__ = ("terms", "scope", "_hash", "_sort")
    # NumPy scalars defer to Dim's reflected operators instead of making object arrays.
    __array_ufunc__ = None

    def __init__(self, terms: tuple, scope: SymbolicScope):
        # `terms`: ((mono, coefficient), ...) sorted by mono, no zero coefficients, the
        # constant term under the empty mono. Build Dims with `_make`, which normalizes.
        self.terms = terms
        self.scope = scope
        self._hash = hash(terms)
        self._sort = None

    @property
    def _sort_key(self) -> tuple:
        if self._sort is None:
            self._sort = tuple((_mono_key(m), c) for m, c in self.terms)
        return self._sort

    # -- structure --
    def symbols(self) -> frozenset[str]:
        """The names of the symbols the expression mentions (inside atoms too)."""
        found: set[str] = set()
        for mono, _ in self.terms:
            for atom, _ in mono:
                if isinstance(atom, str):
                    found.add(atom)
                else:
                    for a in atom.args:
                        if isinstance(a, Dim):
                            found |= a.symbols()
        return frozenset(found)

    def as_symbol(self) -> str | None:
        """The symbol's name when the expression is exactly one symbol, else None."""
        if len(self.terms) == 1:
            ((mono, c),) = self.terms
            if c == 1 and len(mono) == 1 and mono[0][1] == 1 and isinstance(mono[0][0], str):
                return mono[0][0]
        return None

    def linear_in(self, symbol: str) -> tuple[int, int | Dim] | None:
        """(c, rest) with self == c*symbol + rest and `symbol` nowhere in rest, else None."""
        c = 0
        rest: dict = {}
        for mono, k in self.terms:
            if mono == ((symbol, 1),):
                c = k
            else:
                if any(
                    a == symbol or (not isinstance(a, str) and symbol in _atom_symbols(a))
                    for a, _ in mono
                ):
                    return None
                rest[mono] = k
        if c == 0:
            return None
        return c, _make(rest, self.scope)

    def evaluate(self, values: dict[str, int]) -> int:
        """The expression's value for symbol values `values` (ints)."""
        total = 0
        for mono, c in self.terms:
            v = c
            for atom, p in mono:
                v *= _atom_value(atom, values) ** p
            total += v
        return total

    # -- text --
    def __str__(self) -> str:
        order = sorted(self.terms, key=lambda mc: (-_degree(mc[0]), _mono_key(mc[0])))
        parts = []
        for mono, c in order:
            factors = ["*".join([_atom_text(a)] * p) if p > 1 else _atom_text(a) for a, p in mono]
            body = "*".join(factors)
            if not body:
                text, sign = str(abs(c)), c < 0
            elif abs(c) == 1:
                text, sign = body, c < 0
            else:
                text, sign = f"{abs(c)}*{body}", c < 0
            if not parts:
                parts.append(f"-{text}" if sign else text)
            else:
                parts.append(f" - {text}" if sign else f" + {text}")
        return "".join(parts)

    __repr__ = __str__

    # -- arithmetic --
    def __add__(self, other):
        other = _operand(self, other)
        if other is NotImplemented:
            return other
        return _add(self, other, 1)

    __radd__ = __add__

    def __sub__(self, other):
        other = _operand(self, other)
        if other is NotImplemented:
            return other
        return _add(self, other, -1)

    def __rsub__(self, other):
        other = _operand(self, other)
        if other is NotImplemented:
            return other
        negated = -self  # (an int where an equality fixes the value: `-b == 2`)
        return _add(negated, other, 1) if isinstance(negated, Dim) else negated + other

    def __neg__(self):
        return _make({m: -c for m, c in self.terms}, self.scope)

    def __pos__(self):
        return self

    def __mul__(self, other):
        other = _operand(self, other)
        if other is NotImplemented:
            return other
        return _mul(self, other)

    __rmul__ = __mul__

    def __pow__(self, n):
        if not _is_int(n) or n < 0:
            return NotImplemented
        out = 1
        for _ in range(int(n)):
            out = out * self
        return out

    def __floordiv__(self, other):
        other = _operand(self, other)
        if other is NotImplemented:
            return other
        return _floordiv(self, other)

    def __rfloordiv__(self, other):
        other = _operand(self, other)
        if other is NotImplemented:
            return other
        return _floordiv(other, self)

    def __mod__(self, other):
        other = _operand(self, other)
        if other is NotImplemented:
            return other
        return _mod(self, other)

    def __rmod__(self, other):
        other = _operand(self, other)
        if other is NotImplemented:
            return other
        return _mod(other, self)

    def __divmod__(self, other):
        return self // other, self % other

    def __truediv__(self, other):
        raise TypeError(
            f"symbolic dimension {self} (at {user_site()}): true division (/) of a dimension "
            "is not an integer; use floor division (//)"
        )

    __rtruediv__ = __truediv__

    def __abs__(self):
        if self.scope.decide_ge(self, 0, "abs"):
            return self
        return -self

    # -- comparisons --
    def __eq__(self, other) -> bool:
        if isinstance(other, Dim):
            if other.scope != self.scope:
                return False
            if other.terms == self.terms:
                return True
        elif not _is_int(other):
            return NotImplemented
        # Undecided equality is False, as in JAX: `==` runs in hashing and in tuple
        # comparisons of shapes, and a shape rule that asks `b == 1` then takes its general
        # path, which serves b == 1 too. Ordering comparisons and bool() raise instead.
        return self.scope.try_eq(self, other) is True

    def __ne__(self, other) -> bool:
        if isinstance(other, Dim):
            if other.scope != self.scope:
                return True
            if other.terms == self.terms:
                return False
        elif not _is_int(other):
            return NotImplemented
        return self.scope.try_eq(self, other) is not True

    def __hash__(self) -> int:
        return self._hash

    def __ge__(self, other) -> bool:
        other = _operand(self, other)
        if other is NotImplemented:
            return other
        return self.scope.decide_ge(self, other, ">=")

    def __gt__(self, other) -> bool:
        other = _operand(self, other)
        if other is NotImplemented:
            return other
        return self.scope.decide_ge(self, other + 1, ">", other)

    def __le__(self, other) -> bool:
        other = _operand(self, other)
        if other is NotImplemented:
            return other
        return self.scope.decide_ge(other, self, "<=", other, flip=True)

    def __lt__(self, other) -> bool:
        other = _operand(self, other)
        if other is NotImplemented:
            return other
        return self.scope.decide_ge(other, self + 1, "<", other, flip=True)

    def __bool__(self) -> bool:
        return not self.scope.decide_eq(self, 0, "!=")

    # -- conversions a traced program cannot have --
    def _not_a_number(self, what: str) -> InconclusiveDimensionError:
        return InconclusiveDimensionError(
            f"{what} of the symbolic dimension {self} (at {user_site()}): its value is known "
            "only when the program runs; use array operations on it (aotkit.numpy.arange, "
            "x.shape in reshapes and slices, aotkit.fori_loop for loops), "
            + HOW_TO_DECIDE.format(example=f"{self} == 4")
        )

    def __index__(self):
        raise self._not_a_number("using as a Python int (range(), an index, NumPy)")

    def __int__(self):
        raise self._not_a_number("int()")

    def __float__(self):
        raise self._not_a_number("float()")

    def __complex__(self):
        raise self._not_a_number("complex()")

    def __reduce__(self):
        return (_rebuild, (str(self), self.scope.constraints))


def _rebuild(text: str, constraints: tuple[str, ...]):
    return parse_dim(text, SymbolicScope(constraints))


def _atom_text(atom) -> str:
    return atom if isinstance(atom, str) else str(atom)


def _atom_symbols(atom) -> frozenset[str]:
    if isinstance(atom, str):
        return frozenset((atom,))
    found: set[str] = set()
    for a in atom.args:
        if isinstance(a, Dim):
            found |= a.symbols()
    return frozenset(found)


def _atom_value(atom, values: dict[str, int]) -> int:
    if isinstance(atom, str):
        try:
            return values[atom]
        except KeyError:
            raise ValueError(
                f"symbolic dimension: no value for symbol {atom!r} (given: "
                f"{_shown(values) or 'none'}); give every symbol a value"
            ) from None
    args = [a.evaluate(values) if isinstance(a, Dim) else a for a in atom.args]
    if atom.name == "floordiv":
        return args[0] // args[1]
    if atom.name == "mod":
        return args[0] % args[1]
    return max(args) if atom.name == "max" else min(args)


def _operand(self: Dim, other):
    if isinstance(other, Dim):
        if other.scope != self.scope:
            raise ValueError(
                f"symbolic dimensions {self} and {other} (at {user_site()}) come from scopes "
                f"with different constraints ({self.scope.describe()} and "
                f"{other.scope.describe()}); declare them together, e.g. "
                "aotkit.symbolic_shape('b, t', constraints=...)"
            )
        return other
    if _is_int(other):
        return int(other)
    return NotImplemented


def _terms_of(x) -> dict:
    if isinstance(x, Dim):
        return dict(x.terms)
    return {(): x} if x else {}


def _add(a: Dim, b, sign: int):
    terms = dict(a.terms)
    for m, c in _terms_of(b).items():
        terms[m] = terms.get(m, 0) + sign * c
    return _make(terms, a.scope)


def _mul(a, b):
    scope = a.scope if isinstance(a, Dim) else b.scope
    if not isinstance(b, Dim):
        if b == 0:
            return 0
        return _make({m: c * b for m, c in a.terms}, scope)
    if not isinstance(a, Dim):
        return _mul(b, a)
    terms: dict = {}
    for m1, c1 in a.terms:
        for m2, c2 in b.terms:
            m = _mono_mul(m1, m2)
            terms[m] = terms.get(m, 0) + c1 * c2
    return _make(terms, scope)


def _make(terms: dict, scope: SymbolicScope):
    """A normalized Dim (or an int when no symbol is left) from {mono: coefficient}."""
    rules = scope._rules
    if rules:
        terms = _apply_rules(terms, rules, scope)
    items = [(m, c) for m, c in terms.items() if c]
    if not items:
        return 0
    if len(items) == 1 and items[0][0] == ():
        return items[0][1]
    items.sort(key=lambda mc: _mono_key(mc[0]))
    return Dim(tuple(items), scope)


def _apply_rules(terms: dict, rules: dict, scope: SymbolicScope) -> dict:
    terms = dict(terms)
    changed = True
    while changed:
        changed = False
        for mono, c in list(terms.items()):
            if not c:
                continue
            for i, (atom, p) in enumerate(mono):
                rule = rules.get(atom)
                if rule is None:
                    rule = _implied_rule(atom, scope)
                if rule is None or c % rule[1]:
                    continue
                replacement, k = rule
                rest = mono[:i] + (((atom, p - 1),) if p > 1 else ()) + mono[i + 1 :]
                del terms[mono]
                for m2, c2 in _terms_of(replacement).items():
                    m = _mono_mul(rest, m2)
                    terms[m] = terms.get(m, 0) + (c // k) * c2
                changed = True
                break
            if changed:
                break
    return terms


def _implied_rule(atom, scope: SymbolicScope):
    """k*floordiv(e, k) is e when a constraint makes e a multiple of k."""
    if (
        isinstance(atom, _Op)
        and atom.name == "floordiv"
        and isinstance(atom.args[1], int)
        and scope._multiples
        and _dim_divisible(atom.args[0], atom.args[1], scope)
    ):
        return (atom.args[0], atom.args[1])
    return None


def _from_atom(atom, scope: SymbolicScope):
    return _make({((atom, 1),): 1}, scope)


def _scope_of_pair(a, b) -> SymbolicScope | None:
    if isinstance(a, Dim):
        return a.scope
    if isinstance(b, Dim):
        return b.scope
    return None


def _floordiv(a, b):
    scope = _scope_of_pair(a, b)
    if scope is None:
        return a // b
    if isinstance(b, Dim):
        q = divide_exact(a, b)
        if q is not None:
            return q
        return _from_atom(_Op("floordiv", (a, b)), scope)
    if b == 0:
        raise ZeroDivisionError(f"symbolic dimension {a} // 0 (at {user_site()})")
    if b < 0:
        return _floordiv(-a, -b)
    if b == 1:
        return a
    if not isinstance(a, Dim):
        return a // b
    # a = b*exact + rest: floordiv(a, b) = exact + floordiv(rest, b).
    exact: dict = {}
    rest: dict = {}
    for m, c in a.terms:
        if c % b == 0:
            exact[m] = exact.get(m, 0) + c // b
            continue
        g = b // math.gcd(c, b)
        if m and _divisible(m, g, scope):
            # c*m = (c*g/b) * b*floordiv(m, g), with m a multiple of g by a constraint.
            term = (c * g // b) * _from_atom(_Op("floordiv", (_make({m: 1}, scope), g)), scope)
            for m2, c2 in _terms_of(term).items():
                exact[m2] = exact.get(m2, 0) + c2
        else:
            rest[m] = c
    exact_part = _make(exact, scope)
    rest = _make(rest, scope)
    if not isinstance(rest, Dim):
        return exact_part + rest // b
    # floordiv(g*r, g*k) = floordiv(r, k).
    g = math.gcd(b, *(c for _, c in rest.terms))
    if g > 1:
        rest = _make({m: c // g for m, c in rest.terms}, scope)
        b //= g
        if not isinstance(rest, Dim):
            return exact_part + rest // b
        if b == 1:
            return exact_part + rest
    lo, hi = scope.bounds(rest)
    if lo >= 0 and hi < b:
        return exact_part
    return exact_part + _from_atom(_Op("floordiv", (rest, b)), scope)


def _mod(a, b):
    scope = _scope_of_pair(a, b)
    if scope is None:
        return a % b
    if isinstance(b, Dim):
        q = divide_exact(a, b)
        if q is not None:
            return 0
        if scope.try_ge(a, 0) is True and scope.try_ge(b, a + 1) is True:
            return a  # 0 <= a < b
        return _from_atom(_Op("mod", (a, b)), scope)
    if b == 0:
        raise ZeroDivisionError(f"symbolic dimension {a} % 0 (at {user_site()})")
    if b < 0:
        return -_mod(-a, -b)
    if b == 1:
        return 0
    if not isinstance(a, Dim):
        return a % b
    rest = {}
    for m, c in a.terms:
        c %= b
        if c and not (m and _divisible(m, b // math.gcd(c, b), scope)):
            rest[m] = c
    r = _make(rest, scope)
    if not isinstance(r, Dim):
        return r % b
    lo, hi = scope.bounds(r)
    if lo >= 0 and hi < b:
        return r
    return _from_atom(_Op("mod", (r, b)), scope)


def _divisible(mono: tuple, g: int, scope: SymbolicScope) -> bool:
    """Whether a constraint makes the monomial `mono` a multiple of `g` (`t % 8 == 0`)."""
    if g == 1:
        return True
    m = _make({mono: 1}, scope)
    for f in scope._multiples.get(m.terms if isinstance(m, Dim) else m, ()):
        if f % g == 0:
            return True
    return False


def _dim_divisible(p, g: int, scope: SymbolicScope) -> bool:
    """Whether the expression `p` is a multiple of `g` for every value of its symbols."""
    if not isinstance(p, Dim):
        return p % g == 0
    return all(c % g == 0 or (m and _divisible(m, g // math.gcd(c, g), scope)) for m, c in p.terms)


def dim_max(a, b):
    """max(a, b) of dimensions: decided by the constraints where they can, else an atom."""
    scope = _scope_of_pair(a, b)
    if scope is None:
        return max(a, b)
    if same(a, b):
        return a
    d = scope.try_ge(a, b)
    if d is True:
        return a
    if scope.try_ge(b, a) is True:
        return b
    args = tuple(sorted((a, b), key=_key))
    return _from_atom(_Op("max", args), scope)


def dim_min(a, b):
    """min(a, b) of dimensions: decided by the constraints where they can, else an atom."""
    scope = _scope_of_pair(a, b)
    if scope is None:
        return min(a, b)
    if same(a, b):
        return a
    if scope.try_ge(a, b) is True:
        return b
    if scope.try_ge(b, a) is True:
        return a
    args = tuple(sorted((a, b), key=_key))
    return _from_atom(_Op("min", args), scope)


def divide_exact(a, b):
    """a / b when b divides a exactly for every value of the symbols, else None (the -1 of a
    reshape: `b*t*512` / `b*4096` is `floordiv(t, 8)` when t % 8 == 0 is a constraint)."""
    scope = _scope_of_pair(a, b)
    if scope is None:
        return a // b if b and a % b == 0 else None
    if same(a, b):
        return 1
    if not isinstance(b, Dim):
        if b == 0:
            return None
        q = _floordiv(a, b)
        return q if same(_mul(q, b) if isinstance(q, Dim) else q * b, a) else None
    if not isinstance(a, Dim):
        return 0 if a == 0 else None
    if len(b.terms) != 1:
        return None
    ((bm, bc),) = b.terms
    quotient: dict = {}
    need = dict(bm)
    for m, c in a.terms:
        have = dict(m)
        if any(have.get(atom, 0) < p for atom, p in need.items()):
            return None
        left = tuple((atom, p - need.get(atom, 0)) for atom, p in m if p - need.get(atom, 0))
        quotient[left] = quotient.get(left, 0) + c
    q = _make(quotient, scope)
    return divide_exact(q, bc)


def slice_indices(start, stop, step: int, n) -> tuple:
    """Python's `slice(start, stop, step).indices(n)` for a symbolic length `n` or bounds:
    (first index, length), each an int or a Dim. A bound whose sign the constraints do not
    decide raises `InconclusiveDimensionError` (a negative bound counts from the end).
    Lengths come out in one form for equal slices: `x[1:]` and `x[:-1]` of a length-b axis
    are both `max(0, b - 1)`."""

    def adjusted(v):
        if v is None:
            return None
        return v + n if v < 0 else v  # `v < 0` raises for an undecided sign

    s, e = adjusted(start), adjusted(stop)
    if step > 0:
        s = 0 if s is None else s
        e = n if e is None else e
        span = dim_min(e, n) - dim_max(s, 0)
        first = dim_min(dim_max(s, 0), n)
    else:
        s = n - 1 if s is None else dim_min(s, n - 1)
        e = -1 if e is None else dim_max(e, -1)
        span = s - e
        first = dim_max(s, -1)
    k = abs(step)
    length = dim_max(0, span if k == 1 else _floordiv(span + k - 1, k))
    return first, length


def divisibility_hint(a, b) -> str | None:
    """A constraint that would make `b` divide `a` (`t % 8 == 0` for a = 512*b*t and
    b = 4096*b), or None when none of the form `e % k == 0` would."""
    if isinstance(b, Dim):
        if len(b.terms) != 1:
            return None
        ((bm, bc),) = b.terms
        q = divide_exact(a, _make({bm: 1}, b.scope))
        if q is None:
            return None
        a, b = q, bc
    if not isinstance(a, Dim) or b <= 1:
        return None
    g = math.gcd(b, *(c for _, c in a.terms))
    a = _make({m: c // g for m, c in a.terms}, a.scope)
    return f"{a} % {b // g} == 0"


def same(a, b) -> bool:
    """Whether two dimensions are the same expression (never raises; no constraints used)."""
    if isinstance(a, Dim):
        return isinstance(b, Dim) and a.terms == b.terms and a.scope == b.scope
    if isinstance(b, Dim):
        return False
    return a == b


def same_shape(a: tuple, b: tuple) -> bool:
    """Whether two shapes are the same expressions, dimension by dimension (never raises)."""
    return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))


def may_exceed(d, n: int) -> bool:
    """Whether dimension `d` can be greater than `n` (for a Dim: unless the constraints
    rule it out)."""
    if isinstance(d, Dim):
        return d.scope.try_ge(d, n + 1) is not False
    return d > n


def definitely(d, op: str, n) -> bool:
    """Whether `d op n` (op one of ==, >=, <=, >, <, !=) holds for every value of the
    symbols; False where it may not (never raises)."""
    if not isinstance(d, Dim) and not isinstance(n, Dim):
        return {"==": d == n, "!=": d != n, ">=": d >= n, "<=": d <= n, ">": d > n, "<": d < n}[op]
    scope = d.scope if isinstance(d, Dim) else n.scope
    if op == "==":
        return scope.try_eq(d, n) is True
    if op == "!=":
        return scope.try_eq(d, n) is False
    if op in (">=", ">"):
        return scope.try_ge(d, n + (op == ">")) is True
    return scope.try_ge(n, d + (op == "<")) is True


def is_symbolic(d) -> bool:
    return isinstance(d, Dim)


def is_static(shape) -> bool:
    """Whether every dimension of `shape` is an int."""
    return not any(isinstance(d, Dim) for d in shape)


def symbols_of(shapes) -> frozenset[str]:
    """The symbols of a dimension, a shape, or an iterable of shapes or specs."""
    if isinstance(shapes, Dim):
        return shapes.symbols()
    found: set[str] = set()
    for x in shapes:
        x = getattr(x, "shape", x)
        if isinstance(x, Dim):
            found |= x.symbols()
        elif isinstance(x, tuple | list):
            found |= symbols_of(x)
    return frozenset(found)


def _shown(values: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(values.items()))


# --- Scopes ------------------------------------------------------------------------------------


class SymbolicScope:
    """The symbols of one program and their constraints (beyond each symbol >= 0).

    Scopes are values: two scopes with the same constraints are equal, so equal symbolic
    specs are equal wherever they were written. Every Dim belongs to one scope, whose
    constraints decide its comparisons.
    """

    def __init__(self, constraints=()):
        if isinstance(constraints, str):
            raise TypeError(
                f"symbolic constraints: expected a sequence of strings, got the string "
                f"{constraints!r}; write constraints=({constraints!r},)"
            )
        texts: list[str] = []
        for c in constraints:
            if not isinstance(c, str):
                raise TypeError(
                    f"symbolic constraints: each constraint is a string such as 'b >= 1', got "
                    f"{type(c).__name__} {c!r:.80}"
                )
            text = " ".join(c.split())
            if text not in texts:
                texts.append(text)
        self.constraints: tuple[str, ...] = tuple(texts)
        self._hash = hash(self.constraints)
        self._rules: dict = {}
        # Expressions a constraint makes multiples of (`t % 8 == 0`): {t: [8]}.
        self._multiples: dict = {}
        self._sym_bounds: dict[str, tuple] = {}
        self._ineqs: list = []  # expressions known to be >= 0
        self._bounds: dict = {}
        self._parsed: list[tuple[str, str, tuple, tuple]] = []
        self._symbols: set[str] = set()
        for text in self.constraints:
            what = f"symbolic constraint {text!r}"
            op, left, right = _Parser(text, what).constraint()
            self._parsed.append((text, op, left, right))
            self._symbols |= _tree_symbols(left) | _tree_symbols(right)
        # Equalities first: they rewrite expressions, the bounds then read the rewritten ones.
        for equalities in (True, False):
            for text, op, left, right in self._parsed:
                if (op == "==") != equalities:
                    continue
                try:
                    if equalities:
                        self._add_equality(text, left, right)
                    else:
                        self._add_inequality(text, op, left, right)
                except ZeroDivisionError:
                    raise ValueError(f"symbolic constraint {text!r} divides by zero") from None

    # -- building --
    def _add_equality(self, text: str, left: tuple, right: tuple) -> None:
        if left[0] == "sym" and left[1] in self._rules:
            raise ValueError(
                f"symbolic constraint {text!r}: {left[1]} already has an equality; give each "
                "symbol at most one"
            )
        e1 = _eval_tree(left, None, self)
        e2 = _eval_tree(right, None, self)
        if not isinstance(e1, Dim):
            e1, e2 = e2, e1
        if not isinstance(e1, Dim):
            if e1 != e2:
                raise ValueError(f"symbolic constraint {text!r} can never hold; remove it")
            return
        if len(e1.terms) != 1 or e1.terms[0][0] == ():
            raise ValueError(
                f"symbolic constraint {text!r}: the left side of an equality must be one term "
                "(a symbol, k*symbol, mod(e, k) or floordiv(e, k)); write e.g. 'b == 2*k' or "
                "'t % 8 == 0'"
            )
        ((mono, k),) = e1.terms
        if len(mono) != 1 or mono[0][1] != 1:
            raise ValueError(
                f"symbolic constraint {text!r}: the left side of an equality must be one atom "
                "times a number; write e.g. 'b == 2*k' or 't % 8 == 0'"
            )
        atom = mono[0][0]
        if atom in self._rules:
            raise ValueError(
                f"symbolic constraint {text!r}: {_atom_text(atom)} already has an equality; "
                "give each symbol at most one"
            )
        if isinstance(e2, Dim) and atom in _dim_atoms(e2):
            raise ValueError(
                f"symbolic constraint {text!r}: {_atom_text(atom)} appears on both sides; "
                "write it as a bound instead"
            )
        if isinstance(atom, str) and isinstance(e2, int) and (e2 % k != 0 or e2 // k < 0):
            raise ValueError(
                f"symbolic constraint {text!r} can never hold ({atom} >= 0 is a whole number); "
                "remove it"
            )
        self._rules[atom] = (e2, k)
        self._bounds.clear()
        if isinstance(atom, _Op) and atom.name == "mod" and k == 1 and e2 == 0:
            # mod(e, m) == 0: m*floordiv(e, m) is e.
            e, m = atom.args
            if isinstance(m, int) and m > 0:
                self._rules[_Op("floordiv", (e, m))] = (e, m)
                self._multiples.setdefault(e.terms if isinstance(e, Dim) else e, []).append(m)

    def _add_inequality(self, text: str, op: str, left: tuple, right: tuple) -> None:
        e1 = _eval_tree(left, None, self)
        e2 = _eval_tree(right, None, self)
        if op in ("<=", "<"):
            e1, e2 = e2, e1
        diff = e1 - e2 - (1 if op in (">", "<") else 0)
        if not isinstance(diff, Dim):
            if diff < 0:
                raise ValueError(f"symbolic constraint {text!r} can never hold; remove it")
            return
        linear = None
        if len(diff.symbols()) == 1:
            (name,) = diff.symbols()
            linear = diff.linear_in(name)
            if linear is not None and isinstance(linear[1], Dim):
                linear = None
        if linear is not None:
            c, rest = linear
            lo, hi = self._sym_bounds.get(name, (0, MAX_SIZE))
            if c > 0:
                lo = max(lo, -(rest // c))  # c*s + rest >= 0: s >= ceil(-rest / c)
            else:
                hi = min(hi, rest // -c)
            if lo > hi:
                raise ValueError(
                    f"symbolic constraint {text!r} leaves {name} no value (with {name} >= 0 "
                    "and the other constraints); fix the constraints"
                )
            self._sym_bounds[name] = (lo, hi)
        else:
            self._ineqs.append(diff)
        self._bounds.clear()

    def symbol(self, name: str) -> Dim | int:
        """The dimension `name` (an equality constraint may make it an expression)."""
        self._symbols.add(name)
        rule = self._rules.get(name)
        if rule is not None and rule[1] == 1:
            return rule[0]
        return Dim(((((name, 1),), 1),), self)

    def dim(self, text) -> Dim | int:
        """A dimension from its text (`'b'`, `'2*t'`, `'784'`) or an int."""
        if _is_int(text):
            return int(text)
        tree = _Parser(text, "symbolic dimension").whole()
        try:
            return _eval_tree(tree, None, self)
        except ZeroDivisionError:
            raise ValueError(f"symbolic dimension {text!r} divides by zero") from None

    @property
    def symbols(self) -> frozenset[str]:
        """The symbols the scope has seen: in its constraints and in dimensions built in it."""
        return frozenset(self._symbols)

    def describe(self) -> str:
        """`every symbol >= 0; t <= 2048; t % 8 == 0` (for messages)."""
        return "; ".join(("every symbol >= 0", *self.constraints))

    def __eq__(self, other) -> bool:
        return isinstance(other, SymbolicScope) and other.constraints == self.constraints

    def __hash__(self) -> int:
        return self._hash

    def __repr__(self) -> str:
        return f"SymbolicScope(constraints={self.constraints!r})"

    # -- deciding --
    def bounds(self, e) -> tuple:
        """(lo, hi) with lo <= e <= hi for every value of the symbols that meets the
        constraints (ints, or -inf/inf)."""
        if not isinstance(e, Dim):
            return (e, e)
        key = e.terms
        found = self._bounds.get(key)
        if found is None:
            lo = hi = 0
            for mono, c in e.terms:
                mlo, mhi = 1, 1
                for atom, p in mono:
                    alo, ahi = self._atom_bounds(atom)
                    for _ in range(p):
                        mlo, mhi = _interval_mul(mlo, mhi, alo, ahi)
                tlo, thi = _interval_mul(mlo, mhi, c, c)
                lo, hi = lo + tlo, hi + thi
            found = self._bounds[key] = (lo, hi)
        return found

    def _atom_bounds(self, atom) -> tuple:
        if isinstance(atom, str):
            return self._sym_bounds.get(atom, (0, MAX_SIZE))
        name, args = atom.name, atom.args
        if name == "mod":
            return (0, args[1] - 1) if isinstance(args[1], int) else (0, _INF)
        if name == "floordiv":
            lo, hi = self.bounds(args[0])
            k = args[1]
            if isinstance(k, int):
                return (_floor_div(lo, k), _floor_div(hi, k))
            return (min(lo, 0), max(hi, 0))
        (alo, ahi), (blo, bhi) = self.bounds(args[0]), self.bounds(args[1])
        if name == "max":
            return (max(alo, blo), max(ahi, bhi))
        return (min(alo, blo), min(ahi, bhi))

    def _provably_nonneg(self, e) -> bool:
        if not isinstance(e, Dim):
            return e >= 0
        if self.bounds(e)[0] >= 0:
            return True
        return any(self.bounds(e - c)[0] >= 0 for c in self._ineqs)

    def try_ge(self, a, b) -> bool | None:
        """Whether a >= b for every value of the symbols (True), for none (False), or None."""
        d = a - b
        if self._provably_nonneg(d):
            return True
        if self._provably_nonneg(-d - 1):
            return False
        return None

    def try_eq(self, a, b) -> bool | None:
        d = a - b
        if not isinstance(d, Dim):
            return d == 0
        if self._provably_nonneg(d - 1) or self._provably_nonneg(-d - 1):
            return False
        if self._provably_nonneg(d) and self._provably_nonneg(-d):
            return True
        return None

    def decide_ge(self, a, b, op: str, shown=None, *, flip: bool = False) -> bool:
        """a >= b, or InconclusiveDimensionError for the comparison `op` the user wrote."""
        found = self.try_ge(a, b)
        if found is None:
            raise self._inconclusive(a, b, op, shown, flip)
        return found

    def decide_eq(self, a, b, op: str) -> bool:
        found = self.try_eq(a, b)
        if found is None:
            raise self._inconclusive(a, b, op, b, False)
        return found

    def _inconclusive(self, a, b, op, shown, flip) -> InconclusiveDimensionError:
        # The comparison as the user wrote it: `x op y`.
        if op in ("==", "!="):
            x, y = a, shown
            example = f"{x} >= {y + 1}" if isinstance(x, Dim) else f"{y} >= {x + 1}"
        elif op == "abs":
            x, y, op = a, 0, ">="
            example = f"{x} >= 0"
        elif flip:
            x, y = b - (1 if op == "<" else 0), shown
            example = f"{x} <= {y - (1 if op == '<' else 0)}"
        else:
            x, y = a, shown if shown is not None else b
            example = f"{x} >= {y + (1 if op == '>' else 0)}"
        return InconclusiveDimensionError(
            f"symbolic dimension comparison {x} {op} {y} (at {user_site()}): the constraints "
            f"({self.describe()}) do not decide it; " + HOW_TO_DECIDE.format(example=example)
        )

    # -- values at call time (for the compiler) --
    def evaluate(self, dim, values: dict[str, int]) -> int:
        """The value of `dim` (a Dim, an int, or a text such as '2*t') for symbol values."""
        if isinstance(dim, str):
            dim = self.dim(dim)
        if isinstance(dim, Dim):
            return dim.evaluate(values)
        return int(dim)

    def check(self, values: dict[str, int], where: str = "symbolic shapes") -> None:
        """Raises ValueError listing every constraint (and every `symbol >= 0`) that the
        symbol values `values` break."""
        broken = []
        for name, v in sorted(values.items()):
            if not _is_int(v):
                raise TypeError(f"{where}: the value of {name} is {v!r}, not an int")
            if v < 0:
                broken.append(f"{name} >= 0")
        for text, op, left, right in self._parsed:
            missing = (_tree_symbols(left) | _tree_symbols(right)) - set(values)
            if missing:
                raise ValueError(
                    f"{where}: no value for {', '.join(sorted(missing))} in constraint "
                    f"{text!r} (given: {_shown(values) or 'none'}); give every symbol a value"
                )
            try:
                x, y = _eval_tree(left, values), _eval_tree(right, values)
            except ZeroDivisionError:  # (it divides by zero at these values: it fails)
                broken.append(text)
                continue
            holds = {
                "==": x == y,
                "!=": x != y,
                ">=": x >= y,
                "<=": x <= y,
                ">": x > y,
                "<": x < y,
            }[op]
            if not holds:
                broken.append(f"{text} ({x} {op} {y} is false)")
        if broken:
            raise ValueError(
                f"{where}: the sizes {_shown(values)} break the constraint(s) "
                f"{'; '.join(broken)}; pass arrays whose dimensions meet every constraint"
            )


DEFAULT_SCOPE = SymbolicScope(())


def _dim_atoms(d: Dim) -> set:
    out = set()
    for mono, _ in d.terms:
        for atom, _ in mono:
            out.add(atom)
            if not isinstance(atom, str):
                for a in atom.args:
                    if isinstance(a, Dim):
                        out |= _dim_atoms(a)
    return out


def _floor_div(x, k: int):
    if x in (_INF, -_INF):
        return x if k > 0 else -x
    return x // k


def _interval_mul(alo, ahi, blo, bhi) -> tuple:
    products = []
    for x in (alo, ahi):
        for y in (blo, bhi):
            products.append(0 if x == 0 or y == 0 else x * y)
    return min(products), max(products)


# --- Building dimensions and shapes ------------------------------------------------------------


def parse_dim(text, scope: SymbolicScope | None = None) -> Dim | int:
    """A dimension from its text ('b', '2*t + 1', 'floordiv(t, 8)', '784') in `scope`
    (default: the scope without constraints)."""
    return (scope or DEFAULT_SCOPE).dim(text)


def split_dims(text: str) -> list[str]:
    """`text` split at commas outside parentheses."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


def symbolic_shape(text: str, *, constraints=(), scope: SymbolicScope | None = None) -> tuple:
    """A shape from text, e.g. `symbolic_shape("b, t, 512", constraints=("t <= 2048",
    "t % 8 == 0"))` -> (b, t, 512): Dims of one scope (new with `constraints`, or `scope`),
    usable in `aotkit.ShapeDtype`. Symbols with the same name are the same symbol."""
    if not isinstance(text, str):
        raise TypeError(
            f"symbolic_shape: expected a string such as 'b, 784', got {type(text).__name__}"
        )
    if scope is not None and constraints:
        raise ValueError(
            "symbolic_shape: pass either constraints= (a new scope) or scope= (an existing "
            "one's constraints), not both"
        )
    if scope is None:
        scope = SymbolicScope(constraints) if constraints else DEFAULT_SCOPE
    body = text.strip()
    if body.startswith("(") and body.endswith(")") and _balanced(body[1:-1]):
        body = body[1:-1]
    if not body.strip():
        return ()
    dims = []
    for part in split_dims(body):
        if not part.strip():
            raise ValueError(
                f"symbolic_shape: empty dimension in {text!r}; expected dimensions separated "
                "by commas, e.g. 'b, t, 512'"
            )
        dims.append(scope.dim(part))
    for d in dims:
        if isinstance(d, int) and d < 0:
            raise ValueError(f"symbolic_shape: negative dimension {d} in {text!r}")
    return tuple(dims)


def _balanced(text: str) -> bool:
    depth = 0
    for ch in text:
        depth += ch == "("
        depth -= ch == ")"
        if depth < 0:
            return False
    return depth == 0


def scope_of(shapes) -> SymbolicScope | None:
    """The scope of the symbolic dimensions in a shape or specs (None if all are static);
    ValueError when they come from scopes with different constraints (`merge_scopes`)."""
    found = None
    for d in _all_dims(shapes):
        if isinstance(d, Dim):
            if found is None:
                found = d.scope
            elif d.scope != found:
                raise ValueError(
                    f"symbolic dimensions from scopes with different constraints "
                    f"({found.describe()} and {d.scope.describe()}); declare them together"
                )
    return found


def _all_dims(shapes):
    if isinstance(shapes, Dim):
        yield shapes
        return
    for x in shapes:
        x = getattr(x, "shape", x)
        if isinstance(x, tuple | list):
            yield from _all_dims(x)
        else:
            yield x


def merge_scopes(scopes) -> SymbolicScope:
    """One scope holding the constraints of every scope in `scopes`, in order."""
    texts: list[str] = []
    for s in scopes:
        texts += [c for c in s.constraints if c not in texts]
    return SymbolicScope(tuple(texts))


def rehome(d, scope: SymbolicScope):
    """Dimension `d` rebuilt in `scope` (its text parsed there)."""
    if not isinstance(d, Dim) or d.scope is scope:
        return d
    return scope.dim(str(d))


def evaluate_shape(shape: tuple, values: dict[str, int]) -> tuple[int, ...]:
    """`shape` with every dimension evaluated for symbol values `values`."""
    return tuple(d.evaluate(values) if isinstance(d, Dim) else int(d) for d in shape)


def solve(dims, sizes, where: str = "symbolic shapes") -> dict[str, int]:
    """The symbol values that make each dimension of `dims` equal its size in `sizes`
    (both flat sequences): symbols read from dimensions that are `c*s + (known)`, then every
    dimension checked. ValueError naming the first dimension that cannot hold."""
    pairs = list(zip(dims, sizes, strict=True))
    values: dict[str, int] = {}
    progress = True
    while progress:
        progress = False
        for d, n in pairs:
            if not isinstance(d, Dim):
                continue
            unknown = d.symbols() - set(values)
            if len(unknown) != 1:
                continue
            (name,) = unknown
            linear = d.linear_in(name)
            if linear is None:
                continue
            c, rest = linear
            known = rest.evaluate(values) if isinstance(rest, Dim) else rest
            v, r = divmod(n - known, c)
            if r:
                raise ValueError(
                    f"{where}: dimension {d} cannot be {n} ({n - known} is not a multiple of "
                    f"{c}); pass an array of a size the dimension can have"
                )
            values[name] = v
            progress = True
    for d, n in pairs:
        if not isinstance(d, Dim):
            if d != n:
                raise ValueError(f"{where}: dimension {d} is {n}; pass size {d}")
            continue
        missing = d.symbols() - set(values)
        if missing:
            raise ValueError(
                f"{where}: cannot find {', '.join(sorted(missing))} from the sizes: no "
                f"dimension is {sorted(missing)[0]} alone or k*{sorted(missing)[0]} plus known "
                "symbols; give the symbol its own dimension in some argument"
            )
        got = d.evaluate(values)
        if got != n:
            raise ValueError(
                f"{where}: dimension {d} is {got} for {_shown(values)} but the size is {n}; "
                "pass arrays whose dimensions agree"
            )
    return values


def from_jax(d, scope: SymbolicScope | None = None):
    """A `jax.export.symbolic_shape` dimension as a Dim (its text parsed in `scope`, default
    a scope with the JAX scope's constraints); ints are returned as they are."""
    if _is_int(d):
        return int(d)
    if scope is None:
        scope = SymbolicScope(_compat.symbolic_constraints(d))
    return scope.dim(str(d))


def is_jax_dim(d) -> bool:
    """Whether `d` is a `jax.export` symbolic dimension (read by duck type: this module does
    not import jax)."""
    return type(d).__name__ == "_DimExpr" and type(d).__module__.startswith("jax")
