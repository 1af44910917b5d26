"""Exceptions aotkit raises for failures that are not the user's input.

User mistakes raise builtin TypeError/ValueError; a backend that rejects a module raises
`CompileError`, chained (`raise ... from`) to the backend's own exception; a module from a
file or from JAX that asks a backend for something aotkit will not run is an
`UnsupportedModuleError` before any backend sees it.
"""

from __future__ import annotations


class CompileError(RuntimeError):
    """A backend rejected a module; the message carries its first diagnostic."""

    def __init__(self, message: str, *, backend: str | None = None, module_name: str | None = None):
        super().__init__(message)
        self.backend = backend
        self.module_name = module_name


class InvalidModuleError(RuntimeError):
    """aotkit built or rewrote a module that does not verify: a bug in aotkit, not the input.

    It carries the module so that the stage that catches it can dump it (`stage` names the
    dump file) before the message reaches the user.
    """

    def __init__(self, message: str, *, module=None, stage: str = "invalid"):
        super().__init__(message)
        self.module = module
        self.stage = stage


class UnsupportedModuleError(ValueError):
    """A module from outside aotkit's tracer (a file, a JAX function) asks a backend to run
    something aotkit refuses: a host callback, a custom call outside its allowlist or one whose
    shapes break its contract, infeed/outfeed/send/recv, recursion, a function without a body,
    a value too large to address. Raised before any backend sees the module (see
    `aotkit.frontends.trust`); `op` is the refused op's name (`stablehlo.custom_call
    @target` for a custom call) and `location` its location in the module ('' if unknown).
    """

    def __init__(self, message: str, *, op: str = "", location: str = ""):
        super().__init__(message)
        self.op = op
        self.location = location


class ArtifactError(ValueError):
    """An AOT artifact or persistent-cache entry that cannot be used as it is.

    Raised for a file that is not an artifact, is truncated or corrupted (a checksum does not
    match), has a header that does not parse, or was made for another backend or version
    when recompiling is not allowed. The message names the file and what is wrong; `path` is
    the file (or `<bytes>`).
    """

    def __init__(self, message: str, *, path: str | None = None):
        super().__init__(message)
        self.path = path


class ArtifactWarning(UserWarning):
    """An artifact is usable only by recompiling it (other platform, version or backend), or
    is written without compile options a recompile from it would need."""


class CacheWarning(UserWarning):
    """The persistent compilation cache skipped an entry or turned itself off; the program
    still runs (it compiles instead)."""


class InPlaceWriteWarning(UserWarning):
    """A traced function wrote into one of its array arguments in place and did not return
    it: aotkit's arrays are values, so the caller's array does not change (NumPy's would)."""


def printable(text: str) -> str:
    """`text` with every non-printable character escaped (`\x1b`, `\n`): names read from
    files reach terminals through reprs, `aotkit inspect` and `run -v`, and a name holding
    an escape sequence or a newline must not rewrite what the user sees."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)
