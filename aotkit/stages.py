"""The staged API: `lower(fn, *args)` -> `Lowered` -> `.compile()` -> `Compiled`.

Each stage is a value the user can hold, print and dump. `Lowered` holds the verified
StableHLO module (after the pass pipeline) with the argument and result pytrees and specs.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

from jax import tree_util
from jaxlib.mlir import ir

from aotkit import dumps, passes
from aotkit._context import IR_LOCK
from aotkit.lowering.trace import trace_to_module
from aotkit.specs import ShapeDtype, spec_of


class Lowered:
    """A function lowered to a verified StableHLO module, ready to compile."""

    def __init__(
        self,
        module: ir.Module,
        *,
        name: str,
        in_tree,
        out_tree,
        flat_in_specs: tuple[ShapeDtype, ...],
        flat_out_specs: tuple[ShapeDtype, ...],
        donated: tuple[bool, ...] = (),
        pipeline: str = "none",
        backend: str | None = None,
        dumper: dumps.Dumper | None = None,
    ):
        self.module = module
        self.name = name
        self.in_tree = in_tree
        self.out_tree = out_tree
        self.flat_in_specs = flat_in_specs
        self.flat_out_specs = flat_out_specs
        self.donated = donated or (False,) * len(flat_in_specs)
        self.pipeline = pipeline
        self.backend = backend
        # The compile step writes its stages (optimized HLO, cost) after the lowering's files.
        self.dumper = dumper

    @property
    def in_specs(self):
        """The input pytree `((args...), {kwargs})` with ShapeDtype leaves (statics removed)."""
        return tree_util.tree_unflatten(self.in_tree, self.flat_in_specs)

    @property
    def out_specs(self):
        """The output pytree with ShapeDtype leaves."""
        return tree_util.tree_unflatten(self.out_tree, self.flat_out_specs)

    def as_text(self, debug_info: bool = False) -> str:
        """The StableHLO module as MLIR text; `debug_info=True` adds `file:line` locations."""
        with IR_LOCK:
            return self.module.operation.get_asm(enable_debug_info=debug_info)

    def __str__(self) -> str:
        return self.as_text()

    def __repr__(self) -> str:
        ins = ", ".join(map(str, self.flat_in_specs))
        outs = ", ".join(map(str, self.flat_out_specs))
        return f"<Lowered {self.name}({ins}) -> ({outs})>"


def function_name(fn: Callable) -> str:
    name = getattr(fn, "__name__", None) or type(fn).__name__
    return "lambda" if name == "<lambda>" else name


def split_static(
    args: tuple, kwargs: dict, static_argnums: Sequence[int], static_argnames: Sequence[str]
) -> tuple[tuple, dict, dict[int, object], dict[str, object]]:
    """Separates static arguments (by position or name) from the dynamic ones."""
    n = len(args)
    nums = set()
    for i in static_argnums:
        j = i + n if i < 0 else i
        if 0 <= j < n:
            nums.add(j)
    static_pos = {i: args[i] for i in sorted(nums)}
    dyn_args = tuple(a for i, a in enumerate(args) if i not in nums)
    static_kw = {k: v for k, v in kwargs.items() if k in static_argnames}
    dyn_kwargs = {k: v for k, v in kwargs.items() if k not in static_argnames}
    return dyn_args, dyn_kwargs, static_pos, static_kw


def merge_static(dyn_args: Sequence, dyn_kwargs: dict, static_pos: dict, static_kw: dict):
    args = list(dyn_args)
    for i, v in static_pos.items():
        args.insert(i, v)
    return tuple(args), {**dyn_kwargs, **static_kw}


def flat_specs(fn_name: str, tree_in) -> tuple[tuple[ShapeDtype, ...], object]:
    """Flattens `((args), {kwargs})` and gives each leaf's spec; non-arrays are TypeErrors."""
    leaves_with_paths, treedef = tree_util.tree_flatten_with_path(tree_in)
    specs = []
    for path, leaf in leaves_with_paths:
        try:
            specs.append(spec_of(leaf))
        except (TypeError, ValueError) as e:
            where = _arg_path(path)
            raise TypeError(
                f"{fn_name}: argument {where} of type {type(leaf).__name__} is not an array "
                f"({e}); pass arrays, Python scalars or aotkit.ShapeDtype specs, or mark it "
                "static with static_argnums/static_argnames"
            ) from None
    return tuple(specs), treedef


def _arg_path(path) -> str:
    """`args[0]['w']` style path of a leaf in the `((args), {kwargs})` tree."""
    if not path:
        return "<root>"
    head, rest = path[0], path[1:]
    prefix = "args" if getattr(head, "idx", None) == 0 else "kwargs"
    return prefix + tree_util.keystr(tuple(rest))


def lower_function(
    fn: Callable,
    args: tuple,
    kwargs: dict,
    *,
    static_argnums: Sequence[int] = (),
    static_argnames: Sequence[str] = (),
    donate_argnums: Sequence[int] = (),
    pipeline: str = "default",
    backend: str | None = None,
    dump_dir: str | os.PathLike | None = None,
) -> Lowered:
    """Traces `fn` on `args`/`kwargs` (values or specs), runs `pipeline` on the module and
    returns the `Lowered` stage; dumps each stage under `dump_dir` or `AOTKIT_DUMP_DIR`."""
    name = function_name(fn)
    passes.check_pipeline(pipeline)
    dyn_args, dyn_kwargs, static_pos, static_kw = split_static(
        args, kwargs, static_argnums, static_argnames
    )
    specs, in_tree = flat_specs(name, (dyn_args, dyn_kwargs))

    def body(flat_tracers):
        t_args, t_kwargs = tree_util.tree_unflatten(in_tree, flat_tracers)
        full_args, full_kwargs = merge_static(t_args, t_kwargs, static_pos, static_kw)
        return fn(*full_args, **full_kwargs)

    dumper = dumps.Dumper.create(name, dump_dir)
    result = trace_to_module(body, name, specs)
    passes.run_pipeline(result.module, pipeline, name=name, dumper=dumper, verified=True)
    return Lowered(
        result.module,
        name=name,
        in_tree=in_tree,
        out_tree=result.out_tree,
        flat_in_specs=specs,
        flat_out_specs=result.flat_out_specs,
        pipeline=pipeline,
        backend=backend,
        dumper=dumper,
    )


def lower(fn: Callable, *args, pipeline: str = "default", **kwargs) -> Lowered:
    """Lowers `fn` for the given arguments (concrete values or `aotkit.ShapeDtype` specs),
    then runs `pipeline` ("default", "none" or MLIR pipeline text) on the module.

    `aotkit.lower(lambda x: anp.sqrt(x ** 2) + 1., aotkit.spec("f32[]")).as_text()`
    """
    if not callable(fn):
        raise TypeError(f"lower: expected a function, got {type(fn).__name__}")
    return lower_function(fn, args, kwargs, pipeline=pipeline)
