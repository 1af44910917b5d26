"""Custom pytree nodes in artifacts (aotkit/pytrees.py): namedtuples, registered node types,
and the training steps of the JAX ecosystem saved here and loaded in a fresh process.

Oracles: the `Compiled` that was saved (same trees, same results) and `jax.jit` of the same
training step over 20 steps, leaf for leaf and bit for bit. Every error a registration or a
file can cause has its message matched. The fresh process (tests/pytree_child.py) also loads
crafted files whose node type names an importable module, and must not import it.
"""

from __future__ import annotations

import collections
import dataclasses
import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest
from jax import tree_util

import aotkit
from aotkit import artifacts, pytrees
from aotkit.errors import ArtifactError
from tests import ecosystem_models
from tests.helpers import pythonpath
from tests.test_artifacts import raw_header, repack

ROOT = Path(__file__).resolve().parents[1]
F32 = aotkit.spec("f32[3]")
X = np.arange(3, dtype=np.float32)

Pair = collections.namedtuple("Pair", "first second")
Swapped = collections.namedtuple("Swapped", "first second")


# --- namedtuples: no registration ------------------------------------------------------------


def swap(p):
    return Pair(p.second * 2.0, p.first), {"n": Pair(p.first, None)}


@pytest.fixture(scope="module")
def pair_artifact():
    compiled = aotkit.jit(swap, donate_argnums=(0,)).lower(Pair(F32, F32)).compile()
    return compiled, compiled.serialize()


def test_a_namedtuple_is_written_by_name_and_fields(pair_artifact):
    _, data = pair_artifact
    art = artifacts.unpack(data)
    node = {"namedtuple": ["tests.test_artifact_pytrees.Pair", ["first", "second"], ["*", "*"]]}
    assert art.header["in_tree"] == {"tuple": [{"tuple": [node]}, {"dict": []}]}
    assert art.version == 2  # a version 1 reader refuses it by its version
    plain = aotkit.lower(lambda x: x, F32).compile().serialize()
    assert artifacts.unpack(plain).version == 1


def test_a_loaded_namedtuple_is_a_stand_in_the_real_one_conforms_to(pair_artifact):
    compiled, data = pair_artifact
    loaded = aotkit.load(data)
    (standin,) = loaded.in_tree.children()[0].children()
    kind = standin.node_data()[0]
    assert kind is not Pair and kind.__name__ == "Pair" and kind._fields == ("first", "second")
    assert kind.__module__ == "aotkit.pytrees"
    assert pytrees.conforms(compiled.in_tree, loaded.in_tree)
    out, extra = loaded(Pair(X, X + 1))  # the real class, as the caller has it
    want, _ = compiled(Pair(X, X + 1))
    assert type(out) is kind and out.first.dtype == np.float32
    np.testing.assert_array_equal(out.first, want.first)
    np.testing.assert_array_equal(out.second, want.second)
    assert extra["n"].second is None
    assert out._asdict().keys() == {"first", "second"}
    assert repr(out._replace(second=1)).startswith("Pair(first=Array([")
    first = np.asarray(out.first)
    again, _ = loaded(out)  # and its own results, fed back (and donated)
    np.testing.assert_array_equal(again.second, first)
    assert kind is pytrees.standin("tests.test_artifact_pytrees.Pair", ("first", "second"))


def test_another_namedtuple_does_not_conform(pair_artifact):
    _, data = pair_artifact
    loaded = aotkit.load(data)
    with pytest.raises(TypeError, match=(
        r"^Compiled 'swap': function compiled for PyTreeDef\(\(\(CustomNode\(namedtuple\[Pair\], "
        r"\[\*, \*\]\),\), \{\}\)\), called with PyTreeDef\(\(\(CustomNode\(namedtuple\[Swapped\], "
        r"\[\*, \*\]\),\), \{\}\)\); first difference at p: expected a Pair of 2, got "
        r"a Swapped of 2; call it with the structure"
    )):  # fmt: skip
        loaded(Swapped(X, X))


