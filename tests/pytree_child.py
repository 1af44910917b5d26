"""The fresh process of tests/test_artifact_pytrees.py.

    python -m tests.pytree_child PLAN.json OUT_DIR

For each training step the plan names (tests/ecosystem_models.py), registers the model's
node types as a user would, loads the artifact with `aotkit.load`, builds the real initial
parameters and optimizer state, runs `STEPS` steps and writes the final leaves to
OUT_DIR/CASE.npz (NumPy's format, read back without pickle). For the plan's crafted files,
loads each and records what it raised, and whether a module named by the file was imported.
Writes what it saw to OUT_DIR/out.json.
"""

from __future__ import annotations

import json
import sys


def run_case(name: str, path: str, out_dir: str) -> dict:
    import jax
    import numpy as np

    import aotkit
    from tests import ecosystem_models

    case = ecosystem_models.CASES[name]()
    case.register()
    step = aotkit.load(path, recompile=False)
    params, opt_state = case.start()
    x, y = case.batch
    first = jax.tree.leaves((params, opt_state))
    losses = []
    for i in range(ecosystem_models.STEPS):
        params, opt_state, loss = step(params, opt_state, x, y)
        losses.append(np.asarray(loss))
        if i == 0:
            donated = all(leaf.is_deleted() for leaf in first)
    leaves = jax.tree.leaves((params, opt_state))
    arrays = [np.asarray(leaf) for leaf in leaves]
    np.savez(f"{out_dir}/{name}.npz", *arrays, losses=np.stack(losses))
    return {
        "origin": step.origin,
        "donated": donated,
        "params": type(params).__qualname__,
        "opt_state": [f"{type(s).__module__}.{type(s).__qualname__}" for s in opt_state],
    }


def load_crafted(path: str) -> str:
    import aotkit

    try:
        compiled = aotkit.load(path, recompile=False)
    except Exception as e:  # the kind and message are the result
        return f"{type(e).__name__}: {e}"
    return f"loaded: {compiled.out_tree}"


def main(argv: list[str]) -> int:
    with open(argv[1]) as f:
        plan = json.load(f)
    out_dir = argv[2]
    results = {}
    for name, path in plan.get("cases", {}).items():
        results[name] = run_case(name, path, out_dir)
    for name, path in plan.get("crafted", {}).items():
        results[name] = load_crafted(path)
    results["modules"] = sorted(sys.modules)
    with open(f"{out_dir}/out.json", "w") as f:
        json.dump(results, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
