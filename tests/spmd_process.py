"""One of the processes of tests/test_spmd_processes.py: a data-parallel training step on a
mesh that spans two processes of 4 CPU devices each.

    python -m tests.spmd_process PROCESS_ID PORT OUT_DIR

Joins the run coordinated on localhost:PORT, runs three steps of tests/spmd_checks.py's MLP
step with the batch sharded over all 8 devices (weights replicated, gradients all-reduced
across the processes), and writes what this process holds of the results to
OUT_DIR/process-ID.npz for the parent to compare with one device.
"""

from __future__ import annotations

import functools
import sys


def main(process_id: int, port: int, out_dir: str) -> int:
    import aotkit

    aotkit.distributed.initialize(f"localhost:{port}", 2, process_id, local_device_count=4)
    import jax
    import numpy as np

    import aotkit.numpy as anp
    from tests import spmd_checks

    mesh = aotkit.sharding.mesh("data=8")
    local = [d.id for d in jax.local_devices()]
    assert len(mesh.devices.flat) == 8 and len(local) == 4, (mesh, local)
    params, x, y = spmd_checks.mlp_data()
    ins, outs = spmd_checks._dp_shardings(mesh)
    step = aotkit.jit(
        functools.partial(spmd_checks.mlp_step, anp), in_shardings=ins, out_shardings=outs
    )
    compiled = step.lower(params, x, y).compile()
    assert "all-reduce" in compiled.as_text()
    for _ in range(3):  # NumPy in (every process passes the whole batch), sharded arrays back in
        params, loss = compiled(params, x, y)
        loss.block_until_ready()  # pipelined SPMD steps can deadlock on the CPU (docs/sharding.md)
    # This process holds the rows of the batch its 4 devices hold, nothing else.
    batch = jax.device_put(x, ins[1])
    rows = sorted(s.index[0].start for s in batch.addressable_shards)
    leaves = jax.tree.leaves((params, loss))
    arrays = {f"leaf{i}": np.asarray(a.addressable_data(0)) for i, a in enumerate(leaves)}
    np.savez(f"{out_dir}/process-{process_id}.npz", rows=np.array(rows), **arrays)
    aotkit.distributed.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]))
