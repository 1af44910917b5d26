"""aotkit programs inside JAX programs: `aotkit.to_jax(lowered_or_compiled)`.

Not a stage: a view of one. `to_jax` gives a JAX function that embeds the stage's StableHLO
module in the caller's program, as jax.export's `Exported.call` does (it is built on it: a
`jax.export.Exported` whose module is aotkit's), so it works under `jax.jit`, inside a Flax
or Equinox model, and in eager JAX code. What it promises:

- The same calling convention as the stage: the same argument and result pytrees, flat
  specs and dtypes; a call with another structure or spec is a TypeError naming both.
- The module is the stage's final module (after its pass pipeline), embedded as it is: XLA
  compiles it together with the caller's program, so results equal the stage's own compile
  up to the fusion XLA chooses.
- Transforms (`jax.grad`, `jax.vjp`, `jax.vmap`) go through aotkit's own (aotkit/transforms):
  the function is a `jax.custom_vjp` whose backward pass embeds the stage's VJP program
  (`Lowered.vjp()`), and inside it a `jax.custom_batching.custom_vmap` whose rule embeds the
  batched program (`Lowered.vmap(...)`). Both rules ask `_transformed` for those programs:
  that is the one hook between the two packages. Where the stage has no such transform, a
  TypeError says so when JAX first asks for the rule.
- One device: a sharded stage is refused (embed the unsharded program, and shard the
  caller's `jax.jit` instead).
- Static shapes: a symbolic stage (`f32[b]`) is refused; lower one per shape the caller uses.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
from jax import export, tree_util

from aotkit import api, artifacts
from aotkit.arguments import format_signature, leaf_names
from aotkit.specs import ShapeDtype
from aotkit.stages import Compiled, Lowered
from aotkit.symbolic import signatures

__all__ = ["to_jax"]


def to_jax(stage):
    """A JAX function that runs `stage` (a `Lowered` or `Compiled`) inside the caller's JAX
    program: `jax.jit(lambda x: to_jax(lowered)(x) + 1)` compiles the module with the rest.

    It takes the stage's argument pytree (`stage.in_specs`) and returns its result pytree.
    `jax.grad`/`jax.vjp` and `jax.vmap` of it run aotkit's own transforms of the module.
    """
    where = "aotkit.to_jax"
    if not isinstance(stage, Lowered | Compiled):
        raise TypeError(
            f"{where}: expected a Lowered or Compiled stage, got {type(stage).__name__}; pass "
            "aotkit.jit(f).lower(*specs) or its .compile()"
        )
    if stage.partitioning is not None:
        raise ValueError(
            f"{where}: {stage.name!r} is partitioned over {stage.partitioning.describe()}; "
            "to_jax embeds one-device programs: lower it without shardings and shard the "
            "caller's jax.jit instead"
        )
    lowered = _lowered_of(stage, where)
    sig = lowered.signature
    if signatures.is_symbolic(sig.flat_in_specs) or signatures.is_symbolic(sig.flat_out_specs):
        raise ValueError(
            f"{where}: {stage.name!r} has symbolic shapes ({format_signature(sig)}); to_jax "
            "embeds programs of static shapes: lower the function for the shapes the JAX "
            "program passes (aotkit.jit(f).lower(aotkit.spec('f32[8,784]'))), one Lowered "
            "per shape"
        )
    return _Embedded(lowered).function


def _lowered_of(stage, where: str) -> Lowered:
    """The Lowered stage whose module is embedded: the stage itself, the Lowered a Compiled
    came from, or (for a Compiled loaded from an artifact) its portable module read back."""
    if isinstance(stage, Lowered):
        return stage
    if stage.lowered is not None:
        return stage.lowered
    if stage._portable is None:
        raise ValueError(
            f"{where}: Compiled {stage.name!r} has neither its Lowered stage nor a portable "
            "module; compile it with Lowered.compile (or load it with aotkit.load)"
        )
    # Its artifact read back as a module keeps its trees; nothing is compiled.
    return api.load_module(stage.serialize(), name=stage.name)


class _Embedded:
    """One stage as a JAX function, with the rules through which JAX's transforms reach
    aotkit's."""

    def __init__(self, lowered: Lowered):
        self.lowered = lowered
        self.signature = lowered.signature
        self.exported = exported(lowered)
        self._vjp = None  # the embedded VJP program, built when jax.grad first asks
        self._batched = {}  # (batched leaves, axis size) -> the embedded batched program

        @jax.custom_vjp
        @functools.wraps(self._primal)
        def flat(*leaves):
            return self._batching(*leaves)

        flat.defvjp(self._forward, self._backward)
        self._batching = jax.custom_batching.custom_vmap(self._primal)
        self._batching.def_vmap(self._batch_rule)
        self._flat = flat

        def function(*args, **kwargs):
            leaves, tree = tree_util.tree_flatten((args, kwargs))
            if tree != self.signature.in_tree:
                raise TypeError(
                    f"{self.where}: called with {tree}, but it takes {self.signature.in_tree}: "
                    f"{format_signature(self.signature)}"
                )
            outs = self._flat(*self._checked(leaves))
            return tree_util.tree_unflatten(self.signature.out_tree, outs)

        function.__name__ = function.__qualname__ = self.signature.name
        function.__doc__ = f"aotkit program {format_signature(self.signature)}, embedded in JAX."
        self.function = function

    @property
    def where(self) -> str:
        return f"aotkit.to_jax({self.signature.name!r})"

    def _checked(self, leaves: list) -> list:
        """The leaves as the module takes them: a Python scalar in its argument's dtype;
        anything else of exactly its argument's shape and dtype, else a TypeError."""
        out = []
        for i, (leaf, spec) in enumerate(zip(leaves, self.signature.flat_in_specs)):
            if type(leaf) in (bool, int, float, complex) and spec.shape == ():
                leaf = jnp.asarray(leaf, spec.dtype)
            shape, dtype = jnp.shape(leaf), jnp.result_type(leaf)
            if shape != spec.shape or dtype != spec.dtype:
                label = leaf_names(self.signature.in_tree, self.signature.arg_names)[i]
                got = f"{ShapeDtype(shape, dtype)}"
                raise TypeError(
                    f"{self.where}: argument {label} is {got}, but it takes {spec}; pass an "
                    "array of that shape and dtype, or lower the program for the new one"
                )
            out.append(leaf)
        return out

    # -- the primal: the module itself

    def _primal(self, *leaves):
        args, kwargs = tree_util.tree_unflatten(self.signature.in_tree, leaves)
        return list(tree_util.tree_leaves(self.exported.call(*args, **kwargs)))

    # -- reverse mode: aotkit's VJP program

    def _forward(self, *leaves):
        return self._flat(*leaves), leaves

    def _backward(self, leaves, cotangents):
        if self._vjp is None:
            self._vjp = _Embedded(_transformed(self.lowered, "vjp"))
        sig = self.signature
        args, kwargs = tree_util.tree_unflatten(sig.in_tree, leaves)
        cts = [c if _differentiable(s) else None for s, c in zip(sig.flat_out_specs, cotangents)]
        cts = tree_util.tree_unflatten(sig.out_tree, cts)
        _, arg_cts = self._vjp.function(args, cts, **kwargs)
        flat_cts = tree_util.tree_leaves(arg_cts, is_leaf=lambda x: x is None)
        # Keyword arguments get no cotangent from the VJP program: zeros.
        out = []
        specs = sig.flat_in_specs
        for i, spec in enumerate(specs):
            ct = flat_cts[i] if i < len(flat_cts) else None
            if ct is None and _differentiable(spec):
                ct = jnp.zeros(spec.shape, spec.dtype)
            out.append(ct)
        return tuple(out)

    # -- batching: aotkit's batched program

    def _batch_rule(self, axis_size, in_batched, *leaves):
        key = (tuple(in_batched), axis_size)
        batched = self._batched.get(key)
        if batched is None:
            sig = self.signature
            axes = tree_util.tree_unflatten(sig.in_tree, [0 if b else None for b in in_batched])
            # tree_leaves drops the None entries: what is left are the mapped leaves.
            batched_kwargs = [k for k, v in axes[1].items() if tree_util.tree_leaves(v)]
            if batched_kwargs:
                raise TypeError(
                    f"{self.where}: jax.vmap maps keyword argument(s) "
                    f"{', '.join(map(repr, sorted(batched_kwargs)))}, but aotkit maps "
                    "positional arguments only; pass them positionally"
                )
            batched = self._batched[key] = _Embedded(
                _transformed(self.lowered, "vmap", in_axes=axes[0], axis_size=axis_size)
            )
        outs = batched._flat(*leaves)
        return outs, [True] * len(outs)


