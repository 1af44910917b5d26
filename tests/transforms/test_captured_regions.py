"""Transforms of ops whose regions use values defined outside them (StableHLO regions are
not isolated from above): sort (custom comparators), reduce, scatter, select_and_scatter,
while, case and if, under grad, jvp and vmap.

The modules are written out by hand, so what the region captures is the test's choice and
not a pipeline's: a constant, a value a few ops compute from constants, or a function
argument (`KINDS`). The transformed programs run on the CPU backend, whose converter to
HLO refuses a sort, reduce or scatter region that uses a value from above: a copied region
must get its values inside (rebuilt there, or passed in as operands). The oracle is JAX
(jax.grad, jax.jvp, jax.vmap of the same program written with jax.numpy) or NumPy; dtypes
are checked as well as values. The jax.export files are the programs of issue 44.
"""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import export, lax

import aotkit
from aotkit.transforms.core import TransformError
from tests import lane

RNG = np.random.default_rng(44)
F32 = np.float32

# How the region's `%c` is defined: a constant, computed from constants by two ops, or
# the function's argument (for the constant kinds the argument is unused).
KINDS = ("constant", "computed", "argument")


def prelude(kind: str, value, mlir_type: str = "f32") -> tuple[str, str]:
    """(the argument's name, the lines that define `%c`) for a capture of `kind`."""
    if kind == "argument":
        return "c", ""
    if kind == "constant":
        return "unused", f"%c = stablehlo.constant dense<{value}> : tensor<{mlir_type}>"
    base = value - 1
    return "unused", (
        f"%c0 = stablehlo.constant dense<{base}> : tensor<{mlir_type}>\n"
        f"  %c1 = stablehlo.constant dense<1{'.0' if mlir_type == 'f32' else ''}> "
        f": tensor<{mlir_type}>\n"
        f"  %c = stablehlo.add %c0, %c1 : tensor<{mlir_type}>"
    )


def load(template: str, kind: str, value, mlir_type: str = "f32", **options):
    arg, lines = prelude(kind, value, mlir_type)
    text = template.replace("ARG", arg).replace("PRELUDE", lines)
    return aotkit.load_module(text.encode(), **options)


def oracle_for(fn, kind: str, position: int):
    """The JAX twin of a module of `kind`: a constant capture has no derivative in the
    argument it replaces."""
    if kind == "argument":
        return fn

    def twin(*args):
        args = list(args)
        args[position] = lax.stop_gradient(args[position])
        return fn(*args)

    return twin


def close(got, want, rtol=2e-5, atol=2e-5):
    got_leaves, want_leaves = jax.tree.leaves(got), jax.tree.leaves(want)
    assert len(got_leaves) == len(want_leaves)
    for g, w in zip(got_leaves, want_leaves, strict=True):
        assert np.asarray(g).dtype == np.asarray(w).dtype
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=rtol, atol=atol)


def f32(*shape):
    return RNG.standard_normal(shape).astype(F32)


_SUM = (
    "stablehlo.reduce({x} init: %zero) applies stablehlo.add across dimensions = [0] : "
    "(tensor<{n}xf32>, tensor<f32>) -> tensor<f32>"
)


def total(x: str, n: int) -> str:
    return _SUM.format(x=x, n=n)


# --- sort: a custom comparator over two operands ---------------------------------------------

SORT = f"""
func.func @main(%x: tensor<5xf32>, %ARG: tensor<f32>) -> tensor<f32> {{
  PRELUDE
  %i = stablehlo.iota dim = 0 : tensor<5xi32>
  %s:2 = "stablehlo.sort"(%x, %i) ({{
  ^bb0(%a: tensor<f32>, %b: tensor<f32>, %ia: tensor<i32>, %ib: tensor<i32>):
    %ka = stablehlo.multiply %a, %c : tensor<f32>
    %kb = stablehlo.multiply %b, %c : tensor<f32>
    %lt = stablehlo.compare LT, %ka, %kb : (tensor<f32>, tensor<f32>) -> tensor<i1>
    stablehlo.return %lt : tensor<i1>
  }}) {{dimension = 0 : i64, is_stable = true}}
      : (tensor<5xf32>, tensor<5xi32>) -> (tensor<5xf32>, tensor<5xi32>)
  %w = stablehlo.constant dense<[1.0, 2.0, 3.0, 4.0, 5.0]> : tensor<5xf32>
  %pos = stablehlo.convert %s#1 : (tensor<5xi32>) -> tensor<5xf32>
  %p = stablehlo.multiply %s#0, %w : tensor<5xf32>
  %q = stablehlo.add %p, %pos : tensor<5xf32>
  %q2 = stablehlo.multiply %q, %x : tensor<5xf32>
  %zero = stablehlo.constant dense<0.0> : tensor<f32>
  %r = {total("%q2", 5)}
  return %r : tensor<f32>
}}
"""
SORT_C = -1.0  # a descending sort: a comparator that lost its capture sorts otherwise


