"""The CLI's text forms of pytrees: `--shapes` specs, leaf names, `.npz` keys and times.

Not a stage: helpers of the `aotkit.cli` package only. What it promises:

- `parse_shape(text)` reads one `--shapes` value: a plain spec (`f32[4,3]`, read by
  `aotkit.spec`) or a pytree of specs written like JSON (`{"w": "f32[4,3]", "b": "f32[3]"}`,
  `["f32[2]", "f32[3]"]`, `("f32[2]",)` for a tuple, nested freely; quotes around specs and
  keys are optional). A mistake is a ValueError that names the character, the leaf and the fix.
- `leaf_names(in_tree, params)` names every flat leaf of a `((args), {kwargs})` tree by its
  path, with parameter names where they are known: `x`, `params['w']`, `args[1][0]`.
- `parse_key(key)` reads such a name back (an `.npz` key); `tree_from_keys` builds the pytree
  of specs the keys of an `.npz` file describe.
- `human_time(seconds)`: `1.21 s`, `350 ms`, `12.3 us`.
"""

from __future__ import annotations

import re

from jax import tree_util

from aotkit import arguments
from aotkit.specs import ShapeDtype, short_text, spec

PYTREE_SYNTAX = 'a pytree is JSON with specs as leaves: {"w": "f32[4,3]"}, ["f32[2]"], ("f32[2]",)'
_OPENERS = {"{": "}", "[": "]", "(": ")"}
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DIMS = re.compile(r"\[[^\[\]{}()]*\]")
# How deep a `--shapes` pytree may nest: far more than any program's arguments, and far less
# than Python's recursion limit, which the reader (and the tracer after it) would reach.
MAX_DEPTH = 64


# --- --shapes --------------------------------------------------------------------------------


def parse_shape(text: str):
    """One `--shapes` value: a ShapeDtype, or a dict/list/tuple pytree of them. A spec in
    quotes (`'"f32[3]"'`, JSON's spelling) is the spec, as it is inside a pytree."""
    stripped = text.strip()
    if len(stripped) >= 2 and stripped[0] == stripped[-1] and stripped[0] in "\"'":
        inner = stripped[1:-1]
        if inner.strip()[:1] not in _OPENERS and not any(q in inner for q in "\"'"):
            return spec(inner)
    if text.lstrip()[:1] not in _OPENERS:
        return spec(text)
    parser = _Parser(text)
    tree = parser.value(())
    parser.skip()
    if parser.pos < len(text):
        raise parser.error("unexpected text after the pytree's end", "remove it")
    return tree


