"""Test session settings.

Hypothesis runs a derandomized profile when `CI` is set, so CI results depend only on the
code; local runs keep the random profile, and a failure it finds becomes an explicit
example (or a parametrized case) in the test that found it.
"""

from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True, print_blob=True)
settings.register_profile("dev", print_blob=True)
settings.load_profile("ci" if os.environ.get("CI") else "dev")
