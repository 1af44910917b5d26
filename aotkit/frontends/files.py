"""The file front end: a StableHLO module on disk (or in memory) as a `Program`.

`read_module(path_or_bytes)` (what `aotkit.load_module` lowers with the pipeline "none")
accepts StableHLO MLIR text, MLIR bytecode, StableHLO portable
artifacts (versioned bytecode of the `vhlo` dialect) and `jax.export` artifacts
(`Exported.serialize()` output, a flatbuffer). The format is read from the bytes, never from
the file name.

What it promises: the input signature is `@main`'s (for `jax.export` artifacts, the exported
function's argument and result pytrees); a module partitioned over several devices keeps its
shardings (compiling places its mesh on the backend's first devices); bad input raises
ValueError (or FileNotFoundError) naming the file and the formats accepted, and never
aborts the process: every MLIR input is parsed first in a sandbox worker process
(aotkit/frontends/sandbox.py, one reusable worker per process), because jaxlib's bytecode
reader can crash on corrupt input. An aotkit artifact (`.aotx`)
is the exception: its checksums prove it is the bytes aotkit wrote, so its portable
StableHLO is parsed here once they match.
"""

from __future__ import annotations

import re
from pathlib import Path

from jaxlib.mlir import ir
from jaxlib.mlir.dialects import func, stablehlo

from aotkit import _compat, _files, artifacts, backends, dtypes, modules
from aotkit.frontends import _module, _probe, sandbox, trust
from aotkit.program import Program
from aotkit.specs import ShapeDtype
from aotkit.symbolic import algebra

FORMATS = (
    "StableHLO MLIR text, MLIR bytecode, a StableHLO portable artifact or a jax.export "
    "artifact (Exported.serialize() output)"
)
BYTECODE_MAGIC = b"ML\xefR"

# Files people pass by mistake, recognized by their first bytes, so the error can say
# what the file is rather than only what it is not.
_OTHER_KINDS = (
    (b"\x93NUMPY", "a NumPy .npy array"),
    (b"PK\x03\x04", "a zip archive (an .npz file?)"),
    (b"\x7fELF", "an ELF binary (a shared library or an executable)"),
    (b"\x89HDF", "an HDF5 file"),
    (b"HloModule", "XLA HLO text, not StableHLO"),
)
_PICKLE_PROTOCOLS = (b"\x80\x02", b"\x80\x03", b"\x80\x04", b"\x80\x05")
_OP_DIAGNOSTIC = re.compile(r"'[\w.]+' op ")


def read_module(source, *, name: str | None = None, platform: str | None = None) -> Program:
    """Reads a StableHLO module (text, bytecode, portable artifact, jax.export artifact).

    `source` is a path (str or os.PathLike) or the file's bytes. `name` overrides the module
    name (default: the exported function's name, the module's own `sym_name`, or the file
    stem). The `Program`'s signature is `@main`'s (a jax.export artifact's pytrees).
    `platform` picks the lowering of a jax.export artifact exported for several platforms
    (default: the default backend's platform).
    """
    data, label = _read(source)
    if data.startswith(artifacts.MAGIC):
        return _from_artifact(data, label, name)
    kind = sniff(data, label)
    if kind == "jax.export":
        return _from_exported(data, label, name, platform)
    where = f"load_module: {label}"

    def adopt(module, lc, shardy):
        default = modules.sym_name(module) or (Path(label).stem if label != "<bytes>" else "module")
        # The sandbox verified the module, and adopting it keeps it valid.
        adopted = _module.adopt(
            module, name=name or default, where=where, shardy=shardy, verify=False
        )
        trust.check(adopted.module, where)
        return adopted

    # Positional arrays in, one array (or a tuple of them) out: `Signature.flat`.
    return parse_untrusted(data, kind, label, then=adopt)


def _from_artifact(data: bytes, label: str, name: str | None) -> Program:
    """An aotkit artifact's module and pytrees, parsed in this process once its checksums
    and header check out (it is then the bytes aotkit wrote)."""
    artifact = artifacts.unpack(data, label, where="load_module")
    where = f"load_module: {label}"
    module, _ = artifacts.parse_portable(artifact, where)
    signature = artifact.signature
    adopted = _module.adopt(
        module,
        name=name or artifact.name,
        where=where,
        shardy=False,
        # A symbolic program's @main has dynamic types; its header has the symbols.
        specs=(signature.flat_in_specs, signature.flat_out_specs) if artifact.shapes else None,
    )
    return _with_trees(adopted, artifact.signature.in_tree, artifact.signature.out_tree)