def test_a_registered_namedtuple_loads_as_its_class():
    Named = collections.namedtuple("Named", "a b")
    aotkit.register_namedtuple_serialization(Named, serialized_name="tests.pytrees.Named")
    compiled = aotkit.lower(lambda n: Named(n.b, n.a), Named(F32, F32)).compile()
    loaded = aotkit.load(compiled.serialize())
    assert loaded.in_tree == compiled.in_tree and loaded.out_tree == compiled.out_tree
    out = loaded(Named(X, X + 1))
    assert type(out) is Named and out.a[0] == 1


def test_a_registered_namedtuple_with_other_fields_is_refused():
    Old = collections.namedtuple("Old", "a b")
    aotkit.register_namedtuple_serialization(Old, serialized_name="tests.pytrees.Renamed")
    data = aotkit.lower(lambda n: n.a, Old(F32, F32)).compile().serialize()
    New = collections.namedtuple("New", "a c")
    pytrees._by_name["tests.pytrees.Renamed"] = pytrees.Registration(
        New, "tests.pytrees.Renamed", namedtuple=True
    )
    with pytest.raises(ArtifactError, match=re.escape(
        "aotkit.load: <bytes>: header field 'in_tree' has at args[0] the namedtuple "
        "'tests.pytrees.Renamed' with fields ['a', 'b'], but tests.test_artifact_pytrees.New, "
        "registered under that name here, has ['a', 'c']; register the class the artifact "
        "was saved with"
    )):  # fmt: skip
        aotkit.load(data)


# --- registered node types: data, fields, bytes ------------------------------------------------


@tree_util.register_dataclass
@dataclasses.dataclass
class Scaled:
    value: jax.Array
    factor: int = dataclasses.field(metadata={"static": True})
    label: str = dataclasses.field(default="s", metadata={"static": True})


class _Marker:
    """A sentinel in aux data (as Equinox has): not plain data."""

    def __repr__(self):
        return "MARKER"


MARKER = _Marker()


@dataclasses.dataclass(frozen=True)
class Layer:
    weight: jax.Array
    size: int


tree_util.register_pytree_with_keys(
    Layer,
    lambda m: (((tree_util.GetAttrKey("weight"), m.weight),), (MARKER, m.size)),
    lambda aux, children: Layer(children[0], aux[1]),
    lambda m: ((m.weight,), (MARKER, m.size)),
)


class Tagged:
    """Registered for serialization through jax.export, with aux data written as bytes."""

    def __init__(self, value, tag):
        self.value, self.tag = value, tag


tree_util.register_pytree_node(
    Tagged, lambda t: ((t.value,), t.tag), lambda tag, c: Tagged(c[0], tag)
)
jax.export.register_pytree_node_serialization(
    Tagged,
    serialized_name="tests.pytrees.Tagged",
    serialize_auxdata=lambda tag: json.dumps(tag).encode(),
    deserialize_auxdata=lambda data: json.loads(data.decode()),
)
aotkit.register_pytree_node_serialization(Scaled)
aotkit.register_pytree_node_serialization(Layer, serialized_name="tests.pytrees.Layer")


class Plain:
    """Registered for artifacts but not as a pytree node: a file naming it cannot build it."""


aotkit.register_pytree_node_serialization(Plain, serialized_name="tests.pytrees.Plain")


class Refusing(Tagged):
    pass


class Reshaping(Tagged):
    pass


for _cls, _build in ((Refusing, lambda aux, c: 1 / 0), (Reshaping, lambda aux, c: (c[0],))):
    tree_util.register_pytree_node(
        _cls, lambda t: ((t.value,), t.tag), lambda tag, c, cls=_cls: cls(c[0], tag)
    )
    aotkit.register_pytree_node_serialization(
        _cls, serialized_name=f"tests.pytrees.{_cls.__name__}", from_children=_build
    )


def node_of(data: bytes, field: str = "in_tree"):
    return artifacts.unpack(data).header[field]["tuple"][0]["tuple"][0]


