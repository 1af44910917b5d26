"""Pytrees as data: the registry of node types an artifact may name, and PyTreeDefs written
as JSON and read back (the `in_tree`/`out_tree` of an artifact's header, aotkit/artifacts.py).

Not a stage: the artifact format asks here. What it promises:

- Nothing a file says is imported, evaluated or looked up as an attribute. A node type is
  found by its serialized name in a registry that the process filled itself:
  `register_pytree_node_serialization` / `register_namedtuple_serialization` (aotkit's), or
  `jax.export`'s functions of the same names, read through aotkit/_compat.py. A name that
  is in neither is an `ArtifactError` that names it and says how to register it.
- A namedtuple needs no registration: it is written with its name and field names, and read
  back as the registered class of that name, else as a stand-in: a tuple subclass made here
  with those fields (`standin`), which a `Compiled` called with the real namedtuple of that
  name and fields accepts in its place (`conforms`).
- Another node is written with its aux data in one of three forms: `bytes` (what the
  registration's `serialize_auxdata` returns, as jax.export writes it), `data` (aux data
  that is plain data: None, bool, int, float, str, tuples, lists, dicts with str keys) or
  `fields` (a dataclass, such as an Equinox Module or a Flax struct, whose aux data is not
  plain: its child fields by name and its other fields' plain values).
- Reading runs, of the process's own code, only what it registered: `deserialize_auxdata`
  on the bytes (which come from the file: it must treat them as untrusted), `from_children`
  where given, and for `fields` the type's pytree flatten of an instance made with
  `object.__new__` and the file's values set on its declared dataclass fields only. `data`
  aux data is rebuilt by this module alone. PyTreeDefs are built node by node
  (`PyTreeDef.from_node_data_and_children`); a node built so is then unflattened once from
  placeholder children and flattened again (the type's own registered functions, as a call
  does with its results), so that a class registered under the file's name that takes
  another number of children is an `ArtifactError` at load, not a failure in its `__init__`
  at the first call.
"""

from __future__ import annotations

import base64
import binascii
import collections
import dataclasses
import json
import keyword
import math
import operator
import threading
from collections.abc import Callable

from jax import tree_util

from aotkit import _compat
from aotkit.errors import ArtifactError

MAX_TREE_DEPTH = 256
LEAF = "*"
_UNPRINTABLE = "a control or other unprintable character"
_BUILTIN = (tuple, list, dict, type(None))
# Node types jax.tree_util keeps with aux data of its own making: artifacts take plain dicts.
_JAX_MAPPINGS = (collections.OrderedDict, collections.defaultdict)
_registry = tree_util.default_registry
_make = tree_util.PyTreeDef.from_node_data_and_children
_LEAF_DEF = tree_util.tree_structure(0)
_NONE_DEF = tree_util.tree_structure(None)


# --- the registry ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Registration:
    """One serializable node type: its name in files and how its aux data is written."""

    nodetype: type
    name: str
    serialize_auxdata: Callable | None = None
    deserialize_auxdata: Callable | None = None
    from_children: Callable | None = None
    namedtuple: bool = False
    origin: str = "aotkit"  # or "jax.export": registered with jax.export's functions


_lock = threading.Lock()
_by_type: dict[type, Registration] = {}
_by_name: dict[str, Registration] = {}


def is_namedtuple(kind) -> bool:
    """Whether `kind` is a namedtuple class (a tuple subclass with string `_fields`)."""
    fields = getattr(kind, "_fields", None)
    return (
        isinstance(kind, type)
        and issubclass(kind, tuple)
        and isinstance(fields, tuple)
        and all(isinstance(f, str) for f in fields)
    )


def _qualified(kind: type) -> str:
    return f"{kind.__module__}.{kind.__qualname__}"


def register_pytree_node_serialization(
    nodetype: type,
    *,
    serialized_name: str | None = None,
    serialize_auxdata: Callable[[object], bytes] | None = None,
    deserialize_auxdata: Callable[[bytes], object] | None = None,
    from_children: Callable | None = None,
) -> type:
    """Lets artifacts hold pytree nodes of `nodetype` (a type registered with
    `jax.tree_util`), written under `serialized_name` (default: `module.QualName`).

    The signature is jax.export's (`jax.export.register_pytree_node_serialization`), and a
    type registered there is written and read alike without this call. Without
    `serialize_auxdata`/`deserialize_auxdata` aotkit writes the node's aux data itself: as
    plain data (None, bool, int, float, str, tuples, lists, dicts with str keys), or, for a
    dataclass (Equinox Modules, Flax structs) whose aux data is not plain, as its fields.
    With them, `serialize_auxdata(aux) -> bytes` and `deserialize_auxdata(bytes) -> aux`;
    the bytes come from the file, so `deserialize_auxdata` must treat them as untrusted.
    `from_children(aux, children)`, where given, builds a node whose structure is read back
    (as in jax.export); otherwise the structure is made from the aux data directly.

    Register the type in the process that saves and in every process that loads: a node type
    not registered when an artifact is loaded is an error naming it, never an import.
    Returns `nodetype`, so it can decorate a class.
    """
    where = "aotkit.register_pytree_node_serialization"
    name = _check_registration(where, nodetype, serialized_name)
    given = (serialize_auxdata is None, deserialize_auxdata is None)
    if given[0] != given[1]:
        raise TypeError(
            f"{where}: {_qualified(nodetype)}: serialize_auxdata and deserialize_auxdata go "
            "together; give both, or neither (aotkit then writes the aux data as data)"
        )
    for label, fn in (
        ("serialize_auxdata", serialize_auxdata),
        ("deserialize_auxdata", deserialize_auxdata),
        ("from_children", from_children),
    ):
        if fn is not None and not callable(fn):
            raise TypeError(f"{where}: {label} must be a function, got {fn!r}")
    _add(
        where,
        Registration(nodetype, name, serialize_auxdata, deserialize_auxdata, from_children),
    )
    return nodetype


