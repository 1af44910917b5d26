"""A two-layer perceptron written with aotkit.numpy, for the README's first command:

aotkit lower examples/mlp.py:predict --shapes 'f32[8,4]' 'f32[4,16]' 'f32[16]' 'f32[16,3]'
"""

import aotkit.numpy as anp


def gelu(x):
    """The tanh approximation of GELU."""
    return 0.5 * x * (1.0 + anp.tanh(0.7978845608 * (x + 0.044715 * x**3)))


def predict(x, w1, b1, w2):
    """Class probabilities of a batch `x` (batch, features) under a GELU hidden layer."""
    logits = gelu(x @ w1 + b1) @ w2
    shifted = logits - anp.max(logits, axis=-1, keepdims=True)
    e = anp.exp(shifted)
    return e / anp.sum(e, axis=-1, keepdims=True)
