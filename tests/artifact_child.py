"""The fresh process of tests/test_artifacts.py and tests/test_cache.py.

`python tests/artifact_child.py PLAN.json OUT.json` loads each artifact the plan names with
`aotkit.load` (nothing else of aotkit imported first), calls it on the plan's arguments, then
makes the calls that must fail, and writes what it saw. The parent makes the same calls on
the `Compiled` it saved and compares. Values travel as JSON (`encode`/`decode`), never pickle.

This file imports only NumPy and ml_dtypes at module level, so the parent can import its
codec without changing what the child loads.
"""

from __future__ import annotations

import json
import sys

import ml_dtypes
import numpy as np


def _dtype(name: str) -> np.dtype:
    found = getattr(ml_dtypes, name, None)
    return np.dtype(found) if found is not None else np.dtype(name)


def encode(x):
    """A pytree of arrays, Python scalars, tuples, lists, dicts (str keys) and None as JSON."""
    if x is None:
        return None
    if isinstance(x, tuple):
        return {"tuple": [encode(v) for v in x]}
    if isinstance(x, list):
        return {"list": [encode(v) for v in x]}
    if isinstance(x, dict):
        return {"dict": {k: encode(v) for k, v in x.items()}}
    if type(x) in (bool, int, float):
        return {type(x).__name__: x}
    if type(x) is complex:
        return {"complex": [x.real, x.imag]}
    a = np.asarray(x)
    return {"dtype": a.dtype.name, "shape": list(a.shape), "hex": a.tobytes().hex()}


def decode(d):
    if d is None:
        return None
    if "tuple" in d:
        return tuple(decode(v) for v in d["tuple"])
    if "list" in d:
        return [decode(v) for v in d["list"]]
    if "dict" in d:
        return {k: decode(v) for k, v in d["dict"].items()}
    for kind in (bool, int, float):
        if kind.__name__ in d:
            return kind(d[kind.__name__])
    if "complex" in d:
        return complex(*d["complex"])
    data = bytes.fromhex(d["hex"])
    return np.frombuffer(data, _dtype(d["dtype"])).reshape(d["shape"]).copy()


def wrong_calls(args: tuple, kwargs: dict) -> list[tuple[tuple, dict]]:
    """Calls every Compiled must refuse alike: the first argument wrapped in a list, and the
    first argument replaced by an int8 array of its shape."""
    first = np.asarray(args[0]) if not isinstance(args[0], dict) else None
    calls = [(([args[0]], *args[1:]), kwargs)]
    if first is not None:
        calls.append(((np.zeros(first.shape, np.int8), *args[1:]), kwargs))
    return calls


def call_record(compiled, args: tuple, kwargs: dict, donate: bool) -> dict:
    """What calling `compiled` gives: the result, the errors of wrong calls and (for a
    function donating its first argument) what a second use of a donated array gives."""
    out = compiled(*args, **kwargs)
    errors = []
    for bad_args, bad_kwargs in wrong_calls(args, kwargs):
        try:
            compiled(*bad_args, **bad_kwargs)
            errors.append("no error")
        except Exception as e:  # the kind and message are what is compared
            errors.append(f"{type(e).__name__}: {e}")
    record = {"out": encode(out), "errors": errors}
    if donate:
        fed = compiled(*args, **kwargs)
        compiled(fed, *args[1:], **kwargs)
        try:
            compiled(fed, *args[1:], **kwargs)
            record["donated"] = "no error"
        except Exception as e:
            record["donated"] = f"{type(e).__name__}: {e}"
    return record


def main(argv: list[str]) -> int:
    with open(argv[1]) as f:
        plan = json.load(f)
    import aotkit

    results = {}
    for name, case in plan.items():
        compiled = aotkit.load(case["artifact"], recompile=case.get("recompile", False))
        args, kwargs = decode(case["args"]), decode(case["kwargs"])
        record = call_record(compiled, args, kwargs, case.get("donate", False))
        record["origin"] = compiled.origin
        record["lowered"] = repr(compiled.lowered)
        results[name] = record
    results["modules"] = sorted(m for m in sys.modules if m.startswith("aotkit"))
    with open(argv[2], "w") as f:
        json.dump(results, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