def register_namedtuple_serialization(nodetype: type, *, serialized_name: str | None = None):
    """Reads namedtuples of class `nodetype` back as that class (not a stand-in) from
    artifacts that name them `serialized_name` (default: `module.QualName`, the name an
    unregistered namedtuple is written under). As `jax.export.register_namedtuple_serialization`,
    whose registrations count too. Returns `nodetype`."""
    where = "aotkit.register_namedtuple_serialization"
    if not is_namedtuple(nodetype):
        raise TypeError(
            f"{where}: {nodetype!r} is not a namedtuple class; register other node types with "
            "aotkit.register_pytree_node_serialization"
        )
    name = _check_registration(where, nodetype, serialized_name)
    _add(where, Registration(nodetype, name, namedtuple=True))
    return nodetype


def _check_registration(where: str, nodetype, serialized_name) -> str:
    if not isinstance(nodetype, type):
        raise TypeError(f"{where}: expected a class, got {nodetype!r}")
    if nodetype in _BUILTIN + _JAX_MAPPINGS or getattr(nodetype, "_aotkit_standin", False):
        raise TypeError(
            f"{where}: {nodetype.__name__} is one of the node types artifacts keep without "
            "registering; register only your own node types"
        )
    name = _qualified(nodetype) if serialized_name is None else serialized_name
    if not isinstance(name, str) or not name or not name.isprintable():
        raise ValueError(
            f"{where}: serialized_name {name!r} must be a non-empty printable str, such as "
            "'mypackage.MyNode'"
        )
    return name


def _add(where: str, entry: Registration) -> None:
    with _lock:
        taken = _by_name.get(entry.name)
        if taken is not None and taken.nodetype is not entry.nodetype:
            raise ValueError(
                f"{where}: serialized_name {entry.name!r} is already registered for "
                f"{_qualified(taken.nodetype)}; give {_qualified(entry.nodetype)} a name of "
                "its own"
            )
        old = _by_type.get(entry.nodetype)
        if old is not None and old.name != entry.name:
            raise ValueError(
                f"{where}: {_qualified(entry.nodetype)} is already registered as "
                f"{old.name!r}; a type has one serialized name"
            )
        # The same type under the same name again (a module reloaded, a notebook cell run
        # twice) replaces the registration.
        _by_type[entry.nodetype] = entry
        _by_name[entry.name] = entry


# --- a library's node types in one call ------------------------------------------------------


def _flax_nnx_bases() -> tuple[type, ...]:
    from flax import nnx

    return tuple(
        getattr(nnx, name) for name in ("Variable", "State", "Pytree") if hasattr(nnx, name)
    )


def _equinox_bases() -> tuple[type, ...]:
    import equinox

    return (equinox.Module,)


# The libraries `register_library_nodes` knows: name -> the base classes of their node types.
LIBRARIES: dict[str, Callable[[], tuple[type, ...]]] = {
    "flax.nnx": _flax_nnx_bases,
    "equinox": _equinox_bases,
}
_library_bases: dict[str, tuple[type, ...]] = {}


def register_library_nodes(library: str) -> tuple[type, ...]:
    """Lets artifacts hold every pytree node type of `library`, one of `LIBRARIES`:
    "flax.nnx" (its `Variable` kinds, `Param`, `BatchStat`, ... and user-defined ones,
    `State`, and its `Pytree` modules) or "equinox" (every `equinox.Module` class, the
    user's included). Each node type, defined now or later, is registered as
    `register_pytree_node_serialization(kind)` would (its name `module.QualName`, its aux
    data written as data or as its fields) the first time an artifact saves or loads one.

    Call it in the process that saves and in every process that loads. The library is
    imported by this call (the user's), never because a file names it. Returns the
    library's base classes."""
    where = "aotkit.register_library_nodes"
    bases_of = LIBRARIES.get(library) if isinstance(library, str) else None
    if bases_of is None:
        raise ValueError(
            f"{where}: unknown library {library!r}; known: {', '.join(sorted(LIBRARIES))} "
            "(register other node types with aotkit.register_pytree_node_serialization)"
        )
    try:
        bases = bases_of()
    except ImportError as e:
        raise ImportError(
            f"{where}: {library} is not installed ({e}); install it, or register its node "
            "types with aotkit.register_pytree_node_serialization"
        ) from e
    with _lock:
        _library_bases[library] = bases
    return bases


