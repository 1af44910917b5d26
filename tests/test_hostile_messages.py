"""Issue 43, items 8, 9 and 11: limits refused up front, and messages that say what is wrong.

Symbolic sizes a program cannot read (int32 `get_dimension_size`) are refused before
anything is compiled; NumPy integers are sizes; a Compiled called on traced values, a
namedtuple of another class with the same name and a registered reader of another arity
say so; `max_trip_count`, Python buffers, aotkit.numpy from another thread, dict keys that
do not sort and a symbolic `to_jax` have messages of their own; cumsum and cumprod run
along a symbolic axis (compared with NumPy for every size and dtype).
"""

from __future__ import annotations

import array
import collections
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import jax
import numpy as np
import pytest

import aotkit
import aotkit.numpy as anp

ROOT = Path(__file__).resolve().parents[1]
LIMIT = 2**31


def _summing():
    """A symbolic program that reads its argument's size (to broadcast the 2): a function
    of its own each time, so that no other test's specializations are in its Compiled."""

    def _sum_twice(x):
        return anp.sum(x * 2)

    return aotkit.jit(_sum_twice).lower(aotkit.spec("f32[b]")).compile()


@pytest.fixture
def reads_size():
    return _summing()


# --- item 8: symbolic sizes of 2**31 and more ---------------------------------------------


def test_a_size_below_2_31_specializes(reads_size):
    # Compiled only: nothing of that size is allocated.
    reads_size.specialize(b=[LIMIT - 1])
    assert {"b": LIMIT - 1} in reads_size.specializations


@pytest.mark.parametrize("size", [LIMIT, 2**32 + 3])
def test_a_size_from_2_31_is_refused_before_compiling(reads_size, size):
    with pytest.raises(ValueError) as e:
        reads_size.specialize(b=[size])
    assert str(e.value) == (
        f"Compiled '_sum_twice': specialize: b = {size}: dimension 0 of argument x (b in "
        f"f32[b]) is {size}, but this program reads its arguments' sizes with "
        "stablehlo.get_dimension_size, whose result is int32, so it takes sizes below "
        "2**31 = 2147483648 only; use smaller sizes (split the array along that dimension), "
        "or lower the program for those static shapes"
    )
    assert {"b": size} not in reads_size.specializations


def test_every_size_is_checked_before_the_first_compiles(reads_size):
    with pytest.raises(ValueError, match="specialize: b = 2147483648: dimension 0"):
        reads_size.specialize(b=[1, LIMIT])
    assert reads_size.specializations == ()


def test_a_call_with_a_size_from_2_31_is_refused(reads_size):
    # A zero-stride view: 2**31 elements, 4 bytes of memory.
    x = np.broadcast_to(np.float32(1), (LIMIT,))
    with pytest.raises(
        ValueError,
        match=r"^Compiled '_sum_twice': specializing to b = 2147483648: dimension 0 of "
        r"argument x \(b in f32\[b\]\) is 2147483648, but this program reads",
    ):
        reads_size(x)


def test_an_expression_dimension_is_checked_at_its_value():
    compiled = aotkit.jit(lambda x: x[:2] * 2).lower(aotkit.spec("f32[2*b]")).compile()
    with pytest.raises(
        ValueError, match=r"dimension 0 of argument x \(2\*b in f32\[2\*b\]\) is 2147483648"
    ):
        compiled.specialize(b=[2**30])


def test_a_program_that_reads_no_size_takes_64_bit_sizes():
    compiled = aotkit.jit(lambda x: anp.concatenate([x, x])).lower(aotkit.spec("f32[b]")).compile()
    compiled.specialize(b=[2**32 + 3])
    assert compiled.specializations == ({"b": 2**32 + 3},)


# --- item 11: sizes as NumPy integers -------------------------------------------------------


