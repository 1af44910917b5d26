"""Source-to-source rewriting for autograph: Python loops, branches and boolean operators
become calls into `aotkit.autograph._runtime`, which decides when the trace runs whether
each one stays Python or becomes a StableHLO loop or conditional.

The rewrite keeps Python's meaning whatever the runtime decides. A block (a loop body, a
branch) becomes a nested function whose parameters are the function's variables it
mentions and which returns the ones it assigns; the statement becomes

    a, b = ag__.for_stmt(ITER, ag__for_body_3, ag__info[3])

so that run as Python (a condition or trip count known when tracing) the block runs
exactly as written, and traced it becomes one `aotkit.fori_loop`/`while_loop`/`cond`
over the variables that are live afterwards. `break` and `continue` become flags
(`ag__brk_3`, `ag__cont_3`) that guard the statements after them; a branch that always
returns absorbs the statements after its `if` so both branches return. Every generated
node carries the location of the statement it replaces, so tracebacks and the `file:line`
of each traced op still name the user's lines.

`BlockInfo` holds what the runtime needs to know about each block; the rewritten code
refers to it as `ag__info[N]`.
"""

from __future__ import annotations

import ast
import dataclasses

from aotkit.autograph._analysis import (
    SOURCE,
    Facts,
    Liveness,
    always_returns,
    contains,
    source_text,
)

_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
_LOOPS = (ast.For, ast.While, ast.AsyncFor)
# Prefix of every generated name; no user code (and no class-private mangling) uses it.
PREFIX = "ag__"


@dataclasses.dataclass(frozen=True)
class BlockInfo:
    """What the runtime needs about one converted statement.

    kind: "for", "while", "if" or "ifreturn" (an if whose branches both return).
    params: the block function's parameters (after the loop item, for loops).
    test_params: the parameters of a while loop's condition function.
    writes: the names the block function returns, in order.
    live: the names of `writes` the rest of the function (or the next iteration) reads;
      the loop-carried variables, or the outputs of a traced branch.
    inplace: names the block updates in place (`x[i] = v`, `x += v`).
    subscript_bases / mutating_calls: names whose items are assigned / whose mutating
      methods are called; side effects unless they hold traced arrays.
    target: the loop variable, when it is a plain name.
    brk: the flag a rewritten `break` sets, or None.
    reasons: why the block cannot become StableHLO control flow (it then stays Python).
    shared: (name, why) for the function's names whose array another binding may also hold
      (see `_shared_names`).
    """

    kind: str
    filename: str
    lineno: int
    params: tuple[str, ...] = ()
    test_params: tuple[str, ...] = ()
    writes: tuple[str, ...] = ()
    live: tuple[str, ...] = ()
    inplace: frozenset = frozenset()
    subscript_bases: frozenset = frozenset()
    mutating_calls: tuple[tuple[str, str], ...] = ()
    target: str | None = None
    brk: str | None = None
    reasons: tuple[str, ...] = ()
    shared: tuple[tuple[str, str], ...] = ()

    @property
    def site(self) -> str:
        return f"{self.filename}:{self.lineno}"


# --- small AST builders ---------------------------------------------------------------------------


def _name(id_: str, store: bool = False) -> ast.Name:
    return ast.Name(id=id_, ctx=ast.Store() if store else ast.Load())


def _ag(attr: str) -> ast.Attribute:
    return ast.Attribute(value=_name(PREFIX), attr=attr, ctx=ast.Load())


def _call(func: ast.expr, *args: ast.expr) -> ast.Call:
    return ast.Call(func=func, args=list(args), keywords=[])


def _lambda(body: ast.expr) -> ast.Lambda:
    args = ast.arguments(posonlyargs=[], args=[], kwonlyargs=[], kw_defaults=[], defaults=[])
    return ast.Lambda(args=args, body=body)


def _const(value) -> ast.Constant:
    return ast.Constant(value=value)


def _names_tuple(names, store: bool = False) -> ast.Tuple:
    return ast.Tuple(
        elts=[_name(n, store) for n in names], ctx=ast.Store() if store else ast.Load()
    )


def _header(at: ast.AST) -> tuple[int, int, int, int]:
    """A location on `at`'s first line only: its header (`for i in range(n):`, `if c:`).

    Generated nodes must not span lines: Python 3.11 places a method call whose attribute
    spans several lines on the attribute's last line, and tracebacks show the span.
    """
    line, col = at.lineno, at.col_offset
    end = getattr(at, "end_col_offset", None)
    if getattr(at, "end_lineno", line) != line or end is None:
        head = getattr(at, "iter", None) or getattr(at, "test", None)
        end = head.end_col_offset if head is not None and head.end_lineno == line else col + 1
    return line, col, line, max(end, col + 1)


def _located(node: ast.AST, at: ast.AST) -> ast.AST:
    """`node` and every node inside it without a location get `at`'s header location."""
    where = None
    for n in ast.walk(node):
        if "lineno" in n._attributes and getattr(n, "lineno", None) is None:
            if where is None:
                where = _header(at)
            n.lineno, n.col_offset, n.end_lineno, n.end_col_offset = where
    return node


def _undefined_guards(names, at) -> list[ast.stmt]:
    """`if x is ag__.UNDEFINED: del x`: a variable without a value stays unbound, so reading
    it raises UnboundLocalError as it would have in the original code."""
    out = []
    for n in names:
        test = ast.Compare(left=_name(n), ops=[ast.Is()], comparators=[_ag("UNDEFINED")])
        out.append(
            _located(
                ast.If(
                    test=test, body=[ast.Delete(targets=[ast.Name(id=n, ctx=ast.Del())])], orelse=[]
                ),
                at,
            )
        )
    return out


def _function(name: str, params, body: list[ast.stmt], at: ast.AST) -> ast.FunctionDef:
    args = ast.arguments(
        posonlyargs=[],
        args=[ast.arg(arg=p) for p in params],
        kwonlyargs=[],
        kw_defaults=[],
        defaults=[],
    )
    fn = ast.FunctionDef(name=name, args=args, body=body or [ast.Pass()], decorator_list=[])
    fn.returns = None
    fn.type_comment = None
    return _located(fn, at)