def test_plain_aux_data_is_written_as_data_and_static_fields_survive():
    compiled = aotkit.lower(lambda s: Scaled(s.value * s.factor, s.factor, "out"), Scaled(F32, 3))
    compiled = compiled.compile()
    data = compiled.serialize()
    assert node_of(data)["node"][:2] == [
        "tests.test_artifact_pytrees.Scaled",
        {"data": {"tuple": [3, "s"]}},
    ]
    loaded = aotkit.load(data)
    assert loaded.in_tree == compiled.in_tree and loaded.out_tree == compiled.out_tree
    out = loaded(Scaled(X, 3))
    assert (out.factor, out.label) == (3, "out")
    np.testing.assert_array_equal(out.value, X * 3)


def test_a_dataclass_with_other_aux_data_is_written_by_its_fields():
    compiled = aotkit.lower(lambda m: Layer(m.weight + 1.0, m.size), Layer(F32, 7)).compile()
    data = compiled.serialize()
    assert node_of(data)["node"][1] == {"fields": [["weight"], {"dict": [["size", 7]]}]}
    loaded = aotkit.load(data)
    assert loaded.in_tree == compiled.in_tree  # the sentinel comes back from the type's flatten
    out = loaded(Layer(X, 7))
    assert out.size == 7 and out.weight[0] == 1


def test_a_jax_export_registration_writes_bytes_and_reads_them_back():
    compiled = aotkit.lower(lambda t: Tagged(t.value * 2.0, t.tag), Tagged(F32, ["a", 1])).compile()
    data = compiled.serialize()
    assert node_of(data)["node"][:2] == ["tests.pytrees.Tagged", {"bytes": "WyJhIiwgMV0="}]
    loaded = aotkit.load(data)
    assert loaded.in_tree == compiled.in_tree
    out = loaded(Tagged(X, ["a", 1]))
    assert out.tag == ["a", 1]
    np.testing.assert_array_equal(out.value, X * 2)


def test_static_arguments_and_static_fields_survive():
    def scale(s, power, *, shift):
        return Scaled(s.value**power + shift, s.factor * power, s.label)

    jitted = aotkit.jit(scale, static_argnums=(1,), static_argnames=("shift",))
    compiled = jitted.lower(Scaled(F32, 3, "q"), 2, shift=1.0).compile()
    loaded = aotkit.load(compiled.serialize())
    out = loaded(Scaled(X, 3, "q"))  # the static arguments were baked in, as in `compiled`
    assert (out.factor, out.label) == (6, "q")
    np.testing.assert_array_equal(out.value, compiled(Scaled(X, 3, "q")).value)
    with pytest.raises(TypeError, match=r"first difference at s: expected a Scaled"):
        loaded(Scaled(X, 4, "q"))  # another static field is another structure


def test_donation_survives_with_custom_nodes(tmp_path):
    compiled = aotkit.jit(lambda s: Scaled(s.value + 1.0, s.factor), donate_argnums=(0,))
    compiled = compiled.lower(Scaled(F32, 2)).compile()
    loaded = aotkit.load(compiled.serialize())
    assert loaded.donated == (True,) and loaded.donate_argnums == (0,)
    given = Scaled(jax.numpy.asarray(X), 2)
    loaded(given)
    assert given.value.is_deleted()


# --- what cannot be written, and what a file cannot make the loader do -----------------------


def test_aux_data_that_is_not_data_needs_serialization_functions():
    class Opaque:
        def __init__(self, v):
            self.v = v

    tree_util.register_pytree_node(Opaque, lambda o: ((o.v,), MARKER), lambda _, c: Opaque(*c))
    aotkit.register_pytree_node_serialization(Opaque, serialized_name="tests.pytrees.Opaque")
    compiled = aotkit.lower(lambda o: o.v, Opaque(F32)).compile()
    with pytest.raises(TypeError, match=re.escape(
        "Compiled 'lambda': serialize: argument args[0] is a tests.test_artifact_pytrees."
        "test_aux_data_that_is_not_data_needs_serialization_functions.<locals>.Opaque whose aux "
        "data holds MARKER, which is not plain data (None, bool, int, float, str, tuples, "
        "lists, dicts with str keys); register it with serialize_auxdata= and "
        "deserialize_auxdata= that turn its aux data into bytes and back"
    )):  # fmt: skip
        compiled.serialize()


