"""Reading the files users name and the entries the cache holds, before any stage sees them;
writing artifacts and the CLI's outputs.

Every file aotkit reads as a whole (an artifact, a module file, an `--inputs` file, a cache
entry, stdin for `-`) is read here, and the `.py` of a CLI target is checked here before
Python's importer reads it; what is promised holds for each of them:

- Regular files only. A FIFO, a character device such as /dev/zero, a block device, a socket
  or a directory is refused at once, naming what it is: nothing waits for a FIFO's writer
  (the file is opened with O_NONBLOCK, after a `stat` that already refused it) and nothing
  reads a device without end. A link to a regular file is followed, except where the caller
  says not to (the cache never follows one).
- The size is checked before the first byte is read: a file over the limit (`MAX_BYTES`,
  4 GiB, unless the caller gives another: the cache its own cap, `--inputs` none, since
  inputs are as large as the arguments) is refused without reading it.
- Reads are bounded: at most the limit plus one byte is ever read, so a file that grows
  while it is read (or a `/proc` file, whose size says 0) is refused at the limit instead of
  growing memory.

Writes (`write_atomic`: `Compiled.save`, the persistent cache, the CLI's `-o`) go to a
temporary file in the same folder, flushed to disk, then renamed over the path: a reader
sees the old file or the whole new one, and a full disk or a crash leaves the old file as it
was. The new file gets the mode of the file it replaces, or the mode `open()` gives a new
file (0o666 less the umask); a symbolic link at the path is replaced by the file (the link's
target is never written through).

Errors are `ValueError`s worded `{where} is {what it is}; {fix}` (`fix` from the caller; a
file over the limit asks to check the path), so each caller names the file its own way
(`aotkit.load: m.aotx`, `--inputs: 'x.npy'`) and says what to do; a missing or unreadable
file raises the `OSError` of `stat` or `open`, for the caller to word.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile

# Generous: twice the 2 GiB a protobuf or a flatbuffer can hold (the forms of XLA executables
# and of jax.export artifacts). A file larger than this is refused before a byte is read.
MAX_BYTES = 4 << 30
_CHUNK = 1 << 24
_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)


def size_text(n: int) -> str:
    """`4 GiB`, `16 MiB`, `1000 bytes`: a limit as the errors show it."""
    for shift, unit in ((30, "GiB"), (20, "MiB"), (10, "KiB")):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} bytes"


def not_regular(mode: int) -> str | None:
    """What a file of `mode` is when it is not a regular file (`a FIFO (named pipe)`), or None."""
    if stat.S_ISREG(mode):
        return None
    kinds = (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISLNK, "a symbolic link"),
    )
    return next((kind for test, kind in kinds if test(mode)), "not a regular file")


def _refuse(st: os.stat_result, where: str, fix: str, limit: int | None) -> None:
    kind = not_regular(st.st_mode)
    if kind == "a directory":  # says enough by itself
        raise ValueError(f"{where} is a directory; {fix}")
    if kind is not None:
        raise ValueError(f"{where} is {kind}, not a regular file; {fix}")
    if limit is not None and st.st_size > limit:
        raise too_large(where, st.st_size, limit)


def too_large(where: str, size: int | None, limit: int) -> ValueError:
    """The error for a file of `size` bytes (None: more than its size said, found reading)."""
    what = "holds more" if size is None else f"is {size} bytes, more"
    return ValueError(
        f"{where} {what} than aotkit reads ({size_text(limit)}); check that it is the file "
        "you meant"
    )


def check_regular(
    path, *, where: str, fix: str, limit: int | None = MAX_BYTES, follow: bool = True
) -> os.stat_result:
    """The `stat` of `path` if it is a regular file within `limit` bytes; ValueError if not.

    For files that another reader then opens (Python's importer reads a `.py` target)."""
    try:
        st = os.stat(path) if follow else os.lstat(path)
    except OSError as e:
        if e.errno != errno.ENAMETOOLONG:
            raise
        raise ValueError(
            f"{where}: a path of {len(os.fspath(path))} characters is too long for a file "
            f"name ({e.strerror}); {fix}"
        ) from None
    _refuse(st, where, fix, limit)
    return st


# How MLIR text starts, and the suffixes of the files aotkit reads: a str that starts so is
# text unless it names a file, or could be a path as well (it ends in a suffix or names a folder).
_MLIR_TEXT = ("module", "func.func", "#", "//")
PATH_SUFFIXES = (".aotx", ".mlir", ".mlirbc", ".bc", ".stablehlo", ".exported", ".bin", ".txt")


def _exists(source: str) -> bool:
    try:
        os.stat(source)
    except (OSError, ValueError):  # no such file, a name too long, an embedded NUL
        return False
    return True


def str_reading(source: str) -> str:
    """How a str given where a path or a module's text goes reads: `path`, `text` or `either`.

    A str that names an existing file is a path, whatever it holds (`module.aotx`, a name
    with a newline). Otherwise a str that starts as MLIR text does (`module`, `func.func`,
    `#`, `//`) or holds a newline is text, unless it could be a path too (one line ending in a
    known suffix or holding a '/'): that one is `either`, for the caller to name both
    readings. Anything else is a path (a missing file, for the caller to say so)."""
    if _exists(source):
        return "path"
    if "\n" in source:
        return "text"
    if not source.lstrip().startswith(_MLIR_TEXT):
        return "path"
    if "/" in source.lstrip("/") or source.rstrip().endswith(PATH_SUFFIXES):
        return "either"
    return "text"


def read_source(
    source,
    *,
    where: str,
    what: str,
    fix: str,
    text: str,
    text_fix: str,
    not_found: str,
    check=None,
) -> tuple[bytes, str]:
    """(bytes, label) of bytes, or of the file a path (str or os.PathLike) names: the one
    reader of `aotkit.load` and `aotkit.load_module`.

    `what` is what a path names (`the artifact's path`), `fix` what to do about a file that is
    not a regular one, `text` what follows `got a str of MLIR text` for a str that is text
    (`str_reading`), `text_fix` what to do with text, for a str that could be either, and
    `not_found` what to do about a missing file. `check(f, label)` sees the opened file before
    it is read. Raises TypeError (neither a path nor bytes; MLIR text), FileNotFoundError and
    the ValueError of `opened`."""
    if isinstance(source, bytes | bytearray | memoryview):
        return bytes(source), "<bytes>"
    if not isinstance(source, str | os.PathLike):
        raise TypeError(
            f"{where}: expected a path or bytes, got {type(source).__name__}; pass {what} or "
            "its contents as bytes"
        )
    reading = str_reading(source) if isinstance(source, str) else "path"
    if reading == "text":
        raise TypeError(f"{where}: got a str of MLIR text{text}")
    label = os.fspath(source)
    try:
        with opened(source, where=f"{where}: {label}", fix=fix) as f:
            if check is not None:
                check(f, label)
            return f.read(), label
    except FileNotFoundError:
        if reading == "either":
            raise FileNotFoundError(
                f"{where}: no such file {label!r}, which could be a path or MLIR text; as a "
                f"path, check it (a pathlib.Path is always read as a path); as MLIR text, "
                f"{text_fix}"
            ) from None
        raise FileNotFoundError(f"{where}: no such file {label!r}; {not_found}") from None


class Regular:
    """A regular file opened by `opened`: its size when opened and bounded reads."""

    __slots__ = ("fd", "size", "where", "limit")

    def __init__(self, fd: int, size: int, where: str, limit: int | None):
        self.fd = fd
        self.size = size
        self.where = where
        self.limit = limit

    def head(self, n: int, offset: int = 0) -> bytes:
        """Up to `n` bytes from `offset` (fewer at the end of the file); `read` still starts
        at the beginning."""
        chunks, got = [], 0
        while got < n:
            chunk = os.pread(self.fd, min(n - got, _CHUNK), offset + got)
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
        return b"".join(chunks)

    def read(self) -> bytes:
        """The whole file. One read of its size (one allocation for any file below 2 GiB),
        then bounded reads until the end: more than the limit is refused."""
        # At most one byte past the limit: it says the file grew past it while being read.
        cap = None if self.limit is None else self.limit + 1
        chunks, got = [], 0
        want = self.size + 1  # one byte more than it held: a file that has grown shows it
        while cap is None or got < cap:
            chunk = os.read(self.fd, want if cap is None else min(want, cap - got))
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
            want = _CHUNK
        if cap is not None and got >= cap:
            raise too_large(self.where, None, self.limit)
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)


