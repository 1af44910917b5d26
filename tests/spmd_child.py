"""Runs checks of tests/spmd_checks.py in a process of its own, with 8 CPU devices.

    python -m tests.spmd_child check_a check_b ...

The parent (tests/test_spmd_devices.py) sets `XLA_FLAGS=--xla_force_host_platform_device_count=8`
for this process. Prints one JSON object on its last line: check name -> "ok" or the
traceback of its failure, so each check is reported as a test of its own.
"""

from __future__ import annotations

import json
import sys
import traceback


def main(names: list[str]) -> int:
    import jax

    from tests import spmd_checks

    results = {}
    if len(jax.devices()) != 8:
        message = f"the child has {len(jax.devices())} devices, not 8: XLA_FLAGS was not set"
        results = dict.fromkeys(names, message)
    else:
        for name in names:
            try:
                getattr(spmd_checks, name)()
            except BaseException:  # noqa: BLE001 - every failure is that check's report
                results[name] = traceback.format_exc()
            else:
                results[name] = "ok"
    sys.stdout.write("\n" + json.dumps(results) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
