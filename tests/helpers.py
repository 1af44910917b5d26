"""Test helpers: lower with aotkit, run on a backend, and return NumPy results."""

from __future__ import annotations

import contextlib
import importlib.util
import itertools
import os
import textwrap

import ml_dtypes
import numpy as np
import pytest
from jax import tree_util

import aotkit
from aotkit import _context
from aotkit.backends import iree
from aotkit.errors import CompileError
from tests import lane


def pythonpath(*folders) -> str:
    """A child's PYTHONPATH: `folders` before this process's own (where a host's JAX may be)."""
    inherited = os.environ.get("PYTHONPATH")
    return os.pathsep.join([*(str(f) for f in folders), *([inherited] if inherited else [])])


@contextlib.contextmanager
def ir_context():
    """A fresh lowering context, held, for tests that parse or build IR."""
    with _context.LoweringContext() as lc:
        yield lc


IREE_MISSING = "IREE is not installed; pip install 'aotkit[iree]' to run these cases on it"
_IREE = pytest.param(
    "iree", marks=pytest.mark.skipif(not iree.installed(), reason=IREE_MISSING), id="iree"
)
# Every backend the differential tests run a program on; PEERS are compared against cpu.
# AOTKIT_TEST_BACKEND adds an accelerator to both (tests/lane.py).
BACKENDS = lane.with_lane(["cpu", "interpreter", _IREE])
PEERS = lane.with_lane(["interpreter", _IREE])
# The backend of the running test's `backend` parameter (tests/conftest.py sets it), whose
# tolerances `assert_matches` uses.
CURRENT_BACKEND: list[str | None] = [None]


def compile_on(backend: str, lowered):
    """`lowered.compile(backend)`; on iree, a documented IREE limitation skips the case.

    The iree backend words what IREE 3.13 cannot compile as "IREE limitation: ..." (see
    aotkit/backends/iree.py); any other failure fails the test.
    """
    try:
        return lowered.compile(backend=backend)
    except CompileError as e:
        if backend == "iree" and iree.LIMITATION in str(e):
            pytest.skip(iree.LIMITATION + str(e).split(iree.LIMITATION, 1)[1].split("; ")[0])
        raise


def run_on(backend: str, fn, *args, **kwargs):
    """Lowers `fn` for concrete `args`, compiles on `backend`, runs, returns NumPy outputs."""
    lowered = aotkit.lower(fn, *args, **kwargs)
    return run_lowered(backend, lowered, *args, **kwargs)


def run_lowered(backend: str, lowered, *args, **kwargs):
    """Compiles `lowered` on `backend`, calls it with `args`, returns NumPy outputs."""
    compiled = compile_on(backend, lowered)
    out = compiled(*args, **kwargs)
    return tree_util.tree_map(np.asarray, out)


BF16 = np.dtype(ml_dtypes.bfloat16)

# (rtol, atol) by result dtype: loose enough for XLA's own transcendental and summation
# order, tight enough that a wrong formula fails.
TOLERANCES = {
    BF16: (2e-2, 2e-2),
    np.dtype(np.float16): (2e-3, 2e-3),
    np.dtype(np.float32): (2e-5, 1e-5),
    np.dtype(np.complex64): (2e-5, 1e-5),
    np.dtype(np.float64): (1e-11, 1e-11),
    np.dtype(np.complex128): (1e-11, 1e-11),
}


def assert_matches(got, want, label="", *, rtol=None, atol=None, tolerances=None, backend=None):
    """A result equals NumPy's: same dtype and shape; exact for bool and integers, close
    (NaN equal to NaN) for inexact dtypes, with `TOLERANCES` unless overridden, loosened
    for an accelerator's arithmetic where `backend` (default: the running test's) is the
    lane's (tests/lane.py)."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype, f"{label}: dtype {got.dtype}, NumPy gives {want.dtype}"
    assert got.shape == want.shape, f"{label}: shape {got.shape}, NumPy gives {want.shape}"
    if want.dtype.kind in "biu":
        np.testing.assert_array_equal(got, want, err_msg=label)
        return
    backend = CURRENT_BACKEND[0] if backend is None else backend
    table = lane.tolerances(backend, {**TOLERANCES, **(tolerances or {})})
    default_rtol, default_atol = table[want.dtype]
    wide = np.complex128 if want.dtype.kind == "c" else np.float64
    np.testing.assert_allclose(
        got.astype(wide),
        want.astype(wide),
        rtol=default_rtol if rtol is None else rtol,
        atol=default_atol if atol is None else atol,
        err_msg=label,
    )


_MODULES = itertools.count()


def module_from_source(folder, source: str):
    """(module, path) of `source` written to a new file in `folder` (with `import numpy as
    np` first) and imported: autograph reads the source of the functions it converts."""
    name = f"_source_{next(_MODULES)}"
    path = folder / f"{name}.py"
    path.write_text("import numpy as np\n" + textwrap.dedent(source))
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module, path