@contextlib.contextmanager
def opened(path, *, where: str, fix: str, limit: int | None = MAX_BYTES, follow: bool = True):
    """`path` opened as a `Regular` file, closed on exit; ValueError if it is not a regular
    file or is larger than `limit` bytes (None: no limit), checked before a byte is read.

    `follow=False` refuses a link instead of following it (O_NOFOLLOW)."""
    # stat first, so that no device is ever opened (opening one may act: a tape rewinds).
    check_regular(path, where=where, fix=fix, limit=limit, follow=follow)
    flags = _OPEN_FLAGS | (0 if follow else getattr(os, "O_NOFOLLOW", 0))
    fd = os.open(path, flags)
    try:
        st = os.fstat(fd)  # what was opened, if the path changed since the stat
        _refuse(st, where, fix, limit)
        yield Regular(fd, st.st_size, where, limit)
    finally:
        os.close(fd)


def read_regular(
    path, *, where: str, fix: str, limit: int | None = MAX_BYTES, follow: bool = True
) -> bytes:
    """The bytes of the regular file `path` (see `opened`)."""
    with opened(path, where=where, fix=fix, limit=limit, follow=follow) as f:
        return f.read()


def read_stream(stream, *, where: str, limit: int = MAX_BYTES) -> bytes:
    """The bytes of a binary stream (stdin for `-`) up to its end, at most `limit` of them.

    A regular file behind it is size-checked first; a pipe or a terminal is read in bounded
    chunks, so an endless one is refused at the limit."""
    size = None
    with contextlib.suppress(AttributeError, OSError, ValueError):  # no descriptor behind it
        st = os.fstat(stream.fileno())
        size = st.st_size if stat.S_ISREG(st.st_mode) else None
    if size is not None and size > limit:
        raise too_large(where, size, limit)
    chunks, got = [], 0
    while got <= limit:
        chunk = stream.read(min(_CHUNK, limit + 1 - got))
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    if got > limit:
        raise too_large(where, None, limit)
    return b"".join(chunks)


