"""The `iree` backend: IREE's compiler and runtime, from the optional extra `aotkit[iree]`.

Compiling. The module goes to IREE as StableHLO text (with its `file:line` locations, so
IREE's diagnostics point at the user's code), never as an object of aotkit's MLIR context.
`iree-compile` runs in a child process: a compiler crash (an LLVM fatal error, a signal)
is then a `CompileError` and never takes the caller's process with it. Measured here, the
child process adds about 15 ms to the compiler's own 200 ms on the smallest module.

Meaning is kept. IREE demotes float64 to float32 unless told otherwise; aotkit passes
`--iree-input-demote-f64-to-f32=false` and `--iree-input-demote-i64-to-i32=false` and
refuses `options` that would convert types again (`iree-input-demote-*`,
`iree-input-promote-*`), since the executable would no longer have the compiled
signature. Ops IREE 3.13 compiles to other values than the spec's are rewritten first
(`_iree_rewrites`); nothing IREE computes correctly is refused. float64 functions that
IREE takes from the C math library (sin, atan2, fmod, ...), which its embedded ELF does not
link, are compiled again as a system library linked with the host's libm. What IREE cannot
compile fails in iree-compile, and a failure of a known kind (`_LIMITATIONS`) reads "IREE
limitation: ...".

Targets. `target="llvm-cpu"` (the default: this machine's CPU, `cpu="host"`), `"cuda"`,
`"rocm"` or `"vulkan-spirv"` with `target_options` (see `TARGETS`) compile without the
device being present; the runtime starts when the executable first runs, and a target this
machine cannot run is a RuntimeError then. The executable's bytes are `executable.vmfb`,
and `IreeBackend.load_executable` rebuilds an executable from them.

Trust. A vmfb is executable code. Reading one runs IREE's verifier over its flatbuffer and
the VM bytecode of every function, and aotkit's check of the registers that bytecode names
(IREE's `iree-dump-module` disassembles it in a child process; the verifier leaves i32
register numbers unchecked, and one out of range writes past the register file when the
function runs); `deserialize` (artifacts, the persistent cache) then loads a vmfb meant
for this machine into the runtime, where IREE checks the flatbuffers and ELF headers of its
HAL executables (a system library, as float64 math is compiled, is loaded as a shared
object, whose initializers run then). A refusal at either step is a CompileError, so that
`aotkit.load` compiles the portable module instead. Nothing checks the machine code inside
those ELF files: a vmfb that verifies may still crash the process or compute anything at
all, so it is as trusted as whoever wrote it (`aotkit.load(..., portable_only=True)` never
loads one).

Dynamic shapes. `compile_dynamic` compiles a symbolic program (dynamic StableHLO) once
into one vmfb whose `main` takes dynamic shapes, after aotkit/symbolic/prover.py has
proven its shapes for every size and aotkit/backends/_iree_dynamic.py has put it in forms
IREE 3.13 compiles dynamically; its executable checks each new set of argument shapes
against its symbolic specs and constraints, and returns what the runtime returns, checked
against the result specs (aotkit/symbolic/specialize.py's `DynamicExecutable` drives it).

Views. `as_text()` is the module after IREE's `flow` phase, where dispatch regions (IREE's
fusions) are formed; it is compiled on first request. `cost_analysis()` is None: IREE has
no cost model. `memory_analysis()` reports IREE's scheduling statistics (transient memory)
and the vmfb's size; argument and output sizes come from the signature. Results are
`numpy.ndarray` copied from IREE's buffers (its `result_type`; see aotkit/backends/base.py).
"""

from __future__ import annotations

import importlib.util
import json
import os
import platform
import re
import signal
import subprocess
import tempfile
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from jaxlib.mlir import ir

from aotkit import _context, dtypes, modules
from aotkit.backends import _iree_dynamic, _iree_rewrites
from aotkit.backends.base import (
    ArgumentMismatch,
    Backend,
    Executable,
    MemoryAnalysis,
    check_verifies,
    describe,
    host_cpu,
    host_value,
)
from aotkit.errors import CompileError, printable
from aotkit.specs import ShapeDtype
from aotkit.symbolic import algebra

INSTALL_HINT = "pip install 'aotkit[iree]' (iree-base-compiler and iree-base-runtime)"
# The phase `as_text()` shows: dispatch regions formed, before code generation.
TEXT_PHASE = "flow"


@dataclass(frozen=True)
class Target:
    """One compilation target: its device flags, the runtime driver it needs, its options."""

    name: str
    device_flags: tuple[str, ...]
    driver: str
    # target_options key -> iree-compile flag.
    options: Mapping[str, str]


TARGETS: dict[str, Target] = {
    t.name: t
    for t in (
        Target(
            "llvm-cpu",
            ("--iree-hal-target-device=local", "--iree-hal-local-target-device-backends=llvm-cpu"),
            "local-task",
            {
                "cpu": "iree-llvmcpu-target-cpu",
                "cpu_features": "iree-llvmcpu-target-cpu-features",
                "triple": "iree-llvmcpu-target-triple",
            },
        ),
        Target(
            "cuda",
            ("--iree-hal-target-device=cuda",),
            "cuda",
            {"arch": "iree-cuda-target", "features": "iree-cuda-target-features"},
        ),
        Target(
            "rocm",
            ("--iree-hal-target-device=hip",),
            "hip",
            {"arch": "iree-rocm-target", "features": "iree-rocm-target-features"},
        ),
        Target(
            "vulkan-spirv",
            ("--iree-hal-target-device=vulkan",),
            "vulkan",
            {"arch": "iree-vulkan-target", "features": "iree-vulkan-target-features"},
        ),
    )
}
DEFAULT_TARGET = "llvm-cpu"

