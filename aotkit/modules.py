"""Reading StableHLO modules: the entry function, its signature, names, donation and
diagnostics.

Shared, downward, by the front ends (tracer, JAX, files), the stages and the backends: what
aotkit needs to know about an `ir.Module` it did not build itself, and the one way an MLIR
diagnostic becomes one line of an error message. The one writer here is `mark_donated`,
which gives `@main`'s donated arguments their aliasing attributes (where donation is read,
it is also written); it runs inside the module's lowering context.
"""

from __future__ import annotations

import io
import re

from jaxlib.mlir import ir
from jaxlib.mlir.dialects import stablehlo

from aotkit import _context, dtypes
from aotkit.specs import ShapeDtype

_LOCATION = re.compile(r'^(?:loc\()?"[^"]*":(\d+):(\d+)\)?:?\s*')
_FILE_LINE = re.compile(r'"([^"]*)":(\d+):(\d+)')
_NAME = re.compile(r'^loc\("([^"]+)"(?!:\d)')


# The unit attribute that makes a `stablehlo.optimization_barrier` stand for
# `stop_gradient`: the value passes unchanged (the barrier is left out of what a backend
# compiles, `without_marks`) and every derivative through it is zero (aotkit's transforms
# read the mark; JAX's own modules lower stop_gradient to nothing, so the JAX front end
# lowers it again with this mark for them).
STOP_GRADIENT = "aotkit.stop_gradient"

# The string attribute of the two `stablehlo.optimization_barrier`s around a function's
# own derivative rule (a `jax.custom_jvp`'s, lowered by the JAX front end for the
# transforms): "begin" takes the n primals and then a zero tangent for each; the rule's ops
# take its results; "end n" takes the same primals, the rule's primal outputs and then
# their tangents. The values pass unchanged. A transform that differentiates (a primal
# has a tangent) takes the tangents of the outputs to be the rule's, computed from the
# primals' tangents (given to the rule in place of the zeros), and none through the
# primals themselves; one that does not keeps the marks.
CUSTOM_JVP = "aotkit.custom_jvp"

# The same for a function's own backward pass (a `jax.custom_vjp`'s): "begin n m" takes the
# n primals, the m outputs and the residuals of the forward function, and a zero cotangent
# per output; the backward function's ops take its results; "end n m" takes the primals,
# the outputs and the backward function's cotangents of the primals. Reverse mode takes the
# cotangents of the primals to be the backward function's of the outputs' cotangents
# (given in place of the zeros); forward mode, which JAX refuses for such a function,
# differentiates the forward function.
CUSTOM_VJP = "aotkit.custom_vjp"

# The integer attribute of a `stablehlo.while` that bounds its trip count, where its maker
# knows a bound the loop's form does not show (a converted `for i in range(n)` with `break`
# runs at most n times): reverse mode stores that many carries, as with `max_trip_count`.
TRIP_BOUND = "aotkit.max_trip_count"


def symbol_name(name: str) -> str:
    """`name` (a Python function name such as `<lambda>`) as a valid MLIR symbol name."""
    cleaned = "".join(c if c.isalnum() or c in "_." else "_" for c in name)
    return cleaned or "fn"


def module_name(module: ir.Module) -> str:
    """The module's `sym_name` (aotkit names modules after the traced function), or "module"."""
    name = sym_name(module)
    return name if name is not None else "module"


def sym_name(module: ir.Module) -> str | None:
    with _context.of(module):
        attrs = module.operation.attributes
        if "sym_name" in attrs:
            return ir.StringAttr(attrs["sym_name"]).value
    return None


def functions(module: ir.Module) -> dict[str, ir.Operation]:
    """The module's top-level `func.func` ops by symbol name (the caller is inside
    `with _context.of(module):`)."""
    found = {}
    for op in module.body.operations:
        if op.operation.name == "func.func" and "sym_name" in op.attributes:
            found[ir.StringAttr(op.attributes["sym_name"]).value] = op
    return found


def int_attr(module: ir.Module, key: str) -> int | None:
    """An integer attribute of the module (`mhlo.num_partitions`, ...), or None."""
    attrs = module.operation.attributes
    return ir.IntegerAttr(attrs[key]).value if key in attrs else None


def main_function(module: ir.Module):
    """The `@main` func.func of `module`, or None (caller is inside `with _context.of(module):`)."""
    return functions(module).get("main")


