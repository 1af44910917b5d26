"""aotkit's import layers: every import goes to the same or a lower layer, with no circle.

The test reads every `aotkit/**/*.py` with `ast` (imports inside functions and under
`if TYPE_CHECKING:` included, since each one is a dependency all the same) and checks the
graph against the table below. Importing `a.b.c` also runs the package `a.b`, so it counts
as an import of that package too. An import inside a function is allowed only where
`LAZY` says why it cannot be at the top of its module.
"""

from __future__ import annotations

import ast
import fnmatch
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "aotkit"

# Lowest first. A module belongs to the first layer with a pattern that matches its name.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    (
        "base: errors, options, files; jax's private names; the optional C parts and the native "
        "runner's build",
        (
            "aotkit._version",
            "aotkit._speedups",
            "aotkit._native",
            "aotkit.native",
            # C sources the native runner is built from (not Python extensions)
            "aotkit.native.aotkit_run",
            "aotkit.native.aotkit_runtime",
            "aotkit.errors",
            "aotkit.config",
            "aotkit._traceback",
            "aotkit._files",
            "aotkit._compat",
            # the package itself imports nothing; its modules sit at three layers
            "aotkit.symbolic",
            "aotkit.symbolic.algebra",
        ),
    ),
    (
        "ir: MLIR contexts, dtypes and specs, reading modules, dumps, argument trees, pytrees "
        "as data, SPMD layouts, passes, the shape prover of dynamic modules",
        (
            "aotkit._context",
            "aotkit.dtypes",
            "aotkit.specs",
            "aotkit.modules",
            "aotkit.dumps",
            "aotkit.arguments",
            "aotkit.pytrees",
            "aotkit.spmd",
            "aotkit.passes",
            "aotkit.passes.*",
            "aotkit.symbolic.prover",
        ),
    ),
    ("program: the Program record and its one Signature", ("aotkit.program",)),
    ("backends: compile and run a module", ("aotkit.backends", "aotkit.backends.*")),
    (
        "format: symbolic signatures, the artifact container and the persistent cache",
        ("aotkit.symbolic.signatures", "aotkit.artifacts", "aotkit.cache"),
    ),
    (
        "specialize: symbolic programs compiled per shape (through the persistent cache)",
        ("aotkit.symbolic.specialize",),
    ),
    (
        "tracer: op families, aotkit.numpy and friends, autograph",
        (
            "aotkit.tracing",
            "aotkit.tracing.*",
            "aotkit.numpy",
            "aotkit.numpy.*",
            "aotkit.lax",
            "aotkit.nn",
            "aotkit.random",
            "aotkit.autograph",
            "aotkit.autograph.*",
        ),
    ),
    (
        "front ends: each returns a Program",
        ("aotkit.frontends", "aotkit.frontends.*"),
    ),
    (
        "transforms: grad, vjp, jvp, vmap as StableHLO rewrites (they trace functions with the "
        "tracer front end)",
        ("aotkit.transforms", "aotkit.transforms.*"),
    ),
    ("stages: the values Traced, Lowered, Compiled", ("aotkit.stages",)),
    ("compile: a Lowered or an artifact into a Compiled", ("aotkit.compiling",)),
    ("api: jit, lower, load_module and jit's caches", ("aotkit.api",)),
    (
        "surface: the package, the CLI and the user-facing helpers",
        (
            "aotkit.sharding",
            "aotkit.functional",
            "aotkit.distributed",
            "aotkit.interop",
            "aotkit.crosscheck",
            "aotkit.cli",
            "aotkit.cli.*",
            "aotkit.__main__",
            "aotkit.native.__main__",
            "aotkit.native.portable",
            "aotkit",
        ),
    ),
]

# Imports inside functions, by importing module (a pattern, as in LAYERS): why each cannot be
# at the top.
LAZY: dict[str, str] = {
    "aotkit.cli.*": (
        "start-up cost: `aotkit --help`, argument errors and `aotkit inspect` answer without "
        "importing the tracer, the passes or a backend; each command imports what it runs"
    ),
    "aotkit.backends": "optional extras and start-up cost: a backend is imported when chosen",
    "aotkit.api": "the JAX front end imports jax's lowering machinery, only for JAX programs",
    "aotkit.sharding": "a constraint exists only inside a trace: the tracer is not needed before",
}


