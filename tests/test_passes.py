"""The pass pipeline: aotkit's Python passes on IR text, pipeline parsing and its errors,
and a differential check that the default pipeline never changes what a program computes.
"""

from __future__ import annotations

import re

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jaxlib.mlir import ir

import aotkit
import aotkit.numpy as anp
from aotkit import dumps, lax, passes
from tests.helpers import ir_context, run_lowered

V4 = "tensor<4xf32>"


def _module(body: str, args: str = f"%x: {V4}", results: str = V4) -> str:
    return f"module {{\n  func.func public @main({args}) -> ({results}) {{\n{body}\n  }}\n}}"


def _canon(text: str) -> str:
    with ir_context():
        return str(ir.Module.parse(text))


def _parse(text: str) -> ir.Module:
    with ir_context():
        return ir.Module.parse(text)


def _run(pipeline: str, text: str, **kwargs) -> str:
    with ir_context():
        module = ir.Module.parse(text)
        passes.run_pipeline(module, pipeline, name="t", **kwargs)
        return str(module)


ALG, FOLD, DCE, SIMPLIFY = (
    "aotkit-algebraic-simplify",
    "aotkit-fold-constants",
    "aotkit-dce",
    "aotkit-simplify",
)
RETURN_X = f"return %x : {V4}"


def _m(*lines: str, args: str = f"%x: {V4}", results: str = V4) -> str:
    return _module("\n".join(lines), args, results)


_BIG = passes.FOLD_LIMIT + 1
LARGE_DENSE_CASE = (
    "aotkit-fold-constants",
    "large-dense-kept",
    _m(f"%a = stablehlo.constant dense<{list(range(_BIG))}> : tensor<{_BIG}xi32>",
       f"%0 = stablehlo.negate %a : tensor<{_BIG}xi32>",
       f"return %0 : tensor<{_BIG}xi32>",
       args="", results=f"tensor<{_BIG}xi32>"),
    "same",
)  # fmt: skip

