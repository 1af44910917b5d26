"""The fresh process of tests/symbolic/test_serving.py.

`python tests/symbolic/serving_child.py ARTIFACT.aotx INPUTS.npz OUT.npz` loads the artifact
with `aotkit.load` (nothing else of aotkit imported first), calls it once per input set
`in{k}_{i}` of INPUTS.npz (k: the call, i: the positional argument; weights shared by every
call are `w_{i}`), and writes each call's results as `out{k}_{j}`, with what the loaded
Compiled says of itself: its origin, the specializations it held when loaded and how many
executables it compiled.
"""

from __future__ import annotations

import json
import sys

import numpy as np


def main(artifact: str, inputs: str, out: str) -> None:
    import aotkit

    compiled = aotkit.load(artifact)
    held = [dict(v) for v in compiled.specializations]
    data = np.load(inputs)
    calls = sorted({int(k[2:].split("_")[0]) for k in data.files if k.startswith("in")})
    weights = sorted((k for k in data.files if k.startswith("w_")), key=lambda k: int(k[2:]))
    results = {}
    for k in calls:
        names = sorted(
            (n for n in data.files if n.startswith(f"in{k}_")), key=lambda n: int(n.split("_")[1])
        )
        args = [data[n] for n in names] + [data[w] for w in weights]
        outs = compiled(*args)
        outs = outs if isinstance(outs, tuple) else (outs,)
        for j, value in enumerate(outs):
            results[f"out{k}_{j}"] = np.asarray(value)
    info = {
        "origin": compiled.origin,
        "held": held,
        "compiles": compiled._executable.compiles,
        "signature": repr(compiled),
    }
    results["info"] = np.frombuffer(json.dumps(info).encode(), dtype=np.uint8)
    np.savez(out, **results)


if __name__ == "__main__":
    main(*sys.argv[1:4])
