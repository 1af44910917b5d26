"""`--inputs`: the arrays of `.npy` and `.npz` files, checked against the program's
argument leaves, and the seeded random inputs `aotkit run` uses without them.

A file is read from one descriptor, only if it is a regular file, and a `.npy` header that
declares more data than the file holds is refused before NumPy allocates it.
"""

from __future__ import annotations

import math

import numpy as np

from aotkit import _files
from aotkit.cli.report import UserError

INPUTS_HELP = (
    "one .npy file per array leaf, in the order of the flattened arguments (a dict's leaves "
    "by sorted key), or one .npz file keyed by leaf path: x, params['w'], xs[0]"
)


INPUTS_FIX = "one .npy file per array leaf, in flat order, or one .npz file keyed by leaf path"


_NPZ_MAGIC = b"PK\x03\x04"
_NPY_MAGIC = b"\x93NUMPY"


def _check_npy_size(file, size: int, label: str) -> None:
    """Refuses a `.npy` stream of `size` bytes whose header declares more data than follows
    it: NumPy allocates the declared array before it reads (80 GB for a 128-byte file)."""
    from numpy.lib import format as npy

    readers = {(1, 0): npy.read_array_header_1_0, (2, 0): npy.read_array_header_2_0}
    try:
        read_header = readers.get(npy.read_magic(file))
        if read_header is None:
            return  # a version NumPy itself names in its error
        shape, _, dtype = read_header(file)
        held = size - file.tell()
    except ValueError:
        return  # not a .npy header: NumPy's own error says so
    finally:
        file.seek(0)
    declared = math.prod(shape) * dtype.itemsize
    if not dtype.hasobject and declared > held:
        raise UserError(
            f"--inputs: {label} declares a {dtype} array of shape {tuple(shape)} ({declared} "
            f"bytes) but holds {held} bytes of data; the file is truncated or was not written "
            "by numpy.save: save inputs with numpy.save or numpy.savez"
        )


