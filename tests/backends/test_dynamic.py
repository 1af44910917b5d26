"""The proof of a symbolic program's shapes (aotkit/symbolic/prover.py) and the forms IREE
compiles dynamically (aotkit/backends/_iree_dynamic.py), which need no IREE to run.

Every dimension of every value is a `Dim` of the signature's symbols; each op's
requirements hold for every size, are checked per new set of sizes on the host, or make
the program `NotDynamic` (compiled per shape), with the op, its line and why, word for word.
Modules are written as text here (locations `line L, column C`), or traced by aotkit and
exported by JAX.
"""

from __future__ import annotations

import numpy as np
import pytest
from jaxlib.mlir import ir

import aotkit
import aotkit.numpy as anp
from aotkit import _context
from aotkit.backends import _iree_dynamic
from aotkit.symbolic import algebra, prover, signatures
from aotkit.symbolic.prover import NotDynamic
from tests.symbolic import programs


def parsed(text: str):
    lc = _context.LoweringContext()
    with lc, ir.Location.unknown():
        module = ir.Module.parse(text)
    return module, lc


def specs(texts, constraints=()):
    scope = algebra.SymbolicScope(tuple(constraints))
    return [signatures.parse_spec(t, scope) for t in texts]


def prove(text, ins, outs, constraints=()):
    module, lc = parsed(text)
    return prover.prove(module, lc, specs(ins, constraints), specs(outs, constraints))


def prepare(text, ins, outs, constraints=()):
    module, lc = parsed(text)
    return _iree_dynamic.prepare(
        module, lc, tuple(specs(ins, constraints)), tuple(specs(outs, constraints))
    )


def refused(text, ins, outs, constraints=(), *, iree=False) -> str:
    with pytest.raises(NotDynamic) as e:
        (prepare if iree else prove)(text, ins, outs, constraints)
    return str(e.value)


ADD = """func.func @main(%x: tensor<?xf32>, %y: tensor<?xf32>) -> tensor<?xf32> {
  %0 = stablehlo.add %x, %y : tensor<?xf32>
  return %0 : tensor<?xf32>
}"""

BROADCAST = """func.func @main(%x: tensor<?xf32>, %y: tensor<?x?xf32>) -> tensor<?x?xf32> {
  %0 = stablehlo.get_dimension_size %y, dim = 0 : (tensor<?x?xf32>) -> tensor<i32>
  %1 = stablehlo.get_dimension_size %y, dim = 1 : (tensor<?x?xf32>) -> tensor<i32>
  %2 = stablehlo.reshape %0 : (tensor<i32>) -> tensor<1xi32>
  %3 = stablehlo.reshape %1 : (tensor<i32>) -> tensor<1xi32>
  %4 = stablehlo.concatenate %2, %3, dim = 0 : (tensor<1xi32>, tensor<1xi32>) -> tensor<2xi32>
  %5 = stablehlo.dynamic_broadcast_in_dim %x, %4, dims = [1] : (tensor<?xf32>, tensor<2xi32>) -> tensor<?x?xf32>
  return %5 : tensor<?x?xf32>
}"""  # noqa: E501


# --- what is proven ------------------------------------------------------------------------


def test_every_dimension_of_an_aotkit_mlp_is_a_polynomial_of_its_symbols():
    def mlp(x, w1, w2):
        return anp.tanh(x @ w1) @ w2

    lowered = aotkit.jit(mlp).lower(
        aotkit.spec("f32[b,784]"), aotkit.spec("f32[784,32]"), aotkit.spec("f32[32,10]")
    )
    program = lowered._program
    proof = prover.prove(program.module, program.lc, lowered.flat_in_specs, lowered.flat_out_specs)
    b = lowered.flat_in_specs[0].shape[0]
    assert sorted({d for dims in proof.dims.values() for d in dims}, key=str) == [
        10,
        32,
        784,
        b,
    ]
    assert (proof.assertions, proof.requirements) == ([], [])


def test_a_broadcast_of_equal_dimensions_is_nonexpanding():
    proof = prove(BROADCAST, ["f32[c]", "f32[b,c]"], ["f32[b,c]"])
    assert list(proof.broadcasts.values()) == [((), (0,))]


def test_a_broadcast_of_a_static_one_expands():
    text = BROADCAST.replace("tensor<?xf32>, %y", "tensor<1xf32>, %y").replace(
        "(tensor<?xf32>, tensor<2xi32>)", "(tensor<1xf32>, tensor<2xi32>)"
    )
    proof = prove(text, ["f32[1]", "f32[b,c]"], ["f32[b,c]"])
    assert list(proof.broadcasts.values()) == [((0,), ())]


