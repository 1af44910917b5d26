"""Static analysis for autograph: which names a block reads and writes, how it writes them,
what stops it from becoming a StableHLO loop or conditional, and which names are live.

Everything here reads the AST of one function and never runs user code. Names are only
those of the function's own scope: nested functions, lambdas and comprehensions count as
reading every name they mention (their free variables are read whenever they run), and
their own bindings stay inside them, except `:=` in a comprehension, which binds in the
enclosing function as Python does.
"""

from __future__ import annotations

import ast
import copy
from collections.abc import Iterable

_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)

# The attribute of a rewritten expression that holds the expression as the user wrote it
# (`_transform`'s notes of views wrap `x[0]` in a runtime call).
SOURCE = "ag_source"


def source_text(node: ast.AST) -> str:
    """`node`'s text as the user wrote it: each rewritten expression in it (see `SOURCE`)
    shown as its original, for messages."""

    class Restore(ast.NodeTransformer):
        def visit(self, n):
            original = getattr(n, SOURCE, None)
            return self.visit(original) if original is not None else self.generic_visit(n)

    return ast.unparse(Restore().visit(copy.deepcopy(node)))


# Methods that change their receiver in place. On a traced array (`x.fill(0)`) they are
# fine; on a list or dict they are side effects a traced loop or branch cannot repeat.
MUTATING_METHODS = frozenset(
    {
        "append",
        "extend",
        "insert",
        "pop",
        "remove",
        "clear",
        "update",
        "setdefault",
        "popitem",
        "add",
        "discard",
        "sort",
        "reverse",
        "fill",
        "put",
        "resize",
        "itemset",
        "appendleft",
        "extendleft",
        "popleft",
        "rotate",
        "__setitem__",
        "__delitem__",
    }
)

# Calls that look at the caller's variables by name: every variable is live around them.
_INTROSPECTION = frozenset({"locals", "vars", "eval", "exec", "dir"})


def subscript_root(node: ast.expr) -> ast.expr:
    """`x` for `x[i]`, `x[i][j]` and `x[i].T[0]`-free chains; the node itself otherwise."""
    while isinstance(node, ast.Subscript):
        node = node.value
    return node


