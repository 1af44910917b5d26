"""Wrong values: a file must not lie about what it computes (issue 26, class "wrong").

A file's checksums prove it is the one written, not that its header tells the truth: a
header rewritten with its checksums recomputed must still be checked against what the
executable and the portable module declare.
"""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

import aotkit
from aotkit import artifacts
from aotkit.autograph import AutographWarning
from aotkit.errors import ArtifactError, ArtifactWarning


@pytest.fixture(scope="module")
def saved() -> bytes:
    compiled = aotkit.jit(lambda x: x * 2.0).lower(aotkit.spec("f32[4]")).compile()
    return compiled.serialize()


def _rewritten(data: bytes, **fields) -> bytes:
    """`data` with header fields replaced and every checksum recomputed."""
    artifact = artifacts.unpack(data)
    header = {k: v for k, v in artifact.header.items() if k != "sections"}
    header.update(fields)
    return artifacts.pack(header, {n: bytes(v) for n, v in artifact.sections.items()})


def test_the_untouched_artifact_loads(saved):
    out = aotkit.load(saved)(np.ones(4, np.float32))
    assert out.dtype == np.float32 and np.asarray(out).tolist() == [2.0] * 4


@pytest.mark.parametrize(
    "fields, declared",
    [
        ({"in_specs": ["i32[4]"], "out_specs": ["i32[4]"]}, "(i32[4]) -> (i32[4])"),
        ({"out_specs": ["f32[100000]"]}, "(f32[4]) -> (f32[100000])"),
        ({"in_specs": ["f32[8]"]}, "(f32[8]) -> (f32[4])"),
    ],
    ids=["dtype", "out-size", "in-size"],
)
def test_header_specs_that_lie_are_refused(saved, fields, declared):
    data = _rewritten(saved, **fields)
    with pytest.raises(ArtifactError) as e:
        aotkit.load(data, recompile=False)
    assert str(e.value) == (
        "aotkit.load: <bytes>: its executable does not load (backend 'cpu': the serialized "
        "executable of 'lambda' takes (f32[4]) -> (f32[4]), but its signature says "
        f"{declared}; the file's header does not describe its "
        "executable); load it with recompile=True or 'auto' to compile its portable StableHLO"
    )
    # recompile="auto" falls back to the portable module, which disagrees with the header too
    with pytest.warns(ArtifactWarning), pytest.raises(ArtifactError, match=(
        r"its portable StableHLO takes \(f32\[4\]\) -> \(f32\[4\]\) but its header says "
        + declared.replace("[", r"\[").replace("]", r"\]").replace("(", r"\(").replace(")", r"\)")
    )):  # fmt: skip
        aotkit.load(data)


def test_header_json_is_still_checked_as_json(saved):
    data = _rewritten(saved, in_specs="f32[4]")
    with pytest.raises(ArtifactError, match="in_specs"):
        aotkit.load(data)
    assert json.loads(json.dumps(artifacts.unpack(saved).header))  # the fixture is sound


def test_many_arguments_and_results_load_as_they_are(tmp_path):
    """XLA numbers long entry layouts with `/*index=5*/` comments; they are not types."""
    specs = [aotkit.spec(s) for s in ["f32[2]", "i32[]", "bf16[3,1]", "bool[2]", "f64[]"] * 2]
    compiled = aotkit.jit(lambda *a: a[::-1]).lower(*specs).compile()
    loaded = aotkit.load(compiled.serialize(), recompile=False)
    assert [str(s) for s in loaded.out_specs] == [str(s) for s in specs[::-1]]


def _nested(depth: int):
    tree = np.float32(1)
    for _ in range(depth):
        tree = [tree]
    return tree


