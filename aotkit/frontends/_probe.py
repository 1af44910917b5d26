"""Sandbox for untrusted MLIR: parse it in a worker process, hand back trusted bytecode.

Not a stage of its own: `aotkit.frontends.files` runs this file as a script (by path, so the
worker does not import aotkit and starts in a fraction of a second), once per aotkit process,
and sends it one file after another. Measured on jaxlib 0.10.2: about one in ten corrupted
bytecode files or portable artifacts kills the process that parses it (SIGABRT from a
diagnostic that is not UTF-8, double frees, SIGSEGV). Here that kills only this worker; the
parent reads its exit status, turns it into an error, and starts a new worker for the next
file.

Protocol: argv = [this file, path of aotkit/_compat.py]. Each request on stdin is one byte
of format (`t` text, `b` bytecode, `p` portable artifact), the input's length as a
little-endian u64, then the input; end of input ends the worker (exit status 0). Each
response is one status byte, the payload's length as a little-endian u64, then the payload,
written to the file descriptor that was stdout (stdout itself is pointed at stderr, so that
nothing the C++ libraries print can corrupt the stream). Status 0: the module, verified and
in the StableHLO dialect, as one byte of flags (`FLAG_SHARDY`: it mentions Shardy) and MLIR
bytecode (written by MLIR's own writer, which the parent can parse safely). `EXIT_PARSE` or
`EXIT_VERIFY`: the input was rejected, the payload is the first diagnostic; `EXIT_STRINGS`:
it holds a string that is not UTF-8. A crash or a Python exception ends the worker with its
message on stderr.
"""

from __future__ import annotations

import importlib.util
import os
import struct
import sys

EXIT_PARSE = 3
EXIT_VERIFY = 4
EXIT_STRINGS = 5
FORMAT_CODES = {"text": b"t", "bytecode": b"b", "portable": b"p"}
# Bits of the byte in front of a parsed module's bytecode.
FLAG_SHARDY = 1
FRAME = struct.Struct("<cQ")


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


def _item(container, key):
    """`container[key]`, or None for an attribute the bindings cannot hand to Python.

    jaxlib 0.10.2 raises TypeError ("Can't cast unknown element type") for a dense elements
    attribute of complex numbers, the value of every complex constant: it holds no strings.
    (`NamedAttribute.attr` of such a value ends the process instead, so it is never used.)
    """
    try:
        return container[key]
    except TypeError as e:
        if "Can't cast unknown element type" not in str(e):
            raise
        return None


def _read_strings(ir, attr, into: list[str]) -> None:
    """Reads every string `attr` holds, as aotkit will, so that bad UTF-8 fails here."""
    if isinstance(attr, ir.StringAttr | ir.FlatSymbolRefAttr):
        into.append(attr.value)
    elif isinstance(attr, ir.ArrayAttr):
        for i in range(len(attr)):
            _read_strings(ir, _item(attr, i), into)
    elif isinstance(attr, ir.DictAttr):
        for named in attr:
            into.append(named.name)
            _read_strings(ir, _item(attr, named.name), into)


def _read_op_strings(ir, op, into: list[str]) -> None:
    # Recursion rather than Operation.walk: an exception in a walk callback comes back as a
    # generic RuntimeError, and the kind of failure is what tells bad input from a bug here.
    into.append(op.name)
    for key in op.attributes:
        name = key if isinstance(key, str) else key.name
        into.append(name)
        _read_strings(ir, _item(op.attributes, name), into)
    for region in op.regions:
        for block in region.blocks:
            for child in block.operations:
                _read_op_strings(ir, child.operation, into)


def _check_strings(ir, module) -> bool:
    """Touches each op name, attribute name and string value, and prints the module.

    Bytecode (and escapes in text) can hold strings that are not UTF-8: a symbol name, a
    custom call target. The bindings turn them into Python strings with an exception at best
    and std::terminate at worst; doing here what aotkit later does with them keeps both in
    this process. Returns whether any string names Shardy (`sdy.`): the parent then strips
    Shardy's annotations, a walk over every op it skips otherwise.
    """
    strings: list[str] = []
    _read_op_strings(ir, module.operation, strings)
    # Large constants print as hex, with no strings in them; eliding keeps big models quick.
    # The module has been verified: the printer need not verify it again.
    module.operation.get_asm(enable_debug_info=True, large_elements_limit=16, assume_verified=True)
    return any(s.startswith("sdy.") for s in strings)


def _is_conversion_error(e: Exception) -> bool:
    return isinstance(e, UnicodeError) or "conversion error" in str(e)


def _fail(status: int, message: str) -> tuple[int, bytes]:
    return status, message.encode("utf-8", "backslashreplace")


def parse(compat, fmt: str, data: bytes) -> tuple[int, bytes]:
    """(0, bytecode) for a module that parses, verifies and reads as UTF-8; else (status,
    first diagnostic)."""
    import io

    from jaxlib.mlir import ir
    from jaxlib.mlir.dialects import stablehlo

    # A fresh context per file: nothing one file leaves in it reaches the next.
    ctx = _context(compat)
    with ctx:
        try:
            if fmt == "portable":
                module = stablehlo.deserialize_portable_artifact(ctx, data)
            else:
                module = ir.Module.parse(data.decode("utf-8") if fmt == "text" else data)
                if _is_vhlo(module):
                    module = stablehlo.deserialize_portable_artifact(ctx, data)
                    fmt = "portable"
        except (ir.MLIRError, ValueError) as e:
            return _fail(EXIT_PARSE, str(e))
        if fmt == "portable":
            # Module.parse has verified what it parsed; a deserialized artifact is checked here.
            try:
                module.operation.verify()
            except ir.MLIRError as e:
                return _fail(EXIT_VERIFY, str(e))
        try:
            shardy = _check_strings(ir, module)
        except (RuntimeError, UnicodeError) as e:
            if not _is_conversion_error(e):
                raise
            return _fail(EXIT_STRINGS, str(e))
        out = io.BytesIO()
        out.write(bytes([FLAG_SHARDY if shardy else 0]))
        module.operation.write_bytecode(out)
    return 0, out.getvalue()


def _read_exact(fd: int, n: int) -> bytes | None:
    """`n` bytes from `fd`, or None at end of input before the first byte."""
    chunks = []
    while n:
        chunk = os.read(fd, min(n, 1 << 20))
        if not chunk:
            if chunks:
                raise EOFError("the request ended early")
            return None
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def main(argv: list[str]) -> int:
    compat = _load_compat(argv[1])
    formats = {code: name for name, code in FORMAT_CODES.items()}
    replies = os.dup(1)
    os.dup2(2, 1)
    while True:
        head = _read_exact(0, FRAME.size)
        if head is None:
            return 0
        code, size = FRAME.unpack(head)
        data = _read_exact(0, size) if size else b""
        if data is None:
            raise EOFError("the request ended early")
        status, payload = parse(compat, formats[code], data)
        _write_all(replies, struct.pack("<BQ", status, len(payload)) + payload)


if __name__ == "__main__":
    # Python puts this file's folder first on sys.path, and it holds aotkit's `jax.py`: JAX
    # itself (which _compat may import for a fallback) must not be shadowed by it.
    if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
        del sys.path[0]
    sys.exit(main(sys.argv))
