"""AOT artifacts, the container format: a `Compiled` as one file that loads in a fresh
process without tracing.

This module is the format only: writing a container (`Compiled.serialize()` /
`Compiled.save(path)` call `serialize`/`save`), reading and checking one (`unpack`: magic,
sizes, checksums, the header field by field, the pytrees), and describing one (`aotkit
inspect`). The format is docs/artifact-format.md. Turning a checked artifact into a
`Compiled` (`aotkit.load`) lives with compiling (aotkit/compiling.py); the persistent
compilation cache (aotkit/cache.py) stores the same containers.

What it promises:
- Nothing is pickled or evaluated: the header is JSON checked field by field, pytrees are
  written as data (tuples, lists, dicts with str or int keys, None, leaves, namedtuples by
  name and fields, registered node types by serialized name: aotkit/pytrees.py), and no
  name in a file is imported or looked up as code.
- A sharded executable is written with its layout (`partitioning`: mesh axes, the position
  of each partition's device among the run's devices, compiled shardings) and a target that
  counts the run's devices; its portable module keeps its Shardy annotations.
- A file is untrusted until checked: magic, format version, sizes, the header's and every
  section's SHA-256 and the header's fields are validated before any byte reaches the MLIR
  or PJRT bindings; anything wrong is an `ArtifactError` naming the file and the fault.
- The backend executable is an opaque named section plus the backend's `target()` (name,
  platform, versions): it is loaded as it is only on a backend whose target is equal;
  otherwise (`recompile="auto"`, with an `ArtifactWarning`) the portable StableHLO section
  is compiled here. A checksum proves the file is the one written, not that its writer is
  trusted: an executable is machine code, so load artifacts from sources you trust.

This module imports neither the tracer, the pass pipeline nor the stages: loading an
artifact costs the imports of the backend it runs on, and nothing else.
"""

from __future__ import annotations

import errno
import hashlib
import json
import math
import os
import re
import struct
import warnings

from jax import tree_util
from jax.sharding import NamedSharding
from jaxlib.mlir import ir

from aotkit import (
    _compat,
    _context,
    _files,
    arguments,
    backends,
    modules,
    pytrees,
)
from aotkit._traceback import user_stacklevel
from aotkit._version import __version__
from aotkit.arguments import format_signature
from aotkit.backends import tpu_complex128, xla_tpu
from aotkit.errors import ArtifactError, ArtifactWarning, printable
from aotkit.program import Signature
from aotkit.specs import spec
from aotkit.symbolic import algebra, signatures

MAGIC = b"\x89AOT\r\n\x1a\n"
# Version 2 added namedtuples and registered pytree nodes in the trees, and sharded programs
# (`partitioning`); version 3 symbolic programs (`symbolic`: specs with symbolic dimensions,
# constraints, one executable section per specialization). A file is written with the lowest
# version that holds it, so one that uses none of them is version 1, which every reader reads.
FORMAT_VERSION = 4
MIN_FORMAT_VERSION = 1
# magic, format version (u32), header length (u32), SHA-256 of the header: little-endian.
_PREFIX = struct.Struct("<8sII32s")
PREFIX_SIZE = _PREFIX.size
MAX_HEADER_BYTES = 16 << 20
MAX_SECTIONS = 64
MAX_TREE_DEPTH = pytrees.MAX_TREE_DEPTH
SUFFIX = ".aotx"

# Section names (docs/artifact-format.md). Unknown sections are kept and ignored.
PORTABLE = "stablehlo"  # the final module as a StableHLO portable artifact (required)
EXECUTABLE = "executable"  # the backend's serialized executable (opaque bytes)
TEXT = "text"  # the backend's final program text, Compiled.as_text() (informational)

# The header field of a persistent cache entry (aotkit/cache.py) holding the key it was
# stored under: an entry proves it belongs to the name it is read by.
CACHE_KEY = "cache_key"
# Platform -> what in the portable module that platform's compiler ends the process on (an op
# and where it is); the native runner refuses to compile the module on such a plugin.
ABORTS_ON = "aborts_on"
# The header field listing the leaves the executable and the portable module take no
# argument for (the unused arguments jax.jit prunes; optional, version 4): a call still
# passes every leaf, and those are checked and not transferred.
PRUNED = "pruned"
_CACHE_KEY_TEXT = re.compile(r"[0-9a-f]{64}")

RECOMPILE_CHOICES = ("auto", True, False)
REWRITE = "the file is not one aotkit wrote, or was changed: write it again"
_LEGALIZE_CHLO = "builtin.module(func.func(chlo-legalize-to-stablehlo))"
# Strings from a header reach terminals (`aotkit inspect`, warnings, errors, reprs) and
# compilers, whose own messages echo them. What a backend or aotkit itself reported (the
# target's fields, the versions, the executable format, section names) is data whatever its
# characters (a TPU's platform version is three lines): compared as it is, and escaped
# wherever it is shown. What reaches a compiler (options) or names a user's value (tree keys,
# node types) must be printable; the function's name is escaped wherever it is shown.
_UNPRINTABLE = "a control or other unprintable character"


# --- pytrees as data (aotkit/pytrees.py) ---------------------------------------------------


def encode_tree(tree, where: str, what: str) -> object:
    """`tree` (a PyTreeDef) as JSON data (aotkit/pytrees.py); TypeError naming a node that
    cannot be written. `what` is "argument" (the `(args, kwargs)` pair) or "result"."""
    return pytrees.encode(tree, where, what)


def decode_tree(
    data,
    where: str,
    field: str,
    fix: str | None = None,
    path: str | None = None,
    *,
    unregistered: list | None = None,
):
    """The PyTreeDef written by `encode_tree`; ArtifactError naming `field` otherwise. With
    `unregistered` (a list), a node type not registered here is read as a placeholder and
    its name appended, instead of raising (what `aotkit inspect` shows)."""
    return pytrees.decode(data, where, field, fix or REWRITE, path, unregistered=unregistered)


def _uses_custom_nodes(data) -> bool:
    """Whether encoded tree data holds a namedtuple or registered node (format version 2)."""
    stack = [data]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if "namedtuple" in node or "node" in node:
                return True
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return False


# --- sharded programs: the layout a header records -----------------------------------------


class SavedLayout:
    """A sharded artifact's `partitioning` header field, checked: the mesh's axes (name,
    size) or None, each partition's device as a position among the writer's global devices,
    and one PartitionSpec entry list (or None) per flat argument and result."""

    __slots__ = ("axes", "positions", "in_shardings", "out_shardings")

    def __init__(self, axes, positions, in_shardings, out_shardings):
        self.axes = axes
        self.positions = positions
        self.in_shardings = in_shardings
        self.out_shardings = out_shardings

    @property
    def num_devices(self) -> int:
        return len(self.positions)

    def describe(self) -> str:
        if self.axes is None:
            return f"{self.num_devices} devices"
        return "mesh (" + ", ".join(f"{n!r}: {s}" for n, s in self.axes) + ")"


def _spec_data(sharding, mesh) -> list | None:
    """A compiled sharding as header data: its PartitionSpec's entries (None, an axis name,
    a list of axis names), or None for a sharding not named over the program's mesh."""
    if mesh is None or not isinstance(sharding, NamedSharding) or sharding.mesh != mesh:
        return None
    out = []
    for entry in sharding.spec:
        if entry is None or isinstance(entry, str):
            out.append(entry)
        elif isinstance(entry, tuple | list) and all(isinstance(a, str) for a in entry):
            out.append(list(entry))
        else:  # UNCONSTRAINED, or something newer: the executable's own sharding stands
            return None
    return out