def function_type(func_op) -> ir.FunctionType:
    return ir.FunctionType(ir.TypeAttr(func_op.attributes["function_type"]).value)


def signature(module: ir.Module, where: str) -> tuple[tuple[ShapeDtype, ...], tuple]:
    """The flat argument and result specs of `@main`; TypeError for types aotkit cannot carry."""
    with _context.of(module):
        main = main_function(module)
        if main is None:
            raise ValueError(f"{where}: module has no @main function; lower with aotkit.lower")
        ftype = function_type(main)
        return (
            tuple(spec_of_type(t, where) for t in ftype.inputs),
            tuple(spec_of_type(t, where) for t in ftype.results),
        )


def insert_unused_arguments(module: ir.Module, types: dict[int, ir.Type]) -> None:
    """Gives `@main` (in place) an unused argument of type `types[i]` at each position `i`
    of the new argument list (the others keep their order, uses and attributes). The caller
    is inside `with _context.of(module):`."""
    main = main_function(module)
    block = main.regions[0].blocks[0]
    old = list(block.arguments)
    n = len(old) + len(types)
    rest = iter(old)
    fresh, kept_at = [], []
    for i in range(n):
        if i in types:
            fresh.append(block.add_argument(types[i], ir.Location.unknown()))
        else:
            arg = next(rest)
            fresh.append(block.add_argument(arg.type, arg.location))
            arg.replace_all_uses_with(fresh[-1])
            kept_at.append(i)
    for _ in old:
        block.erase_argument(0)
    results = function_type(main).results
    main.attributes["function_type"] = ir.TypeAttr.get(
        ir.FunctionType.get([a.type for a in fresh], results)
    )
    if "arg_attrs" in main.attributes:
        given = dict(zip(kept_at, ir.ArrayAttr(main.attributes["arg_attrs"]), strict=True))
        empty = ir.DictAttr.get({})
        main.attributes["arg_attrs"] = ir.ArrayAttr.get([given.get(i, empty) for i in range(n)])


def erase_unused_arguments(module: ir.Module, positions) -> None:
    """Takes the arguments of `@main` at `positions` (unused ones) out of it, in place. The
    caller is inside `with _context.of(module):`."""
    main = main_function(module)
    block = main.regions[0].blocks[0]
    drop = set(positions)
    for i in sorted(drop):
        if list(block.arguments[i].uses):
            raise ValueError(f"@main's argument {i} is used: it cannot be erased")
    for i in sorted(drop, reverse=True):
        block.erase_argument(i)
    ftype = function_type(main)
    inputs = [t for i, t in enumerate(ftype.inputs) if i not in drop]
    main.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(inputs, ftype.results))
    if "arg_attrs" in main.attributes:
        attrs = list(ir.ArrayAttr(main.attributes["arg_attrs"]))
        main.attributes["arg_attrs"] = ir.ArrayAttr.get(
            [a for i, a in enumerate(attrs) if i not in drop]
        )


# What marks an argument of `@main` as donated: `tf.aliasing_output = k` pairs it with
# result k, `jax.buffer_donor` leaves the pairing to XLA.
DONATION_ATTRS = ("tf.aliasing_output", "jax.buffer_donor")


def donates(module: ir.Module) -> bool:
    """Whether `@main` donates any argument.

    Names only: `NamedAttribute.attr` of a complex dense value (a file may hold one) ends
    the process in jaxlib 0.10.2, so no value is read.
    """
    with _context.of(module):
        main = main_function(module)
        if main is None or "arg_attrs" not in main.attributes:
            return False
        return any(
            a.name in DONATION_ATTRS
            for d in ir.ArrayAttr(main.attributes["arg_attrs"])
            for a in ir.DictAttr(d)
        )


