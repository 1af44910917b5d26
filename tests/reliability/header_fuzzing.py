"""Fuzzing artifact headers: real artifacts whose header JSON is mutated and whose checksums
are recomputed, through `aotkit.load` -> call and `aotkit inspect`.

Byte flips (tests/reliability/fuzzing.py) stop at the header's SHA-256. Here every mutation
reaches the header checks: the header is parsed, edited as data (a key deleted or added, a
value of another type, hostile names, specs, donation flags, pytrees, options, the section
table, the target, the JSON encoding itself), encoded as aotkit's writer encodes it, every
section-table SHA-256 is recomputed over the bytes its entry now names, and the prefix gets
the new header's size and SHA-256 (`encode` reproduces an unmutated seed byte for byte).

Seeds are artifacts aotkit itself saved, in a child process with two host devices: a scalar
f32 function, pytrees of arguments and results (dicts, tuples, a list, None, a keyword
argument), a donated argument, integer and bool dtypes, a static argument (artifacts keep
only the dynamic ones), an interpreter-backend artifact (no executable section) and, when
there are two devices, a sharded program over them (format version 2, with its
`partitioning`; skipped, saying why, where there are not).

Each batch runs in a child (`python -m tests.reliability.header_fuzzing --child ...`), one
JSON line per case: load, call with the seed's arguments (NumPy arrays, then device arrays,
checking that the ones it does not donate survive), `repr`, and `aotkit inspect` through
`aotkit.cli.main`, all from inside the case's own trap folder (its working directory, and
every path an option names). Outcomes:

- refused: `aotkit.load` raised `ArtifactError`;
- held: the call returned the seed's results (values, dtypes, shapes, pytree);
- relabelled: the seed's result leaves, arranged by the header's own (mutated) result tree,
  which the file alone describes;
- call refused: a TypeError/ValueError for arguments that do not fit the specs or pytree
  the file now declares.

Defects: *unclear* (a refusal at load that is not an `ArtifactError`, any other exception
from the call, `aotkit inspect` reporting an internal error), *wrong* (other results, a
non-donated argument consumed), *escape* (a file in the trap folder, a raw control character
or a forged line in inspect's output, an exception, a warning or a repr), *death* (the child
ended by a signal or an exit: its batch is rerun one case per process to name the case) and
*hang* (a case still running after the watchdog's time).

`tests/reliability/test_fuzz_header.py` runs a small deterministic sample; the full run is
`python -m tests.reliability.header_fuzzing --mutations 3000`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

_ROOT = Path(__file__).resolve().parents[2]
BATCH_TIMEOUT_S = 300.0
CASE_TIMEOUT_S = 60.0
# The container's layout (docs/artifact-format.md): magic, format version (u32), header size
# (u32), SHA-256 of the header, all little-endian; then the header, then the sections.
MAGIC = b"\x89AOT\r\n\x1a\n"
_PREFIX = struct.Struct("<8sII32s")
# Two host devices, so that a sharded seed can be tried; the children run alike.
_DEVICES_FLAG = "--xla_force_host_platform_device_count=2"
DEFECTS = ("unclear", "wrong", "escape", "death", "hang")


# --- seeds -------------------------------------------------------------------------------------


def _seed_functions():
    """(name, jit keywords, function, argument values, keyword values) of every seed."""
    import aotkit.numpy as anp

    rng = np.random.default_rng(26)

    def f32(*shape):
        return rng.standard_normal(shape).astype(np.float32)

    def scalar(x):
        return x * 2.0 + 1.0

    def tree(params, xs, *, scale):
        h = xs[0] @ params["w"] + params["b"]
        return {"out": h * scale, "aux": (xs[1].sum(), None), "hist": [h - 1.0]}

    def donated(x, y):
        return x + y, y * 2.0

    def ints(a, mask, u):
        return anp.where(mask, a, -a), u + 1, a > 1, ~mask

    def static(x, n):
        return x * n + n

    return [
        ("scalar", {}, scalar, (np.float32(1.5),), {}),
        (
            "tree",
            {},
            tree,
            ({"w": f32(3, 2), "b": f32(2)}, (f32(3), f32(3))),
            {"scale": np.float32(0.5)},
        ),
        ("donated", {"donate_argnums": 0}, donated, (f32(4), f32(4)), {}),
        (
            "ints",
            {},
            ints,
            (
                np.array([3, -1, 0, 7], np.int32),
                np.array([True, False, True, False]),
                np.array([0, 254, 255], np.uint8),
            ),
            {},
        ),
        ("static", {"static_argnums": 1}, static, (f32(3), 3), {}),
        ("interpreter", {"backend": "interpreter"}, scalar, (np.float32(-2.0),), {}),
    ]


def _make_seeds(folder: Path) -> int:
    """Saves every seed (NAME.aotx) and writes seeds.json: each seed's arguments and the
    results of loading and calling it, and the seeds that could not be saved, with why."""
    import jax
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    import aotkit
    from tests.artifact_child import decode, encode

    info: dict[str, dict] = {}
    skipped: dict[str, str] = {}
    for name, options, fn, args, kwargs in _seed_functions():
        static = options.get("static_argnums")
        compiled = aotkit.jit(fn, **options).lower(*args, **kwargs).compile()
        path = folder / f"{name}.aotx"
        compiled.save(path)
        dynamic = tuple(a for i, a in enumerate(args) if i != static)
        expected = aotkit.load(path)(*decode(encode(dynamic)), **decode(encode(kwargs)))
        info[name] = {
            "args": encode(dynamic),
            "kwargs": encode(kwargs),
            "expected": encode(jax.tree_util.tree_map(np.asarray, expected)),
        }
    devices = jax.devices()
    if len(devices) < 2:
        skipped["sharded"] = f"{len(devices)} host device (XLA_FLAGS={_DEVICES_FLAG} not in effect)"
    else:
        mesh = Mesh(np.array(devices[:2]), ("data",))
        sharded = aotkit.jit(
            lambda x: x * 3.0, in_shardings=NamedSharding(mesh, PartitionSpec("data"))
        )
        x = np.arange(4, dtype=np.float32)
        try:
            sharded.lower(x).compile().save(folder / "sharded.aotx")
        except ValueError as e:
            skipped["sharded"] = f"saving is refused: {str(e)[:160]}"
        else:
            info["sharded"] = {
                "args": encode((x,)),
                "kwargs": encode({}),
                "expected": encode(np.asarray(aotkit.load(folder / "sharded.aotx")(x))),
            }
    (folder / "seeds.json").write_text(json.dumps({"seeds": info, "skipped": skipped}))
    return 0


def _child_env(tmp: Path | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} {_DEVICES_FLAG}".strip()
    env.pop("AOTKIT_DUMP_DIR", None)
    env.pop("AOTKIT_CACHE_DIR", None)
    if tmp is not None:
        env["TMPDIR"] = str(tmp)
    return env


@dataclass
class Seeds:
    folder: Path
    data: dict[str, bytes]  # name -> artifact bytes
    skipped: dict[str, str]  # name -> why it is not a seed


def seeds(folder: Path) -> Seeds:
    """Builds the seeds in a child process under `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [sys.executable, "-m", "tests.reliability.header_fuzzing", "--make-seeds", str(folder)],
        cwd=_ROOT,
        env=_child_env(),
        check=True,
        capture_output=True,
        timeout=BATCH_TIMEOUT_S,
    )
    found = json.loads((folder / "seeds.json").read_text())
    data = {name: (folder / f"{name}.aotx").read_bytes() for name in found["seeds"]}
    return Seeds(folder, data, found["skipped"])


# --- the container, as aotkit's writer makes it ------------------------------------------------


def split(data: bytes) -> tuple[dict, bytes]:
    """(header, the bytes after it) of a well-formed artifact."""
    _, _, size, _ = _PREFIX.unpack_from(data, 0)
    start = _PREFIX.size
    return json.loads(data[start : start + size].decode("utf-8")), data[start + size :]


class Draft:
    """A header being mutated, with the section bytes after it.

    `raw` maps placeholder strings (put in the header by `raw_value`) to JSON text that
    replaces them once encoded: values no Python object encodes to (`1e999`, nesting past
    the encoder's recursion limit). `text` (if set) rewrites the encoded JSON text, and
    `encoding` encodes it; `keep_sha` leaves the table's SHA-256s as the mutation set them;
    `header_size_delta` makes the prefix declare a header that many bytes longer.
    """

    def __init__(self, data: bytes):
        self.header, body = split(data)
        self.body = bytearray(body)
        # The seed's format version (1, or 2 for pytree nodes and sharded programs): kept.
        self.version = _PREFIX.unpack_from(data)[1]
        self.raw: dict[str, str] = {}
        self.text = None
        self.encoding = "utf-8"
        self.keep_sha = False
        self.header_size_delta = 0

    def raw_value(self, text: str) -> str:
        token = f"\x00raw{len(self.raw)}\x00"
        self.raw[json.dumps(token)] = text
        return token

    def section_spans(self) -> list[tuple[dict, int, int]]:
        """(entry, start, end) in `body` of each well-formed table entry, in order."""
        spans, offset = [], 0
        table = self.header.get("sections") if isinstance(self.header, dict) else None
        for entry in table if isinstance(table, list) else []:
            size = entry.get("size") if isinstance(entry, dict) else None
            if isinstance(size, bool) or not isinstance(size, int) or size < 0:
                break
            spans.append((entry, offset, offset + size))
            offset += size
        return spans


def encode(draft: Draft) -> bytes:
    """The artifact bytes of `draft`, with every checksum recomputed as the writer does."""
    if not draft.keep_sha:
        for entry, start, end in draft.section_spans():
            sha = entry.get("sha256")
            if end <= len(draft.body) and isinstance(sha, str) and len(sha) == 64:
                entry["sha256"] = hashlib.sha256(draft.body[start:end]).hexdigest()
    text = json.dumps(draft.header, sort_keys=True, separators=(",", ":"))
    for token, raw in draft.raw.items():
        text = text.replace(token, raw)
    if draft.text is not None:
        text = draft.text(text)
    raw = text.encode(draft.encoding, errors="surrogatepass")
    size = max(0, len(raw) + draft.header_size_delta)
    rest = raw + bytes(draft.body)
    digest = hashlib.sha256(rest[:size]).digest()
    return _PREFIX.pack(MAGIC, draft.version, size, digest) + rest


# --- mutations ---------------------------------------------------------------------------------

KINDS = (
    "delete",
    "unknown_key",
    "retype",
    "control",
    "spec",
    "spec_count",
    "donated",
    "tree",
    "options",
    "sections",
    "target",
    "encoding",
)
# Text a hostile writer puts in names: ANSI escapes, line breaks that forge a line of
# output, NUL, C1 controls, a bidi override, a lone surrogate.
HOSTILE = (
    "\x1b[31mRED\x1b[0m",
    "\x1b]0;title\x07",
    "\nFORGED line",
    "\rFORGED",
    "\x00",
    "\x07\x08\x7f",
    "\x9b2J",
    "\u202eevil",
    "\ud800",
    "\u2028FORGED",
    "\t",
)
FORGED = ("\nFORGED", "\rFORGED")


def _walk(node, path=()):
    yield path, node
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _walk(value, (*path, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _walk(value, (*path, i))


def _get(node, path):
    for key in path:
        node = node[key]
    return node


def _set(root, path, value):
    _get(root, path[:-1])[path[-1]] = value


def _name(path) -> str:
    return ".".join(map(str, path)) or "<header>"


def _nested_list(depth: int):
    node: list = []
    for _ in range(depth):
        node = [node]
    return node


def _odd_value(rng: random.Random, draft: Draft) -> tuple[str, object]:
    """A value of some other type or an extreme one: (what it is, the value)."""
    deep = 100_000
    choices = [
        ("a string", lambda: "x"),
        ("an empty string", lambda: ""),
        ("the int 7", lambda: 7),
        ("0", lambda: 0),
        ("-1", lambda: -1),
        ("the float 2.5", lambda: 2.5),
        ("null", lambda: None),
        ("[]", lambda: []),
        ('["*", 1]', lambda: ["*", 1]),
        ("{}", lambda: {}),
        ('{"a": 1}', lambda: {"a": 1}),
        ("true", lambda: True),
        ("false", lambda: False),
        ("10**400", lambda: 10**400),
        ("2**64", lambda: 2**64),
        ("-2**63 - 1", lambda: -(2**63) - 1),
        ("NaN", lambda: float("nan")),
        ("Infinity", lambda: float("inf")),
        ("-Infinity", lambda: float("-inf")),
        ('"NaN"', lambda: "NaN"),
        ('"Infinity"', lambda: "Infinity"),
        ("1e999 (JSON text)", lambda: draft.raw_value("1e999")),
        ("-0.0", lambda: -0.0),
        ("a 5000-digit int (JSON text)", lambda: draft.raw_value("9" * 5000)),
        ("a 1 MiB string", lambda: "A" * (1 << 20)),
        ("a list nested 300 deep", lambda: _nested_list(300)),
        (f"a list nested {deep} deep", lambda: draft.raw_value("[" * deep + "]" * deep)),
        (
            f"an object nested {deep} deep",
            lambda: draft.raw_value('{"a":' * deep + "1" + "}" * deep),
        ),
        ("a 100000-element list", lambda: [0] * 100_000),
        ("control characters", lambda: rng.choice(HOSTILE)),
    ]
    what, make = rng.choice(choices)
    return what, make()


def _paths(header, want=None) -> list[tuple]:
    return [p for p, v in _walk(header) if p and (want is None or want(v))]


def _m_delete(rng, draft, seed):
    path = rng.choice(_paths(draft.header))
    del _get(draft.header, path[:-1])[path[-1]]
    return f"deleted {_name(path)}"


def _m_unknown_key(rng, draft, seed):
    dicts = [(), *_paths(draft.header, lambda v: isinstance(v, dict))]
    path = rng.choice(dicts)
    key = rng.choice(["zzz_unknown", "", "\x1b[2Jkey", "__class__", "sections_", "Name"])
    what, value = _odd_value(rng, draft)
    _get(draft.header, path)[key] = value
    return f"added key {key!r} = {what} to {_name(path)}"


def _m_retype(rng, draft, seed):
    path = rng.choice(_paths(draft.header))
    what, value = _odd_value(rng, draft)
    _set(draft.header, path, value)
    return f"{_name(path)} = {what}"


def _hostile(rng, text: str) -> tuple[str, str]:
    bad = rng.choice(HOSTILE)
    how = rng.choice(["prefix", "suffix", "replace"])
    new = {"prefix": bad + text, "suffix": text + bad, "replace": bad}[how]
    return f"{how} {bad!r}", new


def _m_control(rng, draft, seed):
    strings = _paths(draft.header, lambda v: isinstance(v, str))
    dicts = [(), *_paths(draft.header, lambda v: isinstance(v, dict) and v)]
    favourite = [p for p in strings if p[0] in ("name", "in_tree", "out_tree")]
    if rng.random() < 0.3:  # a dict key: a header key, an option or target name
        path = rng.choice(dicts)
        node = _get(draft.header, path)
        key = rng.choice(sorted(node))
        how, new = _hostile(rng, key)
        node[new] = node.pop(key)
        return f"key {_name((*path, key))}: {how}"
    path = rng.choice(favourite if favourite and rng.random() < 0.5 else strings)
    how, new = _hostile(rng, _get(draft.header, path))
    _set(draft.header, path, new)
    return f"{_name(path)}: {how}"


_SPEC = re.compile(r"^(\w*)\[(.*)\]$")
DTYPES = ("f16", "bf16", "f32", "f64", "i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64",
          "bool", "c64", "c128", "float32", "int32", "F32", "f8e4m3fn", "int4", "object",
          "str", "void", "V8", "S4", "U1", "datetime64", "O", "float", "int", "complex",
          "longdouble", "float128", "f0", "")  # fmt: skip
DIMS = ("0", "1", "2", "5", "-1", "9223372036854775807", "9223372036854775808",
        "18446744073709551616", "1" + "0" * 400, "1e3", " 3", "03", "\uff13", "\u00b2",
        "\u0663", "", "1_000", "3.0", "0x3")  # fmt: skip


def _m_spec(rng, draft, seed):
    field_name = rng.choice(["in_specs", "out_specs"])
    texts = draft.header.get(field_name)
    if not texts:
        draft.header[field_name] = ["f32[]"]
        return f"{field_name} = ['f32[]'] (was empty)"
    i = rng.randrange(len(texts))
    old = texts[i]
    m = _SPEC.match(old)
    dtype, dims = (m.group(1), m.group(2).split(",") if m.group(2) else []) if m else ("f32", [])
    how = rng.choice(["dtype", "dim", "rank+", "rank-", "garbage"])
    if how == "dtype":
        dtype = rng.choice(DTYPES)
    elif how == "dim" and dims:
        dims[rng.randrange(len(dims))] = rng.choice(DIMS)
    elif how in ("dim", "rank+"):
        dims.insert(rng.randrange(len(dims) + 1), rng.choice(DIMS))
    elif how == "rank-" and dims:
        del dims[rng.randrange(len(dims))]
    new = f"{dtype}[{','.join(dims)}]"
    if how == "garbage" or new == old and how == "rank-":
        new = rng.choice(["f32", "f32[", "[]", "f32[2][3]", f"{old}x", f" {old} ", old * 2,
                          "f32[2 3]", "f32[2,]", "f32[,]", "f32(2)", old.upper()])  # fmt: skip
    texts[i] = new
    return f"{field_name}[{i}] {old!r} -> {new!r}"


def _add_leaf(tree, where: str):
    """`tree` with one more leaf: the argument tree gets one more positional argument."""
    if where == "in_tree":
        tree["tuple"][0]["tuple"].append("*")
        return tree
    if tree == "*":
        return {"tuple": ["*", "*"]}
    return {"tuple": [tree, "*"]}


def _m_spec_count(rng, draft, seed):
    field_name = rng.choice(["in_specs", "out_specs"])
    texts = draft.header[field_name]
    tree_name = "in_tree" if field_name == "in_specs" else "out_tree"
    how = rng.choice(["add", "add consistently", "remove", "remove consistently", "duplicate"])
    if how.startswith("add"):
        extra = rng.choice(["f32[]", "f32[4]", "i32[4]", texts[0] if texts else "f32[]"])
        texts.append(extra)
        if how == "add consistently":
            draft.header[tree_name] = _add_leaf(draft.header[tree_name], tree_name)
            if field_name == "in_specs":
                draft.header["donated"].append(False)
        return f"{how} {field_name} + {extra!r}"
    if how == "duplicate":
        draft.header[field_name] = texts + texts
        return f"{field_name} doubled"
    if not texts:
        return _m_spec(rng, draft, seed)
    removed = texts.pop()
    if how == "remove consistently" and field_name == "in_specs":
        args = draft.header["in_tree"]["tuple"][0]["tuple"]
        if args and args[-1] == "*":
            args.pop()
            draft.header["donated"].pop()
    return f"{how} {field_name}[-1] {removed!r}"


def _m_donated(rng, draft, seed):
    flags = draft.header["donated"]
    how = rng.choice(["flip", "drop", "append", "int", "string", "null", "all true"])
    if how == "flip" and flags:
        i = rng.randrange(len(flags))
        flags[i] = not flags[i]
        return f"donated[{i}] flipped to {flags[i]}"
    if how == "drop" and flags:
        flags.pop()
        return "donated lost its last flag"
    if how in ("int", "string", "null") and flags:
        i = rng.randrange(len(flags))
        flags[i] = {"int": int(flags[i]), "string": str(flags[i]).lower(), "null": None}[how]
        return f"donated[{i}] = {flags[i]!r}"
    if how == "all true":
        draft.header["donated"] = [True] * len(flags)
        return "donated all true"
    flags.append(rng.choice([True, False]))
    return f"donated + {flags[-1]}"


def _deep_tree(draft: Draft, depth: int):
    if depth <= 300:
        node: object = "*"
        for _ in range(depth):
            node = {"tuple": [node]}
        return node
    return draft.raw_value('{"tuple":[' * depth + '"*"' + "]}" * depth)


def _m_tree(rng, draft, seed):
    name = rng.choice(["in_tree", "out_tree"])
    root = draft.header[name]
    how = rng.choice(["node", "node", "node", "entry", "deep", "swap", "args"])
    if how == "deep":
        depth = rng.choice([254, 255, 256, 257, 300, 5000])
        if name == "in_tree":
            leaf = _deep_tree(draft, depth)
            draft.header[name] = {"tuple": [{"tuple": [leaf]}, {"dict": []}]}
            draft.header["in_specs"] = ["f32[]"]
            draft.header["donated"] = [False]
        else:
            draft.header[name] = _deep_tree(draft, depth)
            draft.header["out_specs"] = draft.header["out_specs"][:1] or ["f32[]"]
        return f"{name} = one leaf nested {depth} tuples deep"
    if how == "swap":
        draft.header["in_tree"], draft.header["out_tree"] = (
            draft.header["out_tree"],
            draft.header["in_tree"],
        )
        return "in_tree and out_tree swapped"
    if how == "args":
        root = draft.header["in_tree"]
        change = rng.choice(["args list", "kwargs list", "kwargs tuple", "triple", "bare"])
        if change == "args list":
            root["tuple"][0] = {"list": root["tuple"][0]["tuple"]}
        elif change == "kwargs list":
            root["tuple"][1] = {"list": [e[1] for e in root["tuple"][1]["dict"]]}
        elif change == "kwargs tuple":
            root["tuple"][1] = {"tuple": []}
        elif change == "triple":
            root["tuple"].append({"dict": []})
        else:
            draft.header["in_tree"] = root["tuple"][0]
        return f"in_tree: {change}"
    nodes = [p for p, v in _walk(root)]
    if how == "entry":
        entries = [p for p in nodes if isinstance(_get(root, p), list) and len(p) >= 1
                   and p[-1] == "dict"]  # fmt: skip
        entries = [p for p in entries if _get(root, p)]
        if entries:
            path = rng.choice(entries)
            items = _get(root, path)
            i = rng.randrange(len(items))
            change = rng.choice(["rename", "int key", "bool key", "null key", "float key",
                                 "list key", "huge key", "hostile key", "duplicate", "drop",
                                 "short", "long", "object"])  # fmt: skip
            key = {"rename": "zz", "int key": 0, "bool key": True, "null key": None,
                   "float key": 1.5, "list key": ["a"], "huge key": 10**400,
                   "hostile key": rng.choice(HOSTILE)}.get(change)  # fmt: skip
            if key is not None or change == "null key":
                items[i] = [key, items[i][1]]
            elif change == "duplicate":
                items.append(list(items[i]))
            elif change == "drop":
                del items[i]
            elif change == "short":
                items[i] = items[i][:1]
            elif change == "long":
                items[i] = [*items[i], "*"]
            else:
                _set(root, path, {str(k): v for k, v in items})
            return f"{name}.{_name(path)}[{i}]: dict entry {change}"
    path = rng.choice(nodes)
    node = _get(root, path)
    options = ["null", "leaf", "empty tuple", "wrap", "kind", "extra key", "set", "reverse",
               "drop child", "duplicate child", "bare list"]  # fmt: skip
    change = rng.choice(options)
    if change == "null":
        new = None
    elif change == "leaf":
        new = "*"
    elif change == "empty tuple":
        new = {"tuple": []}
    elif change == "wrap":
        new = {"tuple": [node]}
    elif change == "bare list":
        new = [node]
    elif isinstance(node, dict) and len(node) == 1:
        ((kind, items),) = node.items()
        if change == "kind":
            other = {"tuple": "list", "list": "tuple", "dict": "tuple"}.get(kind, "tuple")
            if kind == "dict":  # the dict's children, without their keys
                items = [e[1] if isinstance(e, list) and len(e) == 2 else e for e in items]
            new = {other: items}
        elif change == "extra key":
            new = {kind: items, "list": []} if kind != "list" else {kind: items, "tuple": []}
        elif change == "set":
            new = {rng.choice(["set", "namedtuple", "Tuple", "frozenset", "deque"]): items}
        elif change == "reverse":
            new = {kind: items[::-1]}
        elif change == "drop child" and items:
            new = {kind: items[:-1]}
        elif change == "duplicate child" and items:
            new = {kind: [*items, items[-1]]}
        else:
            new = {kind: [*items, "*"]}
    else:
        new = {"tuple": [node, node]}
    if path:
        _set(root, path, new)
    else:
        draft.header[name] = new
    return f"{name}.{_name(path)}: {change}"


# Options whose names make XLA write files (to the trap folder here), some spelled to slip
# past a name check, options of other types and values, and ones XLA does not know.
PATH_OPTIONS = ("xla_dump_to", "XLA_DUMP_TO", "xla_dump_to ", " xla_dump_to", "--xla_dump_to",
                "xla-dump-to", "xla_dump_t\u2c9f", "xla_dump_hlo_as_text", "xla_dump_hlo_as_proto",
                "xla_dump_hlo_as_dot", "xla_dump_hlo_pass_re", "xla_dump_hlo_snapshots",
                "xla_dump_max_hlo_modules", "xla_enable_dumping", "xla_hlo_profile",
                "xla_gpu_dump_llvmir", "xla_gpu_target_config_filename",
                "xla_gpu_load_autotune_results_from", "xla_gpu_kernel_cache_file",
                "xla_gpu_per_fusion_autotune_cache_dir", "xla_gpu_algorithm_denylist_path",
                "xla_gpu_experimental_enable_buffer_saver_on_thunks", "xla_detailed_logging",
                "xla_enable_scoped_logging_timers", "xla_dump_to=/tmp",
                "xla_dump_to,xla_dump_hlo_as_text")  # fmt: skip
PLAIN_OPTIONS = ("xla_cpu_enable_fast_math", "xla_backend_optimization_level",
                 "xla_cpu_max_isa", "xla_disable_hlo_passes", "xla_cpu_use_thunk_runtime",
                 "xla_cpu_multi_thread_eigen", "xla_llvm_disable_expensive_passes",
                 "xla_embed_ir_in_executable", "xla_backend_extra_options",
                 "xla_cpu_parallel_codegen_split_count", "xla_cpu_prefer_vector_width",
                 "not_an_xla_flag", "", "xla_cpu_enable_fast_math\x00")  # fmt: skip


def _option_value(rng, draft, trap: str, name: str):
    if name == "xla_backend_extra_options":
        return rng.choice(["", "-info-output-file=" + trap + "/llvm.txt,-stats",
                           "-print-after-all", "-nosuchllvmflag", "a=b,c=d", "=,="])  # fmt: skip
    choices = [
        ("the trap folder", lambda: trap + "/dump"),
        ("a relative path", lambda: "dump"),
        ("true", lambda: True),
        ("false", lambda: False),
        ("1", lambda: 1),
        ("-1", lambda: -1),
        ("0.5", lambda: 0.5),
        ("10**400", lambda: 10**400),
        ("2**63", lambda: 2**63),
        ("NaN", lambda: float("nan")),
        ("Infinity", lambda: float("inf")),
        ('"true"', lambda: "true"),
        ('"SSE4_2"', lambda: "SSE4_2"),
        ('"AVX512"', lambda: "AVX512"),
        ('"algsimp"', lambda: "algsimp"),
        ("a 1 MiB string", lambda: "A" * (1 << 20)),
        ("a list", lambda: [trap]),
        ("an object", lambda: {"to": trap}),
        ("null", lambda: None),
        ("control characters", lambda: rng.choice(HOSTILE)),
    ]
    return rng.choice(choices)[1]()


def _m_options(rng, draft, seed, trap: str):
    options = draft.header.get("options")
    if not isinstance(options, dict):
        options = draft.header["options"] = {}
    added = []
    for _ in range(rng.choice([1, 1, 2, 3])):
        name = rng.choice(PATH_OPTIONS if rng.random() < 0.6 else PLAIN_OPTIONS)
        value = _option_value(rng, draft, trap, name)
        if isinstance(value, str) and len(value) > 60:
            shown = f"<{len(value)} chars>"
        else:
            shown = repr(value) if not isinstance(value, int) or abs(value) < 10**20 else "<huge>"
        options[name] = value
        added.append(f"{name!r}: {shown}")
    return "options + {" + ", ".join(added) + "}"


def _m_sections(rng, draft, seed):
    table = draft.header["sections"]
    spans = draft.section_spans()
    how = rng.choice(["size", "shift", "resize", "swap", "rename", "reorder", "drop", "add",
                      "duplicate", "sha", "size type", "header size", "table type"])  # fmt: skip
    i = rng.randrange(len(table))
    entry = table[i]
    if how == "size":
        delta = rng.choice([-1, 1, -100, 4096, -entry["size"]])
        entry["size"] += delta
        return f"sections[{i}] ({entry['name']}).size {delta:+d}, bytes unchanged"
    if how == "shift" and len(table) > 1:
        j = (i + 1) % len(table)
        first, second = sorted((i, j))
        k = rng.choice([1, 8, 64, table[second]["size"]])
        k = min(k, table[second]["size"])
        table[first]["size"] += k
        table[second]["size"] -= k
        return f"{k} bytes moved from section {table[second]['name']} to {table[first]['name']}"
    if how == "resize":
        _, start, end = spans[i]
        new = rng.choice([0, 1, (end - start) // 2, end - start - 1, end - start + 16])
        new = max(new, 0)
        pad = bytes(rng.randrange(256) for _ in range(max(0, new - (end - start))))
        draft.body[start:end] = bytes(draft.body[start:end])[:new] + pad
        entry["size"] = new
        return f"section {entry['name']} resized to {new} bytes (truncated or padded)"
    if how == "swap" and len(table) > 1:
        j = rng.choice([k for k in range(len(table)) if k != i])
        table[i]["name"], table[j]["name"] = table[j]["name"], table[i]["name"]
        return f"section names {table[i]['name']} and {table[j]['name']} swapped"
    if how == "rename":
        old = entry["name"]
        entry["name"] = rng.choice(["stablehlo", "executable", "text", "STABLEHLO", "extra",
                                    "", "stablehlo ", "\x1b[31mtext"])  # fmt: skip
        return f"section {old} renamed {entry['name']!r}"
    if how == "reorder":
        order = list(range(len(table)))
        rng.shuffle(order)
        chunks = [bytes(draft.body[s:e]) for _, s, e in spans]
        draft.header["sections"] = [table[k] for k in order]
        draft.body[:] = b"".join(chunks[k] for k in order)
        return f"sections reordered with their bytes: {[table[k]['name'] for k in order]}"
    if how == "drop":
        _, start, end = spans[i]
        del table[i]
        del draft.body[start:end]
        return f"section {entry['name']} dropped with its bytes"
    if how in ("add", "duplicate"):
        if how == "add":
            name = rng.choice(["extra", "stablehlo", "executable", "\x1b[2Jextra", "x" * 300])
            data = bytes(rng.randrange(256) for _ in range(rng.choice([0, 1, 100])))
        else:
            name = entry["name"]
            data = bytes(draft.body[spans[i][1] : spans[i][2]])
        table.append({"name": name, "sha256": "0" * 64, "size": len(data)})
        draft.body += data
        return f"section {name!r} appended ({len(data)} bytes)"
    if how == "sha":
        draft.keep_sha = True
        change = rng.choice(["upper", "63", "65", "not hex", "another"])
        sha = hashlib.sha256(draft.body[spans[i][1] : spans[i][2]]).hexdigest()
        entry["sha256"] = {"upper": sha.upper(), "63": sha[:63], "65": sha + "0",
                           "not hex": "g" * 64, "another": "0" * 64}[change]  # fmt: skip
        return f"sections[{i}].sha256: {change}"
    if how == "size type":
        size = entry["size"]
        what, value = rng.choice([("a string", str(size)), ("a float", size + 0.0),
                                  ("true", True), ("-1", -1), ("2**64", 2**64),
                                  ("10**400", 10**400), ("null", None)])  # fmt: skip
        entry["size"] = value
        return f"sections[{i}].size = {what}"
    if how == "header size":
        draft.header_size_delta = rng.choice([-1, 1, 16, -16])
        return f"prefix header size {draft.header_size_delta:+d} (its SHA-256 recomputed)"
    what, value = rng.choice([("{}", {}), ("[]", []), ("null", None), ("a string", "stablehlo")])
    draft.header["sections"] = value
    return f"sections = {what}"


def _m_target(rng, draft, seed):
    target = draft.header["target"]
    how = rng.choice(["backend", "value", "drop", "add", "format", "versions"])
    if how == "backend":
        target["backend"] = rng.choice(["interpreter", "iree", "nosuch", "CPU", "", "cpu\x00",
                                        "cpu" if target["backend"] != "cpu" else "interpreter",
                                        "aotkit.backends.cpu", "../cpu"])  # fmt: skip
        return f"target.backend = {target['backend']!r}"
    if how == "value":
        key = rng.choice(sorted(target))
        target[key] = rng.choice(["", "x86_64 0000000000000000", "jaxlib 0.0.1", "tpu",
                                  "cpu", target[key] + " "])  # fmt: skip
        return f"target.{key} = {target[key]!r}"
    if how == "drop":
        key = rng.choice(sorted(target))
        del target[key]
        return f"target.{key} deleted"
    if how == "add":
        target[rng.choice(["extra", "devices", "mesh"])] = rng.choice(["1", "2", ""])
        return "target + an unknown key"
    if how == "format":
        draft.header["executable_format"] = rng.choice([None, "iree-vmfb", "pjrt2", "", "PJRT"])
        return f"executable_format = {draft.header['executable_format']!r}"
    key = rng.choice(["aotkit", "jaxlib", "stablehlo"])
    draft.header[key] = rng.choice(["", "9.9.9", "0.0.0", "1.17.0\x1b[31m", "x" * 10_000])
    return f"{key} version = {_short(draft.header[key])}"


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _m_encoding(rng, draft, seed):
    how = rng.choice(["indent", "unsorted", "utf-8 text", "bom", "duplicate key", "trailing",
                      "whitespace", "list", "null", "empty object", "empty", "invalid utf-8",
                      "utf-16", "nan literal", "padding", "comment"])  # fmt: skip
    keys = list(draft.header)

    def unsorted(text):
        rng.shuffle(keys)
        return json.dumps({k: draft.header[k] for k in keys}, separators=(",", ":"))

    rewrite = {
        "indent": lambda t: json.dumps(json.loads(t), sort_keys=True, indent=2),
        "unsorted": unsorted,
        "utf-8 text": lambda t: json.dumps(json.loads(t), sort_keys=True, ensure_ascii=False),
        "bom": lambda t: "\ufeff" + t,
        "duplicate key": lambda t: '{"name":"dup",' + t[1:],
        "trailing": lambda t: t + " x",
        "whitespace": lambda t: " \n\t" + t + "\r\n ",
        "list": lambda t: "[" + t + "]",
        "null": lambda t: "null",
        "empty object": lambda t: "{}",
        "empty": lambda t: "",
        "invalid utf-8": lambda t: t.replace('"name":"', '"name":"\udcff', 1),
        "utf-16": lambda t: t,
        "nan literal": lambda t: t.replace('"donated":[', '"donated":[NaN,', 1),
        "padding": lambda t: t + " " * (4 << 20),
        "comment": lambda t: "// aotkit\n" + t,
    }[how]
    draft.text = rewrite
    if how == "utf-16":
        draft.encoding = "utf-16"
    return f"header JSON: {how}"


_MUTATORS = {
    "delete": _m_delete,
    "unknown_key": _m_unknown_key,
    "retype": _m_retype,
    "control": _m_control,
    "spec": _m_spec,
    "spec_count": _m_spec_count,
    "donated": _m_donated,
    "tree": _m_tree,
    "sections": _m_sections,
    "target": _m_target,
    "encoding": _m_encoding,
}


def mutate(rng: random.Random, kind: str, data: bytes, trap: str) -> tuple[str, bytes]:
    """One mutation of kind `kind` of the artifact `data`: (what was done, the new bytes).
    Options that name paths name `trap`."""
    draft = Draft(data)
    if kind == "options":
        what = _m_options(rng, draft, data, trap)
    else:
        what = _MUTATORS[kind](rng, draft, data)
    return what, encode(draft)


@dataclass
class Case:
    id: int
    seed: str
    kind: str
    what: str
    folder: Path  # the case's own folder: the artifact and the trap folder
    data: bytes = b""

    @property
    def trap(self) -> Path:
        return self.folder / "trap"

    def label(self) -> str:
        return f"case {self.id} ({self.seed}, {self.kind}): {self.what}"


def mutations(count: int, seed: int, found: Seeds, root: Path) -> list[Case]:
    """`count` cases, each in its own folder under `root`, mutating the seeds in turn."""
    rng = random.Random(seed)
    names = sorted(found.data)
    cases = []
    for i in range(count):
        name = names[i % len(names)]
        kind = rng.choice(KINDS)
        folder = root / f"case{i:05d}"
        what, data = mutate(rng, kind, found.data[name], str(folder / "trap"))
        cases.append(Case(i, name, kind, what, folder, data))
    return cases


# --- the child ---------------------------------------------------------------------------------


def raw_control(text: str) -> str | None:
    """What in `text` would reach a terminal raw: a control character other than a newline
    or tab, or a line a file forged; None if nothing."""
    for c in text:
        if c not in "\n\t" and not c.isprintable():
            return f"raw {ascii(c)}"
    for forged in FORGED:
        if forged in text:
            return f"a forged line ({forged!r})"
    return None


def _files(folder: Path) -> list[str]:
    if not folder.exists():
        return []
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def compare(got, want) -> str:
    """Whether `got` is `want`: "held" (equal results), "relabelled" (equal leaves in another
    pytree) or what differs."""
    from jax import tree_util

    got_leaves, got_tree = tree_util.tree_flatten(got)
    want_leaves, want_tree = tree_util.tree_flatten(want)
    if len(got_leaves) != len(want_leaves):
        return f"{len(got_leaves)} result leaves, the seed's {len(want_leaves)}"
    for i, (g, w) in enumerate(zip(got_leaves, want_leaves, strict=True)):
        shape, dtype = tuple(getattr(g, "shape", ())), getattr(g, "dtype", None)
        a, w = np.asarray(g), np.asarray(w)
        if (shape, dtype, a.shape) != (w.shape, w.dtype, w.shape):
            return (
                f"result {i} is {dtype}{list(shape)} (as NumPy {a.dtype}{list(a.shape)}), "
                f"not {w.dtype}{list(w.shape)}"
            )
        if np.issubdtype(w.dtype, np.inexact):
            same = np.allclose(a, w, rtol=1e-5, atol=1e-6, equal_nan=True)
        else:
            same = np.array_equal(a, w)
        if not same:
            return f"result {i} is {a.tolist()!r:.80}, not {w.tolist()!r:.80}"
    return "held" if got_tree == want_tree else "relabelled"


def _run_case(case: dict, seed: dict, cli, aotkit) -> dict:
    import contextlib
    import io
    import warnings

    from tests.artifact_child import decode

    answer: dict = {"id": case["id"], "defects": []}
    start = time.monotonic()

    def defect(kind: str, detail: str) -> None:
        answer["defects"].append([kind, detail[:400]])

    def check_text(where: str, text: str) -> None:
        found = raw_control(text)
        if found:
            defect("escape", f"{where} holds {found}: {text[:200]!r}")

    trap = Path(case["trap"])
    trap.mkdir(parents=True, exist_ok=True)
    os.chdir(trap)
    path = case["path"]
    args, kwargs = decode(seed["args"]), decode(seed["kwargs"])
    expected = decode(seed["expected"])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            compiled = aotkit.load(path)
        except aotkit.ArtifactError as e:
            answer["outcome"] = "refused"
            answer["refusal"] = refusal_kind(str(e))
            check_text("the ArtifactError", str(e))
            compiled = None
        except Exception as e:
            answer["outcome"] = f"load {type(e).__name__}"
            defect("unclear", f"load raised {type(e).__name__}: {e}")
            check_text("the load error", str(e))
            compiled = None
        if compiled is not None:
            check_text("repr", repr(compiled))
            answer["outcome"] = _call(compiled, args, kwargs, expected, defect, check_text, answer)
            if answer["outcome"] in ("held", "relabelled"):
                device_args, device_kwargs = _on_devices(
                    compiled, decode(seed["args"]), decode(seed["kwargs"])
                )
                _call_on_device(compiled, device_args, device_kwargs, expected, defect)
    for w in caught:
        check_text(f"a {w.category.__name__}", str(w.message))
    answer["warnings"] = sorted({w.category.__name__ for w in caught})
    out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="strict")
    err = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="backslashreplace")
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(["inspect", path])
        out.flush()
        err.flush()
    printed = out.buffer.getvalue().decode("utf-8") + err.buffer.getvalue().decode("utf-8")
    check_text("aotkit inspect's output", printed)
    if code == 0:
        answer["inspect"] = "shown"
    elif code == 1 and "internal error" not in printed:
        answer["inspect"] = "refused"
    else:
        answer["inspect"] = f"exit {code}"
        defect("unclear", f"aotkit inspect exited {code}: {printed[-300:]}")
    os.chdir(case["home"])
    answer["seconds"] = round(time.monotonic() - start, 3)
    left = _files(trap)
    if left:
        defect("escape", f"files written in the trap folder: {left[:5]}")
    return answer


def _call(compiled, args, kwargs, expected, defect, check_text, answer) -> str:
    try:
        got = compiled(*args, **kwargs)
    except (TypeError, ValueError) as e:
        check_text("the call's error", str(e))
        answer["call_error"] = str(e)[:300]
        if _fits(compiled, args, kwargs):
            defect("unclear", f"the call refused arguments of its own signature: {e}")
        return f"call refused {type(e).__name__}"
    except Exception as e:
        check_text("the call's error", str(e))
        defect("unclear", f"the call raised {type(e).__name__}: {e}")
        return f"call {type(e).__name__}"
    verdict = compare(got, expected)
    if verdict not in ("held", "relabelled"):
        defect("wrong", verdict)
        return "wrong"
    return verdict


def _fits(compiled, args, kwargs) -> bool:
    """Whether `args` and `kwargs` are of the pytree and specs `compiled` declares."""
    from jax import tree_util

    leaves, tree = tree_util.tree_flatten((args, kwargs))
    if tree != compiled.in_tree:
        return False
    given = [(np.shape(x), np.asarray(x).dtype) for x in leaves]
    return given == [(s.shape, s.dtype) for s in compiled.flat_in_specs]


def _on_devices(compiled, args, kwargs):
    """The arguments as device arrays: placed by the compiled input shardings where the
    file's argument tree takes them (a sharded seed's arrays live on its mesh), else each on
    the default device."""
    import jax
    from jax import tree_util

    shardings = compiled.input_shardings
    try:
        return jax.device_put((args, kwargs), shardings)
    except (TypeError, ValueError):
        return tree_util.tree_map(jax.device_put, (args, kwargs))


def _call_on_device(compiled, args, kwargs, expected, defect) -> None:
    """Calls with device arrays: the results must be the same, and every argument the
    loaded Compiled does not donate must still hold its value."""
    from jax import tree_util

    leaves = tree_util.tree_leaves((args, kwargs))
    before = [np.asarray(x).copy() for x in leaves]
    try:
        got = compiled(*args, **kwargs)
    except Exception as e:
        defect("unclear", f"the call with device arrays raised {type(e).__name__}: {e}")
        return
    verdict = compare(got, expected)
    if verdict not in ("held", "relabelled"):
        defect("wrong", f"with device arrays: {verdict}")
    donated = compiled.donated
    for i, (x, old) in enumerate(zip(leaves, before, strict=True)):
        if i < len(donated) and donated[i]:
            continue
        if x.is_deleted():
            defect("wrong", f"argument leaf {i} was consumed, but the Compiled does not donate it")
        elif not np.array_equal(np.asarray(x), old):
            defect("wrong", f"argument leaf {i} changed, but the Compiled does not donate it")


def refusal_kind(message: str) -> str:
    """A short name for an ArtifactError's fault, for the report's table."""
    m = re.search(r"header field '(\w+)'", message)
    if m:
        return f"header field {m.group(1)}"
    for words, kind in (
        ("the header has a key", "header key"),
        ("is not valid JSON", "header JSON"),
        ("JSON, not an object", "header JSON"),
        ("header is corrupted", "header SHA-256"),
        ("header size", "header size"),
        ("is truncated", "truncated"),
        ("bytes after its last section", "trailing bytes"),
        ("is corrupted (its SHA-256", "section SHA-256"),
        ("its portable StableHLO takes", "portable signature"),
        ("compile options", "options the backend refuses"),
        ("header says they are not donated", "donation the executable does"),
        ("portable StableHLO", "portable module"),
        ("its executable does not load", "executable"),
        ("was compiled for backend", "backend"),
        ("was compiled with", "target"),
    ):
        if words in message:
            return kind
    return message[:60]


def _child(seeds_json: str, case_seconds: float) -> int:
    """Reads cases (JSON lines on stdin), answers one JSON line per case on stdout. A case
    still running after `case_seconds` ends the process (faulthandler's watchdog: exit
    status 1, "Timeout" on stderr), which the parent counts as a hang."""
    import faulthandler

    import aotkit
    from aotkit import cli

    seeds_info = json.loads(Path(seeds_json).read_text())["seeds"]
    home = os.getcwd()
    for line in sys.stdin:
        case = json.loads(line)
        case["home"] = home
        faulthandler.dump_traceback_later(case_seconds, exit=True)
        try:
            answer = _run_case(case, seeds_info[case["seed"]], cli, aotkit)
        except Exception as e:  # the harness's own fault: say so rather than lose the batch
            os.chdir(home)
            answer = {
                "id": case["id"],
                "outcome": f"harness {type(e).__name__}",
                "inspect": "not run",
                "defects": [["unclear", f"harness: {e!r}"]],
            }
        faulthandler.cancel_dump_traceback_later()
        print(json.dumps(answer), flush=True)
    return 0


# --- the parent --------------------------------------------------------------------------------


@dataclass
class Report:
    cases: int = 0
    children: int = 0
    outcomes: Counter = field(default_factory=Counter)
    inspect: Counter = field(default_factory=Counter)
    refusals: Counter = field(default_factory=Counter)
    kinds: Counter = field(default_factory=Counter)
    defects: list = field(default_factory=list)  # (defect kind, case label, detail)
    call_refusals: list = field(default_factory=list)  # (case label, the error)
    slowest: list = field(default_factory=list)  # (seconds, case label)
    seconds: float = 0.0

    def count(self, kind: str) -> int:
        return sum(1 for d in self.defects if d[0] == kind)


def _run_batch(cases: list[Case], seeds_json: Path, case_seconds: float):
    """(return code or None on timeout, answers by id, whether the watchdog ended it)."""
    for case in cases:
        case.folder.mkdir(parents=True, exist_ok=True)
        if case.data:
            (case.folder / "a.aotx").write_bytes(case.data)
            case.data = b""  # the file holds it now
    payload = "".join(
        json.dumps(
            {"id": c.id, "seed": c.seed, "path": str(c.folder / "a.aotx"), "trap": str(c.trap)}
        )
        + "\n"
        for c in cases
    )
    home = cases[0].folder.parent / f"home{cases[0].id:05d}"
    home.mkdir(exist_ok=True)
    command = [sys.executable, "-m", "tests.reliability.header_fuzzing", "--child",
               str(seeds_json), str(case_seconds)]  # fmt: skip
    env = _child_env(home)
    env["PYTHONPATH"] = f"{_ROOT}{os.pathsep}{env.get('PYTHONPATH', '')}"
    try:
        done = subprocess.run(
            command,
            input=payload,
            capture_output=True,
            text=True,
            cwd=home,
            env=env,
            timeout=BATCH_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else e.stdout or ""
        return None, _answers(out), False
    watchdog = done.returncode == 1 and "Timeout (" in done.stderr
    return done.returncode, _answers(done.stdout), watchdog


def _answers(stdout: str) -> dict[int, dict]:
    found = {}
    for line in stdout.splitlines():
        if line.startswith("{"):
            answer = json.loads(line)
            found[answer["id"]] = answer
    return found


def fuzz(
    cases: list[Case],
    found: Seeds,
    batch: int = 50,
    jobs: int = 2,
    case_seconds: float = CASE_TIMEOUT_S,
    keep: bool = False,
) -> Report:
    """Runs `cases` in child processes, `batch` per child, `jobs` children at a time."""
    report = Report(cases=len(cases))
    start = time.monotonic()
    lock = threading.Lock()
    seeds_json = found.folder / "seeds.json"
    by_id = {c.id: c for c in cases}

    def record(answer: dict) -> None:
        case = by_id[answer["id"]]
        report.outcomes[answer["outcome"]] += 1
        report.inspect[answer["inspect"]] += 1
        report.kinds[case.kind] += 1
        if "refusal" in answer:
            report.refusals[answer["refusal"]] += 1
        if "call_error" in answer:
            report.call_refusals.append((case.label(), answer["call_error"]))
        report.slowest = sorted([*report.slowest, (answer.get("seconds", 0), case.label())])[-5:]
        for kind, detail in answer["defects"]:
            report.defects.append((kind, case.label(), detail))
        left = _files(case.trap)
        if left and not any(k == "escape" for k, _ in answer["defects"]):
            report.defects.append(("escape", case.label(), f"files in the trap: {left[:5]}"))

    def lost(case: Case, kind: str, detail: str) -> None:
        report.outcomes[kind] += 1
        report.kinds[case.kind] += 1
        report.defects.append((kind, case.label(), detail))

    def alone(case: Case) -> None:
        code, answers, watchdog = _run_batch([case], seeds_json, case_seconds)
        with lock:
            report.children += 1
            if case.id in answers:
                record(answers[case.id])
            elif watchdog or code is None:
                lost(case, "hang", f"no answer after {case_seconds:.0f} s")
            elif code < 0:
                lost(case, "death", f"the child died of {signal.Signals(-code).name}")
            else:
                lost(case, "death", f"the child exited {code} without answering")

    def one(batch_cases: list[Case]) -> None:
        chunk = batch_cases
        while chunk:
            code, answers, watchdog = _run_batch(chunk, seeds_json, case_seconds)
            with lock:
                report.children += 1
                for answer in answers.values():
                    record(answer)
            rest = [c for c in chunk if c.id not in answers]
            if not rest:
                break
            if watchdog:  # the first unanswered case hung; the rest go on in a new child
                with lock:
                    lost(rest[0], "hang", f"still running after {case_seconds:.0f} s")
                chunk = rest[1:]
                continue
            for case in rest:  # attribute the death (or the hang) to one case
                alone(case)
            break
        if not keep:
            for case in batch_cases:
                if not _files(case.trap):
                    shutil.rmtree(case.folder, ignore_errors=True)

    batches = [cases[i : i + batch] for i in range(0, len(cases), batch)]
    with ThreadPoolExecutor(jobs) as pool:
        list(pool.map(one, batches))
    report.seconds = time.monotonic() - start
    return report


def format_report(report: Report, found: Seeds) -> str:
    lines = [
        f"seeds: {len(found.data)} ({', '.join(sorted(found.data))})",
        *(f"  skipped {name}: {why}" for name, why in sorted(found.skipped.items())),
        f"mutations: {report.cases} in {report.children} child processes, {report.seconds:.0f} s",
        "  by kind: " + ", ".join(f"{k} {n}" for k, n in sorted(report.kinds.items())),
        "load -> call:",
        *(f"  {n:6d}  {k}" for k, n in report.outcomes.most_common()),
        "refused (ArtifactError) by fault:",
        *(f"  {n:6d}  {k}" for k, n in report.refusals.most_common()),
        "aotkit inspect:",
        *(f"  {n:6d}  {k}" for k, n in report.inspect.most_common()),
        "slowest cases:",
        *(f"  {t:6.2f} s  {label}" for t, label in report.slowest[::-1]),
        f"call refused (the file's own signature): {len(report.call_refusals)}",
        *(f"  {label}\n      {error[:160]}" for label, error in report.call_refusals[:8]),
        "defects: " + ", ".join(f"{k} {report.count(k)}" for k in DEFECTS),
    ]
    groups: dict[tuple, list] = {}
    for kind, label, detail in sorted(report.defects):
        groups.setdefault((kind, _shape(detail)), []).append((label, detail))
    for (kind, _), found_in in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        label, detail = found_in[0]
        lines.append(f"  {len(found_in):4d} x {kind}, e.g. {label}\n         {detail[:300]}")
    return "\n".join(lines)


def _shape(detail: str) -> str:
    """A defect's detail without what varies between cases (paths, numbers, quoted text)."""
    detail = re.sub(r"/\S*case\d+\S*", "<path>", detail)
    detail = re.sub(r"'[^']*'|\"[^\"]*\"", "<text>", detail)
    return re.sub(r"\d+", "N", detail)[:60]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", nargs=2, metavar=("SEEDS_JSON", "CASE_SECONDS"),
                        help=argparse.SUPPRESS)  # fmt: skip
    parser.add_argument("--make-seeds", metavar="FOLDER", help=argparse.SUPPRESS)
    parser.add_argument("--mutations", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=26)
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--case-seconds", type=float, default=CASE_TIMEOUT_S)
    parser.add_argument("--keep", metavar="FOLDER", help="work in FOLDER and keep the cases")
    args = parser.parse_args(argv)
    if args.child is not None:
        return _child(args.child[0], float(args.child[1]))
    if args.make_seeds is not None:
        return _make_seeds(Path(args.make_seeds))
    root = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="aotkit-hfuzz-"))
    try:
        found = seeds(root / "seeds")
        cases = mutations(args.mutations, args.seed, found, root / "cases")
        report = fuzz(cases, found, args.batch, args.jobs, args.case_seconds, bool(args.keep))
        print(format_report(report, found))
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    return 1 if report.defects else 0


if __name__ == "__main__":
    sys.exit(main())
