"""The persistent compilation cache: executables kept on disk, shared across processes.

Part of the compile stage: `Lowered.compile` (and so `jit`) asks here before it asks the
backend, and stores what the backend compiled. An entry is an AOT artifact
(aotkit/artifacts.py, docs/artifact-format.md) named by its key:

    SHA-256 over the module's bytecode with locations stripped, the backend's `target()`
    (name, platform, platform version, jaxlib, device kind, host CPU), the compile options,
    the donated arguments, `XLA_FLAGS` (they change what XLA compiles: fast math, the
    instruction set, ...), and aotkit's and jaxlib's versions.

Where: `AOTKIT_CACHE_DIR` (a folder, or `off`), else `$XDG_CACHE_HOME/aotkit`, else
`~/.cache/aotkit`; `configure(dir=..., max_bytes=...)` overrides it for the process. The
folder is read when each compile asks, so setting the variable takes effect at once.

What it promises:
- Size capped (default 2 GiB): after each write, the least recently used entries (a hit
  refreshes an entry's modification time) are deleted until the folder fits.
- Writes go to a temporary file in the same folder and are renamed into place, so a
  reader sees a whole entry or none, and processes compiling the same key at once each get
  a correct result and leave one valid entry. A temporary file a killed process left is
  deleted once it is an hour old.
- An entry holds the key it was stored under and is used only under that key: a file
  copied or renamed to another entry's name (another program of the same signature) is
  a miss, never another program's executable run in its place.
- An entry that fails its checks (truncated, corrupted, other signature, another key) is
  deleted with a `CacheWarning` and the module is compiled again. A folder that cannot be
  written gives one `CacheWarning`, and the process then runs without the cache.
- It deletes only what it wrote: files named as its entries (a 64-digit key + `.aotx`)
  and its temporary files, regular files only (never a link), in a folder it owns: one
  holding its `CACHEDIR.TAG` (written when it first stores there). A folder that holds
  other files and no tag is refused with one `CacheWarning`, so pointing the cache at a
  folder of the user's own artifacts never deletes them.
- An entry is read only if it is a regular file no larger than the cap, opened without
  following links, so a FIFO or a link to /dev/zero at an entry's name is a miss, not a
  hang or unbounded memory.
- Backends whose executables do not serialize (`executable_format` None: the interpreter)
  are not cached. A sharded program is, with its device placement in the key (the ids of
  the devices it runs on, in order, and how many devices the run has): an entry holds its
  layout as an artifact does, and loads onto those same devices.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import threading
import time
import warnings
from pathlib import Path
from typing import NamedTuple

from aotkit import _compat, _files, artifacts, modules
from aotkit._traceback import user_stacklevel
from aotkit._version import __version__
from aotkit.backends.base import PrunedExecutable
from aotkit.errors import ArtifactError, CacheWarning

ENV = "AOTKIT_CACHE_DIR"
DEFAULT_MAX_BYTES = 2 << 30
SUFFIX = artifacts.SUFFIX
STALE_TMP_S = 3600.0
_ENTRY_NAME = re.compile(r"[0-9a-f]{64}" + re.escape(SUFFIX))
# _files.write_atomic's temporary names: "." + the entry's name + "." + random + ".tmp"
_TMP_NAME = re.compile(r"\.[0-9a-f]{64}" + re.escape(SUFFIX) + r"\.[A-Za-z0-9_]+\.tmp")
# The Cache Directory Tagging Specification's file: backup tools skip the folder, and
# aotkit knows the folder is its own.
TAG = "CACHEDIR.TAG"
_TAG_TEXT = (
    "Signature: 8a477f597d28d172789f06886806bc55\n"
    "# This folder is aotkit's persistent compilation cache (aotkit.cache).\n"
    "# aotkit deletes only its own entries here: 64-digit keys ending in .aotx.\n"
)
# v2: entries hold their key (artifacts.CACHE_KEY); v1 entries, which do not, are never read.
_KEY_VERSION = b"aotkit-cache-key-v2\0"
_STRIP = "builtin.module(strip-debuginfo)"


class CacheStats(NamedTuple):
    """Hits and misses of this process's lookups; entries and bytes now in `directory`
    (None when the cache is off)."""

    hits: int
    misses: int
    entries: int
    bytes: int
    directory: str | None
    max_bytes: int


_ENV_DEFAULT = object()
_lock = threading.Lock()
_configured_dir: object = _ENV_DEFAULT
_max_bytes = DEFAULT_MAX_BYTES
_hits = 0
_misses = 0
# Folders found unwritable in this process (each warned about once), skipped from then on.
_broken: set[str] = set()
# Folders known to be the cache's own (they hold its tag).
_owned: set[str] = set()


def _is_own_file(entry: os.DirEntry, pattern: re.Pattern) -> bool:
    return pattern.fullmatch(entry.name) is not None and entry.is_file(follow_symlinks=False)


def _claim(folder: Path) -> bool:
    """Whether `folder` is the cache's own, tagging it when it holds nothing but the cache's
    files (a new folder, or one an aotkit before the tag filled); a folder with other files
    and no tag is refused once with a CacheWarning."""
    if str(folder) in _owned:
        return True
    tag = folder / TAG
    try:
        st = os.lstat(tag)
        if stat.S_ISREG(st.st_mode):
            _owned.add(str(folder))
            return True
    except FileNotFoundError:
        pass
    except OSError as e:
        _give_up(folder, e)
        return False
    try:
        with os.scandir(folder) as it:
            others = sorted(
                e.name
                for e in it
                if not (_is_own_file(e, _ENTRY_NAME) or _is_own_file(e, _TMP_NAME))
                and e.name != TAG
            )
    except FileNotFoundError:
        others = []
    except OSError as e:
        _give_up(folder, e)
        return False
    if others:
        with _lock:
            if str(folder) in _broken:
                return False
            _broken.add(str(folder))
        shown = ", ".join(repr(n) for n in others[:3]) + (", ..." if len(others) > 3 else "")
        warnings.warn(
            f"aotkit cache: {folder} holds files aotkit did not write ({shown}) and no "
            f"{TAG}, so it is not used as the cache (the cache deletes its entries to stay "
            f"under its size cap, and must never delete yours); set {ENV} to a folder of its "
            f"own, or {ENV}=off",
            CacheWarning,
            stacklevel=user_stacklevel(),
        )
        return False
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with open(tag, "x") as f:
            f.write(_TAG_TEXT)
    except FileExistsError:
        pass  # another process tagged it first
    except OSError as e:
        _give_up(folder, e)
        return False
    _owned.add(str(folder))
    return True


_unusable_settings: set[str] = set()


def _default_directory() -> Path | None:
    text = os.environ.get(ENV, "").strip()
    if text.lower() == "off":
        return None
    try:
        if text:
            return Path(text).expanduser()
        xdg = os.environ.get("XDG_CACHE_HOME", "").strip()
        base = Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".cache"
        return base / "aotkit"
    except RuntimeError as e:  # `~nosuchuser/...`, or no home directory at all
        # The cache must never fail a compile: it is off, said once per setting.
        if text not in _unusable_settings:
            _unusable_settings.add(text)
            shown = f"{ENV}={text!r}" if text else "the default folder (~/.cache/aotkit)"
            warnings.warn(
                f"aotkit cache: {shown} cannot be used ({e}); running without the persistent "
                f"cache: set {ENV} to an absolute folder path, or {ENV}=off",
                CacheWarning,
                stacklevel=user_stacklevel(),
            )
        return None


def directory() -> Path | None:
    """The cache folder compiles use now, or None when the cache is off."""
    if _configured_dir is _ENV_DEFAULT:
        return _default_directory()
    return _configured_dir


def configure(*, dir=_ENV_DEFAULT, max_bytes: int | None = None) -> None:  # noqa: A002
    """Sets the cache folder and size cap for this process.

    `dir`: a folder (created on first write), `"off"` to turn the cache off, or None to go
    back to the default (`AOTKIT_CACHE_DIR`, `$XDG_CACHE_HOME/aotkit`, `~/.cache/aotkit`).
    `max_bytes`: the size cap (default 2 GiB); the least recently used entries go first.
    Arguments left out keep their value.
    """
    global _configured_dir, _max_bytes
    if max_bytes is not None and (
        isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 0
    ):
        raise ValueError(
            f"aotkit.cache.configure: max_bytes={max_bytes!r}; give a byte count >= 0, "
            "e.g. 2 << 30 for 2 GiB"
        )
    if dir is _ENV_DEFAULT:
        new_dir = _configured_dir
    elif dir is None:
        new_dir = _ENV_DEFAULT
    elif dir == "off":
        new_dir = None
    elif isinstance(dir, str | os.PathLike):
        try:
            new_dir = Path(dir).expanduser()
        except RuntimeError as e:
            raise ValueError(
                f"aotkit.cache.configure: dir={dir!r}: {e}; give a folder path"
            ) from None
    else:
        raise TypeError(
            f"aotkit.cache.configure: dir={dir!r}; give a folder path, 'off', or None for "
            f"the default (${ENV}, else $XDG_CACHE_HOME/aotkit, else ~/.cache/aotkit)"
        )
    with _lock:
        _configured_dir = new_dir
        if max_bytes is not None:
            _max_bytes = max_bytes
        _broken.clear()
        _owned.clear()


def _entries(folder: Path) -> list[os.DirEntry]:
    try:
        with os.scandir(folder) as it:
            return [e for e in it if _is_own_file(e, _ENTRY_NAME)]
    except OSError:
        return []


def stats() -> CacheStats:
    """Hits and misses so far in this process, and the entries and bytes in the folder."""
    folder = directory()
    entries = _entries(folder) if folder is not None else []
    size = 0
    for entry in entries:
        try:
            size += entry.stat().st_size
        except OSError:
            pass  # deleted meanwhile by another process
    return CacheStats(
        _hits, _misses, len(entries), size, str(folder) if folder else None, _max_bytes
    )


def clear() -> None:
    """Deletes every entry (and temporary file) of the cache in its folder, and nothing
    else: not in a folder that is not the cache's own; counters are kept."""
    folder = directory()
    if folder is None or not folder.exists() or not _claim(folder):
        return
    try:
        with os.scandir(folder) as it:
            doomed = [
                e.path for e in it if _is_own_file(e, _ENTRY_NAME) or _is_own_file(e, _TMP_NAME)
            ]
    except OSError:
        return
    for path in doomed:
        _unlink(path)