# Flags aotkit always passes; float64 and int64 stay what the module says.
_BASE_FLAGS = (
    "--iree-input-type=stablehlo",
    "--iree-input-demote-f64-to-f32=false",
    "--iree-input-demote-i64-to-i32=false",
    "--mlir-print-op-on-diagnostic=false",
)
# Option names aotkit sets itself, and what sets them instead.
_RESERVED_OPTIONS = {
    "iree-input-type": "aotkit always compiles StableHLO",
    "iree-hal-target-device": "use target=",
    "iree-hal-target-backends": "use target=",
    "iree-hal-local-target-device-backends": "use target=",
    "compile-to": "use Compiled.as_text() for IREE's IR",
    "compile-from": "aotkit always compiles from StableHLO",
    "o": "aotkit keeps the output in memory",
    "output-format": "aotkit keeps the output in memory",
    "iree-vm-bytecode-module-output-format": "aotkit reads the binary vmfb",
    "iree-scheduling-dump-statistics-format": "aotkit reads them for memory_analysis()",
    "iree-scheduling-dump-statistics-file": "aotkit reads them for memory_analysis()",
}
_RESERVED_OPTIONS.update(
    {flag: "use target_options=" for t in TARGETS.values() for flag in t.options.values()}
)
# Options that convert element types, so that @main no longer has the compiled signature.
_TYPE_CHANGING = re.compile(r"^iree-input-(demote|promote)-")
_OPTION_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_OPTION_VALUE_TYPES = (bool, int, float, str)


_PACKAGES = ("iree.compiler", "iree.runtime")


def installed() -> bool:
    """Whether IREE's compiler and runtime packages are installed (their libraries not loaded)."""
    try:
        return all(importlib.util.find_spec(m) is not None for m in _PACKAGES)
    except ImportError:  # no `iree` package at all
        return False


def create() -> IreeBackend:
    try:
        # lazy: iree is an optional extra (aotkit[iree]); without it this module still imports
        from iree.compiler.tools import binaries
        from iree.runtime import version as runtime_version
    except ImportError as e:
        raise ValueError(
            f"backends.get: backend 'iree' is not usable: {modules.diagnostic(e)}; get it with "
            f"{INSTALL_HINT}"
        ) from e
    try:
        compiler = binaries.find_tool("iree-compile")
    except ValueError as e:
        raise ValueError(
            f"backends.get: backend 'iree' has no iree-compile tool: {modules.diagnostic(e)}; "
            f"reinstall it with {INSTALL_HINT}"
        ) from e
    try:
        linker = binaries.find_tool("iree-lld")
    except ValueError:
        linker = None  # iree-compile then finds its own
    return IreeBackend(compiler, linker, runtime_version.VERSION, _dumper())


def _dumper() -> str | None:
    """iree-base-runtime's `iree-dump-module` (IREE's own `iree-dump-module` script finds it
    the same way), or None where this installation lacks it."""
    try:
        # lazy: iree is an optional extra; this runs only when the backend is created
        from iree import _runtime_libs
    except ImportError:
        return None
    path = os.path.join(_runtime_libs.__path__[0], "iree-dump-module")
    return path if os.access(path, os.X_OK) else None


# platform.machine() and LLVM triples name some architectures differently.
_ARCH_ALIASES = {"amd64": "x86_64", "x64": "x86_64", "arm64": "aarch64"}


def _arch(name: str) -> str:
    name = name.lower()
    return _ARCH_ALIASES.get(name, name)


def runs_here(target: str, target_options: Mapping[str, str]) -> bool:
    """Whether a vmfb for `target` is meant for this machine: llvm-cpu for the host, or for a
    triple of the host's architecture. Only then is a vmfb that will not load at fault."""
    if target != "llvm-cpu":
        return False
    triple = target_options.get("triple")
    return triple is None or _arch(triple.split("-", 1)[0]) == _arch(platform.machine())


def _driver_error_line(e: BaseException) -> str:
    """IREE's status text without the C source location prefix."""
    line = modules.diagnostic(e)
    match = re.search(r"[A-Z_]+; (.*)$", line)
    line = match.group(1).strip().rstrip(";") if match else line
    # The device target IREE could not match is printed whole; its name is enough.
    return line.split(": #hal.", 1)[0]