@pytest.mark.parametrize("size", [np.int64(3), np.int32(3), np.uint8(3)])
def test_specialize_takes_numpy_integers(size):
    compiled = _summing()
    compiled.specialize(b=[size])
    assert compiled.specializations == ({"b": 3},)
    assert type(compiled.specializations[0]["b"]) is int
    x = np.arange(3, dtype=np.float32)
    out = compiled(x)
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, np.sum(x * 2))


def test_specialize_takes_one_numpy_integer():
    compiled = _summing()
    compiled.specialize(b=np.int64(5))
    assert compiled.specializations == ({"b": 5},)


@pytest.mark.parametrize("flag", [True, np.bool_(False)])
def test_specialize_refuses_bools(flag):
    compiled = _summing()
    with pytest.raises(ValueError) as e:
        compiled.specialize(b=[flag])
    assert str(e.value) == (
        f"Compiled '_sum_twice': specialize: b = {flag!r} is a bool, not a size; give ints "
        f"(such as {int(flag)})"
    )


# --- item 9: a Compiled called on traced values ---------------------------------------------


def _double(x):
    return x * 2


@pytest.fixture(scope="module")
def doubled():
    return aotkit.jit(_double).lower(np.ones(3, np.float32)).compile()


TRACED = (
    "Compiled '_double': argument x is a traced value (f32[3]): the Compiled was called "
    "inside a function being traced (by aotkit.jit, aotkit.grad, aotkit.vmap or another "
    "transform), and a Compiled runs on concrete arrays only, so it cannot be called on "
    "traced values; inside the traced function call the Python function itself (or its "
    "aotkit.jit), and call the Compiled outside the trace"
)


@pytest.mark.parametrize(
    "transform, shape",
    [
        (aotkit.jit, (3,)),
        (lambda f: aotkit.grad(lambda x: anp.sum(f(x))), (3,)),
        (aotkit.vmap, (2, 3)),
    ],
    ids=["jit", "grad", "vmap"],
)
def test_a_compiled_called_on_traced_values_says_so(doubled, transform, shape):
    with pytest.raises(TypeError) as e:
        transform(lambda x: doubled(x))(np.ones(shape, np.float32))
    assert str(e.value) == TRACED


def test_what_the_traced_message_suggests_works(doubled):
    x = np.arange(3, dtype=np.float32)
    out = aotkit.jit(lambda x: aotkit.jit(_double)(x) + 1)(x)
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, x * 2 + 1)
    np.testing.assert_array_equal(doubled(x), x * 2)


# --- item 9: a namedtuple of another class with the same name -------------------------------

Point = collections.namedtuple("Point", "x y")
OtherPoint = collections.namedtuple("Point", "x y", module="elsewhere")
WiderPoint = collections.namedtuple("Point", "x y z", module="elsewhere")


@pytest.fixture(scope="module")
def loaded_point(tmp_path_factory):
    """A Compiled of a Point argument, saved and loaded: Point is unregistered, so the
    artifact's namedtuple reads back as a stand-in."""
    x = np.ones(3, np.float32)
    compiled = aotkit.jit(lambda p: p.x + p.y).lower(Point(x, x)).compile()
    path = tmp_path_factory.mktemp("point") / "point.aotx"
    compiled.save(path)
    return aotkit.load(path)


def test_the_stand_in_takes_the_class_it_was_saved_from(loaded_point):
    x = np.arange(3, dtype=np.float32)
    out = loaded_point(Point(x, x))
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, x + x)


def test_a_namedtuple_of_another_class_and_the_same_name_says_so(loaded_point):
    x = np.ones(3, np.float32)
    saved = f"{__name__}.Point"
    with pytest.raises(TypeError) as e:
        loaded_point(OtherPoint(x, x))
    assert (
        "expected a Point of 2, got a Point of 2 (the "
        f"artifact's namedtuple {saved!r} was loaded as a stand-in, and your elsewhere.Point, "
        "written as 'elsewhere.Point', is a different class of the same name; register it "
        "under the artifact's name before loading: "
        f"aotkit.register_namedtuple_serialization(Point, serialized_name={saved!r}))"
    ) in str(e.value)