def sort_twin(x, c):
    x = jnp.asarray(x)
    order = jnp.argsort(x * c, stable=True)
    w = jnp.arange(1.0, 6.0, dtype=F32)
    return jnp.sum((x[order] * w + order.astype(F32)) * x)


# --- reduce: an argmax whose comparison reads a scale from above -----------------------------

REDUCE = f"""
func.func @main(%x: tensor<5xf32>, %ARG: tensor<f32>) -> tensor<f32> {{
  PRELUDE
  %i = stablehlo.iota dim = 0 : tensor<5xi32>
  %ninf = stablehlo.constant dense<0xFF800000> : tensor<f32>
  %zi = stablehlo.constant dense<0> : tensor<i32>
  %r:2 = "stablehlo.reduce"(%x, %i, %ninf, %zi) ({{
  ^bb0(%av: tensor<f32>, %ai: tensor<i32>, %bv: tensor<f32>, %bi: tensor<i32>):
    %ka = stablehlo.multiply %av, %c : tensor<f32>
    %kb = stablehlo.multiply %bv, %c : tensor<f32>
    %gt = stablehlo.compare GT, %ka, %kb : (tensor<f32>, tensor<f32>) -> tensor<i1>
    %eq = stablehlo.compare EQ, %ka, %kb : (tensor<f32>, tensor<f32>) -> tensor<i1>
    %lt = stablehlo.compare LT, %ai, %bi : (tensor<i32>, tensor<i32>) -> tensor<i1>
    %tie = stablehlo.and %eq, %lt : tensor<i1>
    %pick = stablehlo.or %gt, %tie : tensor<i1>
    %v = stablehlo.select %pick, %av, %bv : (tensor<i1>, tensor<f32>, tensor<f32>) -> tensor<f32>
    %j = stablehlo.select %pick, %ai, %bi : (tensor<i1>, tensor<i32>, tensor<i32>) -> tensor<i32>
    stablehlo.return %v, %j : tensor<f32>, tensor<i32>
  }}) {{dimensions = array<i64: 0>}}
      : (tensor<5xf32>, tensor<5xi32>, tensor<f32>, tensor<i32>) -> (tensor<f32>, tensor<i32>)
  %e = stablehlo.dynamic_slice %x, %r#1, sizes = [1] : (tensor<5xf32>, tensor<i32>) -> tensor<1xf32>
  %e0 = stablehlo.reshape %e : (tensor<1xf32>) -> tensor<f32>
  %sq = stablehlo.multiply %x, %x : tensor<5xf32>
  %zero = stablehlo.constant dense<0.0> : tensor<f32>
  %s = {total("%sq", 5)}
  %out = stablehlo.add %e0, %s : tensor<f32>
  return %out : tensor<f32>
}}
"""
REDUCE_C = 2.0  # with c = 0 every element ties and the argmax is 0


def reduce_twin(x, c):
    x = jnp.asarray(x)
    return x[jnp.argmax(x * c)] + jnp.sum(x * x)


# --- scatter: counts weighted by a value from above -------------------------------------------

SCATTER = f"""
func.func @main(%x: tensor<3xf32>, %ARG: tensor<T>) -> tensor<f32> {{
  PRELUDE
  %idx = stablehlo.constant dense<[[0], [2], [0], [1], [2]]> : tensor<5x1xi32>
  %zeros = stablehlo.constant dense<NIL> : tensor<3xT>
  %ones = stablehlo.constant dense<ONE> : tensor<5xT>
  %n = "stablehlo.scatter"(%zeros, %idx, %ones) ({{
  ^bb0(%a: tensor<T>, %b: tensor<T>):
    %bk = stablehlo.multiply %b, %c : tensor<T>
    %s = stablehlo.add %a, %bk : tensor<T>
    stablehlo.return %s : tensor<T>
  }}) {{scatter_dimension_numbers = #stablehlo.scatter<inserted_window_dims = [0],
      scatter_dims_to_operand_dims = [0], index_vector_dim = 1>}}
      : (tensor<3xT>, tensor<5x1xi32>, tensor<5xT>) -> tensor<3xT>
  %nf = stablehlo.convert %n : (tensor<3xT>) -> tensor<3xf32>
  %p = stablehlo.multiply %x, %nf : tensor<3xf32>
  %q = stablehlo.multiply %p, %x : tensor<3xf32>
  %zero = stablehlo.constant dense<0.0> : tensor<f32>
  %r = {total("%q", 3)}
  return %r : tensor<f32>
}}
"""
SCATTER_C = 3
COUNTS = np.array([2.0, 1.0, 2.0], F32)