def _from_library(kind: type) -> Registration | None:
    """The registration of `kind` as a node type of a library registered with
    `register_library_nodes`, made now; None when it is none of theirs."""
    for bases in list(_library_bases.values()):
        # A subclass of theirs is a node type: each library registers its classes with
        # jax.tree_util as they are defined (and a file's tree is checked against them).
        if isinstance(kind, type) and issubclass(kind, bases):
            entry = Registration(kind, _qualified(kind))
            _add("aotkit.register_library_nodes", entry)
            return entry
    return None


def _library_named(name: str) -> Registration | None:
    """The library node type written as `name` (`module.QualName`), among the classes
    already defined in this process (nothing is imported); None when none is."""
    for bases in list(_library_bases.values()):
        seen: set[type] = set()
        todo = list(bases)
        while todo:
            kind = todo.pop()
            if kind in seen:
                continue
            seen.add(kind)
            if _qualified(kind) == name:
                return _from_library(kind)
            todo.extend(kind.__subclasses__())
    return None


def registration_of(kind: type) -> Registration | None:
    """The registration of node type `kind`: aotkit's, else jax.export's, else that of a
    library registered with `register_library_nodes`, else None."""
    entry = _by_type.get(kind)
    if entry is not None:
        return entry
    jax_registries = _compat.jax_export_registries()
    if jax_registries is None:
        return _from_library(kind)
    by_type, by_name = jax_registries
    found = by_type.get(kind)
    if found is None:
        return _from_library(kind)
    name, serialize = found
    _, deserialize, from_children = by_name.get(name, (kind, None, None))
    return Registration(
        kind, name, serialize, deserialize, from_children, is_namedtuple(kind), "jax.export"
    )


def registration_named(name: str) -> Registration | None:
    """The registration under serialized name `name`: aotkit's, else jax.export's, else None.
    A dict lookup: nothing is imported."""
    entry = _by_name.get(name)
    if entry is not None:
        return entry
    jax_registries = _compat.jax_export_registries()
    if jax_registries is None:
        return _library_named(name)
    found = jax_registries[1].get(name)
    if found is None:
        return _library_named(name)
    kind, deserialize, from_children = found
    serialize = jax_registries[0].get(kind, (name, None))[1]
    return Registration(
        kind, name, serialize, deserialize, from_children, is_namedtuple(kind), "jax.export"
    )


def serialized_name(kind: type) -> str:
    """The name a namedtuple class is written under: its registered name, else
    `module.QualName`."""
    entry = registration_of(kind)
    return entry.name if entry is not None else _qualified(kind)


# --- stand-ins for namedtuples ---------------------------------------------------------------

_standins: dict[tuple[str, tuple[str, ...]], type] = {}
_MAX_STANDINS = 4096


def standin(name: str, fields: tuple[str, ...]) -> type:
    """The stand-in class of the namedtuple written as `name` with `fields`: a tuple subclass
    with those fields as read-only properties, `_fields`, `_asdict` and `_replace`, made here
    (nothing evaluated), one per (name, fields) in a process."""
    key = (name, fields)
    found = _standins.get(key)
    if found is not None:
        return found
    short = name.rsplit(".", 1)[-1]
    if not short.isidentifier():
        short = "namedtuple"

    def __new__(cls, *values):  # what unflattening a namedtuple node calls: cls(*children)
        if len(values) != len(fields):
            raise TypeError(f"{short} takes {len(fields)} values, got {len(values)}")
        return tuple.__new__(cls, values)

    def __repr__(self):
        inner = ", ".join(f"{f}={v!r}" for f, v in zip(fields, self))
        return f"{short}({inner})"

    def _asdict(self):
        return dict(zip(fields, self))

    def _replace(self, **changes):
        unknown = set(changes) - set(fields)
        if unknown:
            raise ValueError(f"{short}._replace: unknown fields {sorted(unknown)}")
        return type(self)(*(changes.get(f, v) for f, v in zip(fields, self)))

    namespace = {
        "__slots__": (),
        "__new__": __new__,
        "__repr__": __repr__,
        "__module__": __name__,
        "__qualname__": short,
        "__doc__": f"Stand-in for the namedtuple {name} read from an artifact.",
        "__getnewargs__": lambda self: tuple(self),
        "_fields": fields,
        "_asdict": _asdict,
        "_replace": _replace,
        "_aotkit_standin": True,
        "_aotkit_name": name,
    }
    for i, field in enumerate(fields):
        namespace[field] = property(operator.itemgetter(i), doc=f"Field {i}: {field}")
    cls = type(short, (tuple,), namespace)
    with _lock:
        if len(_standins) >= _MAX_STANDINS:
            _standins.clear()  # a later load makes new ones; `conforms` still matches them
        cls = _standins.setdefault(key, cls)
    return cls