def layout_data(executable) -> dict:
    """The `partitioning` header field of a sharded executable (its bound partitioning)."""
    partitioning = executable.partitioning
    mesh = partitioning.mesh
    everywhere = list(executable.backend.global_devices())
    index = {device: i for i, device in enumerate(everywhere)}
    return {
        "mesh": None
        if mesh is None
        else [[name, int(size)] for name, size in zip(mesh.axis_names, mesh.axis_sizes)],
        "devices": [index[d] for d in partitioning.devices],
        "in_shardings": [_spec_data(s, mesh) for s in partitioning.in_shardings],
        "out_shardings": [_spec_data(s, mesh) for s in partitioning.out_shardings],
    }


MAX_DEVICES = 1 << 16


def _check_layout(data, in_specs, out_specs, bad) -> SavedLayout:
    """The checked `partitioning` header field; `bad(detail)` is the error otherwise."""
    if not isinstance(data, dict) or set(data) != {
        "mesh",
        "devices",
        "in_shardings",
        "out_shardings",
    }:
        raise bad(f"is {_short(data)}, not an object of mesh, devices, in_shardings, out_shardings")
    devices = data["devices"]
    if (
        not isinstance(devices, list)
        or not 1 <= len(devices) <= MAX_DEVICES
        or not all(type(d) is int and 0 <= d < MAX_DEVICES for d in devices)
        or len(set(devices)) != len(devices)
    ):
        raise bad(
            f"has devices {_short(devices)}, not a list of distinct device positions "
            f"(1 to {MAX_DEVICES})"
        )
    axes = data["mesh"]
    sizes = {}
    if axes is not None:
        if not isinstance(axes, list) or not axes:
            raise bad(f"has mesh {_short(axes)}, not a list of [axis name, size] pairs")
        for pair in axes:
            if not (
                isinstance(pair, list)
                and len(pair) == 2
                and isinstance(pair[0], str)
                and type(pair[1]) is int
                and pair[1] >= 1
            ):
                raise bad(f"has mesh axis {_short(pair)}, not an [axis name, size] pair")
            name = pair[0]
            if not name or not name.isprintable() or '"' in name or "\\" in name:
                raise bad(f"has mesh axis name {_short(name)}, which is no plain axis name")
            if name in sizes:
                raise bad(f"names mesh axis {name!r} twice")
            sizes[name] = pair[1]
        if math.prod(sizes.values()) != len(devices):
            raise bad(
                f"has a mesh of {math.prod(sizes.values())} devices but places it on {len(devices)}"
            )
        axes = tuple((name, size) for name, size in sizes.items())

    def shardings(key: str, specs) -> tuple:
        given = data[key]
        if not isinstance(given, list) or len(given) != len(specs):
            raise bad(f"has {key} {_short(given)}, not one entry per flat leaf ({len(specs)})")
        out = []
        for i, (entries, spec_) in enumerate(zip(given, specs)):
            if entries is None:
                out.append(None)
                continue
            what = f"{key}[{i}] {_short(entries)}"
            if axes is None or not isinstance(entries, list) or len(entries) > len(spec_.shape):
                raise bad(f"has {what}, not a PartitionSpec of {spec_} over its mesh")
            used = []
            for dim, entry in enumerate(entries):
                names = [] if entry is None else [entry] if isinstance(entry, str) else entry
                if not isinstance(names, list) or not all(n in sizes for n in names):
                    raise bad(f"has {what}, which names an axis its mesh does not have")
                used += names
                parts = math.prod(sizes[n] for n in names)
                if spec_.shape[dim] % parts:
                    raise bad(f"has {what}, which splits dimension {dim} of {spec_} unevenly")
            if len(set(used)) != len(used):
                raise bad(f"has {what}, which uses a mesh axis twice")
            out.append(tuple(tuple(e) if isinstance(e, list) else e for e in entries))
        return tuple(out)

    return SavedLayout(
        axes,
        tuple(devices),
        shardings("in_shardings", in_specs),
        shardings("out_shardings", out_specs),
    )


def _short(value) -> str:
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


# --- the container -------------------------------------------------------------------------


def _sha256(data) -> str:
    return hashlib.sha256(data).hexdigest()


def format_version(header: dict) -> int:
    """The lowest format version that holds `header`: 4 for a program that takes no argument
    for some leaves (`pruned`), 3 for a symbolic program, 2 for a sharded program or trees
    with namedtuples or registered nodes, else 1 (which older readers read too)."""
    if header.get(PRUNED):
        return 4
    if header.get("symbolic") is not None:
        return 3
    if header.get("partitioning") is not None or any(
        _uses_custom_nodes(header.get(k)) for k in ("in_tree", "out_tree")
    ):
        return 2
    return 1


def pack(header: dict, sections: dict[str, bytes]) -> bytes:
    """The container bytes of `header` (JSON data, without "sections") and `sections`."""
    table = [{"name": n, "size": len(d), "sha256": _sha256(d)} for n, d in sections.items()]
    text = json.dumps({**header, "sections": table}, sort_keys=True, separators=(",", ":"))
    raw = text.encode("utf-8")
    version = format_version(header)
    prefix = _PREFIX.pack(MAGIC, version, len(raw), hashlib.sha256(raw).digest())
    return b"".join([prefix, raw, *sections.values()])


class Artifact:
    """A checked container: its header (validated JSON) and its sections (bytes)."""

    __slots__ = (
        "label",
        "header",
        "sections",
        "section_status",
        "signature",
        "options",
        "target",
        "executable_format",
        "partitioning",
        "version",
        "unregistered",
        "shapes",
        "specializations",
        "pruned",
    )

    def __init__(self, label: str, header: dict, sections: dict, status: dict):
        self.label = label
        self.header = header
        self.sections: dict[str, memoryview] = sections
        # Section name -> "ok" or what is wrong with it (only `inspect` keeps bad ones).
        self.section_status: dict[str, str] = status

    def section(self, name: str) -> bytes | None:
        data = self.sections.get(name)
        return None if data is None else bytes(data)

    @property
    def name(self) -> str:
        return self.signature.name

    @property
    def executable_in_specs(self) -> tuple:
        """The specs of the executable's (and the portable module's) arguments: the flat
        input leaves less the `pruned` ones."""
        pruned = set(self.pruned)
        return tuple(s for i, s in enumerate(self.signature.flat_in_specs) if i not in pruned)

    def __repr__(self) -> str:
        return f"<aotkit Artifact {self.name!r} from {self.label}>"