def test_jax_export_assertions_become_host_checks():
    module = aotkit.load_module(programs.block_export(constraints=("t <= 64",)).serialize())
    program = module._program
    # The constraints the header would hold, without `t <= 64`: the module's own assertion
    # is what refuses t = 65.
    scope = algebra.SymbolicScope(("b >= 1", "t >= 1"))
    ins = [signatures.parse_spec(str(s), scope) for s in module.flat_in_specs]
    outs = [signatures.parse_spec(str(s), scope) for s in module.flat_out_specs]
    proof = prover.prove(program.module, program.lc, ins, outs)
    assert proof.failure({"b": 2, "t": 64}) is None
    assert proof.failure({"b": 2, "t": 65}).startswith(
        "Input shapes do not match the symbolic shape constraint t <= 64. Expected '- t + 64' "
        "to be greater or equal to 0, but found -1."
    )
    text = str(proof.module)
    assert "shape_assertion" not in text and "func.call" not in text


def test_dimensions_computed_in_32_bits_are_refused_where_they_would_wrap():
    proof = prove(BROADCAST, ["f32[c]", "f32[b,c]"], ["f32[b,c]"])
    assert proof.failure({"b": 2**31 - 1, "c": 3}) is None
    assert proof.failure({"b": 2**31, "c": 3}) == (
        "the program computes b = 2147483648 in 32-bit integers, where it does not fit; pass "
        "smaller sizes"
    )


def test_a_requirement_the_constraints_leave_open_is_checked_per_shape():
    proof = prove(ADD, ["f32[b]", "f32[c]"], ["f32[b]"])
    assert proof.failure({"b": 3, "c": 3}) is None
    assert proof.failure({"b": 2, "c": 3}) == (
        "stablehlo.add at line 2, column 8 needs its operands' dimensions to be equal (b == c), "
        "which these sizes break (2 against 3); pass sizes for which it holds"
    )


def test_a_requirement_the_constraints_decide_costs_nothing_per_shape():
    proof = prove(ADD, ["f32[b]", "f32[c]"], ["f32[b]"], constraints=("b == c",))
    assert proof.requirements == []


def test_a_slice_of_a_symbolic_axis_is_proven():
    def tail(x):
        return x[1:] * 2

    lowered = aotkit.jit(tail).lower(aotkit.spec("f32[b]"))
    program = lowered._program
    proof = prover.prove(program.module, program.lc, lowered.flat_in_specs, lowered.flat_out_specs)
    for b in (0, 1, 5):
        assert proof.failure({"b": b}) is None


def test_a_loop_keeps_what_it_carries():
    def twice(x):
        return aotkit.lax.fori_loop(0, 3, lambda i, c: c * 2 + c[::-1], x)

    lowered = aotkit.jit(twice).lower(aotkit.spec("f32[b]"))
    program = lowered._program
    prover.prove(program.module, program.lc, lowered.flat_in_specs, lowered.flat_out_specs)


# --- what is not, word for word --------------------------------------------------------------


def test_operands_that_can_never_agree():
    assert refused(ADD, ["f32[b]", "f32[b+1]"], ["f32[b]"]) == (
        "stablehlo.add at line 2, column 8 needs its operands' dimensions to be equal "
        "(b == b + 1), which holds for no sizes its constraints allow"
    )


def test_a_broadcast_that_may_or_may_not_expand():
    assert refused(BROADCAST, ["f32[d]", "f32[b,c]"], ["f32[b,c]"]) == (
        "stablehlo.dynamic_broadcast_in_dim at line 7, column 8 broadcasts dimension 0 of "
        "size d to c, which the constraints neither make equal nor rule out"
    )


def test_a_broadcast_claim_the_shapes_contradict():
    text = BROADCAST.replace(
        "dims = [1] :", "dims = [1] {known_expanding_dimensions = array<i64: 0>} :"
    )
    assert refused(text, ["f32[c]", "f32[b,c]"], ["f32[b,c]"]) == (
        "stablehlo.dynamic_broadcast_in_dim at line 7, column 8 states "
        "known_expanding_dimensions that its shapes contradict"
    )


def test_an_op_without_a_rule():
    text = """func.func @main(%x: tensor<?xf32>, %p: tensor<f32>, %a: tensor<1xi64>) -> tensor<?xf32> {
  %0 = stablehlo.dynamic_pad %x, %p, %a, %a, %a : (tensor<?xf32>, tensor<f32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<?xf32>
  return %0 : tensor<?xf32>
}"""  # noqa: E501
    assert refused(text, ["f32[b]", "f32[]", "i64[1]"], ["f32[b]"]) == (
        "stablehlo.dynamic_pad at line 2, column 8 has dynamic shapes (tensor<?xf32>), and "
        "aotkit has no rule proving them for every size"
    )