def stands_for(standin_kind, kind) -> bool:
    """Whether `standin_kind` is the stand-in of namedtuple class `kind`: the same serialized
    name and fields."""
    return (
        getattr(standin_kind, "_aotkit_standin", False)
        and is_namedtuple(kind)
        and kind._fields == standin_kind._fields
        and serialized_name(kind) == standin_kind._aotkit_name
    )


def same_name_hint(expected_kind, given_kind) -> str:
    """Why a node of class `given_kind` is not one of `expected_kind` where both read alike
    (`a Point of 2`), with what to do; "" where their names differ anyway."""
    if expected_kind is given_kind or expected_kind.__name__ != given_kind.__name__:
        return ""
    given = _qualified(given_kind)
    if getattr(expected_kind, "_aotkit_standin", False):
        saved = expected_kind._aotkit_name
        if is_namedtuple(given_kind) and given_kind._fields != expected_kind._fields:
            return (
                f" (the artifact's namedtuple {saved!r} has fields {list(expected_kind._fields)}, "
                f"your {given} has {list(given_kind._fields)}; pass a namedtuple with the "
                "artifact's fields)"
            )
        return (
            f" (the artifact's namedtuple {saved!r} was loaded as a stand-in, and your {given}, "
            f"written as {serialized_name(given_kind)!r}, is a different class of the same "
            f"name; register it under the artifact's name before loading: "
            f"aotkit.register_namedtuple_serialization({given_kind.__name__}, "
            f"serialized_name={saved!r}))"
        )
    return (
        f" ({_qualified(expected_kind)} and {given} are different classes of the same name; "
        f"pass a {_qualified(expected_kind)})"
    )


def conforms(given, expected) -> bool:
    """Whether the caller's PyTreeDef `given` is `expected` with each stand-in replaced by a
    namedtuple of the same serialized name and fields (or is `expected` itself)."""
    if given == expected:
        return True
    g, e = given.node_data(), expected.node_data()
    if g is None or e is None:
        return False
    (g_kind, g_aux), (e_kind, e_aux) = g, e
    if g_kind is not e_kind:
        if not stands_for(e_kind, g_kind):
            return False
    elif g_aux != e_aux:
        return False
    g_children, e_children = given.children(), expected.children()
    return len(g_children) == len(e_children) and all(map(conforms, g_children, e_children))


# --- writing ---------------------------------------------------------------------------------


def encode(tree, where: str, what: str) -> object:
    """`tree` (a PyTreeDef) as JSON data. `what` is "argument" (`tree` is the `(args,
    kwargs)` pair, whose parts are named `args` and `kwargs`) or "result". TypeError naming a
    node that cannot be written (not registered, aux data that is not data) and where it is."""

    def child_path(path: str, kind, key, i: int) -> str:
        if path == "" and what == "argument":
            return ("args", "kwargs")[i]
        if kind is dict:
            return f"{path}[{key!r}]"
        if is_namedtuple(kind):
            return f"{path}.{kind._fields[i]}"
        return f"{path}[{i}]"

    def encode_node(node, path: str, depth: int = 0):
        if depth > MAX_TREE_DEPTH:  # the limit `decode` reads back: refuse it here
            counted = " (the (args, kwargs) pair counts as two)" if what == "argument" else ""
            raise ValueError(
                f"{where}: the {what} pytree nests deeper than {MAX_TREE_DEPTH} levels"
                f"{counted}, which an artifact cannot hold; flatten part of it"
            )
        data = node.node_data()
        if data is None:
            return LEAF
        kind, aux = data
        children = node.children()
        label = f"argument {path}" if what == "argument" else f"result{path}"
        if kind is type(None):
            return None
        keys = list(aux) if kind is dict else [None] * len(children)
        if kind is dict:
            for key in keys:
                if isinstance(key, bool) or not isinstance(key, str | int):
                    raise TypeError(
                        f"{where}: {label} is a dict with key {key!r} ({type(key).__name__}); "
                        "artifacts keep dict keys that are str or int: use such keys"
                    )
                if isinstance(key, str) and not key.isprintable():
                    raise ValueError(
                        f"{where}: {label} is a dict with key {key!r}, which holds "
                        f"{_UNPRINTABLE}; artifacts keep printable dict keys (a file's names "
                        "reach terminals): rename it"
                    )
        items = [
            encode_node(child, child_path(path, kind, key, i), depth + 1)
            for i, (key, child) in enumerate(zip(keys, children, strict=True))
        ]
        if kind in (tuple, list):
            return {kind.__name__: items}
        if kind is dict:
            return {"dict": [[key, item] for key, item in zip(keys, items)]}
        if is_namedtuple(kind) and aux is None and len(children) == len(kind._fields):
            name = serialized_name(kind)
            _check_names(where, label, kind, name, kind._fields)
            return {"namedtuple": [name, list(kind._fields), items]}
        entry = registration_of(kind)
        if kind in _JAX_MAPPINGS:
            raise TypeError(
                f"{where}: {label} is a {_qualified(kind)}; artifacts keep dicts (str or int "
                "keys): pass dict(...) instead"
            )
        if entry is None:
            raise TypeError(
                f"{where}: {label} is a {_qualified(kind)}, a custom pytree node that is not "
                "registered for serialization; call aotkit.register_pytree_node_serialization"
                f"({kind.__name__}) in the processes that save and load it (a namedtuple, "
                "or a type registered with jax.export, needs no call)"
            )
        if not entry.name.isprintable():
            raise ValueError(
                f"{where}: {label} is registered as {entry.name!r}, which holds "
                f"{_UNPRINTABLE}; register it under a printable name"
            )
        return {"node": [entry.name, _encode_aux(entry, node, aux, where, label), items]}

    return encode_node(tree, "")


