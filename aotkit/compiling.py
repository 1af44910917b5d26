"""Compiling: a `Lowered` or an artifact becomes a `Compiled`.

`compile_lowered` runs a backend's compiler on a lowering, looking in the persistent cache
(aotkit/cache.py) first; `load` (`aotkit.load`) turns an artifact file (checked by
aotkit/artifacts.py, the format) into a `Compiled`, loading its executable as it is where
the backend matches and compiling its portable StableHLO otherwise. `aotkit.jit`'s
in-memory caches sit above this (aotkit/api.py).

This module imports neither the tracer nor the pass pipeline: `import aotkit` followed by
`aotkit.load(...)` costs the imports of the backend it runs on, and nothing else.
"""

from __future__ import annotations

import functools
import warnings

import numpy as np
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec

from aotkit import artifacts, backends, cache, dumps, spmd
from aotkit._traceback import api_boundary, user_stacklevel
from aotkit.artifacts import Artifact
from aotkit.backends.base import Backend, PrunedExecutable
from aotkit.errors import ArtifactError, ArtifactWarning, CompileError, printable
from aotkit.frontends import trust
from aotkit.stages import Compiled, Lowered
from aotkit.symbolic import signatures, specialize

# --- a lowering ------------------------------------------------------------------------------


def options_key(where: str, options) -> tuple:
    if options is None:
        return ()
    if not isinstance(options, dict):
        raise TypeError(
            f"{where}: options must be a dict of XLA flags, got {type(options).__name__}; "
            "e.g. {'xla_cpu_enable_fast_math': True}"
        )
    try:
        key = tuple(sorted((str(k), type(v), v) for k, v in options.items()))
        hash(key)
    except TypeError:
        raise TypeError(
            f"{where}: option values must be hashable bool/int/float/str, got {options!r}"
        ) from None
    return key


def targeting(where: str, backend: Backend, target, target_options) -> tuple[dict, tuple]:
    """The target keywords for `backend.compile` and their cache key (none: the default).

    Only a backend that `cross_compiles` takes them.
    """
    if target is None and target_options is None:
        return {}, ()
    if not backend.cross_compiles:
        given = f"target={target!r}" if target is not None else f"target_options={target_options!r}"
        raise ValueError(
            f"{where}: {given} applies to backend='iree', which cross-compiles; backend "
            f"{backend.name!r} compiles for its own devices; drop it or compile with "
            "backend='iree'"
        )
    key = backend.normalize_target(target, target_options)
    return {"target": target, "target_options": target_options}, key


def deviceless(where: str, backend: str | None, topology) -> Backend:
    """The deviceless backend that compiles for TPU `topology` ("v5e:2x2") without a TPU;
    `backend` must be 'tpu' (None: 'tpu', which a topology implies)."""
    if backend not in (None, "tpu"):
        raise ValueError(
            f"{where}: topology={topology!r} applies to backend='tpu' (compiling for a TPU "
            f"slice on a machine without one), but the backend is {backend!r}; pass "
            "backend='tpu' with it, or drop topology="
        )
    return backends.deviceless(topology, where)


def compile_lowered(lowered: Lowered, backend: Backend, options, targeting=None) -> Compiled:
    """`lowered` compiled by `backend` with `options` (checked by `options_key`) and the
    target keywords `targeting` (from `targeting`): from the persistent cache when another
    process compiled it, else by the backend's compiler; then the compile's dumps."""
    if signatures.is_symbolic(lowered.flat_in_specs):
        return _compile_symbolic(lowered, backend, options, targeting)
    dumper = lowered._dumper
    # The persistent cache (aotkit/cache.py) first: an executable another process compiled.
    # Not cached: a cross-compile (`target=`; the key has no place for its target), and a
    # deviceless target's executable (it would not load here).
    sharded = lowered.partitioning is not None
    cache_key = None if targeting or not backend.runs_here else cache.key(lowered, backend, options)
    executable = None
    if cache_key is not None:
        unread = lowered._program.unread(sharded)
        executable = cache.get(cache_key, lowered, backend, options, unread)
    origin = "persistent cache"
    if executable is None:
        module, pruned = lowered._program.compiled_form(sharded)
        origin = "compiled"
        try:
            if sharded:
                executable = backend.compile_spmd(module, options, lowered.partitioning)
            else:
                executable = backend.compile(module, options, **(targeting or {}))
                if pruned:
                    executable = PrunedExecutable(executable, lowered.flat_in_specs, pruned)
        except CompileError as e:
            raise CompileError(
                f"{e}; {dumps.hint(dumper)}", backend=e.backend, module_name=e.module_name
            ) from e.__cause__
        if cache_key is not None:
            cache.put(cache_key, lowered, executable, options)
    compiled = _lowered_compiled(lowered, executable, options, origin)
    if dumper is not None:
        dumper.write("optimized", compiled.as_text(), ext="hlo")
        cost = compiled.cost_analysis()
        if cost is not None:
            dumper.write_json("cost", cost)
        memory = compiled.memory_analysis()
        if memory is not None:
            dumper.write_json("memory", memory.to_dict())
    return compiled