def unpack(
    data, label: str = "<bytes>", *, verify: bool = True, where: str = "aotkit.load", fix=None
) -> Artifact:
    """Checks and splits container bytes; ArtifactError naming `label` and the fault.

    With `verify=False` (for `aotkit inspect`) a section whose checksum fails is reported
    in `section_status` instead of raising; the prefix and header are always checked.
    Messages read `{where}: {label} ...; {fix}` (`fix` says what to do; default: write the
    file again).
    """
    not_one = fix or "pass a file written by Compiled.save or `aotkit compile -o F.aotx`"
    fix = fix or REWRITE
    where = f"{where}: {label}"
    view = memoryview(data)
    n = len(view)
    if n == 0:
        raise ArtifactError(f"{where} is empty, not an aotkit artifact; {not_one}", path=label)
    if bytes(view[: len(MAGIC)]) != MAGIC[:n]:
        raise ArtifactError(
            f"{where} is not an aotkit artifact (it starts with {bytes(view[:8])!r}, not "
            f"{MAGIC!r}); {not_one}",
            path=label,
        )
    if n < PREFIX_SIZE:
        raise ArtifactError(
            f"{where} is truncated: {n} bytes, shorter than the {PREFIX_SIZE}-byte prefix; {fix}",
            path=label,
        )
    _, version, header_size, header_digest = _PREFIX.unpack_from(view, 0)
    if not MIN_FORMAT_VERSION <= version <= FORMAT_VERSION:
        newer = version > FORMAT_VERSION
        raise ArtifactError(
            f"{where} has artifact format version {version}, "
            + (
                f"newer than this aotkit reads ({FORMAT_VERSION}); upgrade aotkit, or write "
                "the artifact with this version"
                if newer
                else f"which no aotkit wrote (this one reads {MIN_FORMAT_VERSION} to "
                f"{FORMAT_VERSION}); {fix}"
            ),
            path=label,
        )
    if header_size > MAX_HEADER_BYTES:
        raise ArtifactError(
            f"{where}: header size {header_size} exceeds {MAX_HEADER_BYTES} bytes; {fix}",
            path=label,
        )
    body = PREFIX_SIZE + header_size
    if n < body:
        raise ArtifactError(
            f"{where} is truncated: {n} bytes, but its header ends at byte {body}; {fix}",
            path=label,
        )
    raw = view[PREFIX_SIZE:body]
    if hashlib.sha256(raw).digest() != header_digest:
        raise ArtifactError(
            f"{where}: the header is corrupted (its SHA-256 does not match); {fix}",
            path=label,
        )
    try:
        header = json.loads(bytes(raw).decode("utf-8"), object_pairs_hook=_unique_keys)
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise ArtifactError(
            f"{where}: the header is not valid JSON ({e}); {fix}", path=label
        ) from None
    artifact = _check_header(header, label, where, fix, lenient=not verify)
    artifact.version = version
    table = header["sections"]
    total = body + sum(s["size"] for s in table)
    if n < total:
        raise ArtifactError(
            f"{where} is truncated: {n} bytes, but its sections end at byte {total}; {fix}",
            path=label,
        )
    if n > total:
        raise ArtifactError(
            f"{where} has {n - total} bytes after its last section (it should end at byte "
            f"{total}); {fix}",
            path=label,
        )
    offset = body
    for entry in table:
        name, size = entry["name"], entry["size"]
        chunk = view[offset : offset + size]
        offset += size
        if _sha256(chunk) == entry["sha256"]:
            artifact.sections[name] = chunk
            artifact.section_status[name] = "ok"
        elif verify:
            raise ArtifactError(
                f"{where}: section {name!r} is corrupted (its SHA-256 does not match the "
                f"header's); {fix}",
                path=label,
            )
        else:
            artifact.section_status[name] = "CORRUPTED (SHA-256 mismatch)"
    return artifact


def _unique_keys(pairs):
    out = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"key {key!r} appears twice")
        out[key] = value
    return out


def _refuse_unregistered(header, where: str, fix: str, label: str, names: list) -> None:
    """ArtifactError naming every node type of the header's pytrees that is not registered
    here (one: where it is, from a strict read of the trees)."""
    if len(names) == 1:
        decode_tree(header["in_tree"], where, "in_tree", fix, label)
        decode_tree(header["out_tree"], where, "out_tree", fix, label)
    listed = ", ".join(map(repr, names))
    raise ArtifactError(
        f"{where}: the artifact's pytrees have {len(names)} node types that are not "
        f"registered for serialization in this process: {listed}; import the modules that "
        "define them and call aotkit.register_pytree_node_serialization(<its class>, "
        "serialized_name=<its name>) for each (aotkit.register_library_nodes for a "
        "library's) before loading (aotkit never imports a module a file names)",
        path=label,
    )


