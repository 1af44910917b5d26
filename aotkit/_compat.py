"""The one module that imports private jax/jaxlib names.

A jaxlib upgrade that moves any of these touches this file only. Everything else in
aotkit uses the public `jaxlib.mlir` bindings, `jax.tree_util` and `jax.extend`.
"""

from __future__ import annotations

from jaxlib.mlir import ir
from jaxlib.mlir._mlir_libs import _jax_mlir_ext


def register_upstream_dialects(registry: ir.DialectRegistry) -> None:
    """Registers func, arith, ... (the upstream dialects jaxlib links in) into `registry`."""
    _jax_mlir_ext.register_dialects(registry)


def xla_client():
    """jaxlib's XLA client module: CompileOptions, DeviceList, plugin loading."""
    from jax._src.lib import xla_client

    return xla_client
