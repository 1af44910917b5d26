"""PJRT plugin backends: `cuda`, `rocm`, `tpu` from JAX's plugin packages, or any plugin `.so`.

The named platforms start through JAX's plugin discovery when their package is installed
(`jax-cuda12-plugin`, ...). `load_plugin(name, path)` loads any PJRT plugin library by
path. A platform that is absent is a ValueError naming the package that would provide it.
"""

from __future__ import annotations

import importlib.util
import os

from aotkit import _compat, modules
from aotkit.backends.pjrt_spmd import SpmdBackend

# platform -> (importable modules of packages that provide it, how to install one)
KNOWN = {
    "cuda": (("jax_cuda13_plugin", "jax_cuda12_plugin"), 'pip install "jax[cuda12]"'),
    "rocm": (("jax_rocm7_plugin", "jax_rocm60_plugin"), 'pip install "jax[rocm]"'),
    "tpu": (("libtpu",), 'pip install "jax[tpu]"'),
}


def installed(platform: str) -> bool:
    """Whether a package providing `platform` is importable (does not import it)."""
    modules, _ = KNOWN[platform]
    return any(importlib.util.find_spec(m) is not None for m in modules)


def install_hint(platform: str) -> str:
    return KNOWN[platform][1]


def create(platform: str) -> SpmdBackend:
    """Starts the client of an installed plugin platform; RuntimeError if it cannot start."""
    try:
        client = _compat.pjrt_backend(platform)
    except RuntimeError as e:
        raise RuntimeError(
            f"backend {platform!r}: its plugin is installed but did not start: "
            f"{modules.diagnostic(e)}"
        ) from e
    return SpmdBackend(platform, client)


def load(name: str, path: str) -> SpmdBackend:
    """Loads the PJRT plugin library at `path` under `name` and starts its client."""
    where = f"load_plugin({name!r}, {path!r})"
    if not os.path.isfile(path):
        raise ValueError(f"{where}: no such file; pass the path of a PJRT plugin .so")
    runtime_error = _compat.runtime_error_type()
    try:
        _compat.load_pjrt_plugin(name, os.path.abspath(path))
        client = _compat.plugin_client(name)
    except runtime_error as e:
        raise ValueError(
            f"{where}: not a loadable PJRT plugin: {modules.diagnostic(e)}; pass a library that "
            "exports GetPjrtApi"
        ) from None
    return SpmdBackend(name, client)