def _compile_symbolic(lowered: Lowered, backend: Backend, options, targeting) -> Compiled:
    """The `Compiled` of a symbolic lowering: on a backend with dynamic shapes (iree), a
    `DynamicExecutable` that compiles the program once for every shape; on the others, a
    `SymbolicExecutable` that compiles one executable per distinct shape it is called with
    (aotkit/symbolic/specialize.py)."""
    where = f"Lowered.compile({lowered.name})"
    if not backend.runs_here:
        raise ValueError(
            f"{where}: the program has symbolic shapes ({lowered._signature_text()}), which "
            f"are compiled per shape when called, and {backend!r} cannot run; lower it with "
            "concrete shapes to compile it for a TPU topology"
        )
    if targeting:
        raise ValueError(
            f"{where}: the program has symbolic shapes ({lowered._signature_text()}), which "
            "are compiled per shape for this machine's backend; drop target= and "
            "target_options="
        )
    if lowered.partitioning is not None:
        raise NotImplementedError(
            f"{where}: the program has symbolic shapes and is sharded "
            f"({lowered.partitioning.describe()}); aotkit specializes one-device programs: "
            "lower it with concrete shapes"
        )
    shapes = signatures.SymbolicSignature.of(
        lowered.flat_in_specs, lowered.flat_out_specs, where=where
    )
    program = lowered._program
    pending = program.pending
    source = specialize.Source(
        lambda: (program.module, program.lc),
        lambda: (
            artifacts.portable_artifact(lowered)
            if pending is None
            else _no_portable(lowered.name, pending, shapes)
        ),
        pending,
    )
    # A pending transform's module exists per shape only.
    dynamic = backend.dynamic_shapes and pending is None
    kind = specialize.DynamicExecutable if dynamic else specialize.SymbolicExecutable
    executable = kind(
        backend,
        lowered.name,
        shapes,
        source,
        options=options,
        donated=lowered.donated,
        where=f"Compiled {lowered.name!r}",
    )
    return _lowered_compiled(lowered, executable, options, "compiled")


def _lowered_compiled(lowered: Lowered, executable, options, origin: str) -> Compiled:
    """The `Compiled` of an executable compiled from `lowered` with `options`."""
    return Compiled(
        executable,
        in_tree=lowered.in_tree,
        out_tree=lowered.out_tree,
        donated=lowered.donated,
        lowered=lowered,
        options=options,
        origin=origin,
    )


def _no_portable(name: str, pending, shapes) -> bytes:
    raise specialize.per_shape_only(
        f"Compiled {name!r}: serialize",
        pending,
        shapes.symbols,
        "portable StableHLO of its own to save",
        "save the transform specialized to each size instead "
        "(lowered.specialize({sizes}).compile().save(path))",
    )


# --- an artifact ---------------------------------------------------------------------------


