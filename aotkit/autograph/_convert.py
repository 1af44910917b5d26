"""Trace stage, autograph conversion: finds a function's source, rewrites it
(`_transform`), compiles it under the original file name and line numbers, and rebuilds
the function with its own globals, closure cells and defaults.

Converted code is cached per code object; a converted function per function object (held
weakly). Functions that are not converted run as they are: no source (built in, C, made
by exec, a REPL lambda), library code (the standard library, site-packages, NumPy, JAX,
aotkit), generators and coroutines, functions using `super()`, and functions marked with
`do_not_convert`.
"""

from __future__ import annotations

import ast
import functools
import linecache
import os
import sysconfig
import threading
import types
import warnings
import weakref

import numpy as np

from aotkit.autograph import _runtime
from aotkit.autograph._transform import PREFIX, Converter, _located

DO_NOT_CONVERT = "__aotkit_do_not_convert__"

_lock = threading.RLock()
_NOT = object()  # cached "runs as written"
# Keyed by (code, file name): code objects compare by value without their file name, and
# the same function in two files (a user.py per temporary folder) must convert twice.
_by_code: dict = {}  # _key(code) -> (code', infos) or _NOT
_by_function: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_converted_codes: dict[int, types.CodeType] = {}  # id -> code of every converted code object
_trees: dict[str, tuple] = {}  # filename -> (lines, module AST)
_sources: dict = {}  # _key(code) -> the rewritten source, for to_source


def _library_prefixes() -> tuple[str, ...]:
    paths = set()
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        p = sysconfig.get_paths().get(key)
        if p:
            paths.add(p)
    import jax

    for mod in (np, jax):
        paths.add(os.path.dirname(mod.__file__))
    paths.add(os.path.dirname(os.path.dirname(__file__)))  # aotkit itself
    out = set()
    for p in paths:
        for q in (p, os.path.realpath(p)):
            out.add(os.path.join(q, ""))
    return tuple(sorted(out))


_LIBRARY = _library_prefixes()


def is_library(filename: str) -> bool:
    return (
        filename.startswith("<")
        or filename.startswith(_LIBRARY)
        or (os.path.realpath(filename).startswith(_LIBRARY))
    )


# --- finding the source ---------------------------------------------------------------------------


def _module_tree(filename: str, module_globals):
    lines = linecache.getlines(filename, module_globals)
    if not lines:
        return None
    cached = _trees.get(filename)
    if cached is not None and cached[0] == lines:
        return cached[1]
    tree = ast.parse("".join(lines), filename)
    _trees[filename] = (lines, tree)
    return tree


def _arg_names(args: ast.arguments) -> list[str]:
    names = [a.arg for a in args.posonlyargs + args.args + args.kwonlyargs]
    names += [a.arg for a in (args.vararg, args.kwarg) if a is not None]
    return names


def _code_args(code: types.CodeType) -> list[str]:
    n = code.co_argcount + code.co_kwonlyargcount
    n += bool(code.co_flags & 0x04) + bool(code.co_flags & 0x08)  # *args, **kwargs
    return list(code.co_varnames[:n])


def _find_node(tree: ast.Module, code: types.CodeType):
    """The def or lambda node whose code object is `code`, or None."""
    line = code.co_firstlineno
    want_args = _code_args(code)
    matches = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and code.co_name == node.name:
            first = min([d.lineno for d in node.decorator_list] + [node.lineno])
            if first == line:
                matches.append(node)
        elif isinstance(node, ast.Lambda) and code.co_name == "<lambda>" and node.lineno == line:
            matches.append(node)
    matches = [m for m in matches if _arg_names(m.args) == want_args]
    if len(matches) > 1:
        # Several lambdas on one line: the code's own column positions pick the right one.
        cols = {c for _, _, c, _ in code.co_positions() if c is not None}
        matches = [
            m
            for m in matches
            if any(m.body.col_offset <= c < (m.body.end_col_offset or 1 << 30) for c in cols)
        ]
    return matches[0] if len(matches) == 1 else None