class Facts(ast.NodeVisitor):
    """What a list of statements does to the names of the enclosing function.

    `stores`: names bound (assignment, augmented assignment, for targets, `:=`, def,
    class, import, with/except `as`, del). `loads`: names read. `inplace`: names updated
    in place (`x[i] = v`, `x[i] += v`, `x += v`). `subscript_bases`: names whose items are assigned.
    `mutating_calls`: names whose mutating methods are called (`rows.append`).
    `captured`: names read by nested functions and lambdas (read whenever those run).
    `problems`: (line, reason) of constructs no traced loop or branch can express.
    """

    def __init__(self):
        self.stores: dict[str, None] = {}  # dicts as ordered sets
        self.loads: dict[str, None] = {}
        self.inplace: dict[str, None] = {}
        self.subscript_bases: dict[str, None] = {}
        self.mutating_calls: dict[str, str] = {}  # name -> method
        self.captured: dict[str, None] = {}
        self.declared: dict[str, None] = {}  # global and nonlocal names
        self.problems: list[tuple[int, str]] = []
        self.has_return = False
        self.has_yield = False
        self.has_raise = False
        self.has_introspection = False
        self.nonlocal_in_nested = False
        self._fn = 0  # depth inside nested functions, lambdas and classes
        self._own: list[frozenset] = []  # parameters of the nested functions we are in
        self._comp = 0  # depth inside comprehensions

    @classmethod
    def of(cls, stmts: Iterable[ast.AST]) -> Facts:
        facts = cls()
        for s in stmts:
            facts.visit(s)
        return facts

    @property
    def _here(self) -> bool:
        return self._fn == 0

    def _store(self, name: str) -> None:
        if self._fn == 0 and self._comp == 0:
            self.stores.setdefault(name)

    def _problem(self, line: int, reason: str) -> None:
        if self._here:
            self.problems.append((line, reason))

    # --- names ---

    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, ast.Load):
            self.loads.setdefault(node.id)
            if self._fn and not any(node.id in own for own in self._own):
                self.captured.setdefault(node.id)
        else:
            self._store(node.id)

    def visit_NamedExpr(self, node: ast.NamedExpr) -> None:
        self.visit(node.value)
        if self._here:  # `:=` binds in the function, even from inside a comprehension
            self.stores.setdefault(node.target.id)

    def visit_MatchAs(self, node) -> None:
        if node.name:
            self._store(node.name)
        self.generic_visit(node)

    def visit_MatchStar(self, node) -> None:
        if node.name:
            self._store(node.name)

    def visit_MatchMapping(self, node) -> None:
        if node.rest:
            self._store(node.rest)
        self.generic_visit(node)

    # --- targets ---

    def target(self, target: ast.expr, line: int, *, augmented: bool = False) -> None:
        if isinstance(target, ast.Name):
            if augmented:
                self.loads.setdefault(target.id)
                if self._here:
                    self.inplace.setdefault(target.id)
            self._store(target.id)
        elif isinstance(target, ast.Tuple | ast.List):
            for elt in target.elts:
                self.target(elt, line)
        elif isinstance(target, ast.Starred):
            self.target(target.value, line)
        elif isinstance(target, ast.Subscript):
            root = subscript_root(target)
            node = target
            while isinstance(node, ast.Subscript):
                self.visit(node.slice)
                node = node.value
            if isinstance(root, ast.Name):
                # Not a store: `x[i] = v` does not make x local to the function (x may be a
                # global or a closure variable), it updates the array x names in place.
                self.loads.setdefault(root.id)
                if self._here:
                    self.inplace.setdefault(root.id)
                    self.subscript_bases.setdefault(root.id)
            else:
                self.visit(root)
                self._problem(
                    line, f"it assigns into {source_text(target)}, an item of a Python object"
                )
        elif isinstance(target, ast.Attribute):
            self.visit(target.value)
            self._problem(line, f"it assigns the attribute {source_text(target)}")

    def visit_Assign(self, node: ast.Assign) -> None:
        self.visit(node.value)
        for t in node.targets:
            self.target(t, node.lineno)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self.visit(node.value)
        self.target(node.target, node.lineno, augmented=True)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None:
            self.visit(node.value)
            self.target(node.target, node.lineno)

    def visit_Delete(self, node: ast.Delete) -> None:
        for t in node.targets:
            if isinstance(t, ast.Name):
                self._store(t.id)
            else:
                self.target(t, node.lineno)

    def visit_For(self, node) -> None:
        self.visit(node.iter)
        self.target(node.target, node.lineno)
        for s in node.body + node.orelse:
            self.visit(s)

    visit_AsyncFor = visit_For

    def visit_With(self, node) -> None:
        for item in node.items:
            self.visit(item.context_expr)
            if item.optional_vars is not None:
                self.target(item.optional_vars, node.lineno)
        for s in node.body:
            self.visit(s)

    visit_AsyncWith = visit_With

    def visit_Import(self, node) -> None:
        for alias in node.names:
            self._store((alias.asname or alias.name).split(".")[0])

    visit_ImportFrom = visit_Import

    def visit_Global(self, node) -> None:
        for name in node.names:
            self.declared.setdefault(name)
        if self._fn:
            self.nonlocal_in_nested = True

    visit_Nonlocal = visit_Global

    # --- control ---

    def visit_Return(self, node: ast.Return) -> None:
        if self._here:
            self.has_return = True
        self.generic_visit(node)

    def visit_Yield(self, node) -> None:
        if self._here:
            self.has_yield = True
        self.generic_visit(node)

    visit_YieldFrom = visit_Await = visit_Yield

    def visit_Raise(self, node: ast.Raise) -> None:
        if self._here:
            self.has_raise = True
        self.generic_visit(node)

    def visit_Try(self, node) -> None:
        self._problem(node.lineno, "it contains a try statement")
        for h in node.handlers:
            if h.name:
                self._store(h.name)
        self.generic_visit(node)

    visit_TryStar = visit_Try

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Name) and func.id in _INTROSPECTION:
            self.has_introspection = True
        if self._here and isinstance(func, ast.Attribute) and func.attr in MUTATING_METHODS:
            receiver = func.value
            if isinstance(receiver, ast.Name):
                self.mutating_calls.setdefault(receiver.id, func.attr)
            elif not _is_module_path(receiver):
                self._problem(
                    node.lineno, f"it calls {source_text(func)}(), which changes a Python object"
                )
        self.generic_visit(node)

    # --- nested scopes ---

    def _nested(self, body: list, args: ast.arguments | None) -> None:
        own: frozenset = frozenset()
        if args is not None:  # defaults are evaluated here, in the enclosing scope
            for d in args.defaults + [d for d in args.kw_defaults if d is not None]:
                self.visit(d)
            own = frozenset(
                a.arg
                for a in args.posonlyargs + args.args + args.kwonlyargs + [args.vararg, args.kwarg]
                if a is not None
            )
        self._fn += 1
        self._own.append(own)
        try:
            for s in body:
                self.visit(s)
        finally:
            self._fn -= 1
            self._own.pop()

    def visit_FunctionDef(self, node) -> None:
        for d in node.decorator_list:
            self.visit(d)
        self._store(node.name)
        self._nested(node.body, node.args)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self._nested([node.body], node.args)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for d in node.decorator_list + node.bases + [k.value for k in node.keywords]:
            self.visit(d)
        self._store(node.name)
        self._nested(node.body, None)

    def _comprehension(self, node) -> None:
        # Comprehensions run at once, in place: their reads are reads here; their loop
        # variables are their own (and `:=` inside binds here, see visit_NamedExpr).
        self._comp += 1
        try:
            for gen in node.generators:
                self.visit(gen.iter)
                self.visit(gen.target)
                for cond in gen.ifs:
                    self.visit(cond)
            for part in ("elt", "key", "value"):
                sub = getattr(node, part, None)
                if sub is not None:
                    self.visit(sub)
        finally:
            self._comp -= 1

    visit_ListComp = visit_SetComp = visit_DictComp = visit_GeneratorExp = _comprehension


