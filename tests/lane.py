"""The accelerator lane: the differential tests run on a backend named by the environment.

    AOTKIT_TEST_BACKEND=tpu pytest -n 0 -o addopts="" -m lane
    AOTKIT_TEST_BACKEND=tpu pytest -n 0 -o addopts="" -m lane_children

With `AOTKIT_TEST_BACKEND=NAME` set, NAME joins the backends of the op-family tests
(tests/tracing, tests/symbolic, the transform families, artifacts, and tests/test_lane.py's
seed transcript, artifacts and cache); each of those cases carries the mark `lane`, so the
first line above runs them alone. Values are compared with the tests' tolerances, loosened to
aotkit.crosscheck's for NAME's platform (a TPU's float32 transcendental functions are some
thousand ULP from the CPU's). Where NAME does not start (no such backend, or no device), the
lane's cases skip with the reason.

One process at a time can hold an accelerator. So where the lane is on:
- this pytest process holds it, and every process a test starts stays off it
  (JAX_PLATFORMS=cpu and AOTKIT_BACKEND=cpu in the environment children inherit; this process
  read the original JAX_PLATFORMS when it imported jax, here, first);
- this process's default backend stays `cpu` (AOTKIT_BACKEND), and JAX's default device too,
  so that the tests outside the lane, and the JAX oracles, compare what they always compare;
- the cases that load an artifact or hit the cache in a fresh process on NAME (the mark
  `lane_children`) need the accelerator free: they run in a pytest of their own (the second
  line above), which stays off the accelerator itself and lets its children on it; in the
  first they skip, saying so.

With pytest-xdist's `-n 1` the lane runs in one worker process that holds the accelerator;
a case that ends its process (a backend's failed check) then loses only that worker, which
xdist replaces, and the lane goes on.

AOTKIT_TEST_SHARD=K/N keeps the Kth of N consecutive parts of the lane's cases (0 <= K < N, in
collection order), so that a lane longer than one sitting on an accelerator runs in N parts
with named cases. The parts are consecutive, not every Nth case, because the transform families
compute all their cases of a dtype in one program: a part then compiles only its own families.

AOTKIT_TEST_PLUGIN=PATH makes NAME a PJRT plugin library loaded by path: with the CPU plugin
of `aotkit[native]` (aotkit.native.cpu_plugin()) the lane runs on any machine, a second PJRT
backend beside jaxlib's own CPU client.

Without the variable nothing changes, except that on a host with an accelerator the suite
runs on the CPU (JAX_PLATFORMS=cpu unless it is set), children included. Where JAX_PLATFORMS
names an accelerator, this process runs on it (aotkit's default backend and JAX's are then the
accelerator) and the processes tests start stay off it (JAX_PLATFORMS=cpu in theirs).
"""

from __future__ import annotations

import functools
import json
import os

import pytest

ENV = "AOTKIT_TEST_BACKEND"
NAME = os.environ.get(ENV, "").strip() or None
# The backends every test has anyway; naming one of them runs no separate lane.
_OWN = ("cpu", "interpreter", "iree")
ON = NAME is not None and NAME not in _OWN
MARK = "lane"
CHILDREN_MARK = "lane_children"
# The environment variables as the user set them, for children that go on the chip. Where the
# lane is on they are kept in USER_ENV too, for pytest-xdist's workers: those inherit this
# process's JAX_PLATFORMS=cpu (with -n 1 a worker that a backend aborts is replaced, and the
# lane goes on).
USER_ENV = "AOTKIT_TEST_USER_ENV"
_ORIGINAL = (
    json.loads(os.environ[USER_ENV])
    if ON and USER_ENV in os.environ
    else {k: os.environ.get(k) for k in ("JAX_PLATFORMS", "AOTKIT_BACKEND")}
)
_children_only: list[bool] = [False]