def _ordered(*groups) -> list[str]:
    seen: dict[str, None] = {}
    for g in groups:
        for n in g:
            seen.setdefault(n)
    return list(seen)


# --- expressions ----------------------------------------------------------------------------------


class _Expressions(ast.NodeTransformer):
    """`a and b`, `a or b`, `not a`, `x if c else y`, chained comparisons and calls.

    Operands evaluated lazily by Python stay lazy (they move into lambdas), unless they
    assign with `:=`, which a lambda would scope differently: those stay as written.
    """

    def visit_FunctionDef(self, node):
        return node

    visit_AsyncFunctionDef = visit_ClassDef = visit_FunctionDef

    def visit_Call(self, node: ast.Call):
        self.generic_visit(node)
        func = node.func
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            if func.value.id == PREFIX:
                return node
        node.func = ast.copy_location(_call(_ag("call"), func), func)
        return node

    def visit_IfExp(self, node: ast.IfExp):
        self.generic_visit(node)
        if contains([node.body, node.orelse], (ast.NamedExpr,)):
            return node
        new = _call(_ag("if_exp"), node.test, _lambda(node.body), _lambda(node.orelse))
        return _located(ast.copy_location(new, node), node)

    def visit_BoolOp(self, node: ast.BoolOp):
        self.generic_visit(node)
        if contains(node.values[1:], (ast.NamedExpr,)):
            return node
        fn = "and_" if isinstance(node.op, ast.And) else "or_"
        new = _call(_ag(fn), node.values[0], *(_lambda(v) for v in node.values[1:]))
        return _located(ast.copy_location(new, node), node)

    def visit_UnaryOp(self, node: ast.UnaryOp):
        self.generic_visit(node)
        if isinstance(node.op, ast.Not):
            return _located(ast.copy_location(_call(_ag("not_"), node.operand), node), node)
        return node

    def visit_Compare(self, node: ast.Compare):
        self.generic_visit(node)
        if len(node.ops) == 1 or contains(node.comparators, (ast.NamedExpr,)):
            return node
        pairs = [
            ast.Tuple(elts=[_const(type(op).__name__), _lambda(c)], ctx=ast.Load())
            for op, c in zip(node.ops, node.comparators, strict=True)
        ]
        new = _call(_ag("compare_chain"), node.left, *pairs)
        return _located(ast.copy_location(new, node), node)


def expression(node: ast.AST) -> ast.AST:
    return _Expressions().visit(node)


# --- item assignments: arrays NumPy made that receive traced values -------------------------------


