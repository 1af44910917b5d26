"""Artifacts of programs that take or return typed PRNG key arrays (issue 44.2): the header
records each key leaf's implementation and shape, a load checks them against the module, and
the loaded program takes and gives keys as the saved one does, in this process and another."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import aotkit
from aotkit import artifacts
from aotkit.errors import ArtifactError

ROOT = Path(__file__).resolve().parents[1]
X = np.linspace(-1, 1, 4, dtype=np.float32)


def step(k, x):
    k1, k2 = jax.random.split(k)
    return k1, jax.random.normal(k2, x.shape) * x


def saved(tmp_path, impl="threefry2x32", name="step.aotx"):
    key = jax.random.key(0, impl=impl)
    compiled = aotkit.jit(step).lower(key, X).compile()
    path = tmp_path / name
    compiled.save(path)
    return path, compiled, key


@pytest.mark.parametrize("impl", ["threefry2x32", "rbg", "unsafe_rbg"])
def test_a_keyed_program_saves_and_loads_with_its_keys(tmp_path, impl):
    path, compiled, key = saved(tmp_path, impl)
    header = artifacts.unpack(path.read_bytes()).header
    assert header["keys"] == {
        "in": [{"impl": impl, "shape": []}, None],
        "out": [{"impl": impl, "shape": []}, None],
    }
    loaded = aotkit.load(path)
    assert loaded.origin == "artifact" and repr(loaded) == repr(compiled)
    want_key, want = compiled(key, X)
    got_key, got = loaded(key, X)
    assert got_key.dtype == want_key.dtype == key.dtype
    np.testing.assert_array_equal(jax.random.key_data(got_key), jax.random.key_data(want_key))
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, want)


def test_a_loaded_keyed_program_refuses_the_keys_data_as_the_saved_one_does(tmp_path):
    path, compiled, key = saved(tmp_path)
    message = (
        "Compiled 'step': argument k expected the typed PRNG key array key<fry>[], got "
        "u32[2]; pass a key array of that shape and implementation (jax.random.key, or "
        "jax.random.wrap_key_data of its data)"
    )
    for program in (compiled, aotkit.load(path)):
        with pytest.raises(TypeError, match=f"^{re.escape(message)}$"):
            program(jax.random.key_data(key), X)


def test_batches_of_keys_and_keys_in_pytrees(tmp_path):
    def tree(state, x):
        keys = jax.random.split(state["keys"][0], 3)
        return {"keys": keys, "draw": jax.vmap(lambda k: jax.random.uniform(k))(keys) + x}

    state = {"keys": jax.random.split(jax.random.key(1), 2)}
    compiled = aotkit.jit(tree).lower(state, np.float32(1)).compile()
    compiled.save(tmp_path / "tree.aotx")
    loaded = aotkit.load(tmp_path / "tree.aotx")
    assert "state['keys']: key<fry>[2]" in repr(loaded)
    want, got = compiled(state, np.float32(1)), loaded(state, np.float32(1))
    assert got["keys"].shape == (3,) and got["keys"].dtype == want["keys"].dtype
    np.testing.assert_array_equal(
        jax.random.key_data(got["keys"]), jax.random.key_data(want["keys"])
    )
    np.testing.assert_array_equal(got["draw"], want["draw"])


CHILD = textwrap.dedent(
    """
    import json, sys
    import jax, numpy as np
    import aotkit
    loaded = aotkit.load(sys.argv[1], recompile=False)
    k, out = loaded(jax.random.key(0), np.linspace(-1, 1, 4, dtype=np.float32))
    print(json.dumps({"dtype": str(k.dtype), "key": jax.random.key_data(k).tolist(),
                      "out": np.asarray(out).tolist(), "origin": loaded.origin}))
    """
)


def test_a_fresh_process_loads_it_without_compiling_and_gets_the_same_keys(tmp_path):
    path, compiled, key = saved(tmp_path)
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    want_key, want = compiled(key, X)
    assert got["dtype"] == "key<fry>" and got["origin"] == "artifact"
    assert got["key"] == jax.random.key_data(want_key).tolist()
    assert got["out"] == np.asarray(want).tolist()


# --- what a load checks ------------------------------------------------------------------------


def rewritten(path: Path, drop=(), **changes) -> Path:
    """`path`'s artifact with header fields dropped or changed (checksums recomputed: the
    file is consistent, its header says something else)."""
    art = artifacts.unpack(path.read_bytes())
    header = {k: v for k, v in art.header.items() if k not in ("sections", *drop)}
    header.update(changes)
    out = path.with_name("changed.aotx")
    out.write_bytes(artifacts.pack(header, {n: bytes(d) for n, d in art.sections.items()}))
    return out


KEY = {"impl": "threefry2x32", "shape": []}
BAD_KEYS = {
    "not an object": (
        [KEY],
        """is [{"impl": "threefry2x32", "shape": []}], not an object with lists 'in' and 'out'""",
    ),
    "a list of another length": (
        {"in": [KEY], "out": []},
        "'in' must list no leaf or every one (2)",
    ),
    "an entry of another form": (
        {"in": [{"impl": "threefry2x32"}, None], "out": []},
        'has an entry {"impl": "threefry2x32"}, not {"impl": NAME, "shape": [...]}',
    ),
    "a negative dimension": (
        {"in": [{"impl": "threefry2x32", "shape": [-1]}, None], "out": []},
        'has an entry {"impl": "threefry2x32", "shape": [-1]}, not {"impl": NAME, "shape": [...]}',
    ),
    "an unknown implementation": (
        {"in": [{"impl": "mine", "shape": []}, None], "out": []},
        "names PRNG implementation 'mine', which is none of jax.random.key's (threefry2x32, "
        "rbg, unsafe_rbg)",
    ),
    "a key whose data is not the module's argument": (
        {"in": [{"impl": "threefry2x32", "shape": [3]}, None], "out": []},
        "says input leaf 0 is key<fry>[3], whose data is u32[3,2], but the module's is u32[2]",
    ),
    "the float argument as a key": (
        {"in": [None, KEY], "out": []},
        "says input leaf 1 is key<fry>[], whose data is u32[2], but the module's is f32[4]",
    ),
    "another implementation's data": (
        {"in": [{"impl": "rbg", "shape": []}, None], "out": []},
        "says input leaf 0 is key<rbg>[], whose data is u32[4], but the module's is u32[2]",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_KEYS))
def test_a_keys_field_that_does_not_fit_is_refused(tmp_path, case):
    path, _, _ = saved(tmp_path)
    value, detail = BAD_KEYS[case]
    changed = rewritten(path, keys=value)
    message = (
        f"aotkit.load: {changed}: header field 'keys' {detail}; the file is not one aotkit "
        "wrote, or was changed: write it again"
    )
    with pytest.raises(ArtifactError, match=f"^{re.escape(message)}$"):
        aotkit.load(changed)


def test_without_the_field_the_keys_are_their_data(tmp_path):
    # What an aotkit before this field (or the native runner) reads: the module's uint32 data.
    path, compiled, key = saved(tmp_path)
    loaded = aotkit.load(rewritten(path, drop=("keys",)))
    assert "k: u32[2]" in repr(loaded)
    data, out = loaded(jax.random.key_data(key), X)
    want_key, want = compiled(key, X)
    np.testing.assert_array_equal(np.asarray(data), jax.random.key_data(want_key))
    np.testing.assert_array_equal(out, want)


def test_a_key_of_an_unnamed_implementation_is_not_saved():
    import jax.extend.random as xr

    impl = xr.define_prng_impl(
        key_shape=(2,),
        seed=lambda s: jnp.stack([s.astype(jnp.uint32), jnp.uint32(1)]),
        split=lambda k, shape: jnp.broadcast_to(k, (*shape, 2)),
        random_bits=lambda k, bit_width, shape: jnp.zeros(shape, jnp.uint32),
        fold_in=lambda k, d: k,
        name="mine",
    )
    key = jax.random.key(0, impl=impl)
    compiled = aotkit.jit(lambda k: k, frontend="jax").lower(key).compile()
    message = (
        "Compiled 'lambda': serialize: a typed PRNG key leaf (key<?>[]) has an implementation "
        "jax.random.key does not take by name, which an artifact cannot name; use one of "
        "threefry2x32, rbg, unsafe_rbg, or pass the key's uint32 data (jax.random.key_data)"
    )
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        compiled.serialize()


def test_aotkit_run_gives_key_leaves_as_their_data(tmp_path, run_cli):
    path, compiled, key = saved(tmp_path)
    np.savez(tmp_path / "in.npz", k=np.asarray(jax.random.key_data(key)), x=X)
    code, out, err = run_cli("run", path, "--inputs", tmp_path / "in.npz", "-o", tmp_path / "o.npz")
    assert code == 0, err
    assert out.startswith("out[0]: u32[2]\n")
    want_key, want = compiled(key, X)
    with np.load(tmp_path / "o.npz") as got:
        np.testing.assert_array_equal(got["out[0]"], jax.random.key_data(want_key))
        np.testing.assert_array_equal(got["out[1]"], want)
    code, out, err = run_cli("run", path)  # random inputs: random key data, as a key
    assert code == 0, err
    assert "out[1]: f32[4]" in out
