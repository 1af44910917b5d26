"""IR dumps: one numbered file per stage of one lowering, written as the stage happens.

Turned on by `AOTKIT_DUMP_DIR=DIR` or `jit(..., dump_dir=DIR)` (the argument wins). A
lowering of module `f` gets the next module number in DIR and writes, in order:

    0003.f.01-traced.mlir               the traced module, before any pass
    0003.f.02-after-aotkit-inline.mlir  after each pass (AOTKIT_PRINT_IR_AFTER_ALL=1 only)
    ...
    0003.f.10-final.mlir                the module the backend receives (`Lowered.as_text()`)
    0003.f.11-optimized.hlo             from the compile step (`Dumper.write`)
    0003.f.12-cost.json                 from the compile step (`Dumper.write_json`)

Without AOTKIT_PRINT_IR_AFTER_ALL, `final` is file 02. `AOTKIT_PASS_TIMING=1` adds
`NN-pass-timing.txt` after `final`. Module numbers continue after the largest number
already in DIR, so dumps of several runs sit side by side in one folder. Every `.mlir` file
parses back as MLIR.
"""

from __future__ import annotations

import json
import os
import re
import threading
from pathlib import Path

from jaxlib.mlir import ir

from aotkit import _context

ENV_DUMP_DIR = "AOTKIT_DUMP_DIR"
ENV_PRINT_IR_AFTER_ALL = "AOTKIT_PRINT_IR_AFTER_ALL"
ENV_PASS_TIMING = "AOTKIT_PASS_TIMING"

HOW_TO_DUMP = (
    f"set {ENV_DUMP_DIR}=DIR (or pass jit(..., dump_dir=DIR)) to dump the module at each stage"
)

_PREFIX = re.compile(r"^(\d{4,})\.")
_next_index: dict[Path, int] = {}
_index_lock = threading.Lock()


def _flag(env: str) -> bool:
    return os.environ.get(env, "").strip().lower() not in ("", "0", "false", "no", "off")


def _file_part(name: str) -> str:
    # Module names come from Python function names (`<lambda>`); keep file names portable.
    cleaned = re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("._")
    return cleaned or "module"


def _claim_index(directory: Path, *, rescan: bool = False) -> int:
    """The next module number in `directory` (after the largest one there when first seen,
    or when `rescan`: another process may have taken numbers since)."""
    with _index_lock:
        if rescan or directory not in _next_index:
            taken = (_PREFIX.match(p.name) for p in directory.iterdir())
            largest = max((int(m.group(1)) for m in taken if m), default=-1)
            _next_index[directory] = max(largest + 1, _next_index.get(directory, 0))
        index = _next_index[directory]
        _next_index[directory] = index + 1
        return index


# Dump files are created, never opened if they exist: no other process's file is
# overwritten, and a symbolic link planted in a shared folder is not followed.
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)


class Dumper:
    """Writes the stages of one lowering of one module; create it with `Dumper.create`."""

    def __init__(
        self,
        directory: Path,
        index: int,
        name: str,
        *,
        print_ir_after_all: bool = False,
        pass_timing: bool = False,
    ):
        self.directory = directory
        self.index = index
        self.name = name
        self.print_ir_after_all = print_ir_after_all
        self.pass_timing = pass_timing
        self.paths: list[Path] = []
        self._lock = threading.Lock()

    @classmethod
    def create(
        cls,
        name: str,
        dump_dir: str | os.PathLike | None = None,
        *,
        print_ir_after_all: bool | None = None,
        pass_timing: bool | None = None,
    ) -> Dumper | None:
        """A dumper for module `name`, or None when dumps are off.

        `dump_dir` overrides `AOTKIT_DUMP_DIR`; the flags default to their environment
        variables. The directory is created here, so an unusable one fails before tracing
        has cost anything.
        """
        where = "dump_dir" if dump_dir is not None else ENV_DUMP_DIR
        if dump_dir is None:
            dump_dir = os.environ.get(ENV_DUMP_DIR) or None
        if dump_dir is None:
            return None
        if not isinstance(dump_dir, str | os.PathLike):
            raise TypeError(
                f"{where}: expected a directory path, got {type(dump_dir).__name__} "
                f"{dump_dir!r}; pass a str or pathlib.Path"
            )
        if not str(dump_dir).strip():
            raise ValueError(
                f"{where}: empty directory path {dump_dir!r}; "
                "pass a directory, or None for no dumps"
            )
        directory = Path(dump_dir).expanduser().resolve()
        try:
            directory.mkdir(parents=True, exist_ok=True)
            index = _claim_index(directory)
        except OSError as e:
            raise ValueError(
                f"{where}: cannot dump to {str(directory)!r}: {e.strerror or e}; "
                "choose a writable directory"
            ) from e
        return cls(
            directory,
            index,
            _file_part(name),
            print_ir_after_all=(
                _flag(ENV_PRINT_IR_AFTER_ALL) if print_ir_after_all is None else print_ir_after_all
            ),
            pass_timing=_flag(ENV_PASS_TIMING) if pass_timing is None else pass_timing,
        )

    def write(self, stage: str, text: str, *, ext: str = "mlir") -> Path:
        """Writes `text` as the next numbered stage file, e.g. `0003.f.10-optimized.hlo`.

        The first file of a module claims its number: if another process took it (the
        file exists), the module takes the next free number instead. A later file that
        exists already is an error, never overwritten.
        """
        data = text.encode("utf-8")
        with self._lock:
            for _ in range(1000):
                path = self.directory / (
                    f"{self.index:04d}.{self.name}.{len(self.paths) + 1:02d}-{stage}.{ext}"
                )
                try:
                    fd = os.open(path, _CREATE, 0o644)
                    break
                except FileExistsError:
                    if self.paths:
                        raise ValueError(
                            f"dump: {path} exists already (another process's dump, or a "
                            "link planted in the folder); aotkit does not overwrite it: "
                            "dump to a folder of your own"
                        ) from None
                    self.index = _claim_index(self.directory, rescan=True)
            self.paths.append(path)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        return path

    def write_json(self, stage: str, data) -> Path:
        """Writes `data` (cost or memory analysis) as `NN-<stage>.json`."""
        return self.write(
            stage, json.dumps(data, indent=2, sort_keys=True, default=str), ext="json"
        )

    def write_module(self, stage: str, module: ir.Module | ir.Operation) -> Path:
        """Prints `module` (verified or not: MLIR falls back to the generic form) to a file."""
        with _context.of(module):
            text = str(module)
        return self.write(stage, text)

    @property
    def last_path(self) -> Path | None:
        return self.paths[-1] if self.paths else None


def hint(dumper: Dumper | None) -> str:
    """The tail of an error message: where the module was dumped, or how to dump it."""
    if dumper is not None and dumper.last_path is not None:
        return f"dumped to {dumper.last_path}"
    return HOW_TO_DUMP


def pass_timing_requested() -> bool:
    """Whether `AOTKIT_PASS_TIMING` asks for a report when no dump directory is set."""
    return _flag(ENV_PASS_TIMING)
