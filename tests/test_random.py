"""aotkit.random against jax.random: the same key gives the same numbers.

Integers, booleans and keys must be equal bit for bit; floats equal within float rounding
(the integer bits are the same, the float formulas are JAX's). Each sampler runs on the CPU
backend and the StableHLO reference interpreter. float64/int64 cases ask JAX with x64 on.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import aotkit
import aotkit.numpy as anp
from aotkit import random as ar
from tests.helpers import assert_matches, run_on

BF16 = np.dtype(ml_dtypes.bfloat16)
BACKENDS = ["cpu", "interpreter"]
SEEDS = [0, 42, 2**31 + 7]


def _jax(fn, *args, x64=False):
    with jax.enable_x64(x64):
        return jax.tree_util.tree_map(np.asarray, fn(*args))


def _jkey(seed):
    with jax.enable_x64(True):
        return np.asarray(jax.random.PRNGKey(seed))


# --- keys -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "seed", [0, 1, 42, 2**32 - 1, 2**32 + 5, -1, -(2**40), 2**63 - 1, -(2**63)]
)
def test_key_is_jax_64_bit_seed_split(seed):
    k = ar.key(seed)
    assert k.dtype == np.uint32 and k.shape == (2,)
    np.testing.assert_array_equal(k, _jkey(seed))
    np.testing.assert_array_equal(ar.PRNGKey(seed), k)


@pytest.mark.parametrize(
    "seed", [np.int32(-1), np.int8(-3), np.uint32(7), np.int64(-(2**40)), np.uint64(2**64 - 1)]
)
def test_key_of_numpy_integers_reads_their_width(seed):
    np.testing.assert_array_equal(ar.key(seed), _jkey(seed))


def test_key_data_of_jax_32_bit_mode_for_small_seeds():
    for seed in (0, 3, 2**32 - 1):
        np.testing.assert_array_equal(ar.key(seed), np.asarray(jax.random.PRNGKey(seed)))


@pytest.mark.parametrize("num", [2, 5, (2, 3), 1, 0])
@pytest.mark.parametrize("seed", SEEDS)
def test_split_of_a_concrete_key_runs_in_numpy(seed, num):
    got = ar.split(ar.key(seed), num)
    assert isinstance(got, np.ndarray) and got.dtype == np.uint32
    np.testing.assert_array_equal(got, _jax(jax.random.split, _jkey(seed), num))


@pytest.mark.parametrize("data", [0, 1, 7, 2**32 - 1, np.uint32(12), np.int64(5)])
@pytest.mark.parametrize("seed", SEEDS)
def test_fold_in_of_a_concrete_key_runs_in_numpy(seed, data):
    got = ar.fold_in(ar.key(seed), data)
    assert isinstance(got, np.ndarray) and got.dtype == np.uint32
    np.testing.assert_array_equal(got, _jax(jax.random.fold_in, _jkey(seed), data))


def test_keys_from_jax_are_accepted():
    k = jax.random.PRNGKey(9)
    np.testing.assert_array_equal(ar.split(k), np.asarray(jax.random.split(k)))


@pytest.mark.parametrize("backend", BACKENDS)
def test_traced_key_functions_match_jax(backend):
    def f(k, seed, d):
        return {
            "split": ar.split(k, 3),
            "split2d": ar.split(k, (2, 2)),
            "fold_in": ar.fold_in(k, d),
            "fold_in_const": ar.fold_in(k, 11),
            "key_i64": ar.key(seed),
            "key_i32": ar.key(seed.astype(np.int32)),
            "split_of_const": ar.split(ar.key(5)),
            "fold_in_traced_data_const_key": ar.fold_in(ar.key(5), d),
        }

    k, seed, d = ar.key(77), np.int64(-(2**40) + 3), np.int32(-2)
    got = run_on(backend, f, k, seed, d)
    jk = _jkey(77)
    want = {
        "split": _jax(jax.random.split, jk, 3),
        "split2d": _jax(jax.random.split, jk, (2, 2)),
        "fold_in": _jax(jax.random.fold_in, jk, np.uint32(2**32 - 2)),
        "fold_in_const": _jax(jax.random.fold_in, jk, 11),
        "key_i64": _jkey(seed),
        "key_i32": _jkey(np.int32(seed)),
        "split_of_const": _jax(jax.random.split, _jkey(5)),
        "fold_in_traced_data_const_key": _jax(jax.random.fold_in, _jkey(5), np.uint32(2**32 - 2)),
    }
    for name, w in want.items():
        assert_matches(got[name], w, name)


@pytest.mark.parametrize("backend", BACKENDS)
def test_keys_thread_through_loops(backend):
    def f(k):
        return aotkit.fori_loop(0, 3, lambda i, c: ar.fold_in(ar.split(c, 3)[1], i), k)

    def jf(k):
        return jax.lax.fori_loop(
            0, 3, lambda i, c: jax.random.fold_in(jax.random.split(c, 3)[1], i), k
        )

    assert_matches(run_on(backend, f, ar.key(3)), _jax(jf, _jkey(3)))


def test_a_concrete_key_inside_a_trace_stays_concrete():
    seen = {}

    def f(x):
        seen["split"] = ar.split(ar.key(1))
        return x

    aotkit.lower(f, np.float32(0))
    assert isinstance(seen["split"], np.ndarray)


# --- samplers on both backends ----------------------------------------------------------------


def _samplers(k, logits):
    return {
        "bits": ar.bits(k, (5,)),
        "bits8": ar.bits(k, (3, 2), np.uint8),
        "bits64": ar.bits(k, (4,), np.uint64),
        "uniform": ar.uniform(k, (2, 3)),
        "uniform_range": ar.uniform(
            k, (4,), minval=-2.0, maxval=np.array([1, 2, 3, 4], np.float32)
        ),
        "uniform_f16": ar.uniform(k, (5,), np.float16),
        "uniform_bf16": ar.uniform(k, (5,), BF16),
        "uniform_scalar": ar.uniform(k),
        "normal": ar.normal(k, (7,)),
        "normal_c64": ar.normal(k, (3,), np.complex64),
        "bernoulli": ar.bernoulli(k, 0.3, (9,)),
        "bernoulli_p": ar.bernoulli(k, np.array([0.1, 0.5, 0.9], np.float32)),
        "bernoulli_high": ar.bernoulli(k, 0.25, (6,), mode="high"),
        "randint": ar.randint(k, (8,), -5, 17),
        "randint_u8": ar.randint(k, (6,), 0, 256, np.uint8),
        "randint_full": ar.randint(k, (6,), -(2**31), 2**31),
        "randint_empty_range": ar.randint(k, (3,), 4, 2),
        "permutation": ar.permutation(k, 10),
        "permutation_2d": ar.permutation(k, np.arange(12, dtype=np.float32).reshape(4, 3)),
        "permutation_axis1": ar.permutation(k, np.arange(12, dtype=np.int32).reshape(3, 4), axis=1),
        "permutation_indep": ar.permutation(
            k, np.arange(12, dtype=np.int32).reshape(3, 4), axis=1, independent=True
        ),
        "categorical": ar.categorical(k, logits),
        "categorical_axis0": ar.categorical(k, logits, axis=0),
        "categorical_shape": ar.categorical(k, logits, shape=(5, 2)),
        "gumbel": ar.gumbel(k, (4,)),
        "gumbel_high": ar.gumbel(k, (4,), mode="high"),
    }


def _jax_samplers(k, logits):
    r = jax.random
    return {
        "bits": r.bits(k, (5,)),
        "bits8": r.bits(k, (3, 2), jnp.uint8),
        "uniform": r.uniform(k, (2, 3)),
        "uniform_range": r.uniform(
            k, (4,), minval=-2.0, maxval=jnp.array([1, 2, 3, 4], jnp.float32)
        ),
        "uniform_f16": r.uniform(k, (5,), jnp.float16),
        "uniform_bf16": r.uniform(k, (5,), jnp.bfloat16),
        "uniform_scalar": r.uniform(k),
        "normal": r.normal(k, (7,)),
        "normal_c64": r.normal(k, (3,), jnp.complex64),
        "bernoulli": r.bernoulli(k, 0.3, (9,)),
        "bernoulli_p": r.bernoulli(k, jnp.array([0.1, 0.5, 0.9], jnp.float32)),
        "bernoulli_high": r.bernoulli(k, 0.25, (6,), mode="high"),
        "randint": r.randint(k, (8,), -5, 17),
        "randint_u8": r.randint(k, (6,), 0, 256, jnp.uint8),
        "randint_empty_range": r.randint(k, (3,), 4, 2),
        "permutation": r.permutation(k, 10),
        "permutation_2d": r.permutation(k, jnp.arange(12, dtype=jnp.float32).reshape(4, 3)),
        "permutation_axis1": r.permutation(k, jnp.arange(12).reshape(3, 4), axis=1),
        "permutation_indep": r.permutation(
            k, jnp.arange(12, dtype=jnp.int32).reshape(3, 4), axis=1, independent=True
        ),
        "categorical": r.categorical(k, logits),
        "categorical_axis0": r.categorical(k, logits, axis=0),
        "categorical_shape": r.categorical(k, logits, shape=(5, 2)),
        "gumbel": r.gumbel(k, (4,)),
        "gumbel_high": r.gumbel(k, (4,), mode="high"),
    }


LOGITS = np.log(np.array([[0.1, 0.2, 0.7], [0.5, 0.25, 0.25]], np.float32))
# randint over a full 32-bit range: JAX's maxval must fit int32 in its 32-bit mode, so the
# oracle is JAX with x64 (maxval 2**31 is then one past the top, which JAX supports).
TOLERANCES = {
    np.dtype(np.float32): (2e-6, 2e-6),
    np.dtype(np.float16): (1e-3, 1e-3),
    BF16: (1e-2, 1e-2),
    np.dtype(np.complex64): (2e-6, 2e-6),
}


@pytest.fixture(scope="module")
def jax_samples():
    out = {}
    for seed in SEEDS:
        want = _jax(_jax_samplers, _jkey(seed), LOGITS)
        want["bits64"] = _jax(lambda k: jax.random.bits(k, (4,), jnp.uint64), _jkey(seed), x64=True)
        want["randint_full"] = _jax(
            lambda k: jax.random.randint(k, (6,), -(2**31), 2**31, jnp.int32), _jkey(seed), x64=True
        )
        out[seed] = want
    return out


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_samplers_match_jax(backend, seed, jax_samples):
    got = run_on(backend, _samplers, ar.key(seed), LOGITS)
    want = jax_samples[seed]
    assert sorted(got) == sorted(want)
    for name, w in want.items():
        assert_matches(got[name], w, f"{name} (seed {seed}, {backend})", tolerances=TOLERANCES)


def test_samplers_take_a_key_closed_over_as_a_constant(jax_samples):
    got = run_on("cpu", lambda lg: _samplers(ar.key(42), lg), LOGITS)
    for name, w in jax_samples[42].items():
        assert_matches(got[name], w, name, tolerances=TOLERANCES)


def test_samplers_of_a_split_key_in_a_loop_match_jax():
    def f(k):
        outs = []
        for _ in range(3):
            k, sub = ar.split(k)
            outs.append(ar.normal(sub, (2,)))
        return anp.stack(outs)

    def jf(k):
        outs = []
        for _ in range(3):
            k, sub = jax.random.split(k)
            outs.append(jax.random.normal(sub, (2,)))
        return jnp.stack(outs)

    assert_matches(run_on("cpu", f, ar.key(3)), _jax(jf, _jkey(3)), tolerances=TOLERANCES)


@pytest.mark.parametrize("dtype", ["float64", "int64", "uint64", "uint32", "int16"])
def test_64_bit_and_narrow_dtypes_match_jax_with_x64(dtype):
    dt = np.dtype(dtype)
    jk = _jkey(5)
    if dt.kind == "f":
        got = run_on("cpu", lambda k: (ar.uniform(k, (6,), dt), ar.normal(k, (6,), dt)), ar.key(5))
        want = _jax(
            lambda k: (jax.random.uniform(k, (6,), dt), jax.random.normal(k, (6,), dt)),
            jk,
            x64=True,
        )
    else:
        lo, hi = (-100, 2**40) if dt == np.int64 else (3, 2**15 - 1)
        got = run_on("cpu", lambda k: (ar.randint(k, (6,), lo, hi, dt),), ar.key(5))
        want = _jax(lambda k: (jax.random.randint(k, (6,), lo, hi, dt),), jk, x64=True)
    for g, w in zip(got, want, strict=True):
        assert_matches(g, w, dtype, rtol=1e-12, atol=1e-12)


@st.composite
def _draw_case(draw):
    shape = tuple(draw(st.lists(st.integers(0, 4), max_size=3)))
    seed = draw(st.integers(0, 2**32 - 1))
    kind = draw(st.sampled_from(["uniform", "normal", "randint", "bernoulli"]))
    dtype = draw(
        st.sampled_from(
            {
                "uniform": ["float32", "float16", "bfloat16"],
                "normal": ["float32", "float16"],
                "randint": ["int32", "int8", "uint8", "uint16", "uint32"],
                "bernoulli": ["float32"],
            }[kind]
        )
    )
    lo = draw(st.integers(-50, 50))
    hi = lo + draw(st.integers(-3, 300))
    return shape, seed, kind, dtype, lo, hi


def _draw(mod, k, case):
    shape, _, kind, dtype, lo, hi = case
    if kind == "randint":
        dt = np.dtype(dtype)
        lo_c, hi_c = max(lo, np.iinfo(dt).min), max(hi, np.iinfo(dt).min)
        return mod.randint(k, shape, lo_c, hi_c, dt)
    if kind == "bernoulli":
        return mod.bernoulli(k, (lo + 50) / 100, shape)
    dt = BF16 if dtype == "bfloat16" else np.dtype(dtype)
    return getattr(mod, kind)(k, shape, dt)


@settings(max_examples=25, deadline=None)
@given(_draw_case())
def test_shapes_and_dtypes_match_jax(case):
    seed = case[1]
    got = run_on("cpu", lambda k: _draw(ar, k, case), ar.key(seed))
    want = _jax(lambda k: _draw(jax.random, k, case), _jkey(seed))
    assert_matches(got, want, repr(case), tolerances=TOLERANCES)


def test_one_key_gives_one_stream_on_both_backends():
    f = lambda k: (ar.uniform(k, (16,)), ar.randint(k, (16,), 0, 1000))  # noqa: E731
    cpu = run_on("cpu", f, ar.key(123))
    interp = run_on("interpreter", f, ar.key(123))
    np.testing.assert_array_equal(cpu[1], interp[1])
    np.testing.assert_allclose(cpu[0], interp[0], rtol=0, atol=0)


# --- errors -----------------------------------------------------------------------------------

K = ar.key(0)
F32 = aotkit.spec("f32[]")


def _traced(fn):
    """Runs fn inside a trace (the errors below are raised while tracing)."""
    return lambda: aotkit.lower(lambda x: fn(), F32)


ERRORS = [
    pytest.param(
        lambda: ar.uniform(K, (2,)),
        RuntimeError,
        r"aotkit\.random\.uniform: sampling builds StableHLO, so it runs inside a "
        r"traced function",
        id="aotkitrandomuniform-sampling-builds-stab",
    ),
    pytest.param(
        lambda: ar.split(np.zeros(3, np.uint32)),
        TypeError,
        r"aotkit\.random\.split \(at .*\): key must be a uint32\[2\] array .*got "
        r"uint32\[3\]; a typed JAX key converts with jax\.random\.key_data",
        id="key-must-be-a-uint322-array-got-uint323",
    ),
    pytest.param(
        lambda: ar.split(jax.random.key(0)),
        TypeError,
        r"key must be a uint32\[2\] array .*got",
        id="key-must-be-a-uint322-array-got",
    ),
    pytest.param(
        lambda: aotkit.lower(ar.split, aotkit.spec("f32[2]")),
        TypeError,
        r"key must be a uint32\[2\] array .*got f32\[2\]",
        id="key-must-be-a-uint322-array-got-f322",
    ),
    pytest.param(
        lambda: aotkit.lower(ar.key, aotkit.spec("f32[]")),
        TypeError,
        r"aotkit\.random\.key \(at .*\): seed must be a scalar integer, got a "
        r"traced f32\[\]",
        id="seed-must-be-a-scalar-integer-got-a-trac",
    ),
    pytest.param(
        lambda: ar.key(2**63),
        ValueError,
        r"seed 9223372036854775808 does not fit in int64; pass an int in "
        r"\[-2\*\*63, 2\*\*63\) \(or a np\.uint64\)",
        id="seed-9223372036854775808-does-not-fit-in",
    ),
    pytest.param(
        lambda: ar.key(1.5),
        TypeError,
        r"aotkit\.random\.key \(at .*\): seed must be a scalar integer, got 1\.5",
        id="seed-must-be-a-scalar-integer-got-15",
    ),
    pytest.param(
        lambda: ar.split(K, (2, -1)),
        TypeError,
        r"aotkit\.random\.split \(at .*\): shape must be a tuple of non-negative "
        r"ints \(static\), got \(2, -1\)",
        id="shape-must-be-a-tuple-of-non-negative-in",
    ),
    pytest.param(
        lambda: aotkit.lower(lambda d: ar.fold_in(K, d), aotkit.spec("f32[]")),
        TypeError,
        r"aotkit\.random\.fold_in \(at .*\): data must be a scalar integer, got a "
        r"traced f32\[\]",
        id="data-must-be-a-scalar-integer-got-a-trac",
    ),
    pytest.param(
        lambda: ar.fold_in(K, -1),
        ValueError,
        r"aotkit\.random\.fold_in \(at .*\): data must be a scalar integer in "
        r"\[0, 2\*\*32\), got -1",
        id="data-must-be-a-scalar-integer-in-0-232-g",
    ),
    pytest.param(
        _traced(lambda: ar.uniform(K, (2**16, 2**16))),
        ValueError,
        r"aotkit\.random\.uniform \(at .*\): shape \(65536, 65536\) holds 2\*\*32 "
        r"or more values",
        id="shape-65536-65536-holds-232-or-more-valu",
    ),
    pytest.param(
        _traced(lambda: ar.uniform(K, (2,), np.int32)),
        ValueError,
        r"aotkit\.random\.uniform \(at .*\): dtype must be a float dtype, got "
        r"int32",
        id="dtype-must-be-a-float-dtype-got-int32",
    ),
    pytest.param(
        _traced(lambda: ar.uniform(K, (2,), minval=np.zeros(3))),
        ValueError,
        r"aotkit\.random\.uniform \(at .*\): minval of shape \(3,\) does not "
        r"broadcast to the shape \(2,\)",
        id="minval-of-shape-3-does-not-broadcast-to",
    ),
    pytest.param(
        _traced(lambda: ar.bernoulli(K, 0.5, mode="mid")),
        ValueError,
        r"aotkit\.random\.bernoulli \(at .*\): mode must be 'low' or 'high', got "
        r"'mid'",
        id="mode-must-be-low-or-high-got-mid",
    ),
    pytest.param(
        _traced(lambda: ar.bernoulli(K, np.array([1, 0]))),
        TypeError,
        r"aotkit\.random\.bernoulli \(at .*\): p must be a float or a float "
        r"array, got dtype int64",
        id="p-must-be-a-float-or-a-float-array-got-d",
    ),
    pytest.param(
        _traced(lambda: ar.bernoulli(K, np.full(3, 0.5), (2,))),
        ValueError,
        r"aotkit\.random\.bernoulli \(at .*\): p of shape \(3,\) does not "
        r"broadcast to the shape \(2,\)",
        id="p-of-shape-3-does-not-broadcast-to-the-s",
    ),
    pytest.param(
        _traced(lambda: ar.randint(K, (2,), "a", 3)),
        TypeError,
        r"aotkit\.random\.randint \(at .*\): minval must be an integer, got 'a'",
        id="minval-must-be-an-integer-got-a",
    ),
    pytest.param(
        _traced(lambda: ar.randint(K, (2,), 0, anp.asarray(True))),
        TypeError,
        r"aotkit\.random\.randint \(at .*\): maxval must be an integer, got dtype "
        r"bool",
        id="maxval-must-be-an-integer-got-dtype-bool",
    ),
    pytest.param(
        _traced(lambda: ar.permutation(K, -2)),
        ValueError,
        r"aotkit\.random\.permutation \(at .*\): x must be a non-negative int, "
        r"got -2",
        id="x-must-be-a-non-negative-int-got-2",
    ),
    pytest.param(
        _traced(lambda: ar.permutation(K, np.array(3.0))),
        TypeError,
        r"aotkit\.random\.permutation \(at .*\): x must be a static int or an "
        r"array of at least one dimension",
        id="x-must-be-a-static-int-or-an-array-of-at",
    ),
    pytest.param(
        _traced(lambda: ar.gumbel(K, mode="highest")),
        ValueError,
        r"aotkit\.random\.gumbel \(at .*\): mode must be 'low' or 'high' "
        r"\('highest' is not supported\), got 'highest'",
        id="mode-must-be-low-or-high-highest-is-not",
    ),
    pytest.param(
        _traced(lambda: ar.categorical(K, np.zeros(3, np.int32))),
        TypeError,
        r"aotkit\.random\.categorical \(at .*\): logits must be floats, got dtype "
        r"int32",
        id="logits-must-be-floats-got-dtype-int32",
    ),
    pytest.param(
        _traced(lambda: ar.categorical(K, np.zeros(3, np.float32), replace=False)),
        NotImplementedError,
        r"aotkit\.random\.categorical \(at .*\): replace=False is not supported "
        r"\(it needs top_k\)",
        id="replace-false-is-not-supported-it-needs",
    ),
]


@pytest.mark.parametrize("fn,exc,pattern", ERRORS)
def test_errors(fn, exc, pattern):
    with pytest.raises(exc, match=pattern):
        fn()
