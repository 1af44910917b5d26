"""Process-wide settings: `aotkit.config.update(name, value)` and `aotkit.config.get(name)`.

- `x64_scalars` (default False, or `AOTKIT_X64_SCALARS=1`): the dtype of Python scalars
  passed as top-level arguments. Off, they are weakly typed 32-bit values (bool, int32,
  float32, complex64), as in JAX: `jit(f)(3.)` traces `f` for a float32 scalar that promotes
  like a Python float (NEP 50). On, they are weakly typed 64-bit values (int64, float64,
  complex128), as NumPy would hold them. Python scalars inside the traced function always
  follow NumPy's rules.
- `jit_cache_size` (default 128, or `AOTKIT_JIT_CACHE_SIZE`): how many `Lowered` and how many
  `Compiled` the jit caches keep per function (least recently used evicted), so a program
  that calls one function with ever new shapes does not grow without bound.
- `traceback_filtering` (default True, or `AOTKIT_TRACEBACK_FILTERING=off`): an exception
  raised through one of aotkit's entry points (a jit call, `.lower`, `.compile`, ...) is
  shown without aotkit's own frames, as JAX shows its errors (see aotkit/_traceback.py).
  Off, the whole traceback is kept.
- `default_matmul_precision` (default 'highest', or `AOTKIT_DEFAULT_MATMUL_PRECISION`): the
  precision of every dot and convolution traced without a `precision=` of its own, in JAX's
  spellings (`precision_pair`). 'highest' keeps float32 products float32 on accelerators
  (NumPy's semantics); 'default' lets a TPU use one bfloat16 pass. `default_matmul_precision`
  below overrides it for a scope, as `jax.default_matmul_precision` does; the value in force
  is part of the jit caches' keys, so a function jitted under two settings traces twice.
- `default_backend` (default None, or `AOTKIT_BACKEND=NAME`): the backend `jit`, `compile()`,
  `aotkit.load` (for a backend that does not start here) and the CLI use when given none. None
  is the platform `jax.default_backend()` picks (JAX_PLATFORMS honoured) where aotkit has a
  backend for it, the accelerator where one is present, else `cpu`. A name set here overrides
  `AOTKIT_BACKEND`, which overrides JAX's pick (aotkit/backends/__init__.py).
"""

from __future__ import annotations

import contextlib
import enum
import os

import jax

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("", "0", "false", "no", "off")


def _env_flag(name: str, default: bool = False) -> bool:
    text = os.environ.get(name, "").strip().lower()
    if not text:
        return default
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ValueError(f"{name}={text!r}: expected 1/0, true/false, yes/no or on/off")


def _env_int(name: str, default: int) -> int:
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"{name}={text!r}: expected a positive integer")
    return int(text)


# --- dot and convolution precision -------------------------------------------------------------

# JAX's spellings (`jax.lax.Precision`, `jax.default_matmul_precision`) -> StableHLO's names.
_PRECISION_SPELLINGS = {
    "default": "DEFAULT",
    "fastest": "DEFAULT",
    "bfloat16": "DEFAULT",
    "high": "HIGH",
    "bfloat16_3x": "HIGH",
    "tensorfloat32": "HIGH",
    "highest": "HIGHEST",
    "float32": "HIGHEST",
}
PRECISIONS = ("DEFAULT", "HIGH", "HIGHEST")
PRECISION_SPELLINGS = (
    "None, 'default' (or 'bfloat16', 'fastest'), 'high' (or 'tensorfloat32', 'bfloat16_3x'), "
    "'highest' (or 'float32'), a jax.lax.Precision member, or a pair of two of these (lhs, rhs)"
)


def _precision_name(p) -> str | None:
    if isinstance(p, str):
        return _PRECISION_SPELLINGS.get(p.lower())
    if isinstance(p, enum.Enum) and p.name in PRECISIONS:  # jax.lax.Precision.HIGH, ...
        return p.name
    return None


def precision_pair(where: str, value) -> tuple[str, str] | None:
    """`value` in any of JAX's spellings as (lhs, rhs) StableHLO precision names; None for
    None (the default in force applies). ValueError, worded for `where`, for anything else."""
    if value is None:
        return None
    one = _precision_name(value)
    if one is not None:
        return (one, one)
    if isinstance(value, tuple | list) and len(value) == 2:
        pair = (_precision_name(value[0]), _precision_name(value[1]))
        if None not in pair:
            return pair
    raise ValueError(f"{where}: unknown precision {value!r}; use {PRECISION_SPELLINGS}")


