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
"""

from __future__ import annotations

import os

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


_DOC = {
    "x64_scalars": "Python scalar arguments are 64-bit (int64, float64, complex128)",
    "jit_cache_size": "entries kept per function by the jit caches",
    "traceback_filtering": "aotkit's own frames are removed from the tracebacks of its errors",
}
_values: dict[str, object] = {
    "x64_scalars": _env_flag("AOTKIT_X64_SCALARS"),
    "jit_cache_size": _env_int("AOTKIT_JIT_CACHE_SIZE", 128),
    "traceback_filtering": _env_flag("AOTKIT_TRACEBACK_FILTERING", True),
}
_TYPES = {"x64_scalars": bool, "jit_cache_size": int, "traceback_filtering": bool}
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
    global version
    _values[name] = value
    version += 1


def _check_name(name) -> None:
    if name not in _values:
        raise ValueError(
            f"aotkit.config: unknown setting {name!r}; settings: "
            + ", ".join(f"{k} ({v})" for k, v in _DOC.items())
        )