class IreeBackend(Backend):
    """IREE: compiles with `iree-compile` (child process), runs with `iree.runtime`."""

    name = "iree"
    platform = "cpu"
    executable_format = "iree-vmfb"
    cross_compiles = True  # `compile(target=..., target_options=...)`: any IREE target
    dynamic_shapes = True  # `compile_dynamic`: one vmfb for every size of a symbolic program

    def __init__(self, compiler: str, linker: str | None, version: str, dumper: str | None):
        self._compiler = compiler
        self._linker = linker
        self._dumper = dumper
        self._version = version
        self._lock = threading.Lock()
        self._instance = None
        self._devices: dict[str, object] = {}
        self._hal_modules: dict[str, object] = {}

    @property
    def version(self) -> str:
        return f"IREE {self._version}"

    def devices(self) -> list:
        return [self._device("local-task")]

    # -- targets and options

    def target(self) -> dict[str, str]:
        """What this backend compiles for by default: llvm-cpu for this machine's CPU."""
        return self.target_dict(DEFAULT_TARGET, {})

    def target_dict(self, target: str, target_options: Mapping[str, str]) -> dict[str, str]:
        """The artifact target of a vmfb compiled for `target` with `target_options`."""
        found = {
            "backend": self.name,
            "version": self.version,
            "target": target,
            "target_options": ",".join(f"{k}={v}" for k, v in sorted(target_options.items())),
        }
        if (
            target == "llvm-cpu"
            and target_options.get("cpu", "host") == "host"
            and ("triple" not in target_options)
        ):
            found["host"] = host_cpu()  # compiled for this host's instruction set
        return found

    def target_for(self, saved: dict[str, str]) -> dict[str, str]:
        """A vmfb cross-compiled for another target loads as it is (running it needs that
        target's device); llvm-cpu for the host must be for this host."""
        name = saved.get("target")
        options = dict(
            item.split("=", 1) for item in saved.get("target_options", "").split(",") if item
        )
        try:
            self.normalize_target(name, options)
        except (TypeError, ValueError):
            return self.target()
        return self.target_dict(name, options)

    def deserialize(
        self, data: bytes, *, name, in_specs, out_specs, options=None, target=None
    ) -> IreeExecutable:
        saved = target or self.target()
        options_of = dict(
            item.split("=", 1) for item in saved.get("target_options", "").split(",") if item
        )
        try:
            executable = self.load_executable(
                data,
                in_specs,
                out_specs,
                name=name,
                target=saved.get("target"),
                target_options=options_of,
            )
        except (TypeError, ValueError) as e:
            raise CompileError(
                f"backend 'iree' could not load the vmfb of {name!r}: {e}",
                backend=self.name,
                module_name=name,
            ) from e
        if runs_here(executable.target, executable.target_options):
            # Loaded into the runtime now, so that HAL executables IREE refuses make this
            # load fail (and aotkit.load compile the portable module), not the first call.
            try:
                executable.runtime_executable()
            except RuntimeError as e:
                raise CompileError(str(e), backend=self.name, module_name=name) from e
        return executable

    def normalize_target(self, target=None, target_options=None) -> tuple:
        """Validates `target` and `target_options`; returns a hashable key for compile caches
        (for None and None too: the default target, llvm-cpu for this host)."""
        spec = self._target(target)
        where = "backend 'iree'"
        if target_options is None:
            target_options = {}
        if not isinstance(target_options, Mapping):
            raise TypeError(
                f"{where}: target_options must be a dict, got {type(target_options).__name__}; "
                f"e.g. {{'cpu': 'host'}} for target 'llvm-cpu'"
            )
        for key, value in target_options.items():
            if key not in spec.options:
                raise ValueError(
                    f"{where}: target {spec.name!r} has no option {key!r}; its options are "
                    f"{', '.join(spec.options)}"
                )
            if not isinstance(value, str) or not value or "\n" in value or "\0" in value:
                raise TypeError(
                    f"{where}: target option {key!r} must be a non-empty one-line str, got "
                    f"{value!r}; e.g. 'sm_80' for 'arch'"
                )
        return (spec.name, tuple(sorted(target_options.items())))

    def _target(self, target) -> Target:
        if target is None:
            return TARGETS[DEFAULT_TARGET]
        if not isinstance(target, str) or target not in TARGETS:
            raise ValueError(
                f"backend 'iree': unknown target {target!r}; targets are {', '.join(TARGETS)}"
            )
        return TARGETS[target]

    def _flags(self, options, target: Target, target_options: Mapping[str, str]) -> list[str]:
        where = "backend 'iree'"
        flags = [*_BASE_FLAGS, *target.device_flags]
        if target.name == "llvm-cpu":
            if "cpu" not in target_options and "triple" not in target_options:
                flags.append("--iree-llvmcpu-target-cpu=host")
            if self._linker is not None:
                flags.append(f"--iree-llvmcpu-embedded-linker-path={self._linker}")
        flags += [f"--{target.options[k]}={v}" for k, v in sorted(target_options.items())]
        if options is None:
            return flags
        if not isinstance(options, Mapping):
            raise TypeError(
                f"{where}: options must be a dict of iree-compile flags, got "
                f"{type(options).__name__}; e.g. {{'iree-opt-level': 'O3'}}"
            )
        for key, value in options.items():
            if not isinstance(key, str):
                raise TypeError(f"{where}: option name {key!r} is not a string; use flag names")
            name = key.lstrip("-")
            if not _OPTION_NAME.match(name):
                raise ValueError(
                    f"{where}: option name {key!r} is not an iree-compile flag name; write "
                    "it as in {'iree-opt-level': 'O3'}"
                )
            if name in _RESERVED_OPTIONS:
                reason = _RESERVED_OPTIONS[name]
                raise ValueError(f"{where}: option {key!r} is set by aotkit; {reason}")
            if isinstance(value, bool):
                text = "true" if value else "false"
            elif isinstance(value, _OPTION_VALUE_TYPES):
                text = str(value)
            else:
                raise TypeError(
                    f"{where}: option {key!r} has a {type(value).__name__} value {value!r}; "
                    "iree-compile flags take bool, int, float or str"
                )
            if "\n" in text or "\0" in text:
                raise ValueError(f"{where}: option {key!r} value {value!r} spans lines")
            if _TYPE_CHANGING.match(name) and text not in ("false", "0"):
                raise ValueError(
                    f"{where}: option {key!r} converts element types, so the executable "
                    "would not have the module's signature (aotkit keeps f64, i64, f16 and "
                    "bf16 as written); cast in the program instead"
                )
            flags.append(f"--{name}={text}")
        return flags

    # -- compiling

    def compile(
        self,
        module: ir.Module,
        options: Mapping[str, object] | None = None,
        *,
        target: str | None = None,
        target_options: Mapping[str, str] | None = None,
    ) -> IreeExecutable:
        self.normalize_target(target, target_options)
        spec = self._target(target)
        flags = self._flags(options, spec, target_options or {})
        name = modules.module_name(module)
        where = f"backend 'iree': module {name!r}"
        in_specs, out_specs = modules.signature(module, where)
        with _context.of(module):
            _verify(module, name)
            text = module.operation.get_asm(enable_debug_info=True)
        return self._compile_text(
            text, flags, spec, name, in_specs, out_specs, target_options or {}
        )

    def compile_dynamic(
        self,
        module: ir.Module,
        options: Mapping[str, object] | None,
        in_specs: tuple[ShapeDtype, ...],
        out_specs: tuple[ShapeDtype, ...],
    ) -> IreeExecutable:
        """One vmfb whose `main` takes dynamic shapes, for every size of the symbolic
        signature `in_specs -> out_specs`: the module is proven and put in the forms IREE
        compiles dynamically first (aotkit/backends/_iree_dynamic.py), which raises
        `dynamic.NotDynamic` where it cannot be. For this machine's CPU (llvm-cpu)."""
        spec = self._target(None)
        flags = self._flags(options, spec, {})
        name = modules.module_name(module)
        lc = _context.of(module)
        with lc:
            _verify(module, name)
        text, _ = _iree_dynamic.prepare(module, lc, tuple(in_specs), tuple(out_specs))
        return self._compile_text(text, flags, spec, name, in_specs, out_specs, {})

    def _compile_text(
        self, text: str, flags, spec: Target, name: str, in_specs, out_specs, target_options
    ) -> IreeExecutable:
        text, rewritten = _iree_rewrites.rewrite(text)
        source = text.encode()
        try:
            vmfb, statistics = self._run_compiler(source, flags, name)
        except CompileError as e:
            if not _needs_libm(e, spec, flags):
                raise
            # IREE's embedded ELF links no C math library; a system library links the
            # host's (libm), which the runtime loads as a shared object.
            flags = [*flags, f"--{_LINK_EMBEDDED}=false"]
            try:
                vmfb, statistics = self._run_compiler(source, flags, name)
            except CompileError as again:
                said = str(again).removeprefix(f"backend 'iree' rejected module {name!r}: ")
                raise CompileError(
                    f"backend 'iree' rejected module {name!r}: {LIMITATION}its llvm-cpu code "
                    "calls the C math library, which IREE's embedded ELF does not link, and "
                    f"linking it as a system library with this host's libm failed: {said}; "
                    "install a system linker (binutils' ld) or compile with backend='cpu'",
                    backend="iree",
                    module_name=name,
                ) from again
        return IreeExecutable(
            self,
            name,
            vmfb,
            in_specs,
            out_specs,
            target=spec.name,
            target_options=dict(target_options),
            source=source,
            flags=tuple(flags),
            statistics=statistics,
            rewritten=tuple(rewritten),
        )

    def _run_compiler(
        self, source: bytes, flags: list[str], name: str, *, phase: str | None = None
    ) -> tuple[bytes, dict | None]:
        """Runs iree-compile on `source`; returns (output bytes, scheduling statistics)."""
        with tempfile.TemporaryDirectory(prefix="aotkit-iree-") as tmp:
            output = os.path.join(tmp, "out")
            stats_path = os.path.join(tmp, "statistics.json")
            argv = [self._compiler, "-", "-o", output, *flags]
            if phase is None:
                argv += [
                    "--iree-scheduling-dump-statistics-format=json",
                    f"--iree-scheduling-dump-statistics-file={stats_path}",
                ]
            else:
                argv.append(f"--compile-to={phase}")
            try:
                proc = subprocess.run(argv, input=source, capture_output=True)
            except OSError as e:
                raise CompileError(
                    f"backend 'iree' could not start iree-compile ({self._compiler}): "
                    f"{e.strerror or e}; reinstall it with {INSTALL_HINT}",
                    backend="iree",
                    module_name=name,
                ) from e
            stderr = proc.stderr.decode(errors="replace")
            if proc.returncode != 0:
                self._raise_compile_error(proc.returncode, stderr, flags, name)
            with open(output, "rb") as f:
                out = f.read()
            statistics = None
            if phase is None and os.path.exists(stats_path):
                statistics = _read_statistics(stats_path)
        return out, statistics

    def _raise_compile_error(self, returncode: int, stderr: str, flags, name: str):
        message = _first_diagnostic(stderr)
        # LLVM's command-line parser names the tool first: a flag the compiler does not know.
        if message.startswith("iree-compile: ") and returncode > 0:
            user_flags = [f for f in flags if f not in _BASE_FLAGS]
            raise ValueError(
                f"backend 'iree': compile options rejected: {message}; options are "
                "iree-compile flags without the leading '--', e.g. {'iree-opt-level': 'O3'} "
                f"(flags passed: {' '.join(user_flags)})"
            )
        cause = RuntimeError(stderr)
        if returncode < 0 or "crash backtrace" in stderr or "Stack dump" in stderr:
            raise CompileError(
                f"backend 'iree' rejected module {name!r}: iree-compile crashed "
                f"({_exit_text(returncode)}): {message}; this is an IREE bug, compile with "
                "backend='cpu'",
                backend="iree",
                module_name=name,
            ) from cause
        limitation = _limitation(stderr)
        if limitation is not None:
            raise CompileError(
                f"backend 'iree' rejected module {name!r}: {LIMITATION}{limitation} "
                f"({message}); compute it in a type IREE supports, or compile with "
                "backend='cpu'",
                backend="iree",
                module_name=name,
            ) from cause
        raise CompileError(
            f"backend 'iree' rejected module {name!r}: {message}",
            backend="iree",
            module_name=name,
        ) from cause

    # -- running

    def _runtime(self):
        # lazy: iree is an optional extra; loading its runtime library waits for the first run
        import iree.runtime as rt

        if self._instance is None:
            with self._lock:
                if self._instance is None:
                    self._instance = rt.VmInstance()
        return rt, self._instance

    def _device(self, driver: str):
        device = self._devices.get(driver)
        if device is None:
            rt, _ = self._runtime()
            with self._lock:
                device = self._devices.get(driver)
                if device is None:
                    device = self._devices[driver] = rt.get_driver(driver).create_default_device()
        return device

    def _load(self, vmfb: bytes, target: Target, name: str, target_options: Mapping[str, str]):
        """(context, function, device) for running `vmfb`; RuntimeError if it cannot run here.

        Making the context runs the module's initializer, which loads its HAL executables:
        IREE verifies their flatbuffers and their ELF headers then, not their machine code.
        """
        rt, instance = self._runtime()
        where = f"backend 'iree': module {name!r} was compiled for target {target.name!r}"
        try:
            device = self._device(target.driver)
        except (RuntimeError, ValueError) as e:
            raise RuntimeError(
                f"{where}, which runs on IREE's {target.driver!r} driver, and that driver has "
                f"no device here: {_driver_error_line(e)}; run it on a machine with that "
                "device, or compile with target='llvm-cpu' to run here"
            ) from e
        with self._lock:
            hal = self._hal_modules.get(target.driver)
            if hal is None:
                hal = self._hal_modules[target.driver] = rt.create_hal_module(instance, device)
        # IREE's statuses surface as several exception types (OUT_OF_RANGE as IndexError).
        try:
            module = rt.VmModule.copy_buffer(instance, vmfb)
            vm_context = rt.VmContext(instance, modules=[hal, module])
            function = module.lookup_function("main")
        except Exception as e:
            if not runs_here(target.name, target_options):
                raise RuntimeError(
                    f"{where}, which this machine's {target.driver!r} device cannot run: "
                    f"{_driver_error_line(e)}; run it on a machine of that target (for "
                    f"llvm-cpu: the target_options triple/cpu), or compile for this one"
                ) from e
            # Its target is this machine's: the file, not the machine, is at fault.
            raise RuntimeError(
                f"backend 'iree': module {name!r} does not load on this machine's "
                f"{target.driver!r} device, although its target ({target.name} for this "
                f"host) runs here: {_driver_error_line(e)}; the vmfb is damaged or was not "
                "written by iree-compile: compile the module again"
            ) from e
        return vm_context, function, device

    def _register_problem(self, vmfb: bytes) -> str | None:
        """What is wrong with the registers `vmfb`'s functions use, or None.

        IREE's verifier checks ref register numbers against a function's declared count,
        not i32/i64 ones: bytecode that names register i8714 of a function that has 22
        verifies, then writes past the register file when it runs (a crash, or worse). The
        vmfb is disassembled by IREE's `iree-dump-module` in a child process (a file that
        kills the disassembler kills only it), and every register each function names is
        checked against the counts its descriptor declares.
        """
        if self._dumper is None:
            return (
                "iree-base-runtime's iree-dump-module, which aotkit needs to check a vmfb's "
                f"registers before running it, is missing; reinstall it with {INSTALL_HINT}"
            )
        with tempfile.TemporaryDirectory(prefix="aotkit-iree-") as tmp:
            path = os.path.join(tmp, "module.vmfb")
            with open(path, "wb") as f:
                f.write(vmfb)
            try:
                proc = subprocess.run(
                    [self._dumper, path], capture_output=True, timeout=_DUMP_TIMEOUT_S
                )
            except subprocess.TimeoutExpired:
                return f"IREE's disassembler did not finish in {_DUMP_TIMEOUT_S} s"
            except OSError as e:
                return f"IREE's disassembler ({self._dumper}) did not start: {e.strerror or e}"
        if proc.returncode != 0:
            first = proc.stderr.decode(errors="replace").strip().splitlines()
            return f"IREE's disassembler failed on it ({_exit_text(proc.returncode)}" + (
                f": {printable(first[-1][:200])})" if first else ")"
            )
        return _registers_beyond_counts(proc.stdout.decode(errors="replace"))

    def load_executable(
        self,
        vmfb: bytes,
        in_specs: Sequence[ShapeDtype],
        out_specs: Sequence[ShapeDtype],
        *,
        name: str = "module",
        target: str | None = None,
        target_options: Mapping[str, str] | None = None,
        source: bytes | None = None,
    ) -> IreeExecutable:
        """Rebuilds an executable from its vmfb bytes and flat signature (no compiler run).

        The bytes are checked here (a valid IREE module whose `@main` has exactly these
        specs; a symbolic dimension, `f32[b,784]`, is `?` there: a vmfb of
        `compile_dynamic`); the device is needed only to run. `source` (the StableHLO text)
        makes `as_text()` available again.
        """
        where = "IreeBackend.load_executable"
        self.normalize_target(target, target_options)
        if not isinstance(vmfb, bytes | bytearray | memoryview):
            raise TypeError(f"{where}: vmfb must be bytes, got {type(vmfb).__name__}")
        vmfb = bytes(vmfb)
        in_specs, out_specs = tuple(in_specs), tuple(out_specs)
        for spec in in_specs + out_specs:
            if not isinstance(spec, ShapeDtype):
                raise TypeError(
                    f"{where}: specs must be aotkit.ShapeDtype values, got {spec!r}; e.g. "
                    "aotkit.spec('f32[3]')"
                )
        rt, instance = self._runtime()
        # Making a VmModule runs IREE's verifier over the flatbuffer and every function's
        # bytecode. Its statuses surface as several exception types (OUT_OF_RANGE as
        # IndexError), and names read from the bytes may not decode: all mean the same.
        try:
            module = rt.VmModule.copy_buffer(instance, vmfb)
            function = module.lookup_function("main")
            names = None if function is not None else (module.name, module.function_names)
            declared = None if function is None else _declared_signature(function)
        except Exception as e:
            raise ValueError(
                f"{where}: the bytes are not an IREE module: {_driver_error_line(e)}; pass "
                "the bytes of IreeExecutable.vmfb"
            ) from e
        if names is not None:
            raise ValueError(
                f"{where}: the IREE module {printable(names[0])!r} has no function 'main' (it "
                f"has {', '.join(map(printable, names[1]))}); pass a vmfb compiled by aotkit"
            )
        wanted = ([_abi_type(s) for s in in_specs], [_abi_type(s) for s in out_specs])
        if declared is not None and declared != wanted:
            raise ValueError(
                f"{where}: the vmfb's main is ({printable(', '.join(declared[0]))}) -> "
                f"({printable(', '.join(declared[1]))}), but the specs say "
                f"({', '.join(wanted[0])}) -> "
                f"({', '.join(wanted[1])}); pass the specs it was compiled with"
            )
        registers = self._register_problem(vmfb)
        if registers is not None:
            raise ValueError(
                f"{where}: the vmfb's VM bytecode cannot be run safely: {registers}; pass "
                "the bytes of IreeExecutable.vmfb"
            )
        spec = self._target(target)
        return IreeExecutable(
            self,
            name,
            vmfb,
            in_specs,
            out_specs,
            target=spec.name,
            target_options=dict(target_options or {}),
            source=source,
            flags=tuple(self._flags(None, spec, target_options or {})),
            statistics=None,
        )