def _is_module_path(node: ast.expr) -> bool:
    """`np.random` in `np.random.shuffle(x)`-like receivers: not a data structure."""
    return isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)


def contains(stmts: Iterable[ast.AST], kinds: tuple, *, stop=_SCOPES) -> bool:
    """Whether any node of `kinds` occurs in `stmts` outside nested scopes and `stop` nodes."""
    todo = list(stmts)
    while todo:
        node = todo.pop()
        if isinstance(node, kinds):
            return True
        if isinstance(node, stop):
            continue
        todo.extend(ast.iter_child_nodes(node))
    return False


def jumps(stmts: Iterable[ast.AST], kinds: tuple) -> bool:
    """Whether `break`/`continue` of the enclosing loop occur (not those of nested loops)."""
    return contains(stmts, kinds, stop=_SCOPES + (ast.For, ast.While, ast.AsyncFor))


def always_returns(stmts: list[ast.stmt]) -> bool:
    """Whether every path through `stmts` ends in `return` or `raise`."""
    if not stmts:
        return False
    last = stmts[-1]
    if isinstance(last, ast.Return | ast.Raise):
        return True
    if isinstance(last, ast.If):
        return always_returns(last.body) and always_returns(last.orelse)
    return False


# --- liveness -------------------------------------------------------------------------------------


def expr_loads(*nodes) -> set[str]:
    out: set[str] = set()
    for node in nodes:
        if node is not None:
            out.update(Facts.of([node]).loads)
    return out


