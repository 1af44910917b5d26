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
    if not hasattr(lowered, "compile"):  # until the backends land (issue 3)
        return _run_raw_cpu(lowered, *args, **kwargs)
    compiled = lowered.compile(backend=backend)
    out = compiled(*args, **kwargs)
    return tree_util.tree_map(np.asarray, out)


def _run_raw_cpu(lowered, *args, **kwargs):
    import jax
    from jax.extend.backend import get_backend

    from aotkit._compat import xla_client

    xc = xla_client()
    client = get_backend("cpu")
    exe = client.compile_and_load(
        lowered.as_text(), xc.DeviceList(tuple(client.devices()[:1])), xc.CompileOptions()
    )
    leaves = tree_util.tree_leaves((args, kwargs))
    with jax.enable_x64(True):  # keep 64-bit inputs 64-bit
        bufs = [
            jax.device_put(np.asarray(x, dtype=s.dtype))
            for x, s in zip(leaves, lowered.flat_in_specs)
        ]
    outs = [np.asarray(o) for o in exe.execute(bufs)]
    return tree_util.tree_unflatten(lowered.out_tree, outs)
