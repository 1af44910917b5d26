"""The commands: one `cmd_*(args) -> int` per subcommand, each a thin shell over the staged
API, and what they print.

Each command imports what it runs when it runs (the tracer, the passes, a backend), so the
parser and `--help` start without them.
"""

from __future__ import annotations

import io
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

import aotkit
from aotkit.cli.inputs import Inputs, random_input
from aotkit.cli.output import write_bytes, write_file, write_text
from aotkit.cli.report import EXIT_OK, EXIT_USER, UserError, human_time, progress, say
from aotkit.cli.targets import (
    ARTIFACT_SUFFIX,
    ensure_cpu_devices,
    is_artifact_file,
    is_python_target,
    load_artifact_target,
    load_module_file,
    lower_target,
    module_source,
    transformed,
)
from aotkit.cli.worker import WORKER_ENV, run_in_worker
from aotkit.errors import printable

IR_EMITS = ("stablehlo", "bytecode", "portable")
COMPILE_EMITS = ("hlo", "cost", "memory", "artifact")


def _emit_module(args, lowered) -> None:
    """Writes the module as `--emit` asks: StableHLO text, MLIR bytecode or a portable artifact."""
    from aotkit import modules

    emit = args.emit
    if emit == "stablehlo":
        write_text(args.output, lowered.as_text(debug_info=args.debug_info), args)
        return
    if emit == "bytecode":
        write_bytes(args.output, lowered.as_bytecode(), emit, args)
        return
    try:
        target = modules.portable_version(args.target_version, "--target-version")
    except ValueError as e:
        raise UserError(str(e)) from None
    try:
        data = lowered.as_portable_artifact(target)
    except ValueError as e:
        raise UserError(f"--emit portable: {e}, or use --emit bytecode") from None
    write_bytes(args.output, data, emit, args)


def cmd_lower(args) -> int:
    _check_pipeline(args)
    lowered = lower_target(args)
    _emit_module(args, lowered)
    return EXIT_OK


def cmd_opt(args) -> int:
    if args.list_passes:
        write_text(None, _passes_text())
        return EXIT_OK
    if args.target is None:
        raise UserError("give the module FILE to optimize ('-' reads stdin), or --list-passes")
    _check_pipeline(args)
    _emit_module(args, transformed(args, load_module_file(args, default_pipeline="default")))
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
    compiled = load_artifact_target(args)
    if compiled is None:
        lowered = lower_target(args)
        compiled = _compile(args, lowered)
    if args.specialize:
        _specialize(args, compiled)
    if getattr(args, "topology", None) is not None:
        _say_deviceless(args, compiled)
    if args.emit == "artifact":
        write_bytes(args.output, compiled.serialize(), args.emit, args)
        return EXIT_OK
    if args.emit == "hlo":
        write_text(args.output, compiled.as_text(), args)
        return EXIT_OK
    analysis = compiled.cost_analysis() if args.emit == "cost" else compiled.memory_analysis()
    if analysis is None:
        raise UserError(
            f"--emit {args.emit}: backend {compiled.backend.name!r} gives no {args.emit} "
            "analysis; use --backend cpu"
        )
    if hasattr(analysis, "to_dict"):
        analysis = analysis.to_dict()
    write_text(args.output, json.dumps(analysis, indent=2, sort_keys=True, default=float), args)
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
    from aotkit.symbolic.signatures import is_symbolic

    if not is_symbolic(compiled.flat_in_specs):
        raise UserError(
            f"--specialize: {compiled.name} has static shapes ({_signature_line(compiled)}); "
            "it applies to programs lowered with symbolic --shapes such as f32[b,784]"
        )
    shown = " ".join(f"{k}={','.join(map(str, v))}" for k, v in sizes.items())
    with progress(args, f"specializing {compiled.name} to {shown}"):
        start = time.perf_counter()
        compiled.specialize(**sizes)
    held = "; ".join(
        ", ".join(f"{k} = {v}" for k, v in d.items()) for d in compiled.specializations
    )
    say(args, f"specialized in {human_time(time.perf_counter() - start)}; it holds: {held}")


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
        ensure_cpu_devices(args, lowered.partitioning.num_devices)
    with progress(args, f"compiling {lowered.name} {where}".strip()):
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
        from aotkit.symbolic.signatures import is_symbolic

        state = "the persistent cache is off" if cache.directory() is None else "not cached yet"
        if compiled.partitioning is not None:
            state = f"sharded over {compiled.partitioning.describe()}, not cached"
        how = f" (compiled by the backend: {state})"
        if is_symbolic(compiled.flat_in_specs):
            how = " (symbolic shapes: one executable per shape, compiled when first called)"
    say(
        args,
        f"compiled {lowered.name} for {_backend_said(args, compiled.backend.name)} in "
        f"{human_time(args.compile_seconds)}{how}",
    )
    return compiled