def scatter_module(kind, mlir_type="i32"):
    value = SCATTER_C if mlir_type == "i32" else float(SCATTER_C)
    one, nil = ("1", "0") if mlir_type == "i32" else ("1.0", "0.0")
    return load(
        SCATTER.replace("tensor<T>", f"tensor<{mlir_type}>")
        .replace("xT>", f"x{mlir_type}>")
        .replace("ONE", one)
        .replace("NIL", nil),
        kind,
        value,
        mlir_type,
    )


def scatter_twin(x, c):
    return jnp.sum(x * x * COUNTS * jnp.asarray(c).astype(F32))


# A scatter of the argument's values (the batched rule's path under vmap).
SCATTER_VALUES = """
func.func @main(%x: tensor<5xf32>, %ARG: tensor<f32>) -> tensor<3xf32> {
  PRELUDE
  %idx = stablehlo.constant dense<[[0], [2], [0], [1], [2]]> : tensor<5x1xi32>
  %zeros = stablehlo.constant dense<0.0> : tensor<3xf32>
  %n = "stablehlo.scatter"(%zeros, %idx, %x) ({
  ^bb0(%a: tensor<f32>, %b: tensor<f32>):
    %bk = stablehlo.multiply %b, %c : tensor<f32>
    %s = stablehlo.add %a, %bk : tensor<f32>
    stablehlo.return %s : tensor<f32>
  }) {scatter_dimension_numbers = #stablehlo.scatter<inserted_window_dims = [0],
      scatter_dims_to_operand_dims = [0], index_vector_dim = 1>}
      : (tensor<3xf32>, tensor<5x1xi32>, tensor<5xf32>) -> tensor<3xf32>
  return %n : tensor<3xf32>
}
"""
INDEX = np.array([0, 2, 0, 1, 2])


def scatter_values_numpy(x, c):
    out = np.zeros(3, F32)
    np.add.at(out, INDEX, x * F32(c))
    return out


# --- select_and_scatter: a max pool's gradient whose select reads an offset ------------------

SELECT_AND_SCATTER = f"""
func.func @main(%x: tensor<4xf32>, %s: tensor<2xf32>, %ARG: tensor<f32>) -> tensor<f32> {{
  PRELUDE
  %init = stablehlo.constant dense<0.0> : tensor<f32>
  %y = "stablehlo.select_and_scatter"(%x, %s, %init) ({{
  ^bb0(%a: tensor<f32>, %b: tensor<f32>):
    %az = stablehlo.add %a, %c : tensor<f32>
    %ge = stablehlo.compare GE, %az, %b : (tensor<f32>, tensor<f32>) -> tensor<i1>
    stablehlo.return %ge : tensor<i1>
  }}, {{
  ^bb0(%a: tensor<f32>, %b: tensor<f32>):
    %sum = stablehlo.add %a, %b : tensor<f32>
    stablehlo.return %sum : tensor<f32>
  }}) {{window_dimensions = array<i64: 2>, window_strides = array<i64: 2>}}
      : (tensor<4xf32>, tensor<2xf32>, tensor<f32>) -> tensor<4xf32>
  %p = stablehlo.multiply %y, %x : tensor<4xf32>
  %zero = stablehlo.constant dense<0.0> : tensor<f32>
  %r = {total("%p", 4)}
  return %r : tensor<f32>
}}
"""


def pool_grad(x, s):
    """NumPy's select_and_scatter of `s` onto the first maximum of each window of 2."""
    y = np.zeros_like(x)
    for w in range(2):
        y[2 * w + int(np.argmax(x[2 * w : 2 * w + 2]))] += s[w]
    return y


# --- while: a loop body reading a scale and a constant from above ----------------------------

WHILE = f"""
func.func @main(%x: tensor<3xf32>, %ARG: tensor<f32>) -> tensor<f32> {{
  PRELUDE
  %k = stablehlo.constant dense<0.5> : tensor<f32>
  %kb = stablehlo.broadcast_in_dim %k, dims = [] : (tensor<f32>) -> tensor<3xf32>
  %n = stablehlo.constant dense<3> : tensor<i32>
  %i0 = stablehlo.constant dense<0> : tensor<i32>
  %r:2 = stablehlo.while(%i = %i0, %h = %x) : tensor<i32>, tensor<3xf32>
    cond {{
      %p = stablehlo.compare LT, %i, %n : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %p : tensor<i1>
    }} do {{
      %one = stablehlo.constant dense<1> : tensor<i32>
      %i1 = stablehlo.add %i, %one : tensor<i32>
      %cb = stablehlo.broadcast_in_dim %c, dims = [] : (tensor<f32>) -> tensor<3xf32>
      %hc = stablehlo.multiply %h, %cb : tensor<3xf32>
      %sn = stablehlo.sine %h : tensor<3xf32>
      %ks = stablehlo.multiply %sn, %kb : tensor<3xf32>
      %h1 = stablehlo.add %hc, %ks : tensor<3xf32>
      stablehlo.return %i1, %h1 : tensor<i32>, tensor<3xf32>
    }}
  %zero = stablehlo.constant dense<0.0> : tensor<f32>
  %s = {total("%r#1", 3)}
  return %s : tensor<f32>
}}
"""
WHILE_C = 0.7