def check_registered(where: str, trees) -> None:
    """TypeError naming, at once, every custom node type of `trees` ((PyTreeDef, what) pairs,
    `what` as `encode`'s) that is not registered for serialization, each with where it first
    appears; nothing when all are (`encode` then writes them)."""
    found: dict[type, str] = {}

    def visit(node, path: str, what: str, top: bool) -> None:
        data = node.node_data()
        if data is None:
            return
        kind, aux = data
        children = node.children()
        plain = kind in _BUILTIN or kind in _JAX_MAPPINGS
        if is_namedtuple(kind) and aux is None and len(children) == len(kind._fields):
            plain = True
        if not plain and kind not in found and registration_of(kind) is None:
            found[kind] = f"argument {path}" if what == "argument" else f"result{path}"
        keys = list(aux) if kind is dict else [None] * len(children)
        for i, (key, child) in enumerate(zip(keys, children, strict=True)):
            if top and what == "argument":
                sub = ("args", "kwargs")[i]
            elif kind is dict:
                sub = f"{path}[{key!r}]"
            elif is_namedtuple(kind) and i < len(kind._fields):
                sub = f"{path}.{kind._fields[i]}"
            else:
                sub = f"{path}[{i}]"
            visit(child, sub, what, False)

    for tree, what in trees:
        visit(tree, "", what, True)
    if len(found) < 2:
        return  # none, or one: `encode` names it as it names any node it cannot write
    listed = ", ".join(f"{_qualified(kind)} ({label})" for kind, label in found.items())
    libraries = sorted({lib for kind in found for lib in _libraries_of(kind)})
    hint = "".join(
        f", or aotkit.register_library_nodes({lib!r}) for every node type of {lib}"
        for lib in libraries
    )
    raise TypeError(
        f"{where}: {len(found)} custom pytree node types are not registered for "
        f"serialization: {listed}; call aotkit.register_pytree_node_serialization(<class>) "
        f"for each in the processes that save and load them{hint} (a namedtuple, or a type "
        "registered with jax.export, needs no call)"
    )


def _libraries_of(kind: type) -> list[str]:
    """The libraries of `LIBRARIES` whose classes `kind` derives from (by module name: no
    library is imported to find out)."""
    modules = [getattr(base, "__module__", "") or "" for base in kind.__mro__]
    return [lib for lib in LIBRARIES if any(m == lib or m.startswith(lib + ".") for m in modules)]


def _check_names(where: str, label: str, kind, name: str, fields) -> None:
    if not name.isprintable():
        raise ValueError(
            f"{where}: {label} is a namedtuple named {name!r}, which holds {_UNPRINTABLE}; "
            "register it under a printable name (aotkit.register_namedtuple_serialization)"
        )
    for field in fields:
        if not _field_name_ok(field):
            raise ValueError(
                f"{where}: {label} is a {_qualified(kind)} with field {field!r}; artifacts "
                "keep namedtuples whose fields are identifiers not starting with '_'"
            )


def _field_name_ok(field) -> bool:
    return (
        isinstance(field, str)
        and field.isidentifier()
        and not keyword.iskeyword(field)
        and not field.startswith("_")
    )


def _encode_aux(entry: Registration, node, aux, where: str, label: str) -> dict:
    kind = entry.nodetype
    if entry.serialize_auxdata is not None:
        try:
            data = entry.serialize_auxdata(aux)
        except Exception as e:  # the user's function: its failure is named, not aotkit's
            raise TypeError(
                f"{where}: {label}: serialize_auxdata of {entry.name!r} raised "
                f"{type(e).__name__}: {e}; fix the function registered for "
                f"{_qualified(kind)}"
            ) from e
        if not isinstance(data, bytes | bytearray):
            raise TypeError(
                f"{where}: {label}: serialize_auxdata of {entry.name!r} returned a "
                f"{type(data).__name__}, not bytes; return bytes (e.g. json.dumps(...).encode())"
            )
        return {"bytes": base64.b64encode(bytes(data)).decode("ascii")}
    problem = []
    plain = encode_data(aux, problem)
    if not problem:
        return {"data": plain}
    fields = _fields_of(node, kind)
    if fields is not None:
        return {"fields": fields}
    raise TypeError(
        f"{where}: {label} is a {_qualified(kind)} whose aux data holds {problem[0]!r}, which "
        "is not plain data (None, bool, int, float, str, tuples, lists, dicts with str keys); "
        "register it with serialize_auxdata= and deserialize_auxdata= that turn its aux data "
        "into bytes and back"
    )