class _Mangle(ast.NodeTransformer):
    """Class-private names (`self.__x` -> `self._Cls__x`), which the compiler mangles only
    inside a class body: the rewritten method is compiled outside its class."""

    def __init__(self, cls: str):
        self.prefix = "_" + cls.lstrip("_")

    def _m(self, name):
        if name and name.startswith("__") and not name.endswith("__") and "." not in name:
            return self.prefix + name
        return name

    def visit_Name(self, node):
        node.id = self._m(node.id)
        return node

    def visit_Attribute(self, node):
        self.generic_visit(node)
        node.attr = self._m(node.attr)
        return node

    def visit_arg(self, node):
        node.arg = self._m(node.arg)
        return node

    def visit_keyword(self, node):
        self.generic_visit(node)
        node.arg = self._m(node.arg)
        return node

    def visit_FunctionDef(self, node):
        self.generic_visit(node)
        node.name = self._m(node.name)
        return node


def _class_of(fn) -> str | None:
    parts = fn.__qualname__.split(".")
    if len(parts) >= 2 and parts[-2] != "<locals>":
        return parts[-2]
    return None


# --- converting -----------------------------------------------------------------------------------


def _why_not(fn: types.FunctionType) -> str | None:
    """Why `fn` runs as written (None: convert it). Cheap checks only."""
    if getattr(fn, DO_NOT_CONVERT, False):
        return "marked do_not_convert"
    code = fn.__code__
    if id(code) in _converted_codes:
        return "already converted"
    if code.co_flags & (0x20 | 0x80 | 0x100 | 0x200):  # generator, coroutine, async
        return "a generator or coroutine"
    if is_library(code.co_filename):
        return "library code"
    if "super" in code.co_names or "__class__" in code.co_freevars:
        return "uses super()"
    return None


def _convert_code(fn: types.FunctionType):
    """(code', infos) for `fn.__code__`, or _NOT when it runs as written."""
    code = fn.__code__
    filename = code.co_filename
    try:
        tree = _module_tree(filename, fn.__globals__)
    except (SyntaxError, ValueError, OSError):
        tree = None
    node = _find_node(tree, code) if tree is not None else None
    if node is None:
        return _NOT
    try:
        return _rewrite(fn, node, filename)
    except Exception as e:  # a construct the rewrite does not handle: run as written
        warnings.warn_explicit(
            f"autograph (at {filename}:{code.co_firstlineno}): could not convert "
            f"{fn.__qualname__} ({type(e).__name__}: {e}); it runs as written, with Python "
            "control flow unrolled",
            _runtime.AutographWarning,
            filename,
            code.co_firstlineno,
        )
        return _NOT


def _rewrite(fn, node, filename):
    import copy

    code = fn.__code__
    node = copy.deepcopy(node)
    cls = _class_of(fn)
    if cls is not None:
        name = getattr(node, "name", None)
        node = _Mangle(cls).visit(node)
        if name is not None:
            node.name = name  # a method keeps its own name; only the names inside it mangle
    if isinstance(node, ast.FunctionDef):
        node.decorator_list = []
    conv = Converter(filename)
    conv.function(node, frozenset(code.co_freevars))
    frees = [n for n in code.co_freevars if n not in (PREFIX, f"{PREFIX}info")]
    if isinstance(node, ast.Lambda):
        inner: ast.stmt = ast.Return(value=node)
        ast.copy_location(inner, node)
    else:
        inner = node
    factory_args = ast.arguments(
        posonlyargs=[],
        args=[ast.arg(arg=n) for n in [PREFIX, f"{PREFIX}info"] + frees],
        kwonlyargs=[],
        kw_defaults=[],
        defaults=[],
    )
    body = [inner]
    if isinstance(node, ast.FunctionDef):
        body.append(ast.Return(value=ast.Name(id=node.name, ctx=ast.Load())))
    factory = ast.FunctionDef(
        name=f"{PREFIX}factory", args=factory_args, body=body, decorator_list=[]
    )
    factory.returns = None
    factory.type_comment = None
    module = ast.Module(body=[factory], type_ignores=[])
    _located(module, node)
    flags = code.co_flags & _FUTURE_FLAGS
    compiled = compile(module, filename, "exec", flags=flags, dont_inherit=True)
    factory_code = next(c for c in compiled.co_consts if isinstance(c, types.CodeType))
    new = next(
        c
        for c in factory_code.co_consts
        if isinstance(c, types.CodeType) and c.co_name == code.co_name
    )
    _mark(new)
    _sources[_key(code)] = ast.unparse(inner)
    return new, conv.infos