# --- the compile stage's hooks -------------------------------------------------------------


def _usable_directory() -> Path | None:
    folder = directory()
    if folder is None or str(folder) in _broken:
        return None
    if str(folder) not in _owned and folder.exists() and not _claim(folder):
        return None
    return folder


def key(lowered, backend, options) -> str | None:
    """The entry name for compiling `lowered` on `backend` with `options`, or None when the
    cache is off or the backend's executables do not serialize."""
    if backend.executable_format is None or _usable_directory() is None:
        return None
    if lowered.partitioning is not None and _compat.sharding_support() is not None:
        return None  # no sharded executables here: the compile says why
    try:
        shown_options = sorted((str(k), repr(v)) for k, v in (options or {}).items())
    except ValueError:  # an int past Python's 4300 printable digits: the backend refuses it
        return None
    data = _stripped_bytecode(lowered._module, lowered._lc)
    config = _config(backend, shown_options, lowered.donated)
    pruned = lowered._program.pruned
    if pruned:
        # Leaves the module takes no argument for (the JAX front end's, as jax.jit prunes
        # them): a call still takes and checks each, so an entry's signature holds their
        # specs, which the module does not say.
        specs = lowered.flat_in_specs
        config["pruned"] = [[i, str(specs[i])] for i in pruned]
    partitioning = lowered.partitioning
    if partitioning is not None:
        everywhere = list(backend.global_devices())
        placed = partitioning.devices or everywhere[: partitioning.num_devices]
        config["devices"] = [[d.process_index, d.id] for d in placed]
        config["global_devices"] = len(everywhere)
    return _digest(config, data)


