"""The backend contract: every optional capability is declared on the ABCs with a default.

A minimal `Backend`/`Executable` pair gets the defaults of a backend that lacks each
capability; the built-in backends override exactly the ones they offer. The import graph
of aotkit/backends has no circle, counting function-level imports, and every import that
stays inside a function says why on the line above.
"""

from __future__ import annotations

import ast
import graphlib
import inspect
import pathlib

import numpy as np
import pytest
from jaxlib.mlir import ir

from aotkit import _context, backends
from aotkit.backends import base, iree, pjrt, pjrt_spmd
from aotkit.errors import CompileError
from tests.backends import modules


class MinimalExecutable(base.Executable):
    def __init__(self, backend):
        self.backend = backend
        self.name = "minimal"
        self.in_specs = ()
        self.out_specs = ()

    def execute(self, leaves):
        return []

    def as_text(self) -> str:
        return ""

    def runtime_executable(self):
        return None


class MinimalBackend(base.Backend):
    name = "minimal"
    platform = "minimal-platform"

    def devices(self) -> list:
        return ["minimal:0"]

    def compile(self, module, options=None, *, target=None, target_options=None):
        self.normalize_target(target, target_options)
        return MinimalExecutable(self)


@pytest.fixture
def minimal():
    return MinimalBackend()


# -- declared defaults


def test_default_executable_has_no_fastpath(minimal):
    exe = minimal.compile(modules.seed())
    assert exe.fastpath(None, (), {}, False) is None


def test_default_executable_has_no_partitioning(minimal):
    assert minimal.compile(modules.seed()).partitioning is None


def test_default_executable_has_no_dispatcher(minimal):
    assert minimal.compile(modules.seed()).dispatcher("f", lambda: None) is None


def test_default_backend_does_not_cross_compile(minimal):
    assert minimal.cross_compiles is False


def test_default_backend_compiles_symbolic_programs_per_shape(minimal):
    assert minimal.dynamic_shapes is False
    with pytest.raises(NotImplementedError) as info:
        minimal.compile_dynamic(modules.seed(), None, (), ())
    assert str(info.value) == (
        "backend 'minimal' compiles symbolic programs per shape (dynamic_shapes is False); "
        "compile the program with Lowered.compile, which specializes it"
    )


def test_default_execute_bound_is_execute(minimal):
    assert MinimalExecutable(minimal).execute_bound([], {"b": 3}) == []


def test_default_backend_has_no_jit_dispatcher(minimal):
    assert minimal.jit_dispatcher("f", lambda: None, lambda x64, args, kwargs: None) is None


def test_default_normalize_target_takes_the_default_target(minimal):
    assert minimal.normalize_target() == ()
    assert minimal.normalize_target(None, None) == ()


@pytest.mark.parametrize(
    "keywords, given",
    [
        ({"target": "cuda"}, "target='cuda'"),
        ({"target_options": {"cpu": "host"}}, "target_options={'cpu': 'host'}"),
    ],
    ids=["target", "target_options"],
)
def test_default_normalize_target_refuses_a_target(minimal, keywords, given):
    with pytest.raises(ValueError) as info:
        minimal.normalize_target(**keywords)
    assert str(info.value) == (
        f"backend 'minimal': {given} applies to backend='iree', which cross-compiles; "
        "backend 'minimal' compiles for its own devices; drop it or compile with backend='iree'"
    )


def test_default_compile_spmd_refuses(minimal):
    class Partitioning:
        def describe(self) -> str:
            return "a mesh of 2 devices"

    with pytest.raises(ValueError) as info:
        minimal.compile_spmd(modules.seed(), None, Partitioning())
    assert str(info.value) == (
        "backend 'minimal' runs programs on one device, but module 'seed' is partitioned over "
        "a mesh of 2 devices; compile it on a PJRT backend such as 'cpu'"
    )


def test_compile_declares_the_target_keywords():
    parameters = inspect.signature(base.Backend.compile).parameters
    for name in ("target", "target_options"):
        assert parameters[name].kind is inspect.Parameter.KEYWORD_ONLY
        assert parameters[name].default is None


# -- what the built-in backends offer


@pytest.fixture(scope="module")
def cpu():
    return backends.get("cpu")


def test_cpu_is_a_pjrt_backend_that_compiles_sharded_programs(cpu):
    assert isinstance(cpu, pjrt.PjrtBackend)
    assert isinstance(cpu, pjrt_spmd.SpmdBackend)
    assert type(cpu).compile_spmd is not base.Backend.compile_spmd