def _backend_said(args, name: str) -> str:
    """`backend 'tpu' (the default: the accelerator JAX picks)`: which backend, and why."""
    if getattr(args, "backend", None) is not None:
        return f"backend {name!r}"
    import aotkit.backends

    return f"backend {name!r} (the default: {aotkit.backends.default_name()[1]})"


def _stage_and_inputs(args, artifacts: bool = True):
    """The `Lowered` stage (or an artifact's `Compiled`) of the target, whether it was loaded
    from an artifact, and the `--inputs` arrays in flat leaf order (None: none given)."""
    args.param_names = None
    inputs = Inputs(args.inputs) if args.inputs else None
    specs, source = args.shapes, "--shapes"
    if inputs is not None and specs is None and is_python_target(args.target):
        specs, source = inputs.specs(args.target), "--inputs"
    loaded = load_artifact_target(args) if artifacts else None
    if loaded is not None and loaded.signature.arg_names and None not in loaded.signature.arg_names:
        args.param_names = list(loaded.signature.arg_names)  # as the function named them
    stage = loaded if loaded is not None else lower_target(args, specs, source, inputs)
    if inputs is None:
        return stage, loaded is not None, None
    names = _leaf_names(args, stage)
    leaves = inputs.leaves(names, stage.flat_in_specs, args.param_names, stage.name)
    return stage, loaded is not None, leaves


def _leaf_names(args, stage) -> list[str]:
    from aotkit.cli.notation import leaf_names

    return leaf_names(stage.in_tree, getattr(args, "param_names", None))


def cmd_run(args) -> int:
    import jax
    from jax import tree_util

    from aotkit import arguments
    from aotkit.specs import spec_of
    from aotkit.symbolic.signatures import is_symbolic

    if args.timeout is not None and not os.environ.get(WORKER_ENV):
        return run_in_worker(args)
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
        leaves = [random_input(rng, s) for s in flat_specs]
        names = _leaf_names(args, lowered)
        given = ", ".join(f"{n}: {s}" for n, s in zip(names, flat_specs, strict=True))
        say(args, f"random inputs, seed {args.seed}: {given or 'none'}")
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

            say(args, f"{name} sharded {spmd.sharding_text(leaf.sharding)}")
        sys.stdout.write(f"{name}: {spec_of(x)}\n{_format_array(x)}\n")
    sys.stdout.flush()
    if args.output is not None:
        buffer = io.BytesIO()
        np.savez(buffer, **outputs)
        write_file(args, args.output, buffer.getvalue(), "npz", "--output")
        say(args, f"saved {', '.join(outputs) or 'no outputs'} to {args.output}")
    best = f"best of {args.repeat}: " if args.repeat > 1 else ""
    if not args.quiet:
        compile_time = "" if loaded else f"compile {human_time(args.compile_seconds)}, "
        sys.stderr.write(
            f"aotkit run: {args.front_seconds[0]} {human_time(args.front_seconds[1])}, "
            f"{compile_time}run {best}{human_time(min(times))}\n"
        )
    elif args.repeat > 1:
        # --repeat asks for a time; -q only drops the rest.
        sys.stderr.write(f"aotkit run: run {best}{human_time(min(times))}\n")
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
    with progress(args, f"checking {lowered.name} on every backend"):
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

    if is_artifact_file(args.target) or (
        args.target.endswith(".aotx") and Path(args.target).is_dir()
    ):
        # Worded as aotkit.load, as `describe`'s own checks are: the same file, the same text
        # (a folder named .aotx too, which the module reader would call no module file).
        data, label = artifacts.read(Path(args.target))
        write_text(None, artifacts.describe(data, label))
        return EXIT_OK
    if is_python_target(args.target):
        raise UserError(
            f"{args.target} is Python source; inspect takes an artifact (.aotx) or a module "
            "file (lower a function with `aotkit lower` or `aotkit compile -o F.aotx`)"
        )
    from aotkit.frontends import files

    source = module_source(args.target)
    with progress(args, f"reading {args.target}"):
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
    write_text(None, "\n".join(lines))
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
