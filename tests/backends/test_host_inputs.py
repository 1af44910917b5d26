"""NumPy arguments on PJRT backends (aotkit/backends/host_inputs.py, `HostInputs`): large ones are
read in place when aligned and staged otherwise, and a NumPy array the caller holds is never
written, nor read after the call returns.

Oracle: NumPy. Every case runs twice, the first call through the checked Python call and the
second through jaxlib's C++ dispatch, on `Compiled` and on `jit`.
"""

from __future__ import annotations

import numpy as np
import pytest

import aotkit
import aotkit.numpy as anp
from aotkit.backends import host_inputs
from tests import lane

KIB = 1024
STAGED = host_inputs.STAGED_FROM
# Sizes in bytes: under IN_PLACE_FROM (always copied by jaxlib), between it and STAGED_FROM
# (given to jaxlib as they are), and STAGED_FROM (staged, or read in place when aligned).
SIZES = {"1KiB": KIB, "16KiB": 16 * KIB, "1MiB": 1024 * KIB, "staged": STAGED}


def host_array(nbytes: int, dtype=np.float32, offset: int = 0, fill=None) -> np.ndarray:
    """A 1-D array of `nbytes` whose data starts `offset` bytes past a 64-byte boundary."""
    dtype = np.dtype(dtype)
    owner = np.empty(nbytes + 128, np.uint8)
    start = -owner.__array_interface__["data"][0] % 64 + offset
    x = owner[start : start + nbytes].view(dtype)
    x[...] = np.arange(x.size, dtype=dtype) % 7 if fill is None else fill
    return x


def address(x: np.ndarray) -> int:
    return x.__array_interface__["data"][0]


def layouts(nbytes: int) -> dict[str, np.ndarray]:
    """The same values in several memory layouts."""
    aligned = host_array(nbytes)
    misaligned = host_array(nbytes, offset=16)
    wide = host_array(2 * nbytes)
    fortran = np.asfortranarray(host_array(nbytes).reshape(-1, 8))
    return {
        "aligned": aligned,
        "misaligned": misaligned,
        "strided": wide[::2],
        "fortran": fortran,
    }


def affine(x):
    return x * 2.0 + 1.0


def entry_point(kind: str, example: np.ndarray, **jit_options):
    if kind == "compiled":
        return aotkit.jit(affine, **jit_options).lower(example).compile()
    return aotkit.jit(affine, **jit_options)


@pytest.mark.parametrize("kind", ["compiled", "jit"])
@pytest.mark.parametrize("size", list(SIZES))
@pytest.mark.parametrize("layout", ["aligned", "misaligned", "strided", "fortran"])
def test_numpy_inputs_give_numpy_results(kind, size, layout):
    x = layouts(SIZES[size])[layout]
    assert address(x) % 64 == (16 if layout == "misaligned" else address(x) % 64)
    fn = entry_point(kind, x)
    expected = affine(x)
    for _ in range(2):  # the checked call, then the C++ dispatch
        out = np.asarray(fn(x))
        assert out.dtype == expected.dtype
        np.testing.assert_array_equal(out, expected)


@pytest.mark.parametrize("kind", ["compiled", "jit"])
@pytest.mark.parametrize("offset", [0, 16], ids=["aligned", "misaligned"])
@pytest.mark.parametrize("size", ["16KiB", "1MiB", "staged"])
def test_a_donated_numpy_argument_is_never_written(kind, offset, size):
    # XLA writes the result into a donated argument's buffer: never into the caller's array,
    # even when the transfer reads that array in place.
    x = host_array(SIZES[size], offset=offset)
    before = x.copy()
    fn = entry_point(kind, x, donate_argnums=0)
    for _ in range(3):
        out = fn(x)
        np.testing.assert_array_equal(np.asarray(out), affine(before))
        assert out.unsafe_buffer_pointer() != address(x)
        np.testing.assert_array_equal(x, before)