def while_twin(x, c):
    h = lax.fori_loop(0, 3, lambda i, h: h * c + 0.5 * jnp.sin(h), x)
    return jnp.sum(h)


# --- case and if: branches reading values from above -----------------------------------------

CASE = f"""
func.func @main(%i: tensor<i32>, %x: tensor<3xf32>, %ARG: tensor<f32>) -> tensor<f32> {{
  PRELUDE
  %k = stablehlo.constant dense<2.0> : tensor<f32>
  %zero = stablehlo.constant dense<0.0> : tensor<f32>
  %r = "stablehlo.case"(%i) ({{
    %cb = stablehlo.broadcast_in_dim %c, dims = [] : (tensor<f32>) -> tensor<3xf32>
    %p = stablehlo.multiply %x, %cb : tensor<3xf32>
    %s = {total("%p", 3)}
    stablehlo.return %s : tensor<f32>
  }}, {{
    %sn = stablehlo.sine %x : tensor<3xf32>
    %s = {total("%sn", 3)}
    %ck = stablehlo.multiply %c, %k : tensor<f32>
    %t = stablehlo.add %s, %ck : tensor<f32>
    stablehlo.return %t : tensor<f32>
  }}, {{
    %s = {total("%x", 3)}
    %t = stablehlo.multiply %s, %k : tensor<f32>
    stablehlo.return %t : tensor<f32>
  }}) : (tensor<i32>) -> tensor<f32>
  return %r : tensor<f32>
}}
"""
CASE_C = 1.5


def case_twin(i, x, c):
    return lax.switch(
        i,
        [
            lambda: jnp.sum(x * c),
            lambda: jnp.sum(jnp.sin(x)) + c * 2.0,
            lambda: jnp.sum(x) * 2.0,
        ],
    )


IF = f"""
func.func @main(%x: tensor<3xf32>, %ARG: tensor<f32>) -> tensor<f32> {{
  PRELUDE
  %k = stablehlo.constant dense<2.0> : tensor<f32>
  %zero = stablehlo.constant dense<0.0> : tensor<f32>
  %sx = {total("%x", 3)}
  %pred = stablehlo.compare GT, %sx, %zero : (tensor<f32>, tensor<f32>) -> tensor<i1>
  %r = "stablehlo.if"(%pred) ({{
    %cb = stablehlo.broadcast_in_dim %c, dims = [] : (tensor<f32>) -> tensor<3xf32>
    %p = stablehlo.multiply %x, %cb : tensor<3xf32>
    %s = {total("%p", 3)}
    stablehlo.return %s : tensor<f32>
  }}, {{
    %sn = stablehlo.sine %x : tensor<3xf32>
    %s = {total("%sn", 3)}
    %ck = stablehlo.multiply %c, %k : tensor<f32>
    %t = stablehlo.add %s, %ck : tensor<f32>
    stablehlo.return %t : tensor<f32>
  }}) : (tensor<i1>) -> tensor<f32>
  return %r : tensor<f32>
}}
"""


def if_twin(x, c):
    return lax.cond(jnp.sum(x) > 0, lambda: jnp.sum(x * c), lambda: jnp.sum(jnp.sin(x)) + c * 2.0)


# Modules of (x, c) -> scalar: the template, c's value, the JAX twin.
SCALAR = {
    "sort": (SORT, SORT_C, sort_twin),
    "reduce": (REDUCE, REDUCE_C, reduce_twin),
    "while": (WHILE, WHILE_C, while_twin),
    "if": (IF, CASE_C, if_twin),
}
SIZES = {"sort": 5, "reduce": 5, "while": 3, "if": 3}


def xs_for(name):
    n = SIZES[name]
    x = f32(n)
    if name == "if":
        return x, np.stack([np.abs(x), -np.abs(x), x])  # both branches, lane by lane
    return x, f32(3, n)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", SCALAR)
def test_grad(name, kind):
    template, c, twin = SCALAR[name]
    x, _ = xs_for(name)
    lowered = load(template, kind, c)
    got = lowered.grad(argnums=(0, 1)).compile()(x, F32(c))
    want = jax.grad(oracle_for(twin, kind, 1), argnums=(0, 1))(x, F32(c))
    close(got, want)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", SCALAR)
def test_jvp(name, kind):
    template, c, twin = SCALAR[name]
    x, _ = xs_for(name)
    tx, tc = f32(*x.shape), F32(0.3)
    lowered = load(template, kind, c)
    got = lowered.jvp().compile()((x, F32(c)), (tx, tc))
    want = jax.jvp(oracle_for(twin, kind, 1), (x, F32(c)), (tx, tc))
    close(got, want)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", SCALAR)
