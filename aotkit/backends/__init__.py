"""Backend registry: find a backend by name, start it once, list what can run here.

Built in: `cpu` (jaxlib's PJRT CPU client) and `interpreter` (StableHLO's reference
interpreter). `iree` (IREE's compiler and runtime) is listed when the extra
`aotkit[iree]` is installed. `cuda`, `rocm` and `tpu` start through JAX's PJRT plugins when
their packages are installed; `load_plugin(name, path)` adds any PJRT plugin library.
Third-party backends register through the entry-point group `aotkit.backends`: the entry
point's name is the backend name and its object is a `Backend` instance, a `Backend`
subclass, or a function returning one.

The default backend (`get(None)`, `default_name()`): aotkit.config's `default_backend`, else
the `AOTKIT_BACKEND` environment variable, else the platform `jax.default_backend()` picks
(JAX_PLATFORMS honoured: the accelerator where one is present) where aotkit has a backend for
it, else `cpu`. JAX is asked only where a plugin package is installed or a backend of an
accelerator platform was registered: on a machine without one the default is `cpu` at no cost.

Nothing here starts a client at import time; `get(name)` starts the one asked for.
"""

from __future__ import annotations

import importlib.metadata
import os
import threading

from aotkit.backends.base import Backend, BackendInfo, Executable, MemoryAnalysis

__all__ = [
    "DEFAULT",
    "ENTRY_POINT_GROUP",
    "ENV",
    "Backend",
    "BackendInfo",
    "Executable",
    "MemoryAnalysis",
    "available",
    "default_name",
    "deviceless",
    "get",
    "load_plugin",
]

# The default where no accelerator is present (and where JAX's is one aotkit has no backend for).
DEFAULT = "cpu"
ENV = "AOTKIT_BACKEND"
ENTRY_POINT_GROUP = "aotkit.backends"
_CONFIG = "aotkit.config's default_backend"
# JAX's name of a platform -> aotkit's backends for it, in order of preference.
_PLATFORM_BACKENDS = {
    "gpu": ("cuda", "rocm"),
    "cuda": ("cuda",),
    "rocm": ("rocm",),
    "tpu": ("tpu",),
}
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


def _jax_platform() -> str:
    """The platform `jax.default_backend()` picks (it starts JAX's clients: called only where
    an accelerator may be present)."""
    # lazy: jax costs 0.5-0.9 s to import, which the interpreter does not need
    import jax

    return jax.default_backend()


# Found once per process: JAX's pick does not change, and looking for the plugin packages
# costs about 0.5 ms (a search of sys.path), too much for every compile that asks.
_detected: list[str] = []
_plugins_installed: list[bool] = []
_ACCELERATORS = frozenset(n for names in _PLATFORM_BACKENDS.values() for n in names)


def _accelerator_possible() -> bool:
    """Whether a plugin package of an accelerator is installed, or a backend for one is
    registered: where neither is, JAX's pick is the CPU, and nothing need start to know it."""
    if not _plugins_installed:
        plugin = _plugin()
        _plugins_installed.append(any(plugin.installed(p) for p in plugin.KNOWN))
    return _plugins_installed[0] or not _ACCELERATORS.isdisjoint(_started)


def _accelerator() -> str:
    """aotkit's backend for the platform JAX picks, or `cpu` where aotkit has none."""
    if not _accelerator_possible():
        return DEFAULT
    if not _detected:
        _detected.append(_jax_platform())
    plugin = _plugin()
    for name in _PLATFORM_BACKENDS.get(_detected[0], ()):
        if name in _started or (name in plugin.KNOWN and plugin.installed(name)):
            return name
    return DEFAULT


def default_name() -> tuple[str, str]:
    """The default backend's name and where it comes from: ("tpu", "the accelerator JAX
    picks"), ("cpu", "no accelerator here"), (NAME, "AOTKIT_BACKEND") or (NAME,
    "aotkit.config's default_backend")."""
    # lazy: aotkit.config imports jax (0.5-0.9 s), which `get("interpreter")` does not need
    from aotkit import config

    chosen = config.get("default_backend")
    if chosen is not None:
        return chosen, _CONFIG
    chosen = os.environ.get(ENV, "").strip()
    if chosen:
        return chosen, ENV
    name = _accelerator()
    return name, "no accelerator here" if name == DEFAULT else "the accelerator JAX picks"


def get(name: str | Backend | None = None) -> Backend:
    """The backend called `name`, started on first use and kept; None is the default backend
    (`default_name()`: the accelerator JAX picks, else cpu; AOTKIT_BACKEND or aotkit.config's
    `default_backend` choose another)."""
    if isinstance(name, Backend):
        return name
    if name is None:
        name, source = default_name()
        if source in (ENV, _CONFIG) and not known(name):
            how = (
                f"set {ENV} to one of them, or unset it"
                if source == ENV
                else "aotkit.config.update('default_backend', ...) with one of them, or None"
            )
            raise ValueError(
                f"backends.get: the default backend {name!r} (from {source}) is unknown; "
                f"available: {', '.join(_startable())}; {how} for the accelerator JAX picks "
                "(else cpu)"
            )
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


def deviceless(topology, where: str) -> Backend:
    """The `tpu` backend that compiles for TPU `topology` ("v5e:2x2") on a machine without a
    TPU, through libtpu (aotkit/backends/tpu_topology.py; the `tpu` extra). `where` starts
    its errors."""
    # lazy: libtpu and the PJRT backends load only when a topology is asked for
    from aotkit.backends import tpu_topology

    return tpu_topology.backend(topology, where)
