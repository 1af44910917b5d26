"""The compiled stage: `Compiled`, a callable executable for one fixed signature.

`Compiled` wraps a backend `Executable` with the argument and result pytrees. Calling it
checks the arguments against the compiled pytree and specs and runs; it never retraces or
recompiles. Its results (the leaves of the result pytree) are all of one type, the
backend's `result_type`: `jax.Array` on PJRT backends (`cpu` and the plugins: the device's
own buffer, not copied), `numpy.ndarray` on the others (`interpreter`, `iree`: host memory);
see aotkit/backends/base.py for why. A mismatch is a TypeError naming both PyTreeDefs and
the first difference, or the argument path with the expected and given specs.

The call is the dispatch hot path. A backend may supply a native dispatcher (PJRT backends
use jaxlib's C++ dispatch, as JAX's own `Compiled` does) that runs argument signatures it
has seen before without entering Python and hands every other call to the checked Python
call. That call, for the common case (positional array arguments, no kwargs), skips
flattening: the backend's per-slot checks reject anything that is not a matching leaf, and
only then is the full pytree diagnosis run to word the error.
"""

from __future__ import annotations

from jax import tree_util

from aotkit._traceback import api_boundary, filter_exception
from aotkit.backends.base import ArgumentMismatch, Backend, Executable, MemoryAnalysis
from aotkit.traced import Stage


class Compiled(Stage):
    """A function compiled by one backend for fixed argument specs; call it like the function.

    Immutable, like the other stages. `lowered` is the `Lowered` stage it was compiled from
    (None for a Compiled loaded from an artifact). `options` are the compile options it was
    compiled with; `origin` says where its executable came from: "compiled" (the backend
    compiled it), "persistent cache", "artifact" (deserialized by `aotkit.load`) or
    "recompiled" (`aotkit.load` compiled the artifact's portable StableHLO).
    """

    __slots__ = (
        "name",
        "in_tree",
        "out_tree",
        "flat_in_specs",
        "flat_out_specs",
        "donated",
        "lowered",
        "_executable",
        "_execute",
        "_n_args",
        "_positional",
        "_single_out",
        "_unflatten_out",
        "_paths",
        "_call",
        "options",
        "origin",
        "_portable",
        "partitioning",
    )

    def __init__(
        self,
        executable: Executable,
        *,
        in_tree,
        out_tree,
        donated=(),
        lowered=None,
        options=None,
        origin: str = "compiled",
        portable: bytes | None = None,
    ):
        n_in, n_out = len(executable.in_specs), len(executable.out_specs)
        if in_tree.num_leaves != n_in or out_tree.num_leaves != n_out:
            raise ValueError(
                f"Compiled: pytrees with {in_tree.num_leaves} inputs and {out_tree.num_leaves} "
                f"outputs do not fit executable {executable.name!r} ({n_in} arguments, "
                f"{n_out} results); build Compiled through Lowered.compile"
            )
        self._init(
            name=executable.name,
            in_tree=in_tree,
            out_tree=out_tree,
            flat_in_specs=tuple(executable.in_specs),
            flat_out_specs=tuple(executable.out_specs),
            donated=tuple(donated) or (False,) * n_in,
            lowered=lowered,
            _executable=executable,
            _execute=executable.execute,
            _n_args=n_in,
            _positional=in_tree == tree_util.tree_structure(((0,) * n_in, {})),
            _single_out=out_tree == tree_util.tree_structure(0),
            _unflatten_out=out_tree.unflatten,
            _paths=None,
            options=dict(options or {}),
            origin=origin,
            # The portable StableHLO of a Compiled loaded from an artifact (it has no
            # `lowered` to write it from), so that it saves again.
            _portable=portable,
            # A sharded executable's devices and compiled shardings (aotkit/spmd.py).
            partitioning=getattr(executable, "partitioning", None),
        )
        # A backend may put a native dispatcher in front of the checked Python call; it
        # falls back to `_python_call` for every argument signature it has not cached.
        native = executable.dispatcher(self.name, self._python_call)
        self._init(_call=native if native is not None else self._python_call)

    # -- calling

    @property
    def __call__(self):
        """`compiled(*args, **kwargs)` runs the executable on arguments of the compiled specs.

        A property handing out the dispatcher itself: Python calls what it returns, which
        saves the ~0.25 µs of a forwarding frame on every call.
        """
        return self._call

    def _python_call(self, *args, **kwargs):
        # An entry point (aotkit/_traceback.py): the error leaves without aotkit's frames.
        try:
            if self._positional and not kwargs and len(args) == self._n_args:
                try:
                    outs = self._execute(args)
                except ArgumentMismatch as mismatch:
                    raise self._diagnose(args, kwargs, mismatch) from None
            else:
                leaves, tree = tree_util.tree_flatten((args, kwargs))
                if tree != self.in_tree:
                    raise self._tree_error(tree)
                try:
                    outs = self._execute(leaves)
                except ArgumentMismatch as mismatch:
                    raise self._argument_error(mismatch) from None
        except Exception as e:
            filter_exception(e)
            raise
        if self._single_out:
            return outs[0]
        return self._unflatten_out(outs)

    def call_flat(self, leaves) -> list:
        """Runs on leaves already flattened with `in_tree`; returns the flat results."""
        try:
            return self._execute(leaves)
        except ArgumentMismatch as mismatch:
            raise self._argument_error(mismatch) from None

    def _diagnose(self, args, kwargs, mismatch: ArgumentMismatch) -> Exception:
        tree = tree_util.tree_structure((args, kwargs))
        if tree != self.in_tree:
            return self._tree_error(tree)
        return self._argument_error(mismatch)

    def _tree_error(self, tree) -> TypeError:
        where, expected, given = _first_difference(self.in_tree, tree, ())
        return TypeError(
            f"Compiled {self.name!r}: function compiled for {self.in_tree}, called with "
            f"{tree}; first difference at {_path_text(where)}: expected {_node_text(expected)}, "
            f"got {_node_text(given)}; call it with the structure it was compiled for: "
            f"{self._signature_text()}"
        )

    def _argument_error(self, mismatch: ArgumentMismatch) -> Exception:
        if self._paths is None:
            self._init(_paths=_leaf_paths(self.in_tree))
        message = f"Compiled {self.name!r}: argument {self._paths[mismatch.index]} "
        message += mismatch.reason
        if mismatch.kind is TypeError and not mismatch.says_fix:
            message += (
                "; pass an array of the compiled shape and dtype, or lower and compile again "
                "for the new one"
            )
        return mismatch.kind(message)

    # -- inspection

    @property
    def backend(self) -> Backend:
        return self._executable.backend

    def as_text(self) -> str:
        """The backend's optimized program: XLA's optimized HLO, or the interpreter's StableHLO."""
        return self._executable.as_text()

    def cost_analysis(self) -> dict[str, float] | None:
        """XLA's cost estimate ('flops', 'bytes accessed', 'transcendentals', ...) or None.

        For a sharded program the estimate is per device (the program one device runs), and
        'devices' says how many devices run it."""
        return self._executable.cost_analysis()

    @property
    def input_shardings(self):
        """Where each argument leaf must live, as JAX's `Compiled.input_shardings`: the input
        pytree `((args...), {kwargs})` of `jax.sharding` shardings (the compiled ones for a
        sharded program, the device's `SingleDeviceSharding` otherwise), or None on a
        backend whose arrays are not JAX's (interpreter, iree)."""
        flat = self._flat_shardings(self.flat_in_specs, "in_shardings")
        return None if flat is None else tree_util.tree_unflatten(self.in_tree, flat)

    @property
    def output_shardings(self):
        """Where each result leaf lives, as JAX's `Compiled.output_shardings` (see
        `input_shardings`)."""
        flat = self._flat_shardings(self.flat_out_specs, "out_shardings")
        return None if flat is None else tree_util.tree_unflatten(self.out_tree, flat)

    def _flat_shardings(self, specs, side: str):
        if self.partitioning is not None:
            return list(getattr(self.partitioning, side))
        sharding = self._executable.backend.input_sharding()
        return None if sharding is None else [sharding] * len(specs)

    def memory_analysis(self) -> MemoryAnalysis | None:
        """Argument, output, alias, temp and generated-code sizes in bytes, or None.

        For a sharded program the sizes are per device, and its `devices` field says how
        many devices run it."""
        return self._executable.memory_analysis()

    def runtime_executable(self):
        """The backend's own executable (a PJRT LoadedExecutable for PJRT backends)."""
        return self._executable.runtime_executable()

    # -- artifacts (aotkit/artifacts.py; the format is docs/artifact-format.md)

    @api_boundary
    def serialize(self) -> bytes:
        """This function as an AOT artifact: `aotkit.load(data)` rebuilds it in any process,
        without the Python function, tracing or (on the same platform and versions)
        compiling. Pytrees must be tuples, lists, dicts (str or int keys) and None."""
        from aotkit import artifacts

        return artifacts.serialize(self)

    @api_boundary
    def save(self, path) -> None:
        """Writes `serialize()` to `path` (conventionally `NAME.aotx`), atomically."""
        from aotkit import artifacts

        artifacts.save(self, path)

    def __repr__(self) -> str:
        over = f", {self.partitioning.describe()}" if self.partitioning is not None else ""
        return f"<Compiled {self._signature_text()} on {self.backend.name}{over}>"