# iree-dump-module reads a vmfb in milliseconds; a file it loops on is refused.
_DUMP_TIMEOUT_S = 60
# A row of iree-dump-module's bytecode table: ordinal, offset, length, blocks, i32 and ref
# register counts.
_FUNCTION_ROW = re.compile(
    r"^\s*(\d+) \| [0-9A-Fa-f]{8} \|\s*\d+ \|\s*\d+ \|\s*(\d+) \|\s*(\d+) \|", re.M
)
# `%i5`, `%i8:9` (an i64 in two i32 registers), `%r3`, `%R3` (a ref moved).
_REGISTER = re.compile(r"%([irR])(\d+)(?::(\d+))?")
# A function's disassembly: `vm.func @name(...` to its closing brace, in ordinal order.
_FUNCTION = re.compile(r"^vm\.func @([^(\s]+)\((.*?)^\}$", re.M | re.S)


def _registers_beyond_counts(dump: str) -> str | None:
    """The first register a function of `dump` (iree-dump-module's output) names beyond the
    counts its descriptor declares, said for an error; None when every one is in range."""
    counts = [(int(i32), int(refs)) for _, i32, refs in _FUNCTION_ROW.findall(dump)]
    functions = _FUNCTION.findall(dump)
    if not counts or len(counts) != len(functions):
        return (
            f"IREE's disassembler lists {len(counts)} function descriptors and "
            f"{len(functions)} function bodies; aotkit cannot check their registers"
        )
    for ordinal, ((name, body), (i32, refs)) in enumerate(zip(functions, counts, strict=True)):
        # A line's registers come before its string literal (`vm.fail %i4, "..."`), whose
        # text (printed with its quotes unescaped) is not read.
        code = "\n".join(line.split('"', 1)[0] for line in body.splitlines())
        for kind, low, high in _REGISTER.findall(code):
            limit, what = (i32, "i32") if kind == "i" else (refs, "ref")
            if int(high or low) >= limit:
                shown = f"{kind.lower()}{low}" + (f":{high}" if high else "")
                return (
                    f"function {ordinal} (@{printable(name)}) names register {shown}, but it "
                    f"declares {limit} {what} registers, which IREE's verifier does not check"
                )
    return None


