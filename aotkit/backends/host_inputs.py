"""Host inputs for PJRT's transfer: large NumPy arguments read in place or staged, and what
jaxlib's C++ transfer makes of a host value.

The comment below says why a call with a large NumPy array is prepared (`HostInputs`); the
tables after it say which host values the C++ transfer keeps as they are in each x64 mode
(`host_transfer_exact`), which the dispatcher (aotkit/backends/dispatch.py) and the checked
call (aotkit/backends/pjrt.py) both read.
"""

from __future__ import annotations

import concurrent.futures
import os
import sys
import threading
from typing import NamedTuple

import ml_dtypes
import numpy as np

from aotkit import _compat
from aotkit.specs import ShapeDtype

# The pytree nodes a call's arguments are walked through.
CONTAINERS = frozenset((list, tuple, dict))

# jaxlib's transfer hands PJRT's CPU client a NumPy array of `IN_PLACE_FROM` bytes or more to
# read in place when it is 64-byte aligned and dense (XLA's code assumes that alignment): no
# copy, and the execution, which runs asynchronously, reads the caller's memory. Any other it
# copies, into newly allocated memory. NumPy aligns its buffers to 16 bytes only (a large
# array from the allocator's mmap path always starts 16 bytes past a page), so most large
# NumPy arrays take that copy, which runs at a fraction of memory bandwidth (page faults on
# fresh memory on every call).
#
# So a call with a NumPy array of `IN_PLACE_FROM` bytes or more is prepared: an array of
# `STAGED_FROM` bytes or more that is not aligned is copied into a reused, already-faulted,
# aligned staging buffer (in parallel for large arrays), which the transfer then reads in
# place; an aligned one goes as it is (no copy). If any of the caller's own arrays goes to
# the transfer (aligned large ones, and those under `STAGED_FROM`, which jaxlib copies as
# fast as staging would, when they are not aligned), the call returns once its results are
# ready, so the caller may write to its arrays as soon as the call returns, as with a copy.
# Arrays under `IN_PLACE_FROM` are always copied by the transfer.
#
# All of this is what jaxlib's own CPU client does (`JAXLIB_CPU`). Of other clients nothing is
# known (`NONE_KNOWN`): a TPU's transfer reads even a 4-byte NumPy argument after the call has
# returned (tests/backends/test_host_inputs.py saw the caller's later write in the result), and
# keeps the array alive until it has. So on those every NumPy argument is copied first
# (`HostInputs.private_copies`), and the call need not wait for its results.

# Measured on jaxlib 0.10.2's CPU client: an aligned array of 2048 bytes or more is read in
# place (tests/backends/test_host_inputs.py checks that a smaller one is not).
IN_PLACE_FROM = 2048
# Below this, jaxlib's own copy costs what staging does, a call included (measured on the CPU
# client: within 5% at 16 MB, 1.1x staging at 24 MB, 3x from 40 MB, where the allocator
# returns every buffer of that size to the system and each copy faults its pages in again).
# On 13 cores, staging from 256 KB made calls of 1 MB 1.15x-1.25x slower and of 4 MB up to
# 1.25x (aligned ones 1.1x-1.2x: they took the Python front), and calls of 10 MB anywhere
# from 1.03x slower to 1.2x faster.
STAGED_FROM = 16 << 20
# XLA's CPU client copies a host buffer of fewer bytes than this while the call that hands it
# over runs (its `kSmallDataTransferByteSize`), and larger ones on a worker thread after the
# call has returned. So an array under this size that the transfer does not read in place (not
# 64-byte aligned) is the caller's again when the call returns: its call need not wait
# (tests/backends/test_host_inputs.py writes to such arrays right after their calls). Only
# jaxlib's own CPU client (aotkit/backends/cpu.py) is known to do this (other backends' calls
# get private copies: see above).
COPIED_IN_CALL_BELOW = 100 << 10


class CopiedInCall(NamedTuple):
    """The NumPy arguments a client's transfer copies while the call that hands them over
    runs, so that they are the caller's again when it returns (a call with only such arrays
    need not wait for its results): every one under `below` bytes, and one under
    `unaligned_below` bytes that is not 64-byte aligned."""

    below: int
    unaligned_below: int

    @property
    def nothing_known(self) -> bool:
        """Whether the client may read any NumPy argument after the call returns: the
        dispatch then hands it copies of them all, and waits for nothing."""
        return self.below == 0


JAXLIB_CPU = CopiedInCall(IN_PLACE_FROM, COPIED_IN_CALL_BELOW)
NONE_KNOWN = CopiedInCall(0, 0)
# Staging buffers kept for reuse, in bytes (least recently used dropped first). A call whose
# arrays do not fit in what is free copies into buffers that are not kept.
STAGING_LIMIT = 1 << 30
# Copies of this many bytes or more are split over threads (NumPy releases the GIL to copy).
_PARALLEL_FROM = 4 << 20
_ALIGN = 64


