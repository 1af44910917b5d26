"""The persistent compilation cache (aotkit/cache.py).

Each test gets a folder of its own (`aotkit.cache.configure(dir=...)`); the session's
folder (tests/conftest.py) is restored after it. Functions are rebuilt by a factory for
each compile: a new function object has empty in-memory jit caches, so its compile reaches
the persistent cache, as a new process would. Counters are process-wide, so tests compare
them before and after.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

import aotkit
import aotkit.numpy as anp
from aotkit import artifacts, backends, cache
from aotkit.errors import CacheWarning

ROOT = Path(__file__).resolve().parents[1]
X = np.linspace(-1, 1, 8, dtype=np.float32)


def make(scale: float = 2.0):
    """A new function object with the same code each time (so the same module)."""

    def f(x):
        return anp.sin(x) * scale + 1.0

    return f


@pytest.fixture
def cache_dir(tmp_path):
    folder = tmp_path / "cache"
    cache.configure(dir=folder)
    yield folder
    cache.configure(dir=None, max_bytes=cache.DEFAULT_MAX_BYTES)


def entries(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.aotx")) if folder.exists() else []


def temporaries(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.name.startswith(".")) if folder.exists() else []


def delta(before: cache.CacheStats) -> tuple[int, int]:
    now = cache.stats()
    return now.hits - before.hits, now.misses - before.misses


def expected(scale: float = 2.0):
    return np.sin(X) * np.float32(scale) + np.float32(1)


# --- hits and keys ---------------------------------------------------------------------------


def test_second_compile_is_a_persistent_hit(cache_dir):
    before = cache.stats()
    first = aotkit.jit(make())
    np.testing.assert_allclose(first(X), expected(), rtol=1e-6)
    assert first.cache_info().persistent_hits == 0
    assert delta(before) == (0, 1)
    assert len(entries(cache_dir)) == 1
    second = aotkit.jit(make())
    np.testing.assert_allclose(second(X), expected(), rtol=1e-6)
    info = second.cache_info()
    assert (info.compiles, info.persistent_hits) == (1, 1)
    assert delta(before) == (1, 1)
    stats = cache.stats()
    assert (stats.entries, stats.directory) == (1, str(cache_dir))
    assert stats.bytes == entries(cache_dir)[0].stat().st_size


def test_compiled_origin_says_where_the_executable_came_from(cache_dir):
    spec = aotkit.spec("f32[8]")
    assert aotkit.jit(make()).lower(spec).compile().origin == "compiled"
    assert aotkit.jit(make()).lower(spec).compile().origin == "persistent cache"


def lowered_of(fn, *, donate=(), spec="f32[8]"):
    return aotkit.jit(fn, donate_argnums=donate).lower(aotkit.spec(spec))


def test_locations_do_not_change_the_key(cache_dir):
    def g(x):
        return anp.sin(x) * 2.0 + 1.0

    cpu = backends.get("cpu")
    here = lowered_of(make())
    elsewhere = lowered_of(g)
    assert here.as_text(debug_info=True) != elsewhere.as_text(debug_info=True)
    assert here.as_text().replace("@f", "@g") == elsewhere.as_text()
    assert cache.key(here, cpu, None) != cache.key(elsewhere, cpu, None)  # @f vs @g

    # The function's name is part of the module; its locations are not.
    def h(x):
        return anp.sin(x) * 2.0 + 1.0

    h.__name__ = h.__qualname__ = "f"
    assert cache.key(here, cpu, None) == cache.key(lowered_of(h), cpu, None)


def test_options_donation_and_module_change_the_key(cache_dir):
    cpu = backends.get("cpu")
    base = cache.key(lowered_of(make()), cpu, None)
    assert re.fullmatch(r"[0-9a-f]{64}", base)
    assert cache.key(lowered_of(make()), cpu, {"xla_cpu_enable_fast_math": True}) != base
    assert cache.key(lowered_of(make(), donate=(0,)), cpu, None) != base
    assert cache.key(lowered_of(make(3.0)), cpu, None) != base
    assert cache.key(lowered_of(make(), spec="f32[9]"), cpu, None) != base


def test_the_specs_of_pruned_leaves_change_the_key(cache_dir):
    """jax.jit's module leaves out an unused argument, so two programs that differ only in
    it have one module; the executable takes it, so they have two keys (and no entry is
    found written for another signature)."""
    import jax.numpy as jnp

    def lowered(unused_size: int):
        def f(x, unused):  # a new function each time: no jit shares its compile cache
            return jnp.tanh(x)

        unused = np.ones(unused_size, np.float32)
        return aotkit.jit(f, frontend="jax").lower(np.ones(4, np.float32), unused)

    small, large = lowered(3), lowered(5)
    assert small._program.pruned == large._program.pruned == (1,)
    assert small.as_text() == large.as_text()
    cpu = backends.get("cpu")
    assert cache.key(small, cpu, None) != cache.key(large, cpu, None)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no entry written for another signature
        origins = [lowered(n).compile().origin for n in (3, 5, 3, 5)]
    assert origins == ["compiled", "compiled", "persistent cache", "persistent cache"]
    assert len(entries(cache_dir)) == 2


def test_xla_flags_change_the_key(cache_dir, monkeypatch):
    # XLA_FLAGS change what XLA compiles (fast math, the instruction set): an executable
    # compiled under other flags is not this one.
    cpu = backends.get("cpu")
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    base = cache.key(lowered_of(make()), cpu, None)
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_enable_fast_math=true")
    assert cache.key(lowered_of(make()), cpu, None) != base


def test_the_interpreter_is_not_cached(cache_dir):
    before = cache.stats()
    out = aotkit.jit(make(), backend="interpreter")(X)
    np.testing.assert_allclose(out, expected(), rtol=1e-6)
    assert cache.key(lowered_of(make()), backends.get("interpreter"), None) is None
    assert delta(before) == (0, 0) and entries(cache_dir) == []


# --- corrupt entries: deleted, compiled again, with a warning ---------------------------------


def first_entry(cache_dir: Path) -> Path:
    aotkit.jit(make())(X)
    (path,) = entries(cache_dir)
    return path


def recompiles_with_warning(cache_dir: Path, message: str):
    before = cache.stats()
    with pytest.warns(CacheWarning, match=message) as record:
        jitted = aotkit.jit(make())
        out = jitted(X)
    # Each warning points at the user's line (here), not into aotkit.
    assert {w.filename for w in record if issubclass(w.category, CacheWarning)} == {__file__}
    np.testing.assert_allclose(out, expected(), rtol=1e-6)
    assert jitted.cache_info().persistent_hits == 0
    assert delta(before) == (0, 1)
    # The entry was written again, whole: the next compile hits it.
    again = aotkit.jit(make())
    again(X)
    assert again.cache_info().persistent_hits == 1


def test_corrupted_entry(cache_dir):
    path = first_entry(cache_dir)
    data = path.read_bytes()
    middle = len(data) - 2000
    path.write_bytes(data[:middle] + bytes([data[middle] ^ 1]) + data[middle + 1 :])
    recompiles_with_warning(
        cache_dir,
        rf"^aotkit cache: entry: {re.escape(str(path))}: section 'executable' is corrupted "
        r"\(its SHA-256 does not match the header's\); deleted it; compiling again$",
    )


def test_an_entry_whose_reading_fails_otherwise_is_deleted_not_kept(cache_dir, monkeypatch):
    """An entry whose header a reader bug could not read (a ZeroDivisionError escaped the
    symbolic header's parser) stayed in place, and every later run of the program failed
    at its own call line; whatever reading an entry raises, it is deleted and compiled
    again."""
    path = first_entry(cache_dir)
    unpack = aotkit.artifacts.unpack

    def broken(*args, **kwargs):  # (the entry read once; the one written again reads)
        monkeypatch.setattr(aotkit.artifacts, "unpack", unpack)
        raise ZeroDivisionError("integer modulo by zero")

    monkeypatch.setattr(aotkit.artifacts, "unpack", broken)
    recompiles_with_warning(
        cache_dir,
        rf"^aotkit cache: entry {re.escape(str(path))} does not load \(integer modulo by "
        r"zero\); deleted it; compiling again$",
    )


def test_an_empty_entry_is_deleted_and_says_so(cache_dir):
    path = first_entry(cache_dir)
    path.write_bytes(b"")
    # (it ended with an artifact's advice: "pass a file written by Compiled.save ...")
    recompiles_with_warning(
        cache_dir,
        rf"^aotkit cache: entry: {re.escape(str(path))} is empty, not an aotkit artifact; "
        r"deleted it; compiling again$",
    )


def test_truncated_entry(cache_dir):
    path = first_entry(cache_dir)
    data = path.read_bytes()
    path.write_bytes(data[:1000])
    recompiles_with_warning(
        cache_dir,
        rf"^aotkit cache: entry: {re.escape(str(path))} is truncated: 1000 bytes, but its "
        rf"sections end at byte {len(data)}; deleted it; compiling again$",
    )


def test_an_artifact_put_at_an_entry_name_holds_no_key(cache_dir):
    path = first_entry(cache_dir)
    other = aotkit.lower(lambda x: x + 1.0, aotkit.spec("f32[3]")).compile()
    path.write_bytes(other.serialize())
    recompiles_with_warning(
        cache_dir,
        rf"^aotkit cache: entry {re.escape(str(path))} holds no key, not the one its name says "
        r"\(it was copied or renamed there from another program or target\); deleted it; "
        r"compiling again$",
    )


def test_entry_of_another_signature(cache_dir):
    # The key checks out (the header was rewritten with it): the signature check still holds.
    path = first_entry(cache_dir)
    other = aotkit.lower(lambda x: x + 1.0, aotkit.spec("f32[3]")).compile()
    art = artifacts.unpack(other.serialize())
    header = {k: v for k, v in art.header.items() if k != "sections"}
    header[artifacts.CACHE_KEY] = path.stem
    path.write_bytes(artifacts.pack(header, {n: bytes(v) for n, v in art.sections.items()}))
    recompiles_with_warning(
        cache_dir,
        rf"^aotkit cache: entry {re.escape(str(path))} was written for another signature or "
        r"backend than its key says; deleted it; compiling again$",
    )


def test_an_entry_holds_the_key_it_is_stored_under(cache_dir):
    path = first_entry(cache_dir)
    header = artifacts.unpack(path.read_bytes()).header
    assert header[artifacts.CACHE_KEY] == path.stem
    assert re.fullmatch(r"[0-9a-f]{64}", path.stem)


def test_an_entry_of_another_program_of_the_same_signature_is_a_miss(cache_dir):
    # In one process: `x * 100`'s entry replaced by `x + 1`'s (the same f32[4] signature).
    x = np.arange(4, dtype=np.float32)
    aotkit.jit(lambda x: x + 1.0)(x)
    (plus,) = entries(cache_dir)
    aotkit.jit(lambda x: x * 100.0)(x)
    (times,) = set(entries(cache_dir)) - {plus}
    times.write_bytes(plus.read_bytes())
    before = cache.stats()
    with pytest.warns(CacheWarning) as record:
        jitted = aotkit.jit(lambda x: x * 100.0)
        out = jitted(x)
    (warning,) = [w for w in record if issubclass(w.category, CacheWarning)]
    assert str(warning.message) == (
        f"aotkit cache: entry {times} holds the key {plus.stem}, not the one its name says "
        "(it was copied or renamed there from another program or target); deleted it; "
        "compiling again"
    )
    np.testing.assert_array_equal(out, x * np.float32(100))
    assert np.asarray(out).dtype == np.float32
    assert delta(before) == (0, 1) and jitted.cache_info().persistent_hits == 0
    # The entry was written again, its own: the next compile hits it, with the right values.
    assert artifacts.unpack(times.read_bytes()).header[artifacts.CACHE_KEY] == times.stem
    again = aotkit.jit(lambda x: x * 100.0)
    np.testing.assert_array_equal(again(x), x * np.float32(100))
    assert again.cache_info().persistent_hits == 1


def test_a_bad_cache_key_field_is_refused(cache_dir):
    path = first_entry(cache_dir)
    art = artifacts.unpack(path.read_bytes())
    header = {k: v for k, v in art.header.items() if k != "sections"}
    header[artifacts.CACHE_KEY] = "../../etc"
    forged = artifacts.pack(header, {n: bytes(v) for n, v in art.sections.items()})
    with pytest.raises(
        aotkit.ArtifactError,
        match=r"^aotkit.load: <bytes>: header field 'cache_key' is \"../../etc\", not a cache "
        r"key \(64 hexadecimal digits\); the file is not one aotkit wrote",
    ):
        aotkit.load(forged)


def test_entry_whose_executable_does_not_load(cache_dir):
    path = first_entry(cache_dir)
    art = artifacts.unpack(path.read_bytes())
    header = {k: v for k, v in art.header.items() if k != "sections"}
    sections = {n: bytes(v) for n, v in art.sections.items()}
    sections["executable"] = b"garbage"
    path.write_bytes(artifacts.pack(header, sections))
    recompiles_with_warning(
        cache_dir,
        rf"^aotkit cache: entry {re.escape(str(path))} does not load \(backend 'cpu' could not "
        r"load the serialized executable of 'f': .*\); deleted it; compiling again$",
    )


def test_an_entry_that_cannot_be_written_warns_and_runs(cache_dir, monkeypatch):
    def fail(lowered, platform=None):
        raise RuntimeError("boom")

    monkeypatch.setattr(artifacts, "portable_artifact", fail)
    with pytest.warns(CacheWarning, match=(
        r"^aotkit cache: cannot store 'f' \(RuntimeError: boom\); it stays uncached$"
    )):  # fmt: skip
        out = aotkit.jit(make())(X)
    np.testing.assert_allclose(out, expected(), rtol=1e-6)
    assert entries(cache_dir) == []


# --- folders: unwritable, off, defaults, size cap ---------------------------------------------


def test_unwritable_folder_warns_once_and_runs_uncached(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    folder = blocker / "cache"
    cache.configure(dir=folder)
    try:
        with pytest.warns(CacheWarning, match=(
            rf"^aotkit cache: cannot write to {re.escape(str(folder))} \(Not a directory\); "
            r"running without the persistent cache: set AOTKIT_CACHE_DIR to a writable folder, "
            r"or AOTKIT_CACHE_DIR=off$"
        )) as record:  # fmt: skip
            np.testing.assert_allclose(aotkit.jit(make())(X), expected(), rtol=1e-6)
            np.testing.assert_allclose(aotkit.jit(make(3.0))(X), expected(3.0), rtol=1e-6)
        assert [w.filename for w in record if issubclass(w.category, CacheWarning)] == [__file__]
        assert cache.key(lowered_of(make()), backends.get("cpu"), None) is None
    finally:
        cache.configure(dir=None)


def test_off(tmp_path, monkeypatch):
    monkeypatch.setenv("AOTKIT_CACHE_DIR", "off")
    cache.configure(dir=None)
    assert cache.directory() is None
    before = cache.stats()
    aotkit.jit(make())(X)
    assert delta(before) == (0, 0)
    assert cache.stats().directory is None and cache.stats().entries == 0
    monkeypatch.setenv("AOTKIT_CACHE_DIR", str(tmp_path))
    assert cache.directory() == tmp_path  # read at each compile
    cache.configure(dir="off")
    try:
        assert cache.directory() is None
    finally:
        cache.configure(dir=None)


def test_default_folders(monkeypatch, tmp_path):
    monkeypatch.delenv("AOTKIT_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache.directory() == tmp_path / "xdg" / "aotkit"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/ignored")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache.directory() == tmp_path / "home" / ".cache" / "aotkit"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert cache.directory() == tmp_path / "home" / ".cache" / "aotkit"
    monkeypatch.setenv("AOTKIT_CACHE_DIR", "~/elsewhere")
    assert cache.directory() == tmp_path / "home" / "elsewhere"


def test_configure_errors():
    with pytest.raises(ValueError, match=(
        r"^aotkit.cache.configure: max_bytes=-1; give a byte count >= 0, e.g. 2 << 30 for "
        r"2 GiB$"
    )):  # fmt: skip
        cache.configure(max_bytes=-1)
    with pytest.raises(ValueError, match=r"^aotkit.cache.configure: max_bytes=True; "):
        cache.configure(max_bytes=True)
    with pytest.raises(TypeError, match=(
        r"^aotkit.cache.configure: dir=3; give a folder path, 'off', or None for the default "
        r"\(\$AOTKIT_CACHE_DIR, else \$XDG_CACHE_HOME/aotkit, else ~/.cache/aotkit\)$"
    )):  # fmt: skip
        cache.configure(dir=3)


def test_least_recently_used_entries_go_first(cache_dir):
    spec = aotkit.spec("f32[8]")
    aotkit.jit(make(2.0)).lower(spec).compile()
    (a,) = entries(cache_dir)
    aotkit.jit(make(3.0)).lower(spec).compile()
    (b,) = [p for p in entries(cache_dir) if p != a]
    now = time.time()
    os.utime(a, (now - 100, now - 100))
    os.utime(b, (now - 50, now - 50))
    assert aotkit.jit(make(2.0)).lower(spec).compile().origin == "persistent cache"  # a: used
    size = a.stat().st_size + b.stat().st_size
    cache.configure(max_bytes=size + size // 4)
    aotkit.jit(make(4.0)).lower(spec).compile()
    left = entries(cache_dir)
    assert a in left and b not in left and len(left) == 2
    assert cache.stats().bytes <= size + size // 4


def test_entries_larger_than_the_cap_are_not_written(cache_dir):
    cache.configure(max_bytes=100)
    aotkit.jit(make())(X)
    assert entries(cache_dir) == []


def test_clear(cache_dir):
    aotkit.jit(make())(X)
    (cache_dir / f".{'0' * 64}.aotx.left.tmp").write_bytes(b"partial")
    assert cache.stats().entries == 1
    cache.clear()
    assert cache.stats().entries == 0
    assert [p.name for p in cache_dir.iterdir()] == [cache.TAG]  # the folder stays the cache's


# --- processes: killed writers, concurrent writers ---------------------------------------------

KILLED_WRITER = """
import os, signal, sys
import numpy as np
import aotkit, aotkit.numpy as anp

real_fdopen = os.fdopen

class DiesHalfway:
    def __init__(self, f):
        self.f = f
    def __enter__(self):
        return self
    def __exit__(self, *exc):
        return False
    def write(self, data):
        self.f.write(data[: len(data) // 2])
        self.f.flush()
        os.kill(os.getpid(), signal.SIGKILL)

def fdopen(fd, mode="r", *args, **kwargs):
    f = real_fdopen(fd, mode, *args, **kwargs)
    return DiesHalfway(f) if "w" in mode else f

os.fdopen = fdopen

def f(x):
    return anp.sin(x) * 2.0 + 1.0

aotkit.jit(f)(np.linspace(-1, 1, 8, dtype=np.float32))
print("not killed")
"""


def child_env(folder: Path) -> dict:
    return {**os.environ, "AOTKIT_CACHE_DIR": str(folder)}


def test_a_writer_killed_mid_write_leaves_a_working_cache(cache_dir):
    proc = subprocess.run(
        [sys.executable, "-c", KILLED_WRITER],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=child_env(cache_dir),
        timeout=600,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert entries(cache_dir) == []
    (partial,) = temporaries(cache_dir)
    assert partial.stat().st_size > 0
    before = cache.stats()
    jitted = aotkit.jit(make())
    np.testing.assert_allclose(jitted(X), expected(), rtol=1e-6)
    assert delta(before) == (0, 1) and len(entries(cache_dir)) == 1
    assert cache.stats().entries == 1  # the partial file is no entry
    # An hour later, the next write sweeps the partial file away.
    old = time.time() - cache.STALE_TMP_S - 60
    os.utime(partial, (old, old))
    aotkit.jit(make(3.0))(X)
    assert temporaries(cache_dir) == []
    again = aotkit.jit(make())
    again(X)
    assert again.cache_info().persistent_hits == 1


RACER = """
import json, os, sys, time
import numpy as np
import aotkit, aotkit.numpy as anp

go = sys.argv[1]
while not os.path.exists(go):
    time.sleep(0.01)

def chain(x):
    z = x
    for _ in range(150):
        z = anp.sin(z) * 1.01 + x
    return z

jitted = aotkit.jit(chain, autograph=False)  # as in the parent: its source is a file
out = jitted(np.linspace(-1, 1, 64, dtype=np.float32))
print(json.dumps({"out": np.asarray(out).tolist(), "hits": jitted.cache_info().persistent_hits}))
"""


def test_four_processes_compiling_the_same_key_at_once(cache_dir, tmp_path):
    go = tmp_path / "go"
    racers = [
        subprocess.Popen(
            [sys.executable, "-c", RACER, str(go)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
            env=child_env(cache_dir),
        )
        for _ in range(4)
    ]
    time.sleep(0.5)
    go.write_text("")
    results = []
    for racer in racers:
        out, err = racer.communicate(timeout=600)
        assert racer.returncode == 0, err
        assert "CacheWarning" not in err, err
        results.append(json.loads(out))
    assert all(r["out"] == results[0]["out"] for r in results)
    assert len(entries(cache_dir)) == 1 and temporaries(cache_dir) == []
    artifacts.unpack(entries(cache_dir)[0].read_bytes())  # one valid entry
    # This process reads it too: the same function, written here (locations differ).
    jitted = aotkit.jit(chain, autograph=False)
    np.testing.assert_allclose(
        np.asarray(jitted(np.linspace(-1, 1, 64, dtype=np.float32))), results[0]["out"]
    )
    assert jitted.cache_info().persistent_hits == 1


def chain(x):
    z = x
    for _ in range(150):
        z = anp.sin(z) * 1.01 + x
    return z


SAME_SIGNATURE = """
import json, sys, warnings
import numpy as np
import aotkit

programs = {"plus": lambda x: x + 1, "times": lambda x: x * 100}
jitted = aotkit.jit(programs[sys.argv[1]])
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    out = jitted(np.arange(4, dtype=np.float32))
print(json.dumps({
    "out": np.asarray(out).tolist(),
    "dtype": str(np.asarray(out).dtype),
    "hits": jitted.cache_info().persistent_hits,
    "warnings": [f"{w.category.__name__}: {w.message}" for w in caught],
}))
"""


def run_same_signature(cache_dir: Path, program: str) -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", SAME_SIGNATURE, program],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=child_env(cache_dir),
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_an_entry_copied_over_another_programs_is_a_miss_in_a_fresh_process(cache_dir):
    # Issue 43.3: two programs of one signature (f32[4]) cached by two processes; the first's
    # entry copied over the second's; a third process must still compute `x * 100`.
    x = np.arange(4, dtype=np.float32)
    assert run_same_signature(cache_dir, "plus")["out"] == (x + 1).tolist()
    (plus,) = entries(cache_dir)
    assert run_same_signature(cache_dir, "times")["out"] == (x * 100).tolist()
    (times,) = set(entries(cache_dir)) - {plus}
    times.write_bytes(plus.read_bytes())
    third = run_same_signature(cache_dir, "times")
    assert third["out"] == (x * 100).tolist() and third["dtype"] == "float32"
    assert third["hits"] == 0
    assert third["warnings"] == [
        f"CacheWarning: aotkit cache: entry {times} holds the key {plus.stem}, not the one its "
        "name says (it was copied or renamed there from another program or target); deleted "
        "it; compiling again"
    ]
    # Overwritten with its own executable: a fourth process hits it, with the right values.
    fourth = run_same_signature(cache_dir, "times")
    assert (fourth["out"], fourth["hits"], fourth["warnings"]) == ((x * 100).tolist(), 1, [])
    assert run_same_signature(cache_dir, "plus") == {
        "out": (x + 1).tolist(),
        "dtype": "float32",
        "hits": 1,
        "warnings": [],
    }


# --- the CLI ----------------------------------------------------------------------------------


def test_run_verbose_says_where_the_executable_came_from(cache_dir, tmp_path, capsys):
    from aotkit import cli

    user = tmp_path / "user.py"
    user.write_text("import aotkit.numpy as anp\n\ndef f(x):\n    return anp.cos(x) + 3.0\n")
    argv = ["run", f"{user}:f", "--shapes", "f32[4]", "-v"]
    assert cli.main(argv) == 0
    assert "(compiled by the backend: not cached yet)" in capsys.readouterr().err
    assert cli.main(argv) == 0
    err = capsys.readouterr().err
    assert "(executable loaded from the persistent cache, not compiled)" in err
    cache.configure(dir="off")
    assert cli.main(argv) == 0
    assert "(compiled by the backend: the persistent cache is off)" in capsys.readouterr().err
