"""Unclear errors: each says where, what, and what to do (issue 26, class "unclear")."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

import aotkit

_NO_SOURCE = textwrap.dedent(
    """
    import numpy as np, aotkit
    def f(x):
        if x > 0:
            return x
        return -x
    try:
        aotkit.jit(f)(np.float32(1))
    except TypeError as e:
        print(e)
    """
)


def test_autograph_without_source_says_so():
    proc = subprocess.run(
        [sys.executable, "-c", _NO_SOURCE], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().endswith(
        "; autograph, which turns Python control flow on traced values into StableHLO, could "
        "not read this function's source (<string>: code from python -c, exec or an "
        "interactive prompt), so it ran as written: define the function in a .py file"
    )
    assert proc.stdout.startswith("bool() of a traced bool[] array (at <string>:4)")


def test_a_function_with_source_gets_no_such_note():
    def f(x):
        return x if bool(x > 0) else -x  # bool() is never converted

    with pytest.raises(TypeError) as e:
        aotkit.jit(f)(np.float32(1))
    assert "could not read this function's source" not in str(e.value)