def encode_data(value, problem: list, depth: int = 0):
    """Plain data as JSON: scalars as themselves, containers tagged ({"tuple": [...]}, ...),
    non-finite floats as {"float": "nan"}. Appends the first value that is not plain data to
    `problem` (and returns None)."""
    if problem:
        return None
    t = type(value)
    if value is None or t is bool or t is int:
        return value
    if t is str:
        if value.isprintable():
            return value
        problem.append(value)
        return None
    if t is float:
        return value if math.isfinite(value) else {"float": repr(value)}
    if depth < MAX_TREE_DEPTH:
        if t is tuple or t is list:
            return {t.__name__: [encode_data(v, problem, depth + 1) for v in value]}
        if t is dict and all(type(k) is str and k.isprintable() for k in value):
            return {"dict": [[k, encode_data(v, problem, depth + 1)] for k, v in value.items()]}
    problem.append(value)
    return None


def _fields_of(node, kind) -> list | None:
    """A dataclass node as [child field names, {other field: plain value}], or None where it
    is no such node (its children are not fields by name, a field is not plain data, the
    instance holds attributes besides its fields)."""
    if not dataclasses.is_dataclass(kind):
        return None
    names = [f.name for f in dataclasses.fields(kind)]
    instance = node.unflatten(list(range(node.num_leaves)))
    paths, _ = tree_util.tree_flatten_with_path(instance, is_leaf=lambda x: x is not instance)
    dynamic = []
    for path, _ in paths:
        key = path[0] if len(path) == 1 else None
        if not isinstance(key, tree_util.GetAttrKey) or key.name not in names:
            return None
        dynamic.append(key.name)
    if len(dynamic) != len(node.children()) or len(set(dynamic)) != len(dynamic):
        return None
    if set(getattr(instance, "__dict__", {})) - set(names):
        return None
    static = {}
    for name in names:
        if name in dynamic:
            continue
        problem = []
        value = encode_data(getattr(instance, name), problem)
        if problem:
            return None
        static[name] = value
    return [dynamic, {"dict": [[k, v] for k, v in static.items()]}]


# --- reading ---------------------------------------------------------------------------------