def test_vmap_of_x(name, kind):
    template, c, twin = SCALAR[name]
    _, xs = xs_for(name)
    lowered = load(template, kind, c)
    got = lowered.vmap(in_axes=(0, None), axis_size=3).compile()(xs, F32(c))
    close(got, jax.vmap(twin, in_axes=(0, None))(xs, F32(c)))


@pytest.mark.parametrize("name", ["sort", "while", "if"])
@pytest.mark.parametrize("in_axes", [(0, 0), (None, 0)])
def test_vmap_of_the_captured_value(name, in_axes):
    """The captured value is batched: each lane reads its own (a sort takes it as one
    more operand, batched as the others; a loop or branch reads it from above)."""
    template, c, twin = SCALAR[name]
    x, xs = xs_for(name)
    cs = np.array([c, -c, 0.5 * c], F32)
    args = (xs if in_axes[0] == 0 else x, cs)
    lowered = load(template, "argument", c)
    got = lowered.vmap(in_axes=in_axes, axis_size=3).compile()(*args)
    close(got, jax.vmap(twin, in_axes=in_axes)(*args))


def test_grad_of_the_captured_value_through_a_vmap():
    """vmap of a gradient: the loop's captured scale gets a cotangent per lane."""
    lowered = load(WHILE, "argument", WHILE_C)
    xs, cs = f32(3, 3), np.array([0.7, -0.4, 1.1], F32)
    got = lowered.grad(argnums=(0, 1)).vmap(axis_size=3).compile()(xs, cs)
    close(got, jax.vmap(jax.grad(while_twin, argnums=(0, 1)))(xs, cs))


def test_a_sort_that_captures_a_constant_stays_a_copy_of_its_comparator():
    """The constant is built again inside the copied comparator: no extra operand."""
    text = load(SORT, "constant", SORT_C).vmap(in_axes=(0, None), axis_size=3).as_text()
    (sort,) = re.findall(r'"stablehlo\.sort"\(([^)]*)\)', text) or re.findall(
        r"stablehlo\.sort\(([^)]*)\)", text
    )
    assert sort.count("%") == 2, sort


def test_a_sort_that_captures_an_argument_takes_it_as_an_operand():
    text = load(SORT, "argument", SORT_C).vmap(in_axes=(0, None), axis_size=3).as_text()
    (sort,) = re.findall(r'"stablehlo\.sort"\(([^)]*)\)', text) or re.findall(
        r"stablehlo\.sort\(([^)]*)\)", text
    )
    assert sort.count("%") == 3, sort


# --- case: an index argument ----------------------------------------------------------------


@pytest.mark.parametrize("index", [0, 1, 2])
@pytest.mark.parametrize("kind", KINDS)
def test_case_grad_and_jvp(kind, index):
    lowered = load(CASE, kind, CASE_C)
    twin = oracle_for(case_twin, kind, 2)
    i, x, c = np.int32(index), f32(3), F32(CASE_C)
    got = lowered.grad(argnums=(1, 2)).compile()(i, x, c)
    close(got, jax.grad(twin, argnums=(1, 2))(i, x, c))
    tx, tc = f32(3), F32(-0.6)
    got = lowered.jvp().compile()((i, x, c), (None, tx, tc))
    want = jax.jvp(lambda x, c: twin(i, x, c), (x, c), (tx, tc))
    close(got, want)


CASE_AXES = [(None, 0, None), (0, 0, None), (0, None, 0), (None, None, 0), (0, 0, 0)]


@pytest.mark.parametrize(
    ("kind", "in_axes"),
    # A constant capture ignores the argument: batching that alone says nothing.
    [(k, a) for k in KINDS for a in CASE_AXES if k == "argument" or a[2] is None],
)
def test_case_vmap(kind, in_axes):
    lowered = load(CASE, kind, CASE_C)
    index = np.array([0, 2, 1], np.int32)
    x, xs = f32(3), f32(3, 3)
    cs = np.array([1.5, -0.5, 2.5], F32)
    args = (
        index if in_axes[0] == 0 else np.int32(1),
        xs if in_axes[1] == 0 else x,
        cs if in_axes[2] == 0 else F32(CASE_C),
    )
    got = lowered.vmap(in_axes=in_axes, axis_size=3).compile()(*args)
    close(got, jax.vmap(case_twin, in_axes=in_axes)(*args))


# --- scatter ---------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_scatter_of_integer_counts(kind):
    """An integer scatter reading its weight from above: replayed under grad and jvp
    (no tangent flows through it), taken as an operand under vmap."""
    lowered = scatter_module(kind)
    x, xs, k = f32(3), f32(4, 3), np.int32(SCATTER_C)
    got = lowered.grad().compile()(x, k)
    close(got, jax.grad(scatter_twin)(x, k))
    tx = f32(3)
    got = lowered.jvp().compile()((x, k), (tx, None))
    close(got, jax.jvp(lambda x: scatter_twin(x, k), (x,), (tx,)))
    got = lowered.vmap(in_axes=(0, None), axis_size=4).compile()(xs, k)
    close(got, jax.vmap(scatter_twin, in_axes=(0, None))(xs, k))


