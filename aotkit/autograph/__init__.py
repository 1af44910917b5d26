"""Trace stage, autograph: Python loops and branches on traced values become StableHLO
loops and conditionals, by rewriting the source of the function being traced.

`aotkit.jit` and `aotkit.lower` apply it to the function they trace (`autograph=False`
turns it off) and, through it, to every Python function that function calls from the
user's own code. Library code (the standard library, site-packages, NumPy, JAX, aotkit),
functions without source, generators, functions using `super()` and functions marked
with `do_not_convert` run as written.

What changes, and when (decided as the trace runs, statement by statement):

- `if c:` with a traced `c` becomes one `aotkit.cond` over the variables either branch
  assigns that are read afterwards (both branches must give them the same shapes and
  dtypes); an `if` whose branches both return becomes a cond over the returned values.
  `x if c else y`, `and`, `or` and `not` on traced values become `cond`, `logical_and`,
  `logical_or` and `logical_not`.
- `while c:` runs as Python while `c` is a Python value; once `c` is traced, the rest of
  the loop becomes one `aotkit.while_loop`.
- `for i in range(a, b, step)` (and `for row in x` over a traced array) becomes one
  `aotkit.fori_loop` (or a `while_loop`, with `break`) when a bound is traced, or when the
  trip count exceeds `UNROLL_LIMIT`, the loop carries variables and its state holds traced
  arrays. Shorter loops and loops of Python values stay Python (unrolled), as before.
- Carried variables are those the loop assigns (`x = ...`, `x[i] = ...`, `x[i, :] += ...`)
  that the next iteration or the code after the loop reads; Python numbers among them
  become arrays. `break` and `continue` become flags carried by the loop.

A loop that cannot become one StableHLO loop (state that is not arrays or numbers, side
effects on Python objects such as `rows.append(...)`, a `try`, a `return` inside the loop,
or a body that needs the index to be static, such as `x[:i]`) is unrolled as before, and
an `AutographWarning` names its file:line and the reason. When unrolling is impossible (a
traced condition or bound), the TypeError says why the statement could not be converted.
Errors, warnings and the locations of the traced ops keep naming the original lines.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from aotkit.autograph import _convert, _runtime
from aotkit.autograph._runtime import UNROLL_LIMIT, AutographWarning

__all__ = [
    "UNROLL_LIMIT",
    "AutographWarning",
    "active",
    "convert",
    "do_not_convert",
    "is_converted",
    "to_source",
]


def do_not_convert(fn: Callable) -> Callable:
    """Marks `fn` to run as written when a converted function calls it (and when it is
    given to `aotkit.jit` itself): its Python loops unroll and its branches need Python
    conditions, as without autograph. Usable as a decorator."""
    target = getattr(fn, "__func__", fn)
    try:
        setattr(target, _convert.DO_NOT_CONVERT, True)
    except (AttributeError, TypeError):
        raise TypeError(
            f"do_not_convert: cannot mark {fn!r} ({type(fn).__name__}); mark a Python "
            "function or method"
        ) from None
    return fn


def convert(fn: Callable) -> Callable:
    """`fn` with its Python control flow converted (see the module docstring): calling the
    result while tracing gives StableHLO loops and conditionals for traced conditions.
    Outside a trace it computes what `fn` computes."""
    if not callable(fn):
        raise TypeError(f"autograph.convert: expected a function, got {type(fn).__name__}")

    @functools.wraps(fn)
    def converted(*args, **kwargs):
        with _runtime.Session():
            return _convert.converted(fn)(*args, **kwargs)

    return converted


def active() -> bool:
    """Whether the function being traced now runs converted (`aotkit.jit`'s `autograph`):
    a function it hands to `aotkit.grad` or `aotkit.vmap` is converted alike."""
    return _runtime.in_session()


def to_source(fn: Callable) -> str | None:
    """The source autograph runs in place of `fn` (a function or method), or None when `fn`
    runs as written: what each loop and branch became (`ag__.for_stmt(...)`, ...)."""
    return _convert.to_source(fn)


def is_converted(fn: Callable) -> bool:
    """Whether `fn` is the converted code autograph made (for tests and debugging)."""
    return _convert.is_converted(fn)
