"""Sharded (SPMD) programs: shardings from the user into the module, and back out of modules.

Not a stage of its own; the front ends, the stages and the backends ask here. aotkit does not
partition programs itself: it writes the shardings into the StableHLO module as Shardy
annotations (what `jax.jit` writes), and XLA's SPMD partitioner, through PJRT, partitions the
module when it is compiled for the mesh's devices (aotkit/backends/pjrt_spmd.py).

- `flat_shardings` turns `in_shardings`/`out_shardings` (pytree prefixes whose leaves are JAX's
  public `NamedSharding`, `PartitionSpec` or None) into one sharding per flat leaf, checked
  against the leaf's shape: a mesh axis the mesh lacks, more entries than dimensions, an axis
  used twice, or a dimension its axes do not divide (an uneven shape: refused, never padded)
  is a ValueError naming the argument.
- While a function is traced, `constrain` emits `sdy.sharding_constraint`; `annotate` then
  writes `mhlo.num_partitions`, the `sdy.mesh` and every argument's and result's
  `sdy.sharding` into the traced module.
- `read_layout` reads what a module from JAX or a file says: its device count, its mesh
  (axis names and sizes) and, where Shardy states them, the shardings of `@main`.
- `Partitioning` carries the mesh and the flat shardings through the stages to the compile.
"""

from __future__ import annotations

import contextlib
import math
import threading

from jax import tree_util
from jax.sharding import AbstractMesh, AxisType, Mesh, NamedSharding, PartitionSpec, Sharding
from jaxlib.mlir import ir

from aotkit import arguments, modules

MESH_SYMBOL = "mesh"
_SHARDY_ATTR = "sdy.sharding"
_GSPMD_ATTR = "mhlo.sharding"


# --- the layout a program carries through the stages ---------------------------------------


class Partitioning:
    """A program's layout over devices: its mesh and one sharding per flat input and output.

    `mesh` is a `jax.sharding.Mesh` (its devices are the device assignment), an
    `AbstractMesh` (axis names and sizes only, from a module file: compiling binds it to the
    backend's first devices) or None (a module annotated in GSPMD's syntax: only its device
    count is known). A sharding is a `NamedSharding`, or None where the compiler decides (an
    unconstrained result) or the module states it in a form aotkit does not read. A
    `Compiled` holds a bound one: devices known, every sharding the compiled one.
    """

    __slots__ = ("mesh", "num_devices", "in_shardings", "out_shardings", "devices")

    def __init__(self, mesh, num_devices: int, in_shardings, out_shardings, devices=None):
        self.mesh = mesh
        self.num_devices = num_devices
        self.in_shardings: tuple = tuple(in_shardings)
        self.out_shardings: tuple = tuple(out_shardings)
        if devices is None and isinstance(mesh, Mesh):
            devices = tuple(mesh.devices.flat)
        # The device assignment (partition i runs on devices[i]), or None until bound.
        self.devices: tuple | None = devices

    def describe(self) -> str:
        """`mesh ('data': 4, 'model': 2)` or `8 devices`."""
        if self.mesh is None:
            return f"{self.num_devices} devices"
        return f"mesh {mesh_text(self.mesh)}"

    def __repr__(self) -> str:
        return f"<Partitioning {self.describe()}>"


def mesh_text(mesh) -> str:
    """`('data': 4, 'model': 2)`: a mesh's axes as the user wrote them."""
    axes = ", ".join(f"{name!r}: {size}" for name, size in zip(mesh.axis_names, mesh.axis_sizes))
    return f"({axes})"


def sharding_text(sharding) -> str:
    """How a sharding reads in an error: `P('data', None) on mesh ('data': 4)`, or its repr."""
    if isinstance(sharding, NamedSharding):
        return f"{sharding.spec} on mesh {mesh_text(sharding.mesh)}"
    return repr(sharding)


def _mesh_key(mesh) -> tuple:
    if isinstance(mesh, Mesh):
        return (mesh.axis_names, mesh.axis_sizes, tuple(d.id for d in mesh.devices.flat))
    return (tuple(mesh.axis_names), tuple(mesh.axis_sizes))