def _check_header(header, label: str, where: str, fix: str, lenient: bool = False) -> Artifact:
    """Validates every field aotkit reads; returns the Artifact with them decoded. `lenient`
    (inspection) reads node types not registered here as placeholders."""
    # Every node type not registered here is collected, so that loading names them all at
    # once; inspection (`lenient`) reads them as placeholders.
    unregistered: list = []

    def bad(field: str, detail: str) -> ArtifactError:
        return ArtifactError(f"{where}: header field {field!r} {detail}; {fix}", path=label)

    if not isinstance(header, dict):
        raise ArtifactError(
            f"{where}: the header is {type(header).__name__} JSON, not an object; {fix}",
            path=label,
        )

    def field(name: str, kinds, what: str):
        if name not in header:
            raise bad(name, "is missing")
        value = header[name]
        if not isinstance(value, kinds) or isinstance(value, bool) and bool not in kinds:
            raise bad(name, f"is {_short(value)}, not {what}")
        return value

    def strings(name: str, value) -> None:
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
            raise bad(name, "must map strings to strings")

    for key in header:  # unknown keys too: `aotkit inspect` prints them
        if not key.isprintable():
            raise ArtifactError(
                f"{where}: the header has a key {_short(key)}, which holds {_UNPRINTABLE}; {fix}",
                path=label,
            )
    for name in ("aotkit", "jaxlib", "stablehlo", "name"):
        field(name, (str,), "a string")
    # The target holds what the backend reported, whatever text it is: data, compared as it
    # is (the checksum proves it is what was written), never refused for its characters.
    target = field("target", (dict,), "an object")
    strings("target", target)
    if not isinstance(target.get("backend"), str):
        raise bad("target", "has no backend name")
    fmt = header.get("executable_format")
    if fmt is not None and not isinstance(fmt, str):
        raise bad("executable_format", f"is {_short(fmt)}, not a string or null")
    key = header.get(CACHE_KEY)
    if key is not None and not (isinstance(key, str) and _CACHE_KEY_TEXT.fullmatch(key)):
        raise bad(CACHE_KEY, f"is {_short(key)}, not a cache key (64 hexadecimal digits)")
    if ABORTS_ON in header:
        strings(ABORTS_ON, field(ABORTS_ON, (dict,), "an object"))
    options = field("options", (dict,), "an object")
    for key, value in options.items():
        fault = option_fault(key, value)
        if fault is not None:
            raise bad("options", f"has {fault}")
    flat = {}
    symbolic_field = header.get("symbolic")
    scope = None
    if symbolic_field is not None:
        scope = _symbolic_scope(symbolic_field, bad)
    for name in ("in_specs", "out_specs"):
        texts = field(name, (list,), "a list of specs")
        try:
            if not all(isinstance(t, str) for t in texts):
                raise TypeError("specs are strings such as 'f32[2,3]'")
            if scope is None:
                flat[name] = tuple(spec(t) for t in texts)
                if signatures.is_symbolic(flat[name]):
                    raise ValueError("a symbolic dimension in a header without a symbolic field")
            else:  # dimensions such as `b` or `2*b`: data, read by aotkit/symbolic/algebra.py
                flat[name] = tuple(signatures.parse_spec(t, scope) for t in texts)
        except (TypeError, ValueError) as e:
            raise bad(name, f"holds a bad spec ({e})") from None
    donated = field("donated", (list,), "a list of booleans")
    if len(donated) != len(flat["in_specs"]) or not all(isinstance(d, bool) for d in donated):
        raise bad("donated", f"must hold one boolean per input ({len(flat['in_specs'])})")
    in_tree = decode_tree(
        field("in_tree", (dict,), "a pytree"),
        where,
        "in_tree",
        fix,
        label,
        unregistered=unregistered,
    )
    if "out_tree" not in header:
        raise bad("out_tree", "is missing")
    out_tree = decode_tree(
        header["out_tree"], where, "out_tree", fix, label, unregistered=unregistered
    )
    if unregistered and not lenient:
        _refuse_unregistered(header, where, fix, label, sorted(set(unregistered)))
    args_kwargs = tree_util.tree_structure(((0,), {}))
    node = in_tree.node_data()
    children = in_tree.children()
    if (
        node is None
        or node[0] is not tuple
        or len(children) != 2
        or (children[0].node_data() or (None,))[0] is not tuple
        or (children[1].node_data() or (None,))[0] is not dict
    ):
        raise bad("in_tree", f"must be an (args tuple, kwargs dict) pair like {args_kwargs}")
    for name, tree, specs in (
        ("in_tree", in_tree, flat["in_specs"]),
        ("out_tree", out_tree, flat["out_specs"]),
    ):
        if tree.num_leaves != len(specs):
            raise bad(name, f"has {tree.num_leaves} leaves but there are {len(specs)} specs")
    arg_names = _check_arg_names(header.get(ARG_NAMES), len(children[0].children()), bad)
    table = field("sections", (list,), "a list")
    if len(table) > MAX_SECTIONS:
        raise bad("sections", f"lists {len(table)} sections (at most {MAX_SECTIONS})")
    seen = set()
    for entry in table:
        if not (
            isinstance(entry, dict)
            and isinstance(entry.get("name"), str)
            and isinstance(entry.get("size"), int)
            and not isinstance(entry.get("size"), bool)
            and entry["size"] >= 0
            and isinstance(entry.get("sha256"), str)
            and len(entry["sha256"]) == 64
        ):
            raise bad("sections", f"has an entry {_short(entry)} without name, size, sha256")
        if entry["name"] in seen:
            raise bad("sections", f"lists section {entry['name']!r} twice")
        seen.add(entry["name"])
    if PORTABLE not in seen:
        raise bad("sections", f"has no {PORTABLE!r} section (the portable StableHLO)")
    if fmt is not None and EXECUTABLE not in seen and symbolic_field is None:
        raise bad("sections", f"has no {EXECUTABLE!r} section for executable_format {fmt!r}")
    layout = header.get("partitioning")
    if layout is not None:
        layout = _check_layout(
            layout,
            flat["in_specs"],
            flat["out_specs"],
            lambda detail: bad("partitioning", detail),
        )
    specializations = ()
    if symbolic_field is not None:
        if layout is not None:
            raise bad("symbolic", "is given for a sharded program; aotkit writes neither with both")
        signature_shapes, specializations = _check_symbolic(
            symbolic_field, scope, flat["in_specs"], flat["out_specs"], seen, fmt, bad
        )
    else:
        signature_shapes = None
    artifact = Artifact(label, header, {}, {})
    artifact.shapes = signature_shapes
    artifact.specializations = specializations
    artifact.partitioning = layout
    artifact.unregistered = sorted(set(unregistered or ()))
    in_keys, out_keys = (), ()
    if header.get(KEYS) is not None:
        in_keys, out_keys = _check_keys(header[KEYS], flat["in_specs"], flat["out_specs"], bad)
    artifact.signature = Signature(
        printable(header["name"]),  # shown in reprs and `aotkit inspect`
        in_tree,
        out_tree,
        flat["in_specs"],
        flat["out_specs"],
        tuple(donated),
        in_keys=in_keys,
        out_keys=out_keys,
        arg_names=arg_names,
    )
    artifact.pruned = ()
    if header.get(PRUNED) is not None:
        artifact.pruned = _check_pruned(header[PRUNED], len(flat["in_specs"]), bad)
        if artifact.pruned and (layout is not None or symbolic_field is not None):
            raise bad(PRUNED, "is given for a sharded or symbolic program; aotkit writes neither")
    artifact.options = dict(options)
    artifact.target = dict(target)
    artifact.executable_format = fmt
    return artifact


def _check_pruned(data, n_in: int, bad) -> tuple[int, ...]:
    """The `pruned` field: input leaf indices, increasing, below the number of inputs."""
    if not isinstance(data, list) or not all(type(i) is int for i in data):
        raise bad(PRUNED, f"is {_short(data)}, not a list of input indices")
    if any(i < 0 or i >= n_in for i in data) or any(a >= b for a, b in zip(data, data[1:])):
        raise bad(
            PRUNED, f"is {_short(data)}; it lists input indices below {n_in}, each once, in order"
        )
    return tuple(data)


# The header field naming the positional arguments by the function's parameters (None where
# it has none), as reprs and errors name them (`Signature.arg_names`); optional.
ARG_NAMES = "arg_names"

# The header field saying which leaves are typed PRNG key arrays (optional; written only when
# one is): {"in": [...], "out": [...]}, each list empty or one entry per flat leaf, null or
# {"impl": NAME, "shape": [...]} (NAME one of `arguments.KEY_IMPLS`). The module's argument or
# result is the key's uint32 data, which its spec must be. A reader without this field (an
# older aotkit, the native runner) takes and gives that data.
KEYS = "keys"


def keys_field(in_keys: tuple, out_keys: tuple, where: str) -> dict | None:
    """The `keys` header field of a signature's key leaves; None when it has none."""
    if not (in_keys or out_keys):
        return None

    def entry(key):
        if key is None:
            return None
        impl = arguments.key_impl_name(key.dtype)
        if impl is None:
            raise ValueError(
                f"{where}: a typed PRNG key leaf ({arguments.spec_text(key)}) has an "
                "implementation jax.random.key does not take by name, which an artifact "
                f"cannot name; use one of {', '.join(arguments.KEY_IMPLS)}, or pass the key's "
                "uint32 data (jax.random.key_data)"
            )
        return {"impl": impl, "shape": list(key.shape)}

    return {"in": [entry(k) for k in in_keys], "out": [entry(k) for k in out_keys]}