def test_serialize_auxdata_must_return_bytes():
    class Texted(Tagged):
        pass

    tree_util.register_pytree_node(
        Texted, lambda t: ((t.value,), t.tag), lambda g, c: Texted(c[0], g)
    )
    aotkit.register_pytree_node_serialization(
        Texted,
        serialized_name="tests.pytrees.Texted",
        serialize_auxdata=str,
        deserialize_auxdata=lambda b: b,
    )
    compiled = aotkit.lower(lambda t: t.value, Texted(F32, "x")).compile()
    with pytest.raises(TypeError, match=re.escape(
        "Compiled 'lambda': serialize: argument args[0]: serialize_auxdata of "
        "'tests.pytrees.Texted' returned a str, not bytes; return bytes (e.g. "
        "json.dumps(...).encode())"
    )):  # fmt: skip
        compiled.serialize()


def unregistered_artifact() -> bytes:
    """An artifact naming 'tests.pytrees.Gone', a node type this process then forgets."""

    class Gone:
        def __init__(self, v):
            self.v = v

    tree_util.register_pytree_node(Gone, lambda g: ((g.v,), None), lambda _, c: Gone(*c))
    aotkit.register_pytree_node_serialization(Gone, serialized_name="tests.pytrees.Gone")
    data = aotkit.lower(lambda xs: xs[1].v, (F32, Gone(F32))).compile().serialize()
    del pytrees._by_name["tests.pytrees.Gone"], pytrees._by_type[Gone]
    return data


def test_a_node_type_not_registered_at_load_is_named_with_how_to_register_it():
    with pytest.raises(ArtifactError, match=re.escape(
        "aotkit.load: <bytes>: header field 'in_tree' has at args[0][1] a node of type "
        "'tests.pytrees.Gone', which is not registered for serialization in this process; "
        "import the module that defines it and call aotkit.register_pytree_node_serialization"
        "(<its class>, serialized_name='tests.pytrees.Gone') before loading (aotkit never "
        "imports a module a file names)"
    )):  # fmt: skip
        aotkit.load(unregistered_artifact())


def test_inspect_shows_an_artifact_whose_node_types_are_not_registered_here():
    text = artifacts.describe(unregistered_artifact(), "gone.aotx")
    assert "function: lambda(xs[0]: f32[3], xs[1].child0: f32[3]) -> " in text
    assert text.endswith(
        "node types not registered here: 'tests.pytrees.Gone'; aotkit.load needs "
        "aotkit.register_pytree_node_serialization for each"
    )


def with_in_tree(data: bytes, in_tree) -> bytes:
    header = {k: v for k, v in artifacts.unpack(data).header.items() if k != "sections"}
    return raw_header(json.dumps({**header, "in_tree": in_tree, "sections": []}).encode())


@pytest.fixture(scope="module")
def one_leaf():
    return aotkit.lower(lambda x: x, F32).compile().serialize()


DEEP = "x"
for _ in range(300):
    DEEP = {"tuple": [DEEP]}


def wrap(node):
    return {"tuple": [{"tuple": [node]}, {"dict": []}]}