def decode(
    data,
    where: str,
    field: str,
    fix: str,
    path: str | None = None,
    *,
    unregistered: list | None = None,
):
    """The PyTreeDef written by `encode`, built node by node; ArtifactError naming `field`
    otherwise. `fix` says what to do about a malformed tree. With `unregistered` (a list),
    a node type not registered here is read as a stand-in with fields `child0`, ... (for
    inspection: nothing of its aux data is read) and its name appended to the list."""

    def bad(detail: str) -> ArtifactError:
        return ArtifactError(f"{where}: header field {field!r} {detail}; {fix}", path=path)

    def at_text(at: str) -> str:
        if field == "in_tree":
            return at.replace("<0>", "args", 1).replace("<1>", "kwargs", 1) if at else "the root"
        return "result" + at

    def children_of(items, depth: int, at: str, names=None):
        if not isinstance(items, list):
            raise bad(f"has children {_short(items)}, not a list")
        out = []
        for i, item in enumerate(items):
            if at == "" and field == "in_tree":
                step = f"<{i}>"
            elif names is not None:
                step = f".{names[i]}"
            else:
                step = f"[{i}]"
            out.append(build(item, depth + 1, at + step))
        return out

    def build(node, depth: int, at: str):
        if depth > MAX_TREE_DEPTH:
            raise bad(f"nests deeper than {MAX_TREE_DEPTH} levels")
        if node == LEAF:
            return _LEAF_DEF
        if node is None:
            return _NONE_DEF
        if isinstance(node, dict) and len(node) == 1:
            ((kind, items),) = node.items()
            if kind in ("tuple", "list") and isinstance(items, list):
                children = children_of(items, depth, at)
                return _make(_registry, (tuple if kind == "tuple" else list, None), children)
            if kind == "dict" and isinstance(items, list):
                return dict_node(items, depth, at)
            if kind == "namedtuple":
                return namedtuple_node(items, depth, at)
            if kind == "node":
                return custom_node(items, depth, at)
        raise bad(
            f'holds {_short(node)}, which is no pytree node ("*", null, tuple, list, dict, '
            "namedtuple, node)"
        )

    def dict_node(items, depth: int, at: str):
        pairs = {}
        for item in items:
            if not (isinstance(item, list) and len(item) == 2):
                raise bad(f"has a dict entry {_short(item)}, not a [key, subtree] pair")
            key, child = item
            if isinstance(key, bool) or not isinstance(key, str | int):
                raise bad(f"has a dict key {_short(key)} that is not a str or int")
            if isinstance(key, str) and not key.isprintable():
                raise bad(f"has a dict key {_short(key)}, which holds {_UNPRINTABLE}")
            if key in pairs:
                raise bad(f"repeats the dict key {key!r}")
            pairs[key] = build(child, depth + 1, f"{at}[{key!r}]")
        try:
            keys = sorted(pairs)  # the order jax.tree_util keeps a dict's keys in
        except TypeError as e:  # keys of mixed types do not sort
            raise bad(f"cannot be rebuilt ({e})") from None
        return _make(_registry, (dict, keys), [pairs[k] for k in keys])

    def namedtuple_node(items, depth: int, at: str):
        if not (
            isinstance(items, list)
            and len(items) == 3
            and isinstance(items[0], str)
            and isinstance(items[1], list)
        ):
            raise bad(f"has a namedtuple {_short(items)}, not [name, [fields], [children]]")
        name, fields, children = items[0], tuple(items[1]), items[2]
        if not name or not name.isprintable():
            raise bad(f"names a namedtuple {_short(name)}, which holds {_UNPRINTABLE}")
        if not all(_field_name_ok(f) for f in fields) or len(set(fields)) != len(fields):
            raise bad(
                f"has a namedtuple {name!r} with fields {_short(list(fields))}: fields must be "
                "distinct identifiers not starting with '_'"
            )
        if not isinstance(children, list) or len(children) != len(fields):
            raise bad(f"has a namedtuple {name!r} whose children do not match its fields")
        built = children_of(children, depth, at, fields)
        entry = registration_named(name)
        if entry is None:
            cls = standin(name, fields)
        else:
            cls = entry.nodetype
            if not is_namedtuple(cls) or tuple(cls._fields) != fields:
                have = list(cls._fields) if is_namedtuple(cls) else "no namedtuple fields"
                raise ArtifactError(
                    f"{where}: header field {field!r} has at {at_text(at)} the namedtuple "
                    f"{name!r} with fields {list(fields)}, but {_qualified(cls)}, registered "
                    f"under that name here, has {have}; register the class the artifact was "
                    "saved with",
                    path=path,
                )
        return _make(_registry, (cls, None), built)

    def custom_node(items, depth: int, at: str):
        if not (
            isinstance(items, list)
            and len(items) == 3
            and isinstance(items[0], str)
            and isinstance(items[1], dict)
            and len(items[1]) == 1
        ):
            raise bad(f"has a node {_short(items)}, not [name, {{form: aux}}, [children]]")
        name, ((form, aux),), children = items[0], items[1].items(), items[2]
        if not name.isprintable():
            raise bad(f"names a node type {_short(name)}, which holds {_UNPRINTABLE}")
        built = children_of(children, depth, at)
        entry = registration_named(name)
        if entry is None and unregistered is not None:
            unregistered.append(name)
            fields = tuple(f"child{i}" for i in range(len(built)))
            return _make(_registry, (standin(name, fields), None), built)
        if entry is None:
            raise ArtifactError(
                f"{where}: header field {field!r} has at {at_text(at)} a node of type "
                f"{name!r}, which is not registered for serialization in this process; import "
                "the module that defines it and call aotkit.register_pytree_node_serialization"
                f"(<its class>, serialized_name={name!r}) before loading (aotkit never "
                "imports a module a file names)",
                path=path,
            )
        kind = entry.nodetype

        def failed(detail: str) -> ArtifactError:
            return ArtifactError(
                f"{where}: header field {field!r} has at {at_text(at)} a node of type "
                f"{name!r} ({_qualified(kind)} here) that {detail}; save the artifact again "
                "with the registration this process has",
                path=path,
            )

        if form == "bytes":
            if entry.deserialize_auxdata is None:
                raise failed(
                    "was written by its serialize_auxdata, but it is registered here without "
                    "deserialize_auxdata"
                )
            try:
                raw = base64.b64decode(aux, validate=True) if isinstance(aux, str) else None
            except (binascii.Error, ValueError):
                raw = None
            if raw is None:
                raise bad(f"has aux bytes {_short(aux)} that are not base64 text")
            try:
                value = entry.deserialize_auxdata(raw)
            except Exception as e:  # the user's function on the file's bytes
                raise failed(f"its deserialize_auxdata refused ({type(e).__name__}: {e})") from e
            return _rebuild(entry, value, built, failed)
        if form == "data":
            value = decode_data(aux, bad)
            return _rebuild(entry, value, built, failed)
        if form == "fields":
            return _from_fields(entry, aux, built, bad, failed)
        raise bad(f"has a node {name!r} with aux form {_short(form)} (bytes, data or fields)")

    return build(data, 0, "")


