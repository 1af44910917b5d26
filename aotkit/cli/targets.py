"""The command's target as a stage: FILE.py:FN, a module file or an artifact.

`lower_target` gives the `Lowered` stage of FILE.py:FN (imported as a fresh module, its
`--shapes` or `--inputs` placed as a Python caller would, lowered through `aotkit.lower`,
the one call into the front ends) or of a module file (`load_module_file`, the one place
module files are read, through `aotkit.load_module`), with `--transform` applied;
`load_artifact_target` the `Compiled` of an artifact (`aotkit.load`). Mistakes are `UserError`s
that say what a target can be.
"""

from __future__ import annotations

import contextlib
import difflib
import importlib.util
import inspect
import os
import re
import sys
import tempfile
import time
from pathlib import Path

import aotkit
from aotkit import _files
from aotkit.cli.report import (
    UserError,
    human_time,
    progress,
    say,
    user_code_error,
    user_frames,
)

# `aotkit.artifacts.SUFFIX`, spelled here so that `aotkit --help` starts without importing
# jax (tests/test_cli.py checks that the two agree).
ARTIFACT_SUFFIX = ".aotx"


def is_python_target(target: str) -> bool:
    path, colon, _ = target.rpartition(":")
    return (bool(colon) and path.endswith(".py")) or target.endswith(".py")


def split_target(target: str) -> tuple[Path, str]:
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
        raise user_code_error(f"importing {str(path)!r} failed", e) from e
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
    from aotkit.cli.notation import format_tree

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
    `--inputs`) a dict of them by parameter name. `inputs` (an `Inputs`) are checked against
    the argument leaves before tracing, where a mismatch would be a shape error inside FN.
    Sets `args.param_names`, the names of the array arguments, in order.
    """
    from jax import tree_util

    from aotkit import frontends
    from aotkit.cli.notation import leaf_names

    path, qualname = split_target(args.target)
    label = f"{path}:{qualname}"
    with progress(args, f"importing {path}"):
        module = _import_file(path)
    fn = _resolve(module, path, qualname)
    choice = frontends.resolve(fn, getattr(args, "frontend", "auto"), "--frontend")
    say(args, f"front end for {label}: {choice.name} ({choice.reason})")
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
    with _dumps(args) as dump_dir, progress(args, f"lowering {label}"):
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
            if user_frames(e):
                raise user_code_error(f"lowering {label} failed", e) from e
            raise
        _print_ir_after_all(args, lowered.dump_paths)
    args.front_seconds = ("lower", time.perf_counter() - start)
    say(args, f"lowered {label} in {human_time(args.front_seconds[1])}")
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


def load_module_file(args, default_pipeline: str = "none"):
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
    with _dumps(args) as dump_dir, progress(args, f"reading {args.target}"):
        start = time.perf_counter()
        source = module_source(args.target)
        lowered = aotkit.load_module(
            source,
            platform=platform,
            pipeline=pipeline,
            dump_dir=dump_dir,
            print_ir_after_all=args.print_ir_after_all or None,
        )
        args.front_seconds = ("load", time.perf_counter() - start)
        _print_ir_after_all(args, lowered.dump_paths)
    say(
        args,
        f"loaded {lowered.name} with pipeline {pipeline!r} in {human_time(args.front_seconds[1])}",
    )
    return lowered


_TARGETS = (
    f"the target is an artifact ({ARTIFACT_SUFFIX}, written by `aotkit compile ... -o "
    f"F{ARTIFACT_SUFFIX}`), a module file (.mlir, .mlirbc) or FILE.py:FN"
)


def module_source(target: str):
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
        and not is_artifact_file(target)  # `aotkit opt f.aotx` reads its module
    ):
        what = "is empty" if st.st_size == 0 else "does not start as an artifact does"
        raise UserError(
            f"{target} is not an aotkit artifact: it {what}; write one with `aotkit compile "
            f"FILE.py:FN --shapes ... -o {target}` or Compiled.save"
        )
    return path


def lower_target(args, specs: list | dict | None = None, source: str = "--shapes", inputs=None):
    """The `Lowered` stage for the command's target: FILE.py:FN or a module file.

    `args.param_names` names its array arguments (None for a module file)."""
    args.param_names = None
    if is_python_target(args.target):
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
        return transformed(args, _lower_python(args, specs, source, inputs))
    if args.command == "lower":
        raise UserError(
            f"target {args.target!r} is not FILE.py:FN; `aotkit lower` traces a Python "
            "function (use `aotkit opt FILE.mlir` for module files)"
        )
    return transformed(args, load_module_file(args))


def _with_constraints(args, specs):
    """`specs` with their symbolic dimensions under the `--constraint`s (one scope)."""
    texts = getattr(args, "constraint", None)
    if not texts:
        return specs
    from jax import tree_util

    from aotkit.specs import ShapeDtype
    from aotkit.symbolic import algebra

    leaves, tree = tree_util.tree_flatten(specs or [])
    if not any(isinstance(d, algebra.Dim) for s in leaves for d in getattr(s, "shape", ())):
        raise UserError(
            "--constraint: the --shapes have no symbolic dimension to constrain; write symbols "
            "in them, e.g. --shapes 'f32[b,t,512]' --constraint 't % 8 == 0'"
        )
    try:
        scope = algebra.SymbolicScope(tuple(texts))
    except (TypeError, ValueError) as e:
        raise UserError(f"--constraint: {e}") from None
    rehomed = [
        ShapeDtype(tuple(algebra.rehome(d, scope) for d in s.shape), s.dtype) for s in leaves
    ]
    return tree_util.tree_unflatten(tree, rehomed)


def transformed(args, lowered):
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


def ensure_cpu_devices(args, n: int) -> None:
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
        say(args, f"started the CPU backend with {n} devices for the mesh")


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
    from aotkit.cli.notation import format_tree

    names, sizes = sharding.parse_axes(mesh_text, "--mesh")
    ensure_cpu_devices(args, math.prod(sizes))
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
    say(args, f"mesh {dict(zip(names, sizes))} over devices {ids}")
    return tuple(sharding.NamedSharding(mesh, p) for p in given)


def is_artifact_file(target: str) -> bool:
    """Whether `target` is a file that starts with the artifact magic."""
    if is_python_target(target):
        return False
    from aotkit import artifacts

    # A FIFO or a device is no artifact; the module reader then says what it is.
    return artifacts.is_artifact(_files.peek(target, len(artifacts.MAGIC)))


def load_artifact_target(args):
    """The `Compiled` of an artifact target (`aotkit.load`), or None for other targets."""
    if not is_artifact_file(args.target):
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
    with progress(args, f"loading {args.target}"):
        start = time.perf_counter()
        compiled = aotkit.load(
            Path(args.target), backend=args.backend, portable_only=args.portable_only
        )
        args.front_seconds = ("load", time.perf_counter() - start)
    how = {
        "artifact": "its executable loaded as it is (no compile)",
        "recompiled": "compiled from its portable StableHLO",
    }[compiled.origin]
    say(args, f"loaded artifact {args.target} in {human_time(args.front_seconds[1])}: {how}")
    return compiled