class _Parser:
    """A recursive-descent reader of the pytree syntax; `pos` indexes `text`."""

    def __init__(self, text: str):
        self.text = text
        self.pos = 0

    def error(self, what: str, fix: str) -> ValueError:
        at = self.text[self.pos] if self.pos < len(self.text) else "end of text"
        where = f"character {self.pos + 1} ({at!r})" if self.pos < len(self.text) else at
        text = short_text(self.text)
        return ValueError(f"at {where} of {text}: {what}; {fix} ({PYTREE_SYNTAX})")

    def skip(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos].isspace():
            self.pos += 1

    def peek(self) -> str:
        self.skip()
        return self.text[self.pos : self.pos + 1]

    def value(self, path: tuple):
        if len(path) >= MAX_DEPTH:
            raise self.error(
                f"the pytree nests deeper than {MAX_DEPTH} levels",
                "give each argument a flatter pytree",
            )
        c = self.peek()
        if c == "{":
            return self.mapping(path)
        if c in ("[", "("):
            return self.sequence(path, c)
        return self.leaf(path)

    def mapping(self, path: tuple) -> dict:
        self.pos += 1
        out: dict = {}
        while self.peek() != "}":
            start = self.pos
            key = self.key()
            if key in out:
                self.pos = start
                raise self.error(f"key {key!r} appears twice", "give each key once")
            if self.peek() != ":":
                raise self.error(f"expected ':' after key {key!r}", 'write "KEY": SPEC')
            self.pos += 1
            out[key] = self.value((*path, tree_util.DictKey(key)))
            if not self.separator("}"):
                break
        self.close("}", "dict")
        return out

    def sequence(self, path: tuple, opener: str):
        closer = _OPENERS[opener]
        self.pos += 1
        items = []
        while self.peek() != closer:
            items.append(self.value((*path, tree_util.SequenceKey(len(items)))))
            if not self.separator(closer):
                break
        self.close(closer, "list" if opener == "[" else "tuple")
        return items if opener == "[" else tuple(items)

    def separator(self, closer: str) -> bool:
        """Consumes a ',' (True: more may follow) or stops before `closer` (False)."""
        c = self.peek()
        if c == ",":
            self.pos += 1
            return True
        if c == closer:
            return False
        raise self.error(f"expected ',' or {closer!r}", "separate entries with commas")

    def close(self, closer: str, what: str) -> None:
        if self.peek() != closer:
            raise self.error(f"expected {closer!r} to close the {what}", f"add {closer!r}")
        self.pos += 1

    def key(self) -> str:
        c = self.peek()
        if c in ("'", '"'):
            return self.quoted()
        m = _NAME.match(self.text, self.pos)
        if m is None:
            raise self.error("expected a dict key", 'write keys as strings: "w"')
        self.pos = m.end()
        return m.group()

    def quoted(self) -> str:
        quote = self.text[self.pos]
        end = self.text.find(quote, self.pos + 1)
        if end < 0:
            raise self.error(f"the string opened here has no closing {quote}", f"add {quote}")
        self.pos, body = end + 1, self.text[self.pos + 1 : end]
        return body

    def leaf(self, path: tuple) -> ShapeDtype:
        start = self.pos
        c = self.peek()
        if c in ("'", '"'):
            body = self.quoted()
        else:
            m = _NAME.match(self.text, self.pos)
            if m is None:
                raise self.error(
                    "expected a spec such as f32[4,3], a dict, a list or a tuple",
                    "write each leaf as DTYPE[DIM,...]",
                )
            dims = _DIMS.match(self.text, m.end())
            if not dims:
                self.pos = m.end()
                if self.text[self.pos : self.pos + 1] == "[":
                    raise self.error(f"spec {m.group()}[... has no closing ']'", "add ']'")
                raise self.error(
                    f"expected '[' after dtype {m.group()!r}", f"write {m.group()}[DIM,...]"
                )
            self.pos = dims.end()
            body = self.text[start : self.pos]
        try:
            return spec(body)
        except ValueError as e:
            where = f"leaf {tree_util.keystr(path)}" if path else "the leaf"
            self.pos = start
            raise ValueError(
                f"{where} at character {start + 1} of {short_text(self.text)}: {e}"
            ) from None


def split_by_shell(values: list[str], i: int) -> str | None:
    """The spec the shell split at its spaces, when `values[i]` opens brackets that later
    values close (`f32[3,` `4]` from an unquoted `f32[3, 4]`); None otherwise."""
    depth = 0
    for j in range(i, len(values)):
        for c in values[j]:
            depth += c in "[{("
            depth -= c in "]})"
        if depth <= 0:
            return " ".join(values[i : j + 1]) if j > i else None
    return None


def format_tree(tree) -> str:
    """`{'w': f32[4,3]}` for a pytree of specs; `f32[4]` for a plain one."""
    if isinstance(tree, dict):
        return "{" + ", ".join(f"{k!r}: {format_tree(v)}" for k, v in tree.items()) + "}"
    if isinstance(tree, list):
        return "[" + ", ".join(map(format_tree, tree)) + "]"
    if isinstance(tree, tuple):
        inner = ", ".join(map(format_tree, tree))
        return f"({inner},)" if len(tree) == 1 else f"({inner})"
    return str(tree)


# --- Leaf names: one naming for the CLI and the stages' reprs (aotkit.arguments) --

leaf_names = arguments.leaf_names
output_names = arguments.output_names