def _check_keys(data, in_specs, out_specs, bad) -> tuple[tuple, tuple]:
    """The signature's `in_keys` and `out_keys` from the `keys` header field."""
    if not isinstance(data, dict) or set(data) != {"in", "out"}:
        raise bad(KEYS, f"is {_short(data)}, not an object with lists 'in' and 'out'")
    found = []
    for side, specs in (("in", in_specs), ("out", out_specs)):
        entries = data[side]
        if not isinstance(entries, list) or (entries and len(entries) != len(specs)):
            raise bad(KEYS, f"{side!r} must list no leaf or every one ({len(specs)})")
        keys = []
        for i, (entry, module_spec) in enumerate(zip(entries, specs)):
            if entry is None:
                keys.append(None)
                continue
            shape = entry.get("shape") if isinstance(entry, dict) else None
            if not (
                isinstance(entry, dict)
                and set(entry) == {"impl", "shape"}
                and isinstance(entry["impl"], str)
                and isinstance(shape, list)
                and len(shape) <= 64
                and all(type(d) is int and 0 <= d < 2**62 for d in shape)
            ):
                raise bad(
                    KEYS, f'has an entry {_short(entry)}, not {{"impl": NAME, "shape": [...]}}'
                )
            try:
                key = arguments.key_spec(entry["impl"], shape)
            except ValueError as e:
                raise bad(KEYS, str(e)) from None
            want = arguments.key_data_spec(key)
            if want != module_spec:
                raise bad(
                    KEYS,
                    f"says {side}put leaf {i} is {arguments.spec_text(key)}, whose data is "
                    f"{want}, but the module's is {module_spec}",
                )
            keys.append(key)
        found.append(tuple(keys) if any(k is not None for k in keys) else ())
    return found[0], found[1]


def _check_arg_names(names, count: int, bad) -> tuple:
    """The `arg_names` header field as a tuple (() when absent): one identifier or null per
    positional argument of `in_tree`."""
    if names is None:
        return ()
    if (
        not isinstance(names, list)
        or len(names) != count
        or not all(n is None or (isinstance(n, str) and n.isidentifier()) for n in names)
    ):
        raise bad(
            ARG_NAMES,
            f"is {_short(names)}, not a list of {count} parameter names (identifiers or null)",
        )
    return tuple(names)


def _arg_names_field(signature) -> dict:
    """`{"arg_names": [...]}` for a signature whose arguments have names, else {}."""
    names = signature.arg_names
    return {ARG_NAMES: list(names)} if any(n is not None for n in names) else {}


# --- symbolic programs (format version 3) --------------------------------------------------

MAX_SYMBOLS = 64
MAX_CONSTRAINTS = 64
# Sizes a header may give a symbol: what a dimension holds (aotkit/specs.py).
MAX_SIZE = 2**63 - 1


def _symbolic_scope(data, bad) -> algebra.SymbolicScope:
    """The constraints of the `symbolic` header field as a `algebra.SymbolicScope` (each text parsed
    by aotkit/symbolic/algebra.py's bounded parser: data, never code)."""
    if not isinstance(data, dict) or set(data) != {"symbols", "constraints", "specializations"}:
        raise bad(
            "symbolic", f"is {_short(data)}, not an object of symbols, constraints, specializations"
        )
    texts = data["constraints"]
    if (
        not isinstance(texts, list)
        or len(texts) > MAX_CONSTRAINTS
        or not all(isinstance(t, str) and t.isprintable() for t in texts)
    ):
        raise bad(
            "symbolic",
            f"has constraints {_short(texts)}, not a list of at most {MAX_CONSTRAINTS} texts",
        )
    try:
        return algebra.SymbolicScope(tuple(texts))
    except (TypeError, ValueError, RecursionError) as e:
        raise bad("symbolic", f"has a constraint that does not parse ({e})") from None


def _check_symbolic(data, scope, in_specs, out_specs, sections: set, fmt, bad):
    """The checked `symbolic` header field (its constraints already read into `scope` by
    `_symbolic_scope`): (SymbolicSignature, ((sizes dict, section name), ...))."""
    symbols, entries = data["symbols"], data["specializations"]
    if (
        not isinstance(symbols, list)
        or not 1 <= len(symbols) <= MAX_SYMBOLS
        or not all(isinstance(n, str) for n in symbols)
        or len(set(symbols)) != len(symbols)
    ):
        raise bad(
            "symbolic",
            f"has symbols {_short(symbols)}, not a list of 1 to {MAX_SYMBOLS} distinct names",
        )
    try:
        sig = signatures.SymbolicSignature.of(in_specs, out_specs, scope, where="its program")
    except ValueError as e:
        raise bad("symbolic", f"describes no program aotkit can call ({e})") from None
    if list(sig.symbols) != symbols:
        raise bad(
            "symbolic",
            f"has symbols {_short(symbols)}, but its argument specs name "
            f"{_short(list(sig.symbols))}",
        )
    if not isinstance(entries, list) or len(entries) > MAX_SECTIONS:
        raise bad(
            "symbolic",
            f"has specializations {_short(entries)}, not a list of at most {MAX_SECTIONS}",
        )
    found, used, keys = [], set(), set()
    for entry in entries:
        if not (
            isinstance(entry, dict)
            and set(entry) == {"sizes", "section"}
            and isinstance(entry["section"], str)
            and isinstance(entry["sizes"], list)
            and len(entry["sizes"]) == len(symbols)
            and all(type(n) is int and 0 <= n <= MAX_SIZE for n in entry["sizes"])
        ):
            raise bad(
                "symbolic",
                f"has a specialization {_short(entry)}, not {{sizes: one size per symbol, "
                "section: a section name}",
            )
        values = dict(zip(symbols, entry["sizes"], strict=True))
        try:
            sig.check_values(values, "the specialization")
            sig.concrete(values)
        except ValueError as e:
            raise bad("symbolic", f"has a specialization its program cannot have ({e})") from None
        key = tuple(entry["sizes"])
        if key in keys:
            raise bad("symbolic", f"lists the specialization {sig.text(values)} twice")
        if entry["section"] not in sections or entry["section"] in (PORTABLE, TEXT):
            raise bad(
                "symbolic",
                f"names section {_short(entry['section'])} for {sig.text(values)}, which "
                "is not an executable section of the file",
            )
        if entry["section"] in used:
            raise bad("symbolic", f"names section {entry['section']!r} twice")
        keys.add(key)
        used.add(entry["section"])
        found.append((values, entry["section"]))
    # An `executable` section holds one executable for every shape (a backend with dynamic
    # shapes compiled the program once: iree).
    if (fmt is None) != (not found and EXECUTABLE not in sections):
        raise bad(
            "executable_format",
            f"is {_short(fmt)} for a symbolic program with {len(found)} specialization(s) "
            f"and {'an' if EXECUTABLE in sections else 'no'} executable for every shape; it "
            "names the format of their executables, and is null when there are none",
        )
    return sig, tuple(found)


def pack_symbolic(compiled, *, text: bool = True) -> bytes:
    """The container of a `Compiled` of a symbolic program (its executable an
    `aotkit.symbolic.specialize.SymbolicExecutable`): its
    portable StableHLO (the symbolic program), its symbols and constraints, and one
    executable section per specialization compiled so far, or the one executable that
    serves every shape (`executable`) where the backend compiled it so."""
    executable = compiled._executable
    sig = executable.shapes
    backend = executable.backend
    sections = {PORTABLE: bytes(executable.source.portable())}
    if executable.dynamic is not None:
        data = executable.dynamic.serialize()
        if data is not None:
            sections[EXECUTABLE] = data
    entries = []
    for values in executable.specialized():
        data = executable.executable_for(values).serialize()
        if data is None:
            continue
        name = f"{EXECUTABLE}.{len(entries)}"
        sections[name] = data
        entries.append({"sizes": [values[s] for s in sig.symbols], "section": name})
    if text:
        sections[TEXT] = executable.as_text().encode("utf-8")
    header = {
        **_versions(),
        "name": compiled.name,
        "target": backend.target(),
        "executable_format": backend.executable_format
        if entries or EXECUTABLE in sections
        else None,
        "in_specs": [str(s) for s in sig.in_specs],
        "out_specs": [str(s) for s in sig.out_specs],
        "in_tree": encode_tree(compiled.in_tree, f"Compiled {compiled.name!r}", "argument"),
        "out_tree": encode_tree(compiled.out_tree, f"Compiled {compiled.name!r}", "result"),
        "donated": [bool(d) for d in compiled.donated],
        "options": {
            k: v for k, v in (compiled.options or {}).items() if option_fault(k, v) is None
        },
        "symbolic": {
            "symbols": list(sig.symbols),
            "constraints": list(sig.constraints),
            "specializations": entries,
        },
        **_arg_names_field(compiled.signature),
    }
    aborts = aborts_on(executable.source.module()[0], backend.platform)
    if aborts:
        header[ABORTS_ON] = aborts
    return pack(header, sections)