@pytest.mark.parametrize("kind", KINDS)
def test_scatter_of_batched_values(kind):
    lowered = load(SCATTER_VALUES, kind, 2.0)
    xs = f32(4, 5)
    got = lowered.vmap(in_axes=(0, None), axis_size=4).compile()(xs, F32(2.0))
    assert got.dtype == np.float32
    want = np.stack([scatter_values_numpy(x, 2.0) for x in xs])
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("in_axes", [(0, 0), (None, 0)])
def test_scatter_whose_region_reads_a_batched_value(in_axes):
    """Each lane's updates combine with that lane's weight."""
    lowered = load(SCATTER_VALUES, "argument", 2.0)
    xs, cs = f32(4, 5), np.array([2.0, -1.0, 0.5, 3.0], F32)
    x = xs[0]
    args = (xs if in_axes[0] == 0 else x, cs)
    got = lowered.vmap(in_axes=in_axes, axis_size=4).compile()(*args)
    assert got.dtype == np.float32
    lanes = xs if in_axes[0] == 0 else [x] * 4
    want = np.stack([scatter_values_numpy(a, c) for a, c in zip(lanes, cs, strict=True)])
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_a_float_scatter_whose_weight_has_a_tangent_is_refused():
    """The weight is passed in as one more operand, which has a tangent then: a scatter of
    two operands with a region of its own, which aotkit has no derivative for."""
    lowered = scatter_module("argument", "f32")
    x, c = f32(3), F32(SCATTER_C)
    # Differentiated in x only, the weight has no tangent: the scatter is replayed.
    close(lowered.grad().compile()(x, c), jax.grad(scatter_twin)(x, c))
    with pytest.raises(
        TransformError,
        match=r"^grad: stablehlo\.scatter at line 7, column 8 scatters 2 operands at once; "
        r"aotkit differentiates scatters of one operand$",
    ):
        lowered.grad(argnums=1)


# --- reduce_window: a pool that is a max or a min by a value from above ---------------------

REDUCE_WINDOW = """
func.func @main(%x: tensor<6xf32>, %ARG: tensor<f32>) -> tensor<3xf32> {
  PRELUDE
  %zero = stablehlo.constant dense<0.0> : tensor<f32>
  %ninf = stablehlo.constant dense<0xFF800000> : tensor<f32>
  %pinf = stablehlo.constant dense<0x7F800000> : tensor<f32>
  %up = stablehlo.compare GT, %c, %zero : (tensor<f32>, tensor<f32>) -> tensor<i1>
  %init = stablehlo.select %up, %ninf, %pinf : (tensor<i1>, tensor<f32>, tensor<f32>) -> tensor<f32>
  %r = "stablehlo.reduce_window"(%x, %init) ({
  ^bb0(%a: tensor<f32>, %b: tensor<f32>):
    %pos = stablehlo.compare GT, %c, %zero : (tensor<f32>, tensor<f32>) -> tensor<i1>
    %mx = stablehlo.maximum %a, %b : tensor<f32>
    %mn = stablehlo.minimum %a, %b : tensor<f32>
    %v = stablehlo.select %pos, %mx, %mn : (tensor<i1>, tensor<f32>, tensor<f32>) -> tensor<f32>
    stablehlo.return %v : tensor<f32>
  }) {window_dimensions = array<i64: 2>, window_strides = array<i64: 2>}
      : (tensor<6xf32>, tensor<f32>) -> tensor<3xf32>
  return %r : tensor<3xf32>
}
"""


@pytest.mark.parametrize("c", [-1.0, 1.0])
@pytest.mark.parametrize("kind", KINDS)
def test_reduce_window_vmap(kind, c):
    lowered = load(REDUCE_WINDOW, kind, c)
    xs = f32(4, 6)
    got = lowered.vmap(in_axes=(0, None), axis_size=4).compile()(xs, F32(c))
    assert got.dtype == np.float32
    pairs = xs.reshape(4, 3, 2)
    np.testing.assert_array_equal(got, pairs.max(-1) if c > 0 else pairs.min(-1))


# --- select_and_scatter ----------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["constant", "computed"])
def test_select_and_scatter(kind):
    lowered = load(SELECT_AND_SCATTER, kind, 0.0)
    x, s, c = f32(4), f32(2), F32(0.0)
    y = pool_grad(x, s)
    got = lowered.grad().compile()(x, s, c)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, y, rtol=1e-6, atol=1e-6)
    tx, ts = f32(4), f32(2)
    out, tout = lowered.jvp().compile()((x, s, c), (tx, ts, F32(0.0)))
    assert out.dtype == tout.dtype == np.float32
    np.testing.assert_allclose(out, np.sum(y * x), rtol=1e-6)
    np.testing.assert_allclose(tout, np.sum(y * tx) + np.sum(pool_grad(x, ts) * x), rtol=1e-5)
    xs, ss = f32(3, 4), f32(3, 2)
    got = lowered.vmap(in_axes=(0, 0, None), axis_size=3).compile()(xs, ss, c)
    assert got.dtype == np.float32
    want = [np.sum(pool_grad(a, b) * a) for a, b in zip(xs, ss, strict=True)]
    np.testing.assert_allclose(got, want, rtol=1e-6)