def mark_donated(
    module, flags: tuple[bool, ...], in_specs, name: str
) -> tuple[tuple[bool, ...], list[int]]:
    """Gives each donated argument of `@main` its aliasing attribute; returns the donated
    flags of the module (attributes a front end already wrote count too) and the arguments
    it could pair with no result.

    A donated argument without one gets `tf.aliasing_output = k` for the first result of its
    spec no other argument aliases (XLA then writes that result into the argument's
    buffer), or `jax.buffer_donor = true` when no result matches: XLA reuses a donated
    buffer only for a result of its shape and dtype, so such a donation is unusable. The
    caller is inside `with lc:` for the module's context.
    """
    main = main_function(module)
    unusable: list[int] = []
    if "arg_attrs" not in main.attributes:
        if not any(flags):
            return flags, unusable  # the common case: nothing donated, by the caller or module
        old = []
    else:
        old = list(ir.ArrayAttr(main.attributes["arg_attrs"]))
    # Names first: the values are read (by name) only when an attribute is added, since
    # `NamedAttribute.attr` of a complex dense value (a file may hold one) ends the process.
    names = [
        [a.name for a in ir.DictAttr(old[i])] if i < len(old) else [] for i in range(len(in_specs))
    ]
    present = [any(k in n for k in DONATION_ATTRS) for n in names]
    wanted = [f and not p for f, p in zip(flags, present, strict=True)]
    if any(wanted):
        entries = [{k: ir.DictAttr(old[i])[k] for k in n} for i, n in enumerate(names)]
        out_specs = signature(module, f"module {name!r}")[1]
        claimed = {
            ir.IntegerAttr(e["tf.aliasing_output"]).value
            for e in entries
            if "tf.aliasing_output" in e
        }
        for i, spec in enumerate(in_specs):
            if not wanted[i]:
                continue
            match = next(
                (j for j, out in enumerate(out_specs) if out == spec and j not in claimed), None
            )
            if match is None:
                entries[i]["jax.buffer_donor"] = ir.BoolAttr.get(True)
                unusable.append(i)
            else:
                claimed.add(match)
                entries[i]["tf.aliasing_output"] = ir.IntegerAttr.get(
                    ir.IntegerType.get_signless(32), match
                )
        main.attributes["arg_attrs"] = ir.ArrayAttr.get([ir.DictAttr.get(e) for e in entries])
    return tuple(f or p for f, p in zip(flags, present, strict=True)), unusable


def spec_of_type(t: ir.Type, where: str) -> ShapeDtype:
    """The ShapeDtype of a tensor type; TypeError for what aotkit cannot carry."""
    if not isinstance(t, ir.RankedTensorType):
        raise TypeError(f"{where}: @main has a non-tensor argument or result {t}; only tensors")
    if not t.has_static_shape:
        raise TypeError(f"{where}: @main has dynamic shape {t}; only static shapes compile")
    try:
        return ShapeDtype(tuple(t.shape), dtypes.dtype_of_ir_type(t.element_type))
    except (TypeError, ValueError) as e:
        raise TypeError(f"{where}: @main has type {t}: {e}") from None


def op_location(op: ir.Operation) -> str:
    """` at FILE:LINE` (` at line L, column C` for text without a file name), ` ("NAME")`
    for a named location without a file (what JAX writes), or ''."""
    text = str(op.location)
    m = _FILE_LINE.search(text)
    if m is None or int(m.group(2)) == 0:
        named = _NAME.match(text)
        return f' ("{named.group(1)}")' if named else ""
    filename, line, column = m.group(1), m.group(2), m.group(3)
    if filename in ("", "-"):
        return f" at line {line}, column {column}"
    return f" at {filename}:{line}"


def bytecode(module: ir.Module) -> bytes:
    """The module as MLIR bytecode (what PJRT compiles, and what survives its context)."""
    buffer = io.BytesIO()
    with _context.of(module):
        module.operation.write_bytecode(buffer)
    return buffer.getvalue()


_VERSION = re.compile(r"^\d+\.\d+\.\d+$")


def portable_version(text: str | None, what: str = "target version") -> str:
    """A StableHLO version this jaxlib can write: MAJOR.MINOR.PATCH, 'current' (None) or
    'minimum'; ValueError naming the range (and `what` was given) otherwise."""
    current, minimum = stablehlo.get_current_version(), stablehlo.get_minimum_version()
    if text is None or text == "current":
        return current
    if text == "minimum":
        return minimum

    def key(v: str) -> tuple[int, ...]:
        return tuple(int(x) for x in v.split("."))

    if (
        not isinstance(text, str)
        or not _VERSION.match(text)
        or not (key(minimum) <= key(text) <= key(current))
    ):
        raise ValueError(
            f"{what} {text!r} is not a StableHLO version this jaxlib can write; "
            f"give MAJOR.MINOR.PATCH from {minimum} to {current} (or 'current', 'minimum')"
        )
    return text