def test_output_dimensions_from_data():
    text = """func.func @main(%x: tensor<f32>, %s: tensor<1xi64>) -> tensor<?xf32> {
  %0 = stablehlo.dynamic_broadcast_in_dim %x, %s, dims = [] : (tensor<f32>, tensor<1xi64>) -> tensor<?xf32>
  return %0 : tensor<?xf32>
}"""  # noqa: E501
    assert refused(text, ["f32[]", "i64[1]"], ["f32[b]"]) == (
        "stablehlo.dynamic_broadcast_in_dim at line 2, column 8 takes its output dimensions "
        "from a computation aotkit cannot follow over the symbols"
    )


def test_a_dimension_no_polynomial_holds():
    text = """func.func @main(%x: tensor<?xf32>, %y: tensor<?xf32>) -> tensor<?xf32> {
  %0 = stablehlo.get_dimension_size %x, dim = 0 : (tensor<?xf32>) -> tensor<i32>
  %1 = stablehlo.get_dimension_size %y, dim = 0 : (tensor<?xf32>) -> tensor<i32>
  %2 = stablehlo.compare GT, %0, %1 : (tensor<i32>, tensor<i32>) -> tensor<i1>
  %3 = stablehlo.select %2, %0, %1 : tensor<i1>, tensor<i32>
  %4 = stablehlo.reshape %3 : (tensor<i32>) -> tensor<1xi32>
  %c = stablehlo.constant dense<1.0> : tensor<f32>
  %5 = stablehlo.dynamic_broadcast_in_dim %c, %4, dims = [] : (tensor<f32>, tensor<1xi32>) -> tensor<?xf32>
  return %5 : tensor<?xf32>
}"""  # noqa: E501
    assert refused(text, ["f32[b]", "f32[c]"], ["f32[b]"]) == (
        "stablehlo.dynamic_broadcast_in_dim at line 8, column 8 takes its output dimensions "
        "from a computation aotkit cannot follow over the symbols"
    )


def test_a_static_result_its_operands_contradict():
    text = BROADCAST.replace("-> tensor<?x?xf32>\n  return", "-> tensor<?x4xf32>\n  return")
    text = text.replace(
        "%5 = stablehlo.dynamic_broadcast_in_dim %x, %4, dims = [1] : (tensor<?xf32>, "
        "tensor<2xi32>) -> tensor<?x?xf32>",
        "%5 = stablehlo.dynamic_broadcast_in_dim %x, %4, dims = [1] : (tensor<?xf32>, "
        "tensor<2xi32>) -> tensor<?x4xf32>",
    ).replace("return %5 : tensor<?x?xf32>", "return %5 : tensor<?x4xf32>")
    text = text.replace(") -> tensor<?x?xf32> {", ") -> tensor<?x4xf32> {")
    assert refused(text, ["f32[c]", "f32[b,c]"], ["f32[b,4]"]) == (
        "stablehlo.dynamic_broadcast_in_dim at line 7, column 8 gives dimension 1 as 4, but "
        "its operands make it c"
    )


def test_an_argument_that_is_not_the_signature():
    assert refused(ADD, ["f32[b]", "f32[4]"], ["f32[b]"]) == (
        "@main's argument type tensor<?xf32> is not the signature's f32[4]"
    )


def test_a_signature_of_another_arity():
    assert refused(ADD, ["f32[b]"], ["f32[b]"]) == (
        "@main is not one block taking the signature's arguments"
    )


def test_a_module_without_main():
    assert refused(ADD.replace("@main", "@other"), ["f32[b]", "f32[b]"], ["f32[b]"]) == (
        "the module has no @main function"
    )


def test_results_of_another_count_or_rank():
    assert refused(ADD, ["f32[b]", "f32[b]"], ["f32[b]", "f32[b]"]) == (
        "@main returns 1 results where the signature has 2"
    )
    assert refused(ADD, ["f32[b]", "f32[b]"], ["f32[b,1]"]) == (
        "@main's result 0 has rank 1 where the signature says f32[b,1]"
    )


def test_a_result_that_is_not_the_signature_is_checked_per_shape():
    proof = prove(ADD, ["f32[b]", "f32[b]"], ["f32[c]"])
    assert proof.failure({"b": 2, "c": 3}) == (
        "func.return at line 3, column 3 needs result 0's dimensions to be the signature's "
        "f32[c] (b == c), which these sizes break (2 against 3); pass sizes for which it holds"
    )


