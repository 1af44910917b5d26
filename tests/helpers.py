"""Test helpers: lower with aotkit, run on a backend, and return NumPy results."""

from __future__ import annotations

import numpy as np
from jax import tree_util

import aotkit


def run_on(backend: str, fn, *args, **kwargs):
    """Lowers `fn` for concrete `args`, compiles on `backend`, runs, returns NumPy outputs."""
    lowered = aotkit.lower(fn, *args, **kwargs)
    return run_lowered(backend, lowered, *args, **kwargs)


def run_lowered(backend: str, lowered, *args, **kwargs):
    """Compiles `lowered` on `backend`, calls it with `args`, returns NumPy outputs."""
    compiled = lowered.compile(backend=backend)
    out = compiled(*args, **kwargs)
    return tree_util.tree_map(np.asarray, out)
