"""The `cpu` backend: jaxlib's embedded PJRT CPU client, aotkit's default.

It is the same client JAX itself uses, so arrays JAX made on the CPU are accepted as
arguments without a copy. The client starts on the first `aotkit.backends.get("cpu")`.
"""

from __future__ import annotations

from aotkit import _compat
from aotkit.backends.host_inputs import JAXLIB_CPU
from aotkit.backends.pjrt_spmd import SpmdBackend


def create() -> SpmdBackend:
    backend = SpmdBackend("cpu", _compat.pjrt_backend("cpu"))
    backend.copied_in_call = JAXLIB_CPU  # (XLA's CPU client; not a plugin's)
    return backend