def without_marks(module: ir.Module) -> ir.Module:
    """`module`, or a copy of it without the barriers that only carry marks for the
    transforms (`STOP_GRADIENT`, `CUSTOM_JVP`, `CUSTOM_VJP`: each use of one reads its
    operand), which VHLO has no place for and XLA would only see as barriers."""
    marked: list[ir.Operation] = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        if op.name == "stablehlo.optimization_barrier" and any(
            mark in op.attributes for mark in (STOP_GRADIENT, CUSTOM_JVP, CUSTOM_VJP)
        ):
            marked.append(op)
        return ir.WalkResult.ADVANCE

    with _context.of(module):
        module.operation.walk(visit)
        if not marked:
            return module
        module = ir.Module.parse(bytecode(module), context=module.context)
        marked.clear()
        module.operation.walk(visit)
        for op in marked:
            for result, operand in zip(op.results, op.operands, strict=True):
                result.replace_all_uses_with(operand)
            op.erase()
    return module


def portable_artifact(module: ir.Module, target_version: str | None = None) -> bytes:
    """The module as a StableHLO portable artifact (versioned VHLO bytecode) for
    `target_version` (see `portable_version`); ValueError with StableHLO's reason if the
    module cannot be written (CHLO left in it, say). The barriers that carry marks for the
    transforms are left out (the values are the same; the marks have no VHLO form)."""
    from jaxlib.mlir.dialects import stablehlo

    target = portable_version(target_version)
    module = without_marks(module)
    found: list[str] = []

    def handler(d) -> bool:
        found.append(d.message)
        return True

    with _context.of(module):
        handle = module.context.attach_diagnostic_handler(handler)
        try:
            return stablehlo.serialize_portable_artifact(module, target)
        except ValueError:
            raise ValueError(
                f"StableHLO cannot write module {module_name(module)!r} for version {target}: "
                f"{found[0] if found else 'unknown reason'}; lower with the default pipeline "
                "(it legalizes CHLO)"
            ) from None
        finally:
            handle.detach()


def diagnostic(error) -> str:
    """The first error of an MLIR failure as one line, its location as `line L, column C`.

    `error` is an `ir.MLIRError` (its first attached diagnostic), the text MLIR printed (its
    first `error:` line), or any exception (its first non-empty line).
    """
    found = getattr(error, "error_diagnostics", None)
    if found:
        d = found[0]
        line = d.message
        loc = str(d.location)
        m = _LOCATION.match(loc + " ")
        if m is not None and int(m.group(1)) > 0:
            line = f"line {m.group(1)}, column {m.group(2)}: {line}"
        return _clean(line)
    text = str(error)
    line = first_error_line(text)
    m = _LOCATION.match(line)
    if m is not None:
        row, col = int(m.group(1)), int(m.group(2))
        rest = line[m.end() :]
        line = rest if row == 0 else f"line {row}, column {col}: {rest}"
    return _clean(line)


def first_error_line(text: str) -> str:
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("error:"):
            return line[len("error:") :].strip()
        if ": error: " in line:
            return line.split(": error: ", 1)[1].strip()
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[0] if lines else text.strip()


# How much of a diagnostic an error message quotes: MLIR quotes the input it could not read,
# and one line of a bad file can be megabytes long.
MAX_DIAGNOSTIC = 400


def _clean(line: str) -> str:
    line = line.split(" If this is intended, please call allowUnregisteredDialects()")[0]
    line = line.strip().rstrip(".")
    if len(line) > MAX_DIAGNOSTIC:
        line = f"{line[:MAX_DIAGNOSTIC]}... ({len(line) - MAX_DIAGNOSTIC} more characters)"
    return line


# A comparison direction with its operands swapped.
FLIPPED = {"GE": "LE", "GT": "LT", "LE": "GE", "LT": "GT"}


def compare_direction(cmp, a, b) -> str | None:
    """The direction of `cmp` as `a <direction> b`, for a compare of the block arguments
    a and b (either order)."""
    if cmp.name != "stablehlo.compare":
        return None
    x, y = cmp.operands
    found = str(stablehlo.ComparisonDirectionAttr(cmp.attributes["comparison_direction"]).value)
    if found not in FLIPPED:
        return None
    if x == a and y == b:
        return found
    if x == b and y == a:
        return FLIPPED[found]
    return None


def select_direction(op) -> str | None:
    """The direction of a select_and_scatter's select region `(a, b) -> a <dir> b`."""
    block = op.operation.regions[0].blocks[0]
    ops = list(block.operations)
    if len(ops) != 2 or ops[1].operation.operands[0] != ops[0].operation.results[0]:
        return None
    a, b = block.arguments
    return compare_direction(ops[0].operation, a, b)