def configure(children_only: bool) -> None:
    """Sets up this process for the lane (conftest's pytest_configure calls it, before any
    test module imports jax). `children_only`: this run selects `lane_children` alone, so
    this process stays off the accelerator and its children go on it."""
    if not ON:
        platforms = os.environ.get("JAX_PLATFORMS")
        if platforms is None:
            os.environ["JAX_PLATFORMS"] = "cpu"
        elif set(platforms.split(",")) - {"cpu", ""}:
            # The user put this process on an accelerator (JAX_PLATFORMS=tpu,cpu): it holds
            # it, and the processes the tests start stay off it.
            import jax  # (reads JAX_PLATFORMS now)

            os.environ["JAX_PLATFORMS"] = "cpu"
        return
    _children_only[0] = children_only
    os.environ[USER_ENV] = json.dumps(_ORIGINAL)
    if children_only:
        os.environ["JAX_PLATFORMS"] = "cpu"
    else:
        _set(os.environ, _ORIGINAL)
        import jax  # (reads JAX_PLATFORMS now: this process may use the accelerator)

        # JAX's default device too: the tests' JAX oracles (jax.jit, jax.device_put) run on
        # the CPU, as aotkit's default backend does.
        jax.config.update("jax_default_device", "cpu")
        os.environ["JAX_PLATFORMS"] = "cpu"
    os.environ["AOTKIT_BACKEND"] = "cpu"


def chip_env() -> dict[str, str]:
    """The environment of a child that runs on the lane's backend: this one, with
    JAX_PLATFORMS and AOTKIT_BACKEND as the user had them."""
    env = dict(os.environ)
    _set(env, _ORIGINAL)
    return env


def _set(env, values: dict) -> None:
    for key, value in values.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value


# What the tests pass jax.export.export as platforms: that of aotkit's default backend in the
# tests, cpu. jax.export's own default follows JAX's default backend, which in the lane's process
# is the accelerator, and aotkit.load_module refuses a module exported for it alone.
EXPORT_PLATFORMS = ("cpu",)
PLUGIN_ENV = "AOTKIT_TEST_PLUGIN"
SHARD_ENV = "AOTKIT_TEST_SHARD"


def shard(items: list) -> tuple[list, list]:
    """(kept, deselected): the lane's cases of part K of N (AOTKIT_TEST_SHARD=K/N), with every
    case outside the lane kept; all of them kept where the variable is not set."""
    text = os.environ.get(SHARD_ENV, "").strip()
    if not text:
        return items, []
    try:
        k, n = (int(part) for part in text.split("/"))
    except ValueError:
        k, n = -1, 0
    if not 0 <= k < n:
        raise pytest.UsageError(
            f"{SHARD_ENV}={text!r}: expected K/N with 0 <= K < N, such as 0/3 for the first of "
            f"three parts"
        )
    total = sum(item.get_closest_marker(MARK) is not None for item in items)
    start, stop = total * k // n, total * (k + 1) // n
    kept, dropped, index = [], [], 0
    for item in items:
        if item.get_closest_marker(MARK) is None:
            kept.append(item)
            continue
        (kept if start <= index < stop else dropped).append(item)
        index += 1
    return kept, dropped


@functools.cache
def unavailable() -> str | None:
    """Why the lane's backend does not start in this process, or None where it does. With
    AOTKIT_TEST_PLUGIN=PATH the backend is that PJRT plugin library, loaded under NAME (the
    CPU plugin of `aotkit[native]` runs the lane on a machine without an accelerator)."""
    from aotkit import backends

    try:
        plugin = os.environ.get(PLUGIN_ENV, "").strip()
        if plugin and not backends.known(NAME):
            backends.load_plugin(NAME, plugin)
        backends.get(NAME)
    except (RuntimeError, ValueError) as e:
        return f"{ENV}={NAME}: the backend does not start here: {e}"
    return None


def skip_unless_available() -> None:
    reason = unavailable()
    if reason is not None:
        pytest.skip(reason)