class _ItemAssignments(ast.NodeTransformer):
    """`x[i] = v` (and `x[i] += v`, `np.add.at(x, i, v)`, ...) for a local `x` becomes

        ag__item_N = v
        x = ag__.writable(x, ag__item_N)
        x[i] = ag__item_N

    so that an array NumPy made in the function (`np.empty(...)`, `np.zeros(n)`) becomes a
    traced array when it receives a traced value, where NumPy's own `__setitem__` could
    only refuse. Anything else (a traced array, a list, an untraced value) is the same
    object afterwards, written as before. Python evaluates the value first, then `x` and
    `i`; so does this (an augmented assignment reads `x[i]` after the value). `x += v` for
    a local name `x` takes the same path (NumPy writes into x's array), and a chained
    assignment `c[:2] = c[1:] = v` assigns one target at a time, left to right."""

    def __init__(self, conv: Converter, local_names: frozenset, shared: dict[str, str]):
        self.conv = conv
        self.local_names = local_names
        self.shared = shared  # name -> why another binding sees its array (see _shared_names)

    def _writable(
        self,
        base: str,
        temp: str,
        what: str = "item assignment",
        item: ast.expr | None = None,
        index: ast.expr | None = None,
    ) -> ast.Assign:
        args = [_name(base), _name(temp), ast.Constant(self.shared.get(base)), ast.Constant(what)]
        if item is not None:
            args.append(item)
        call = _call(_ag("writable"), *args)
        if index is not None:
            call.keywords.append(ast.keyword(arg="index", value=index))
        return ast.Assign(targets=[_name(base, True)], value=call)

    def _scope(self, node):
        return node  # nested functions are rewritten on their own

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = visit_Lambda = _scope

    def _rewrite(self, node, target):
        if isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name):
            base, what = target.value.id, "item assignment"
        elif isinstance(node, ast.AugAssign) and isinstance(target, ast.Name):
            # `acc += x`: NumPy writes into acc's array, as `acc[...] += x` would.
            base, what = target.id, "augmented assignment"
        elif isinstance(target, ast.Subscript):
            return self._held_elsewhere(node, target)
        else:
            return node
        if base not in self.local_names:
            return self._held_elsewhere(node, target)
        temp = f"{PREFIX}item_{self.conv.next_id()}"
        keep = ast.Assign(targets=[_name(temp, True)], value=node.value)
        item = index = None
        if isinstance(target, ast.Subscript) and all(
            isinstance(n, _PLAIN_INDEX) for n in ast.walk(target.slice)
        ):
            # (when reading the index again has no side effect)
            if isinstance(node, ast.AugAssign):
                # `rows[0] += v` changes rows[0]'s own array in NumPy (a view, maybe): the
                # item is checked too.
                item = _index_value(target.slice)
            else:
                # `out[i] = 1.0`: a traced index makes the array traced, as a traced value.
                index = _index_value(target.slice)
        writable = self._writable(base, temp, what, item, index)
        node.value = _name(temp)
        return [_located(ast.copy_location(keep, node), node),
                _located(ast.copy_location(writable, node), node), node]  # fmt: skip

    def _held_elsewhere(self, node, target):
        """`T[i] = v` (or `T[i] += v`) where T is no local name (`outs[0][k]`, `self.a[k]`,
        a variable of an enclosing function): `ag__.setitem(T, i, v)`, which refuses at the
        line a traced value written into a NumPy array (what T holds keeps that array)."""
        if not isinstance(target, ast.Subscript):
            return node
        index = _index_value(target.slice)
        if index is None:
            return node
        op = _const(type(node.op).__name__ if isinstance(node, ast.AugAssign) else None)
        held = target.value
        outer = _index_value(held.slice) if isinstance(held, ast.Subscript) else None
        if outer is not None:
            # `x[i][j] = v`: the item i of x (a view, when x is an array) written into.
            text = _const(source_text(held))
            call = _call(_ag("setitem"), held.value, outer, index, node.value, op, text)
        else:
            # `x.T[0] = v`, `x.ravel()[k] = v`: a view NumPy writes through, noted as one so
            # that the write into it is refused (`_runtime.IN_PLACE_CHECKS`) and not lost.
            held = self._views_in(held, held)
            call = _call(_ag("setitem"), held, _const(None), index, node.value, op, _const(None))
        return _located(ast.copy_location(ast.Expr(value=call), node), node)

    def visit_Assign(self, node: ast.Assign):
        node.value = self._views_in(node.value, node)
        if len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            return self._passing(node, node.value)
        if len(node.targets) == 1 and isinstance(node.targets[0], ast.Tuple | ast.List):
            return self._unpacked(node, node.targets[0])
        if len(node.targets) == 1:
            return self._rewrite(node, node.targets[0])
        if not any(
            isinstance(t, ast.Subscript)
            and isinstance(t.value, ast.Name)
            and t.value.id in self.local_names
            for t in node.targets
        ):
            return node
        # `c[:2] = c[1:] = v`: the value once, then each target left to right, as Python
        # assigns them; each item assignment into a local array is rewritten as one alone.
        temp = f"{PREFIX}item_{self.conv.next_id()}"
        out = [_located(ast.copy_location(ast.Assign([_name(temp, True)], node.value), node), node)]
        for target in node.targets:
            one = _located(ast.copy_location(ast.Assign([target], _name(temp)), node), node)
            rewritten = self._rewrite(one, target)
            out.extend(rewritten if isinstance(rewritten, list) else [rewritten])
        return out

    def _unpacked(self, node: ast.Assign, target: ast.Tuple | ast.List):
        """`KE[0], PE[0] = energies(x)`, `a[i], a[j] = a[j], a[i]`: unpacked into
        temporaries first, as Python unpacks before it assigns, then each target assigned
        from left to right, an item assignment rewritten as one alone."""
        leaves: list[tuple[ast.expr, str]] = []

        def mirror(t):
            if isinstance(t, ast.Tuple | ast.List):
                return ast.Tuple(elts=[mirror(e) for e in t.elts], ctx=ast.Store())
            if isinstance(t, ast.Starred):
                return ast.Starred(value=mirror(t.value), ctx=ast.Store())
            temp = f"{PREFIX}item_{self.conv.next_id()}"
            leaves.append((t, temp))
            return _name(temp, True)

        if not any(isinstance(t, ast.Subscript) for t in ast.walk(target)):
            return node
        unpack = ast.Assign(targets=[mirror(target)], value=node.value)
        out = [_located(ast.copy_location(unpack, node), node)]
        for leaf, temp in leaves:
            one = _located(ast.copy_location(ast.Assign([leaf], _name(temp)), node), node)
            rewritten = self._rewrite(one, leaf)
            out.extend(rewritten if isinstance(rewritten, list) else [rewritten])
        return out

    # What makes a view of an array NumPy writes through: `x.T`, `x.reshape(...)`,
    # `np.ravel(x)`, ... (and `x[...]` with a basic index, see `_runtime.part`).
    _VIEW_ATTRS = frozenset({"T", "mT", "real", "imag"})
    _VIEW_METHODS = frozenset(
        {"reshape", "ravel", "transpose", "swapaxes", "squeeze", "view", "diagonal"}
    )
    _VIEW_FUNCTIONS = _VIEW_METHODS | frozenset(
        {"moveaxis", "expand_dims", "atleast_1d", "atleast_2d", "atleast_3d"}
    )

    # NumPy functions that return a list of views of their first argument.
    _SPLITS = frozenset({"split", "array_split", "hsplit", "vsplit", "dsplit"})

    def _noted_view(self, value: ast.expr, node: ast.stmt | ast.expr) -> ast.expr:
        """`x[i]`, `x.T`, `x.reshape(...)`, `np.reshape(x, ...)`, `np.split(x, ...)` for a
        name `x`: the same value, noted at run time as a part of x when NumPy would make it
        a view, so that a write through whatever binds it (`v = x[i]`, `v, w = x[i], x[j]`,
        a list's element, a helper's result) is refused (`_runtime.writable`) rather than
        lost. `node` is the statement (or expression), whose text the refusal quotes;
        `value` itself is returned when it makes no view."""
        said = source_text(node) if isinstance(node, ast.Assign | ast.Return) else None
        if said is None or len(said) > 60:
            said = source_text(value)
        text = _const(said if len(said) <= 60 else None)
        # A view of a view (`V.reshape(2, 3)[0]`, `V[1:].T`): the base is no name, and is
        # evaluated once, by the runtime, which notes the result when the base is a view.
        chained = _const(True)
        if isinstance(value, ast.Subscript) and isinstance(value.ctx, ast.Load):
            index = _index_value(value.slice)
            base = value.value
            if index is None or (isinstance(base, ast.Name) and base.id.startswith(PREFIX)):
                return value
            new = _call(_ag("part"), base, index, text)
            if not isinstance(base, ast.Name):
                new.args.append(chained)
        elif isinstance(value, ast.Attribute) and value.attr in self._VIEW_ATTRS:
            if isinstance(value.value, ast.Name):
                new = _call(_ag("view_of"), value, text, _name(value.value.id))
            else:
                new = _call(_ag("attribute_view"), value.value, _const(value.attr), text)
        elif (
            isinstance(value, ast.Call)
            and isinstance(value.func, ast.Attribute)
            and not isinstance(value.func.value, ast.Name)
            and value.func.attr in self._VIEW_METHODS
        ):
            owner = value.func.value
            method = _call(_ag("method_view"), owner, _const(value.func.attr), text)
            new = ast.Call(func=method, args=value.args, keywords=value.keywords)
        elif isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute):
            # `x.reshape(...)` (x the base) or `np.reshape(x, ...)` (x the first argument):
            # which one is an array is known when it runs.
            owner, attr = value.func.value, value.func.attr
            first = value.args[0] if value.args else None
            bases = []
            if isinstance(owner, ast.Name) and attr in self._VIEW_METHODS:
                bases.append(_name(owner.id))
            if isinstance(first, ast.Name) and attr in self._VIEW_FUNCTIONS | self._SPLITS:
                bases.append(_name(first.id))
            if not bases:
                return value
            how = "views_of" if attr in self._SPLITS else "view_of"
            new = _call(_ag(how), value, text, *bases)
        else:
            return value
        setattr(new, SOURCE, value)
        return _located(ast.copy_location(new, value), value)

    def _views_in(self, value: ast.expr, node: ast.stmt | ast.expr) -> ast.expr:
        """`value` with every view it makes (see `_noted_view`) noted, at any depth:
        `v, w = V[1:3], W[1:3]`, `rows = [x[0], x[1]]`, `return x[1:]`."""
        views = self

        class Noter(ast.NodeTransformer):
            def generic_visit(self, n):
                super().generic_visit(n)
                if isinstance(n, ast.expr) and not isinstance(
                    getattr(n, "ctx", None), ast.Store | ast.Del
                ):
                    return views._noted_view(n, node)
                return n

            def visit_Lambda(self, n):
                return n  # rewritten on its own

            visit_ListComp = visit_SetComp = visit_DictComp = visit_GeneratorExp = visit_Lambda

        return Noter().visit(value)

    def visit_Return(self, node: ast.Return):
        if node.value is not None:
            node.value = self._views_in(node.value, node)
        return node

    def visit_AnnAssign(self, node: ast.AnnAssign):
        if node.value is not None:
            node.value = self._views_in(node.value, node)
        return node

    # NumPy functions that write into their first argument: `np.add.at(x, i, v)`,
    # `np.put(x, i, v)`, `np.copyto(x, v)`, `np.fill_diagonal(x, v)`.
    _WRITERS = frozenset({"at", "put", "copyto", "fill_diagonal"})

    def _passing(self, node: ast.stmt, call: ast.expr):
        """`fill(buf, u)` (or `r = fill(buf, u)`) passing local names: run inside
        `ag__.passing(...)`, which lets the callee write traced values into those NumPy
        arrays (an out-parameter), and rebind each name afterwards to the traced array
        the callee made of it, which NumPy's caller would see written."""
        if not isinstance(call, ast.Call) or (
            isinstance(call.func, ast.Attribute)
            and isinstance(call.func.value, ast.Name)
            and call.func.value.id.startswith(PREFIX)
        ):
            return node
        # Every local name passed, once per time it is passed (an array passed twice is no
        # out-parameter: see `passing`); rebound once each.
        passed = [
            a.id
            for a in call.args + [k.value for k in call.keywords]
            if isinstance(a, ast.Name) and a.id in self.local_names
        ]
        if isinstance(node, ast.Assign):  # `buf = fill(buf)`: buf is the result afterwards
            passed = [n for n in passed if n != node.targets[0].id]
        names = list(dict.fromkeys(passed))
        if not names:
            return node
        reasons = ast.Tuple(elts=[_const(self.shared.get(n)) for n in passed], ctx=ast.Load())
        rebind = ast.Assign(
            targets=[_names_tuple(names, True)],
            value=_call(_ag("current"), _names_tuple(names)),
        )
        passing = _call(_ag("passing"), _names_tuple(passed), reasons)
        block = ast.With(
            items=[ast.withitem(context_expr=passing)],
            body=[node, _located(ast.copy_location(rebind, node), node)],
        )
        return _located(ast.copy_location(block, node), node)

    def visit_Expr(self, node: ast.Expr):
        call = node.value
        if not (
            isinstance(call, ast.Call)
            and isinstance(call.func, ast.Attribute)
            and call.func.attr in self._WRITERS
            and call.args
            and isinstance(call.args[0], ast.Name)
            and call.args[0].id in self.local_names
            and not call.keywords
            and not any(isinstance(a, ast.Starred) for a in call.args)
        ):
            node.value = self._views_in(node.value, node)
            return self._passing(node, node.value)
        base = call.args[0].id
        temp = f"{PREFIX}item_{self.conv.next_id()}"
        keep = ast.Assign(
            targets=[_name(temp, True)], value=ast.Tuple(elts=call.args[1:], ctx=ast.Load())
        )
        writable = self._writable(base, temp)
        call.args = [call.args[0], ast.Starred(value=_name(temp), ctx=ast.Load())]
        return [_located(ast.copy_location(keep, node), node),
                _located(ast.copy_location(writable, node), node), node]  # fmt: skip

    def visit_AugAssign(self, node: ast.AugAssign):
        return self._rewrite(node, node.target)