def peek(path, n: int) -> bytes:
    """The first `n` bytes of `path` if it is a regular file, else b"" (also when it cannot
    be read): for guessing what a file holds without blocking on a FIFO or reading a device."""
    try:
        with opened(path, where=str(path), fix="", limit=None) as f:
            return f.head(n)
    except (OSError, ValueError):
        return b""


def new_file_mode() -> int:
    """The mode `open()` gives a new file: 0o666 less the umask. Read from /proc where it can
    be (setting the umask to read it, the fallback, is not safe while other threads create
    files)."""
    with contextlib.suppress(OSError, ValueError):
        with open("/proc/self/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return 0o666 & ~int(line.split()[1], 8)
    umask = os.umask(0o022)
    os.umask(umask)
    return 0o666 & ~umask


def write_atomic(path, data: bytes) -> None:
    """Writes `data` to `path` through a temporary file in the same folder, flushed to disk,
    and a rename (see the module docstring); raises the OSError of the step that failed,
    after removing the temporary file."""
    path = os.fspath(path)
    try:
        st = os.lstat(path)
    except OSError:
        st = None  # absent: a new file
    keep = st is not None and not stat.S_ISLNK(st.st_mode)
    mode = stat.S_IMODE(st.st_mode) if keep else new_file_mode()
    folder, name = os.path.split(path)
    fd, tmp = tempfile.mkstemp(dir=folder or ".", prefix=f".{name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fchmod(f.fileno(), mode)
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