def test_save_and_load_agree_on_how_deep_a_pytree_may_nest():
    ok = aotkit.jit(lambda t: 0.0).lower(_nested(254)).compile()
    aotkit.load(ok.serialize())  # the deepest tree that saves also loads
    for depth in (255, 500):  # 500 was a raw RecursionError
        deep = aotkit.jit(lambda t: 0.0).lower(_nested(depth)).compile()
        with pytest.raises(ValueError) as e:
            deep.serialize()
        assert str(e.value) == (
            "Compiled 'lambda': serialize: the argument pytree nests deeper than 256 levels "
            "(the (args, kwargs) pair counts as two), which an artifact cannot hold; flatten "
            "part of it"
        )


# --- Python ints carried through converted loops ---------------------------------------------
# A converted loop keeps a Python int as an int64; where its update is not provably small
# autograph warns at the loop, since int64 wraps where Python's int keeps growing.


def grows_by_products(x):
    k = 1
    for _ in range(7):
        k = k * 1000
        x = x + 1
    return x * k


def counts(x):
    k = 0
    for i in range(10):
        k += 3
        if x[i] > 0:
            k = k + i
        x = x + 1
    return x * k


def counts_while(x):
    k = 0
    while x.sum() < 100:
        k += 2
        x = x + 1
    return x * k


def resets_and_adds_the_index(x):
    k = 5
    for i in range(8):
        if x[i] > 0:
            k = 0
        else:
            k += i
        x = x + 1
    return x * k


def grows_from_int64(x):
    k = np.int64(1)
    for _ in range(7):
        k = k * 1000
        x = x + 1
    return x * k


def starts_too_big(x):
    k = 10**20
    for _ in range(7):
        k = k + 1
        x = x + 1
    return x * k


def _traced(f, *args):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = aotkit.jit(f)(*args)
    return out, [str(w.message) for w in caught if issubclass(w.category, AutographWarning)]


def test_a_python_int_grown_by_products_in_a_converted_loop_warns_at_the_loop():
    out, said = _traced(grows_by_products, np.float64(1.0))
    line = grows_by_products.__code__.co_firstlineno + 2
    assert said == [
        f"for loop (at {__file__}:{line}): 'k' is a Python int carried through the converted "
        "loop, which keeps it as an int64: it wraps past 2**63 - 1, where Python's int keeps "
        "growing, and this loop's update of 'k' is not provably small; start it as a float "
        "(k = 1.0) for float64's range, as np.int64(1) if wrapping is what you mean, or mark "
        "the function with aotkit.autograph.do_not_convert to keep Python's int"
    ]
    assert grows_by_products(np.float64(1.0)) == 8e21  # what it warns of: int64 wraps
    assert np.asarray(out) != 8e21


@pytest.mark.parametrize(
    "f, args",
    [
        (counts, (np.linspace(-1, 1, 10),)),
        (counts_while, (np.zeros(3),)),
        (resets_and_adds_the_index, (np.array([1, -1, -1, 1, -1, -1, -1, -1], float),)),
        (grows_from_int64, (np.float64(1.0),)),  # np.int64 wraps in NumPy too
        (starts_too_big, (np.float64(1.0),)),  # does not fit a carry: the loop unrolls
    ],
    ids=lambda v: getattr(v, "__name__", ""),
)
def test_python_ints_that_stay_small_or_wrap_in_numpy_too_equal_numpy(f, args):
    out, said = _traced(f, *args)
    with np.errstate(over="ignore"):
        expected = np.asarray(f(*args))
    np.testing.assert_array_equal(np.asarray(out), expected)
    assert np.asarray(out).dtype == expected.dtype
    if f is starts_too_big:
        assert len(said) == 1 and "unrolled into 7 copies" in said[0]
        assert "does not fit i64" in said[0]
    else:
        assert said == []


def sums_an_int_array(x, n):
    total = 0
    for i in range(n):
        total += x[i]  # int64 in NumPy too: Python int + np.int64 is np.int64
    return total


def test_a_python_int_mixed_with_an_int64_array_is_not_watched():
    x = np.arange(6, dtype=np.int64)
    out, said = _traced(sums_an_int_array, x, np.int64(6))
    assert said == [] and np.asarray(out).dtype == np.int64 and int(out) == 15
