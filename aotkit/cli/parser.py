"""The argparse parser of `aotkit`: its subcommands, their flags and the argument types.

`build_parser()` builds it; each subcommand's `func` is its `cmd_*` in `aotkit.cli.commands`.
`_add_target_args` holds the flags every function-taking command shares (a `--frontend` flag
belongs there). `targets_first` reorders argv so that a TARGET written after a list option is
not swallowed by it. A bad value is a usage error (exit 2) that names the flag.
"""

from __future__ import annotations

import argparse
import ast
import difflib

from aotkit.cli.commands import (
    COMPILE_EMITS,
    IR_EMITS,
    cmd_backends,
    cmd_check,
    cmd_compile,
    cmd_inspect,
    cmd_lower,
    cmd_opt,
    cmd_run,
)
from aotkit.cli.inputs import INPUTS_HELP
from aotkit.cli.targets import ARTIFACT_SUFFIX, is_python_target


class _ShapesAction(argparse.Action):
    """`--shapes SPEC ...`: each value a plain spec or a pytree of specs (`notation`); a bad
    one is a usage error that says which value it is."""

    def __call__(self, parser, namespace, values, option_string=None):
        from aotkit.cli.notation import parse_shape, split_by_shell

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
# `targets_first`).
_LIST_OPTIONS = ("--shapes", "--shardings", "--inputs", "--backends")
_TARGET_COMMANDS = ("lower", "compile", "run", "check")
_MODULE_SUFFIXES = (".mlir", ".mlirbc", ".bc", ARTIFACT_SUFFIX)


def targets_first(argv: list[str]) -> list[str]:
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
        elif in_list and (is_python_target(token) or token.endswith(_MODULE_SUFFIXES)):
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
        metavar="N",
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