@pytest.mark.parametrize(
    "node, message",
    [
        ({"node": "x"}, 'has a node "x", not [name, {form: aux}, [children]]'),
        (
            {"node": ["tests.pytrees.Layer", {"fields": [["weight"], {"dict": []}]}, ["*"]]},
            "has at args[0] a node of type 'tests.pytrees.Layer' (tests.test_artifact_pytrees."
            "Layer here) that does not flatten from its fields (AttributeError: 'Layer' object "
            "has no attribute 'size'); save the artifact again with the registration this "
            "process has",
        ),
        (
            {
                "node": [
                    "tests.pytrees.Layer",
                    {"fields": [["__class__"], {"dict": [["size", 1]]}]},
                    ["*"],
                ]
            },
            "has at args[0] a node of type 'tests.pytrees.Layer' (tests.test_artifact_pytrees."
            "Layer here) that sets fields ['__class__'] that are not its own, or sets one twice",
        ),
        (
            {"node": ["tests.pytrees.Tagged", {"bytes": "not base64!"}, ["*"]]},
            'has aux bytes "not base64!" that are not base64 text',
        ),
        (
            {"node": ["tests.pytrees.Tagged", {"bytes": "/w=="}, ["*"]]},
            "has at args[0] a node of type 'tests.pytrees.Tagged' (tests.test_artifact_pytrees."
            "Tagged here) that its deserialize_auxdata refused",
        ),
        (
            {"node": ["tests.test_artifact_pytrees.Scaled", {"data": {"set": []}}, ["*"]]},
            'has aux data {"set": []}, which is no plain data',
        ),
        (
            {"node": ["tests.test_artifact_pytrees.Scaled", {"pickle": "x"}, ["*"]]},
            "has a node 'tests.test_artifact_pytrees.Scaled' with aux form \"pickle\" (bytes, "
            "data or fields)",
        ),
        (
            {"namedtuple": ["P", ["a", "__init__"], ["*", "*"]]},
            'has a namedtuple \'P\' with fields ["a", "__init__"]: fields must be distinct '
            "identifiers not starting with '_'",
        ),
        ({"namedtuple": ["P", ["a"], ["*", "*"]]}, "has a namedtuple 'P' whose children"),
        ({"namedtuple": ["P\x1b", [], []]}, 'names a namedtuple "P\\u001b", which holds a control'),
        ({"namedtuple": "x"}, 'has a namedtuple "x", not [name, [fields], [children]]'),
        ({"node": ["a\x1b", {"data": None}, []]}, 'names a node type "a\\u001b", which holds'),
        (
            {"node": ["tests.test_artifact_pytrees.Scaled", {"data": None}, "x"]},
            'has children "x", not a list',
        ),
        (
            {"node": ["tests.test_artifact_pytrees.Scaled", {"bytes": "e30="}, ["*"]]},
            "(tests.test_artifact_pytrees.Scaled here) that was written by its "
            "serialize_auxdata, but it is registered here without deserialize_auxdata",
        ),
        (
            {"node": ["tests.pytrees.Tagged", {"fields": [["value"], {"dict": []}]}, ["*"]]},
            "that was written by its fields, but is no dataclass here",
        ),
        (
            {"node": ["tests.pytrees.Layer", {"fields": "x"}, ["*"]]},
            'has fields "x", not [[child fields], {field: value}]',
        ),
        (
            {
                "node": [
                    "tests.pytrees.Layer",
                    {"fields": [["weight", "size"], {"dict": []}]},
                    ["*"],
                ]
            },
            'has fields [["weight", "size"], {"dict": []}] that do not match its 1 children',
        ),
        (
            {"node": ["tests.pytrees.Plain", {"data": None}, ["*"]]},
            "(tests.test_artifact_pytrees.Plain here) that is not a pytree node type here",
        ),
        (
            {"node": ["tests.pytrees.Refusing", {"data": "t"}, ["*"]]},
            "that its from_children refused (ZeroDivisionError: division by zero)",
        ),
        (
            {"node": ["tests.pytrees.Reshaping", {"data": "t"}, ["*"]]},
            "that from_children rebuilt as another structure",
        ),
        (
            {"node": ["tests.pytrees.Tagged", {"data": {"dict": [["a"]]}}, ["*"]]},
            'has an aux dict entry ["a"], not a [str, value] pair',
        ),
        (
            {"node": ["tests.test_artifact_pytrees.Scaled", {"data": "a\x1b"}, ["*"]]},
            'has aux data "a\\u001b", which holds a control or other unprintable character',
        ),
        (
            {"node": ["tests.test_artifact_pytrees.Scaled", {"data": DEEP}, ["*"]]},
            "nests aux data deeper than 256 levels",
        ),
    ],
    ids=[
        "node-shape",
        "fields-missing",
        "fields-undeclared",
        "bytes-not-base64",
        "bytes-refused",
        "data-not-plain",
        "unknown-form",
        "namedtuple-private-field",
        "namedtuple-count",
        "namedtuple-unprintable",
        "namedtuple-shape",
        "node-unprintable",
        "children-not-list",
        "bytes-without-deserialize",
        "fields-not-dataclass",
        "fields-shape",
        "fields-count",
        "not-a-pytree-node",
        "from-children-refused",
        "from-children-reshaped",
        "aux-dict-entry",
        "aux-unprintable",
        "aux-deep",
    ],
)
def test_malformed_nodes_are_artifact_errors(one_leaf, node, message):
    with pytest.raises(ArtifactError) as info:
        aotkit.load(with_in_tree(one_leaf, wrap(node)))
    assert message in str(info.value)
    assert str(info.value).startswith("aotkit.load: <bytes>: header field 'in_tree' ")