def test_a_region_with_dynamic_shapes():
    text = """func.func @main(%x: tensor<?xf32>) -> tensor<f32> {
  %z = stablehlo.constant dense<0.0> : tensor<f32>
  %0 = scf.execute_region -> tensor<f32> {
    %s = stablehlo.reduce(%x init: %z) applies stablehlo.add across dimensions = [0] : (tensor<?xf32>, tensor<f32>) -> tensor<f32>
    scf.yield %s : tensor<f32>
  }
  return %0 : tensor<f32>
}"""  # noqa: E501
    assert refused(text, ["f32[b]"], ["f32[]"]) == (
        "scf.execute_region at line 3, column 8 has a region with dynamic shapes "
        "(stablehlo.reduce at line 4, column 26)"
    )


def test_branches_are_proven_and_return_equal_dimensions():
    def pick(x, p):
        return aotkit.lax.cond(p, lambda v: v * 2, lambda v: v[::-1] - 1, x)

    lowered = aotkit.jit(pick).lower(aotkit.spec("f32[b]"), aotkit.spec("bool[]"))
    program = lowered._program
    proof = prover.prove(program.module, program.lc, lowered.flat_in_specs, lowered.flat_out_specs)
    assert proof.failure({"b": 3}) is None


def test_a_stride_that_is_not_a_constant():
    text = """func.func @main(%x: tensor<?xf32>) -> tensor<?xf32> {
  %0 = stablehlo.get_dimension_size %x, dim = 0 : (tensor<?xf32>) -> tensor<i32>
  %1 = stablehlo.convert %0 : (tensor<i32>) -> tensor<i64>
  %2 = stablehlo.reshape %1 : (tensor<i64>) -> tensor<1xi64>
  %c = stablehlo.constant dense<0> : tensor<1xi64>
  %3 = stablehlo.real_dynamic_slice %x, %c, %2, %2 : (tensor<?xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<?xf32>
  return %3 : tensor<?xf32>
}"""  # noqa: E501
    assert refused(text, ["f32[b]"], ["f32[1]"]) == (
        "stablehlo.real_dynamic_slice at line 6, column 8 has a stride b, not a constant >= 1"
    )


def test_an_assertion_on_data():
    text = """func.func @main(%x: tensor<?xf32>, %p: tensor<i1>) -> tensor<?xf32> {
  stablehlo.custom_call @shape_assertion(%p) {error_message = "no", has_side_effect = true} : (tensor<i1>) -> ()
  return %x : tensor<?xf32>
}"""  # noqa: E501
    assert refused(text, ["f32[b]", "bool[]"], ["f32[b]"]) == (
        "stablehlo.custom_call at line 2, column 3: a shape assertion whose operands aotkit "
        "cannot compute on the host"
    )


def test_a_bounded_type():
    text = """func.func @main(%x: tensor<?xf32>) -> tensor<?xf32, #stablehlo.bounds<8>> {
  %0 = stablehlo.convert %x : (tensor<?xf32>) -> tensor<?xf32, #stablehlo.bounds<8>>
  return %0 : tensor<?xf32, #stablehlo.bounds<8>>
}"""
    assert refused(text, ["f32[b]"], ["f32[b]"]) == (
        "stablehlo.convert at line 2, column 8 gives tensor<?xf32, #stablehlo.bounds<8>>, "
        "whose encoding (bounded dimensions, sparsity) aotkit does not prove"
    )


def test_internal_checks_name_the_op():
    module, lc = parsed(ADD)
    proof = prover.Proof(module.operation)
    checker = prover._Prover(proof)
    with lc:
        main = prover._main(module.operation)
        add = list(main.regions[0].blocks[0].operations)[0].operation
        with pytest.raises(NotDynamic) as e:
            checker.dims(add.operands[0], add)
        assert str(e.value) == (
            "stablehlo.add at line 2, column 8 takes a value of type tensor<?xf32> with "
            "unknown dimensions"
        )
        with pytest.raises(NotDynamic) as e:
            checker.result(add, (1, 2))
        assert str(e.value) == (
            "stablehlo.add at line 2, column 8 gives tensor<?xf32>, not a tensor of rank 2"
        )
        with pytest.raises(NotDynamic) as e:
            checker.result(add, (prover.Expr(lambda v: 1, "x ? 1 : 2"),))
        assert str(e.value) == (
            "stablehlo.add at line 2, column 8 has a dimension computed as x ? 1 : 2, which "
            "is no polynomial of the symbols"
        )


# --- the forms IREE compiles -------------------------------------------------------------------


