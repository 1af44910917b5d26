"""aotkit's native runner: building `aotkit-run` and finding PJRT plugins.

`aotkit-run` (aotkit_run.c) and the C API it is built on (aotkit_runtime.h/.c) run an
artifact without Python: they read the container with the checks aotkit.load makes and run
its program through a PJRT C API plugin (docs/deploy.md). The C sources ship with the
package; `build()` compiles them with the machine's C compiler into a cache folder, against
the `pjrt_c_api.h` the `xla-cpu-pjrt` wheel ships (`pip install 'aotkit[native]'`).

This module imports nothing of aotkit: building the runner costs no JAX start-up.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

SOURCES = Path(__file__).resolve().parent
HEADER = SOURCES / "aotkit_runtime.h"
RUNTIME = SOURCES / "aotkit_runtime.c"
RUNNER = SOURCES / "aotkit_run.c"
PJRT_HEADER = "pjrt_c_api.h"
CFLAGS = ("-std=c11", "-O2", "-Wall", "-fvisibility=hidden")
LIBS = ("-ldl", "-lm")


def _package_dir(name: str) -> Path | None:
    """The folder of the installed package `name` (not imported), or None."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    if spec.submodule_search_locations:
        return Path(next(iter(spec.submodule_search_locations)))
    return Path(spec.origin).parent if spec.origin else None


def cpu_plugin() -> Path | None:
    """The CPU PJRT plugin of the `xla-cpu-pjrt` wheel, or None where it is not installed."""
    folder = _package_dir("xla_plugins.xla_cpu_pjrt")
    path = folder / "xla_cpu_pjrt.so" if folder else None
    return path if path is not None and path.is_file() else None


def tpu_plugin() -> Path | None:
    """libtpu's PJRT plugin (the `tpu` extra), or None."""
    folder = _package_dir("libtpu")
    path = folder / "libtpu.so" if folder else None
    return path if path is not None and path.is_file() else None


def cuda_plugin() -> Path | None:
    """The jax CUDA plugin's PJRT library, or None."""
    for name in ("jax_plugins.xla_cuda13", "jax_plugins.xla_cuda12"):
        folder = _package_dir(name)
        if folder is not None:
            for path in sorted(folder.glob("xla_cuda_plugin*.so")):
                return path
    return None


def pjrt_include() -> Path | None:
    """The folder holding `pjrt_c_api.h`: `AOTKIT_PJRT_INCLUDE`, else xla-cpu-pjrt's."""
    given = os.environ.get("AOTKIT_PJRT_INCLUDE")
    if given:
        return Path(given)
    folder = _package_dir("xla_plugins.xla_cpu_pjrt")
    path = folder / "include" if folder else None
    return path if path is not None and (path / PJRT_HEADER).is_file() else None


def compiler() -> str | None:
    """The C compiler: `CC`, else cc, gcc or clang on PATH; None if there is none."""
    given = os.environ.get("CC")
    if given:
        return shutil.which(given.split()[0]) and given
    for name in ("cc", "gcc", "clang"):
        if shutil.which(name):
            return name
    return None


def cache_dir() -> Path:
    """Where builds go: `AOTKIT_NATIVE_DIR`, else `$XDG_CACHE_HOME/aotkit-native`, else
    `~/.cache/aotkit-native` (apart from the compilation cache, which prunes its own folder)."""
    given = os.environ.get("AOTKIT_NATIVE_DIR")
    if given:
        return Path(given)
    xdg = os.environ.get("XDG_CACHE_HOME", "").strip()
    base = Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".cache"
    return base / "aotkit-native"


def defines() -> list[str]:
    """The plugins found now, compiled in as the runner's defaults for `--platform`."""
    out = []
    for macro, path in (
        ("AOTKIT_DEFAULT_CPU_PLUGIN", cpu_plugin()),
        ("AOTKIT_DEFAULT_TPU_PLUGIN", tpu_plugin()),
        ("AOTKIT_DEFAULT_CUDA_PLUGIN", cuda_plugin()),
    ):
        if path is not None:
            out.append(f'-D{macro}="{path}"')
    return out


def compile_flags() -> list[str]:
    """The flags a C program using aotkit_runtime.h compiles aotkit_runtime.c with (include
    folders, the plugin defaults); link with `LIBS`."""
    include = pjrt_include()
    if include is None:
        raise RuntimeError(
            f"aotkit.native: no {PJRT_HEADER} found; install the CPU plugin, which ships it "
            "(pip install 'aotkit[native]'), or set AOTKIT_PJRT_INCLUDE to its folder"
        )
    return [*CFLAGS, f"-I{SOURCES}", f"-I{include}", *defines()]


def build(cache: str | os.PathLike | None = None, *, force: bool = False) -> Path:
    """Compiles `aotkit-run` with the system C compiler into `cache` (default `cache_dir()`)
    and returns its path. A build is reused while its sources, header, compiler and plugin
    defaults are unchanged; RuntimeError where no compiler or no pjrt_c_api.h is found, or
    the compiler fails (its message included)."""
    cc = compiler()
    if cc is None:
        raise RuntimeError(
            "aotkit.native.build: no C compiler (cc, gcc or clang) on PATH; install one, or set CC"
        )
    flags = compile_flags()
    include = pjrt_include()
    digest = hashlib.sha256()
    for part in (cc, *flags, *LIBS, sys.platform):
        digest.update(part.encode() + b"\0")
    for path in (HEADER, RUNTIME, RUNNER, include / PJRT_HEADER):
        digest.update(path.read_bytes())
    folder = Path(cache) if cache is not None else cache_dir()
    folder = folder / digest.hexdigest()[:16]
    target = folder / "aotkit-run"
    if target.is_file() and not force:
        return target
    folder.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(prefix=".aotkit-run.", dir=folder)
    os.close(fd)
    command = [*cc.split(), *flags, str(RUNTIME), str(RUNNER), "-o", temporary, *LIBS]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        os.unlink(temporary)
        raise RuntimeError(
            f"aotkit.native.build: {cc} failed (exit {result.returncode}): "
            f"{result.stderr.strip()[-2000:]}; check the compiler, or report this"
        )
    os.chmod(temporary, 0o755)
    os.replace(temporary, target)
    return target