@api_boundary
def load(
    source, *, backend: str | None = None, recompile="auto", portable_only: bool = False
) -> Compiled:
    """Loads an AOT artifact (a path or its bytes) as a `Compiled`.

    The result is called exactly like the `Compiled` that was saved (same pytrees, specs,
    donation and errors); `lowered` is None. `backend` defaults to the one it was compiled
    for. When that backend's platform and versions match the artifact's, its executable is
    loaded as it is (no compile). Otherwise `recompile="auto"` compiles the portable
    StableHLO with an `ArtifactWarning`, `recompile=False` raises `ArtifactError` naming
    both versions, and `recompile=True` always compiles (without a warning).

    The executable is native code that the backend runs as it is, so it is as trusted as
    whoever wrote the file. `portable_only=True` never loads it: the portable StableHLO
    passes the trust check that modules from files pass (aotkit/frontends/trust.py) and is
    compiled here, whatever the targets say (`recompile=False` then cannot hold).

    A sharded artifact is placed on this run's devices in the positions it was saved with
    (an ArtifactError where there are too few); its target includes the run's device count,
    so another count is another target (recompiled for the same positions, or refused).
    Custom pytree nodes are rebuilt from this process's registrations (aotkit/pytrees.py).
    """
    if not any(recompile is choice for choice in artifacts.RECOMPILE_CHOICES):
        raise ValueError(f"aotkit.load: recompile={recompile!r}; expected 'auto', True or False")
    if not isinstance(portable_only, bool):
        raise TypeError(f"aotkit.load: portable_only must be True or False, got {portable_only!r}")
    if portable_only and recompile is False:
        raise ValueError(
            "aotkit.load: portable_only=True compiles the portable StableHLO, which "
            "recompile=False forbids; drop one of them"
        )
    if backend is not None and not isinstance(backend, str):
        raise TypeError(f"aotkit.load: backend must be a name such as 'cpu', got {backend!r}")
    data, label = artifacts.read(source)
    module_kind = None if artifacts.is_artifact(data) else _module_kind(data, label)
    if module_kind is not None:
        shown = repr(label) if label != "<bytes>" else "data"
        raise ArtifactError(
            f"aotkit.load: {label} is {module_kind}, not an aotkit artifact; load a module with "
            f"aotkit.load_module({shown}) (then .compile() it), or save an artifact with "
            "Compiled.save",
            path=label,
        )
    return to_compiled(
        artifacts.unpack(data, label),
        backend=backend,
        recompile=recompile,
        portable_only=portable_only,
    )


# The first bytes of MLIR bytecode (StableHLO portable artifacts are bytecode too).
_MLIR_BYTECODE = b"ML\xefR"
_MLIR_TEXT_START = ("module", "func.func", "#", "//")


def _module_kind(data: bytes, label: str) -> str | None:
    """What module file `data` is (for the error that points to `aotkit.load_module`), or
    None when it does not look like one."""
    if data.startswith(_MLIR_BYTECODE):
        return "MLIR bytecode (a StableHLO module or portable artifact)"
    head = data[:4096]
    if b"\x00" not in head:
        text = head.decode("utf-8", errors="replace").lstrip()
        if text.startswith(_MLIR_TEXT_START) and ("module" in text or "func.func" in text):
            return "StableHLO MLIR text"
    if label.endswith((".mlir", ".mlirbc")):
        return "a module file (.mlir)"
    return None


def to_compiled(
    artifact: Artifact,
    *,
    backend: str | None = None,
    recompile="auto",
    where="aotkit.load",
    portable_only: bool = False,
) -> Compiled:
    """The `Compiled` of a checked artifact (see `load`)."""
    place = f"{where}: {artifact.label}"
    saved = dict(artifact.target)
    if artifact.executable_format is not None:
        saved["executable_format"] = artifact.executable_format
    explicit = backend is not None
    try:
        target_backend = backends.get(backend if explicit else saved["backend"])
    except (ValueError, RuntimeError) as e:  # unknown here, or a plugin that did not start
        if explicit or recompile is False:
            # An executable compiled for a TPU topology without a TPU says for which.
            topology = saved.get("topology")
            shown = f" (TPU topology {topology!r})" if topology is not None else ""
            raise ArtifactError(
                f"{place} was compiled for backend {saved['backend']!r}{shown}, which does not "
                f"start here ({e})",
                path=artifact.label,
            ) from None
        target_backend = backends.get(None)
    here = dict(target_backend.target_for(artifact.target))
    if target_backend.executable_format is not None:
        here["executable_format"] = target_backend.executable_format
    same = saved == here
    if artifact.shapes is not None:
        return _symbolic_compiled(
            artifact, target_backend, same, saved, here, explicit, recompile, portable_only, place
        )
    layout = None
    if artifact.partitioning is not None:
        # Its mesh goes on devices here before anything loads: none that fits is an error
        # whatever `recompile` allows.
        layout = _placed_layout(artifact, target_backend, place)
    if portable_only:
        pass  # the executable section is never read: compiled below, without a warning
    elif same and recompile is not True:
        if target_backend.executable_format is None:
            # This backend's "executable" is the module itself: loading it is compiling it.
            executable = _compile_portable(artifact, target_backend, place)
            return _compiled(artifact, executable, "artifact", place)
        signature = artifact.signature
        if layout is not None:
            load = functools.partial(
                target_backend.deserialize_spmd,
                artifact.section(artifacts.EXECUTABLE),
                name=artifact.name,
                in_specs=signature.flat_in_specs,
                out_specs=signature.flat_out_specs,
                partitioning=layout,
                options=artifact.options,
                donates=any(signature.donated),
            )
        else:
            load = functools.partial(_deserialize, artifact, target_backend)
        executable = _load_or_warn(load, artifact, recompile, f"{place}: its executable")
        if executable is not None:
            return _compiled(artifact, executable, "artifact", place)
    elif not same:
        _check_recompile(artifact, saved, here, explicit, target_backend, recompile, place)
    executable = _compile_portable(
        artifact, target_backend, place, check=portable_only, layout=layout
    )
    return _compiled(artifact, executable, "recompiled", place)