class Inputs:
    """`--inputs`: `.npy` files, one per array leaf in flat order, or one `.npz` file whose
    keys are leaf paths (`params['w']`, as `aotkit run` names them; `args[0]['w']` works too)."""

    def __init__(self, paths: list[str]):
        self.paths = [str(p) for p in paths]
        self.arrays: list[np.ndarray] = []
        self.npz: str | None = None
        self.named: dict[str, np.ndarray] = {}
        archives = []
        for p in self.paths:
            data = self._read(p)
            if isinstance(data, np.ndarray):
                self.arrays.append(data)
            else:
                archives.append(p)
                self.named = data
        if archives and (len(archives) > 1 or self.arrays):
            raise UserError(
                f"--inputs: got {len(archives)} .npz and {len(self.arrays)} .npy file(s); give "
                "either .npy files (one per leaf) or one .npz file keyed by leaf path"
            )
        self.npz = archives[0] if archives else None

    @staticmethod
    def _read(p: str) -> np.ndarray | dict[str, np.ndarray]:
        """The array of a `.npy` file, or the arrays of an `.npz` file by key.

        Read from one descriptor, opened only if `p` is a regular file (a FIFO would block
        NumPy's open); no size limit, since inputs are as large as the program's arguments."""
        fix = "save inputs with numpy.save or numpy.savez"
        try:
            with _files.opened(p, where=f"--inputs: {p!r}", fix=fix, limit=None) as f:
                with open(f.fd, "rb", closefd=False) as file:
                    try:
                        return Inputs._load(file, f.size, p)
                    except (OSError, ValueError, EOFError) as e:
                        raise UserError(
                            f"--inputs: cannot read {p!r} as a .npy or .npz file ({e}); {fix}"
                        ) from None
        except FileNotFoundError:
            raise UserError(f"--inputs: file {p!r} does not exist; give {INPUTS_FIX}") from None
        except OSError as e:
            raise UserError(
                f"--inputs: cannot read {p!r} as a .npy or .npz file ({e}); {fix}"
            ) from None
        except ValueError as e:  # not a regular file: refused before it was opened
            raise UserError(str(e)) from None

    @staticmethod
    def _load(file, size: int, p: str) -> np.ndarray | dict[str, np.ndarray]:
        start = file.read(len(_NPY_MAGIC))
        if not start.startswith(_NPZ_MAGIC) and start != _NPY_MAGIC:
            # (NumPy's own error for such a file calls it pickled data and suggests loading
            # it with pickle)
            raise ValueError(
                "it is empty"
                if not start
                else f"it is not a NumPy file: it starts with {start!r}, not {_NPY_MAGIC!r} "
                "(.npy) or b'PK' (.npz)"
            )
        file.seek(0)
        if file.read(len(_NPZ_MAGIC)) != _NPZ_MAGIC:
            file.seek(0)
            _check_npy_size(file, size, repr(p))
            return np.load(file, allow_pickle=False)
        file.seek(0)
        with np.load(file, allow_pickle=False) as data:
            for info in data.zip.infolist():
                key = info.filename.removesuffix(".npy")
                with data.zip.open(info) as member:
                    _check_npy_size(member, info.file_size, f"{p!r}[{key!r}]")
            return {key: data[key] for key in data.files}

    def specs(self, where: str) -> list | dict:
        """The argument specs the files imply: one per `.npy` file, or by name from `.npz` keys."""
        from aotkit.cli.notation import tree_from_keys

        if self.npz is None:
            return [_file_spec(x, repr(p)) for x, p in zip(self.arrays, self.paths, strict=True)]
        keys = {k: _file_spec(x, f"{self.npz!r}[{k!r}]") for k, x in self.named.items()}
        try:
            return tree_from_keys(keys, f"--inputs: {self.npz!r}")
        except ValueError as e:
            raise UserError(str(e)) from None

    def leaves(self, names: list[str], specs, params: list[str] | None, owner: str) -> list:
        """The arrays for the leaves `names` (with `specs`) of `owner`'s arguments, in order."""
        from aotkit.cli.notation import canonical
        from aotkit.specs import restore_dtype, spec_of
        from aotkit.symbolic.signatures import is_symbolic

        signature = ", ".join(f"{n}: {s}" for n, s in zip(names, specs, strict=True)) or "none"
        if self.npz is None:
            if len(self.arrays) != len(specs):
                raise UserError(
                    f"--inputs: {owner} takes {len(specs)} array leaf(s) ({signature}) but got "
                    f"{len(self.arrays)} file(s); give {INPUTS_FIX} (see aotkit run --help)"
                )
            found = list(zip(self.paths, self.arrays, strict=True))
            labels = [repr(p) for p in self.paths]
        else:
            by_key = {}
            for key, x in self.named.items():
                c = canonical(key, params)
                if c is None:
                    raise UserError(
                        f"--inputs: {self.npz!r}: key {key!r} is not a leaf path; key each "
                        f"array by its leaf's path ({signature})"
                    )
                by_key[c] = (key, x)
            wanted = [canonical(n, params) for n in names]
            missing = [
                f"{n}: {s}" for n, s, w in zip(names, specs, wanted, strict=True) if w not in by_key
            ]
            if missing:
                raise UserError(
                    f"--inputs: {self.npz!r} has no array for {', '.join(missing)} (its keys: "
                    f"{', '.join(self.named) or 'none'}); save each leaf of {owner} under its "
                    "path"
                    + (
                        " (a module file or an artifact keeps no parameter names: key by "
                        "position, args[0]['w'])"
                        if params is None
                        else ""
                    )
                )
            extra = [key for c, (key, _) in by_key.items() if c not in wanted]
            if extra:
                raise UserError(
                    f"--inputs: {self.npz!r}: key {extra[0]!r} is no argument leaf of {owner} "
                    f"({signature}); remove it or rename it to a leaf path"
                )
            found = [by_key[w] for w in wanted]
            labels = [f"{self.npz!r}[{key!r}]" for key, _ in found]
        arrays = []
        for (_, x), label, name, s in zip(found, labels, names, specs, strict=True):
            if is_symbolic([s]):
                # Its sizes are the array's to give; the call checks them with the others'.
                if getattr(x, "dtype", None) != s.dtype or np.ndim(x) != len(s.shape):
                    raise UserError(
                        f"--inputs: {label} holds {_file_spec(x, label)} but argument {name} "
                        f"is {s}; save an array of that dtype and rank"
                    )
                arrays.append(x)
                continue
            x = restore_dtype(x, spec_of(s))  # numpy.save keeps int4, f8e4m3fn as raw bytes
            if _file_spec(x, label) != spec_of(s):
                raise UserError(
                    f"--inputs: {label} holds {spec_of(x)} but argument {name} is "
                    f"{spec_of(s)}; save the array with that shape and dtype"
                )
            arrays.append(x)
        return arrays


def _file_spec(x: np.ndarray, label: str):
    """The spec of an array read from `--inputs` file `label`; one of a dtype no program
    takes (text, objects, records) is the user's error, naming the file."""
    from aotkit.specs import spec_of

    try:
        return spec_of(x)
    except (TypeError, ValueError):
        if x.dtype.kind == "V":
            raise  # raw bytes (ml_dtypes' arrays as numpy.save writes them): its own advice
        raise UserError(
            f"--inputs: {label} holds an array of dtype {x.dtype}, which no program takes "
            "(numbers and booleans only); save the array as it should be passed"
        ) from None


def random_input(rng: np.random.Generator, spec) -> np.ndarray:
    from aotkit import dtypes

    dtype, shape = spec.dtype, spec.shape
    if dtype.kind == "b":
        return rng.random(shape) < 0.5
    if dtypes.is_integer(dtype):
        info = dtypes.iinfo(dtype)
        lo, hi = max(int(info.min), -10), min(int(info.max), 10)
        return np.asarray(rng.integers(lo, hi, size=shape, endpoint=True), dtype=dtype)
    if dtype.kind == "c":
        z = rng.standard_normal(shape) + 1j * rng.standard_normal(shape)
        return np.asarray(z, dtype=dtype)
    return np.asarray(rng.standard_normal(shape), dtype=dtype)