def _key(code: types.CodeType) -> tuple:
    return (code, code.co_filename)


def _mark(code: types.CodeType) -> None:
    _converted_codes[id(code)] = code
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            _mark(c)


def _future_flags() -> int:
    import __future__

    out = 0
    for name in __future__.all_feature_names:
        out |= getattr(__future__, name).compiler_flag
    return out


_FUTURE_FLAGS = _future_flags()


def _build(fn: types.FunctionType, new: types.CodeType, infos) -> types.FunctionType:
    cells = dict(zip(fn.__code__.co_freevars, fn.__closure__ or (), strict=True))
    own = {PREFIX: types.CellType(_runtime), f"{PREFIX}info": types.CellType(infos)}
    # The rewritten def binds the function's own name in the scope it is compiled in, so a
    # recursive function (`tower` calling `tower`) reads that name from a cell: what the
    # module's global of that name holds now (a decorated wrapper stays in the way), else
    # the converted function itself.
    itself = types.CellType()
    own.setdefault(fn.__code__.co_name, itself)
    closure = tuple(cells[n] if n in cells else own[n] for n in new.co_freevars)
    out = types.FunctionType(new, fn.__globals__, fn.__name__, fn.__defaults__, closure)
    itself.cell_contents = fn.__globals__.get(fn.__code__.co_name, out)
    out.__kwdefaults__ = fn.__kwdefaults__
    out.__qualname__ = fn.__qualname__
    out.__doc__ = fn.__doc__
    out.__dict__.update(fn.__dict__)
    out.__wrapped__ = fn
    return out


def convert_function(fn: types.FunctionType):
    """The converted version of the Python function `fn`, or None when it runs as written."""
    cached = _by_function.get(fn)
    if cached is not None:
        return None if cached is _NOT else cached
    with _lock:
        if _why_not(fn) is not None:
            result = _NOT
        else:
            key = _key(fn.__code__)
            entry = _by_code.get(key)
            if entry is None:
                entry = _by_code[key] = _convert_code(fn)
            result = _NOT if entry is _NOT else _build(fn, *entry)
        try:
            _by_function[fn] = result
        except TypeError:
            pass
    return None if result is _NOT else result


def converted(f):
    """What a converted function calls in place of `f` (see `_runtime.call`)."""
    t = type(f)
    if t is types.FunctionType:
        c = convert_function(f)
        return f if c is None else c
    if t is types.MethodType:
        func = f.__func__
        if type(func) is types.FunctionType:
            c = convert_function(func)
            if c is not None:
                return types.MethodType(c, f.__self__)
        return f
    if t is functools.partial:
        c = converted(f.func)
        return f if c is f.func else functools.partial(c, *f.args, **f.keywords)
    if isinstance(f, type):  # a class (of some metaclass): instantiating it runs as it is
        _runtime.plain_types.add(t)
        return f
    method = next((k.__dict__["__call__"] for k in t.__mro__ if "__call__" in k.__dict__), None)
    if type(method) is types.FunctionType:  # an instance of a user class with __call__
        c = convert_function(method)
        if c is not None:
            return types.MethodType(c, f)
    else:
        _runtime.plain_types.add(t)  # no Python __call__: every instance runs as it is
    return f


_runtime.install_converter(converted)


def is_converted(fn) -> bool:
    code = getattr(fn, "__code__", None)
    return code is not None and id(code) in _converted_codes


def to_source(fn) -> str | None:
    """The rewritten source of `fn` (None when it runs as written)."""
    target = getattr(fn, "__func__", fn)
    if type(target) is not types.FunctionType or convert_function(target) is None:
        return None
    return _sources.get(_key(target.__code__))