class Liveness:
    """Backward liveness over structured Python: for each `if`/`for`/`while` statement, the
    names live after it (`after[stmt]`) and, for loops, at the loop head (`head[loop]`, live
    at the start of an iteration or at the exit). `break_flags` maps a loop to the flag
    variable its rewritten `break` sets, read at the head. The tables are keyed by the nodes
    themselves, never their ids: a node the rewrite drops frees its id for a node it makes,
    which would then read the dropped node's entry."""

    def __init__(self, break_flags: dict[ast.AST, str] | None = None):
        self.after: dict[ast.AST, frozenset] = {}
        self.head: dict[ast.AST, frozenset] = {}
        self.break_flags = break_flags or {}

    def block(self, stmts: list[ast.stmt], live: set[str], jump=None) -> set[str]:
        for s in reversed(stmts):
            live = self.stmt(s, live, jump)
        return live

    def stmt(self, s: ast.stmt, live: set[str], jump) -> set[str]:
        self.after[s] = frozenset(live)
        if isinstance(s, ast.Return):
            return expr_loads(s.value)
        if isinstance(s, ast.Raise):
            return expr_loads(s.exc, s.cause)
        if isinstance(s, ast.Break):
            return set(jump[0]) if jump else set(live)
        if isinstance(s, ast.Continue):
            return set(jump[1]) if jump else set(live)
        if isinstance(s, ast.If):
            return (
                expr_loads(s.test)
                | self.block(s.body, live, jump)
                | self.block(s.orelse, live, jump)
            )
        if isinstance(s, ast.For | ast.AsyncFor):
            return self._loop(s, live, jump, extra=expr_loads(s.iter), target=s.target)
        if isinstance(s, ast.While):
            return self._loop(s, live, jump, test=expr_loads(s.test))
        if isinstance(s, ast.With | ast.AsyncWith):
            inner = self.block(s.body, live, jump)
            facts = Facts()
            for item in s.items:
                if item.optional_vars is not None:
                    facts.target(item.optional_vars, s.lineno)
            inner = (inner - set(facts.stores)) | set(facts.loads)
            return inner | expr_loads(*(i.context_expr for i in s.items))
        if isinstance(s, ast.Assign | ast.AnnAssign):
            facts = Facts.of([s])
            killed = {
                t.id
                for t in (s.targets if isinstance(s, ast.Assign) else [s.target])
                for t in _plain_names(t)
            }
            return (live - killed) | set(facts.loads)
        if isinstance(s, ast.Delete):
            facts = Facts.of([s])
            killed = {t.id for t in s.targets if isinstance(t, ast.Name)}
            return (live - killed) | set(facts.loads)
        if isinstance(s, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            return (live - {s.name}) | set(Facts.of([s]).loads)
        if isinstance(s, ast.Import | ast.ImportFrom):
            return live - set(Facts.of([s]).stores)
        if isinstance(s, ast.Try | ast.Match) or type(s).__name__ == "TryStar":
            # Any statement may raise into a handler: keep everything it mentions live.
            facts = Facts.of([s])
            for body in _blocks(s):
                self.block(body, live, jump)
            return live | set(facts.loads) | set(facts.stores)
        return live | set(Facts.of([s]).loads)

    def _loop(self, s, live: set[str], jump, *, extra=frozenset(), test=frozenset(), target=None):
        exit_live = self.block(s.orelse, live, jump)
        flag = self.break_flags.get(s)
        head = set(exit_live) | set(test)
        if flag:
            head.add(flag)
        killed: set[str] = set()
        target_loads: set[str] = set()
        if target is not None:
            facts = Facts()
            facts.target(target, s.lineno)
            killed = {n.id for n in _plain_names(target)}
            target_loads = set(facts.loads) - killed
        while True:
            body_in = self.block(s.body, head, (live, head))
            body_in = (body_in - killed) | target_loads
            new_head = head | body_in
            if new_head == head:
                break
            head = new_head
        self.head[s] = frozenset(head)
        return head | set(extra)


def _plain_names(target: ast.expr):
    """Names a target rebinds outright (not `x[i]`, which updates x and reads it)."""
    if isinstance(target, ast.Name):
        yield target
    elif isinstance(target, ast.Tuple | ast.List):
        for elt in target.elts:
            yield from _plain_names(elt)
    elif isinstance(target, ast.Starred):
        yield from _plain_names(target.value)


def _blocks(s: ast.stmt):
    for field in ("body", "orelse", "finalbody"):
        body = getattr(s, field, None)
        if isinstance(body, list):
            yield body
    for h in getattr(s, "handlers", []):
        yield h.body
    for c in getattr(s, "cases", []):
        yield c.body