def _symbolic_compiled(
    artifact: Artifact,
    backend: Backend,
    same: bool,
    saved: dict,
    here: dict,
    explicit: bool,
    recompile,
    portable_only: bool,
    place: str,
) -> Compiled:
    """The `Compiled` of a symbolic artifact (format version 3): its specializations'
    executables loaded as they are where the target matches (as `to_compiled` loads one
    executable), and its portable StableHLO compiled for any other shape on first call,
    unless `recompile=False`. On a backend with dynamic shapes (iree), its one executable
    for every shape is loaded so, or the portable StableHLO compiled once now."""
    signature = artifact.signature

    def parse():
        module, lc = artifacts.parse_portable(artifact, place)
        if portable_only:
            trust.check(module, place)
        return module, lc

    source = specialize.Source(parse, lambda: artifact.section(artifacts.PORTABLE))
    options = artifact.options if backend.name == artifact.target["backend"] else None
    where = f"Compiled {artifact.name!r} ({artifact.label})"
    # The one executable for every shape a backend with dynamic shapes compiled (iree).
    held = artifact.section(artifacts.EXECUTABLE) is not None
    if not same and (artifact.specializations or held):
        how = (
            "once for every shape" if backend.dynamic_shapes else "for each shape it is called with"
        )
        _check_recompile(artifact, saved, here, explicit, backend, recompile, place, how)
    loaded_dynamic = None
    if backend.dynamic_shapes:
        if held and same and not portable_only and recompile is not True:
            loaded_dynamic = _load_dynamic(artifact, backend, recompile, place)
        kind, loaded_one = specialize.DynamicExecutable, {"executable": loaded_dynamic}
    else:
        kind, loaded_one = specialize.SymbolicExecutable, {}
    executable = kind(
        backend,
        artifact.name,
        artifact.shapes,
        source,
        options=options,
        donated=signature.donated,
        recompile=recompile is not False,
        where=where,
        **loaded_one,
    )
    loaded = 0
    if same and not portable_only and recompile is not True:
        for values, section in artifact.specializations:
            load = functools.partial(
                _deserialize, artifact, backend, section, artifact.shapes.concrete(values)
            )
            shown = artifact.shapes.text(values)
            loaded_executable = _load_or_warn(
                load,
                artifact,
                recompile,
                f"{place}: its executable for {shown}",
                instead="for that shape when it is called",
            )
            if loaded_executable is None:
                continue
            _check_aliasing(artifact, loaded_executable, f"{place}: its executable for {shown}")
            executable.add(values, loaded_executable)
            loaded += 1
    if backend.dynamic_shapes:
        origin = "artifact" if loaded or loaded_dynamic is not None else "recompiled"
    else:
        origin = "artifact" if loaded or same and not portable_only else "recompiled"
    return _artifact_compiled(artifact, executable, origin)


