"""Adopting a StableHLO module that aotkit did not trace (from JAX or from a file).

Shared by the JAX and file front ends. `adopt` takes a module already parsed in aotkit's
context and makes it look like one the tracer produced: `module @<name>` with a public
`@main`, verified. A single-device module loses its placement annotations (Shardy `sdy`
attributes and meshes, `mhlo.sharding`), which say nothing on one device and which not every
backend or pass accepts. A module partitioned over several devices (`mhlo.num_partitions` >
1, or sharded on purpose by the JAX front end) keeps them: its `Partitioning`
(aotkit/spmd.py) says how it is sharded, and XLA partitions it when it is compiled. It
returns a `Program` (aotkit/program.py) with `@main`'s flat argument and result specs and
which arguments are donated. A module
with several replicas (`mhlo.num_replicas` > 1) is a ValueError.
"""

from __future__ import annotations

from jaxlib.mlir import ir

from aotkit import _context, dtypes, modules, spmd
from aotkit.errors import printable
from aotkit.program import Program, Signature

# Argument and result attributes that only describe placement on a mesh. A single-device
# compile ignores them at best; dropping them keeps the module within what every aotkit
# backend (the reference interpreter included) accepts.
_PLACEMENT_ATTRS = frozenset(
    {
        "mhlo.sharding",
        "mhlo.layout_mode",
        "mhlo.memory_kind",
        "sdy.sharding",
        "mhlo.is_same_data_across_replicas",
    }
)


def _clean_attrs(array: ir.ArrayAttr, keep: bool, where: str) -> tuple[ir.ArrayAttr, list[bool]]:
    """Drops placement attributes (unless `keep`) from per-argument dicts; says which carry a
    donation.

    Values are read by name only from a dict that loses an entry: `NamedAttribute.attr` of
    a complex dense value ends the process in jaxlib 0.10.2, and reading it by name raises.
    """
    dicts, donated = [], []
    for d in array:
        d = ir.DictAttr(d)
        names = [a.name for a in d]
        donated.append(any(k in names for k in modules.DONATION_ATTRS))
        if keep or not any(n in _PLACEMENT_ATTRS for n in names):
            dicts.append(d)
            continue
        kept = {}
        for n in names:
            if n in _PLACEMENT_ATTRS:
                continue
            try:
                kept[n] = d[n]
            except TypeError:
                raise ValueError(
                    f"{where}: @main's argument or result attribute {n} holds a value the "
                    f"MLIR Python bindings cannot read ({str(d)[:200]}); remove the attribute"
                ) from None
        dicts.append(ir.DictAttr.get(kept))
    return ir.ArrayAttr.get(dicts), donated


def _attr_name(item) -> str:
    # jaxlib 0.10 iterates an op's attributes as names; NamedAttribute is the documented item.
    return item if isinstance(item, str) else item.name


def _strip_shardy(module: ir.Module, where: str) -> bool:
    """Removes Shardy (`sdy`) sharding annotations, which say nothing on one device; returns
    False, leaving the module as it is, when it is a program for a one-device mesh.

    JAX puts `sdy.sharding_rule` on custom calls and an `sdy.mesh` beside host callbacks even
    for a single device, and sharding constraints that name no mesh axis around typed PRNG
    key values: those say nothing and go too. Any other `sdy` op inside a function body (a
    sharding constraint, a manual computation) means the program is written for a mesh: one
    of a single device (what `jit(f, in_shardings=...)` over such a mesh lowers to) is kept
    as a sharded program; any other is refused.
    """
    meshes: list[ir.Operation] = []
    annotated: list[ir.Operation] = []
    refused: list[str] = []
    no_ops: list[ir.Operation] = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        if op.name.startswith("sdy."):
            if op.name == "sdy.mesh":
                meshes.append(op)
            elif op.name == "sdy.sharding_constraint" and _names_no_axis(op):
                no_ops.append(op)
            else:
                refused.append(op.name)
            return ir.WalkResult.ADVANCE
        if any(_attr_name(a).startswith("sdy.") for a in op.attributes):
            annotated.append(op)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    if refused and _one_device_mesh(meshes):
        return False
    if refused:
        raise ValueError(
            f"{where}: the module shards its computation ({refused[0]}) but is lowered for "
            "one device (mhlo.num_partitions = 1); lower or export it for the mesh's devices, "
            "or remove sharding constraints and shard_map"
        )
    for op in no_ops:
        op.result.replace_all_uses_with(op.operands[0])
        op.erase()
    for op in annotated:
        for key in [n for n in map(_attr_name, op.attributes) if n.startswith("sdy.")]:
            del op.attributes[key]
    for op in meshes:
        op.erase()
    return True


def _names_no_axis(constraint: ir.Operation) -> bool:
    """Whether an `sdy.sharding_constraint` names no mesh axis (every dimension open or
    closed over no axes, nothing replicated or unreduced): it constrains nothing."""
    from jaxlib.mlir.dialects import sdy

    sharding = sdy.TensorShardingAttr(constraint.attributes["sharding"])
    if list(sharding.replicated_axes) or list(sharding.unreduced_axes):
        return False
    return all(not list(sdy.DimensionShardingAttr(d).axes) for d in sharding.dimension_shardings)


def _one_device_mesh(meshes: list[ir.Operation]) -> bool:
    """Whether `meshes` is one `sdy.mesh` of one device (axes of size 1, or none)."""
    from jaxlib.mlir.dialects import sdy

    if len(meshes) != 1:
        return False
    mesh = sdy.MeshAttr(meshes[0].attributes["mesh"])
    return all(sdy.MeshAxisAttr(a).size == 1 for a in mesh.axes)