# --- registering ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "call, error, message",
    [
        (
            lambda: aotkit.register_pytree_node_serialization(dict),
            TypeError,
            "aotkit.register_pytree_node_serialization: dict is one of the node types artifacts "
            "keep without registering; register only your own node types",
        ),
        (
            lambda: aotkit.register_pytree_node_serialization(
                Scaled, serialized_name="tests.pytrees.Layer"
            ),
            ValueError,
            "aotkit.register_pytree_node_serialization: serialized_name 'tests.pytrees.Layer' is "
            "already registered for tests.test_artifact_pytrees.Layer; give "
            "tests.test_artifact_pytrees.Scaled a name of its own",
        ),
        (
            lambda: aotkit.register_pytree_node_serialization(Scaled, serialized_name="other"),
            ValueError,
            "aotkit.register_pytree_node_serialization: tests.test_artifact_pytrees.Scaled is "
            "already registered as 'tests.test_artifact_pytrees.Scaled'; a type has one "
            "serialized name",
        ),
        (
            lambda: aotkit.register_pytree_node_serialization(Layer, serialize_auxdata=repr),
            TypeError,
            "aotkit.register_pytree_node_serialization: tests.test_artifact_pytrees.Layer: "
            "serialize_auxdata and deserialize_auxdata go together; give both, or neither "
            "(aotkit then writes the aux data as data)",
        ),
        (
            lambda: aotkit.register_pytree_node_serialization(Layer, serialized_name="a\nb"),
            ValueError,
            "aotkit.register_pytree_node_serialization: serialized_name 'a\\nb' must be a "
            "non-empty printable str, such as 'mypackage.MyNode'",
        ),
        (
            lambda: aotkit.register_namedtuple_serialization(Scaled),
            TypeError,
            "aotkit.register_namedtuple_serialization: <class 'tests.test_artifact_pytrees."
            "Scaled'> is not a namedtuple class; register other node types with "
            "aotkit.register_pytree_node_serialization",
        ),
    ],
    ids=["builtin", "name-taken", "type-renamed", "half-functions", "unprintable", "not-named"],
)
def test_registration_errors(call, error, message):
    with pytest.raises(error, match=f"^{re.escape(message)}$"):
        call()


@pytest.mark.parametrize(
    "call, error, message",
    [
        (
            lambda: aotkit.register_pytree_node_serialization(3),
            TypeError,
            "aotkit.register_pytree_node_serialization: expected a class, got 3",
        ),
        (
            lambda: aotkit.register_pytree_node_serialization(
                Layer, serialize_auxdata=1, deserialize_auxdata=2
            ),
            TypeError,
            "aotkit.register_pytree_node_serialization: serialize_auxdata must be a function, "
            "got 1",
        ),
        (
            lambda: aotkit.register_pytree_node_serialization(collections.OrderedDict),
            TypeError,
            "aotkit.register_pytree_node_serialization: OrderedDict is one of the node types "
            "artifacts keep without registering; register only your own node types",
        ),
    ],
    ids=["not-a-class", "not-a-function", "ordered-dict"],
)
def test_more_registration_errors(call, error, message):
    with pytest.raises(error, match=f"^{re.escape(message)}$"):
        call()