# --- writing -------------------------------------------------------------------------------


def aborts_on(module, platform: str | None) -> dict[str, str]:
    """The `aborts_on` field of an executable of `platform` compiled from `module`: for each
    other platform whose compiler ends the process on something its portable module holds,
    what that is (the native runner refuses to compile the module there). A TPU executable's
    portable module is the rewritten one (`portable_artifact`): nothing to say."""
    if platform == "tpu":
        return {}
    what = tpu_complex128.first_abort(module)
    return {"tpu": what} if what is not None else {}


def portable_artifact(lowered, platform: str | None = None) -> bytes:
    """The final module of `lowered` as a StableHLO portable artifact: the module its
    executable was compiled from (`Program.compiled_form`: without the leaves jax.jit pruned,
    on one device; the header's `pruned` lists them). A module the pipeline
    "none" left with CHLO ops in it is written after legalizing CHLO in a copy (the same
    rewrite the backends do first). A sharded module keeps its Shardy mesh and shardings
    (StableHLO as VHLO, the `sdy` ops as they are: what jax.export writes). For an
    executable of `platform` 'tpu', the module as XLA:TPU compiled it (complex128 converts
    and select_and_scatter windows rewritten: aotkit/backends/xla_tpu.py), so that a TPU
    that compiles the portable module again (the native runner's fallback) is given what it
    compiles."""
    module, _ = lowered._program.compiled_form(lowered.partitioning is not None)
    if platform == "tpu":
        module = xla_tpu.legalize(module, f"{lowered.name!r}: portable module")
    if lowered.partitioning is not None:
        return sharded_portable_artifact(module, lowered.name)
    return module_portable_artifact(module)


def module_portable_artifact(module) -> bytes:
    """A one-device module as a StableHLO portable artifact, CHLO legalized in a copy where
    the module has some (see `portable_artifact`); `module` may be an `ir.Module` or a
    `builtin.module` op (a clone). StableHLO's writer turns the module it is given into VHLO
    in place, so it is given a copy."""
    with _context.of(module) as lc:
        data = modules.bytecode(module)
        try:
            return modules.portable_artifact(ir.Module.parse(data, lc.mlir))
        except ValueError:
            pass
        from jaxlib.mlir import passmanager

        copy = ir.Module.parse(data, lc.mlir)
        passmanager.PassManager.parse(_LEGALIZE_CHLO).run(copy.operation)
        return modules.portable_artifact(copy)


def sharded_portable_artifact(module, name: str) -> bytes:
    """A sharded module as a portable artifact with its `sdy` annotations; ValueError where
    this jaxlib cannot write one."""
    from jaxlib.mlir.dialects import stablehlo

    data = _compat.portable_artifact_with_shardy(
        modules.bytecode(module), stablehlo.get_current_version()
    )
    if data is None:
        raise ValueError(
            f"Compiled {name!r}: serialize: this jaxlib cannot write a sharded module as a "
            "portable artifact (jaxlib's mixed StableHLO/Shardy serialization is missing); "
            "save the module with Lowered.as_bytecode() and compile it where it runs"
        )
    return data


def _versions() -> dict[str, str]:
    import jaxlib
    from jaxlib.mlir.dialects import stablehlo

    return {
        "aotkit": __version__,
        "jaxlib": jaxlib.__version__,
        "stablehlo": stablehlo.get_current_version(),
    }


# Compile options that make XLA or iree-compile read or write files (`xla_dump_to`,
# `xla_dump_hlo_as_text`, `iree-hal-dump-executable-files-to`, a linker path, profiles,
# `xla_gpu_load_autotune_results_from`, `xla_gpu_target_config_filename`, the buffer
# saver): they say where output goes, not what is compiled, so an artifact neither keeps nor
# obeys them (a file that could would make `aotkit.load(...)(x)` write wherever it names).
# Those named for what they do write files whatever their value; those named for a place
# (`..._to`, `..._path`, `..._filename`) name one only with a string value, so a flag such
# as `xla_hlo_evaluator_use_fast_path = True` changes what is compiled and is kept.
_WRITES_FILES = re.compile(r"dump|profil|trace|saver")
_NAMES_A_PLACE = re.compile(r"filename|[-_](to|from|path|dir|file|files|directory|prefix)($|[-_])")
# A compile option's name as the backends take it: XLA's flags (`xla_cpu_enable_fast_math`)
# and iree-compile's (`iree-opt-level`, with or without its leading dashes).
_OPTION_NAME = re.compile(r"-{0,2}[A-Za-z][A-Za-z0-9_.-]*")
_INT64 = range(-(2**63), 2**63)


def writes_files(option: str, value) -> bool:
    """Whether the compile option `option` = `value` names a path or makes the compiler
    write files."""
    name = option.lower()
    if _WRITES_FILES.search(name) is not None:
        return True
    return isinstance(value, str) and _NAMES_A_PLACE.search(name) is not None


def option_fault(key: str, value) -> str | None:
    """What keeps the compile option `key` = `value` out of an artifact (worded to follow
    "has"), or None. A file carries only options that change what is compiled, with names
    and values a backend's bindings can carry: nothing that names a path or writes files,
    no name that is not a flag's (a control character, `=`, a space), no int past 64 bits
    (the bindings raise a bare TypeError) and no unprintable text (compilers echo it)."""
    if not _OPTION_NAME.fullmatch(key):
        return (
            f"an option named {_short(key)}, which is not a compile option's name (an XLA "
            "or iree-compile flag such as 'xla_cpu_enable_fast_math')"
        )
    if not isinstance(value, bool | int | float | str):
        return f"{key!r} = {_short(value)}, not a bool, number or string"
    if writes_files(key, value):
        return (
            f"{key!r}, an option that names a path or makes the compiler write files; a file "
            "may carry only options that change what is compiled"
        )
    if isinstance(value, int) and value not in _INT64:
        return f"{key!r} = {_short(value)}, an int outside the 64-bit range options take"
    if backends.base.negative_size(key, value):
        return (
            f"{key!r} = {value}, a negative count or size, which XLA would read as a huge "
            "unsigned size (aborting the process)"
        )
    if backends.base.aborts_on_purpose(key):
        return f"{key!r}, an option that makes the compiler end the process on purpose"
    if backends.base.huge_count(key, value):
        return (
            f"{key!r} = {value}, a count above {backends.base.MAX_COUNT}, which makes the "
            "compile run for minutes with memory growing without bound"
        )
    if isinstance(value, str) and not value.isprintable():
        return f"{key!r} = {_short(value)}, which holds {_UNPRINTABLE}"
    return None