# (pass, id, module before, module after); "same": the pass must leave the module unchanged.
CASES = [
    (ALG, "add-zero-rhs",
     _m("%c = stablehlo.constant dense<0.0> : tensor<4xf32>",
        "%0 = stablehlo.add %x, %c : tensor<4xf32>",
        "return %0 : tensor<4xf32>"),
     _m("return %x : tensor<4xf32>")),
    (ALG, "add-zero-lhs",
     _m("%c = stablehlo.constant dense<0.0> : tensor<4xf32>",
        "%0 = stablehlo.add %c, %x : tensor<4xf32>",
        "return %0 : tensor<4xf32>"),
     _m("return %x : tensor<4xf32>")),
    (ALG, "add-negative-zero",
     _m("%c = stablehlo.constant dense<-0.0> : tensor<4xf32>",
        "%0 = stablehlo.add %x, %c : tensor<4xf32>",
        "return %0 : tensor<4xf32>"),
     _m("return %x : tensor<4xf32>")),
    (ALG, "int-add-zero",
     _m("%c = stablehlo.constant dense<0> : tensor<3xi32>",
        "%0 = stablehlo.add %x, %c : tensor<3xi32>",
        "return %0 : tensor<3xi32>",
        args="%x: tensor<3xi32>", results="tensor<3xi32>"),
     _m("return %x : tensor<3xi32>",
        args="%x: tensor<3xi32>", results="tensor<3xi32>")),
    (ALG, "bool-add-false",
     _m("%c = stablehlo.constant dense<false> : tensor<3xi1>",
        "%0 = stablehlo.add %x, %c : tensor<3xi1>",
        "return %0 : tensor<3xi1>",
        args="%x: tensor<3xi1>", results="tensor<3xi1>"),
     _m("return %x : tensor<3xi1>",
        args="%x: tensor<3xi1>", results="tensor<3xi1>")),
    (ALG, "add-one-kept",
     _m("%c = stablehlo.constant dense<1.0> : tensor<4xf32>",
        "%0 = stablehlo.add %x, %c : tensor<4xf32>",
        "return %0 : tensor<4xf32>"),
     "same"),
    (ALG, "sub-zero",
     _m("%c = stablehlo.constant dense<0.0> : tensor<4xf32>",
        "%0 = stablehlo.subtract %x, %c : tensor<4xf32>",
        "return %0 : tensor<4xf32>"),
     _m("return %x : tensor<4xf32>")),
    (ALG, "zero-minus-x-kept",
     _m("%c = stablehlo.constant dense<0.0> : tensor<4xf32>",
        "%0 = stablehlo.subtract %c, %x : tensor<4xf32>",
        "return %0 : tensor<4xf32>"),
     "same"),
    (ALG, "mul-one-rhs",
     _m("%c = stablehlo.constant dense<1.0> : tensor<4xf32>",
        "%0 = stablehlo.multiply %x, %c : tensor<4xf32>",
        "return %0 : tensor<4xf32>"),
     _m("return %x : tensor<4xf32>")),
    (ALG, "mul-one-lhs",
     _m("%c = stablehlo.constant dense<1.0> : tensor<4xf32>",
        "%0 = stablehlo.multiply %c, %x : tensor<4xf32>",
        "return %0 : tensor<4xf32>"),
     _m("return %x : tensor<4xf32>")),
    (ALG, "mul-zero-kept",
     _m("%c = stablehlo.constant dense<0.0> : tensor<4xf32>",
        "%0 = stablehlo.multiply %x, %c : tensor<4xf32>",
        "return %0 : tensor<4xf32>"),
     "same"),
    (ALG, "double-negation",
     _m("%0 = stablehlo.negate %x : tensor<4xf32>",
        "%1 = stablehlo.negate %0 : tensor<4xf32>",
        "return %1 : tensor<4xf32>"),
     _m("return %x : tensor<4xf32>")),
    (ALG, "single-negation-kept",
     _m("%0 = stablehlo.negate %x : tensor<4xf32>",
        "return %0 : tensor<4xf32>"),
     "same"),
    (ALG, "triple-negation",
     _m("%0 = stablehlo.negate %x : tensor<4xf32>",
        "%1 = stablehlo.negate %0 : tensor<4xf32>",
        "%2 = stablehlo.negate %1 : tensor<4xf32>",
        "return %2 : tensor<4xf32>"),
     _m("%0 = stablehlo.negate %x : tensor<4xf32>",
        "return %0 : tensor<4xf32>")),
    (ALG, "convert-same-type",
     _m("%0 = stablehlo.convert %x : tensor<4xf32>",
        "return %0 : tensor<4xf32>"),
     _m("return %x : tensor<4xf32>")),
    (ALG, "convert-to-f64-kept",
     _m("%0 = stablehlo.convert %x : (tensor<4xf32>) -> tensor<4xf64>",
        "return %0 : tensor<4xf64>",
        results="tensor<4xf64>"),
     "same"),
    (ALG, "reshape-same-type",
     _m("%0 = stablehlo.reshape %x : (tensor<4xf32>) -> tensor<4xf32>",
        "return %0 : tensor<4xf32>"),
     _m("return %x : tensor<4xf32>")),
    (ALG, "reshape-kept",
     _m("%0 = stablehlo.reshape %x : (tensor<4xf32>) -> tensor<2x2xf32>",
        "return %0 : tensor<2x2xf32>",
        results="tensor<2x2xf32>"),
     "same"),
    (ALG, "broadcast-same-type",
     _m("%0 = stablehlo.broadcast_in_dim %x, dims = [0] : (tensor<4xf32>) -> tensor<4xf32>",
        "return %0 : tensor<4xf32>"),
     _m("return %x : tensor<4xf32>")),
    (ALG, "broadcast-permuting-kept",
     _m("%0 = stablehlo.broadcast_in_dim %x, dims = [1, 0] : (tensor<2x2xf32>) -> tensor<2x2xf32>",
        "return %0 : tensor<2x2xf32>",
        args="%x: tensor<2x2xf32>", results="tensor<2x2xf32>"),
     "same"),
    (ALG, "transpose-identity",
     _m("%0 = stablehlo.transpose %x, dims = [0, 1] : (tensor<2x2xf32>) -> tensor<2x2xf32>",
        "return %0 : tensor<2x2xf32>",
        args="%x: tensor<2x2xf32>", results="tensor<2x2xf32>"),
     _m("return %x : tensor<2x2xf32>",
        args="%x: tensor<2x2xf32>", results="tensor<2x2xf32>")),
    (ALG, "transpose-swap-kept",
     _m("%0 = stablehlo.transpose %x, dims = [1, 0] : (tensor<2x2xf32>) -> tensor<2x2xf32>",
        "return %0 : tensor<2x2xf32>",
        args="%x: tensor<2x2xf32>", results="tensor<2x2xf32>"),
     "same"),
    (ALG, "transposes-cancel",
     _m("%0 = stablehlo.transpose %x, dims = [1, 2, 0]"
        " : (tensor<2x3x4xf32>) -> tensor<3x4x2xf32>",
        "%1 = stablehlo.transpose %0, dims = [2, 0, 1]"
        " : (tensor<3x4x2xf32>) -> tensor<2x3x4xf32>",
        "return %1 : tensor<2x3x4xf32>",
        args="%x: tensor<2x3x4xf32>", results="tensor<2x3x4xf32>"),
     _m("return %x : tensor<2x3x4xf32>",
        args="%x: tensor<2x3x4xf32>", results="tensor<2x3x4xf32>")),
    (ALG, "transposes-compose-kept",
     _m("%0 = stablehlo.transpose %x, dims = [1, 2, 0]"
        " : (tensor<2x2x2xf32>) -> tensor<2x2x2xf32>",
        "%1 = stablehlo.transpose %0, dims = [1, 2, 0]"
        " : (tensor<2x2x2xf32>) -> tensor<2x2x2xf32>",
        "return %1 : tensor<2x2x2xf32>",
        args="%x: tensor<2x2x2xf32>", results="tensor<2x2x2xf32>"),
     "same"),
    (ALG, "select-true",
     _m("%c = stablehlo.constant dense<true> : tensor<4xi1>",
        "%0 = stablehlo.select %c, %x, %y : tensor<4xi1>, tensor<4xf32>",
        "return %0 : tensor<4xf32>",
        args="%x: tensor<4xf32>, %y: tensor<4xf32>"),
     _m("return %x : tensor<4xf32>",
        args="%x: tensor<4xf32>, %y: tensor<4xf32>")),
    (ALG, "select-false",
     _m("%c = stablehlo.constant dense<false> : tensor<4xi1>",
        "%0 = stablehlo.select %c, %y, %x : tensor<4xi1>, tensor<4xf32>",
        "return %0 : tensor<4xf32>",
        args="%x: tensor<4xf32>, %y: tensor<4xf32>"),
     _m("return %x : tensor<4xf32>",
        args="%x: tensor<4xf32>, %y: tensor<4xf32>")),
    (ALG, "broadcast-zero-needs-folding",
     _m("%c = stablehlo.constant dense<0.0> : tensor<f32>",
        "%b = stablehlo.broadcast_in_dim %c, dims = [] : (tensor<f32>) -> tensor<4xf32>",
        "%0 = stablehlo.add %x, %b : tensor<4xf32>",
        "return %0 : tensor<4xf32>"),
     "same"),
    (FOLD, "add-splats",
     _m("%a = stablehlo.constant dense<2.0> : tensor<4xf32>",
        "%b = stablehlo.constant dense<3.0> : tensor<4xf32>",
        "%0 = stablehlo.add %a, %b : tensor<4xf32>",
        "return %0 : tensor<4xf32>",
        args=""),
     _m("%c = stablehlo.constant dense<5.0> : tensor<4xf32>",
        "return %c : tensor<4xf32>",
        args="")),
    (FOLD, "i8-add-wraps",
     _m("%a = stablehlo.constant dense<127> : tensor<2xi8>",
        "%b = stablehlo.constant dense<1> : tensor<2xi8>",
        "%0 = stablehlo.add %a, %b : tensor<2xi8>",
        "return %0 : tensor<2xi8>",
        args="", results="tensor<2xi8>"),
     _m("%c = stablehlo.constant dense<-128> : tensor<2xi8>",
        "return %c : tensor<2xi8>",
        args="", results="tensor<2xi8>")),
    (FOLD, "u8-subtract-wraps",
     _m("%a = stablehlo.constant dense<0> : tensor<2xui8>",
        "%b = stablehlo.constant dense<1> : tensor<2xui8>",
        "%0 = stablehlo.subtract %a, %b : tensor<2xui8>",
        "return %0 : tensor<2xui8>",
        args="", results="tensor<2xui8>"),
     _m("%c = stablehlo.constant dense<255> : tensor<2xui8>",
        "return %c : tensor<2xui8>",
        args="", results="tensor<2xui8>")),
    (FOLD, "mul-dense",
     _m("%a = stablehlo.constant dense<[1.0, 2.0, 3.0, 4.0]> : tensor<4xf32>",
        "%b = stablehlo.constant dense<2.0> : tensor<4xf32>",
        "%0 = stablehlo.multiply %a, %b : tensor<4xf32>",
        "return %0 : tensor<4xf32>",
        args=""),
     _m("%c = stablehlo.constant dense<[2.0, 4.0, 6.0, 8.0]> : tensor<4xf32>",
        "return %c : tensor<4xf32>",
        args="")),
    (FOLD, "abs-i32",
     _m("%a = stablehlo.constant dense<[-1, 2, -3, 4]> : tensor<4xi32>",
        "%0 = stablehlo.abs %a : tensor<4xi32>",
        "return %0 : tensor<4xi32>",
        args="", results="tensor<4xi32>"),
     _m("%c = stablehlo.constant dense<[1, 2, 3, 4]> : tensor<4xi32>",
        "return %c : tensor<4xi32>",
        args="", results="tensor<4xi32>")),
    (FOLD, "negate-f64",
     _m("%a = stablehlo.constant dense<1.5> : tensor<4xf64>",
        "%0 = stablehlo.negate %a : tensor<4xf64>",
        "return %0 : tensor<4xf64>",
        args="", results="tensor<4xf64>"),
     _m("%c = stablehlo.constant dense<-1.5> : tensor<4xf64>",
        "return %c : tensor<4xf64>",
        args="", results="tensor<4xf64>")),
    (FOLD, "not-bool",
     _m("%a = stablehlo.constant dense<true> : tensor<4xi1>",
        "%0 = stablehlo.not %a : tensor<4xi1>",
        "return %0 : tensor<4xi1>",
        args="", results="tensor<4xi1>"),
     _m("%c = stablehlo.constant dense<false> : tensor<4xi1>",
        "return %c : tensor<4xi1>",
        args="", results="tensor<4xi1>")),
    (FOLD, "xor-i32",
     _m("%a = stablehlo.constant dense<[1, 2, 3, 4]> : tensor<4xi32>",
        "%b = stablehlo.constant dense<6> : tensor<4xi32>",
        "%0 = stablehlo.xor %a, %b : tensor<4xi32>",
        "return %0 : tensor<4xi32>",
        args="", results="tensor<4xi32>"),
     _m("%c = stablehlo.constant dense<[7, 4, 5, 2]> : tensor<4xi32>",
        "return %c : tensor<4xi32>",
        args="", results="tensor<4xi32>")),
    (FOLD, "max-i32",
     _m("%a = stablehlo.constant dense<[1, 7, 3, 9]> : tensor<4xi32>",
        "%b = stablehlo.constant dense<4> : tensor<4xi32>",
        "%0 = stablehlo.maximum %a, %b : tensor<4xi32>",
        "return %0 : tensor<4xi32>",
        args="", results="tensor<4xi32>"),
     _m("%c = stablehlo.constant dense<[4, 7, 4, 9]> : tensor<4xi32>",
        "return %c : tensor<4xi32>",
        args="", results="tensor<4xi32>")),
    (FOLD, "max-f32-kept",
     _m("%a = stablehlo.constant dense<-0.0> : tensor<4xf32>",
        "%b = stablehlo.constant dense<0.0> : tensor<4xf32>",
        "%0 = stablehlo.maximum %a, %b : tensor<4xf32>",
        "return %0 : tensor<4xf32>",
        args=""),
     "same"),
    (FOLD, "divide-kept",
     _m("%a = stablehlo.constant dense<1.0> : tensor<4xf32>",
        "%b = stablehlo.constant dense<3.0> : tensor<4xf32>",
        "%0 = stablehlo.divide %a, %b : tensor<4xf32>",
        "return %0 : tensor<4xf32>",
        args=""),
     "same"),
    (FOLD, "sine-kept",
     _m("%a = stablehlo.constant dense<1.0> : tensor<4xf32>",
        "%0 = stablehlo.sine %a : tensor<4xf32>",
        "return %0 : tensor<4xf32>",
        args=""),
     "same"),
    (FOLD, "compare-splats",
     _m("%a = stablehlo.constant dense<1.0> : tensor<4xf32>",
        "%b = stablehlo.constant dense<2.0> : tensor<4xf32>",
        "%0 = stablehlo.compare LT, %a, %b, FLOAT : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xi1>",
        "return %0 : tensor<4xi1>",
        args="", results="tensor<4xi1>"),
     _m("%c = stablehlo.constant dense<true> : tensor<4xi1>",
        "return %c : tensor<4xi1>",
        args="", results="tensor<4xi1>")),
    (FOLD, "compare-dense-uniform",
     _m("%a = stablehlo.constant dense<[1, 2, 3, 4]> : tensor<4xi32>",
        "%b = stablehlo.constant dense<[5, 6, 7, 8]> : tensor<4xi32>",
        "%0 = stablehlo.compare GE, %a, %b : (tensor<4xi32>, tensor<4xi32>) -> tensor<4xi1>",
        "return %0 : tensor<4xi1>",
        args="", results="tensor<4xi1>"),
     _m("%c = stablehlo.constant dense<false> : tensor<4xi1>",
        "return %c : tensor<4xi1>",
        args="", results="tensor<4xi1>")),
    (FOLD, "compare-mixed-bool-kept",
     _m("%a = stablehlo.constant dense<[1, 2, 3, 4]> : tensor<4xi32>",
        "%b = stablehlo.constant dense<2> : tensor<4xi32>",
        "%0 = stablehlo.compare LT, %a, %b : (tensor<4xi32>, tensor<4xi32>) -> tensor<4xi1>",
        "return %0 : tensor<4xi1>",
        args="", results="tensor<4xi1>"),
     "same"),
    (FOLD, "compare-totalorder-kept",
     _m("%a = stablehlo.constant dense<1.0> : tensor<4xf32>",
        "%b = stablehlo.constant dense<2.0> : tensor<4xf32>",
        "%0 = stablehlo.compare LT, %a, %b, TOTALORDER"
        " : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xi1>",
        "return %0 : tensor<4xi1>",
        args="", results="tensor<4xi1>"),
     "same"),
    (FOLD, "select-dense",
     _m("%p = stablehlo.constant dense<[true, false, true, false]> : tensor<4xi1>",
        "%a = stablehlo.constant dense<[1.0, 2.0, 3.0, 4.0]> : tensor<4xf32>",
        "%b = stablehlo.constant dense<0.0> : tensor<4xf32>",
        "%0 = stablehlo.select %p, %a, %b : tensor<4xi1>, tensor<4xf32>",
        "return %0 : tensor<4xf32>",
        args=""),
     _m("%c = stablehlo.constant dense<[1.0, 0.0, 3.0, 0.0]> : tensor<4xf32>",
        "return %c : tensor<4xf32>",
        args="")),
    (FOLD, "convert-i32-to-f32",
     _m("%a = stablehlo.constant dense<[1, 2, 3, 4]> : tensor<4xi32>",
        "%0 = stablehlo.convert %a : (tensor<4xi32>) -> tensor<4xf32>",
        "return %0 : tensor<4xf32>",
        args=""),
     _m("%c = stablehlo.constant dense<[1.0, 2.0, 3.0, 4.0]> : tensor<4xf32>",
        "return %c : tensor<4xf32>",
        args="")),
    (FOLD, "convert-f64-to-f32-rounds",
     _m("%a = stablehlo.constant dense<0.1> : tensor<4xf64>",
        "%0 = stablehlo.convert %a : (tensor<4xf64>) -> tensor<4xf32>",
        "return %0 : tensor<4xf32>",
        args=""),
     _m("%c = stablehlo.constant dense<0.1> : tensor<4xf32>",
        "return %c : tensor<4xf32>",
        args="")),
    (FOLD, "convert-f32-to-i32-kept",
     _m("%a = stablehlo.constant dense<3.5> : tensor<4xf32>",
        "%0 = stablehlo.convert %a : (tensor<4xf32>) -> tensor<4xi32>",
        "return %0 : tensor<4xi32>",
        args="", results="tensor<4xi32>"),
     "same"),
    (FOLD, "broadcast-splat",
     _m("%a = stablehlo.constant dense<2.0> : tensor<f32>",
        "%0 = stablehlo.broadcast_in_dim %a, dims = [] : (tensor<f32>) -> tensor<2x3xf32>",
        "return %0 : tensor<2x3xf32>",
        args="", results="tensor<2x3xf32>"),
     _m("%c = stablehlo.constant dense<2.0> : tensor<2x3xf32>",
        "return %c : tensor<2x3xf32>",
        args="", results="tensor<2x3xf32>")),
    (FOLD, "broadcast-dense-trailing",
     _m("%a = stablehlo.constant dense<[1, 2]> : tensor<2xi32>",
        "%0 = stablehlo.broadcast_in_dim %a, dims = [1] : (tensor<2xi32>) -> tensor<3x2xi32>",
        "return %0 : tensor<3x2xi32>",
        args="", results="tensor<3x2xi32>"),
     _m("%c = stablehlo.constant dense<[[1, 2], [1, 2], [1, 2]]> : tensor<3x2xi32>",
        "return %c : tensor<3x2xi32>",
        args="", results="tensor<3x2xi32>")),
    (FOLD, "broadcast-dense-leading",
     _m("%a = stablehlo.constant dense<[1, 2]> : tensor<2xi32>",
        "%0 = stablehlo.broadcast_in_dim %a, dims = [0] : (tensor<2xi32>) -> tensor<2x3xi32>",
        "return %0 : tensor<2x3xi32>",
        args="", results="tensor<2x3xi32>"),
     _m("%c = stablehlo.constant dense<[[1, 1, 1], [2, 2, 2]]> : tensor<2x3xi32>",
        "return %c : tensor<2x3xi32>",
        args="", results="tensor<2x3xi32>")),
    (FOLD, "broadcast-dense-permuted",
     _m("%a = stablehlo.constant dense<[[1, 2, 3], [4, 5, 6]]> : tensor<2x3xi32>",
        "%0 = stablehlo.broadcast_in_dim %a, dims = [2, 0]"
        " : (tensor<2x3xi32>) -> tensor<3x1x2xi32>",
        "return %0 : tensor<3x1x2xi32>",
        args="", results="tensor<3x1x2xi32>"),
     _m("%c = stablehlo.constant dense<[[[1, 4]], [[2, 5]], [[3, 6]]]> : tensor<3x1x2xi32>",
        "return %c : tensor<3x1x2xi32>",
        args="", results="tensor<3x1x2xi32>")),
    (FOLD, "transpose-dense",
     _m("%a = stablehlo.constant dense<[[1, 2], [3, 4]]> : tensor<2x2xi32>",
        "%0 = stablehlo.transpose %a, dims = [1, 0] : (tensor<2x2xi32>) -> tensor<2x2xi32>",
        "return %0 : tensor<2x2xi32>",
        args="", results="tensor<2x2xi32>"),
     _m("%c = stablehlo.constant dense<[[1, 3], [2, 4]]> : tensor<2x2xi32>",
        "return %c : tensor<2x2xi32>",
        args="", results="tensor<2x2xi32>")),
    (FOLD, "reshape-dense",
     _m("%a = stablehlo.constant dense<[1, 2, 3, 4]> : tensor<4xi32>",
        "%0 = stablehlo.reshape %a : (tensor<4xi32>) -> tensor<2x2xi32>",
        "return %0 : tensor<2x2xi32>",
        args="", results="tensor<2x2xi32>"),
     _m("%c = stablehlo.constant dense<[[1, 2], [3, 4]]> : tensor<2x2xi32>",
        "return %c : tensor<2x2xi32>",
        args="", results="tensor<2x2xi32>")),
    (FOLD, "bf16-splat-add",
     _m("%a = stablehlo.constant dense<1.5> : tensor<4xbf16>",
        "%b = stablehlo.constant dense<2.25> : tensor<4xbf16>",
        "%0 = stablehlo.add %a, %b : tensor<4xbf16>",
        "return %0 : tensor<4xbf16>",
        args="", results="tensor<4xbf16>"),
     _m("%c = stablehlo.constant dense<3.75> : tensor<4xbf16>",
        "return %c : tensor<4xbf16>",
        args="", results="tensor<4xbf16>")),
    (FOLD, "f16-splat-multiply",
     _m("%a = stablehlo.constant dense<1.5> : tensor<4xf16>",
        "%b = stablehlo.constant dense<-2.0> : tensor<4xf16>",
        "%0 = stablehlo.multiply %a, %b : tensor<4xf16>",
        "return %0 : tensor<4xf16>",
        args="", results="tensor<4xf16>"),
     _m("%c = stablehlo.constant dense<-3.0> : tensor<4xf16>",
        "return %c : tensor<4xf16>",
        args="", results="tensor<4xf16>")),
    (FOLD, "bf16-dense-kept",
     _m("%a = stablehlo.constant dense<[1.0, 2.0]> : tensor<2xbf16>",
        "%0 = stablehlo.negate %a : tensor<2xbf16>",
        "return %0 : tensor<2xbf16>",
        args="", results="tensor<2xbf16>"),
     "same"),
    (SIMPLIFY, "bounded-dynamic-kept",
     _m("%c = stablehlo.constant dense<[1, 2]> : tensor<2xi32>",
        "%0 = stablehlo.broadcast_in_dim %c, dims = [1]"
        " : (tensor<2xi32>) -> tensor<?x2xi32, #stablehlo.bounds<4, ?>>",
        "return %0 : tensor<?x2xi32, #stablehlo.bounds<4, ?>>",
        args="", results="tensor<?x2xi32, #stablehlo.bounds<4, ?>>"),
     "same"),
    (FOLD, "complex-kept",
     _m("%a = stablehlo.constant dense<(1.0, 2.0)> : tensor<2xcomplex<f32>>",
        "%0 = stablehlo.add %a, %a : tensor<2xcomplex<f32>>",
        "return %0 : tensor<2xcomplex<f32>>",
        args="", results="tensor<2xcomplex<f32>>"),
     "same"),
    LARGE_DENSE_CASE,
    (FOLD, "large-splat-folded",
     _m("%a = stablehlo.constant dense<3> : tensor<100000xi32>",
        "%0 = stablehlo.negate %a : tensor<100000xi32>",
        "return %0 : tensor<100000xi32>",
        args="", results="tensor<100000xi32>"),
     _m("%c = stablehlo.constant dense<-3> : tensor<100000xi32>",
        "return %c : tensor<100000xi32>",
        args="", results="tensor<100000xi32>")),
    (DCE, "dead-chain",
     _m("%0 = stablehlo.add %x, %x : tensor<4xf32>",
        "%1 = stablehlo.multiply %0, %0 : tensor<4xf32>",
        "%c = stablehlo.constant dense<1.0> : tensor<4xf32>",
        "return %x : tensor<4xf32>"),
     _m("return %x : tensor<4xf32>")),
    (DCE, "used-kept",
     _m("%0 = stablehlo.add %x, %x : tensor<4xf32>",
        "return %0 : tensor<4xf32>"),
     "same"),
    (DCE, "custom-call-kept",
     _m("%0 = stablehlo.custom_call @effect(%x) {has_side_effect = true}"
        " : (tensor<4xf32>) -> tensor<4xf32>",
        "return %x : tensor<4xf32>"),
     "same"),
    (SIMPLIFY, "broadcast-zero",
     _m("%c = stablehlo.constant dense<0.0> : tensor<f32>",
        "%b = stablehlo.broadcast_in_dim %c, dims = [] : (tensor<f32>) -> tensor<4xf32>",
        "%0 = stablehlo.add %x, %b : tensor<4xf32>",
        "return %0 : tensor<4xf32>"),
     _m("return %x : tensor<4xf32>")),
    (SIMPLIFY, "fold-then-identity",
     _m("%a = stablehlo.constant dense<2.0> : tensor<4xf32>",
        "%b = stablehlo.constant dense<1.0> : tensor<4xf32>",
        "%d = stablehlo.subtract %a, %b : tensor<4xf32>",
        "%0 = stablehlo.multiply %x, %d : tensor<4xf32>",
        "return %0 : tensor<4xf32>"),
     _m("return %x : tensor<4xf32>")),
    (SIMPLIFY, "inside-reduce-body",
     _m("%i = stablehlo.constant dense<0.0> : tensor<f32>",
        "%0 = stablehlo.reduce(%x init: %i) across dimensions = [0]"
        " : (tensor<4xf32>, tensor<f32>) -> tensor<f32>",
        " reducer(%a: tensor<f32>, %b: tensor<f32>) {",
        "  %one = stablehlo.constant dense<1.0> : tensor<f32>",
        "  %s = stablehlo.add %a, %b : tensor<f32>",
        "  %t = stablehlo.multiply %s, %one : tensor<f32>",
        "  stablehlo.return %t : tensor<f32>",
        " }",
        "return %0 : tensor<f32>",
        results="tensor<f32>"),
     _m("%i = stablehlo.constant dense<0.0> : tensor<f32>",
        "%0 = stablehlo.reduce(%x init: %i) across dimensions = [0]"
        " : (tensor<4xf32>, tensor<f32>) -> tensor<f32>",
        " reducer(%a: tensor<f32>, %b: tensor<f32>) {",
        "  %s = stablehlo.add %a, %b : tensor<f32>",
        "  stablehlo.return %s : tensor<f32>",
        " }",
        "return %0 : tensor<f32>",
        results="tensor<f32>")),

]  # fmt: skip
CASE_IDS = [f"{p}:{i}" for p, i, _, _ in CASES]