def _verify(module: ir.Module, name: str) -> None:
    check_verifies(module, name, "backend 'iree'", "iree")


def _exit_text(returncode: int) -> str:
    if returncode < 0:
        try:
            return signal.Signals(-returncode).name
        except ValueError:
            return f"signal {-returncode}"
    return f"exit status {returncode}"


def _first_diagnostic(stderr: str) -> str:
    """The first error line of iree-compile's output (falling back to the first line)."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    for line in lines:
        if "error:" in line:
            return line
    for line in lines:
        if not line.startswith(("Please report", "Stack dump", "PLEASE submit")):
            return line
    return "iree-compile failed without a diagnostic"


# What IREE 3.13 is known not to compile, by its diagnostic: (pattern, explanation).
LIMITATION = "IREE limitation: "
_LIMITATIONS = (
    (
        re.compile(r"undefined symbol: ((?:a?(?:sin|cos|tan)h?|atan2|fmod|cbrt|pow|exp|log)f?)\b"),
        "its llvm-cpu code calls the C math library's {0}() (float64 and complex128 "
        "sin/cos/tan/tanh/atan2/fmod and the functions built on them), and IREE links no "
        "math library",
    ),
    (
        re.compile(r"failed to legalize operation '(math\.\w+)'"),
        "IREE has no lowering of {0} for this element type",
    ),
)


_LINK_EMBEDDED = "iree-llvmcpu-link-embedded"


def _needs_libm(error: CompileError, target: Target, flags: Sequence[str]) -> bool:
    """Whether `error` is llvm-cpu code calling C math functions IREE's embedded linker does
    not have, with the flags leaving the choice of linking to aotkit."""
    return (
        target.name == "llvm-cpu"
        and isinstance(error.__cause__, RuntimeError)
        and _LIMITATIONS[0][0].search(str(error.__cause__)) is not None
        and not any(f.startswith(f"--{_LINK_EMBEDDED}") for f in flags)
    )


def _limitation(stderr: str) -> str | None:
    for pattern, explanation in _LIMITATIONS:
        match = pattern.search(stderr)
        if match:
            return explanation.format(*match.groups())
    return None


def _read_statistics(path: str) -> dict | None:
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None  # a statistics format this version does not write is not an error


# IREE's ABI spells element types as MLIR does; unsigned ones are carried as an encoding.
_ABI_ELEMENT = {
    "bool": "i1",
    "int8": "i8",
    "int16": "i16",
    "int32": "i32",
    "int64": "i64",
    "uint8": "ui8",
    "uint16": "ui16",
    "uint32": "ui32",
    "uint64": "ui64",
    "float16": "f16",
    "bfloat16": "bf16",
    "float32": "f32",
    "float64": "f64",
    "complex64": "complex<f32>",
    "complex128": "complex<f64>",
}
_DECLARED = re.compile(
    r"%(input|output)\d+: (tensor<[^<>]*(?:<[^<>]*>)?[^<>]*>)"
    r"(?: \{iree\.abi\.encoding = (tensor<[^<>]*(?:<[^<>]*>)?[^<>]*>)\})?"
)


def _abi_type(spec: ShapeDtype) -> str:
    dims = "".join(f"{'?' if isinstance(d, algebra.Dim) else d}x" for d in spec.shape)
    return f"tensor<{dims}{_ABI_ELEMENT[spec.dtype.name]}>"


def _declared_signature(function) -> tuple[list[str], list[str]] | None:
    """@main's (argument types, result types) from IREE's reflection, or None if absent."""
    declaration = function.reflection.get("iree.abi.declaration")
    if not declaration:
        return None
    ins, outs = [], []
    for kind, plain, encoding in _DECLARED.findall(declaration):
        (ins if kind == "input" else outs).append(encoding or plain)
    return ins, outs


# Sets of argument shapes a dynamic executable remembers as checked; past this many it
# forgets them all and checks again as they come.
_MAX_CHECKED_SHAPES = 1 << 14


def _shape_of(leaf) -> tuple | None:
    """A leaf's shape as a call sees it (a Python scalar is 0-d), or None for a non-array."""
    shape = getattr(leaf, "shape", None)
    if shape is not None:
        return tuple(shape)
    return () if dtypes.weak_kind(leaf) is not None else None