def _leaf_paths(tree) -> list[str]:
    dummy = tree_util.tree_unflatten(tree, list(range(tree.num_leaves)))
    return [_path_text(_keys(path)) for path, _ in tree_util.tree_flatten_with_path(dummy)[0]]


def _keys(path) -> tuple[str, ...]:
    return tuple(tree_util.keystr((k,)) for k in path)


def _path_text(keys: tuple[str, ...]) -> str:
    """`args[0]['w']`: the root pair `(args, kwargs)` is named, the rest is indexing."""
    if not keys:
        return "the argument list"
    head = {"[0]": "args", "[1]": "kwargs"}.get(keys[0], keys[0])
    return head + "".join(keys[1:])


def _first_difference(expected, given, where: tuple[str, ...]):
    """(path, expected subtree, given subtree) at the first place two PyTreeDefs differ."""
    e_node, g_node = expected.node_data(), given.node_data()
    if e_node is None or g_node is None or e_node[0] is not g_node[0] or e_node[1] != g_node[1]:
        return where, expected, given
    e_children, g_children = expected.children(), given.children()
    if len(e_children) != len(g_children):
        return where, expected, given
    for i, (e, g) in enumerate(zip(e_children, g_children)):
        if e != g:
            return _first_difference(e, g, where + (_child_key(e_node, i),))
    return where, expected, given


def _child_key(node, i: int) -> str:
    kind, data = node
    if kind is dict and data is not None:
        return f"[{list(data)[i]!r}]"
    return f"[{i}]"


def _node_text(tree) -> str:
    node = tree.node_data()
    if node is None:
        return "an array"
    kind, data = node
    n = len(tree.children())
    if kind is type(None):
        return "None"
    if kind is dict:
        return f"a dict with keys {list(data)}"
    if kind is tuple:
        return f"a tuple of {n}"
    if kind is list:
        return f"a list of {n}"
    return f"a {kind.__name__} of {n}"