def _stripped_bytecode(module, lc) -> bytes:
    """The module's bytecode without its locations (they change no program)."""
    from jaxlib.mlir import passmanager

    with lc:
        copy = module.operation.clone()
        strip = lc.pipelines.get(_STRIP)
        if strip is None:
            strip = lc.pipelines[_STRIP] = passmanager.PassManager.parse(_STRIP)
        strip.run(copy)
        return modules.bytecode(copy)


def _config(backend, shown_options, donated) -> dict:
    import jaxlib

    return {
        "aotkit": __version__,
        "jaxlib": jaxlib.__version__,
        "target": backend.target(),
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
        "options": shown_options,
        "donated": list(donated),
    }


def _digest(config: dict, data: bytes) -> str:
    digest = hashlib.sha256(_KEY_VERSION)
    digest.update(json.dumps(config, sort_keys=True).encode())
    digest.update(b"\0")
    digest.update(data)
    return digest.hexdigest()


def program_digest(module, lc) -> str:
    """SHA-256 of a (symbolic) program's bytecode without locations: what `shape_key`
    names the program by."""
    return hashlib.sha256(_stripped_bytecode(module, lc)).hexdigest()


def shape_key(program_digest, in_specs, backend, options, donated) -> str | None:
    """The entry name for one specialization of a symbolic program (aotkit/symbolic/specialize.py):
    the program (`program_digest()`, called only when the cache is on) and the concrete
    argument specs `in_specs`, with what `key` holds of the backend and options. None when
    the cache is off or the backend's executables do not serialize."""
    if backend.executable_format is None or _usable_directory() is None:
        return None
    try:
        shown_options = sorted((str(k), repr(v)) for k, v in (options or {}).items())
    except ValueError:
        return None
    config = _config(backend, shown_options, donated)
    config["specialized"] = [str(s) for s in in_specs]
    return _digest(config, program_digest().encode())