def pack_compiled(
    *,
    name: str,
    executable,
    serialized: bytes | None,
    portable: bytes,
    in_tree: object,
    out_tree: object,
    donated: tuple[bool, ...],
    options: dict | None,
    text: bool,
    cache_key: str | None = None,
    arg_names: tuple = (),
    keys: dict | None = None,
    aborts: dict[str, str] | None = None,
) -> bytes:
    """The container of one executable: `serialized` is `executable.serialize()`,
    `in_tree`/`out_tree` are `encode_tree` data. A sharded executable (its `partitioning`
    bound to devices) records its mesh, device placement and shardings. A persistent cache
    entry records the key it is stored under (`cache_key`), which the cache checks on read.
    `keys` is the `keys` field (`keys_field`) of typed PRNG key leaves, if any; `aborts`, the
    `aborts_on` field (`aborts_on`), if any."""
    backend = executable.backend
    sections = {PORTABLE: bytes(portable)}
    data = serialized
    if data is not None:
        sections[EXECUTABLE] = data
    if text:
        sections[TEXT] = executable.as_text().encode("utf-8")
    header = {
        **_versions(),
        "name": name,
        "target": executable.compiled_for(),
        "executable_format": backend.executable_format if data is not None else None,
        "in_specs": [str(s) for s in executable.in_specs],
        "out_specs": [str(s) for s in executable.out_specs],
        "in_tree": in_tree,
        "out_tree": out_tree,
        "donated": [bool(d) for d in donated],
        # What a reader refuses is not written: the executable was compiled with it, and a
        # recompile goes without it.
        "options": {k: v for k, v in (options or {}).items() if option_fault(k, v) is None},
    }
    if any(n is not None for n in arg_names):
        header[ARG_NAMES] = list(arg_names)
    if keys is not None:
        header[KEYS] = keys
    if cache_key is not None:
        header[CACHE_KEY] = cache_key
    if aborts:
        header[ABORTS_ON] = aborts
    if getattr(executable, "pruned", ()):
        header[PRUNED] = list(executable.pruned)
    if executable.partitioning is not None:
        header["partitioning"] = layout_data(executable)
    if signatures.is_symbolic(executable.in_specs):
        # One executable for every shape (a persistent cache entry of one).
        sig = signatures.SymbolicSignature.of(executable.in_specs, executable.out_specs)
        header["symbolic"] = {
            "symbols": list(sig.symbols),
            "constraints": list(sig.constraints),
            "specializations": [],
        }
    return pack(header, sections)


def serialize(compiled, *, text: bool = True) -> bytes:
    """`Compiled.serialize()`: the artifact of `compiled` (with its program text if `text`)."""
    where = f"Compiled {compiled.name!r}: serialize"
    keys = keys_field(compiled.signature.in_keys, compiled.signature.out_keys, where)
    # Every node type it cannot write, named at once (issue 44).
    pytrees.check_registered(where, ((compiled.in_tree, "argument"), (compiled.out_tree, "result")))
    if signatures.is_symbolic(compiled.flat_in_specs):
        # (The JAX front end, which alone takes typed keys, lowers no symbolic program.)
        _warn_options_left_out(where, compiled.options)
        return pack_symbolic(compiled, text=text)
    in_tree = encode_tree(compiled.in_tree, where, "argument")
    out_tree = encode_tree(compiled.out_tree, where, "result")
    platform = compiled._executable.backend.platform
    aborts = None
    if compiled.lowered is not None:
        portable = portable_artifact(compiled.lowered, platform)
        aborts = aborts_on(compiled.lowered._module, platform)
    elif compiled._portable is not None:
        portable = compiled._portable
    else:
        raise ValueError(
            f"{where}: it has neither its Lowered stage nor a portable StableHLO module to "
            "save; compile it with Lowered.compile (or load it with aotkit.load)"
        )
    _warn_options_left_out(where, compiled.options)
    return pack_compiled(
        name=compiled.name,
        executable=compiled._executable,
        serialized=compiled._executable.serialize(),
        portable=portable,
        in_tree=in_tree,
        out_tree=out_tree,
        donated=compiled.donated,
        options=compiled.options,
        text=text,
        arg_names=compiled.signature.arg_names,
        keys=keys,
        aborts=aborts,
    )


def _warn_options_left_out(where: str, options: dict | None) -> None:
    """An `ArtifactWarning` naming the compile options an artifact does not carry
    (`option_fault`): the executable in it was compiled with them, a recompile from it is
    not."""
    faults = [f for f in (option_fault(k, v) for k, v in (options or {}).items()) if f]
    if faults:
        warnings.warn(
            f"{where}: the artifact leaves out compile options the executable was compiled "
            f"with, so a recompile from it goes without them: it has {'; and '.join(faults)}",
            ArtifactWarning,
            stacklevel=user_stacklevel(),
        )


def save(compiled, path) -> None:
    """`Compiled.save(path)`."""
    if not isinstance(path, str | os.PathLike):
        raise TypeError(
            f"Compiled {compiled.name!r}: save: expected a path, got {type(path).__name__}; "
            "pass a file name such as 'model.aotx'"
        )
    data = serialize(compiled)
    try:
        _files.write_atomic(path, data)
    except OSError as e:
        raise _save_error(e, compiled.name, os.fspath(path), len(data)) from None


def _save_error(error: OSError, name: str, path: str, size: int) -> OSError:
    """The OSError of a failed save, naming the user's `path` (not the temporary file the
    write went through) and the cause; of the same type, with the same errno."""
    where = f"Compiled {name!r}: save: cannot write {path!r}"
    folder = os.path.dirname(path) or "."
    reason = error.strerror or str(error) or type(error).__name__
    if isinstance(error, FileNotFoundError) and not os.path.isdir(folder):
        text = f"{where}: the folder {folder!r} does not exist; create it first, or save elsewhere"
    elif os.path.isdir(path):
        text = (
            f"{where}: it is a folder; name a file in it, e.g. "
            f"{os.path.join(path, name + SUFFIX)!r}"
        )
    elif error.errno == errno.EFBIG:
        text = (
            f"{where}: {reason} (the file-size limit of this process, RLIMIT_FSIZE or "
            f"`ulimit -f`, is below the artifact's {size:,} bytes); raise the limit; a file "
            "already there is left as it was"
        )
    else:
        text = f"{where}: {reason}; a file already there is left as it was"
    new = type(error)(text)
    new.errno = error.errno
    return new


# --- reading -------------------------------------------------------------------------------


def read(source, where: str = "aotkit.load") -> tuple[bytes, str]:
    """(bytes, label) of a path or of bytes; FileNotFoundError/TypeError worded for `where`.

    A path is read by `aotkit._files.read_source` (the reader `load_module`'s too): a FIFO,
    a device, a directory, a file over 4 GiB or an artifact with bytes after its last section
    is an ArtifactError before it is read."""
    try:
        return _files.read_source(
            source,
            where=where,
            what="the artifact's path",
            fix="pass the path of an artifact file",
            text=", which is a module, not an artifact; load it with "
            "aotkit.load_module(text.encode()) and compile it, or pass an artifact's path",
            text_fix="load it with aotkit.load_module(text.encode()) and compile it",
            not_found="pass the path of an artifact written by Compiled.save or "
            "`aotkit compile ... -o FILE.aotx`",
            check=lambda f, label: check_length(f, label, where),
        )
    except ArtifactError:
        raise
    except ValueError as e:  # not a regular file, or too large: refused before reading
        raise ArtifactError(str(e), path=os.fspath(source)) from None


