"""The same perceptron as examples/mlp.py, written in pure JAX, for the JAX front end:

aotkit run examples/jax_mlp.py:predict --shapes 'f32[8,4]' 'f32[4,16]' 'f32[16]' 'f32[16,3]' -v

`--frontend auto` (the CLI's default) sees that `predict` uses JAX and not aotkit, so JAX
lowers it and aotkit compiles and runs the module; `-v` says so.
"""

import jax
import jax.numpy as jnp


def predict(x, w1, b1, w2):
    """Class probabilities of a batch `x` (batch, features) under a GELU hidden layer."""
    return jax.nn.softmax(jax.nn.gelu(x @ w1 + b1) @ w2, axis=-1)


def export(path="jax_mlp.jax_export"):
    """Writes `predict` as a jax.export artifact, to run with `aotkit run PATH`."""
    specs = [jax.ShapeDtypeStruct(s, jnp.float32) for s in [(8, 4), (4, 16), (16,), (16, 3)]]
    with open(path, "wb") as f:
        f.write(jax.export.export(jax.jit(predict))(*specs).serialize())