@pytest.mark.parametrize("pass_name, case, before, after", CASES, ids=CASE_IDS)
def test_pass_rewrites_ir_text(pass_name, case, before, after):
    expected = _canon(before if after == "same" else after)
    assert _run(pass_name, before) == expected


@pytest.mark.parametrize("pass_name, case, before, after", CASES, ids=CASE_IDS)
def test_pass_reports_change_and_reaches_fixed_point(pass_name, case, before, after):
    fn = passes.PYTHON_PASSES[pass_name].run
    module = _parse(before)
    with ir_context():
        assert fn(module) is (after != "same")
        assert fn(module) is False
        module.operation.verify()


# --- Pipelines ---------------------------------------------------------------------------------

DEFAULT_STEPS = [
    "aotkit-inline",
    "symbol-dce",
    "chlo-legalize-to-stablehlo",
    "stablehlo-refine-shapes",
    "canonicalize",
    "cse",
    "aotkit-simplify",
    "cse",
]
TWO_FUNCTIONS = _module(f"%0 = func.call @helper(%x) : ({V4}) -> {V4}\nreturn %0 : {V4}").replace(
    "\n}",
    f"\n  func.func private @helper(%y: {V4}) -> {V4} {{\n"
    f"    %0 = chlo.sinh %y : {V4} -> {V4}\n    return %0 : {V4}\n  }}\n}}",
)


