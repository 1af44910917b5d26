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
reply is one status byte, the payload's length as a little-endian u64, then the payload,
written to the file descriptor that was stdout (stdout itself is pointed at stderr, so that
nothing the C++ libraries print can corrupt the stream). A request gets up to three replies,
each sent as soon as it is known, so that the parent works on one step's result while this
worker does the next:
1. status 0: the module parsed, verified, and is in the StableHLO dialect; the payload is
   MLIR bytecode written by MLIR's own writer, which the parent can parse safely (it
   touches no string of it until reply 2).
2. status 0: every op name, attribute name and string attribute reads as UTF-8; the
   payload is one byte of flags (`FLAG_SHARDY`: the module mentions Shardy).
3. status 0, no payload: the module also prints (what `as_text()` will do in the parent).
A failure ends the replies to that file: `EXIT_PARSE` or `EXIT_VERIFY` (first reply only;
the payload is the first diagnostic), `EXIT_STRINGS` (a string that is not UTF-8).
A crash or a Python exception ends the worker with its message on stderr.
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
# Replies to a file that passes every step; bits of the second reply's byte of flags.
REPLIES = 3
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


def _read_all_strings(ir, module) -> bool:
    """Reads each op name, attribute name and string value, as aotkit will, so that bad
    UTF-8 fails here; returns whether any names Shardy (`sdy.`): the parent then strips
    Shardy's annotations, a walk over every op it skips otherwise.

    Bytecode (and escapes in text) can hold strings that are not UTF-8: a symbol name, a
    custom call target. The bindings turn them into Python strings with an exception at best
    and std::terminate at worst; doing it here keeps both in this process.
    """
    strings: list[str] = []
    failure: list[BaseException] = []

    # The walk of aotkit.passes' rewriter, restated: this file imports nothing of aotkit.
    def visit(op) -> ir.WalkResult:
        try:
            strings.append(op.name)
            attributes = op.attributes
            for key in attributes:
                name = key if isinstance(key, str) else key.name
                strings.append(name)
                _read_strings(ir, _item(attributes, name), strings)
        except BaseException as e:  # re-raised below: an exception must not cross C++
            failure.append(e)
            return ir.WalkResult.INTERRUPT
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    if failure:
        raise failure[0]
    return any(s.startswith("sdy.") for s in strings)


def _print(module) -> None:
    # Large constants print as hex, with no strings in them; eliding keeps big models quick.
    # The module has been verified: the printer need not verify it again.
    module.operation.get_asm(enable_debug_info=True, large_elements_limit=16, assume_verified=True)


def _not_utf8(e: Exception) -> tuple[int, bytes]:
    """The `EXIT_STRINGS` reply for a string the bindings could not convert; any other
    error is re-raised (it ends the worker, as a bug)."""
    if not (isinstance(e, UnicodeError) or "conversion error" in str(e)):
        raise e
    return _fail(EXIT_STRINGS, str(e))


def _fail(status: int, message: str) -> tuple[int, bytes]:
    return status, message.encode("utf-8", "backslashreplace")


def parse(compat, fmt: str, data: bytes):
    """The replies to one file, in order (see the module docstring)."""
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
            yield _fail(EXIT_PARSE, str(e))
            return
        if fmt == "portable":
            # Module.parse has verified what it parsed; a deserialized artifact is checked here.
            try:
                module.operation.verify()
            except ir.MLIRError as e:
                yield _fail(EXIT_VERIFY, str(e))
                return
        out = io.BytesIO()
        module.operation.write_bytecode(out)
        yield 0, out.getvalue()
        try:
            shardy = _read_all_strings(ir, module)
        except (RuntimeError, UnicodeError) as e:
            yield _not_utf8(e)
            return
        yield 0, bytes([FLAG_SHARDY if shardy else 0])
        try:
            _print(module)
        except (RuntimeError, UnicodeError) as e:
            yield _not_utf8(e)
            return
        yield 0, b""


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


def _watch_parent() -> None:
    """Forks a watchdog that kills this worker once the parent's end of its input closes.

    The worker notices the end of its input only between files: one whose parse never ends
    (a corrupt bytecode file can send MLIR's reader into an endless loop) would otherwise
    outlive a parent that was killed, spinning a core for good. The watchdog holds no pipe
    but the input (whose hang-up it polls for) and ends when the worker does.
    """
    worker = os.getpid()
    try:
        if os.fork():
            return
    except OSError:
        return  # no watchdog: the parent's exit handler and timeout still end the worker
    import select
    import signal

    try:
        os.closerange(1, os.sysconf("SC_OPEN_MAX") if hasattr(os, "sysconf") else 256)
        poller = select.poll()
        poller.register(0, 0)  # hang-ups and errors are reported whatever is asked for
        while os.getppid() == worker:
            # Still this worker's child after the hang-up: the worker lives, its pid is its own.
            if poller.poll(1000) and os.getppid() == worker:
                os.kill(worker, signal.SIGKILL)
                break
    finally:
        os._exit(0)


def main(argv: list[str]) -> int:
    _watch_parent()
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
        for status, payload in parse(compat, formats[code], data):
            _write_all(replies, struct.pack("<BQ", status, len(payload)) + payload)


if __name__ == "__main__":
    # Python puts this file's folder first on sys.path, and it holds aotkit's `jax.py`: JAX
    # itself (which _compat may import for a fallback) must not be shadowed by it.
    if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
        del sys.path[0]
    sys.exit(main(sys.argv))