@pytest.mark.parametrize("transform", ["jvp", "vmap"])
def test_select_and_scatter_that_captures_an_argument_is_refused(transform):
    lowered = load(SELECT_AND_SCATTER, "argument", 0.0)
    with pytest.raises(
        TransformError,
        match=r"^stablehlo\.select_and_scatter at line 5, column 8: its region uses a f32\[\] "
        r"value defined outside it, which is not computed from constants alone, and "
        r"stablehlo\.select_and_scatter has no operand to pass it in; compute that value "
        r"inside the region from constants, or write the op without it$",
    ):
        if transform == "vmap":
            lowered.vmap(in_axes=(0, 0, None), axis_size=3)
        else:
            lowered.jvp()


# --- what cannot be passed in --------------------------------------------------------------


def test_a_batched_value_read_by_a_reduction_region_is_refused():
    """The reduction gets the value as one more operand, from an init value of its own:
    batched, that init is what vmap refuses."""
    lowered = load(REDUCE, "argument", REDUCE_C)
    with pytest.raises(
        TransformError,
        match=r"^vmap: stablehlo\.reduce at line 7, column 10 reduces from an init value that "
        r"is batched \(a value its region reads from outside it is passed in as one\); aotkit "
        r"batches reductions whose init values, and the values their regions read from "
        r"outside, are the same for every batch element$",
    ):
        lowered.vmap(in_axes=(0, 0), axis_size=3)


SORT_READS_A_VECTOR = """
func.func @main(%x: tensor<5xf32>, %w: tensor<2xf32>) -> tensor<5xf32> {
  %0 = "stablehlo.sort"(%x) ({
  ^bb0(%a: tensor<f32>, %b: tensor<f32>):
    %w0 = stablehlo.slice %w [0:1] : (tensor<2xf32>) -> tensor<1xf32>
    %s = stablehlo.reshape %w0 : (tensor<1xf32>) -> tensor<f32>
    %ka = stablehlo.multiply %a, %s : tensor<f32>
    %kb = stablehlo.multiply %b, %s : tensor<f32>
    %1 = stablehlo.compare LT, %ka, %kb : (tensor<f32>, tensor<f32>) -> tensor<i1>
    stablehlo.return %1 : tensor<i1>
  }) {dimension = 0 : i64} : (tensor<5xf32>) -> tensor<5xf32>
  return %0 : tensor<5xf32>
}
"""


def test_a_comparator_that_reads_a_vector_argument_is_refused():
    lowered = aotkit.load_module(SORT_READS_A_VECTOR.encode())
    with pytest.raises(
        TransformError,
        match=r"^stablehlo\.sort at line 3, column 8: its region uses a f32\[2\] value defined "
        r"outside it, which is not computed from constants alone, and aotkit passes only "
        r"scalars into such a region \(as one more operand\); compute that value inside the "
        r"region, or pass it as an operand of the op$",
    ):
        lowered.vmap(in_axes=(0, None), axis_size=2)


# --- captures inside a loop body ------------------------------------------------------------

# A sort inside a loop whose comparator reads a carry of the loop (a block argument), an
# argument of the function and a constant of the function, from two regions up.
SORT_IN_A_LOOP = """
func.func @main(%x: tensor<4xf32>, %c: tensor<f32>, %y: tensor<f32>) -> tensor<f32> {
  %n = stablehlo.constant dense<2> : tensor<i32>
  %i0 = stablehlo.constant dense<0> : tensor<i32>
  %s0 = stablehlo.constant dense<1.0> : tensor<f32>
  %eps = stablehlo.constant dense<0.0> : tensor<f32>
  %r:3 = stablehlo.while(%i = %i0, %h = %x, %sgn = %s0) : tensor<i32>, tensor<4xf32>, tensor<f32>
    cond {
      %p = stablehlo.compare LT, %i, %n : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %p : tensor<i1>
    } do {
      %one = stablehlo.constant dense<1> : tensor<i32>
      %i1 = stablehlo.add %i, %one : tensor<i32>
      %sorted = "stablehlo.sort"(%h) ({
      ^bb0(%a: tensor<f32>, %b: tensor<f32>):
        %ka = stablehlo.multiply %a, %sgn : tensor<f32>
        %kb = stablehlo.multiply %b, %sgn : tensor<f32>
        %ka2 = stablehlo.multiply %ka, %c : tensor<f32>
        %kb2 = stablehlo.multiply %kb, %c : tensor<f32>
        %ka3 = stablehlo.add %ka2, %eps : tensor<f32>
        %lt = stablehlo.compare LT, %ka3, %kb2 : (tensor<f32>, tensor<f32>) -> tensor<i1>
        stablehlo.return %lt : tensor<i1>
      }) {dimension = 0 : i64, is_stable = true} : (tensor<4xf32>) -> tensor<4xf32>
      %w = stablehlo.constant dense<[1.0, 2.0, 3.0, 4.0]> : tensor<4xf32>
      %h1 = stablehlo.multiply %sorted, %w : tensor<4xf32>
      %neg = stablehlo.negate %sgn : tensor<f32>
      stablehlo.return %i1, %h1, %neg : tensor<i32>, tensor<4xf32>, tensor<f32>
    }
  %zero = stablehlo.constant dense<0.0> : tensor<f32>
  %sq = stablehlo.multiply %r#1, %r#1 : tensor<4xf32>
  %s = stablehlo.reduce(%sq init: %zero) applies stablehlo.add across dimensions = [0]
      : (tensor<4xf32>, tensor<f32>) -> tensor<f32>
  %out = stablehlo.add %s, %y : tensor<f32>
  return %out : tensor<f32>
}
"""