def same_mesh(a, b) -> bool:
    """Whether two meshes name the same axes, sizes and devices (axis types aside)."""
    return _mesh_key(a) == _mesh_key(b)


# --- user shardings -> one sharding per flat leaf ------------------------------------------


def is_sharding_leaf(x) -> bool:
    return x is None or isinstance(x, PartitionSpec | Sharding)


def find_mesh(where: str, *shardings):
    """The mesh of the `NamedSharding`s among `shardings` (pytrees), or None; ValueError if
    they name different meshes. (JAX's ambient mesh, `jax.set_mesh`, is not read: a jit's
    caches would then depend on it.)"""
    found = None
    for tree in shardings:
        for leaf in tree_util.tree_leaves(tree, is_leaf=is_sharding_leaf):
            if isinstance(leaf, NamedSharding):
                if found is None:
                    found = leaf.mesh
                elif not same_mesh(found, leaf.mesh):
                    raise ValueError(
                        f"{where}: shardings over two meshes, {mesh_text(found)} and "
                        f"{mesh_text(leaf.mesh)} (or the same axes on other devices); a program "
                        "runs on one mesh: build every NamedSharding from the same Mesh"
                    )
    if found is not None:
        _check_distinct_devices(where, found)
    return found


def _check_distinct_devices(where: str, mesh) -> None:
    """A concrete mesh names each device once: XLA partitions over distinct devices, and a
    repeated one compiled, then failed at the call ("Number of processed shards ...")."""
    if isinstance(mesh, AbstractMesh):
        return  # devices are chosen at compile time
    devices = getattr(mesh, "devices", None)
    if devices is None:
        return
    flat = devices.flat if hasattr(devices, "flat") else devices
    seen = set()
    for device in flat:
        key = (getattr(device, "platform", None), getattr(device, "id", id(device)))
        if key in seen:
            raise ValueError(
                f"{where}: the mesh {mesh_text(mesh)} names device {device} more than once; "
                "each device can hold one shard: build the mesh from distinct devices (e.g. "
                "aotkit.sharding.mesh('data=4'))"
            )
        seen.add(key)


def flat_shardings(
    where: str, what: str, shardings, tree, specs, mesh, labels, *, default_replicated: bool
) -> tuple:
    """One sharding per leaf of `tree` (a PyTreeDef) from `shardings`, a pytree prefix of it.

    Leaves of `shardings` are NamedSharding, PartitionSpec (over `mesh`) or None: None is
    replicated when `default_replicated` (arguments), else left to the compiler (results).
    Each sharding is checked against its leaf's spec; `labels` name the leaves in errors.
    """
    if isinstance(shardings, list):
        shardings = tuple(shardings)
    leaves, prefix = tree_util.tree_flatten(shardings, is_leaf=is_sharding_leaf)
    dummy = tree_util.tree_unflatten(tree, list(range(tree.num_leaves)))
    try:
        subtrees = prefix.flatten_up_to(dummy)
    except (ValueError, TypeError) as e:
        raise ValueError(
            f"{where}: {what} {shardings!r} does not match the structure {tree}: {e}; give "
            "one sharding for everything, or a tuple (or pytree) with one per argument"
        ) from None
    flat: list = [None] * tree.num_leaves
    for leaf, subtree in zip(leaves, subtrees, strict=True):
        for index in tree_util.tree_leaves(subtree):
            flat[index] = leaf
    out = []
    for index, leaf in enumerate(flat):
        label = f"{what} for {labels[index]}"
        out.append(resolve(where, label, leaf, specs[index], mesh, default_replicated))
    return tuple(out)