def test_broadcasts_are_annotated_and_reshapes_become_tensor_ops():
    b, t = aotkit.symbolic_shape("b, t", constraints=("t >= 1",))

    def norm(x):
        return x - anp.mean(x, axis=-1, keepdims=True)

    lowered = aotkit.jit(norm).lower(aotkit.ShapeDtype((b, t, 16), "float32"))
    program = lowered._program
    text, _ = _iree_dynamic.prepare(
        program.module, program.lc, lowered.flat_in_specs, lowered.flat_out_specs
    )
    assert "stablehlo.dynamic_reshape" not in text
    assert "tensor.expand_shape" in text
    assert "known_nonexpanding_dimensions = array<i64: 0, 1>" in text


def test_a_dot_iree_would_flatten_is_flattened_here():
    def project(x, w):
        return x @ w

    lowered = aotkit.jit(project).lower(aotkit.spec("f32[b,t,16]"), aotkit.spec("f32[16,8]"))
    program = lowered._program
    text, _ = _iree_dynamic.prepare(
        program.module, program.lc, lowered.flat_in_specs, lowered.flat_out_specs
    )
    assert "tensor.collapse_shape" in text and "tensor.expand_shape" in text


@pytest.mark.parametrize(
    "before, after, groups",
    [
        (("b", "t"), ("b", "t", 1), [([0], [0]), ([1], [1, 2])]),
        (("b", "t", 16), ("b*t", 16), [([0, 1], [0]), ([2], [1])]),
        ((1, "b"), ("b",), [([0, 1], [0])]),
        (("t",), ("floordiv(t,8)", 8), [([0], [0, 1])]),
    ],
)
def test_reshape_groups(before, after, groups):
    scope = algebra.SymbolicScope(("t % 8 == 0",))

    def dims(xs):
        return tuple(x if isinstance(x, int) else algebra.parse_dim(x, scope) for x in xs)

    assert _iree_dynamic._groups(dims(before), dims(after)) == groups


def test_a_reshape_of_a_scalar_to_a_dynamic_shape():
    text = """func.func @main(%x: tensor<f32>) -> tensor<?xf32> {
  %c = stablehlo.constant dense<1> : tensor<1xi64>
  %0 = stablehlo.dynamic_reshape %x, %c : (tensor<f32>, tensor<1xi64>) -> tensor<?xf32>
  return %0 : tensor<?xf32>
}"""
    assert refused(text, ["f32[]"], ["f32[1]"], iree=True) == (
        "stablehlo.dynamic_reshape at line 3, column 8 reshapes () to (1), which aotkit "
        "cannot split into groups of equal size for IREE"
    )


def test_a_dot_with_a_vector_operand():
    text = """func.func @main(%x: tensor<?x4xf32>, %v: tensor<4xf32>) -> tensor<?xf32> {
  %0 = stablehlo.dot_general %x, %v, contracting_dims = [1] x [0] : (tensor<?x4xf32>, tensor<4xf32>) -> tensor<?xf32>
  return %0 : tensor<?xf32>
}"""  # noqa: E501
    assert refused(text, ["f32[b,4]", "f32[4]"], ["f32[b]"], iree=True) == (
        "stablehlo.dot_general at line 2, column 8 is a dot with dynamic shapes whose operands "
        "IREE cannot flatten without a dynamic reshape (a vector operand, or no contraction)"
    )


def test_a_dynamic_form_that_does_not_verify_is_refused(monkeypatch):
    def broken(op, proof):
        op.attributes["broadcast_dimensions"] = ir.DenseI64ArrayAttr.get([0, 1])

    monkeypatch.setattr(_iree_dynamic, "_annotate", broken)
    message = refused(BROADCAST, ["f32[c]", "f32[b,c]"], ["f32[b,c]"], iree=True)
    assert message.startswith("aotkit's dynamic form of the module does not verify: ")


def test_values_are_those_of_numpy_for_the_dimension_arithmetic():
    # x[::2] computes its length with a truncating division and a sign fix: decided here.
    def evens(x):
        return x[::2] + 1

    lowered = aotkit.jit(evens).lower(aotkit.spec("f32[b]"))
    program = lowered._program
    proof = prover.prove(program.module, program.lc, lowered.flat_in_specs, lowered.flat_out_specs)
    for b in (0, 1, 2, 7):
        assert proof.failure({"b": b}) is None
        (out,) = [d for d in proof.dims[_returned(proof)]]
        assert out.evaluate({"b": b}) == len(np.arange(b)[::2])


def _returned(proof):
    main = prover._main(proof.module)
    ret = list(main.regions[0].blocks[0].operations)[-1].operation
    return ret.operands[0]