def sort_in_a_loop_twin(x, c, y):
    w = jnp.arange(1.0, 5.0, dtype=F32)
    h, sgn = jnp.asarray(x), 1.0
    for _ in range(2):
        h = h[jnp.argsort(h * sgn * c, stable=True)] * w
        sgn = -sgn
    return jnp.sum(h * h) + y


def test_a_comparator_reading_values_two_regions_up_under_grad_and_jvp():
    lowered = aotkit.load_module(SORT_IN_A_LOOP.encode())
    x, c, y = f32(4), F32(-1.5), F32(0.25)
    got = lowered.grad(argnums=(0, 1, 2)).compile()(x, c, y)
    close(got, jax.grad(sort_in_a_loop_twin, argnums=(0, 1, 2))(x, c, y), rtol=1e-5)
    t = (f32(4), F32(0.5), F32(1.0))
    got = lowered.jvp().compile()((x, c, y), t)
    close(got, jax.jvp(sort_in_a_loop_twin, (x, c, y), t), rtol=1e-5)


@pytest.mark.parametrize(
    "in_axes",
    [(0, None, None), (None, None, 0), (None, 0, None), (0, 0, 0)],
    ids=["x", "only_y", "only_c", "all"],
)
def test_a_comparator_reading_values_two_regions_up_under_vmap(in_axes):
    """Batched or not, the loop is evaluated again and the sort inside it gets what its
    comparator reads as operands (a loop nothing batched reaches is no plain copy: its
    sort would read the function's argument from above)."""
    lowered = aotkit.load_module(SORT_IN_A_LOOP.encode())
    full = (f32(3, 4), np.array([1.5, -2.0, 0.5], F32), f32(3))
    one = (full[0][0], F32(-1.5), F32(0.25))
    args = tuple(b if a == 0 else o for a, b, o in zip(in_axes, full, one, strict=True))
    got = lowered.vmap(in_axes=in_axes, axis_size=3).compile()(*args)
    close(got, jax.vmap(sort_in_a_loop_twin, in_axes=in_axes)(*args), rtol=1e-5)


# --- jax.export files (issue 44) -------------------------------------------------------------


def sort_and_sum(x):
    return jnp.sort(x)[0] + x.sum()


def solve_and_slogdet(a, b):
    sign, logdet = jnp.linalg.slogdet(a)
    return jnp.linalg.solve(a, b).sum() + sign * logdet


@pytest.mark.parametrize("pipeline", ["none", "default"])
def test_grad_of_a_jax_export_of_a_sort(pipeline):
    x = np.array([3.0, -1.0, 4.0, 1.5, -5.0], F32)
    data = export.export(jax.jit(sort_and_sum), platforms=lane.EXPORT_PLATFORMS)(x).serialize()
    lowered = aotkit.load_module(bytes(data), pipeline=pipeline)
    close(lowered.grad().compile()(x), jax.grad(sort_and_sum)(x))


@pytest.mark.parametrize("pipeline", ["none", "default"])
def test_vmap_of_a_jax_export_of_solve_and_slogdet(pipeline):
    a = f32(3, 4, 4) + 4 * np.eye(4, dtype=F32)
    b = f32(3, 4)
    data = export.export(jax.jit(solve_and_slogdet), platforms=lane.EXPORT_PLATFORMS)(
        a[0], b[0]
    ).serialize()
    lowered = aotkit.load_module(bytes(data), pipeline=pipeline)
    got = lowered.vmap(axis_size=3).compile()(a, b)
    close(got, jax.vmap(solve_and_slogdet)(a, b), rtol=1e-4, atol=1e-4)