def _env_precision(name: str):
    text = os.environ.get(name, "").strip()
    if not text:
        return "highest"
    precision_pair(name, text)
    return text


# The precision in force where an op says none: the global setting's pair, or a scope's. A
# JAX user context: its value is per thread, as JAX's own settings are, and jaxlib's C++
# dispatch (under `jit`) keys its cache on it, so a call under another precision never runs
# an executable made under the first.
_precision_in_force = jax.make_user_context(None)


def matmul_precision() -> tuple[str, str]:
    """The (lhs, rhs) precision names of a dot or convolution traced with `precision=None`
    here: the innermost `default_matmul_precision` scope's, else the global setting's."""
    pair = _precision_in_force.value
    return pair if pair is not None else _global_precision


def default_matmul_precision(precision):
    """`with aotkit.default_matmul_precision("default"):` traces the dots and convolutions
    that give no `precision=` of their own at that precision, in JAX's spellings (as
    `jax.default_matmul_precision`); None is the global setting as it stands at the scope's
    start. Also a decorator. Scopes nest, end with their block (an exception included) and
    hold only for the thread that entered them."""
    pair = precision_pair("aotkit.default_matmul_precision", precision)
    return _precision_scope(pair)


@contextlib.contextmanager
def _precision_scope(pair: tuple[str, str] | None):
    with _precision_in_force(pair if pair is not None else _global_precision):
        yield


_DOC = {
    "x64_scalars": "Python scalar arguments are 64-bit (int64, float64, complex128)",
    "jit_cache_size": "entries kept per function by the jit caches",
    "traceback_filtering": "aotkit's own frames are removed from the tracebacks of its errors",
    "default_matmul_precision": "precision of dots and convolutions without precision=",
    "default_backend": "the backend compiles use when given none (None: the accelerator, else cpu)",
}
_values: dict[str, object] = {
    "x64_scalars": _env_flag("AOTKIT_X64_SCALARS"),
    "jit_cache_size": _env_int("AOTKIT_JIT_CACHE_SIZE", 128),
    "traceback_filtering": _env_flag("AOTKIT_TRACEBACK_FILTERING", True),
    "default_matmul_precision": _env_precision("AOTKIT_DEFAULT_MATMUL_PRECISION"),
    # None: AOTKIT_BACKEND, read when a compile asks (aotkit.backends.default_name).
    "default_backend": None,
}
_TYPES = {
    "x64_scalars": bool,
    "jit_cache_size": int,
    "traceback_filtering": bool,
    "default_matmul_precision": "precision",
    "default_backend": "backend",
}
_global_precision = precision_pair("", _values["default_matmul_precision"])
_precision_in_force.set_global(_global_precision)
# Bumped by every update: caches keyed on settings compare it instead of the values.
version = 0


def get(name: str):
    """The current value of setting `name`."""
    _check_name(name)
    return _values[name]


def update(name: str, value) -> None:
    """Sets `name` (see the module docstring) for the whole process."""
    _check_name(name)
    if _TYPES[name] is bool and not isinstance(value, bool):
        raise TypeError(f"aotkit.config.update: {name} takes True or False, got {value!r}")
    if _TYPES[name] is int and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise TypeError(f"aotkit.config.update: {name} takes a positive int, got {value!r}")
    if _TYPES[name] == "backend" and not (value is None or isinstance(value, str) and value):
        raise TypeError(
            f"aotkit.config.update: {name} takes a backend name such as 'cpu' or 'tpu', or None "
            f"for the accelerator JAX picks (else cpu), got {value!r}"
        )
    global version, _global_precision
    if _TYPES[name] == "precision":
        # None is aotkit's own default, float32-faithful.
        value = "highest" if value is None else value
        _global_precision = precision_pair(f"aotkit.config.update({name!r})", value)
        _precision_in_force.set_global(_global_precision)
    _values[name] = value
    version += 1


def _check_name(name) -> None:
    if name not in _values:
        raise ValueError(
            f"aotkit.config: unknown setting {name!r}; settings: "
            + ", ".join(f"{k} ({v})" for k, v in _DOC.items())
        )
