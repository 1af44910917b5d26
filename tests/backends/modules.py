"""Hand-written StableHLO for backend tests, parsed in aotkit's context (no tracer involved)."""

from __future__ import annotations

from jaxlib.mlir import ir

from aotkit import dtypes
from tests.helpers import ir_context


def parse(text: str) -> ir.Module:
    with ir_context():
        return ir.Module.parse(text)


def module(name: str, args: list[str], results: list[str], body: str) -> ir.Module:
    """`module @name` with `@main(%a0: args[0], ...) -> results { body }`."""
    params = ", ".join(f"%a{i}: {t}" for i, t in enumerate(args))
    outs = ", ".join(results)
    return parse(f"module @{name} {{ func.func public @main({params}) -> ({outs}) {{ {body} }} }}")


def tensor(shape, dtype) -> str:
    with ir_context(), ir.Location.unknown():
        return str(dtypes.tensor_type(tuple(shape), dtypes.canonicalize(dtype)))


def identity(shape, dtype) -> ir.Module:
    t = tensor(shape, dtype)
    return module("identity", [t], [t], f"return %a0 : {t}")


def seed() -> ir.Module:
    """sqrt(x * x) + 1 on f32[], the seed program, written by hand."""
    return module(
        "seed",
        ["tensor<f32>"],
        ["tensor<f32>"],
        """%0 = stablehlo.multiply %a0, %a0 : tensor<f32>
        %1 = stablehlo.sqrt %0 : tensor<f32>
        %c = stablehlo.constant dense<1.0> : tensor<f32>
        %2 = stablehlo.add %1, %c : tensor<f32>
        return %2 : tensor<f32>""",
    )