def test_cpu_offers_a_jit_dispatcher_that_runs_misses_in_python(cpu):
    calls = []

    def python_call(x):
        return ("python", x)

    def run(x64, args, kwargs):
        calls.append((args, kwargs))
        return ("run", *args), None  # nothing to cache: every call misses

    dispatch = cpu.jit_dispatcher("f", python_call, run)
    assert dispatch is not None
    assert dispatch(np.float32(2.0)) == ("run", np.float32(2.0))
    assert dispatch(np.float32(3.0)) == ("run", np.float32(3.0))
    assert len(calls) == 2
    dispatch.clear_cache()


@pytest.mark.parametrize("name", ["cpu", "interpreter"])
def test_backend_without_targets_does_not_cross_compile(name):
    assert backends.get(name).cross_compiles is False


def test_iree_cross_compiles():
    assert iree.IreeBackend.cross_compiles is True


def test_iree_compiles_symbolic_programs_once():
    assert iree.IreeBackend.dynamic_shapes is True
    assert iree.IreeBackend.compile_dynamic is not base.Backend.compile_dynamic


@pytest.mark.parametrize("name", ["cpu", "interpreter"])
def test_compile_refuses_a_target_on_a_backend_that_does_not_cross_compile(name):
    with pytest.raises(ValueError) as info:
        backends.get(name).compile(modules.seed(), target="llvm-cpu")
    assert str(info.value) == (
        f"backend {name!r}: target='llvm-cpu' applies to backend='iree', which cross-compiles; "
        f"backend {name!r} compiles for its own devices; drop it or compile with backend='iree'"
    )


@pytest.mark.parametrize(
    ("name", "hint"),
    [
        ("cpu", "build modules with aotkit.lower or check them with Lowered.as_text()"),
        ("interpreter", "build modules with aotkit.lower"),
    ],
)
def test_compile_refuses_a_module_that_does_not_verify(name, hint):
    module = modules.identity((3,), "f32")
    main = module.body.operations[0]
    with _context.of(module):
        f32 = [ir.Type.parse("tensor<3xf32>")]
        f32x4 = [ir.Type.parse("tensor<4xf32>")]
        main.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(f32, f32x4))
    with pytest.raises(CompileError) as info:
        backends.get(name).compile(module)
    message = str(info.value)
    assert message.startswith(f"backend {name!r} rejected module 'identity': it does not verify: ")
    assert message.endswith(f"; {hint}")
    assert (info.value.backend, info.value.module_name) == (name, "identity")


def test_interpreter_has_no_jit_dispatcher():
    backend = backends.get("interpreter")
    assert backend.jit_dispatcher("f", lambda: None, lambda x64, args, kwargs: None) is None
    exe = backend.compile(modules.seed())
    assert exe.fastpath(None, (np.float32(1.0),), {}, False) is None
    assert exe.partitioning is None


def test_cpu_executable_runs_on_one_device(cpu):
    exe = cpu.compile(modules.seed())
    assert exe.partitioning is None
    (out,) = exe.execute([np.float32(3.0)])
    assert exe.fastpath(out, (np.float32(3.0),), {}, True) is not None


# -- the import graph of aotkit/backends

_ROOT = pathlib.Path(backends.__file__).parent


def _module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(_ROOT.parent.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


_SOURCES = {_module_name(p): p for p in sorted(_ROOT.rglob("*.py"))}


def _imports(name: str) -> list[tuple[ast.stmt, str]]:
    """(statement, imported aotkit.backends module) for every import in module `name`,
    function-level ones included; `from package import submodule` names the submodule."""
    tree = ast.parse(_SOURCES[name].read_text())
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node, a.name) for a in node.names if a.name in _SOURCES]
        elif isinstance(node, ast.ImportFrom) and node.module in _SOURCES:
            for alias in node.names:
                child = f"{node.module}.{alias.name}"
                found.append((node, child if child in _SOURCES else node.module))
    return found


def test_backend_modules_import_each_other_without_a_circle():
    graph = {name: {target for _, target in _imports(name)} for name in _SOURCES}
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as e:
        pytest.fail(f"aotkit/backends imports in a circle: {' -> '.join(e.args[1])}")


def _function_level_imports():
    for name, path in _SOURCES.items():
        lines = path.read_text().splitlines()
        tree = ast.parse("\n".join(lines))
        for function in ast.walk(tree):
            if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(function):
                if isinstance(node, ast.Import | ast.ImportFrom):
                    yield name, node.lineno, lines


def test_every_function_level_import_says_why_it_is_lazy():
    unexplained = []
    for name, lineno, lines in _function_level_imports():
        above = lines[lineno - 2 :: -1]  # from the line above upwards
        comments = []
        for line in above:
            stripped = line.strip()
            if stripped.startswith("#"):
                comments.append(stripped)
            elif not stripped.startswith(("from ", "import ")):
                break
        if not any(c.startswith("# lazy:") for c in comments):
            unexplained.append(f"{name}:{lineno}")
    assert unexplained == []