def aligned(x: np.ndarray) -> bool:
    """Whether `x`'s data starts on a 64-byte boundary (what the transfer may read in place)."""
    return x.__array_interface__["data"][0] % _ALIGN == 0


def _map_arrays(tree, fn):
    """`tree` (a NumPy array, or a list, tuple or dict of them and other leaves, nested) with
    `fn(array)` for each NumPy array; lists, tuples and dicts rebuilt, other leaves kept."""
    t = type(tree)
    if t is np.ndarray:
        return fn(tree)
    if t is tuple or t is list:
        return t(_map_arrays(v, fn) for v in tree)
    if t is dict:
        return {k: _map_arrays(v, fn) for k, v in tree.items()}
    return tree


class HostInputs:
    """Prepares large NumPy arguments for PJRT's transfer (see the comment above).

    A staging buffer is in use while anything but this pool holds its memory: the transfer
    keeps the NumPy view it was given until the device buffer made from it is freed (after
    the execution that read it), and a result XLA wrote into a donated argument keeps it as
    long as that result lives. A buffer is handed out again only once its reference count
    says nobody else holds it; until then, new buffers are made (within `STAGING_LIMIT`).
    """

    def __init__(self, limit: int = STAGING_LIMIT):
        self._lock = threading.Lock()
        self._limit = limit
        self._held = 0
        self._tick = 0
        # nbytes -> entries [owner (uint8 array), offset of the aligned start, last use]
        self._entries: dict[int, list[list]] = {}
        self._owners: set[int] = set()
        self._free_refs = self._count_free_refs()
        self._workers = None
        self._workers_pid = None

    @staticmethod
    def _count_free_refs() -> int:
        # What `sys.getrefcount` reads for an entry's owner that only the pool holds, measured
        # the way `_take` reads it (interpreters differ in what the call itself adds).
        entry = [np.empty(1, np.uint8), 0, 0]
        return sys.getrefcount(entry[0])

    def prepare(self, x: np.ndarray) -> tuple[np.ndarray, bool]:
        """(what to hand the transfer for `x`, whether that is `x`'s own memory)."""
        if x.nbytes < STAGED_FROM or (x.flags.c_contiguous and aligned(x)):
            return x, True
        return self.copy(x), False

    def prepare_tree(self, args: tuple, kwargs: dict) -> tuple[tuple, dict, bool]:
        """`args` and `kwargs` with every NumPy array of `IN_PLACE_FROM` bytes or more
        prepared (in lists, tuples and dicts too); and whether any of them is the caller's."""
        in_place = False
        prepared = []
        for x in args:
            t = type(x)
            if t is np.ndarray and x.nbytes >= IN_PLACE_FROM:
                if x.nbytes >= STAGED_FROM:
                    x, own = self.prepare(x)
                    in_place = in_place or own
                else:
                    in_place = True
            elif t in CONTAINERS:
                x, own = self._prepare_container(x)
                in_place = in_place or own
            prepared.append(x)
        if kwargs:
            kwargs, own = self._prepare_container(kwargs)
            in_place = in_place or own
        return tuple(prepared), kwargs, in_place

    def private_copies(self, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        """`args` and `kwargs` with every NumPy array (in lists, tuples and dicts too)
        replaced by a copy nobody else holds, for a client that may read them after the call
        returns (`NONE_KNOWN`) and keeps what it was given alive until it has: the caller's
        arrays are then free at once, and the call need not wait. Arrays of `STAGED_FROM`
        bytes or more are copied into staging buffers (reused only once nothing holds them)."""

        def copy(x: np.ndarray) -> np.ndarray:
            return x.copy() if x.nbytes < STAGED_FROM else self.copy(x)

        return _map_arrays(args, copy), _map_arrays(kwargs, copy) if kwargs else kwargs

    def _prepare_container(self, tree) -> tuple[object, bool]:
        in_place = False

        def prepare(x: np.ndarray) -> np.ndarray:
            nonlocal in_place
            if x.nbytes < IN_PLACE_FROM:
                return x
            prepared, own = self.prepare(x)
            in_place = in_place or own
            return prepared

        return _map_arrays(tree, prepare), in_place

    def owns(self, x: np.ndarray) -> bool:
        """Whether `x` is a view of one of this pool's staging buffers."""
        return id(x.base) in self._owners

    def copy(self, x: np.ndarray) -> np.ndarray:
        """An aligned, C-contiguous copy of `x` in a staging buffer."""
        nbytes = x.nbytes
        with self._lock:
            owner, offset = self._take(nbytes)
            view = owner[offset : offset + nbytes].view(x.dtype).reshape(x.shape)
        self._copy_into(view, x)
        return view

    def _take(self, nbytes: int) -> tuple[np.ndarray, int]:
        self._tick += 1
        entries = self._entries.setdefault(nbytes, [])
        for attempt in range(2):
            for entry in entries:
                if sys.getrefcount(entry[0]) == self._free_refs:
                    entry[2] = self._tick
                    return entry[0], entry[1]
            if not entries or attempt:
                break
            # jaxlib lets go of a buffer read in place once the call that read it is done,
            # but drops the Python reference only at its next call: drop it now.
            _compat.release_host_references()
        owner = np.empty(nbytes + _ALIGN, np.uint8)
        offset = -owner.__array_interface__["data"][0] % _ALIGN
        # Fault the pages in now, once, rather than in every copy.
        owner.fill(0)
        if self._held + nbytes > self._limit:
            self._evict(self._held + nbytes - self._limit)
        if self._held + nbytes <= self._limit:
            entries.append([owner, offset, self._tick])
            self._owners.add(id(owner))
            self._held += nbytes
        return owner, offset

    def _evict(self, needed: int) -> None:
        """Drops free buffers, least recently used first, until `needed` bytes are gone."""
        free = [
            (entry[2], nbytes, entry)
            for nbytes, entries in self._entries.items()
            for entry in entries
            if sys.getrefcount(entry[0]) == self._free_refs
        ]
        for _, nbytes, entry in sorted(free, key=lambda item: item[0]):
            if needed <= 0:
                break
            # (by identity: `list.remove` compares entries, and so their arrays, with ==)
            bucket = self._entries[nbytes]
            del bucket[next(i for i, e in enumerate(bucket) if e is entry)]
            self._owners.discard(id(entry[0]))
            self._held -= nbytes
            needed -= nbytes

    def release(self) -> None:
        """Forgets every staging buffer (those in use are freed when their user lets go)."""
        with self._lock:
            self._entries.clear()
            self._owners.clear()
            self._held = 0

    def held_bytes(self) -> int:
        return self._held

    def _copy_into(self, dst: np.ndarray, src: np.ndarray) -> None:
        workers = self._pool() if src.nbytes >= _PARALLEL_FROM else None
        if workers is None or not src.flags.c_contiguous:
            np.copyto(dst, src, casting="no")
            return
        pool, n = workers
        flat_dst, flat_src = dst.reshape(-1), src.reshape(-1)
        bounds = np.linspace(0, flat_src.size, n + 1).astype(np.int64)
        futures = [
            pool.submit(np.copyto, flat_dst[a:b], flat_src[a:b])
            for a, b in zip(bounds[1:-1], bounds[2:], strict=True)
        ]
        np.copyto(flat_dst[: bounds[1]], flat_src[: bounds[1]])
        for future in futures:
            future.result()

    def _pool(self):
        """(a thread pool, how many parts a copy is split into), or None on one core."""
        n = min(4, os.cpu_count() or 1)
        if n < 2:
            return None
        if self._workers is None or self._workers_pid != os.getpid():
            # A pool made before a fork has no threads in the child: make a new one there.
            self._workers = concurrent.futures.ThreadPoolExecutor(
                n - 1, thread_name_prefix="aotkit-staging"
            )
            self._workers_pid = os.getpid()
        return self._workers, n


host_inputs = HostInputs()


PYTHON_SCALARS = frozenset((bool, int, float, complex))
# NumPy dtypes (native byte order) that jaxlib's C++ transfer keeps as they are in either x64
# mode: all but the 64-bit ones, which x64-off mode narrows.
EXACT_NUMPY = frozenset(
    np.dtype(t).newbyteorder("=")
    for t in (
        np.bool_, np.int8, np.int16, np.int32, np.uint8, np.uint16, np.uint32,
        np.float16, np.float32, np.complex64, ml_dtypes.bfloat16,
    )
)  # fmt: skip
EXACT_NUMPY_SCALARS = frozenset(d.type for d in EXACT_NUMPY)
# The NumPy scalar types of the dtypes x64-off mode narrows (they key as themselves in x64 mode).
WIDE_NUMPY_SCALARS = frozenset((np.float64, np.int64, np.uint64, np.complex128))
# The dtype jaxlib's C++ transfer gives a Python scalar, indexed by x64 mode.
CPP_SCALAR_DTYPES = {
    bool: (np.dtype(np.bool_), np.dtype(np.bool_)),
    float: (np.dtype(np.float32), np.dtype(np.float64)),
    complex: (np.dtype(np.complex64), np.dtype(np.complex128)),
    int: (np.dtype(np.int32), np.dtype(np.int64)),
}


def host_transfer_exact(leaf, spec: ShapeDtype, x64: bool) -> bool:
    """Whether jaxlib's C++ transfer (in JAX's x64 mode `x64`) turns a host leaf (NumPy
    value or Python scalar) into exactly the buffer of `spec` that the checked call makes.
    With x64 off, it narrows the NumPy dtypes outside `EXACT_NUMPY` (`native_dispatcher`
    never hands it those in that mode, so no other dtype's signature is ever theirs)."""
    t = type(leaf)
    if t is np.ndarray or isinstance(leaf, np.generic):
        return leaf.dtype == spec.dtype and (x64 or leaf.dtype in EXACT_NUMPY)
    return t in CPP_SCALAR_DTYPES and CPP_SCALAR_DTYPES[t][x64] == spec.dtype