def resolve(where: str, label: str, leaf, spec, mesh, default_replicated: bool):
    """`leaf` (NamedSharding, PartitionSpec or None) as a checked NamedSharding over `mesh`."""
    if leaf is None:
        if not default_replicated or mesh is None:
            return None
        return NamedSharding(mesh, PartitionSpec())
    if isinstance(leaf, PartitionSpec):
        if mesh is None:
            raise ValueError(
                f"{where}: {label} is {leaf}, a PartitionSpec without a mesh; pass "
                "NamedSharding(mesh, spec), or a NamedSharding for another argument or result, "
                "whose mesh the PartitionSpecs then use"
            )
        try:
            leaf = NamedSharding(mesh, leaf)
        except Exception as e:  # JAX's own checks (unknown axes, an axis used twice, ...)
            raise ValueError(
                f"{where}: {label} is {leaf}, which does not fit mesh {mesh_text(mesh)}: "
                f"{str(e).rstrip('.')}; fix the PartitionSpec"
            ) from None
    elif not isinstance(leaf, NamedSharding):
        raise TypeError(
            f"{where}: {label} is {leaf!r}, not a NamedSharding; aotkit shards over named "
            "meshes: pass NamedSharding(mesh, PartitionSpec(...)), a PartitionSpec or None"
        )
    elif mesh is not None and not same_mesh(leaf.mesh, mesh):
        raise ValueError(
            f"{where}: {label} is over mesh {mesh_text(leaf.mesh)}, but the program's mesh is "
            f"{mesh_text(mesh)} (or the same axes on other devices); build every "
            "NamedSharding from the same Mesh"
        )
    check_fits(where, label, leaf, spec)
    return leaf


def _entry_axes(entry) -> tuple:
    if entry is None or entry is PartitionSpec.UNCONSTRAINED:
        return ()
    if isinstance(entry, str):
        return (entry,)
    return tuple(entry)