def _module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}
# C extension modules, each built from a source of its name (they import nothing of aotkit).
EXTENSIONS = {_module_name(p) for p in PACKAGE.rglob("*.c")}


def _layer(module: str) -> int:
    for index, (_, patterns) in enumerate(LAYERS):
        if any(fnmatch.fnmatchcase(module, pattern) for pattern in patterns):
            return index
    raise AssertionError(f"{module} is in no layer of tests/test_layers.py's LAYERS: add it")


def _known(name: str) -> str | None:
    """The aotkit module `name` is, or the package that holds it."""
    if name in EXTENSIONS:
        return name
    while name not in MODULES and "." in name:
        name = name.rsplit(".", 1)[0]
    return name if name in MODULES else None


def _targets(
    module: str, node: ast.Import | ast.ImportFrom, is_package: bool, parents: bool = True
) -> set[str]:
    """The aotkit modules an import statement names; with `parents`, the packages above
    them too, which run first."""
    names = []
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        base = node.module or ""
        if node.level:
            parts = module.split(".")
            if not is_package:
                parts.pop()
            parts = parts[: len(parts) - (node.level - 1)]
            base = ".".join(parts + ([node.module] if node.module else []))
        names = [
            f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES.keys() | EXTENSIONS else base
            for a in node.names
        ]
    found = set()
    for name in names:
        if name != "aotkit" and not name.startswith("aotkit."):
            continue
        target = _known(name)
        found.add(target)
        # The packages above it run first; `aotkit` itself runs before any import of it
        # and imports only base modules (test_the_package_imports_only_base_modules).
        while parents and target.count(".") > 1:
            target = target.rsplit(".", 1)[0]
            found.add(target)
    found.discard(module)
    return found


def _imports() -> tuple[dict, dict, list[tuple[str, int, str]]]:
    """(module -> the modules its imports name, module -> those and the packages above
    them, [(module, line, statement) inside functions])."""
    named: dict[str, set[str]] = {m: set() for m in MODULES.keys() | EXTENSIONS}
    edges: dict[str, set[str]] = {m: set() for m in MODULES.keys() | EXTENSIONS}
    lazy = []
    for module, path in MODULES.items():
        tree = ast.parse(path.read_text(), str(path))
        is_package = path.name == "__init__.py"
        in_functions = {
            id(node)
            for fn in ast.walk(tree)
            if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
            for node in ast.walk(fn)
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom):
                targets = _targets(module, node, is_package)
                edges[module] |= targets
                named[module] |= _targets(module, node, is_package, parents=False)
                if targets and id(node) in in_functions:
                    lazy.append((module, node.lineno, ast.unparse(node)))
    return named, edges, lazy


# NAMED: what the import statements name, for the circles (a package's own submodules run
# its `__init__` first, which is how a package works, not a circle); EDGES: with the
# packages above them, for the layers (a package that sits higher must not run first).
NAMED, EDGES, LAZY_IMPORTS = _imports()


def _circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_the_walk_sees_every_module_and_its_imports():
    # The checks below are only as good as the graph: it must hold what the files say.
    assert {"aotkit", "aotkit.api", "aotkit.stages", "aotkit.tracing.trace"} <= set(MODULES)
    assert "aotkit.program" in EDGES["aotkit.stages"]
    assert "aotkit.stages" in EDGES["aotkit.api"]
    assert "aotkit.frontends" in EDGES["aotkit.frontends.files"]  # its package runs first
    assert any(m == "aotkit.cli.commands" for m, _, _ in LAZY_IMPORTS)


def test_the_package_imports_only_base_modules():
    # `import aotkit` runs aotkit/__init__.py before any submodule: it imports only base
    # modules at its top (the rest on first use), so its implicit import is not an edge.
    tree = ast.parse(MODULES["aotkit"].read_text())
    top = [n for n in tree.body if isinstance(n, ast.Import | ast.ImportFrom)]
    targets = set().union(*(_targets("aotkit", n, True) for n in top))
    assert targets and all(_layer(t) == 0 for t in targets), targets


