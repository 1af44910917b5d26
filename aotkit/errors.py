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
