"""Symbolic dimension expressions as data: parsed, printed and evaluated, never run as code.

What the specialization of symbolic programs (aotkit/specialize.py) needs of a dimension
or a constraint, read from a file (an artifact's header, a jax.export artifact's avals) or
given by the user (`--constraint 't % 8 == 0'`): its free symbols, its value for given
symbol values, and its text. The grammar is small on purpose:

    constraint := expr (== | != | >= | <= | > | <) expr
    expr       := term ((+ | -) term)*
    term       := unary ((* | // | %) unary)*
    unary      := - unary | atom
    atom       := INT | NAME | NAME(expr, ...) | (expr)     functions: floordiv, mod, max,
                                                            min, non_negative (JAX's spelling)

A text is parsed by a recursive descent over at most `MAX_TEXT` characters and `MAX_DEPTH`
levels of nesting; values stay within int64 (`evaluate` refuses more), and `//` and `%`
floor as Python's do (and as JAX's `floordiv`/`mod`). Anything else is a ValueError naming
the text and the fault.
"""

from __future__ import annotations

import re

MAX_TEXT = 1000
MAX_DEPTH = 32
INT64_MAX = 2**63 - 1
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_TOKEN = re.compile(r"\s*(?:(\d+)|([A-Za-z_][A-Za-z0-9_]*)|(==|!=|>=|<=|//|[-+*%(),<>]))")
_FUNCTIONS = {"floordiv": 2, "mod": 2, "max": 2, "min": 2, "non_negative": 1}
_COMPARISONS = ("==", "!=", ">=", "<=", ">", "<")
# Binding strength of each binary operator, for parsing and for printing with no more
# parentheses than needed.
_PRECEDENCE = {"+": 1, "-": 1, "*": 2, "//": 2, "%": 2}


class Expr:
    """An integer expression over named symbols: ("int", n), ("sym", name), (op, a, b) with op
    one of + - * // %, ("neg", a), or a function call (name, args...)."""

    __slots__ = ("node", "_text")

    def __init__(self, node: tuple):
        self.node = node
        self._text = None

    def symbols(self) -> frozenset[str]:
        return _symbols(self.node)

    def evaluate(self, values: dict[str, int]) -> int:
        """The value for `values` (every free symbol's); ValueError for a division by zero
        or a value past int64."""
        return _evaluate(self.node, values, self)

    @property
    def is_symbol(self) -> bool:
        return self.node[0] == "sym"

    def __str__(self) -> str:
        if self._text is None:
            self._text = _show(self.node, 0)
        return self._text

    def __repr__(self) -> str:
        return f"Expr({str(self)!r})"

    def __eq__(self, other) -> bool:
        return isinstance(other, Expr) and self.node == other.node

    def __hash__(self) -> int:
        return hash(self.node)


class Constraint:
    """`left OP right`, a comparison of two expressions."""

    __slots__ = ("op", "left", "right")

    def __init__(self, op: str, left: Expr, right: Expr):
        self.op, self.left, self.right = op, left, right

    def symbols(self) -> frozenset[str]:
        return self.left.symbols() | self.right.symbols()

    def holds(self, values: dict[str, int]) -> bool:
        a, b = self.left.evaluate(values), self.right.evaluate(values)
        return {
            "==": a == b,
            "!=": a != b,
            ">=": a >= b,
            "<=": a <= b,
            ">": a > b,
            "<": a < b,
        }[self.op]

    def __str__(self) -> str:
        return f"{self.left} {self.op} {self.right}"

    def __repr__(self) -> str:
        return f"Constraint({str(self)!r})"

    def __eq__(self, other) -> bool:
        return isinstance(other, Constraint) and str(self) == str(other)

    def __hash__(self) -> int:
        return hash(str(self))


def symbol(name: str) -> Expr:
    if not isinstance(name, str) or not _NAME.fullmatch(name) or name in _FUNCTIONS:
        raise ValueError(f"symbol {name!r} is not a name such as 'b' or 'seq_len'")
    return Expr(("sym", name))


def parse_dim(text: str) -> int | Expr:
    """A dimension's text: an int (`784`) or an expression (`b`, `2*b + 1`)."""
    expr = _Parser(text, "dimension").whole()
    return expr.node[1] if expr.node[0] == "int" else expr


def parse_constraint(text: str) -> Constraint:
    """A constraint's text: `t % 8 == 0`, `b >= 1`, `floordiv(t, 2) <= 128`."""
    return _Parser(text, "constraint").constraint()


