"""User-facing tracebacks without aotkit's own frames, as JAX's `traceback_util` does.

An exception leaving one of aotkit's entry points (calling a `jit` function or a
`Compiled`, `.trace`, `.lower`, `.compile`, `aotkit.lower`, `aotkit.load`, ...) keeps its
type, message and chain; the frames of files inside the aotkit package are removed from its
traceback (and from those of the exceptions it was raised from), so what is shown is the
call the user made and the lines of the user's own code that ran, down to the line that
failed. To see everything, set `AOTKIT_TRACEBACK_FILTERING=off` or call
`aotkit.config.update("traceback_filtering", False)`. No note (PEP 678) is added, unlike JAX:
pytest's `raises(match=...)` reads notes as part of the message, and aotkit's messages are
matched exactly.

Under the CLI, which reports errors its own way (the user's frames, or everything with
`--traceback`), tracebacks are left whole.
"""

from __future__ import annotations

import functools
import os
import sys
import types

from aotkit import config

_PACKAGE = os.path.dirname(os.path.abspath(__file__))
_PREFIXES = tuple({_PACKAGE + os.sep, os.path.realpath(_PACKAGE) + os.sep})
_CLI = tuple(os.path.join(p, "cli") + os.sep for p in _PREFIXES)  # the aotkit.cli package


@functools.lru_cache(maxsize=1024)
def is_internal(filename: str) -> bool:
    """Whether `filename` (a code object's `co_filename`) is one of aotkit's own files."""
    return os.path.abspath(filename).startswith(_PREFIXES)


def filter_traceback(tb: types.TracebackType | None) -> types.TracebackType | None:
    """`tb` without the frames of aotkit's own files (the frames themselves are shared)."""
    kept = []
    while tb is not None:
        if not is_internal(tb.tb_frame.f_code.co_filename):
            kept.append((tb.tb_frame, tb.tb_lasti, tb.tb_lineno))
        tb = tb.tb_next
    out = None
    for frame, lasti, lineno in reversed(kept):
        out = types.TracebackType(out, frame, lasti, lineno)
    return out


def filter_exception(error: BaseException) -> None:
    """Removes aotkit's frames from `error`'s traceback and its chain's, in place, when it
    leaves an entry point that user code called and filtering is on. The caller re-raises
    it with a bare `raise` (which adds no frame of its own)."""
    tb = error.__traceback__
    if tb is None or not config.get("traceback_filtering"):
        return
    caller = tb.tb_frame.f_back
    while caller is not None:
        if os.path.abspath(caller.f_code.co_filename).startswith(_CLI):
            return
        caller = caller.f_back
    seen = set()
    chained: BaseException | None = error
    while chained is not None and id(chained) not in seen:
        seen.add(id(chained))
        chained.__traceback__ = filter_traceback(chained.__traceback__)
        chained = chained.__cause__ or chained.__context__


def api_boundary(fn):
    """Marks `fn` as an entry point: exceptions leave it with aotkit's frames filtered."""

    @functools.wraps(fn)
    def entry_point(*args, **kwargs):
        __tracebackhide__ = True  # noqa: F841  (pytest hides this frame too)
        try:
            return fn(*args, **kwargs)
        except Exception as e:
            filter_exception(e)
            raise

    return entry_point


def user_stacklevel() -> int:
    """The `stacklevel` that makes a warning its caller issues point at the first frame
    outside aotkit (the user's line), whatever depth the warning is raised at."""
    frame = sys._getframe(1)
    level = 1
    while frame is not None and is_internal(frame.f_code.co_filename):
        frame = frame.f_back
        level += 1
    return level