def get(cache_key: str, lowered, backend, options, unread: tuple[int, ...] = ()):
    """The executable stored under `cache_key`, or None (a miss); an unusable entry is
    deleted with a CacheWarning. `unread` are the leaves the executable takes no argument
    for (`Program.unread`)."""
    global _hits, _misses
    folder = _usable_directory()
    if folder is None:
        return None
    path = folder / (cache_key + SUFFIX)
    data = _read_entry(path)
    if data is None:
        with _lock:
            _misses += 1
        return None
    try:
        artifact = artifacts.unpack(
            data, str(path), where="aotkit cache: entry", fix="deleted it; compiling again"
        )
        # The name is only where the entry lies: a file copied or renamed there (another
        # program of the same signature) would run as this one, so the entry must hold the
        # key itself, which digests the program, the target, the options and the versions.
        stored = artifact.header.get(artifacts.CACHE_KEY)
        if stored != cache_key:
            held = "no key" if stored is None else f"the key {stored}"
            raise ArtifactError(
                f"aotkit cache: entry {path} holds {held}, not the one its name says (it was "
                "copied or renamed there from another program or target); deleted it; "
                "compiling again"
            )
        sharded = lowered.partitioning is not None
        # A sharded entry's target has the run's device count too (SpmdBackend.target_for).
        if (
            artifact.target
            != (backend.target_for(artifact.target) if sharded else backend.target())
            or artifact.executable_format != backend.executable_format
            or (artifact.signature.flat_in_specs, artifact.signature.flat_out_specs)
            != (lowered.flat_in_specs, lowered.flat_out_specs)
            or sharded != (artifact.partitioning is not None)
            or artifact.pruned != unread
        ):
            raise ArtifactError(
                f"aotkit cache: entry {path} was written for another signature or backend "
                "than its key says; deleted it; compiling again"
            )
        if sharded:
            executable = backend.deserialize_spmd(
                artifact.section(artifacts.EXECUTABLE) or b"",
                name=lowered.name,
                in_specs=lowered.flat_in_specs,
                out_specs=lowered.flat_out_specs,
                partitioning=lowered.partitioning,
                options=options,
                donates=any(lowered.donated),
            )
        else:
            executable = backend.deserialize(
                artifact.section(artifacts.EXECUTABLE) or b"",
                name=lowered.name,
                in_specs=artifact.executable_in_specs,
                out_specs=lowered.flat_out_specs,
                options=options,
            )
            if artifact.pruned:
                executable = PrunedExecutable(executable, lowered.flat_in_specs, artifact.pruned)
    except Exception as e:  # whatever an entry holds, it never stops the program: recompiled
        message = str(e)
        if not message.startswith("aotkit cache:"):
            message = f"aotkit cache: entry {path} does not load ({e}); deleted it; compiling again"
        warnings.warn(message, CacheWarning, stacklevel=user_stacklevel())
        try:
            path.unlink()
        except OSError:
            pass
        with _lock:
            _misses += 1
        return None
    try:
        os.utime(path)  # most recently used: evicted last
    except OSError:
        pass
    with _lock:
        _hits += 1
    return executable


