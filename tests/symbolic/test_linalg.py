"""Symbolic dimensions through matmul, dot, einsum and batched products (issue 25)."""

from __future__ import annotations

import numpy as np
import pytest

import aotkit.numpy as anp
from tests.symbolic.helpers import Case

BT = {"symbol": None, "values": lambda n: {"b": min(n, 3), "t": n}}

CASES = {
    "matmul": Case(lambda x, w: x @ w, "f32[b,4]", "f32[4,3]"),
    "matmul_vector": Case(lambda x, v: x @ v, "f32[b,4]", "f32[4]"),
    "matmul_contract_symbol": Case(lambda x, y: x.T @ y, "f32[b,4]", "f32[b,3]"),
    "matmul_batched": Case(lambda x, w: x @ w, "f32[b,t,4]", "f32[4,5]", **BT),
    "matmul_batched_both": Case(
        lambda q, k: q @ np.swapaxes(k, -1, -2), "f32[b,t,4]", "f32[b,t,4]", **BT
    ),  # fmt: skip
    "dot": Case(np.dot, "f32[b,4]", "f32[4,2]"),
    "vdot_symbolic": Case(lambda x, y: np.dot(x, y), "f32[b]", "f32[b]"),
    "einsum_attention": Case(
        lambda q, k: anp.einsum("btd,bsd->bts", q, k), "f32[b,t,4]", "f32[b,t,4]", **BT
    ),  # fmt: skip
    "einsum_outer": Case(lambda x, y: anp.einsum("i,j->ij", x, y), "f32[b]", "f32[3]"),
    "einsum_trace_like": Case(lambda x: anp.einsum("bi,bi->b", x, x), "f32[b,3]"),
    "outer": Case(np.outer, "f32[b]", "f32[3]"),
    "tensordot": Case(lambda x, y: np.tensordot(x, y, axes=([1], [0])), "f32[b,4]", "f32[4,2]"),
    "matmul_ints": Case(lambda x, w: x @ w, "i32[b,4]", "i32[4,3]"),
}


@pytest.mark.parametrize("name", CASES)
def test_linalg(name):
    CASES[name].run()