def test_a_namedtuple_with_other_fields_names_them(loaded_point):
    x = np.ones(3, np.float32)
    with pytest.raises(TypeError) as e:
        loaded_point(WiderPoint(x, x, x))
    assert (
        f"(the artifact's namedtuple '{__name__}.Point' has fields ['x', 'y'], your "
        "elsewhere.Point has ['x', 'y', 'z']; pass a namedtuple with the artifact's fields)"
    ) in str(e.value)


def test_two_live_classes_of_the_same_name_are_told_apart():
    x = np.ones(3, np.float32)
    compiled = aotkit.jit(lambda p: p.x * p.y).lower(Point(x, x)).compile()
    with pytest.raises(TypeError) as e:
        compiled(OtherPoint(x, x))
    assert (
        f"expected a Point of 2, got a Point of 2 ({__name__}.Point and elsewhere.Point are "
        f"different classes of the same name; pass a {__name__}.Point)"
    ) in str(e.value)


# --- item 9: a reader registered for a class of another arity -------------------------------

_SAVE = """
import sys
import numpy as np
from jax import tree_util
import aotkit

class Pair:
    def __init__(self, a, b):
        self.a, self.b = a, b

tree_util.register_pytree_node(Pair, lambda p: ((p.a, p.b), None), lambda aux, ch: Pair(*ch))
aotkit.register_pytree_node_serialization(Pair, serialized_name="hostile.Node")
x = np.ones(3, np.float32)
compiled = aotkit.jit(lambda p: Pair(p.a + 1, p.b * 2)).lower(Pair(x, x)).compile()
compiled.save(sys.argv[1])
"""

_LOAD = """
import sys
from jax import tree_util
import aotkit

class Triple:
    def __init__(self, a, b, c):
        self.a, self.b, self.c = a, b, c

class Loose:  # takes any number of children, flattens to its first two
    def __init__(self, *children):
        self.children = children

kind = sys.argv[2]
if kind == "triple":
    tree_util.register_pytree_node(
        Triple, lambda t: ((t.a, t.b, t.c), None), lambda aux, ch: Triple(*ch)
    )
    aotkit.register_pytree_node_serialization(Triple, serialized_name="hostile.Node")
else:
    tree_util.register_pytree_node(
        Loose, lambda t: (t.children[:1], None), lambda aux, ch: Loose(*ch)
    )
    aotkit.register_pytree_node_serialization(Loose, serialized_name="hostile.Node")
try:
    aotkit.load(sys.argv[1])
except aotkit.ArtifactError as e:
    print("REFUSED", e)
else:
    print("LOADED")
"""


@pytest.fixture(scope="module")
def pair_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("pair") / "pair.aotx"
    subprocess.run([sys.executable, "-c", textwrap.dedent(_SAVE), str(path)], check=True, cwd=ROOT)
    return path


@pytest.mark.parametrize(
    "kind, detail",
    [
        (
            "triple",
            "that has 2 children, which __main__.Triple's unflatten refused (TypeError: "
            "Triple.__init__() missing 1 required positional argument: 'c'): a class of "
            "another arity is registered under that name here; register under 'hostile.Node' "
            "the class the artifact was saved with; save the artifact again with the "
            "registration this process has",
        ),
        (
            "loose",
            "that has 2 children, but __main__.Loose, registered under that name here, has 1; "
            "register under 'hostile.Node' the class the artifact was saved with; save the "
            "artifact again with the registration this process has",
        ),
    ],
)
def test_a_reader_of_another_arity_is_refused_at_load(pair_file, kind, detail):
    child = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_LOAD), str(pair_file), kind],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert child.returncode == 0, child.stderr
    assert child.stdout.startswith("REFUSED aotkit.load: "), child.stdout + child.stderr
    assert (
        "header field 'in_tree' has at args[0] a node of type 'hostile.Node' "
        f"(__main__.{kind.title()} here) {detail}"
    ) in child.stdout