_KEY_PART = re.compile(r"\[\s*(?:(\d+)|'([^']*)'|\"([^\"]*)\")\s*\]|\.([A-Za-z_][A-Za-z0-9_]*)")


def parse_key(key: str) -> tuple[str, tuple] | None:
    """`params['w'][0]` -> `('params', ('w', 0))`; `.attr` parts are `('.', 'attr')`. None
    when `key` is not a leaf name."""
    key = key.strip()
    m = _NAME.match(key)
    if m is None:
        return None
    head, pos, parts = m.group(), m.end(), []
    while pos < len(key):
        p = _KEY_PART.match(key, pos)
        if p is None:
            return None
        index, single, double, attr = p.groups()
        if index is not None:
            parts.append(int(index))
        elif attr is not None:
            parts.append((".", attr))
        else:
            parts.append(single if single is not None else double)
        pos = p.end()
    return head, tuple(parts)


def canonical(name: str, params: list[str] | None = None) -> tuple | None:
    """The comparable form of a leaf name (None if it is not one); `args[i]...` is parameter
    i's name when parameter i has a name (and none is called `args`)."""
    parsed = parse_key(name)
    if parsed is None:
        return None
    head, parts = parsed
    if (
        head == "args"
        and parts
        and isinstance(parts[0], int)
        and params is not None
        and "args" not in params
        and parts[0] < len(params)
    ):
        return (params[parts[0]], *parts[1:])
    return (head, *parts)


def tree_from_keys(keys: dict[str, ShapeDtype], where: str) -> dict:
    """`{'params['w']': f32[2], 'x': f32[3]}` -> `{'params': {'w': f32[2]}, 'x': f32[3]}`.

    Integer parts 0..n-1 make a list, string parts a dict.
    """
    nested: dict = {}
    for key, leaf in keys.items():
        parsed = parse_key(key)
        if parsed is None or any(isinstance(p, tuple) for p in parsed[1]):
            raise ValueError(
                f"{where}: key {key!r} is not a leaf path; name each array NAME, NAME['key'] "
                "or NAME[0] (nested: params['layers'][0]['w'])"
            )
        head, parts = parsed
        node, path = nested, (head, *parts)
        for i, part in enumerate(path[:-1]):
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ValueError(
                    f"{where}: key {key!r} puts a leaf under {_spell(path[: i + 1])}, which "
                    "another key names as an array; give each array one key"
                )
            node = child
        if path[-1] in node:
            raise ValueError(
                f"{where}: key {key!r} names {_spell(path)}, which holds other arrays; give "
                "each array one key"
            )
        node[path[-1]] = leaf
    return {head: _listify(tree, head, where) for head, tree in nested.items()}


def _listify(tree, path: str, where: str):
    if not isinstance(tree, dict):
        return tree
    keys = list(tree)
    ints = [k for k in keys if isinstance(k, int)]
    if ints and len(ints) != len(keys):
        raise ValueError(
            f"{where}: {path} has both index keys ([0]) and string keys (['w']); an argument "
            "is either a list or a dict"
        )
    if ints:
        if sorted(ints) != list(range(len(ints))):
            raise ValueError(
                f"{where}: the keys of {path} index {sorted(ints)}; a list needs every index "
                f"from 0 to {len(ints) - 1}"
            )
        return [_listify(tree[i], f"{path}[{i}]", where) for i in range(len(ints))]
    return {k: _listify(v, f"{path}[{k!r}]", where) for k, v in tree.items()}


def _spell(path: tuple) -> str:
    return path[0] + "".join(f"[{p!r}]" for p in path[1:])


# --- Times -----------------------------------------------------------------------------------


def human_time(seconds: float) -> str:
    """Three significant digits in the unit that keeps the number below 1000."""
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if seconds >= scale:
            value = seconds / scale
            if unit == "s" and value >= 100:
                return f"{value:.0f} s"
            text = f"{value:.3g}"
            if "e" not in text and float(text) < 1000:
                return f"{text} {unit}"
            return f"{value / 1e3:.3g} {'s' if unit == 'ms' else 'ms'}"
    return f"{seconds * 1e9:.3g} ns"