def test_what_cannot_be_written_is_named():
    ordered = aotkit.lower(lambda d: d["a"], collections.OrderedDict(a=F32)).compile()
    with pytest.raises(TypeError, match=re.escape(
        "Compiled 'lambda': serialize: argument args[0] is a collections.OrderedDict; "
        "artifacts keep dicts (str or int keys): pass dict(...) instead"
    )):  # fmt: skip
        ordered.serialize()
    Renamed = collections.namedtuple("Renamed", "a def", rename=True)
    renamed = aotkit.lower(lambda r: r.a, Renamed(F32, F32)).compile()
    with pytest.raises(ValueError, match=re.escape(
        "Compiled 'lambda': serialize: argument args[0] is a tests.test_artifact_pytrees.Renamed "
        "with field '_1'; artifacts keep namedtuples whose fields are identifiers not "
        "starting with '_'"
    )):  # fmt: skip
        renamed.serialize()

    class Failing(Tagged):
        pass

    tree_util.register_pytree_node(
        Failing, lambda t: ((t.value,), t.tag), lambda g, c: Failing(c[0], g)
    )
    aotkit.register_pytree_node_serialization(
        Failing,
        serialized_name="tests.pytrees.Failing",
        serialize_auxdata=lambda aux: 1 / 0,
        deserialize_auxdata=lambda b: b,
    )
    failing = aotkit.lower(lambda t: t.value, Failing(F32, "x")).compile()
    with pytest.raises(TypeError, match=re.escape(
        "Compiled 'lambda': serialize: argument args[0]: serialize_auxdata of "
        "'tests.pytrees.Failing' raised ZeroDivisionError: division by zero; fix the function "
        "registered for tests.test_artifact_pytrees.test_what_cannot_be_written_is_named."
        "<locals>.Failing"
    )):  # fmt: skip
        failing.serialize()


def test_a_stand_in_checks_what_it_is_built_from():
    Standin = pytrees.standin("tests.pytrees.S", ("a", "b"))
    with pytest.raises(TypeError, match=r"^S takes 2 values, got 1$"):
        Standin(1)
    with pytest.raises(ValueError, match=re.escape("S._replace: unknown fields ['c']")):
        Standin(1, 2)._replace(c=3)
    assert Standin(1, 2).b == 2 and Standin(1, 2)._asdict() == {"a": 1, "b": 2}


def test_registering_the_same_type_again_replaces_it():
    assert aotkit.register_pytree_node_serialization(Scaled) is Scaled


# --- the JAX ecosystem in a fresh process ----------------------------------------------------

AVAILABLE = {
    name: all(importlib.util.find_spec(m) is not None for m in modules)
    for name, modules in ecosystem_models.LIBRARIES.items()
}
PAYLOAD = """
import pathlib
pathlib.Path(__file__).with_name("IMPORTED").write_text("the loader imported me")

class Payload:
    pass
"""


class _Payload:
    def __init__(self, v):
        self.v = v


tree_util.register_pytree_node(_Payload, lambda p: ((p.v,), None), lambda _, c: _Payload(*c))
_Point = collections.namedtuple("_Point", "x y")


def crafted_files(tmp: Path) -> dict[str, str]:
    """Artifacts whose trees name types of module `evil_payload`, which the child could
    import (it is on its path) and which leaves a file behind when it is imported."""
    (tmp / "evil_payload.py").write_text(PAYLOAD)
    aotkit.register_pytree_node_serialization(_Payload, serialized_name="evil_payload.Payload")
    aotkit.register_namedtuple_serialization(_Point, serialized_name="evil_payload.Point")
    files = {
        "crafted_node": aotkit.lower(lambda p: p.v, _Payload(F32)),
        "crafted_namedtuple": aotkit.lower(lambda p: _Point(p.y, p.x), _Point(F32, F32)),
    }
    paths = {}
    for name, lowered in files.items():
        paths[name] = str(tmp / f"{name}.aotx")
        lowered.compile().save(paths[name])
    return paths


def oracle(name: str):
    """`jax.jit` of the case's step, STEPS steps from its start: (final leaves, losses)."""
    case = ecosystem_models.CASES[name]()
    step = jax.jit(case.step, donate_argnums=(0, 1))
    params, opt_state = case.start()
    losses = []
    for _ in range(ecosystem_models.STEPS):
        params, opt_state, loss = step(params, opt_state, *case.batch)
        losses.append(np.asarray(loss))
    return [np.asarray(x) for x in jax.tree.leaves((params, opt_state))], np.stack(losses)