def check_length(f: _files.Regular, label: str, where: str) -> None:
    """Refuses, before the file is read, an artifact longer than its header says (the
    ArtifactError `unpack` would raise after reading it all): the prefix and header are read
    on their own. Anything else wrong with them is left to `unpack`, which names it."""
    prefix = f.head(PREFIX_SIZE)
    if len(prefix) < PREFIX_SIZE:
        return
    magic, version, header_size, digest = _PREFIX.unpack(prefix)
    if (
        magic != MAGIC
        or not MIN_FORMAT_VERSION <= version <= FORMAT_VERSION
        or header_size > MAX_HEADER_BYTES
    ):
        return
    raw = f.head(header_size, PREFIX_SIZE)
    if len(raw) < header_size or hashlib.sha256(raw).digest() != digest:
        return
    try:
        header = json.loads(raw.decode("utf-8"), object_pairs_hook=_unique_keys)
        sizes = [entry["size"] for entry in header["sections"]]
    except (UnicodeDecodeError, ValueError, RecursionError, TypeError, KeyError):
        return
    if not all(type(size) is int and size >= 0 for size in sizes):
        return
    total = PREFIX_SIZE + header_size + sum(sizes)
    if f.size > total:
        raise ArtifactError(
            f"{where}: {label} has {f.size - total} bytes after its last section (it should "
            f"end at byte {total}); {REWRITE}",
            path=label,
        )


def is_artifact(data) -> bool:
    """Whether `data` starts with the artifact magic (it may still be corrupt)."""
    return bytes(data[: len(MAGIC)]) == MAGIC


def parse_portable(artifact: Artifact, place: str):
    """The portable StableHLO section as an `ir.Module` in a lowering context: (module, lc).

    The section's checksum has been checked, so it is the bytes aotkit wrote; it is parsed
    in this process."""
    from jaxlib.mlir.dialects import stablehlo

    data = artifact.section(PORTABLE)
    lc = _context.for_lowering()
    with lc:
        try:
            module = stablehlo.deserialize_portable_artifact(lc.mlir, data)
        except (ValueError, ir.MLIRError) as e:
            raise ArtifactError(
                f"{place}: its portable StableHLO (version "
                f"{printable(artifact.header['stablehlo'])}) "
                f"does not load here (StableHLO {stablehlo.get_current_version()}): "
                f"{modules.diagnostic(e)}; write the artifact again with this version",
                path=artifact.label,
            ) from None
        if modules.main_function(module) is None:
            raise ArtifactError(
                f"{place}: its portable StableHLO has no @main function; {REWRITE}",
                path=artifact.label,
            )
        lc.add_constant_bytes(len(data))
    return module, lc


def differences(saved: dict, here: dict) -> str:
    """Where two targets (`Backend.target()` plus the executable format) differ, their
    texts escaped as reprs escape them (a platform version may be several lines)."""
    parts = []
    for key in sorted(set(saved) | set(here), key=lambda k: (k != "backend", k)):
        if saved.get(key) != here.get(key):
            parts.append(f"{printable(key)} {saved.get(key)!r} (here {here.get(key)!r})")
    return ", ".join(parts)


# --- inspection ----------------------------------------------------------------------------


def _leaf_signature(artifact: Artifact) -> str:
    """The artifact's signature with its leaves named by path, as stage reprs print it."""
    return format_signature(artifact.signature)


def describe(data, label: str) -> str:
    """What `aotkit inspect` prints for an artifact: the header, the sections with their
    sizes and checksum status, and whether it loads here as it is."""
    artifact = unpack(data, label, verify=False)
    header = {k: v for k, v in artifact.header.items() if k != "sections"}
    lines = [
        f"{label}: aotkit artifact, format {artifact.version}, {len(data)} bytes",
        f"function: {_leaf_signature(artifact)}",
        *_symbolic_lines(artifact),
        "header:",
        *(f"  {k}: {json.dumps(header[k], separators=(', ', ': '))}" for k in sorted(header)),
        "sections:",
    ]
    width = max(len(printable(s["name"])) for s in artifact.header["sections"])
    for entry in artifact.header["sections"]:
        name = entry["name"]
        lines.append(
            f"  {printable(name):<{width}}  {entry['size']:>12,} bytes  sha256 "
            f"{entry['sha256'][:16]}  {artifact.section_status[name]}"
        )
    lines.append(_here(artifact))
    if artifact.unregistered:
        names = ", ".join(map(repr, artifact.unregistered))
        lines.append(
            f"node types not registered here: {names}; aotkit.load needs "
            "aotkit.register_pytree_node_serialization for each"
        )
    return "\n".join(lines)


def _symbolic_lines(artifact: Artifact) -> list[str]:
    """What `aotkit inspect` says of a symbolic program: its symbols and constraints, and
    the shapes it holds executables for."""
    sig = artifact.shapes
    if sig is None:
        return []
    constraints = "; ".join(map(str, sig.constraints)) or "none"
    held = [
        "  "
        + sig.text(values)
        + ": "
        + ", ".join(map(str, sig.concrete(values)[0]))
        + f" ({printable(section)})"
        for values, section in artifact.specializations
    ]
    if artifact.section(EXECUTABLE) is not None and not held:
        return [
            f"symbolic: {', '.join(sig.symbols)}; constraints: {constraints}",
            f"one executable for every shape ({EXECUTABLE}, "
            f"{printable(artifact.executable_format)}); "
            "no specializations",
        ]
    return [
        f"symbolic: {', '.join(sig.symbols)}; constraints: {constraints}",
        f"specializations: {len(held)} (other shapes compile from the portable StableHLO)",
        *held,
    ]


def _here(artifact: Artifact) -> str:
    name = artifact.target["backend"]
    try:
        backend = backends.get(name)
    except (ValueError, RuntimeError):  # unknown here, or a plugin that did not start
        topology = artifact.target.get("topology")
        if topology is not None:  # compiled for a TPU topology without a TPU
            return (
                f"here: backend {name!r} does not start; it runs on a TPU host of topology "
                f"{topology!r}; aotkit.load compiles it for another"
            )
        return f"here: backend {name!r} does not start; aotkit.load compiles it for another"
    layout = artifact.partitioning
    if layout is not None:
        available = len(backend.global_devices())
        if max(layout.positions) >= available:
            return (
                f"here: backend {name!r} has {available} device(s); it needs "
                f"{max(layout.positions) + 1}"
            )
    here = dict(backend.target_for(artifact.target))
    saved = dict(artifact.target)
    if backend.executable_format is not None:
        here["executable_format"] = backend.executable_format
    if artifact.executable_format is not None:
        saved["executable_format"] = artifact.executable_format
    if saved == here:
        how = "its executable loads as it is" if backend.executable_format else "compiles"
        return f"here: backend {name!r} matches; {how}"
    return f"here: recompiles ({differences(saved, here)})"