# --- item 11: max_trip_count ----------------------------------------------------------------


def _grows(x):
    def body(c):
        return c[0] * 1.5, c[1] + 1.0

    return aotkit.lax.while_loop(lambda c: c[1] < x, body, (x, 0.0))[0]


@pytest.mark.parametrize("bound", [2**31, 2**40])
def test_max_trip_count_above_int32_is_refused(bound):
    with pytest.raises(ValueError) as e:
        aotkit.grad(_grows, max_trip_count=bound)(np.float32(3.0))
    assert str(e.value) == (
        f"grad(_grows): max_trip_count={bound} is above 2147483647 (2**31 - 1): the "
        "differentiated loop counts its iterations in int32; give a bound below 2**31 (its "
        "carries are stored once per iteration, or once per checkpoint with checkpoint_loops)"
    )


def test_max_trip_count_below_the_limit_runs():
    # x = 3 runs the loop 3 times: the result is x * 1.5**3, its derivative 1.5**3.
    out = aotkit.grad(_grows, max_trip_count=100)(np.float32(3.0))
    assert np.asarray(out).dtype == np.float32
    np.testing.assert_allclose(out, np.float32(1.5**3), rtol=1e-6)


def test_max_trip_count_at_the_limit_lowers():
    grad = aotkit.grad(_grows, max_trip_count=2**31 - 1)
    lowered = aotkit.jit(grad).lower(np.float32(3.0))
    assert "2147483647" in lowered.as_text()


# --- item 11: Python buffers as arguments ---------------------------------------------------

BUFFERS = {
    "bytearray": (lambda: bytearray(b"abc"), "a bytearray"),
    "memoryview": (lambda: memoryview(b"abc"), "a memoryview"),
    "bytes": (lambda: b"abc", "a bytes"),
    "array.array": (lambda: array.array("f", [1.0, 2.0, 3.0]), "an array.array"),
}


def _buffer_message(name: str) -> str:
    return (
        f"argument x is {name}, a buffer rather than an array, which aotkit (as JAX) does "
        "not take as an argument: a compiled function could not be called with it; pass a "
        "NumPy array (np.asarray(x), or np.frombuffer(x, dtype) for raw bytes)"
    )


@pytest.mark.parametrize("kind", BUFFERS)
def test_a_buffer_is_refused_at_lower(kind):
    make, name = BUFFERS[kind]
    with pytest.raises(TypeError) as e:
        aotkit.jit(_double).lower(make())
    assert str(e.value) == f"_double: {_buffer_message(name)}"


@pytest.mark.parametrize("kind", BUFFERS)
def test_a_buffer_is_refused_by_a_jit_call(kind):
    make, name = BUFFERS[kind]
    with pytest.raises(TypeError) as e:
        aotkit.jit(_double)(make())
    assert _buffer_message(name) in str(e.value)


@pytest.mark.parametrize("kind", ["bytearray", "memoryview", "bytes"])
def test_a_buffer_is_refused_by_a_compiled_call(kind):
    make, _ = BUFFERS[kind]
    compiled = aotkit.jit(_double).lower(np.frombuffer(b"abc", np.uint8)).compile()
    with pytest.raises(TypeError, match=rf"argument x expected u8\[3\], got a {kind}; "):
        compiled(make())
    out = compiled(np.frombuffer(make(), np.uint8))  # what the message says to pass
    assert out.dtype == np.uint8
    np.testing.assert_array_equal(out, np.frombuffer(b"abc", np.uint8) * 2)


# --- item 11: aotkit.numpy from another thread ----------------------------------------------