def _read_entry(path: Path) -> bytes | None:
    """The bytes of the entry at `path`, or None: absent, not a regular file (opened without
    following a link or blocking on a FIFO), or larger than the cap."""
    try:
        return _files.read_regular(
            path, where=f"aotkit cache: {path}", fix="", limit=_max_bytes, follow=False
        )
    except (OSError, ValueError):
        return None


def put(cache_key: str, lowered, executable, options, *, portable: bytes | None = None) -> None:
    """Stores `executable` (compiled from `lowered`) under `cache_key`, then evicts.
    `portable` is the program's portable StableHLO where `lowered` is no Lowered stage
    (a specialization: aotkit/symbolic/specialize.py)."""
    folder = _usable_directory()
    if folder is None:
        return
    n_in, n_out = len(lowered.flat_in_specs), len(lowered.flat_out_specs)
    try:
        serialized = executable.serialize()
        if serialized is None:
            return  # this executable has no serialized form (a plugin without it)
        data = artifacts.pack_compiled(
            name=lowered.name,
            executable=executable,
            serialized=serialized,
            portable=(
                portable
                if portable is not None
                else artifacts.portable_artifact(lowered, executable.backend.platform)
            ),
            # Entries hold flat signatures: the caller has the pytrees, and custom pytree
            # nodes (which artifacts refuse) then cache like any other.
            in_tree={"tuple": [{"tuple": ["*"] * n_in}, {"dict": []}]},
            out_tree={"tuple": ["*"] * n_out},
            donated=lowered.donated,
            options=options,
            text=False,
            cache_key=cache_key,
            aborts=(
                None
                if portable is not None
                else artifacts.aborts_on(lowered._module, executable.backend.platform)
            ),
        )
    except Exception as e:  # the cache must never fail a compile that succeeded
        warnings.warn(
            f"aotkit cache: cannot store {lowered.name!r} ({type(e).__name__}: {e}); it "
            "stays uncached",
            CacheWarning,
            stacklevel=user_stacklevel(),
        )
        return
    if len(data) > _max_bytes:
        return
    try:
        folder.mkdir(parents=True, exist_ok=True)
        if not _claim(folder):
            return
        path = folder / (cache_key + SUFFIX)
        if os.path.lexists(path) and not path.is_file():
            # Not an entry (a folder, a link, a FIFO): this one key stays uncached; the
            # cache itself still works.
            warnings.warn(
                f"aotkit cache: {path} is not a regular file, so {lowered.name!r} stays "
                "uncached; remove it to cache this program",
                CacheWarning,
                stacklevel=user_stacklevel(),
            )
            return
        _files.write_atomic(path, data)
    except OSError as e:
        _give_up(folder, e)
        return
    _evict(folder)


def _give_up(folder: Path, error: OSError) -> None:
    with _lock:
        if str(folder) in _broken:
            return
        _broken.add(str(folder))
    reason = error.strerror or str(error)
    warnings.warn(
        f"aotkit cache: cannot write to {folder} ({reason}); running without the persistent "
        f"cache: set {ENV} to a writable folder, or {ENV}=off",
        CacheWarning,
        stacklevel=user_stacklevel(),
    )


def _evict(folder: Path) -> None:
    """Deletes least recently used entries until the folder fits `max_bytes`, and
    temporary files older than STALE_TMP_S (writes a killed process left behind)."""
    now = time.time()
    entries = []
    total = 0
    try:
        with os.scandir(folder) as it:
            for e in it:
                own_tmp = _is_own_file(e, _TMP_NAME)
                if not (own_tmp or _is_own_file(e, _ENTRY_NAME)):
                    continue  # never a file the cache did not write
                try:
                    st = e.stat(follow_symlinks=False)
                except OSError:
                    continue
                if own_tmp:
                    if now - st.st_mtime > STALE_TMP_S:
                        _unlink(e.path)
                else:
                    entries.append((st.st_mtime, st.st_size, e.path))
                    total += st.st_size
    except OSError:
        return
    if total <= _max_bytes:
        return
    entries.sort()
    for _, size, path in entries:
        if total <= _max_bytes:
            break
        _unlink(path)
        total -= size


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass  # another process got there first