def _labels(pipeline: str, text: str = TWO_FUNCTIONS) -> list[str]:
    with ir_context():
        module = ir.Module.parse(text)
        return [label for label, _ in passes.run_pipeline(module, pipeline, name="t")]


SKIPPED = " (skipped: unchanged since it ran)"


def test_default_pipeline_runs_the_documented_passes():
    # aotkit-simplify finds nothing to rewrite here, so the last cse would change nothing.
    assert _labels("default") == DEFAULT_STEPS[:-1] + ["cse" + SKIPPED]


def test_a_repeated_pass_runs_again_after_a_change():
    text = _module(
        f"%one = stablehlo.constant dense<1.0> : {V4}\n"
        f"%0 = stablehlo.multiply %x, %one : {V4}\n%1 = stablehlo.add %0, %x : {V4}\n"
        f"%2 = stablehlo.add %x, %x : {V4}\n%3 = stablehlo.multiply %1, %2 : {V4}\n"
        f"return %3 : {V4}"
    )
    # x*1 + x becomes x + x, a duplicate of %2 that only the second cse can merge.
    assert _labels("default", text) == DEFAULT_STEPS
    assert _run("default", text).count("stablehlo.add") == 1


def test_an_idempotent_pass_is_skipped_only_when_nothing_changed_since_it_ran():
    assert _labels("builtin.module(func.func(cse),aotkit-dce,func.func(cse))") == [
        "cse",
        "aotkit-dce",
        "cse" + SKIPPED,
    ]
    # Not idempotent by name: runs every time.
    assert _labels("builtin.module(func.func(cse),print-op-stats,func.func(cse))")[2] == "cse"


def _told_and_plain(fn, spec) -> tuple[list[str], list[str], str, str]:
    """The default pipeline's labels and result on `fn`'s traced module, with the tracer's
    facts and without them."""
    traced = aotkit.jit(fn).trace(spec)
    with ir_context():
        plain = ir.Module.parse(traced.as_text())
        told = ir.Module.parse(traced.as_text())
        ran = [label for label, _ in passes.run_pipeline(plain, "default", name="t")]
        skipped = [
            label for label, _ in passes.run_pipeline(told, "default", name="t", facts=traced.facts)
        ]
        return ran, skipped, str(told), str(plain)


def test_passes_the_tracer_facts_make_no_ops_are_skipped():
    # aotkit's tracer writes one function of static shapes: inlining, symbol-dce and shape
    # refinement have nothing to do, and the module comes out the same without them.
    def fn(x):
        return anp.sin(x) * 1.0 + anp.arcsinh(x)  # chlo.asinh: legalized

    spec = aotkit.spec("f32[4]")
    # (and no dead or equal ops, its 1.0 placed above sin: canonicalize and cse have no work)
    assert aotkit.jit(fn).trace(spec).facts == passes.TRACER_FACTS | {
        passes.NO_DUPLICATES,
        passes.CANONICAL,
    }
    ran, skipped, told, plain = _told_and_plain(fn, spec)
    assert told == plain and "chlo." not in told
    assert aotkit.lower(fn, spec).as_text() == plain  # what lower does: the skips
    assert ran[:4] == DEFAULT_STEPS[:4]
    assert skipped[:4] == [
        "aotkit-inline (skipped: one function)",
        "symbol-dce (skipped: one function)",
        "chlo-legalize-to-stablehlo",
        "stablehlo-refine-shapes (skipped: static shapes)",
    ]


def test_a_trace_without_chlo_skips_its_legalization():
    def fn(x):
        return anp.sin(x) * 1.0 + anp.tanh(x)  # StableHLO ops only

    spec = aotkit.spec("f32[4]")
    assert aotkit.jit(fn).trace(spec).facts == passes.TRACER_FACTS | {
        "no CHLO op",
        passes.NO_DUPLICATES,
        passes.CANONICAL,
    }
    ran, skipped, told, plain = _told_and_plain(fn, spec)
    assert told == plain
    assert aotkit.lower(fn, spec).as_text() == plain
    assert ran[2] == "chlo-legalize-to-stablehlo"
    assert skipped[2] == "chlo-legalize-to-stablehlo (skipped: no CHLO op)"


@pytest.mark.parametrize(
    "where",
    ["cond branch", "while body", "nested jit"],
)
def test_a_chlo_op_anywhere_in_the_module_keeps_its_legalization(where):
    def inner(x):
        return anp.sinh(x)  # chlo.sinh

    def fn(x):
        if where == "cond branch":
            return aotkit.cond(x[0] > 0, inner, lambda v: v, x)
        if where == "while body":
            return aotkit.fori_loop(0, 3, lambda i, v: inner(v), x)
        return aotkit.jit(inner)(x) + 1.0

    spec = aotkit.spec("f32[4]")
    assert "no CHLO op" not in aotkit.jit(fn).trace(spec).facts
    text = aotkit.lower(fn, spec).as_text()
    assert "chlo." not in text and "stablehlo." in text


def test_a_module_traced_inside_another_trace_keeps_its_own_facts():
    spec = aotkit.spec("f32[4]")
    inside = {}

    def with_chlo(x):
        # A CHLO-free program traced in the middle of this one's trace.
        inside["traced"] = aotkit.jit(lambda v: anp.sin(v)).trace(spec)
        return anp.sinh(x)

    outer = aotkit.jit(with_chlo).trace(spec)
    assert "no CHLO op" in inside["traced"].facts
    assert "no CHLO op" not in outer.facts


def test_a_pass_that_may_break_the_facts_makes_the_runner_forget_them():
    with ir_context():
        module = _parse(TWO_FUNCTIONS)
        labels = [
            label
            for label, _ in passes.run_pipeline(
                module,
                "builtin.module(symbol-dce,print-op-stats,symbol-dce)",
                name="t",
                facts=passes.TRACER_FACTS,
            )
        ]
    assert labels == ["symbol-dce (skipped: one function)", "print-op-stats", "symbol-dce"]


def test_legalizing_deprecated_ops_forgets_only_that_there_is_no_chlo():
    facts = passes.TRACER_FACTS | {"no CHLO op"}
    with ir_context():
        module = _parse(_module(f"%0 = stablehlo.sine %x : {V4}\nreturn %0 : {V4}"))
        labels = [
            label
            for label, _ in passes.run_pipeline(
                module,
                "builtin.module(stablehlo-legalize-deprecated-ops,symbol-dce,"
                "func.func(chlo-legalize-to-stablehlo))",
                name="t",
                facts=facts,
            )
        ]
    assert labels == [
        "stablehlo-legalize-deprecated-ops",
        "symbol-dce (skipped: one function)",
        "chlo-legalize-to-stablehlo",
    ]


CALLS = """module {
  func.func public @main(%x: tensor<4xf32>) -> tensor<f32> {
    %0 = func.call @total(%x) : (tensor<4xf32>) -> tensor<f32>
    %1 = func.call @total(%x) : (tensor<4xf32>) -> tensor<f32>
    %2 = stablehlo.multiply %0, %1 : tensor<f32>
    return %2 : tensor<f32>
  }
  func.func private @total(%y: tensor<4xf32>) -> tensor<f32> {
    %z = stablehlo.constant dense<0.0> : tensor<f32>
    %0 = stablehlo.reduce(%y init: %z) across dimensions = [0]
        : (tensor<4xf32>, tensor<f32>) -> tensor<f32>
     reducer(%a: tensor<f32>, %b: tensor<f32>) {
      %s = func.call @plus(%a, %b, %y) : (tensor<f32>, tensor<f32>, tensor<4xf32>) -> tensor<f32>
      stablehlo.return %s : tensor<f32>
     }
    return %0 : tensor<f32>
  }
  func.func private @plus(%p: tensor<f32>, %q: tensor<f32>, %unused: tensor<4xf32>) -> tensor<f32> {
    %0 = stablehlo.add %p, %q : tensor<f32>
    return %0 : tensor<f32>
  }
}"""
INLINED = """module {
  func.func public @main(%x: tensor<4xf32>) -> tensor<f32> {
    %z = stablehlo.constant dense<0.0> : tensor<f32>
    %0 = stablehlo.reduce(%x init: %z) across dimensions = [0]
        : (tensor<4xf32>, tensor<f32>) -> tensor<f32>
     reducer(%a: tensor<f32>, %b: tensor<f32>) {
      %s = stablehlo.add %a, %b : tensor<f32>
      stablehlo.return %s : tensor<f32>
     }
    %z1 = stablehlo.constant dense<0.0> : tensor<f32>
    %1 = stablehlo.reduce(%x init: %z1) across dimensions = [0]
        : (tensor<4xf32>, tensor<f32>) -> tensor<f32>
     reducer(%a: tensor<f32>, %b: tensor<f32>) {
      %s = stablehlo.add %a, %b : tensor<f32>
      stablehlo.return %s : tensor<f32>
     }
    %2 = stablehlo.multiply %0, %1 : tensor<f32>
    return %2 : tensor<f32>
  }
}"""  # fmt: skip


