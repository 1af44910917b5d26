"""Exceptions aotkit raises for failures that are not the user's input.

User mistakes raise builtin TypeError/ValueError; a backend that rejects a module raises
`CompileError`, chained (`raise ... from`) to the backend's own exception.
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
    """An artifact is usable only by recompiling it (other platform, version or backend)."""


class CacheWarning(UserWarning):
    """The persistent compilation cache skipped an entry or turned itself off; the program
    still runs (it compiles instead)."""


class InPlaceWriteWarning(UserWarning):
    """A traced function wrote into one of its array arguments in place and did not return
    it: aotkit's arrays are values, so the caller's array does not change (NumPy's would)."""