# What an index may hold to be read twice with no side effect: `i`, `0`, `-1`, `i + 1`, `a:b`.
_PLAIN_INDEX = (
    ast.Constant, ast.Name, ast.Tuple, ast.Slice, ast.UnaryOp, ast.BinOp,
    ast.expr_context, ast.unaryop, ast.operator,
)  # fmt: skip


def _index_value(index: ast.expr) -> ast.expr | None:
    """The index of a subscript as a value to pass (`a:b` -> `slice(a, b, None)`), or None
    for one that has no such form here (a starred item)."""

    def one(e):
        if isinstance(e, ast.Slice):
            parts = [p if p is not None else _const(None) for p in (e.lower, e.upper, e.step)]
            return _call(_ag("slice_"), *parts)
        if isinstance(e, ast.Starred):
            return None
        return e

    if isinstance(index, ast.Tuple):
        items = [one(e) for e in index.elts]
        return None if None in items else ast.Tuple(elts=items, ctx=ast.Load())
    return one(index)


def _item_assignments(conv: Converter, node) -> dict[str, str]:
    facts = Facts.of(node.body)
    a = node.args
    params = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs]
    params += [x.arg for x in (a.vararg, a.kwarg) if x is not None]
    # Only names of this function: assigning a global or a closure's name would make it
    # local here.
    local_names = (frozenset(params) | frozenset(facts.stores)) - frozenset(facts.declared)
    shared = _shared_names(conv.filename, node, params)
    # The function's own statements (visiting `node` itself would stop at the def).
    _ItemAssignments(conv, local_names, shared).generic_visit(node)
    return shared