def test_inline_pass_inlines_nested_calls_and_calls_inside_regions():
    assert _run("aotkit-inline,symbol-dce", CALLS) == _canon(INLINED)


def test_inline_pass_stops_on_recursion():
    text = _module(f"%0 = func.call @rec(%x) : ({V4}) -> {V4}\nreturn %0 : {V4}").replace(
        "\n}",
        f"\n  func.func private @rec(%y: {V4}) -> {V4} {{\n"
        f"    %0 = func.call @rec(%y) : ({V4}) -> {V4}\n    return %0 : {V4}\n  }}\n}}",
    )
    after = _run("aotkit-inline", text)
    assert after.count("call @rec") == 2  # one left in main, one in @rec itself


MUTUAL_RECURSION = """module {
  func.func public @main(%x: tensor<4xf32>) -> tensor<4xf32> {
    %0 = func.call @leaf(%x) : (tensor<4xf32>) -> tensor<4xf32>
    %1 = func.call @even(%0) : (tensor<4xf32>) -> tensor<4xf32>
    return %1 : tensor<4xf32>
  }
  func.func private @even(%y: tensor<4xf32>) -> tensor<4xf32> {
    %0 = func.call @odd(%y) : (tensor<4xf32>) -> tensor<4xf32>
    %1 = func.call @odd(%0) : (tensor<4xf32>) -> tensor<4xf32>
    return %1 : tensor<4xf32>
  }
  func.func private @odd(%y: tensor<4xf32>) -> tensor<4xf32> {
    %0 = func.call @even(%y) : (tensor<4xf32>) -> tensor<4xf32>
    %1 = func.call @leaf(%0) : (tensor<4xf32>) -> tensor<4xf32>
    return %1 : tensor<4xf32>
  }
  func.func private @leaf(%y: tensor<4xf32>) -> tensor<4xf32> {
    %0 = stablehlo.negate %y : tensor<4xf32>
    return %0 : tensor<4xf32>
  }
}"""


def test_inline_pass_leaves_mutually_recursive_functions_alone():
    after = _run("aotkit-inline", MUTUAL_RECURSION)
    # @leaf is inlined everywhere; the even/odd cycle keeps its calls, unexpanded.
    assert "call @leaf" not in after
    assert after.count("call @even") == 2 and after.count("call @odd") == 2
    assert after.count("stablehlo.negate") == 3  # main, @odd, and @leaf itself


def test_mlir_inline_pass_is_a_no_op_in_this_jaxlib():
    # Why the default pipeline uses aotkit-inline: if jaxlib starts registering func's
    # inliner extension, this fails and `inline` can come back.
    assert _run("inline", TWO_FUNCTIONS) == _canon(TWO_FUNCTIONS)


def test_default_pipeline_inlines_removes_helpers_and_legalizes_chlo():
    text = _run("default", TWO_FUNCTIONS)
    assert "func.call" not in text and "@helper" not in text
    assert "chlo." not in text
    assert "stablehlo.exponential" in text


def test_none_pipeline_leaves_the_module_alone():
    assert _labels("none") == []
    assert _run("none", TWO_FUNCTIONS) == _canon(TWO_FUNCTIONS)


@pytest.mark.parametrize(
    "pipeline",
    [
        "builtin.module(func.func(canonicalize,cse))",
        "func.func(canonicalize, cse)",
        "func.func(canonicalize),func.func(cse)",
        "builtin.module( func.func( canonicalize ) , func.func(cse) )",
    ],
)
def test_textual_pipeline_spellings_agree(pipeline):
    text = _module(f"%0 = stablehlo.add %x, %x : {V4}\n%1 = stablehlo.add %x, %x : {V4}\n"
                   f"%2 = stablehlo.multiply %0, %1 : {V4}\nreturn %2 : {V4}")  # fmt: skip
    assert _labels(pipeline, text) == ["canonicalize", "cse"]
    assert _run(pipeline, text).count("stablehlo.add") == 1


def test_function_passes_at_module_level_are_nested_for_the_user():
    assert _labels("chlo-legalize-to-stablehlo") == ["chlo-legalize-to-stablehlo"]
    assert "chlo." not in _run("inline,chlo-legalize-to-stablehlo", TWO_FUNCTIONS)


def test_python_passes_mix_with_mlir_passes_inside_anchors():
    text = _module(f"%c = stablehlo.constant dense<0.0> : {V4}\n%0 = stablehlo.add %x, %c : {V4}\n"
                   f"%1 = stablehlo.add %x, %c : {V4}\n%2 = stablehlo.multiply %0, %1 : {V4}\n"
                   f"return %2 : {V4}")  # fmt: skip
    pipeline = "builtin.module(func.func(aotkit-algebraic-simplify,cse))"
    assert _labels(pipeline, text) == ["aotkit-algebraic-simplify", "cse"]
    assert _run(pipeline, text) == _canon(
        _module(f"%0 = stablehlo.multiply %x, %x : {V4}\nreturn %0 : {V4}")
    )


EXAMPLE = "'builtin.module(aotkit-inline,func.func(canonicalize,cse),aotkit-simplify)'"
WRITE_AS = f"write pipelines as {EXAMPLE}"


def _error(pipeline) -> str:
    with pytest.raises((ValueError, TypeError)) as info:
        passes.check_pipeline(pipeline)
    return str(info.value)


@pytest.mark.parametrize(
    "pipeline, message",
    [
        ("builtin.module(func.func(canonicalise))",
         "pipeline 'builtin.module(func.func(canonicalise))': unknown pass 'canonicalise'; "
         "nearest registered: canonicalize"),
        ("defualt", "pipeline 'defualt': unknown pass 'defualt'; nearest registered: default"),
        ("cse,aotkit-simplfy",
         "pipeline 'cse,aotkit-simplfy': unknown pass 'aotkit-simplfy'; "
         "nearest registered: aotkit-simplify, aotkit-algebraic-simplify, aotkit-inline"),
        ("stablehlo-aggressive-simplification",
         "pipeline 'stablehlo-aggressive-simplification': unknown pass "
         "'stablehlo-aggressive-simplification' (jaxlib does not register it); use "
         "aotkit-simplify"),
        ("qqqq", "pipeline 'qqqq': unknown pass 'qqqq'; see aotkit.passes.known_names() for "
                 "the registered names"),
        ("canonicalize{foo=1}",
         "pipeline 'canonicalize{foo=1}': MLIR rejected 'canonicalize{foo=1}': "
         "<Pass-Options-Parser>: no such option foo; check the pass options and the op it is "
         "nested under"),
        ("func.func(cse", f"pipeline 'func.func(cse': unbalanced brackets; {WRITE_AS}"),
        ("cse)", f"pipeline 'cse)': unbalanced ')'; {WRITE_AS}"),
        ("cse,,canonicalize", f"pipeline 'cse,,canonicalize': empty pass name; {WRITE_AS}"),
        ("canonicalize cse", f"pipeline 'canonicalize cse': cannot read pass 'canonicalize "
                             f"cse'; {WRITE_AS}"),
        ("", "pipeline '': empty pipeline; use 'none' to run no passes"),
        ("aotkit-simplify{max=3}",
         "pipeline 'aotkit-simplify{max=3}': aotkit pass 'aotkit-simplify' takes no options, "
         "got {max=3}; remove them"),
        (3, f"pipeline: expected a name (none, default) or MLIR pipeline text, got int 3; e.g. "
            f"pipeline={EXAMPLE}"),
    ],
    ids=["typo-nested", "typo-named", "typo-python-pass", "unregistered-aggressive", "no-match",
         "bad-option", "unclosed", "unopened", "empty-element", "missing-comma", "empty",
         "python-options",
         "not-a-string"],
)  # fmt: skip
def test_bad_pipelines_are_rejected_with_a_clear_message(pipeline, message):
    assert _error(pipeline) == message


def test_bad_pipeline_fails_before_tracing():
    calls = []

    def f(x):
        calls.append(x)
        return x

    with pytest.raises(ValueError, match=r"unknown pass 'canonicalise'; nearest registered"):
        aotkit.lower(f, aotkit.spec("f32[4]"), pipeline="canonicalise")
    assert calls == []


def test_known_names_lists_only_what_this_jaxlib_registers():
    names = passes.known_names()
    for expected in ("canonicalize", "cse", "inline", "stablehlo-refine-shapes",
                     "chlo-legalize-to-stablehlo", "aotkit-simplify", "aotkit-dce", "default",
                     "none"):  # fmt: skip
        assert expected in names
    assert "stablehlo-aggressive-simplification" not in names


# --- Python pass registry ----------------------------------------------------------------------


@pytest.fixture
def registry():
    before = dict(passes.PYTHON_PASSES)
    yield passes.register_pass
    passes.PYTHON_PASSES.clear()
    passes.PYTHON_PASSES.update(before)
    passes.plan.cache_clear()


def test_registered_python_pass_runs_in_a_pipeline(registry):
    seen = []

    @registry("test-count-ops", description="counts ops")
    def count(module):
        ops = []
        module.operation.walk(lambda op: (ops.append(op.name), ir.WalkResult.ADVANCE)[1])
        seen.append(ops.count("stablehlo.add"))
        return False

    text = _module(f"%0 = stablehlo.add %x, %x : {V4}\n%1 = stablehlo.add %x, %x : {V4}\n"
                   f"%2 = stablehlo.add %0, %1 : {V4}\nreturn %2 : {V4}")  # fmt: skip
    assert _labels("test-count-ops,func.func(cse),test-count-ops", text) == [
        "test-count-ops",
        "cse",
        "test-count-ops",
    ]
    assert seen == [3, 2]
    assert passes.PYTHON_PASSES["test-count-ops"].description == "counts ops"
    assert "test-count-ops" in passes.known_names()


@pytest.mark.parametrize(
    "name, message",
    [
        ("Bad_Name", "register_pass: invalid pass name 'Bad_Name'; use lowercase letters, "
                     "digits and dashes, starting with a letter (e.g. 'my-simplify')"),
        ("aotkit-simplify", "register_pass: 'aotkit-simplify' is already registered; choose "
                            "another name"),
        ("default", "register_pass: 'default' is already registered; choose another name"),
        ("cse", "register_pass: 'cse' is an MLIR pass registered in jaxlib; choose another name"),
        ("chlo-legalize-to-stablehlo", "register_pass: 'chlo-legalize-to-stablehlo' is an MLIR "
                                       "pass registered in jaxlib; choose another name"),
    ],
)  # fmt: skip
def test_register_pass_rejects_bad_names(registry, name, message):
    with pytest.raises(ValueError) as info:
        registry(name)
    assert str(info.value) == message