def check_fits(where: str, label: str, sharding: NamedSharding, spec) -> None:
    """ValueError unless `sharding` splits an array of `spec` (a ShapeDtype) evenly.

    A NamedSharding has checked its PartitionSpec against its mesh when it was made (known
    axes, each used once); what is left is the array's shape."""
    pspec, mesh = sharding.spec, sharding.mesh
    sizes = dict(zip(mesh.axis_names, mesh.axis_sizes))
    if getattr(pspec, "unreduced", None) or getattr(pspec, "reduced", None):
        raise ValueError(
            f"{where}: {label} is {pspec}, with unreduced or reduced axes; aotkit shards "
            "arrays, it does not keep partial values: drop unreduced= and reduced="
        )
    if len(pspec) > len(spec.shape):
        raise ValueError(
            f"{where}: {label} is {pspec}, with {len(pspec)} entries for {spec} "
            f"({len(spec.shape)} dimensions); give at most one entry per dimension"
        )
    for dim, entry in enumerate(pspec):
        axes = _entry_axes(entry)
        parts = math.prod(sizes[a] for a in axes)
        size = spec.shape[dim]
        if parts > 1 and size % parts:
            over = " x ".join(repr(a) for a in axes)
            padded = -(-size // parts) * parts
            raise ValueError(
                f"{where}: {label} is {pspec}: dimension {dim} of {spec} (size {size}) is "
                f"split over {over} ({parts} devices), which does not divide it; uneven shards "
                f"are refused: pad the dimension to a multiple of {parts} (e.g. {padded}) or "
                "split another dimension"
            )


# --- tracing: the mesh of the program being traced, and sharding constraints ---------------


class TraceLayout:
    """What a trace knows about sharding: its mesh, set by in/out shardings or by the first
    `constrain` with a NamedSharding."""

    __slots__ = ("mesh", "where")

    def __init__(self, mesh, where: str):
        self.mesh = mesh
        self.where = where


_tls = threading.local()


@contextlib.contextmanager
def tracing(mesh, where: str):
    """Makes `mesh` the mesh of the trace running in this thread, for `constrain`."""
    stack = _tls.__dict__.setdefault("layouts", [])
    layout = TraceLayout(mesh, where)
    stack.append(layout)
    try:
        yield layout
    finally:
        stack.pop()


def current_layout() -> TraceLayout | None:
    stack = getattr(_tls, "layouts", None)
    return stack[-1] if stack else None


# --- writing Shardy annotations ------------------------------------------------------------


def shardy_text(sharding: NamedSharding, ndim: int) -> str:
    """`#sdy.sharding<@mesh, [{"data"}, {}]>`: a NamedSharding as a Shardy attribute."""
    dims = []
    for dim in range(ndim):
        entry = sharding.spec[dim] if dim < len(sharding.spec) else None
        if entry is PartitionSpec.UNCONSTRAINED:
            dims.append("{?}")
        else:
            dims.append("{" + ", ".join(f'"{a}"' for a in _entry_axes(entry)) + "}")
    return f"#sdy.sharding<@{MESH_SYMBOL}, [{', '.join(dims)}]>"


def _check_axis_names(where: str, mesh) -> None:
    for name in mesh.axis_names:
        if not isinstance(name, str) or not name or '"' in name or "\\" in name:
            raise ValueError(
                f"{where}: mesh axis name {name!r} cannot be written into the module; name "
                "mesh axes with plain strings such as 'data'"
            )


def annotate(module: ir.Module, partitioning: Partitioning, in_specs, out_specs) -> None:
    """Writes `partitioning` into a traced module: `mhlo.num_partitions`, the `sdy.mesh`, and
    `sdy.sharding` on `@main`'s arguments and constrained results. The caller is inside
    `with lc:` for the module's context."""
    mesh = partitioning.mesh
    _check_axis_names("lower", mesh)
    i32 = ir.IntegerType.get_signless(32)
    attrs = module.operation.attributes
    attrs["mhlo.num_partitions"] = ir.IntegerAttr.get(i32, partitioning.num_devices)
    attrs["mhlo.num_replicas"] = ir.IntegerAttr.get(i32, 1)
    axes = ", ".join(f'"{n}"={s}' for n, s in zip(mesh.axis_names, mesh.axis_sizes))
    with ir.InsertionPoint.at_block_begin(module.body), ir.Location.unknown():
        ir.Operation.create(
            "sdy.mesh",
            attributes={
                "sym_name": ir.StringAttr.get(MESH_SYMBOL),
                "mesh": ir.Attribute.parse(f"#sdy.mesh<[{axes}]>"),
            },
        )
    main = modules.main_function(module)
    for key, shardings, specs in (
        ("arg_attrs", partitioning.in_shardings, in_specs),
        ("res_attrs", partitioning.out_shardings, out_specs),
    ):
        old = list(ir.ArrayAttr(main.attributes[key])) if key in main.attributes else []
        entries = []
        for i, (sharding, spec) in enumerate(zip(shardings, specs, strict=True)):
            entry = {a.name: a.attr for a in ir.DictAttr(old[i])} if i < len(old) else {}
            if sharding is not None:
                entry[_SHARDY_ATTR] = ir.Attribute.parse(shardy_text(sharding, len(spec.shape)))
            entries.append(ir.DictAttr.get(entry))
        if any(len(ir.DictAttr(e)) for e in entries):
            main.attributes[key] = ir.ArrayAttr.get(entries)


# --- reading a module that says how it is sharded ------------------------------------------


def _attr_name(item) -> str:
    return item if isinstance(item, str) else item.name


class ModuleLayout:
    """What a module from JAX or a file says about its devices (see `read_layout`)."""

    __slots__ = ("num_partitions", "num_replicas", "mesh", "in_shardings", "out_shardings")

    def __init__(self, num_partitions, num_replicas, mesh, in_shardings, out_shardings):
        self.num_partitions = num_partitions
        self.num_replicas = num_replicas
        # The AbstractMesh of the module's `sdy.mesh`, or None (no mesh: GSPMD or unsharded).
        self.mesh = mesh
        # Per @main argument/result: a PartitionSpec on that mesh, None (no annotation) or
        # "other" (annotated in a form aotkit does not read back: GSPMD text, sub-axes).
        self.in_shardings = in_shardings
        self.out_shardings = out_shardings


def read_layout(where: str, module: ir.Module) -> ModuleLayout:
    """The device count, mesh and `@main` shardings a partitioned module states; ValueError
    for a mesh aotkit cannot place (several meshes, devices out of order). The caller is inside
    `with lc:` for the module's context."""
    from jaxlib.mlir.dialects import sdy

    meshes = []
    for op in module.body.operations:
        if op.operation.name == "sdy.mesh":
            attrs = op.operation.attributes
            mesh_attr = sdy.MeshAttr(attrs["mesh"])
            axes = [sdy.MeshAxisAttr(a) for a in mesh_attr.axes]
            if axes:  # JAX also declares an empty mesh beside some ops
                meshes.append((ir.StringAttr(attrs["sym_name"]).value, mesh_attr, axes))
    mesh, symbol = None, None
    if len(meshes) > 1:
        names = ", ".join("@" + m[0] for m in meshes)
        raise ValueError(
            f"{where}: the module declares several meshes ({names}); aotkit runs a program on "
            "one mesh: lower or export it with one"
        )
    if meshes:
        symbol, mesh_attr, axes = meshes[0]
        device_ids = list(mesh_attr.device_ids)
        if device_ids and device_ids != list(range(len(device_ids))):
            raise ValueError(
                f"{where}: mesh @{symbol} lists its devices in the order {device_ids}; aotkit "
                "places a module's mesh on devices in order: export it with a mesh in device "
                "order"
            )
        # Shardy's axes have no type; `{?}` (unconstrained) needs Auto axes, which newer
        # JAX no longer makes the default.
        mesh = AbstractMesh(
            tuple(a.size for a in axes),
            tuple(a.name for a in axes),
            axis_types=(AxisType.Auto,) * len(axes),
        )
    main = modules.main_function(module)
    n_in = len(modules.function_type(main).inputs)
    n_out = len(modules.function_type(main).results)
    return ModuleLayout(
        modules.int_attr(module, "mhlo.num_partitions"),
        modules.int_attr(module, "mhlo.num_replicas"),
        mesh,
        _read_attrs(main, "arg_attrs", n_in, symbol),
        _read_attrs(main, "res_attrs", n_out, symbol),
    )


def _read_attrs(main, key: str, n: int, symbol: str | None) -> tuple:
    from jaxlib.mlir.dialects import sdy

    if key not in main.attributes:
        return (None,) * n
    found = []
    for d in ir.ArrayAttr(main.attributes[key]):
        d = ir.DictAttr(d)
        names = {a.name for a in d}
        if _SHARDY_ATTR in names:
            found.append(_partition_spec(sdy.TensorShardingAttr(d[_SHARDY_ATTR]), symbol))
        elif _GSPMD_ATTR in names:
            found.append("other")
        else:
            found.append(None)
    return tuple(found)


def _partition_spec(attr, symbol: str | None):
    """A Shardy tensor sharding on mesh `@symbol` as a PartitionSpec, or "other"."""
    from jaxlib.mlir.dialects import sdy

    if symbol is None or str(attr.mesh_or_ref) != f"@{symbol}" or list(attr.unreduced_axes):
        return "other"
    entries = []
    for dim in attr.dimension_shardings:
        dim = sdy.DimensionShardingAttr(dim)
        axes = [sdy.AxisRefAttr(a) for a in dim.axes]
        if any(a.sub_axis_info is not None for a in axes):
            return "other"
        names = tuple(a.name for a in axes)
        if not dim.is_closed and not names:
            entries.append(PartitionSpec.UNCONSTRAINED)
        else:
            entries.append(None if not names else names[0] if len(names) == 1 else names)
    return PartitionSpec(*entries)


def from_module(where: str, layout: ModuleLayout, in_specs, out_specs, mesh=None) -> Partitioning:
    """The `Partitioning` of an adopted module: its own mesh (abstract, unless `mesh`, a
    concrete Mesh with the same axis names and sizes, is given) and the shardings it states."""
    n = layout.num_partitions or 1
    module_mesh = layout.mesh
    if module_mesh is not None:
        if module_mesh.size != n:
            raise ValueError(
                f"{where}: its mesh {mesh_text(module_mesh)} has {module_mesh.size} devices but "
                f"the module is partitioned for {n} (mhlo.num_partitions); re-export it"
            )
        if mesh is not None and (tuple(mesh.axis_names), tuple(mesh.axis_sizes)) == (
            tuple(module_mesh.axis_names),
            tuple(module_mesh.axis_sizes),
        ):
            module_mesh = mesh

    def sharding(pspec, spec, label):
        if not isinstance(pspec, PartitionSpec) or module_mesh is None:
            return None
        try:
            named_sharding = NamedSharding(module_mesh, pspec)
        except ValueError as e:  # e.g. {?} over a mesh whose axes are all Explicit
            raise ValueError(
                f"{where}: {label} is {pspec}, which does not fit mesh {mesh_text(module_mesh)}: "
                f"{e}"
            ) from None
        check_fits(where, label, named_sharding, spec)
        return named_sharding

    ins = [
        sharding(p, s, f"the sharding of argument {i}")
        for i, (p, s) in enumerate(zip(layout.in_shardings, in_specs, strict=True))
    ]
    outs = [
        sharding(p, s, f"the sharding of result {i}")
        for i, (p, s) in enumerate(zip(layout.out_shardings, out_specs, strict=True))
    ]
    return Partitioning(module_mesh, n, ins, outs)


# --- naming leaves, and the flat input shardings of a call ---------------------------------


def arg_labels(in_tree, names=()) -> list[str]:
    """`x`, `params['w']`, `scale`: each leaf of an `(args, kwargs)` tree, named by its
    parameter where `names` has it (`args[0]` where not)."""
    dummy = tree_util.tree_unflatten(in_tree, [0] * in_tree.num_leaves)
    flat = tree_util.tree_flatten_with_path(dummy)[0]
    return [arguments.arg_path(path, names) for path, _ in flat]


def result_labels(out_tree) -> list[str]:
    """`result`, `result[0]`, `result['loss']`: each leaf of an output tree."""
    dummy = tree_util.tree_unflatten(out_tree, [0] * out_tree.num_leaves)
    return [
        "result" + tree_util.keystr(path) for path, _ in tree_util.tree_flatten_with_path(dummy)[0]
    ]


def flat_in_shardings(where: str, in_shardings, in_tree, specs, mesh, names=()) -> tuple:
    """One sharding per leaf of an `(args, kwargs)` tree: `in_shardings` is a pytree prefix
    of the positional arguments (as in jax.jit); keyword arguments are replicated, and
    refused when `in_shardings` is given (jax.jit refuses them too). `names`: the
    positional parameters' names, which errors call the arguments by."""
    labels = arg_labels(in_tree, names)
    args_tree, kwargs_tree = in_tree.children()
    n_args = args_tree.num_leaves
    if in_shardings is not None and kwargs_tree.num_leaves:
        raise ValueError(
            f"{where}: in_shardings covers positional arguments (as in jax.jit), but "
            f"{labels[n_args]} is passed by keyword; pass it positionally"
        )
    flat = flat_shardings(
        where,
        "in_shardings",
        in_shardings,
        args_tree,
        specs[:n_args],
        mesh,
        labels[:n_args],
        default_replicated=True,
    )
    rest = tuple(
        resolve(where, f"in_shardings for {label}", None, spec, mesh, True)
        for label, spec in zip(labels[n_args:], specs[n_args:], strict=True)
    )
    return flat + rest


def replicate_missing(shardings, mesh) -> tuple:
    """`shardings` with None replaced by the replicated sharding over `mesh`."""
    return tuple(NamedSharding(mesh, PartitionSpec()) if s is None else s for s in shardings)


def refuse_bare_specs(where: str, what: str, shardings) -> None:
    """The errors `resolve` gives a PartitionSpec (or a leaf that is no sharding) among
    `shardings` when the program has no mesh, which would otherwise go unnoticed."""
    for leaf in tree_util.tree_leaves(shardings, is_leaf=is_sharding_leaf):
        resolve(where, what, leaf, None, None, False)
