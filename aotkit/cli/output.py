"""Where a command's output goes: stdout, or a file written atomically.

`write_file` refuses, unless --force, to replace a file the command read or a file that
holds another kind of data, and says on stderr what it wrote.
"""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path

from aotkit import _files
from aotkit.cli.report import UserError, isatty
from aotkit.cli.targets import is_python_target, split_target


def write_text(dest: str | None, text: str, args=None) -> None:
    if not text.endswith("\n"):
        text += "\n"
    if dest in (None, "-"):
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    write_file(args, dest, text.encode(), "text")


def write_bytes(dest: str | None, data: bytes, what: str, args=None) -> None:
    if dest in (None, "-"):
        if isatty(sys.stdout):
            raise UserError(
                f"--emit {what} writes binary data and stdout is a terminal; use -o FILE "
                "(or redirect stdout)"
            )
        sys.stdout.flush()
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
        return
    write_file(args, dest, data, "artifact" if what == "artifact" else "bytecode")


# What a file holds, by its first bytes (or a .py name); `write_file` replaces a file of
# another kind only with --force.
_KINDS = {
    "artifact": "an aotkit artifact",
    "bytecode": "MLIR bytecode",
    "npz": "a NumPy .npz archive",
    "npy": "a NumPy .npy array",
    "python": "Python source",
    "text": "text",
}


def _file_kind(path: Path) -> str | None:
    from aotkit import artifacts

    if path.suffix == ".py":
        return "python"
    head = _files.peek(path, 8)  # b"" for a FIFO or a device: nothing to wait for or read
    if artifacts.is_artifact(head[: len(artifacts.MAGIC)]):
        return "artifact"
    if head.startswith(b"ML\xefR"):
        return "bytecode"
    if head.startswith(b"PK\x03\x04"):
        return "npz"
    if head.startswith(b"\x93NUMPY"):
        return "npy"
    return None


def _input_files(args) -> list[tuple[str, str]]:
    """`(path, how it was read)` for every file the command read."""
    files = []
    target = getattr(args, "target", None)
    if target not in (None, "-"):
        path = split_target(target)[0] if ":" in target and is_python_target(target) else target
        files.append((str(path), "the target"))
    files.extend((str(p), "an --inputs file") for p in getattr(args, "inputs", None) or ())
    return files


def write_file(args, dest: str, data: bytes, kind: str, flag: str = "-o") -> None:
    """Writes `data` to `dest` atomically (a temporary file in the same folder, then
    `os.replace`, as `Compiled.save` does): a reader sees the old file or the whole new one.

    Refuses, unless --force, to replace a file the command read or a file of another kind.
    A FIFO or a device (`/dev/null`, a terminal) is written into, as a shell redirection
    writes: renaming a file over it would replace the device itself.
    """
    path = Path(dest)
    try:
        special = _files.not_regular(os.stat(path).st_mode)
    except OSError:
        special = None  # absent (or unreadable: the write below says why)
    # /dev/stdout and the like are links to what the shell opened: written through, as a
    # redirection writes (renaming over one would replace the link in /dev).
    if special not in (None, "a directory") or (dest.startswith("/dev/") and path.is_symlink()):
        try:
            with open(path, "wb") as f:
                f.write(data)
        except OSError as e:
            raise UserError(
                f"{flag}: cannot write {dest!r}: {e.strerror or e}; pick a writable path"
            ) from None
        return
    force = getattr(args, "force", False)
    if path.exists() and not force:
        for source, how in _input_files(args) if args is not None else ():
            with contextlib.suppress(OSError):
                if os.path.samefile(source, path):
                    raise UserError(
                        f"{flag}: {dest!r} is {how} this command read; write the output to "
                        "another path (or pass --force to replace it)"
                    )
        found = _file_kind(path)
        if found is not None and found != kind:
            raise UserError(
                f"{flag}: {dest!r} exists and holds {_KINDS[found]}, not {_KINDS[kind]}; pick "
                "another path (or pass --force to replace it)"
            )
    try:
        _files.write_atomic(path, data)
    except OSError as e:
        raise UserError(
            f"{flag}: cannot write {dest!r}: {e.strerror or e}; pick a writable path"
        ) from None
    # What was written, on stderr (stdout stays the program's output); -q silences it.
    if args is not None and not getattr(args, "quiet", False):
        sys.stderr.write(
            f"aotkit {args.command}: wrote {dest} ({_KINDS[kind]}, {len(data):,} bytes)\n"
        )