def _check_recompile(
    artifact: Artifact,
    saved: dict,
    here: dict,
    explicit: bool,
    backend: Backend,
    recompile,
    place: str,
    how: str = "",
) -> None:
    """The recompile policy for an artifact whose target (`saved`) is not this backend's
    (`here`): `recompile=False` refuses, naming the differences; "auto" warns that the
    portable StableHLO is compiled (`how`: when), unless the caller named another backend
    than the saved one, which says so already."""
    differences = artifacts.differences(saved, here)
    if recompile is False:
        raise ArtifactError(
            f"{place} was compiled with {differences}; load it with recompile=True or "
            "'auto' to compile its portable StableHLO here",
            path=artifact.label,
        )
    if recompile == "auto" and not (explicit and saved["backend"] != backend.name):
        warnings.warn(
            f"{place} was compiled with {differences}; compiling its portable StableHLO "
            f"for backend {backend.name!r} {how + ' ' if how else ''}"
            "(recompile=True does so without this warning)",
            ArtifactWarning,
            stacklevel=user_stacklevel(),
        )


def _load_dynamic(artifact: Artifact, backend: Backend, recompile, place: str):
    """A symbolic artifact's one executable for every shape, loaded as it is (its target is
    this backend's), or None (with a warning) where it does not load and `recompile`
    allows compiling its portable StableHLO instead."""
    load = functools.partial(_deserialize, artifact, backend)
    what = f"{place}: its executable for every shape"
    return _load_or_warn(load, artifact, recompile, what)


def _deserialize(
    artifact: Artifact, backend: Backend, section: str = artifacts.EXECUTABLE, specs=None
):
    """The artifact's executable `section` loaded onto `backend` (one device), for `specs`
    (in_specs, out_specs; default: the executable's, `Artifact.executable_in_specs`, and the
    signature's results)."""
    signature = artifact.signature
    in_specs, out_specs = specs or (artifact.executable_in_specs, signature.flat_out_specs)
    return backend.deserialize(
        artifact.section(section),
        name=artifact.name,
        in_specs=in_specs,
        out_specs=out_specs,
        options=artifact.options,
        target=artifact.target,
    )


def _load_or_warn(load, artifact: Artifact, recompile, what: str, instead: str = "instead"):
    """`load()`, or None where the executable does not load and `recompile` allows compiling
    the portable StableHLO `instead` (with a warning at the user's line); ArtifactError
    where it does not."""
    try:
        return load()
    except (CompileError, ValueError) as e:
        if recompile is False:
            raise ArtifactError(
                f"{what} does not load ({e}); load it with recompile=True or 'auto' to compile "
                "its portable StableHLO",
                path=artifact.label,
            ) from None
        warnings.warn(
            f"{what} does not load ({e}); compiling its portable StableHLO {instead}",
            ArtifactWarning,
            stacklevel=user_stacklevel(),
        )
        return None


def _placed_layout(artifact: Artifact, backend, place: str) -> spmd.Partitioning:
    """A sharded artifact's partitioning placed on `backend`'s devices: the partition that
    ran on the writer's k-th device runs on the k-th device here, so a mesh keeps its device
    order. ArtifactError where the devices here are too few."""
    saved = artifact.partitioning
    everywhere = list(backend.global_devices())
    n = saved.num_devices
    if max(saved.positions) >= len(everywhere):
        hint = "run it where as many devices are"
        if backend.platform == "cpu":
            hint = (
                f"on the CPU, start the process with XLA_FLAGS="
                f"--xla_force_host_platform_device_count={max(saved.positions) + 1} (or "
                "aotkit.distributed.initialize(..., local_device_count=...) across processes)"
            )
        raise ArtifactError(
            f"{place} is partitioned over {saved.describe()} on {n} devices (up to device "
            f"{max(saved.positions)} of the writer's), but backend {backend.name!r} has "
            f"{len(everywhere)} here; {hint}",
            path=artifact.label,
        )
    devices = [everywhere[i] for i in saved.positions]
    if saved.axes is None:
        return spmd.Partitioning(
            None, n, [None] * len(saved.in_shardings), [None] * len(saved.out_shardings), devices
        )
    names = tuple(name for name, _ in saved.axes)
    sizes = tuple(size for _, size in saved.axes)
    grid = np.empty(n, dtype=object)
    grid[:] = devices
    mesh = Mesh(grid.reshape(sizes), names, axis_types=(AxisType.Auto,) * len(names))

    def named(entries):
        return None if entries is None else NamedSharding(mesh, PartitionSpec(*entries))

    return spmd.Partitioning(
        mesh,
        n,
        [named(e) for e in saved.in_shardings],
        [named(e) for e in saved.out_shardings],
    )