def _with_trees(adopted: Program, in_tree, out_tree) -> Program:
    signature = adopted.signature.replace(in_tree=in_tree, out_tree=out_tree)
    return adopted.replace(signature=signature)


def _read(source) -> tuple[bytes, str]:
    return _files.read_source(
        source,
        where="load_module",
        what="the file's path",
        fix=f"pass a file holding {FORMATS}",
        text="; a str is a path: pass the module's text as bytes (load_module(text.encode())) "
        "or the path of a file holding it",
        text_fix="pass it as bytes (load_module(text.encode()))",
        not_found=f"pass the path of a file holding {FORMATS}, or its contents as bytes",
        check=lambda f, label: artifacts.check_length(f, label, "load_module"),
    )


def sniff(data: bytes, label: str = "<bytes>") -> str:
    """The format of `data`: `text`, `bytecode`, `portable` or `jax.export`; else ValueError."""
    where = f"load_module: {label}"
    if not data:
        raise ValueError(f"{where} is empty; expected {FORMATS}")
    if data.startswith(BYTECODE_MAGIC):
        producer = bytecode_producer(data)
        return (
            "portable" if producer is not None and producer.startswith("StableHLO_") else "bytecode"
        )
    if label.endswith(".py"):
        raise ValueError(
            f"{where} is Python source, not a module; lower a function from it with "
            "aotkit.lower(fn, ...) or `aotkit lower FILE.py:FN`"
        )
    for magic, what in _OTHER_KINDS:
        if data.startswith(magic):
            raise ValueError(f"{where} is {what}; expected {FORMATS}")
    if data[:2] in _PICKLE_PROTOCOLS:
        raise ValueError(f"{where} is a Python pickle; expected {FORMATS}")
    text = _as_text(data)
    if text is not None:
        return "text"
    if _looks_like_flatbuffer(data):
        return "jax.export"
    raise ValueError(
        f"{where} is binary data of no known kind (starts with {data[:8]!r}); expected {FORMATS}"
    )


def bytecode_producer(data: bytes) -> str | None:
    """The producer string of MLIR bytecode (`StableHLO_v1.15.0` for portable artifacts)."""
    pos = len(BYTECODE_MAGIC)
    # The version is a prefix varint: the count of trailing zero bits of the first byte
    # says how many more bytes follow.
    if pos >= len(data):
        return None
    first = data[pos]
    extra = (first & -first).bit_length() - 1 if first else 8
    pos += 1 + extra
    end = data.find(b"\x00", pos)
    if end < 0:
        return None
    try:
        return data[pos:end].decode("ascii")
    except UnicodeDecodeError:
        return None


def _as_text(data: bytes) -> str | None:
    if b"\x00" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _looks_like_flatbuffer(data: bytes) -> bool:
    """Whether `data` has a flatbuffer's root table and vtable where they must be."""
    n = len(data)
    if n < 12:
        return False
    root = int.from_bytes(data[0:4], "little")
    if root < 4 or root > n - 4 or root % 4:
        return False
    vtable = root - int.from_bytes(data[root : root + 4], "little", signed=True)
    if vtable < 4 or vtable > n - 4:
        return False
    vt_size = int.from_bytes(data[vtable : vtable + 2], "little")
    return vt_size >= 4 and vt_size % 2 == 0 and vtable + vt_size <= n


