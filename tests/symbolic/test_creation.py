"""Symbolic dimensions through arange/iota, zeros/ones/full of symbolic shape, eye, tril and
masks built from them (issue 25)."""

from __future__ import annotations

import numpy as np
import pytest

import aotkit.numpy as anp
from tests.symbolic.helpers import Case

CASES = {
    "arange": Case(lambda x: anp.arange(x.shape[0]) + x, "i32[b]"),
    "arange_float": Case(lambda x: anp.arange(x.shape[0], dtype=np.float32) * x, "f32[b]"),
    "arange_start_stop": Case(lambda x: anp.arange(1, x.shape[0] + 1), "f32[b]"),
    "arange_step": Case(lambda x: anp.arange(0, x.shape[0], 2), "f32[b]"),
    "zeros": Case(lambda x: anp.zeros((x.shape[0], 3)) + x[:, None], "f32[b]"),
    "ones_int": Case(lambda x: anp.ones(x.shape, np.int32), "f32[b,2]"),
    "full": Case(lambda x: anp.full((2, x.shape[0]), 1.5), "f32[b]"),
    "empty_like": Case(lambda x: anp.zeros_like(x) * 0, "f32[b,2]"),
    "eye": Case(lambda x: anp.eye(x.shape[0]) @ x, "f32[b,2]"),
    "tril": Case(lambda x: np.tril(x), "f32[b,b]"),
    "triu_k": Case(lambda x: np.triu(x, 1), "f32[b,b]"),
    "causal_mask": Case(
        lambda s: np.where(np.tril(anp.ones((s.shape[0], s.shape[0]), bool)), s, -np.inf),
        "f32[b,b]",
    ),
    "arange_reversed": Case(lambda x: anp.arange(x.shape[0], 0, -1) * x, "i32[b]"),
    "iota_compare": Case(lambda x: anp.arange(x.shape[0])[:, None] < anp.arange(3), "f32[b]"),
}


@pytest.mark.parametrize("name", CASES)
def test_creation(name):
    CASES[name].run()
