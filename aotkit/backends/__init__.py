"""Backend registry: find a backend by name, start it once, list what can run here.

Built in: `cpu` (jaxlib's PJRT CPU client, the default) and `interpreter` (StableHLO's
reference interpreter). `iree` (IREE's compiler and runtime) is listed when the extra
`aotkit[iree]` is installed. `cuda`, `rocm` and `tpu` start through JAX's PJRT plugins when
their packages are installed; `load_plugin(name, path)` adds any PJRT plugin library.
Third-party backends register through the entry-point group `aotkit.backends`: the entry
point's name is the backend name and its object is a `Backend` instance, a `Backend`
subclass, or a function returning one.

Nothing here starts a client at import time; `get(name)` starts the one asked for.
"""

from __future__ import annotations

import importlib.metadata
import threading

from aotkit.backends.base import Backend, BackendInfo, Executable, MemoryAnalysis

__all__ = [
    "DEFAULT",
    "ENTRY_POINT_GROUP",
    "Backend",
    "BackendInfo",
    "Executable",
    "MemoryAnalysis",
    "available",
    "get",
    "load_plugin",
]

DEFAULT = "cpu"
ENTRY_POINT_GROUP = "aotkit.backends"
_BUILTIN = ("cpu", "interpreter")
# Names no plugin may take: the built-in backends and the optional `iree`.
_RESERVED = (*_BUILTIN, "iree")

_lock = threading.RLock()
_started: dict[str, Backend] = {}


def _plugin():
    """aotkit/backends/plugin.py, on first use."""
    # lazy: plugin.py imports pjrt, hence jax (0.5-0.9 s measured here), which
    # `get("interpreter")` and `get("iree")` do not need
    from aotkit.backends import plugin

    return plugin


def _iree():
    """aotkit/backends/iree.py, on first use."""
    # lazy: iree is an optional extra; its module (20-30 ms measured here) is imported only
    # when it is asked for or listed
    from aotkit.backends import iree

    return iree


def _entry_points() -> dict[str, importlib.metadata.EntryPoint]:
    return {ep.name: ep for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)}


def _startable() -> list[str]:
    """Names `get` can start without error (plugins only when their package is installed)."""
    plugin = _plugin()
    names = list(_BUILTIN)
    names += ["iree"] if _iree().installed() else []
    names += [p for p in plugin.KNOWN if plugin.installed(p)]
    names += [n for n in _entry_points() if n not in names]
    names += [n for n in _started if n not in names]
    return names


def known(name: str) -> bool:
    """Whether `name` names a backend aotkit knows, started or not (cpu, interpreter, iree,
    the PJRT plugin platforms, entry points, and backends loaded or registered)."""
    return (
        name in _BUILTIN
        or name == "iree"
        or name in _plugin().KNOWN
        or name in _started
        or name in _entry_points()
    )


def _from_entry_point(name: str, ep: importlib.metadata.EntryPoint) -> Backend:
    obj = ep.load()
    if isinstance(obj, type) and issubclass(obj, Backend):
        obj = obj()
    elif not isinstance(obj, Backend) and callable(obj):
        obj = obj()
    if not isinstance(obj, Backend):
        raise TypeError(
            f"backends.get: entry point {name!r} ({ep.value}) gave a {type(obj).__name__}, "
            "not an aotkit.backends.Backend; it must name a Backend, a Backend subclass or "
            "a function returning one"
        )
    return obj


def _create(name: str) -> Backend:
    if name == "cpu":
        # lazy: cpu.py imports pjrt, hence jax (0.5-0.9 s measured here); the interpreter
        # and iree run without it
        from aotkit.backends import cpu

        return cpu.create()
    if name == "interpreter":
        # lazy: the interpreter's module and rules (~30 ms measured here) load when it is asked for
        from aotkit.backends import interpreter

        return interpreter.create()
    if name == "iree":
        iree = _iree()
        if not iree.installed():
            raise ValueError(
                f"backends.get: backend 'iree' is not installed; get it with "
                f"{iree.INSTALL_HINT}; available: {', '.join(_startable())}"
            )
        return iree.create()
    plugin = _plugin()
    if name in plugin.KNOWN:
        if not plugin.installed(name):
            raise ValueError(
                f"backends.get: backend {name!r} is not installed; get it with "
                f"{plugin.install_hint(name)}; available: {', '.join(_startable())}"
            )
        return plugin.create(name)
    eps = _entry_points()
    if name in eps:
        return _from_entry_point(name, eps[name])
    raise ValueError(
        f"backends.get: unknown backend {name!r}; available: {', '.join(_startable())}; "
        f"PJRT plugins {', '.join(plugin.KNOWN)} come from their packages "
        f"({'; '.join(plugin.install_hint(p) for p in plugin.KNOWN)}), and any plugin "
        "library loads with aotkit.backends.load_plugin(name, path)"
    )


def get(name: str | Backend | None = None) -> Backend:
    """The backend called `name` (default `cpu`), started on first use and kept."""
    if isinstance(name, Backend):
        return name
    if name is None:
        name = DEFAULT
    if not isinstance(name, str):
        raise TypeError(
            f"backends.get: backend must be a name such as 'cpu', got {type(name).__name__}"
        )
    backend = _started.get(name)
    if backend is not None:
        return backend
    with _lock:
        backend = _started.get(name)
        if backend is None:
            backend = _started[name] = _create(name)
    return backend


def available() -> list[BackendInfo]:
    """Every backend that starts here, with its platform, version and device count.

    This starts each client it lists (installed plugins included).
    """
    infos = []
    for name in _startable():
        try:
            backend = get(name)
        except (RuntimeError, ValueError):
            continue  # an installed plugin with no device to run on is not available
        infos.append(backend.info())
    return infos


def load_plugin(name: str, path: str) -> Backend:
    """Loads the PJRT plugin library at `path` as backend `name` and returns it."""
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(
            f"load_plugin: backend name {name!r} must be an identifier such as 'mygpu'"
        )
    plugin = _plugin()
    with _lock:
        if name in _started or name in _RESERVED or name in plugin.KNOWN:
            raise ValueError(
                f"load_plugin: backend name {name!r} is taken; choose another name "
                f"(taken: {', '.join(sorted({*_RESERVED, *plugin.KNOWN, *_started}))})"
            )
        backend = _started[name] = plugin.load(name, path)
    return backend