def _compiled(artifact: Artifact, executable, origin: str, place: str) -> Compiled:
    if artifact.pruned:  # called with every leaf, as it was saved
        executable = PrunedExecutable(executable, artifact.signature.flat_in_specs, artifact.pruned)
    _check_aliasing(artifact, executable, f"{place}: its executable")
    return _artifact_compiled(artifact, executable, origin)


def _check_aliasing(artifact: Artifact, executable, what: str) -> None:
    """Refuses an executable of `artifact` (`what` names it) that reuses the buffers of
    arguments its header does not donate."""
    aliased = executable.aliased_arguments()
    undeclared = sorted(i for i in aliased or () if not artifact.signature.donated[i])
    if undeclared:
        # The executable writes its results into these arguments' buffers: called as the
        # header says (not donated), the caller's arrays would be consumed without a word.
        raise ArtifactError(
            f"{what} reuses the buffers of arguments "
            f"{', '.join(map(str, undeclared))} for its results, but its header says they are "
            f"not donated; {artifacts.REWRITE}",
            path=artifact.label,
        )


def _artifact_compiled(artifact: Artifact, executable, origin: str) -> Compiled:
    """The `Compiled` of an executable made from `artifact`: its signature, options and
    portable module."""
    signature = artifact.signature
    return Compiled(
        executable,
        in_tree=signature.in_tree,
        out_tree=signature.out_tree,
        donated=signature.donated,
        options=artifact.options,
        origin=origin,
        portable=artifact.section(artifacts.PORTABLE),
        arg_names=signature.arg_names,
        keys=(signature.in_keys, signature.out_keys),
    )


def _compile_portable(artifact: Artifact, backend, place: str, *, check: bool = False, layout=None):
    """The portable StableHLO compiled on `backend`; with `check`, after the trust check that
    modules from files pass (the file is not trusted: `load(..., portable_only=True)`). A
    sharded one (`layout`: its partitioning placed here) is partitioned over the same
    devices, with the shardings its module states."""
    module, lc = artifacts.parse_portable(artifact, place)
    if check:
        trust.check(module, place)
    options = artifact.options if backend.name == artifact.target["backend"] else None
    partitioning = None
    if layout is not None:
        signature = artifact.signature
        with lc:
            stated = spmd.read_layout(place, module)
            partitioning = spmd.from_module(
                place, stated, signature.flat_in_specs, signature.flat_out_specs, layout.mesh
            )
        if partitioning.num_devices != layout.num_devices:
            raise ArtifactError(
                f"{place}: its portable StableHLO is partitioned for "
                f"{partitioning.num_devices} devices but its header says "
                f"{layout.num_devices}; {artifacts.REWRITE}",
                path=artifact.label,
            )
        # The header's shardings are those XLA compiled from the module's: asked for again,
        # they are what the recompiled program reports (`Compiled.in_shardings`).
        partitioning = spmd.Partitioning(
            partitioning.mesh,
            partitioning.num_devices,
            [h or m for h, m in zip(layout.in_shardings, partitioning.in_shardings)],
            [h or m for h, m in zip(layout.out_shardings, partitioning.out_shardings)],
            partitioning.devices or layout.devices,
        )
    try:
        if partitioning is not None:
            executable = backend.compile_spmd(module, options, partitioning)
        else:
            executable = backend.compile(module, options)
    except (ValueError, CompileError) as e:
        if not options:
            raise
        # The options are the file's: a backend refusing them refuses the file.
        raise ArtifactError(
            f"{place}: its compile options {printable(repr(sorted(options)))} are refused here "
            f"({e}); write the artifact again with options this backend takes",
            path=artifact.label,
        ) from None
    signature = artifact.signature
    takes = (artifact.executable_in_specs, signature.flat_out_specs)
    if (executable.in_specs, executable.out_specs) != takes:
        raise ArtifactError(
            f"{place}: its portable StableHLO takes "
            f"{_specs_text(executable.in_specs, executable.out_specs)} but its header says "
            f"{_specs_text(*takes)}; "
            f"{artifacts.REWRITE}",
            path=artifact.label,
        )
    return executable


def _specs_text(in_specs, out_specs) -> str:
    return f"({', '.join(map(str, in_specs))}) -> ({', '.join(map(str, out_specs))})"