def test_register_pass_rejects_a_non_function(registry):
    with pytest.raises(TypeError, match=r"^register_pass\('test-x'\): expected a function "
                                        r"module -> bool, got int$"):  # fmt: skip
        registry("test-x")(3)


def test_python_pass_must_return_a_bool(registry):
    registry("test-returns-none")(lambda module: None)
    with pytest.raises(TypeError) as info:
        _run("test-returns-none", _module(RETURN_X))
    assert str(info.value) == (
        "aotkit pass 'test-returns-none' returned NoneType None; a pass returns True when it "
        "changed the module, else False"
    )


def test_python_pass_exception_names_the_pass(registry):
    def broken(module):
        raise KeyError("boom")

    registry("test-broken")(broken)
    with pytest.raises(KeyError) as info:
        _run("test-broken", _module(RETURN_X))
    assert info.value.__notes__ == ["in aotkit pass 'test-broken' on module 't'"]


def _break_types(module):
    """Replaces the returned value with one of another type: a module that fails to verify."""
    func_op = module.body.operations[0]
    block = func_op.regions[0].blocks[0]
    ret = block.operations[len(block.operations) - 1]
    with ir.InsertionPoint(ret), ir.Location.unknown():
        bad = ir.Operation.create(
            "stablehlo.constant",
            results=[ir.RankedTensorType.get([2], ir.F32Type.get())],
            attributes={"value": ir.DenseElementsAttr.get(np.zeros(2, np.float32))},
        )
    ret.operands[0] = bad.results[0]
    return True


def test_invalid_result_is_a_compile_error_saying_how_to_dump(registry, monkeypatch):
    monkeypatch.delenv(dumps.ENV_DUMP_DIR, raising=False)
    registry("test-break-types")(_break_types)
    with pytest.raises(aotkit.CompileError) as info:
        _run("test-break-types", _module(RETURN_X))
    assert re.fullmatch(
        r"pipeline 'test-break-types' produced an invalid module 't': .*type.*; "
        + re.escape(dumps.HOW_TO_DUMP),
        str(info.value),
    )
    assert info.value.module_name == "t"


def test_invalid_result_names_the_dump_file(registry, tmp_path):
    registry("test-break-types")(_break_types)
    dumper = dumps.Dumper.create("t", tmp_path)
    with pytest.raises(aotkit.CompileError) as info:
        _run("test-break-types", _module(RETURN_X), dumper=dumper)
    path = tmp_path / f"{dumper.index:04d}.t.01-invalid.mlir"
    assert str(info.value).endswith(f"; dumped to {path}")
    assert "stablehlo.constant" in path.read_text()


def test_failing_mlir_pass_is_a_compile_error():
    with pytest.raises(aotkit.CompileError) as info:
        _run("builtin.module(func.func(inline))", _module(RETURN_X))
    assert str(info.value).startswith(
        "pipeline 'builtin.module(func.func(inline))': pass 'inline' failed on module 't': "
    )
    assert str(info.value).endswith(dumps.HOW_TO_DUMP)


def test_unverified_input_is_rejected_before_any_pass():
    text = _module(f"%0 = stablehlo.add %x, %x : {V4}\nreturn %0 : {V4}")
    with ir_context():
        module = ir.Module.parse(text)
        block = module.body.operations[0].regions[0].blocks[0]
        _break_types(module)
        with pytest.raises(ValueError) as info:
            passes.run_pipeline(module, "default", name="t")
        assert len(block.operations) == 3  # nothing ran: the dead add is still there
    assert str(info.value).startswith(
        "run_pipeline: module 't' fails verification before the pipeline: "
    )


def test_timing_report(monkeypatch, capsys):
    with ir_context():
        timings = passes.run_pipeline(_parse(TWO_FUNCTIONS), "default", name="t")
    assert all(seconds >= 0 for _, seconds in timings)
    report = passes.format_timing(timings, name="t", pipeline="default")
    lines = report.splitlines()
    assert lines[0] == "pipeline 'default' on module 't'"
    assert [ln.split()[0] for ln in lines[2:-1]] == DEFAULT_STEPS
    assert lines[-1].split()[0] == "total"
    assert capsys.readouterr().err == ""
    monkeypatch.delenv(dumps.ENV_DUMP_DIR, raising=False)
    monkeypatch.setenv(dumps.ENV_PASS_TIMING, "1")
    aotkit.lower(lambda x: x + 1, aotkit.spec("f32[2]"))
    err = capsys.readouterr().err
    assert err.startswith("pipeline 'default' on module 'lambda'\n")
    assert "aotkit-simplify" in err


# --- Through aotkit.lower ----------------------------------------------------------------------


def test_duplicated_identities_lower_to_a_single_add():
    lowered = aotkit.lower(lambda x: (x * 1 + 0) + (x * 1 + 0), aotkit.spec("f32[4]"))
    assert lowered.as_text() == (
        "module @lambda {\n"
        "  func.func public @main(%arg0: tensor<4xf32>) -> tensor<4xf32> {\n"
        "    %0 = stablehlo.add %arg0, %arg0 : tensor<4xf32>\n"
        "    return %0 : tensor<4xf32>\n"
        "  }\n"
        "}\n"
    )
    unoptimized = aotkit.lower(
        lambda x: (x * 1 + 0) + (x * 1 + 0), aotkit.spec("f32[4]"), pipeline="none"
    ).as_text()
    assert unoptimized.count("stablehlo.multiply") == 2
    assert "stablehlo.constant" in unoptimized


BF16 = np.dtype(ml_dtypes.bfloat16)
PROGRAMS = {
    "identities": lambda x: (x * 1 + 0) - 0 + anp.negative(anp.negative(x)),
    "constant-arithmetic": lambda x: x * (anp.ones(x.shape, x.dtype) * 2 - 1) + anp.zeros_like(x),
    "layout-noops": lambda x: x.reshape(x.shape).T.T.astype(x.dtype),
    "where-constant": lambda x: anp.where(anp.ones(x.shape, bool), x, -x),
    "compare-constants": lambda x: anp.where(anp.full(x.shape, 2) > 1, x, x + 1),
    "int-wrap": lambda x: (
        (anp.full(x.shape, 127, "int8") + anp.ones(x.shape, "int8")).astype(x.dtype) + x
    ),
    "reduction-regions": lambda x: anp.sum(x * 1 + 0, axis=0) + anp.max(anp.negative(-x), axis=0),
    "matmul": lambda x: (x * 1) @ (x.T + 0),
    "fori-loop-body": lambda x: lax.fori_loop(0, 3, lambda i, c: c * 1 + c, x),
    "cond-branches": lambda x: lax.cond(anp.sum(x) > 0, lambda a: a * 1, lambda a: a - 0, x),
    "bool-logic": lambda x: anp.where(
        anp.logical_and(anp.ones(x.shape, bool), ~anp.zeros(x.shape, bool)), x, x * 0
    ),
}
INPUTS = {
    "float32": np.array([[-0.0, 0.0, np.nan], [np.inf, -np.inf, 1.5]], np.float32),
    "float64": np.array([[-0.0, 1e300, -2.5], [3.0, np.nan, 7.0]], np.float64),
    "int32": np.array([[-(2**31), 2**31 - 1, 0], [1, -1, 5]], np.int32),
    "int8": np.array([[-128, 127, 0], [1, -1, 5]], np.int8),
    "uint8": np.array([[0, 255, 3], [1, 128, 7]], np.uint8),
    "bfloat16": np.array([[-0.0, 1.5, 3.0], [np.inf, -2.0, 0.25]], BF16),
}


def _both(fn, x):
    outs, texts = [], []
    for pipeline in ("none", "default"):
        lowered = aotkit.lower(fn, x, pipeline=pipeline)
        texts.append(lowered.as_text())
        outs.append(np.asarray(run_lowered("cpu", lowered, x)))
    return outs, texts


def _assert_identical(a: np.ndarray, b: np.ndarray) -> None:
    assert a.dtype == b.dtype
    if a.dtype.kind == "f" or a.dtype == BF16:
        a, b = a.astype(np.float64), b.astype(np.float64)
        np.testing.assert_array_equal(np.signbit(a), np.signbit(b))
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("dtype", list(INPUTS))
@pytest.mark.parametrize("program", list(PROGRAMS))
def test_default_pipeline_never_changes_results(program, dtype):
    x = INPUTS[dtype]
    (none, default), (none_text, default_text) = _both(PROGRAMS[program], x)
    assert default_text != none_text  # the pipeline rewrote something: the check has teeth
    _assert_identical(none, default)


_UNARY_STEPS = [
    ("add0", lambda t: t + 0),
    ("mul1", lambda t: t * 1),
    ("sub0", lambda t: t - 0),
    ("neg", lambda t: -t),
    ("add-const", lambda t: t + anp.full(t.shape, 3, t.dtype) * 2),
    ("transpose", lambda t: t.T),
    ("astype-same", lambda t: t.astype(t.dtype)),
    ("double", lambda t: t + t),
    ("max-const", lambda t: anp.maximum(t, anp.full(t.shape, 1, t.dtype) - 1)),
]


@settings(max_examples=25, deadline=None)
@given(
    steps=st.lists(st.sampled_from(range(len(_UNARY_STEPS))), min_size=1, max_size=8),
    dtype=st.sampled_from(["float32", "int32", "int8"]),
)
def test_random_identity_chains_keep_their_results(steps, dtype):
    def program(x):
        for i in steps:
            x = _UNARY_STEPS[i][1](x)
        return x

    x = INPUTS[dtype]
    (none, default), _ = _both(program, x)
    _assert_identical(none, default)


# --- "nothing to simplify": what the tracer vouches for ---------------------------------------