class _Parser:
    def __init__(self, text, what: str):
        if not isinstance(text, str):
            raise ValueError(f"{what} {text!r} is not text")
        if len(text) > MAX_TEXT:
            raise ValueError(f"{what} {text[:40]!r}... is longer than {MAX_TEXT} characters")
        self.text, self.what = text, what
        self.tokens = self._tokens(text)
        self.i = 0
        self.depth = 0

    def _tokens(self, text: str) -> list[str]:
        tokens, pos = [], 0
        while pos < len(text):
            if text[pos:].strip() == "":
                break
            m = _TOKEN.match(text, pos)
            if m is None:
                raise self.error(f"unexpected {text[pos:].strip()[:1]!r}")
            tokens.append(m.group(m.lastindex))
            pos = m.end()
        return tokens

    def error(self, detail: str) -> ValueError:
        return ValueError(f"{self.what} {self.text!r}: {detail}")

    def peek(self) -> str | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def take(self, expected: str | None = None) -> str:
        token = self.peek()
        if token is None:
            raise self.error("ends too soon" + (f" (expected {expected!r})" if expected else ""))
        if expected is not None and token != expected:
            raise self.error(f"expected {expected!r}, found {token!r}")
        self.i += 1
        return token

    def whole(self) -> Expr:
        expr = self.expr()
        self.end()
        return expr

    def constraint(self) -> Constraint:
        left = self.expr()
        op = self.peek()
        if op not in _COMPARISONS:
            raise self.error(
                f"expected a comparison ({', '.join(_COMPARISONS)}), found "
                + (repr(op) if op is not None else "the end")
            )
        self.take()
        right = self.expr()
        self.end()
        return Constraint(op, left, right)

    def end(self) -> None:
        if self.peek() is not None:
            raise self.error(f"unexpected {self.peek()!r}")

    def expr(self) -> Expr:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise self.error(f"nests deeper than {MAX_DEPTH} levels")
        node = self.term().node
        while self.peek() in ("+", "-"):
            op = self.take()
            node = (op, node, self.term().node)
        self.depth -= 1
        return Expr(node)

    def term(self) -> Expr:
        node = self.unary().node
        while self.peek() in ("*", "//", "%"):
            op = self.take()
            node = (op, node, self.unary().node)
        return Expr(node)

    def unary(self) -> Expr:
        if self.peek() == "-":
            self.take()
            self.depth += 1
            if self.depth > MAX_DEPTH:
                raise self.error(f"nests deeper than {MAX_DEPTH} levels")
            inner = self.unary().node
            self.depth -= 1
            if inner[0] == "int":
                return Expr(("int", -inner[1]))
            return Expr(("neg", inner))
        return self.atom()

    def atom(self) -> Expr:
        token = self.take()
        if token.isdigit():
            value = int(token)
            if value > INT64_MAX:
                raise self.error(f"{token} does not fit in 64 bits")
            return Expr(("int", value))
        if _NAME.fullmatch(token):
            if token in _FUNCTIONS:
                self.take("(")
                args = [self.expr().node]
                while self.peek() == ",":
                    self.take()
                    args.append(self.expr().node)
                self.take(")")
                if len(args) != _FUNCTIONS[token]:
                    raise self.error(f"{token} takes {_FUNCTIONS[token]} argument(s)")
                return Expr((token, *args))
            return Expr(("sym", token))
        if token == "(":
            inner = self.expr()
            self.take(")")
            return inner
        raise self.error(f"unexpected {token!r}")


def _symbols(node: tuple) -> frozenset[str]:
    kind = node[0]
    if kind == "int":
        return frozenset()
    if kind == "sym":
        return frozenset((node[1],))
    out: frozenset[str] = frozenset()
    for child in node[1:]:
        out |= _symbols(child)
    return out


def _evaluate(node: tuple, values: dict[str, int], whole: Expr) -> int:
    kind = node[0]
    if kind == "int":
        return node[1]
    if kind == "sym":
        return values[node[1]]
    args = [_evaluate(child, values, whole) for child in node[1:]]
    if kind in ("//", "%", "floordiv", "mod") and args[1] == 0:
        raise ValueError(f"dimension {whole}: division by zero for {_shown(values)}")
    value = {
        "+": lambda a, b: a + b,
        "-": lambda a, b: a - b,
        "*": lambda a, b: a * b,
        "//": lambda a, b: a // b,
        "floordiv": lambda a, b: a // b,
        "%": lambda a, b: a % b,
        "mod": lambda a, b: a % b,
        "max": max,
        "min": min,
        "neg": lambda a: -a,
        "non_negative": lambda a: max(a, 0),
    }[kind](*args)
    if not -INT64_MAX - 1 <= value <= INT64_MAX:
        raise ValueError(f"dimension {whole}: {value} does not fit in 64 bits for {_shown(values)}")
    return value


def _shown(values: dict[str, int]) -> str:
    return ", ".join(f"{k} = {v}" for k, v in sorted(values.items()))


def _show(node: tuple, outer: int) -> str:
    kind = node[0]
    if kind == "int":
        return str(node[1]) if node[1] >= 0 or outer == 0 else f"({node[1]})"
    if kind == "sym":
        return node[1]
    if kind == "neg":
        return f"-{_show(node[1], 3)}"
    if kind in _PRECEDENCE:
        strength = _PRECEDENCE[kind]
        # Left-associative: the right operand of - // % (and of any op at the same level)
        # needs parentheses when it is itself an operation of that level.
        left = _show(node[1], strength)
        right = _show(node[2], strength + 1)
        text = f"{left}{kind}{right}" if kind == "*" else f"{left} {kind} {right}"
        return f"({text})" if strength < outer else text
    return f"{kind}({', '.join(_show(child, 0) for child in node[1:])})"
