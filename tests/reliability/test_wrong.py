"""Wrong values: a file must not lie about what it computes (issue 26, class "wrong").

A file's checksums prove it is the one written, not that its header tells the truth: a
header rewritten with its checksums recomputed must still be checked against what the
executable and the portable module declare.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import aotkit
from aotkit import artifacts
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