M44 = aotkit.spec("f32[4,4]")
V = aotkit.spec("f32[4]")
# Programs whose traced module aotkit-simplify may or may not rewrite: each kind of rule
# (identities with constants, folds, no-op layout ops, double negation, transposes), and
# programs it has nothing to do on.
SIMPLIFY_CORPUS = {
    "chain": (lambda x, y: anp.tanh(anp.sin(x) * y + x), (V, V)),
    "mlp layer": (lambda x, w, b: anp.maximum(x @ w + b, 0.0), (M44, M44, V)),
    "times one": (lambda x: x * 1.0, (V,)),
    "plus zero": (lambda x: 0 + x, (V,)),
    "minus zero": (lambda x: x - 0.0, (V,)),
    "plus one": (lambda x: anp.sin(x) + 1.0, (V,)),
    "zero minus": (lambda x: 0.0 - anp.sin(x), (V,)),
    "times two": (lambda x: anp.sin(x) * 2.0, (V,)),
    "double negation": (lambda x: anp.negative(anp.negative(x)), (V,)),
    "one negation": (lambda x: -x + 1.0, (V,)),
    "transpose twice": (lambda x: x.T.T, (M44,)),
    "transpose once": (lambda x: x.T @ x, (M44,)),
    "folded constants": (lambda x: x + np.float32(2.0) * anp.ones(4, np.float32), (V,)),
    "constant compare": (lambda x: anp.where(anp.ones(4) > 0, x, 0.0), (V,)),
    "convert": (lambda x: x.astype(np.int32) + 1, (V,)),
    "broadcast": (lambda x, y: x + y, (M44, V)),
    "reshape": (lambda x: anp.reshape(x, (2, 2)) * 2.0, (V,)),
    "reduction": (lambda x: anp.sum(x * 1.0), (V,)),
    "branch": (lambda x: aotkit.cond(x[0] > 0, lambda v: v * 1.0, lambda v: v, x), (V,)),
    "python output": (lambda x: (x, 2.0), (V,)),
    "select": (lambda x, y: anp.where(x > y, x, y), (V, V)),
    "plain reduction": (lambda x: anp.sum(anp.sin(x)), (V,)),
    "plain branch": (lambda x: aotkit.cond(anp.sum(x) > 0, anp.sin, anp.cos, x), (V,)),
    "negation": (lambda x: -anp.sin(x), (V,)),
    "negated negation": (lambda x: anp.negative(-anp.sin(x)), (V,)),
    "select on a constant": (lambda x: anp.where(anp.full(4, True), x, 2.0 * x), (V,)),
}


@pytest.mark.parametrize("name", list(SIMPLIFY_CORPUS))
def test_nothing_to_simplify_is_vouched_for_only_where_simplify_changes_nothing(name):
    fn, specs = SIMPLIFY_CORPUS[name]
    traced = aotkit.jit(fn, autograph=False).trace(*specs)
    changed = _simplify_changes(traced.as_text())
    if passes.NOTHING_TO_SIMPLIFY in traced.facts:
        assert not changed, f"{name}: the tracer vouched for a module aotkit-simplify changes"


def test_the_tracer_vouches_for_plain_programs_and_not_for_the_others():
    vouched = {
        name
        for name, (fn, specs) in SIMPLIFY_CORPUS.items()
        if passes.NOTHING_TO_SIMPLIFY in aotkit.jit(fn, autograph=False).trace(*specs).facts
    }
    # Elementwise ops, products (by constants other than one), broadcasts, converts to
    # another type, a transpose of an argument, a reduction and a branch it vouches for; a
    # candidate op (x * 1.0, 0 + x, -(-x), a select on a constant, a fold) it does not.
    assert vouched == {
        "chain",
        "mlp layer",
        "broadcast",
        "python output",
        "select",
        "transpose once",
        "plain reduction",
        "plain branch",
        "negation",
        "one negation",
        "convert",
        "reshape",
        "plus one",
        "zero minus",
        "times two",
    }


def _grad_of(loss, argnums=0):
    return lambda *args: aotkit.grad(loss, argnums=argnums)(*args)


def _relu_loss(w, b, x):
    h = anp.maximum(x @ w + b, 0.0)
    return anp.sum(h * h)


# Transformed programs: the ops a transform copies from the program and builds of its own
# are tested as `bind` tests its ops (`tracing.core.note_made`).
TRANSFORM_CORPUS = {
    "grad of an mlp layer": (_grad_of(_relu_loss, (0, 1)), (M44, V, M44)),
    "grad of a chain": (_grad_of(lambda x, y: anp.sum(anp.tanh(anp.sin(x) * y + x))), (V, V)),
    "grad of a mean": (_grad_of(lambda x: anp.mean(anp.sin(x))), (V,)),
    "grad of a product by one": (_grad_of(lambda x: anp.sum(anp.sin(x) * 1.0)), (V,)),
    "grad of a double negation": (_grad_of(lambda x: anp.sum(anp.negative(-anp.sin(x)))), (V,)),
    "grad of a transpose": (_grad_of(lambda x: anp.sum(x.T @ x)), (M44,)),
    "grad through a branch": (
        _grad_of(lambda x: anp.sum(aotkit.cond(anp.sum(x) > 0, anp.sin, anp.cos, x))),
        (V,),
    ),
    "grad through a loop": (
        _grad_of(lambda x: anp.sum(aotkit.fori_loop(0, 3, lambda i, h: anp.sin(h) * 0.5, x))),
        (V,),
    ),
    "grad through a checkpointed loop": (
        lambda x: aotkit.grad(
            lambda x: anp.sum(aotkit.fori_loop(0, 9, lambda i, h: anp.sin(h) * 0.5, x)),
            checkpoint_loops="sqrt",
        )(x),
        (V,),
    ),
    "jvp of a chain": (
        lambda x, y: aotkit.jvp(lambda a: anp.tanh(anp.sin(a) * y), (x,), (y,)),
        (V, V),
    ),
    "vjp of a transpose": (
        lambda x, g: aotkit.vjp(lambda a: a.T @ a, x)[1](g),
        (M44, M44),
    ),
    "vmap of a select": (aotkit.vmap(lambda a, b: anp.where(a > b, a, b * 2.0)), (M44, M44)),
    "vmap of a sum": (aotkit.vmap(lambda a: anp.sum(anp.sin(a))), (M44,)),
    "hessian": (aotkit.hessian(lambda x: anp.sum(anp.sin(x) * x)), (V,)),
}


def _simplify_changes(text: str) -> bool:
    with ir_context():
        module = ir.Module.parse(text)
        # As the default pipeline runs it: after canonicalize and cse.
        passes.run_pipeline(module, "builtin.module(canonicalize,cse)", name="t")
        before = str(module)
        changed = passes.python_passes.simplify(module)
        assert changed == (str(module) != before)
    return changed


@pytest.mark.parametrize("name", list(TRANSFORM_CORPUS))
def test_a_transform_vouches_only_where_simplify_changes_nothing(name):
    fn, specs = TRANSFORM_CORPUS[name]
    traced = aotkit.jit(fn, autograph=False).trace(*specs)
    if passes.NOTHING_TO_SIMPLIFY in traced.facts:
        assert not _simplify_changes(traced.as_text()), (
            f"{name}: the transform vouched for a module aotkit-simplify changes"
        )


def test_transforms_vouch_for_what_they_emit_and_not_for_loaded_programs():
    vouched = {
        name
        for name, (fn, specs) in TRANSFORM_CORPUS.items()
        if passes.NOTHING_TO_SIMPLIFY in aotkit.jit(fn, autograph=False).trace(*specs).facts
    }
    # The gradient's seed is one: its products by one are not made at all.
    assert vouched == set(TRANSFORM_CORPUS) - {
        "grad of a product by one",
        "grad of a double negation",
    }
    # A program's module copied into a trace (Lowered.grad) keeps its regions as they are.
    lowered = aotkit.jit(lambda x: anp.sum(anp.sin(x))).lower(V)
    assert passes.NOTHING_TO_SIMPLIFY not in lowered.grad().facts


def test_a_module_with_nothing_to_simplify_skips_the_sweep():
    traced = aotkit.jit(SIMPLIFY_CORPUS["chain"][0]).trace(V, V)
    with ir_context():
        module = ir.Module.parse(traced.as_text())
        labels = [
            label
            for label, _ in passes.run_pipeline(module, "default", name="t", facts=traced.facts)
        ]
    assert "aotkit-simplify (skipped: nothing to simplify)" in labels


def test_canonicalize_and_cse_fold_no_stablehlo_op():
    # The runner keeps "nothing to simplify" across canonicalize and cse: they must not turn
    # ops into constants or identities aotkit-simplify would then rewrite.
    text = _module(
        "%c1 = stablehlo.constant dense<1.0> : tensor<4xf32>\n"
        "%c2 = stablehlo.constant dense<2.0> : tensor<4xf32>\n"
        "%a = stablehlo.add %c1, %c2 : tensor<4xf32>\n"
        "%r = stablehlo.reshape %a : (tensor<4xf32>) -> tensor<4xf32>\n"
        "%n = stablehlo.negate %r : tensor<4xf32>\n"
        "%nn = stablehlo.negate %n : tensor<4xf32>\n"
        "%b = stablehlo.broadcast_in_dim %nn, dims = [0] : (tensor<4xf32>) -> tensor<4xf32>\n"
        "%t = stablehlo.transpose %b, dims = [0] : (tensor<4xf32>) -> tensor<4xf32>\n"
        "%m = stablehlo.multiply %t, %c1 : tensor<4xf32>\n"
        "%s = stablehlo.maximum %m, %x : tensor<4xf32>\n"
        f"return %s : {V4}"
    )
    assert _run("builtin.module(canonicalize,cse)", text) == _canon(text)


def test_the_tracer_knows_every_rule_of_the_sweep():
    # A rule added to aotkit-simplify must be known to the tracer's test, or the tracer
    # could vouch for a module the sweep would change.
    from aotkit.passes import python_passes
    from aotkit.tracing import core

    no_constant = {
        n for n, rules in python_passes._IDENTITIES.items() if not all(c for _, c in rules)
    }
    assert set(python_passes.ALONE) == set(core._SIMPLIFY_IF) == no_constant
    assert set(core._SIMPLIFY_WITH_CONSTANTS) == set(python_passes._SIMPLIFY)
    # The identities that need a constant are told apart from the folds (which need all).
    with_constant = {
        n for n, rules in python_passes._IDENTITIES.items() if all(c for _, c in rules)
    }
    assert {n for n, need in core._SIMPLIFY_WITH_CONSTANTS.items() if need != "all"} == (
        with_constant
    )