def _shared_names(filename: str, node, params: list[str]) -> dict[str, str]:
    """The names of `node` whose array another binding may also hold, and why.

    Writing a traced value into a NumPy array gives the writing name a new, traced array;
    NumPy would change the one array every binding shares. So `writable` refuses the write
    for a parameter (the caller holds the array) and for a name another one aliases
    (`z = y`, `rows = [y]`), rather than return what NumPy would not.
    """
    shared = {p: "a parameter: the caller's binding holds the same array" for p in params}

    class Aliases(ast.NodeVisitor):
        def visit_FunctionDef(self, n):
            pass  # nested functions are rewritten on their own

        visit_AsyncFunctionDef = visit_ClassDef = visit_Lambda = visit_FunctionDef

        def visit_Assign(self, n: ast.Assign):
            values = [n.value]
            if isinstance(n.value, ast.List | ast.Tuple | ast.Set):
                values = n.value.elts
            elif isinstance(n.value, ast.Dict):
                values = n.value.values
            sources = [v.id for v in values if isinstance(v, ast.Name)]
            targets = [t.id for t in n.targets if isinstance(t, ast.Name)]
            # `a, b = y, y`: names inside a tuple target are bound to the sources too.
            unpacked = [
                e.id
                for t in n.targets
                if isinstance(t, ast.Tuple | ast.List)
                for e in t.elts
                if isinstance(e, ast.Name)
            ]
            site = f"{filename}:{n.lineno}"
            if sources and (targets or isinstance(n.value, ast.List | ast.Set | ast.Dict)):
                for name in sources:
                    shared.setdefault(name, f"also bound by the assignment at {site}")
                if isinstance(n.value, ast.Name):
                    for name in targets:
                        shared.setdefault(name, f"also bound by the assignment at {site}")
            if sources and unpacked:
                for name in sources + unpacked:
                    shared.setdefault(name, f"also bound by the assignment at {site}")
            if len(targets) > 1:  # `a = b = np.zeros(3)`: one array, two names
                for name in targets:
                    shared.setdefault(name, f"bound with another name by the assignment at {site}")
            self.generic_visit(n)

    for stmt in node.body:
        Aliases().visit(stmt)
    return shared


# --- preparing a function: returns and jumps ------------------------------------------------------


def _normalize_returns(stmts: list[ast.stmt]) -> list[ast.stmt]:
    """Moves the statements after an `if` whose one branch always returns into its other
    branch, so that both return (`if c: return a` + `return b` -> `if c: return a else:
    return b`) and the `if` can become one conditional over the returned values."""
    out: list[ast.stmt] = []
    for k, s in enumerate(stmts):
        for field in ("body", "orelse", "finalbody"):
            if isinstance(getattr(s, field, None), list) and not isinstance(s, _SCOPES):
                setattr(s, field, _normalize_returns(getattr(s, field)))
        for h in getattr(s, "handlers", []):
            h.body = _normalize_returns(h.body)
        out.append(s)
        if isinstance(s, ast.If) and k + 1 < len(stmts):
            t, f = always_returns(s.body), always_returns(s.orelse)
            if t != f:
                rest = stmts[k + 1 :]
                if t:
                    s.orelse = _normalize_returns(s.orelse + rest)
                else:
                    s.body = _normalize_returns(s.body + rest)
                return out
    return out


def _close_tail(stmts: list[ast.stmt]) -> None:
    """At the end of a function, falling off a branch returns None: say so, so an `if`
    whose other branch returns can still become one conditional."""
    if stmts and isinstance(stmts[-1], ast.If):
        last = stmts[-1]
        _close_tail(last.body)
        _close_tail(last.orelse)
        t, f = always_returns(last.body), always_returns(last.orelse)
        if t != f:
            branch = last.orelse if t else last.body
            branch.append(_located(ast.Return(value=_const(None)), branch[-1] if branch else last))


def _jumps_here(stmts) -> tuple[bool, bool]:
    """(break, continue) of the loop owning `stmts`, not of loops nested in them."""
    brk = cont = False
    todo = list(stmts)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Break):
            brk = True
        elif isinstance(node, ast.Continue):
            cont = True
        elif isinstance(node, _SCOPES):
            continue
        elif isinstance(node, _LOOPS):
            todo.extend(node.orelse)  # the else clause belongs to the enclosing loop
        else:
            todo.extend(ast.iter_child_nodes(node))
    return brk, cont


def _returns_to_breaks(stmts: list[ast.stmt], flag: str, slot: str) -> list[ast.stmt]:
    """Each `return v` in `stmts` (outside nested functions) -> `flag = True; slot = v;
    break`. Loops nested in `stmts` have no returns left (they were lifted first)."""
    out: list[ast.stmt] = []
    for s in stmts:
        if isinstance(s, ast.Return):
            value = s.value if s.value is not None else _const(None)
            out += [
                _located(ast.Assign(targets=[_name(flag, True)], value=_const(True)), s),
                _located(ast.Assign(targets=[_name(slot, True)], value=value), s),
                _located(ast.Break(), s),
            ]
            continue
        if not isinstance(s, _SCOPES):
            _map_bodies(s, lambda body: _returns_to_breaks(body, flag, slot))
        out.append(s)
    return out


def _map_bodies(s: ast.stmt, fn) -> None:
    """Replaces each statement list nested in `s` (its body, orelse and finalbody, and the
    bodies of its except handlers and match cases) by `fn(that list)`."""
    for field in ("body", "orelse", "finalbody"):
        if isinstance(getattr(s, field, None), list):
            setattr(s, field, fn(getattr(s, field)))
    for h in getattr(s, "handlers", []):
        h.body = fn(h.body)
    for c in getattr(s, "cases", []):
        c.body = fn(c.body)


def _is_call_of(node, name: str, max_args: int) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == name
        and not node.keywords
        and 1 <= len(node.args) <= max_args
        and not any(isinstance(a, ast.Starred) for a in node.args)
    )


def _range_call(node, at):
    """`range(...)` -> `ag__.range_(range, ...)`, which allows traced bounds; else None."""
    if not _is_call_of(node, "range", 3):
        return None
    args = [expression(a) for a in node.args]
    return _located(ast.copy_location(_call(_ag("range_"), _name("range"), *args), node), at)