@pytest.mark.parametrize(
    "use", [lambda x: anp.sin(x), lambda x: x + 1], ids=["aotkit.numpy", "tracer operator"]
)
def test_aotkit_numpy_from_a_helper_thread_says_tracing_is_per_thread(use):
    errors = []

    def traced(x):
        def helper():
            try:
                use(x)
            except RuntimeError as e:
                errors.append(e)

        thread = threading.Thread(target=helper, name="helper")
        thread.start()
        thread.join()
        return x

    aotkit.jit(traced).lower(np.ones(3, np.float32))
    (error,) = errors
    assert str(error).endswith(
        "was called outside a traced function: aotkit.numpy has no eager mode: it builds "
        "StableHLO inside a traced function rather than computing on concrete arrays; call it "
        "inside a function given to aotkit.jit or aotkit.lower (use numpy itself for concrete "
        "arrays). Tracing state is per-thread: thread "
        f"{threading.current_thread().name!r} is tracing a function now, but this call ran in "
        "thread 'helper'; a traced function's aotkit.numpy calls must run in the thread that "
        "traces it, not in a thread it starts (a helper thread may compute on concrete values "
        "with NumPy)"
    )


def test_aotkit_numpy_outside_any_trace_keeps_its_message():
    with pytest.raises(
        RuntimeError, match="was called outside a traced function: aotkit.numpy has no eager mode"
    ):
        anp.sin(np.ones(3))


# --- item 11: dict keys that do not sort ----------------------------------------------------

MIXED = {1: np.ones(2, np.float32), "a": np.ones(2, np.float32)}
UNSORTED = (
    "argument {name} is a dict whose keys do not sort (keys of types int, str: 1, 'a'), and "
    "a pytree orders a dict's keys by sorting them; use keys of one type (such as all str)"
)


def _first(d):
    return d["a"] * 2


def test_unsortable_keys_in_a_jit_call_name_the_argument():
    with pytest.raises(TypeError) as e:
        aotkit.jit(_first)(MIXED)
    assert str(e.value) == "jit(_first): " + UNSORTED.format(name="d")


def test_unsortable_keys_in_lower_name_the_argument():
    with pytest.raises(TypeError) as e:
        aotkit.jit(_first).lower({"outer": MIXED})
    assert str(e.value).endswith(UNSORTED.format(name="d['outer']"))


def test_arguments_nested_past_the_recursion_limit_are_a_clear_error():
    """2,000 nested lists raised JAX's "SystemError: <nanobind.nb_method ...> returned a
    result with an exception set"."""
    deep = np.ones(2, np.float32)
    for _ in range(2000):
        deep = [deep]
    try:
        jax.tree_util.tree_flatten(deep)
    except (RecursionError, SystemError):
        pass
    else:
        pytest.skip("this jax flattens 2,000 nested lists (jax 0.12: no recursion limit)")
    compiled = aotkit.jit(_first).lower({"a": np.ones(2, np.float32)}).compile()
    for where, call in (
        ("jit(_first)", lambda: aotkit.jit(_first).lower(deep)),
        ("jit(_first)", lambda: aotkit.jit(_first)(deep)),
        ("Compiled '_first'", lambda: compiled(deep)),
    ):
        with pytest.raises(ValueError) as e:
            call()
        message = str(e.value)  # (not in the assert: pytest would print `deep`, too deep)
        assert message == (
            f"{where}: the arguments nest deeper than Python's recursion limit "
            f"({sys.getrecursionlimit()}) lets a pytree be flattened; pass flatter containers "
            "(a list of arrays, or one stacked array)"
        ), message


def test_unsortable_keys_in_a_compiled_call_name_the_argument():
    compiled = aotkit.jit(_first).lower({"a": np.ones(2, np.float32)}).compile()
    with pytest.raises(TypeError) as e:
        compiled(MIXED)
    assert str(e.value) == "Compiled '_first': " + UNSORTED.format(name="d")
    out = compiled({"a": np.ones(2, np.float32)})
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, np.full(2, 2, np.float32))


# --- item 11: to_jax of a symbolic stage ----------------------------------------------------


