"""The command line: `aotkit lower | compile | run | check | opt | inspect | backends`.

Not a stage of its own: every command is a thin shell over the staged API (`lower`,
`Lowered.compile`, the pass pipeline, the backends registry), so what the CLI prints for a
function is exactly what the Python API returns for it.

What it promises: `main(argv=None) -> int` returns 0 on success; 1 on a user error, with one
line on stderr (when the user's own code raised, their traceback trimmed to their frames
comes first); 2 on a usage error (argparse). Bad input never aborts the process and never
prints aotkit's own traceback unless `--traceback` asks for it.

Extension points: `_add_target_args` holds the flags every function-taking command shares
(a `--frontend` flag belongs there), `_lower_python` is the one call into the front ends, and
`_load_module_file` the one place module files are read (through `aotkit.load_module`).
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import difflib
import importlib.util
import inspect
import io
import json
import math
import os
import re
import signal
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
import traceback
from pathlib import Path

import numpy as np

import aotkit
from aotkit import _files
from aotkit.errors import printable

EXIT_OK, EXIT_USER, EXIT_USAGE = 0, 1, 2

# A step that takes longer than this (seconds) earns a progress line on an interactive stderr.
PROGRESS_AFTER_S = 1.0
_PROGRESS_EVERY_S = 0.25

IR_EMITS = ("stablehlo", "bytecode", "portable")
COMPILE_EMITS = ("hlo", "cost", "memory", "artifact")
# `aotkit.artifacts.SUFFIX`, spelled here so that `aotkit --help` starts without importing
# jax (tests/test_cli.py checks that the two agree).
ARTIFACT_SUFFIX = ".aotx"


class UserError(Exception):
    """A mistake in the command line or its inputs: one line on stderr, exit 1."""


class UserCodeError(UserError):
    """The user's own code raised while aotkit imported or traced it.

    Reported as the user's traceback (their frames only) followed by one line.
    """

    def __init__(self, message: str, cause: BaseException):
        super().__init__(message)
        self.cause = cause


# --- Reporting -----------------------------------------------------------------------------


def _library_prefixes() -> tuple[str, ...]:
    dirs = {os.path.dirname(os.path.abspath(aotkit.__file__))}
    paths = sysconfig.get_paths()
    dirs |= {paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if paths.get(k)}
    dirs |= {os.path.realpath(d) for d in dirs}
    return tuple(d.rstrip(os.sep) + os.sep for d in sorted(dirs))


def _user_frames(exc: BaseException) -> list[traceback.FrameSummary]:
    """The frames of `exc`'s traceback that run the user's code (not aotkit, not libraries)."""
    library = _library_prefixes()
    return [
        f
        for f in traceback.extract_tb(exc.__traceback__)
        if not f.filename.startswith("<") and not os.path.abspath(f.filename).startswith(library)
    ]


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc).strip()}".rstrip(": ")


def _known_errors() -> tuple[type[BaseException], ...]:
    """Exceptions aotkit raises for bad input (its error contract), as opposed to bugs."""
    from aotkit.errors import CompileError

    return (TypeError, ValueError, NotImplementedError, OSError, CompileError)


def _report(command: str, exc: BaseException, show_traceback: bool) -> int:
    """Writes `exc` to stderr the way the module docstring promises; returns the exit code."""
    err = sys.stderr
    prefix = f"aotkit {command}: error: " if command else "aotkit: error: "
    if show_traceback:
        traceback.print_exception(getattr(exc, "cause", None) or exc, file=err)
    if isinstance(exc, UserCodeError):
        if not show_traceback:
            err.write(_user_traceback(exc.cause))
        err.write(prefix + str(exc) + "\n")
        return EXIT_USER
    if isinstance(exc, (UserError, *_known_errors())):
        err.write(prefix + str(exc).strip() + "\n")
        return EXIT_USER
    if isinstance(exc, MemoryError):
        detail = f" ({str(exc).strip()})" if str(exc).strip() else ""
        err.write(
            f"{prefix}out of memory{detail}: the program or its inputs need more memory than "
            "this machine has; use smaller shapes or inputs\n"
        )
        return EXIT_USER
    if isinstance(exc, EOFError):
        detail = f" ({str(exc).strip()})" if str(exc).strip() else ""
        err.write(
            f"{prefix}an input ended too soon{detail}: a file is truncated; check the input "
            "files (--inputs, the target)\n"
        )
        return EXIT_USER
    err.write(
        f"{prefix}internal error: {_describe(exc)}; "
        "rerun with --traceback and report it with the command line\n"
    )
    return EXIT_USER


def _user_traceback(exc: BaseException) -> str:
    frames = _user_frames(exc)
    lines = []
    if frames:
        lines.append("Traceback (most recent call last; aotkit's frames hidden):\n")
        lines.extend(traceback.format_list(frames))
    if isinstance(exc, SyntaxError):
        # The offending line and caret; the message itself ends the report.
        lines.extend(traceback.format_exception_only(exc)[:-1])
    return "".join(lines)


def _user_code(what: str, exc: BaseException) -> UserCodeError:
    return UserCodeError(f"{what}: {_describe(exc)}", exc)


@contextlib.contextmanager
def _progress(args, what: str):
    """Shows `what` and its elapsed time on stderr while a slow step runs (terminal only)."""
    if getattr(args, "quiet", False) or not _isatty(sys.stderr):
        yield
        return
    done = threading.Event()
    start = time.perf_counter()
    shown = []

    def tick():
        if done.wait(PROGRESS_AFTER_S):
            return
        while not done.is_set():
            sys.stderr.write(f"\raotkit: {what}... {time.perf_counter() - start:.1f} s\x1b[K")
            sys.stderr.flush()
            shown.append(True)
            done.wait(_PROGRESS_EVERY_S)

    thread = threading.Thread(target=tick, name="aotkit-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
        if shown:
            sys.stderr.write("\r\x1b[K")
            sys.stderr.flush()


def _isatty(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def _say(args, message: str) -> None:
    """A `-v` note on stderr."""
    if getattr(args, "verbose", False) and not getattr(args, "quiet", False):
        sys.stderr.write(f"aotkit: {message}\n")


# --- Argument types --------------------------------------------------------------------------


class _ShapesAction(argparse.Action):
    """`--shapes SPEC ...`: each value a plain spec or a pytree of specs (`_cli_specs`); a bad
    one is a usage error that says which value it is."""

    def __call__(self, parser, namespace, values, option_string=None):
        from aotkit._cli_specs import parse_shape, split_by_shell

        trees = []
        for i, text in enumerate(values):
            try:
                trees.append(parse_shape(text))
            except (TypeError, ValueError) as e:
                whole = split_by_shell(values, i)
                if whole is not None:  # `--shapes f32[3, 4]`: the shell split it at a space
                    raise argparse.ArgumentError(
                        self,
                        f"cannot parse {text!r}: the shell split {whole!r} at its spaces; "
                        f"quote it (--shapes '{whole}') or write it without spaces "
                        f"({''.join(whole.split())})",
                    ) from None
                if len(values) == 1:
                    raise argparse.ArgumentError(self, str(e)) from None
                what = str(e).removeprefix("spec: ")
                raise argparse.ArgumentError(
                    self, f"spec {i + 1} of {len(values)}: {what}"
                ) from None
        setattr(namespace, self.dest, trees)


# Options that take several values, and the file types that end their list (see
# `_targets_first`).
_LIST_OPTIONS = ("--shapes", "--shardings", "--inputs", "--backends")
_TARGET_COMMANDS = ("lower", "compile", "run", "check")
_MODULE_SUFFIXES = (".mlir", ".mlirbc", ".bc", ARTIFACT_SUFFIX)


def _targets_first(argv: list[str]) -> list[str]:
    """Moves a TARGET written after a list option (`lower --shapes f32[4] f.py:fn`) in front
    of the options, where argparse's greedy lists cannot swallow it.

    A value counts as a target when it is FILE.py[:FN] or names a module file or an artifact
    by its suffix; no spec, sharding, .npy/.npz file or backend name looks like that.
    """
    if not argv or argv[0] not in _TARGET_COMMANDS:
        return argv
    moved, rest, in_list = [], [], False
    for i, token in enumerate(argv[1:], 1):
        if token == "--":
            rest.extend(argv[i:])
            break
        if token.startswith("-") and token != "-":
            in_list = token in _LIST_OPTIONS
        elif in_list and (_is_python_target(token) or token.endswith(_MODULE_SUFFIXES)):
            moved.append(token)
            continue
        rest.append(token)
    return [argv[0], *moved, *rest]


def _static_arg(text: str) -> tuple[str, object]:
    name, eq, value = text.partition("=")
    name = name.strip()
    if not eq or not name.isidentifier():
        raise argparse.ArgumentTypeError(
            f"expected NAME=VALUE with NAME a parameter of FN, got {text!r}; e.g. --static n=3"
        )
    try:
        return name, ast.literal_eval(value)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        raise argparse.ArgumentTypeError(
            f"value of {name!r} must be a Python literal (3, 2.5, True, 'relu', (1, 2)), got "
            f"{value!r}; quote strings for the shell too: --static {name}=\"'{value}'\""
        ) from None


def _specialize_arg(text: str) -> tuple[str, list[int]]:
    """`--specialize b=1,8,32`: a symbol and the sizes to compile it for."""
    name, eq, sizes = text.partition("=")
    name = name.strip()
    try:
        values = [int(v) for v in sizes.split(",")] if eq else []
    except ValueError:
        values = []
    if not name.isidentifier() or not values or any(v < 0 for v in values):
        raise argparse.ArgumentTypeError(
            f"expected SYMBOL=SIZE,... with sizes >= 0, got {text!r}; e.g. --specialize "
            "b=1,8,32,128 (repeat it for each symbol: --specialize t=128)"
        )
    return name, values


def _mesh_arg(text: str) -> str:
    from aotkit.sharding import parse_axes

    try:
        parse_axes(text, "--mesh")
    except (TypeError, ValueError) as e:
        raise argparse.ArgumentTypeError(str(e).removeprefix("--mesh: ")) from None
    return text


SHARDING_SYNTAX = (
    "one entry per leading dimension, comma-separated: a mesh axis name, None for a "
    "dimension not split, or AXIS+AXIS for one split over several axes (data,None; "
    "data+model,None); '-' for a replicated argument"
)


def _sharding_arg(text: str):
    """'data,None' -> PartitionSpec('data', None); '-' -> PartitionSpec()."""
    from aotkit.sharding import PartitionSpec

    text = text.strip()
    if text in ("-", "replicated"):
        return PartitionSpec()
    entries = []
    for part in text.split(","):
        part = part.strip()
        if part in ("None", "_"):
            entries.append(None)
            continue
        axes = tuple(a.strip() for a in part.split("+"))
        if not all(a.isidentifier() for a in axes):
            raise argparse.ArgumentTypeError(
                f"cannot read {part!r} in {text!r}; expected {SHARDING_SYNTAX}"
            )
        entries.append(axes[0] if len(axes) == 1 else axes)
    return PartitionSpec(*entries)


def _ensure_cpu_devices(args, n: int) -> None:
    """Gives this process's CPU client at least `n` devices, if it has not started yet (the
    CLI owns its process; a library call would have to ask the user to set it)."""
    from aotkit import _compat

    if (getattr(args, "backend", None) or "cpu") != "cpu" or _compat.backends_started():
        return
    import jax

    if jax.config.jax_num_cpu_devices >= 0:
        return
    flag = re.search(
        r"--xla_force_host_platform_device_count=(\d+)", os.environ.get("XLA_FLAGS", "")
    )
    if flag is None or int(flag.group(1)) < n:
        jax.config.update("jax_num_cpu_devices", n)
        _say(args, f"started the CPU backend with {n} devices for the mesh")


def _in_shardings(args, specs: list):
    """The in_shardings of `--mesh`/`--shardings` (one per array argument), or None."""
    mesh_text = getattr(args, "mesh", None)
    given = getattr(args, "shardings", None)
    if mesh_text is None:
        if given:
            raise UserError("--shardings: give the mesh they split over with --mesh NAME=SIZE,...")
        return None
    import math

    from aotkit import sharding
    from aotkit._cli_specs import format_tree

    names, sizes = sharding.parse_axes(mesh_text, "--mesh")
    _ensure_cpu_devices(args, math.prod(sizes))
    backend = getattr(args, "backend", None)
    topology = getattr(args, "topology", None)
    if topology is not None:  # the mesh is over the TPU topology's devices
        from aotkit import compiling

        try:
            backend = compiling.deviceless("--topology", backend, topology)
        except ImportError as e:
            raise UserError(str(e)) from None
    mesh = sharding.mesh(mesh_text, backend=backend)
    if given is None:
        given = [sharding.PartitionSpec()] * len(specs)
    if len(given) != len(specs):
        raise UserError(
            f"--shardings: got {len(given)} sharding(s) for {len(specs)} array argument(s) "
            f"({', '.join(map(format_tree, specs)) or 'none'}); give one per --shapes spec"
        )
    ids = [d.id for d in mesh.devices.flat]
    _say(args, f"mesh {dict(zip(names, sizes))} over devices {ids}")
    return tuple(sharding.NamedSharding(mesh, p) for p in given)


# --- Targets: FILE.py:FN, module files -------------------------------------------------------


def _is_python_target(target: str) -> bool:
    path, colon, _ = target.rpartition(":")
    return (bool(colon) and path.endswith(".py")) or target.endswith(".py")


def _split_target(target: str) -> tuple[Path, str]:
    path, colon, qualname = target.rpartition(":")
    if not colon or not path:
        raise UserError(
            f"target {target!r} names no function; write FILE.py:FN, e.g. examples/mlp.py:predict"
        )
    if not qualname or not all(part.isidentifier() for part in qualname.split(".")):
        raise UserError(
            f"target {target!r}: {qualname!r} is not a function name; write FILE.py:FN or "
            "FILE.py:OBJ.METHOD"
        )
    return Path(path), qualname


def _import_file(path: Path):
    """Imports a Python file as a fresh module, with its folder on sys.path meanwhile."""
    fix = "give the path of a Python file"
    try:
        _files.check_regular(path, where=f"file {str(path)!r}", fix=fix)
    except FileNotFoundError:
        raise UserError(f"file {str(path)!r} does not exist; {fix}") from None
    except ValueError as e:  # a directory, a FIFO, /dev/zero: Python's importer would hang
        raise UserError(str(e)) from None
    path = path.resolve()
    name = re.sub(r"\W", "_", path.stem)
    if not name or name[0].isdigit():
        name = "_" + name
    unique = f"aotkit_cli_{name}"
    spec = importlib.util.spec_from_file_location(unique, path)
    if spec is None or spec.loader is None:
        raise UserError(f"file {str(path)!r} cannot be imported as Python; give a .py file")
    module = importlib.util.module_from_spec(spec)
    folder = str(path.parent)
    sys.path.insert(0, folder)
    # Registered while it runs so dataclasses, pickling and typing find the module.
    sys.modules[unique] = module
    try:
        spec.loader.exec_module(module)
    except SystemExit as e:
        raise UserError(
            f"importing {str(path)!r} called sys.exit({e.code!r}); put script code under "
            "`if __name__ == '__main__':`"
        ) from None
    except KeyboardInterrupt:
        raise
    except BaseException as e:  # a BaseException subclass of the user's is theirs too
        raise _user_code(f"importing {str(path)!r} failed", e) from e
    finally:
        sys.modules.pop(unique, None)
        with contextlib.suppress(ValueError):
            sys.path.remove(folder)
    return module


def _resolve(module, path: Path, qualname: str):
    obj = module
    for i, part in enumerate(qualname.split(".")):
        if not hasattr(obj, part):
            where = str(path) if i == 0 else f"{path}:{'.'.join(qualname.split('.')[:i])}"
            names = [n for n in dir(obj) if not n.startswith("_") and callable(getattr(obj, n))]
            near = difflib.get_close_matches(part, names, n=3)
            hint = (
                f"did you mean {', '.join(near)}?"
                if near
                else (f"callables there: {', '.join(names[:12]) or 'none'}")
            )
            raise UserError(f"{where} has no attribute {part!r}; {hint}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise UserError(
            f"{path}:{qualname} is not callable (it is {type(obj).__name__} {obj!r:.40}); "
            "name a function or another callable"
        )
    return obj


def _place_arguments(fn, label: str, specs: list, statics: dict, source: str = "--shapes"):
    """Places `--shapes` specs (or those of `--inputs` files: `source`) and `--static` values
    as a Python caller would.

    Returns `(args, kwargs, static_argnums, static_argnames, names)`: specs fill the non-static
    positional parameters in order, a static positional parameter keeps its position (so the
    module's arguments are ordered as in `aotkit.lower(fn, *specs)`), keyword-only statics are
    keywords; `names[i]` names `args[i]` (`xs[0]` for a `*xs` parameter).
    """
    from aotkit._cli_specs import format_tree

    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        if statics:
            raise UserError(
                f"--static: cannot read the parameters of {label}; wrap it in a Python function"
            ) from None
        return tuple(specs), {}, (), (), [f"args[{i}]" for i in range(len(specs))]
    P = inspect.Parameter
    params = list(sig.parameters.values())
    pending = list(specs)
    remaining = dict(statics)
    args, kwargs, argnums, argnames, arg_names = [], {}, [], [], []
    positional = True
    for p in params:
        if p.kind in (P.POSITIONAL_ONLY, P.POSITIONAL_OR_KEYWORD):
            if p.name in remaining and positional:
                argnums.append(len(args))
                args.append(remaining.pop(p.name))
                arg_names.append(p.name)
            elif p.name in remaining:
                argnames.append(p.name)
                kwargs[p.name] = remaining.pop(p.name)
            elif pending and positional:
                args.append(pending.pop(0))
                arg_names.append(p.name)
            else:
                positional = False
        elif p.kind is P.VAR_POSITIONAL and positional:
            arg_names.extend(f"{p.name}[{i}]" for i in range(len(pending)))
            args.extend(pending)
            pending.clear()
        elif p.kind is P.KEYWORD_ONLY and p.name in remaining:
            argnames.append(p.name)
            kwargs[p.name] = remaining.pop(p.name)
    if remaining and params and params[-1].kind is P.VAR_KEYWORD:
        argnames.extend(remaining)
        kwargs.update(remaining)
        remaining.clear()
    names = [p.name for p in params if p.kind in (P.POSITIONAL_ONLY, P.POSITIONAL_OR_KEYWORD)]
    array_params = [n for n in names if n not in statics]
    optional = [n for n in array_params if sig.parameters[n].default is not P.empty]
    takes = f"{len(array_params) - len(optional)}"
    if optional:  # `gamma=0.5`: its default is used when no spec is given
        takes += f" to {len(array_params)}"
    listed = ", ".join(n + ("=default" if n in optional else "") for n in array_params)
    if remaining:
        bad = next(iter(remaining))
        raise UserError(
            f"--static: {label} has no parameter {bad!r}; its parameters: "
            f"{', '.join(sig.parameters) or 'none'}"
        )
    given = ", ".join(map(format_tree, specs)) or "none"
    if source == "--shapes":
        got = f"{len(specs)} spec(s): {given}"
    elif source == "--inputs":
        got = f"{len(specs)} file(s) ({given})"
    else:
        got = "neither"
    one = (
        "one spec per array argument"
        if source == "--shapes"
        else "one .npy file per array argument (or one .npz keyed by leaf path)"
    )
    keyword_only = [p.name for p in params if p.kind is P.KEYWORD_ONLY and p.name not in statics]
    # `def f(*, x)`: no spec or file reaches x, which is passed by name only.
    why = (
        f" ({keyword_only[0]!r} is keyword-only, which takes no spec: make it positional, or "
        "give it with --static NAME=VALUE)"
        if keyword_only
        else ""
    )
    if pending:
        raise UserError(
            f"{source}: {label} takes {takes} array argument(s) "
            f"({listed or 'none'}) but got {got}; give {one}{why}"
        )
    try:
        sig.bind(*args, **kwargs)
    except TypeError:
        missing = [
            p.name
            for p in params
            if p.default is P.empty
            and p.kind in (P.POSITIONAL_ONLY, P.POSITIONAL_OR_KEYWORD)
            and p.name not in statics
        ][len(specs) :]
        if not missing and keyword_only:
            raise UserError(
                f"{label}: its parameter {keyword_only[0]!r} is keyword-only, which takes no "
                "spec; make it positional, or give it with --static NAME=VALUE"
            ) from None
        missing = ", ".join(missing) or "each argument"
        fix = {
            "--shapes": f"add a spec for {missing}",
            "--inputs": f"add a file for {missing}",
        }.get(source, f"give {missing} a spec with --shapes or values with --inputs FILE.npy")
        raise UserError(
            f"{source}: {label} takes {takes} array argument(s) "
            f"({listed}) but got {got}; {fix} (or --static NAME=VALUE){why}"
        ) from None
    names = [n for i, n in enumerate(arg_names) if i not in argnums]
    return tuple(args), kwargs, tuple(argnums), tuple(argnames), names


def _lower_python(args, specs: list | dict | None, source: str = "--shapes", inputs=None):
    """Imports FILE.py, finds FN and lowers it for `specs` through the Python API.

    `specs` is one spec pytree per array argument, or (from an `.npz` file: `source` is
    `--inputs`) a dict of them by parameter name. `inputs` (an `_Inputs`) are checked against
    the argument leaves before tracing, where a mismatch would be a shape error inside FN.
    Sets `args.param_names`, the names of the array arguments, in order.
    """
    from jax import tree_util

    from aotkit import frontends
    from aotkit._cli_specs import leaf_names

    path, qualname = _split_target(args.target)
    label = f"{path}:{qualname}"
    with _progress(args, f"importing {path}"):
        module = _import_file(path)
    fn = _resolve(module, path, qualname)
    choice = frontends.resolve(fn, getattr(args, "frontend", "auto"), "--frontend")
    _say(args, f"front end for {label}: {choice.name} ({choice.reason})")
    statics = dict(args.static or ())
    if isinstance(specs, dict):
        specs = _specs_by_name(fn, label, specs, statics, inputs)
    if specs is None and hasattr(args, "inputs"):  # run, check: neither flag was given
        source = "--shapes or --inputs"
    placed = _place_arguments(fn, label, specs or [], statics, source)
    call_args, call_kwargs, argnums, argnames, args.param_names = placed
    if inputs is not None:
        array_args = tuple(a for i, a in enumerate(call_args) if i not in argnums)
        array_kwargs = {k: v for k, v in call_kwargs.items() if k not in argnames}
        leaves, tree = tree_util.tree_flatten((array_args, array_kwargs))
        inputs.leaves(leaf_names(tree, args.param_names), leaves, args.param_names, label)
    options = {"pipeline": args.pipeline} if args.pipeline else {}
    in_shardings = _in_shardings(args, list(specs or []))
    if in_shardings is not None:
        options["in_shardings"] = in_shardings
    with _dumps(args) as dump_dir, _progress(args, f"lowering {label}"):
        start = time.perf_counter()
        try:
            options.update(
                static_argnums=argnums,
                static_argnames=argnames,
                dump_dir=dump_dir,
                frontend=choice.name,
                print_ir_after_all=args.print_ir_after_all or None,
                autograph=getattr(args, "autograph", True),
            )
            clash = sorted(set(call_kwargs) & set(options))
            if clash:
                raise UserError(
                    f"{label}: its keyword argument {clash[0]!r} has the name of an option of "
                    "aotkit.lower, which would take it; make it a positional parameter"
                )
            lowered = aotkit.lower(fn, *call_args, **options, **call_kwargs)
        except SystemExit as e:  # the traced function ended the process: not a success
            raise UserError(
                f"lowering {label}: the function called sys.exit({e.code!r}) while it was "
                "traced; a traced function must return its result (raise an exception to "
                "report an error)"
            ) from None
        except KeyboardInterrupt:
            raise
        except BaseException as e:  # a BaseException subclass of the user's is theirs too
            if _user_frames(e):
                raise _user_code(f"lowering {label} failed", e) from e
            raise
        _print_ir_after_all(args, lowered.dump_paths)
    args.front_seconds = ("lower", time.perf_counter() - start)
    _say(args, f"lowered {label} in {_time(args.front_seconds[1])}")
    return lowered


def _specs_by_name(fn, label: str, named: dict, statics: dict, inputs) -> list:
    """The spec pytrees of `named` (parameter name -> pytree, from an `.npz` file's keys) in
    FN's positional order; `args[i]` keys name positional parameter i."""
    P = inspect.Parameter
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        params = []
    positional = [p for p in params if p.kind in (P.POSITIONAL_ONLY, P.POSITIONAL_OR_KEYWORD)]
    names = [p.name for p in positional if p.name not in statics]
    named = dict(named)
    if "args" in named and "args" not in names:
        by_index = named.pop("args")
        if not isinstance(by_index, list) or len(by_index) > len(names):
            raise UserError(
                f"--inputs: {inputs.npz!r}: keys args[...] give {len(by_index)} "
                f"argument(s) but {label} takes {len(names)} ({', '.join(names) or 'none'}); "
                "key each array by its parameter's name"
            )
        for name, tree in zip(names, by_index, strict=False):
            if name in named:
                raise UserError(
                    f"--inputs: {inputs.npz!r} names parameter {name!r} twice (as {name} "
                    "and as args[...]); keep one spelling"
                )
            named[name] = tree
    varargs = next((p.name for p in params if p.kind is P.VAR_POSITIONAL), None)
    specs = []
    for p in positional:
        if p.name in statics:
            continue
        if p.name not in named:
            if p.default is P.empty:
                raise UserError(
                    f"--inputs: {inputs.npz!r} has no array for parameter {p.name!r} of "
                    f"{label} (keys: {', '.join(inputs.named) or 'none'}); save it under the "
                    f"key {p.name!r} ({p.name}['w'] or {p.name}[0] for the leaves of a pytree)"
                )
            break
        specs.append(named.pop(p.name))
    else:
        if varargs is not None and varargs in named:
            tree = named.pop(varargs)
            specs.extend(tree if isinstance(tree, list) else [tree])
    if named:
        extra = next(iter(named))
        raise UserError(
            f"--inputs: {inputs.npz!r}: {extra!r} is no array parameter of {label} (its array "
            f"parameters: {', '.join(names) or 'none'}); key each array by its parameter's "
            "name and leaf path"
        )
    return specs


@contextlib.contextmanager
def _dumps(args):
    """The dump directory for the API, honouring `--dump-dir` and `--print-ir-after-all`.

    The per-pass dumps are the one record of the IR after each pass, so
    `--print-ir-after-all` without `--dump-dir` dumps into a temporary folder and prints
    from there.
    """
    if not args.print_ir_after_all or args.dump_dir is not None:
        yield args.dump_dir
        return
    with tempfile.TemporaryDirectory(prefix="aotkit-ir-") as tmp:
        yield tmp


def _print_ir_after_all(args, paths) -> None:
    """Copies the per-pass dumps to stderr, headed the way mlir-opt heads them."""
    if not args.print_ir_after_all:
        return
    for path in paths:
        stage = path.name.split("-", 1)[-1].rsplit(".", 1)[0]
        if path.suffix == ".mlir" and stage.startswith("after-"):
            sys.stderr.write(f"// -----// IR Dump After {stage[len('after-') :]} //----- //\n")
            sys.stderr.write(path.read_text())
    sys.stderr.flush()


def _load_module_file(args, default_pipeline: str = "none"):
    """The `Lowered` stage of a module file (text, bytecode, portable or jax.export artifact).

    The file front end reads it (crash-safe on corrupt bytes) and takes the signature from
    `@main`; the module runs as written unless `--pipeline` names a pipeline (`aotkit opt`
    runs the default one).
    """
    if getattr(args, "shapes", None) is not None or getattr(args, "static", None):
        raise UserError(
            f"{args.target}: --shapes and --static apply to FILE.py:FN targets; a module "
            "file's signature comes from its @main"
        )
    if getattr(args, "constraint", None):
        raise UserError(
            f"{args.target}: --constraint applies to the symbolic --shapes of FILE.py:FN "
            "targets; a module file's symbols and constraints (a jax.export artifact's) come "
            "from the file"
        )
    if getattr(args, "mesh", None) is not None or getattr(args, "shardings", None):
        raise UserError(
            f"{args.target}: --mesh and --shardings apply to FILE.py:FN targets; a module "
            "file's shardings come from the module (its mesh goes on the first devices)"
        )
    pipeline = args.pipeline if args.pipeline is not None else default_pipeline
    platform = getattr(args, "platform", None)
    if platform is None and getattr(args, "backend", None):
        platform = aotkit.backends.get(args.backend).platform
    with _dumps(args) as dump_dir, _progress(args, f"reading {args.target}"):
        start = time.perf_counter()
        source = _module_source(args.target)
        lowered = aotkit.load_module(
            source,
            platform=platform,
            pipeline=pipeline,
            dump_dir=dump_dir,
            print_ir_after_all=args.print_ir_after_all or None,
        )
        args.front_seconds = ("load", time.perf_counter() - start)
        _print_ir_after_all(args, lowered.dump_paths)
    _say(
        args,
        f"loaded {lowered.name} with pipeline {pipeline!r} in {_time(args.front_seconds[1])}",
    )
    return lowered


_TARGETS = (
    f"the target is an artifact ({ARTIFACT_SUFFIX}, written by `aotkit compile ... -o "
    f"F{ARTIFACT_SUFFIX}`), a module file (.mlir, .mlirbc) or FILE.py:FN"
)


def _module_source(target: str):
    """What `aotkit.load_module` reads for a module-file target: the file's `Path` (never a
    str, which could read as MLIR text) or stdin's bytes for `-`.

    A missing file, or a `.aotx` file that holds no artifact, is a UserError naming what
    a target can be."""
    if target == "-":
        return _files.read_stream(sys.stdin.buffer, where="stdin")
    path = Path(target)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise UserError(f"{target}: no such file; {_TARGETS}") from None
    except (OSError, ValueError):
        return path  # the reader words it (a name too long, a loop of links)
    if (
        target.endswith(ARTIFACT_SUFFIX)
        and _files.not_regular(st.st_mode) is None
        and not _is_artifact_file(target)  # `aotkit opt f.aotx` reads its module
    ):
        what = "is empty" if st.st_size == 0 else "does not start as an artifact does"
        raise UserError(
            f"{target} is not an aotkit artifact: it {what}; write one with `aotkit compile "
            f"FILE.py:FN --shapes ... -o {target}` or Compiled.save"
        )
    return path


def _lower_target(args, specs: list | dict | None = None, source: str = "--shapes", inputs=None):
    """The `Lowered` stage for the command's target: FILE.py:FN or a module file.

    `args.param_names` names its array arguments (None for a module file)."""
    args.param_names = None
    if _is_python_target(args.target):
        if getattr(args, "platform", None) is not None:
            raise UserError(
                f"{args.target}: --platform picks the lowering of a jax.export artifact "
                "exported for several platforms; a Python function is lowered for --backend"
            )
        specs = specs if specs is not None else args.shapes
        specs = _with_constraints(args, specs)
        if source == "--inputs" and getattr(args, "transform", None) not in (
            None,
            "grad",
            "value_and_grad",
        ):
            raise UserError(
                f"--transform {args.transform} takes other arguments than {args.target}: give "
                "the function's own argument shapes with --shapes (--inputs then holds the "
                "transformed program's inputs)"
            )
        return _transformed(args, _lower_python(args, specs, source, inputs))
    if args.command == "lower":
        raise UserError(
            f"target {args.target!r} is not FILE.py:FN; `aotkit lower` traces a Python "
            "function (use `aotkit opt FILE.mlir` for module files)"
        )
    return _transformed(args, _load_module_file(args))


def _with_constraints(args, specs):
    """`specs` with their symbolic dimensions under the `--constraint`s (one scope)."""
    texts = getattr(args, "constraint", None)
    if not texts:
        return specs
    from jax import tree_util

    from aotkit import shapes
    from aotkit.specs import ShapeDtype

    leaves, tree = tree_util.tree_flatten(specs or [])
    if not any(isinstance(d, shapes.Dim) for s in leaves for d in getattr(s, "shape", ())):
        raise UserError(
            "--constraint: the --shapes have no symbolic dimension to constrain; write symbols "
            "in them, e.g. --shapes 'f32[b,t,512]' --constraint 't % 8 == 0'"
        )
    try:
        scope = shapes.Scope(tuple(texts))
    except (TypeError, ValueError) as e:
        raise UserError(f"--constraint: {e}") from None
    rehomed = [ShapeDtype(tuple(shapes.rehome(d, scope) for d in s.shape), s.dtype) for s in leaves]
    return tree_util.tree_unflatten(tree, rehomed)


def _transformed(args, lowered):
    """The stage `--transform` (or `--grad`) asks for: `Lowered.grad`, `.value_and_grad`,
    `.vjp`, `.jvp` or `.vmap` of the target's program."""
    kind = getattr(args, "transform", None)
    if kind is None:
        return lowered
    if kind in ("grad", "value_and_grad"):
        nums = args.argnums if args.argnums is not None else [0]
        argnums = nums[0] if len(nums) == 1 else tuple(nums)
        return getattr(lowered, kind)(argnums)
    if kind == "vmap":
        if args.axis_size is None:
            raise UserError("--transform vmap needs --axis-size N, the size of the new axis")
        in_axes = tuple(args.in_axes) if args.in_axes is not None else 0
        return lowered.vmap(in_axes, axis_size=args.axis_size)
    return getattr(lowered, kind)()


# --- Output ------------------------------------------------------------------------------------


def _write_text(dest: str | None, text: str, args=None) -> None:
    if not text.endswith("\n"):
        text += "\n"
    if dest in (None, "-"):
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    _write_file(args, dest, text.encode(), "text")


def _write_bytes(dest: str | None, data: bytes, what: str, args=None) -> None:
    if dest in (None, "-"):
        if _isatty(sys.stdout):
            raise UserError(
                f"--emit {what} writes binary data and stdout is a terminal; use -o FILE "
                "(or redirect stdout)"
            )
        sys.stdout.flush()
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
        return
    _write_file(args, dest, data, "artifact" if what == "artifact" else "bytecode")


# What a file holds, by its first bytes (or a .py name); `_write_file` replaces a file of
# another kind only with --force.
_KINDS = {
    "artifact": "an aotkit artifact",
    "bytecode": "MLIR bytecode",
    "npz": "a NumPy .npz archive",
    "npy": "a NumPy .npy array",
    "python": "Python source",
    "text": "text",
}


def _file_kind(path: Path) -> str | None:
    from aotkit import artifacts

    if path.suffix == ".py":
        return "python"
    head = _files.peek(path, 8)  # b"" for a FIFO or a device: nothing to wait for or read
    if artifacts.is_artifact(head[: len(artifacts.MAGIC)]):
        return "artifact"
    if head.startswith(b"ML\xefR"):
        return "bytecode"
    if head.startswith(b"PK\x03\x04"):
        return "npz"
    if head.startswith(b"\x93NUMPY"):
        return "npy"
    return None


def _input_files(args) -> list[tuple[str, str]]:
    """`(path, how it was read)` for every file the command read."""
    files = []
    target = getattr(args, "target", None)
    if target not in (None, "-"):
        path = _split_target(target)[0] if ":" in target and _is_python_target(target) else target
        files.append((str(path), "the target"))
    files.extend((str(p), "an --inputs file") for p in getattr(args, "inputs", None) or ())
    return files


def _write_file(args, dest: str, data: bytes, kind: str, flag: str = "-o") -> None:
    """Writes `data` to `dest` atomically (a temporary file in the same folder, then
    `os.replace`, as `Compiled.save` does): a reader sees the old file or the whole new one.

    Refuses, unless --force, to replace a file the command read or a file of another kind.
    A FIFO or a device (`/dev/null`, a terminal) is written into, as a shell redirection
    writes: renaming a file over it would replace the device itself.
    """
    path = Path(dest)
    try:
        special = _files.not_regular(os.stat(path).st_mode)
    except OSError:
        special = None  # absent (or unreadable: the write below says why)
    # /dev/stdout and the like are links to what the shell opened: written through, as a
    # redirection writes (renaming over one would replace the link in /dev).
    if special not in (None, "a directory") or (dest.startswith("/dev/") and path.is_symlink()):
        try:
            with open(path, "wb") as f:
                f.write(data)
        except OSError as e:
            raise UserError(
                f"{flag}: cannot write {dest!r}: {e.strerror or e}; pick a writable path"
            ) from None
        return
    force = getattr(args, "force", False)
    if path.exists() and not force:
        for source, how in _input_files(args) if args is not None else ():
            with contextlib.suppress(OSError):
                if os.path.samefile(source, path):
                    raise UserError(
                        f"{flag}: {dest!r} is {how} this command read; write the output to "
                        "another path (or pass --force to replace it)"
                    )
        found = _file_kind(path)
        if found is not None and found != kind:
            raise UserError(
                f"{flag}: {dest!r} exists and holds {_KINDS[found]}, not {_KINDS[kind]}; pick "
                "another path (or pass --force to replace it)"
            )
    try:
        _files.write_atomic(path, data)
    except OSError as e:
        raise UserError(
            f"{flag}: cannot write {dest!r}: {e.strerror or e}; pick a writable path"
        ) from None
    # What was written, on stderr (stdout stays the program's output); -q silences it.
    if args is not None and not getattr(args, "quiet", False):
        sys.stderr.write(
            f"aotkit {args.command}: wrote {dest} ({_KINDS[kind]}, {len(data):,} bytes)\n"
        )


def _emit_module(args, lowered) -> None:
    """Writes the module as `--emit` asks: StableHLO text, MLIR bytecode or a portable artifact."""
    from aotkit import modules

    emit = args.emit
    if emit == "stablehlo":
        _write_text(args.output, lowered.as_text(debug_info=args.debug_info), args)
        return
    if emit == "bytecode":
        _write_bytes(args.output, lowered.as_bytecode(), emit, args)
        return
    try:
        target = modules.portable_version(args.target_version, "--target-version")
    except ValueError as e:
        raise UserError(str(e)) from None
    try:
        data = lowered.as_portable_artifact(target)
    except ValueError as e:
        raise UserError(f"--emit portable: {e}, or use --emit bytecode") from None
    _write_bytes(args.output, data, emit, args)


def _time(seconds: float) -> str:
    from aotkit._cli_specs import human_time

    return human_time(seconds)


# --- Commands ----------------------------------------------------------------------------------


def cmd_lower(args) -> int:
    _check_pipeline(args)
    lowered = _lower_target(args)
    _emit_module(args, lowered)
    return EXIT_OK


def cmd_opt(args) -> int:
    if args.list_passes:
        _write_text(None, _passes_text())
        return EXIT_OK
    if args.target is None:
        raise UserError("give the module FILE to optimize ('-' reads stdin), or --list-passes")
    _check_pipeline(args)
    _emit_module(args, _transformed(args, _load_module_file(args, default_pipeline="default")))
    return EXIT_OK


def _passes_text() -> str:
    """`aotkit opt --list-passes`: the named pipelines, aotkit's Python passes and the MLIR
    passes a --pipeline text may name."""
    from aotkit import passes

    lines = ["Named pipelines (--pipeline NAME):"]
    width = max(map(len, passes.NAMED_PIPELINES))
    for name, text in passes.NAMED_PIPELINES.items():
        lines.append(f"  {name.ljust(width)}  {text.strip() or '(no passes)'}")
    lines.append("aotkit passes, written in Python (anywhere in a pipeline text):")
    width = max(map(len, passes.PYTHON_PASSES), default=0)
    for name, p in sorted(passes.PYTHON_PASSES.items()):
        lines.append(f"  {name.ljust(width)}  {p.description}".rstrip())
    taken = {*passes.PYTHON_PASSES, *passes.NAMED_PIPELINES}
    mlir = [n for n in passes.known_names() if n not in taken]
    lines.append("MLIR passes registered in jaxlib (e.g. 'builtin.module(func.func(cse))'):")
    lines.extend(f"  {n}" for n in mlir)
    return "\n".join(lines)


def _check_pipeline(args) -> None:
    """Rejects a bad `--pipeline` before any file is read or traced."""
    from aotkit import passes

    if args.pipeline is not None:
        try:
            passes.check_pipeline(args.pipeline)
        except ValueError as e:
            raise UserError(
                "--pipeline "
                + str(e).removeprefix("pipeline ").replace(_PASS_NAMES_API, _PASS_NAMES_CLI)
            ) from None


# How the pipeline checker's message points to the pass names, and how the CLI does.
_PASS_NAMES_API = "see aotkit.passes.known_names() for the registered names"
_PASS_NAMES_CLI = "`aotkit opt --list-passes` lists the pipelines and passes"


def cmd_compile(args) -> int:
    _check_pipeline(args)
    if args.emit is None:
        args.emit = _compile_emit(args.output)
    compiled = _load_artifact_target(args)
    if compiled is None:
        lowered = _lower_target(args)
        compiled = _compile(args, lowered)
    if args.specialize:
        _specialize(args, compiled)
    if getattr(args, "topology", None) is not None:
        _say_deviceless(args, compiled)
    if args.emit == "artifact":
        _write_bytes(args.output, compiled.serialize(), args.emit, args)
        return EXIT_OK
    if args.emit == "hlo":
        _write_text(args.output, compiled.as_text(), args)
        return EXIT_OK
    analysis = compiled.cost_analysis() if args.emit == "cost" else compiled.memory_analysis()
    if analysis is None:
        raise UserError(
            f"--emit {args.emit}: backend {compiled.backend.name!r} gives no {args.emit} "
            "analysis; use --backend cpu"
        )
    if hasattr(analysis, "to_dict"):
        analysis = analysis.to_dict()
    _write_text(args.output, json.dumps(analysis, indent=2, sort_keys=True, default=float), args)
    return EXIT_OK


def _say_deviceless(args, compiled) -> None:
    """`--topology`: what was compiled and whether it fits in the chips' HBM, on stderr
    (the reason to compile for a TPU without one), unless --quiet."""
    if args.quiet:
        return
    memory = compiled.memory_analysis()
    fit = f": {memory}" if memory is not None else ""
    sys.stderr.write(
        f"aotkit compile: compiled {compiled.name} for TPU topology {args.topology!r} (it runs "
        f"on a TPU host of that topology, not here){fit}\n"
    )


def _specialize(args, compiled) -> None:
    """`--specialize`: compiles a symbolic program's executables for the sizes given."""
    sizes: dict[str, list[int]] = {}
    for name, values in args.specialize:
        sizes.setdefault(name, [])
        sizes[name] += [v for v in values if v not in sizes[name]]
    from aotkit.symbolic import is_symbolic

    if not is_symbolic(compiled.flat_in_specs):
        raise UserError(
            f"--specialize: {compiled.name} has static shapes ({_signature_line(compiled)}); "
            "it applies to programs lowered with symbolic --shapes such as f32[b,784]"
        )
    shown = " ".join(f"{k}={','.join(map(str, v))}" for k, v in sizes.items())
    with _progress(args, f"specializing {compiled.name} to {shown}"):
        start = time.perf_counter()
        compiled.specialize(**sizes)
    held = "; ".join(
        ", ".join(f"{k} = {v}" for k, v in d.items()) for d in compiled.specializations
    )
    _say(args, f"specialized in {_time(time.perf_counter() - start)}; it holds: {held}")


# What `compile -o FILE` writes, by FILE's suffix, when --emit does not say.
COMPILE_SUFFIXES = {ARTIFACT_SUFFIX: "artifact", ".hlo": "hlo", ".txt": "hlo", ".mlir": "hlo"}


def _compile_emit(dest: str | None) -> str:
    """The --emit that `-o dest` implies: hlo on stdout, else by suffix; a JSON or unknown
    suffix asks for --emit rather than guess."""
    if dest in (None, "-"):
        return "hlo"
    suffix = Path(dest).suffix
    if suffix in COMPILE_SUFFIXES:
        return COMPILE_SUFFIXES[suffix]
    known = ", ".join(f"{k}: {v}" for k, v in COMPILE_SUFFIXES.items())
    if suffix == ".json":
        raise UserError(
            f"-o {dest!r}: a .json file can hold the cost or the memory analysis; add --emit "
            "cost or --emit memory"
        )
    what = f"its suffix {suffix!r}" if suffix else "a name without a suffix"
    raise UserError(
        f"-o {dest!r}: cannot tell the output form from {what}; add --emit "
        f"{'|'.join(COMPILE_EMITS)} (without --emit, -o picks by suffix: {known})"
    )


def _compile(args, lowered):
    where = f"on {args.backend}" if args.backend else ""
    if lowered.partitioning is not None:
        _ensure_cpu_devices(args, lowered.partitioning.num_devices)
    with _progress(args, f"compiling {lowered.name} {where}".strip()):
        start = time.perf_counter()
        topology = getattr(args, "topology", None)
        try:
            compiled = lowered.compile(backend=args.backend, topology=topology)
        except ImportError as e:  # --topology where libtpu is not installed
            raise UserError(str(e)) from None
    args.compile_seconds = time.perf_counter() - start
    how = ""
    if compiled.origin == "persistent cache":
        how = " (executable loaded from the persistent cache, not compiled)"
    elif compiled.origin == "compiled":
        from aotkit import cache
        from aotkit.symbolic import is_symbolic

        state = "the persistent cache is off" if cache.directory() is None else "not cached yet"
        if compiled.partitioning is not None:
            state = f"sharded over {compiled.partitioning.describe()}, not cached"
        how = f" (compiled by the backend: {state})"
        if is_symbolic(compiled.flat_in_specs):
            how = " (symbolic shapes: one executable per shape, compiled when first called)"
    _say(
        args,
        f"compiled {lowered.name} for {_backend_said(args, compiled.backend.name)} in "
        f"{_time(args.compile_seconds)}{how}",
    )
    return compiled


def _backend_said(args, name: str) -> str:
    """`backend 'tpu' (the default: the accelerator JAX picks)`: which backend, and why."""
    if getattr(args, "backend", None) is not None:
        return f"backend {name!r}"
    import aotkit.backends

    return f"backend {name!r} (the default: {aotkit.backends.default_name()[1]})"


def _is_artifact_file(target: str) -> bool:
    """Whether `target` is a file that starts with the artifact magic."""
    if _is_python_target(target):
        return False
    from aotkit import artifacts

    # A FIFO or a device is no artifact; the module reader then says what it is.
    return artifacts.is_artifact(_files.peek(target, len(artifacts.MAGIC)))


def _load_artifact_target(args):
    """The `Compiled` of an artifact target (`aotkit.load`), or None for other targets."""
    if not _is_artifact_file(args.target):
        return None

    for flag, given in (
        (
            "--shapes, --static and --constraint",
            args.shapes is not None or args.static or args.constraint,
        ),
        ("--pipeline", args.pipeline is not None),
        ("--dump-dir and --print-ir-after-all", args.dump_dir or args.print_ir_after_all),
        ("--topology", getattr(args, "topology", None) is not None),
    ):
        if given:
            raise UserError(
                f"{args.target} is an AOT artifact, compiled already (its signature and "
                f"pipeline are fixed); drop {flag}"
            )
    with _progress(args, f"loading {args.target}"):
        start = time.perf_counter()
        compiled = aotkit.load(
            Path(args.target), backend=args.backend, portable_only=args.portable_only
        )
        args.front_seconds = ("load", time.perf_counter() - start)
    how = {
        "artifact": "its executable loaded as it is (no compile)",
        "recompiled": "compiled from its portable StableHLO",
    }[compiled.origin]
    _say(args, f"loaded artifact {args.target} in {_time(args.front_seconds[1])}: {how}")
    return compiled


INPUTS_HELP = (
    "one .npy file per array leaf, in the order of the flattened arguments (a dict's leaves "
    "by sorted key), or one .npz file keyed by leaf path: x, params['w'], xs[0]"
)


INPUTS_FIX = "one .npy file per array leaf, in flat order, or one .npz file keyed by leaf path"


_NPZ_MAGIC = b"PK\x03\x04"


def _check_npy_size(file, size: int, label: str) -> None:
    """Refuses a `.npy` stream of `size` bytes whose header declares more data than follows
    it: NumPy allocates the declared array before it reads (80 GB for a 128-byte file)."""
    from numpy.lib import format as npy

    readers = {(1, 0): npy.read_array_header_1_0, (2, 0): npy.read_array_header_2_0}
    try:
        read_header = readers.get(npy.read_magic(file))
        if read_header is None:
            return  # a version NumPy itself names in its error
        shape, _, dtype = read_header(file)
        held = size - file.tell()
    except ValueError:
        return  # not a .npy header: NumPy's own error says so
    finally:
        file.seek(0)
    declared = math.prod(shape) * dtype.itemsize
    if not dtype.hasobject and declared > held:
        raise UserError(
            f"--inputs: {label} declares a {dtype} array of shape {tuple(shape)} ({declared} "
            f"bytes) but holds {held} bytes of data; the file is truncated or was not written "
            "by numpy.save: save inputs with numpy.save or numpy.savez"
        )


class _Inputs:
    """`--inputs`: `.npy` files, one per array leaf in flat order, or one `.npz` file whose
    keys are leaf paths (`params['w']`, as `aotkit run` names them; `args[0]['w']` works too)."""

    def __init__(self, paths: list[str]):
        self.paths = [str(p) for p in paths]
        self.arrays: list[np.ndarray] = []
        self.npz: str | None = None
        self.named: dict[str, np.ndarray] = {}
        archives = []
        for p in self.paths:
            data = self._read(p)
            if isinstance(data, np.ndarray):
                self.arrays.append(data)
            else:
                archives.append(p)
                self.named = data
        if archives and (len(archives) > 1 or self.arrays):
            raise UserError(
                f"--inputs: got {len(archives)} .npz and {len(self.arrays)} .npy file(s); give "
                "either .npy files (one per leaf) or one .npz file keyed by leaf path"
            )
        self.npz = archives[0] if archives else None

    @staticmethod
    def _read(p: str) -> np.ndarray | dict[str, np.ndarray]:
        """The array of a `.npy` file, or the arrays of an `.npz` file by key.

        Read from one descriptor, opened only if `p` is a regular file (a FIFO would block
        NumPy's open); no size limit, since inputs are as large as the program's arguments."""
        fix = "save inputs with numpy.save or numpy.savez"
        try:
            with _files.opened(p, where=f"--inputs: {p!r}", fix=fix, limit=None) as f:
                with open(f.fd, "rb", closefd=False) as file:
                    try:
                        return _Inputs._load(file, f.size, p)
                    except (OSError, ValueError, EOFError) as e:
                        raise UserError(
                            f"--inputs: cannot read {p!r} as a .npy or .npz file ({e}); {fix}"
                        ) from None
        except FileNotFoundError:
            raise UserError(f"--inputs: file {p!r} does not exist; give {INPUTS_FIX}") from None
        except OSError as e:
            raise UserError(
                f"--inputs: cannot read {p!r} as a .npy or .npz file ({e}); {fix}"
            ) from None
        except ValueError as e:  # not a regular file: refused before it was opened
            raise UserError(str(e)) from None

    @staticmethod
    def _load(file, size: int, p: str) -> np.ndarray | dict[str, np.ndarray]:
        if file.read(len(_NPZ_MAGIC)) != _NPZ_MAGIC:
            file.seek(0)
            _check_npy_size(file, size, repr(p))
            return np.load(file, allow_pickle=False)
        file.seek(0)
        with np.load(file, allow_pickle=False) as data:
            for info in data.zip.infolist():
                key = info.filename.removesuffix(".npy")
                with data.zip.open(info) as member:
                    _check_npy_size(member, info.file_size, f"{p!r}[{key!r}]")
            return {key: data[key] for key in data.files}

    def specs(self, where: str) -> list | dict:
        """The argument specs the files imply: one per `.npy` file, or by name from `.npz` keys."""
        from aotkit._cli_specs import tree_from_keys
        from aotkit.specs import spec_of

        if self.npz is None:
            return [spec_of(x) for x in self.arrays]
        keys = {k: spec_of(x) for k, x in self.named.items()}
        try:
            return tree_from_keys(keys, f"--inputs: {self.npz!r}")
        except ValueError as e:
            raise UserError(str(e)) from None

    def leaves(self, names: list[str], specs, params: list[str] | None, owner: str) -> list:
        """The arrays for the leaves `names` (with `specs`) of `owner`'s arguments, in order."""
        from aotkit._cli_specs import canonical
        from aotkit.specs import restore_dtype, spec_of
        from aotkit.symbolic import is_symbolic

        signature = ", ".join(f"{n}: {s}" for n, s in zip(names, specs, strict=True)) or "none"
        if self.npz is None:
            if len(self.arrays) != len(specs):
                raise UserError(
                    f"--inputs: {owner} takes {len(specs)} array leaf(s) ({signature}) but got "
                    f"{len(self.arrays)} file(s); give {INPUTS_FIX} (see aotkit run --help)"
                )
            found = list(zip(self.paths, self.arrays, strict=True))
            labels = [repr(p) for p in self.paths]
        else:
            by_key = {}
            for key, x in self.named.items():
                c = canonical(key, params)
                if c is None:
                    raise UserError(
                        f"--inputs: {self.npz!r}: key {key!r} is not a leaf path; key each "
                        f"array by its leaf's path ({signature})"
                    )
                by_key[c] = (key, x)
            wanted = [canonical(n, params) for n in names]
            missing = [
                f"{n}: {s}" for n, s, w in zip(names, specs, wanted, strict=True) if w not in by_key
            ]
            if missing:
                raise UserError(
                    f"--inputs: {self.npz!r} has no array for {', '.join(missing)} (its keys: "
                    f"{', '.join(self.named) or 'none'}); save each leaf of {owner} under its "
                    "path"
                    + (
                        " (a module file or an artifact keeps no parameter names: key by "
                        "position, args[0]['w'])"
                        if params is None
                        else ""
                    )
                )
            extra = [key for c, (key, _) in by_key.items() if c not in wanted]
            if extra:
                raise UserError(
                    f"--inputs: {self.npz!r}: key {extra[0]!r} is no argument leaf of {owner} "
                    f"({signature}); remove it or rename it to a leaf path"
                )
            found = [by_key[w] for w in wanted]
            labels = [f"{self.npz!r}[{key!r}]" for key, _ in found]
        arrays = []
        for (_, x), label, name, s in zip(found, labels, names, specs, strict=True):
            if is_symbolic([s]):
                # Its sizes are the array's to give; the call checks them with the others'.
                if getattr(x, "dtype", None) != s.dtype or np.ndim(x) != len(s.shape):
                    raise UserError(
                        f"--inputs: {label} holds {spec_of(x)} but argument {name} is {s}; "
                        "save an array of that dtype and rank"
                    )
                arrays.append(x)
                continue
            x = restore_dtype(x, spec_of(s))  # numpy.save keeps int4, f8e4m3fn as raw bytes
            if spec_of(x) != spec_of(s):
                raise UserError(
                    f"--inputs: {label} holds {spec_of(x)} but argument {name} is "
                    f"{spec_of(s)}; save the array with that shape and dtype"
                )
            arrays.append(x)
        return arrays


def _random_input(rng: np.random.Generator, spec) -> np.ndarray:
    from aotkit import dtypes

    dtype, shape = spec.dtype, spec.shape
    if dtype.kind == "b":
        return rng.random(shape) < 0.5
    if dtypes.is_integer(dtype):
        info = dtypes.iinfo(dtype)
        lo, hi = max(int(info.min), -10), min(int(info.max), 10)
        return np.asarray(rng.integers(lo, hi, size=shape, endpoint=True), dtype=dtype)
    if dtype.kind == "c":
        z = rng.standard_normal(shape) + 1j * rng.standard_normal(shape)
        return np.asarray(z, dtype=dtype)
    return np.asarray(rng.standard_normal(shape), dtype=dtype)


# Set in the worker process `aotkit run --timeout` starts, which then runs the command itself.
_WORKER_ENV = "AOTKIT_RUN_WORKER"


def _run_in_worker(args) -> int:
    """`aotkit run --timeout S`: the same command in a worker process, killed at the deadline.

    A computation cannot be interrupted inside the process that runs it (jaxlib's call runs
    to its end, and a Ctrl-C during it is lost), so the bound is a process: its own session,
    so that the terminal's Ctrl-C reaches only this process, which then kills it.
    """
    env = dict(os.environ, **{_WORKER_ENV: "1"})
    argv = [sys.executable, "-m", "aotkit", *args.argv]
    sys.stdout.flush()
    sys.stderr.flush()
    worker = subprocess.Popen(argv, env=env, start_new_session=True)
    try:
        returncode = worker.wait(timeout=args.timeout)
    except subprocess.TimeoutExpired:
        _kill_group(worker)
        raise UserError(
            f"--timeout: {args.target} did not finish within {args.timeout:g} s (load, compile "
            "and run); its worker process was killed. Raise --timeout, or check the module for "
            "a loop that does not end"
        ) from None
    except BaseException:
        _kill_group(worker)
        raise
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        raise UserError(
            f"the worker process running {args.target} died of {name}; nothing in this "
            "process was lost. Rerun with --traceback, and report it with the file"
        )
    return returncode


def _kill_group(worker: subprocess.Popen) -> None:
    """Kills the worker and what it started (the module-parsing sandbox), then reaps it."""
    try:
        os.killpg(worker.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    worker.wait()


def _stage_and_inputs(args, artifacts: bool = True):
    """The `Lowered` stage (or an artifact's `Compiled`) of the target, whether it was loaded
    from an artifact, and the `--inputs` arrays in flat leaf order (None: none given)."""
    args.param_names = None
    inputs = _Inputs(args.inputs) if args.inputs else None
    specs, source = args.shapes, "--shapes"
    if inputs is not None and specs is None and _is_python_target(args.target):
        specs, source = inputs.specs(args.target), "--inputs"
    loaded = _load_artifact_target(args) if artifacts else None
    if loaded is not None and loaded.signature.arg_names and None not in loaded.signature.arg_names:
        args.param_names = list(loaded.signature.arg_names)  # as the function named them
    stage = loaded if loaded is not None else _lower_target(args, specs, source, inputs)
    if inputs is None:
        return stage, loaded is not None, None
    names = _leaf_names(args, stage)
    leaves = inputs.leaves(names, stage.flat_in_specs, args.param_names, stage.name)
    return stage, loaded is not None, leaves


def _leaf_names(args, stage) -> list[str]:
    from aotkit._cli_specs import leaf_names

    return leaf_names(stage.in_tree, getattr(args, "param_names", None))


def cmd_run(args) -> int:
    import jax
    from jax import tree_util

    from aotkit import arguments
    from aotkit.specs import spec_of
    from aotkit.symbolic import is_symbolic

    if args.timeout is not None and not os.environ.get(_WORKER_ENV):
        return _run_in_worker(args)
    _check_pipeline(args)
    if args.output is not None:
        _check_npz_output(args)
    lowered, loaded, leaves = _stage_and_inputs(args)
    flat_specs = lowered.flat_in_specs
    if leaves is None and is_symbolic(flat_specs):
        raise UserError(
            f"{lowered.name} has symbolic shapes ({_signature_line(lowered)}); give --inputs "
            "files, whose shapes choose the sizes it runs with"
        )
    if leaves is None:
        rng = np.random.default_rng(args.seed)
        leaves = [_random_input(rng, s) for s in flat_specs]
        names = _leaf_names(args, lowered)
        given = ", ".join(f"{n}: {s}" for n, s in zip(names, flat_specs, strict=True))
        _say(args, f"random inputs, seed {args.seed}: {given or 'none'}")
    compiled = lowered if loaded else _compile(args, lowered)
    # A typed PRNG key leaf's input is its uint32 data (the spec the module has), given as
    # a key of the program's implementation; its result is saved and printed as its data.
    for i, key in enumerate(lowered.signature.in_keys):
        if key is not None:
            leaves[i] = arguments.wrap_key(np.asarray(leaves[i]), key)
    call_args, call_kwargs = tree_util.tree_unflatten(lowered.in_tree, leaves)
    times = []
    for _ in range(args.repeat):
        start = time.perf_counter()
        out = compiled(*call_args, **call_kwargs)
        _block(out)
        times.append(time.perf_counter() - start)
    outputs = {}
    for path, leaf in tree_util.tree_flatten_with_path(out)[0]:
        x = np.asarray(leaf if arguments.key_dtype(leaf) is None else jax.random.key_data(leaf))
        name = f"out{tree_util.keystr(path)}"
        outputs[name] = x
        if compiled.partitioning is not None:
            from aotkit import spmd

            _say(args, f"{name} sharded {spmd.sharding_text(leaf.sharding)}")
        sys.stdout.write(f"{name}: {spec_of(x)}\n{_format_array(x)}\n")
    sys.stdout.flush()
    if args.output is not None:
        buffer = io.BytesIO()
        np.savez(buffer, **outputs)
        _write_file(args, args.output, buffer.getvalue(), "npz", "--output")
        _say(args, f"saved {', '.join(outputs) or 'no outputs'} to {args.output}")
    best = f"best of {args.repeat}: " if args.repeat > 1 else ""
    if not args.quiet:
        compile_time = "" if loaded else f"compile {_time(args.compile_seconds)}, "
        sys.stderr.write(
            f"aotkit run: {args.front_seconds[0]} {_time(args.front_seconds[1])}, "
            f"{compile_time}run {best}{_time(min(times))}\n"
        )
    elif args.repeat > 1:
        # --repeat asks for a time; -q only drops the rest.
        sys.stderr.write(f"aotkit run: run {best}{_time(min(times))}\n")
    return EXIT_OK


def _check_npz_output(args) -> None:
    if not args.output.endswith(".npz") or args.output == ".npz":
        raise UserError(
            f"--output: {args.output!r} does not end in .npz; aotkit run saves the outputs as "
            "one .npz file keyed by leaf path (out, out['s'], out[0]): -o out.npz"
        )


def cmd_check(args) -> int:
    from aotkit.crosscheck import check_lowered

    _check_pipeline(args)
    lowered, _, inputs = _stage_and_inputs(args, artifacts=False)
    with _progress(args, f"checking {lowered.name} on every backend"):
        report = check_lowered(
            lowered,
            inputs,
            backends=args.backends,
            reference=args.reference,
            seed=args.seed,
            rtol=args.rtol,
            atol=args.atol,
        )
    sys.stdout.write(report.table())
    sys.stdout.flush()
    if not report.ok:
        sys.stderr.write(
            f"aotkit check: {', '.join(report.disagreeing)} disagree with {args.reference} "
            "beyond tolerance\n"
        )
        return EXIT_USER
    return EXIT_OK


def _block(out) -> None:
    from jax import tree_util

    for leaf in tree_util.tree_leaves(out):
        ready = getattr(leaf, "block_until_ready", None)
        if ready is not None:
            ready()


def _format_array(x: np.ndarray) -> str:
    return np.array2string(x, threshold=64, edgeitems=3, max_line_width=100)


def cmd_inspect(args) -> int:
    """Prints an artifact's header, sections and checksum status, or the signature that
    `aotkit.load_module` reads from a module file."""
    from aotkit import artifacts

    if _is_artifact_file(args.target):
        # Worded as aotkit.load, as `describe`'s own checks are: the same file, the same text.
        data, label = artifacts.read(Path(args.target))
        _write_text(None, artifacts.describe(data, label))
        return EXIT_OK
    if _is_python_target(args.target):
        raise UserError(
            f"{args.target} is Python source; inspect takes an artifact (.aotx) or a module "
            "file (lower a function with `aotkit lower` or `aotkit compile -o F.aotx`)"
        )
    from aotkit.frontends import files

    source = _module_source(args.target)
    with _progress(args, f"reading {args.target}"):
        data, label = (source, "<stdin>") if isinstance(source, bytes) else files._read(source)
        kind = files.sniff(data, label)
        traced = aotkit.load_module(source)
    kinds = {
        "text": "StableHLO MLIR text",
        "bytecode": "MLIR bytecode",
        "portable": f"a StableHLO portable artifact ({files.bytecode_producer(data)})",
        "jax.export": "a jax.export artifact",
    }
    donated = [i for i, d in enumerate(traced.donated) if d]
    lines = [
        f"{label}: {kinds[kind]}, {len(data)} bytes",
        f"function: {_signature_line(traced)}",
        f"in_tree: {traced.in_tree}",
        f"out_tree: {traced.out_tree}",
        f"donated arguments: {', '.join(map(str, donated)) or 'none'}",
    ]
    if traced.partitioning is not None:
        lines.append(f"partitioned over: {traced.partitioning.describe()}")
    _write_text(None, "\n".join(lines))
    return EXIT_OK


def _signature_line(stage, params: list[str] | None = None) -> str:
    """`f(x: f32[3], params['w']: f32[4,3]) -> (out: f32[3])`: every leaf named by its path."""
    from aotkit.arguments import format_signature

    return format_signature(stage, params)


# `aotkit backends` shows a version in one cell of this many characters at most (-v: all).
VERSION_WIDTH = 60


def _one_line(text: str, width: int = VERSION_WIDTH) -> str:
    """A backend's version in one table cell: escaped (a TPU's platform version is three
    lines), cut to `width` characters."""
    text = printable(text)
    return text if len(text) <= width else text[: width - 3] + "..."


def cmd_backends(args) -> int:
    import aotkit.backends

    default, why = aotkit.backends.default_name()
    rows = [("", "NAME", "PLATFORM", "VERSION", "DEVICES")]
    infos = aotkit.backends.available()
    for info in infos:
        rows.append(
            (
                "*" if info.name == default else "",
                info.name,
                info.platform,
                _one_line(info.version) or "-",
                str(info.device_count),
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        sys.stdout.write("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
        sys.stdout.write("\n")
    listed = "*" if any(info.name == default for info in infos) else "not listed here:"
    sys.stdout.write(
        f"{listed} the default backend is {default!r} ({why}); "
        f"--backend or {aotkit.backends.ENV} chooses another\n"
    )
    if args.verbose:
        for info in infos:
            lines = (info.version or "-").split("\n")  # a \u2028 stays in its line, escaped
            sys.stdout.write(f"{info.name}: version: {printable(lines[0])}\n")
            for line in lines[1:]:
                sys.stdout.write(f"{' ' * len(info.name)}  {printable(line)}\n")
            for d in aotkit.backends.get(info.name).devices():
                sys.stdout.write(f"{info.name}: {printable(str(d))}\n")
    return EXIT_OK


# --- Parser ------------------------------------------------------------------------------------


def _add_common_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("output control")
    g.add_argument("-q", "--quiet", action="store_true", help="no progress or timing on stderr")
    g.add_argument("-v", "--verbose", action="store_true", help="say what each step did")
    g.add_argument("--traceback", action="store_true", help="on error, show aotkit's own traceback")


def _add_target_args(p: argparse.ArgumentParser, *, files: bool) -> None:
    what = "FILE.py:FN, a StableHLO module file or an artifact (.aotx)" if files else "FILE.py:FN"
    p.add_argument(
        "target",
        metavar="TARGET",
        help=f"{what} (FN may be dotted: model.forward; FILE's folder is importable)",
    )
    p.add_argument(
        "--shapes",
        nargs="*",
        action=_ShapesAction,
        metavar="SPEC",
        help="one spec per array argument: f32[] i32[3] bf16[2,3], or a pytree of specs as "
        """JSON: '{"w": "f32[4,3]", "b": "f32[3]"}' '["f32[2]", "f32[3]"]' (quote them for the """
        "shell); the list ends at TARGET, so options may come first",
    )
    p.add_argument(
        "--static",
        action="append",
        type=_static_arg,
        metavar="NAME=VALUE",
        help="a static argument as a Python literal (repeatable): --static n=3",
    )
    p.add_argument(
        "--constraint",
        action="append",
        metavar="TEXT",
        help="a constraint on the symbols of symbolic --shapes such as f32[b,t]: 't %% 8 == 0', "
        "'t <= 2048', 'b >= 1' (repeatable; quote it for the shell)",
    )
    if files:
        p.add_argument(
            "--platform",
            metavar="PLATFORM",
            help="for a jax.export artifact exported for several platforms: the lowering to "
            "take (cpu, cuda, rocm, tpu; default: the platform of --backend, else cpu's)",
        )
    p.add_argument(
        "--frontend",
        choices=("auto", "aotkit", "jax"),
        default="auto",
        help="what lowers FILE.py:FN: aotkit's tracer, JAX itself (jax.jit(fn).lower), or "
        "auto: JAX when FN uses jax and not aotkit (-v says which and why; default: auto)",
    )
    p.add_argument(
        "--mesh",
        type=_mesh_arg,
        metavar="NAME=SIZE,...",
        help="shard FN over a mesh of the backend's first devices: 'data=4,model=2' (on the "
        "CPU the process gets as many devices); arguments are replicated unless --shardings",
    )
    p.add_argument(
        "--shardings",
        nargs="+",
        type=_sharding_arg,
        metavar="SHARDING",
        help=f"one per array argument, over --mesh: {SHARDING_SYNTAX}",
    )
    p.add_argument(
        "--no-autograph",
        dest="autograph",
        action="store_false",
        help="trace FN's Python loops and branches as written (loops unroll, an if on a traced "
        "value is an error) instead of turning them into StableHLO control flow",
    )


def _add_pipeline_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--pipeline",
        metavar="PIPELINE",
        help="a named pipeline (none, default) or MLIR pass syntax: "
        "'builtin.module(func.func(canonicalize,cse))' (default: 'default'; module files "
        "given to compile and run are compiled as written)",
    )
    p.add_argument("--dump-dir", metavar="DIR", help="dump the module after each stage into DIR")
    p.add_argument(
        "--print-ir-after-all",
        action="store_true",
        help="print the module after each pass to stderr (and dump it with --dump-dir)",
    )


TRANSFORMS = ("grad", "value_and_grad", "vjp", "jvp", "vmap")


def _axis(text: str):
    if text.lower() == "none":
        return None
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an axis: give an int or 'none'"
        ) from None


def _add_transform_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("transforms (aotkit's own, on the StableHLO program)")
    g.add_argument(
        "--transform",
        choices=TRANSFORMS,
        help="transform the program: its gradient (grad, value_and_grad: a float scalar "
        "output), its reverse-mode program vjp(primals, cotangents), its forward-mode "
        "program jvp(primals, tangents), or vmap over a new axis (--axis-size)",
    )
    g.add_argument(
        "--grad", dest="transform", action="store_const", const="grad", help="--transform grad"
    )
    g.add_argument(
        "--argnums",
        nargs="+",
        type=int,
        metavar="I",
        help="grad, value_and_grad: the positional arguments to differentiate (default 0)",
    )
    g.add_argument(
        "--in-axes",
        nargs="+",
        type=_axis,
        metavar="AXIS",
        help="vmap: the mapped axis of each positional argument, or 'none' (default 0)",
    )
    g.add_argument(
        "--axis-size", type=_positive_int, metavar="N", help="vmap: the size of the new axis"
    )


def _add_ir_output_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--emit", choices=IR_EMITS, default="stablehlo", help="output form")
    p.add_argument(
        "--target-version",
        metavar="X.Y.Z",
        help="StableHLO version of --emit portable (default: current)",
    )
    p.add_argument("--debug-info", action="store_true", help="print file:line locations")
    p.add_argument("-o", "--output", metavar="PATH", help="write here ('-' = stdout, default)")
    _add_force_arg(p)


def _add_force_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--force",
        action="store_true",
        help="let -o replace a file this command read, or one that holds another kind of data",
    )


def _backend_name(text: str) -> str:
    """`--backend NAME`: a backend aotkit knows (started or not); another name is a usage
    error listing those that start here."""
    import aotkit.backends

    if aotkit.backends.known(text):
        return text
    names = aotkit.backends._startable()
    near = difflib.get_close_matches(text, names, n=1)
    hint = f"did you mean {near[0]!r}? " if near else ""
    raise argparse.ArgumentTypeError(
        f"unknown backend {text!r}; {hint}available here: {', '.join(names)} (`aotkit "
        "backends` lists them with their devices)"
    )


def _add_backend_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--backend",
        metavar="NAME",
        type=_backend_name,
        help="backend to compile for (default: the accelerator JAX picks, else cpu; "
        "AOTKIT_BACKEND sets another)",
    )


def _add_portable_only_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--portable-only",
        action="store_true",
        help="for an artifact target: never load its native executable (code run as it is, "
        "as trusted as the file's writer); compile its portable StableHLO here",
    )


def build_parser() -> argparse.ArgumentParser:
    from aotkit import __version__

    parser = argparse.ArgumentParser(
        prog="aotkit",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Lower, optimize, compile and run Python array programs through StableHLO.",
        epilog="example: aotkit lower examples/mlp.py:predict --shapes 'f32[8,4]' 'f32[4,16]' "
        "'f32[16]' 'f32[16,3]'",
    )
    parser.add_argument("--version", action="version", version=f"aotkit {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = sub.add_parser("lower", help="print the StableHLO module of FILE.py:FN")
    _add_target_args(p, files=False)
    _add_pipeline_args(p)
    _add_ir_output_args(p)
    _add_transform_args(p)
    _add_common_args(p)
    p.set_defaults(func=cmd_lower)

    p = sub.add_parser("compile", help="compile and print optimized HLO or an analysis")
    _add_target_args(p, files=True)
    _add_pipeline_args(p)
    _add_backend_arg(p)
    p.add_argument(
        "--topology",
        metavar="CHIP:BOUNDS",
        help="with --backend tpu: compile for this TPU slice (v5e:1x1, v5e:2x2, v4:2x2x1, ...) "
        "on a machine without one, through libtpu (pip install 'aotkit[tpu]'); --mesh is "
        "over its devices; the result runs only on a TPU host of that topology",
    )
    _add_portable_only_arg(p)
    p.add_argument(
        "--emit",
        choices=COMPILE_EMITS,
        help="output form: optimized HLO, cost or memory JSON, or an AOT artifact that "
        "`aotkit run` and aotkit.load run without compiling (default: by -o's suffix: "
        ".aotx artifact; .hlo, .txt, .mlir hlo; hlo on stdout; any other suffix needs --emit)",
    )
    p.add_argument("-o", "--output", metavar="PATH", help="write here ('-' = stdout, default)")
    p.add_argument(
        "--specialize",
        action="append",
        type=_specialize_arg,
        metavar="SYMBOL=SIZE,...",
        help="for a program with symbolic shapes: compile its executables for these sizes now "
        "(every combination, repeatable per symbol: --specialize b=1,8,32 --specialize t=128); "
        "the artifact holds them, and compiles other shapes when called",
    )
    _add_force_arg(p)
    _add_transform_args(p)
    _add_common_args(p)
    p.set_defaults(func=cmd_compile)

    p = sub.add_parser("run", help="compile and run on given or seeded random inputs")
    _add_target_args(p, files=True)
    _add_pipeline_args(p)
    _add_backend_arg(p)
    _add_portable_only_arg(p)
    # extend: `--inputs a.npy --inputs b.npy` is both files, not silently the last one
    p.add_argument("--inputs", nargs="+", action="extend", metavar="FILE", help=INPUTS_HELP)
    p.add_argument("--seed", type=_seed, default=0, help="seed of the random inputs (default 0)")
    p.add_argument(
        "--repeat",
        type=_positive_int,
        default=1,
        help="run N times, report the best time (even with -q)",
    )
    p.add_argument(
        "-o",
        "--output",
        metavar="FILE.npz",
        help="also save the outputs to one .npz file keyed by leaf path: out, out['s'], out[0]",
    )
    _add_force_arg(p)
    p.add_argument(
        "--timeout",
        type=_positive_seconds,
        metavar="SECONDS",
        help="load, compile and run in a worker process, killed (exit 1) if it has not "
        "finished after SECONDS; a crash in it is an error here. Ctrl-C kills it too",
    )
    _add_transform_args(p)
    _add_common_args(p)
    p.set_defaults(func=cmd_run)

    p = sub.add_parser(
        "check", help="run on every backend on the same inputs and compare outputs with cpu"
    )
    _add_target_args(p, files=True)
    _add_pipeline_args(p)
    p.add_argument(
        "--backends", nargs="+", metavar="NAME", help="backends to compare (default: all)"
    )
    p.add_argument("--reference", default="cpu", metavar="NAME", help="the oracle (default cpu)")
    # extend: `--inputs a.npy --inputs b.npy` is both files, not silently the last one
    p.add_argument("--inputs", nargs="+", action="extend", metavar="FILE", help=INPUTS_HELP)
    p.add_argument("--seed", type=_seed, default=0, help="seed of the random inputs (default 0)")
    p.add_argument(
        "--rtol",
        type=float,
        help="relative tolerance of floats (default: per platform and dtype, looser on "
        "accelerators; docs/backends.md)",
    )
    p.add_argument(
        "--atol",
        type=float,
        help="absolute tolerance of floats (default: per platform and dtype, as --rtol)",
    )
    _add_transform_args(p)
    _add_common_args(p)
    p.set_defaults(func=cmd_check)

    p = sub.add_parser("opt", help="run a pass pipeline over a StableHLO module file")
    p.add_argument(
        "target",
        metavar="FILE",
        nargs="?",
        help="StableHLO text, MLIR bytecode, a portable artifact or a jax.export artifact; "
        "'-' reads it from stdin",
    )
    p.add_argument(
        "--list-passes",
        action="store_true",
        help="list the named pipelines and the passes a --pipeline may name, and exit",
    )
    p.add_argument(
        "--platform",
        metavar="PLATFORM",
        help="for a jax.export artifact exported for several platforms: the lowering to take "
        "(default: cpu's)",
    )
    _add_pipeline_args(p)
    _add_ir_output_args(p)
    _add_transform_args(p)
    _add_common_args(p)
    p.set_defaults(func=cmd_opt)

    p = sub.add_parser(
        "inspect", help="print an artifact's header and checksums, or a module file's signature"
    )
    p.add_argument("target", metavar="FILE", help="an artifact (.aotx) or a module file")
    _add_common_args(p)
    p.set_defaults(func=cmd_inspect)

    p = sub.add_parser("backends", help="list backends with platform, version and devices")
    _add_common_args(p)
    p.set_defaults(func=cmd_backends)
    return parser


def _positive_int(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return n


def _seed(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = -1
    if n < 0:  # NumPy's generators take no negative seed
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {text!r}")
    return n


def _positive_seconds(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        seconds = 0.0
    if not 0 < seconds < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}")
    return seconds


def main(argv: list[str] | None = None) -> int:
    """Runs one `aotkit` command; returns the exit code (0 ok, 1 user error, 2 usage)."""
    parser = build_parser()
    argv = list(argv) if argv is not None else sys.argv[1:]
    try:
        args = parser.parse_args(_targets_first(argv))
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else EXIT_USAGE
    # `run --timeout` starts a worker process with the same command line.
    args.argv = argv
    try:
        return args.func(args)
    except KeyboardInterrupt:
        sys.stderr.write(f"aotkit {args.command}: interrupted\n")
        return 130
    except BrokenPipeError:
        # The reader (`| head`) left; Python would otherwise complain again at exit.
        with contextlib.suppress(OSError, ValueError, AttributeError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_USER
    except Exception as e:
        return _report(args.command, e, args.traceback)


if __name__ == "__main__":
    sys.exit(main())