def parse_untrusted(data: bytes, kind: str, label: str, then=None):
    """Parses MLIR `data` of `kind` into a lowering context, after a sandboxed parse succeeds.

    Returns `then(module, lc, shardy)` (default: that tuple; `shardy`: whether the module
    mentions Shardy). The module is parsed here while the sandbox reads its strings, and
    `then` runs while the sandbox prints it; what it returns is given back only once that
    print succeeded too, so `then` must not print the module itself.
    """
    where = f"load_module: {label}"
    valid, corrupt = {
        "text": ("valid MLIR text", "corrupt MLIR text"),
        "bytecode": ("valid MLIR bytecode", "corrupt MLIR bytecode"),
        "portable": (
            "a valid StableHLO portable artifact",
            "a corrupt StableHLO portable artifact",
        ),
    }[kind]
    try:
        with sandbox.session(kind, data) as (status, payload, later):
            if status == 0:
                module, lc = _module.parse(payload)  # while the sandbox reads its strings
                status, payload = later()
            if status == 0:
                shardy = bool(payload[0] & _probe.FLAG_SHARDY)
                try:  # while the sandbox prints it
                    result = (module, lc, shardy) if then is None else then(module, lc, shardy)
                except BaseException:
                    # A file that does not print is corrupt: say that rather than what the
                    # checks found first.
                    status, payload = later()
                    if status == 0:
                        raise
                else:
                    status, payload = later()
                    if status == 0:
                        return result
    except sandbox.Timeout:
        raise ValueError(
            f"{where}: parsing took longer than {sandbox.PROBE_TIMEOUT_S:g} s; check the file"
        ) from None
    except sandbox.WorkerDied as died:
        last = sandbox.last_line(died.message)
        if died.returncode > 0 and last.startswith("MemoryError"):
            # A corrupt size field can make MLIR's reader ask for more memory than exists.
            raise ValueError(
                f"{where} is {corrupt}: MLIR's reader ran out of memory ({last}) while "
                "reading it (in a sandbox process); re-export the file"
            ) from None
        if died.returncode > 0 and "Traceback (most recent call last)" in died.message:
            raise RuntimeError(
                f"{where}: aotkit's MLIR sandbox process failed ({last}); please report this"
            ) from None
        raise ValueError(
            f"{where} is {corrupt}: {sandbox.crash(died.returncode, died.message)} while reading "
            "it (in a sandbox process); re-export the file"
        ) from None
    message = payload.decode("utf-8", "backslashreplace")
    # MLIR verifies while it parses: an op verifier's complaint is not a syntax error.
    first = modules.first_error_line(message)
    quant = dtypes.quant_refusal(modules.diagnostic(message))
    if status == _probe.EXIT_PARSE and quant is not None:
        raise ValueError(f"{where}: {quant}")
    if status == _probe.EXIT_PARSE and not _OP_DIAGNOSTIC.search(first):
        raise ValueError(
            f"{where} is not {valid}: {modules.diagnostic(message)}; expected {FORMATS}"
        )
    if status in (_probe.EXIT_PARSE, _probe.EXIT_VERIFY):
        raise ValueError(
            f"{where}: the module does not verify: {modules.diagnostic(message)}; fix the "
            "module or re-export it"
        )
    assert status == _probe.EXIT_STRINGS, status
    raise ValueError(
        f"{where} is {corrupt}: it holds a name or string attribute that is not UTF-8; "
        "re-export the file"
    )


# --- jax.export artifacts ------------------------------------------------------------------


def _from_exported(data: bytes, label: str, name: str | None, platform: str | None) -> Program:
    where = f"load_module: {label}"
    exported = _deserialize(data, where)
    _check_exported(exported, where)
    index = _platform_index(exported, platform, where)
    module, lc, _ = parse_untrusted(
        bytes(exported.mlir_module_serialized), "portable", f"{label} (its embedded module)"
    )
    symbolic = not all(_static(a.shape) for a in (*exported.in_avals, *exported.out_avals))
    if symbolic:
        stated = _assertion_constraints(module, lc)
        expected_in, expected_out = _symbolic_specs(exported, where, stated)
    else:
        expected_in = tuple(_aval_spec(a) for a in exported.in_avals)
        expected_out = tuple(_aval_spec(a) for a in exported.out_avals)
    kept = tuple(exported.module_kept_var_idx)
    if len(kept) != len(exported.in_avals) or index is not None:
        restore_unused_arguments(module, lc, expected_in, kept, platform_index=index)
    adopted = _module.adopt(
        module,
        name=name or exported.fun_name,
        where=where,
        specs=(expected_in, expected_out) if symbolic else None,
    )
    trust.check(adopted.module, where)
    if (
        adopted.signature.flat_in_specs != expected_in
        or adopted.signature.flat_out_specs != expected_out
    ):
        raise ValueError(
            f"{where}: the exported module's @main takes "
            f"({', '.join(map(str, adopted.signature.flat_in_specs))}) -> "
            f"({', '.join(map(str, adopted.signature.flat_out_specs))}) but the artifact declares "
            f"({', '.join(map(str, expected_in))}) -> ({', '.join(map(str, expected_out))}); "
            "the artifact is inconsistent: re-export it"
        )
    return _with_trees(adopted, exported.in_tree, exported.out_tree)