def test_no_import_circle():
    assert _circles(NAMED) == []


def test_the_circle_finder_finds_a_circle():
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _circles(edges) == [["a", "b", "c"]]


def test_every_module_is_in_one_layer():
    for module in MODULES.keys() | EXTENSIONS:
        _layer(module)


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_go_to_the_same_or_a_lower_layer(module):
    mine = _layer(module)
    upward = sorted(
        f"{target} ({LAYERS[_layer(target)][0].split(':')[0]})"
        for target in EDGES[module]
        if _layer(target) > mine
    )
    assert upward == [], f"{module} ({LAYERS[mine][0].split(':')[0]}) imports upward"


def test_imports_inside_functions_say_why():
    unexplained = sorted(
        {m for m, _, _ in LAZY_IMPORTS if not any(fnmatch.fnmatchcase(m, p) for p in LAZY)}
    )
    assert unexplained == [], [i for i in LAZY_IMPORTS if i[0] in unexplained]


def test_every_lazy_reason_is_still_needed():
    unused = [p for p in LAZY if not any(fnmatch.fnmatchcase(m, p) for m, _, _ in LAZY_IMPORTS)]
    assert unused == []


def test_the_stage_signature_is_declared_once():
    # Its fields are declared by aotkit.program.Signature alone: no other class in the
    # package names them in `__slots__` or as dataclass fields.
    fields = {"in_tree", "out_tree", "flat_in_specs", "flat_out_specs", "donated"}
    declaring = []
    for module, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ClassDef):
                continue
            names = set()
            for item in node.body:
                if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    names.add(item.target.id)
                if isinstance(item, ast.Assign) and any(
                    isinstance(t, ast.Name) and t.id == "__slots__" for t in item.targets
                ):
                    value = item.value
                    if isinstance(value, ast.Tuple | ast.List):
                        names |= {e.value for e in value.elts if isinstance(e, ast.Constant)}
            if len(names & fields) > 1:  # (ArgInfo's one `donated` is per leaf, as JAX's)
                declaring.append(f"{module}.{node.name}")
    assert declaring == ["aotkit.program.Signature"]


def test_the_options_are_declared_once_below_the_public_signatures():
    # `aotkit.program.Options` declares what jit/lower/load_module take; inside the package
    # they travel as that one value. Only the public `jit` and `lower` spell the keywords
    # (as jax.jit does, for users and their tools), and `Options` itself.
    options = {
        "static_argnums",
        "static_argnames",
        "donate_argnums",
        "backend",
        "pipeline",
        "dump_dir",
        "frontend",
        "autograph",
        "in_shardings",
        "out_shardings",
    }
    spelled = []
    for module, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef):
                params = {a.arg for a in node.args.args + node.args.kwonlyargs}
            elif isinstance(node, ast.ClassDef):
                params = {
                    i.target.id
                    for i in node.body
                    if isinstance(i, ast.AnnAssign) and isinstance(i.target, ast.Name)
                }
            else:
                continue
            if len(params & options) >= 5:
                spelled.append(f"{module}.{node.name}")
    assert sorted(spelled) == ["aotkit.api.jit", "aotkit.api.lower", "aotkit.program.Options"]


def test_the_architecture_in_the_docs_names_every_package_and_layer():
    # docs/development.md opens with the architecture: its tables must follow the tree.
    text = (ROOT / "docs" / "development.md").read_text()
    packages = sorted(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file())
    assert {"tracing", "symbolic", "cli", "frontends", "backends"} <= set(packages)
    missing = [p for p in packages if f"`{p}/`" not in text]
    assert not missing, f"docs/development.md does not name these packages: {missing}"
    layers = [description.split(":")[0] for description, _ in LAYERS]
    missing = [layer for layer in layers if f"\n| {layer} | " not in text]
    assert not missing, f"docs/development.md's layer table lacks: {missing}"