def _jump_in_unsupported_place(stmts) -> bool:
    """Whether a `break`/`continue` of the loop owning `stmts` sits anywhere but under
    `if` and `with` statements, the only places the flag rewrite handles."""
    for s in stmts:
        if isinstance(s, ast.If):
            if _jump_in_unsupported_place(s.body) or _jump_in_unsupported_place(s.orelse):
                return True
        elif isinstance(s, ast.With):
            if _jump_in_unsupported_place(s.body):
                return True
        elif isinstance(s, _LOOPS):
            if _jumps_here(s.orelse) != (False, False):
                return True
        elif not isinstance(s, (ast.Break, ast.Continue, *_SCOPES)):
            if _jumps_here([s]) != (False, False):
                return True
    return False


class _Function:
    """Rewrites one function body (and, through `Converter`, the functions nested in it)."""

    def __init__(self, conv: Converter, node, visible_outside: frozenset, shared: dict):
        self.conv = conv
        self.node = node
        self.shared = shared
        facts = Facts.of(node.body)
        a = node.args
        params = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs]
        params += [x.arg for x in (a.vararg, a.kwarg) if x is not None]
        self.declared = frozenset(facts.declared)
        self.locals = frozenset(params) | (frozenset(facts.stores) - self.declared)
        self.visible = (self.locals | visible_outside) - self.declared
        # Read later by nested functions, or by name through locals()/eval: always live.
        self.always_live = (
            self.visible if facts.has_introspection else frozenset(facts.captured) & self.locals
        )
        self.nonlocal_nested = facts.nonlocal_in_nested
        # Keyed by the loop nodes themselves (Liveness says why, not by id).
        self.break_flags: dict[ast.AST, str] = {}
        self.cont_flags: dict[ast.AST, str] = {}
        self.reasons: dict[ast.AST, tuple[str, ...]] = {}

    # --- step 1: returns out of loops, loops and their jumps ---

    def lift_returns(self, stmts: list[ast.stmt]) -> list[ast.stmt]:
        """`return v` inside a loop -> `ret = True; retval = v; break`, and after the loop
        `if ret: return retval`: the loop can then carry the return as state (inner loops
        first, so their `if ret: return ...` lifts through the enclosing loops)."""
        out = []
        for s in stmts:
            if isinstance(s, _SCOPES):
                out.append(s)
                continue
            _map_bodies(s, self.lift_returns)
            if isinstance(s, ast.For | ast.While) and Facts.of(s.body).has_return:
                n = self.conv.next_id()
                flag, slot = f"{PREFIX}ret_{n}", f"{PREFIX}retval_{n}"
                self.new_local(flag)
                self.new_local(slot)
                s.body = _returns_to_breaks(s.body, flag, slot)
                init = ast.Assign(targets=[_name(flag, True)], value=_const(False))
                after = ast.If(test=_name(flag), body=[ast.Return(value=_name(slot))], orelse=[])
                out += [_located(init, s), s, _located(after, s)]
            else:
                out.append(s)
        return out

    def prepare(self, stmts: list[ast.stmt]) -> list[ast.stmt]:
        out = []
        for s in stmts:
            if isinstance(s, _SCOPES):
                out.append(s)
                continue
            _map_bodies(s, self.prepare)
            if isinstance(s, ast.For | ast.While):
                out.extend(self._prepare_loop(s))
            else:
                out.append(s)
        return out

    def new_local(self, name: str) -> None:
        self.locals |= {name}
        self.visible |= {name}

    def _loop_reasons(self, s) -> tuple[str, ...]:
        parts = list(s.body) + ([s.test] if isinstance(s, ast.While) else [])
        facts = Facts.of(parts)
        reasons = [r for _, r in facts.problems]
        for n in facts.stores:
            if n in self.declared:
                reasons.append(f"it assigns the global or nonlocal variable {n!r}")
        target = Facts()
        if isinstance(s, ast.For):
            target.target(s.target, s.lineno)
        writes = set(facts.stores) | set(facts.subscript_bases) | set(target.stores)
        reasons += self._closure_reasons(facts, writes)
        if self.nonlocal_nested:
            reasons.append("a nested function assigns variables of this function (nonlocal)")
        if isinstance(s, ast.While) and contains([s.test], (ast.NamedExpr,)):
            reasons.append("its condition assigns a variable (:=)")
        if _jump_in_unsupported_place(s.body):
            reasons.append(
                "it breaks or continues from inside a try, match or a nested loop's else clause"
            )
        return tuple(dict.fromkeys(reasons))

    def _prepare_loop(self, s) -> list[ast.stmt]:
        reasons = self._loop_reasons(s)
        self.reasons[s] = reasons
        if reasons:
            return [s]
        n = self.conv.next_id()
        brk, cont = _jumps_here(s.body)
        before: list[ast.stmt] = []
        after: list[ast.stmt] = list(s.orelse)
        s.orelse = []
        if brk:
            flag = f"{PREFIX}brk_{n}"
            self.break_flags[s] = flag
            self.new_local(flag)
            before.append(_located(ast.Assign(targets=[_name(flag, True)], value=_const(False)), s))
            if after:
                test = ast.UnaryOp(op=ast.Not(), operand=_name(flag))
                after = [_located(ast.If(test=test, body=after, orelse=[]), after[0])]
        flags = []
        if brk:
            flags.append(self.break_flags[s])
        if cont:
            flag = f"{PREFIX}cont_{n}"
            self.cont_flags[s] = flag
            self.new_local(flag)
            flags.append(flag)
            reset = ast.Assign(targets=[_name(flag, True)], value=_const(False))
            s.body = [_located(reset, s.body[0])] + s.body
        if brk or cont:
            s.body = self._rewrite_jumps(
                s.body, self.break_flags.get(s), self.cont_flags.get(s), flags
            )
        return before + [s] + after

    def _rewrite_jumps(self, stmts, brk, cont, flags) -> list[ast.stmt]:
        """`break` -> `brk = True`, `continue` -> `cont = True`, and the statements after a
        statement that may jump run under `if not (brk or cont)`."""
        out: list[ast.stmt] = []
        for k, s in enumerate(stmts):
            if isinstance(s, ast.Break | ast.Continue):
                flag = brk if isinstance(s, ast.Break) else cont
                out.append(_located(ast.Assign(targets=[_name(flag, True)], value=_const(True)), s))
                return out
            jumps = False
            if isinstance(s, ast.If | ast.With) and _jumps_here([s]) != (False, False):
                s.body = self._rewrite_jumps(s.body, brk, cont, flags)
                if isinstance(s, ast.If):
                    s.orelse = self._rewrite_jumps(s.orelse, brk, cont, flags)
                jumps = True
            out.append(s)
            rest = stmts[k + 1 :]
            if jumps and rest:
                test: ast.expr = (
                    _name(flags[0])
                    if len(flags) == 1
                    else ast.BoolOp(op=ast.Or(), values=[_name(f) for f in flags])
                )
                guard = ast.If(
                    test=ast.UnaryOp(op=ast.Not(), operand=test),
                    body=self._rewrite_jumps(rest, brk, cont, flags),
                    orelse=[],
                )
                out.append(_located(guard, rest[0]))
                return out
        return out

    # --- step 2: the rewrite ---

    def run(self) -> None:
        outer = [n for n in Facts.of(self.node.body).loads if n in self.visible - self.locals]
        body = self.lift_returns(self.node.body)
        body = _normalize_returns(body)
        _close_tail(body)
        body = self.prepare(body)
        self.live = Liveness(self.break_flags)
        self.live.block(body, set())
        self.node.body = self.block(body)
        if outer and self.node.body:
            # Variables of enclosing functions reach the blocks through this function's
            # frame (ag__ reads them by name): mention them so they stay its free variables.
            keep = ast.If(
                test=_ag("NEVER"),
                body=[ast.Expr(value=_names_tuple(outer))],
                orelse=[],
            )
            self.node.body.insert(0, _located(keep, self.node.body[0]))

    def block(self, stmts: list[ast.stmt]) -> list[ast.stmt]:
        out: list[ast.stmt] = []
        for s in stmts:
            out.extend(self.stmt(s))
        return out

    def stmt(self, s: ast.stmt) -> list[ast.stmt]:
        if isinstance(s, ast.For):
            return self.for_(s)
        if isinstance(s, ast.While):
            return self.while_(s)
        if isinstance(s, ast.If):
            return self.if_(s)
        if isinstance(s, ast.FunctionDef):
            s.decorator_list = [expression(d) for d in s.decorator_list]
            s.args = expression(s.args)
            self.conv.function(s, self.visible)
            return [s]
        if isinstance(s, ast.AsyncFunctionDef | ast.ClassDef):
            return [s]
        if isinstance(s, ast.With | ast.AsyncWith | ast.Try | ast.AsyncFor | ast.Match) or (
            type(s).__name__ == "TryStar"
        ):
            _map_bodies(s, self.block)
            for h in getattr(s, "handlers", []):
                if h.type is not None:
                    h.type = expression(h.type)
            for c in getattr(s, "cases", []):
                if c.guard is not None:
                    c.guard = expression(c.guard)
            for item in getattr(s, "items", []):
                item.context_expr = expression(item.context_expr)
            if isinstance(s, ast.AsyncFor):
                s.iter = expression(s.iter)
            if isinstance(s, ast.Match):
                s.subject = expression(s.subject)
            return [s]
        return [expression(s)]

    def _info(self, **fields) -> tuple[int, BlockInfo]:
        shared = tuple(sorted(self.shared.items()))
        return self.conv.register(BlockInfo(filename=self.conv.filename, shared=shared, **fields))

    def _effects(self, facts: Facts, writes: list[str], live_after) -> dict:
        """The fields of a converted block's info that its facts decide: which of its
        writes are live after it (or always live), its in-place writes, the bases it
        subscripts and the mutating calls it makes."""
        return dict(
            live=tuple(n for n in writes if n in live_after or n in self.always_live),
            inplace=frozenset(facts.inplace),
            subscript_bases=frozenset(facts.subscript_bases),
            mutating_calls=tuple(facts.mutating_calls.items()),
        )

    def _ref(self, index: int) -> ast.expr:
        return ast.Subscript(value=_name(f"{PREFIX}info"), slice=_const(index), ctx=ast.Load())

    def _state(self, facts: Facts, own_flag=None):
        # `x[i] = v` rebinds x to the updated array when x is a variable of this function.
        writes = _ordered(facts.stores, facts.subscript_bases)
        writes = [n for n in writes if n in self.locals and n != own_flag]
        # Names closures in the block read stay closures over this function's variables
        # (they must see later assignments); the others are parameters.
        reads = [n for n in facts.loads if n in self.visible and n not in facts.captured]
        return writes, reads, _ordered(writes, reads)

    def _closure_reasons(self, facts: Facts, writes) -> list[str]:
        return [
            f"a function defined in it reads {n!r}, which it assigns (a closure sees later "
            "assignments)"
            for n in facts.captured
            if n in writes
        ]

    def _assign_back(self, writes, value: ast.expr, at) -> list[ast.stmt]:
        if not writes:
            return [_located(ast.Expr(value=value), at)]
        assign = ast.Assign(targets=[_names_tuple(writes, store=True)], value=value)
        return [_located(assign, at)] + _undefined_guards(writes, at)

    def _returned(self, writes, at) -> ast.stmt:
        out = _call(_ag("out"), ast.Tuple(elts=[_const(n) for n in writes], ctx=ast.Load()))
        return _located(ast.Return(value=out), at)

    def for_(self, s: ast.For) -> list[ast.stmt]:
        it = _range_call(s.iter, s)
        if it is None and _is_call_of(s.iter, "reversed", 1):
            inner = _range_call(s.iter.args[0], s)
            if inner is not None:
                it = _located(
                    ast.copy_location(_call(_ag("reversed_"), _name("reversed"), inner), s.iter), s
                )
        if it is None:
            it = expression(s.iter)
        reasons = self.reasons.get(s, ())
        target = s.target.id if isinstance(s.target, ast.Name) else None
        if reasons:
            _, reads, _ = self._state(Facts.of(s.body))
            index, _ = self._info(kind="for", lineno=s.lineno, params=tuple(reads), reasons=reasons)
            s.iter = _located(_call(_ag("py_iter"), it, self._ref(index)), s.iter)
            s.target = expression(s.target)
            s.body = self.block(s.body)
            s.orelse = self.block(s.orelse)
            return [s]
        facts = Facts()
        facts.target(s.target, s.lineno)
        for b in s.body:
            facts.visit(b)
        writes, reads, params = self._state(facts, self.cont_flags.get(s))
        index, info = self._info(
            kind="for",
            lineno=s.lineno,
            params=tuple(params),
            writes=tuple(writes),
            **self._effects(facts, writes, self.live.head[s]),
            target=target,
            brk=self.break_flags.get(s),
        )
        item = f"{PREFIX}itr"
        first = Facts()
        first.target(s.target, s.lineno)
        assigned_first = set(first.stores)
        body = _undefined_guards([p for p in params if p in reads and p not in assigned_first], s)
        body.append(_located(ast.Assign(targets=[expression(s.target)], value=_name(item)), s))
        body += self.block(s.body)
        body.append(self._returned(writes, s))
        fn = _function(f"{PREFIX}for_body_{index}", [item] + params, body, s)
        call = _call(_ag("for_stmt"), it, _name(fn.name), self._ref(index))
        return [fn] + self._assign_back(writes, _located(call, s), s)

    def while_(self, s: ast.While) -> list[ast.stmt]:
        reasons = self.reasons.get(s, ())
        if reasons:
            index, _ = self._info(kind="while", lineno=s.lineno, reasons=reasons)
            s.test = _located(_call(_ag("py_test"), expression(s.test), self._ref(index)), s)
            s.body = self.block(s.body)
            s.orelse = self.block(s.orelse)
            return [s]
        facts = Facts.of(s.body)
        test_reads = [n for n in Facts.of([s.test]).loads if n in self.visible]
        facts.loads = dict.fromkeys(_ordered(test_reads, facts.loads))
        writes, reads, params = self._state(facts, self.cont_flags.get(s))
        index, info = self._info(
            kind="while",
            lineno=s.lineno,
            params=tuple(params),
            test_params=tuple(test_reads),
            writes=tuple(writes),
            **self._effects(facts, writes, self.live.head[s]),
            brk=self.break_flags.get(s),
        )
        test_body = _undefined_guards(test_reads, s) + [
            _located(ast.Return(value=expression(s.test)), s)
        ]
        test_fn = _function(f"{PREFIX}while_test_{index}", test_reads, test_body, s)
        body = _undefined_guards([p for p in params if p in reads], s)
        body += self.block(s.body)
        body.append(self._returned(writes, s))
        body_fn = _function(f"{PREFIX}while_body_{index}", params, body, s)
        call = _call(_ag("while_stmt"), _name(test_fn.name), _name(body_fn.name), self._ref(index))
        return [test_fn, body_fn] + self._assign_back(writes, _located(call, s), s)

    def _if_reasons(self, s: ast.If, facts: Facts, returning: bool) -> tuple[str, ...]:
        reasons = [r for _, r in facts.problems]
        if facts.has_return and not returning:
            reasons.append("a branch returns on some paths only")
        if facts.has_raise:
            reasons.append("a branch raises an exception")
        reasons += self._closure_reasons(facts, set(facts.stores) | set(facts.subscript_bases))
        for n in facts.stores:
            if n in self.declared:
                reasons.append(f"a branch assigns the global or nonlocal variable {n!r}")
        if self.nonlocal_nested:
            reasons.append("a nested function assigns variables of this function (nonlocal)")
        if _jumps_here(s.body + s.orelse) != (False, False):
            reasons.append("a branch jumps out of the enclosing Python loop (break/continue)")
        return tuple(dict.fromkeys(reasons))

    def if_(self, s: ast.If) -> list[ast.stmt]:
        facts = Facts.of(s.body + s.orelse)
        returning = always_returns(s.body) and always_returns(s.orelse)
        reasons = self._if_reasons(s, facts, returning)
        test = expression(s.test)
        if reasons:
            index, _ = self._info(kind="if", lineno=s.lineno, reasons=reasons)
            s.test = _located(_call(_ag("py_test"), test, self._ref(index)), s)
            s.body = self.block(s.body)
            s.orelse = self.block(s.orelse)
            return [s]
        writes, reads, params = self._state(facts)
        index, info = self._info(
            kind="ifreturn" if returning else "if",
            lineno=s.lineno,
            params=tuple(params),
            writes=tuple(writes),
            **self._effects(facts, writes, self.live.after[s]),
        )
        guards = [p for p in params if p in reads]
        fns = []
        for label, branch in (("true", s.body), ("false", s.orelse)):
            at = branch[0] if branch else s
            body = _undefined_guards(guards, at) + self.block(branch)
            if not returning:
                body.append(self._returned(writes, at))
            fns.append(_function(f"{PREFIX}if_{label}_{index}", params, body, at))
        call = _located(
            _call(_ag("if_stmt"), test, _name(fns[0].name), _name(fns[1].name), self._ref(index)),
            s,
        )
        if returning:
            return fns + [_located(ast.Return(value=call), s)]
        return fns + self._assign_back(writes, call, s)


class Converter:
    """Rewrites a function and the functions nested in it; `infos[N]` is `ag__info[N]`."""

    def __init__(self, filename: str):
        self.filename = filename
        self.infos: list[BlockInfo] = []
        self._ids = 0

    def next_id(self) -> int:
        self._ids += 1
        return self._ids

    def register(self, info: BlockInfo) -> tuple[int, BlockInfo]:
        self.infos.append(info)
        return len(self.infos) - 1, info

    def function(self, node, visible_outside: frozenset) -> None:
        """Rewrites `node` (a def or a lambda) in place."""
        if isinstance(node, ast.Lambda):
            node.body = expression(node.body)
            return
        if Facts.of(node.body).has_yield:
            return  # generators run as written
        for a in node.args.posonlyargs + node.args.args + node.args.kwonlyargs:
            a.annotation = None
        for a in (node.args.vararg, node.args.kwarg):
            if a is not None:
                a.annotation = None
        node.returns = None
        shared = _item_assignments(self, node)
        _Function(self, node, visible_outside, shared).run()
