"""Stand-in backends: jaxlib's CPU client under another name, platform and platform version.

An accelerator's PJRT client reports what it reports: a TPU's `platform_version` is three
lines (`"PJRT C API\\nTFRT TPU v5 lite\\nBuilt on ..."`). `StandIn` runs on the CPU and
reports such text, so that artifacts, the persistent cache, the CLI and `aotkit check` are
tested with it on any machine; `Wrong` is one whose executables compute a wrong answer.
Child processes register the same stand-in with `register(...)` before they load.
"""

from __future__ import annotations

import jaxlib
import numpy as np

from aotkit import backends
from aotkit.backends.pjrt_spmd import SpmdBackend

# What a TPU reports, with a tab and text beyond ASCII besides.
ODD_VERSION = (
    "PJRT C API\nTFRT TPU v5 lite\tß-é 東京 \u2028\x1b[2J\nBuilt on Dec  1 2026 00:00:00 (123)"
)


class StandIn(SpmdBackend):
    """The CPU client as backend `name` of `platform`, reporting `platform_version`."""

    def __init__(self, name: str, platform: str, platform_version: str):
        super().__init__(name, backends.get("cpu")._client)
        self.platform = platform
        self.platform_version = platform_version

    @property
    def version(self) -> str:
        return f"jaxlib {jaxlib.__version__}, {self.platform_version}"

    def target(self) -> dict[str, str]:
        return {**super().target(), "platform_version": self.platform_version}


class Wrong(StandIn):
    """A stand-in whose executables add `error` to every float result: a backend that
    computes a wrong answer."""

    # Its executables are not the backend's own: none is cached or loaded from the cache.
    executable_format = None

    def __init__(self, name: str, platform: str, platform_version: str, error: float):
        super().__init__(name, platform, platform_version)
        self.error = error

    def compile(self, module, options=None, **kwargs):
        executable = super().compile(module, options, **kwargs)
        inner = executable.execute  # PjrtExecutable's per-arity closure, `_run`

        def execute(leaves):
            return [
                np.asarray(x) + np.asarray(self.error, np.asarray(x).dtype)
                if np.issubdtype(np.asarray(x).dtype, np.floating)
                else x
                for x in inner(leaves)
            ]

        executable._run = execute
        executable.fastpath = lambda *args: None  # no native call past `execute`
        return executable


def register(backend: StandIn) -> StandIn:
    """Makes `backend` the one `aotkit.backends.get(backend.name)` returns."""
    backends._started[backend.name] = backend
    return backend