def _differentiable(spec) -> bool:
    return jnp.issubdtype(spec.dtype, jnp.inexact)


def _transformed(lowered: Lowered, kind: str, **options) -> Lowered:
    """The hook: `lowered` transformed by aotkit's transforms (`Lowered.vjp()`,
    `Lowered.vmap(...)`), as a Lowered to embed. TypeError where the stage has none."""
    method = getattr(lowered, kind, None)
    if method is None:
        action = {"vjp": "jax.grad or jax.vjp", "vmap": "jax.vmap"}[kind]
        raise TypeError(
            f"aotkit.to_jax({lowered.name!r}): {action} needs aotkit's {kind} transform of "
            f"the program (Lowered.{kind}), which this aotkit does not have; transform the "
            "function with aotkit before lowering it, or call it outside the JAX transform"
        )
    return method(**options)


def exported(lowered: Lowered) -> export.Exported:
    """A `jax.export.Exported` of the final module of `lowered`, for `Exported.call`.

    Its fields are those jax.export gives a function with the same argument and result trees
    and specs (a trivial one, exported here: no field is spelled by aotkit), with aotkit's
    module, all its arguments kept, and any platform allowed (an aotkit module is
    platform-independent StableHLO; XLA of the caller's platform compiles it)."""
    sig = lowered.signature
    structs = [jax.ShapeDtypeStruct(s.shape, s.dtype) for s in sig.flat_in_specs]
    args, kwargs = tree_util.tree_unflatten(sig.in_tree, structs)

    def same_signature(*args, **kwargs):
        zeros = [jnp.zeros(s.shape, s.dtype) for s in sig.flat_out_specs]
        return tree_util.tree_unflatten(sig.out_tree, zeros)

    template = export.export(jax.jit(same_signature))(*args, **kwargs)
    return dataclasses.replace(
        template,
        fun_name=sig.name,
        mlir_module_serialized=artifacts.portable_artifact(lowered),
        module_kept_var_idx=tuple(range(len(sig.flat_in_specs))),
        disabled_safety_checks=(export.DisabledSafetyCheck.platform(),),
    )
