"""The fresh processes of tests/test_artifact_sharding.py: a data-parallel training step over
8 CPU devices, saved by one process and loaded by others.

    python -m tests.sharded_artifact_child save DIR     # 8 devices: compile, save, run
    python -m tests.sharded_artifact_child load DIR     # 8 devices: load, run; cache; topology
    python -m tests.sharded_artifact_child process DIR ID PORT   # 1 of 2 processes x 4 devices

The step (`step`) takes its parameters as a dict and its optimizer state as a namedtuple,
donates both, and takes the batch sharded over the mesh axis 'data' (parameters and state
replicated). Each mode runs STEPS steps from the same start (`start`), called with NumPy
pytrees as a user holds them, and writes what it got to DIR/MODE[-ID].npz; facts about the
loaded `Compiled` (origin, mesh, shardings, warnings, errors) go to DIR/MODE[-ID].json.
Checks wait for each step, as tests/spmd_checks.py explains (CPU collectives can deadlock on
back-to-back sharded executions).
"""

from __future__ import annotations

import collections
import json
import sys

import numpy as np

STEPS = 3
Momentum = collections.namedtuple("Momentum", "velocity count")


def step(params, state, x, y):
    import jax
    import jax.numpy as jnp

    def loss_fn(p):
        hidden = jnp.tanh(x @ p["w1"] + p["b1"])
        return jnp.mean((hidden @ p["w2"] - y) ** 2)

    loss, grads = jax.value_and_grad(loss_fn)(params)
    velocity = jax.tree.map(lambda v, g: 0.9 * v + g, state.velocity, grads)
    params = jax.tree.map(lambda p, v: p - 0.1 * v, params, velocity)
    return params, Momentum(velocity, state.count + 1), loss


def start():
    rng = np.random.default_rng(0)

    def f32(*shape):
        return (rng.standard_normal(shape) * 0.3).astype(np.float32)

    params = {"w1": f32(16, 32), "b1": f32(32), "w2": f32(32, 8)}
    state = Momentum({k: np.zeros_like(v) for k, v in params.items()}, np.int32(0))
    return params, state, f32(32, 16), f32(32, 8)


def shardings(mesh):
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    replicated, batch = NamedSharding(mesh, P()), NamedSharding(mesh, P("data"))
    return (replicated, replicated, batch, batch), (replicated, replicated, replicated)


def jit_step(aotkit, ins, outs):
    return aotkit.jit(
        step, in_shardings=ins, out_shardings=outs, donate_argnums=(0, 1), frontend="jax"
    )


def run(compiled, out_path: str):
    """STEPS steps from `start()`, NumPy pytrees in; this process's part of the results out."""
    import jax

    params, state, x, y = start()
    losses = []
    for _ in range(STEPS):
        params, state, loss = compiled(params, state, x, y)
        loss.block_until_ready()
        losses.append(np.asarray(loss.addressable_data(0)))
    leaves = [np.asarray(a.addressable_data(0)) for a in jax.tree.leaves((params, state))]
    np.savez(out_path, *leaves, losses=np.stack(losses))
    return params, state


def describe(compiled) -> dict:
    return {
        "origin": compiled.origin,
        "mesh": repr(compiled.mesh),
        "in_shardings": [repr(s.spec) for s in compiled.partitioning.in_shardings],
        "out_tree": str(compiled.out_tree),
        "donated": list(compiled.donated),
    }


def save(folder: str) -> dict:
    import aotkit

    mesh = aotkit.sharding.mesh("data=8")
    ins, outs = shardings(mesh)
    jitted = jit_step(aotkit, ins, outs)
    compiled = jitted.lower(*start()).compile()
    compiled.save(f"{folder}/step.aotx")
    run(compiled, f"{folder}/save.npz")
    return describe(compiled)


def load(folder: str) -> dict:
    import warnings

    import aotkit
    from aotkit import artifacts

    facts = {}
    loaded = aotkit.load(f"{folder}/step.aotx", recompile=False)
    facts["loaded"] = describe(loaded)
    params, state = run(loaded, f"{folder}/load.npz")
    # Donation survives: arrays it returned, passed back in, are consumed.
    x, y = start()[2:]
    loaded(params, state, x, y)[2].block_until_ready()
    facts["donated_consumed"] = bool(params["w1"].is_deleted() and state.count.is_deleted())

    # The same step compiled here comes from the persistent cache the saving process filled.
    mesh = aotkit.sharding.mesh("data=8")
    ins, outs = shardings(mesh)
    jitted = jit_step(aotkit, ins, outs)
    cached = jitted.lower(*start()).compile()
    facts["cached"] = describe(cached)
    run(cached, f"{folder}/cache.npz")

    # Another topology (a target that says 16 devices): recompiled from the portable module
    # with a warning, or refused.
    data = open(f"{folder}/step.aotx", "rb").read()
    art = artifacts.unpack(data)
    header = {k: v for k, v in art.header.items() if k != "sections"}
    sections = {n: bytes(v) for n, v in art.sections.items()}
    other = artifacts.pack({**header, "target": {**art.target, "devices": "16"}}, sections)
    try:
        aotkit.load(other, recompile=False)
        facts["other_topology"] = "loaded"
    except aotkit.ArtifactError as e:
        facts["other_topology"] = str(e)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        recompiled = aotkit.load(other)
    facts["recompiled"] = describe(recompiled)
    facts["warnings"] = [str(w.message) for w in seen]
    run(recompiled, f"{folder}/recompiled.npz")
    return facts


def process(folder: str, process_id: int, port: int) -> dict:
    import aotkit

    aotkit.distributed.initialize(f"localhost:{port}", 2, process_id, local_device_count=4)
    loaded = aotkit.load(f"{folder}/step.aotx", recompile=False)
    run(loaded, f"{folder}/process-{process_id}.npz")
    facts = describe(loaded)
    facts["local_devices"] = sorted(d.id for d in loaded.mesh.local_devices)
    aotkit.distributed.shutdown()
    return facts


def main(argv: list[str]) -> int:
    mode, folder = argv[1], argv[2]
    if mode == "process":
        facts, name = process(folder, int(argv[3]), int(argv[4])), f"process-{argv[3]}"
    else:
        facts, name = {"save": save, "load": load}[mode](folder), mode
    with open(f"{folder}/{name}.json", "w") as f:
        json.dump(facts, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
