"""Sandbox for untrusted MLIR: parse it in a throwaway process, hand back trusted bytecode.

Not a stage of its own: `aotkit.frontends.files` runs this file as a script (by path, so the
child does not import aotkit and starts in a fraction of a second). Measured on jaxlib 0.10.2:
about one in ten corrupted bytecode files or portable artifacts kills the process that parses
it (SIGABRT from a diagnostic that is not UTF-8, double frees, SIGSEGV). Here that kills only
this child; the parent reads the exit status and turns it into an error.

Protocol: argv = [this file, path of aotkit/_compat.py, format], where format is `text`,
`bytecode` or `portable`; the input comes on stdin. On success the module, verified and in
the StableHLO dialect, goes to stdout as MLIR bytecode (written by MLIR's own writer, which
the parent can parse safely) and the exit status is 0. `EXIT_PARSE` or `EXIT_VERIFY` mean
the input was rejected, with the first diagnostic on stderr; `EXIT_STRINGS` that it holds a
string that is not UTF-8.
"""

from __future__ import annotations

import importlib.util
import os
import sys

EXIT_PARSE = 3
EXIT_VERIFY = 4
EXIT_STRINGS = 5


def _load_compat(path: str):
    spec = importlib.util.spec_from_file_location("_aotkit_probe_compat", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _context(compat):
    # The same recipe as aotkit._context.context(), so what parses here parses there.
    return compat.make_context()


def _is_vhlo(module) -> bool:
    return any(op.operation.name.startswith("vhlo.") for op in module.body.operations)


def _read_strings(ir, attr, into: list[str]) -> None:
    """Reads every string `attr` holds, as aotkit will, so that bad UTF-8 fails here."""
    if isinstance(attr, ir.StringAttr | ir.FlatSymbolRefAttr):
        into.append(attr.value)
    elif isinstance(attr, ir.ArrayAttr):
        for item in attr:
            _read_strings(ir, item, into)
    elif isinstance(attr, ir.DictAttr):
        for named in attr:
            into.append(named.name)
            _read_strings(ir, named.attr, into)


def _read_op_strings(ir, op, into: list[str]) -> None:
    # Recursion rather than Operation.walk: an exception in a walk callback comes back as a
    # generic RuntimeError, and the kind of failure is what tells bad input from a bug here.
    into.append(op.name)
    for key in op.attributes:
        name = key if isinstance(key, str) else key.name
        into.append(name)
        _read_strings(ir, op.attributes[name], into)
    for region in op.regions:
        for block in region.blocks:
            for child in block.operations:
                _read_op_strings(ir, child.operation, into)


def _check_strings(ir, module) -> int:
    """Touches each op name, attribute name and string value, and prints the module.

    Bytecode (and escapes in text) can hold strings that are not UTF-8: a symbol name, a
    custom call target. The bindings turn them into Python strings with an exception at best
    and std::terminate at worst; doing here what aotkit later does with them keeps both in
    this process. Returns how many strings it read.
    """
    strings: list[str] = []
    _read_op_strings(ir, module.operation, strings)
    # Large constants print as hex, with no strings in them; eliding keeps big models quick.
    strings.append(module.operation.get_asm(enable_debug_info=True, large_elements_limit=16))
    return len(strings)


def _is_conversion_error(e: Exception) -> bool:
    return isinstance(e, UnicodeError) or "conversion error" in str(e)


def _fail(status: int, message: str) -> int:
    sys.stderr.buffer.write(message.encode("utf-8", "backslashreplace"))
    return status


def main(argv: list[str]) -> int:
    compat_path, fmt = argv[1], argv[2]
    data = sys.stdin.buffer.read()
    compat = _load_compat(compat_path)
    from jaxlib.mlir import ir
    from jaxlib.mlir.dialects import stablehlo

    ctx = _context(compat)
    with ctx:
        try:
            if fmt == "portable":
                module = stablehlo.deserialize_portable_artifact(ctx, data)
            else:
                module = ir.Module.parse(data.decode("utf-8") if fmt == "text" else data)
                if _is_vhlo(module):
                    module = stablehlo.deserialize_portable_artifact(ctx, data)
        except (ir.MLIRError, ValueError) as e:
            return _fail(EXIT_PARSE, str(e))
        try:
            module.operation.verify()
        except ir.MLIRError as e:
            return _fail(EXIT_VERIFY, str(e))
        try:
            _check_strings(ir, module)
        except (RuntimeError, UnicodeError) as e:
            if not _is_conversion_error(e):
                raise
            return _fail(EXIT_STRINGS, str(e))
        module.operation.write_bytecode(sys.stdout.buffer)
    sys.stdout.buffer.flush()
    return 0


if __name__ == "__main__":
    # Python puts this file's folder first on sys.path, and it holds aotkit's `jax.py`: JAX
    # itself (which _compat may import for a fallback) must not be shadowed by it.
    if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
        del sys.path[0]
    sys.exit(main(sys.argv))
