"""What the CLI says on stderr: errors, progress and `-v` notes, and the exit codes.

`report_error` turns an exception into the one line (after the user's own traceback, when
their code raised) that `aotkit.cli` promises; a `UserError` is a mistake in the command line
or its inputs. Imports nothing heavy: `aotkit --help` and argument errors come through here.
"""

from __future__ import annotations

import contextlib
import os
import sys
import sysconfig
import threading
import time
import traceback

import aotkit

EXIT_OK, EXIT_USER, EXIT_USAGE = 0, 1, 2


# A step that takes longer than this (seconds) earns a progress line on an interactive stderr.
PROGRESS_AFTER_S = 1.0
_PROGRESS_EVERY_S = 0.25


class UserError(Exception):
    """A mistake in the command line or its inputs: one line on stderr, exit 1."""


class UserCodeError(UserError):
    """The user's own code raised while aotkit imported or traced it.

    Reported as the user's traceback (their frames only) followed by one line.
    """

    def __init__(self, message: str, cause: BaseException):
        super().__init__(message)
        self.cause = cause


def _library_prefixes() -> tuple[str, ...]:
    dirs = {os.path.dirname(os.path.abspath(aotkit.__file__))}
    paths = sysconfig.get_paths()
    dirs |= {paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if paths.get(k)}
    dirs |= {os.path.realpath(d) for d in dirs}
    return tuple(d.rstrip(os.sep) + os.sep for d in sorted(dirs))


def user_frames(exc: BaseException) -> list[traceback.FrameSummary]:
    """The frames of `exc`'s traceback that run the user's code (not aotkit, not libraries)."""
    library = _library_prefixes()
    return [
        f
        for f in traceback.extract_tb(exc.__traceback__)
        if not f.filename.startswith("<") and not os.path.abspath(f.filename).startswith(library)
    ]


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc).strip()}".rstrip(": ")


def _known_errors() -> tuple[type[BaseException], ...]:
    """Exceptions aotkit raises for bad input (its error contract), as opposed to bugs."""
    from aotkit.errors import CompileError

    return (TypeError, ValueError, NotImplementedError, OSError, CompileError)


def report_error(command: str, exc: BaseException, show_traceback: bool) -> int:
    """Writes `exc` to stderr the way `aotkit.cli` promises; returns the exit code."""
    err = sys.stderr
    prefix = f"aotkit {command}: error: " if command else "aotkit: error: "
    if show_traceback:
        traceback.print_exception(getattr(exc, "cause", None) or exc, file=err)
    if isinstance(exc, UserCodeError):
        if not show_traceback:
            err.write(_user_traceback(exc.cause))
        err.write(prefix + str(exc) + "\n")
        return EXIT_USER
    if isinstance(exc, (UserError, *_known_errors())):
        err.write(prefix + str(exc).strip() + "\n")
        return EXIT_USER
    if isinstance(exc, MemoryError):
        detail = f" ({str(exc).strip()})" if str(exc).strip() else ""
        err.write(
            f"{prefix}out of memory{detail}: the program or its inputs need more memory than "
            "this machine has; use smaller shapes or inputs\n"
        )
        return EXIT_USER
    if isinstance(exc, EOFError):
        detail = f" ({str(exc).strip()})" if str(exc).strip() else ""
        err.write(
            f"{prefix}an input ended too soon{detail}: a file is truncated; check the input "
            "files (--inputs, the target)\n"
        )
        return EXIT_USER
    err.write(
        f"{prefix}internal error: {_describe(exc)}; "
        "rerun with --traceback and report it with the command line\n"
    )
    return EXIT_USER


def _user_traceback(exc: BaseException) -> str:
    frames = user_frames(exc)
    lines = []
    if frames:
        lines.append("Traceback (most recent call last; aotkit's frames hidden):\n")
        lines.extend(traceback.format_list(frames))
    if isinstance(exc, SyntaxError):
        # The offending line and caret; the message itself ends the report.
        lines.extend(traceback.format_exception_only(exc)[:-1])
    return "".join(lines)


def user_code_error(what: str, exc: BaseException) -> UserCodeError:
    return UserCodeError(f"{what}: {_describe(exc)}", exc)


@contextlib.contextmanager
def progress(args, what: str):
    """Shows `what` and its elapsed time on stderr while a slow step runs (terminal only)."""
    if getattr(args, "quiet", False) or not isatty(sys.stderr):
        yield
        return
    done = threading.Event()
    start = time.perf_counter()
    shown = []

    def tick():
        if done.wait(PROGRESS_AFTER_S):
            return
        while not done.is_set():
            sys.stderr.write(f"\raotkit: {what}... {time.perf_counter() - start:.1f} s\x1b[K")
            sys.stderr.flush()
            shown.append(True)
            done.wait(_PROGRESS_EVERY_S)

    thread = threading.Thread(target=tick, name="aotkit-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
        if shown:
            sys.stderr.write("\r\x1b[K")
            sys.stderr.flush()


def isatty(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def say(args, message: str) -> None:
    """A `-v` note on stderr."""
    if getattr(args, "verbose", False) and not getattr(args, "quiet", False):
        sys.stderr.write(f"aotkit: {message}\n")


def human_time(seconds: float) -> str:
    """`notation.human_time`, without importing jax (which `notation` imports) at start-up."""
    from aotkit.cli import notation

    return notation.human_time(seconds)
