"""`aotkit.numpy.coverage()`: the table of every supported function, from the registry.

Error messages about a missing NumPy function point here rather than to a document, so the
answer is in every install (a wheel has no docs/ folder); docs/coverage.md embeds the same
table, and tests/test_coverage.py keeps the two equal.
"""

from __future__ import annotations

from aotkit import tracing as _tracing
from aotkit.tracing import dispatch, updates
from aotkit.tracing.core import NUMPY_FUNCTIONS
from aotkit.tracing.linalg import LINALG_FUNCTIONS

FAMILY_TITLES = {
    "elementwise": "Elementwise (ufuncs and friends)",
    "creation": "Array creation",
    "shape": "Shapes, joining and splitting",
    "indexing": "Indexing and functional updates",
    "reduction": "Reductions and statistics",
    "linalg": "Linear algebra",
    "dispatch": "Static array metadata",
    "sorting": "Sorting, searching and quantiles",
    "statistics": "Histograms, covariance and correlation",
    "updates": "In-place updates and index-built arrays",
}


def coverage() -> str:
    """Every `aotkit.numpy` function by family (a Markdown table): each function once, its
    aliases beside it, in registry order. Anything not listed raises NotImplementedError
    (from `np.*` on a traced array) or AttributeError (from `aotkit.numpy.*`) naming it.
    """
    _tracing.load_families()
    families: dict[str, dict[int, list[str]]] = {}
    for name, fn in NUMPY_FUNCTIONS.items():
        family = fn.__module__.rsplit(".", 1)[-1]
        families.setdefault(family, {}).setdefault(id(fn), []).append(name)
    rows = ["| Family | Functions (aliases in parentheses) |", "| --- | --- |"]
    order = list(FAMILY_TITLES) + sorted(set(families) - set(FAMILY_TITLES))
    for family in order:
        groups = families.get(family)
        if not groups:
            continue
        cells = []
        for names in sorted(groups.values(), key=lambda ns: ns[0]):
            cell = f"`{names[0]}`"
            if len(names) > 1:
                cell += " (" + ", ".join(f"`{n}`" for n in names[1:]) + ")"
            cells.append(cell)
        rows.append(f"| {FAMILY_TITLES.get(family, family)} | {', '.join(cells)} |")
    rows.append(
        "| `aotkit.numpy.linalg` | "
        + ", ".join(f"`linalg.{n}`" for n in sorted(LINALG_FUNCTIONS))
        + " |"
    )
    reduce_names = sorted([*dispatch._REDUCE_FUNCTIONS, *dispatch._REDUCE_MONOIDS])
    rows.append("| ufunc `.reduce` | " + ", ".join(f"`{n}.reduce`" for n in reduce_names) + " |")
    rows.append(
        "| ufunc `.accumulate` | "
        + ", ".join(f"`{n}.accumulate`" for n in sorted(dispatch._ACCUMULATE))
        + " |"
    )
    rows.append("| ufunc `.outer` | every binary ufunc above, e.g. `np.add.outer(a, b)` |")
    rows.append("| ufunc `.at` | " + ", ".join(f"`{n}.at`" for n in sorted(updates._AT)) + " |")
    rows.append(
        "| ufunc `.reduceat` | "
        + ", ".join(f"`{n}.reduceat`" for n in sorted(updates._REDUCEAT))
        + " |"
    )
    return "\n".join(rows)