def parse(data: bytes) -> tuple[ir.Module, _context.LoweringContext]:
    """Parses MLIR `data` that is known to parse (bytecode MLIR itself wrote) into a
    lowering context; its size counts toward retiring the context (constants dominate)."""
    lc = _context.for_lowering()
    with lc:
        module = ir.Module.parse(data)
        lc.add_constant_bytes(len(data))
    return module, lc


def adopt(
    module: ir.Module,
    *,
    name: str,
    where: str,
    shardy: bool = True,
    verify: bool = True,
    sharded: bool = False,
    mesh=None,
    frontend: str = "file",
    specs: tuple | None = None,
) -> Program:
    """Normalizes `module` in place (see the module docstring); ValueError if it cannot run.

    `shardy=False` says the module mentions no Shardy name (the file sandbox found none), so
    the walk that strips its annotations is skipped; `verify=False` that the module was just
    verified (the edits here keep it valid), so the final verification is skipped.
    `sharded=True` keeps the annotations of a module for one partition too (the user asked
    for shardings); `mesh` is the concrete Mesh the module was lowered for, if known.
    A name from a file is escaped for printing (`errors.printable`).

    The Program's signature is `@main`'s, called with positional arrays
    (`Signature.flat`); a front end that knows the pytrees replaces them. `specs` (flat
    argument and result specs, symbolic ones included) stand for `@main`'s types where the
    front end knows more than they say (a jax.export artifact's symbolic shapes): `@main`'s
    types must have their ranks and element types, and their sizes where a spec has one.
    """
    name = printable(name)
    with _context.of(module) as lc:
        main = modules.main_function(module)
        if main is None:
            found = ", ".join("@" + n for n in modules.functions(module)) or "none"
            raise ValueError(
                f"{where}: the module has no @main function (functions: {found}); aotkit "
                "runs a module's @main: name the entry function main"
            )
        replicas = modules.int_attr(module, "mhlo.num_replicas") or 1
        if replicas != 1:
            raise ValueError(
                f"{where}: the module runs as {replicas} replicas (mhlo.num_replicas); aotkit "
                "compiles one replica partitioned over a mesh: lower or export it with "
                "shardings instead of replicas"
            )
        sharded = sharded or (modules.int_attr(module, "mhlo.num_partitions") or 1) > 1
        if shardy and not sharded:
            sharded = not _strip_shardy(module, where)
        layout = spmd.read_layout(where, module) if sharded else None
        module.operation.attributes["sym_name"] = ir.StringAttr.get(modules.symbol_name(name))
        main.attributes["sym_visibility"] = ir.StringAttr.get("public")
        donated: list[bool] = []
        if "arg_attrs" in main.attributes:
            cleaned, donated = _clean_attrs(
                ir.ArrayAttr(main.attributes["arg_attrs"]), sharded, where
            )
            main.attributes["arg_attrs"] = cleaned
        if "res_attrs" in main.attributes:
            cleaned, _ = _clean_attrs(ir.ArrayAttr(main.attributes["res_attrs"]), sharded, where)
            main.attributes["res_attrs"] = cleaned
        try:
            if verify:
                module.operation.verify()
        except ir.MLIRError as e:
            raise ValueError(
                f"{where}: the module does not verify: {modules.diagnostic(e)}; fix the module "
                "or re-export it"
            ) from None
    if specs is None:
        in_specs, out_specs = modules.signature(module, where)
    else:
        in_specs, out_specs = _declared(module, specs, where)
    donated_flags = tuple(donated) if donated else (False,) * len(in_specs)
    partitioning = None
    if sharded:
        partitioning = spmd.from_module(where, layout, in_specs, out_specs, mesh)
    signature = Signature.flat(
        name, in_specs, out_specs, donated=donated_flags, partitioning=partitioning
    )
    return Program(module, lc, signature, frontend)


def _declared(module: ir.Module, specs: tuple, where: str) -> tuple[tuple, tuple]:
    """`specs` (flat in, flat out), checked against `@main`'s types (see `adopt`)."""
    with _context.of(module):
        ftype = modules.function_type(modules.main_function(module))
        for side, types, given in (
            ("argument", ftype.inputs, specs[0]),
            ("result", ftype.results, specs[1]),
        ):
            if len(types) != len(given):
                raise ValueError(
                    f"{where}: @main has {len(types)} {side}s but the artifact declares "
                    f"{len(given)}; the artifact is inconsistent: re-export it"
                )
            for i, (t, spec) in enumerate(zip(types, given)):
                if not _fits(t, spec):
                    raise ValueError(
                        f"{where}: @main's {side} {i} is {t} but the artifact declares {spec}; "
                        "the artifact is inconsistent: re-export it"
                    )
    return tuple(specs[0]), tuple(specs[1])


def _fits(t: ir.Type, spec) -> bool:
    if not isinstance(t, ir.RankedTensorType) or t.rank != len(spec.shape):
        return False
    try:
        if dtypes.dtype_of_ir_type(t.element_type) != spec.dtype:
            return False
    except (TypeError, ValueError):
        return False
    for k, d in enumerate(spec.shape):
        if isinstance(d, int) and (t.is_dynamic_dim(k) or t.get_dim_size(k) != d):
            return False
    return True