def slow(x):
    """Long enough (tens of ms) that a write right after the call lands while it runs."""

    def body(i, z):
        return anp.sin(z) * 0.5 + x

    return aotkit.fori_loop(0, max(4, 2**21 // x.size), body, x)


@pytest.mark.parametrize("kind", ["jit", "compiled"])
@pytest.mark.parametrize("offset", [0, 16], ids=["aligned", "misaligned"])
@pytest.mark.parametrize(
    "nbytes",
    [2 * KIB, 16 * KIB, host_inputs.COPIED_IN_CALL_BELOW - 64, 1024 * KIB, STAGED],
    ids=["2KiB", "16KiB", "largest copied in the call", "1MiB", "staged"],
)
def test_writing_an_argument_after_the_call_does_not_change_the_result(kind, offset, nbytes):
    # The misaligned cases under COPIED_IN_CALL_BELOW return without waiting (jaxlib's CPU
    # client copies them while the call runs): a jaxlib that read them later fails here.
    check_writes_after_calls(kind, host_array(nbytes, offset=offset, fill=1.0), "cpu")


@pytest.mark.skipif(not lane.ON, reason=f"{lane.ENV} names no accelerator backend (tests/lane.py)")
@pytest.mark.parametrize("backend", lane.params() or ["(none)"])
@pytest.mark.parametrize("kind", ["jit", "compiled"])
@pytest.mark.parametrize("offset", [0, 16], ids=["aligned", "misaligned"])
@pytest.mark.parametrize("nbytes", [4, KIB, 16 * KIB], ids=["4B", "1KiB", "16KiB"])
def test_writing_an_argument_after_a_call_on_the_lanes_backend(backend, kind, offset, nbytes):
    # Nothing is known of what other clients copy while the call runs (a TPU's transfer reads
    # even the smallest array later): every call with a NumPy argument waits there.
    check_writes_after_calls(kind, host_array(nbytes, offset=offset, fill=1.0), backend)


def check_writes_after_calls(kind: str, x: np.ndarray, backend: str) -> None:
    fn = aotkit.jit(slow, backend=backend)
    if kind == "compiled":  # one argument leaf: its own dispatch front
        fn = fn.lower(x).compile()
    reference = np.asarray(fn(x)).copy()
    for _ in range(3):  # the C++ dispatch, whose execution is asynchronous
        x[...] = 1.0
        out = fn(x)
        x[...] = 100.0
        np.testing.assert_array_equal(np.asarray(out), reference)


def test_jaxlib_copies_arrays_under_in_place_from():
    # The calls above return before their results are ready only for arrays under
    # IN_PLACE_FROM, which jaxlib's CPU client's transfer copies (measured on jaxlib 0.10.2):
    # a jaxlib that read them in place would fail here.
    x = host_array(host_inputs.IN_PLACE_FROM - 64, fill=1.0)
    fn = aotkit.jit(slow, backend="cpu")
    reference = np.asarray(fn(x)).copy()
    for _ in range(3):
        x[...] = 1.0
        out = fn(x)
        x[...] = 100.0
        np.testing.assert_array_equal(np.asarray(out), reference)


def test_a_staging_buffer_is_not_reused_while_a_call_reads_it():
    # Two calls in a row with misaligned arrays: the second must not copy into the buffer
    # the first (still running) reads.
    a = host_array(STAGED, offset=16, fill=1.0)
    b = host_array(STAGED, offset=16, fill=2.0)
    fn = aotkit.jit(slow)
    ref_a, ref_b = (np.asarray(fn(v)).copy() for v in (a, b))
    for _ in range(3):
        out_a = fn(a)
        out_b = fn(b)
        np.testing.assert_array_equal(np.asarray(out_a), ref_a)
        np.testing.assert_array_equal(np.asarray(out_b), ref_b)


def test_an_aligned_large_array_is_read_in_place_and_a_misaligned_one_staged():
    staging = host_inputs.HostInputs(limit=4 * STAGED)
    aligned = host_array(STAGED)
    misaligned = host_array(STAGED, offset=16)
    small = host_array(STAGED - 64, offset=16)  # jaxlib's own copy costs no more
    prepared, own = staging.prepare(small)
    assert prepared is small and own
    prepared, own = staging.prepare(aligned)
    assert own and prepared is aligned and staging.held_bytes() == 0
    prepared, own = staging.prepare(misaligned)
    assert not own and staging.owns(prepared)
    assert address(prepared) % 64 == 0 and prepared.flags.c_contiguous
    np.testing.assert_array_equal(prepared, misaligned)
    assert staging.held_bytes() == misaligned.nbytes


def test_staging_reuses_a_free_buffer_and_makes_another_for_a_held_one():
    staging = host_inputs.HostInputs(limit=64 * 1024 * KIB)
    x = host_array(1024 * KIB, offset=16)
    first = staging.copy(x)
    second = staging.copy(x)  # `first` still holds its buffer
    assert address(first) != address(second)
    assert staging.held_bytes() == 2 * x.nbytes
    address_first = address(first)
    del first
    assert address(staging.copy(x)) == address_first


def test_staging_keeps_at_most_its_limit():
    staging = host_inputs.HostInputs(limit=3 * 1024 * KIB)
    held = [staging.copy(host_array(1024 * KIB, offset=16)) for _ in range(5)]
    assert staging.held_bytes() == 3 * 1024 * KIB
    for copy in held:  # the copies past the limit are right, only not kept
        np.testing.assert_array_equal(copy, host_array(1024 * KIB))
    del held
    staging.copy(host_array(2 * 1024 * KIB, offset=16))  # evicts free 1 MiB buffers
    assert staging.held_bytes() <= 3 * 1024 * KIB


def test_evicting_a_free_buffer_behind_a_held_one_of_its_size():
    """The buffer evicted is found by identity: comparing entries (and so their arrays) with
    == raised NumPy's "truth value of an array is ambiguous" ValueError from a call."""
    staging = host_inputs.HostInputs(limit=3 * 1024 * KIB)
    x = host_array(1024 * KIB, offset=16)
    held = staging.copy(x)
    freed = staging.copy(x)
    del freed  # the second buffer of its size is free, the first still held
    big = staging.copy(host_array(2 * 1024 * KIB, offset=16))  # evicts the free one
    assert staging.held_bytes() == 3 * 1024 * KIB
    np.testing.assert_array_equal(held, host_array(1024 * KIB))
    np.testing.assert_array_equal(big, host_array(2 * 1024 * KIB))


@pytest.mark.parametrize("container", ["list", "dict"])
def test_large_arrays_inside_containers(container):
    a = host_array(STAGED, offset=16, fill=1.0)
    b = host_array(STAGED, fill=2.0)
    args = [a, b] if container == "list" else {"a": a, "b": b}

    def total(tree):
        leaves = tree if isinstance(tree, list) else [tree["a"], tree["b"]]
        return leaves[0] * 3.0 + leaves[1]

    fn = aotkit.jit(total)
    for _ in range(2):
        out = fn(args)
        b[...] = 100.0  # after the call: the result must not see it
        np.testing.assert_array_equal(np.asarray(out), np.full(a.shape, 5.0, np.float32))
        b[...] = 2.0


def test_a_large_big_endian_array():
    x = host_array(1024 * KIB, dtype=np.float64).astype(">f8")
    fn = aotkit.jit(affine)
    for _ in range(2):
        out = np.asarray(fn(x))
        assert out.dtype == np.float64
        np.testing.assert_array_equal(out, affine(x.astype(np.float64)))


def test_a_large_float64_array_with_x64_off():
    import jax

    assert not jax.config.jax_enable_x64
    x = host_array(1024 * KIB, dtype=np.float64, offset=16)
    fn = aotkit.jit(affine)
    for _ in range(2):
        out = np.asarray(fn(x))
        assert out.dtype == np.float64
        np.testing.assert_array_equal(out, affine(x))