class IreeExecutable(Executable):
    """A vmfb for one target, loaded into IREE's runtime on its first call.

    Compiled by `compile_dynamic` (or loaded with symbolic specs), its specs have symbolic
    dimensions and its `main` dynamic ones: each distinct set of argument shapes is checked
    once against the specs at the symbols' values and the constraints, and the results
    have the shapes the runtime returns, checked against the result specs at those values.
    """

    def __init__(
        self,
        backend: IreeBackend,
        name: str,
        vmfb: bytes,
        in_specs,
        out_specs,
        *,
        target: str,
        target_options: dict[str, str],
        source: bytes | None,
        flags: tuple[str, ...],
        statistics: dict | None,
        rewritten: tuple[str, ...] = (),
    ):
        self.backend = backend
        self.name = name
        self.in_specs = tuple(in_specs)
        self.out_specs = tuple(out_specs)
        self.target = target
        self.target_options = target_options
        self._vmfb = vmfb
        self._source = source
        self._flags = flags
        self._statistics = statistics
        # Ops rewritten so that IREE computes what the spec says (see _iree_rewrites).
        self.rewritten = rewritten
        self._text: str | None = None
        self._loaded = None
        self._lock = threading.Lock()
        # lazy: iree is an optional extra, imported only once an executable exists
        import iree.runtime as rt

        self._rt = rt
        self._element_types = [
            rt.dtypes.map_dtype_to_hal_element_type(s.dtype) for s in self.in_specs
        ]
        self.dynamic = any(isinstance(d, algebra.Dim) for s in self.in_specs for d in s.shape)
        self._scope = algebra.scope_of(self.in_specs + self.out_specs) if self.dynamic else None
        # Argument shapes checked so far -> the concrete (argument specs, result specs).
        self._concrete: dict[tuple, tuple] = {}

    @property
    def vmfb(self) -> bytes:
        """The compiled IREE module (a VM flatbuffer), as `iree-run-module` takes it."""
        return self._vmfb

    def serialize(self) -> bytes:
        """The vmfb: what an artifact (`Compiled.serialize()`) carries for IREE."""
        return self._vmfb

    def compiled_for(self) -> dict[str, str]:
        return self.backend.target_dict(self.target, self.target_options)

    def _host(self, index: int, leaf, spec: ShapeDtype) -> np.ndarray:
        if type(leaf) is np.ndarray and leaf.dtype == spec.dtype and leaf.shape == spec.shape:
            return leaf
        if isinstance(leaf, np.ndarray | np.generic) or dtypes.weak_kind(leaf) is not None:
            return host_value(index, leaf, spec)
        # Arrays of other backends (a jax.Array from `cpu`) by their NumPy view.
        if hasattr(leaf, "__array__") and hasattr(leaf, "shape") and hasattr(leaf, "dtype"):
            if tuple(leaf.shape) == spec.shape and leaf.dtype == spec.dtype:
                return np.asarray(leaf)
            raise ArgumentMismatch(index, f"expected {spec}, got {describe(leaf)}")
        return host_value(index, leaf, spec)

    def _state(self):
        state = self._loaded
        if state is None:
            with self._lock:
                if self._loaded is None:
                    self._loaded = self.backend._load(
                        self._vmfb, TARGETS[self.target], self.name, self.target_options
                    )
                state = self._loaded
        return state

    def execute(self, leaves: Sequence) -> list:
        if not self.dynamic:
            return self._run(leaves, self.in_specs, self.out_specs)
        # Each symbol from the first argument dimension that is that symbol alone; the
        # check below refuses what this leaves undecided.
        values: dict[str, int] = {}
        for spec, leaf in zip(self.in_specs, leaves, strict=True):
            shape = _shape_of(leaf)
            if shape is not None and len(shape) == len(spec.shape):
                for d, n in zip(spec.shape, shape):
                    if isinstance(d, algebra.Dim) and d.as_symbol() is not None:
                        values.setdefault(d.as_symbol(), n)
        return self.execute_bound(leaves, values)

    def execute_bound(self, leaves: Sequence, values: dict[str, int]) -> list:
        if not self.dynamic:
            return self.execute(leaves)
        key = tuple(map(_shape_of, leaves))
        specs = self._concrete.get(key)
        if specs is None:
            specs = self._check(leaves, values)
            if len(self._concrete) >= _MAX_CHECKED_SHAPES:
                self._concrete.clear()  # a server that sees every size keeps a bounded table
            self._concrete[key] = specs
        return self._run(leaves, *specs)

    def _check(self, leaves: Sequence, values: dict[str, int]) -> tuple[tuple, tuple]:
        """The concrete specs of a dynamic executable for `values`, which must give every
        argument's shape and meet the constraints; ArgumentMismatch otherwise."""
        given = ", ".join(f"{k} = {v}" for k, v in sorted(values.items()))
        in_specs = []
        for i, (spec, leaf) in enumerate(zip(self.in_specs, leaves, strict=True)):
            shape = _shape_of(leaf)
            try:
                concrete = ShapeDtype(algebra.evaluate_shape(spec.shape, values), spec.dtype)
            except (KeyError, TypeError, ValueError):
                raise ArgumentMismatch(
                    i,
                    f"has shape {shape} for {spec}, which the symbols read from the arguments "
                    f"({given or 'none'}) do not size; call it through aotkit's Compiled, "
                    "which solves them",
                    ValueError,
                    says_fix=True,
                ) from None
            if shape != concrete.shape:
                raise ArgumentMismatch(
                    i, f"expected {spec} (= {concrete} for {given}), got {describe(leaf)}"
                )
            in_specs.append(concrete)
        try:
            self._scope.check(values)
            out_specs = tuple(
                ShapeDtype(algebra.evaluate_shape(s.shape, values), s.dtype) for s in self.out_specs
            )
        except (KeyError, TypeError, ValueError) as e:
            raise ArgumentMismatch(
                0,
                f"gives sizes {given}, for which module {self.name!r} is not defined: {e}",
                ValueError,
                says_fix=True,
            ) from None
        return tuple(in_specs), out_specs

    def _run(self, leaves: Sequence, in_specs: tuple, out_specs: tuple) -> list:
        hosts = [self._host(i, x, s) for i, (x, s) in enumerate(zip(leaves, in_specs))]
        vm_context, function, device = self._state()
        rt = self._rt
        allocator = device.allocator
        args = rt.VmVariantList(len(hosts))
        for host, element_type in zip(hosts, self._element_types):
            view = allocator.allocate_buffer_copy(
                memory_type=rt.MemoryType.DEVICE_LOCAL,
                allowed_usage=rt.BufferUsage.DEFAULT,
                device=device,
                # np.ascontiguousarray would make a 0-d array 1-d.
                buffer=host if host.flags.c_contiguous else host.copy(order="C"),
                element_type=element_type,
            )
            args.push_ref(view)
        results = rt.VmVariantList(len(out_specs))
        try:
            with self._lock:  # a VM context runs one invocation at a time
                vm_context.invoke(function, args, results)
        except (RuntimeError, ValueError) as e:
            raise RuntimeError(
                f"backend 'iree': running module {self.name!r} failed: {_driver_error_line(e)}"
            ) from e
        outs = []
        for i, spec in enumerate(out_specs):
            view = results.get_as_object(i, rt.HalBufferView)
            host = rt.DeviceArray(device, view, implicit_host_transfer=True).to_host()
            value = np.array(host, copy=True)
            if value.dtype != spec.dtype:
                value = value.view(spec.dtype)
            if self.dynamic and value.shape != spec.shape:
                # The proof says this cannot happen; a result of another shape is not shown.
                got = ShapeDtype(value.shape, spec.dtype)
                raise RuntimeError(
                    f"backend 'iree': module {self.name!r} returned {got} for result {i}, "
                    f"but its signature gives {self.out_specs[i]} = {spec} here; "
                    "this is a bug in aotkit's dynamic compile: compile with backend='cpu'"
                )
            outs.append(value.reshape(spec.shape))
        return outs

    def as_text(self) -> str:
        """The module after IREE's `flow` phase: dispatch regions (IREE's fusions) formed."""
        if self._text is None:
            if self._source is None:
                return (
                    f"// IREE module {self.name!r} loaded from a vmfb without its StableHLO "
                    "source; pass source= to IreeBackend.load_executable for IREE's IR\n"
                )
            text, _ = self.backend._run_compiler(
                self._source, list(self._flags), self.name, phase=TEXT_PHASE
            )
            self._text = text.decode()
        return self._text

    def cost_analysis(self) -> None:
        """None: IREE has no cost model to report."""
        return None

    def memory_analysis(self) -> MemoryAnalysis | None:
        """Transient memory from IREE's scheduling statistics, the vmfb's size as code size.

        Argument and output sizes are the signature's; IREE does not alias them (0). None
        for an executable loaded from bytes (IREE's statistics come from compiling), and for
        a dynamic one (its sizes depend on each call's).
        """
        if self._statistics is None or self.dynamic:
            return None
        try:
            execution = self._statistics["stream-aggregate"]["execution"]
            temp = int(execution["transient-memory-size"])
        except (KeyError, TypeError, ValueError):
            return None

        def size(specs) -> int:
            return sum(s.size * s.dtype.itemsize for s in specs)

        return MemoryAnalysis(
            argument_size_in_bytes=size(self.in_specs),
            output_size_in_bytes=size(self.out_specs),
            alias_size_in_bytes=0,
            temp_size_in_bytes=temp,
            generated_code_size_in_bytes=len(self._vmfb),
        )

    def runtime_executable(self):
        """IREE's loaded `VmContext` and `main` function, loading the module if needed."""
        vm_context, function, _ = self._state()
        return vm_context, function