# --- "canonical" and "no equal ops": canonicalize and cse skipped (issue 28) ----------------


def _dead_op(x, y):
    anp.cos(x)  # nothing uses it: canonicalize erases it
    return anp.sin(x) * y


def _late_constant(x):
    return anp.sin(x) * 2.0  # the tracer puts the constant above sin, as canonicalize would


def _equal_ops(x):
    return anp.sin(x) + anp.sin(x)


def _equal_constants(x):
    return x * anp.asarray(np.arange(4.0, dtype=np.float32)) + anp.asarray(
        np.arange(4.0, dtype=np.float32)
    )


def _many_users(x, y):
    z = x * y
    for _ in range(20):
        z = z + x
    return z - (x - y)  # x - y: both operands used before, x by 21 ops


def _in_place(x, y):
    z = x * y
    z += x  # z now names the sum: the product is used, nothing is dead
    return z


def _in_place_dead(x, y):
    z = x * y
    w = anp.copy(z)
    w += 1.0  # nothing uses the sum: canonicalize erases it (and the constant)
    return z


def _copy_equal_ops(x):
    c = anp.copy(x)  # another tracer of x's value
    return anp.sin(x) + anp.sin(c)


def _in_place_equal_ops(x):
    z = x + 0.5
    w = anp.copy(x)
    w += 0.5  # the same add on the same values as z's
    return z * w


PIPELINE_CORPUS = {
    **SIMPLIFY_CORPUS,
    "in place": (_in_place, (V, V)),
    "in place, dead": (_in_place_dead, (V, V)),
    "copy, equal ops": (_copy_equal_ops, (V,)),
    "in place, equal ops": (_in_place_equal_ops, (V,)),
    "constant used twice": (lambda x: x * 2.0 + 2.0, (V,)),
    "operands used before": (lambda x, y: (x * y) + (x + y), (V, V)),
    "equal products": (lambda x, y: (x * y) + (x * y), (V, V)),
    "many users": (_many_users, (V, V)),
    "dead op": (_dead_op, (V, V)),
    "late constant": (_late_constant, (V,)),
    "equal ops": (_equal_ops, (V,)),
    "equal constants": (_equal_constants, (V,)),
    "argument only": (lambda x, y: x, (V, V)),
    "returned twice": (lambda x: (anp.sin(x), anp.sin(x)), (V,)),
}


@pytest.mark.parametrize("name", list(PIPELINE_CORPUS))
@pytest.mark.parametrize(
    ("fact", "pipeline"),
    [
        (passes.CANONICAL, "builtin.module(func.func(canonicalize))"),
        (passes.NO_DUPLICATES, "builtin.module(func.func(cse))"),
    ],
    ids=["canonical", "no equal ops"],
)
def test_a_pass_the_tracer_says_has_nothing_to_do_changes_nothing(name, fact, pipeline):
    fn, specs = PIPELINE_CORPUS[name]
    traced = aotkit.jit(fn, autograph=False).trace(*specs)
    text = traced.as_text(debug_info=True)
    if fact in traced.facts:
        assert _run(pipeline, text) == _canon(text), f"{name}: the tracer vouched for {fact!r}"


# Random straight-line programs for the facts: each step applies an op to values made so far
# (so values are reused, left unused, computed twice), through the ways a tracer of an
# existing value is made again (a copy, an in-place update, a weak Python scalar).
_STEP_KINDS = ("sin", "tanh", "neg", "add", "mul", "max", "scalar", "copy", "in place")


def _random_program(steps, dropped):
    def program(x, y):
        values = [x, y]
        for kind, i, j in steps:
            a, b = values[i % len(values)], values[j % len(values)]
            if kind == "sin":
                values.append(anp.sin(a))
            elif kind == "tanh":
                values.append(anp.tanh(a))
            elif kind == "neg":
                values.append(-a)
            elif kind == "add":
                values.append(a + b)
            elif kind == "mul":
                values.append(a * b)
            elif kind == "max":
                values.append(anp.maximum(a, b))
            elif kind == "scalar":
                values.append(a * 2.0)
            elif kind == "copy":
                values.append(anp.copy(a))
            else:
                c = anp.copy(a)
                c += b
                values.append(c)
        # Every value but the dropped ones is returned: a dropped one is dead unless a later
        # step used it.
        return [v for k, v in enumerate(values) if k not in dropped]

    return program


@settings(max_examples=60, deadline=None)
@given(
    steps=st.lists(
        st.tuples(st.sampled_from(_STEP_KINDS), st.integers(0, 20), st.integers(0, 20)),
        min_size=1,
        max_size=12,
    ),
    dropped=st.sets(st.integers(2, 14), max_size=2),
)
def test_random_programs_get_only_true_facts(steps, dropped):
    traced = aotkit.jit(_random_program(steps, dropped), autograph=False).trace(V, V)
    text = traced.as_text(debug_info=True)
    for fact, pipeline in [
        (passes.CANONICAL, "builtin.module(func.func(canonicalize))"),
        (passes.NO_DUPLICATES, "builtin.module(func.func(cse))"),
    ]:
        if fact in traced.facts:
            assert _run(pipeline, text) == _canon(text), f"the tracer vouched for {fact!r}"


def test_the_tracer_knows_when_canonicalize_and_cse_have_work():
    def facts(name):
        fn, specs = PIPELINE_CORPUS[name]
        return aotkit.jit(fn, autograph=False).trace(*specs).facts

    both = {passes.CANONICAL, passes.NO_DUPLICATES}
    for name in (
        "chain",
        "broadcast",
        "select",
        "argument only",
        "mlp layer",
        "late constant",
        "in place",
        "constant used twice",
    ):
        assert both <= facts(name), name
    assert not both & facts("dead op")
    assert passes.CANONICAL not in facts("in place, dead")
    # A copy of a tracer, or one updated in place, stands for the value it was made from.
    assert passes.NO_DUPLICATES not in facts("copy, equal ops")
    assert passes.NO_DUPLICATES not in facts("in place, equal ops")
    assert passes.NO_DUPLICATES in facts("operands used before")
    assert passes.NO_DUPLICATES not in facts("equal products")
    # Too many users of x to compare: the tracer cannot tell, and cse runs.
    assert passes.NO_DUPLICATES not in facts("many users")
    assert passes.NO_DUPLICATES not in facts("equal ops")
    assert passes.NO_DUPLICATES not in facts("returned twice")
    assert passes.NO_DUPLICATES not in facts("equal constants")
    # A lowering rule of its own (a reduction) or a region (a branch): nothing vouched.
    assert not both & facts("reduction")
    assert not both & facts("branch")


def test_a_lowering_whose_every_pass_is_skipped_is_the_traced_module():
    fn, specs = PIPELINE_CORPUS["chain"]
    jitted = aotkit.jit(fn, autograph=False)
    traced_text = jitted.trace(*specs).as_text(debug_info=True)
    report = []
    with ir_context():
        module = ir.Module.parse(traced_text)
        report = passes.run_pipeline(
            module, "default", name="t", facts=jitted.trace(*specs).facts, verify=False
        )
    assert not passes.ran_any(report)
    assert all("(skipped" in label for label, _ in report)
    assert jitted.lower(*specs).as_text(debug_info=True) == traced_text


@pytest.mark.parametrize("name", ["dead op", "equal ops", "late constant"])
def test_the_default_pipeline_still_cleans_what_the_tracer_did_not_vouch_for(name):
    fn, specs = PIPELINE_CORPUS[name]
    lowered = aotkit.jit(fn, autograph=False).lower(*specs).as_text()
    expected = {
        "dead op": "stablehlo.cosine",
        "equal ops": "stablehlo.sine",
        "late constant": "stablehlo.constant",
    }[name]
    if name == "late constant":
        first_op = next(ln for ln in lowered.splitlines() if " = stablehlo." in ln)
        assert expected in first_op
    else:
        assert lowered.count(expected) == (0 if name == "dead op" else 1)


# --- canonicalize without region simplification ---------------------------------------------


def _regions_kept(x, y):
    def body(i, carry):
        h, unused = carry
        return anp.sin(h) * y, unused + 1.0  # a carry nothing reads after the loop

    h, _ = aotkit.fori_loop(0, 3, body, (x, x))
    inner = aotkit.cond(anp.sum(h) > 0, lambda a: anp.cos(a), lambda a: a * 2.0, h)
    return anp.sort(inner) + anp.argmax(x).astype(np.float32)


def _jax_regions(x, y):
    import jax
    import jax.numpy as jnp

    h = jax.lax.fori_loop(0, 3, lambda i, h: jnp.sin(h) * y, x)
    h = jax.lax.cond(jnp.sum(h) > 0, jnp.cos, lambda a: a * 2.0, h)
    return jnp.sort(h) + jnp.argmax(x)


REGION_CORPUS = {
    **{f"plain: {n}": case for n, case in PIPELINE_CORPUS.items()},
    **{f"transformed: {n}": case for n, case in TRANSFORM_CORPUS.items()},
    "loops, branches, sort, argmax": (_regions_kept, (V, V)),
}


@pytest.mark.parametrize("name", [*REGION_CORPUS, "from JAX"])
def test_region_simplification_finds_nothing_in_stablehlo(name):
    # The default pipeline runs canonicalize{region-simplify=disabled}: it must give what
    # canonicalize with region simplification gives, on aotkit's and JAX's modules.
    if name == "from JAX":
        text = aotkit.jit(_jax_regions, frontend="jax").lower(V, V).as_text(debug_info=True)
    else:
        fn, specs = REGION_CORPUS[name]
        text = aotkit.jit(fn, autograph=False).trace(*specs).as_text(debug_info=True)
    plain = _run("builtin.module(func.func(canonicalize))", text)
    assert plain == _run("builtin.module(func.func(canonicalize{region-simplify=disabled}))", text)
    assert "region-simplify=disabled" in passes.NAMED_PIPELINES["default"]