def _deserialize(data: bytes, where: str):
    from jax import export as jax_export

    try:
        return jax_export.deserialize(bytearray(data))
    except ImportError as e:
        raise ImportError(
            f"{where} is a jax.export artifact; reading one needs the flatbuffers package "
            f"({e}); install it with: pip install flatbuffers"
        ) from None
    except Exception as e:  # flatbuffers raises whatever a bad offset leads to
        raise ValueError(
            f"{where} looks like a flatbuffer but JAX cannot read it as a jax.export artifact "
            f"({type(e).__name__}: {e}); expected {FORMATS}"
        ) from None


def _check_exported(exported, where: str) -> None:
    from jax import export as jax_export

    version = exported.calling_convention_version
    low = jax_export.minimum_supported_calling_convention_version
    high = jax_export.maximum_supported_calling_convention_version
    if not low <= version <= high:
        import jax

        raise ValueError(
            f"{where} uses jax.export calling convention version {version}; this JAX "
            f"({jax.__version__}) reads versions {low} to {high}: re-export it with a JAX "
            "whose versions include it"
        )
    effects = (*exported.ordered_effects, *exported.unordered_effects)
    if effects:
        raise ValueError(
            f"{where} was exported with effects ({', '.join(map(str, effects))}); aotkit runs "
            "pure functions: export a function without callbacks or effects"
        )


def _platform_index(exported, platform: str | None, where: str) -> int | None:
    """The index of the lowering to run in an artifact exported for several platforms (its
    `@main` then takes that index first), or None for one exported for one platform."""
    platforms = tuple(exported.platforms)
    asked = platform
    if platform is None:
        platform = backends.get(None).platform
    if platform not in platforms:
        how = (
            f"platform={asked!r} was asked"
            if asked is not None
            else (f"the default backend runs {platform!r}")
        )
        raise ValueError(
            f"{where} was exported for {', '.join(map(repr, platforms))}, and {how}; pass "
            f"load_module(..., platform=...) one of those, or export for {platform!r} too: "
            f"jax.export.export(fn, platforms=[..., {platform!r}])"
        )
    return platforms.index(platform) if len(platforms) > 1 else None


def _static(shape) -> bool:
    return all(isinstance(d, int) for d in shape)


# How jax.export words the shape assertion of a constraint given at export
# (`symbolic_shape(..., constraints=...)`), which its serialization does not keep otherwise.
_JAX_CONSTRAINT = re.compile(r"do not match the symbolic shape constraint (.{1,200}?)\. Expected ")


def _assertion_constraints(module: ir.Module, lc) -> list[str]:
    """The constraints a jax.export module asserts, read from its `shape_assertion`
    messages: text, parsed later by aotkit/symbolic/algebra.py's bounded parser (one that does not
    parse is left to the assertion itself, which still runs when the program is
    specialized)."""
    found: list[str] = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        if op.name == "stablehlo.custom_call" and "error_message" in op.attributes:
            target = ir.StringAttr(op.attributes["call_target_name"]).value
            message = op.attributes["error_message"]
            if target == trust.SHAPE_ASSERTION and isinstance(message, ir.StringAttr):
                m = _JAX_CONSTRAINT.search(message.value)
                if m is not None and m.group(1) not in found:
                    found.append(m.group(1))
        return ir.WalkResult.ADVANCE

    with lc:
        main = modules.main_function(module)
        if main is not None:
            main.operation.walk(visit)
    kept = []
    for text in found:
        try:
            algebra.SymbolicScope((text,))
        except (TypeError, ValueError):
            continue
        kept.append(text)
    return kept


