"""Several processes, one sharded program: JAX's distributed runtime, started for aotkit.

    import aotkit
    aotkit.distributed.initialize("10.0.0.1:1234", num_processes=2, process_id=0)
    mesh = aotkit.sharding.mesh("data=8")      # every process's devices: 2 x 4 here
    step = aotkit.jit(train_step, in_shardings=...)
    step(params, batch)                          # each process places its own shards

Not a stage: a process-wide setting made before anything compiles. `initialize` starts
JAX's distributed runtime (`jax.distributed.initialize`: a coordinator service in process
0, a client in each) with PJRT's CPU collectives (Gloo by default), so that the CPU client
aotkit's `cpu` backend starts afterwards sees every process's devices and its collectives
cross processes. Each process then traces and compiles the same program for the global
mesh and runs it on its own devices: NumPy arguments are the whole array in every process
(each places the shards its devices hold), results are `jax.Array`s whose
`addressable_shards` are this process's part (a replicated result's `addressable_data(0)`
is the whole value).

An artifact of a sharded program (`Compiled.save`) loads the same way: each process calls
`initialize`, then `aotkit.load(path)`, and runs its part. The executable is loaded as it
is where the run has as many devices of the same kind as the one that saved it, however
they are spread over processes (aotkit/compiling.py).
"""

from __future__ import annotations

from aotkit import _compat

CPU_COLLECTIVES = ("gloo", "mpi")


def initialize(
    coordinator_address: str,
    num_processes: int,
    process_id: int,
    *,
    local_device_count: int | None = None,
    cpu_collectives: str = "gloo",
    initialization_timeout: int = 300,
) -> None:
    """Joins this process to a run of `num_processes` processes coordinated at
    `coordinator_address` ("host:port", served by process 0), as process `process_id`.

    Call it first, before any compile or device query starts a backend. On the CPU,
    `local_device_count` sets how many devices this process has (as
    `--xla_force_host_platform_device_count` does) and `cpu_collectives` which collectives
    library crosses processes ("gloo", or "mpi" where jaxlib was built with it).
    """
    where = "aotkit.distributed.initialize"
    if not isinstance(coordinator_address, str) or ":" not in coordinator_address:
        raise ValueError(
            f"{where}: coordinator_address {coordinator_address!r} is not 'host:port'; give "
            "the address process 0 listens on, e.g. 'localhost:1234'"
        )
    for name, value, low in (("num_processes", num_processes, 1), ("process_id", process_id, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"{where}: {name}={value!r}; give an integer >= {low}")
    if process_id >= num_processes:
        raise ValueError(
            f"{where}: process_id={process_id} is not below num_processes={num_processes}; "
            f"number the processes 0 to {num_processes - 1}"
        )
    if local_device_count is not None and (
        isinstance(local_device_count, bool)
        or not isinstance(local_device_count, int)
        or local_device_count < 1
    ):
        raise ValueError(
            f"{where}: local_device_count={local_device_count!r}; give an integer >= 1"
        )
    if cpu_collectives not in CPU_COLLECTIVES:
        raise ValueError(
            f"{where}: cpu_collectives={cpu_collectives!r}; choose one of "
            f"{', '.join(map(repr, CPU_COLLECTIVES))}"
        )

    if _compat.backends_started():
        raise RuntimeError(
            f"{where}: a backend has already started in this process (a compile, a device "
            "query or aotkit.backends.get starts one); call initialize first, before anything "
            "compiles"
        )
    import jax

    jax.config.update("jax_cpu_collectives_implementation", cpu_collectives)
    if local_device_count is not None:
        jax.config.update("jax_num_cpu_devices", local_device_count)
    jax.distributed.initialize(
        coordinator_address,
        num_processes,
        process_id,
        initialization_timeout=initialization_timeout,
    )


def shutdown() -> None:
    """Leaves the distributed run (`jax.distributed.shutdown`); a no-op when not in one."""
    import jax

    jax.distributed.shutdown()


def process_index() -> int:
    """This process's index in the run (0 when not in one)."""
    import jax

    return jax.process_index()


def process_count() -> int:
    """How many processes the run has (1 when not in one)."""
    import jax

    return jax.process_count()