def _rebuild(entry: Registration, aux, children: list, failed):
    """The node of `entry`'s type with `aux` and `children`: from its node data, or through
    its `from_children` where the registration has one and its type is no pytree node."""
    kind = entry.nodetype
    if entry.from_children is not None and entry.origin == "aotkit":
        return _structure_of(entry.from_children, aux, children, kind, failed)
    try:
        tree = _make(_registry, (kind, aux), children)
    except RuntimeError as e:  # "Could not find type": not registered with jax.tree_util
        if entry.from_children is None:
            raise failed(f"is not a pytree node type here ({e})") from None
        return _structure_of(entry.from_children, aux, children, kind, failed)
    _check_arity(tree, entry, len(children), failed)
    return tree


def _check_arity(tree, entry: Registration, n: int, failed) -> None:
    """`failed` unless the registered type, unflattened from the file's `n` children (as a
    call does with its results) and flattened again, has `n` children: a class registered
    under the file's name that takes another number of children fails here, at load, not in
    its `__init__` at the first call."""
    here = _qualified(entry.nodetype)
    fix = f"register under {entry.name!r} the class the artifact was saved with"
    try:
        back = tree_util.tree_structure(tree.unflatten([0] * tree.num_leaves))
    except Exception as e:  # the type's own unflatten, on the file's children
        raise failed(
            f"has {n} children, which {here}'s unflatten refused ({type(e).__name__}: {e}): "
            f"a class of another arity is registered under that name here; {fix}"
        ) from None
    node = back.node_data()
    if node is None or node[0] is not entry.nodetype:
        raise failed(
            f"has {n} children, and {here} unflattened from them flattens to another node; {fix}"
        )
    if len(back.children()) != n:
        raise failed(
            f"has {n} children, but {here}, registered under that name here, has "
            f"{len(back.children())}; {fix}"
        )


def _structure_of(from_children, aux, children: list, kind, failed):
    skeletons = [c.unflatten([0] * c.num_leaves) for c in children]
    try:
        tree = tree_util.tree_structure(from_children(aux, skeletons))
    except Exception as e:  # the user's function
        raise failed(f"its from_children refused ({type(e).__name__}: {e})") from e
    node = tree.node_data()
    if node is None or node[0] is not kind or tree.children() != children:
        raise failed("from_children rebuilt as another structure")
    return tree


def _from_fields(entry: Registration, aux, children: list, bad, failed):
    kind = entry.nodetype
    if not (isinstance(aux, list) and len(aux) == 2 and isinstance(aux[0], list)):
        raise bad(f"has fields {_short(aux)}, not [[child fields], {{field: value}}]")
    if not dataclasses.is_dataclass(kind):
        raise failed("was written by its fields, but is no dataclass here")
    dynamic, static = aux[0], decode_data(aux[1], bad)
    declared = {f.name for f in dataclasses.fields(kind)}
    if (
        not isinstance(static, dict)
        or len(dynamic) != len(children)
        or not all(isinstance(n, str) for n in dynamic)
    ):
        raise bad(f"has fields {_short(aux)} that do not match its {len(children)} children")
    unknown = sorted(str(n) for n in [*dynamic, *static] if n not in declared)
    if unknown or set(dynamic) & set(static) or len(set(dynamic)) != len(dynamic):
        raise failed(f"sets fields {unknown or dynamic} that are not its own, or sets one twice")
    instance = object.__new__(kind)
    for name, value in static.items():
        object.__setattr__(instance, name, value)
    for name, child in zip(dynamic, children):
        object.__setattr__(instance, name, child.unflatten([0] * child.num_leaves))
    try:
        tree = tree_util.tree_structure(instance)
    except Exception as e:  # the type's own flatten
        raise failed(f"does not flatten from its fields ({type(e).__name__}: {e})") from e
    node = tree.node_data()
    if node is None or node[0] is not kind or tree.children() != children:
        raise failed("flattens from its fields as another structure")
    return tree


def decode_data(value, bad, depth: int = 0):
    """The plain data `encode_data` wrote; `bad(detail)` is the error to raise otherwise."""
    if depth > MAX_TREE_DEPTH:
        raise bad(f"nests aux data deeper than {MAX_TREE_DEPTH} levels")
    t = type(value)
    if value is None or t in (bool, int, float):
        return value
    if t is str:
        if not value.isprintable():
            raise bad(f"has aux data {_short(value)}, which holds {_UNPRINTABLE}")
        return value
    if t is dict and len(value) == 1:
        ((kind, items),) = value.items()
        if kind in ("tuple", "list") and isinstance(items, list):
            out = [decode_data(v, bad, depth + 1) for v in items]
            return tuple(out) if kind == "tuple" else out
        if kind == "dict" and isinstance(items, list):
            out = {}
            for item in items:
                if not (isinstance(item, list) and len(item) == 2 and type(item[0]) is str):
                    raise bad(f"has an aux dict entry {_short(item)}, not a [str, value] pair")
                out[item[0]] = decode_data(item[1], bad, depth + 1)
            return out
        if kind == "float" and items in ("nan", "inf", "-inf"):
            return float(items)
    raise bad(f"has aux data {_short(value)}, which is no plain data")


def _short(value) -> str:
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."