def _symbolic_specs(exported, where: str, stated=()) -> tuple[tuple, tuple]:
    """The flat specs of an artifact exported with symbolic shapes (`f32[b,784]`): each
    dimension read from its text (by aotkit/symbolic/algebra.py's bounded parser: data, never code)
    into one scope with the constraints given at export (`stated`: read from the module's
    assertions where the artifact's scope lost them) and `s >= 1` for each symbol, which
    jax.export assumes of every dimension variable (its module asserts these again when the
    program is specialized)."""
    avals = (*exported.in_avals, *exported.out_avals)
    texts: list[str] = []
    symbols: list[str] = []
    for aval in avals:
        for d in aval.shape:
            if isinstance(d, int):
                continue
            if not texts:
                texts.extend(_compat.symbolic_constraints(d) or stated)
            try:
                dim = algebra.parse_dim(str(d))
            except (TypeError, ValueError) as e:
                raise ValueError(
                    f"{where}: {aval} has a dimension aotkit cannot read ({e}); export with "
                    "dimensions written with + - * floordiv mod max min"
                ) from None
            if isinstance(dim, algebra.Dim):
                symbols.extend(s for s in sorted(dim.symbols()) if s not in symbols)
    try:
        scope = algebra.SymbolicScope((*texts, *(f"{s} >= 1" for s in symbols)))
    except (TypeError, ValueError) as e:
        raise ValueError(
            f"{where}: its symbolic constraints are not ones aotkit reads ({e}); export with "
            "constraints written with + - * // % and comparisons"
        ) from None

    def spec(aval):
        return ShapeDtype(
            tuple(d if isinstance(d, int) else scope.dim(str(d)) for d in aval.shape), aval.dtype
        )

    return tuple(map(spec, exported.in_avals)), tuple(map(spec, exported.out_avals))


def _tensor_type(spec) -> ir.RankedTensorType:
    """`tensor<?x784xf32>` for a symbolic spec, as `dtypes.tensor_type` for a static one."""
    dims = [d if isinstance(d, int) else ir.ShapedType.get_dynamic_size() for d in spec.shape]
    return ir.RankedTensorType.get(dims, dtypes.ir_element_type(spec.dtype))


def _aval_spec(aval):
    return ShapeDtype(tuple(aval.shape), aval.dtype)


def restore_unused_arguments(
    module: ir.Module, lc, in_specs, kept: tuple[int, ...], *, platform_index: int | None = None
) -> None:
    """Gives `@main` back the arguments JAX pruned as unused, so it takes every leaf.

    `jax.jit` and `jax.export` drop unused arguments from the module (`kept` lists the
    arguments that remain); aotkit's calling convention is one `@main` argument per input
    leaf. The body becomes a private function that the new `@main` calls with the kept
    arguments, after `platform_index` (a constant) for a module exported for several
    platforms, whose `@main` takes the index of the platform's lowering first.
    """
    with lc, ir.Location.unknown():
        old = modules.main_function(module)
        old_type = modules.function_type(old)
        inner = "main_kept_arguments"
        old.attributes["sym_name"] = ir.StringAttr.get(inner)
        old.attributes["sym_visibility"] = ir.StringAttr.get("private")
        types = [_tensor_type(s) for s in in_specs]
        with ir.InsertionPoint(module.body):
            main = func.FuncOp("main", ir.FunctionType.get(types, old_type.results))
        main.attributes["sym_visibility"] = ir.StringAttr.get("public")
        block = main.add_entry_block()
        with ir.InsertionPoint(block):
            operands = [block.arguments[i] for i in kept]
            if platform_index is not None:
                index_type = old_type.inputs[0]
                value = ir.IntegerAttr.get(
                    ir.RankedTensorType(index_type).element_type, platform_index
                )
                index = stablehlo.ConstantOp(ir.DenseElementsAttr.get_splat(index_type, value))
                operands.insert(0, index.result)
            call = func.CallOp(old_type.results, inner, operands)
            func.ReturnOp(call.results)
        # Donation and result names only mean something on the entry function.
        empty = ir.DictAttr.get({})
        if "arg_attrs" in old.attributes:
            old_attrs = list(ir.ArrayAttr(old.attributes["arg_attrs"]))
            new_attrs = [empty] * len(in_specs)
            first = 0 if platform_index is None else 1  # the platform index's own attributes
            for position, index in enumerate(kept, first):
                new_attrs[index] = old_attrs[position]
            main.attributes["arg_attrs"] = ir.ArrayAttr.get(new_attrs)
            del old.attributes["arg_attrs"]
        if "res_attrs" in old.attributes:
            main.attributes["res_attrs"] = old.attributes["res_attrs"]
            del old.attributes["res_attrs"]