@pytest.mark.parametrize("stage", ["lowered", "compiled"])
def test_to_jax_of_a_symbolic_stage_is_refused(stage):
    lowered = aotkit.jit(_double).lower(aotkit.spec("f32[b]"))
    target = lowered if stage == "lowered" else lowered.compile()
    with pytest.raises(ValueError) as e:
        aotkit.to_jax(target)
    assert str(e.value) == (
        "aotkit.to_jax: '_double' has symbolic shapes (_double(x: f32[b]) -> (out: f32[b])); "
        "to_jax embeds programs of static shapes: lower the function for the shapes the JAX "
        "program passes (aotkit.jit(f).lower(aotkit.spec('f32[8,784]'))), one Lowered per "
        "shape"
    )


# --- item 11: cumsum and cumprod along a symbolic axis --------------------------------------

SIZES = [0, 1, 2, 5, 17]


@pytest.mark.parametrize("dtype", ["f32", "i32", "bool", "c64"])
@pytest.mark.parametrize(
    "name, fn, oracle",
    [
        ("cumsum", lambda x: anp.cumsum(x, axis=1), lambda x: np.cumsum(x, axis=1)),
        ("cumprod", lambda x: anp.cumprod(x, axis=1), lambda x: np.cumprod(x, axis=1)),
        ("cumsum_flat", lambda x: anp.cumsum(x), lambda x: np.cumsum(x)),
        ("nancumsum", lambda x: anp.nancumsum(x, axis=1), lambda x: np.nancumsum(x, axis=1)),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_cumulative_along_a_symbolic_axis_matches_numpy(name, fn, oracle, dtype):
    compiled = aotkit.jit(fn).lower(aotkit.spec(f"{dtype}[3,b]")).compile()
    rng = np.random.default_rng(0)
    np_dtype = aotkit.spec(f"{dtype}[]").dtype
    for n in SIZES:
        x = (rng.random((3, n)) * 2 + 0.5).astype(np_dtype)
        out, expected = np.asarray(compiled(x)), oracle(x)
        assert out.dtype == expected.dtype, (name, dtype, n)
        np.testing.assert_allclose(out, expected, rtol=1e-5, err_msg=f"{name} {dtype} n={n}")


def test_cumsum_along_a_symbolic_axis_runs_log_steps_not_a_window():
    text = aotkit.jit(lambda x: anp.cumsum(x)).lower(aotkit.spec("f32[b]")).as_text()
    assert "stablehlo.while" in text
    assert "reduce_window" not in text


def test_cumsum_along_a_static_axis_of_a_symbolic_array_keeps_reduce_window():
    lowered = aotkit.jit(lambda x: anp.cumsum(x, axis=0)).lower(aotkit.spec("f32[3,b]"))
    assert "reduce_window" in lowered.as_text()
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    out = lowered.compile()(x)
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, np.cumsum(x, axis=0))


@pytest.mark.parametrize(
    "ufunc, dtype",
    [(np.maximum, "f32"), (np.minimum, "i32"), (np.logical_or, "bool"), (np.multiply, "f32")],
    ids=lambda v: getattr(v, "__name__", v),
)
def test_ufunc_accumulate_along_a_symbolic_axis_matches_numpy(ufunc, dtype):
    compiled = aotkit.jit(lambda x: ufunc.accumulate(x, axis=1)).lower(aotkit.spec(f"{dtype}[2,b]"))
    compiled = compiled.compile()
    rng = np.random.default_rng(1)
    np_dtype = aotkit.spec(f"{dtype}[]").dtype
    for n in SIZES:
        x = (rng.random((2, n)) * 4).astype(np_dtype)
        out, expected = np.asarray(compiled(x)), ufunc.accumulate(x, axis=1)
        assert out.dtype == expected.dtype, (ufunc.__name__, n)
        np.testing.assert_allclose(out, expected, rtol=1e-6, err_msg=f"{ufunc.__name__} n={n}")