@pytest.fixture(scope="module")
def ecosystem(tmp_path_factory):
    """Every available case saved here (donating params and optimizer state), loaded and run
    in one fresh process with the crafted files."""
    tmp = tmp_path_factory.mktemp("ecosystem")
    plan = {"cases": {}, "crafted": crafted_files(tmp)}
    for name in (n for n, ok in AVAILABLE.items() if ok):
        case = ecosystem_models.CASES[name]()
        case.register()
        params, opt_state = case.start()
        step = aotkit.jit(case.step, donate_argnums=(0, 1))
        path = tmp / f"{name}.aotx"
        step.lower(params, opt_state, *case.batch).compile().save(path)
        plan["cases"][name] = str(path)
    (tmp / "plan.json").write_text(json.dumps(plan))
    env = {**__import__("os").environ, "PYTHONPATH": pythonpath(ROOT, tmp)}
    proc = subprocess.run(
        [sys.executable, "-m", "tests.pytree_child", str(tmp / "plan.json"), str(tmp)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]  # negative: killed by a signal
    return tmp, json.loads((tmp / "out.json").read_text())


@pytest.mark.parametrize("name", list(ecosystem_models.CASES))
def test_training_step_round_trip_equals_jax_jit(ecosystem, name):
    if not AVAILABLE[name]:
        needs = ecosystem_models.LIBRARIES[name]
        extra = "flax" if "flax" in needs else "test"
        pytest.skip(f"{' and '.join(needs)} not installed: pip install -e '.[{extra}]'")
    tmp, results = ecosystem
    seen = results[name]
    assert seen["origin"] == "artifact"
    assert seen["donated"]  # the loaded step consumed the real state it was given
    got = np.load(tmp / f"{name}.npz", allow_pickle=False)
    want_leaves, want_losses = oracle(name)
    np.testing.assert_array_equal(got["losses"], want_losses)
    assert got["losses"].dtype == np.float32
    for i, want in enumerate(want_leaves):
        have = got[f"arr_{i}"]
        assert have.dtype == want.dtype and have.shape == want.shape, i
        np.testing.assert_array_equal(have, want)
    assert len(got.files) == len(want_leaves) + 1


def test_optax_states_come_back_as_stand_ins_or_as_the_registered_class(ecosystem):
    _, results = ecosystem
    if AVAILABLE["flax_linen"]:
        assert results["flax_linen"]["opt_state"] == [
            "aotkit.pytrees.ScaleByAdamState",
            "aotkit.pytrees.EmptyState",
        ]
    if AVAILABLE["flax_nnx"]:
        assert results["flax_nnx"]["params"] == "State"
    if AVAILABLE["equinox"]:
        assert results["equinox"]["params"] == "MLP"
        assert results["equinox"]["opt_state"][0] == "optax._src.transform.ScaleByAdamState"
    if not any(AVAILABLE.values()):
        pytest.skip("none of flax, equinox, optax is installed: pip install -e '.[flax]'")


def test_a_crafted_file_naming_a_module_imports_nothing(ecosystem):
    tmp, results = ecosystem
    assert results["crafted_node"] == (
        f"ArtifactError: aotkit.load: {tmp / 'crafted_node.aotx'}: header field 'in_tree' has "
        "at args[0] a node of type 'evil_payload.Payload', which is not registered for "
        "serialization in this process; import the module that defines it and call "
        "aotkit.register_pytree_node_serialization(<its class>, serialized_name="
        "'evil_payload.Payload') before loading (aotkit never imports a module a file names)"
    )
    # A namedtuple loads as a stand-in, named as the file says, made from data.
    assert (
        results["crafted_namedtuple"] == "loaded: PyTreeDef(CustomNode(namedtuple[Point], [*, *]))"
    )
    assert "evil_payload" not in results["modules"]
    assert not (tmp / "IMPORTED").exists()
    assert importlib.util.find_spec("evil_payload") is None  # only the child had it on its path


def test_repack_keeps_custom_nodes(pair_artifact):
    # The corruption helpers of tests/test_artifacts.py work on version 2 files too.
    _, data = pair_artifact
    assert (
        artifacts.unpack(repack(data)).header["in_tree"] == artifacts.unpack(data).header["in_tree"]
    )