def skip_unless_children_may_use_it() -> None:
    """Skips a `lane_children` case unless this run is the one its children may use the
    lane's backend in (the lane on, this process off the accelerator)."""
    if not ON:
        pytest.skip(f"{ENV} names no accelerator backend: nothing for a child to run on")
    if not _children_only[0]:
        pytest.skip(
            f"this pytest process holds {NAME}, which one process at a time can use; run "
            f"these cases in a pytest of their own: -m {CHILDREN_MARK}"
        )


# Platforms whose float64 is emulated (XLA:TPU computes it with pairs of float32). Measured on a
# TPU v5e, where jax.jit gives the same values as aotkit: a float64 passed through a program
# comes back within about 2**-49 of itself (-2.9 as -2.8999999999999986), the sign of zero is
# lost (-0.0 comes back 0.0), and power's special cases are not IEEE's (nan ** 0, 1 ** nan and
# inf ** 3.0 are nan). The cases that check those exactly skip there, saying so
# (docs/backends.md, "64-bit values on a TPU").
FLOAT64_EMULATED = ("tpu",)


def float64_emulated(backend: str) -> bool:
    """Whether `backend` is the lane's and its platform's float64 is emulated."""
    if not ON or backend != NAME or unavailable() is not None:
        return False
    from aotkit import backends

    return backends.get(NAME).platform in FLOAT64_EMULATED


def skip_where_float64_is_emulated(backend: str, what: str) -> None:
    if float64_emulated(backend):
        pytest.skip(
            f"{backend}'s float64 is emulated (pairs of float32; jax.jit gives the same "
            f"values): {what}"
        )


# Runs the transform families' float64 and complex128 programs where float64 is emulated.
FLOAT64_DERIVATIVES = "AOTKIT_TEST_LANE_FLOAT64"


def skip_emulated_float64_derivatives(backend: str, dtype) -> None:
    """The transform families' float64 and complex128 programs skip where `backend` is the
    lane's and emulates float64, unless FLOAT64_DERIVATIVES=1: XLA:TPU compiles the emulated
    float64 of their transcendental functions for minutes (the elementwise family's one
    program 322 s, its 40 cases one by one 195 s: digamma alone 43 s, against 1.5 s for the
    whole family in float32). The rules are the float32 cases' and run in float64 on the
    CPU in every run of the suite."""
    import numpy as np

    wide = np.dtype(dtype) in (np.dtype(np.float64), np.dtype(np.complex128))
    if wide and float64_emulated(backend) and os.environ.get(FLOAT64_DERIVATIVES) != "1":
        pytest.skip(
            f"{backend}'s float64 is emulated, and XLA compiles these float64 derivative "
            "programs for minutes; the rules are the float32 cases' and run in float64 on "
            f"the CPU ({FLOAT64_DERIVATIVES}=1 runs them here)"
        )


def params() -> list:
    """The lane's backend as a pytest parameter (marked `lane`), or nothing when it is off."""
    return [pytest.param(NAME, marks=pytest.mark.lane, id=NAME)] if ON else []


def with_lane(names) -> list:
    """`names` (backends or pytest params) and the lane's backend."""
    return [*names, *params()]


def running() -> tuple[str, ...]:
    """The lane's backend where it is on and starts here (for loops over backends)."""
    return (NAME,) if ON and unavailable() is None else ()


def tolerances(backend: str | None, table: dict) -> dict:
    """`table` ((rtol, atol) by dtype), loosened to aotkit.crosscheck's entries for
    `backend`'s platform where that is an accelerator's."""
    if backend is None or backend in _OWN:
        return table
    from aotkit import crosscheck

    looser = crosscheck.PLATFORM_TOLERANCES.get(backend, {})
    return {
        dtype: (max(r, looser[dtype][0]), max(a, looser[dtype][1])) if dtype in looser else (r, a)
        for dtype, (r, a) in table.items()
    }
